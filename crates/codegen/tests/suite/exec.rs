//! Differential execution tests: the generated C, compiled into a small program that calls the
//! entry point on embedded data and prints the arrays back, must give what the stage II/III
//! interpreter (`sparsetir_eval::run_func`) gives on the same stage III function. Skipped, with a
//! note, when no C compiler runs.

use crate::common;

use std::collections::HashMap;

use common::*;
use sparsetir_codegen::emit_c;
use sparsetir_eval::ArgValue;
use sparsetir_ir::{DType, ForKind, Stmt};
use sparsetir_ops::data::{random_args, Pattern, Shape};

/// Marks the outermost loop of the body (the first one met) as parallel.
fn parallelize_outer(s: &mut Stmt) -> bool {
    match s {
        Stmt::For(l) => {
            l.kind = ForKind::Parallel;
            true
        }
        Stmt::Seq(v) => v.iter_mut().any(parallelize_outer),
        _ => false,
    }
}

#[test]
fn catalog_kernels_match_the_interpreter() {
    let Some(cc) = compiler() else {
        eprintln!("note: no C compiler (`$CC` or `cc`) runs here; skipping the execution test");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let shape = Shape::new(Pattern::Random { empty_rows: true }, 7, 9)
        .with_density(0.4)
        .with_feat(5)
        .with_block(2)
        .with_depth(3);
    for k in sparsetir_ops::catalog() {
        let case = random_args(k.name, &shape, 11).unwrap_or_else(|e| panic!("{}: {e}", k.name));
        let f = stage3(k.name);
        let after = check(&cc, dir.path(), k.name, &f, &case.args, 2, 0.0);
        let changed = case
            .outputs
            .iter()
            .any(|o| after.get(o) != case.args.get(o));
        assert!(changed, "{}: the outputs stayed as they were", k.name);
    }
}

#[test]
fn parallel_outer_loops_match_the_interpreter() {
    let Some(cc) = compiler() else {
        eprintln!("note: no C compiler runs here; skipping");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let shape = Shape::new(Pattern::Random { empty_rows: true }, 40, 30)
        .with_density(0.3)
        .with_feat(8);
    for name in [
        "csrmm",
        "sddmm",
        "spmv",
        "sparse_softmax",
        "csrmm_dense_iter",
    ] {
        let case = random_args(name, &shape, 3).expect("case");
        let mut f = stage3(name);
        assert!(parallelize_outer(&mut f.body), "{name}: no loop");
        let m = emit_c(&f).expect("emits");
        assert!(m
            .source
            .contains("#pragma omp parallel for schedule(dynamic, 64)"));
        check(
            &cc,
            dir.path(),
            &format!("{name}_par"),
            &f,
            &case.args,
            2,
            0.0,
        );
    }
}

#[test]
fn expression_semantics_match_the_interpreter() {
    let Some(cc) = compiler() else {
        eprintln!("note: no C compiler runs here; skipping");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let f = parse(include_str!("../scripts/exprs.sp"));
    let xs = [-7, 7, -8, 0, 1000, -1000, 127, -129, 5, 300];
    let ys = [2, -2, 3, 5, -7, 9, 1, -1, 5, 4];
    let fs = [-2.5, 2.5, 0.0, -0.75, 1.25, -3.3, 0.1, 7.9, -0.5, 0.5];
    let gs = [-2.5, 2.5, 0.0, -0.3, 1.0e-3, -3.3, 0.1, 7.9, 1e10, -0.45];
    let n = xs.len();
    let mut args = HashMap::new();
    args.insert("xs".to_string(), ints(DType::I32, &xs));
    args.insert("ys".to_string(), ints(DType::I32, &ys));
    args.insert("fs".to_string(), floats(DType::F32, &fs));
    args.insert("gs".to_string(), floats(DType::F64, &gs));
    args.insert("oi".to_string(), ints(DType::I32, &vec![0; n * 12]));
    args.insert("of".to_string(), floats(DType::F32, &vec![0.0; n * 12]));
    args.insert("od".to_string(), floats(DType::F64, &vec![0.0; n * 8]));
    args.insert("o8".to_string(), ints(DType::I8, &vec![0; n * 4]));
    args.insert("ob".to_string(), ints(DType::Bool, &vec![0; n * 3]));
    args.insert("n".to_string(), ArgValue::Int(n as i64));
    // Transcendental functions may differ from the evaluator's by an ulp (erf is a series there).
    let after = check(&cc, dir.path(), "exprs", &f, &args, 2, 1e-6);
    // Spot checks computed by hand (Python semantics): -7 // 2 = -4, -7 % 2 = 1, -7 / 2 = -3.
    let Some(ArgValue::Array(oi)) = after.get("oi") else {
        panic!("oi")
    };
    assert_eq!(&oi.to_i64_vec()[0..3], &[-4, 1, -3]);
}

#[test]
fn let_if_allocate_and_schedules_match_the_interpreter() {
    let Some(cc) = compiler() else {
        eprintln!("note: no C compiler runs here; skipping");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let f = parse(include_str!("../scripts/letstmt.sp"));
    let xs = [4, -5, -20, 0, 9];
    let mut args = HashMap::new();
    args.insert("xs".to_string(), ints(DType::I32, &xs));
    args.insert("o".to_string(), ints(DType::I64, &[7, 7, 7, 7, 7]));
    args.insert("n".to_string(), ArgValue::Int(xs.len() as i64));
    let after = check(&cc, dir.path(), "lets", &f, &args, 2, 0.0);
    // 3x when positive, -1 below -30, else (3x)^2; the first two get +1 from the allocation.
    let Some(ArgValue::Array(o)) = after.get("o") else {
        panic!("o")
    };
    assert_eq!(o.to_i64_vec(), vec![13, 226, -1, 0, 27]);

    let f = parse(include_str!("../scripts/sched.sp"));
    let m = 37usize;
    let a: Vec<f64> = (0..m * 8).map(|i| ((i * 7) % 11) as f64 - 5.0).collect();
    let mut args = HashMap::new();
    args.insert("a".to_string(), floats(DType::F32, &a));
    args.insert("c".to_string(), floats(DType::F32, &vec![0.0; m]));
    args.insert("m".to_string(), ArgValue::Int(m as i64));
    args.insert("n".to_string(), ArgValue::Int(5000));
    check(&cc, dir.path(), "sched", &f, &args, 2, 0.0);
}

#[test]
fn simd_reductions_match_the_interpreter() {
    let Some(cc) = compiler() else {
        eprintln!("note: no C compiler runs here; skipping");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let f = parse(include_str!("../scripts/simd_reduction.sp"));
    let (m, n) = (6usize, 37usize);
    // Row 2 holds NaNs (max/min ignore them, as the evaluator's do); row 4 is all NaN.
    let a: Vec<f64> = (0..m * n)
        .map(|x| {
            let (r, c) = (x / n, x % n);
            if (r == 2 && c % 5 == 1) || r == 4 {
                f64::NAN
            } else {
                ((x * 37) % 101) as f64 / 8.0 - 6.0
            }
        })
        .collect();
    let b: Vec<i64> = (0..m * n).map(|x| (x as i64 * 13) % 29 - 14).collect();
    // Row lengths 0, 37, 5, 0, 36, 17 for the data-dependent loop.
    let p = [0, 0, 37, 42, 42, 78, 95];
    let mut args = HashMap::new();
    args.insert("a".to_string(), floats(DType::F32, &a));
    args.insert("b".to_string(), ints(DType::I32, &b));
    args.insert("ptr".to_string(), ints(DType::I32, &p));
    args.insert("s".to_string(), floats(DType::F32, &[0.5; 6]));
    args.insert("mx".to_string(), floats(DType::F32, &[-1e30; 6]));
    args.insert("mn".to_string(), floats(DType::F32, &[f64::NAN; 6]));
    args.insert("si".to_string(), ints(DType::I32, &[3; 6]));
    args.insert("sp".to_string(), floats(DType::F64, &[1.0; 6]));
    args.insert("m".to_string(), ArgValue::Int(m as i64));
    args.insert("n".to_string(), ArgValue::Int(n as i64));
    // Reassociated float sums differ from the serial order by rounding only.
    let after = check(&cc, dir.path(), "simd_red", &f, &args, 2, 1e-5);
    // Independent spot checks: row 2's max over the non-NaN entries, the integer sums.
    let arr = |k: &str| match after.get(k) {
        Some(ArgValue::Array(t)) => t.to_f64_vec(),
        _ => panic!("{k}"),
    };
    let row2_max = (0..n)
        .filter(|c| c % 5 != 1)
        .map(|c| a[2 * n + c])
        .fold(f64::NEG_INFINITY, f64::max);
    assert_eq!(arr("mx")[2], row2_max);
    assert!(arr("mn")[4].is_nan(), "an all-NaN row keeps NaN");
    let si: Vec<f64> = (0..m)
        .map(|r| {
            3.0 + (0..n)
                .map(|c| (b[r * n + c] * b[r * n + c]) as f64)
                .sum::<f64>()
        })
        .collect();
    assert_eq!(arr("si"), si);
}

#[test]
fn lane_reductions_match_the_interpreter() {
    let Some(cc) = compiler() else {
        eprintln!("note: no C compiler runs here; skipping");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let f = parse(include_str!("../scripts/simd_lanes.sp"));
    let (m, n) = (5usize, 37usize);
    let a: Vec<f64> = (0..m * n)
        .map(|x| ((x * 41) % 97) as f64 / 16.0 - 3.0)
        .collect();
    let x: Vec<f64> = (0..m).map(|r| r as f64 * 0.75 - 1.5).collect();
    let b: Vec<i64> = (0..m * n).map(|v| (v as i64 * 17) % 31 - 15).collect();
    let mut args = HashMap::new();
    args.insert("a".to_string(), floats(DType::F32, &a));
    args.insert("x".to_string(), floats(DType::F32, &x));
    args.insert("b".to_string(), ints(DType::I32, &b));
    args.insert("s".to_string(), floats(DType::F32, &[0.25; 5]));
    args.insert("si".to_string(), ints(DType::I32, &[-7; 5]));
    args.insert("sd".to_string(), floats(DType::F64, &[2.0; 5]));
    args.insert("m".to_string(), ArgValue::Int(m as i64));
    let after = check(&cc, dir.path(), "simd_lanes", &f, &args, 2, 1e-5);
    let arr = |k: &str| match after.get(k) {
        Some(ArgValue::Array(t)) => t.to_f64_vec(),
        _ => panic!("{k}"),
    };
    // Independent sums in f64 (all inputs are exact in f32).
    for r in 0..m {
        let s: f64 = 0.25
            + (0..n)
                .map(|c| a[r * n + c] * a[r * n + c] * x[r])
                .sum::<f64>();
        assert!((arr("s")[r] - s).abs() <= 1e-4 * (1.0 + s.abs()), "row {r}");
        let si: i64 = -7
            + (0..32)
                .map(|c| b[r * n + c] * b[r * n + c + 5])
                .sum::<i64>();
        assert_eq!(arr("si")[r], si as f64, "row {r}");
        let sd: f64 = 2.0 + (0..31).map(|c| x[r] * a[r * n + c + 3]).sum::<f64>();
        assert!(
            (arr("sd")[r] - sd).abs() <= 1e-9 * (1.0 + sd.abs()),
            "row {r}"
        );
    }
}

/// Runs the `gather_rows` prefetch script through C and the interpreter on rows of length
/// 3, 0, 1, 5 (the prefetch distance, 2, runs past every row's end and, at the last rows, past
/// `nnz`) and checks the gathered sums against a direct computation.
fn check_gather_rows(script: &str) {
    let Some(cc) = compiler() else {
        eprintln!("note: no C compiler runs here; skipping");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let f = parse(script);
    let p = [0i64, 3, 3, 4, 9];
    let j = [4i64, 0, 6, 2, 6, 5, 1, 3, 0];
    let n = 7usize;
    let b: Vec<f64> = (0..n * 24).map(|x| ((x * 29) % 53) as f64 / 4.0).collect();
    let mut args = HashMap::new();
    args.insert("b".to_string(), floats(DType::F32, &b));
    args.insert("ptr".to_string(), ints(DType::I32, &p));
    args.insert("idx".to_string(), ints(DType::I32, &j));
    args.insert("y".to_string(), floats(DType::F32, &[1.0; 9]));
    args.insert("m".to_string(), ArgValue::Int(4));
    args.insert("n".to_string(), ArgValue::Int(n as i64));
    args.insert("nnz".to_string(), ArgValue::Int(9));
    let after = check(&cc, dir.path(), "gather_rows", &f, &args, 2, 0.0);
    let Some(ArgValue::Array(y)) = after.get("y") else {
        panic!("y")
    };
    let want: Vec<f64> = j
        .iter()
        .map(|&c| 1.0 + (0..24).map(|k| b[c as usize * 24 + k]).sum::<f64>())
        .collect();
    assert_eq!(y.to_f64_vec(), want);
}

#[test]
fn prefetch_matches_the_interpreter() {
    // Look-ahead clamped to the row's last element.
    check_gather_rows(include_str!("../scripts/prefetch.sp"));
}

#[test]
fn flat_prefetch_matches_the_interpreter() {
    // Look-ahead across rows and past `nnz`, the index read clamped into `J`.
    check_gather_rows(include_str!("../scripts/prefetch_flat.sp"));
}

/// Local arrays a fill nest writes whole before any read are declared without `= {0}`; the
/// others (a fill that misses a row, an accumulation that reads first, a fill under an `if`, a
/// fill whose offsets depend on a loop outside it) stay zeroed, and every output equals the
/// interpreter's, the zeros read included.
#[test]
fn only_arrays_filled_whole_before_a_read_are_left_uninitialized() {
    let f = parse(include_str!("../scripts/local_fill.sp"));
    let m = sparsetir_codegen::emit_c(&f).expect("emits");
    let text = kernel_text(&m);
    let decl = |name: &str| {
        text.lines()
            .find(|l| l.contains(&format!(" {name}[")) && l.trim_end().ends_with(['/', ';']))
            .unwrap_or_else(|| panic!("no declaration of {name} in\n{text}"))
            .trim()
            .to_string()
    };
    assert!(
        decl("full").ends_with("/* filled before read */"),
        "{}",
        decl("full")
    );
    for name in ["part", "acc", "cond", "outer"] {
        assert!(decl(name).ends_with("= {0};"), "{name}: {}", decl(name));
    }
    let Some(cc) = compiler() else {
        eprintln!("note: no C compiler runs here; skipping the run");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let rows = 6usize;
    let a: Vec<f64> = (0..rows * 16)
        .map(|i| ((i * 5) % 13) as f64 - 6.0)
        .collect();
    let mut args = HashMap::new();
    args.insert("a".to_string(), floats(DType::F32, &a));
    args.insert("c".to_string(), floats(DType::F32, &vec![99.0; rows * 5]));
    args.insert("m".to_string(), ArgValue::Int(rows as i64));
    let after = check(&cc, dir.path(), "local_fill", &f, &args, 1, 0.0);
    // Independently: row r of C from A's row r.
    let c = array(&after, "c");
    for r in 0..rows {
        let ar = |k: usize| a[r * 16 + k];
        let want = [
            ar(15) + ar(1),
            ar(5),
            ar(2),
            if r > 0 { ar(1) } else { 0.0 },
            // outer[(x + r) % 4] = A[r, x + 8]: element 2 holds x = (2 - r) mod 4.
            ar((2 + 4 * r - r) % 4 + 8),
        ];
        assert_eq!(&c[r * 5..r * 5 + 5], &want, "row {r}");
    }
}
