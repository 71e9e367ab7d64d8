"""Ready-made sparse operators on the catalog kernels, differentiable with PyTorch.

``spmm(A, B)`` (``A @ B``; ``reduce="mean"|"max"|"min"`` aggregates each row's products
``A[i, j] B[j, :]`` that way instead of summing them, as GNN layers aggregate messages),
``sddmm(A, X, Y)`` (``A ∘ (X Yᵀ)`` on A's pattern),
``spmv(A, x)`` (``A @ x``) and ``sparse_softmax(A)`` (each row's softmax over its stored
values) take ``A`` as a scipy.sparse matrix (any format) or a torch sparse tensor (CSR or COO),
and dense numpy arrays or torch tensors; ``masked_attention(M, Q, K, V)`` composes them
(``softmax(scale · Q Kᵀ on M's pattern) V``, as in graph attention or sparse transformers).
They run the catalog's kernels (``crates/ops/kernels/{csrmm,sddmm,spmv,sparse_softmax}.sp``,
and ``csrmm_max.sp``/``csrmm_min.sp`` for those reductions)
under their default CPU schedules, compiled by the C backend through the kernel cache, once per
(kernel, dtype, feature width) per process. On PyTorch CUDA tensors they run the same kernels
under their default GPU schedules, on the GPU, where the tensors are (``_device``).

Element types: float64 if any operand is float64; float16 when the dense operands are float16
(and A's values float16 or float32: scipy has no float16 matrices, so its float32 values are
rounded to float16): the kernels then read 16-bit operands, compute in float32 and the result is
rounded to float16 once, as PyTorch's half products on a GPU (a scipy result holds its float16
values as float32); float32 otherwise.

With torch inputs the result is a torch tensor and the operators are differentiable
(``torch.autograd.Function``): for ``C = A @ B`` the gradient of B is ``Aᵀ G`` (an SpMM on the
transpose, whose structure is built once per matrix and cached) and the gradient of A's stored
values is the SDDMM ``G Bᵀ`` sampled on A's pattern; SDDMM and SpMV differentiate the same way.
Gradients of A reach a sparse tensor built with ``torch.sparse_csr_tensor(..., values)``
through ``values``.

Caching: the CSR structure of a matrix (int32 ``indptr``/``indices``, and its transpose once a
backward pass needs it) is cached by the identity of the matrix's index arrays (see
``_StructureCache``), so a graph used every epoch is converted once, also when its values change
(dropout). The kernels read a frozen copy of that structure (``_native.freeze``, made once; a
kernel validates it at its first launch on it and copies nothing), and borrow the float operands
as they are. Do not
rewrite a matrix's index arrays in place: the cached structure would not follow.

Under ``torch.compile``, pass the matrix as a ``CsrTensor`` (torch tensors in CSR form; TorchDynamo
refuses torch's sparse tensors): the operators on it are then the custom operators
``torch.ops.sparsetir.*`` (``_library``), one node each in the captured graph, gradients
included, running the same kernels.

``sparse_softmax`` differentiates as a softmax does: for ``P = softmax(A)`` row by row and an
incoming gradient ``G`` on P's stored values, A's gradient is ``P ∘ (G - rowsum(P ∘ G))`` (the
row sums an SpMV over the pattern).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Dict, Optional, Tuple

import numpy as np

from . import _device, _native
from ._native import SparsetirError

__all__ = ["spmm", "sddmm", "spmv", "sparse_softmax", "masked_attention", "spgemm", "spadd",
           "csr_structure", "CsrTensor"]


class _Csr:
    """A CSR structure in the catalog kernels' form: int32 ``indptr``/``indices``. The runtime
    validates it (monotone, in range, columns sorted and unique within rows) at each kernel's
    first launch on it, and again whenever that launch's sizes change;
    here only the conversion to int32 is checked, so that no index wraps into range."""

    __slots__ = ("m", "n", "indptr", "indices", "_t", "_rows", "_torch", "_frozen",
                 "_derived_arrays", "__weakref__")

    def __init__(self, m: int, n: int, indptr: np.ndarray, indices: np.ndarray):
        if m >= 2**31 or n >= 2**31 or len(indices) >= 2**31:
            raise SparsetirError(
                f"a {m}x{n} matrix with {len(indices)} stored elements does not fit the "
                "catalog kernels' int32 indices")
        for name, a, hi in (("indptr", indptr, len(indices)), ("indices", indices, n - 1)):
            a = np.asarray(a)
            if a.size and (a.min() < 0 or a.max() > hi):
                raise SparsetirError(
                    f"{name} of a {m}x{n} matrix with {len(indices)} stored elements holds "
                    f"{a.min() if a.min() < 0 else a.max()}, outside 0..={hi}")
        self.m, self.n = int(m), int(n)
        self.indptr = np.ascontiguousarray(indptr, dtype=np.int32)
        self.indices = np.ascontiguousarray(indices, dtype=np.int32)
        self._t: Optional[Tuple["_Csr", np.ndarray]] = None
        self._rows: Optional[np.ndarray] = None
        self._torch: Dict[str, Any] = {}
        self._frozen: Optional[Dict[str, Any]] = None
        self._derived_arrays: Dict[Tuple[Any, ...], np.ndarray] = {}

    def _derived(self, key: Tuple[Any, ...], make) -> np.ndarray:
        """The read-only array ``make()`` for `key`, made once and kept with the structure (at
        most eight: all are dropped when a ninth is made)."""
        a = self._derived_arrays.get(key)
        if a is None:
            if len(self._derived_arrays) >= 8:
                self._derived_arrays.clear()
            a = make()
            a.flags.writeable = False
            self._derived_arrays[key] = a
        return a

    def filled(self, value: float, dt: np.dtype) -> np.ndarray:
        """``nnz`` copies of ``value`` (an SDDMM's sampling weights: ones, or attention's
        scale), made once per value and dtype rather than at every call."""
        return self._derived(("filled", float(value), np.dtype(dt).str),
                             lambda: np.full(self.nnz, value, dt))

    def inverse_degrees(self, dt: np.dtype) -> np.ndarray:
        """Per stored element, 1 / the stored count of its row (mean aggregation's scale)."""
        return self._derived(("inverse degree", np.dtype(dt).str),
                             lambda: (1.0 / self.degrees()[self.rows()]).astype(dt))

    def empty_rows(self) -> np.ndarray:
        """The rows that store nothing."""
        return self._derived(("empty rows",),
                             lambda: np.flatnonzero(np.diff(self.indptr) == 0))

    def launch_args(self) -> Dict[str, Any]:
        """``indptr`` and ``indices`` as the kernels take them: frozen copies (made once), which
        a kernel validates once per launch shape and never copies, and which no Python code can
        change while a kernel reads them without the GIL."""
        if self._frozen is None:
            self._frozen = {"indptr": _native.freeze(self.indptr),
                            "indices": _native.freeze(self.indices)}
        return self._frozen

    @property
    def nnz(self) -> int:
        return len(self.indices)

    def rows(self) -> np.ndarray:
        """The row of every stored element."""
        if self._rows is None:
            self._rows = np.repeat(np.arange(self.m, dtype=np.int64), np.diff(self.indptr))
        return self._rows

    def degrees(self) -> np.ndarray:
        """Each row's count of stored elements (int64)."""
        return np.diff(self.indptr).astype(np.int64, copy=False)

    def transpose(self) -> Tuple["_Csr", np.ndarray]:
        """``(Aᵀ's structure, perm)`` with ``values_T = values[perm]``; built once."""
        if self._t is None:
            # A stable sort by column keeps rows ascending within each column.
            perm = np.argsort(self.indices, kind="stable")
            counts = np.bincount(self.indices, minlength=self.n)
            indptr_t = np.zeros(self.n + 1, dtype=np.int64)
            np.cumsum(counts, out=indptr_t[1:])
            t = _Csr(self.n, self.m, indptr_t, self.rows()[perm])
            self._t = (t, perm)
        return self._t

    def torch_perm(self, device: Any = None):
        """The transpose permutation as a torch index tensor on `device` (cached)."""
        key = ("perm", str(device))
        if key not in self._torch:
            import torch

            self._torch[key] = torch.from_numpy(self.transpose()[1]).to(device or "cpu")
        return self._torch[key]

    def torch_filled(self, value: float, dtype: Any, device: Any):
        """``nnz`` copies of ``value`` as a torch tensor on `device` (cached)."""
        key = ("filled", float(value), str(dtype), str(device))
        if key not in self._torch:
            import torch

            self._torch[key] = torch.full((self.nnz,), float(value), dtype=dtype,
                                          device=device)
        return self._torch[key]

    def torch_cols(self, device: Any):
        """The column of every stored element, as a torch index tensor on `device` (cached)."""
        key = ("cols", str(device))
        if key not in self._torch:
            import torch

            self._torch[key] = torch.from_numpy(self.indices.astype(np.int64)).to(device)
        return self._torch[key]

    def torch_empty_rows(self, device: Any):
        """The rows that store nothing, as a torch index tensor on `device` (cached)."""
        key = ("empty rows", str(device))
        if key not in self._torch:
            import torch

            # (A copy: the structure's derived arrays are read-only.)
            self._torch[key] = torch.tensor(self.empty_rows(), device=device)
        return self._torch[key]

    def torch_rows(self, device: Any):
        """The row of every stored element, as a torch index tensor on `device` (cached)."""
        key = ("rows", str(device))
        if key not in self._torch:
            import torch

            self._torch[key] = torch.from_numpy(self.rows()).to(device)
        return self._torch[key]


class _StructureCache:
    """CSR structures by the identity of the index arrays they were built from.

    The key is the address, length and matrix shape of the source index arrays, and the entry
    keeps those arrays alive, so an address cannot be reused by other data while its entry
    exists. Matrices that share index arrays (``torch.sparse_csr_tensor(crow, col, new_values)``
    each epoch, after dropout on the values) share one structure and its cached transpose.
    Bounded: the least recently used entries go first.
    """

    def __init__(self, capacity: int = 64):
        self._d: "OrderedDict[tuple, Tuple[tuple, _Csr]]" = OrderedDict()
        self._capacity = capacity

    def get(self, key: tuple) -> Optional[_Csr]:
        hit = self._d.get(key)
        if hit is None:
            return None
        self._d.move_to_end(key)
        return hit[1]

    def put(self, key: tuple, keep: tuple, value: _Csr) -> None:
        self._d[key] = (keep, value)
        self._d.move_to_end(key)
        while len(self._d) > self._capacity:
            self._d.popitem(last=False)


_structures = _StructureCache()


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and type(x).__name__ in ("Tensor", "Parameter")


def _scipy_structure(A: Any) -> Tuple[_Csr, np.ndarray]:
    csr = A.tocsr()
    if not csr.has_canonical_format:
        csr = csr.copy()
        csr.sum_duplicates()
    key = ("scipy", csr.indptr.ctypes.data, csr.indices.ctypes.data, csr.indptr.dtype.str,
           csr.indices.dtype.str, csr.nnz, csr.shape)
    s = _structures.get(key)
    if s is None:
        s = _Csr(csr.shape[0], csr.shape[1], csr.indptr, csr.indices)
        _structures.put(key, (csr.indptr, csr.indices), s)
    return s, csr.data


def _torch_structure(A: Any):
    """``(structure, values tensor)`` of a torch sparse matrix; values stay differentiable."""
    import torch

    if A.dim() != 2:
        raise ValueError(f"expected a 2-D sparse matrix, got {A.dim()} dimensions")
    if A.layout == torch.sparse_csr:
        return _index_structure(A.crow_indices(), A.col_indices(), A.shape[0],
                                A.shape[1]), A.values()
    if A.layout == torch.sparse_coo:
        if not A.is_coalesced():
            A = A.coalesce()
        idx = A.indices()
        key = ("torch-coo", idx.data_ptr(), idx.dtype, idx.shape[1], A.shape)
        s = _structures.get(key)
        if s is None:
            idx_np = idx.detach().cpu().numpy()
            rows = idx_np[0]
            counts = np.bincount(rows, minlength=A.shape[0])
            indptr = np.zeros(A.shape[0] + 1, dtype=np.int64)
            np.cumsum(counts, out=indptr[1:])
            s = _Csr(A.shape[0], A.shape[1], indptr, idx_np[1])
            _structures.put(key, (idx,), s)
        return s, A.values()
    raise TypeError(f"sparse matrix layout {A.layout} is not supported (sparse_csr, sparse_coo)")


def _index_structure(crow: Any, col: Any, m: int, n: int) -> _Csr:
    """The structure of the m×n CSR matrix whose row pointers and columns are the torch tensors
    `crow` and `col` (a torch CSR tensor's, a `CsrTensor`'s), cached by their addresses."""
    key = ("torch", crow.data_ptr(), col.data_ptr(), crow.dtype, col.dtype, col.numel(),
           (m, n))
    s = _structures.get(key)
    if s is None:
        # (A CUDA matrix's structure is read on the host once: validation reads it there,
        # and the GPU kernels take the frozen copy, copied to the GPU once.)
        crow_np = crow.detach().cpu().numpy()
        col_np = col.detach().cpu().numpy()
        # Columns must be sorted within rows and unique, as the kernels' axes declare:
        # every launch validates that and refuses other data with a located message.
        s = _Csr(m, n, crow_np, col_np)
        _structures.put(key, (crow, col), s)
    return s


class CsrTensor:
    """A sparse m×n matrix held as three torch tensors in CSR form: ``indptr`` (m + 1 row
    pointers), ``indices`` (the column of each stored element, sorted and unique within each
    row), ``values`` (one per stored element, differentiable) and ``shape`` ``(m, n)``.

    Every operator of this module takes it where it takes a sparse matrix, and returns one
    where it returns a matrix of A's pattern (``sddmm``, ``sparse_softmax``). It is the form of
    a sparse matrix ``torch.compile`` can trace (TorchDynamo refuses torch's own sparse
    tensors): under ``torch.compile`` the operators on a ``CsrTensor`` are the custom
    operators ``torch.ops.sparsetir.*``, each one node of the captured graph with its shapes
    and gradients registered, so a model compiles whole (``fullgraph=True``) and runs the same
    kernels, on the CPU or the GPU where the tensors are.

    The structure is converted for the kernels once and cached by the index tensors' identity,
    as for torch CSR tensors: make the ``CsrTensor`` (or its index tensors) once and keep it,
    change ``values`` freely (``with_values``), and do not rewrite the index tensors in place.
    """

    __slots__ = ("indptr", "indices", "values", "shape")

    def __init__(self, indptr: Any, indices: Any, values: Any, shape: Tuple[int, int]):
        m, n = (int(d) for d in shape)
        if indptr.dim() != 1 or indices.dim() != 1 or values.dim() != 1:
            raise ValueError(
                f"CsrTensor: indptr, indices and values must be 1-D; got "
                f"{indptr.dim()}, {indices.dim()} and {values.dim()} dimensions")
        if indptr.shape[0] != m + 1:
            raise ValueError(f"CsrTensor: a {m}x{n} matrix needs {m + 1} row pointers; "
                             f"indptr has {indptr.shape[0]}")
        if values.shape[0] != indices.shape[0]:
            raise ValueError(f"CsrTensor: {indices.shape[0]} column indices but "
                             f"{values.shape[0]} values")
        if indptr.is_floating_point() or indices.is_floating_point():
            raise TypeError(f"CsrTensor: indptr and indices must be integer tensors; got "
                            f"{indptr.dtype} and {indices.dtype}")
        self.indptr, self.indices, self.values, self.shape = indptr, indices, values, (m, n)

    @classmethod
    def from_torch(cls, A: Any) -> "CsrTensor":
        """From a torch tensor: sparse CSR (its own index tensors), sparse COO or dense (both
        converted to CSR)."""
        import torch

        if A.layout != torch.sparse_csr:
            A = (A.coalesce() if A.layout == torch.sparse_coo else A).to_sparse_csr()
        return cls(A.crow_indices(), A.col_indices(), A.values(), tuple(A.shape))

    @classmethod
    def from_scipy(cls, A: Any, device: Any = None, dtype: Any = None) -> "CsrTensor":
        """From a scipy.sparse matrix (any format; duplicates summed), on `device`, its values
        of `dtype` (default: the matrix's own)."""
        import torch

        csr = A.tocsr()
        if not csr.has_canonical_format:
            csr = csr.copy()
            csr.sum_duplicates()
        values = torch.from_numpy(np.ascontiguousarray(csr.data))
        return cls(torch.from_numpy(csr.indptr.astype(np.int32)).to(device),
                   torch.from_numpy(csr.indices.astype(np.int32)).to(device),
                   values.to(device=device, dtype=dtype), csr.shape)

    def with_values(self, values: Any) -> "CsrTensor":
        """The same structure (the same index tensors, so the same cached conversion) with
        other values."""
        return CsrTensor(self.indptr, self.indices, values, self.shape)

    def to_torch(self) -> Any:
        """As a torch sparse CSR tensor (not for code ``torch.compile`` traces)."""
        import torch

        return torch.sparse_csr_tensor(self.indptr, self.indices, self.values, size=self.shape)

    def to(self, *args: Any, **kwargs: Any) -> "CsrTensor":
        """``values.to(...)`` and the index tensors to the same device."""
        values = self.values.to(*args, **kwargs)
        return CsrTensor(self.indptr.to(values.device), self.indices.to(values.device), values,
                         self.shape)

    @property
    def nnz(self) -> int:
        return self.indices.shape[0]

    @property
    def device(self) -> Any:
        return self.values.device

    @property
    def dtype(self) -> Any:
        return self.values.dtype

    def __repr__(self) -> str:
        return (f"CsrTensor(shape={self.shape}, nnz={self.nnz}, dtype={self.dtype}, "
                f"device={self.device})")


def _compiling(A: Any) -> bool:
    """Whether `A` is a `CsrTensor` in code TorchDynamo is tracing: the operators then take the
    custom-operator path (`_library`)."""
    if not isinstance(A, CsrTensor):
        return False
    import torch

    return torch.compiler.is_compiling()


def csr_structure(A: Any) -> _Csr:
    """The cached CSR structure sparsetir uses for ``A`` (scipy.sparse, torch sparse or a
    `CsrTensor`)."""
    if isinstance(A, CsrTensor):
        return _index_structure(A.indptr, A.indices, *A.shape)
    return _torch_structure(A)[0] if _is_torch(A) else _scipy_structure(A)[0]


# ---------------------------------------------------------------------------------------------
# Kernels

_kernels: Dict[Tuple[str, str, int, str], Any] = {}
_schedules: Dict[Tuple[str, int], Optional[str]] = {}
# The same kernels by the arguments of `_kernel` as given: one lookup per call, where the
# schedule's name and the dtype's name would cost more than the call's whole Python overhead on
# a small graph (the dtype object hashes as its type).
_kernels_by_call: Dict[Tuple[str, np.dtype, int, int], Any] = {}


def _kernel(name: str, dtype: np.dtype, feat: int, gathered_bytes: int = 0):
    """The catalog kernel `name` for element type `dtype`, `feat_size` specialised to `feat`,
    under its default CPU schedule (compiled on first use, then a dictionary lookup)."""
    call = (name, dtype, feat, gathered_bytes)
    k = _kernels_by_call.get(call)
    if k is None:
        k = _kernels_by_call[call] = _compiled_kernel(name, np.dtype(dtype), feat, gathered_bytes)
    return k


def _compiled_kernel(name: str, dtype: np.dtype, feat: int, gathered_bytes: int):
    sk = (name, gathered_bytes)
    if sk not in _schedules:
        _schedules[sk] = _native.cpu_schedule(name, gathered_bytes)
    schedule = _schedules[sk]
    key = (name, np.dtype(dtype).name, feat, schedule or "")
    k = _kernels.get(key)
    if k is None:
        dt = key[1]
        if dt == "float16":
            # 16-bit operands, float32 arithmetic and outputs (`_acc`).
            source = _native.catalog_source_stored_as(name, dt)
        else:
            source = _native.catalog_source(name)
        if dt not in ("float32", "float16"):
            # The catalog kernels are written for float32; their other instances differ in the
            # element type only.
            source = source.replace("float32", dt)
        spec = [("feat_size", feat)] if "feat_size" in source else []
        k = _native.compile(source, f"<catalog {name}.sp>", "c", schedule, None, spec, None)
        _kernels[key] = k
    return k


def _sixteen(dense: Tuple[Any, ...], values: Any, half: Any, single: Any) -> bool:
    """Whether operands take the float16 kernels: every dense one is float16 and the sparse
    values are float16 or float32 (scipy has no float16 matrices), or, with no dense operand,
    the values are float16."""
    if dense:
        return all(d.dtype == half for d in dense) and (
            values is None or values.dtype in (half, single))
    return values is not None and values.dtype == half


_F32 = np.dtype(np.float32)


def _dtype_of(*dense: Any, values: Any = None) -> np.dtype:
    """The element type operators compute in: float64 if any operand is; float16 where the
    operands are (`_sixteen`: 16-bit operands, float32 arithmetic, a float16 result, as PyTorch
    computes half products); float32 otherwise."""
    every = dense + (() if values is None else (values,))
    chars = {a.dtype.char for a in every}
    if chars == {"f"}:
        return _F32
    if "d" in chars:
        return np.dtype(np.float64)
    if _sixteen(dense, values, np.float16, np.float32):
        return np.dtype(np.float16)
    return np.dtype(np.float32)


_ACC_BY_CHAR = {"e": "float32", "f": "float32", "d": "float64"}


def _acc(dt: np.dtype) -> str:
    """The element type of the kernels' outputs for operands of `dt`."""
    # By the dtype's character: comparing dtypes, or asking one its name, costs microseconds,
    # a sizeable part of a call on a small graph.
    return _ACC_BY_CHAR.get(dt.char) or dt.name


def _dense(x: np.ndarray, dt: np.dtype) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=dt)


