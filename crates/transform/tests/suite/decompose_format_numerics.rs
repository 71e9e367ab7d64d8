//! Acceptance of `decompose_format` (IR side): csrmm decomposed into BSR(4, 16, 32) (the RFC) and
//! into a column-partitioned hyb (SPEC §5.3) computes, on random matrices, the same `C = A * B`
//! as an independent dense product and as the reference evaluator on the original csrmm — under
//! the stage-I evaluator and, lowered to stage III, under the stage-III interpreter; with the
//! preprocess iterations filling the new formats from the CSR values in the same run, and split
//! off (`extract_preprocess` run once, then `remove_preprocess`'s compute part), before or after
//! lowering; and, for hyb, with the builder's values bound directly (no preprocess at all).
//! The new formats' structure arrays come from `sparsetir_formats` (`Bsr::from_csr`,
//! `builders::hyb`). Also: the hyb decomposition's stage-I program (snapshot).

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sparsetir_eval::{eval_func, run_func, ArgValue};
use sparsetir_formats::builders::hyb::{hyb, Hyb};
use sparsetir_formats::{Bsr, BsrPadding, Csr, Duplicates, Tensor};
use sparsetir_ir::equal::func_eq;
use sparsetir_ir::printer::print_func;
use sparsetir_ir::{verify_func, DType, IRModule, PrimFunc, Stage, Stmt};
use sparsetir_syntax::parse_func;
use sparsetir_transform::{
    bsr_rule, decompose_format, extract_preprocess, hyb_rules, lower, remove_preprocess,
    PipelineOptions,
};

type Args = HashMap<String, ArgValue>;

/// `(rows, cols, k, density, parts, buckets)`.
type HybCase = (usize, usize, usize, f64, usize, &'static [usize]);

fn csrmm() -> PrimFunc {
    let src = include_str!("../../../ops/kernels/csrmm.sp");
    parse_func(src).expect("csrmm parses")
}

/// A random `rows × cols` CSR with entry probability `p`; no row holds every column (so every
/// padded slot can name an absent column, see [`hyb_args`]).
fn random_csr(rng: &mut ChaCha8Rng, rows: usize, cols: usize, p: f64) -> Csr<f32, i32> {
    let mut t = Vec::new();
    for i in 0..rows {
        let skip = rng.random_range(0..cols);
        for j in 0..cols {
            if j != skip && rng.random_bool(p) {
                t.push((i, j, rng.random_range(-1.0f32..1.0)));
            }
        }
    }
    Csr::from_triplets(rows, cols, t, Duplicates::Sum).expect("csr")
}

fn f32s(v: &[f32]) -> ArgValue {
    let v: Vec<f64> = v.iter().map(|x| f64::from(*x)).collect();
    ArgValue::Array(Tensor::from_f64(DType::F32, &v).expect("f32 array"))
}

fn i32s<I: Copy + Into<i64>>(v: &[I]) -> ArgValue {
    let v: Vec<i64> = v.iter().map(|x| (*x).into()).collect();
    ArgValue::Array(Tensor::from_i64(DType::I32, &v).expect("i32 array"))
}

fn zeros(n: usize) -> ArgValue {
    ArgValue::Array(Tensor::zeros(DType::F32, vec![n]).expect("zeros"))
}

fn int(v: usize) -> ArgValue {
    ArgValue::Int(v as i64)
}

/// The original csrmm's arguments, `C` zeroed.
fn csrmm_args(a: &Csr<f32, i32>, b: &[f32], k: usize) -> Args {
    let (m, n) = a.shape();
    let mut args = Args::new();
    args.insert("a".into(), f32s(a.values()));
    args.insert("b".into(), f32s(b));
    args.insert("c".into(), zeros(m * k));
    args.insert("indptr".into(), i32s(a.indptr()));
    args.insert("indices".into(), i32s(a.indices()));
    args.insert("m".into(), int(m));
    args.insert("n".into(), int(n));
    args.insert("feat_size".into(), int(k));
    args.insert("nnz".into(), int(a.nnz()));
    args
}

/// `A * B` as a dense f64 product, independent of every part of the compiler.
fn dense_product(a: &Csr<f32, i32>, b: &[f32], k: usize) -> Vec<f64> {
    let (m, _) = a.shape();
    let mut c = vec![0.0f64; m * k];
    for i in 0..m {
        let (cols, vals) = a.row(i).expect("row");
        for (&j, &v) in cols.iter().zip(vals) {
            for f in 0..k {
                c[i * k + f] += f64::from(v) * f64::from(b[j as usize * k + f]);
            }
        }
    }
    c
}

fn c_of(args: &Args) -> Vec<f64> {
    match args.get("c") {
        Some(ArgValue::Array(t)) => t.to_f64_vec(),
        other => panic!("no output array: {other:?}"),
    }
}

fn assert_close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
            "{what}: element {k}: got {g}, want {w}"
        );
    }
}

