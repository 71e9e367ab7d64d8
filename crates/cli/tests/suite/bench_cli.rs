//! End-to-end tests of `sparsetir bench`: for every operator, `--json` on small generated `.mtx`
//! files prints one valid JSON object per case with `check: true` and the shape and stored-entry
//! count computed here from the file's entries (duplicates merged, symmetric files expanded);
//! `--dtype float16|bfloat16` checks against the reference of the rounded operands; the table
//! form prints every case; bad paths, operators and options exit with code 1. Tests
//! that need a C compiler are skipped, with a printed note, when none runs. Kernels are cached
//! under the target directory (`SPARSETIR_CACHE_DIR`), never in the user's cache.

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::{have_cc, run};

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A small matrix written as Matrix Market text: its header, 1-based entries, and the shape
/// and distinct stored coordinates (after symmetric expansion) the benchmark must report.
struct Case {
    name: &'static str,
    rows: usize,
    cols: usize,
    symmetric: bool,
    /// 0-based (row, col) entries as written (duplicates allowed).
    entries: Vec<(usize, usize)>,
}

impl Case {
    fn write(&self, dir: &Path) -> PathBuf {
        let sym = if self.symmetric {
            "symmetric"
        } else {
            "general"
        };
        let mut s = format!("%%MatrixMarket matrix coordinate real {sym}\n% a test matrix\n");
        s.push_str(&format!(
            "{} {} {}\n",
            self.rows,
            self.cols,
            self.entries.len()
        ));
        for (k, (i, j)) in self.entries.iter().enumerate() {
            s.push_str(&format!("{} {} {}.5\n", i + 1, j + 1, k % 7));
        }
        let path = dir.join(format!("{}.mtx", self.name));
        std::fs::write(&path, s).unwrap();
        path
    }

    fn nnz(&self) -> usize {
        let mut set = BTreeSet::new();
        for &(i, j) in &self.entries {
            set.insert((i, j));
            if self.symmetric {
                set.insert((j, i));
            }
        }
        set.len()
    }
}

fn cases() -> Vec<Case> {
    // Rectangular, with empty rows (1 and 6), a duplicate entry and a full row (3).
    let mut general = vec![(0, 2), (0, 4), (2, 0), (2, 0), (4, 1), (5, 3), (5, 4)];
    general.extend((0..9).map(|j| (3, j)));
    // Symmetric, lower triangle with a diagonal; irregular degrees.
    let mut sym = vec![(0, 0), (3, 1), (5, 2), (7, 0), (7, 6), (9, 9), (10, 4)];
    sym.extend((0..10).map(|j| (11, j)));
    vec![
        Case {
            name: "small_general",
            rows: 7,
            cols: 9,
            symmetric: false,
            entries: general,
        },
        Case {
            name: "small_sym",
            rows: 12,
            cols: 12,
            symmetric: true,
            entries: sym,
        },
    ]
}

impl Case {
    /// The distinct stored coordinates, as a set of rows of column sets.
    fn rows_of(&self) -> Vec<BTreeSet<usize>> {
        let mut rows = vec![BTreeSet::new(); self.rows];
        for &(i, j) in &self.entries {
            rows[i].insert(j);
            if self.symmetric {
                rows[j].insert(i);
            }
        }
        rows
    }
}

