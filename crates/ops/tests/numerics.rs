//! Numerical tests: every catalog kernel is run by the stage-I reference evaluator on
//! deterministic pseudo-random data and compared with a dense computation written here with
//! plain nested loops. The sparse structures (CSR, CSF, BSR, ELL, ragged, 2:4, hyper-graph
//! incidence) are generated in this file. Cases: random with empty rows, nnz 0, 0 rows, 1x1 and
//! rows holding every column.

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sparsetir_eval::{eval_func, ArgValue};
use sparsetir_formats::Tensor;
use sparsetir_ir::DType;

type Args = HashMap<String, ArgValue>;

fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// Values exactly representable in f32, in `[lo, hi)`.
fn vals(rng: &mut ChaCha8Rng, n: usize, lo: f64, hi: f64) -> Vec<f64> {
    (0..n)
        .map(|_| rng.random_range(lo..hi) as f32 as f64)
        .collect()
}

fn f32s(v: &[f64]) -> ArgValue {
    ArgValue::Array(Tensor::from_f64(DType::F32, v).expect("f32 tensor"))
}

fn i32s(v: &[i64]) -> ArgValue {
    ArgValue::Array(Tensor::from_i64(DType::I32, v).expect("i32 tensor"))
}

fn int(v: usize) -> ArgValue {
    ArgValue::Int(v as i64)
}

fn args(list: Vec<(&str, ArgValue)>) -> Args {
    list.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// Runs catalog kernel `name` on `args`.
fn run(name: &str, args: &mut Args) {
    let f = sparsetir_ops::load(name).unwrap_or_else(|e| panic!("{name}: {e}"));
    if let Err(e) = eval_func(&f, args) {
        panic!("{name}: evaluation failed: {e}");
    }
}

/// The array bound to parameter `key`, as f64.
fn out(args: &Args, key: &str) -> Vec<f64> {
    match args.get(key) {
        Some(ArgValue::Array(t)) => t.to_f64_vec(),
        other => panic!("parameter {key} is not an array: {other:?}"),
    }
}

/// `|got - want| <= 1e-5 * max(1, |want|)` element-wise.
fn assert_close(what: &str, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let tol = 1e-5 * w.abs().max(1.0);
        assert!(
            (g - w).abs() <= tol,
            "{what}: element {i}: got {g}, want {w}"
        );
    }
}

/// Dense row-major `(m x n) * (n x k)`.
fn matmul(a: &[f64], b: &[f64], m: usize, n: usize, k: usize) -> Vec<f64> {
    let mut c = vec![0.0; m * k];
    for i in 0..m {
        for j in 0..n {
            for l in 0..k {
                c[i * k + l] += a[i * n + j] * b[j * k + l];
            }
        }
    }
    c
}

// ---------------------------------------------------------------------------------------------
// Sparse structures

/// A CSR pattern.
#[derive(Clone, Debug)]
struct Csr {
    m: usize,
    n: usize,
    indptr: Vec<i64>,
    indices: Vec<i64>,
}

impl Csr {
    fn from_rows(n: usize, rows: &[Vec<usize>]) -> Csr {
        let mut indptr = vec![0i64];
        let mut indices = Vec::new();
        for r in rows {
            indices.extend(r.iter().map(|&j| j as i64));
            indptr.push(indices.len() as i64);
        }
        Csr {
            m: rows.len(),
            n,
            indptr,
            indices,
        }
    }
    fn nnz(&self) -> usize {
        self.indices.len()
    }
    /// `(row, column)` of every stored element, in storage order.
    fn entries(&self) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        for i in 0..self.m {
            for p in self.indptr[i] as usize..self.indptr[i + 1] as usize {
                out.push((i, self.indices[p] as usize));
            }
        }
        out
    }
    /// The dense `m x n` matrix with `values` at the stored positions.
    fn dense(&self, values: &[f64]) -> Vec<f64> {
        let mut d = vec![0.0; self.m * self.n];
        for (p, (i, j)) in self.entries().into_iter().enumerate() {
            d[i * self.n + j] = values[p];
        }
        d
    }
    fn indptr_arg(&self) -> ArgValue {
        i32s(&self.indptr)
    }
    fn indices_arg(&self) -> ArgValue {
        i32s(&self.indices)
    }
}

/// A random sorted subset of `0..n`, each element kept with probability `p`.
fn subset(rng: &mut ChaCha8Rng, n: usize, p: f64) -> Vec<usize> {
    (0..n).filter(|_| rng.random_bool(p)).collect()
}

