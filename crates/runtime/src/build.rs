//! The compilation driver: a stage-I function, an optional schedule file and scalar
//! specializations in, a loaded native [`Kernel`] (or its C source) out.
//!
//! Steps: [`specialize`](sparsetir_transform::specialize()) the function → apply the schedule's
//! stage-I section → lower to stage II (binary searches checked, so absent coordinates keep
//! their stage-I meaning) → apply the stage-II section → lower to stage III → apply the
//! stage-III section → verify → emit C → compile through the kernel cache → load.
//!
//! # Schedule files
//!
//! A schedule file is trace text (`sparsetir_schedule::Trace`: one `sch.<primitive>(...)` per
//! line, `#` comments) split into sections by comment lines naming a stage:
//!
//! ```text
//! # stage I
//! sp = sch.get_sparse_iteration("sddmm")
//! sch.sparse_fuse(sp, ["i", "j"])
//! # stage II
//! b0 = sch.get_block("sddmm0")
//! l0, = sch.get_loops(b0)
//! sch.parallel(l0)
//! # stage III
//! ...
//! ```
//!
//! A header is a comment line holding exactly `# stage I`, `# stage II` or `# stage III`
//! (case-insensitive; `1`, `2`, `3` work too), optionally followed by `:` and any text
//! (`# stage II: loops`); `# stage <anything else>` is an error, other comments are comments. Lines before the first header belong to **stage II**, so a plain trace recorded on a
//! stage-II function is a valid schedule file. Each section is replayed on its own (handles do
//! not cross sections). Error positions are line numbers of the whole file.
//!
//! # Specialization and the ABI
//!
//! Specialized parameters stay in the kernel's parameter list (see
//! [`sparsetir_transform::specialize()`]), so the kernel takes the same arguments as the
//! unspecialized one. The returned kernel validates launches against the *specialized* stage-I
//! function: data must fit the constant sizes, whatever is passed for the bound parameters.

use sparsetir_codegen::cuda::CudaModule;
use sparsetir_codegen::{emit_c, CModule, CParamKind, CodegenError};
use sparsetir_ir::span::Span;
use sparsetir_ir::{verify_func, IRModule, PrimFunc, Stage, DISTINCT_ATTR, MONOTONE_ATTR};
use sparsetir_schedule::{apply_schedule_text, TraceError};
use sparsetir_syntax::Diagnostic;
use sparsetir_transform::pipeline::{lower, PipelineOptions};
use sparsetir_transform::{
    compact_buffer_allocation, init_into_cache, specialize, SpecializeError,
};

use crate::error::RunError;
use crate::kernel::{KernelParam, ParamKind};
use crate::native::{CompileOptions, Kernel};

/// Why building a kernel failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BuildError {
    /// A specialization was refused (unknown parameter, value out of range, ...).
    #[error("specialize: {0}")]
    Specialize(#[from] SpecializeError),
    /// The function is not at stage I.
    #[error(
        "function `{func}` is at stage {stage}: kernels are built from stage-I functions (the \
         stage-I function is kept to validate launches)"
    )]
    NotStageI { func: String, stage: &'static str },
    /// The schedule file has a header that names no stage.
    #[error("schedule line {line}: {}", bad_section(text))]
    BadSection { line: usize, text: String },
    /// A schedule section failed to parse or replay (line numbers are the file's).
    #[error("schedule (stage {stage} section): {error}")]
    Schedule {
        stage: &'static str,
        error: TraceError,
    },
    /// Lowering failed.
    #[error("lowering failed: {0}")]
    Lower(String),
    /// The scheduled function does not verify (a schedule or pass bug).
    #[error("the scheduled stage-{stage} function does not verify: {message}")]
    Verify {
        stage: &'static str,
        message: String,
    },
    /// The C writer refused the function.
    #[error("C code generation failed: {0}")]
    Codegen(String),
    /// The CUDA writer refused the function.
    #[error("CUDA code generation failed: {0}")]
    CudaCodegen(String),
    /// Compiling, caching or loading failed.
    #[error("{0}")]
    Run(#[from] RunError),
}

/// The three sections of a schedule file. Each keeps the file's line count (lines of other
/// sections are blank), so parse and replay errors point at the file's lines.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScheduleSections {
    pub stage1: String,
    pub stage2: String,
    pub stage3: String,
}

