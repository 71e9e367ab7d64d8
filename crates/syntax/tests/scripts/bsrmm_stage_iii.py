@T.prim_func
def bsrmm(
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
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 0})
    A_data = T.match_buffer(a, [nnzb, blk, blk], dtype="float32", strides=[1])
    B_data = T.match_buffer(b, [mb, blk, feat_size], dtype="float32",
strides=[1])
    C_data = T.match_buffer(c, [nb, blk, feat_size], dtype="float32",
strides=[1])
    J_indptr_data = T.match_buffer(indptr, [nb + 1], dtype="int32",
strides=[1])
    J_indices_data = T.match_buffer(indices, [nnzb], dtype="int32",
strides=[1])
    # body
    # with T.block("root")
    for i, bi, bj, f in T.grid(nb, blk, blk, feat_size):
        with T.block("bsrmm0"):
            vi, vbi, vbj, vf = T.axis.remap("SSRS", [i, bi, bj, f])
            T.reads(
                J_indptr_data[0 : nb + 1],
                A_data[0 : nnzb, 0 : blk, 0 : blk],
                B_data[0 : mb, 0 : blk, 0 : feat_size],
                J_indices_data[0:nnzb],
            )
            T.writes(C_data[vi, vbi, vf])
            T.block_attr({"sparse": True})
            with T.init():
                C_data[vi, vbi, vf] = T.float32(0)
            for j in T.serial(J_indptr_data[vi + 1] - J_indptr_data[vi]):
                with T.block("bsrmm1"):
                    vj = T.axis.reduce(mb, j)
                    T.reads(
                        A_data[(vj + J_indptr_data[vi]), vbi, vbj],
                        B_data[J_indices_data[vj + J_indptr_data[vi]], vbj,
vf],
                        J_indices_data[vj + J_indptr_data[vi]],
                    )
                    T.writes(C_data[vi, vbi, vf])
                    T.block_attr({"sparse": True})
                    C_data[vi, vbi, vf] = (
                        C_data[vi, vbi, vf]
                        + A_data[(vj + J_indptr_data[vi]), vbi, vbj]
                        * B_data[J_indices_data[vj + J_indptr_data[vi]], vbj,
vf])
