//! `sparsetir bench spmm --format hyb|hyb(...)|auto`: SpMM on composable formats. The CSR
//! matrix is converted (timed separately, `convert_seconds`), the kernel built for that format
//! (`sparsetir_runtime::composable`), timed, and checked against the same f64 reference as the
//! CSR path. `auto` measures a few candidates (`sparsetir_ops::composable::auto_candidates`)
//! with short timings and reports the fastest one's full measurement.

use std::collections::HashMap;
use std::time::Instant;

use sparsetir_eval::ArgValue;
use sparsetir_formats::builders::hyb::{hyb, Hyb};
use sparsetir_ops::composable::{auto_candidates, default_buckets, hyb_spmm_schedule, Format};
use sparsetir_runtime::composable::{build_hyb_spmm, hyb_arguments, HybOptions};
use sparsetir_runtime::{CacheOutcome, CompileOptions, Kernel, TimingOptions};

use super::{arguments, build, output_values, random_values, reference, relative_error};
use super::{CaseResult, Csr, Op, TOLERANCE};
use crate::Failure;

/// A format resolved for one matrix: what runs, its data and its kernel.
struct Prepared {
    /// The format that runs, fully named (`csr`, `hyb(parts=2,buckets=1,2,4)`).
    name: String,
    kernel: Kernel,
    /// Arguments beyond the CSR ones (the format's arrays).
    extra: HashMap<String, ArgValue>,
    convert_seconds: f64,
    compile_seconds: f64,
    frontend_seconds: f64,
    load_seconds: f64,
    cache: CacheOutcome,
}

fn hyb_params(a: &Csr, parts: Option<usize>, buckets: Option<&[usize]>) -> (usize, Vec<usize>) {
    let parts = parts.unwrap_or(1).clamp(1, a.cols.max(1));
    let buckets = match buckets {
        Some(b) => b.to_vec(),
        None => default_buckets(&a.indptr, &a.indices, a.cols, parts),
    };
    (parts, buckets)
}

fn prepare(
    a: &Csr,
    feat: usize,
    format: &Format,
    opts: &CompileOptions,
) -> Result<Prepared, Failure> {
    match format {
        Format::Csr => {
            let schedule = sparsetir_ops::cpu_schedule("csrmm");
            let built = build(Op::Spmm, feat, schedule, opts)?;
            Ok(Prepared {
                name: "csr".into(),
                kernel: built.kernel,
                extra: HashMap::new(),
                convert_seconds: 0.0,
                compile_seconds: built.compile_cold.as_secs_f64(),
                frontend_seconds: built.frontend.as_secs_f64(),
                load_seconds: built.load.as_secs_f64(),
                cache: built.outcome,
            })
        }
        Format::Hyb { parts, buckets } => {
            let (parts, buckets) = hyb_params(a, *parts, buckets.as_deref());
            let start = Instant::now();
            let h: Hyb = hyb(
                a.rows, a.cols, &a.indptr, &a.indices, &a.values, parts, &buckets,
            )
            .map_err(|e| Failure(format!("error: hyb conversion: {e}")))?;
            let extra = hyb_arguments(&h);
            let convert_seconds = start.elapsed().as_secs_f64();
            let csrmm = sparsetir_ops::load("csrmm")?;
            let options = HybOptions {
                parts,
                buckets: buckets.clone(),
                fuse: false,
            };
            let schedule = hyb_spmm_schedule(parts, buckets.len());
            let start = Instant::now();
            let built = build_hyb_spmm(
                &csrmm,
                &h,
                &options,
                Some(&schedule),
                &[("feat_size".to_string(), feat as i64)],
                opts,
            )?;
            let total = start.elapsed().as_secs_f64();
            let report = built.kernel.report();
            let (load, cache) = (report.total_time.as_secs_f64(), report.outcome);
            let b: Vec<String> = buckets.iter().map(|x| x.to_string()).collect();
            Ok(Prepared {
                name: format!("hyb(parts={parts},buckets={})", b.join(",")),
                kernel: built.kernel,
                extra,
                convert_seconds,
                compile_seconds: total,
                frontend_seconds: (total - load).max(0.0),
                load_seconds: load,
                cache,
            })
        }
        other => Err(Failure(format!(
            "error: format `{other}` cannot run spmm here"
        ))),
    }
}

/// Times `p` on `a` and checks its output: `(median seconds, relative error)`.
fn time_checked(
    p: &Prepared,
    a: &Csr,
    feat: usize,
    timing: TimingOptions,
) -> Result<(f64, f64), Failure> {
    let dense_b = random_values(3, a.cols * feat, 0.0);
    let mut args = arguments(Op::Spmm, a, feat, &[], &dense_b);
    args.extend(p.extra.clone());
    let t = p.kernel.time(&mut args, timing)?;
    let want = reference(Op::Spmm, a, feat, &[], &dense_b);
    let relerr = relative_error(output_values(Op::Spmm, &args), &want);
    Ok((t.median, relerr))
}

/// Measures SpMM of `a` at width `feat` in `format` (not `csr`'s plain path: any format,
/// `auto` included).
pub(super) fn measure_spmm(
    a: &Csr,
    matrix: &str,
    feat: usize,
    format: &Format,
    threads: usize,
    timing: TimingOptions,
    opts: &CompileOptions,
) -> Result<CaseResult, Failure> {
    let mut candidates = Vec::new();
    let chosen = if *format == Format::Auto {
        // Short timings of every candidate; the fastest is measured in full below.
        let quick = TimingOptions {
            warmup: 1,
            repeats: 5,
            ..TimingOptions::default()
        };
        let mut best: Option<(f64, Prepared)> = None;
        for f in auto_candidates(&a.indptr, &a.indices, a.cols, feat) {
            let p = prepare(a, feat, &f, opts)?;
            let (t, err) = time_checked(&p, a, feat, quick)?;
            candidates.push((p.name.clone(), t));
            // A candidate that fails the check is never chosen.
            if err <= TOLERANCE && best.as_ref().is_none_or(|(bt, _)| t < *bt) {
                best = Some((t, p));
            }
        }
        match best {
            Some((_, p)) => p,
            None => {
                return Err(Failure(
                    "error: no candidate format passed the check".into(),
                ))
            }
        }
    } else {
        prepare(a, feat, format, opts)?
    };
    let (seconds, relerr) = time_checked(&chosen, a, feat, timing)?;
    Ok(CaseResult {
        op: Op::Spmm,
        matrix: matrix.to_string(),
        rows: a.rows,
        cols: a.cols,
        nnz: a.nnz(),
        feat,
        format: chosen.name.clone(),
        threads,
        seconds,
        gflops: if seconds > 0.0 {
            Op::Spmm.flops(a.nnz(), feat) / seconds / 1e9
        } else {
            0.0
        },
        check: relerr <= TOLERANCE,
        relerr,
        compile_seconds: chosen.compile_seconds,
        frontend_seconds: chosen.frontend_seconds,
        load_seconds: chosen.load_seconds,
        cache: chosen.cache,
        requested: format.to_string(),
        convert_seconds: chosen.convert_seconds,
        candidates,
    })
}
