//! The `lower_sparse_iter` pass (SPEC §3.2): stage I → stage II. Sparse iterations become loops
//! and blocks in *position* space, coordinates become `X_indices[...]` loads, and lookups of a
//! coordinate in a compressed axis become binary searches emitted once each in root-level
//! `preprocess` block nests.
//!
//! Design choices (documented here because the SPEC leaves them open):
//! - **Twin axes.** The `indices` buffer of a compressed axis `X` is declared over
//!   `(ancestors..., X_dense)`. For `compressed_varied` `X_dense` is
//!   `dense_varied(parent, (length, nnz), indptr)` (as in the RFC); for `compressed_fixed` it is
//!   the root `dense_fixed(nnz_cols)`, so the buffer has `parent.nnz * nnz_cols` values exactly
//!   like the axis's `indices` array. Twins are declared right after their axis.
//! - **Blocks.** Loops of one block are emitted outside it; a new nested block starts when an
//!   iterator's axis is varied and its (or, for `T.sp.attach`, the new) parent is iterated in the
//!   current block. Block `<name>k` holds the iteration's annotations plus `sparse: True`.
//! - **Searches.** A search is a fixed-trip bisection over block-local `low`/`high` buffers (see
//!   `crate::search`) writing `mid_k`, a sparse buffer over the iterated axes the search depends
//!   on. Without `check_invalid_binary_search` the result for an absent coordinate is
//!   **undefined** (it is the insertion point, which addresses some other element or lies past
//!   the fiber); with it, `mid_k = -1`, each store whose value reads through `mid_k` is split by
//!   `if mid_k >= 0: ... else: <same store, those reads replaced by the default value>`, a store
//!   whose target goes through `mid_k` is guarded by `if mid_k >= 0`, and an `if` condition, a
//!   `let` value or an evaluated expression reading through it becomes
//!   `T.Select(mid_k >= 0, e, <e with the default value>)`. With it too, a coordinate of a dense
//!   axis not known to lie inside it guards its access (`0 <= c < length`, the fiber's length
//!   for `dense_varied`): a read outside gives the default value, a write is skipped; a search
//!   whose prefix is outside gives `-1`. The element arguments of the range intrinsics
//!   (`compress64`, ...) are addresses and get no guard.
//! - **Fused loops.** `T.sp.fuse(a0, ..., an)` needs the axes and the ancestors of `a0` to form a
//!   `dense_fixed` root followed by at most two varied axes (so `fuse(I, J)`, `fuse(I, J, K)` over
//!   CSF, and `[I, fuse(J, K)]`). One root-level `preprocess` nest per chain computes, for every
//!   global position `vp` of the last axis, the position of each ancestor level (`mid_k[vp]`)
//!   by nested upper-bound searches over the last axis's `indptr`. The fused loop runs over the
//!   global positions of the last axis under the current element of `a0`'s parent
//!   (`T.serial(K_indptr[vi, 0], K_indptr[vi, len])`, or `T.serial(nnz)` from a root), and the
//!   block iterators read the searches. Longer chains and fixed axes after the first are a
//!   [`LowerError::Unsupported`].
//! - **Attach** supports axes whose own parent is a `dense_fixed` root (as the stage-I
//!   evaluator does); other shapes are a [`LowerError::Unsupported`].
//! - **Simplification.** Extents, positions, bindings and regions go through
//!   [`sparsetir_arith`] knowing every iterator's range and the auxiliary buffers' domains; an
//!   index written by the user is replaced only by a strictly smaller form.

use std::collections::{HashMap, HashSet};

use sparsetir_ir::{
    AttrValue, Attrs, Axis, AxisId, AxisKind, BinOp, Block, BlockIter, Buffer, BufferDecl,
    BufferId, BufferShape, DType, Expr, For, ForKind, IRModule, IfThenElse, Intrinsic, IterAxis,
    IterKind, LetStmt, PrimFunc, Span, SparseIteration, Stage, Stmt, Store, VarId, WORKSPACE_ATTR,
};

use crate::regions::{block_regions, Hints};
use crate::search::{self, SearchState};
use crate::simplify::Simplifier;

mod access;
mod assembly;
mod coiter;
mod fuse;
mod init;
use access::Guard;
use assembly::Asm;
pub use assembly::{stage_param, Phase, PHASE_ATTR};
use init::InitAt;

/// Options of [`lower_sparse_iter`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LowerOptions {
    /// Detect absent coordinates, as stage I does: binary searches give `mid = -1` (reads
    /// through it give the buffer's default value, stores through it are skipped), and a
    /// coordinate of a dense axis that may lie outside it (`X[i + 1]`, `X[T.Cast("int32",
    /// X[i])]`) guards its access the same way, unless the simplifier proves it inside or the
    /// runtime validates it (an iterator's coordinate, a value of an integer array argument the
    /// function never writes). Without it such accesses are undefined, as in SparseTIR.
    pub check_invalid_binary_search: bool,
    /// For functions storing into an `assembled` axis: which phase to lower (see
    /// [`Phase`]); lowering such a function without one is an error.
    pub assembly: Option<Phase>,
}

/// Why a lowering pass failed. Every variant carries the span of the offending construct
/// (unknown for constructs without source).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LowerError {
    /// A construct the pass does not handle (yet).
    #[error("unsupported: {message}")]
    Unsupported { span: Span, message: String },
    /// Malformed input that the verifier would reject.
    #[error("invalid input: {message}")]
    Invalid { span: Span, message: String },
}

impl LowerError {
    pub fn span(&self) -> Span {
        match self {
            LowerError::Unsupported { span, .. } | LowerError::Invalid { span, .. } => *span,
        }
    }
    pub fn message(&self) -> &str {
        match self {
            LowerError::Unsupported { message, .. } | LowerError::Invalid { message, .. } => {
                message
            }
        }
    }
}

