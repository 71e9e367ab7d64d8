"""sparsetir.compile and Kernel(**buffers): scripts from files and text, every CPU target, data
from scipy, numpy and torch, outputs checked against dense numpy computations, and errors."""

import os

import numpy as np
import pytest
import scipy.sparse as sp

import sparsetir
from conftest import KERNELS, random_csr

CSRMM = os.path.join(KERNELS, "csrmm.sp")
SDDMM = os.path.join(KERNELS, "sddmm.sp")


@pytest.mark.parametrize("target", ["eval", "interp", "c", "cuda-emu"])
def test_csrmm_scipy_numpy_every_target(target):
    A = random_csr(23, 17, 0.2, seed=1, empty_rows=(0, 5))
    B = np.random.default_rng(2).random((17, 5)).astype(np.float32)
    out = sparsetir.compile(CSRMM, target=target)(A=A, B=B)
    assert list(out) == ["C"]
    C = out["C"]
    assert isinstance(C, np.ndarray) and C.dtype == np.float32 and C.shape == (23, 5)
    np.testing.assert_allclose(C, A.toarray().astype(np.float64) @ B, rtol=1e-5, atol=1e-6)
    assert not C[0].any() and not C[5].any()


@pytest.mark.parametrize("fmt", ["coo", "csc", "dok", "lil", "bsr"])
def test_any_scipy_format_is_converted(fmt):
    A = random_csr(12, 9, 0.3, seed=3)
    B = np.arange(9 * 4, dtype=np.float32).reshape(9, 4)
    out = sparsetir.compile(CSRMM)(A=A.asformat(fmt), B=B)
    np.testing.assert_allclose(out["C"], A.toarray() @ B, rtol=1e-5)


def test_script_text_and_specialization():
    text = open(CSRMM).read()
    k = sparsetir.compile(text, target="c", specialize={"feat_size": 4})
    assert k.name == "csrmm" and k.target == "c" and "feat_size" in k.params()
    assert "A" in [b[0] for b in k.buffers()]
    A = random_csr(8, 8, 0.4, seed=4)
    B = np.ones((8, 4), np.float32)
    np.testing.assert_allclose(k(A=A, B=B)["C"], A.toarray() @ B, rtol=1e-5)
    with pytest.raises(sparsetir.SparsetirError, match="feat_size|K"):
        k(A=A, B=np.ones((8, 5), np.float32))


def test_sparse_output_is_scipy_csr():
    A = random_csr(10, 14, 0.3, seed=5)
    rng = np.random.default_rng(6)
    Xd, Yd = rng.random((10, 3)).astype(np.float32), rng.random((14, 3)).astype(np.float32)
    out = sparsetir.compile(SDDMM, target="c")(X=A, A=Xd, B=Yd)
    Y = out["Y"]
    assert sp.issparse(Y) and Y.format == "csr" and Y.dtype == np.float32
    want = A.toarray() * (Xd @ Yd.T)
    np.testing.assert_allclose(Y.toarray(), want, rtol=1e-5, atol=1e-6)
    assert Y.nnz == A.nnz


def test_raw_structure_arrays_by_parameter_name():
    A = random_csr(6, 7, 0.4, seed=7)
    B = np.random.default_rng(8).random((7, 2)).astype(np.float32)
    k = sparsetir.compile(CSRMM, target="c")
    out = k(indptr=A.indptr.astype(np.int32), indices=A.indices.astype(np.int32), a=A.data,
            B=B, m=6, n=7)
    np.testing.assert_allclose(out["C"], A.toarray() @ B, rtol=1e-5)


def test_torch_inputs_give_torch_outputs():
    torch = pytest.importorskip("torch")
    A = random_csr(11, 13, 0.3, seed=9)
    B = torch.rand(13, 6)
    k = sparsetir.compile(CSRMM, target="c")
    for At in (torch.from_numpy(A.toarray()).to_sparse_csr(),
               torch.from_numpy(A.toarray()).to_sparse()):
        C = k(A=At, B=B)["C"]
        assert isinstance(C, torch.Tensor) and C.shape == (11, 6)
        torch.testing.assert_close(C, torch.from_numpy(A.toarray()) @ B)
    Xd, Yd = torch.rand(11, 4), torch.rand(13, 4)
    Y = sparsetir.compile(SDDMM)(X=torch.from_numpy(A.toarray()).to_sparse_csr(), A=Xd, B=Yd)["Y"]
    assert Y.layout == torch.sparse_csr
    torch.testing.assert_close(Y.to_dense(), torch.from_numpy(A.toarray()) * (Xd @ Yd.T))


