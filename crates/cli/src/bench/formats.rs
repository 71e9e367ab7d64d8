//! `sparsetir bench spmm --format hyb|hyb(...)|bsr:B|ell|ell(width=W)|auto` and `sparsetir
//! bench sddmm --format coo|auto`: SpMM and SDDMM on composable formats. The CSR matrix is
//! converted (timed separately, `convert_seconds`), the kernel built for that format, timed,
//! and checked against the same f64 reference as the CSR path:
//! - hyb: csrmm decomposed by the hyb rules (`sparsetir_runtime::composable`);
//! - `bsr:B`: the catalog's bsrmm on `formats::Bsr` with `B × B` blocks (rows and columns
//!   zero-padded up to a multiple of `B`: the dense operand gets zero rows, the output's extra
//!   rows are cropped), scheduled by `schedules/bsr_spmm.sched`;
//! - ell: ELL of width `W` ([`ell_width`] unless given) from `builders::ell_csr`; with no row
//!   longer than `W`, the catalog's ellmm (`ell(width=W)`), otherwise csrmm decomposed into
//!   ELL plus a DCSR remainder of the longer rows' entries past `W`, one kernel
//!   (`ell(width=W)+csr`);
//! - coo (SDDMM): sddmm decomposed by the COO rule, output in COO too
//!   (`sparsetir_runtime::composable::coo`), scheduled by `schedules/sddmm_coo.sched`: one
//!   parallel loop over the stored elements, four at a time. The conversion is the `rows` array (the row of
//!   every stored element); values and columns are CSR's.
//!
//! - condense (SpMM): TC-GNN's tiles of 16 rows with their columns condensed into dense
//!   groups of 16 (`builders::condense`), the kernel `formats/condense_spmm.sp` (on a GPU with
//!   16-bit operands: tensor cores, `gpu/condense_spmm_tc.sched`); the output has a row per
//!   tile row;
//! - 2:4 (SpMM): the catalog's spmm_24 on the exact 2:4 storage of the matrix
//!   (`formats::Nm::from_csr`: every group of four columns of a row holds at most two entries),
//!   rows padded to a multiple of 16 and columns to one of 32 (the dense operand gets zero
//!   rows, the output's extra rows are cropped), the stored positions its `indices`; on a GPU
//!   with 16-bit operands and a width that is a multiple of 8, sparse tensor cores (`mma.sp`
//!   m16n8k32, `composable::spmm_24_tc_gpu_schedule`);
//! - sell (SpMV): SELL-C-σ from `builders::sell` (16 rows per chunk, the sorting window given
//!   or `sell_sigma`'s), the kernel `formats/spmv_sell.sp` scheduled by
//!   `schedules/spmv_sell.sched`; the output has a row per lane (the matrix's rows first).
//!
//! `auto` measures a few candidates (SpMM: `sparsetir_ops::composable::auto_candidates`; SDDMM:
//! csr and coo, `SDDMM_AUTO_CANDIDATES`; SpMV: csr under two schedules, `SPMV_AUTO_CANDIDATES`) with short timings and reports the fastest one's full
//! measurement, with every candidate's time.

use std::collections::HashMap;
use std::time::Instant;

use sparsetir_eval::ArgValue;
use sparsetir_formats::builders::condense::condense;
use sparsetir_formats::builders::ell_csr::{ell_csr, EllCsr};
use sparsetir_formats::builders::hyb::{hyb, Hyb};
use sparsetir_formats::builders::sell::sell;
use sparsetir_formats::{Bsr, BsrPadding, Nm, Tensor, TensorData};
use sparsetir_ir::{DType, PrimFunc};
use sparsetir_ops::composable::{
    auto_candidates, condense_spmm, default_buckets, ell_csr_spmm_schedule, ell_width,
    hyb_spmm_schedule, sell_sigma, spmm_24_cpu_schedule, spmm_24_tc_gpu_schedule, spmv_sell,
    tensor_core_gpu_schedule, widening_schedule, Format, SharedTiles, BSR_SPMM_HALF_SCHEDULE,
    BSR_SPMM_SCHEDULE, CONDENSE_SPMM_SCHEDULE, CONDENSE_TILE, SDDMM_AUTO_CANDIDATES,
    SDDMM_COO_SCHEDULE, SELL_LANES, SPMV_AUTO_CANDIDATES, SPMV_SELL_SCHEDULE,
};
use sparsetir_runtime::composable::coo::{build_coo_sddmm, coo_rows, ROWS_PARAM};
use sparsetir_runtime::composable::{
    build_ell_csr_spmm, build_hyb_spmm, ell_csr_arguments, hyb_arguments, HybOptions,
};
use sparsetir_runtime::{CacheOutcome, CompileOptions, Kernel, TimingOptions};

use super::{arguments, build, dense_name, output_name, output_values, random_values};
use super::{f32_tensor, f32_zeros, i32_tensor, CaseResult, Csr, Op, TOLERANCE};
use super::{reference_as_read, relative_error, store_inputs};
use crate::Failure;

