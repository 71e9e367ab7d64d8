//! `sparsetir bench attention --mask MASK.mtx [--block B] --heads H --feat D [--dtype ...]
//! [--device ...]` (`--mask` is `--matrix`; with `--block B` every entry of the mask stands for a
//! `B × B` block of tokens):
//! masked attention per head, `O = softmax((Q Kᵀ) ⊙ M / sqrt(D)) V` with the mask `M` a sparse
//! pattern (any `.mtx`; `gen longformer|pixelfly` make the usual ones), as three catalog
//! kernels on the mask's CSR structure — SDDMM (the scores of the stored pairs, scaled by
//! `1/sqrt(D)` through the mask's values), the sparse row softmax (max and sum of the
//! exponentials over the stored entries only) and SpMM — with their default CPU or GPU
//! schedules. A row that stores nothing gives 0. Q, K and V are random (`H × N × D`); with
//! `--dtype float16|bfloat16` they are stored in 16 bits (`store_as`, float32 arithmetic).
//!
//! Timing: each kernel's median (CPU: wall clock; GPU: CUDA events) on head 0, summed and
//! multiplied by the heads (every head does the same work; each kernel's share in
//! `kernel_seconds`: `scores`, `softmax`, `product`); the check runs every head against an f64
//! reference computed here from the (rounded) operands.
//!
//! `--format bsr:B` (a mask made of whole, aligned `B × B` blocks of tokens, e.g. `--block 64`
//! with `bsr:16`): block-sparse attention as three BSR kernels — the scores
//! (`formats/bsr_sddmm.sp`), the softmax and the product — with every head in the same launch:
//! the heads are the diagonal blocks of one BSR matrix (`H` copies of the mask's block
//! structure; Q, K and V stacked, `H n × D`). `--softmax separate`: the row softmax over the
//! stored blocks with the `1/sqrt(D)` scale (`formats/bsr_softmax.sp`, the probabilities stored
//! as `--dtype`), then bsrmm; `--softmax fused`: each row's `scale max + log sum`
//! (`formats/bsr_softmax_lse.sp`), then a product that makes every probability from its score
//! in registers (`formats/bsr_softmax_mm.sp`, rounded to `--dtype` as a stored one would be):
//! the probabilities are never stored; `auto` (the default) is fused where the product runs on
//! tensor cores. With 16-bit operands on a GPU the scores (blocks of 16) and the product
//! (blocks of 16 or 32) run on tensor cores. Timing: the three kernels' medians, all heads,
//! summed (`kernel_seconds`: `scores`, `softmax` — the statistic when fused — and `product`).

use std::collections::HashMap;
use std::path::PathBuf;

use serde_json::json;
use sparsetir_eval::ArgValue;
use sparsetir_ir::{DType, PrimFunc};
use sparsetir_runtime::cache::KernelCache;
use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};
use sparsetir_runtime::{CompileOptions, Kernel, TimingOptions};

use super::{
    f32_tensor, f32_zeros, i32_tensor, load_csr, parse_dtype, random_values, relative_error,
    rounded, stem, Csr, Options, TOLERANCE,
};
use crate::Failure;

/// One of the three kernels, on the CPU or a GPU device.
enum Step {
    Cpu(Box<Kernel>),
    Gpu(Box<GpuKernel>),
}

impl Step {
    /// `--print-c`: the C source of a CPU step under a comment naming it.
    fn print_c(&self, what: &str) {
        if let Step::Cpu(k) = self {
            println!("/* ---- bench attention: {what} ---- */");
            print!("{}", k.source());
        }
    }

    fn run(&self, args: &mut HashMap<String, ArgValue>) -> Result<(), Failure> {
        match self {
            Step::Cpu(k) => k.run(args).map(|_| ())?,
            Step::Gpu(k) => k.run(args).map(|_| ())?,
        }
        Ok(())
    }

    /// Median seconds of the kernel on `args` (`None`: the emulator does not time).
    fn time(
        &self,
        args: &mut HashMap<String, ArgValue>,
        timing: TimingOptions,
    ) -> Result<Option<f64>, Failure> {
        Ok(match self {
            Step::Cpu(k) => Some(k.time(args, timing)?.median),
            Step::Gpu(k) => k
                .time(args, timing.repeats.max(1))?
                .device_time
                .map(|d| d.as_secs_f64()),
        })
    }
}

