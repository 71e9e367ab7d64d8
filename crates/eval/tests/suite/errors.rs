//! Error tests of the reference evaluator: bad arguments, bad structure arrays, unsupported
//! statements and runtime faults all come back as `EvalError`s naming the culprit, never panics.

#![allow(clippy::needless_range_loop)]
use crate::common;

use std::collections::HashMap;

use common::*;
use sparsetir_eval::ArgValue;
use sparsetir_formats::Tensor;
use sparsetir_ir::{
    AttrValue, BinOp, DType, Expr, For, ForKind, Intrinsic, IterAxis, PrimFunc, Span, Stage, Stmt,
};

const F32: DType = DType::F32;
const I32: DType = DType::I32;

/// spmv over CSR: `y[i] += A[i, j] * x[j]`.
fn spmv() -> PrimFunc {
    let mut b = Builder::new("spmv");
    let m = b.scalar("m", I32);
    let n = b.scalar("n", I32);
    let nnz = b.scalar("nnz", I32);
    let ia = b.dense_fixed("I", m);
    let ja = b.compressed_varied("J", ia, n.clone(), nnz);
    let jd = b.dense_fixed("J_detach", n);
    let a = b.match_sparse("A", &[ia, ja], F32);
    let x = b.match_sparse("X", &[jd], F32);
    let y = b.match_sparse("Y", &[ia], F32);
    let v = b.vars(&["i", "j"]);
    let (i, j) = (&v[0], &v[1]);
    let init = st(y, &[i], f32c(0.0));
    let body = st(y, &[i], add(ld(y, &[i]), mul(ld(a, &[i, j]), ld(x, &[j]))));
    b.set_body(sp_iter(
        "spmv",
        vec![ax(ia), ax(ja)],
        "SR",
        &v,
        Some(init),
        body,
    ));
    b.f
}

/// Valid arguments for `spmv`: 3×4 with rows [0, 2], [], [1, 3].
fn good() -> HashMap<String, ArgValue> {
    args(vec![
        ("m", ArgValue::Int(3)),
        ("n", ArgValue::Int(4)),
        ("nnz", ArgValue::Int(4)),
        ("J_indptr", i32_arr(&[0, 2, 2, 4])),
        ("J_indices", i32_arr(&[0, 2, 1, 3])),
        ("a", f32_arr(&[1.0, 2.0, 3.0, 4.0])),
        ("x", f32_arr(&[1.0, 10.0, 100.0, 1000.0])),
        ("y", f32_arr(&[0.0, 7.0, 0.0])),
    ])
}

fn with(name: &str, v: ArgValue) -> HashMap<String, ArgValue> {
    let mut a = good();
    a.insert(name.to_string(), v);
    a
}

#[test]
fn good_arguments_run() {
    let mut a = good();
    run(&spmv(), &mut a).expect("valid");
    // Row 0: 1*1 + 2*100; row 1 is empty: its sum is the init, 0 (not the 7 it held);
    // row 2: 3*10 + 4*1000.
    assert_eq!(out(&a, "y"), vec![201.0, 0.0, 4030.0]);
}

#[test]
fn missing_arguments() {
    for name in ["x", "J_indptr", "J_indices", "m", "nnz"] {
        let mut a = good();
        a.remove(name);
        expect_err(&spmv(), a, &["missing", name]);
    }
}

#[test]
fn wrong_kinds_and_dtypes() {
    let f = spmv();
    expect_err(
        &f,
        with(
            "a",
            ArgValue::Array(Tensor::from_f64(DType::F64, &[1.0; 4]).unwrap()),
        ),
        &["`A`", "float64"],
    );
    expect_err(
        &f,
        with("J_indices", f32_arr(&[0.0, 2.0, 1.0, 3.0])),
        &["J_indices", "integer"],
    );
    expect_err(&f, with("m", ArgValue::Float(3.0)), &["`m`", "float"]);
    expect_err(&f, with("m", f32_arr(&[3.0])), &["`m`", "array"]);
    expect_err(&f, with("x", ArgValue::Int(1)), &["`x`", "array"]);
    expect_err(
        &f,
        with("m", ArgValue::Int(1 << 40)),
        &["`m`", "does not fit"],
    );
    // Index arrays may use any integer dtype.
    let mut a = with(
        "J_indptr",
        ArgValue::Array(Tensor::from_i64(DType::I64, &[0, 2, 2, 4]).unwrap()),
    );
    a.insert(
        "J_indices".into(),
        ArgValue::Array(Tensor::from_i64(DType::U8, &[0, 2, 1, 3]).unwrap()),
    );
    run(&f, &mut a).expect("integer index arrays of any width");
}

