//! The data of a function decomposed by the catalog's format rules (SPEC §3.1, §5.3), for
//! `sparsetir run --decompose`: which builder fills the arrays of each rule, and those arrays
//! built from the CSR matrix bound to the function, by parameter name.
//!
//! A [`Decomposition`] is a set of rules that together store the rewritten CSR buffer in one of
//! the formats the builders of `sparsetir_formats` produce:
//! - hyb (`crates/ops/rules/hyb.rule.sp`, one rule per column part × bucket; `builders::hyb`),
//! - BSR with square blocks (`bsr.rule.sp`; `Bsr::from_csr`; the matrix's rows and columns must
//!   be multiples of the block size, since the decomposed computation addresses every block
//!   row and column of the other buffers),
//! - ELL of every row (`ell.rule.sp`), alone when no row is longer than the width, or with the
//!   DCSR remainder (`dcsr.rule.sp`; `builders::ell_csr`),
//! - COO (`coo.rule.sp`; the rows of the stored elements, [`super::coo::coo_rows`]).
//!
//! A rule is recognised as one of these ([`recognize`]) when it is the catalog's rule script
//! with the same bound parameters, whatever it is named (its arrays are then bound under its
//! own name). The arrays are built from the arguments already bound for the *undecomposed*
//! function (the rewritten buffer's values, its axes' `indptr`/`indices` and sizes), so the
//! decomposed kernel takes them all plus the format's (the preprocess copy is not run).

use std::collections::HashMap;

use sparsetir_eval::ArgValue;
use sparsetir_formats::builders::ell_csr::ell_csr_padded_below;
use sparsetir_formats::builders::hyb::hyb_padded_below;
use sparsetir_formats::{Bsr, BsrPadding, Csr, Tensor, TensorData};
use sparsetir_ir::{equal::func_eq, AxisKind, DType, Expr, PrimFunc};
use sparsetir_transform::format_rule::scripts;
use sparsetir_transform::FormatRewriteRule;

use super::coo::{coo_rows, COO_RULE};
use super::{ell_csr_arguments, hyb_arguments, i32_arg};

/// What a catalog rule stores, as far as its data is concerned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuleKind {
    /// `bsr.rule.sp` with `block_size` bound.
    Bsr(usize),
    /// `ell.rule.sp` with `width` bound.
    Ell(usize),
    /// `dcsr.rule.sp`: the remainder of ELL+CSR.
    Dcsr,
    /// `coo.rule.sp`.
    Coo,
    /// `hyb.rule.sp` with `nnz_cols` bound: bucket `bucket` (of width `width`) of column part
    /// `part`.
    HybBucket {
        part: usize,
        bucket: usize,
        width: usize,
    },
}

/// Whether two rules are the same up to their names (structurally equal formats, same maps).
fn same_rule(a: &FormatRewriteRule, b: &FormatRewriteRule) -> bool {
    func_eq(&a.new_format, &b.new_format)
        && a.buffers_to_rewrite == b.buffers_to_rewrite
        && a.axes_before == b.axes_before
        && a.axes_after == b.axes_after
        && a.axis_map == b.axis_map
        && a.idx_map == b.idx_map
        && a.inv_idx_map == b.inv_idx_map
}

/// The catalog rule `rule` is (a rule script read with `bindings`), if any: the script is
/// compared with each catalog rule script bound the same way.
pub fn recognize(rule: &FormatRewriteRule, bindings: &[(&str, i64)]) -> Option<RuleKind> {
    let bound = |name: &str| {
        bindings
            .iter()
            .find(|(k, _)| *k == name)
            .and_then(|(_, v)| usize::try_from(*v).ok())
    };
    let candidates: [(&str, Option<RuleKind>); 5] = [
        (scripts::BSR, bound("block_size").map(RuleKind::Bsr)),
        (scripts::ELL, bound("width").map(RuleKind::Ell)),
        (scripts::DCSR, Some(RuleKind::Dcsr)),
        (COO_RULE, Some(RuleKind::Coo)),
        (
            scripts::HYB,
            bound("nnz_cols").map(|width| RuleKind::HybBucket {
                part: 0,
                bucket: 0,
                width,
            }),
        ),
    ];
    candidates.into_iter().find_map(|(script, kind)| {
        let kind = kind?;
        let catalog = FormatRewriteRule::from_script_with(script, bindings).ok()?;
        same_rule(&catalog, rule).then_some(kind)
    })
}

