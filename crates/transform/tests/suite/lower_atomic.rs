//! Tests of `lower_atomic`: stores of atomic blocks become `T.atomic_add` (snapshot), a
//! composable two-part SpMV (ELL part + COO part writing the same rows) computes the same result
//! before and after under the stage-III interpreter and matches an independent computation,
//! non-accumulating stores and inits are typed errors, other stages and plain blocks are kept.

use std::collections::HashMap;

use sparsetir_eval::{run_func, ArgValue};
use sparsetir_formats::Tensor;
use sparsetir_ir::printer::print_func;
use sparsetir_ir::{verify_func, DType, Expr, Intrinsic, PrimFunc, Stmt};
use sparsetir_transform::{lower_atomic, LowerError};

fn parse(src: &str) -> PrimFunc {
    sparsetir_syntax::parse_func(src).unwrap_or_else(|d| panic!("parse: {d:?}"))
}

/// Two parts of one matrix: an ELL part (two entries per row) and a COO tail whose entries
/// repeat rows; both add into `Y`.
pub const TWO_PARTS: &str = r#"
@T.prim_func
def two_parts(a1: T.handle, j1: T.handle, a2: T.handle, r2: T.handle, j2: T.handle, x: T.handle, y: T.handle, m: T.int32, n: T.int32, n2: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A1 = T.match_buffer(a1, (m, 2), "float32")
    J1 = T.match_buffer(j1, (m, 2), "int32")
    A2 = T.match_buffer(a2, (n2,), "float32")
    R2 = T.match_buffer(r2, (n2,), "int32")
    J2 = T.match_buffer(j2, (n2,), "int32")
    X = T.match_buffer(x, (n,), "float32")
    Y = T.match_buffer(y, (m,), "float32")
    for i in T.parallel(m):
        for k in T.serial(2):
            with T.block("ell"):
                vi = T.axis.spatial(m, i)
                vk = T.axis.reduce(2, k)
                T.block_attr({"atomic": True})
                Y[vi] = Y[vi] + A1[vi, vk] * X[J1[vi, vk]]
    for e in T.parallel(n2):
        with T.block("coo"):
            ve = T.axis.spatial(n2, e)
            T.block_attr({"atomic": True})
            Y[R2[ve]] = A2[ve] * X[J2[ve]] + Y[R2[ve]]
"#;

struct Data {
    m: usize,
    n: usize,
    a1: Vec<f64>,
    j1: Vec<i64>,
    a2: Vec<f64>,
    r2: Vec<i64>,
    j2: Vec<i64>,
    x: Vec<f64>,
}

fn data() -> Data {
    let (m, n) = (5, 6);
    let a1: Vec<f64> = (0..m * 2).map(|v| 0.5 + v as f64).collect();
    let j1: Vec<i64> = (0..m * 2).map(|v| ((v * 7) % n) as i64).collect();
    // Rows 1 and 3 get several COO entries each: several writers per row.
    let r2 = vec![1, 3, 1, 3, 3, 0];
    let j2 = vec![0, 5, 2, 2, 4, 1];
    let a2 = vec![1.25, -2.0, 3.5, 0.75, 4.0, -1.5];
    let x: Vec<f64> = (0..n).map(|v| 1.0 + 0.25 * v as f64).collect();
    Data {
        m,
        n,
        a1,
        j1,
        a2,
        r2,
        j2,
        x,
    }
}

fn arr(dt: DType, v: &[f64]) -> ArgValue {
    ArgValue::Array(Tensor::from_f64(dt, v).expect("tensor"))
}
fn iarr(v: &[i64]) -> ArgValue {
    ArgValue::Array(Tensor::from_i64(DType::I32, v).expect("tensor"))
}

fn args(d: &Data) -> HashMap<String, ArgValue> {
    HashMap::from([
        ("a1".to_string(), arr(DType::F32, &d.a1)),
        ("j1".to_string(), iarr(&d.j1)),
        ("a2".to_string(), arr(DType::F32, &d.a2)),
        ("r2".to_string(), iarr(&d.r2)),
        ("j2".to_string(), iarr(&d.j2)),
        ("x".to_string(), arr(DType::F32, &d.x)),
        ("y".to_string(), arr(DType::F32, &vec![0.0; d.m])),
        ("m".to_string(), ArgValue::Int(d.m as i64)),
        ("n".to_string(), ArgValue::Int(d.n as i64)),
        ("n2".to_string(), ArgValue::Int(d.a2.len() as i64)),
    ])
}

/// y = A x with A given as both parts, in f64.
fn expected(d: &Data) -> Vec<f64> {
    let mut y = vec![0.0; d.m];
    for (i, yi) in y.iter_mut().enumerate() {
        for k in 0..2 {
            *yi += d.a1[i * 2 + k] * d.x[d.j1[i * 2 + k] as usize];
        }
    }
    for e in 0..d.a2.len() {
        y[d.r2[e] as usize] += d.a2[e] * d.x[d.j2[e] as usize];
    }
    y
}

fn run_y(f: &PrimFunc, d: &Data) -> Vec<f64> {
    let mut a = args(d);
    run_func(f, &mut a).expect("runs");
    match &a["y"] {
        ArgValue::Array(t) => t.to_f64_vec(),
        other => panic!("{other:?}"),
    }
}

fn assert_close(a: &[f64], b: &[f64]) {
    assert_eq!(a.len(), b.len());
    for (i, (p, q)) in a.iter().zip(b).enumerate() {
        assert!((p - q).abs() <= 1e-4 * (1.0 + q.abs()), "[{i}]: {p} vs {q}");
    }
}

fn count_atomics(f: &PrimFunc) -> (usize, usize) {
    let (mut atomics, mut stores) = (0, 0);
    f.body.visit(&mut |s| match s {
        Stmt::Evaluate(Expr::Call {
            op: Intrinsic::AtomicAdd,
            ..
        }) => atomics += 1,
        Stmt::Store(_) => stores += 1,
        _ => {}
    });
    (atomics, stores)
}

#[test]
fn snapshot_two_parts() {
    let f = parse(TWO_PARTS);
    let g = lower_atomic(&f).expect("lowers");
    verify_func(&g).expect("verifies");
    insta::assert_snapshot!(print_func(&g));
}

#[test]
fn several_writers_per_row_keep_the_result() {
    let f = parse(TWO_PARTS);
    let g = lower_atomic(&f).expect("lowers");
    assert_eq!(count_atomics(&f), (0, 2));
    assert_eq!(count_atomics(&g), (2, 0));
    let d = data();
    let want = expected(&d);
    assert_close(&run_y(&f, &d), &want);
    assert_close(&run_y(&g, &d), &want);
}

#[test]
fn subtraction_becomes_a_negated_add() {
    let src = TWO_PARTS.replace(
        "Y[vi] = Y[vi] + A1[vi, vk] * X[J1[vi, vk]]",
        "Y[vi] = Y[vi] - A1[vi, vk] * X[J1[vi, vk]]",
    );
    let f = parse(&src);
    let g = lower_atomic(&f).expect("lowers");
    verify_func(&g).expect("verifies");
    let d = data();
    let mut want = expected(&d);
    for (i, w) in want.iter_mut().enumerate() {
        for k in 0..2 {
            *w -= 2.0 * d.a1[i * 2 + k] * d.x[d.j1[i * 2 + k] as usize];
        }
    }
    assert_close(&run_y(&g, &d), &want);
    assert_close(&run_y(&f, &d), &want);
}

fn err(src: &str) -> LowerError {
    lower_atomic(&parse(src)).expect_err("must be refused")
}

#[test]
fn plain_assignment_is_refused() {
    let e = err(&TWO_PARTS.replace(
        "Y[vi] = Y[vi] + A1[vi, vk] * X[J1[vi, vk]]",
        "Y[vi] = A1[vi, vk] * X[J1[vi, vk]]",
    ));
    assert!(matches!(e, LowerError::Unsupported { .. }), "{e:?}");
    assert!(e.to_string().contains("not an accumulation"), "{e}");
    assert!(e.to_string().contains("`ell`"), "{e}");
}

#[test]
fn accumulating_another_element_is_refused() {
    let e = err(&TWO_PARTS.replace(
        "Y[vi] = Y[vi] + A1[vi, vk] * X[J1[vi, vk]]",
        "Y[vi] = Y[0] + A1[vi, vk]",
    ));
    assert!(e.to_string().contains("not an accumulation"), "{e}");
}

#[test]
fn value_reading_the_target_is_refused() {
    let e = err(&TWO_PARTS.replace(
        "Y[vi] = Y[vi] + A1[vi, vk] * X[J1[vi, vk]]",
        "Y[vi] = Y[vi] + Y[0] * A1[vi, vk]",
    ));
    assert!(e.to_string().contains("other writers update"), "{e}");
}

#[test]
fn init_in_an_atomic_block_is_refused() {
    let e = err(&TWO_PARTS.replace(
        "                T.block_attr({\"atomic\": True})\n                Y[vi] = Y[vi]",
        "                T.block_attr({\"atomic\": True})\n                with T.init():\n                    Y[vi] = T.float32(0)\n                Y[vi] = Y[vi]",
    ));
    assert!(e.to_string().contains("T.init()"), "{e}");
}

#[test]
fn blocks_without_the_annotation_are_kept() {
    let src = TWO_PARTS.replace(
        "T.block_attr({\"atomic\": True})",
        "T.block_attr({\"atomic\": False})",
    );
    let f = parse(&src);
    assert_eq!(lower_atomic(&f).expect("no-op"), f);
}

#[test]
fn local_buffers_stay_plain_stores() {
    let src = r#"
@T.prim_func
def local(a: T.handle, y: T.handle, m: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (m,), "float32")
    Y = T.match_buffer(y, (1,), "float32")
    for i in T.parallel(m):
        with T.block("acc"):
            vi = T.axis.spatial(m, i)
            tmp = T.alloc_buffer((1,), "float32", scope="local")
            T.block_attr({"atomic": True})
            tmp[0] = A[vi] * T.float32(2)
            Y[0] = Y[0] + tmp[0]
"#;
    let f = parse(src);
    let g = lower_atomic(&f).expect("lowers");
    verify_func(&g).expect("verifies");
    assert_eq!(count_atomics(&g), (1, 1));
    let a = [1.0, 2.5, -0.5, 4.0];
    let mut args = HashMap::from([
        ("a".to_string(), arr(DType::F32, &a)),
        ("y".to_string(), arr(DType::F32, &[0.0])),
        ("m".to_string(), ArgValue::Int(4)),
    ]);
    run_func(&g, &mut args).expect("runs");
    let ArgValue::Array(y) = &args["y"] else {
        panic!()
    };
    assert_close(&y.to_f64_vec(), &[2.0 * a.iter().sum::<f64>()]);
}

#[test]
fn other_stages_are_untouched() {
    let f = sparsetir_ops::load("csrmm").expect("catalog");
    assert_eq!(lower_atomic(&f).expect("no-op"), f);
}
