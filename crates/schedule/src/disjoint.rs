//! Whether the iterations of a loop that carries a reduction iterator still touch disjoint
//! elements, so that `parallel` and `bind(loop, "blockIdx.*")` may take it: a fused iterator
//! such as 2:4's group `g` (the row of C is `g // (n / 4)`) is a reduction as a whole, but once
//! split into rows and the groups of a row, its row part writes one row per iteration.
//!
//! The proof: every access to a buffer that a block under the loop writes (through a reduction
//! iterator that moves with the loop) has, in one index, the form `c * v + r` — `v` the loop's
//! variable, `c` a nonzero constant (the index's step when `v` grows by one), `r` free of `v` —
//! with the same index and `c` for all of them, and, for any values of the loops around, any
//! two `r`s (as the loops inside run) differing by a multiple of `|c| * n` (`n` the loop's
//! extent) plus less than `|c|` either way. Two iterations reach that index at values a
//! nonzero multiple of `|c|` but less than `|c| * n` apart in their `v` part: never at the same
//! element. The difference is bounded by comparing each `r` with a copy whose inner loop
//! variables are renamed: what the loops around contribute cancels out, the terms whose
//! coefficient is a multiple of `|c| * n` are dropped (they interleave: `32 * k0 + k1` over
//! `k1 < 32`), what is left is bounded by the loops' ranges (an `r` that does not separate so
//! is not proven, unless it is affine with constant coefficients over loops of constant
//! ranges: then the values the difference takes are enumerated, and the index separates the
//! iterations exactly where none is a nonzero multiple of `c` less than `|c| * n` away, as
//! `2 * i + 9 * j` over `i < 9`, `j < 3`). Indices `e // k, e % k` also stand for `e` (a fused loop's `f // n, f % n`
//! for `f`, which steps with `f`), and any two `p`, `q` with `q` in a constant `[0, k)` for
//! `k * p + q`.
//!
//! A position read from memory, `k + P[q]` (a fiber's element at stage III), is proven apart
//! as a range: `k` stays in `[0, P[q + 1] - P[q])` under the loops' ranges and the predicates
//! around the access, `q` is itself apart or such a position, and `P` never decreases (an
//! axis's `indptr`, validated so, or a parameter the runtime checks, [`Need::Monotone`]); the
//! accesses of one range may differ in offset ([`range_verdicts`], `range_apart`). A position
//! a binary search of the function found (`P[a] + mid[p]`, guarded by `mid[p] >= 0`) also
//! names the coordinate the search compared it with and its fiber `a`, read from the search's
//! own code (`search.rs`): the proofs see the access as the stage-I script wrote it.
//!
//! The same facts answer the converse question for a loop over spatial iterators
//! ([`carried_conflict`]): whether its iterations, which `"S"` promises apart, may still touch
//! an element one of them writes, so that running them in parallel would race; and, with a
//! reduction's own accumulation set aside, whether `reorder` may run them in another order
//! ([`order_conflict`]).

use std::collections::HashMap;

use sparsetir_arith::Analyzer;
use sparsetir_ir::{
    AttrValue, BufferId, DType, DistinctScope, Expr, For, ForKind, Intrinsic, IterKind, PrimFunc,
    Stmt, VarId, WORKSPACE_ATTR,
};

use crate::ir_util;

mod affine;
mod ranges;
mod search;

use affine::disjoint_accesses;
use ranges::{range_apart, range_verdicts, InRange};
use search::{searched, Searches};

/// What the proofs know about the loop over `v`: the statements from the root down to it, the
/// function with a renamed copy of every loop variable inside (`copies`), the analyzer with all
/// those loops' ranges, and the block iterators' (and lets') bindings to resolve an index to
/// loop variables.
struct LoopFacts<'a> {
    path: Vec<&'a Stmt>,
    func: PrimFunc,
    an: Analyzer,
    lp: &'a For,
    map: HashMap<VarId, Expr>,
    copies: HashMap<VarId, Expr>,
    /// Every loop variable inside → one placeholder variable.
    inner: HashMap<VarId, Expr>,
    /// One variable per index position (the first [`SAME_SLOTS`]), unbounded and never
    /// renamed: the value two accesses that meet share at that index.
    same: Vec<Expr>,
    /// A variable no statement reads, marking a hole in an expression.
    hole: Expr,
}

/// How many index positions get a [`LoopFacts::same`] variable.
const SAME_SLOTS: usize = 8;

