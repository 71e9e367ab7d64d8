//! Composable-format kernel drivers (SPEC §3.1, §3.5, §5.3): ELL+CSR SpMM built from csrmm by
//! `decompose_format` with the ELL and DCSR rules (arrays from
//! `sparsetir_formats::builders::ell_csr`), and hyb SpMM built from csrmm by
//! `decompose_format` with the hyb rules, the format arrays filled by
//! `sparsetir_formats::builders::hyb` (the preprocess iterations removed), compute blocks whose
//! output rows may repeat marked `atomic` and lowered by `lower_atomic`, per-bucket schedules,
//! optionally `horizontal_fuse` (CPU form), then C.
//!
//! # Which blocks are atomic
//!
//! The per-bucket compute nests are separate parallel loops, run one after the other. Two
//! bucket rows of *different* buckets therefore never run concurrently, and only rows split past
//! the largest bucket of a part (several bucket rows with the same row index in one bucket) race:
//! those buckets are atomic. When the nests are fused into one parallel region
//! ([`HybOptions::fuse`]), every bucket of a matrix where some row appears twice (split, or in
//! several column parts) is atomic. Fusion itself is refused for now: the bucket nests' top-level
//! loops are the unit loops of the format's `O` axis, which `horizontal_fuse` does not take (it
//! fuses top-level parallel loops); the nests run as consecutive parallel loops, which needs no
//! atomics across buckets and parts.
//!
//! [`coo`]: SDDMM on COO, sddmm decomposed by the COO rule with its output kept in COO too.
//! [`data`]: the arrays of any function decomposed by the catalog's rules, built from its
//! bound CSR data (`sparsetir run --decompose`).

pub mod coo;
pub mod data;

use std::collections::HashMap;

use sparsetir_eval::ArgValue;
use sparsetir_formats::builders::ell_csr::EllCsr;
use sparsetir_formats::builders::hyb::{Hyb, HybRest};
use sparsetir_formats::{Tensor, TensorData};
use sparsetir_ir::attrs::AttrValue;
use sparsetir_ir::{IRModule, PrimFunc, Stmt};
use sparsetir_transform::{
    dcsr_rule, decompose_format, ell_csr_rules, fold_zero_fill, hyb_rules, lower_atomic,
    remove_preprocess, FormatRewriteRule,
};

use crate::build::{kernel_params, schedule_and_lower, BuildError};
use crate::native::{CompileOptions, Kernel};

/// The block name of bucket `bucket` of column part `part` in the decomposed csrmm, at stage III
/// (the inner block of the bucket's nest: rows × slots × features).
pub fn hyb_block(part: usize, bucket: usize) -> String {
    format!("csrmm_{part}_{bucket}1")
}

/// The decomposed csrmm for `parts` column parts and bucket widths `buckets`, without the
/// preprocess iterations (stage I).
pub fn hyb_spmm_stage1(
    csrmm: &PrimFunc,
    parts: usize,
    buckets: &[usize],
) -> Result<PrimFunc, BuildError> {
    let rules = hyb_rules(parts, buckets).map_err(|e| BuildError::Lower(e.to_string()))?;
    decomposed_stage1(csrmm, &rules)
}

/// [`hyb_spmm_stage1`] without the zero fill of C, for a hyb whose bucket rows hold every
/// matrix row exactly once ([`Hyb::rows_once`], built by `hyb_every_row`): each bucket's
/// iteration starts its rows at 0 (`with T.init()`) and so stores them (`fold_zero_fill`).
/// With other data, rows no bucket row holds keep what C held.
pub fn hyb_spmm_stage1_rows_once(
    csrmm: &PrimFunc,
    parts: usize,
    buckets: &[usize],
) -> Result<PrimFunc, BuildError> {
    let f = hyb_spmm_stage1(csrmm, parts, buckets)?;
    fold_zero_fill(&f, "C").map_err(|e| BuildError::Lower(e.to_string()))
}

/// The csrmm of a hyb whose longer rows are kept whole apart (`hyb_with_rest`): the buckets
/// of one part (rules `0_<k>`, blocks [`hyb_block`]`(0, k)` at stage III) and the DCSR rest
/// (rule `dcsr`, blocks `csrmm_dcsr1` over its rows and `csrmm_dcsr2` over their entries ×
/// features), each starting its rows at 0 (`fold_zero_fill`: every row is in exactly one bucket
/// row or rest row), so C is never zeroed first.
pub fn hyb_rest_spmm_stage1(csrmm: &PrimFunc, buckets: &[usize]) -> Result<PrimFunc, BuildError> {
    let mut rules = hyb_rules(1, buckets).map_err(|e| BuildError::Lower(e.to_string()))?;
    rules.push(dcsr_rule().map_err(|e| BuildError::Lower(e.to_string()))?);
    let f = decomposed_stage1(csrmm, &rules)?;
    fold_zero_fill(&f, "C").map_err(|e| BuildError::Lower(e.to_string()))
}