#[test]
fn wrong_lengths() {
    let f = spmv();
    expect_err(&f, with("a", f32_arr(&[1.0, 2.0, 3.0])), &["`A`", "4", "3"]);
    expect_err(&f, with("x", f32_arr(&[1.0; 5])), &["`X`", "needs 4"]);
    expect_err(
        &f,
        with("J_indptr", i32_arr(&[0, 2, 4])),
        &["axis `J`", "indptr", "expected 4"],
    );
    expect_err(
        &f,
        with("J_indices", i32_arr(&[0, 2, 1])),
        &["axis `J`", "indices", "expected 4"],
    );
}

#[test]
fn bad_indptr() {
    let f = spmv();
    expect_err(
        &f,
        with("J_indptr", i32_arr(&[1, 2, 2, 4])),
        &["axis `J`", "indptr[0]"],
    );
    expect_err(
        &f,
        with("J_indptr", i32_arr(&[0, 3, 2, 4])),
        &["axis `J`", "monotone"],
    );
    expect_err(
        &f,
        with("J_indptr", i32_arr(&[0, 1, 2, 3])),
        &["axis `J`", "nnz is 4"],
    );
}

#[test]
fn out_of_range_indices() {
    let f = spmv();
    expect_err(
        &f,
        with("J_indices", i32_arr(&[0, 4, 1, 3])),
        &["axis `J`", "indices[1] = 4"],
    );
    expect_err(
        &f,
        with("J_indices", i32_arr(&[0, -1, 1, 3])),
        &["axis `J`", "-1"],
    );
}

#[test]
fn compressed_fixed_and_dense_varied_structure() {
    let mut b = Builder::new("ell");
    let ia = b.dense_fixed("I", Expr::int(3));
    let ja = b.compressed_fixed("J", ia, Expr::int(5), Expr::int(2));
    b.match_sparse("A", &[ia, ja], F32);
    let mk = |idx: &[i64]| args(vec![("J_indices", i32_arr(idx)), ("a", f32_arr(&[0.0; 6]))]);
    let mut ok = mk(&[0, 1, 2, 3, 4, 0]);
    run(&b.f, &mut ok).expect("valid ELL");
    expect_err(
        &b.f,
        mk(&[0, 1, 2, 3, 4]),
        &["axis `J`", "expected 6", "nnz_cols"],
    );
    expect_err(
        &b.f,
        mk(&[0, 1, 2, 3, 4, 5]),
        &["axis `J`", "indices[5] = 5"],
    );

    let mut b = Builder::new("ragged");
    let ia = b.dense_fixed("I", Expr::int(2));
    b.dense_varied("J", ia, Expr::int(3), None);
    let mut ok = args(vec![("J_indptr", i32_arr(&[0, 3, 3]))]);
    run(&b.f, &mut ok).expect("valid ragged");
    expect_err(
        &b.f,
        args(vec![("J_indptr", i32_arr(&[0, 4, 4]))]),
        &["axis `J`", "more than the axis length 3"],
    );
}

/// `O[0] = x // y` over a dense buffer, after first writing `O[1] = 5`.
fn int_div() -> PrimFunc {
    let mut b = Builder::new("div");
    let x = b.scalar("x", I32);
    let y = b.scalar("y", I32);
    let o = b.match_dense("O", vec![Expr::int(2)], I32);
    b.set_body(Stmt::seq(vec![
        st(o, &[&Expr::int(1)], Expr::int(5)),
        st(o, &[&Expr::int(0)], Expr::binary(BinOp::FloorDiv, x, y)),
    ]));
    b.f
}

#[test]
fn integer_division_by_zero_leaves_arguments_unchanged() {
    let f = int_div();
    let zeros = || ArgValue::Array(Tensor::zeros(I32, vec![2]).unwrap());
    let mut a = args(vec![
        ("x", ArgValue::Int(7)),
        ("y", ArgValue::Int(0)),
        ("o", zeros()),
    ]);
    let err = run(&f, &mut a).expect_err("division by zero");
    assert!(err.message.contains("division by zero"), "{}", err.message);
    assert_eq!(
        out(&a, "o"),
        vec![0.0, 0.0],
        "arguments are untouched on error"
    );
    let mut a = args(vec![
        ("x", ArgValue::Int(7)),
        ("y", ArgValue::Int(-2)),
        ("o", zeros()),
    ]);
    run(&f, &mut a).expect("runs");
    assert_eq!(out(&a, "o"), vec![-4.0, 5.0]);
}

