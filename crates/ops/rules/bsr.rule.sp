# Format rewrite rule: CSR A[I, J] -> BSR with square blocks of `block_size` (RFC "csr2bsr").
# `block_size` is a rule parameter: bind it (FormatRewriteRule::from_script_with / bind); the
# rule is then named after its value, as in the RFC ("4", "16", "32").
@T.prim_func
def bsr(
    a: T.handle,
    indptr: T.handle,
    indices: T.handle,
    m: T.int32,
    n: T.int32,
    nnz: T.int32,
    block_size: T.int32,
) -> None:
    T.func_attr(
        {
            "rule_name": "{block_size}",
            "buffer_to_rewrite": ["A"],
            "axes_before": ["I", "J"],
            "axes_after": ["IO", "JO", "II", "JI"],
            "axis_map": {"I": ["IO", "II"], "J": ["JO", "JI"]},
            "idx_map": "lambda i, j: (i // block_size, j // block_size, i % block_size, j % block_size)",
            "inv_idx_map": "lambda io, jo, ii, ji: (io * block_size + ii, jo * block_size + ji)",
        }
    )
    IO = T.sp.dense_fixed(m)
    JO = T.sp.compressed_varied(IO, (n, nnz), (indptr, indices), "int32")
    II = T.sp.dense_fixed(block_size)
    JI = T.sp.dense_fixed(block_size)
    A = T.sp.match_buffer(a, (IO, JO, II, JI), "float32")
