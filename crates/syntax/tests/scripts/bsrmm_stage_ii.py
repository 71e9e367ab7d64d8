@T.prim_func
def bsrmm_stage_ii(
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
    # function attr dict
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 1})
    I = T.sp.dense_fixed(nb, idtype="int32")
    J = T.sp.compressed_varied(I, (mb, nnzb), (indptr, indices), idtype="int32", sorted=True)
    J_dense = T.sp.dense_varied(I, (mb, nnzb), indptr, idtype="int32")
    J_detach = T.sp.dense_fixed(mb, idtype="int32")
    BI = T.sp.dense_fixed(blk, idtype="int32")
    BJ = T.sp.dense_fixed(blk, idtype="int32")
    F = T.sp.dense_fixed(feat_size, idtype="int32")
    A = T.sp.match_buffer(a, [I, J, BI, BJ], dtype="float32")
    B = T.sp.match_buffer(b, [J_detach, BJ, F], dtype="float32")
    C = T.sp.match_buffer(c, [I, BI, F], dtype="float32")
    J_indptr = T.sp.match_buffer(indptr, [I], dtype="int32", extra_storage=1)
    J_indices = T.sp.match_buffer(indices, [I, J_dense], dtype="int32")
    # body
    # with T.block("root")
    T.assume_buffer_domain(J_indptr, [0, nnzb])
    T.assume_buffer_domain(J_indices, [0, mb])
    for i, bi, bj, f in T.grid(nb, blk, blk, feat_size):
        with T.block("bsrmm0"):
            vi, vbi, vbj, vf = T.axis.remap("SSRS", [i, bi, bj, f])
            T.reads(
                J_indptr[vi : vi + 2], A[vi, 0:mb, vbi, vbj], B[0:mb, vbj,
vf], J_indices[vi, 0:mb]
            )
            T.writes(C[vi, vbi, vf])
            T.block_attr({"sparse": True})
            with T.init():
                C[vi, vbi, vf] = T.float32(0)
            for j in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
                with T.block("bsrmm1"):
                    vj = T.axis.reduce(mb, j)
                    T.reads(A[vi, vj, vbi, vbj], B[J_indices[vi, vj], vbj,
vf], J_indices[vi, vj])
                    T.writes(C[vi, vbi, vf])
                    T.block_attr({"sparse": True})
                    C[vi, vbi, vf] = (
                        C[vi, vbi, vf] + A[vi, vj, vbi, vbj] * B[J_indices[vi,
vj], vbj, vf]
                    )
