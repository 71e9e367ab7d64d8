//! Stage-I reference evaluator: runs sparse iterations directly in coordinate space on host
//! arrays, independent of any lowering. It is the oracle every later stage is tested against.
//!
//! - [`value`]: scalar values and dtype-exact arithmetic and intrinsics;
//! - [`storage`]: validated axis structure, buffer layouts and coordinate lookup;
//! - `interp`: argument binding and the statement/expression interpreter;
//! - [`tir`]: the stage II/III interpreter for lowered functions ([`run_func`]).

mod interp;
pub mod storage;
pub mod tir;
pub mod value;

pub use tir::run_func;

use std::collections::HashMap;

use sparsetir_formats::Tensor;
use sparsetir_ir::{PrimFunc, Span};

/// A value bound to a function parameter, by parameter name.
#[derive(Clone, Debug, PartialEq)]
pub enum ArgValue {
    /// A scalar integer parameter (`m: T.int32`).
    Int(i64),
    /// A scalar float parameter.
    Float(f64),
    /// The array behind a `T.handle` parameter: a buffer's values, an `indptr` or `indices`.
    Array(Tensor),
}

/// An evaluation failure, located where known.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct EvalError {
    pub span: Span,
    pub message: String,
}

/// Runs a stage-I function. `args` maps parameter names to values; arrays behind buffers that the
/// function writes are updated in place. On error `args` is left unchanged.
///
/// Float division by zero follows IEEE (infinities/NaN); integer division or modulo by zero is an
/// error.
pub fn eval_func(func: &PrimFunc, args: &mut HashMap<String, ArgValue>) -> Result<(), EvalError> {
    interp::run(func, args)
}
