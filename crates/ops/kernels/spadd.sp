# Sparse add: C = A + B over the union of A's and B's coordinates, all three CSR; C's structure
# is assembled by the kernel (issue 15).
@T.prim_func
def spadd(
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
    n: T.int32,
    nnz_a: T.int32,
    nnz_b: T.int32,
    nnz_c: T.int32,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    JA = T.sp.compressed_varied(I, (n, nnz_a), (a_indptr, a_indices))
    JB = T.sp.compressed_varied(I, (n, nnz_b), (b_indptr, b_indices))
    JC = T.sp.compressed_varied(I, (n, nnz_c), (c_indptr, c_indices), assembled=True)
    A = T.sp.match_buffer(a, (I, JA), "float32")
    B = T.sp.match_buffer(b, (I, JB), "float32")
    C = T.sp.match_buffer(c, (I, JC), "float32")
    with T.sp.iteration([I, T.sp.union(JA, JB)], "SS", "spadd") as [i, j]:
        C[i, j] = A[i, j] + B[i, j]
