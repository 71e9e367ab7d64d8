//! Tests of `remove_unused_args`: unused handle parameters with their unaccessed match buffers
//! (and hints), scalar parameters only those buffers used, and plain unused scalars go
//! (snapshot); the function computes the same results from the remaining arguments (checked
//! against an independent computation); fully used functions and other stages are untouched.

use std::collections::HashMap;

use sparsetir_eval::{run_func, ArgValue};
use sparsetir_formats::Tensor;
use sparsetir_ir::printer::print_func;
use sparsetir_ir::{verify_func, DType, IRModule, PrimFunc, Stage};
use sparsetir_transform::pipeline::{lower, PipelineOptions};
use sparsetir_transform::remove_unused_args;

fn parse(src: &str) -> PrimFunc {
    sparsetir_syntax::parse_func(src).unwrap_or_else(|d| panic!("parse: {d:?}"))
}

const SRC: &str = r#"
@T.prim_func
def scale(a: T.handle, old: T.handle, y: T.handle, m: T.int32, k: T.int32, z: T.int32, s: T.float32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (m,), "float32")
    Old = T.match_buffer(old, (k,), "int32")
    Y = T.match_buffer(y, (m,), "float32")
    Scratch = T.alloc_buffer((k,), "float32")
    T.assume_buffer_domain(Old, (0, m))
    for i in T.parallel(m):
        with T.block("scale"):
            vi = T.axis.spatial(m, i)
            tmp = T.alloc_buffer((1,), "float32", scope="local")
            tmp[0] = A[vi] * s
            Y[vi] = tmp[0] + T.float32(1)
"#;

fn names(f: &PrimFunc) -> Vec<&str> {
    f.params.iter().map(|p| f.vars[*p].name.as_str()).collect()
}

#[test]
fn snapshot_unused_arguments_removed() {
    let f = parse(SRC);
    let g = remove_unused_args(&f).expect("removes");
    verify_func(&g).expect("verifies");
    assert_eq!(names(&g), ["a", "y", "m", "s"]);
    assert!(g.buffer_by_name("Old").is_none());
    assert!(g.buffer_by_name("Scratch").is_none());
    assert!(g.buffer_by_name("tmp").is_some());
    insta::assert_snapshot!(print_func(&g));
}

#[test]
fn results_are_kept() {
    let g = remove_unused_args(&parse(SRC)).expect("removes");
    let a = [1.0, -2.0, 3.5];
    let s = 0.5;
    let mut args = HashMap::from([
        (
            "a".to_string(),
            ArgValue::Array(Tensor::from_f64(DType::F32, &a).expect("tensor")),
        ),
        (
            "y".to_string(),
            ArgValue::Array(Tensor::from_f64(DType::F32, &[0.0; 3]).expect("tensor")),
        ),
        ("m".to_string(), ArgValue::Int(3)),
        ("s".to_string(), ArgValue::Float(s)),
    ]);
    run_func(&g, &mut args).expect("runs");
    let ArgValue::Array(y) = &args["y"] else {
        panic!("y")
    };
    for (i, v) in a.iter().enumerate() {
        assert!((y.get_f64(i) - (v * s + 1.0)).abs() < 1e-6);
    }
}

#[test]
fn used_arguments_stay() {
    let c = sparsetir_ops::load("csrmm").expect("catalog");
    // Stage I: untouched.
    assert_eq!(remove_unused_args(&c).expect("no-op"), c);
    let m = IRModule { funcs: vec![c] };
    let f = lower(&m, &PipelineOptions::to_stage(Stage::III))
        .expect("lowers")
        .funcs[0]
        .clone();
    assert_eq!(remove_unused_args(&f).expect("nothing to remove"), f);
}
