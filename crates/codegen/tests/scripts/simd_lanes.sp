@T.prim_func
def simd_lanes(a: T.handle, x: T.handle, s: T.handle, si: T.handle, sd: T.handle, b: T.handle, m: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (m, 37), "float32")
    X = T.match_buffer(x, (m,), "float32")
    B = T.match_buffer(b, (m, 37), "int32")
    S = T.match_buffer(s, (m,), "float32")
    SI = T.match_buffer(si, (m,), "int32")
    SD = T.match_buffer(sd, (m,), "float64")
    for i in T.parallel(m):
        for k in T.vectorized(37, annotations={"simd_reduction": "+"}):
            with T.block("factored"):
                vi, vk = T.axis.remap("SR", [i, k])
                S[vi] = S[vi] + A[vi, vk] * A[vi, vk] * X[vi]
        for k2 in T.serial(32, annotations={"simd_reduction": "+", "lanes": 4}):
            with T.block("isum"):
                vi, vk = T.axis.remap("SR", [i, k2])
                SI[vi] = B[vi, vk] * B[vi, vk + 5] + SI[vi]
        for k3 in T.vectorized(31, annotations={"simd_reduction": "+"}):
            with T.block("dsum"):
                vi, vk = T.axis.remap("SR", [i, k3])
                SD[vi] = SD[vi] + T.Cast("float64", X[vi]) * T.Cast("float64", A[vi, vk + 3])
