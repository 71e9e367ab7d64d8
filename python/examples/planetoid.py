"""Planetoid data and the GCN training loop shared by gcn.py (sparsetir) and gcn_torch.py (plain
PyTorch): both scripts train the same model with the same hyper-parameters, data preparation,
initialisation, evaluation and timing, and differ only in how the sparse products are computed.

The model is the 2-layer GCN of Kipf & Welling (ICLR 2017): 16 hidden units, ReLU, dropout 0.5
(on the input features and on the hidden layer), Adam with learning rate 0.01, weight decay
5e-4 on the first layer, 200 epochs, row-normalised features and the renormalised adjacency
D^-1/2 (A + I) D^-1/2. The reported test accuracy is the one at the epoch of best validation
accuracy; an epoch's time is one training step (forward, backward, optimizer step).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import warnings

import numpy as np
import scipy.io
import scipy.sparse as sp
import torch

HIDDEN = 16
DROPOUT = 0.5
LR = 0.01
WEIGHT_DECAY = 5e-4

# torch marks its sparse tensors as beta and warns once per process; the messages are noise here.
warnings.filterwarnings("ignore", message=".*[Ss]parse.*")


def load(path: str):
    """Adjacency (renormalised), row-normalised features, labels and the public split."""
    A = sp.csr_matrix(scipy.io.mmread(os.path.join(path, "A.mtx")), dtype=np.float64)
    A = ((A + A.T) > 0).astype(np.float64)  # undirected, unweighted
    A.setdiag(0)
    A.eliminate_zeros()
    A = A + sp.identity(A.shape[0], format="csr")
    d = np.asarray(A.sum(axis=1)).ravel() ** -0.5
    A_hat = sp.csr_matrix(sp.diags(d) @ A @ sp.diags(d), dtype=np.float32)
    A_hat.sort_indices()
    X = sp.csr_matrix(scipy.io.mmread(os.path.join(path, "X.mtx")), dtype=np.float64)
    s = np.asarray(X.sum(axis=1)).ravel()
    s[s == 0] = 1.0
    X = sp.csr_matrix(sp.diags(1.0 / s) @ X, dtype=np.float32)
    X.sort_indices()
    labels = np.load(os.path.join(path, "labels.npy")).astype(np.int64)
    split = {k: np.load(os.path.join(path, f"{k}.npy")).astype(np.int64)
             for k in ("train", "val", "test")}
    return A_hat, X, labels, split


def glorot(fan_in: int, fan_out: int, gen: torch.Generator) -> torch.nn.Parameter:
    r = (6.0 / (fan_in + fan_out)) ** 0.5
    return torch.nn.Parameter((torch.rand(fan_in, fan_out, generator=gen) * 2 - 1) * r)


class GCN(torch.nn.Module):
    """Parameters of the 2-layer GCN; `propagate` and `features` (the sparse products) are given
    by the script."""

    def __init__(self, nfeat: int, nclass: int, seed: int):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.W1 = glorot(nfeat, HIDDEN, gen)
        self.b1 = torch.nn.Parameter(torch.zeros(HIDDEN))
        self.W2 = glorot(HIDDEN, nclass, gen)
        self.b2 = torch.nn.Parameter(torch.zeros(nclass))


def train(forward, opt, y, idx, epochs: int, sync=lambda: None):
    """Trains for `epochs` steps (`forward(training)` gives the logits) and returns the test
    accuracy at the epoch of best validation accuracy, that validation accuracy, and each
    training step's milliseconds (`sync` waits for the device's queued work, on a GPU)."""
    best_val, test_at_best, epoch_ms = -1.0, 0.0, []
    for _ in range(epochs):
        sync()
        t0 = time.perf_counter()
        opt.zero_grad()
        out = forward(True)
        loss = torch.nn.functional.cross_entropy(out[idx["train"]], y[idx["train"]])
        loss.backward()
        opt.step()
        sync()
        epoch_ms.append((time.perf_counter() - t0) * 1e3)
        with torch.no_grad():
            pred = forward(False).argmax(dim=1)
            val = (pred[idx["val"]] == y[idx["val"]]).float().mean().item()
            test = (pred[idx["test"]] == y[idx["test"]]).float().mean().item()
        if val > best_val:
            best_val, test_at_best = val, test
    return test_at_best, best_val, epoch_ms


def arguments(description: str) -> argparse.ArgumentParser:
    """The command line the Planetoid examples share: data, seeds, epochs, threads, JSON."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--data", required=True, help="directory with A.mtx, X.mtx, labels.npy, "
                   "train.npy, val.npy, test.npy")
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads (set OMP_NUM_THREADS too for the sparsetir kernels)")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    p.add_argument("--device", default="cpu",
                   help="where the model and the data live: cpu or cuda (sparsetir then runs "
                        "its GPU kernels on the CUDA tensors)")
    p.add_argument("--compile", nargs="?", const="inductor", default=None, metavar="BACKEND",
                   help="torch.compile the forward pass whole (fullgraph=True) with BACKEND "
                        "(default inductor): the sparse products are then sparsetir's custom "
                        "operators on CsrTensor matrices")
    return p