def test_float64_script():
    text = open(CSRMM).read().replace("float32", "float64")
    A = random_csr(9, 9, 0.3, seed=10, dtype=np.float64)
    B = np.random.default_rng(11).random((9, 3))
    C = sparsetir.compile(text)(A=A, B=B)["C"]
    assert C.dtype == np.float64
    np.testing.assert_allclose(C, A.toarray() @ B, rtol=1e-12)


def test_float16_script_takes_and_gives_numpy_float16():
    # numpy float16 arrays are float16 buffers (bit patterns, no conversion) and float16
    # outputs come back as numpy float16; every operation rounds to float16, as the evaluator.
    text = open(CSRMM).read().replace("float32", "float16")
    A = random_csr(9, 9, 0.3, seed=12)
    B = (np.random.default_rng(13).random((9, 3)) - 0.5).astype(np.float16)
    want = A.toarray().astype(np.float16).astype(np.float64) @ B.astype(np.float64)
    for target in ("eval", "c"):
        C = sparsetir.compile(text, target=target)(A=A, B=B)["C"]
        assert C.dtype == np.float16, target
        np.testing.assert_allclose(C.astype(np.float64), want, rtol=1e-2, atol=1e-3)
    with pytest.raises(sparsetir.SparsetirError, match="float16"):
        sparsetir.compile(text)(A=A, B=B.astype(np.float32))


# -- errors ------------------------------------------------------------------------------------

def test_parse_error_is_located_in_the_file(tmp_path):
    bad = tmp_path / "bad.sp"
    bad.write_text(open(CSRMM).read().replace("T.sp.dense_fixed(m)", "T.sp.dense_fixd(m)"))
    with pytest.raises(sparsetir.SparsetirError) as e:
        sparsetir.compile(str(bad))
    msg = str(e.value)
    assert f"{bad}:15:9" in msg and "dense_fixd" in msg


def test_parse_error_in_text():
    with pytest.raises(sparsetir.SparsetirError, match=r"<string>:1:6: error: unclosed bracket"):
        sparsetir.compile("def f(:\n  pass\n")


def test_bad_target_and_schedule():
    with pytest.raises(sparsetir.SparsetirError, match="unsupported target `gpu`"):
        sparsetir.compile(CSRMM, target="gpu")
    with pytest.raises(sparsetir.SparsetirError, match="schedule"):
        sparsetir.compile(CSRMM, target="c", schedule="b0 = sch.get_block(\"nope\")\n")


def test_schedule_errors_are_located_in_the_schedule(tmp_path):
    sched = tmp_path / "rows.sched"
    sched.write_text('# stage III\nb0 = sch.get_block("csrmm0")\n  sch.parallel(l9)  # rows\n')
    with pytest.raises(sparsetir.SparsetirError) as e:
        sparsetir.compile(CSRMM, target="c", schedule=str(sched))
    msg = str(e.value)
    assert f"{sched}:3:3: error: `l9` is not defined by an earlier line" in msg, msg
    assert "sch.parallel(l9)" in msg and "`# stage III` section" in msg, msg
    # Schedule text is named as such.
    with pytest.raises(sparsetir.SparsetirError,
                       match=r"<string>:1:1: error: NotFound: no block named `nope`"):
        sparsetir.compile(CSRMM, target="c", schedule="b0 = sch.get_block(\"nope\")\n")


def test_cuda_without_a_driver_is_an_exception():
    import ctypes.util

    if ctypes.util.find_library("cuda"):
        pytest.skip("an NVIDIA driver is installed")
    A = random_csr(5, 6, 0.4, seed=13)
    with pytest.raises(sparsetir.SparsetirError, match="libcuda"):
        sparsetir.compile(CSRMM, target="cuda")(A=A, B=np.ones((6, 2), np.float32))


