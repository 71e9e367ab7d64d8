@T.prim_func
def f(a: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32):
    I = T.sp.dense_fixed(m)
	    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices))
