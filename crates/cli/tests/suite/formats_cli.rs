//! End-to-end tests of the formats subcommands (`info`, `gen`, `convert`): values checked against
//! computations written here, and malformed inputs (exit code 1, message naming the line).

use crate::common;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use common::{run, stderr, stdout};
use sparsetir_formats::{read_mtx, read_npy, read_tns, Tensor};

fn ok(args: &[&str]) -> String {
    let o = run(args);
    assert!(o.status.success(), "{args:?} failed: {}", stderr(&o));
    stdout(&o)
}

fn fails(args: &[&str]) -> String {
    let o = run(args);
    assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
    stderr(&o)
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `key: value` lines of `sparsetir info`.
fn fields(report: &str) -> HashMap<String, String> {
    report
        .lines()
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A symmetric 5x5 matrix stored as its lower triangle; row 3 is empty after expansion.
const SYM: &str = "%%MatrixMarket matrix coordinate real symmetric
% lower triangle
5 5 5
1 1 2.0
2 1 -1.5
3 2 4.0
5 1 0.5

5 5 7.0
";

#[test]
fn info_reports_expanded_counts() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "sym.mtx", SYM);
    let out = ok(&["info", s(&f)]);
    let kv = fields(&out);
    // Expanded by hand: (0,0) (1,0) (0,1) (2,1) (1,2) (4,0) (0,4) (4,4).
    let entries = [
        (0, 0),
        (1, 0),
        (0, 1),
        (2, 1),
        (1, 2),
        (4, 0),
        (0, 4),
        (4, 4),
    ];
    let mut deg = [0usize; 5];
    for (i, _) in entries {
        deg[i] += 1;
    }
    assert_eq!(kv["rows"], "5");
    assert_eq!(kv["cols"], "5");
    assert_eq!(kv["nnz"], entries.len().to_string());
    assert_eq!(kv["symmetry"], "symmetric");
    assert_eq!(kv["field"], "real");
    let (min, max) = (deg.iter().min().unwrap(), deg.iter().max().unwrap());
    let mean = entries.len() as f64 / 5.0;
    let rd = &kv["row degree"];
    assert!(rd.starts_with(&format!("min {min}, mean ")), "{rd}");
    assert!(rd.ends_with(&format!(", max {max}")), "{rd}");
    let got_mean: f64 = rd
        .split("mean ")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!((got_mean - mean).abs() < 1e-3);
    assert_eq!(
        kv["empty rows"],
        deg.iter().filter(|&&d| d == 0).count().to_string()
    );
}

#[test]
fn info_on_generated_graph_and_tns() {
    let dir = tempfile::tempdir().unwrap();
    let g = dir.path().join("g.mtx");
    ok(&[
        "gen",
        "rmat",
        "--nodes",
        "300",
        "--edges",
        "2000",
        "--seed",
        "4",
        "-o",
        s(&g),
    ]);
    let coo = read_mtx(&g).unwrap();
    let kv = fields(&ok(&["info", s(&g)]));
    let mut deg = vec![0usize; 300];
    for c in &coo.coords {
        deg[c[0] as usize] += 1;
    }
    assert_eq!(kv["nnz"], "2000");
    assert_eq!(kv["field"], "pattern");
    assert_eq!(
        kv["empty rows"],
        deg.iter().filter(|&&d| d == 0).count().to_string()
    );
    assert!(kv["row degree"].ends_with(&format!("max {}", deg.iter().max().unwrap())));
    // A 3-D .tns: dims and first-index slice degrees.
    let t = write(dir.path(), "t.tns", "1 1 1 1.0\n2 3 1 2.0\n2 1 4 3.0\n");
    let kv = fields(&ok(&["info", s(&t)]));
    assert_eq!(kv["rank"], "3");
    assert_eq!(kv["dims"], "2 x 3 x 4");
    assert_eq!(kv["nnz"], "3");
    assert_eq!(kv["row degree"], "min 1, mean 1.5000, max 2");
    assert_eq!(kv["empty rows"], "0");
}