/// How a prepared kernel's arguments are made.
enum Binding {
    /// The CSR kernel's (csrmm's or sddmm's: the CSR arrays, the dense operands, the output,
    /// sizes) plus these (the format's arrays).
    Csr(HashMap<String, ArgValue>),
    /// A format with a kernel of its own: its arrays, the dense operand zero-padded, the output
    /// allocated padded ([`OwnFormat::arguments`]).
    Own(Box<OwnFormat>),
}

/// A format resolved for one matrix: what runs, its data and its kernel.
struct Prepared {
    /// The format that runs, fully named (`csr`, `hyb(parts=2,buckets=1,2,4)`,
    /// `bsr(block=4)`, `ell(width=8)+csr`).
    name: String,
    kernel: Kernel,
    binding: Binding,
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
    op: Op,
    a: &Csr,
    feat: usize,
    format: &Format,
    opts: &CompileOptions,
    dtype: DType,
) -> Result<Prepared, Failure> {
    if dtype != DType::F32
        && !matches!(
            format,
            Format::Bsr(_)
                | Format::Ell(_)
                | Format::Condense
                | Format::Sell { .. }
                | Format::TwoFour { .. }
        )
    {
        return Err(Failure(format!(
            "error: --dtype {dtype} takes the csr format or a format with a kernel of its own \
             (bsr:B, ell(width=W) without remainder, condense, sell) on the CPU (got `{format}`)"
        )));
    }
    match (op, format) {
        (op, Format::Csr) => {
            // The catalog default for spmm and spmv, the tuned one for sddmm.
            let schedule = super::default_schedule(op, a, feat);
            prepare_csr(op, "csr", feat, schedule.as_deref(), opts)
        }
        (Op::Sddmm, Format::Coo) => prepare_coo_sddmm(a, feat, opts),
        (Op::Spmm, Format::Hyb { parts, buckets }) => {
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
            let spec = [("feat_size".to_string(), feat as i64)];
            let (kernel, total, frontend, load) = timed(|| {
                let built = build_hyb_spmm(&csrmm, &h, &options, Some(&schedule), &spec, opts)?;
                Ok(built.kernel)
            })?;
            let cache = kernel.report().outcome;
            let b: Vec<String> = buckets.iter().map(|x| x.to_string()).collect();
            Ok(Prepared {
                name: format!("hyb(parts={parts},buckets={})", b.join(",")),
                kernel,
                binding: Binding::Csr(extra),
                convert_seconds,
                compile_seconds: total,
                frontend_seconds: frontend,
                load_seconds: load,
                cache,
            })
        }
        (Op::Spmm, Format::Bsr(block)) => {
            prepare_own(op, feat, own_bsr(a, feat, *block)?, opts, dtype)
        }
        (Op::Spmv, Format::Sell { sigma }) => {
            prepare_own(op, feat, own_sell(a, *sigma)?, opts, dtype)
        }
        (Op::Spmm, Format::Condense) => prepare_own(op, feat, own_condense(a, feat)?, opts, dtype),
        (Op::Spmm, Format::TwoFour { tiles, smem }) => {
            prepare_own(op, feat, own_24(a, feat, *tiles, *smem)?, opts, dtype)
        }
        (Op::Spmm, Format::Ell(width)) => prepare_ell(a, feat, *width, opts, dtype),
        (_, Format::Auto) => Err(Failure(
            "error: internal error: `auto` is not a candidate format".into(),
        )),
        (op, format) => Err(Failure(format!(
            "error: format `{format}` is not available for {}",
            op.name()
        ))),
    }
}

/// SDDMM on COO (see the module documentation).
/// The catalog kernel of `op` on CSR under `schedule`, reported as `name`.
fn prepare_csr(
    op: Op,
    name: &str,
    feat: usize,
    schedule: Option<&str>,
    opts: &CompileOptions,
) -> Result<Prepared, Failure> {
    let built = build(op, feat, schedule, opts, DType::F32)?;
    Ok(Prepared {
        name: name.into(),
        kernel: built.kernel,
        binding: Binding::Csr(HashMap::new()),
        convert_seconds: 0.0,
        compile_seconds: built.compile_cold.as_secs_f64(),
        frontend_seconds: built.frontend.as_secs_f64(),
        load_seconds: built.load.as_secs_f64(),
        cache: built.outcome,
    })
}

fn prepare_coo_sddmm(a: &Csr, feat: usize, opts: &CompileOptions) -> Result<Prepared, Failure> {
    let start = Instant::now();
    let rows = coo_rows(&a.indptr);
    let mut extra = HashMap::new();
    extra.insert(ROWS_PARAM.to_string(), i32_tensor(&rows));
    let convert_seconds = start.elapsed().as_secs_f64();
    let sddmm = sparsetir_ops::load("sddmm")?;
    let spec = [("feat_size".to_string(), feat as i64)];
    let schedule = super::sddmm_prefetch(SDDMM_COO_SCHEDULE, a, feat);
    let (kernel, total, frontend, load) =
        timed(|| Ok(build_coo_sddmm(&sddmm, Some(&schedule), &spec, opts)?))?;
    let cache = kernel.report().outcome;
    Ok(Prepared {
        name: "coo".into(),
        kernel,
        binding: Binding::Csr(extra),
        convert_seconds,
        compile_seconds: total,
        frontend_seconds: frontend,
        load_seconds: load,
        cache,
    })
}

