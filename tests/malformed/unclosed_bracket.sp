@T.prim_func
def f(a: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32):
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices))
    A = T.sp.match_buffer(a, (I, J), "float32"
    with T.sp.iteration([I, J], "SS", "copy") as [i, j]:
        A[i, j] = A[i, j] * T.float32(2)
