"""sparsetir.ops on the GPU path without a GPU: under ``_device.emulated()`` CPU tensors go
through exactly what CUDA tensors go through (the catalog kernels under their default GPU
schedules, operands passed by address, the structure frozen and copied once), run by the
CUDA emulator. Forward values and gradients are checked against dense PyTorch references;
a real GPU runs the same tests on CUDA tensors (``test_on_a_real_gpu``, skipped without
one)."""

import numpy as np
import pytest
import scipy.sparse as sp

from conftest import random_csr

torch = pytest.importorskip("torch")

from sparsetir import SparsetirError, ops  # noqa: E402
from sparsetir import _device  # noqa: E402


def csr_tensor(A, dtype=torch.float32, device="cpu"):
    return torch.sparse_csr_tensor(
        torch.from_numpy(A.indptr.astype(np.int64)), torch.from_numpy(A.indices.astype(np.int64)),
        torch.from_numpy(A.data).to(dtype), size=A.shape).to(device)


def dense(A, dtype=torch.float64, device="cpu"):
    return torch.from_numpy(A.toarray()).to(dtype).to(device)


def gpu_targets():
    """The targets of the GPU kernels built so far."""
    return {key[4] for key in _device._kernels}


def power_law(m, seed):
    """A matrix with a few rows much longer than the mean (SpMM takes its split schedule)."""
    rng = np.random.default_rng(seed)
    rows, cols = [], []
    for i in range(m):
        deg = 80 if i % 17 == 0 else int(rng.integers(0, 3))
        for j in rng.choice(m, size=min(deg, m), replace=False):
            rows.append(i)
            cols.append(j)
    A = sp.csr_matrix((rng.random(len(rows)) + 0.5, (rows, cols)), shape=(m, m))
    A.sum_duplicates()
    A.sort_indices()
    return A.astype(np.float32)


