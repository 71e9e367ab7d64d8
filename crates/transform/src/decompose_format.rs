//! `decompose_format` (SPEC §3.1, stage I → stage I): stores buffers additionally in the formats
//! of [`FormatRewriteRule`]s and computes on those formats instead.
//!
//! For each rule, in order, the pass
//! 1. appends the new format's parameters, axes and buffer to the function, suffixed `_<name>`
//!    (one new buffer `<buf>_<name>` per rewritten buffer `<buf>`, with the old buffer's dtype;
//!    a second rewritten buffer gets its own value parameter `<param>_<buf lowercase>_<name>`);
//! 2. emits a preprocess iteration `rewrite_<buf>_<name>` over the new buffer's axes (all `S`,
//!    annotated `{"preprocess": True}`) copying `new[v] = old[inv_idx_map(v)]` — unless
//!    `include_format_rewrite_blocks` is false; preprocess iterations come first in the body;
//! 3. replaces every top-level sparse iteration that reads a rewritten buffer by one clone per
//!    rule rewriting one of the buffers it reads, named `<iter>_<name>`.
//!
//! With more than one rule the function gets the attribute `composable = 1`.
//!
//! # Clones
//!
//! - **Iterators.** Each iterated axis named in `axis_map` is replaced, in place, by its new axes
//!   in `axis_map` order, every new iterator inheriting the old iterator's kind (so the RFC's
//!   `[I, J, K] "SRS"` with `I → [IO, II]`, `J → [JO, JI]` becomes `[IO, II, JO, JI, K] "SSRRS"`);
//!   other axes stay, with fresh iterator variables of the same names. New iterators are named
//!   after their axes in lower case (`io_4`).
//! - **Indices.** An access of a rewritten buffer whose indices are exactly the old iterators of
//!   `axes_before` is indexed by the new iterators directly (`A_4[io_4, jo_4, ii_4, ji_4]`); any
//!   other access of it goes through `idx_map`. Every other use of an old mapped iterator becomes
//!   its coordinate through `inv_idx_map` of the new iterators (`C[io_4 * 4 + ii_4, k]`).
//! - **Init.** A clone *covers* the output when every new axis replacing a spatial iterator is
//!   dense (it then visits every output point, like BSR: the RFC keeps the init in the clone).
//!   When the iteration has several clones (they all accumulate into the same output, and the
//!   init runs at every output point, also where a clone's reduction is empty) or one that does
//!   not cover it (hyb: a bucket holds a subset of the rows, and parts share rows), the init
//!   moves to one spatial iteration `<iter>_init` over the original spatial axes, placed before
//!   the clones, and the clones only accumulate.
//! - The original iteration is removed (the rules are expected to cover the whole matrix between
//!   them, as in the RFC and in hyb).
//!
//! Limits (reported as [`DecomposeError`]s): a rewritten buffer may only be read (never written)
//! by compute iterations; only top-level iterations (not nested in another iteration) may read
//! it; a fused or attached entry may not involve a mapped axis; every new axis must be iterated
//! by the clone.
//!
//! The preprocess copy reads the old buffer at the old coordinates of every stored element of the
//! new format: a padding slot of the new format must name a coordinate that is not stored in the
//! old buffer (it then copies the default value), otherwise it copies that element once more. The
//! padding builders of `sparsetir_formats` do so (hyb and ELL+CSR pad with a column their row
//! does not store; a hyb row that stores every column is cut into exactly filled buckets
//! instead, where the bucket widths allow it).

use std::collections::HashMap;

use sparsetir_ir::attrs::{AttrValue, Attrs};
use sparsetir_ir::{
    Axis, AxisId, Buffer, BufferDecl, BufferId, BufferShape, DType, Expr, IRModule, IterAxis,
    IterKind, PrimFunc, Span, SparseIteration, Stage, Stmt, Store, Var, VarId,
};

use crate::format_rule::{map_expr, subst_vars, FormatRewriteRule, RuleError};

/// Why [`decompose_format`] failed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum DecomposeError {
    /// The rule itself is malformed.
    #[error("rule `{rule}`: {error}")]
    Rule { rule: String, error: RuleError },
    /// Two rules share a name.
    #[error("two rules are named `{rule}`")]
    DuplicateRule { rule: String },
    /// A name the rule would add already exists in the function.
    #[error("rule `{rule}`: `{name}` already exists in function `{func}`")]
    NameClash {
        rule: String,
        func: String,
        name: String,
    },
    /// A buffer to rewrite is not a sparse buffer of the function.
    #[error("rule `{rule}`: function `{func}` has no sparse buffer `{buffer}`")]
    UnknownBuffer {
        rule: String,
        func: String,
        buffer: String,
    },
    /// The buffer's axes are not the rule's `axes_before`.
    #[error("rule `{rule}`: buffer `{buffer}` has axes {found:?}, the rule expects {expected:?}")]
    BufferAxes {
        rule: String,
        buffer: String,
        expected: Vec<String>,
        found: Vec<String>,
    },
    /// The clone or the preprocess copy cannot be built.
    #[error("rule `{rule}`, iteration `{iteration}`: {message}")]
    Iteration {
        rule: String,
        iteration: String,
        message: String,
        span: Span,
    },
}

