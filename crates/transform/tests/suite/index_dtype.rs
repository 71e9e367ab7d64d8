//! `index_dtype`: 2:4's positions stored as int8 lower to an int8 `indices` buffer (with its
//! coordinate domain at stage III) and compute what the int32 ones do, in the stage-I
//! evaluator and the stage-III interpreter; requests it cannot honour are typed errors.

use std::collections::HashMap;

use sparsetir_eval::{eval_func, ArgValue};
use sparsetir_formats::Tensor;
use sparsetir_ir::printer::print_func;
use sparsetir_ir::{DType, IRModule, PrimFunc};
use sparsetir_transform::pipeline::{lower, PipelineOptions};
use sparsetir_transform::{index_dtype, IndexDtypeError};

fn spmm_24() -> PrimFunc {
    let text = include_str!("../../../ops/kernels/spmm_24.sp");
    sparsetir_syntax::parse_func(text).expect("spmm_24 parses")
}

/// A 2 x 8 2:4 matrix times an 8 x 3 B, positions of type `dt`.
fn args(dt: DType) -> HashMap<String, ArgValue> {
    let positions = [0i64, 2, 1, 3, 0, 1, 2, 3];
    let values: Vec<f64> = (0..8).map(|k| f64::from(k) - 3.5).collect();
    let b: Vec<f64> = (0..24).map(|k| f64::from(k % 7) * 0.5 - 1.0).collect();
    let mut m = HashMap::new();
    let arr = |dt, v: &[f64]| ArgValue::Array(Tensor::from_f64(dt, v).expect("tensor"));
    m.insert("a".into(), arr(DType::F32, &values));
    m.insert("b".into(), arr(DType::F32, &b));
    m.insert("c".into(), arr(DType::F32, &[0.0; 6]));
    let idx = Tensor::from_i64(dt, &positions).expect("positions");
    m.insert("indices".into(), ArgValue::Array(idx));
    m.insert("m".into(), ArgValue::Int(2));
    m.insert("n".into(), ArgValue::Int(8));
    m.insert("feat_size".into(), ArgValue::Int(3));
    m
}

fn c(m: &HashMap<String, ArgValue>) -> Vec<f64> {
    match &m["c"] {
        ArgValue::Array(t) => (0..t.len()).map(|i| t.get_f64(i)).collect(),
        _ => panic!("c is an array"),
    }
}

#[test]
fn int8_positions_compute_what_int32_ones_do() {
    let f = spmm_24();
    let g = index_dtype(&f, "J", DType::I8).expect("index_dtype");
    // The dense product, by hand: row r, group q, slot s holds value 4r + 2q + s at column
    // 4q + position.
    let a = args(DType::I32);
    let (vals, pos) = (
        [-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5],
        [0, 2, 1, 3, 0, 1, 2, 3],
    );
    let bval = |k: usize, j: usize| ((k * 3 + j) % 7) as f64 * 0.5 - 1.0;
    let mut want = vec![0.0; 6];
    for r in 0..2 {
        for q in 0..2 {
            for s in 0..2 {
                let e = 4 * r + 2 * q + s;
                for j in 0..3 {
                    want[r * 3 + j] += vals[e] * bval(4 * q + pos[e], j);
                }
            }
        }
    }
    let mut x32 = a.clone();
    eval_func(&f, &mut x32).expect("int32");
    let mut x8 = args(DType::I8);
    eval_func(&g, &mut x8).expect("int8");
    assert_eq!(c(&x32), want);
    assert_eq!(c(&x8), want);
    // Stage III: an int8 buffer whose values are known to lie in 0..=3.
    let module = IRModule {
        funcs: vec![g.clone()],
    };
    let out = lower(&module, &PipelineOptions::default()).expect("lowers");
    let text = print_func(&out.funcs[0]);
    assert!(
        text.contains("J_indices_data = T.match_buffer(indices, (m * (n // 4), 2), \"int8\")"),
        "{text}"
    );
    assert!(
        text.contains("T.assume_buffer_domain(J_indices_data, (T.int8(0), T.int8(3)))"),
        "{text}"
    );
    let mut x3 = args(DType::I8);
    sparsetir_eval::run_func(&out.funcs[0], &mut x3).expect("stage III runs");
    assert_eq!(c(&x3), want);
}

#[test]
fn bad_requests_are_typed_errors() {
    let f = spmm_24();
    assert_eq!(
        index_dtype(&f, "K", DType::I8),
        Err(IndexDtypeError::NoAxis("K".into()))
    );
    assert_eq!(
        index_dtype(&f, "G", DType::I8),
        Err(IndexDtypeError::NotCompressed("G".into()))
    );
    assert_eq!(
        index_dtype(&f, "J", DType::F32),
        Err(IndexDtypeError::NotInteger(DType::F32))
    );
    // csrmm's columns number `n`, not a constant.
    let csrmm =
        sparsetir_syntax::parse_func(include_str!("../../../ops/kernels/csrmm.sp")).unwrap();
    assert!(matches!(
        index_dtype(&csrmm, "J", DType::I8),
        Err(IndexDtypeError::SymbolicLength(_))
    ));
    // 300 coordinates do not fit int8.
    let wide = include_str!("../../../ops/kernels/spmm_24.sp").replace("(4, 2)", "(300, 2)");
    let wide = sparsetir_syntax::parse_func(&wide).unwrap();
    let e = index_dtype(&wide, "J", DType::I8).unwrap_err();
    assert!(e.to_string().contains("cannot hold 299"), "{e}");
}
