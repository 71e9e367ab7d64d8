//! Differential tests: for the catalog kernels over CSR structures (plus BSR), the stage-I
//! reference evaluator and the stage-II interpreter (`sparsetir_eval::run_func`) on the lowered
//! function produce the same arrays, on random data (`sparsetir_ops::data`) with empty rows, a
//! single row, rows holding every column and no stored element.

use std::collections::HashMap;

use sparsetir_eval::{eval_func, run_func, ArgValue};
use sparsetir_formats::Tensor;
use sparsetir_ops::data::{random_args, Init, Pattern, Shape};
use sparsetir_transform::{lower_sparse_iter, LowerOptions};

type Args = HashMap<String, ArgValue>;

/// The structural edge cases; every array (outputs included) starts with random values.
fn cases() -> Vec<(&'static str, Shape)> {
    let random = Pattern::Random { empty_rows: true };
    vec![
        ("random 7x9", Shape::new(random, 7, 9).with_density(0.4)),
        ("random 6x3", Shape::new(random, 6, 3).with_density(0.6)),
        ("single row", Shape::new(Pattern::SingleRow, 1, 5)),
        ("full rows", Shape::new(Pattern::FullRows, 3, 4)),
        ("nnz 0", Shape::new(Pattern::Empty, 4, 5)),
        ("1x1", Shape::new(Pattern::OneByOne, 1, 1)),
    ]
    .into_iter()
    .map(|(n, s)| (n, s.with_init(Init::Random)))
    .collect()
}

fn close(a: &Tensor, b: &Tensor) -> bool {
    let (x, y) = (a.to_f64_vec(), b.to_f64_vec());
    x.len() == y.len()
        && x.iter().zip(&y).all(|(p, q)| {
            (p.is_nan() && q.is_nan()) || (p - q).abs() <= 1e-5 * p.abs().max(q.abs()).max(1.0)
        })
}

fn check(kernel: &str, checked: bool, seed: u64) {
    let f = sparsetir_ops::load(kernel).expect("kernel parses");
    let opts = LowerOptions {
        check_invalid_binary_search: checked,
        assembly: None,
    };
    let low = lower_sparse_iter(&f, &opts).expect("lowers");
    for (s, (case, shape)) in cases().into_iter().enumerate() {
        let args = random_args(kernel, &shape, seed + s as u64)
            .unwrap_or_else(|e| panic!("{kernel} {case}: data: {e}"))
            .args;
        let mut want = args.clone();
        eval_func(&f, &mut want).unwrap_or_else(|e| panic!("{kernel} {case}: eval: {e}"));
        let mut got = args.clone();
        run_func(&low, &mut got).unwrap_or_else(|e| panic!("{kernel} {case}: stage II: {e}"));
        for (name, w) in &want {
            if let (ArgValue::Array(w), Some(ArgValue::Array(g))) = (w, got.get(name)) {
                assert!(
                    close(w, g),
                    "{kernel} ({case}, checked={checked}): `{name}` differs\nstage I : {:?}\nstage II: {:?}",
                    w.to_f64_vec(),
                    g.to_f64_vec()
                );
            }
        }
    }
}

#[test]
fn csr_kernels_agree() {
    for k in [
        "csrmm",
        "csrmm_alias",
        "sddmm",
        "sddmm_alias",
        "fused_sddmm",
        "spmv",
        "sparse_softmax",
        "rgcn_homo",
        "segment_sum",
        "segment_max",
        "segment_min",
        "segment_mean",
    ] {
        for checked in [false, true] {
            check(k, checked, 7);
        }
    }
}

#[test]
fn dense_iteration_search_agrees_when_checked() {
    check("csrmm_dense_iter", true, 11);
}

/// bsrmm's init sits in the outer block (first reduction iterator `bj`): it runs for every
/// block row, also one without stored blocks; the evaluator follows the same rule, so the
/// outputs start with random values here.
#[test]
fn bsrmm_agrees() {
    for checked in [false, true] {
        check("bsrmm", checked, 13);
    }
}

fn array(args: &Args, name: &str) -> Vec<f64> {
    match args.get(name) {
        Some(ArgValue::Array(t)) => t.to_f64_vec(),
        _ => panic!("no array `{name}`"),
    }
}

