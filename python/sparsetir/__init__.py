"""sparsetir: a sparse tensor compiler (written in Rust) for Python.

Compile a sparse computation written in the sparsetir script language and run it on scipy,
numpy or PyTorch data::

    import numpy as np, scipy.sparse as sp, sparsetir
    kernel = sparsetir.compile("csrmm.sp", target="c")
    out = kernel(A=sp.random(100, 80, density=0.05, format="csr", dtype=np.float32),
                 B=np.ones((80, 16), np.float32))
    C = out["C"]                       # numpy array (100, 16)

Buffers are bound by name exactly as ``sparsetir run --bind`` binds them: sparse matrices are
packed into the storage the buffer's axes declare, and sizes and structure parameters are
inferred from the data. ``sparsetir.ops`` has ready-made, differentiable SpMM, SDDMM and SpMV.

All the work is done by the Rust crates (``sparsetir._native``); this module only converts
Python objects to numpy arrays and coordinate lists and back.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional, Sequence, Union

import numpy as np

from . import _native
from ._native import SparsetirError

__all__ = ["compile", "Kernel", "SparsetirError", "ops", "TARGETS"]

#: The targets ``compile`` accepts.
TARGETS = ("eval", "interp", "c", "cuda", "cuda-emu")


def _read_text(value: Union[str, "os.PathLike[str]"], what: str) -> "tuple[str, str]":
    """(text, name): ``value`` is a path to a file, or the text itself."""
    if isinstance(value, os.PathLike):
        path = os.fspath(value)
    elif isinstance(value, str) and "\n" not in value and os.path.isfile(value):
        path = value
    elif isinstance(value, str):
        return value, "<string>"
    else:
        raise TypeError(f"{what} must be script text or a path, not {type(value).__name__}")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(), path
    except OSError as e:
        raise SparsetirError(f"cannot read {what} {path}: {e.strerror}") from None


def _is_torch(x: Any) -> bool:
    mod = type(x).__module__
    return mod.startswith("torch") and type(x).__name__ in ("Tensor", "Parameter")


def _is_scipy_sparse(x: Any) -> bool:
    return type(x).__module__.startswith("scipy.sparse") and hasattr(x, "tocoo")


def _binding(name: str, value: Any) -> tuple:
    """One buffer's data as the native binder takes it."""
    if _is_scipy_sparse(value) and len(value.shape) == 2:
        # CSR arrays go to the native side as they are (bound directly where the buffer's
        # storage is CSR, packed from coordinates otherwise); canonical form first: sorted
        # columns, duplicates summed, as the packing of coordinates would give.
        csr = value.tocsr()
        if not csr.has_canonical_format:
            csr = csr.copy()
            csr.sum_duplicates()
        return ("csr", list(csr.shape), csr.indptr, csr.indices, csr.data)
    if _is_scipy_sparse(value):
        coo = value.tocoo()
        coords = np.vstack([np.asarray(coo.row, np.int64), np.asarray(coo.col, np.int64)])
        return ("coo", list(coo.shape), coords, np.asarray(coo.data, np.float64))
    if _is_torch(value):
        import torch

        t = value.detach()
        if t.layout in (torch.sparse_csr, torch.sparse_coo):
            c = t.to_sparse_coo().coalesce().cpu()
            coords = np.ascontiguousarray(c.indices().numpy(), dtype=np.int64)
            values = c.values().to(torch.float64).numpy()
            return ("coo", list(c.shape), coords, values)
        if t.layout != torch.strided:
            raise TypeError(f"buffer `{name}`: torch layout {t.layout} is not supported "
                            "(dense, sparse_csr or sparse_coo)")
        return ("dense", np.ascontiguousarray(t.cpu().numpy()))
    if isinstance(value, np.ndarray):
        return ("dense", np.ascontiguousarray(value))
    if isinstance(value, (list, tuple)):
        return ("dense", np.ascontiguousarray(np.asarray(value)))
    raise TypeError(
        f"buffer `{name}`: cannot bind a {type(value).__name__} (expected a numpy array, a "
        "scipy.sparse matrix or a torch tensor)")


def _sparse_result(parts: tuple, as_torch: bool) -> Any:
    _, dims, coords, values, dtype = parts
    values = values.astype(dtype, copy=False)
    if as_torch:
        import torch

        t = torch.sparse_coo_tensor(torch.from_numpy(coords), torch.from_numpy(values),
                                    tuple(dims)).coalesce()
        return t.to_sparse_csr() if len(dims) == 2 else t
    if len(dims) == 2:
        import scipy.sparse

        return scipy.sparse.csr_matrix((values, (coords[0], coords[1])), shape=tuple(dims))
    return (coords, values, tuple(dims))


