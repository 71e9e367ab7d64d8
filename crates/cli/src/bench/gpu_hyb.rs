//! The hyb SpMM kernels `sparsetir bench spmm --device cuda|cuda-emu` measures for
//! `--format hyb(...)` and among `--format auto`'s candidates: csrmm decomposed into degree
//! buckets (every warp the same work), in one launch where the data allows it.
//!
//! - Where the bucket rows hold every row once (`hyb_every_row`: no row longer than the widest
//!   bucket, none in two column parts, the empty rows placed as padding) the buckets store their
//!   rows and C is not zeroed first: one launch.
//! - Otherwise as SparseTIR: rows past the widest bucket cut into pieces added atomically, C
//!   zeroed by a launch before the buckets'. With `auto` (one part), also the long rows kept
//!   whole apart as CSR, one thread block each (`hyb_with_rest`): again one launch, no atomics
//!   between blocks. The candidates are measured side by side.

use sparsetir_formats::builders::hyb::hyb_with_rest;
use sparsetir_ops::composable::{default_gpu_buckets, Format, HybGpuSchedule};
use sparsetir_runtime::cache::KernelCache;
use sparsetir_runtime::composable::{
    atomic_blocks_one_launch, hyb_arguments, hyb_one_launch, hyb_one_launch_stage1,
    hyb_rest_arguments, hyb_rest_spmm_stage1,
};
use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};

use super::Csr;
use crate::Failure;

/// A kernel's arguments by name.
type Args = std::collections::HashMap<String, sparsetir_eval::ArgValue>;

/// One hyb kernel to measure: the kernel, the format's arguments, the format's name and the
/// schedule's.
pub(super) type HybCandidate = (GpuKernel, Args, String, &'static str);

/// The hyb kernels for `format` (`hyb(...)` or `auto`) on `a` at width `feat` (see the module
/// documentation).
pub(super) fn hyb_candidates(
    format: &Format,
    a: &Csr,
    feat: usize,
    spec: &[(String, i64)],
    device: GpuDevice,
    cache: &KernelCache,
) -> Result<Vec<HybCandidate>, Failure> {
    let (parts, buckets) = match format {
        Format::Hyb { parts, buckets } => (parts.unwrap_or(1), buckets.clone()),
        _ => (1, None),
    };
    // (Rows past the widest bucket are cut into pieces added atomically, or kept whole apart.)
    let buckets =
        buckets.unwrap_or_else(|| default_gpu_buckets(&a.indptr, &a.indices, a.cols, parts));
    let conv_err =
        |e: sparsetir_formats::builders::BuildError| Failure(format!("error: hyb conversion: {e}"));
    let (r, c, v) = (&a.indptr, &a.indices, &a.values);
    let csrmm = sparsetir_ops::load("csrmm")?;
    let nb = buckets.len();
    let names: Vec<String> = buckets.iter().map(|x| x.to_string()).collect();
    let hname = format!("hyb(parts={parts},buckets={})", names.join(","));
    let auto = *format == Format::Auto;
    // (stage I, arguments, format name, plan's atomic flags, zero fill, rest).
    let mut variants = Vec::new();
    let h = hyb_one_launch(a.rows, a.cols, r, c, v, parts, &buckets).map_err(conv_err)?;
    let zero_fill = !h.rows_once();
    // The buckets share one launch: a bucket is atomic where another writes one of its rows
    // too.
    variants.push((
        hyb_one_launch_stage1(&csrmm, &h, &buckets)?,
        hyb_arguments(&h),
        hname.clone(),
        atomic_blocks_one_launch(&h),
        zero_fill,
        false,
    ));
    if zero_fill && auto && parts == 1 {
        let (h, rest) = hyb_with_rest(a.rows, a.cols, r, c, v, &buckets).map_err(conv_err)?;
        let stage1 = hyb_rest_spmm_stage1(&csrmm, &buckets)?;
        let atomic = atomic_blocks_one_launch(&h);
        let args = hyb_rest_arguments(&h, &rest);
        variants.push((stage1, args, format!("{hname}+csr"), atomic, false, true));
    }
    let mut out = Vec::new();
    for (mut stage1, args, name, atomic, zero_fill, rest) in variants {
        // The nests in one launch (after the zero fill's, where there is one).
        stage1
            .attrs
            .set("fuse_launches", sparsetir_ir::AttrValue::Bool(true));
        let plan = HybGpuSchedule {
            parts,
            num_buckets: nb,
            atomic: &atomic,
            zero_fill,
            rest,
        };
        let mut scheds = vec![(plan.scalar(), "hyb")];
        // `auto` at widths that are a multiple of 128: the same buckets with 16-byte loads of
        // B too, and from width 256 (to 4096, 1024 threads a block at most) with the
        // 128-feature chunks over threadIdx.z, one warp per bucket row and chunk; measured like
        // any candidate.
        if auto && feat.is_multiple_of(128) {
            scheds.push((plan.vec4(), "hyb vec4"));
            if (256..=4096).contains(&feat) {
                scheds.push((plan.wide(feat), "hyb wide"));
            }
        }
        for (sched, label) in scheds {
            let k = GpuKernel::build(&stage1, Some(&sched), spec, device, cache)?;
            out.push((k, args.clone(), name.clone(), label));
        }
    }
    Ok(out)
}