/// The kinds of `sparsetir_transform::hyb_rules(parts, buckets)`, in its order (part-major).
pub fn hyb_kinds(parts: usize, buckets: &[usize]) -> Vec<RuleKind> {
    (0..parts)
        .flat_map(|part| {
            buckets
                .iter()
                .enumerate()
                .map(move |(bucket, &width)| RuleKind::HybBucket {
                    part,
                    bucket,
                    width,
                })
        })
        .collect()
}

/// The storage a [`Decomposition`] builds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Layout {
    Hyb { parts: usize, buckets: Vec<usize> },
    Bsr(usize),
    Ell { width: usize, rest: bool },
    Coo,
}

/// Why a decomposition cannot be run on the bound data.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DataError(pub String);

fn fail<T>(m: impl Into<String>) -> Result<T, DataError> {
    Err(DataError(m.into()))
}

/// A complete decomposition of one CSR buffer: the format's layout and, for every rule, the
/// name the builder's arrays are bound under (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decomposition {
    pub layout: Layout,
    /// The rewritten buffer (of the undecomposed function).
    pub buffer: String,
    /// `(the builder's name of the rule, its name in the decomposed function, its format's
    /// parameters)`.
    names: Vec<(String, String, Vec<String>)>,
}

const FORMATS: &str = "hyb(parts=P,buckets=...), bsr:B, ell(width=W), ell(width=W)+csr or coo, \
                       or their rule scripts";

impl Decomposition {
    /// The decomposition the rules `rules` (each with its [`RuleKind`], `None` for a rule that
    /// is no catalog rule) form together.
    pub fn new(rules: &[(FormatRewriteRule, Option<RuleKind>)]) -> Result<Self, DataError> {
        let names_of = |r: &FormatRewriteRule| -> Vec<String> {
            let f = &r.new_format;
            f.params.iter().map(|p| f.vars[*p].name.clone()).collect()
        };
        let mut kinds = Vec::new();
        for (r, k) in rules {
            match k {
                Some(k) => kinds.push(k.clone()),
                None => {
                    return fail(format!(
                        "rule `{}` is not one of the catalog's rules, so nothing builds its \
                         arrays from the data (run --decompose takes {FORMATS})",
                        r.name
                    ))
                }
            }
        }
        let buffers: Vec<&Vec<String>> = rules.iter().map(|(r, _)| &r.buffers_to_rewrite).collect();
        let buffer = match buffers.first().map(|b| b.as_slice()) {
            Some([one]) if buffers.iter().all(|b| b.as_slice() == [one.clone()]) => one.clone(),
            None => return fail("no rule to decompose with"),
            _ => {
                return fail(
                    "the rules must together rewrite one buffer for run --decompose to build \
                     its arrays",
                )
            }
        };
        let canonical: Vec<String> = kinds
            .iter()
            .map(|k| match k {
                RuleKind::Bsr(b) => b.to_string(),
                RuleKind::Ell(w) => format!("ell{w}"),
                RuleKind::Dcsr => "dcsr".into(),
                RuleKind::Coo => "coo".into(),
                RuleKind::HybBucket { part, bucket, .. } => format!("{part}_{bucket}"),
            })
            .collect();
        let layout = match kinds.as_slice() {
            [RuleKind::Bsr(b)] => Layout::Bsr(*b),
            [RuleKind::Ell(w)] => Layout::Ell {
                width: *w,
                rest: false,
            },
            [RuleKind::Ell(w), RuleKind::Dcsr] => Layout::Ell {
                width: *w,
                rest: true,
            },
            [RuleKind::Coo] => Layout::Coo,
            ks if ks.iter().all(|k| matches!(k, RuleKind::HybBucket { .. })) => {
                let parts = ks
                    .iter()
                    .filter_map(|k| match k {
                        RuleKind::HybBucket { part, .. } => Some(part + 1),
                        _ => None,
                    })
                    .max()
                    .unwrap_or(1);
                let buckets: Vec<usize> = ks
                    .iter()
                    .filter_map(|k| match k {
                        RuleKind::HybBucket { part: 0, width, .. } => Some(*width),
                        _ => None,
                    })
                    .collect();
                if ks != hyb_kinds(parts, &buckets).as_slice() {
                    return fail(
                        "the hyb rules do not form whole column parts of the same buckets",
                    );
                }
                Layout::Hyb { parts, buckets }
            }
            _ => {
                let names: Vec<String> = rules.iter().map(|(r, _)| r.name.clone()).collect();
                return fail(format!(
                    "the rules {} do not together form one format (run --decompose takes \
                     {FORMATS})",
                    names.join(", ")
                ));
            }
        };
        let names = rules
            .iter()
            .zip(canonical)
            .map(|((r, _), c)| (c, r.name.clone(), names_of(r)))
            .collect();
        Ok(Decomposition {
            layout,
            buffer,
            names,
        })
    }

