//! `sparsetir bench spmm|sddmm|spmv|attention|spgemm|spadd`: compiles the catalog kernel of an operator with its default
//! CPU schedule (feature width specialised), runs it on Matrix Market files with random dense
//! operands, times it (warm-up + repeats, median) and checks every measured output against an
//! independent reference written here (plain f64 loops over the CSR arrays).

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use sparsetir_codegen::CModule;
use sparsetir_eval::ArgValue;
use sparsetir_formats::{Tensor, TensorData};
use sparsetir_ir::{DType, PrimFunc};
use sparsetir_runtime::build::{kernel_params, schedule_and_lower};
use sparsetir_runtime::{CacheOutcome, CompileOptions, Kernel, TimingOptions};

use crate::Failure;
use sparsetir_ops::composable::Format;

mod attention;
mod device;
mod formats;
mod gpu_hyb;
pub mod sparse_output;

/// Largest relative error (max |out - ref| / max |ref|) a checked output may have.
pub const TOLERANCE: f64 = 1e-4;

/// C compiler flags the benchmark adds to the runtime's defaults: floating-point contraction
/// (`a * b + c` as one fused multiply-add). `-std=c11` turns it off in GCC; it changes no
/// summation order (unlike `-ffast-math`), and each fused operation rounds once instead of twice.
pub const BENCH_CFLAGS: &[&str] = &["-ffp-contract=fast"];

/// The element types `--dtype` takes: float32, or 16-bit storage of the operands (the sparse
/// values and the dense inputs) with float32 arithmetic and output.
pub fn parse_dtype(s: &str) -> Result<DType, Failure> {
    match s.trim() {
        "float32" => Ok(DType::F32),
        "float16" => Ok(DType::F16),
        "bfloat16" => Ok(DType::BF16),
        other => Err(Failure(format!(
            "error: --dtype {other}: expected float32, float16 or bfloat16"
        ))),
    }
}

/// `values` rounded to `dtype` (what the kernel reads from 16-bit storage).
pub fn rounded(values: &[f32], dtype: DType) -> Vec<f32> {
    if dtype == DType::F32 {
        return values.to_vec();
    }
    let mut t = Tensor::zeros(dtype, vec![values.len()]).expect("a float type");
    for (i, v) in values.iter().enumerate() {
        t.set_f64(i, *v as f64);
    }
    t.to_f64_vec().into_iter().map(|v| v as f32).collect()
}

/// `args` with the operator's input arrays (see [`Op::inputs`]) stored as `dtype`.
pub fn store_inputs(op: Op, args: &mut HashMap<String, ArgValue>, dtype: DType) {
    if dtype == DType::F32 {
        return;
    }
    for name in op.input_params() {
        if let Some(ArgValue::Array(t)) = args.get_mut(*name) {
            let mut out = Tensor::zeros(dtype, t.shape.clone()).expect("a float type");
            for i in 0..t.len() {
                out.set_f64(i, t.get_f64(i));
            }
            *t = out;
        }
    }
}

/// A benchmarked operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `C[m, K] = A (CSR) * B[n, K]`.
    Spmm,
    /// `Y[i, j] = X[i, j] * sum_k A[i, k] * B[j, k]` at the stored `(i, j)` of X.
    Sddmm,
    /// `y[m] = A (CSR) * x[n]`.
    Spmv,
}

impl Op {
    /// The buffers `--dtype` stores in 16 bits: the sparse values and the dense inputs.
    pub fn inputs(self) -> &'static [&'static str] {
        match self {
            Op::Spmm => &["A", "B"],
            Op::Sddmm => &["A", "B", "X"],
            Op::Spmv => &["A", "X"],
        }
    }

    /// The kernel parameters of [`Op::inputs`].
    pub fn input_params(self) -> &'static [&'static str] {
        match self {
            Op::Spmm => &["a", "b"],
            Op::Sddmm => &["a", "b", "x"],
            Op::Spmv => &["a", "x"],
        }
    }

    /// The operator named on the command line.
    pub fn parse(s: &str) -> Result<Op, Failure> {
        match s {
            "spmm" => Ok(Op::Spmm),
            "sddmm" => Ok(Op::Sddmm),
            "spmv" => Ok(Op::Spmv),
            other => Err(Failure(format!(
                "error: unknown operator `{other}` (expected spmm, sddmm, spmv, attention, spgemm or spadd)"
            ))),
        }
    }

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Op::Spmm => "spmm",
            Op::Sddmm => "sddmm",
            Op::Spmv => "spmv",
        }
    }

    /// The catalog kernel computing it.
    pub fn kernel(self) -> &'static str {
        match self {
            Op::Spmm => "csrmm",
            Op::Sddmm => "sddmm",
            Op::Spmv => "spmv",
        }
    }

    /// Floating-point operations of one launch.
    pub fn flops(self, nnz: usize, feat: usize) -> f64 {
        match self {
            Op::Spmv => 2.0 * nnz as f64,
            _ => 2.0 * nnz as f64 * feat as f64,
        }
    }
}

/// A matrix in CSR form (sorted column indices, no duplicates) with float32 values.
#[derive(Clone, Debug, PartialEq)]
pub struct Csr {
    pub rows: usize,
    pub cols: usize,
    pub indptr: Vec<i32>,
    pub indices: Vec<i32>,
    pub values: Vec<f32>,
}

impl Csr {
    pub fn nnz(&self) -> usize {
        self.indices.len()
    }
}

