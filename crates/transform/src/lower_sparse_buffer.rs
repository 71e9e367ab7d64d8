//! The `lower_sparse_buffer` pass (SPEC §3.3): stage II → stage III. Sparse axes and sparse
//! buffers disappear; every sparse buffer `X` becomes a dense buffer `X_data` whose dimensions
//! are its *root groups*, and every access is rewritten from per-axis positions to offsets.
//!
//! Layout (the same as the stage II/III interpreter's, so both stages address the same arrays):
//! - every fixed axis starts a group; a varied axis extends the group of its parent, which must
//!   be the last axis of that group (only chains of varied axes are flattened, seed `003`);
//! - a lone head's dimension is its `length` (`dense_fixed`) or `nnz_cols` (`compressed_fixed`)
//!   and is indexed by the head's position; a chain's dimension is the `nnz` of its last axis
//!   and is indexed by `off(last)`, with `off(head) = pos` and
//!   `off(X) = X_indptr_data[off(P)] + pos_X` for `X` under `P` in the chain;
//! - `extra_storage` is added to the last dimension (`J_indptr` over `(I,)` → `(m + 1,)`).
//!
//! Design choices:
//! - Buffers keep their handles (arena indices), declaration order, scope and parameters;
//!   `default_value` and `extra_storage` are dropped (stage II already turned reads of absent
//!   coordinates into explicit branches).
//! - The `T.assume_buffer_domain` statements are dropped, as in the RFC's stage-III example; they
//!   (and loop and block ranges) feed the arithmetic analyzer that simplifies every offset built
//!   here (`vj + J_indptr_data[vi]`). A load of an `indptr` array at offset 0 becomes `0`.
//! - Regions: a lone head keeps its range; a chain whose ranges are single points but for a
//!   constant-extent last one becomes `off(min):off(min) + extent`; any other chain range covers
//!   the whole flat dimension `0:nnz` (plus extra storage).
//! - Strides stay as they were (empty = compact row-major, the RFC's `strides=[1]`).
//! - A chain's axes need not be adjacent in the buffer: `A[I, K, J]` with `J` varied under `I`
//!   has the groups `(I, J)` and `(K)`, so `A_data` is `(nnz, k)` indexed `[off(J), pos_K]`.
//! - Unsupported (as in the interpreter): a varied axis whose parent is not the last axis of its
//!   group (two chains under one axis), a chain headed by a `compressed_fixed` axis, a chain
//!   ending in a `dense_varied` axis without a declared `nnz`, and extra storage on a buffer of
//!   more than one group.

use std::collections::{HashMap, HashSet};

use sparsetir_arith::Analyzer;
use sparsetir_ir::{
    Arena, AxisId, AxisKind, BinOp, Block, BlockIter, Buffer, BufferDecl, BufferId, BufferRegion,
    BufferShape, Expr, For, IRModule, IfThenElse, LetStmt, PrimFunc, Span, Stage, Stmt, Store,
    VarId, While,
};

use crate::lower_sparse_iter::LowerError;

type Res<T> = Result<T, LowerError>;

fn unsupported(span: Span, message: impl Into<String>) -> LowerError {
    LowerError::Unsupported {
        span,
        message: message.into(),
    }
}
fn invalid(span: Span, message: impl Into<String>) -> LowerError {
    LowerError::Invalid {
        span,
        message: message.into(),
    }
}

/// Lowers every stage-II function of `module` (others are kept as they are).
pub fn lower_sparse_buffer_module(module: &IRModule) -> Res<IRModule> {
    let funcs = module
        .funcs
        .iter()
        .map(lower_sparse_buffer)
        .collect::<Res<Vec<_>>>()?;
    Ok(IRModule { funcs })
}

/// Lowers a stage-II function to stage III (SPEC §3.3); a clone for functions of another stage.
pub fn lower_sparse_buffer(func: &PrimFunc) -> Res<PrimFunc> {
    if func.stage() != Stage::II {
        return Ok(func.clone());
    }
    let mut p = Pass::new(func)?;
    let body = p.stmt(&func.body)?;
    let mut out = p.out;
    out.body = with_coordinate_domains(func, &out, body);
    out.set_stage(Stage::III);
    Ok(out)
}

