import os
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from . import ops as ops

TARGETS: Tuple[str, ...]

class SparsetirError(Exception):
    """A script, schedule, lowering, compile or data error, with the CLI's located message."""

class Kernel:
    @property
    def name(self) -> str: ...
    @property
    def target(self) -> str: ...
    @property
    def c_source(self) -> Optional[str]: ...
    def buffers(self) -> List[Tuple[str, str, bool, bool]]: ...
    def params(self) -> List[str]: ...
    def __call__(self, **buffers: Any) -> Dict[str, Any]: ...

def compile(
    source: Union[str, "os.PathLike[str]"],
    target: str = "c",
    schedule: Optional[Union[str, "os.PathLike[str]"]] = None,
    func: Optional[str] = None,
    decompose: Optional[Union[str, Sequence[str]]] = None,
    *,
    specialize: Optional[Dict[str, int]] = None,
    threads: Optional[int] = None,
) -> Kernel: ...
