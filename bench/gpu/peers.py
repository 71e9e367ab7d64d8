"""cuSPARSE through PyTorch on the GPU, side by side with `sparsetir bench --device cuda`.

For each matrix: SpMM (torch.sparse.mm on a CSR tensor, cuSPARSE SpMM), SDDMM
(torch.sparse.sampled_addmm, cuSPARSE SDDMM) and SpMV (CSR @ vector, cuSPARSE SpMV), float32, with
the same value conventions as the sparsetir bench (random values, outputs checked against a dense
float64 reference on small cases). Times are the smallest of three medians of 50 CUDA-event timings
after warm-up. One JSON line per case on stdout.
"""
import argparse
import json
import sys

import numpy as np
import scipy.io
import scipy.sparse as sp
import torch


def median_ms(fn, warmup=10, repeat=50, rounds=3):
    """The smallest of `rounds` medians of `repeat` CUDA-event timings, after warm-up: one slow
    stretch of the machine (seen once on an H100, session 17: a 0.04 ms SpMM timed at 0.57 ms)
    cannot make the peer look slower than it is."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    medians = []
    for _ in range(rounds):
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
        medians.append(times[len(times) // 2])
    return min(medians)


def load(path):
    m = scipy.io.mmread(path)
    m = sp.csr_matrix(m, dtype=np.float32)
    m.sum_duplicates()
    m.sort_indices()
    rng = np.random.default_rng(1)
    m.data = rng.random(m.nnz, dtype=np.float32)
    return m


def device_ms(fn, repeat=20):
    """The GPU time of the kernels one call of `fn` launches, in ms (their total over `repeat`
    calls, from torch.profiler's CUDA activity, divided by `repeat`), after a warm-up call:
    what `median_ms`'s events also count when the host takes longer to launch a call than its
    kernels run (seen for cuSPARSELt through PyTorch, session 45: 0.49 ms timed, 0.13 ms of
    kernel) is left out. None where the profiler reports no CUDA kernel (no GPU, or a build
    without CUDA activity)."""
    try:
        from torch.autograd import DeviceType
        from torch.profiler import ProfilerActivity, profile

        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(repeat):
                fn()
            torch.cuda.synchronize()
        us = 0.0
        for e in prof.events():
            if e.device_type == DeviceType.CUDA:
                us += getattr(e, "self_device_time_total", None) or getattr(
                    e, "self_cuda_time_total", 0.0)
        return us / 1e3 / repeat if us > 0 else None
    except Exception:  # noqa: BLE001 (a profiler this build lacks leaves the field out)
        return None


def emit(**kw):
    print(json.dumps(kw))
    sys.stdout.flush()


def torch_csr(m, dev):
    return torch.sparse_csr_tensor(
        torch.from_numpy(m.indptr.astype(np.int32)),
        torch.from_numpy(m.indices.astype(np.int32)),
        torch.from_numpy(m.data),
        size=m.shape,
    ).to(dev)


def relerr(got, want):
    return float(torch.linalg.norm(got.double() - want.double()) / torch.linalg.norm(want.double()))


class CusparseBsrmm:
    """cuSPARSE's BSR SpMM (`cusparseSbsrmm`, float32) called directly through ctypes: PyTorch
    2.11 sends BSR @ dense on CUDA to its own Triton kernel, not to cuSPARSE."""

    def __init__(self):
        import ctypes
        import glob
        import os

        cands = []
        for root in [os.path.dirname(torch.__file__) + "/..", "/usr/local/cuda/lib64"]:
            cands += sorted(glob.glob(root + "/nvidia/*/lib/libcusparse.so*"))
            cands += sorted(glob.glob(root + "/nvidia/cusparse/lib/libcusparse.so*"))
            cands += sorted(glob.glob(root + "/libcusparse.so*"))
        if not cands:
            raise RuntimeError("libcusparse not found")
        self.ct = ctypes
        self.lib = ctypes.CDLL(cands[0])
        self.path = cands[0]
        self.handle = ctypes.c_void_p()
        self._ok(self.lib.cusparseCreate(ctypes.byref(self.handle)), "cusparseCreate")
        self.descr = ctypes.c_void_p()
        self._ok(self.lib.cusparseCreateMatDescr(ctypes.byref(self.descr)), "cusparseCreateMatDescr")
        self.alpha = ctypes.c_float(1.0)
        self.beta = ctypes.c_float(0.0)

    def _ok(self, status, what):
        if status != 0:
            raise RuntimeError(f"{what}: cuSPARSE status {status}")

    def prepare(self, Ab, B):
        """C (column-major m x n) = Ab (BSR, row-major blocks) @ B (row-major k x n, passed
        as the transpose of a column-major n x k)."""
        ct = self.ct
        block = Ab.values().shape[1]
        m, k = Ab.shape
        n = B.shape[1]
        C = torch.empty(n, m, device=B.device, dtype=torch.float32)
        self._ok(self.lib.cusparseSetStream(self.handle, ct.c_void_p(torch.cuda.current_stream().cuda_stream)),
                 "cusparseSetStream")
        crow = Ab.crow_indices().to(torch.int32)
        col = Ab.col_indices().to(torch.int32)
        vals = Ab.values().contiguous()
        keep = (crow, col, vals, B, C)
        args = (self.handle, 0, 0, 1, m // block, n, k // block, col.numel(),
                ct.byref(self.alpha), self.descr, ct.c_void_p(vals.data_ptr()),
                ct.c_void_p(crow.data_ptr()), ct.c_void_p(col.data_ptr()), block,
                ct.c_void_p(B.data_ptr()), n, ct.byref(self.beta), ct.c_void_p(C.data_ptr()), m)
        fn = self.lib.cusparseSbsrmm

        def run():
            self._ok(fn(*args), "cusparseSbsrmm")
            return keep[4].t()

        return run


def bsr_cases(spec, feats, dev, name):
    """Block-sparse SpMM: cuSPARSE's bsrmm (float32: cuSPARSE's BSR SpMM has no 16-bit form),
    and PyTorch's BSR @ dense (its Triton kernels) in float32, float16 and bfloat16."""
    path, block = spec.rsplit(":", 1)
    block = int(block)
    m = load(path)
    stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    A = torch_csr(m, dev)
    Ab = A.to_sparse_bsr((block, block))
    dense = A.to_dense()
    try:
        cus = CusparseBsrmm()
    except Exception as e:  # noqa: BLE001 - reported, the other peers still run
        cus = None
        emit(peer="cusparse bsrmm (cusparseSbsrmm)", op="spmm_bsr", matrix=stem, block=block,
             error=str(e)[:200], device=name)
    for f in feats:
        B = torch.rand(m.shape[1], f, device=dev)
        want = dense @ B
        if cus is not None:
            try:
                run = cus.prepare(Ab, B)
                err = relerr(run(), want)
                ms = median_ms(run)
                emit(peer="cusparse bsrmm (cusparseSbsrmm)", op="spmm_bsr", matrix=stem,
                     block=block, feat=f, dtype="float32", nnz=int(m.nnz), ms=ms, relerr=err,
                     gflops=2.0 * m.nnz * f / (ms * 1e-3) / 1e9, library=cus.path, device=name)
            except Exception as e:  # noqa: BLE001
                emit(peer="cusparse bsrmm (cusparseSbsrmm)", op="spmm_bsr", matrix=stem,
                     block=block, feat=f, error=str(e)[:200], device=name)
        err = relerr(Ab @ B, want)
        ms = median_ms(lambda: Ab @ B)
        emit(peer="torch BSR float32 (Triton)", op="spmm_bsr", matrix=stem, block=block,
             feat=f, dtype="float32", nnz=int(m.nnz), ms=ms, relerr=err,
             gflops=2.0 * m.nnz * f / (ms * 1e-3) / 1e9, device=name)
        for dt, dname in [(torch.float16, "float16"), (torch.bfloat16, "bfloat16")]:
            try:
                Abh = Ab.to(dt)
                Bh = B.to(dt)
                err = relerr(Abh @ Bh, want)
                ms = median_ms(lambda: Abh @ Bh)
                emit(peer=f"torch BSR {dname}", op="spmm_bsr", matrix=stem, block=block, feat=f,
                     dtype=dname, nnz=int(m.nnz), ms=ms, relerr=err,
                     gflops=2.0 * m.nnz * f / (ms * 1e-3) / 1e9, device=name)
            except Exception as e:  # noqa: BLE001 - a peer PyTorch lacks is reported, not fatal
                emit(peer=f"torch BSR {dname}", op="spmm_bsr", matrix=stem, block=block, feat=f,
                     dtype=dname, error=str(e).splitlines()[0][:200], device=name)


