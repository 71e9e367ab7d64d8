@T.prim_func
def vexp(a: T.handle, e: T.handle, n: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (n, 64), "float32")
    E = T.match_buffer(e, (n, 64), "float32")
    for i in T.parallel(n):
        for k in T.vectorized(64):
            with T.block("exp"):
                vi, vk = T.axis.remap("SS", [i, k])
                E[vi, vk] = T.exp(A[vi, vk])
