//! The arithmetic proof that one index separates a loop's iterations: steps, interleaving
//! offsets, exact enumeration of small affine forms, and the index pairs that stand for one
//! value (see the parent module's documentation).

use std::collections::HashMap;

use sparsetir_ir::{Expr, PrimFunc, VarId};

use super::{reads_memory, replaced, LoopFacts};
use crate::ir_util;

/// Whether one index separates the iterations for every access in `list` (see the parent
/// module's documentation): the same step `c` in `v` for all, and for every pair `r_i - r_j'`
/// (`r_j'`: `r_j` with the inner loops' variables renamed) a multiple of `|c| * extent` plus
/// less than `|c|` either way (`extent`: the most iterations of the loop, when known).
pub(super) fn disjoint_accesses(facts: &LoopFacts, list: &[Vec<Expr>], v: VarId) -> bool {
    let (func, an, copies) = (&facts.func, &facts.an, &facts.copies);
    let extent = an.const_bounds(func, &facts.lp.extent).map(|(_, hi)| hi);
    // One iteration never meets another.
    if extent.is_some_and(|n| n <= 1) {
        return true;
    }
    let list = with_pairs(facts, list);
    let Some(first) = list.first() else {
        return true;
    };
    (0..first.len()).any(|k| {
        let mut parts = Vec::new();
        for idx in &list {
            match idx.get(k).and_then(|e| split_step(facts, e, v)) {
                Some(p) => parts.push(p),
                None => return false,
            }
        }
        let step = parts[0].0;
        if parts.iter().any(|(c, _)| *c != step) {
            return false;
        }
        // Offsets that differ by a multiple of `|c| * extent` interleave: `32 * k0 + k1` over
        // `k1 < 32` never meets itself, whatever `k0` is.
        let period = extent.and_then(|n| step.checked_abs()?.checked_mul(n));
        parts.iter().all(|(_, ri)| {
            parts.iter().all(|(_, rj)| {
                let mut other = rj.clone();
                ir_util::subst_expr(&mut other, copies);
                let d = Expr::sub(ri.clone(), other);
                match period {
                    Some(m) => an.remainder_bounds(func, &d, m),
                    None => an.const_bounds(func, &d),
                }
                .is_some_and(|(lo, hi)| hi < step.abs() && -lo < step.abs())
                    || exact_apart(facts, &d, step, extent)
            })
        })
    })
}

/// The most values [`exact_apart`] enumerates.
const EXACT_SPAN: i64 = 1 << 16;