#[test]
fn gen_every_kind() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    let cases: Vec<(Vec<&str>, &str, usize, usize)> = vec![
        (
            vec![
                "rmat",
                "--nodes",
                "64",
                "--edges",
                "300",
                "--permute",
                "--no-self-loops",
            ],
            "r.mtx",
            64,
            64,
        ),
        (
            vec![
                "chung-lu",
                "--nodes",
                "200",
                "--avg-degree",
                "4",
                "--exponent",
                "2.2",
            ],
            "c.mtx",
            200,
            200,
        ),
        (
            vec![
                "uniform",
                "--rows",
                "20",
                "--cols",
                "30",
                "--density",
                "0.1",
            ],
            "u.mtx",
            20,
            30,
        ),
        (
            vec!["banded", "--rows", "12", "--bandwidth", "2"],
            "b.mtx",
            12,
            12,
        ),
        (
            vec![
                "block",
                "--rows",
                "16",
                "--cols",
                "12",
                "--block",
                "4x3",
                "--density",
                "0.5",
            ],
            "k.mtx",
            16,
            12,
        ),
        (
            vec![
                "longformer",
                "--seq-len",
                "32",
                "--window",
                "3",
                "--global",
                "2",
            ],
            "l.mtx",
            32,
            32,
        ),
        (
            vec!["pixelfly", "--size", "32", "--block", "4", "--global", "1"],
            "p.mtx",
            32,
            32,
        ),
        (
            vec!["mask24", "--rows", "8", "--cols", "16"],
            "m.mtx",
            8,
            16,
        ),
    ];
    for (args, file, rows, cols) in cases {
        let out = p(file);
        let mut a = vec!["gen"];
        a.extend(args.iter().copied());
        a.extend(["-o", s(&out)]);
        ok(&a);
        let coo = read_mtx(&out).unwrap();
        assert_eq!(coo.dims, vec![rows, cols], "{file}");
        let distinct: HashSet<_> = coo.coords.iter().collect();
        assert_eq!(distinct.len(), coo.nnz(), "{file}: duplicates");
        match file {
            "r.mtx" => {
                assert_eq!(coo.nnz(), 300);
                assert!(coo.coords.iter().all(|c| c[0] != c[1]));
            }
            "c.mtx" => {
                assert_eq!(coo.nnz(), 2 * 400);
                let set: HashSet<(i64, i64)> = coo.coords.iter().map(|c| (c[0], c[1])).collect();
                assert!(set.iter().all(|&(i, j)| set.contains(&(j, i))));
            }
            "u.mtx" => assert_eq!(coo.nnz(), 60),
            // 12 rows, band of 5 clipped at both ends: 12 * 5 - 2 * (2 + 1).
            "b.mtx" => assert_eq!(coo.nnz(), 12 * 5 - 6),
            // 4 x 4 = 16 blocks of 4 x 3, half of them stored.
            "k.mtx" => assert_eq!(coo.nnz(), 8 * 12),
            "l.mtx" => {
                let want = (0..32i64)
                    .flat_map(|i| (0..32i64).map(move |j| (i, j)))
                    .filter(|&(i, j)| (i - j).abs() <= 3 || i < 2 || j < 2)
                    .count();
                assert_eq!(coo.nnz(), want);
            }
            "p.mtx" => {
                let want = (0..32usize)
                    .flat_map(|i| (0..32usize).map(move |j| (i / 4, j / 4)))
                    .filter(|&(a, b)| (a ^ b).count_ones() <= 1 || a < 1 || b < 1)
                    .count();
                assert_eq!(coo.nnz(), want);
            }
            "m.mtx" => {
                let mut groups: HashMap<(i64, i64), usize> = HashMap::new();
                for c in &coo.coords {
                    *groups.entry((c[0], c[1] / 4)).or_default() += 1;
                }
                assert_eq!(groups.len(), 8 * 4);
                assert!(groups.values().all(|&k| k == 2));
            }
            _ => unreachable!(),
        }
    }
    // Same seed, same bytes; another seed, another graph.
    let (a, b, c) = (p("a.mtx"), p("b2.mtx"), p("c2.mtx"));
    for (f, seed) in [(&a, "5"), (&b, "5"), (&c, "6")] {
        ok(&[
            "gen",
            "uniform",
            "--rows",
            "40",
            "--density",
            "0.2",
            "--seed",
            seed,
            "-o",
            s(f),
        ]);
    }
    let read = |f: &Path| std::fs::read(f).unwrap();
    assert_eq!(read(&a), read(&b));
    assert_ne!(read(&a), read(&c));
    // .tns output holds the same matrix.
    let t = p("u.tns");
    ok(&[
        "gen",
        "uniform",
        "--rows",
        "40",
        "--density",
        "0.2",
        "--seed",
        "5",
        "-o",
        s(&t),
    ]);
    assert_eq!(read_tns(&t).unwrap().coords, read_mtx(&a).unwrap().coords);
}

