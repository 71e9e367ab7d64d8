@T.prim_func
def row_sums(a: T.handle, ptr: T.handle, y: T.handle, z: T.handle, m: T.int32, nnz: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (nnz,), "float32")
    P = T.match_buffer(ptr, (m + 2,), "int32")
    Y = T.match_buffer(y, (m + 1,), "float32")
    Z = T.match_buffer(z, (m + 1,), "int32")
    for i in T.parallel(1, m + 1, annotations={"schedule": "nnz_balanced", "indptr": "P"}):
        with T.block("visit"):
            vi = T.axis.spatial(m + 1, i)
            Z[vi] = Z[vi] + 1
        for j in T.serial(P[i + 1] - P[i]):
            with T.block("sum"):
                vi = T.axis.spatial(m + 1, i)
                vj = T.axis.reduce(P[i + 1] - P[i], j)
                Y[vi] = Y[vi] + A[P[vi] + vj]
