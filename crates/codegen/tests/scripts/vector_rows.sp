@T.prim_func
def rows(a: T.handle, p: T.handle, x: T.handle, e: T.handle, e2: T.handle, s: T.handle, m: T.int32, mp1: T.int32, nnz: T.int32, nnz16: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (nnz,), "float32")
    P = T.match_buffer(p, (mp1,), "int32")
    X = T.match_buffer(x, (m,), "float32")
    E = T.match_buffer(e, (nnz,), "float32")
    E2 = T.match_buffer(e2, (nnz16,), "float32")
    S = T.match_buffer(s, (m, 3), "float32")
    for i in T.parallel(m):
        for j in T.vectorized(P[i + 1] - P[i]):
            with T.block("exp"):
                vi = T.axis.spatial(m, i)
                vj = T.axis.spatial(nnz, j)
                E[P[vi] + vj] = T.exp(A[P[vi] + vj] - X[vi]) * T.float32(2)
        for j1 in T.vectorized(P[i + 1] - P[i], annotations={"simd_masked_tail": 1}):
            with T.block("exp_masked"):
                vi = T.axis.spatial(m, i)
                vj = T.axis.spatial(nnz, j1)
                E2[P[vi] + vj] = T.exp(A[P[vi] + vj] - X[vi]) * T.float32(2)
        for j2 in T.serial(P[i + 1] - P[i], annotations={"simd_reduction": "max", "simd_min_trip": 16}):
            with T.block("rmax"):
                vi = T.axis.spatial(m, i)
                vj = T.axis.reduce(nnz, j2)
                S[vi, 0] = T.max(S[vi, 0], A[P[vi] + vj])
        for j3 in T.serial(P[i + 1] - P[i], annotations={"simd_reduction": "min", "simd_min_trip": 16, "simd_masked_tail": 1}):
            with T.block("rmin"):
                vi = T.axis.spatial(m, i)
                vj = T.axis.reduce(nnz, j3)
                S[vi, 1] = T.min(S[vi, 1], A[P[vi] + vj] * X[vi])
        for j4 in T.serial(P[i + 1] - P[i], annotations={"simd_reduction": "+", "simd_min_trip": 16, "simd_masked_tail": 1}):
            with T.block("rsum"):
                vi = T.axis.spatial(m, i)
                vj = T.axis.reduce(nnz, j4)
                S[vi, 2] = S[vi, 2] + T.exp(A[P[vi] + vj] - X[vi])
