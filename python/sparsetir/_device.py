"""The GPU side of ``sparsetir.ops``: the catalog kernels under their default GPU schedules,
run on PyTorch CUDA tensors where they are.

A launch passes each dense tensor by its device address (``_native.device_array``: no copy)
and the matrix's structure as the frozen arrays ``ops`` keeps per matrix (copied to the GPU by
the first launch on it, and kept there); it is queued on the tensors' current CUDA stream and
returns once the kernels are queued, as PyTorch's operators do (a kernel with intermediate
buffers, the softmax's, waits for them). Kernels are built with NVRTC on first use, once per
(kernel, dtype, feature width, schedule) per process. The kernels run on the first GPU
(``cuda:0``), the context PyTorch uses there.

For tests without a GPU, ``emulated()`` sends CPU tensors through the same path to the CUDA
emulator (``cuda-emu``), whose device memory is host memory.
"""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Tuple

from . import _native
from ._native import SparsetirError

_EMULATE = False
_kernels: Dict[Tuple[str, str, int, str, str], Any] = {}
# The same kernels by `_kernel`'s arguments (the matrix by its row statistics): one lookup a
# call, without asking for the schedule's text again.
_by_call: Dict[Tuple[Any, ...], Any] = {}


@contextlib.contextmanager
def emulated():
    """Within this block, operators on CPU torch tensors run the CUDA kernels in the
    emulator, as they would run on CUDA tensors on a GPU (for tests)."""
    global _EMULATE
    old, _EMULATE = _EMULATE, True
    try:
        yield
    finally:
        _EMULATE = old


def on_gpu(t: Any) -> bool:
    """Whether operators on tensor `t` take the GPU path."""
    return t.device.type == "cuda" or (_EMULATE and t.device.type == "cpu")


def _target(t: Any) -> str:
    if t.device.type == "cuda":
        if t.device.index not in (None, 0):
            raise SparsetirError(
                f"sparsetir's GPU kernels run on the first GPU (cuda:0); a tensor is on "
                f"{t.device}")
        return "cuda"
    return "cuda-emu"


def same_device(op: str, *ts: Any) -> None:
    """Refuses operands on different devices, as PyTorch does."""
    devices = {t.device for t in ts}
    if len(devices) > 1:
        raise SparsetirError(f"{op}: operands on different devices: "
                             f"{', '.join(sorted(str(d) for d in devices))}")


def _dtype_name(t: Any) -> str:
    name = str(t.dtype).replace("torch.", "")
    if name not in ("float32", "float64", "float16", "int32", "int64"):
        raise SparsetirError(f"sparsetir's GPU kernels take float32, float64 or float16 "
                             f"tensors, not {t.dtype}")
    return name


def _arg(t: Any, writable: bool = False) -> Any:
    """Tensor `t` (contiguous) as a launch argument, by address."""
    if not t.is_contiguous():
        raise SparsetirError("internal: a non-contiguous tensor lent to a GPU kernel")
    return _native.device_array(t.data_ptr(), t.numel(), _dtype_name(t), writable)


def _row_stats(s: Any) -> Tuple[int, float]:
    """The longest and the mean row of `s` (cached with the structure)."""
    stats = s._torch.get("row stats")
    if stats is None:
        degrees = s.degrees()
        stats = (int(degrees.max()) if len(degrees) else 0, s.nnz / max(s.m, 1))
        s._torch["row stats"] = stats
    return stats


def _kernel(name: str, dt: str, feat: int, target: str, s: Any = None) -> Any:
    """Catalog kernel `name` for element type `dt`, `feat_size` specialised to `feat`, under
    its default GPU schedule (SpMM's chosen for the rows of `s`): compiled on first use, then
    a dictionary lookup."""
    rows = _row_stats(s) if name == "csrmm" and s is not None else None
    call = (name, dt, feat, target, rows)
    k = _by_call.get(call)
    if k is not None:
        return k
    if rows is not None:
        schedule = _native.gpu_schedule(_native.spmm_gpu_schedule_name(feat, *rows))
    else:
        schedule = _native.gpu_schedule(name)
    key = (name, dt, feat, schedule or "", target)
    k = _kernels.get(key)
    if k is None:
        if dt == "float16":
            source = _native.catalog_source_stored_as(name, dt)
        else:
            source = _native.catalog_source(name)
            if dt != "float32":
                source = source.replace("float32", dt)
        spec = [("feat_size", feat)] if "feat_size" in source else []
        k = _native.compile(source, f"<catalog {name}.sp>", target, schedule, None, spec, None)
        _kernels[key] = k
    _by_call[call] = k
    return k


def _launch(k: Any, args: Dict[str, Any], like: Any) -> None:
    """Runs `k` on `args`, queued on the current stream of `like`'s device."""
    stream = 0
    if like.device.type == "cuda":
        import torch

        stream = torch.cuda.current_stream(like.device).cuda_stream
    k.launch_device(args, stream)


def _out(shape: Tuple[int, ...], dt: Any, like: Any) -> Any:
    """A fresh output for a kernel computing in `dt` (float16 operands: float32 outputs)."""
    import torch

    acc = torch.float32 if dt == torch.float16 else dt
    return torch.empty(shape, dtype=acc, device=like.device)


