//! `horizontal_fuse` (stage III): fuses the sibling loop nests of a function (typically the
//! per-format compute nests of a composable function) into one, so they run as one GPU launch
//! or one OpenMP parallel region whose threads are balanced across the parts (SPEC §3.5).
//!
//! # Selecting the form
//!
//! The pass acts on functions with the attribute `horizontal_fuse`:
//!
//! | value | form |
//! |---|---|
//! | `"gpu"` | GPU: fuse top-level `T.thread_binding(..., thread="blockIdx.x")` loops |
//! | `"cpu"` | CPU: fuse top-level `T.parallel` loops |
//! | `True`, `1` or `"auto"` | GPU when a top-level loop is bound to `blockIdx.x`, CPU else |
//! | `False`, `0` | nothing |
//!
//! Any other value is a [`LowerError::Invalid`]. The attribute stays on the function.
//!
//! # What is fused
//!
//! The *parts* are maximal runs of consecutive top-level statements that are loops of the
//! selected kind (another statement between two loops separates them). A run is cut before a
//! loop that reads a buffer an earlier loop of the run writes, or writes a buffer an earlier
//! loop reads (parts run concurrently once fused); buffers allocated inside a part and the
//! element a store reads back (`C[i] = C[i] + v`, `atomic_add(C[i], v)`) do not count as reads.
//! Several parts may write the same buffer: like SparseTIR, the pass assumes the parts write
//! disjoint elements or update shared ones atomically (see [`crate::lower_atomic()`]).
//!
//! A run of parts `for v_k in [m_k, m_k + e_k)` becomes one loop over `[0, e_0 + ... + e_{n-1})`
//! whose body is an `if`/`elif` chain on the fused index `f`: part `k` runs when
//! `f < e_0 + ... + e_k`, with `v_k = f - (e_0 + ... + e_{k-1}) + m_k`. The fused loop keeps the
//! parts' annotations when they all agree (else it has none, i.e. the default OpenMP schedule).
//! The extents must be loop-invariant (constants and scalar parameters) and non-negative.
//!
//! In the GPU form, every other thread tag (`threadIdx.x`, `blockIdx.y`, ...) used inside the
//! parts gets the maximum of the parts' extents (one launch has one block shape): a loop with a
//! smaller extent is padded to the maximum and its body guarded by `t < min + extent`; a part
//! that does not use a tag at all is wrapped in a loop bound to that tag whose body runs only
//! for `t == 0`. Those extents must be loop-invariant too, and a part may not contain another
//! `blockIdx.x` loop.

use std::collections::{HashMap, HashSet};

use sparsetir_arith::simplify;
use sparsetir_ir::{
    AttrValue, Attrs, BinOp, BufferId, Expr, For, ForKind, IRModule, IfThenElse, Intrinsic,
    PrimFunc, Span, Stage, Stmt,
};

use crate::remove_unused_args::{collect_vars, subst_vars, walk_exprs_mut, walk_stmts_mut};
use crate::LowerError;

/// The function attribute that requests horizontal fusion.
pub const HORIZONTAL_FUSE_ATTR: &str = "horizontal_fuse";

/// The thread tag whose loops the GPU form concatenates.
const BLOCK_X: &str = "blockIdx.x";

/// The two forms of [`horizontal_fuse`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FuseForm {
    /// Fuse top-level `T.parallel` loops into one parallel loop.
    Cpu,
    /// Fuse top-level `blockIdx.x` loops into one launch.
    Gpu,
}

/// The form [`horizontal_fuse`] applies to `func` (`None`: the function does not ask for
/// fusion, or is not at stage III).
pub fn fuse_form(func: &PrimFunc) -> Result<Option<FuseForm>, LowerError> {
    if func.stage() != Stage::III {
        return Ok(None);
    }
    let auto = || {
        let gpu = top_level(&func.body)
            .iter()
            .any(|s| is_part(s, FuseForm::Gpu));
        Some(if gpu { FuseForm::Gpu } else { FuseForm::Cpu })
    };
    Ok(match func.attrs.get(HORIZONTAL_FUSE_ATTR) {
        None | Some(AttrValue::Bool(false)) | Some(AttrValue::Int(0)) => None,
        Some(AttrValue::Bool(true)) | Some(AttrValue::Int(1)) => auto(),
        Some(AttrValue::Str(s)) if s == "auto" => auto(),
        Some(AttrValue::Str(s)) if s == "cpu" => Some(FuseForm::Cpu),
        Some(AttrValue::Str(s)) if s == "gpu" => Some(FuseForm::Gpu),
        Some(other) => {
            return Err(LowerError::Invalid {
                span: func.span,
                message: format!(
                    "attribute `{HORIZONTAL_FUSE_ATTR}` of `{}` must be \"cpu\", \"gpu\", \
                     \"auto\", True or False, got {other:?}",
                    func.name
                ),
            })
        }
    })
}

