//! A constant fill absorbed by the register accumulation right after it: lowering splits a
//! reduction's init into its own nest, so the default SpMM schedule stores each row's zeros to
//! `C`, loads them back into the registers its accumulation keeps, and stores the sums. Where
//! every thread fills exactly the elements it then accumulates, the registers start with the
//! filled value and the fill is not written (one store of each output element instead of two).
//!
//! The fill nest is loops (thread-bound `threadIdx.*` loops, and at most one serial or unrolled
//! loop from 0 of constant extent) down to one block without init, allocations or predicate,
//! storing into one buffer a value that reads no memory and does not move with the nest. The
//! statement after it is the same thread loops (tags, starts and extents alike) around a loop
//! [`Writer::accumulation`] keeps in registers: not atomic, no init, no predicate, into the
//! same buffer, its lane loop (if any) of the fill's serial loop's extent, and the fill's
//! element — its thread loops' variables renamed to the accumulation's, its serial loop's to the
//! lane's — the accumulation's element. Each thread then reads only what it filled itself, and
//! writes every element back unconditionally (after the loop, which may run no step), so memory
//! ends as it did with the fill.
//!
//! A cross-thread reduction (a `threadIdx.x` loop the warp shuffles combine) absorbs a fill
//! outside any `threadIdx.x` loop (stored by thread 0, `Writer::redundant_guard`) of the element
//! it combines into, where `blockDim.x` is the reduction's lanes (so thread 0 alone combines)
//! and no condition guards the combination ([`Writer::combines_once`]): it stores
//! `value op total`. Its block's own constant init is folded the same way
//! ([`constant_init`]): the combining thread wrote it just before.

use super::reduce::Accumulation;
use super::*;

/// A fill nest (see the module documentation).
struct Fill<'a> {
    /// The thread loops: tag and loop.
    threads: Vec<(&'a str, &'a For)>,
    /// The serial loop, if any: its variable and extent.
    unit: Option<(VarId, i64)>,
    store: &'a Store,
    block: &'a Block,
}

/// Whether `e` reads memory.
fn loads_memory(e: &Expr) -> bool {
    let mut hit = false;
    e.visit(&mut |x| hit |= matches!(x, Expr::Load { .. }));
    hit
}

/// A loop bound to a thread index of the block: its tag.
fn thread_tag(f: &For) -> Option<&str> {
    let tag = f.thread.as_deref()?;
    (f.kind == ForKind::ThreadBinding && BLOCK_TAGS.contains(&tag)).then_some(tag)
}

/// `s` as a fill nest.
fn fill_nest(s: &Stmt) -> Option<Fill<'_>> {
    let mut threads = Vec::new();
    let mut unit = None;
    let mut vars = Vec::new();
    let mut s = s;
    let b = loop {
        match s {
            Stmt::For(f) => {
                if let Some(tag) = thread_tag(f) {
                    if threads.iter().any(|(t, _)| *t == tag) {
                        return None;
                    }
                    threads.push((tag, &**f));
                } else {
                    let plain = matches!(f.kind, ForKind::Serial | ForKind::Unrolled)
                        && f.annotations.0.iter().all(|(k, _)| k == UNROLL_FACTOR_ATTR);
                    let n = const_int(&f.extent).filter(|n| *n > 0);
                    if !plain || unit.is_some() || const_int(&f.min) != Some(0) || n.is_none() {
                        return None;
                    }
                    unit = n.map(|n| (f.var, n));
                }
                vars.push(f.var);
                s = f.body.single();
            }
            Stmt::Block(b) => break b,
            _ => return None,
        }
    };
    if b.init.is_some() || !b.alloc_buffers.is_empty() || b.predicate.is_some() {
        return None;
    }
    let Stmt::Store(store) = b.body.single() else {
        return None;
    };
    vars.extend(b.iters.iter().map(|it| it.var));
    if loads_memory(&store.value) || mentions(&store.value, &vars) {
        return None;
    }
    Some(Fill {
        threads,
        unit,
        store,
        block: b,
    })
}

/// The value the init of the reduction's block stores, where that is a constant (no memory
/// read, no block iterator) into the reduced element: a cross-thread reduction's combining
/// thread, which writes the init just before combining, starts from that value instead.
pub(super) fn constant_init(acc: &Accumulation<'_>) -> Option<Expr> {
    let init = acc.block.init.as_ref()?;
    let Stmt::Store(st) = init.single() else {
        return None;
    };
    let iters: Vec<VarId> = acc.block.iters.iter().map(|it| it.var).collect();
    let same = st.buffer == acc.store.buffer && st.indices == acc.store.indices;
    (same && !loads_memory(&st.value) && !mentions(&st.value, &iters)).then(|| st.value.clone())
}

