//! `sparsetir bench spmm --format ...`: hyb (explicit and default parameters), bsr:B, ell (plain
//! and ELL+CSR) and `auto` print JSON lines with `check: true`, the format that ran fully named,
//! and the conversion time reported apart; `auto` measures BSR and ELL candidates on a matrix
//! of full blocks and uniform rows; `sparsetir bench sddmm --format coo|auto` likewise (auto
//! measures csr and coo and runs the faster); bad or unsupported formats exit with code 1. Skipped, with
//! a note, when no C compiler runs. Kernels are cached under the target directory.

use crate::common;

use std::path::PathBuf;
use std::process::Output;

use common::{have_cc, run};

/// A 12 × 10 matrix: row `i` holds columns `j` with `(i * 7 + j * 3) % 5 == 0` plus, for row 3,
/// every column (a row longer than a bucket of 4); rows 5 and 6 empty.
fn write_matrix(dir: &std::path::Path) -> (PathBuf, usize) {
    let mut entries = Vec::new();
    for i in 0..12usize {
        if i == 5 || i == 6 {
            continue;
        }
        for j in 0..10usize {
            if i == 3 || (i * 7 + j * 3) % 5 == 0 {
                entries.push((i + 1, j + 1));
            }
        }
    }
    let mut text = format!(
        "%%MatrixMarket matrix coordinate pattern general\n12 10 {}\n",
        entries.len()
    );
    for (i, j) in &entries {
        text.push_str(&format!("{i} {j}\n"));
    }
    let p = dir.join("m.mtx");
    std::fs::write(&p, text).expect("write");
    (p, entries.len())
}

fn lines(o: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect()
}

#[test]
fn hyb_and_auto_run_and_check() {
    if !have_cc() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (m, nnz) = write_matrix(dir.path());
    let m = m.to_str().expect("utf-8 path");
    for (format, want) in [
        (
            "hyb(parts=2,buckets=1,2,4)",
            Some("hyb(parts=2,buckets=1,2,4)"),
        ),
        // Default buckets: up to the longest row of a part (row 3: 5 columns per part of 2).
        ("hyb(parts=2)", Some("hyb(parts=2,buckets=1,2,4,8)")),
        ("hyb", Some("hyb(parts=1,buckets=1,2,4,8,16)")),
        ("auto", None),
    ] {
        let o = run(&[
            "bench", "spmm", "--matrix", m, "--feat", "3,8", "--format", format, "--json",
            "--repeat", "2", "--warmup", "1",
        ]);
        assert!(
            o.status.success(),
            "{format}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let ls = lines(&o);
        assert_eq!(ls.len(), 2, "{format}: one line per width");
        for l in &ls {
            assert_eq!(l["check"], true, "{format}: {l}");
            assert_eq!(l["nnz"], nnz as u64);
            assert_eq!(l["requested_format"], format);
            let ran = l["format"].as_str().expect("format");
            match want {
                Some(w) => assert_eq!(ran, w),
                None => {
                    // auto: what ran is one of the measured candidates.
                    let c = l["candidates"].as_array().expect("candidates");
                    assert!(c.len() >= 2);
                    assert!(c.iter().any(|x| x["format"] == ran), "{l}");
                }
            }
            let conv = l["convert_seconds"].as_f64().expect("convert_seconds");
            assert!(conv >= 0.0);
            if ran == "csr" {
                assert_eq!(conv, 0.0);
            }
        }
    }
}

#[test]
fn bad_formats_exit_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (m, _) = write_matrix(dir.path());
    let m = m.to_str().expect("utf-8 path");
    for (op, format) in [
        ("spmm", "coo"),
        ("spmm", "hyb(parts=0)"),
        ("spmm", "hyb(buckets=4,2)"),
        ("spmm", "bsr:0"),
        ("spmm", "bsr(block=x)"),
        ("spmm", "ell(width=0)"),
        // Wider than the matrix's 10 columns.
        ("spmm", "ell(width=11)"),
        ("sddmm", "hyb"),
        ("sddmm", "bsr:4"),
        ("spmv", "ell"),
        ("spmv", "coo"),
        ("sddmm", "coo(width=2)"),
        ("spmm", "sell"),
        ("spmv", "sell(sigma=0)"),
        ("spmv", "sell(lanes=8)"),
    ] {
        let o = run(&["bench", op, "--matrix", m, "--format", format, "--json"]);
        assert_eq!(o.status.code(), Some(1), "{op} {format}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("format"),
            "{op} {format}"
        );
    }
}

