"""sparsetir.ops under torch.compile: the operators on a ``CsrTensor`` as custom operators
(``torch.ops.sparsetir.*``), checked by ``torch.library.opcheck`` (schema, fake shapes,
autograd registration, traced dispatch), whole models compiled with ``fullgraph=True`` whose
values and gradients equal dense PyTorch references, the graph's nodes and its recompilations,
and ``CsrTensor`` itself in eager code."""

import numpy as np
import pytest

from conftest import random_csr

torch = pytest.importorskip("torch")
if not hasattr(torch.library, "custom_op"):
    pytest.skip("torch.library.custom_op needs PyTorch 2.4 or later", allow_module_level=True)

from sparsetir import _device, ops  # noqa: E402
# (Importing it registers torch.ops.sparsetir.*, as the first traced operator would.)
from sparsetir import _library  # noqa: E402, F401


def csr(A, dtype=torch.float32, grad=False):
    """`A` as a CsrTensor with int32 indices and values of `dtype`."""
    c = ops.CsrTensor.from_scipy(A, dtype=dtype)
    return c.with_values(c.values.clone().requires_grad_(grad))


def dense_of(A, values):
    """The dense matrix with A's pattern and `values` (differentiable), float64."""
    m, n = A.shape
    rows = torch.from_numpy(np.repeat(np.arange(m), np.diff(A.indptr)))
    cols = torch.from_numpy(A.indices.astype(np.int64))
    return torch.zeros(m, n, dtype=torch.float64).index_put((rows, cols), values.double())


def rand(*shape, seed, dtype=torch.float32, grad=False):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=g, dtype=torch.float64) + 0.5).to(dtype) \
        .requires_grad_(grad)


def compiled(fn, backend="aot_eager"):
    return torch.compile(fn, fullgraph=True, backend=backend)


