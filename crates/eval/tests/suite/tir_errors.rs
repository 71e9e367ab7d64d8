//! Every error of the stage II/III interpreter: bad stage, bad arguments, invalid structure
//! arrays, out-of-range accesses (dense indices, sparse positions, extra storage), division by
//! zero, iterators outside their domain, violated domain hints, malformed atomics, scoping.
//! Each is an `EvalError` (never a panic), located at the statement where one runs, and leaves
//! the arguments unchanged.

use crate::tir_common;

use std::collections::HashMap;

use sparsetir_eval::ArgValue;
use sparsetir_ir::{Expr, Stmt, Store};
use tir_common::*;

const DENSE: &str = r#"
@T.prim_func
def dense(x: T.handle, y: T.handle, m: T.int32, s: T.int8) -> None:
    T.func_attr({"sparse_tir_level": 0})
    X = T.match_buffer(x, (m,), "float32")
    Y = T.match_buffer(y, (m,), "float32")
    for i in T.serial(m):
        Y[i] = X[i] * T.float32(2)
"#;

fn dense_args() -> HashMap<String, ArgValue> {
    args(vec![
        ("x", f32_arr(&[1.0, 2.0, 3.0])),
        ("y", f32_arr(&[0.0; 3])),
        ("m", int(3)),
        ("s", int(1)),
    ])
}

fn variant(src: &str, from: &str, to: &str) -> String {
    assert!(src.contains(from), "`{from}` not in the script");
    src.replace(from, to)
}

fn check(src: &str, a: &HashMap<String, ArgValue>, fragments: &[&str], at: Option<&str>) {
    let f = parse(src);
    expect_err(src, &f, a, fragments, at);
}

#[test]
fn the_dense_base_case_runs() {
    let f = parse(DENSE);
    let mut a = dense_args();
    run(&f, &mut a);
    assert_eq!(out(&a, "y"), vec![2.0, 4.0, 6.0]);
}