/// Runs `bench OP --matrix M EXTRA... --format FORMAT --json` with short timings (2 runs after
/// 1 warm-up run, no timed warm-up).
fn bench_json(op: &str, m: &str, extra: &[&str], format: &str) -> Output {
    let mut all = vec!["bench", op, "--matrix", m];
    all.extend_from_slice(extra);
    all.extend_from_slice(&[
        "--format",
        format,
        "--json",
        "--repeat",
        "2",
        "--warmup",
        "1",
        "--warmup-ms",
        "0",
    ]);
    run(&all)
}

#[test]
fn auto_measures_the_spmv_schedules() {
    // SpMV: CSR under four schedules and SELL (one window: the matrix has fewer rows than
    // the default window); `auto` measures them all, runs the fastest (checked), and says what
    // it asked for.
    let dir = tempfile::tempdir().expect("temp dir");
    let m = dir.path().join("m.mtx");
    std::fs::write(
        &m,
        "%%MatrixMarket matrix coordinate real general\n4 5 6\n1 1 1.5\n1 4 -2\n2 2 1\n3 5 0.5\n4 1 3\n4 3 -1\n",
    )
    .unwrap();
    let m = m.to_str().unwrap();
    let o = bench_json("spmv", m, &[], "auto");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let ls = lines(&o);
    assert_eq!(ls.len(), 1);
    let names: Vec<&str> = ls[0]["candidates"]
        .as_array()
        .expect("candidates")
        .iter()
        .map(|c| c["format"].as_str().expect("name"))
        .collect();
    assert_eq!(
        names,
        [
            "sell(sigma=4)",
            "csr",
            "csr+gather",
            "csr+masked",
            "csr+scalar"
        ]
    );
    let ran = ls[0]["format"].as_str().expect("format");
    assert!(names.contains(&ran), "{ran}");
    assert_eq!(ls[0]["requested_format"], "auto");
    assert_eq!(ls[0]["check"], true);
    assert_eq!(ls[0]["nnz"], 6);
}

#[test]
fn sell_spmv_runs_and_checks() {
    if !have_cc() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (m, nnz) = write_matrix(dir.path());
    let m = m.to_str().expect("utf-8 path");
    for (format, want) in [
        ("sell", "sell(sigma=12)"),
        ("sell(sigma=3)", "sell(sigma=3)"),
    ] {
        let o = bench_json("spmv", m, &[], format);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let ls = lines(&o);
        assert_eq!(ls.len(), 1, "{format}");
        assert_eq!(ls[0]["format"], want);
        assert_eq!(ls[0]["check"], true, "{format}");
        assert!(
            ls[0]["relerr"].as_f64().expect("relerr") <= 1e-5,
            "{format}"
        );
        assert_eq!(ls[0]["nnz"], nnz);
        assert!(ls[0]["convert_seconds"].as_f64().expect("convert") >= 0.0);
    }
}

