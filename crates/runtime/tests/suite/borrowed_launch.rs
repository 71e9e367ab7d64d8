//! `Kernel::launch` on borrowed slices: the catalog's SDDMM, sparse softmax and SpMM under
//! their default CPU schedules, chained the way attention chains them (each output lent as the
//! next kernel's input), equal the stage-I evaluator on the same data; the refused cases
//! (an output lent read-only, a column out of range, an unsorted row) leave every output
//! untouched. And the README's Rust example is the doc test of `Kernel::launch`.

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sparsetir_eval::{eval_func, ArgValue};
use sparsetir_formats::Tensor;
use sparsetir_runtime::build::build;
use sparsetir_runtime::{Kernel, LaunchArgs, RunError};

use crate::common;
use common::{have_cc, opts};

fn kernel(name: &str) -> Kernel {
    let f = sparsetir_ops::load(name).expect("catalog kernel");
    let sched = sparsetir_ops::cpu_schedule(name);
    build(&f, sched, &[], &opts("borrowed-launch")).expect("builds")
}

/// The evaluator's output `out` of catalog kernel `name` on owned copies of `args`.
fn reference(name: &str, args: &LaunchArgs<'_>, out: &str) -> Vec<f64> {
    let f = sparsetir_ops::load(name).expect("catalog kernel");
    let mut owned: HashMap<String, ArgValue> = HashMap::new();
    for (k, v) in args.iter() {
        let value = match v {
            sparsetir_runtime::LaunchArg::Int(i) => ArgValue::Int(*i),
            sparsetir_runtime::LaunchArg::Float(x) => ArgValue::Float(*x),
            sparsetir_runtime::LaunchArg::Array(a) => {
                let t = if let Some(s) = a.as_slice::<i32>() {
                    let v: Vec<i64> = s.iter().map(|&x| x.into()).collect();
                    Tensor::from_i64(a.dtype(), &v)
                } else {
                    let v: Vec<f64> = (0..a.len()).map(|i| a.get_f64(i)).collect();
                    Tensor::from_f64(a.dtype(), &v)
                };
                ArgValue::Array(t.expect("tensor"))
            }
        };
        owned.insert(k.to_string(), value);
    }
    eval_func(&f, &mut owned).expect("evaluates");
    match &owned[out] {
        ArgValue::Array(t) => t.to_f64_vec(),
        _ => panic!("no output {out}"),
    }
}

fn assert_close(what: &str, got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let g = *g as f64;
        assert!(
            (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
            "{what}[{i}]: {g} vs {w}"
        );
    }
}

