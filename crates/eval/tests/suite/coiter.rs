//! Co-iteration (`T.sp.union`/`T.sp.intersect`) and assembled outputs (issue 15) in the
//! reference evaluator: the four sparse-output kernels of `crates/ops/kernels` on seeded random
//! CSR matrices, against dense computations written here, and the argument contract of
//! assembled axes (what the run writes back, what it refuses).

#![allow(clippy::needless_range_loop)]

use std::collections::HashMap;

use sparsetir_eval::{eval_func, ArgValue};
use sparsetir_formats::Tensor;
use sparsetir_ir::{DType, Expr, PrimFunc};

const SPADD: &str = include_str!("../../../ops/kernels/spadd.sp");
const SPMUL: &str = include_str!("../../../ops/kernels/spmul.sp");
const SPGEMM: &str = include_str!("../../../ops/kernels/spgemm.sp");
const MASKED_SPGEMM: &str = include_str!("../../../ops/kernels/masked_spgemm.sp");

fn parse(src: &str) -> PrimFunc {
    sparsetir_syntax::parse_func(src).expect("kernel parses")
}

// ------------------------------------------------------------------------------------ data

/// A 64-bit linear congruential generator (Knuth's MMIX constants).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    /// Uniform in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// A value in `[-2, 2)`, a multiple of 1/8 (exact in float32), never 0.
    fn value(&mut self) -> f32 {
        let v = self.below(32) as f32 / 8.0 - 2.0;
        if v == 0.0 {
            0.125
        } else {
            v
        }
    }
}

/// A CSR matrix with sorted, unique column indices.
#[derive(Clone, Debug)]
struct Csr {
    m: usize,
    n: usize,
    indptr: Vec<i64>,
    indices: Vec<i64>,
    vals: Vec<f32>,
}

impl Csr {
    /// Each element stored with probability `percent`%; the rows in `empty` store nothing.
    fn random(rng: &mut Lcg, m: usize, n: usize, percent: u64, empty: &[usize]) -> Csr {
        let mut indptr = vec![0];
        let mut indices = Vec::new();
        let mut vals = Vec::new();
        for i in 0..m {
            for j in 0..n {
                if rng.below(100) < percent && !empty.contains(&i) {
                    indices.push(j as i64);
                    vals.push(rng.value());
                }
            }
            indptr.push(indices.len() as i64);
        }
        Csr {
            m,
            n,
            indptr,
            indices,
            vals,
        }
    }

    fn nnz(&self) -> usize {
        self.indices.len()
    }

    /// The dense form: `Some(value)` where stored.
    fn dense(&self) -> Vec<Vec<Option<f32>>> {
        let mut d = vec![vec![None; self.n]; self.m];
        for i in 0..self.m {
            for p in self.indptr[i] as usize..self.indptr[i + 1] as usize {
                d[i][self.indices[p] as usize] = Some(self.vals[p]);
            }
        }
        d
    }

    /// The matrix whose pattern is exactly the `Some` entries of `d`, row by row.
    fn from_dense(d: &[Vec<Option<f32>>], n: usize) -> Csr {
        let mut indptr = vec![0];
        let mut indices = Vec::new();
        let mut vals = Vec::new();
        for row in d {
            for (j, v) in row.iter().enumerate() {
                if let Some(v) = v {
                    indices.push(j as i64);
                    vals.push(*v);
                }
            }
            indptr.push(indices.len() as i64);
        }
        Csr {
            m: d.len(),
            n,
            indptr,
            indices,
            vals,
        }
    }
}

fn i32_arr(v: &[i64]) -> ArgValue {
    ArgValue::Array(Tensor::from_i64(DType::I32, v).unwrap())
}

fn f32_arr(v: &[f32]) -> ArgValue {
    let v: Vec<f64> = v.iter().map(|x| *x as f64).collect();
    ArgValue::Array(Tensor::from_f64(DType::F32, &v).unwrap())
}

fn int(v: usize) -> ArgValue {
    ArgValue::Int(v as i64)
}

