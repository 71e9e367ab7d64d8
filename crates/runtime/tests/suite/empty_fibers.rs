//! Reductions over empty fibers give their init value (SPEC §2.3), on every backend: the
//! stage-I evaluator, the stage II and stage III interpreters, and the C backend with and
//! without the default schedules. Outputs start at a sentinel, so "kept its old value" and
//! "got its init" differ; every result is checked against a dense computation in the test.

use sparsetir_eval::eval_func;
use sparsetir_ir::PrimFunc;
use sparsetir_runtime::build::schedule_and_lower;

use crate::common;
use common::backends::{self, Backends};
use common::{f32s, i32s, int, Args};

const CACHE: &str = "empty-fibers-cache";
/// What every output holds before a run.
const SENTINEL: f32 = 7.0;

fn parse(src: &str) -> PrimFunc {
    sparsetir_syntax::parse_func(src).unwrap_or_else(|e| panic!("parses: {e:?}\n{src}"))
}

/// A CSR matrix with empty rows (first, middle and last), a full row and row 0 storing
/// column 0; dense copy alongside.
struct Matrix {
    m: usize,
    n: usize,
    indptr: Vec<i32>,
    indices: Vec<i32>,
    vals: Vec<f32>,
}

impl Matrix {
    fn new() -> Matrix {
        // Rows: 0 empty, 1 {0, 3}, 2 empty, 3 full, 4 {5}, 5 empty.
        let rows: Vec<Vec<usize>> = vec![
            vec![],
            vec![0, 3],
            vec![],
            (0..6).collect(),
            vec![5],
            vec![],
        ];
        let mut indptr = vec![0i32];
        let mut indices = Vec::new();
        let mut vals = Vec::new();
        for (i, r) in rows.iter().enumerate() {
            for &j in r {
                indices.push(j as i32);
                // Distinct, never zero, both signs.
                vals.push(((i * 7 + j * 3) % 11) as f32 * 0.5 - 2.25);
            }
            indptr.push(indices.len() as i32);
        }
        Matrix {
            m: rows.len(),
            n: 6,
            indptr,
            indices,
            vals,
        }
    }

    fn row(&self, i: usize) -> impl Iterator<Item = (usize, f64)> + '_ {
        let (lo, hi) = (self.indptr[i] as usize, self.indptr[i + 1] as usize);
        (lo..hi).map(|p| (self.indices[p] as usize, f64::from(self.vals[p])))
    }

    fn nnz(&self) -> usize {
        self.vals.len()
    }

    fn csr_args(&self) -> Args {
        let mut a = Args::new();
        a.insert("m".into(), int(self.m));
        a.insert("n".into(), int(self.n));
        a.insert("nnz".into(), int(self.nnz()));
        a.insert("indptr".into(), i32s(&self.indptr));
        a.insert("indices".into(), i32s(&self.indices));
        a.insert("a".into(), f32s(vec![self.nnz()], self.vals.clone()));
        a
    }
}

/// Runs `f` on `args` with every backend (evaluator, stage II and III interpreters, C with the
/// given schedule and without) and checks output `out` against `want` each time.
fn check_everywhere(
    what: &str,
    f: &PrimFunc,
    schedule: Option<&str>,
    args: &Args,
    out: &str,
    want: &[f64],
) {
    let on = Backends {
        cache: CACHE,
        schedule,
        emulator: false,
    };
    backends::check_everywhere(what, f, &on, args, out, want);
}

const ROW_MAX: &str = r#"
@T.prim_func
def row_max(a: T.handle, y: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices), "int32")
    A = T.sp.match_buffer(a, (I, J), "float32")
    Y = T.sp.match_buffer(y, (I,), "float32")
    with T.sp.iteration([I, J], "SR", "row_max") as [i, j]:
        with T.init():
            Y[i] = T.float32(-1e30)
        Y[i] = T.max(Y[i], A[i, j])
"#;

#[test]
fn row_max_of_an_empty_row_is_its_init() {
    let mat = Matrix::new();
    let f = parse(ROW_MAX);
    let mut args = mat.csr_args();
    args.insert("y".into(), f32s(vec![mat.m], vec![SENTINEL; mat.m]));
    let want: Vec<f64> = (0..mat.m)
        .map(|i| mat.row(i).map(|(_, v)| v).fold(-1e30f32 as f64, f64::max))
        .collect();
    assert_eq!(want[0], -1e30f32 as f64, "row 0 is empty");
    check_everywhere("row max", &f, None, &args, "y", &want);
}