/// The arguments of [`hyb_rest_spmm_stage1`] that describe `h` and `rest` (by parameter name;
/// the CSR arguments, `b`, `c` and `feat_size` are the caller's, as for csrmm).
pub fn hyb_rest_arguments(h: &Hyb, rest: &HybRest) -> HashMap<String, ArgValue> {
    let mut args = hyb_arguments(h);
    let r = rest.rows.len();
    args.insert(
        "a_dcsr".into(),
        ArgValue::Array(Tensor {
            shape: vec![rest.nnz()],
            data: TensorData::F32(rest.values.clone()),
        }),
    );
    args.insert("indptr_i_dcsr".into(), i32_arg(vec![0, r as i32]));
    args.insert("indices_i_dcsr".into(), i32_arg(rest.rows.clone()));
    args.insert("indptr_j_dcsr".into(), i32_arg(rest.indptr.clone()));
    args.insert("indices_j_dcsr".into(), i32_arg(rest.indices.clone()));
    args.insert("m_dcsr".into(), ArgValue::Int(h.rows as i64));
    args.insert("n_dcsr".into(), ArgValue::Int(h.cols as i64));
    args.insert("num_rows_dcsr".into(), ArgValue::Int(r as i64));
    args.insert("nnz_dcsr".into(), ArgValue::Int(rest.nnz() as i64));
    args
}

/// The ELL+CSR-decomposed csrmm (stage I, without the preprocess iterations): ELL of width
/// `width` (rule `ell<width>`, compute block `csrmm_ell<width>0` at stage III) and, when `rest`
/// is set, the DCSR remainder (rule `dcsr`, blocks `csrmm_dcsr1` over its rows and
/// `csrmm_dcsr2` over their entries × features); the output is zeroed once first
/// (`csrmm_init0`).
pub fn ell_csr_spmm_stage1(
    csrmm: &PrimFunc,
    width: usize,
    rest: bool,
) -> Result<PrimFunc, BuildError> {
    let w = i64::try_from(width).map_err(|_| BuildError::Lower("ELL width too large".into()))?;
    let rules = ell_csr_rules(w, rest).map_err(|e| BuildError::Lower(e.to_string()))?;
    decomposed_stage1(csrmm, &rules)
}

/// The stage-III block of the ELL nest of [`ell_csr_spmm_stage1`].
pub fn ell_block(width: usize) -> String {
    format!("csrmm_ell{width}0")
}

/// `f` decomposed by `rules`, the preprocess iterations removed (the caller fills the formats).
fn decomposed_stage1(f: &PrimFunc, rules: &[FormatRewriteRule]) -> Result<PrimFunc, BuildError> {
    let module = IRModule {
        funcs: vec![f.clone()],
    };
    let out =
        decompose_format(&module, rules, true).map_err(|e| BuildError::Lower(e.to_string()))?;
    let f = out
        .funcs
        .into_iter()
        .next()
        .ok_or_else(|| BuildError::Lower("decompose_format returned no function".into()))?;
    Ok(remove_preprocess(&f))
}

/// Builds the ELL+CSR SpMM of [`ell_csr_spmm_stage1`] (`schedule`: schedule-file text for the
/// decomposed function; `specialization` binds scalars such as `feat_size`).
pub fn build_ell_csr_spmm(
    csrmm: &PrimFunc,
    width: usize,
    rest: bool,
    schedule: Option<&str>,
    specialization: &[(String, i64)],
    opts: &CompileOptions,
) -> Result<Kernel, BuildError> {
    let stage1 = ell_csr_spmm_stage1(csrmm, width, rest)?;
    crate::build::build(&stage1, schedule, specialization, opts)
}