/// Runs `bench OP --format FORMAT --json` on `m` at widths 3 and 8 and checks every line:
/// `check: true`, a relative error of at most 1e-4, the matrix's nnz, the requested format (its
/// canonical name `requested`).
fn bench_lines(
    op: &str,
    m: &str,
    format: &str,
    requested: &str,
    nnz: usize,
) -> Vec<serde_json::Value> {
    let o = bench_json(op, m, &["--feat", "3,8"], format);
    assert!(
        o.status.success(),
        "{format}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let ls = lines(&o);
    assert_eq!(ls.len(), 2, "{format}: one line per width");
    for l in &ls {
        assert_eq!(l["check"], true, "{format}: {l}");
        assert!(l["relerr"].as_f64().expect("relerr") <= 1e-4, "{l}");
        assert_eq!(l["nnz"], nnz as u64);
        assert_eq!(l["requested_format"], requested);
    }
    ls
}

/// [`bench_lines`] for sddmm: the lines also name the op and the width, and a kernel time.
fn sddmm_lines(m: &str, format: &str, nnz: usize) -> Vec<serde_json::Value> {
    let ls = bench_lines("sddmm", m, format, format, nnz);
    for (l, feat) in ls.iter().zip([3, 8]) {
        assert_eq!(l["op"], "sddmm", "{l}");
        assert_eq!(l["feat"], feat, "{l}");
        assert!(l["seconds"].as_f64().expect("seconds") > 0.0, "{l}");
    }
    ls
}

#[test]
fn sddmm_coo_and_auto_run_and_check() {
    if !have_cc() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    // 9 × 11: rows 1 and 4 empty, row 2 full (11 elements, longer than a jam of 4), row 0
    // of 6, row 3 of 1, rows 5..9 of 2: 26 elements, not a multiple of 4.
    let mut entries = Vec::new();
    for (i, d) in [6, 0, 11, 1, 0, 2, 2, 2, 2].into_iter().enumerate() {
        for j in 0..d {
            entries.push(format!("{} {} {}.5\n", i + 1, (j * 5 + i) % 11 + 1, j));
        }
    }
    let nnz = entries.len();
    assert_eq!(nnz, 26);
    let m = dir.path().join("sddmm.mtx");
    std::fs::write(
        &m,
        format!(
            "%%MatrixMarket matrix coordinate real general\n9 11 {nnz}\n{}",
            entries.concat()
        ),
    )
    .expect("write");
    let m = m.to_str().expect("utf-8 path");
    for l in sddmm_lines(m, "coo", nnz) {
        assert_eq!(l["format"], "coo", "{l}");
        // Building the rows array is the conversion, timed apart from the kernel.
        assert!(l["convert_seconds"].as_f64().expect("convert") > 0.0, "{l}");
        assert_eq!(l["candidates"].as_array().map(Vec::len), Some(0), "{l}");
    }
    for l in sddmm_lines(m, "auto", nnz) {
        // Both candidates measured; the faster one ran, with its full measurement.
        let c = l["candidates"].as_array().expect("candidates");
        let names: Vec<&str> = c
            .iter()
            .map(|x| x["format"].as_str().expect("name"))
            .collect();
        assert_eq!(names, ["csr", "coo"], "{l}");
        let times: Vec<f64> = c
            .iter()
            .map(|x| x["seconds"].as_f64().expect("seconds"))
            .collect();
        assert!(times.iter().all(|t| *t > 0.0), "{l}");
        let fastest = if times[1] < times[0] { "coo" } else { "csr" };
        assert_eq!(l["format"], fastest, "{l}");
        let conv = l["convert_seconds"].as_f64().expect("convert");
        if fastest == "csr" {
            assert_eq!(conv, 0.0, "{l}");
        } else {
            assert!(conv > 0.0, "{l}");
        }
    }
    // The CSR path is unchanged: `csr` runs the catalog kernel.
    for l in sddmm_lines(m, "csr", nnz) {
        assert_eq!(l["format"], "csr", "{l}");
        assert_eq!(l["convert_seconds"], 0.0, "{l}");
    }
}

#[test]
fn coo_is_refused_where_it_is_not_available() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (m, _) = write_matrix(dir.path());
    let m = m.to_str().expect("utf-8 path");
    for (op, args, needle) in [
        (
            "spmm",
            &[][..],
            "format `coo` is not available for spmm (spmm takes csr, hyb, bsr:B, ell, condense, 2:4, 2:4(tiles=U), 2:4(smem=RxZ), 2:4(dbuf=RxZ[,ahead=A][,a=smem]), 2:4(wgmma=RxZ), 2:4(wgdbuf=RxZ[,ahead=A][,a=smem|tma][,inflight=1][,tma=1[,cluster=C|CxY][,release=1|producer=1[,persistent=1]]]) or auto)",
        ),
        (
            "spmv",
            &[][..],
            "format `coo` is not available for spmv (spmv takes csr, sell, sell(sigma=S) or auto)",
        ),
        (
            "sddmm",
            &["--print-c"][..],
            "--schedule and --print-c take the csr format (got `coo`)",
        ),
    ] {
        let mut all = vec!["bench", op, "--matrix", m, "--format", "coo", "--json"];
        all.extend_from_slice(args);
        let o = run(&all);
        let e = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{op}: {e}");
        assert!(e.contains(needle), "{op}: expected `{needle}` in {e}");
        assert!(!e.contains("panicked"), "{e}");
        assert!(o.stdout.is_empty(), "{op}");
    }
}