const BIAS_SPMV: &str = r#"
@T.prim_func
def bias_spmv(a: T.handle, x: T.handle, z: T.handle, y: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices), "int32")
    J_detach = T.sp.dense_fixed(n)
    A = T.sp.match_buffer(a, (I, J), "float32")
    X = T.sp.match_buffer(x, (J_detach,), "float32")
    Z = T.sp.match_buffer(z, (I,), "float32")
    Y = T.sp.match_buffer(y, (I,), "float32")
    with T.sp.iteration([I, J], "SR", "bias_spmv") as [i, j]:
        with T.init():
            Y[i] = T.float32(2) * Z[i]
        Y[i] = Y[i] + A[i, j] * X[j]
"#;

/// `y = 2 z + A x`, with the spmv default schedule's shape (rows in parallel, a local sum).
const BIAS_SPMV_SCHEDULE: &str = r#"
# stage III
b0 = sch.get_block("bias_spmv0")
l0, = sch.get_loops(b0)
sch.parallel(l0)
b1 = sch.get_block("bias_spmv1")
c0 = sch.reverse_cache_write(b1, 0, "local")
"#;

#[test]
fn bias_plus_spmv_gives_the_bias_on_empty_rows() {
    let mat = Matrix::new();
    let f = parse(BIAS_SPMV);
    let x: Vec<f32> = (0..mat.n).map(|j| 1.0 + j as f32 * 0.25).collect();
    let z: Vec<f32> = (0..mat.m).map(|i| i as f32 - 2.5).collect();
    let mut args = mat.csr_args();
    args.insert("x".into(), f32s(vec![mat.n], x.clone()));
    args.insert("z".into(), f32s(vec![mat.m], z.clone()));
    args.insert("y".into(), f32s(vec![mat.m], vec![SENTINEL; mat.m]));
    let want: Vec<f64> = (0..mat.m)
        .map(|i| 2.0 * f64::from(z[i]) + mat.row(i).map(|(j, v)| v * f64::from(x[j])).sum::<f64>())
        .collect();
    check_everywhere(
        "bias + spmv",
        &f,
        Some(BIAS_SPMV_SCHEDULE),
        &args,
        "y",
        &want,
    );
}

#[test]
fn catalog_spmv_and_csrmm_reset_empty_rows() {
    let mat = Matrix::new();
    let x: Vec<f32> = (0..mat.n).map(|j| 0.5 - j as f32 * 0.75).collect();
    let mut args = mat.csr_args();
    args.insert("x".into(), f32s(vec![mat.n], x.clone()));
    args.insert("y".into(), f32s(vec![mat.m], vec![SENTINEL; mat.m]));
    let want: Vec<f64> = (0..mat.m)
        .map(|i| mat.row(i).map(|(j, v)| v * f64::from(x[j])).sum())
        .collect();
    let spmv = sparsetir_ops::load("spmv").expect("catalog");
    check_everywhere(
        "spmv",
        &spmv,
        sparsetir_ops::cpu_schedule("spmv"),
        &args,
        "y",
        &want,
    );

    let k = 16;
    let b: Vec<f32> = (0..mat.n * k).map(|t| ((t * 5) % 9) as f32 - 4.0).collect();
    let mut args = mat.csr_args();
    args.insert("feat_size".into(), int(k));
    args.insert("b".into(), f32s(vec![mat.n, k], b.clone()));
    args.insert("c".into(), f32s(vec![mat.m, k], vec![SENTINEL; mat.m * k]));
    let mut want = vec![0.0; mat.m * k];
    for i in 0..mat.m {
        for (j, v) in mat.row(i) {
            for kk in 0..k {
                want[i * k + kk] += v * f64::from(b[j * k + kk]);
            }
        }
    }
    let csrmm = sparsetir_ops::load("csrmm").expect("catalog");
    check_everywhere(
        "csrmm",
        &csrmm,
        sparsetir_ops::cpu_schedule("csrmm"),
        &args,
        "c",
        &want,
    );
}

