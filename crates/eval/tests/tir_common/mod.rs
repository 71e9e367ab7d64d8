//! Shared helpers of the stage II/III interpreter tests: parsing, argument maps, deterministic
//! pseudo-random data, random CSR/BSR structures and float comparison.
#![allow(dead_code)]

use std::collections::HashMap;

use sparsetir_eval::{run_func, ArgValue, EvalError};
use sparsetir_formats::Tensor;
use sparsetir_ir::{DType, PrimFunc};

/// Parses one function, panicking with the diagnostics on failure (test scripts are trusted).
pub fn parse(src: &str) -> PrimFunc {
    match sparsetir_syntax::parse_func(src) {
        Ok(f) => f,
        Err(d) => panic!("script does not parse: {d:?}"),
    }
}

pub fn args(items: Vec<(&str, ArgValue)>) -> HashMap<String, ArgValue> {
    items.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

pub fn f32_arr(v: &[f64]) -> ArgValue {
    ArgValue::Array(Tensor::from_f64(DType::F32, v).expect("f32"))
}
pub fn f64_arr(v: &[f64]) -> ArgValue {
    ArgValue::Array(Tensor::from_f64(DType::F64, v).expect("f64"))
}
pub fn i32_arr(v: &[i64]) -> ArgValue {
    ArgValue::Array(Tensor::from_i64(DType::I32, v).expect("i32"))
}
pub fn arr(dt: DType, v: &[i64]) -> ArgValue {
    ArgValue::Array(Tensor::from_i64(dt, v).expect("host dtype"))
}
pub fn int(v: i64) -> ArgValue {
    ArgValue::Int(v)
}

/// Runs and panics on error.
pub fn run(f: &PrimFunc, a: &mut HashMap<String, ArgValue>) {
    if let Err(e) = run_func(f, a) {
        panic!("run failed: {} at {:?}", e.message, e.span);
    }
}

/// Runs expecting an error; checks `args` is unchanged and returns the error.
pub fn run_err(f: &PrimFunc, a: &HashMap<String, ArgValue>) -> EvalError {
    let mut b = a.clone();
    match run_func(f, &mut b) {
        Ok(()) => panic!("expected an error"),
        Err(e) => {
            assert_eq!(&b, a, "arguments changed on error");
            e
        }
    }
}

/// Runs expecting an error whose message contains every fragment and whose span covers `at`
/// in `src` (when given).
pub fn expect_err(
    src: &str,
    f: &PrimFunc,
    a: &HashMap<String, ArgValue>,
    fragments: &[&str],
    at: Option<&str>,
) {
    let e = run_err(f, a);
    for frag in fragments {
        assert!(
            e.message.contains(frag),
            "message `{}` lacks `{frag}`",
            e.message
        );
    }
    if let Some(at) = at {
        let text = src.get(e.span.range()).unwrap_or("");
        assert!(
            text.contains(at),
            "error `{}` located at `{text}`, expected a span containing `{at}`",
            e.message
        );
    }
}

pub fn out(a: &HashMap<String, ArgValue>, name: &str) -> Vec<f64> {
    match a.get(name) {
        Some(ArgValue::Array(t)) => t.to_f64_vec(),
        other => panic!("`{name}` is not an array: {other:?}"),
    }
}

pub fn out_i64(a: &HashMap<String, ArgValue>, name: &str) -> Vec<i64> {
    match a.get(name) {
        Some(ArgValue::Array(t)) => t.to_i64_vec(),
        other => panic!("`{name}` is not an array: {other:?}"),
    }
}

pub fn assert_close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let tol = 1e-4 * (1.0 + w.abs());
        assert!((g - w).abs() <= tol, "{what}[{i}]: got {g}, want {w}");
    }
}

/// A small deterministic generator (64-bit LCG, high bits).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407))
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// A float in `[-1, 1)` with few significant bits (sums stay exact in f32).
    pub fn small(&mut self) -> f64 {
        (self.below(17) as f64 - 8.0) / 8.0
    }
}

/// A random sparsity pattern of `rows × cols`: row 0 empty, row 1 full (when there are at
/// least 3 rows), the rest random. Returns `(indptr, indices)` with sorted indices.
pub fn random_pattern(rng: &mut Rng, rows: usize, cols: usize) -> (Vec<i64>, Vec<i64>) {
    let mut indptr = vec![0i64];
    let mut indices = Vec::new();
    for r in 0..rows {
        for c in 0..cols {
            let keep = match r {
                0 if rows >= 3 => false,
                1 if rows >= 3 => true,
                _ => rng.below(3) == 0,
            };
            if keep {
                indices.push(c as i64);
            }
        }
        indptr.push(indices.len() as i64);
    }
    (indptr, indices)
}
