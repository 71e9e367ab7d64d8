//! `sparsetir lower` (print a script lowered to stage II or III through the pipeline, with
//! `--print-after` dumps, optionally decomposed first by format rewrite rules with
//! `--decompose`) and the lowering step of `sparsetir run --backend interp`.
//!
//! # `--decompose RULE`
//!
//! Repeatable; the rules of every argument are applied together, in order, by
//! `decompose_format` (SPEC §3.1) before any lowering. A `RULE` is
//! - a rule script (the language of `sparsetir_transform::format_rule`), with its rule
//!   parameters bound after a colon: `bsr.rule.sp:block_size=4` (several: `f.sp:a=1,b=2`); or
//! - a builtin: `bsr:B` (the catalog's CSR → BSR rule), `hyb(parts=P,buckets=W1,W2,...)` (one
//!   ELL rule per column part × bucket, as `bench --format hyb(...)` builds), `ell(width=W)`
//!   (ELL of every row), `ell(width=W)+csr` (the same plus a DCSR remainder) or `coo` (the
//!   coordinate list of `crates/ops/rules/coo.rule.sp`, pointed at each function's input CSR
//!   matrix: the one sparse buffer over `[I, J]` that nothing writes, csrmm's `A` or sddmm's
//!   `X`; outputs are never rewritten, see `sparsetir_runtime::composable::coo`).
//!
//! Errors name their location: a rule script's own problems in the rule file, a rule that does
//! not apply to the function (no such buffer, other axes, an iteration it cannot clone) in the
//! input script.

use std::path::Path;

use sparsetir_ir::{printer, IRModule, PrimFunc, Stage};
use sparsetir_runtime::composable::data::Decomposition;
use sparsetir_runtime::decompose::{self as rules, RuleFailure, RuleSet, Script};
use sparsetir_syntax::Diagnostic;
use sparsetir_transform::{lower_traced, Phase, PipelineError, PipelineOptions};

use crate::{parse, pick_func, read_source, verify, Failure, Source};

/// Options of `sparsetir lower`.
pub struct Options<'a> {
    pub file: &'a Path,
    /// 1, 2 or 3.
    pub stage: u8,
    pub check_invalid_binary_search: bool,
    pub print_after: &'a [String],
    pub func: Option<&'a str>,
    /// `--decompose` rules (see the module documentation), applied before lowering.
    pub decompose: &'a [String],
    /// Drop the format-rewrite (preprocess) iterations the decomposition adds.
    pub no_preprocess: bool,
    /// `--phase`: lower a function that assembles an output for this phase only.
    pub phase: Option<&'a str>,
    /// `--schedule`: the scheduled function is printed (see [`crate::build::scheduled`]).
    pub schedule: Option<&'a Path>,
    /// `--set PARAM=VALUE` with `--schedule`.
    pub sets: &'a [String],
    /// `--cpu-passes` with `--schedule` at stage 3: the C path's passes run too.
    pub cpu_passes: bool,
}

fn stage_of(n: u8) -> Result<Stage, Failure> {
    match n {
        1 => Ok(Stage::I),
        2 => Ok(Stage::II),
        3 => Ok(Stage::III),
        _ => Err(Failure(format!(
            "error: --stage must be 1, 2 or 3, got {n}"
        ))),
    }
}

/// Renders a pipeline failure against the script: located findings with file:line:col (a
/// finding without a source position is shown at its function's header).
fn fail(src: &Source, module: &IRModule, e: &PipelineError) -> Failure {
    let located = e.located();
    if located.is_empty() {
        return Failure(format!("error: {e}"));
    }
    let fallback = e
        .func()
        .and_then(|name| module.get(name))
        .map(|f| f.span)
        .unwrap_or_default();
    let diags: Vec<Diagnostic> = located
        .into_iter()
        .map(|(span, message)| Diagnostic {
            span: if span.is_unknown() { fallback } else { span },
            message,
            notes: Vec::new(),
        })
        .collect();
    src.fail(&diags)
}

