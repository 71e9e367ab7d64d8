//! `remove_unused_args` (stage III): drops the parameters nothing uses, with the match buffers
//! bound to them that no statement accesses; also home of the small IR walkers (variable
//! substitution, buffer compaction) the other post-lowering passes share.
//!
//! # What counts as a use
//!
//! A buffer is used when a statement loads it, stores it, names it as the target of an
//! `atomic_add` or in a block's read/write region. `T.assume_buffer_domain` is a hint, not a
//! use: the hints of a removed buffer go with it. A parameter is used when an expression of the
//! body mentions it, or a kept buffer is bound to it (`match_buffer`) or mentions it in its
//! shape, strides, extra storage or default value. Function-level `alloc_buffer`s nothing
//! accesses are dropped as well (their sizes may be the only use of a parameter).
//!
//! Dropping parameters changes the function's signature (the ABI): callers pass the remaining
//! parameters in their original relative order.

use std::collections::{HashMap, HashSet};

use sparsetir_ir::{
    BufferDecl, BufferId, BufferShape, Expr, IRModule, Intrinsic, PrimFunc, Stage, Stmt, VarId,
};

use crate::LowerError;

/// Removes the parameters of `func` that nothing uses, and the unaccessed buffers bound to them
/// (see the module documentation). A no-op on functions that are not at stage III.
pub fn remove_unused_args(func: &PrimFunc) -> Result<PrimFunc, LowerError> {
    if func.stage() != Stage::III {
        return Ok(func.clone());
    }
    let mut out = func.clone();
    let used_bufs = accessed_buffers(&out.body);
    // Hints about buffers that go away go with them.
    drop_assumes(&mut out.body, &|b| !used_bufs.contains(&b));
    out.buffer_decls.retain(|b| used_bufs.contains(b));
    let used_vars = used_vars(&out);
    out.params.retain(|p| used_vars.contains(p));
    compact_buffers(&mut out)?;
    Ok(out)
}

/// [`remove_unused_args`] on every function of `module`.
pub fn remove_unused_args_module(module: &IRModule) -> Result<IRModule, LowerError> {
    let funcs = module
        .funcs
        .iter()
        .map(remove_unused_args)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(IRModule { funcs })
}

/// Removes `param` from the parameter list when nothing in `func` uses it (crate helper for
/// passes that remove a buffer).
pub(crate) fn drop_param_if_unused(func: &mut PrimFunc, param: VarId) {
    if !used_vars(func).contains(&param) {
        func.params.retain(|p| *p != param);
    }
}

/// Buffers accessed by `s`: loads, stores, `atomic_add` targets (loads), block regions.
pub(crate) fn accessed_buffers(s: &Stmt) -> HashSet<BufferId> {
    let mut out = HashSet::new();
    s.visit(&mut |st| {
        match st {
            Stmt::Store(x) => {
                out.insert(x.buffer);
            }
            Stmt::Block(b) => {
                for r in b.reads.iter().chain(&b.writes) {
                    out.insert(r.buffer);
                }
            }
            Stmt::AssumeBufferDomain { .. } => return,
            _ => {}
        }
        st.for_each_expr(|e| {
            e.visit(&mut |x| {
                if let Expr::Load { buffer, .. } = x {
                    out.insert(*buffer);
                }
            })
        });
    });
    out
}

/// Variables mentioned by the body of `func` and by the buffers it declares (function level
/// and inside the body), plus the data parameters of those buffers.
fn used_vars(func: &PrimFunc) -> HashSet<VarId> {
    let mut vars = HashSet::new();
    let mut bufs: Vec<BufferId> = func.buffer_decls.clone();
    func.body.visit(&mut |st| {
        st.for_each_expr(|e| collect_vars(e, &mut vars));
        match st {
            Stmt::Block(b) => bufs.extend(b.alloc_buffers.iter().copied()),
            Stmt::Allocate(b) => bufs.push(*b),
            _ => {}
        }
    });
    for b in bufs {
        let Some(buf) = func.buffers.get(b) else {
            continue;
        };
        if let BufferDecl::Match { data } = buf.decl {
            vars.insert(data);
        }
        if let BufferShape::Dense(dims) = &buf.shape {
            dims.iter().for_each(|e| collect_vars(e, &mut vars));
        }
        buf.strides.iter().for_each(|e| collect_vars(e, &mut vars));
        if let Some(e) = &buf.extra_storage {
            collect_vars(e, &mut vars);
        }
        if let Some(e) = &buf.default_value {
            collect_vars(e, &mut vars);
        }
    }
    vars
}

/// Adds every variable of `e` to `out`.
pub(crate) fn collect_vars(e: &Expr, out: &mut HashSet<VarId>) {
    e.visit(&mut |x| {
        if let Expr::Var(v) = x {
            out.insert(*v);
        }
    });
}

/// Whether `e` mentions `v`.
pub(crate) fn expr_mentions(e: &Expr, v: VarId) -> bool {
    let mut found = false;
    e.visit(&mut |x| found |= x.as_var() == Some(v));
    found
}

/// Whether `s` (or anything below it) mentions `v` in an expression.
pub(crate) fn stmt_mentions(s: &Stmt, v: VarId) -> bool {
    let mut found = false;
    s.visit(&mut |st| st.for_each_expr(|e| found |= expr_mentions(e, v)));
    found
}

/// Removes the `T.assume_buffer_domain` statements whose buffer satisfies `drop`.
pub(crate) fn drop_assumes(s: &mut Stmt, drop: &dyn Fn(BufferId) -> bool) {
    walk_stmts_mut(s, &mut |st| {
        if let Stmt::AssumeBufferDomain { buffer, .. } = st {
            if drop(*buffer) {
                *st = Stmt::empty();
            }
        }
    });
    // Sequences emptied by the removal stay as `Seq([])` elements; flatten them away.
    normalize_seqs(s);
}

