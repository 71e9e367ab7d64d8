@T.prim_func
def merge(
    a_indptr: T.handle,
    a_indices: T.handle,
    b_indptr: T.handle,
    b_indices: T.handle,
    c_count: T.handle,
    m: T.int32,
    nnz_a: T.int32,
    nnz_b: T.int32,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 0})
    AP = T.match_buffer(a_indptr, (m + 1,), "int32")
    AI = T.match_buffer(a_indices, (nnz_a,), "int32")
    BP = T.match_buffer(b_indptr, (m + 1,), "int32")
    BI = T.match_buffer(b_indices, (nnz_b,), "int32")
    CC = T.match_buffer(c_count, (m,), "int32")
    for i in T.parallel(m):
        pa = T.allocate((1,), "int32", "local")
        pb = T.allocate((1,), "int32", "local")
        pa[0] = AP[i]
        pb[0] = BP[i]
        CC[i] = 0
        while pa[0] < AP[i + 1] and pb[0] < BP[i + 1]:
            if AI[pa[0]] == BI[pb[0]]:
                CC[i] = CC[i] + 1
                pa[0] = pa[0] + 1
                pb[0] = pb[0] + 1
            elif AI[pa[0]] < BI[pb[0]]:
                pa[0] = pa[0] + 1
            else:
                pb[0] = pb[0] + 1
