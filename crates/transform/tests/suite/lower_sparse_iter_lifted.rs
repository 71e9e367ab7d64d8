//! Tests of the `lower_sparse_iter` cases beyond the catalog: fuse of a three-axis CSF chain and
//! fuse whose first axis is not a root, search results in `if` conditions and `let` values under
//! `check_invalid_binary_search`, and the number of searches emitted for identical and different
//! lookups. Each lowered function is checked against the stage-I reference evaluator
//! (`sparsetir_eval::eval_func`) by the stage-II interpreter (`sparsetir_eval::run_func`) on
//! random data with empty rows and empty fibers.

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sparsetir_eval::{eval_func, run_func, ArgValue};
use sparsetir_formats::Tensor;
use sparsetir_ir::printer::print_func;
use sparsetir_ir::{verify_func, DType, PrimFunc, Stmt};
use sparsetir_transform::{lower_sparse_iter, LowerOptions};

type Args = HashMap<String, ArgValue>;

fn parse(src: &str) -> PrimFunc {
    match sparsetir_syntax::parse_func(src) {
        Ok(f) => f,
        Err(d) => panic!("parse failed: {d:?}"),
    }
}

fn lower(f: &PrimFunc, checked: bool) -> PrimFunc {
    let opts = LowerOptions {
        check_invalid_binary_search: checked,
        assembly: None,
    };
    let out = lower_sparse_iter(f, &opts).unwrap_or_else(|e| panic!("{}: {e}", f.name));
    if let Err(errs) = verify_func(&out) {
        panic!("stage II does not verify: {errs:?}\n{}", print_func(&out));
    }
    // The printed form parses back to an equal function.
    let text = print_func(&out);
    match sparsetir_syntax::parse_func(&text) {
        Ok(back) => assert!(
            sparsetir_ir::equal::func_eq(&out, &back),
            "round trip differs\n{text}\n---\n{}",
            print_func(&back)
        ),
        Err(d) => panic!("printed stage II does not parse: {d:?}\n{text}"),
    }
    out
}

fn i32s(v: &[i64]) -> ArgValue {
    ArgValue::Array(Tensor::from_i64(DType::I32, v).expect("int32 tensor"))
}

fn f32s(rng: &mut ChaCha8Rng, n: usize) -> ArgValue {
    let v: Vec<f64> = (0..n)
        .map(|_| rng.random_range(-2.0..2.0f64) as f32 as f64)
        .collect();
    ArgValue::Array(Tensor::from_f64(DType::F32, &v).expect("float tensor"))
}

fn close(a: &Tensor, b: &Tensor) -> bool {
    let (x, y) = (a.to_f64_vec(), b.to_f64_vec());
    x.len() == y.len()
        && x.iter()
            .zip(&y)
            .all(|(p, q)| (p - q).abs() <= 1e-5 * p.abs().max(q.abs()).max(1.0))
}

/// Runs `f` with the evaluator and `low` with the stage-II interpreter on `args`; every array
/// must agree.
fn agree(f: &PrimFunc, low: &PrimFunc, args: &Args, what: &str) {
    let mut want = args.clone();
    eval_func(f, &mut want).unwrap_or_else(|e| panic!("{what}: eval: {e}"));
    let mut got = args.clone();
    run_func(low, &mut got)
        .unwrap_or_else(|e| panic!("{what}: stage II: {e}\n{}", print_func(low)));
    for (name, w) in &want {
        if let (ArgValue::Array(w), Some(ArgValue::Array(g))) = (w, got.get(name)) {
            assert!(
                close(w, g),
                "{what}: `{name}` differs\nstage I : {:?}\nstage II: {:?}\n{}",
                w.to_f64_vec(),
                g.to_f64_vec(),
                print_func(low)
            );
        }
    }
}

// ------------------------------------------------------------------ CSF data

/// A 3-D CSF structure: rows of `j` coordinates, each `(i, j)` with its `k` coordinates.
struct Csf {
    m: usize,
    n: usize,
    p: usize,
    indptr_j: Vec<i64>,
    indices_j: Vec<i64>,
    indptr_k: Vec<i64>,
    indices_k: Vec<i64>,
}

