@T.prim_func
def f(a: T.handle, b: T.handle, m: T.int32):
    I = T.sp.dense_fixed(m)
    A = T.sp.match_buffer(a, (I,), "float32")
    B = T.sp.match_buffer(b, (I,), "float32")
    with T.sp.iteration([I], "S", "z") as [i]:
        B[i] = A[i % (2 - 2)]
