"""The plain PyTorch baseline of gcn.py: the same model, hyper-parameters and loop, with the
adjacency as a torch sparse COO tensor (`torch.sparse.mm`) and the features as a dense matrix
(`X @ W`, dropout on the dense X), as GCN implementations commonly write it.

    python gcn_torch.py --data ../../../shared/data/planetoid-cora --seeds 5 --json
"""

import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from planetoid import DROPOUT, run  # noqa: E402


def make_ops(A_hat, X, device="cpu"):
    coo = A_hat.tocoo()
    A = torch.sparse_coo_tensor(torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64)),
                                torch.from_numpy(coo.data), size=coo.shape).coalesce().to(device)
    Xd = torch.from_numpy(X.toarray()).to(device)

    def first_layer(W, training):
        return torch.nn.functional.dropout(Xd, DROPOUT, training) @ W

    def propagate(H):
        return torch.sparse.mm(A, H)

    return first_layer, propagate


if __name__ == "__main__":
    run("torch", make_ops)