fn run_both(kernel: &str, args: &Args) -> (Args, Args) {
    let f = sparsetir_ops::load(kernel).expect("kernel parses");
    let low = lower_sparse_iter(&f, &LowerOptions::default()).expect("lowers");
    let mut want = args.clone();
    eval_func(&f, &mut want).unwrap_or_else(|e| panic!("{kernel}: eval: {e}"));
    let mut got = args.clone();
    run_func(&low, &mut got).unwrap_or_else(|e| panic!("{kernel}: stage II: {e}"));
    (want, got)
}

fn assert_close(what: &str, got: &[f64], expected: &[f64]) {
    assert_eq!(got.len(), expected.len(), "{what}");
    for (g, e) in got.iter().zip(expected) {
        assert!(
            (g - e).abs() <= 1e-5 * e.abs().max(1.0),
            "{what}: {got:?} vs {expected:?}"
        );
    }
}

/// The CSR structure of a generated case (`indptr`/`indices` arrays) and a scalar argument.
fn structure(args: &Args) -> (Vec<usize>, Vec<usize>) {
    let v = |n: &str| array(args, n).into_iter().map(|x| x as usize).collect();
    (v("indptr"), v("indices"))
}

fn scalar(args: &Args, name: &str) -> usize {
    match args.get(name) {
        Some(ArgValue::Int(v)) => *v as usize,
        _ => panic!("no scalar `{name}`"),
    }
}

/// Generated data with empty rows (every third row from row 1) and a non-zero initial output.
fn with_empty_rows(kernel: &str, seed: u64) -> Args {
    let shape = Shape::new(Pattern::Random { empty_rows: true }, 4, 4)
        .with_density(0.7)
        .with_feat(3)
        .with_init(Init::Random);
    random_args(kernel, &shape, seed).expect("data").args
}

/// csrmm with a non-zero initial `C`: the init runs for every row, so a row without stored
/// elements is reset to 0 (a sum over nothing) and the others get `A · B`; checked against a
/// dense computation.
#[test]
fn csrmm_non_zero_initial_output() {
    let args = with_empty_rows("csrmm", 41);
    let (a, b, c0) = (array(&args, "a"), array(&args, "b"), array(&args, "c"));
    let (indptr, indices) = structure(&args);
    let (m, k) = (scalar(&args, "m"), scalar(&args, "feat_size"));
    assert!(c0.iter().all(|x| *x != 0.0));
    assert!(
        (0..m).any(|i| indptr[i] == indptr[i + 1]),
        "the case has an empty row"
    );
    assert!(
        (0..m).any(|i| indptr[i] < indptr[i + 1]),
        "the case has a non-empty row"
    );
    let mut expected = c0.clone();
    for i in 0..m {
        let (lo, hi) = (indptr[i], indptr[i + 1]);
        for kk in 0..k {
            expected[i * k + kk] = (lo..hi).map(|p| a[p] * b[indices[p] * k + kk]).sum();
        }
    }
    let (want, got) = run_both("csrmm", &args);
    assert_close("csrmm stage I", &array(&want, "c"), &expected);
    assert_close("csrmm stage II", &array(&got, "c"), &expected);
}

/// bsrmm with a non-zero initial `C`: every block row is reset (also one without blocks)
/// and gets `A · B`; checked against a dense computation.
#[test]
fn bsrmm_non_zero_initial_output() {
    let args = with_empty_rows("bsrmm", 42);
    let (a, b, c0) = (array(&args, "a"), array(&args, "b"), array(&args, "c"));
    let (indptr, indices) = structure(&args);
    let (nb, blk, feat) = (
        scalar(&args, "nb"),
        scalar(&args, "blk"),
        scalar(&args, "feat_size"),
    );
    assert!(c0.iter().all(|x| *x != 0.0));
    assert!(
        (0..nb).any(|i| indptr[i] == indptr[i + 1]),
        "the case has an empty block row"
    );
    let mut expected = vec![0.0; nb * blk * feat];
    for i in 0..nb {
        for p in indptr[i]..indptr[i + 1] {
            let j = indices[p];
            for bi in 0..blk {
                for bj in 0..blk {
                    for ff in 0..feat {
                        expected[(i * blk + bi) * feat + ff] +=
                            a[(p * blk + bi) * blk + bj] * b[(j * blk + bj) * feat + ff];
                    }
                }
            }
        }
    }
    let (want, got) = run_both("bsrmm", &args);
    assert_close("bsrmm stage I", &array(&want, "c"), &expected);
    assert_close("bsrmm stage II", &array(&got, "c"), &expected);
}
