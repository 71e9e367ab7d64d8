#!/usr/bin/env bash
set -uo pipefail
BIN=.gpu/sparsetir
export SPARSETIR_CACHE_DIR=/tmp/sparsetir-cache SPARSETIR_NVRTC=/usr/local/cuda/lib64/libnvrtc.so
for f in .gpu/*.mtx.gz; do [[ -f .gpu/data/$(basename $f .gz) ]] || gunzip -c $f > .gpu/data/$(basename $f .gz); done
for v in .gpu/variants/*.sched; do
  for m in rmat_100k_s0 rmat_169k_s1 cora pubmed citeseer; do
    $BIN bench spmm --matrix .gpu/data/$m.mtx --feat 32,64,128,256,512 --device cuda --repeat 30 --schedule $v --json 2>>$OUT/err.txt | sed "s|^{|{\"variant\": \"$(basename $v .sched)\", |" >> $OUT/variants.jsonl
  done
done
python3 - <<'PY'
import json, collections, os
rows = [json.loads(l) for l in open(os.environ["OUT"] + "/variants.jsonl")]
t = collections.defaultdict(dict)
for r in rows:
    t[(r["matrix"], r["feat"])][r["variant"]] = r["seconds"] * 1e3
vs = sorted({r["variant"] for r in rows})
print("matrix feat " + " ".join(vs))
for k in sorted(t):
    print(k[0], k[1], " ".join(f"{t[k].get(v, float('nan')):.4f}" for v in vs))
PY
