//! End-to-end tests of `sparsetir run --decompose RULE`: csrmm on hyb, bsr, ell(+csr), coo and
//! a catalog rule script, and sddmm on coo, with every backend (c and cuda-emu only with a C
//! compiler), on a matrix with rows storing column 0, empty rows and a full row longer than the
//! largest bucket.
//! Every output must equal the undecomposed run's and a dense computation written here; the
//! errors (unknown rule, rule that does not apply, data that cannot be stored, a rule script
//! nothing builds data for) are located messages with exit code 1.

#![allow(clippy::needless_range_loop)]

use crate::common;

use common::*;
use sparsetir_formats::{read_mtx, read_npy, write_mtx, write_npy};

fn rules_dir() -> String {
    format!("{}/../ops/rules", env!("CARGO_MANIFEST_DIR"))
}

fn backends() -> Vec<&'static str> {
    let mut out = vec!["eval", "interp"];
    if have_cc() {
        out.push("c");
        // The emulator compiles with the host C++ compiler, which comes with the C one here.
        out.push("cuda-emu");
    }
    out
}

/// `run SCRIPT [--backend B] [--decompose RULE] ARGS...`, expected to succeed.
fn run_ok(script: &str, backend: &str, rule: Option<&str>, args: &[String]) {
    let mut all: Vec<String> = vec!["run".into(), script.into(), "--backend".into()];
    all.push(backend.into());
    if let Some(r) = rule {
        all.push("--decompose".into());
        all.push(r.into());
    }
    all.extend(args.iter().cloned());
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    let o = run(&refs);
    assert!(
        o.status.success(),
        "{backend} --decompose {rule:?} failed: {}",
        stderr(&o)
    );
}

/// An 8×8 `A` (empty rows 2 and 5, full row 1, rows storing column 0), an 8×3 `B`, csrmm.
fn csrmm_data(d: &Dir) -> (Vec<f64>, Vec<f64>, String) {
    let (a, coo) = random_matrix(8, 8, 5);
    assert!(
        (0..8).filter(|&i| a[i * 8] != 0.0).count() >= 2,
        "rows store column 0"
    );
    let (b, bt) = dense_tensor(&[8, 3], 6);
    write_mtx(d.path("a.mtx"), &coo).unwrap();
    write_npy(d.path("b.npy"), &bt).unwrap();
    (a, b, d.script("csrmm"))
}

#[test]
fn run_decompose_csrmm_equals_the_undecomposed_run_on_every_backend() {
    let d = Dir::new();
    let (a, b, script) = csrmm_data(&d);
    let (m, n, k) = (8, 8, 3);
    let binds = |out: &str| {
        vec![
            "--bind".into(),
            d.bind("A", "a.mtx"),
            "--bind".into(),
            d.bind("B", "b.npy"),
            "--out".into(),
            d.bind("C", out),
        ]
    };
    run_ok(&script, "eval", None, &binds("ref.npy"));
    let reference = read_npy(d.path("ref.npy")).unwrap().to_f64_vec();
    for i in 0..m {
        for kk in 0..k {
            let want: f64 = (0..n).map(|j| a[i * n + j] * b[j * k + kk]).sum();
            let got = reference[i * k + kk];
            assert!(close(got, want), "C[{i},{kk}] = {got}, want {want}");
        }
    }
    let bsr_script = format!("{}/bsr.rule.sp:block_size=2", rules_dir());
    let hyb_script = format!("{}/hyb.rule.sp:nnz_cols=2", rules_dir());
    let rules = [
        "hyb(parts=1,buckets=1,2,4)",
        "hyb(parts=2,buckets=1,2)",
        "bsr:2",
        "bsr:4",
        "ell(width=8)",
        "ell(width=2)+csr",
        "coo",
        &bsr_script,
        &hyb_script,
    ];
    for backend in backends() {
        for rule in rules {
            let out = "out.npy";
            run_ok(&script, backend, Some(rule), &binds(out));
            let got = read_npy(d.path(out)).unwrap();
            assert_eq!(got.shape, vec![m, k], "{rule} on {backend}");
            for (x, (g, w)) in got.to_f64_vec().iter().zip(&reference).enumerate() {
                assert!(close(*g, *w), "{rule} on {backend}: C[{x}] = {g}, want {w}");
            }
        }
    }
}

