#!/usr/bin/env bash
# Prepares `.gpu/` (git-ignored) for a device call here, on the machine without a GPU: the
# release `sparsetir` and the runtime's test binaries named in TESTS (default: the 2:4 kernels'
# real-GPU tests; `suite` holds every other runtime test file), stripped and gzipped (a call carries at most 64 MiB), plus, with
# MATRICES=1, `../shared/data/*.mtx` and the two R-MAT graphs of `bench/run-all.sh` gzipped
# (the csr phase of run.sh), and (PYTHON_WHEEL=1, the default) the Python package's wheel and
# the Planetoid data for bench/gpu/python_gpu.sh. On the device, unpack first:
#
#   gunzip -f .gpu/sparsetir.gz .gpu/tests/*.gz; chmod +x .gpu/sparsetir .gpu/tests/*;
#   mkdir -p .gpu/data; for f in .gpu/*.mtx.gz; do gunzip -c $f > .gpu/data/$(basename $f .gz); done
#
# then `BIN=.gpu/sparsetir TESTS=.gpu/tests DATA=.gpu/data bash bench/gpu/run.sh` (see
# bench/gpu/RESULTS.md for the phases and budgets), with `carry: [".gpu"]`.
set -euo pipefail
cd "$(dirname "$0")/../.."
TESTS=${TESTS:-"cuda_warpgroup cuda_cluster cuda_tma cuda_mbar_order cuda_persistent cuda_packed_a"}
rm -rf .gpu/tests .gpu/sparsetir .gpu/sparsetir.gz
mkdir -p .gpu/tests
cargo build --release --locked -p sparsetir-cli
cp target/release/sparsetir .gpu/sparsetir
args=()
for t in $TESTS; do args+=(--test "$t"); done
# Cargo names each test executable on stderr: `Executable tests/NAME.rs (PATH)`, or
# `tests/NAME/main.rs` for a directory (`suite`: the runtime's other tests, real-GPU ones
# included, in one binary).
log=$(cargo test --release --locked -p sparsetir-runtime "${args[@]}" --no-run 2>&1)
i=0
for t in $TESTS; do
    i=$((i + 1))
    exe=$(sed -n "s|.*Executable tests/$t\(/main\)\{0,1\}.rs (\(.*\))|\2|p" <<< "$log" | head -1)
    [[ -n $exe ]] || { echo "prepare: no test executable for $t" >&2; exit 1; }
    cp "$exe" ".gpu/tests/${i}_$t"
done
strip .gpu/sparsetir .gpu/tests/*
gzip -f .gpu/sparsetir .gpu/tests/*
if [[ ${MATRICES:-0} == 1 ]]; then
    for m in ../shared/data/*.mtx; do gzip -c "$m" > ".gpu/$(basename "$m").gz"; done
    # (Generated as bench/run-all.sh does, kept in target/bench-data.)
    mkdir -p target/bench-data
    r1=target/bench-data/rmat_100k_s0.mtx r2=target/bench-data/rmat_169k_s1.mtx
    [[ -f $r1 ]] || bash ../shared/bench/run-peers.sh --gen-rmat 100000 2000000 0 "$r1"
    [[ -f $r2 ]] || bash ../shared/bench/run-peers.sh --gen-rmat 169343 1166243 1 "$r2"
    for f in "$r1" "$r2"; do gzip -c "$f" > ".gpu/$(basename "$f").gz"; done
fi
if [[ ${PYTHON_WHEEL:-1} == 1 ]]; then
    # The Python package (abi3: the device's Python 3.12 takes it) and the Planetoid data of
    # bench/gpu/python_gpu.sh.
    rm -rf .gpu/wheel .gpu/planetoid-*
    CARGO_TARGET_DIR=target MATURIN_PEP517_ARGS="--locked --profile release --strip" \
        python3 -m pip wheel --quiet --no-deps -w .gpu/wheel ./python
    for d in ../shared/data/planetoid-cora ../shared/data/planetoid-citeseer; do
        [[ -d $d ]] && cp -r "$d" .gpu/ && chmod -R u+w ".gpu/$(basename "$d")"
    done
fi
du -sh .gpu
