//! SpMV on SELL-C-σ (`crates/ops/formats/spmv_sell.sp` with `schedules/spmv_sell.sched`, the
//! way `sparsetir bench spmv --format sell` builds it) equals a dense f64 product `y = dense(A)
//! x` (the dense matrix written from random entries, not from a sparse format) on matrices with
//! empty rows, a full row, row counts that are not multiples of the 16 lanes and several sorting
//! windows; so does the stage-I evaluator on the same SELL arrays. Also checked: the C kernel
//! really keeps a chunk's partial sums in a block-local array (no per-call allocation) and
//! gathers where the machine has AVX-512 (the portable fallback, compiled with `-mno-avx512f`,
//! is checked too), a second launch gives the same output, and a column
//! index outside `x` is refused before the kernel runs. Skipped, with a note, when no C compiler
//! runs.

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sparsetir_eval::eval_func;
use sparsetir_formats::builders::sell::{sell, Sell};
use sparsetir_ops::composable::{spmv_sell, SELL_LANES, SPMV_SELL_SCHEDULE};
use sparsetir_runtime::build::{emit, schedule_and_lower};
use sparsetir_runtime::Kernel;

use crate::common;
use common::{f32s, f64s, have_cc, i32s, int, opts, random_dense, Args};

const CACHE: &str = "spmv-sell-cache";

fn spec() -> Vec<(String, i64)> {
    vec![("lanes".to_string(), SELL_LANES as i64)]
}

/// CSR arrays of a dense row-major matrix.
fn to_csr(d: &[f32], rows: usize, cols: usize) -> (Vec<i32>, Vec<i32>, Vec<f32>) {
    let (mut indptr, mut indices, mut values) = (vec![0i32], Vec::new(), Vec::new());
    for i in 0..rows {
        for j in 0..cols {
            if d[i * cols + j] != 0.0 {
                indices.push(j as i32);
                values.push(d[i * cols + j]);
            }
        }
        indptr.push(indices.len() as i32);
    }
    (indptr, indices, values)
}

/// The kernel's arguments for `s` and `x`, the output zeroed.
fn arguments(s: &Sell, x: &[f32]) -> Args {
    let mut args = HashMap::new();
    args.insert("a".into(), f32s(vec![s.values.len()], s.values.clone()));
    args.insert("x".into(), f32s(vec![x.len()], x.to_vec()));
    args.insert(
        "y".into(),
        f32s(vec![s.padded_rows()], vec![0.0; s.padded_rows()]),
    );
    args.insert("cols".into(), i32s(&s.col_indices));
    args.insert("rows".into(), i32s(&s.row_ids));
    args.insert("chunk_ptr".into(), i32s(&s.chunk_ptr));
    args.insert("nchunk".into(), int(s.nchunk()));
    args.insert("lanes".into(), int(s.lanes));
    args.insert("max_width".into(), int(s.max_width()));
    args.insert("nslots".into(), int(s.slots()));
    args.insert("n".into(), int(s.cols));
    args
}

/// The kernel compiled with extra compiler `flags` (`-mno-avx512f`: the portable fallback of
/// the gathering loop, what a machine without AVX-512 runs).
fn compile(flags: &[&str]) -> Kernel {
    let f = spmv_sell().expect("spmv_sell parses");
    let mut o = opts(CACHE);
    o.flags = flags.iter().map(|s| s.to_string()).collect();
    let lowered = schedule_and_lower(&f, Some(SPMV_SELL_SCHEDULE), &spec()).expect("lower");
    let c = emit(&f, Some(SPMV_SELL_SCHEDULE), &spec()).expect("emit");
    Kernel::from_source(
        &lowered.stage1,
        &c.source,
        &c.entry,
        sparsetir_runtime::build::kernel_params(&c),
        &o,
    )
    .expect("compile")
}

/// `(rows, cols, density, sigma)` cases: tiny, not multiples of 16, windows smaller than, equal
/// to and larger than the row count.
const CASES: [(usize, usize, f64, usize); 6] = [
    (1, 1, 1.0, 1),
    (5, 7, 0.4, 2),
    (37, 23, 0.2, 8),
    (64, 50, 0.1, 64),
    (100, 90, 0.05, 1000),
    (257, 130, 0.03, 16),
];

