"""``sparsetir.ops.spmm(A, B, reduce=...)`` beside PyTorch's ``torch.sparse.mm(A, B, reduce)``
(CSR, CPU: "sum", "mean", "amax", "amin") on the same matrix and operand: the time of a
forward call, and of a forward and backward pass (gradient of B), each the smallest of three
medians of ``--repeat`` calls after two warm-up calls; every result is first checked against
PyTorch's. Prints one JSON line per reduction. Needs the sparsetir package built with the
release profile, and torch.

    OMP_NUM_THREADS=2 python bench/aggregate_python.py --matrix cora.mtx --feat 64
"""
import argparse
import json

import numpy as np
import scipy.io
import scipy.sparse as sp
import torch

import sparsetir.ops as ops
from pytiming import timed


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--matrix", required=True)
    ap.add_argument("--feat", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--reduce", choices=["sum", "mean", "max", "min"], action="append",
                    help="only these reductions (repeatable; default: all four)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    A = sp.csr_matrix(scipy.io.mmread(a.matrix)).astype(np.float32)
    A.sum_duplicates()
    A.sort_indices()
    At = torch.sparse_csr_tensor(torch.from_numpy(A.indptr.astype(np.int64)),
                                 torch.from_numpy(A.indices.astype(np.int64)),
                                 torch.from_numpy(A.data), size=A.shape)
    B = torch.from_numpy(np.random.default_rng(0).random((A.shape[1], a.feat),
                                                         dtype=np.float32) - 0.5)
    for ours, theirs in (("sum", "sum"), ("mean", "mean"), ("max", "amax"), ("min", "amin")):
        if a.reduce and ours not in a.reduce:
            continue
        Bg = B.clone().requires_grad_(True)
        got = ops.spmm(At, Bg, reduce=ours)
        want = torch.sparse.mm(At, Bg, theirs)
        err = float((got - want).abs().max())
        G = torch.ones_like(got)

        def fwd_ours():
            with torch.no_grad():
                ops.spmm(At, B, reduce=ours)

        def fwd_theirs():
            with torch.no_grad():
                torch.sparse.mm(At, B, theirs)

        def both_ours():
            Bg.grad = None
            ops.spmm(At, Bg, reduce=ours).backward(G)

        def both_theirs():
            Bg.grad = None
            torch.sparse.mm(At, Bg, theirs).backward(G)

        # Every path once before anything is timed: the first pair a fresh process timed came
        # out up to 8x slower than the same pair timed again in that process (session 42).
        for fn in (fwd_ours, fwd_theirs, both_ours, both_theirs):
            try:
                fn()
            except RuntimeError:  # a reduction torch cannot differentiate; reported below
                pass
        line = {"matrix": a.matrix.rsplit("/", 1)[-1], "nnz": int(A.nnz), "feat": a.feat,
                "threads": a.threads, "reduce": ours, "maxdiff": err,
                "sparsetir_forward": timed(fwd_ours, a.repeat),
                "torch_forward": timed(fwd_theirs, a.repeat)}
        try:
            line["sparsetir_fwd_bwd"] = timed(both_ours, a.repeat)
            line["torch_fwd_bwd"] = timed(both_theirs, a.repeat)
        except RuntimeError as e:  # a reduction torch cannot differentiate
            line["torch_fwd_bwd_error"] = str(e).splitlines()[0]
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
