"""2-layer GCN (Kipf & Welling) on Planetoid with sparsetir kernels for every sparse product,
forward and backward: the sparse features times the first weight matrix (X is ~1% dense) and
both propagations A_hat @ H are `sparsetir.ops.spmm`; their backward passes are SpMMs on the
cached transposes. Dropout on the input acts on X's stored values.

    python gcn.py --data ../../../shared/data/planetoid-cora --seeds 5 --json

With ``--device cuda`` the model and the data live on the GPU, and every sparse product runs
sparsetir's GPU kernels on the CUDA tensors. With ``--compile`` the forward pass is compiled
whole by ``torch.compile(fullgraph=True)``: the matrices are ``sparsetir.ops.CsrTensor``s, whose
products are custom operators in the captured graph.
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from planetoid import DROPOUT, run  # noqa: E402

from sparsetir import ops  # noqa: E402


def make_ops(A_hat, X, device="cpu"):
    A = ops.CsrTensor.from_scipy(A_hat, device=device)
    Xc = ops.CsrTensor.from_scipy(X, device=device)

    def first_layer(W, training):
        # Same index tensors every epoch: the structure and its transpose are built once.
        v = torch.nn.functional.dropout(Xc.values, DROPOUT, training)
        return ops.spmm(Xc.with_values(v), W)

    def propagate(H):
        return ops.spmm(A, H)

    return first_layer, propagate


if __name__ == "__main__":
    run("sparsetir", make_ops, traceable=True)
