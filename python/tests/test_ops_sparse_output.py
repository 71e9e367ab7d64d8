"""sparsetir.ops.spgemm and spadd: sparse results assembled by the kernels, against scipy
computing the same product or sum (structure and values) on operands with empty rows, an empty
operand and rectangular shapes; torch operands and `CsrTensor`s, and the gradients of both
operands' stored values against dense torch autograd."""

import numpy as np
import pytest
import scipy.sparse as sp

from sparsetir import ops
from conftest import random_csr

# (m, k, n, density of A, density of B, A's empty rows)
SHAPES = [
    (19, 19, 19, 0.2, 0.15, (0, 7)),
    (7, 5, 9, 0.4, 0.3, (2,)),
    (40, 30, 90, 0.2, 0.5, (3,)),
    (6, 6, 6, 0.0, 0.4, ()),
    (1, 8, 1, 0.5, 0.5, ()),
]


def same(got, want, what, rtol=1e-5):
    """The same stored coordinates (positive values: nothing cancels) and close values."""
    got, want = sp.csr_matrix(got), sp.csr_matrix(want)
    assert got.shape == want.shape, what
    want.sort_indices()
    np.testing.assert_array_equal(got.indptr, want.indptr, err_msg=what)
    np.testing.assert_array_equal(got.indices, want.indices, err_msg=what)
    np.testing.assert_allclose(got.data, want.data, rtol=rtol, err_msg=what)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_spgemm_equals_scipy(dtype):
    for t, (m, k, n, da, db, empty) in enumerate(SHAPES):
        A = random_csr(m, k, da, seed=10 + t, dtype=dtype, empty_rows=empty)
        B = random_csr(k, n, db, seed=20 + t, dtype=dtype)
        C = ops.spgemm(A, B)
        assert isinstance(C, sp.csr_matrix) and C.dtype == dtype
        same(C, A @ B, f"spgemm case {t}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_spadd_equals_scipy(dtype):
    for t, (m, _, n, da, db, empty) in enumerate(SHAPES):
        A = random_csr(m, n, da, seed=30 + t, dtype=dtype, empty_rows=empty)
        B = random_csr(m, n, db, seed=40 + t, dtype=dtype)
        C = ops.spadd(A, B)
        assert C.dtype == dtype
        same(C, A + B, f"spadd case {t}")


def test_any_scipy_format_and_mixed_precision():
    A = random_csr(25, 20, 0.2, seed=1).tocoo()
    B = random_csr(20, 15, 0.2, seed=2, dtype=np.float64).tocsc()
    C = ops.spgemm(A, B)
    assert C.dtype == np.float64
    same(C, A.tocsr().astype(np.float64) @ B.tocsr(), "coo @ csc")


def test_torch_and_csr_tensor_operands():
    torch = pytest.importorskip("torch")
    A = random_csr(20, 15, 0.25, seed=3, empty_rows=(4,))
    B = random_csr(15, 18, 0.25, seed=4)
    want = A @ B
    At, Bt = torch.from_numpy(A.toarray()), torch.from_numpy(B.toarray())
    for a, b in ((At.to_sparse_csr(), Bt.to_sparse_csr()), (At.to_sparse_coo(), Bt.to_sparse_csr())):
        C = ops.spgemm(a, b)
        assert C.layout == torch.sparse_csr and C.shape == (20, 18)
        same(sp.csr_matrix((C.values().numpy(), C.col_indices().numpy(),
                            C.crow_indices().numpy()), shape=C.shape), want, "torch")
    C = ops.spgemm(ops.CsrTensor.from_scipy(A), ops.CsrTensor.from_scipy(B))
    assert isinstance(C, ops.CsrTensor)
    same(sp.csr_matrix((C.values.numpy(), C.indices.numpy(), C.indptr.numpy()), shape=C.shape),
         want, "CsrTensor")
    S = ops.spadd(ops.CsrTensor.from_scipy(A), ops.CsrTensor.from_scipy(A))
    same(sp.csr_matrix((S.values.numpy(), S.indices.numpy(), S.indptr.numpy()), shape=S.shape),
         2 * A, "spadd of CsrTensors")


@pytest.mark.parametrize("op", ["spgemm", "spadd"])
def test_gradients_of_both_operands_equal_dense_autograd(op):
    torch = pytest.importorskip("torch")
    A = random_csr(14, 12, 0.3, seed=5, dtype=np.float64, empty_rows=(2,))
    B = (random_csr(12, 16, 0.3, seed=6, dtype=np.float64) if op == "spgemm"
         else random_csr(14, 12, 0.3, seed=6, dtype=np.float64))

    def csr(M):
        return ops.CsrTensor.from_scipy(M).with_values(
            torch.from_numpy(M.data.copy()).requires_grad_(True))

    a, b = csr(A), csr(B)
    C = getattr(ops, op)(a, b)
    weights = torch.rand(C.nnz, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    (C.values * weights).sum().backward()
    # Dense reference: the same weighted sum over C's stored positions.
    Ad = torch.from_numpy(A.toarray()).requires_grad_(True)
    Bd = torch.from_numpy(B.toarray()).requires_grad_(True)
    Cd = Ad @ Bd if op == "spgemm" else Ad + Bd
    rows = torch.repeat_interleave(torch.arange(C.shape[0]), C.indptr.diff().long())
    (Cd[rows, C.indices.long()] * weights).sum().backward()
    for M, mat, dense in ((A, a, Ad), (B, b, Bd)):
        r = np.repeat(np.arange(M.shape[0]), np.diff(M.indptr))
        torch.testing.assert_close(mat.values.grad, dense.grad[r, M.indices])


def test_gradcheck_spgemm():
    torch = pytest.importorskip("torch")
    A = random_csr(6, 5, 0.4, seed=8, dtype=np.float64)
    B = random_csr(5, 7, 0.4, seed=9, dtype=np.float64)
    a, b = ops.CsrTensor.from_scipy(A), ops.CsrTensor.from_scipy(B)
    va = a.values.clone().requires_grad_(True)
    vb = b.values.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda va, vb: ops.spgemm(a.with_values(va), b.with_values(vb)).values, (va, vb))


def test_refusals():
    A = random_csr(5, 4, 0.5, seed=10)
    with pytest.raises(ValueError, match="spgemm: A is 5x4 but B is 5x4"):
        ops.spgemm(A, A)
    with pytest.raises(ValueError, match="spadd: A is 5x4 but B is 4x5"):
        ops.spadd(A, A.T)
    with pytest.raises(TypeError, match="A must be a scipy.sparse matrix"):
        ops.spgemm(np.ones((5, 4)), A.T)


def test_under_torch_compile_the_data_dependent_result_is_named():
    """A sparse result's size depends on the data: with fullgraph=True, torch.compile reports
    why; without it, the call runs eagerly and gives the product."""
    torch = pytest.importorskip("torch")
    A = ops.CsrTensor.from_scipy(random_csr(8, 8, 0.3, seed=11))
    f = torch.compile(lambda a: ops.spgemm(a, a).values.sum(), fullgraph=True,
                      backend="aot_eager")
    with pytest.raises(Exception, match="the size of its result depends on the matrices"):
        f(A)
    g = torch.compile(lambda a: ops.spgemm(a, a).values.sum(), backend="aot_eager")
    M = random_csr(8, 8, 0.3, seed=11)
    torch.testing.assert_close(g(A).double(), torch.tensor((M @ M).sum(), dtype=torch.float64),
                               rtol=1e-5, atol=0)
