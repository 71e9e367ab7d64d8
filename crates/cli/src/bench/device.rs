//! `sparsetir bench ... --device cuda|cuda-emu`: the catalog kernel with its default GPU
//! schedule (feature width specialised), run on an NVIDIA GPU (median device time of the
//! kernels by CUDA events, copies excluded) or in the CPU emulator (global-memory traffic:
//! requested bytes over 32-byte sector bytes), checked against the f64 reference.

use std::io::Write as _;

use serde_json::json;
use sparsetir_runtime::cache::KernelCache;
use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};

use sparsetir_formats::builders::hyb::hyb;
use sparsetir_ops::composable::{default_buckets, hyb_spmm_gpu_schedule, Format};
use sparsetir_runtime::composable::{atomic_blocks, hyb_arguments, hyb_spmm_stage1};

use super::{
    arguments, feats_of, kernel_for, load_csr, output_values, parse_dtype, random_values,
    reference_as_read, relative_error, schedule_of, stem, store_inputs, Op, Options, TOLERANCE,
};
use crate::Failure;
use sparsetir_ir::DType;

/// The widest default hyb bucket on the GPU.
const GPU_MAX_BUCKET: usize = 32;

/// Runs the GPU benchmark of `op` (see the module docs).
pub fn run(op: Op, o: &Options) -> Result<(), Failure> {
    let device = if o.device == "cuda" {
        GpuDevice::Cuda
    } else {
        GpuDevice::Emulator
    };
    let format = Format::parse(&o.format).map_err(|e| Failure(format!("error: {e}")))?;
    match (&format, op) {
        (Format::Csr, _) => {}
        (Format::Hyb { .. } | Format::Auto, Op::Spmm) if o.schedule.is_none() => {}
        _ => {
            return Err(Failure(format!(
                "error: --device {} runs csr, and for spmm hyb and auto (no --schedule) (got \
                 `{}`)",
                o.device, o.format
            )))
        }
    }
    let feats = feats_of(op, o)?;
    let dtype = parse_dtype(&o.dtype)?;
    if dtype != DType::F32 && format != Format::Csr {
        return Err(Failure(format!(
            "error: --dtype {dtype} takes the csr format (got `{format}`)"
        )));
    }
    if o.matrices.is_empty() {
        return Err(Failure("error: give at least one --matrix FILE.mtx".into()));
    }
    let schedule = schedule_of(o, sparsetir_ops::gpu_schedule(op.kernel()))?;
    let mut matrices = Vec::new();
    for p in &o.matrices {
        matrices.push((stem(p), load_csr(p)?));
    }
    let cache = KernelCache::from_env()?;
    // SpMM's default GPU schedule by matrix: rows split over warps (8 up to width 128, 4 at
    // 256) where some rows are much longer than the mean (power-law graphs); one warp per row
    // otherwise (measured on an H100: bench/gpu/results/session6-variants2 and -variants3).
    let spmm_split = |feat: usize| {
        let name = if feat <= 128 {
            "csrmm_split"
        } else {
            "csrmm_split4"
        };
        (name, sparsetir_ops::gpu_schedule(name).map(str::to_string))
    };
    let mut failed = false;
    let stdout = std::io::stdout();
    for &feat in &feats {
        let (f, spec) = kernel_for(op, feat, dtype)?;
        let k = GpuKernel::build(&f, schedule.as_deref(), &spec, device, &cache)?;
        let split = if op == Op::Spmm && o.schedule.is_none() && feat <= 256 {
            let (name, text) = spmm_split(feat);
            Some((
                name,
                GpuKernel::build(&f, text.as_deref(), &spec, device, &cache)?,
            ))
        } else {
            None
        };
        if let Some(dir) = &o.emit_cuda {
            std::fs::create_dir_all(dir)
                .map_err(|e| Failure(format!("error: {}: {e}", dir.display())))?;
            let path = dir.join(format!("{}_feat{feat}.cu", op.kernel()));
            std::fs::write(&path, &k.module().source)
                .map_err(|e| Failure(format!("error: {}: {e}", path.display())))?;
        }
        for (name, a) in &matrices {
            // hyb: csrmm decomposed into degree buckets, every warp the same work.
            let hyb_kernel = match (&format, op) {
                (Format::Hyb { .. } | Format::Auto, Op::Spmm) => {
                    let (parts, buckets) = match &format {
                        Format::Hyb { parts, buckets } => (parts.unwrap_or(1), buckets.clone()),
                        _ => (1, None),
                    };
                    // On the GPU the widest bucket is 32 (rows past it are cut into pieces of
                    // 32 added atomically): every warp walks at most 32 slots, whatever the
                    // row lengths (measured on an H100 against buckets up to 128 and up to the
                    // longest row: bench/gpu/results/session6-hyb-buckets).
                    let buckets = buckets.unwrap_or_else(|| {
                        let mut b = default_buckets(&a.indptr, &a.indices, a.cols, parts);
                        b.retain(|w| *w <= GPU_MAX_BUCKET);
                        b
                    });
                    let h = hyb(
                        a.rows, a.cols, &a.indptr, &a.indices, &a.values, parts, &buckets,
                    )
                    .map_err(|e| Failure(format!("error: hyb conversion: {e}")))?;
                    let csrmm = sparsetir_ops::load("csrmm")?;
                    let stage1 = hyb_spmm_stage1(&csrmm, parts, &buckets)?;
                    let sched =
                        hyb_spmm_gpu_schedule(parts, buckets.len(), &atomic_blocks(&h, false));
                    let k = GpuKernel::build(&stage1, Some(&sched), &spec, device, &cache)?;
                    let b: Vec<String> = buckets.iter().map(|x| x.to_string()).collect();
                    Some((
                        k,
                        hyb_arguments(&h),
                        format!("hyb(parts={parts},buckets={})", b.join(",")),
                    ))
                }
                _ => None,
            };
            let dense_a = random_values(2, a.rows * feat, 0.0);
            let dense_b_len = if op == Op::Spmv {
                a.cols
            } else {
                a.cols * feat
            };
            let dense_b = random_values(3, dense_b_len, 0.0);
            let mut args = arguments(op, a, feat, &dense_a, &dense_b);
            store_inputs(op, &mut args, dtype);
            let max_row = a.indptr.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0) as f64;
            let mean_row = a.nnz() as f64 / a.rows.max(1) as f64;
            let (k, sched_name) = match &split {
                Some((name, s)) if max_row >= 8.0 * mean_row.max(1.0) && max_row >= 64.0 => {
                    (s, *name)
                }
                _ => (&k, "default"),
            };
            let repeats = if device == GpuDevice::Cuda {
                o.repeat.max(1)
            } else {
                0
            };
            let run = |k: &GpuKernel, args: &mut _| -> Result<_, Failure> {
                Ok(if repeats > 0 {
                    k.time(args, repeats)?
                } else {
                    k.run(args)?
                })
            };
            let mut format_name = "csr".to_string();
            let mut candidates = Vec::new();
            let mut sched_name = sched_name.to_string();
            let stats = match &hyb_kernel {
                Some((hk, extra, hname)) => {
                    let mut hargs = args.clone();
                    hargs.extend(extra.clone());
                    let hs = run(hk, &mut hargs)?;
                    if format == Format::Auto {
                        let cs = run(k, &mut args)?;
                        let (ct, ht) = (cs.device_time, hs.device_time);
                        candidates.push(json!({"format": "csr", "schedule": sched_name,
                            "seconds": ct.map(|d| d.as_secs_f64())}));
                        candidates.push(json!({"format": hname,
                            "seconds": ht.map(|d| d.as_secs_f64())}));
                        if ht.is_some() && (ct.is_none() || ht < ct) {
                            args = hargs;
                            format_name = hname.clone();
                            sched_name = "hyb".into();
                            hs
                        } else {
                            cs
                        }
                    } else {
                        args = hargs;
                        format_name = hname.clone();
                        sched_name = "hyb".into();
                        hs
                    }
                }
                None => run(k, &mut args)?,
            };
            let want = reference_as_read(op, a, feat, &dense_a, &dense_b, dtype);
            let relerr = relative_error(&output_values(op, &args), &want);
            let check = relerr <= TOLERANCE;
            failed |= !check;
            let feat_out = if op == Op::Spmv { 1 } else { feat };
            let seconds = stats.device_time.map(|d| d.as_secs_f64());
            let gflops = seconds
                .filter(|s| *s > 0.0)
                .map(|s| op.flops(a.nnz(), feat_out) / s / 1e9);
            let mut j = json!({
                "op": op.name(),
                "matrix": name,
                "rows": a.rows,
                "cols": a.cols,
                "nnz": a.nnz(),
                "feat": feat_out,
                "format": format_name,
                "requested_format": o.format.trim(),
                "candidates": candidates,
                "device": device.name(),
                "schedule": if o.schedule.is_some() { "file" } else { sched_name.as_str() },
                "seconds": seconds,
                "gflops": gflops,
                "check": check,
                "relerr": relerr,
                "dtype": dtype.to_string(),
            });
            if device == GpuDevice::Emulator {
                j["requested_bytes"] = json!(stats.requested_bytes);
                j["sector_bytes"] = json!(stats.sector_bytes);
                j["coalescing"] = json!(if stats.sector_bytes > 0 {
                    stats.requested_bytes as f64 / stats.sector_bytes as f64
                } else {
                    1.0
                });
            }
            let line = if o.json {
                j.to_string()
            } else {
                format!(
                    "{} {name} feat={feat_out} device={}: {} check={check} relerr={relerr:.2e}{}",
                    op.name(),
                    device.name(),
                    match (seconds, gflops) {
                        (Some(s), Some(g)) => format!("{:.4} ms, {g:.1} GFLOP/s", s * 1e3),
                        _ => "not timed".to_string(),
                    },
                    if device == GpuDevice::Emulator {
                        format!(
                            ", requested/sector bytes {} / {}",
                            stats.requested_bytes, stats.sector_bytes
                        )
                    } else {
                        String::new()
                    }
                )
            };
            let mut lock = stdout.lock();
            let _ = writeln!(lock, "{line}");
            let _ = lock.flush();
        }
    }
    if failed {
        return Err(Failure(
            "error: some outputs differ from the reference (check: false)".into(),
        ));
    }
    Ok(())
}
