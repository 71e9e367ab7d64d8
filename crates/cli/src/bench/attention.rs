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
//! multiplied by the heads (every head does the same work); the check runs every head against
//! an f64 reference computed here from the (rounded) operands.

use std::collections::HashMap;

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
    let f: PrimFunc = sparsetir_ops::load(name)?;
    let f = sparsetir_transform::store_as(&f, inputs, dtype)
        .map_err(|e| Failure(format!("error: --dtype {dtype}: {e}")))?;
    let spec = if f.param("feat_size").is_some() {
        vec![("feat_size".to_string(), feat as i64)]
    } else {
        Vec::new()
    };
    Ok(match device {
        None => Step::Cpu(Box::new(sparsetir_runtime::build(
            &f,
            sparsetir_ops::cpu_schedule(name),
            &spec,
            opts,
        )?)),
        Some(d) => {
            let cache = KernelCache::from_env()?;
            Step::Gpu(Box::new(GpuKernel::build(
                &f,
                sparsetir_ops::gpu_schedule(name),
                &spec,
                d,
                &cache,
            )?))
        }
    })
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
    if o.format.trim() != "csr" || o.schedule.is_some() || o.print_c {
        return Err(Failure(
            "error: bench attention runs the catalog kernels on the mask's CSR structure \
             (no --format, --schedule or --print-c)"
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
        for &d in &feats {
            let sddmm = step("sddmm", &["A", "B"], dtype, d, device, &opts)?;
            let softmax = step("sparse_softmax", &[], DType::F32, d, device, &opts)?;
            let spmm = step("csrmm", &["B"], dtype, d, device, &opts)?;
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
                    let mut total = 0.0;
                    for (s, args) in [(&sddmm, &mut a1), (&softmax, &mut a2), (&spmm, &mut a3)] {
                        match s.time(args, timing)? {
                            Some(t) => total += t,
                            None => seconds = None,
                        }
                    }
                    seconds = seconds.map(|_| total * heads as f64);
                }
            }
            let check = worst <= TOLERANCE;
            failed |= !check;
            // SDDMM and SpMM: 2 flops per stored pair and feature; softmax: ~4 per pair.
            let flops = heads as f64 * (4.0 * nnz as f64 * d as f64 + 4.0 * nnz as f64);
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
                "gflops": seconds.filter(|s| *s > 0.0).map(|s| flops / s / 1e9),
                "check": check,
                "relerr": worst,
            });
            if o.json {
                println!("{j}");
            } else {
                println!(
                    "attention {} heads={heads} d={d} {dtype} on {}: {} check={check} relerr={worst:.2e}",
                    stem(p),
                    o.device,
                    match seconds {
                        Some(s) => format!("{:.4} ms", s * 1e3),
                        None => "not timed".into(),
                    }
                );
            }
        }
    }
    if failed {
        return Err(Failure(
            "error: some outputs differ from the reference (check: false)".into(),
        ));
    }
    Ok(())
}
