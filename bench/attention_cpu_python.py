"""`sparsetir.ops.masked_attention` from Python (numpy operands) beside PyTorch's
`scaled_dot_product_attention` with the mask as a dense boolean mask, on the CPU: one head of
`--feat` on the pattern of `--mask` (a token-level .mtx, e.g. `sparsetir gen block --rows 4096
--block 64 --density 0.1`). Prints one JSON line: each side's time (the smallest of three
medians of `--repeat` calls after two warm-up calls) and their largest output difference.
Needs the sparsetir package built with the release profile (`pip install ./python`; the test
script's development build checks launches far more slowly) and torch.

    OMP_NUM_THREADS=2 python bench/attention_cpu_python.py --mask m4k.mtx
"""
import argparse
import json

import numpy as np
import scipy.io
import scipy.sparse as sp
import torch
import torch.nn.functional as F

import sparsetir.ops as ops
from pytiming import timed


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mask", required=True)
    ap.add_argument("--feat", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=10)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    m = sp.csr_matrix(scipy.io.mmread(a.mask)).astype(np.float32)
    m.sort_indices()
    n, d = m.shape[0], a.feat
    rng = np.random.default_rng(0)
    q, k, v = (rng.random((n, d), dtype=np.float32) for _ in range(3))
    mask = torch.from_numpy(m.toarray() != 0)
    tq, tk, tv = (torch.from_numpy(x)[None] for x in (q, k, v))
    out = ops.masked_attention(m, q, k, v)
    ref = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=mask)[0].numpy()
    rows = np.diff(m.indptr) > 0
    print(json.dumps({
        "mask": a.mask.rsplit("/", 1)[-1], "rows": n, "nnz": int(m.nnz), "feat": d,
        "threads": a.threads, "maxdiff": float(np.abs(out - ref)[rows].max()),
        "sparsetir.ops.masked_attention": timed(lambda: ops.masked_attention(m, q, k, v), a.repeat),
        "torch sdpa (dense boolean mask)": timed(
            lambda: F.scaled_dot_product_attention(tq, tk, tv, attn_mask=mask), a.repeat),
    }))


if __name__ == "__main__":
    main()
