//! Reduction primitives: `decompose_reduction` and `rfactor`.
//!
//! `decompose_reduction(block, loop)` moves the block's `T.init()` into its own block
//! `<name>_init`, placed right before `loop` under copies of the loops from `loop` down that
//! bind spatial iterators (kinds and thread bindings kept). A sparse reduction may be empty
//! (a row without stored elements never runs the init), so unless every reduction loop under
//! `loop` has a constant positive extent, the init block is guarded by `T.where(extent > 0)`
//! for each of them: the decomposed function writes exactly what the original wrote.
//!
//! `rfactor(loop, factor_axis)` splits a reduction `C[idx] = C[idx] op x` (init = the identity
//! of `op`: `+` 0, `*` 1, `max` lowest value, `min` highest value) along `loop`: a block
//! `<name>_rf` accumulates into `C_rf` (one more dimension, of `loop`'s extent, at
//! `factor_axis`), then the original block name reduces `C_rf` into `C`. The loop's extent must
//! be fixed by the function's parameters (a data-dependent sparse extent cannot size `C_rf`),
//! and the other reduction loops may not depend on it; the write-back is guarded like the init
//! of `decompose_reduction` so that empty reductions leave `C` untouched.

use std::collections::HashMap;

use sparsetir_ir::{
    Attrs, BinOp, Block, BlockIter, BufferRegion, BufferShape, Expr, For, ForKind, Intrinsic,
    IterKind, PrimFunc, Stage, Stmt, Store, VarId,
};

use crate::error::{ErrorKind, Focus, ScheduleError};
use crate::ir_util;
use crate::primitives::cache::direct_blocks;
use crate::primitives::scope::{
    alloc_in_scope, at_mut, block_site, index_reads, is_own_nest, is_positive_const, items,
    loads_in, loop_site, point_region, same, subst, unique_block_name, vars_of, with_items,
};
use crate::state::{AnyRV, BlockRV, LoopRV, Res, Schedule};
use crate::trace::{Arg, Call, ReplayError};

impl Schedule {
    /// `init = sch.decompose_reduction(block, loop)`: splits the block's init into a new
    /// block placed before `loop` (an ancestor loop of the block above all its reduction loops).
    pub fn decompose_reduction(&mut self, block: BlockRV, loop_: LoopRV) -> Res<BlockRV> {
        self.require_stage("decompose_reduction", &[Stage::II, Stage::III])?;
        let name = self.block_name(block)?;
        let lv = self.loop_var(loop_)?;
        let init = self.transact("decompose_reduction", |f| decompose(f, &name, lv))?;
        let out = self.new_block_rv(&init);
        self.record(
            "decompose_reduction",
            vec![Arg::Var(block.trace_name()), Arg::Var(loop_.trace_name())],
            vec![],
            vec![out.into()],
            false,
        );
        Ok(out)
    }

    /// `rf = sch.rfactor(loop, factor_axis)`: factorizes the reduction of the single block under
    /// `loop` along it; returns the new `<name>_rf` block (the original name now designates the
    /// write-back block).
    pub fn rfactor(&mut self, loop_: LoopRV, factor_axis: i64) -> Res<BlockRV> {
        self.require_stage("rfactor", &[Stage::II, Stage::III])?;
        let lv = self.loop_var(loop_)?;
        let rf = self.transact("rfactor", |f| rfactor(f, lv, factor_axis))?;
        let out = self.new_block_rv(&rf);
        self.record(
            "rfactor",
            vec![Arg::Var(loop_.trace_name()), Arg::Int(factor_axis)],
            vec![],
            vec![out.into()],
            false,
        );
        Ok(out)
    }
}

fn err(f: &PrimFunc, kind: ErrorKind, msg: impl Into<String>, focus: Focus) -> ScheduleError {
    ScheduleError::new(kind, msg, f, focus)
}

/// A loop to re-create: `(new var, min, extent, kind, thread, annotations)`.
type LoopCopy = (VarId, Expr, Expr, ForKind, Option<String>, Attrs);

