//! Proving comparisons: first from the intervals of both sides, then from the linear form of
//! their difference, replacing variables (and loads) by their symbolic bounds so that
//! `j < J_indptr[i + 1] - J_indptr[i]` follows from `j`'s loop extent.

use sparsetir_ir::{BinOp, DType, Expr, PrimFunc, UnOp};

use crate::bounds::{cast_interval, Interval};
use crate::fold::{self, cmp, common_dtype, int_range};
use crate::linear::{linear, Linear, Mode};
use crate::Analyzer;

/// How many rounds of symbolic substitution a bound search may take.
const SUBST_DEPTH: u32 = 3;

/// The decision of `lhs op rhs` from an interval `[lo, hi]` of `rhs - lhs`.
fn decide_diff(op: BinOp, lo: Option<i128>, hi: Option<i128>) -> Option<bool> {
    // d = rhs - lhs.
    let pos = |t: i128| lo.is_some_and(|l| l >= t); // d >= t always
    let neg = |t: i128| hi.is_some_and(|h| h <= t); // d <= t always
    match op {
        BinOp::Lt => decide(pos(1), neg(0)),
        BinOp::Le => decide(pos(0), neg(-1)),
        BinOp::Gt => decide(neg(-1), pos(0)),
        BinOp::Ge => decide(neg(0), pos(1)),
        BinOp::Eq => decide(pos(0) && neg(0), pos(1) || neg(-1)),
        BinOp::Ne => decide(pos(1) || neg(-1), pos(0) && neg(0)),
        _ => None,
    }
}

fn decide(yes: bool, no: bool) -> Option<bool> {
    if yes {
        Some(true)
    } else if no {
        Some(false)
    } else {
        None
    }
}

impl Analyzer {
    /// Proves a simplified condition.
    pub(crate) fn prove_simplified(&self, func: &PrimFunc, e: &Expr) -> Option<bool> {
        if let Some(c) = fold::literal(e) {
            return Some(c.truthy());
        }
        match e {
            Expr::Binary(op, a, b) if op.is_comparison() => self.prove_cmp(func, *op, a, b),
            Expr::Binary(BinOp::And, a, b) => {
                let pa = self.prove_simplified(func, a);
                let pb = self.prove_simplified(func, b);
                match (pa, pb) {
                    (Some(false), _) | (_, Some(false)) => Some(false),
                    (Some(true), Some(true)) => Some(true),
                    _ => None,
                }
            }
            Expr::Binary(BinOp::Or, a, b) => {
                let pa = self.prove_simplified(func, a);
                let pb = self.prove_simplified(func, b);
                match (pa, pb) {
                    (Some(true), _) | (_, Some(true)) => Some(true),
                    (Some(false), Some(false)) => Some(false),
                    _ => None,
                }
            }
            Expr::Unary(UnOp::Not, a) => self.prove_simplified(func, a).map(|v| !v),
            _ => {
                let dt = e.dtype(func);
                if dt.is_integer() || dt.is_bool() {
                    let iv = self.interval(func, e, 0);
                    if iv.lo.is_some_and(|l| l > 0) || iv.hi.is_some_and(|h| h < 0) {
                        return Some(true);
                    }
                    if iv.as_point() == Some(0) {
                        return Some(false);
                    }
                }
                None
            }
        }
    }

