@T.prim_func
def f(a: T.handle, n: T.int32):
    A = T.match_buffer(a, (n,), "float32")
    with T.block("b"):
        vi = T.axis.remap("S", [n])
        A[vi] = 0.0
