//! Differential tests of `lower_sparse_buffer`: for every catalog kernel, on random data with
//! empty rows, a single row, rows holding every column, no stored element, no rows and 1×1, the
//! stage-III interpreter on the lowered function gives exactly the arrays of the stage-II
//! interpreter, and (within rounding) those of the stage-I reference evaluator.
//!
//! The data comes from the catalog's generators (`sparsetir_ops::data`).

use std::collections::HashMap;

use sparsetir_eval::{eval_func, run_func, ArgValue};
use sparsetir_formats::Tensor;
use sparsetir_ops::data::{random_args, Init, Pattern, Shape};
use sparsetir_transform::{lower_sparse_buffer, lower_sparse_iter, LowerOptions};

type Args = HashMap<String, ArgValue>;

/// The structural edge cases, with outputs starting at random values (so init is exercised).
fn cases() -> Vec<(&'static str, Shape)> {
    let random = Pattern::Random { empty_rows: true };
    vec![
        ("random 7x9", Shape::new(random, 7, 9).with_density(0.4)),
        ("random 6x3", Shape::new(random, 6, 3).with_density(0.6)),
        ("single row", Shape::new(Pattern::SingleRow, 1, 5)),
        ("full rows", Shape::new(Pattern::FullRows, 3, 4)),
        ("nnz 0", Shape::new(Pattern::Empty, 4, 5)),
        ("empty leaves", Shape::new(Pattern::EmptyLeaves, 3, 3)),
        ("0 rows", Shape::new(Pattern::Empty, 0, 3)),
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

fn arrays(args: &Args) -> Vec<(&String, &Tensor)> {
    let mut v: Vec<_> = args
        .iter()
        .filter_map(|(k, a)| match a {
            ArgValue::Array(t) => Some((k, t)),
            _ => None,
        })
        .collect();
    v.sort_by_key(|(k, _)| k.as_str());
    v
}

fn check(kernel: &str, checked: bool, seed: u64) {
    let f = sparsetir_ops::load(kernel).expect("kernel parses");
    let opts = LowerOptions {
        check_invalid_binary_search: checked,
        assembly: None,
    };
    let ii = lower_sparse_iter(&f, &opts).expect("lowers to stage II");
    let iii = lower_sparse_buffer(&ii).expect("lowers to stage III");
    for (s, (case, shape)) in cases().into_iter().enumerate() {
        let args = random_args(kernel, &shape, seed + s as u64)
            .unwrap_or_else(|e| panic!("{kernel} {case}: data: {e}"))
            .args;
        let mut want = args.clone();
        eval_func(&f, &mut want).unwrap_or_else(|e| panic!("{kernel} {case}: stage I: {e}"));
        let mut two = args.clone();
        run_func(&ii, &mut two).unwrap_or_else(|e| panic!("{kernel} {case}: stage II: {e}"));
        let mut three = args.clone();
        run_func(&iii, &mut three).unwrap_or_else(|e| panic!("{kernel} {case}: stage III: {e}"));
        for ((name, w), ((_, t2), (_, t3))) in arrays(&want)
            .into_iter()
            .zip(arrays(&two).into_iter().zip(arrays(&three)))
        {
            assert_eq!(
                t2.to_f64_vec(),
                t3.to_f64_vec(),
                "{kernel} ({case}, checked={checked}): `{name}` differs between stage II and III"
            );
            assert!(
                close(w, t3),
                "{kernel} ({case}, checked={checked}): `{name}` differs\nstage I  : {:?}\nstage III: {:?}",
                w.to_f64_vec(),
                t3.to_f64_vec()
            );
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
fn searching_kernels_agree_when_checked() {
    check("csrmm_dense_iter", true, 11);
    check("csr2bsr", true, 12);
}

#[test]
fn block_and_fixed_formats_agree() {
    check("bsrmm", false, 13);
    check("ellmm", false, 14);
    check("spmm_24", false, 15);
}

#[test]
fn multi_level_formats_agree() {
    check("csf_square_sum", false, 16);
    check("rgcn_hetero", false, 17);
    check("ragged_bmm", false, 18);
    check("hyper_gnn", false, 19);
}