#[test]
fn attention_chained_on_borrowed_slices_equals_the_evaluator() {
    if !have_cc() {
        return;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(40);
    let (m, n, d) = (37usize, 45usize, 24usize);
    let (indptr, indices) = common::csr_pattern(&mut rng, m, n);
    let nnz = indices.len();
    let q: Vec<f32> = (0..m * d).map(|_| rng.random_range(-1.0..1.0)).collect();
    let k: Vec<f32> = (0..n * d).map(|_| rng.random_range(-1.0..1.0)).collect();
    let v: Vec<f32> = (0..n * d).map(|_| rng.random_range(-1.0..1.0)).collect();
    let scale = vec![0.2f32; nnz];
    let (sddmm, softmax, spmm) = (kernel("sddmm"), kernel("sparse_softmax"), kernel("csrmm"));
    let sizes = |a: &mut LaunchArgs<'_>| {
        a.int("m", m as i64)
            .int("n", n as i64)
            .int("nnz", nnz as i64);
    };

    // Each launch's reference is the evaluator on copies of the same arguments, taken first.
    let mut scores = vec![f32::NAN; nnz];
    let mut args = LaunchArgs::new();
    sizes(&mut args);
    args.int("feat_size", d as i64)
        .read("indptr", &indptr)
        .read("indices", &indices)
        .read("x", &scale)
        .read("a", &q)
        .read("b", &k)
        .write("y", &mut scores);
    let want = reference("sddmm", &args, "y");
    sddmm.launch(&args).expect("sddmm");
    drop(args);
    assert_close("scores", &scores, &want);

    let mut probs = vec![f32::NAN; nnz];
    let mut args = LaunchArgs::new();
    sizes(&mut args);
    args.read("indptr", &indptr)
        .read("indices", &indices)
        .read("a", &scores)
        .write("b", &mut probs);
    let want = reference("sparse_softmax", &args, "b");
    softmax.launch(&args).expect("softmax");
    drop(args);
    assert_close("probs", &probs, &want);

    let mut out = vec![f32::NAN; m * d];
    let mut args = LaunchArgs::new();
    sizes(&mut args);
    args.int("feat_size", d as i64)
        .read("indptr", &indptr)
        .read("indices", &indices)
        .read("a", &probs)
        .read("b", &v)
        .write("c", &mut out);
    spmm.launch(&args).expect("spmm");
    drop(args);
    // The attention output against a direct computation in f64 (rows storing nothing give 0).
    for i in 0..m {
        let row = indptr[i] as usize..indptr[i + 1] as usize;
        let s: Vec<f64> = row
            .clone()
            .map(|p| {
                let j = indices[p] as usize;
                0.2 * (0..d)
                    .map(|t| q[i * d + t] as f64 * k[j * d + t] as f64)
                    .sum::<f64>()
            })
            .collect();
        let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let z: f64 = s.iter().map(|x| (x - mx).exp()).sum();
        for t in 0..d {
            let want: f64 = row
                .clone()
                .zip(&s)
                .map(|(p, x)| (x - mx).exp() / z * v[indices[p] as usize * d + t] as f64)
                .sum();
            let got = out[i * d + t] as f64;
            assert!(
                (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                "O[{i},{t}]: {got} vs {want}"
            );
        }
    }

    // Refused launches write nothing.
    let before = probs.clone();
    let mut bad_cols = indices.clone();
    bad_cols[nnz / 2] = n as i32;
    let mut unsorted = indices.clone();
    let r = (0..m)
        .find(|&r| indptr[r + 1] - indptr[r] >= 2)
        .expect("a row of two");
    unsorted.swap(indptr[r] as usize, indptr[r] as usize + 1);
    for (what, cols) in [("column past n", &bad_cols), ("unsorted row", &unsorted)] {
        let mut args = LaunchArgs::new();
        sizes(&mut args);
        args.read("indptr", &indptr)
            .read("indices", cols)
            .read("a", &scores)
            .write("b", &mut probs);
        let e = softmax.launch(&args).expect_err(what);
        assert!(matches!(e, RunError::Indices { .. }), "{what}: {e:?}");
    }
    let mut args = LaunchArgs::new();
    sizes(&mut args);
    args.read("indptr", &indptr)
        .read("indices", &indices)
        .read("a", &scores)
        .read("b", &probs);
    let e = softmax.launch(&args).expect_err("read-only output");
    assert!(
        matches!(&e, RunError::ArgKind { name, .. } if name == "b"),
        "{e:?}"
    );
    drop(args);
    assert_eq!(
        probs.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        before.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    );
}

/// The README's "From Rust" block, line for line, is `Kernel::launch`'s doc test (which runs
/// it), so the example users copy is one that compiles and passes.
#[test]
fn the_readme_rust_example_is_the_launch_doc_test() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).expect("README");
    let block: Vec<&str> = readme
        .split("```rust\n")
        .nth(1)
        .and_then(|s| s.split("```").next())
        .expect("a rust block in the README")
        .lines()
        .collect();
    let native =
        std::fs::read_to_string(format!("{root}/crates/runtime/src/native.rs")).expect("native.rs");
    let doc = native
        .split("    /// [`Kernel::run`] on borrowed arrays")
        .nth(1)
        .expect("launch's docs");
    let test: Vec<&str> = doc
        .split("    /// ```\n")
        .nth(1)
        .expect("a doc test")
        .lines()
        .map(|l| {
            l.trim_start()
                .trim_start_matches("///")
                .trim_start_matches(' ')
        })
        .filter(|l| !l.starts_with("# "))
        .collect();
    assert_eq!(block, test);
}
