"""Launches without copies: structure frozen once (`_native.freeze`), float operands lent to C
kernels as they are, and every operand layout read in row-major order. Each result is checked
against a dense numpy product."""

import os

import numpy as np
import pytest

import sparsetir
from sparsetir import _native
from conftest import KERNELS, random_csr

CSRMM = os.path.join(KERNELS, "csrmm.sp")


def _csrmm(dtype="float32"):
    source = open(CSRMM).read().replace("float32", dtype)
    return _native.compile(source, "<csrmm>", "c", None, None, [], None)


def _launch(k, A, B, indptr, indices, values=None):
    m, n = A.shape
    (c,) = k.launch(
        {"indptr": indptr, "indices": indices, "a": A.data if values is None else values,
         "b": B, "m": m, "n": n, "nnz": A.nnz, "feat_size": B.shape[1]},
        [("c", str(B.dtype), [m, B.shape[1]])])
    return c


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_frozen_structure_and_lent_values_give_the_product(dtype):
    A = random_csr(40, 30, 0.2, seed=1, dtype=dtype, empty_rows=(0, 7))
    B = np.random.default_rng(2).random((30, 6)).astype(dtype)
    ip = _native.freeze(A.indptr.astype(np.int32))
    ix = _native.freeze(A.indices.astype(np.int32))
    assert ip.dtype == "int32" and ip.shape == [41] and len(ix) == A.nnz
    np.testing.assert_array_equal(ix.numpy(), A.indices)
    k = _csrmm(dtype)
    a_before, b_before = A.data.copy(), B.copy()
    c = _launch(k, A, B, ip, ix)
    np.testing.assert_allclose(c, A.toarray() @ B, rtol=1e-5, atol=1e-6)
    # Lent operands are read, never written.
    np.testing.assert_array_equal(A.data, a_before)
    np.testing.assert_array_equal(B, b_before)
    # The same frozen structure serves any number of launches, numpy index arrays too.
    B2 = B * 2
    np.testing.assert_allclose(_launch(k, A, B2, ip, ix), A.toarray() @ B2, rtol=1e-5,
                               atol=1e-6)
    c3 = _launch(k, A, B, A.indptr.astype(np.int32), A.indices.astype(np.int32))
    np.testing.assert_allclose(c3, c, rtol=0, atol=0)


def test_a_frozen_array_is_a_copy():
    A = random_csr(12, 12, 0.3, seed=3)
    B = np.random.default_rng(4).random((12, 3)).astype(np.float32)
    indices = A.indices.astype(np.int32)
    ix = _native.freeze(indices)
    want = A.toarray() @ B
    indices[:] = 0  # the caller's array changes; the frozen one does not
    c = _launch(_csrmm(), A, B, _native.freeze(A.indptr.astype(np.int32)), ix)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-6)


def test_every_operand_layout_is_read_row_major():
    A = random_csr(20, 16, 0.25, seed=5)
    rng = np.random.default_rng(6)
    base = rng.random((16, 10)).astype(np.float32)
    layouts = {
        "fortran": np.asfortranarray(base[:, :5]),
        "strided": base[:, ::2],
        "transposed": np.ascontiguousarray(base[:, :5].T).T,
    }
    values = np.repeat(A.data, 2)[::2]  # a strided value array
    k = _csrmm()
    ip = _native.freeze(A.indptr.astype(np.int32))
    ix = _native.freeze(A.indices.astype(np.int32))
    for name, B in layouts.items():
        want = A.toarray() @ np.ascontiguousarray(B)
        c = _launch(k, A, B, ip, ix, values)
        np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-6, err_msg=name)
        # The binding path (`Kernel(**buffers)`) reads them the same way.
        out = sparsetir.compile(CSRMM, target="c")(A=A, B=B)["C"]
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6, err_msg=name)


