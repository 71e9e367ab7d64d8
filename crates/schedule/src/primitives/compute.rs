//! Compute-location primitives: `compute_at`, `reverse_compute_at` and `compute_inline`.
//!
//! `compute_at(block, loop)` moves a producer block (alone in its loop nest, spatial iterators
//! only) under `loop`, which must enclose its consumers in the same scope, and recomputes
//! only what the consumers under `loop` read; `reverse_compute_at(block, loop)` moves a
//! consumer block under the loop that holds its producers, after them, covering what they
//! write. The moved block's iterators must index the buffer that links it to its partners
//! directly (`P[v0, v1]`, as cache stages do), and the partners' accesses must be points, a
//! loop variable plus an offset, or an index whose part that moves with the loops under the
//! target has constant bounds (`32 * ko + 4 * ki + J_indices[..]`, with the loops' ranges and
//! the buffers' `T.assume_buffer_domain` facts: a window of 32 rows per `ko`) once their
//! bindings are substituted; the new range of every iterator must be provably inside its old
//! range (the same loop bounds, or inside them for every value of the loops around), so
//! data-dependent sparse extents like `J_indptr[vi + 1] - J_indptr[vi]` carry over exactly.
//! Anything else fails with a typed error rather than guessing a region.
//!
//! `compute_inline(block)` replaces every read of the block's output (an intermediate buffer
//! with this block as only writer) by the block's value expression and removes the block.

use std::collections::HashMap;

use sparsetir_arith::Analyzer;
use sparsetir_ir::{
    BinOp, BufferDecl, BufferId, BufferRegion, Expr, IterKind, PrimFunc, Stage, Stmt, VarId,
};

use crate::error::{ErrorKind, Focus, ScheduleError};
use crate::ir_util;
use crate::primitives::cache::{block_reads, block_writes, direct_blocks, wrap};
use crate::primitives::scope::{
    accessed, block_site, full_region, is_own_nest, items, loads_in, loop_site, merge_region,
    rewrite_exprs, same, stores_in, subst, vars_of, walk_stmts_mut, with_items,
};
use crate::state::{AnyRV, BlockRV, LoopRV, Res, Schedule};
use crate::trace::{Arg, Call, ReplayError};

impl Schedule {
    /// `sch.compute_at(block, loop)`: moves producer `block` to the start of `loop`'s body,
    /// computing only the region its consumers under `loop` read.
    pub fn compute_at(&mut self, block: BlockRV, loop_: LoopRV) -> Res<()> {
        self.move_common(block, loop_, false)
    }

    /// `sch.reverse_compute_at(block, loop)`: moves consumer `block` to the end of `loop`'s
    /// body, computing only the region its producers under `loop` write.
    pub fn reverse_compute_at(&mut self, block: BlockRV, loop_: LoopRV) -> Res<()> {
        self.move_common(block, loop_, true)
    }

    fn move_common(&mut self, block: BlockRV, loop_: LoopRV, reverse: bool) -> Res<()> {
        let prim = if reverse {
            "reverse_compute_at"
        } else {
            "compute_at"
        };
        self.require_stage(prim, &[Stage::II, Stage::III])?;
        let name = self.block_name(block)?;
        let lv = self.loop_var(loop_)?;
        self.transact(prim, |f| move_block(f, &name, lv, reverse))?;
        self.record(
            prim,
            vec![Arg::Var(block.trace_name()), Arg::Var(loop_.trace_name())],
            vec![],
            vec![],
            false,
        );
        Ok(())
    }

    /// `sch.compute_inline(block)`: inlines a complete block `P[v...] = value(v...)` into every
    /// reader of `P` and removes it (and `P`'s allocation).
    pub fn compute_inline(&mut self, block: BlockRV) -> Res<()> {
        self.require_stage("compute_inline", &[Stage::II, Stage::III])?;
        let name = self.block_name(block)?;
        self.transact("compute_inline", |f| inline(f, &name))?;
        self.record(
            "compute_inline",
            vec![Arg::Var(block.trace_name())],
            vec![],
            vec![],
            false,
        );
        Ok(())
    }
}