    /// Decides the integer comparison `a op b` (operands simplified), when provable.
    pub(crate) fn prove_cmp(&self, func: &PrimFunc, op: BinOp, a: &Expr, b: &Expr) -> Option<bool> {
        let (ta, tb) = (a.dtype(func), b.dtype(func));
        let dt = common_dtype(ta, tb);
        if !dt.is_integer()
            || !(ta.is_integer() || ta.is_bool())
            || !(tb.is_integer() || tb.is_bool())
        {
            return None;
        }
        let ia = cast_interval(self.interval(func, a, 0), ta, dt, self.assume_no_overflow);
        let ib = cast_interval(self.interval(func, b, 0), tb, dt, self.assume_no_overflow);
        // 1. Intervals of both sides.
        let lo = ib.lo.zip(ia.hi).map(|(x, y)| x - y);
        let hi = ib.hi.zip(ia.lo).map(|(x, y)| x - y);
        if let Some(r) = decide_diff(op, lo, hi) {
            return Some(r);
        }
        if let (Some(x), Some(y)) = (ia.as_point(), ib.as_point()) {
            return Some(cmp(op, x.cmp(&y)));
        }
        // 2. The difference as one linear form (exact: neither side may wrap).
        let la = linear(func, a, dt, Mode::Exact)?;
        let lb = linear(func, b, dt, Mode::Exact)?;
        if (ia.wrap && !self.linear_fits(func, &la)) || (ib.wrap && !self.linear_fits(func, &lb)) {
            return None;
        }
        let mut d = lb;
        d.add_scaled(&la, -1)?;
        let lo = self.sym_bound(func, &d, false, SUBST_DEPTH);
        let hi = self.sym_bound(func, &d, true, SUBST_DEPTH);
        decide_diff(op, lo, hi)
    }

    /// Whether the exact value of `l` provably lies in its dtype's range. For a linear form built
    /// with wrapping `+ - *`, that means the wrapped value *is* the exact value (they are equal
    /// modulo 2^bits and both in range).
    pub(crate) fn linear_fits(&self, func: &PrimFunc, l: &Linear) -> bool {
        let (min, max) = int_range(l.dt);
        let lo = self.sym_bound(func, l, false, SUBST_DEPTH);
        let hi = self.sym_bound(func, l, true, SUBST_DEPTH);
        lo.is_some_and(|v| v >= min) && hi.is_some_and(|v| v <= max)
    }

    /// The interval of an atom converted to `dt`.
    fn atom_interval(&self, func: &PrimFunc, atom: &Expr, dt: DType) -> Interval {
        cast_interval(
            self.interval(func, atom, 0),
            atom.dtype(func),
            dt,
            self.assume_no_overflow,
        )
    }

    /// A lower (or upper) bound of the exact linear form `d`: from the atoms' intervals, and by
    /// replacing atoms by their symbolic bounds (variables alone, then variables and loads) to
    /// let terms cancel. Returns the best bound found.
    fn sym_bound(&self, func: &PrimFunc, d: &Linear, upper: bool, depth: u32) -> Option<i128> {
        let dt = d.dt;
        // Constant evaluation from intervals.
        let mut direct = Some(d.konst);
        for (atom, c) in &d.terms {
            // Sound for the atom's actual value, wrapped or not.
            let iv = self.atom_interval(func, atom, dt);
            let side = if upper == (*c > 0) { iv.hi } else { iv.lo };
            direct = direct
                .zip(side)
                .and_then(|(acc, v)| c.checked_mul(v).and_then(|p| acc.checked_add(p)));
        }
        let mut best = direct;
        if depth == 0 {
            return best;
        }
        let better = |best: Option<i128>, v: Option<i128>| match (best, v) {
            (Some(b), Some(v)) => Some(if upper { b.min(v) } else { b.max(v) }),
            (b, v) => b.or(v),
        };
        for loads in [false, true] {
            let mut next = Linear::constant(dt, Mode::Exact, d.konst);
            let mut changed = false;
            for (atom, c) in &d.terms {
                let want_hi = upper == (*c > 0);
                // Only atoms of the form's own dtype: the facts bound values before any
                // conversion (an int32 -1 read as uint32 is not above its int32 bounds).
                let sym = match atom {
                    _ if atom.dtype(func) != dt => None,
                    Expr::Var(v) => self.ranges.get(v),
                    Expr::Load { buffer, .. } if loads => self.domains.get(buffer),
                    _ => None,
                };
                let replacement = sym
                    .map(|(lo, hi)| if want_hi { hi } else { lo })
                    .filter(|r| fold::literal(r).is_none());
                match replacement {
                    Some(r) => {
                        let lr = linear(func, r, dt, Mode::Exact)?;
                        next.add_scaled(&lr, *c)?;
                        changed = true;
                    }
                    None => next.add_term(atom.clone(), *c)?,
                }
            }
            if changed {
                let v = self.sym_bound(func, &next, upper, depth - 1);
                best = better(best, v);
            }
        }
        best
    }
}
