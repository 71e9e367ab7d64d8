@T.prim_func
def hypergraph(a: T.handle, x: T.handle, y: T.handle, indptr: T.handle, indices: T.handle, indptr_t: T.handle, indices_t: T.handle, n: T.int32, m: T.int32, nnz: T.int32, f: T.int32):
    T.func_attr({"sparse_tir_level": 2})
    I = T.sp.dense_fixed(n)
    J = T.sp.compressed_varied(I, (m, nnz), (indptr, indices))
    J_detach = T.sp.dense_fixed(m)
    I_T = T.sp.compressed_varied(J_detach, (n, nnz), (indptr_t, indices_t))
    F = T.sp.dense_fixed(f)
    A = T.sp.match_buffer(a, (I, J), "float32")
    X = T.sp.match_buffer(x, (I, F), "float32")
    Y = T.sp.match_buffer(y, (I, F), "float32", default_value=T.float32(0))
    with T.sp.iteration([I, F, J, T.sp.attach(I_T, J)], "SSRR", "hyper") as [i, fi, j, t]:
        with T.init():
            Y[i, fi] = T.float32(0)
        Y[i, fi] = Y[i, fi] + A[i, j] * X[t, fi]
