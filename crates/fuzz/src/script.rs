//! Target `script`: text → parse → verify → print → reparse (the round trip must hold for
//! anything that parses and verifies) → lower every stage-I function to stage III.

use std::path::Path;

use sparsetir_ir::equal::{first_difference, module_eq};
use sparsetir_ir::printer::print_module;
use sparsetir_ir::{verify_func, IRModule, Stage};
use sparsetir_syntax::parse_bytes;
use sparsetir_transform::{lower, PipelineOptions};

/// The seed scripts: the catalog, their stage II and III forms, the format rules and the
/// malformed corpus (when the repository is at hand). The valid ones come first; the second
/// value is how many.
pub fn seeds() -> (Vec<String>, usize) {
    let mut out: Vec<String> = Vec::new();
    for k in sparsetir_ops::catalog() {
        out.push(k.source.to_string());
        if let Ok(m) = sparsetir_syntax::parse_module(k.source) {
            for stage in [Stage::II, Stage::III] {
                if let Ok(l) = lower(&m, &options(stage)) {
                    out.push(print_module(&l));
                }
            }
        }
    }
    let valid = out.len();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for dir in ["crates/ops/rules", "tests/malformed"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        for p in paths {
            if p.extension().is_some_and(|e| e == "sp") {
                if let Ok(b) = std::fs::read(&p) {
                    out.push(String::from_utf8_lossy(&b).into_owned());
                }
            }
        }
    }
    (out, valid)
}

fn options(stage: Stage) -> PipelineOptions {
    PipelineOptions {
        target_stage: stage,
        ..PipelineOptions::for_interpreter()
    }
}

/// Runs one script input; `Err` is a finding (a broken invariant), described.
pub fn execute(bytes: &[u8]) -> Result<(), String> {
    let module = match parse_bytes(bytes) {
        Ok(m) => m,
        Err(diags) => {
            if diags.is_empty() {
                return Err("parse failed with no diagnostic".into());
            }
            for d in &diags {
                if d.span.start > d.span.end || d.span.end as usize > bytes.len() {
                    return Err(format!(
                        "diagnostic span {}..{} outside the input ({} bytes): {}",
                        d.span.start,
                        d.span.end,
                        bytes.len(),
                        d.message
                    ));
                }
            }
            return Ok(());
        }
    };
    if module.funcs.iter().any(|f| verify_func(f).is_err()) {
        return Ok(());
    }
    crate::deep();
    round_trip(&module)?;
    for f in &module.funcs {
        if f.stage() != Stage::I {
            continue;
        }
        let one = IRModule {
            funcs: vec![f.clone()],
        };
        if let Ok(l) = lower(&one, &options(Stage::III)) {
            round_trip(&l).map_err(|e| format!("after lowering `{}`: {e}", f.name))?;
        }
    }
    Ok(())
}

/// `parse(print(m))` equals `m`, and printing is a fixed point.
fn round_trip(module: &IRModule) -> Result<(), String> {
    let text = print_module(module);
    let again = sparsetir_syntax::parse_module(&text).map_err(|d| {
        format!(
            "printed module does not parse: {}\n{text}",
            d.first().map(|d| d.message.as_str()).unwrap_or("?")
        )
    })?;
    let text2 = print_module(&again);
    if !module_eq(module, &again) {
        let how = if text2 == text {
            let at = module
                .funcs
                .iter()
                .zip(&again.funcs)
                .find_map(|(a, b)| first_difference(a, b))
                .unwrap_or_default();
            format!("(both print the same: the printer loses something; {at})")
        } else {
            format!("(printed again:)\n{text2}")
        };
        return Err(format!(
            "parse(print(m)) is not structurally equal to m\n{text}\n{how}"
        ));
    }
    if text2 != text {
        return Err(format!(
            "printing is not a fixed point\n--- first\n{text}\n--- second\n{text2}"
        ));
    }
    Ok(())
}
