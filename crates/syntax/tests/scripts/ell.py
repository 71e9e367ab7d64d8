@T.prim_func
def ellmm(a: T.handle, b: T.handle, c: T.handle, indices: T.handle, nb: T.int32, mb: T.int32, col: T.int32, blk: T.int32, feat_size: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 2})
    I = T.sp.dense_fixed(nb)
    J = T.sparse_fixed(I, (mb, col), indices, idtype="int64")
    J_detach = T.sp.dense_fixed(mb, idtype="int64")
    BI = T.sp.dense_fixed(blk)
    BJ = T.sp.dense_fixed(blk)
    F = T.sp.dense_fixed(feat_size)
    A = T.sp.match_buffer(a, (I, J, BI, BJ), "float16")
    B = T.sp.match_buffer(b, (J_detach, BJ, F), "float16")
    C = T.sp.match_buffer(c, (I, BI, F), "float32")
    with T.sp.iteration([I, J, BI, BJ, F], "SRSRS", "ellmm") as [i, j, bi, bj, f]:
        with T.init():
            C[i, bi, f] = T.float32(0)
        C[i, bi, f] = C[i, bi, f] + T.Cast("float32", A[i, j, bi, bj] * B[j, bj, f])
