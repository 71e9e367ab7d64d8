#!/usr/bin/env bash
# Block-sparse attention against PyTorch's scaled_dot_product_attention, measured in alternation
# (ROUNDS times each, default 3) on the same mask: 4096 tokens, a random 10% of the 64 x 64
# blocks, 8 heads of 64, float16 (and float32) — run.sh's attention case, repeated so that the
# ratio rests on several paired medians rather than one; the softmax fused into the product and
# apart (SOFTMAX). Inputs as for run.sh (BIN); raw JSON
# lines under $OUT (attention.jsonl: sparsetir, sdpa.jsonl: the peer).
source "$(dirname "$0")/setup.sh"
mask=$OUT/mask_block64_4096.mtx
"$BIN" gen block --rows 4096 --block 64 --density 0.1 -o "$mask" > /dev/null
for r in $(seq "${ROUNDS:-3}"); do
    for dt in ${ATTENTION_DTYPES:-float16}; do
        for sm in ${SOFTMAX:-fused separate}; do
            timeout 120 "$BIN" bench attention --matrix "$mask" --heads 8 --feat 64 --dtype "$dt" \
                --format bsr:16 --softmax "$sm" --device cuda --repeat 50 --json >> "$OUT/attention.jsonl"
        done
    done
    timeout 120 python3 bench/gpu/peers.py --attention "$mask" --heads 8 --head-dim 64 >> "$OUT/sdpa.jsonl"
done
rm -f "$mask"
python3 - "$OUT" <<'PY'
import json, sys, statistics
d = sys.argv[1]
ours = [json.loads(l) for l in open(f"{d}/attention.jsonl") if l.startswith("{")]
peer = [json.loads(l) for l in open(f"{d}/sdpa.jsonl") if l.startswith("{")]
for dt in ("float16", "float32"):
    for sm in ("fused", "separate"):
        mine = [x for x in ours if x["dtype"] == dt and x.get("softmax", "separate") == sm]
        o = [x["seconds"] * 1e3 for x in mine if x.get("seconds")]
        p = [x["ms"] for x in peer if x.get("op") == "attention" and x["dtype"] == dt]
        if o and p:
            print(f"{dt}, softmax {sm}: sparsetir bsr:16 ms {[round(x, 4) for x in o]} (median {statistics.median(o):.4f}), "
                  f"sdpa (boolean mask) ms {[round(x, 4) for x in p]} (median {statistics.median(p):.4f}), "
                  f"ratio of medians {statistics.median(p) / statistics.median(o):.2f}x, "
                  f"checks {[x['check'] for x in mine]}")
PY
