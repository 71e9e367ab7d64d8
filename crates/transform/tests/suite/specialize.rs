//! Tests of `specialize`: bound parameters disappear from every expression (axes, shapes, loop
//! extents, bodies) at stages I, II and III while the parameter list stays; the specialized
//! function computes what the original computes with the same value; bad bindings are typed
//! errors.

use std::collections::HashMap;

use sparsetir_eval::{eval_func, run_func, ArgValue};
use sparsetir_ir::{BufferShape, Expr, IRModule, PrimFunc, Stage, Stmt, VarId};
use sparsetir_ops::data::{random_args, Init, Pattern, Shape};
use sparsetir_transform::pipeline::{lower, PipelineOptions};
use sparsetir_transform::{specialize, SpecializeError};

fn load(name: &str) -> PrimFunc {
    sparsetir_ops::load(name).expect("catalog kernel")
}

fn lower_to(f: &PrimFunc, stage: Stage) -> PrimFunc {
    let m = IRModule {
        funcs: vec![f.clone()],
    };
    let out = lower(&m, &PipelineOptions::to_stage(stage)).expect("lowers");
    out.funcs[0].clone()
}

/// Every expression of `f` (axes, buffers, body).
fn all_exprs(f: &PrimFunc) -> Vec<Expr> {
    let mut out = Vec::new();
    for (_, a) in f.axes.iter() {
        out.push(a.length.clone());
        out.extend(a.nnz.clone());
        out.extend(a.nnz_cols.clone());
    }
    for (_, b) in f.buffers.iter() {
        if let BufferShape::Dense(d) = &b.shape {
            out.extend(d.iter().cloned());
        }
        out.extend(b.strides.iter().cloned());
    }
    f.body
        .visit(&mut |s: &Stmt| s.for_each_expr(|e| out.push(e.clone())));
    out
}

fn mentions(f: &PrimFunc, v: VarId) -> bool {
    all_exprs(f).iter().any(|e| {
        let mut found = false;
        e.visit(&mut |x| found |= x.as_var() == Some(v));
        found
    })
}

fn assert_close(a: &HashMap<String, ArgValue>, b: &HashMap<String, ArgValue>, outs: &[String]) {
    for name in outs {
        let (Some(ArgValue::Array(x)), Some(ArgValue::Array(y))) = (a.get(name), b.get(name))
        else {
            panic!("output `{name}` missing");
        };
        assert_eq!(x.len(), y.len());
        for i in 0..x.len() {
            let (p, q) = (x.get_f64(i), y.get_f64(i));
            assert!(
                (p - q).abs() <= 1e-5 * (1.0 + q.abs()),
                "`{name}`[{i}]: {p} vs {q}"
            );
        }
    }
}

#[test]
fn csrmm_feature_width_becomes_a_constant_at_every_stage() {
    let f = load("csrmm");
    let k = f.param("feat_size").expect("feat_size");
    for stage in [Stage::I, Stage::II, Stage::III] {
        let g = lower_to(&f, stage);
        assert!(
            mentions(&g, k),
            "{stage:?}: the unspecialized function uses feat_size"
        );
        let s = specialize(&g, &[("feat_size", 8)]).expect("specializes");
        assert!(!mentions(&s, k), "{stage:?}: feat_size is still used");
        // The ABI is kept: same parameters in the same order.
        assert_eq!(s.params, g.params);
        sparsetir_ir::verify_func(&s).expect("verifies");
    }
    // At stage I the axis K is now `dense_fixed(8)`.
    let s = specialize(&f, &[("feat_size", 8)]).unwrap();
    let kax = s.axis_by_name("K").expect("K");
    assert_eq!(s.axes[kax].length.as_int(), Some(8));
}

#[test]
fn specialized_functions_compute_the_same() {
    let shape = Shape::new(Pattern::Random { empty_rows: true }, 6, 7)
        .with_feat(4)
        .with_density(0.5)
        .with_init(Init::Random);
    for name in [
        "csrmm",
        "sddmm",
        "spmv",
        "bsrmm",
        "rgcn_hetero",
        "segment_sum",
    ] {
        let f = load(name);
        for seed in 0..2 {
            let case = random_args(name, &shape, seed).expect("data");
            // Bind every integer scalar of the case.
            let binds: Vec<(String, i64)> = f
                .params
                .iter()
                .filter_map(|p| {
                    let n = &f.vars[*p].name;
                    case.int(n).map(|v| (n.clone(), v))
                })
                .collect();
            assert!(!binds.is_empty(), "{name}: no scalar to bind");
            let mut want = case.args.clone();
            eval_func(&f, &mut want).expect("reference");
            // Stage I.
            let s1 = specialize(&f, &binds).expect("stage I");
            let mut got = case.args.clone();
            eval_func(&s1, &mut got).expect("specialized stage I");
            assert_close(&got, &want, &case.outputs);
            // Stage III, specialized after lowering and lowered after specializing.
            let s3 = specialize(&lower_to(&f, Stage::III), &binds).expect("stage III");
            let mut got = case.args.clone();
            run_func(&s3, &mut got).expect("specialized stage III");
            assert_close(&got, &want, &case.outputs);
            let l3 = lower_to(&s1, Stage::III);
            let mut got = case.args.clone();
            run_func(&l3, &mut got).expect("lowered specialized");
            assert_close(&got, &want, &case.outputs);
        }
    }
}

#[test]
fn binding_nothing_is_the_identity() {
    let f = load("sddmm");
    let none: [(&str, i64); 0] = [];
    assert_eq!(specialize(&f, &none).unwrap(), f);
}

#[test]
fn bad_bindings_are_typed_errors() {
    let f = load("csrmm");
    assert!(matches!(
        specialize(&f, &[("nope", 1)]),
        Err(SpecializeError::UnknownParam { name, known, .. })
            if name == "nope" && known == "m, n, feat_size, nnz"
    ));
    assert!(matches!(
        specialize(&f, &[("indptr", 1)]),
        Err(SpecializeError::NotScalar { .. })
    ));
    assert!(matches!(
        specialize(&f, &[("m", 1i64 << 40)]),
        Err(SpecializeError::DoesNotFit { value, .. }) if value == 1 << 40
    ));
    assert!(matches!(
        specialize(&f, &[("feat_size", -3)]),
        Err(SpecializeError::NegativeSize { value: -3, .. })
    ));
    assert!(matches!(
        specialize(&f, &[("m", 3), ("m", 4)]),
        Err(SpecializeError::Conflict {
            first: 3,
            second: 4,
            ..
        })
    ));
    // The same value twice is fine.
    assert!(specialize(&f, &[("m", 3), ("m", 3)]).is_ok());
}
