"""Shared fixtures: the repository paths and seeded random sparse matrices."""

import os

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KERNELS = os.path.join(REPO, "crates", "ops", "kernels")
DATA = os.path.join(os.path.dirname(REPO), "shared", "data")


def random_csr(m, n, density, seed, dtype=np.float32, empty_rows=()):
    """A scipy CSR matrix with values in [0.5, 1.5) and the given rows left empty."""
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    A = sp.random(m, n, density=density, format="lil", dtype=np.float64, random_state=rng)
    for r in empty_rows:
        A[r, :] = 0
    A = sp.csr_matrix(A)
    A.eliminate_zeros()
    A.data = (rng.random(A.nnz) + 0.5).astype(dtype)
    A = A.astype(dtype)
    A.sort_indices()
    return A


@pytest.fixture
def kernels_dir():
    return KERNELS
