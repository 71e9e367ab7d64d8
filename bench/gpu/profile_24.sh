#!/usr/bin/env bash
# 2:4 SpMM on sparse tensor cores at 4096 x 4096 x 4096, float16, timed and profiled: for each
# of FORMATS (default: `2:4(wgdbuf=8,ahead=6,a=tma,meta=packed,vals=packed,ss=1,runs=2,inflight=1,tma=1,producer=1,persistent=1)`,
# `2:4(wgdbuf=8x1x2,ahead=6,a=tma,meta=packed,vals=packed,ss=1,inflight=1,tma=1,producer=1,persistent=1)`,
# the same with A read from registers (no `ss=1`), and session 45's fastest, the same with the
# values in row order (no `vals=packed`)), the
# `bench spmm` case of run.sh with its CUDA source, then Nsight Compute (`ncu`, clocks left
# alone) on one launch of the product kernel: speed of light, compute workload (the tensor
# pipes), memory workload, occupancy, warp stall reasons, then the L2's sectors read and
# written and DRAM's bytes read (a second ncu run); and the SASS instruction mix of its
# cubin (HGMMA: warpgroup, HMMA: per warp); for the first form also the stall samples of each
# SASS instruction (`ncu_source_sass.csv.gz`, SOURCE=0 leaves it out). BEST_FROM=FILE (a
# run.sh `sparsetir_24.jsonl`) profiles the BEST (1 by default) fastest float16 forms that
# file measured and checked, after
# those of FORMATS when it is given too (a form in both is profiled once), instead of the
# default list. Then (PEER24=1, the default) cuSPARSELt's product of the same shape, the same
# way (`profile24_cusparselt`).
# Inputs as for run.sh (BIN); raw output under $OUT.
source "$(dirname "$0")/setup.sh"
m=$OUT/mask24_4096.mtx
trap 'rm -f "$m"' EXIT
"$BIN" gen mask24 --rows 4096 --cols 4096 -o "$m" > /dev/null
i=0
# Every stall reason this ncu has (by regex: the set differs between versions).
STALLS='gpu__time_duration.sum,regex:^smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio$'
# (The L2's request counters by regex, in a run of their own: their names differ between ncu
# versions, and a name this ncu lacks fails only that run.)
REQUESTS='regex:^lts__t_(requests|sectors)(_srcunit_tex)?_op_read\.sum$'
if [[ -s ${BEST_FROM:-} ]]; then
    FORMATS=$(python3 - "$BEST_FROM" "${BEST:-1}" "${FORMATS:-}" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
rows = [r for r in rows if r.get("check") and r.get("dtype") == "float16" and r.get("seconds")]
rows.sort(key=lambda r: r["seconds"])
forms = sys.argv[3].split()
for r in rows[: int(sys.argv[2])]:
    if r["requested_format"] not in forms:
        forms.append(r["requested_format"])
print(" ".join(forms))
PY
)
fi
formats=${FORMATS:-"2:4(wgdbuf=8,ahead=6,a=tma,meta=packed,vals=packed,ss=1,runs=2,inflight=1,tma=1,producer=1,persistent=1) 2:4(wgdbuf=8x1x2,ahead=6,a=tma,meta=packed,vals=packed,ss=1,inflight=1,tma=1,producer=1,persistent=1) 2:4(wgdbuf=8x1x2,ahead=6,a=tma,meta=packed,vals=packed,inflight=1,tma=1,producer=1,persistent=1) 2:4(wgdbuf=8x1x2,ahead=6,a=tma,meta=packed,inflight=1,tma=1,producer=1,persistent=1)"}
for f in $formats; do
    i=$((i + 1))
    d=$OUT/profile24_$i
    mkdir -p "$d/cuda"
    echo "$f" > "$d/format.txt"
    args=(bench spmm --matrix "$m" --feat 4096 --dtype float16 --format "$f" --device cuda)
    timeout 120 "$BIN" "${args[@]}" --repeat 20 --json --emit-cuda "$d/cuda" | tee "$d/bench.jsonl"
    timeout 180 ncu --clock-control none --kernel-name regex:'spmm_24' --launch-count 1 \
        --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
        --section Occupancy --section WarpStateStats --section LaunchStats --section SchedulerStats \
        "$BIN" "${args[@]}" --repeat 1 --warmup 0 --warmup-ms 0 --json > "$d/ncu.txt" 2>&1
    echo "$f: ncu rc=$?"
    # The L2's sectors read and written and DRAM's bytes, to set beside the emulator's sector
    # count of the same form (a run of its own: a metric this ncu lacks fails only this one).
    timeout 60 ncu --clock-control none --kernel-name regex:'spmm_24' --launch-count 1 \
        --metrics lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,dram__bytes_read.sum,gpu__time_duration.sum \
        "$BIN" "${args[@]}" --repeat 1 --warmup 0 --warmup-ms 0 --json > "$d/ncu_sectors.txt" 2>&1
    echo "$f: ncu sectors rc=$?"
    # What the warps wait on (session 45's profile named only the largest stall) and the L2's
    # read requests beside its sectors (whether A's 32-byte rows made the L2 busy on requests),
    # a run of its own for the same reason.
    timeout 60 ncu --clock-control none --kernel-name regex:'spmm_24' --launch-count 1 \
        --metrics "$STALLS" "$BIN" "${args[@]}" --repeat 1 --warmup 0 --warmup-ms 0 --json \
        > "$d/ncu_stalls.txt" 2>&1
    echo "$f: ncu stalls rc=$?"
    timeout 45 ncu --clock-control none --kernel-name regex:'spmm_24' --launch-count 1 \
        --metrics "$REQUESTS" "$BIN" "${args[@]}" --repeat 1 --warmup 0 --warmup-ms 0 --json \
        > "$d/ncu_requests.txt" 2>&1
    echo "$f: ncu requests rc=$?"
    # (SOURCE=1, the default: the first form only) where in the SASS the warps stall: the
    # warp-state samples per instruction (SourceCounters), printed as the source page's CSV.
    if [[ $i == 1 && ${SOURCE:-1} == 1 ]]; then
        timeout 60 ncu --clock-control none --kernel-name regex:'spmm_24' --launch-count 1 \
            --section SourceCounters --section WarpStateStats -f -o "$d/source" \
            "$BIN" "${args[@]}" --repeat 1 --warmup 0 --warmup-ms 0 --json > "$d/ncu_source_run.txt" 2>&1
        echo "$f: ncu source rc=$?"
        timeout 30 ncu -i "$d/source.ncu-rep" --page source --csv --print-source sass \
            > "$d/ncu_source_sass.csv" 2>&1
        echo "$f: ncu source page rc=$?"
        gzip -f "$d/ncu_source_sass.csv"
        rm -f "$d/source.ncu-rep"
    fi
