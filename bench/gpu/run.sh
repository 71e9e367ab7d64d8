#!/usr/bin/env bash
# The CUDA backend on a real GPU, in one command (a machine with an NVIDIA GPU, the driver,
# nvcc and PyTorch; no network). Phases, in order (PHASES selects them, comma-separated):
#   tests   the prebuilt test binaries' real-GPU tests (the emulator's differential cases);
#   probe   which register layouts `mma.sp` takes on this GPU (bench/gpu/probe_mma_sp.cu), and
#           `wgmma.mma_async.sp`'s descriptor and layouts (bench/gpu/probe_wgmma_sp.cu, sm_90a);
#   csr     SpMM (widths 32-512; CSR, and `auto` measuring CSR and hyb), SDDMM (32, 128) and SpMV
#           on every matrix against cuSPARSE (issue 12);
#   formats BSR SpMM on tensor cores (16-bit, blocks of 16 and 32, 10% block density) against
#           cuSPARSE bsrmm, 2:4 SpMM (`mma.sp`) against cuBLAS's dense GEMM of the same shape,
#           masked attention (4096 tokens, 8 heads; CSR and BSR kernels, ATTENTION_FORMATS)
#           against scaled_dot_product_attention with the mask as a dense boolean mask (issue 13);
#   extra   SpMV on SELL-C-sigma and 16-bit SpMM (CSR, BSR, condensed) beside float32 CSR.
# Every peer runs through PyTorch (or cuSPARSE/cuBLAS it loads) on the same device. DTYPES
# picks the 16-bit types of the formats phase, FORMATS_24 / FORMATS_24_BF16 the 2:4 kernels
# (space-separated `--format` values), ATTENTION=0 leaves attention out, BSR=0 the BSR kernels. Each phase has
# a time budget (seconds, BUDGET_<PHASE>) so that one device call always ends with its summary
# written. Raw JSON lines and the summary go under $OUT.
#
# Inputs (prepared by the caller, see bench/gpu/RESULTS.md): BIN (a release `sparsetir`), TESTS
# (directory of prebuilt test binaries, optional), DATA (directory of .mtx files).
source "$(dirname "$0")/setup.sh"
DATA=${DATA:-../shared/data}
PHASES=${PHASES:-tests,probe,csr,formats,extra}
echo "NVRTC: ${SPARSETIR_NVRTC:-search}" | tee "$OUT/env.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv | tee -a "$OUT/env.txt"
has() { [[ ,$PHASES, == *,$1,* ]]; }
# `within SECONDS CMD...`: CMD, stopped when its phase's budget is spent.
deadline=0
phase() { deadline=$((SECONDS + $1)); echo "== phase $2 (budget $1 s) at ${SECONDS} s" | tee -a "$OUT/phases.txt"; }
left() { local l=$((deadline - SECONDS)); ((l > 0)) && echo $l || echo 0; }
# (At most CAP seconds per command, 120 by default: a hung kernel costs that, not the phase.)
within() { local l; l=$(left); ((l > 0)) || { echo "skipped (budget): $*" >> "$OUT/phases.txt"; return 1; }; ((l > ${CAP:-120})) && l=${CAP:-120}; timeout "$l" "$@"; }
B() { within "$BIN" bench "$@" --device "${DEVICE:-cuda}" --repeat 50 --json; }

