//! Composable formats through the C backend (issue "Composable formats", acceptance 1–2): the
//! RFC's CSR → BSR(4, 16, 32) decomposition of csrmm and the CSR → hyb decomposition, lowered to
//! stage III, compiled to C and run on random matrices, give the reference evaluator's `C` on the
//! original csrmm — in one run with the preprocess iterations filling the new formats from the CSR
//! values, with the preprocess extracted (its own kernel run once, then the compute kernel), and
//! with the builders' values bound directly. Skipped, with a note, when no C compiler runs.
//!
//! Already covered elsewhere, not repeated here: `tests/composable.rs` runs hyb SpMM (builder
//! values, scheduled, atomic buckets for rows longer than the largest bucket) through C against
//! the evaluator, and checks the *interpreted* extracted preprocess; the transform crate's
//! `decompose_format*.rs` tests hold the stage-I programs (RFC BSR equality, hyb snapshot) and the
//! interpreter numerics. What is new here is the C side of the preprocess: the BSR program in C
//! every way, and the hyb extracted preprocess kernel in C feeding the scheduled atomic kernel.
//!
//! # How the three BSR parts share the matrix
//!
//! In the RFC's decomposed program every clone `csrmm_<b>` keeps csrmm's `T.init()`: for an
//! output row whose `b`-row band holds at least one block, the clone first resets `C[row, :]` to
//! zero and then adds its blocks' products. So the parts' contributions add up only where no two
//! parts touch the same row (a later clone would wipe an earlier one's sum), and the preprocess
//! `A_<b>[io, jo, ii, ji] = A[io*b + ii, jo*b + ji]` copies *every* CSR entry inside a stored
//! block. The tests therefore assign whole 32-row bands of the matrix to one block size each:
//! the part of size `b` is the BSR(b) of the entries in its bands, every CSR entry lies in
//! exactly one part's blocks, and no row is touched by two parts; rows in bands without entries
//! are touched by no part and keep the zeroed `C`. The program indexes `A`, `B` and `C` at
//! `io*b + ii` and `jo*b + ji` without bounds guards, so the matrix is padded with zero rows and
//! columns to multiples of 32 (and `B` with zero rows); the padded rows of `C` must stay zero.
//! A further test assigns entries to sizes at random (parts sharing rows) and checks only that C
//! agrees with the stage-I evaluator on the decomposed program itself.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sparsetir_eval::eval_func;
use sparsetir_formats::builders::hyb::{hyb, Hyb};
use sparsetir_formats::{Bsr, BsrPadding, Csr, Duplicates};
use sparsetir_ir::{IRModule, PrimFunc};
use sparsetir_ops::composable::hyb_spmm_schedule;
use sparsetir_runtime::composable::{build_hyb_spmm, hyb_arguments, HybOptions};
use sparsetir_runtime::{compile_c, Kernel};
use sparsetir_transform::{
    bsr_rule, decompose_format, extract_preprocess, hyb_rules, remove_preprocess,
};

use crate::common;
use common::{f32s, f64s, have_cc, i32s, int, opts, Args};

const CACHE: &str = "composable-c-cache";
const SIZES: [usize; 3] = [4, 16, 32];
const BAND: usize = 32;

fn csrmm() -> PrimFunc {
    sparsetir_ops::load("csrmm").expect("csrmm in the catalog")
}

fn compile(f: &PrimFunc, what: &str) -> Kernel {
    compile_c(f, &opts(CACHE)).unwrap_or_else(|e| panic!("{what}: compile: {e}"))
}

fn run(k: &Kernel, args: &mut Args, what: &str) {
    k.run(args).unwrap_or_else(|e| panic!("{what}: run: {e}"));
}

