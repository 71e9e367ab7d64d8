@T.prim_func
f(a: T.handle):
    pass
