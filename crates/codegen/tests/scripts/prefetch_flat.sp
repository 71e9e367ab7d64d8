@T.prim_func
def gather_rows(b: T.handle, ptr: T.handle, idx: T.handle, y: T.handle, m: T.int32, n: T.int32, nnz: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    B = T.match_buffer(b, (n, 24), "float32")
    P = T.match_buffer(ptr, (m + 1,), "int32")
    J = T.match_buffer(idx, (nnz,), "int32")
    Y = T.match_buffer(y, (nnz,), "float32")
    for i in T.serial(m):
        for j in T.serial(P[i + 1] - P[i], annotations={"prefetch": "B:2:flat"}):
            for k in T.serial(24):
                with T.block("g"):
                    vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                    Y[P[vi] + vj] = Y[P[vi] + vj] + B[J[P[vi] + vj], vk]
