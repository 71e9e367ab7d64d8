@T.prim_func
def dcsr_ragged(a: T.handle, r: T.handle, out: T.handle, indptr_i: T.handle, indices_i: T.handle, indptr_j: T.handle, indices_j: T.handle, indptr_r: T.handle, m: T.int32, n: T.int32, nnz1: T.int32, nnz2: T.int32, nnzr: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 2})
    O = T.sp.dense_fixed(1)  # placeholder root
    I = T.sp.compressed_varied(O, (m, nnz1), (indptr_i, indices_i), idtype="int32")
    J = T.sp.compressed_varied(I, (n, nnz2), (indptr_j, indices_j))
    R0 = T.sp.dense_fixed(m)
    R1 = T.dense_variable(R0, (n, nnzr), indptr_r, "int32")
    R2 = T.sp.dense_varied(R0, n, indptr_r)
    A = T.sp.match_buffer(a, (O, I, J), "float32")
    R = T.sp.match_buffer(r, (R0, R1), "float32", extra_storage=1)
    Out = T.match_buffer(out, (m,), "float32")
    T.assume_buffer_domain(Out, [0, 100])
    with T.sp.iteration([O, I, J], "SSR", "rowsum") as [o, i, j]:
        with T.init():
            Out[i] = T.float32(0)
        Out[i] = Out[i] + A[o, i, j] * T.float32(-0.5) + T.float32(1e-07) - T.float32(1e+20)
    with T.sp.iteration([R0, R1], "SS", "ragged") as [p, q]:
        if p % 2 == 0 and not q >= 3 or p // 2 < -4:
            R[p, q] = T.Select(q > 0, R[p, q], T.float32("inf"))
        elif p == 1:
            R[p, q] = -R[p, q] * -(3) - (2 - 1) - -5
        else:
            R[p, q] = T.pow(R[p, q], T.float32(2)) + T.cast(p - (q - 1), "float32")
