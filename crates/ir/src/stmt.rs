//! Statements of all stages: sparse iterations (stage I), loops, blocks, stores, branches,
//! allocations and `let` (stages II/III; stores, branches and `let` at stage I too).

use std::collections::HashSet;

use crate::attrs::Attrs;
use crate::axis::{IterAxis, IterKind};
use crate::expr::{BufferId, Expr, VarId};
use crate::span::Span;

/// A statement tree.
#[derive(Clone, Debug, PartialEq)]
pub enum Stmt {
    /// Statements run in order.
    Seq(Vec<Stmt>),
    /// Stage I: `with T.sp.iteration(...)`.
    SparseIteration(Box<SparseIteration>),
    /// Stages II/III: `for v in T.serial(...)` and friends.
    For(Box<For>),
    /// Stages II/III: `with T.block("name")`.
    Block(Box<Block>),
    /// `A[i, j] = value`.
    Store(Store),
    /// `if cond: ... else: ...`.
    If(Box<IfThenElse>),
    /// Stages II/III: `while cond: ...` (the merge loops of co-iteration).
    While(Box<While>),
    /// `T.evaluate(expr)`: an expression run for its effect (e.g. an atomic).
    Evaluate(Expr),
    /// `X = T.allocate(shape, dtype, scope)`: a dense buffer visible to the statements after it
    /// in the same sequence.
    Allocate(BufferId),
    /// `v: T.int32 = value` followed by `body` (the rest of the sequence).
    Let(Box<LetStmt>),
    /// `T.assume_buffer_domain(buf, (lo, hi))`: every value of `buf` lies in `[lo, hi)`.
    AssumeBufferDomain {
        buffer: BufferId,
        lo: Expr,
        hi: Expr,
        span: Span,
    },
}

impl Stmt {
    /// The empty statement (`pass`).
    pub fn empty() -> Stmt {
        Stmt::Seq(Vec::new())
    }
    pub fn is_empty(&self) -> bool {
        matches!(self, Stmt::Seq(v) if v.is_empty())
    }
    /// The statement this is through one-element sequences (`[s]` is `s`); itself otherwise.
    pub fn single(&self) -> &Stmt {
        match self {
            Stmt::Seq(v) if v.len() == 1 => v[0].single(),
            other => other,
        }
    }
    /// Builds a sequence, flattening nested sequences and dropping empty ones; a single statement
    /// stays itself.
    pub fn seq(stmts: Vec<Stmt>) -> Stmt {
        let mut out = Vec::new();
        for s in stmts {
            match s {
                Stmt::Seq(inner) => out.extend(inner),
                other => out.push(other),
            }
        }
        if out.len() == 1 {
            out.pop().unwrap()
        } else {
            Stmt::Seq(out)
        }
    }
    /// The source span of this statement, where it has one.
    pub fn span(&self) -> Span {
        match self {
            Stmt::Seq(v) => v.iter().fold(Span::default(), |acc, s| acc.join(s.span())),
            Stmt::SparseIteration(s) => s.span,
            Stmt::For(f) => f.span,
            Stmt::Block(b) => b.span,
            Stmt::Store(s) => s.span,
            Stmt::If(i) => i.span,
            Stmt::While(w) => w.span,
            Stmt::Let(l) => l.span,
            Stmt::AssumeBufferDomain { span, .. } => *span,
            Stmt::Evaluate(_) | Stmt::Allocate(_) => Span::default(),
        }
    }

    /// Calls `f` on every direct child statement (bodies, inits, branches).
    pub fn for_each_child(&self, mut f: impl FnMut(&Stmt)) {
        match self {
            Stmt::Seq(v) => v.iter().for_each(f),
            Stmt::SparseIteration(s) => {
                if let Some(i) = &s.init {
                    f(i)
                }
                f(&s.body)
            }
            Stmt::For(l) => f(&l.body),
            Stmt::While(w) => f(&w.body),
            Stmt::Block(b) => {
                if let Some(i) = &b.init {
                    f(i)
                }
                f(&b.body)
            }
            Stmt::If(i) => {
                f(&i.then_case);
                if let Some(e) = &i.else_case {
                    f(e)
                }
            }
            Stmt::Let(l) => f(&l.body),
            Stmt::Store(_)
            | Stmt::Evaluate(_)
            | Stmt::Allocate(_)
            | Stmt::AssumeBufferDomain { .. } => {}
        }
    }

