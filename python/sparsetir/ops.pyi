from typing import Any, Optional, Tuple

import numpy as np

class _Csr:
    m: int
    n: int
    indptr: np.ndarray
    indices: np.ndarray
    @property
    def nnz(self) -> int: ...
    def transpose(self) -> Tuple["_Csr", np.ndarray]: ...

class CsrTensor:
    """A sparse m×n matrix as torch tensors in CSR form: what ``torch.compile`` can trace."""

    indptr: Any
    indices: Any
    values: Any
    shape: Tuple[int, int]
    def __init__(self, indptr: Any, indices: Any, values: Any, shape: Tuple[int, int]) -> None: ...
    @classmethod
    def from_torch(cls, A: Any) -> "CsrTensor": ...
    @classmethod
    def from_scipy(cls, A: Any, device: Any = None, dtype: Any = None) -> "CsrTensor": ...
    def with_values(self, values: Any) -> "CsrTensor": ...
    def to_torch(self) -> Any: ...
    def to(self, *args: Any, **kwargs: Any) -> "CsrTensor": ...
    @property
    def nnz(self) -> int: ...
    @property
    def device(self) -> Any: ...
    @property
    def dtype(self) -> Any: ...

def spmm(A: Any, B: Any, reduce: str = "sum") -> Any:
    """``A @ B`` (or the rows' products aggregated by ``reduce``: sum, mean, max, min): numpy
    for scipy/numpy operands, a differentiable torch tensor otherwise."""

def sddmm(A: Any, X: Any, Y: Any) -> Any:
    """``A ∘ (X Yᵀ)`` on A's pattern: scipy CSR, a differentiable torch sparse CSR tensor, or a
    `CsrTensor` for a `CsrTensor`."""

def spmv(A: Any, x: Any) -> Any:
    """``A @ x``: numpy for scipy/numpy operands, a differentiable torch tensor otherwise."""

def sparse_softmax(A: Any) -> Any:
    """Row-wise softmax over A's stored values: scipy CSR, a differentiable torch sparse CSR
    tensor, or a `CsrTensor`, as A."""

def masked_attention(M: Any, Q: Any, K: Any, V: Any, scale: Optional[float] = None) -> Any:
    """``softmax(scale · Q Kᵀ on M's pattern) V``: numpy, or a differentiable torch tensor."""

def spgemm(A: Any, B: Any) -> Any:
    """``A @ B`` of two sparse matrices: a sparse matrix of A's kind (differentiable with torch
    operands)."""

def spadd(A: Any, B: Any) -> Any:
    """``A + B`` of two sparse matrices of one shape: a sparse matrix of A's kind."""

def csr_structure(A: Any) -> _Csr: ...
