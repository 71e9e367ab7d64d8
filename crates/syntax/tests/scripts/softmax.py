@T.prim_func
def csr_softmax(a: T.handle, b: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices), "int32")
    A = T.sp.match_buffer(a, (I, J), "float32")
    B = T.sp.match_buffer(b, (I, J), "float32")
    TMP_max = T.sp.alloc_buffer((I,), "float32")
    TMP_sum = T.sp.alloc_buffer([I], "float32", scope="global")
    with T.sp.iteration([I], "S", "csr_softmax") as [i]:
        with T.sp.iteration([J], "R", "computer_max") as [j]:
            with T.init():
                TMP_max[i] = T.min_value("float32")
            TMP_max[i] = T.max(TMP_max[i], A[i, j])
        with T.sp.iteration([J], "R", "exp_sum") as [j]:
            with T.init():
                TMP_sum[i] = T.float32(0)
            TMP_sum[i] = TMP_sum[i] + T.exp(A[i, j] - TMP_max[i])
        with T.sp_iter([J], "S", "div") as j:
            B[i, j] = T.exp(A[i, j] - TMP_max[i]) / TMP_sum[i]
