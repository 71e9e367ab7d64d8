#!/usr/bin/env bash
# sparsetir.ops on a real GPU, from Python, on the device machine (its python3 holds PyTorch,
# numpy, scipy and pytest): installs the wheel bench/gpu/prepare.sh put in .gpu/wheel, runs the
# GPU path's tests on CUDA tensors (python/tests/test_ops_gpu.py: every operator and gradient
# against dense float64 references, the GCN example's products), then times the 2-layer GCN
# (python/examples/gcn.py against gcn_torch.py, both `--device cuda`, 200 epochs, one seed) on
# the Planetoid graphs carried in .gpu, and GraphSAGE with max aggregation on cora (sparsetir
# against the torch baseline's amax, scatter_reduce on CUDA), and last a GCN compiled whole by
# torch.compile on CUDA tensors. Results: $OUT/python_tests.txt, $OUT/gcn.jsonl (the runs'
# stderr, and which of them timed out, in gcn.err), $OUT/python_compile.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/res/python}
mkdir -p "$OUT" /tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .gpu/wheel/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 SPARSETIR_CACHE_DIR=/tmp/sparsetir-cache
timeout "${BUDGET_TESTS:-90}" python3 -m pytest python/tests/test_ops_gpu.py -q -rs \
    > "$OUT/python_tests.txt" 2>&1
echo "pytest exit $?" >> "$OUT/python_tests.txt"
# One timed example run, its JSON line appended to gcn.jsonl and its stderr to gcn.err; a run
# that its timeout kills (exit 124) prints nothing, so gcn.err says which one and after how long.
timed_example() {
    timeout "${BUDGET_GCN:-40}" "$@" >> "$OUT/gcn.jsonl" 2>> "$OUT/gcn.err"
    local rc=$?
    if [[ $rc -eq 124 ]]; then
        echo "timed out after ${BUDGET_GCN:-40} s (BUDGET_GCN): $*" >> "$OUT/gcn.err"
    fi
    return $rc
}
for d in .gpu/planetoid-cora .gpu/planetoid-citeseer; do
    [[ -d $d ]] || continue
    for impl in gcn gcn_torch; do
        timed_example python3 "python/examples/$impl.py" --data "$d" --device cuda --json
    done
done
if [[ -d .gpu/planetoid-cora ]]; then
    for impl in sparsetir torch; do
        timed_example python3 python/examples/sage.py --data .gpu/planetoid-cora \
            --aggr max --impl $impl --device cuda --json
    done
fi
# Last, with what the caller's budget leaves: a GCN compiled whole by torch.compile on CUDA
# tensors (test_compile.py's real-GPU tests; inductor's first compile takes tens of seconds).
timeout "${BUDGET_COMPILE:-60}" python3 -m pytest python/tests/test_compile.py -q -rs \
    -k real_gpu > "$OUT/python_compile.txt" 2>&1
echo "pytest exit $?" >> "$OUT/python_compile.txt"
cat "$OUT/python_tests.txt" "$OUT/gcn.jsonl" "$OUT/python_compile.txt"