/// The arguments of the ELL+CSR-decomposed csrmm that describe `e` (by parameter name; the
/// remainder's only when `rest`). The CSR arguments, `b`, `c` and `feat_size` are the
/// caller's, as for csrmm.
pub fn ell_csr_arguments(e: &EllCsr, rest: bool) -> HashMap<String, ArgValue> {
    let mut args = HashMap::new();
    let w = e.width;
    args.insert(
        format!("a_ell{w}"),
        ArgValue::Array(Tensor {
            shape: vec![e.rows * w],
            data: TensorData::F32(e.ell_values.clone()),
        }),
    );
    args.insert(format!("indices_ell{w}"), i32_arg(e.ell_indices.clone()));
    args.insert(format!("m_ell{w}"), ArgValue::Int(e.rows as i64));
    args.insert(format!("n_ell{w}"), ArgValue::Int(e.cols as i64));
    if rest {
        let r = e.rest_rows.len();
        args.insert(
            "a_dcsr".into(),
            ArgValue::Array(Tensor {
                shape: vec![e.rest_nnz()],
                data: TensorData::F32(e.rest_values.clone()),
            }),
        );
        args.insert("indptr_i_dcsr".into(), i32_arg(vec![0, r as i32]));
        args.insert("indices_i_dcsr".into(), i32_arg(e.rest_rows.clone()));
        args.insert("indptr_j_dcsr".into(), i32_arg(e.rest_indptr.clone()));
        args.insert("indices_j_dcsr".into(), i32_arg(e.rest_indices.clone()));
        args.insert("m_dcsr".into(), ArgValue::Int(e.rows as i64));
        args.insert("n_dcsr".into(), ArgValue::Int(e.cols as i64));
        args.insert("num_rows_dcsr".into(), ArgValue::Int(r as i64));
        args.insert("nnz_dcsr".into(), ArgValue::Int(e.rest_nnz() as i64));
    }
    args
}

/// Whether some row index appears twice in bucket `bucket` of part `part` (a split row).
pub fn bucket_has_split_rows(h: &Hyb, part: usize, bucket: usize) -> bool {
    match h.get(part, bucket) {
        Some(b) => b.row_indices.windows(2).any(|w| w[0] == w[1]),
        None => false,
    }
}

/// The atomic flag of every (part, bucket) block, part-major (see the module documentation).
pub fn atomic_blocks(h: &Hyb, fuse: bool) -> Vec<bool> {
    let mut out = Vec::new();
    for p in 0..h.num_col_parts {
        for k in 0..h.buckets.len() {
            out.push(if fuse {
                h.needs_atomic
            } else {
                bucket_has_split_rows(h, p, k)
            });
        }
    }
    out
}

/// The atomic flag of every (part, bucket) block, part-major, for blocks that run in **one
/// launch** (the CUDA target's `fuse_launches`): a block is atomic when one of its output rows
/// is also written by another bucket row anywhere (a split row, a row storing every column cut
/// over several buckets, a row with entries in several parts). The other blocks' rows are
/// written by them alone, so their plain read-modify-write updates cannot race. (Per-bucket
/// flags, [`atomic_blocks`] with `fuse` false, are enough only when the buckets run one after
/// another.)
pub fn atomic_blocks_one_launch(h: &Hyb) -> Vec<bool> {
    let mut writers = vec![0u32; h.rows];
    for b in h.blocks() {
        for &r in &b.row_indices {
            if let Some(w) = usize::try_from(r).ok().and_then(|r| writers.get_mut(r)) {
                *w = w.saturating_add(1);
            }
        }
    }
    let shared = |r: i32| {
        usize::try_from(r)
            .ok()
            .and_then(|r| writers.get(r))
            .is_some_and(|&w| w > 1)
    };
    let mut out = Vec::new();
    for p in 0..h.num_col_parts {
        for k in 0..h.buckets.len() {
            out.push(
                h.get(p, k)
                    .is_some_and(|b| b.row_indices.iter().any(|&r| shared(r))),
            );
        }
    }
    out
}

/// How to build a hyb SpMM kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HybOptions {
    /// Column parts.
    pub parts: usize,
    /// Bucket widths (increasing).
    pub buckets: Vec<usize>,
    /// Fuse the per-bucket parallel loops into one parallel region (`horizontal_fuse`, CPU).
    pub fuse: bool,
}

/// A compiled hyb SpMM kernel and the description of what it computes.
#[derive(Debug)]
pub struct HybSpmm {
    pub kernel: Kernel,
    pub options: HybOptions,
    /// The atomic flag of every (part, bucket) block, part-major.
    pub atomic: Vec<bool>,
    /// The scheduled stage-III function the C came from (after `lower_atomic` and fusion).
    pub stage3: PrimFunc,
}