fn err(f: &PrimFunc, kind: ErrorKind, msg: impl Into<String>, focus: Focus) -> ScheduleError {
    ScheduleError::new(kind, msg, f, focus)
}

/// One dimension of a region a partner needs.
#[derive(Clone, Debug)]
enum Need {
    /// A single index (free of loops under the target loop).
    Point(Expr),
    /// `[lo, lo + ext)`, swept by the loop `by` under the target loop.
    Range(Expr, Expr),
}

fn move_block(f: &mut PrimFunc, name: &str, lv: VarId, reverse: bool) -> Res<()> {
    let prim = if reverse {
        "reverse_compute_at"
    } else {
        "compute_at"
    };
    let bfocus = Focus::Block(name.to_string());
    let lfocus = Focus::Loop(lv);
    let site = block_site(f, name)?;
    let lsite = loop_site(f, lv)?;
    if lsite.body_path != site.body_path {
        return Err(err(
            f,
            ErrorKind::BadPlacement,
            format!(
                "`{prim}`: the loop is not in the same scope (enclosing block) as block `{name}`"
            ),
            lfocus,
        ));
    }
    let its = items(f, &site);
    if !its.get(site.item).is_some_and(|s| is_own_nest(s, name)) {
        return Err(err(
            f,
            ErrorKind::Unsupported,
            format!("`{prim}`: block `{name}` must be alone in its loop nest"),
            bfocus,
        ));
    }
    let ok_order = if reverse {
        lsite.item < site.item
    } else {
        lsite.item > site.item
    };
    if !ok_order {
        return Err(err(
            f,
            ErrorKind::BadPlacement,
            format!(
                "`{prim}`: the loop must come {} block `{name}` in their scope",
                if reverse { "before" } else { "after" }
            ),
            lfocus,
        ));
    }
    let Some(b) = ir_util::find_block(&f.body, name).cloned() else {
        return Err(err(
            f,
            ErrorKind::NotFound,
            format!("no block `{name}`"),
            bfocus,
        ));
    };
    if b.init.is_some() || b.iters.iter().any(|it| it.kind == IterKind::Reduce) {
        return Err(err(
            f,
            ErrorKind::NotCompleteBlock,
            format!("`{prim}`: block `{name}` is a reduction; decompose or rfactor it first"),
            bfocus,
        ));
    }
    if b.predicate.is_some() {
        return Err(err(
            f,
            ErrorKind::Unsupported,
            format!("`{prim}`: block `{name}` has a predicate (`T.where`)"),
            bfocus,
        ));
    }
    let (p_reads, p_writes) = accessed(&b.body);
    let Some(lstmt) = ir_util::find(&f.body, &|s| ir_util::is_loop(s, lv)).cloned() else {
        return Err(err(f, ErrorKind::NotFound, "the loop is gone", lfocus));
    };
    let partners: Vec<sparsetir_ir::Block> = {
        let Stmt::For(l) = &lstmt else {
            return Err(err(
                f,
                ErrorKind::Internal,
                "the loop handle found a non-loop",
                lfocus,
            ));
        };
        direct_blocks(&l.body).into_iter().cloned().collect()
    };
    // The buffer linking the block to its partners.
    let key: BufferId = if reverse {
        let mut cands: Vec<BufferId> = p_reads.iter().copied().collect();
        cands.sort();
        match cands
            .into_iter()
            .find(|k| partners.iter().any(|p| block_writes(p, *k)))
        {
            Some(k) => k,
            None => {
                return Err(err(
                    f,
                    ErrorKind::BadPlacement,
                    format!("`{prim}`: no block under the loop writes what block `{name}` reads"),
                    lfocus,
                ))
            }
        }
    } else {
        let mut w: Vec<BufferId> = p_writes.iter().copied().collect();
        w.sort();
        if w.len() != 1 {
            return Err(err(
                f,
                ErrorKind::NotCompleteBlock,
                format!("`{prim}`: block `{name}` must write exactly one buffer"),
                bfocus,
            ));
        }
        w[0]
    };
    let kname = f.buffers[key].name.clone();
    let own = if reverse {
        loads_in(&b.body, key)
    } else {
        stores_in(&b.body, key)
    };
    let Some(kidx) = own.first().cloned() else {
        return Err(err(
            f,
            ErrorKind::Internal,
            "no access of the linking buffer",
            bfocus,
        ));
    };
    if own.iter().any(|i| *i != kidx) {
        return Err(err(
            f,
            ErrorKind::Unsupported,
            format!("`{prim}`: block `{name}` accesses `{kname}` at several index tuples"),
            bfocus,
        ));
    }
    // iterator k <- dimension d
    let mut dim_of: Vec<Option<usize>> = vec![None; b.iters.len()];
    for (d, e) in kidx.iter().enumerate() {
        if let Some(k) = e
            .as_var()
            .and_then(|v| b.iters.iter().position(|it| it.var == v))
        {
            if dim_of[k].is_none() {
                dim_of[k] = Some(d);
                continue;
            }
        }
        return Err(err(
            f,
            ErrorKind::Unsupported,
            format!(
                "`{prim}`: block `{name}` must index `{kname}` by distinct iterators, one per \
                 dimension"
            ),
            bfocus,
        ));
    }
    if dim_of.iter().any(Option::is_none) {
        return Err(err(
            f,
            ErrorKind::Unsupported,
            format!("`{prim}`: every iterator of block `{name}` must index `{kname}`"),
            bfocus,
        ));
    }
    // The partners' needs.
    let mut need: Option<Vec<Need>> = None;
    for p in &partners {
        let acc = if reverse {
            let mut v = stores_in(&p.body, key);
            if let Some(i) = &p.init {
                v.extend(stores_in(i, key));
            }
            v
        } else {
            let mut v = loads_in(&p.body, key);
            if let Some(i) = &p.init {
                v.extend(loads_in(i, key));
            }
            v
        };
        if acc.is_empty() {
            continue;
        }
        let inner_blocks: Vec<&sparsetir_ir::Block> = crate::primitives::scope::blocks_in(&p.body)
            .into_iter()
            .filter(|x| block_reads(x, key) || block_writes(x, key))
            .collect();
        if !inner_blocks.is_empty() {
            return Err(err(
                f,
                ErrorKind::Unsupported,
                format!(
                    "`{prim}`: `{kname}` is accessed in a block nested in `{}`",
                    p.name
                ),
                lfocus,
            ));
        }
        let psite = block_site(f, &p.name)?;
        let Some(lpos) = psite.loops.iter().position(|v| *v == lv) else {
            return Err(err(
                f,
                ErrorKind::Internal,
                "partner not under the loop",
                lfocus,
            ));
        };
        let inner: Vec<VarId> = psite.loops[lpos + 1..].to_vec();
        let bind: HashMap<VarId, Expr> = p
            .iters
            .iter()
            .map(|it| (it.var, it.binding.clone()))
            .collect();
        let an = facts(f, &psite.loops);
        for idx in acc {
            let mut dims = Vec::new();
            for e in &idx {
                let e = subst(e, &bind);
                let need = classify(f, &e, &inner).or_else(|| bounded(f, &an, &e, &inner));
                dims.push(need.ok_or_else(|| {
                    err(
                        f,
                        ErrorKind::RegionNotCovered,
                        format!(
                            "`{prim}`: cannot bound index `{}` of `{kname}` in block `{}` over \
                             the loops under the target loop",
                            sparsetir_ir::printer::print_expr(f, &e),
                            p.name
                        ),
                        lfocus.clone(),
                    )
                })?);
            }
            match &need {
                None => need = Some(dims),
                Some(old) => {
                    let agree = old.iter().zip(&dims).all(|(a, c)| match (a, c) {
                        (Need::Point(x), Need::Point(y)) => same(x, y),
                        (Need::Range(x0, x1), Need::Range(y0, y1)) => same(x0, y0) && same(x1, y1),
                        _ => false,
                    });
                    if !agree {
                        return Err(err(
                            f,
                            ErrorKind::RegionNotCovered,
                            format!(
                                "`{prim}`: blocks under the loop access different regions of \
                                 `{kname}`"
                            ),
                            lfocus,
                        ));
                    }
                }
            }
        }
    }
    let Some(need) = need else {
        return Err(err(
            f,
            ErrorKind::BadPlacement,
            format!(
                "`{prim}`: no block under the loop {} `{kname}`",
                if reverse { "writes" } else { "reads" }
            ),
            lfocus,
        ));
    };
    // Every other partner of the block in the scope must be under the loop.
    for (k, it) in its.iter().enumerate() {
        // Partners before the new place (reverse) or before the block (compute_at) are not
        // affected by the move; those between are checked below as dependencies.
        if k == site.item || k < lsite.item || (reverse && k != lsite.item) {
            continue;
        }
        let outside: Stmt = if k == lsite.item {
            without_loop(it, lv)
        } else {
            (*it).clone()
        };
        for x in direct_blocks(&outside) {
            let bad = if reverse {
                block_writes(x, key)
            } else {
                block_reads(x, key)
            };
            if bad {
                return Err(err(
                    f,
                    ErrorKind::BadPlacement,
                    format!(
                        "`{prim}`: block `{}` also {} `{kname}` outside the loop",
                        x.name,
                        if reverse { "writes" } else { "reads" }
                    ),
                    lfocus,
                ));
            }
        }
    }
    // Nothing between the old and the new place may conflict with the block's accesses.
    let (lo, hi) = if reverse {
        (lsite.item, site.item)
    } else {
        (site.item, lsite.item)
    };
    for (k, item) in its.iter().enumerate().take(hi + 1).skip(lo) {
        if k == site.item {
            continue;
        }
        let between: Stmt = if k == lsite.item {
            without_loop(item, lv)
        } else {
            (*item).clone()
        };
        let (r, w) = accessed(&between);
        let clash = w
            .iter()
            .any(|x| p_reads.contains(x) || p_writes.contains(x))
            || r.iter().any(|x| p_writes.contains(x));
        if clash {
            return Err(err(
                f,
                ErrorKind::DependencyViolation,
                format!(
                    "`{prim}`: statements between block `{name}` and the loop access buffers the \
                     block reads or writes"
                ),
                bfocus,
            ));
        }
    }
    // Blocks under the loop run around the moved block on every iteration.
    if let Stmt::For(l) = &lstmt {
        let (lr, lw) = accessed(&l.body);
        let clash = if reverse {
            lr.iter().chain(lw.iter()).any(|x| p_writes.contains(x))
        } else {
            lw.iter().any(|x| p_reads.contains(x) || *x == key)
        };
        if clash {
            return Err(err(
                f,
                ErrorKind::DependencyViolation,
                format!(
                    "`{prim}`: blocks under the loop {} buffers block `{name}` {}",
                    if reverse { "access" } else { "write" },
                    if reverse { "writes" } else { "reads or writes" }
                ),
                lfocus,
            ));
        }
    }
    // Old ranges of the block's iterators: one distinct loop of its own nest each.
    let mut old: Vec<(Expr, Expr)> = Vec::new();
    let mut used = Vec::new();
    for it in &b.iters {
        let l = it
            .binding
            .as_var()
            .filter(|v| site.loops.contains(v) && !used.contains(v))
            .and_then(|v| ir_util::find_loop(&f.body, v));
        let Some(l) = l else {
            return Err(err(
                f,
                ErrorKind::Unsupported,
                format!("`{prim}`: each iterator of block `{name}` must be bound to its own loop"),
                bfocus,
            ));
        };
        used.push(l.var);
        old.push((l.min.clone(), l.extent.clone()));
    }
    let outer_loops: Vec<VarId> = lsite.loops.iter().copied().chain([lv]).collect();
    let outer_facts = facts(f, &outer_loops);
    let mut nest = Vec::new();
    let mut nb = b.clone();
    for (k, it) in nb.iters.iter_mut().enumerate() {
        let Some(d) = dim_of[k] else { continue };
        let (omin, oext) = &old[k];
        let inside = match &need[d] {
            Need::Range(lo, ext) => {
                (same(lo, omin) && same(ext, oext)) || {
                    // A part of the old range, for every value of the loops around.
                    let ge = Expr::binary(BinOp::Ge, lo.clone(), omin.clone());
                    let le = Expr::binary(
                        BinOp::Le,
                        Expr::add(lo.clone(), ext.clone()),
                        Expr::add(omin.clone(), oext.clone()),
                    );
                    outer_facts.prove(f, &ge) == Some(true)
                        && outer_facts.prove(f, &le) == Some(true)
                }
            }
            Need::Point(e) => match e.as_var() {
                Some(v) if outer_loops.contains(&v) => ir_util::find_loop(&f.body, v)
                    .is_some_and(|l| same(&l.min, omin) && same(&l.extent, oext)),
                _ => match (e.as_int(), omin.as_int(), oext.as_int()) {
                    (Some(x), Some(m), Some(n)) => x >= m && x < m + n,
                    _ => false,
                },
            },
        };
        if !inside {
            return Err(err(
                f,
                ErrorKind::RegionNotCovered,
                format!(
                    "`{prim}`: cannot prove the region needed along `{}` lies inside what block \
                     `{name}` computed before",
                    f.vars[it.var].name
                ),
                bfocus,
            ));
        }
        it.binding = match &need[d] {
            Need::Point(e) => e.clone(),
            Need::Range(lo, ext) => {
                let lname = it
                    .binding
                    .as_var()
                    .map(|v| f.vars[v].name.clone())
                    .unwrap_or_default();
                let dt = ext.dtype(f);
                let nv = f.add_var(lname, dt);
                nest.push((nv, sparsetir_ir::Expr::Int(0, dt), ext.clone()));
                crate::primitives::scope::add(lo.clone(), Expr::Var(nv))
            }
        };
    }
    let moved = wrap(&nest, Stmt::Block(Box::new(nb)));
    with_items(f, &site, |items| {
        items.remove(site.item);
    });
    if let Some(l) = ir_util::find_loop_mut(&mut f.body, lv) {
        let body = std::mem::replace(&mut l.body, Stmt::empty());
        let mut v = match body {
            Stmt::Seq(v) => v,
            other => vec![other],
        };
        if reverse {
            v.push(moved);
        } else {
            v.insert(0, moved);
        }
        l.body = Stmt::Seq(v);
    }
    Ok(())
}

