//! `sparsetir_runtime::composable::data` (the arrays of a function decomposed by the catalog's
//! rules, built from its bound CSR data, as `sparsetir run --decompose` binds them): csrmm
//! decomposed into hyb, BSR, ELL(+CSR) and COO, and sddmm into COO, on a matrix whose rows store
//! column 0, with empty rows and rows longer than the largest bucket; run by the reference
//! evaluator, the stage-III interpreter and (with a C compiler) natively, every result checked
//! against a dense computation written here. Also the errors for data that cannot be stored.

use crate::common;

use sparsetir_eval::{eval_func, run_func};
use sparsetir_ir::{IRModule, PrimFunc, Stage};
use sparsetir_runtime::composable::coo::coo_rule_for;
use sparsetir_runtime::composable::data::{hyb_kinds, recognize, Decomposition, RuleKind};
use sparsetir_transform::format_rule::scripts;
use sparsetir_transform::{
    bsr_rule, decompose_format, ell_csr_rules, hyb_rules, lower, remove_preprocess,
    FormatRewriteRule, PipelineOptions,
};

use common::{f32s, f64s, have_cc, i32s, int, opts, Args};

/// An 8 × 8 matrix, row-major dense: rows storing column 0, empty rows 1 and 4, row 3 storing
/// every column (longer than the largest bucket 4 below) and row 6 with 5.
fn dense_a() -> Vec<f32> {
    let rows: [&[usize]; 8] = [
        &[0],
        &[],
        &[0, 2, 5],
        &[0, 1, 2, 3, 4, 5, 6, 7],
        &[],
        &[0, 3],
        &[0, 1, 4, 5, 7],
        &[6, 7],
    ];
    let mut a = vec![0.0f32; 64];
    for (i, r) in rows.iter().enumerate() {
        for (k, &j) in r.iter().enumerate() {
            a[i * 8 + j] = 1.0 + i as f32 * 0.5 - k as f32 * 0.75;
        }
    }
    a
}

/// The CSR arrays of a dense row-major `m × n` matrix (its nonzeros).
fn csr_of(a: &[f32], m: usize, n: usize) -> (Vec<i32>, Vec<i32>, Vec<f32>) {
    let (mut indptr, mut indices, mut values) = (vec![0], Vec::new(), Vec::new());
    for i in 0..m {
        for j in 0..n {
            if a[i * n + j] != 0.0 {
                indices.push(j as i32);
                values.push(a[i * n + j]);
            }
        }
        indptr.push(indices.len() as i32);
    }
    (indptr, indices, values)
}

fn dense_b(rows: usize, k: usize, seed: usize) -> Vec<f32> {
    (0..rows * k)
        .map(|x| ((x * 7 + seed) % 13) as f32 * 0.25 - 1.5)
        .collect()
}

fn decomposed(f: &PrimFunc, rules: &[FormatRewriteRule]) -> PrimFunc {
    let g = decompose_format(
        &IRModule {
            funcs: vec![f.clone()],
        },
        rules,
        true,
    )
    .expect("decompose")
    .funcs
    .remove(0);
    remove_preprocess(&g)
}

/// Runs `g` on `args` with `backend` (eval, interp or c).
fn run(g: &PrimFunc, args: &mut Args, backend: &str, what: &str) {
    match backend {
        "eval" => eval_func(g, args).unwrap_or_else(|e| panic!("{what}: {}", e.message)),
        "interp" => {
            let opts = PipelineOptions {
                check_invalid_binary_search: true,
                ..PipelineOptions::to_stage(Stage::III)
            };
            let g3 = lower(
                &IRModule {
                    funcs: vec![g.clone()],
                },
                &opts,
            )
            .expect("lowers")
            .funcs
            .remove(0);
            run_func(&g3, args).unwrap_or_else(|e| panic!("{what}: {}", e.message));
        }
        _ => {
            let k = sparsetir_runtime::build(g, None, &[], &opts("decomposed_data"))
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            k.run(args).unwrap_or_else(|e| panic!("{what}: {e}"));
        }
    }
}

fn backends() -> Vec<&'static str> {
    let mut out = vec!["eval", "interp"];
    if have_cc() {
        out.push("c");
    }
    out
}

fn assert_close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-4 * w.abs().max(1.0),
            "{what}[{i}]: {g}, want {w}"
        );
    }
}