#[test]
fn segment_reductions_of_empty_segments() {
    // Ragged rows of lengths 2, 0, 3, 0, 1, 0 (dense_varied, at most 100 per row).
    let lens = [2usize, 0, 3, 0, 1, 0];
    let mut indptr = vec![0i32];
    for l in lens {
        indptr.push(indptr[indptr.len() - 1] + l as i32);
    }
    let nnz = indptr[lens.len()] as usize;
    let vals: Vec<f32> = (0..nnz).map(|t| (t as f32 - 2.5) * 1.5).collect();
    let m = lens.len();
    let seg = |i: usize| &vals[indptr[i] as usize..indptr[i + 1] as usize];
    type Reduce = fn(&[f32]) -> f64;
    let cases: [(&str, Reduce); 4] = [
        ("segment_sum", |s| s.iter().map(|v| f64::from(*v)).sum()),
        ("segment_max", |s| {
            s.iter()
                .map(|v| f64::from(*v))
                .fold(f64::from(f32::MIN), f64::max)
        }),
        ("segment_min", |s| {
            s.iter()
                .map(|v| f64::from(*v))
                .fold(f64::from(f32::MAX), f64::min)
        }),
        ("segment_mean", |s| {
            s.iter().map(|v| f64::from(*v)).sum::<f64>() / s.len().max(1) as f64
        }),
    ];
    for (kernel, reduce) in cases {
        let f = sparsetir_ops::load(kernel).expect("catalog");
        let mut args = Args::new();
        args.insert("m".into(), int(m));
        args.insert("nnz".into(), int(nnz));
        args.insert("indptr".into(), i32s(&indptr));
        args.insert("a".into(), f32s(vec![nnz], vals.clone()));
        args.insert("b".into(), f32s(vec![m], vec![SENTINEL; m]));
        let want: Vec<f64> = (0..m).map(|i| reduce(seg(i))).collect();
        check_everywhere(
            kernel,
            &f,
            sparsetir_ops::cpu_schedule(kernel),
            &args,
            "b",
            &want,
        );
    }
}

#[test]
fn softmax_with_empty_rows() {
    let mat = Matrix::new();
    let f = sparsetir_ops::load("sparse_softmax").expect("catalog");
    let mut args = mat.csr_args();
    args.insert("b".into(), f32s(vec![mat.nnz()], vec![SENTINEL; mat.nnz()]));
    let mut want = vec![0.0; mat.nnz()];
    for i in 0..mat.m {
        let row: Vec<(usize, f64)> = mat.row(i).collect();
        let mx = row
            .iter()
            .map(|(_, v)| *v)
            .fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = row.iter().map(|(_, v)| (v - mx).exp()).sum();
        for (t, (_, v)) in row.iter().enumerate() {
            want[mat.indptr[i] as usize + t] = (v - mx).exp() / sum;
        }
    }
    check_everywhere(
        "sparse softmax",
        &f,
        sparsetir_ops::cpu_schedule("sparse_softmax"),
        &args,
        "b",
        &want,
    );
}

