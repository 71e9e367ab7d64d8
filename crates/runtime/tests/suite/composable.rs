//! Hyb SpMM end to end through the C backend: csrmm decomposed into column parts × degree
//! buckets, the formats filled by `builders::hyb`, atomic buckets lowered, compiled and run; the
//! result equals the reference evaluator on the original csrmm (random matrices with empty rows,
//! rows longer than the largest bucket, several column parts), with the per-bucket nests run one
//! after the other (fusion is refused, with a typed error). Also: the extracted preprocess kernel
//! fills the bucket values as the builder does. Skipped, with a note, when no C compiler runs.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sparsetir_eval::{eval_func, run_func, ArgValue};
use sparsetir_formats::builders::hyb::hyb;
use sparsetir_ir::{IRModule, Stage};
use sparsetir_ops::composable::hyb_spmm_schedule;
use sparsetir_runtime::composable::{
    atomic_blocks, atomic_blocks_one_launch, build_hyb_spmm, hyb_arguments, HybOptions,
};
use sparsetir_transform::{
    decompose_format, extract_preprocess, hyb_rules, lower, PipelineOptions,
};

use crate::common;
use common::{f32s, f64s, have_cc, i32s, opts, Args};

const CACHE: &str = "composable-cache";

/// A random CSR matrix: `rows × cols`, each row empty with probability 1/4, else with a random
/// number of distinct sorted columns up to `max_deg`.
struct Csr {
    rows: usize,
    cols: usize,
    indptr: Vec<i32>,
    indices: Vec<i32>,
    values: Vec<f32>,
}

fn random_csr(rng: &mut ChaCha8Rng, rows: usize, cols: usize, max_deg: usize) -> Csr {
    let (mut indptr, mut indices, mut values) = (vec![0i32], Vec::new(), Vec::new());
    for _ in 0..rows {
        if !rng.random_bool(0.25) {
            let d = rng.random_range(1..=max_deg.min(cols));
            let mut cs: Vec<i32> = (0..cols as i32).collect();
            for k in 0..d {
                let at = rng.random_range(k..cols);
                cs.swap(k, at);
            }
            let mut row = cs[..d].to_vec();
            row.sort_unstable();
            for c in row {
                indices.push(c);
                values.push(rng.random_range(-1.0f32..1.0));
            }
        }
        indptr.push(indices.len() as i32);
    }
    Csr {
        rows,
        cols,
        indptr,
        indices,
        values,
    }
}

fn csrmm_args(a: &Csr, b: &[f32], k: usize, c_init: f32) -> Args {
    let mut args = Args::new();
    args.insert("a".into(), f32s(vec![a.values.len()], a.values.clone()));
    args.insert("b".into(), f32s(vec![b.len()], b.to_vec()));
    // A non-zero C checks that the kernel initialises its output.
    args.insert("c".into(), f32s(vec![a.rows * k], vec![c_init; a.rows * k]));
    args.insert("indptr".into(), i32s(&a.indptr));
    args.insert("indices".into(), i32s(&a.indices));
    args.insert("m".into(), ArgValue::Int(a.rows as i64));
    args.insert("n".into(), ArgValue::Int(a.cols as i64));
    args.insert("feat_size".into(), ArgValue::Int(k as i64));
    args.insert("nnz".into(), ArgValue::Int(a.indices.len() as i64));
    args
}