/// A random `rows × cols` matrix as triplets: rows at or past `empty_from` are empty, every other
/// row is empty with probability 1/4 or else holds each column with probability `p`; row
/// `full_row` (if any, below `empty_from`) holds every column.
fn random_triplets(
    rng: &mut ChaCha8Rng,
    (rows, cols): (usize, usize),
    p: f64,
    full_row: Option<usize>,
    empty_from: usize,
) -> Vec<(usize, usize, f32)> {
    let mut t = Vec::new();
    for i in 0..rows.min(empty_from) {
        let full = full_row == Some(i);
        if !full && rng.random_bool(0.25) {
            continue;
        }
        for j in 0..cols {
            if full || rng.random_bool(p) {
                t.push((i, j, rng.random_range(-1.0f32..1.0)));
            }
        }
    }
    t
}

fn csr(rows: usize, cols: usize, t: &[(usize, usize, f32)]) -> Csr<f32, i32> {
    Csr::from_triplets(rows, cols, t.to_vec(), Duplicates::Sum).expect("csr")
}

/// The csrmm arguments for `a` (`b` is `cols × k` row-major), `C` zeroed.
fn csrmm_args(a: &Csr<f32, i32>, b: &[f32], k: usize) -> Args {
    let (m, n) = a.shape();
    let mut args = Args::new();
    args.insert(
        "a".into(),
        f32s(vec![a.values().len()], a.values().to_vec()),
    );
    args.insert("b".into(), f32s(vec![b.len()], b.to_vec()));
    args.insert("c".into(), f32s(vec![m * k], vec![0.0; m * k]));
    args.insert("indptr".into(), i32s(a.indptr()));
    args.insert("indices".into(), i32s(a.indices()));
    args.insert("m".into(), int(m));
    args.insert("n".into(), int(n));
    args.insert("feat_size".into(), int(k));
    args.insert("nnz".into(), int(a.nnz()));
    args
}

/// For each output element, `1 + Σ |a_ij · b_jk|` over the row: the scale of its float error.
fn error_scale(a: &Csr<f32, i32>, b: &[f32], k: usize) -> Vec<f64> {
    let mut s = vec![1.0f64; a.rows() * k];
    for i in 0..a.rows() {
        let (cols, vals) = a.row(i).expect("row");
        for (&j, &v) in cols.iter().zip(vals) {
            for f in 0..k {
                s[i * k + f] += (f64::from(v) * f64::from(b[j as usize * k + f])).abs();
            }
        }
    }
    s
}

/// `got[..want.len()]` equals `want` to 1e-5 relative to `scale`; the rest of `got` (padding
/// rows) is exactly zero.
fn assert_close(got: &[f64], want: &[f64], scale: &[f64], what: &str) {
    assert!(got.len() >= want.len(), "{what}: C too short");
    for (i, ((g, w), s)) in got.iter().zip(want).zip(scale).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 * s,
            "{what}: c[{i}] = {g}, the evaluator gives {w}"
        );
    }
    if let Some(i) = got[want.len()..].iter().position(|x| *x != 0.0) {
        panic!(
            "{what}: padding c[{}] = {}",
            want.len() + i,
            got[want.len() + i]
        );
    }
}

/// The reference: the evaluator on the original csrmm over the unpadded matrix.
fn reference(a: &Csr<f32, i32>, b: &[f32], k: usize) -> Vec<f64> {
    let mut args = csrmm_args(a, b, k);
    eval_func(&csrmm(), &mut args).expect("reference evaluator");
    f64s(&args, "c")
}

fn bsr_decomposed() -> PrimFunc {
    let rules: Vec<_> = SIZES
        .iter()
        .map(|&b| bsr_rule(b as i64).expect("bsr rule"))
        .collect();
    decompose_format(
        &IRModule {
            funcs: vec![csrmm()],
        },
        &rules,
        true,
    )
    .expect("decompose")
    .funcs
    .remove(0)
}

/// The three kernels of the decomposed BSR program: whole, preprocess only, compute only.
struct BsrKernels {
    whole: Kernel,
    pre: Kernel,
    compute: Kernel,
    /// The decomposed stage-I program (for the evaluator).
    stage1: PrimFunc,
}

fn bsr_kernels() -> BsrKernels {
    let f = bsr_decomposed();
    BsrKernels {
        whole: compile(&f, "bsr whole"),
        pre: compile(&extract_preprocess(&f), "bsr preprocess"),
        compute: compile(&remove_preprocess(&f), "bsr compute"),
        stage1: f,
    }
}

