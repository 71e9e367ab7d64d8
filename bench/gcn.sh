#!/usr/bin/env bash
# GCN training on Planetoid cora and citeseer, sparsetir (python/examples/gcn.py) side by side
# with the same model in plain PyTorch (python/examples/gcn_torch.py: torch.sparse.mm and a dense
# X @ W), 2 threads, one JSON line per run: dataset, mean test accuracy over the seeds, median
# epoch time. Needs the sparsetir package and torch in $PYTHON (scripts/test-python.sh builds
# such an environment: PYTHON=$CACHE/py-venv/bin/python).
#
#   bash bench/gcn.sh                 # 5 seeds, 200 epochs
#   SEEDS=1 bash bench/gcn.sh         # quicker
#   COMPILE="aot_eager inductor" bash bench/gcn.sh   # also gcn.py --compile BACKEND, each
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
DATA="${DATA:-$ROOT/../shared/data}"
SEEDS="${SEEDS:-5}"
THREADS="${THREADS:-2}"
COMPILE="${COMPILE:-}"

export OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS"
for ds in cora citeseer; do
    for impl in gcn gcn_torch; do
        "$PYTHON" "$ROOT/python/examples/$impl.py" --data "$DATA/planetoid-$ds" \
            --seeds "$SEEDS" --epochs 200 --threads "$THREADS" --json
    done
    for backend in $COMPILE; do
        "$PYTHON" "$ROOT/python/examples/gcn.py" --data "$DATA/planetoid-$ds" \
            --seeds "$SEEDS" --epochs 200 --threads "$THREADS" --compile "$backend" --json
    done
done
