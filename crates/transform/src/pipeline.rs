//! The lowering pipeline (SPEC §3): runs the lowering passes in order up to a target stage, with
//! the stage verifier on the input (always) and after every pass (on by default in debug
//! builds), and optional dumps of the printed module after named passes.
//!
//! Passes, in order (their names are what `print_after` takes, see [`PASSES`]):
//! 1. `lower_sparse_iter`: stage I → stage II;
//! 2. `lower_sparse_buffer`: stage II → stage III.
//!
//! Each pass is a no-op on functions of another stage, so a module mixing stages lowers every
//! function as far as the target allows; a function already past the target stage is kept as is.

use sparsetir_ir::printer::print_module;
use sparsetir_ir::{verify_func, IRModule, PrimFunc, Span, Stage, VerifyError};

use crate::lower_sparse_buffer::lower_sparse_buffer;
use crate::lower_sparse_iter::{lower_sparse_iter, LowerError, LowerOptions, Phase};

/// The pipeline's passes, in the order they run.
pub const PASSES: &[&str] = &["lower_sparse_iter", "lower_sparse_buffer"];

/// Options of [`lower`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PipelineOptions {
    /// The stage to lower to: [`Stage::I`] runs no pass, [`Stage::II`] runs `lower_sparse_iter`,
    /// [`Stage::III`] both passes.
    pub target_stage: Stage,
    /// Passed to `lower_sparse_iter` (see [`LowerOptions`]).
    pub check_invalid_binary_search: bool,
    /// Verify the output of every pass (a compiler bug when it fails). Defaults to
    /// `cfg!(debug_assertions)`. The input is verified in every build: it is the caller's, and
    /// its errors are the located messages a user should get, not whatever a pass trips on.
    pub verify: bool,
    /// Names of passes (from [`PASSES`]) after which the printed module is recorded in
    /// [`LowerOutput::dumps`]. A pass that does not run for the target stage records nothing.
    pub print_after: Vec<String>,
    /// Passed to `lower_sparse_iter`: the phase of a function that assembles an output's
    /// structure (see [`Phase`]).
    pub assembly: Option<Phase>,
}

impl Default for PipelineOptions {
    fn default() -> Self {
        PipelineOptions {
            target_stage: Stage::III,
            check_invalid_binary_search: false,
            verify: cfg!(debug_assertions),
            print_after: Vec::new(),
            assembly: None,
        }
    }
}

impl PipelineOptions {
    /// Stage III with checked binary searches (an absent coordinate reads the default value, a
    /// store to it is skipped, as in stage I) and the verifier after every pass: the lowering
    /// the stage-III interpreter runs (`run --backend interp`, Python's `target="interp"`).
    pub fn for_interpreter() -> Self {
        PipelineOptions {
            target_stage: Stage::III,
            check_invalid_binary_search: true,
            verify: true,
            print_after: Vec::new(),
            assembly: None,
        }
    }

    /// Default options lowering to `stage`.
    pub fn to_stage(stage: Stage) -> Self {
        PipelineOptions {
            target_stage: stage,
            ..PipelineOptions::default()
        }
    }
}

/// The lowered module and the dumps requested by [`PipelineOptions::print_after`].
#[derive(Clone, Debug, PartialEq)]
pub struct LowerOutput {
    pub module: IRModule,
    /// `(pass name, printed module after that pass)`, in the order the passes ran.
    pub dumps: Vec<(String, String)>,
}

/// Why the pipeline failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PipelineError {
    /// `print_after` names a pass that does not exist.
    #[error("unknown pass `{name}` (passes: {})", PASSES.join(", "))]
    UnknownPass { name: String },
    /// The input function does not verify: the caller's IR is malformed.
    #[error("function `{func}` is invalid: {}", join_errors(.errors))]
    Input {
        func: String,
        errors: Vec<VerifyError>,
    },
    /// A pass rejected a function (unsupported construct or invalid input).
    #[error("{pass}: function `{func}`: {error}")]
    Lower {
        pass: String,
        func: String,
        error: LowerError,
    },
    /// A pass produced a function that does not verify: a compiler bug.
    #[error(
        "internal compiler error: after pass `{pass}`, function `{func}` fails verification: {}",
        join_errors(.errors)
    )]
    Verify {
        pass: String,
        func: String,
        errors: Vec<VerifyError>,
    },
}

fn join_errors(errors: &[VerifyError]) -> String {
    errors
        .iter()
        .map(|e| e.message.as_str())
        .collect::<Vec<_>>()
        .join("; ")
}

impl PipelineError {
    /// The function concerned, when there is one.
    pub fn func(&self) -> Option<&str> {
        match self {
            PipelineError::Input { func, .. }
            | PipelineError::Lower { func, .. }
            | PipelineError::Verify { func, .. } => Some(func),
            PipelineError::UnknownPass { .. } => None,
        }
    }