/// Copies `loops` (outer to inner) with fresh variables, keeping kinds and thread bindings.
fn copy_loops_kept(
    f: &mut PrimFunc,
    loops: &[VarId],
    map: &mut HashMap<VarId, Expr>,
) -> Vec<LoopCopy> {
    let mut out = Vec::new();
    for v in loops {
        let Some(l) = ir_util::find_loop(&f.body, *v).cloned() else {
            continue;
        };
        let nv = f.add_var(f.vars[*v].name.clone(), f.vars[*v].dtype);
        let (min, ext) = (subst(&l.min, map), subst(&l.extent, map));
        map.insert(*v, Expr::Var(nv));
        out.push((
            nv,
            min,
            ext,
            l.kind,
            l.thread.clone(),
            l.annotations.clone(),
        ));
    }
    out
}

fn wrap_kept(nest: &[LoopCopy], body: Stmt) -> Stmt {
    nest.iter()
        .rev()
        .fold(body, |acc, (v, min, ext, kind, thread, ann)| {
            Stmt::For(Box::new(For {
                var: *v,
                min: min.clone(),
                extent: ext.clone(),
                kind: *kind,
                thread: thread.clone(),
                annotations: ann.clone(),
                body: acc,
                span: Default::default(),
            }))
        })
}

/// For each loop of `loops`: (used by a spatial binding, used by a reduction binding).
fn usage(b: &Block, loops: &[VarId]) -> Vec<(bool, bool)> {
    loops
        .iter()
        .map(|l| {
            let mut sp = false;
            let mut rd = false;
            for it in &b.iters {
                if vars_of(&it.binding).contains(l) {
                    match it.kind {
                        IterKind::Spatial => sp = true,
                        IterKind::Reduce => rd = true,
                    }
                }
            }
            (sp, rd)
        })
        .collect()
}

/// `e1 > 0 and e2 > 0 and ...` for the extents of `loops` that are not constant positive,
/// substituted by `map`; `None` when every extent is constant positive. Fails when an extent
/// uses a variable of `forbidden`.
fn guard(
    f: &PrimFunc,
    loops: &[VarId],
    map: &HashMap<VarId, Expr>,
    forbidden: &[VarId],
) -> Result<Option<Expr>, VarId> {
    let mut cond: Option<Expr> = None;
    for v in loops {
        let Some(l) = ir_util::find_loop(&f.body, *v) else {
            continue;
        };
        if is_positive_const(&l.extent) {
            continue;
        }
        if vars_of(&l.extent).iter().any(|x| forbidden.contains(x)) {
            return Err(*v);
        }
        let ext = subst(&l.extent, map);
        let dt = ext.dtype(f);
        let c = Expr::binary(BinOp::Gt, ext, Expr::Int(0, dt));
        cond = Some(match cond {
            None => c,
            Some(p) => Expr::binary(BinOp::And, p, c),
        });
    }
    Ok(cond)
}

fn and(a: Option<Expr>, b: Option<Expr>) -> Option<Expr> {
    match (a, b) {
        (Some(x), Some(y)) => Some(Expr::binary(BinOp::And, x, y)),
        (x, None) => x,
        (None, y) => y,
    }
}

/// Point regions of the stores and loads of `s`.
fn regions_of(s: &Stmt) -> (Vec<BufferRegion>, Vec<BufferRegion>) {
    let mut reads = Vec::new();
    let mut writes = Vec::new();
    s.visit(&mut |st| {
        if let Stmt::Store(x) = st {
            let r = point_region(x.buffer, &x.indices);
            if !writes.contains(&r) {
                writes.push(r);
            }
            for r in index_reads(&x.indices) {
                if !reads.contains(&r) {
                    reads.push(r);
                }
            }
            for r in index_reads(std::slice::from_ref(&x.value)) {
                if !reads.contains(&r) {
                    reads.push(r);
                }
            }
        }
    });
    (reads, writes)
}

/// Inserts `new` right before the loop over `lv`.
fn insert_before_loop(f: &mut PrimFunc, lv: VarId, new: Stmt) -> Option<()> {
    let path = crate::primitives::scope::path_of(&f.body, &|s| ir_util::is_loop(s, lv))?;
    if let Some((last, parent_path)) = path.split_last() {
        let parent = at_mut(&mut f.body, parent_path)?;
        if let Stmt::Seq(v) = parent {
            v.insert(*last, new);
            return Some(());
        }
    }
    let slot = at_mut(&mut f.body, &path)?;
    let old = std::mem::replace(slot, Stmt::empty());
    *slot = Stmt::Seq(vec![new, old]);
    Some(())
}

