"""2-layer GraphSAGE (Hamilton et al., NeurIPS 2017) on Planetoid with sparsetir kernels for
every sparse product, forward and backward: each layer is ``H W_self + AGG(H W_neigh) + b``,
where AGG aggregates a node's neighbours by ``--aggr mean|max|min|sum``
(``sparsetir.ops.spmm(A, ., reduce=...)`` on the unnormalised adjacency), and the first layer's
products with the sparse features are ``sparsetir.ops.spmm`` too. Max and min differentiate
through the aggregation kernels' backward (the gradient to the neighbours that gave each
maximum, ties sharing it).

    python sage.py --data ../../../shared/data/planetoid-cora --aggr max --seeds 5 --json

``--impl torch`` trains the same model with PyTorch's ``torch.sparse.mm(A, B, reduce)`` for
every sparse product instead (the peer of ``bench/RESULTS.md``); off the CPU, where PyTorch has
no kernel for the reduction, max, min and mean aggregate as PyG does (`scatter_spmm`).
``--compile`` compiles the forward pass whole with ``torch.compile`` (sparsetir only: its
matrices are ``CsrTensor``s).

Hyper-parameters: 64 hidden units, ReLU, dropout 0.5 on the hidden layer, Adam with learning
rate 0.01 and weight decay 5e-4, 200 epochs; the reported test accuracy is the one at the
epoch of best validation accuracy (`planetoid.py`'s data preparation and split).
"""

from __future__ import annotations

import os
import sys

import numpy as np
import scipy.sparse as sp
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from planetoid import (  # noqa: E402
    DROPOUT, LR, WEIGHT_DECAY, arguments, compiled, glorot, load, run_seeds, train)

from sparsetir import ops  # noqa: E402

HIDDEN = 64


def csr_tensor(M: sp.csr_matrix) -> torch.Tensor:
    return torch.sparse_csr_tensor(torch.from_numpy(M.indptr.astype(np.int64)),
                                   torch.from_numpy(M.indices.astype(np.int64)),
                                   torch.from_numpy(M.data), size=M.shape)


TORCH_REDUCE = {"sum": "sum", "mean": "mean", "max": "amax", "min": "amin"}


def scatter_spmm(M: torch.Tensor, H: torch.Tensor, reduce: str) -> torch.Tensor:
    """``torch.sparse.mm(M, H, reduce)`` for a sparse CSR `M` and a dense `H`, on any device, as
    PyG aggregates: each stored entry's row of `H` (picked by its column index) times the entry,
    reduced into the entry's row of a zero output by ``scatter_reduce`` (`reduce` "sum", "amax",
    "amin" or "mean", ``include_self=False``), so that a row without entries stays 0 as it does
    in torch.sparse.mm. Differentiable in `H` (ties for amax and amin share the gradient)."""
    crow, col = M.crow_indices(), M.col_indices()
    rows = torch.repeat_interleave(torch.arange(M.shape[0], device=H.device), crow.diff(),
                                   output_size=col.numel())
    src = H.index_select(0, col) * M.values().unsqueeze(1).to(H.dtype)
    out = torch.zeros(M.shape[0], H.shape[1], dtype=H.dtype, device=H.device)
    return out.scatter_reduce(0, rows.unsqueeze(1).expand_as(src), src, reduce,
                              include_self=False)


def torch_spmm(M: torch.Tensor, H: torch.Tensor, reduce: str = "sum",
               scatter: bool | None = None) -> torch.Tensor:
    """M @ H with the rows' products reduced by `reduce` (sum, mean, max, min) in plain PyTorch:
    ``torch.sparse.mm`` on the CPU and for sums, `scatter_spmm` for the other reductions off the
    CPU (or wherever `scatter` says so)."""
    # PyTorch's reduce kernel (aten::_sparse_mm_reduce_impl) exists for the CPU only; on CUDA
    # it raises NotImplementedError, for "sum" too: the two-argument torch.sparse.mm (addmm) has
    # a CUDA kernel and sums.
    if scatter is None:
        scatter = M.device.type != "cpu"
    if reduce == "sum":
        return torch.sparse.mm(M, H, "sum") if M.device.type == "cpu" else torch.sparse.mm(M, H)
    if scatter:
        return scatter_spmm(M, H, TORCH_REDUCE[reduce])
    return torch.sparse.mm(M, H, TORCH_REDUCE[reduce])


def main(argv=None):
    p = arguments("2-layer GraphSAGE on Planetoid")
    p.add_argument("--aggr", default="mean", choices=["mean", "max", "min", "sum"])
    p.add_argument("--impl", default="sparsetir", choices=["sparsetir", "torch"])
    a = p.parse_args(argv)
    if a.impl == "sparsetir":
        def spmm(M, H, reduce="sum"):
            return ops.spmm(M, H, reduce=reduce)
    else:
        spmm = torch_spmm
    A_hat, X, labels, split = load(a.data)
    # The neighbours without self loops, each edge weighted 1.
    adj = A_hat.copy()
    adj.setdiag(0)
    adj.eliminate_zeros()
    adj.data[:] = 1.0
    device = torch.device(a.device)
    if a.impl == "sparsetir":
        A = ops.CsrTensor.from_scipy(adj.astype(np.float32), device=device)
        Xt = ops.CsrTensor.from_scipy(X, device=device)
    else:
        A, Xt = csr_tensor(adj.astype(np.float32)).to(device), csr_tensor(X).to(device)
    y = torch.from_numpy(labels).to(device)
    idx = {k: torch.from_numpy(v).to(device) for k, v in split.items()}
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    nclass, nfeat = int(labels.max()) + 1, X.shape[1]

    def fit(seed: int):
        gen = torch.Generator().manual_seed(seed)
        W1s, W1n = glorot(nfeat, HIDDEN, gen), glorot(nfeat, HIDDEN, gen)
        W2s, W2n = glorot(HIDDEN, nclass, gen), glorot(HIDDEN, nclass, gen)
        W1s, W1n, W2s, W2n = (torch.nn.Parameter(w.detach().to(device))
                              for w in (W1s, W1n, W2s, W2n))
        b1 = torch.nn.Parameter(torch.zeros(HIDDEN, device=device))
        b2 = torch.nn.Parameter(torch.zeros(nclass, device=device))
        opt = torch.optim.Adam([
            {"params": [W1s, W1n, b1], "weight_decay": WEIGHT_DECAY},
            {"params": [W2s, W2n, b2], "weight_decay": 0.0},
        ], lr=LR)

        def forward(training: bool):
            h = spmm(Xt, W1s) + spmm(A, spmm(Xt, W1n), reduce=a.aggr) + b1
            h = torch.nn.functional.dropout(torch.relu(h), DROPOUT, training)
            return h @ W2s + spmm(A, h @ W2n, reduce=a.aggr) + b2

        return train(compiled(a, forward, a.impl == "sparsetir"), opt, y, idx, a.epochs, sync)

    run_seeds(a, f"GraphSAGE, {a.aggr}, {a.impl}", fit, model="sage", aggr=a.aggr, impl=a.impl)


if __name__ == "__main__":
    main()