/// [`bench_lines`] for spmm: the lines also report a conversion time.
fn spmm_lines(m: &str, format: &str, requested: &str, nnz: usize) -> Vec<serde_json::Value> {
    let ls = bench_lines("spmm", m, format, requested, nnz);
    for l in &ls {
        assert!(l["convert_seconds"].as_f64().is_some(), "{l}");
    }
    ls
}

#[test]
fn bsr_and_ell_run_and_check() {
    if !have_cc() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (m, nnz) = write_matrix(dir.path());
    let m = m.to_str().expect("utf-8 path");
    // 12 × 10: blocks of 4 and 3 overhang both dimensions (zero padding, output cropped). Row
    // degrees: 2 for nine rows, 10 for row 3, 0 for rows 5 and 6: the default ELL width is the
    // 90th percentile, 2, and row 3's entries past it go to the CSR remainder.
    for (format, requested, ran) in [
        ("bsr:4", "bsr:4", "bsr(block=4)"),
        ("bsr(block=3)", "bsr:3", "bsr(block=3)"),
        ("bsr:1", "bsr:1", "bsr(block=1)"),
        ("ell", "ell", "ell(width=2)+csr"),
        ("ell(width=4)+csr", "ell(width=4)", "ell(width=4)+csr"),
        ("ell(width=10)", "ell(width=10)", "ell(width=10)"),
    ] {
        for l in spmm_lines(m, format, requested, nnz) {
            assert_eq!(l["format"], ran, "{l}");
            // The conversion did work, measured apart from the kernel's time.
            assert!(l["convert_seconds"].as_f64().unwrap() > 0.0, "{l}");
            assert!(l["seconds"].as_f64().unwrap() > 0.0, "{l}");
        }
    }
}

/// A 16 × 16 matrix of eight full 2 × 2 diagonal blocks (every row has 2 entries).
fn write_blocks(dir: &std::path::Path) -> (PathBuf, usize) {
    let mut text = String::from("%%MatrixMarket matrix coordinate real general\n16 16 32\n");
    for b in 0..8usize {
        for i in 0..2 {
            for j in 0..2 {
                text.push_str(&format!("{} {} 1.0\n", 2 * b + i + 1, 2 * b + j + 1));
            }
        }
    }
    let p = dir.join("blocks.mtx");
    std::fs::write(&p, text).expect("write");
    (p, 32)
}

#[test]
fn auto_measures_bsr_and_ell_on_full_blocks_and_uniform_rows() {
    if !have_cc() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (m, nnz) = write_blocks(dir.path());
    let m = m.to_str().expect("utf-8 path");
    for l in spmm_lines(m, "auto", "auto", nnz) {
        let c: Vec<&str> = l["candidates"]
            .as_array()
            .expect("candidates")
            .iter()
            .map(|x| x["format"].as_str().expect("name"))
            .collect();
        // Block fill 1 (B = 2) and 1/2 (B = 4) qualify, 1/8 (B = 8) does not; rows are uniform.
        assert_eq!(
            c,
            [
                "csr",
                "hyb(parts=1,buckets=1,2)",
                "bsr(block=2)",
                "bsr(block=4)",
                "ell(width=2)"
            ],
            "{l}"
        );
        assert!(c.contains(&l["format"].as_str().expect("format")), "{l}");
    }
    // The explicit formats on the same matrix: no ELL remainder, no BSR padding.
    for l in spmm_lines(m, "ell", "ell", nnz) {
        assert_eq!(l["format"], "ell(width=2)");
    }
    for l in spmm_lines(m, "bsr:2", "bsr:2", nnz) {
        assert_eq!(l["format"], "bsr(block=2)");
    }
}
