"""sparsetir's operators as PyTorch custom operators (``torch.ops.sparsetir.*``), the path
``sparsetir.ops`` takes on a ``CsrTensor`` under ``torch.compile``.

TorchDynamo cannot trace the operators' own code (numpy, the native module, a structure cache
keyed by addresses), and refuses torch's sparse tensors. Each operator is therefore one custom
operator over plain tensors and integers: the matrix as its ``indptr``/``indices``/``values``
tensors and its shape. What the compiler needs of them is registered with PyTorch:

- a fake implementation (``register_fake``): the result's shape, dtype and device from the
  operands', with no kernel run, so that the graph is traced and compiled once;
- the gradients (``register_autograd``), written with the same custom operators (the
  transposed product, the sampled product, the softmax's backward), so that AOTAutograd traces
  the backward pass into the graph as well.

The real implementation of each is the eager operators' own (``ops._t_spmm`` and the others):
the structure is looked up by the index tensors' addresses in the same cache, and the kernels
run on the CPU or the GPU where the tensors are (every result a new tensor: PyTorch checks
that none aliases an operand). The functions at the end are what
``sparsetir.ops.spmm`` and the others call while TorchDynamo traces them: the same checks and
dtype rules as the eager path, in code it can trace.

Importing this module registers the operators; ``sparsetir.ops`` imports it the first time an
operator is traced.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import torch
from torch import Tensor

from . import ops as _ops
from ._native import SparsetirError

if not hasattr(torch.library, "custom_op"):  # pragma: no cover - torch before 2.4
    raise SparsetirError(
        f"sparsetir's operators under torch.compile need torch.library.custom_op (PyTorch 2.4 "
        f"or later); this is PyTorch {torch.__version__}")


def _structure(indptr: Tensor, indices: Tensor, m: int, n: int) -> Any:
    return _ops._index_structure(indptr, indices, m, n)


# ---------------------------------------------------------------------------------------------
# The operators: real implementations and shapes


@torch.library.custom_op("sparsetir::spmm", mutates_args=())
def spmm_op(indptr: Tensor, indices: Tensor, values: Tensor, b: Tensor, m: int, n: int,
            reduce: str) -> Tensor:
    """``A @ b`` (``reduce`` "sum"), or each row's largest/smallest product ("max"/"min", a
    row that stores nothing giving 0); `values` and `b` of one dtype, the result's."""
    kernel = "csrmm" if reduce == "sum" else "csrmm_" + reduce
    return _ops._t_spmm(_structure(indptr, indices, m, n), values, b.contiguous(), kernel)


@spmm_op.register_fake
def _(indptr, indices, values, b, m, n, reduce):
    return b.new_empty((m, b.shape[1]))


def _transposed(indptr: Tensor, indices: Tensor, values: Tensor, m: int, n: int):
    """Aᵀ's structure (built once per matrix) and values (permuted at each call)."""
    s = _structure(indptr, indices, m, n)
    return s.transpose()[0], values[s.torch_perm(values.device)]


@torch.library.custom_op("sparsetir::spmm_t", mutates_args=())
def spmm_t_op(indptr: Tensor, indices: Tensor, values: Tensor, g: Tensor, m: int,
              n: int) -> Tensor:
    """``Aᵀ @ g`` for the m×n matrix A (an n×k result)."""
    return _ops._t_spmm(*_transposed(indptr, indices, values, m, n), g.contiguous())


@spmm_t_op.register_fake
def _(indptr, indices, values, g, m, n):
    return g.new_empty((n, g.shape[1]))


@torch.library.custom_op("sparsetir::sddmm", mutates_args=())
def sddmm_op(indptr: Tensor, indices: Tensor, values: Optional[Tensor], x: Tensor, y: Tensor,
             m: int, n: int) -> Tensor:
    """The values of ``A ∘ (x yᵀ)`` on A's pattern (``values`` None: ``x yᵀ`` sampled)."""
    return _ops._t_sddmm(_structure(indptr, indices, m, n), values, x.contiguous(),
                         y.contiguous())


@sddmm_op.register_fake
def _(indptr, indices, values, x, y, m, n):
    return x.new_empty((indices.shape[0],))


@torch.library.custom_op("sparsetir::spmv", mutates_args=())
def spmv_op(indptr: Tensor, indices: Tensor, values: Tensor, x: Tensor, m: int,
            n: int) -> Tensor:
    """``A @ x`` for a vector ``x``."""
    return _ops._t_spmv(_structure(indptr, indices, m, n), values, x.contiguous())