def attention_cases(path, heads, d, dev, name):
    """Masked attention: PyTorch's scaled_dot_product_attention with the mask as a dense boolean
    mask (and, for scale, the same attention with no mask at all)."""
    import torch.nn.functional as F

    m = load(path)
    stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    n = m.shape[0]
    mask = torch.from_numpy(m.toarray() != 0).to(dev)
    for dt, dname in [(torch.float32, "float32"), (torch.float16, "float16")]:
        q, k, v = (torch.rand(1, heads, n, d, device=dev, dtype=dt) for _ in range(3))
        ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
        emit(peer="torch sdpa (dense boolean mask)", op="attention", matrix=stem, heads=heads,
             feat=d, dtype=dname, nnz=int(m.nnz), ms=ms, device=name)
        ms = median_ms(lambda: F.scaled_dot_product_attention(q, k, v))
        emit(peer="torch sdpa (no mask)", op="attention_nomask", matrix=stem, heads=heads,
             feat=d, dtype=dname, ms=ms, device=name)


def gemm_cases(n, dev, name):
    """Dense float16 GEMM (cuBLAS through torch.matmul), n x n x n, float32 accumulation."""
    for dt, dname in [(torch.float16, "float16")]:
        a = torch.rand(n, n, device=dev, dtype=dt)
        b = torch.rand(n, n, device=dev, dtype=dt)
        ms = median_ms(lambda: a @ b)
        emit(peer="cublas (torch.matmul)", op="gemm", m=n, n=n, k=n, dtype=dname, ms=ms,
             device_ms=device_ms(lambda: a @ b), tflops=2.0 * n**3 / (ms * 1e-3) / 1e12,
             device=name)