/// Builds a kernel with `make`, its cost split as [`Prepared`] reports it:
/// `(kernel, total seconds, front-end seconds, load seconds)`.
fn timed(
    make: impl FnOnce() -> Result<Kernel, Failure>,
) -> Result<(Kernel, f64, f64, f64), Failure> {
    let start = Instant::now();
    let kernel = make()?;
    let total = start.elapsed().as_secs_f64();
    let load = kernel.report().total_time.as_secs_f64();
    Ok((kernel, total, (total - load).max(0.0), load))
}

/// A kernel built from a stage-I function and a schedule, timed by [`timed`].
fn build_own(
    f: &PrimFunc,
    schedule: &str,
    spec: &[(String, i64)],
    opts: &CompileOptions,
) -> Result<(Kernel, f64, f64, f64), Failure> {
    timed(|| Ok(sparsetir_runtime::build(f, Some(schedule), spec, opts)?))
}

fn size(n: usize) -> ArgValue {
    ArgValue::Int(n as i64)
}

/// `a` as formats' CSR (sorted rows).
fn formats_csr(a: &Csr) -> Result<sparsetir_formats::Csr<f32, i32>, Failure> {
    sparsetir_formats::Csr::try_new(
        a.rows,
        a.cols,
        a.indptr.clone(),
        a.indices.clone(),
        a.values.clone(),
        true,
    )
    .map_err(|e| Failure(format!("error: the matrix is not a sorted CSR: {e}")))
}

/// A format with a kernel of its own (BSR's bsrmm, ELL's ellmm, SELL's spmv_sell): its arrays,
/// stage-I function and schedules, for the CPU (`prepare_own`) or a GPU device (`device.rs`).
pub(super) struct OwnFormat {
    /// The format that runs, fully named.
    pub name: String,
    pub func: PrimFunc,
    pub cpu_schedule: String,
    /// The CPU schedule for 16-bit operands, where it differs (`None`: `cpu_schedule`).
    pub cpu_schedule_16: Option<&'static str>,
    /// The default GPU schedule (`None`: the automatic one).
    pub gpu_schedule: Option<&'static str>,
    /// The parameters specialised on the CPU, and on the GPU (the default GPU schedules are
    /// written for the catalog's own specialisation).
    pub spec: Vec<(String, i64)>,
    pub gpu_spec: Vec<(String, i64)>,
    /// The format's arrays and sizes; the dense operand is zero-padded to `b_shape`, the
    /// output allocated as `c_shape` (its first values are the result).
    pub args: HashMap<String, ArgValue>,
    pub b_shape: Vec<usize>,
    pub c_shape: Vec<usize>,
    pub convert_seconds: f64,
    /// 2:4 on sparse tensor cores: output tiles per warp (`2:4(tiles=U)`; `None`: the rule of
    /// [`OwnFormat::with_dtype`]).
    pub tiles: Option<usize>,
    /// 2:4 on sparse tensor cores with B staged in shared memory (`2:4(smem=RxZ)`,
    /// `2:4(dbuf=RxZ)`).
    pub smem: Option<SharedTiles>,
}