class CountingBackend:
    """A torch.compile backend that counts the graphs it is given and runs them as traced."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward


# ---------------------------------------------------------------------------------------------
# The custom operators, one by one


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_opcheck_every_operator(dtype):
    A = random_csr(12, 9, 0.3, seed=1, empty_rows=(2, 7))
    m, n = A.shape
    p = torch.from_numpy(A.indptr.astype(np.int32))
    i = torch.from_numpy(A.indices.astype(np.int32))
    nnz = A.nnz
    v = rand(nnz, seed=2, dtype=dtype, grad=True)
    b = rand(n, 5, seed=3, dtype=dtype, grad=True)
    x = rand(m, 5, seed=4, dtype=dtype, grad=True)
    ops_ = torch.ops.sparsetir
    cases = [
        (ops_.spmm.default, (p, i, v, b, m, n, "sum")),
        (ops_.spmm.default, (p, i, v, b, m, n, "max")),
        (ops_.spmm.default, (p, i, v, b, m, n, "min")),
        (ops_.spmm_t.default, (p, i, v, x, m, n)),
        (ops_.sddmm.default, (p, i, v, x, b, m, n)),
        (ops_.sddmm.default, (p, i, None, x, b, m, n)),
        (ops_.spmv.default, (p, i, v, b[:, 0].detach().clone().requires_grad_(True), m, n)),
        (ops_.spmv_t.default, (p, i, v, x[:, 0].detach().clone(), m, n)),
        (ops_.sparse_softmax.default, (p, i, v, m, n)),
        (ops_.sparse_softmax_backward.default, (p, i, v.detach(), rand(nnz, seed=5, dtype=dtype),
                                                m, n)),
        (ops_.row_scale.default, (p, i, v, m, n)),
    ]
    for op, args in cases:
        torch.library.opcheck(op, args)


def test_every_operator_equals_a_dense_reference_compiled():
    """Forward values and every gradient of each operator, compiled whole, against dense
    float64 PyTorch on the same matrix (empty rows included)."""
    A = random_csr(30, 24, 0.2, seed=6, empty_rows=(0, 13))
    m, n = A.shape
    rows = torch.from_numpy(np.repeat(np.arange(m), np.diff(A.indptr)))
    cols = torch.from_numpy(A.indices.astype(np.int64))
    mask = dense_of(A, torch.ones(A.nnz)) > 0
    deg = torch.from_numpy(np.maximum(np.diff(A.indptr), 1)).double()

    def extreme(D, B, reduce):
        prod = D[:, :, None] * B[None, :, :]
        fill = float("-inf") if reduce == "max" else float("inf")
        prod = prod.masked_fill(~mask[:, :, None], fill)
        out = prod.amax(1) if reduce == "max" else prod.amin(1)
        return out.masked_fill(~mask.any(1)[:, None], 0.0)

    def softmax_dense(D):
        s = D.masked_fill(~mask, float("-inf")).softmax(1)
        return s.nan_to_num(0.0)[rows, cols]

    dense_refs = {
        "sum": lambda D, B, X: D @ B,
        "mean": lambda D, B, X: (D @ B) / deg[:, None],
        "max": lambda D, B, X: extreme(D, B, "max"),
        "min": lambda D, B, X: extreme(D, B, "min"),
        "sddmm": lambda D, B, X: D[rows, cols] * (X @ B.T)[rows, cols],
        "spmv": lambda D, B, X: D @ B[:, 0],
        "softmax": lambda D, B, X: softmax_dense(D),
    }
    sparse = {
        "sum": lambda A, B, X: ops.spmm(A, B),
        "mean": lambda A, B, X: ops.spmm(A, B, reduce="mean"),
        "max": lambda A, B, X: ops.spmm(A, B, reduce="max"),
        "min": lambda A, B, X: ops.spmm(A, B, reduce="min"),
        "sddmm": lambda A, B, X: ops.sddmm(A, X, B).values,
        "spmv": lambda A, B, X: ops.spmv(A, B[:, 0]),
        "softmax": lambda A, B, X: ops.sparse_softmax(A).values,
    }
    for name, f in sparse.items():
        Ac = csr(A, grad=True)
        B = rand(n, 6, seed=8, grad=True)
        X = rand(m, 6, seed=9, grad=True)
        out = compiled(f)(Ac, B, X)
        vd = Ac.values.detach().double().requires_grad_(True)
        Bd = B.detach().double().requires_grad_(True)
        Xd = X.detach().double().requires_grad_(True)
        want = dense_refs[name](dense_of(A, vd), Bd, Xd)
        torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5, msg=name)
        # A weighted sum as the loss, so that every output's gradient differs.
        w = rand(*out.shape, seed=30, dtype=torch.float64)
        (out.double() * w).sum().backward()
        (want * w).sum().backward()
        for got, ref, what in ((Ac.values.grad, vd.grad, "values"), (B.grad, Bd.grad, "B"),
                               (X.grad, Xd.grad, "X")):
            if ref is None or not ref.abs().sum():
                assert got is None or not got.abs().sum(), (name, what)
                continue
            torch.testing.assert_close(got.double(), ref, rtol=1e-4, atol=1e-5,
                                       msg=f"{name}: gradient of {what}")


def test_masked_attention_compiled_equals_dense_attention():
    A = random_csr(20, 16, 0.25, seed=10, empty_rows=(5,))
    mask = torch.from_numpy(A.toarray() != 0)
    Q, K, V = (rand(r, 8, seed=s, grad=True) for r, s in ((20, 11), (16, 12), (16, 13)))
    out = compiled(lambda M, q, k, v: ops.masked_attention(M, q, k, v))(csr(A), Q, K, V)
    q, k, v = (t.detach().double().requires_grad_(True) for t in (Q, K, V))
    scores = (q @ k.T / 8 ** 0.5).masked_fill(~mask, float("-inf"))
    want = scores.softmax(1).nan_to_num(0.0) @ v
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-6)
    G = rand(20, 8, seed=14, dtype=torch.float64)
    (out.double() * G).sum().backward()
    (want * G).sum().backward()
    for got, ref in zip((Q, K, V), (q, k, v)):
        torch.testing.assert_close(got.grad.double(), ref.grad, rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# Whole models


def gcn_loss(A, X, W1, W2, y):
    H = torch.relu(ops.spmm(A, ops.spmm(X, W1)))
    return torch.nn.functional.cross_entropy(ops.spmm(A, H @ W2), y)


def gcn_inputs(seed=1):
    n, f, h, c = 60, 40, 16, 7
    A, X = random_csr(n, n, 0.08, seed=seed), random_csr(n, f, 0.05, seed=seed + 1)
    g = torch.Generator().manual_seed(seed + 2)
    W1 = torch.rand(f, h, generator=g, requires_grad=True)
    W2 = torch.rand(h, c, generator=g, requires_grad=True)
    y = torch.randint(0, c, (n,), generator=g)
    return A, X, W1, W2, y


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_gcn_compiles_whole_and_equals_dense_torch(backend):
    A, X, W1, W2, y = gcn_inputs()
    loss = compiled(gcn_loss, backend)(csr(A), csr(X), W1, W2, y)
    grads = torch.autograd.grad(loss, (W1, W2))
    want = gcn_loss_dense = torch.nn.functional.cross_entropy(
        torch.from_numpy(A.toarray()) @ torch.relu(
            torch.from_numpy(A.toarray()) @ (torch.from_numpy(X.toarray()) @ W1)) @ W2, y)
    want_grads = torch.autograd.grad(gcn_loss_dense, (W1, W2))
    torch.testing.assert_close(loss, want)
    for a, b in zip(grads, want_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_a_gcn_compiles_whole_on_a_real_gpu(backend):
    """The same GCN on CUDA tensors: the custom operators run sparsetir's GPU kernels inside the
    compiled graph (inductor's own kernels around them)."""
    A, X, W1, W2, y = gcn_inputs(seed=4)
    W1c, W2c = (w.detach().cuda().requires_grad_(True) for w in (W1, W2))
    loss = compiled(gcn_loss, backend)(csr(A).to("cuda"), csr(X).to("cuda"), W1c, W2c,
                                       y.cuda())
    grads = torch.autograd.grad(loss, (W1c, W2c))
    Ad, Xd = torch.from_numpy(A.toarray()), torch.from_numpy(X.toarray())
    want = torch.nn.functional.cross_entropy(Ad @ torch.relu(Ad @ (Xd @ W1)) @ W2, y)
    want_grads = torch.autograd.grad(want, (W1, W2))
    torch.testing.assert_close(loss.cpu(), want, rtol=1e-4, atol=1e-5)
    for a, b in zip(grads, want_grads):
        assert a.device.type == "cuda"
        torch.testing.assert_close(a.cpu(), b, rtol=1e-4, atol=1e-5)


def test_the_graph_holds_one_node_per_operator_and_no_break():
    A, X, W1, W2, y = gcn_inputs(seed=3)
    backend = CountingBackend()
    # Not fullgraph: a break would give two graphs instead of failing.
    loss = torch.compile(gcn_loss, backend=backend)(csr(A), csr(X), W1, W2, y)
    assert torch.isfinite(loss)
    (gm,) = backend.graphs
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert targets.count(torch.ops.sparsetir.spmm.default) == 3, targets


def test_new_values_do_not_recompile():
    """Dropout on a matrix's values each epoch: the same index tensors, new values; the graph
    compiles once, and each call sees its own values."""
    A = random_csr(25, 25, 0.2, seed=15)
    base = csr(A)
    counter = CountingBackend()
    f = torch.compile(lambda M, B: ops.spmm(M, B), fullgraph=True, backend=counter)
    B = rand(25, 4, seed=16)
    for seed in range(3):
        v = rand(A.nnz, seed=20 + seed)
        out = f(base.with_values(v), B)
        torch.testing.assert_close(out.double(), dense_of(A, v) @ B.double(), rtol=1e-5,
                                   atol=1e-6)
    assert len(counter.graphs) == 1


def test_feature_widths_and_float16_under_compile():
    """Widths that change between calls (one recompile, then a graph for any width: the fake
    shapes take the width symbolically) and float16 operands (16-bit data, float32 arithmetic,
    a float16 result, as in eager mode)."""
    A = random_csr(30, 25, 0.2, seed=28, empty_rows=(2,))
    Ac = csr(A)
    counter = CountingBackend()
    f = torch.compile(lambda M, B: ops.spmm(M, B, reduce="max"), fullgraph=True,
                      backend=counter)
    D = dense_of(A, Ac.values)
    mask = D != 0
    for width in (3, 5, 9, 17):
        B = rand(25, width, seed=width)
        got = f(Ac, B)
        prod = (D[:, :, None] * B.double()[None]).masked_fill(~mask[:, :, None], -np.inf)
        want = prod.amax(1).masked_fill(~mask.any(1)[:, None], 0.0)
        torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=1e-6)
    assert len(counter.graphs) == 2
    B16 = rand(25, 8, seed=29, dtype=torch.float16)
    got = compiled(lambda M, B: ops.spmm(M, B))(Ac, B16)
    assert got.dtype == torch.float16
    want = dense_of(A, Ac.values.half()) @ B16.double()
    torch.testing.assert_close(got.double(), want, rtol=2e-3, atol=2e-3)