def _numeric(x: Any, op: str, what: str) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind not in "fiub":
        raise TypeError(f"{op}: {what} must be a numeric array, not {type(x).__name__} of "
                        f"dtype {a.dtype}")
    return a


def _spmm_np(s: _Csr, values: np.ndarray, B: np.ndarray, kernel: str = "csrmm") -> np.ndarray:
    """``A @ B``; with ``kernel`` ``csrmm_max``/``csrmm_min`` each output the largest/smallest
    product of its row instead of their sum, a row that stores nothing giving 0."""
    if B.ndim != 2:
        raise ValueError(f"spmm: B must be 2-D, got shape {B.shape}")
    if B.shape[0] != s.n:
        raise ValueError(f"spmm: A is {s.m}x{s.n} but B has {B.shape[0]} rows")
    dt = _dtype_of(B, values=values)
    feat = B.shape[1]
    if feat == 0 or s.m == 0:
        return np.zeros((s.m, feat), dt)
    if kernel != "csrmm":
        if dt.char == "e":
            # Max and min are exact in any precision: float32 kernels, a float16 result.
            c = _spmm_np(s, values.astype(np.float32), B.astype(np.float32), kernel)
            return c.astype(dt)
        c = _spmm_np_kernel(s, values, B, kernel, dt, feat)
        # The kernel gives an empty row its init (the lowest or highest float): 0 instead, as
        # GNN libraries aggregate no messages.
        empty = s.empty_rows()
        if len(empty):
            c[empty] = 0
        return c
    return _spmm_np_kernel(s, values, B, kernel, dt, feat)