fn json_lines(o: &Output) -> Vec<serde_json::Value> {
    text(&o.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

#[test]
fn json_lines_check_true_with_the_files_shapes_for_every_operator() {
    if !have_cc() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cases = cases();
    let paths: Vec<PathBuf> = cases.iter().map(|c| c.write(dir.path())).collect();
    for op in ["spmm", "sddmm", "spmv"] {
        let mut args = vec!["bench", op, "--feat", "4,16", "--json", "--repeat", "2"];
        args.extend(["--warmup", "1", "--threads", "2"]);
        for p in &paths {
            args.push("--matrix");
            args.push(p.to_str().unwrap());
        }
        let o = run(&args);
        assert!(o.status.success(), "{op}: {}", text(&o.stderr));
        let lines = json_lines(&o);
        let feats: &[u64] = if op == "spmv" { &[1] } else { &[4, 16] };
        assert_eq!(lines.len(), cases.len() * feats.len(), "{op}: {lines:?}");
        for c in &cases {
            for &f in feats {
                let v = lines
                    .iter()
                    .find(|v| v["matrix"] == c.name && v["feat"] == f)
                    .unwrap_or_else(|| panic!("{op}: no line for {} feat {f}", c.name));
                assert_eq!(v["op"], op);
                assert_eq!(v["rows"], c.rows as u64, "{v}");
                assert_eq!(v["cols"], c.cols as u64, "{v}");
                assert_eq!(v["nnz"], c.nnz() as u64, "{v}");
                assert_eq!(v["format"], "csr");
                assert_eq!(v["threads"], 2);
                assert_eq!(v["check"], true, "{v}");
                let secs = v["seconds"].as_f64().unwrap();
                let gflops = v["gflops"].as_f64().unwrap();
                assert!(secs > 0.0, "{v}");
                let flops = 2.0 * c.nnz() as f64 * f as f64;
                assert!(
                    (gflops - flops / secs / 1e9).abs() <= 1e-6 * gflops.max(1.0),
                    "{v}"
                );
                assert!(v["compile_seconds"].as_f64().unwrap() > 0.0, "{v}");
                assert!(v["load_seconds"].as_f64().is_some(), "{v}");
            }
        }
    }
}

/// `bench spgemm` (A·A, or A·Aᵀ for the rectangular case) and `bench spadd` (A + Aᵀ): the
/// structure of C and the flop count computed here from the files' coordinates.
#[test]
fn sparse_outputs_report_the_products_structure() {
    if !have_cc() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut cases = cases();
    // Two larger square patterns that take the other staged workspaces: a band (7 columns
    // in one or two groups of 64 per row: grouped byte marks) and columns spread over the
    // axis (one per group: the bitmap).
    let band: Vec<(usize, usize)> = (0..1000usize)
        .flat_map(|i| (i.saturating_sub(3)..(i + 4).min(1000)).map(move |j| (i, j)))
        .collect();
    let spread: Vec<(usize, usize)> = (0..1000usize)
        .flat_map(|i| (0..5).map(move |k| (i, (i * 37 + k * 197 + 11) % 1000)))
        .collect();
    for (name, entries) in [("band", band), ("spread", spread)] {
        cases.push(Case {
            name,
            rows: 1000,
            cols: 1000,
            symmetric: false,
            entries,
        });
    }
    let mut seen = BTreeSet::new();
    for op in ["spgemm", "spadd"] {
        for c in &cases {
            if op == "spadd" && c.rows != c.cols {
                continue;
            }
            let path = c.write(dir.path());
            let mut args = vec!["bench", op, "--json", "--repeat", "2", "--warmup", "1"];
            args.extend(["--threads", "2", "--matrix", path.to_str().unwrap()]);
            let o = run(&args);
            assert!(o.status.success(), "{op}: {}", text(&o.stderr));
            let lines = json_lines(&o);
            assert_eq!(lines.len(), 1, "{op}: {lines:?}");
            let v = &lines[0];
            let a = c.rows_of();
            // B = A, Aᵀ (rectangular spgemm), or Aᵀ (spadd), as rows of column sets.
            let mut at = vec![BTreeSet::new(); c.cols];
            for (i, r) in a.iter().enumerate() {
                for &j in r {
                    at[j].insert(i);
                }
            }
            let b = if op == "spgemm" && c.rows == c.cols {
                a.clone()
            } else {
                at
            };
            let (nnz_c, flops) = if op == "spgemm" {
                let mut nnz = 0;
                let mut madds = 0;
                for r in &a {
                    let mut cols = BTreeSet::new();
                    for &k in r {
                        madds += b[k].len();
                        cols.extend(b[k].iter().copied());
                    }
                    nnz += cols.len();
                }
                (nnz, 2.0 * madds as f64)
            } else {
                let nnz: usize = a.iter().zip(&b).map(|(x, y)| x.union(y).count()).sum();
                (nnz, nnz as f64)
            };
            assert_eq!(v["op"], op);
            assert_eq!(v["matrix"], c.name);
            assert_eq!(v["nnz"], c.nnz() as u64, "{v}");
            assert_eq!(v["nnz_c"], nnz_c as u64, "{op} {}: {v}", c.name);
            assert_eq!(v["check"], true, "{v}");
            let secs = v["seconds"].as_f64().unwrap();
            let gflops = v["gflops"].as_f64().unwrap();
            assert!(secs > 0.0, "{v}");
            assert!(
                (gflops - flops / secs / 1e9).abs() <= 1e-6 * gflops.max(1.0),
                "{op} {}: {v}",
                c.name
            );
            assert!(v["compile_seconds"].as_f64().unwrap() > 0.0, "{v}");
            assert!(v["load_seconds"].as_f64().is_some(), "{v}");
            // The assembly: two phases for the merge (spadd); for SpGEMM the staged workspace
            // the runtime's rule picks — byte marks where the rows' stores (at most n each)
            // average a sixteenth of the columns, grouped byte marks where B's rows hold at
            // least 1.5 columns per group of 64 they touch (every row of B read: the runtime
            // samples past 1,024 rows), the bitmap otherwise.
            let want = if op == "spadd" {
                "two_phase"
            } else {
                let n = if c.rows == c.cols { c.cols } else { c.rows };
                let bound: usize = a
                    .iter()
                    .map(|r| r.iter().map(|&k| b[k].len()).sum::<usize>().min(n))
                    .sum();
                let groups: usize = b
                    .iter()
                    .map(|r| r.iter().map(|&j| j >> 6).collect::<BTreeSet<_>>().len())
                    .sum();
                let entries: usize = b.iter().map(BTreeSet::len).sum();
                if bound > 0 && bound * 16 >= a.len() * n {
                    "staged_dense"
                } else if b.len() <= 1024 && groups > 0 && entries as f64 >= 1.5 * groups as f64 {
                    "staged_groups"
                } else {
                    "staged"
                }
            };
            if op == "spadd" || b.len() <= 1024 {
                assert_eq!(v["assembly"], want, "{op} {}: {v}", c.name);
            } else {
                let got = v["assembly"].as_str().unwrap_or("");
                assert!(got.starts_with("staged"), "{op} {}: {v}", c.name);
            }
            seen.insert(v["assembly"].as_str().unwrap_or("").to_string());
        }
    }
    let all = ["staged", "staged_dense", "staged_groups", "two_phase"];
    assert_eq!(
        seen,
        all.iter().map(|x| x.to_string()).collect(),
        "every assembly once"
    );
}

#[test]
fn sixteen_bit_operands_check_against_the_rounded_reference() {
    // `--dtype float16|bfloat16`: the operands stored in 16 bits, float32 arithmetic: the
    // output equals the f64 reference of the rounded operands to float32 accuracy.
    if !have_cc() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cases = cases();
    let path = cases[0].write(dir.path());
    for dtype in ["float16", "bfloat16"] {
        for op in ["spmm", "sddmm", "spmv"] {
            let o = run(&[
                "bench",
                op,
                "--matrix",
                path.to_str().unwrap(),
                "--feat",
                "8",
                "--dtype",
                dtype,
                "--json",
                "--repeat",
                "1",
                "--warmup",
                "0",
                "--warmup-ms",
                "0",
            ]);
            assert!(o.status.success(), "{op} {dtype}: {}", text(&o.stderr));
            let lines = json_lines(&o);
            assert_eq!(lines.len(), 1, "{op} {dtype}");
            assert_eq!(lines[0]["dtype"], dtype);
            assert_eq!(lines[0]["check"], true, "{}", lines[0]);
            assert!(lines[0]["relerr"].as_f64().unwrap() < 1e-5, "{}", lines[0]);
        }
    }
    // Formats with a kernel of their own take 16-bit operands too.
    for (op, format, ran) in [
        ("spmm", "bsr:2", "bsr(block=2)"),
        ("spmm", "condense", "condense"),
        ("spmv", "sell", "sell(sigma="),
    ] {
        let o = run(&[
            "bench",
            op,
            "--matrix",
            path.to_str().unwrap(),
            "--feat",
            "8",
            "--dtype",
            "bfloat16",
            "--format",
            format,
            "--json",
            "--repeat",
            "1",
            "--warmup",
            "0",
            "--warmup-ms",
            "0",
        ]);
        assert!(o.status.success(), "{op} {format}: {}", text(&o.stderr));
        let lines = json_lines(&o);
        assert!(
            lines[0]["format"].as_str().unwrap().starts_with(ran),
            "{}",
            lines[0]
        );
        assert_eq!(lines[0]["dtype"], "bfloat16");
        assert_eq!(lines[0]["check"], true, "{}", lines[0]);
    }
    for bad in [
        &["--dtype", "int8"][..],
        &["--dtype", "float16", "--format", "hyb"][..],
        &["--dtype", "float16", "--format", "auto"][..],
    ] {
        let mut args = vec!["bench", "spmm", "--matrix", path.to_str().unwrap()];
        args.extend_from_slice(bad);
        let o = run(&args);
        assert_eq!(o.status.code(), Some(1), "{bad:?}");
        assert!(text(&o.stderr).contains("--dtype"), "{}", text(&o.stderr));
    }
}

#[test]
fn table_lists_every_case() {
    if !have_cc() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let c = &cases()[0];
    let p = c.write(dir.path());
    let o = run(&[
        "bench",
        "spmm",
        "--matrix",
        p.to_str().unwrap(),
        "--feat",
        "8,32",
        "--repeat",
        "1",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let rows: Vec<&str> = out.lines().filter(|l| l.contains(c.name)).collect();
    assert_eq!(rows.len(), 2, "{out}");
    assert!(rows.iter().all(|r| r.trim_end().ends_with("true")), "{out}");
}

#[test]
fn bad_inputs_exit_one() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.mtx");
    let o = run(&[
        "bench",
        "spmm",
        "--matrix",
        missing.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("missing.mtx"),
        "{}",
        text(&o.stderr)
    );
    assert!(o.stdout.is_empty());

    let garbage = dir.path().join("garbage.mtx");
    std::fs::write(&garbage, "not a matrix market file\n").unwrap();
    let o = run(&["bench", "spmv", "--matrix", garbage.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));

    let good = cases()[0].write(dir.path());
    let good = good.to_str().unwrap();
    for args in [
        vec!["bench", "spfoo", "--matrix", good],
        // A + Aᵀ of a 7 x 9 matrix.
        vec!["bench", "spadd", "--matrix", good],
        vec!["bench", "spgemm", "--matrix", good, "--device", "cuda"],
        vec!["bench", "spgemm", "--matrix", good, "--dtype", "float16"],
        vec!["bench", "spmm", "--matrix", good, "--feat", "0"],
        vec!["bench", "spmm", "--matrix", good, "--feat", "x"],
        vec!["bench", "spmm", "--matrix", good, "--format", "bsr"],
        vec!["bench", "spmm"],
        vec!["bench", "spmm", "--matrix", good, "--repeat", "many"],
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", text(&o.stderr));
        assert!(
            text(&o.stderr).contains("error"),
            "{args:?}: {}",
            text(&o.stderr)
        );
    }
}

/// A 12 × 12 attention mask: a band of width 1 plus column 0 (a global token), rows 4 and 9
/// empty.
fn write_mask(dir: &Path) -> PathBuf {
    let mut entries = Vec::new();
    for i in 0..12usize {
        if i == 4 || i == 9 {
            continue;
        }
        for j in 0..12usize {
            if j == 0 || i.abs_diff(j) <= 1 {
                entries.push((i + 1, j + 1));
            }
        }
    }
    let mut s = format!(
        "%%MatrixMarket matrix coordinate pattern general\n12 12 {}\n",
        entries.len()
    );
    for (i, j) in &entries {
        s.push_str(&format!("{i} {j}\n"));
    }
    let p = dir.join("mask.mtx");
    std::fs::write(&p, s).unwrap();
    p
}

#[test]
fn attention_matches_the_f64_reference() {
    // Masked attention (SDDMM, sparse softmax, SpMM per head) against the reference computed
    // in the benchmark from the same (rounded) Q, K, V; empty mask rows give 0.
    if !have_cc() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mask = write_mask(dir.path());
    for dtype in ["float32", "float16", "bfloat16"] {
        let o = run(&[
            "bench",
            "attention",
            "--matrix",
            mask.to_str().unwrap(),
            "--heads",
            "3",
            "--feat",
            "8,16",
            "--dtype",
            dtype,
            "--json",
            "--repeat",
            "1",
            "--warmup",
            "0",
            "--warmup-ms",
            "0",
        ]);
        assert!(o.status.success(), "{dtype}: {}", text(&o.stderr));
        let lines = json_lines(&o);
        assert_eq!(lines.len(), 2, "{dtype}");
        for l in &lines {
            assert_eq!(l["op"], "attention");
            assert_eq!(l["heads"], 3);
            assert_eq!(l["dtype"], dtype);
            assert_eq!(l["check"], true, "{l}");
            assert!(l["relerr"].as_f64().unwrap() < 1e-5, "{l}");
            assert!(l["seconds"].as_f64().unwrap() > 0.0, "{l}");
            // Each kernel's share: the three add up to the total.
            let parts: f64 = ["scores", "softmax", "product"]
                .iter()
                .map(|k| l["kernel_seconds"][k].as_f64().unwrap())
                .sum();
            let total = l["seconds"].as_f64().unwrap();
            assert!((parts - total).abs() <= 1e-9 * total.max(1.0), "{l}");
        }
    }
    // `--print-c`: the three kernels' C, named, nothing run; the softmax's exponentials in
    // vectors. Not for a GPU (`--emit-cuda` writes those).
    let m = mask.to_str().unwrap();
    for (format, block) in [("csr", "1"), ("bsr:4", "4")] {
        let o = run(&[
            "bench",
            "attention",
            "--matrix",
            m,
            "--feat",
            "16",
            "--format",
            format,
            "--block",
            block,
            "--print-c",
        ]);
        assert!(o.status.success(), "{format}: {}", text(&o.stderr));
        let c = text(&o.stdout);
        assert_eq!(
            c.matches("/* ---- bench attention: ").count(),
            3,
            "{format}: {c}"
        );
        assert_eq!(
            c.matches("static int32_t sptir_kernel(").count(),
            3,
            "{format}"
        );
        assert!(c.contains("_f32_exp("), "{format}: {c}");
        assert!(!c.contains("\"check\""), "{format}: ran a case");
    }
    let o = run(&[
        "bench",
        "attention",
        "--matrix",
        m,
        "--print-c",
        "--device",
        "cuda-emu",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("--emit-cuda"),
        "{}",
        text(&o.stderr)
    );
    // A mask must be square.
    let rect = dir.path().join("rect.mtx");
    std::fs::write(
        &rect,
        "%%MatrixMarket matrix coordinate pattern general\n2 3 1\n1 1\n",
    )
    .unwrap();
    let o = run(&["bench", "attention", "--matrix", rect.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("square"), "{}", text(&o.stderr));
}
