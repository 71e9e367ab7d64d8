# Hyper-graph aggregation: vertex i gathers, over its incident hyperedges e, the features of
# the vertices of e: Y[i, f] = sum over e, v of H[i, e] * HT[e, v] * X[v, f]. The vertices of
# the current hyperedge are iterated with I_T attached to J (looked up by J's coordinate).
@T.prim_func
def hyper_gnn(
    h: T.handle,
    ht: T.handle,
    x: T.handle,
    y: T.handle,
    indptr: T.handle,
    indices: T.handle,
    indptr_t: T.handle,
    indices_t: T.handle,
    n_vertices: T.int32,
    n_edges: T.int32,
    nnz: T.int32,
    feat_size: T.int32,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(n_vertices)
    J = T.sp.compressed_varied(I, (n_edges, nnz), (indptr, indices), "int32")
    E = T.sp.dense_fixed(n_edges)
    I_T = T.sp.compressed_varied(E, (n_vertices, nnz), (indptr_t, indices_t), "int32")
    I_detach = T.sp.dense_fixed(n_vertices)
    F = T.sp.dense_fixed(feat_size)
    H = T.sp.match_buffer(h, (I, J), "float32")
    HT = T.sp.match_buffer(ht, (E, I_T), "float32")
    X = T.sp.match_buffer(x, (I_detach, F), "float32")
    Y = T.sp.match_buffer(y, (I, F), "float32")
    with T.sp.iteration([I, F, J, T.sp.attach(I_T, J)], "SSRR", "hyper_gnn") as [i, f, j, v]:
        with T.init():
            Y[i, f] = T.float32(0)
        Y[i, f] = Y[i, f] + H[i, j] * HT[j, v] * X[v, f]