/// The catalog kernel `name`, its `inputs` stored as `dtype`, built with its default schedule
/// for the device, `feat_size` specialised where it has one.
fn step(
    name: &str,
    inputs: &[&str],
    dtype: DType,
    feat: usize,
    device: Option<GpuDevice>,
    opts: &CompileOptions,
) -> Result<Step, Failure> {
    let f = stored(sparsetir_ops::load(name)?, inputs, dtype)?;
    let spec = if f.param("feat_size").is_some() {
        vec![("feat_size".to_string(), feat as i64)]
    } else {
        Vec::new()
    };
    let schedules = (
        sparsetir_ops::cpu_schedule(name),
        sparsetir_ops::gpu_schedule(name),
    );
    build_step(&f, schedules, &spec, device, opts, None)
}

/// `f` built for the CPU (the first schedule) or a GPU device (the second; `None`: the
/// automatic one), `spec` specialised; on a GPU with `emit`, its CUDA written to that file.
fn build_step(
    f: &PrimFunc,
    (cpu, gpu): (Option<&str>, Option<&str>),
    spec: &[(String, i64)],
    device: Option<GpuDevice>,
    opts: &CompileOptions,
    emit: Option<PathBuf>,
) -> Result<Step, Failure> {
    let Some(d) = device else {
        return Ok(Step::Cpu(Box::new(sparsetir_runtime::build(
            f, cpu, spec, opts,
        )?)));
    };
    let k = GpuKernel::build(f, gpu, spec, d, &KernelCache::from_env()?)?;
    if let Some(path) = emit {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .map_err(|e| Failure(format!("error: {}: {e}", dir.display())))?;
        }
        std::fs::write(&path, &k.module().source)
            .map_err(|e| Failure(format!("error: {}: {e}", path.display())))?;
    }
    Ok(Step::Gpu(Box::new(k)))
}

/// `values` as a tensor of `dtype` (rounded).
fn tensor(values: &[f32], shape: Vec<usize>, dtype: DType) -> ArgValue {
    let ArgValue::Array(t) = f32_tensor(shape.clone(), values) else {
        unreachable!("f32_tensor makes an array");
    };
    if dtype == DType::F32 {
        return ArgValue::Array(t);
    }
    let mut out = sparsetir_formats::Tensor::zeros(dtype, shape).expect("a float type");
    for i in 0..t.len() {
        out.set_f64(i, t.get_f64(i));
    }
    ArgValue::Array(out)
}

fn output(args: &HashMap<String, ArgValue>, name: &str) -> Result<ArgValue, Failure> {
    args.get(name)
        .cloned()
        .ok_or_else(|| Failure(format!("error: the kernel's output `{name}` is missing")))
}

/// f64 masked attention of one head (`q`, `k`, `v` row-major `n × d`): `n × d` outputs.
fn reference(mask: &Csr, q: &[f32], k: &[f32], v: &[f32], d: usize) -> Vec<f64> {
    let n = mask.rows;
    let scale = 1.0 / (d as f64).sqrt();
    let mut out = vec![0.0f64; n * d];
    for i in 0..n {
        let row = mask.indptr[i] as usize..mask.indptr[i + 1] as usize;
        if row.is_empty() {
            continue;
        }
        let scores: Vec<f64> = row
            .clone()
            .map(|p| {
                let j = mask.indices[p] as usize;
                let dot: f64 = (0..d)
                    .map(|t| q[i * d + t] as f64 * k[j * d + t] as f64)
                    .sum();
                dot * scale
            })
            .collect();
        let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let exps: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
        let sum: f64 = exps.iter().sum();
        for (p, e) in row.zip(&exps) {
            let j = mask.indices[p] as usize;
            for t in 0..d {
                out[i * d + t] += e / sum * v[j * d + t] as f64;
            }
        }
    }
    out
}

