@T.prim_func
def f(a: T.handle, m: T.int32, a: T.handle):
    pass
