//! Round trip of handwritten scripts covering every construct: `print(parse(s))` is a fixed point
//! of print∘parse, the reparsed IR is structurally equal, and alias spellings print canonically.

use sparsetir_ir::equal::func_eq;
use sparsetir_ir::printer::print_module;
use sparsetir_ir::{AxisKind, BinOp, DType, Expr, ForKind, IterAxis, IterKind, Stmt};
use sparsetir_syntax::{parse_module, render};

const SCRIPTS: &[(&str, &str)] = &[
    ("csrmm", include_str!("../scripts/csrmm.py")),
    ("sddmm", include_str!("../scripts/sddmm.py")),
    ("sddmm_alias", include_str!("../scripts/sddmm_alias.py")),
    ("fused_sddmm", include_str!("../scripts/fused_sddmm.py")),
    ("hyper_attach", include_str!("../scripts/hyper_attach.py")),
    ("softmax", include_str!("../scripts/softmax.py")),
    ("bsr", include_str!("../scripts/bsr.py")),
    ("ell", include_str!("../scripts/ell.py")),
    ("dcsr", include_str!("../scripts/dcsr.py")),
    (
        "bsrmm_stage_ii",
        include_str!("../scripts/bsrmm_stage_ii.py"),
    ),
    (
        "bsrmm_stage_iii",
        include_str!("../scripts/bsrmm_stage_iii.py"),
    ),
    ("gpu_stage_iii", include_str!("../scripts/gpu_stage_iii.py")),
    (
        "merge_stage_iii",
        include_str!("../scripts/merge_stage_iii.py"),
    ),
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
    let alias = parse_ok("alias", include_str!("../scripts/sddmm_alias.py"));
    let canon = parse_ok("canon", include_str!("../scripts/sddmm.py"));
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
fn parsed_ir_has_the_written_structure() {
    let m = parse_ok("csrmm", include_str!("../scripts/csrmm.py"));
    let f = &m.funcs[0];
    assert_eq!(f.name, "csrmm");
    assert_eq!(f.params.len(), 9);
    assert_eq!(f.vars[f.params[0]].dtype, DType::Handle);
    assert_eq!(f.vars[f.params[5]].dtype, DType::I32);
    let kinds: Vec<AxisKind> = f.axes.iter().map(|(_, a)| a.kind).collect();
    assert_eq!(
        kinds,
        [
            AxisKind::DenseFixed,
            AxisKind::CompressedVaried,
            AxisKind::DenseFixed,
            AxisKind::DenseFixed
        ]
    );
    let i = f.axis_by_name("I").unwrap();
    let j = f.axis_by_name("J").unwrap();
    assert_eq!(f.axes[j].parent, Some(i));
    assert_eq!(f.axes[j].indptr, f.param("indptr"));
    assert_eq!(f.axes[j].indices, f.param("indices"));
    assert_eq!(f.buffer_decls.len(), 3);
    assert_eq!(f.attrs.get_int("sparse_tir_level"), Some(2));
    let Stmt::SparseIteration(it) = &f.body else {
        panic!("expected one iteration")
    };
    assert_eq!(it.name, "csrmm");
    assert_eq!(
        it.kinds,
        [IterKind::Spatial, IterKind::Reduce, IterKind::Spatial]
    );
    assert_eq!(it.axes.len(), 3);
    assert!(it.init.is_some());
    let Stmt::Store(st) = &it.body else {
        panic!("expected a store")
    };
    // C[i, k] = C[i, k] + A[i, j] * B[j, k]
    let Expr::Binary(BinOp::Add, lhs, rhs) = &st.value else {
        panic!("expected +")
    };
    assert!(matches!(**lhs, Expr::Load { buffer, .. } if buffer == st.buffer));
    assert!(matches!(**rhs, Expr::Binary(BinOp::Mul, _, _)));
}

#[test]
fn sugar_desugars() {
    // `+=` becomes a load-add-store; aliases map to canonical kinds; a fused entry binds two vars.
    let m = parse_ok("alias", include_str!("../scripts/sddmm_alias.py"));
    let f = &m.funcs[0];
    let Stmt::SparseIteration(it) = &f.body else {
        panic!()
    };
    let Stmt::Store(st) = &it.body else { panic!() };
    assert!(matches!(&st.value, Expr::Binary(BinOp::Add, l, _)
        if matches!(&**l, Expr::Load { buffer, indices } if *buffer == st.buffer && *indices == st.indices)));
    let fused = parse_ok("fused", include_str!("../scripts/fused_sddmm.py"));
    let Stmt::SparseIteration(it) = &fused.funcs[0].body else {
        panic!()
    };
    assert!(matches!(&it.axes[0], IterAxis::Fuse(v) if v.len() == 2));
    assert_eq!(it.vars.len(), 3);
    assert!(!fused.funcs[0].axes[fused.funcs[0].axis_by_name("J").unwrap()].sorted);
    assert_eq!(it.annotations.get("weights").map(|_| ()), Some(()));
}

#[test]
fn ranges_and_constants() {
    let src = "@T.prim_func\ndef f(a: T.handle, n: T.int32, lo: T.int32):\n    A = T.match_buffer(a, (n,), \"float32\")\n    for i in T.serial(lo, lo + n):\n        for j in T.serial(2, n):\n            A[i] = T.float32(-0.5) + T.Cast(\"float32\", -5)\n";
    let m = parse_ok("ranges", src);
    let f = &m.funcs[0];
    let lo = Expr::Var(f.param("lo").unwrap());
    let n = Expr::Var(f.param("n").unwrap());
    let Stmt::For(outer) = &f.body else { panic!() };
    assert_eq!(outer.min, lo);
    assert_eq!(outer.extent, n);
    assert_eq!(outer.kind, ForKind::Serial);
    let Stmt::For(inner) = &outer.body else {
        panic!()
    };
    assert_eq!(inner.min, Expr::int(2));
    assert_eq!(inner.extent, Expr::sub(n.clone(), Expr::int(2)));
    let Stmt::Store(st) = &inner.body else {
        panic!()
    };
    let Expr::Binary(BinOp::Add, a, b) = &st.value else {
        panic!()
    };
    assert_eq!(**a, Expr::Float(-0.5, DType::F32));
    assert_eq!(
        **b,
        Expr::Cast(DType::F32, Box::new(Expr::Int(-5, DType::I32)))
    );
}
