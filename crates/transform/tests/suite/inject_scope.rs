//! Tests of `inject_scope`: an atomic block in thread-bound loops it does not depend on is
//! guarded by `thread == 0` (snapshot); the interpreter, which runs every thread, then adds each
//! contribution once (checked against an independent sum) while without the guard it adds it
//! once per thread; blocks that depend on a thread loop (directly or through a loop extent) are
//! not guarded; the pass is idempotent and a no-op on other stages.

use std::collections::HashMap;

use sparsetir_eval::{run_func, ArgValue};
use sparsetir_formats::Tensor;
use sparsetir_ir::printer::print_func;
use sparsetir_ir::{verify_func, DType, PrimFunc, Stmt};
use sparsetir_transform::{inject_scope, lower_atomic};

fn parse(src: &str) -> PrimFunc {
    sparsetir_syntax::parse_func(src).unwrap_or_else(|d| panic!("parse: {d:?}"))
}

/// Row sums of a dense `m x 3` matrix added into `Y`, one CUDA block per row, four threads per
/// block of which the atomic block uses none, and a `threadIdx.y` loop it uses.
const ROWSUM: &str = r#"
@T.prim_func
def rowsum(a: T.handle, y: T.handle, m: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (m, 3), "float32")
    Y = T.match_buffer(y, (m,), "float32")
    for bx in T.thread_binding(m, thread="blockIdx.x"):
        for tx in T.thread_binding(4, thread="threadIdx.x"):
            for ty in T.thread_binding(3, thread="threadIdx.y"):
                with T.block("acc"):
                    vi = T.axis.spatial(m, bx)
                    vj = T.axis.reduce(3, ty)
                    T.block_attr({"atomic": True})
                    Y[vi] = Y[vi] + A[vi, vj]
"#;

fn run(f: &PrimFunc, a: &[f64], m: usize) -> Vec<f64> {
    let mut args = HashMap::from([
        (
            "a".to_string(),
            ArgValue::Array(Tensor::from_f64(DType::F32, a).expect("tensor")),
        ),
        (
            "y".to_string(),
            ArgValue::Array(Tensor::from_f64(DType::F32, &vec![0.0; m]).expect("tensor")),
        ),
        ("m".to_string(), ArgValue::Int(m as i64)),
    ]);
    run_func(f, &mut args).expect("runs");
    let ArgValue::Array(y) = &args["y"] else {
        panic!("y")
    };
    y.to_f64_vec()
}

fn guards(f: &PrimFunc) -> usize {
    let mut n = 0;
    f.body
        .visit(&mut |s| n += matches!(s, Stmt::If(_)) as usize);
    n
}

#[test]
fn snapshot_guarded_block() {
    let f = lower_atomic(&parse(ROWSUM)).expect("atomics");
    let g = inject_scope(&f).expect("injects");
    verify_func(&g).expect("verifies");
    insta::assert_snapshot!(print_func(&g));
}

#[test]
fn each_instance_adds_once() {
    let m = 4;
    let a: Vec<f64> = (0..m * 3).map(|v| 0.5 * v as f64 - 1.0).collect();
    let want: Vec<f64> = (0..m).map(|i| a[i * 3..i * 3 + 3].iter().sum()).collect();
    let atomic = lower_atomic(&parse(ROWSUM)).expect("atomics");
    // Without the guard all four `threadIdx.x` threads add the same row.
    let unguarded = run(&atomic, &a, m);
    for (u, w) in unguarded.iter().zip(&want) {
        assert!((u - 4.0 * w).abs() < 1e-4, "{u} vs 4 * {w}");
    }
    let g = inject_scope(&atomic).expect("injects");
    assert_eq!(guards(&g), 1);
    for (p, q) in run(&g, &a, m).iter().zip(&want) {
        assert!((p - q).abs() < 1e-4, "{p} vs {q}");
    }
}

#[test]
fn used_threads_are_not_guarded() {
    // The block depends on every thread loop: nothing to guard.
    let src = ROWSUM.replace(
        "vi = T.axis.spatial(m, bx)",
        "vi = T.axis.spatial(m, bx + tx * 0)",
    );
    let f = parse(&src);
    assert_eq!(inject_scope(&f).expect("injects"), f);
    // A loop extent between the thread loop and the block depends on it.
    let src = r#"
@T.prim_func
def tri(y: T.handle, m: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    Y = T.match_buffer(y, (1,), "float32")
    for tx in T.thread_binding(4, thread="threadIdx.x"):
        for j in T.serial(tx):
            with T.block("acc"):
                T.block_attr({"atomic": True})
                Y[0] = Y[0] + T.float32(1)
"#;
    let f = parse(src);
    assert_eq!(inject_scope(&f).expect("injects"), f);
}

#[test]
fn every_unused_thread_loop_is_guarded() {
    let src = r#"
@T.prim_func
def total(a: T.handle, y: T.handle, m: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (m,), "float32")
    Y = T.match_buffer(y, (1,), "float32")
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        for tx in T.thread_binding(3, thread="threadIdx.x"):
            for i in T.serial(m):
                with T.block("acc"):
                    vi = T.axis.reduce(m, i)
                    T.block_attr({"atomic": True})
                    Y[0] = Y[0] + A[vi]
"#;
    let f = lower_atomic(&parse(src)).expect("atomics");
    let g = inject_scope(&f).expect("injects");
    verify_func(&g).expect("verifies");
    let text = print_func(&g);
    assert!(text.contains("if bx == 0 and tx == 0:"), "{text}");
    let a = [1.5, -2.0, 4.25];
    let mut args = HashMap::from([
        (
            "a".to_string(),
            ArgValue::Array(Tensor::from_f64(DType::F32, &a).expect("tensor")),
        ),
        (
            "y".to_string(),
            ArgValue::Array(Tensor::from_f64(DType::F32, &[0.0]).expect("tensor")),
        ),
        ("m".to_string(), ArgValue::Int(3)),
    ]);
    run_func(&g, &mut args).expect("runs");
    let ArgValue::Array(y) = &args["y"] else {
        panic!("y")
    };
    assert!((y.get_f64(0) - a.iter().sum::<f64>()).abs() < 1e-5);
}

#[test]
fn idempotent_and_other_stages_untouched() {
    let f = lower_atomic(&parse(ROWSUM)).expect("atomics");
    let g = inject_scope(&f).expect("injects");
    assert_eq!(inject_scope(&g).expect("again"), g);
    let c = sparsetir_ops::load("csrmm").expect("catalog");
    assert_eq!(inject_scope(&c).expect("no-op"), c);
}
