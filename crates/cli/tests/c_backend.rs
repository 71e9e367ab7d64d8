//! End-to-end tests of `sparsetir run --backend c` and `sparsetir build`: every run scenario of
//! `run.rs` is repeated with the evaluator and the C backend (with and without the kernels'
//! default schedules), and the compiled kernel's output files must match the evaluator's; bad
//! data is refused before launch with the evaluator's message. `build --target c` prints C
//! naming the entry symbol; unsupported targets fail with exit code 1. Tests that need a C
//! compiler are skipped, with a printed note, when none runs. Kernels are cached under the
//! target directory (`SPARSETIR_CACHE_DIR`), never in the user's cache.

use std::path::PathBuf;
use std::process::{Command, Output};

use sparsetir_formats::{read_mtx, read_npy, write_mtx, write_npy, write_tns, Coo, Field, Tensor};
use sparsetir_ir::DType;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_sparsetir")
}

/// The kernel cache of these tests, under the target directory.
fn cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cli-c-backend-cache")
}

fn run(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env("SPARSETIR_CACHE_DIR", cache_dir())
        .output()
        .expect("binary runs")
}

/// Whether a C compiler (`$CC`, else `cc`) runs; prints a note when not.
fn have_cc() -> bool {
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
// `run --backend c` against `run --backend eval`

/// Runs `sparsetir run SCRIPT ARGS... --out BUF=<backend>_FILE...` with the evaluator, the C
/// backend, and the C backend with the kernel's default schedule when `kernel` has one (on two
/// threads); checks all succeed, and compares every output file of the C runs with the
/// evaluator's.
fn same_outputs(d: &Dir, script: &str, args: &[String], outs: &[(&str, &str)]) {
    // Catalog scripts are written as `<kernel>.sp`.
    let stem = std::path::Path::new(script)
        .file_stem()
        .and_then(|s| s.to_str())
        .map(str::to_string);
    same_outputs_of(d, script, args, outs, stem.as_deref())
}

fn same_outputs_of(
    d: &Dir,
    script: &str,
    args: &[String],
    outs: &[(&str, &str)],
    kernel: Option<&str>,
) {
    let mut runs = vec![("eval", Vec::new()), ("c", Vec::new())];
    if let Some(sched) = kernel.and_then(sparsetir_ops::cpu_schedule) {
        let path = d.write("default.sched", sched);
        runs.push((
            "sched",
            vec!["--schedule".into(), path, "--threads".into(), "2".into()],
        ));
    }
    for (name, extra) in &runs {
        let backend = if *name == "eval" { "eval" } else { "c" };
        let mut all: Vec<String> = vec!["run".into(), script.into(), "--backend".into()];
        all.push(backend.into());
        all.extend(extra.iter().cloned());
        all.extend(args.iter().cloned());
        for (buf, file) in outs {
            all.push("--out".into());
            all.push(d.bind(buf, &format!("{name}_{file}")));
        }
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        let o = run(&refs);
        assert!(o.status.success(), "{name} failed: {}", stderr(&o));
    }
    for (name, _) in runs.iter().skip(1) {
        compare(d, outs, name);
    }
}

/// Compares the output files of run `name` with the evaluator's.
fn compare(d: &Dir, outs: &[(&str, &str)], name: &str) {
    for (buf, file) in outs {
        let (e, i) = (
            d.path(&format!("eval_{file}")),
            d.path(&format!("{name}_{file}")),
        );
        if file.ends_with(".npy") {
            let (e, i) = (read_npy(&e).unwrap(), read_npy(&i).unwrap());
            assert_eq!(e.shape, i.shape, "{buf}");
            assert_eq!(e.dtype(), i.dtype(), "{buf}");
            let (ev, iv) = (e.to_f64_vec(), i.to_f64_vec());
            for (k, (a, b)) in ev.iter().zip(&iv).enumerate() {
                assert!(close(*b, *a), "{buf}[{k}]: {name} {b}, eval {a}");
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
                assert!(close(*b, *a), "{buf} entry {k}: {name} {b}, eval {a}");
            }
        }
    }
}

/// Runs the same failing command with each backend: both exit 1 with the same message, which
/// holds every needle, and no output file is written.
fn same_error(args: &[&str], needles: &[&str]) {
    let mut msgs = Vec::new();
    for backend in ["eval", "c"] {
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
fn c_csrmm_random_with_empty_and_full_rows() {
    if !have_cc() {
        return;
    }
    csrmm_case(9, 7, 5, 11);
}

#[test]
fn c_csrmm_one_by_one() {
    if !have_cc() {
        return;
    }
    csrmm_case(1, 1, 3, 5);
}

#[test]
fn c_csrmm_empty_matrix() {
    if !have_cc() {
        return;
    }
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
    let c = read_npy(d.path("c_c.npy")).unwrap();
    assert_eq!(c.shape, vec![4, 2]);
    assert!(c.to_f64_vec().iter().all(|v| *v == 0.0));
}

/// The dense-iteration SpMM looks coordinates up by binary search; absent ones must read as 0
/// (the stage-I semantics), so `--backend c` lowers with checked searches.
#[test]
fn c_csrmm_dense_iteration_reads_absent_as_zero() {
    if !have_cc() {
        return;
    }
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
    let c = read_npy(d.path("c_c.npy")).unwrap();
    for i in 0..m {
        for kk in 0..k {
            let want: f64 = (0..n).map(|j| a[i * n + j] * b[j * k + kk]).sum();
            let got = c.get_f64(i * k + kk);
            assert!(close(got, want), "C[{i},{kk}] = {got}, want {want}");
        }
    }
}

#[test]
fn c_spmv() {
    if !have_cc() {
        return;
    }
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
    let y = read_npy(d.path("c_y.npy")).unwrap();
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
fn c_sddmm_sparse_output() {
    if !have_cc() {
        return;
    }
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
    assert_eq!(read_mtx(d.path("c_y.mtx")).unwrap().nnz(), coo.nnz());
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
fn c_ell() {
    if !have_cc() {
        return;
    }
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
fn c_ell_rejects_rows_with_wrong_count() {
    if !have_cc() {
        return;
    }
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
fn c_csf_square_sum() {
    if !have_cc() {
        return;
    }
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
fn c_sparse_softmax() {
    if !have_cc() {
        return;
    }
    let (m, n) = (6, 5);
    let d = Dir::new();
    let (mut a, _) = random_matrix(m, n, 61);
    a[n] = 1000.0;
    a[n + 1] = 999.0;
    write_mtx(d.path("a.mtx"), &coo_of(m, n, &a)).unwrap();
    let script = d.script("sparse_softmax");
    let args = ["--bind".into(), d.bind("A", "a.mtx")];
    same_outputs(&d, &script, &args, &[("B", "b.mtx")]);
    let b = read_mtx(d.path("c_b.mtx")).unwrap();
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
fn c_errors_name_the_buffer() {
    if !have_cc() {
        return;
    }
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
fn unsupported_backend_lists_all() {
    if !have_cc() {
        return;
    }
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
    for n in ["cuda", "eval", "interp", "c —"] {
        assert!(e.contains(n), "expected `{n}` in: {e}");
    }
}

#[test]
fn c_second_bind_must_share_the_pattern() {
    if !have_cc() {
        return;
    }
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
fn c_with_raw_csr_arrays() {
    if !have_cc() {
        return;
    }
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
fn c_rejects_invalid_raw_structure() {
    if !have_cc() {
        return;
    }
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
// `sparsetir build` and the c backend's own options

#[test]
fn build_prints_c_naming_the_entry_symbol() {
    let d = Dir::new();
    let script = d.script("csrmm");
    let o = run(&["build", &script, "--target", "c"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let c = stdout(&o);
    assert!(c.contains("sparsetir_csrmm("), "{c}");
    assert!(c.contains("sparsetir_set_num_threads"), "{c}");
    assert!(!c.contains("#pragma omp parallel for"), "{c}");
    // With the default schedule and a specialized width: a parallel loop, and the feature loop
    // bound is the constant.
    let sched = d.write("csrmm.sched", sparsetir_ops::cpu_schedule("csrmm").unwrap());
    let o = run(&[
        "build",
        &script,
        "--target",
        "c",
        "--schedule",
        &sched,
        "--set",
        "feat_size=48",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let c = stdout(&o);
    assert!(c.contains("#pragma omp parallel for"), "{c}");
    assert!(c.contains("< 48;"), "{c}");
}

#[test]
fn build_with_stage_sections_and_func() {
    let d = Dir::new();
    let script = d.write(
        "two.sp",
        &format!(
            "{}\n{}",
            sparsetir_ops::get("spmv").unwrap().source,
            sparsetir_ops::get("sddmm").unwrap().source
        ),
    );
    let sched = d.write(
        "s.sched",
        "# stage I\nsp = sch.get_sparse_iteration(\"sddmm\")\nsch.sparse_fuse(sp, [\"I\", \"J\"])\n\
         # stage III\nb = sch.get_block(\"sddmm0\")\nl0, l1 = sch.get_loops(b)\nsch.parallel(l0)\n",
    );
    let o = run(&["build", &script]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--func"), "{}", stderr(&o));
    let o = run(&["build", &script, "--func", "sddmm", "--schedule", &sched]);
    assert!(o.status.success(), "{}", stderr(&o));
    let c = stdout(&o);
    assert!(c.contains("sparsetir_sddmm("), "{c}");
    assert!(c.contains("#pragma omp parallel for"), "{c}");
}

#[test]
fn build_errors_exit_one() {
    let d = Dir::new();
    let script = d.script("csrmm");
    let cases: Vec<(Vec<String>, Vec<&str>)> = vec![
        (
            vec!["--target".into(), "cuda".into()],
            vec!["unsupported target `cuda`", "c"],
        ),
        (
            vec!["--set".into(), "width=3".into()],
            vec!["width", "feat_size"],
        ),
        (
            vec!["--set".into(), "feat_size=x".into()],
            vec!["feat_size", "integer"],
        ),
        (
            vec![
                "--schedule".into(),
                d.write("bad.sched", "# stage II\n\nb = sch.get_block(\"nope\")\n"),
            ],
            vec!["nope", "3:"],
        ),
        (
            vec!["--schedule".into(), d.s("missing.sched")],
            vec!["missing.sched"],
        ),
        (
            vec![
                "--schedule".into(),
                d.write("tb.sched", "b = sch.get_block(\"csrmm0\")\nl, = sch.get_loops(b)\nsch.bind(l, \"blockIdx.x\")\n"),
            ],
            vec!["blockIdx.x", "CUDA"],
        ),
    ];
    for (extra, needles) in cases {
        let mut all = vec!["build".to_string(), script.clone()];
        all.extend(extra);
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        let o = run(&refs);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{all:?}: {e}");
        assert!(!e.contains("panicked"), "{e}");
        for n in needles {
            assert!(e.contains(n), "{all:?}: expected `{n}` in: {e}");
        }
    }
    // Stage III input.
    let lowered = d.write("l.sp", &stdout(&run(&["lower", &script, "--stage", "3"])));
    let o = run(&["build", &lowered]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("stage-I"), "{}", stderr(&o));
}

#[test]
fn schedule_and_threads_need_the_c_backend() {
    let d = Dir::new();
    let script = csrmm_files(&d, &[4, 3], false);
    let (a, b) = (d.bind("A", "a.mtx"), d.bind("B", "b.npy"));
    let o = run(&["run", &script, "--bind", &a, "--bind", &b, "--threads", "2"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--backend c"), "{}", stderr(&o));
}

#[test]
fn c_run_with_a_specialized_width() {
    let d = Dir::new();
    let script = d.script("csrmm");
    let (_, coo) = random_matrix(6, 5, 101);
    write_mtx(d.path("a.mtx"), &coo).unwrap();
    let (_, bt) = dense_tensor(&[5, 4], 102);
    write_npy(d.path("b.npy"), &bt).unwrap();
    let args = [
        "--set".into(),
        "feat_size=4".into(),
        "--bind".into(),
        d.bind("A", "a.mtx"),
        "--bind".into(),
        d.bind("B", "b.npy"),
    ];
    same_outputs(&d, &script, &args, &[("C", "c.npy")]);
}
