//! `init_into_cache` (stage III, CPU code): where an output's elements are started with a
//! value, copied into a cache, accumulated there and copied back, the cache is started with the
//! value directly, and the start in the output goes.
//!
//! # Why
//!
//! Lowering splits a reduction's init into a nest of its own before the reduction's loops (a
//! CSR row whose fiber is empty still gets its 0). When the schedule then accumulates the row in
//! a local cache (`reverse_cache_write`), the cache is filled from the output, because the
//! reduction reads it: each row of a CSR SpMM stores its zeros to `C`, loads them back, and
//! finally stores the sums over them. Two of those three passes over the row are for nothing:
//! on cora (four stored elements a row) they are a tenth of the kernel's memory operations.
//!
//! # Rule
//!
//! In one statement list, three nests of serial, vectorized or unrolled loops around one block
//! each (no predicate, no init, no allocation, a single store as body; every block iterator
//! bound to a loop of its own nest over exactly the iterator's range):
//!
//! 1. the *start* `X[a] = v`, where `v` reads no memory (constants, variables, math
//!    intrinsics such as `T.min_value`) and names none of the start's own loop variables;
//! 2. the *fill* `L[l] = X[b]`, the next statement of the list touching `X`;
//! 3. the *write-back* `X[c] = w`, the next statement touching `X` after the fill,
//!
//! where `a`, `b` and `c` name the same elements: position by position, an index that is an
//! iterator of its block corresponds to an iterator of the other block with the same range, each
//! iterator used once, and the other indices are the same expressions, free of iterators.
//!
//! Then the fill stores `v` (its iterators renamed) instead of loading `X`, and the start goes.
//! The fill read exactly the values the start stored (nothing touched `X` between them, and `v`
//! reads no memory, so it is the same value at the fill). The start's stores are dead: nothing
//! reads `X` until the write-back, which stores every one of those elements, unconditionally,
//! in the same list.
//!
//! The pass runs on the C path, after every schedule primitive (a later primitive moving the
//! write-back under a loop that may not run would make the start live again).

use std::collections::HashMap;

use sparsetir_ir::{Block, Expr, ForKind, PrimFunc, Stmt, Store, VarId};

use crate::remove_unused_args::subst_vars;

/// `func` with every start-fill-write-back triple rewritten (see the module documentation).
pub fn init_into_cache(func: &PrimFunc) -> PrimFunc {
    let mut out = func.clone();
    rewrite(&mut out.body);
    out
}

fn rewrite(s: &mut Stmt) {
    if let Stmt::Seq(items) = s {
        let mut p = 0;
        while p < items.len() {
            if forward(items, p) {
                items.remove(p);
            } else {
                p += 1;
            }
        }
    }
    s.for_each_child_mut(rewrite);
}

/// Rewrites the fill after the start `items[p]`, when the rule holds; returns whether it did
/// (the start is then dead).
fn forward(items: &mut [Stmt], p: usize) -> bool {
    let Some(start) = nest(&items[p]) else {
        return false;
    };
    let x = start.store.buffer;
    // The value moves into the fill: it may name the start block's iterators (renamed there)
    // and what is bound around both, not the start's own loop variables.
    if value_loads(&start.store.value) || start.store.value.mentions_any(&start.loops) {
        return false;
    }
    let next = |from: usize| (from + 1..items.len()).find(|&k| items[k].touches(x));
    let Some(q) = next(p) else {
        return false;
    };
    let Some(r) = next(q) else {
        return false;
    };
    let (Some(fill), Some(back)) = (nest(&items[q]), nest(&items[r])) else {
        return false;
    };
    // The fill copies X into another buffer; the write-back stores X without reading it.
    let Expr::Load { buffer, indices } = &fill.store.value else {
        return false;
    };
    if *buffer != x || fill.store.buffer == x || back.store.buffer != x || back.store.value.loads(x)
    {
        return false;
    }
    let Some(to_fill) = correspondence(start.block, &start.store.indices, fill.block, indices)
    else {
        return false;
    };
    if correspondence(
        start.block,
        &start.store.indices,
        back.block,
        &back.store.indices,
    )
    .is_none()
    {
        return false;
    }
    let mut value = start.store.value.clone();
    subst_vars(&mut value, &to_fill);
    let Some(block) = block_mut(&mut items[q]) else {
        return false;
    };
    let Some(st) = store_mut(&mut block.body) else {
        return false;
    };
    st.value = value;
    block.reads.retain(|r| r.buffer != x);
    true
}