impl OwnFormat {
    /// The stage-I function with the operands stored as `dtype` (float32 arithmetic and output,
    /// `store_as`), its GPU schedule, and whether that schedule runs on tensor cores: 16 x 16
    /// and 32 x 32 BSR blocks and condensed tiles with 16-bit operands and a feature width that
    /// is a multiple of 8 (`gpu/bsrmm_tc.sched`, `bsrmm_tc32.sched`, `condense_spmm_tc.sched`,
    /// wider than 256 columns spread over `blockIdx.y` too), and 2:4 with 16-bit operands and
    /// tensor-core shapes (`mma.sp`, `composable::spmm_24_tc_gpu_schedule`).
    pub(super) fn with_dtype(
        &self,
        op: Op,
        feat: usize,
        dtype: DType,
    ) -> Result<(PrimFunc, Option<String>, bool), Failure> {
        let plain = self.gpu_schedule.map(str::to_string);
        if dtype == DType::F32 {
            return Ok((self.func.clone(), plain, false));
        }
        let f = sparsetir_transform::store_as(&self.func, op.inputs(), dtype)
            .map_err(|e| Failure(format!("error: --dtype {dtype}: {e}")))?;
        let tc = match self.name.as_str() {
            // Two output tiles per warp (they share A's fragment) from 256 columns: on the H200
            // (session 11, run 7) 0.037 / 0.063 ms against 0.042 / 0.071 at 256 / 512, but
            // 0.026 / 0.029 against 0.021 / 0.023 at 64 / 128, where half the warps are too few.
            "bsr(block=16)" if feat >= 256 && feat.is_multiple_of(16) => Some("bsrmm_tc2"),
            "bsr(block=16)" => Some("bsrmm_tc"),
            "bsr(block=32)" => Some("bsrmm_tc32"),
            "condense" => Some("condense_spmm_tc"),
            _ => None,
        };
        if self.name == "2:4" {
            let int = |k: &str| {
                self.gpu_spec
                    .iter()
                    .find(|(p, _)| p == k)
                    .map_or(0, |(_, v)| *v as usize)
            };
            let (m, n) = (int("m"), int("n"));
            if let Some(t) = self.smem {
                // R x Z warps, each with the widest of 8, 4, 2, 1 tiles of 8 columns the width
                // takes: the block's slice of B is 32 x 8 U Z. A warpgroup's product covers up
                // to 32 tiles (m64n256k32: 128 accumulators per thread), 16 in blocks of more
                // than 8 warps (the register file holds 64 Ki registers).
                // (Rows: a multiple of the cluster's blocks' too, `,cluster=C`.)
                let (r, z, h) = (t.rows, t.cols, t.row_tiles);
                let rows = 16 * r * h * t.cluster.max(1);
                let widest = match (t.warpgroup, r * z > 8) {
                    (true, false) => 32,
                    (true, true) => 16,
                    (false, _) => 8,
                };
                // (A cluster along x shares the block's boxes of 64 columns: whole boxes for
                // each of its blocks; along y, whole clusters of column blocks.)
                let (cx, cy) = (t.cluster.max(1), t.cluster_y.max(1));
                let boxes = |u: usize| cx == 1 || (8 * u * z).is_multiple_of(64 * cx);
                let units = [32, 16, 8, 4, 2, 1]
                    .into_iter()
                    .filter(|&u| u <= widest && u * h <= 32 && boxes(u))
                    .find(|&u| feat.is_multiple_of(8 * u * z * cy))
                    .unwrap_or(1);
                let shapes = m > 0
                    && m.is_multiple_of(rows)
                    && n > 0
                    && n.is_multiple_of(32)
                    && boxes(units)
                    && feat.is_multiple_of(8 * units * z * cy);
                if !shapes {
                    let format = Format::TwoFour {
                        tiles: None,
                        smem: Some(t),
                    };
                    // (The rows and columns were padded to the block's rows and to 32
                    // (`own_24`): only an empty matrix or the width can fail here, and the
                    // message names what the user gave, not the padded sizes.)
                    let width = if cx > 1 { (64 * cx).max(8 * z) } else { 8 * z } * cy;
                    return Err(Failure(if m == 0 || n == 0 {
                        format!(
                            "error: --format {format}: takes a matrix of at least one row and \
                             one column (got {m} x {n})"
                        )
                    } else {
                        format!(
                            "error: --format {format}: takes a feature width that is a \
                             multiple of {width} (got {feat})"
                        )
                    }));
                }
                // A persistent kernel's pipeline runs on from one tile into the next: its
                // runs (32 columns each) must fill its stages evenly (the CUDA writer refuses
                // otherwise, naming the loop; this says it in the user's terms).
                if t.persistent && !(n / 32).is_multiple_of(t.stages()) {
                    let format = Format::TwoFour {
                        tiles: None,
                        smem: Some(t),
                    };
                    return Err(Failure(format!(
                        "error: --format {format}: a persistent kernel takes a matrix whose \
                         columns, padded to a multiple of 32, are a multiple of {} ({} stages \
                         of 32 columns; got {n})",
                        32 * t.stages(),
                        t.stages()
                    )));
                }
                // Two runs' products a group: whole groups of runs, and stages for the group in
                // flight, the one waited for (the CUDA writer refuses otherwise, naming the loop).
                if t.paired_runs {
                    let format = Format::TwoFour {
                        tiles: None,
                        smem: Some(t),
                    };
                    let need = if t.in_flight { 4 } else { 2 };
                    if !(n / 32).is_multiple_of(2) {
                        return Err(Failure(format!(
                            "error: --format {format}: two slices' products a group take a \
                             matrix whose columns, padded to a multiple of 32, are a multiple \
                             of 64 (got {n})"
                        )));
                    }
                    if t.stages() < need {
                        return Err(Failure(format!(
                            "error: --format {format}: two slices' products a group take at \
                             least {need} slices in shared memory (got {}: more `ahead`)",
                            t.stages()
                        )));
                    }
                }
                let s = sparsetir_ops::composable::spmm_24_tc_smem_gpu_schedule(n, t, units);
                return Ok((f, Some(s), true));
            }
            // Up to 4 warps per block, then up to 4 tiles of 8 columns per warp (they share
            // the A fragment and metadata of each run); `2:4(tiles=U)`: U tiles, the warps
            // that fit.
            let fits = |w: usize, t: usize| feat.is_multiple_of(8 * w * t);
            let (warps, tiles) = match self.tiles {
                Some(t) => ([4, 2, 1].into_iter().find(|&w| fits(w, t)).unwrap_or(1), t),
                None => {
                    let w = [4, 2, 1].into_iter().find(|&w| fits(w, 1)).unwrap_or(1);
                    (w, [4, 2, 1].into_iter().find(|&t| fits(w, t)).unwrap_or(1))
                }
            };
            if self.tiles.is_some() && !fits(warps, tiles) {
                return Err(Failure(format!(
                    "error: --format 2:4(tiles={tiles}): the feature width {feat} is not a \
                     multiple of 8 x {tiles} tiles"
                )));
            }
            if m > 0 && m.is_multiple_of(16) && n > 0 && n.is_multiple_of(32) && fits(warps, tiles)
            {
                return Ok((f, Some(spmm_24_tc_gpu_schedule(n, warps, tiles)), true));
            }
            return Ok((f, plain, false));
        }
        Ok(match tc.and_then(sparsetir_ops::gpu_schedule) {
            Some(s) if feat.is_multiple_of(8) => (f, Some(tensor_core_gpu_schedule(s, feat)), true),
            _ => (f, plain, false),
        })
    }

