//! `compact_buffer_allocation` (stage III, CPU code): a function-level intermediate buffer whose
//! every access lies inside one block, each instance of that block touching only its own slice,
//! moves into that block as a small thread-private (`local`) buffer without the slice
//! dimensions — TensorIR's buffer-allocation planning and compaction, for the case the C writer
//! profits from.
//!
//! # Why
//!
//! A stage-I intermediate such as the per-chunk partial sums of SpMV on SELL (`Z[k, l]`, written
//! by a reduction over the chunk's slots and scattered to the output rows right after) lowers
//! to a function-level buffer of `nchunk × lanes` elements: the C writer allocates (and zeroes)
//! it on every call and every partial sum goes through memory. Each chunk only ever touches
//! `Z[k, :]`, so the buffer can live in the chunk's block as `Z[lanes]` — a stack array the C
//! compiler keeps in registers.
//!
//! # Rules
//!
//! A buffer `b` is moved into block `B` when:
//! - `b` is declared at function level with `alloc_buffer`, is dense, has no explicit strides and
//!   is in the `global` scope (shared, warp and local buffers are the schedule's business);
//! - every load, store and block region of `b` is inside `B` (its init or body), no statement
//!   outside `B` names it (not even a `T.assume_buffer_domain` hint), and the loops and blocks
//!   on the way from the function body to `B` mention it only in block regions;
//! - each iterator of `B` is bound to a loop variable of its own (so distinct instances of `B`
//!   have distinct iterator values), and a set of dimensions of `b` is indexed, in every access
//!   inside `B`, by exactly one iterator of `B` each (the same one in every access), covering all
//!   of `B`'s iterators: then two instances of `B` never touch the same element, and no value
//!   flows from one instance to another;
//! - the remaining dimensions have constant extents and the compacted buffer is at most
//!   [`MAX_LOCAL_BYTES`] (a stack array).
//!
//! The rewrite drops those dimensions from `b`'s shape and from every access (a buffer left
//! with no dimension keeps one of extent 1, indexed by 0), removes `b`'s regions from `B` and the
//! blocks around it (it is private to `B` now), sets its scope to `local` and lists it first in
//! `B`'s allocations. Both allocations start zeroed (the function's once per call, the block's
//! once per instance), and an instance only ever sees its own slice, so the results are the
//! same.
//!
//! The pass runs on the C path only: on a GPU a block instance may be run by several threads
//! together, which a thread-private buffer would split.

use std::collections::HashSet;

use sparsetir_ir::{
    Block, BufferDecl, BufferId, BufferShape, Expr, IRModule, PrimFunc, Stage, Stmt, VarId,
};

/// The largest compacted buffer the pass creates, in bytes.
pub const MAX_LOCAL_BYTES: i64 = 16 * 1024;

/// Moves the function-level intermediates of `func` that one block's instances use slice by
/// slice into that block (see the module documentation). A no-op on functions that are not at
/// stage III.
pub fn compact_buffer_allocation(func: &PrimFunc) -> PrimFunc {
    let mut out = func.clone();
    if func.stage() != Stage::III {
        return out;
    }
    let candidates: Vec<BufferId> = func
        .buffer_decls
        .iter()
        .copied()
        .filter(|&b| {
            let buf = &func.buffers[b];
            matches!(buf.decl, BufferDecl::Alloc)
                && matches!(buf.shape, BufferShape::Dense(_))
                && buf.strides.is_empty()
                && buf.extra_storage.is_none()
                && buf.scope == "global"
        })
        .collect();
    for b in candidates {
        compact_one(&mut out, b);
    }
    out
}

/// [`compact_buffer_allocation`] on every function of `module`.
pub fn compact_buffer_allocation_module(module: &IRModule) -> IRModule {
    IRModule {
        funcs: module.funcs.iter().map(compact_buffer_allocation).collect(),
    }
}

/// Whether the statement itself (not its children) names `b`; block regions count only when
/// `with_regions`.
fn own_mentions(s: &Stmt, b: BufferId, with_regions: bool) -> bool {
    match s {
        Stmt::Store(st) if st.buffer == b => return true,
        Stmt::Allocate(x) if *x == b => return true,
        Stmt::AssumeBufferDomain { buffer, .. } if *buffer == b => return true,
        Stmt::Block(blk) => {
            if blk.alloc_buffers.contains(&b) {
                return true;
            }
            if with_regions && blk.reads.iter().chain(&blk.writes).any(|r| r.buffer == b) {
                return true;
            }
            // A block's regions are summaries; its iterators and predicate are real uses.
            let mut found = false;
            for it in &blk.iters {
                found |= it.min.loads(b) || it.extent.loads(b);
                found |= it.binding.loads(b);
            }
            if let Some(p) = &blk.predicate {
                found |= p.loads(b);
            }
            return found;
        }
        _ => {}
    }
    let mut found = false;
    s.for_each_expr(|e| found |= e.loads(b));
    found
}

