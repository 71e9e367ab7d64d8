//! Block scopes and the tree helpers shared by the block, cache and reduction primitives
//! (where a block sits: its enclosing block, the loops in between and the top-level statement
//! of the scope that holds it; buffer accesses; regions; fresh names), plus `set_scope` and
//! `storage_align`.
//!
//! A block's *scope* is its nearest enclosing block, or the function body when there is none.
//! The *items* of a scope are the statements of the scope's body (the elements of its sequence,
//! or the body itself when it is not a sequence); primitives insert new stages between items.

use std::collections::{HashMap, HashSet};

use sparsetir_ir::{
    BinOp, Block, Buffer, BufferDecl, BufferId, BufferRegion, BufferShape, DType, Expr, PrimFunc,
    Stage, Stmt, VarId,
};

use crate::error::{ErrorKind, Focus, ScheduleError};
use crate::ir_util;
use crate::state::{BlockRV, Res, Schedule};
use crate::trace::{Arg, Call, ReplayError};
use crate::AnyRV;

/// Storage scopes a buffer may be given.
pub const KNOWN_SCOPES: &[&str] = &["global", "shared", "shared.dyn", "local", "warp"];

/// Checks a storage scope name (`global`, `shared`, `shared.dyn`, `local`, `warp`, `wmma.*`).
pub(crate) fn check_scope_name(func: &PrimFunc, scope: &str, focus: Focus) -> Res<()> {
    if KNOWN_SCOPES.contains(&scope) || scope.starts_with("wmma.") {
        Ok(())
    } else {
        Err(ScheduleError::new(
            ErrorKind::InvalidArgument,
            format!(
                "unknown storage scope `{scope}` (expected one of {}, or `wmma.*`)",
                KNOWN_SCOPES.join(", ")
            ),
            func,
            focus,
        ))
    }
}

// ----- paths ---------------------------------------------------------------------------------

/// The child statements of `s` in [`ir_util::push_children`] order.
fn children(s: &Stmt) -> Vec<&Stmt> {
    let mut v = Vec::new();
    ir_util::push_children(s, &mut v);
    v
}

/// The path (child indices) from `root` to the first statement satisfying `pred`.
pub(crate) fn path_of(root: &Stmt, pred: &dyn Fn(&Stmt) -> bool) -> Option<Vec<usize>> {
    fn go(s: &Stmt, pred: &dyn Fn(&Stmt) -> bool, path: &mut Vec<usize>) -> bool {
        if pred(s) {
            return true;
        }
        for (i, c) in children(s).into_iter().enumerate() {
            path.push(i);
            if go(c, pred, path) {
                return true;
            }
            path.pop();
        }
        false
    }
    let mut path = Vec::new();
    go(root, pred, &mut path).then_some(path)
}

/// The statement at `path` under `root`.
pub(crate) fn at<'a>(root: &'a Stmt, path: &[usize]) -> Option<&'a Stmt> {
    let mut s = root;
    for &i in path {
        s = children(s).into_iter().nth(i)?;
    }
    Some(s)
}

/// The statement at `path` under `root`, mutably.
pub(crate) fn at_mut<'a>(root: &'a mut Stmt, path: &[usize]) -> Option<&'a mut Stmt> {
    let mut s = root;
    for &i in path {
        s = ir_util::children_mut(s).into_iter().nth(i)?;
    }
    Some(s)
}

/// Where a block (or loop) sits.
#[derive(Clone, Debug)]
pub(crate) struct Site {
    /// Path from the function body to the statement.
    pub path: Vec<usize>,
    /// The enclosing block (the scope), if any.
    pub scope_block: Option<String>,
    /// Path to the scope's body statement.
    pub body_path: Vec<usize>,
    /// Index of the item holding the statement.
    pub item: usize,
    /// Loops between the scope and the statement, outer to inner (the statement excluded).
    pub loops: Vec<VarId>,
    /// A statement other than a loop lies between the scope's item and the statement.
    pub other_between: bool,
}