    /// The kernel's arguments for the dense operand `dense_b` (zero-padded) and a zero output.
    pub(super) fn arguments(&self, op: Op, dense_b: &[f32]) -> HashMap<String, ArgValue> {
        let mut args = self.args.clone();
        let mut b = dense_b.to_vec();
        b.resize(self.b_shape.iter().product(), 0.0);
        args.insert(dense_name(op).into(), f32_tensor(self.b_shape.clone(), &b));
        args.insert(output_name(op).into(), f32_zeros(self.c_shape.clone()));
        args
    }
}

/// The own-kernel form of `format` for `op` on `a` at width `feat`, `None` for formats built by
/// decomposing the CSR kernel (hyb, ELL with a CSR remainder, COO) or CSR itself.
pub(super) fn own_format(
    op: Op,
    a: &Csr,
    feat: usize,
    format: &Format,
) -> Result<Option<OwnFormat>, Failure> {
    Ok(match (op, format) {
        (Op::Spmm, Format::Bsr(block)) => Some(own_bsr(a, feat, *block)?),
        (Op::Spmm, Format::Ell(width)) => {
            let (width, e, convert) = ell_convert(a, *width)?;
            (e.rest_nnz() == 0).then(|| own_ell(a, feat, width, &e, convert))
        }
        (Op::Spmv, Format::Sell { sigma }) => Some(own_sell(a, *sigma)?),
        (Op::Spmm, Format::Condense) => Some(own_condense(a, feat)?),
        (Op::Spmm, Format::TwoFour { tiles, smem }) => Some(own_24(a, feat, *tiles, *smem)?),
        _ => None,
    })
}

/// The CPU kernel of an [`OwnFormat`].
fn prepare_own(
    op: Op,
    feat: usize,
    o: OwnFormat,
    opts: &CompileOptions,
    dtype: DType,
) -> Result<Prepared, Failure> {
    let (func, _, _) = o.with_dtype(op, feat, dtype)?;
    let blk = o
        .spec
        .iter()
        .find(|(k, _)| k == "blk")
        .map_or(1, |(_, v)| *v as usize);
    let schedule = match o.cpu_schedule_16 {
        Some(s) => widening_schedule(&o.cpu_schedule, s, dtype != DType::F32, blk, feat),
        None => o.cpu_schedule.as_str(),
    }
    .to_string();
    let (kernel, total, frontend, load) = build_own(&func, &schedule, &o.spec, opts)?;
    let cache = kernel.report().outcome;
    Ok(Prepared {
        name: o.name.clone(),
        kernel,
        convert_seconds: o.convert_seconds,
        binding: Binding::Own(Box::new(o)),
        compile_seconds: total,
        frontend_seconds: frontend,
        load_seconds: load,
        cache,
    })
}

/// BSR with `block × block` blocks and the catalog's bsrmm (see the module documentation).
fn own_bsr(a: &Csr, feat: usize, block: usize) -> Result<OwnFormat, Failure> {
    let start = Instant::now();
    let bsr: Bsr<f32, i32> = Bsr::from_csr(&formats_csr(a)?, (block, block), BsrPadding::Allow)
        .map_err(|e| Failure(format!("error: bsr conversion: {e}")))?;
    let (nb, mb) = bsr.block_shape();
    let mut args = HashMap::new();
    args.insert("indptr".into(), i32_tensor(bsr.indptr()));
    args.insert("indices".into(), i32_tensor(bsr.indices()));
    args.insert(
        "a".into(),
        f32_tensor(vec![bsr.nnz_blocks(), block, block], bsr.values()),
    );
    args.insert("nb".into(), size(nb));
    args.insert("mb".into(), size(mb));
    args.insert("nnzb".into(), size(bsr.nnz_blocks()));
    args.insert("blk".into(), size(block));
    args.insert("feat_size".into(), size(feat));
    Ok(OwnFormat {
        name: format!("bsr(block={block})"),
        func: sparsetir_ops::load("bsrmm")?,
        cpu_schedule: BSR_SPMM_SCHEDULE.to_string(),
        cpu_schedule_16: Some(BSR_SPMM_HALF_SCHEDULE),
        gpu_schedule: sparsetir_ops::gpu_schedule("bsrmm"),
        spec: vec![
            ("feat_size".to_string(), feat as i64),
            ("blk".to_string(), block as i64),
        ],
        gpu_spec: vec![
            ("feat_size".to_string(), feat as i64),
            ("blk".to_string(), block as i64),
        ],
        args,
        b_shape: vec![mb, block, feat],
        c_shape: vec![nb, block, feat],
        convert_seconds: start.elapsed().as_secs_f64(),
        tiles: None,
        smem: None,
    })
}

