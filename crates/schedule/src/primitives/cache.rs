//! Cache primitives: `cache_read`, `cache_write` (TensorIR's: a copy of a buffer region in
//! another storage scope, filled before / written back after the block's stage) and SparseTIR's
//! `reverse_cache_read`, `reverse_cache_write`, whose cache is indexed by the *block's own
//! iterators*, so a gather `B[J_indices[vj + J_indptr[vi]], vk]` becomes a dense tile
//! `B_local[vj, vk]` filled by a copy block over the same loops.
//!
//! Soundness rules beyond TensorIR's:
//! - `cache_read`/`cache_write` copy whole regions along buffer dimensions, which a sparse
//!   buffer (stage II) does not have: they fail with `SparseBuffer` (the reverse forms work,
//!   since they replay the block's own index expressions).
//! - The write-back of `cache_write`/`reverse_cache_write` stores every cached element, so the
//!   cache is first filled from the buffer (a `<buf>_<scope>_in` block) unless the block
//!   provably writes every element before reading it: a sparse reduction over an empty row
//!   never runs its init, and the element must keep its value.
//! - `reverse_cache_write` needs each index to be injective in the block iterators it uses
//!   (`vk`, `vj + J_indptr[vi]`), or two accumulators would stand for one element.
//! - The reverse forms copy every element the block's iterators name, unconditionally, so the
//!   block must access the buffer unconditionally too: an access under an `if` (a coordinate
//!   a binary search may not find), a selected branch or a loop inside the block is refused.
//! - A reverse read's fill stage goes after every earlier writer in the scope of what it reads,
//!   its addressing included (the rows a binary search block computes for a fused iterator).

use std::collections::HashMap;

use sparsetir_ir::{
    Block, BlockIter, BufferId, BufferShape, Expr, For, ForKind, IterKind, PrimFunc,
};
use sparsetir_ir::{DType, Stage, Stmt, Store, VarId};

use crate::error::{ErrorKind, Focus, ScheduleError};
use crate::ir_util;
use crate::primitives::scope::{
    accessed, add, alloc_in_scope, block_site, check_scope_name, fold, full_region, index_arg,
    index_reads, is_positive_const, items, loads_in, nth_buffer, point_region, redirect,
    rewrite_exprs, same, stores_in, subst, unique_block_name, vars_between, vars_of,
    walk_stmts_mut, with_items, Site,
};
use crate::state::{AnyRV, BlockRV, Res, Schedule};
use crate::trace::{Arg, Call, ReplayError};

/// Which cache primitive runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Read,
    Write,
    ReverseRead,
    ReverseWrite,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Read => "cache_read",
            Kind::Write => "cache_write",
            Kind::ReverseRead => "reverse_cache_read",
            Kind::ReverseWrite => "reverse_cache_write",
        }
    }
    fn is_read(self) -> bool {
        matches!(self, Kind::Read | Kind::ReverseRead)
    }
}

impl Schedule {
    /// `sch.cache_read(block, read_buffer_index, storage_scope)`: reads of the block's
    /// `read_buffer_index`-th read buffer (and of every later reader in the scope) go to a new
    /// buffer `<buf>_<scope>`, filled by a new block (returned) placed at the start of the
    /// scope, or right after the buffer's only writer in the scope.
    pub fn cache_read(
        &mut self,
        block: BlockRV,
        read_buffer_index: usize,
        scope: &str,
    ) -> Res<BlockRV> {
        self.cache_common(Kind::Read, block, read_buffer_index, scope)
    }

    /// `sch.cache_write(block, write_buffer_index, storage_scope)`: the block (the buffer's only
    /// writer in its scope) writes a new buffer `<buf>_<scope>` instead, copied back by a new
    /// block (returned) placed right after the block's loop nest.
    pub fn cache_write(
        &mut self,
        block: BlockRV,
        write_buffer_index: usize,
        scope: &str,
    ) -> Res<BlockRV> {
        self.cache_common(Kind::Write, block, write_buffer_index, scope)
    }

    /// `sch.reverse_cache_read(block, read_buffer_index, storage_scope)`: the block's read
    /// `buf[idx]` (a single point) becomes `buf_<scope>[v...]`, indexed by the block iterators
    /// `idx` uses; a new block (returned) at the start of the scope fills the cache over the
    /// loops that bind those iterators.
    pub fn reverse_cache_read(
        &mut self,
        block: BlockRV,
        read_buffer_index: usize,
        scope: &str,
    ) -> Res<BlockRV> {
        self.cache_common(Kind::ReverseRead, block, read_buffer_index, scope)
    }