/// `body` after `T.assume_buffer_domain(X_indices_data, (0, length - 1))` for every compressed
/// axis of constant length whose coordinates the body reads: the stage-III buffer no longer says
/// it holds an axis's coordinates, and the bound (inclusive, as the passes read the statement)
/// lets stage-III schedules bound a gather through it by a constant (`compute_at` of a cache of
/// `B[4 * q + J_indices[..]]`, 2:4's groups of four).
fn with_coordinate_domains(src: &PrimFunc, out: &PrimFunc, body: Stmt) -> Stmt {
    let mut used: HashSet<BufferId> = HashSet::new();
    body.visit(&mut |s| {
        s.for_each_expr(|e| {
            e.visit(&mut |x| {
                if let Expr::Load { buffer, .. } = x {
                    used.insert(*buffer);
                }
            })
        })
    });
    let mut assumes = Vec::new();
    for (_, ax) in src.axes.iter() {
        // Only a constant number of coordinates bounds a window of constant size.
        let (Some(data), Some(len)) = (
            ax.indices.filter(|_| ax.kind.is_compressed()),
            ax.length.as_int(),
        ) else {
            continue;
        };
        for (b, buf) in out.buffers.iter() {
            let holds = matches!(buf.decl, BufferDecl::Match { data: d } if d == data);
            if holds && used.contains(&b) && buf.dtype.is_integer() {
                assumes.push(Stmt::AssumeBufferDomain {
                    buffer: b,
                    lo: Expr::Int(0, buf.dtype),
                    hi: Expr::Int(len - 1, buf.dtype),
                    span: Span::default(),
                });
            }
        }
    }
    if assumes.is_empty() {
        return body;
    }
    match body {
        Stmt::Seq(v) => assumes.extend(v),
        other => assumes.push(other),
    }
    Stmt::Seq(assumes)
}

// ------------------------------------------------------------------------------------------

/// One dimension of a lowered sparse buffer: the buffer dimensions it covers (a fixed head and
/// the varied chain under it) and its extent.
#[derive(Clone, Debug)]
struct Group {
    dims: Vec<usize>,
    extent: Expr,
}

/// The stage-III layout of a sparse buffer.
#[derive(Clone, Debug)]
struct Layout {
    axes: Vec<AxisId>,
    groups: Vec<Group>,
}

struct Pass<'a> {
    src: &'a PrimFunc,
    /// The function being built: `src` without axes, with the buffers lowered.
    out: PrimFunc,
    layouts: HashMap<BufferId, Layout>,
    /// The 1-D stage-III buffer holding each `indptr` handle, found or created on demand.
    indptr_bufs: HashMap<VarId, BufferId>,
    /// Buffers whose values are an `indptr` array (a load at offset 0 yields 0).
    indptr_set: HashSet<BufferId>,
    names: HashSet<String>,
    ana: Analyzer,
    span: Span,
}

