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
/// Assembled outputs (`assembled=True` on a `compressed_varied` axis `JC` whose parent `I` is a
/// `dense_fixed` root, whose nnz is a scalar parameter `N`, used by at most one buffer, declared
/// `(I, JC)`): the caller may omit the axis's `indptr` and `indices` parameters, `N` and the
/// buffer's data parameter; whatever is given for them is ignored. The buffer starts with no
/// stored element, a store inserts its coordinate, a read of an absent one gives the default
/// value. After a successful run `args` holds, under those names, the row offsets (one more
/// than `I`'s length) and the column indices (sorted within each row) as arrays of the axis
/// idtype, the values in the buffer's dtype (row-major over the stored coordinates), and
/// `N = ArgValue::Int(nnz)`; an nnz that the idtype (or `N`'s type) cannot hold is an error.
/// Other forms of assembled axes are refused.
///
/// Co-iteration (`T.sp.union`/`T.sp.intersect`) walks, in increasing order, each coordinate
/// stored in any/every part's fiber once; its compressed parts must be declared sorted and hold
/// strictly increasing coordinates in every fiber (an error naming the `indices` array and
/// position otherwise).
///
/// Float division by zero follows IEEE (infinities/NaN); integer division or modulo by zero is an
/// error.
pub fn eval_func(func: &PrimFunc, args: &mut HashMap<String, ArgValue>) -> Result<(), EvalError> {
    interp::run(func, args)
}