/// Locates the first statement satisfying `pred`.
pub(crate) fn site_of(func: &PrimFunc, pred: &dyn Fn(&Stmt) -> bool) -> Option<Site> {
    let path = path_of(&func.body, pred)?;
    // Find the last block strictly above the statement.
    let mut scope_depth: Option<usize> = None; // index into path prefix lengths
    let mut node = &func.body;
    let mut nodes: Vec<&Stmt> = vec![node];
    for &i in &path {
        node = children(node).into_iter().nth(i)?;
        nodes.push(node);
    }
    for (d, n) in nodes[..nodes.len() - 1].iter().enumerate() {
        if matches!(n, Stmt::Block(_)) {
            scope_depth = Some(d);
        }
    }
    let (scope_block, body_path) = match scope_depth {
        Some(d) => {
            let Stmt::Block(b) = nodes[d] else {
                return None;
            };
            let mut bp = path[..d].to_vec();
            bp.push(if b.init.is_some() { 1 } else { 0 });
            (Some(b.name.clone()), bp)
        }
        None => (None, Vec::new()),
    };
    // The body must be on the way (the statement is not inside the scope's init).
    if path.len() < body_path.len() || path[..body_path.len()] != body_path[..] {
        return None;
    }
    let body = at(&func.body, &body_path)?;
    let body_is_seq = matches!(body, Stmt::Seq(_));
    let rest = &path[body_path.len()..];
    let (item, below_item) = if body_is_seq {
        (*rest.first()?, body_path.len() + 1)
    } else {
        (0, body_path.len())
    };
    let mut loops = Vec::new();
    let mut other_between = false;
    for n in &nodes[below_item..nodes.len() - 1] {
        match n {
            Stmt::For(l) => loops.push(l.var),
            Stmt::Seq(_) => {}
            _ => other_between = true,
        }
    }
    Some(Site {
        path,
        scope_block,
        body_path,
        item,
        loops,
        other_between,
    })
}

/// Locates block `name`.
pub(crate) fn block_site(func: &PrimFunc, name: &str) -> Res<Site> {
    site_of(func, &|s| ir_util::is_block(s, name)).ok_or_else(|| {
        ScheduleError::new(
            ErrorKind::NotFound,
            format!("block `{name}` is not in the function body"),
            func,
            Focus::Block(name.to_string()),
        )
    })
}

/// Locates the loop over `var`.
pub(crate) fn loop_site(func: &PrimFunc, var: VarId) -> Res<Site> {
    site_of(func, &|s| ir_util::is_loop(s, var)).ok_or_else(|| {
        ScheduleError::new(
            ErrorKind::NotFound,
            "the loop is not in the function body",
            func,
            Focus::Loop(var),
        )
    })
}

/// The items of a scope body.
pub(crate) fn take_items(body: &mut Stmt) -> Vec<Stmt> {
    match std::mem::replace(body, Stmt::empty()) {
        Stmt::Seq(v) => v,
        other => vec![other],
    }
}

/// Puts items back as a scope body.
pub(crate) fn put_items(body: &mut Stmt, items: Vec<Stmt>) {
    *body = if items.len() == 1 {
        items.into_iter().next().unwrap_or_else(Stmt::empty)
    } else {
        Stmt::Seq(items)
    };
}

/// The items of the scope of `site`, read-only.
pub(crate) fn items<'a>(func: &'a PrimFunc, site: &Site) -> Vec<&'a Stmt> {
    match at(&func.body, &site.body_path) {
        Some(Stmt::Seq(v)) => v.iter().collect(),
        Some(s) => vec![s],
        None => Vec::new(),
    }
}

