@T.prim_func
def vector_loops(a: T.handle, x: T.handle, b: T.handle, y: T.handle, d: T.handle, g: T.handle, idx: T.handle, z: T.handle, r: T.handle, m: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (m, 32), "float32")
    X = T.match_buffer(x, (m,), "float32")
    B = T.match_buffer(b, (m, 32), "float32")
    Y = T.match_buffer(y, (m, 32), "float32")
    D = T.match_buffer(d, (m, 16), "float64")
    G = T.match_buffer(g, (m, 32), "float32")
    IDX = T.match_buffer(idx, (32,), "int32")
    Z = T.match_buffer(z, (m, 20), "float32")
    R = T.match_buffer(r, (m, 16), "float32")
    for i in T.parallel(m):
        for k in T.vectorized(32):
            with T.block("axpy"):
                vi, vk = T.axis.remap("SS", [i, k])
                Y[vi, vk] = A[vi, vk] * X[vi] - B[vi, vk] / T.float32(2)
        for k2 in T.vectorized(16):
            with T.block("scale64"):
                vi, vk = T.axis.remap("SS", [i, k2])
                D[vi, vk] = -D[vi, vk] * T.float64(3) + T.Cast("float64", X[vi])
        for k3 in T.vectorized(32):
            with T.block("gather"):
                vi, vk = T.axis.remap("SS", [i, k3])
                G[vi, vk] = A[vi, IDX[vk]]
        for k4 in T.vectorized(20):
            with T.block("odd"):
                vi, vk = T.axis.remap("SS", [i, k4])
                Z[vi, vk] = A[vi, vk] + T.float32(1)
        for j in T.serial(3):
            for k5 in T.vectorized(16):
                with T.block("acc"):
                    vi, vj, vk = T.axis.remap("SRS", [i, j, k5])
                    with T.init():
                        R[vi, vk] = X[vi]
                    R[vi, vk] = R[vi, vk] + A[vi, vj * 8 + vk]