/// Builds hyb SpMM from the catalog's `csrmm` for the hyb `h` (which decides the atomic
/// blocks): `schedule` is schedule-file text (for the decomposed function; per-bucket block
/// names are [`hyb_block`]), `specialization` binds scalars such as `feat_size`.
pub fn build_hyb_spmm(
    csrmm: &PrimFunc,
    h: &Hyb,
    options: &HybOptions,
    schedule: Option<&str>,
    specialization: &[(String, i64)],
    opts: &CompileOptions,
) -> Result<HybSpmm, BuildError> {
    if h.num_col_parts != options.parts || h.buckets != options.buckets {
        return Err(BuildError::Lower(format!(
            "the hyb data has {} parts and buckets {:?}, the kernel {} and {:?}",
            h.num_col_parts, h.buckets, options.parts, options.buckets
        )));
    }
    let stage1 = hyb_spmm_stage1(csrmm, options.parts, &options.buckets)?;
    let atomic = atomic_blocks(h, options.fuse);
    let lowered = schedule_and_lower(&stage1, schedule, specialization)?;
    let mut stage3 = lowered.stage3;
    let names: Vec<String> = (0..options.parts)
        .flat_map(|p| (0..options.buckets.len()).map(move |k| hyb_block(p, k)))
        .zip(&atomic)
        .filter(|(_, a)| **a)
        .map(|(n, _)| n)
        .collect();
    mark_atomic(&mut stage3.body, &names);
    if options.fuse {
        return Err(BuildError::Lower(
            "hyb SpMM: horizontal fusion is not available yet (the bucket nests' top-level loops \
             are the unit loops of the decomposed format's `O` axis, not parallel row loops)"
                .into(),
        ));
    }
    let stage3 = lower_atomic(&stage3).map_err(|e| BuildError::Lower(e.to_string()))?;
    let c = crate::build::emit_c_cpu(&stage3).map_err(|e| BuildError::Codegen(e.to_string()))?;
    let params = kernel_params(&c);
    // The atomic blocks' rows may repeat: only what the final function trusts is checked.
    let mut stage1 = lowered.stage1;
    crate::build::note_distinct(&mut stage1, &stage3);
    let kernel = Kernel::from_source(&stage1, &c.source, &c.entry, params, opts)?;
    Ok(HybSpmm {
        kernel,
        options: options.clone(),
        atomic,
        stage3,
    })
}

/// Annotates the blocks named in `names` `{"atomic": True}`.
fn mark_atomic(s: &mut Stmt, names: &[String]) {
    match s {
        Stmt::Seq(v) => v.iter_mut().for_each(|s| mark_atomic(s, names)),
        Stmt::For(f) => mark_atomic(&mut f.body, names),
        Stmt::Block(b) => {
            if names.contains(&b.name) {
                b.annotations.set("atomic", AttrValue::Bool(true));
            }
            mark_atomic(&mut b.body, names);
            if let Some(init) = b.init.as_mut() {
                mark_atomic(init, names);
            }
        }
        Stmt::If(i) => {
            mark_atomic(&mut i.then_case, names);
            if let Some(e) = i.else_case.as_mut() {
                mark_atomic(e, names);
            }
        }
        Stmt::Let(l) => mark_atomic(&mut l.body, names),
        _ => {}
    }
}

fn i32_arg(v: Vec<i32>) -> ArgValue {
    ArgValue::Array(Tensor {
        shape: vec![v.len()],
        data: TensorData::I32(v),
    })
}

/// The arguments of the hyb-decomposed csrmm that describe `h` (structure, values and sizes of
/// every (part, bucket) block, by parameter name). The CSR arguments (`a`, `indptr`, `indices`,
/// `m`, `n`, `nnz`), `b`, `c` and `feat_size` are the caller's, as for csrmm.
pub fn hyb_arguments(h: &Hyb) -> HashMap<String, ArgValue> {
    let mut args = HashMap::new();
    for blk in h.blocks() {
        let s = format!("{}_{}", blk.part, blk.bucket);
        let r = blk.num_rows();
        args.insert(
            format!("a_{s}"),
            ArgValue::Array(Tensor {
                shape: vec![r * blk.width],
                data: TensorData::F32(blk.values.clone()),
            }),
        );
        args.insert(format!("indptr_i_{s}"), i32_arg(vec![0, r as i32]));
        args.insert(format!("indices_i_{s}"), i32_arg(blk.row_indices.clone()));
        args.insert(format!("indices_j_{s}"), i32_arg(blk.col_indices.clone()));
        args.insert(format!("m_{s}"), ArgValue::Int(h.rows as i64));
        args.insert(format!("n_{s}"), ArgValue::Int(h.cols as i64));
        args.insert(format!("num_rows_{s}"), ArgValue::Int(r as i64));
    }
    args
}