fn decompose(f: &mut PrimFunc, name: &str, lv: VarId) -> Res<String> {
    let prim = "decompose_reduction";
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
    let Some(init) = b.init.clone() else {
        return Err(err(
            f,
            ErrorKind::NotReductionBlock,
            format!("`{prim}`: block `{name}` has no init"),
            bfocus,
        ));
    };
    let Some(lpos) = site.loops.iter().position(|v| *v == lv) else {
        return Err(err(
            f,
            ErrorKind::BadPlacement,
            format!("`{prim}`: the loop is not above block `{name}` in its scope"),
            Focus::Loop(lv),
        ));
    };
    if site.other_between {
        return Err(err(
            f,
            ErrorKind::Unsupported,
            format!("`{prim}`: an if/let lies between block `{name}` and the loop"),
            bfocus,
        ));
    }
    let use_ = usage(&b, &site.loops);
    for (k, v) in site.loops.iter().enumerate() {
        let (sp, rd) = use_[k];
        let lname = f.vars[*v].name.clone();
        if k < lpos && rd {
            return Err(err(
                f,
                ErrorKind::BadPlacement,
                format!(
                    "`{prim}`: loop `{lname}` above the target loop binds a reduction iterator; \
                     the init block must go above every reduction loop"
                ),
                Focus::Loop(lv),
            ));
        }
        if k >= lpos && sp && rd {
            return Err(err(
                f,
                ErrorKind::Unsupported,
                format!("`{prim}`: loop `{lname}` binds both spatial and reduction iterators"),
                Focus::Loop(*v),
            ));
        }
        if k >= lpos && !sp && !rd {
            let one =
                ir_util::find_loop(&f.body, *v).is_some_and(|l| same(&l.extent, &Expr::int(1)));
            if !one {
                return Err(err(
                    f,
                    ErrorKind::Unsupported,
                    format!(
                        "`{prim}`: loop `{lname}` binds no iterator of block `{name}`; the \
                         original init would run on each of its iterations"
                    ),
                    Focus::Loop(*v),
                ));
            }
        }
    }
    let spatial: Vec<VarId> = (lpos..site.loops.len())
        .filter(|k| use_[*k].0)
        .map(|k| site.loops[k])
        .collect();
    let reduce: Vec<VarId> = (lpos..site.loops.len())
        .filter(|k| use_[*k].1)
        .map(|k| site.loops[k])
        .collect();
    // The original init runs at the first step of the reduction.
    for it in b.iters.iter().filter(|it| it.kind == IterKind::Reduce) {
        let mins: HashMap<VarId, Expr> = reduce
            .iter()
            .filter_map(|v| ir_util::find_loop(&f.body, *v).map(|l| (*v, l.min.clone())))
            .collect();
        if !same(&subst(&it.binding, &mins), &it.min) {
            return Err(err(
                f,
                ErrorKind::Unsupported,
                format!(
                    "`{prim}`: iterator `{}` does not start at its domain minimum on the first \
                     reduction step, so the init's position cannot be kept",
                    f.vars[it.var].name
                ),
                bfocus,
            ));
        }
    }
    for v in &spatial {
        if let Some(l) = ir_util::find_loop(&f.body, *v) {
            if vars_of(&l.min)
                .iter()
                .chain(vars_of(&l.extent).iter())
                .any(|x| reduce.contains(x))
            {
                return Err(err(
                    f,
                    ErrorKind::Unsupported,
                    format!(
                        "`{prim}`: the bounds of loop `{}` depend on a reduction loop",
                        f.vars[*v].name
                    ),
                    Focus::Loop(*v),
                ));
            }
        }
    }
    if let Some(p) = &b.predicate {
        if vars_of(p).iter().any(|x| reduce.contains(x)) {
            return Err(err(
                f,
                ErrorKind::Unsupported,
                format!("`{prim}`: the predicate of block `{name}` depends on a reduction loop"),
                bfocus,
            ));
        }
    }
    let mut map = HashMap::new();
    let nest = copy_loops_kept(f, &spatial, &mut map);
    let g = guard(f, &reduce, &map, &reduce).map_err(|v| {
        err(
            f,
            ErrorKind::Unsupported,
            format!(
                "`{prim}`: the extent of reduction loop `{}` depends on another reduction loop; \
                 the init block cannot tell whether the reduction is empty",
                f.vars[v].name
            ),
            Focus::Loop(v),
        )
    })?;
    let pred = and(g, b.predicate.as_ref().map(|p| subst(p, &map)));
    let mut imap = HashMap::new();
    let mut iters = Vec::new();
    for it in b.iters.iter().filter(|it| it.kind == IterKind::Spatial) {
        let nv = f.add_var(f.vars[it.var].name.clone(), f.vars[it.var].dtype);
        imap.insert(it.var, Expr::Var(nv));
        iters.push(BlockIter {
            var: nv,
            min: it.min.clone(),
            extent: it.extent.clone(),
            kind: IterKind::Spatial,
            binding: subst(&it.binding, &map),
        });
    }
    let mut body = init;
    ir_util::subst_stmt(&mut body, &imap);
    if b.iters
        .iter()
        .any(|it| it.kind == IterKind::Reduce && ir_util::stmt_uses_var(&body, it.var))
    {
        return Err(err(
            f,
            ErrorKind::Unsupported,
            format!("`{prim}`: the init of block `{name}` uses a reduction iterator"),
            bfocus,
        ));
    }
    let (reads, writes) = regions_of(&body);
    let iname = unique_block_name(f, &format!("{name}_init"));
    let blk = Stmt::Block(Box::new(Block {
        name: iname.clone(),
        iters,
        predicate: pred,
        reads,
        writes,
        init: None,
        alloc_buffers: Vec::new(),
        annotations: b.annotations.clone(),
        body,
        span: Default::default(),
    }));
    let new = wrap_kept(&nest, blk);
    if let Some(x) = ir_util::find_block_mut(&mut f.body, name) {
        x.init = None;
    }
    insert_before_loop(f, lv, new).ok_or_else(|| {
        err(
            f,
            ErrorKind::Internal,
            "cannot place the init block",
            Focus::Loop(lv),
        )
    })?;
    Ok(iname)
}