def test_sixteen_bit_operands_are_lent():
    A = random_csr(24, 20, 0.3, seed=7)
    B = np.random.default_rng(8).random((20, 8)).astype(np.float16)
    source = _native.catalog_source_stored_as("csrmm", "float16")
    k = _native.compile(source, "<csrmm f16>", "c", None, None, [], None)
    ip = _native.freeze(A.indptr.astype(np.int32))
    ix = _native.freeze(A.indices.astype(np.int32))
    (c,) = k.launch(
        {"indptr": ip, "indices": ix, "a": A.data.astype(np.float16), "b": B, "m": 24, "n": 20,
         "nnz": A.nnz, "feat_size": 8},
        [("c", "float32", [24, 8])])
    want = A.toarray().astype(np.float16).astype(np.float64) @ B.astype(np.float64)
    np.testing.assert_allclose(c, want, rtol=2e-3, atol=1e-3)


def test_bad_frozen_structure_is_refused_by_name():
    A = random_csr(10, 10, 0.3, seed=9)
    bad = A.indices.astype(np.int32)
    bad[2] = 10
    with pytest.raises(sparsetir.SparsetirError, match="indices"):
        _launch(_csrmm(), A, np.ones((10, 2), np.float32),
                _native.freeze(A.indptr.astype(np.int32)), _native.freeze(bad))
    # A frozen array of the wrong element type is refused, not reinterpreted.
    with pytest.raises(sparsetir.SparsetirError, match="indptr"):
        _launch(_csrmm(), A, np.ones((10, 2), np.float32),
                _native.freeze(A.indptr.astype(np.int64)),
                _native.freeze(A.indices.astype(np.int32)))


def test_a_kernel_remembers_only_what_validation_read():
    # A kernel validates a frozen structure once per launch shape; what it did not read (the
    # float operands' values) and what changes the shape (lengths, sizes) is checked every time.
    A = random_csr(20, 16, 0.3, seed=5)
    B = np.random.default_rng(6).random((16, 4)).astype(np.float32)
    k = _csrmm()
    ip = _native.freeze(A.indptr.astype(np.int32))
    ix = _native.freeze(A.indices.astype(np.int32))
    for scale in (1, 3):
        np.testing.assert_allclose(_launch(k, A, B * scale, ip, ix), A.toarray() @ (B * scale),
                                   rtol=1e-5, atol=1e-6)
    with pytest.raises(sparsetir.SparsetirError, match="`a`"):
        _launch(k, A, B, ip, ix, values=A.data[:-1])
    with pytest.raises(sparsetir.SparsetirError, match="`b`"):
        _launch(k, A, B[:-1], ip, ix)
    bad = A.indices.astype(np.int32)
    bad[-1] = 16
    frozen_bad = _native.freeze(bad)
    for _ in range(2):
        with pytest.raises(sparsetir.SparsetirError, match="outside"):
            _launch(k, A, B, ip, frozen_bad)


def test_outputs_the_kernel_overwrites_are_not_zeroed_and_still_exact():
    # Under its default schedule SpMM stores every element of `c` once (its row starts in a
    # local array), so `launch` leaves the fresh output uninitialized. Memory freed just before
    # (NaN-filled arrays of the output's size) comes back to it: every element must still be
    # the product's, rows that store nothing included.
    source = open(CSRMM).read()
    schedule = _native.cpu_schedule("csrmm", 0)
    k = _native.compile(source, "<csrmm>", "c", schedule, None, [], None)
    assert k.overwritten == ["c"]
    assert _csrmm().overwritten == []  # unscheduled: C is started in memory, then added to
    A = random_csr(300, 200, 0.05, seed=3, dtype="float32", empty_rows=(0, 7, 299))
    B = np.random.default_rng(4).random((200, 64)).astype("float32")
    ip = _native.freeze(A.indptr.astype(np.int32))
    ix = _native.freeze(A.indices.astype(np.int32))
    want = A.toarray().astype(np.float64) @ B.astype(np.float64)
    for _ in range(20):
        junk = np.full((300, 64), np.nan, dtype=np.float32)
        del junk
        c = _launch(k, A, B, ip, ix)
        assert not np.isnan(c).any()
        np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)