fn stage3(f: &PrimFunc) -> PrimFunc {
    let opts = PipelineOptions {
        check_invalid_binary_search: true,
        ..PipelineOptions::to_stage(Stage::III)
    };
    let m = lower(
        &IRModule {
            funcs: vec![f.clone()],
        },
        &opts,
    )
    .expect("lowers to stage III");
    m.funcs.into_iter().next().expect("one function")
}

fn eval1(f: &PrimFunc, args: &mut Args, what: &str) {
    eval_func(f, args).unwrap_or_else(|e| panic!("{what}: stage I: {e}"));
}

fn run3(f: &PrimFunc, args: &mut Args, what: &str) {
    run_func(f, args).unwrap_or_else(|e| panic!("{what}: stage III: {e}"));
}

/// Runs the decomposed `f` every way (see the module documentation) on `args` (new formats'
/// values zeroed) and checks `C` against `want` each time.
fn check_all_ways(f: &PrimFunc, args: &Args, want: &[f64], stage1: bool, what: &str) {
    verify_func(f).expect("decomposed function verifies");
    let (pre, compute) = (extract_preprocess(f), remove_preprocess(f));
    let lowered = stage3(f);
    let (pre3, compute3) = (stage3(&pre), stage3(&compute));
    // Split after lowering: the stage-III preprocess nests are the format copies.
    let (pre3b, compute3b) = (extract_preprocess(&lowered), remove_preprocess(&lowered));
    if stage1 {
        let mut a = args.clone();
        eval1(f, &mut a, what);
        assert_close(&c_of(&a), want, &format!("{what}, stage I, one run"));
        let mut a = args.clone();
        eval1(&pre, &mut a, what);
        eval1(&compute, &mut a, what);
        assert_close(&c_of(&a), want, &format!("{what}, stage I, extracted"));
    }
    let mut a = args.clone();
    run3(&lowered, &mut a, what);
    assert_close(&c_of(&a), want, &format!("{what}, stage III, one run"));
    for (p, c, how) in [
        (&pre3, &compute3, "split before lowering"),
        (&pre3b, &compute3b, "split after lowering"),
    ] {
        let mut a = args.clone();
        run3(p, &mut a, what);
        // The preprocess part alone computes nothing into C.
        assert!(
            c_of(&a).iter().all(|x| *x == 0.0),
            "{what}: {how}: C touched"
        );
        run3(c, &mut a, what);
        assert_close(&c_of(&a), want, &format!("{what}, stage III, {how}"));
    }
}

