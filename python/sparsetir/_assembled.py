"""The operators whose result is a sparse matrix the kernel assembles: ``spgemm`` (``A @ B``,
both sparse) and ``spadd`` (``A + B``, two structures), on the catalog kernels ``spgemm.sp``
and ``spadd.sp`` under their default CPU schedules (SpGEMM in one staged pass over the products,
with the workspace the runtime picks per matrix; sparse add in two phases), and their gradients.

The result's structure is whatever the product stores: its row pointers, columns and values
come back from the kernel as three numpy arrays and are returned as a matrix of A's kind
(scipy CSR, torch sparse CSR, or `CsrTensor`). Gradients (torch operands whose values require
them) are sparse too, on each operand's own pattern:

- ``C = A B``, incoming gradient ``G`` on C's pattern: ``dA = (G Bᵀ)`` sampled on A's pattern
  and ``dB = (Aᵀ G)`` sampled on B's pattern, each a masked SpGEMM (``masked_spgemm.sp``, the
  mask all ones: no product outside the pattern is formed);
- ``C = A + B``: ``dA`` and ``dB`` are ``G`` read at A's and B's stored positions (a position
  of C is in A, in B, or in both), one gather each.

They run on the CPU: CUDA operands are refused (no GPU kernel assembles a sparse output yet).
"""

from __future__ import annotations

from typing import Any, Dict

import numpy as np

from . import ops as _ops
from ._native import SparsetirError

_OUT = (("c_indptr", "int32", [0]), ("c_indices", "int32", [0]))


def _assembled(name: str, sa: Any, va: np.ndarray, sb: Any, vb: np.ndarray, **sizes: int):
    """Runs the catalog kernel `name` on A and B (structures and values; `sizes`: the
    kernel's other size parameters) and returns C's CSR arrays: int32 row pointers and
    columns, and values of the operands' element type."""
    dt = _value_dtype(va, vb)
    args = {"a_indptr": sa.indptr, "a_indices": sa.indices, "a": _ops._dense(va, dt),
            "b_indptr": sb.indptr, "b_indices": sb.indices, "b": _ops._dense(vb, dt),
            "m": sa.m, "nnz_a": sa.nnz, "nnz_b": sb.nnz, **sizes}
    k = _ops._kernel(name, dt, 0)
    indptr, indices, values = k.launch(args, [*_OUT, ("c", _ops._acc(dt), [0])])
    return indptr, indices, values.astype(dt, copy=False)


def spgemm_np(sa: Any, va: np.ndarray, sb: Any, vb: np.ndarray):
    """``A @ B`` for structures `sa` (m×k) and `sb` (k×n) with values `va`, `vb`: C's
    ``(indptr, indices, values)``, each row's columns sorted."""
    if sa.n != sb.m:
        raise ValueError(f"spgemm: A is {sa.m}x{sa.n} but B is {sb.m}x{sb.n}")
    return _assembled("spgemm", sa, va, sb, vb, k=sa.n, n=sb.n)


def spadd_np(sa: Any, va: np.ndarray, sb: Any, vb: np.ndarray):
    """``A + B`` for structures `sa` and `sb` of one shape: C's ``(indptr, indices, values)``
    on the union of their patterns."""
    if (sa.m, sa.n) != (sb.m, sb.n):
        raise ValueError(f"spadd: A is {sa.m}x{sa.n} but B is {sb.m}x{sb.n}")
    return _assembled("spadd", sa, va, sb, vb, n=sa.n)


_KERNELS = {"spgemm": spgemm_np, "spadd": spadd_np}


def masked_spgemm_np(sm: Any, sa: Any, va: np.ndarray, sb: Any, vb: np.ndarray) -> np.ndarray:
    """``(A @ B)`` sampled on the pattern of `sm` (its values: one per stored element of `sm`),
    no product outside that pattern formed."""
    dt = _value_dtype(va, vb)
    if sm.nnz == 0:
        return np.zeros(0, dt)
    k = _ops._kernel("masked_spgemm", dt, 0)
    (c,) = k.launch(
        {"mask": sm.filled(1.0, dt), "m_indptr": sm.indptr, "m_indices": sm.indices,
         "a": _ops._dense(va, dt), "a_indptr": sa.indptr, "a_indices": sa.indices,
         "b": _ops._dense(vb, dt), "b_indptr": sb.indptr, "b_indices": sb.indices,
         "m": sm.m, "k": sa.n, "n": sm.n, "nnz_m": sm.nnz, "nnz_a": sa.nnz, "nnz_b": sb.nnz},
        [("c", _ops._acc(dt), [sm.nnz])])
    return c.astype(dt, copy=False)


def _value_dtype(va: np.ndarray, vb: np.ndarray) -> np.dtype:
    """float64 if either operand is; float32 otherwise (the kernels' two instances)."""
    return np.dtype(np.float64) if np.float64 in (va.dtype, vb.dtype) else np.dtype(np.float32)


