//! Which array parameters a kernel overwrites: every launch that succeeds stores every element,
//! and nothing reads one. Their callers need not zero them first
//! ([`crate::CModule::overwritten`]): a fresh output of 5 MB costs a `memset` longer than a
//! fifth of a whole SpMM call on pubmed.
//!
//! The proof is structural, on the function the C writer writes:
//!
//! - no expression loads the buffer, and no intrinsic names it (`T.atomic_add` reads it);
//! - some store to it is reached on every run: the path from the function's body to it holds
//!   only sequences, `let`s, loops and blocks without predicate (the store not in an init),
//!   and no `if` or `while`;
//! - that store's indices are, dimension by dimension, distinct loop variables of that path or
//!   block iterators bound to one, each running over exactly `0 .. extent` of the dimension
//!   (the loop's and the iterator's ranges both).
//!
//! Every loop on the path runs all of its iterations (a parallel loop's included), so the
//! store's indices take every tuple of the buffer's shape. The C writer's own forms of these
//! loops (vector steps and their tails, parallel row ranges) keep that.

use std::collections::HashMap;

use sparsetir_ir::{BufferId, BufferShape, Expr, PrimFunc, Stmt};
use sparsetir_ir::{Store, VarId};

/// The parameter-backed buffers of `func` that every successful run overwrites whole.
pub(crate) fn overwritten_buffers(func: &PrimFunc) -> Vec<BufferId> {
    let mut read = Vec::new();
    func.body.visit(&mut |s| {
        s.for_each_expr(|e| {
            // (An intrinsic that names an element, `T.atomic_add(X[i], v)`, does so by a load.)
            e.visit(&mut |x| {
                if let Expr::Load { buffer, .. } = x {
                    read.push(*buffer)
                }
            })
        });
    });
    let mut stores: Vec<&Store> = Vec::new();
    let mut ranges = HashMap::new();
    unconditional_stores(&func.body, &mut ranges, &mut stores);
    func.buffers
        .iter()
        .filter(|(id, b)| {
            b.data_param().is_some()
                && !read.contains(id)
                && stores
                    .iter()
                    .any(|st| st.buffer == *id && covers(st, &b.shape, &ranges))
        })
        .map(|(id, _)| id)
        .collect()
}

/// The range `(min, extent)` of a loop variable, or of a block iterator bound to one (with
/// that loop variable, so that two indices of one loop count once).
type Ranges = HashMap<VarId, (Expr, Expr, VarId)>;

/// Collects the stores `s` runs on every run of `s`, recording the ranges of the loops and
/// block iterators on their way.
fn unconditional_stores<'a>(s: &'a Stmt, ranges: &mut Ranges, out: &mut Vec<&'a Store>) {
    match s {
        Stmt::Seq(v) => v.iter().for_each(|c| unconditional_stores(c, ranges, out)),
        Stmt::Let(l) => unconditional_stores(&l.body, ranges, out),
        Stmt::For(l) => {
            ranges.insert(l.var, (l.min.clone(), l.extent.clone(), l.var));
            unconditional_stores(&l.body, ranges, out);
        }
        Stmt::Block(b) if b.predicate.is_none() => {
            for it in &b.iters {
                if let Expr::Var(v) = &it.binding {
                    if let Some((min, extent, _)) = ranges.get(v) {
                        if min.same_ignoring_int_type(&it.min)
                            && extent.same_ignoring_int_type(&it.extent)
                        {
                            ranges.insert(it.var, (it.min.clone(), it.extent.clone(), *v));
                        }
                    }
                }
            }
            unconditional_stores(&b.body, ranges, out);
        }
        Stmt::Store(st) => out.push(st),
        _ => {}
    }
}

/// Whether `st`'s indices run over every element of a buffer of `shape`.
fn covers(st: &Store, shape: &BufferShape, ranges: &Ranges) -> bool {
    let BufferShape::Dense(dims) = shape else {
        return false;
    };
    if st.indices.len() != dims.len() {
        return false;
    }
    let mut loops = Vec::new();
    for (index, dim) in st.indices.iter().zip(dims) {
        let Expr::Var(v) = index else {
            return false;
        };
        let Some((min, extent, lv)) = ranges.get(v) else {
            return false;
        };
        if !matches!(min.as_int(), Some(0))
            || !extent.same_ignoring_int_type(dim)
            || loops.contains(lv)
        {
            return false;
        }
        loops.push(*lv);
    }
    true
}
