//! Scalar values of the reference evaluator and their dtype-exact arithmetic: integers wrap to
//! their width, float32 is computed in f32, float16/bfloat16 round after every operation.

use half::{bf16, f16};
use sparsetir_ir::expr::binary_result_dtype;
use sparsetir_ir::{BinOp, DType, Intrinsic, UnOp};

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

/// Wraps `v` to the width (and signedness) of the integer dtype `dt`.
pub fn wrap_int(v: i128, dt: DType) -> i128 {
    let bits = dt.bits().min(64);
    if dt.is_uint() {
        v & ((1i128 << bits) - 1)
    } else {
        let shift = 128 - bits;
        (v << shift) >> shift
    }
}

/// The value of the scalar parameter `name` of type `dt` from its argument: an integer that
/// fits `dt`, or a float for a float parameter (rounded to `dt`); otherwise the message of the
/// error (a missing argument, an array, an integer out of range, a float for an integer).
pub(crate) fn scalar_argument(
    name: &str,
    dt: DType,
    arg: Option<&crate::ArgValue>,
) -> Result<Value, String> {
    use crate::ArgValue;
    match arg {
        None => Err(format!("missing argument for parameter `{name}`")),
        Some(ArgValue::Array(_)) => Err(format!(
            "parameter `{name}` is a scalar of type {dt}, but an array was given"
        )),
        Some(ArgValue::Int(i)) => {
            let v = Value::from_i128(*i as i128, dt);
            if !dt.is_float() && v.as_i128() != *i as i128 {
                return Err(format!(
                    "argument `{name}` = {i} does not fit in its type {dt}"
                ));
            }
            Ok(v)
        }
        Some(ArgValue::Float(x)) if dt.is_float() => Ok(Value::Float(round_float(*x, dt), dt)),
        Some(ArgValue::Float(x)) => Err(format!(
            "parameter `{name}` has type {dt}, but a float ({x}) was given"
        )),
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
    /// tests for nonzero.
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
fn float_op2(
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

fn float_op1(dt: DType, a: f64, op32: fn(f32) -> f32, op64: fn(f64) -> f64) -> f64 {
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

/// The dtype both operands of an arithmetic operator are converted to.
fn common_dtype(a: Value, b: Value) -> DType {
    let d = binary_result_dtype(a.dtype(), b.dtype());
    // Arithmetic on two bools is done on int32, as Python does on int.
    if d.is_bool() {
        DType::I32
    } else {
        d
    }
}

/// Evaluates `a op b`. `And`/`Or` here are strict (the interpreter short-circuits them before).
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
    let dt = common_dtype(a, b);
    let a = a.cast(dt)?;
    let b = b.cast(dt)?;
    if op.is_comparison() {
        return Ok(Value::Bool(compare(op, a, b)));
    }
    match (a, b) {
        (Value::Int(x, _), Value::Int(y, _)) => int_binary(op, x, y, dt),
        (Value::Float(x, _), Value::Float(y, _)) => {
            Ok(Value::Float(float_binary(op, x, y, dt), dt))
        }
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

fn compare(op: BinOp, a: Value, b: Value) -> bool {
    match (a, b) {
        (Value::Int(x, _), Value::Int(y, _)) => match op {
            BinOp::Eq => x == y,
            BinOp::Ne => x != y,
            BinOp::Lt => x < y,
            BinOp::Le => x <= y,
            BinOp::Gt => x > y,
            _ => x >= y,
        },
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
        BinOp::FloorDiv => {
            let q = x / y;
            if x % y != 0 && ((x < 0) != (y < 0)) {
                q - 1
            } else {
                q
            }
        }
        BinOp::FloorMod => {
            let r = x % y;
            if r != 0 && ((r < 0) != (y < 0)) {
                r + y
            } else {
                r
            }
        }
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

fn float_binary(op: BinOp, x: f64, y: f64, dt: DType) -> f64 {
    match op {
        BinOp::Add => float_op2(dt, x, y, |a, b| a + b, |a, b| a + b),
        BinOp::Sub => float_op2(dt, x, y, |a, b| a - b, |a, b| a - b),
        BinOp::Mul => float_op2(dt, x, y, |a, b| a * b, |a, b| a * b),
        BinOp::Div => float_op2(dt, x, y, |a, b| a / b, |a, b| a / b),
        BinOp::FloorDiv => float_op2(dt, x, y, |a, b| (a / b).floor(), |a, b| (a / b).floor()),
        BinOp::FloorMod => float_op2(dt, x, y, py_fmod32, py_fmod64),
        BinOp::Min => float_op2(dt, x, y, f32::min, f64::min),
        _ => float_op2(dt, x, y, f32::max, f64::max),
    }
}

/// Evaluates `op a`.
pub fn unary(op: UnOp, a: Value) -> Result<Value, String> {
    match op {
        UnOp::Not => Ok(Value::Bool(!a.truthy())),
        UnOp::Neg => match a {
            Value::Int(v, d) => Ok(Value::Int(wrap_int(-v, d), d)),
            Value::Float(x, d) => Ok(Value::Float(-x, d)),
            Value::Bool(b) => Ok(Value::Int(-(b as i128), DType::I32)),
        },
    }
}

/// The lowest (`max = false`) or highest finite value of `dt`.
pub fn dtype_limit(dt: DType, max: bool) -> Result<Value, String> {
    Ok(match dt {
        DType::Bool => Value::Bool(max),
        DType::F16 => Value::Float(if max { f16::MAX } else { f16::MIN }.to_f64(), dt),
        DType::BF16 => Value::Float(if max { bf16::MAX } else { bf16::MIN }.to_f64(), dt),
        DType::F32 => Value::Float(if max { f32::MAX } else { f32::MIN } as f64, dt),
        DType::F64 => Value::Float(if max { f64::MAX } else { f64::MIN }, dt),
        DType::Handle => return Err("`handle` has no minimum or maximum value".to_string()),
        _ => {
            let bits = dt.bits();
            let (lo, hi) = if dt.is_uint() {
                (0i128, (1i128 << bits) - 1)
            } else {
                (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
            };
            Value::Int(if max { hi } else { lo }, dt)
        }
    })
}

/// `erf(x)` to about f64 precision: `erf(x) = 2/sqrt(pi) * exp(-x^2) * sum_n 2^n x^(2n+1) /
/// (1*3*...*(2n+1))`, a series of positive terms (no cancellation); `|x| >= 6` gives ±1 (the
/// remainder is below 2^-53).
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let ax = x.abs();
    if ax >= 6.0 {
        return x.signum();
    }
    let x2 = ax * ax;
    let mut term = ax;
    let mut sum = ax;
    let mut n = 0.0;
    while n < 1000.0 {
        n += 1.0;
        term *= 2.0 * x2 / (2.0 * n + 1.0);
        sum += term;
        if term < sum * 1e-17 {
            break;
        }
    }
    let r = 2.0 / std::f64::consts::PI.sqrt() * (-x2).exp() * sum;
    r.min(1.0).copysign(x)
}

fn sigmoid64(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn sigmoid32(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

fn float_intrinsic(op: Intrinsic, args: &[f64], dt: DType) -> Result<f64, String> {
    let a = args.first().copied().unwrap_or(0.0);
    Ok(match op {
        Intrinsic::Exp => float_op1(dt, a, f32::exp, f64::exp),
        Intrinsic::Exp2 => float_op1(dt, a, f32::exp2, f64::exp2),
        Intrinsic::Log => float_op1(dt, a, f32::ln, f64::ln),
        Intrinsic::Log2 => float_op1(dt, a, f32::log2, f64::log2),
        Intrinsic::Sqrt => float_op1(dt, a, f32::sqrt, f64::sqrt),
        Intrinsic::Rsqrt => float_op1(dt, a, |v| 1.0 / v.sqrt(), |v| 1.0 / v.sqrt()),
        Intrinsic::Tanh => float_op1(dt, a, f32::tanh, f64::tanh),
        Intrinsic::Sigmoid => float_op1(dt, a, sigmoid32, sigmoid64),
        Intrinsic::Abs => a.abs(),
        Intrinsic::Pow => {
            let b = args.get(1).copied().unwrap_or(0.0);
            float_op2(dt, a, b, f32::powf, f64::powf)
        }
        Intrinsic::Floor => a.floor(),
        Intrinsic::Ceil => a.ceil(),
        Intrinsic::Round => a.round(),
        Intrinsic::Sin => float_op1(dt, a, f32::sin, f64::sin),
        Intrinsic::Cos => float_op1(dt, a, f32::cos, f64::cos),
        Intrinsic::Erf => round_float(erf(a), dt),
        Intrinsic::MinValue
        | Intrinsic::MaxValue
        | Intrinsic::AtomicAdd
        | Intrinsic::SortRange
        | Intrinsic::Ctz
        | Intrinsic::Popcount
        | Intrinsic::Compress64
        | Intrinsic::CompressIota64
        | Intrinsic::CopyRange
        | Intrinsic::Mask64 => {
            return Err(format!("intrinsic `{}` is not a float function", op.name()))
        }
    })
}

/// Evaluates the intrinsic `op` on already evaluated arguments; `dt` is the call's result dtype.
pub fn intrinsic(op: Intrinsic, args: &[Value], dt: DType) -> Result<Value, String> {
    match op {
        Intrinsic::AtomicAdd => {
            return Err("`atomic_add` is not allowed at stage I (it belongs to stage III)".into())
        }
        Intrinsic::SortRange => {
            return Err("`sort_range` is a statement of stages II/III, not a value".into())
        }
        Intrinsic::Mask64 => {
            return Err("`mask64` reads 64 elements of a buffer at stages II/III".into())
        }
        Intrinsic::Compress64 | Intrinsic::CompressIota64 | Intrinsic::CopyRange => {
            return Err(format!(
                "`{}` is a statement of stages II/III, not a value",
                op.name()
            ))
        }
        Intrinsic::Popcount => {
            let [Value::Int(x, xd)] = args else {
                return Err("`popcount` takes one integer".into());
            };
            if !dt.is_integer() {
                return Err(format!("`popcount` gives an integer, not {}", dt.name()));
            }
            let v = *x & ((1i128 << xd.bits()) - 1);
            return Ok(Value::from_i128(i128::from(v.count_ones()), dt));
        }
        Intrinsic::MinValue => return dtype_limit(dt, false),
        Intrinsic::MaxValue => return dtype_limit(dt, true),
        Intrinsic::Ctz => {
            let [Value::Int(x, xd)] = args else {
                return Err("`ctz` takes one integer".into());
            };
            if !dt.is_integer() {
                return Err(format!("`ctz` gives an integer, not {}", dt.name()));
            }
            let bits = xd.bits();
            let v = *x & ((1i128 << bits) - 1);
            let r = if v == 0 { bits } else { v.trailing_zeros() };
            return Ok(Value::from_i128(i128::from(r), dt));
        }
        _ => {}
    }
    if args.len() != op.arity() {
        return Err(format!(
            "intrinsic `{}` takes {} argument(s), got {}",
            op.name(),
            op.arity(),
            args.len()
        ));
    }
    if dt == DType::Handle {
        return Err(format!(
            "intrinsic `{}` cannot produce a `handle`",
            op.name()
        ));
    }
    if dt.is_float() {
        let mut xs = Vec::with_capacity(args.len());
        for a in args {
            xs.push(a.cast(dt)?.as_f64());
        }
        return Ok(Value::Float(float_intrinsic(op, &xs, dt)?, dt));
    }
    // Integer (or bool) result type.
    let a = args[0].cast(if dt.is_bool() { DType::I64 } else { dt })?;
    match op {
        Intrinsic::Abs | Intrinsic::Floor | Intrinsic::Ceil | Intrinsic::Round => {
            let v = a.as_i128();
            let v = if op == Intrinsic::Abs { v.abs() } else { v };
            Ok(Value::from_i128(v, dt))
        }
        _ => {
            let xs: Vec<f64> = args.iter().map(|v| v.as_f64()).collect();
            let r = float_intrinsic(op, &xs, DType::F64)?;
            Value::Float(r, DType::F64).cast(dt)
        }
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
    }

    #[test]
    fn f32_arithmetic_is_f32() {
        let a = Value::Float(0.1f32 as f64, DType::F32);
        let b = Value::Float(0.2f32 as f64, DType::F32);
        let r = binary(BinOp::Add, a, b).unwrap();
        assert_eq!(r, Value::Float((0.1f32 + 0.2f32) as f64, DType::F32));
    }

    #[test]
    fn erf_values() {
        // Reference values of erf from tables (Abramowitz & Stegun, table 7.1).
        let cases = [
            (0.5, 0.520_499_877_813_046_5),
            (1.0, 0.842_700_792_949_714_9),
            (2.0, 0.995_322_265_018_952_7),
        ];
        for (x, want) in cases {
            assert!((erf(x) - want).abs() < 1e-14, "erf({x})");
            assert!((erf(-x) + want).abs() < 1e-14);
        }
        assert_eq!(erf(0.0), 0.0);
        assert_eq!(erf(10.0), 1.0);
    }

    #[test]
    fn limits_and_rounding() {
        assert_eq!(
            dtype_limit(DType::F32, false),
            Ok(Value::Float(f32::MIN as f64, DType::F32))
        );
        assert_eq!(dtype_limit(DType::I8, true), Ok(Value::Int(127, DType::I8)));
        let r = intrinsic(
            Intrinsic::Round,
            &[Value::Float(-2.5, DType::F64)],
            DType::F64,
        );
        assert_eq!(r, Ok(Value::Float(-3.0, DType::F64)));
        let c = Value::Float(-3.9, DType::F64).cast(DType::I32);
        assert_eq!(c, Ok(Value::Int(-3, DType::I32)));
    }
}
