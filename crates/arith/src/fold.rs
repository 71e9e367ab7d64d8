//! Constant folding with the exact scalar semantics of the reference evaluator: integers wrap to
//! their dtype's width, float32 computes in f32, float16/bfloat16 round after every operation,
//! and integer division or modulo by zero is never folded.

use half::{bf16, f16};
use sparsetir_ir::expr::binary_result_dtype;
use sparsetir_ir::{BinOp, DType, Expr, UnOp};

/// A constant value. Integers are kept wrapped to their dtype; floats rounded to theirs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Const {
    Int(i128, DType),
    Float(f64, DType),
    Bool(bool),
}

/// The lowest and highest value of an integer dtype.
pub(crate) fn int_range(dt: DType) -> (i128, i128) {
    let bits = dt.bits().min(64);
    if dt.is_uint() {
        (0, (1i128 << bits) - 1)
    } else if dt.is_bool() {
        (0, 1)
    } else {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    }
}

/// Wraps `v` to the width and signedness of the integer dtype `dt`.
pub(crate) fn wrap(v: i128, dt: DType) -> i128 {
    if dt.is_bool() {
        return (v != 0) as i128;
    }
    let bits = dt.bits().min(64);
    if dt.is_uint() {
        v & ((1i128 << bits) - 1)
    } else {
        let shift = 128 - bits;
        (v << shift) >> shift
    }
}

/// The signed representative of `v` modulo 2^bits of `dt`: in `[-2^(bits-1), 2^(bits-1))`.
pub(crate) fn signed_rep(v: i128, dt: DType) -> i128 {
    let bits = dt.bits().min(64);
    let shift = 128 - bits;
    (v << shift) >> shift
}

fn round_float(x: f64, dt: DType) -> f64 {
    match dt {
        DType::F32 => x as f32 as f64,
        DType::F16 => f16::from_f64(x).to_f64(),
        DType::BF16 => bf16::from_f64(x).to_f64(),
        _ => x,
    }
}

/// An integer constant expression of dtype `dt` holding the value `v` (wrapped to `dt`).
pub(crate) fn make_int(v: i128, dt: DType) -> Expr {
    let w = wrap(v, dt);
    if dt.is_bool() {
        return Expr::Bool(w != 0);
    }
    // u64 values above i64::MAX are stored as their two's complement bit pattern.
    Expr::Int(w as u64 as i64, dt)
}

impl Const {
    pub(crate) fn of(e: &Expr) -> Option<Const> {
        match e {
            Expr::Int(v, d) if d.is_integer() => Some(Const::Int(wrap(*v as i128, *d), *d)),
            Expr::Int(v, DType::Bool) => Some(Const::Bool(*v != 0)),
            Expr::Float(x, d) if d.is_float() => Some(Const::Float(round_float(*x, *d), *d)),
            Expr::Bool(b) => Some(Const::Bool(*b)),
            _ => None,
        }
    }

    pub(crate) fn to_expr(self) -> Expr {
        match self {
            Const::Int(v, d) => make_int(v, d),
            Const::Float(x, d) => Expr::Float(x, d),
            Const::Bool(b) => Expr::Bool(b),
        }
    }

    pub(crate) fn dtype(self) -> DType {
        match self {
            Const::Int(_, d) | Const::Float(_, d) => d,
            Const::Bool(_) => DType::Bool,
        }
    }

    pub(crate) fn truthy(self) -> bool {
        match self {
            Const::Int(v, _) => v != 0,
            Const::Float(x, _) => x != 0.0,
            Const::Bool(b) => b,
        }
    }

    fn as_f64(self) -> f64 {
        match self {
            Const::Int(v, _) => v as f64,
            Const::Float(x, _) => x,
            Const::Bool(b) => b as u8 as f64,
        }
    }

    /// `T.Cast(dt, self)`; `None` for casts the evaluator rejects (to `handle`).
    pub(crate) fn cast(self, dt: DType) -> Option<Const> {
        if dt == DType::Handle {
            return None;
        }
        if dt.is_bool() {
            return Some(Const::Bool(self.truthy()));
        }
        let from_int = |v: i128| {
            if dt.is_float() {
                let x = match dt {
                    DType::F32 => v as f32 as f64,
                    _ => round_float(v as f64, dt),
                };
                Const::Float(x, dt)
            } else {
                Const::Int(wrap(v, dt), dt)
            }
        };
        Some(match self {
            Const::Float(x, _) if dt.is_float() => Const::Float(round_float(x, dt), dt),
            Const::Float(x, _) => Const::Int(wrap(x as i128, dt), dt),
            Const::Int(v, _) => from_int(v),
            Const::Bool(b) => from_int(b as i128),
        })
    }
}

/// The dtype both operands of an arithmetic operator are converted to (bool arithmetic is done
/// on int32).
pub(crate) fn common_dtype(a: DType, b: DType) -> DType {
    let d = binary_result_dtype(a, b);
    if d.is_bool() {
        DType::I32
    } else {
        d
    }
}

fn float_op2(
    dt: DType,
    a: f64,
    b: f64,
    f32op: fn(f32, f32) -> f32,
    f64op: fn(f64, f64) -> f64,
) -> f64 {
    match dt {
        DType::F32 => f32op(a as f32, b as f32) as f64,
        DType::F64 => f64op(a, b),
        _ => round_float(f64op(a, b), dt),
    }
}