/// `(rows, cols, max degree, feat, parts, buckets)`.
type Case = (usize, usize, usize, usize, usize, &'static [usize]);

const CASES: &[Case] = &[
    // Rows up to 12 long, largest bucket 4: split rows; two parts.
    (40, 30, 12, 8, 2, &[1, 2, 4]),
    // One part, split rows only.
    (33, 17, 17, 4, 1, &[1, 2]),
    // Every row fits: no atomic bucket when run bucket by bucket.
    (25, 40, 6, 16, 1, &[1, 2, 4, 8]),
    // Three parts, feature width not a multiple of the vector width.
    (31, 29, 20, 5, 3, &[2, 8]),
    // All rows empty.
    (6, 5, 0, 3, 2, &[1]),
];

#[test]
fn hyb_spmm_through_c_equals_the_evaluator() {
    if !have_cc() {
        return;
    }
    let csrmm = sparsetir_ops::load("csrmm").expect("csrmm");
    let mut rng = ChaCha8Rng::seed_from_u64(61);
    let mut saw_atomic = false;
    for &(m, n, deg, k, parts, buckets) in CASES {
        let a = if deg == 0 {
            Csr {
                rows: m,
                cols: n,
                indptr: vec![0; m + 1],
                indices: Vec::new(),
                values: Vec::new(),
            }
        } else {
            random_csr(&mut rng, m, n, deg)
        };
        let b: Vec<f32> = (0..n * k).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let mut want = csrmm_args(&a, &b, k, 0.0);
        eval_func(&csrmm, &mut want).expect("reference evaluator");
        let want = f64s(&want, "c");
        let h = hyb(m, n, &a.indptr, &a.indices, &a.values, parts, buckets).expect("hyb");
        {
            let fuse = false;
            let what =
                format!("{m}x{n} deg<={deg} k={k} parts={parts} buckets={buckets:?} fuse={fuse}");
            let options = HybOptions {
                parts,
                buckets: buckets.to_vec(),
                fuse,
            };
            let sched = hyb_spmm_schedule(parts, buckets.len());
            let built = build_hyb_spmm(
                &csrmm,
                &h,
                &options,
                Some(&sched),
                &[("feat_size".to_string(), k as i64)],
                &opts(CACHE),
            )
            .unwrap_or_else(|e| panic!("{what}: build: {e}"));
            saw_atomic |= built.atomic.iter().any(|x| *x);
            assert_eq!(built.atomic, atomic_blocks(&h, fuse));
            if built.atomic.iter().any(|x| *x) {
                assert!(built.kernel.source().contains("omp atomic"), "{what}");
            }
            // Twice: the second launch must not accumulate onto the first one's output.
            let mut args = csrmm_args(&a, &b, k, 7.0);
            args.extend(hyb_arguments(&h));
            for _ in 0..2 {
                built
                    .kernel
                    .run(&mut args)
                    .unwrap_or_else(|e| panic!("{what}: run: {e}"));
            }
            let got = f64s(&args, "c");
            assert_eq!(got.len(), want.len());
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
                    "{what}: c[{i}] = {g}, the evaluator gives {w}"
                );
            }
        }
    }
    assert!(saw_atomic, "some case exercises the atomic path");
    // Fusion is refused with an error, not a panic.
    let a = random_csr(&mut rng, 5, 5, 3);
    let h = hyb(5, 5, &a.indptr, &a.indices, &a.values, 1, &[1, 2]).expect("hyb");
    let options = HybOptions {
        parts: 1,
        buckets: vec![1, 2],
        fuse: true,
    };
    assert!(build_hyb_spmm(&csrmm, &h, &options, None, &[], &opts(CACHE)).is_err());
    // A kernel for other parts/buckets than the data's is refused too.
    let options = HybOptions {
        parts: 2,
        buckets: vec![1, 2],
        fuse: false,
    };
    assert!(build_hyb_spmm(&csrmm, &h, &options, None, &[], &opts(CACHE)).is_err());
}

/// A 7 × 9 CSR matrix whose rows store column 0 (with padding in their buckets for buckets
/// 1, 2, 4), with empty rows, and with rows longer than 4 (split in one part). No row stores
/// every column: such a row leaves no absent column to pad with (see `builders::hyb`).
/// 4 × 6, rows 0 and 3 storing every column, row 1 empty.
fn full_row_csr() -> Csr {
    let rows: [&[i32]; 4] = [&[0, 1, 2, 3, 4, 5], &[], &[0, 3], &[0, 1, 2, 3, 4, 5]];
    let (mut indptr, mut indices, mut values) = (vec![0i32], Vec::new(), Vec::new());
    for (i, r) in rows.iter().enumerate() {
        for (k, &c) in r.iter().enumerate() {
            indices.push(c);
            values.push(2.0 + i as f32 - 0.5 * k as f32);
        }
        indptr.push(indices.len() as i32);
    }
    Csr {
        rows: 4,
        cols: 6,
        indptr,
        indices,
        values,
    }
}

fn column_zero_csr() -> Csr {
    let rows: [&[i32]; 7] = [
        &[0],
        &[],
        &[0, 2, 5],
        &[0, 1, 2, 3, 4, 5, 6],
        &[],
        &[0, 3, 4, 5, 8],
        &[1, 7],
    ];
    let (mut indptr, mut indices, mut values) = (vec![0i32], Vec::new(), Vec::new());
    for (i, r) in rows.iter().enumerate() {
        for (k, &c) in r.iter().enumerate() {
            indices.push(c);
            values.push(1.0 + i as f32 + 0.25 * k as f32);
        }
        indptr.push(indices.len() as i32);
    }
    Csr {
        rows: 7,
        cols: 9,
        indptr,
        indices,
        values,
    }
}

