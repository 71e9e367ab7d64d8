//! Helpers shared by the CLI's end-to-end tests: running the binary, deterministic test data
//! (matrices, dense tensors, ELL and raw CSR inputs) and a scratch directory of data files.
//! Not every test file uses every item.

#![allow(dead_code)]

pub mod backends;

use std::path::PathBuf;
use std::process::{Command, Output};

use sparsetir_formats::{write_mtx, write_npy, Coo, Field, Tensor};
use sparsetir_ir::DType;

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_sparsetir")
}

/// The kernel cache of one test file, under the target directory (never the user's cache).
pub fn cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("cli-{}-cache", env!("CARGO_CRATE_NAME")))
}

/// Runs the binary with `args`, its kernel cache in [`cache_dir`].
pub fn run(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env("SPARSETIR_CACHE_DIR", cache_dir())
        .output()
        .expect("binary runs")
}

/// Whether a C compiler (`$CC`, else `cc`) runs; prints a note when not.
pub fn have_cc() -> bool {
    let cc = std::env::var("CC")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .unwrap_or_else(|| "cc".into());
    let mut words = cc.split_whitespace();
    let program = words.next().unwrap_or("cc").to_string();
    let ok = Command::new(program)
        .args(words)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("note: skipping: no C compiler (`{cc} --version` fails)");
    }
    ok
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A user error: exit status 1, every needle in stderr, no panic.
pub fn assert_user_error(o: &Output, needles: &[&str]) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(1), "stderr: {e}");
    for n in needles {
        assert!(e.contains(n), "expected `{n}` in: {e}");
    }
    assert!(!e.contains("panicked"), "{e}");
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Deterministic xorshift data, independent of the code under test.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn val(&mut self) -> f64 {
        ((self.next() % 2001) as f64 - 1000.0) / 500.0
    }
}

/// A dense m×n matrix with empty rows (every third), one full row (row 1 when m > 1), and random
/// entries elsewhere; returned dense (row-major) and as COO of its nonzeros.
pub fn random_matrix(m: usize, n: usize, seed: u64) -> (Vec<f64>, Coo) {
    let mut rng = Rng(seed | 1);
    let mut dense = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let keep = if i == 1 || m == 1 {
                true
            } else if i % 3 == 2 {
                false
            } else {
                rng.next().is_multiple_of(3)
            };
            if keep {
                let mut v = rng.val();
                if v == 0.0 {
                    v = 0.5;
                }
                dense[i * n + j] = v;
            }
        }
    }
    (dense.clone(), coo_of(m, n, &dense))
}

/// The nonzeros of a dense row-major m×n matrix as COO.
pub fn coo_of(m: usize, n: usize, dense: &[f64]) -> Coo {
    let mut coords = Vec::new();
    let mut values = Vec::new();
    for i in 0..m {
        for j in 0..n {
            if dense[i * n + j] != 0.0 {
                coords.push(vec![i as i64, j as i64]);
                values.push(dense[i * n + j]);
            }
        }
    }
    Coo {
        dims: vec![m, n],
        coords,
        values,
        field: Field::Real,
    }
}

/// A random f32 tensor of `shape`, and its values (f32-rounded, as the reference input).
pub fn dense_tensor(shape: &[usize], seed: u64) -> (Vec<f64>, Tensor) {
    let n: usize = shape.iter().product();
    let mut rng = Rng(seed | 1);
    let v: Vec<f64> = (0..n).map(|_| rng.val()).collect();
    let mut t = Tensor::from_f64(DType::F32, &v).unwrap();
    t.shape = shape.to_vec();
    (t.to_f64_vec(), t)
}

pub fn close(got: f64, want: f64) -> bool {
    (got - want).abs() <= 1e-5 * want.abs().max(1.0)
}

/// A temporary directory of scripts and data files.
pub struct Dir(tempfile::TempDir);
impl Dir {
    pub fn new() -> Dir {
        Dir(tempfile::tempdir().unwrap())
    }
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }
    pub fn s(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }
    /// Writes the catalog kernel's script as `<kernel>.sp`; returns its path.
    pub fn script(&self, kernel: &str) -> String {
        let src = sparsetir_ops::get(kernel)
            .expect("kernel in catalog")
            .source;
        std::fs::write(self.path(&format!("{kernel}.sp")), src).unwrap();
        self.s(&format!("{kernel}.sp"))
    }
    pub fn write(&self, name: &str, text: &str) -> String {
        std::fs::write(self.path(name), text).unwrap();
        self.s(name)
    }
    /// `BUF=<path of file>`.
    pub fn bind(&self, buf: &str, file: &str) -> String {
        format!("{buf}={}", self.s(file))
    }
}