impl<'a> LoopFacts<'a> {
    fn new(func: &PrimFunc, root: &'a Stmt, v: VarId) -> Option<LoopFacts<'a>> {
        let path = ir_util::path_to(root, &|s| ir_util::is_loop(s, v))?;
        let Some(Stmt::For(lp)) = path.last().copied() else {
            return None;
        };
        // Only the loops inside get renamed copies: the loops around are fixed while the loop
        // runs.
        let mut func = func.clone();
        let mut an = Analyzer::new();
        an.assume_no_overflow(true);
        let mut map: HashMap<VarId, Expr> = HashMap::new();
        let mut copies: HashMap<VarId, Expr> = HashMap::new();
        for s in &path {
            match s {
                Stmt::Block(b) => {
                    for it in &b.iters {
                        map.insert(it.var, it.binding.clone());
                    }
                }
                Stmt::Let(l) => {
                    map.insert(l.var, l.value.clone());
                }
                // The loops around keep one value while the loop runs (the same in both
                // copies), but that value lies in their range: it bounds terms that mix them
                // with inner loops (`(8 * outer + inner) // 16`).
                Stmt::For(f) if f.var != v => an.bind_range(f.var, &f.min, &f.extent),
                _ => {}
            }
        }
        lp.body.visit(&mut |s| match s {
            Stmt::For(f) => {
                an.bind_range(f.var, &f.min, &f.extent);
                let name = format!("{}_copy", func.vars[f.var].name);
                let c = func.add_var(name, func.vars[f.var].dtype);
                an.bind_range(c, &f.min, &f.extent);
                copies.insert(f.var, Expr::Var(c));
            }
            Stmt::Block(b) => {
                for it in &b.iters {
                    map.insert(it.var, it.binding.clone());
                }
            }
            Stmt::Let(l) => {
                map.insert(l.var, l.value.clone());
            }
            _ => {}
        });
        an.bind_range(v, &lp.min, &lp.extent);
        let placeholder = Expr::Var(func.add_var("inner".to_string(), DType::I64));
        let inner = copies.keys().map(|k| (*k, placeholder.clone())).collect();
        let same = (0..SAME_SLOTS)
            .map(|k| Expr::Var(func.add_var(format!("same_{k}"), DType::I64)))
            .collect();
        let hole = Expr::Var(func.add_var("hole".to_string(), DType::I64));
        Some(LoopFacts {
            path,
            func,
            an,
            lp,
            map,
            copies,
            inner,
            same,
            hole,
        })
    }

    /// Whether block `b` has an iterator of `kind` that moves with the loop (its binding,
    /// resolved, reads `v`).
    fn moves(&self, b: &sparsetir_ir::Block, kind: IterKind, v: VarId) -> bool {
        b.iters
            .iter()
            .any(|it| it.kind == kind && ir_util::uses_var(&self.resolve(&it.binding), v))
    }

    /// `e` in terms of loop variables: block iterators bound to outer blocks' iterators are
    /// substituted to a fixpoint (blocks nest only so deep).
    fn resolve(&self, e: &Expr) -> Expr {
        let mut e = e.clone();
        for _ in 0..8 {
            ir_util::subst_expr(&mut e, &self.map);
        }
        e
    }
}

/// See the module documentation. `root` holds the loop over `v`.
pub(crate) fn iterations_disjoint(func: &PrimFunc, root: &Stmt, v: VarId) -> bool {
    let Some(facts) = LoopFacts::new(func, root, v) else {
        return false;
    };
    let lp = facts.lp;
    let resolve = |e: &Expr| facts.resolve(e);
    // The buffers written by blocks whose reduction iterators move with the loop.
    let mut written: Vec<BufferId> = Vec::new();
    lp.body.visit(&mut |s| {
        if let Stmt::Block(b) = s {
            if facts.moves(b, IterKind::Reduce, v) {
                let mut stores = Vec::new();
                collect_stores(s, &mut stores);
                for bf in stores {
                    if !written.contains(&bf) {
                        written.push(bf);
                    }
                }
            }
        }
    });
    if written.is_empty() {
        return false;
    }
    // Every access to those buffers under the loop, resolved.
    let mut accesses: HashMap<BufferId, Vec<Vec<Expr>>> = HashMap::new();
    let mut opaque = false;
    lp.body.visit(&mut |s| {
        if let Stmt::Store(st) = s {
            if written.contains(&st.buffer) {
                accesses
                    .entry(st.buffer)
                    .or_default()
                    .push(st.indices.iter().map(&resolve).collect());
            }
        }
        s.for_each_expr(|e| {
            e.visit(&mut |x| match x {
                Expr::Load { buffer, indices } if written.contains(buffer) => {
                    accesses
                        .entry(*buffer)
                        .or_default()
                        .push(indices.iter().map(&resolve).collect());
                }
                // An atomic update's target is a load too; calls that take a buffer otherwise
                // are not analysed.
                Expr::Call { args, .. }
                    if args.iter().any(|a| reads_any(a, &written))
                        && !matches!(args.first(), Some(Expr::Load { .. })) =>
                {
                    opaque = true;
                }
                _ => {}
            })
        });
    });
    if opaque {
        return false;
    }
    written.iter().all(|b| {
        let list = accesses.get(b).map(Vec::as_slice).unwrap_or(&[]);
        disjoint_accesses(&facts, list, v)
    })
}

/// For a loop whose blocks bind it to spatial iterators only: a buffer that two iterations may
/// both touch, one of them writing it (`Y[i + 1] = X[i] + Y[i]` declared `"S"`), which running
/// the iterations apart would race on; `None` when none is found. An iterator declared `"S"`
/// is trusted where every access of a written buffer under the loop is the same index tuple and
/// that tuple reads memory (each iteration its own element, as a scatter through an index
/// array, a sparse output's `indptr` or a slot an atomic counter handed out is trusted). Any
/// other written buffer needs the module's proof that its accesses never meet, the loops inside
/// included: `Y[i + j]` with `j` inside meets itself, and so does `Y[i // 2]`; a fused loop's
/// `Y[f // n, f % n]` does not.
///
/// Buffers allocated under the loop are private to an iteration; with `scoped_private` (a GPU
/// thread binding) so is any buffer outside global memory (a block's own shared memory, a
/// thread's registers; the writer puts barriers between threads' shared accesses), but not a
/// function-level allocation outside shared memory, which the GPU keeps in global memory. Buffers
/// updated atomically are not checked. A workspace that a block around the loop names
/// (SpGEMM's row accumulator and bitmaps, `WORKSPACE_ATTR`) and the loop writes is a conflict:
/// its elements are shared by design (bit words, counters).
pub(crate) fn carried_conflict(
    func: &PrimFunc,
    root: &Stmt,
    v: VarId,
    scoped_private: bool,
    assumed: &mut Vec<Need>,
) -> Option<Conflict> {
    conflict(func, root, v, scoped_private, false, assumed)
}

/// For `reorder`: a buffer that two iterations of the loop over `v` may both touch, one of them
/// writing it (the loops around fixed, the loops inside free), so that running the iterations
/// in another order could change what is read or left. A reduction's own accumulation is set
/// aside: where a block whose reduction iterator moves with the loop is the only one to touch
/// its output, always at one index tuple that the loop does not move, and combines into it by
/// `+`, `*`, `min`, `max` or a logical or bitwise operation, its iterations update one element
/// in any order (the init runs where every reduction iterator is at its minimum,
/// whichever loop comes first). Every other buffer is checked as [`carried_conflict`] checks
/// it, whatever its scope.
pub(crate) fn order_conflict(
    func: &PrimFunc,
    root: &Stmt,
    v: VarId,
    assumed: &mut Vec<Need>,
) -> Option<Conflict> {
    conflict(func, root, v, false, true, assumed)
}

/// Where running the nest of loops `old` (outer first) of `before` in the order `new`, as in
/// `after`, may change the order of two iterations that touch one element, one of them writing
/// it: a pair of loops `a` outside `b` that trade places, with what `a`'s iterations touch. The
/// order of two iterations changes only where the first loop they differ in is another: `a`
/// and `b` trading places, both differing. So for each such pair it is enough that the
/// iterations of `a` in `before` (the loops around fixed, those inside free) or those of `b`
/// in `after` never meet ([`order_conflict`]).
pub(crate) fn reorder_conflict(
    before: &PrimFunc,
    after: &PrimFunc,
    old: &[VarId],
    new: &[VarId],
    assumed: &mut Vec<Need>,
) -> Option<(VarId, VarId, Conflict)> {
    let pos = |order: &[VarId], v: VarId| order.iter().position(|w| *w == v);
    let mut outer_cache: HashMap<VarId, Option<Conflict>> = HashMap::new();
    let mut inner_cache: HashMap<VarId, bool> = HashMap::new();
    for (i, &a) in old.iter().enumerate() {
        for &b in &old[i + 1..] {
            if pos(new, b) > pos(new, a) {
                continue;
            }
            let carried = outer_cache
                .entry(a)
                .or_insert_with(|| order_conflict(before, &before.body, a, assumed));
            if carried.is_none() {
                continue;
            }
            let apart = *inner_cache
                .entry(b)
                .or_insert_with(|| order_conflict(after, &after.body, b, assumed).is_none());
            if !apart {
                return outer_cache.remove(&a).flatten().map(|c| (a, b, c));
            }
        }
    }
    None
}

/// A stage-I iteration as the loop nest the proofs read: a loop per iterator, the iterator
/// itself, over its axis's coordinates `[0, length)` (for a sparse axis, more than it stores:
/// the proofs stay sound), outer first in `order` (positions in `it.vars`); inside, a block
/// whose iterators carry the iteration's kinds, bound to those loops, holding its init and
/// body. The iterations inside become nests too. Two instances of an iteration touch one
/// element of a buffer exactly where their coordinates name it.
pub(crate) fn iteration_as_loops(
    func: &mut PrimFunc,
    it: &sparsetir_ir::SparseIteration,
    order: &[usize],
) -> Stmt {
    fn convert(func: &mut PrimFunc, s: &mut Stmt) {
        if let Stmt::SparseIteration(inner) = s {
            let order: Vec<usize> = (0..inner.vars.len()).collect();
            let inner = (**inner).clone();
            *s = iteration_as_loops(func, &inner, &order);
            return;
        }
        for c in ir_util::children_mut(s) {
            convert(func, c);
        }
    }
    let flat: Vec<sparsetir_ir::AxisId> = it.axes.iter().flat_map(|e| e.axes()).collect();
    let lengths: Vec<Expr> = (0..it.vars.len())
        .map(|p| {
            flat.get(p)
                .map_or_else(|| Expr::int(0), |a| func.axes[*a].length.clone())
        })
        .collect();
    let mut iters = Vec::new();
    for (p, (&v, &kind)) in it.vars.iter().zip(&it.kinds).enumerate() {
        let name = format!("v_{}", func.vars[v].name);
        let extent = lengths[p].clone();
        let var = func.add_var(name, func.vars[v].dtype);
        iters.push(sparsetir_ir::BlockIter {
            var,
            min: Expr::int(0),
            extent,
            kind,
            binding: Expr::Var(v),
        });
    }
    let mut body = it.body.clone();
    convert(func, &mut body);
    let init = it.init.clone().map(|mut i| {
        convert(func, &mut i);
        i
    });
    let mut s = Stmt::Block(Box::new(sparsetir_ir::Block {
        name: it.name.clone(),
        iters,
        predicate: None,
        reads: Vec::new(),
        writes: Vec::new(),
        init,
        alloc_buffers: Vec::new(),
        annotations: Default::default(),
        body,
        span: it.span,
    }));
    for &p in order.iter().rev() {
        s = Stmt::For(Box::new(For {
            var: it.vars[p],
            min: Expr::int(0),
            extent: lengths[p].clone(),
            kind: sparsetir_ir::ForKind::Serial,
            thread: None,
            annotations: Default::default(),
            body: s,
            span: it.span,
        }));
    }
    s
}

fn conflict(
    func: &PrimFunc,
    root: &Stmt,
    v: VarId,
    scoped_private: bool,
    reductions_commute: bool,
    assumed: &mut Vec<Need>,
) -> Option<Conflict> {
    let facts = LoopFacts::new(func, root, v)?;
    let lp = facts.lp;
    // One iteration never meets another.
    if facts
        .an
        .const_bounds(&facts.func, &lp.extent)
        .is_some_and(|(_, hi)| hi <= 1)
    {
        return None;
    }
    let accumulators = if reductions_commute {
        accumulators(&facts, v)
    } else {
        Vec::new()
    };
    let mut private: Vec<BufferId> = Vec::new();
    lp.body.visit(&mut |s| match s {
        Stmt::Block(b) => private.extend(b.alloc_buffers.iter().copied()),
        Stmt::Allocate(b) => private.push(*b),
        _ => {}
    });
    // The private buffers an atomic addition fills: slots handed out (see `owned_by`).
    let mut slots: Vec<BufferId> = Vec::new();
    lp.body.visit(&mut |s| {
        if let Stmt::Store(st) = s {
            let mut atomic = false;
            st.value.visit(&mut |x| {
                atomic |= matches!(
                    x,
                    Expr::Call {
                        op: Intrinsic::AtomicAdd,
                        ..
                    }
                );
            });
            if atomic && private.contains(&st.buffer) && !slots.contains(&st.buffer) {
                slots.push(st.buffer);
            }
        }
    });
    let mut workspaces: Vec<BufferId> = Vec::new();
    for s in &facts.path {
        let Stmt::Block(b) = s else { continue };
        if let Some(AttrValue::List(names)) = b.annotations.get(WORKSPACE_ATTR) {
            for n in names {
                if let AttrValue::Str(n) = n {
                    workspaces.extend(func.buffer_by_name(n));
                }
            }
        }
    }
    // Stores (inits included) outside atomic blocks, and every load, per buffer.
    let mut stores: HashMap<BufferId, Vec<Vec<Expr>>> = HashMap::new();
    let mut atomic: Vec<BufferId> = Vec::new();
    walk_stores(&lp.body, false, &mut |st, is_atomic| {
        if is_atomic {
            atomic.push(st.buffer);
        } else {
            stores
                .entry(st.buffer)
                .or_default()
                .push(st.indices.clone());
        }
    });
    // A buffer the function itself allocates outside shared memory ("local" included) lives
    // in global memory on the GPU (the CUDA writer's device temporaries), shared by every
    // thread; a function-level shared buffer is each thread block's own.
    let in_global = |b: BufferId| {
        let scope = func.buffers[b].scope.as_str();
        scope == "global"
            || (func.buffer_decls.contains(&b) && !matches!(scope, "shared" | "shared.dyn"))
    };
    let checked = |b: BufferId| {
        (in_global(b) || !scoped_private)
            && !private.contains(&b)
            && !atomic.contains(&b)
            && !accumulators.contains(&b)
    };
    // The accesses of the checked buffers: their stores, then their loads.
    let mut accesses = stores;
    accesses.retain(|b, _| checked(*b));
    if let Some(&b) = accesses.keys().filter(|b| workspaces.contains(b)).min() {
        return Some(Conflict::new(func, b, &accesses[&b]));
    }
    let checked_buffers: Vec<BufferId> = accesses.keys().copied().collect();
    let walked = range_verdicts(&facts, v, &private, &checked_buffers);
    let ranges = walked.ranges;
    let mut searches = Searches::new();
    let mut opaque: Vec<BufferId> = Vec::new();
    lp.body.visit(&mut |s| {
        s.for_each_expr(|e| {
            e.visit(&mut |x| match x {
                Expr::Load { buffer, indices } => {
                    if let Some(list) = accesses.get_mut(buffer) {
                        list.push(indices.clone());
                    }
                }
                // A call that takes a written buffer (an address, an atomic's target) is
                // trusted: the writers give it its own semantics.
                Expr::Call { args, .. } => {
                    for a in args {
                        if let Expr::Load { buffer, .. } = a {
                            opaque.push(*buffer);
                        }
                    }
                }
                _ => {}
            })
        });
    });
    accesses
        .into_iter()
        .filter(|(b, _)| !opaque.contains(b))
        .filter_map(|(b, written)| {
            let mut resolved: Vec<Vec<Expr>> = written
                .iter()
                .map(|idx| idx.iter().map(|e| facts.resolve(e)).collect())
                .collect();
            // Positions a search found also name the coordinates they stand for.
            if let Some(found) = searched(&facts, &mut searches, b, &resolved, &walked.accesses) {
                for (idx, f) in resolved.iter_mut().zip(found) {
                    idx.extend(f.extra);
                    for n in f.needs {
                        if !assumed.contains(&n) {
                            assumed.push(n);
                        }
                    }
                }
            }
            let list: Vec<Vec<Expr>> = resolved
                .iter()
                .map(|idx| {
                    idx.iter()
                        .map(|e| facts.an.simplify(&facts.func, e))
                        .collect()
                })
                .collect();
            // One tuple that reads memory (a slot an atomic counter handed out, an index
            // array) is trusted: the same function of `v` in every access, whatever the loops
            // inside (their variables all read as one placeholder: an init's loop and the
            // update's loop differ in name only). Any other must be proven apart.
            let shape = |idx: &Vec<Expr>| -> Vec<Expr> {
                idx.iter()
                    .map(|e| {
                        let mut e = e.clone();
                        ir_util::subst_expr(&mut e, &facts.inner);
                        facts.an.simplify(&facts.func, &e)
                    })
                    .collect()
            };
            // (A tuple without a load keeps none simplified: only one with a load is shaped.)
            // Each access must also name its element by the loop's own position: `v` in an
            // index outside loads, or in the indices of a load the index reads directly
            // (`C_indptr[i] + k`, `perm[i]`). A coordinate looked up in another fiber each
            // iteration (`Y[I_indices[i + I_indptr[r]], f]` over `r`: relations share rows) is
            // no element of its own, so not trusted.
            // (Read before simplification: `p - I_indptr[mid[p]] + I_indptr[mid[p]]`, a fused
            // loop's position within its row plus the row's start, must not become `p`.)
            // An access trusted through an index array asks that array's values to be
            // distinct ([`Owned::If`]); one owned by its form asks nothing.
            let mut needs: Vec<Need> = Vec::new();
            let trusted = list[0].iter().any(reads_memory)
                && affine::with_pairs(&facts, &resolved).iter().all(|idx| {
                    let owned: Vec<Owned> = idx
                        .iter()
                        .map(|e| owned_by(&facts, e, v, &private, &slots, &ranges))
                        .collect();
                    if owned.iter().any(|o| matches!(o, Owned::Yes)) {
                        return true;
                    }
                    match owned.into_iter().find_map(|o| match o {
                        Owned::If(d) => Some(d),
                        _ => None,
                    }) {
                        Some(d) => {
                            needs.extend(d);
                            true
                        }
                        None => false,
                    }
                })
                && {
                    let first = shape(&list[0]);
                    first.iter().any(reads_memory)
                        && list[1..].iter().all(|idx| shape(idx) == first)
                };
            if trusted && needs.is_empty() {
                return None;
            }
            if disjoint_accesses(&facts, &list, v) {
                return None;
            }
            if let Some(n) = range_apart(&facts, &written, v, &ranges) {
                assumed.extend(n);
                return None;
            }
            // Asked even where the accesses are not trusted as a whole (`data_requirements`
            // on a function whose primitives are done).
            assumed.extend(needs);
            if trusted {
                return None;
            }
            Some(Conflict::new(func, b, &written))
        })
        .min_by_key(|c| c.buffer)
}

/// What [`carried_conflict`] found: the buffer, and its accesses under the loop as written
/// (distinct, at most four), for the error message.
pub(crate) struct Conflict {
    pub buffer: BufferId,
    pub accesses: Vec<String>,
}

impl Conflict {
    fn new(func: &PrimFunc, buffer: BufferId, list: &[Vec<Expr>]) -> Conflict {
        let name = &func.buffers[buffer].name;
        let mut accesses: Vec<String> = Vec::new();
        for idx in list {
            let text: Vec<String> = idx
                .iter()
                .map(|e| sparsetir_ir::printer::print_expr(func, e))
                .collect();
            let text = format!("{name}[{}]", text.join(", "));
            if !accesses.contains(&text) && accesses.len() < 4 {
                accesses.push(text);
            }
        }
        Conflict { buffer, accesses }
    }
}

/// The outputs of the blocks under the loop whose reduction iterators move with it (and no
/// spatial one does) that only such a block touches, at one index tuple free of the loop's
/// variable, and updates by an operation whose order does not matter ([`updates_commute`]):
/// their accesses under the loop differ only in the reduction's order.
fn accumulators(facts: &LoopFacts, v: VarId) -> Vec<BufferId> {
    // Every access under the loop, resolved, per buffer.
    fn accesses(s: &Stmt, facts: &LoopFacts, out: &mut HashMap<BufferId, Vec<Vec<Expr>>>) {
        let resolve = |idx: &[Expr]| {
            idx.iter()
                .map(|e| facts.an.simplify(&facts.func, &facts.resolve(e)))
                .collect::<Vec<_>>()
        };
        s.visit(&mut |x| {
            if let Stmt::Store(st) = x {
                out.entry(st.buffer).or_default().push(resolve(&st.indices));
            }
            x.for_each_expr(|e| {
                e.visit(&mut |y| {
                    if let Expr::Load { buffer, indices } = y {
                        out.entry(*buffer).or_default().push(resolve(indices));
                    }
                })
            });
        });
    }
    let mut all = HashMap::new();
    accesses(&facts.lp.body, facts, &mut all);
    let mut out = Vec::new();
    facts.lp.body.visit(&mut |s| {
        let Stmt::Block(b) = s else { return };
        if !facts.moves(b, IterKind::Reduce, v) || facts.moves(b, IterKind::Spatial, v) {
            return;
        }
        let mut mine = HashMap::new();
        accesses(s, facts, &mut mine);
        let mut stored = Vec::new();
        collect_stores(s, &mut stored);
        for c in stored {
            let (Some(list), Some(every)) = (mine.get(&c), all.get(&c)) else {
                continue;
            };
            if !updates_commute(&b.body, c, COMMUTING) {
                continue;
            }
            let one = list.iter().all(|idx| idx == &list[0]);
            let free = !list[0].iter().any(|e| ir_util::uses_var(e, v));
            if list.len() == every.len() && one && free && !out.contains(&c) {
                out.push(c);
            }
        }
    });
    out
}

/// The operations whose order does not matter (up to rounding).
const COMMUTING: &[sparsetir_ir::BinOp] = {
    use sparsetir_ir::BinOp::*;
    &[Add, Mul, Min, Max, And, Or, BitAnd, BitOr, BitXor]
};

/// For `bind(loop, "threadIdx.x")` over `v`: a block under the loop (not atomic) whose
/// reduction iterator moves with it, and why threads cannot run it: an update that is not
/// `Y[idx] = Y[idx] op e` with `op` a sum, `min` or `max` (what threads combine by shuffles)
/// and `e` not reading `Y`; or an element that moves with the loop (a loop fusing rows and
/// their reduction), which is no reduction across threads, while two iterations may meet.
pub(crate) fn uncombinable_reduction(
    func: &PrimFunc,
    root: &Stmt,
    v: VarId,
) -> Option<(String, &'static str)> {
    use sparsetir_ir::BinOp::{Add, Max, Min};
    let facts = LoopFacts::new(func, root, v)?;
    let mut found = None;
    let mut disjoint: Option<bool> = None;
    facts.lp.body.visit(&mut |s| {
        let Stmt::Block(b) = s else { return };
        if found.is_some() || b.is_atomic() || !facts.moves(b, IterKind::Reduce, v) {
            return;
        }
        let mut stored = Vec::new();
        collect_stores(&b.body, &mut stored);
        if stored
            .iter()
            .any(|c| !updates_commute(&b.body, *c, &[Add, Max, Min]))
        {
            found = Some((b.name.clone(), "its update is not `Y[...] = Y[...] op e` with `op` a sum, `min` or `max` (and `e` not reading `Y`)"));
            return;
        }
        let mut moves = false;
        b.body.visit(&mut |x| {
            if let Stmt::Store(st) = x {
                moves |= st
                    .indices
                    .iter()
                    .any(|e| ir_util::uses_var(&facts.resolve(e), v));
            }
        });
        if moves && !*disjoint.get_or_insert_with(|| iterations_disjoint(func, root, v)) {
            found = Some((b.name.clone(), "the element it updates moves with the loop, whose iterations may still update one element together"));
        }
    });
    found
}

/// Whether every store of `c` in `body` (a reduction block's body, its init aside) combines
/// the element it stores with a value that does not read `c`, by one of `ops`: `C[i] = C[i] +
/// A[i, k]`, not `C[i] = C[i] * 2 + A[i, k]`.
fn updates_commute(body: &Stmt, c: BufferId, ops: &[sparsetir_ir::BinOp]) -> bool {
    let reads_c = |e: &Expr| reads_any(e, &[c]);
    let mut ok = true;
    body.visit(&mut |s| {
        let Stmt::Store(st) = s else { return };
        if st.buffer != c {
            return;
        }
        let own = |e: &Expr| matches!(e, Expr::Load { buffer, indices } if *buffer == c && *indices == st.indices);
        ok &= match &st.value {
            Expr::Binary(op, l, r) if ops.contains(op) => {
                (own(l) && !reads_c(r)) || (own(r) && !reads_c(l))
            }
            _ => false,
        };
    });
    ok
}

/// Whether an index gives each iteration of the loop an element of its own, and on what.
enum Owned {
    No,
    /// By the index's form (positions, a private slot).
    Yes,
    /// If the index arrays it reads hold what the loop trusts them to.
    If(Vec<Need>),
}

/// What trusting a store through an index array asks of the data, checked by the runtime
/// before every launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Need {
    /// The values of parameter `param` distinct in each fiber or over the whole array
    /// (`DISTINCT_ATTR`).
    Distinct { param: String, scope: DistinctScope },
    /// The values of parameter `param` never decreasing: its consecutive values bound ranges of
    /// positions that never overlap (`MONOTONE_ATTR`).
    Monotone { param: String },
}