def test_through_the_gpu_kernels_in_the_emulator(monkeypatch):
    """The custom operators' implementations take the GPU path where the tensors are on a GPU:
    under `_device.emulated()` CPU tensors go there, run by the CUDA emulator."""
    A = random_csr(40, 30, 0.15, seed=17, empty_rows=(4,))
    B = rand(30, 8, seed=18, grad=True)
    f = compiled(lambda M, b: ops.spmm(M, b).sum(1) + ops.spmv(M, b[:, 1]))
    calls = []
    for name in ("spmm", "spmv"):
        def spy(*args, _name=name, _real=getattr(_device, name)):
            calls.append(_name)
            return _real(*args)
        monkeypatch.setattr(_device, name, spy)
    with _device.emulated():
        out = f(csr(A), B)
        out.sum().backward()
    # Forward: one SpMM, one SpMV; backward: Aᵀ G for each (B's gradient).
    assert sorted(calls) == ["spmm", "spmm", "spmv", "spmv"], calls
    D = torch.from_numpy(A.toarray()).double()
    Bd = B.detach().double().requires_grad_(True)
    want = (D @ Bd).sum(1) + D @ Bd[:, 1]
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)
    want.sum().backward()
    torch.testing.assert_close(B.grad.double(), Bd.grad, rtol=1e-5, atol=1e-5)