/// Whether `s` or a descendant names `b` (regions included).
fn mentions(s: &Stmt, b: BufferId) -> bool {
    let mut found = false;
    s.visit(&mut |x| found |= own_mentions(x, b, true));
    found
}

/// The direct children of `s`, in [`Stmt::for_each_child`] order.
fn children(s: &Stmt) -> Vec<&Stmt> {
    match s {
        Stmt::Seq(v) => v.iter().collect(),
        Stmt::SparseIteration(it) => it.init.iter().chain([&it.body]).collect(),
        Stmt::For(l) => vec![&l.body],
        Stmt::While(w) => vec![&w.body],
        Stmt::Block(b) => b.init.iter().chain([&b.body]).collect(),
        Stmt::If(i) => [&i.then_case].into_iter().chain(&i.else_case).collect(),
        Stmt::Let(l) => vec![&l.body],
        Stmt::Store(_)
        | Stmt::Evaluate(_)
        | Stmt::Allocate(_)
        | Stmt::AssumeBufferDomain { .. } => Vec::new(),
    }
}

/// The `n`-th direct child of `s`, mutably (same order as [`children`]).
fn child_mut(s: &mut Stmt, n: usize) -> Option<&mut Stmt> {
    let mut all: Vec<&mut Stmt> = Vec::new();
    match s {
        Stmt::Seq(v) => all.extend(v.iter_mut()),
        Stmt::SparseIteration(it) => {
            all.extend(it.init.as_mut());
            all.push(&mut it.body);
        }
        Stmt::For(l) => all.push(&mut l.body),
        Stmt::While(w) => all.push(&mut w.body),
        Stmt::Block(b) => {
            all.extend(b.init.as_mut());
            all.push(&mut b.body);
        }
        Stmt::If(i) => {
            all.push(&mut i.then_case);
            all.extend(i.else_case.as_mut());
        }
        Stmt::Let(l) => all.push(&mut l.body),
        Stmt::Store(_)
        | Stmt::Evaluate(_)
        | Stmt::Allocate(_)
        | Stmt::AssumeBufferDomain { .. } => {}
    }
    all.into_iter().nth(n)
}

/// The path of child indices from `root` to the deepest block that holds every mention of `b`
/// (the statements on the way mention it only in block regions), if there is one.
fn owner_path(root: &Stmt, b: BufferId) -> Option<Vec<usize>> {
    let mut path = Vec::new();
    let mut best = None;
    let mut cur = root;
    loop {
        if let Stmt::Block(_) = cur {
            best = Some(path.clone());
        }
        if own_mentions(cur, b, false) {
            break;
        }
        let kids = children(cur);
        let hits: Vec<usize> = (0..kids.len()).filter(|&i| mentions(kids[i], b)).collect();
        if hits.len() != 1 {
            break;
        }
        path.push(hits[0]);
        cur = kids[hits[0]];
    }
    best
}

/// The block at `path` below `root`.
fn at_path<'a>(root: &'a Stmt, path: &[usize]) -> &'a Stmt {
    path.iter().fold(root, |s, &i| children(s)[i])
}

/// Every index list `b` is accessed with below `s` (loads, stores, and block regions as
/// `(min, extent)` pairs: `None` for a point index), with the block regions of `s` itself left
/// out when `s` is a block.
fn accesses(s: &Stmt, b: BufferId, out: &mut Vec<Vec<(Expr, Option<Expr>)>>, top: bool) {
    match s {
        Stmt::Store(st) if st.buffer == b => {
            out.push(st.indices.iter().map(|e| (e.clone(), None)).collect());
        }
        Stmt::Block(blk) if !top => {
            for r in blk.reads.iter().chain(&blk.writes) {
                if r.buffer == b {
                    out.push(
                        r.ranges
                            .iter()
                            .map(|(lo, ext)| (lo.clone(), Some(ext.clone())))
                            .collect(),
                    );
                }
            }
        }
        _ => {}
    }
    s.for_each_expr(|e| {
        e.visit(&mut |x| {
            if let Expr::Load { buffer, indices } = x {
                if *buffer == b {
                    out.push(indices.iter().map(|e| (e.clone(), None)).collect());
                }
            }
        })
    });
    for c in children(s) {
        accesses(c, b, out, false);
    }
}