/// Random `m x n` pattern; every third row (from row 1) is empty, the others hold each column
/// with probability `density`.
fn csr_random(rng: &mut ChaCha8Rng, m: usize, n: usize, density: f64) -> Csr {
    let rows: Vec<Vec<usize>> = (0..m)
        .map(|i| {
            if i % 3 == 1 {
                Vec::new()
            } else {
                subset(rng, n, density)
            }
        })
        .collect();
    Csr::from_rows(n, &rows)
}

fn csr_full(m: usize, n: usize) -> Csr {
    Csr::from_rows(n, &vec![(0..n).collect(); m])
}

fn csr_empty(m: usize, n: usize) -> Csr {
    Csr::from_rows(n, &vec![Vec::new(); m])
}

/// The standard cases: random with empty rows (two shapes), nnz 0, 0 x 0, 0 rows, 1 x 1 and
/// rows holding every column.
fn csr_cases(rng: &mut ChaCha8Rng) -> Vec<(&'static str, Csr)> {
    let random = csr_random(rng, 7, 9, 0.4);
    assert!(random.nnz() > 0);
    let tall = csr_random(rng, 6, 3, 0.6);
    vec![
        ("random 7x9", random),
        ("random 6x3", tall),
        ("nnz 0", csr_empty(4, 5)),
        ("0x0", csr_empty(0, 0)),
        ("0 rows", csr_empty(0, 3)),
        ("1x1", csr_full(1, 1)),
        ("full rows", csr_full(3, 4)),
    ]
}

// ---------------------------------------------------------------------------------------------
// CSR kernels

fn check_csrmm(kernel: &str, seed: u64) {
    let mut r = rng(seed);
    for (case, csr) in csr_cases(&mut r) {
        let feat = 3;
        let a = vals(&mut r, csr.nnz(), -1.0, 1.0);
        let b = vals(&mut r, csr.n * feat, -1.0, 1.0);
        let mut args = args(vec![
            ("a", f32s(&a)),
            ("b", f32s(&b)),
            ("c", f32s(&vec![0.0; csr.m * feat])),
            ("indptr", csr.indptr_arg()),
            ("indices", csr.indices_arg()),
            ("m", int(csr.m)),
            ("n", int(csr.n)),
            ("feat_size", int(feat)),
            ("nnz", int(csr.nnz())),
        ]);
        run(kernel, &mut args);
        let want = matmul(&csr.dense(&a), &b, csr.m, csr.n, feat);
        assert_close(&format!("{kernel} {case}"), &out(&args, "c"), &want);
    }
}

#[test]
fn csrmm() {
    check_csrmm("csrmm", 1);
}

#[test]
fn csrmm_alias() {
    check_csrmm("csrmm_alias", 2);
}

#[test]
fn csrmm_dense_iter() {
    check_csrmm("csrmm_dense_iter", 3);
}

fn check_sddmm(kernel: &str, seed: u64) {
    let mut r = rng(seed);
    for (case, csr) in csr_cases(&mut r) {
        let feat = 4;
        let a = vals(&mut r, csr.m * feat, -1.0, 1.0);
        let b = vals(&mut r, csr.n * feat, -1.0, 1.0);
        let x = vals(&mut r, csr.nnz(), -1.0, 1.0);
        let mut args = args(vec![
            ("a", f32s(&a)),
            ("b", f32s(&b)),
            ("x", f32s(&x)),
            ("y", f32s(&vec![0.0; csr.nnz()])),
            ("indptr", csr.indptr_arg()),
            ("indices", csr.indices_arg()),
            ("m", int(csr.m)),
            ("n", int(csr.n)),
            ("feat_size", int(feat)),
            ("nnz", int(csr.nnz())),
        ]);
        run(kernel, &mut args);
        // Dense A * B^T, then sampled at the stored elements.
        let mut bt = vec![0.0; feat * csr.n];
        for j in 0..csr.n {
            for k in 0..feat {
                bt[k * csr.n + j] = b[j * feat + k];
            }
        }
        let s = matmul(&a, &bt, csr.m, feat, csr.n);
        let want: Vec<f64> = csr
            .entries()
            .iter()
            .enumerate()
            .map(|(p, &(i, j))| s[i * csr.n + j] * x[p])
            .collect();
        assert_close(&format!("{kernel} {case}"), &out(&args, "y"), &want);
    }
}

