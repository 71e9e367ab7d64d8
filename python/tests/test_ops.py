"""sparsetir.ops with numpy and scipy operands: SpMM, SDDMM and SpMV against dense numpy
references, input canonicalisation and shape errors."""

import numpy as np
import pytest
import scipy.sparse as sp

import sparsetir
from sparsetir import ops
from conftest import random_csr


def test_spmm_sddmm_spmv_numpy():
    A = random_csr(40, 30, 0.1, seed=1, empty_rows=(3, 39))
    rng = np.random.default_rng(2)
    B = rng.random((30, 16)).astype(np.float32)
    Ad = A.toarray().astype(np.float64)
    C = ops.spmm(A, B)
    assert C.dtype == np.float32
    np.testing.assert_allclose(C, Ad @ B, rtol=1e-5, atol=1e-6)
    X, Y = rng.random((40, 7)), rng.random((30, 7))
    S = ops.sddmm(A, X, Y)
    assert sp.issparse(S) and S.dtype == np.float64
    np.testing.assert_allclose(S.toarray(), Ad * (X @ Y.T), rtol=1e-12)
    x = rng.random(30).astype(np.float32)
    np.testing.assert_allclose(ops.spmv(A, x), Ad @ x, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("feat", [1, 3, 16, 33])
def test_spmm_widths_and_formats(feat):
    A = random_csr(25, 19, 0.2, seed=feat)
    B = np.random.default_rng(feat).random((19, feat)).astype(np.float32)
    for M in (A, A.tocoo(), A.tocsc()):
        np.testing.assert_allclose(ops.spmm(M, B), A.toarray() @ B, rtol=1e-5, atol=1e-6)


def test_unsorted_duplicate_scipy_input_is_canonicalised():
    rows = np.array([0, 0, 1, 0]); cols = np.array([2, 0, 1, 2]); vals = np.array([1., 2., 3., 4.])
    A = sp.csr_matrix((vals, (rows, cols)), shape=(2, 3))
    A.has_canonical_format = False
    B = np.eye(3)
    np.testing.assert_allclose(ops.spmm(A, B), A.toarray())


def test_shape_errors():
    A = random_csr(5, 4, 0.5, seed=3)
    with pytest.raises(ValueError, match="A is 5x4 but B has 3 rows"):
        ops.spmm(A, np.ones((3, 2), np.float32))
    with pytest.raises(ValueError, match="sddmm"):
        ops.sddmm(A, np.ones((5, 2)), np.ones((4, 3)))
    with pytest.raises(ValueError, match="spmv"):
        ops.spmv(A, np.ones(5))
    with pytest.raises(TypeError, match="scipy.sparse matrix or a torch sparse tensor"):
        ops.spmm(A.toarray(), np.ones((4, 2)))
    with pytest.raises(TypeError, match="spmm: B must be a numeric array"):
        ops.spmm(A, "hello")


def test_matrices_without_stored_elements():
    Z = sp.csr_matrix((5, 4), dtype=np.float32)
    np.testing.assert_array_equal(ops.spmm(Z, np.ones((4, 3), np.float32)), np.zeros((5, 3)))
    np.testing.assert_array_equal(ops.spmv(Z, np.ones(4, np.float32)), np.zeros(5))
    assert ops.sddmm(Z, np.ones((5, 2)), np.ones((4, 2))).nnz == 0
    assert ops.spmm(sp.csr_matrix((0, 4), dtype=np.float32), np.ones((4, 3))).shape == (0, 3)


def test_concurrent_calls_from_threads():
    # Kernels run without the GIL; each call binds its own arrays.
    from concurrent.futures import ThreadPoolExecutor

    A = random_csr(300, 200, 0.05, seed=20)
    rng = np.random.default_rng(21)
    Bs = [rng.random((200, 16)).astype(np.float32) for _ in range(8)]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda B: ops.spmm(A, B), Bs))
    for B, C in zip(Bs, got):
        np.testing.assert_allclose(C, A.toarray() @ B, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("feat", [5, 64])
def test_float16_dense_operands(feat):
    # float16 dense operands: 16-bit operands (scipy's float32 values rounded to float16),
    # float32 arithmetic, a float16 result (64: the kernels' vector loops, widening loads).
    A = random_csr(40, 30, 0.2, seed=feat, empty_rows=(3, 39))
    rng = np.random.default_rng(feat)
    A16 = A.toarray().astype(np.float16).astype(np.float64)
    B = (rng.random((30, feat)) - 0.5).astype(np.float16)
    C = ops.spmm(A, B)
    assert C.dtype == np.float16
    # One rounding of a float32 result to float16: half a unit in its last place.
    np.testing.assert_allclose(C.astype(np.float64), A16 @ B.astype(np.float64),
                               rtol=2 ** -10, atol=1e-6)
    X = (rng.random((40, feat)) - 0.5).astype(np.float16)
    Y = (rng.random((30, feat)) - 0.5).astype(np.float16)
    S = ops.sddmm(A, X, Y)
    assert S.dtype == np.float32  # scipy's: the float16 values widened
    want = A16 * (X.astype(np.float64) @ Y.astype(np.float64).T)
    np.testing.assert_allclose(S.toarray(), want, rtol=2 ** -10, atol=1e-6)
    x = (rng.random(30) - 0.5).astype(np.float16)
    y = ops.spmv(A, x)
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float64), A16 @ x.astype(np.float64),
                               rtol=2 ** -10, atol=1e-6)
    # float16 beside float32 dense operands: float32.
    assert ops.spmm(A, B.astype(np.float32)).dtype == np.float32