#[test]
fn bsr_4_16_32_equals_the_reference() {
    let f = decompose_format(
        &IRModule {
            funcs: vec![csrmm()],
        },
        &[4, 16, 32].map(|b| bsr_rule(b).expect("rule")),
        true,
    )
    .expect("decompose")
    .funcs
    .remove(0);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    // Shapes divisible by the block sizes (the RFC's program has no bounds guards).
    for (m, n, k, p) in [(64, 96, 3, 0.05), (32, 32, 2, 0.3), (64, 32, 1, 0.0)] {
        let a = random_csr(&mut rng, m, n, p);
        let b: Vec<f32> = (0..n * k).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let want = dense_product(&a, &b, k);
        let mut args = csrmm_args(&a, &b, k);
        let mut orig = args.clone();
        eval1(&csrmm(), &mut orig, "csrmm");
        assert_close(&c_of(&orig), &want, "original csrmm");
        // The three formats are parts of one matrix (composable formats): 32-row band `t` goes
        // to block size `[4, 16, 32][t % 3]`, and the product is the sum of the parts'.
        for (t, bs) in [4usize, 16, 32].into_iter().enumerate() {
            let part = band_part(&a, |i| (i / 32) % 3 == t);
            let bsr: Bsr<f32, i32> =
                Bsr::from_csr(&part, (bs, bs), BsrPadding::Allow).expect("bsr");
            let s = bs.to_string();
            args.insert(format!("a_{s}"), zeros(bsr.nnz_blocks() * bs * bs));
            args.insert(format!("indptr_{s}"), i32s(bsr.indptr()));
            args.insert(format!("indices_{s}"), i32s(bsr.indices()));
            args.insert(format!("m_{s}"), int(m.div_ceil(bs)));
            args.insert(format!("n_{s}"), int(n.div_ceil(bs)));
            args.insert(format!("nnz_{s}"), int(bsr.nnz_blocks()));
        }
        check_all_ways(&f, &args, &want, true, &format!("bsr {m}x{n} k={k}"));
    }
}

/// The rows of `a` that `keep` selects (the others empty), same shape.
fn band_part(a: &Csr<f32, i32>, keep: impl Fn(usize) -> bool) -> Csr<f32, i32> {
    let (m, n) = a.shape();
    let (ptr, idx, val) = (a.indptr(), a.indices(), a.values());
    let mut t = Vec::new();
    for i in (0..m).filter(|&i| keep(i)) {
        for p in ptr[i] as usize..ptr[i + 1] as usize {
            t.push((i, idx[p] as usize, val[p]));
        }
    }
    Csr::from_triplets(m, n, t, Duplicates::Sum).expect("band")
}

fn hyb_decomposed(parts: usize, buckets: &[usize]) -> PrimFunc {
    let rules = hyb_rules(parts, buckets).expect("rules");
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

/// Arguments of the hyb-decomposed csrmm: for each (part, bucket) block `s = p_k`, the rows
/// (`indices_i_s`), columns (`indices_j_s`) and counts of the builder. With `values`, the values
/// are the builder's; without, they are zeros for the preprocess to fill. With `absent`, checks
/// that every padding slot names a column absent from its row (the builder's padding, whatever
/// the row stores — column 0 included): the preprocess then copies 0 there, and a stage-I access
/// (by coordinate: the first match) never confuses padding with a stored column.
fn hyb_args(a: &Csr<f32, i32>, h: &Hyb, base: &Args, values: bool, absent: bool) -> Args {
    let mut args = base.clone();
    let (m, n) = a.shape();
    for blk in h.blocks() {
        let s = format!("{}_{}", blk.part, blk.bucket);
        let r = blk.num_rows();
        let cols = blk.col_indices.clone();
        if absent {
            for (slot, col) in cols.iter().enumerate() {
                if blk.mask[slot] == 0 {
                    let row = blk.row_indices[slot / blk.width] as usize;
                    let (stored, _) = a.row(row).expect("row");
                    assert!(!stored.contains(col), "padding column {col} of row {row}");
                }
            }
        }
        let vals = if values {
            f32s(&blk.values)
        } else {
            zeros(r * blk.width)
        };
        args.insert(format!("a_{s}"), vals);
        args.insert(format!("indptr_i_{s}"), i32s(&[0, r as i32]));
        args.insert(format!("indices_i_{s}"), i32s(&blk.row_indices));
        args.insert(format!("indices_j_{s}"), i32s(&cols));
        args.insert(format!("m_{s}"), int(m));
        args.insert(format!("n_{s}"), int(n));
        args.insert(format!("num_rows_{s}"), int(r));
    }
    args
}

#[test]
fn hyb_equals_the_reference() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    // (rows, cols, k, density, parts, buckets); the largest bucket holds every row's part so no
    // row is split (split rows repeat a row coordinate, which stage-I coordinate semantics
    // cannot tell apart: see `hyb_split_rows_at_stage_iii`).
    let cases: [HybCase; 4] = [
        (9, 12, 3, 0.3, 2, &[1, 2, 4, 8]),
        (7, 5, 2, 0.5, 1, &[1, 2, 4, 8]),
        (6, 10, 2, 0.2, 3, &[2, 4]),
        (5, 4, 1, 0.0, 2, &[1, 2]),
    ];
    for (m, n, k, p, parts, buckets) in cases {
        let a = random_csr(&mut rng, m, n, p);
        let b: Vec<f32> = (0..n * k).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let want = dense_product(&a, &b, k);
        let base = csrmm_args(&a, &b, k);
        let mut orig = base.clone();
        eval1(&csrmm(), &mut orig, "csrmm");
        assert_close(&c_of(&orig), &want, "original csrmm");
        let h = hyb(m, n, a.indptr(), a.indices(), a.values(), parts, buckets).expect("hyb");
        assert!(
            h.blocks().all(|blk| {
                let mut r = blk.row_indices.clone();
                r.dedup();
                r.len() == blk.row_indices.len()
            }),
            "no split rows in this case"
        );
        let f = hyb_decomposed(parts, buckets);
        let what = format!("hyb {m}x{n} parts={parts} buckets={buckets:?}");
        // The preprocess fills the buckets from the CSR values.
        check_all_ways(
            &f,
            &hyb_args(&a, &h, &base, false, true),
            &want,
            true,
            &what,
        );
        // The builder's values bound directly, no preprocess.
        let compute = remove_preprocess(&f);
        let mut args = hyb_args(&a, &h, &base, true, true);
        eval1(&compute, &mut args, &what);
        assert_close(
            &c_of(&args),
            &want,
            &format!("{what}, builder values, stage I"),
        );
        // Positions at stage III: the builder's own column-0 padding is fine there.
        let mut args = hyb_args(&a, &h, &base, true, false);
        run3(&stage3(&compute), &mut args, &what);
        assert_close(
            &c_of(&args),
            &want,
            &format!("{what}, builder values, stage III"),
        );
    }
}