def test_shape_errors_name_the_operands_under_compile():
    A = csr(random_csr(10, 8, 0.3, seed=19))
    with pytest.raises(Exception, match="spmm: A is 10x8 but B has 9 rows"):
        compiled(lambda M, b: ops.spmm(M, b))(A, torch.ones(9, 3))
    # Without fullgraph, the eager operator raises the error itself.
    with pytest.raises(ValueError, match="sddmm: A is 10x8"):
        torch.compile(lambda M, x, y: ops.sddmm(M, x, y), backend="aot_eager")(
            A, torch.ones(10, 3), torch.ones(8, 4))


# ---------------------------------------------------------------------------------------------
# CsrTensor in eager code


def test_csr_tensor_in_eager_code_equals_the_scipy_path():
    A = random_csr(30, 20, 0.2, seed=21, empty_rows=(3,))
    Ac = csr(A)
    B = rand(20, 5, seed=22)
    X = rand(30, 5, seed=23)
    np.testing.assert_allclose(ops.spmm(Ac, B).numpy(), ops.spmm(A, B.numpy()), rtol=1e-6)
    s = ops.sddmm(Ac, X, B)
    assert isinstance(s, ops.CsrTensor) and s.indptr is Ac.indptr and s.shape == (30, 20)
    np.testing.assert_allclose(s.values.numpy(), ops.sddmm(A, X.numpy(), B.numpy()).data,
                               rtol=1e-6)
    p = ops.sparse_softmax(Ac)
    np.testing.assert_allclose(p.values.numpy(), ops.sparse_softmax(A).data, rtol=1e-6)
    np.testing.assert_allclose(ops.spmv(Ac, B[:, 0]).numpy(), A @ B[:, 0].numpy(), rtol=1e-5)
    # One structure for the CsrTensor and the torch CSR tensor over the same index tensors.
    assert ops.csr_structure(Ac) is ops.csr_structure(Ac.to_torch())


