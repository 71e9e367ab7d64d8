//! End-to-end tests of `sparsetir run` on the sparse-output kernels of issue 15 (`spadd`,
//! `spmul`, `spgemm` with an output the kernel assembles, `masked_spgemm` with its output on the
//! mask): every operand bound from its own `.mtx` file (different structures, rectangular shapes,
//! empty rows, empty operands), the result written with `--out C=c.mtx`, read back and compared
//! with a dense computation written here — values and stored pattern. Then the error paths:
//! operands whose shapes do not conform, assembled outputs bound as inputs, backends that do not
//! assemble, unsorted or duplicate raw columns (exit code 1, clear messages, no panic).

#![allow(clippy::needless_range_loop)]

use crate::common;

use std::collections::BTreeSet;
use std::process::Output;

use common::{assert_user_error, close, run, stderr, Dir};
use sparsetir_formats::{read_mtx, write_mtx, write_npy, Coo, Field, Tensor};
use sparsetir_ir::DType;

/// A seeded linear congruential generator (Knuth's MMIX constants), independent of the code
/// under test.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    /// A nonzero value in [-2, 2] with a short binary fraction (exact in float32 and in sums
    /// of a few products).
    fn value(&mut self) -> f64 {
        let v = (self.next() % 17) as f64 / 4.0 - 2.0;
        if v == 0.0 {
            0.75
        } else {
            v
        }
    }
}

/// A sparse m×n matrix: its stored pattern (row, column) and dense values (0 where absent).
#[derive(Clone)]
struct Sparse {
    m: usize,
    n: usize,
    dense: Vec<f64>,
    pattern: BTreeSet<(usize, usize)>,
}

impl Sparse {
    fn empty(m: usize, n: usize) -> Sparse {
        Sparse {
            m,
            n,
            dense: vec![0.0; m * n],
            pattern: BTreeSet::new(),
        }
    }

    /// Random entries at `density_percent`, rows `i % empty_every == empty_every - 1` empty.
    fn random(m: usize, n: usize, density_percent: u64, empty_every: usize, seed: u64) -> Sparse {
        let mut rng = Lcg(seed);
        let mut s = Sparse::empty(m, n);
        for i in 0..m {
            if empty_every > 0 && i % empty_every == empty_every - 1 {
                continue;
            }
            for j in 0..n {
                if rng.next() % 100 < density_percent {
                    s.dense[i * n + j] = rng.value();
                    s.pattern.insert((i, j));
                }
            }
        }
        s
    }

    fn at(&self, i: usize, j: usize) -> f64 {
        self.dense[i * self.n + j]
    }

    fn coo(&self) -> Coo {
        Coo {
            dims: vec![self.m, self.n],
            coords: self
                .pattern
                .iter()
                .map(|&(i, j)| vec![i as i64, j as i64])
                .collect(),
            values: self.pattern.iter().map(|&(i, j)| self.at(i, j)).collect(),
            field: Field::Real,
        }
    }

    /// Reads a `.mtx` result: every stored entry, explicit zeros included.
    fn read(path: &std::path::Path) -> Sparse {
        let coo = read_mtx(path).expect("the result parses");
        assert_eq!(coo.rank(), 2);
        let mut s = Sparse::empty(coo.dims[0], coo.dims[1]);
        for (c, v) in coo.coords.iter().zip(&coo.values) {
            let (i, j) = (c[0] as usize, c[1] as usize);
            assert!(s.pattern.insert((i, j)), "({i}, {j}) stored twice");
            s.dense[i * s.n + j] = *v;
        }
        s
    }
}

