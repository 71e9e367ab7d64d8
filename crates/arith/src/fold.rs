//! Constant folding: what the constant part of an expression is, in the exact scalar semantics
//! of the reference evaluator ([`sparsetir_ir::scalar`], shared with it), and the integer ranges
//! of dtypes the other analyses bound values by.

use sparsetir_ir::scalar::Value;
use sparsetir_ir::{BinOp, DType, Expr, UnOp};

pub(crate) use sparsetir_ir::scalar::{common_dtype, compares as cmp, floor_div, floor_mod};

/// A constant value: integers kept wrapped to their dtype, floats rounded to theirs.
pub(crate) type Const = Value;

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

/// The signed representative of `v` modulo 2^bits of `dt`: in `[-2^(bits-1), 2^(bits-1))`.
pub(crate) fn signed_rep(v: i128, dt: DType) -> i128 {
    let bits = dt.bits().min(64);
    let shift = 128 - bits;
    (v << shift) >> shift
}

/// An integer constant expression of dtype `dt` holding the value `v` (wrapped to `dt`).
pub(crate) fn make_int(v: i128, dt: DType) -> Expr {
    sparsetir_ir::scalar::int_literal(v, dt)
}

/// The value of a literal; `None` for any other expression.
pub(crate) fn literal(e: &Expr) -> Option<Const> {
    Value::of_literal(e)
}

/// `c` converted to `dt` as `T.Cast` does; `None` where the evaluator refuses (to `handle`).
pub(crate) fn cast(c: Const, dt: DType) -> Option<Const> {
    c.cast(dt).ok()
}

/// Folds `a op b`; `None` when the result is not a constant (division by zero, bad types).
pub(crate) fn binary(op: BinOp, a: Const, b: Const) -> Option<Const> {
    sparsetir_ir::scalar::binary(op, a, b).ok()
}

/// Folds `op a`.
pub(crate) fn unary(op: UnOp, a: Const) -> Option<Const> {
    Some(sparsetir_ir::scalar::unary(op, a))
}
