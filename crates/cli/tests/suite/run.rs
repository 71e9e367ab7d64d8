//! End-to-end tests of `sparsetir run`: data files in, results out, checked against dense
//! computations written here; and the CLI's error paths (exit code 1, messages naming the buffer).

#![allow(clippy::needless_range_loop)]

use crate::common;

use std::process::{Command, Output};

use common::*;
use sparsetir_formats::{read_mtx, read_npy, write_mtx, write_npy, write_tns, Coo, Field};
use sparsetir_ir::DType;

/// `sparsetir run SCRIPT --bind BUF=FILE... --out BUF=FILE...`, the files in `d`.
fn run_files(d: &Dir, script: &str, binds: &[(&str, &str)], outs: &[(&str, &str)]) -> Output {
    let mut all: Vec<String> = vec!["run".into(), script.into()];
    for (flag, pairs) in [("--bind", binds), ("--out", outs)] {
        for (buf, file) in pairs {
            all.push(flag.into());
            all.push(d.bind(buf, file));
        }
    }
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    run(&refs)
}

fn expect_ok(o: &Output) {
    assert!(o.status.success(), "run failed: {}", stderr(o));
}

fn csrmm_case(m: usize, n: usize, k: usize, seed: u64) {
    let d = Dir::new();
    let (a, coo) = random_matrix(m, n, seed);
    let (b, bt) = dense_tensor(&[n, k], seed + 1);
    write_mtx(d.path("a.mtx"), &coo).unwrap();
    write_npy(d.path("b.npy"), &bt).unwrap();
    let script = d.script("csrmm");
    let o = run_files(
        &d,
        &script,
        &[("A", "a.mtx"), ("B", "b.npy")],
        &[("C", "c.npy")],
    );
    expect_ok(&o);
    let c = read_npy(d.path("c.npy")).unwrap();
    assert_eq!(c.shape, vec![m, k]);
    assert_eq!(c.dtype(), DType::F32);
    for i in 0..m {
        for kk in 0..k {
            let want: f64 = (0..n).map(|j| a[i * n + j] * b[j * k + kk]).sum();
            let got = c.get_f64(i * k + kk);
            assert!(close(got, want), "C[{i},{kk}] = {got}, want {want}");
        }
    }
}

#[test]
fn run_csrmm_random_with_empty_and_full_rows() {
    csrmm_case(9, 7, 5, 11);
}

#[test]
fn run_csrmm_one_by_one() {
    csrmm_case(1, 1, 3, 5);
}

#[test]
fn run_csrmm_empty_matrix() {
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
    let o = run_files(
        &d,
        &script,
        &[("A", "a.mtx"), ("B", "b.npy")],
        &[("C", "c.npy")],
    );
    expect_ok(&o);
    let c = read_npy(d.path("c.npy")).unwrap();
    assert_eq!(c.shape, vec![4, 2]);
    assert!(c.to_f64_vec().iter().all(|v| *v == 0.0));
}

