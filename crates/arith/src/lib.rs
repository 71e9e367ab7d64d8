//! Arithmetic simplifier and bound analysis for sparsetir expressions (index arithmetic first):
//! constant folding with dtype-exact semantics, canonical sums and products, `floordiv` /
//! `floormod` with known bounds, `min`/`max`/comparisons/`select` decided from bounds.
//!
//! Soundness: every rewrite keeps the value of the expression (and its dtype) wherever the
//! original evaluates without error, *given the facts bound to the analyzer* (variable ranges and
//! buffer domains hold in exact integer arithmetic, as loop and block domains do). Integer sums
//! and products are rewritten with ring identities modulo 2^bits, so they are exact even when
//! they wrap. Rules that depend on bounds use intervals that track possible wrapping: an integer
//! without a known range takes its dtype's full range, so `(x * 4) // 4` stays as is for an
//! unbounded int32 `x` (it would be wrong when `x * 4` wraps). [`Analyzer::assume_no_overflow`]
//! opts into the usual index-arithmetic assumption (as C's signed overflow rule does): unknown
//! 32/64-bit signed quantities are unbounded and never wrap.
//!
//! - [`Analyzer`]: known variable ranges and buffer value domains, and the queries;
//! - [`simplify`]: simplification without any knowledge.

mod bounds;
mod fold;
mod linear;
mod prove;
mod rewrite;

use std::collections::{HashMap, HashSet};

use sparsetir_ir::{BufferId, Expr, PrimFunc, VarId};

/// Facts about variables and buffers, and the simplifier and prover that use them.
#[derive(Clone, Debug, Default)]
pub struct Analyzer {
    /// Variable → inclusive `(min, max)`, already simplified.
    ranges: HashMap<VarId, (Expr, Expr)>,
    /// Buffer → inclusive `(lo, hi)` of every value it holds.
    domains: HashMap<BufferId, (Expr, Expr)>,
    /// Whether unknown 32/64-bit signed quantities are assumed never to overflow.
    assume_no_overflow: bool,
    /// Variables without a range known to be non-negative (sizes).
    nonnegative: HashSet<VarId>,
}

/// How many times [`Analyzer::simplify`] reapplies its rules at most (it stops at a fixpoint).
const MAX_ROUNDS: usize = 4;

