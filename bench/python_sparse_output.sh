#!/usr/bin/env bash
# sparsetir.ops.spgemm / spadd from Python (bench/python_sparse_output.py) beside the peers
# (../shared/bench/run-peers.sh: scipy, MKL, PyTorch) on the six shared matrices, matrix by
# matrix (peers first, then sparsetir, ROUNDS times), THREADS threads for both. Writes
# $OUT/<op>.jsonl and prints, per matrix, the best median of each and the ratio against the
# fastest peer, then their geometric mean.
#
#   PYTHON=~/.cache/sparsetir/py-venv/bin/python bash bench/python_sparse_output.sh spgemm spadd
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SHARED="${SHARED:-$ROOT/../shared}"
PYTHON="${PYTHON:-python3}"
THREADS="${THREADS:-2}"
ROUNDS="${ROUNDS:-3}"
OUT="${OUT:-$ROOT/bench/results/python-sparse-output}"
[[ -d $SHARED/data ]] || { echo "no $SHARED/data: nothing to measure" >&2; exit 0; }
mkdir -p "$OUT"
export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS"
for op in "${@:-spgemm}"; do
    : > "$OUT/$op.jsonl"
    for name in cora citeseer pubmed 4elt bcsstk13 pushpull; do
        m="$SHARED/data/$name.mtx"
        [[ -f $m ]] || continue
        for _ in $(seq "$ROUNDS"); do
            bash "$SHARED/bench/run-peers.sh" --op "$op" --matrix "$m" --threads "$THREADS" \
                >> "$OUT/$op.jsonl"
            "$PYTHON" "$ROOT/bench/python_sparse_output.py" --op "$op" --matrix "$m" \
                >> "$OUT/$op.jsonl"
        done
    done
    "$PYTHON" - "$OUT/$op.jsonl" <<'PY'
import json, math, sys
best = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "seconds" not in r or r.get("relerr", 0) > 1e-3:
        continue
    k = (r["matrix"], r["peer"])
    best[k] = min(best.get(k, math.inf), r["seconds"])
ratios = []
for mat in dict.fromkeys(m for m, _ in best):
    ours = best.get((mat, "sparsetir-python"))
    peers = {p: s for (m, p), s in best.items() if m == mat and p != "sparsetir-python"}
    if ours is None or not peers:
        continue
    fastest = min(peers, key=peers.get)
    ratios.append(peers[fastest] / ours)
    print(f"{mat}: sparsetir {ours * 1e3:.3f} ms, " + ", ".join(
        f"{p} {s * 1e3:.3f} ms" for p, s in sorted(peers.items())) +
        f" -> {ratios[-1]:.2f}x the fastest ({fastest})")
if ratios:
    g = math.exp(sum(map(math.log, ratios)) / len(ratios))
    print(f"geometric mean {g:.2f}x over {len(ratios)} matrices; lowest {min(ratios):.2f}x")
PY
done