def test_data_errors_name_the_buffer():
    k = sparsetir.compile(CSRMM, target="c")
    A = random_csr(5, 6, 0.4, seed=12)
    with pytest.raises(sparsetir.SparsetirError, match="buffer `B`.*J_detach.*6.*7"):
        k(A=A, B=np.ones((7, 2), np.float32))
    with pytest.raises(sparsetir.SparsetirError, match="no buffer `Q`"):
        k(A=A, Q=np.ones(3, np.float32))
    with pytest.raises(sparsetir.SparsetirError, match="`B` is not bound"):
        k(A=A)
    with pytest.raises(sparsetir.SparsetirError, match="buffer `B` has dtype float32"):
        k(A=A, B=np.ones((6, 2), np.int32))
    with pytest.raises(TypeError, match="buffer `B`"):
        k(A=A, B={"not": "an array"})
    with pytest.raises(sparsetir.SparsetirError, match="parameter `m`: cannot read `x` as int32"):
        k(A=A, B=np.ones((6, 2), np.float32), m="x")
    with pytest.raises(sparsetir.SparsetirError, match="complex64 has no sparsetir counterpart"):
        k(A=A, B=np.ones((6, 2), np.complex64))
    with pytest.raises(sparsetir.SparsetirError, match="axis `J`.*9 is outside 0..6"):
        k(A=out_of_range_csr(), B=np.ones((6, 2), np.float32))


def out_of_range_csr():
    """A CSR matrix with a column index outside its shape (written in place: scipy checks only
    on construction)."""
    M = sp.csr_matrix((np.ones(2, np.float32), (np.array([0, 1]), np.array([0, 1]))), shape=(5, 6))
    M.indices[1] = 9
    return M


def test_invalid_raw_structure_is_refused():
    k = sparsetir.compile(CSRMM, target="c")
    bad_indptr = np.array([0, 2, 1, 3], np.int32)  # not monotone
    with pytest.raises(sparsetir.SparsetirError, match="indptr|J"):
        k(indptr=bad_indptr, indices=np.array([0, 1, 2], np.int32),
          a=np.ones(3, np.float32), B=np.ones((4, 2), np.float32), m=3, n=4)


# -- decompose ---------------------------------------------------------------------------------

@pytest.mark.parametrize("rule,target", [
    ("hyb(parts=1,buckets=1,2,4)", "c"),
    ("hyb(parts=2,buckets=2,4)", "interp"),
    ("ell(width=16)+csr", "eval"),
    ("coo", "c"),
    (["bsr:4"], "c"),
    (os.path.join(os.path.dirname(KERNELS), "rules", "bsr.rule.sp") + ":block_size=4", "eval"),
])
def test_decompose_runs_on_composable_formats(rule, target):
    A = random_csr(64, 48, 0.1, seed=14)
    B = np.random.default_rng(15).random((48, 8)).astype(np.float32)
    k = sparsetir.compile(CSRMM, target=target, decompose=rule)
    np.testing.assert_allclose(k(A=A, B=B)["C"], A.toarray() @ B, rtol=1e-5, atol=1e-6)


def test_decompose_errors():
    with pytest.raises(sparsetir.SparsetirError, match="unknown rule `nope`"):
        sparsetir.compile(CSRMM, decompose="nope")
    rule = os.path.join(os.path.dirname(KERNELS), "rules", "bsr.rule.sp")
    with pytest.raises(sparsetir.SparsetirError, match=r"bsr\.rule\.sp:4:1: error: rule name"):
        sparsetir.compile(CSRMM, decompose=rule)
    k = sparsetir.compile(CSRMM, decompose="ell(width=2)")
    A = random_csr(64, 48, 0.1, seed=14)
    with pytest.raises(sparsetir.SparsetirError, match="cannot store `A`.*more than the width 2"):
        k(A=A, B=np.ones((48, 2), np.float32))


def test_schedule_file_and_pathlib_source():
    import pathlib

    sched = pathlib.Path(KERNELS).parent / "schedules" / "csrmm.sched"
    k = sparsetir.compile(pathlib.Path(CSRMM), target="c", schedule=sched,
                          specialize={"feat_size": 16})
    unscheduled = sparsetir.compile(CSRMM, target="c", specialize={"feat_size": 16})
    assert k.c_source != unscheduled.c_source and "omp" in k.c_source
    A = random_csr(40, 30, 0.1, seed=16, empty_rows=(2,))
    B = np.random.default_rng(17).random((30, 16)).astype(np.float32)
    np.testing.assert_allclose(k(A=A, B=B)["C"], A.toarray() @ B, rtol=1e-5, atol=1e-6)
    # The same schedule as text.
    k2 = sparsetir.compile(CSRMM, schedule=sched.read_text(), specialize={"feat_size": 16})
    assert k2.c_source == k.c_source