fn py_fmod64(a: f64, b: f64) -> f64 {
    let r = a % b;
    if r != 0.0 && ((r < 0.0) != (b < 0.0)) {
        r + b
    } else {
        r
    }
}

fn py_fmod32(a: f32, b: f32) -> f32 {
    let r = a % b;
    if r != 0.0 && ((r < 0.0) != (b < 0.0)) {
        r + b
    } else {
        r
    }
}

/// Python's floor division of integers (`y != 0`).
pub(crate) fn floor_div(x: i128, y: i128) -> i128 {
    let q = x / y;
    if x % y != 0 && ((x < 0) != (y < 0)) {
        q - 1
    } else {
        q
    }
}

/// Python's modulo of integers (`y != 0`): the result has the sign of `y`.
pub(crate) fn floor_mod(x: i128, y: i128) -> i128 {
    let r = x % y;
    if r != 0 && ((r < 0) != (y < 0)) {
        r + y
    } else {
        r
    }
}

/// Folds `a op b`; `None` when the result is not a constant (division by zero, bad types).
pub(crate) fn binary(op: BinOp, a: Const, b: Const) -> Option<Const> {
    if op.is_logical() {
        let r = match op {
            BinOp::And => a.truthy() && b.truthy(),
            _ => a.truthy() || b.truthy(),
        };
        return Some(Const::Bool(r));
    }
    if matches!(op, BinOp::Shl | BinOp::Shr) {
        // `a`'s type; the amount modulo its width (as the evaluator).
        let (Const::Int(x, dt), Const::Int(y, _)) = (a, b) else {
            return None;
        };
        let s = y.rem_euclid(i128::from(dt.bits())) as u32;
        let r = if op == BinOp::Shl { x << s } else { x >> s };
        return Some(Const::Int(wrap(r, dt), dt));
    }
    let dt = common_dtype(a.dtype(), b.dtype());
    if dt == DType::Handle {
        return None;
    }
    let a = a.cast(dt)?;
    let b = b.cast(dt)?;
    if op.is_comparison() {
        let r = match (a, b) {
            (Const::Int(x, _), Const::Int(y, _)) => cmp(op, x.cmp(&y)),
            _ => {
                let (x, y) = (a.as_f64(), b.as_f64());
                match op {
                    BinOp::Eq => x == y,
                    BinOp::Ne => x != y,
                    BinOp::Lt => x < y,
                    BinOp::Le => x <= y,
                    BinOp::Gt => x > y,
                    _ => x >= y,
                }
            }
        };
        return Some(Const::Bool(r));
    }
    match (a, b) {
        (Const::Int(x, _), Const::Int(y, _)) => {
            if matches!(op, BinOp::Div | BinOp::FloorDiv | BinOp::FloorMod) && y == 0 {
                return None;
            }
            let r = match op {
                BinOp::Add => x + y,
                BinOp::Sub => x - y,
                BinOp::Mul => x.wrapping_mul(y),
                BinOp::Div => x / y,
                BinOp::FloorDiv => floor_div(x, y),
                BinOp::FloorMod => floor_mod(x, y),
                BinOp::Min => x.min(y),
                BinOp::Max => x.max(y),
                BinOp::BitAnd => x & y,
                BinOp::BitOr => x | y,
                BinOp::BitXor => x ^ y,
                _ => return None,
            };
            Some(Const::Int(wrap(r, dt), dt))
        }
        (Const::Float(x, _), Const::Float(y, _)) => {
            let r = match op {
                BinOp::Add => float_op2(dt, x, y, |a, b| a + b, |a, b| a + b),
                BinOp::Sub => float_op2(dt, x, y, |a, b| a - b, |a, b| a - b),
                BinOp::Mul => float_op2(dt, x, y, |a, b| a * b, |a, b| a * b),
                BinOp::Div => float_op2(dt, x, y, |a, b| a / b, |a, b| a / b),
                BinOp::FloorDiv => {
                    float_op2(dt, x, y, |a, b| (a / b).floor(), |a, b| (a / b).floor())
                }
                BinOp::FloorMod => float_op2(dt, x, y, py_fmod32, py_fmod64),
                BinOp::Min => float_op2(dt, x, y, f32::min, f64::min),
                BinOp::Max => float_op2(dt, x, y, f32::max, f64::max),
                _ => return None,
            };
            Some(Const::Float(r, dt))
        }
        _ => None,
    }
}

/// Whether the ordering `o` of two values satisfies the comparison `op`.
pub(crate) fn cmp(op: BinOp, o: std::cmp::Ordering) -> bool {
    use std::cmp::Ordering::*;
    match op {
        BinOp::Eq => o == Equal,
        BinOp::Ne => o != Equal,
        BinOp::Lt => o == Less,
        BinOp::Le => o != Greater,
        BinOp::Gt => o == Greater,
        _ => o != Less,
    }
}

/// Folds `op a`.
pub(crate) fn unary(op: UnOp, a: Const) -> Option<Const> {
    match op {
        UnOp::Not => Some(Const::Bool(!a.truthy())),
        UnOp::Neg => Some(match a {
            Const::Int(v, d) => Const::Int(wrap(-v, d), d),
            Const::Float(x, d) => Const::Float(-x, d),
            Const::Bool(b) => Const::Int(-(b as i128), DType::I32),
        }),
    }
}