    /// Visits this statement and all descendants, parents first.
    pub fn visit(&self, f: &mut impl FnMut(&Stmt)) {
        f(self);
        self.for_each_child(|c| c.visit(f));
    }

    /// Whether this statement stores to or loads from buffer `b` anywhere (inits, loop bounds,
    /// block iterators, predicates and regions included).
    pub fn touches(&self, b: BufferId) -> bool {
        let mut hit = false;
        self.visit(&mut |s| {
            if let Stmt::Store(st) = s {
                hit |= st.buffer == b;
            }
            s.for_each_expr(|e| hit |= e.loads(b));
        });
        hit
    }

    /// The buffers written anywhere in this statement (inits included): stores' targets and
    /// the buffers whose elements an intrinsic writes (`atomic_add`, `compress64`, ...: the
    /// element its first argument names).
    pub fn written_buffers(&self) -> HashSet<BufferId> {
        let mut out = HashSet::new();
        self.visit(&mut |s| {
            if let Stmt::Store(st) = s {
                out.insert(st.buffer);
            }
            s.for_each_expr(|e| {
                e.visit(&mut |x| {
                    if let Expr::Call { op, args, .. } = x {
                        if let (true, Some(Expr::Load { buffer, .. })) =
                            (op.writes_first_arg(), args.first())
                        {
                            out.insert(*buffer);
                        }
                    }
                })
            });
        });
        out
    }

    /// Calls `f` on every direct child statement, mutably (same order as
    /// [`Stmt::for_each_child`]).
    pub fn for_each_child_mut(&mut self, mut f: impl FnMut(&mut Stmt)) {
        match self {
            Stmt::Seq(v) => v.iter_mut().for_each(f),
            Stmt::SparseIteration(s) => {
                if let Some(i) = &mut s.init {
                    f(i)
                }
                f(&mut s.body)
            }
            Stmt::For(l) => f(&mut l.body),
            Stmt::While(w) => f(&mut w.body),
            Stmt::Block(b) => {
                if let Some(i) = &mut b.init {
                    f(i)
                }
                f(&mut b.body)
            }
            Stmt::If(i) => {
                f(&mut i.then_case);
                if let Some(e) = &mut i.else_case {
                    f(e)
                }
            }
            Stmt::Let(l) => f(&mut l.body),
            Stmt::Store(_)
            | Stmt::Evaluate(_)
            | Stmt::Allocate(_)
            | Stmt::AssumeBufferDomain { .. } => {}
        }
    }

    /// Calls `f` on every expression held directly by this statement (not by child statements).
    pub fn for_each_expr(&self, mut f: impl FnMut(&Expr)) {
        match self {
            Stmt::Seq(_) | Stmt::SparseIteration(_) | Stmt::Allocate(_) => {}
            Stmt::For(l) => {
                f(&l.min);
                f(&l.extent)
            }
            Stmt::Block(b) => {
                for it in &b.iters {
                    f(&it.min);
                    f(&it.extent);
                    f(&it.binding);
                }
                if let Some(p) = &b.predicate {
                    f(p)
                }
                for r in b.reads.iter().chain(&b.writes) {
                    for (lo, ext) in &r.ranges {
                        f(lo);
                        f(ext)
                    }
                }
            }
            Stmt::Store(s) => {
                s.indices.iter().for_each(&mut f);
                f(&s.value)
            }
            Stmt::If(i) => f(&i.cond),
            Stmt::While(w) => f(&w.cond),
            Stmt::Evaluate(e) => f(e),
            Stmt::Let(l) => f(&l.value),
            Stmt::AssumeBufferDomain { lo, hi, .. } => {
                f(lo);
                f(hi)
            }
        }
    }