fn dense_of(path: &Path) -> (usize, usize, Vec<f64>) {
    let coo = read_mtx(path).unwrap();
    let (m, n) = (coo.dims[0], coo.dims[1]);
    let mut d = vec![0.0; m * n];
    for (c, v) in coo.coords.iter().zip(&coo.values) {
        d[c[0] as usize * n + c[1] as usize] += v;
    }
    (m, n, d)
}

fn npy(dir: &Path, name: &str) -> Tensor {
    read_npy(dir.join(name)).unwrap()
}

fn close(a: &[f64], b: &[f64]) {
    assert_eq!(a.len(), b.len());
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= 1e-6 * (1.0 + y.abs()), "{x} vs {y}");
    }
}

#[test]
fn convert_to_arrays() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = write(d, "sym.mtx", SYM);
    let (m, n, want) = dense_of(&src);

    // CSR
    let out = d.join("csr");
    ok(&["convert", s(&src), "--to", "csr", "-o", s(&out)]);
    let (ip, ix, v) = (
        npy(&out, "indptr.npy"),
        npy(&out, "indices.npy"),
        npy(&out, "values.npy"),
    );
    assert_eq!(ip.shape, vec![m + 1]);
    assert!(matches!(ip.data, sparsetir_formats::TensorData::I32(_)));
    assert!(matches!(v.data, sparsetir_formats::TensorData::F32(_)));
    let (ip, ix, v) = (ip.to_i64_vec(), ix.to_i64_vec(), v.to_f64_vec());
    let mut got = vec![0.0; m * n];
    for i in 0..m {
        for p in ip[i] as usize..ip[i + 1] as usize {
            got[i * n + ix[p] as usize] += v[p];
        }
        let row = &ix[ip[i] as usize..ip[i + 1] as usize];
        assert!(row.windows(2).all(|w| w[0] < w[1]));
    }
    close(&got, &want);
    assert_eq!(
        npy(&out, "shape.npy").to_i64_vec(),
        vec![m as i64, n as i64]
    );

    // CSC, int64 / float64
    let out = d.join("csc");
    ok(&[
        "convert",
        s(&src),
        "--to",
        "csc",
        "-o",
        s(&out),
        "--idtype",
        "int64",
        "--dtype",
        "float64",
    ]);
    let (ip, ix, v) = (
        npy(&out, "indptr.npy"),
        npy(&out, "indices.npy"),
        npy(&out, "values.npy"),
    );
    assert!(matches!(ip.data, sparsetir_formats::TensorData::I64(_)));
    let (ip, ix, v) = (ip.to_i64_vec(), ix.to_i64_vec(), v.to_f64_vec());
    assert_eq!(ip.len(), n + 1);
    let mut got = vec![0.0; m * n];
    for j in 0..n {
        for p in ip[j] as usize..ip[j + 1] as usize {
            got[ix[p] as usize * n + j] += v[p];
        }
    }
    close(&got, &want);

    // ELL with the default width (the largest row degree).
    let out = d.join("ell");
    ok(&["convert", s(&src), "--to", "ell", "-o", s(&out)]);
    let ix = npy(&out, "indices.npy");
    let w = ix.shape[1];
    let max_deg = (0..m)
        .map(|i| (0..n).filter(|&j| want[i * n + j] != 0.0).count())
        .max()
        .unwrap();
    assert_eq!(ix.shape, vec![m, max_deg]);
    let (ix, v, cnt) = (
        ix.to_i64_vec(),
        npy(&out, "values.npy").to_f64_vec(),
        npy(&out, "counts.npy").to_i64_vec(),
    );
    let mut got = vec![0.0; m * n];
    for i in 0..m {
        for k in 0..w {
            if (k as i64) < cnt[i] {
                got[i * n + ix[i * w + k] as usize] += v[i * w + k];
            } else {
                assert_eq!((ix[i * w + k], v[i * w + k]), (0, 0.0));
            }
        }
    }
    close(&got, &want);
    let e = fails(&[
        "convert",
        s(&src),
        "--to",
        "ell:1",
        "-o",
        s(&d.join("ell1")),
    ]);
    assert!(e.contains("row 0 has 3 entries"), "{e}");

    // BSR 2x2 on an 8x6 matrix (blocks divide); 5x5 needs --pad.
    let g = d.join("u.mtx");
    ok(&[
        "gen",
        "uniform",
        "--rows",
        "8",
        "--cols",
        "6",
        "--density",
        "0.3",
        "--seed",
        "2",
        "-o",
        s(&g),
    ]);
    let (m, n, want) = dense_of(&g);
    let out = d.join("bsr");
    ok(&["convert", s(&g), "--to", "bsr:2x3", "-o", s(&out)]);
    let vt = npy(&out, "values.npy");
    assert_eq!(vt.shape[1..], [2, 3]);
    let (ip, ix, v) = (
        npy(&out, "indptr.npy").to_i64_vec(),
        npy(&out, "indices.npy").to_i64_vec(),
        vt.to_f64_vec(),
    );
    assert_eq!(ip.len(), m / 2 + 1);
    let mut got = vec![0.0; m * n];
    for bi in 0..m / 2 {
        for p in ip[bi] as usize..ip[bi + 1] as usize {
            for ii in 0..2 {
                for jj in 0..3 {
                    got[(bi * 2 + ii) * n + ix[p] as usize * 3 + jj] += v[(p * 2 + ii) * 3 + jj];
                }
            }
        }
    }
    close(&got, &want);
    let e = fails(&[
        "convert",
        s(&src),
        "--to",
        "bsr:2x2",
        "-o",
        s(&d.join("b5")),
    ]);
    assert!(e.contains("does not divide"), "{e}");
    ok(&[
        "convert",
        s(&src),
        "--to",
        "bsr:2x2",
        "--pad",
        "-o",
        s(&d.join("b5")),
    ]);
    assert_eq!(npy(&d.join("b5"), "indptr.npy").shape, vec![3 + 1]);

    // Dense
    let out = d.join("dense.npy");
    ok(&[
        "convert",
        s(&src),
        "--to",
        "dense",
        "-o",
        s(&out),
        "--dtype",
        "float64",
    ]);
    let t = read_npy(&out).unwrap();
    assert_eq!(t.shape, vec![5, 5]);
    close(&t.to_f64_vec(), &dense_of(&src).2);
}