#[test]
fn stage_i_is_rejected() {
    let src = r#"
@T.prim_func
def f(a: T.handle, m: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    A = T.sp.match_buffer(a, (I,), "float32")
    with T.sp.iteration([I], "S", "it") as [i]:
        A[i] = T.float32(1)
"#;
    let mut f = parse(src);
    let a = args(vec![("a", f32_arr(&[0.0; 2])), ("m", int(2))]);
    expect_err(src, &f, &a, &["stage I"], None);
    // A sparse iteration left in a function marked stage II is reported where it stands.
    f.set_stage(sparsetir_ir::Stage::II);
    expect_err(
        src,
        &f,
        &a,
        &["sparse iteration", "stage-I"],
        Some("T.sp.iteration"),
    );
}

#[test]
fn bad_scalar_arguments() {
    let mut a = dense_args();
    a.remove("m");
    check(DENSE, &a, &["missing argument", "`m`"], None);
    let mut a = dense_args();
    a.insert("m".into(), f32_arr(&[1.0]));
    check(DENSE, &a, &["`m`", "array"], None);
    let mut a = dense_args();
    a.insert("m".into(), ArgValue::Float(2.0));
    check(DENSE, &a, &["`m`", "float"], None);
    let mut a = dense_args();
    a.insert("s".into(), int(300));
    check(DENSE, &a, &["`s`", "does not fit", "int8"], None);
}

#[test]
fn bad_array_arguments() {
    let mut a = dense_args();
    a.remove("x");
    check(DENSE, &a, &["missing argument `x`"], None);
    let mut a = dense_args();
    a.insert("x".into(), int(4));
    check(DENSE, &a, &["`x`", "must be an array"], None);
    let mut a = dense_args();
    a.insert("x".into(), f64_arr(&[1.0, 2.0, 3.0]));
    check(DENSE, &a, &["`X`", "float32", "float64"], None);
    let mut a = dense_args();
    a.insert("x".into(), f32_arr(&[1.0, 2.0]));
    check(
        DENSE,
        &a,
        &["`X` needs 3 values", "only 2"],
        Some("T.match_buffer(x"),
    );
}

#[test]
fn dense_out_of_range_accesses() {
    let a = dense_args();
    let src = variant(DENSE, "Y[i] = X[i]", "Y[i] = X[i + 1]");
    check(
        &src,
        &a,
        &["`X`", "index 3", "0..3"],
        Some("Y[i] = X[i + 1]"),
    );
    let src = variant(DENSE, "Y[i] = X[i]", "Y[i - 1] = X[i]");
    check(&src, &a, &["`Y`", "index -1"], Some("Y[i - 1] = X[i]"));
    // Wrong number of indices (built by hand: the parser refuses it).
    let mut f = parse(DENSE);
    let mut done = false;
    edit_first_store(&mut f.body, &mut |st| {
        st.indices.push(Expr::int(0));
        done = true;
    });
    assert!(done);
    expect_err(
        DENSE,
        &f,
        &a,
        &["`Y` takes 1 indices, got 2"],
        Some("Y[i] ="),
    );
}

#[test]
fn arithmetic_errors() {
    let a = dense_args();
    let src = variant(DENSE, "X[i] * T.float32(2)", "X[T.floordiv(i, i - 1)]");
    check(&src, &a, &["division by zero"], Some("Y[i] ="));
    let src = variant(DENSE, "X[i] * T.float32(2)", "X[T.floormod(i, m - 3)]");
    check(&src, &a, &["modulo by zero"], Some("Y[i] ="));
}

#[test]
fn loop_and_block_errors() {
    let a = dense_args();
    let src = variant(
        DENSE,
        "        Y[i] = X[i] * T.float32(2)",
        "        with T.block(\"b\"):\n            vi = T.axis.spatial(2, i)\n            Y[vi] = X[vi]",
    );
    check(
        &src,
        &a,
        &["block `b`", "`vi` = 2", "domain [0, 2)"],
        Some("with T.block"),
    );
}

#[test]
fn atomic_add_needs_an_element() {
    let a = dense_args();
    let src = variant(
        DENSE,
        "        Y[i] = X[i] * T.float32(2)",
        "        T.evaluate(T.atomic_add(T.float32(1), X[i]))",
    );
    // The statement has no span of its own: the error is located at the enclosing loop.
    check(&src, &a, &["first argument of `atomic_add`"], Some("for"));
}

#[test]
fn scoping_errors() {
    let src = r#"
@T.prim_func
def f(y: T.handle) -> None:
    T.func_attr({"sparse_tir_level": 0})
    Y = T.match_buffer(y, (2,), "int32")
    for i in T.serial(2):
        with T.block("b"):
            vi = T.axis.spatial(2, i)
            acc = T.alloc_buffer((1,), "int32")
            acc[0] = vi
            Y[vi] = acc[0]
"#;
    let a = args(vec![("y", i32_arr(&[0, 0]))]);
    let f = parse(src);
    let mut ok = a.clone();
    run(&f, &mut ok);
    assert_eq!(out_i64(&ok, "y"), vec![0, 1]);
    // A block-local buffer and a block iterator used after the block (built by hand).
    let acc = f.buffer_by_name("acc").expect("acc");
    let y = f.buffer_by_name("Y").expect("Y");
    let vi = f
        .vars
        .iter()
        .find(|(_, v)| v.name == "vi")
        .map(|(h, _)| h)
        .expect("vi");
    let mut g = f.clone();
    g.body = Stmt::seq(vec![
        g.body.clone(),
        Stmt::Store(Store {
            buffer: y,
            indices: vec![Expr::int(0)],
            value: Expr::load(acc, vec![Expr::int(0)]),
            span: Default::default(),
        }),
    ]);
    expect_err(src, &g, &a, &["buffer `acc` is not allocated here"], None);
    let mut g = f.clone();
    g.body = Stmt::seq(vec![
        g.body.clone(),
        Stmt::Store(Store {
            buffer: y,
            indices: vec![Expr::Var(vi)],
            value: Expr::int(1),
            span: Default::default(),
        }),
    ]);
    expect_err(src, &g, &a, &["variable `vi`", "no value"], None);
    // A handle used as a value.
    let mut g = f.clone();
    let h = g.param("y").expect("y");
    g.body = Stmt::Store(Store {
        buffer: y,
        indices: vec![Expr::int(0)],
        value: Expr::Var(h),
        span: Default::default(),
    });
    expect_err(src, &g, &a, &["handle `y`"], None);
}

#[test]
fn stride_errors() {
    let a = dense_args();
    let src = variant(
        DENSE,
        "(m,), \"float32\")\n    Y",
        "(m,), \"float32\", strides=[1, 1])\n    Y",
    );
    check(
        &src,
        &a,
        &["`X`", "2 strides for 1 dimension"],
        Some("T.match_buffer(x"),
    );
}

// ---------------------------------------------------------------------------- stage II

const SPARSE: &str = r#"
@T.prim_func
def rowsum(a: T.handle, y: T.handle, indptr: T.handle, indices: T.handle, m: T.int32,
           n: T.int32, nnz: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 1})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices))
    J_dense = T.sp.dense_varied(I, (n, nnz), indptr)
    A = T.sp.match_buffer(a, [I, J], "float32")
    Y = T.sp.match_buffer(y, [I], "float32")
    J_indptr = T.sp.match_buffer(indptr, [I], "int32", extra_storage=1)
    J_indices = T.sp.match_buffer(indices, [I, J_dense], "int32")
    T.assume_buffer_domain(J_indptr, [0, nnz])
    T.assume_buffer_domain(J_indices, [0, n])
    for i in T.serial(m):
        with T.block("rowsum0"):
            vi = T.axis.spatial(m, i)
            with T.init():
                Y[vi] = T.float32(0)
            for j in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
                with T.block("rowsum1"):
                    vj = T.axis.reduce(n, j)
                    Y[vi] = Y[vi] + A[vi, vj]