/// The ELL width to use (`width`, or [`ell_width`] of the matrix) and the ELL+CSR split.
fn ell_convert(a: &Csr, width: Option<usize>) -> Result<(usize, EllCsr, f64), Failure> {
    let width = match width {
        Some(w) if w > a.cols => {
            return Err(Failure(format!(
                "error: format `ell(width={w})`: the width must be at most the matrix's {} \
                 columns",
                a.cols
            )))
        }
        Some(w) => w,
        None => ell_width(&a.indptr).min(a.cols),
    };
    let start = Instant::now();
    let e: EllCsr = ell_csr(a.rows, a.cols, &a.indptr, &a.indices, &a.values, width)
        .map_err(|e| Failure(format!("error: ell conversion: {e}")))?;
    Ok((width, e, start.elapsed().as_secs_f64()))
}

/// ELL with no remainder on the catalog's ellmm (blocks of 1).
fn own_ell(a: &Csr, feat: usize, width: usize, e: &EllCsr, convert_seconds: f64) -> OwnFormat {
    let mut args = HashMap::new();
    args.insert(
        "a".into(),
        f32_tensor(vec![a.rows, width, 1, 1], &e.ell_values),
    );
    args.insert("indices".into(), i32_tensor(&e.ell_indices));
    args.insert("nb".into(), size(a.rows));
    args.insert("mb".into(), size(a.cols));
    args.insert("nnz_cols".into(), size(width));
    args.insert("blk".into(), size(1));
    args.insert("feat_size".into(), size(feat));
    OwnFormat {
        name: format!("ell(width={width})"),
        func: sparsetir_ops::load("ellmm").expect("a catalog kernel"),
        cpu_schedule: sparsetir_ops::cpu_schedule("ellmm")
            .unwrap_or_default()
            .to_string(),
        cpu_schedule_16: None,
        gpu_schedule: sparsetir_ops::gpu_schedule("ellmm"),
        spec: vec![
            ("feat_size".to_string(), feat as i64),
            ("blk".to_string(), 1),
            ("nnz_cols".to_string(), width as i64),
        ],
        // The GPU schedule zeroes the output in its own nest, which lowering only makes where
        // the row width may be 0 (not specialised).
        gpu_spec: vec![
            ("feat_size".to_string(), feat as i64),
            ("blk".to_string(), 1),
        ],
        args,
        b_shape: vec![a.cols, 1, feat],
        c_shape: vec![a.rows, 1, feat],
        convert_seconds,
        tiles: None,
        smem: None,
    }
}

/// ELL of width `width` (default [`ell_width`]), plus a CSR remainder when some row is longer
/// (see the module documentation).
fn prepare_ell(
    a: &Csr,
    feat: usize,
    width: Option<usize>,
    opts: &CompileOptions,
    dtype: DType,
) -> Result<Prepared, Failure> {
    let (width, e, convert_seconds) = ell_convert(a, width)?;
    if e.rest_nnz() > 0 && dtype != DType::F32 {
        return Err(Failure(format!(
            "error: --dtype {dtype}: ell(width={width}) has a CSR remainder here (float32 only)"
        )));
    }
    if e.rest_nnz() == 0 {
        return prepare_own(
            Op::Spmm,
            feat,
            own_ell(a, feat, width, &e, convert_seconds),
            opts,
            dtype,
        );
    }
    let spec = vec![("feat_size".to_string(), feat as i64)];
    let csrmm = sparsetir_ops::load("csrmm")?;
    let schedule = ell_csr_spmm_schedule(width, true);
    let (kernel, total, frontend, load) = timed(|| {
        Ok(build_ell_csr_spmm(
            &csrmm,
            width,
            true,
            Some(&schedule),
            &spec,
            opts,
        )?)
    })?;
    let cache = kernel.report().outcome;
    Ok(Prepared {
        name: format!("ell(width={width})+csr"),
        kernel,
        binding: Binding::Csr(ell_csr_arguments(&e, true)),
        convert_seconds,
        compile_seconds: total,
        frontend_seconds: frontend,
        load_seconds: load,
        cache,
    })
}

