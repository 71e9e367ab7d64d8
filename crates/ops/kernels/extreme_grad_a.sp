# The backward of SpMM aggregating by max or min, step 2: the gradient of A's stored values,
# Y[i, j] = sum over k of W[i, k] * B[j, k] where A[i, j] * B[j, k] equals the forward's output
# E[i, k] (W: the output's gradient over its tie count). An SDDMM with a mask, written as a
# factor 1 or 0 (a select that reads nothing, which the C writer's vector loops take; an
# infinite W * B would give NaN where a select of the product gives 0).
@T.prim_func
def extreme_grad_a(
    a: T.handle,
    b: T.handle,
    e: T.handle,
    w: T.handle,
    y: T.handle,
    indptr: T.handle,
    indices: T.handle,
    m: T.int32,
    n: T.int32,
    feat_size: T.int32,
    nnz: T.int32,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices), "int32")
    J_detach = T.sp.dense_fixed(n)
    K = T.sp.dense_fixed(feat_size)
    A = T.sp.match_buffer(a, (I, J), "float32")
    B = T.sp.match_buffer(b, (J_detach, K), "float32")
    E = T.sp.match_buffer(e, (I, K), "float32")
    W = T.sp.match_buffer(w, (I, K), "float32")
    Y = T.sp.match_buffer(y, (I, J), "float32")
    with T.sp.iteration([I, J, K], "SSR", "sddmm") as [i, j, k]:
        with T.init():
            Y[i, j] = T.float32(0)
        Y[i, j] = Y[i, j] + W[i, k] * B[j, k] * T.Select(
            A[i, j] * B[j, k] == E[i, k], T.float32(1), T.float32(0)
        )
