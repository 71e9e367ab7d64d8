//! Tests of the lowering pipeline (`sparsetir_transform::lower`): the whole catalog lowers with
//! verification after every pass, the result prints and parses back equal, `print_after` records
//! exactly the module each pass produced, and failures name the pass, the function and the place.

use sparsetir_ir::equal::module_eq;
use sparsetir_ir::printer::print_module;
use sparsetir_ir::{verify_func, IRModule, Span, Stage, VerifyError};
use sparsetir_syntax::parse_module;
use sparsetir_transform::{
    lower, lower_sparse_buffer_module, lower_sparse_iter_module, lower_traced, LowerOptions,
    PipelineError, PipelineOptions, PASSES,
};

fn catalog_module(name: &str) -> IRModule {
    let k = sparsetir_ops::get(name).expect("catalog kernel");
    parse_module(k.source).expect("catalog kernel parses")
}

fn opts(stage: Stage, check: bool) -> PipelineOptions {
    PipelineOptions {
        target_stage: stage,
        check_invalid_binary_search: check,
        verify: true,
        print_after: Vec::new(),
        assembly: None,
    }
}

fn check_lowered(name: &str, out: &IRModule, stage: Stage) {
    for f in &out.funcs {
        assert_eq!(f.stage(), stage, "{name}: function `{}`", f.name);
        verify_func(f).unwrap_or_else(|e| panic!("{name} does not verify: {e:?}"));
    }
    let text = print_module(out);
    let back = parse_module(&text).unwrap_or_else(|d| panic!("{name}: {d:?}\n{text}"));
    assert!(module_eq(out, &back), "{name}: round trip differs\n{text}");
}

#[test]
fn catalog_lowers_to_stage_ii() {
    for k in sparsetir_ops::catalog() {
        for check in [false, true] {
            let m = catalog_module(k.name);
            let out = lower(&m, &opts(Stage::II, check))
                .unwrap_or_else(|e| panic!("{} (check {check}): {e}", k.name));
            check_lowered(k.name, &out, Stage::II);
            // The pipeline at stage II is exactly the first pass.
            let direct = lower_sparse_iter_module(
                &m,
                &LowerOptions {
                    check_invalid_binary_search: check,
                    assembly: None,
                },
            )
            .unwrap();
            assert!(module_eq(&out, &direct), "{}", k.name);
        }
    }
}

#[test]
fn catalog_lowers_to_stage_iii() {
    for k in sparsetir_ops::catalog() {
        for check in [false, true] {
            let m = catalog_module(k.name);
            let out = lower(&m, &opts(Stage::III, check))
                .unwrap_or_else(|e| panic!("{} (check {check}): {e}", k.name));
            check_lowered(k.name, &out, Stage::III);
            // Stage III has no sparse axes left.
            for f in &out.funcs {
                assert!(f.axes.is_empty(), "{}: axes remain", k.name);
            }
        }
    }
}

#[test]
fn stage_i_target_is_identity() {
    let m = catalog_module("sddmm");
    let out = lower_traced(&m, &opts(Stage::I, false)).unwrap();
    assert_eq!(out.module, m);
    assert!(out.dumps.is_empty());
}

#[test]
fn print_after_records_each_pass_output() {
    let m = catalog_module("csrmm");
    let stage_ii = lower_sparse_iter_module(&m, &LowerOptions::default()).unwrap();
    let mut o = opts(Stage::II, false);
    o.print_after = vec!["lower_sparse_iter".into()];
    let out = lower_traced(&m, &o).unwrap();
    assert_eq!(out.dumps.len(), 1);
    assert_eq!(out.dumps[0].0, "lower_sparse_iter");
    assert_eq!(out.dumps[0].1, print_module(&stage_ii));
    assert!(out.dumps[0].1.contains("\"sparse_tir_level\": 1"));

    // A pass that does not run for the target records nothing; no request, no dumps.
    o.print_after = vec!["lower_sparse_buffer".into()];
    assert!(lower_traced(&m, &o).unwrap().dumps.is_empty());
    o.print_after.clear();
    assert!(lower_traced(&m, &o).unwrap().dumps.is_empty());

    let mut o = opts(Stage::III, false);
    o.print_after = PASSES.iter().map(|s| s.to_string()).collect();
    let out = lower_traced(&m, &o).unwrap();
    let names: Vec<&str> = out.dumps.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, PASSES);
    assert_eq!(out.dumps[0].1, print_module(&stage_ii));
    let stage_iii = lower_sparse_buffer_module(&stage_ii).unwrap();
    assert_eq!(out.dumps[1].1, print_module(&stage_iii));
    assert!(module_eq(&out.module, &stage_iii));
    assert!(out.dumps[1].1.contains("\"sparse_tir_level\": 0"));
    // Only the second pass.
    o.print_after = vec!["lower_sparse_buffer".into()];
    let out = lower_traced(&m, &o).unwrap();
    assert_eq!(out.dumps.len(), 1);
    assert_eq!(out.dumps[0].1, print_module(&stage_iii));
}

