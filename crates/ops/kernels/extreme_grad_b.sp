# The backward of SpMM aggregating by max or min, step 3: the gradient of B over the transpose
# of A (AT[j, i] = A[i, j]), C[j, k] = sum over i of AT[j, i] * W[i, k] where AT[j, i] * B[j, k]
# equals the forward's output E[i, k] (W: the output's gradient over its tie count); the mask
# is a factor 1 or 0, as in extreme_grad_a.
# The iteration keeps csrmm's name, so that csrmm's schedules apply to it unchanged.
@T.prim_func
def extreme_grad_b(
    at: T.handle,
    b: T.handle,
    e: T.handle,
    w: T.handle,
    c: T.handle,
    indptr: T.handle,
    indices: T.handle,
    n: T.int32,
    m: T.int32,
    feat_size: T.int32,
    nnz: T.int32,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    J = T.sp.dense_fixed(n)
    I = T.sp.compressed_varied(J, (m, nnz), (indptr, indices), "int32")
    I_detach = T.sp.dense_fixed(m)
    K = T.sp.dense_fixed(feat_size)
    AT = T.sp.match_buffer(at, (J, I), "float32")
    B = T.sp.match_buffer(b, (J, K), "float32")
    E = T.sp.match_buffer(e, (I_detach, K), "float32")
    W = T.sp.match_buffer(w, (I_detach, K), "float32")
    C = T.sp.match_buffer(c, (J, K), "float32")
    with T.sp.iteration([J, I, K], "SRS", "csrmm") as [j, i, k]:
        with T.init():
            C[j, k] = T.float32(0)
        C[j, k] = C[j, k] + AT[j, i] * W[i, k] * T.Select(
            AT[j, i] * B[j, k] == E[i, k], T.float32(1), T.float32(0)
        )