/// Runs `f` on the items of the scope of `site` (a mutable vector to insert into / remove
/// from).
pub(crate) fn with_items<R>(
    func: &mut PrimFunc,
    site: &Site,
    f: impl FnOnce(&mut Vec<Stmt>) -> R,
) -> Option<R> {
    let body = at_mut(&mut func.body, &site.body_path)?;
    let mut items = take_items(body);
    let r = f(&mut items);
    put_items(body, items);
    Some(r)
}

/// True when `s` is a chain of loops (each the only statement of its parent) ending at block
/// `name`.
pub(crate) fn is_own_nest(s: &Stmt, name: &str) -> bool {
    match s {
        Stmt::Block(b) => b.name == name,
        Stmt::For(l) => is_own_nest(&l.body, name),
        Stmt::Seq(v) if v.len() == 1 => is_own_nest(&v[0], name),
        _ => false,
    }
}

// ----- blocks and accesses -------------------------------------------------------------------

/// Every block in `s` (itself included), pre-order.
pub(crate) fn blocks_in(s: &Stmt) -> Vec<&Block> {
    let mut out = Vec::new();
    fn go<'a>(s: &'a Stmt, out: &mut Vec<&'a Block>) {
        if let Stmt::Block(b) = s {
            out.push(b);
        }
        for c in children(s) {
            go(c, out)
        }
    }
    go(s, &mut out);
    out
}

/// Index tuples of every load of `buf` in `e`.
pub(crate) fn loads_in_expr(e: &Expr, buf: BufferId, out: &mut Vec<Vec<Expr>>) {
    e.visit(&mut |x| {
        if let Expr::Load { buffer, indices } = x {
            if *buffer == buf {
                out.push(indices.clone());
            }
        }
    });
}

/// Index tuples of every load of `buf` in `s` (every expression of every statement).
pub(crate) fn loads_in(s: &Stmt, buf: BufferId) -> Vec<Vec<Expr>> {
    let mut out = Vec::new();
    s.visit(&mut |st| st.for_each_expr(|e| loads_in_expr(e, buf, &mut out)));
    out
}

/// Index tuples of every store to `buf` in `s`.
pub(crate) fn stores_in(s: &Stmt, buf: BufferId) -> Vec<Vec<Expr>> {
    let mut out = Vec::new();
    s.visit(&mut |st| {
        if let Stmt::Store(x) = st {
            if x.buffer == buf {
                out.push(x.indices.clone());
            }
        }
    });
    out
}

/// Buffers loaded and buffers stored anywhere in `s`.
pub(crate) fn accessed(s: &Stmt) -> (HashSet<BufferId>, HashSet<BufferId>) {
    let mut reads = HashSet::new();
    let mut writes = HashSet::new();
    s.visit(&mut |st| {
        if let Stmt::Store(x) = st {
            writes.insert(x.buffer);
        }
        st.for_each_expr(|e| {
            e.visit(&mut |x| {
                if let Expr::Load { buffer, .. } = x {
                    reads.insert(*buffer);
                }
            })
        });
    });
    (reads, writes)
}

/// Buffers loaded inside `e`.
pub(crate) fn loaded_in_expr(e: &Expr) -> Vec<(BufferId, Vec<Expr>)> {
    let mut out = Vec::new();
    e.visit(&mut |x| {
        if let Expr::Load { buffer, indices } = x {
            out.push((*buffer, indices.clone()));
        }
    });
    out
}

/// Rewrites every expression of `s` (and its descendants) bottom-up with `f`.
pub(crate) fn rewrite_exprs(s: &mut Stmt, f: &mut dyn FnMut(&mut Expr)) {
    ir_util::for_each_expr_mut(s, &mut |e| rewrite_expr(e, f));
}

/// Rewrites `e` bottom-up: children first, then `f` on the node.
pub(crate) fn rewrite_expr(e: &mut Expr, f: &mut dyn FnMut(&mut Expr)) {
    e.rewrite_post_order(f)
}

/// Calls `f` on every statement of `s` (pre-order), mutably.
pub(crate) fn walk_stmts_mut(s: &mut Stmt, f: &mut dyn FnMut(&mut Stmt)) {
    f(s);
    for c in ir_util::children_mut(s) {
        walk_stmts_mut(c, f);
    }
}

