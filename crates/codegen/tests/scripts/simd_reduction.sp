@T.prim_func
def simd_red(a: T.handle, b: T.handle, ptr: T.handle, s: T.handle, mx: T.handle, mn: T.handle, si: T.handle, sp: T.handle, m: T.int32, n: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (m, n), "float32")
    B = T.match_buffer(b, (m, n), "int32")
    P = T.match_buffer(ptr, (m + 1,), "int32")
    S = T.match_buffer(s, (m,), "float32")
    MX = T.match_buffer(mx, (m,), "float32")
    MN = T.match_buffer(mn, (m,), "float32")
    SI = T.match_buffer(si, (m,), "int32")
    SP = T.match_buffer(sp, (m,), "float64")
    for i in T.parallel(m):
        for k in T.vectorized(P[i + 1] - P[i], annotations={"simd_reduction": "+"}):
            with T.block("sum"):
                vi = T.axis.spatial(m, i)
                vk = T.axis.reduce(n, k)
                S[vi] = S[vi] + A[vi, vk] * T.float32(2)
        for k2 in T.vectorized(n, annotations={"simd_reduction": "max"}):
            with T.block("max"):
                vi, vk = T.axis.remap("SR", [i, k2])
                MX[vi] = T.max(MX[vi], A[vi, vk])
        for k3 in T.vectorized(n, annotations={"simd_reduction": "min"}):
            with T.block("min"):
                vi, vk = T.axis.remap("SR", [i, k3])
                MN[vi] = T.min(A[vi, vk], MN[vi])
        for k4 in T.vectorized(n, annotations={"simd_reduction": "+"}):
            with T.block("isum"):
                vi, vk = T.axis.remap("SR", [i, k4])
                SI[vi] = B[vi, vk] * B[vi, vk] + SI[vi]
        for k5 in T.vectorized(n, annotations={"simd_reduction": "+"}):
            with T.block("guarded"):
                vi, vk = T.axis.remap("SR", [i, k5])
                T.where(vi + 1 < m)
                SP[vi] = SP[vi] + T.Cast("float64", A[vi + 1, vk] * A[vi, vk]) * T.Cast("float64", P[vi + 1])
        for k6 in T.vectorized(n, annotations={"simd_reduction": "+"}):
            with T.block("moving_guard"):
                vi, vk = T.axis.remap("SR", [i, k6])
                T.where(vk < 3)
                S[vi] = S[vi] + A[vi, vk] * T.Cast("float32", P[vi])