# Large power-law graphs take the hyb SpMM (float32): session 10 measured CSR at 0.22-0.24x
# cuSPARSE on the R-MAT graphs (2 M and 1.2 M stored entries) and hyb at 1.12-1.15x, while on
# the Planetoid graphs CSR was the faster (bench/gpu/RESULTS.md). At least this many stored
# entries, and rows as uneven as SpMM's row-split schedule asks for.
HYB_MIN_NNZ = 1_000_000


def _hyb(s: Any, feat: int, target: str, device: Any):
    """The hyb SpMM of `s` at width `feat` (`_native.hyb_spmm`, made once per structure) and,
    per values parameter, the CSR position of each slot on `device` (padding: ``nnz``, the
    zero appended to the values)."""
    import numpy as np
    import torch

    key = ("hyb", feat, target, str(device))
    plan = s._torch.get(key)
    if plan is None:
        native = _native.hyb_spmm(s.indptr, s.indices, s.m, s.n, feat, target)
        gathers = [(name, torch.from_numpy(np.where(src < 0, s.nnz, src)).to(device))
                   for name, src in native.sources()]
        plan = s._torch[key] = (native, gathers)
    return plan


def _takes_hyb(s: Any, feat: int, B: Any) -> bool:
    import torch

    if B.dtype != torch.float32 or s.nnz < HYB_MIN_NNZ:
        return False
    return _native.spmm_gpu_schedule_name(feat, *_row_stats(s)) != "csrmm"


def spmm(s: Any, values: Any, B: Any) -> Any:
    """``A @ B`` (values and B of one dtype)."""
    if B.dim() != 2:
        raise ValueError(f"spmm: B must be 2-D, got shape {tuple(B.shape)}")
    if B.shape[0] != s.n:
        raise ValueError(f"spmm: A is {s.m}x{s.n} but B has {B.shape[0]} rows")
    feat = B.shape[1]
    c = _out((s.m, feat), B.dtype, B)
    if feat == 0 or s.m == 0:
        return c.zero_().to(B.dtype)
    v, b = values.contiguous(), B.contiguous()
    args = {**s.launch_args(), "a": _arg(v), "b": _arg(b), "c": _arg(c, True),
            "m": s.m, "n": s.n, "nnz": s.nnz, "feat_size": feat}
    if _takes_hyb(s, feat, b):
        import torch

        native, gathers = _hyb(s, feat, _target(b), b.device)
        # The bucket values: one gather each from the values and an appended zero (kept
        # alive through the launch).
        ext = torch.cat([v, v.new_zeros(1)])
        laid = [(name, ext[idx]) for name, idx in gathers]
        for name, t in laid:
            args[name] = _arg(t)
        _launch(native, args, b)
        return c
    k = _kernel("csrmm", _dtype_name(b), feat, _target(b), s)
    _launch(k, args, b)
    return c.to(B.dtype)


def sddmm(s: Any, values: Any, X: Any, Y: Any) -> Any:
    """Values of ``A ∘ (X Yᵀ)`` on A's pattern (values of X's dtype)."""
    if X.dim() != 2 or Y.dim() != 2:
        raise ValueError(f"sddmm: X and Y must be 2-D, got shapes {tuple(X.shape)} and "
                         f"{tuple(Y.shape)}")
    if X.shape[0] != s.m or Y.shape[0] != s.n or X.shape[1] != Y.shape[1]:
        raise ValueError(
            f"sddmm: A is {s.m}x{s.n}, so X must be {s.m}xK and Y {s.n}xK; got X "
            f"{tuple(X.shape)} and Y {tuple(Y.shape)}")
    feat = X.shape[1]
    y = _out((s.nnz,), X.dtype, X)
    if feat == 0 or s.nnz == 0:
        return y.zero_().to(X.dtype)
    v, x, yy = values.contiguous(), X.contiguous(), Y.contiguous()
    k = _kernel("sddmm", _dtype_name(x), feat, _target(x))
    _launch(k, {**s.launch_args(), "x": _arg(v), "a": _arg(x), "b": _arg(yy),
                "y": _arg(y, True), "m": s.m, "n": s.n, "nnz": s.nnz, "feat_size": feat}, x)
    return y.to(X.dtype)


def spmv(s: Any, values: Any, x: Any) -> Any:
    """``A @ x``."""
    if x.dim() != 1 or x.shape[0] != s.n:
        raise ValueError(f"spmv: A is {s.m}x{s.n} but x has shape {tuple(x.shape)}")
    y = _out((s.m,), x.dtype, x)
    if s.m == 0:
        return y.to(x.dtype)
    v, xx = values.contiguous(), x.contiguous()
    k = _kernel("spmv", _dtype_name(xx), 0, _target(xx))
    _launch(k, {**s.launch_args(), "a": _arg(v), "x": _arg(xx), "y": _arg(y, True),
                "m": s.m, "n": s.n, "nnz": s.nnz}, xx)
    return y.to(x.dtype)