    /// The bound below which padding columns must lie: the narrowest dense dimension that
    /// coordinates of the rewritten buffer's column axis index in `f`
    /// ([`crate::validate::coordinate_bound`]; no bound where they index none).
    fn column_bound(&self, f: &PrimFunc, args: &HashMap<String, ArgValue>) -> usize {
        let Some(&j) = f
            .buffer_by_name(&self.buffer)
            .and_then(|b| f.buffers[b].axes().get(1))
        else {
            return usize::MAX;
        };
        crate::validate::coordinate_bound(f, j, args).map_or(usize::MAX, |n| n.max(0) as usize)
    }

    /// The arrays and sizes of the decomposed format, by parameter name of the decomposed
    /// function, built from `args`: the arguments bound for the undecomposed `f`.
    pub fn arguments(
        &self,
        f: &PrimFunc,
        args: &HashMap<String, ArgValue>,
    ) -> Result<HashMap<String, ArgValue>, DataError> {
        let csr = CsrData::of(f, &self.buffer, args)?;
        let what = |e: &dyn std::fmt::Display| {
            DataError(format!(
                "cannot store `{}` ({}x{}, {} stored) as {}: {e}",
                self.buffer,
                csr.rows,
                csr.cols,
                csr.indices.len(),
                self.layout_name()
            ))
        };
        // Padding slots name columns that every dense dimension the column coordinates index
        // holds (`B[j, j]` reads `B`'s feature axis at `j` too): what validation asks of the
        // stored ones, so data valid for `f` stays valid decomposed.
        let pad_below = self.column_bound(f, args);
        let canonical = match &self.layout {
            Layout::Hyb { parts, buckets } => {
                let h = hyb_padded_below(
                    csr.rows,
                    csr.cols,
                    &csr.indptr,
                    &csr.indices,
                    &csr.values,
                    *parts,
                    buckets,
                    pad_below,
                )
                .map_err(|e| what(&e))?;
                hyb_arguments(&h)
            }
            Layout::Ell { width, rest } => {
                let e = ell_csr_padded_below(
                    csr.rows,
                    csr.cols,
                    &csr.indptr,
                    &csr.indices,
                    &csr.values,
                    *width,
                    pad_below,
                )
                .map_err(|e| what(&e))?;
                if !rest {
                    if let Some(&r) = e.rest_rows.first() {
                        let d = csr.indptr[r as usize + 1] - csr.indptr[r as usize];
                        return Err(what(&format!(
                            "row {r} stores {d} elements, more than the width {width} (use \
                             ell(width={width})+csr for the longer rows)"
                        )));
                    }
                }
                ell_csr_arguments(&e, *rest)
            }
            Layout::Bsr(b) => bsr_arguments(&csr, *b).map_err(|m| what(&m))?,
            Layout::Coo => {
                let size = |n: usize| ArgValue::Int(n as i64);
                HashMap::from([
                    ("a_coo".to_string(), f32_arg(csr.values.clone())),
                    ("rows_coo".to_string(), i32_arg(coo_rows(&csr.indptr))),
                    ("cols_coo".to_string(), i32_arg(csr.indices.clone())),
                    ("m_coo".to_string(), size(csr.rows)),
                    ("n_coo".to_string(), size(csr.cols)),
                    ("nnz_coo".to_string(), size(csr.indices.len())),
                ])
            }
        };
        Ok(self.renamed(canonical))
    }

    /// The layout as `run --decompose` spells it.
    pub fn layout_name(&self) -> String {
        match &self.layout {
            Layout::Hyb { parts, buckets } => {
                let b: Vec<String> = buckets.iter().map(|x| x.to_string()).collect();
                format!("hyb(parts={parts},buckets={})", b.join(","))
            }
            Layout::Bsr(b) => format!("bsr:{b}"),
            Layout::Ell { width, rest: false } => format!("ell(width={width})"),
            Layout::Ell { width, rest: true } => format!("ell(width={width})+csr"),
            Layout::Coo => "coo".into(),
        }
    }

    /// `canonical`'s parameters `<param>_<builder's rule name>` renamed after the rules'
    /// names in the decomposed function.
    fn renamed(&self, mut canonical: HashMap<String, ArgValue>) -> HashMap<String, ArgValue> {
        let mut out = HashMap::new();
        for (canon, actual, params) in &self.names {
            for p in params {
                if let Some(v) = canonical.remove(&format!("{p}_{canon}")) {
                    out.insert(format!("{p}_{actual}"), v);
                }
            }
        }
        out
    }
}