/// The token-level mask of a block-level one: every stored entry `(i, j)` becomes the `b x b`
/// block of tokens `(i b .. i b + b, j b .. j b + b)`, rows sorted.
fn expand_blocks(m: Csr, b: usize) -> Result<Csr, Failure> {
    if b == 1 {
        return Ok(m);
    }
    let too_big = |x: Option<usize>| x.is_none_or(|x| x > i32::MAX as usize);
    if too_big(m.cols.checked_mul(b)) || too_big(m.nnz().checked_mul(b * b)) {
        return Err(Failure(format!(
            "error: --block {b}: the token-level mask ({} x {} blocks of {b}) does not fit \
             32-bit indices",
            m.rows, m.cols
        )));
    }
    let (mut indptr, mut indices) = (vec![0i32], Vec::new());
    for i in 0..m.rows {
        let row = &m.indices[m.indptr[i] as usize..m.indptr[i + 1] as usize];
        for _ in 0..b {
            for &j in row {
                indices.extend((0..b).map(|k| j * b as i32 + k as i32));
            }
            indptr.push(indices.len() as i32);
        }
    }
    let values = vec![1.0; indices.len()];
    Ok(Csr {
        rows: m.rows * b,
        cols: m.cols * b,
        indptr,
        indices,
        values,
    })
}