type Res<T> = Result<T, LowerError>;

/// `e` as `dtype`: a loop or block-iterator extent of another integer type than its variable
/// (an `int64` size over an `int32` axis) is cast, so that the printed form reads back with the
/// variable's type (the parser infers it from the extent).
fn as_dtype(f: &PrimFunc, e: Expr, dtype: DType) -> Expr {
    if e.dtype(f) == dtype {
        e
    } else {
        Expr::Cast(dtype, Box::new(e))
    }
}

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

/// Lowers every stage-I function of `module` (others are kept as they are).
pub fn lower_sparse_iter_module(module: &IRModule, opts: &LowerOptions) -> Res<IRModule> {
    let funcs = module
        .funcs
        .iter()
        .map(|f| lower_sparse_iter(f, opts))
        .collect::<Res<Vec<_>>>()?;
    Ok(IRModule { funcs })
}

/// Lowers a stage-I function to stage II (SPEC §3.2); a clone for functions of another stage.
pub fn lower_sparse_iter(func: &PrimFunc, opts: &LowerOptions) -> Res<PrimFunc> {
    if func.stage() != Stage::I {
        return Ok(func.clone());
    }
    let mut l = Lowerer::new(func, *opts)?;
    let body = l.f.body.clone();
    let body = l.stmt(&body)?;
    let mut out = l.assumes;
    out.extend(l.nests);
    out.push(body);
    let mut f = l.f;
    f.body = Stmt::seq(out);
    f.set_stage(Stage::II);
    Ok(f)
}

// ------------------------------------------------------------------------------------------

/// One iterator in scope: its axis, its stage-I (coordinate) variable and its position.
#[derive(Clone, Debug)]
struct IterInfo {
    axis: AxisId,
    var: VarId,
    /// The position inside the parent's fiber (a block iterator).
    pos: Expr,
    /// Positions of the axis's ancestors (indices of its `indptr`/`indices` buffers).
    anc: Vec<Expr>,
    /// The iteration entry this iterator belongs to and whether it is the entry's first.
    entry: IterAxis,
    entry_vars: Vec<VarId>,
    entry_start: bool,
    /// A co-iteration part: the merged coordinate (instead of this axis's `indices`).
    coord: Option<Expr>,
    /// A union part: where this part stores the merged coordinate.
    valid: Option<Expr>,
}

/// One loop of a nest: an entry of an iteration's axis list.
#[derive(Clone, Debug)]
struct Step {
    entry: IterAxis,
    vars: Vec<VarId>,
    kinds: Vec<IterKind>,
}

#[derive(Clone, Debug, PartialEq)]
enum SearchKey {
    /// Lookup of `exprs[last]` in the last axis of `axes`, whose earlier coordinates are `exprs`.
    Coord {
        axes: Vec<AxisId>,
        exprs: Vec<Expr>,
        ctx: Vec<VarId>,
    },
}

/// What the innermost block of a nest holds.
enum NestBody<'a> {
    Iteration {
        init: Option<&'a Stmt>,
        body: &'a Stmt,
    },
    Search {
        axes: Vec<AxisId>,
        exprs: Vec<Expr>,
        mid: BufferId,
    },
}

/// Serial loops `loops` (outermost first) around `body`.
fn wrap_loops(loops: Vec<(VarId, Expr, Expr)>, body: Stmt) -> Stmt {
    loops
        .into_iter()
        .rev()
        .fold(body, |body, (var, min, extent)| {
            Stmt::For(Box::new(For {
                var,
                min,
                extent,
                kind: ForKind::Serial,
                thread: None,
                annotations: Attrs::new(),
                body,
                span: Span::default(),
            }))
        })
}

struct Lowerer {
    f: PrimFunc,
    opts: LowerOptions,
    indptr: HashMap<AxisId, BufferId>,
    indices: HashMap<AxisId, BufferId>,
    hints: Hints,
    assumes: Vec<Stmt>,
    nests: Vec<Stmt>,
    stack: Vec<IterInfo>,
    /// Iterator variables of enclosing iterations that are not bound yet.
    pending: HashSet<VarId>,
    searches: Vec<(SearchKey, BufferId)>,
    /// Row searches of fused chains (from the root): one result buffer per level.
    fused: Vec<(Vec<AxisId>, Vec<BufferId>)>,
    mids: HashSet<BufferId>,
    simp: Simplifier,
    span: Span,
    /// The assembly of the iteration being lowered.
    asm: Option<Asm>,
    /// Buffers of merge loops, allocated by the nearest enclosing block.
    pending_allocs: Vec<BufferId>,
    /// Conditions under which the positions of the access being built are valid (union parts,
    /// coordinates inside their dense axes).
    guards: Vec<Expr>,
    /// The stage-I iterator variables (coordinates the runtime validates, see
    /// `validated_coordinate`).
    iter_vars: HashSet<VarId>,
    /// The buffers the function writes (stores, and intrinsics writing their first argument).
    written: HashSet<BufferId>,
    /// Lowering the element arguments of a range intrinsic (addresses: no bound guards).
    addresses: bool,
}