# The test binaries' real-GPU tests (the same differential cases as the emulator's).
if has tests && [[ -n ${TESTS:-} ]]; then
    phase "${BUDGET_TESTS:-90}" tests
    for t in "$TESTS"/*; do
        echo "== $t" | tee -a "$OUT/tests.txt"
        within "$t" real_gpu --test-threads=1 2>&1 | tail -25 | tee -a "$OUT/tests.txt"
    done
fi

# Which register layouts `mma.sp` takes on this GPU (the CUDA writer's 2:4 metadata is B1 E1).
if has probe; then
    phase "${BUDGET_PROBE:-60}" probe
    within nvcc -arch=sm_90 -o /tmp/probe_mma_sp bench/gpu/probe_mma_sp.cu 2>&1 | tee -a "$OUT/probe.txt"
    within /tmp/probe_mma_sp 2>&1 | tee -a "$OUT/probe.txt"
    # Hopper's warpgroup form (`wgmma.mma_async.sp`, sm_90a): the shared-memory descriptor and
    # register layouts the CUDA writer's `2:4(wgmma=...)` kernels assume (D1).
    within nvcc -gencode=arch=compute_90a,code=sm_90a -o /tmp/probe_wgmma_sp bench/gpu/probe_wgmma_sp.cu 2>&1 | tee -a "$OUT/probe.txt"
    within /tmp/probe_wgmma_sp 2>&1 | tee -a "$OUT/probe.txt"
fi

mats=()
for m in "$DATA"/*.mtx; do mats+=(--matrix "$m"); done
if has csr; then
    phase "${BUDGET_CSR:-200}" csr
    # The peers first, so that a phase cut short by its budget still has every ratio's
    # denominator; a second run at the end if time is left (summarize.py takes each case's
    # fastest: on small matrices cuSPARSE's time moves by up to 1.7x between runs).
    within python3 bench/gpu/peers.py "${mats[@]}" > "$OUT/cusparse.jsonl" 2>> "$OUT/errors.txt"
    for m in "$DATA"/*.mtx; do
        # SpMM choosing per matrix and width between CSR and hyb (degree buckets), by measurement.
        B spmm --matrix "$m" --feat 32,64,128,256,512 --format auto >> "$OUT/sparsetir_auto.jsonl" 2>> "$OUT/errors.txt"
        B spmm --matrix "$m" --feat 32,64,128,256,512 >> "$OUT/sparsetir.jsonl" 2>> "$OUT/errors.txt"
        B sddmm --matrix "$m" --feat 32,128 >> "$OUT/sparsetir.jsonl" 2>> "$OUT/errors.txt"
        B spmv --matrix "$m" >> "$OUT/sparsetir.jsonl" 2>> "$OUT/errors.txt"
    done
    within python3 bench/gpu/peers.py "${mats[@]}" > "$OUT/cusparse2.jsonl" 2>> "$OUT/errors.txt"
    within "$BIN" bench spmm --matrix "$DATA/cora.mtx" --feat 128 --device cuda --emit-cuda "$OUT/cuda" --json > /dev/null 2>&1
fi

if has formats; then
    phase "${BUDGET_FORMATS:-200}" formats
    g=$OUT/gen
    mkdir -p "$g"
    # The generated matrices (hundreds of MB) never stay under $OUT, even when a caller's
    # timeout stops this script: $OUT must come back whole.
    trap 'rm -f "$g"/*.mtx' EXIT
    if [[ ${BSR:-1} == 1 ]]; then
        "$BIN" gen block --rows 4096 --block 16 --density 0.1 -o "$g/block16_4096.mtx" > /dev/null
        "$BIN" gen block --rows 4096 --block 32 --density 0.1 -o "$g/block32_4096.mtx" > /dev/null
    fi
    [[ ${ATTENTION:-1} == 1 ]] && "$BIN" gen block --rows 4096 --block 64 --density 0.1 -o "$g/mask_block64_4096.mtx" > /dev/null
    "$BIN" gen mask24 --rows 4096 --cols 4096 -o "$g/mask24_4096.mtx" > /dev/null
    attn=()
    [[ ${ATTENTION:-1} == 1 ]] && attn=(--attention "$g/mask_block64_4096.mtx" --heads 8 --head-dim 64)
    # The peers first (every ratio needs them), then BSR, attention, and the 2:4 kernels last
    # (the warpgroup ones first): what the budget leaves out is the least needed.
    bsr=()
    [[ ${BSR:-1} == 1 ]] && bsr=(--bsr "$g/block16_4096.mtx:16" --bsr "$g/block32_4096.mtx:32")
    within python3 bench/gpu/peers.py "${bsr[@]}" "${attn[@]}" --gemm 4096 > "$OUT/peers_formats.jsonl" 2>> "$OUT/errors.txt"
    for dt in ${DTYPES:-float16 bfloat16}; do
        [[ ${BSR:-1} == 1 ]] || break
        B spmm --matrix "$g/block16_4096.mtx" --feat 64,128,256,512 --dtype $dt --format bsr:16 >> "$OUT/sparsetir_bsr.jsonl" 2>> "$OUT/errors.txt"
        B spmm --matrix "$g/block32_4096.mtx" --feat 64,128,256,512 --dtype $dt --format bsr:32 >> "$OUT/sparsetir_bsr.jsonl" 2>> "$OUT/errors.txt"
    done
    for dt in ${ATTENTION_DTYPES:-float32 float16}; do
        [[ ${ATTENTION:-1} == 1 ]] || break
        # csr: three CSR kernels per head; bsr:16: three BSR kernels for all heads at once, the
        # scores and the product on tensor cores for 16-bit operands, the softmax fused into
        # the product (the default there) and apart.
        for af in ${ATTENTION_FORMATS:-csr bsr:16}; do
            B attention --matrix "$g/mask_block64_4096.mtx" --heads 8 --feat 64 --dtype $dt --format $af >> "$OUT/attention.jsonl" 2>> "$OUT/errors.txt"
        done
        [[ $dt == float32 ]] || B attention --matrix "$g/mask_block64_4096.mtx" --heads 8 --feat 64 --dtype $dt --format bsr:16 --softmax separate >> "$OUT/attention.jsonl" 2>> "$OUT/errors.txt"
    done
    [[ ${ATTENTION:-1} == 1 ]] && within "$BIN" bench attention --matrix "$g/mask_block64_4096.mtx" --heads 8 --feat 64 --dtype float16 --format bsr:16 --device cuda --repeat 1 --emit-cuda "$OUT/cuda_attention" --json > /dev/null 2>&1
    # 2:4 SpMM on sparse tensor cores, 4096 x 4096 x 4096, against dense cuBLAS. First Hopper's
    # warpgroup form (`wgmma.mma_async.sp`, sm_90a; wgmma=R or wgdbuf=R: R/4 warpgroups per
    # block, each m64n256k32 per run; x1x2: two row tiles per warp, m64n128k32; ahead=A: A
    # slices copied ahead instead of one, session 17's profile being copy-latency-bound; a=smem:
    # A's values and positions copied into shared memory with the slices, past 48 KiB in dynamic
    # shared memory, session 19; inflight=1: each product kept in flight, session 20; tma=1:
    # B's slices by the tensor copy engine, session 21; cluster=C: each box multicast to a
    # cluster of C blocks of consecutive rows, a=tma: A's tiles by the copy engine too,
    # cluster=CxY: Y blocks of columns sharing A's boxes too, session 22; producer=1: a warp of
    # its own making every copy, up to 6 slices ahead, session 23; meta=packed: A's positions
    # packed for the tensor cores, session 26; persistent=1: as many blocks as run at once,
    # each walking tiles, session 27; vals=packed: A's values laid out run by run, rows of 128
    # bytes a box instead of 32; ss=1: the tensor cores read A from shared memory, a run's
    # products one group in flight; runs=2: two runs' products a group, 64 columns of A as
    # cuSPARSELt's tiles, session 45). The list starts with session 45's new forms, then
    # the fastest it measured; the forms slower than those were measured in sessions 21-45
    # (bench/gpu/RESULTS.md) and are left out. Then plain `2:4` (on Hopper, the fastest
    # measured form) and `mma.sp` per warp, one output tile per warp (the session-11 kernel);
    # bfloat16 (the same instructions) for the default and a few warpgroup kernels only.
    for dt in ${DTYPES:-float16 bfloat16}; do
        if [[ $dt == float16 ]]; then
            f24s=${FORMATS_24:-"2:4(wgdbuf=8,ahead=6,a=tma,meta=packed,vals=packed,ss=1,runs=2,inflight=1,tma=1,producer=1,persistent=1) 2:4(wgdbuf=8x1x2,ahead=6,a=tma,meta=packed,vals=packed,ss=1,runs=2,inflight=1,tma=1,producer=1,persistent=1) 2:4(wgdbuf=8,ahead=6,a=tma,meta=packed,vals=packed,ss=1,runs=2,inflight=1,tma=1,cluster=2,producer=1,persistent=1) 2:4(wgdbuf=8,ahead=6,a=tma,meta=packed,vals=packed,ss=1,runs=2,inflight=1,tma=1,producer=1) 2:4(wgdbuf=8,ahead=8,a=tma,meta=packed,vals=packed,ss=1,runs=2,inflight=1,tma=1,producer=1) 2:4(wgdbuf=8,ahead=8,a=tma,meta=packed,vals=packed,ss=1,runs=2,inflight=1,tma=1,cluster=2,producer=1) 2:4(wgdbuf=8x1x2,ahead=6,a=tma,meta=packed,vals=packed,ss=1,inflight=1,tma=1,producer=1,persistent=1) 2:4(wgdbuf=8,ahead=6,a=tma,meta=packed,vals=packed,ss=1,inflight=1,tma=1,cluster=2,producer=1,persistent=1) 2:4(wgdbuf=8x1x2,ahead=6,a=tma,meta=packed,vals=packed,ss=1,inflight=1,tma=1,cluster=2,producer=1,persistent=1) 2:4(wgdbuf=8,ahead=6,a=tma,meta=packed,vals=packed,ss=1,inflight=1,tma=1,producer=1,persistent=1) 2:4(wgdbuf=8x1x2,ahead=6,a=tma,meta=packed,vals=packed,ss=1,inflight=1,tma=1,producer=1) 2:4(wgdbuf=8x1x2,ahead=6,a=tma,meta=packed,vals=packed,inflight=1,tma=1,producer=1,persistent=1) 2:4(wgdbuf=8,ahead=6,a=tma,meta=packed,vals=packed,inflight=1,tma=1,cluster=2,producer=1,persistent=1) 2:4(wgdbuf=8,ahead=6,a=tma,meta=packed,vals=packed,inflight=1,tma=1,producer=1,persistent=1) 2:4(wgdbuf=8x1x2,ahead=6,a=tma,meta=packed,vals=packed,inflight=1,tma=1,cluster=2,producer=1,persistent=1) 2:4(wgdbuf=8x1x2,ahead=6,a=tma,meta=packed,vals=packed,inflight=1,tma=1,producer=1) 2:4(wgdbuf=8,ahead=6,a=tma,meta=packed,vals=packed,inflight=1,tma=1,cluster=4,producer=1,persistent=1) 2:4(wgdbuf=8x1x2,ahead=6,a=tma,meta=packed,inflight=1,tma=1,producer=1,persistent=1) 2:4(wgdbuf=8,ahead=6,a=tma,meta=packed,inflight=1,tma=1,cluster=2,producer=1,persistent=1) 2:4(wgdbuf=8x1x2,ahead=6,a=tma,meta=packed,inflight=1,tma=1,producer=1) 2:4(wgdbuf=8,ahead=6,a=tma,meta=packed,inflight=1,tma=1,cluster=2,producer=1) 2:4(wgdbuf=8,ahead=6,a=tma,meta=packed,inflight=1,tma=1,producer=1) 2:4(wgdbuf=8,ahead=6,a=tma,inflight=1,tma=1,producer=1) 2:4 2:4(tiles=1)"}
        else
            f24s=${FORMATS_24_BF16:-"2:4(wgdbuf=8,ahead=6,a=tma,meta=packed,vals=packed,ss=1,runs=2,inflight=1,tma=1,producer=1,persistent=1) 2:4(wgdbuf=8x1x2,ahead=6,a=tma,meta=packed,vals=packed,ss=1,inflight=1,tma=1,producer=1,persistent=1) 2:4(wgdbuf=8x1x2,ahead=6,a=tma,meta=packed,inflight=1,tma=1,producer=1,persistent=1) 2:4(wgdbuf=8,ahead=6,a=tma,meta=packed,inflight=1,tma=1,cluster=2,producer=1,persistent=1) 2:4(wgdbuf=8,ahead=6,a=tma,meta=packed,inflight=1,tma=1,cluster=2,producer=1) 2:4(wgdbuf=8,ahead=6,a=tma,meta=packed,inflight=1,tma=1,producer=1) 2:4(wgdbuf=8,ahead=6,a=tma,inflight=1,tma=1,cluster=2,producer=1) 2:4(wgdbuf=8,ahead=6,a=tma,inflight=1,tma=1,producer=1) 2:4 2:4(wgdbuf=8) 2:4(wgdbuf=8,ahead=3,a=smem) 2:4(wgdbuf=8,ahead=3,a=smem,inflight=1) 2:4(wgdbuf=8,ahead=3,a=smem,inflight=1,tma=1) 2:4(wgdbuf=8,ahead=3,a=tma,inflight=1,tma=1,cluster=2)"}
        fi
        for f24 in $f24s; do
            # (CAP_24 seconds a form, 20 by default: one takes about 6, so a form that hangs on
            # the GPU costs little of the phase.)
            CAP=${CAP_24:-20} B spmm --matrix "$g/mask24_4096.mtx" --feat 4096 --dtype $dt --format "$f24" >> "$OUT/sparsetir_24.jsonl" 2>> "$OUT/errors.txt" || echo "form ended with status $?: $f24" >> "$OUT/errors.txt"
        done
    done
    [[ ${BSR:-1} == 1 ]] && within "$BIN" bench spmm --matrix "$g/block16_4096.mtx" --feat 128 --dtype float16 --format bsr:16 --device cuda --emit-cuda "$OUT/cuda_bsr" --json > /dev/null 2>&1
    mkdir -p "$OUT/cuda_24"
    within "$BIN" bench spmm --matrix "$g/mask24_4096.mtx" --feat 4096 --dtype float16 --format 2:4 --device cuda --repeat 1 --warmup 0 --warmup-ms 0 --emit-cuda "$OUT/cuda_24" --json > /dev/null 2>&1
    mkdir -p "$OUT/cuda_24_wgmma"
    within "$BIN" bench spmm --matrix "$g/mask24_4096.mtx" --feat 4096 --dtype float16 --format '2:4(wgdbuf=8)' --device cuda --repeat 1 --warmup 0 --warmup-ms 0 --emit-cuda "$OUT/cuda_24_wgmma" --json > /dev/null 2>&1
    # Which tensor-core instructions the cached cubins hold (HGMMA: warpgroup; HMMA: per warp).
    # (Within the phase's budget, one disassembly a cubin: session 23's outer timeout stopped
    # the run here, before its summary, with some thirty cubins cached.)
    for c in "$SPARSETIR_CACHE_DIR"/*.cubin; do
        [[ -e $c ]] || continue
        (( $(left) > 0 )) || { echo "skipped (budget): the SASS of $(basename "$c")" >> "$OUT/phases.txt"; continue; }
        sass=$(timeout 10 cuobjdump -sass "$c" 2>/dev/null)
        echo "$(basename "$c") HGMMA=$(grep -c HGMMA <<< "$sass") HMMA=$(grep -c HMMA <<< "$sass")" >> "$OUT/sass.txt"
    done
    rm -f "$g"/*.mtx
fi

if has extra; then
    phase "${BUDGET_EXTRA:-90}" extra
    for m in "$DATA"/*.mtx; do
        case $m in *rmat*) continue ;; esac
        B spmv --matrix "$m" --format sell >> "$OUT/sparsetir_formats.jsonl" 2>> "$OUT/errors.txt"
        # float32 CSR beside the 16-bit cases, on the same machine.
        B spmm --matrix "$m" --feat 32,128 >> "$OUT/sparsetir_dtype.jsonl" 2>> "$OUT/errors.txt"
        for f in csr bsr:16 condense; do
            B spmm --matrix "$m" --feat 32,128 --dtype float16 --format $f >> "$OUT/sparsetir_dtype.jsonl" 2>> "$OUT/errors.txt"
        done
    done
fi

echo "== summary at ${SECONDS} s" | tee -a "$OUT/phases.txt"
python3 bench/gpu/summarize.py --out "$OUT" | tee "$OUT/summary.md"