/// `sparsetir lower FILE --stage N ...`: the lowered module's canonical text on stdout, the
/// `--print-after` dumps on stderr (each after a `# IR after <pass>:` line).
pub fn run(o: &Options) -> Result<(), Failure> {
    let target = stage_of(o.stage)?;
    let src = read_source(o.file)?;
    let mut module = parse(&src)?;
    verify(&src, &module)?;
    if let Some(schedule) = o.schedule {
        let other = [
            (!o.decompose.is_empty(), "--decompose"),
            (o.phase.is_some(), "--phase"),
            (!o.print_after.is_empty(), "--print-after"),
            (o.no_preprocess, "--no-preprocess"),
        ];
        if let Some((_, flag)) = other.iter().find(|(on, _)| *on) {
            return Err(Failure(format!(
                "error: --schedule does not combine with {flag}"
            )));
        }
        let f = pick_func(&module, o.func)?;
        let mut g = crate::build::scheduled(&src, f, schedule, o.sets, target)?;
        if o.cpu_passes {
            if target != Stage::III {
                return Err(Failure(
                    "error: --cpu-passes runs on stage III: drop --stage or give --stage 3".into(),
                ));
            }
            g = sparsetir_runtime::build::cpu_passes(&g);
        }
        print!("{}", printer::print_module(&IRModule { funcs: vec![g] }));
        return Ok(());
    }
    if !o.sets.is_empty() {
        return Err(Failure("error: --set applies to --schedule".into()));
    }
    if o.cpu_passes {
        return Err(Failure("error: --cpu-passes applies to --schedule".into()));
    }
    if let Some(name) = o.func {
        let f = pick_func(&module, Some(name))?.clone();
        module = IRModule { funcs: vec![f] };
    }
    if !o.decompose.is_empty() {
        let sets = o
            .decompose
            .iter()
            .map(|spec| resolve_rules(spec))
            .collect::<Result<Vec<_>, _>>()?;
        module = decompose(&src, &module, &sets, !o.no_preprocess)?;
    } else if o.no_preprocess {
        return Err(Failure(
            "error: --no-preprocess applies to --decompose (give a rule)".into(),
        ));
    }
    let assembly = match o.phase {
        None => None,
        Some(name) => Some(Phase::from_name(name).ok_or_else(|| {
            let names: Vec<&str> = Phase::ALL.iter().map(|p| p.name()).collect();
            Failure(format!(
                "error: --phase {name}: no such phase (one of: {})",
                names.join(", ")
            ))
        })?),
    };
    let opts = PipelineOptions {
        target_stage: target,
        check_invalid_binary_search: o.check_invalid_binary_search,
        verify: true,
        print_after: o.print_after.to_vec(),
        assembly,
    };
    let out = lower_traced(&module, &opts).map_err(|e| fail(&src, &module, &e))?;
    for (pass, text) in &out.dumps {
        eprintln!("# IR after {pass}:");
        eprint!("{text}");
    }
    print!("{}", printer::print_module(&out.module));
    Ok(())
}

/// The lowering of `sparsetir run --backend interp`: `f` lowered to stage III (verified after
/// every pass) with checked binary searches, so that a coordinate absent from a buffer reads
/// its default value and a store to it is skipped, as in stage I (unchecked searches leave that
/// undefined). The lowered function keeps `f`'s parameters, so the arguments bound for `f`
/// serve it unchanged; a mismatch is reported as an internal error.
pub fn for_interp(src: &Source, f: &PrimFunc) -> Result<PrimFunc, Failure> {
    let module = IRModule {
        funcs: vec![f.clone()],
    };
    let opts = PipelineOptions::for_interpreter();
    let lowered = lower_traced(&module, &opts).map_err(|e| fail(src, &module, &e))?;
    let Some(g) = lowered.module.funcs.into_iter().next() else {
        return Err(Failure(format!(
            "error: internal compiler error: lowering `{}` produced no function",
            f.name
        )));
    };
    let names = |h: &PrimFunc| {
        h.params
            .iter()
            .map(|p| h.vars[*p].name.clone())
            .collect::<Vec<_>>()
    };
    if names(&g) != names(f) {
        return Err(Failure(format!(
            "error: internal compiler error: lowering changed the parameters of `{}` ({} -> {})",
            f.name,
            names(f).join(", "),
            names(&g).join(", ")
        )));
    }
    Ok(g)
}

// The rules themselves (resolving `--decompose` arguments, applying them, the data builders
// `run` needs) live in `sparsetir_runtime::decompose`, shared with the Python package; these
// wrappers pass its messages on unchanged.

fn failure(e: RuleFailure) -> Failure {
    Failure(e.0)
}

fn script(src: &Source) -> Script {
    Script {
        name: src.name.clone(),
        text: src.text(),
    }
}

/// Resolves a `--decompose` argument (see [`rules::resolve_rules`]).
pub(crate) fn resolve_rules(spec: &str) -> Result<RuleSet, Failure> {
    rules::resolve_rules(spec).map_err(failure)
}

/// The decomposition `sparsetir run --decompose` runs (see [`rules::for_run`]).
pub(crate) fn for_run(
    src: &Source,
    f: &PrimFunc,
    specs: &[String],
) -> Result<(PrimFunc, Decomposition), Failure> {
    rules::for_run(&script(src), f, specs).map_err(failure)
}

/// Applies every rule of `sets` to each function of `module` (see [`rules::decompose`]).
fn decompose(
    src: &Source,
    module: &IRModule,
    sets: &[RuleSet],
    keep_preprocess: bool,
) -> Result<IRModule, Failure> {
    rules::decompose(&script(src), module, sets, keep_preprocess).map_err(failure)
}
