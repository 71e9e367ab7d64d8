@T.prim_func
def f(a: T.handle, m: T.int33):
    pass
