//! `sparsetir bench ... --device cuda|cuda-emu`: the catalog kernel with its default GPU
//! schedule (feature width specialised) — or the format asked for: hyb, bsr:B, ell(width=W),
//! SELL, and for SpMM `auto` measuring CSR, hyb and the CPU's BSR/ELL candidates — run on an
//! NVIDIA GPU (median device time of the
//! kernels by CUDA events, copies excluded) or in the CPU emulator (global-memory traffic:
//! requested bytes over 32-byte sector bytes), checked against the f64 reference.

use std::io::Write as _;

use serde_json::json;
use sparsetir_runtime::cache::KernelCache;
use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};

use sparsetir_formats::builders::hyb::hyb;
use sparsetir_ops::composable::{
    auto_candidates, default_buckets, hyb_spmm_gpu_schedule, hyb_spmm_gpu_schedule_vec4,
    hyb_spmm_gpu_schedule_wide, Format,
};
use sparsetir_runtime::composable::{atomic_blocks_one_launch, hyb_arguments, hyb_spmm_stage1};

use super::formats::own_format;
use super::{
    arguments, feats_of, kernel_for, load_csr, output_values, parse_dtype, random_values,
    reference_as_read, relative_error, schedule_of, stem, store_inputs, Op, Options, TOLERANCE,
};
use crate::Failure;
use sparsetir_eval::ArgValue;
use sparsetir_ir::DType;