/// Tries to move `b` into the block that owns it (see the module documentation).
fn compact_one(func: &mut PrimFunc, b: BufferId) {
    let Some(path) = owner_path(&func.body, b) else {
        return;
    };
    let owner_stmt = at_path(&func.body, &path);
    let Stmt::Block(owner) = owner_stmt else {
        return;
    };
    // Every iterator bound to a loop variable of its own.
    let mut iter_vars: Vec<VarId> = Vec::new();
    let mut loop_vars: HashSet<VarId> = HashSet::new();
    for it in &owner.iters {
        match it.binding.as_var() {
            Some(v) if loop_vars.insert(v) => iter_vars.push(it.var),
            _ => return,
        }
    }
    if iter_vars.is_empty() {
        return;
    }
    let mut acc = Vec::new();
    accesses(owner_stmt, b, &mut acc, true);
    let ndim = func.buffers[b].ndim();
    if acc.is_empty() || acc.iter().any(|a| a.len() != ndim) {
        return;
    }
    // Dimensions indexed by one and the same iterator of the owner in every access.
    let mut dropped: Vec<Option<VarId>> = vec![None; ndim];
    for (d, slot) in dropped.iter_mut().enumerate() {
        let first = acc[0][d].0.as_var();
        let same = first.filter(|v| iter_vars.contains(v)).filter(|&v| {
            acc.iter().all(|a| {
                a[d].0.as_var() == Some(v)
                    && a[d].1.as_ref().is_none_or(|ext| ext.as_int() == Some(1))
            })
        });
        *slot = same;
    }
    let covered: HashSet<VarId> = dropped.iter().flatten().copied().collect();
    if iter_vars.iter().any(|v| !covered.contains(v)) {
        return;
    }
    let BufferShape::Dense(extents) = &func.buffers[b].shape else {
        return;
    };
    let mut kept = Vec::new();
    let mut elems: i64 = 1;
    for (d, e) in extents.iter().enumerate() {
        if dropped[d].is_some() {
            continue;
        }
        let Some(n) = e.as_int().filter(|n| *n >= 0) else {
            return;
        };
        elems = match elems.checked_mul(n) {
            Some(x) => x,
            None => return,
        };
        kept.push(e.clone());
    }
    let bytes = elems.saturating_mul(func.buffers[b].dtype.bytes() as i64);
    if bytes > MAX_LOCAL_BYTES {
        return;
    }
    let keep: Vec<bool> = dropped.iter().map(|d| d.is_none()).collect();
    let scalar = kept.is_empty();
    // Rewrite: the owner and every block around it forget the region, the accesses lose the
    // dropped dimensions, the owner allocates the buffer.
    let mut cur = &mut func.body;
    for &i in &path {
        if let Stmt::Block(blk) = cur {
            blk.reads.retain(|r| r.buffer != b);
            blk.writes.retain(|r| r.buffer != b);
        }
        cur = match child_mut(cur, i) {
            Some(c) => c,
            None => return,
        };
    }
    let Stmt::Block(owner) = cur else {
        return;
    };
    owner.reads.retain(|r| r.buffer != b);
    owner.writes.retain(|r| r.buffer != b);
    rewrite_block(owner, b, &keep, scalar);
    owner.alloc_buffers.insert(0, b);
    func.buffer_decls.retain(|x| *x != b);
    let buf = &mut func.buffers[b];
    buf.shape = BufferShape::Dense(if scalar { vec![Expr::int(1)] } else { kept });
    buf.scope = "local".to_string();
}

/// Drops the dimensions not in `keep` from every access of `b` inside `owner` (regions of the
/// blocks inside included).
fn rewrite_block(owner: &mut Block, b: BufferId, keep: &[bool], scalar: bool) {
    let squeeze = |idx: &mut Vec<Expr>| {
        let mut i = 0;
        idx.retain(|_| {
            i += 1;
            keep[i - 1]
        });
        if scalar {
            *idx = vec![Expr::int(0)];
        }
    };
    let mut fix_expr = |e: &mut Expr| {
        e.rewrite_post_order(&mut |x| {
            if let Expr::Load { buffer, indices } = x {
                if *buffer == b {
                    squeeze(indices);
                }
            }
        })
    };
    let mut stmts: Vec<&mut Stmt> = Vec::new();
    stmts.extend(owner.init.as_mut());
    stmts.push(&mut owner.body);
    for s in stmts {
        rewrite_stmt(s, b, keep, scalar, &mut fix_expr);
    }
}

fn rewrite_stmt(
    s: &mut Stmt,
    b: BufferId,
    keep: &[bool],
    scalar: bool,
    fix_expr: &mut dyn FnMut(&mut Expr),
) {
    match s {
        Stmt::Store(st) if st.buffer == b => {
            let mut i = 0;
            st.indices.retain(|_| {
                i += 1;
                keep[i - 1]
            });
            if scalar {
                st.indices = vec![Expr::int(0)];
            }
        }
        Stmt::Block(blk) => {
            for r in blk.reads.iter_mut().chain(blk.writes.iter_mut()) {
                if r.buffer == b {
                    let mut i = 0;
                    r.ranges.retain(|_| {
                        i += 1;
                        keep[i - 1]
                    });
                    if scalar {
                        r.ranges = vec![(Expr::int(0), Expr::int(1))];
                    }
                }
            }
        }
        _ => {}
    }
    s.for_each_expr_mut(&mut *fix_expr);
    s.for_each_child_mut(|c| rewrite_stmt(c, b, keep, scalar, fix_expr));
}