impl ScheduleSections {
    /// The section of `stage`.
    pub fn get(&self, stage: Stage) -> &str {
        match stage {
            Stage::I => &self.stage1,
            Stage::II => &self.stage2,
            Stage::III => &self.stage3,
        }
    }
    /// Whether the section of `stage` holds any instruction.
    pub fn has(&self, stage: Stage) -> bool {
        self.get(stage)
            .lines()
            .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
    }
}

impl BuildError {
    /// A schedule's error rendered as a script's: `FILE:LINE:COL: error: ...`, the line of
    /// the schedule file `name` (text `text`) with a caret, the section as a note, then the IR
    /// a failed primitive points at. `None` for errors that are not the schedule's.
    pub fn render_in_schedule(&self, name: &str, text: &str) -> Option<String> {
        let (line, col, message, note, context) = match self {
            BuildError::BadSection { line, text } => {
                (*line, Col::Line, bad_section(text), None, String::new())
            }
            BuildError::Schedule { stage, error } => {
                let note = Some(format!("in the schedule's `# stage {stage}` section"));
                match error {
                    TraceError::Syntax { line, col, message } => {
                        (*line, Col::At(*col), message.clone(), note, String::new())
                    }
                    TraceError::Replay { line, message, .. } => {
                        (*line, Col::Code, message.clone(), note, String::new())
                    }
                    TraceError::Schedule { line, error } => {
                        let whole = error.to_string();
                        let (first, rest) = whole.split_once('\n').unwrap_or((&whole, ""));
                        (*line, Col::Code, first.to_string(), note, rest.to_string())
                    }
                }
            }
            _ => return None,
        };
        let diag = Diagnostic {
            span: line_span(text, line, col)?,
            message,
            notes: note.into_iter().collect(),
        };
        let mut out = sparsetir_syntax::render(&[diag], name, text);
        if !context.trim().is_empty() {
            out.push_str(context.trim_end());
        }
        Some(out.trim_end().to_string())
    }
}

/// What is wrong with a header line `text` that names no stage.
fn bad_section(text: &str) -> String {
    format!(
        "`{text}` looks like a section header but names no stage (use `# stage I`, `# stage \
         II` or `# stage III`)"
    )
}

/// Where on its line a schedule error points.
#[derive(Clone, Copy)]
enum Col {
    /// At one character (1-based column).
    At(usize),
    /// The line's instruction: leading blanks and a trailing comment left out.
    Code,
    /// The whole line but its blanks.
    Line,
}

/// The span of line `line` (1-based) of `text` that `col` names; `None` past the end.
fn line_span(text: &str, line: usize, col: Col) -> Option<Span> {
    let start = if line <= 1 {
        0
    } else {
        text.match_indices('\n').nth(line - 2)?.0 + 1
    };
    let body = text[start..].split('\n').next().unwrap_or("");
    let trimmed = |code: &str| {
        let lead = code.len() - code.trim_start().len();
        (lead, code.trim_end().len().max(lead))
    };
    let (from, to) = match col {
        Col::At(c) => {
            let at = body
                .char_indices()
                .nth(c.saturating_sub(1))
                .map_or(body.len(), |(i, _)| i);
            (at, at + body[at..].chars().next().map_or(0, char::len_utf8))
        }
        Col::Code => trimmed(body.split('#').next().unwrap_or("")),
        Col::Line => trimmed(body),
    };
    Some(Span::new(start + from, start + to))
}

