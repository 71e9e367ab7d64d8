# Sourced by bench/gpu's scripts: the binary (BIN), the output folder (OUT, created), the
# kernel cache, and NVRTC (the toolkit's, else a wheel's, unless SPARSETIR_NVRTC names one).
set -uo pipefail
BIN=${BIN:-target/release/sparsetir}
OUT=${OUT:-bench/gpu/out}
mkdir -p "$OUT"
export SPARSETIR_CACHE_DIR=${SPARSETIR_CACHE_DIR:-/tmp/sparsetir-cache}
if [[ -z ${SPARSETIR_NVRTC:-} ]]; then
    for c in /usr/local/cuda/lib64/libnvrtc.so* $(python3 -c 'import nvidia,os;print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null)/nvidia/cu13/lib/libnvrtc.so*; do
        [[ -e $c ]] && { export SPARSETIR_NVRTC=$c; break; }
    done
fi