// ----- rfactor -------------------------------------------------------------------------------

/// `C[idx] = C[idx] op x` with `op` commutative: `(op, x)`.
fn match_update(st: &Store) -> Option<(BinOp, Expr)> {
    let Expr::Binary(op, a, b) = &st.value else {
        return None;
    };
    if !matches!(op, BinOp::Add | BinOp::Mul | BinOp::Max | BinOp::Min) {
        return None;
    }
    let is_self = |e: &Expr| matches!(e, Expr::Load { buffer, indices } if *buffer == st.buffer && *indices == st.indices);
    if is_self(a) {
        Some((*op, (**b).clone()))
    } else if is_self(b) {
        Some((*op, (**a).clone()))
    } else {
        None
    }
}

/// Whether `e` is the identity of `op`.
fn is_identity(op: BinOp, e: &Expr) -> bool {
    match (op, e) {
        (BinOp::Add, Expr::Int(0, _)) => true,
        (BinOp::Add, Expr::Float(v, _)) => *v == 0.0,
        (BinOp::Mul, Expr::Int(1, _)) => true,
        (BinOp::Mul, Expr::Float(v, _)) => *v == 1.0,
        (
            BinOp::Max,
            Expr::Call {
                op: Intrinsic::MinValue,
                ..
            },
        ) => true,
        (BinOp::Max, Expr::Float(v, _)) => *v == f64::NEG_INFINITY,
        (
            BinOp::Min,
            Expr::Call {
                op: Intrinsic::MaxValue,
                ..
            },
        ) => true,
        (BinOp::Min, Expr::Float(v, _)) => *v == f64::INFINITY,
        _ => false,
    }
}