/// Whether `d`, the difference of two accesses' offsets (the second's inner loops renamed),
/// never equals `step * t` for a whole `t` with `1 <= |t| < extent`: two iterations `t` apart
/// would then meet. Decided exactly where `d` is affine, with constant coefficients, in loop
/// variables of constant ranges (`2 i + 9 j` over `j < 3` and `i < 9` never meets itself; over
/// `i < 10` it does), by the set of values it takes (at most [`EXACT_SPAN`] of them, within a
/// bounded amount of work); anything
/// else is not proven. The bounds cover each variable's whole range, so a loop whose range
/// depends on another is over-approximated: sound.
fn exact_apart(facts: &LoopFacts, d: &Expr, step: i64, extent: Option<i64>) -> bool {
    let (func, an) = (&facts.func, &facts.an);
    let d = an.simplify(func, d);
    let dt = d.dtype(func);
    if !dt.is_int() {
        return false;
    }
    let mut vars: Vec<VarId> = Vec::new();
    let mut loads = false;
    d.visit(&mut |x| match x {
        Expr::Var(v) if !vars.contains(v) => vars.push(*v),
        Expr::Load { .. } => loads = true,
        _ => {}
    });
    if loads {
        return false;
    }
    // Each variable's coefficient (its constant step), then the rest must be a constant.
    let mut terms: Vec<(i64, i64, i64)> = Vec::new();
    let mut rest = d.clone();
    for &x in &vars {
        let Some((lo, hi)) = an.const_bounds(func, &Expr::Var(x)) else {
            return false;
        };
        let mut next = d.clone();
        let plus_one = Expr::add(Expr::Var(x), Expr::Int(1, func.vars[x].dtype));
        ir_util::subst_expr(&mut next, &HashMap::from([(x, plus_one)]));
        let Expr::Int(a, _) = an.simplify(func, &Expr::sub(widen(func, &next), d.clone())) else {
            return false;
        };
        let term = Expr::mul(
            Expr::Int(a, dt),
            widen(func, &Expr::Cast(dt, Box::new(Expr::Var(x)))),
        );
        rest = Expr::sub(rest, term);
        terms.push((a, lo, hi));
    }
    let Expr::Int(k0, _) = an.simplify(func, &rest) else {
        return false;
    };
    // The values `d` takes, as a bitset over their span.
    let mut span: i64 = 0;
    let mut min = k0;
    for &(a, lo, hi) in &terms {
        let (Some(width), Some(low)) = (
            a.checked_abs().and_then(|a| a.checked_mul(hi - lo)),
            a.checked_mul(if a < 0 { hi } else { lo }),
        ) else {
            return false;
        };
        span = match span.checked_add(width) {
            Some(s) if s <= EXACT_SPAN => s,
            _ => return false,
        };
        min += low;
    }
    // Index `s` stands for `min + s` once every term is added (each term's part counted from
    // its least value).
    let mut reach = vec![false; span as usize + 1];
    reach[0] = true;
    let (mut reach_lo, mut reach_hi) = (0i64, 0i64);
    let mut work: i64 = 0;
    for &(a, lo, hi) in &terms {
        work += (reach_hi - reach_lo + 1) * (hi - lo + 1);
        if work > EXACT_SPAN * 64 {
            return false;
        }
        let mut next = vec![false; reach.len()];
        for s in reach_lo..=reach_hi {
            if !reach[s as usize] {
                continue;
            }
            for x in lo..=hi {
                next[(s + a * x - a * if a < 0 { hi } else { lo }) as usize] = true;
            }
        }
        reach = next;
        let first = reach.iter().position(|b| *b).unwrap_or(0) as i64;
        let last = reach.iter().rposition(|b| *b).unwrap_or(0) as i64;
        (reach_lo, reach_hi) = (first, last);
    }
    (reach_lo..=reach_hi).all(|s| {
        let value = s + min;
        !reach[s as usize]
            || value == 0
            || value % step != 0
            || extent.is_some_and(|n| (value / step).abs() >= n)
    })
}

