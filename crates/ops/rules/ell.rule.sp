# Format rewrite rule: CSR A[I, J] -> ELL of width `width` over every row (SPEC §3.1, §5.3): row
# `i` holds exactly `width` slots whose columns `indices[i, :]` strictly increase; a row with
# fewer entries is padded with columns it does not store (value 0). `width` is a rule parameter;
# the rule is named "ell<width>". Composed with `dcsr.rule.sp` for the entries past the width
# (ELL+CSR), the two clones accumulate into an output zeroed once.
@T.prim_func
def ell(
    a: T.handle,
    indices: T.handle,
    m: T.int32,
    n: T.int32,
    width: T.int32,
) -> None:
    T.func_attr(
        {
            "rule_name": "ell{width}",
            "buffer_to_rewrite": ["A"],
            "axes_before": ["I", "J"],
            "axes_after": ["I", "J"],
            "axis_map": {"I": ["I"], "J": ["J"]},
            "idx_map": "lambda i, j: (i, j)",
            "inv_idx_map": "lambda i, j: (i, j)",
        }
    )
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_fixed(I, (n, width), indices, "int32")
    A = T.sp.match_buffer(a, (I, J), "float32")
