"""The README's Python example runs as written (from the repository root)."""

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
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert "sparsetir.compile" in code and "ops.spmm" in code
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=300)
