//! Reduction primitive tests: `decompose_reduction` and `rfactor` on catalog kernels (stages
//! II/III) and a hand-written dense reduction: snapshots, error cases (kind + IR shown), trace
//! replay and equal results.

use crate::common;

use std::collections::HashMap;

use sparsetir_eval::ArgValue;
use sparsetir_formats::Tensor;
use sparsetir_ir::{DType, PrimFunc, Stage};
use sparsetir_schedule::{ErrorKind, Schedule};

use common::{
    assert_replays, assert_same, assert_same_as_reference, csrmm_rfc_form, kernel,
    kernel_specialized, print,
};

fn verify(f: &PrimFunc) {
    if let Err(e) = sparsetir_ir::verify_func(f) {
        panic!("{e:?}\n{}", print(f));
    }
}

/// `y[i] = max_k x[i, k]` over a constant `(4, 6)`.
fn rowmax() -> PrimFunc {
    let src = r#"@T.prim_func
def rowmax(x: T.handle, y: T.handle) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 0})
    X = T.match_buffer(x, (4, 6), "float32")
    Y = T.match_buffer(y, (4,), "float32")
    for i, k in T.grid(4, 6):
        with T.block("Y"):
            vi, vk = T.axis.remap("SR", [i, k])
            T.reads(X[vi, vk])
            T.writes(Y[vi])
            with T.init():
                Y[vi] = T.min_value("float32")
            Y[vi] = T.max(Y[vi], X[vi, vk])
"#;
    sparsetir_syntax::parse_func(src).unwrap_or_else(|e| panic!("{e:?}"))
}

fn run_rowmax(f: &PrimFunc) -> Vec<f64> {
    let x: Vec<f64> = (0..24).map(|v| ((v * 7) % 11) as f64 - 5.0).collect();
    let mut args = HashMap::new();
    args.insert(
        "x".to_string(),
        ArgValue::Array(Tensor::from_f64(DType::F32, &x).unwrap()),
    );
    args.insert(
        "y".to_string(),
        ArgValue::Array(Tensor::from_f64(DType::F32, &[9.0; 4]).unwrap()),
    );
    sparsetir_eval::run_func(f, &mut args).expect("runs");
    match &args["y"] {
        ArgValue::Array(t) => t.to_f64_vec(),
        _ => unreachable!(),
    }
}

fn rowmax_expected() -> Vec<f64> {
    (0..4)
        .map(|i| {
            (0..6)
                .map(|k| (((i * 6 + k) * 7) % 11) as f64 - 5.0)
                .fold(f64::MIN, f64::max)
        })
        .collect()
}

#[test]
fn decompose_reduction_csrmm_guards_empty_rows() {
    // Lowering now hoists csrmm's init out of `csrmm1` (SPEC §2.3), so start from the RFC
    // form, whose `csrmm1` inits at a row's first nonzero: an empty row never runs it, and the
    // decomposed init must not run there either.
    let f = csrmm_rfc_form();
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("csrmm1").unwrap();
    let loops = sch.get_loops(b).unwrap();
    let init = sch.decompose_reduction(b, loops[0]).unwrap();
    assert_eq!(sch.block_name(init).unwrap(), "csrmm1_init");
    verify(sch.func());
    let text = print(sch.func());
    assert!(
        text.contains("T.where(J_indptr_data[vi + 1] - J_indptr_data[vi] > 0)"),
        "{text}"
    );
    insta::assert_snapshot!(text);
    assert_same("csrmm", &f, sch.func());
    assert_same_as_reference("csrmm", sch.func());
    assert_replays(&sch, &f);
}

#[test]
fn decompose_reduction_bsrmm_guards_symbolic_block_size() {
    // bsrmm keeps its init in `bsrmm0`, over the block-column reduction `bj` of extent `blk`:
    // a symbolic extent, so the decomposed init is guarded by `blk > 0`.
    let f = kernel("bsrmm", Stage::III);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("bsrmm0").unwrap();
    let loops = sch.get_loops(b).unwrap();
    let init = sch.decompose_reduction(b, loops[2]).unwrap();
    assert_eq!(sch.block_name(init).unwrap(), "bsrmm0_init");
    verify(sch.func());
    let text = print(sch.func());
    assert!(text.contains("T.where(blk > 0)"), "{text}");
    assert!(!text.contains("T.init()"), "{text}");
    assert_same_as_reference("bsrmm", sch.func());
    assert_replays(&sch, &f);
}

#[test]
fn decompose_reduction_stage_ii_keeps_thread_binding() {
    let f = kernel("bsrmm", Stage::II);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("bsrmm0").unwrap();
    let loops = sch.get_loops(b).unwrap();
    // The feature loop (spatial) below the block-column reduction loop.
    sch.bind(loops[3], "threadIdx.x").unwrap();
    sch.decompose_reduction(b, loops[2]).unwrap();
    verify(sch.func());
    let text = print(sch.func());
    assert_eq!(text.matches("thread=\"threadIdx.x\"").count(), 2, "{text}");
    assert!(text.contains("with T.block(\"bsrmm0_init\")"), "{text}");
    assert_same_as_reference("bsrmm", sch.func());
    assert_replays(&sch, &f);
}