    /// `sch.reverse_cache_read(block, read_buffer_index, storage_scope, dtype="float32")`: the
    /// same, the cache holding the values converted to `dtype` once, as the fill copies them
    /// (16-bit floats widened to float32 where a block reads each of them many times). `dtype`
    /// must hold every value of the buffer's type exactly: float16/bfloat16 to float32 or
    /// float64, float32 to float64, or the buffer's own type.
    pub fn reverse_cache_read_as(
        &mut self,
        block: BlockRV,
        read_buffer_index: usize,
        scope: &str,
        dtype: DType,
    ) -> Res<BlockRV> {
        self.cache_with(
            Kind::ReverseRead,
            block,
            read_buffer_index,
            scope,
            Some(dtype),
        )
    }

    /// `sch.reverse_cache_write(block, write_buffer_index, storage_scope)`: the block's
    /// accesses of `buf[idx]` go to `buf_<scope>[v...]` (indexed by the block iterators `idx`
    /// uses); a new block (returned) right after the block's loop nest writes the cache back.
    pub fn reverse_cache_write(
        &mut self,
        block: BlockRV,
        write_buffer_index: usize,
        scope: &str,
    ) -> Res<BlockRV> {
        self.cache_common(Kind::ReverseWrite, block, write_buffer_index, scope)
    }

    fn cache_common(
        &mut self,
        kind: Kind,
        block: BlockRV,
        index: usize,
        scope: &str,
    ) -> Res<BlockRV> {
        self.cache_with(kind, block, index, scope, None)
    }

    fn cache_with(
        &mut self,
        kind: Kind,
        block: BlockRV,
        index: usize,
        scope: &str,
        dtype: Option<DType>,
    ) -> Res<BlockRV> {
        let prim = kind.name();
        self.require_stage(prim, &[Stage::II, Stage::III])?;
        let name = self.block_name(block)?;
        let new_name = self.transact(prim, |f| {
            check_scope_name(f, scope, Focus::Block(name.clone()))?;
            match kind {
                Kind::Read | Kind::Write => plain_cache(f, kind, &name, index, scope),
                Kind::ReverseRead | Kind::ReverseWrite => {
                    reverse_cache(f, kind, &name, index, scope, dtype)
                }
            }
        })?;
        let out = self.new_block_rv(&new_name);
        let kwargs = dtype
            .map(|d| vec![("dtype".to_string(), Arg::Str(d.name().to_string()))])
            .unwrap_or_default();
        self.record(
            prim,
            vec![
                Arg::Var(block.trace_name()),
                Arg::Int(index as i64),
                Arg::Str(scope.to_string()),
            ],
            kwargs,
            vec![out.into()],
            false,
        );
        Ok(out)
    }
}

fn err(f: &PrimFunc, kind: ErrorKind, msg: impl Into<String>, block: &str) -> ScheduleError {
    ScheduleError::new(kind, msg, f, Focus::Block(block.to_string()))
}

/// The blocks directly in a scope item (the item itself when it is a block).
pub(crate) fn direct_blocks(s: &Stmt) -> Vec<&Block> {
    fn go<'a>(s: &'a Stmt, out: &mut Vec<&'a Block>) {
        if let Stmt::Block(b) = s {
            out.push(b);
            return;
        }
        let mut ch = Vec::new();
        ir_util::push_children(s, &mut ch);
        for c in ch {
            go(c, out)
        }
    }
    let mut out = Vec::new();
    go(s, &mut out);
    out
}

/// Whether block `b` (with everything inside it) writes / reads `buf`.
pub(crate) fn block_writes(b: &Block, buf: BufferId) -> bool {
    b.writes.iter().any(|r| r.buffer == buf)
        || b.init
            .as_ref()
            .is_some_and(|i| !stores_in(i, buf).is_empty())
        || !stores_in(&b.body, buf).is_empty()
}
pub(crate) fn block_reads(b: &Block, buf: BufferId) -> bool {
    b.reads.iter().any(|r| r.buffer == buf)
        || b.init
            .as_ref()
            .is_some_and(|i| !loads_in(i, buf).is_empty())
        || !loads_in(&b.body, buf).is_empty()
}

/// Items (indices) of the scope holding a direct block that writes `buf`, with the names of
/// those blocks.
fn writer_items(f: &PrimFunc, site: &Site, buf: BufferId) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (k, it) in items(f, site).into_iter().enumerate() {
        for b in direct_blocks(it) {
            if block_writes(b, buf) {
                out.push((k, b.name.clone()));
            }
        }
    }
    out
}

/// Wraps `body` in serial loops `(var, min, extent)`, outer first.
pub(crate) fn wrap(nest: &[(VarId, Expr, Expr)], body: Stmt) -> Stmt {
    nest.iter().rev().fold(body, |acc, (v, min, ext)| {
        Stmt::For(Box::new(For {
            var: *v,
            min: min.clone(),
            extent: ext.clone(),
            kind: ForKind::Serial,
            thread: None,
            annotations: Default::default(),
            body: acc,
            span: Default::default(),
        }))
    })
}