/// A kernel's arguments by name.
type Args = std::collections::HashMap<String, ArgValue>;

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
        (
            Format::Hyb { .. }
            | Format::Bsr(_)
            | Format::Ell(_)
            | Format::Condense
            | Format::TwoFour { .. }
            | Format::Auto,
            Op::Spmm,
        )
        | (Format::Sell { .. }, Op::Spmv)
            if o.schedule.is_none() => {}
        _ => {
            return Err(Failure(format!(
                "error: --device {} runs csr, for spmm hyb, bsr:B, ell(width=W), condense, 2:4 \
                 and auto, for spmv sell (no --schedule) (got `{}`)",
                o.device, o.format
            )))
        }
    }
    let feats = feats_of(op, o)?;
    let dtype = parse_dtype(&o.dtype)?;
    if dtype != DType::F32
        && !matches!(
            format,
            Format::Csr | Format::Bsr(_) | Format::Condense | Format::TwoFour { .. }
        )
    {
        return Err(Failure(format!(
            "error: --dtype {dtype} takes the csr, bsr:B, condense and 2:4 formats on a GPU (got \
             `{format}`)"
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
            let hyb = match (&format, op) {
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
                    let mut stage1 = hyb_spmm_stage1(&csrmm, parts, &buckets)?;
                    // The buckets' nests in one launch (after the init's).
                    stage1
                        .attrs
                        .set("fuse_launches", sparsetir_ir::AttrValue::Bool(true));
                    // The buckets share one launch: a bucket is atomic where another writes
                    // one of its rows too.
                    let atomic = atomic_blocks_one_launch(&h);
                    let b: Vec<String> = buckets.iter().map(|x| x.to_string()).collect();
                    let hname = format!("hyb(parts={parts},buckets={})", b.join(","));
                    let extra = hyb_arguments(&h);
                    let nb = buckets.len();
                    let mut scheds = vec![(hyb_spmm_gpu_schedule(parts, nb, &atomic), "hyb")];
                    // `auto` at widths that are a multiple of 128: the same buckets with
                    // 16-byte loads of B too, and from width 256 (to 4096, 1024 threads a
                    // block at most) with the 128-feature chunks over threadIdx.z, one warp per
                    // bucket row and chunk; measured like any candidate.
                    if format == Format::Auto && feat.is_multiple_of(128) {
                        scheds.push((hyb_spmm_gpu_schedule_vec4(parts, nb, &atomic), "hyb vec4"));
                        if (256..=4096).contains(&feat) {
                            let wide = hyb_spmm_gpu_schedule_wide(parts, nb, &atomic, feat);
                            scheds.push((wide, "hyb wide"));
                        }
                    }
                    scheds
                        .into_iter()
                        .map(|(sched, label)| {
                            let k = GpuKernel::build(&stage1, Some(&sched), &spec, device, &cache)?;
                            Ok((k, extra.clone(), hname.clone(), label))
                        })
                        .collect::<Result<Vec<_>, Failure>>()?
                }
                _ => Vec::new(),
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
            // The formats other than CSR that run here (`auto`: the CPU's SpMM candidates that
            // have a GPU kernel), each a kernel with its arguments.
            let mut alts: Vec<(GpuKernel, Args, String, String)> = Vec::new();
            for (hk, extra, hname, hsched) in hyb {
                let mut hargs = args.clone();
                hargs.extend(extra);
                alts.push((hk, hargs, hname, hsched.into()));
            }
            let own_formats = match (&format, op) {
                (Format::Auto, Op::Spmm) => auto_candidates(&a.indptr, &a.indices, a.cols, feat)
                    .into_iter()
                    .filter(|f| matches!(f, Format::Bsr(_) | Format::Ell(_)))
                    .collect(),
                (Format::Csr | Format::Hyb { .. } | Format::Auto, _) => Vec::new(),
                (f, _) => vec![f.clone()],
            };
            for f in &own_formats {
                let Some(own) = own_format(op, a, feat, f)? else {
                    return Err(Failure(format!(
                        "error: format `{f}` has no GPU kernel for this matrix (ELL with a CSR \
                         remainder runs on the CPU only)"
                    )));
                };
                let (func, osched, tensor_cores) = own.with_dtype(op, feat, dtype)?;
                let kernel =
                    GpuKernel::build(&func, osched.as_deref(), &own.gpu_spec, device, &cache)?;
                let mut oargs = own.arguments(op, &dense_b);
                store_inputs(op, &mut oargs, dtype);
                let sched = match osched {
                    _ if tensor_cores => "tensor cores",
                    Some(_) => "default",
                    None => "auto",
                };
                alts.push((kernel, oargs, own.name.clone(), sched.into()));
            }
            // `--emit-cuda`: every other format's kernels too, one file per matrix and format.
            if let Some(dir) = &o.emit_cuda {
                for (ak, _, aname, asched) in &alts {
                    // (hyb's two schedules share the format's name.)
                    let label = match asched.as_str() {
                        "hyb vec4" => format!("{aname}_vec4"),
                        "hyb wide" => format!("{aname}_wide"),
                        _ => aname.clone(),
                    };
                    let safe: String = label
                        .chars()
                        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                        .collect();
                    let path = dir.join(format!("{}_{name}_{safe}_feat{feat}.cu", op.kernel()));
                    std::fs::write(&path, &ak.module().source)
                        .map_err(|e| Failure(format!("error: {}: {e}", path.display())))?;
                }
            }
            let mut format_name = "csr".to_string();
            let mut candidates = Vec::new();
            let mut sched_name = sched_name.to_string();
            let stats = if format == Format::Auto {
                // Every candidate runs; the fastest by device time is reported (the emulator
                // has none: CSR).
                let mut best = run(k, &mut args)?;
                candidates.push(json!({"format": "csr", "schedule": sched_name,
                    "seconds": best.device_time.map(|d| d.as_secs_f64())}));
                for (ak, mut aargs, aname, asched) in alts {
                    let st = run(&ak, &mut aargs)?;
                    candidates.push(json!({"format": aname, "schedule": asched,
                        "seconds": st.device_time.map(|d| d.as_secs_f64())}));
                    let faster = match (st.device_time, best.device_time) {
                        (Some(t), Some(b)) => t < b,
                        (Some(_), None) => true,
                        _ => false,
                    };
                    if faster {
                        args = aargs;
                        format_name = aname;
                        sched_name = asched;
                        best = st;
                    }
                }
                best
            } else if let Some((ak, mut aargs, aname, asched)) = alts.into_iter().next() {
                let st = run(&ak, &mut aargs)?;
                args = aargs;
                format_name = aname;
                sched_name = asched;
                st
            } else {
                run(k, &mut args)?
            };
            let want = reference_as_read(op, a, feat, &dense_a, &dense_b, dtype);
            // Padded formats compute extra rows past the matrix's: the result is the first ones.
            let out = output_values(op, &args);
            let relerr = relative_error(&out[..out.len().min(want.len())], &want);
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