#[test]
fn convert_between_files() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = write(d, "sym.mtx", SYM);
    // symmetric -> general, then mtx -> tns -> mtx.
    let gen = d.join("gen.mtx");
    ok(&["convert", s(&src), "--to", "general", "-o", s(&gen)]);
    let head = std::fs::read_to_string(&gen).unwrap();
    assert!(head.starts_with("%%MatrixMarket matrix coordinate real general"));
    let (_, _, want) = dense_of(&src);
    assert_eq!(dense_of(&gen).2, want);
    let tns = d.join("x.tns");
    ok(&["convert", s(&gen), "--to", "tns", "-o", s(&tns)]);
    let back = d.join("back.mtx");
    ok(&["convert", s(&tns), "--to", "mtx", "-o", s(&back)]);
    assert_eq!(dense_of(&back).2, want);
    assert_eq!(read_tns(&tns).unwrap().dims, vec![5, 5]);
    let e = fails(&["convert", s(&src), "--to", "tns", "-o", s(&d.join("y.mtx"))]);
    assert!(e.contains(".tns"), "{e}");
    let e = fails(&["convert", s(&src), "--to", "coo5", "-o", s(&d.join("z"))]);
    assert!(e.contains("unknown format `coo5`"), "{e}");
}

/// Each malformed file: exit code 1, the file name and `line N` in the message.
#[test]
fn malformed_files_name_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cases: &[(&str, &str, usize, &str)] = &[
        (
            "nohdr.mtx",
            "3 3 1\n1 1 1.0\n",
            1,
            "missing `%%MatrixMarket` header",
        ),
        (
            "badhdr.mtx",
            "%%MatrixMarket matrix coordinate real\n1 1 0\n",
            1,
            "bad header",
        ),
        (
            "complex.mtx",
            "%%MatrixMarket matrix coordinate complex general\n1 1 1\n1 1 1 0\n",
            1,
            "complex",
        ),
        (
            "hermit.mtx",
            "%%MatrixMarket matrix coordinate real hermitian\n1 1 0\n",
            1,
            "hermitian",
        ),
        (
            "zero.mtx",
            "%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n0 2 1.0\n",
            4,
            "row coordinate 0",
        ),
        (
            "above.mtx",
            "%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n2 4 1.0\n",
            4,
            "column coordinate 4",
        ),
        (
            "nan.mtx",
            "%%MatrixMarket matrix coordinate real general\n% c\n3 3 1\n1 1 abc\n",
            4,
            "non-numeric field `abc`",
        ),
        (
            "many.mtx",
            "%%MatrixMarket matrix coordinate real general\n3 3 1\n1 1 1.0\n2 2 1.0\n",
            4,
            "too many entries",
        ),
        (
            "trunc.mtx",
            "%%MatrixMarket matrix coordinate real general\n3 3 3\n1 1 1.0\n2 2 1.0\n",
            4,
            "truncated",
        ),
        (
            "fields.mtx",
            "%%MatrixMarket matrix coordinate real general\n3 3 1\n1 1\n",
            3,
            "expected 3 fields",
        ),
        (
            "size.mtx",
            "%%MatrixMarket matrix coordinate real general\n3 x 1\n",
            2,
            "bad size line",
        ),
        (
            "neg.mtx",
            "%%MatrixMarket matrix coordinate pattern general\n3 3 1\n-2 1\n",
            3,
            "row coordinate -2",
        ),
        ("bad.tns", "1 1 1.0\n2 0 2.0\n", 2, "coordinate 0"),
        ("ragged.tns", "1 1 1.0\n2 2 2.0 7\n", 2, "fields"),
    ];
    for &(name, text, line, what) in cases {
        let f = write(d, name, text);
        for cmd in [
            vec!["info", s(&f)],
            vec!["convert", s(&f), "--to", "csr", "-o", s(&d.join("o"))],
        ] {
            let e = fails(&cmd);
            assert!(e.contains(name), "{name}: {e}");
            assert!(
                e.contains(&format!("line {line}:")),
                "{name}: expected line {line}: {e}"
            );
            assert!(e.contains(what), "{name}: expected `{what}`: {e}");
        }
    }
}