#[test]
fn sddmm() {
    check_sddmm("sddmm", 4);
}

#[test]
fn sddmm_alias() {
    check_sddmm("sddmm_alias", 5);
}

#[test]
fn fused_sddmm() {
    check_sddmm("fused_sddmm", 6);
}

#[test]
fn spmv() {
    let mut r = rng(7);
    for (case, csr) in csr_cases(&mut r) {
        let a = vals(&mut r, csr.nnz(), -1.0, 1.0);
        let x = vals(&mut r, csr.n, -1.0, 1.0);
        let mut args = args(vec![
            ("a", f32s(&a)),
            ("x", f32s(&x)),
            ("y", f32s(&vec![0.0; csr.m])),
            ("indptr", csr.indptr_arg()),
            ("indices", csr.indices_arg()),
            ("m", int(csr.m)),
            ("n", int(csr.n)),
            ("nnz", int(csr.nnz())),
        ]);
        run("spmv", &mut args);
        let want = matmul(&csr.dense(&a), &x, csr.m, csr.n, 1);
        assert_close(&format!("spmv {case}"), &out(&args, "y"), &want);
    }
}

#[test]
fn rgcn_homo() {
    let mut r = rng(8);
    for (case, csr) in csr_cases(&mut r) {
        let (rels, fi, fo) = (3, 3, 2);
        let etype: Vec<i64> = (0..csr.nnz())
            .map(|_| r.random_range(0..rels as i64))
            .collect();
        let w = vals(&mut r, rels * fo * fi, -1.0, 1.0);
        let x = vals(&mut r, csr.n * fi, -1.0, 1.0);
        let mut args = args(vec![
            ("etype", i32s(&etype)),
            ("w", f32s(&w)),
            ("x", f32s(&x)),
            ("y", f32s(&vec![0.0; csr.m * fo])),
            ("indptr", csr.indptr_arg()),
            ("indices", csr.indices_arg()),
            ("m", int(csr.m)),
            ("n", int(csr.n)),
            ("nnz", int(csr.nnz())),
            ("num_rels", int(rels)),
            ("feat_in", int(fi)),
            ("feat_out", int(fo)),
        ]);
        run("rgcn_homo", &mut args);
        // One dense adjacency matrix per relation type.
        let mut adj = vec![0.0; rels * csr.m * csr.n];
        for (p, (i, j)) in csr.entries().into_iter().enumerate() {
            adj[(etype[p] as usize * csr.m + i) * csr.n + j] = 1.0;
        }
        let mut want = vec![0.0; csr.m * fo];
        for rel in 0..rels {
            for i in 0..csr.m {
                for j in 0..csr.n {
                    for o in 0..fo {
                        for k in 0..fi {
                            want[i * fo + o] += adj[(rel * csr.m + i) * csr.n + j]
                                * w[(rel * fo + o) * fi + k]
                                * x[j * fi + k];
                        }
                    }
                }
            }
        }
        assert_close(&format!("rgcn_homo {case}"), &out(&args, "y"), &want);
    }
}

#[test]
fn sparse_softmax() {
    let mut r = rng(9);
    let mut cases: Vec<(String, Csr, Vec<f64>)> = Vec::new();
    for (case, csr) in csr_cases(&mut r) {
        let a = vals(&mut r, csr.nnz(), -3.0, 3.0);
        cases.push((case.to_string(), csr, a));
    }
    // Large values: a naive exp would overflow f32.
    let big = csr_random(&mut r, 5, 6, 0.7);
    let a = vals(&mut r, big.nnz(), 990.0, 1010.0);
    cases.push(("large values".to_string(), big.clone(), a));
    let a = vals(&mut r, big.nnz(), -1010.0, -990.0);
    cases.push(("large negative values".to_string(), big, a));
    for (case, csr, a) in cases {
        let mut args = args(vec![
            ("a", f32s(&a)),
            ("b", f32s(&vec![0.0; csr.nnz()])),
            ("indptr", csr.indptr_arg()),
            ("indices", csr.indices_arg()),
            ("m", int(csr.m)),
            ("n", int(csr.n)),
            ("nnz", int(csr.nnz())),
        ]);
        run("sparse_softmax", &mut args);
        let mut want = vec![0.0; csr.nnz()];
        for i in 0..csr.m {
            let (lo, hi) = (csr.indptr[i] as usize, csr.indptr[i + 1] as usize);
            let row = &a[lo..hi];
            let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let sum: f64 = row.iter().map(|v| (v - max).exp()).sum();
            for p in lo..hi {
                want[p] = (a[p] - max).exp() / sum;
            }
        }
        let got = out(&args, "b");
        assert_close(&format!("sparse_softmax {case}"), &got, &want);
        assert!(
            got.iter().all(|v| v.is_finite()),
            "sparse_softmax {case}: non-finite output"
        );
    }
}