/// Runs `bench attention` (see the module documentation).
pub fn run(o: &Options) -> Result<(), Failure> {
    let dtype = parse_dtype(&o.dtype)?;
    let device = match o.device.as_str() {
        "cpu" => None,
        "cuda" => Some(GpuDevice::Cuda),
        "cuda-emu" => Some(GpuDevice::Emulator),
        other => {
            return Err(Failure(format!(
                "error: --device {other}: expected cpu, cuda or cuda-emu"
            )))
        }
    };
    let block_format = match o.format.trim() {
        "csr" => None,
        f => match f.strip_prefix("bsr:").map(str::parse::<usize>) {
            Some(Ok(b)) if b > 0 => Some(b),
            _ => {
                return Err(Failure(format!(
                    "error: --format {f}: bench attention takes `csr` or `bsr:B`"
                )))
            }
        },
    };
    if o.schedule.is_some() {
        return Err(Failure(
            "error: bench attention runs its own kernels with their default schedules \
             (no --schedule)"
                .into(),
        ));
    }
    if o.print_c && device.is_some() {
        return Err(Failure(
            "error: --print-c prints the CPU kernels; for a GPU write them with --emit-cuda DIR"
                .into(),
        ));
    }
    if o.emit_cuda.is_some() && device.is_none() {
        return Err(Failure(
            "error: --emit-cuda needs --device cuda or cuda-emu".into(),
        ));
    }
    // `None`: fused where the product runs on tensor cores.
    let fused = match o.softmax.as_str() {
        "fused" => Some(true),
        "separate" => Some(false),
        "auto" => None,
        other => {
            return Err(Failure(format!(
                "error: --softmax {other}: expected auto, fused or separate"
            )))
        }
    };
    if fused == Some(true) && block_format.is_none() {
        return Err(Failure(
            "error: --softmax fused makes the probabilities inside the BSR product: it takes \
             --format bsr:B"
                .into(),
        ));
    }
    let heads = o.heads.max(1);
    let feats = super::parse_feats(&o.feat)?;
    if o.matrices.is_empty() {
        return Err(Failure("error: give at least one --matrix MASK.mtx".into()));
    }
    let (threads, opts, timing) = super::cpu_setup(o);
    let mut failed = false;
    for p in &o.matrices {
        let mask = expand_blocks(load_csr(p)?, o.block.max(1))?;
        if mask.rows != mask.cols {
            return Err(Failure(format!(
                "error: {}: an attention mask is square ({} x {} given)",
                p.display(),
                mask.rows,
                mask.cols
            )));
        }
        let (n, nnz) = (mask.rows, mask.nnz());
        if let Some(b) = block_format {
            for &d in &feats {
                let case = BsrCase {
                    mask: &mask,
                    name: stem(p),
                    b,
                    heads,
                    d,
                    dtype,
                    device,
                    fused,
                    o,
                    opts: &opts,
                };
                failed |= !run_bsr(&case, timing, threads)?;
            }
            continue;
        }
        for &d in &feats {
            let sddmm = step("sddmm", &["A", "B"], dtype, d, device, &opts)?;
            let softmax = step("sparse_softmax", &[], DType::F32, d, device, &opts)?;
            let spmm = step("csrmm", &["B"], dtype, d, device, &opts)?;
            if o.print_c {
                sddmm.print_c(&format!("scores (catalog sddmm), feat {d}"));
                softmax.print_c("softmax (catalog sparse_softmax)");
                spmm.print_c(&format!("product (catalog csrmm), feat {d}"));
                continue;
            }
            let scale = vec![(1.0 / (d as f64).sqrt()) as f32; nnz];
            let structure = |args: &mut HashMap<String, ArgValue>| {
                args.insert("indptr".into(), i32_tensor(&mask.indptr));
                args.insert("indices".into(), i32_tensor(&mask.indices));
                args.insert("m".into(), ArgValue::Int(n as i64));
                args.insert("n".into(), ArgValue::Int(n as i64));
                args.insert("nnz".into(), ArgValue::Int(nnz as i64));
            };
            let mut worst: f64 = 0.0;
            let mut seconds = Some(0.0);
            let mut kernel_seconds = serde_json::Map::new();
            for h in 0..heads {
                let q = random_values(10 + 3 * h as u64, n * d, -0.5);
                let k = random_values(11 + 3 * h as u64, n * d, -0.5);
                let v = random_values(12 + 3 * h as u64, n * d, -0.5);
                // S = (Q Kᵀ) ⊙ M / sqrt(d) on the stored pairs.
                let mut a1 = HashMap::new();
                structure(&mut a1);
                a1.insert("feat_size".into(), ArgValue::Int(d as i64));
                a1.insert("a".into(), tensor(&q, vec![n, d], dtype));
                a1.insert("b".into(), tensor(&k, vec![n, d], dtype));
                a1.insert("x".into(), f32_tensor(vec![nnz], &scale));
                a1.insert("y".into(), f32_zeros(vec![nnz]));
                sddmm.run(&mut a1)?;
                // P = the rows' softmax over their stored entries.
                let mut a2 = HashMap::new();
                structure(&mut a2);
                a2.insert("a".into(), output(&a1, "y")?);
                a2.insert("b".into(), f32_zeros(vec![nnz]));
                softmax.run(&mut a2)?;
                // O = P V.
                let mut a3 = HashMap::new();
                structure(&mut a3);
                a3.insert("feat_size".into(), ArgValue::Int(d as i64));
                a3.insert("a".into(), output(&a2, "b")?);
                a3.insert("b".into(), tensor(&v, vec![n, d], dtype));
                a3.insert("c".into(), f32_zeros(vec![n, d]));
                spmm.run(&mut a3)?;
                let ArgValue::Array(out) = output(&a3, "c")? else {
                    return Err(Failure("error: the output is not an array".into()));
                };
                let want = reference(
                    &mask,
                    &rounded(&q, dtype),
                    &rounded(&k, dtype),
                    &rounded(&v, dtype),
                    d,
                );
                worst = worst.max(relative_error(&out.to_f64_vec(), &want));
                if h == 0 {
                    // Every head's kernels take the same time: head 0's, times the heads.
                    let mut total = 0.0;
                    for (name, s, args) in [
                        ("scores", &sddmm, &mut a1),
                        ("softmax", &softmax, &mut a2),
                        ("product", &spmm, &mut a3),
                    ] {
                        match s.time(args, timing)? {
                            Some(t) => {
                                total += t;
                                kernel_seconds.insert(name.into(), json!(t * heads as f64));
                            }
                            None => seconds = None,
                        }
                    }
                    seconds = seconds.map(|_| total * heads as f64);
                }
            }
            let check = worst <= TOLERANCE;
            failed |= !check;
            let j = json!({
                "op": "attention",
                "matrix": stem(p),
                "rows": n,
                "nnz": nnz,
                "heads": heads,
                "feat": d,
                "dtype": dtype.to_string(),
                "device": o.device,
                "threads": threads,
                "seconds": seconds,
                "kernel_seconds": seconds.map(|_| kernel_seconds),
                "check": check,
                "relerr": worst,
            });
            report(o, j, &stem(p));
        }
    }
    if failed {
        return Err(Failure(
            "error: some outputs differ from the reference (check: false)".into(),
        ));
    }
    Ok(())
}

/// One `--format bsr:B` case.
struct BsrCase<'a> {
    mask: &'a Csr,
    name: String,
    b: usize,
    heads: usize,
    d: usize,
    dtype: DType,
    device: Option<GpuDevice>,
    /// `--softmax fused`: the product makes the probabilities (`None`: `auto`).
    fused: Option<bool>,
    o: &'a Options,
    opts: &'a CompileOptions,
}

