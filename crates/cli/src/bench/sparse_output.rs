//! `sparsetir bench spgemm|spadd --matrix F`: the sparse-output catalog kernels (issue 15) with
//! their default CPU schedules. SpGEMM computes `C = A · A` (`A · Aᵀ` when `A` is not square),
//! sparse add `C = A + Aᵀ` (square `A`: two different structures). A timed run is the whole
//! product as a library call makes it: symbolic phase, allocation of `C`, numeric phase. Every
//! measured output is checked against a reference computed here in f64 (a per-row dense
//! accumulator), structure and values.
//!
//! GFLOP/s: SpGEMM counts 2 flops per multiply-add of Gustavson's algorithm (the sum over the
//! stored `(i, j)` of `A` of the stored entries of row `j` of `B`), sparse add one per stored
//! entry of `C` — the counts of `../shared/bench/peers.py`.

use std::collections::HashMap;
use std::io::Write as _;

use serde_json::json;
use sparsetir_eval::ArgValue;
use sparsetir_runtime::assembly::AssembledKernel;

use super::{
    cpu_setup, f32_tensor, i32_tensor, load_csr, parse_dtype, relative_error, schedule_of, stem,
    Csr, Options, TOLERANCE,
};
use crate::Failure;
use sparsetir_ir::DType;

/// A sparse-output operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SparseOp {
    /// `C = A · A` (or `A · Aᵀ`).
    Spgemm,
    /// `C = A + Aᵀ`.
    Spadd,
}

impl SparseOp {
    /// The operator named on the command line, if it is one of these.
    pub fn parse(s: &str) -> Option<SparseOp> {
        match s {
            "spgemm" => Some(SparseOp::Spgemm),
            "spadd" => Some(SparseOp::Spadd),
            _ => None,
        }
    }

    /// The command-line name, which is also the catalog kernel's.
    pub fn name(self) -> &'static str {
        match self {
            SparseOp::Spgemm => "spgemm",
            SparseOp::Spadd => "spadd",
        }
    }

    /// The second operand: `A` or `Aᵀ`.
    pub fn second(self, a: &Csr) -> Result<Csr, String> {
        match self {
            SparseOp::Spgemm if a.rows == a.cols => Ok(a.clone()),
            SparseOp::Spgemm => transpose(a),
            SparseOp::Spadd if a.rows == a.cols => transpose(a),
            SparseOp::Spadd => Err(format!(
                "spadd computes A + Aᵀ and needs a square matrix, got {} x {}",
                a.rows, a.cols
            )),
        }
    }

    /// Floating-point operations of one product, as the peers count them.
    pub fn flops(self, a: &Csr, b: &Csr, c: &Csr) -> f64 {
        match self {
            SparseOp::Spgemm => {
                let madds: u64 = a
                    .indices
                    .iter()
                    .map(|&j| (b.indptr[j as usize + 1] - b.indptr[j as usize]) as u64)
                    .sum();
                2.0 * madds as f64
            }
            SparseOp::Spadd => c.nnz() as f64,
        }
    }

    /// `C` in f64: a dense accumulator per row, the row's columns sorted.
    pub fn reference(self, a: &Csr, b: &Csr) -> (Vec<i32>, Vec<i32>, Vec<f64>) {
        let cols = b.cols;
        let mut acc = vec![0.0f64; cols];
        let mut seen = vec![usize::MAX; cols];
        let (mut indptr, mut indices, mut values) = (vec![0i32], Vec::new(), Vec::new());
        for i in 0..a.rows {
            let mut row: Vec<i32> = Vec::new();
            let mut add = |j: i32, v: f64| {
                let ju = j as usize;
                if seen[ju] != i {
                    seen[ju] = i;
                    acc[ju] = 0.0;
                    row.push(j);
                }
                acc[ju] += v;
            };
            let range = |m: &Csr, r: usize| m.indptr[r] as usize..m.indptr[r + 1] as usize;
            match self {
                SparseOp::Spgemm => {
                    for p in range(a, i) {
                        let (k, av) = (a.indices[p] as usize, a.values[p] as f64);
                        for q in range(b, k) {
                            add(b.indices[q], av * b.values[q] as f64);
                        }
                    }
                }
                SparseOp::Spadd => {
                    for p in range(a, i) {
                        add(a.indices[p], a.values[p] as f64);
                    }
                    for q in range(b, i) {
                        add(b.indices[q], b.values[q] as f64);
                    }
                }
            }
            row.sort_unstable();
            for j in row {
                indices.push(j);
                values.push(acc[j as usize]);
            }
            indptr.push(indices.len() as i32);
        }
        (indptr, indices, values)
    }
}

