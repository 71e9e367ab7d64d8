#!/usr/bin/env bash
# Block-sparse attention's three kernels on a real GPU, timed and profiled: the `bench attention
# --format bsr:16` case of run.sh (4096 tokens, a random 10% of the 64 x 64 blocks, 8 heads of
# 64, float16), its CUDA sources, then Nsight Compute (`ncu`, clocks left alone) on one launch
# of each kernel: speed of light, memory workload, occupancy and warp stall reasons. Inputs as
# for run.sh (BIN); raw output under $OUT.
source "$(dirname "$0")/setup.sh"
mask=$OUT/mask_block64_4096.mtx
"$BIN" gen block --rows 4096 --block 64 --density 0.1 -o "$mask" > /dev/null
args=(bench attention --matrix "$mask" --heads 8 --feat 64 --dtype float16 --format bsr:16 --device cuda)
timeout 120 "$BIN" "${args[@]}" --repeat 50 --json --emit-cuda "$OUT/cuda" | tee "$OUT/attention.jsonl"
timeout 240 ncu --clock-control none --kernel-name regex:'bsr_sddmm|bsr_softmax|bsrmm' --launch-count 3 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
    --section WarpStateStats --section LaunchStats --section SchedulerStats \
    "$BIN" "${args[@]}" --repeat 1 --warmup 0 --warmup-ms 0 --json > "$OUT/ncu.txt" 2>&1
echo "ncu rc=$?"
rm -f "$mask"