/// Fuses the sibling top-level loop nests of `func` (see the module documentation). A no-op on
/// functions without the `horizontal_fuse` attribute or not at stage III.
pub fn horizontal_fuse(func: &PrimFunc) -> Result<PrimFunc, LowerError> {
    let Some(form) = fuse_form(func)? else {
        return Ok(func.clone());
    };
    let mut out = func.clone();
    let items = match std::mem::replace(&mut out.body, Stmt::empty()) {
        Stmt::Seq(items) => items,
        single => {
            out.body = single;
            return Ok(out);
        }
    };
    let mut result = Vec::new();
    let mut run: Vec<(For, Access)> = Vec::new();
    for item in items {
        match item {
            Stmt::For(l) if is_part_loop(&l, form) => {
                let acc = access(&Stmt::For(l.clone()));
                if run.iter().any(|(_, a)| a.conflicts(&acc)) {
                    result.push(flush(&mut out, std::mem::take(&mut run), form)?);
                }
                run.push((*l, acc));
            }
            other => {
                if !run.is_empty() {
                    result.push(flush(&mut out, std::mem::take(&mut run), form)?);
                }
                result.push(other);
            }
        }
    }
    if !run.is_empty() {
        result.push(flush(&mut out, run, form)?);
    }
    out.body = Stmt::Seq(result);
    Ok(out)
}

/// [`horizontal_fuse`] on every function of `module`.
pub fn horizontal_fuse_module(module: &IRModule) -> Result<IRModule, LowerError> {
    let funcs = module
        .funcs
        .iter()
        .map(horizontal_fuse)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(IRModule { funcs })
}

fn top_level(body: &Stmt) -> &[Stmt] {
    match body {
        Stmt::Seq(items) => items,
        single => std::slice::from_ref(single),
    }
}

fn is_part(s: &Stmt, form: FuseForm) -> bool {
    matches!(s, Stmt::For(l) if is_part_loop(l, form))
}

fn is_part_loop(l: &For, form: FuseForm) -> bool {
    match form {
        FuseForm::Cpu => l.kind == ForKind::Parallel,
        FuseForm::Gpu => l.kind == ForKind::ThreadBinding && l.thread.as_deref() == Some(BLOCK_X),
    }
}

/// The buffers a part writes and reads (see the module documentation for what is left out).
#[derive(Default)]
struct Access {
    writes: HashSet<BufferId>,
    reads: HashSet<BufferId>,
}

impl Access {
    fn conflicts(&self, other: &Access) -> bool {
        !self.writes.is_disjoint(&other.reads) || !other.writes.is_disjoint(&self.reads)
    }
}

fn access(s: &Stmt) -> Access {
    let mut acc = Access::default();
    let mut local = HashSet::new();
    s.visit(&mut |st| {
        match st {
            Stmt::Block(b) => local.extend(b.alloc_buffers.iter().copied()),
            Stmt::Allocate(b) => {
                local.insert(*b);
            }
            _ => {}
        }
        match st {
            Stmt::Store(x) => {
                acc.writes.insert(x.buffer);
                let target = Expr::load(x.buffer, x.indices.clone());
                x.indices
                    .iter()
                    .for_each(|i| reads(i, None, &mut acc.reads, &mut acc.writes));
                reads(&x.value, Some(&target), &mut acc.reads, &mut acc.writes);
            }
            _ => st.for_each_expr(|e| reads(e, None, &mut acc.reads, &mut acc.writes)),
        }
    });
    acc.writes.retain(|b| !local.contains(b));
    acc.reads.retain(|b| !local.contains(b));
    acc
}