/// `a` transposed (CSR of `aᵀ`, columns sorted): the CSC arrays of `a` (`formats`' stable
/// counting-sort transpose).
pub fn transpose(a: &Csr) -> Result<Csr, String> {
    let csr = sparsetir_formats::Csr::<f32, i32>::try_new(
        a.rows,
        a.cols,
        a.indptr.clone(),
        a.indices.clone(),
        a.values.clone(),
        true,
    )
    .map_err(|e| e.to_string())?;
    let (indptr, indices, values) = csr.to_csc().map_err(|e| e.to_string())?.into_parts();
    Ok(Csr {
        rows: a.cols,
        cols: a.rows,
        indptr,
        indices,
        values,
    })
}

/// The kernel's arguments for operands `a` and `b` (the output is assembled by the run).
pub fn arguments(op: SparseOp, a: &Csr, b: &Csr) -> HashMap<String, ArgValue> {
    let mut args = HashMap::new();
    args.insert("a".into(), f32_tensor(vec![a.nnz()], &a.values));
    args.insert("b".into(), f32_tensor(vec![b.nnz()], &b.values));
    args.insert("a_indptr".into(), i32_tensor(&a.indptr));
    args.insert("a_indices".into(), i32_tensor(&a.indices));
    args.insert("b_indptr".into(), i32_tensor(&b.indptr));
    args.insert("b_indices".into(), i32_tensor(&b.indices));
    args.insert("m".into(), ArgValue::Int(a.rows as i64));
    args.insert("nnz_a".into(), ArgValue::Int(a.nnz() as i64));
    args.insert("nnz_b".into(), ArgValue::Int(b.nnz() as i64));
    match op {
        SparseOp::Spgemm => {
            args.insert("k".into(), ArgValue::Int(a.cols as i64));
            args.insert("n".into(), ArgValue::Int(b.cols as i64));
        }
        SparseOp::Spadd => {
            args.insert("n".into(), ArgValue::Int(a.cols as i64));
        }
    }
    args
}

/// The assembled `C` of a run: (indptr, indices, values).
fn output(args: &HashMap<String, ArgValue>) -> Option<(Vec<i64>, Vec<i64>, Vec<f64>)> {
    let get = |n: &str| match args.get(n) {
        Some(ArgValue::Array(t)) => Some(t),
        _ => None,
    };
    Some((
        get("c_indptr")?.to_i64_vec(),
        get("c_indices")?.to_i64_vec(),
        get("c")?.to_f64_vec(),
    ))
}

/// One measured matrix.
pub struct SparseCase {
    pub op: SparseOp,
    pub matrix: String,
    pub rows: usize,
    pub cols: usize,
    pub nnz: usize,
    pub nnz_c: usize,
    pub threads: usize,
    pub seconds: f64,
    pub gflops: f64,
    pub check: bool,
    pub relerr: f64,
    /// Both phases built into an empty cache: front end, C compiler, load.
    pub compile_seconds: f64,
    /// Both phases again through the user's cache (front end and load).
    pub load_seconds: f64,
    /// How the output was assembled: the staged workspace the runs used (`staged`: bitmap,
    /// `staged_dense` / `staged_groups`: byte marks) or `two_phase` (symbolic + numeric).
    pub assembly: String,
}

impl SparseCase {
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "op": self.op.name(),
            "matrix": self.matrix,
            "rows": self.rows,
            "cols": self.cols,
            "nnz": self.nnz,
            "nnz_c": self.nnz_c,
            "feat": 1,
            "format": "csr",
            "threads": self.threads,
            "seconds": self.seconds,
            "gflops": self.gflops,
            "check": self.check,
            "relerr": self.relerr,
            "compile_seconds": self.compile_seconds,
            "load_seconds": self.load_seconds,
            "dtype": "float32",
            "assembly": self.assembly,
        })
    }
}

