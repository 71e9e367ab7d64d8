//! The rewriting rules, applied bottom-up (children first) by [`Analyzer::simplify_once`].

use sparsetir_ir::{BinOp, DType, Expr, PrimFunc, UnOp};

use crate::bounds::cast_interval;
use crate::fold::{self, floor_div, floor_mod, make_int, signed_rep, Const};
use crate::linear::{cast_to, linear, to_expr, Linear, Mode};
use crate::Analyzer;

/// An exact linear form converted to wrapping mode (same value when it does not wrap).
fn to_wrap(l: &Linear) -> Linear {
    let dt = l.dt;
    Linear {
        dt,
        mode: Mode::Wrap,
        terms: l
            .terms
            .iter()
            .map(|(t, c)| (t.clone(), signed_rep(*c, dt)))
            .filter(|(_, c)| *c != 0)
            .collect(),
        konst: signed_rep(l.konst, dt),
    }
}

/// `q * c` for an exact linear form (saturating to an empty bound on overflow).
fn q_c(q: &Linear, c: i128) -> Linear {
    let mut out = Linear::constant(q.dt, Mode::Exact, 0);
    if out.add_scaled(q, c).is_none() {
        // Unrepresentable: a form whose bounds cannot fit.
        out = Linear::constant(q.dt, Mode::Exact, i128::MAX);
    }
    out
}

/// The float value of a constant converted to `dt`, if `e` is a constant.
fn float_value(e: &Expr, dt: DType) -> Option<f64> {
    match fold::cast(fold::literal(e)?, dt)? {
        Const::Float(x, _) => Some(x),
        _ => None,
    }
}

fn flip(op: BinOp) -> Option<BinOp> {
    Some(match op {
        BinOp::Eq => BinOp::Ne,
        BinOp::Ne => BinOp::Eq,
        BinOp::Lt => BinOp::Ge,
        BinOp::Le => BinOp::Gt,
        BinOp::Gt => BinOp::Le,
        BinOp::Ge => BinOp::Lt,
        _ => return None,
    })
}

fn is_int_like(dt: DType) -> bool {
    dt.is_integer() || dt.is_bool()
}

impl Analyzer {
    /// One bottom-up pass of every rule.
    pub(crate) fn simplify_once(&self, func: &PrimFunc, e: &Expr) -> Expr {
        match e {
            Expr::Int(..) | Expr::Float(..) | Expr::Bool(_) => fold::literal(e)
                .map(Const::to_expr)
                .unwrap_or_else(|| e.clone()),
            Expr::Var(_) => e.clone(),
            Expr::Binary(op, a, b) => {
                let a = self.simplify_once(func, a);
                let b = self.simplify_once(func, b);
                self.binary(func, *op, a, b)
            }
            Expr::Unary(op, a) => {
                let a = self.simplify_once(func, a);
                self.unary(func, *op, a)
            }
            Expr::Select(c, a, b) => {
                let c = self.simplify_once(func, c);
                let a = self.simplify_once(func, a);
                let b = self.simplify_once(func, b);
                self.select(func, c, a, b)
            }
            Expr::Cast(dt, a) => {
                let a = self.simplify_once(func, a);
                if let Some(c) = fold::literal(&a).and_then(|c| fold::cast(c, *dt)) {
                    return c.to_expr();
                }
                if a.dtype(func) == *dt {
                    return a;
                }
                Expr::Cast(*dt, Box::new(a))
            }
            Expr::Load { buffer, indices } => Expr::Load {
                buffer: *buffer,
                indices: indices
                    .iter()
                    .map(|i| self.simplify_once(func, i))
                    .collect(),
            },
            Expr::Call { op, args, dtype } => Expr::Call {
                op: *op,
                args: args.iter().map(|a| self.simplify_once(func, a)).collect(),
                dtype: *dtype,
            },
            Expr::Let { var, value, body } => {
                let body = self.simplify_once(func, body);
                if !body.mentions_any(&[*var]) {
                    return body;
                }
                Expr::Let {
                    var: *var,
                    value: Box::new(self.simplify_once(func, value)),
                    body: Box::new(body),
                }
            }
        }
    }