/// `run SCRIPT --backend eval --bind NAME=NAME.mtx ... --out C=c.mtx EXTRA...` (another
/// backend when `extra` names one), each operand written to its own file.
fn run_kernel(d: &Dir, kernel: &str, operands: &[(&str, &Sparse)], extra: &[&str]) -> Output {
    let script = d.script(kernel);
    let mut args: Vec<String> = vec!["run".into(), script];
    if !extra.contains(&"--backend") {
        args.extend(["--backend".into(), "eval".into()]);
    }
    for (name, s) in operands {
        let file = format!("{}.mtx", name.to_lowercase());
        write_mtx(d.path(&file), &s.coo()).unwrap();
        args.push("--bind".into());
        args.push(d.bind(name, &file));
    }
    args.push("--out".into());
    args.push(d.bind("C", "c.mtx"));
    args.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    run(&refs)
}

/// Runs `kernel` on the evaluator, the interpreter and (with a C compiler) the C backend, and
/// compares C (shape, stored pattern, values) with `want`.
fn check(kernel: &str, operands: &[(&str, &Sparse)], want: &Sparse) {
    for backend in ["eval", "interp", "c"] {
        if backend == "c" && !common::have_cc() {
            continue;
        }
        check_on(kernel, operands, want, backend);
    }
}

fn check_on(kernel: &str, operands: &[(&str, &Sparse)], want: &Sparse, backend: &str) {
    let d = Dir::new();
    let o = run_kernel(&d, kernel, operands, &["--backend", backend]);
    let kernel = format!("{kernel} (--backend {backend})");
    assert!(o.status.success(), "{kernel}: run failed: {}", stderr(&o));
    let text = std::fs::read_to_string(d.path("c.mtx")).unwrap();
    assert!(
        text.starts_with("%%MatrixMarket matrix coordinate real general\n"),
        "{text}"
    );
    let got = Sparse::read(&d.path("c.mtx"));
    assert_eq!((got.m, got.n), (want.m, want.n), "{kernel}: shape");
    assert_eq!(got.pattern, want.pattern, "{kernel}: stored pattern");
    for &(i, j) in &want.pattern {
        let (g, w) = (got.at(i, j), want.at(i, j));
        assert!(close(g, w), "{kernel}: C[{i},{j}] = {g}, want {w}");
    }
}

/// A + B over the union of the patterns.
fn spadd(a: &Sparse, b: &Sparse) -> Sparse {
    let mut c = Sparse::empty(a.m, a.n);
    c.pattern = a.pattern.union(&b.pattern).copied().collect();
    for &(i, j) in &c.pattern {
        c.dense[i * c.n + j] = a.at(i, j) + b.at(i, j);
    }
    c
}

/// A ∘ B over the intersection of the patterns.
fn spmul(a: &Sparse, b: &Sparse) -> Sparse {
    let mut c = Sparse::empty(a.m, a.n);
    c.pattern = a.pattern.intersection(&b.pattern).copied().collect();
    for &(i, j) in &c.pattern {
        c.dense[i * c.n + j] = a.at(i, j) * b.at(i, j);
    }
    c
}

/// A · B, stored where some stored A[i, k] meets a stored B[k, j] (the symbolic product).
fn spgemm(a: &Sparse, b: &Sparse) -> Sparse {
    let mut c = Sparse::empty(a.m, b.n);
    for &(i, k) in &a.pattern {
        for &(_, j) in b.pattern.range((k, 0)..(k + 1, 0)) {
            c.pattern.insert((i, j));
            c.dense[i * c.n + j] += a.at(i, k) * b.at(k, j);
        }
    }
    c
}

/// M ∘ (A · B) on M's pattern (explicit zeros kept).
fn masked_spgemm(mask: &Sparse, a: &Sparse, b: &Sparse) -> Sparse {
    let mut c = Sparse::empty(mask.m, mask.n);
    c.pattern = mask.pattern.clone();
    for &(i, j) in &mask.pattern {
        let ab: f64 = (0..a.n).map(|k| a.at(i, k) * b.at(k, j)).sum();
        c.dense[i * c.n + j] = mask.at(i, j) * ab;
    }
    c
}

