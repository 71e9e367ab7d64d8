//! Differential tests of `lower_sparse_buffer`: for every catalog kernel, on random data with
//! empty rows, a single row, rows holding every column, no stored element, no rows and 1×1, the
//! stage-III interpreter on the lowered function gives exactly the arrays of the stage-II
//! interpreter, and (within rounding) those of the stage-I reference evaluator.
//!
//! The data is built here from the kernels' structure (a minimal generator per format), the
//! values of every buffer filled at random from its axes.

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sparsetir_eval::{eval_func, run_func, ArgValue};
use sparsetir_formats::Tensor;
use sparsetir_ir::{AxisId, AxisKind, BinOp, BufferShape, DType, Expr, PrimFunc};
use sparsetir_transform::{lower_sparse_buffer, lower_sparse_iter, LowerOptions};

type Args = HashMap<String, ArgValue>;

/// The structure of one level of every parent: all columns, none, or each with a probability
/// (every third parent from the second on storing nothing).
#[derive(Clone, Copy, Debug)]
enum Pat {
    Random(f64),
    Full,
    Empty,
}

#[derive(Clone, Copy, Debug)]
struct Case {
    name: &'static str,
    rows: usize,
    cols: usize,
    pat: Pat,
}

const CASES: &[Case] = &[
    Case {
        name: "random 7x9",
        rows: 7,
        cols: 9,
        pat: Pat::Random(0.4),
    },
    Case {
        name: "random 6x3",
        rows: 6,
        cols: 3,
        pat: Pat::Random(0.6),
    },
    Case {
        name: "single row",
        rows: 1,
        cols: 5,
        pat: Pat::Random(0.6),
    },
    Case {
        name: "full rows",
        rows: 3,
        cols: 4,
        pat: Pat::Full,
    },
    Case {
        name: "nnz 0",
        rows: 4,
        cols: 5,
        pat: Pat::Empty,
    },
    Case {
        name: "0 rows",
        rows: 0,
        cols: 3,
        pat: Pat::Random(0.5),
    },
    Case {
        name: "1x1",
        rows: 1,
        cols: 1,
        pat: Pat::Full,
    },
];

/// Sorted distinct coordinates of one fiber of a level of length `len` under parent `q`.
fn fiber(rng: &mut ChaCha8Rng, q: usize, len: usize, pat: Pat) -> Vec<i64> {
    match pat {
        Pat::Full => (0..len as i64).collect(),
        Pat::Empty => Vec::new(),
        Pat::Random(_) if q % 3 == 1 => Vec::new(),
        Pat::Random(p) => (0..len as i64).filter(|_| rng.random_bool(p)).collect(),
    }
}

/// A compressed level under `parents` elements: `(indptr, indices)`.
fn level(rng: &mut ChaCha8Rng, parents: usize, len: usize, pat: Pat) -> (Vec<i64>, Vec<i64>) {
    let mut indptr = vec![0i64];
    let mut indices = Vec::new();
    for q in 0..parents {
        indices.extend(fiber(rng, q, len, pat));
        indptr.push(indices.len() as i64);
    }
    (indptr, indices)
}

/// A level of `nnz_cols` coordinates per parent (ELL, 2:4).
fn fixed_level(rng: &mut ChaCha8Rng, parents: usize, len: usize, c: usize) -> Vec<i64> {
    let mut out = Vec::new();
    for _ in 0..parents {
        let mut cols: Vec<i64> = (0..len as i64).collect();
        while cols.len() > c {
            let k = rng.random_range(0..cols.len());
            cols.remove(k);
        }
        out.extend(cols);
    }
    out
}

fn i32s(v: &[i64]) -> ArgValue {
    ArgValue::Array(Tensor::from_i64(DType::I32, v).expect("int32 array"))
}