impl DecomposeError {
    /// The source location, where known.
    pub fn span(&self) -> Span {
        match self {
            DecomposeError::Iteration { span, .. } => *span,
            DecomposeError::Rule { error, .. } => error.span(),
            _ => Span::default(),
        }
    }
}

/// [`decompose_format_func`] on every function of the module.
pub fn decompose_format(
    module: &IRModule,
    rules: &[FormatRewriteRule],
    include_format_rewrite_blocks: bool,
) -> Result<IRModule, DecomposeError> {
    let funcs = module
        .funcs
        .iter()
        .map(|f| decompose_format_func(f, rules, include_format_rewrite_blocks))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(IRModule { funcs })
}

/// Decomposes one function (see the module documentation). A function of another stage, or one
/// that has none of the buffers the rules rewrite, comes back unchanged.
pub fn decompose_format_func(
    func: &PrimFunc,
    rules: &[FormatRewriteRule],
    include_format_rewrite_blocks: bool,
) -> Result<PrimFunc, DecomposeError> {
    if func.stage() != Stage::I || rules.is_empty() {
        return Ok(func.clone());
    }
    for (k, r) in rules.iter().enumerate() {
        r.validate().map_err(|error| DecomposeError::Rule {
            rule: r.name.clone(),
            error,
        })?;
        if rules[..k].iter().any(|o| o.name == r.name) {
            return Err(DecomposeError::DuplicateRule {
                rule: r.name.clone(),
            });
        }
    }
    // A function holding none of the rewritten buffers is not concerned.
    if !rules.iter().any(|r| {
        r.buffers_to_rewrite
            .iter()
            .any(|b| func.buffer_by_name(b).is_some())
    }) {
        return Ok(func.clone());
    }
    let mut f = func.clone();
    let mut imported = Vec::new();
    let mut preprocess = Vec::new();
    for r in rules {
        let imp = import_rule(&mut f, r)?;
        if include_format_rewrite_blocks {
            for (old, new) in &imp.buffers {
                preprocess.push(Stmt::SparseIteration(Box::new(copy_iteration(
                    &mut f, r, &imp, *old, *new,
                )?)));
            }
        }
        imported.push(imp);
    }
    let body = std::mem::replace(&mut f.body, Stmt::empty());
    let body = rewrite_body(&mut f, rules, &imported, body, true)?;
    let mut all = preprocess;
    all.push(body);
    f.body = Stmt::seq(all);
    if rules.len() > 1 {
        f.attrs.set("composable", AttrValue::Int(1));
    }
    Ok(f)
}

/// What one rule added to the function.
struct Imported {
    /// Format variable → function variable.
    vars: HashMap<VarId, VarId>,
    /// Format axis name → function axis.
    axes: HashMap<String, AxisId>,
    /// (old buffer, new buffer), in `buffers_to_rewrite` order.
    buffers: Vec<(BufferId, BufferId)>,
    /// Old axis handle per position of `axes_before`.
    axes_before: Vec<AxisId>,
}

fn suffixed(name: &str, rule: &str) -> String {
    format!("{name}_{rule}")
}

fn clash(f: &PrimFunc, r: &FormatRewriteRule, name: &str) -> Result<(), DecomposeError> {
    let taken = f.params.iter().any(|p| f.vars[*p].name == name)
        || f.axis_by_name(name).is_some()
        || f.buffer_by_name(name).is_some();
    if taken {
        return Err(DecomposeError::NameClash {
            rule: r.name.clone(),
            func: f.name.clone(),
            name: name.to_string(),
        });
    }
    Ok(())
}