#[test]
fn unknown_pass_name_is_an_error() {
    let mut o = opts(Stage::II, false);
    o.print_after = vec!["lower_sparse_iterr".into()];
    let e = lower(&catalog_module("spmv"), &o).unwrap_err();
    assert_eq!(
        e,
        PipelineError::UnknownPass {
            name: "lower_sparse_iterr".into()
        }
    );
    let msg = e.to_string();
    assert!(
        msg.contains("lower_sparse_iterr") && msg.contains("lower_sparse_buffer"),
        "{msg}"
    );
}

/// A lookup of a constant coordinate in a compressed axis, which `lower_sparse_iter` does not
/// support (the search would depend on no iterator).
const CONST_LOOKUP: &str = r#"
@T.prim_func
def const_lookup(a: T.handle, y: T.handle, indptr: T.handle, indices: T.handle,
                 m: T.int32, n: T.int32, nnz: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices), "int32")
    A = T.sp.match_buffer(a, (I, J), "float32")
    Y = T.sp.match_buffer(y, (I,), "float32")
    with T.sp.iteration([I], "S", "pick") as [i]:
        Y[i] = A[0, 2]
"#;

/// A varied chain under a `compressed_fixed` axis, which `lower_sparse_buffer` does not lay out.
const CF_CHAIN: &str = r#"
@T.prim_func
def cf_chain(a: T.handle, b: T.handle, indices_j: T.handle, indptr_k: T.handle,
             indices_k: T.handle, m: T.int32, n: T.int32, c: T.int32, p: T.int32,
             nnz_k: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_fixed(I, (n, c), indices_j, "int32")
    K = T.sp.compressed_varied(J, (p, nnz_k), (indptr_k, indices_k), "int32")
    A = T.sp.match_buffer(a, (I, J, K), "float32")
    B = T.sp.match_buffer(b, (I, J, K), "float32")
    with T.sp.iteration([I, J, K], "SSS", "copy") as [i, j, k]:
        B[i, j, k] = A[i, j, k]
"#;

/// Lowers `src` to stage III and checks the failure names `pass`, `func`, and a span within
/// `src` that covers `covers`.
fn check_pass_error(src: &str, pass: &str, func: &str, covers: &str) {
    let m = parse_module(src).expect("parses");
    verify_func(&m.funcs[0]).expect("valid stage I");
    let e = lower(&m, &opts(Stage::III, false)).unwrap_err();
    let PipelineError::Lower { error, .. } = &e else {
        panic!("expected a lowering error, got {e:?}");
    };
    assert_eq!(e.pass(), Some(pass), "{e}");
    assert_eq!(e.func(), Some(func));
    let located = e.located();
    assert_eq!(located.len(), 1);
    let span = located[0].0;
    assert_eq!(span, error.span());
    assert!(!span.is_unknown(), "{e}");
    let at = &src[span.range()];
    assert!(at.contains(covers), "span covers `{at}`, not `{covers}`");
    let msg = e.to_string();
    assert!(msg.contains(pass) && msg.contains(func), "{msg}");
}

#[test]
fn lowering_errors_name_pass_function_and_place() {
    check_pass_error(
        CONST_LOOKUP,
        "lower_sparse_iter",
        "const_lookup",
        "T.sp.iteration([I]",
    );
    check_pass_error(
        CF_CHAIN,
        "lower_sparse_buffer",
        "cf_chain",
        "T.sp.match_buffer(a, (I, J, K)",
    );
}

/// Iterates `J` without its parent `I`: it parses, the verifier rejects it.
const ORPHAN: &str = r#"
@T.prim_func
def orphan(x: T.handle, indptr: T.handle, indices: T.handle,
           m: T.int32, n: T.int32, nnz: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices), "int32")
    J_detach = T.sp.dense_fixed(n)
    X = T.sp.match_buffer(x, (J_detach,), "float32")
    with T.sp.iteration([J], "S", "orphan") as [j]:
        X[j] = T.float32(1)