def softmax(s: Any, values: Any) -> Any:
    """Each row's softmax over its stored values."""
    b = _out((s.nnz,), values.dtype, values)
    if s.nnz == 0:
        return b.to(values.dtype)
    v = values.contiguous()
    k = _kernel("sparse_softmax", _dtype_name(v), 0, _target(v))
    _launch(k, {**s.launch_args(), "a": _arg(v), "b": _arg(b, True), "m": s.m, "n": s.n,
                "nnz": s.nnz}, v)
    return b.to(values.dtype)


def spmm_extreme(s: Any, values: Any, B: Any, kernel: str) -> Any:
    """``spmm(A, B, reduce="max"|"min")`` (`kernel`: ``csrmm_max``/``csrmm_min``): a row that
    stores nothing gives 0. float16 operands run the float32 kernel (max and min are exact)."""
    import torch

    if B.dim() != 2:
        raise ValueError(f"spmm: B must be 2-D, got shape {tuple(B.shape)}")
    if B.shape[0] != s.n:
        raise ValueError(f"spmm: A is {s.m}x{s.n} but B has {B.shape[0]} rows")
    if B.dtype == torch.float16:
        return spmm_extreme(s, values.float(), B.float(), kernel).half()
    feat = B.shape[1]
    c = _out((s.m, feat), B.dtype, B)
    if feat == 0 or s.m == 0:
        return c.zero_()
    v, b = values.contiguous(), B.contiguous()
    k = _kernel(kernel, _dtype_name(b), feat, _target(b))
    _launch(k, {**s.launch_args(), "a": _arg(v), "b": _arg(b), "c": _arg(c, True),
                "m": s.m, "n": s.n, "nnz": s.nnz, "feat_size": feat}, b)
    empty = s.torch_empty_rows(c.device)
    if len(empty):
        c[empty] = 0
    return c


def extreme_grads(s: Any, values: Any, B: Any, C: Any, G: Any, need_values: bool,
                  need_B: bool):
    """The gradients of ``C = spmm(A, B, reduce="max"|"min")`` w.r.t. A's values and B: each
    output's gradient goes to the products equal to it, split evenly among ties. float32 and
    float64 run the kernels ``extreme_count``, ``extreme_grad_a`` and ``extreme_grad_b``
    under their GPU schedules; float16 outputs, whose ties are among products rounded to
    float16, compute in PyTorch on nnz × k tensors."""
    import torch

    if C.dtype == torch.float16 or s.nnz == 0:
        return _extreme_grads_torch(s, values.float(), B.float(), C, G.float(), need_values,
                                    need_B)
    m, feat = C.shape
    v, b, e, g = (x.contiguous() for x in (values, B, C, G.to(C.dtype)))
    dt, target = _dtype_name(e), _target(e)
    common = {"m": s.m, "n": s.n, "nnz": s.nnz, "feat_size": feat}
    ties = torch.empty_like(e)
    _launch(_kernel("extreme_count", dt, feat, target),
            {**s.launch_args(), **common, "a": _arg(v), "b": _arg(b), "e": _arg(e),
             "c": _arg(ties, True)}, e)
    w = torch.div(g, ties.clamp_(min=1), out=ties)
    g_values = g_B = None
    if need_values:
        g_values = torch.empty(s.nnz, dtype=e.dtype, device=e.device)
        _launch(_kernel("extreme_grad_a", dt, feat, target),
                {**s.launch_args(), **common, "a": _arg(v), "b": _arg(b), "e": _arg(e),
                 "w": _arg(w), "y": _arg(g_values, True)}, e)
    if need_B:
        t = s.transpose()[0]
        at = v[s.torch_perm(v.device)].contiguous()
        g_B = torch.empty((s.n, feat), dtype=e.dtype, device=e.device)
        _launch(_kernel("extreme_grad_b", dt, feat, target),
                {**t.launch_args(), "n": s.n, "m": s.m, "nnz": s.nnz, "feat_size": feat,
                 "at": _arg(at), "b": _arg(b), "e": _arg(e), "w": _arg(w),
                 "c": _arg(g_B, True)}, e)
    return g_values, g_B


def _extreme_grads_torch(s: Any, values: Any, B: Any, C: Any, G: Any, need_values: bool,
                         need_B: bool):
    """`extreme_grads` in PyTorch operations (any device): a product reaches its output where,
    rounded to C's type, it equals it."""
    import torch

    rows = s.torch_rows(values.device)
    cols = s.torch_cols(values.device)
    prod = values[:, None] * B[cols]
    hit = (prod.to(C.dtype) == C[rows]).to(prod.dtype)
    ties = torch.zeros(C.shape, dtype=prod.dtype, device=prod.device).index_add_(0, rows, hit)
    gw = G[rows] * hit / ties.clamp(min=1)[rows]
    g_values = (gw * B[cols]).sum(1) if need_values else None
    g_B = None
    if need_B:
        g_B = torch.zeros(B.shape, dtype=gw.dtype, device=gw.device).index_add_(
            0, cols, gw * values[:, None])
    return g_values, g_B
