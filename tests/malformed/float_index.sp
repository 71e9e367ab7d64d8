@T.prim_func
def f(a: T.handle, m: T.int32):
    I = T.sp.dense_fixed(m)
    A = T.sp.match_buffer(a, (I,), "float32")
    with T.sp.iteration([I], "S", "b") as [i]:
        A[i] = A[A[i]]