#[test]
fn bsr_block_rows_without_blocks_are_zeroed() {
    // 4 block rows of 2x2 blocks over 3 block columns; block rows 0 and 2 hold no block.
    let (nb, mb, blk, feat) = (4usize, 3usize, 2usize, 3usize);
    let block_rows: Vec<Vec<usize>> = vec![vec![], vec![0, 2], vec![], vec![1]];
    let mut indptr = vec![0i32];
    let mut indices = Vec::new();
    for r in &block_rows {
        indices.extend(r.iter().map(|c| *c as i32));
        indptr.push(indices.len() as i32);
    }
    let nnzb = indices.len();
    let a: Vec<f32> = (0..nnzb * blk * blk)
        .map(|t| (t % 7) as f32 - 3.0)
        .collect();
    let b: Vec<f32> = (0..mb * blk * feat)
        .map(|t| (t % 5) as f32 * 0.5 - 1.0)
        .collect();
    let f = sparsetir_ops::load("bsrmm").expect("catalog");
    let mut args = Args::new();
    for (p, v) in [
        ("nb", nb),
        ("mb", mb),
        ("nnzb", nnzb),
        ("blk", blk),
        ("feat_size", feat),
    ] {
        args.insert(p.into(), int(v));
    }
    args.insert("indptr".into(), i32s(&indptr));
    args.insert("indices".into(), i32s(&indices));
    args.insert("a".into(), f32s(vec![nnzb, blk, blk], a.clone()));
    args.insert("b".into(), f32s(vec![mb, blk, feat], b.clone()));
    args.insert(
        "c".into(),
        f32s(vec![nb, blk, feat], vec![SENTINEL; nb * blk * feat]),
    );
    let mut want = vec![0.0; nb * blk * feat];
    for (i, r) in block_rows.iter().enumerate() {
        for (t, &jb) in r.iter().enumerate() {
            let p = indptr[i] as usize + t;
            for bi in 0..blk {
                for bj in 0..blk {
                    for ff in 0..feat {
                        want[(i * blk + bi) * feat + ff] += f64::from(a[(p * blk + bi) * blk + bj])
                            * f64::from(b[(jb * blk + bj) * feat + ff]);
                    }
                }
            }
        }
    }
    check_everywhere(
        "bsrmm",
        &f,
        sparsetir_ops::cpu_schedule("bsrmm"),
        &args,
        "c",
        &want,
    );
    // The composable BSR schedule (block rows outermost: the block loop may be empty).
    let bsr_spmm = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../ops/schedules/bsr_spmm.sched"
    ))
    .expect("bsr_spmm schedule");
    check_everywhere(
        "bsrmm, bsr_spmm schedule",
        &f,
        Some(&bsr_spmm),
        &args,
        "c",
        &want,
    );
}

/// The evaluator and the verifier refuse an init whose spatial points depend on a reduction
/// iterator.
#[test]
fn init_under_a_reduction_fiber_is_refused() {
    let src = r#"
@T.prim_func
def bad(a: T.handle, c: T.handle, indptr: T.handle, indices: T.handle, indptr_k: T.handle, m: T.int32, n: T.int32, nnz: T.int32, nnz_k: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices), "int32")
    K = T.sp.dense_varied(J, (4, nnz_k), indptr_k, "int32")
    A = T.sp.match_buffer(a, (I, J, K), "float32")
    C = T.sp.match_buffer(c, (I, J, K), "float32")
    with T.sp.iteration([I, J, K], "SRS", "bad") as [i, j, k]:
        with T.init():
            C[i, j, k] = T.float32(0)
        C[i, j, k] = C[i, j, k] + A[i, j, k]
"#;
    let f = parse(src);
    let mut args = Args::new();
    for (p, v) in [("m", 1usize), ("n", 1), ("nnz", 1), ("nnz_k", 1)] {
        args.insert(p.into(), int(v));
    }
    args.insert("indptr".into(), i32s(&[0, 1]));
    args.insert("indices".into(), i32s(&[0]));
    args.insert("indptr_k".into(), i32s(&[0, 1]));
    args.insert("a".into(), f32s(vec![1], vec![1.0]));
    args.insert("c".into(), f32s(vec![1], vec![0.0]));
    let e = eval_func(&f, &mut args).expect_err("refused");
    assert!(
        e.to_string()
            .contains("walks a fiber of reduction iterator `j`"),
        "{e}"
    );
    // The verifier finds it up front (so `sparsetir check` does), and lowering, which
    // verifies its input, reports the same.
    let e = schedule_and_lower(&f, None, &[]).expect_err("lowering refuses it too");
    assert!(
        e.to_string()
            .contains("spatial iterator `k` walks a fiber of reduction iterator `j`"),
        "{e}"
    );
}

/// `Y[i] += A[i, j, k] * B[i, j]` over `T.sp.intersect(JA, JB)` and `K`, which hangs from `JA`:
/// under an intersection the coordinate is in every part, so `K` walks the fiber of its
/// element in `JA`. Some of those fibers are empty, some rows share no column.
const INTERSECT_CHILD: &str = r#"
@T.prim_func
def co(a: T.handle, b: T.handle, y: T.handle, ip_a: T.handle, ix_a: T.handle, ip_b: T.handle, ix_b: T.handle, ip_k: T.handle, m: T.int32, n: T.int32, nnz_a: T.int32, nnz_b: T.int32, nnz_k: T.int32) -> None:
    I = T.sp.dense_fixed(m)
    JA = T.sp.compressed_varied(I, (n, nnz_a), (ip_a, ix_a), "int32")
    JB = T.sp.compressed_varied(I, (n, nnz_b), (ip_b, ix_b), "int32")
    K = T.sp.dense_varied(JA, (4, nnz_k), ip_k, "int32")
    A = T.sp.match_buffer(a, (I, JA, K), "float32")
    B = T.sp.match_buffer(b, (I, JB), "float32")
    Y = T.sp.match_buffer(y, (I,), "float32")
    with T.sp.iteration([I, T.sp.intersect(JA, JB), K], "SRR", "co") as [i, j, k]:
        with T.init():
            Y[i] = T.float32(0)
        Y[i] = Y[i] + A[i, j, k] * B[i, j]