/// Adds the arguments of the BSR part of size `bs` holding `part` (padded shape, multiples of
/// 32): structure and sizes from `Bsr::from_csr`, values the BSR's (`builder`) or garbage for
/// the preprocess to overwrite. Returns the BSR.
fn add_bsr_part(args: &mut Args, part: &Csr<f32, i32>, bs: usize, builder: bool) -> Bsr<f32, i32> {
    let (m, n) = part.shape();
    let bsr = Bsr::from_csr(part, (bs, bs), BsrPadding::Deny).expect("bsr");
    let values = if builder {
        bsr.values().to_vec()
    } else {
        vec![-9.0; bsr.values().len()]
    };
    args.insert(format!("a_{bs}"), f32s(vec![values.len()], values));
    args.insert(format!("indptr_{bs}"), i32s(bsr.indptr()));
    args.insert(format!("indices_{bs}"), i32s(bsr.indices()));
    args.insert(format!("m_{bs}"), int(m / bs));
    args.insert(format!("n_{bs}"), int(n / bs));
    args.insert(format!("nnz_{bs}"), int(bsr.nnz_blocks()));
    bsr
}

/// One BSR case: `(rows, cols, k, density, full row, first always-empty row)`.
type BsrCase = (usize, usize, usize, f64, Option<usize>, usize);

#[test]
fn bsr_4_16_32_through_c_equals_the_evaluator() {
    if !have_cc() {
        return;
    }
    let kernels = bsr_kernels();
    // Not multiples of 32 (padded); band 1 of the second case empty; one full row per case but
    // the third.
    let cases: [BsrCase; 4] = [
        (70, 45, 3, 0.15, Some(5), usize::MAX),
        (90, 33, 8, 0.1, Some(70), 32),
        (40, 100, 1, 0.05, None, usize::MAX),
        (17, 20, 5, 0.4, Some(16), usize::MAX),
    ];
    let mut used = [false; 3];
    for (seed, &(m, n, k, p, full, empty_from)) in cases.iter().enumerate() {
        let mut rng = ChaCha8Rng::seed_from_u64(100 + seed as u64);
        let t = random_triplets(&mut rng, (m, n), p, full, empty_from);
        let b: Vec<f32> = (0..n * k).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let a = csr(m, n, &t);
        let want = reference(&a, &b, k);
        let scale = error_scale(&a, &b, k);
        // Pad to multiples of the largest block; B gets zero rows.
        let (mp, np) = (m.next_multiple_of(BAND), n.next_multiple_of(BAND));
        let ap = csr(mp, np, &t);
        let mut bp = b.clone();
        bp.resize(np * k, 0.0);
        // Each 32-row band goes to one block size (seeded, every size used over the cases).
        let bands = mp / BAND;
        let size_of_band: Vec<usize> = (0..bands)
            .map(|band| (band + seed + rng.random_range(0..2usize)) % 3)
            .collect();
        for &s in &size_of_band {
            used[s] = true;
        }
        let part = |s: usize| -> Csr<f32, i32> {
            let mine: Vec<_> = t
                .iter()
                .copied()
                .filter(|&(i, _, _)| size_of_band[i / BAND] == s)
                .collect();
            csr(mp, np, &mine)
        };
        let what = format!("bsr {m}x{n} k={k} bands {size_of_band:?}");
        for builder in [false, true] {
            let mut args = csrmm_args(&ap, &bp, k);
            let bsrs: Vec<Bsr<f32, i32>> = (0..3)
                .map(|s| add_bsr_part(&mut args, &part(s), SIZES[s], builder))
                .collect();
            if builder {
                // The builder's values bound directly: the compute kernel alone.
                run(&kernels.compute, &mut args, &what);
                let got = f64s(&args, "c");
                assert_close(&got, &want, &scale, &format!("{what}, builder values"));
                continue;
            }
            // (a) One kernel: the preprocess iterations fill the blocks from the CSR values.
            let mut one = args.clone();
            run(&kernels.whole, &mut one, &what);
            let got = f64s(&one, "c");
            assert_close(&got, &want, &scale, &format!("{what}, one run"));
            // (b) Extracted: the preprocess kernel once, then the compute kernel (twice: its
            // init iteration resets C, so a second launch gives the same result).
            run(&kernels.pre, &mut args, &what);
            assert!(
                f64s(&args, "c").iter().all(|x| *x == 0.0),
                "{what}: the preprocess kernel wrote C"
            );
            for (s, bsr) in bsrs.iter().enumerate() {
                // Independently: each block value is the CSR entry at its coordinate (blocks
                // hold the explicit zeros `Bsr::from_csr` pads them with).
                let name = format!("a_{}", SIZES[s]);
                let want: Vec<f64> = bsr.values().iter().map(|v| f64::from(*v)).collect();
                assert_eq!(
                    f64s(&args, &name),
                    want,
                    "{what}: {name} after the preprocess"
                );
            }
            for launch in 0..2 {
                run(&kernels.compute, &mut args, &what);
                let got = f64s(&args, "c");
                assert_close(
                    &got,
                    &want,
                    &scale,
                    &format!("{what}, extracted, launch {launch}"),
                );
            }
        }
    }
    assert_eq!(
        used, [true; 3],
        "every block size holds a part in some case"
    );
}