/// Flattens nested sequences and drops empty statements inside sequences.
fn normalize_seqs(s: &mut Stmt) {
    walk_stmts_mut(s, &mut |st| {
        if let Stmt::Seq(v) = st {
            if v.iter().any(|c| matches!(c, Stmt::Seq(_))) {
                let items = std::mem::take(v);
                *st = Stmt::seq(items);
            }
        }
    });
}

/// Calls `f` on `s` and every statement below it, children first (post-order), so `f` may
/// replace the statement it is given.
pub(crate) fn walk_stmts_mut(s: &mut Stmt, f: &mut dyn FnMut(&mut Stmt)) {
    match s {
        Stmt::Seq(v) => v.iter_mut().for_each(|c| walk_stmts_mut(c, f)),
        Stmt::SparseIteration(it) => {
            if let Some(i) = &mut it.init {
                walk_stmts_mut(i, f);
            }
            walk_stmts_mut(&mut it.body, f);
        }
        Stmt::For(l) => walk_stmts_mut(&mut l.body, f),
        Stmt::While(w) => walk_stmts_mut(&mut w.body, f),
        Stmt::Block(b) => {
            if let Some(i) = &mut b.init {
                walk_stmts_mut(i, f);
            }
            walk_stmts_mut(&mut b.body, f);
        }
        Stmt::If(i) => {
            walk_stmts_mut(&mut i.then_case, f);
            if let Some(e) = &mut i.else_case {
                walk_stmts_mut(e, f);
            }
        }
        Stmt::Let(l) => walk_stmts_mut(&mut l.body, f),
        Stmt::Store(_)
        | Stmt::Evaluate(_)
        | Stmt::Allocate(_)
        | Stmt::AssumeBufferDomain { .. } => {}
    }
    f(s);
}

/// Calls `f` on every expression held by `s` and its descendants (each top-level expression
/// once; `f` descends into it itself if it needs to).
pub(crate) fn walk_exprs_mut(s: &mut Stmt, f: &mut dyn FnMut(&mut Expr)) {
    s.visit_exprs_mut(f)
}

/// Calls `f` on every node of `e`, children first (post-order), so `f` may replace the node it
/// is given after its operands were processed.
pub(crate) fn rewrite_expr(e: &mut Expr, f: &mut dyn FnMut(&mut Expr)) {
    e.rewrite_post_order(f)
}

/// Replaces the variables of `map` inside `e`; returns whether anything changed.
pub(crate) fn subst_vars(e: &mut Expr, map: &HashMap<VarId, Expr>) -> bool {
    let mut changed = false;
    rewrite_expr(e, &mut |x| {
        if let Expr::Var(v) = x {
            if let Some(r) = map.get(v) {
                *x = r.clone();
                changed = true;
            }
        }
    });
    changed
}

/// Whether `e` is an `atomic_add` call; returns its target buffer.
pub(crate) fn atomic_target(e: &Expr) -> Option<BufferId> {
    match e {
        Expr::Call {
            op: Intrinsic::AtomicAdd,
            args,
            ..
        } => match args.first() {
            Some(Expr::Load { buffer, .. }) => Some(*buffer),
            _ => None,
        },
        _ => None,
    }
}

/// Rebuilds the buffer arena of `func` with only the buffers still declared (function level,
/// block headers, `T.allocate`) or accessed, renumbering every reference.
pub(crate) fn compact_buffers(func: &mut PrimFunc) -> Result<(), LowerError> {
    let mut keep: HashSet<BufferId> = func.buffer_decls.iter().copied().collect();
    keep.extend(accessed_buffers(&func.body));
    func.body.visit(&mut |st| match st {
        Stmt::Block(b) => keep.extend(b.alloc_buffers.iter().copied()),
        Stmt::Allocate(b) | Stmt::AssumeBufferDomain { buffer: b, .. } => {
            keep.insert(*b);
        }
        _ => {}
    });
    if keep.len() == func.buffers.len() {
        return Ok(());
    }
    let mut arena = sparsetir_ir::Arena::new();
    let mut map: HashMap<BufferId, BufferId> = HashMap::new();
    for (h, b) in func.buffers.iter() {
        if keep.contains(&h) {
            map.insert(h, arena.append(b.clone()));
        }
    }
    let mut missing = None;
    let mut remap = |b: &mut BufferId| match map.get(b) {
        Some(n) => *b = *n,
        None => missing = Some(*b),
    };
    for b in &mut func.buffer_decls {
        remap(b);
    }
    walk_exprs_mut(&mut func.body, &mut |e| {
        rewrite_expr(e, &mut |x| {
            if let Expr::Load { buffer, .. } = x {
                remap(buffer);
            }
        })
    });
    walk_stmts_mut(&mut func.body, &mut |st| match st {
        Stmt::Store(s) => remap(&mut s.buffer),
        Stmt::Block(b) => {
            b.alloc_buffers.iter_mut().for_each(&mut remap);
            for r in b.reads.iter_mut().chain(b.writes.iter_mut()) {
                remap(&mut r.buffer);
            }
        }
        Stmt::Allocate(b) | Stmt::AssumeBufferDomain { buffer: b, .. } => remap(b),
        _ => {}
    });
    if let Some(b) = missing {
        return Err(LowerError::Invalid {
            span: func.span,
            message: format!(
                "buffer `{}` is still referenced after its removal",
                func.buffers.get(b).map(|x| x.name.as_str()).unwrap_or("?")
            ),
        });
    }
    func.buffers = arena;
    Ok(())
}
