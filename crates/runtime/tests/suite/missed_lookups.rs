//! Coordinates a binary search does not find (SPEC §2.3: a read of an absent coordinate gives
//! the default value), where the miss feeds a further lookup: a search whose prefix is a missed
//! search, and a gather whose coordinate is read through a missed search. Found by the
//! differential fuzzer (`sparsetir-fuzz --target diff`); checked on every backend against a
//! dense computation in the test.

use std::collections::HashMap;

use sparsetir_ir::PrimFunc;

use crate::common;
use common::backends::{self, Backends};
use common::{f32s, i32s, int, Args};

fn parse(src: &str) -> PrimFunc {
    sparsetir_syntax::parse_func(src).unwrap_or_else(|e| panic!("parses: {e:?}\n{src}"))
}

fn check_everywhere(what: &str, src: &str, args: &Args, out: &str, want: &[f64]) {
    let on = Backends {
        cache: "missed-lookups-cache",
        schedule: None,
        emulator: true,
    };
    backends::check_everywhere(what, &parse(src), &on, args, out, want);
}

const CSF_SHIFTED: &str = r#"
@T.prim_func
def csf_shifted(
    a: T.handle,
    b: T.handle,
    indptr_j: T.handle,
    indices_j: T.handle,
    indptr_k: T.handle,
    indices_k: T.handle,
    m: T.int32,
    n: T.int32,
    p: T.int32,
    nnz_j: T.int32,
    nnz_k: T.int32,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz_j), (indptr_j, indices_j), "int32")
    K = T.sp.compressed_varied(J, (p, nnz_k), (indptr_k, indices_k), "int32")
    A = T.sp.match_buffer(a, (I, J, K), "float32")
    B = T.sp.match_buffer(b, (I,), "float32")
    with T.sp.iteration([I, J, K], "SRR", "csf_shifted") as [i, j, k]:
        with T.init():
            B[i] = T.float32(0)
        B[i] = B[i] + A[i, j - 1, k] * A[i, j, k]
"#;

/// `B[i] = sum A[i, j - 1, k] A[i, j, k]`: where `(i, j - 1)` is not stored, the search for
/// `k` under it must miss too (it read the row pointers at position -1).
#[test]
fn a_lookup_under_a_missed_lookup_misses() {
    // Row 0: j = 0 {k 0, 2}, j = 1 {k 1, 2}, j = 3 {k 2}; row 1: j = 1 {k 0}, j = 2 {k 0, 1}.
    let fibers: Vec<Vec<(i32, Vec<i32>)>> = vec![
        vec![(0, vec![0, 2]), (1, vec![1, 2]), (3, vec![2])],
        vec![(1, vec![0]), (2, vec![0, 1])],
    ];
    let (mut indptr_j, mut indices_j, mut indptr_k, mut indices_k) =
        (vec![0], Vec::new(), vec![0], Vec::new());
    let mut stored: HashMap<(usize, i32, i32), f32> = HashMap::new();
    let mut values = Vec::new();
    for (i, row) in fibers.iter().enumerate() {
        for (j, ks) in row {
            indices_j.push(*j);
            for k in ks {
                indices_k.push(*k);
                let v = 1.0 + values.len() as f32 * 0.5;
                values.push(v);
                stored.insert((i, *j, *k), v);
            }
            indptr_k.push(indices_k.len() as i32);
        }
        indptr_j.push(indices_j.len() as i32);
    }
    let at = |i: usize, j: i32, k: i32| f64::from(stored.get(&(i, j, k)).copied().unwrap_or(0.0));
    let want: Vec<f64> = (0..fibers.len())
        .map(|i| {
            let mut s = 0.0;
            for (j, ks) in &fibers[i] {
                for k in ks {
                    s += at(i, j - 1, *k) * at(i, *j, *k);
                }
            }
            s
        })
        .collect();
    assert!(
        want.iter().any(|w| *w != 0.0),
        "the case reads stored elements: {want:?}"
    );
    let mut a = Args::new();
    a.insert("m".into(), int(fibers.len()));
    a.insert("n".into(), int(4));
    a.insert("p".into(), int(3));
    a.insert("nnz_j".into(), int(indices_j.len()));
    a.insert("nnz_k".into(), int(indices_k.len()));
    a.insert("indptr_j".into(), i32s(&indptr_j));
    a.insert("indices_j".into(), i32s(&indices_j));
    a.insert("indptr_k".into(), i32s(&indptr_k));
    a.insert("indices_k".into(), i32s(&indices_k));
    a.insert("a".into(), f32s(vec![values.len()], values));
    a.insert(
        "b".into(),
        f32s(vec![fibers.len()], vec![7.0; fibers.len()]),
    );
    check_everywhere("A[i, j - 1, k] A[i, j, k]", CSF_SHIFTED, &a, "b", &want);
}

