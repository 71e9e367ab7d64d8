//! Write-only outputs (`ArrayRef::write_only`, `Kernel::overwritten_params`): for every catalog
//! kernel and aggregation under its default CPU schedule, each parameter the C writer says the
//! code overwrites whole is lent write-only, holding NaN where stage I would see 0, and the
//! results equal the evaluator's on random data with empty rows, one row, nnz 0 and 1×1: an
//! element the kernel failed to store would stay NaN. SpMM's output is among them (its init
//! now starts the local row, `init_into_cache`), an accumulating output is not, and a
//! write-only array for a parameter the kernel does not overwrite is refused before the launch.

use std::collections::HashMap;
use std::mem::MaybeUninit;

use sparsetir_eval::{eval_func, ArgValue};
use sparsetir_ir::DType;
use sparsetir_ops::data::{random_args, Pattern, Shape};
use sparsetir_runtime::build::build;
use sparsetir_runtime::{ArrayRef, LaunchArg, LaunchArgs, RunError};

use crate::common;
use common::{have_cc, opts};

const CACHE: &str = "write-only";

fn shapes() -> Vec<Shape> {
    let base = common::catalog_shape;
    vec![
        base(Pattern::Random { empty_rows: true }),
        base(Pattern::SingleRow),
        base(Pattern::Empty),
        Shape::new(Pattern::OneByOne, 1, 1)
            .with_feat(1)
            .with_block(1)
            .with_depth(1),
    ]
}

/// Launches `k` on `args` with the parameters `write_only` lent write-only (NaN-filled), the
/// others as owned tensors; returns the write-only arrays' values.
fn launch_write_only(
    k: &sparsetir_runtime::Kernel,
    args: &mut HashMap<String, ArgValue>,
    write_only: &[String],
) -> Result<HashMap<String, Vec<f64>>, RunError> {
    let mut f32s: Vec<(String, Vec<MaybeUninit<f32>>)> = Vec::new();
    let mut f64s: Vec<(String, Vec<MaybeUninit<f64>>)> = Vec::new();
    for name in write_only {
        let Some(ArgValue::Array(t)) = args.get(name) else {
            continue;
        };
        match t.dtype() {
            DType::F32 => f32s.push((name.clone(), vec![MaybeUninit::new(f32::NAN); t.len()])),
            DType::F64 => f64s.push((name.clone(), vec![MaybeUninit::new(f64::NAN); t.len()])),
            _ => {}
        }
    }
    let mut launch = LaunchArgs::of_values_mut(args);
    for (name, v) in f32s.iter_mut() {
        launch.set(name, LaunchArg::Array(ArrayRef::write_only(v)));
    }
    for (name, v) in f64s.iter_mut() {
        launch.set(name, LaunchArg::Array(ArrayRef::write_only(v)));
    }
    k.launch(&launch)?;
    drop(launch);
    let mut out = HashMap::new();
    // SAFETY (both loops): the launch succeeded, and these are parameters the kernel
    // overwrites whole (the runtime refuses write-only arrays for any other).
    for (name, v) in f32s {
        let vals = v
            .iter()
            .map(|x| unsafe { x.assume_init() } as f64)
            .collect();
        out.insert(name, vals);
    }
    for (name, v) in f64s {
        let vals = v.iter().map(|x| unsafe { x.assume_init() }).collect();
        out.insert(name, vals);
    }
    Ok(out)
}

#[test]
fn overwritten_outputs_lent_write_only_equal_the_evaluator() {
    if !have_cc() {
        return;
    }
    let names: Vec<&str> = sparsetir_ops::catalog()
        .iter()
        .map(|k| k.name)
        .chain(sparsetir_ops::aggregations().iter().map(|k| k.name))
        .collect();
    let mut overwriting = Vec::new();
    let mut compared = 0;
    for name in names {
        let f = sparsetir_ops::load(name).expect("kernel");
        let schedule = sparsetir_ops::cpu_schedule(name);
        let k = build(&f, schedule, &[], &opts(CACHE)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let over = k.overwritten_params().to_vec();
        if over.is_empty() {
            continue;
        }
        overwriting.push(name);
        for shape in shapes() {
            let Ok(case) = random_args(name, &shape, 1) else {
                continue;
            };
            let mut want = case.args.clone();
            if eval_func(&f, &mut want).is_err() {
                continue;
            }
            let mut args = case.args.clone();
            let got = launch_write_only(&k, &mut args, &over)
                .unwrap_or_else(|e| panic!("{name}: refused: {e}"));
            assert!(!got.is_empty(), "{name}: no float output lent write-only");
            for (out, vals) in &got {
                let Some(ArgValue::Array(w)) = want.get(out) else {
                    panic!("{name}: no reference for `{out}`");
                };
                let w = w.to_f64_vec();
                assert_eq!(vals.len(), w.len());
                for (i, (g, r)) in vals.iter().zip(&w).enumerate() {
                    let ok = (g - r).abs() <= 1e-5 * (1.0 + r.abs()) || (g.is_nan() && r.is_nan());
                    assert!(ok, "{name} `{out}`[{i}] = {g}, the evaluator gives {r}");
                }
            }
            compared += 1;
        }
    }
    assert!(compared > 0);
    for must in ["csrmm", "csrmm_max", "csrmm_min"] {
        assert!(
            overwriting.contains(&must),
            "{must} does not overwrite its output (overwriting: {overwriting:?})"
        );
    }
}

#[test]
fn a_write_only_array_is_refused_where_the_kernel_reads_or_keeps_elements() {
    if !have_cc() {
        return;
    }
    // SpMV without a schedule starts `y` in a nest of its own, then adds to it in memory: `y`
    // is read, so it is not overwritten, and a write-only `y` is refused.
    let name = "spmv";
    let f = sparsetir_ops::load(name).expect("kernel");
    let k = build(&f, None, &[], &opts(CACHE)).expect("builds");
    let shape = common::catalog_shape(Pattern::Random { empty_rows: true });
    let case = random_args(name, &shape, 0).expect("data");
    let outputs: Vec<String> = case
        .outputs
        .iter()
        .filter(|o| !k.overwritten_params().contains(o))
        .cloned()
        .collect();
    assert!(!outputs.is_empty(), "spmv without a schedule overwrites y");
    let mut args = case.args.clone();
    let e = launch_write_only(&k, &mut args, &outputs).unwrap_err();
    assert!(
        matches!(&e, RunError::ArgKind { name, found, .. }
            if *name == outputs[0] && found.contains("write-only")),
        "{e}"
    );
}