#[test]
fn hyb_split_rows_at_stage_iii() {
    // Rows longer than the largest bucket are split into chunks with the same row index; the
    // stage-III program works on positions, so the chunks add up into the same row.
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let (m, n, k) = (6, 16, 2);
    let a = random_csr(&mut rng, m, n, 0.7);
    let b: Vec<f32> = (0..n * k).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let want = dense_product(&a, &b, k);
    let h = hyb(m, n, a.indptr(), a.indices(), a.values(), 2, &[1, 2]).expect("hyb");
    assert!(h.needs_atomic);
    let f = hyb_decomposed(2, &[1, 2]);
    let base = csrmm_args(&a, &b, k);
    check_all_ways(
        &f,
        &hyb_args(&a, &h, &base, false, true),
        &want,
        false,
        "hyb split rows",
    );
    let mut args = hyb_args(&a, &h, &base, true, false);
    run3(&stage3(&remove_preprocess(&f)), &mut args, "hyb split rows");
    assert_close(&c_of(&args), &want, "hyb split rows, builder values");
}

#[test]
fn hyb_decomposition_program() {
    let f = hyb_decomposed(2, &[1, 2]);
    verify_func(&f).expect("verifies");
    let text = print_func(&f);
    let back = parse_func(&text).expect("parses back");
    assert!(func_eq(&f, &back));
    // The init moved to its own spatial iteration before the clones (buckets hold a subset of
    // the rows, and parts share rows).
    let mut names = Vec::new();
    f.body.visit(&mut |s| {
        if let Stmt::SparseIteration(it) = s {
            names.push((it.name.clone(), it.init.is_some()));
        }
    });
    let expect: Vec<(String, bool)> = [
        "rewrite_A_0_0",
        "rewrite_A_0_1",
        "rewrite_A_1_0",
        "rewrite_A_1_1",
        "csrmm_init",
        "csrmm_0_0",
        "csrmm_0_1",
        "csrmm_1_0",
        "csrmm_1_1",
    ]
    .iter()
    .map(|n| (n.to_string(), false))
    .collect();
    assert_eq!(names, expect);
    insta::assert_snapshot!(text);
}
