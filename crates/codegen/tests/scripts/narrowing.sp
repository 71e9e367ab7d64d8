@T.prim_func
def narrow(a: T.handle, h: T.handle, b: T.handle, m: T.int32, n: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (m, 64), "float32")
    H = T.match_buffer(h, (m, 64), "float16")
    B = T.match_buffer(b, (m, 64), "bfloat16")
    for i in T.parallel(m):
        for k in T.vectorized(64):
            with T.block("h"):
                vi, vk = T.axis.remap("SS", [i, k])
                H[vi, vk] = A[vi, vk] * T.float32(0.5) + T.float32(1)
        for k1 in T.vectorized(n):
            with T.block("b"):
                vi = T.axis.spatial(m, i)
                vk = T.axis.spatial(64, k1)
                B[vi, vk] = A[vi, vk] - T.float32(1)
