"""Masked attention on the CPU in PyTorch, side by side with `sparsetir bench attention`.

For each mask (a .mtx file, every stored entry one token pair; `--block B`: each entry a B x B
block of tokens, as `sparsetir bench attention --block B`), per head
`O = softmax((Q K^T) masked / sqrt(D)) V`, float32, one JSON line per peer:

- `torch sdpa (dense boolean mask)`: `scaled_dot_product_attention` with the mask as a dense
  boolean mask (the peer of issue 13's GPU bar, here on the CPU);
- `torch sparse (sampled_addmm, softmax, spmm)`: the same three steps as sparsetir's, on a CSR
  tensor: `torch.sparse.sampled_addmm` for the scores, the row softmax over the stored entries
  (`torch.sparse.softmax` of the COO form), `torch.sparse.mm` for the product.

Q, K and V are random in [0, 1) (`heads x n x D`). Each time is the smallest of three medians
of `--repeat` runs after warm-up. The outputs are checked against each other on every case
(the largest absolute difference is reported as `maxdiff_vs_sdpa`); rows that store nothing
give 0 in the sparse form and NaN in SDPA's (a fully masked row), so those rows are left out.

    OMP_NUM_THREADS=2 python bench/attention_cpu_peers.py --mask m4k.mtx --heads 2 --feat 64
"""
import argparse
import json
import sys
import warnings

import numpy as np
import scipy.io
import scipy.sparse as sp
import torch
import torch.nn.functional as F

from pytiming import timed


def token_mask(path, block):
    m = sp.csr_matrix(scipy.io.mmread(path))
    m.sum_duplicates()
    m.data[:] = 1.0
    if block > 1:
        m = sp.csr_matrix(sp.kron(m, np.ones((block, block), dtype=np.float32)))
    m.sort_indices()
    return m.astype(np.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mask", action="append", required=True, help="mask FILE.mtx (repeatable)")
    ap.add_argument("--block", type=int, default=1)
    ap.add_argument("--heads", type=int, default=1)
    ap.add_argument("--feat", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=10)
    a = ap.parse_args()
    warnings.filterwarnings("ignore", message="Sparse")
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    for path in a.mask:
        m = token_mask(path, a.block)
        n = m.shape[0]
        h, d = a.heads, a.feat
        stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        q, k, v = (torch.rand(h, n, d) for _ in range(3))
        scale = 1.0 / d ** 0.5
        dense_mask = torch.from_numpy(m.toarray() != 0)
        pattern = torch.sparse_csr_tensor(
            torch.from_numpy(m.indptr.astype(np.int64)),
            torch.from_numpy(m.indices.astype(np.int64)),
            torch.zeros(m.nnz),
            size=(n, n),
        )

        def sdpa():
            return F.scaled_dot_product_attention(q, k, v, attn_mask=dense_mask)

        def sparse():
            outs = []
            for i in range(h):
                s = torch.sparse.sampled_addmm(pattern, q[i], k[i].T, beta=0.0, alpha=scale)
                p = torch.sparse.softmax(s.to_sparse_coo(), dim=1)
                outs.append(torch.sparse.mm(p, v[i]))
            return torch.stack(outs)

        with torch.no_grad():
            ref = sdpa()
            rows = torch.from_numpy(np.diff(m.indptr) > 0)
            common = dict(op="attention", matrix=stem, rows=n, nnz=int(m.nnz), heads=h, feat=d,
                          block=a.block, dtype="float32", threads=a.threads,
                          torch=torch.__version__)
            for name, fn in [("torch sdpa (dense boolean mask)", sdpa),
                             ("torch sparse (sampled_addmm, softmax, spmm)", sparse)]:
                try:
                    out = fn()
                    diff = float((out - ref)[:, rows].abs().max()) if rows.any() else 0.0
                    s = timed(fn, a.repeat, warmup=a.warmup)
                    print(json.dumps(dict(peer=name, seconds=s, maxdiff_vs_sdpa=diff, **common)))
                except Exception as e:  # noqa: BLE001 - a peer this PyTorch lacks is reported
                    print(json.dumps(dict(peer=name, error=str(e).splitlines()[0][:200],
                                          **common)))
                sys.stdout.flush()


if __name__ == "__main__":
    main()
