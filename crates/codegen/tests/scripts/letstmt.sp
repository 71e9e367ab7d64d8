@T.prim_func
def lets(xs: T.handle, o: T.handle, n: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    X = T.match_buffer(xs, (n,), "int32")
    O = T.match_buffer(o, (n,), "int64")
    for i in T.serial(n):
        v: T.int64 = T.Cast("int64", X[i]) * T.int64(3)
        if v > T.int64(0):
            O[i] = v
        elif v < T.int64(-30):
            O[i] = T.int64(-1)
        else:
            O[i] = v * v
    for j in T.serial(2):
        S = T.allocate((5000,), "float32", "global")
        S[4999] = S[4999] + T.float32(1)
        O[j] = O[j] + T.Cast("int64", S[4999])
