# Sparse convolution as gather-GEMM-scatter (the rulebook form of submanifold / generalized
# sparse convolution): for every kernel offset o, the pairs p of (input point, output point)
# the offset connects are listed in IN[o, p] / OUT[o, p]; the gathered input features times the
# offset's weights W[o] are scattered (added) into the output points' features. The output is
# zeroed first: its points are not iterators of the main iteration. The output channel is the
# outer (spatial) iterator: whoever computes a channel owns it for every output point, so the
# scatter needs no atomics.
@T.prim_func
def sparse_conv(
    x: T.handle,
    w: T.handle,
    y: T.handle,
    in_idx: T.handle,
    out_idx: T.handle,
    pair_ptr: T.handle,
    num_offsets: T.int32,
    max_pairs: T.int32,
    num_pairs: T.int32,
    n_in: T.int32,
    n_out: T.int32,
    cin: T.int32,
    cout: T.int32,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    OFF = T.sp.dense_fixed(num_offsets)
    P = T.sp.dense_varied(OFF, (max_pairs, num_pairs), pair_ptr, "int32")
    NI = T.sp.dense_fixed(n_in)
    NO = T.sp.dense_fixed(n_out)
    CI = T.sp.dense_fixed(cin)
    CO = T.sp.dense_fixed(cout)
    X = T.sp.match_buffer(x, (NI, CI), "float32")
    W = T.sp.match_buffer(w, (OFF, CI, CO), "float32")
    Y = T.sp.match_buffer(y, (NO, CO), "float32")
    IN = T.sp.match_buffer(in_idx, (OFF, P), "int32")
    OUT = T.sp.match_buffer(out_idx, (OFF, P), "int32")
    with T.sp.iteration([NO, CO], "SS", "conv_zero") as [i, co]:
        Y[i, co] = T.float32(0)
    with T.sp.iteration([CO, OFF, P, CI], "SRRR", "conv") as [co, o, p, ci]:
        Y[OUT[o, p], co] = Y[OUT[o, p], co] + X[IN[o, p], ci] * W[o, ci, co]