@spmv_op.register_fake
def _(indptr, indices, values, x, m, n):
    return x.new_empty((m,))


@torch.library.custom_op("sparsetir::spmv_t", mutates_args=())
def spmv_t_op(indptr: Tensor, indices: Tensor, values: Tensor, g: Tensor, m: int,
              n: int) -> Tensor:
    """``Aᵀ @ g`` for a vector ``g``."""
    return _ops._t_spmv(*_transposed(indptr, indices, values, m, n), g.contiguous())


@spmv_t_op.register_fake
def _(indptr, indices, values, g, m, n):
    return g.new_empty((n,))


@torch.library.custom_op("sparsetir::sparse_softmax", mutates_args=())
def softmax_op(indptr: Tensor, indices: Tensor, values: Tensor, m: int, n: int) -> Tensor:
    """Each row's softmax over its stored values."""
    return _ops._t_softmax(_structure(indptr, indices, m, n), values.contiguous())


@softmax_op.register_fake
def _(indptr, indices, values, m, n):
    return torch.empty_like(values)


@torch.library.custom_op("sparsetir::sparse_softmax_backward", mutates_args=())
def softmax_backward_op(indptr: Tensor, indices: Tensor, p: Tensor, g: Tensor, m: int,
                        n: int) -> Tensor:
    """``p ∘ (g - rowsum(p ∘ g))``: the gradient of the softmax's input from its output `p`."""
    return _ops._t_softmax_grad(_structure(indptr, indices, m, n), p.contiguous(),
                                g.contiguous())


@softmax_backward_op.register_fake
def _(indptr, indices, p, g, m, n):
    return torch.empty_like(p)


@torch.library.custom_op("sparsetir::spmm_extreme_backward", mutates_args=())
def extreme_backward_op(indptr: Tensor, indices: Tensor, values: Tensor, b: Tensor,
                        c: Tensor, g: Tensor, m: int, n: int, need_values: bool,
                        need_b: bool) -> Tuple[Tensor, Tensor]:
    """The gradients of ``c = spmm(A, b, reduce="max"|"min")`` w.r.t. A's values and `b` (an
    empty tensor for one not needed): each output's gradient to the products equal to it,
    split evenly among ties."""
    s = _structure(indptr, indices, m, n)
    v, bd, g = values.detach(), b.detach().contiguous(), g.contiguous()
    if _ops._device.on_gpu(b):
        g_v, g_b = _ops._device.extreme_grads(s, v, bd, c, g, need_values, need_b)
    else:
        import numpy as np

        acc = np.float64 if c.dtype == torch.float64 else np.float32
        g_v, g_b = _ops._extreme_grads_np(
            s, _ops._np(v).astype(acc, copy=False), _ops._np(bd).astype(acc, copy=False),
            _ops._np(c), _ops._np(g).astype(acc, copy=False), need_values, need_b)
        g_v = None if g_v is None else torch.from_numpy(g_v)
        g_b = None if g_b is None else torch.from_numpy(g_b)
    g_v = values.new_empty((0,)) if g_v is None else g_v.to(values.dtype)
    g_b = b.new_empty((0,)) if g_b is None else g_b.to(b.dtype)
    return g_v, g_b


@extreme_backward_op.register_fake
def _(indptr, indices, values, b, c, g, m, n, need_values, need_b):
    return (values.new_empty((values.shape[0],) if need_values else (0,)),
            b.new_empty(b.shape if need_b else (0,)))


@torch.library.custom_op("sparsetir::row_scale", mutates_args=())
def row_scale_op(indptr: Tensor, indices: Tensor, values: Tensor, m: int, n: int) -> Tensor:
    """Each stored value divided by its row's stored count (mean aggregation's weights)."""
    return _ops._mean_weights(_structure(indptr, indices, m, n), values)


@row_scale_op.register_fake
def _(indptr, indices, values, m, n):
    return torch.empty_like(values)


# ---------------------------------------------------------------------------------------------
# Gradients, in the operators above (so that AOTAutograd traces the backward pass too)


def _save_matrix(ctx: Any, inputs: Tuple[Any, ...], m: int, n: int,
                 *saved: Optional[Tensor]) -> None:
    """Keeps the matrix for the backward pass: its index tensors (the first two inputs) and the
    tensors `saved`, and its shape `m` × `n` as ``ctx.m``, ``ctx.n``."""
    ctx.m, ctx.n = m, n
    ctx.save_for_backward(inputs[0], inputs[1], *saved)


