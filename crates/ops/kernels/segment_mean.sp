# Segment mean: B[i] = the mean of row i of a ragged array (rows of at most 100 elements);
# an empty row gives 0. Sums and counts live in intermediate buffers zeroed first.
@T.prim_func
def segment_mean(
    a: T.handle,
    b: T.handle,
    indptr: T.handle,
    m: T.int32,
    nnz: T.int32,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.dense_varied(I, (100, nnz), indptr, "int32")
    A = T.sp.match_buffer(a, (I, J), "float32")
    B = T.sp.match_buffer(b, (I,), "float32")
    S = T.sp.alloc_buffer((I,), "float32")
    N = T.sp.alloc_buffer((I,), "float32")
    with T.sp.iteration([I], "S", "segment_mean_zero") as [i]:
        S[i] = T.float32(0)
        N[i] = T.float32(0)
    with T.sp.iteration([I, J], "SR", "segment_mean_sum") as [i, j]:
        S[i] = S[i] + A[i, j]
        N[i] = N[i] + T.float32(1)
    with T.sp.iteration([I], "S", "segment_mean_div") as [i]:
        B[i] = S[i] / T.max(N[i], T.float32(1))
