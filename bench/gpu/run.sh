#!/usr/bin/env bash
# The CUDA backend on a real GPU, in one command (a machine with an NVIDIA GPU, the driver and
# PyTorch; no network): checks the CUDA path against the reference on the device, then
# benchmarks SpMM (feature widths 32-512; `auto` also measuring hyb, BSR and ELL), SDDMM (32,
# 128), SpMV (CSR and SELL) and 16-bit-operand SpMM on the matrices against
# cuSPARSE through PyTorch, and writes raw JSON lines plus a summary under $OUT.
#
# Inputs (prepared by the caller, see bench/gpu/RESULTS.md): BIN (a release `sparsetir`), TESTS
# (directory of prebuilt test binaries, optional), DATA (directory of .mtx files).
set -uo pipefail
BIN=${BIN:-target/release/sparsetir}
DATA=${DATA:-../shared/data}
OUT=${OUT:-bench/gpu/out}
mkdir -p "$OUT"
export SPARSETIR_CACHE_DIR=${SPARSETIR_CACHE_DIR:-/tmp/sparsetir-cache}
# NVRTC: the toolkit's, else a wheel's.
if [[ -z ${SPARSETIR_NVRTC:-} ]]; then
    for c in /usr/local/cuda/lib64/libnvrtc.so* $(python3 -c 'import nvidia,os;print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null)/nvidia/cu13/lib/libnvrtc.so*; do
        [[ -e $c ]] && { export SPARSETIR_NVRTC=$c; break; }
    done
fi
echo "NVRTC: ${SPARSETIR_NVRTC:-search}" | tee "$OUT/env.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee -a "$OUT/env.txt"

# 1. The CUDA test binaries on the device (the same differential cases as the emulator).
if [[ -n ${TESTS:-} ]]; then
    for t in "$TESTS"/*; do
        echo "== $t" | tee -a "$OUT/tests.txt"
        "$t" --test-threads=1 2>&1 | tail -25 | tee -a "$OUT/tests.txt"
    done
fi

# 2. Benchmarks.
mats=()
for m in "$DATA"/*.mtx; do mats+=(--matrix "$m"); done
: > "$OUT/sparsetir.jsonl"
: > "$OUT/sparsetir_auto.jsonl"
: > "$OUT/sparsetir_formats.jsonl"
: > "$OUT/sparsetir_dtype.jsonl"
for m in "$DATA"/*.mtx; do
    # SpMM choosing per matrix and width between CSR and hyb (degree buckets), by measurement.
    "$BIN" bench spmm --matrix "$m" --feat 32,64,128,256,512 --device cuda --format auto --repeat 50 --json >> "$OUT/sparsetir_auto.jsonl" 2>> "$OUT/errors.txt"
    "$BIN" bench spmm --matrix "$m" --feat 32,64,128,256,512 --device cuda --repeat 50 --json >> "$OUT/sparsetir.jsonl" 2>> "$OUT/errors.txt"
    "$BIN" bench sddmm --matrix "$m" --feat 32,128 --device cuda --repeat 50 --json >> "$OUT/sparsetir.jsonl" 2>> "$OUT/errors.txt"
    "$BIN" bench spmv --matrix "$m" --device cuda --repeat 50 --json >> "$OUT/sparsetir.jsonl" 2>> "$OUT/errors.txt"
    # SpMV on SELL-C-sigma (automatic GPU schedule) and 16-bit operands (float32 arithmetic).
    "$BIN" bench spmv --matrix "$m" --device cuda --format sell --repeat 50 --json >> "$OUT/sparsetir_formats.jsonl" 2>> "$OUT/errors.txt"
    for dt in float16 bfloat16; do
        "$BIN" bench spmm --matrix "$m" --feat 32,128 --device cuda --dtype $dt --repeat 50 --json >> "$OUT/sparsetir_dtype.jsonl" 2>> "$OUT/errors.txt"
        # Tensor cores: 16 x 16 BSR blocks and TC-GNN's condensed tiles (mma.sync m16n8k16).
        for f in bsr:16 bsr:32 condense; do
            "$BIN" bench spmm --matrix "$m" --feat 32,128 --device cuda --dtype $dt --format $f --repeat 50 --json >> "$OUT/sparsetir_dtype.jsonl" 2>> "$OUT/errors.txt"
        done
    done
done
"$BIN" bench spmm --matrix "$DATA/cora.mtx" --feat 128 --device cuda --emit-cuda "$OUT/cuda" --json > /dev/null 2>&1
# Masked attention (SDDMM, sparse softmax, SpMM per head) on a Longformer mask of 4096 tokens.
"$BIN" gen longformer --seq-len 4096 --window 256 --global 16 -o "$OUT/longformer4096.mtx"
for dt in float32 float16; do
    "$BIN" bench attention --matrix "$OUT/longformer4096.mtx" --heads 8 --feat 64 --dtype $dt --device cuda --repeat 50 --json >> "$OUT/attention.jsonl" 2>> "$OUT/errors.txt"
done
python3 bench/gpu/peers.py "${mats[@]}" > "$OUT/cusparse.jsonl" 2>> "$OUT/errors.txt"
{ echo "## CSR (default GPU schedules)"; python3 bench/gpu/summarize.py "$OUT/sparsetir.jsonl" "$OUT/cusparse.jsonl"
  echo; echo "## SpMM --format auto (CSR or hyb per case)"; python3 bench/gpu/summarize.py "$OUT/sparsetir_auto.jsonl" "$OUT/cusparse.jsonl"; } | tee "$OUT/summary.md"
