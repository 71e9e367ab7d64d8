//! `sparsetir demo`: SpMM end to end on a generated input. Writes a random sparse matrix (with
//! empty rows and a full row) as `.mtx`, dense features as `.npy` and the catalog's csrmm script,
//! runs them through the same path as `sparsetir run`, and checks the result against a dense
//! product computed here.

use std::path::{Path, PathBuf};
use std::time::Instant;

use sparsetir_formats::{Coo, Field, Tensor};

use crate::Failure;

/// splitmix64: a tiny deterministic generator, so the demo's data depends only on the seed (not
/// on a random-number crate's version).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// A square matrix with skewed (power-law-like) row degrees, some empty rows and one full row.
pub fn generate_matrix(rows: usize, seed: u64) -> Coo {
    let mut rng = SplitMix(seed);
    let mut coords = Vec::new();
    let mut values = Vec::new();
    let max_deg = (rows / 4).max(1);
    for i in 0..rows {
        let deg = if i == rows / 2 {
            rows // a row holding every column
        } else if i % 7 == 3 {
            0 // empty rows
        } else {
            ((max_deg as f64) * rng.unit().powi(3)).ceil() as usize
        };
        let mut cols: Vec<usize> = if deg >= rows {
            (0..rows).collect()
        } else {
            (0..deg)
                .map(|_| (rng.next() % rows as u64) as usize)
                .collect()
        };
        cols.sort_unstable();
        cols.dedup();
        for j in cols {
            coords.push(vec![i as i64, j as i64]);
            values.push(((rng.unit() * 2.0 - 1.0) * 1000.0).round() / 1000.0);
        }
    }
    Coo {
        dims: vec![rows, rows],
        coords,
        values,
        field: Field::Real,
    }
}

pub fn run(dir: Option<PathBuf>, rows: usize, feat: usize, seed: u64) -> Result<(), Failure> {
    let dir = dir.unwrap_or_else(|| std::env::temp_dir().join("sparsetir-demo"));
    std::fs::create_dir_all(&dir)
        .map_err(|e| Failure(format!("error: cannot create {}: {e}", dir.display())))?;
    let a = generate_matrix(rows, seed);
    let mut rng = SplitMix(seed ^ 0x5eed);
    let b: Vec<f64> = (0..rows * feat).map(|_| rng.unit() * 2.0 - 1.0).collect();
    let mut b_t = Tensor::from_f64(sparsetir_ir::DType::F32, &b)?;
    b_t.shape = vec![rows, feat];

    let script = dir.join("csrmm.sp");
    let a_path = dir.join("A.mtx");
    let b_path = dir.join("B.npy");
    let c_path = dir.join("C.npy");
    let kernel =
        sparsetir_ops::get("csrmm").ok_or_else(|| Failure("error: csrmm missing".into()))?;
    std::fs::write(&script, kernel.source)
        .map_err(|e| Failure(format!("error: cannot write {}: {e}", script.display())))?;
    sparsetir_formats::write_mtx(&a_path, &a)?;
    sparsetir_formats::write_npy(&b_path, &b_t)?;

    let s = |p: &Path| p.display().to_string();
    println!(
        "sparsetir demo: SpMM C = A * B, A {rows}x{rows} with {} stored entries, B {rows}x{feat}",
        a.nnz()
    );
    println!(
        "  sparsetir run {} --bind A={} --bind B={} --out C={}",
        s(&script),
        s(&a_path),
        s(&b_path),
        s(&c_path)
    );
    let start = Instant::now();
    crate::cmd_run(
        &script,
        None,
        "eval",
        &[format!("A={}", s(&a_path)), format!("B={}", s(&b_path))],
        &[format!("C={}", s(&c_path))],
        &[],
    )?;
    let elapsed = start.elapsed();

    // Independent dense reference: C = dense(A) * B, in f64.
    let c = sparsetir_formats::read_npy(&c_path)?;
    if c.shape != [rows, feat] {
        return Err(Failure(format!(
            "error: C has shape {:?}, expected [{rows}, {feat}]",
            c.shape
        )));
    }
    let mut dense_a = vec![0.0f64; rows * rows];
    for (ij, v) in a.coords.iter().zip(&a.values) {
        dense_a[ij[0] as usize * rows + ij[1] as usize] += v;
    }
    let mut max_err = 0.0f64;
    for i in 0..rows {
        for k in 0..feat {
            let want: f64 = (0..rows)
                .map(|j| dense_a[i * rows + j] * b_t.get_f64(j * feat + k))
                .sum();
            let got = c.get_f64(i * feat + k);
            let err = (got - want).abs() / want.abs().max(1.0);
            max_err = max_err.max(err);
        }
    }
    println!(
        "  reference evaluator: {:.1} ms; max relative error vs dense: {max_err:.2e}",
        elapsed.as_secs_f64() * 1e3
    );
    if max_err > 1e-4 {
        return Err(Failure(format!(
            "error: result differs from the dense reference (max relative error {max_err:.3e})"
        )));
    }
    println!("  OK: result written to {}", s(&c_path));
    Ok(())
}