/// The decomposition of `rules` with their kinds.
fn decomposition(rules: &[FormatRewriteRule], kinds: Vec<RuleKind>) -> Decomposition {
    Decomposition::new(
        &rules
            .iter()
            .cloned()
            .zip(kinds.into_iter().map(Some))
            .collect::<Vec<_>>(),
    )
    .expect("a complete decomposition")
}

/// csrmm's inputs: `A` (`m × n`, CSR), `B` (`n × k`) and the sizes; `C` is left to the caller.
fn csrmm_args(
    (m, n, k): (usize, usize, usize),
    (indptr, indices, values): &(Vec<i32>, Vec<i32>, Vec<f32>),
    b: &[f32],
) -> Args {
    let mut args = Args::new();
    args.insert("a".into(), f32s(vec![values.len()], values.clone()));
    args.insert("indptr".into(), i32s(indptr));
    args.insert("indices".into(), i32s(indices));
    args.insert("b".into(), f32s(vec![n * k], b.to_vec()));
    args.insert("m".into(), int(m));
    args.insert("n".into(), int(n));
    args.insert("nnz".into(), int(values.len()));
    args.insert("feat_size".into(), int(k));
    args
}

/// csrmm decomposed by `rules` (with their kinds), on [`dense_a`], equals the dense product.
fn csrmm_case(rules: Vec<FormatRewriteRule>, kinds: Vec<RuleKind>, name: &str) {
    let csrmm = sparsetir_ops::load("csrmm").expect("csrmm");
    let (m, n, k) = (8, 8, 3);
    let a = dense_a();
    let b = dense_b(n, k, 1);
    let want: Vec<f64> = (0..m * k)
        .map(|x| {
            let (i, kk) = (x / k, x % k);
            (0..n)
                .map(|j| f64::from(a[i * n + j]) * f64::from(b[j * k + kk]))
                .sum()
        })
        .collect();
    let g = decomposed(&csrmm, &rules);
    let d = decomposition(&rules, kinds);
    assert_eq!(d.layout_name(), name);
    let mut args = csrmm_args((m, n, k), &csr_of(&a, m, n), &b);
    let extra = d.arguments(&csrmm, &args).expect("arrays");
    args.extend(extra);
    for backend in backends() {
        let mut run_args = args.clone();
        // Not zeros: every row, empty ones included, must get the init (then the product).
        run_args.insert("c".into(), f32s(vec![m * k], vec![7.0; m * k]));
        let what = format!("{name} on {backend}");
        run(&g, &mut run_args, backend, &what);
        assert_close(&f64s(&run_args, "c"), &want, &what);
    }
}

#[test]
fn csrmm_on_hyb_with_split_rows_and_rows_storing_column_0() {
    for (parts, buckets) in [(1, vec![1usize, 2, 4]), (2, vec![1, 2]), (3, vec![2])] {
        let name = format!(
            "hyb(parts={parts},buckets={})",
            buckets
                .iter()
                .map(|b| b.to_string())
                .collect::<Vec<_>>()
                .join(",")
        );
        csrmm_case(
            hyb_rules(parts, &buckets).expect("rules"),
            hyb_kinds(parts, &buckets),
            &name,
        );
    }
}

#[test]
fn csrmm_on_bsr() {
    for b in [1usize, 2, 4] {
        csrmm_case(
            vec![bsr_rule(b as i64).expect("rule")],
            vec![RuleKind::Bsr(b)],
            &format!("bsr:{b}"),
        );
    }
}

#[test]
fn csrmm_on_ell_and_ell_plus_csr() {
    csrmm_case(
        ell_csr_rules(8, false).expect("rules"),
        vec![RuleKind::Ell(8)],
        "ell(width=8)",
    );
    for w in [1usize, 3] {
        csrmm_case(
            ell_csr_rules(w as i64, true).expect("rules"),
            vec![RuleKind::Ell(w), RuleKind::Dcsr],
            &format!("ell(width={w})+csr"),
        );
    }
}

#[test]
fn csrmm_on_coo() {
    let csrmm = sparsetir_ops::load("csrmm").expect("csrmm");
    csrmm_case(
        vec![coo_rule_for(&csrmm).expect("rule")],
        vec![RuleKind::Coo],
        "coo",
    );
}