/// Redirects every access (loads, stores, regions) of `old` in `s` to `new`, mapping indices
/// with `idx` (which receives the old indices).
pub(crate) fn redirect(
    s: &mut Stmt,
    old: BufferId,
    new: BufferId,
    idx: &dyn Fn(&[Expr]) -> Vec<Expr>,
    region: &dyn Fn(&BufferRegion) -> BufferRegion,
) {
    rewrite_exprs(s, &mut |e| {
        if let Expr::Load { buffer, indices } = e {
            if *buffer == old {
                *indices = idx(indices);
                *buffer = new;
            }
        }
    });
    walk_stmts_mut(s, &mut |st| match st {
        Stmt::Store(x) if x.buffer == old => {
            x.indices = idx(&x.indices);
            x.buffer = new;
        }
        Stmt::Block(b) => {
            for r in b.reads.iter_mut().chain(b.writes.iter_mut()) {
                if r.buffer == old {
                    *r = region(r);
                }
            }
        }
        _ => {}
    });
}

// ----- expressions ---------------------------------------------------------------------------

/// The variables mentioned in `e`.
pub(crate) fn vars_of(e: &Expr) -> Vec<VarId> {
    let mut out = Vec::new();
    e.visit(&mut |x| {
        if let Expr::Var(v) = x {
            if !out.contains(v) {
                out.push(*v)
            }
        }
    });
    out
}

/// Light constant folding of index arithmetic (`x + 0`, `0 + x`, `x * 1`, `c1 op c2`).
pub(crate) fn fold(e: &Expr) -> Expr {
    match e {
        Expr::Binary(op, a, b) => {
            let a = fold(a);
            let b = fold(b);
            match (op, a.as_int(), b.as_int()) {
                (BinOp::Add, Some(x), Some(y)) => Expr::Int(x.wrapping_add(y), int_ty(&a, &b)),
                (BinOp::Sub, Some(x), Some(y)) => Expr::Int(x.wrapping_sub(y), int_ty(&a, &b)),
                (BinOp::Mul, Some(x), Some(y)) => Expr::Int(x.wrapping_mul(y), int_ty(&a, &b)),
                (BinOp::Add, _, Some(0)) | (BinOp::Sub, _, Some(0)) | (BinOp::Mul, _, Some(1)) => a,
                (BinOp::Add, Some(0), _) | (BinOp::Mul, Some(1), _) => b,
                _ => Expr::binary(*op, a, b),
            }
        }
        other => other.clone(),
    }
}

fn int_ty(a: &Expr, b: &Expr) -> DType {
    match (a, b) {
        (Expr::Int(_, x), Expr::Int(_, y)) => sparsetir_ir::expr::binary_result_dtype(*x, *y),
        _ => DType::I32,
    }
}

/// `a + b`, folded.
pub(crate) fn add(a: Expr, b: Expr) -> Expr {
    fold(&Expr::add(a, b))
}

/// A constant `1` for extents of point regions.
pub(crate) fn one() -> Expr {
    Expr::Int(1, DType::I32)
}

/// True when `e` is an integer constant `>= 1`.
pub(crate) fn is_positive_const(e: &Expr) -> bool {
    matches!(fold(e).as_int(), Some(v) if v >= 1)
}

/// Structural equality after folding.
pub(crate) fn same(a: &Expr, b: &Expr) -> bool {
    let (a, b) = (fold(a), fold(b));
    match (&a, &b) {
        (Expr::Int(x, _), Expr::Int(y, _)) => x == y,
        _ => a == b,
    }
}

/// Substitutes variables (a copy).
pub(crate) fn subst(e: &Expr, map: &HashMap<VarId, Expr>) -> Expr {
    let mut e = e.clone();
    ir_util::subst_expr(&mut e, map);
    fold(&e)
}

