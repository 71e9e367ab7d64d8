//! Vectorised loops written one machine vector at a time (`c/vector.rs`): which loops take the
//! vector path, and their results against the stage II/III interpreter and a direct computation.

use crate::common;

use std::collections::HashMap;

use common::*;
use sparsetir_eval::ArgValue;
use sparsetir_ir::DType;

const SCRIPT: &str = include_str!("../scripts/vector_loops.sp");

#[test]
fn contiguous_loops_take_vectors_and_the_others_keep_omp_simd() {
    let src = kernel_text(&emit_script(SCRIPT));
    // axpy (f32, 32), acc (f32, 16, with an init at the reduction's first value): vectors;
    // scale64 (f64, 16): vectors of doubles; gather (indexed read) and odd (20 elements):
    // `omp simd`.
    assert_eq!(src.matches("+= SPTIR_VL_f32)").count(), 2, "{src}");
    assert_eq!(src.matches("+= SPTIR_VL_f64)").count(), 1, "{src}");
    assert_eq!(src.matches("#pragma omp simd").count(), 2, "{src}");
    assert!(src.contains("sptir_vst_f32(&Y["), "{src}");
    // The init stores the broadcast scalar; the f64 loop converts its scalar before the vector.
    assert!(src.contains("sptir_vbc_f32(X["), "{src}");
    assert!(src.contains("3.0) + ((double)X[vi_1]))"), "{src}");
    assert!(
        src.contains("A[(int64_t)vi_2 * 32 + (int64_t)IDX["),
        "{src}"
    );
    let m = emit_script(SCRIPT);
    assert!(
        m.source.contains("typedef float sptir_v_f32"),
        "helpers missing"
    );
    // A module without vector loops does not carry the helpers.
    let plain = emit_script(include_str!("../scripts/sched.sp"));
    assert!(!plain.source.contains("sptir_v_f32"));
}

