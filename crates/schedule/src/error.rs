//! Schedule errors: a typed kind, a message, and the printed IR around the offending block, loop
//! or sparse iteration (marked with a `-->` gutter and a `^^^` underline).

use std::fmt;

use sparsetir_ir::printer::{print_expr, print_func};
use sparsetir_ir::{Expr, PrimFunc, VarId};

/// What went wrong, as a type the caller can match on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// No block, loop or sparse iteration of that name / handle exists.
    NotFound,
    /// The handle refers to something a previous primitive removed (e.g. a split loop).
    StaleHandle,
    /// The function is at the wrong stage for this primitive.
    WrongStage,
    /// Two blocks or sparse iterations share a name.
    DuplicateName,
    /// The loop is not of the shape the primitive needs (e.g. an extent that depends on a loop
    /// that would end up inside it).
    NotAnAffineLoop,
    /// The new order is not a permutation of the iteration's axes or of the given loops.
    NotAPermutation,
    /// A sparse axis would come before its parent.
    ParentAfterChild,
    /// The axes or loops must be consecutive (a chain with nothing in between).
    NotConsecutive,
    /// A loop's body is not exactly one loop (the loops are not perfectly nested).
    LoopNotSingleChild,
    /// A loop that binds a reduction iterator cannot take this kind (parallel, vectorize, ...).
    ReductionLoop,
    /// The loop is already parallel/vectorized/unrolled/bound.
    LoopNotSerial,
    /// An argument is out of range or malformed (factors, thread tags, ...).
    InvalidArgument,
    /// `bind`: a loop around or inside the loop is already bound to the same thread index.
    ThreadBindingConflict,
    /// The annotation key is not present.
    NoSuchAnnotation,
    /// A construct the primitive does not handle.
    Unsupported,
    /// The primitive produced IR that fails verification (a schedule bug).
    Internal,
    // ----- block, cache and reduction primitives -----
    /// The buffer is written by more than one block where the primitive needs a single writer.
    NotSingleWriter,
    /// The block is not a complete block (spatial iterators only, one store, no init) where
    /// the primitive needs one.
    NotCompleteBlock,
    /// The block is not a reduction of the form the primitive needs (init + `C = C op x`).
    NotReductionBlock,
    /// The buffer is a sparse buffer that the primitive cannot handle soundly.
    SparseBuffer,
    /// The target loop or block is not where the primitive needs it (another scope, before the
    /// producer, not above every consumer, ...).
    BadPlacement,
    /// The move would reorder an access with a conflicting access of another block, or the
    /// loop's iterations would run apart although one touches an element another one writes.
    DependencyViolation,
    /// The region a block must cover cannot be bounded, or is not provably inside what the
    /// block computed before.
    RegionNotCovered,
    /// `tensorize` / `sparse_tensorize`: the loop nest or its block does not match the tensor
    /// intrinsic's description (tile extents, one loop in each, one block storing the
    /// intrinsic's form in its types).
    NotTensorizable,
}

/// A schedule primitive's failure.
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduleError {
    pub kind: ErrorKind,
    /// One sentence saying what is wrong.
    pub message: String,
    /// The printed function around the offending statement, marked; empty when nothing is
    /// located.
    pub ir: String,
}

impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.message)?;
        if !self.ir.is_empty() {
            write!(f, "\n{}", self.ir)?;
        }
        Ok(())
    }
}

impl std::error::Error for ScheduleError {}

/// What an error points at.
#[derive(Clone, Debug)]
pub enum Focus {
    Nothing,
    Block(String),
    Loop(VarId),
    SparseIteration(String),
}

impl ScheduleError {
    /// Builds an error, rendering the IR of `func` around `focus`.
    pub fn new(kind: ErrorKind, message: impl Into<String>, func: &PrimFunc, focus: Focus) -> Self {
        ScheduleError {
            kind,
            message: message.into(),
            ir: render(func, &focus),
        }
    }
}

/// Lines of context shown before the offending statement.
const BEFORE: usize = 3;
/// At most this many lines of the offending statement are shown.
const MAX_BODY: usize = 16;

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// Finds the header line of the focused statement in the printed function.
fn header_line(func: &PrimFunc, lines: &[&str], focus: &Focus) -> Option<usize> {
    match focus {
        Focus::Nothing => None,
        Focus::Block(name) => {
            let needle = format!("with T.block({})", sparsetir_ir::printer::quote(name));
            lines
                .iter()
                .position(|l| l.trim_start().starts_with(&needle))
        }
        Focus::SparseIteration(name) => {
            let needle = sparsetir_ir::printer::quote(name);
            lines.iter().position(|l| {
                let t = l.trim_start();
                t.starts_with("with T.sp.iteration(") && t.contains(&needle)
            })
        }
        Focus::Loop(v) => {
            if v.index() >= func.vars.len() {
                return None;
            }
            let name = print_expr(func, &Expr::Var(*v));
            lines.iter().position(|l| {
                let t = l.trim_start();
                let Some(rest) = t.strip_prefix("for ") else {
                    return false;
                };
                let Some(end) = rest.find(" in ") else {
                    return false;
                };
                rest[..end].split(',').any(|n| n.trim() == name)
            })
        }
    }
}

/// The printed function with the focused statement marked: a few lines before it, its header
/// underlined, and its body (up to a limit) with a `-->` gutter.
pub fn render(func: &PrimFunc, focus: &Focus) -> String {
    if matches!(focus, Focus::Nothing) {
        return String::new();
    }
    let text = print_func(func);
    let lines: Vec<&str> = text.lines().collect();
    let Some(h) = header_line(func, &lines, focus) else {
        return String::new();
    };
    let ind = indent_of(lines[h]);
    let mut end = h + 1;
    while end < lines.len() {
        let l = lines[end];
        if !l.trim().is_empty() && indent_of(l) <= ind {
            break;
        }
        end += 1;
    }
    let start = h.saturating_sub(BEFORE);
    let shown_end = end.min(h + 1 + MAX_BODY);
    let mut out = String::new();
    for (i, line) in lines.iter().enumerate().take(shown_end).skip(start) {
        let gutter = if i >= h { "--> " } else { "    " };
        out.push_str(gutter);
        out.push_str(line);
        out.push('\n');
        if i == h {
            let width = line.trim_end().len().saturating_sub(ind).max(1);
            out.push_str("    ");
            out.push_str(&" ".repeat(ind));
            out.push_str(&"^".repeat(width));
            out.push('\n');
        }
    }
    if shown_end < end {
        out.push_str(&format!("    ... ({} more lines)\n", end - shown_end));
    }
    out
}
