//! Code generation from stage III sparsetir functions. The only target so far is C11 with
//! OpenMP ([`emit_c`]); compiling, caching and loading the result is the runtime's job.
//!
//! # The C ABI
//!
//! Every generated source is self-contained and defines two external symbols:
//!
//! ```c
//! typedef union { void* ptr; int64_t i; double f; } sparsetir_arg;
//! int32_t <entry>(const sparsetir_arg* args, int32_t nargs); // 0, or -1 if nargs is wrong
//! void sparsetir_set_num_threads(int32_t n);                   // omp_set_num_threads (n > 0)
//! ```
//!
//! - `args[k]` is parameter `k` of the function, in order ([`CModule::params`] describes them): a
//!   `T.handle` parameter is `.ptr`, the address of the first element of its array, whose element
//!   type is the dtype of the buffer matched to it ([`CParamKind::Array`]; a handle that no buffer
//!   matches has `elem = DType::Handle` and is never read); an integer or bool scalar is `.i`
//!   (converted to the parameter's C type); a float scalar is `.f`.
//! - The entry symbol is `sparsetir_<function name>` with every character that is not an ASCII
//!   letter or digit replaced by `_` ([`CModule::entry`]).
//! - Return values: `0` on success, `-1` when `nargs` differs from the number of parameters, `-2`
//!   when a heap allocation of an intermediate buffer failed (the results are then unspecified).
//! - Element types: `bool` (C `_Bool`, one byte), `int8_t` … `uint64_t`, `float`, `double`;
//!   float16/bfloat16 elements are their 16-bit patterns (`uint16_t`), their values computed in
//!   `float` and rounded after every operation as the evaluator does (`c/half.rs`; the CUDA
//!   writer does the same).
//! - The kernel trusts its inputs: sizes, `indptr` and `indices` must have been validated by the
//!   caller (the runtime does it before every launch). Signed 32/64-bit overflow is assumed not to
//!   happen (offsets of multi-dimensional buffers are computed in `int64_t`); integer division by
//!   zero is undefined, where the reference evaluator reports an error.
//!
//! # Schedules in the output
//!
//! - `T.parallel` loops become `#pragma omp parallel for schedule(dynamic, 64)`; the loop
//!   annotations `"schedule"` (`"static"`, `"dynamic"`, `"guided"`, `"auto"`, `"runtime"`) and
//!   `"chunk"` (a positive integer) override the schedule kind and chunk size.
//! - `"schedule": "nnz_balanced"` with `"indptr": "BUFFER"` (no `"chunk"`) on a `T.parallel`
//!   loop over CSR rows: an `#pragma omp parallel` region in which each of the `T` threads takes
//!   one contiguous range of rows holding about `nnz / T` stored elements; thread `t` finds its
//!   first row by binary search of `P[start] + t * nnz / T` in the indptr `P` (the last thread
//!   ends at the loop's end, so trailing empty rows are covered). `P` must be a 1-D integer
//!   buffer whose extent is provably at least the loop's end + 1 (e.g. `m + 1` for rows `0..m`);
//!   otherwise, or on a non-parallel loop or a malformed annotation, emission fails with
//!   [`CodegenError::Unsupported`]. Good for power-law row lengths, where equal row counts
//!   (`static`) give one thread most of the work and dynamic chunks cost scheduling steps.
//! - `T.vectorized` loops become `#pragma omp simd`, `T.unroll` loops `#pragma GCC unroll N` (`N`
//!   the constant extent, else 8). Thread bindings are refused (they need the CUDA target).
//! - `T.evaluate(T.atomic_add(A[i], v))` becomes an `#pragma omp atomic update`.
//!
//! The output is deterministic: the same function always gives the same text (the kernel cache
//! hashes it).

pub mod c;
pub mod cuda;

use sparsetir_ir::{DType, Span};

pub use c::{emit_c, entry_symbol};
pub use cuda::emit_cuda;

/// The C source of one function and the description of its entry point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CModule {
    /// The complete C11 source.
    pub source: String,
    /// The entry symbol (`sparsetir_<name>`).
    pub entry: String,
    /// The function's parameters in order: `args[k]` of the entry point is `params[k]`.
    pub params: Vec<CParam>,
    /// The array parameters every successful call stores whole without reading them (sorted):
    /// a caller may pass them uninitialized (see `c/overwrite.rs`).
    pub overwritten: Vec<String>,
}

/// One parameter of the entry point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CParam {
    /// The parameter's name in the script.
    pub name: String,
    pub kind: CParamKind,
}

/// What is passed for a parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CParamKind {
    /// A `T.handle`: a pointer to the first element of an array of `elem` (`.ptr`).
    Array { elem: DType },
    /// A scalar of this dtype (`.i` for integers and bool, `.f` for floats).
    Scalar(DType),
}

/// Why code generation failed. Every variant names the construct and carries its span (an unknown
/// span when the construct was made by a pass).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CodegenError {
    /// The function is not at stage III.
    #[error(
        "function `{func}` is at stage {stage}; the C target needs a stage III function \
         (lower it first, e.g. with `sparsetir_transform::pipeline::lower`)"
    )]
    NotStageIII {
        func: String,
        stage: &'static str,
        span: Span,
    },
    /// A loop bound to a GPU thread.
    #[error(
        "loop `{var}` is bound to `{thread}`: thread bindings need the CUDA target, the C target \
         cannot run them"
    )]
    ThreadBinding {
        var: String,
        thread: String,
        span: Span,
    },
    /// A value type the target cannot represent.
    #[error("{what}: {dtype} is not supported by this target")]
    UnsupportedDType {
        dtype: DType,
        what: String,
        span: Span,
    },
    /// A construct the C target does not support.
    #[error("{construct}: {message}")]
    Unsupported {
        construct: String,
        message: String,
        span: Span,
    },
    /// Malformed IR (unbound variable, wrong number of indices, ...).
    #[error("invalid function: {message}")]
    Invalid { message: String, span: Span },
}

impl CodegenError {
    /// Where the problem is in the script.
    pub fn span(&self) -> Span {
        match self {
            CodegenError::NotStageIII { span, .. }
            | CodegenError::ThreadBinding { span, .. }
            | CodegenError::UnsupportedDType { span, .. }
            | CodegenError::Unsupported { span, .. }
            | CodegenError::Invalid { span, .. } => *span,
        }
    }
}