#[test]
fn bsr_parts_sharing_rows_agree_with_the_stage1_evaluator() {
    // Entries assigned to block sizes at random, so parts share rows and blocks of one part
    // cover entries of another: the decomposed program then does not compute A * B (see the
    // module documentation), but its C code must still compute what its stage-I program means.
    if !have_cc() {
        return;
    }
    let kernels = bsr_kernels();
    for seed in 0..2u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(200 + seed);
        let (m, n, k) = (64, 64, 2);
        let t = random_triplets(&mut rng, (m, n), 0.08, Some(9), usize::MAX);
        let b: Vec<f32> = (0..n * k).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let a = csr(m, n, &t);
        let owner: Vec<usize> = t.iter().map(|_| rng.random_range(0..3usize)).collect();
        let mut args = csrmm_args(&a, &b, k);
        for (s, &bs) in SIZES.iter().enumerate() {
            let mine: Vec<_> = t
                .iter()
                .zip(&owner)
                .filter(|(_, o)| **o == s)
                .map(|(e, _)| *e)
                .collect();
            add_bsr_part(&mut args, &csr(m, n, &mine), bs, false);
        }
        let what = format!("bsr shared rows, seed {seed}");
        let mut want = args.clone();
        eval_func(&kernels.stage1, &mut want).expect("stage-I evaluator");
        let want = f64s(&want, "c");
        let scale = error_scale(&a, &b, k);
        let mut one = args.clone();
        run(&kernels.whole, &mut one, &what);
        assert_close(&f64s(&one, "c"), &want, &scale, &format!("{what}, one run"));
        run(&kernels.pre, &mut args, &what);
        run(&kernels.compute, &mut args, &what);
        assert_close(
            &f64s(&args, "c"),
            &want,
            &scale,
            &format!("{what}, extracted"),
        );
    }
}

/// The hyb arguments with the values garbage, for the preprocess to overwrite. The builder's
/// padding slots name a column absent from their row (checked here), so the preprocess copies 0
/// into them even where the row stores column 0.
fn hyb_preprocess_args(a: &Csr<f32, i32>, h: &Hyb) -> Args {
    let mut args = hyb_arguments(h);
    for blk in h.blocks() {
        let s = format!("{}_{}", blk.part, blk.bucket);
        for (slot, col) in blk.col_indices.iter().enumerate() {
            if blk.mask[slot] == 0 {
                let row = blk.row_indices[slot / blk.width] as usize;
                let (stored, _) = a.row(row).expect("row");
                assert!(!stored.contains(col), "padding column {col} of row {row}");
            }
        }
        args.insert(
            format!("a_{s}"),
            f32s(vec![blk.values.len()], vec![-9.0; blk.values.len()]),
        );
    }
    args
}