/// `(prefix)_indptr`, `(prefix)_indices`, the values under `data` and `nnz_(prefix)`.
fn operand(args: &mut HashMap<String, ArgValue>, prefix: &str, data: &str, a: &Csr) {
    args.insert(format!("{prefix}_indptr"), i32_arr(&a.indptr));
    args.insert(format!("{prefix}_indices"), i32_arr(&a.indices));
    args.insert(format!("nnz_{prefix}"), int(a.nnz()));
    args.insert(data.to_string(), f32_arr(&a.vals));
}

/// Arguments of spadd/spmul (C's parameters omitted).
fn elementwise_args(a: &Csr, b: &Csr) -> HashMap<String, ArgValue> {
    let mut args = HashMap::new();
    args.insert("m".to_string(), int(a.m));
    args.insert("n".to_string(), int(a.n));
    operand(&mut args, "a", "a", a);
    operand(&mut args, "b", "b", b);
    args
}

/// Arguments of spgemm (C's parameters omitted).
fn spgemm_args(a: &Csr, b: &Csr) -> HashMap<String, ArgValue> {
    let mut args = HashMap::new();
    args.insert("m".to_string(), int(a.m));
    args.insert("k".to_string(), int(a.n));
    args.insert("n".to_string(), int(b.n));
    operand(&mut args, "a", "a", a);
    operand(&mut args, "b", "b", b);
    args
}

fn int_array(args: &HashMap<String, ArgValue>, name: &str) -> Vec<i64> {
    match args.get(name) {
        Some(ArgValue::Array(t)) => {
            assert_eq!(t.dtype(), DType::I32, "`{name}` has the axis idtype");
            t.to_i64_vec()
        }
        other => panic!("`{name}` is not an array after the run: {other:?}"),
    }
}

/// The assembled output `c` as CSR, checking the contract: `c_indptr`, `c_indices` (int32),
/// `c` (float32) and `nnz_c` consistent with each other and with `m` rows.
fn assembled_output(args: &HashMap<String, ArgValue>, m: usize, n: usize) -> Csr {
    let indptr = int_array(args, "c_indptr");
    let indices = int_array(args, "c_indices");
    let vals = match args.get("c") {
        Some(ArgValue::Array(t)) => {
            assert_eq!(t.dtype(), DType::F32, "`c` has the buffer's dtype");
            t.to_f64_vec()
                .into_iter()
                .map(|x| x as f32)
                .collect::<Vec<_>>()
        }
        other => panic!("`c` is not an array after the run: {other:?}"),
    };
    let nnz = match args.get("nnz_c") {
        Some(ArgValue::Int(x)) => *x,
        other => panic!("`nnz_c` is not an integer after the run: {other:?}"),
    };
    assert_eq!(indptr.len(), m + 1, "c_indptr has m + 1 entries");
    assert_eq!(indptr[0], 0);
    assert_eq!(*indptr.last().unwrap(), nnz);
    assert_eq!(indices.len() as i64, nnz);
    assert_eq!(vals.len() as i64, nnz);
    for i in 0..m {
        let row = &indices[indptr[i] as usize..indptr[i + 1] as usize];
        assert!(
            row.windows(2).all(|w| w[0] < w[1]),
            "row {i} sorted: {row:?}"
        );
        assert!(row.iter().all(|&j| (0..n as i64).contains(&j)));
    }
    Csr {
        m,
        n,
        indptr,
        indices,
        vals,
    }
}

fn pattern(c: &Csr) -> Vec<(usize, i64)> {
    (0..c.m)
        .flat_map(|i| {
            c.indices[c.indptr[i] as usize..c.indptr[i + 1] as usize]
                .iter()
                .map(move |&j| (i, j))
        })
        .collect()
}