"#;

#[test]
fn invalid_input_is_reported_before_any_pass() {
    let m = parse_module(ORPHAN).unwrap_or_else(|d| panic!("parses: {d:?}"));
    let want = verify_func(&m.funcs[0]).expect_err("the verifier rejects it");
    let e = lower(&m, &opts(Stage::II, false)).unwrap_err();
    assert_eq!(
        e,
        PipelineError::Input {
            func: "orphan".into(),
            errors: want.clone()
        }
    );
    assert_eq!(e.pass(), None);
    assert_eq!(e.func(), Some("orphan"));
    let located = e.located();
    assert_eq!(located.len(), want.len());
    for ((span, msg), w) in located.iter().zip(&want) {
        assert_eq!(*span, w.span);
        assert!(
            msg.contains("`orphan`") && msg.contains(&w.message),
            "{msg}"
        );
    }
    let iter = ORPHAN.find("with T.sp.iteration").unwrap();
    assert!(
        located
            .iter()
            .any(|(s, _)| s.start as usize <= iter + 5 && iter < s.end as usize),
        "{located:?}"
    );
    // Without verification between passes (release builds) the input is still checked first.
    let mut o = opts(Stage::II, false);
    o.verify = false;
    assert_eq!(lower(&m, &o).unwrap_err(), e);
}

#[test]
fn verify_error_reads_as_a_compiler_bug() {
    let e = PipelineError::Verify {
        pass: "lower_sparse_iter".into(),
        func: "f".into(),
        errors: vec![
            VerifyError {
                span: Span::new(3, 7),
                message: "first".into(),
            },
            VerifyError {
                span: Span::default(),
                message: "second".into(),
            },
        ],
    };
    let msg = e.to_string();
    assert!(msg.starts_with("internal compiler error"), "{msg}");
    assert!(
        msg.contains("`lower_sparse_iter`") && msg.contains("`f`"),
        "{msg}"
    );
    assert!(msg.contains("first") && msg.contains("second"), "{msg}");
    let located = e.located();
    assert_eq!(located.len(), 2);
    assert_eq!(located[0].0, Span::new(3, 7));
    assert!(located[1].1.contains("second"));
}

#[test]
fn mixed_stages_lower_only_what_is_behind_the_target() {
    let m = catalog_module("csrmm");
    let stage_ii = lower(&m, &opts(Stage::II, false)).unwrap();
    let mut renamed = stage_ii.funcs[0].clone();
    renamed.name = "csrmm_ii".into();
    let mixed = IRModule {
        funcs: vec![m.funcs[0].clone(), renamed.clone()],
    };
    let out = lower(&mixed, &opts(Stage::II, false)).unwrap();
    assert_eq!(out.funcs.len(), 2);
    assert!(module_eq(
        &IRModule {
            funcs: vec![out.funcs[0].clone()]
        },
        &stage_ii
    ));
    assert_eq!(out.funcs[1], renamed);
}

#[test]
fn default_options() {
    let o = PipelineOptions::default();
    assert_eq!(o.target_stage, Stage::III);
    assert!(!o.check_invalid_binary_search);
    assert_eq!(o.verify, cfg!(debug_assertions));
    assert!(o.print_after.is_empty());
    assert_eq!(PipelineOptions::to_stage(Stage::II).target_stage, Stage::II);
}