"#;

#[test]
fn an_intersection_hangs_child_axes_from_its_parts_elements() {
    let f = parse(INTERSECT_CHILD);
    // Rows of JA and JB (columns < 6), and K's fiber length under each element of JA.
    let ja: [&[i32]; 5] = [&[0, 2, 5], &[], &[1, 3], &[0, 1, 2, 3, 4, 5], &[4]];
    let jb: [&[i32]; 5] = [&[2, 5], &[1], &[0, 4], &[1, 3, 5], &[4]];
    let klen = [2, 0, 3, 1, 2, 0, 4, 1, 0, 3, 2, 1];
    let csr = |rows: &[&[i32]]| {
        let mut ip = vec![0i32];
        let mut ix = Vec::new();
        for r in rows {
            ix.extend_from_slice(r);
            ip.push(ix.len() as i32);
        }
        (ip, ix)
    };
    let (ip_a, ix_a) = csr(&ja);
    let (ip_b, ix_b) = csr(&jb);
    assert_eq!(klen.len(), ix_a.len());
    let mut ip_k = vec![0i32];
    for l in klen {
        ip_k.push(ip_k.last().unwrap() + l);
    }
    let nnz_k = *ip_k.last().unwrap() as usize;
    let a: Vec<f32> = (0..nnz_k).map(|q| 0.5 + q as f32 * 0.25).collect();
    let b: Vec<f32> = (0..ix_b.len()).map(|p| 1.0 + p as f32).collect();
    // The dense computation: for each column both rows hold, A's values under it times B's.
    let mut want = vec![0f64; ja.len()];
    for i in 0..ja.len() {
        for (pa, col) in (ip_a[i]..ip_a[i + 1]).zip(ja[i]) {
            if let Some(pb) = (ip_b[i]..ip_b[i + 1]).find(|&p| ix_b[p as usize] == *col) {
                for q in ip_k[pa as usize]..ip_k[pa as usize + 1] {
                    want[i] += a[q as usize] as f64 * b[pb as usize] as f64;
                }
            }
        }
    }
    assert!(want[1] == 0.0 && want[0] > 0.0 && want[3] > 0.0, "{want:?}");
    let mut args = Args::new();
    for (p, v) in [
        ("m", ja.len()),
        ("n", 6),
        ("nnz_a", ix_a.len()),
        ("nnz_b", ix_b.len()),
        ("nnz_k", nnz_k),
    ] {
        args.insert(p.into(), int(v));
    }
    for (p, v) in [
        ("ip_a", &ip_a),
        ("ix_a", &ix_a),
        ("ip_b", &ip_b),
        ("ix_b", &ix_b),
        ("ip_k", &ip_k),
    ] {
        args.insert(p.into(), i32s(v));
    }
    args.insert("a".into(), f32s(vec![nnz_k], a));
    args.insert("b".into(), f32s(vec![ix_b.len()], b));
    args.insert("y".into(), f32s(vec![ja.len()], vec![SENTINEL; ja.len()]));
    check_everywhere(
        "intersection with a child axis",
        &f,
        None,
        &args,
        "y",
        &want,
    );
    // Under a union the coordinate may be missing from JA: refused up front.
    let union = INTERSECT_CHILD.replace("T.sp.intersect(JA, JB)", "T.sp.union(JA, JB)");
    let errs = sparsetir_ir::verify_func(&parse(&union)).expect_err("refused");
    assert!(
        errs.iter().any(|e| e
            .message
            .contains("axis K hangs from axis JA, which T.sp.union")),
        "{errs:?}"
    );
}