fn rfactor(f: &mut PrimFunc, lv: VarId, factor_axis: i64) -> Res<String> {
    let prim = "rfactor";
    let lfocus = Focus::Loop(lv);
    let Some(lstmt) = ir_util::find_loop(&f.body, lv).cloned() else {
        return Err(err(f, ErrorKind::NotFound, "the loop is gone", lfocus));
    };
    let blocks = direct_blocks(&lstmt.body);
    if blocks.len() != 1 || !crate::primitives::scope::blocks_in(&blocks[0].body).is_empty() {
        return Err(err(
            f,
            ErrorKind::Unsupported,
            format!("`{prim}`: the loop must hold exactly one block, with no block inside it"),
            lfocus,
        ));
    }
    let b = blocks[0].clone();
    let name = b.name.clone();
    let bfocus = Focus::Block(name.clone());
    let site = block_site(f, &name)?;
    let _ = loop_site(f, lv)?;
    let not_red = |f: &PrimFunc, why: &str| {
        err(
            f,
            ErrorKind::NotReductionBlock,
            format!("`{prim}`: block `{name}` {why}"),
            Focus::Block(name.clone()),
        )
    };
    let (Some(Stmt::Store(ist)), Stmt::Store(st)) = (b.init.clone(), b.body.clone()) else {
        return Err(not_red(
            f,
            "is not `init: C[idx] = identity; C[idx] = C[idx] op x`",
        ));
    };
    let Some((op, rhs)) = match_update(&st) else {
        return Err(not_red(
            f,
            "does not update `C[idx] = C[idx] op x` with op in +, *, max, min",
        ));
    };
    if ist.buffer != st.buffer || ist.indices != st.indices || !is_identity(op, &ist.value) {
        return Err(not_red(
            f,
            "does not start from the identity of its operator",
        ));
    }
    if !loads_in(&Stmt::Evaluate(rhs.clone()), st.buffer).is_empty() {
        return Err(not_red(f, "reads its output in the reduced value"));
    }
    let buf = st.buffer;
    let bname = f.buffers[buf].name.clone();
    let BufferShape::Dense(shape) = f.buffers[buf].shape.clone() else {
        return Err(err(
            f,
            ErrorKind::SparseBuffer,
            format!("`{prim}`: `{bname}` is a sparse buffer; lower to stage III first"),
            bfocus,
        ));
    };
    if b.predicate.is_some() {
        return Err(err(
            f,
            ErrorKind::Unsupported,
            format!("`{prim}`: block `{name}` has a predicate (a split that does not divide)"),
            bfocus,
        ));
    }
    if site.other_between {
        return Err(err(
            f,
            ErrorKind::Unsupported,
            format!("`{prim}`: an if/let lies above block `{name}`"),
            bfocus,
        ));
    }
    let its = items(f, &site);
    if !its.get(site.item).is_some_and(|s| is_own_nest(s, &name)) {
        return Err(err(
            f,
            ErrorKind::Unsupported,
            format!("`{prim}`: block `{name}` must be alone in its loop nest"),
            bfocus,
        ));
    }
    let use_ = usage(&b, &site.loops);
    let Some(lpos) = site.loops.iter().position(|v| *v == lv) else {
        return Err(err(
            f,
            ErrorKind::BadPlacement,
            "the loop is not above the block",
            lfocus,
        ));
    };
    if use_[lpos] != (false, true) {
        return Err(err(
            f,
            ErrorKind::InvalidArgument,
            format!("`{prim}`: the loop does not bind only reduction iterators of block `{name}`"),
            lfocus,
        ));
    }
    if let Some(v) = vars_of(&lstmt.min)
        .into_iter()
        .chain(vars_of(&lstmt.extent))
        .find(|v| !f.params.contains(v))
    {
        return Err(err(
            f,
            ErrorKind::Unsupported,
            format!(
                "`{prim}`: the loop's extent depends on `{}`, not only on parameters; a \
                 data-dependent extent cannot size the factor buffer (split it by a constant \
                 first)",
                f.vars[v].name
            ),
            lfocus,
        ));
    }
    let mut spatial = Vec::new();
    let mut reduce_other = Vec::new();
    for (k, v) in site.loops.iter().enumerate() {
        match use_[k] {
            (true, true) => {
                return Err(err(
                    f,
                    ErrorKind::Unsupported,
                    format!(
                        "`{prim}`: loop `{}` binds spatial and reduction iterators",
                        f.vars[*v].name
                    ),
                    Focus::Loop(*v),
                ))
            }
            (true, false) => spatial.push(*v),
            (false, true) if *v != lv => reduce_other.push(*v),
            (false, false)
                if !ir_util::find_loop(&f.body, *v)
                    .is_some_and(|l| same(&l.extent, &Expr::int(1))) =>
            {
                return Err(err(
                    f,
                    ErrorKind::Unsupported,
                    format!(
                        "`{prim}`: loop `{}` binds no iterator of block `{name}`",
                        f.vars[*v].name
                    ),
                    Focus::Loop(*v),
                ))
            }
            _ => {}
        }
    }
    for v in &reduce_other {
        if let Some(l) = ir_util::find_loop(&f.body, *v) {
            if vars_of(&l.min).contains(&lv) || vars_of(&l.extent).contains(&lv) {
                return Err(err(
                    f,
                    ErrorKind::Unsupported,
                    format!(
                        "`{prim}`: the bounds of loop `{}` depend on the factored loop",
                        f.vars[*v].name
                    ),
                    Focus::Loop(*v),
                ));
            }
        }
    }
    let ndim = shape.len() as i64;
    let fa = if factor_axis < 0 {
        factor_axis + ndim + 1
    } else {
        factor_axis
    };
    if !(0..=ndim).contains(&fa) {
        return Err(err(
            f,
            ErrorKind::InvalidArgument,
            format!("`{prim}`: factor_axis {factor_axis} is out of range for `{bname}` ({ndim} dimensions)"),
            lfocus,
        ));
    }
    let fa = fa as usize;
    // The factor buffer.
    let mut rf_shape = shape.clone();
    rf_shape.insert(fa, lstmt.extent.clone());
    let dtype = f.buffers[buf].dtype;
    let rf_buf = alloc_in_scope(f, &site, &format!("{bname}_rf"), rf_shape, dtype, "global");
    // The rf block: spatial iterators kept, one spatial iterator for the factored loop and one
    // reduction iterator per remaining reduction loop; the old reduction iterators become
    // expressions of those.
    let lname = f.vars[lv].name.clone();
    let v_rf = f.add_var(format!("v{lname}"), f.vars[lv].dtype);
    let mut loop_to_iter: HashMap<VarId, Expr> = HashMap::new();
    loop_to_iter.insert(lv, Expr::Var(v_rf));
    let mut new_iters: Vec<BlockIter> = b
        .iters
        .iter()
        .filter(|it| it.kind == IterKind::Spatial)
        .cloned()
        .collect();
    new_iters.push(BlockIter {
        var: v_rf,
        min: lstmt.min.clone(),
        extent: lstmt.extent.clone(),
        kind: IterKind::Spatial,
        binding: Expr::Var(lv),
    });
    for v in &reduce_other {
        let Some(l) = ir_util::find_loop(&f.body, *v).cloned() else {
            continue;
        };
        let nv = f.add_var(format!("v{}", f.vars[*v].name), f.vars[*v].dtype);
        loop_to_iter.insert(*v, Expr::Var(nv));
        new_iters.push(BlockIter {
            var: nv,
            min: l.min.clone(),
            extent: l.extent.clone(),
            kind: IterKind::Reduce,
            binding: Expr::Var(*v),
        });
    }
    let red_map: HashMap<VarId, Expr> = b
        .iters
        .iter()
        .filter(|it| it.kind == IterKind::Reduce)
        .map(|it| (it.var, subst(&it.binding, &loop_to_iter)))
        .collect();
    let mut idx_rf: Vec<Expr> = st.indices.iter().map(|e| subst(e, &red_map)).collect();
    idx_rf.insert(fa, Expr::Var(v_rf));
    let rhs_rf = subst(&rhs, &red_map);
    let rf_name = unique_block_name(f, &format!("{name}_rf"));
    let mut rf_blk = b.clone();
    rf_blk.name = rf_name.clone();
    rf_blk.iters = new_iters;
    if reduce_other.is_empty() {
        // Nothing left to reduce: each element of the factor buffer is written once.
        rf_blk.init = None;
        rf_blk.body = Stmt::Store(Store {
            buffer: rf_buf,
            indices: idx_rf.clone(),
            value: Expr::binary(op, ist.value.clone(), rhs_rf.clone()),
            span: st.span,
        });
    } else {
        rf_blk.init = Some(Stmt::Store(Store {
            buffer: rf_buf,
            indices: idx_rf.clone(),
            value: ist.value.clone(),
            span: ist.span,
        }));
        rf_blk.body = Stmt::Store(Store {
            buffer: rf_buf,
            indices: idx_rf.clone(),
            value: Expr::binary(op, Expr::load(rf_buf, idx_rf.clone()), rhs_rf.clone()),
            span: st.span,
        });
    }
    let mut reads: Vec<BufferRegion> = Vec::new();
    for r in b.reads.iter() {
        let r2 = if r.buffer == buf {
            point_region(rf_buf, &idx_rf)
        } else {
            BufferRegion {
                buffer: r.buffer,
                ranges: r
                    .ranges
                    .iter()
                    .map(|(a, c)| (subst(a, &red_map), subst(c, &red_map)))
                    .collect(),
            }
        };
        if !reads.contains(&r2) {
            reads.push(r2);
        }
    }
    rf_blk.reads = reads;
    rf_blk.writes = vec![point_region(rf_buf, &idx_rf)];
    // The write-back block.
    let mut map = HashMap::new();
    let forbidden: Vec<VarId> = site
        .loops
        .iter()
        .copied()
        .filter(|v| !spatial.contains(v))
        .collect();
    let mut nest = copy_loops_kept(f, &spatial, &mut map);
    let ax = f.add_var(lname.clone(), f.vars[lv].dtype);
    nest.push((
        ax,
        lstmt.min.clone(),
        lstmt.extent.clone(),
        ForKind::Serial,
        None,
        Attrs::new(),
    ));
    let g = guard(f, &reduce_other, &map, &forbidden).map_err(|v| {
        err(
            f,
            ErrorKind::Unsupported,
            format!(
                "`{prim}`: the extent of reduction loop `{}` depends on another reduction loop; \
                 the write-back cannot tell whether the reduction is empty",
                f.vars[v].name
            ),
            Focus::Loop(v),
        )
    })?;
    let mut imap = HashMap::new();
    let mut wb_iters = Vec::new();
    for it in b.iters.iter().filter(|it| it.kind == IterKind::Spatial) {
        let nv = f.add_var(f.vars[it.var].name.clone(), f.vars[it.var].dtype);
        imap.insert(it.var, Expr::Var(nv));
        wb_iters.push(BlockIter {
            var: nv,
            min: it.min.clone(),
            extent: it.extent.clone(),
            kind: IterKind::Spatial,
            binding: subst(&it.binding, &map),
        });
    }
    let v_red = f.add_var(format!("v{lname}"), f.vars[lv].dtype);
    wb_iters.push(BlockIter {
        var: v_red,
        min: lstmt.min.clone(),
        extent: lstmt.extent.clone(),
        kind: IterKind::Reduce,
        binding: Expr::Var(ax),
    });
    let widx: Vec<Expr> = st.indices.iter().map(|e| subst(e, &imap)).collect();
    if widx
        .iter()
        .any(|e| b.iters.iter().any(|it| vars_of(e).contains(&it.var)))
    {
        return Err(not_red(f, "indexes its output by a reduction iterator"));
    }
    let mut ridx = widx.clone();
    ridx.insert(fa, Expr::Var(v_red));
    let mut wb_reads = vec![point_region(buf, &widx), point_region(rf_buf, &ridx)];
    for r in index_reads(&widx) {
        if !wb_reads.contains(&r) {
            wb_reads.push(r);
        }
    }
    let wb = Stmt::Block(Box::new(Block {
        name: name.clone(),
        iters: wb_iters,
        predicate: g,
        reads: wb_reads,
        writes: vec![point_region(buf, &widx)],
        init: Some(Stmt::Store(Store {
            buffer: buf,
            indices: widx.clone(),
            value: ist.value.clone(),
            span: Default::default(),
        })),
        alloc_buffers: Vec::new(),
        annotations: b.annotations.clone(),
        body: Stmt::Store(Store {
            buffer: buf,
            indices: widx.clone(),
            value: Expr::binary(op, Expr::load(buf, widx.clone()), Expr::load(rf_buf, ridx)),
            span: Default::default(),
        }),
        span: Default::default(),
    }));
    let wb = wrap_kept(&nest, wb);
    if let Some(slot) = ir_util::find_mut(&mut f.body, &|s| ir_util::is_block(s, &name)) {
        *slot = Stmt::Block(Box::new(rf_blk));
    }
    with_items(f, &site, |items| items.insert(site.item + 1, wb));
    Ok(rf_name)
}

pub(crate) fn replay(sch: &mut Schedule, call: &Call) -> Result<Option<Vec<AnyRV>>, ReplayError> {
    let out: AnyRV = match call.name() {
        "decompose_reduction" => sch
            .decompose_reduction(call.block(0, "block")?, call.loop_(1, "loop")?)?
            .into(),
        "rfactor" => sch
            .rfactor(call.loop_(0, "loop")?, call.int(1, "factor_axis")?)?
            .into(),
        _ => return Ok(None),
    };
    Ok(Some(vec![out]))
}