/// A kernel of the BSR path: the function, its CPU schedule, its GPU schedule (`None`: the
/// automatic one) and the parameters specialised; `--emit-cuda` writes its CUDA as `name`.
fn bsr_step(
    f: &PrimFunc,
    cpu: &str,
    gpu: Option<String>,
    spec: &[(String, i64)],
    c: &BsrCase,
    name: &str,
) -> Result<Step, Failure> {
    let emit =
        c.o.emit_cuda
            .as_ref()
            .map(|dir| dir.join(format!("attention_{}_{name}_feat{}.cu", c.name, c.d)));
    build_step(f, (Some(cpu), gpu.as_deref()), spec, c.device, c.opts, emit)
}

/// `f` with `names` stored as `dtype` (unchanged for float32).
fn stored(f: PrimFunc, names: &[&str], dtype: DType) -> Result<PrimFunc, Failure> {
    if dtype == DType::F32 {
        return Ok(f);
    }
    sparsetir_transform::store_as(&f, names, dtype)
        .map_err(|e| Failure(format!("error: --dtype {dtype}: {e}")))
}

/// Runs one `--format bsr:B` case (see the module documentation); whether its check held.
fn run_bsr(c: &BsrCase, timing: TimingOptions, threads: usize) -> Result<bool, Failure> {
    use sparsetir_formats::{Bsr, BsrPadding};
    use sparsetir_ops::composable;
    let (mask, b, heads, d, dtype, o) = (c.mask, c.b, c.heads, c.d, c.dtype, c.o);
    let n = mask.rows;
    let csr = sparsetir_formats::Csr::try_new(
        n,
        n,
        mask.indptr.clone(),
        mask.indices.clone(),
        mask.values.clone(),
        true,
    )
    .map_err(|e| Failure(format!("error: the mask is not a sorted CSR: {e}")))?;
    let bsr: Bsr<f32, i32> = Bsr::from_csr(&csr, (b, b), BsrPadding::Deny).map_err(|e| {
        Failure(format!(
            "error: --format bsr:{b}: the mask ({n} x {n}) is not made of {b} x {b} blocks: {e}"
        ))
    })?;
    let nnzb = bsr.nnz_blocks();
    if nnzb * b * b != mask.nnz() {
        return Err(Failure(format!(
            "error: --format bsr:{b}: the mask is not made of whole {b} x {b} blocks ({} \
             stored entries in {nnzb} blocks); give a mask of aligned blocks (e.g. `gen block \
             --block {b}`, or --block with a multiple of {b})",
            mask.nnz()
        )));
    }
    let (nb, mb) = bsr.block_shape();
    let too_big = |x: usize| x > i32::MAX as usize;
    if too_big(heads * nnzb * b * b) || too_big(heads * n * d) {
        return Err(Failure(format!(
            "error: {heads} heads of the {n}-token mask do not fit 32-bit offsets"
        )));
    }
    // The heads as the diagonal blocks of one BSR matrix of heads * nb block rows.
    let (mut indptr, mut indices) = (vec![0i32], Vec::with_capacity(heads * nnzb));
    for h in 0..heads {
        let base = (h * nnzb) as i32;
        indptr.extend(bsr.indptr()[1..].iter().map(|p| p + base));
        indices.extend(bsr.indices().iter().map(|j| j + (h * mb) as i32));
    }
    let structure = |args: &mut HashMap<String, ArgValue>| {
        args.insert("indptr".into(), i32_tensor(&indptr));
        args.insert("indices".into(), i32_tensor(&indices));
        args.insert("nb".into(), ArgValue::Int((heads * nb) as i64));
        args.insert("mb".into(), ArgValue::Int((heads * mb) as i64));
        args.insert("nnzb".into(), ArgValue::Int((heads * nnzb) as i64));
        args.insert("blk".into(), ArgValue::Int(b as i64));
    };
    let spec = vec![
        ("blk".to_string(), b as i64),
        ("feat_size".to_string(), d as i64),
    ];
    let blk_spec = &spec[..1];
    let gpu = c.device.is_some();
    let tc = gpu && dtype != DType::F32;
    let sched = |name: &str| sparsetir_ops::gpu_schedule(name).map(str::to_string);
    // Scores: tensor cores for blocks of 16 and whole 16-feature steps.
    let scores = stored(composable::bsr_sddmm()?, &["A", "B"], dtype)?;
    let scores_gpu = if tc && b == 16 && d.is_multiple_of(16) {
        // Four blocks of a row at a time, sharing Q's fragments.
        sched("bsr_sddmm_tc4")
    } else if b <= 32 {
        // One thread per element of a block (at most 1024).
        sched("bsr_sddmm")
    } else {
        None
    };
    let sddmm = bsr_step(
        &scores,
        composable::widening_schedule(
            composable::BSR_SDDMM_SCHEDULE,
            composable::BSR_SDDMM_HALF_SCHEDULE,
            dtype != DType::F32,
            b,
            d,
        ),
        scores_gpu,
        &spec,
        c,
        "scores",
    )?;
    // The softmax: a kernel that stores the probabilities (`separate`), or one that stores
    // each row's statistic for a product that makes them (`fused`).
    let fused = c.fused.unwrap_or(tc && b == 16 && d.is_multiple_of(8));
    let softmax = if fused {
        bsr_step(
            &composable::bsr_softmax_lse()?,
            composable::BSR_SOFTMAX_LSE_SCHEDULE,
            sched("bsr_softmax_lse"),
            blk_spec,
            c,
            "softmax_lse",
        )?
    } else {
        bsr_step(
            &stored(composable::bsr_softmax()?, &["B"], dtype)?,
            composable::BSR_SOFTMAX_SCHEDULE,
            sched("bsr_softmax"),
            blk_spec,
            c,
            "softmax",
        )?
    };
    // The product: bsrmm, or with `fused` the product that makes the probabilities (rounded
    // to `dtype`, as stored ones would be; bsrmm's iteration, so bsrmm's schedules).
    let product = if fused {
        stored(composable::bsr_softmax_mm(dtype)?, &["V"], dtype)?
    } else {
        stored(sparsetir_ops::load("bsrmm")?, &["A", "B"], dtype)?
    };
    let tc_product = match b {
        // Making the probabilities costs more than loading them: four tiles per warp share
        // each block's A fragment.
        16 if fused && d.is_multiple_of(32) => sched("bsrmm_tc4"),
        16 if d.is_multiple_of(16) => sched("bsrmm_tc2"),
        16 => sched("bsrmm_tc"),
        32 => sched("bsrmm_tc32"),
        _ => None,
    };
    let product_gpu = match tc_product {
        Some(s) if tc && d.is_multiple_of(8) => Some(composable::tensor_core_gpu_schedule(&s, d)),
        _ => sched("bsrmm"),
    };
    let spmm = bsr_step(
        &product,
        composable::widening_schedule(
            composable::BSR_SPMM_SCHEDULE,
            composable::BSR_SPMM_HALF_SCHEDULE,
            dtype != DType::F32 && !fused,
            b,
            d,
        ),
        product_gpu,
        &spec,
        c,
        if fused { "softmax_product" } else { "product" },
    )?;
    if c.o.print_c {
        sddmm.print_c(&format!(
            "scores (formats/bsr_sddmm.sp), block {b}, feat {d}"
        ));
        if fused {
            softmax.print_c(&format!(
                "row statistic (formats/bsr_softmax_lse.sp), block {b}"
            ));
            spmm.print_c(&format!(
                "product (formats/bsr_softmax_mm.sp), block {b}, feat {d}"
            ));
        } else {
            softmax.print_c(&format!("softmax (formats/bsr_softmax.sp), block {b}"));
            spmm.print_c(&format!("product (catalog bsrmm), block {b}, feat {d}"));
        }
        return Ok(true);
    }
    // Q, K and V of every head, stacked.
    let (mut q, mut k, mut v) = (Vec::new(), Vec::new(), Vec::new());
    for h in 0..heads {
        q.extend(random_values(10 + 3 * h as u64, n * d, -0.5));
        k.extend(random_values(11 + 3 * h as u64, n * d, -0.5));
        v.extend(random_values(12 + 3 * h as u64, n * d, -0.5));
    }
    let mut a1 = HashMap::new();
    structure(&mut a1);
    a1.insert("feat_size".into(), ArgValue::Int(d as i64));
    a1.insert("a".into(), tensor(&q, vec![heads * nb, b, d], dtype));
    a1.insert("b".into(), tensor(&k, vec![heads * mb, b, d], dtype));
    a1.insert("c".into(), f32_zeros(vec![heads * nnzb, b, b]));
    sddmm.run(&mut a1)?;
    let scale = ArgValue::Float(1.0 / (d as f64).sqrt());
    let mut a2 = HashMap::new();
    structure(&mut a2);
    a2.insert("scale".into(), scale.clone());
    a2.insert("a".into(), output(&a1, "c")?);
    if fused {
        a2.insert("l".into(), f32_zeros(vec![heads * nb, b]));
    } else {
        a2.insert(
            "b".into(),
            tensor(
                &vec![0.0; heads * nnzb * b * b],
                vec![heads * nnzb, b, b],
                dtype,
            ),
        );
    }
    softmax.run(&mut a2)?;
    let mut a3 = HashMap::new();
    structure(&mut a3);
    a3.insert("feat_size".into(), ArgValue::Int(d as i64));
    let out_name = if fused {
        a3.insert("scale".into(), scale);
        a3.insert("s".into(), output(&a1, "c")?);
        a3.insert("l".into(), output(&a2, "l")?);
        a3.insert("v".into(), tensor(&v, vec![heads * mb, b, d], dtype));
        a3.insert("o".into(), f32_zeros(vec![heads * nb, b, d]));
        "o"
    } else {
        a3.insert("a".into(), output(&a2, "b")?);
        a3.insert("b".into(), tensor(&v, vec![heads * mb, b, d], dtype));
        a3.insert("c".into(), f32_zeros(vec![heads * nb, b, d]));
        "c"
    };
    spmm.run(&mut a3)?;
    let ArgValue::Array(out) = output(&a3, out_name)? else {
        return Err(Failure("error: the output is not an array".into()));
    };
    let out = out.to_f64_vec();
    let mut worst: f64 = 0.0;
    for h in 0..heads {
        let head = h * n * d..(h + 1) * n * d;
        let want = reference(
            mask,
            &rounded(&q[head.clone()], dtype),
            &rounded(&k[head.clone()], dtype),
            &rounded(&v[head.clone()], dtype),
            d,
        );
        worst = worst.max(relative_error(&out[head], &want));
    }
    let mut seconds = Some(0.0);
    let mut each = serde_json::Map::new();
    for (name, s, args) in [
        ("scores", &sddmm, &mut a1),
        ("softmax", &softmax, &mut a2),
        ("product", &spmm, &mut a3),
    ] {
        let t = s.time(args, timing)?;
        each.insert(name.into(), json!(t));
        seconds = seconds.zip(t).map(|(total, t)| total + t);
    }
    // The probabilities are rounded to `dtype` before the product: 16-bit cases are checked at
    // that type's precision.
    let tolerance = match dtype {
        DType::F16 => 4e-3,
        DType::BF16 => 3e-2,
        _ => TOLERANCE,
    };
    let check = worst <= tolerance;
    let j = json!({
        "op": "attention",
        "matrix": c.name,
        "format": format!("bsr:{b}"),
        "tensor_cores": tc,
        "softmax": if fused { "fused" } else { "separate" },
        "rows": n,
        "nnz": mask.nnz(),
        "heads": heads,
        "feat": d,
        "dtype": dtype.to_string(),
        "device": o.device,
        "threads": threads,
        "seconds": seconds,
        "kernel_seconds": each,
        "check": check,
        "relerr": worst,
    });
    report(o, j, &format!("{} bsr:{b}", c.name));
    Ok(check)
}

/// Prints one case — its JSON with `gflops` added (SDDMM and SpMM: 2 flops per stored pair and
/// feature; softmax: about 4 per pair), or a line of text naming it `label`.
fn report(o: &Options, mut j: serde_json::Value, label: &str) {
    let num = |j: &serde_json::Value, k: &str| j[k].as_f64().unwrap_or(0.0);
    let (heads, nnz, feat) = (num(&j, "heads"), num(&j, "nnz"), num(&j, "feat"));
    let flops = heads * (4.0 * nnz * feat + 4.0 * nnz);
    let seconds = j["seconds"].as_f64();
    j["gflops"] = json!(seconds.filter(|s| *s > 0.0).map(|s| flops / s / 1e9));
    if o.json {
        println!("{j}");
        return;
    }
    println!(
        "attention {label} heads={} d={} {} on {}: {} check={} relerr={:.2e}",
        j["heads"],
        j["feat"],
        j["dtype"].as_str().unwrap_or(""),
        o.device,
        match seconds {
            Some(s) => format!("{:.4} ms", s * 1e3),
            None => "not timed".into(),
        },
        j["check"],
        num(&j, "relerr"),
    );
}