#[test]
fn spadd_random_rectangular_with_empty_rows() {
    for (m, n, seed) in [(7, 5, 1), (4, 9, 2), (1, 1, 3)] {
        let a = Sparse::random(m, n, 40, 3, seed);
        let b = Sparse::random(m, n, 30, 4, seed + 100);
        check("spadd", &[("A", &a), ("B", &b)], &spadd(&a, &b));
    }
}

#[test]
fn spadd_with_an_empty_operand() {
    let a = Sparse::random(6, 4, 50, 3, 7);
    let b = Sparse::empty(6, 4);
    check("spadd", &[("A", &a), ("B", &b)], &a);
    check("spadd", &[("A", &b), ("B", &a)], &a);
    check("spadd", &[("A", &b), ("B", &b)], &b);
}

#[test]
fn spmul_random_rectangular_with_empty_rows() {
    for (m, n, seed) in [(7, 5, 11), (3, 12, 12)] {
        let a = Sparse::random(m, n, 60, 3, seed);
        let b = Sparse::random(m, n, 50, 4, seed + 100);
        check("spmul", &[("A", &a), ("B", &b)], &spmul(&a, &b));
    }
    // Disjoint patterns: nothing stored.
    let mut a = Sparse::empty(2, 3);
    let mut b = Sparse::empty(2, 3);
    a.pattern.insert((0, 0));
    a.dense[0] = 1.0;
    b.pattern.insert((0, 1));
    b.dense[1] = 2.0;
    check("spmul", &[("A", &a), ("B", &b)], &Sparse::empty(2, 3));
}

#[test]
fn spgemm_random_rectangular_with_empty_rows() {
    for (m, k, n, seed) in [(7, 5, 9, 21), (5, 8, 3, 22), (1, 1, 1, 23), (3, 1, 4, 24)] {
        let a = Sparse::random(m, k, 40, 3, seed);
        let b = Sparse::random(k, n, 35, 4, seed + 100);
        check("spgemm", &[("A", &a), ("B", &b)], &spgemm(&a, &b));
    }
}

#[test]
fn spgemm_with_an_empty_operand() {
    let a = Sparse::random(4, 6, 50, 0, 31);
    let b = Sparse::random(6, 5, 50, 0, 32);
    check(
        "spgemm",
        &[("A", &Sparse::empty(4, 6)), ("B", &b)],
        &Sparse::empty(4, 5),
    );
    check(
        "spgemm",
        &[("A", &a), ("B", &Sparse::empty(6, 5))],
        &Sparse::empty(4, 5),
    );
}

#[test]
fn masked_spgemm_random_rectangular_with_empty_rows() {
    for (m, k, n, seed) in [(7, 5, 9, 41), (4, 6, 3, 42)] {
        let mask = Sparse::random(m, n, 50, 3, seed);
        let a = Sparse::random(m, k, 40, 4, seed + 100);
        let b = Sparse::random(k, n, 40, 0, seed + 200);
        let want = masked_spgemm(&mask, &a, &b);
        check(
            "masked_spgemm",
            &[("M", &mask), ("A", &a), ("B", &b)],
            &want,
        );
    }
    // An empty product keeps the mask's pattern, with zeros.
    let mask = Sparse::random(3, 4, 60, 0, 51);
    let want = masked_spgemm(&mask, &Sparse::empty(3, 2), &Sparse::empty(2, 4));
    check(
        "masked_spgemm",
        &[
            ("M", &mask),
            ("A", &Sparse::empty(3, 2)),
            ("B", &Sparse::empty(2, 4)),
        ],
        &want,
    );
}

