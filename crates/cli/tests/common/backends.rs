//! The `run` scenarios of `run.rs` repeated per backend: each runs the same command with the
//! reference evaluator and with the backend under test (`interp`, `c`), and the backend's output
//! files must match the evaluator's; failing commands must fail alike on both. Each scenario is a
//! function of the backend name, called by one `#[test]` per backend in `lower_cli.rs` (interp)
//! and `c_backend.rs` (c).

use sparsetir_formats::{read_mtx, read_npy, write_mtx, write_npy, write_tns, Coo, Field};

use super::*;

/// Runs `sparsetir run SCRIPT ARGS... --out BUF=<run>_FILE...` with the evaluator (run `eval`)
/// and `backend` (run named `backend`); for the C backend also with the kernel's default
/// schedule on two threads (run `sched`) when the script is a catalog kernel (`<kernel>.sp`)
/// that has one. Checks all succeed, and compares every output file of the other runs with the
/// evaluator's.
pub fn same_outputs(d: &Dir, backend: &str, script: &str, args: &[String], outs: &[(&str, &str)]) {
    let mut runs: Vec<(&str, Vec<String>)> = vec![("eval", Vec::new()), (backend, Vec::new())];
    let kernel = std::path::Path::new(script)
        .file_stem()
        .and_then(|s| s.to_str());
    if backend == "c" {
        if let Some(sched) = kernel.and_then(sparsetir_ops::cpu_schedule) {
            let path = d.write("default.sched", sched);
            runs.push((
                "sched",
                vec!["--schedule".into(), path, "--threads".into(), "2".into()],
            ));
        }
    }
    if backend == "cuda-emu" {
        if let Some(sched) = kernel.and_then(sparsetir_ops::gpu_schedule) {
            let path = d.write("default_gpu.sched", sched);
            runs.push(("gpusched", vec!["--schedule".into(), path]));
        }
    }
    for (name, extra) in &runs {
        let backend = match *name {
            "sched" => "c",
            "gpusched" => "cuda-emu",
            other => other,
        };
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

/// Runs the same failing command with the evaluator and `backend`: both exit 1 with the same
/// message, which holds every needle.
pub fn same_error(backend: &str, args: &[&str], needles: &[&str]) {
    let mut msgs = Vec::new();
    for b in ["eval", backend] {
        let mut all = args.to_vec();
        all.extend(["--backend", b]);
        let o = run(&all);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{b}: {e}");
        assert!(!e.contains("panicked"), "{e}");
        for n in needles {
            assert!(e.contains(n), "{b}: expected `{n}` in: {e}");
        }
        msgs.push(e);
    }
    assert_eq!(msgs[0], msgs[1]);
}

fn csrmm_case(backend: &str, m: usize, n: usize, k: usize, seed: u64) {
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
    same_outputs(&d, backend, &script, &args, &[("C", "c.npy")]);
}

pub fn csrmm_random_with_empty_and_full_rows(backend: &str) {
    csrmm_case(backend, 9, 7, 5, 11);
}

pub fn csrmm_one_by_one(backend: &str) {
    csrmm_case(backend, 1, 1, 3, 5);
}

pub fn csrmm_empty_matrix(backend: &str) {
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
    same_outputs(&d, backend, &script, &args, &[("C", "c.npy")]);
    let c = read_npy(d.path(&format!("{backend}_c.npy"))).unwrap();
    assert_eq!(c.shape, vec![4, 2]);
    assert!(c.to_f64_vec().iter().all(|v| *v == 0.0));
}

/// The dense-iteration SpMM looks coordinates up by binary search; absent ones must read as 0
/// (the stage-I semantics), so the lowering backends lower with checked searches.
pub fn csrmm_dense_iteration_reads_absent_as_zero(backend: &str) {
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
    same_outputs(&d, backend, &script, &args, &[("C", "c.npy")]);
    let c = read_npy(d.path(&format!("{backend}_c.npy"))).unwrap();
    for i in 0..m {
        for kk in 0..k {
            let want: f64 = (0..n).map(|j| a[i * n + j] * b[j * k + kk]).sum();
            let got = c.get_f64(i * k + kk);
            assert!(close(got, want), "C[{i},{kk}] = {got}, want {want}");
        }
    }
}

pub fn spmv(backend: &str) {
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
    same_outputs(&d, backend, &script, &args, &[("Y", "y.npy")]);
    // And against the dense product, as a guard on the comparison itself.
    let y = read_npy(d.path(&format!("{backend}_y.npy"))).unwrap();
    for i in 0..m {
        let want: f64 = (0..n).map(|j| a[i * n + j] * x[j]).sum();
        assert!(
            close(y.get_f64(i), want),
            "y[{i}] = {}, want {want}",
            y.get_f64(i)
        );
    }
}

pub fn sddmm_sparse_output(backend: &str) {
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
    same_outputs(&d, backend, &script, &args, &[("Y", "y.mtx")]);
    let y = read_mtx(d.path(&format!("{backend}_y.mtx"))).unwrap();
    assert_eq!(y.nnz(), coo.nnz());
}

pub fn ell(backend: &str) {
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
    same_outputs(&d, backend, &script, &args, &[("C", "c.npy")]);
}

pub fn ell_rejects_rows_with_wrong_count(backend: &str) {
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
        backend,
        &["run", &script, "--bind", &ab, "--bind", &bb, "--out", &cb],
        &["`A`", "nnz_cols"],
    );
    assert!(!d.path("c.npy").exists());
}

pub fn csf_square_sum(backend: &str) {
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
    same_outputs(&d, backend, &script, &args, &[("B", "b.npy")]);
}

pub fn sparse_softmax(backend: &str) {
    let (m, n) = (6, 5);
    let d = Dir::new();
    let (mut a, _) = random_matrix(m, n, 61);
    a[n] = 1000.0;
    a[n + 1] = 999.0;
    write_mtx(d.path("a.mtx"), &coo_of(m, n, &a)).unwrap();
    let script = d.script("sparse_softmax");
    let args = ["--bind".into(), d.bind("A", "a.mtx")];
    same_outputs(&d, backend, &script, &args, &[("B", "b.mtx")]);
    let b = read_mtx(d.path(&format!("{backend}_b.mtx"))).unwrap();
    assert!(b.values.iter().all(|v| v.is_finite()));
}

pub fn errors_name_the_buffer(backend: &str) {
    let err = |args: &[&str], needles: &[&str]| same_error(backend, args, needles);
    let d = Dir::new();
    let script = csrmm_files(&d, &[4, 3], false);
    let a = d.bind("A", "a.mtx");
    let b = d.bind("B", "b.npy");
    let c = d.bind("C", "c.npy");
    err(
        &["run", &script, "--bind", &a, "--out", &c],
        &["`B`", "--bind"],
    );
    err(
        &[
            "run", &script, "--bind", &a, "--bind", &b, "--bind", "Q=x.npy",
        ],
        &["`Q`"],
    );
    err(&["run", &script, "--bind", "A"], &["NAME=VALUE"]);
    err(&["run", &script, "--bind", "A=a.txt"], &[".txt"]);
    err(
        &["run", &script, "--bind", "A=/nonexistent/a.mtx"],
        &["nonexistent"],
    );
    err(&["run", &script, "--set", "zz=3"], &["zz", "feat_size"]);
    err(&["run", &script, "--set", "m=abc"], &["abc"]);
    let d2 = Dir::new();
    let script2 = csrmm_files(&d2, &[5, 3], false);
    let (a2, b2) = (d2.bind("A", "a.mtx"), d2.bind("B", "b.npy"));
    err(
        &["run", &script2, "--bind", &a2, "--bind", &b2],
        &["`B`", "5", "4"],
    );
    let d3 = Dir::new();
    let script3 = csrmm_files(&d3, &[4, 3], true);
    let (a3, b3) = (d3.bind("A", "a.mtx"), d3.bind("B", "b.npy"));
    err(
        &["run", &script3, "--bind", &a3, "--bind", &b3],
        &["`B`", "float32", "float64"],
    );
    let ab = d.bind("A", "b.npy");
    err(&["run", &script, "--bind", &ab], &["`A`", "sparse"]);
    let ca = d.bind("C", "a.mtx");
    err(
        &["run", &script, "--bind", &a, "--bind", &b, "--bind", &ca],
        &["`C`"],
    );
}

/// `--backend opencl` fails with exit code 1 and a message holding every needle (the backends).
pub fn unsupported_backend_lists(needles: &[&str]) {
    let d = Dir::new();
    let script = csrmm_files(&d, &[4, 3], false);
    let (a, b) = (d.bind("A", "a.mtx"), d.bind("B", "b.npy"));
    let o = run(&[
        "run",
        &script,
        "--backend",
        "opencl",
        "--bind",
        &a,
        "--bind",
        &b,
    ]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    for n in needles {
        assert!(e.contains(n), "expected `{n}` in: {e}");
    }
}

pub fn second_bind_must_share_the_pattern(backend: &str) {
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
        backend,
        &[
            "run", &script, "--bind", &xb, "--bind", &yb, "--bind", &ab, "--bind", &bb,
        ],
        &["`Y`", "pattern", "`X`"],
    );
}

pub fn with_raw_csr_arrays(backend: &str) {
    let d = Dir::new();
    let script = d.script("csrmm");
    let args = raw_csr_files(&d, &[0, 2, 2, 3], &[0, 3, 1], &[1.5, -2.0, 0.25]);
    same_outputs(&d, backend, &script, &args, &[("C", "c.npy")]);
}

/// indptr, indices, values, and what the error must mention.
type RawCase = (
    &'static [i64],
    &'static [i64],
    &'static [f64],
    &'static [&'static str],
);

pub fn rejects_invalid_raw_structure(backend: &str) {
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
        same_error(backend, &all, needles);
        assert!(!d.path("c.npy").exists());
    }
}

/// Defines one `#[test]` per listed scenario of this module, run with `$backend`; each test
/// returns early (skips) when `$enabled` is false.
#[macro_export]
macro_rules! backend_tests {
    ($backend:literal, $enabled:expr; $($test:ident => $scenario:ident),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                if !$enabled {
                    return;
                }
                $crate::common::backends::$scenario($backend);
            }
        )*
    };
}
