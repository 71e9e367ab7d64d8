//! Integer interval analysis. An [`Interval`] is sound for the value an expression actually
//! takes (after wrapping); `wrap` records that the value may differ from the exact-integer value
//! of the formula (a possible overflow). By default every integer without a known range takes
//! its dtype's full range, so every possible overflow is seen; with `assume_no_overflow`, 32/64-bit
//! signed quantities without a range are unbounded (`None`) and assumed not to overflow.

use sparsetir_ir::{BinOp, DType, Expr, PrimFunc, UnOp};

use crate::fold::{self, floor_div, floor_mod, int_range, Const};
use crate::Analyzer;

/// Inclusive bounds of an integer value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Interval {
    pub lo: Option<i128>,
    pub hi: Option<i128>,
    pub wrap: bool,
}

impl Interval {
    pub const UNKNOWN: Interval = Interval {
        lo: None,
        hi: None,
        wrap: false,
    };

    pub fn point(v: i128) -> Interval {
        Interval {
            lo: Some(v),
            hi: Some(v),
            wrap: false,
        }
    }
    pub fn new(lo: Option<i128>, hi: Option<i128>) -> Interval {
        Interval {
            lo,
            hi,
            wrap: false,
        }
    }
    fn with_wrap(mut self, w: bool) -> Interval {
        self.wrap |= w;
        self
    }
    pub fn as_point(&self) -> Option<i128> {
        match (self.lo, self.hi) {
            (Some(a), Some(b)) if a == b => Some(a),
            _ => None,
        }
    }
}

/// What is known of any value of dtype `dt` without further information: its full range; with
/// `assume` (no overflow of symbolic values) only the full range of narrow types and the
/// non-negativity of unsigned ones, nothing for 32/64-bit signed values.
pub(crate) fn dtype_default(dt: DType, assume: bool) -> Interval {
    if dt.is_bool() {
        return Interval::new(Some(0), Some(1));
    }
    if !dt.is_integer() {
        return Interval::UNKNOWN;
    }
    let (lo, hi) = int_range(dt);
    if !assume || dt.bits() <= 16 {
        Interval::new(Some(lo), Some(hi))
    } else if dt.is_uint() {
        Interval::new(Some(0), None)
    } else {
        Interval::UNKNOWN
    }
}

/// Clamps an interval computed with exact arithmetic to what a value of `dt` can hold: known
/// sides outside the range mean a possible wrap (then the whole range is the answer), and so do
/// unknown sides where the dtype bounds that side (unless `assume`, only narrow/unsigned types).
pub(crate) fn fit(iv: Interval, dt: DType, assume: bool) -> Interval {
    if !dt.is_integer() && !dt.is_bool() {
        return Interval::UNKNOWN;
    }
    let (min, max) = int_range(dt);
    let out_lo = iv.lo.is_some_and(|l| l < min || l > max);
    let out_hi = iv.hi.is_some_and(|h| h > max || h < min);
    if out_lo || out_hi {
        return Interval {
            lo: Some(min),
            hi: Some(max),
            wrap: true,
        };
    }
    let d = dtype_default(dt, assume);
    let unknown_side = (iv.lo.is_none() && d.lo.is_some()) || (iv.hi.is_none() && d.hi.is_some());
    if unknown_side {
        return Interval {
            lo: Some(min),
            hi: Some(max),
            wrap: true,
        };
    }
    iv
}

/// The interval of a value of dtype `from` converted to `to`.
pub(crate) fn cast_interval(iv: Interval, from: DType, to: DType, assume: bool) -> Interval {
    if from == to {
        return iv;
    }
    if from.is_float() || from == DType::Handle {
        return dtype_default(to, assume);
    }
    if to.is_bool() {
        return Interval::new(Some(0), Some(1)).with_wrap(iv.wrap);
    }
    fit(iv, to, assume)
}

fn add(a: Option<i128>, b: Option<i128>) -> Option<Option<i128>> {
    match (a, b) {
        (Some(x), Some(y)) => x.checked_add(y).map(Some),
        _ => Some(None),
    }
}

fn min_max(vals: &[Option<i128>]) -> Interval {
    if vals.iter().any(|v| v.is_none()) {
        return Interval::UNKNOWN;
    }
    let vs: Vec<i128> = vals.iter().flatten().copied().collect();
    Interval::new(vs.iter().min().copied(), vs.iter().max().copied())
}

/// Marks the overflow of exact `i128` arithmetic itself: unknown and wrapping.
const OVERFLOW: Interval = Interval {
    lo: None,
    hi: None,
    wrap: true,
};

