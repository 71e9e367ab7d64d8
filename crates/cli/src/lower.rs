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

use sparsetir_ir::{printer, verify_func, IRModule, PrimFunc, Stage};
use sparsetir_ops::composable::Format;
use sparsetir_runtime::composable::coo::{coo_rule, coo_rule_for};
use sparsetir_runtime::composable::data::{hyb_kinds, recognize, Decomposition, RuleKind};
use sparsetir_syntax::Diagnostic;
use sparsetir_transform::{
    bsr_rule, decompose_format_func, ell_csr_rules, hyb_rules, lower_traced, remove_preprocess,
    DecomposeError, FormatRewriteRule, PipelineError, PipelineOptions, RuleError,
};

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
    let opts = PipelineOptions {
        target_stage: target,
        check_invalid_binary_search: o.check_invalid_binary_search,
        verify: true,
        print_after: o.print_after.to_vec(),
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
    let opts = PipelineOptions {
        target_stage: Stage::III,
        check_invalid_binary_search: true,
        verify: true,
        print_after: Vec::new(),
    };
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

/// The rules of one `--decompose` argument, and the rule script they came from (their own
/// errors are located in it).
pub(crate) struct RuleSet {
    spec: String,
    rules: Vec<FormatRewriteRule>,
    /// What each rule stores, for `run` (`None`: not a catalog rule).
    kinds: Vec<Option<RuleKind>>,
    script: Option<Source>,
    /// The builtin `coo`: its buffer is chosen per function ([`coo_rule_for`]).
    per_function: bool,
}

const BUILTIN_RULES: &str = "bsr:B, hyb(parts=P,buckets=W1,W2,...), ell(width=W), \
                             ell(width=W)+csr, coo";

/// Resolves a `--decompose` argument: a rule script (`FILE` or `FILE:name=value,...`) or a
/// builtin rule name.
pub(crate) fn resolve_rules(spec: &str) -> Result<RuleSet, Failure> {
    let t = spec.trim();
    let (path, bindings) = match t.rsplit_once(':') {
        Some((p, b)) if b.contains('=') => (p, Some(b)),
        _ => (t, None),
    };
    if bindings.is_none() && !Path::new(path).is_file() {
        let (rules, kinds) = builtin_rules(t)?;
        return Ok(RuleSet {
            spec: t.to_string(),
            rules,
            kinds: kinds.into_iter().map(Some).collect(),
            script: None,
            per_function: Format::parse(t) == Ok(Format::Coo),
        });
    }
    let mut bound: Vec<(String, i64)> = Vec::new();
    for item in bindings.unwrap_or("").split(',').map(str::trim) {
        if item.is_empty() {
            continue;
        }
        let parsed = item
            .split_once('=')
            .map(|(k, v)| (k.trim(), v.trim().parse::<i64>()));
        match parsed {
            Some((k, Ok(v))) if !k.is_empty() => bound.push((k.to_string(), v)),
            _ => {
                return Err(Failure(format!(
                    "error: --decompose `{t}`: bad rule parameter `{item}` (expected \
                     NAME=INTEGER, e.g. `{path}:block_size=4`)"
                )))
            }
        }
    }
    let src = read_source(Path::new(path)).map_err(|f| {
        Failure(format!(
            "{} (--decompose `{t}` names a rule script; builtin rules: {BUILTIN_RULES})",
            f.0.trim_end()
        ))
    })?;
    let pairs: Vec<(&str, i64)> = bound.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    let rule = FormatRewriteRule::from_script_with(&src.text(), &pairs)
        .map_err(|e| src.fail(&rule_diagnostics(&e)))?;
    let kind = recognize(&rule, &pairs);
    Ok(RuleSet {
        spec: t.to_string(),
        rules: vec![rule],
        kinds: vec![kind],
        script: Some(src),
        per_function: false,
    })
}

/// A rule error as diagnostics, with a hint when a `{param}` of the rule name is unbound.
fn rule_diagnostics(e: &RuleError) -> Vec<Diagnostic> {
    let mut d = e.diagnostics();
    for x in &mut d {
        if x.message.contains("rule name `") && x.message.contains('{') {
            x.notes.push(
                "the name names a rule parameter: bind it, e.g. `--decompose FILE:block_size=4`"
                    .into(),
            );
        }
    }
    d
}

/// The rules of a builtin name (see the module documentation), with what each stores.
fn builtin_rules(t: &str) -> Result<(Vec<FormatRewriteRule>, Vec<RuleKind>), Failure> {
    let unknown = |why: String| {
        Failure(format!(
            "error: unknown rule `{t}`: {why} (a rule is a rule script FILE or \
             FILE:name=value,..., or a builtin: {BUILTIN_RULES})"
        ))
    };
    let looks_builtin = ["bsr", "hyb", "ell", "csr", "coo", "auto"]
        .iter()
        .any(|p| t.starts_with(p));
    let format = match Format::parse(t) {
        Ok(f) => f,
        Err(e) if looks_builtin => return Err(unknown(e.reason)),
        Err(_) => return Err(unknown("no such file, and not a builtin rule".into())),
    };
    let bad = |e: RuleError| Failure(format!("error: rule `{t}`: {e}"));
    match format {
        Format::Bsr(b) => Ok((
            vec![bsr_rule(b as i64).map_err(bad)?],
            vec![RuleKind::Bsr(b)],
        )),
        Format::Hyb { parts, buckets } => {
            let Some(buckets) = buckets else {
                return Err(unknown(
                    "hyb needs its bucket widths here: hyb(parts=P,buckets=W1,W2,...) (bench \
                     chooses them from the matrix)"
                        .into(),
                ));
            };
            let parts = parts.unwrap_or(1);
            let rules = hyb_rules(parts, &buckets).map_err(bad)?;
            Ok((rules, hyb_kinds(parts, &buckets)))
        }
        Format::Ell(Some(w)) => {
            let rest = t.ends_with("+csr");
            let rules = ell_csr_rules(w as i64, rest).map_err(bad)?;
            let mut kinds = vec![RuleKind::Ell(w)];
            if rest {
                kinds.push(RuleKind::Dcsr);
            }
            Ok((rules, kinds))
        }
        Format::Ell(None) => Err(unknown(
            "ell needs its width here: ell(width=W) or ell(width=W)+csr (bench chooses it \
             from the matrix)"
                .into(),
        )),
        Format::Coo => Ok((vec![coo_rule().map_err(bad)?], vec![RuleKind::Coo])),
        Format::Csr | Format::Auto => Err(unknown(format!(
            "`{format}` is not a rewrite rule (csr is the input format)"
        ))),
        Format::Condense => Err(unknown(
            "condense is a storage format of `bench spmm --format condense` with its own kernel \
             (crates/ops/formats/condense_spmm.sp), not a rewrite rule"
                .into(),
        )),
        Format::Sell { .. } => Err(unknown(
            "sell is a storage format of `bench spmv --format sell` with its own kernel              (crates/ops/formats/spmv_sell.sp), not a rewrite rule"
                .into(),
        )),
    }
}

/// The rules of every set for one function, with what each stores: `coo` is pointed at the
/// function's input CSR matrix, and left out where the function has none.
fn rules_for(sets: &[RuleSet], f: &PrimFunc) -> Vec<(FormatRewriteRule, Option<RuleKind>)> {
    sets.iter()
        .flat_map(|s| {
            if s.per_function {
                coo_rule_for(f)
                    .into_iter()
                    .map(|r| (r, Some(RuleKind::Coo)))
                    .collect::<Vec<_>>()
            } else {
                s.rules
                    .iter()
                    .cloned()
                    .zip(s.kinds.iter().cloned())
                    .collect()
            }
        })
        .collect()
}

/// The decomposition `sparsetir run --decompose` runs: `f` decomposed by the rules of every
/// `--decompose` argument (errors located as for `lower`), without the preprocess copies, and
/// what builds the new formats' arrays from the data bound to `f`.
pub(crate) fn for_run(
    src: &Source,
    f: &PrimFunc,
    specs: &[String],
) -> Result<(PrimFunc, Decomposition), Failure> {
    let sets = specs
        .iter()
        .map(|spec| resolve_rules(spec))
        .collect::<Result<Vec<_>, _>>()?;
    let module = IRModule {
        funcs: vec![f.clone()],
    };
    let mut out = decompose(src, &module, &sets, false)?;
    let g = out.funcs.remove(0);
    let rules = rules_for(&sets, f);
    let decomposition = Decomposition::new(&rules).map_err(|e| {
        let all: Vec<&str> = sets.iter().map(|s| s.spec.as_str()).collect();
        let message = format!("--decompose {}: cannot run: {e}", all.join(" --decompose "));
        // A rule script nothing builds data for is shown in the script.
        let script = sets
            .iter()
            .find(|s| s.script.is_some() && s.kinds.iter().any(Option::is_none));
        match script.and_then(|s| Some((s.script.as_ref()?, s.rules.first()?))) {
            Some((script, rule)) => script.fail(&[Diagnostic::new(rule.new_format.span, message)]),
            None => Failure(format!("error: {message}")),
        }
    })?;
    Ok((g, decomposition))
}

/// Applies every rule of `sets` (together, in order) to each function of `module`, keeping or
/// dropping the preprocess iterations; every rule must apply to some function.
fn decompose(
    src: &Source,
    module: &IRModule,
    sets: &[RuleSet],
    keep_preprocess: bool,
) -> Result<IRModule, Failure> {
    let rules_for = |f: &PrimFunc| -> Vec<FormatRewriteRule> {
        rules_for(sets, f).into_iter().map(|(r, _)| r).collect()
    };
    // A rule whose buffers no function declares does not apply.
    for set in sets {
        for r in &set.rules {
            let applies = module.funcs.iter().any(|f| {
                f.stage() == Stage::I
                    && if set.per_function {
                        coo_rule_for(f).is_ok()
                    } else {
                        r.buffers_to_rewrite.iter().any(|b| {
                            f.buffer_by_name(b)
                                .is_some_and(|h| f.buffers[h].is_sparse())
                        })
                    }
            });
            if applies {
                continue;
            }
            let Some(f) = module.funcs.first() else {
                return Err(Failure("error: the script defines no function".into()));
            };
            let stage = module.funcs.iter().any(|f| f.stage() != Stage::I);
            let why = if stage {
                "rules rewrite stage-I functions only".to_string()
            } else if set.per_function {
                coo_rule_for(f).err().unwrap_or_default()
            } else {
                let sparse: Vec<&str> = f
                    .buffer_decls
                    .iter()
                    .filter(|b| f.buffers[**b].is_sparse())
                    .map(|b| f.buffers[*b].name.as_str())
                    .collect();
                format!(
                    "no function declares the sparse buffer {} (`{}` has {})",
                    r.buffers_to_rewrite
                        .iter()
                        .map(|b| format!("`{b}`"))
                        .collect::<Vec<_>>()
                        .join(" or "),
                    f.name,
                    if sparse.is_empty() {
                        "none".to_string()
                    } else {
                        sparse.join(", ")
                    }
                )
            };
            return Err(src.fail(&[Diagnostic::new(
                f.span,
                format!(
                    "rule `{}` (--decompose {}) does not apply: {why}",
                    r.name, set.spec
                ),
            )]));
        }
    }
    let mut funcs = Vec::new();
    for f in &module.funcs {
        let g = decompose_format_func(f, &rules_for(f), true)
            .map_err(|e| decompose_failure(src, f, sets, &e))?;
        let g = if keep_preprocess {
            g
        } else {
            remove_preprocess(&g)
        };
        if let Err(errs) = verify_func(&g) {
            let msgs: Vec<String> = errs.iter().map(|e| e.message.clone()).collect();
            return Err(Failure(format!(
                "error: internal compiler error: the decomposed `{}` does not verify: {}",
                g.name,
                msgs.join("; ")
            )));
        }
        funcs.push(g);
    }
    Ok(IRModule { funcs })
}

/// A decomposition error located in the rule script (problems of the rule itself) or in the
/// input script (the rule does not fit the function; at the function when nothing closer is
/// known).
fn decompose_failure(src: &Source, f: &PrimFunc, sets: &[RuleSet], e: &DecomposeError) -> Failure {
    if let DecomposeError::DuplicateRule { rule } = e {
        return Failure(format!(
            "error: two --decompose rules are named `{rule}` (a rule's name suffixes everything \
             it adds: give each rule once)"
        ));
    }
    if let DecomposeError::Rule { rule, error } = e {
        let set = sets
            .iter()
            .find(|s| s.rules.iter().any(|r| r.name == *rule));
        if let Some(script) = set.and_then(|s| s.script.as_ref()) {
            return script.fail(&rule_diagnostics(error));
        }
    }
    // A builtin rule's own spans are not in the input script; a buffer the rule does not fit
    // is shown at its declaration.
    let buffer_span = match e {
        DecomposeError::BufferAxes { buffer, .. }
        | DecomposeError::UnknownBuffer { buffer, .. } => {
            f.buffer_by_name(buffer).map(|b| f.buffers[b].span)
        }
        _ => None,
    };
    let span = match (buffer_span, e.span()) {
        (Some(b), _) if !b.is_unknown() => b,
        (_, s) if s.is_unknown() || matches!(e, DecomposeError::Rule { .. }) => f.span,
        (_, s) => s,
    };
    src.fail(&[Diagnostic::new(
        span,
        format!("cannot decompose `{}`: {e}", f.name),
    )])
}