/// A copy block `dst[dst_idx] = src[src_idx]`.
fn copy_block(
    name: String,
    iters: Vec<BlockIter>,
    predicate: Option<Expr>,
    (dst, dst_idx): (BufferId, Vec<Expr>),
    (src, src_idx): (BufferId, Vec<Expr>),
) -> Stmt {
    let mut reads = vec![point_region(src, &src_idx)];
    for r in index_reads(&src_idx)
        .into_iter()
        .chain(index_reads(&dst_idx))
    {
        if !reads.contains(&r) {
            reads.push(r);
        }
    }
    Stmt::Block(Box::new(Block {
        name,
        iters,
        predicate,
        reads,
        writes: vec![point_region(dst, &dst_idx)],
        init: None,
        alloc_buffers: Vec::new(),
        annotations: Default::default(),
        body: Stmt::Store(Store {
            buffer: dst,
            indices: dst_idx,
            value: Expr::Load {
                buffer: src,
                indices: src_idx,
            },
            span: Default::default(),
        }),
        span: Default::default(),
    }))
}

/// A copy stage over a region: one loop per dimension of extent other than 1, iterators over
/// the buffer's dimensions.
fn region_copy(
    f: &mut PrimFunc,
    name: String,
    region: &sparsetir_ir::BufferRegion,
    shape: &[Expr],
    dst: BufferId,
    src: BufferId,
) -> Stmt {
    let mut nest = Vec::new();
    let mut iters = Vec::new();
    let mut idx = Vec::new();
    // Iterators sweep `[0, extent)` bound to plain loops (bindings may only use loops), and the
    // region's start is added in the index: it may use the enclosing block's iterators.
    for (d, (lo, ext)) in region.ranges.iter().enumerate() {
        if matches!(fold(ext).as_int(), Some(1)) {
            idx.push(lo.clone());
            continue;
        }
        let dt = ext.dtype(f);
        let ax = f.add_var(format!("ax{d}"), dt);
        nest.push((ax, Expr::Int(0, dt), ext.clone()));
        let v = f.add_var(format!("v{d}"), dt);
        iters.push(BlockIter {
            var: v,
            min: Expr::Int(0, dt),
            extent: ext.clone(),
            kind: IterKind::Spatial,
            binding: Expr::Var(ax),
        });
        idx.push(add(lo.clone(), Expr::Var(v)));
    }
    let _ = shape;
    let blk = copy_block(name, iters, None, (dst, idx.clone()), (src, idx));
    wrap(&nest, blk)
}

fn dense_shape(f: &PrimFunc, buf: BufferId, block: &str, prim: &str) -> Res<Vec<Expr>> {
    match &f.buffers[buf].shape {
        BufferShape::Dense(d) => Ok(d.clone()),
        BufferShape::Sparse(axes) => {
            let names: Vec<String> = axes.iter().map(|a| f.axes[*a].name.clone()).collect();
            Err(err(
                f,
                ErrorKind::SparseBuffer,
                format!(
                    "`{prim}` copies regions along buffer dimensions, but `{}` is a sparse buffer \
                     over axes ({}); use `reverse_{prim}` (a cache indexed by the block's \
                     iterators) or lower to stage III first",
                    f.buffers[buf].name,
                    names.join(", ")
                ),
                block,
            ))
        }
    }
}