/// splitmix64: deterministic values that depend only on the seed.
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn unit_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// `n` values uniform in `[lo, lo + 1)`.
pub fn random_values(seed: u64, n: usize, lo: f32) -> Vec<f32> {
    let mut rng = SplitMix(seed);
    (0..n).map(|_| lo + rng.unit_f32()).collect()
}

/// Loads a 2-D `.mtx` file as CSR: symmetric files expanded, duplicates summed, columns sorted;
/// the file's values are replaced by deterministic random values in [0.5, 1.5) (as the peers'
/// script does), so pattern matrices get non-trivial values.
pub fn load_csr(path: &Path) -> Result<Csr, Failure> {
    let coo = sparsetir_formats::read_mtx(path)
        .map_err(|e| Failure(format!("error: cannot load {}: {e}", path.display())))?;
    if coo.rank() != 2 {
        return Err(Failure(format!(
            "error: {}: expected a matrix, found {} dimensions",
            path.display(),
            coo.rank()
        )));
    }
    let (rows, cols) = (coo.dims[0], coo.dims[1]);
    // Duplicates summed, indices sorted; the int32 index type rejects what does not fit.
    let csr =
        sparsetir_formats::Csr::<f32, i32>::from_coo(&coo, sparsetir_formats::Duplicates::Sum)
            .map_err(|e| Failure(format!("error: {}: {e}", path.display())))?;
    let (indptr, indices, _) = csr.into_parts();
    let values = random_values(1, indices.len(), 0.5);
    Ok(Csr {
        rows,
        cols,
        indptr,
        indices,
        values,
    })
}

/// The operator's result computed in f64 with plain loops over the CSR arrays: SpMM and SpMV
/// give the dense `rows x feat` (`rows`) output, SDDMM one value per stored element.
pub fn reference(op: Op, a: &Csr, feat: usize, dense_a: &[f32], dense_b: &[f32]) -> Vec<f64> {
    let row = |i: usize| a.indptr[i] as usize..a.indptr[i + 1] as usize;
    match op {
        Op::Spmm => {
            let mut out = vec![0.0f64; a.rows * feat];
            // Rows in chunks over the machine's threads: large cases (4096^3 2:4, R-MAT at
            // width 512) are tens of GFLOP in f64.
            let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
            let chunk_rows = a.rows.div_ceil(threads).max(1);
            std::thread::scope(|scope| {
                for (c, chunk) in out.chunks_mut((chunk_rows * feat).max(1)).enumerate() {
                    scope.spawn(move || {
                        for (r, acc) in chunk.chunks_mut(feat.max(1)).enumerate() {
                            let i = c * chunk_rows + r;
                            for p in row(i) {
                                let v = a.values[p] as f64;
                                let j = a.indices[p] as usize;
                                for (k, o) in acc.iter_mut().enumerate() {
                                    *o += v * dense_b[j * feat + k] as f64;
                                }
                            }
                        }
                    });
                }
            });
            out
        }
        Op::Spmv => (0..a.rows)
            .map(|i| {
                row(i)
                    .map(|p| a.values[p] as f64 * dense_b[a.indices[p] as usize] as f64)
                    .sum()
            })
            .collect(),
        Op::Sddmm => {
            let mut out = vec![0.0f64; a.nnz()];
            for i in 0..a.rows {
                for p in row(i) {
                    let j = a.indices[p] as usize;
                    let dot: f64 = (0..feat)
                        .map(|k| dense_a[i * feat + k] as f64 * dense_b[j * feat + k] as f64)
                        .sum();
                    out[p] = a.values[p] as f64 * dot;
                }
            }
            out
        }
    }
}

/// [`reference()`] of the operands as a kernel with `dtype` storage reads them (rounded to it).
pub fn reference_as_read(
    op: Op,
    a: &Csr,
    feat: usize,
    dense_a: &[f32],
    dense_b: &[f32],
    dtype: DType,
) -> Vec<f64> {
    if dtype == DType::F32 {
        return reference(op, a, feat, dense_a, dense_b);
    }
    let a_read = Csr {
        values: rounded(&a.values, dtype),
        ..a.clone()
    };
    let (ra, rb) = (rounded(dense_a, dtype), rounded(dense_b, dtype));
    reference(op, &a_read, feat, &ra, &rb)
}

/// max |got - want| / max |want| (0 when both are empty; infinite on a length mismatch).
pub fn relative_error(got: &[f64], want: &[f64]) -> f64 {
    if got.len() != want.len() {
        return f64::INFINITY;
    }
    let scale = want.iter().fold(0.0f64, |m, w| m.max(w.abs()));
    let mut diff = 0.0f64;
    for (g, w) in got.iter().zip(want) {
        let d = (g - w).abs();
        // `f64::max` ignores NaN: a NaN output must fail the check.
        if d.is_nan() {
            return f64::INFINITY;
        }
        diff = diff.max(d);
    }
    diff / (scale + 1e-30)
}

/// The default CPU schedule of `op` for matrix `a` at width `feat`: the catalog's, with
/// SDDMM's gather prefetches tuned to the matrix ([`sddmm_prefetch`]).
pub fn default_schedule(op: Op, a: &Csr, feat: usize) -> Option<String> {
    let base = sparsetir_ops::cpu_schedule(op.kernel())?;
    Some(match op {
        Op::Sddmm => sddmm_prefetch(base, a, feat),
        _ => base.to_string(),
    })
}