/// `s` with the loop over `lv` (and its body) removed.
fn without_loop(s: &Stmt, lv: VarId) -> Stmt {
    let mut c = s.clone();
    if let Some(slot) = ir_util::find_mut(&mut c, &|x| ir_util::is_loop(x, lv)) {
        *slot = Stmt::empty();
    }
    c
}

/// A point when `e` uses no `inner` loop; `l`, `l + c`, `c + l` for an inner loop `l` whose
/// bounds and `c` use no inner loop: the range the loop sweeps.
fn classify(f: &PrimFunc, e: &Expr, inner: &[VarId]) -> Option<Need> {
    let uses = |x: &Expr| vars_of(x).iter().any(|v| inner.contains(v));
    if !uses(e) {
        return Some(Need::Point(e.clone()));
    }
    let (l, c) = match e {
        Expr::Var(v) => (*v, None),
        Expr::Binary(sparsetir_ir::BinOp::Add, a, b) => match (a.as_var(), b.as_var()) {
            (Some(v), _) if inner.contains(&v) && !uses(b) => (v, Some((**b).clone())),
            (_, Some(v)) if inner.contains(&v) && !uses(a) => (v, Some((**a).clone())),
            _ => return None,
        },
        _ => return None,
    };
    let lp = ir_util::find_loop(&f.body, l)?;
    if uses(&lp.min) || uses(&lp.extent) {
        return None;
    }
    let lo = match c {
        Some(c) => crate::primitives::scope::add(c, lp.min.clone()),
        None => lp.min.clone(),
    };
    Some(Need::Range(lo, lp.extent.clone()))
}

