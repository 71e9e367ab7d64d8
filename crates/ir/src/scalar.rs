//! The meaning of the IR's operators on scalar constants, shared by the reference evaluators
//! and the constant folder: integers wrap to their dtype's width, float32 computes in f32,
//! float16/bfloat16 round after every operation, division and modulo follow Python.

use half::{bf16, f16};

use crate::expr::binary_result_dtype;
use crate::{BinOp, DType, Expr, UnOp};

/// A scalar value. Integers are kept in `i128` already wrapped to their dtype's width; floats are
/// kept in `f64` already rounded to their dtype's precision.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// A signed or unsigned integer of the given dtype.
    Int(i128, DType),
    /// A float of the given dtype.
    Float(f64, DType),
    Bool(bool),
}

/// Wraps `v` to the width (and signedness) of the integer dtype `dt` (`bool`: nonzero).
pub fn wrap_int(v: i128, dt: DType) -> i128 {
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

/// Rounds `x` to the precision of the float dtype `dt`.
pub fn round_float(x: f64, dt: DType) -> f64 {
    match dt {
        DType::F32 => x as f32 as f64,
        DType::F16 => f16::from_f64(x).to_f64(),
        DType::BF16 => bf16::from_f64(x).to_f64(),
        _ => x,
    }
}

/// An integer literal of dtype `dt` holding `v` wrapped to `dt` (`u64` values above `i64::MAX`
/// are stored as their two's-complement bit pattern, as the parser stores them).
pub fn int_literal(v: i128, dt: DType) -> Expr {
    let w = wrap_int(v, dt);
    if dt.is_bool() {
        return Expr::Bool(w != 0);
    }
    Expr::Int(w as u64 as i64, dt)
}

impl Value {
    /// An integer of dtype `dt` (wrapped), a float of dtype `dt` (rounded) or a bool (nonzero).
    pub fn from_i128(v: i128, dt: DType) -> Value {
        if dt.is_float() {
            Value::Float(int_to_float(v, dt), dt)
        } else if dt.is_bool() {
            Value::Bool(v != 0)
        } else {
            Value::Int(wrap_int(v, dt), dt)
        }
    }

    /// The value of a literal (`Expr::Int`, `Expr::Float`, `Expr::Bool` of a matching dtype);
    /// `None` for any other expression.
    pub fn of_literal(e: &Expr) -> Option<Value> {
        match e {
            Expr::Int(v, d) if d.is_integer() => Some(Value::Int(wrap_int(*v as i128, *d), *d)),
            Expr::Int(v, DType::Bool) => Some(Value::Bool(*v != 0)),
            Expr::Float(x, d) if d.is_float() => Some(Value::Float(round_float(*x, *d), *d)),
            Expr::Bool(b) => Some(Value::Bool(*b)),
            _ => None,
        }
    }

    /// The literal holding this value.
    pub fn to_expr(self) -> Expr {
        match self {
            Value::Int(v, d) => int_literal(v, d),
            Value::Float(x, d) => Expr::Float(x, d),
            Value::Bool(b) => Expr::Bool(b),
        }
    }

    pub fn dtype(self) -> DType {
        match self {
            Value::Int(_, d) | Value::Float(_, d) => d,
            Value::Bool(_) => DType::Bool,
        }
    }

    /// The value as an integer (floats truncate toward zero, saturating; NaN gives 0).
    pub fn as_i128(self) -> i128 {
        match self {
            Value::Int(v, _) => v,
            Value::Float(x, _) => x as i128,
            Value::Bool(b) => b as i128,
        }
    }

    pub fn as_f64(self) -> f64 {
        match self {
            Value::Int(v, _) => v as f64,
            Value::Float(x, _) => x,
            Value::Bool(b) => b as u8 as f64,
        }
    }

    /// Python truthiness: nonzero.
    pub fn truthy(self) -> bool {
        match self {
            Value::Int(v, _) => v != 0,
            Value::Float(x, _) => x != 0.0,
            Value::Bool(b) => b,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, Value::Float(..))
    }

    /// `T.Cast(dt, self)`: float → int truncates toward zero, int → int wraps, anything → bool
    /// tests for nonzero; nothing converts to `handle`.
    pub fn cast(self, dt: DType) -> Result<Value, String> {
        if dt == DType::Handle {
            return Err("cannot convert a value to `handle`".to_string());
        }
        if dt.is_bool() {
            return Ok(Value::Bool(self.truthy()));
        }
        Ok(match self {
            Value::Float(x, _) if dt.is_float() => Value::Float(round_float(x, dt), dt),
            Value::Float(x, _) => Value::Int(wrap_int(x as i128, dt), dt),
            Value::Int(v, _) => Value::from_i128(v, dt),
            Value::Bool(b) => Value::from_i128(b as i128, dt),
        })
    }
}

/// Converts an integer to a float dtype with a single rounding where possible.
fn int_to_float(v: i128, dt: DType) -> f64 {
    match dt {
        DType::F32 => v as f32 as f64,
        _ => round_float(v as f64, dt),
    }
}

/// Applies a float operation in the precision of `dt`: f32 natively, f64 natively, half types in
/// f64 followed by rounding (exact for the basic operations).
pub fn float_op2(
    dt: DType,
    a: f64,
    b: f64,
    op32: fn(f32, f32) -> f32,
    op64: fn(f64, f64) -> f64,
) -> f64 {
    match dt {
        DType::F32 => op32(a as f32, b as f32) as f64,
        DType::F64 => op64(a, b),
        _ => round_float(op64(a, b), dt),
    }
}

/// [`float_op2`] for a function of one argument.
pub fn float_op1(dt: DType, a: f64, op32: fn(f32) -> f32, op64: fn(f64) -> f64) -> f64 {
    match dt {
        DType::F32 => op32(a as f32) as f64,
        DType::F64 => op64(a),
        _ => round_float(op64(a), dt),
    }
}

/// Python's `%` on floats: the result has the sign of the divisor.
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
pub fn floor_div(x: i128, y: i128) -> i128 {
    let q = x / y;
    if x % y != 0 && ((x < 0) != (y < 0)) {
        q - 1
    } else {
        q
    }
}

/// Python's modulo of integers (`y != 0`): the result has the sign of `y`.
pub fn floor_mod(x: i128, y: i128) -> i128 {
    let r = x % y;
    if r != 0 && ((r < 0) != (y < 0)) {
        r + y
    } else {
        r
    }
}

/// The dtype both operands of an arithmetic operator are converted to: that of
/// [`binary_result_dtype`], except that arithmetic on two bools is done on int32, as Python does
/// on int.
pub fn common_dtype(a: DType, b: DType) -> DType {
    let d = binary_result_dtype(a, b);
    if d.is_bool() {
        DType::I32
    } else {
        d
    }
}

/// `a op b`, or why it has no value (integer division by zero, an operator the operands' type
/// lacks). `And`/`Or` here are strict (evaluators short-circuit them before).
pub fn binary(op: BinOp, a: Value, b: Value) -> Result<Value, String> {
    if op.is_logical() {
        let r = match op {
            BinOp::And => a.truthy() && b.truthy(),
            _ => a.truthy() || b.truthy(),
        };
        return Ok(Value::Bool(r));
    }
    if matches!(op, BinOp::Shl | BinOp::Shr) {
        return shift(op, a, b);
    }
    let dt = common_dtype(a.dtype(), b.dtype());
    let a = a.cast(dt)?;
    let b = b.cast(dt)?;
    if op.is_comparison() {
        return Ok(Value::Bool(compare(op, a, b)));
    }
    match (a, b) {
        (Value::Int(x, _), Value::Int(y, _)) => int_binary(op, x, y, dt),
        (Value::Float(x, _), Value::Float(y, _)) => float_binary(op, x, y, dt),
        _ => Err(format!(
            "operator {op:?} is not defined on {} values",
            dt.name()
        )),
    }
}

/// `a << b` / `a >> b`: the result has `a`'s type; the amount counts modulo its width (every
/// shift is defined); `>>` is arithmetic on signed types.
fn shift(op: BinOp, a: Value, b: Value) -> Result<Value, String> {
    let (Value::Int(x, dt), Value::Int(y, _)) = (a, b) else {
        return Err(format!("operator {op:?} takes integers"));
    };
    let s = y.rem_euclid(i128::from(dt.bits())) as u32;
    let r = if op == BinOp::Shl { x << s } else { x >> s };
    Ok(Value::Int(wrap_int(r, dt), dt))
}

/// Whether the ordering `o` of two values satisfies the comparison `op`.
pub fn compares(op: BinOp, o: std::cmp::Ordering) -> bool {
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

fn compare(op: BinOp, a: Value, b: Value) -> bool {
    match (a, b) {
        (Value::Int(x, _), Value::Int(y, _)) => compares(op, x.cmp(&y)),
        _ => {
            // Not `partial_cmp`: every comparison with NaN is false but `!=`, which is true.
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
    }
}

fn int_binary(op: BinOp, x: i128, y: i128, dt: DType) -> Result<Value, String> {
    let needs_nonzero = matches!(op, BinOp::Div | BinOp::FloorDiv | BinOp::FloorMod);
    if needs_nonzero && y == 0 {
        return Err(if op == BinOp::FloorMod {
            "integer modulo by zero".to_string()
        } else {
            "integer division by zero".to_string()
        });
    }
    // Operands are at most 64 bits wide, so none of these overflow i128 except the product of
    // two u64 values, which wraps modulo 2^128 and so keeps the low 64 bits right.
    let r = match op {
        BinOp::Add => x + y,
        BinOp::Sub => x - y,
        BinOp::Mul => x.wrapping_mul(y),
        BinOp::Div => x / y,
        BinOp::FloorDiv => floor_div(x, y),
        BinOp::FloorMod => floor_mod(x, y),
        BinOp::Min => x.min(y),
        BinOp::Max => x.max(y),
        // On the two's-complement values (i128 extends the sign); wrapped to the type below.
        BinOp::BitAnd => x & y,
        BinOp::BitOr => x | y,
        BinOp::BitXor => x ^ y,
        _ => return Err(format!("operator {op:?} is not arithmetic")),
    };
    Ok(Value::Int(wrap_int(r, dt), dt))
}

fn float_binary(op: BinOp, x: f64, y: f64, dt: DType) -> Result<Value, String> {
    let r = match op {
        BinOp::Add => float_op2(dt, x, y, |a, b| a + b, |a, b| a + b),
        BinOp::Sub => float_op2(dt, x, y, |a, b| a - b, |a, b| a - b),
        BinOp::Mul => float_op2(dt, x, y, |a, b| a * b, |a, b| a * b),
        BinOp::Div => float_op2(dt, x, y, |a, b| a / b, |a, b| a / b),
        BinOp::FloorDiv => float_op2(dt, x, y, |a, b| (a / b).floor(), |a, b| (a / b).floor()),
        BinOp::FloorMod => float_op2(dt, x, y, py_fmod32, py_fmod64),
        BinOp::Min => float_op2(dt, x, y, f32::min, f64::min),
        BinOp::Max => float_op2(dt, x, y, f32::max, f64::max),
        _ => {
            return Err(format!(
                "operator {op:?} is not defined on {} values",
                dt.name()
            ))
        }
    };
    Ok(Value::Float(r, dt))
}

/// `op a`.
pub fn unary(op: UnOp, a: Value) -> Value {
    match op {
        UnOp::Not => Value::Bool(!a.truthy()),
        UnOp::Neg => match a {
            Value::Int(v, d) => Value::Int(wrap_int(-v, d), d),
            Value::Float(x, d) => Value::Float(-x, d),
            Value::Bool(b) => Value::Int(-(b as i128), DType::I32),
        },
    }
}

/// The value of `e` when it is built of literals alone (arithmetic, casts, selects); `None`
/// when it reads anything or has no value (a division by zero).
pub fn constant(e: &Expr) -> Option<Value> {
    match e {
        Expr::Int(..) | Expr::Float(..) | Expr::Bool(_) => Value::of_literal(e),
        Expr::Binary(op, a, b) => binary(*op, constant(a)?, constant(b)?).ok(),
        Expr::Unary(op, a) => Some(unary(*op, constant(a)?)),
        Expr::Cast(d, a) => constant(a)?.cast(*d).ok(),
        Expr::Select(c, a, b) => {
            if constant(c)?.truthy() {
                constant(a)
            } else {
                constant(b)
            }
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrapping() {
        assert_eq!(wrap_int(i32::MAX as i128 + 1, DType::I32), i32::MIN as i128);
        assert_eq!(wrap_int(-1, DType::U8), 255);
        assert_eq!(wrap_int(300, DType::I8), 44);
        assert_eq!(wrap_int(2, DType::Bool), 1);
        let r = binary(
            BinOp::Add,
            Value::Int(i32::MAX as i128, DType::I32),
            Value::Int(1, DType::I32),
        );
        assert_eq!(r, Ok(Value::Int(i32::MIN as i128, DType::I32)));
    }

    #[test]
    fn python_division() {
        let i = |v| Value::Int(v, DType::I32);
        assert_eq!(binary(BinOp::FloorDiv, i(-7), i(2)), Ok(i(-4)));
        assert_eq!(binary(BinOp::FloorMod, i(-7), i(2)), Ok(i(1)));
        assert_eq!(binary(BinOp::FloorMod, i(7), i(-2)), Ok(i(-1)));
        assert_eq!(binary(BinOp::Div, i(-7), i(2)), Ok(i(-3)));
        assert!(binary(BinOp::Div, i(1), i(0)).is_err());
        assert!(binary(BinOp::FloorMod, i(1), i(0)).is_err());
        let f = |v| Value::Float(v, DType::F64);
        assert_eq!(binary(BinOp::FloorMod, f(-7.5), f(2.0)), Ok(f(0.5)));
        assert_eq!(binary(BinOp::FloorMod, f(7.5), f(-2.0)), Ok(f(-0.5)));
    }

    #[test]
    fn f32_arithmetic_is_f32() {
        let a = Value::Float(0.1f32 as f64, DType::F32);
        let b = Value::Float(0.2f32 as f64, DType::F32);
        let r = binary(BinOp::Add, a, b).unwrap();
        assert_eq!(r, Value::Float((0.1f32 + 0.2f32) as f64, DType::F32));
    }

    #[test]
    fn half_arithmetic_rounds_every_result() {
        // 2048 + 1 is not a float16 (its spacing there is 2): ties to even give 2048.
        let h = |v| Value::Float(v, DType::F16);
        assert_eq!(binary(BinOp::Add, h(2048.0), h(1.0)), Ok(h(2048.0)));
        assert_eq!(binary(BinOp::Add, h(2048.0), h(3.0)), Ok(h(2052.0)));
    }

    #[test]
    fn bitwise_operators_need_integers() {
        let f = Value::Float(1.0, DType::F32);
        assert!(binary(BinOp::BitAnd, f, f).is_err());
        assert!(binary(BinOp::Shl, f, Value::Int(1, DType::I32)).is_err());
    }

    #[test]
    fn literals_round_trip() {
        for v in [
            Value::Int(-5, DType::I8),
            Value::Int(u64::MAX as i128, DType::U64),
            Value::Float(0.5, DType::BF16),
            Value::Bool(true),
        ] {
            assert_eq!(Value::of_literal(&v.to_expr()), Some(v));
        }
        assert_eq!(
            Value::of_literal(&Expr::Int(300, DType::U8)),
            Some(Value::Int(44, DType::U8))
        );
    }
}
