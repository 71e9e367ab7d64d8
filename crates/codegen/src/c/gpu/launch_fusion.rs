//! Launch fusion on the CUDA target: with the function attribute `{"fuse_launches": True}`,
//! consecutive top-level nests that do not depend on each other run in one kernel launch — the
//! per-bucket nests of a decomposed SpMM (hyb), which would otherwise be one launch each.
//!
//! # Rules
//!
//! - Two nests may share a launch when no buffer one of them *writes* is touched by the other,
//!   except a buffer both only *accumulate* into (every store `B[i] = B[i] + e`, `e + B[i]` or
//!   `atomic_add(B[i], e)`, and no other load of `B`): their updates commute (atomically where
//!   the schedule marked the block `atomic`, or on disjoint elements, as `horizontal_fuse`
//!   assumes of the parts of a composable format). A block's own init of the element it then
//!   accumulates into (`with T.init(): B[idx] = c` over `B[idx] = B[idx] + e`: a hyb bucket
//!   that stores its rows, `fold_zero_fill`) counts as accumulation too: on disjoint elements
//!   the order of the nests does not matter either. A nest that stores elements and then
//!   accumulates into them itself (a zeroed row summed by the warps of one block: the long
//!   rows of a hyb kept whole, `hyb_with_rest`) *owns* them: it shares a launch with nests
//!   that accumulate into or own the same buffer on the same assumption of disjoint elements
//!   (which atomics do not relax here: an owner's store is no addition). A nest that only
//!   stores (an init nest) and one that accumulates after it always take separate launches.
//! - A nest that binds `blockIdx.y` or `blockIdx.z` stays alone.
//! - In the fused kernel, part `k` owns the blocks `[off_k, off_k + g_k)` along `blockIdx.x`
//!   (`g_k` its own grid width, `off_k` the sum of the earlier ones) and sees them as its grid
//!   (`blockIdx.x - off_k`, width `g_k`, grid-stride loops included); the other block
//!   dimensions are the largest of the parts' (a part's thread loops are guarded where they are
//!   narrower, and stores of a part that does not use a dimension are made by one thread, as in
//!   any kernel).

use std::collections::{HashMap, HashSet};

use sparsetir_ir::{AttrValue, BinOp, BufferId, Expr, Intrinsic, PrimFunc, Stmt, Store};

use crate::cuda::LaunchExpr;

/// The attribute that asks for launch fusion.
pub(crate) const FUSE_LAUNCHES_ATTR: &str = "fuse_launches";

/// Whether `func` asks for launch fusion.
pub(crate) fn requested(func: &PrimFunc) -> bool {
    matches!(
        func.attrs.get(FUSE_LAUNCHES_ATTR),
        Some(AttrValue::Bool(true)) | Some(AttrValue::Int(1))
    )
}

/// How a nest uses a buffer.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Use {
    Read,
    Accumulate,
    /// Stores elements and accumulates into them, reading them no other way.
    Own,
    Write,
}

/// Whether `v` is `B[idx] + e` or `e + B[idx]` for the store target `B[idx]`.
fn accumulates(b: BufferId, idx: &[Expr], v: &Expr) -> bool {
    let same =
        |e: &Expr| matches!(e, Expr::Load { buffer, indices } if *buffer == b && indices == idx);
    match v {
        Expr::Binary(BinOp::Add, x, y) => same(x) || same(y),
        _ => false,
    }
}