#[test]
fn csr2bsr() {
    let mut r = rng(10);
    let mut cases = csr_cases(&mut r);
    cases.push(("random 5x7", csr_random(&mut r, 5, 7, 0.3)));
    for (case, csr) in cases {
        let b = 2;
        let (mb, nb) = (csr.m.div_ceil(b), csr.n.div_ceil(b));
        // The BSR pattern: every block holding at least one stored element.
        let mut blocks = vec![vec![false; nb]; mb];
        for (i, j) in csr.entries() {
            blocks[i / b][j / b] = true;
        }
        let rows: Vec<Vec<usize>> = blocks
            .iter()
            .map(|row| (0..nb).filter(|&jo| row[jo]).collect())
            .collect();
        let bsr = Csr::from_rows(nb, &rows);
        let a = vals(&mut r, csr.nnz(), -1.0, 1.0);
        let mut args = args(vec![
            ("a", f32s(&a)),
            ("bsr", f32s(&vec![0.0; bsr.nnz() * b * b])),
            ("indptr", csr.indptr_arg()),
            ("indices", csr.indices_arg()),
            ("indptr_bsr", bsr.indptr_arg()),
            ("indices_bsr", bsr.indices_arg()),
            ("m", int(csr.m)),
            ("n", int(csr.n)),
            ("nnz", int(csr.nnz())),
            ("mb", int(mb)),
            ("nb", int(nb)),
            ("nnzb", int(bsr.nnz())),
        ]);
        run("csr2bsr", &mut args);
        let dense = csr.dense(&a);
        let mut want = Vec::new();
        for (io, jo) in bsr.entries() {
            for bi in 0..b {
                for bj in 0..b {
                    let (i, j) = (io * b + bi, jo * b + bj);
                    want.push(if i < csr.m && j < csr.n {
                        dense[i * csr.n + j]
                    } else {
                        0.0
                    });
                }
            }
        }
        assert_close(&format!("csr2bsr {case}"), &out(&args, "bsr"), &want);
    }
}

// ---------------------------------------------------------------------------------------------
// Block formats

/// Dense `(rows * blk) x (cols * blk)` matrix from a block pattern and `blk x blk` block values
/// stored one block after another.
fn densify_blocks(pattern: &Csr, values: &[f64], blk: usize) -> Vec<f64> {
    let cols = pattern.n * blk;
    let mut d = vec![0.0; pattern.m * blk * cols];
    for (p, (io, jo)) in pattern.entries().into_iter().enumerate() {
        for bi in 0..blk {
            for bj in 0..blk {
                d[(io * blk + bi) * cols + jo * blk + bj] = values[(p * blk + bi) * blk + bj];
            }
        }
    }
    d
}

#[test]
fn bsrmm() {
    let mut r = rng(11);
    let cases = vec![
        ("random", csr_random(&mut r, 4, 5, 0.5), 2),
        ("nnz 0", csr_empty(2, 3), 2),
        ("0 rows", csr_empty(0, 2), 2),
        ("1x1", csr_full(1, 1), 1),
        ("full rows", csr_full(2, 3), 3),
    ];
    for (case, pat, blk) in cases {
        let feat = 3;
        let a = vals(&mut r, pat.nnz() * blk * blk, -1.0, 1.0);
        let b = vals(&mut r, pat.n * blk * feat, -1.0, 1.0);
        let mut args = args(vec![
            ("a", f32s(&a)),
            ("b", f32s(&b)),
            ("c", f32s(&vec![0.0; pat.m * blk * feat])),
            ("indptr", pat.indptr_arg()),
            ("indices", pat.indices_arg()),
            ("nb", int(pat.m)),
            ("mb", int(pat.n)),
            ("nnzb", int(pat.nnz())),
            ("blk", int(blk)),
            ("feat_size", int(feat)),
        ]);
        run("bsrmm", &mut args);
        let want = matmul(
            &densify_blocks(&pat, &a, blk),
            &b,
            pat.m * blk,
            pat.n * blk,
            feat,
        );
        assert_close(&format!("bsrmm {case}"), &out(&args, "c"), &want);
    }
}

