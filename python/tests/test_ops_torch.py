"""sparsetir.ops with torch: gradients by torch.autograd.gradcheck in float64 and against dense
torch autograd, torch sparse layouts, the structure cache, and refused inputs."""

import numpy as np
import pytest

import sparsetir
from sparsetir import ops
from conftest import random_csr

torch = pytest.importorskip("torch")


def _csr64(m, n, density, seed):
    A = random_csr(m, n, density, seed, dtype=np.float64, empty_rows=(1,))
    crow = torch.from_numpy(A.indptr.astype(np.int64))
    col = torch.from_numpy(A.indices.astype(np.int64))
    v = torch.from_numpy(A.data.copy()).requires_grad_(True)

    def build(values):
        return torch.sparse_csr_tensor(crow, col, values, size=A.shape)

    return A, v, build


def test_gradcheck_spmm():
    _, v, build = _csr64(9, 7, 0.35, seed=4)
    B = torch.rand(7, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v, B: ops.spmm(build(v), B), (v, B))


def test_gradcheck_sddmm():
    _, v, build = _csr64(8, 6, 0.4, seed=5)
    X = torch.rand(8, 4, dtype=torch.float64, requires_grad=True)
    Y = torch.rand(6, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v, X, Y: ops.sddmm(build(v), X, Y).values(), (v, X, Y))


def test_gradcheck_spmv():
    _, v, build = _csr64(10, 8, 0.3, seed=6)
    x = torch.rand(8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v, x: ops.spmv(build(v), x), (v, x))


def test_float32_gradients_match_dense_autograd():
    A = random_csr(30, 20, 0.15, seed=7)
    crow = torch.from_numpy(A.indptr.astype(np.int64))
    col = torch.from_numpy(A.indices.astype(np.int64))
    v = torch.from_numpy(A.data.copy()).requires_grad_(True)
    B = torch.rand(20, 16, requires_grad=True)
    G = torch.rand(30, 16)
    (ops.spmm(torch.sparse_csr_tensor(crow, col, v, size=A.shape), B) * G).sum().backward()
    # Reference: the same product on a dense matrix, gradients by torch.
    Ad = torch.from_numpy(A.toarray()).requires_grad_(True)
    B2 = B.detach().clone().requires_grad_(True)
    (Ad @ B2 * G).sum().backward()
    torch.testing.assert_close(B.grad, B2.grad)
    rows = np.repeat(np.arange(30), np.diff(A.indptr))
    torch.testing.assert_close(v.grad, Ad.grad[rows, A.indices])


def test_torch_coo_and_scipy_with_torch_dense():
    A = random_csr(12, 10, 0.3, seed=8)
    Ad = torch.from_numpy(A.toarray())
    B = torch.rand(10, 5, requires_grad=True)
    for M in (Ad.to_sparse(), A):
        C = ops.spmm(M, B)
        assert isinstance(C, torch.Tensor)
        torch.testing.assert_close(C, Ad @ B)
    C.sum().backward()
    torch.testing.assert_close(B.grad, Ad.T @ torch.ones(12, 5))


def test_structure_is_cached_and_values_follow():
    A = random_csr(15, 15, 0.2, seed=9)
    crow = torch.from_numpy(A.indptr.astype(np.int64))
    col = torch.from_numpy(A.indices.astype(np.int64))
    B = torch.rand(15, 4)
    for scale in (1.0, 2.0, -0.5):
        vals = torch.from_numpy(A.data * scale)
        M = torch.sparse_csr_tensor(crow, col, vals, size=A.shape)
        torch.testing.assert_close(ops.spmm(M, B), torch.from_numpy(A.toarray() * scale) @ B)
    s1 = ops.csr_structure(torch.sparse_csr_tensor(crow, col, torch.ones(A.nnz), size=A.shape))
    s2 = ops.csr_structure(torch.sparse_csr_tensor(crow, col, torch.zeros(A.nnz), size=A.shape))
    assert s1 is s2


def test_transpose_structure():
    A = random_csr(13, 9, 0.3, seed=10, empty_rows=(0,))
    s = ops.csr_structure(A)
    t, perm = s.transpose()
    At = A.T.tocsr()
    At.sort_indices()
    np.testing.assert_array_equal(t.indptr, At.indptr)
    np.testing.assert_array_equal(t.indices, At.indices)
    np.testing.assert_array_equal(A.data[perm], At.data)


def test_unsorted_torch_csr_is_refused():
    crow = torch.tensor([0, 2, 3])
    col = torch.tensor([1, 0, 2])  # row 0 unsorted
    M = torch.sparse_csr_tensor(crow, col, torch.ones(3), size=(2, 3))
    with pytest.raises(sparsetir.SparsetirError, match="sorted|increasing"):
        ops.spmm(M, torch.ones(3, 2))


def test_out_of_range_torch_indices_are_refused():
    crow = torch.tensor([0, 1, 2])
    col = torch.tensor([0, 2**32 + 1])  # would wrap to 1 as int32
    M = torch.sparse_csr_tensor(crow, col, torch.ones(2), size=(2, 3), check_invariants=False)
    with pytest.raises(sparsetir.SparsetirError, match="indices of a 2x3 matrix .* outside 0..=2"):
        ops.spmm(M, torch.ones(3, 2))


def test_float16_products_and_gradients():
    # torch float16 operands: 16-bit operands, float32 arithmetic, float16 results and
    # gradients, each within one float16 rounding (or a few, where the backward pass rounds a
    # float16 intermediate) of float64 dense autograd on the same float16 values.
    A = random_csr(30, 20, 0.2, seed=8, empty_rows=(2,))
    crow = torch.from_numpy(A.indptr.astype(np.int64))
    col = torch.from_numpy(A.indices.astype(np.int64))
    v = torch.from_numpy(A.data.astype(np.float16)).requires_grad_(True)
    B = (torch.rand(20, 32) - 0.5).half().requires_grad_(True)
    G = (torch.rand(30, 32) - 0.5).half()
    C = ops.spmm(torch.sparse_csr_tensor(crow, col, v, size=A.shape), B)
    assert C.dtype == torch.float16
    (C * G).sum().backward()
    assert B.grad.dtype == torch.float16 and v.grad.dtype == torch.float16
    rows = torch.from_numpy(np.repeat(np.arange(30), np.diff(A.indptr)))
    Ad = torch.zeros(30, 20, dtype=torch.float64)
    Ad[rows, col] = v.detach().double()
    Ad.requires_grad_(True)
    B2 = B.detach().double().requires_grad_(True)
    C2 = Ad @ B2
    (C2 * G.double()).sum().backward()
    tol = dict(rtol=2 ** -9, atol=1e-3)
    torch.testing.assert_close(C.double(), C2.detach(), **tol)
    torch.testing.assert_close(B.grad.double(), B2.grad, **tol)
    torch.testing.assert_close(v.grad.double(), Ad.grad[rows, col], **tol)