def _spmm_np_kernel(s: _Csr, values: np.ndarray, B: np.ndarray, kernel: str, dt: np.dtype,
                    feat: int) -> np.ndarray:
    k = _kernel(kernel, dt, feat)
    (c,) = k.launch(
        {**s.launch_args(), "a": _dense(values, dt), "b": _dense(B, dt),
         "m": s.m, "n": s.n, "nnz": s.nnz, "feat_size": feat},
        [("c", _acc(dt), [s.m, feat])])
    return c.astype(dt, copy=False)


def _sddmm_np(s: _Csr, values: Optional[np.ndarray], X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Values of ``A ∘ (X Yᵀ)`` on A's pattern (``values=None``: ``X Yᵀ`` sampled)."""
    if X.ndim != 2 or Y.ndim != 2:
        raise ValueError(f"sddmm: X and Y must be 2-D, got shapes {X.shape} and {Y.shape}")
    if X.shape[0] != s.m or Y.shape[0] != s.n or X.shape[1] != Y.shape[1]:
        raise ValueError(
            f"sddmm: A is {s.m}x{s.n}, so X must be {s.m}xK and Y {s.n}xK; got X {X.shape} "
            f"and Y {Y.shape}")
    dt = _dtype_of(X, Y, values=values)
    if values is None:
        values = s.filled(1.0, dt)
    feat = X.shape[1]
    if feat == 0 or s.nnz == 0:
        return np.zeros(s.nnz, dt)
    k = _kernel("sddmm", dt, feat, s.n * feat * dt.itemsize)
    (y,) = k.launch(
        {**s.launch_args(), "x": _dense(values, dt), "a": _dense(X, dt),
         "b": _dense(Y, dt), "m": s.m, "n": s.n, "nnz": s.nnz, "feat_size": feat},
        [("y", _acc(dt), [s.nnz])])
    return y.astype(dt, copy=False)


def _spmv_np(s: _Csr, values: np.ndarray, x: np.ndarray) -> np.ndarray:
    if x.ndim != 1 or x.shape[0] != s.n:
        raise ValueError(f"spmv: A is {s.m}x{s.n} but x has shape {x.shape}")
    dt = _dtype_of(x, values=values)
    if s.m == 0:
        return np.zeros(0, dt)
    k = _kernel("spmv", dt, 0)
    (y,) = k.launch(
        {**s.launch_args(), "a": _dense(values, dt), "x": _dense(x, dt),
         "m": s.m, "n": s.n, "nnz": s.nnz},
        [("y", _acc(dt), [s.m])])
    return y.astype(dt, copy=False)


def _softmax_np(s: _Csr, values: np.ndarray) -> np.ndarray:
    """Each row's softmax over its stored values (a row that stores nothing has none)."""
    dt = _dtype_of(values=values)
    if s.nnz == 0:
        return np.zeros(0, dt)
    k = _kernel("sparse_softmax", dt, 0)
    (b,) = k.launch(
        {**s.launch_args(), "a": _dense(values, dt), "m": s.m, "n": s.n,
         "nnz": s.nnz},
        [("b", _acc(dt), [s.nnz])])
    return b.astype(dt, copy=False)


def _extreme_weights(s: _Csr, values: np.ndarray, B: np.ndarray, C: np.ndarray) -> np.ndarray:
    """For max/min aggregation: the nnz×k weights with which each stored product reached its
    output, ``1/t`` where it equals the row's extremum (t: how many products of that row and
    column tie for it), else 0. ``values`` and ``B`` in the arithmetic's precision (float32 for
    16-bit operands), ``C`` as the forward returned it: a product is compared after the same
    rounding to C's type. numpy, nnz×k at once."""
    rows = s.rows()
    prod = values[:, None] * B[s.indices]
    hit = (prod.astype(C.dtype) == C[rows]).astype(prod.dtype)
    nonempty = np.flatnonzero(s.degrees() > 0)
    ties = np.zeros(C.shape, prod.dtype)
    if len(nonempty):
        ties[nonempty] = np.add.reduceat(hit, s.indptr[nonempty], axis=0)
    return hit / np.maximum(ties, 1)[rows]


def _extreme_grads_np(s: _Csr, values: np.ndarray, B: np.ndarray, C: np.ndarray, G: np.ndarray,
                      need_values: bool, need_B: bool):
    """The gradients of ``C = spmm(A, B, reduce="max"|"min")`` w.r.t. A's values and B: each
    output's gradient goes to the products that reached it, split evenly among ties. float32
    and float64 run the kernels ``extreme_count``, ``extreme_grad_a`` and ``extreme_grad_b``;
    float16 outputs, whose ties are among products rounded to float16, the numpy form."""
    if C.dtype == values.dtype and C.dtype in (np.float32, np.float64) and s.nnz > 0:
        return _extreme_grads_kernels(s, values, B, C, G, need_values, need_B)
    w = _extreme_weights(s, values, B, C)
    gw = G[s.rows()] * w
    g_values = g_B = None
    if need_values:
        g_values = (gw * B[s.indices]).sum(axis=1)
    if need_B:
        t, perm = s.transpose()
        contrib = (gw * values[:, None])[perm]
        g_B = np.zeros_like(B, dtype=contrib.dtype)
        nonempty = np.flatnonzero(t.degrees() > 0)
        if len(nonempty):
            g_B[nonempty] = np.add.reduceat(contrib, t.indptr[nonempty], axis=0)
    return g_values, g_B


def _extreme_grads_kernels(s: _Csr, values: np.ndarray, B: np.ndarray, C: np.ndarray,
                           G: np.ndarray, need_values: bool, need_B: bool):
    dt = C.dtype
    m, feat = C.shape
    common = {"m": s.m, "n": s.n, "nnz": s.nnz, "feat_size": feat}
    v, b, e = _dense(values, dt), _dense(B, dt), _dense(C, dt)
    (ties,) = _kernel("extreme_count", dt, feat).launch(
        {**s.launch_args(), **common, "a": v, "b": b, "e": e}, [("c", dt.name, [m, feat])])
    # In place, in the kernel's fresh output: each new temporary of m×k elements costs its
    # page faults (1 ms for pubmed's 5 MB on a VM), more than the kernels themselves.
    w = np.divide(_dense(G, dt), np.maximum(ties, 1, out=ties), out=ties)
    g_values = g_B = None
    if need_values:
        (g_values,) = _kernel("extreme_grad_a", dt, feat).launch(
            {**s.launch_args(), **common, "a": v, "b": b, "e": e, "w": w},
            [("y", dt.name, [s.nnz])])
    if need_B:
        t, perm = s.transpose()
        (g_B,) = _kernel("extreme_grad_b", dt, feat).launch(
            {**t.launch_args(), "n": s.n, "m": s.m, "nnz": s.nnz, "feat_size": feat,
             "at": _dense(values[perm], dt), "b": b, "e": e, "w": w},
            [("c", dt.name, [s.n, feat])])
    return g_values, g_B


def _softmax_grad_np(s: _Csr, p: np.ndarray, g: np.ndarray) -> np.ndarray:
    """``P ∘ (G - rowsum(P ∘ G))`` on the stored values: the softmax's backward."""
    pg = (p * g).astype(p.dtype, copy=False)
    if s.nnz == 0:
        return pg
    rowsum = _spmv_np(s, pg, np.ones(s.n, p.dtype))
    return (p * (g - rowsum[s.rows()])).astype(p.dtype, copy=False)


# ---------------------------------------------------------------------------------------------
# PyTorch autograd

_torch_fns: Dict[str, Any] = {}


def _np(t: Any) -> np.ndarray:
    if t.device.type != "cpu":
        raise SparsetirError(f"internal: a tensor on {t.device} reached the CPU kernels")
    return t.detach().contiguous().numpy()


def _recorded(*tensors: Any) -> bool:
    """Whether autograd records an operation on `tensors`: grad mode on, and one of them
    requires a gradient. Otherwise the operators call their kernels directly: an
    ``autograd.Function`` costs about 10 µs a call, a sixth of a whole SpMM on cora."""
    import torch

    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _t_spmm(s: _Csr, v: Any, b: Any, kernel: str = "csrmm") -> Any:
    """SpMM on torch tensors, unrecorded: the GPU kernels on CUDA tensors (`_device`), the
    CPU kernels on numpy views of CPU ones."""
    import torch

    _device.same_device("spmm", v, b)
    if _device.on_gpu(b):
        if kernel != "csrmm":
            return _device.spmm_extreme(s, v, b, kernel)
        return _device.spmm(s, v, b)
    return torch.from_numpy(_spmm_np(s, _np(v), _np(b), kernel))


def _t_sddmm(s: _Csr, v: Optional[Any], x: Any, y: Any) -> Any:
    """SDDMM's values on torch tensors, unrecorded (``v=None``: ``X Yᵀ`` sampled)."""
    import torch

    _device.same_device("sddmm", x, y, *(() if v is None else (v,)))
    if _device.on_gpu(x):
        if v is None:
            v = s.torch_filled(1.0, x.dtype, x.device)
        return _device.sddmm(s, v, x, y)
    return torch.from_numpy(_sddmm_np(s, None if v is None else _np(v), _np(x), _np(y)))


def _t_spmv(s: _Csr, v: Any, x: Any) -> Any:
    """SpMV on torch tensors, unrecorded."""
    import torch

    _device.same_device("spmv", v, x)
    if _device.on_gpu(x):
        return _device.spmv(s, v, x)
    return torch.from_numpy(_spmv_np(s, _np(v), _np(x)))


def _t_softmax(s: _Csr, v: Any) -> Any:
    """The row softmax of stored values on torch tensors, unrecorded."""
    import torch

    if _device.on_gpu(v):
        return _device.softmax(s, v)
    return torch.from_numpy(_softmax_np(s, _np(v)))


def _t_softmax_grad(s: _Csr, p: Any, g: Any) -> Any:
    """``P ∘ (G - rowsum(P ∘ G))`` on torch tensors (the softmax's backward)."""
    import torch

    g = g.to(p.dtype)
    if not _device.on_gpu(p):
        return torch.from_numpy(_softmax_grad_np(s, _np(p), _np(g)))
    pg = p * g
    if s.nnz == 0:
        return pg
    rowsum = _t_spmv(s, pg, torch.ones(s.n, dtype=p.dtype, device=p.device))
    return p * (g - rowsum[s.torch_rows(p.device)])


def _fns():
    """The autograd Functions (defined on first use, so that importing needs no torch)."""
    if _torch_fns:
        return _torch_fns
    import torch

    def T(a):
        return torch.from_numpy(a)

    class SpMM(torch.autograd.Function):
        @staticmethod
        def forward(ctx, values, B, s):
            ctx.s = s
            ctx.save_for_backward(values, B)
            return _t_spmm(s, values.detach(), B.detach())

        @staticmethod
        def backward(ctx, G):
            values, B = ctx.saved_tensors
            s = ctx.s
            g_values = g_B = None
            if ctx.needs_input_grad[0]:
                # dL/dA[i,j] = sum_k G[i,k] B[j,k] at A's stored (i, j).
                g_values = _t_sddmm(s, None, G, B.detach()).to(values.dtype)
            if ctx.needs_input_grad[1]:
                t = s.transpose()[0]
                vt = values.detach()[s.torch_perm(values.device)]
                g_B = _t_spmm(t, vt, G).to(B.dtype)
            return g_values, g_B, None

    class SpMMExtreme(torch.autograd.Function):
        """``spmm(A, B, reduce="max"|"min")``: the kernel forward, the gradient to the
        products that reached each output (ties share it evenly)."""

        @staticmethod
        def forward(ctx, values, B, s, kernel):
            ctx.s = s
            C = _t_spmm(s, values.detach(), B.detach(), kernel)
            ctx.save_for_backward(values, B, C)
            return C

        @staticmethod
        def backward(ctx, G):
            values, B, C = ctx.saved_tensors
            if _device.on_gpu(B):
                g_v, g_B = _device.extreme_grads(
                    ctx.s, values.detach(), B.detach(), C, G, ctx.needs_input_grad[0],
                    ctx.needs_input_grad[1])
                return (None if g_v is None else g_v.to(values.dtype),
                        None if g_B is None else g_B.to(B.dtype), None, None)
            acc = np.float64 if C.dtype == torch.float64 else np.float32
            # (No copies where the operands already are `acc`: each m×k one costs its page
            # faults.)
            g_v, g_B = _extreme_grads_np(
                ctx.s, _np(values).astype(acc, copy=False), _np(B).astype(acc, copy=False),
                _np(C), _np(G).astype(acc, copy=False), ctx.needs_input_grad[0],
                ctx.needs_input_grad[1])
            return (None if g_v is None else T(g_v).to(values.dtype),
                    None if g_B is None else T(g_B).to(B.dtype), None, None)

    class SDDMM(torch.autograd.Function):
        @staticmethod
        def forward(ctx, values, X, Y, s):
            ctx.s = s
            v, x, y = values.detach(), X.detach(), Y.detach()
            if ctx.needs_input_grad[0]:
                # Keep X Yᵀ on the pattern: it is the gradient of the values.
                sampled = _t_sddmm(s, None, x, y)
                out = v.to(sampled.dtype) * sampled
                ctx.save_for_backward(values, X, Y, sampled)
            else:
                out = _t_sddmm(s, v, x, y)
                ctx.save_for_backward(values, X, Y)
            return out

        @staticmethod
        def backward(ctx, G):
            s = ctx.s
            values, X, Y = ctx.saved_tensors[:3]
            g_v = g_X = g_Y = None
            if ctx.needs_input_grad[0]:
                g_v = (G * ctx.saved_tensors[3]).to(values.dtype)
            if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
                # Both dense gradients multiply by G ∘ values on the pattern.
                w = (G * values.detach()).to(G.dtype)
            if ctx.needs_input_grad[1]:
                g_X = _t_spmm(s, w, Y.detach()).to(X.dtype)
            if ctx.needs_input_grad[2]:
                t = s.transpose()[0]
                g_Y = _t_spmm(t, w[s.torch_perm(w.device)], X.detach()).to(Y.dtype)
            return g_v, g_X, g_Y, None

    class SpMV(torch.autograd.Function):
        @staticmethod
        def forward(ctx, values, x, s):
            ctx.s = s
            ctx.save_for_backward(values, x)
            return _t_spmv(s, values.detach(), x.detach())

        @staticmethod
        def backward(ctx, g):
            values, x = ctx.saved_tensors
            s = ctx.s
            g_v = g_x = None
            if ctx.needs_input_grad[0]:
                g_v = _t_sddmm(s, None, g[:, None], x.detach()[:, None]).to(values.dtype)
            if ctx.needs_input_grad[1]:
                t = s.transpose()[0]
                vt = values.detach()[s.torch_perm(values.device)]
                g_x = _t_spmv(t, vt, g).to(x.dtype)
            return g_v, g_x, None

    class SparseSoftmax(torch.autograd.Function):
        @staticmethod
        def forward(ctx, values, s):
            ctx.s = s
            p = _t_softmax(s, values.detach())
            ctx.save_for_backward(p)
            return p

        @staticmethod
        def backward(ctx, G):
            (p,) = ctx.saved_tensors
            return _t_softmax_grad(ctx.s, p, G), None

    _torch_fns.update(spmm=SpMM, spmm_extreme=SpMMExtreme, sddmm=SDDMM, spmv=SpMV,
                      softmax=SparseSoftmax)
    return _torch_fns


def _operands(A: Any, dense: Tuple[Any, ...]):
    """A's structure and values, and whether the torch path applies."""
    if isinstance(A, CsrTensor):
        return _index_structure(A.indptr, A.indices, *A.shape), A.values, True
    use_torch = _is_torch(A) or any(_is_torch(d) for d in dense)
    if _is_torch(A):
        import torch

        if A.layout == torch.strided:
            raise TypeError("A must be sparse (a torch sparse_csr/sparse_coo tensor or a "
                            "scipy.sparse matrix); got a dense tensor")
        s, values = _torch_structure(A)
    elif type(A).__module__.startswith("scipy.sparse"):
        s, values = _scipy_structure(A)
        if use_torch:
            import torch

            values = torch.from_numpy(np.ascontiguousarray(values))
            # (A scipy matrix with CUDA operands: its values go where they are.)
            devices = {d.device for d in dense if _is_torch(d)}
            if len(devices) == 1:
                values = values.to(devices.pop())
    else:
        raise TypeError(f"A must be a scipy.sparse matrix or a torch sparse tensor, not "
                        f"{type(A).__name__}")
    return s, values, use_torch


def _as_torch_float(x: Any, dt):
    import torch

    t = x if _is_torch(x) else torch.from_numpy(np.asarray(x))
    return t.to(dt) if t.dtype != dt else t


def _torch_dtype(*dense, values=None):
    """`_dtype_of` for torch tensors."""
    import torch

    every = dense + (() if values is None else (values,))
    if all(t.dtype is torch.float32 for t in every):
        return torch.float32
    if any(t.dtype == torch.float64 for t in every):
        return torch.float64
    if _sixteen(dense, values, torch.float16, torch.float32):
        return torch.float16
    return torch.float32


_REDUCE = ("sum", "mean", "max", "min")


def spmm(A: Any, B: Any, reduce: str = "sum") -> Any:
    """``A @ B`` for sparse ``A`` (m×n) and dense ``B`` (n×k): dense m×k.

    ``reduce`` aggregates each row's products ``A[i, j] B[j, :]`` (a GNN's messages) by
    ``"sum"`` (the product), ``"mean"`` (the sum over the row's stored count), ``"max"`` or
    ``"min"`` (elementwise over the row's stored ``j``); a row that stores nothing gives 0.

    numpy result for scipy/numpy operands; a differentiable torch tensor (w.r.t. ``B`` and A's
    stored values) when any operand is a torch tensor. Under max and min the gradient of an
    output goes to the products equal to it, split evenly among ties (as ``torch.amax``);
    that backward computes in numpy on nnz × k arrays.
    """
    if reduce not in _REDUCE:
        raise ValueError(f"spmm: reduce must be one of {', '.join(_REDUCE)}; got {reduce!r}")
    if _compiling(A):
        from . import _library

        return _library.spmm(A, B, reduce)
    s, values, use_torch = _operands(A, (B,))
    if not use_torch:
        v, b = np.asarray(values), _numeric(B, "spmm", "B")
        if reduce == "mean":
            v = _mean_weights(s, v)
        if reduce in ("max", "min"):
            return _spmm_np(s, v, b, "csrmm_" + reduce)
        return _spmm_np(s, v, b)
    import torch

    Bt = B if _is_torch(B) else torch.from_numpy(_numeric(B, "spmm", "B"))
    dt = _torch_dtype(Bt, values=values)
    v, b = _as_torch_float(values, dt), _as_torch_float(Bt, dt)
    if reduce == "mean":
        v = _mean_weights(s, v)
    kernel = "csrmm_" + reduce if reduce in ("max", "min") else "csrmm"
    if not _recorded(v, b):
        return _t_spmm(s, v, b, kernel)
    if kernel != "csrmm":
        return _fns()["spmm_extreme"].apply(v, b, s, kernel)
    return _fns()["spmm"].apply(v, b, s)


def _mean_weights(s: _Csr, values: Any) -> Any:
    """A's values divided by their row's stored count (numpy, or torch and differentiable)."""
    if not _is_torch(values):
        return values * s.inverse_degrees(np.dtype(values.dtype))
    key = f"inverse degree {values.dtype} {values.device}"
    if key not in s._torch:
        import torch

        # A copy: the structure's array is read-only, a tensor over it would be writable.
        s._torch[key] = torch.tensor(s.inverse_degrees(np.float64)).to(values.dtype).to(
            values.device)
    return values * s._torch[key]


def _pattern_like(A: Any, s: _Csr, out_values: Any) -> Any:
    """A matrix with A's pattern and `out_values`, of A's kind (`CsrTensor`, torch CSR or
    scipy CSR)."""
    if isinstance(A, CsrTensor):
        return A.with_values(out_values)
    if _is_torch(out_values):
        import torch

        dev = str(out_values.device)
        if ("crow", dev) not in s._torch:
            s._torch[("crow", dev)] = torch.from_numpy(s.indptr.astype(np.int64)).to(dev)
            s._torch[("col", dev)] = torch.from_numpy(s.indices.astype(np.int64)).to(dev)
        return torch.sparse_csr_tensor(s._torch[("crow", dev)], s._torch[("col", dev)],
                                       out_values, size=(s.m, s.n))
    import scipy.sparse

    if out_values.dtype == np.float16:
        # scipy holds no float16 matrices: the values widened (exactly) to float32.
        out_values = out_values.astype(np.float32)
    return scipy.sparse.csr_matrix((out_values, s.indices, s.indptr), shape=(s.m, s.n))


def sddmm(A: Any, X: Any, Y: Any) -> Any:
    """``A ∘ (X Yᵀ)``, sampled on A's pattern: for sparse ``A`` (m×n), dense ``X`` (m×k) and
    ``Y`` (n×k), the sparse m×n matrix with ``A[i,j] · Σ_k X[i,k] Y[j,k]`` at A's stored
    (i, j).

    A scipy CSR matrix for scipy/numpy operands; a torch sparse CSR tensor, differentiable w.r.t.
    ``X``, ``Y`` and A's stored values, when any operand is a torch tensor.
    """
    if _compiling(A):
        from . import _library

        return _library.sddmm(A, X, Y)
    s, values, use_torch = _operands(A, (X, Y))
    if not use_torch:
        out = _sddmm_np(s, np.asarray(values), _numeric(X, "sddmm", "X"),
                        _numeric(Y, "sddmm", "Y"))
        return _pattern_like(A, s, out)
    import torch

    Xt = X if _is_torch(X) else torch.from_numpy(_numeric(X, "sddmm", "X"))
    Yt = Y if _is_torch(Y) else torch.from_numpy(_numeric(Y, "sddmm", "Y"))
    dt = _torch_dtype(Xt, Yt, values=values)
    v, x, y = _as_torch_float(values, dt), _as_torch_float(Xt, dt), _as_torch_float(Yt, dt)
    if not _recorded(v, x, y):
        return _pattern_like(A, s, _t_sddmm(s, v, x, y))
    return _pattern_like(A, s, _fns()["sddmm"].apply(v, x, y, s))


def spmv(A: Any, x: Any) -> Any:
    """``A @ x`` for sparse ``A`` (m×n) and a dense vector ``x`` (n): a dense vector (m).

    numpy for scipy/numpy operands; a differentiable torch tensor (w.r.t. ``x`` and A's stored
    values) when any operand is a torch tensor.
    """
    if _compiling(A):
        from . import _library

        return _library.spmv(A, x)
    s, values, use_torch = _operands(A, (x,))
    if not use_torch:
        return _spmv_np(s, np.asarray(values), _numeric(x, "spmv", "x"))
    import torch

    xt = x if _is_torch(x) else torch.from_numpy(_numeric(x, "spmv", "x"))
    dt = _torch_dtype(xt, values=values)
    v, xv = _as_torch_float(values, dt), _as_torch_float(xt, dt)
    if not _recorded(v, xv):
        return _t_spmv(s, v, xv)
    return _fns()["spmv"].apply(v, xv, s)


def sparse_softmax(A: Any) -> Any:
    """Row-wise softmax of sparse ``A`` over its stored values: the matrix with A's pattern and
    ``exp(A[i,j] - max_i) / Σ_j' exp(A[i,j'] - max_i)`` at each stored (i, j), the maximum and
    the sum over row i's stored values only (missing entries are left out, not taken as 0).

    A scipy CSR matrix for a scipy operand; a torch sparse CSR tensor, differentiable w.r.t. A's
    stored values, for a torch one.
    """
    if _compiling(A):
        from . import _library

        return _library.sparse_softmax(A)
    s, values, use_torch = _operands(A, ())
    if not use_torch:
        return _pattern_like(A, s, _softmax_np(s, np.asarray(values)))
    dt = _torch_dtype(values=values)
    v = _as_torch_float(values, dt)
    if not _recorded(v):
        return _pattern_like(A, s, _t_softmax(s, v))
    return _pattern_like(A, s, _fns()["softmax"].apply(v, s))


def spgemm(A: Any, B: Any) -> Any:
    """``A @ B`` for sparse ``A`` (m×k) and sparse ``B`` (k×n): the sparse m×n product, its
    structure assembled by the kernel (every product of a stored pair, cancellations kept as
    stored zeros), each row's columns sorted.

    A matrix of A's kind: scipy CSR for scipy operands, torch sparse CSR for torch ones
    (differentiable w.r.t. both operands' stored values: the gradients are SpGEMMs sampled on
    each operand's pattern), a `CsrTensor` for a `CsrTensor`. CPU only; float32, or float64
    if either operand is.
    """
    from . import _assembled

    return _assembled.run("spgemm", A, B)


def spadd(A: Any, B: Any) -> Any:
    """``A + B`` for sparse ``A`` and ``B`` of one shape whose patterns may differ: stored on
    the union of the patterns (a position stored in both holds the sum, even when it is 0).

    A matrix of A's kind, as `spgemm`'s (differentiable: each operand's gradient is the
    incoming one read at its own stored positions). CPU only; float32, or float64 if either
    operand is.
    """
    from . import _assembled

    return _assembled.run("spadd", A, B)


def _attention_np(s: _Csr, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                  scale: float) -> np.ndarray:
    """``softmax(scale · q kᵀ on the pattern) v`` on numpy operands: three kernels."""
    scores = _sddmm_np(s, s.filled(scale, _dtype_of(q, k, v)), q, k)
    return _spmm_np(s, _softmax_np(s, scores), v)


def masked_attention(M: Any, Q: Any, K: Any, V: Any, scale: Optional[float] = None) -> Any:
    """Attention restricted to the pattern of the sparse ``M`` (n_q×n_k):
    ``O = softmax(scale · Q Kᵀ on M's stored positions) V``, the softmax over each row's stored
    positions only (M's values are ignored; a row of M that stores nothing gives a row of 0).
    ``Q`` is n_q×d, ``K`` n_k×d, ``V`` n_k×d_v; ``scale`` defaults to ``1/sqrt(d)``.

    Three kernels: the scores (SDDMM), the row softmax, the product (SpMM). numpy for
    scipy/numpy operands; a torch tensor differentiable w.r.t. ``Q``, ``K`` and ``V`` when any
    operand is a torch tensor (graph attention, sparse transformers).
    """
    if _compiling(M):
        from . import _library

        return _library.masked_attention(M, Q, K, V, scale)
    s, _, use_torch = _operands(M, (Q, K, V))
    d = np.shape(Q)[1] if len(np.shape(Q)) == 2 else 0
    if scale is None:
        scale = 1.0 / np.sqrt(d) if d > 0 else 1.0
    if not use_torch:
        q, k, v = (_numeric(x, "masked_attention", n) for x, n in ((Q, "Q"), (K, "K"), (V, "V")))
        return _attention_np(s, q, k, v, scale)
    import torch

    q, k, v = (x if _is_torch(x) else torch.from_numpy(_numeric(x, "masked_attention", n))
               for x, n in ((Q, "Q"), (K, "K"), (V, "V")))
    dt = _torch_dtype(q, k, v)
    q, k, v = _as_torch_float(q, dt), _as_torch_float(k, dt), _as_torch_float(v, dt)
    if not _recorded(q, k, v):
        if _device.on_gpu(q):
            weights = s.torch_filled(scale, dt, q.device)
            return _t_spmm(s, _t_softmax(s, _t_sddmm(s, weights, q, k)), v)
        return torch.from_numpy(_attention_np(s, _np(q), _np(k), _np(v), scale))
    f = _fns()
    weights = torch.full((s.nnz,), float(scale), dtype=dt, device=q.device)
    scores = f["sddmm"].apply(weights, q, k, s)
    probs = f["softmax"].apply(scores, s)
    return f["spmm"].apply(probs, v, s)
