"""``ops.spmm(A, B, reduce=...)``: sum, mean, max and min aggregation of each row's products
``A[i, j] B[j, :]`` against a reference written here row by row, empty rows giving 0; and the
torch gradients against ``torch.scatter_reduce`` over the same products (ties share the
gradient, as ``amax``/``amin`` share it)."""

import numpy as np
import pytest
import scipy.sparse as sp

from sparsetir import ops
from conftest import random_csr


def reference(A, B, reduce):
    A = sp.csr_matrix(A)
    out = np.zeros((A.shape[0], B.shape[1]), np.float64)
    for i in range(A.shape[0]):
        lo, hi = A.indptr[i], A.indptr[i + 1]
        if lo == hi:
            continue
        prods = A.data[lo:hi, None].astype(np.float64) * B[A.indices[lo:hi]].astype(np.float64)
        out[i] = {"sum": prods.sum(0), "mean": prods.mean(0), "max": prods.max(0),
                  "min": prods.min(0)}[reduce]
    return out


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_each_reduction_equals_the_row_by_row_reference(reduce, dtype):
    A = random_csr(50, 40, 0.15, seed=3, dtype=dtype, empty_rows=(0, 17, 49))
    A.data -= 0.5  # negative products too, so that max and min differ from sums
    rng = np.random.default_rng(4)
    for feat in (1, 16, 37):
        B = (rng.random((40, feat)) - 0.5).astype(dtype)
        C = ops.spmm(A, B, reduce=reduce)
        assert C.dtype == dtype and C.shape == (50, feat)
        np.testing.assert_allclose(C, reference(A, B, reduce), rtol=1e-5, atol=1e-6)
        assert not C[[0, 17, 49]].any(), "empty rows give 0"


def test_float16_max_is_the_rounded_extremum():
    A = random_csr(30, 20, 0.3, seed=5)
    B = (np.random.default_rng(6).random((20, 8)) - 0.5).astype(np.float16)
    C = ops.spmm(A, B, reduce="max")
    assert C.dtype == np.float16
    want = reference(A, B, "max").astype(np.float32).astype(np.float16)
    np.testing.assert_array_equal(C, want)


def test_an_unknown_reduction_is_refused():
    A = random_csr(4, 4, 0.5, seed=1)
    with pytest.raises(ValueError, match="reduce must be one of"):
        ops.spmm(A, np.ones((4, 2), np.float32), reduce="prod")


torch = pytest.importorskip("torch")


def scatter_reference(A, values, B, reduce):
    """The same aggregation by torch: products per stored element, scattered into rows."""
    A = sp.csr_matrix(A)
    rows = torch.from_numpy(np.repeat(np.arange(A.shape[0]), np.diff(A.indptr)))
    cols = torch.from_numpy(A.indices.astype(np.int64))
    prods = values[:, None] * B[cols]
    idx = rows[:, None].expand_as(prods)
    out = torch.zeros(A.shape[0], B.shape[1], dtype=B.dtype)
    op = {"sum": "sum", "mean": "mean", "max": "amax", "min": "amin"}[reduce]
    return out.scatter_reduce(0, idx, prods, op, include_self=False)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min"])
def test_gradients_equal_torch_scatter_reduce(reduce, dtype):
    A = random_csr(30, 24, 0.2, seed=7, dtype=dtype, empty_rows=(2, 29))
    # Few distinct values, so that products tie; none zero (torch's amax backward counts its
    # initial zeros among the ties of a zero maximum, even with include_self=False).
    rng = np.random.default_rng(8)
    levels = np.array([-0.75, -0.5, -0.25, 0.25, 0.5, 0.75])
    A.data = rng.choice(levels, A.nnz).astype(dtype)
    Bn = rng.choice(levels, (24, 5)).astype(dtype)
    got, want = [], []
    for out in (got, want):
        v = torch.tensor(A.data, requires_grad=True)
        B = torch.tensor(Bn, requires_grad=True)
        if out is got:
            At = torch.sparse_csr_tensor(torch.from_numpy(A.indptr.astype(np.int64)),
                                         torch.from_numpy(A.indices.astype(np.int64)), v,
                                         size=A.shape)
            C = ops.spmm(At, B, reduce=reduce)
        else:
            C = scatter_reference(A, v, B, reduce)
        G = torch.from_numpy(np.random.default_rng(9).random(C.shape).astype(dtype))
        (C * G).sum().backward()
        out.extend([C.detach().numpy(), v.grad.numpy(), B.grad.numpy()])
    tol = 1e-10 if dtype == np.float64 else 1e-5
    for g, w, what in zip(got, want, ("C", "dL/dvalues", "dL/dB")):
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=what)


def test_the_numpy_backward_equals_the_kernels():
    # The float16 backward computes in numpy; on float32 data both forms must agree.
    A = random_csr(40, 30, 0.2, seed=11, empty_rows=(5,))
    rng = np.random.default_rng(12)
    levels = np.array([-1.0, -0.5, 0.5, 1.0], np.float32)
    A.data = rng.choice(levels, A.nnz)
    B = rng.choice(levels, (30, 6))
    s = ops.csr_structure(A)
    for reduce in ("max", "min"):
        C = ops.spmm(A, B, reduce=reduce)
        G = rng.random(C.shape).astype(np.float32)
        kern = ops._extreme_grads_np(s, A.data, B, C, G, True, True)
        # values in float64 (exactly the float32 ones): the kernels do not apply.
        nump = ops._extreme_grads_np(s, A.data.astype(np.float64), B.astype(np.float64), C,
                                     G.astype(np.float64), True, True)
        for k, n in zip(kern, nump):
            np.testing.assert_allclose(k, n, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("reduce", ["mean", "max", "min"])
def test_float16_torch_operands_differentiate(reduce):
    # float16 B: the result is float16, within its rounding of the float32 computation on the
    # same values, and so is B's gradient (max/min take the numpy backward here).
    A = random_csr(30, 20, 0.3, seed=13, empty_rows=(4,))
    At = torch.sparse_csr_tensor(torch.from_numpy(A.indptr.astype(np.int64)),
                                 torch.from_numpy(A.indices.astype(np.int64)),
                                 torch.from_numpy(A.data), size=A.shape)
    B = (torch.rand(20, 8, generator=torch.Generator().manual_seed(14)) - 0.5).half()
    Bh, Bf = B.clone().requires_grad_(True), B.float().requires_grad_(True)
    Ch, Cf = ops.spmm(At, Bh, reduce=reduce), ops.spmm(At, Bf, reduce=reduce)
    assert Ch.dtype == torch.float16
    Ch.float().sum().backward()
    Cf.sum().backward()
    torch.testing.assert_close(Ch.float(), Cf, rtol=2e-3, atol=2e-3)
    torch.testing.assert_close(Bh.grad.float(), Bf.grad, rtol=2e-3, atol=5e-3)