/// What holds wherever the loops `loops` run: their ranges, the value domains the lowering
/// assumed (`T.assume_buffer_domain`, inclusive as the passes read it: `indptr` reaches `nnz`)
/// and, tighter, `[0, length)` for the coordinates of a compressed axis.
fn facts(f: &PrimFunc, loops: &[VarId]) -> Analyzer {
    let mut an = Analyzer::new();
    an.assume_no_overflow(true);
    for v in loops {
        if let Some(l) = ir_util::find_loop(&f.body, *v) {
            an.bind_range(*v, &l.min, &l.extent);
        }
    }
    f.body.visit(&mut |s| {
        if let Stmt::AssumeBufferDomain { buffer, lo, hi, .. } = s {
            an.bind_buffer_domain(*buffer, lo, hi);
        }
    });
    for (_, ax) in f.axes.iter() {
        let Some(data) = ax.indices.filter(|_| ax.kind.is_compressed()) else {
            continue;
        };
        for (b, buf) in f.buffers.iter() {
            if matches!(buf.decl, BufferDecl::Match { data: d } if d == data) {
                let max = Expr::sub(ax.length.clone(), Expr::int(1));
                an.bind_buffer_domain(b, &Expr::int(0), &max);
            }
        }
    }
    an
}

/// `e` over the loops `inner` as a range of constant extent ([`Analyzer::range_over`]): a
/// gather through a bounded index (`4 * (g % c) + J_indices[g, j]` under the loop of `g`'s
/// runs), or an affine index over several inner loops.
fn bounded(f: &PrimFunc, an: &Analyzer, e: &Expr, inner: &[VarId]) -> Option<Need> {
    let (lo, ext) = an.range_over(f, e, inner)?;
    Some(Need::Range(lo, Expr::Int(ext, e.dtype(f))))
}