/// Scalars and structure arrays of `kernel` for `case` (values are filled by [`fill`]).
fn structure(kernel: &str, c: &Case, rng: &mut ChaCha8Rng) -> Args {
    let mut a: Args = HashMap::new();
    let int = |a: &mut Args, k: &str, v: usize| {
        a.insert(k.to_string(), ArgValue::Int(v as i64));
    };
    let (m, n) = (c.rows, c.cols);
    match kernel {
        "bsrmm" => {
            let (indptr, indices) = level(rng, m, n, c.pat);
            int(&mut a, "nb", m);
            int(&mut a, "mb", n);
            int(&mut a, "nnzb", indices.len());
            int(&mut a, "blk", 2);
            int(&mut a, "feat_size", 3);
            a.insert("indptr".into(), i32s(&indptr));
            a.insert("indices".into(), i32s(&indices));
        }
        "ellmm" => {
            let cols = match c.pat {
                Pat::Full => n,
                Pat::Empty => 0,
                Pat::Random(p) => ((p * n as f64).round() as usize).min(n),
            };
            int(&mut a, "nb", m);
            int(&mut a, "mb", n);
            int(&mut a, "nnz_cols", cols);
            int(&mut a, "blk", 2);
            int(&mut a, "feat_size", 3);
            a.insert("indices".into(), i32s(&fixed_level(rng, m, n, cols)));
        }
        "spmm_24" => {
            let n = match c.pat {
                Pat::Empty => 0,
                _ => 4 * n.div_ceil(4),
            };
            int(&mut a, "m", m);
            int(&mut a, "n", n);
            int(&mut a, "feat_size", 3);
            a.insert("indices".into(), i32s(&fixed_level(rng, m * (n / 4), 4, 2)));
        }
        "csf_square_sum" => {
            let (indptr_j, indices_j) = level(rng, m, n, c.pat);
            let (indptr_k, indices_k) = level(rng, indices_j.len(), 3, c.pat);
            int(&mut a, "m", m);
            int(&mut a, "n", n);
            int(&mut a, "p", 3);
            int(&mut a, "nnz_j", indices_j.len());
            int(&mut a, "nnz_k", indices_k.len());
            a.insert("indptr_j".into(), i32s(&indptr_j));
            a.insert("indices_j".into(), i32s(&indices_j));
            a.insert("indptr_k".into(), i32s(&indptr_k));
            a.insert("indices_k".into(), i32s(&indices_k));
        }
        "rgcn_hetero" => {
            let (indptr_i, indices_i) = level(rng, 3, m, c.pat);
            let (indptr_j, indices_j) = level(rng, indices_i.len(), n, c.pat);
            int(&mut a, "m", m);
            int(&mut a, "n", n);
            int(&mut a, "num_rels", 3);
            int(&mut a, "nnz_i", indices_i.len());
            int(&mut a, "nnz_j", indices_j.len());
            int(&mut a, "feat_in", 3);
            int(&mut a, "feat_out", 2);
            a.insert("indptr_i".into(), i32s(&indptr_i));
            a.insert("indices_i".into(), i32s(&indices_i));
            a.insert("indptr_j".into(), i32s(&indptr_j));
            a.insert("indices_j".into(), i32s(&indices_j));
        }
        "ragged_bmm" => {
            // Per batch: I x J times J x K; every row of IJ holds |J|, of JK and IK |K|.
            let len = |rng: &mut ChaCha8Rng, b: usize| fiber(rng, b, n, c.pat).len();
            let (mut li, mut lj, mut lk) = (Vec::new(), Vec::new(), Vec::new());
            for b in 0..m {
                li.push(len(rng, b));
                lj.push(len(rng, b));
                lk.push(len(rng, b));
            }
            let ptr = |lens: &[usize]| {
                let mut p = vec![0i64];
                for &l in lens {
                    p.push(p[p.len() - 1] + l as i64);
                }
                p
            };
            let rows = |outer: &[usize], inner: &[usize]| -> Vec<usize> {
                outer
                    .iter()
                    .zip(inner)
                    .flat_map(|(&o, &i)| std::iter::repeat_n(i, o))
                    .collect()
            };
            let (ij, jk, ik) = (rows(&li, &lj), rows(&lj, &lk), rows(&li, &lk));
            int(&mut a, "batch_size", m);
            int(&mut a, "max_len", n.max(1));
            for (name, lens) in [
                ("i", &li),
                ("j", &lj),
                ("k", &lk),
                ("ij", &ij),
                ("jk", &jk),
                ("ik", &ik),
            ] {
                let p = ptr(lens);
                int(&mut a, &format!("nnz_{name}"), p[p.len() - 1] as usize);
                a.insert(format!("indptr_{name}"), i32s(&p));
            }
        }
        "hyper_gnn" => {
            let (indptr, indices) = level(rng, m, n, c.pat);
            // The transpose: for every hyper-edge, its vertices in order.
            let mut t: Vec<Vec<i64>> = vec![Vec::new(); n];
            for i in 0..m {
                for p in indptr[i]..indptr[i + 1] {
                    t[indices[p as usize] as usize].push(i as i64);
                }
            }
            let indptr_t: Vec<i64> = std::iter::once(0)
                .chain(t.iter().scan(0i64, |s, r| {
                    *s += r.len() as i64;
                    Some(*s)
                }))
                .collect();
            let indices_t: Vec<i64> = t.concat();
            int(&mut a, "n_vertices", m);
            int(&mut a, "n_edges", n);
            int(&mut a, "nnz", indices.len());
            int(&mut a, "feat_size", 3);
            a.insert("indptr".into(), i32s(&indptr));
            a.insert("indices".into(), i32s(&indices));
            a.insert("indptr_t".into(), i32s(&indptr_t));
            a.insert("indices_t".into(), i32s(&indices_t));
        }
        "csr2bsr" => {
            let (indptr, indices) = level(rng, m, n, c.pat);
            let (mb, nb) = (m.div_ceil(2), n.div_ceil(2));
            let (indptr_b, indices_b) = level(rng, mb, nb, Pat::Random(0.7));
            int(&mut a, "m", m);
            int(&mut a, "n", n);
            int(&mut a, "nnz", indices.len());
            int(&mut a, "mb", mb);
            int(&mut a, "nb", nb);
            int(&mut a, "nnzb", indices_b.len());
            a.insert("indptr".into(), i32s(&indptr));
            a.insert("indices".into(), i32s(&indices));
            a.insert("indptr_bsr".into(), i32s(&indptr_b));
            a.insert("indices_bsr".into(), i32s(&indices_b));
        }
        // The CSR kernels.
        _ => {
            let len = if kernel.starts_with("segment") {
                n.min(100)
            } else {
                n
            };
            let (indptr, indices) = level(rng, m, len, c.pat);
            int(&mut a, "m", m);
            int(&mut a, "n", n);
            int(&mut a, "nnz", indices.len());
            int(&mut a, "feat_size", 3);
            int(&mut a, "feat_in", 3);
            int(&mut a, "feat_out", 2);
            int(&mut a, "num_rels", 3);
            a.insert("indptr".into(), i32s(&indptr));
            a.insert("indices".into(), i32s(&indices));
        }
    }
    a
}