#[test]
fn decompose_reduction_dense_needs_no_guard() {
    let f = rowmax();
    assert_eq!(run_rowmax(&f), rowmax_expected());
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("Y").unwrap();
    let loops = sch.get_loops(b).unwrap();
    sch.decompose_reduction(b, loops[1]).unwrap();
    verify(sch.func());
    let text = print(sch.func());
    assert!(!text.contains("T.where"), "{text}");
    insta::assert_snapshot!(text);
    assert_eq!(run_rowmax(sch.func()), rowmax_expected());
    assert_replays(&sch, &f);
}

#[test]
fn rfactor_sddmm_feature_loop() {
    // `feat_size = 5`: the feature reduction cannot be empty, so `sddmm1` keeps its init and
    // the factor buffer has a constant extent.
    let f = kernel_specialized("sddmm", Stage::III, &[("feat_size", 5)]);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("sddmm1").unwrap();
    let loops = sch.get_loops(b).unwrap();
    let rf = sch.rfactor(loops[1], 0).unwrap();
    assert_eq!(sch.block_name(rf).unwrap(), "sddmm1_rf");
    verify(sch.func());
    insta::assert_snapshot!(print(sch.func()));
    assert_same_as_reference("sddmm", sch.func());
    assert_replays(&sch, &f);
}

#[test]
fn rfactor_split_max_reduction() {
    let f = rowmax();
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("Y").unwrap();
    let loops = sch.get_loops(b).unwrap();
    let parts = sch.split(loops[1], &[Some(2), Some(3)]).unwrap();
    let rf = sch.rfactor(parts[1], 1).unwrap();
    verify(sch.func());
    insta::assert_snapshot!(print(sch.func()));
    assert_eq!(sch.block_name(rf).unwrap(), "Y_rf");
    assert_eq!(run_rowmax(sch.func()), rowmax_expected());
    assert_replays(&sch, &f);
}

#[test]
fn reduction_errors() {
    // The RFC form of csrmm: `csrmm1` has an init and a data-dependent reduction loop.
    let mut sch = Schedule::new(csrmm_rfc_form()).unwrap();
    let b = sch.get_block("csrmm1").unwrap();
    let loops = sch.get_loops(b).unwrap();
    // The row's nonzero loop has a data-dependent extent.
    let e = sch.rfactor(loops[0], 0).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported, "{e}");
    assert!(e.message.contains("data-dependent"), "{e}");
    assert!(e.ir.contains("^^^"), "{e}");
    // A spatial loop is not a reduction loop.
    let e = sch.rfactor(loops[1], 0).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
    // The feature loop is below the reduction loop: the init cannot go there.
    let e = sch.decompose_reduction(b, loops[1]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::BadPlacement, "{e}");
    // A block without init.
    let b0 = sch.get_block("csrmm0").unwrap();
    let outer = sch.get_loops(b0).unwrap();
    let e = sch.decompose_reduction(b0, outer[0]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotReductionBlock, "{e}");
    assert!(e.ir.contains("with T.block(\"csrmm0\")"), "{e}");
    // A loop that is not above the block.
    let e = sch.decompose_reduction(b, outer[0]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::BadPlacement, "{e}");

    // Lowered csrmm: the init is already its own nest, so `csrmm1` has none to decompose or
    // to start an rfactor from.
    let mut sch = Schedule::new(kernel("csrmm", Stage::III)).unwrap();
    let b = sch.get_block("csrmm1").unwrap();
    let loops = sch.get_loops(b).unwrap();
    let e = sch.decompose_reduction(b, loops[0]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotReductionBlock, "{e}");
    let e = sch.rfactor(loops[0], 0).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotReductionBlock, "{e}");

    let f = kernel_specialized("sddmm", Stage::III, &[("feat_size", 5)]);
    let mut sch = Schedule::new(f).unwrap();
    let b = sch.get_block("sddmm1").unwrap();
    let loops = sch.get_loops(b).unwrap();
    let e = sch.rfactor(loops[1], 5).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
    // Stage II: the output is a sparse buffer.
    let f = kernel_specialized("sddmm", Stage::II, &[("feat_size", 5)]);
    let mut sch = Schedule::new(f).unwrap();
    let b = sch.get_block("sddmm1").unwrap();
    let loops = sch.get_loops(b).unwrap();
    let e = sch.rfactor(loops[1], 0).unwrap_err();
    assert_eq!(e.kind, ErrorKind::SparseBuffer, "{e}");
}