def check_forward_and_gradients(device):
    """Every operator and its gradients on `device`, against dense float64 references."""
    for A in (random_csr(45, 38, 0.15, seed=1, empty_rows=(3, 20)), power_law(120, 2)):
        m, n = A.shape
        At = csr_tensor(A, device=device)
        rng = np.random.default_rng(3)
        for feat in (32, 7):
            B = torch.from_numpy(rng.random((n, feat)).astype(np.float32)).to(device)
            B.requires_grad_(True)
            values = At.values().detach().clone().requires_grad_(True)
            Av = torch.sparse_csr_tensor(At.crow_indices(), At.col_indices(), values,
                                         size=A.shape)
            C = ops.spmm(Av, B)
            assert C.device == B.device and C.dtype == torch.float32
            want = dense(A, device=device) @ B.detach().double()
            torch.testing.assert_close(C.double(), want, rtol=1e-5, atol=1e-5)
            G = torch.from_numpy(rng.random((m, feat)).astype(np.float32)).to(device)
            C.backward(G)
            # dB = Aᵀ G; d values[i, j] = G[i, :] · B[j, :].
            torch.testing.assert_close(B.grad.double(), dense(A, device=device).T @ G.double(),
                                       rtol=1e-5, atol=1e-5)
            rows = torch.repeat_interleave(torch.arange(m, device=device),
                                           At.crow_indices().diff())
            cols = At.col_indices()
            gv = (G.double()[rows] * B.detach().double()[cols]).sum(1)
            torch.testing.assert_close(values.grad.double(), gv, rtol=1e-5, atol=1e-5)
        # mean
        B = torch.from_numpy(rng.random((n, 16)).astype(np.float32)).to(device)
        deg = torch.from_numpy(np.maximum(np.diff(A.indptr), 1)).to(device).double()
        torch.testing.assert_close(ops.spmm(At, B, reduce="mean").double(),
                                   (dense(A, device=device) @ B.double()) / deg[:, None],
                                   rtol=1e-5, atol=1e-5)
        # SDDMM, with gradients of X, Y and the values.
        X = torch.from_numpy(rng.random((m, 8)).astype(np.float32)).to(device).requires_grad_()
        Y = torch.from_numpy(rng.random((n, 8)).astype(np.float32)).to(device).requires_grad_()
        values = At.values().detach().clone().requires_grad_(True)
        Av = torch.sparse_csr_tensor(At.crow_indices(), At.col_indices(), values, size=A.shape)
        S = ops.sddmm(Av, X, Y)
        mask = dense(A, device=device) != 0
        Sd = (X.double() @ Y.double().T) * dense(A, device=device)
        torch.testing.assert_close(S.to_dense().double(), Sd, rtol=1e-5, atol=1e-5)
        S.values().sum().backward()
        w = dense(A, device=device)
        torch.testing.assert_close(X.grad.double(), w @ Y.detach().double(), rtol=1e-5,
                                   atol=1e-5)
        torch.testing.assert_close(Y.grad.double(), w.T @ X.detach().double(), rtol=1e-5,
                                   atol=1e-5)
        xy = (X.detach().double() @ Y.detach().double().T)[mask]
        torch.testing.assert_close(values.grad.double(), xy, rtol=1e-5, atol=1e-5)
        # SpMV
        x = torch.from_numpy(rng.random(n).astype(np.float32)).to(device).requires_grad_()
        y = ops.spmv(At, x)
        torch.testing.assert_close(y.double(), dense(A, device=device) @ x.detach().double(),
                                   rtol=1e-5, atol=1e-5)
        y.sum().backward()
        torch.testing.assert_close(x.grad.double(), dense(A, device=device).T.sum(1),
                                   rtol=1e-5, atol=1e-5)
        # The row softmax and its gradient, against torch's on the stored positions.
        values = At.values().detach().clone().requires_grad_(True)
        Av = torch.sparse_csr_tensor(At.crow_indices(), At.col_indices(), values, size=A.shape)
        P = ops.sparse_softmax(Av)
        full = torch.full((m, n), float("-inf"), dtype=torch.float64, device=device)
        vd = values.detach().double().clone().requires_grad_(True)
        full = full.index_put((rows, cols), vd)
        ref = torch.softmax(full, dim=1)
        ref = torch.nan_to_num(ref)[rows, cols]
        torch.testing.assert_close(P.values().double(), ref.detach(), rtol=1e-5, atol=1e-6)
        weights = torch.from_numpy(rng.random(len(cols))).to(device)
        (P.values().double() * weights).sum().backward()
        (ref * weights).sum().backward()
        torch.testing.assert_close(values.grad.double(), vd.grad, rtol=1e-4, atol=1e-6)


def test_every_operator_and_gradient_through_the_gpu_kernels_in_the_emulator():
    with _device.emulated():
        check_forward_and_gradients("cpu")
    assert gpu_targets() == {"cuda-emu"}
    # The power-law matrix took SpMM's split schedule, the other one warp a row.
    schedules = {key[3] for key in _device._kernels if key[0] == "csrmm"}
    assert any("threadIdx.y" in s and "atomic" in s for s in schedules), schedules
    assert len(schedules) >= 2