/// The stage a header comment line names: `Ok(None)` when the line is not a header,
/// `Err(())` when it is exactly `# stage <word>` but the word names no stage.
fn header_stage(line: &str) -> Result<Option<Stage>, ()> {
    let Some(rest) = line.trim().strip_prefix('#') else {
        return Ok(None);
    };
    let rest = rest.trim().to_ascii_lowercase();
    let head = match rest.split_once(':') {
        Some((head, _)) => head,
        None => rest.as_str(),
    };
    let words: Vec<&str> = head.split_whitespace().collect();
    let [first, word] = words.as_slice() else {
        return Ok(None);
    };
    if *first != "stage" {
        return Ok(None);
    }
    match *word {
        "i" | "1" => Ok(Some(Stage::I)),
        "ii" | "2" => Ok(Some(Stage::II)),
        "iii" | "3" => Ok(Some(Stage::III)),
        _ => Err(()),
    }
}

/// Splits a schedule file into its stage sections (see the module documentation).
pub fn split_schedule(text: &str) -> Result<ScheduleSections, BuildError> {
    let mut sections = ScheduleSections::default();
    let mut current = Stage::II;
    for (i, line) in text.lines().enumerate() {
        match header_stage(line) {
            Ok(Some(s)) => current = s,
            Ok(None) => {}
            Err(()) => {
                return Err(BuildError::BadSection {
                    line: i + 1,
                    text: line.trim().to_string(),
                })
            }
        }
        let is_header = matches!(header_stage(line), Ok(Some(_)));
        for stage in [Stage::I, Stage::II, Stage::III] {
            let out = match stage {
                Stage::I => &mut sections.stage1,
                Stage::II => &mut sections.stage2,
                Stage::III => &mut sections.stage3,
            };
            if stage == current && !is_header {
                out.push_str(line);
            }
            out.push('\n');
        }
    }
    Ok(sections)
}

fn stage_name(s: Stage) -> &'static str {
    match s {
        Stage::I => "I",
        Stage::II => "II",
        Stage::III => "III",
    }
}

/// The functions a build goes through.
#[derive(Clone, Debug, PartialEq)]
pub struct Lowered {
    /// The specialized stage-I function, before any schedule: launches are validated against it.
    pub stage1: PrimFunc,
    /// The same with the schedule's stage-I section applied (what was lowered).
    pub scheduled1: PrimFunc,
    /// The scheduled stage-II function.
    pub stage2: PrimFunc,
    /// The scheduled stage-III function, which the C writer takes.
    pub stage3: PrimFunc,
}

/// Applies the section of `stage` (when it has instructions) to `func`.
fn apply_section(
    func: PrimFunc,
    sections: &ScheduleSections,
    stage: Stage,
) -> Result<PrimFunc, BuildError> {
    if !sections.has(stage) {
        return Ok(func);
    }
    let sch =
        apply_schedule_text(func, sections.get(stage)).map_err(|error| BuildError::Schedule {
            stage: stage_name(stage),
            error,
        })?;
    let out = sch.into_func();
    verify_func(&out).map_err(|errs| BuildError::Verify {
        stage: stage_name(stage),
        message: errs
            .iter()
            .map(|e| e.message.as_str())
            .collect::<Vec<_>>()
            .join("; "),
    })?;
    Ok(out)
}

fn lower_one(func: &PrimFunc, stage: Stage) -> Result<PrimFunc, BuildError> {
    let opts = PipelineOptions {
        check_invalid_binary_search: true,
        ..PipelineOptions::to_stage(stage)
    };
    let module = IRModule {
        funcs: vec![func.clone()],
    };
    let out = lower(&module, &opts).map_err(|e| BuildError::Lower(e.to_string()))?;
    out.funcs
        .into_iter()
        .next()
        .ok_or_else(|| BuildError::Lower(format!("function `{}` vanished", func.name)))
}

