# SpMM aggregating by min: C[i, k] = min over row i's stored j of A[i, j] * B[j, k] (a GNN's
# min aggregation of messages); a row that stores nothing gives T.max_value("float32").
# The iteration keeps csrmm's name, so that csrmm's schedules apply to it unchanged.
@T.prim_func
def csrmm_min(
    a: T.handle,
    b: T.handle,
    c: T.handle,
    indptr: T.handle,
    indices: T.handle,
    m: T.int32,
    n: T.int32,
    feat_size: T.int32,
    nnz: T.int32,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices), "int32")
    J_detach = T.sp.dense_fixed(n)
    K = T.sp.dense_fixed(feat_size)
    A = T.sp.match_buffer(a, (I, J), "float32")
    B = T.sp.match_buffer(b, (J_detach, K), "float32")
    C = T.sp.match_buffer(c, (I, K), "float32")
    with T.sp.iteration([I, J, K], "SRS", "csrmm") as [i, j, k]:
        with T.init():
            C[i, k] = T.max_value("float32")
        C[i, k] = T.min(C[i, k], A[i, j] * B[j, k])