/// `fibers[i]` lists `(j, ks)` in increasing `j`; `ks` increasing.
fn csf(n: usize, p: usize, fibers: &[Vec<(usize, Vec<usize>)>]) -> Csf {
    let mut c = Csf {
        m: fibers.len(),
        n,
        p,
        indptr_j: vec![0],
        indices_j: Vec::new(),
        indptr_k: vec![0],
        indices_k: Vec::new(),
    };
    for row in fibers {
        for (j, ks) in row {
            c.indices_j.push(*j as i64);
            c.indices_k.extend(ks.iter().map(|&k| k as i64));
            c.indptr_k.push(c.indices_k.len() as i64);
        }
        c.indptr_j.push(c.indices_j.len() as i64);
    }
    c
}

fn csf_cases(rng: &mut ChaCha8Rng) -> Vec<(&'static str, Csf)> {
    let mut random = |m: usize, n: usize, p: usize| {
        let rows: Vec<Vec<(usize, Vec<usize>)>> = (0..m)
            .map(|i| {
                if i % 3 == 1 {
                    return Vec::new();
                }
                let js: Vec<usize> = (0..n).filter(|_| rng.random_bool(0.5)).collect();
                js.into_iter()
                    .map(|j| {
                        // Some (i, j) hold no k at all.
                        let ks = if j % 4 == 2 {
                            Vec::new()
                        } else {
                            (0..p).filter(|_| rng.random_bool(0.5)).collect()
                        };
                        (j, ks)
                    })
                    .collect()
            })
            .collect();
        csf(n, p, &rows)
    };
    vec![
        ("random 6x5x4", random(6, 5, 4)),
        ("random 5x3x3", random(5, 3, 3)),
        (
            "single element",
            csf(2, 3, &[vec![], vec![(1, vec![2])], vec![]]),
        ),
        (
            "empty k fibers",
            csf(
                3,
                2,
                &[vec![(0, vec![]), (2, vec![0, 1])], vec![(1, vec![])]],
            ),
        ),
        (
            "full",
            csf(2, 2, &vec![vec![(0, vec![0, 1]), (1, vec![0, 1])]; 2]),
        ),
        ("nnz 0", csf(3, 3, &[vec![], vec![]])),
    ]
}

fn csf_args(c: &Csf, rng: &mut ChaCha8Rng) -> Args {
    let mut a: Args = HashMap::new();
    for (k, v) in [
        ("m", c.m),
        ("n", c.n),
        ("p", c.p),
        ("nnz_j", c.indices_j.len()),
        ("nnz_k", c.indices_k.len()),
    ] {
        a.insert(k.into(), ArgValue::Int(v as i64));
    }
    a.insert("indptr_j".into(), i32s(&c.indptr_j));
    a.insert("indices_j".into(), i32s(&c.indices_j));
    a.insert("indptr_k".into(), i32s(&c.indptr_k));
    a.insert("indices_k".into(), i32s(&c.indices_k));
    a.insert("a".into(), f32s(rng, c.indices_k.len()));
    a.insert("y".into(), f32s(rng, c.indices_k.len()));
    a.insert("b".into(), f32s(rng, c.m));
    a
}

const CSF_HEADER: &str = r#"
@T.prim_func
def NAME(a: T.handle, b: T.handle, y: T.handle, indptr_j: T.handle, indices_j: T.handle,
         indptr_k: T.handle, indices_k: T.handle, m: T.int32, n: T.int32, p: T.int32,
         nnz_j: T.int32, nnz_k: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz_j), (indptr_j, indices_j), "int32")
    K = T.sp.compressed_varied(J, (p, nnz_k), (indptr_k, indices_k), "int32")
    A = T.sp.match_buffer(a, (I, J, K), "float32")
    Y = T.sp.match_buffer(y, (I, J, K), "float32")
    B = T.sp.match_buffer(b, (I,), "float32")
"#;

fn csf_kernel(name: &str, body: &str) -> PrimFunc {
    parse(&format!("{}{body}", CSF_HEADER.replace("NAME", name)))
}

fn check_csf(f: &PrimFunc, seed: u64) {
    for checked in [false, true] {
        let low = lower(f, checked);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        for (case, c) in csf_cases(&mut rng) {
            let args = csf_args(&c, &mut rng);
            agree(
                f,
                &low,
                &args,
                &format!("{} ({case}, checked={checked})", f.name),
            );
        }
    }
}

fn count_blocks(f: &PrimFunc, prefix: &str) -> usize {
    let mut n = 0;
    f.body.visit(&mut |s| {
        if let Stmt::Block(b) = s {
            n += b.name.starts_with(prefix) as usize;
        }
    });
    n
}

