//! End to end: catalog kernels lowered, emitted as C, compiled through the cache and launched by
//! `compile_c` give what the stage-I reference evaluator (`sparsetir_eval::eval_func`) gives on the
//! same random data; and valid random data is never refused by the launch-time validation.
//! Skipped, with a note, when no C compiler runs.

use std::collections::HashMap;
use std::path::PathBuf;

use sparsetir_eval::{eval_func, ArgValue};
use sparsetir_ops::data::{random_args, Init, Pattern, Shape};
use sparsetir_runtime::{compile_c, CacheOutcome, RunError};

mod common;
use common::{have_cc, opts_in};

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "sparsetir-compile-c-{}-{tag}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Every output array of `native` equals the evaluator's within float tolerance.
fn assert_same(
    what: &str,
    outputs: &[String],
    native: &HashMap<String, ArgValue>,
    reference: &HashMap<String, ArgValue>,
) {
    for name in outputs {
        let (Some(ArgValue::Array(a)), Some(ArgValue::Array(b))) =
            (native.get(name), reference.get(name))
        else {
            panic!("{what}: output `{name}` missing");
        };
        assert_eq!(a.len(), b.len(), "{what}: `{name}` length");
        for i in 0..a.len() {
            let (x, y) = (a.get_f64(i), b.get_f64(i));
            let ok = (x - y).abs() <= 1e-4 * (1.0 + y.abs()) || (x.is_nan() && y.is_nan());
            assert!(ok, "{what}: `{name}`[{i}] = {x}, the evaluator gives {y}");
        }
    }
}

