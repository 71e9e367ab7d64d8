# Sum of squares over the last two modes of a 3-D CSF tensor: B[i] = sum over j, k of A[i, j, k]^2.
@T.prim_func
def csf_square_sum(
    a: T.handle,
    b: T.handle,
    indptr_j: T.handle,
    indices_j: T.handle,
    indptr_k: T.handle,
    indices_k: T.handle,
    m: T.int32,
    n: T.int32,
    p: T.int32,
    nnz_j: T.int32,
    nnz_k: T.int32,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz_j), (indptr_j, indices_j), "int32")
    K = T.sp.compressed_varied(J, (p, nnz_k), (indptr_k, indices_k), "int32")
    A = T.sp.match_buffer(a, (I, J, K), "float32")
    B = T.sp.match_buffer(b, (I,), "float32")
    with T.sp.iteration([I, J, K], "SRR", "csf_square_sum") as [i, j, k]:
        with T.init():
            B[i] = T.float32(0)
        B[i] = B[i] + A[i, j, k] * A[i, j, k]