/// Pairs of operands with different structures: empty rows, an empty operand, rectangular
/// shapes, 1×1, full rows.
fn elementwise_cases(rng: &mut Lcg) -> Vec<(Csr, Csr)> {
    vec![
        (
            Csr::random(rng, 6, 9, 35, &[1, 4]),
            Csr::random(rng, 6, 9, 35, &[2, 4]),
        ),
        (
            Csr::random(rng, 9, 4, 50, &[0]),
            Csr::random(rng, 9, 4, 20, &[8]),
        ),
        (
            Csr::random(rng, 5, 7, 40, &[]),
            Csr::random(rng, 5, 7, 0, &[]),
        ),
        (
            Csr::random(rng, 4, 3, 0, &[]),
            Csr::random(rng, 4, 3, 60, &[]),
        ),
        (
            Csr::random(rng, 3, 5, 0, &[]),
            Csr::random(rng, 3, 5, 0, &[]),
        ),
        (
            Csr::random(rng, 1, 1, 100, &[]),
            Csr::random(rng, 1, 1, 100, &[]),
        ),
        (
            Csr::random(rng, 1, 1, 100, &[]),
            Csr::random(rng, 1, 1, 0, &[]),
        ),
        (
            Csr::random(rng, 4, 6, 100, &[]),
            Csr::random(rng, 4, 6, 50, &[3]),
        ),
        (
            Csr::random(rng, 12, 10, 15, &[5, 6, 7]),
            Csr::random(rng, 12, 10, 15, &[]),
        ),
    ]
}

// ------------------------------------------------------------------------------ spadd, spmul

/// Runs an elementwise kernel on every case and compares with `combine` applied entry by entry
/// to the dense operands (`None`: not stored).
fn check_elementwise(src: &str, seed: u64, combine: fn(Option<f32>, Option<f32>) -> Option<f32>) {
    let f = parse(src);
    let mut rng = Lcg(seed);
    for (a, b) in elementwise_cases(&mut rng) {
        let mut args = elementwise_args(&a, &b);
        eval_func(&f, &mut args).unwrap_or_else(|e| panic!("{}×{}: {e}", a.m, a.n));
        let c = assembled_output(&args, a.m, a.n);
        let (da, db) = (a.dense(), b.dense());
        let want: Vec<Vec<Option<f32>>> = (0..a.m)
            .map(|i| (0..a.n).map(|j| combine(da[i][j], db[i][j])).collect())
            .collect();
        let want = Csr::from_dense(&want, a.n);
        assert_eq!(pattern(&c), pattern(&want), "{}×{} structure", a.m, a.n);
        assert_eq!(c.vals, want.vals, "{}×{} values", a.m, a.n);
    }
}

#[test]
fn spadd_matches_dense() {
    check_elementwise(SPADD, 0x5eed_add0, |x, y| match (x, y) {
        (None, None) => None,
        (x, y) => Some(x.unwrap_or(0.0) + y.unwrap_or(0.0)),
    });
}

#[test]
fn spmul_matches_dense() {
    // Stored exactly where both are stored, products kept even when 0.
    check_elementwise(SPMUL, 0x5eed_0a11, |x, y| match (x, y) {
        (Some(x), Some(y)) => Some(x * y),
        _ => None,
    });
}

/// An explicit zero product is stored (the structure is the intersection, not the nonzeros).
#[test]
fn spmul_keeps_explicit_zero_products() {
    let f = parse(SPMUL);
    let a = Csr {
        m: 2,
        n: 3,
        indptr: vec![0, 2, 3],
        indices: vec![0, 2, 1],
        vals: vec![0.0, 2.0, 3.0],
    };
    let b = Csr {
        m: 2,
        n: 3,
        indptr: vec![0, 2, 3],
        indices: vec![0, 1, 1],
        vals: vec![5.0, 7.0, 0.5],
    };
    let mut args = elementwise_args(&a, &b);
    eval_func(&f, &mut args).unwrap();
    let c = assembled_output(&args, 2, 3);
    assert_eq!(c.indptr, vec![0, 1, 2]);
    assert_eq!(c.indices, vec![0, 1]);
    assert_eq!(c.vals, vec![0.0, 1.5]);
}

