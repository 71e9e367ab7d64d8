# Format rewrite rule: CSR A[I, J] -> one ELL bucket of a column-partitioned hyb format (SPEC
# §5.3; the structure of SparseTIR's hyb SpMM). The bucket's rows are a subset of the matrix rows,
# listed by `indices_i` (the builder's `row_indices`; `indptr_i = [0, num_rows]`), each with
# `nnz_cols` slots whose columns are `indices_j` (the builder's `col_indices`). `nnz_cols` is a
# rule parameter (the bucket width); one rule per (part, bucket) is named "<part>_<bucket>".
# Rows split past the largest bucket repeat in `indices_i` (a fiber of I may then hold more than
# `m` elements: I's length, an upper bound of coordinates and positions alike, is
# `m + num_rows`), and padding repeats columns, so neither axis is declared sorted. The builder
# pads with a column the row does not store, so the format-rewrite copy `A[i, j]` reads 0 into
# padding whatever the row stores (a row storing every column has no such column: the builder
# cuts it into pieces that fill buckets exactly, where the buckets allow it). Accesses by the
# iteration's own iterators are positions (stage I too), so split rows need no coordinate search.
@T.prim_func
def ell(
    a: T.handle,
    indptr_i: T.handle,
    indices_i: T.handle,
    indices_j: T.handle,
    m: T.int32,
    n: T.int32,
    num_rows: T.int32,
    nnz_cols: T.int32,
) -> None:
    T.func_attr(
        {
            "rule_name": "ell_{nnz_cols}",
            "buffer_to_rewrite": ["A"],
            "axes_before": ["I", "J"],
            "axes_after": ["O", "I", "J"],
            "axis_map": {"I": ["O", "I"], "J": ["J"]},
            "idx_map": "lambda i, j: (0, i, j)",
            "inv_idx_map": "lambda o, i, j: (i, j)",
        }
    )
    O = T.sp.dense_fixed(1)
    I = T.sp.compressed_varied(O, (m + num_rows, num_rows), (indptr_i, indices_i), "int32", sorted=False)
    J = T.sp.compressed_fixed(I, (n, nnz_cols), indices_j, "int32", sorted=False)
    A = T.sp.match_buffer(a, (O, I, J), "float32")
