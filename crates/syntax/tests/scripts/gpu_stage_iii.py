@T.prim_func
def spmv_gpu(a: T.handle, x: T.handle, y: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "sparse_tir_level": 0})
    A = T.match_buffer(a, (nnz,), "float32")
    X = T.match_buffer(x, (n,), "float32")
    Y = T.match_buffer(y, (m,), "float32")
    P = T.match_buffer(indptr, (m + 1,), "int32")
    C = T.match_buffer(indices, (nnz,), "int32")
    Scratch = T.alloc_buffer((32,), "float32", scope="shared")
    for bx in T.thread_binding((m + 31) // 32, thread="blockIdx.x"):
        for tx in T.thread_binding(0, 32, thread="threadIdx.x", annotations={"pragma_unroll": 1}):
            with T.block("spmv"):
                vi = T.axis.spatial(m, bx * 32 + tx)
                T.where(bx * 32 + tx < m)
                T.reads(P[vi:vi + 2], A[0:nnz], X[0:n], C[0:nnz])
                T.writes(Y[vi])
                acc = T.alloc_buffer((1,), "float32", scope="local")
                acc[0] = T.float32(0)
                start: T.int32 = P[vi]
                end = P[vi + 1]
                for k in T.serial(start, end):
                    acc[0] = acc[0] + A[k] * X[C[k]]
                Y[vi] = acc[0]
    for i in range(m):
        for j in T.serial(2, 2 + n):
            for k in T.vectorized(T.min(n, 4)):
                for u in T.unroll(3, 10):
                    for p in T.parallel(4, annotations={"x": [1, "s"]}):
                        T.evaluate(T.atomic_add(Y[i], X[j]))
    for i2, j2 in T.grid(m, n):
        buf = T.allocate((4,), "float32", "local")
        if i2 < j2:
            buf[0] = T.float32(1.5)
        else:
            pass
        with T.block("blk2"):
            vi2 = T.axis.spatial((1, 1 + m), i2 + 1)
            vj2 = T.axis.reduce((0, n), j2)
            with T.init():
                pass
            Y[vi2 - 1] = T.let(t, X[vj2], t * t) + T.sqrt(T.float32(2)) + T.Cast("float32", T.int64(3)) + T.max_value("float32")
