@T.prim_func
def widen(h: T.handle, bh: T.handle, x: T.handle, y: T.handle, s: T.handle, m: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    H = T.match_buffer(h, (m, 64), "float16")
    BH = T.match_buffer(bh, (m, 64), "bfloat16")
    X = T.match_buffer(x, (m,), "float16")
    Y = T.match_buffer(y, (m, 64), "float32")
    S = T.match_buffer(s, (m, 6), "float32")
    for i in T.parallel(m):
        for k in T.vectorized(64):
            with T.block("axpy"):
                vi, vk = T.axis.remap("SS", [i, k])
                Y[vi, vk] = T.Cast("float32", H[vi, vk]) * T.Cast("float32", X[vi]) + T.Cast("float32", BH[vi, vk])
        for k2 in T.serial(64, annotations={"simd_reduction": "+", "lanes": 2}):
            with T.block("dot2"):
                vi, vk = T.axis.remap("SR", [i, k2])
                S[vi, 0] = S[vi, 0] + T.Cast("float32", H[vi, vk]) * T.Cast("float32", BH[vi, vk])
        for k4 in T.serial(64, annotations={"simd_reduction": "+", "lanes": 4}):
            with T.block("dot4"):
                vi, vk = T.axis.remap("SR", [i, k4])
                S[vi, 1] = S[vi, 1] + T.Cast("float32", H[vi, vk]) * T.Cast("float32", BH[vi, vk])
        for k8 in T.serial(64, annotations={"simd_reduction": "+", "lanes": 8}):
            with T.block("dot8"):
                vi, vk = T.axis.remap("SR", [i, k8])
                S[vi, 2] = S[vi, 2] + T.Cast("float32", H[vi, vk]) * T.Cast("float32", H[vi, vk])
        for k16 in T.serial(64, annotations={"simd_reduction": "+", "lanes": 16}):
            with T.block("dot16"):
                vi, vk = T.axis.remap("SR", [i, k16])
                S[vi, 3] = S[vi, 3] + T.Cast("float32", BH[vi, vk]) * T.Cast("float32", BH[vi, vk])
        for k32 in T.serial(64, annotations={"simd_reduction": "+", "lanes": 32}):
            with T.block("dot32"):
                vi, vk = T.axis.remap("SR", [i, k32])
                S[vi, 4] = S[vi, 4] + T.Cast("float32", H[vi, vk]) * T.Cast("float32", BH[vi, vk])
        for k64 in T.serial(64, annotations={"simd_reduction": "+", "lanes": 64}):
            with T.block("dot64"):
                vi, vk = T.axis.remap("SR", [i, k64])
                S[vi, 5] = S[vi, 5] + T.Cast("float32", H[vi, vk]) * T.Cast("float32", X[vi])