fn plain_cache(f: &mut PrimFunc, kind: Kind, name: &str, index: usize, scope: &str) -> Res<String> {
    let prim = kind.name();
    let buf = nth_buffer(f, name, index, !kind.is_read())?;
    let shape = dense_shape(f, buf, name, prim)?;
    let site = block_site(f, name)?;
    let bname = f.buffers[buf].name.clone();
    let writers = writer_items(f, &site, buf);
    let scope_region = |f: &PrimFunc, write: bool| {
        site.scope_block
            .as_ref()
            .and_then(|s| ir_util::find_block(&f.body, s))
            .and_then(|b| {
                let list = if write { &b.writes } else { &b.reads };
                list.iter().find(|r| r.buffer == buf).cloned()
            })
            .unwrap_or_else(|| full_region(f, buf))
    };
    let dtype = f.buffers[buf].dtype;
    if kind == Kind::Read {
        let mut names: Vec<&String> = writers.iter().map(|(_, n)| n).collect();
        names.dedup();
        if names.len() > 1 {
            return Err(err(
                f,
                ErrorKind::NotSingleWriter,
                format!(
                    "`{bname}` is written by several blocks in this scope ({}); cache_read needs \
                     at most one",
                    names
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                name,
            ));
        }
        let pos = writers.first().map(|(k, _)| k + 1).unwrap_or(0);
        if site.item < pos {
            return Err(err(
                f,
                ErrorKind::BadPlacement,
                format!(
                    "block `{name}` reads `{bname}` in the same loop nest as its writer `{}`; \
                     cache_read needs the writer's stage to end before the readers",
                    writers[0].1
                ),
                name,
            ));
        }
        let region = if writers.is_empty() {
            scope_region(f, false)
        } else {
            full_region(f, buf)
        };
        let cache = alloc_in_scope(
            f,
            &site,
            &format!("{bname}_{scope}"),
            shape.clone(),
            dtype,
            scope,
        );
        let stage_name = unique_block_name(f, &format!("{bname}_{scope}"));
        let stage = region_copy(f, stage_name.clone(), &region, &shape, cache, buf);
        with_items(f, &site, |items| {
            for it in items.iter_mut().skip(pos) {
                redirect(it, buf, cache, &|i| i.to_vec(), &|r| {
                    let mut r = r.clone();
                    r.buffer = cache;
                    r
                });
            }
            items.insert(pos, stage);
        });
        Ok(stage_name)
    } else {
        let others: Vec<&String> = writers
            .iter()
            .filter(|(k, n)| *k != site.item || !is_in_item_as(f, &site, n, name))
            .map(|(_, n)| n)
            .collect();
        if !others.is_empty() {
            return Err(err(
                f,
                ErrorKind::NotSingleWriter,
                format!(
                    "`{bname}` is also written by {} in this scope; cache_write needs a single \
                     writer",
                    others
                        .iter()
                        .map(|s| format!("`{s}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                name,
            ));
        }
        check_item_alone(f, &site, buf, name)?;
        let region = scope_region(f, true);
        let need_in = !covers_whole_buffer(f, &site, name, buf, &region);
        let cache = alloc_in_scope(
            f,
            &site,
            &format!("{bname}_{scope}"),
            shape.clone(),
            dtype,
            scope,
        );
        let stage_name = unique_block_name(f, &format!("{bname}_{scope}"));
        let back = region_copy(f, stage_name.clone(), &region, &shape, buf, cache);
        let copy_in = if need_in {
            let n = unique_block_name(f, &format!("{bname}_{scope}_in"));
            Some(region_copy(f, n, &region, &shape, cache, buf))
        } else {
            None
        };
        if let Some(s) = ir_util::find_mut(&mut f.body, &|s| ir_util::is_block(s, name)) {
            redirect(s, buf, cache, &|i| i.to_vec(), &|r| {
                let mut r = r.clone();
                r.buffer = cache;
                r
            });
        }
        with_items(f, &site, |items| {
            items.insert(site.item + 1, back);
            if let Some(c) = copy_in {
                items.insert(site.item, c);
            }
        });
        Ok(stage_name)
    }
}

/// Whether the direct block `n` found in the block's item is the block itself.
fn is_in_item_as(_f: &PrimFunc, _site: &Site, n: &str, name: &str) -> bool {
    n == name
}

/// Fails when another block of the block's own item accesses `buf`.
fn check_item_alone(f: &PrimFunc, site: &Site, buf: BufferId, name: &str) -> Res<()> {
    let its = items(f, site);
    if let Some(it) = its.get(site.item) {
        for b in direct_blocks(it) {
            if b.name != name && (block_reads(b, buf) || block_writes(b, buf)) {
                return Err(err(
                    f,
                    ErrorKind::DependencyViolation,
                    format!(
                        "block `{}` accesses `{}` in the same loop nest as `{name}`; the cache \
                         would hide its accesses",
                        b.name, f.buffers[buf].name
                    ),
                    name,
                ));
            }
        }
    }
    Ok(())
}

/// True when the block provably writes every element of `region` (the whole buffer) before
/// reading it: no predicate, loops of constant positive extent binding the spatial iterators
/// one to one onto the buffer's dimensions, and an init when the body reads the buffer.
fn covers_whole_buffer(
    f: &PrimFunc,
    site: &Site,
    name: &str,
    buf: BufferId,
    region: &sparsetir_ir::BufferRegion,
) -> bool {
    let Some(b) = ir_util::find_block(&f.body, name) else {
        return false;
    };
    if b.predicate.is_some() || *region != full_region(f, buf) {
        return false;
    }
    let BufferShape::Dense(shape) = &f.buffers[buf].shape else {
        return false;
    };
    let stores = stores_in(&b.body, buf);
    let Some(idx) = stores.first() else {
        return false;
    };
    if stores.iter().any(|s| s != idx) || idx.len() != shape.len() {
        return false;
    }
    for l in &site.loops {
        match ir_util::find_loop(&f.body, *l) {
            Some(lp) if is_positive_const(&lp.extent) => {}
            _ => return false,
        }
    }
    let mut used_loops = Vec::new();
    for (d, e) in idx.iter().enumerate() {
        let Some(v) = e.as_var() else { return false };
        let Some(it) = b.iters.iter().find(|it| it.var == v) else {
            return false;
        };
        if it.kind != IterKind::Spatial
            || !same(&it.min, &Expr::int(0))
            || !same(&it.extent, &shape[d])
        {
            return false;
        }
        let Some(lv) = it.binding.as_var() else {
            return false;
        };
        let Some(lp) = ir_util::find_loop(&f.body, lv) else {
            return false;
        };
        if !site.loops.contains(&lv) || used_loops.contains(&lv) {
            return false;
        }
        if !same(&lp.min, &Expr::int(0)) || !same(&lp.extent, &shape[d]) {
            return false;
        }
        used_loops.push(lv);
    }
    let reads_buf = !loads_in(&b.body, buf).is_empty();
    !reads_buf
        || b.init
            .as_ref()
            .is_some_and(|i| !stores_in(i, buf).is_empty())
}

// ----- reverse caches ------------------------------------------------------------------------

/// The block iterators (indices into `b.iters`) a point access uses, and the loops (outer to
/// inner) a copy stage must re-run to bind them: those feeding their bindings, the predicate,
/// and the extents of loops already taken.
pub(crate) fn touched(
    f: &PrimFunc,
    site: &Site,
    b: &Block,
    idx: &[Expr],
    prim: &str,
) -> Res<(Vec<usize>, Vec<VarId>)> {
    let between = vars_between(f, site);
    if site.other_between {
        return Err(err(
            f,
            ErrorKind::Unsupported,
            format!(
                "`{prim}`: a statement other than a loop (if/let/...) lies between block `{}` \
                 and its scope",
                b.name
            ),
            &b.name,
        ));
    }
    let mut iters = Vec::new();
    for e in idx {
        for v in vars_of(e) {
            if let Some(k) = b.iters.iter().position(|it| it.var == v) {
                if !iters.contains(&k) {
                    iters.push(k);
                }
            } else if between.contains(&v) {
                return Err(err(
                    f,
                    ErrorKind::Unsupported,
                    format!(
                        "`{prim}`: the access uses loop variable `{}` directly instead of a block \
                         iterator",
                        f.vars[v].name
                    ),
                    &b.name,
                ));
            }
        }
    }
    iters.sort_unstable();
    let mut want: Vec<VarId> = Vec::new();
    let push_vars = |e: &Expr, want: &mut Vec<VarId>| {
        for v in vars_of(e) {
            if site.loops.contains(&v) && !want.contains(&v) {
                want.push(v);
            }
        }
    };
    for &k in &iters {
        push_vars(&b.iters[k].binding, &mut want);
    }
    if let Some(p) = &b.predicate {
        push_vars(p, &mut want);
    }
    loop {
        let before = want.len();
        for v in want.clone() {
            if let Some(l) = ir_util::find_loop(&f.body, v) {
                push_vars(&l.min, &mut want);
                push_vars(&l.extent, &mut want);
            }
        }
        if want.len() == before {
            break;
        }
    }
    let loops: Vec<VarId> = site
        .loops
        .iter()
        .copied()
        .filter(|v| want.contains(v))
        .collect();
    Ok((iters, loops))
}

/// Fresh copies of `loops` (outer to inner): `(new var, min, extent)` with earlier loops
/// substituted; `map` receives old → new.
pub(crate) fn copy_loops(
    f: &mut PrimFunc,
    loops: &[VarId],
    map: &mut HashMap<VarId, Expr>,
) -> Vec<(VarId, Expr, Expr)> {
    let mut nest = Vec::new();
    for (k, v) in loops.iter().enumerate() {
        let Some(l) = ir_util::find_loop(&f.body, *v) else {
            continue;
        };
        let (min, ext) = (subst(&l.min, map), subst(&l.extent, map));
        let dt = f.vars[*v].dtype;
        let nv = f.add_var(format!("ax{k}"), dt);
        map.insert(*v, Expr::Var(nv));
        nest.push((nv, min, ext));
    }
    nest
}

fn reverse_cache(
    f: &mut PrimFunc,
    kind: Kind,
    name: &str,
    index: usize,
    scope: &str,
    dtype: Option<DType>,
) -> Res<String> {
    let prim = kind.name();
    let buf = nth_buffer(f, name, index, kind == Kind::ReverseWrite)?;
    let site = block_site(f, name)?;
    let bname = f.buffers[buf].name.clone();
    let Some(b) = ir_util::find_block(&f.body, name).cloned() else {
        return Err(err(
            f,
            ErrorKind::NotFound,
            format!("no block `{name}`"),
            name,
        ));
    };
    let region = if kind == Kind::ReverseRead {
        &b.reads[index]
    } else {
        &b.writes[index]
    };
    if !region
        .ranges
        .iter()
        .all(|(_, e)| matches!(fold(e).as_int(), Some(1)))
    {
        return Err(err(
            f,
            ErrorKind::RegionNotCovered,
            format!(
                "`{prim}` needs the block to access a single element of `{bname}`, not a region"
            ),
            name,
        ));
    }
    let idx: Vec<Expr> = region.ranges.iter().map(|(lo, _)| lo.clone()).collect();
    // Every access of the buffer in the block must be that element.
    let all = {
        let mut v = Vec::new();
        for s in b.init.iter().chain(std::iter::once(&b.body)) {
            v.extend(loads_in(s, buf));
            v.extend(stores_in(s, buf));
        }
        v
    };
    if all
        .iter()
        .any(|i| i.len() != idx.len() || !i.iter().zip(&idx).all(|(a, c)| same(a, c)))
    {
        return Err(err(
            f,
            ErrorKind::Unsupported,
            format!(
                "`{prim}`: block `{name}` accesses `{bname}` at more than one index tuple (or in \
                 a nested block); the cache holds one element per iterator tuple"
            ),
            name,
        ));
    }
    // The copy stages access every element the block's iterators name, unconditionally: an
    // access the block makes only under a condition (a coordinate a binary search found, an
    // `if_then_else` branch) may name an element that does not exist where the condition fails.
    if b.init
        .iter()
        .chain(std::iter::once(&b.body))
        .any(|s| guarded(s, buf, false))
    {
        return Err(err(
            f,
            ErrorKind::Unsupported,
            format!(
                "`{prim}`: block `{name}` accesses `{bname}` only under a condition (an `if`, a \
                 selected branch, a loop inside the block); a cache copied unconditionally would \
                 access the elements the condition rules out"
            ),
            name,
        ));
    }
    let writers = writer_items(f, &site, buf);
    if kind == Kind::ReverseRead {
        if writers.iter().any(|(k, _)| *k == site.item) || block_writes(&b, buf) {
            return Err(err(
                f,
                ErrorKind::DependencyViolation,
                format!(
                    "`{bname}` is written in the same loop nest as block `{name}` reads it; a \
                     cache filled beforehand would be stale"
                ),
                name,
            ));
        }
    } else {
        check_item_alone(f, &site, buf, name)?;
    }
    let (iters, loops) = touched(f, &site, &b, &idx, prim)?;
    if kind == Kind::ReverseWrite {
        check_injective(f, &b, &iters, &idx, name, &bname)?;
    }
    // Iterators whose bindings move with no loop inside the scope (a blockized block's outer
    // iterator) are fixed for each instance of the scope: they name no dimension of the cache.
    let varying: Vec<usize> = iters
        .iter()
        .copied()
        .filter(|&k| {
            vars_of(&b.iters[k].binding)
                .iter()
                .any(|v| site.loops.contains(v))
        })
        .collect();
    let dims = if varying.is_empty() { &iters } else { &varying };
    let shape: Vec<Expr> = dims
        .iter()
        .map(|&k| {
            fold(&Expr::add(
                b.iters[k].min.clone(),
                b.iters[k].extent.clone(),
            ))
        })
        .collect();
    let src_dt = f.buffers[buf].dtype;
    let dtype = dtype.unwrap_or(src_dt);
    let exact = dtype == src_dt
        || matches!(
            (src_dt, dtype),
            (DType::F16 | DType::BF16, DType::F32 | DType::F64) | (DType::F32, DType::F64)
        );
    if !exact || (dtype != src_dt && kind != Kind::ReverseRead) {
        return Err(err(
            f,
            ErrorKind::InvalidArgument,
            format!(
                "`{prim}`: a cache of `{bname}` ({src_dt}) in {dtype} would not hold its values \
                 exactly (a read cache may widen 16-bit floats to float32/float64, float32 to \
                 float64)"
            ),
            name,
        ));
    }
    let cache = alloc_in_scope(f, &site, &format!("{bname}_{scope}"), shape, dtype, scope);
    let cache_idx: Vec<Expr> = dims.iter().map(|&k| Expr::Var(b.iters[k].var)).collect();

    // The copy stage(s).
    let make_stage = |f: &mut PrimFunc, stage_name: String, into_cache: bool| {
        let mut map = HashMap::new();
        let nest = copy_loops(f, &loops, &mut map);
        let mut imap = HashMap::new();
        let mut new_iters = Vec::new();
        for &k in &iters {
            let it = &b.iters[k];
            let nv = f.add_var(f.vars[it.var].name.clone(), f.vars[it.var].dtype);
            imap.insert(it.var, Expr::Var(nv));
            new_iters.push(BlockIter {
                var: nv,
                min: it.min.clone(),
                extent: it.extent.clone(),
                kind: IterKind::Spatial,
                binding: subst(&it.binding, &map),
            });
        }
        let pred = b.predicate.as_ref().map(|p| subst(p, &map));
        let src_idx: Vec<Expr> = idx.iter().map(|e| subst(e, &imap)).collect();
        let c_idx: Vec<Expr> = cache_idx.iter().map(|e| subst(e, &imap)).collect();
        let blk = if into_cache {
            copy_block(stage_name, new_iters, pred, (cache, c_idx), (buf, src_idx))
        } else {
            copy_block(stage_name, new_iters, pred, (buf, src_idx), (cache, c_idx))
        };
        wrap(&nest, blk)
    };
    let stage_name = unique_block_name(f, &format!("{bname}_{scope}"));
    let need_in = kind == Kind::ReverseWrite && needs_copy_in(f, &site, &b, &loops, buf);
    let mut main = make_stage(f, stage_name.clone(), kind == Kind::ReverseRead);
    if dtype != src_dt {
        // The fill converts each value once.
        walk_stmts_mut(&mut main, &mut |st| {
            if let Stmt::Store(x) = st {
                if x.buffer == cache {
                    x.value = Expr::Cast(dtype, Box::new(x.value.clone()));
                }
            }
        });
    }
    let copy_in = if need_in {
        let n = unique_block_name(f, &format!("{bname}_{scope}_in"));
        Some(make_stage(f, n, true))
    } else {
        None
    };
    // Redirect the block's accesses.
    let ci = cache_idx.clone();
    if let Some(Stmt::Block(blk)) = ir_util::find_mut(&mut f.body, &|s| ir_util::is_block(s, name))
    {
        {
            let blk = &mut **blk;
            for part in [&mut blk.body].into_iter().chain(blk.init.as_mut()) {
                redirect(part, buf, cache, &|_| ci.clone(), &|r| r.clone());
                if dtype != src_dt {
                    narrow_widened_loads(part, cache, src_dt, dtype);
                }
            }
            for r in blk.reads.iter_mut().chain(blk.writes.iter_mut()) {
                if r.buffer == buf {
                    *r = point_region(cache, &ci);
                }
            }
        }
    }
    // The fill stage goes after every writer, earlier in the scope, of what it reads: the
    // buffer, and what its loops, iterator bindings and predicate read (a binary search's
    // positions, computed by a block of their own).
    let pos = if kind == Kind::ReverseRead {
        let (reads, _) = accessed(&main);
        let mut pos = 0;
        for dep in reads.into_iter().filter(|d| *d != cache) {
            for (k, writer) in writer_items(f, &site, dep) {
                if k == site.item && dep != buf {
                    return Err(err(
                        f,
                        ErrorKind::DependencyViolation,
                        format!(
                            "the cache of `{bname}` is addressed through `{}`, which block \
                             `{writer}` writes in the same loop nest as block `{name}`",
                            f.buffers[dep].name
                        ),
                        name,
                    ));
                }
                if k < site.item {
                    pos = pos.max(k + 1);
                }
            }
        }
        pos
    } else {
        site.item
    };
    with_items(f, &site, |items| {
        if kind == Kind::ReverseRead {
            items.insert(pos, main);
        } else {
            items.insert(pos + 1, main);
            if let Some(c) = copy_in {
                items.insert(pos, c);
            }
        }
    });
    Ok(stage_name)
}

/// The reads of a widened cache keep the expression types they had: `Cast(src, cache[..])`,
/// except where the block converted the value to the cache's type itself
/// (`Cast(wide, buf[..])`, a 16-bit operand read into float32 arithmetic), which is the cached
/// value as it is.
fn narrow_widened_loads(s: &mut Stmt, cache: BufferId, src: DType, wide: DType) {
    let is_cache = |e: &Expr| matches!(e, Expr::Load { buffer, .. } if *buffer == cache);
    rewrite_exprs(s, &mut |e| {
        if is_cache(e) {
            *e = Expr::Cast(src, Box::new(e.clone()));
        }
    });
    rewrite_exprs(s, &mut |e| {
        if let Expr::Cast(outer, inner) = e {
            if let Expr::Cast(mid, load) = &**inner {
                if *outer == wide && *mid == src && is_cache(load) {
                    *e = (**load).clone();
                }
            }
        }
    });
}

/// Whether `s` accesses `buf` anywhere that runs only under a condition (`under`: `s` itself
/// does): an `if`'s branches, the body of a loop or of a nested block with a predicate, the
/// branches of `T.Select`/`T.if_then_else` and the right side of `and`/`or`.
fn guarded(s: &Stmt, buf: BufferId, under: bool) -> bool {
    let e = |x: &Expr, u: bool| guarded_expr(x, buf, u);
    match s {
        Stmt::Seq(v) => v.iter().any(|x| guarded(x, buf, under)),
        Stmt::SparseIteration(it) => guarded(&it.body, buf, true),
        Stmt::For(l) => e(&l.min, under) || e(&l.extent, under) || guarded(&l.body, buf, true),
        Stmt::While(w) => e(&w.cond, under) || guarded(&w.body, buf, true),
        Stmt::Block(b) => {
            let u = under || b.predicate.is_some();
            b.init.iter().any(|i| guarded(i, buf, u)) || guarded(&b.body, buf, u)
        }
        Stmt::Store(st) => {
            (under && st.buffer == buf)
                || st.indices.iter().any(|i| e(i, under))
                || e(&st.value, under)
        }
        Stmt::If(i) => {
            e(&i.cond, under)
                || guarded(&i.then_case, buf, true)
                || i.else_case.iter().any(|x| guarded(x, buf, true))
        }
        Stmt::Evaluate(x) => e(x, under),
        Stmt::Let(l) => e(&l.value, under) || guarded(&l.body, buf, under),
        Stmt::AssumeBufferDomain { lo, hi, .. } => e(lo, under) || e(hi, under),
        Stmt::Allocate(_) => false,
    }
}

fn guarded_expr(x: &Expr, buf: BufferId, under: bool) -> bool {
    let g = |y: &Expr, u: bool| guarded_expr(y, buf, u);
    match x {
        Expr::Load { buffer, indices } => {
            (under && *buffer == buf) || indices.iter().any(|i| g(i, under))
        }
        Expr::Select(c, a, b) => g(c, under) || g(a, true) || g(b, true),
        Expr::Binary(sparsetir_ir::BinOp::And | sparsetir_ir::BinOp::Or, l, r) => {
            g(l, under) || g(r, true)
        }
        Expr::Binary(_, l, r) => g(l, under) || g(r, under),
        Expr::Unary(_, a) | Expr::Cast(_, a) => g(a, under),
        Expr::Call { args, .. } => args.iter().any(|a| g(a, under)),
        Expr::Let { value, body, .. } => g(value, under) || g(body, under),
        Expr::Int(..) | Expr::Float(..) | Expr::Bool(_) | Expr::Var(_) => false,
    }
}

/// Each index is free of the touched iterators, or `v`, `v + c`, `c + v` for one touched
/// iterator `v` (each used once) and `c` free of them.
fn check_injective(
    f: &PrimFunc,
    b: &Block,
    iters: &[usize],
    idx: &[Expr],
    name: &str,
    bname: &str,
) -> Res<()> {
    let tvars: Vec<VarId> = iters.iter().map(|&k| b.iters[k].var).collect();
    let mut seen = Vec::new();
    let free = |e: &Expr| !vars_of(e).iter().any(|v| tvars.contains(v));
    for e in idx {
        if free(e) {
            continue;
        }
        let v = match e {
            Expr::Var(v) => Some(*v),
            Expr::Binary(sparsetir_ir::BinOp::Add, a, c) => match (a.as_var(), c.as_var()) {
                (Some(v), _) if tvars.contains(&v) && free(c) => Some(v),
                (_, Some(v)) if tvars.contains(&v) && free(a) => Some(v),
                _ => None,
            },
            _ => None,
        };
        match v {
            Some(v) if !seen.contains(&v) => seen.push(v),
            _ => {
                return Err(err(
                    f,
                    ErrorKind::Unsupported,
                    format!(
                        "`reverse_cache_write`: index `{}` of `{bname}` is not one iterator plus \
                         an offset, so distinct iterator tuples could name one element",
                        sparsetir_ir::printer::print_expr(f, e)
                    ),
                    name,
                ))
            }
        }
    }
    Ok(())
}

/// Whether a reverse write cache must be filled from the buffer first: unless the block runs
/// at every point of the copy loops (no predicate; the other loops of constant positive
/// extent) and writes the element before any read (an init, or no read at all).
fn needs_copy_in(f: &PrimFunc, site: &Site, b: &Block, loops: &[VarId], buf: BufferId) -> bool {
    if b.predicate.is_some() {
        return true;
    }
    for v in &site.loops {
        if loops.contains(v) {
            continue;
        }
        match ir_util::find_loop(&f.body, *v) {
            Some(l) if is_positive_const(&l.extent) => {}
            _ => return true,
        }
    }
    let reads = !loads_in(&b.body, buf).is_empty();
    let init_writes = b
        .init
        .as_ref()
        .is_some_and(|i| !stores_in(i, buf).is_empty());
    reads && !init_writes
}

pub(crate) fn replay(sch: &mut Schedule, call: &Call) -> Result<Option<Vec<AnyRV>>, ReplayError> {
    let (kind, key) = match call.name() {
        "cache_read" => (Kind::Read, "read_buffer_index"),
        "cache_write" => (Kind::Write, "write_buffer_index"),
        "reverse_cache_read" => (Kind::ReverseRead, "read_buffer_index"),
        "reverse_cache_write" => (Kind::ReverseWrite, "write_buffer_index"),
        _ => return Ok(None),
    };
    let b = call.block(0, "block")?;
    let i = index_arg(call, 1, key)?;
    let s = call.str(2, "storage_scope")?;
    let dtype = match call.opt_arg(3, "dtype") {
        Some(a) => {
            let name = call.str_of(a)?;
            Some(
                name.parse::<DType>()
                    .map_err(|_| ReplayError::Args(format!("dtype: `{name}` is not a type")))?,
            )
        }
        None => None,
    };
    let out = sch.cache_with(kind, b, i, s, dtype)?;
    Ok(Some(vec![out.into()]))
}
