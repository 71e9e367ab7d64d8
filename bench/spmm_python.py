"""`sparsetir.ops.spmm` from Python on a scipy CSR matrix and a numpy operand: the time of a
whole call (structure cache lookup, launch validation, the kernel, the fresh output), the
smallest of three medians of 20 calls after one call checked against scipy's product. Prints
one JSON line. Needs the sparsetir package built with the release profile.

    OMP_NUM_THREADS=2 python bench/spmm_python.py MATRIX.mtx FEAT
"""
import json
import sys

import numpy as np
import scipy.io
import scipy.sparse as sp

import sparsetir.ops as ops
from pytiming import timed


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    A = sp.csr_matrix(scipy.io.mmread(sys.argv[1])).astype(np.float32)
    A.sort_indices()
    feat = int(sys.argv[2])
    B = np.random.default_rng(0).random((A.shape[1], feat), dtype=np.float32)
    np.testing.assert_allclose(ops.spmm(A, B), A @ B, rtol=1e-4, atol=1e-4)
    t = timed(lambda: ops.spmm(A, B), 20, warmup=0)
    print(json.dumps({"matrix": sys.argv[1].rsplit("/", 1)[-1], "nnz": int(A.nnz),
                      "feat": feat, "ops.spmm": t}))


if __name__ == "__main__":
    main()