const GATHER_THROUGH_MISS: &str = r#"
@T.prim_func
def gather(
    e: T.handle,
    w: T.handle,
    x: T.handle,
    y: T.handle,
    indptr: T.handle,
    indices: T.handle,
    m: T.int32,
    n: T.int32,
    nnz: T.int32,
    r: T.int32,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices), "int32")
    J_detach = T.sp.dense_fixed(n)
    R = T.sp.dense_fixed(r)
    E = T.sp.match_buffer(e, (I, J), "int32")
    W = T.sp.match_buffer(w, (R,), "float32")
    X = T.sp.match_buffer(x, (J_detach,), "float32")
    Y = T.sp.match_buffer(y, (I,), "float32")
    with T.sp.iteration([I, J], "SR", "gather") as [i, j]:
        with T.init():
            Y[i] = T.float32(0)
        Y[i] = Y[i] + W[E[i + 1, j]] * X[j]
"#;

/// `Y[i] = sum W[E[i + 1, j]] X[j]`: where row `i + 1` does not store `j` (or does not exist),
/// `E` reads its default 0 and `W[0]` is read; the whole product used to read as 0.
#[test]
fn a_gather_through_a_missed_lookup_reads_at_the_default_coordinate() {
    let rows: Vec<Vec<i32>> = vec![vec![0, 2, 4], vec![1, 2], vec![], vec![0, 3, 4]];
    let (n, r) = (5usize, 3usize);
    let mut indptr = vec![0];
    let mut indices = Vec::new();
    let mut etype = Vec::new();
    for row in &rows {
        for j in row {
            indices.push(*j);
            etype.push(1 + (indices.len() as i32) % 2);
        }
        indptr.push(indices.len() as i32);
    }
    let w = vec![0.5f32, 2.0, -3.0];
    let x: Vec<f32> = (0..n).map(|j| 1.0 + j as f32).collect();
    let e_at = |i: usize, j: i32| -> usize {
        let Some(row) = rows.get(i) else { return 0 };
        row.iter()
            .position(|c| *c == j)
            .map_or(0, |p| etype[indptr[i] as usize + p] as usize)
    };
    let want: Vec<f64> = (0..rows.len())
        .map(|i| {
            rows[i]
                .iter()
                .map(|j| f64::from(w[e_at(i + 1, *j)]) * f64::from(x[*j as usize]))
                .sum()
        })
        .collect();
    let mut a = Args::new();
    a.insert("m".into(), int(rows.len()));
    a.insert("n".into(), int(n));
    a.insert("r".into(), int(r));
    a.insert("nnz".into(), int(indices.len()));
    a.insert("indptr".into(), i32s(&indptr));
    a.insert("indices".into(), i32s(&indices));
    a.insert("e".into(), i32s(&etype));
    a.insert("w".into(), f32s(vec![r], w.clone()));
    a.insert("x".into(), f32s(vec![n], x.clone()));
    a.insert("y".into(), f32s(vec![rows.len()], vec![7.0; rows.len()]));
    check_everywhere("W[E[i + 1, j]] X[j]", GATHER_THROUGH_MISS, &a, "y", &want);
}

