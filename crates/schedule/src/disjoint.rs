//! Whether the iterations of a loop that carries a reduction iterator still touch disjoint
//! elements, so that `parallel` and `bind(loop, "blockIdx.*")` may take it: a fused iterator
//! such as 2:4's group `g` (the row of C is `g // (n / 4)`) is a reduction as a whole, but once
//! split into rows and the groups of a row, its row part writes one row per iteration.
//!
//! The proof: every access to a buffer that a block under the loop writes (through a reduction
//! iterator that moves with the loop) has, in one index, the form `c * v + r` — `v` the loop's
//! variable, `c` a nonzero constant (the index's step when `v` grows by one), `r` free of `v` —
//! with the same index and `c` for all of them, and, for any values of the loops around, the
//! `r`s of all of them together spanning fewer than `|c|` values as the loops inside run. Two
//! iterations then reach that index at values at least `|c|` apart in their `v` part and never
//! at the same element. The span is bounded by comparing each `r` with a copy whose inner loop
//! variables are renamed: what the loops around contribute cancels out, what is left is bounded
//! by the loops' ranges (an `r` that does not separate so is not proven).

use std::collections::HashMap;

use sparsetir_arith::Analyzer;
use sparsetir_ir::{BufferId, Expr, IterKind, PrimFunc, Stmt, VarId};

use crate::ir_util;

/// See the module documentation. `root` holds the loop over `v`.
pub(crate) fn iterations_disjoint(func: &PrimFunc, root: &Stmt, v: VarId) -> bool {
    let Some(path) = ir_util::path_to(root, &|s| ir_util::is_loop(s, v)) else {
        return false;
    };
    let Some(Stmt::For(lp)) = path.last().copied() else {
        return false;
    };
    // Only the loops inside get renamed copies: the loops around are fixed while the loop runs.
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
            // The loops around keep one value while the loop runs (the same in both copies),
            // but that value lies in their range: it bounds terms that mix them with inner
            // loops (`(8 * outer + inner) // 16`).
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
        _ => {}
    });
    an.bind_range(v, &lp.min, &lp.extent);
    let func = &func;
    let resolve = |e: &Expr| {
        let mut e = e.clone();
        // Block iterators bound to outer blocks' iterators: substitute to a fixpoint (blocks
        // nest only so deep).
        for _ in 0..8 {
            ir_util::subst_expr(&mut e, &map);
        }
        e
    };
    // The buffers written by blocks whose reduction iterators move with the loop.
    let mut written: Vec<BufferId> = Vec::new();
    lp.body.visit(&mut |s| {
        if let Stmt::Block(b) = s {
            let reduces = b.iters.iter().any(|it| {
                it.kind == IterKind::Reduce && ir_util::uses_var(&resolve(&it.binding), v)
            });
            if reduces {
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
                    if args.iter().any(|a| mentions_written(a, &written))
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
        disjoint_accesses(func, &an, list, v, &copies)
    })
}

/// The stores of `s` (its init's too).
fn collect_stores(s: &Stmt, out: &mut Vec<BufferId>) {
    s.visit(&mut |x| {
        if let Stmt::Store(st) = x {
            out.push(st.buffer);
        }
    });
}

fn mentions_written(e: &Expr, written: &[BufferId]) -> bool {
    let mut hit = false;
    e.visit(&mut |x| {
        if let Expr::Load { buffer, .. } = x {
            hit |= written.contains(buffer);
        }
    });
    hit
}

/// Whether one index separates the iterations for every access in `list` (see the module
/// documentation): the same step `c` in `v` for all, and `|r_i - r_j'| < |c|` for every pair
/// (`r_j'`: `r_j` with the inner loops' variables renamed).
fn disjoint_accesses(
    func: &PrimFunc,
    an: &Analyzer,
    list: &[Vec<Expr>],
    v: VarId,
    copies: &HashMap<VarId, Expr>,
) -> bool {
    let Some(first) = list.first() else {
        return true;
    };
    (0..first.len()).any(|k| {
        let mut parts = Vec::new();
        for idx in list {
            match idx.get(k).and_then(|e| split_step(func, an, e, v)) {
                Some(p) => parts.push(p),
                None => return false,
            }
        }
        let step = parts[0].0;
        if parts.iter().any(|(c, _)| *c != step) {
            return false;
        }
        parts.iter().all(|(_, ri)| {
            parts.iter().all(|(_, rj)| {
                let mut other = rj.clone();
                ir_util::subst_expr(&mut other, copies);
                an.const_bounds(func, &Expr::sub(ri.clone(), other))
                    .is_some_and(|(lo, hi)| hi < step.abs() && -lo < step.abs())
            })
        })
    })
}

/// `e` as `c * v + r` (see the module documentation): `(c, r)`.
fn split_step(func: &PrimFunc, an: &Analyzer, e: &Expr, v: VarId) -> Option<(i64, Expr)> {
    let mut next = e.clone();
    let mut map = HashMap::new();
    map.insert(v, Expr::add(Expr::Var(v), Expr::int(1)));
    ir_util::subst_expr(&mut next, &map);
    let step = match an.simplify(func, &Expr::sub(next, e.clone())) {
        Expr::Int(c, _) if c != 0 => c,
        _ => return None,
    };
    let rest = an.simplify(
        func,
        &Expr::sub(e.clone(), Expr::mul(Expr::int(step), Expr::Var(v))),
    );
    (!ir_util::uses_var(&rest, v)).then_some((step, rest))
}