/// `T.sp.fuse(I, J, K)`: one loop over nnz_k; `i` and `j` recovered by nested searches.
#[test]
fn fuse_of_a_csf_chain_agrees() {
    let spatial = csf_kernel(
        "fuse3_spatial",
        r#"
    with T.sp.iteration([T.sp.fuse(I, J, K)], "SSS", "fuse3") as [i, j, k]:
        Y[i, j, k] = A[i, j, k] * T.float32(2) + B[i] + T.cast(j * 10 + k, "float32")
"#,
    );
    let low = lower(&spatial, false);
    // One search nest (with its bisection loop) and one compute loop; no loop per axis.
    assert_eq!(count_blocks(&low, "binary_search_block_"), 1);
    assert_eq!(count_blocks(&low, "fuse3"), 1);
    let text = print_func(&low);
    assert!(text.contains("for i_j_k in T.serial(nnz_k):"), "{text}");
    check_csf(&spatial, 21);

    let reduce = csf_kernel(
        "fuse3_reduce",
        r#"
    with T.sp.iteration([T.sp.fuse(I, J, K)], "SRR", "fuse3") as [i, j, k]:
        with T.init():
            B[i] = T.float32(0)
        B[i] = B[i] + A[i, j, k] * A[i, j, k]
"#,
    );
    check_csf(&reduce, 22);
}

/// `[I, T.sp.fuse(J, K)]`: per row, one loop over the row's K elements.
#[test]
fn fuse_under_an_iterated_parent_agrees() {
    let f = csf_kernel(
        "fuse_jk",
        r#"
    with T.sp.iteration([I, T.sp.fuse(J, K)], "SRR", "fuse_jk") as [i, j, k]:
        with T.init():
            B[i] = T.float32(0)
        B[i] = B[i] + A[i, j, k] * T.cast(j + 2 * k, "float32")
"#,
    );
    let low = lower(&f, false);
    // Two blocks for the rows and the fused chain, and the init's own block before the chain
    // (a row without K elements still gets its init).
    assert_eq!(count_blocks(&low, "fuse_jk"), 3);
    check_csf(&f, 23);

    let spatial = csf_kernel(
        "fuse_jk_spatial",
        r#"
    with T.sp.iteration([I, T.sp.fuse(J, K)], "SSS", "fuse_jk") as [i, j, k]:
        Y[i, j, k] = A[i, j, k] + T.cast(i * 100 + j * 10 + k, "float32")
"#,
    );
    check_csf(&spatial, 24);
}

/// Chains the pass does not lower stay typed errors.
#[test]
fn fuse_of_a_fixed_tail_is_unsupported() {
    let src = r#"
@T.prim_func
def f(a: T.handle, indices: T.handle, m: T.int32, n: T.int32, c: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_fixed(I, (n, c), indices, "int32")
    A = T.sp.match_buffer(a, (I, J), "float32")
    with T.sp.iteration([T.sp.fuse(I, J)], "SS", "f") as [i, j]:
        A[i, j] = T.float32(1)
"#;
    let f = parse(src);
    match lower_sparse_iter(&f, &LowerOptions::default()) {
        Err(e @ sparsetir_transform::LowerError::Unsupported { .. }) => {
            assert!(e.message().contains("fuse"), "{e}")
        }
        other => panic!("expected an unsupported error, got {other:?}"),
    }
}

// ------------------------------------------------------------------ dense-J lookups

const DENSE_J_HEADER: &str = r#"
@T.prim_func
def NAME(a: T.handle, b: T.handle, c: T.handle, indptr: T.handle, indices: T.handle,
         m: T.int32, n: T.int32, feat_size: T.int32, nnz: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices), "int32")
    J_detach = T.sp.dense_fixed(n)
    K = T.sp.dense_fixed(feat_size)
    A = T.sp.match_buffer(a, (I, J), "float32")
    B = T.sp.match_buffer(b, (J_detach, K), "float32")
    C = T.sp.match_buffer(c, (I, K), "float32")
"#;

fn dense_j_kernel(name: &str, body: &str) -> PrimFunc {
    parse(&format!("{}{body}", DENSE_J_HEADER.replace("NAME", name)))
}

/// CSR cases: random with empty rows, a single row, full rows, nnz 0.
fn csr_cases(rng: &mut ChaCha8Rng) -> Vec<(usize, Vec<Vec<usize>>)> {
    let mut random = |m: usize, n: usize| -> (usize, Vec<Vec<usize>>) {
        let rows = (0..m)
            .map(|i| {
                if i % 3 == 1 {
                    Vec::new()
                } else {
                    (0..n).filter(|_| rng.random_bool(0.4)).collect()
                }
            })
            .collect();
        (n, rows)
    };
    vec![
        random(6, 7),
        random(4, 3),
        (5, vec![vec![0, 2, 4]]),
        (3, vec![vec![0, 1, 2]; 3]),
        (4, vec![Vec::new(); 3]),
    ]
}

