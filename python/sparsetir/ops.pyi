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

def spmm(A: Any, B: Any) -> Any:
    """``A @ B``: numpy for scipy/numpy operands, a differentiable torch tensor otherwise."""

def sddmm(A: Any, X: Any, Y: Any) -> Any:
    """``A ∘ (X Yᵀ)`` on A's pattern: scipy CSR, or a differentiable torch sparse CSR tensor."""

def spmv(A: Any, x: Any) -> Any:
    """``A @ x``: numpy for scipy/numpy operands, a differentiable torch tensor otherwise."""

def sparse_softmax(A: Any) -> Any:
    """Row-wise softmax over A's stored values: scipy CSR, or a differentiable torch sparse CSR
    tensor."""

def masked_attention(M: Any, Q: Any, K: Any, V: Any, scale: Optional[float] = None) -> Any:
    """``softmax(scale · Q Kᵀ on M's pattern) V``: numpy, or a differentiable torch tensor."""

def csr_structure(A: Any) -> _Csr: ...
