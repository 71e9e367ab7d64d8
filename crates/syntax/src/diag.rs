//! Rendering of diagnostics: a `FILE:LINE:COL: error: MESSAGE` line, then the source snippet with
//! a caret (drawn by codespan-reporting, plain ASCII, no colours) and the notes.

use crate::Diagnostic;
use codespan_reporting::diagnostic::{Diagnostic as CsDiagnostic, Label};
use codespan_reporting::files::SimpleFile;
use codespan_reporting::term::{self, Chars, Config};

/// Renders diagnostics as `file:line:col: error: message`, a source snippet with a caret, and the
/// notes. Spans outside the source are clamped to it.
pub fn render(diags: &[Diagnostic], file_name: &str, source: &str) -> String {
    let mut out = String::new();
    let file = SimpleFile::new(file_name, source);
    let config = Config {
        chars: Chars::ascii(),
        ..Config::default()
    };
    for d in diags {
        let (start, end) = clamp(source, d.span.start as usize, d.span.end as usize);
        let (line, col) = sparsetir_ir::span::line_col(source, start);
        out.push_str(&format!("{file_name}:{line}:{col}: error: {}\n", d.message));
        let cs = CsDiagnostic::error()
            .with_message(d.message.clone())
            .with_labels(vec![Label::primary((), start..end)])
            .with_notes(d.notes.clone());
        match term::emit_into_string(&config, &file, &cs) {
            Ok(text) => {
                // Drop codespan's own header line: ours above carries file:line:col.
                let body = text.split_once('\n').map(|(_, rest)| rest).unwrap_or("");
                out.push_str(body);
            }
            Err(_) => {
                for n in &d.notes {
                    out.push_str(&format!("  = {n}\n"));
                }
            }
        }
    }
    out
}

/// Clamps a byte range to the source and to character boundaries.
fn clamp(source: &str, start: usize, end: usize) -> (usize, usize) {
    let mut s = start.min(source.len());
    while s > 0 && !source.is_char_boundary(s) {
        s -= 1;
    }
    let mut e = end.max(s).min(source.len());
    while e < source.len() && !source.is_char_boundary(e) {
        e += 1;
    }
    (s, e)
}