/// Step 1: parameters, axes and buffers of the new format, suffixed.
fn import_rule(f: &mut PrimFunc, r: &FormatRewriteRule) -> Result<Imported, DecomposeError> {
    let nf = &r.new_format;
    let mut olds = Vec::new();
    let mut axes_before = Vec::new();
    for bname in &r.buffers_to_rewrite {
        let b = f
            .buffer_by_name(bname)
            .filter(|b| f.buffers[*b].is_sparse())
            .ok_or_else(|| DecomposeError::UnknownBuffer {
                rule: r.name.clone(),
                func: f.name.clone(),
                buffer: bname.clone(),
            })?;
        let found: Vec<String> = f.buffers[b]
            .axes()
            .iter()
            .map(|a| f.axes[*a].name.clone())
            .collect();
        if found != r.axes_before {
            return Err(DecomposeError::BufferAxes {
                rule: r.name.clone(),
                buffer: bname.clone(),
                expected: r.axes_before.clone(),
                found,
            });
        }
        if axes_before.is_empty() {
            axes_before = f.buffers[b].axes().to_vec();
        }
        olds.push(b);
    }
    let mut vars = HashMap::new();
    for &p in &nf.params {
        let v = &nf.vars[p];
        let name = suffixed(&v.name, &r.name);
        clash(f, r, &name)?;
        let nv = f.add_var(name, v.dtype);
        f.params.push(nv);
        vars.insert(p, nv);
    }
    let missing = |what: &str| DecomposeError::Rule {
        rule: r.name.clone(),
        error: RuleError::Invalid {
            span: Span::default(),
            message: format!("the new format uses {what}, which is not one of its parameters"),
        },
    };
    let mut axes: HashMap<String, AxisId> = HashMap::new();
    let mut axis_of: HashMap<AxisId, AxisId> = HashMap::new();
    for (h, a) in nf.axes.iter() {
        let name = suffixed(&a.name, &r.name);
        clash(f, r, &name)?;
        let mut bad = None;
        let mut sub = |v: VarId| match vars.get(&v) {
            Some(n) => Some(Expr::Var(*n)),
            None => {
                bad = Some(v);
                None
            }
        };
        let length = subst_vars(&a.length, &mut sub);
        let nnz = a.nnz.as_ref().map(|e| subst_vars(e, &mut sub));
        let nnz_cols = a.nnz_cols.as_ref().map(|e| subst_vars(e, &mut sub));
        if let Some(v) = bad {
            return Err(missing(&format!("`{}`", nf.vars[v].name)));
        }
        let handle = |v: Option<VarId>| -> Result<Option<VarId>, DecomposeError> {
            match v {
                None => Ok(None),
                Some(v) => vars
                    .get(&v)
                    .copied()
                    .map(Some)
                    .ok_or_else(|| missing(&format!("`{}`", nf.vars[v].name))),
            }
        };
        let new = Axis {
            name: name.clone(),
            kind: a.kind,
            parent: a.parent.and_then(|p| axis_of.get(&p).copied()),
            length,
            nnz,
            nnz_cols,
            indptr: handle(a.indptr)?,
            indices: handle(a.indices)?,
            idtype: a.idtype,
            sorted: a.sorted,
            assembled: false,
            span: a.span,
        };
        let id = f.axes.append(new);
        axis_of.insert(h, id);
        axes.insert(a.name.clone(), id);
    }
    let fb_id = r.format_buffer().ok_or_else(|| missing("no buffer"))?;
    let fb = &nf.buffers[fb_id];
    let data = fb
        .data_param()
        .and_then(|d| vars.get(&d).copied())
        .ok_or_else(|| missing("a buffer not bound to a parameter"))?;
    let shape: Vec<AxisId> = fb
        .axes()
        .iter()
        .filter_map(|a| axis_of.get(a).copied())
        .collect();
    let mut buffers = Vec::new();
    for (k, &old) in olds.iter().enumerate() {
        let ob = f.buffers[old].clone();
        let name = suffixed(&ob.name, &r.name);
        clash(f, r, &name)?;
        let data = if k == 0 {
            data
        } else {
            let base = fb
                .data_param()
                .map(|d| nf.vars[d].name.clone())
                .unwrap_or_default();
            let pname = format!("{base}_{}_{}", ob.name.to_lowercase(), r.name);
            clash(f, r, &pname)?;
            let v = f.add_var(pname, DType::Handle);
            f.params.push(v);
            v
        };
        let nb = Buffer {
            name,
            decl: BufferDecl::Match { data },
            shape: BufferShape::Sparse(shape.clone()),
            dtype: ob.dtype,
            scope: "global".to_string(),
            strides: Vec::new(),
            extra_storage: None,
            default_value: ob.default_value.clone(),
            span: fb.span,
        };
        let id = f.buffers.append(nb);
        f.buffer_decls.push(id);
        buffers.push((old, id));
    }
    Ok(Imported {
        vars,
        axes,
        buffers,
        axes_before,
    })
}

fn iter_err(r: &FormatRewriteRule, it: &str, span: Span, m: impl Into<String>) -> DecomposeError {
    DecomposeError::Iteration {
        rule: r.name.clone(),
        iteration: it.to_string(),
        message: m.into(),
        span,
    }
}

