# SpMV on SELL-C-sigma (crates/formats/src/builders/sell.rs): y = A x with A's rows packed into
# chunks of `lanes` rows stored side by side. Chunk k holds slots chunk_ptr[k]..chunk_ptr[k+1]
# (its width), each slot one value and one column per lane; lane l of chunk k computes row
# rows[k, l] (padding lanes have rows of their own past the matrix, so y has nchunk * lanes
# rows, the first m of them the result). The chunk's partial sums Z[k, :] are reduced over its
# slots, then scattered to the rows.
@T.prim_func
def spmv_sell(
    a: T.handle,
    x: T.handle,
    y: T.handle,
    cols: T.handle,
    rows: T.handle,
    chunk_ptr: T.handle,
    nchunk: T.int32,
    lanes: T.int32,
    max_width: T.int32,
    nslots: T.int32,
    n: T.int32,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    K = T.sp.dense_fixed(nchunk)
    W = T.sp.dense_varied(K, (max_width, nslots), chunk_ptr, "int32")
    L = T.sp.dense_fixed(lanes)
    N = T.sp.dense_fixed(n)
    M = T.sp.dense_fixed(nchunk * lanes)
    A = T.sp.match_buffer(a, (K, W, L), "float32")
    C = T.sp.match_buffer(cols, (K, W, L), "int32")
    R = T.sp.match_buffer(rows, (K, L), "int32")
    X = T.sp.match_buffer(x, (N,), "float32")
    Y = T.sp.match_buffer(y, (M,), "float32")
    Z = T.sp.alloc_buffer((K, L), "float32")
    with T.sp.iteration([K], "S", "spmv_sell") as [k]:
        with T.sp.iteration([W, L], "RS", "chunk_sum") as [w, l]:
            with T.init():
                Z[k, l] = T.float32(0)
            Z[k, l] = Z[k, l] + A[k, w, l] * X[C[k, w, l]]
        with T.sp.iteration([L], "S", "chunk_store") as [l]:
            Y[R[k, l]] = Z[k, l]
