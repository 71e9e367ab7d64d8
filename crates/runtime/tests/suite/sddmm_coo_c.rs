//! SDDMM on COO (`composable::coo`: the catalog's sddmm decomposed by the COO rule, output in
//! COO too) built the way `sparsetir bench sddmm --format coo` builds it, compiled to C and run
//! on random matrices, equals a dense computation written here
//! (`Y[i, j] = X[i, j] · Σ_k A[i, k] · B[j, k]` at every nonzero of the dense `X`, row-major)
//! and the reference evaluator on the CSR sddmm and on the COO program itself. Matrices: empty
//! rows, a full row (longer than the 4 elements a jam groups), nnz not a multiple of 4, no
//! stored element at all, 1 × 1, 0 × 0; feature widths that fill whole SIMD vectors and ones
//! that do not. The output starts with garbage (the init must overwrite every element) and
//! every kernel is launched twice (a second launch must not add to the first). The COO rows need
//! not be sorted: the same elements in a shuffled order give the shuffled result. The default
//! schedule jams 4 elements on the parallel element loop (groups of 4 in parallel, the rest
//! serially). Skipped, with a note, when no C compiler runs.

use std::collections::HashMap;

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sparsetir_eval::eval_func;
use sparsetir_formats::Csr;
use sparsetir_ir::PrimFunc;
use sparsetir_ops::composable::SDDMM_COO_SCHEDULE;
use sparsetir_runtime::build::emit;
use sparsetir_runtime::composable::coo::{
    build_coo_sddmm, coo_rows, coo_sddmm_arguments, coo_sddmm_stage1, ROWS_PARAM,
};
use sparsetir_runtime::Kernel;

use crate::common;
use common::{f32s, f64s, have_cc, i32s, int, opts, random_dense, Args};

const CACHE: &str = "sddmm-coo-cache";

fn sddmm() -> PrimFunc {
    sparsetir_ops::load("sddmm").expect("sddmm in the catalog")
}

fn values(rng: &mut ChaCha8Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

/// `X[i, j] · Σ_k A[i, k] · B[j, k]` in f64 at every nonzero of the dense `x`, row-major.
fn dense_sddmm(x: &[f32], a: &[f32], b: &[f32], rows: usize, cols: usize, k: usize) -> Vec<f64> {
    let mut out = Vec::new();
    for i in 0..rows {
        for j in 0..cols {
            let v = x[i * cols + j];
            if v != 0.0 {
                let dot: f64 = (0..k)
                    .map(|f| a[i * k + f] as f64 * b[j * k + f] as f64)
                    .sum();
                out.push(v as f64 * dot);
            }
        }
    }
    out
}

/// The catalog sddmm's arguments for the CSR matrix `x` (`a`: `rows × k`, `b`: `cols × k`),
/// the output filled with `y0`.
fn csr_args(x: &Csr<f32, i32>, a: &[f32], b: &[f32], k: usize, y0: f32) -> Args {
    let (m, n) = x.shape();
    let nnz = x.nnz();
    HashMap::from([
        ("a".to_string(), f32s(vec![m, k], a.to_vec())),
        ("b".to_string(), f32s(vec![n, k], b.to_vec())),
        ("x".to_string(), f32s(vec![nnz], x.values().to_vec())),
        ("y".to_string(), f32s(vec![nnz], vec![y0; nnz])),
        ("indptr".to_string(), i32s(x.indptr())),
        ("indices".to_string(), i32s(x.indices())),
        ("m".to_string(), int(m)),
        ("n".to_string(), int(n)),
        ("nnz".to_string(), int(nnz)),
        ("feat_size".to_string(), int(k)),
    ])
}

/// The COO kernel's arguments: the CSR ones without `indptr`, plus the rows.
fn coo_args(x: &Csr<f32, i32>, a: &[f32], b: &[f32], k: usize, y0: f32) -> Args {
    let mut args = csr_args(x, a, b, k, y0);
    args.remove("indptr");
    args.extend(coo_sddmm_arguments(coo_rows(x.indptr())));
    args
}

/// `got` equals `want` elementwise to 1e-5 relative to `1 + |X| Σ |A B|` of the element.
fn assert_close(got: &[f64], want: &[f64], scale: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: output length");
    for (p, ((g, w), s)) in got.iter().zip(want).zip(scale).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 * s,
            "{what}: y[{p}] = {g}, expected {w}"
        );
    }
}

