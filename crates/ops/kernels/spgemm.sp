# SpGEMM: C = A · B with A (m × k), B (k × n) and C in CSR, Gustavson's row-by-row form: row i of
# C sums the rows of B selected by row i of A. C's structure is assembled by the kernel (issue 15).
@T.prim_func
def spgemm(
    a: T.handle,
    b: T.handle,
    c: T.handle,
    a_indptr: T.handle,
    a_indices: T.handle,
    b_indptr: T.handle,
    b_indices: T.handle,
    c_indptr: T.handle,
    c_indices: T.handle,
    m: T.int32,
    k: T.int32,
    n: T.int32,
    nnz_a: T.int32,
    nnz_b: T.int32,
    nnz_c: T.int32,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    KA = T.sp.compressed_varied(I, (k, nnz_a), (a_indptr, a_indices))
    K = T.sp.dense_fixed(k)
    JB = T.sp.compressed_varied(K, (n, nnz_b), (b_indptr, b_indices))
    JC = T.sp.compressed_varied(I, (n, nnz_c), (c_indptr, c_indices), assembled=True)
    A = T.sp.match_buffer(a, (I, KA), "float32")
    B = T.sp.match_buffer(b, (K, JB), "float32")
    C = T.sp.match_buffer(c, (I, JC), "float32")
    with T.sp.iteration([I, KA, T.sp.attach(JB, KA)], "SRS", "spgemm") as [i, kk, j]:
        C[i, j] = C[i, j] + A[i, kk] * B[kk, j]