/// The extracted hyb preprocess (`new[o, i, j] = A[i, j]`), run at stage I (the reference
/// evaluator) and at stage III (the interpreter), fills every bucket exactly as the builder:
/// stored values in real slots, 0 in padding slots — also where the row stores column 0 (the
/// builder pads with a column the row does not store, so the copy reads 0 there).
#[test]
fn extracted_preprocess_fills_the_buckets_like_the_builder() {
    let csrmm = sparsetir_ops::load("csrmm").expect("csrmm");
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let cases = [
        (random_csr(&mut rng, 30, 24, 10), 2, vec![1usize, 2, 4]),
        (column_zero_csr(), 1, vec![1, 2, 4]),
        (column_zero_csr(), 2, vec![2, 4]),
        // Rows storing every column: no column is free for padding, so the builder cuts them
        // into pieces that fill buckets exactly (6 = 4 + 2; per part of 3 columns, 3 = 2 + 1).
        (full_row_csr(), 1, vec![1, 2, 4, 8]),
        (full_row_csr(), 1, vec![2, 4]),
        (full_row_csr(), 2, vec![1, 2, 4]),
    ];
    let mut padded_column_zero_rows = 0;
    for (a, parts, buckets) in cases {
        let (m, n) = (a.rows, a.cols);
        let h = hyb(m, n, &a.indptr, &a.indices, &a.values, parts, &buckets).expect("hyb");
        let rules = hyb_rules(parts, &buckets).expect("rules");
        let f = decompose_format(
            &IRModule {
                funcs: vec![csrmm.clone()],
            },
            &rules,
            true,
        )
        .expect("decompose")
        .funcs
        .remove(0);
        let pre = extract_preprocess(&f);
        let opts = PipelineOptions {
            check_invalid_binary_search: true,
            ..PipelineOptions::to_stage(Stage::III)
        };
        let pre3 = lower(
            &IRModule {
                funcs: vec![pre.clone()],
            },
            &opts,
        )
        .expect("lowers")
        .funcs
        .remove(0);
        let b = vec![0.0f32; n * 3];
        let mut args = csrmm_args(&a, &b, 3, 0.0);
        args.extend(hyb_arguments(&h));
        // The preprocess writes the values: start from garbage.
        for blk in h.blocks() {
            let s = format!("a_{}_{}", blk.part, blk.bucket);
            let len = blk.num_rows() * blk.width;
            args.insert(s, f32s(vec![len], vec![-9.0; len]));
        }
        let mut stage1 = args.clone();
        eval_func(&pre, &mut stage1).expect("preprocess evaluates");
        run_func(&pre3, &mut args).expect("preprocess runs");
        for blk in h.blocks() {
            let name = format!("a_{}_{}", blk.part, blk.bucket);
            for (what, got) in [
                ("stage I", f64s(&stage1, &name)),
                ("stage III", f64s(&args, &name)),
            ] {
                for (slot, g) in got.iter().enumerate() {
                    let row = blk.row_indices[slot / blk.width] as usize;
                    let col = blk.col_indices[slot];
                    let lo = a.indptr[row] as usize;
                    let hi = a.indptr[row + 1] as usize;
                    // Independently: the CSR value at (row, col), or 0 when absent.
                    let stored = (lo..hi)
                        .find(|&p| a.indices[p] == col)
                        .map_or(0.0, |p| f64::from(a.values[p]));
                    let at = format!("{what}: {name}[{slot}] (row {row}, column {col})");
                    assert_eq!(*g, f64::from(blk.values[slot]), "{at} vs builder");
                    if blk.mask[slot] != 0 {
                        assert_eq!(*g, stored, "{at}");
                    } else {
                        assert_eq!(*g, 0.0, "{at} (padding)");
                        if a.indices[lo..hi].contains(&0) {
                            padded_column_zero_rows += 1;
                        }
                    }
                }
            }
        }
    }
    assert!(
        padded_column_zero_rows > 0,
        "some padded row stores column 0"
    );
}

/// Buckets that share one launch are atomic where another bucket row writes one of their rows:
/// a row storing every column is cut over buckets 2 and 1 (once in each, so per-bucket flags see
/// no split), and a row with entries in two column parts is written by both parts.
#[test]
fn atomic_flags_for_buckets_in_one_launch() {
    // Row 0 stores all 3 columns (pieces of 2 and 1), row 1 one entry, row 2 two.
    let (indptr, indices) = (vec![0, 3, 4, 6], vec![0, 1, 2, 0, 0, 1]);
    let values = vec![1.0f32; 6];
    let h = hyb(3, 3, &indptr, &indices, &values, 1, &[1, 2, 4]).unwrap();
    assert_eq!(atomic_blocks(&h, false), vec![false, false, false]);
    assert_eq!(atomic_blocks_one_launch(&h), vec![true, true, false]);
    // Two parts (columns 0-1 and 2): row 0 is in both, rows 1 and 2 in part 0 only.
    let h = hyb(3, 3, &indptr, &indices, &values, 2, &[1, 2]).unwrap();
    let rows = |p: usize, k: usize| h.get(p, k).unwrap().row_indices.clone();
    assert_eq!((rows(0, 0), rows(0, 1)), (vec![1], vec![0, 2]));
    assert_eq!((rows(1, 0), rows(1, 1)), (vec![0], vec![]));
    assert_eq!(atomic_blocks_one_launch(&h), vec![false, true, true, false]);
}
