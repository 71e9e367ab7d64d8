# RGCN on a homogeneous CSR graph whose edges carry an int32 relation type E[i, j]:
# Y[i, fo] = sum over j, fi of W[E[i, j], fo, fi] * X[j, fi].
@T.prim_func
def rgcn_homo(
    etype: T.handle,
    w: T.handle,
    x: T.handle,
    y: T.handle,
    indptr: T.handle,
    indices: T.handle,
    m: T.int32,
    n: T.int32,
    nnz: T.int32,
    num_rels: T.int32,
    feat_in: T.int32,
    feat_out: T.int32,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices), "int32")
    J_detach = T.sp.dense_fixed(n)
    R = T.sp.dense_fixed(num_rels)
    F_in = T.sp.dense_fixed(feat_in)
    F_out = T.sp.dense_fixed(feat_out)
    E = T.sp.match_buffer(etype, (I, J), "int32")
    W = T.sp.match_buffer(w, (R, F_out, F_in), "float32")
    X = T.sp.match_buffer(x, (J_detach, F_in), "float32")
    Y = T.sp.match_buffer(y, (I, F_out), "float32")
    T.assume_buffer_domain(E, (0, num_rels))
    with T.sp.iteration([I, F_out, J, F_in], "SSRR", "rgcn_homo") as [i, fo, j, fi]:
        with T.init():
            Y[i, fo] = T.float32(0)
        Y[i, fo] = Y[i, fo] + W[E[i, j], fo, fi] * X[j, fi]