/// What the loops of a compiled function trust of its data: see [`data_requirements`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DataRequirements {
    /// Parameters whose values must be distinct, and where (`DISTINCT_ATTR`).
    pub distinct: Vec<(String, DistinctScope)>,
    /// Parameters whose values must never decrease (`MONOTONE_ATTR`), in the order first met.
    pub monotone: Vec<String>,
    /// The loops whose iterations the final function no longer proves apart, each as
    /// `loop \`i\`: \`C[...]\``: their primitives took them on the function as it was then,
    /// and a later primitive changed how the accesses read. Empty for every catalog schedule
    /// and the automatic GPU schedule (`runtime/tests/suite/distinct.rs` holds them to it).
    pub unproven: Vec<String>,
}

/// What the parallel, vectorized and thread-bound loops of `func` over spatial iterators
/// trust of the index arrays they store through (see `owned_by`): each parameter whose values
/// must be distinct, and where, and each whose values bound ranges of positions. The runtime
/// checks it before every launch of the compiled function; the schedule checked everything
/// else when it set the loops' kinds.
pub fn data_requirements(func: &PrimFunc) -> DataRequirements {
    let mut loops: Vec<(VarId, bool)> = Vec::new();
    func.body.visit(&mut |s| {
        let Stmt::For(f) = s else { return };
        let threads = f.kind == ForKind::ThreadBinding;
        if !(threads || matches!(f.kind, ForKind::Parallel | ForKind::Vectorized)) {
            return;
        }
        let (mut reduce_block, mut loose) = (None, false);
        crate::primitives::loops::check_body(&f.body, f.var, false, &mut reduce_block, &mut loose);
        if reduce_block.is_none() && !loose {
            loops.push((f.var, threads));
        }
    });
    let mut out = DataRequirements::default();
    for (v, threads) in loops {
        let mut assumed = Vec::new();
        // A conflict was the schedule's to refuse when it set the loop's kind (a later
        // primitive inside may have changed how the accesses read: what trusting them asks is
        // recorded all the same, and the loop reported).
        if let Some(c) = carried_conflict(func, &func.body, v, threads, &mut assumed) {
            out.unproven.push(format!(
                "loop `{}`: `{}`",
                func.vars[v].name,
                c.accesses.join("`, `")
            ));
        }
        for d in assumed {
            match d {
                Need::Distinct { param, scope } => {
                    match out.distinct.iter_mut().find(|(p, _)| *p == param) {
                        Some((_, s)) => *s = (*s).max(scope),
                        None => out.distinct.push((param, scope)),
                    }
                }
                Need::Monotone { param } => {
                    if !out.monotone.contains(&param) {
                        out.monotone.push(param);
                    }
                }
            }
        }
    }
    out
}