"#;

fn sparse_args() -> HashMap<String, ArgValue> {
    args(vec![
        ("a", f32_arr(&[1.0, 2.0, 3.0, 4.0])),
        ("y", f32_arr(&[0.0; 3])),
        ("indptr", i32_arr(&[0, 2, 2, 4])),
        ("indices", i32_arr(&[0, 3, 1, 2])),
        ("m", int(3)),
        ("n", int(4)),
        ("nnz", int(4)),
    ])
}

#[test]
fn the_sparse_base_case_runs() {
    let f = parse(SPARSE);
    let mut a = sparse_args();
    run(&f, &mut a);
    assert_eq!(out(&a, "y"), vec![3.0, 0.0, 7.0]);
}

#[test]
fn invalid_indptr_arrays() {
    let with = |v: ArgValue| {
        let mut a = sparse_args();
        a.insert("indptr".into(), v);
        a
    };
    let at = Some("T.sp.compressed_varied(I");
    check(
        SPARSE,
        &with(i32_arr(&[0, 2, 4])),
        &["indptr of axis `J`", "expected 4"],
        at,
    );
    check(
        SPARSE,
        &with(i32_arr(&[1, 2, 2, 4])),
        &["indptr of axis `J`", "entry 0"],
        at,
    );
    check(
        SPARSE,
        &with(i32_arr(&[0, 3, 2, 4])),
        &["indptr of axis `J`", "entry 2"],
        at,
    );
    check(
        SPARSE,
        &with(i32_arr(&[0, 2, 2, 3])),
        &["last indptr value 3", "nnz 4"],
        at,
    );
    check(
        SPARSE,
        &with(f32_arr(&[0.0, 2.0, 2.0, 4.0])),
        &["integer dtype"],
        at,
    );
}

#[test]
fn sparse_positions_out_of_range() {
    let a = sparse_args();
    // One step too many per row: position 2 of row 0 (2 elements).
    let src = variant(
        SPARSE,
        "J_indptr[vi + 1] - J_indptr[vi])",
        "J_indptr[vi + 1] - J_indptr[vi] + 1)",
    );
    check(
        &src,
        &a,
        &["`A`", "position 2", "0..2", "axis `J`"],
        Some("Y[vi] = Y[vi] + A[vi, vj]"),
    );
    // A dense_fixed root position out of range.
    let src = variant(SPARSE, "Y[vi] + A[vi, vj]", "Y[vi] + A[vi + 3, vj]");
    check(
        &src,
        &a,
        &["`A`", "position 3", "axis `I`"],
        Some("Y[vi] = Y[vi] + A[vi + 3, vj]"),
    );
    // Extra storage: J_indptr spans m + 1 = 4 values, so element vi + 2 fails at the last row.
    let src = variant(
        SPARSE,
        "Y[vi] + A[vi, vj]",
        "Y[vi] + A[vi, vj] * T.Cast(\"float32\", J_indptr[vi + 2])",
    );
    check(
        &src,
        &a,
        &["`J_indptr`", "offset 4", "4 values"],
        Some("Y[vi] = Y[vi] + A[vi, vj] * T.Cast"),
    );
}

#[test]
fn domain_hints_are_checked() {
    let mut a = sparse_args();
    a.insert("indices".into(), i32_arr(&[0, 3, 1, 5]));
    check(
        SPARSE,
        &a,
        &["assume_buffer_domain", "J_indices[3] = 5", "[0, 4]"],
        Some("T.assume_buffer_domain(J_indices"),
    );
}

#[test]
fn unsupported_sparse_layout() {
    let src = variant(
        SPARSE,
        "A = T.sp.match_buffer(a, [I, J], \"float32\")",
        "A = T.sp.match_buffer(a, [I, J, J_dense], \"float32\")",
    );
    let src = variant(&src, "Y[vi] + A[vi, vj]", "Y[vi] + A[vi, vj, 0]");
    let a = sparse_args();
    // The parser accepts it (a verifier question); the interpreter refuses the layout.
    let f = parse(&src);
    expect_err(
        &src,
        &f,
        &a,
        &["`A`", "varied axis `J_dense`", "unsupported layout"],
        None,
    );
}

/// Applies `f` to the first store of `s` (depth first).
fn edit_first_store(s: &mut Stmt, f: &mut dyn FnMut(&mut Store)) -> bool {
    match s {
        Stmt::Store(st) => {
            f(st);
            true
        }
        Stmt::Seq(v) => v.iter_mut().any(|c| edit_first_store(c, f)),
        Stmt::For(l) => edit_first_store(&mut l.body, f),
        Stmt::Block(b) => edit_first_store(&mut b.body, f),
        Stmt::Let(l) => edit_first_store(&mut l.body, f),
        Stmt::If(i) => edit_first_store(&mut i.then_case, f),
        _ => false,
    }
}