// ----- regions and buffers -------------------------------------------------------------------

/// A point region `buf[idx]`.
pub(crate) fn point_region(buf: BufferId, idx: &[Expr]) -> BufferRegion {
    BufferRegion {
        buffer: buf,
        ranges: idx.iter().map(|e| (e.clone(), one())).collect(),
    }
}

/// The whole buffer as a region (sparse dimensions span their axis length).
pub(crate) fn full_region(func: &PrimFunc, buf: BufferId) -> BufferRegion {
    let b = &func.buffers[buf];
    let ranges = match &b.shape {
        BufferShape::Dense(d) => d
            .iter()
            .map(|e| (Expr::Int(0, e.dtype(func)), e.clone()))
            .collect(),
        BufferShape::Sparse(axes) => axes
            .iter()
            .map(|a| {
                let len = func.axes[*a].length.clone();
                (Expr::Int(0, len.dtype(func)), len)
            })
            .collect(),
    };
    BufferRegion {
        buffer: buf,
        ranges,
    }
}

/// The read regions of every load inside the index expressions `idx` (for stages that compute
/// an index through auxiliary buffers, like `B[J_indices[vj + J_indptr[vi]], vk]`).
pub(crate) fn index_reads(idx: &[Expr]) -> Vec<BufferRegion> {
    let mut out: Vec<BufferRegion> = Vec::new();
    for e in idx {
        for (b, i) in loaded_in_expr(e) {
            let r = point_region(b, &i);
            if !out.contains(&r) {
                out.push(r);
            }
        }
    }
    out
}

/// Adds `r` to `regions`, merging with an existing region of the same buffer (two different
/// regions of one buffer become the whole buffer).
pub(crate) fn merge_region(func: &PrimFunc, regions: &mut Vec<BufferRegion>, r: BufferRegion) {
    if let Some(old) = regions.iter_mut().find(|x| x.buffer == r.buffer) {
        if *old != r {
            *old = full_region(func, r.buffer);
        }
    } else {
        regions.push(r);
    }
}

/// A name not used by any block of the function.
pub(crate) fn unique_block_name(func: &PrimFunc, base: &str) -> String {
    let names = ir_util::block_names(&func.body);
    if !names.iter().any(|n| n == base) {
        return base.to_string();
    }
    (1..)
        .map(|i| format!("{base}_{i}"))
        .find(|n| !names.contains(n))
        .unwrap_or_else(|| base.to_string())
}

/// A name not used by any buffer of the function.
pub(crate) fn unique_buffer_name(func: &PrimFunc, base: &str) -> String {
    let taken = |n: &str| func.buffers.iter().any(|(_, b)| b.name == n);
    if !taken(base) {
        return base.to_string();
    }
    (1..)
        .map(|i| format!("{base}_{i}"))
        .find(|n| !taken(n))
        .unwrap_or_else(|| base.to_string())
}

/// Declares a new dense allocated buffer in the scope of `site` (the scope block's
/// `alloc_buffers`, or the function's declarations).
pub(crate) fn alloc_in_scope(
    func: &mut PrimFunc,
    site: &Site,
    name: &str,
    shape: Vec<Expr>,
    dtype: DType,
    scope: &str,
) -> BufferId {
    let name = unique_buffer_name(func, name);
    let id = func.buffers.append(Buffer {
        name,
        decl: BufferDecl::Alloc,
        shape: BufferShape::Dense(shape),
        dtype,
        scope: scope.to_string(),
        strides: Vec::new(),
        extra_storage: None,
        default_value: None,
        span: Default::default(),
    });
    match &site.scope_block {
        Some(b) => {
            if let Some(blk) = ir_util::find_block_mut(&mut func.body, b) {
                blk.alloc_buffers.push(id);
            }
        }
        None => func.buffer_decls.push(id),
    }
    id
}

