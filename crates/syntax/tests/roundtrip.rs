//! Round trip of handwritten scripts covering every construct: `print(parse(s))` is a fixed point
//! of print∘parse, the reparsed IR is structurally equal, and alias spellings print canonically.

use sparsetir_ir::equal::func_eq;
use sparsetir_ir::printer::print_module;
use sparsetir_ir::{AxisKind, BinOp, DType, Expr, ForKind, IterAxis, IterKind, Stmt};
use sparsetir_syntax::{parse_module, render};

const SCRIPTS: &[(&str, &str)] = &[
    ("csrmm", include_str!("scripts/csrmm.py")),
    ("sddmm", include_str!("scripts/sddmm.py")),
    ("sddmm_alias", include_str!("scripts/sddmm_alias.py")),
    ("fused_sddmm", include_str!("scripts/fused_sddmm.py")),
    ("hyper_attach", include_str!("scripts/hyper_attach.py")),
    ("softmax", include_str!("scripts/softmax.py")),
    ("bsr", include_str!("scripts/bsr.py")),
    ("ell", include_str!("scripts/ell.py")),
    ("dcsr", include_str!("scripts/dcsr.py")),
    ("bsrmm_stage_ii", include_str!("scripts/bsrmm_stage_ii.py")),
    (
        "bsrmm_stage_iii",
        include_str!("scripts/bsrmm_stage_iii.py"),
    ),
    ("gpu_stage_iii", include_str!("scripts/gpu_stage_iii.py")),
];

fn parse_ok(name: &str, src: &str) -> sparsetir_ir::IRModule {
    match parse_module(src) {
        Ok(m) => m,
        Err(d) => panic!("{name} does not parse:\n{}", render(&d, name, src)),
    }
}

#[test]
fn print_parse_is_a_fixed_point() {
    for (name, src) in SCRIPTS {
        let m1 = parse_ok(name, src);
        let p1 = print_module(&m1);
        let m2 = parse_ok(&format!("{name} (printed)"), &p1);
        let p2 = print_module(&m2);
        assert_eq!(p1, p2, "{name}: print(parse(print(parse(s)))) differs");
        assert_eq!(m1.funcs.len(), m2.funcs.len());
        for (a, b) in m1.funcs.iter().zip(&m2.funcs) {
            assert!(func_eq(a, b), "{name}: reparsed IR differs\n{p1}");
        }
    }
}

#[test]
fn aliases_print_canonically() {
    let alias = parse_ok("alias", include_str!("scripts/sddmm_alias.py"));
    let canon = parse_ok("canon", include_str!("scripts/sddmm.py"));
    assert_eq!(print_module(&alias), print_module(&canon));
    let text = print_module(&alias);
    for bad in [
        "T.dense_fixed",
        "T.sparse_variable",
        "T.match_sparse_buffer",
        "T.iter(",
        "+=",
    ] {
        assert!(
            !text.contains(bad),
            "alias `{bad}` survived printing:\n{text}"
        );
    }
}

#[test]
#[ignore]
fn dump() {
    for (name, src) in SCRIPTS {
        println!("==== {name}\n{}", print_module(&parse_ok(name, src)));
    }
}