def compiled(a, forward, traceable: bool):
    """`forward`, compiled whole when ``--compile`` asks (one graph for training, one for
    evaluation); `traceable` says whether its sparse products can be traced (torch's sparse
    tensors cannot: TorchDynamo refuses them)."""
    if not a.compile:
        return forward
    if not traceable:
        raise SystemExit("--compile: torch.compile cannot trace torch's sparse tensors; only "
                         "the sparsetir implementation (CsrTensor) compiles")
    return torch.compile(forward, fullgraph=True, backend=a.compile)


def run_seeds(a, label: str, fit, **extra) -> None:
    """Trains one model per seed of ``a.seeds`` (``fit(seed)`` returns what `train` returns,
    after ``torch.manual_seed(seed)``) and prints the results: the mean test accuracy and the
    median epoch, as text labelled `label` or as one JSON line holding `extra` too."""
    if a.threads:
        torch.set_num_threads(a.threads)
    accs, epoch_ms = [], []
    for seed in range(a.seeds):
        torch.manual_seed(seed)
        test_at_best, best_val, ms = fit(seed)
        epoch_ms.extend(ms)
        accs.append(test_at_best)
        if not a.json:
            print(f"seed {seed}: test accuracy {test_at_best:.4f} (best val {best_val:.4f})")
    dataset = os.path.basename(os.path.normpath(a.data)).replace("planetoid-", "")
    result = {"dataset": dataset, **extra, "test_accuracy": float(np.mean(accs)),
              "epoch_ms": statistics.median(epoch_ms), "seeds": a.seeds,
              "threads": torch.get_num_threads(), "device": a.device,
              "compile": a.compile}
    if a.json:
        print(json.dumps(result))
    else:
        print(f"{dataset} ({label}): mean test accuracy {result['test_accuracy']:.4f} over "
              f"{a.seeds} seed(s), median epoch {result['epoch_ms']:.2f} ms")


def run(name: str, make_ops, argv=None, traceable: bool = False) -> None:
    """Parses the command line, trains `--seeds` models and prints the results.

    `make_ops(A_hat, X, device)` returns `(first_layer, propagate)`: `first_layer(W, training)`
    computes dropout(X) @ W and `propagate(H)` computes A_hat @ H, on `device`; `traceable`
    says whether they can run under torch.compile (``--compile``).
    """
    a = arguments(f"2-layer GCN on Planetoid ({name})").parse_args(argv)
    device = torch.device(a.device)
    A_hat, X, labels, split = load(a.data)
    y = torch.from_numpy(labels).to(device)
    idx = {k: torch.from_numpy(v).to(device) for k, v in split.items()}
    first_layer, propagate = make_ops(A_hat, X, device)
    nclass = int(labels.max()) + 1
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def fit(seed: int):
        model = GCN(X.shape[1], nclass, seed).to(device)
        opt = torch.optim.Adam([
            {"params": [model.W1, model.b1], "weight_decay": WEIGHT_DECAY},
            {"params": [model.W2, model.b2], "weight_decay": 0.0},
        ], lr=LR)

        def forward(training: bool):
            h = propagate(first_layer(model.W1, training)) + model.b1
            h = torch.nn.functional.dropout(torch.relu(h), DROPOUT, training)
            return propagate(h @ model.W2) + model.b2

        return train(compiled(a, forward, traceable), opt, y, idx, a.epochs, sync)

    run_seeds(a, name, fit, impl=name)
