//! The stage II/III interpreter: runs lowered functions (loops and blocks over sparse buffers in
//! position space, or over flat dense buffers) on host arrays. It shares only the scalar
//! arithmetic of [`crate::value`] with the stage-I reference evaluator, so the two can check
//! each other.
//!
//! # Arguments
//!
//! As for [`crate::eval_func`]: `ArgValue::Int`/`ArgValue::Float` for scalar parameters and
//! `ArgValue::Array` (the flat value array) for every `T.handle` parameter a buffer or an axis
//! uses. A match buffer's array must have the buffer's dtype and at least as many elements as the
//! buffer spans. Arrays written by the function are updated in `args`; on error `args` is left
//! unchanged.
//!
//! # Buffers
//!
//! - **Dense** (`T.match_buffer(p, (e0, e1, ...))`): row-major. `strides` are honoured; a list
//!   shorter than the number of dimensions gives the innermost strides, the outer dimensions
//!   being compact over them (so the RFC's `strides=[1]` means row-major). Every index is checked
//!   against its extent.
//! - **Sparse** (stage II, `T.sp.match_buffer(p, (I, J, ...))`): an access `A[p0, p1, ...]` gives
//!   per axis the *local position* of the element under its parent's element (for a
//!   `dense_fixed` root, the coordinate). Global positions: `dense_fixed` = local;
//!   `compressed_fixed` = `parent_global * nnz_cols + local`; varied axes =
//!   `indptr[parent_global] + local`. The value array is row-major over the buffer's *groups*
//!   (every fixed axis starts a group, varied axes chain under their parent): a lone head is
//!   addressed by its local position (extent `length`, or `nnz_cols` for `compressed_fixed`), a
//!   chain by the global position of its last axis (extent = that level's element count).
//!   `indptr` arrays come from the handle parameters the axes name and are read live. Every
//!   position is checked against the number of elements under its parent.
//! - With `extra_storage = k`, the last index is only checked to be non-negative and the flat
//!   offset must fall inside the values plus the `k` extra slots: so a stage-II auxiliary
//!   buffer `J_indptr = T.sp.match_buffer(indptr, (I,), "int32", extra_storage=1)` reads
//!   `J_indptr[vi + 1]` as element `vi + 1` of the indptr array.
//! - Allocations (`T.alloc_buffer`/`T.sp.alloc_buffer` at function level: once; in a block
//!   header: per block instance; `T.allocate`: each time the statement runs, visible to the rest
//!   of its sequence) are zero-filled.
//!
//! # Statements
//!
//! - Loops of every kind run sequentially in increasing order (parallel, vectorized, unrolled and
//!   thread-bound loops included); a loop with a non-positive extent runs zero times.
//! - A block binds its iterators to their bindings, skips the instance when its `T.where`
//!   predicate is false, checks each iterator lies in its domain `[min, min + extent)`, then runs
//!   `init` when every *reduce* iterator equals its domain minimum (TVM's rule), then the body.
//!   Read/write regions are not checked.
//! - `T.assume_buffer_domain(buf, (lo, hi))` checks every value of `buf` (extra storage included)
//!   lies in the *closed* range `[lo, hi]`: the lowering emits `(0, nnz)` for `indptr` arrays,
//!   whose last entry is `nnz`.
//! - `T.atomic_add(A[idx], value)`: the first argument must be a buffer load, which names the
//!   element; the call adds `value` to it (in the buffer's dtype) and returns the old value
//!   (converted to the call's dtype).
//! - `T.Select`/`T.if_then_else` evaluate only the chosen branch; `and`/`or` short-circuit.
//! - Integer division or modulo by zero, an out-of-range access, a missing argument and a
//!   variable without a value are [`EvalError`]s located at the innermost statement.

mod layout;
mod machine;

use std::collections::HashMap;

use sparsetir_ir::PrimFunc;

use crate::{ArgValue, EvalError};

/// Runs a stage II or stage III function (a stage-I function is an error). `args` maps parameter
/// names to values; see the module documentation for the semantics.
pub fn run_func(func: &PrimFunc, args: &mut HashMap<String, ArgValue>) -> Result<(), EvalError> {
    machine::run(func, args)
}