/// SpMM on TC-GNN's condensed tiling, tiles and groups of [`CONDENSE_TILE`] (see the module
/// documentation).
fn own_condense(a: &Csr, feat: usize) -> Result<OwnFormat, Failure> {
    let t = CONDENSE_TILE;
    let start = Instant::now();
    let c = condense(a.rows, a.cols, &a.indptr, &a.indices, &a.values, t, t)
        .map_err(|e| Failure(format!("error: condense conversion: {e}")))?;
    let (tiles, groups) = (c.num_tiles(), c.num_groups());
    let max_groups = c
        .group_indptr
        .windows(2)
        .map(|w| (w[1] - w[0]) as usize)
        .max()
        .unwrap_or(0);
    let mut args = HashMap::new();
    args.insert("a".into(), f32_tensor(vec![groups * t * t], &c.values));
    args.insert("tile_indices".into(), i32_tensor(&c.tile_indices));
    args.insert("group_indptr".into(), i32_tensor(&c.group_indptr));
    args.insert("num_tiles".into(), size(tiles));
    args.insert("max_groups".into(), size(max_groups));
    args.insert("num_groups".into(), size(groups));
    args.insert("t".into(), size(t));
    args.insert("g".into(), size(t));
    args.insert("n".into(), size(a.cols));
    args.insert("feat_size".into(), size(feat));
    let spec = vec![
        ("t".to_string(), t as i64),
        ("g".to_string(), t as i64),
        ("feat_size".to_string(), feat as i64),
    ];
    Ok(OwnFormat {
        name: "condense".into(),
        func: condense_spmm()?,
        cpu_schedule: CONDENSE_SPMM_SCHEDULE.to_string(),
        cpu_schedule_16: None,
        gpu_schedule: None,
        spec: spec.clone(),
        gpu_spec: spec,
        args,
        b_shape: vec![a.cols, feat],
        c_shape: vec![tiles * t, feat],
        convert_seconds: start.elapsed().as_secs_f64(),
        tiles: None,
        smem: None,
    })
}

/// SpMM on the exact 2:4 storage of the matrix (see the module documentation).
fn own_24(
    a: &Csr,
    feat: usize,
    tiles: Option<usize>,
    smem: Option<SharedTiles>,
) -> Result<OwnFormat, Failure> {
    let start = Instant::now();
    // Rows padded to a multiple of 16 and columns to one of 32 (empty rows, empty groups): the
    // shapes of the sparse tensor cores' tiles, whatever the matrix's.
    // (`2:4(smem=R)`: rows a multiple of R tiles of 16, the block's.)
    // (`,cluster=C`: C blocks.)
    let row_tile = 16 * smem.map_or(1, |t| t.rows * t.row_tiles * t.cluster.max(1));
    let (rows, cols) = (
        a.rows.next_multiple_of(row_tile),
        a.cols.next_multiple_of(32),
    );
    let mut indptr = a.indptr.clone();
    indptr.resize(rows + 1, *a.indptr.last().unwrap_or(&0));
    let padded = Csr {
        rows,
        cols,
        indptr,
        ..a.clone()
    };
    let nm = Nm::from_csr(&formats_csr(&padded)?, 2, 4)
        .map_err(|e| Failure(format!("error: 2:4 conversion: {e}")))?;
    let (m, n) = nm.shape();
    // The positions (0 to 3) as int8, a quarter of the bytes of int32 (`index_dtype`).
    let positions: Vec<i8> = nm.metadata().iter().map(|&p| p as i8).collect();
    let mut args = HashMap::new();
    args.insert("a".into(), f32_tensor(vec![positions.len()], nm.values()));
    args.insert(
        "indices".into(),
        ArgValue::Array(Tensor {
            shape: vec![positions.len()],
            data: TensorData::I8(positions),
        }),
    );
    args.insert("m".into(), size(m));
    args.insert("n".into(), size(n));
    args.insert("feat_size".into(), size(feat));
    let spec = vec![
        ("n".to_string(), n as i64),
        ("feat_size".to_string(), feat as i64),
    ];
    Ok(OwnFormat {
        name: "2:4".into(),
        func: sparsetir_transform::index_dtype(&sparsetir_ops::load("spmm_24")?, "J", DType::I8)
            .map_err(|e| Failure(format!("error: internal error: spmm_24: {e}")))?,
        cpu_schedule: spmm_24_cpu_schedule(n),
        cpu_schedule_16: None,
        gpu_schedule: sparsetir_ops::gpu_schedule("spmm_24"),
        spec,
        gpu_spec: vec![
            ("m".to_string(), m as i64),
            ("n".to_string(), n as i64),
            ("feat_size".to_string(), feat as i64),
        ],
        args,
        b_shape: vec![n, feat],
        c_shape: vec![m, feat],
        convert_seconds: start.elapsed().as_secs_f64(),
        tiles,
        smem,
    })
}

