"""sparsetir.ops.sparse_softmax and masked_attention: values against numpy/torch computed
densely (masked positions at -inf, rows that store nothing giving 0), gradients by
torch.autograd.gradcheck in float64 and against dense torch autograd, refused shapes."""

import numpy as np
import pytest

from sparsetir import ops
from conftest import random_csr

try:
    import torch
except ImportError:  # the numpy tests still run
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")


def _dense_softmax(A):
    """Row softmax of scipy A over its stored entries, as a dense array (0 elsewhere)."""
    D = np.full(A.shape, -np.inf)
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    D[rows, A.indices] = A.data
    out = np.zeros(A.shape)
    for i in range(A.shape[0]):
        if np.isfinite(D[i]).any():
            e = np.exp(D[i] - D[i][np.isfinite(D[i])].max())
            out[i] = e / e.sum()
    return out


def _dense_attention(A, Q, K, V, scale):
    S = np.where(A.toarray() != 0, scale * (Q @ K.T), -np.inf)
    P = np.zeros_like(S)
    for i in range(S.shape[0]):
        if np.isfinite(S[i]).any():
            e = np.exp(S[i] - S[i][np.isfinite(S[i])].max())
            P[i] = e / e.sum()
    return P @ V


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sparse_softmax_numpy(dtype):
    A = random_csr(40, 30, 0.2, seed=11, dtype=dtype, empty_rows=(0, 7))
    A.data = (A.data * 8 - 6).astype(dtype)  # values of both signs, large enough to need the max
    P = ops.sparse_softmax(A)
    assert P.dtype == dtype and (P.indptr == A.indptr).all() and (P.indices == A.indices).all()
    tol = 1e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(P.toarray(), _dense_softmax(A), rtol=tol, atol=tol)
    # Every row that stores something sums to 1.
    sums = np.asarray(P.sum(axis=1)).ravel()
    stored = np.diff(A.indptr) > 0
    np.testing.assert_allclose(sums[stored], 1.0, rtol=1e-5)


def test_masked_attention_numpy_with_an_empty_row():
    rng = np.random.default_rng(12)
    M = random_csr(24, 20, 0.25, seed=13, empty_rows=(3,))
    Q, K, V = (rng.standard_normal(s).astype(np.float32) for s in ((24, 8), (20, 8), (20, 5)))
    O = ops.masked_attention(M, Q, K, V)
    want = _dense_attention(M, Q.astype(float), K.astype(float), V.astype(float), 1 / np.sqrt(8))
    np.testing.assert_allclose(O, want, rtol=1e-5, atol=1e-5)
    assert (O[3] == 0).all()
    # The mask's values do not weigh the scores; `scale` does.
    M2 = M.copy()
    M2.data *= 5
    np.testing.assert_allclose(ops.masked_attention(M2, Q, K, V, scale=0.5),
                               _dense_attention(M, Q, K, V, 0.5), rtol=1e-5, atol=1e-5)


def test_masked_attention_shape_errors():
    M = random_csr(6, 5, 0.5, seed=14)
    Q, K, V = np.ones((6, 4)), np.ones((5, 4)), np.ones((5, 3))
    with pytest.raises(ValueError, match="sddmm"):
        ops.masked_attention(M, Q, np.ones((4, 4)), V)
    with pytest.raises(ValueError, match="spmm"):
        ops.masked_attention(M, Q, K, np.ones((6, 3)))


@needs_torch
def test_gradcheck_sparse_softmax():
    A = random_csr(9, 8, 0.4, seed=15, dtype=np.float64, empty_rows=(2,))
    crow = torch.from_numpy(A.indptr.astype(np.int64))
    col = torch.from_numpy(A.indices.astype(np.int64))
    v = torch.from_numpy(A.data * 3).requires_grad_(True)

    def f(v):
        return ops.sparse_softmax(torch.sparse_csr_tensor(crow, col, v, size=A.shape)).values()

    assert torch.autograd.gradcheck(f, (v,))


@needs_torch
def test_gradcheck_masked_attention():
    M = random_csr(10, 9, 0.35, seed=16, dtype=np.float64, empty_rows=(4,))
    Mt = torch.sparse_csr_tensor(torch.from_numpy(M.indptr.astype(np.int64)),
                                 torch.from_numpy(M.indices.astype(np.int64)),
                                 torch.from_numpy(M.data), size=M.shape)
    g = torch.Generator().manual_seed(17)
    Q = torch.randn(10, 4, dtype=torch.float64, generator=g, requires_grad=True)
    K = torch.randn(9, 4, dtype=torch.float64, generator=g, requires_grad=True)
    V = torch.randn(9, 3, dtype=torch.float64, generator=g, requires_grad=True)
    assert torch.autograd.gradcheck(lambda q, k, v: ops.masked_attention(Mt, q, k, v), (Q, K, V))


@needs_torch
def test_masked_attention_matches_dense_torch_attention():
    M = random_csr(32, 32, 0.2, seed=18, empty_rows=(5,))
    Mt = torch.sparse_csr_tensor(torch.from_numpy(M.indptr.astype(np.int64)),
                                 torch.from_numpy(M.indices.astype(np.int64)),
                                 torch.from_numpy(M.data), size=M.shape)
    g = torch.Generator().manual_seed(19)
    Q, K, V = (torch.randn(32, 16, generator=g, requires_grad=True) for _ in range(3))
    G = torch.randn(32, 16, generator=g)
    (ops.masked_attention(Mt, Q, K, V) * G).sum().backward()
    # Reference: dense scores with the masked positions at -inf (a row that stores nothing
    # gives 0, as a sparse softmax does).
    Q2, K2, V2 = (x.detach().clone().requires_grad_(True) for x in (Q, K, V))
    keep = torch.from_numpy(M.toarray() != 0)
    S = (Q2 @ K2.T / 4.0).masked_fill(~keep, float("-inf"))
    P = torch.nan_to_num(torch.softmax(S, dim=1), nan=0.0)
    O = P @ V2
    (O * G).sum().backward()
    torch.testing.assert_close(ops.masked_attention(Mt, Q, K, V), O, rtol=1e-4, atol=1e-5)
    for a, b in ((Q, Q2), (K, K2), (V, V2)):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)
