#!/usr/bin/env bash
# Installs NVIDIA's NVRTC (the CUDA runtime compiler, a PyPI wheel) where sparsetir-cuda finds it
# without a CUDA toolkit: $SPARSETIR_CACHE_DIR/nvrtc, else $XDG_CACHE_HOME/sparsetir/nvrtc, else
# ~/.cache/sparsetir/nvrtc (the same cache directory as sparsetir-runtime). Needs python3 with
# pip and access to PyPI; needs no GPU. Idempotent: does nothing when the library is already there.
# Prints the directory holding libnvrtc.so.12.
set -euo pipefail

VERSION="12.9.86"
CACHE="${SPARSETIR_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sparsetir}"
DIR="$CACHE/nvrtc"
LIB="$DIR/nvidia/cuda_nvrtc/lib"

if [ -e "$LIB/libnvrtc.so.12" ]; then
    echo "$LIB"
    exit 0
fi

mkdir -p "$CACHE"
# Install beside the final place, then rename: an interrupted run leaves only a temp dir behind
# (removed on exit), never a half-filled $DIR.
TMP="$(mktemp -d "$CACHE/.nvrtc-install.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$TMP" \
    "nvidia-cuda-nvrtc-cu12==$VERSION" >&2
if [ ! -e "$TMP/nvidia/cuda_nvrtc/lib/libnvrtc.so.12" ]; then
    echo "setup-nvrtc: the wheel did not contain nvidia/cuda_nvrtc/lib/libnvrtc.so.12" >&2
    exit 1
fi
# The wheel also ships an alternative build (libnvrtc.alt.so.12 and its builtins, ~110 MB) that
# libnvrtc.so.12 never loads; drop it to keep the cache small.
rm -f "$TMP"/nvidia/cuda_nvrtc/lib/*.alt.so*
# Another run may have finished meanwhile: keep its copy.
if [ -e "$LIB/libnvrtc.so.12" ]; then
    echo "$LIB"
    exit 0
fi
# A leftover $DIR without the library (an older layout, a manual edit) is replaced.
rm -rf "$DIR"
mv -T "$TMP" "$DIR"
echo "$LIB"