/// An SDDMM schedule (CSR or COO) without its gather prefetches where the gathered operand
/// (`cols × feat` floats) fits in the L2 cache ([`sparsetir_ops::composable::gather_prefetch`]).
pub fn sddmm_prefetch(schedule: &str, a: &Csr, feat: usize) -> String {
    sparsetir_ops::composable::gather_prefetch(
        schedule,
        a.cols.saturating_mul(feat).saturating_mul(4),
        sparsetir_runtime::machine::l2_cache_bytes(),
    )
}

/// The catalog kernel of `op` (stage I) and the specialization of its sizes for width `feat`.
pub fn kernel_for(
    op: Op,
    feat: usize,
    dtype: DType,
) -> Result<(PrimFunc, Vec<(String, i64)>), Failure> {
    let f = sparsetir_ops::load(op.kernel())?;
    // 16-bit storage of the operands, float32 arithmetic and output (`store_as`).
    let f = sparsetir_transform::store_as(&f, op.inputs(), dtype)
        .map_err(|e| Failure(format!("error: --dtype {dtype}: {e}")))?;
    let spec = match op {
        Op::Spmv => Vec::new(),
        Op::Spmm | Op::Sddmm => vec![("feat_size".to_string(), feat as i64)],
    };
    Ok((f, spec))
}

/// The C module of `op` at width `feat` under `schedule` (schedule-file text).
pub fn scheduled_c(
    op: Op,
    feat: usize,
    schedule: Option<&str>,
    dtype: DType,
) -> Result<CModule, Failure> {
    let (f, spec) = kernel_for(op, feat, dtype)?;
    Ok(sparsetir_runtime::build::emit(&f, schedule, &spec)?)
}

/// Specializes, schedules and lowers, then emits C: the specialized stage-I function (launches
/// are validated against it) and the C module.
fn front_end(
    op: Op,
    feat: usize,
    schedule: Option<&str>,
    dtype: DType,
) -> Result<(PrimFunc, CModule), Failure> {
    let (f, spec) = kernel_for(op, feat, dtype)?;
    let lowered = schedule_and_lower(&f, schedule, &spec)?;
    let c = sparsetir_runtime::build::emit_c_cpu(&lowered.stage3)?;
    Ok((lowered.stage1, c))
}

/// A compiled kernel and what building it cost.
pub struct Built {
    pub kernel: Kernel,
    /// Schedule, lowering and C emission.
    pub frontend: Duration,
    /// A cold build: front end + C compiler + load, into an empty cache.
    pub compile_cold: Duration,
    /// Loading the same kernel through the user's cache (after the cold build put it there).
    pub load: Duration,
    pub outcome: CacheOutcome,
}