/// Integer value of a size expression over the scalar arguments.
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

/// Number of values of a stage-I sparse buffer: the product of its groups' sizes (a fixed head
/// and the varied chain under it), computed from the axis declarations.
fn buffer_len(f: &PrimFunc, axes: &[AxisId], args: &Args) -> usize {
    let mut groups: Vec<usize> = Vec::new();
    for &a in axes {
        let ax = &f.axes[a];
        match ax.kind {
            AxisKind::DenseFixed => groups.push(size(&ax.length, f, args)),
            AxisKind::CompressedFixed => {
                groups.push(size(ax.nnz_cols.as_ref().expect("nnz_cols"), f, args))
            }
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

/// Random values for every buffer bound to a parameter (small integers for integer buffers).
fn fill(f: &PrimFunc, args: &mut Args, rng: &mut ChaCha8Rng) {
    for &b in &f.buffer_decls {
        let buf = &f.buffers[b];
        let Some(data) = buf.data_param() else {
            continue;
        };
        let len = match &buf.shape {
            BufferShape::Sparse(axes) => buffer_len(f, axes, args),
            BufferShape::Dense(dims) => dims.iter().map(|d| size(d, f, args)).product(),
        };
        let t = if buf.dtype.is_float() {
            let v: Vec<f64> = (0..len)
                .map(|_| rng.random_range(-2.0..2.0f32) as f64)
                .collect();
            Tensor::from_f64(buf.dtype, &v).expect("float tensor")
        } else {
            let v: Vec<i64> = (0..len).map(|_| rng.random_range(0..3)).collect();
            Tensor::from_i64(buf.dtype, &v).expect("int tensor")
        };
        args.insert(f.vars[data].name.clone(), ArgValue::Array(t));
    }
}

fn close(a: &Tensor, b: &Tensor) -> bool {
    let (x, y) = (a.to_f64_vec(), b.to_f64_vec());
    x.len() == y.len()
        && x.iter().zip(&y).all(|(p, q)| {
            (p.is_nan() && q.is_nan()) || (p - q).abs() <= 1e-5 * p.abs().max(q.abs()).max(1.0)
        })
}

fn arrays(args: &Args) -> Vec<(&String, &Tensor)> {
    let mut v: Vec<_> = args
        .iter()
        .filter_map(|(k, a)| match a {
            ArgValue::Array(t) => Some((k, t)),
            _ => None,
        })
        .collect();
    v.sort_by_key(|(k, _)| k.as_str());
    v
}

/// `zero_out`: parameters whose arrays start zeroed (where the stage-I and TIR init rules
/// differ, see the stage-II differential test).
fn check(kernel: &str, checked: bool, seed: u64, zero_out: &[&str]) {
    let f = sparsetir_ops::load(kernel).expect("kernel parses");
    let opts = LowerOptions {
        check_invalid_binary_search: checked,
    };
    let ii = lower_sparse_iter(&f, &opts).expect("lowers to stage II");
    let iii = lower_sparse_buffer(&ii).expect("lowers to stage III");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for c in CASES {
        let mut args = structure(kernel, c, &mut rng);
        fill(&f, &mut args, &mut rng);
        for z in zero_out {
            if let Some(ArgValue::Array(t)) = args.get_mut(*z) {
                *t = Tensor::zeros(t.dtype(), vec![t.len()]).expect("zeros");
            }
        }
        let case = c.name;
        let mut want = args.clone();
        eval_func(&f, &mut want).unwrap_or_else(|e| panic!("{kernel} {case}: stage I: {e}"));
        let mut two = args.clone();
        run_func(&ii, &mut two).unwrap_or_else(|e| panic!("{kernel} {case}: stage II: {e}"));
        let mut three = args.clone();
        run_func(&iii, &mut three).unwrap_or_else(|e| panic!("{kernel} {case}: stage III: {e}"));
        for ((name, w), ((_, t2), (_, t3))) in arrays(&want)
            .into_iter()
            .zip(arrays(&two).into_iter().zip(arrays(&three)))
        {
            assert_eq!(
                t2.to_f64_vec(),
                t3.to_f64_vec(),
                "{kernel} ({case}, checked={checked}): `{name}` differs between stage II and III"
            );
            assert!(
                close(w, t3),
                "{kernel} ({case}, checked={checked}): `{name}` differs\nstage I  : {:?}\nstage III: {:?}",
                w.to_f64_vec(),
                t3.to_f64_vec()
            );
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
            check(k, checked, 7, &[]);
        }
    }
}

#[test]
fn searching_kernels_agree_when_checked() {
    check("csrmm_dense_iter", true, 11, &[]);
    check("csr2bsr", true, 12, &[]);
}

#[test]
fn block_and_fixed_formats_agree() {
    check("bsrmm", false, 13, &["c"]);
    check("ellmm", false, 14, &[]);
    check("spmm_24", false, 15, &[]);
}

#[test]
fn multi_level_formats_agree() {
    check("csf_square_sum", false, 16, &[]);
    check("rgcn_hetero", false, 17, &[]);
    check("ragged_bmm", false, 18, &[]);
    check("hyper_gnn", false, 19, &[]);
}