fn mul(a: Interval, b: Interval) -> Interval {
    let m = |x: Option<i128>, y: Option<i128>| match (x, y) {
        (Some(x), Some(y)) => x.checked_mul(y).map(Some),
        _ => Some(None),
    };
    let corners = [m(a.lo, b.lo), m(a.lo, b.hi), m(a.hi, b.lo), m(a.hi, b.hi)];
    if corners.iter().any(|c| c.is_none()) {
        return OVERFLOW;
    }
    let c: Vec<Option<i128>> = corners.iter().map(|c| c.flatten()).collect();
    if c.iter().all(|v| v.is_some()) {
        return min_max(&c);
    }
    // One side is a constant: scale the other.
    let scale = |iv: Interval, k: i128| -> Interval {
        let (lo, hi) = (
            iv.lo.and_then(|v| v.checked_mul(k)),
            iv.hi.and_then(|v| v.checked_mul(k)),
        );
        if k >= 0 {
            Interval::new(lo, hi)
        } else {
            Interval::new(hi, lo)
        }
    };
    if let Some(k) = b.as_point() {
        return scale(a, k);
    }
    if let Some(k) = a.as_point() {
        return scale(b, k);
    }
    // Both non-negative: the product is at least the product of the lower bounds.
    if let (Some(al), Some(bl)) = (a.lo, b.lo) {
        if al >= 0 && bl >= 0 {
            return Interval::new(al.checked_mul(bl), None);
        }
    }
    Interval::UNKNOWN
}

fn trunc_div(x: i128, y: i128) -> i128 {
    x / y
}

/// `a // b` (`floor`) or `a / b` (`trunc`), for divisors of one sign.
fn div(a: Interval, b: Interval, f: fn(i128, i128) -> i128) -> Interval {
    let (Some(bl), Some(bh)) = (b.lo, b.hi) else {
        return Interval::UNKNOWN;
    };
    if bl <= 0 && bh >= 0 {
        return Interval::UNKNOWN;
    }
    if bl == bh {
        let c = bl;
        let (lo, hi) = (a.lo.map(|v| f(v, c)), a.hi.map(|v| f(v, c)));
        return if c > 0 {
            Interval::new(lo, hi)
        } else {
            Interval::new(hi, lo)
        };
    }
    if let (Some(al), Some(ah)) = (a.lo, a.hi) {
        let c = [f(al, bl), f(al, bh), f(ah, bl), f(ah, bh)];
        return Interval::new(c.iter().min().copied(), c.iter().max().copied());
    }
    if bl > 0 && a.lo.is_some_and(|l| l >= 0) {
        return Interval::new(Some(0), a.hi.map(|h| f(h, bl)));
    }
    Interval::UNKNOWN
}

fn modulo(a: Interval, b: Interval) -> Interval {
    if let Some(c) = b.as_point() {
        if c == 0 {
            return Interval::UNKNOWN;
        }
        if let (Some(al), Some(ah)) = (a.lo, a.hi) {
            if floor_div(al, c) == floor_div(ah, c) {
                return Interval::new(Some(floor_mod(al, c)), Some(floor_mod(ah, c)));
            }
        }
        return if c > 0 {
            Interval::new(Some(0), Some(c - 1))
        } else {
            Interval::new(Some(c + 1), Some(0))
        };
    }
    match (b.lo, b.hi) {
        (Some(bl), bh) if bl > 0 => {
            let mut hi = bh.map(|h| h - 1);
            if a.lo.is_some_and(|l| l >= 0) {
                if let Some(ah) = a.hi {
                    hi = Some(hi.map_or(ah, |h| h.min(ah)));
                }
            }
            Interval::new(Some(0), hi)
        }
        (bl, Some(bh)) if bh < 0 => Interval::new(bl.map(|l| l + 1), Some(0)),
        _ => Interval::UNKNOWN,
    }
}

const MAX_DEPTH: u32 = 12;

impl Analyzer {
    /// Bounds of the value of the integer (or bool) expression `e`.
    pub(crate) fn interval(&self, func: &PrimFunc, e: &Expr, depth: u32) -> Interval {
        self.interval_in(func, e, depth, false)
    }