/// Builds the kernel of `op` at width `feat` with `schedule`: once cold (a fresh temporary cache,
/// to measure the compile), then through the user's cache (the kernel that is timed).
pub fn build(
    op: Op,
    feat: usize,
    schedule: Option<&str>,
    opts: &CompileOptions,
    dtype: DType,
) -> Result<Built, Failure> {
    // Cold: everything from the stage-I function, into an empty cache directory.
    let cold_dir = std::env::temp_dir().join(format!(
        "sparsetir-bench-cold-{}-{}",
        std::process::id(),
        COLD_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let start = Instant::now();
    let (stage1, c) = front_end(op, feat, schedule, dtype)?;
    let cold_opts = CompileOptions {
        cache_dir: Some(cold_dir.clone()),
        ..opts.clone()
    };
    let cold = Kernel::from_source(&stage1, &c.source, &c.entry, kernel_params(&c), &cold_opts);
    let compile_cold = start.elapsed();
    let _ = std::fs::remove_dir_all(&cold_dir);
    cold?;
    // Cached: front end again, then the user's cache.
    let start = Instant::now();
    let (stage1, c) = front_end(op, feat, schedule, dtype)?;
    let frontend = start.elapsed();
    let kernel = Kernel::from_source(&stage1, &c.source, &c.entry, kernel_params(&c), opts)?;
    let load = kernel.report().total_time;
    let outcome = kernel.report().outcome;
    Ok(Built {
        kernel,
        frontend,
        compile_cold,
        load,
        outcome,
    })
}

static COLD_COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Command-line options of `sparsetir bench` (its help text: `sparsetir bench --help`).
#[derive(clap::Args, Debug)]
pub struct Options {
    /// The operator: spmm, sddmm, spmv, attention (masked attention: SDDMM, sparse
    /// softmax and SpMM on the mask `--matrix`, per head), spgemm (C = A·A, or A·Aᵀ when A
    /// is not square; sparse output assembled by the kernel) or spadd (C = A + Aᵀ). For
    /// spgemm and spadd the last column (JSON: `assembly`) says how the output was
    /// assembled: the staged workspace the runs took (`staged`: bitmap; `staged_dense`,
    /// `staged_groups`: byte marks) or `two_phase` (symbolic, then numeric).
    pub op: String,
    /// A `.mtx` file (repeatable; `--mask` names the same for `bench attention`).
    #[arg(long = "matrix", visible_alias = "mask", value_name = "FILE.mtx")]
    pub matrices: Vec<PathBuf>,
    /// Feature widths, comma-separated (ignored by spmv).
    #[arg(long, default_value = "32,128")]
    pub feat: String,
    /// Storage format of the sparse operand: `csr`; for spmm also `hyb`,
    /// `hyb(parts=P,buckets=W1,W2,...)`, `bsr:B`, `ell`, `ell(width=W)`, `condense`, `2:4`
    /// (2:4 structured sparsity; on a GPU with 16-bit operands sparse tensor cores, on one
    /// of compute capability 9.0 the fastest form measured there,
    /// `2:4(wgdbuf=8x1x2,ahead=6,a=tma,meta=packed,inflight=1,tma=1,producer=1,persistent=1)`
    /// (without `persistent=1` where A's columns, padded to 32, are not a multiple of 256),
    /// elsewhere one `mma.sp`
    /// kernel per warp; `2:4(tiles=U)`: that kernel with U output tiles of 8 columns per warp, `2:4(smem=R)`, `2:4(smem=RxZ)`,
    /// `2:4(smem=RxZxH)`: R x Z warps per block (over rows x columns), H row tiles of 16 per
    /// warp, sharing B's slices through shared memory, `2:4(dbuf=...)`: the same with two
    /// slices, the next copied during the current products (`2:4(dbuf=...,ahead=A)`: A + 1
    /// slices, the one A runs ahead copied, A up to 3), `2:4(wgmma=...)`,
    /// `2:4(wgdbuf=...)`: the same with each 4 row warps (R 4 or 8) issuing their products
    /// as one Hopper warpgroup instruction, `wgmma.mma_async.sp`, sm_90a GPUs only;
    /// `2:4(dbuf=...,a=smem)`, `2:4(wgdbuf=...,a=smem)`: A's values and positions copied
    /// into shared memory with the slices, A runs ahead, instead of read from global
    /// memory; `2:4(wgdbuf=...,inflight=1)`: each warpgroup product kept in flight while
    /// the next run's slice is awaited, one more slice; `2:4(wgdbuf=...,tma=1)`: B's
    /// slices copied by the tensor copy engine, one thread issuing 128-byte-swizzled
    /// boxes that complete on an mbarrier a slice; `2:4(wgdbuf=...,tma=1,cluster=C)`: the
    /// same in clusters of C blocks (2 or 4) of consecutive rows, each copying 1/C of a
    /// slice's boxes to all of them, multicast; `2:4(wgdbuf=...,a=tma,tma=1)`: A's values
    /// and positions staged by the copy engine too, one box of each a slice;
    /// `meta=packed` (after `a=tma`): the positions packed for the tensor cores, one
    /// 32-bit word of 2-bit positions per row and slice, derived by the runtime before the
    /// launches (a quarter of the bytes); `vals=packed` (after `a=tma`): the values laid
    /// out run by run, derived likewise, so that a slice's box of A has rows of 128 bytes
    /// instead of 32; `ss=1` (after `a=tma`): the tensor cores read A from shared memory
    /// through a descriptor instead of registers, a slice's products kept in flight as one
    /// group (with H > 1, goes with `vals=packed`); `runs=2` (after `ss=1`, with a producer
    /// warp): two slices' products one group, 64 columns of A; `cluster=CxY`: clusters also
    /// of Y blocks of
    /// columns sharing A's boxes (with `a=tma`);
    /// `release=1`: each warp releases the slices it used on an mbarrier instead of the
    /// block's barrier each run; `producer=1`: the same, with a warp of its own making
    /// every copy, A up to 8; `persistent=1` (after `producer=1`): as many blocks as the
    /// GPU runs at once, each walking tiles in turn, its producer warp copying the next
    /// tile's first slices while the other warps store the last tile's products; the
    /// slices in flight, A + 2 with `inflight=1`, must divide the runs of 32 columns); for
    /// sddmm `coo`; for attention
    /// `bsr:B` (a mask of whole B x B blocks: BSR kernels for all heads at once, on tensor
    /// cores for 16-bit operands on a GPU; see `--softmax`); `auto` measures the
    /// operator's candidates (for spmv: CSR under its four schedules) and runs the fastest
    /// (the conversion is timed separately, `convert_seconds`).
    #[arg(long, default_value = "csr")]
    pub format: String,
    /// OpenMP threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Untimed launches before the timed ones.
    #[arg(long, default_value_t = 2)]
    pub warmup: usize,
    /// Keep warming up (untimed) until this many milliseconds have passed as well.
    #[arg(long, default_value_t = 200)]
    pub warmup_ms: u64,
    /// Timed launches (the median is reported).
    #[arg(long, default_value_t = 10)]
    pub repeat: usize,
    /// One JSON object per case on stdout instead of a table.
    #[arg(long)]
    pub json: bool,
    /// A schedule file (stage II) replacing the default schedule.
    #[arg(long)]
    pub schedule: Option<PathBuf>,
    /// Print the generated C source and exit (`bench attention`: its three kernels, for the
    /// mask, format and widths given).
    #[arg(long)]
    pub print_c: bool,
    /// An extra C compiler flag (repeatable), e.g. `--cflag=-mprefer-vector-width=512`.
    #[arg(long = "cflag", value_name = "FLAG", allow_hyphen_values = true)]
    pub cflags: Vec<String>,
    /// Where the kernel runs: `cpu` (the C backend), `cuda` (an NVIDIA GPU through NVRTC
    /// and the driver; device time by CUDA events) or `cuda-emu` (the generated CUDA in the
    /// CPU emulator: correctness and global-memory traffic, not speed).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// `--device cuda|cuda-emu`: write the CUDA source of every kernel run into this
    /// directory.
    #[arg(long = "emit-cuda")]
    pub emit_cuda: Option<PathBuf>,
    /// How the operands (sparse values, dense inputs) are stored: `float32`, `float16` or
    /// `bfloat16`; arithmetic and output stay float32. The 16-bit types take one format, not
    /// `auto`: on the CPU csr, or a format with a kernel of its own (`bsr:B`, `condense`,
    /// `ell(width=W)` without remainder, `sell`, `2:4`); on a GPU csr, `bsr:B`, `condense`
    /// and `2:4`.
    #[arg(long, default_value = "float32")]
    pub dtype: String,
    /// `bench attention`: attention heads (Q, K, V of `heads x n x feat`).
    #[arg(long, default_value_t = 1)]
    pub heads: usize,
    /// `bench attention`: the mask is given at block level, each stored entry standing for
    /// a `B x B` block of tokens (1: the mask is the token-level pattern).
    #[arg(long, default_value_t = 1)]
    pub block: usize,
    /// `bench attention --format bsr:B`: `fused` makes the probabilities inside the
    /// product (a kernel computes each row's `scale max + log sum`, the product
    /// `exp(scale S - L)` per stored score: the probabilities are never stored);
    /// `separate` writes them with a softmax kernel first; `auto`: fused where the product
    /// runs on tensor cores (16-bit operands on a GPU), separate elsewhere (on a CPU the
    /// product would compute each exponential once per feature).
    #[arg(long, default_value = "auto")]
    pub softmax: String,
}

/// One measured case.
pub struct CaseResult {
    pub op: Op,
    pub matrix: String,
    pub rows: usize,
    pub cols: usize,
    pub nnz: usize,
    pub feat: usize,
    pub format: String,
    pub threads: usize,
    pub seconds: f64,
    pub gflops: f64,
    pub check: bool,
    pub relerr: f64,
    pub compile_seconds: f64,
    pub frontend_seconds: f64,
    pub load_seconds: f64,
    pub cache: CacheOutcome,
    /// The `--format` asked for (`format` names what ran).
    pub requested: String,
    /// Converting the CSR matrix to the format that ran (not timed with the kernel).
    pub convert_seconds: f64,
    /// `--format auto`: the candidates measured while choosing, `(format, median seconds)`.
    pub candidates: Vec<(String, f64)>,
    /// How the operands were stored (`--dtype`).
    pub dtype: DType,
}

impl CaseResult {
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "op": self.op.name(),
            "matrix": self.matrix,
            "rows": self.rows,
            "cols": self.cols,
            "nnz": self.nnz,
            "feat": self.feat,
            "format": self.format,
            "threads": self.threads,
            "seconds": self.seconds,
            "gflops": self.gflops,
            "check": self.check,
            "relerr": self.relerr,
            "compile_seconds": self.compile_seconds,
            "frontend_seconds": self.frontend_seconds,
            "load_seconds": self.load_seconds,
            "requested_format": self.requested,
            "convert_seconds": self.convert_seconds,
            "dtype": self.dtype.to_string(),
            "candidates": self
                .candidates
                .iter()
                .map(|(f, t)| json!({"format": f, "seconds": t}))
                .collect::<Vec<_>>(),
            "cache": match self.cache {
                CacheOutcome::Hit => "hit",
                CacheOutcome::Miss => "miss",
                CacheOutcome::Rebuilt => "rebuilt",
            },
        })
    }
}