#[test]
fn run_spmv() {
    let (m, n) = (8, 6);
    let d = Dir::new();
    let (a, coo) = random_matrix(m, n, 21);
    let (x, xt) = dense_tensor(&[n], 22);
    write_mtx(d.path("a.mtx"), &coo).unwrap();
    write_npy(d.path("x.npy"), &xt).unwrap();
    let script = d.script("spmv");
    let o = run_files(
        &d,
        &script,
        &[("A", "a.mtx"), ("X", "x.npy")],
        &[("Y", "y.npy")],
    );
    expect_ok(&o);
    let y = read_npy(d.path("y.npy")).unwrap();
    assert_eq!(y.shape, vec![m]);
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
fn run_sddmm_sparse_output() {
    let (m, n, k) = (7, 8, 4);
    let d = Dir::new();
    let (x, coo) = random_matrix(m, n, 31);
    let (a, at) = dense_tensor(&[m, k], 32);
    let (b, bt) = dense_tensor(&[n, k], 33);
    write_mtx(d.path("x.mtx"), &coo).unwrap();
    write_npy(d.path("a.npy"), &at).unwrap();
    write_npy(d.path("b.npy"), &bt).unwrap();
    let script = d.script("sddmm");
    let o = run_files(
        &d,
        &script,
        &[("X", "x.mtx"), ("A", "a.npy"), ("B", "b.npy")],
        &[("Y", "y.mtx")],
    );
    expect_ok(&o);
    let y = read_mtx(d.path("y.mtx")).unwrap();
    assert_eq!(y.dims, vec![m, n]);
    // The output holds exactly X's pattern.
    assert_eq!(y.nnz(), coo.nnz());
    for (ij, got) in y.coords.iter().zip(&y.values) {
        let (i, j) = (ij[0] as usize, ij[1] as usize);
        assert_ne!(x[i * n + j], 0.0, "({i},{j}) is not in X's pattern");
        let dot: f64 = (0..k).map(|kk| a[i * k + kk] * b[j * k + kk]).sum();
        let want = dot * x[i * n + j];
        assert!(close(*got, want), "Y[{i},{j}] = {got}, want {want}");
    }
}

#[test]
fn run_ell() {
    let (m, n, c, k) = (6, 9, 3, 4);
    let d = Dir::new();
    std::fs::write(d.path("ell.sp"), ELL_SPMM).unwrap();
    let a = ell_matrix(m, n, c, 41);
    write_mtx(d.path("a.mtx"), &coo_of(m, n, &a)).unwrap();
    let (b, bt) = dense_tensor(&[n, k], 42);
    write_npy(d.path("b.npy"), &bt).unwrap();
    let o = run_files(
        &d,
        &d.s("ell.sp"),
        &[("A", "a.mtx"), ("B", "b.npy")],
        &[("C", "c.npy")],
    );
    expect_ok(&o);
    let cc = read_npy(d.path("c.npy")).unwrap();
    for i in 0..m {
        for kk in 0..k {
            let want: f64 = (0..n).map(|j| a[i * n + j] * b[j * k + kk]).sum();
            assert!(close(cc.get_f64(i * k + kk), want));
        }
    }
}

#[test]
fn run_ell_rejects_rows_with_wrong_count() {
    let (m, n) = (4, 6);
    let d = Dir::new();
    std::fs::write(d.path("ell.sp"), ELL_SPMM).unwrap();
    let mut a = ell_matrix(m, n, 2, 43);
    // Row 2 gets a third entry.
    let j = (0..n).find(|j| a[2 * n + j] == 0.0).unwrap();
    a[2 * n + j] = 1.0;
    write_mtx(d.path("a.mtx"), &coo_of(m, n, &a)).unwrap();
    let (_, bt) = dense_tensor(&[n, 2], 44);
    write_npy(d.path("b.npy"), &bt).unwrap();
    let o = run_files(
        &d,
        &d.s("ell.sp"),
        &[("A", "a.mtx"), ("B", "b.npy")],
        &[("C", "c.npy")],
    );
    assert_user_error(&o, &["`A`", "nnz_cols"]);
    assert!(!d.path("c.npy").exists());
}

#[test]
fn run_csf_square_sum() {
    let (m, n, p) = (5, 4, 3);
    let d = Dir::new();
    let mut rng = Rng(51);
    let mut coords = Vec::new();
    let mut values = Vec::new();
    let mut want = vec![0.0f64; m];
    for i in 0..m {
        for j in 0..n {
            for k in 0..p {
                // Row 0 empty; slice (1, *) full; the rest random; the corner always present
                // so the header-less .tns has the full dims.
                let corner = i == m - 1 && j == n - 1 && k == p - 1;
                let keep = i != 0 && (i == 1 || corner || rng.next().is_multiple_of(3));
                if keep {
                    let v = (rng.val() * 4.0).round() / 4.0 + 0.125;
                    coords.push(vec![i as i64, j as i64, k as i64]);
                    values.push(v);
                    want[i] += v * v;
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
    let o = run_files(&d, &script, &[("A", "a.tns")], &[("B", "b.npy")]);
    expect_ok(&o);
    let b = read_npy(d.path("b.npy")).unwrap();
    assert_eq!(b.shape, vec![m]);
    for i in 0..m {
        assert!(
            close(b.get_f64(i), want[i]),
            "B[{i}] = {}, want {}",
            b.get_f64(i),
            want[i]
        );
    }
}

#[test]
fn run_sparse_softmax() {
    let (m, n) = (6, 5);
    let d = Dir::new();
    let (mut a, _) = random_matrix(m, n, 61);
    // Large values prove the stable form (a naive exp would overflow f32).
    a[n] = 1000.0;
    a[n + 1] = 999.0;
    let coo = coo_of(m, n, &a);
    write_mtx(d.path("a.mtx"), &coo).unwrap();
    let script = d.script("sparse_softmax");
    let o = run_files(&d, &script, &[("A", "a.mtx")], &[("B", "b.mtx")]);
    expect_ok(&o);
    let b = read_mtx(d.path("b.mtx")).unwrap();
    assert_eq!(b.nnz(), coo.nnz());
    for (ij, got) in b.coords.iter().zip(&b.values) {
        let (i, j) = (ij[0] as usize, ij[1] as usize);
        let row: Vec<f64> = (0..n)
            .filter(|jj| a[i * n + jj] != 0.0)
            .map(|jj| a[i * n + jj])
            .collect();
        let mx = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = row.iter().map(|v| (v - mx).exp()).sum();
        let want = (a[i * n + j] - mx).exp() / sum;
        assert!(
            got.is_finite() && close(*got, want),
            "B[{i},{j}] = {got}, want {want}"
        );
    }
}

#[test]
fn run_errors_name_the_buffer() {
    let d = Dir::new();
    let script = csrmm_files(&d, &[4, 3], false);
    let a = d.bind("A", "a.mtx");
    let b = d.bind("B", "b.npy");
    let c = d.bind("C", "c.npy");
    // Missing bind of an input.
    assert_user_error(
        &run(&["run", &script, "--bind", &a, "--out", &c]),
        &["`B`", "--bind"],
    );
    // Unknown buffer, unknown backend, malformed pair, unknown extension, missing file.
    let o = run(&[
        "run", &script, "--bind", &a, "--bind", &b, "--bind", "Q=x.npy",
    ]);
    assert_user_error(&o, &["`Q`"]);
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
    assert_user_error(&o, &["cuda"]);
    assert_user_error(&run(&["run", &script, "--bind", "A"]), &["NAME=VALUE"]);
    assert_user_error(&run(&["run", &script, "--bind", "A=a.txt"]), &[".txt"]);
    assert_user_error(
        &run(&["run", &script, "--bind", "A=/nonexistent/a.mtx"]),
        &["nonexistent"],
    );
    assert_user_error(
        &run(&["run", &script, "--set", "zz=3"]),
        &["zz", "feat_size"],
    );
    assert_user_error(&run(&["run", &script, "--set", "m=abc"]), &["abc"]);
    // Wrong shape: B has 5 rows but A has 4 columns.
    let d2 = Dir::new();
    let script2 = csrmm_files(&d2, &[5, 3], false);
    let o = run(&[
        "run",
        &script2,
        "--bind",
        &d2.bind("A", "a.mtx"),
        "--bind",
        &d2.bind("B", "b.npy"),
    ]);
    assert_user_error(&o, &["`B`", "5", "4"]);
    // Wrong dtype.
    let d3 = Dir::new();
    let script3 = csrmm_files(&d3, &[4, 3], true);
    let o = run(&[
        "run",
        &script3,
        "--bind",
        &d3.bind("A", "a.mtx"),
        "--bind",
        &d3.bind("B", "b.npy"),
    ]);
    assert_user_error(&o, &["`B`", "float32", "float64"]);
    // A sparse buffer cannot take a dense array.
    let o = run(&["run", &script, "--bind", &d.bind("A", "b.npy")]);
    assert_user_error(&o, &["`A`", "sparse"]);
    // Wrong rank: a matrix bound to a 2-D buffer is fine, to the 1-D output it is not.
    let o = run(&[
        "run",
        &script,
        "--bind",
        &a,
        "--bind",
        &b,
        "--bind",
        &d.bind("C", "a.mtx"),
    ]);
    assert_user_error(&o, &["`C`"]);
}

/// A malformed data file is named in the error (with the line, for Matrix Market), as `info`
/// names it.
#[test]
fn run_errors_name_the_malformed_file() {
    let d = Dir::new();
    let script = csrmm_files(&d, &[4, 3], false);
    let good_a = d.bind("A", "a.mtx");
    let good_b = d.bind("B", "b.npy");
    d.write(
        "bad.mtx",
        "%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n4 2 2.0\n",
    );
    let o = run(&[
        "run",
        &script,
        "--bind",
        &d.bind("A", "bad.mtx"),
        "--bind",
        &good_b,
    ]);
    assert_user_error(&o, &["bad.mtx: line 4", "row coordinate 4"]);
    let npy = std::fs::read(d.path("b.npy")).unwrap();
    std::fs::write(d.path("cut.npy"), &npy[..npy.len().min(60)]).unwrap();
    let o = run(&[
        "run",
        &script,
        "--bind",
        &good_a,
        "--bind",
        &d.bind("B", "cut.npy"),
    ]);
    assert_user_error(&o, &["cut.npy: ", ".npy"]);
}

#[test]
fn run_second_bind_must_share_the_pattern() {
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
    let o = run_files(
        &d,
        &script,
        &[
            ("X", "x.mtx"),
            ("Y", "y.mtx"),
            ("A", "a.npy"),
            ("B", "b.npy"),
        ],
        &[],
    );
    assert_user_error(&o, &["`Y`", "pattern", "`X`"]);
}

#[test]
fn fmt_reads_stdin_and_check_reports_ok() {
    use std::io::Write;
    let src = sparsetir_ops::get("csrmm_alias").unwrap().source;
    let mut child = Command::new(bin())
        .args(["fmt", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(src.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("T.sp.compressed_varied("), "{text}");
    assert!(!text.contains("T.sparse_variable"), "{text}");
    let d = Dir::new();
    std::fs::write(d.path("f.sp"), &text).unwrap();
    let o = run(&["check", &d.s("f.sp")]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("ok"));
    // fmt is a fixed point.
    let o = run(&["fmt", &d.s("f.sp")]);
    assert_eq!(String::from_utf8(o.stdout).unwrap(), text);
}

#[test]
fn demo_runs_and_checks_itself() {
    let d = Dir::new();
    let dir = d.s("demo");
    let o = run(&["demo", "--dir", &dir, "--rows", "40", "--feat", "4"]);
    expect_ok(&o);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("OK"), "{out}");
    assert!(d.path("demo/C.npy").exists());
}

/// `sparsetir run` of `csrmm` on CSR arrays handed in directly (see [`raw_csr_files`]), with
/// `--out C=c.npy`.
fn raw_csr_run(d: &Dir, indptr: &[i64], indices: &[i64], values: &[f64]) -> Output {
    let script = d.script("csrmm");
    let args = raw_csr_files(d, indptr, indices, values);
    let c = d.bind("C", "c.npy");
    let mut all: Vec<&str> = vec!["run", &script];
    all.extend(args.iter().map(String::as_str));
    all.extend(["--out", &c]);
    run(&all)
}

#[test]
fn run_with_raw_csr_arrays() {
    let d = Dir::new();
    // Row 0: (0, 1.5), (3, -2); row 1 empty; row 2: (1, 0.25).
    let o = raw_csr_run(&d, &[0, 2, 2, 3], &[0, 3, 1], &[1.5, -2.0, 0.25]);
    expect_ok(&o);
    let (b, _) = dense_tensor(&[4, 2], 91);
    let c = read_npy(d.path("c.npy")).unwrap();
    let want = [
        1.5 * b[0] - 2.0 * b[6],
        1.5 * b[1] - 2.0 * b[7],
        0.0,
        0.0,
        0.25 * b[2],
        0.25 * b[3],
    ];
    for (i, w) in want.iter().enumerate() {
        assert!(
            close(c.get_f64(i), *w),
            "C[{i}] = {}, want {w}",
            c.get_f64(i)
        );
    }
}

#[test]
fn run_rejects_invalid_raw_structure() {
    // Unsorted indices inside row 0 where the axis is declared sorted.
    let d = Dir::new();
    let o = raw_csr_run(&d, &[0, 2, 2, 3], &[3, 0, 1], &[1.0, 2.0, 3.0]);
    assert_user_error(&o, &["axis `J`", "sorted"]);
    assert!(!d.path("c.npy").exists());
    // indptr not monotone.
    let d = Dir::new();
    let o = raw_csr_run(&d, &[0, 2, 1, 3], &[0, 3, 1], &[1.0, 2.0, 3.0]);
    assert_user_error(&o, &["axis `J`", "indptr"]);
    // Index out of range (n = 4 from B).
    let d = Dir::new();
    let o = raw_csr_run(&d, &[0, 2, 2, 3], &[0, 3, 9], &[1.0, 2.0, 3.0]);
    assert_user_error(&o, &["axis `J`", "9"]);
    // Too few values for the structure.
    let d = Dir::new();
    let o = raw_csr_run(&d, &[0, 2, 2, 3], &[0, 3, 1], &[1.0, 2.0]);
    assert_user_error(&o, &["`A`", "stored values"]);
}
