//! Script language: lexer, parser (script text → IR) and diagnostics with source carets.
//!
//! - [`parse_module`] / [`parse_func`] / [`parse_bytes`]: text → IR, or located diagnostics;
//! - [`render`]: diagnostics → `file:line:col: error: message` plus a snippet with a caret.
//!
//! Parsing never panics: every problem (lexical, syntactic, name resolution, arity, dtype, ...)
//! comes back as a [`Diagnostic`] whose span lies within the input.

pub mod ast;
mod diag;
pub mod lexer;
mod lower;
pub mod parser;

use sparsetir_ir::{IRModule, PrimFunc, Span};

pub use diag::render;

/// A located problem in a script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    pub span: Span,
    pub message: String,
    /// Extra lines (what was expected, hints).
    pub notes: Vec<String>,
}

impl Diagnostic {
    /// A diagnostic with no notes.
    pub fn new(span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            span,
            message: message.into(),
            notes: Vec::new(),
        }
    }
}

impl std::fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Diagnostic {}

/// Parses a whole script (one or more `@T.prim_func` definitions).
pub fn parse_module(source: &str) -> Result<IRModule, Vec<Diagnostic>> {
    let tokens = lexer::lex(source).map_err(|d| vec![d])?;
    let funcs = parser::parse_tokens(tokens).map_err(|d| vec![d])?;
    lower::lower_module(source, &funcs).map_err(|d| vec![d])
}

/// The verifier's findings on every function of `module`, as diagnostics located in the script
/// (at the function when the finding has no span of its own).
pub fn verify_diagnostics(module: &IRModule) -> Vec<Diagnostic> {
    let mut diags = Vec::new();
    for f in &module.funcs {
        if let Err(errs) = sparsetir_ir::verify_func(f) {
            diags.extend(errs.into_iter().map(|e| Diagnostic {
                span: if e.span.is_unknown() { f.span } else { e.span },
                message: format!("in function `{}`: {}", f.name, e.message),
                notes: Vec::new(),
            }));
        }
    }
    diags
}

/// Parses a script holding exactly one function.
pub fn parse_func(source: &str) -> Result<PrimFunc, Vec<Diagnostic>> {
    let mut m = parse_module(source)?;
    if m.funcs.len() != 1 {
        let span = m.funcs.get(1).map(|f| f.span).unwrap_or_default();
        return Err(vec![Diagnostic::new(
            span,
            format!("expected exactly one function, found {}", m.funcs.len()),
        )]);
    }
    Ok(m.funcs.remove(0))
}

/// Parses raw bytes: input that is not UTF-8 is reported at the first invalid byte.
pub fn parse_bytes(bytes: &[u8]) -> Result<IRModule, Vec<Diagnostic>> {
    match std::str::from_utf8(bytes) {
        Ok(s) => parse_module(s),
        Err(e) => {
            let at = e.valid_up_to();
            let end = (at + e.error_len().unwrap_or(1)).min(bytes.len());
            Err(vec![Diagnostic::new(
                Span::new(at, end),
                format!(
                    "invalid UTF-8 in input (byte 0x{:02x})",
                    bytes.get(at).copied().unwrap_or(0)
                ),
            )])
        }
    }
}
