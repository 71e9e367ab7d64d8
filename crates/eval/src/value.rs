//! Scalar values of the reference evaluators: the operators' arithmetic (shared with the
//! constant folder, [`sparsetir_ir::scalar`]), intrinsics, dtype limits and scalar arguments.

use half::{bf16, f16};
use sparsetir_ir::scalar::{float_op1, float_op2};
use sparsetir_ir::{DType, Intrinsic};

pub use sparsetir_ir::scalar::{binary, round_float, unary, wrap_int, Value};

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
