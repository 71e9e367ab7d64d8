//! Tests of `specialize_buffer`: an ELL-shaped `indptr` replaced by `i * c` (hand-written
//! script, snapshot) and by `i * 2` in the lowered catalog SpMV; loads, regions and hints of the
//! buffer disappear with its parameter, and the specialized function computes the same product
//! (checked against an independent dense computation); unknown, written or non-parameter
//! buffers and closed forms that cannot be built are typed errors.

use std::collections::HashMap;

use sparsetir_eval::{run_func, ArgValue};
use sparsetir_formats::Tensor;
use sparsetir_ir::printer::print_func;
use sparsetir_ir::{verify_func, DType, Expr, IRModule, PrimFunc, Stage};
use sparsetir_transform::pipeline::{lower, PipelineOptions};
use sparsetir_transform::{specialize_buffer, LowerError};

fn parse(src: &str) -> PrimFunc {
    sparsetir_syntax::parse_func(src).unwrap_or_else(|d| panic!("parse: {d:?}"))
}

/// CSR SpMV whose rows all hold `c` elements (an ELL matrix stored as CSR).
const ELL: &str = r#"
@T.prim_func
def ell_spmv(a: T.handle, indptr: T.handle, indices: T.handle, x: T.handle, y: T.handle, m: T.int32, n: T.int32, nnz: T.int32, c: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (nnz,), "float32")
    J_indptr = T.match_buffer(indptr, (m + 1,), "int32")
    J_indices = T.match_buffer(indices, (nnz,), "int32")
    X = T.match_buffer(x, (n,), "float32")
    Y = T.match_buffer(y, (m,), "float32")
    T.assume_buffer_domain(J_indptr, (0, nnz))
    for i in T.serial(m):
        with T.block("row"):
            vi = T.axis.spatial(m, i)
            T.reads(J_indptr[vi:vi + 2], A[0:nnz], X[0:n], J_indices[0:nnz])
            T.writes(Y[vi])
            for j in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
                with T.block("nz"):
                    vj = T.axis.reduce(n, j)
                    with T.init():
                        Y[vi] = T.float32(0)
                    Y[vi] = Y[vi] + A[vj + J_indptr[vi]] * X[J_indices[vj + J_indptr[vi]]]
"#;

fn times(f: &PrimFunc, name: &str, idx: &[Expr]) -> Option<Expr> {
    let c = f.param(name)?;
    Some(Expr::mul(idx.first()?.clone(), Expr::Var(c)))
}

/// An ELL matrix (`m` rows, `c` per row) as CSR arrays, a vector and the f64 product.
struct Case {
    m: usize,
    n: usize,
    c: usize,
    a: Vec<f64>,
    indptr: Vec<i64>,
    indices: Vec<i64>,
    x: Vec<f64>,
    y: Vec<f64>,
}

fn case(m: usize, n: usize, c: usize) -> Case {
    let a: Vec<f64> = (0..m * c).map(|v| 0.5 + (v % 5) as f64).collect();
    let indptr: Vec<i64> = (0..=m).map(|i| (i * c) as i64).collect();
    let indices: Vec<i64> = (0..m * c)
        .map(|v| ((v / c + 3 * (v % c)) % n) as i64)
        .collect();
    let x: Vec<f64> = (0..n).map(|v| 1.0 - 0.25 * v as f64).collect();
    let mut dense = vec![0.0; m * n];
    for r in 0..m {
        for k in 0..c {
            dense[r * n + indices[r * c + k] as usize] += a[r * c + k];
        }
    }
    let y = (0..m)
        .map(|r| (0..n).map(|j| dense[r * n + j] * x[j]).sum())
        .collect();
    Case {
        m,
        n,
        c,
        a,
        indptr,
        indices,
        x,
        y,
    }
}

fn run(f: &PrimFunc, k: &Case, names: [&str; 5]) -> Vec<f64> {
    let [a, x, y, indptr, indices] = names;
    let mut args = HashMap::new();
    let fa = |v: &[f64]| ArgValue::Array(Tensor::from_f64(DType::F32, v).expect("tensor"));
    let ia = |v: &[i64]| ArgValue::Array(Tensor::from_i64(DType::I32, v).expect("tensor"));
    let params: Vec<&str> = f.params.iter().map(|p| f.vars[*p].name.as_str()).collect();
    let mut put = |name: &str, v: ArgValue| {
        if params.contains(&name) {
            args.insert(name.to_string(), v);
        }
    };
    put(a, fa(&k.a));
    put(x, fa(&k.x));
    put(y, fa(&vec![0.0; k.m]));
    put(indptr, ia(&k.indptr));
    put(indices, ia(&k.indices));
    put("m", ArgValue::Int(k.m as i64));
    put("n", ArgValue::Int(k.n as i64));
    put("nnz", ArgValue::Int((k.m * k.c) as i64));
    put("c", ArgValue::Int(k.c as i64));
    run_func(f, &mut args).expect("runs");
    let ArgValue::Array(t) = &args[y] else {
        panic!("y")
    };
    t.to_f64_vec()
}