const SPADD_DIAGONAL: &str = r#"
@T.prim_func
def spadd_diagonal(
    a: T.handle,
    b: T.handle,
    c: T.handle,
    a_indptr: T.handle,
    a_indices: T.handle,
    b_indptr: T.handle,
    b_indices: T.handle,
    c_indptr: T.handle,
    c_indices: T.handle,
    m: T.int32,
    n: T.int32,
    nnz_a: T.int32,
    nnz_b: T.int32,
    nnz_c: T.int32,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    JA = T.sp.compressed_varied(I, (n, nnz_a), (a_indptr, a_indices))
    JB = T.sp.compressed_varied(I, (n, nnz_b), (b_indptr, b_indices))
    JC = T.sp.compressed_varied(I, (n, nnz_c), (c_indptr, c_indices), assembled=True)
    A = T.sp.match_buffer(a, (I, JA), "float32")
    B = T.sp.match_buffer(b, (I, JB), "float32")
    C = T.sp.match_buffer(c, (I, JC), "float32")
    with T.sp.iteration([I, T.sp.union(JA, JB)], "SS", "spadd") as [i, j]:
        C[i, j] = A[i, j] + B[i, i]
"#;

/// An assembled output's value reading through a lookup (`B[i, i]`, the diagonal, absent in
/// some rows): the default where it misses, in every assembly phase (its reads went unguarded).
#[test]
fn an_assembled_value_through_a_missed_lookup_reads_the_default() {
    use sparsetir_runtime::assembly::{run_interp, AssembledKernel};
    let a_rows: Vec<Vec<i32>> = vec![vec![0, 2], vec![], vec![1, 3], vec![0]];
    let b_rows: Vec<Vec<i32>> = vec![vec![0, 1], vec![1], vec![3], vec![]];
    let (m, n) = (4usize, 4usize);
    let mut args = Args::new();
    let mut dense_a = vec![vec![None; n]; m];
    let mut dense_b = vec![vec![None; n]; m];
    for (name, rows, dense) in [("a", &a_rows, &mut dense_a), ("b", &b_rows, &mut dense_b)] {
        let mut indptr = vec![0];
        let (mut indices, mut vals) = (Vec::new(), Vec::new());
        for (i, row) in rows.iter().enumerate() {
            for &j in row {
                let v =
                    1.0 + (i * n + j as usize) as f32 * 0.25 + if name == "b" { 10.0 } else { 0.0 };
                indices.push(j);
                vals.push(v);
                dense[i][j as usize] = Some(f64::from(v));
            }
            indptr.push(indices.len() as i32);
        }
        args.insert(format!("nnz_{name}"), int(indices.len()));
        args.insert(format!("{name}_indptr"), i32s(&indptr));
        args.insert(format!("{name}_indices"), i32s(&indices));
        args.insert(name.into(), f32s(vec![vals.len()], vals));
    }
    args.insert("m".into(), int(m));
    args.insert("n".into(), int(n));
    let mut want = Vec::new();
    for i in 0..m {
        for j in 0..n {
            if dense_a[i][j].is_some() || dense_b[i][j].is_some() {
                want.push(dense_a[i][j].unwrap_or(0.0) + dense_b[i][i].unwrap_or(0.0));
            }
        }
    }
    let f = parse(SPADD_DIAGONAL);
    let check = |what: &str, got: &Args| {
        assert_eq!(common::f64s(got, "c"), want, "{what}");
    };
    let mut e = args.clone();
    sparsetir_eval::eval_func(&f, &mut e).expect("evaluates");
    check("evaluator", &e);
    let mut i = args.clone();
    run_interp(&f, &mut i).expect("interprets");
    check("interpreter", &i);
    if common::have_cc() {
        let k = AssembledKernel::build(&f, None, &[], &common::opts("missed-lookups-cache"))
            .expect("builds");
        let mut c = args.clone();
        k.run(&mut c).expect("runs");
        check("C", &c);
    }
}

/// A lookup inside a co-iteration over an attached axis (`M[i_1 % 2, j_1]` in masked SpGEMM's
/// `intersect(attach(JB, KA), JM)`) is refused as unsupported, as inside a plain attached
/// iteration; it used to build a search buffer over axes out of order (an internal error).
#[test]
fn a_lookup_inside_an_attached_co_iteration_is_unsupported() {
    let src = sparsetir_ops::get("masked_spgemm").expect("catalog").source;
    let src = src.replace("M[i_1, j_1]", "M[i_1 % 2, j_1]");
    assert!(src.contains("M[i_1 % 2, j_1]"), "{src}");
    let f = parse(&src);
    let e = sparsetir_runtime::build::schedule_and_lower(&f, None, &[]).expect_err("refused");
    let msg = e.to_string();
    assert!(
        msg.contains("attached iteration") && !msg.contains("internal"),
        "{msg}"
    );
}
