//! `sparsetir bench ... --device cuda|cuda-emu`: the catalog kernel with its default GPU
//! schedule (feature width specialised) — or the format asked for: hyb, bsr:B, ell(width=W),
//! SELL, 2:4 (plain `2:4` on a Hopper GPU with 16-bit values: the fastest form measured there),
//! and for SpMM `auto` measuring CSR, hyb and the CPU's BSR/ELL candidates — run on an
//! NVIDIA GPU (median device time of the
//! kernels by CUDA events, copies excluded) or in the CPU emulator (global-memory traffic:
//! requested bytes over 32-byte sector bytes), checked against the f64 reference.

use std::io::Write as _;

use serde_json::json;
use sparsetir_runtime::cache::KernelCache;
use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};

use sparsetir_ops::composable::{auto_candidates, Format, SharedTiles};

use super::formats::own_format;
use super::gpu_hyb::hyb_candidates;
use super::{
    arguments, feats_of, kernel_for, load_csr, output_values, parse_dtype, random_values,
    reference_as_read, relative_error, schedule_of, stem, store_inputs, Op, Options, TOLERANCE,
};
use crate::Failure;
use sparsetir_eval::ArgValue;
use sparsetir_ir::DType;

/// A kernel's arguments by name.
type Args = std::collections::HashMap<String, ArgValue>;

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
    let mut failed = false;
    let stdout = std::io::stdout();
    for &feat in &feats {
        let (f, spec) = kernel_for(op, feat, dtype)?;
        let k = GpuKernel::build(&f, schedule.as_deref(), &spec, device, &cache)?;
        // SpMM's default GPU schedule by matrix (`sparsetir_ops::spmm_gpu_schedule_name`):
        // rows split over warps where some rows are much longer than the mean.
        let split = match sparsetir_ops::spmm_gpu_split_schedule(feat) {
            Some(name) if op == Op::Spmm && o.schedule.is_none() => {
                let text = sparsetir_ops::gpu_schedule(name);
                Some((name, GpuKernel::build(&f, text, &spec, device, &cache)?))
            }
            _ => None,
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
                    hyb_candidates(&format, a, feat, &spec, device, &cache)?
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
            let max_row = a
                .indptr
                .windows(2)
                .map(|w| w[1] - w[0])
                .max()
                .unwrap_or(0)
                .max(0) as usize;
            let mean_row = a.nnz() as f64 / a.rows.max(1) as f64;
            let skewed = sparsetir_ops::spmm_gpu_schedule_name(feat, max_row, mean_row) != "csrmm";
            let (k, sched_name) = match &split {
                Some((name, s)) if skewed => (s, *name),
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
                (f, _) => vec![two_four_form(f, device, dtype, feat, a.cols)],
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
                // (The form plain `2:4` took on this GPU, by its full name.)
                let oname = if *f != format && matches!(f, Format::TwoFour { .. }) {
                    f.to_string()
                } else {
                    own.name.clone()
                };
                alts.push((kernel, oargs, oname, sched.into()));
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
            let want = reference_as_read(op, a, feat, &dense_a, &dense_b, dtype);
            // Whether a candidate's output (in its arguments) equals the reference.
            let agrees = |args: &Args| {
                let out = output_values(op, args);
                relative_error(&out[..out.len().min(want.len())], &want) <= TOLERANCE
            };
            let stats = if format == Format::Auto {
                // Every candidate runs and is checked (a wrong one fails the run, fastest or
                // not); the fastest by device time is reported (the emulator has none: CSR).
                let mut best = run(k, &mut args)?;
                let ok = agrees(&args);
                failed |= !ok;
                candidates.push(json!({"format": "csr", "schedule": sched_name,
                    "seconds": best.device_time.map(|d| d.as_secs_f64()), "check": ok}));
                for (ak, mut aargs, aname, asched) in alts {
                    let st = run(&ak, &mut aargs)?;
                    let ok = agrees(&aargs);
                    failed |= !ok;
                    candidates.push(json!({"format": aname, "schedule": asched,
                        "seconds": st.device_time.map(|d| d.as_secs_f64()), "check": ok}));
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
                "grids": stats.grids,
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

/// The form format `f` takes here: plain `2:4` on a GPU of compute capability 9.0 with 16-bit
/// values and a width that is a multiple of 8 is the fastest form measured there for a matrix
/// of `cols` columns ([`SharedTiles::hopper_default`], warpgroup products fed by the tensor
/// copy engine and a producer warp); elsewhere (the emulator, other GPUs, float32) the portable per-warp `mma.sp`
/// kernel, as every other format is itself.
fn two_four_form(f: &Format, device: GpuDevice, dtype: DType, feat: usize, cols: usize) -> Format {
    let plain = matches!(
        f,
        Format::TwoFour {
            tiles: None,
            smem: None
        }
    );
    if plain
        && device == GpuDevice::Cuda
        && matches!(dtype, DType::F16 | DType::BF16)
        && feat.is_multiple_of(8)
        && on_compute_capability_9_0()
    {
        return Format::TwoFour {
            tiles: None,
            smem: Some(SharedTiles::hopper_default(cols)),
        };
    }
    f.clone()
}

/// Whether the first GPU is of compute capability 9.0 (Hopper: `wgmma`, sm_90a).
fn on_compute_capability_9_0() -> bool {
    sparsetir_cuda::Context::first_device()
        .and_then(|c| c.arch())
        .is_ok_and(|a| a.compute_capability() == (9, 0))
}