/// Whether index `e` gives each iteration of the loop over `v` an element of its own.
///
/// - A load of a `slot`: a buffer private to the iteration that an atomic addition fills (the
///   place a counter handed out, kept in a local), is the iteration's own. A private buffer
///   filled otherwise (a co-iteration's position in a fiber, `p_J[0] + 1`) is no slot: its
///   value may be another iteration's too. An index offsetting a fiber by it is owned only
///   where the fiber's start moves with the loop (`J_indptr[vi] + p_J[0]` in the rows `vi`,
///   not in a loop inside the row).
/// - One load (a coordinate looked up in an `indices` array, a scatter through `perm`, a
///   table `R[k, l]`) is owned if the array is a parameter, two iterations never read one
///   position of it (proven on its indices as for any access), and its values are distinct
///   where they are read, which the runtime checks: inside the fiber when the iterations
///   stay in one (the indices before the last, and the loads nested in the last, do not
///   move: `I_indices[i + I_indptr[r]]` or, at stage II, `I_indices[r, i]` and `R[k, l]` in
///   `i` and `l`), over the whole array otherwise (`perm[i]`, `R[k, l]` in `k`; not an axis's
///   coordinates, which repeat across fibers, where the function still has its axes). An array the
///   function computes itself is not trusted, nor a position two iterations share
///   (`perm[i // 2]`), nor a coordinate read in another fiber each iteration
///   (`I_indices[i + I_indptr[r]]` in `r`: relations share rows, so the coordinates of two
///   fibers may meet).
/// - An index that adds a load moving with `v` to an offset (positions: `C_indptr[i] + k`,
///   `k + IK_indptr[i + I_indptr[b]]`) is owned where [`range_verdicts`] proved it: the load
///   starts a range of its own (`P[q]` with `q` apart or itself such a position, `P` a
///   parameter whose values never decrease: an axis's `indptr`, validated so, or a parameter
///   the runtime checks) and the offset stays inside it (`0 <= k < P[q + 1] - P[q]`, by the
///   loops' ranges and the conditions around the access). An offset into an array the
///   function computes itself (`k + W[i]`) is not; a position a binary search found
///   (`JO_indptr[i // 2] + mid[p]`) is read back as the coordinate and fiber it stands for
///   (`search.rs`), which the access then names as extra indices.
/// - Any other index must itself be proven apart (`i + P[0]`, whose load is the same in
///   every iteration, is; `i // 2 + P[0]` is not).
fn owned_by(
    facts: &LoopFacts,
    e: &Expr,
    v: VarId,
    private: &[BufferId],
    slots: &[BufferId],
    ranges: &[(Expr, Option<InRange>)],
) -> Owned {
    if reads_any(e, slots) {
        return Owned::Yes;
    }
    if reads_any(e, private) {
        // A place kept in a local (a co-iteration's position in its fiber, which the loop's
        // condition keeps inside it) offsets a fiber whose start moves with the loop, or the
        // element is not the iteration's own.
        return if moves_load(e, v) {
            Owned::Yes
        } else {
            Owned::No
        };
    }
    let func = &facts.func;
    let apart = |idx: &[Expr]| {
        let idx: Vec<Expr> = idx.iter().map(|x| facts.an.simplify(func, x)).collect();
        disjoint_accesses(facts, &[idx], v)
    };
    let mut core = e;
    while let Expr::Cast(_, inner) = core {
        core = inner;
    }
    let nested_move = |x: &Expr| moves_load(x, v);
    match core {
        Expr::Load { buffer, indices } => {
            let Some(param) = func.buffers[*buffer].data_param() else {
                return Owned::No;
            };
            let Some((last, parent)) = indices.split_last() else {
                return Owned::No;
            };
            // A position whose fiber start moves (`I_indices[i + I_indptr[r]]` in `r`) reads
            // coordinates of several fibers, which meet.
            if nested_move(last) || !apart(indices) {
                return Owned::No;
            }
            let in_fiber = !parent.iter().any(|x| ir_util::uses_var(x, v))
                && (!parent.is_empty() || reads_memory(last));
            // An axis's coordinates repeat across its fibers by design (rows share columns):
            // not asked distinct over the whole array where the function still says which
            // arrays are coordinates (stages I and II; stage III has dropped its axes, and
            // leaves it to the runtime's check).
            if !in_fiber && func.axes.iter().any(|(_, a)| a.indices == Some(param)) {
                return Owned::No;
            }
            Owned::If(vec![Need::Distinct {
                param: func.vars[param].name.clone(),
                scope: if in_fiber {
                    DistinctScope::Fiber
                } else {
                    DistinctScope::All
                },
            }])
        }
        _ if !ir_util::uses_var(e, v) => Owned::No,
        _ if nested_move(e) => match ranges.iter().find(|(x, _)| x == e) {
            Some((_, Some(r))) if r.needs.is_empty() => Owned::Yes,
            Some((_, Some(r))) => Owned::If(r.needs.clone()),
            _ if apart(std::slice::from_ref(e)) => Owned::Yes,
            _ => Owned::No,
        },
        _ if apart(std::slice::from_ref(e)) => Owned::Yes,
        _ => {
            // An offset into one range whose start is read from memory, the start's indices
            // free to move with the loops inside (`vk + IK_indptr[vi + I_indptr[b]]`, rows `vi`
            // inside, `vk` over the threads): apart where the pair is.
            let loads = outer_loads(e);
            let [Expr::Load { indices, .. }] = loads.as_slice() else {
                return Owned::No;
            };
            let mut offset = e.clone();
            loads_to_zero(&mut offset);
            let mut pair = vec![offset];
            pair.extend(indices.iter().cloned());
            if apart(&pair) {
                Owned::Yes
            } else {
                Owned::No
            }
        }
    }
}