#[test]
fn usage_errors_exit_one() {
    let dir = tempfile::tempdir().unwrap();
    let o = dir.path().join("x.mtx");
    let e = fails(&["gen", "erdos", "-o", s(&o)]);
    assert!(e.contains("erdos"), "{e}");
    let e = fails(&[
        "gen",
        "rmat",
        "--nodes",
        "10",
        "--edges",
        "5",
        "--bogus",
        "-o",
        s(&o),
    ]);
    assert!(e.contains("--bogus"), "{e}");
    let e = fails(&["gen", "rmat", "--nodes", "ten", "--edges", "5", "-o", s(&o)]);
    assert!(e.contains("ten"), "{e}");
    let e = fails(&[
        "gen",
        "rmat",
        "--nodes",
        "3",
        "--edges",
        "10",
        "--no-self-loops",
        "-o",
        s(&o),
    ]);
    assert!(e.contains("edges"), "{e}");
    let e = fails(&["gen", "mask24", "--rows", "2", "--cols", "6", "-o", s(&o)]);
    assert!(e.contains("cols"), "{e}");
    let e = fails(&[
        "gen",
        "block",
        "--rows",
        "4",
        "--block",
        "2y2",
        "--density",
        "0.5",
        "-o",
        s(&o),
    ]);
    assert!(e.contains("2y2"), "{e}");
    let e = fails(&["info", s(&dir.path().join("missing.mtx"))]);
    assert!(e.contains("missing.mtx"), "{e}");
    let e = fails(&["info", s(&dir.path().join("x.csv"))]);
    assert!(e.contains("unknown file type"), "{e}");
    let e = fails(&["convert", "a.mtx", "-o", "b"]);
    assert!(e.contains("--to"), "{e}");
    // The older subcommands keep clap's usage exit code.
    assert_eq!(run(&["fmt"]).status.code(), Some(2));
}