/// A nest of plain loops around one block whose body is a single store.
struct Nest<'a> {
    block: &'a Block,
    store: &'a Store,
    /// The variables of the nest's loops.
    loops: Vec<VarId>,
}

fn nest(s: &Stmt) -> Option<Nest<'_>> {
    let mut cur = s.single();
    let mut loops: Vec<(VarId, &Expr, &Expr)> = Vec::new();
    let block = loop {
        match cur {
            Stmt::For(l)
                if matches!(
                    l.kind,
                    ForKind::Serial | ForKind::Vectorized | ForKind::Unrolled
                ) && l.thread.is_none() =>
            {
                loops.push((l.var, &l.min, &l.extent));
                cur = l.body.single();
            }
            Stmt::Block(b) => break b,
            _ => return None,
        }
    };
    if block.predicate.is_some() || block.init.is_some() || !block.alloc_buffers.is_empty() {
        return None;
    }
    let Stmt::Store(store) = block.body.single() else {
        return None;
    };
    // Every iterator on a loop of its own, over exactly its range.
    let mut bound = Vec::new();
    for it in &block.iters {
        let Expr::Var(v) = &it.binding else {
            return None;
        };
        let (_, min, extent) = loops.iter().find(|(lv, _, _)| lv == v)?;
        if bound.contains(v)
            || !min.same_ignoring_int_type(&it.min)
            || !extent.same_ignoring_int_type(&it.extent)
        {
            return None;
        }
        bound.push(*v);
    }
    let loops = loops.iter().map(|(v, _, _)| *v).collect();
    Some(Nest {
        block,
        store,
        loops,
    })
}

/// Whether `a` (indices over the iterators of block `x`) and `b` (over those of block `y`) name
/// the same elements: the map from `x`'s iterators to `y`'s when they do.
fn correspondence(x: &Block, a: &[Expr], y: &Block, b: &[Expr]) -> Option<HashMap<VarId, Expr>> {
    if a.len() != b.len() {
        return None;
    }
    let iter_of = |blk: &Block, e: &Expr| match e {
        Expr::Var(v) => blk.iters.iter().position(|it| it.var == *v),
        _ => None,
    };
    let (x_vars, y_vars): (Vec<VarId>, Vec<VarId>) = (
        x.iters.iter().map(|it| it.var).collect(),
        y.iters.iter().map(|it| it.var).collect(),
    );
    let mut map: HashMap<VarId, Expr> = HashMap::new();
    for (ea, eb) in a.iter().zip(b) {
        match (iter_of(x, ea), iter_of(y, eb)) {
            (Some(i), Some(j)) => {
                let (ia, ib) = (&x.iters[i], &y.iters[j]);
                if !ia.min.same_ignoring_int_type(&ib.min)
                    || !ia.extent.same_ignoring_int_type(&ib.extent)
                    || map.contains_key(&ia.var)
                    || map.values().any(|e| *e == Expr::Var(ib.var))
                {
                    return None;
                }
                map.insert(ia.var, Expr::Var(ib.var));
            }
            (None, None)
                if !ea.mentions_any(&x_vars)
                    && !eb.mentions_any(&y_vars)
                    && ea.same_ignoring_int_type(eb) => {}
            _ => return None,
        }
    }
    (map.len() == x.iters.len() && map.len() == y.iters.len()).then_some(map)
}

/// Whether `e` reads or writes memory: a buffer element, or an intrinsic that names one (the
/// math intrinsics and `T.min_value` read none).
fn value_loads(e: &Expr) -> bool {
    let mut hit = false;
    e.visit(&mut |n| {
        hit |= match n {
            Expr::Load { .. } => true,
            Expr::Call { op, .. } => op.writes_first_arg(),
            _ => false,
        }
    });
    hit
}

fn store_mut(s: &mut Stmt) -> Option<&mut Store> {
    match s {
        Stmt::Seq(v) if v.len() == 1 => store_mut(&mut v[0]),
        Stmt::Store(st) => Some(st),
        _ => None,
    }
}

fn block_mut(s: &mut Stmt) -> Option<&mut Block> {
    match s {
        Stmt::Seq(v) if v.len() == 1 => block_mut(&mut v[0]),
        Stmt::For(l) => block_mut(&mut l.body),
        Stmt::Block(b) => Some(b),
        _ => None,
    }
}