/// `e` with every occurrence of `target` replaced by `with`, and whether there was one.
fn replaced(e: &Expr, target: &Expr, with: &Expr) -> (Expr, bool) {
    if e == target {
        return (with.clone(), true);
    }
    let mut e = e.clone();
    let mut hit = false;
    e.for_each_child_mut(|c| {
        let (x, h) = replaced(c, target, with);
        *c = x;
        hit |= h;
    });
    (e, hit)
}

/// The loads of `e` not nested in another load's indices.
fn outer_loads(e: &Expr) -> Vec<Expr> {
    fn go(e: &Expr, out: &mut Vec<Expr>) {
        if let Expr::Load { .. } = e {
            out.push(e.clone());
            return;
        }
        e.for_each_child(|c| go(c, out));
    }
    let mut out = Vec::new();
    go(e, &mut out);
    out
}

/// Whether `e` holds a load whose indices move with `v`.
fn moves_load(e: &Expr, v: VarId) -> bool {
    let mut hit = false;
    e.visit(&mut |y| {
        if let Expr::Load { indices, .. } = y {
            hit |= indices.iter().any(|i| ir_util::uses_var(i, v));
        }
    });
    hit
}

fn loads_to_zero(e: &mut Expr) {
    if let Expr::Load { .. } = e {
        *e = Expr::int(0);
        return;
    }
    e.for_each_child_mut(loads_to_zero);
}