    fn binary(&self, func: &PrimFunc, op: BinOp, a: Expr, b: Expr) -> Expr {
        let e = Expr::binary(op, a.clone(), b.clone());
        let dt = e.dtype(func);
        if let (Some(x), Some(y)) = (fold::literal(&a), fold::literal(&b)) {
            return match fold::binary(op, x, y) {
                Some(c) if c.dtype() == dt => c.to_expr(),
                _ => e,
            };
        }
        match op {
            BinOp::Add | BinOp::Sub | BinOp::Mul if dt.is_integer() => {
                match linear(func, &e, dt, Mode::Wrap) {
                    Some(l) => to_expr(func, &l),
                    None => e,
                }
            }
            BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div if dt.is_float() => {
                self.float_rules(func, op, a, b, e)
            }
            BinOp::Div | BinOp::FloorDiv | BinOp::FloorMod if dt.is_integer() => {
                self.div_rules(func, op, a, b, e)
            }
            BinOp::Min | BinOp::Max => {
                if a == b {
                    return cast_to(func, a, dt);
                }
                if dt.is_integer() {
                    // (smaller, larger) once the order of a and b is proven.
                    let ordered = if self.prove_cmp(func, BinOp::Le, &a, &b) == Some(true) {
                        Some((a, b))
                    } else if self.prove_cmp(func, BinOp::Ge, &a, &b) == Some(true) {
                        Some((b, a))
                    } else {
                        None
                    };
                    if let Some((small, large)) = ordered {
                        let pick = if op == BinOp::Min { small } else { large };
                        return cast_to(func, pick, dt);
                    }
                }
                e
            }
            _ if op.is_comparison() => {
                let common = fold::common_dtype(a.dtype(func), b.dtype(func));
                if common.is_integer() && a == b {
                    return Expr::Bool(matches!(op, BinOp::Eq | BinOp::Le | BinOp::Ge));
                }
                match self.prove_cmp(func, op, &a, &b) {
                    Some(v) => Expr::Bool(v),
                    None => e,
                }
            }
            BinOp::And | BinOp::Or => self.logic(func, op, a, b, e),
            _ => e,
        }
    }

    /// Exact float identities only: `x * 1`, `x / 1`, `x - 0`, `x + (-0.0)`.
    fn float_rules(&self, func: &PrimFunc, op: BinOp, a: Expr, b: Expr, e: Expr) -> Expr {
        let dt = e.dtype(func);
        let same = |x: &Expr| x.dtype(func) == dt;
        let fa = float_value(&a, dt);
        let fb = float_value(&b, dt);
        let neg_zero = |v: Option<f64>| v.is_some_and(|x| x == 0.0 && x.is_sign_negative());
        let pos_zero = |v: Option<f64>| v.is_some_and(|x| x == 0.0 && x.is_sign_positive());
        match op {
            BinOp::Mul if fb == Some(1.0) && same(&a) => a,
            BinOp::Mul if fa == Some(1.0) && same(&b) => b,
            BinOp::Div if fb == Some(1.0) && same(&a) => a,
            BinOp::Sub if pos_zero(fb) && same(&a) => a,
            BinOp::Add if neg_zero(fb) && same(&a) => a,
            BinOp::Add if neg_zero(fa) && same(&b) => b,
            _ => e,
        }
    }

    /// `//`, `%` and `/` by a constant: from bounds, and by splitting off the multiples of the
    /// divisor: `(x*c + y) // c → x + y // c`, `(x*c + y) % c → y % c`.
    fn div_rules(&self, func: &PrimFunc, op: BinOp, a: Expr, b: Expr, e: Expr) -> Expr {
        let dt = e.dtype(func);
        let c = match fold::literal(&b).and_then(|k| fold::cast(k, dt)) {
            Some(Const::Int(c, _)) if c != 0 => c,
            _ => return e,
        };
        if op == BinOp::FloorMod && (c == 1 || c == -1) {
            return make_int(0, dt);
        }
        if op != BinOp::FloorMod && c == 1 {
            return cast_to(func, a, dt);
        }
        let ta = a.dtype(func);
        let ia = cast_interval(self.interval(func, &a, 0), ta, dt, self.assume_no_overflow);
        if let (Some(lo), Some(hi)) = (ia.lo, ia.hi) {
            let quot = |x: i128| {
                if op == BinOp::Div {
                    x / c
                } else {
                    floor_div(x, c)
                }
            };
            if quot(lo) == quot(hi) {
                let q = quot(lo);
                match op {
                    BinOp::FloorMod => {
                        if q == 0 {
                            return cast_to(func, a, dt);
                        }
                        let mut l = Linear::constant(dt, Mode::Wrap, -q * c);
                        l.add_term(cast_to(func, a, dt), 1);
                        return to_expr(func, &l);
                    }
                    _ => return make_int(q, dt),
                }
            }
        }
        // `%` by a power of two is exact under wrapping: 2^bits is a multiple of `c`, so a wrapped
        // sum keeps its residue.
        let residue_exact = op == BinOp::FloorMod && (c as u128).is_power_of_two();
        if c < 0 || op == BinOp::Div || ta != dt {
            return e;
        }
        let Some(la) = linear(func, &a, dt, Mode::Exact) else {
            return e;
        };
        if ia.wrap && !residue_exact && !self.linear_fits(func, &la) {
            return e;
        }
        let mut q = Linear::constant(dt, Mode::Exact, floor_div(la.konst, c));
        let mut r = Linear::constant(dt, Mode::Exact, floor_mod(la.konst, c));
        for (t, k) in &la.terms {
            if k % c == 0 {
                q.add_term(t.clone(), k / c);
            } else {
                r.add_term(t.clone(), *k);
            }
        }
        if q.terms.is_empty() && q.konst == 0 {
            return e;
        }
        let q_expr = to_expr(func, &to_wrap(&q));
        let r_expr = to_expr(func, &to_wrap(&r));
        if !residue_exact {
            // q and r must not wrap either (q * c may, while the whole sum does not).
            let qc = Expr::mul(q_expr.clone(), b.clone());
            let q_ok = !self.interval(func, &qc, 0).wrap || self.linear_fits(func, &q_c(&q, c));
            let r_ok = !self.interval(func, &r_expr, 0).wrap || self.linear_fits(func, &r);
            if !(q_ok && r_ok) {
                return e;
            }
        }
        let ir = self.interval(func, &r_expr, 0);
        let r_small = ir.lo.is_some_and(|l| l >= 0) && ir.hi.is_some_and(|h| h < c);
        match (op, r_small) {
            (BinOp::FloorDiv, true) => q_expr,
            (BinOp::FloorMod, true) => r_expr,
            (BinOp::FloorDiv, false) => Expr::add(q_expr, Expr::binary(BinOp::FloorDiv, r_expr, b)),
            _ => Expr::binary(BinOp::FloorMod, r_expr, b),
        }
    }