def mask24(n, dev, dt):
    """An n x n float16 matrix of values in [0.5, 1] with 2 of every 4 columns of a row stored,
    the positions random (the distribution of `sparsetir gen mask24`)."""
    g = torch.Generator(device="cpu").manual_seed(24)
    keys = torch.rand(n, n // 4, 4, generator=g)
    keep = torch.zeros(n, n // 4, 4, dtype=torch.bool)
    keep.scatter_(2, keys.argsort(dim=2)[:, :, :2], True)
    vals = 0.5 + 0.5 * torch.rand(n, n, generator=g)
    return (vals * keep.reshape(n, n)).to(device=dev, dtype=dt)


def semi24_cases(n, dev, name):
    """2:4 sparse x dense in PyTorch's semi-structured tensors, n x n x n, float16: cuSPARSELt
    (its default algorithm, and the one its own search picks for this shape) and CUTLASS; the
    best library for 2:4 on the device, beside cuBLAS's dense GEMM of the same shape. Each
    product is checked against the dense one; a backend the build lacks gives an `error` line."""
    dt = torch.float16
    a = mask24(n, dev, dt)
    b = torch.rand(n, n, device=dev, dtype=dt)
    want = (a.float() @ b.float())

    def run(peer, fn):
        try:
            got = fn().float()
            relerr = float((got - want).norm() / want.norm())
            ms = median_ms(fn)
            emit(peer=peer, op="spmm24", m=n, n=n, k=n, dtype="float16", ms=ms,
                 device_ms=device_ms(fn), tflops=2.0 * n**3 / (ms * 1e-3) / 1e12,
                 check=relerr < 1e-2, relerr=relerr, device=name)
        except Exception as e:  # noqa: BLE001 (a missing backend is a line, not a failed run)
            emit(peer=peer, op="spmm24", m=n, n=n, k=n, dtype="float16",
                 error=f"{type(e).__name__}: {e}"[:300], device=name)

    try:
        from torch.sparse import SparseSemiStructuredTensorCUSPARSELT
        s = SparseSemiStructuredTensorCUSPARSELT.from_dense(a)
    except Exception as e:  # noqa: BLE001
        s = None
        emit(peer="cusparselt (torch semi-structured)", op="spmm24", m=n, n=n, k=n,
             dtype="float16", error=f"{type(e).__name__}: {e}"[:300], device=name)
    if s is not None:
        run("cusparselt (torch semi-structured)", lambda: torch.mm(s, b))
        try:
            found = torch._cslt_sparse_mm_search(s.packed, b)
            alg = int(found[0] if isinstance(found, (tuple, list)) else found)
            run(f"cusparselt (searched, alg {alg})",
                lambda: torch._cslt_sparse_mm(s.packed, b, alg_id=alg))
        except Exception as e:  # noqa: BLE001
            emit(peer="cusparselt (searched)", op="spmm24", m=n, n=n, k=n, dtype="float16",
                 error=f"{type(e).__name__}: {e}"[:300], device=name)
    try:
        from torch.sparse import SparseSemiStructuredTensorCUTLASS
        c = SparseSemiStructuredTensorCUTLASS.from_dense(a)
        run("cutlass (torch semi-structured)", lambda: torch.mm(c, b))
    except Exception as e:  # noqa: BLE001
        emit(peer="cutlass (torch semi-structured)", op="spmm24", m=n, n=n, k=n,
             dtype="float16", error=f"{type(e).__name__}: {e}"[:300], device=name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--matrix", action="append", default=[])
    ap.add_argument("--bsr", action="append", default=[], help="FILE.mtx:BLOCK")
    ap.add_argument("--bsr-feats", default="64,128,256,512")
    ap.add_argument("--attention", action="append", default=[], help="mask FILE.mtx")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--gemm", type=int, action="append", default=[])
    ap.add_argument("--spmm-feats", default="32,64,128,256,512")
    ap.add_argument("--sddmm-feats", default="32,128")
    a = ap.parse_args()
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(0)
    for spec in a.bsr:
        bsr_cases(spec, [int(x) for x in a.bsr_feats.split(",")], dev, name)
    for path in a.attention:
        attention_cases(path, a.heads, a.head_dim, dev, name)
    for n in a.gemm:
        gemm_cases(n, dev, name)
        semi24_cases(n, dev, name)
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
