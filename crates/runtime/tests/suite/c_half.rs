//! Every catalog kernel in `float16` and in `bfloat16` storage on the C backend: each kernel's
//! `float32` buffers are retyped to the 16-bit type, the random data of `ops::data` converted
//! (rounded) to it, and the compiled kernel — with its default CPU schedule and without one —
//! gives what the stage-I reference evaluator gives on the same data: the C code computes in
//! `float` and rounds to the 16-bit type after every operation as the evaluator does, so the two
//! agree to within a couple of units in the last place of the 16-bit type. Also: the generated
//! C stores the bit patterns (`uint16_t`), and an atomic update of a 16-bit buffer is a typed
//! error. Skipped, with a note, when no C compiler runs.

use std::collections::HashMap;

use sparsetir_eval::{eval_func, ArgValue};
use sparsetir_formats::Tensor;
use sparsetir_ir::DType;
use sparsetir_ops::data::{random_args, Pattern, Shape};
use sparsetir_runtime::build;

use crate::common;
use common::{assert_outputs_close_16, convert_args, have_cc, opts, retype_floats, Args};

const CACHE: &str = "c-half-cache";

fn shapes() -> Vec<(&'static str, Shape)> {
    let base = common::catalog_shape;
    vec![
        (
            "random rows, some empty",
            base(Pattern::Random { empty_rows: true }),
        ),
        ("full rows", base(Pattern::FullRows)),
        ("nnz 0", base(Pattern::Empty)),
    ]
}

/// Builds `kernel` in `dt` storage (with its default schedule when `scheduled`) and compares it
/// with the evaluator; returns the number of cases compared.
fn check(kernel: &str, dt: DType, scheduled: bool) -> usize {
    let f = sparsetir_ops::load(kernel).expect("catalog kernel");
    let (g, params) = retype_floats(&f, dt);
    let schedule = if scheduled {
        sparsetir_ops::cpu_schedule(kernel)
    } else {
        None
    };
    if scheduled && schedule.is_none() {
        return 0;
    }
    let what = format!(
        "{kernel} in {dt} ({})",
        if scheduled {
            "default schedule"
        } else {
            "no schedule"
        }
    );
    let k = build::build(&g, schedule, &[], &opts(CACHE)).unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut compared = 0;
    for (shape_name, shape) in shapes() {
        let case = match random_args(kernel, &shape, 0) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("note: {kernel} {shape_name}: no data: {e}");
                continue;
            }
        };
        let args = convert_args(case.args, &params, dt);
        let mut want = args.clone();
        if let Err(e) = eval_func(&g, &mut want) {
            eprintln!("note: {what} {shape_name}: the evaluator refuses the data: {e}");
            continue;
        }
        let mut got = args.clone();
        k.run(&mut got)
            .unwrap_or_else(|e| panic!("{what} {shape_name}: refused: {e}"));
        let label = format!("{what} {shape_name}");
        // A few units in the last place of the 16-bit type, relative to the output's magnitude
        // (the evaluator and C may round a sum's terms in different orders).
        assert_outputs_close_16(&label, &case.outputs, &got, &want, dt, 8.0);
        compared += 1;
    }
    compared
}

#[test]
fn every_catalog_kernel_in_float16_and_bfloat16_equals_the_evaluator() {
    if !have_cc() {
        eprintln!("note: no C compiler runs here; skipped");
        return;
    }
    let mut total = 0;
    for k in sparsetir_ops::catalog() {
        for dt in [DType::F16, DType::BF16] {
            for scheduled in [false, true] {
                total += check(k.name, dt, scheduled);
            }
        }
    }
    assert!(total > 40, "only {total} cases compared");
}

#[test]
fn sixteen_bit_buffers_are_stored_as_bit_patterns() {
    let f = sparsetir_ops::load("spmv").expect("spmv");
    let (g, _) = retype_floats(&f, DType::F16);
    let c = build::emit(&g, sparsetir_ops::cpu_schedule("spmv"), &[]).expect("emit");
    assert!(
        c.source.contains("const uint16_t* restrict A_data"),
        "{}",
        c.source
    );
    assert!(c.source.contains("sptir_h2f("), "{}", c.source);
    assert!(c.source.contains("sptir_f2h("), "{}", c.source);
    // The default schedule's AVX-512 row sums assume float elements: the plain loop instead.
    assert!(!c.source.contains("_mm512_i32gather_ps"), "{}", c.source);
}

#[test]
fn an_atomic_update_of_a_sixteen_bit_buffer_is_refused() {
    let src = r#"
@T.prim_func
def atomic_half(a: T.handle, y: T.handle, r: T.handle, n: T.int32, m: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (n,), "float16")
    R = T.match_buffer(r, (n,), "int32")
    Y = T.match_buffer(y, (m,), "float16")
    for e in T.parallel(n):
        with T.block("coo"):
            ve = T.axis.spatial(n, e)
            T.evaluate(T.atomic_add(Y[R[ve]], A[ve]))
"#;
    let f = sparsetir_syntax::parse_func(src).expect("parse");
    let err = sparsetir_codegen::emit_c(&f).expect_err("atomic on float16");
    assert!(err.to_string().contains("float16"), "{err}");
}