/// `1 + |X[i, j]| Σ_k |A[i, k] B[j, k]|` per stored element, row-major.
fn error_scale(x: &[f32], a: &[f32], b: &[f32], rows: usize, cols: usize, k: usize) -> Vec<f64> {
    let mut out = Vec::new();
    for i in 0..rows {
        for j in 0..cols {
            let v = x[i * cols + j];
            if v != 0.0 {
                let s: f64 = (0..k)
                    .map(|f| (a[i * k + f] as f64 * b[j * k + f] as f64).abs())
                    .sum();
                out.push(1.0 + v.abs() as f64 * s);
            }
        }
    }
    out
}

fn run_twice(kernel: &Kernel, args: &mut Args, want: &[f64], scale: &[f64], what: &str) {
    for launch in 0..2 {
        kernel
            .run(args)
            .unwrap_or_else(|e| panic!("{what}: launch {launch}: {e}"));
        assert_close(
            &f64s(args, "y"),
            want,
            scale,
            &format!("{what}, launch {launch}"),
        );
    }
}

#[test]
fn coo_sddmm_equals_the_dense_computation_and_the_evaluator() {
    if !have_cc() {
        return;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    let f = sddmm();
    let stage1 = coo_sddmm_stage1(&f).expect("coo stage I");
    // (rows, cols, p, features): row 2 full (longer than 4), row 1 empty; all-empty; 1 × 1;
    // 0 × 0.
    let cases: [(usize, usize, f64, usize); 7] = [
        (13, 9, 0.3, 8),
        (11, 17, 0.2, 5),
        (7, 6, 0.5, 32),
        (9, 12, 0.25, 1),
        (5, 7, 0.0, 8),
        (1, 1, 1.0, 3),
        (0, 0, 0.0, 8),
    ];
    let mut not_multiple_of_4 = 0;
    for (rows, cols, p, k) in cases {
        let mut dense = random_dense(&mut rng, rows, cols, p);
        if rows == 5 {
            dense.iter_mut().for_each(|v| *v = 0.0);
        }
        let x: Csr<f32, i32> = Csr::from_dense(rows, cols, &dense).expect("csr");
        let nnz = x.nnz();
        if !nnz.is_multiple_of(4) {
            not_multiple_of_4 += 1;
        }
        let a = values(&mut rng, rows * k);
        let b = values(&mut rng, cols * k);
        let what = format!("{rows}x{cols}, nnz {nnz}, feat {k}");
        let want = dense_sddmm(&dense, &a, &b, rows, cols, k);
        let scale = error_scale(&dense, &a, &b, rows, cols, k);
        assert_eq!(want.len(), nnz, "{what}");
        // The evaluator on the catalog's CSR sddmm, and on the COO program.
        let mut csr = csr_args(&x, &a, &b, k, 0.0);
        eval_func(&f, &mut csr).unwrap_or_else(|e| panic!("{what}: evaluator (csr): {e}"));
        assert_close(
            &f64s(&csr, "y"),
            &want,
            &scale,
            &format!("{what}, csr evaluator"),
        );
        let mut coo = coo_args(&x, &a, &b, k, 0.0);
        eval_func(&stage1, &mut coo).unwrap_or_else(|e| panic!("{what}: evaluator (coo): {e}"));
        assert_close(
            &f64s(&coo, "y"),
            &want,
            &scale,
            &format!("{what}, coo evaluator"),
        );
        // C, scheduled as the bench does and unscheduled; the output starts with garbage.
        let spec = [("feat_size".to_string(), k as i64)];
        for schedule in [Some(SDDMM_COO_SCHEDULE), None] {
            let what = format!("{what}, schedule {}", schedule.is_some());
            let kernel = build_coo_sddmm(&f, schedule, &spec, &opts(CACHE))
                .unwrap_or_else(|e| panic!("{what}: build: {e}"));
            let mut args = coo_args(&x, &a, &b, k, 7.0);
            run_twice(&kernel, &mut args, &want, &scale, &what);
        }
    }
    assert!(
        not_multiple_of_4 >= 2,
        "cases with nnz % 4 != 0: {not_multiple_of_4}"
    );
}

#[test]
fn unsorted_rows_give_the_shuffled_result() {
    if !have_cc() {
        return;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(22);
    let (rows, cols, k) = (10, 8, 16);
    let dense = random_dense(&mut rng, rows, cols, 0.4);
    let x: Csr<f32, i32> = Csr::from_dense(rows, cols, &dense).expect("csr");
    let a = values(&mut rng, rows * k);
    let b = values(&mut rng, cols * k);
    let want = dense_sddmm(&dense, &a, &b, rows, cols, k);
    let scale = error_scale(&dense, &a, &b, rows, cols, k);
    let mut order: Vec<usize> = (0..x.nnz()).collect();
    order.shuffle(&mut rng);
    assert_ne!(order, (0..x.nnz()).collect::<Vec<_>>());
    let rows_of = coo_rows(x.indptr());
    let pick_i = |v: &[i32]| order.iter().map(|&p| v[p]).collect::<Vec<_>>();
    let mut args = coo_args(&x, &a, &b, k, -3.0);
    args.insert(ROWS_PARAM.into(), i32s(&pick_i(&rows_of)));
    args.insert("indices".into(), i32s(&pick_i(x.indices())));
    let xs: Vec<f32> = order.iter().map(|&p| x.values()[p]).collect();
    args.insert("x".into(), f32s(vec![xs.len()], xs));
    let want: Vec<f64> = order.iter().map(|&p| want[p]).collect();
    let scale: Vec<f64> = order.iter().map(|&p| scale[p]).collect();
    let spec = [("feat_size".to_string(), k as i64)];
    let kernel =
        build_coo_sddmm(&sddmm(), Some(SDDMM_COO_SCHEDULE), &spec, &opts(CACHE)).expect("build");
    run_twice(&kernel, &mut args, &want, &scale, "shuffled");
}

#[test]
fn the_kernel_is_one_parallel_loop_over_the_elements() {
    // No compiler needed: the C source of the default schedule.
    let stage1 = coo_sddmm_stage1(&sddmm()).expect("coo stage I");
    let params: Vec<&str> = stage1
        .params
        .iter()
        .map(|p| stage1.vars[*p].name.as_str())
        .collect();
    // sddmm's parameters without `indptr`, plus the rows.
    assert_eq!(
        params,
        [
            "a",
            "b",
            "x",
            "y",
            "indices",
            "m",
            "n",
            "feat_size",
            "nnz",
            ROWS_PARAM
        ]
    );
    let spec = [("feat_size".to_string(), 32)];
    let c = emit(&stage1, Some(SDDMM_COO_SCHEDULE), &spec).expect("emit");
    let src = &c.source;
    assert_eq!(src.matches("#pragma omp parallel for").count(), 1, "{src}");
    assert!(
        src.contains("#pragma omp parallel for schedule(static)"),
        "{src}"
    );
    assert!(src.contains("__builtin_prefetch(&B_data"), "{src}");
    assert!(src.contains("SIMD reduction"), "{src}");
    // Jammed by 4: the threads share groups of four elements, the last `nnz % 4` run serially
    // after them, and four elements' accumulators run in one lane loop.
    assert!(
        src.contains("o_coo_i_coo_j_coo_fused_groups = nnz > 0 ? ((int64_t)nnz - (int64_t)0) / 4"),
        "{src}"
    );
    assert!(
        src.contains(
            "(int32_t)(0 + o_coo_i_coo_j_coo_fused_groups * 4); o_coo_i_coo_j_coo_fused < nnz;"
        ),
        "{src}"
    );
    assert!(src.contains("o_coo_i_coo_j_coo_fused + 3"), "{src}");
}