#[test]
fn csrmm_equals_the_evaluator() {
    if !have_cc() {
        return;
    }
    let dir = temp_dir("csrmm");
    let f = sparsetir_ops::load("csrmm").expect("csrmm");
    let kernel = compile_c(&f, &opts_in(&dir)).expect("compiles");
    assert_eq!(kernel.report().outcome, CacheOutcome::Miss);
    let shapes = [
        Shape::new(Pattern::Random { empty_rows: true }, 37, 23)
            .with_density(0.3)
            .with_feat(7),
        Shape::new(Pattern::Random { empty_rows: false }, 5, 64)
            .with_feat(32)
            .with_init(Init::Random),
        Shape::new(Pattern::FullRows, 4, 4).with_feat(1),
        Shape::new(Pattern::SingleRow, 1, 9).with_feat(3),
        Shape::new(Pattern::Empty, 3, 3).with_feat(2),
        Shape::new(Pattern::OneByOne, 1, 1).with_feat(1),
        Shape::new(Pattern::Empty, 0, 0).with_feat(1),
    ];
    for (s, shape) in shapes.iter().enumerate() {
        for seed in 0..3 {
            let case = random_args("csrmm", shape, seed).expect("data");
            let mut native = case.args.clone();
            let mut reference = case.args.clone();
            kernel.run(&mut native).expect("native run");
            eval_func(&f, &mut reference).expect("evaluator run");
            assert_same(
                &format!("csrmm shape {s} seed {seed}"),
                &case.outputs,
                &native,
                &reference,
            );
        }
    }
    // A second build of the same function is a cache hit.
    let again = compile_c(&f, &opts_in(&dir)).expect("loads");
    assert_eq!(again.report().outcome, CacheOutcome::Hit);
    assert_eq!(again.source(), kernel.source());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn catalog_kernels_equal_the_evaluator() {
    if !have_cc() {
        return;
    }
    let dir = temp_dir("catalog");
    let shape = Shape::new(Pattern::Random { empty_rows: true }, 7, 9)
        .with_density(0.4)
        .with_feat(5)
        .with_block(2)
        .with_depth(3)
        .with_init(Init::Random);
    let mut failures = Vec::new();
    let mut compared = Vec::new();
    for k in sparsetir_ops::catalog() {
        let f = sparsetir_ops::load(k.name).expect("catalog kernel");
        let kernel = match compile_c(&f, &opts_in(&dir)) {
            Ok(kernel) => kernel,
            // The C writer may refuse constructs; that is its own tests' business.
            Err(e @ (RunError::Codegen(_) | RunError::Lower(_))) => {
                eprintln!("note: {}: not compiled: {e}", k.name);
                continue;
            }
            Err(e) => {
                failures.push(format!("{}: {e}", k.name));
                continue;
            }
        };
        for seed in 0..2 {
            let case = random_args(k.name, &shape, seed).expect("data");
            let mut native = case.args.clone();
            let mut reference = case.args.clone();
            if let Err(e) = eval_func(&f, &mut reference) {
                eprintln!(
                    "note: {} seed {seed}: the evaluator refuses the data: {e}",
                    k.name
                );
                continue;
            }
            match kernel.run(&mut native) {
                Ok(()) => {
                    assert_same(
                        &format!("{} seed {seed}", k.name),
                        &case.outputs,
                        &native,
                        &reference,
                    );
                    compared.push(k.name);
                }
                Err(e) => failures.push(format!("{} seed {seed}: valid data refused: {e}", k.name)),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    compared.dedup();
    eprintln!("compared with the evaluator: {}", compared.join(", "));
    for must in ["csrmm", "sddmm", "spmv", "bsrmm"] {
        assert!(compared.contains(&must), "{must} was not compared");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn stage_iii_input_is_refused() {
    let f = sparsetir_ops::load("spmv").expect("spmv");
    let lowered = sparsetir_transform::pipeline::lower(
        &sparsetir_ir::IRModule { funcs: vec![f] },
        &sparsetir_transform::pipeline::PipelineOptions::default(),
    )
    .expect("lowers");
    let dir = temp_dir("stage");
    let err = compile_c(&lowered.funcs[0], &opts_in(&dir)).expect_err("refused");
    assert!(matches!(err, RunError::Stage(_)), "{err:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Load-time measurement for the benchmark (run with `--release -- --ignored --nocapture`):
/// a cold csrmm build (lowering, C emission, compile) and cached loads of the same kernel.
#[test]
#[ignore]
fn measure_csrmm_compile_and_cached_load() {
    if !have_cc() {
        return;
    }
    let dir = temp_dir("measure");
    let f = sparsetir_ops::load("csrmm").expect("csrmm");
    let start = std::time::Instant::now();
    let cold = compile_c(&f, &opts_in(&dir)).expect("compiles");
    let cold_total = start.elapsed();
    assert_eq!(cold.report().outcome, CacheOutcome::Miss);
    let mut loads = Vec::new();
    let mut cache_loads = Vec::new();
    for _ in 0..20 {
        let start = std::time::Instant::now();
        let k = compile_c(&f, &opts_in(&dir)).expect("loads");
        loads.push(start.elapsed().as_secs_f64());
        cache_loads.push(k.report().total_time.as_secs_f64());
        assert_eq!(k.report().outcome, CacheOutcome::Hit);
    }
    let ms = |s: f64| s * 1e3;
    println!(
        "csrmm cold: total {:.1} ms (lower + emit {:.1} ms, C compiler {:.1} ms)",
        ms(cold_total.as_secs_f64()),
        ms(cold.frontend_time().as_secs_f64()),
        ms(cold.report().compile_time.as_secs_f64())
    );
    println!(
        "csrmm cached: compile_c median {:.2} ms (cache lookup + dlopen median {:.2} ms)",
        ms(sparsetir_runtime::timing::median(&loads)),
        ms(sparsetir_runtime::timing::median(&cache_loads))
    );
    // A fresh process: nothing loaded yet (compiler version, OpenMP runtime, kernel).
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "measure_child", "--ignored", "--nocapture"])
        .env("SPARSETIR_MEASURE_DIR", &dir)
        .output()
        .expect("child");
    print!(
        "{}",
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with("csrmm"))
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Child of [`measure_csrmm_compile_and_cached_load`]: the first cached load in a new process.
#[test]
#[ignore]
fn measure_child() {
    let Some(dir) = std::env::var_os("SPARSETIR_MEASURE_DIR") else {
        return;
    };
    let f = sparsetir_ops::load("csrmm").expect("csrmm");
    let start = std::time::Instant::now();
    let k = compile_c(&f, &opts_in(std::path::Path::new(&dir))).expect("loads");
    let total = start.elapsed();
    assert_eq!(k.report().outcome, CacheOutcome::Hit);
    println!(
        "csrmm cached, fresh process: compile_c {:.2} ms (cache lookup + dlopen {:.2} ms)",
        total.as_secs_f64() * 1e3,
        k.report().total_time.as_secs_f64() * 1e3
    );
}