/// Variables bound between the scope and the statement (loop variables and anything else
/// defined on the way: `let`, block iterators of enclosing blocks are outside the scope).
pub(crate) fn vars_between(func: &PrimFunc, site: &Site) -> Vec<VarId> {
    let mut out = site.loops.clone();
    let mut node = match at(&func.body, &site.body_path) {
        Some(s) => s,
        None => return out,
    };
    for &i in &site.path[site.body_path.len()..] {
        if let Stmt::Let(l) = node {
            out.push(l.var);
        }
        match children(node).into_iter().nth(i) {
            Some(c) => node = c,
            None => break,
        }
    }
    out
}

// ----- set_scope -----------------------------------------------------------------------------

impl Schedule {
    /// `sch.set_scope(block, buffer_index, storage_scope)`: sets the storage scope of the
    /// buffer the block writes at `buffer_index` (its `T.writes` list). The buffer must be an
    /// intermediate (`alloc_buffer`/`allocate`), not a function parameter.
    pub fn set_scope(&mut self, block: BlockRV, buffer_index: usize, scope: &str) -> Res<()> {
        self.require_stage("set_scope", &[Stage::II, Stage::III])?;
        let name = self.block_name(block)?;
        self.transact("set_scope", |f| {
            let focus = Focus::Block(name.clone());
            check_scope_name(f, scope, focus.clone())?;
            let buf = nth_buffer(f, &name, buffer_index, true)?;
            if let BufferDecl::Match { .. } = f.buffers[buf].decl {
                return Err(ScheduleError::new(
                    ErrorKind::InvalidArgument,
                    format!(
                        "`{}` is bound to a function parameter; only intermediate buffers can \
                         change storage scope",
                        f.buffers[buf].name
                    ),
                    f,
                    focus,
                ));
            }
            f.buffers[buf].scope = scope.to_string();
            Ok(())
        })?;
        self.record(
            "set_scope",
            vec![
                Arg::Var(block.trace_name()),
                Arg::Int(buffer_index as i64),
                Arg::Str(scope.to_string()),
            ],
            vec![],
            vec![],
            false,
        );
        Ok(())
    }
}

impl Schedule {
    /// `sch.storage_align(block, buffer_index, axis, factor, offset)`: pads the intermediate
    /// buffer the block writes at `buffer_index` so that the stride of dimension `axis` is
    /// `offset` modulo `factor` (TVM's primitive: the rows of a shared-memory tile moved off
    /// the bank period). The dimensions inside `axis` stay compact and the outer ones are
    /// compact over the padded stride: the buffer grows by the padding, its elements keep their
    /// indices. Its extents from `axis + 1` inward must be constants; a buffer aligned once
    /// keeps its strides (one axis per buffer).
    pub fn storage_align(
        &mut self,
        block: BlockRV,
        buffer_index: usize,
        axis: usize,
        factor: i64,
        offset: i64,
    ) -> Res<()> {
        self.require_stage("storage_align", &[Stage::II, Stage::III])?;
        let name = self.block_name(block)?;
        self.transact("storage_align", |f| {
            let focus = Focus::Block(name.clone());
            let bad = |f: &PrimFunc, kind, message: String| {
                Err(ScheduleError::new(kind, message, f, focus.clone()))
            };
            if factor <= 0 || offset < 0 || offset >= factor {
                return bad(
                    f,
                    ErrorKind::InvalidArgument,
                    format!("factor {factor} and offset {offset}: need factor > 0 and 0 <= offset < factor"),
                );
            }
            let buf = nth_buffer(f, &name, buffer_index, true)?;
            let b = &f.buffers[buf];
            if let BufferDecl::Match { .. } = b.decl {
                return bad(
                    f,
                    ErrorKind::InvalidArgument,
                    format!(
                        "`{}` is bound to a function parameter, whose layout is the caller's; \
                         only intermediate buffers can be padded",
                        b.name
                    ),
                );
            }
            let BufferShape::Dense(dims) = &b.shape else {
                return bad(
                    f,
                    ErrorKind::SparseBuffer,
                    format!("`{}` is a sparse buffer, which has no strides", b.name),
                );
            };
            if axis >= dims.len() {
                return bad(
                    f,
                    ErrorKind::InvalidArgument,
                    format!("`{}` has {} dimension(s); axis {axis} is out of range", b.name, dims.len()),
                );
            }
            if !b.strides.is_empty() || b.extra_storage.is_some() {
                return bad(
                    f,
                    ErrorKind::Unsupported,
                    format!("`{}` already has explicit strides or extra storage", b.name),
                );
            }
            let mut inner = Vec::with_capacity(dims.len() - axis);
            let mut compact: i64 = 1;
            for d in dims[axis + 1..].iter().rev() {
                let Some(e) = d.as_int().filter(|e| *e >= 0) else {
                    return bad(
                        f,
                        ErrorKind::InvalidArgument,
                        format!(
                            "`{}`: the extents inside axis {axis} must be constants to align its stride",
                            b.name
                        ),
                    );
                };
                inner.push(compact);
                compact = compact.saturating_mul(e);
            }
            inner.reverse();
            let padded = compact + (offset - compact % factor).rem_euclid(factor);
            let dt = DType::I64;
            let mut strides = vec![Expr::Int(padded, dt)];
            strides.extend(inner.into_iter().map(|s| Expr::Int(s, dt)));
            f.buffers[buf].strides = strides;
            Ok(())
        })?;
        self.record(
            "storage_align",
            vec![
                Arg::Var(block.trace_name()),
                Arg::Int(buffer_index as i64),
                Arg::Int(axis as i64),
                Arg::Int(factor),
                Arg::Int(offset),
            ],
            vec![],
            vec![],
            false,
        );
        Ok(())
    }
}

