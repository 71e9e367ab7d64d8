@T.prim_func
def f(a: T.handle, n: T.int32):
    A = T.match_buffer(a, (n,), "float32")
    for i in T.thread_binding(n):
        A[i] = 0.0
