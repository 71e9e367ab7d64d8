"""The README's Python examples run as written (from the repository root)."""

import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("scipy")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_readme_python_example():
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    section = readme[readme.index("## Python"):]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 2, "the Python section's examples: compile/ops, and torch.compile"
    assert "sparsetir.compile" in blocks[0] and "ops.spmm" in blocks[0]
    assert "torch.compile" in blocks[1] and "CsrTensor" in blocks[1]
    for code in blocks:
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=300)
