//! Linear forms of integer expressions: `c0 + sum(coeff_i * atom_i)`, where atoms are maximal
//! subexpressions that are not sums, differences, negations or products by a constant. Used to
//! collect like terms and to reason about differences of index expressions.
//!
//! Two modes: *wrapping* (coefficients modulo 2^bits of the dtype; every rewrite is a ring
//! identity, so always sound) and *exact* (checked `i128` arithmetic; the value equals the
//! expression's only when nothing wraps, which the caller establishes with bounds).

use sparsetir_ir::expr::binary_result_dtype;
use sparsetir_ir::{BinOp, DType, Expr, PrimFunc, UnOp};

use crate::fold::{self, make_int, signed_rep, Const};

/// How coefficients combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Modulo 2^bits of the dtype (signed representatives).
    Wrap,
    /// Exact; `None` on `i128` overflow.
    Exact,
}

/// `konst + sum(terms[i].1 * terms[i].0)` in dtype `dt`. Terms are kept in first-appearance
/// order, without duplicates or zero coefficients.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Linear {
    pub dt: DType,
    pub mode: Mode,
    pub terms: Vec<(Expr, i128)>,
    pub konst: i128,
}

impl Linear {
    pub fn constant(dt: DType, mode: Mode, k: i128) -> Linear {
        let mut l = Linear {
            dt,
            mode,
            terms: Vec::new(),
            konst: 0,
        };
        l.konst = l.norm(k);
        l
    }

    pub fn is_const(&self) -> bool {
        self.terms.is_empty()
    }

    fn norm(&self, v: i128) -> i128 {
        match self.mode {
            Mode::Wrap => signed_rep(v, self.dt),
            Mode::Exact => v,
        }
    }

    fn mul_coef(&self, a: i128, b: i128) -> Option<i128> {
        match self.mode {
            Mode::Wrap => Some(self.norm(a.wrapping_mul(b))),
            Mode::Exact => a.checked_mul(b),
        }
    }

    fn add_coef(&self, a: i128, b: i128) -> Option<i128> {
        match self.mode {
            Mode::Wrap => Some(self.norm(a.wrapping_add(b))),
            Mode::Exact => a.checked_add(b),
        }
    }

    /// Adds `scale * atom`.
    pub fn add_term(&mut self, atom: Expr, scale: i128) -> Option<()> {
        if let Some(pos) = self.terms.iter().position(|(t, _)| *t == atom) {
            let c = self.add_coef(self.terms[pos].1, scale)?;
            if c == 0 {
                self.terms.remove(pos);
            } else {
                self.terms[pos].1 = c;
            }
        } else {
            let c = self.norm(scale);
            if c != 0 {
                self.terms.push((atom, c));
            }
        }
        Some(())
    }

    /// Adds `scale * other`.
    pub fn add_scaled(&mut self, other: &Linear, scale: i128) -> Option<()> {
        let k = self.mul_coef(other.konst, scale)?;
        self.konst = self.add_coef(self.konst, k)?;
        for (t, c) in &other.terms {
            let c = self.mul_coef(*c, scale)?;
            self.add_term(t.clone(), c)?;
        }
        Some(())
    }
}

impl Linear {
    /// Folds `c * k * (x // k) + c * (x % k)` into `c * x` (`k` a nonzero constant): floor
    /// division and modulo rebuild `x` exactly, so modulo 2^bits too. A fused loop's indices
    /// `f // n` and `f % n`, flattened again, read as `f`.
    fn merge_div_mod(&mut self, func: &PrimFunc) -> Option<()> {
        loop {
            let mut hit = None;
            for (p, (t, c)) in self.terms.iter().enumerate() {
                let Expr::Binary(BinOp::FloorMod, x, k) = t else {
                    continue;
                };
                let Some(Const::Int(kv, _)) = fold::literal(k) else {
                    continue;
                };
                if kv == 0 {
                    continue;
                }
                let Some(want) = self.mul_coef(*c, kv) else {
                    continue;
                };
                let q = self.terms.iter().position(|(u, d)| {
                    *d == want
                        && matches!(u, Expr::Binary(BinOp::FloorDiv, x2, k2) if x2 == x && k2 == k)
                });
                if let Some(q) = q {
                    hit = Some((p, q, (**x).clone(), *c));
                    break;
                }
            }
            let Some((p, q, x, c)) = hit else {
                return Some(());
            };
            self.terms.remove(p.max(q));
            self.terms.remove(p.min(q));
            let lx = linear(func, &x, self.dt, self.mode)?;
            self.add_scaled(&lx, c)?;
        }
    }
}