#[test]
fn sddmm_on_coo() {
    let sddmm = sparsetir_ops::load("sddmm").expect("sddmm");
    let (m, n, k) = (8, 8, 3);
    let x = dense_a();
    let (indptr, indices, values) = csr_of(&x, m, n);
    let pa = dense_b(m, k, 2);
    let pb = dense_b(n, k, 5);
    // Y[i, j] = X[i, j] * sum_k A[i, k] * B[j, k] at X's stored elements, in CSR order.
    let mut want = Vec::new();
    for i in 0..m {
        for p in indptr[i] as usize..indptr[i + 1] as usize {
            let j = indices[p] as usize;
            let dot: f64 = (0..k)
                .map(|kk| f64::from(pa[i * k + kk]) * f64::from(pb[j * k + kk]))
                .sum();
            want.push(f64::from(values[p]) * dot);
        }
    }
    let rules = vec![coo_rule_for(&sddmm).expect("rule")];
    let g = decomposed(&sddmm, &rules);
    let d = Decomposition::new(&[(rules[0].clone(), Some(RuleKind::Coo))]).expect("coo");
    assert_eq!(d.buffer, "X");
    let mut args = Args::new();
    let nnz = values.len();
    args.insert("x".into(), f32s(vec![nnz], values.clone()));
    args.insert("indptr".into(), i32s(&indptr));
    args.insert("indices".into(), i32s(&indices));
    args.insert("a".into(), f32s(vec![m * k], pa));
    args.insert("b".into(), f32s(vec![n * k], pb));
    args.insert("m".into(), int(m));
    args.insert("n".into(), int(n));
    args.insert("nnz".into(), int(nnz));
    args.insert("feat_size".into(), int(k));
    let extra = d.arguments(&sddmm, &args).expect("arrays");
    args.extend(extra);
    for backend in backends() {
        let mut run_args = args.clone();
        run_args.insert("y".into(), f32s(vec![nnz], vec![7.0; nnz]));
        let what = format!("sddmm coo on {backend}");
        run(&g, &mut run_args, backend, &what);
        assert_close(&f64s(&run_args, "y"), &want, &what);
    }
}

#[test]
fn catalog_rule_scripts_are_recognised_whatever_their_name() {
    let bsr = FormatRewriteRule::from_script_with(scripts::BSR, &[("block_size", 4)]).unwrap();
    assert_eq!(
        recognize(&bsr, &[("block_size", 4)]),
        Some(RuleKind::Bsr(4))
    );
    let renamed = bsr.clone().with_name("mine");
    assert_eq!(
        recognize(&renamed, &[("block_size", 4)]),
        Some(RuleKind::Bsr(4))
    );
    let hyb = FormatRewriteRule::from_script_with(scripts::HYB, &[("nnz_cols", 2)]).unwrap();
    assert_eq!(
        recognize(&hyb, &[("nnz_cols", 2)]),
        Some(RuleKind::HybBucket {
            part: 0,
            bucket: 0,
            width: 2
        })
    );
    // A rule whose maps differ is no catalog rule, and a decomposition refuses it.
    let mut other = bsr.clone();
    other.idx_map = other.inv_idx_map.clone();
    assert_eq!(recognize(&other, &[("block_size", 4)]), None);
    let e = Decomposition::new(&[(other, None)]).unwrap_err();
    assert!(e.0.contains("not one of the catalog's rules"), "{e}");
    // Rules that do not form one format together.
    let e = Decomposition::new(&[
        (bsr.clone(), Some(RuleKind::Bsr(4))),
        (bsr.with_name("x"), Some(RuleKind::Bsr(4))),
    ])
    .unwrap_err();
    assert!(e.0.contains("do not together form one format"), "{e}");
}

