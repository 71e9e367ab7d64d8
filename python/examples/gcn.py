"""2-layer GCN (Kipf & Welling) on Planetoid with sparsetir kernels for every sparse product,
forward and backward: the sparse features times the first weight matrix (X is ~1% dense) and
both propagations A_hat @ H are `sparsetir.ops.spmm`; their backward passes are SpMMs on the
cached transposes. Dropout on the input acts on X's stored values.

    python gcn.py --data ../../../shared/data/planetoid-cora --seeds 5 --json

With ``--device cuda`` the model and the data live on the GPU, and every sparse product runs
sparsetir's GPU kernels on the CUDA tensors.
"""

import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from planetoid import DROPOUT, run  # noqa: E402

from sparsetir import ops  # noqa: E402


def make_ops(A_hat, X, device="cpu"):
    A = torch.sparse_csr_tensor(torch.from_numpy(A_hat.indptr.astype(np.int64)),
                                torch.from_numpy(A_hat.indices.astype(np.int64)),
                                torch.from_numpy(A_hat.data), size=A_hat.shape).to(device)
    crow = torch.from_numpy(X.indptr.astype(np.int64)).to(device)
    col = torch.from_numpy(X.indices.astype(np.int64)).to(device)
    xv = torch.from_numpy(X.data).to(device)

    def first_layer(W, training):
        # Same index tensors every epoch: the structure and its transpose are built once.
        v = torch.nn.functional.dropout(xv, DROPOUT, training)
        return ops.spmm(torch.sparse_csr_tensor(crow, col, v, size=X.shape), W)

    def propagate(H):
        return ops.spmm(A, H)

    return first_layer, propagate


if __name__ == "__main__":
    run("sparsetir", make_ops)