/// The buffer of block `name`'s `T.writes` (`write = true`) or `T.reads` entry `index`.
pub(crate) fn nth_buffer(func: &PrimFunc, name: &str, index: usize, write: bool) -> Res<BufferId> {
    let focus = Focus::Block(name.to_string());
    let Some(b) = ir_util::find_block(&func.body, name) else {
        return Err(ScheduleError::new(
            ErrorKind::NotFound,
            format!("no block `{name}`"),
            func,
            focus,
        ));
    };
    let list = if write { &b.writes } else { &b.reads };
    let what = if write { "writes" } else { "reads" };
    match list.get(index) {
        Some(r) => Ok(r.buffer),
        None => Err(ScheduleError::new(
            ErrorKind::InvalidArgument,
            format!(
                "block `{name}` {what} {} buffer(s); index {index} is out of range",
                list.len()
            ),
            func,
            focus,
        )),
    }
}

/// A non-negative integer argument.
pub(crate) fn index_arg(call: &Call, i: usize, key: &str) -> Result<usize, ReplayError> {
    let v = call.int(i, key)?;
    usize::try_from(v).map_err(|_| {
        ReplayError::Args(format!(
            "`{}`: `{key}` must be non-negative, got {v}",
            call.name()
        ))
    })
}

pub(crate) fn replay(sch: &mut Schedule, call: &Call) -> Result<Option<Vec<AnyRV>>, ReplayError> {
    match call.name() {
        "set_scope" => {
            let b = call.block(0, "block")?;
            let i = index_arg(call, 1, "buffer_index")?;
            let s = call.str(2, "storage_scope")?;
            sch.set_scope(b, i, s)?;
            Ok(Some(vec![]))
        }
        "storage_align" => {
            let b = call.block(0, "block")?;
            let i = index_arg(call, 1, "buffer_index")?;
            let axis = index_arg(call, 2, "axis")?;
            let factor = call.int(3, "factor")?;
            let offset = call.int(4, "offset")?;
            sch.storage_align(b, i, axis, factor, offset)?;
            Ok(Some(vec![]))
        }
        _ => Ok(None),
    }
}
