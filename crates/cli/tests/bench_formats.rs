//! `sparsetir bench spmm --format ...`: hyb (explicit and default parameters) and `auto` print
//! JSON lines with `check: true`, the format that ran fully named, and the conversion time
//! reported apart; bad or unsupported formats exit with code 1. Skipped, with a note, when no C
//! compiler runs. Kernels are cached under the target directory.

mod common;

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
        ("spmm", "bsr:4"),
        ("sddmm", "hyb"),
        ("spmv", "auto"),
    ] {
        let o = run(&["bench", op, "--matrix", m, "--format", format, "--json"]);
        assert_eq!(o.status.code(), Some(1), "{op} {format}");
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("format"),
            "{op} {format}"
        );
    }
}