/// The feature widths to measure (SpMV: one).
fn feats_of(op: Op, o: &Options) -> Result<Vec<usize>, Failure> {
    if op == Op::Spmv {
        Ok(vec![1])
    } else {
        parse_feats(&o.feat)
    }
}

/// The text of the `--schedule` file, else `default`.
fn schedule_of(o: &Options, default: Option<&str>) -> Result<Option<String>, Failure> {
    match &o.schedule {
        Some(p) => std::fs::read_to_string(p)
            .map(Some)
            .map_err(|e| Failure(format!("error: cannot read schedule {}: {e}", p.display()))),
        None => Ok(default.map(str::to_string)),
    }
}

fn parse_feats(s: &str) -> Result<Vec<usize>, Failure> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.parse::<usize>() {
            Ok(k) if (1..=1 << 20).contains(&k) => out.push(k),
            _ => {
                return Err(Failure(format!(
                    "error: --feat expects positive integers separated by commas, got `{part}`"
                )))
            }
        }
    }
    if out.is_empty() {
        return Err(Failure("error: --feat names no feature width".into()));
    }
    Ok(out)
}

/// Arrays at least this large are backed by transparent huge pages where the system allows it.
const HUGE_PAGE_MIN_BYTES: usize = 4 << 20;

/// A vector of `n` elements `fill(0..n)`. Large vectors ask the kernel for transparent huge pages
/// (`madvise(MADV_HUGEPAGE)`) before their pages are first touched, as numpy does for large arrays:
/// random gathers from a dense operand otherwise spend their time in TLB misses, and the peers
/// (numpy/PyTorch arrays) get huge pages.
pub fn huge_vec<T: Copy>(n: usize, mut fill: impl FnMut(usize) -> T) -> Vec<T> {
    let mut v: Vec<T> = Vec::with_capacity(n);
    let bytes = n.saturating_mul(std::mem::size_of::<T>());
    if bytes >= HUGE_PAGE_MIN_BYTES {
        advise_huge_pages(v.as_mut_ptr() as usize, bytes);
    }
    v.extend((0..n).map(&mut fill));
    v
}

