@T.prim_func
def vselect(a: T.handle, x: T.handle, y: T.handle, z: T.handle, w: T.handle, m: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (m, 64), "float32")
    X = T.match_buffer(x, (m,), "float32")
    Y = T.match_buffer(y, (m, 64), "float32")
    Z = T.match_buffer(z, (m, 64), "float32")
    W = T.match_buffer(w, (m, 64), "float32")
    for i in T.parallel(m):
        for k in T.vectorized(64):
            with T.block("relu_mask"):
                vi, vk = T.axis.remap("SS", [i, k])
                Y[vi, vk] = A[vi, vk] * T.Select(A[vi, vk] > X[vi], T.float32(1), T.float32(-2))
        for k1 in T.vectorized(64):
            with T.block("arith_branches"):
                vi, vk = T.axis.remap("SS", [i, k1])
                Z[vi, vk] = X[vi] * T.Select(
                    A[vi, vk] != X[vi] * T.float32(2), T.float32(-1), T.float32(2.5) * T.float32(2)
                )
        for k2 in T.vectorized(64):
            with T.block("guarded_load"):
                vi, vk = T.axis.remap("SS", [i, k2])
                W[vi, vk] = T.Select(A[vi, vk] <= X[vi], A[vi, vk] + T.float32(1), T.float32(0))