/// Resolves a symbol of an index map: a scalar parameter of the format, as imported.
fn sym_of<'a>(
    r: &'a FormatRewriteRule,
    imp: &'a Imported,
) -> impl FnMut(&str) -> Option<Expr> + 'a {
    move |s: &str| {
        let v = r.new_format.param(s)?;
        imp.vars.get(&v).map(|n| Expr::Var(*n))
    }
}

fn fresh(f: &mut PrimFunc, name: &str, dtype: DType) -> VarId {
    f.vars.append(Var {
        name: name.to_string(),
        dtype,
    })
}

/// Step 2: `rewrite_<buf>_<name>`, copying the old buffer into the new one.
fn copy_iteration(
    f: &mut PrimFunc,
    r: &FormatRewriteRule,
    imp: &Imported,
    old: BufferId,
    new: BufferId,
) -> Result<SparseIteration, DecomposeError> {
    let name = format!("rewrite_{}", f.buffers[new].name);
    let axes = f.buffers[new].axes().to_vec();
    let mut vars = Vec::new();
    let mut by_axis: HashMap<AxisId, VarId> = HashMap::new();
    for &a in &axes {
        let ax = &f.axes[a];
        let (vname, dt) = (ax.name.to_lowercase(), ax.idtype);
        let v = fresh(f, &vname, dt);
        vars.push(v);
        by_axis.insert(a, v);
    }
    let args = after_args(r, imp, &by_axis).map_err(|m| iter_err(r, &name, Span::default(), m))?;
    let coords = r
        .inv_idx_map
        .apply(&args, &mut sym_of(r, imp))
        .map_err(|m| iter_err(r, &name, Span::default(), m))?;
    let body = Stmt::Store(Store {
        buffer: new,
        indices: vars.iter().map(|v| Expr::Var(*v)).collect(),
        value: Expr::load(old, coords),
        span: Span::default(),
    });
    let mut annotations = Attrs::new();
    annotations.set("preprocess", AttrValue::Bool(true));
    Ok(SparseIteration {
        name,
        axes: axes.iter().map(|a| IterAxis::Axis(*a)).collect(),
        kinds: vec![IterKind::Spatial; axes.len()],
        vars,
        init: None,
        body,
        annotations,
        span: Span::default(),
    })
}

/// The arguments of `inv_idx_map` (one per `axes_after`): the iterators of the new axes.
fn after_args(
    r: &FormatRewriteRule,
    imp: &Imported,
    by_axis: &HashMap<AxisId, VarId>,
) -> Result<Vec<Expr>, String> {
    r.axes_after
        .iter()
        .map(|n| {
            imp.axes
                .get(n)
                .and_then(|a| by_axis.get(a))
                .map(|v| Expr::Var(*v))
                .ok_or_else(|| {
                    format!(
                        "new axis `{}` is not iterated (give it an `axis_map` entry)",
                        suffixed(n, &r.name)
                    )
                })
        })
        .collect()
}