// ------------------------------------------------------------------------------------ spgemm

fn close(got: f32, want: f64, scale: f64) -> bool {
    (got as f64 - want).abs() <= 1e-5 * scale.max(want.abs()) + 1e-7
}

#[test]
fn spgemm_matches_dense() {
    let f = parse(SPGEMM);
    let mut rng = Lcg(0x5eed_6e33);
    let cases = vec![
        (
            Csr::random(&mut rng, 7, 5, 40, &[2]),
            Csr::random(&mut rng, 5, 9, 35, &[3]),
        ),
        (
            Csr::random(&mut rng, 7, 5, 30, &[]),
            Csr::random(&mut rng, 5, 9, 0, &[]),
        ),
        (
            Csr::random(&mut rng, 7, 5, 0, &[]),
            Csr::random(&mut rng, 5, 9, 50, &[]),
        ),
        (
            Csr::random(&mut rng, 1, 1, 100, &[]),
            Csr::random(&mut rng, 1, 1, 100, &[]),
        ),
        (
            Csr::random(&mut rng, 10, 8, 25, &[0, 9]),
            Csr::random(&mut rng, 8, 6, 60, &[1, 2]),
        ),
        (
            Csr::random(&mut rng, 3, 4, 100, &[]),
            Csr::random(&mut rng, 4, 2, 100, &[]),
        ),
    ];
    for (a, b) in cases {
        let (m, k, n) = (a.m, a.n, b.n);
        let mut args = spgemm_args(&a, &b);
        eval_func(&f, &mut args).unwrap_or_else(|e| panic!("{m}×{k}·{k}×{n}: {e}"));
        let c = assembled_output(&args, m, n);
        let (da, db) = (a.dense(), b.dense());
        // Structure: (i, j) with some k where A[i, k] and B[k, j] are both stored.
        let mut want_pattern = Vec::new();
        let mut want = HashMap::new();
        for i in 0..m {
            for j in 0..n {
                let terms: Vec<f64> = (0..k)
                    .filter_map(|kk| Some(da[i][kk]? as f64 * db[kk][j]? as f64))
                    .collect();
                if !terms.is_empty() {
                    want_pattern.push((i, j as i64));
                    let scale: f64 = terms.iter().map(|t| t.abs()).sum();
                    want.insert((i, j as i64), (terms.iter().sum::<f64>(), scale));
                }
            }
        }
        assert_eq!(pattern(&c), want_pattern, "{m}×{k}·{k}×{n} structure");
        for (p, &(i, j)) in pattern(&c).iter().enumerate() {
            let (w, scale) = want[&(i, j)];
            assert!(
                close(c.vals[p], w, scale),
                "C[{i}, {j}] = {}, want {w}",
                c.vals[p]
            );
        }
    }
}

// ------------------------------------------------------------------------------------ masked

