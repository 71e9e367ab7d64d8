# CSR -> BSR with 2 x 2 blocks: copies every stored element of A into its block of Bsr
# (the BSR structure is given; block slots without a CSR element are left untouched).
@T.prim_func
def csr2bsr(
    a: T.handle,
    bsr: T.handle,
    indptr: T.handle,
    indices: T.handle,
    indptr_bsr: T.handle,
    indices_bsr: T.handle,
    m: T.int32,
    n: T.int32,
    nnz: T.int32,
    mb: T.int32,
    nb: T.int32,
    nnzb: T.int32,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices), "int32")
    IO = T.sp.dense_fixed(mb)
    JO = T.sp.compressed_varied(IO, (nb, nnzb), (indptr_bsr, indices_bsr), "int32")
    II = T.sp.dense_fixed(2)
    JI = T.sp.dense_fixed(2)
    A = T.sp.match_buffer(a, (I, J), "float32")
    Bsr = T.sp.match_buffer(bsr, (IO, JO, II, JI), "float32")
    with T.sp.iteration([I, J], "SS", "csr2bsr") as [i, j]:
        Bsr[i // 2, j // 2, i % 2, j % 2] = A[i, j]