/// Step 3 over a statement list: replaces the iterations that read a rewritten buffer.
fn rewrite_body(
    f: &mut PrimFunc,
    rules: &[FormatRewriteRule],
    imported: &[Imported],
    s: Stmt,
    top: bool,
) -> Result<Stmt, DecomposeError> {
    match s {
        Stmt::Seq(v) => {
            let mut out = Vec::new();
            for s in v {
                out.push(rewrite_body(f, rules, imported, s, top)?);
            }
            Ok(Stmt::seq(out))
        }
        Stmt::SparseIteration(it) => {
            let applicable: Vec<(usize, usize)> = rules
                .iter()
                .enumerate()
                .flat_map(|(k, _)| {
                    imported[k]
                        .buffers
                        .iter()
                        .enumerate()
                        .filter(|(_, (old, _))| reads(&it, *old))
                        .map(move |(b, _)| (k, b))
                })
                .collect();
            for (k, imp) in imported.iter().enumerate() {
                for (old, _) in &imp.buffers {
                    if writes(&it, *old) {
                        return Err(iter_err(
                            &rules[k],
                            &it.name,
                            it.span,
                            format!(
                                "writes the rewritten buffer `{}` (only read buffers can be \
                                 rewritten)",
                                f.buffers[*old].name
                            ),
                        ));
                    }
                }
            }
            if applicable.is_empty() {
                // Nested iterations may not read a rewritten buffer either.
                let mut nested_reads = None;
                it.body.visit(&mut |s| {
                    if let Stmt::SparseIteration(inner) = s {
                        for (k, imp) in imported.iter().enumerate() {
                            if imp.buffers.iter().any(|(o, _)| reads(inner, *o)) {
                                nested_reads.get_or_insert((k, inner.name.clone(), inner.span));
                            }
                        }
                    }
                });
                if let Some((k, name, span)) = nested_reads {
                    return Err(iter_err(
                        &rules[k],
                        &name,
                        span,
                        "a nested iteration reads a rewritten buffer (only top-level iterations \
                         are decomposed)",
                    ));
                }
                return Ok(Stmt::SparseIteration(it));
            }
            if !top {
                let (k, _) = applicable[0];
                return Err(iter_err(
                    &rules[k],
                    &it.name,
                    it.span,
                    "only top-level iterations are decomposed",
                ));
            }
            for &(k, b) in &applicable {
                let old = imported[k].buffers[b].0;
                if let Err(m) = by_parts(f, &it, old) {
                    return Err(iter_err(&rules[k], &it.name, it.span, m));
                }
            }
            let mut clones = Vec::new();
            let mut covers = true;
            for &(k, b) in &applicable {
                let (c, cov) = clone_iteration(f, &rules[k], &imported[k], b, &it)?;
                covers &= cov;
                clones.push(c);
            }
            let mut out = Vec::new();
            if !covers || clones.len() > 1 {
                if let Some(init) = &it.init {
                    out.push(Stmt::SparseIteration(Box::new(init_iteration(
                        f,
                        &rules[applicable[0].0],
                        &it,
                        init,
                    )?)));
                }
                for c in &mut clones {
                    c.init = None;
                }
            }
            out.extend(
                clones
                    .into_iter()
                    .map(|c| Stmt::SparseIteration(Box::new(c))),
            );
            Ok(Stmt::seq(out))
        }
        other => {
            // Iterations below other statements (e.g. an `if`) are not decomposed.
            let mut bad = None;
            other.visit(&mut |s| {
                if let Stmt::SparseIteration(inner) = s {
                    for (k, imp) in imported.iter().enumerate() {
                        if imp.buffers.iter().any(|(o, _)| reads(inner, *o)) {
                            bad.get_or_insert((k, inner.name.clone(), inner.span));
                        }
                    }
                }
            });
            if let Some((k, name, span)) = bad {
                return Err(iter_err(
                    &rules[k],
                    &name,
                    span,
                    "only iterations at the top level of the body are decomposed",
                ));
            }
            Ok(other)
        }
    }
}

/// Whether iteration `it` gives the same result computed by parts: each clone walks only its
/// format's elements (and a padded format's padding, whose value is the default 0), and the
/// clones accumulate into the same outputs. That holds when every store of the body adds
/// (`O[x] = O[x] + e`, `O[x] = e + O[x]`, `O[x] = O[x] - e`) a term `e` that is 0 where the
/// rewritten buffer `b`'s element at the iteration's own coordinates is 0 (a product with it as
/// a factor, negated or cast), and `b` is read nowhere else: a read of `b` at other
/// coordinates would find only the elements of one part.
fn by_parts(f: &PrimFunc, it: &SparseIteration, b: BufferId) -> Result<(), String> {
    use sparsetir_ir::{BinOp, UnOp};
    let name = &f.buffers[b].name;
    // The iterator bound to each axis the iteration walks (co-iterations bind none of theirs).
    let mut var_of: HashMap<AxisId, VarId> = HashMap::new();
    let mut k = 0;
    for entry in &it.axes {
        let n = entry.arity();
        if !matches!(entry, IterAxis::CoIter { .. }) {
            for (a, v) in entry.axes().into_iter().zip(it.vars.iter().skip(k)) {
                var_of.insert(a, *v);
            }
        }
        k += n;
    }
    let expected: Option<Vec<VarId>> = match &f.buffers[b].shape {
        BufferShape::Sparse(axes) => axes.iter().map(|a| var_of.get(a).copied()).collect(),
        BufferShape::Dense(_) => None,
    };
    if expected.is_none() {
        // An axis of `b` the iteration does not walk: the clone reports it.
        return Ok(());
    }
    let own = |e: &Expr| match (e, &expected) {
        (Expr::Load { buffer, indices }, Some(want)) if *buffer == b => {
            indices.len() == want.len()
                && indices
                    .iter()
                    .zip(want)
                    .all(|(i, v)| i.as_var() == Some(*v))
        }
        _ => false,
    };
    fn vanishes(e: &Expr, own: &dyn Fn(&Expr) -> bool) -> bool {
        if own(e) {
            return true;
        }
        match e {
            Expr::Binary(BinOp::Mul, x, y) => vanishes(x, own) || vanishes(y, own),
            Expr::Binary(BinOp::Add | BinOp::Sub, x, y) => vanishes(x, own) && vanishes(y, own),
            Expr::Unary(UnOp::Neg, x) | Expr::Cast(_, x) => vanishes(x, own),
            _ => false,
        }
    }
    let mut failure: Option<String> = None;
    let mut fail = |m: String| {
        failure.get_or_insert(m);
    };
    let mut other_reads = 0usize;
    let mut own_reads = 0usize;
    // Reads of `b` in `e`; at its own coordinates they count only in a stored value.
    let mut tally = |e: &Expr, in_value: bool| {
        e.visit(&mut |x| {
            if matches!(x, Expr::Load { buffer, .. } if *buffer == b) {
                if in_value && own(x) {
                    own_reads += 1;
                } else {
                    other_reads += 1;
                }
            }
        })
    };
    it.body.visit(&mut |s| {
        let Stmt::Store(st) = s else {
            s.for_each_expr(|e| tally(e, false));
            return;
        };
        st.indices.iter().for_each(|i| tally(i, false));
        tally(&st.value, true);
        let acc = Expr::load(st.buffer, st.indices.clone());
        let term = match &st.value {
            Expr::Binary(BinOp::Add, x, y) if **x == acc => Some(&**y),
            Expr::Binary(BinOp::Add, x, y) if **y == acc => Some(&**x),
            Expr::Binary(BinOp::Sub, x, y) if **x == acc => Some(&**y),
            _ => None,
        };
        match term {
            Some(t) if vanishes(t, &own) => {}
            _ => fail(format!(
                "store to `{}`: a decomposed iteration must accumulate (`{0}[...] = {0}[...] + e`) \
                 a term that is 0 where `{name}`'s element is 0 (a product with it), so that \
                 its parts, padding included, add up to the whole",
                f.buffers[st.buffer].name
            )),
        }
    });
    if other_reads > 0 {
        return Err(format!(
            "reads `{name}` at coordinates other than the iteration's own: each part holds only \
             some of its elements"
        ));
    }
    match failure {
        Some(m) => Err(m),
        None if own_reads == 0 => Err(format!("does not read `{name}`'s own elements")),
        None => Ok(()),
    }
}