#[test]
fn masked_spgemm_matches_dense() {
    let f = parse(MASKED_SPGEMM);
    let mut rng = Lcg(0x5eed_3a5c);
    let cases = vec![
        (7, 5, 9, 40, 40, 30, vec![2usize]),
        (7, 5, 9, 40, 40, 0, vec![]),
        (7, 5, 9, 0, 40, 50, vec![]),
        (7, 5, 9, 40, 0, 50, vec![]),
        (1, 1, 1, 100, 100, 100, vec![]),
        (6, 4, 6, 60, 60, 60, vec![0, 5]),
        (4, 3, 5, 100, 100, 100, vec![]),
    ];
    for (m, k, n, pa, pb, pm, empty) in cases {
        let a = Csr::random(&mut rng, m, k, pa, &empty);
        let b = Csr::random(&mut rng, k, n, pb, &[]);
        let mask = Csr::random(&mut rng, m, n, pm, &[]);
        let mut args = HashMap::new();
        args.insert("m".to_string(), int(m));
        args.insert("k".to_string(), int(k));
        args.insert("n".to_string(), int(n));
        operand(&mut args, "a", "a", &a);
        operand(&mut args, "b", "b", &b);
        operand(&mut args, "m", "mask", &mask);
        // The output's initial contents are overwritten by the init iteration.
        args.insert("c".to_string(), f32_arr(&vec![99.0; mask.nnz()]));
        eval_func(&f, &mut args).unwrap_or_else(|e| panic!("{m}×{k}·{k}×{n}: {e}"));
        let got = match &args["c"] {
            ArgValue::Array(t) => t.to_f64_vec(),
            other => panic!("{other:?}"),
        };
        assert_eq!(got.len(), mask.nnz());
        let (da, db) = (a.dense(), b.dense());
        for i in 0..m {
            for p in mask.indptr[i] as usize..mask.indptr[i + 1] as usize {
                let j = mask.indices[p] as usize;
                let terms: Vec<f64> = (0..k)
                    .filter_map(|kk| Some(da[i][kk]? as f64 * db[kk][j]? as f64))
                    .collect();
                let mv = mask.vals[p] as f64;
                let want = mv * terms.iter().sum::<f64>();
                let scale = mv.abs() * terms.iter().map(|t| t.abs()).sum::<f64>();
                assert!(
                    close(got[p] as f32, want, scale),
                    "{m}×{k}·{k}×{n}: C[{i}, {j}] = {}, want {want}",
                    got[p]
                );
            }
        }
    }
}

// ------------------------------------------------------------------------------------ contract

/// After the run the four parameters of the assembled output hold exactly the CSR arrays and
/// nnz; whatever was passed for them before is ignored.
#[test]
fn assembled_output_arguments_follow_the_contract() {
    let f = parse(SPADD);
    let a = Csr {
        m: 3,
        n: 4,
        indptr: vec![0, 2, 2, 3],
        indices: vec![1, 3, 0],
        vals: vec![1.0, 2.0, 3.0],
    };
    let b = Csr {
        m: 3,
        n: 4,
        indptr: vec![0, 1, 1, 3],
        indices: vec![0, 0, 2],
        vals: vec![10.0, 20.0, 30.0],
    };
    let want = |args: &HashMap<String, ArgValue>| {
        assert_eq!(args["c_indptr"], i32_arr(&[0, 3, 3, 5]));
        assert_eq!(args["c_indices"], i32_arr(&[0, 1, 3, 0, 2]));
        assert_eq!(args["c"], f32_arr(&[10.0, 1.0, 2.0, 23.0, 30.0]));
        assert_eq!(args["nnz_c"], ArgValue::Int(5));
    };
    // Omitted.
    let mut args = elementwise_args(&a, &b);
    eval_func(&f, &mut args).unwrap();
    want(&args);
    // Given, wrong in every way: ignored and replaced.
    let mut args = elementwise_args(&a, &b);
    args.insert("c_indptr".into(), f32_arr(&[1.5]));
    args.insert("c_indices".into(), ArgValue::Int(3));
    args.insert("c".into(), i32_arr(&[7, 7, 7, 7, 7, 7, 7]));
    args.insert("nnz_c".into(), ArgValue::Float(-1.0));
    eval_func(&f, &mut args).unwrap();
    want(&args);
    // The rest of the arguments are untouched.
    let before = elementwise_args(&a, &b);
    for (k, v) in &before {
        assert_eq!(&args[k], v, "`{k}` unchanged");
    }
    assert_eq!(args.len(), before.len() + 4);
}

/// An empty result still writes all four parameters.
#[test]
fn assembled_output_of_nothing() {
    let f = parse(SPMUL);
    let mut rng = Lcg(7);
    let a = Csr::random(&mut rng, 3, 4, 0, &[]);
    let b = Csr::random(&mut rng, 3, 4, 100, &[]);
    let mut args = elementwise_args(&a, &b);
    eval_func(&f, &mut args).unwrap();
    assert_eq!(args["c_indptr"], i32_arr(&[0, 0, 0, 0]));
    assert_eq!(args["c_indices"], i32_arr(&[]));
    assert_eq!(args["c"], f32_arr(&[]));
    assert_eq!(args["nnz_c"], ArgValue::Int(0));
}