/// The linear form of `e` as a value of dtype `dt` (an expression of another dtype is an atom,
/// converted to `dt`; constants are converted). `None` only on exact-mode overflow.
pub(crate) fn linear(func: &PrimFunc, e: &Expr, dt: DType, mode: Mode) -> Option<Linear> {
    if let Some(c) = fold::literal(e) {
        if let Some(Const::Int(v, _)) = fold::cast(c, dt) {
            return Some(Linear::constant(dt, mode, v));
        }
    }
    let mut out = Linear::constant(dt, mode, 0);
    if e.dtype(func) != dt {
        out.add_term(e.clone(), 1)?;
        return Some(out);
    }
    match e {
        Expr::Binary(op @ (BinOp::Add | BinOp::Sub), a, b) => {
            let la = linear(func, a, dt, mode)?;
            let lb = linear(func, b, dt, mode)?;
            out.add_scaled(&la, 1)?;
            out.add_scaled(&lb, if *op == BinOp::Add { 1 } else { -1 })?;
            out.merge_div_mod(func)?;
        }
        Expr::Binary(BinOp::Mul, a, b) => {
            let la = linear(func, a, dt, mode)?;
            let lb = linear(func, b, dt, mode)?;
            if la.is_const() {
                out.add_scaled(&lb, la.konst)?;
            } else if lb.is_const() {
                out.add_scaled(&la, lb.konst)?;
            } else {
                out.add_term(e.clone(), 1)?;
            }
        }
        Expr::Unary(UnOp::Neg, a) => {
            let la = linear(func, a, dt, mode)?;
            out.add_scaled(&la, -1)?;
        }
        _ => out.add_term(e.clone(), 1)?,
    }
    Some(out)
}

/// Sorting rank of an atom: variables, then loads, then everything else.
fn rank(e: &Expr) -> u8 {
    match e {
        Expr::Var(_) => 0,
        Expr::Load { .. } => 1,
        _ => 2,
    }
}

/// `e` as a value of `dt` (a cast when its dtype differs).
pub(crate) fn cast_to(func: &PrimFunc, e: Expr, dt: DType) -> Expr {
    if e.dtype(func) == dt {
        e
    } else if let Some(c) = fold::literal(&e).and_then(|c| fold::cast(c, dt)) {
        c.to_expr()
    } else {
        Expr::Cast(dt, Box::new(e))
    }
}

/// A literal `v` to combine with a left operand of dtype `dt`: a plain (int32) literal where the
/// result dtype stays `dt` and the value fits, a typed constant otherwise.
fn literal(v: i128, dt: DType) -> Expr {
    let plain = matches!(dt, DType::I32 | DType::I64 | DType::U32 | DType::U64);
    if plain
        && v >= i32::MIN as i128
        && v <= i32::MAX as i128
        && binary_result_dtype(dt, DType::I32) == dt
    {
        Expr::Int(v as i64, DType::I32)
    } else {
        make_int(v, dt)
    }
}

/// `atom * |c|` (or `atom` for 1) with the atom converted to `dt`.
fn scaled_atom(func: &PrimFunc, atom: &Expr, c: i128, dt: DType) -> Expr {
    let a = cast_to(func, atom.clone(), dt);
    if c == 1 {
        a
    } else {
        Expr::mul(a, literal(c, dt))
    }
}

/// Rebuilds a wrapping-mode linear form as an expression of dtype `lin.dt`, in canonical order:
/// positive terms, then negative terms (each group: variables, loads, others, each in
/// first-appearance order), then the constant.
pub(crate) fn to_expr(func: &PrimFunc, lin: &Linear) -> Expr {
    let dt = lin.dt;
    let mut terms: Vec<&(Expr, i128)> = lin.terms.iter().collect();
    terms.sort_by_key(|(t, c)| (*c < 0, rank(t)));
    let mut acc: Option<Expr> = None;
    let mut konst = lin.konst;
    if konst > 0 && terms.first().is_some_and(|(_, c)| *c < 0) {
        // Only negative terms: start from the constant (`3 - i` rather than `-i + 3`).
        let lead = match dt {
            DType::I32 | DType::I64 if konst <= i32::MAX as i128 => {
                Expr::Int(konst as i64, DType::I32)
            }
            _ => make_int(konst, dt),
        };
        acc = Some(lead);
        konst = 0;
    }
    for (t, c) in terms {
        let c = *c;
        acc = Some(match acc {
            None if c > 0 => scaled_atom(func, t, c, dt),
            None => {
                let neg = c.checked_neg().map(|n| signed_rep(n, dt));
                match neg {
                    Some(1) => Expr::Unary(UnOp::Neg, Box::new(cast_to(func, t.clone(), dt))),
                    _ => Expr::mul(cast_to(func, t.clone(), dt), literal(c, dt)),
                }
            }
            Some(a) => {
                let m = signed_rep(-c, dt);
                if c < 0 && m > 0 {
                    Expr::sub(a, scaled_atom(func, t, m, dt))
                } else {
                    Expr::add(a, scaled_atom(func, t, c, dt))
                }
            }
        });
    }
    let k = konst;
    match acc {
        None => make_int(k, dt),
        Some(a) if k == 0 => a,
        Some(a) => {
            let m = signed_rep(-k, dt);
            if k < 0 && m > 0 {
                Expr::sub(a, literal(m, dt))
            } else {
                Expr::add(a, literal(k, dt))
            }
        }
    }
}