done
# The best 2:4 library on the same product (PEER24=0 leaves it out): cuSPARSELt through
# PyTorch, the kernels of one product inside the NVTX range `peer24` (bench/gpu/peer24_once.py),
# the same sections and sector counts; its kernel's name says its tile and cluster shapes.
if [[ ${PEER24:-1} == 1 ]]; then
    d=$OUT/profile24_cusparselt
    mkdir -p "$d"
    py=(python3 "$(dirname "$0")/peer24_once.py" 4096)
    sections=(--section SpeedOfLight --section ComputeWorkloadAnalysis
        --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats
        --section LaunchStats --section SchedulerStats)
    which=(--nvtx --nvtx-include "peer24/")
    timeout 60 ncu --clock-control none "${which[@]}" --launch-count 1 "${sections[@]}" \
        "${py[@]}" > "$d/ncu.txt" 2>&1
    echo "cusparselt: ncu rc=$?"
    # (Should this ncu not filter by the range, the second GEMM-like kernel: the warm-up's
    # product comes first.)
    if grep -q "No kernels were profiled" "$d/ncu.txt"; then
        which=(--kernel-name "regex:(?i)(gemm|xmma|sparse_mm|spmma)" --launch-skip 1)
        timeout 60 ncu --clock-control none "${which[@]}" --launch-count 1 "${sections[@]}" \
            "${py[@]}" > "$d/ncu.txt" 2>&1
        echo "cusparselt (by kernel name): ncu rc=$?"
    fi
    timeout 45 ncu --clock-control none "${which[@]}" --launch-count 1 \
        --metrics lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,dram__bytes_read.sum,gpu__time_duration.sum \
        "${py[@]}" > "$d/ncu_sectors.txt" 2>&1
    echo "cusparselt: ncu sectors rc=$?"
    timeout 45 ncu --clock-control none "${which[@]}" --launch-count 1 --metrics "$STALLS" \
        "${py[@]}" > "$d/ncu_stalls.txt" 2>&1
    echo "cusparselt: ncu stalls rc=$?"
    timeout 45 ncu --clock-control none "${which[@]}" --launch-count 1 --metrics "$REQUESTS" \
        "${py[@]}" > "$d/ncu_requests.txt" 2>&1
    echo "cusparselt: ncu requests rc=$?"
fi
for c in "$SPARSETIR_CACHE_DIR"/*.cubin; do
    [[ -e $c ]] || continue
    cuobjdump -sass "$c" 2>/dev/null | grep -oE '\b(HGMMA|HMMA|LDGSTS|LDSM|BAR)[A-Z0-9._]*' | sort | uniq -c | sed "s|^|$(basename "$c") |" >> "$OUT/profile24_sass.txt"
done
rm -f "$m"
