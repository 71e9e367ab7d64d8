# The row statistic of block-sparse attention's softmax for a product that makes the
# probabilities on the fly (formats/bsr_softmax_mm.sp): for every row of tokens, over its stored
# blocks only, L = scale max A + log(sum over the row of exp(scale (A - max))), the logarithm of
# the softmax's denominator, so that a probability is exp(scale A - L) (scale > 0). A row that
# stores nothing gets -inf (its product sums nothing).
@T.prim_func
def bsr_softmax_lse(
    a: T.handle,
    l: T.handle,
    indptr: T.handle,
    indices: T.handle,
    nb: T.int32,
    mb: T.int32,
    nnzb: T.int32,
    blk: T.int32,
    scale: T.float32,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(nb)
    J = T.sp.compressed_varied(I, (mb, nnzb), (indptr, indices), "int32")
    BI = T.sp.dense_fixed(blk)
    BJ = T.sp.dense_fixed(blk)
    A = T.sp.match_buffer(a, (I, J, BI, BJ), "float32")
    L = T.sp.match_buffer(l, (I, BI), "float32")
    A_max = T.sp.alloc_buffer((I, BI), "float32")
    A_sum = T.sp.alloc_buffer((I, BI), "float32")
    with T.sp.iteration([I, BI], "SS", "bsr_softmax") as [i, bi]:
        with T.sp.iteration([J, BJ], "RR", "row_max") as [j, bj]:
            with T.init():
                A_max[i, bi] = T.min_value("float32")
            A_max[i, bi] = T.max(A_max[i, bi], A[i, j, bi, bj])
        with T.sp.iteration([J, BJ], "RR", "row_sum") as [j, bj]:
            with T.init():
                A_sum[i, bi] = T.float32(0)
            A_sum[i, bi] = A_sum[i, bi] + T.exp((A[i, j, bi, bj] - A_max[i, bi]) * scale)
        L[i, bi] = A_max[i, bi] * scale + T.log(A_sum[i, bi])
