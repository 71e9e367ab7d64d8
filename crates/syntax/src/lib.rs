//! Script language: lexer, parser (script text → IR) and diagnostics with source carets.

use sparsetir_ir::{IRModule, Span};

/// A located problem in a script.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    pub span: Span,
    pub message: String,
    /// Extra lines (what was expected, hints).
    pub notes: Vec<String>,
}

/// Parses a whole script (one or more `@T.prim_func` definitions).
pub fn parse_module(source: &str) -> Result<IRModule, Vec<Diagnostic>> {
    let _ = source;
    todo!("parser")
}

/// Renders diagnostics as `file:line:col: error: message`, a source snippet with a caret, and the
/// notes.
pub fn render(diags: &[Diagnostic], file_name: &str, source: &str) -> String {
    let _ = (diags, file_name, source);
    todo!("diagnostic rendering")
}
