#!/usr/bin/env bash
# Builds and tests the Python package: creates (or reuses) a virtual environment in the sparsetir
# cache directory ($SPARSETIR_CACHE_DIR, else $XDG_CACHE_HOME/sparsetir, else ~/.cache/sparsetir)
# under py-venv, installs numpy, scipy, pytest and torch (plain `pip install torch`, from PyPI)
# and ./python (PyO3 + maturin: needs a Rust toolchain and a C compiler), then runs
# `pytest python/tests -q`. The Rust build goes to the repository's target directory (dev
# profile; SPARSETIR_PY_TARGET and SPARSETIR_PY_PROFILE override), so it reuses `cargo test`'s.
# SPARSETIR_PY_TORCH=0 skips installing torch (its tests skip).
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
# --locked: the extension builds against python/Cargo.lock as committed. The tests build it with
# the dev profile into the repository's own target directory, so the crates `cargo test` has
# just compiled are reused (the kernels themselves are C compiled by $CC with -O3 either way);
# a user's `pip install ./python` builds the release profile.
CARGO_TARGET_DIR="${SPARSETIR_PY_TARGET:-$ROOT/target}" \
    MATURIN_PEP517_ARGS="--locked --profile ${SPARSETIR_PY_PROFILE:-dev}" \
    "${PIP[@]}" install --force-reinstall --no-deps "$ROOT/python"
cd "$ROOT"
"$VENV/bin/python" -m pytest python/tests -q