impl Lowerer {
    fn new(func: &PrimFunc, opts: LowerOptions) -> Res<Lowerer> {
        let mut f = func.clone();
        // Axes the function uses: buffer axes, iterated axes, and their ancestors.
        let mut used = HashSet::new();
        for &b in &f.buffer_decls {
            if let Some(buf) = f.buffers.get(b) {
                used.extend(buf.axes().iter().copied());
            }
        }
        f.body.visit(&mut |s| {
            if let Stmt::SparseIteration(it) = s {
                for e in &it.axes {
                    used.extend(e.axes());
                    if let IterAxis::Attach { parent, .. } = e {
                        used.insert(*parent);
                    }
                }
            }
        });
        for a in used.clone() {
            let mut cur = f.axes.get(a).and_then(|x| x.parent);
            while let Some(p) = cur {
                used.insert(p);
                cur = f.axes.get(p).and_then(|x| x.parent);
            }
        }
        for a in &used {
            if f.axes.get(*a).is_none() {
                return Err(invalid(
                    f.span,
                    format!("axis handle #{} is out of range", a.index()),
                ));
            }
        }
        // Rebuild the axis arena with twins after their compressed axes.
        let mut axes = sparsetir_ir::Arena::new();
        let mut map = Vec::with_capacity(f.axes.len());
        let mut twins = HashMap::new();
        for (old, ax) in func.axes.iter() {
            let mut a = ax.clone();
            a.parent = a.parent.map(|p| map.get(p.index()).copied().unwrap_or(p));
            let parent = a.parent;
            let id = axes.append(a);
            map.push(id);
            if used.contains(&old) && ax.kind.is_compressed() {
                let twin = match ax.kind {
                    AxisKind::CompressedVaried => Axis {
                        name: format!("{}_dense", ax.name),
                        kind: AxisKind::DenseVaried,
                        parent,
                        length: ax.length.clone(),
                        nnz: ax.nnz.clone(),
                        nnz_cols: None,
                        indptr: ax.indptr,
                        indices: None,
                        idtype: ax.idtype,
                        sorted: true,
                        assembled: false,
                        span: Span::default(),
                    },
                    _ => {
                        let mut t = Axis::dense_fixed(
                            format!("{}_dense", ax.name),
                            ax.nnz_cols.clone().unwrap_or_else(|| ax.length.clone()),
                        );
                        t.idtype = ax.idtype;
                        t
                    }
                };
                twins.insert(id, axes.append(twin));
            }
        }
        let remap = |a: AxisId| map.get(a.index()).copied().unwrap_or(a);
        f.axes = axes;
        let handles: Vec<BufferId> = f.buffers.handles().collect();
        for b in handles {
            if let BufferShape::Sparse(v) = &mut f.buffers[b].shape {
                v.iter_mut().for_each(|a| *a = remap(*a));
            }
        }
        remap_stmt(&mut f.body, &remap);
        let used: HashSet<AxisId> = used.into_iter().map(remap).collect();

        let mut iter_vars = HashSet::new();
        f.body.visit(&mut |s| {
            if let Stmt::SparseIteration(it) = s {
                iter_vars.extend(it.vars.iter().copied());
            }
        });
        let written = f.body.written_buffers();
        let mut l = Lowerer {
            f,
            opts,
            indptr: HashMap::new(),
            indices: HashMap::new(),
            hints: HashMap::new(),
            assumes: Vec::new(),
            nests: Vec::new(),
            stack: Vec::new(),
            pending: HashSet::new(),
            searches: Vec::new(),
            fused: Vec::new(),
            mids: HashSet::new(),
            simp: Simplifier::new(),
            span: func.span,
            asm: None,
            pending_allocs: Vec::new(),
            guards: Vec::new(),
            iter_vars,
            written,
            addresses: false,
        };
        // Auxiliary buffers, in axis order.
        let ids: Vec<AxisId> = l.f.axes.handles().collect();
        for a in ids {
            if !used.contains(&a) {
                continue;
            }
            let ax = l.f.axes[a].clone();
            let anc = l.ancestors(a);
            if ax.kind.is_varied() {
                let data = ax.indptr.ok_or_else(|| {
                    invalid(ax.span, format!("varied axis `{}` has no indptr", ax.name))
                })?;
                let b = l.aux_buffer(
                    format!("{}_indptr", ax.name),
                    data,
                    anc.clone(),
                    ax.idtype,
                    true,
                );
                l.indptr.insert(a, b);
                if let Some(nnz) = &ax.nnz {
                    l.assume(b, Expr::int(0), nnz.clone());
                }
            }
            if ax.kind.is_compressed() {
                let data = ax.indices.ok_or_else(|| {
                    invalid(
                        ax.span,
                        format!("compressed axis `{}` has no indices", ax.name),
                    )
                })?;
                let Some(&twin) = twins.get(&a) else { continue };
                let mut shape = anc;
                shape.push(twin);
                let b = l.aux_buffer(
                    format!("{}_indices", ax.name),
                    data,
                    shape,
                    ax.idtype,
                    false,
                );
                l.indices.insert(a, b);
                l.assume(b, Expr::int(0), ax.length.clone());
                let max = Expr::sub(ax.length.clone(), Expr::int(1));
                l.simp.bind_domain(b, &Expr::int(0), &max);
            }
        }
        // User domain hints at the top level.
        let mut top = Vec::new();
        l.f.body.visit(&mut |s| {
            if let Stmt::AssumeBufferDomain { buffer, lo, hi, .. } = s {
                top.push((*buffer, lo.clone(), hi.clone()));
            }
        });
        for (b, lo, hi) in top {
            if !l.hints.contains_key(&b) {
                l.simp.bind_domain(b, &lo, &hi);
            }
            l.hints.entry(b).or_insert((lo, hi));
        }
        Ok(l)
    }

    fn aux_buffer(
        &mut self,
        name: String,
        data: VarId,
        axes: Vec<AxisId>,
        dtype: DType,
        extra: bool,
    ) -> BufferId {
        let b = self.f.buffers.append(Buffer {
            name,
            decl: BufferDecl::Match { data },
            shape: BufferShape::Sparse(axes),
            dtype,
            scope: "global".to_string(),
            strides: Vec::new(),
            extra_storage: extra.then(|| Expr::int(1)),
            default_value: None,
            span: Span::default(),
        });
        self.f.buffer_decls.push(b);
        b
    }

    fn assume(&mut self, b: BufferId, lo: Expr, hi: Expr) {
        self.simp.bind_domain(b, &lo, &hi);
        self.hints.insert(b, (lo.clone(), hi.clone()));
        self.assumes.push(Stmt::AssumeBufferDomain {
            buffer: b,
            lo,
            hi,
            span: Span::default(),
        });
    }