/// Whether the iteration (init and body, own level only) loads `b`.
fn reads(it: &SparseIteration, b: BufferId) -> bool {
    let mut found = false;
    let mut check = |s: &Stmt| {
        if matches!(s, Stmt::SparseIteration(_)) {
            return;
        }
        s.for_each_expr(|e| {
            e.visit(&mut |x| {
                found |= matches!(x, Expr::Load { buffer, .. } if *buffer == b);
            })
        });
    };
    for root in it.init.iter().chain(std::iter::once(&it.body)) {
        visit_own(root, &mut check);
    }
    found
}

/// Whether the iteration (init and body, own level only) stores into `b`.
fn writes(it: &SparseIteration, b: BufferId) -> bool {
    let mut found = false;
    for root in it.init.iter().chain(std::iter::once(&it.body)) {
        visit_own(root, &mut |s| {
            found |= matches!(s, Stmt::Store(st) if st.buffer == b);
        });
    }
    found
}

/// Visits `s` and its descendants, not entering nested sparse iterations.
fn visit_own(s: &Stmt, f: &mut dyn FnMut(&Stmt)) {
    f(s);
    if matches!(s, Stmt::SparseIteration(_)) {
        return;
    }
    s.for_each_child(|c| visit_own(c, f));
}

/// One clone `<iter>_<name>` of `it` on the new format of rule `r` (buffer `b` of the rule), and
/// whether it covers every output point (see the module documentation).
fn clone_iteration(
    f: &mut PrimFunc,
    r: &FormatRewriteRule,
    imp: &Imported,
    b: usize,
    it: &SparseIteration,
) -> Result<(SparseIteration, bool), DecomposeError> {
    let name = suffixed(&it.name, &r.name);
    let (old_buf, new_buf) = imp.buffers[b];
    let err = |m: String| iter_err(r, &it.name, it.span, m);
    let mut axes = Vec::new();
    let mut kinds = Vec::new();
    let mut vars = Vec::new();
    let mut by_axis: HashMap<AxisId, VarId> = HashMap::new();
    // Old iterator → replacement (unmapped) or position in axes_before (mapped).
    let mut unmapped: HashMap<VarId, VarId> = HashMap::new();
    let mut mapped: HashMap<VarId, usize> = HashMap::new();
    let mut covers = true;
    let mut vi = 0usize;
    for entry in &it.axes {
        let entry_axes = entry.axes();
        let mapping = |a: AxisId| {
            r.axis_map
                .iter()
                .find(|(old, _)| *old == f.axes[a].name && imp.axes_before.contains(&a))
        };
        match entry {
            IterAxis::Axis(a) if mapping(*a).is_some() => {
                let (old_name, news) = mapping(*a).cloned().unwrap_or_default();
                let old_var = it.vars[vi];
                let kind = it.kinds[vi];
                vi += 1;
                let pos = r
                    .axes_before
                    .iter()
                    .position(|n| *n == old_name)
                    .ok_or_else(|| err(format!("axis `{old_name}` is not in axes_before")))?;
                mapped.insert(old_var, pos);
                for n in &news {
                    let na = *imp
                        .axes
                        .get(n)
                        .ok_or_else(|| err(format!("the new format has no axis `{n}`")))?;
                    let ax = &f.axes[na];
                    if kind == IterKind::Spatial && !ax.kind.is_dense() {
                        covers = false;
                    }
                    let (vname, dt) = (ax.name.to_lowercase(), ax.idtype);
                    let v = fresh(f, &vname, dt);
                    axes.push(IterAxis::Axis(na));
                    kinds.push(kind);
                    vars.push(v);
                    by_axis.insert(na, v);
                }
            }
            _ => {
                if entry_axes.iter().any(|a| mapping(*a).is_some())
                    || matches!(entry, IterAxis::Attach { parent, .. } if mapping(*parent).is_some())
                {
                    return Err(err(
                        "a fused or attached entry involves an axis the rule maps".to_string(),
                    ));
                }
                axes.push(entry.clone());
                for _ in 0..entry.arity() {
                    let old = it.vars[vi];
                    let (vname, dt) = (f.vars[old].name.clone(), f.vars[old].dtype);
                    let v = fresh(f, &vname, dt);
                    unmapped.insert(old, v);
                    kinds.push(it.kinds[vi]);
                    vars.push(v);
                    vi += 1;
                }
            }
        }
    }
    if mapped.len() != r.axis_map.len() {
        let missing: Vec<&str> = r
            .axis_map
            .iter()
            .filter(|(n, _)| {
                !mapped
                    .values()
                    .any(|p| r.axes_before.get(*p).is_some_and(|b| b == n))
            })
            .map(|(n, _)| n.as_str())
            .collect();
        return Err(err(format!(
            "reads `{}` but does not iterate the mapped axes {missing:?}",
            f.buffers[old_buf].name
        )));
    }
    let args = after_args(r, imp, &by_axis).map_err(err)?;
    let old_coords = r
        .inv_idx_map
        .apply(&args, &mut sym_of(r, imp))
        .map_err(err)?;
    let new_axes = f.buffers[new_buf].axes().to_vec();
    let direct: Option<Vec<Expr>> = new_axes
        .iter()
        .map(|a| by_axis.get(a).map(|v| Expr::Var(*v)))
        .collect();
    // Permutation from the order of axes_after to the buffer's axis order.
    let perm: Vec<usize> = new_axes
        .iter()
        .filter_map(|a| {
            let n = r.axes_after.iter().position(|x| imp.axes.get(x) == Some(a));
            n
        })
        .collect();
    let mut rw = CloneRewriter {
        r,
        imp,
        mapped: &mapped,
        unmapped: &unmapped,
        old_coords: &old_coords,
        old_buf,
        new_buf,
        direct,
        perm,
        failure: None,
    };
    let body = map_stmt(&it.body, &mut |e| rw.expr(e));
    let init = it.init.as_ref().map(|s| map_stmt(s, &mut |e| rw.expr(e)));
    let failure = rw.failure;
    if let Some(m) = failure {
        return Err(err(m));
    }
    Ok((
        SparseIteration {
            name,
            axes,
            kinds,
            vars,
            init,
            body,
            annotations: it.annotations.clone(),
            span: it.span,
        },
        covers,
    ))
}