/// Specializes, schedules and lowers `stage1` to stage III (see the module documentation).
pub fn schedule_and_lower(
    stage1: &PrimFunc,
    schedule: Option<&str>,
    specialization: &[(String, i64)],
) -> Result<Lowered, BuildError> {
    if stage1.stage() != Stage::I {
        return Err(BuildError::NotStageI {
            func: stage1.name.clone(),
            stage: stage_name(stage1.stage()),
        });
    }
    let sections = match schedule {
        Some(text) => split_schedule(text)?,
        None => ScheduleSections::default(),
    };
    let specialized = specialize(stage1, specialization)?;
    let scheduled1 = apply_section(specialized.clone(), &sections, Stage::I)?;
    let stage2 = apply_section(lower_one(&scheduled1, Stage::II)?, &sections, Stage::II)?;
    let stage3 = apply_section(lower_one(&stage2, Stage::III)?, &sections, Stage::III)?;
    let mut lowered = Lowered {
        stage1: specialized,
        scheduled1,
        stage2,
        stage3,
    };
    lowered.note_distinct();
    Ok(lowered)
}

impl Lowered {
    /// Records on `stage1`, which launches are validated against, what the parallel,
    /// vectorized and thread-bound loops of `stage3` trust of the index arrays they store
    /// through ([`DISTINCT_ATTR`], [`MONOTONE_ATTR`],
    /// [`sparsetir_schedule::data_requirements`]), replacing what an earlier call recorded:
    /// call it again after changing `stage3`.
    pub fn note_distinct(&mut self) {
        note_distinct(&mut self.stage1, &self.stage3);
    }
}

/// [`Lowered::note_distinct`] for a stage-I function and the stage-III function compiled from
/// it.
pub fn note_distinct(stage1: &mut PrimFunc, stage3: &PrimFunc) {
    stage1.attrs.remove(DISTINCT_ATTR);
    stage1.attrs.remove(MONOTONE_ATTR);
    let needs = sparsetir_schedule::data_requirements(stage3);
    for (param, scope) in needs.distinct {
        stage1.attrs.assume_distinct(&param, scope);
    }
    // An axis's `indptr` is validated monotone with its axis: asked of other arrays only.
    for param in needs.monotone {
        let indptr = stage1
            .axes
            .iter()
            .any(|(_, a)| a.indptr.is_some_and(|p| stage1.vars[p].name == param));
        if !indptr {
            stage1.attrs.assume_monotone(&param);
        }
    }
}

/// The C module of a stage-III function on the CPU path: the CPU-only passes
/// [`compact_buffer_allocation`](sparsetir_transform::compact_buffer_allocation()) (an intermediate that one block's instances use slice by slice
/// becomes a stack array of that block) and
/// [`init_into_cache`](sparsetir_transform::init_into_cache()) (a reduction's hoisted init
/// starts its local cache instead of the output), then the C writer.
pub fn emit_c_cpu(stage3: &PrimFunc) -> Result<CModule, CodegenError> {
    emit_c(&cpu_passes(stage3))
}

/// The stage-III function the C writer gets on the CPU path: [`emit_c_cpu`]'s passes applied
/// (what `sparsetir lower --schedule ... --cpu-passes` prints).
pub fn cpu_passes(stage3: &PrimFunc) -> PrimFunc {
    init_into_cache(&compact_buffer_allocation(stage3))
}

/// The C source `build` would compile (no compiler needed).
pub fn emit(
    stage1: &PrimFunc,
    schedule: Option<&str>,
    specialization: &[(String, i64)],
) -> Result<CModule, BuildError> {
    let lowered = schedule_and_lower(stage1, schedule, specialization)?;
    emit_c_cpu(&lowered.stage3).map_err(|e| BuildError::Codegen(e.to_string()))
}

