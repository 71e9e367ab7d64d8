# RGCN on a heterogeneous graph stored per relation (R -> rows -> columns):
# Y[i, fo] = sum over r, j, fi of A[r, i, j] * W[r, fo, fi] * X[j, fi].
# A row may appear under several relations, so Y is zeroed by its own iteration first.
@T.prim_func
def rgcn_hetero(
    a: T.handle,
    w: T.handle,
    x: T.handle,
    y: T.handle,
    indptr_i: T.handle,
    indices_i: T.handle,
    indptr_j: T.handle,
    indices_j: T.handle,
    m: T.int32,
    n: T.int32,
    num_rels: T.int32,
    nnz_i: T.int32,
    nnz_j: T.int32,
    feat_in: T.int32,
    feat_out: T.int32,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    R = T.sp.dense_fixed(num_rels)
    I = T.sp.compressed_varied(R, (m, nnz_i), (indptr_i, indices_i), "int32")
    J = T.sp.compressed_varied(I, (n, nnz_j), (indptr_j, indices_j), "int32")
    I_detach = T.sp.dense_fixed(m)
    J_detach = T.sp.dense_fixed(n)
    F_in = T.sp.dense_fixed(feat_in)
    F_out = T.sp.dense_fixed(feat_out)
    A = T.sp.match_buffer(a, (R, I, J), "float32")
    W = T.sp.match_buffer(w, (R, F_out, F_in), "float32")
    X = T.sp.match_buffer(x, (J_detach, F_in), "float32")
    Y = T.sp.match_buffer(y, (I_detach, F_out), "float32")
    with T.sp.iteration([I_detach, F_out], "SS", "rgcn_hetero_zero") as [i, fo]:
        Y[i, fo] = T.float32(0)
    with T.sp.iteration([F_out, R, I, J, F_in], "SSSRR", "rgcn_hetero") as [fo, r, i, j, fi]:
        Y[i, fo] = Y[i, fo] + A[r, i, j] * W[r, fo, fi] * X[j, fi]
