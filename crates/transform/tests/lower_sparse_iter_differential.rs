//! Differential tests: for the catalog kernels over one CSR structure (plus BSR with random
//! blocks), the stage-I reference evaluator and the stage-II interpreter
//! (`sparsetir_eval::run_func`) on the lowered function produce the same arrays, on random data
//! with empty rows, a single row, rows holding every column and no stored element. Data helpers
//! are adapted from `crates/ops/tests/numerics.rs`.

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sparsetir_eval::{eval_func, run_func, ArgValue};
use sparsetir_formats::Tensor;
use sparsetir_ir::{AxisKind, BinOp, BufferShape, DType, Expr, PrimFunc};
use sparsetir_transform::{lower_sparse_iter, LowerOptions};

type Args = HashMap<String, ArgValue>;

struct Csr {
    m: usize,
    n: usize,
    indptr: Vec<i64>,
    indices: Vec<i64>,
}

fn csr(n: usize, rows: &[Vec<usize>]) -> Csr {
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

fn cases(rng: &mut ChaCha8Rng) -> Vec<(&'static str, Csr)> {
    let mut random = |m: usize, n: usize, p: f64| {
        let rows: Vec<Vec<usize>> = (0..m)
            .map(|i| {
                if i % 3 == 1 {
                    Vec::new()
                } else {
                    (0..n).filter(|_| rng.random_bool(p)).collect()
                }
            })
            .collect();
        csr(n, &rows)
    };
    vec![
        ("random 7x9", random(7, 9, 0.4)),
        ("random 6x3", random(6, 3, 0.6)),
        ("single row", csr(5, &[vec![0, 2, 4]])),
        ("full rows", csr(4, &vec![(0..4).collect(); 3])),
        ("nnz 0", csr(5, &vec![Vec::new(); 4])),
        ("1x1", csr(1, &[vec![0]])),
    ]
}

/// Integer value of a size expression over the scalar parameters.
fn size(e: &Expr, f: &PrimFunc, args: &Args) -> usize {
    fn go(e: &Expr, f: &PrimFunc, args: &Args) -> i64 {
        match e {
            Expr::Int(v, _) => *v,
            Expr::Var(v) => match args.get(&f.vars[*v].name) {
                Some(ArgValue::Int(x)) => *x,
                _ => panic!("size uses unknown parameter {}", f.vars[*v].name),
            },
            Expr::Binary(op, a, b) => {
                let (x, y) = (go(a, f, args), go(b, f, args));
                match op {
                    BinOp::Add => x + y,
                    BinOp::Sub => x - y,
                    BinOp::Mul => x * y,
                    BinOp::FloorDiv => x.div_euclid(y),
                    _ => panic!("unexpected size operator {op:?}"),
                }
            }
            _ => panic!("unexpected size expression {e:?}"),
        }
    }
    go(e, f, args).max(0) as usize
}

/// Number of values of a stage-I buffer: product over its groups (fixed head, varied chain).
fn buffer_len(f: &PrimFunc, axes: &[sparsetir_ir::AxisId], args: &Args) -> usize {
    let mut groups: Vec<usize> = Vec::new();
    for &a in axes {
        let ax = &f.axes[a];
        match ax.kind {
            AxisKind::DenseFixed => groups.push(size(&ax.length, f, args)),
            AxisKind::CompressedFixed => groups.push(size(ax.nnz_cols.as_ref().unwrap(), f, args)),
            _ => {
                let nnz = size(ax.nnz.as_ref().expect("varied axis with nnz"), f, args);
                match groups.last_mut() {
                    Some(g) => *g = nnz,
                    None => groups.push(nnz),
                }
            }
        }
    }
    groups.iter().product()
}

/// Scalars and structure for a CSR-structured kernel; every buffer gets random values.
fn make_args(f: &PrimFunc, c: &Csr, rng: &mut ChaCha8Rng) -> Args {
    let feat = 3i64;
    let ints: &[(&str, i64)] = &[
        ("m", c.m as i64),
        ("n", c.n as i64),
        ("nnz", c.indices.len() as i64),
        ("nb", c.m as i64),
        ("mb", c.n as i64),
        ("nnzb", c.indices.len() as i64),
        ("blk", 2),
        ("feat_size", feat),
        ("feat_in", feat),
        ("feat_out", 2),
        ("num_rels", 3),
    ];
    let mut args: Args = HashMap::new();
    for &p in &f.params {
        let name = f.vars[p].name.as_str();
        if let Some((_, v)) = ints.iter().find(|(k, _)| *k == name) {
            args.insert(name.to_string(), ArgValue::Int(*v));
        }
    }
    let i32s = |v: &[i64]| ArgValue::Array(Tensor::from_i64(DType::I32, v).expect("i32"));
    args.insert("indptr".into(), i32s(&c.indptr));
    args.insert("indices".into(), i32s(&c.indices));
    for &b in &f.buffer_decls {
        let buf = &f.buffers[b];
        let Some(data) = buf.data_param() else {
            continue;
        };
        let len = match &buf.shape {
            BufferShape::Sparse(axes) => buffer_len(f, axes, &args),
            BufferShape::Dense(dims) => dims.iter().map(|d| size(d, f, &args)).product(),
        };
        let t = if buf.dtype.is_float() {
            let v: Vec<f64> = (0..len)
                .map(|_| rng.random_range(-2.0..2.0f64) as f32 as f64)
                .collect();
            Tensor::from_f64(buf.dtype, &v).expect("float tensor")
        } else {
            let v: Vec<i64> = (0..len).map(|_| rng.random_range(0..3)).collect();
            Tensor::from_i64(buf.dtype, &v).expect("int tensor")
        };
        args.insert(f.vars[data].name.clone(), ArgValue::Array(t));
    }
    args
}

fn close(a: &Tensor, b: &Tensor) -> bool {
    let (x, y) = (a.to_f64_vec(), b.to_f64_vec());
    x.len() == y.len()
        && x.iter().zip(&y).all(|(p, q)| {
            (p.is_nan() && q.is_nan()) || (p - q).abs() <= 1e-5 * p.abs().max(q.abs()).max(1.0)
        })
}

/// Every array (outputs included) starts with random values.
fn check(kernel: &str, checked: bool, seed: u64) {
    let f = sparsetir_ops::load(kernel).expect("kernel parses");
    let opts = LowerOptions {
        check_invalid_binary_search: checked,
    };
    let low = lower_sparse_iter(&f, &opts).expect("lowers");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for (case, c) in cases(&mut rng) {
        let args = make_args(&f, &c, &mut rng);
        let mut want = args.clone();
        eval_func(&f, &mut want).unwrap_or_else(|e| panic!("{kernel} {case}: eval: {e}"));
        let mut got = args.clone();
        run_func(&low, &mut got).unwrap_or_else(|e| panic!("{kernel} {case}: stage II: {e}"));
        for (name, w) in &want {
            if let (ArgValue::Array(w), Some(ArgValue::Array(g))) = (w, got.get(name)) {
                assert!(
                    close(w, g),
                    "{kernel} ({case}, checked={checked}): `{name}` differs\nstage I : {:?}\nstage II: {:?}",
                    w.to_f64_vec(),
                    g.to_f64_vec()
                );
            }
        }
    }
}

#[test]
fn csr_kernels_agree() {
    for k in [
        "csrmm",
        "csrmm_alias",
        "sddmm",
        "sddmm_alias",
        "fused_sddmm",
        "spmv",
        "sparse_softmax",
        "rgcn_homo",
        "segment_sum",
        "segment_max",
        "segment_min",
        "segment_mean",
    ] {
        for checked in [false, true] {
            check(k, checked, 7);
        }
    }
}

#[test]
fn dense_iteration_search_agrees_when_checked() {
    check("csrmm_dense_iter", true, 11);
}

/// bsrmm's init sits in the outer block (first reduction iterator `bj`): it runs for every
/// block row, also one without stored blocks; the evaluator follows the same rule, so the
/// outputs start with random values here.
#[test]
fn bsrmm_agrees() {
    for checked in [false, true] {
        check("bsrmm", checked, 13);
    }
}

fn array(args: &Args, name: &str) -> Vec<f64> {
    match args.get(name) {
        Some(ArgValue::Array(t)) => t.to_f64_vec(),
        _ => panic!("no array `{name}`"),
    }
}

fn run_both(kernel: &str, args: &Args) -> (Args, Args) {
    let f = sparsetir_ops::load(kernel).expect("kernel parses");
    let low = lower_sparse_iter(&f, &LowerOptions::default()).expect("lowers");
    let mut want = args.clone();
    eval_func(&f, &mut want).unwrap_or_else(|e| panic!("{kernel}: eval: {e}"));
    let mut got = args.clone();
    run_func(&low, &mut got).unwrap_or_else(|e| panic!("{kernel}: stage II: {e}"));
    (want, got)
}

fn assert_close(what: &str, got: &[f64], expected: &[f64]) {
    assert_eq!(got.len(), expected.len(), "{what}");
    for (g, e) in got.iter().zip(expected) {
        assert!(
            (g - e).abs() <= 1e-5 * e.abs().max(1.0),
            "{what}: {got:?} vs {expected:?}"
        );
    }
}

/// csrmm with a non-zero initial `C`: the init runs with the first `j` of a row, so a row
/// without stored elements keeps its initial values and the others get `A · B`; checked
/// against a dense computation.
#[test]
fn csrmm_non_zero_initial_output() {
    let mut rng = ChaCha8Rng::seed_from_u64(41);
    let f = sparsetir_ops::load("csrmm").expect("parses");
    let c = csr(4, &[vec![1, 3], vec![], vec![0, 1, 2, 3], vec![]]);
    let args = make_args(&f, &c, &mut rng);
    let (a, b, c0) = (array(&args, "a"), array(&args, "b"), array(&args, "c"));
    assert!(c0.iter().all(|x| *x != 0.0));
    let k = 3;
    let mut expected = c0.clone();
    for i in 0..c.m {
        let (lo, hi) = (c.indptr[i] as usize, c.indptr[i + 1] as usize);
        if lo == hi {
            continue;
        }
        for kk in 0..k {
            expected[i * k + kk] = (lo..hi)
                .map(|p| a[p] * b[c.indices[p] as usize * k + kk])
                .sum();
        }
    }
    let (want, got) = run_both("csrmm", &args);
    assert_close("csrmm stage I", &array(&want, "c"), &expected);
    assert_close("csrmm stage II", &array(&got, "c"), &expected);
}

/// bsrmm with a non-zero initial `C`: every block row is reset (also the one without blocks)
/// and gets `A · B`; checked against a dense computation.
#[test]
fn bsrmm_non_zero_initial_output() {
    let mut rng = ChaCha8Rng::seed_from_u64(42);
    let f = sparsetir_ops::load("bsrmm").expect("parses");
    // 3 block rows (the middle one empty), 3 block columns, 2x2 blocks, 3 features.
    let c = csr(3, &[vec![0, 2], vec![], vec![1]]);
    let args = make_args(&f, &c, &mut rng);
    let (a, b, c0) = (array(&args, "a"), array(&args, "b"), array(&args, "c"));
    assert!(c0.iter().all(|x| *x != 0.0));
    let (blk, feat) = (2usize, 3usize);
    let mut expected = vec![0.0; c.m * blk * feat];
    for i in 0..c.m {
        for p in c.indptr[i] as usize..c.indptr[i + 1] as usize {
            let j = c.indices[p] as usize;
            for bi in 0..blk {
                for bj in 0..blk {
                    for ff in 0..feat {
                        expected[(i * blk + bi) * feat + ff] +=
                            a[(p * blk + bi) * blk + bj] * b[(j * blk + bj) * feat + ff];
                    }
                }
            }
        }
    }
    let (want, got) = run_both("bsrmm", &args);
    assert_close("bsrmm stage I", &array(&want, "c"), &expected);
    assert_close("bsrmm stage II", &array(&got, "c"), &expected);
}