    /// The pass concerned, when there is one (`Input` errors happen before any pass).
    pub fn pass(&self) -> Option<&str> {
        match self {
            PipelineError::Lower { pass, .. } | PipelineError::Verify { pass, .. } => Some(pass),
            PipelineError::UnknownPass { .. } | PipelineError::Input { .. } => None,
        }
    }

    /// Each located finding as `(span, message)`: one per verifier error, one for a pass error;
    /// empty for errors that concern no source location. Spans may be unknown (made by a pass).
    pub fn located(&self) -> Vec<(Span, String)> {
        match self {
            PipelineError::Input { func, errors } => errors
                .iter()
                .map(|e| (e.span, format!("in function `{func}`: {}", e.message)))
                .collect(),
            PipelineError::Verify { pass, func, errors } => errors
                .iter()
                .map(|e| {
                    (
                        e.span,
                        format!(
                            "internal compiler error: after pass `{pass}`, function `{func}` \
                             fails verification: {}",
                            e.message
                        ),
                    )
                })
                .collect(),
            PipelineError::Lower { pass, func, error } => {
                vec![(error.span(), format!("{pass}: function `{func}`: {error}"))]
            }
            PipelineError::UnknownPass { .. } => Vec::new(),
        }
    }
}

/// A pass over one function.
type PassFn = fn(&PrimFunc, &PipelineOptions) -> Result<PrimFunc, LowerError>;

fn run_lower_sparse_iter(f: &PrimFunc, opts: &PipelineOptions) -> Result<PrimFunc, LowerError> {
    let assembly = opts.assembly.or(Phase::of(f));
    lower_sparse_iter(
        f,
        &LowerOptions {
            check_invalid_binary_search: opts.check_invalid_binary_search,
            assembly,
        },
    )
}

fn run_lower_sparse_buffer(f: &PrimFunc, _: &PipelineOptions) -> Result<PrimFunc, LowerError> {
    lower_sparse_buffer(f)
}

/// `(name, stage it produces, the pass)`, in order.
fn passes() -> [(&'static str, Stage, PassFn); 2] {
    [
        (PASSES[0], Stage::II, run_lower_sparse_iter as PassFn),
        (PASSES[1], Stage::III, run_lower_sparse_buffer as PassFn),
    ]
}

fn verify_all(module: &IRModule) -> Result<(), (String, Vec<VerifyError>)> {
    for f in &module.funcs {
        verify_func(f).map_err(|errors| (f.name.clone(), errors))?;
    }
    Ok(())
}

/// True when `f` stores into a buffer over an `assembled` axis (it is lowered once per
/// [`Phase`]).
pub fn assembles(f: &PrimFunc) -> bool {
    f.stage() == Stage::I && f.axes.iter().any(|(_, a)| a.assembled)
}

/// Without an explicit phase, a stage-I function that assembles an output becomes two:
/// `<name>_symbolic` and `<name>_numeric`, each lowered for its phase (see [`lower_traced`]).
fn split_phases(module: &IRModule, opts: &PipelineOptions) -> IRModule {
    if opts.assembly.is_some() || opts.target_stage == Stage::I {
        return module.clone();
    }
    let mut funcs = Vec::new();
    for f in &module.funcs {
        if assembles(f) && Phase::of(f).is_none() {
            for phase in [Phase::Symbolic, Phase::Numeric] {
                let mut g = phase.mark(f);
                g.name = format!("{}_{}", f.name, phase.name());
                funcs.push(g);
            }
        } else {
            funcs.push(f.clone());
        }
    }
    IRModule { funcs }
}

/// Lowers every function of `module` to `opts.target_stage` (see the module documentation).
pub fn lower(module: &IRModule, opts: &PipelineOptions) -> Result<IRModule, PipelineError> {
    lower_traced(module, opts).map(|out| out.module)
}

/// [`lower`], also returning the printed module after each pass named in `opts.print_after`.
pub fn lower_traced(
    module: &IRModule,
    opts: &PipelineOptions,
) -> Result<LowerOutput, PipelineError> {
    if let Some(name) = opts
        .print_after
        .iter()
        .find(|n| !PASSES.contains(&n.as_str()))
    {
        return Err(PipelineError::UnknownPass { name: name.clone() });
    }
    verify_all(module).map_err(|(func, errors)| PipelineError::Input { func, errors })?;
    let mut current = split_phases(module, opts);
    let mut dumps = Vec::new();
    for (name, produces, pass) in passes() {
        if produces > opts.target_stage {
            break;
        }
        let funcs = current
            .funcs
            .iter()
            .map(|f| {
                pass(f, opts).map_err(|error| PipelineError::Lower {
                    pass: name.to_string(),
                    func: f.name.clone(),
                    error,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        current = IRModule { funcs };
        if opts.verify {
            verify_all(&current).map_err(|(func, errors)| PipelineError::Verify {
                pass: name.to_string(),
                func,
                errors,
            })?;
        }
        if opts.print_after.iter().any(|n| n == name) {
            dumps.push((name.to_string(), print_module(&current)));
        }
    }
    Ok(LowerOutput {
        module: current,
        dumps,
    })
}
