//! BSR and ELL(+CSR) SpMM built the way `sparsetir bench spmm --format bsr:B|ell` builds them,
//! compiled to C and run on random matrices, equal a dense f64 computation `C = dense(A) · B`
//! (the dense matrix written from the triplets, not from a sparse format): bsrmm with
//! `schedules/bsr_spmm.sched` on `formats::Bsr` (shapes not multiples of the block, so rows and
//! columns are zero-padded; the output's padded rows stay zero), the catalog's ellmm (blk = 1)
//! on an ELL with no remainder, and csrmm decomposed into ELL + DCSR
//! (`composable::build_ell_csr_spmm`) on matrices with empty rows and rows longer than the
//! width. Every kernel is launched twice on the same arguments (a second launch must not add
//! to the first). Skipped, with a note, when no C compiler runs.

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sparsetir_eval::ArgValue;
use sparsetir_formats::builders::ell_csr::ell_csr;
use sparsetir_formats::{Bsr, BsrPadding, Csr};
use sparsetir_ir::PrimFunc;
use sparsetir_ops::composable::{ell_csr_spmm_schedule, BSR_SPMM_SCHEDULE};
use sparsetir_runtime::build::{emit, schedule_and_lower};
use sparsetir_runtime::composable::{build_ell_csr_spmm, ell_csr_arguments};
use sparsetir_runtime::Kernel;

use crate::common;
use common::{f32s, have_cc, i32s, int, opts, random_dense, Args};

const CACHE: &str = "spmm-formats-cache";

/// `dense(A) · B` in f64 (`rows × feat`).
fn dense_product(a: &[f32], b: &[f32], rows: usize, cols: usize, feat: usize) -> Vec<f64> {
    let mut out = vec![0.0f64; rows * feat];
    for i in 0..rows {
        for j in 0..cols {
            let v = a[i * cols + j] as f64;
            for k in 0..feat {
                out[i * feat + k] += v * b[j * feat + k] as f64;
            }
        }
    }
    out
}

fn compile(f: &PrimFunc, schedule: &str, spec: &[(String, i64)], what: &str) -> Kernel {
    let lowered = schedule_and_lower(f, Some(schedule), spec)
        .unwrap_or_else(|e| panic!("{what}: lower: {e}"));
    let c = emit(f, Some(schedule), spec).unwrap_or_else(|e| panic!("{what}: emit: {e}"));
    Kernel::from_source(
        &lowered.stage1,
        &c.source,
        &c.entry,
        sparsetir_runtime::build::kernel_params(&c),
        &opts(CACHE),
    )
    .unwrap_or_else(|e| panic!("{what}: compile: {e}"))
}

/// Launches `k` twice and checks the first `want.len()` values of `c` after each launch; the
/// values past them (padding rows) must be zero.
fn check_twice(k: &Kernel, args: &mut Args, want: &[f64], what: &str) {
    for launch in 0..2 {
        k.run(args)
            .unwrap_or_else(|e| panic!("{what}: launch {launch}: {e}"));
        let Some(ArgValue::Array(c)) = args.get("c") else {
            panic!("{what}: no output");
        };
        assert!(c.len() >= want.len(), "{what}: output too short");
        for i in 0..c.len() {
            let got = c.get_f64(i);
            let w = want.get(i).copied().unwrap_or(0.0);
            assert!(
                (got - w).abs() <= 1e-5 * w.abs().max(1.0),
                "{what}, launch {launch}: c[{i}] = {got}, the dense product gives {w}"
            );
        }
    }
}