def positions_in(sc: Any, sx: Any) -> np.ndarray:
    """For each stored element of `sx`, its position among C's stored elements, where C's
    pattern holds X's (sparse add: C's pattern is the union)."""
    rows = sx.rows()
    # Row by row, C's columns are sorted: a stored (i, j) of X is found by a binary search of
    # j in row i of C, done for all at once on keys i * n + j (C's keys ascend).
    keys_c = sc.rows() * sc.n + sc.indices
    return np.searchsorted(keys_c, rows * sc.n + sx.indices).astype(np.int64)


# ---------------------------------------------------------------------------------------------
# Results of A's kind, torch operands, autograd


def _result(A: Any, indptr, indices, values, shape) -> Any:
    """C as a matrix of A's kind: `CsrTensor`, torch sparse CSR, or scipy CSR."""
    if isinstance(A, _ops.CsrTensor) or _ops._is_torch(A):
        import torch

        parts = (torch.from_numpy(indptr), torch.from_numpy(indices),
                 values if isinstance(values, torch.Tensor) else torch.from_numpy(values))
        if isinstance(A, _ops.CsrTensor):
            return _ops.CsrTensor(*parts, shape)
        return torch.sparse_csr_tensor(*parts, size=shape)
    import scipy.sparse

    if values.dtype == np.float16:
        values = values.astype(np.float32)
    return scipy.sparse.csr_matrix((values, indices, indptr), shape=shape)


def _torch_fn(name: str):
    """The autograd Function of `name` (``spgemm`` or ``spadd``), made on first use."""
    fns = _ops._torch_fns
    key = "assembled " + name
    if key in fns:
        return fns[key]
    import torch

    def T(a):
        return torch.from_numpy(a)

    class Assembled(torch.autograd.Function):
        """``values of C`` from the values of A and B: the structures (`sa`, `sb`) ride along
        as constants, C's structure is kept in ``ctx`` for the backward pass."""

        @staticmethod
        def forward(ctx, va, vb, sa, sb, out):
            a, b = _ops._np(va), _ops._np(vb)
            indptr, indices, values = _KERNELS[name](sa, a, sb, b)
            sc = _ops._Csr(sa.m, sb.n, indptr, indices)
            ctx.structures = (sa, sb, sc)
            ctx.save_for_backward(va, vb)
            out["indptr"], out["indices"] = indptr, indices
            return T(values)

        @staticmethod
        def backward(ctx, g):
            sa, sb, sc = ctx.structures
            va, vb = ctx.saved_tensors
            gn = _ops._np(g)
            g_a = g_b = None
            if name == "spgemm":
                if ctx.needs_input_grad[0]:
                    # dA = G Bᵀ on A's pattern.
                    bt, perm = sb.transpose()
                    g_a = T(masked_spgemm_np(sa, sc, gn, bt, _ops._np(vb)[perm]))
                if ctx.needs_input_grad[1]:
                    # dB = Aᵀ G on B's pattern.
                    at, perm = sa.transpose()
                    g_b = T(masked_spgemm_np(sb, at, _ops._np(va)[perm], sc, gn))
            else:
                if ctx.needs_input_grad[0]:
                    g_a = T(np.ascontiguousarray(gn[positions_in(sc, sa)]))
                if ctx.needs_input_grad[1]:
                    g_b = T(np.ascontiguousarray(gn[positions_in(sc, sb)]))
            return (None if g_a is None else g_a.to(va.dtype),
                    None if g_b is None else g_b.to(vb.dtype), None, None, None)

    fns[key] = Assembled
    return Assembled


def run(name: str, A: Any, B: Any) -> Any:
    """``spgemm`` or ``spadd`` of two sparse matrices (scipy, torch sparse, `CsrTensor`): the
    result of A's kind."""
    if _ops._compiling(A) or _ops._compiling(B):
        # The result's size depends on the data, which a traced graph cannot hold: said here,
        # where TorchDynamo reports it (with fullgraph=True) or runs the call eagerly.
        raise SparsetirError(
            f"{name}: the size of its result depends on the matrices' data, so torch.compile "
            "cannot trace it; call it outside the compiled function (or without "
            "fullgraph=True, where it runs eagerly)")
    sa, va, torch_a = _ops._operands(A, ())
    sb, vb, torch_b = _ops._operands(B, ())
    shape = (sa.m, sb.n)
    kernel = _KERNELS[name]
    if not (torch_a or torch_b):
        indptr, indices, values = kernel(sa, np.asarray(va), sb, np.asarray(vb))
        return _result(A, indptr, indices, values, shape)
    import torch

    va, vb = (v if _ops._is_torch(v) else torch.from_numpy(np.asarray(v)) for v in (va, vb))
    for v in (va, vb):
        if v.device.type != "cpu":
            raise SparsetirError(
                f"{name}: the operands are on {v.device}, but sparse outputs are assembled by "
                "the CPU kernels only; move them with .cpu()")
    dt = torch.float64 if torch.float64 in (va.dtype, vb.dtype) else torch.float32
    va, vb = va.to(dt), vb.to(dt)
    if _ops._recorded(va, vb):
        out: Dict[str, np.ndarray] = {}
        values = _torch_fn(name).apply(va, vb, sa, sb, out)
        return _result(A, out["indptr"], out["indices"], values, shape)
    indptr, indices, values = kernel(sa, _ops._np(va), sb, _ops._np(vb))
    return _result(A, indptr, indices, values, shape)
