"""Sparse outputs assembled by the kernel (issue 15): the catalog's spadd, spmul, spgemm and
masked_spgemm through sparsetir.compile on every CPU target, and `sparsetir run --backend
eval|interp|c` on .mtx files, against scipy computing the same product directly (structure and
values), on operands with different structures, empty rows, an empty operand and rectangular
shapes."""

import os

import numpy as np
import pytest
import scipy.sparse as sp

import sparsetir
from conftest import KERNELS, REPO, random_csr

TARGETS = ["eval", "interp", "c"]

# (m, k, n, density of A, density of B, empty rows)
SHAPES = [
    (19, 19, 19, 0.2, 0.15, (0, 7)),
    (7, 5, 9, 0.4, 0.3, (2,)),
    (12, 6, 4, 0.3, 0.5, ()),
    (6, 6, 6, 0.0, 0.4, ()),
    (40, 30, 90, 0.2, 0.5, (3,)),
]


def kernel(name, target):
    return sparsetir.compile(os.path.join(KERNELS, f"{name}.sp"), target=target)


def same(got, want, what):
    """Same shape, the same stored coordinates (positive values: nothing cancels), close values."""
    got, want = sp.csr_matrix(got), sp.csr_matrix(want)
    assert got.shape == want.shape, what
    got.sort_indices()
    want.sort_indices()
    np.testing.assert_array_equal(got.indptr, want.indptr, err_msg=what)
    np.testing.assert_array_equal(got.indices, want.indices, err_msg=what)
    np.testing.assert_allclose(got.data, want.data, rtol=1e-5, err_msg=what)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["spadd", "spmul"])
def test_elementwise_equals_scipy(name, target):
    k = kernel(name, target)
    for t, (m, _, n, da, db, empty) in enumerate(SHAPES):
        A = random_csr(m, n, da, seed=10 + t, empty_rows=empty)
        B = random_csr(m, n, db, seed=20 + t)
        C = k(A=A, B=B)["C"]
        want = A + B if name == "spadd" else A.multiply(B)
        same(C, want, f"{name} on {target}, case {t}")


@pytest.mark.parametrize("target", TARGETS)
def test_spgemm_equals_scipy(target):
    k = kernel("spgemm", target)
    for t, (m, kk, n, da, db, empty) in enumerate(SHAPES):
        A = random_csr(m, kk, da, seed=30 + t, empty_rows=empty)
        B = random_csr(kk, n, db, seed=40 + t)
        C = k(A=A, B=B)["C"]
        same(C, A @ B, f"spgemm on {target}, case {t}")


@pytest.mark.parametrize("target", TARGETS)
def test_masked_spgemm_equals_scipy(target):
    k = kernel("masked_spgemm", target)
    for t, (m, kk, n, da, db, empty) in enumerate(SHAPES):
        A = random_csr(m, kk, da, seed=50 + t, empty_rows=empty)
        B = random_csr(kk, n, db, seed=60 + t)
        M = random_csr(m, n, 0.4, seed=70 + t)
        C = k(M=M, A=A, B=B)["C"]
        # Stored on M's pattern, explicit zeros kept where A·B has nothing.
        P = (A @ B).multiply(M).tocsr()
        want = sp.csr_matrix((np.ones(M.nnz), M.indices, M.indptr), shape=M.shape)
        want.data = np.asarray(P[want.nonzero()]).ravel() if M.nnz else want.data
        got = sp.csr_matrix(C)
        got.sort_indices()
        np.testing.assert_array_equal(got.indptr, M.indptr, err_msg=f"case {t}")
        np.testing.assert_array_equal(got.indices, M.indices, err_msg=f"case {t}")
        np.testing.assert_allclose(got.data, want.data, rtol=1e-5, err_msg=f"case {t}")


def test_nonconforming_shapes_and_gpu_targets_are_refused():
    k = kernel("spgemm", "c")
    with pytest.raises(Exception, match="`k` is 5 from the data bound before, but the matrix gives 6"):
        k(A=random_csr(4, 5, 0.5, seed=1), B=random_csr(6, 3, 0.5, seed=2))
    with pytest.raises(Exception, match="assembles the structure of its output"):
        kernel("spgemm", "cuda-emu")


def cli():
    """The `sparsetir` binary `cargo test` builds (skip where it has not been built)."""
    for profile in ("debug", "release"):
        path = os.path.join(REPO, "target", profile, "sparsetir")
        if os.path.exists(path):
            return path
    pytest.skip("target/{debug,release}/sparsetir is not built")


@pytest.mark.parametrize("backend", TARGETS)
@pytest.mark.parametrize("name", ["spgemm", "spadd"])
def test_cli_run_writes_what_scipy_computes(name, backend, tmp_path):
    """`sparsetir run KERNEL --backend B --bind A=a.mtx --bind B=b.mtx --out C=c.mtx`, read back
    with scipy.io.mmread, equals scipy's product of the same files."""
    import subprocess

    import scipy.io

    m, k, n = (30, 20, 45) if name == "spgemm" else (30, 45, 45)
    A = random_csr(m, k, 0.2, seed=81, empty_rows=(4,))
    B = random_csr(k if name == "spgemm" else m, n, 0.15, seed=82)
    scipy.io.mmwrite(str(tmp_path / "a.mtx"), A)
    scipy.io.mmwrite(str(tmp_path / "b.mtx"), B)
    out = tmp_path / "c.mtx"
    subprocess.run([cli(), "run", os.path.join(KERNELS, f"{name}.sp"), "--backend", backend,
                    "--bind", f"A={tmp_path / 'a.mtx'}", "--bind", f"B={tmp_path / 'b.mtx'}",
                    "--out", f"C={out}"], check=True, timeout=300)
    # The files hold float32 values printed in decimal: compare with the product of what scipy
    # reads back from them.
    A2 = sp.csr_matrix(scipy.io.mmread(str(tmp_path / "a.mtx")))
    B2 = sp.csr_matrix(scipy.io.mmread(str(tmp_path / "b.mtx")))
    want = A2 @ B2 if name == "spgemm" else A2 + B2
    same(scipy.io.mmread(str(out)), want, f"{name} --backend {backend}")
