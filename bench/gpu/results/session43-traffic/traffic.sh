#!/bin/bash
# usage: traffic.sh BIN TAG
BIN=$1; TAG=$2; export SPARSETIR_CACHE_DIR=/tmp/traffic/cache-$TAG
M=""; for f in /work/shared/data/*.mtx; do M="$M --matrix $f"; done
for op in spmm sddmm spmv; do
  $BIN bench $op $M --device cuda-emu --feat 32,128 --repeat 1 --warmup 0 --warmup-ms 0 --json > /tmp/traffic/$TAG-$op.jsonl 2>/tmp/traffic/$TAG-$op.err
done