/// Collects the buffers `e` loads into `out` (except `target`, the element a store reads back,
/// and the element an `atomic_add` updates, which goes into `writes`).
fn reads(
    e: &Expr,
    target: Option<&Expr>,
    out: &mut HashSet<BufferId>,
    writes: &mut HashSet<BufferId>,
) {
    match e {
        Expr::Call {
            op: Intrinsic::AtomicAdd,
            args,
            ..
        } => {
            for (k, a) in args.iter().enumerate() {
                match a {
                    Expr::Load { buffer, indices } if k == 0 => {
                        writes.insert(*buffer);
                        indices.iter().for_each(|i| reads(i, target, out, writes));
                    }
                    _ => reads(a, target, out, writes),
                }
            }
        }
        Expr::Load { buffer, indices } => {
            if target != Some(e) {
                out.insert(*buffer);
            }
            indices.iter().for_each(|i| reads(i, target, out, writes));
        }
        _ => e.for_each_child(|c| reads(c, target, out, writes)),
    }
}

/// One part alone stays as it is; two or more are fused.
fn flush(func: &mut PrimFunc, run: Vec<(For, Access)>, form: FuseForm) -> Result<Stmt, LowerError> {
    let mut loops: Vec<For> = run.into_iter().map(|(l, _)| l).collect();
    if loops.len() == 1 {
        return Ok(Stmt::For(Box::new(loops.remove(0))));
    }
    fuse(func, loops, form)
}

fn unsupported(span: Span, message: String) -> LowerError {
    LowerError::Unsupported { span, message }
}

/// Checks that `e` mentions only scalar parameters.
fn invariant(func: &PrimFunc, e: &Expr, what: &str, span: Span) -> Result<(), LowerError> {
    let mut vars = HashSet::new();
    collect_vars(e, &mut vars);
    if let Some(v) = vars.iter().find(|v| !func.params.contains(v)) {
        let name = func.vars.get(*v).map(|x| x.name.as_str()).unwrap_or("?");
        return Err(unsupported(
            span,
            format!(
                "horizontal_fuse: the {what} depends on `{name}`; fused extents must be \
                 constants or scalar parameters"
            ),
        ));
    }
    Ok(())
}

fn fuse(func: &mut PrimFunc, loops: Vec<For>, form: FuseForm) -> Result<Stmt, LowerError> {
    for l in &loops {
        let what = format!("extent of loop `{}`", func.vars[l.var].name);
        invariant(func, &l.extent, &what, l.span)?;
        invariant(func, &l.min, &what, l.span)?;
    }
    let first = &loops[0];
    let span = first.span;
    let annotations = if loops.iter().all(|l| l.annotations == first.annotations) {
        first.annotations.clone()
    } else {
        Attrs::new()
    };
    let dtype = func.vars[first.var].dtype;
    let name = format!("{}_fused", func.vars[first.var].name);
    let fused = func.add_var(name, dtype);
    let mut bodies: Vec<Stmt> = Vec::with_capacity(loops.len());
    let mut bounds: Vec<Expr> = Vec::with_capacity(loops.len());
    let mut offset = Expr::Int(0, dtype);
    let padded = match form {
        FuseForm::Gpu => pad_threads(func, loops)?,
        FuseForm::Cpu => loops,
    };
    for l in padded {
        let value = simplify(
            func,
            &Expr::add(Expr::sub(Expr::Var(fused), offset.clone()), l.min.clone()),
        );
        let mut body = l.body;
        let map = HashMap::from([(l.var, value)]);
        walk_exprs_mut(&mut body, &mut |e| {
            subst_vars(e, &map);
        });
        offset = simplify(func, &Expr::add(offset, l.extent));
        bodies.push(body);
        bounds.push(offset.clone());
    }
    let total = offset;
    let mut chain = bodies.pop().unwrap_or_else(Stmt::empty);
    bounds.pop();
    while let (Some(body), Some(bound)) = (bodies.pop(), bounds.pop()) {
        chain = Stmt::If(Box::new(IfThenElse {
            cond: Expr::binary(BinOp::Lt, Expr::Var(fused), bound),
            then_case: body,
            else_case: Some(chain),
            span,
        }));
    }
    let (kind, thread) = match form {
        FuseForm::Cpu => (ForKind::Parallel, None),
        FuseForm::Gpu => (ForKind::ThreadBinding, Some(BLOCK_X.to_string())),
    };
    Ok(Stmt::For(Box::new(For {
        var: fused,
        min: Expr::Int(0, dtype),
        extent: total,
        kind,
        thread,
        annotations,
        body: chain,
        span,
    })))
}