/// Outside a dense buffer's shape nothing is stored (SPEC §2.3): the write is skipped, a read
/// gives the default value (0).
#[test]
fn dense_buffer_out_of_range_is_not_stored() {
    let mut b = Builder::new("oob");
    let o = b.match_dense("O", vec![Expr::int(2), Expr::int(3)], F32);
    let outside = st(o, &[&Expr::int(1), &Expr::int(3)], f32c(1.0));
    let read_outside = st(
        o,
        &[&Expr::int(0), &Expr::int(0)],
        Expr::add(Expr::load(o, vec![Expr::int(2), Expr::int(0)]), f32c(2.0)),
    );
    b.set_body(Stmt::seq(vec![outside, read_outside]));
    let mut a = args(vec![("o", f32_arr(&[0.5; 6]))]);
    run(&b.f, &mut a).expect("runs");
    assert_eq!(out(&a, "o"), vec![2.0, 0.5, 0.5, 0.5, 0.5, 0.5]);
}

#[test]
fn stage_two_statements_and_other_stages_are_rejected() {
    let mut f = int_div();
    let lv = f.add_var("l", I32);
    f.body = Stmt::For(Box::new(For {
        var: lv,
        min: Expr::int(0),
        extent: Expr::int(2),
        kind: ForKind::Serial,
        thread: None,
        annotations: Default::default(),
        body: Stmt::empty(),
        span: Span::default(),
    }));
    let a = args(vec![
        ("x", ArgValue::Int(1)),
        ("y", ArgValue::Int(1)),
        ("o", ArgValue::Array(Tensor::zeros(I32, vec![2]).unwrap())),
    ]);
    expect_err(
        &f,
        a.clone(),
        &[
            "stage II/III statements are not supported",
            "use the interpreter",
        ],
    );
    f.set_stage(Stage::II);
    expect_err(&f, a.clone(), &["stage I only"]);
    f.attrs.set("sparse_tir_level", AttrValue::Int(0));
    expect_err(&f, a, &["stage I only"]);
}

#[test]
fn atomic_add_is_rejected() {
    let mut b = Builder::new("atomic");
    let o = b.match_dense("O", vec![Expr::int(1)], F32);
    let call = Expr::Call {
        op: Intrinsic::AtomicAdd,
        args: vec![ld(o, &[&Expr::int(0)]), f32c(1.0)],
        dtype: F32,
    };
    b.set_body(Stmt::Evaluate(call));
    expect_err(&b.f, args(vec![("o", f32_arr(&[0.0]))]), &["atomic_add"]);
}

#[test]
fn assume_buffer_domain_is_checked() {
    let mut b = Builder::new("assume");
    let o = b.match_dense("O", vec![Expr::int(3)], I32);
    b.set_body(Stmt::AssumeBufferDomain {
        buffer: o,
        lo: Expr::int(0),
        hi: Expr::int(5),
        span: Span::default(),
    });
    let arr = |v: &[i64]| {
        args(vec![(
            "o",
            ArgValue::Array(Tensor::from_i64(I32, v).unwrap()),
        )])
    };
    // Both bounds are inclusive.
    run(&b.f, &mut arr(&[0, 5, 2])).expect("in domain");
    expect_err(&b.f, arr(&[0, 6, 2]), &["O[1] = 6", "[0, 5]"]);
    expect_err(&b.f, arr(&[-1, 5, 2]), &["O[0] = -1", "[0, 5]"]);
}

#[test]
fn unsupported_iterations_are_errors() {
    // Iterating J without its parent I.
    let mut b = Builder::new("orphan");
    let ia = b.dense_fixed("I", Expr::int(2));
    let ja = b.compressed_varied("J", ia, Expr::int(2), Expr::int(1));
    let v = b.vars(&["j"]);
    b.set_body(sp_iter("it", vec![ax(ja)], "S", &v, None, Stmt::empty()));
    let a = args(vec![
        ("J_indptr", i32_arr(&[0, 1, 1])),
        ("J_indices", i32_arr(&[1])),
    ]);
    expect_err(&b.f, a.clone(), &["parent `I`", "not iterated"]);

    // Attach of an axis whose parent is not a dense_fixed root.
    let k = b.compressed_varied("K", ja, Expr::int(2), Expr::int(1));
    let w = b.vars(&["i", "k"]);
    b.set_body(sp_iter(
        "att",
        vec![
            ax(ia),
            IterAxis::Attach {
                axis: k,
                parent: ia,
            },
        ],
        "SS",
        &w,
        None,
        Stmt::empty(),
    ));
    let mut a2 = a;
    a2.insert("K_indptr".into(), i32_arr(&[0, 1]));
    a2.insert("K_indices".into(), i32_arr(&[0]));
    expect_err(&b.f, a2, &["attach", "`K`", "dense_fixed root"]);
}