fn check(what: &str, got: &[f64], want: &[f64], padded: usize) {
    assert_eq!(got.len(), padded, "{what}: output length");
    for (i, &g) in got.iter().enumerate() {
        let w = want.get(i).copied().unwrap_or(0.0);
        assert!(
            (g - w).abs() <= 1e-5 * w.abs().max(1.0),
            "{what}: y[{i}] = {g}, the dense product gives {w}"
        );
    }
}

#[test]
fn sell_spmv_equals_the_dense_product_in_c_and_in_the_evaluator() {
    let cc = have_cc();
    if !cc {
        eprintln!("note: no C compiler runs here; only the evaluator is checked");
    }
    let kernels: Vec<(&str, Kernel)> = if cc {
        vec![
            ("AVX-512 where present", compile(&[])),
            ("-mno-avx512f", compile(&["-mno-avx512f"])),
        ]
    } else {
        Vec::new()
    };
    let f = spmv_sell().expect("spmv_sell parses");
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for (rows, cols, p, sigma) in CASES {
        let d = random_dense(&mut rng, rows, cols, p);
        let (indptr, indices, values) = to_csr(&d, rows, cols);
        let s = sell(rows, cols, &indptr, &indices, &values, SELL_LANES, sigma).expect("sell");
        let x: Vec<f32> = (0..cols).map(|_| rng.random_range(-1.0f32..1.0)).collect();
        let want: Vec<f64> = (0..rows)
            .map(|i| {
                (0..cols)
                    .map(|j| d[i * cols + j] as f64 * x[j] as f64)
                    .sum()
            })
            .collect();
        let what = format!("{rows}x{cols}, sigma {sigma}");
        let mut args = arguments(&s, &x);
        eval_func(&f, &mut args).unwrap_or_else(|e| panic!("{what}: evaluator: {e}"));
        check(
            &format!("{what} (evaluator)"),
            &f64s(&args, "y"),
            &want,
            s.padded_rows(),
        );
        for (flags, k) in &kernels {
            let mut args = arguments(&s, &x);
            for launch in 0..2 {
                k.run(&mut args)
                    .unwrap_or_else(|e| panic!("{what}: launch {launch}: {e}"));
                let label = format!("{what} (C, {flags}, launch {launch})");
                check(&label, &f64s(&args, "y"), &want, s.padded_rows());
            }
        }
    }
}

#[test]
fn the_c_kernel_keeps_partial_sums_in_the_chunk_and_gathers() {
    let f = spmv_sell().expect("spmv_sell parses");
    let c = emit(&f, Some(SPMV_SELL_SCHEDULE), &spec()).expect("emit");
    // The intermediate Z[nchunk, 16] became a 16-float array of the chunk's block.
    assert!(c.source.contains("float Z_data[16]"), "{}", c.source);
    assert!(
        !c.source.contains("calloc"),
        "no heap allocation per call:\n{}",
        c.source
    );
    assert!(c.source.contains("_mm512_i32gather_ps"), "{}", c.source);
    assert!(
        c.source.contains("#pragma omp simd"),
        "portable fallback:\n{}",
        c.source
    );
}

#[test]
fn a_column_outside_x_is_refused_before_the_kernel_runs() {
    if !have_cc() {
        eprintln!("note: no C compiler runs here; skipped");
        return;
    }
    let k = compile(&[]);
    let (indptr, indices, values) = (vec![0, 2, 3], vec![0, 2, 1], vec![1.0, 2.0, 3.0]);
    let s = sell(2, 3, &indptr, &indices, &values, SELL_LANES, 4).expect("sell");
    let mut bad = s.clone();
    bad.col_indices[0] = 3;
    let mut args = arguments(&bad, &[1.0, 1.0, 1.0]);
    let err = k.run(&mut args).expect_err("column 3 of a 3-column x");
    let msg = err.to_string();
    assert!(
        msg.contains("buffer `C`") && msg.contains("outside 0..3"),
        "{msg}"
    );
}