impl Analyzer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets whether 32/64-bit signed quantities without a known range are assumed never to
    /// overflow (default: `false`, every possible wrap is accounted for). With `true`,
    /// `(n * 4 + m) // 4 → n + m // 4` and `n - 1 < n → True` for unbounded `n`, `m`: right for
    /// index arithmetic, where an overflow is a bug anyway, wrong for wrapping arithmetic.
    pub fn assume_no_overflow(&mut self, yes: bool) -> &mut Self {
        self.assume_no_overflow = yes;
        self
    }

    /// Records that `v` takes values in `[min, min + extent)` (a loop or block iterator domain).
    /// `min` and `extent` may be symbolic. Rebinding a variable replaces its range. The bounds
    /// are stored without simplification against the function, so call it with simple
    /// expressions (those written in loops and blocks are).
    pub fn bind_range(&mut self, v: VarId, min: &Expr, extent: &Expr) {
        let max = Expr::sub(Expr::add(min.clone(), extent.clone()), Expr::int(1));
        self.ranges.insert(v, (min.clone(), max));
    }

    /// Records that `v` takes values in `[lo, hi]` (both inclusive).
    pub fn bind_inclusive(&mut self, v: VarId, lo: &Expr, hi: &Expr) {
        self.ranges.insert(v, (lo.clone(), hi.clone()));
    }

    /// Records that `v` is never negative, with no upper bound (a size: an axis length or an
    /// `nnz`). Without `assume_no_overflow` its upper bound is its dtype's.
    pub fn bind_nonnegative(&mut self, v: VarId) {
        self.nonnegative.insert(v);
    }

    /// Forgets what was bound to `v` (leaving a loop's scope).
    pub fn unbind(&mut self, v: VarId) {
        self.ranges.remove(&v);
    }

    /// Records that every value of buffer `b` lies in `[lo, hi]`, from
    /// `T.assume_buffer_domain(b, (lo, hi))`. `hi` is taken as *inclusive*: an `indptr` array's
    /// last value is its axis's `nnz`, so the half-open reading would be unsound for it.
    pub fn bind_buffer_domain(&mut self, b: BufferId, lo: &Expr, hi: &Expr) {
        self.domains.insert(b, (lo.clone(), hi.clone()));
    }

    /// Simplifies `e` (an expression of `func`): the result has the same dtype and the same
    /// value wherever `e` evaluates without error.
    pub fn simplify(&self, func: &PrimFunc, e: &Expr) -> Expr {
        self.simplify_fixpoint(func, e)
    }

    /// Inclusive constant bounds of the integer (or bool) expression `e`, when provable. Without
    /// facts an integer has its dtype's full range (`None` for unbounded sides only under
    /// [`Analyzer::assume_no_overflow`]).
    pub fn const_bounds(&self, func: &PrimFunc, e: &Expr) -> Option<(i64, i64)> {
        let s = self.simplify(func, e);
        let iv = self.interval(func, &s, 0);
        let lo = i64::try_from(iv.lo?).ok()?;
        let hi = i64::try_from(iv.hi?).ok()?;
        Some((lo, hi))
    }

    /// The values the integer expression `e` takes while the variables `inner` run and the
    /// others stay fixed, as `(base, extent)`: `e` lies in `[base, base + extent)`, `base` free
    /// of `inner`. `base` is the sum of the terms of the simplified `e`'s linear form that use
    /// no `inner` variable (plus the rest's lower bound), `extent` the constant span of the
    /// rest — so a gather through a bounded index (`32 * q + 4 * r + J_indices[...]`, the
    /// load's domain `[0, 3]`, `r` in `[0, 8)`) gives `(32 * q, 32)`. `None` where the rest
    /// has no constant bounds.
    pub fn range_over(&self, func: &PrimFunc, e: &Expr, inner: &[VarId]) -> Option<(Expr, i64)> {
        let dt = e.dtype(func);
        if !dt.is_integer() {
            return None;
        }
        let s = self.simplify(func, e);
        let uses = |x: &Expr| {
            let mut hit = false;
            x.visit(&mut |y| hit |= matches!(y, Expr::Var(v) if inner.contains(v)));
            hit
        };
        // The linear form's terms, those that move with `inner` apart.
        let form = linear::linear(func, &s, dt, linear::Mode::Wrap)?;
        let mut moving = linear::Linear::constant(dt, linear::Mode::Wrap, 0);
        let mut fixed = linear::Linear::constant(dt, linear::Mode::Wrap, form.konst);
        for (t, c) in form.terms {
            let part = if uses(&t) { &mut moving } else { &mut fixed };
            part.add_term(t, c)?;
        }
        let (lo, hi) = self.const_bounds(func, &linear::to_expr(func, &moving))?;
        let base = self.simplify(
            func,
            &Expr::add(linear::to_expr(func, &fixed), Expr::Int(lo, dt)),
        );
        (!uses(&base)).then_some((base, hi - lo + 1))
    }

    /// Writes the integer expression `e` as `m * q + s`, `q` an integer expression and `m > 0`,
    /// and returns inclusive constant bounds of `s`: `q` gathers the terms of the simplified
    /// `e`'s linear form whose coefficient is a multiple of `m`, and the nearest multiple of `m`
    /// to its constant; `s` is the rest. `32 * k - 32 * k' + j` with `j` in `[0, 4)` and
    /// `m = 32` gives `(0, 3)`: whatever `k` and `k'` are, `e` is a multiple of 32 plus 0 to 3.
    /// `None` where the rest has no constant bounds or the form overflows.
    pub fn remainder_bounds(&self, func: &PrimFunc, e: &Expr, m: i64) -> Option<(i64, i64)> {
        let dt = e.dtype(func);
        if !dt.is_integer() || m <= 0 {
            return None;
        }
        let m = i128::from(m);
        let s = self.simplify(func, e);
        // Exact coefficients: a wrapped one would not be a multiple of `m` in the integers.
        let form = linear::linear(func, &s, dt, linear::Mode::Exact)?;
        let near = (form.konst + m / 2).div_euclid(m) * m;
        let mut rest = linear::Linear::constant(dt, linear::Mode::Exact, form.konst - near);
        for (t, c) in form.terms {
            if c % m != 0 {
                rest.add_term(t, c)?;
            }
        }
        self.const_bounds(func, &linear::to_expr(func, &rest))
    }

    /// `Some(v)` when the condition `cond` provably always has the truth value `v`.
    pub fn prove(&self, func: &PrimFunc, cond: &Expr) -> Option<bool> {
        let s = self.simplify(func, cond);
        self.prove_simplified(func, &s)
    }

    /// Whether `a` and `b` provably always have the same value (and dtype).
    pub fn can_prove_equal(&self, func: &PrimFunc, a: &Expr, b: &Expr) -> bool {
        let sa = self.simplify(func, a);
        let sb = self.simplify(func, b);
        if sa == sb {
            return true;
        }
        let (da, db) = (sa.dtype(func), sb.dtype(func));
        if da == db && (da.is_integer() || da.is_bool()) {
            return self.prove_cmp(func, sparsetir_ir::BinOp::Eq, &sa, &sb) == Some(true);
        }
        false
    }

    fn simplify_fixpoint(&self, func: &PrimFunc, e: &Expr) -> Expr {
        let mut cur = self.simplify_once(func, e);
        for _ in 1..MAX_ROUNDS {
            let next = self.simplify_once(func, &cur);
            if next == cur {
                break;
            }
            cur = next;
        }
        cur
    }
}

/// Simplifies `e` knowing nothing about its variables.
pub fn simplify(func: &PrimFunc, e: &Expr) -> Expr {
    Analyzer::new().simplify_fixpoint(func, e)
}