def test_masked_attention_and_float64_in_the_emulator():
    A = random_csr(30, 26, 0.2, seed=5, empty_rows=(4,))
    rng = np.random.default_rng(6)
    Q = torch.from_numpy(rng.random((30, 16)))
    K = torch.from_numpy(rng.random((26, 16)))
    V = torch.from_numpy(rng.random((26, 8)))
    with _device.emulated():
        O = ops.masked_attention(A, Q, K, V)
        assert O.dtype == torch.float64
        Qg = Q.clone().requires_grad_(True)
        Og = ops.masked_attention(A, Qg, K, V)
        Og.sum().backward()
    mask = torch.from_numpy(A.toarray() != 0)
    scores = (Q @ K.T) / np.sqrt(16)
    scores = scores.masked_fill(~mask, float("-inf"))
    want = torch.nan_to_num(torch.softmax(scores, dim=1)) @ V
    torch.testing.assert_close(O, want, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(Og.detach(), want, rtol=1e-10, atol=1e-12)
    Qr = Q.clone().requires_grad_(True)
    s2 = ((Qr @ K.T) / np.sqrt(16)).masked_fill(~mask, float("-inf"))
    (torch.nan_to_num(torch.softmax(s2, dim=1)) @ V).sum().backward()
    torch.testing.assert_close(Qg.grad, Qr.grad, rtol=1e-8, atol=1e-10)


def test_gpu_path_refusals():
    A = random_csr(20, 20, 0.2, seed=7)
    B = torch.ones(20, 4)
    with _device.emulated():
        with pytest.raises(ValueError, match="rows"):
            ops.spmm(csr_tensor(A), torch.ones(19, 4))
    # Operands on two devices (a meta tensor stands for a GPU one here).
    with pytest.raises(SparsetirError, match="different devices"):
        ops.spmm(csr_tensor(A), B.to("meta"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("reduce", ["max", "min"])
def test_max_and_min_aggregation_on_the_gpu_path_equal_the_cpu_path(dtype, reduce):
    """Forward and both gradients, with ties (values from few levels) and an empty row: the
    GPU kernels (float16: the float32 kernel forward, the gradient in PyTorch) give the CPU
    path's results, which test_aggregate.py checks against the definition."""
    A = random_csr(30, 25, 0.25, seed=14, empty_rows=(6,))
    rng = np.random.default_rng(15)
    A.data = rng.choice([-1.0, -0.5, 0.5, 1.0], size=A.nnz).astype(np.float32)
    Bn = rng.choice([-1.0, 0.5, 1.0], size=(25, 9))
    G = torch.from_numpy(rng.random((30, 9))).to(dtype)

    def run(gpu):
        values = torch.from_numpy(A.data).to(dtype).requires_grad_(True)
        At = torch.sparse_csr_tensor(torch.from_numpy(A.indptr.astype(np.int64)),
                                     torch.from_numpy(A.indices.astype(np.int64)), values,
                                     size=A.shape)
        B = torch.from_numpy(Bn).to(dtype).requires_grad_(True)
        if gpu:
            with _device.emulated():
                C = ops.spmm(At, B, reduce=reduce)
                C.backward(G)
        else:
            C = ops.spmm(At, B, reduce=reduce)
            C.backward(G)
        return C.detach(), values.grad, B.grad

    _device._kernels.clear()
    _device._by_call.clear()
    gpu, cpu = run(True), run(False)
    assert gpu_targets() == {"cuda-emu"}
    assert gpu[0].dtype == dtype
    built = {key[0] for key in _device._kernels}
    assert "csrmm_" + reduce in built
    if dtype != torch.float16:
        assert {"extreme_count", "extreme_grad_a", "extreme_grad_b"} <= built, built
    for a, b in zip(gpu, cpu):
        torch.testing.assert_close(a, b, rtol=1e-3 if dtype == torch.float16 else 1e-6,
                                   atol=1e-3 if dtype == torch.float16 else 1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_on_a_real_gpu():
    _device._kernels.clear()
    _device._by_call.clear()
    check_forward_and_gradients("cuda")
    assert gpu_targets() == {"cuda"}
    # A compiled kernel called on CUDA tensors gives its results on their device.
    import os

    import sparsetir
    from conftest import KERNELS

    A = random_csr(30, 20, 0.2, seed=16)
    B = torch.rand(20, 8, device="cuda")
    k = sparsetir.compile(os.path.join(KERNELS, "csrmm.sp"), target="cuda")
    C = k(A=csr_tensor(A, device="cuda"), B=B)["C"]
    assert C.device.type == "cuda"
    torch.testing.assert_close(C.double(), dense(A, device="cuda") @ B.double(), rtol=1e-5,
                               atol=1e-5)


def test_the_gcn_example_trains_through_the_gpu_kernels():
    """examples/gcn.py's products on the GPU path (emulated) give the CPU path's logits and
    gradients, dropout included (the same seed)."""
    import os
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
        __file__))), "examples"))
    from gcn import make_ops

    A = random_csr(60, 60, 0.06, seed=8)
    X = random_csr(60, 45, 0.05, seed=9)
    g = torch.Generator().manual_seed(10)
    W1 = torch.rand(45, 16, generator=g)
    W2 = torch.rand(16, 5, generator=g)

    def step(device_path):
        first_layer, propagate = make_ops(A, X, "cpu")
        w1, w2 = W1.clone().requires_grad_(True), W2.clone().requires_grad_(True)
        torch.manual_seed(11)
        if device_path:
            with _device.emulated():
                out = propagate(torch.relu(propagate(first_layer(w1, True))) @ w2)
                out.square().sum().backward()
        else:
            out = propagate(torch.relu(propagate(first_layer(w1, True))) @ w2)
            out.square().sum().backward()
        return out.detach(), w1.grad, w2.grad

    _device._kernels.clear()
    _device._by_call.clear()
    gpu, cpu = step(True), step(False)
    assert gpu_targets() == {"cuda-emu"}
    for a, b in zip(gpu, cpu):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_float16_operands_in_the_emulator():
    """16-bit operands: the GPU kernels read float16, add in float32, and the result is
    float16 (as on the CPU path), within float16's rounding of the float64 product."""
    A = random_csr(40, 30, 0.2, seed=12, empty_rows=(5,))
    At = csr_tensor(A, dtype=torch.float16)
    rng = np.random.default_rng(13)
    B = torch.from_numpy(rng.random((30, 32)).astype(np.float16))
    x = torch.from_numpy(rng.random(30).astype(np.float16))
    with _device.emulated():
        C = ops.spmm(At, B)
        y = ops.spmv(At, x)
    Ad = torch.from_numpy(A.toarray()).half().double()
    assert C.dtype == torch.float16 and y.dtype == torch.float16
    torch.testing.assert_close(C.double(), Ad @ B.double(), rtol=2e-3, atol=2e-3)
    torch.testing.assert_close(y.double(), Ad @ x.double(), rtol=2e-3, atol=2e-3)
    assert ("csrmm", "float16") in {k[:2] for k in _device._kernels}