    /// The ancestors of `a`, root first.
    fn ancestors(&self, a: AxisId) -> Vec<AxisId> {
        let mut out = Vec::new();
        let mut cur = self.f.axes.get(a).and_then(|x| x.parent);
        while let Some(p) = cur {
            if out.contains(&p) {
                break;
            }
            out.push(p);
            cur = self.f.axes.get(p).and_then(|x| x.parent);
        }
        out.reverse();
        out
    }

    fn axis(&self, a: AxisId) -> Res<&Axis> {
        self.f.axes.get(a).ok_or_else(|| {
            invalid(
                self.span,
                format!("axis handle #{} is out of range", a.index()),
            )
        })
    }

    fn find(&self, v: VarId) -> Option<&IterInfo> {
        self.stack.iter().rev().find(|i| i.var == v)
    }

    /// The coordinate of an iterator in scope.
    fn coord(&self, info: &IterInfo) -> Res<Expr> {
        if let Some(c) = &info.coord {
            return Ok(c.clone());
        }
        let ax = self.axis(info.axis)?;
        if ax.kind.is_dense() {
            return Ok(info.pos.clone());
        }
        let b = self.indices_buf(info.axis)?;
        let mut idx = info.anc.clone();
        idx.push(info.pos.clone());
        Ok(Expr::load(b, idx))
    }

    fn indices_buf(&self, a: AxisId) -> Res<BufferId> {
        self.indices.get(&a).copied().ok_or_else(|| {
            invalid(
                self.span,
                format!("axis `{}` has no indices buffer", self.f.axes[a].name),
            )
        })
    }
    fn indptr_buf(&self, a: AxisId) -> Res<BufferId> {
        self.indptr.get(&a).copied().ok_or_else(|| {
            invalid(
                self.span,
                format!("axis `{}` has no indptr buffer", self.f.axes[a].name),
            )
        })
    }

    /// Number of elements in the fiber of `a` under ancestor positions `anc`.
    fn fiber_len(&self, a: AxisId, anc: &[Expr]) -> Res<Expr> {
        let ax = self.axis(a)?;
        Ok(match ax.kind {
            AxisKind::DenseFixed => ax.length.clone(),
            AxisKind::CompressedFixed => ax.nnz_cols.clone().unwrap_or_else(|| ax.length.clone()),
            _ => {
                let b = self.indptr_buf(a)?;
                let Some((last, rest)) = anc.split_last() else {
                    return Err(invalid(
                        self.span,
                        format!("varied axis `{}` has no parent", ax.name),
                    ));
                };
                let mut hi = rest.to_vec();
                hi.push(self.simp.add(&self.f, last.clone(), Expr::int(1)));
                let len = Expr::sub(Expr::load(b, hi), Expr::load(b, anc.to_vec()));
                self.simp.simplify(&self.f, &len)
            }
        })
    }

    /// The block-iterator domain of an iterator over `a`: the length (varied) or count (fixed).
    fn domain(&self, a: AxisId) -> Res<Expr> {
        let ax = self.axis(a)?;
        Ok(match ax.kind {
            AxisKind::CompressedFixed => ax.nnz_cols.clone().unwrap_or_else(|| ax.length.clone()),
            _ => ax.length.clone(),
        })
    }

    /// Ancestor positions of an iterated axis whose parent is iterated (in scope).
    fn iter_ancestors(&self, a: AxisId) -> Res<Vec<Expr>> {
        let ax = self.axis(a)?;
        let Some(p) = ax.parent else {
            return Ok(Vec::new());
        };
        if ax.kind == AxisKind::DenseFixed {
            return Ok(Vec::new());
        }
        let Some(pi) = self.stack.iter().rev().find(|i| i.axis == p) else {
            return Err(invalid(
                self.span,
                format!(
                    "axis `{}`'s parent `{}` is not iterated",
                    ax.name, self.f.axes[p].name
                ),
            ));
        };
        let mut anc = pi.anc.clone();
        anc.push(pi.pos.clone());
        Ok(anc)
    }

    // ------------------------------------------------------------------ statements

    fn stmt(&mut self, s: &Stmt) -> Res<Stmt> {
        let span = if s.span().is_unknown() {
            self.span
        } else {
            s.span()
        };
        Ok(match s {
            Stmt::Seq(v) => {
                let mut out = Vec::with_capacity(v.len());
                for x in v {
                    out.push(self.stmt(x)?);
                }
                Stmt::seq(out)
            }
            Stmt::SparseIteration(it) => {
                let saved = self.span;
                self.span = span;
                let r = self.iteration(it);
                self.span = saved;
                r?
            }
            Stmt::Store(st) if self.is_assembled(st.buffer) => self.asm_store(st)?,
            Stmt::Store(_)
                if self.opts.assembly.is_some_and(Phase::structure_only) && self.asm.is_some() =>
            {
                Stmt::empty()
            }
            Stmt::Store(st) => {
                let (indices, guard) = self.guarded(|l| l.access(st.buffer, &st.indices))?;
                if let Guard::Never = guard {
                    // Through a part known absent: nothing is stored.
                    return Ok(Stmt::empty());
                }
                let value = self.expr(&st.value)?;
                let st = Store {
                    buffer: st.buffer,
                    indices,
                    value,
                    span: st.span,
                };
                let st = if self.opts.check_invalid_binary_search {
                    self.guard_store(st)
                } else {
                    Stmt::Store(st)
                };
                match guard {
                    Guard::When(g) => Stmt::If(Box::new(IfThenElse {
                        cond: g,
                        then_case: st,
                        else_case: None,
                        span: Span::default(),
                    })),
                    _ => st,
                }
            }
            Stmt::If(i) => {
                let cond = self.expr(&i.cond)?;
                let cond = self.guard_expr(&cond);
                let then_case = self.stmt(&i.then_case)?;
                let else_case = match &i.else_case {
                    Some(e) => Some(self.stmt(e)?),
                    None => None,
                };
                Stmt::If(Box::new(IfThenElse {
                    cond,
                    then_case,
                    else_case,
                    span: i.span,
                }))
            }
            Stmt::Let(l) => {
                let value = self.expr(&l.value)?;
                let value = self.guard_expr(&value);
                let body = self.stmt(&l.body)?;
                Stmt::Let(Box::new(LetStmt {
                    var: l.var,
                    value,
                    body,
                    span: l.span,
                }))
            }
            Stmt::Evaluate(e) => {
                let e = self.expr(e)?;
                let e = self.guard_expr(&e);
                Stmt::Evaluate(e)
            }
            Stmt::AssumeBufferDomain { .. } => s.clone(),
            Stmt::For(_) | Stmt::While(_) | Stmt::Block(_) | Stmt::Allocate(_) => {
                return Err(unsupported(
                    span,
                    "loops, blocks and T.allocate inside a stage-I function",
                ))
            }
        })
    }