/// SpMV on SELL-C-σ (see the module documentation).
fn own_sell(a: &Csr, sigma: Option<usize>) -> Result<OwnFormat, Failure> {
    let sigma = sigma.unwrap_or_else(|| sell_sigma(&a.indptr));
    let start = Instant::now();
    let s = sell(
        a.rows, a.cols, &a.indptr, &a.indices, &a.values, SELL_LANES, sigma,
    )
    .map_err(|e| Failure(format!("error: sell conversion: {e}")))?;
    let mut args = HashMap::new();
    let (nchunk, slots) = (s.nchunk(), s.slots());
    args.insert("a".into(), f32_tensor(vec![slots * SELL_LANES], &s.values));
    args.insert("cols".into(), i32_tensor(&s.col_indices));
    args.insert("rows".into(), i32_tensor(&s.row_ids));
    args.insert("chunk_ptr".into(), i32_tensor(&s.chunk_ptr));
    args.insert("nchunk".into(), size(nchunk));
    args.insert("lanes".into(), size(SELL_LANES));
    args.insert("max_width".into(), size(s.max_width()));
    args.insert("nslots".into(), size(slots));
    args.insert("n".into(), size(a.cols));
    Ok(OwnFormat {
        name: format!("sell(sigma={sigma})"),
        func: spmv_sell()?,
        cpu_schedule: SPMV_SELL_SCHEDULE.to_string(),
        cpu_schedule_16: None,
        gpu_schedule: None,
        spec: vec![("lanes".to_string(), SELL_LANES as i64)],
        gpu_spec: vec![("lanes".to_string(), SELL_LANES as i64)],
        args,
        b_shape: vec![a.cols],
        c_shape: vec![s.padded_rows()],
        convert_seconds: start.elapsed().as_secs_f64(),
        tiles: None,
        smem: None,
    })
}

/// Times `p` (a kernel of `op`) on `a` and checks its output: `(median seconds, relative
/// error)`. The dense operands are the CSR path's (`bench::measure`).
fn time_checked(
    op: Op,
    p: &Prepared,
    a: &Csr,
    feat: usize,
    timing: TimingOptions,
    dtype: DType,
) -> Result<(f64, f64), Failure> {
    let dense_a = match op {
        Op::Sddmm => random_values(2, a.rows * feat, 0.0),
        _ => Vec::new(),
    };
    let dense_b = random_values(3, a.cols * feat, 0.0);
    let mut args = match &p.binding {
        Binding::Csr(extra) => {
            let mut args = arguments(op, a, feat, &dense_a, &dense_b);
            args.extend(extra.clone());
            args
        }
        Binding::Own(o) => o.arguments(op, &dense_b),
    };
    store_inputs(op, &mut args, dtype);
    let t = p.kernel.time(&mut args, timing)?;
    let want = reference_as_read(op, a, feat, &dense_a, &dense_b, dtype);
    // Padded formats compute extra rows past the matrix's: the result is the first ones.
    let out = output_values(op, &args);
    let out = &out[..out.len().min(want.len())];
    let relerr = relative_error(out, &want);
    Ok((t.median, relerr))
}

/// The formats SpMV's `auto` measures beside CSR's schedules: SELL with [`sell_sigma`]'s
/// window, and with one window over all rows when that is another.
fn spmv_auto_formats(a: &Csr) -> Vec<Format> {
    let sigma = sell_sigma(&a.indptr);
    let mut out = vec![Format::Sell { sigma: Some(sigma) }];
    if sigma < a.rows {
        out.push(Format::Sell {
            sigma: Some(a.rows),
        });
    }
    out
}

/// Measures `op` (SpMM or SDDMM) of `a` at width `feat` in `format` (not `csr`'s plain path:
/// any format of the operator, `auto` included).
#[allow(clippy::too_many_arguments)]
pub(super) fn measure_format(
    op: Op,
    a: &Csr,
    matrix: &str,
    feat: usize,
    format: &Format,
    threads: usize,
    timing: TimingOptions,
    opts: &CompileOptions,
    dtype: DType,
) -> Result<CaseResult, Failure> {
    let mut candidates = Vec::new();
    let chosen = if *format == Format::Auto {
        // Short timings of every candidate; the fastest is measured in full below. Each
        // candidate warms up for at least 50 ms (threads awake, operands in cache) so the
        // first one measured is not at a disadvantage, and the median of 9 launches decides.
        let quick = TimingOptions {
            warmup: 1,
            repeats: 9,
            warmup_time: std::time::Duration::from_millis(50),
        };
        let mut best: Option<(f64, Prepared)> = None;
        let formats = match op {
            Op::Sddmm => SDDMM_AUTO_CANDIDATES.to_vec(),
            Op::Spmv => spmv_auto_formats(a),
            Op::Spmm => auto_candidates(&a.indptr, &a.indices, a.cols, feat),
        };
        let mut prepared = Vec::new();
        for f in formats {
            prepared.push(prepare(op, a, feat, &f, opts, DType::F32)?);
        }
        if op == Op::Spmv {
            for (name, schedule) in SPMV_AUTO_CANDIDATES {
                prepared.push(prepare_csr(op, name, feat, Some(schedule), opts)?);
            }
        }
        for p in prepared {
            let (t, err) = time_checked(op, &p, a, feat, quick, DType::F32)?;
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
        prepare(op, a, feat, format, opts, dtype)?
    };
    let (seconds, relerr) = time_checked(op, &chosen, a, feat, timing, dtype)?;
    Ok(CaseResult {
        op,
        matrix: matrix.to_string(),
        rows: a.rows,
        cols: a.cols,
        nnz: a.nnz(),
        feat,
        format: chosen.name.clone(),
        threads,
        seconds,
        gflops: if seconds > 0.0 {
            op.flops(a.nnz(), feat) / seconds / 1e9
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
        dtype,
    })
}
