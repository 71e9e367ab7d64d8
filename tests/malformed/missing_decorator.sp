def f(a: T.handle):
    pass
