//! Tests of `store_as`: SpMV with its matrix values and vector stored as float16 (or bfloat16)
//! gives, under the stage-I evaluator, the float32 result of the rounded operands (loads are
//! cast to float32, so the arithmetic is float32), the printed function parses back, and bad
//! requests are typed errors.

use std::collections::HashMap;

use sparsetir_eval::{eval_func, ArgValue};
use sparsetir_formats::Tensor;
use sparsetir_ir::printer::print_func;
use sparsetir_ir::DType;
use sparsetir_transform::{store_as, StoreAsError};

fn args(dt: DType, a: &[f64], x: &[f64]) -> HashMap<String, ArgValue> {
    let arr = |dt: DType, v: &[f64]| ArgValue::Array(Tensor::from_f64(dt, v).expect("tensor"));
    let int = |v: &[i64]| ArgValue::Array(Tensor::from_i64(DType::I32, v).expect("tensor"));
    let mut m = HashMap::new();
    // 3 x 4: row 0 = [a0, a1 at cols 0, 2], row 1 empty, row 2 = [a2, a3 at cols 1, 3].
    m.insert("indptr".into(), int(&[0, 2, 2, 4]));
    m.insert("indices".into(), int(&[0, 2, 1, 3]));
    m.insert("a".into(), arr(dt, a));
    m.insert("x".into(), arr(dt, x));
    m.insert("y".into(), arr(DType::F32, &[0.0; 3]));
    m.insert("m".into(), ArgValue::Int(3));
    m.insert("n".into(), ArgValue::Int(4));
    m.insert("nnz".into(), ArgValue::Int(4));
    m
}

fn y(m: &HashMap<String, ArgValue>) -> Vec<f64> {
    match m.get("y") {
        Some(ArgValue::Array(t)) => t.to_f64_vec(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn sixteen_bit_operands_float32_arithmetic() {
    let f = sparsetir_ops::load("spmv").expect("spmv");
    let a = [1.0001, -2.5, 3.0517, 1e-3];
    let x = [0.3333, 7.77, -1.1, 2048.5];
    for dt in [DType::F16, DType::BF16] {
        let g = store_as(&f, &["A", "X"], dt).expect("store_as");
        let text = print_func(&g);
        assert!(text.contains(&format!("\"{dt}\"")), "{text}");
        assert!(text.contains("T.Cast(\"float32\", A[i, j])"), "{text}");
        let again = sparsetir_syntax::parse_func(&text).expect("parses back");
        assert_eq!(print_func(&again), text);
        let mut got = args(dt, &a, &x);
        eval_func(&g, &mut got).expect("evaluator");
        // The rounded operands, multiplied and summed in float32.
        let r = |v: f64| Tensor::from_f64(dt, &[v]).unwrap().get_f64(0) as f32;
        let want = [
            r(a[0]) * r(x[0]) + r(a[1]) * r(x[2]),
            0.0,
            r(a[2]) * r(x[1]) + r(a[3]) * r(x[3]),
        ];
        let got = y(&got);
        for i in 0..3 {
            assert_eq!(got[i] as f32, want[i], "{dt}: y[{i}]");
        }
    }
}

#[test]
fn bad_requests_are_typed_errors() {
    let f = sparsetir_ops::load("spmv").expect("spmv");
    assert_eq!(
        store_as(&f, &["Q"], DType::F16).unwrap_err(),
        StoreAsError::NoBuffer("Q".into())
    );
    assert_eq!(
        store_as(&f, &["A"], DType::I32).unwrap_err(),
        StoreAsError::NotFloat(DType::I32)
    );
    let g = store_as(&f, &["A"], DType::F16).unwrap();
    assert!(matches!(
        store_as(&g, &["A"], DType::BF16).unwrap_err(),
        StoreAsError::NotFloat32 { .. }
    ));
    assert_eq!(store_as(&f, &["A"], DType::F32).unwrap(), f);
}