fn eval_err(f: &PrimFunc, args: &HashMap<String, ArgValue>) -> String {
    let mut after = args.clone();
    let e = eval_func(f, &mut after).expect_err("evaluation fails");
    assert_eq!(&after, args, "arguments unchanged on error");
    e.message
}

#[test]
fn unsorted_operand_indices_are_an_error_naming_the_array() {
    let a = Csr {
        m: 2,
        n: 4,
        indptr: vec![0, 2, 4],
        indices: vec![0, 2, 3, 1],
        vals: vec![1.0; 4],
    };
    let b = Csr {
        m: 2,
        n: 4,
        indptr: vec![0, 1, 2],
        indices: vec![1, 2],
        vals: vec![1.0; 2],
    };
    for src in [SPADD, SPMUL] {
        let f = parse(src);
        let msg = eval_err(&f, &elementwise_args(&a, &b));
        assert!(msg.contains("a_indices"), "{msg}");
        assert!(msg.contains("a_indices[3] = 1"), "{msg}");
        // Operands swapped: B is the unsorted one.
        let msg = eval_err(&f, &elementwise_args(&b, &a));
        assert!(msg.contains("b_indices"), "{msg}");
    }
    // A duplicate coordinate in a fiber.
    let dup = Csr {
        indices: vec![1, 1, 2, 3],
        ..a.clone()
    };
    let msg = eval_err(&parse(SPADD), &elementwise_args(&dup, &b));
    assert!(msg.contains("a_indices[1] = 1"), "{msg}");
    // The mask of masked_spgemm (co-iterated with B's rows).
    let f = parse(MASKED_SPGEMM);
    let mut args = HashMap::new();
    args.insert("m".to_string(), int(2));
    args.insert("k".to_string(), int(4));
    args.insert("n".to_string(), int(4));
    operand(&mut args, "a", "a", &b);
    let bb = Csr {
        m: 4,
        n: 4,
        indptr: vec![0, 1, 2, 3, 4],
        indices: vec![0, 1, 2, 3],
        vals: vec![1.0; 4],
    };
    operand(&mut args, "b", "b", &bb);
    operand(&mut args, "m", "mask", &a);
    args.insert("c".to_string(), f32_arr(&[0.0; 4]));
    let msg = eval_err(&f, &args);
    assert!(msg.contains("m_indices"), "{msg}");
}

#[test]
fn assembled_nnz_must_be_a_plain_parameter() {
    let mut f = parse(SPADD);
    let jc = f
        .axes
        .iter()
        .find(|(_, a)| a.name == "JC")
        .map(|(h, _)| h)
        .unwrap();
    let nnz = f.axes[jc].nnz.clone().unwrap();
    f.axes[jc].nnz = Some(Expr::Binary(
        sparsetir_ir::BinOp::Add,
        Box::new(nnz),
        Box::new(Expr::Int(0, DType::I32)),
    ));
    let a = Csr::random(&mut Lcg(1), 2, 2, 50, &[]);
    let mut args = elementwise_args(&a, &a);
    args.insert("nnz_c".into(), ArgValue::Int(0));
    let msg = eval_err(&f, &args);
    assert!(msg.contains("JC"), "{msg}");
    assert!(
        msg.contains("nnz must be a plain integer scalar parameter"),
        "{msg}"
    );
}

#[test]
fn assembled_axis_cannot_be_iterated() {
    let src = SPADD.replace("[I, T.sp.union(JA, JB)]", "[I, JC]");
    let f = parse(&src);
    let a = Csr::random(&mut Lcg(2), 2, 2, 50, &[]);
    let msg = eval_err(&f, &elementwise_args(&a, &a));
    assert!(
        msg.contains("assembled axis `JC` cannot be iterated"),
        "{msg}"
    );
}