#[test]
fn vector_loops_match_the_interpreter_and_a_direct_computation() {
    let Some(cc) = compiler() else {
        eprintln!("note: no C compiler runs here; skipping");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let f = parse(SCRIPT);
    let m = 3usize;
    let a: Vec<f64> = (0..m * 32)
        .map(|v| ((v * 37) % 23) as f64 / 4.0 - 2.5)
        .collect();
    let b: Vec<f64> = (0..m * 32).map(|v| ((v * 11) % 19) as f64 / 8.0).collect();
    let x: Vec<f64> = (0..m).map(|r| r as f64 - 0.5).collect();
    let d: Vec<f64> = (0..m * 16).map(|v| v as f64 * 0.125 - 1.0).collect();
    let idx: Vec<i64> = (0..32).map(|k| (k * 7 + 3) % 32).collect();
    let mut args = HashMap::new();
    args.insert("a".to_string(), floats(DType::F32, &a));
    args.insert("b".to_string(), floats(DType::F32, &b));
    args.insert("x".to_string(), floats(DType::F32, &x));
    args.insert("y".to_string(), floats(DType::F32, &vec![9.0; m * 32]));
    args.insert("d".to_string(), floats(DType::F64, &d));
    args.insert("g".to_string(), floats(DType::F32, &vec![9.0; m * 32]));
    args.insert("idx".to_string(), ints(DType::I32, &idx));
    args.insert("z".to_string(), floats(DType::F32, &vec![9.0; m * 20]));
    args.insert("r".to_string(), floats(DType::F32, &vec![9.0; m * 16]));
    args.insert("m".to_string(), ArgValue::Int(m as i64));
    let after = check(&cc, dir.path(), "vector_loops", &f, &args, 2, 0.0);
    let arr = |k: &str| match after.get(k) {
        Some(ArgValue::Array(t)) => t.to_f64_vec(),
        _ => panic!("{k}"),
    };
    // All inputs are exact in binary; so is every result below.
    for r in 0..m {
        for k in 0..32 {
            let i = r * 32 + k;
            assert_eq!(arr("y")[i], a[i] * x[r] - b[i] / 2.0, "y[{r},{k}]");
            assert_eq!(arr("g")[i], a[r * 32 + idx[k] as usize], "g[{r},{k}]");
        }
        for k in 0..16 {
            assert_eq!(
                arr("d")[r * 16 + k],
                -d[r * 16 + k] * 3.0 + x[r],
                "d[{r},{k}]"
            );
            let want = x[r] + (0..3).map(|j| a[r * 32 + j * 8 + k]).sum::<f64>();
            assert_eq!(arr("r")[r * 16 + k], want, "r[{r},{k}]");
        }
        for k in 0..20 {
            assert_eq!(arr("z")[r * 20 + k], a[r * 32 + k] + 1.0, "z[{r},{k}]");
        }
    }
}

/// Loops that read float16/bfloat16 buffers and compute in float32: a machine-vector loop and
/// lane reductions of every lane count from 2 to 64. Every value and product is a multiple of
/// 1/16 well inside both types' range, so every result is exact in any summation order.
const WIDENING: &str = include_str!("../scripts/widening.sp");

#[test]
fn sixteen_bit_reads_widen_into_float_vectors() {
    let src = kernel_text(&emit_script(WIDENING));
    // One widening load per contiguous 16-bit read: the machine vector for the plain loop, the
    // lane vector of each reduction's width; the uniform read (X) stays a scalar conversion.
    for needle in [
        "sptir_vld_f16(&H[",
        "sptir_vld_bf16(&BH[",
        "sptir_wld2_f16(&H[",
        "sptir_wld4_bf16(&BH[",
        "sptir_wld8_f16(&H[",
        "sptir_wld16_bf16(&BH[",
        "sptir_wld32_f16(&H[",
        "sptir_wld64_f16(&H[",
        "sptir_h2f(X[",
    ] {
        assert!(src.contains(needle), "{needle} missing:\n{src}");
    }
    let Some(cc) = compiler() else {
        eprintln!("note: no C compiler runs here; skipping");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let f = parse(WIDENING);
    let m = 5usize;
    let h: Vec<f64> = (0..m * 64)
        .map(|v| ((v * 7) % 13) as f64 / 4.0 - 1.5)
        .collect();
    let bh: Vec<f64> = (0..m * 64)
        .map(|v| ((v * 5) % 11) as f64 / 8.0 - 0.5)
        .collect();
    let x: Vec<f64> = (0..m).map(|r| r as f64 * 0.5 - 1.0).collect();
    let mut args = HashMap::new();
    args.insert("h".to_string(), floats(DType::F16, &h));
    args.insert("bh".to_string(), floats(DType::BF16, &bh));
    args.insert("x".to_string(), floats(DType::F16, &x));
    args.insert("y".to_string(), floats(DType::F32, &vec![9.0; m * 64]));
    args.insert("s".to_string(), floats(DType::F32, &vec![0.5; m * 6]));
    args.insert("m".to_string(), ArgValue::Int(m as i64));
    // Independent results in f64 (exact, see WIDENING).
    let dot = |r: usize, a: &dyn Fn(usize) -> f64, b: &dyn Fn(usize) -> f64| {
        0.5 + (0..64).map(|k| a(r * 64 + k) * b(r * 64 + k)).sum::<f64>()
    };
    let (hf, bf, xf) = (|i: usize| h[i], |i: usize| bh[i], |i: usize| x[i / 64]);
    let mut want_s = Vec::new();
    for r in 0..m {
        want_s.extend([
            dot(r, &hf, &bf),
            dot(r, &hf, &bf),
            dot(r, &hf, &hf),
            dot(r, &bf, &bf),
            dot(r, &hf, &bf),
            dot(r, &hf, &xf),
        ]);
    }
    let want_y: Vec<f64> = (0..m * 64).map(|i| h[i] * x[i / 64] + bh[i]).collect();
    // No machine named (the portable element-by-element forms), AVX2 with F16C, and this
    // machine's own (AVX-512 where it has it): each against the interpreter, exactly.
    let module = emit_script(WIDENING);
    let mut want = args.clone();
    sparsetir_eval::run_func(&f, &mut want).expect("interpreter");
    assert_eq!(array(&want, "y"), want_y, "interpreter");
    assert_eq!(array(&want, "s"), want_s, "interpreter");
    for (flags, got) in run_on_machines(&cc, dir.path(), "widen", &module, &args) {
        assert_eq!(got["y"], want_y, "y with {flags:?}");
        assert_eq!(got["s"], want_s, "s with {flags:?}");
        assert_eq!(got["h"], h, "h read back with {flags:?}");
    }
}

/// `T.exp`, float `max` and `min` in vector loops and as `max`/`min` lane reductions
/// (`c/vector_math.rs`): the lane-wise helpers, on special values (NaN, infinities, signed
/// zeros, the overflow and underflow edges, results in the subnormals) and a sweep.
const VECTOR_MATH: &str = include_str!("../scripts/vector_math.sp");

#[test]
fn exp_max_and_min_stay_in_the_vector_loops() {
    let module = emit_script(VECTOR_MATH);
    let src = kernel_text(&module);
    for needle in [
        "sptir_v_f32_exp(",
        "sptir_v_f32_max(",
        "sptir_v_f32_min(",
        "sptir_v16_f32_max(",
        "sptir_v4_f32_min(",
        "sptir_v8_f32_exp(",
        "sptir_v64_f32_max(",
    ] {
        assert!(src.contains(needle), "{needle} missing:\n{src}");
    }
    // The nest (rnest) keeps one vector of lanes across its outer loop, totals taken once.
    let nest = src
        .find("for (int32_t j6 = 0;")
        .expect("rnest's outer loop");
    assert!(src[..nest].trim_end().ends_with("_v = {0};"), "{src}");
    assert_eq!(src.matches("_v = {0};").count(), 2, "{src}");
    // Nothing left to the C library's scalar functions, and no OpenMP reduction form.
    for absent in ["expf(", "omp simd"] {
        assert!(!src.contains(absent), "{absent} present:\n{src}");
    }
    let Some(cc) = compiler() else {
        eprintln!("note: no C compiler runs here; skipping");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let f = parse(VECTOR_MATH);
    let m = 4usize;
    let specials = [
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.0,
        -0.0,
        88.72,
        88.7229,
        89.5,
        100.0,
        -87.4,
        -90.0,
        -100.0,
        -103.9,
        -104.5,
        -200.0,
        1e-30,
    ];
    let mut a = Vec::new();
    for r in 0..m {
        for k in 0..64 {
            let v = match r {
                0 if k < specials.len() => specials[k],
                3 if k != 37 => f64::NAN,
                3 => -2.5,
                _ => (k as f64 - 31.5) * (0.37 + r as f64 * 0.61),
            };
            a.push(f64::from(v as f32));
        }
    }
    let x = [1.0, 0.5, -2.0, 3.0];
    let s0 = [-1000.0, 1000.0, 0.5, -1000.0, 0.25];
    let mut args = HashMap::new();
    args.insert("a".to_string(), floats(DType::F32, &a));
    args.insert("x".to_string(), floats(DType::F32, &x));
    args.insert("e".to_string(), floats(DType::F32, &vec![9.0; m * 64]));
    args.insert("y".to_string(), floats(DType::F32, &vec![9.0; m * 64]));
    let s_in: Vec<f64> = (0..m).flat_map(|_| s0).collect();
    args.insert("s".to_string(), floats(DType::F32, &s_in));
    args.insert("m".to_string(), ArgValue::Int(m as i64));
    // Direct computation: float operations rounded as the kernel's, the exponential in f64.
    let f32r = |v: f64| f64::from(v as f32);
    // `f64::max`/`min` ignore a NaN operand, as the kernels' `max`/`min` do.
    let (fmax, fmin) = (f64::max, f64::min);
    let mut want_e = Vec::new();
    let mut want_y = Vec::new();
    let mut want_s = Vec::new();
    for r in 0..m {
        let row = &a[r * 64..r * 64 + 64];
        for &v in row {
            want_e.push(f32r(f32r(f32r(v * x[r]).exp()) / x[r]));
            want_y.push(fmin(fmax(v, f32r(x[r] - 3.0)), x[r]));
        }
        want_s.push(row.iter().fold(s0[0], |acc, &v| fmax(acc, v)));
        want_s.push(row.iter().fold(s0[1], |acc, &v| fmin(acc, f32r(v * x[r]))));
        want_s.push(s0[2] + row.iter().map(|&v| f32r(f32r(v - x[r]).exp())).sum::<f64>());
        want_s.push(row.iter().fold(s0[3], |acc, &v| fmax(acc, v)));
        want_s.push(s0[4] + row.iter().map(|&v| f32r(f32r(v * x[r]).exp())).sum::<f64>());
    }
    // Within one ulp of the exponential (plus the division's rounding); special values exact.
    let mut interp = args.clone();
    sparsetir_eval::run_func(&f, &mut interp).expect("interpreter");
    let tiny = 2f64.powi(-148);
    for (flags, got) in run_on_machines(&cc, dir.path(), "vmath", &module, &args) {
        for (name, want, rel) in [
            ("e", &want_e, 2.4e-7),
            ("y", &want_y, 0.0),
            ("s", &want_s, 1e-6),
        ] {
            let what = format!("{name} with {flags:?}");
            assert_near(&what, &got[name], want, rel, tiny);
            // And the interpreter (the C library's exponential) agrees as closely.
            let what = format!("{what} against the interpreter");
            assert_near(&what, &got[name], &array(&interp, name), rel, tiny);
        }
    }
}

/// Rows of run-time length (a CSR matrix's): a vectorised loop written a machine vector at a
/// time while a whole one remains and element by element after (with `simd_masked_tail`, on
/// AVX-512, one masked step: nothing written past the row), and `max`/`min`/`+` lane
/// reductions with `simd_min_trip` (AVX-512 main loops; `min` and `+` also with the masked
/// last step), on rows of every length around the vector widths, with NaNs in a vector step
/// and in a tail.
const VECTOR_ROWS: &str = include_str!("../scripts/vector_rows.sp");

#[test]
fn rows_of_run_time_length_take_vectors_and_a_scalar_tail() {
    let module = emit_script(VECTOR_ROWS);
    let src = kernel_text(&module);
    for needle in [
        ">= SPTIR_VL_f32; j += SPTIR_VL_f32)",
        "sptir_v_f32_exp(",
        "sptir_v16_f32_max(",
        "sptir_v16_f32_min(",
        "sptir_v16_f32_exp(",
        "_mm512_mask_mov_ps(_mm512_set1_ps(NAN)",
        "_mm512_mask_storeu_ps(&E2[",
    ] {
        assert!(src.contains(needle), "{needle} missing:\n{src}");
    }
    let Some(cc) = compiler() else {
        eprintln!("note: no C compiler runs here; skipping");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let f = parse(VECTOR_ROWS);
    let lens = [0usize, 1, 15, 16, 17, 31, 32, 33, 47, 100];
    let m = lens.len();
    let mut p = vec![0i64];
    for l in lens {
        p.push(p.last().copied().unwrap_or(0) + l as i64);
    }
    let nnz = p[m] as usize;
    let mut a: Vec<f64> = (0..nnz)
        .map(|k| f64::from((((k * 29) % 41) as f32 - 20.0) * 0.37))
        .collect();
    // A NaN inside a vector step (row 7, length 33) and in the last elements (row 8, 47).
    a[p[7] as usize + 20] = f64::NAN;
    a[p[8] as usize + 45] = f64::NAN;
    let x: Vec<f64> = (0..m).map(|r| r as f64 * 0.25 - 1.0).collect();
    let s0 = [-1000.0, 1000.0, 0.5];
    let mut args = HashMap::new();
    args.insert("a".to_string(), floats(DType::F32, &a));
    args.insert("p".to_string(), ints(DType::I32, &p));
    args.insert("x".to_string(), floats(DType::F32, &x));
    args.insert("e".to_string(), floats(DType::F32, &vec![9.0; nnz]));
    // Sixteen elements past the last row: a masked step must leave them alone.
    args.insert("e2".to_string(), floats(DType::F32, &vec![9.0; nnz + 16]));
    args.insert("nnz16".to_string(), ArgValue::Int(nnz as i64 + 16));
    let s_in: Vec<f64> = (0..m).flat_map(|_| s0).collect();
    args.insert("s".to_string(), floats(DType::F32, &s_in));
    args.insert("m".to_string(), ArgValue::Int(m as i64));
    args.insert("mp1".to_string(), ArgValue::Int(m as i64 + 1));
    args.insert("nnz".to_string(), ArgValue::Int(nnz as i64));
    let f32r = |v: f64| f64::from(v as f32);
    // `f64::max`/`min` ignore a NaN operand, as the kernels' `max`/`min` do.
    let (fmax, fmin) = (f64::max, f64::min);
    let mut want_e = vec![0.0; nnz];
    let mut want_s = Vec::new();
    for r in 0..m {
        let row = p[r] as usize..p[r + 1] as usize;
        for k in row.clone() {
            want_e[k] = f32r(f32r(a[k] - x[r]).exp()) * 2.0;
        }
        let vals = &a[row];
        want_s.push(vals.iter().fold(s0[0], |u, &v| fmax(u, v)));
        want_s.push(vals.iter().fold(s0[1], |u, &v| fmin(u, f32r(v * x[r]))));
        want_s.push(
            s0[2]
                + vals
                    .iter()
                    .map(|&v| f32r(f32r(v - x[r]).exp()))
                    .sum::<f64>(),
        );
    }
    let mut want_e2 = want_e.clone();
    want_e2.extend([9.0; 16]);
    let mut interp = args.clone();
    sparsetir_eval::run_func(&f, &mut interp).expect("interpreter");
    for (flags, got) in run_on_machines(&cc, dir.path(), "vrows", &module, &args) {
        for (name, want, rel) in [
            ("e", &want_e, 1.2e-7),
            ("e2", &want_e2, 1.2e-7),
            ("s", &want_s, 1e-6),
        ] {
            let what = format!("{name} with {flags:?}");
            assert_near(&what, &got[name], want, rel, 0.0);
            let what = format!("{what} against the interpreter");
            assert_near(&what, &got[name], &array(&interp, name), rel, 0.0);
        }
    }
}

/// Vectorised loops that store `float` values into float16 and bfloat16 buffers: one narrowing
/// store per vector (`vcvtps2ph` with AVX-512 or F16C, integer rounding steps for bfloat16,
/// the scalar conversions elsewhere), rounding exactly as a scalar store rounds: ties to even,
/// overflow to infinity, subnormals kept, NaN stays NaN; a loop of run-time trip count ends
/// element by element.
const NARROWING: &str = include_str!("../scripts/narrowing.sp");

#[test]
fn sixteen_bit_stores_round_a_vector_at_a_time() {
    let module = emit_script(NARROWING);
    let src = kernel_text(&module);
    for needle in [
        "sptir_vst_f16(&H[",
        "sptir_vst_bf16(&B[",
        "for (; k1 < n; ++k1) {",
    ] {
        assert!(src.contains(needle), "{needle} missing:\n{src}");
    }
    let Some(cc) = compiler() else {
        eprintln!("note: no C compiler runs here; skipping");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let f = parse(NARROWING);
    let m = 3usize;
    // Ties of both types (to even, either way), overflow, subnormals, NaN, infinities, signed
    // zeros, then a sweep.
    let specials = [
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.0,
        -0.0,
        2f64.powi(-10),
        3.0 * 2f64.powi(-10),
        2.0 + 2f64.powi(-8),
        2.0 + 3.0 * 2f64.powi(-8),
        140000.0,
        -140000.0,
        1e-6,
        -3e-7,
        1e-9,
        3.0e38,
        -1.5e-39,
    ];
    let a: Vec<f64> = (0..m * 64)
        .map(|i| match specials.get(i) {
            Some(&v) => f64::from(v as f32),
            None => f64::from(((i * 37) % 101) as f32 * 0.173 - 8.0),
        })
        .collect();
    let n = 61usize;
    let mut args = HashMap::new();
    args.insert("a".to_string(), floats(DType::F32, &a));
    args.insert("h".to_string(), floats(DType::F16, &vec![7.0; m * 64]));
    args.insert("b".to_string(), floats(DType::BF16, &vec![7.0; m * 64]));
    args.insert("m".to_string(), ArgValue::Int(m as i64));
    args.insert("n".to_string(), ArgValue::Int(n as i64));
    let mut want = args.clone();
    sparsetir_eval::run_func(&f, &mut want).expect("interpreter");
    let (want_h, want_b) = (array(&want, "h"), array(&want, "b"));
    // The interpreter rounds as the evaluator does; spot-check it against direct rounding.
    // Ties: H = A / 2 + 1 halfway between float16 neighbours, B = A - 1 between bfloat16
    // ones, each to the even one.
    assert_eq!(
        (want_h[5], want_h[6]),
        (1.0, 1.0 + 2f64.powi(-9)),
        "float16 ties"
    );
    assert_eq!(
        (want_b[7], want_b[8]),
        (1.0, 1.0 + 2f64.powi(-6)),
        "bfloat16 ties"
    );
    assert!(
        want_h[9].is_infinite() && want_h[10].is_infinite(),
        "overflow"
    );
    for r in 0..m {
        for k in n..64 {
            assert_eq!(want_b[r * 64 + k], 7.0, "B[{r}, {k}] past n");
        }
    }
    for (flags, got) in run_on_machines(&cc, dir.path(), "narrow", &module, &args) {
        for (name, want) in [("h", &want_h), ("b", &want_b)] {
            for (i, (&g, &w)) in got[name].iter().zip(want.iter()).enumerate() {
                let same = (g.is_nan() && w.is_nan()) || (g == w && g.signum() == w.signum());
                assert!(same, "{name}[{i}] with {flags:?}: C {g}, interpreter {w}");
            }
        }
    }
}

/// The vector exponential's accuracy (`c/vector_math.rs`): within one ulp of `exp` computed in
/// double, on 2^18 inputs spread over every binade of its finite range (-104 to 89), on each
/// machine build.
#[test]
fn the_vector_exponential_is_within_one_ulp() {
    let Some(cc) = compiler() else {
        eprintln!("note: no C compiler runs here; skipping");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let module = emit_script(include_str!("../scripts/vector_exp.sp"));
    assert!(kernel_text(&module).contains("sptir_v_f32_exp("));
    // Bit patterns stepped evenly from 0 up to 104 and from 0 down to -104: every binade.
    let rows = 1 << 12;
    let top = 104f32.to_bits();
    let a: Vec<f64> = (0..rows * 64)
        .map(|k| {
            let bits = (top as u64 * (k as u64 / 2) / (rows as u64 * 32)) as u32;
            let x = f32::from_bits(bits);
            f64::from(if k % 2 == 0 { x.min(89.0) } else { -x })
        })
        .collect();
    let mut args = HashMap::new();
    args.insert("a".to_string(), floats(DType::F32, &a));
    args.insert("e".to_string(), floats(DType::F32, &vec![0.0; rows * 64]));
    args.insert("n".to_string(), ArgValue::Int(rows as i64));
    for (flags, got) in run_on_machines(&cc, dir.path(), "vexp", &module, &args) {
        let mut worst = (0.0f64, 0.0f64);
        for (&x, &g) in a.iter().zip(&got["e"]) {
            let w = x.exp();
            let wf = w as f32;
            let err = if wf.is_infinite() {
                if g.is_infinite() {
                    0.0
                } else {
                    f64::INFINITY
                }
            } else {
                // One ulp of the float nearest the true value (the subnormals' below 2^-126).
                let e = if wf == 0.0 {
                    -149
                } else {
                    (wf.abs().log2().floor() as i32 - 23).max(-149)
                };
                (g - w).abs() / 2f64.powi(e)
            };
            if err > worst.0 {
                worst = (err, x);
            }
        }
        assert!(
            worst.0 <= 1.0,
            "{flags:?}: {} ulp at exp({})",
            worst.0,
            worst.1
        );
    }
}

/// `T.Select` on a float comparison in vector loops (`vector_math`'s `sel_*`): taken where
/// neither value reads memory, left to `omp simd` where a value loads (the scalar `?:` would
/// skip that load); results equal a direct computation and the interpreter, NaNs included (a
/// NaN compares unequal to everything).
const VECTOR_SELECT: &str = include_str!("../scripts/vector_select.sp");

#[test]
fn selects_without_loads_in_their_values_take_vectors() {
    let module = emit_script(VECTOR_SELECT);
    let src = kernel_text(&module);
    for needle in ["sptir_v_f32_sel_gt(", "sptir_v_f32_sel_ne("] {
        assert!(src.contains(needle), "{needle} missing:\n{src}");
    }
    assert!(
        !src.contains("sel_le"),
        "a select whose value loads stays scalar:\n{src}"
    );
    assert_eq!(src.matches("omp simd").count(), 1, "{src}");
    let Some(cc) = compiler() else {
        eprintln!("note: no C compiler runs here; skipping");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let f = parse(VECTOR_SELECT);
    let m = 3usize;
    let x = [0.5f64, f64::NAN, -1.0];
    let mut a = Vec::new();
    for (r, &xr) in x.iter().enumerate() {
        for k in 0..64 {
            a.push(match k {
                7 => f64::NAN,
                9 => xr * 2.0,
                11 => xr,
                _ => f64::from(((k as f64 - 30.0) * 0.13 * (r as f64 + 1.0)) as f32),
            });
        }
    }
    let mut args = HashMap::new();
    args.insert("a".to_string(), floats(DType::F32, &a));
    args.insert("x".to_string(), floats(DType::F32, &x));
    for o in ["y", "z", "w"] {
        args.insert(o.to_string(), floats(DType::F32, &vec![5.0; m * 64]));
    }
    args.insert("m".to_string(), ArgValue::Int(m as i64));
    let f32r = |v: f64| f64::from(v as f32);
    let (mut wy, mut wz, mut ww) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..m {
        for k in 0..64 {
            let (v, xr) = (a[r * 64 + k], x[r]);
            wy.push(f32r(v * if v > xr { 1.0 } else { -2.0 }));
            wz.push(f32r(xr * if v != f32r(xr * 2.0) { -1.0 } else { 5.0 }));
            ww.push(if v <= xr { f32r(v + 1.0) } else { 0.0 });
        }
    }
    let mut interp = args.clone();
    sparsetir_eval::run_func(&f, &mut interp).expect("interpreter");
    for (flags, got) in run_on_machines(&cc, dir.path(), "vselect", &module, &args) {
        for (name, want) in [("y", &wy), ("z", &wz), ("w", &ww)] {
            let what = format!("{name} with {flags:?}");
            assert_near(&what, &got[name], want, 0.0, 0.0);
            assert_near(
                &format!("{what}, interpreter"),
                &got[name],
                &array(&interp, name),
                0.0,
                0.0,
            );
        }
    }
}