/// Runs `sparsetir bench spgemm|spadd`.
pub fn run(op: SparseOp, o: &Options) -> Result<(), Failure> {
    if o.device != "cpu" {
        return Err(Failure(format!(
            "error: --device {}: {} assembles a sparse output, which runs on the CPU backend only",
            o.device,
            op.name()
        )));
    }
    if parse_dtype(&o.dtype)? != DType::F32 {
        return Err(Failure(format!(
            "error: --dtype {}: {} takes float32 operands",
            o.dtype.trim(),
            op.name()
        )));
    }
    if o.format.trim() != "csr" {
        return Err(Failure(format!(
            "error: format `{}` is not available for {} (its operands and output are csr)",
            o.format.trim(),
            op.name()
        )));
    }
    let f = sparsetir_ops::load(op.name())?;
    let schedule = schedule_of(o, sparsetir_ops::cpu_schedule(op.name()))?;
    let (threads, compile_opts, timing) = cpu_setup(o);
    if o.print_c {
        let k = AssembledKernel::build(&f, schedule.as_deref(), &[], &compile_opts)?;
        for (phase, src) in k.sources() {
            println!("/* phase: {} */", phase.name());
            print!("{src}");
        }
        return Ok(());
    }
    if o.matrices.is_empty() {
        return Err(Failure("error: give at least one --matrix FILE.mtx".into()));
    }
    let mut operands = Vec::new();
    for p in &o.matrices {
        let a = load_csr(p)?;
        let b = op
            .second(&a)
            .map_err(|e| Failure(format!("error: {}: {e}", p.display())))?;
        operands.push((stem(p), a, b));
    }
    // Cold: both phases from the stage-I function into an empty cache (the compile time);
    // then through the user's cache (the kernel that is timed).
    let cold_dir = std::env::temp_dir().join(format!(
        "sparsetir-bench-cold-{}-{}",
        std::process::id(),
        op.name()
    ));
    let cold_opts = sparsetir_runtime::CompileOptions {
        cache_dir: Some(cold_dir.clone()),
        ..compile_opts.clone()
    };
    let start = std::time::Instant::now();
    let cold = AssembledKernel::build(&f, schedule.as_deref(), &[], &cold_opts);
    let compile_seconds = start.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&cold_dir);
    cold?;
    let start = std::time::Instant::now();
    let kernel = AssembledKernel::build(&f, schedule.as_deref(), &[], &compile_opts)?;
    let load_seconds = start.elapsed().as_secs_f64();
    let mut results = Vec::new();
    let stdout = std::io::stdout();
    for (name, a, b) in &operands {
        let mut args = arguments(op, a, b);
        let t = kernel.time(&mut args, timing)?;
        let (indptr, indices, values) = op.reference(a, b);
        let (check, relerr) = match output(&args) {
            Some((gi, gj, gv)) => {
                let same = gi.iter().copied().eq(indptr.iter().map(|&x| x as i64))
                    && gj.iter().copied().eq(indices.iter().map(|&x| x as i64));
                let err = if same {
                    relative_error(&gv, &values)
                } else {
                    f64::INFINITY
                };
                (err <= TOLERANCE, err)
            }
            None => (false, f64::INFINITY),
        };
        let c = Csr {
            rows: a.rows,
            cols: b.cols,
            indptr,
            indices,
            values: Vec::new(),
        };
        let seconds = t.median;
        let assembly = match kernel.last_workspace() {
            Some(ws) => ws.name().to_string(),
            None => "two_phase".to_string(),
        };
        let r = SparseCase {
            op,
            matrix: name.clone(),
            rows: a.rows,
            cols: a.cols,
            nnz: a.nnz(),
            nnz_c: c.nnz(),
            threads,
            seconds,
            gflops: if seconds > 0.0 {
                op.flops(a, b, &c) / seconds / 1e9
            } else {
                0.0
            },
            check,
            relerr,
            compile_seconds,
            load_seconds,
            assembly,
        };
        if o.json {
            let mut lock = stdout.lock();
            let _ = writeln!(lock, "{}", r.to_json());
            let _ = lock.flush();
        }
        results.push(r);
    }
    if !o.json {
        println!(
            "{:<7} {:<28} {:>9} {:>9} {:>10} {:>11} {:>7} {:>12} {:>9} {:>6}  assembly",
            "op",
            "matrix",
            "rows",
            "cols",
            "nnz",
            "nnz(C)",
            "threads",
            "median ms",
            "GFLOP/s",
            "check"
        );
        for r in &results {
            println!(
                "{:<7} {:<28} {:>9} {:>9} {:>10} {:>11} {:>7} {:>12.4} {:>9.3} {:>6}  {}",
                r.op.name(),
                r.matrix,
                r.rows,
                r.cols,
                r.nnz,
                r.nnz_c,
                r.threads,
                r.seconds * 1e3,
                r.gflops,
                r.check,
                r.assembly
            );
        }
    }
    if results.iter().any(|r| !r.check) {
        return Err(Failure(
            "error: some outputs differ from the reference (check: false)".into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> Csr {
        // [[1, 0, 2], [0, 0, 0], [0, 3, 4]]
        Csr {
            rows: 3,
            cols: 3,
            indptr: vec![0, 2, 2, 4],
            indices: vec![0, 2, 1, 2],
            values: vec![1.0, 2.0, 3.0, 4.0],
        }
    }

    fn dense(m: &Csr) -> Vec<Vec<f64>> {
        let mut d = vec![vec![0.0; m.cols]; m.rows];
        for (i, row) in d.iter_mut().enumerate() {
            for p in m.indptr[i] as usize..m.indptr[i + 1] as usize {
                row[m.indices[p] as usize] += m.values[p] as f64;
            }
        }
        d
    }

    #[test]
    fn references_equal_dense_products() {
        let a = small();
        let at = transpose(&a).unwrap();
        let (da, dat) = (dense(&a), dense(&at));
        for i in 0..3 {
            for j in 0..3 {
                assert_eq!(dat[j][i], da[i][j]);
            }
        }
        let (ip, ix, v) = SparseOp::Spgemm.reference(&a, &a);
        // A·A = [[1, 6, 10], [0, 0, 0], [0, 12, 16]]: (0,0)=1, (0,1)=2*3, (0,2)=1*2+2*4, ...
        assert_eq!(ip, vec![0, 3, 3, 5]);
        assert_eq!(ix, vec![0, 1, 2, 1, 2]);
        assert_eq!(v, vec![1.0, 6.0, 10.0, 12.0, 16.0]);
        let (ip, ix, v) = SparseOp::Spadd.reference(&a, &at);
        // A + Aᵀ = [[2, 0, 2], [0, 0, 3], [2, 3, 8]].
        assert_eq!(ip, vec![0, 2, 3, 6]);
        assert_eq!(ix, vec![0, 2, 2, 0, 1, 2]);
        assert_eq!(v, vec![2.0, 2.0, 3.0, 2.0, 3.0, 8.0]);
        let c = Csr {
            rows: 3,
            cols: 3,
            indptr: ip,
            indices: ix,
            values: Vec::new(),
        };
        assert_eq!(SparseOp::Spadd.flops(&a, &at, &c), 6.0);
        // Row 0 of A reads rows 0 (2 entries) and 2 (2); row 2 reads rows 1 (0) and 2 (2).
        assert_eq!(SparseOp::Spgemm.flops(&a, &a, &c), 2.0 * 6.0);
    }

    #[test]
    fn spadd_needs_a_square_matrix() {
        let a = Csr {
            rows: 2,
            cols: 3,
            indptr: vec![0, 1, 1],
            indices: vec![2],
            values: vec![1.0],
        };
        assert!(SparseOp::Spadd.second(&a).is_err());
        let b = SparseOp::Spgemm.second(&a).unwrap();
        assert_eq!((b.rows, b.cols), (3, 2));
        assert_eq!(b.indptr, vec![0, 0, 0, 1]);
    }
}
