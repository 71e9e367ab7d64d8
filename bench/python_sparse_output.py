"""sparsetir.ops.spgemm / spadd timed from Python, as a user calls them: the whole call, from
scipy CSR operands to the scipy CSR result (structure assembled by the kernel, arrays handed to
scipy). Operands as ../shared/bench/peers.py makes them (float32 values in [0.5, 1.5), int32
indices): spgemm C = A @ A (A @ Aᵀ when A is not square), spadd C = A + Aᵀ. One JSON line per
case, in peers.py's fields: seconds is the median of --repeat runs after --warmup, relerr the
largest relative error against a float64 scipy reference (structure compared too).

    OMP_NUM_THREADS=2 python bench/python_sparse_output.py --op spgemm --matrix ../shared/data/cora.mtx

bench/python_sparse_output.sh runs it beside the peers, matrix by matrix.
"""

import argparse
import json
import os
import statistics
import time

import numpy as np
import scipy.io
import scipy.sparse as sp

from sparsetir import ops


def load(path):
    A = sp.csr_matrix(scipy.io.mmread(path)).astype(np.float32)
    A.sum_duplicates()
    A.sort_indices()
    A.data = np.random.default_rng(1).random(A.nnz, dtype=np.float32) + np.float32(0.5)
    return A


def relerr(C, ref):
    C, ref = sp.csr_matrix(C), sp.csr_matrix(ref)
    ref.sort_indices()
    if not (np.array_equal(C.indptr, ref.indptr) and np.array_equal(C.indices, ref.indices)):
        return float("inf")
    return float(np.max(np.abs(C.data - ref.data) / np.maximum(np.abs(ref.data), 1e-30),
                        initial=0.0))


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--op", choices=["spgemm", "spadd"], default="spgemm")
    p.add_argument("--matrix", action="append", default=[])
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeat", type=int, default=10)
    a = p.parse_args()
    for path in a.matrix:
        A = load(path)
        m, n = A.shape
        if a.op == "spgemm":
            B = A if m == n else A.T.tocsr()
            B.sort_indices()
            f = lambda: ops.spgemm(A, B)  # noqa: E731
            ref = A.astype(np.float64) @ B.astype(np.float64)
            madds = int(np.diff(B.indptr)[A.indices].sum())
        else:
            B = A.T.tocsr()
            B.sort_indices()
            f = lambda: ops.spadd(A, B)  # noqa: E731
            ref = A.astype(np.float64) + B.astype(np.float64)
        C = f()
        for _ in range(a.warmup):
            f()
        ts = []
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t0)
        s = statistics.median(ts)
        flops = 2 * madds if a.op == "spgemm" else C.nnz
        print(json.dumps({
            "peer": "sparsetir-python", "op": a.op,
            "matrix": os.path.splitext(os.path.basename(path))[0], "rows": m, "cols": n,
            "nnz": A.nnz, "nnz_c": C.nnz, "feat": 1,
            "threads": int(os.environ.get("OMP_NUM_THREADS", os.cpu_count())),
            "seconds": s, "gflops": flops / s / 1e9, "relerr": relerr(C, ref)}), flush=True)


if __name__ == "__main__":
    main()
