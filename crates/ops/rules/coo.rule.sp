# Format rewrite rule: CSR A[I, J] -> coordinate list (COO, SPEC §3.1): every stored element
# carries its row (`rows`) and its column (`cols`), one level of `nnz` elements under a unit
# root `O`. Built from CSR, COO's positions are CSR's (the same order, row after row): the value
# array and `cols` are CSR's `values` and `indices` unchanged, only `rows` (the row of each
# stored element) is new. The rows are not strictly increasing (a row repeats once per element),
# hence `sorted=False` (no coordinate search into this format). Named "coo".
@T.prim_func
def coo(
    a: T.handle,
    rows: T.handle,
    cols: T.handle,
    m: T.int32,
    n: T.int32,
    nnz: T.int32,
) -> None:
    T.func_attr(
        {
            "rule_name": "coo",
            "buffer_to_rewrite": ["A"],
            "axes_before": ["I", "J"],
            "axes_after": ["O", "I", "J"],
            "axis_map": {"I": ["O", "I"], "J": ["J"]},
            "idx_map": "lambda i, j: (0, i, j)",
            "inv_idx_map": "lambda o, i, j: (i, j)",
        }
    )
    O = T.sp.dense_fixed(1)
    I = T.sp.compressed_fixed(O, (m, nnz), rows, "int32", sorted=False)
    J = T.sp.compressed_fixed(I, (n, 1), cols, "int32", sorted=False)
    A = T.sp.match_buffer(a, (O, I, J), "float32")