    fn logic(&self, func: &PrimFunc, op: BinOp, a: Expr, b: Expr, e: Expr) -> Expr {
        let is_bool = |x: &Expr| x.dtype(func) == DType::Bool;
        let ca = fold::literal(&a).map(Const::truthy);
        let cb = fold::literal(&b).map(Const::truthy);
        // `absorb`: the constant that decides the result alone (False for and, True for or).
        let absorb = op == BinOp::Or;
        if ca == Some(absorb) || cb == Some(absorb) {
            return Expr::Bool(absorb);
        }
        if ca == Some(!absorb) && is_bool(&b) {
            return b;
        }
        if cb == Some(!absorb) && is_bool(&a) {
            return a;
        }
        if a == b && is_bool(&a) {
            return a;
        }
        match self.prove_simplified(func, &e) {
            Some(v) => Expr::Bool(v),
            None => e,
        }
    }

    fn unary(&self, func: &PrimFunc, op: UnOp, a: Expr) -> Expr {
        let e = Expr::Unary(op, Box::new(a.clone()));
        let dt = e.dtype(func);
        if let Some(c) = fold::literal(&a) {
            return match fold::unary(op, c) {
                Some(c) if c.dtype() == dt => c.to_expr(),
                _ => e,
            };
        }
        match op {
            UnOp::Neg if dt.is_integer() => match linear(func, &e, dt, Mode::Wrap) {
                Some(l) => to_expr(func, &l),
                None => e,
            },
            UnOp::Neg => match a {
                Expr::Unary(UnOp::Neg, x) if x.dtype(func) == dt => *x,
                _ => e,
            },
            UnOp::Not => {
                match &a {
                    Expr::Unary(UnOp::Not, x) if x.dtype(func) == DType::Bool => {
                        return (**x).clone()
                    }
                    Expr::Binary(cop, x, y) if cop.is_comparison() => {
                        let (tx, ty) = (x.dtype(func), y.dtype(func));
                        if is_int_like(tx) && is_int_like(ty) {
                            if let Some(f) = flip(*cop) {
                                return Expr::binary(f, (**x).clone(), (**y).clone());
                            }
                        }
                    }
                    _ => {}
                }
                match self.prove_simplified(func, &e) {
                    Some(v) => Expr::Bool(v),
                    None => e,
                }
            }
        }
    }

    fn select(&self, func: &PrimFunc, c: Expr, a: Expr, b: Expr) -> Expr {
        let e = Expr::Select(
            Box::new(c.clone()),
            Box::new(a.clone()),
            Box::new(b.clone()),
        );
        let dt = e.dtype(func);
        if a == b {
            return cast_to(func, a, dt);
        }
        let truth = match fold::literal(&c) {
            Some(k) => Some(k.truthy()),
            None => self.prove_simplified(func, &c),
        };
        match truth {
            Some(true) => cast_to(func, a, dt),
            Some(false) => cast_to(func, b, dt),
            None => e,
        }
    }
}