/// One hyb case: `(rows, cols, k, density, full row, parts, buckets)`; a full row is padded
/// nowhere when the part width is a multiple of the largest bucket.
type HybCase = (
    usize,
    usize,
    usize,
    f64,
    Option<usize>,
    usize,
    &'static [usize],
);

#[test]
fn hyb_extracted_preprocess_through_c_feeds_the_atomic_kernel() {
    if !have_cc() {
        return;
    }
    let cases: [HybCase; 3] = [
        // Part width 8, largest bucket 4: rows up to 8 per part split, the full row in chunks.
        (37, 16, 4, 0.35, Some(3), 2, &[1, 2, 4]),
        // One part, largest bucket 2: most non-empty rows split.
        (29, 11, 3, 0.4, None, 1, &[1, 2]),
        // Three parts of width 4, buckets up to 4: the full row unsplit, other rows mostly not.
        (23, 12, 5, 0.25, Some(20), 3, &[2, 4]),
    ];
    let mut saw_atomic = false;
    for (seed, &(m, n, k, p, full, parts, buckets)) in cases.iter().enumerate() {
        let mut rng = ChaCha8Rng::seed_from_u64(300 + seed as u64);
        let t = random_triplets(&mut rng, (m, n), p, full, usize::MAX);
        let b: Vec<f32> = (0..n * k).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let a = csr(m, n, &t);
        let want = reference(&a, &b, k);
        let scale = error_scale(&a, &b, k);
        let h = hyb(m, n, a.indptr(), a.indices(), a.values(), parts, buckets).expect("hyb");
        let what = format!("hyb {m}x{n} k={k} parts={parts} buckets={buckets:?}");
        let f = decompose_format(
            &IRModule {
                funcs: vec![csrmm()],
            },
            &hyb_rules(parts, buckets).expect("rules"),
            true,
        )
        .expect("decompose")
        .funcs
        .remove(0);
        let mut args = csrmm_args(&a, &b, k);
        args.extend(hyb_preprocess_args(&a, &h));
        // One unscheduled kernel, preprocess included.
        let mut one = args.clone();
        run(&compile(&f, &what), &mut one, &what);
        assert_close(&f64s(&one, "c"), &want, &scale, &format!("{what}, one run"));
        // The extracted preprocess kernel fills the buckets as the builder does.
        run(&compile(&extract_preprocess(&f), &what), &mut args, &what);
        for blk in h.blocks() {
            let name = format!("a_{}_{}", blk.part, blk.bucket);
            let got = f64s(&args, &name);
            for (slot, g) in got.iter().enumerate() {
                // Real slots: the builder's value; padding: 0 (its column is absent).
                let w = if blk.mask[slot] != 0 {
                    f64::from(blk.values[slot])
                } else {
                    0.0
                };
                assert_eq!(*g, w, "{what}: {name}[{slot}]");
            }
        }
        // Then the scheduled hyb kernel (atomic buckets where rows split) on those values.
        let options = HybOptions {
            parts,
            buckets: buckets.to_vec(),
            fuse: false,
        };
        let sched = hyb_spmm_schedule(parts, buckets.len());
        let built = build_hyb_spmm(
            &csrmm(),
            &h,
            &options,
            Some(&sched),
            &[("feat_size".to_string(), k as i64)],
            &opts(CACHE),
        )
        .unwrap_or_else(|e| panic!("{what}: build: {e}"));
        let atomic = built.atomic.iter().any(|x| *x);
        saw_atomic |= atomic;
        if atomic {
            assert!(built.kernel.source().contains("omp atomic"), "{what}");
        }
        run(&built.kernel, &mut args, &what);
        assert_close(
            &f64s(&args, "c"),
            &want,
            &scale,
            &format!("{what}, extracted"),
        );
        // The unscheduled compute kernel agrees.
        args.insert("c".into(), f32s(vec![m * k], vec![5.0; m * k]));
        run(&compile(&remove_preprocess(&f), &what), &mut args, &what);
        assert_close(
            &f64s(&args, "c"),
            &want,
            &scale,
            &format!("{what}, extracted, unscheduled"),
        );
    }
    assert!(saw_atomic, "some case exercises the atomic path");
}
