# Block-sparse SDDMM, the scores of block-sparse attention: C = A Bᵀ on the stored blocks of a
# BSR pattern of nb x mb blocks of blk x blk (A's rows grouped by block row, B's by block
# column, both with feat_size columns; C holds one blk x blk tile per stored block).
@T.prim_func
def bsr_sddmm(
    a: T.handle,
    b: T.handle,
    c: T.handle,
    indptr: T.handle,
    indices: T.handle,
    nb: T.int32,
    mb: T.int32,
    nnzb: T.int32,
    blk: T.int32,
    feat_size: T.int32,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(nb)
    J = T.sp.compressed_varied(I, (mb, nnzb), (indptr, indices), "int32")
    J_detach = T.sp.dense_fixed(mb)
    BI = T.sp.dense_fixed(blk)
    BJ = T.sp.dense_fixed(blk)
    K = T.sp.dense_fixed(feat_size)
    A = T.sp.match_buffer(a, (I, BI, K), "float32")
    B = T.sp.match_buffer(b, (J_detach, BJ, K), "float32")
    C = T.sp.match_buffer(c, (I, J, BI, BJ), "float32")
    with T.sp.iteration([I, J, BI, BJ, K], "SSSSR", "bsr_sddmm") as [i, j, bi, bj, k]:
        with T.init():
            C[i, j, bi, bj] = T.float32(0)
        C[i, j, bi, bj] = C[i, j, bi, bj] + A[i, bi, k] * B[j, bj, k]
