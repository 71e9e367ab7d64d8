# The product of block-sparse attention with the softmax made on the fly: O = P V, where the
# probability of a stored score S is exp(scale S - L) with L its row's statistic
# (formats/bsr_softmax_lse.sp), rounded as a stored probability would be to the type the loader
# names (`composable::bsr_softmax_mm`: the tensor cores' operand type, or none for float32).
# The iteration is bsrmm's (same names), so bsrmm's schedules apply; V's rows are grouped by
# block column as bsrmm's B.
@T.prim_func
def bsr_softmax_mm(
    s: T.handle,
    l: T.handle,
    v: T.handle,
    o: T.handle,
    indptr: T.handle,
    indices: T.handle,
    nb: T.int32,
    mb: T.int32,
    nnzb: T.int32,
    blk: T.int32,
    feat_size: T.int32,
    scale: T.float32,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(nb)
    J = T.sp.compressed_varied(I, (mb, nnzb), (indptr, indices), "int32")
    J_detach = T.sp.dense_fixed(mb)
    BI = T.sp.dense_fixed(blk)
    BJ = T.sp.dense_fixed(blk)
    F = T.sp.dense_fixed(feat_size)
    S = T.sp.match_buffer(s, (I, J, BI, BJ), "float32")
    L = T.sp.match_buffer(l, (I, BI), "float32")
    V = T.sp.match_buffer(v, (J_detach, BJ, F), "float32")
    O = T.sp.match_buffer(o, (I, BI, F), "float32")
    with T.sp.iteration([I, BI, BJ, F, J], "SSRSR", "bsrmm") as [i, bi, bj, f, j]:
        with T.init():
            O[i, bi, f] = T.float32(0)
        O[i, bi, f] = O[i, bi, f] + PROB * V[j, bj, f]