/// `<iter>_init`: the init of `it` over its spatial axes, run before the clones.
fn init_iteration(
    f: &mut PrimFunc,
    r: &FormatRewriteRule,
    it: &SparseIteration,
    init: &Stmt,
) -> Result<SparseIteration, DecomposeError> {
    let mut axes = Vec::new();
    let mut vars = Vec::new();
    let mut sub: HashMap<VarId, VarId> = HashMap::new();
    let mut kept: Vec<AxisId> = Vec::new();
    let mut vi = 0usize;
    for entry in &it.axes {
        let n = entry.arity();
        let spatial = (vi..vi + n).all(|k| it.kinds.get(k) == Some(&IterKind::Spatial));
        if spatial {
            for a in entry.axes() {
                let parent = match entry {
                    IterAxis::Attach { parent, .. } => Some(*parent),
                    IterAxis::Fuse(chain) if chain.first() != Some(&a) => None,
                    _ => f.axes[a].parent,
                };
                if let Some(p) = parent {
                    if !kept.contains(&p) && it.axes.iter().any(|e| e.axes().contains(&p)) {
                        return Err(iter_err(
                            r,
                            &it.name,
                            it.span,
                            format!(
                                "its init cannot move to a spatial iteration: spatial axis `{}` \
                                 hangs under a reduction axis",
                                f.axes[a].name
                            ),
                        ));
                    }
                }
                kept.push(a);
            }
            axes.push(entry.clone());
            for k in vi..vi + n {
                let old = it.vars[k];
                let (name, dt) = (f.vars[old].name.clone(), f.vars[old].dtype);
                let v = fresh(f, &name, dt);
                sub.insert(old, v);
                vars.push(v);
            }
        }
        vi += n;
    }
    let mut rename = |e: &Expr| subst_vars(e, &mut |v| sub.get(&v).map(|n| Expr::Var(*n)));
    let body = map_stmt(init, &mut rename);
    Ok(SparseIteration {
        name: format!("{}_init", it.name),
        kinds: vec![IterKind::Spatial; vars.len()],
        axes,
        vars,
        init: None,
        body,
        annotations: Attrs::new(),
        span: it.span,
    })
}