    /// With checked searches, an expression outside a store (an `if` condition, a `let` value,
    /// an evaluated expression) reading through search results: `T.Select(mid >= 0, e, e')` per
    /// result, where `e'` reads the buffer's default value instead (only the chosen operand is
    /// evaluated, so the absent position `-1` is never read).
    fn guard_expr(&self, e: &Expr) -> Expr {
        if !self.opts.check_invalid_binary_search {
            return e.clone();
        }
        let mids = mid_loads(e, &self.mids);
        self.select_reads(e, &mids)
    }

    fn select_reads(&self, e: &Expr, mids: &[Expr]) -> Expr {
        let Some((m, rest)) = mids.split_first() else {
            return e.clone();
        };
        if !mid_loads(e, &self.mids).contains(m) {
            return self.select_reads(e, rest);
        }
        let miss = replace_through(&self.f, e, m, &self.mids);
        let miss = self.simp.simplify_if_smaller(&self.f, &miss);
        Expr::Select(
            Box::new(valid(&self.f, m)),
            Box::new(self.select_reads(e, rest)),
            Box::new(self.select_reads(&miss, rest)),
        )
    }

    fn guard_store(&self, st: Store) -> Stmt {
        let mut writes = Vec::new();
        for i in &st.indices {
            for m in mid_loads(i, &self.mids) {
                if !writes.contains(&m) {
                    writes.push(m);
                }
            }
        }
        let reads: Vec<Expr> = mid_loads(&st.value, &self.mids)
            .into_iter()
            .filter(|m| !writes.contains(m))
            .collect();
        let mut s = self.split_reads(st, &reads);
        for w in writes.into_iter().rev() {
            s = Stmt::If(Box::new(IfThenElse {
                cond: valid(&self.f, &w),
                then_case: s,
                else_case: None,
                span: Span::default(),
            }));
        }
        s
    }

    fn split_reads(&self, st: Store, mids: &[Expr]) -> Stmt {
        let Some((m, rest)) = mids.split_first() else {
            return Stmt::Store(st);
        };
        if !mid_loads(&st.value, &self.mids).contains(m) {
            return self.split_reads(st, rest);
        }
        let mut miss = st.clone();
        let value = replace_through(&self.f, &st.value, m, &self.mids);
        miss.value = self.simp.simplify_if_smaller(&self.f, &value);
        Stmt::If(Box::new(IfThenElse {
            cond: valid(&self.f, m),
            then_case: self.split_reads(st, rest),
            else_case: Some(self.split_reads(miss, rest)),
            span: Span::default(),
        }))
    }

    fn iteration(&mut self, it: &SparseIteration) -> Res<Stmt> {
        let arity: usize = it.axes.iter().map(|a| a.arity()).sum();
        if it.vars.len() != arity || it.kinds.len() != arity {
            return Err(invalid(
                it.span,
                format!(
                    "iteration `{}`: axes, kinds and variables do not match",
                    it.name
                ),
            ));
        }
        let mut steps = Vec::new();
        let mut k = 0;
        for e in &it.axes {
            let n = e.arity();
            steps.push(Step {
                entry: e.clone(),
                vars: it.vars[k..k + n].to_vec(),
                kinds: it.kinds[k..k + n].to_vec(),
            });
            k += n;
        }
        let asm = self.asm_plan(it)?;
        if asm.is_none() && self.opts.assembly.is_some_and(Phase::structure_only) {
            // The symbolic phase computes structure only.
            return Ok(Stmt::empty());
        }
        let added: Vec<VarId> = it
            .vars
            .iter()
            .copied()
            .filter(|v| self.pending.insert(*v))
            .collect();
        let mut ann = Attrs::new();
        ann.set("sparse", AttrValue::Bool(true));
        for (key, v) in it.annotations.iter() {
            ann.set(key, v.clone());
        }
        self.asm = asm.clone();
        let r = self.nest(
            &it.name,
            &steps,
            &ann,
            NestBody::Iteration {
                init: it.init.as_ref(),
                body: &it.body,
            },
        );
        self.asm = None;
        for v in added {
            self.pending.remove(&v);
        }
        match asm {
            Some(a) if a.phase == Phase::Symbolic || a.phase.is_staged() => {
                let nest = r?;
                let sum = self.asm_prefix_sum(&a, &it.name)?;
                Ok(Stmt::seq(vec![nest, sum]))
            }
            _ => r,
        }
    }