#[cfg(target_os = "linux")]
fn advise_huge_pages(addr: usize, bytes: usize) {
    const PAGE: usize = 4096;
    let start = addr.div_ceil(PAGE) * PAGE;
    let end = (addr + bytes) / PAGE * PAGE;
    if end > start {
        // SAFETY: the range lies inside the vector's allocation; MADV_HUGEPAGE only changes how
        // the kernel backs the pages, never their contents, and failure is harmless (ignored).
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages(_addr: usize, _bytes: usize) {}

fn f32_tensor(shape: Vec<usize>, data: &[f32]) -> ArgValue {
    ArgValue::Array(Tensor {
        shape,
        data: TensorData::F32(huge_vec(data.len(), |i| data[i])),
    })
}

fn f32_zeros(shape: Vec<usize>) -> ArgValue {
    let n = shape.iter().product();
    ArgValue::Array(Tensor {
        shape,
        data: TensorData::F32(huge_vec(n, |_| 0.0)),
    })
}

fn i32_tensor(data: &[i32]) -> ArgValue {
    ArgValue::Array(Tensor {
        shape: vec![data.len()],
        data: TensorData::I32(huge_vec(data.len(), |i| data[i])),
    })
}

/// The kernel's arguments for `a` and the dense operands (outputs zeroed).
pub(crate) fn arguments(
    op: Op,
    a: &Csr,
    feat: usize,
    dense_a: &[f32],
    dense_b: &[f32],
) -> HashMap<String, ArgValue> {
    let mut args = HashMap::new();
    let nnz = a.nnz();
    args.insert("indptr".into(), i32_tensor(&a.indptr));
    args.insert("indices".into(), i32_tensor(&a.indices));
    args.insert("m".into(), ArgValue::Int(a.rows as i64));
    args.insert("n".into(), ArgValue::Int(a.cols as i64));
    args.insert("nnz".into(), ArgValue::Int(nnz as i64));
    match op {
        Op::Spmm => {
            args.insert("feat_size".into(), ArgValue::Int(feat as i64));
            args.insert("a".into(), f32_tensor(vec![nnz], &a.values));
            args.insert("b".into(), f32_tensor(vec![a.cols, feat], dense_b));
            args.insert("c".into(), f32_zeros(vec![a.rows, feat]));
        }
        Op::Sddmm => {
            args.insert("feat_size".into(), ArgValue::Int(feat as i64));
            args.insert("a".into(), f32_tensor(vec![a.rows, feat], dense_a));
            args.insert("b".into(), f32_tensor(vec![a.cols, feat], dense_b));
            args.insert("x".into(), f32_tensor(vec![nnz], &a.values));
            args.insert("y".into(), f32_zeros(vec![nnz]));
        }
        Op::Spmv => {
            args.insert("a".into(), f32_tensor(vec![nnz], &a.values));
            args.insert("x".into(), f32_tensor(vec![a.cols], dense_b));
            args.insert("y".into(), f32_zeros(vec![a.rows]));
        }
    }
    args
}

/// The dense operand's buffer name of `op`'s kernels (SDDMM: the second one).
fn dense_name(op: Op) -> &'static str {
    match op {
        Op::Spmm | Op::Sddmm => "b",
        Op::Spmv => "x",
    }
}

fn output_name(op: Op) -> &'static str {
    match op {
        Op::Spmm => "c",
        Op::Sddmm | Op::Spmv => "y",
    }
}

fn output_values(op: Op, args: &HashMap<String, ArgValue>) -> Vec<f64> {
    match args.get(output_name(op)) {
        Some(ArgValue::Array(t)) => t.to_f64_vec(),
        _ => Vec::new(),
    }
}

/// Measures one (matrix, feature width) case with an already built kernel.
#[allow(clippy::too_many_arguments)]
fn measure(
    op: Op,
    built: &Built,
    a: &Csr,
    matrix: &str,
    feat: usize,
    format: &str,
    threads: usize,
    timing: TimingOptions,
    dtype: DType,
) -> Result<CaseResult, Failure> {
    let dense_a = random_values(2, a.rows * feat, 0.0);
    let dense_b_len = if op == Op::Spmv {
        a.cols
    } else {
        a.cols * feat
    };
    let dense_b = random_values(3, dense_b_len, 0.0);
    let mut args = arguments(op, a, feat, &dense_a, &dense_b);
    store_inputs(op, &mut args, dtype);
    let t = built.kernel.time(&mut args, timing)?;
    let want = reference_as_read(op, a, feat, &dense_a, &dense_b, dtype);
    let relerr = relative_error(&output_values(op, &args), &want);
    let feat_out = if op == Op::Spmv { 1 } else { feat };
    let seconds = t.median;
    Ok(CaseResult {
        op,
        matrix: matrix.to_string(),
        rows: a.rows,
        cols: a.cols,
        nnz: a.nnz(),
        feat: feat_out,
        format: format.to_string(),
        threads,
        seconds,
        gflops: if seconds > 0.0 {
            op.flops(a.nnz(), feat_out) / seconds / 1e9
        } else {
            0.0
        },
        check: relerr <= TOLERANCE,
        relerr,
        compile_seconds: built.compile_cold.as_secs_f64(),
        frontend_seconds: built.frontend.as_secs_f64(),
        load_seconds: built.load.as_secs_f64(),
        cache: built.outcome,
        requested: format.to_string(),
        convert_seconds: 0.0,
        candidates: Vec::new(),
        dtype,
    })
}

