@T.prim_func
def sched(a: T.handle, c: T.handle, m: T.int32, n: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (m, 8), "float32")
    C = T.match_buffer(c, (m,), "float32")
    for i in T.parallel(m):
        with T.block("row"):
            vi = T.axis.spatial(m, i)
            tmp = T.alloc_buffer((8,), "float32", scope="local")
            big = T.alloc_buffer((n,), "float32")
            for j in T.vectorized(8):
                tmp[j] = A[vi, j] * T.float32(2)
            for k in T.unroll(8):
                big[0] = big[0] + tmp[k]
            C[vi] = big[0]
    for i2 in T.parallel(m, annotations={"schedule": "static", "chunk": 16}):
        T.evaluate(T.atomic_add(C[i2], T.float32(1)))
    for i3 in T.parallel(m, annotations={"schedule": "guided"}):
        C[i3] = T.max(C[i3], T.float32(0.5))