def test_large_power_law_graphs_take_the_hyb_spmm():
    """Above `_device.HYB_MIN_NNZ` stored entries (lowered here), a power-law matrix's SpMM
    runs the hyb kernels, its values laid out by a gather at each call: forward and both
    gradients equal the dense reference."""
    old = _device.HYB_MIN_NNZ
    _device.HYB_MIN_NNZ = 0
    try:
        A = power_law(150, 17)
        At = csr_tensor(A)
        rng = np.random.default_rng(18)
        B = torch.from_numpy(rng.random((150, 40)).astype(np.float32)).requires_grad_(True)
        values = At.values().detach().clone().requires_grad_(True)
        Av = torch.sparse_csr_tensor(At.crow_indices(), At.col_indices(), values, size=A.shape)
        with _device.emulated():
            C = ops.spmm(Av, B)
            G = torch.from_numpy(rng.random((150, 40)).astype(np.float32))
            C.backward(G)
        Ad = dense(A)
        torch.testing.assert_close(C.double(), Ad @ B.detach().double(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(B.grad.double(), Ad.T @ G.double(), rtol=1e-5, atol=1e-5)
        rows = torch.repeat_interleave(torch.arange(150), At.crow_indices().diff())
        gv = (G.double()[rows] * B.detach().double()[At.col_indices()]).sum(1)
        torch.testing.assert_close(values.grad.double(), gv, rtol=1e-5, atol=1e-5)
        s = ops.csr_structure(Av)
        assert any(isinstance(k, tuple) and k[0] == "hyb" for k in s._torch), "no hyb plan"
        # Aᵀ's rows (A's columns) are even: its SpMM (B's gradient) runs CSR.
        t = s.transpose()[0]
        assert not any(isinstance(k, tuple) and k[0] == "hyb" for k in t._torch)
    finally:
        _device.HYB_MIN_NNZ = old
