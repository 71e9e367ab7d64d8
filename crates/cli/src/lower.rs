//! `sparsetir lower` (print a script lowered to stage II or III through the pipeline, with
//! `--print-after` dumps) and the lowering step of `sparsetir run --backend interp`.

use std::path::Path;

use sparsetir_ir::{printer, IRModule, PrimFunc, Stage};
use sparsetir_syntax::Diagnostic;
use sparsetir_transform::{lower_traced, PipelineError, PipelineOptions};

use crate::{parse, pick_func, read_source, verify, Failure, Source};

/// Options of `sparsetir lower`.
pub struct Options<'a> {
    pub file: &'a Path,
    /// 1, 2 or 3.
    pub stage: u8,
    pub check_invalid_binary_search: bool,
    pub print_after: &'a [String],
    pub func: Option<&'a str>,
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