/// The seed's 4x6 matrix with 2x2 blocks.
const SEED_BSR: &str = "%%MatrixMarket matrix coordinate real general
4 6 8
1 1 1
1 2 2
2 2 3
1 5 4
2 6 5
3 3 6
3 4 7
4 3 8
";

fn storage_lines(out: &str) -> HashMap<String, Vec<f64>> {
    out.lines()
        .filter_map(|l| l.split_once(" :"))
        .map(|(k, v)| {
            let nums = v.split_whitespace().map(|x| x.parse().unwrap()).collect();
            (k.to_string(), nums)
        })
        .collect()
}

#[test]
fn pack_prints_the_seed_bsr_storage() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "bsr.mtx", SEED_BSR);
    let enc = "#sparse_tensor.encoding<{ map = (i, j) -> (i floordiv 2 : dense, j floordiv 2 : \
               compressed, i mod 2 : dense, j mod 2 : dense) }>";
    let out = ok(&["pack", s(&f), "--encoding", enc]);
    let st = storage_lines(&out);
    assert_eq!(st["positions[1]"], vec![0.0, 2.0, 3.0]);
    assert_eq!(st["coordinates[1]"], vec![0.0, 2.0, 1.0]);
    let seed_values = [1., 2., 0., 3., 4., 0., 0., 5., 6., 7., 8., 0.];
    assert_eq!(st["values"], seed_values.to_vec());
    // --axes adds the equivalent declarations.
    let out = ok(&["pack", s(&f), "--encoding", enc, "--axes"]);
    assert!(out.contains("T.sp.compressed_varied"), "{out}");
}

#[test]
fn pack_csr_matches_hand_computed_arrays() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "sym.mtx", SYM);
    let out = ok(&[
        "pack",
        s(&f),
        "--encoding",
        "#sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compressed) }>",
    ]);
    let st = storage_lines(&out);
    // Rows of the expanded SYM: 0 -> {0, 1, 4}, 1 -> {0, 2}, 2 -> {1}, 3 -> {}, 4 -> {0, 4}.
    let rows: [&[(i64, f64)]; 5] = [
        &[(0, 2.0), (1, -1.5), (4, 0.5)],
        &[(0, -1.5), (2, 4.0)],
        &[(1, 4.0)],
        &[],
        &[(0, 0.5), (4, 7.0)],
    ];
    let mut pos = vec![0.0];
    let (mut crd, mut val) = (vec![], vec![]);
    for r in rows {
        for &(j, v) in r {
            crd.push(j as f64);
            val.push(v);
        }
        pos.push(crd.len() as f64);
    }
    assert_eq!(st["positions[1]"], pos);
    assert_eq!(st["coordinates[1]"], crd);
    assert_eq!(st["values"], val);
}

#[test]
fn pack_errors() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "bsr.mtx", SEED_BSR);
    let e = fails(&[
        "pack",
        s(&f),
        "--encoding",
        "#sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compresed) }>",
    ]);
    assert!(e.contains("1:59:") && e.contains("compresed"), "{e}");
    let enc = "#sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compressed) }>";
    let e = fails(&["pack", s(&f), "--encoding", enc, "--symbols", "x"]);
    assert!(e.contains("--symbols"), "{e}");
    let bad = write(
        dir.path(),
        "bad.mtx",
        "%%MatrixMarket matrix coordinate real general\n2 2 1\n3 1 1.0\n",
    );
    let e = fails(&["pack", s(&bad), "--encoding", enc]);
    assert!(e.contains("line 3:"), "{e}");
    let e = fails(&["pack", s(&f)]);
    assert!(e.contains("--encoding"), "{e}");
}