    /// Bounds of the value of `e`, or with `exact` of the exact-integer value of its arithmetic
    /// (no wrapping of `+ - * // % min max` nodes): the reading of the bounds of a fact.
    fn interval_in(&self, func: &PrimFunc, e: &Expr, depth: u32, exact: bool) -> Interval {
        let dt = e.dtype(func);
        if !(dt.is_integer() || dt.is_bool()) {
            return Interval::UNKNOWN;
        }
        let assume = self.assume_no_overflow;
        if depth > MAX_DEPTH {
            return dtype_default(dt, assume);
        }
        let d = depth + 1;
        // A sub-expression's interval converted to this node's dtype.
        let sub = |x: &Expr, to: DType| {
            let iv = self.interval_in(func, x, d, exact);
            if exact && x.dtype(func) == to {
                iv
            } else {
                cast_interval(iv, x.dtype(func), to, assume)
            }
        };
        // The bounds of a fact: exact, then converted to `dt`.
        let fact = |x: &Expr| {
            let iv = self.interval_in(func, x, d, true);
            cast_interval(iv, x.dtype(func), dt, assume)
        };
        let iv = match e {
            Expr::Int(..) | Expr::Bool(_) => match fold::literal(e) {
                Some(Const::Int(v, _)) => Interval::point(v),
                Some(Const::Bool(b)) => Interval::point(b as i128),
                _ => Interval::UNKNOWN,
            },
            Expr::Var(v) => match self.ranges.get(v) {
                Some((lo, hi)) => {
                    let l = fact(lo);
                    let h = fact(hi);
                    Interval {
                        lo: l.lo,
                        hi: h.hi,
                        wrap: false,
                    }
                }
                None if self.nonnegative.contains(v) => {
                    let d = dtype_default(dt, assume);
                    Interval::new(Some(d.lo.map_or(0, |l| l.max(0))), d.hi)
                }
                None => dtype_default(dt, assume),
            },
            Expr::Load { buffer, .. } => match self.domains.get(buffer) {
                Some((lo, hi)) => {
                    let l = fact(lo);
                    let h = fact(hi);
                    Interval {
                        lo: l.lo,
                        hi: h.hi,
                        wrap: false,
                    }
                }
                None => dtype_default(dt, assume),
            },
            Expr::Binary(op, _, _) if op.is_comparison() || op.is_logical() => {
                Interval::new(Some(0), Some(1))
            }
            Expr::Binary(op, a, b) => {
                let ia = sub(a, dt);
                let ib = sub(b, dt);
                let w = ia.wrap || ib.wrap;
                let r = match op {
                    BinOp::Add => match (add(ia.lo, ib.lo), add(ia.hi, ib.hi)) {
                        (Some(lo), Some(hi)) => Interval::new(lo, hi),
                        _ => OVERFLOW,
                    },
                    BinOp::Sub => {
                        let neg = |v: Option<i128>| v.map(|x| -x);
                        match (add(ia.lo, neg(ib.hi)), add(ia.hi, neg(ib.lo))) {
                            (Some(lo), Some(hi)) => Interval::new(lo, hi),
                            _ => OVERFLOW,
                        }
                    }
                    BinOp::Mul => mul(ia, ib),
                    BinOp::FloorDiv => div(ia, ib, floor_div),
                    BinOp::Div => div(ia, ib, trunc_div),
                    BinOp::FloorMod => modulo(ia, ib),
                    BinOp::Min => {
                        let lo = ia.lo.zip(ib.lo).map(|(x, y)| x.min(y));
                        let hi = match (ia.hi, ib.hi) {
                            (Some(x), Some(y)) => Some(x.min(y)),
                            (x, y) => x.or(y),
                        };
                        Interval::new(lo, hi)
                    }
                    BinOp::Max => {
                        let hi = ia.hi.zip(ib.hi).map(|(x, y)| x.max(y));
                        let lo = match (ia.lo, ib.lo) {
                            (Some(x), Some(y)) => Some(x.max(y)),
                            (x, y) => x.or(y),
                        };
                        Interval::new(lo, hi)
                    }
                    // `x & m` has only bits of `m`: within [0, m] for m >= 0.
                    BinOp::BitAnd => {
                        let mask = |i: &Interval| i.lo.filter(|l| *l >= 0).and(i.hi);
                        match (mask(&ib), mask(&ia)) {
                            (Some(m), _) | (None, Some(m)) => Interval::new(Some(0), Some(m)),
                            _ => Interval::UNKNOWN,
                        }
                    }
                    // A non-negative value shifted right by a known in-range amount.
                    BinOp::Shr => match (ia.lo, ia.hi, ib.lo, ib.hi) {
                        (Some(lo), Some(hi), Some(s), Some(t))
                            if lo >= 0 && s == t && (0..64).contains(&s) =>
                        {
                            Interval::new(Some(lo >> s), Some(hi >> s))
                        }
                        _ => Interval::UNKNOWN,
                    },
                    _ => Interval::UNKNOWN,
                };
                r.with_wrap(w)
            }
            Expr::Unary(UnOp::Not, _) => Interval::new(Some(0), Some(1)),
            Expr::Unary(UnOp::Neg, a) => {
                let ia = sub(a, dt);
                Interval::new(ia.hi.map(|v| -v), ia.lo.map(|v| -v)).with_wrap(ia.wrap)
            }
            Expr::Select(_, a, b) => {
                let ia = sub(a, dt);
                let ib = sub(b, dt);
                let lo = ia.lo.zip(ib.lo).map(|(x, y)| x.min(y));
                let hi = ia.hi.zip(ib.hi).map(|(x, y)| x.max(y));
                Interval::new(lo, hi).with_wrap(ia.wrap || ib.wrap)
            }
            Expr::Cast(to, x) => sub(x, *to),
            Expr::Let { body, .. } => sub(body, dt),
            Expr::Call { .. } | Expr::Float(..) => dtype_default(dt, assume),
        };
        if exact {
            // Unknown sides stay unknown unless the dtype bounds them.
            let dd = dtype_default(dt, assume);
            return Interval {
                lo: iv.lo.or(dd.lo),
                hi: iv.hi.or(dd.hi),
                wrap: false,
            };
        }
        fit(iv, dt, assume)
    }
}
