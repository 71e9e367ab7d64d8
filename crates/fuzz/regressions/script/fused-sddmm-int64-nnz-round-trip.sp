# SDDMM iterating the stored elements of X as one fused loop over nnz (rows found by search).
@T.prim_func
def fused_sddmm(
    a: T.handle,
    b: T.handle,
    x: T.handle,
    y: T.handle,
    indptr: T.handle,
    indices: T.handle,
    m: T.int32,
    n: T.int32,
    feat_size: T.int32,
    nnz: T.int64,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices), "int32")
    J_detach = T.sp.dense_fixed(n)
    K = T.sp.dense_fixed(feat_size)
    A = T.sp.match_buffer(a, (I, K), "float32")
    B = T.sp.match_buffer(b, (J_detach, K), "float32")
    X = T.sp.match_buffer(x, (I, J), "float32")
    Y = T.sp.match_buffer(y, (I, J), "float32")
    with T.sp.iteration([T.sp.fuse(I, J), K], "SSR", "sddmm") as [i, j, k]:
        with T.init():
            Y[i, j] = T.float32(0)
        Y[i, j] = Y[i, j] + A[i, k] * B[j, k] * X[i, j]