/// Rewrites the expressions of a clone (see the module documentation).
struct CloneRewriter<'a> {
    r: &'a FormatRewriteRule,
    imp: &'a Imported,
    /// Old mapped iterator → its position in `axes_before`.
    mapped: &'a HashMap<VarId, usize>,
    /// Old unmapped iterator → its fresh twin.
    unmapped: &'a HashMap<VarId, VarId>,
    /// The old coordinates (`inv_idx_map` of the new iterators), in `axes_before` order.
    old_coords: &'a [Expr],
    old_buf: BufferId,
    new_buf: BufferId,
    /// The new iterators in the new buffer's axis order, when all are iterated.
    direct: Option<Vec<Expr>>,
    /// For each axis of the new buffer, its position in `axes_after`.
    perm: Vec<usize>,
    failure: Option<String>,
}

impl CloneRewriter<'_> {
    fn expr(&mut self, e: &Expr) -> Expr {
        match e {
            Expr::Var(v) => {
                if let Some(p) = self.mapped.get(v) {
                    if let Some(c) = self.old_coords.get(*p) {
                        return c.clone();
                    }
                }
                match self.unmapped.get(v) {
                    Some(n) => Expr::Var(*n),
                    None => e.clone(),
                }
            }
            Expr::Load { buffer, indices } if *buffer == self.old_buf => {
                let is_direct = indices.len() == self.r.axes_before.len()
                    && indices
                        .iter()
                        .enumerate()
                        .all(|(k, ix)| ix.as_var().and_then(|v| self.mapped.get(&v)) == Some(&k));
                if is_direct {
                    if let Some(d) = &self.direct {
                        return Expr::load(self.new_buf, d.clone());
                    }
                }
                let olds: Vec<Expr> = indices.iter().map(|i| self.expr(i)).collect();
                let (r, imp) = (self.r, self.imp);
                match r.idx_map.apply(&olds, &mut sym_of(r, imp)) {
                    Ok(news) => Expr::load(
                        self.new_buf,
                        self.perm
                            .iter()
                            .filter_map(|p| news.get(*p).cloned())
                            .collect(),
                    ),
                    Err(m) => {
                        self.failure.get_or_insert(m);
                        e.clone()
                    }
                }
            }
            _ => map_children(e, &mut |c| self.expr(c)),
        }
    }
}

fn map_children(e: &Expr, g: &mut dyn FnMut(&Expr) -> Expr) -> Expr {
    let mut first = true;
    map_expr(e, &mut |x| {
        if first {
            first = false;
            None
        } else {
            Some(g(x))
        }
    })
}

/// Rebuilds a statement, mapping every expression (and the indices of stores) with `g`; stores
/// into nothing else change. Nested iterations are copied as they are.
fn map_stmt(s: &Stmt, g: &mut dyn FnMut(&Expr) -> Expr) -> Stmt {
    match s {
        Stmt::Seq(v) => Stmt::Seq(v.iter().map(|x| map_stmt(x, g)).collect()),
        Stmt::Store(st) => Stmt::Store(Store {
            buffer: st.buffer,
            indices: st.indices.iter().map(&mut *g).collect(),
            value: g(&st.value),
            span: st.span,
        }),
        Stmt::If(i) => Stmt::If(Box::new(sparsetir_ir::IfThenElse {
            cond: g(&i.cond),
            then_case: map_stmt(&i.then_case, g),
            else_case: i.else_case.as_ref().map(|e| map_stmt(e, g)),
            span: i.span,
        })),
        Stmt::Evaluate(e) => Stmt::Evaluate(g(e)),
        Stmt::Let(l) => Stmt::Let(Box::new(sparsetir_ir::LetStmt {
            var: l.var,
            value: g(&l.value),
            body: map_stmt(&l.body, g),
            span: l.span,
        })),
        Stmt::AssumeBufferDomain {
            buffer,
            lo,
            hi,
            span,
        } => Stmt::AssumeBufferDomain {
            buffer: *buffer,
            lo: g(lo),
            hi: g(hi),
            span: *span,
        },
        other => other.clone(),
    }
}
