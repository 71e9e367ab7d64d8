# Batched matmul of ragged matrices: batch b multiplies an I_b x J_b matrix X_b by a
# J_b x K_b matrix Y_b into Z_b. Rows are dense_varied under the batch, row elements
# dense_varied under the rows: X[B, I, IJ], Y[B, J, JK], Z[B, I, IK].
@T.prim_func
def ragged_bmm(
    x: T.handle,
    y: T.handle,
    z: T.handle,
    indptr_i: T.handle,
    indptr_j: T.handle,
    indptr_k: T.handle,
    indptr_ij: T.handle,
    indptr_jk: T.handle,
    indptr_ik: T.handle,
    batch_size: T.int32,
    max_len: T.int32,
    nnz_i: T.int32,
    nnz_j: T.int32,
    nnz_k: T.int32,
    nnz_ij: T.int32,
    nnz_jk: T.int32,
    nnz_ik: T.int32,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    B = T.sp.dense_fixed(batch_size)
    I = T.sp.dense_varied(B, (max_len, nnz_i), indptr_i, "int32")
    J = T.sp.dense_varied(B, (max_len, nnz_j), indptr_j, "int32")
    K = T.sp.dense_varied(B, (max_len, nnz_k), indptr_k, "int32")
    IJ = T.sp.dense_varied(I, (max_len, nnz_ij), indptr_ij, "int32")
    JK = T.sp.dense_varied(J, (max_len, nnz_jk), indptr_jk, "int32")
    IK = T.sp.dense_varied(I, (max_len, nnz_ik), indptr_ik, "int32")
    X = T.sp.match_buffer(x, (B, I, IJ), "float32")
    Y = T.sp.match_buffer(y, (B, J, JK), "float32")
    Z = T.sp.match_buffer(z, (B, I, IK), "float32")
    with T.sp.iteration([B, I, J, K], "SSRS", "ragged_bmm") as [b, i, j, k]:
        with T.init():
            Z[b, i, k] = T.float32(0)
        Z[b, i, k] = Z[b, i, k] + X[b, i, j] * Y[b, j, k]