/// `rows` block rows of exactly `c` distinct sorted block columns out of `cols`.
fn ell_pattern(rng: &mut ChaCha8Rng, rows: usize, cols: usize, c: usize) -> Csr {
    let rows: Vec<Vec<usize>> = (0..rows)
        .map(|_| {
            let mut all: Vec<usize> = (0..cols).collect();
            // Partial Fisher-Yates: the first c entries are a random c-subset.
            for t in 0..c {
                let s = rng.random_range(t..cols);
                all.swap(t, s);
            }
            let mut pick = all[..c].to_vec();
            pick.sort_unstable();
            pick
        })
        .collect();
    Csr::from_rows(cols, &rows)
}

#[test]
fn ellmm() {
    let mut r = rng(12);
    let cases = vec![
        ("random", ell_pattern(&mut r, 4, 5, 2), 2, 2),
        ("nnz 0", ell_pattern(&mut r, 3, 4, 0), 0, 2),
        ("0 rows", ell_pattern(&mut r, 0, 3, 2), 2, 2),
        ("1x1", ell_pattern(&mut r, 1, 1, 1), 1, 1),
        ("full rows", ell_pattern(&mut r, 2, 3, 3), 3, 2),
    ];
    for (case, pat, c, blk) in cases {
        let feat = 2;
        assert_eq!(pat.nnz(), pat.m * c);
        let a = vals(&mut r, pat.nnz() * blk * blk, -1.0, 1.0);
        let b = vals(&mut r, pat.n * blk * feat, -1.0, 1.0);
        let mut args = args(vec![
            ("a", f32s(&a)),
            ("b", f32s(&b)),
            ("c", f32s(&vec![0.0; pat.m * blk * feat])),
            ("indices", pat.indices_arg()),
            ("nb", int(pat.m)),
            ("mb", int(pat.n)),
            ("nnz_cols", int(c)),
            ("blk", int(blk)),
            ("feat_size", int(feat)),
        ]);
        run("ellmm", &mut args);
        let want = matmul(
            &densify_blocks(&pat, &a, blk),
            &b,
            pat.m * blk,
            pat.n * blk,
            feat,
        );
        assert_close(&format!("ellmm {case}"), &out(&args, "c"), &want);
    }
}

#[test]
fn spmm_24() {
    let mut r = rng(13);
    // (case, m, n)
    let cases = [
        ("random", 3, 8),
        ("0 rows", 0, 4),
        ("0x0", 0, 0),
        ("1x4", 1, 4),
        ("wide", 2, 12),
    ];
    for (case, m, n) in cases {
        let feat = 3;
        let groups = m * (n / 4);
        let mut indices = Vec::new();
        for _ in 0..groups {
            let first = r.random_range(0..3i64);
            let second = r.random_range(first + 1..4);
            indices.extend([first, second]);
        }
        let a = vals(&mut r, groups * 2, -1.0, 1.0);
        let b = vals(&mut r, n * feat, -1.0, 1.0);
        let mut args = args(vec![
            ("a", f32s(&a)),
            ("b", f32s(&b)),
            ("c", f32s(&vec![5.0; m * feat])),
            ("indices", i32s(&indices)),
            ("m", int(m)),
            ("n", int(n)),
            ("feat_size", int(feat)),
        ]);
        run("spmm_24", &mut args);
        let mut dense = vec![0.0; m * n];
        for row in 0..m {
            for gc in 0..n / 4 {
                let g = row * (n / 4) + gc;
                for t in 0..2 {
                    dense[row * n + 4 * gc + indices[2 * g + t] as usize] = a[2 * g + t];
                }
            }
        }
        let want = matmul(&dense, &b, m, n, feat);
        assert_close(&format!("spmm_24 {case}"), &out(&args, "c"), &want);
    }
}

// ---------------------------------------------------------------------------------------------
// Multi-level formats

