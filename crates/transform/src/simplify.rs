//! A minimal local constant folder for the index expressions the passes build (`x + 0`,
//! `(x + 1) - 1`, `c1 + c2`), so printed IR stays readable until the arithmetic simplifier
//! crate is wired in.

use sparsetir_ir::{BinOp, DType, Expr};

/// Splits `e` into `(base, constant)` with `e == base + constant` (`base = None` for constants).
pub(crate) fn split_const(e: &Expr) -> (Option<Expr>, i64) {
    match e {
        Expr::Int(c, _) => (None, *c),
        Expr::Binary(BinOp::Add, a, b) => match b.as_ref() {
            Expr::Int(c, _) => {
                let (base, k) = split_const(a);
                (base, k.saturating_add(*c))
            }
            _ => (Some(e.clone()), 0),
        },
        Expr::Binary(BinOp::Sub, a, b) => match b.as_ref() {
            Expr::Int(c, _) => {
                let (base, k) = split_const(a);
                (base, k.saturating_sub(*c))
            }
            _ => (Some(e.clone()), 0),
        },
        _ => (Some(e.clone()), 0),
    }
}

/// Rebuilds `base + c` in the simplest form.
pub(crate) fn join_const(base: Option<Expr>, c: i64) -> Expr {
    match base {
        None => Expr::Int(c, DType::I32),
        Some(b) if c == 0 => b,
        Some(b) if c > 0 => Expr::add(b, Expr::int(c)),
        Some(b) => Expr::sub(b, Expr::Int(c.saturating_neg(), DType::I32)),
    }
}

/// `a + b`, folded where one side is constant.
pub(crate) fn add(a: Expr, b: Expr) -> Expr {
    if let Some(c) = b.as_int() {
        let (base, k) = split_const(&a);
        return join_const(base, k.saturating_add(c));
    }
    if a.as_int() == Some(0) {
        return b;
    }
    Expr::add(a, b)
}

/// `a - b`, folded where `b` is constant or both sides are equal.
pub(crate) fn sub(a: Expr, b: Expr) -> Expr {
    if a == b {
        return Expr::int(0);
    }
    if let Some(c) = b.as_int() {
        let (base, k) = split_const(&a);
        return join_const(base, k.saturating_sub(c));
    }
    let (ba, ka) = split_const(&a);
    let (bb, kb) = split_const(&b);
    if ba.is_some() && ba == bb {
        return Expr::int(ka.saturating_sub(kb));
    }
    Expr::sub(a, b)
}
