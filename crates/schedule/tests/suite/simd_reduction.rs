//! `vectorize_reduction` tests: the sddmm feature reduction and a dense row minimum (snapshots,
//! trace text and replay, same results as the stage-I reference), and every precondition's
//! typed error with the IR shown.

use crate::common;

use std::collections::HashMap;

use sparsetir_eval::ArgValue;
use sparsetir_formats::Tensor;
use sparsetir_ir::{AttrValue, DType, ForKind, PrimFunc, Stage};
use sparsetir_schedule::{ErrorKind, Schedule};

use common::{assert_replays, case, kernel, kernel_specialized, print, run};

/// `y[i] = min_k x[i, k]` over a constant `(3, 5)`, written value-first (`T.min(x, y)`).
fn rowmin() -> PrimFunc {
    let src = r#"@T.prim_func
def rowmin(x: T.handle, y: T.handle) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 0})
    X = T.match_buffer(x, (3, 5), "float32")
    Y = T.match_buffer(y, (3,), "float32")
    for i, k in T.grid(3, 5):
        with T.block("Y"):
            vi, vk = T.axis.remap("SR", [i, k])
            T.reads(X[vi, vk])
            T.writes(Y[vi])
            with T.init():
                Y[vi] = T.max_value("float32")
            Y[vi] = T.min(X[vi, vk], Y[vi])
"#;
    sparsetir_syntax::parse_func(src).unwrap_or_else(|e| panic!("{e:?}"))
}

fn run_rowmin(f: &PrimFunc, x: &[f64]) -> Vec<f64> {
    let mut args = HashMap::new();
    args.insert(
        "x".to_string(),
        ArgValue::Array(Tensor::from_f64(DType::F32, x).unwrap()),
    );
    args.insert(
        "y".to_string(),
        ArgValue::Array(Tensor::from_f64(DType::F32, &[7.0; 3]).unwrap()),
    );
    sparsetir_eval::run_func(f, &mut args).expect("runs");
    match &args["y"] {
        ArgValue::Array(t) => t.to_f64_vec(),
        _ => unreachable!(),
    }
}

/// Asserts equal outputs up to 1e-5 relative (1e-5 absolute near zero).
fn assert_close_1e5(a: &[(String, Vec<f64>)], b: &[(String, Vec<f64>)]) {
    assert_eq!(a.len(), b.len());
    for ((na, va), (nb, vb)) in a.iter().zip(b) {
        assert_eq!(na, nb);
        assert_eq!(va.len(), vb.len());
        for (i, (x, y)) in va.iter().zip(vb).enumerate() {
            assert!(
                (x - y).abs() <= 1e-5 * x.abs().max(y.abs()).max(1.0),
                "{na}[{i}]: {x} vs {y}"
            );
        }
    }
}

/// sddmm at stage III with `feat_size = 5` (the random cases' width): the feature reduction
/// cannot be empty, so lowering keeps its init in `sddmm1`, run at `k == 0` (with a symbolic
/// `feat_size` the init is hoisted into its own `sddmm1_init` nest, SPEC §2.3).
fn sddmm5() -> PrimFunc {
    kernel_specialized("sddmm", Stage::III, &[("feat_size", 5)])
}

/// The sddmm stage III function with its init decomposed out of the feature loop.
fn sddmm_decomposed() -> (PrimFunc, Schedule, Vec<sparsetir_schedule::LoopRV>) {
    let f = sddmm5();
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("sddmm1").unwrap();
    let loops = sch.get_loops(b).unwrap();
    sch.decompose_reduction(b, loops[0]).unwrap();
    (f, sch, loops)
}

#[test]
fn sddmm_feature_loop() {
    let (f, mut sch, loops) = sddmm_decomposed();
    sch.vectorize_reduction(loops[1]).unwrap();
    let l = sch.loop_(loops[1]).unwrap();
    assert_eq!(l.kind, ForKind::Vectorized);
    assert_eq!(
        l.annotations.get("simd_reduction"),
        Some(&AttrValue::Str("+".to_string()))
    );
    let text = print(sch.func());
    assert!(
        text.contains("T.vectorized(5, annotations={\"simd_reduction\": \"+\"})"),
        "{text}"
    );
    insta::assert_snapshot!(text);
    assert!(
        sch.trace().to_text().contains("sch.vectorize_reduction(l"),
        "{}",
        sch.trace().to_text()
    );
    assert_replays(&sch, &f);
    // The evaluator runs the loop in order: same values as the stage-I reference.
    let reference = sparsetir_ops::load("sddmm").unwrap();
    for seed in 0..3 {
        let c = case("sddmm", seed);
        assert_close_1e5(&run(sch.func(), &c), &run(&reference, &c));
    }
}

#[test]
fn row_minimum_value_first() {
    let f = rowmin();
    let x: Vec<f64> = (0..15).map(|v| ((v * 4) % 9) as f64 - 3.0).collect();
    let expected: Vec<f64> = (0..3)
        .map(|i| {
            x[i * 5..i * 5 + 5]
                .iter()
                .copied()
                .fold(f64::INFINITY, f64::min)
        })
        .collect();
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("Y").unwrap();
    let loops = sch.get_loops(b).unwrap();
    sch.decompose_reduction(b, loops[1]).unwrap();
    sch.vectorize_reduction(loops[1]).unwrap();
    assert_eq!(
        sch.loop_(loops[1])
            .unwrap()
            .annotations
            .get("simd_reduction"),
        Some(&AttrValue::Str("min".to_string()))
    );
    insta::assert_snapshot!(print(sch.func()));
    assert_eq!(run_rowmin(sch.func(), &x), expected);
    assert_replays(&sch, &f);
}

