"""Host time of one sparsetir SpMM from Python on a small matrix (where the call's overhead, not
the kernel, is the time), four ways: the eager operator on a CsrTensor, the custom operator
torch.ops.sparsetir.spmm called directly, and the operator inside functions compiled by
torch.compile (aot_eager, inductor). Prints one JSON line; microseconds, best of 5 rounds.

    OMP_NUM_THREADS=2 $PYTHON bench/compile_overhead.py
"""

import json
import time
import warnings

import numpy as np
import scipy.sparse as sp
import torch

from sparsetir import _library, ops

warnings.simplefilter("ignore")


def best_us(f, calls=2000, rounds=5):
    for _ in range(200):
        f()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            f()
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
    return best


A = ops.CsrTensor.from_scipy(
    sp.random(1000, 1000, density=0.005, format="csr", dtype=np.float32, random_state=0))
B = torch.rand(1000, 16)
m, n = A.shape
aot = torch.compile(lambda A, B: ops.spmm(A, B), fullgraph=True, backend="aot_eager")
ind = torch.compile(lambda A, B: ops.spmm(A, B), fullgraph=True)
result = {
    "matrix": "1000x1000, 5000 stored, width 16",
    "eager_us": best_us(lambda: ops.spmm(A, B)),
    "custom_op_us": best_us(
        lambda: _library.spmm_op(A.indptr, A.indices, A.values, B, m, n, "sum")),
    "compiled_aot_eager_us": best_us(lambda: aot(A, B)),
    "compiled_inductor_us": best_us(lambda: ind(A, B)),
    "torch": torch.__version__,
}
print(json.dumps(result))