/// GPU form: gives every thread tag other than `blockIdx.x` the same extent in all parts (the
/// maximum), guarding padded loops and wrapping parts that lack a tag.
fn pad_threads(func: &mut PrimFunc, loops: Vec<For>) -> Result<Vec<For>, LowerError> {
    // Tag -> distinct extents, tags in order of first appearance.
    let mut tags: Vec<(String, Vec<Expr>)> = Vec::new();
    let mut per_part: Vec<HashSet<String>> = Vec::new();
    for l in &loops {
        let mut found: Vec<(String, Expr, Expr, Span)> = Vec::new();
        l.body.visit(&mut |s| {
            if let Stmt::For(inner) = s {
                if inner.kind == ForKind::ThreadBinding {
                    let tag = inner.thread.clone().unwrap_or_default();
                    found.push((tag, inner.min.clone(), inner.extent.clone(), inner.span));
                }
            }
        });
        let mut seen = HashSet::new();
        for (tag, min, ext, span) in found {
            if tag == BLOCK_X {
                return Err(unsupported(
                    span,
                    "horizontal_fuse: a part contains a nested `blockIdx.x` loop".to_string(),
                ));
            }
            let what = format!("extent of the `{tag}` loop");
            invariant(func, &ext, &what, span)?;
            invariant(func, &min, &what, span)?;
            match tags.iter_mut().find(|(t, _)| *t == tag) {
                Some((_, exts)) => {
                    if !exts.contains(&ext) {
                        exts.push(ext)
                    }
                }
                None => tags.push((tag.clone(), vec![ext])),
            }
            seen.insert(tag);
        }
        per_part.push(seen);
    }
    let maxima: Vec<(String, Expr)> = tags
        .into_iter()
        .map(|(t, exts)| {
            let m = exts
                .into_iter()
                .reduce(|a, b| Expr::binary(BinOp::Max, a, b))
                .unwrap_or_else(|| Expr::int(1));
            let m = simplify(func, &m);
            (t, m)
        })
        .collect();
    let mut out = Vec::with_capacity(loops.len());
    for (mut l, seen) in loops.into_iter().zip(per_part) {
        walk_stmts_mut(&mut l.body, &mut |s| {
            let Stmt::For(inner) = s else { return };
            if inner.kind != ForKind::ThreadBinding {
                return;
            }
            let tag = inner.thread.clone().unwrap_or_default();
            let Some((_, m)) = maxima.iter().find(|(t, _)| *t == tag) else {
                return;
            };
            if inner.extent == *m {
                return;
            }
            let bound = simplify(func, &Expr::add(inner.min.clone(), inner.extent.clone()));
            let body = std::mem::replace(&mut inner.body, Stmt::empty());
            inner.body = Stmt::If(Box::new(IfThenElse {
                cond: Expr::binary(BinOp::Lt, Expr::Var(inner.var), bound),
                then_case: body,
                else_case: None,
                span: inner.span,
            }));
            inner.extent = m.clone();
        });
        for (tag, m) in maxima.iter().rev() {
            if seen.contains(tag) {
                continue;
            }
            let dtype = func.vars[l.var].dtype;
            let v = func.add_var(tag.replace('.', "_"), dtype);
            let body = std::mem::replace(&mut l.body, Stmt::empty());
            l.body = Stmt::For(Box::new(For {
                var: v,
                min: Expr::Int(0, dtype),
                extent: m.clone(),
                kind: ForKind::ThreadBinding,
                thread: Some(tag.clone()),
                annotations: Attrs::new(),
                body: Stmt::If(Box::new(IfThenElse {
                    cond: Expr::binary(BinOp::Eq, Expr::Var(v), Expr::Int(0, dtype)),
                    then_case: body,
                    else_case: None,
                    span: l.span,
                })),
                span: l.span,
            }));
        }
        out.push(l);
    }
    Ok(out)
}
