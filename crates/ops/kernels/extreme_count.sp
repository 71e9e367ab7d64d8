# The backward of SpMM aggregating by max or min (csrmm_max, csrmm_min), step 1: C[i, k] counts
# the products A[i, j] * B[j, k] of row i equal to the forward's output E[i, k] (its ties).
# The iteration keeps csrmm's name, so that csrmm's schedules apply to it unchanged.
@T.prim_func
def extreme_count(
    a: T.handle,
    b: T.handle,
    e: T.handle,
    c: T.handle,
    indptr: T.handle,
    indices: T.handle,
    m: T.int32,
    n: T.int32,
    feat_size: T.int32,
    nnz: T.int32,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices), "int32")
    J_detach = T.sp.dense_fixed(n)
    K = T.sp.dense_fixed(feat_size)
    A = T.sp.match_buffer(a, (I, J), "float32")
    B = T.sp.match_buffer(b, (J_detach, K), "float32")
    E = T.sp.match_buffer(e, (I, K), "float32")
    C = T.sp.match_buffer(c, (I, K), "float32")
    with T.sp.iteration([I, J, K], "SRS", "csrmm") as [i, j, k]:
        with T.init():
            C[i, k] = T.float32(0)
        C[i, k] = C[i, k] + T.Select(A[i, j] * B[j, k] == E[i, k], T.float32(1), T.float32(0))
