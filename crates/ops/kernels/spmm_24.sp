# 2:4 structured sparse x dense: A is m x n with 2 stored elements in every group of 4 columns.
# Group g covers row g // (n // 4), columns 4 * (g % (n // 4)) + 0..4. C is zeroed first
# because its rows are not iterators of the main iteration.
@T.prim_func
def spmm_24(
    a: T.handle,
    b: T.handle,
    c: T.handle,
    indices: T.handle,
    m: T.int32,
    n: T.int32,
    feat_size: T.int32,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    G = T.sp.dense_fixed(m * (n // 4))
    J = T.sp.compressed_fixed(G, (4, 2), indices, "int32")
    I = T.sp.dense_fixed(m)
    K_detach = T.sp.dense_fixed(n)
    F = T.sp.dense_fixed(feat_size)
    A = T.sp.match_buffer(a, (G, J), "float32")
    B = T.sp.match_buffer(b, (K_detach, F), "float32")
    C = T.sp.match_buffer(c, (I, F), "float32")
    with T.sp.iteration([I, F], "SS", "spmm_24_zero") as [i, f]:
        C[i, f] = T.float32(0)
    with T.sp.iteration([G, J, F], "RRS", "spmm_24") as [g, j, f]:
        C[g // (n // 4), f] = C[g // (n // 4), f] + A[g, j] * B[4 * (g % (n // 4)) + j, f]
