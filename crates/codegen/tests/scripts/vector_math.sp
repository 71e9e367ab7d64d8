@T.prim_func
def vmath(a: T.handle, x: T.handle, e: T.handle, y: T.handle, s: T.handle, m: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (m, 64), "float32")
    X = T.match_buffer(x, (m,), "float32")
    E = T.match_buffer(e, (m, 64), "float32")
    Y = T.match_buffer(y, (m, 64), "float32")
    S = T.match_buffer(s, (m, 5), "float32")
    for i in T.parallel(m):
        for k in T.vectorized(64):
            with T.block("exp"):
                vi, vk = T.axis.remap("SS", [i, k])
                E[vi, vk] = T.exp(A[vi, vk] * X[vi]) / X[vi]
        for k1 in T.vectorized(64):
            with T.block("clamp"):
                vi, vk = T.axis.remap("SS", [i, k1])
                Y[vi, vk] = T.min(T.max(A[vi, vk], X[vi] - T.float32(3)), X[vi])
        for k2 in T.serial(64, annotations={"simd_reduction": "max"}):
            with T.block("rmax"):
                vi, vk = T.axis.remap("SR", [i, k2])
                S[vi, 0] = T.max(S[vi, 0], A[vi, vk])
        for k3 in T.serial(64, annotations={"simd_reduction": "min", "lanes": 4}):
            with T.block("rmin"):
                vi, vk = T.axis.remap("SR", [i, k3])
                S[vi, 1] = T.min(S[vi, 1], A[vi, vk] * X[vi])
        for k4 in T.serial(64, annotations={"simd_reduction": "+", "lanes": 8}):
            with T.block("rsum"):
                vi, vk = T.axis.remap("SR", [i, k4])
                S[vi, 2] = S[vi, 2] + T.exp(A[vi, vk] - X[vi])
        for k5 in T.serial(64, annotations={"simd_reduction": "max", "lanes": 64}):
            with T.block("rmax64"):
                vi, vk = T.axis.remap("SR", [i, k5])
                S[vi, 3] = T.max(A[vi, vk], S[vi, 3])
        for j6 in T.serial(4):
            for k6 in T.serial(16, annotations={"simd_reduction": "+"}):
                with T.block("rnest"):
                    vi = T.axis.spatial(m, i)
                    vj = T.axis.reduce(4, j6)
                    vk = T.axis.reduce(16, k6)
                    S[vi, 4] = S[vi, 4] + T.exp(A[vi, vj * 16 + vk] * X[vi])
