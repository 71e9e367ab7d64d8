//! The index-expression simplifier of the lowering passes: a thin wrapper over
//! [`sparsetir_arith::Analyzer`] in index mode (`assume_no_overflow`), which knows the ranges of
//! the loop and block iterators built so far and the domain hints of the auxiliary buffers, so
//! extents, positions and regions print in their simplest form.

use sparsetir_arith::Analyzer;
use sparsetir_ir::{BufferId, Expr, PrimFunc, VarId};

/// Facts gathered while lowering, and simplification against them.
#[derive(Clone, Debug)]
pub(crate) struct Simplifier {
    an: Analyzer,
}

impl Default for Simplifier {
    fn default() -> Self {
        Self::new()
    }
}

impl Simplifier {
    pub fn new() -> Simplifier {
        let mut an = Analyzer::new();
        an.assume_no_overflow(true);
        Simplifier { an }
    }

    /// `v` ranges over `[min, min + extent)`. Every loop and block variable the passes create is
    /// fresh, so its range holds wherever it is used and is never unbound.
    pub fn bind_range(&mut self, v: VarId, min: &Expr, extent: &Expr) {
        self.an.bind_range(v, min, extent);
    }

    /// `v` is never negative (a size parameter), with no upper bound.
    pub fn bind_nonnegative(&mut self, v: VarId) {
        self.an.bind_nonnegative(v);
    }

    /// Every value of `b` lies in `[lo, hi]` (inclusive, as `indptr` arrays reach `nnz`).
    pub fn bind_domain(&mut self, b: BufferId, lo: &Expr, hi: &Expr) {
        self.an.bind_buffer_domain(b, lo, hi);
    }

    pub fn simplify(&self, f: &PrimFunc, e: &Expr) -> Expr {
        self.an.simplify(f, e)
    }

    /// For expressions written by the user (access indices): the simplified form only when it is
    /// strictly smaller, so `4 * (g % c) + j` keeps its written order while `i + 0` or
    /// `(i * 4 + 1) // 4` fold.
    pub fn simplify_if_smaller(&self, f: &PrimFunc, e: &Expr) -> Expr {
        let s = self.simplify(f, e);
        if size(&s) < size(e) {
            s
        } else {
            e.clone()
        }
    }

    /// `a + b`, simplified.
    pub fn add(&self, f: &PrimFunc, a: Expr, b: Expr) -> Expr {
        self.simplify(f, &Expr::add(a, b))
    }

    /// `a - b`, simplified.
    pub fn sub(&self, f: &PrimFunc, a: Expr, b: Expr) -> Expr {
        self.simplify(f, &Expr::sub(a, b))
    }

    /// `Some(v)` when `cond` provably always has the truth value `v`.
    pub fn prove(&self, f: &PrimFunc, cond: &Expr) -> Option<bool> {
        self.an.prove(f, cond)
    }

    /// `b - a` when it simplifies to a constant.
    pub fn const_diff(&self, f: &PrimFunc, a: &Expr, b: &Expr) -> Option<i64> {
        if a == b {
            return Some(0);
        }
        self.sub(f, b.clone(), a.clone()).as_int()
    }
}

/// Number of nodes of `e`.
fn size(e: &Expr) -> usize {
    let mut n = 0;
    e.visit(&mut |_| n += 1);
    n
}