#[test]
fn init_at_the_first_iteration_folds() {
    // sddmm's init (Y = 0) runs exactly at k = 0: the loop may keep it (the C writer starts
    // the accumulator at the init value).
    let f = sddmm5();
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("sddmm1").unwrap();
    let loops = sch.get_loops(b).unwrap();
    sch.vectorize_reduction(loops[1]).unwrap();
    let text = print(sch.func());
    assert!(text.contains("T.init()"), "{text}");
    assert!(
        text.contains("annotations={\"simd_reduction\": \"+\"}"),
        "{text}"
    );
    assert_replays(&sch, &f);
    let reference = sparsetir_ops::load("sddmm").unwrap();
    for seed in 0..3 {
        let c = case("sddmm", seed);
        assert_close_1e5(&run(sch.func(), &c), &run(&reference, &c));
    }

    // With a symbolic feature size the init is already its own nest (`sddmm1_init`), so
    // `sddmm1` has none and the feature loop vectorises as it is.
    let f = kernel("sddmm", Stage::III);
    let mut sch = Schedule::new(f.clone()).unwrap();
    assert!(sch.get_block("sddmm1_init").is_ok());
    let b = sch.get_block("sddmm1").unwrap();
    let loops = sch.get_loops(b).unwrap();
    sch.vectorize_reduction(loops[1]).unwrap();
    let text = print(sch.func());
    assert!(!text.contains("T.init()"), "{text}");
    assert!(
        text.contains("T.vectorized(feat_size, annotations={\"simd_reduction\": \"+\"})"),
        "{text}"
    );
    assert_replays(&sch, &f);
    for seed in 0..3 {
        let c = case("sddmm", seed);
        assert_close_1e5(&run(sch.func(), &c), &run(&reference, &c));
    }
}

#[test]
fn preconditions() {
    // The block keeps an init that does not run at the loop's first iteration only: after a
    // split of k, the inner loop starts the reduction again at every outer step.
    let mut sch = Schedule::new(sddmm5()).unwrap();
    let b = sch.get_block("sddmm1").unwrap();
    let loops = sch.get_loops(b).unwrap();
    let parts = sch.split(loops[1], &[None, Some(4)]).unwrap();
    let before = print(sch.func());
    let e = sch.vectorize_reduction(parts[1]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotReductionBlock, "{e}");
    assert!(
        e.message.contains("decompose_reduction") && e.message.contains("sddmm1"),
        "{e}"
    );
    assert!(e.ir.contains("^^^") && e.ir.contains("T.grid("), "{e}");
    assert_eq!(
        print(sch.func()),
        before,
        "a failed primitive leaves the function"
    );
    assert!(sch
        .trace()
        .to_text()
        .lines()
        .all(|l| !l.contains("vectorize_reduction")));

    let (_, mut sch, loops) = sddmm_decomposed();
    // The row loop's body is the feature loop, not a block.
    let e = sch.vectorize_reduction(loops[0]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported, "{e}");
    assert!(e.message.contains("not exactly one block"), "{e}");
    // Already vectorised / not serial.
    sch.vectorize_reduction(loops[1]).unwrap();
    let e = sch.vectorize_reduction(loops[1]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::LoopNotSerial, "{e}");

    // A loop over a spatial iterator.
    let src = r#"@T.prim_func
def f(x: T.handle, y: T.handle) -> None:
    T.func_attr({"sparse_tir_level": 0})
    X = T.match_buffer(x, (4, 4), "float32")
    Y = T.match_buffer(y, (4,), "float32")
    for i, k in T.grid(4, 4):
        with T.block("b"):
            vi, vk = T.axis.remap("SR", [i, k])
            Y[vi] = Y[vi] * X[vi, vk]
    for i2, k2 in T.grid(4, 4):
        with T.block("c"):
            vi, vk = T.axis.remap("SR", [i2, k2])
            Y[vi] = Y[vi] + X[vi, vk] * Y[0]
    for i3, k3 in T.grid(4, 4):
        with T.block("d"):
            vi, vk = T.axis.remap("RR", [i3, k3])
            Y[vk] = Y[vk] + X[vi, vk]
    for i4 in T.serial(4):
        with T.block("e"):
            vi = T.axis.spatial(4, i4)
            Y[vi] = Y[vi] + T.float32(1)
"#;
    let f = sparsetir_syntax::parse_func(src).unwrap_or_else(|e| panic!("{e:?}"));
    let mut sch = Schedule::new(f).unwrap();
    let bb = sch.get_block("b").unwrap();
    let ls = sch.get_loops(bb).unwrap();
    let e = sch.vectorize_reduction(ls[0]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported, "{e}"); // the body is a loop
    let e = sch.vectorize_reduction(ls[1]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotReductionBlock, "{e}"); // `*` is not reassociated
    assert!(e.message.contains("op one of +, max, min"), "{e}");
    let c = sch.get_block("c").unwrap();
    let ls = sch.get_loops(c).unwrap();
    let e = sch.vectorize_reduction(ls[1]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotReductionBlock, "{e}"); // e reads Y
    let d = sch.get_block("d").unwrap();
    let ls = sch.get_loops(d).unwrap();
    let e = sch.vectorize_reduction(ls[1]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotReductionBlock, "{e}"); // Y[vk] moves with k
    assert!(e.message.contains("changes with the loop"), "{e}");
    let eb = sch.get_block("e").unwrap();
    let ls = sch.get_loops(eb).unwrap();
    let e = sch.vectorize_reduction(ls[0]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}"); // a spatial loop
    assert!(e.message.contains("spatial iterator"), "{e}");
    assert!(e.ir.contains("^^^"), "{e}");
}