#[test]
fn rgcn_hetero() {
    let mut r = rng(14);
    // (case, relations, m, n, row probability, column probability)
    let cases = [
        ("random", 3, 5, 4, 0.6, 0.5),
        ("nnz 0", 2, 3, 3, 0.0, 0.0),
        ("present rows without columns", 2, 3, 3, 1.0, 0.0),
        ("0 relations", 0, 3, 2, 1.0, 1.0),
        ("1x1", 1, 1, 1, 1.0, 1.0),
        ("full rows", 2, 3, 4, 1.0, 1.0),
    ];
    for (case, rels, m, n, prow, pcol) in cases {
        let (fi, fo) = (3, 2);
        // Per relation: the rows present, then per present row its columns.
        let mut indptr_i = vec![0i64];
        let mut indices_i = Vec::new();
        let mut row_cols: Vec<Vec<usize>> = Vec::new();
        for _ in 0..rels {
            for i in subset(&mut r, m, prow) {
                indices_i.push(i as i64);
                row_cols.push(subset(&mut r, n, pcol));
            }
            indptr_i.push(indices_i.len() as i64);
        }
        let level_j = Csr::from_rows(n, &row_cols);
        let a = vals(&mut r, level_j.nnz(), -1.0, 1.0);
        let w = vals(&mut r, rels * fo * fi, -1.0, 1.0);
        let x = vals(&mut r, n * fi, -1.0, 1.0);
        let mut args = args(vec![
            ("a", f32s(&a)),
            ("w", f32s(&w)),
            ("x", f32s(&x)),
            ("y", f32s(&vec![5.0; m * fo])),
            ("indptr_i", i32s(&indptr_i)),
            ("indices_i", i32s(&indices_i)),
            ("indptr_j", level_j.indptr_arg()),
            ("indices_j", level_j.indices_arg()),
            ("m", int(m)),
            ("n", int(n)),
            ("num_rels", int(rels)),
            ("nnz_i", int(indices_i.len())),
            ("nnz_j", int(level_j.nnz())),
            ("feat_in", int(fi)),
            ("feat_out", int(fo)),
        ]);
        run("rgcn_hetero", &mut args);
        // Dense adjacency per relation.
        let mut adj = vec![0.0; rels * m * n];
        for rel in 0..rels {
            let present = indptr_i[rel] as usize..indptr_i[rel + 1] as usize;
            for (q, &i) in present.clone().zip(&indices_i[present]) {
                let i = i as usize;
                for p in level_j.indptr[q] as usize..level_j.indptr[q + 1] as usize {
                    adj[(rel * m + i) * n + level_j.indices[p] as usize] = a[p];
                }
            }
        }
        let mut want = vec![0.0; m * fo];
        for rel in 0..rels {
            for i in 0..m {
                for j in 0..n {
                    for o in 0..fo {
                        for k in 0..fi {
                            want[i * fo + o] += adj[(rel * m + i) * n + j]
                                * w[(rel * fo + o) * fi + k]
                                * x[j * fi + k];
                        }
                    }
                }
            }
        }
        assert_close(&format!("rgcn_hetero {case}"), &out(&args, "y"), &want);
    }
}

#[test]
fn csf_square_sum() {
    let mut r = rng(15);
    // (case, m, n, p, probability of a j, probability of a k)
    let cases = [
        ("random", 5, 4, 3, 0.6, 0.5),
        ("nnz 0", 3, 3, 3, 0.0, 0.0),
        ("fibers without elements", 3, 3, 3, 1.0, 0.0),
        ("0 rows", 0, 2, 2, 1.0, 1.0),
        ("1x1x1", 1, 1, 1, 1.0, 1.0),
        ("full", 2, 3, 4, 1.0, 1.0),
    ];
    for (case, m, n, p, pj, pk) in cases {
        let level_j = Csr::from_rows(
            n,
            &(0..m).map(|_| subset(&mut r, n, pj)).collect::<Vec<_>>(),
        );
        let fibers: Vec<Vec<usize>> = (0..level_j.nnz()).map(|_| subset(&mut r, p, pk)).collect();
        let level_k = Csr::from_rows(p, &fibers);
        let a = vals(&mut r, level_k.nnz(), -2.0, 2.0);
        let mut args = args(vec![
            ("a", f32s(&a)),
            ("b", f32s(&vec![0.0; m])),
            ("indptr_j", level_j.indptr_arg()),
            ("indices_j", level_j.indices_arg()),
            ("indptr_k", level_k.indptr_arg()),
            ("indices_k", level_k.indices_arg()),
            ("m", int(m)),
            ("n", int(n)),
            ("p", int(p)),
            ("nnz_j", int(level_j.nnz())),
            ("nnz_k", int(level_k.nnz())),
        ]);
        run("csf_square_sum", &mut args);
        let mut dense = vec![0.0; m * n * p];
        for (q, (i, j)) in level_j.entries().into_iter().enumerate() {
            for e in level_k.indptr[q] as usize..level_k.indptr[q + 1] as usize {
                dense[(i * n + j) * p + level_k.indices[e] as usize] = a[e];
            }
        }
        let mut want = vec![0.0; m];
        for i in 0..m {
            for j in 0..n {
                for k in 0..p {
                    let v = dense[(i * n + j) * p + k];
                    want[i] += v * v;
                }
            }
        }
        assert_close(&format!("csf_square_sum {case}"), &out(&args, "b"), &want);
    }
}