pub const ELL_SPMM: &str = r#"
@T.prim_func
def ell_spmm(a: T.handle, b: T.handle, c: T.handle, indices: T.handle,
             m: T.int32, n: T.int32, nnz_cols: T.int32, feat_size: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_fixed(I, (n, nnz_cols), indices, "int32")
    J_detach = T.sp.dense_fixed(n)
    K = T.sp.dense_fixed(feat_size)
    A = T.sp.match_buffer(a, (I, J), "float32")
    B = T.sp.match_buffer(b, (J_detach, K), "float32")
    C = T.sp.match_buffer(c, (I, K), "float32")
    with T.sp.iteration([I, J, K], "SRS", "ell_spmm") as [i, j, k]:
        with T.init():
            C[i, k] = T.float32(0)
        C[i, k] = C[i, k] + A[i, j] * B[j, k]
"#;

/// An m×n matrix with exactly `c` entries per row.
pub fn ell_matrix(m: usize, n: usize, c: usize, seed: u64) -> Vec<f64> {
    let mut rng = Rng(seed | 1);
    let mut dense = vec![0.0; m * n];
    for i in 0..m {
        let mut placed = 0;
        while placed < c {
            let j = (rng.next() % n as u64) as usize;
            if dense[i * n + j] == 0.0 {
                dense[i * n + j] = rng.val().abs() + 0.25;
                placed += 1;
            }
        }
    }
    dense
}

/// Writes a 5×4 `a.mtx`, a `b.npy` of `b_shape` (float64 when `b_f64`, else float32) and the
/// `csrmm` script into `d`; returns the script's path.
pub fn csrmm_files(d: &Dir, b_shape: &[usize], b_f64: bool) -> String {
    let (_, coo) = random_matrix(5, 4, 71);
    write_mtx(d.path("a.mtx"), &coo).unwrap();
    let (v, mut bt) = dense_tensor(b_shape, 72);
    if b_f64 {
        bt = Tensor::from_f64(DType::F64, &v).unwrap();
        bt.shape = b_shape.to_vec();
    }
    write_npy(d.path("b.npy"), &bt).unwrap();
    d.script("csrmm")
}

/// CSR arrays bound directly (`--bind indptr=... --bind indices=... --bind a=...`), as a scipy
/// user would, with `--set` for the sizes the arrays do not imply, and a 4×2 `B` (seed 91):
/// writes the files and returns the `run` arguments that bind them (no script, no `--out`).
pub fn raw_csr_files(d: &Dir, indptr: &[i64], indices: &[i64], values: &[f64]) -> Vec<String> {
    let ip = Tensor::from_i64(DType::I32, indptr).unwrap();
    let ix = Tensor::from_i64(DType::I32, indices).unwrap();
    let va = Tensor::from_f64(DType::F32, values).unwrap();
    write_npy(d.path("indptr.npy"), &ip).unwrap();
    write_npy(d.path("indices.npy"), &ix).unwrap();
    write_npy(d.path("vals.npy"), &va).unwrap();
    let (_, bt) = dense_tensor(&[4, 2], 91);
    write_npy(d.path("b.npy"), &bt).unwrap();
    vec![
        "--set".into(),
        "m=3".into(),
        "--bind".into(),
        d.bind("indptr", "indptr.npy"),
        "--bind".into(),
        d.bind("indices", "indices.npy"),
        "--bind".into(),
        d.bind("a", "vals.npy"),
        "--bind".into(),
        d.bind("B", "b.npy"),
    ]
}

/// Whether the host C++ compiler the emulator uses runs.
pub fn have_cxx() -> bool {
    let ok = std::process::Command::new(std::env::var("CXX").unwrap_or_else(|_| "c++".into()))
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("note: skipping: no C++ compiler for the CUDA emulator");
    }
    ok
}