#[test]
fn assembled_axis_must_be_the_last_buffer_axis() {
    let src = SPADD
        .replace(
            "    A = T.sp.match_buffer",
            "    L = T.sp.dense_fixed(n)\n    A = T.sp.match_buffer",
        )
        .replace("(c, (I, JC)", "(c, (I, JC, L)")
        .replace("C[i, j] = ", "C[i, j, 0] = ");
    let f = parse(&src);
    let a = Csr::random(&mut Lcg(3), 2, 2, 50, &[]);
    let msg = eval_err(&f, &elementwise_args(&a, &a));
    assert!(msg.contains("must be the buffer's last axis"), "{msg}");
}

/// nnz beyond what the axis idtype holds (int8 here, so that the case is small).
#[test]
fn assembled_nnz_must_fit_the_idtype() {
    let src = SPADD.replace("assembled=True", "idtype=\"int8\", assembled=True");
    let f = parse(&src);
    let a = Csr::random(&mut Lcg(4), 1, 100, 100, &[]);
    let b = Csr::random(&mut Lcg(5), 1, 100, 0, &[]);
    // 100 elements fit int8.
    let mut args = elementwise_args(&a, &b);
    eval_func(&f, &mut args).unwrap();
    assert_eq!(args["nnz_c"], ArgValue::Int(100));
    match &args["c_indices"] {
        ArgValue::Array(t) => assert_eq!(t.dtype(), DType::I8),
        other => panic!("{other:?}"),
    }
    let a = Csr::random(&mut Lcg(4), 2, 100, 100, &[]);
    let b = Csr::random(&mut Lcg(5), 2, 100, 0, &[]);
    let msg = eval_err(&f, &elementwise_args(&a, &b));
    assert!(
        msg.contains("output has 200 stored elements, more than int8 offsets can hold"),
        "{msg}"
    );
}

// ------------------------------------------------------------------------------------ init

/// A reduction over a union with an init: `y[i] = Σ_{j ∈ A_i ∪ B_i} (A[i, j] + 2 B[i, j])`,
/// an empty row giving the init value.
const UNION_ROWSUM: &str = r#"
@T.prim_func
def union_rowsum(
    a: T.handle,
    b: T.handle,
    y: T.handle,
    a_indptr: T.handle,
    a_indices: T.handle,
    b_indptr: T.handle,
    b_indices: T.handle,
    m: T.int32,
    n: T.int32,
    nnz_a: T.int32,
    nnz_b: T.int32,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    JA = T.sp.compressed_varied(I, (n, nnz_a), (a_indptr, a_indices))
    JB = T.sp.compressed_varied(I, (n, nnz_b), (b_indptr, b_indices))
    A = T.sp.match_buffer(a, (I, JA), "float32")
    B = T.sp.match_buffer(b, (I, JB), "float32")
    Y = T.sp.match_buffer(y, (I,), "float32")
    with T.sp.iteration([I, T.sp.union(JA, JB)], "SR", "rowsum") as [i, j]:
        with T.init():
            Y[i] = T.float32(-1)
        Y[i] = Y[i] + A[i, j] + T.float32(2) * B[i, j]
"#;

#[test]
fn union_reduction_runs_its_init_per_row() {
    let f = parse(UNION_ROWSUM);
    let mut rng = Lcg(0x5eed_1417);
    for (a, b) in elementwise_cases(&mut rng) {
        let mut args = elementwise_args(&a, &b);
        args.insert("y".to_string(), f32_arr(&vec![55.0; a.m]));
        eval_func(&f, &mut args).unwrap();
        let (da, db) = (a.dense(), b.dense());
        let want: Vec<f32> = (0..a.m)
            .map(|i| {
                let mut s = -1.0f32;
                for j in 0..a.n {
                    if da[i][j].is_some() || db[i][j].is_some() {
                        s = s + da[i][j].unwrap_or(0.0) + 2.0 * db[i][j].unwrap_or(0.0);
                    }
                }
                s
            })
            .collect();
        assert_eq!(args["y"], f32_arr(&want), "{}×{}", a.m, a.n);
    }
}