/// The CUDA module of `stage1` (no GPU or compiler needed): specialized, scheduled and
/// lowered as for C; a stage III function that binds no loop to a GPU thread gets the
/// automatic GPU schedule ([`sparsetir_schedule::auto_gpu`]) first.
pub fn emit_cuda(
    stage1: &PrimFunc,
    schedule: Option<&str>,
    specialization: &[(String, i64)],
) -> Result<(Lowered, CudaModule), BuildError> {
    let mut lowered = schedule_and_lower(stage1, schedule, specialization)?;
    let (stage3, trace) = sparsetir_schedule::auto_gpu::auto_gpu_schedule(lowered.stage3)
        .map_err(|error| BuildError::Lower(format!("automatic GPU schedule: {error}")))?;
    if let Some(why) = sparsetir_schedule::auto_gpu::unordered_block_work(&stage3) {
        return Err(BuildError::CudaCodegen(why));
    }
    // Blocks a stage III schedule marked `atomic` (rows split over threads) update their
    // outputs with atomic additions.
    lowered.stage3 = sparsetir_transform::lower_atomic(&stage3)
        .map_err(|e| BuildError::Lower(format!("lower_atomic: {e}")))?;
    // What the inputs' `indptr` arrays hold (checked at every launch): grids of loops over a
    // bucket's rows are sized by it.
    lowered.stage3 = sparsetir_transform::indptr_domains(&lowered.stage1, &lowered.stage3);
    lowered.note_distinct();
    let mut m = sparsetir_codegen::emit_cuda(&lowered.stage3)
        .map_err(|e| BuildError::CudaCodegen(e.to_string()))?;
    note_one_thread_nests(&mut m.source, &trace);
    Ok((lowered, m))
}

/// Says in the source, after its first line, which nests the automatic GPU schedule left on
/// one thread and why (a loop carrying a reduction or a dependence): a kernel that is slow for
/// that reason tells so where its code is read.
fn note_one_thread_nests(source: &mut String, trace: &str) {
    let notes: Vec<&str> = trace
        .lines()
        .filter_map(|l| l.strip_prefix(sparsetir_schedule::auto_gpu::ONE_THREAD))
        .collect();
    if notes.is_empty() {
        return;
    }
    let mut text = String::from("/* The automatic GPU schedule runs these nests on one thread:\n");
    for n in notes {
        text.push_str(&format!("   - block{}\n", n.replace("*/", "* /")));
    }
    text.push_str("*/\n");
    let at = source.find('\n').map_or(0, |i| i + 1);
    source.insert_str(at, &text);
}

/// Specializes, schedules, lowers, emits C, compiles (through the cache of `opts`) and loads
/// `stage1`. The kernel validates every launch against the specialized stage-I function.
pub fn build(
    stage1: &PrimFunc,
    schedule: Option<&str>,
    specialization: &[(String, i64)],
    opts: &CompileOptions,
) -> Result<Kernel, BuildError> {
    let lowered = schedule_and_lower(stage1, schedule, specialization)?;
    let c = emit_c_cpu(&lowered.stage3).map_err(|e| BuildError::Codegen(e.to_string()))?;
    let params = kernel_params(&c);
    Ok(
        Kernel::from_source(&lowered.stage1, &c.source, &c.entry, params, opts)?
            .overwriting(&c.overwritten),
    )
}

/// The entry point's parameters as the runtime describes them.
pub fn kernel_params(c: &CModule) -> Vec<KernelParam> {
    c.params
        .iter()
        .map(|p| KernelParam {
            name: p.name.clone(),
            kind: match p.kind {
                CParamKind::Array { elem } => ParamKind::Array { elem },
                CParamKind::Scalar(dt) => ParamKind::Scalar(dt),
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_split_and_keep_line_numbers() {
        let text = "a = 1\n# stage I\nb\n# Stage III: last\nc\n# stage 2\nd\n# a comment\n";
        let s = split_schedule(text).unwrap();
        assert_eq!(s.stage1, "\n\nb\n\n\n\n\n\n");
        assert_eq!(s.stage2, "a = 1\n\n\n\n\n\nd\n# a comment\n");
        assert_eq!(s.stage3, "\n\n\n\nc\n\n\n\n");
        assert!(s.has(Stage::I) && s.has(Stage::II) && s.has(Stage::III));
        let only = split_schedule("# just a comment\n").unwrap();
        assert!(!only.has(Stage::II));
    }

    #[test]
    fn bad_headers_are_errors() {
        let err = split_schedule("x\n# stage IV\n").unwrap_err();
        assert_eq!(
            err,
            BuildError::BadSection {
                line: 2,
                text: "# stage IV".into()
            }
        );
        // Not headers: other words around `stage`.
        let s = split_schedule("# stages are\n# staged\n# stage II. The rows\n").unwrap();
        assert_eq!(s.stage1, "\n\n\n");
    }
}