#[test]
fn bsr_spmm_equals_the_dense_product() {
    if !have_cc() {
        return;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let bsrmm = sparsetir_ops::load("bsrmm").expect("bsrmm");
    // (rows, cols, block, feat): padded rows and columns, a block wider than a feature vector,
    // the 1 × 1 block; row 1 is empty (with block 1, an empty block row).
    for (rows, cols, block, feat) in [(13, 10, 4, 8), (9, 7, 3, 5), (6, 6, 2, 16), (5, 4, 1, 3)] {
        let what = format!("bsr {rows}x{cols} block {block} feat {feat}");
        let dense = random_dense(&mut rng, rows, cols, 0.3);
        let csr: Csr<f32, i32> = Csr::from_dense(rows, cols, &dense).expect("csr");
        let bsr: Bsr<f32, i32> =
            Bsr::from_csr(&csr, (block, block), BsrPadding::Allow).expect("bsr");
        let (nb, mb) = bsr.block_shape();
        let b: Vec<f32> = (0..cols * feat)
            .map(|_| rng.random_range(-1.0f32..1.0))
            .collect();
        let mut padded_b = b.clone();
        padded_b.resize(mb * block * feat, 0.0);
        let spec = [
            ("feat_size".to_string(), feat as i64),
            ("blk".to_string(), block as i64),
        ];
        let k = compile(&bsrmm, BSR_SPMM_SCHEDULE, &spec, &what);
        let mut args: Args = HashMap::from([
            ("indptr".to_string(), i32s(bsr.indptr())),
            ("indices".to_string(), i32s(bsr.indices())),
            (
                "a".to_string(),
                f32s(vec![bsr.nnz_blocks(), block, block], bsr.values().to_vec()),
            ),
            ("b".to_string(), f32s(vec![mb, block, feat], padded_b)),
            (
                "c".to_string(),
                f32s(vec![nb, block, feat], vec![0.0; nb * block * feat]),
            ),
            ("nb".to_string(), int(nb)),
            ("mb".to_string(), int(mb)),
            ("nnzb".to_string(), int(bsr.nnz_blocks())),
            ("blk".to_string(), int(block)),
            ("feat_size".to_string(), int(feat)),
        ]);
        let want = dense_product(&dense, &b, rows, cols, feat);
        check_twice(&k, &mut args, &want, &what);
    }
}

#[test]
fn ell_and_ell_csr_spmm_equal_the_dense_product() {
    if !have_cc() {
        return;
    }
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let ellmm = sparsetir_ops::load("ellmm").expect("ellmm");
    let csrmm = sparsetir_ops::load("csrmm").expect("csrmm");
    let ell_schedule = sparsetir_ops::cpu_schedule("ellmm").expect("ellmm schedule");
    // (rows, cols, width, feat): row 2 (full) is longer than every width below `cols`, so those
    // have a remainder; width = cols has none (plain ELL through ellmm).
    for (rows, cols, width, feat) in [(11, 9, 3, 8), (7, 12, 1, 5), (6, 5, 5, 4), (9, 6, 6, 7)] {
        let dense = random_dense(&mut rng, rows, cols, 0.35);
        let csr: Csr<f32, i32> = Csr::from_dense(rows, cols, &dense).expect("csr");
        let (indptr, indices, values) = csr.clone().into_parts();
        let e = ell_csr(rows, cols, &indptr, &indices, &values, width).expect("ell+csr");
        let rest = e.rest_nnz() > 0;
        assert_eq!(rest, width < cols, "row 2 is full");
        let what = format!("ell {rows}x{cols} width {width} feat {feat} (rest: {rest})");
        let b: Vec<f32> = (0..cols * feat)
            .map(|_| rng.random_range(-1.0f32..1.0))
            .collect();
        let spec = vec![("feat_size".to_string(), feat as i64)];
        let want = dense_product(&dense, &b, rows, cols, feat);
        let (k, mut args) = if rest {
            let schedule = ell_csr_spmm_schedule(width, true);
            let k = build_ell_csr_spmm(&csrmm, width, true, Some(&schedule), &spec, &opts(CACHE))
                .unwrap_or_else(|err| panic!("{what}: build: {err}"));
            let mut args = ell_csr_arguments(&e, true);
            args.insert("indptr".into(), i32s(&indptr));
            args.insert("indices".into(), i32s(&indices));
            args.insert("a".into(), f32s(vec![values.len()], values.clone()));
            args.insert("m".into(), int(rows));
            args.insert("n".into(), int(cols));
            args.insert("nnz".into(), int(values.len()));
            args.insert("feat_size".into(), int(feat));
            (k, args)
        } else {
            let mut spec = spec;
            spec.push(("blk".to_string(), 1));
            spec.push(("nnz_cols".to_string(), width as i64));
            let k = compile(&ellmm, ell_schedule, &spec, &what);
            let args: Args = HashMap::from([
                ("indices".to_string(), i32s(&e.ell_indices)),
                (
                    "a".to_string(),
                    f32s(vec![rows, width, 1, 1], e.ell_values.clone()),
                ),
                ("nb".to_string(), int(rows)),
                ("mb".to_string(), int(cols)),
                ("nnz_cols".to_string(), int(width)),
                ("blk".to_string(), int(1)),
                ("feat_size".to_string(), int(feat)),
            ]);
            (k, args)
        };
        args.insert("b".into(), f32s(vec![cols, feat], b.clone()));
        args.insert("c".into(), f32s(vec![rows, feat], vec![0.0; rows * feat]));
        check_twice(&k, &mut args, &want, &what);
    }
}