/// `list` (the accesses of one buffer, as index tuples) with more indices, each one function
/// of two positions `a`, `b` for every access, which those two determine (so two accesses apart
/// in it are apart):
/// - `e` where every access has `e // k` at `a` and `e % k` at `b`, the same `k` for all
///   (symbolic too: `e = k * (e // k) + e % k`), to a fixpoint (a fusion of fused loops). A
///   fused loop's `f // n, f % n` stands for `f`, which steps with the loop where neither part
///   does;
/// - `k * idx[a] + idx[b]` where `idx[b]` lies in a constant `[0, k)` for every access;
/// - `idx[b]` with `idx[a]` (which reads memory) replaced, wherever `idx[b]` holds it, by a
///   variable standing for the value two meeting accesses share at `a`
///   ([`LoopFacts::same`]): `p - I_indptr[s]` for a fused loop's `p - I_indptr[mid[p]]` beside
///   `mid[p]`, which steps with `p` whatever `mid` holds.
pub(super) fn with_pairs(facts: &LoopFacts, list: &[Vec<Expr>]) -> Vec<Vec<Expr>> {
    use sparsetir_ir::BinOp;
    let (func, an) = (&facts.func, &facts.an);
    let mut out = list.to_vec();
    let n = list.first().map_or(0, Vec::len);
    if n < 2 || list.iter().any(|idx| idx.len() != n) {
        return out;
    }
    let split = |q: &Expr, r: &Expr| match (q, r) {
        (Expr::Binary(BinOp::FloorDiv, e, k), Expr::Binary(BinOp::FloorMod, e2, k2))
            if e == e2 && k == k2 =>
        {
            Some(((**e).clone(), (**k).clone()))
        }
        _ => None,
    };
    let mut used = Vec::new();
    for _ in 0..4 {
        let width = out[0].len();
        let mut found = None;
        'pairs: for a in 0..width {
            for b in (0..width).filter(|b| *b != a && !used.contains(&(a, *b))) {
                let parts: Option<Vec<(Expr, Expr)>> =
                    out.iter().map(|idx| split(&idx[a], &idx[b])).collect();
                if let Some(parts) = parts.filter(|p| p.iter().all(|(_, k)| *k == p[0].1)) {
                    found = Some((a, b, parts));
                    break 'pairs;
                }
            }
        }
        let Some((a, b, parts)) = found else { break };
        used.push((a, b));
        for (idx, (e, _)) in out.iter_mut().zip(parts) {
            idx.push(e);
        }
    }
    // An index that reads another index of the same access (`p - I_indptr[mid[p]]` beside
    // `mid[p]`: a fused loop's position within its row, beside its row) reads, where two
    // accesses meet, the value they share at that other index.
    for a in 0..n.min(facts.same.len()) {
        if !list.iter().all(|idx| reads_memory(&idx[a])) {
            continue;
        }
        for b in (0..n).filter(|b| *b != a) {
            let mut derived = Vec::with_capacity(list.len());
            for idx in list {
                match replaced(&idx[b], &idx[a], &facts.same[a]) {
                    (e, true) => derived.push(an.simplify(func, &e)),
                    _ => break,
                }
            }
            if derived.len() == list.len() {
                for (o, e) in out.iter_mut().zip(derived) {
                    o.push(e);
                }
            }
        }
    }
    for b in 0..n {
        // One past the largest value at `b`, where no access goes below 0 there.
        let k = list
            .iter()
            .try_fold(0, |k, idx| match an.const_bounds(func, &idx[b]) {
                Some((lo, hi)) if lo >= 0 => Some(k.max(hi + 1)),
                _ => None,
            });
        let Some(k) = k else { continue };
        for a in (0..n).filter(|a| *a != b && !used.contains(&(*a, b))) {
            for (o, idx) in out.iter_mut().zip(list) {
                let e = Expr::add(Expr::mul(Expr::int(k), idx[a].clone()), idx[b].clone());
                o.push(an.simplify(func, &e));
            }
        }
    }
    out
}

/// `e` with every widening cast of a signed integer sum, difference or product moved onto its
/// operands (`int64(i + 1)` → `int64(i) + 1`), so that the step of an index that widens the
/// loop's variable (`T.Cast("int64", vi) * 4 + ...`) shows: exact where the narrower
/// arithmetic does not overflow, which the proofs assume (`assume_no_overflow`).
fn widen(func: &PrimFunc, e: &Expr) -> Expr {
    use sparsetir_ir::BinOp;
    match e {
        Expr::Cast(dt, a) if dt.is_int() && a.dtype(func).is_int() => match &**a {
            Expr::Binary(op @ (BinOp::Add | BinOp::Sub | BinOp::Mul), x, y)
                if a.dtype(func).bits() < dt.bits() =>
            {
                let x = widen(func, &Expr::Cast(*dt, x.clone()));
                let y = widen(func, &Expr::Cast(*dt, y.clone()));
                Expr::binary(*op, x, y)
            }
            _ => Expr::Cast(*dt, Box::new(widen(func, a))),
        },
        _ => {
            let mut e = e.clone();
            e.for_each_child_mut(|c| *c = widen(func, c));
            e
        }
    }
}

/// `e` as `c * v + r` (see the parent module's documentation): `(c, r)`.
fn split_step(facts: &LoopFacts, e: &Expr, v: VarId) -> Option<(i64, Expr)> {
    let (func, an) = (&facts.func, &facts.an);
    let at = |value: Expr| {
        let mut x = e.clone();
        ir_util::subst_expr(&mut x, &HashMap::from([(v, value)]));
        widen(func, &x)
    };
    let (now, next) = (widen(func, e), at(Expr::add(Expr::Var(v), Expr::int(1))));
    let step = match an.simplify(func, &Expr::sub(next, now)) {
        Expr::Int(c, _) if c != 0 => c,
        _ => return None,
    };
    // The same step from every `v` of the loop on: `e` is `e[v := min] + step * (v - min)`.
    let min = facts.lp.min.clone();
    let first = Expr::sub(at(min.clone()), Expr::mul(Expr::int(step), min));
    let rest = an.simplify(func, &first);
    (!ir_util::uses_var(&rest, v)).then_some((step, rest))
}