#[test]
fn select_is_lazy_and_intrinsics_evaluate() {
    // O[0] = select(y != 0, x // y, -1): with y = 0 the division never runs.
    let mut b = Builder::new("select");
    let x = b.scalar("x", I32);
    let y = b.scalar("y", I32);
    let o = b.match_dense("O", vec![Expr::int(1)], I32);
    let r = b.match_dense("R", vec![Expr::int(3)], F32);
    let cond = Expr::binary(BinOp::Ne, y.clone(), Expr::int(0));
    let sel = Expr::Select(
        Box::new(cond),
        Box::new(Expr::binary(BinOp::FloorDiv, x, y)),
        Box::new(Expr::int(-1)),
    );
    b.set_body(Stmt::seq(vec![
        st(o, &[&Expr::int(0)], sel),
        st(
            r,
            &[&Expr::int(0)],
            call(Intrinsic::Sigmoid, vec![f32c(0.5)]),
        ),
        st(r, &[&Expr::int(1)], call(Intrinsic::Erf, vec![f32c(0.5)])),
        st(
            r,
            &[&Expr::int(2)],
            call(Intrinsic::Round, vec![f32c(-1.5)]),
        ),
    ]));
    let mut a = args(vec![
        ("x", ArgValue::Int(9)),
        ("y", ArgValue::Int(0)),
        ("o", ArgValue::Array(Tensor::zeros(I32, vec![1]).unwrap())),
        ("r", f32_arr(&[0.0; 3])),
    ]);
    run(&b.f, &mut a).expect("lazy select");
    assert_eq!(out(&a, "o"), vec![-1.0]);
    // sigmoid(0.5) = 1 / (1 + e^-0.5); erf(0.5) from tables; round half away from zero.
    let want = [1.0 / (1.0 + (-0.5f64).exp()), 0.520_499_877_813_046_5, -2.0];
    assert_close(&out(&a, "r"), &want, "intrinsics");
}

#[test]
fn unsupported_layouts_are_errors() {
    let mut b = Builder::new("layouts");
    let ia = b.dense_fixed("I", Expr::int(2));
    let ja = b.compressed_varied("J", ia, Expr::int(2), Expr::int(1));
    let ka = b.compressed_varied("K", ia, Expr::int(2), Expr::int(1));
    let ca = b.compressed_fixed("C", ia, Expr::int(2), Expr::int(1));
    let la = b.compressed_varied("L", ca, Expr::int(2), Expr::int(1));
    let base = args(vec![
        ("J_indptr", i32_arr(&[0, 1, 1])),
        ("J_indices", i32_arr(&[1])),
        ("K_indptr", i32_arr(&[0, 0, 1])),
        ("K_indices", i32_arr(&[0])),
        ("C_indices", i32_arr(&[0, 1])),
        ("L_indptr", i32_arr(&[0, 1, 1])),
        ("L_indices", i32_arr(&[0])),
    ]);
    let mut ok = base.clone();
    run(&b.f, &mut ok).expect("axes alone are valid");

    let mut b1 = Builder { f: b.f.clone() };
    b1.match_sparse("Two", &[ia, ja, ka], F32);
    let mut a1 = base.clone();
    a1.insert("two".into(), f32_arr(&[0.0]));
    expect_err(&b1.f, a1, &["`Two`", "`K`", "chain"]);

    let mut b2 = Builder { f: b.f.clone() };
    b2.match_sparse("Ch", &[ia, ca, la], F32);
    let mut a2 = base.clone();
    a2.insert("ch".into(), f32_arr(&[0.0]));
    expect_err(&b2.f, a2, &["`Ch`", "`C`", "compressed_fixed"]);

    let mut b3 = Builder { f: b.f.clone() };
    b3.match_sparse("Orphan", &[ja], F32);
    let mut a3 = base;
    a3.insert("orphan".into(), f32_arr(&[0.0]));
    expect_err(&b3.f, a3, &["`Orphan`", "`J`", "parent `I`"]);
}