class Kernel:
    """A compiled sparsetir function. Call it with its buffers by name.

    ``kernel(A=matrix, B=array, feat_size=32)`` binds every keyword as ``sparsetir run`` binds a
    file: a scipy.sparse matrix (any format) or a sparse torch tensor (CSR or COO) is packed into
    the storage the buffer's axes declare, a numpy array or dense torch tensor is bound as is
    (its shape gives the sizes), ints, floats (and their text) set scalar parameters, and a
    keyword naming a
    handle parameter instead of a buffer binds a ready-made structure or value array. Sizes and
    structure parameters are inferred; everything is validated before the launch.

    Returns a dict with every buffer the function writes: numpy arrays (dense buffers) and
    scipy CSR matrices (sparse ones), or torch tensors (dense, sparse CSR) when any input was a
    torch tensor. An output over an axis declared ``assembled=True`` (the catalog's ``spadd``,
    ``spmul``, ``spgemm``) needs no binding: the kernel computes its structure (targets
    ``eval``, ``interp`` and ``c``), e.g. ``compile("crates/ops/kernels/spgemm.sp")(A=a, B=b)["C"]``.
    """

    def __init__(self, native: "_native.NativeKernel"):
        self._native = native

    @property
    def name(self) -> str:
        """The function's name."""
        return self._native.name

    @property
    def target(self) -> str:
        """The backend: eval, interp, c, cuda or cuda-emu."""
        return self._native.target

    @property
    def c_source(self) -> Optional[str]:
        """The generated C (target ``c``), else None."""
        return self._native.c_source

    def buffers(self) -> "list[tuple[str, str, bool, bool]]":
        """``(name, dtype, is_sparse, is_output)`` of every buffer parameter."""
        return self._native.buffers()

    def params(self) -> "list[str]":
        """The function's parameter names, in order."""
        return self._native.params()

    def __call__(self, **buffers: Any) -> Dict[str, Any]:
        """Binds ``buffers`` (and scalar parameters) by name, runs the kernel and returns every
        output buffer by name: numpy/scipy for numpy/scipy inputs, torch for torch inputs
        (``ops.CsrTensor`` included; on the inputs' GPU when they are on one; they are bound
        through host copies)."""
        binds: Dict[str, tuple] = {}
        sets: Dict[str, str] = {}
        as_torch = False
        # Torch tensors on a GPU are bound through host copies; the results go back to that
        # GPU (`sparsetir.ops` runs on CUDA tensors where they are).
        device = None
        for name, value in buffers.items():
            if isinstance(value, bool):
                sets[name] = str(int(value))
            elif isinstance(value, (int, float, np.integer, np.floating)):
                sets[name] = repr(value.item() if hasattr(value, "item") else value)
            elif isinstance(value, str):
                sets[name] = value  # a scalar parameter as text, as `run --set` takes it
            else:
                if isinstance(value, ops.CsrTensor):
                    value = value.to_torch()
                as_torch = as_torch or _is_torch(value)
                if _is_torch(value) and value.device.type != "cpu" and device is None:
                    device = value.device
                binds[name] = _binding(name, value)
        raw = self._native.call(binds, sets)
        out: Dict[str, Any] = {}
        for name, parts in raw.items():
            if parts[0] == "dense":
                arr = parts[1]
                if as_torch:
                    import torch

                    arr = torch.from_numpy(arr)
                    if device is not None:
                        arr = arr.to(device)
                out[name] = arr
            else:
                out[name] = _sparse_result(parts, as_torch)
                if device is not None:
                    out[name] = out[name].to(device)
        return out

    def __repr__(self) -> str:
        return repr(self._native)


def compile(
    source: Union[str, "os.PathLike[str]"],
    target: str = "c",
    schedule: Optional[Union[str, "os.PathLike[str]"]] = None,
    func: Optional[str] = None,
    decompose: Optional[Union[str, Sequence[str]]] = None,
    *,
    specialize: Optional[Dict[str, int]] = None,
    threads: Optional[int] = None,
) -> Kernel:
    """Compile a sparsetir function.

    Args:
        source: script text, or the path of a script file (diagnostics then name the file).
        target: ``"eval"`` (the stage-I reference evaluator), ``"interp"`` (lowered to stage
            III and interpreted), ``"c"`` (C + OpenMP, compiled through the kernel cache),
            ``"cuda"`` (NVIDIA GPU, NVRTC) or ``"cuda-emu"`` (the generated CUDA emulated on
            the CPU).
        schedule: a schedule file's path or its text (``sch.*`` trace lines with optional
            ``# stage I/II/III`` sections; stage II when none is named).
        func: the function to compile when the script defines several.
        decompose: format decomposition rules (SPEC §3.1), one or a list, as
            ``sparsetir run --decompose`` takes them: ``"hyb(parts=P,buckets=W1,W2,...)"``,
            ``"bsr:B"``, ``"ell(width=W)"``, ``"ell(width=W)+csr"``, ``"coo"`` or a rule script
            ``"FILE:param=value,..."``. The function runs decomposed on every target; data is
            bound to the function as written (the CSR matrix is converted by the format
            builders) and the outputs are the undecomposed function's.
        specialize: integer parameters baked into the kernel (``{"feat_size": 32}``); they are
            still bound at call time and must match.
        threads: OpenMP threads per launch (target ``c``; default: the OpenMP default).

    Raises:
        SparsetirError: the script does not parse or verify (``file:line:col`` diagnostics),
            the schedule does not apply, lowering or compiling fails.
    """
    if target not in TARGETS:
        raise SparsetirError(
            f"unsupported target `{target}` (available: {', '.join(TARGETS)})")
    rules = [decompose] if isinstance(decompose, str) else list(decompose or [])
    text, name = _read_text(source, "source")
    sched, sched_name = None, None
    if schedule is not None:
        sched, sched_name = _read_text(schedule, "schedule")
    spec = [(k, int(v)) for k, v in (specialize or {}).items()]
    return Kernel(_native.compile(text, name, target, sched, func, spec, threads, rules,
                                  schedule_name=sched_name))


from . import ops  # noqa: E402  (ops uses compile/Kernel above)