fn reads_memory(e: &Expr) -> bool {
    let mut hit = false;
    e.visit(&mut |x| hit |= matches!(x, Expr::Load { .. }));
    hit
}

/// Calls `f` on every store under `s`, telling whether an atomic block holds it.
fn walk_stores(s: &Stmt, atomic: bool, f: &mut dyn FnMut(&sparsetir_ir::Store, bool)) {
    match s {
        Stmt::Store(st) => f(st, atomic),
        Stmt::Block(b) => {
            let atomic = atomic || b.is_atomic();
            if let Some(i) = &b.init {
                walk_stores(i, atomic, f);
            }
            walk_stores(&b.body, atomic, f);
        }
        _ => {
            let mut ch = Vec::new();
            ir_util::push_children(s, &mut ch);
            for c in ch {
                walk_stores(c, atomic, f);
            }
        }
    }
}

/// The stores of `s` (its init's too).
fn collect_stores(s: &Stmt, out: &mut Vec<BufferId>) {
    s.visit(&mut |x| {
        if let Stmt::Store(st) = x {
            out.push(st.buffer);
        }
    });
}

/// Whether `e` loads any of `buffers`.
fn reads_any(e: &Expr, buffers: &[BufferId]) -> bool {
    let mut hit = false;
    e.visit(&mut |x| {
        if let Expr::Load { buffer, .. } = x {
            hit |= buffers.contains(buffer);
        }
    });
    hit
}
