//! Shared helpers of the schedule tests: catalog kernels at each stage, running functions on
//! generated data, and comparing outputs.
#![allow(dead_code)]

use std::collections::HashMap;

use sparsetir_eval::ArgValue;
use sparsetir_ir::{IRModule, PrimFunc, Stage};
use sparsetir_ops::data::{random_args, Case, Pattern, Shape};
use sparsetir_transform::pipeline::{lower, PipelineOptions};

/// Catalog kernel `name` lowered to `stage`.
pub fn kernel(name: &str, stage: Stage) -> PrimFunc {
    let f = sparsetir_ops::load(name).expect("catalog kernel loads");
    if stage == Stage::I {
        return f;
    }
    lower_func(f, stage)
}

/// Lowers a function to `stage`.
pub fn lower_func(f: PrimFunc, stage: Stage) -> PrimFunc {
    let module = IRModule { funcs: vec![f] };
    let out = lower(&module, &PipelineOptions::to_stage(stage)).expect("lowers");
    out.funcs.into_iter().next().expect("one function")
}

/// A small random case of catalog kernel `name` (with empty rows).
pub fn case(name: &str, seed: u64) -> Case {
    let shape = Shape::new(Pattern::Random { empty_rows: true }, 7, 9)
        .with_feat(5)
        .with_density(0.4);
    random_args(name, &shape, seed).expect("case generates")
}

/// Runs `f` (any stage) on a copy of `case` and returns the output arrays as f64.
pub fn run(f: &PrimFunc, case: &Case) -> Vec<(String, Vec<f64>)> {
    let mut args: HashMap<String, ArgValue> = case.args.clone();
    if f.stage() == Stage::I {
        sparsetir_eval::eval_func(f, &mut args).expect("stage I runs");
    } else {
        sparsetir_eval::run_func(f, &mut args).expect("stage II/III runs");
    }
    let mut out = Vec::new();
    for name in &case.outputs {
        match args.get(name) {
            Some(ArgValue::Array(t)) => out.push((name.clone(), t.to_f64_vec())),
            _ => panic!("output {name} missing"),
        }
    }
    out
}

/// Asserts two runs agree up to float rounding.
pub fn assert_close(a: &[(String, Vec<f64>)], b: &[(String, Vec<f64>)]) {
    assert_eq!(a.len(), b.len());
    for ((na, va), (nb, vb)) in a.iter().zip(b) {
        assert_eq!(na, nb);
        assert_eq!(va.len(), vb.len(), "output {na} length");
        for (i, (x, y)) in va.iter().zip(vb).enumerate() {
            let tol = 1e-4 * (1.0 + x.abs().max(y.abs()));
            assert!((x - y).abs() <= tol, "output {na}[{i}]: {x} vs {y}");
        }
    }
}
