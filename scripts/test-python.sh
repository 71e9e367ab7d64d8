#!/usr/bin/env bash
# Builds and tests the Python package: creates (or reuses) a virtual environment in the sparsetir
# cache directory ($SPARSETIR_CACHE_DIR, else $XDG_CACHE_HOME/sparsetir, else ~/.cache/sparsetir)
# under py-venv, installs numpy, scipy, pytest and torch (plain `pip install torch`, from PyPI)
# and ./python (PyO3 + maturin: needs a Rust toolchain and a C compiler), then runs
# `pytest python/tests -q`. The Rust build goes to py-target in the same directory, so a second
# run rebuilds only what changed. SPARSETIR_PY_TORCH=0 skips installing torch (its tests skip).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${SPARSETIR_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sparsetir}"
VENV="$CACHE/py-venv"
PYTHON="${PYTHON:-python3}"

mkdir -p "$CACHE"
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check --quiet)
"${PIP[@]}" install --upgrade pip
"${PIP[@]}" install numpy scipy pytest
if [ "${SPARSETIR_PY_TORCH:-1}" != "0" ]; then
    # No pip cache: the wheel (with its CUDA libraries, several GB on Linux) is not kept twice.
    "$VENV/bin/python" -c "import torch" 2>/dev/null || "${PIP[@]}" install --no-cache-dir torch
fi
# --locked: the extension builds against python/Cargo.lock as committed.
CARGO_TARGET_DIR="$CACHE/py-target" MATURIN_PEP517_ARGS="--locked" \
    "${PIP[@]}" install --force-reinstall --no-deps "$ROOT/python"
cd "$ROOT"
"$VENV/bin/python" -m pytest python/tests -q