fn assert_close(a: &[f64], b: &[f64]) {
    assert_eq!(a.len(), b.len());
    for (i, (p, q)) in a.iter().zip(b).enumerate() {
        assert!((p - q).abs() <= 1e-4 * (1.0 + q.abs()), "[{i}]: {p} vs {q}");
    }
}

const NAMES: [&str; 5] = ["a", "x", "y", "indptr", "indices"];

#[test]
fn snapshot_ell_indptr_closed_form() {
    let f = parse(ELL);
    let g = specialize_buffer(&f, "J_indptr", |f, idx| times(f, "c", idx)).expect("specializes");
    verify_func(&g).expect("verifies");
    assert!(g.param("indptr").is_none());
    assert!(g.buffer_by_name("J_indptr").is_none());
    assert_eq!(g.params.len(), f.params.len() - 1);
    insta::assert_snapshot!(print_func(&g));
}

#[test]
fn ell_product_is_kept() {
    let f = parse(ELL);
    let g = specialize_buffer(&f, "J_indptr", |f, idx| times(f, "c", idx)).expect("specializes");
    for (m, n, c) in [(4, 6, 2), (1, 3, 3), (5, 5, 1), (0, 2, 2)] {
        let k = case(m, n, c);
        assert_close(&run(&f, &k, NAMES), &k.y);
        assert_close(&run(&g, &k, NAMES), &k.y);
    }
}

#[test]
fn lowered_catalog_spmv_with_a_constant_row_length() {
    let src = sparsetir_ops::load("spmv").expect("catalog");
    let m = IRModule { funcs: vec![src] };
    let f = lower(&m, &PipelineOptions::to_stage(Stage::III))
        .expect("lowers")
        .funcs[0]
        .clone();
    let g = specialize_buffer(&f, "J_indptr_data", |_, idx| {
        Some(Expr::mul(idx.first()?.clone(), Expr::int(2)))
    })
    .expect("specializes");
    verify_func(&g).expect("verifies");
    let text = print_func(&g);
    assert!(!text.contains("indptr"), "{text}");
    // The row length simplifies to the constant.
    assert!(text.contains("T.serial(2)"), "{text}");
    let k = case(5, 7, 2);
    assert_close(&run(&f, &k, NAMES), &k.y);
    assert_close(&run(&g, &k, NAMES), &k.y);
}

#[test]
fn errors() {
    let f = parse(ELL);
    let e = specialize_buffer(&f, "nope", |f, idx| times(f, "c", idx)).expect_err("unknown");
    assert!(matches!(e, LowerError::Invalid { .. }), "{e:?}");
    assert!(e.to_string().contains("no buffer `nope`"), "{e}");
    let e = specialize_buffer(&f, "Y", |f, idx| times(f, "c", idx)).expect_err("written");
    assert!(e.to_string().contains("is written"), "{e}");
    let e = specialize_buffer(&f, "J_indptr", |f, idx| times(f, "missing", idx))
        .expect_err("cannot build");
    assert!(e.to_string().contains("cannot be built"), "{e}");
    let e = specialize_buffer(&f, "J_indptr", |f, idx| {
        let b = f.buffer_by_name("J_indptr")?;
        Some(Expr::load(b, idx.to_vec()))
    })
    .expect_err("recursive");
    assert!(e.to_string().contains("itself"), "{e}");
    let alloc = ELL.replace(
        "    T.assume_buffer_domain(J_indptr, (0, nnz))\n",
        "    Tmp = T.alloc_buffer((m,), \"int32\")\n",
    );
    let e =
        specialize_buffer(&parse(&alloc), "Tmp", |f, idx| times(f, "c", idx)).expect_err("alloc");
    assert!(e.to_string().contains("not bound to a parameter"), "{e}");
}

#[test]
fn other_stages_are_untouched() {
    let c = sparsetir_ops::load("csrmm").expect("catalog");
    let g = specialize_buffer(&c, "J_indptr", |_, i| i.first().cloned()).expect("no-op");
    assert_eq!(g, c);
}