# -- CSR matrices bound as arrays, and the coordinate-list fallback ----------------------------

ELLMV = """
@T.prim_func
def ellmv(a: T.handle, x: T.handle, y: T.handle, indices: T.handle, m: T.int32, n: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_fixed(I, (n, 2), indices, "int32")
    J_detach = T.sp.dense_fixed(n)
    A = T.sp.match_buffer(a, (I, J), "float32")
    X = T.sp.match_buffer(x, (J_detach,), "float32")
    Y = T.sp.match_buffer(y, (I,), "float32")
    with T.sp.iteration([I, J], "SR", "ellmv") as [i, j]:
        with T.init():
            Y[i] = T.float32(0)
        Y[i] = Y[i] + A[i, j] * X[j]
"""

EWMUL = """
@T.prim_func
def ewmul(a: T.handle, b: T.handle, c: T.handle, indptr: T.handle, indices: T.handle,
          m: T.int32, n: T.int32, nnz: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices), "int32")
    A = T.sp.match_buffer(a, (I, J), "float32")
    B = T.sp.match_buffer(b, (I, J), "float32")
    C = T.sp.match_buffer(c, (I, J), "float32")
    with T.sp.iteration([I, J], "SS", "ewmul") as [i, j]:
        C[i, j] = A[i, j] * B[i, j]
"""


@pytest.mark.parametrize("target", ["eval", "c"])
def test_other_storage_is_packed_from_coordinates(target):
    rng = np.random.default_rng(18)
    m, n = 9, 7
    cols = np.stack([rng.choice(n, 2, replace=False) for _ in range(m)])
    A = sp.csr_matrix((rng.random(2 * m).astype(np.float32),
                       (np.repeat(np.arange(m), 2), cols.ravel())), shape=(m, n))
    x = rng.random(n).astype(np.float32)
    y = sparsetir.compile(ELLMV, target=target)(A=A, X=x)["Y"]
    np.testing.assert_allclose(y, A.toarray() @ x, rtol=1e-5)


def test_csr_index_and_value_types_are_converted():
    A = random_csr(12, 10, 0.3, seed=19)
    wide = A.astype(np.float64)
    wide.indices = wide.indices.astype(np.int64)  # scipy would pick int32 on construction
    wide.indptr = wide.indptr.astype(np.int64)
    B = np.random.default_rng(20).random((10, 3)).astype(np.float32)
    C = sparsetir.compile(CSRMM)(A=wide, B=B)["C"]
    np.testing.assert_allclose(C, A.toarray() @ B, rtol=1e-5)


def test_second_matrix_over_the_same_axes_must_share_the_pattern():
    k = sparsetir.compile(EWMUL, target="c")
    A = random_csr(8, 6, 0.4, seed=21)
    B = A.copy()
    B.data = B.data * 3
    C = k(A=A, B=B)["C"]
    assert sp.issparse(C)
    np.testing.assert_allclose(C.toarray(), A.toarray() * B.toarray(), rtol=1e-6)
    other = random_csr(8, 6, 0.4, seed=22)
    with pytest.raises(sparsetir.SparsetirError,
                       match="buffer `B`: its sparsity pattern differs from `A`'s"):
        k(A=A, B=other)
    with pytest.raises(sparsetir.SparsetirError, match="buffer `B`: a 8x7 matrix, but `A`"):
        k(A=A, B=sp.csr_matrix((B.data, B.indices, B.indptr), shape=(8, 7)))


def test_csr_size_disagreeing_with_earlier_data():
    k = sparsetir.compile(CSRMM)
    A = random_csr(5, 6, 0.4, seed=23)
    with pytest.raises(sparsetir.SparsetirError,
                       match="buffer `A`: `n` is 7 from the data bound before, but the matrix "
                             "gives 6"):
        k(B=np.ones((7, 2), np.float32), A=A)
