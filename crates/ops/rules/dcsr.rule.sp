# Format rewrite rule: CSR A[I, J] -> doubly compressed rows (DCSR, SPEC §3.1): only the rows
# listed by `indices_i` (increasing; `indptr_i = [0, num_rows]`) are stored, each as a CSR row
# (`indptr_j`, `indices_j`). As the remainder of an ELL+CSR decomposition (`ell.rule.sp`) it
# holds the entries of the rows longer than the ELL width, past the width. Named "dcsr".
@T.prim_func
def dcsr(
    a: T.handle,
    indptr_i: T.handle,
    indices_i: T.handle,
    indptr_j: T.handle,
    indices_j: T.handle,
    m: T.int32,
    n: T.int32,
    num_rows: T.int32,
    nnz: T.int32,
) -> None:
    T.func_attr(
        {
            "rule_name": "dcsr",
            "buffer_to_rewrite": ["A"],
            "axes_before": ["I", "J"],
            "axes_after": ["O", "I", "J"],
            "axis_map": {"I": ["O", "I"], "J": ["J"]},
            "idx_map": "lambda i, j: (0, i, j)",
            "inv_idx_map": "lambda o, i, j: (i, j)",
        }
    )
    O = T.sp.dense_fixed(1)
    I = T.sp.compressed_varied(O, (m, num_rows), (indptr_i, indices_i), "int32")
    J = T.sp.compressed_varied(I, (n, nnz), (indptr_j, indices_j), "int32")
    A = T.sp.match_buffer(a, (O, I, J), "float32")