    /// Calls `f` on every expression held directly by this statement, mutably (same order as
    /// [`Stmt::for_each_expr`]).
    pub fn for_each_expr_mut(&mut self, mut f: impl FnMut(&mut Expr)) {
        match self {
            Stmt::Seq(_) | Stmt::SparseIteration(_) | Stmt::Allocate(_) => {}
            Stmt::For(l) => {
                f(&mut l.min);
                f(&mut l.extent)
            }
            Stmt::Block(b) => {
                for it in &mut b.iters {
                    f(&mut it.min);
                    f(&mut it.extent);
                    f(&mut it.binding);
                }
                if let Some(p) = &mut b.predicate {
                    f(p)
                }
                for r in b.reads.iter_mut().chain(b.writes.iter_mut()) {
                    for (lo, ext) in &mut r.ranges {
                        f(lo);
                        f(ext)
                    }
                }
            }
            Stmt::Store(s) => {
                s.indices.iter_mut().for_each(&mut f);
                f(&mut s.value)
            }
            Stmt::If(i) => f(&mut i.cond),
            Stmt::While(w) => f(&mut w.cond),
            Stmt::Evaluate(e) => f(e),
            Stmt::Let(l) => f(&mut l.value),
            Stmt::AssumeBufferDomain { lo, hi, .. } => {
                f(lo);
                f(hi)
            }
        }
    }

    /// Calls `f` on every expression held by this statement and its descendants: a statement's
    /// own expressions first, then its children in order (each top-level expression once; `f`
    /// descends into it itself if it needs to).
    pub fn visit_exprs_mut(&mut self, f: &mut dyn FnMut(&mut Expr)) {
        self.for_each_expr_mut(&mut *f);
        self.for_each_child_mut(|c| c.visit_exprs_mut(f));
    }
}

/// `with T.sp.iteration([I, J, K], "SRS", "name") as [i, j, k]:` (stage I).
#[derive(Clone, Debug, PartialEq)]
pub struct SparseIteration {
    pub name: String,
    pub axes: Vec<IterAxis>,
    /// One per iterator variable (a fused entry counts once per axis).
    pub kinds: Vec<IterKind>,
    /// The iterator variables, bound to coordinates.
    pub vars: Vec<VarId>,
    /// `with T.init():` — runs once per spatial point before its first reduction step.
    pub init: Option<Stmt>,
    pub body: Stmt,
    /// `T.sp.iteration_attr({...})`.
    pub annotations: Attrs,
    pub span: Span,
}

/// The kind of a loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ForKind {
    Serial,
    Parallel,
    Vectorized,
    Unrolled,
    /// `T.thread_binding(..., thread="threadIdx.x")`; the tag is in [`For::thread`].
    ThreadBinding,
}

impl ForKind {
    /// The `T.<name>` used to print a loop of this kind.
    pub fn script_name(self) -> &'static str {
        match self {
            ForKind::Serial => "serial",
            ForKind::Parallel => "parallel",
            ForKind::Vectorized => "vectorized",
            ForKind::Unrolled => "unroll",
            ForKind::ThreadBinding => "thread_binding",
        }
    }
}

/// A loop `for var in [min, min + extent)`.
#[derive(Clone, Debug, PartialEq)]
pub struct For {
    pub var: VarId,
    pub min: Expr,
    pub extent: Expr,
    pub kind: ForKind,
    /// Thread tag for [`ForKind::ThreadBinding`] (`"blockIdx.x"`, `"threadIdx.x"`, ...).
    pub thread: Option<String>,
    pub annotations: Attrs,
    pub body: Stmt,
    pub span: Span,
}

/// One block iterator: `v = T.axis.spatial((min, min + extent), binding)`.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockIter {
    pub var: VarId,
    pub min: Expr,
    pub extent: Expr,
    pub kind: IterKind,
    /// The value the iterator takes, in terms of the enclosing loop variables.
    pub binding: Expr,
}