#[test]
fn conversions_round_exactly_as_the_evaluator() {
    if !have_cc() {
        eprintln!("note: no C compiler runs here; skipped");
        return;
    }
    // float32 -> float16 / bfloat16 -> float32, bit for bit against the evaluator (the `half`
    // crate's round-to-nearest-even): ties both ways, subnormals, the overflow threshold,
    // infinities, NaN, signed zeros, and a sweep of magnitudes.
    let src = r#"
@T.prim_func
def cast16(x: T.handle, y: T.handle, z: T.handle, w: T.handle, n: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(n)
    X = T.sp.match_buffer(x, (I,), "float32")
    Y = T.sp.match_buffer(y, (I,), "float16")
    Z = T.sp.match_buffer(z, (I,), "bfloat16")
    W = T.sp.match_buffer(w, (I,), "float32")
    with T.sp.iteration([I], "S", "cast") as [i]:
        Y[i] = T.Cast("float16", X[i])
        Z[i] = T.Cast("bfloat16", X[i])
        W[i] = T.Cast("float32", Y[i]) + T.Cast("float32", Z[i])
"#;
    let f = sparsetir_syntax::parse_func(src).expect("parse");
    let k = build::build(&f, None, &[], &opts(CACHE)).expect("build");
    let mut xs: Vec<f64> = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        65504.0,
        65519.99,
        65520.0,
        -65520.0,
        1e6,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        6.0e-8,
        2.9802322e-8,
        2.98023224e-8,
        5.96e-8,
        6.1e-5,
        6.097555e-5,
        1.0009765625,
        1.00048828125,
        1.00146484375,
        3.0e38,
        -3.4e38,
    ];
    let mut v = 1.0e-9f64;
    while v < 1.0e6 {
        xs.push(v);
        xs.push(-v * 1.37);
        v *= 1.1173;
    }
    let n = xs.len();
    let arr = |dt: DType, v: &[f64]| ArgValue::Array(Tensor::from_f64(dt, v).expect("tensor"));
    let mut args: Args = HashMap::new();
    args.insert("x".into(), arr(DType::F32, &xs));
    args.insert("y".into(), arr(DType::F16, &vec![0.0; n]));
    args.insert("z".into(), arr(DType::BF16, &vec![0.0; n]));
    args.insert("w".into(), arr(DType::F32, &vec![0.0; n]));
    args.insert("n".into(), ArgValue::Int(n as i64));
    let mut want = args.clone();
    eval_func(&f, &mut want).expect("evaluator");
    k.run(&mut args).expect("run");
    for name in ["y", "z", "w"] {
        let (Some(ArgValue::Array(a)), Some(ArgValue::Array(b))) = (args.get(name), want.get(name))
        else {
            panic!("{name} missing");
        };
        for (i, input) in xs.iter().enumerate() {
            let (x, y) = (a.get_f64(i), b.get_f64(i));
            let same = (x.is_nan() && y.is_nan())
                || (x == y && x.is_sign_negative() == y.is_sign_negative());
            assert!(same, "{name}[{i}] (x = {input}): C {x}, evaluator {y}");
        }
    }
}

#[test]
fn sixteen_bit_operands_keep_the_vector_schedules() {
    if !have_cc() {
        eprintln!("note: no C compiler runs here; skipped");
        return;
    }
    // The catalog's SpMM and SDDMM with 16-bit operands and float32 arithmetic (`bench
    // --dtype`): their default CPU schedules' vector loops and jammed lane reductions stay,
    // reading the operands through widening loads, and the results equal the evaluator's.
    let shape = common::catalog_shape(Pattern::Random { empty_rows: true }).with_feat(32);
    for (kernel, inputs, needle) in [
        ("csrmm", &["A", "B"][..], "sptir_vld_"),
        ("sddmm", &["A", "B", "X"][..], "sptir_wld16_"),
    ] {
        for dt in [DType::F16, DType::BF16] {
            let f = sparsetir_ops::load(kernel).expect("catalog kernel");
            let g = sparsetir_transform::store_as(&f, inputs, dt).expect("store_as");
            let sched = sparsetir_ops::cpu_schedule(kernel);
            let spec = [("feat_size".to_string(), 32)];
            let what = format!("{kernel} in {dt}");
            let src = build::emit(&g, sched, &spec).expect("emit").source;
            assert!(src.contains(needle), "{what}: no {needle}:\n{src}");
            let k = build::build(&g, sched, &spec, &opts(CACHE))
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let case = random_args(kernel, &shape, 3).expect("data");
            // The parameters of the retyped buffers.
            let params: Vec<String> = g
                .buffers
                .iter()
                .filter(|(_, b)| b.dtype == dt)
                .filter_map(|(_, b)| match b.decl {
                    sparsetir_ir::BufferDecl::Match { data } => Some(g.vars[data].name.clone()),
                    _ => None,
                })
                .collect();
            assert_eq!(params.len(), inputs.len(), "{what}");
            let args = convert_args(case.args, &params, dt);
            let mut want = args.clone();
            eval_func(&g, &mut want).expect("evaluator");
            let mut got = args.clone();
            k.run(&mut got).unwrap_or_else(|e| panic!("{what}: {e}"));
            common::assert_outputs_close(&what, &case.outputs, &got, &want, 1e-5);
        }
    }
}