// ----- compute_inline ------------------------------------------------------------------------

fn inline(f: &mut PrimFunc, name: &str) -> Res<()> {
    let prim = "compute_inline";
    let bfocus = Focus::Block(name.to_string());
    let site = block_site(f, name)?;
    let Some(b) = ir_util::find_block(&f.body, name).cloned() else {
        return Err(err(
            f,
            ErrorKind::NotFound,
            format!("no block `{name}`"),
            bfocus,
        ));
    };
    let not_complete = |f: &PrimFunc, why: &str| {
        err(
            f,
            ErrorKind::NotCompleteBlock,
            format!("`{prim}`: block `{name}` {why}"),
            Focus::Block(name.to_string()),
        )
    };
    if b.init.is_some() || b.iters.iter().any(|it| it.kind == IterKind::Reduce) {
        return Err(not_complete(f, "is a reduction"));
    }
    if b.predicate.is_some() {
        return Err(not_complete(f, "has a predicate"));
    }
    let Stmt::Store(st) = &b.body else {
        return Err(not_complete(f, "is not a single store"));
    };
    let buf = st.buffer;
    let bname = f.buffers[buf].name.clone();
    let mut vars: Vec<VarId> = Vec::new();
    for e in &st.indices {
        match e.as_var() {
            Some(v) if b.iters.iter().any(|it| it.var == v) && !vars.contains(&v) => vars.push(v),
            _ => {
                return Err(not_complete(
                    f,
                    "does not index its output by distinct iterators",
                ))
            }
        }
    }
    if vars.len() != b.iters.len() {
        return Err(not_complete(f, "has an iterator its output does not use"));
    }
    if matches!(f.buffers[buf].decl, BufferDecl::Match { .. }) {
        return Err(err(
            f,
            ErrorKind::InvalidArgument,
            format!(
                "`{prim}`: `{bname}` is a function parameter; only intermediates can be inlined"
            ),
            bfocus,
        ));
    }
    if !loads_in(&b.body, buf).is_empty() {
        return Err(not_complete(f, "reads its own output"));
    }
    let value = st.value.clone();
    if let Some(v) = vars_of(&value)
        .into_iter()
        .find(|v| !vars.contains(v) && !f.params.contains(v))
    {
        return Err(err(
            f,
            ErrorKind::Unsupported,
            format!(
                "`{prim}`: the value of block `{name}` uses `{}`, which is not one of its iterators",
                f.vars[v].name
            ),
            bfocus,
        ));
    }
    let its = items(f, &site);
    if !its.get(site.item).is_some_and(|s| is_own_nest(s, name)) {
        return Err(err(
            f,
            ErrorKind::Unsupported,
            format!("`{prim}`: block `{name}` must be alone in its loop nest"),
            bfocus,
        ));
    }
    let writers: Vec<String> = crate::primitives::scope::blocks_in(&f.body)
        .into_iter()
        .filter(|x| {
            x.name != name && block_writes(x, buf) && ir_util::find_block(&x.body, name).is_none()
        })
        .filter(|x| {
            !stores_in(&x.body, buf).is_empty()
                || x.init
                    .as_ref()
                    .is_some_and(|i| !stores_in(i, buf).is_empty())
        })
        .map(|x| x.name.clone())
        .collect();
    if !writers.is_empty() {
        return Err(err(
            f,
            ErrorKind::NotSingleWriter,
            format!(
                "`{prim}`: `{bname}` is also written by {}",
                writers.join(", ")
            ),
            bfocus,
        ));
    }
    let total = loads_in(&f.body, buf).len();
    let after: usize = its
        .iter()
        .skip(site.item + 1)
        .map(|s| loads_in(s, buf).len())
        .sum();
    if after != total {
        return Err(err(
            f,
            ErrorKind::BadPlacement,
            format!(
                "`{prim}`: `{bname}` is read outside the statements that follow block `{name}`"
            ),
            bfocus,
        ));
    }
    let (reads, _) = accessed(&b.body);
    for s in its.iter().skip(site.item + 1) {
        let (_, w) = accessed(s);
        if let Some(x) = w.iter().find(|x| reads.contains(x)) {
            return Err(err(
                f,
                ErrorKind::DependencyViolation,
                format!(
                    "`{prim}`: `{}`, read by block `{name}`, is written after it",
                    f.buffers[*x].name
                ),
                bfocus,
            ));
        }
    }
    let p_regions: Vec<BufferRegion> = b.reads.clone();
    let iter_vars = vars.clone();
    // Rewrite the readers.
    let fc = f.clone();
    with_items(f, &site, |items| {
        for it in items.iter_mut().skip(site.item + 1) {
            rewrite_exprs(it, &mut |e| {
                if let Expr::Load { buffer, indices } = e {
                    if *buffer == buf {
                        let map: HashMap<VarId, Expr> = iter_vars
                            .iter()
                            .copied()
                            .zip(indices.iter().cloned())
                            .collect();
                        *e = subst(&value, &map);
                    }
                }
            });
            walk_stmts_mut(it, &mut |st| {
                if let Stmt::Block(blk) = st {
                    let Some(pos) = blk.reads.iter().position(|r| r.buffer == buf) else {
                        return;
                    };
                    let r = blk.reads.remove(pos);
                    let point = r.ranges.iter().all(|(_, e)| matches!(e.as_int(), Some(1)));
                    for pr in &p_regions {
                        let nr = if point {
                            let map: HashMap<VarId, Expr> = iter_vars
                                .iter()
                                .copied()
                                .zip(r.ranges.iter().map(|(lo, _)| lo.clone()))
                                .collect();
                            BufferRegion {
                                buffer: pr.buffer,
                                ranges: pr
                                    .ranges
                                    .iter()
                                    .map(|(a, c)| (subst(a, &map), subst(c, &map)))
                                    .collect(),
                            }
                        } else {
                            full_region(&fc, pr.buffer)
                        };
                        merge_region(&fc, &mut blk.reads, nr);
                    }
                }
            });
        }
        items.remove(site.item);
    });
    // Drop the allocation.
    f.buffer_decls.retain(|x| *x != buf);
    walk_stmts_mut(&mut f.body, &mut |st| match st {
        Stmt::Block(blk) => blk.alloc_buffers.retain(|x| *x != buf),
        Stmt::Seq(v) => v.retain(|x| !matches!(x, Stmt::Allocate(a) if *a == buf)),
        _ => {}
    });
    Ok(())
}

pub(crate) fn replay(sch: &mut Schedule, call: &Call) -> Result<Option<Vec<AnyRV>>, ReplayError> {
    match call.name() {
        "compute_at" => sch.compute_at(call.block(0, "block")?, call.loop_(1, "loop")?)?,
        "reverse_compute_at" => {
            sch.reverse_compute_at(call.block(0, "block")?, call.loop_(1, "loop")?)?
        }
        "compute_inline" => sch.compute_inline(call.block(0, "block")?)?,
        _ => return Ok(None),
    }
    Ok(Some(vec![]))
}
