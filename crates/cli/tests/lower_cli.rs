//! End-to-end tests of `sparsetir lower` (stages 1–3, `--print-after`, located errors) and of
//! `sparsetir run --backend interp`: every run scenario of `run.rs` is repeated with both
//! backends, and the interpreter's output files must match the reference evaluator's.

use std::path::PathBuf;
use std::process::{Command, Output};

use sparsetir_formats::{read_mtx, read_npy, write_mtx, write_npy, write_tns, Coo, Field, Tensor};
use sparsetir_ir::equal::module_eq;
use sparsetir_ir::printer::print_module;
use sparsetir_ir::{verify_func, DType, Stage};
use sparsetir_syntax::parse_module;
use sparsetir_transform::{lower, PipelineOptions};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_sparsetir")
}

fn run(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .output()
        .expect("binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Deterministic xorshift data, independent of the code under test.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn val(&mut self) -> f64 {
        ((self.next() % 2001) as f64 - 1000.0) / 500.0
    }
}

/// A dense m×n matrix with empty rows (every third), one full row (row 1 when m > 1), and random
/// entries elsewhere; returned dense (row-major) and as COO of its nonzeros.
fn random_matrix(m: usize, n: usize, seed: u64) -> (Vec<f64>, Coo) {
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

fn coo_of(m: usize, n: usize, dense: &[f64]) -> Coo {
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

fn dense_tensor(shape: &[usize], seed: u64) -> (Vec<f64>, Tensor) {
    let n: usize = shape.iter().product();
    let mut rng = Rng(seed | 1);
    let v: Vec<f64> = (0..n).map(|_| rng.val()).collect();
    let mut t = Tensor::from_f64(DType::F32, &v).unwrap();
    t.shape = shape.to_vec();
    (t.to_f64_vec(), t)
}

fn close(got: f64, want: f64) -> bool {
    (got - want).abs() <= 1e-5 * want.abs().max(1.0)
}

struct Dir(tempfile::TempDir);
impl Dir {
    fn new() -> Dir {
        Dir(tempfile::tempdir().unwrap())
    }
    fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }
    fn s(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }
    fn script(&self, kernel: &str) -> String {
        let src = sparsetir_ops::get(kernel)
            .expect("kernel in catalog")
            .source;
        std::fs::write(self.path(&format!("{kernel}.sp")), src).unwrap();
        self.s(&format!("{kernel}.sp"))
    }
    fn write(&self, name: &str, text: &str) -> String {
        std::fs::write(self.path(name), text).unwrap();
        self.s(name)
    }
    fn bind(&self, buf: &str, file: &str) -> String {
        format!("{buf}={}", self.s(file))
    }
}

// ------------------------------------------------------------------------------------------
// `run --backend interp` against `run --backend eval`

/// Runs `sparsetir run SCRIPT ARGS... --out BUF=<backend>_FILE...` with each backend, checks
/// both succeed, and compares every output file of the interpreter with the evaluator's.
fn same_outputs(d: &Dir, script: &str, args: &[String], outs: &[(&str, &str)]) {
    for backend in ["eval", "interp"] {
        let mut all: Vec<String> = vec!["run".into(), script.into(), "--backend".into()];
        all.push(backend.into());
        all.extend(args.iter().cloned());
        for (buf, file) in outs {
            all.push("--out".into());
            all.push(d.bind(buf, &format!("{backend}_{file}")));
        }
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        let o = run(&refs);
        assert!(o.status.success(), "{backend} failed: {}", stderr(&o));
    }
    for (buf, file) in outs {
        let (e, i) = (
            d.path(&format!("eval_{file}")),
            d.path(&format!("interp_{file}")),
        );
        if file.ends_with(".npy") {
            let (e, i) = (read_npy(&e).unwrap(), read_npy(&i).unwrap());
            assert_eq!(e.shape, i.shape, "{buf}");
            assert_eq!(e.dtype(), i.dtype(), "{buf}");
            let (ev, iv) = (e.to_f64_vec(), i.to_f64_vec());
            for (k, (a, b)) in ev.iter().zip(&iv).enumerate() {
                assert!(close(*b, *a), "{buf}[{k}]: interp {b}, eval {a}");
            }
        } else {
            let (e, i) = if file.ends_with(".mtx") {
                (read_mtx(&e).unwrap(), read_mtx(&i).unwrap())
            } else {
                (
                    sparsetir_formats::read_tns(&e).unwrap(),
                    sparsetir_formats::read_tns(&i).unwrap(),
                )
            };
            assert_eq!(e.dims, i.dims, "{buf}");
            assert_eq!(e.coords, i.coords, "{buf}");
            for (k, (a, b)) in e.values.iter().zip(&i.values).enumerate() {
                assert!(close(*b, *a), "{buf} entry {k}: interp {b}, eval {a}");
            }
        }
    }
}

/// Runs the same failing command with each backend: both exit 1 with the same message, which
/// holds every needle, and no output file is written.
fn same_error(args: &[&str], needles: &[&str]) {
    let mut msgs = Vec::new();
    for backend in ["eval", "interp"] {
        let mut all = args.to_vec();
        all.extend(["--backend", backend]);
        let o = run(&all);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{backend}: {e}");
        assert!(!e.contains("panicked"), "{e}");
        for n in needles {
            assert!(e.contains(n), "{backend}: expected `{n}` in: {e}");
        }
        msgs.push(e);
    }
    assert_eq!(msgs[0], msgs[1]);
}

fn csrmm_case(m: usize, n: usize, k: usize, seed: u64) {
    let d = Dir::new();
    let (_, coo) = random_matrix(m, n, seed);
    let (_, bt) = dense_tensor(&[n, k], seed + 1);
    write_mtx(d.path("a.mtx"), &coo).unwrap();
    write_npy(d.path("b.npy"), &bt).unwrap();
    let script = d.script("csrmm");
    let args = [
        "--bind".into(),
        d.bind("A", "a.mtx"),
        "--bind".into(),
        d.bind("B", "b.npy"),
    ];
    same_outputs(&d, &script, &args, &[("C", "c.npy")]);
}

#[test]
fn interp_csrmm_random_with_empty_and_full_rows() {
    csrmm_case(9, 7, 5, 11);
}

#[test]
fn interp_csrmm_one_by_one() {
    csrmm_case(1, 1, 3, 5);
}

#[test]
fn interp_csrmm_empty_matrix() {
    let d = Dir::new();
    let coo = Coo {
        dims: vec![4, 3],
        coords: vec![],
        values: vec![],
        field: Field::Real,
    };
    write_mtx(d.path("a.mtx"), &coo).unwrap();
    let (_, bt) = dense_tensor(&[3, 2], 3);
    write_npy(d.path("b.npy"), &bt).unwrap();
    let script = d.script("csrmm");
    let args = [
        "--bind".into(),
        d.bind("A", "a.mtx"),
        "--bind".into(),
        d.bind("B", "b.npy"),
    ];
    same_outputs(&d, &script, &args, &[("C", "c.npy")]);
    let c = read_npy(d.path("interp_c.npy")).unwrap();
    assert_eq!(c.shape, vec![4, 2]);
    assert!(c.to_f64_vec().iter().all(|v| *v == 0.0));
}

/// The dense-iteration SpMM looks coordinates up by binary search; absent ones must read as 0
/// (the stage-I semantics), so `--backend interp` lowers with checked searches.
#[test]
fn interp_csrmm_dense_iteration_reads_absent_as_zero() {
    let (m, n, k) = (7, 6, 3);
    let d = Dir::new();
    let (a, coo) = random_matrix(m, n, 17);
    let (b, bt) = dense_tensor(&[n, k], 18);
    write_mtx(d.path("a.mtx"), &coo).unwrap();
    write_npy(d.path("b.npy"), &bt).unwrap();
    let script = d.script("csrmm_dense_iter");
    let args = [
        "--bind".into(),
        d.bind("A", "a.mtx"),
        "--bind".into(),
        d.bind("B", "b.npy"),
    ];
    same_outputs(&d, &script, &args, &[("C", "c.npy")]);
    let c = read_npy(d.path("interp_c.npy")).unwrap();
    for i in 0..m {
        for kk in 0..k {
            let want: f64 = (0..n).map(|j| a[i * n + j] * b[j * k + kk]).sum();
            let got = c.get_f64(i * k + kk);
            assert!(close(got, want), "C[{i},{kk}] = {got}, want {want}");
        }
    }
}

#[test]
fn interp_spmv() {
    let (m, n) = (8, 6);
    let d = Dir::new();
    let (a, coo) = random_matrix(m, n, 21);
    let (x, xt) = dense_tensor(&[n], 22);
    write_mtx(d.path("a.mtx"), &coo).unwrap();
    write_npy(d.path("x.npy"), &xt).unwrap();
    let script = d.script("spmv");
    let args = [
        "--bind".into(),
        d.bind("A", "a.mtx"),
        "--bind".into(),
        d.bind("X", "x.npy"),
    ];
    same_outputs(&d, &script, &args, &[("Y", "y.npy")]);
    // And against the dense product, as a guard on the comparison itself.
    let y = read_npy(d.path("interp_y.npy")).unwrap();
    for i in 0..m {
        let want: f64 = (0..n).map(|j| a[i * n + j] * x[j]).sum();
        assert!(
            close(y.get_f64(i), want),
            "y[{i}] = {}, want {want}",
            y.get_f64(i)
        );
    }
}

#[test]
fn interp_sddmm_sparse_output() {
    let (m, n, k) = (7, 8, 4);
    let d = Dir::new();
    let (_, coo) = random_matrix(m, n, 31);
    let (_, at) = dense_tensor(&[m, k], 32);
    let (_, bt) = dense_tensor(&[n, k], 33);
    write_mtx(d.path("x.mtx"), &coo).unwrap();
    write_npy(d.path("a.npy"), &at).unwrap();
    write_npy(d.path("b.npy"), &bt).unwrap();
    let script = d.script("sddmm");
    let args = [
        "--bind".into(),
        d.bind("X", "x.mtx"),
        "--bind".into(),
        d.bind("A", "a.npy"),
        "--bind".into(),
        d.bind("B", "b.npy"),
    ];
    same_outputs(&d, &script, &args, &[("Y", "y.mtx")]);
    assert_eq!(read_mtx(d.path("interp_y.mtx")).unwrap().nnz(), coo.nnz());
}

const ELL_SPMM: &str = r#"
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
fn ell_matrix(m: usize, n: usize, c: usize, seed: u64) -> Vec<f64> {
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

#[test]
fn interp_ell() {
    let (m, n, c, k) = (6, 9, 3, 4);
    let d = Dir::new();
    let script = d.write("ell.sp", ELL_SPMM);
    let a = ell_matrix(m, n, c, 41);
    write_mtx(d.path("a.mtx"), &coo_of(m, n, &a)).unwrap();
    let (_, bt) = dense_tensor(&[n, k], 42);
    write_npy(d.path("b.npy"), &bt).unwrap();
    let args = [
        "--bind".into(),
        d.bind("A", "a.mtx"),
        "--bind".into(),
        d.bind("B", "b.npy"),
    ];
    same_outputs(&d, &script, &args, &[("C", "c.npy")]);
}

#[test]
fn interp_ell_rejects_rows_with_wrong_count() {
    let (m, n) = (4, 6);
    let d = Dir::new();
    let script = d.write("ell.sp", ELL_SPMM);
    let mut a = ell_matrix(m, n, 2, 43);
    let j = (0..n).find(|j| a[2 * n + j] == 0.0).unwrap();
    a[2 * n + j] = 1.0;
    write_mtx(d.path("a.mtx"), &coo_of(m, n, &a)).unwrap();
    let (_, bt) = dense_tensor(&[n, 2], 44);
    write_npy(d.path("b.npy"), &bt).unwrap();
    let (ab, bb, cb) = (
        d.bind("A", "a.mtx"),
        d.bind("B", "b.npy"),
        d.bind("C", "c.npy"),
    );
    same_error(
        &["run", &script, "--bind", &ab, "--bind", &bb, "--out", &cb],
        &["`A`", "nnz_cols"],
    );
    assert!(!d.path("c.npy").exists());
}

#[test]
fn interp_csf_square_sum() {
    let (m, n, p) = (5, 4, 3);
    let d = Dir::new();
    let mut rng = Rng(51);
    let mut coords = Vec::new();
    let mut values = Vec::new();
    for i in 0..m {
        for j in 0..n {
            for k in 0..p {
                let corner = i == m - 1 && j == n - 1 && k == p - 1;
                let keep = i != 0 && (i == 1 || corner || rng.next().is_multiple_of(3));
                if keep {
                    coords.push(vec![i as i64, j as i64, k as i64]);
                    values.push((rng.val() * 4.0).round() / 4.0 + 0.125);
                }
            }
        }
    }
    let coo = Coo {
        dims: vec![m, n, p],
        coords,
        values,
        field: Field::Real,
    };
    write_tns(d.path("a.tns"), &coo).unwrap();
    let script = d.script("csf_square_sum");
    let args = ["--bind".into(), d.bind("A", "a.tns")];
    same_outputs(&d, &script, &args, &[("B", "b.npy")]);
}

#[test]
fn interp_sparse_softmax() {
    let (m, n) = (6, 5);
    let d = Dir::new();
    let (mut a, _) = random_matrix(m, n, 61);
    a[n] = 1000.0;
    a[n + 1] = 999.0;
    write_mtx(d.path("a.mtx"), &coo_of(m, n, &a)).unwrap();
    let script = d.script("sparse_softmax");
    let args = ["--bind".into(), d.bind("A", "a.mtx")];
    same_outputs(&d, &script, &args, &[("B", "b.mtx")]);
    let b = read_mtx(d.path("interp_b.mtx")).unwrap();
    assert!(b.values.iter().all(|v| v.is_finite()));
}

fn csrmm_files(d: &Dir, b_shape: &[usize], b_f64: bool) -> String {
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

#[test]
fn interp_errors_name_the_buffer() {
    let d = Dir::new();
    let script = csrmm_files(&d, &[4, 3], false);
    let a = d.bind("A", "a.mtx");
    let b = d.bind("B", "b.npy");
    let c = d.bind("C", "c.npy");
    same_error(
        &["run", &script, "--bind", &a, "--out", &c],
        &["`B`", "--bind"],
    );
    same_error(
        &[
            "run", &script, "--bind", &a, "--bind", &b, "--bind", "Q=x.npy",
        ],
        &["`Q`"],
    );
    same_error(&["run", &script, "--bind", "A"], &["NAME=VALUE"]);
    same_error(&["run", &script, "--bind", "A=a.txt"], &[".txt"]);
    same_error(
        &["run", &script, "--bind", "A=/nonexistent/a.mtx"],
        &["nonexistent"],
    );
    same_error(&["run", &script, "--set", "zz=3"], &["zz", "feat_size"]);
    same_error(&["run", &script, "--set", "m=abc"], &["abc"]);
    let d2 = Dir::new();
    let script2 = csrmm_files(&d2, &[5, 3], false);
    let (a2, b2) = (d2.bind("A", "a.mtx"), d2.bind("B", "b.npy"));
    same_error(
        &["run", &script2, "--bind", &a2, "--bind", &b2],
        &["`B`", "5", "4"],
    );
    let d3 = Dir::new();
    let script3 = csrmm_files(&d3, &[4, 3], true);
    let (a3, b3) = (d3.bind("A", "a.mtx"), d3.bind("B", "b.npy"));
    same_error(
        &["run", &script3, "--bind", &a3, "--bind", &b3],
        &["`B`", "float32", "float64"],
    );
    let ab = d.bind("A", "b.npy");
    same_error(&["run", &script, "--bind", &ab], &["`A`", "sparse"]);
    let ca = d.bind("C", "a.mtx");
    same_error(
        &["run", &script, "--bind", &a, "--bind", &b, "--bind", &ca],
        &["`C`"],
    );
}

#[test]
fn unsupported_backend_lists_both() {
    let d = Dir::new();
    let script = csrmm_files(&d, &[4, 3], false);
    let (a, b) = (d.bind("A", "a.mtx"), d.bind("B", "b.npy"));
    let o = run(&[
        "run",
        &script,
        "--backend",
        "cuda",
        "--bind",
        &a,
        "--bind",
        &b,
    ]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    for n in ["cuda", "eval", "interp"] {
        assert!(e.contains(n), "expected `{n}` in: {e}");
    }
}

#[test]
fn interp_second_bind_must_share_the_pattern() {
    let (m, n, k) = (5, 6, 2);
    let d = Dir::new();
    let (_, x) = random_matrix(m, n, 81);
    let (_, other) = random_matrix(m, n, 82);
    write_mtx(d.path("x.mtx"), &x).unwrap();
    write_mtx(d.path("y.mtx"), &other).unwrap();
    let (_, at) = dense_tensor(&[m, k], 83);
    let (_, bt) = dense_tensor(&[n, k], 84);
    write_npy(d.path("a.npy"), &at).unwrap();
    write_npy(d.path("b.npy"), &bt).unwrap();
    let script = d.script("sddmm");
    let (xb, yb) = (d.bind("X", "x.mtx"), d.bind("Y", "y.mtx"));
    let (ab, bb) = (d.bind("A", "a.npy"), d.bind("B", "b.npy"));
    same_error(
        &[
            "run", &script, "--bind", &xb, "--bind", &yb, "--bind", &ab, "--bind", &bb,
        ],
        &["`Y`", "pattern", "`X`"],
    );
}

/// CSR arrays bound directly, with `--set` for the sizes the arrays do not imply.
fn raw_csr_files(d: &Dir, indptr: &[i64], indices: &[i64], values: &[f64]) -> Vec<String> {
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

#[test]
fn interp_with_raw_csr_arrays() {
    let d = Dir::new();
    let script = d.script("csrmm");
    let args = raw_csr_files(&d, &[0, 2, 2, 3], &[0, 3, 1], &[1.5, -2.0, 0.25]);
    same_outputs(&d, &script, &args, &[("C", "c.npy")]);
}

/// indptr, indices, values, and what the error must mention.
type RawCase = (
    &'static [i64],
    &'static [i64],
    &'static [f64],
    &'static [&'static str],
);

#[test]
fn interp_rejects_invalid_raw_structure() {
    let cases: [RawCase; 4] = [
        (
            &[0, 2, 2, 3],
            &[3, 0, 1],
            &[1.0, 2.0, 3.0],
            &["axis `J`", "sorted"],
        ),
        (
            &[0, 2, 1, 3],
            &[0, 3, 1],
            &[1.0, 2.0, 3.0],
            &["axis `J`", "indptr"],
        ),
        (
            &[0, 2, 2, 3],
            &[0, 3, 9],
            &[1.0, 2.0, 3.0],
            &["axis `J`", "9"],
        ),
        (
            &[0, 2, 2, 3],
            &[0, 3, 1],
            &[1.0, 2.0],
            &["`A`", "stored values"],
        ),
    ];
    for (indptr, indices, values, needles) in cases {
        let d = Dir::new();
        let script = d.script("csrmm");
        let args = raw_csr_files(&d, indptr, indices, values);
        let c = d.bind("C", "c.npy");
        let mut all: Vec<&str> = vec!["run", &script];
        all.extend(args.iter().map(String::as_str));
        all.extend(["--out", &c]);
        same_error(&all, needles);
        assert!(!d.path("c.npy").exists());
    }
}

// ------------------------------------------------------------------------------------------
// `sparsetir lower`

/// `sparsetir lower` of a catalog kernel: the output parses, verifies at the stage asked for,
/// and equals the library pipeline's result.
fn lower_kernel(name: &str, stage: Stage, check: bool) {
    let d = Dir::new();
    let script = d.script(name);
    let n = match stage {
        Stage::I => "1",
        Stage::II => "2",
        Stage::III => "3",
    };
    let mut args = vec!["lower", &script, "--stage", n];
    if check {
        args.push("--check-invalid-binary-search");
    }
    let o = run(&args);
    assert!(o.status.success(), "{name}: {}", stderr(&o));
    let text = stdout(&o);
    let got = parse_module(&text).unwrap_or_else(|e| panic!("{name}: {e:?}\n{text}"));
    for f in &got.funcs {
        assert_eq!(f.stage(), stage, "{name}");
        verify_func(f).unwrap_or_else(|e| panic!("{name}: {e:?}"));
    }
    let input = parse_module(sparsetir_ops::get(name).unwrap().source).unwrap();
    let want = lower(
        &input,
        &PipelineOptions {
            target_stage: stage,
            check_invalid_binary_search: check,
            verify: true,
            print_after: Vec::new(),
        },
    )
    .unwrap();
    assert!(module_eq(&got, &want), "{name}:\n{text}");
}

#[test]
fn lower_catalog_to_stage_ii() {
    for k in sparsetir_ops::catalog() {
        lower_kernel(k.name, Stage::II, false);
    }
    lower_kernel("csrmm_dense_iter", Stage::II, true);
}

#[test]
fn lower_catalog_to_stage_iii() {
    for k in sparsetir_ops::catalog() {
        lower_kernel(k.name, Stage::III, false);
    }
    lower_kernel("csrmm_dense_iter", Stage::III, true);
}

#[test]
fn lower_stage_one_prints_the_input() {
    let d = Dir::new();
    let script = d.script("sddmm");
    let o = run(&["lower", &script, "--stage", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let fmt = run(&["fmt", &script]);
    assert_eq!(stdout(&o), stdout(&fmt));
}

#[test]
fn lower_print_after_dumps_to_stderr() {
    let d = Dir::new();
    let script = d.script("spmv");
    let o = run(&[
        "lower",
        &script,
        "--stage",
        "2",
        "--print-after",
        "lower_sparse_iter",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let input = parse_module(sparsetir_ops::get("spmv").unwrap().source).unwrap();
    let stage_ii = lower(&input, &PipelineOptions::to_stage(Stage::II)).unwrap();
    let want = print_module(&stage_ii);
    assert_eq!(stderr(&o), format!("# IR after lower_sparse_iter:\n{want}"));
    assert_eq!(stdout(&o), want);
    // Without the flag, stderr stays empty.
    let o = run(&["lower", &script, "--stage", "2"]);
    assert_eq!(stderr(&o), "");
    // An unknown pass is a user error naming the known ones.
    let o = run(&["lower", &script, "--stage", "2", "--print-after", "nope"]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("`nope`") && e.contains("lower_sparse_iter"),
        "{e}"
    );
    assert_eq!(stdout(&o), "");
}

#[test]
fn lower_func_selects_one_function() {
    let d = Dir::new();
    let two = format!(
        "{}\n{}",
        sparsetir_ops::get("spmv").unwrap().source,
        sparsetir_ops::get("csrmm").unwrap().source
    );
    let script = d.write("two.sp", &two);
    let o = run(&["lower", &script, "--stage", "2", "--func", "csrmm"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let got = parse_module(&stdout(&o)).unwrap();
    assert_eq!(got.funcs.len(), 1);
    assert_eq!(got.funcs[0].name, "csrmm");
    let o = run(&["lower", &script, "--stage", "2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(parse_module(&stdout(&o)).unwrap().funcs.len(), 2);
    let o = run(&["lower", &script, "--stage", "2", "--func", "nope"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("`nope`"), "{}", stderr(&o));
}

/// The 1-based line of the first occurrence of `needle` in `text`.
fn line_of(text: &str, needle: &str) -> usize {
    let at = text.find(needle).expect("needle in text");
    text[..at].matches('\n').count() + 1
}

fn assert_located(o: &Output, file: &str, line: usize, needles: &[&str]) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(!e.contains("panicked"), "{e}");
    assert!(
        e.contains(&format!("{file}:{line}:")),
        "expected {file}:{line}: in {e}"
    );
    for n in needles {
        assert!(e.contains(n), "expected `{n}` in: {e}");
    }
    assert_eq!(stdout(o), "");
}

#[test]
fn lower_parse_error_is_located() {
    let d = Dir::new();
    let src = "@T.prim_func\ndef f(a: T.handle) -> None:\n    A = T.match_buffer(a, (4,), \"float32\")\n    A[0] = = 1\n";
    let script = d.write("bad.sp", src);
    let o = run(&["lower", &script, "--stage", "2"]);
    assert_located(&o, &script, 4, &[]);
}

/// Iterates `J` without its parent `I`: it parses, the verifier rejects it.
const ORPHAN: &str = r#"@T.prim_func
def orphan(x: T.handle, indptr: T.handle, indices: T.handle,
           m: T.int32, n: T.int32, nnz: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices), "int32")
    J_detach = T.sp.dense_fixed(n)
    X = T.sp.match_buffer(x, (J_detach,), "float32")
    with T.sp.iteration([J], "S", "orphan") as [j]:
        X[j] = T.float32(1)
"#;

#[test]
fn lower_verify_error_is_located() {
    let d = Dir::new();
    let script = d.write("orphan.sp", ORPHAN);
    let o = run(&["lower", &script, "--stage", "2"]);
    assert_located(
        &o,
        &script,
        line_of(ORPHAN, "with T.sp.iteration"),
        &["`orphan`"],
    );
}

/// A lookup of a constant coordinate in a compressed axis, which `lower_sparse_iter` does not
/// support.
const CONST_LOOKUP: &str = r#"@T.prim_func
def const_lookup(a: T.handle, y: T.handle, indptr: T.handle, indices: T.handle,
                 m: T.int32, n: T.int32, nnz: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices), "int32")
    A = T.sp.match_buffer(a, (I, J), "float32")
    Y = T.sp.match_buffer(y, (I,), "float32")
    with T.sp.iteration([I], "S", "pick") as [i]:
        Y[i] = A[0, 2]
"#;

/// A varied chain under a `compressed_fixed` axis, which `lower_sparse_buffer` does not lay out.
const CF_CHAIN: &str = r#"@T.prim_func
def cf_chain(a: T.handle, b: T.handle, indices_j: T.handle, indptr_k: T.handle,
             indices_k: T.handle, m: T.int32, n: T.int32, c: T.int32, p: T.int32,
             nnz_k: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_fixed(I, (n, c), indices_j, "int32")
    K = T.sp.compressed_varied(J, (p, nnz_k), (indptr_k, indices_k), "int32")
    A = T.sp.match_buffer(a, (I, J, K), "float32")
    B = T.sp.match_buffer(b, (I, J, K), "float32")
    with T.sp.iteration([I, J, K], "SSS", "copy") as [i, j, k]:
        B[i, j, k] = A[i, j, k]
"#;

#[test]
fn lower_pass_errors_are_located() {
    let d = Dir::new();
    let script = d.write("const_lookup.sp", CONST_LOOKUP);
    let line = line_of(CONST_LOOKUP, "with T.sp.iteration");
    let o = run(&["lower", &script, "--stage", "2"]);
    assert_located(&o, &script, line, &["lower_sparse_iter", "`const_lookup`"]);
    // `run --backend interp` reports the same failure before looking at the data (no bind).
    let o = run(&["run", &script, "--backend", "interp"]);
    assert_located(&o, &script, line, &["lower_sparse_iter", "`const_lookup`"]);

    let script = d.write("cf_chain.sp", CF_CHAIN);
    // Stage II is fine; stage III fails at the buffer declaration.
    let o = run(&["lower", &script, "--stage", "2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(&["lower", &script, "--stage", "3"]);
    let line = line_of(CF_CHAIN, "A = T.sp.match_buffer");
    assert_located(
        &o,
        &script,
        line,
        &["lower_sparse_buffer", "`cf_chain`", "`A`"],
    );
}

#[test]
fn lower_usage_errors_exit_one() {
    let d = Dir::new();
    let script = d.script("spmv");
    for args in [
        vec!["lower", script.as_str(), "--stage", "4"],
        vec!["lower", script.as_str(), "--stage", "x"],
        vec!["lower", "/nonexistent/x.sp", "--stage", "2"],
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"));
    }
}
