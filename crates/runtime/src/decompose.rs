//! Format decomposition rules given as text — builtin names (`bsr:B`, `hyb(parts=P,buckets=...)`,
//! `ell(width=W)`, `ell(width=W)+csr`, `coo`) or rule scripts (`FILE` or `FILE:name=value,...`)
//! — resolved, applied to stage-I functions by `decompose_format` (SPEC §3.1), and paired with the
//! [`Decomposition`] that builds the new formats' arrays from the data bound to the original
//! function. Shared by the CLI (`lower --decompose`, `run --decompose`) and the Python package
//! (`sparsetir.compile(..., decompose=...)`).
//!
//! Errors are [`RuleFailure`]s: the complete message as the CLI prints it, located in the rule
//! script (problems of the rule itself) or in the input script (a rule that does not fit the
//! function), rendered with `file:line:col`.

use std::path::Path;

use sparsetir_ir::{verify_func, IRModule, PrimFunc, Stage};
use sparsetir_ops::composable::Format;
use sparsetir_syntax::{render, Diagnostic};
use sparsetir_transform::{
    bsr_rule, decompose_format_func, ell_csr_rules, hyb_rules, remove_preprocess, DecomposeError,
    FormatRewriteRule, RuleError,
};

use crate::composable::coo::{coo_rule, coo_rule_for};
use crate::composable::data::{hyb_kinds, recognize, Decomposition, RuleKind};

/// A failure, as the whole message the CLI prints (`error: ...`, or rendered diagnostics).
/// Deliberately not `Display`: callers pass the message on as it is, never prefixed again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleFailure(pub String);

/// A script's text and the name its diagnostics show (a path, `<stdin>`, `<string>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Script {
    pub name: String,
    pub text: String,
}

impl Script {
    /// Reads a script file; the error is `error: cannot read PATH: ...`.
    pub fn read(path: &Path) -> Result<Script, RuleFailure> {
        let bytes = std::fs::read(path)
            .map_err(|e| RuleFailure(format!("error: cannot read {}: {e}", path.display())))?;
        Ok(Script {
            name: path.display().to_string(),
            text: String::from_utf8_lossy(&bytes).into_owned(),
        })
    }

    /// Diagnostics rendered against this script.
    pub fn fail(&self, diags: &[Diagnostic]) -> RuleFailure {
        RuleFailure(render(diags, &self.name, &self.text))
    }
}

/// The rules of one `--decompose` argument, and the rule script they came from (their own
/// errors are located in it).
pub struct RuleSet {
    spec: String,
    rules: Vec<FormatRewriteRule>,
    /// What each rule stores, for `run` (`None`: not a catalog rule).
    kinds: Vec<Option<RuleKind>>,
    script: Option<Script>,
    /// The builtin `coo`: its buffer is chosen per function ([`coo_rule_for`]).
    per_function: bool,
}

const BUILTIN_RULES: &str = "bsr:B, hyb(parts=P,buckets=W1,W2,...), ell(width=W), \
                             ell(width=W)+csr, coo";

/// Resolves a `--decompose` argument: a rule script (`FILE` or `FILE:name=value,...`) or a
/// builtin rule name.
pub fn resolve_rules(spec: &str) -> Result<RuleSet, RuleFailure> {
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
                return Err(RuleFailure(format!(
                    "error: --decompose `{t}`: bad rule parameter `{item}` (expected \
                     NAME=INTEGER, e.g. `{path}:block_size=4`)"
                )))
            }
        }
    }
    let src = Script::read(Path::new(path)).map_err(|f| {
        RuleFailure(format!(
            "{} (--decompose `{t}` names a rule script; builtin rules: {BUILTIN_RULES})",
            f.0.trim_end()
        ))
    })?;
    let pairs: Vec<(&str, i64)> = bound.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    let rule = FormatRewriteRule::from_script_with(&src.text, &pairs)
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
fn builtin_rules(t: &str) -> Result<(Vec<FormatRewriteRule>, Vec<RuleKind>), RuleFailure> {
    let unknown = |why: String| {
        RuleFailure(format!(
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
    let bad = |e: RuleError| RuleFailure(format!("error: rule `{t}`: {e}"));
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
        Format::TwoFour { .. } => Err(unknown(
            "2:4 is a storage format of `bench spmm --format 2:4` with the catalog's spmm_24 \
             kernel, not a rewrite rule"
                .into(),
        )),
        Format::Condense => Err(unknown(
            "condense is a storage format of `bench spmm --format condense` with its own kernel \
             (crates/ops/formats/condense_spmm.sp), not a rewrite rule"
                .into(),
        )),
        Format::Sell { .. } => Err(unknown(
            "sell is a storage format of `bench spmv --format sell` with its own kernel \
             (crates/ops/formats/spmv_sell.sp), not a rewrite rule"
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
pub fn for_run(
    src: &Script,
    f: &PrimFunc,
    specs: &[String],
) -> Result<(PrimFunc, Decomposition), RuleFailure> {
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
            None => RuleFailure(format!("error: {message}")),
        }
    })?;
    Ok((g, decomposition))
}

/// Applies every rule of `sets` (together, in order) to each function of `module`, keeping or
/// dropping the preprocess iterations; every rule must apply to some function.
pub fn decompose(
    src: &Script,
    module: &IRModule,
    sets: &[RuleSet],
    keep_preprocess: bool,
) -> Result<IRModule, RuleFailure> {
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
                return Err(RuleFailure("error: the script defines no function".into()));
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
            return Err(RuleFailure(format!(
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
fn decompose_failure(
    src: &Script,
    f: &PrimFunc,
    sets: &[RuleSet],
    e: &DecomposeError,
) -> RuleFailure {
    if let DecomposeError::DuplicateRule { rule } = e {
        return RuleFailure(format!(
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
