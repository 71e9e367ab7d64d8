# Masked SpGEMM: C = M ∘ (A · B), C stored on M's pattern (explicit zeros kept), all CSR. Row i
# walks A's row; for each of its columns kk, the columns stored in both B's row kk and M's row i
# (a merge of the two fibers) receive A[i, kk] · B[kk, j] · M[i, j] (issue 15).
@T.prim_func
def masked_spgemm(
    mask: T.handle,
    a: T.handle,
    b: T.handle,
    c: T.handle,
    m_indptr: T.handle,
    m_indices: T.handle,
    a_indptr: T.handle,
    a_indices: T.handle,
    b_indptr: T.handle,
    b_indices: T.handle,
    m: T.int32,
    k: T.int32,
    n: T.int32,
    nnz_m: T.int32,
    nnz_a: T.int32,
    nnz_b: T.int32,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    JM = T.sp.compressed_varied(I, (n, nnz_m), (m_indptr, m_indices))
    KA = T.sp.compressed_varied(I, (k, nnz_a), (a_indptr, a_indices))
    K = T.sp.dense_fixed(k)
    JB = T.sp.compressed_varied(K, (n, nnz_b), (b_indptr, b_indices))
    M = T.sp.match_buffer(mask, (I, JM), "float32")
    A = T.sp.match_buffer(a, (I, KA), "float32")
    B = T.sp.match_buffer(b, (K, JB), "float32")
    C = T.sp.match_buffer(c, (I, JM), "float32")
    with T.sp.iteration([I, JM], "SS", "masked_init") as [i, j]:
        C[i, j] = T.float32(0)
    with T.sp.iteration(
        [I, KA, T.sp.intersect(T.sp.attach(JB, KA), JM)], "SRS", "masked_spgemm"
    ) as [i_1, kk, j_1]:
        C[i_1, j_1] = C[i_1, j_1] + A[i_1, kk] * B[kk, j_1] * M[i_1, j_1]