fn stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// The CPU threads (`--threads`, default all cores), the compile options (`BENCH_CFLAGS` and
/// `--cflag`s) and the timing (`--warmup`, `--warmup-ms`, `--repeat`) of a bench run.
fn cpu_setup(o: &Options) -> (usize, CompileOptions, TimingOptions) {
    let threads = o.threads.filter(|&t| t > 0).unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let mut flags: Vec<String> = BENCH_CFLAGS.iter().map(|s| s.to_string()).collect();
    flags.extend(o.cflags.iter().cloned());
    let opts = CompileOptions {
        threads: Some(threads),
        flags,
        ..CompileOptions::default()
    };
    let timing = TimingOptions {
        warmup: o.warmup,
        repeats: o.repeat.max(1),
        warmup_time: Duration::from_millis(o.warmup_ms),
    };
    (threads, opts, timing)
}

/// Runs `sparsetir bench`.
pub fn run(o: &Options) -> Result<(), Failure> {
    if o.op.trim() == "attention" {
        return attention::run(o);
    }
    if let Some(sop) = sparse_output::SparseOp::parse(o.op.trim()) {
        return sparse_output::run(sop, o);
    }
    let op = Op::parse(&o.op)?;
    let dtype = parse_dtype(&o.dtype)?;
    match o.device.as_str() {
        "cpu" => {}
        "cuda" | "cuda-emu" => return device::run(op, o),
        other => {
            return Err(Failure(format!(
                "error: --device {other}: expected cpu, cuda or cuda-emu"
            )))
        }
    }
    if o.emit_cuda.is_some() {
        return Err(Failure(
            "error: --emit-cuda needs --device cuda or cuda-emu".into(),
        ));
    }
    let format = Format::parse(&o.format).map_err(|e| Failure(format!("error: {e}")))?;
    if dtype != DType::F32 && matches!(format, Format::Auto) {
        return Err(Failure(format!(
            "error: --dtype {dtype} takes one format, not `auto`"
        )));
    }
    // SpMV: CSR or SELL; its `auto` measures CSR under four schedules (`SPMV_AUTO_CANDIDATES`)
    // and SELL, and runs the fastest.
    match (&format, op) {
        (Format::Csr, _) => {}
        (
            Format::Hyb { .. }
            | Format::Bsr(_)
            | Format::Ell(_)
            | Format::Condense
            | Format::TwoFour { .. }
            | Format::Auto,
            Op::Spmm,
        )
        | (Format::Coo | Format::Auto, Op::Sddmm)
        | (Format::Sell { .. } | Format::Auto, Op::Spmv) => {
            if o.schedule.is_some() || o.print_c {
                return Err(Failure(format!(
                    "error: --schedule and --print-c take the csr format (got `{format}`)"
                )));
            }
        }
        _ => {
            return Err(Failure(format!(
                "error: format `{format}` is not available for {} ({} takes {})",
                op.name(),
                op.name(),
                match op {
                    Op::Spmm =>
                        "csr, hyb, bsr:B, ell, condense, 2:4, 2:4(tiles=U), 2:4(smem=RxZ), 2:4(dbuf=RxZ[,ahead=A][,a=smem]), 2:4(wgmma=RxZ), 2:4(wgdbuf=RxZ[,ahead=A][,a=smem|tma][,inflight=1][,tma=1[,cluster=C|CxY][,release=1|producer=1[,persistent=1]]]) or auto",
                    Op::Sddmm => "csr, coo or auto",
                    Op::Spmv => "csr, sell, sell(sigma=S) or auto",
                }
            )))
        }
    }
    let feats = feats_of(op, o)?;
    if o.matrices.is_empty() && !o.print_c {
        return Err(Failure("error: give at least one --matrix FILE.mtx".into()));
    }
    let schedule_text = schedule_of(o, sparsetir_ops::cpu_schedule(op.kernel()))?;
    if o.print_c {
        for &k in &feats {
            print!(
                "{}",
                scheduled_c(op, k, schedule_text.as_deref(), dtype)?.source
            );
        }
        return Ok(());
    }
    let (threads, compile_opts, timing) = cpu_setup(o);
    // Load every matrix first: a bad path fails before any compile.
    let mut matrices = Vec::new();
    for p in &o.matrices {
        matrices.push((stem(p), load_csr(p)?));
    }
    let total = (matrices.len() * feats.len()) as u64;
    let bar = if o.json {
        ProgressBar::hidden()
    } else {
        let b = ProgressBar::new(total);
        b.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b
    };
    let mut results = Vec::new();
    let stdout = std::io::stdout();
    for &feat in &feats {
        bar.set_message(format!("compiling {} (feat {feat})", op.kernel()));
        if format != Format::Csr {
            for (name, a) in &matrices {
                bar.set_message(format!("{name} feat {feat} ({format})"));
                let r = formats::measure_format(
                    op,
                    a,
                    name,
                    feat,
                    &format,
                    threads,
                    timing,
                    &compile_opts,
                    dtype,
                )?;
                if o.json {
                    let mut lock = stdout.lock();
                    let _ = writeln!(lock, "{}", r.to_json());
                    let _ = lock.flush();
                } else {
                    bar.println(format!(
                        "{name} feat={feat}: ran {} (convert {:.2} ms)",
                        r.format,
                        r.convert_seconds * 1e3
                    ));
                }
                results.push(r);
                bar.inc(1);
            }
            continue;
        }
        // One build per distinct schedule text: the default schedule may depend on the matrix
        // (`default_schedule`), a `--schedule` file does not.
        let mut builds: HashMap<String, Built> = HashMap::new();
        for (name, a) in &matrices {
            let text = match &o.schedule {
                Some(_) => schedule_text.clone(),
                None => default_schedule(op, a, feat),
            };
            let key = text.clone().unwrap_or_default();
            if !builds.contains_key(&key) {
                let built = build(op, feat, text.as_deref(), &compile_opts, dtype)?;
                let note = format!(
                    "{} feat={feat}: cold compile {:.1} ms, front end {:.1} ms, cache {} load {:.2} ms",
                    op.kernel(),
                    built.compile_cold.as_secs_f64() * 1e3,
                    built.frontend.as_secs_f64() * 1e3,
                    match built.outcome {
                        CacheOutcome::Hit => "hit",
                        CacheOutcome::Miss => "miss",
                        CacheOutcome::Rebuilt => "rebuilt",
                    },
                    built.load.as_secs_f64() * 1e3
                );
                if o.json {
                    eprintln!("{note}");
                } else {
                    bar.println(note);
                }
                builds.insert(key.clone(), built);
            }
            let built = &builds[&key];
            bar.set_message(format!("{name} feat {feat}"));
            let mut r = measure(op, built, a, name, feat, "csr", threads, timing, dtype)?;
            r.requested = o.format.trim().to_string();
            if o.json {
                let mut lock = stdout.lock();
                let _ = writeln!(lock, "{}", r.to_json());
                let _ = lock.flush();
            }
            results.push(r);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    if !o.json {
        print_table(&results);
    }
    if results.iter().any(|r| !r.check) {
        return Err(Failure(
            "error: some outputs differ from the reference (check: false)".into(),
        ));
    }
    Ok(())
}

fn print_table(results: &[CaseResult]) {
    println!(
        "{:<6} {:<28} {:>9} {:>9} {:>10} {:>5} {:>7} {:>12} {:>9} {:>6}",
        "op", "matrix", "rows", "cols", "nnz", "feat", "threads", "median ms", "GFLOP/s", "check"
    );
    for r in results {
        println!(
            "{:<6} {:<28} {:>9} {:>9} {:>10} {:>5} {:>7} {:>12.4} {:>9.2} {:>6}",
            r.op.name(),
            r.matrix,
            r.rows,
            r.cols,
            r.nnz,
            r.feat,
            r.threads,
            r.seconds * 1e3,
            r.gflops,
            r.check
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 3x4 CSR matrix with an empty row, and its dense form.
    fn small() -> (Csr, [[f64; 4]; 3]) {
        let csr = Csr {
            rows: 3,
            cols: 4,
            indptr: vec![0, 2, 2, 5],
            indices: vec![1, 3, 0, 1, 2],
            values: vec![2.0, -1.0, 0.5, 3.0, 4.0],
        };
        let dense = [[0.0, 2.0, 0.0, -1.0], [0.0; 4], [0.5, 3.0, 4.0, 0.0]];
        (csr, dense)
    }

    #[test]
    fn references_equal_dense_computations() {
        let (a, d) = small();
        let feat = 2;
        let da: Vec<f32> = (0..a.rows * feat).map(|x| x as f32 * 0.25 + 1.0).collect();
        let db: Vec<f32> = (0..a.cols * feat).map(|x| 3.0 - x as f32 * 0.5).collect();
        // SpMM: C = dense(A) * B.
        let c = reference(Op::Spmm, &a, feat, &da, &db);
        for i in 0..3 {
            for k in 0..feat {
                let want: f64 = (0..4).map(|j| d[i][j] * db[j * feat + k] as f64).sum();
                assert_eq!(c[i * feat + k], want);
            }
        }
        // SpMV: y = dense(A) * x.
        let y = reference(Op::Spmv, &a, 1, &[], &db[..4]);
        for i in 0..3 {
            let want: f64 = (0..4).map(|j| d[i][j] * db[j] as f64).sum();
            assert_eq!(y[i], want);
        }
        // SDDMM at the stored elements, in storage order: (0,1) (0,3) (2,0) (2,1) (2,2).
        let s = reference(Op::Sddmm, &a, feat, &da, &db);
        let stored = [(0, 1), (0, 3), (2, 0), (2, 1), (2, 2)];
        for (p, &(i, j)) in stored.iter().enumerate() {
            let dot: f64 = (0..feat)
                .map(|k| da[i * feat + k] as f64 * db[j * feat + k] as f64)
                .sum();
            assert_eq!(s[p], d[i][j] * dot);
        }
    }

    #[test]
    fn relative_error_catches_differences() {
        assert_eq!(relative_error(&[1.0, 2.0], &[1.0, 2.0]), 0.0);
        assert!((relative_error(&[1.0, 2.5], &[1.0, 2.0]) - 0.25).abs() < 1e-12);
        assert!(relative_error(&[1.0], &[1.0, 2.0]).is_infinite());
        assert!(relative_error(&[f64::NAN], &[1.0]).is_infinite());
        assert_eq!(relative_error(&[], &[]), 0.0);
    }

    #[test]
    fn loaded_matrices_are_sorted_without_duplicates() {
        let dir = std::env::temp_dir().join(format!("sparsetir-bench-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("m.mtx");
        std::fs::write(
            &p,
            "%%MatrixMarket matrix coordinate pattern symmetric\n4 4 4\n2 1\n2 1\n4 4\n3 2\n",
        )
        .unwrap();
        let a = load_csr(&p).map_err(|f| f.0).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        // Entries (1,0) (0,1) (3,3) (2,1) (1,2), duplicates merged.
        assert_eq!(a.indptr, vec![0, 1, 3, 4, 5]);
        assert_eq!(a.indices, vec![1, 0, 2, 1, 3]);
        assert!(a.values.iter().all(|v| (0.5..1.5).contains(v)));
    }
}
