# Row-wise softmax over the stored elements of a CSR matrix, in the numerically stable form:
# B[i, j] = exp(A[i, j] - max_i) / sum over the row of exp(A[i, j'] - max_i).
@T.prim_func
def sparse_softmax(
    a: T.handle,
    b: T.handle,
    indptr: T.handle,
    indices: T.handle,
    m: T.int32,
    n: T.int32,
    nnz: T.int32,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices), "int32")
    A = T.sp.match_buffer(a, (I, J), "float32")
    B = T.sp.match_buffer(b, (I, J), "float32")
    A_max = T.sp.alloc_buffer((I,), "float32")
    A_sum = T.sp.alloc_buffer((I,), "float32")
    with T.sp.iteration([I], "S", "sparse_softmax") as [i]:
        with T.sp.iteration([J], "R", "row_max") as [j]:
            with T.init():
                A_max[i] = T.min_value("float32")
            A_max[i] = T.max(A_max[i], A[i, j])
        with T.sp.iteration([J], "R", "row_sum") as [j]:
            with T.init():
                A_sum[i] = T.float32(0)
            A_sum[i] = A_sum[i] + T.exp(A[i, j] - A_max[i])
        with T.sp.iteration([J], "S", "row_div") as [j]:
            B[i, j] = T.exp(A[i, j] - A_max[i]) / A_sum[i]