#[test]
fn run_decompose_sddmm_on_coo_writes_the_same_sparse_output() {
    let d = Dir::new();
    let (x, coo) = random_matrix(7, 6, 9);
    let (pa, at) = dense_tensor(&[7, 4], 10);
    let (pb, bt) = dense_tensor(&[6, 4], 11);
    write_mtx(d.path("x.mtx"), &coo).unwrap();
    write_npy(d.path("a.npy"), &at).unwrap();
    write_npy(d.path("b.npy"), &bt).unwrap();
    let script = d.script("sddmm");
    let binds = |out: &str| {
        vec![
            "--bind".into(),
            d.bind("X", "x.mtx"),
            "--bind".into(),
            d.bind("A", "a.npy"),
            "--bind".into(),
            d.bind("B", "b.npy"),
            "--out".into(),
            d.bind("Y", out),
        ]
    };
    run_ok(&script, "eval", None, &binds("ref.mtx"));
    let reference = read_mtx(d.path("ref.mtx")).unwrap();
    assert_eq!(reference.coords, coo.coords);
    for (e, c) in reference.coords.iter().enumerate() {
        let (i, j) = (c[0] as usize, c[1] as usize);
        let dot: f64 = (0..4).map(|kk| pa[i * 4 + kk] * pb[j * 4 + kk]).sum();
        let want = x[i * 6 + j] * dot;
        assert!(close(reference.values[e], want), "Y[{i},{j}]");
    }
    for backend in backends() {
        run_ok(&script, backend, Some("coo"), &binds("out.mtx"));
        let got = read_mtx(d.path("out.mtx")).unwrap();
        assert_eq!(got.dims, reference.dims, "{backend}");
        assert_eq!(got.coords, reference.coords, "{backend}");
        for (g, w) in got.values.iter().zip(&reference.values) {
            assert!(close(*g, *w), "coo on {backend}: {g}, want {w}");
        }
    }
}

/// `run` with `args`, expected to fail with exit code 1 and every needle in its stderr, and
/// no panic.
fn run_fails(args: &[&str], needles: &[&str]) {
    let o = run(args);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{args:?}: {e}");
    assert!(!e.contains("panicked"), "{e}");
    for n in needles {
        assert!(e.contains(n), "{args:?}: `{n}` not in: {e}");
    }
}

#[test]
fn run_decompose_errors_are_located() {
    let d = Dir::new();
    let (_, _, script) = csrmm_data(&d);
    let (a, b) = (d.bind("A", "a.mtx"), d.bind("B", "b.npy"));
    let base = ["run", script.as_str(), "--bind", &a, "--bind", &b];
    let with = |rule: &str| {
        let mut v: Vec<String> = base.iter().map(|s| s.to_string()).collect();
        v.extend(["--decompose".to_string(), rule.to_string()]);
        v
    };
    let call = |rule: &str, needles: &[&str]| {
        let v = with(rule);
        let refs: Vec<&str> = v.iter().map(String::as_str).collect();
        run_fails(&refs, needles);
    };
    call("nosuch", &["unknown rule `nosuch`"]);
    call("hyb", &["hyb needs its bucket widths"]);
    // The data: 8×8 is not a multiple of 3; row 1 stores 8 elements.
    call(
        "bsr:3",
        &[
            "--decompose bsr:3",
            "cannot store `A`",
            "multiples of the block size 3",
        ],
    );
    call(
        "ell(width=2)",
        &["row 0 stores", "more than the width 2", "ell(width=2)+csr"],
    );
    // A rule script that is no catalog rule: located in the script.
    let src = std::fs::read_to_string(format!("{}/bsr.rule.sp", rules_dir())).unwrap();
    let mine = d.write(
        "mine.rule.sp",
        &src.replace("io * block_size + ii", "ii * block_size + io"),
    );
    call(
        &format!("{mine}:block_size=2"),
        &["mine.rule.sp:", "not one of the catalog's rules"],
    );
    // A rule that does not apply: sddmm has no `A` over [I, J].
    let sddmm = d.script("sddmm");
    let x = d.bind("X", "a.mtx");
    run_fails(
        &[
            "run",
            &sddmm,
            "--bind",
            &x,
            "--decompose",
            "hyb(parts=1,buckets=2)",
        ],
        &["sddmm.sp:", "cannot decompose `sddmm`"],
    );
}

#[test]
fn run_help_documents_decompose() {
    let o = run(&["run", "--help"]);
    let out = stdout(&o);
    for n in ["--decompose <RULE>", "hyb(parts=P", "DECOMPOSED FORMATS"] {
        assert!(out.contains(n), "`{n}` not in: {out}");
    }
}