/// Whether `fill` stores the element `acc` reduces into, its variables `renamed` to the
/// accumulation's (and into the same buffer).
fn fills_element(fill: &Fill<'_>, renamed: &HashMap<VarId, Expr>, acc: &Accumulation<'_>) -> bool {
    let at_fill = bindings(fill.block);
    acc.store.buffer == fill.store.buffer
        && fill.store.indices.len() == acc.outer_indices.len()
        && fill
            .store
            .indices
            .iter()
            .zip(&acc.outer_indices)
            .all(|(i, want)| subst(&subst(i, &at_fill), renamed).same_ignoring_int_type(want))
}

impl Writer<'_> {
    /// Whether the fill `st` is absorbed by `next`, the statement after it (see the module
    /// documentation). If so, the fill is not to be written, and the accumulation's loop
    /// starts its registers with the filled value ([`Self::take_fill_start`]).
    pub(crate) fn fill_absorbed(&mut self, st: &Stmt, next: Option<&Stmt>) -> Res<bool> {
        let (Some(fill), Some(next)) = (fill_nest(st), next) else {
            return Ok(false);
        };
        if self.simd_acc.is_some() || self.fill_start.is_some() {
            return Ok(false);
        }
        // The same thread loops, then the accumulation's loop.
        let mut renamed: HashMap<VarId, Expr> = HashMap::new();
        let mut s = next;
        let mut tags = Vec::new();
        let f = loop {
            let Stmt::For(f) = s else {
                return Ok(false);
            };
            let Some(tag) = thread_tag(f) else { break f };
            // A reduction across the threads: the fill's thread loops are all around it.
            if let Some(acc) = self.accumulation(f, true) {
                let start = tags.len() == fill.threads.len()
                    && fill.unit.is_none()
                    && self.combines_once(f, &acc)
                    && fills_element(&fill, &renamed, &acc);
                if start {
                    self.fill_start = Some((f.var, fill.store.value.clone()));
                }
                return Ok(start);
            }
            let Some((_, g)) = fill.threads.iter().find(|(t, _)| *t == tag) else {
                return Ok(false);
            };
            if tags.contains(&tag)
                || !g.min.same_ignoring_int_type(&f.min)
                || !g.extent.same_ignoring_int_type(&f.extent)
            {
                return Ok(false);
            }
            tags.push(tag);
            renamed.insert(g.var, Expr::Var(f.var));
            s = f.body.single();
        };
        if tags.len() != fill.threads.len() || mma::Mma::of(f).is_some() {
            return Ok(false);
        }
        let Some(acc) = self.accumulation(f, false) else {
            return Ok(false);
        };
        if acc.atomic || acc.block.init.is_some() || acc.block.predicate.is_some() {
            return Ok(false);
        }
        match (fill.unit, acc.lane) {
            (None, None) => {}
            (Some((u, n)), Some((l, m))) if n == m => {
                renamed.insert(u, Expr::Var(l));
            }
            _ => return Ok(false),
        }
        if !fills_element(&fill, &renamed, &acc) {
            return Ok(false);
        }
        self.fill_start = Some((f.var, fill.store.value.clone()));
        Ok(true)
    }

    /// Whether the cross-thread reduction over `f` (`acc`) stores its element once, from one
    /// thread, after every thread's part: no init (which would overwrite the fill), no
    /// condition guarding the combination (only conditions on the reduction's steps), and
    /// `blockDim.x` the reduction's lanes, so that the one combining thread is `threadIdx.x`
    /// 0, the thread a fill outside any `threadIdx.x` loop stores from.
    pub(super) fn combines_once(&self, f: &For, acc: &Accumulation<'_>) -> bool {
        !acc.atomic
            && acc.block.init.is_none()
            && self.lone_combiner(f)
            && acc.combination_guards(f).is_empty()
    }

    /// Whether `blockDim.x` is a constant equal to the lanes of the cross-thread reduction over
    /// `f`: thread 0 alone then combines each element.
    pub(super) fn lone_combiner(&self, f: &For) -> bool {
        let dim_x = self
            .kernel
            .as_ref()
            .and_then(|k| k.dims.get("threadIdx.x"))
            .and_then(|d| d.eval(&|_| None));
        dim_x.is_some() && dim_x == const_int(&f.extent)
    }

    /// The value the registers of the accumulation over loop `v` start with, where a fill was
    /// absorbed into it ([`Self::fill_absorbed`]).
    pub(crate) fn take_fill_start(&mut self, v: VarId) -> Option<Expr> {
        self.fill_start.take_if(|(f, _)| *f == v).map(|(_, e)| e)
    }
}
