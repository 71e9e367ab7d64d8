# SpMM on the TC-GNN condensed tiling (crates/formats/src/builders/condense.rs): C = A B with
# A's rows cut into tiles of `t` rows, each tile's used columns condensed into groups of `g`
# (`tile_indices`), every group a dense t x g block of values (0 where the row has no entry).
# A tile times the g gathered rows of B is a dense product: the form tensor cores take. C has a
# row per tile row (num_tiles * t rows, the matrix's first).
@T.prim_func
def condense_spmm(
    a: T.handle,
    b: T.handle,
    c: T.handle,
    group_indptr: T.handle,
    tile_indices: T.handle,
    num_tiles: T.int32,
    max_groups: T.int32,
    num_groups: T.int32,
    t: T.int32,
    g: T.int32,
    n: T.int32,
    feat_size: T.int32,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    TI = T.sp.dense_fixed(num_tiles)
    Q = T.sp.dense_varied(TI, (max_groups, num_groups), group_indptr, "int32")
    R = T.sp.dense_fixed(t)
    S = T.sp.dense_fixed(g)
    N = T.sp.dense_fixed(n)
    F = T.sp.dense_fixed(feat_size)
    A = T.sp.match_buffer(a, (TI, Q, R, S), "float32")
    IDX = T.sp.match_buffer(tile_indices, (TI, Q, S), "int32")
    B = T.sp.match_buffer(b, (N, F), "float32")
    C = T.sp.match_buffer(c, (TI, R, F), "float32")
    with T.sp.iteration([TI, Q, R, S, F], "SRSRS", "condense_spmm") as [ti, q, r, s, f]:
        with T.init():
            C[ti, r, f] = T.float32(0)
        C[ti, r, f] = C[ti, r, f] + A[ti, q, r, s] * B[IDX[ti, q, s], f]