def _spmm_setup(ctx, inputs, output):
    indptr, indices, values, b, m, n, reduce = inputs
    ctx.reduce = reduce
    _save_matrix(ctx, inputs, m, n, values, b, output if reduce != "sum" else None)


def _spmm_backward(ctx, grad):
    indptr, indices, values, b, c = ctx.saved_tensors
    m, n = ctx.m, ctx.n
    need_v, need_b = ctx.needs_input_grad[2], ctx.needs_input_grad[3]
    g_v = g_b = None
    if ctx.reduce == "sum":
        if need_v:
            # dL/dA[i,j] = sum_k G[i,k] B[j,k] at A's stored (i, j).
            g_v = sddmm_op(indptr, indices, None, grad, b, m, n)
        if need_b:
            g_b = spmm_t_op(indptr, indices, values, grad, m, n)
    elif need_v or need_b:
        g_v, g_b = extreme_backward_op(indptr, indices, values, b, c, grad, m, n, need_v,
                                       need_b)
        g_v, g_b = (g_v if need_v else None), (g_b if need_b else None)
    return None, None, g_v, g_b, None, None, None


spmm_op.register_autograd(_spmm_backward, setup_context=_spmm_setup)


def _matrix_vector_setup(ctx, inputs, output):
    """For the operators of inputs ``(indptr, indices, values, x, m, n)``: spmv, spmm_t,
    spmv_t."""
    indptr, indices, values, x, m, n = inputs
    _save_matrix(ctx, inputs, m, n, values, x)


def _spmm_t_backward(ctx, grad):
    # out = Aᵀ g: d g = A grad, d A[i,j] = g[i, :] · grad[j, :] (a second derivative of SpMM).
    indptr, indices, values, g = ctx.saved_tensors
    m, n = ctx.m, ctx.n
    g_v = g_g = None
    if ctx.needs_input_grad[2]:
        g_v = sddmm_op(indptr, indices, None, g, grad, m, n)
    if ctx.needs_input_grad[3]:
        g_g = spmm_op(indptr, indices, values, grad, m, n, "sum")
    return None, None, g_v, g_g, None, None


spmm_t_op.register_autograd(_spmm_t_backward, setup_context=_matrix_vector_setup)


def _spmv_t_backward(ctx, grad):
    indptr, indices, values, g = ctx.saved_tensors
    m, n = ctx.m, ctx.n
    g_v = g_g = None
    if ctx.needs_input_grad[2]:
        g_v = sddmm_op(indptr, indices, None, g[:, None], grad[:, None], m, n)
    if ctx.needs_input_grad[3]:
        g_g = spmv_op(indptr, indices, values, grad, m, n)
    return None, None, g_v, g_g, None, None


spmv_t_op.register_autograd(_spmv_t_backward, setup_context=_matrix_vector_setup)


def _sddmm_setup(ctx, inputs, output):
    indptr, indices, values, x, y, m, n = inputs
    _save_matrix(ctx, inputs, m, n, values, x, y)


def _sddmm_backward(ctx, grad):
    indptr, indices, values, x, y = ctx.saved_tensors
    m, n = ctx.m, ctx.n
    need_v, need_x, need_y = ctx.needs_input_grad[2:5]
    g_v = g_x = g_y = None
    if need_v and values is not None:
        g_v = grad * sddmm_op(indptr, indices, None, x, y, m, n)
    # Both dense gradients multiply by G ∘ values on the pattern.
    w = grad if values is None else grad * values
    if need_x:
        g_x = spmm_op(indptr, indices, w, y, m, n, "sum")
    if need_y:
        g_y = spmm_t_op(indptr, indices, w, x, m, n)
    return None, None, g_v, g_x, g_y, None, None


sddmm_op.register_autograd(_sddmm_backward, setup_context=_sddmm_setup)


def _spmv_backward(ctx, grad):
    indptr, indices, values, x = ctx.saved_tensors
    m, n = ctx.m, ctx.n
    g_v = g_x = None
    if ctx.needs_input_grad[2]:
        g_v = sddmm_op(indptr, indices, None, grad[:, None], x[:, None], m, n)
    if ctx.needs_input_grad[3]:
        g_x = spmv_t_op(indptr, indices, values, grad, m, n)
    return None, None, g_v, g_x, None, None


spmv_op.register_autograd(_spmv_backward, setup_context=_matrix_vector_setup)


