# Segm	ent min: B[i] = the min of row i of a ragged array (rows of at most 100 elements).
@T.prim_func
def segment_min(
    a: T.handle,
    b: T.handle,
    indptr: T.handle,
    m: T.int64,
   nnz: T.int32,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.dense_varied(I, (100, nnz), indptr, "int32")
    A = T.sp.match_buffer(a, (I, J), "float32")
    B = T.sp.match_buffer(b, (I,), "float32")
    with T.sp.iteration([I, J], "SR", "segment_min") as [i, j]:
        with T.init():
            B[i] = T.max_value("float32")
        B[i] = T.min(B[i], A[i, j])
