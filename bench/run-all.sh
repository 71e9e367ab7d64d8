#!/usr/bin/env bash
# Runs `sparsetir bench` and the peers (../shared/bench/run-peers.sh: scipy, MKL, PyTorch) side by
# side on the issue's matrices, feature widths 32 and 128, and prints the ratio table
# (fastest peer's seconds / ours) with geometric means per operator.
#
#   bench/run-all.sh [OUTDIR] [OPS...]     # default: bench/results, ops spmm sddmm spmv
#
# The sparse-output operators (spgemm: C = A·A or A·Aᵀ; spadd: C = A + Aᵀ) run on the six shared
# matrices only (no feature width, no format: CSR operands and output).
#
# Environment: SPARSETIR (the binary; default: target/debug/sparsetir, built if missing — the
# timed kernels are C compiled by $CC either way), SHARED (default ../shared), THREADS (default:
# all cores), REPEAT (10), WARMUP (2), ROUNDS (3: every case is measured ROUNDS times, peers and
# sparsetir alike, and the table keeps each one's best median), FORMAT (`--format` of
# `sparsetir bench`: csr, hyb, bsr:B, ell, auto; default auto). The R-MAT graphs are generated under target/bench-data/.
# For each matrix the peers run first, then sparsetir, so both see the same machine state.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
cd "$root"
out=${1:-bench/results}
shift || true
ops=("$@")
[[ ${#ops[@]} -gt 0 ]] || ops=(spmm sddmm spmv)
shared=${SHARED:-$root/../shared}
bin=${SPARSETIR:-target/debug/sparsetir}
threads=${THREADS:-$(nproc)}
repeat=${REPEAT:-10}
warmup=${WARMUP:-2}
rounds=${ROUNDS:-3}
format=${FORMAT:-auto}
peers="$shared/bench/run-peers.sh"
[[ -x $bin ]] || cargo build -p sparsetir-cli
mkdir -p "$out" target/bench-data
rmat1=target/bench-data/rmat_100k_s0.mtx
rmat2=target/bench-data/rmat_169k_s1.mtx
[[ -f $rmat1 ]] || bash "$peers" --gen-rmat 100000 2000000 0 "$rmat1"
[[ -f $rmat2 ]] || bash "$peers" --gen-rmat 169343 1166243 1 "$rmat2"
matrices=()
for m in cora citeseer pubmed 4elt bcsstk13 pushpull; do matrices+=("$shared/data/$m.mtx"); done
matrices+=("$rmat1" "$rmat2")
# Warm the kernel cache so the timed runs report cached loads.
for op in "${ops[@]}"; do
  case $op in spgemm | spadd) f=() ;; *) f=(--format "$format") ;; esac
  "$bin" bench "$op" --matrix "$shared/data/cora.mtx" --feat 32,128 --repeat 1 --warmup 0 \
    "${f[@]}" --json >/dev/null 2>&1 || true
done
for op in "${ops[@]}"; do
  : >"$out/$op-peers.jsonl"
  : >"$out/$op-sparsetir.jsonl"
  : >"$out/$op-sparsetir.log"
  case $op in
    spgemm | spadd) mats=("${matrices[@]:0:6}"); extra=() ;;
    *) mats=("${matrices[@]}"); extra=(--format "$format") ;;
  esac
  for round in $(seq "$rounds"); do
  for m in "${mats[@]}"; do
    echo "== $op $(basename "$m" .mtx) (round $round/$rounds)" >&2
    bash "$peers" --op "$op" --matrix "$m" --feat 32,128 --threads "$threads" \
      --repeat "$repeat" --warmup "$warmup" >>"$out/$op-peers.jsonl"
    "$bin" bench "$op" --matrix "$m" --feat 32,128 --threads "$threads" \
      --repeat "$repeat" --warmup "$warmup" "${extra[@]}" --json \
      >>"$out/$op-sparsetir.jsonl" 2>>"$out/$op-sparsetir.log"
  done
  done
done
python3 "$here/summarize.py" "$out" "${ops[@]}"