/// A region of a buffer: one `(min, extent)` per dimension.
#[derive(Clone, Debug, PartialEq)]
pub struct BufferRegion {
    pub buffer: BufferId,
    pub ranges: Vec<(Expr, Expr)>,
}

/// `with T.block("name"):` — a unit of computation with its own iterators (stages II/III).
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    pub name: String,
    pub iters: Vec<BlockIter>,
    /// `T.where(cond)`.
    pub predicate: Option<Expr>,
    pub reads: Vec<BufferRegion>,
    pub writes: Vec<BufferRegion>,
    /// `with T.init():` — runs when every reduction iterator is at its first value.
    pub init: Option<Stmt>,
    /// Buffers allocated in this block (`T.alloc_buffer` in the block header).
    pub alloc_buffers: Vec<BufferId>,
    /// `T.block_attr({...})`.
    pub annotations: Attrs,
    pub body: Stmt,
    pub span: Span,
}

impl Block {
    /// Whether the block is annotated `{"atomic": True}` (or a non-zero integer).
    pub fn is_atomic(&self) -> bool {
        match self.annotations.get(crate::ATOMIC_ATTR) {
            Some(crate::AttrValue::Bool(b)) => *b,
            Some(crate::AttrValue::Int(v)) => *v != 0,
            _ => false,
        }
    }

    /// The value the block's `init` gives the element `buffer[indices]`, when a loop over
    /// `loop_var` starting at `loop_min` runs that init exactly at its first iteration and never
    /// again: every reduction iterator is bound to exactly `loop_var` with `min` equal to
    /// `loop_min`, and the init is the single store `buffer[indices] = v` with `v` reading
    /// neither `buffer` nor any iterator that moves with the loop. Lets a reduction loop start
    /// its accumulator at `v` instead of reading the element (SIMD reductions).
    pub fn init_folded_into(
        &self,
        loop_var: VarId,
        loop_min: &Expr,
        buffer: BufferId,
        indices: &[Expr],
    ) -> Option<&Expr> {
        let init = self.init.as_ref()?;
        let mut moving = vec![loop_var];
        let mut any_reduce = false;
        for it in &self.iters {
            if it.kind == IterKind::Reduce {
                if it.binding != Expr::Var(loop_var) || it.min != *loop_min {
                    return None;
                }
                any_reduce = true;
                moving.push(it.var);
            } else {
                let mut uses = false;
                it.binding
                    .visit(&mut |z| uses |= matches!(z, Expr::Var(v) if *v == loop_var));
                if uses {
                    return None;
                }
            }
        }
        if !any_reduce {
            return None;
        }
        let Stmt::Store(store) = init.single() else {
            return None;
        };
        if store.buffer != buffer || store.indices != indices {
            return None;
        }
        let mut bad = false;
        store.value.visit(&mut |z| match z {
            Expr::Load { buffer: b, .. } if *b == buffer => bad = true,
            Expr::Var(v) if moving.contains(v) => bad = true,
            _ => {}
        });
        (!bad).then_some(&store.value)
    }
}

/// `A[indices] = value`.
#[derive(Clone, Debug, PartialEq)]
pub struct Store {
    pub buffer: BufferId,
    pub indices: Vec<Expr>,
    pub value: Expr,
    pub span: Span,
}

/// `if cond: then_case else: else_case`.
#[derive(Clone, Debug, PartialEq)]
pub struct IfThenElse {
    pub cond: Expr,
    pub then_case: Stmt,
    pub else_case: Option<Stmt>,
    pub span: Span,
}

/// `while cond: body`.
#[derive(Clone, Debug, PartialEq)]
pub struct While {
    pub cond: Expr,
    pub body: Stmt,
    pub span: Span,
}

/// `var: dtype = value` scoped over `body`.
#[derive(Clone, Debug, PartialEq)]
pub struct LetStmt {
    pub var: VarId,
    pub value: Expr,
    pub body: Stmt,
    pub span: Span,
}