/// Duplicate entries of an operand's file are summed, as for every operand of every kernel.
#[test]
fn duplicate_file_entries_are_summed() {
    let d = Dir::new();
    let script = d.script("spadd");
    d.write(
        "a.mtx",
        "%%MatrixMarket matrix coordinate real general\n2 3 3\n2 3 1.5\n1 2 1.0\n2 3 2.0\n",
    );
    d.write(
        "b.mtx",
        "%%MatrixMarket matrix coordinate real general\n2 3 1\n2 3 0.25\n",
    );
    let (a, b, c) = (
        d.bind("A", "a.mtx"),
        d.bind("B", "b.mtx"),
        d.bind("C", "c.mtx"),
    );
    let o = run(&["run", &script, "--bind", &a, "--bind", &b, "--out", &c]);
    assert!(o.status.success(), "{}", stderr(&o));
    let got = Sparse::read(&d.path("c.mtx"));
    assert_eq!(got.pattern, BTreeSet::from([(0, 1), (1, 2)]));
    assert!(close(got.at(0, 1), 1.0) && close(got.at(1, 2), 3.75));
}

#[test]
fn nonconforming_shapes_name_both_files_and_the_dimension() {
    let d = Dir::new();
    let a = Sparse::random(7, 5, 40, 0, 61);
    let b = Sparse::random(4, 9, 40, 0, 62);
    let o = run_kernel(&d, "spgemm", &[("A", &a), ("B", &b)], &[]);
    let (fa, fb) = (d.s("a.mtx"), d.s("b.mtx"));
    let want = format!("`A` ({fa}) is 7×5 but `B` ({fb}) is 4×9: `k` would be 5 and 4");
    assert_user_error(&o, &["shapes do not conform", &want]);
    assert!(!d.path("c.mtx").exists());
    // spadd: the operands' columns differ.
    let d = Dir::new();
    let a = Sparse::random(3, 4, 40, 0, 63);
    let b = Sparse::random(3, 5, 40, 0, 64);
    let o = run_kernel(&d, "spadd", &[("A", &a), ("B", &b)], &[]);
    assert_user_error(&o, &["is 3×4 but `B`", "is 3×5: `n` would be 4 and 5"]);
    // masked_spgemm: the mask's columns against B's.
    let d = Dir::new();
    let mask = Sparse::random(3, 4, 40, 0, 65);
    let a = Sparse::random(3, 2, 40, 0, 66);
    let b = Sparse::random(2, 6, 40, 0, 67);
    let o = run_kernel(
        &d,
        "masked_spgemm",
        &[("M", &mask), ("A", &a), ("B", &b)],
        &[],
    );
    assert_user_error(
        &o,
        &["`M` (", "is 3×4 but `B`", "is 2×6: `n` would be 4 and 6"],
    );
}

#[test]
fn assembled_outputs_are_not_inputs() {
    let d = Dir::new();
    let a = Sparse::random(3, 4, 40, 0, 71);
    let b = Sparse::random(4, 2, 40, 0, 72);
    write_mtx(d.path("x.mtx"), &Sparse::empty(3, 2).coo()).unwrap();
    let bind_c = d.bind("C", "x.mtx");
    let o = run_kernel(&d, "spgemm", &[("A", &a), ("B", &b)], &["--bind", &bind_c]);
    assert_user_error(&o, &["buffer `C`", "axis `JC`", "assembles"]);
    let o = run_kernel(&d, "spgemm", &[("A", &a), ("B", &b)], &["--set", "nnz_c=3"]);
    assert_user_error(&o, &["`nnz_c`", "axis `JC`", "output"]);
    write_npy(
        d.path("ip.npy"),
        &Tensor::from_i64(DType::I32, &[0, 0, 0, 0]).unwrap(),
    )
    .unwrap();
    let bind_ip = d.bind("c_indptr", "ip.npy");
    let o = run_kernel(&d, "spgemm", &[("A", &a), ("B", &b)], &["--bind", &bind_ip]);
    assert_user_error(&o, &["`c_indptr`", "axis `JC`"]);
    // An operand missing: named, not a size.
    let d = Dir::new();
    let o = run_kernel(&d, "spgemm", &[("A", &a)], &[]);
    assert_user_error(&o, &["input buffer `B` is not bound"]);
}