fn csr_args(n: usize, rows: &[Vec<usize>], rng: &mut ChaCha8Rng) -> Args {
    let feat = 3usize;
    let mut indptr = vec![0i64];
    let mut indices = Vec::new();
    for r in rows {
        indices.extend(r.iter().map(|&j| j as i64));
        indptr.push(indices.len() as i64);
    }
    let mut a: Args = HashMap::new();
    for (k, v) in [
        ("m", rows.len()),
        ("n", n),
        ("feat_size", feat),
        ("nnz", indices.len()),
    ] {
        a.insert(k.into(), ArgValue::Int(v as i64));
    }
    a.insert("a".into(), f32s(rng, indices.len()));
    a.insert("b".into(), f32s(rng, n * feat));
    a.insert("c".into(), f32s(rng, rows.len() * feat));
    a.insert("indptr".into(), i32s(&indptr));
    a.insert("indices".into(), i32s(&indices));
    a
}

fn check_dense_j(f: &PrimFunc, low: &PrimFunc, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for (n, rows) in csr_cases(&mut rng) {
        let args = csr_args(n, &rows, &mut rng);
        agree(f, low, &args, &format!("{} ({}x{n})", f.name, rows.len()));
    }
}

fn mids(f: &PrimFunc) -> usize {
    f.buffers
        .iter()
        .filter(|(_, b)| b.name.starts_with("mid_"))
        .count()
}

/// `A[i, j] * A[i, j]` looks the same coordinate up twice: one search; `A[i, j]` and
/// `A[i, n - 1 - j]` are two different lookups: two searches.
#[test]
fn one_search_per_distinct_lookup() {
    let same = dense_j_kernel(
        "same",
        r#"
    with T.sp.iteration([I, J_detach, K], "SRS", "csrmm") as [i, j, k]:
        with T.init():
            C[i, k] = T.float32(0)
        C[i, k] = C[i, k] + A[i, j] * A[i, j] * B[j, k]
"#,
    );
    let different = dense_j_kernel(
        "different",
        r#"
    with T.sp.iteration([I, J_detach, K], "SRS", "csrmm") as [i, j, k]:
        with T.init():
            C[i, k] = T.float32(0)
        C[i, k] = C[i, k] + A[i, j] * A[i, n - 1 - j] * B[j, k]
"#,
    );
    for checked in [false, true] {
        let low = lower(&same, checked);
        assert_eq!(count_blocks(&low, "binary_search_block_"), 1);
        assert_eq!(mids(&low), 1);
        let low = lower(&different, checked);
        assert_eq!(count_blocks(&low, "binary_search_block_"), 2);
        assert_eq!(mids(&low), 2);
    }
    // Absent coordinates read 0 under the checked semantics, as in the evaluator.
    check_dense_j(&same, &lower(&same, true), 31);
    check_dense_j(&different, &lower(&different, true), 32);
}

/// With checked searches, a lookup may feed an `if` condition and a `let` value: an absent
/// coordinate reads the default value there too.
#[test]
fn checked_lookups_in_if_and_let_agree() {
    let f = dense_j_kernel(
        "guarded",
        r#"
    with T.sp.iteration([I, J_detach, K], "SRS", "csrmm") as [i, j, k]:
        with T.init():
            C[i, k] = T.float32(0)
        v: T.float32 = A[i, j] * T.float32(3)
        if A[i, j] >= T.float32(0):
            C[i, k] = C[i, k] + v * B[j, k] + T.float32(1)
        else:
            C[i, k] = C[i, k] - v
"#,
    );
    let low = lower(&f, true);
    assert_eq!(mids(&low), 1);
    check_dense_j(&f, &low, 33);
    // An absent coordinate takes the `if` branch (0 >= 0) and adds 1: the lowering did not
    // drop those points.
    let args = csr_args(3, &[vec![]], &mut ChaCha8Rng::seed_from_u64(1));
    let mut got = args;
    run_func(&low, &mut got).expect("runs");
    let c = match got.get("c") {
        Some(ArgValue::Array(t)) => t.to_f64_vec(),
        _ => panic!("no c"),
    };
    // C = 0 (init) + 3 * (0 * B + 1) for the single empty row.
    assert_eq!(c, vec![3.0; 3]);
}