impl<'a> Pass<'a> {
    fn new(src: &'a PrimFunc) -> Res<Pass<'a>> {
        let mut out = PrimFunc {
            name: src.name.clone(),
            params: src.params.clone(),
            vars: src.vars.clone(),
            axes: Arena::new(),
            buffers: Arena::new(),
            buffer_decls: src.buffer_decls.clone(),
            attrs: src.attrs.clone(),
            body: Stmt::empty(),
            span: src.span,
        };
        let mut names: HashSet<String> = src.buffers.iter().map(|(_, b)| b.name.clone()).collect();
        let mut layouts = HashMap::new();
        for (id, buf) in src.buffers.iter() {
            let lowered = match &buf.shape {
                BufferShape::Dense(_) => buf.clone(),
                BufferShape::Sparse(axes) => {
                    let layout = layout_of(src, buf, axes)?;
                    let name = unique_name(&mut names, &format!("{}_data", buf.name));
                    let dims = layout.groups.iter().map(|g| g.extent.clone()).collect();
                    layouts.insert(id, layout);
                    Buffer {
                        name,
                        decl: buf.decl.clone(),
                        shape: BufferShape::Dense(dims),
                        dtype: buf.dtype,
                        scope: buf.scope.clone(),
                        strides: buf.strides.clone(),
                        extra_storage: None,
                        default_value: None,
                        span: buf.span,
                    }
                }
            };
            let new_id = out.buffers.append(lowered);
            debug_assert_eq!(new_id, id);
        }
        let mut ana = Analyzer::new();
        ana.assume_no_overflow(true);
        src.body.visit(&mut |s| {
            if let Stmt::AssumeBufferDomain { buffer, lo, hi, .. } = s {
                ana.bind_buffer_domain(*buffer, lo, hi);
            }
        });
        let indptr_handles: HashSet<VarId> =
            src.axes.iter().filter_map(|(_, a)| a.indptr).collect();
        let indptr_set = out
            .buffers
            .iter()
            .filter(|(_, b)| {
                matches!(&b.shape, BufferShape::Dense(d) if d.len() == 1)
                    && b.data_param().is_some_and(|h| indptr_handles.contains(&h))
            })
            .map(|(id, _)| id)
            .collect();
        Ok(Pass {
            src,
            out,
            layouts,
            indptr_bufs: HashMap::new(),
            indptr_set,
            names,
            ana,
            span: src.span,
        })
    }

    // ----- offsets ------------------------------------------------------------------------

    fn simplify(&self, e: &Expr) -> Expr {
        self.ana.simplify(&self.out, e)
    }

    /// The 1-D stage-III buffer holding the `indptr` array of varied axis `a`: a function-level
    /// buffer over the same handle, or a new match buffer `<axis>_indptr_data`.
    fn indptr_buffer(&mut self, a: AxisId) -> Res<BufferId> {
        let ax = &self.src.axes[a];
        let Some(handle) = ax.indptr else {
            return Err(invalid(
                ax.span,
                format!("varied axis `{}` has no indptr", ax.name),
            ));
        };
        if let Some(&b) = self.indptr_bufs.get(&handle) {
            return Ok(b);
        }
        let found = self.out.buffer_decls.iter().copied().find(|&b| {
            let buf = &self.out.buffers[b];
            buf.data_param() == Some(handle)
                && matches!(&buf.shape, BufferShape::Dense(d) if d.len() == 1)
        });
        let b = match found {
            Some(b) => b,
            None => {
                let parent = ax.parent.ok_or_else(|| {
                    invalid(ax.span, format!("varied axis `{}` has no parent", ax.name))
                })?;
                let count = self.level_count(parent)?;
                let extent = self.simplify(&Expr::add(count, Expr::int(1)));
                let name = unique_name(&mut self.names, &format!("{}_indptr_data", ax.name));
                let b = self.out.buffers.append(Buffer {
                    name,
                    decl: BufferDecl::Match { data: handle },
                    shape: BufferShape::Dense(vec![extent]),
                    dtype: ax.idtype,
                    scope: "global".into(),
                    strides: Vec::new(),
                    extra_storage: None,
                    default_value: None,
                    span: ax.span,
                });
                self.out.buffer_decls.push(b);
                self.indptr_set.insert(b);
                b
            }
        };
        self.indptr_bufs.insert(handle, b);
        Ok(b)
    }

    /// The number of stored elements of an axis's level.
    fn level_count(&self, a: AxisId) -> Res<Expr> {
        let ax = &self.src.axes[a];
        match ax.kind {
            AxisKind::DenseFixed => Ok(ax.length.clone()),
            AxisKind::CompressedFixed => {
                let parent = ax
                    .parent
                    .ok_or_else(|| invalid(ax.span, format!("axis `{}` has no parent", ax.name)))?;
                let cols = ax.nnz_cols.clone().ok_or_else(|| {
                    invalid(ax.span, format!("axis `{}` has no nnz_cols", ax.name))
                })?;
                Ok(Expr::mul(self.level_count(parent)?, cols))
            }
            AxisKind::DenseVaried | AxisKind::CompressedVaried => ax.nnz.clone().ok_or_else(|| {
                unsupported(
                    ax.span,
                    format!("varied axis `{}` has no declared nnz", ax.name),
                )
            }),
        }
    }

    /// `indptr(a)[q]` as a stage-III load (`0` when `q` is provably 0).
    fn indptr_load(&mut self, a: AxisId, q: Expr) -> Res<Expr> {
        let b = self.indptr_buffer(a)?;
        if self.is_zero(&q) {
            return Ok(Expr::Int(0, self.out.buffers[b].dtype));
        }
        Ok(Expr::load(b, vec![q]))
    }

    /// Whether the index `q` is provably 0 (a constant, or a variable of range `[0, 1)`).
    fn is_zero(&self, q: &Expr) -> bool {
        q.as_int() == Some(0) || self.ana.const_bounds(&self.out, q) == Some((0, 0))
    }

    /// The offset of a group given the (already lowered) positions of the buffer's dimensions.
    fn group_offset(&mut self, layout: &Layout, g: &Group, pos: &[Expr]) -> Res<Expr> {
        let mut off = pos[g.dims[0]].clone();
        for &d in &g.dims[1..] {
            let start = self.indptr_load(layout.axes[d], off)?;
            off = self.simplify(&Expr::add(start, pos[d].clone()));
        }
        Ok(off)
    }

    /// The indices of a lowered sparse access.
    fn access(&mut self, b: BufferId, idx: Vec<Expr>) -> Res<Vec<Expr>> {
        let Some(layout) = self.layouts.get(&b).cloned() else {
            return Ok(idx);
        };
        if idx.len() != layout.axes.len() {
            let name = &self.src.buffers[b].name;
            return Err(invalid(
                self.span,
                format!(
                    "buffer `{name}` has {} dimension(s) but is accessed with {} index(es)",
                    layout.axes.len(),
                    idx.len()
                ),
            ));
        }
        layout
            .groups
            .iter()
            .map(|g| self.group_offset(&layout, g, &idx))
            .collect()
    }

    fn region(&mut self, r: &BufferRegion) -> Res<BufferRegion> {
        let mut ranges = Vec::with_capacity(r.ranges.len());
        for (lo, ext) in &r.ranges {
            ranges.push((self.expr(lo)?, self.expr(ext)?));
        }
        let Some(layout) = self.layouts.get(&r.buffer).cloned() else {
            return Ok(BufferRegion {
                buffer: r.buffer,
                ranges,
            });
        };
        if ranges.len() != layout.axes.len() {
            let name = &self.src.buffers[r.buffer].name;
            return Err(invalid(
                self.span,
                format!(
                    "region of buffer `{name}` has {} range(s) but the buffer has {} axes",
                    ranges.len(),
                    layout.axes.len()
                ),
            ));
        }
        let mins: Vec<Expr> = ranges.iter().map(|(lo, _)| lo.clone()).collect();
        let mut out = Vec::with_capacity(layout.groups.len());
        for g in &layout.groups {
            if g.dims.len() == 1 {
                out.push(ranges[g.dims[0]].clone());
                continue;
            }
            let (last, inner) = g.dims.split_last().unwrap_or((&g.dims[0], &[]));
            let points = inner.iter().all(|&d| ranges[d].1.as_int() == Some(1));
            let last_ext = ranges[*last].1.as_int();
            let range = match (points, last_ext) {
                (true, Some(c)) if c >= 1 => (
                    self.group_offset(&layout, g, &mins)?,
                    ranges[*last].1.clone(),
                ),
                _ => (Expr::Int(0, g.extent.dtype(&self.out)), g.extent.clone()),
            };
            out.push(range);
        }
        Ok(BufferRegion {
            buffer: r.buffer,
            ranges: out,
        })
    }

    // ----- expressions and statements -------------------------------------------------------

    fn expr(&mut self, e: &Expr) -> Res<Expr> {
        Ok(match e {
            Expr::Int(..) | Expr::Float(..) | Expr::Bool(_) | Expr::Var(_) => e.clone(),
            Expr::Binary(op, a, b) => {
                let (x, y) = (self.expr(a)?, self.expr(b)?);
                // Drop the `+ 0` / `- 0` left by a load of `indptr[0]`.
                let vanished =
                    |orig: &Expr, new: &Expr| new.as_int() == Some(0) && orig.as_int() != Some(0);
                match op {
                    BinOp::Add | BinOp::Sub if vanished(b, &y) => x,
                    BinOp::Add if vanished(a, &x) => y,
                    _ => Expr::binary(*op, x, y),
                }
            }
            Expr::Unary(op, a) => Expr::Unary(*op, Box::new(self.expr(a)?)),
            Expr::Select(c, a, b) => Expr::Select(
                Box::new(self.expr(c)?),
                Box::new(self.expr(a)?),
                Box::new(self.expr(b)?),
            ),
            Expr::Cast(d, a) => Expr::Cast(*d, Box::new(self.expr(a)?)),
            Expr::Load { buffer, indices } => {
                let idx = indices
                    .iter()
                    .map(|i| self.expr(i))
                    .collect::<Res<Vec<_>>>()?;
                let idx = self.access(*buffer, idx)?;
                if self.indptr_set.contains(buffer) && idx.len() == 1 && self.is_zero(&idx[0]) {
                    return Ok(Expr::Int(0, self.out.buffers[*buffer].dtype));
                }
                Expr::Load {
                    buffer: *buffer,
                    indices: idx,
                }
            }
            Expr::Call { op, args, dtype } => Expr::Call {
                op: *op,
                args: args.iter().map(|a| self.expr(a)).collect::<Res<Vec<_>>>()?,
                dtype: *dtype,
            },
            Expr::Let { var, value, body } => Expr::Let {
                var: *var,
                value: Box::new(self.expr(value)?),
                body: Box::new(self.expr(body)?),
            },
        })
    }

    fn stmt(&mut self, s: &Stmt) -> Res<Stmt> {
        let saved = self.span;
        if !s.span().is_unknown() {
            self.span = s.span();
        }
        let r = self.stmt_inner(s);
        self.span = saved;
        r
    }

    fn stmt_inner(&mut self, s: &Stmt) -> Res<Stmt> {
        Ok(match s {
            Stmt::Seq(v) => {
                let mut out = Vec::with_capacity(v.len());
                for x in v {
                    if matches!(x, Stmt::AssumeBufferDomain { .. }) {
                        continue;
                    }
                    out.push(self.stmt(x)?);
                }
                if out.len() == 1 {
                    out.pop().unwrap_or_else(Stmt::empty)
                } else {
                    Stmt::Seq(out)
                }
            }
            Stmt::AssumeBufferDomain { .. } => Stmt::empty(),
            Stmt::SparseIteration(it) => {
                return Err(invalid(
                    it.span,
                    format!("sparse iteration `{}` at stage II", it.name),
                ))
            }
            Stmt::For(l) => {
                let min = self.expr(&l.min)?;
                let extent = self.expr(&l.extent)?;
                self.ana.bind_range(l.var, &min, &extent);
                let body = self.stmt(&l.body);
                self.ana.unbind(l.var);
                Stmt::For(Box::new(For {
                    var: l.var,
                    min,
                    extent,
                    kind: l.kind,
                    thread: l.thread.clone(),
                    annotations: l.annotations.clone(),
                    body: body?,
                    span: l.span,
                }))
            }
            Stmt::Block(b) => Stmt::Block(Box::new(self.block(b)?)),
            Stmt::Store(st) => {
                let idx = st
                    .indices
                    .iter()
                    .map(|i| self.expr(i))
                    .collect::<Res<Vec<_>>>()?;
                let indices = self.access(st.buffer, idx)?;
                Stmt::Store(Store {
                    buffer: st.buffer,
                    indices,
                    value: self.expr(&st.value)?,
                    span: st.span,
                })
            }
            Stmt::If(i) => Stmt::If(Box::new(IfThenElse {
                cond: self.expr(&i.cond)?,
                then_case: self.stmt(&i.then_case)?,
                else_case: match &i.else_case {
                    Some(e) => Some(self.stmt(e)?),
                    None => None,
                },
                span: i.span,
            })),
            Stmt::While(w) => Stmt::While(Box::new(While {
                cond: self.expr(&w.cond)?,
                body: self.stmt(&w.body)?,
                span: w.span,
            })),
            Stmt::Evaluate(e) => Stmt::Evaluate(self.expr(e)?),
            Stmt::Allocate(b) => Stmt::Allocate(*b),
            Stmt::Let(l) => Stmt::Let(Box::new(LetStmt {
                var: l.var,
                value: self.expr(&l.value)?,
                body: self.stmt(&l.body)?,
                span: l.span,
            })),
        })
    }

    fn block(&mut self, b: &Block) -> Res<Block> {
        let mut iters = Vec::with_capacity(b.iters.len());
        for it in &b.iters {
            iters.push(BlockIter {
                var: it.var,
                min: self.expr(&it.min)?,
                extent: self.expr(&it.extent)?,
                kind: it.kind,
                binding: self.expr(&it.binding)?,
            });
        }
        for it in &iters {
            self.ana.bind_range(it.var, &it.min, &it.extent);
        }
        let r = self.block_inner(b, iters.clone());
        for it in &iters {
            self.ana.unbind(it.var);
        }
        r
    }

    fn block_inner(&mut self, b: &Block, iters: Vec<BlockIter>) -> Res<Block> {
        let predicate = match &b.predicate {
            Some(p) => Some(self.expr(p)?),
            None => None,
        };
        let reads = b
            .reads
            .iter()
            .map(|r| self.region(r))
            .collect::<Res<Vec<_>>>()?;
        let writes = b
            .writes
            .iter()
            .map(|r| self.region(r))
            .collect::<Res<Vec<_>>>()?;
        let init = match &b.init {
            Some(i) => Some(self.stmt(i)?),
            None => None,
        };
        Ok(Block {
            name: b.name.clone(),
            iters,
            predicate,
            reads,
            writes,
            init,
            alloc_buffers: b.alloc_buffers.clone(),
            annotations: b.annotations.clone(),
            body: self.stmt(&b.body)?,
            span: b.span,
        })
    }
}

/// `base`, or `base_1`, `base_2`, ... when taken; the result is recorded as taken.
fn unique_name(names: &mut HashSet<String>, base: &str) -> String {
    let mut name = base.to_string();
    let mut k = 1;
    while names.contains(&name) {
        name = format!("{base}_{k}");
        k += 1;
    }
    names.insert(name.clone());
    name
}

/// The root groups of a sparse buffer over `axes` (see the module documentation).
fn layout_of(f: &PrimFunc, buf: &Buffer, axes: &[AxisId]) -> Res<Layout> {
    let span = buf.span;
    let name = &buf.name;
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut group_of: Vec<usize> = Vec::with_capacity(axes.len());
    for (k, &a) in axes.iter().enumerate() {
        let ax = f
            .axes
            .get(a)
            .ok_or_else(|| invalid(span, format!("buffer `{name}`: axis handle out of range")))?;
        if ax.kind.is_fixed() {
            group_of.push(groups.len());
            groups.push(vec![k]);
            continue;
        }
        let parent = ax.parent.ok_or_else(|| {
            invalid(
                span,
                format!("buffer `{name}`: varied axis `{}` has no parent", ax.name),
            )
        })?;
        let ps = axes[..k]
            .iter()
            .rposition(|&x| x == parent)
            .ok_or_else(|| {
                invalid(
                    span,
                    format!(
                        "buffer `{name}`: axis `{}` is used without its parent `{}` before it",
                        ax.name, f.axes[parent].name
                    ),
                )
            })?;
        let g = group_of[ps];
        if groups[g].last() != Some(&ps) {
            return Err(unsupported(
                span,
                format!(
                    "buffer `{name}`: varied axis `{}` does not directly follow the chain of its \
                     parent `{}`",
                    ax.name, f.axes[parent].name
                ),
            ));
        }
        let head = &f.axes[axes[groups[g][0]]];
        if head.kind == AxisKind::CompressedFixed {
            return Err(unsupported(
                span,
                format!(
                    "buffer `{name}`: compressed_fixed axis `{}` heads a varied chain",
                    head.name
                ),
            ));
        }
        groups[g].push(k);
        group_of.push(g);
    }
    if buf.extra_storage.is_some() && groups.len() > 1 {
        return Err(unsupported(
            span,
            format!("buffer `{name}`: extra storage on a buffer with more than one root group"),
        ));
    }
    let n = groups.len();
    let mut out = Vec::with_capacity(n);
    for (gi, dims) in groups.into_iter().enumerate() {
        let last = &f.axes[axes[dims[dims.len() - 1]]];
        let mut extent = if dims.len() == 1 {
            match last.kind {
                AxisKind::CompressedFixed => last.nnz_cols.clone().ok_or_else(|| {
                    invalid(span, format!("axis `{}` has no nnz_cols", last.name))
                })?,
                _ => last.length.clone(),
            }
        } else {
            last.nnz.clone().ok_or_else(|| {
                unsupported(
                    span,
                    format!(
                        "buffer `{name}`: varied axis `{}` has no declared nnz",
                        last.name
                    ),
                )
            })?
        };
        if gi + 1 == n {
            if let Some(extra) = &buf.extra_storage {
                extent = sparsetir_arith::simplify(f, &Expr::add(extent, extra.clone()));
            }
        }
        out.push(Group { dims, extent });
    }
    Ok(Layout {
        axes: axes.to_vec(),
        groups: out,
    })
}