    /// Builds the loops and blocks of one iteration (or search) nest.
    fn nest(&mut self, name: &str, steps: &[Step], ann: &Attrs, body: NestBody<'_>) -> Res<Stmt> {
        // Partition the steps into blocks.
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut cur: Vec<AxisId> = Vec::new();
        let mut after_coiter = false;
        for (k, s) in steps.iter().enumerate() {
            if s.entry.is_coiter() || after_coiter {
                // A co-iteration is a merge loop of its own; what follows starts a new block.
                after_coiter = s.entry.is_coiter();
                groups.push(vec![k]);
                cur = s.entry.all_axes();
                continue;
            }
            let (first, parent) = match &s.entry {
                IterAxis::Axis(a) => (*a, self.axis(*a)?.parent),
                IterAxis::Fuse(ch) => {
                    let a = *ch
                        .first()
                        .ok_or_else(|| invalid(self.span, "empty T.sp.fuse"))?;
                    (a, self.axis(a)?.parent)
                }
                IterAxis::Attach { axis, parent } => (*axis, Some(*parent)),
                IterAxis::CoIter { .. } => continue,
            };
            let split = self.axis(first)?.kind.is_varied()
                && parent.is_some_and(|p| cur.contains(&p))
                && groups.last().is_some_and(|g| !g.is_empty());
            if groups.is_empty() || split {
                groups.push(Vec::new());
                cur.clear();
            }
            if let Some(g) = groups.last_mut() {
                g.push(k);
            }
            cur.extend(s.entry.axes());
        }
        // The block of the first reduction iterator receives the init; where one of that
        // block's reduction fibers may be empty, the init moves out of it (see `InitAt`).
        let init_group = groups.iter().position(|g| {
            g.iter()
                .any(|&k| steps[k].kinds.contains(&IterKind::Reduce))
        });
        let init_at = match (init_group, &body) {
            (
                Some(g),
                NestBody::Iteration {
                    init: Some(i),
                    body,
                },
            ) => {
                let spatial: Vec<VarId> = groups[g]
                    .iter()
                    .flat_map(|&k| steps[k].vars.iter().zip(&steps[k].kinds))
                    .filter(|(_, kind)| **kind == IterKind::Spatial)
                    .map(|(v, _)| *v)
                    .collect();
                // Iterators the init's block does not bind: its reduction iterators and every
                // iterator of the blocks inside.
                let unbound: Vec<VarId> = groups[g..]
                    .iter()
                    .flatten()
                    .flat_map(|&k| steps[k].vars.iter().zip(&steps[k].kinds))
                    .filter(|(v, _)| !spatial.contains(v))
                    .map(|(v, _)| *v)
                    .collect();
                self.check_init_targets(name, &spatial, &unbound, i, body)?;
                if self.may_be_empty(steps, &groups, g)? {
                    InitAt::Before(g)
                } else {
                    InitAt::InBlock(g)
                }
            }
            _ => InitAt::Nowhere,
        };
        let base = self.stack.len();
        let r = self.group(name, steps, &groups, 0, init_at, ann, &body);
        self.stack.truncate(base);
        r
    }