/// A hyb SpMM for the GPU made from a matrix's structure alone, its values given at each
/// launch: what `sparsetir.ops` runs on CUDA tensors of large power-law graphs, where one warp
/// a CSR row leaves most lanes idle (see [`hyb_gpu_spmm`]).
#[derive(Clone, Debug)]
pub struct HybGpuSpmm {
    /// The decomposed csrmm (stage I), its C zero fill folded away where every row is in one
    /// bucket row, its nests in one launch.
    pub stage1: PrimFunc,
    /// Its GPU schedule (`HybGpuSchedule::scalar`).
    pub schedule: String,
    /// The format's index arrays and sizes by parameter name; the caller adds the CSR
    /// arguments, `b`, `c`, `feat_size` and the values `a_<part>_<bucket>`.
    pub args: HashMap<String, ArgValue>,
    /// For each values parameter `a_<part>_<bucket>`: the CSR position of each slot's entry,
    /// -1 for padding (the values are `csr_values[sources]`, 0 where -1).
    pub sources: Vec<(String, Vec<i64>)>,
}

/// The hyb of a CSR matrix for one GPU launch: every row in one bucket row where the data
/// allows it ([`hyb_every_row`], [`Hyb::rows_once`]: C stored, never zeroed), else [`hyb`]'s,
/// rows past the widest bucket cut into pieces added atomically after a zero fill.
///
/// [`hyb_every_row`]: sparsetir_formats::builders::hyb::hyb_every_row
/// [`hyb`]: sparsetir_formats::builders::hyb::hyb
pub fn hyb_one_launch(
    rows: usize,
    cols: usize,
    indptr: &[i32],
    indices: &[i32],
    values: &[f32],
    parts: usize,
    buckets: &[usize],
) -> Result<Hyb, sparsetir_formats::builders::BuildError> {
    use sparsetir_formats::builders::hyb::{hyb, hyb_every_row};
    let every = hyb_every_row(rows, cols, indptr, indices, values, parts, buckets)?;
    if every.rows_once() {
        return Ok(every);
    }
    hyb(rows, cols, indptr, indices, values, parts, buckets)
}

/// The decomposed csrmm of `h` ([`hyb_one_launch`]): without the zero fill of C where every
/// row is in one bucket row ([`hyb_spmm_stage1_rows_once`]), with it otherwise
/// ([`hyb_spmm_stage1`]).
pub fn hyb_one_launch_stage1(
    csrmm: &PrimFunc,
    h: &Hyb,
    buckets: &[usize],
) -> Result<PrimFunc, BuildError> {
    if h.rows_once() {
        hyb_spmm_stage1_rows_once(csrmm, h.num_col_parts, buckets)
    } else {
        hyb_spmm_stage1(csrmm, h.num_col_parts, buckets)
    }
}

/// The hyb SpMM of the CSR structure (`rows` × `cols`, `indptr`, `indices`) on the GPU, as
/// `sparsetir bench --format hyb` builds it with one column part and the default buckets up
/// to [`sparsetir_ops::composable::GPU_MAX_BUCKET`]: every row in one bucket row where the
/// data allows it (one launch, C stored, not zeroed), else rows past the widest bucket cut into
/// pieces added atomically after a zero fill.
pub fn hyb_gpu_spmm(
    rows: usize,
    cols: usize,
    indptr: &[i32],
    indices: &[i32],
) -> Result<HybGpuSpmm, BuildError> {
    use sparsetir_ops::composable::{default_gpu_buckets, HybGpuSchedule};

    let buckets = default_gpu_buckets(indptr, indices, cols, 1);
    let zeros = vec![0f32; indices.len()];
    let csrmm = sparsetir_ops::load("csrmm").map_err(|e| BuildError::Lower(e.to_string()))?;
    let h = hyb_one_launch(rows, cols, indptr, indices, &zeros, 1, &buckets)
        .map_err(|e| BuildError::Lower(format!("hyb conversion: {e}")))?;
    let mut stage1 = hyb_one_launch_stage1(&csrmm, &h, &buckets)?;
    stage1.attrs.set("fuse_launches", AttrValue::Bool(true));
    let atomic = atomic_blocks_one_launch(&h);
    let schedule = HybGpuSchedule {
        parts: 1,
        num_buckets: buckets.len(),
        atomic: &atomic,
        zero_fill: !h.rows_once(),
        rest: false,
    }
    .scalar();
    let mut args = hyb_arguments(&h);
    let mut sources = Vec::new();
    for blk in h.blocks() {
        let name = format!("a_{}_{}", blk.part, blk.bucket);
        args.remove(&name);
        sources.push((name, blk.sources.clone()));
    }
    Ok(HybGpuSpmm {
        stage1,
        schedule,
        args,
        sources,
    })
}