fn f32_arg(v: Vec<f32>) -> ArgValue {
    ArgValue::Array(Tensor {
        shape: vec![v.len()],
        data: TensorData::F32(v),
    })
}

/// The arrays of BSR with `b × b` blocks.
fn bsr_arguments(csr: &CsrData, b: usize) -> Result<HashMap<String, ArgValue>, String> {
    if b == 0 || !csr.rows.is_multiple_of(b) || !csr.cols.is_multiple_of(b) {
        return Err(format!(
            "the rows and columns must be multiples of the block size {b} (the decomposed \
             computation addresses every row and column of a stored block)"
        ));
    }
    let m = Csr::try_new(
        csr.rows,
        csr.cols,
        csr.indptr.clone(),
        csr.indices.clone(),
        csr.values.clone(),
        false,
    )
    .map_err(|e| e.to_string())?;
    let bsr: Bsr<f32, i32> =
        Bsr::from_csr(&m, (b, b), BsrPadding::Allow).map_err(|e| e.to_string())?;
    let s = b.to_string();
    let size = |n: usize| ArgValue::Int(n as i64);
    Ok(HashMap::from([
        (format!("a_{s}"), f32_arg(bsr.values().to_vec())),
        (format!("indptr_{s}"), i32_arg(bsr.indptr().to_vec())),
        (format!("indices_{s}"), i32_arg(bsr.indices().to_vec())),
        (format!("m_{s}"), size(csr.rows / b)),
        (format!("n_{s}"), size(csr.cols / b)),
        (format!("nnz_{s}"), size(bsr.nnz_blocks())),
    ]))
}

/// The CSR matrix bound to a buffer over `[I, J]` (`I` dense_fixed, `J` compressed_varied).
struct CsrData {
    rows: usize,
    cols: usize,
    indptr: Vec<i32>,
    indices: Vec<i32>,
    values: Vec<f32>,
}

impl CsrData {
    fn of(f: &PrimFunc, buffer: &str, args: &HashMap<String, ArgValue>) -> Result<Self, DataError> {
        let Some(b) = f.buffer_by_name(buffer) else {
            return fail(format!("`{}` has no buffer `{buffer}`", f.name));
        };
        let buf = &f.buffers[b];
        let not_csr = || {
            DataError(format!(
                "`{buffer}` is not a CSR matrix (a dense_fixed axis and a compressed_varied one)"
            ))
        };
        let [i, j] = buf.axes() else {
            return Err(not_csr());
        };
        let (ai, aj) = (&f.axes[*i], &f.axes[*j]);
        if ai.kind != AxisKind::DenseFixed || aj.kind != AxisKind::CompressedVaried {
            return Err(not_csr());
        }
        if buf.dtype != DType::F32 {
            return fail(format!(
                "`{buffer}` holds {}; the format builders store float32 values",
                buf.dtype
            ));
        }
        let param = |v: sparsetir_ir::VarId| -> Result<&ArgValue, DataError> {
            let name = &f.vars[v].name;
            args.get(name)
                .ok_or_else(|| DataError(format!("parameter `{name}` of `{buffer}` is not bound")))
        };
        let size = |e: &Expr| -> Result<usize, DataError> {
            let n = match e {
                Expr::Int(n, _) => Some(*n),
                Expr::Var(v) => match param(*v)? {
                    ArgValue::Int(n) => Some(*n),
                    _ => None,
                },
                _ => None,
            };
            n.and_then(|n| usize::try_from(n).ok())
                .ok_or_else(|| DataError(format!("a size of `{buffer}` is not a known integer")))
        };
        let array = |v: Option<sparsetir_ir::VarId>| -> Result<&Tensor, DataError> {
            match v.map(param).transpose()? {
                Some(ArgValue::Array(t)) => Ok(t),
                _ => Err(not_csr()),
            }
        };
        let ints = |t: &Tensor, what: &str| -> Result<Vec<i32>, DataError> {
            t.to_i64_vec()
                .into_iter()
                .map(|x| {
                    i32::try_from(x).map_err(|_| {
                        DataError(format!("`{buffer}`: {what} value {x} does not fit int32"))
                    })
                })
                .collect()
        };
        let values = match &array(buf.data_param())?.data {
            TensorData::F32(v) => v.clone(),
            _ => return Err(not_csr()),
        };
        Ok(CsrData {
            rows: size(&ai.length)?,
            cols: size(&aj.length)?,
            indptr: ints(array(aj.indptr)?, "indptr")?,
            indices: ints(array(aj.indices)?, "indices")?,
            values,
        })
    }
}