def _softmax_setup(ctx, inputs, output):
    _save_matrix(ctx, inputs, inputs[3], inputs[4], output)


def _softmax_backward(ctx, grad):
    indptr, indices, p = ctx.saved_tensors
    g = None
    if ctx.needs_input_grad[2]:
        g = softmax_backward_op(indptr, indices, p, grad, ctx.m, ctx.n)
    return None, None, g, None, None


softmax_op.register_autograd(_softmax_backward, setup_context=_softmax_setup)


def _row_scale_setup(ctx, inputs, output):
    _save_matrix(ctx, inputs, inputs[3], inputs[4])


def _row_scale_backward(ctx, grad):
    indptr, indices = ctx.saved_tensors
    # Linear in the values: the gradient is scaled the same way.
    return None, None, row_scale_op(indptr, indices, grad, ctx.m, ctx.n), None, None


row_scale_op.register_autograd(_row_scale_backward, setup_context=_row_scale_setup)


# ---------------------------------------------------------------------------------------------
# What `sparsetir.ops` calls on a `CsrTensor` while TorchDynamo traces it


def _tensor(x: Any) -> Tensor:
    return x if isinstance(x, Tensor) else torch.as_tensor(x)


def spmm(A: Any, B: Any, reduce: str) -> Tensor:
    m, n = A.shape
    b = _tensor(B)
    if b.dim() != 2:
        raise ValueError(f"spmm: B must be 2-D, got shape {tuple(b.shape)}")
    if b.shape[0] != n:
        raise ValueError(f"spmm: A is {m}x{n} but B has {b.shape[0]} rows")
    dt = _ops._torch_dtype(b, values=A.values)
    v, b = A.values.to(dt), b.to(dt)
    if reduce == "mean":
        v, reduce = row_scale_op(A.indptr, A.indices, v, m, n), "sum"
    return spmm_op(A.indptr, A.indices, v, b, m, n, reduce)


def sddmm(A: Any, X: Any, Y: Any) -> Any:
    m, n = A.shape
    x, y = _tensor(X), _tensor(Y)
    if x.dim() != 2 or y.dim() != 2:
        raise ValueError(f"sddmm: X and Y must be 2-D, got shapes {tuple(x.shape)} and "
                         f"{tuple(y.shape)}")
    if x.shape[0] != m or y.shape[0] != n or x.shape[1] != y.shape[1]:
        raise ValueError(
            f"sddmm: A is {m}x{n}, so X must be {m}xK and Y {n}xK; got X {tuple(x.shape)} "
            f"and Y {tuple(y.shape)}")
    dt = _ops._torch_dtype(x, y, values=A.values)
    v, x, y = A.values.to(dt), x.to(dt), y.to(dt)
    return A.with_values(sddmm_op(A.indptr, A.indices, v, x, y, m, n))


def spmv(A: Any, x: Any) -> Tensor:
    m, n = A.shape
    xv = _tensor(x)
    if xv.dim() != 1 or xv.shape[0] != n:
        raise ValueError(f"spmv: A is {m}x{n} but x has shape {tuple(xv.shape)}")
    dt = _ops._torch_dtype(xv, values=A.values)
    return spmv_op(A.indptr, A.indices, A.values.to(dt), xv.to(dt), m, n)


def sparse_softmax(A: Any) -> Any:
    m, n = A.shape
    v = A.values.to(_ops._torch_dtype(values=A.values))
    return A.with_values(softmax_op(A.indptr, A.indices, v, m, n))


def masked_attention(M: Any, Q: Any, K: Any, V: Any, scale: Optional[float]) -> Tensor:
    m, n = M.shape
    q, k, v = _tensor(Q), _tensor(K), _tensor(V)
    if q.dim() != 2 or k.dim() != 2 or v.dim() != 2:
        raise ValueError(f"masked_attention: Q, K and V must be 2-D; got shapes "
                         f"{tuple(q.shape)}, {tuple(k.shape)} and {tuple(v.shape)}")
    if scale is None:
        scale = 1.0 / float(q.shape[1]) ** 0.5 if q.shape[1] > 0 else 1.0
    dt = _ops._torch_dtype(q, k, v)
    q, k, v = q.to(dt), k.to(dt), v.to(dt)
    weights = torch.full((M.indices.shape[0],), float(scale), dtype=dt, device=q.device)
    scores = sddmm(M.with_values(weights), q, k).values
    probs = softmax_op(M.indptr, M.indices, scores, m, n)
    return spmm(M.with_values(probs), v, "sum")
