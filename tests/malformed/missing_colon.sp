@T.prim_func
def f(a: T.handle)
    pass
