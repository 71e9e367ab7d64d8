#!/usr/bin/env bash
# Masked attention on the CPU: `sparsetir bench attention` (BSR blocks of 16 and the token-level
# CSR form) side by side with PyTorch (bench/attention_cpu_peers.py: scaled_dot_product_attention
# with the mask as a dense boolean mask, and torch.sparse's sampled_addmm / softmax / spmm), on
# one generated mask: 4096 tokens, a random 10% of the 64 x 64 blocks, 2 heads of 64, float32,
# 2 threads. One JSON line per run on stdout. Needs torch in $PYTHON (the peers' environment of
# ../shared/bench/setup.sh, or scripts/test-python.sh's).
#
#   PYTHON=~/.cache/sparsetir-peers/bin/python bash bench/attention_cpu.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
SPARSETIR="${SPARSETIR:-$ROOT/target/release/sparsetir}"
THREADS="${THREADS:-2}"
REPEAT="${REPEAT:-10}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

[ -x "$SPARSETIR" ] || cargo build --release --manifest-path "$ROOT/Cargo.toml" -p sparsetir-cli >&2
"$SPARSETIR" gen block --rows 4096 --block 64 --density 0.1 -o "$WORK/m4k.mtx" >&2
common=(--mask "$WORK/m4k.mtx" --heads 2 --feat 64 --threads "$THREADS" --repeat "$REPEAT" --json)
"$SPARSETIR" bench attention "${common[@]}" --format bsr:16
"$SPARSETIR" bench attention "${common[@]}" --format bsr:16 --dtype float16
"$SPARSETIR" bench attention "${common[@]}" --format csr
OMP_NUM_THREADS="$THREADS" "$PYTHON" "$ROOT/bench/attention_cpu_peers.py" --mask "$WORK/m4k.mtx" \
    --heads 2 --feat 64 --threads "$THREADS" --repeat "$REPEAT"