def test_csr_tensor_from_torch_layouts():
    A = random_csr(15, 12, 0.3, seed=24)
    D = torch.from_numpy(A.toarray())
    B = rand(12, 3, seed=25)
    want = D.double() @ B.double()
    for t in (D, D.to_sparse_coo(), D.to_sparse_csr()):
        c = ops.CsrTensor.from_torch(t)
        assert c.shape == (15, 12) and c.nnz == A.nnz
        torch.testing.assert_close(ops.spmm(c, B).double(), want)
    np.testing.assert_array_equal(c.to_torch().to_dense().numpy(), A.toarray())
    assert "shape=(15, 12)" in repr(c) and "nnz=" in repr(c)


def test_csr_tensor_refuses_inconsistent_arrays():
    p = torch.tensor([0, 1, 2], dtype=torch.int32)
    i = torch.tensor([0, 1], dtype=torch.int32)
    with pytest.raises(ValueError, match="a 3x2 matrix needs 4 row pointers; indptr has 3"):
        ops.CsrTensor(p, i, torch.ones(2), (3, 2))
    with pytest.raises(ValueError, match="2 column indices but 3 values"):
        ops.CsrTensor(p, i, torch.ones(3), (2, 2))
    with pytest.raises(TypeError, match="integer tensors"):
        ops.CsrTensor(p.float(), i, torch.ones(2), (2, 2))
    # Columns out of range reach the kernels' validation, which names them.
    bad = ops.CsrTensor(p, torch.tensor([0, 5], dtype=torch.int32), torch.ones(2), (2, 2))
    with pytest.raises(Exception, match="5"):
        ops.spmm(bad, torch.ones(2, 2))


@pytest.mark.filterwarnings("ignore:Dynamo does not know how to trace")
def test_scipy_matrices_still_run_under_compile():
    """A scipy matrix is not traceable: the compiled function breaks its graph around the
    operator, which runs eagerly, and gives the same values."""
    A = random_csr(20, 15, 0.2, seed=26)
    B = rand(15, 4, seed=27)
    f = torch.compile(lambda b: ops.spmm(A, b) * 2, backend="aot_eager")
    torch.testing.assert_close(f(B).double(), 2 * torch.from_numpy(A.toarray()).double()
                               @ B.double())


def test_a_compiled_kernel_binds_a_csr_tensor():
    """`sparsetir.compile`'s kernels take a CsrTensor as they take a torch sparse tensor."""
    import os

    import sparsetir
    from conftest import KERNELS

    A = random_csr(20, 15, 0.2, seed=30)
    B = rand(15, 4, seed=31)
    k = sparsetir.compile(os.path.join(KERNELS, "csrmm.sp"), target="eval")
    C = k(A=csr(A), B=B)["C"]
    assert isinstance(C, torch.Tensor)
    torch.testing.assert_close(C.double(), torch.from_numpy(A.toarray()).double() @ B.double(),
                               rtol=1e-5, atol=1e-6)