#[test]
fn assembled_outputs_do_not_run_on_the_gpu_yet() {
    let a = Sparse::random(3, 4, 40, 0, 81);
    let b = Sparse::random(3, 4, 40, 0, 82);
    for kernel in ["spadd", "spmul"] {
        for backend in ["cuda-emu", "cuda"] {
            let d = Dir::new();
            let o = run_kernel(&d, kernel, &[("A", &a), ("B", &b)], &["--backend", backend]);
            assert_user_error(
                &o,
                &[
                    "axis `JC`",
                    "assembled outputs run on --backend eval, interp or c",
                ],
            );
            assert!(!d.path("c.mtx").exists());
        }
    }
}

/// Columns handed in as raw CSR arrays are the one way to give unsorted or duplicate columns
/// (files are packed sorted): refused, naming the axis, the array and the operand.
#[test]
fn unsorted_or_duplicate_raw_columns_name_the_operand() {
    for (indices, ok) in [
        (&[0i64, 3, 1][..], true),
        (&[3, 0, 1], false),
        (&[2, 2, 1], false),
    ] {
        let d = Dir::new();
        let script = d.script("spadd");
        let i32s = |v: &[i64]| Tensor::from_i64(DType::I32, v).unwrap();
        write_npy(d.path("ip.npy"), &i32s(&[0, 2, 2, 3])).unwrap();
        write_npy(d.path("ix.npy"), &i32s(indices)).unwrap();
        write_npy(
            d.path("va.npy"),
            &Tensor::from_f64(DType::F32, &[1.0, 2.0, 4.0]).unwrap(),
        )
        .unwrap();
        let b = Sparse::random(3, 4, 50, 0, 91);
        write_mtx(d.path("b.mtx"), &b.coo()).unwrap();
        let binds = [
            d.bind("a_indptr", "ip.npy"),
            d.bind("a_indices", "ix.npy"),
            d.bind("a", "va.npy"),
            d.bind("B", "b.mtx"),
        ];
        let out = d.bind("C", "c.mtx");
        let mut args = vec!["run", &script];
        for b in &binds {
            args.extend(["--bind", b]);
        }
        args.extend(["--out", &out]);
        let o = run(&args);
        if ok {
            assert!(o.status.success(), "{}", stderr(&o));
            let mut a = Sparse::empty(3, 4);
            for (&(i, j), v) in [(0, 0), (0, 3), (2, 1)].iter().zip([1.0, 2.0, 4.0]) {
                a.pattern.insert((i, j));
                a.dense[i * 4 + j] = v;
            }
            let got = Sparse::read(&d.path("c.mtx"));
            let want = spadd(&a, &b);
            assert_eq!(got.pattern, want.pattern);
            for &(i, j) in &want.pattern {
                assert!(close(got.at(i, j), want.at(i, j)), "C[{i},{j}]");
            }
        } else {
            assert_user_error(
                &o,
                &[
                    "axis `JA`",
                    "not strictly increasing",
                    "declared sorted",
                    "`a_indices`",
                    "buffer `A`",
                ],
            );
            assert!(!d.path("c.mtx").exists());
        }
    }
}

/// `sparsetir lower --phase` prints one phase of an assembling function — the staged pass the
/// C backend runs for SpGEMM included — and names the phases when given another word.
#[test]
fn lower_prints_one_assembly_phase() {
    let d = Dir::new();
    let script = d.script("spgemm");
    for (phase, needle) in [
        ("bound", "nst"),
        ("staged", "T.atomic_add("),
        ("staged_dense", "T.mask64("),
        ("gather", "c_indptr__start"),
        ("symbolic", "flag"),
    ] {
        let o = run(&["lower", &script, "--phase", phase]);
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(o.status.success(), "{phase}: {}", stderr(&o));
        assert!(out.contains(needle), "{phase}: no `{needle}` in\n{out}");
        assert_eq!(
            out.matches("def spgemm").count(),
            1,
            "{phase}: one function"
        );
    }
    let o = run(&["lower", &script, "--phase", "fused"]);
    assert_user_error(&o, &["--phase fused", "staged_dense", "gather"]);
}