#[test]
fn data_that_cannot_be_stored_is_reported() {
    let csrmm = sparsetir_ops::load("csrmm").expect("csrmm");
    let (m, n) = (8, 8);
    let a = dense_a();
    let (indptr, indices, values) = csr_of(&a, m, n);
    let mut args = Args::new();
    args.insert("a".into(), f32s(vec![values.len()], values.clone()));
    args.insert("indptr".into(), i32s(&indptr));
    args.insert("indices".into(), i32s(&indices));
    args.insert("m".into(), int(m));
    args.insert("n".into(), int(n));
    args.insert("nnz".into(), int(values.len()));
    let bsr3 = Decomposition::new(&[(bsr_rule(3).unwrap(), Some(RuleKind::Bsr(3)))]).unwrap();
    let e = bsr3.arguments(&csrmm, &args).unwrap_err();
    assert!(e.0.contains("multiples of the block size 3"), "{e}");
    let ell = ell_csr_rules(3, false).unwrap().remove(0);
    let ell3 = Decomposition::new(&[(ell, Some(RuleKind::Ell(3)))]).unwrap();
    let e = ell3.arguments(&csrmm, &args).unwrap_err();
    assert!(
        e.0.contains("row 3 stores 8 elements, more than the width 3"),
        "{e}"
    );
    let hyb = Decomposition::new(
        &hyb_rules(9, &[1])
            .unwrap()
            .into_iter()
            .zip(hyb_kinds(9, &[1]).into_iter().map(Some))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let e = hyb.arguments(&csrmm, &args).unwrap_err();
    assert!(e.0.contains("cannot store `A`"), "{e}");
}

/// csrmm whose column coordinate also indexes `B`'s feature axis (`B[j, j]`, 3 features over 8
/// columns): the data is valid only where every stored column is below 3, and the decomposed
/// formats' padding must stay below 3 too (it names a column the row does not store, or, where
/// every column below 3 is stored, the row is cut to fill buckets exactly or padded with column
/// 0 at value 0). Before, hyb padded with column 3 and the decomposed run was refused.
#[test]
fn padding_stays_inside_every_dimension_the_column_indexes() {
    let src = sparsetir_ops::get("csrmm")
        .expect("csrmm")
        .source
        .replace("A[i, j] * B[j, k]", "A[i, j] * B[j, j] * B[j, k]");
    let f = sparsetir_syntax::parse_func(&src).expect("parses");
    let (m, n, k) = (6, 8, 3);
    let rows: [&[usize]; 6] = [&[0, 1, 2], &[], &[1], &[0, 2], &[0, 1, 2], &[2]];
    let mut a = vec![0.0f32; m * n];
    for (i, r) in rows.iter().enumerate() {
        for (q, &j) in r.iter().enumerate() {
            a[i * n + j] = 1.5 - i as f32 * 0.25 + q as f32 * 0.5;
        }
    }
    let b = dense_b(n, k, 3);
    let want: Vec<f64> = (0..m * k)
        .map(|x| {
            let (i, kk) = (x / k, x % k);
            (0..k)
                .map(|j| {
                    f64::from(a[i * n + j]) * f64::from(b[j * k + j]) * f64::from(b[j * k + kk])
                })
                .sum()
        })
        .collect();
    let mut args = csrmm_args((m, n, k), &csr_of(&a, m, n), &b);
    args.insert("c".into(), f32s(vec![m * k], vec![0.0; m * k]));
    sparsetir_runtime::validate_args(&f, &args).expect("valid undecomposed");
    let mut cases: Vec<(Vec<FormatRewriteRule>, Vec<RuleKind>)> = Vec::new();
    for (parts, buckets) in [(1, vec![4usize]), (1, vec![1, 2, 4]), (2, vec![1, 2])] {
        cases.push((
            hyb_rules(parts, &buckets).expect("rules"),
            hyb_kinds(parts, &buckets),
        ));
    }
    cases.push((
        ell_csr_rules(2, true).expect("rules"),
        vec![RuleKind::Ell(2), RuleKind::Dcsr],
    ));
    for (rules, kinds) in cases {
        let g = decomposed(&f, &rules);
        let d = decomposition(&rules, kinds);
        let name = d.layout_name();
        let mut full = args.clone();
        full.extend(d.arguments(&f, &args).expect("arrays"));
        sparsetir_runtime::validate_args(&g, &full)
            .unwrap_or_else(|e| panic!("{name}: valid decomposed: {e}"));
        for backend in backends() {
            let mut run_args = full.clone();
            let what = format!("{name} on {backend}");
            run(&g, &mut run_args, backend, &what);
            assert_close(&f64s(&run_args, "c"), &want, &what);
        }
    }
    // ELL of width 4 would pad row 0 (columns 0, 1, 2) with a fourth column below 3: none.
    let rules = ell_csr_rules(4, false).expect("rules");
    let d = Decomposition::new(&[(rules[0].clone(), Some(RuleKind::Ell(4)))]).expect("ell");
    let e = d
        .arguments(&f, &args)
        .expect_err("no padding column below 3");
    assert!(e.to_string().contains("below 3"), "{e}");
}
