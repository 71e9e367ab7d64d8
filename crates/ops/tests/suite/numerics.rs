//! Numerical tests: every catalog kernel is run by the stage-I reference evaluator on
//! deterministic pseudo-random data from `sparsetir_ops::data` and compared with a dense
//! computation written here with plain nested loops (the independent oracle, which reads the
//! generated structure back from the arguments). Cases: random with empty rows, a single row,
//! nnz 0, 0 rows, 1x1 and rows holding every column.

use std::collections::HashMap;

use sparsetir_eval::{eval_func, ArgValue};
use sparsetir_ops::data::{random_args, Case, Init, Pattern, Shape};

type Args = HashMap<String, ArgValue>;

const RANDOM: Pattern = Pattern::Random { empty_rows: true };

/// Generates the arguments of `kernel` for `shape`, checking the declared outputs.
fn gen(kernel: &str, case: &str, shape: &Shape, seed: u64) -> Case {
    let c = random_args(kernel, shape, seed)
        .unwrap_or_else(|e| panic!("{kernel} {case}: generation failed: {e}"));
    for o in &c.outputs {
        assert!(c.array(o).is_some(), "{kernel} {case}: output {o} missing");
    }
    c
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

/// The array bound to parameter `key`, as i64.
fn ints(args: &Args, key: &str) -> Vec<i64> {
    match args.get(key) {
        Some(ArgValue::Array(t)) => t.to_i64_vec(),
        other => panic!("parameter {key} is not an array: {other:?}"),
    }
}

/// The scalar bound to parameter `key`, as a size.
fn size(args: &Args, key: &str) -> usize {
    match args.get(key) {
        Some(ArgValue::Int(v)) => usize::try_from(*v).expect("non-negative size"),
        other => panic!("parameter {key} is not an integer: {other:?}"),
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
// Sparse structures, read back from the arguments

/// A CSR pattern.
#[derive(Clone, Debug)]
struct Csr {
    m: usize,
    n: usize,
    indptr: Vec<i64>,
    indices: Vec<i64>,
}

impl Csr {
    /// The pattern bound to `indptr`/`indices` of an `m x n` matrix, checked well-formed.
    fn read(args: &Args, indptr: &str, indices: &str, m: usize, n: usize) -> Csr {
        Csr::new(
            ints(args, indptr),
            ints(args, indices),
            m,
            n,
            indptr,
            indices,
        )
    }
    /// An `m x n` pattern, checked well-formed (the names are for messages).
    fn new(
        indptr: Vec<i64>,
        indices: Vec<i64>,
        m: usize,
        n: usize,
        indptr_name: &str,
        indices_name: &str,
    ) -> Csr {
        let c = Csr {
            m,
            n,
            indptr,
            indices,
        };
        assert_eq!(c.indptr.len(), m + 1, "{indptr_name}: length");
        assert_eq!(c.indptr[0], 0, "{indptr_name}: starts at 0");
        assert_eq!(
            c.indptr[m] as usize,
            c.indices.len(),
            "{indptr_name}: ends at nnz"
        );
        for i in 0..m {
            let row = &c.indices[c.indptr[i] as usize..c.indptr[i + 1] as usize];
            assert!(
                row.windows(2).all(|w| w[0] < w[1]),
                "{indices_name}: row {i} sorted"
            );
            let in_range = row.iter().all(|&j| 0 <= j && (j as usize) < n);
            assert!(in_range, "{indices_name}: in range");
        }
        c
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
}

/// The CSR pattern of a CSR kernel (`indptr`, `indices`, `m`, `n`).
fn csr_of(args: &Args) -> Csr {
    Csr::read(args, "indptr", "indices", size(args, "m"), size(args, "n"))
}

/// The standard cases: random with empty rows (two shapes), a single row, nnz 0, 0 x 0, 0
/// rows, 1 x 1 and rows holding every column.
fn csr_cases() -> Vec<(&'static str, Shape)> {
    vec![
        ("random 7x9", Shape::new(RANDOM, 7, 9).with_density(0.4)),
        ("random 6x3", Shape::new(RANDOM, 6, 3).with_density(0.6)),
        ("single row", Shape::new(Pattern::SingleRow, 1, 6)),
        ("nnz 0", Shape::new(Pattern::Empty, 4, 5)),
        ("0x0", Shape::new(Pattern::Empty, 0, 0)),
        ("0 rows", Shape::new(Pattern::Empty, 0, 3)),
        ("1x1", Shape::new(Pattern::OneByOne, 1, 1)),
        ("full rows", Shape::new(Pattern::FullRows, 3, 4)),
    ]
}

/// The structural promise of each standard case.
fn check_structure(kernel: &str, case: &str, csr: &Csr) {
    let what = format!("{kernel} {case}: structure");
    match case {
        "random 7x9" => {
            assert!(csr.nnz() > 0, "{what}");
            for i in (1..csr.m).step_by(3) {
                assert_eq!(csr.indptr[i], csr.indptr[i + 1], "{what}: row {i} empty");
            }
        }
        "single row" => assert_eq!(csr.m, 1, "{what}"),
        "nnz 0" | "0x0" | "0 rows" => assert_eq!(csr.nnz(), 0, "{what}"),
        "1x1" => assert_eq!((csr.m, csr.n, csr.nnz()), (1, 1, 1), "{what}"),
        "full rows" => assert_eq!(csr.nnz(), csr.m * csr.n, "{what}"),
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------
// CSR kernels

fn check_csrmm(kernel: &str, seed: u64) {
    for (t, (case, shape)) in csr_cases().into_iter().enumerate() {
        let mut args = gen(kernel, case, &shape, seed * 100 + t as u64).args;
        let csr = csr_of(&args);
        check_structure(kernel, case, &csr);
        let feat = size(&args, "feat_size");
        let (a, b) = (out(&args, "a"), out(&args, "b"));
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
    for (t, (case, shape)) in csr_cases().into_iter().enumerate() {
        let shape = shape.with_feat(4);
        let mut args = gen(kernel, case, &shape, seed * 100 + t as u64).args;
        let csr = csr_of(&args);
        check_structure(kernel, case, &csr);
        let feat = size(&args, "feat_size");
        let (a, b, x) = (out(&args, "a"), out(&args, "b"), out(&args, "x"));
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
    for (t, (case, shape)) in csr_cases().into_iter().enumerate() {
        let mut args = gen("spmv", case, &shape, 700 + t as u64).args;
        let csr = csr_of(&args);
        check_structure("spmv", case, &csr);
        let (a, x) = (out(&args, "a"), out(&args, "x"));
        run("spmv", &mut args);
        let want = matmul(&csr.dense(&a), &x, csr.m, csr.n, 1);
        assert_close(&format!("spmv {case}"), &out(&args, "y"), &want);
    }
}

#[test]
fn rgcn_homo() {
    for (t, (case, shape)) in csr_cases().into_iter().enumerate() {
        let shape = shape.with_depth(3).with_feat(3);
        let mut args = gen("rgcn_homo", case, &shape, 800 + t as u64).args;
        let csr = csr_of(&args);
        check_structure("rgcn_homo", case, &csr);
        let rels = size(&args, "num_rels");
        let (fi, fo) = (size(&args, "feat_in"), size(&args, "feat_out"));
        let want_rels = if case == "1x1" { 1 } else { 3 };
        assert_eq!((rels, fi, fo), (want_rels, 3, 2), "rgcn_homo {case}: sizes");
        let etype = ints(&args, "etype");
        assert_eq!(etype.len(), csr.nnz(), "rgcn_homo {case}: etype length");
        assert!(etype.iter().all(|&e| 0 <= e && (e as usize) < rels));
        let (w, x) = (out(&args, "w"), out(&args, "x"));
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
    let mut cases: Vec<(&str, Shape)> = csr_cases()
        .into_iter()
        .map(|(case, shape)| (case, shape.with_values(-3.0, 3.0)))
        .collect();
    // Large values: a naive exp would overflow f32.
    let big = Shape::new(RANDOM, 5, 6).with_density(0.7);
    cases.push(("large values", big.with_values(990.0, 1010.0)));
    cases.push(("large negative values", big.with_values(-1010.0, -990.0)));
    for (t, (case, shape)) in cases.into_iter().enumerate() {
        let mut args = gen("sparse_softmax", case, &shape, 900 + t as u64).args;
        let csr = csr_of(&args);
        check_structure("sparse_softmax", case, &csr);
        let a = out(&args, "a");
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
    let mut cases = csr_cases();
    cases.push(("random 5x7", Shape::new(RANDOM, 5, 7).with_density(0.3)));
    for (t, (case, shape)) in cases.into_iter().enumerate() {
        let mut args = gen("csr2bsr", case, &shape, 1000 + t as u64).args;
        let csr = csr_of(&args);
        check_structure("csr2bsr", case, &csr);
        let b = 2;
        let (mb, nb) = (csr.m.div_ceil(b), csr.n.div_ceil(b));
        assert_eq!(
            (size(&args, "mb"), size(&args, "nb")),
            (mb, nb),
            "csr2bsr {case}"
        );
        // The BSR pattern must hold exactly the blocks holding at least one stored element.
        let bsr = Csr::read(&args, "indptr_bsr", "indices_bsr", mb, nb);
        let mut blocks = vec![vec![false; nb]; mb];
        for (i, j) in csr.entries() {
            blocks[i / b][j / b] = true;
        }
        let want_blocks: Vec<(usize, usize)> = (0..mb)
            .flat_map(|io| (0..nb).map(move |jo| (io, jo)))
            .filter(|&(io, jo)| blocks[io][jo])
            .collect();
        assert_eq!(bsr.entries(), want_blocks, "csr2bsr {case}: block pattern");
        let a = out(&args, "a");
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
    let cases = vec![
        ("random", Shape::new(RANDOM, 4, 5).with_block(2)),
        (
            "single row",
            Shape::new(Pattern::SingleRow, 1, 4).with_block(2),
        ),
        ("nnz 0", Shape::new(Pattern::Empty, 2, 3).with_block(2)),
        ("0 rows", Shape::new(Pattern::Empty, 0, 2).with_block(2)),
        ("1x1", Shape::new(Pattern::OneByOne, 1, 1).with_block(1)),
        (
            "full rows",
            Shape::new(Pattern::FullRows, 2, 3).with_block(3),
        ),
    ];
    for (t, (case, shape)) in cases.into_iter().enumerate() {
        let mut args = gen("bsrmm", case, &shape, 1100 + t as u64).args;
        let (nb, mb) = (size(&args, "nb"), size(&args, "mb"));
        let pat = Csr::read(&args, "indptr", "indices", nb, mb);
        check_structure("bsrmm", case, &pat);
        let (blk, feat) = (size(&args, "blk"), size(&args, "feat_size"));
        assert_eq!(blk, shape.block, "bsrmm {case}: block");
        let (a, b) = (out(&args, "a"), out(&args, "b"));
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

#[test]
fn ellmm() {
    // (case, shape, expected columns per row)
    let cases = vec![
        ("random", Shape::new(RANDOM, 4, 5).with_density(0.4), 2),
        ("nnz 0", Shape::new(Pattern::Empty, 3, 4), 0),
        ("0 rows", Shape::new(RANDOM, 0, 3).with_density(0.67), 2),
        ("1x1", Shape::new(Pattern::OneByOne, 1, 1).with_block(1), 1),
        ("full rows", Shape::new(Pattern::FullRows, 2, 3), 3),
    ];
    for (t, (case, shape, c)) in cases.into_iter().enumerate() {
        let shape = shape.with_feat(2);
        let mut args = gen("ellmm", case, &shape, 1200 + t as u64).args;
        let (rows, cols) = (size(&args, "nb"), size(&args, "mb"));
        assert_eq!(size(&args, "nnz_cols"), c, "ellmm {case}: columns per row");
        // ELL rows all hold c columns: as CSR, indptr is 0, c, 2c, ...
        let indptr: Vec<i64> = (0..=rows).map(|i| (i * c) as i64).collect();
        let pat = Csr::new(
            indptr,
            ints(&args, "indices"),
            rows,
            cols,
            "ELL rows",
            "indices",
        );
        assert_eq!(pat.nnz(), pat.m * c);
        let (blk, feat) = (size(&args, "blk"), size(&args, "feat_size"));
        let (a, b) = (out(&args, "a"), out(&args, "b"));
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
    // (case, m, n)
    let cases = [
        ("random", 3, 8),
        ("0 rows", 0, 4),
        ("0x0", 0, 0),
        ("1x4", 1, 4),
        ("wide", 2, 12),
        ("not a multiple of 4", 2, 7),
    ];
    for (t, (case, m, n)) in cases.into_iter().enumerate() {
        let shape = Shape::new(RANDOM, m, n).with_init(Init::Value(5.0));
        let mut args = gen("spmm_24", case, &shape, 1300 + t as u64).args;
        assert_eq!(
            (size(&args, "m"), size(&args, "n")),
            (m, n),
            "spmm_24 {case}"
        );
        let feat = size(&args, "feat_size");
        let indices = ints(&args, "indices");
        let groups = m * (n / 4);
        assert_eq!(indices.len(), 2 * groups, "spmm_24 {case}: indices");
        for g in 0..groups {
            let (x, y) = (indices[2 * g], indices[2 * g + 1]);
            assert!(0 <= x && x < y && y < 4, "spmm_24 {case}: group {g} is 2:4");
        }
        let (a, b) = (out(&args, "a"), out(&args, "b"));
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
    let cases = [
        (
            "random",
            Shape::new(RANDOM, 5, 4).with_depth(3).with_density(0.55),
        ),
        ("nnz 0", Shape::new(Pattern::Empty, 3, 3).with_depth(2)),
        (
            "present rows without columns",
            Shape::new(Pattern::EmptyLeaves, 3, 3).with_depth(2),
        ),
        (
            "0 relations",
            Shape::new(Pattern::FullRows, 3, 2).with_depth(0),
        ),
        ("1x1", Shape::new(Pattern::OneByOne, 1, 1)),
        (
            "full rows",
            Shape::new(Pattern::FullRows, 3, 4).with_depth(2),
        ),
    ];
    for (t, (case, shape)) in cases.into_iter().enumerate() {
        let shape = shape.with_feat(3).with_init(Init::Value(5.0));
        let mut args = gen("rgcn_hetero", case, &shape, 1400 + t as u64).args;
        let (m, n, rels) = (size(&args, "m"), size(&args, "n"), size(&args, "num_rels"));
        let (fi, fo) = (size(&args, "feat_in"), size(&args, "feat_out"));
        // Level I: per relation the rows present; level J: per present row its columns.
        let level_i = Csr::read(&args, "indptr_i", "indices_i", rels, m);
        let level_j = Csr::read(&args, "indptr_j", "indices_j", level_i.nnz(), n);
        match case {
            "nnz 0" => assert_eq!(level_j.nnz(), 0),
            "present rows without columns" => {
                assert_eq!((level_i.nnz(), level_j.nnz()), (rels * m, 0))
            }
            "full rows" => assert_eq!(level_j.nnz(), rels * m * n),
            "1x1" => assert_eq!((rels, m, n, level_j.nnz()), (1, 1, 1, 1)),
            _ => {}
        }
        let (a, w, x) = (out(&args, "a"), out(&args, "w"), out(&args, "x"));
        run("rgcn_hetero", &mut args);
        // Dense adjacency per relation.
        let mut adj = vec![0.0; rels * m * n];
        for (q, (rel, i)) in level_i.entries().into_iter().enumerate() {
            for p in level_j.indptr[q] as usize..level_j.indptr[q + 1] as usize {
                adj[(rel * m + i) * n + level_j.indices[p] as usize] = a[p];
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
    let cases = [
        (
            "random",
            Shape::new(RANDOM, 5, 4).with_depth(3).with_density(0.55),
        ),
        ("nnz 0", Shape::new(Pattern::Empty, 3, 3).with_depth(3)),
        (
            "fibers without elements",
            Shape::new(Pattern::EmptyLeaves, 3, 3).with_depth(3),
        ),
        ("0 rows", Shape::new(Pattern::FullRows, 0, 2).with_depth(2)),
        ("1x1x1", Shape::new(Pattern::OneByOne, 1, 1)),
        ("full", Shape::new(Pattern::FullRows, 2, 3).with_depth(4)),
    ];
    for (t, (case, shape)) in cases.into_iter().enumerate() {
        let shape = shape.with_values(-2.0, 2.0);
        let mut args = gen("csf_square_sum", case, &shape, 1500 + t as u64).args;
        let (m, n, p) = (size(&args, "m"), size(&args, "n"), size(&args, "p"));
        let level_j = Csr::read(&args, "indptr_j", "indices_j", m, n);
        let level_k = Csr::read(&args, "indptr_k", "indices_k", level_j.nnz(), p);
        match case {
            "nnz 0" => assert_eq!(level_k.nnz(), 0),
            "fibers without elements" => assert_eq!((level_j.nnz(), level_k.nnz()), (m * n, 0)),
            "full" => assert_eq!(level_k.nnz(), m * n * p),
            "1x1x1" => assert_eq!((m, n, p, level_k.nnz()), (1, 1, 1, 1)),
            _ => {}
        }
        let a = out(&args, "a");
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
fn ragged_cases() -> Vec<(&'static str, Shape)> {
    vec![
        ("random", Shape::new(RANDOM, 8, 11).with_density(0.6)),
        ("single row", Shape::new(Pattern::SingleRow, 1, 9)),
        ("nnz 0", Shape::new(Pattern::Empty, 3, 5)),
        ("0 rows", Shape::new(Pattern::Empty, 0, 5)),
        ("1x1", Shape::new(Pattern::OneByOne, 1, 1)),
        ("full rows", Shape::new(Pattern::FullRows, 3, 100)),
    ]
}

fn check_segment(kernel: &str, seed: u64, reduce: fn(&[f64]) -> f64) {
    for (t, (case, shape)) in ragged_cases().into_iter().enumerate() {
        let shape = shape.with_values(-5.0, 5.0);
        let mut args = gen(kernel, case, &shape, seed * 100 + t as u64).args;
        let m = size(&args, "m");
        let indptr = ints(&args, "indptr");
        assert_eq!(indptr.len(), m + 1, "{kernel} {case}: indptr");
        assert!(indptr
            .windows(2)
            .all(|w| w[0] <= w[1] && w[1] - w[0] <= 100));
        match case {
            "nnz 0" | "0 rows" => assert_eq!(indptr[m], 0),
            "full rows" => assert_eq!(indptr[m] as usize, 100 * m),
            _ => {}
        }
        let a = out(&args, "a");
        assert_eq!(a.len() as i64, indptr[m], "{kernel} {case}: nnz");
        run(kernel, &mut args);
        // `reduce` gives an empty row its init value (a reduction over nothing is its init).
        let want: Vec<f64> = (0..m)
            .map(|i| reduce(&a[indptr[i] as usize..indptr[i + 1] as usize]))
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
        // The kernel's init is T.min_value("float32").
        row.iter().copied().fold(f32::MIN as f64, f64::max)
    });
}

#[test]
fn segment_min() {
    check_segment("segment_min", 18, |row| {
        // The kernel's init is T.max_value("float32").
        row.iter().copied().fold(f32::MAX as f64, f64::min)
    });
}

#[test]
fn segment_mean() {
    check_segment("segment_mean", 19, |row| {
        // The kernel divides by max(count, 1): an empty row's mean is 0.
        row.iter().sum::<f64>() / row.len().max(1) as f64
    });
}

#[test]
fn ragged_bmm() {
    let cases = [
        ("random", Shape::new(RANDOM, 7, 3).with_density(0.6)),
        ("all empty", Shape::new(Pattern::Empty, 2, 3)),
        ("0 batches", Shape::new(Pattern::FullRows, 0, 3)),
        ("1x1", Shape::new(Pattern::OneByOne, 1, 1)),
        ("full", Shape::new(Pattern::FullRows, 2, 3)),
    ];
    for (t, (case, shape)) in cases.into_iter().enumerate() {
        let mut args = gen("ragged_bmm", case, &shape, 2000 + t as u64).args;
        let batch = size(&args, "batch_size");
        // Each batch's extents, from the batch-level indptr arrays.
        let extent = |key: &str| -> Vec<usize> {
            let v = ints(&args, key);
            assert_eq!(v.len(), batch + 1, "{case}: {key}");
            v.windows(2).map(|w| (w[1] - w[0]) as usize).collect()
        };
        let (di, dj, dk) = (extent("indptr_i"), extent("indptr_j"), extent("indptr_k"));
        match case {
            "all empty" => assert!(di.iter().chain(&dj).chain(&dk).all(|&d| d == 0)),
            "full" => assert!(di.iter().chain(&dj).chain(&dk).all(|&d| d == 3)),
            "1x1" => assert_eq!((batch, di[0], dj[0], dk[0]), (1, 1, 1, 1)),
            _ => {}
        }
        let (x, y) = (out(&args, "x"), out(&args, "y"));
        run("ragged_bmm", &mut args);
        // Each batch's matrices are stored row-major one after another.
        let mut want = Vec::new();
        let (mut xo, mut yo) = (0, 0);
        for b in 0..batch {
            want.extend(matmul(
                &x[xo..xo + di[b] * dj[b]],
                &y[yo..yo + dj[b] * dk[b]],
                di[b],
                dj[b],
                dk[b],
            ));
            xo += di[b] * dj[b];
            yo += dj[b] * dk[b];
        }
        assert_eq!(
            (xo, yo),
            (x.len(), y.len()),
            "ragged_bmm {case}: value lengths"
        );
        assert_close(&format!("ragged_bmm {case}"), &out(&args, "z"), &want);
    }
}

#[test]
fn hyper_gnn() {
    let cases = [
        ("random", Shape::new(RANDOM, 6, 4).with_density(0.4)),
        ("nnz 0", Shape::new(Pattern::Empty, 3, 2)),
        ("0x0", Shape::new(Pattern::Empty, 0, 0)),
        ("1x1", Shape::new(Pattern::OneByOne, 1, 1)),
        (
            "every vertex in every edge",
            Shape::new(Pattern::FullRows, 3, 2),
        ),
    ];
    for (t, (case, shape)) in cases.into_iter().enumerate() {
        let shape = shape.with_feat(2);
        let mut args = gen("hyper_gnn", case, &shape, 2100 + t as u64).args;
        let (nv, ne) = (size(&args, "n_vertices"), size(&args, "n_edges"));
        let feat = size(&args, "feat_size");
        // Vertex-major (H) and edge-major (HT) patterns of the same incidence.
        let h = Csr::read(&args, "indptr", "indices", nv, ne);
        let ht = Csr::read(&args, "indptr_t", "indices_t", ne, nv);
        assert_eq!(h.nnz(), ht.nnz());
        let mut transposed: Vec<(usize, usize)> =
            ht.entries().into_iter().map(|(e, v)| (v, e)).collect();
        transposed.sort_unstable();
        assert_eq!(
            h.entries(),
            transposed,
            "hyper_gnn {case}: HT is H transposed"
        );
        let (hv, htv, x) = (out(&args, "h"), out(&args, "ht"), out(&args, "x"));
        run("hyper_gnn", &mut args);
        let hd = h.dense(&hv);
        let htd = ht.dense(&htv);
        let want = matmul(&matmul(&hd, &htd, nv, ne, nv), &x, nv, nv, feat);
        assert_close(&format!("hyper_gnn {case}"), &out(&args, "y"), &want);
    }
}
