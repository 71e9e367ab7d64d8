#!/usr/bin/env bash
# SpMM schedule variants on the device: one JSON line per case, tagged with the variant.
set -uo pipefail
BIN=.gpu/sparsetir
export SPARSETIR_CACHE_DIR=/tmp/sparsetir-cache SPARSETIR_NVRTC=/usr/local/cuda/lib64/libnvrtc.so
for f in .gpu/*.mtx.gz; do [[ -f .gpu/data/$(basename $f .gz) ]] || gunzip -c $f > .gpu/data/$(basename $f .gz); done
for v in .gpu/variants/spmv_*.sched; do
  for m in .gpu/data/*.mtx; do
    $BIN bench spmv --matrix $m --device cuda --repeat 30 --schedule $v --json 2>>$OUT/err.txt | sed "s|^{|{\"variant\": \"$(basename $v .sched)\", |" >> $OUT/variants.jsonl
  done
done
for v in .gpu/variants/v*.sched; do
  for m in .gpu/data/*.mtx; do
    $BIN bench spmm --matrix $m --feat 32,128,512 --device cuda --repeat 30 --schedule $v --json 2>>$OUT/err.txt | sed "s|^{|{\"variant\": \"$(basename $v .sched)\", |" >> $OUT/variants.jsonl
  done
done
python3 - <<'PY'
import json, collections, os
rows = [json.loads(l) for l in open(os.environ["OUT"] + "/variants.jsonl")]
t = collections.defaultdict(dict)
for r in rows:
    t[(r["op"], r["matrix"], r["feat"])][r["variant"]] = r["seconds"] * 1e3
for op in ("spmv", "spmm"):
  vs = sorted({r["variant"] for r in rows if r["op"] == op})
  print("op matrix feat " + " ".join(vs))
  for k in sorted(t):
    if k[0] != op: continue
    print(k[0], k[1], k[2], " ".join(f"{t[k].get(v, float('nan')):.4f}" for v in vs))
PY