/// Ragged rows (at most 100 long): random lengths with empty rows, all empty, 0 rows, a single
/// element, and rows of the full 100.
fn ragged_cases(rng: &mut ChaCha8Rng) -> Vec<(&'static str, Vec<usize>)> {
    let random: Vec<usize> = (0..8)
        .map(|i| {
            if i % 3 == 1 {
                0
            } else {
                rng.random_range(1..12)
            }
        })
        .collect();
    vec![
        ("random", random),
        ("nnz 0", vec![0, 0, 0]),
        ("0 rows", Vec::new()),
        ("1x1", vec![1]),
        ("full rows", vec![100, 100, 3]),
    ]
}

fn check_segment(kernel: &str, seed: u64, reduce: fn(&[f64]) -> f64) {
    let mut r = rng(seed);
    for (case, lens) in ragged_cases(&mut r) {
        let m = lens.len();
        let mut indptr = vec![0i64];
        for l in &lens {
            indptr.push(indptr.last().copied().unwrap_or(0) + *l as i64);
        }
        let nnz = *indptr.last().unwrap_or(&0) as usize;
        let a = vals(&mut r, nnz, -5.0, 5.0);
        let mut args = args(vec![
            ("a", f32s(&a)),
            ("b", f32s(&vec![0.0; m])),
            ("indptr", i32s(&indptr)),
            ("m", int(m)),
            ("nnz", int(nnz)),
        ]);
        run(kernel, &mut args);
        // Empty rows run no reduction step, so the output keeps its initial 0.
        let want: Vec<f64> = (0..m)
            .map(|i| {
                let row = &a[indptr[i] as usize..indptr[i + 1] as usize];
                if row.is_empty() {
                    0.0
                } else {
                    reduce(row)
                }
            })
            .collect();
        assert_close(&format!("{kernel} {case}"), &out(&args, "b"), &want);
    }
}

#[test]
fn segment_sum() {
    check_segment("segment_sum", 16, |row| row.iter().sum());
}

#[test]
fn segment_max() {
    check_segment("segment_max", 17, |row| {
        row.iter().copied().fold(f64::NEG_INFINITY, f64::max)
    });
}

#[test]
fn segment_min() {
    check_segment("segment_min", 18, |row| {
        row.iter().copied().fold(f64::INFINITY, f64::min)
    });
}

#[test]
fn segment_mean() {
    check_segment("segment_mean", 19, |row| {
        row.iter().sum::<f64>() / row.len() as f64
    });
}