/// The buffers `s` touches and how (the strongest use wins: a buffer both accumulated into and
/// read elsewhere counts as written).
fn uses(s: &Stmt) -> HashMap<BufferId, Use> {
    let mut out: HashMap<BufferId, Use> = HashMap::new();
    let note = |b: BufferId, u: Use, out: &mut HashMap<BufferId, Use>| {
        let e = out.entry(b).or_insert(u);
        *e = match (*e, u) {
            (a, c) if a == c => a,
            // Plain stores and accumulation, so far with no other read.
            (Use::Accumulate | Use::Own, Use::Write) | (Use::Write | Use::Own, Use::Accumulate) => {
                Use::Own
            }
            _ => Use::Write,
        };
    };
    // A buffer only stored stays `Write`; a read other than an accumulation's read-back makes
    // any writer `Write` (below, once the read-backs are known).
    // Loads that are the read-back of an accumulation do not count as reads.
    let mut readbacks: HashSet<*const Expr> = HashSet::new();
    // A block's init of the element its body accumulates into (visited before the init).
    let mut reduction_inits: HashSet<*const Store> = HashSet::new();
    s.visit(&mut |st| match st {
        Stmt::Block(b) => {
            if let (Some(Stmt::Store(init)), Stmt::Store(sum)) =
                (b.init.as_ref().map(Stmt::single), b.body.single())
            {
                if init.buffer == sum.buffer
                    && init.indices == sum.indices
                    && accumulates(sum.buffer, &sum.indices, &sum.value)
                {
                    reduction_inits.insert(init as *const Store);
                }
            }
        }
        Stmt::Store(x) => {
            let u = if reduction_inits.contains(&(x as *const Store))
                || accumulates(x.buffer, &x.indices, &x.value)
            {
                if let Expr::Binary(_, a, c) = &x.value {
                    for side in [a, c] {
                        if matches!(&**side, Expr::Load { buffer, .. } if *buffer == x.buffer) {
                            readbacks.insert(&**side as *const Expr);
                        }
                    }
                }
                Use::Accumulate
            } else {
                Use::Write
            };
            note(x.buffer, u, &mut out);
        }
        Stmt::Evaluate(Expr::Call {
            op: Intrinsic::AtomicAdd,
            args,
            ..
        }) => {
            if let Some(target @ Expr::Load { buffer, .. }) = args.first() {
                readbacks.insert(target as *const Expr);
                note(*buffer, Use::Accumulate, &mut out);
            }
        }
        _ => {}
    });
    s.visit(&mut |st| {
        st.for_each_expr(|e| {
            e.visit(&mut |x| {
                if let Expr::Load { buffer, .. } = x {
                    if !readbacks.contains(&(x as *const Expr)) {
                        note(*buffer, Use::Read, &mut out);
                    }
                }
            })
        })
    });
    out
}

/// Whether `s` binds `blockIdx.y` or `blockIdx.z`.
fn uses_other_grid_dims(s: &Stmt) -> bool {
    let mut found = false;
    s.visit(&mut |st| {
        if let Stmt::For(f) = st {
            found |= matches!(f.thread.as_deref(), Some("blockIdx.y" | "blockIdx.z"));
        }
    });
    found
}

/// Whether two nests' uses let them run in one launch.
fn independent(a: &HashMap<BufferId, Use>, b: &HashMap<BufferId, Use>) -> bool {
    a.iter().all(|(buf, ua)| match b.get(buf) {
        None => true,
        Some(ub) => {
            let sums = |u: &Use| matches!(u, Use::Accumulate | Use::Own);
            (*ua == Use::Read && *ub == Use::Read) || (sums(ua) && sums(ub))
        }
    })
}

/// The top-level nests grouped into launches (see the module documentation).
pub(crate) fn groups<'f>(_func: &PrimFunc, tops: &[&'f Stmt]) -> Vec<Vec<&'f Stmt>> {
    let mut out: Vec<Vec<&'f Stmt>> = Vec::new();
    let mut current: Vec<(&'f Stmt, HashMap<BufferId, Use>)> = Vec::new();
    for &s in tops {
        let u = uses(s);
        let alone = uses_other_grid_dims(s);
        let joins = !alone
            && !current.is_empty()
            && current
                .iter()
                .all(|(c, cu)| !uses_other_grid_dims(c) && independent(cu, &u));
        if !joins && !current.is_empty() {
            out.push(current.drain(..).map(|(c, _)| c).collect());
        }
        current.push((s, u));
    }
    if !current.is_empty() {
        out.push(current.into_iter().map(|(c, _)| c).collect());
    }
    out
}

/// The launch dimensions of parts run together: `blockIdx.x` the sum of the parts' grid widths,
/// every other tag the largest of the parts' extents.
pub(crate) fn merge_dims(parts: &[HashMap<String, LaunchExpr>]) -> HashMap<String, LaunchExpr> {
    if let [one] = parts {
        return one.clone();
    }
    let mut out: HashMap<String, LaunchExpr> = HashMap::new();
    let mut grid = LaunchExpr::Const(0);
    for dims in parts {
        let g = dims
            .get("blockIdx.x")
            .cloned()
            .unwrap_or(LaunchExpr::Const(1));
        grid = LaunchExpr::Add(Box::new(grid), Box::new(g));
        for (tag, d) in dims {
            if tag == "blockIdx.x" {
                continue;
            }
            let merged = match out.remove(tag) {
                Some(prev) if prev != *d => LaunchExpr::Max(Box::new(prev), Box::new(d.clone())),
                Some(prev) => prev,
                None => d.clone(),
            };
            out.insert(tag.clone(), merged);
        }
    }
    out.insert("blockIdx.x".to_string(), grid);
    out
}