    /// The loop(s) and block iterator(s) of one entry of an iteration's axis list.
    fn entry_iter(
        &mut self,
        s: &Step,
        loops: &mut Vec<(VarId, Expr, Expr)>,
        iters: &mut Vec<BlockIter>,
    ) -> Res<()> {
        match &s.entry {
            IterAxis::Axis(a) => {
                let anc = self.iter_ancestors(*a)?;
                let extent = self.fiber_len(*a, &anc)?;
                self.simple_iter(*a, s, 0, anc, extent, loops, iters)
            }
            IterAxis::Attach { axis, parent } => {
                let ax = self.axis(*axis)?;
                let own_root = ax
                    .parent
                    .and_then(|p| self.f.axes.get(p))
                    .is_some_and(|p| p.kind == AxisKind::DenseFixed);
                if !own_root {
                    return Err(unsupported(
                        self.span,
                        format!(
                            "T.sp.attach of `{}`: its own parent must be a dense_fixed root",
                            ax.name
                        ),
                    ));
                }
                let Some(pi) = self.stack.iter().rev().find(|i| i.axis == *parent).cloned() else {
                    return Err(invalid(
                        self.span,
                        "T.sp.attach: the new parent is not iterated",
                    ));
                };
                let anc = vec![self.coord(&pi)?];
                let extent = self.fiber_len(*axis, &anc)?;
                self.simple_iter(*axis, s, 0, anc, extent, loops, iters)
            }
            IterAxis::Fuse(chain) => self.fused_iter(chain, s, loops, iters),
            IterAxis::CoIter { op, .. } => Err(unsupported(
                self.span,
                format!("T.sp.{} in this position", op.name()),
            )),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn group(
        &mut self,
        name: &str,
        steps: &[Step],
        groups: &[Vec<usize>],
        g: usize,
        init_at: InitAt,
        ann: &Attrs,
        body: &NestBody<'_>,
    ) -> Res<Stmt> {
        if let [k] = groups[g][..] {
            if steps[k].entry.is_coiter() {
                // A reduction over a co-iteration: its init runs once, before the merge loop
                // (rows whose parts are all empty included).
                let init = match (init_at, body) {
                    (
                        InitAt::InBlock(ig) | InitAt::Before(ig),
                        NestBody::Iteration { init: Some(i), .. },
                    ) if ig == g => Some(self.stmt(i)?),
                    _ => None,
                };
                let mut inner = |me: &mut Lowerer| -> Res<Stmt> {
                    if g + 1 < groups.len() {
                        me.group(name, steps, groups, g + 1, init_at, ann, body)
                    } else {
                        let (s, allocs) = me.innermost(body)?;
                        me.pending_allocs.extend(allocs);
                        Ok(s)
                    }
                };
                let merge = self.coiter_loop(&steps[k], &mut inner)?;
                return Ok(match init {
                    Some(i) => Stmt::seq(vec![i, merge]),
                    None => merge,
                });
            }
        }
        let mut loops: Vec<(VarId, Expr, Expr)> = Vec::new();
        let mut iters: Vec<BlockIter> = Vec::new();
        let base = self.stack.len();
        for &k in &groups[g] {
            self.entry_iter(&steps[k], &mut loops, &mut iters)?;
        }
        let outer_pending = std::mem::take(&mut self.pending_allocs);
        let gather_rows = g == 0 && self.asm.as_ref().is_some_and(|a| a.phase == Phase::Gather);
        let (inner, mut allocs) = if gather_rows {
            // The copy of the staged rows runs at the row level only.
            (Stmt::empty(), Vec::new())
        } else if g + 1 < groups.len() {
            (
                self.group(name, steps, groups, g + 1, init_at, ann, body)?,
                Vec::new(),
            )
        } else {
            self.innermost(body)?
        };
        allocs.append(&mut self.pending_allocs);
        self.pending_allocs = outer_pending;
        let mut block_ann = ann.clone();
        let inner = match self.asm.clone() {
            Some(a) if g == 0 => {
                let (pro, epi, bufs) = self.asm_row_parts(&a)?;
                allocs.extend(bufs);
                let ws: Vec<AttrValue> = a
                    .flag
                    .iter()
                    .chain(&a.wval)
                    .chain(&a.bits)
                    .chain(&a.top)
                    .chain(&a.marks)
                    .chain(&a.groups)
                    .chain(
                        a.stage
                            .as_ref()
                            .filter(|_| a.phase.is_staged())
                            .map(|st| &st.block),
                    )
                    .map(|b| AttrValue::Str(self.f.buffers[*b].name.clone()))
                    .collect();
                if !ws.is_empty() {
                    block_ann.set(WORKSPACE_ATTR, AttrValue::List(ws));
                }
                let mut v = pro;
                v.push(inner);
                v.extend(epi);
                Stmt::seq(v)
            }
            _ => inner,
        };
        let init = match (init_at, body) {
            (InitAt::InBlock(ig), NestBody::Iteration { init: Some(i), .. }) if ig == g => {
                Some(self.stmt(i)?)
            }
            _ => None,
        };
        self.stack.truncate(base);
        let (reads, writes) = block_regions(
            &self.f,
            &self.simp,
            &self.hints,
            init.as_ref(),
            &inner,
            &allocs,
        );
        let block = Stmt::Block(Box::new(Block {
            name: format!("{name}{g}"),
            iters,
            predicate: None,
            reads,
            writes,
            init,
            alloc_buffers: allocs,
            annotations: block_ann,
            body: inner,
            span: Span::default(),
        }));
        let nest = wrap_loops(loops, block);
        match (init_at, body) {
            (InitAt::Before(ig), NestBody::Iteration { init: Some(i), .. }) if ig == g => {
                let unbound: Vec<usize> = groups[g..].iter().flatten().copied().collect();
                let init = self.init_nest(name, steps, &groups[g], &unbound, g, ann, i)?;
                Ok(Stmt::Seq(vec![init, nest]))
            }
            _ => Ok(nest),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn simple_iter(
        &mut self,
        a: AxisId,
        s: &Step,
        k: usize,
        anc: Vec<Expr>,
        extent: Expr,
        loops: &mut Vec<(VarId, Expr, Expr)>,
        iters: &mut Vec<BlockIter>,
    ) -> Res<()> {
        let var = s.vars[k];
        let (vname, dtype) = {
            let v = &self.f.vars[var];
            (v.name.clone(), v.dtype)
        };
        let lv = self.f.add_var(vname.clone(), dtype);
        let bv = self.f.add_var(format!("v{vname}"), dtype);
        let extent = as_dtype(&self.f, self.simp.simplify(&self.f, &extent), dtype);
        let domain = as_dtype(&self.f, self.domain(a)?, dtype);
        self.simp.bind_range(lv, &Expr::int(0), &extent);
        self.simp.bind_range(bv, &Expr::int(0), &domain);
        loops.push((lv, Expr::int(0), extent));
        iters.push(BlockIter {
            var: bv,
            min: Expr::int(0),
            extent: domain,
            kind: s.kinds[k],
            binding: Expr::var(lv),
        });
        self.push(a, s, k, Expr::var(bv), anc);
        Ok(())
    }

    fn push(&mut self, a: AxisId, s: &Step, k: usize, pos: Expr, anc: Vec<Expr>) {
        self.pending.remove(&s.vars[k]);
        self.stack.push(IterInfo {
            axis: a,
            var: s.vars[k],
            pos,
            anc,
            entry: s.entry.clone(),
            entry_vars: s.vars.clone(),
            entry_start: k == 0,
            coord: None,
            valid: None,
        });
    }

    /// The body of the innermost block of a nest, with the buffers it allocates.
    fn innermost(&mut self, body: &NestBody<'_>) -> Res<(Stmt, Vec<BufferId>)> {
        match body {
            NestBody::Iteration { body, .. } => Ok((self.stmt(body)?, Vec::new())),
            NestBody::Search { axes, exprs, mid } => {
                let d = axes.len() - 1;
                // The prefix's own guards (coordinates outside their dense axes) guard the
                // search: outside, the coordinate is absent.
                let (prefix, prefix_guard) = self.guarded(|l| l.positions(axes, &exprs[..d]))?;
                let checked = self.opts.check_invalid_binary_search;
                // A prefix position that is itself a search's result: where that search missed
                // (`-1`), so does this one. Reads through search results inside a coordinate
                // take the default value where those missed.
                let mut found = Vec::new();
                let prefix: Vec<Expr> = prefix
                    .into_iter()
                    .map(|p| {
                        if !checked {
                            return p;
                        }
                        if matches!(&p, Expr::Load { buffer, .. } if self.mids.contains(buffer)) {
                            if !found.contains(&p) {
                                found.push(p.clone());
                            }
                            p
                        } else {
                            self.guard_expr(&p)
                        }
                    })
                    .collect();
                let x = axes[d];
                let anc_axes = self.ancestors(x);
                let anc = self.anc_positions(axes, &prefix, &anc_axes)?;
                let c = self.expr(&exprs[d])?;
                let c = self.guard_expr(&c);
                let len = self.fiber_len(x, &anc)?;
                let ind = self.indices_buf(x)?;
                let dtype = self.axis(x)?.idtype;
                let st = SearchState::new(&mut self.f, dtype);
                let target: Vec<Expr> = self.stack.iter().map(|i| i.pos.clone()).collect();
                let probe = |m: Expr| {
                    let mut idx = anc.clone();
                    idx.push(m);
                    Expr::load(ind, idx)
                };
                let s = search::lower_bound(
                    &mut self.f,
                    &self.simp,
                    &st,
                    len,
                    probe,
                    c,
                    (*mid, target.clone()),
                    checked,
                );
                let miss = || search::store(*mid, target.clone(), Expr::Int(-1, dtype));
                let mut s = match prefix_guard {
                    Guard::Always => s,
                    Guard::Never => miss(),
                    Guard::When(g) => Stmt::If(Box::new(IfThenElse {
                        cond: self.guard_expr(&g),
                        then_case: s,
                        else_case: Some(miss()),
                        span: Span::default(),
                    })),
                };
                for m in found.iter().rev() {
                    s = Stmt::If(Box::new(IfThenElse {
                        cond: valid(&self.f, m),
                        then_case: s,
                        else_case: Some(miss()),
                        span: Span::default(),
                    }));
                }
                Ok((s, vec![st.low, st.high]))
            }
        }
    }

    fn mid_buffer(&mut self, k: usize, shape: BufferShape, dtype: DType) -> BufferId {
        let b = self.f.buffers.append(Buffer {
            name: format!("mid_{k}"),
            decl: BufferDecl::Alloc,
            shape,
            dtype,
            scope: "global".to_string(),
            strides: Vec::new(),
            extra_storage: None,
            default_value: None,
            span: Span::default(),
        });
        self.f.buffer_decls.push(b);
        self.mids.insert(b);
        b
    }
}

/// `m >= 0` for a search result `m`.
fn valid(f: &PrimFunc, m: &Expr) -> Expr {
    Expr::binary(BinOp::Ge, m.clone(), Expr::Int(0, m.dtype(f)))
}

/// The distinct loads of search-result buffers in `e`, in order.
fn mid_loads(e: &Expr, mids: &HashSet<BufferId>) -> Vec<Expr> {
    let mut out: Vec<Expr> = Vec::new();
    e.visit(&mut |x| {
        if let Expr::Load { buffer, .. } = x {
            if mids.contains(buffer) && !out.contains(x) {
                out.push(x.clone());
            }
        }
    });
    out
}

/// `e` with every load addressed through search result `m` replaced by its buffer's default.
fn replace_through(f: &PrimFunc, e: &Expr, m: &Expr, mids: &HashSet<BufferId>) -> Expr {
    let rec = |x: &Expr| replace_through(f, x, m, mids);
    match e {
        Expr::Load { buffer, indices } => {
            // A load at the missed position reads the default value; a load whose coordinate
            // merely *reads* such a load (`W[E[i, j], ...]` with `E` missed) reads at that
            // default coordinate instead.
            if !mids.contains(buffer) && indices.iter().any(|i| i == m) {
                let buf = &f.buffers[*buffer];
                return buf.default_value.clone().unwrap_or_else(|| zero(buf.dtype));
            }
            Expr::Load {
                buffer: *buffer,
                indices: indices.iter().map(rec).collect(),
            }
        }
        Expr::Binary(op, a, b) => Expr::binary(*op, rec(a), rec(b)),
        Expr::Unary(op, a) => Expr::Unary(*op, Box::new(rec(a))),
        Expr::Select(c, a, b) => Expr::Select(Box::new(rec(c)), Box::new(rec(a)), Box::new(rec(b))),
        Expr::Cast(d, a) => Expr::Cast(*d, Box::new(rec(a))),
        Expr::Call { op, args, dtype } => Expr::Call {
            op: *op,
            args: args.iter().map(rec).collect(),
            dtype: *dtype,
        },
        Expr::Let { var, value, body } => Expr::Let {
            var: *var,
            value: Box::new(rec(value)),
            body: Box::new(rec(body)),
        },
        _ => e.clone(),
    }
}

fn zero(d: DType) -> Expr {
    if d.is_float() {
        Expr::Float(0.0, d)
    } else if d.is_bool() {
        Expr::Bool(false)
    } else {
        Expr::Int(0, d)
    }
}

fn remap_stmt(s: &mut Stmt, remap: &impl Fn(AxisId) -> AxisId) {
    match s {
        Stmt::Seq(v) => v.iter_mut().for_each(|x| remap_stmt(x, remap)),
        Stmt::SparseIteration(it) => {
            for e in &mut it.axes {
                *e = e.map_axes(remap);
            }
            if let Some(i) = &mut it.init {
                remap_stmt(i, remap);
            }
            remap_stmt(&mut it.body, remap);
        }
        Stmt::For(l) => remap_stmt(&mut l.body, remap),
        Stmt::While(w) => remap_stmt(&mut w.body, remap),
        Stmt::Block(b) => {
            if let Some(i) = &mut b.init {
                remap_stmt(i, remap);
            }
            remap_stmt(&mut b.body, remap);
        }
        Stmt::If(i) => {
            remap_stmt(&mut i.then_case, remap);
            if let Some(e) = &mut i.else_case {
                remap_stmt(e, remap);
            }
        }
        Stmt::Let(l) => remap_stmt(&mut l.body, remap),
        Stmt::Store(_)
        | Stmt::Evaluate(_)
        | Stmt::Allocate(_)
        | Stmt::AssumeBufferDomain { .. } => {}
    }
}