#[test]
fn ragged_bmm() {
    let mut r = rng(20);
    let random: Vec<[usize; 3]> = (0..5)
        .map(|_| {
            [
                r.random_range(0..4),
                r.random_range(0..4),
                r.random_range(0..4),
            ]
        })
        .chain([[2, 0, 3], [0, 2, 2]])
        .collect();
    let cases: Vec<(&str, Vec<[usize; 3]>)> = vec![
        ("random", random),
        ("all empty", vec![[0, 0, 0], [0, 0, 0]]),
        ("0 batches", Vec::new()),
        ("1x1", vec![[1, 1, 1]]),
        ("full", vec![[3, 3, 3], [2, 4, 1]]),
    ];
    for (case, dims) in cases {
        let batch = dims.len();
        // Structure: indptr over the batch for I, J, K; indptr over I's / J's elements for the
        // row lengths of X (J_b), Y (K_b) and Z (K_b).
        let prefix = |lens: &mut dyn Iterator<Item = usize>| -> Vec<i64> {
            let mut v = vec![0i64];
            for l in lens {
                v.push(v[v.len() - 1] + l as i64);
            }
            v
        };
        let indptr_i = prefix(&mut dims.iter().map(|d| d[0]));
        let indptr_j = prefix(&mut dims.iter().map(|d| d[1]));
        let indptr_k = prefix(&mut dims.iter().map(|d| d[2]));
        let indptr_ij = prefix(&mut dims.iter().flat_map(|d| (0..d[0]).map(|_| d[1])));
        let indptr_jk = prefix(&mut dims.iter().flat_map(|d| (0..d[1]).map(|_| d[2])));
        let indptr_ik = prefix(&mut dims.iter().flat_map(|d| (0..d[0]).map(|_| d[2])));
        let last = |v: &[i64]| *v.last().unwrap_or(&0) as usize;
        let x = vals(&mut r, last(&indptr_ij), -1.0, 1.0);
        let y = vals(&mut r, last(&indptr_jk), -1.0, 1.0);
        let mut args = args(vec![
            ("x", f32s(&x)),
            ("y", f32s(&y)),
            ("z", f32s(&vec![0.0; last(&indptr_ik)])),
            ("indptr_i", i32s(&indptr_i)),
            ("indptr_j", i32s(&indptr_j)),
            ("indptr_k", i32s(&indptr_k)),
            ("indptr_ij", i32s(&indptr_ij)),
            ("indptr_jk", i32s(&indptr_jk)),
            ("indptr_ik", i32s(&indptr_ik)),
            ("batch_size", int(batch)),
            ("max_len", int(100)),
            ("nnz_i", int(last(&indptr_i))),
            ("nnz_j", int(last(&indptr_j))),
            ("nnz_k", int(last(&indptr_k))),
            ("nnz_ij", int(last(&indptr_ij))),
            ("nnz_jk", int(last(&indptr_jk))),
            ("nnz_ik", int(last(&indptr_ik))),
        ]);
        run("ragged_bmm", &mut args);
        // Each batch's matrices are stored row-major one after another.
        let mut want = Vec::new();
        let (mut xo, mut yo) = (0, 0);
        for &[di, dj, dk] in &dims {
            want.extend(matmul(
                &x[xo..xo + di * dj],
                &y[yo..yo + dj * dk],
                di,
                dj,
                dk,
            ));
            xo += di * dj;
            yo += dj * dk;
        }
        assert_close(&format!("ragged_bmm {case}"), &out(&args, "z"), &want);
    }
}

#[test]
fn hyper_gnn() {
    let mut r = rng(21);
    // (case, vertices, hyperedges, incidence probability)
    let cases = [
        ("random", 6, 4, 0.4),
        ("nnz 0", 3, 2, 0.0),
        ("0x0", 0, 0, 1.0),
        ("1x1", 1, 1, 1.0),
        ("every vertex in every edge", 3, 2, 1.0),
    ];
    for (case, nv, ne, prob) in cases {
        let feat = 2;
        let mut incidence = vec![vec![false; ne]; nv];
        for row in incidence.iter_mut() {
            for slot in row.iter_mut() {
                *slot = r.random_bool(prob);
            }
        }
        // Vertex-major (H) and edge-major (HT) patterns of the same incidence.
        let h_rows: Vec<Vec<usize>> = incidence
            .iter()
            .map(|row| (0..ne).filter(|&e| row[e]).collect())
            .collect();
        let ht_rows: Vec<Vec<usize>> = (0..ne)
            .map(|e| (0..nv).filter(|&v| incidence[v][e]).collect())
            .collect();
        let h = Csr::from_rows(ne, &h_rows);
        let ht = Csr::from_rows(nv, &ht_rows);
        assert_eq!(h.nnz(), ht.nnz());
        let hv = vals(&mut r, h.nnz(), -1.0, 1.0);
        let htv = vals(&mut r, ht.nnz(), -1.0, 1.0);
        let x = vals(&mut r, nv * feat, -1.0, 1.0);
        let mut args = args(vec![
            ("h", f32s(&hv)),
            ("ht", f32s(&htv)),
            ("x", f32s(&x)),
            ("y", f32s(&vec![0.0; nv * feat])),
            ("indptr", h.indptr_arg()),
            ("indices", h.indices_arg()),
            ("indptr_t", ht.indptr_arg()),
            ("indices_t", ht.indices_arg()),
            ("n_vertices", int(nv)),
            ("n_edges", int(ne)),
            ("nnz", int(h.nnz())),
            ("feat_size", int(feat)),
        ]);
        run("hyper_gnn", &mut args);
        let hd = h.dense(&hv);
        let htd = ht.dense(&htv);
        let want = matmul(&matmul(&hd, &htd, nv, ne, nv), &x, nv, nv, feat);
        assert_close(&format!("hyper_gnn {case}"), &out(&args, "y"), &want);
    }
}
