//! Kernel-catalog tests of the reference evaluator: each kernel's IR is built by hand and run on
//! deterministic pseudo-random data, against a dense computation written independently here.

#![allow(clippy::needless_range_loop)]
use crate::common;

use common::*;
use sparsetir_eval::ArgValue;
use sparsetir_formats::Tensor;
use sparsetir_ir::{BinOp, DType, Expr, Intrinsic, IterAxis, PrimFunc, Stmt};

const F32: DType = DType::F32;
const I32: DType = DType::I32;

fn int(v: usize) -> ArgValue {
    ArgValue::Int(v as i64)
}

// ------------------------------------------------------------------------------------ csrmm

/// csrmm: `[I, J, K] "SRS"`: C[i, k] += A[i, j] * B[j, k].
fn csrmm_func() -> PrimFunc {
    let mut b = Builder::new("csrmm");
    let m = b.scalar("m", I32);
    let n = b.scalar("n", I32);
    let k = b.scalar("k", I32);
    let nnz = b.scalar("nnz", I32);
    let ia = b.dense_fixed("I", m);
    let ja = b.compressed_varied("J", ia, n.clone(), nnz);
    let jd = b.dense_fixed("J_detach", n);
    let ka = b.dense_fixed("K", k);
    let a = b.match_sparse("A", &[ia, ja], F32);
    let bb = b.match_sparse("B", &[jd, ka], F32);
    let c = b.match_sparse("C", &[ia, ka], F32);
    let v = b.vars(&["i", "j", "k"]);
    let (i, j, k) = (&v[0], &v[1], &v[2]);
    let init = st(c, &[i, k], f32c(0.0));
    let body = st(
        c,
        &[i, k],
        add(ld(c, &[i, k]), mul(ld(a, &[i, j]), ld(bb, &[j, k]))),
    );
    b.set_body(sp_iter(
        "csrmm",
        vec![ax(ia), ax(ja), ax(ka)],
        "SRS",
        &v,
        Some(init),
        body,
    ));
    b.f
}

fn csr_args(a: &Csr) -> Vec<(&'static str, ArgValue)> {
    vec![
        ("m", int(a.m)),
        ("n", int(a.n)),
        ("nnz", int(a.nnz())),
        ("J_indptr", i32_arr(&a.indptr)),
        ("J_indices", i32_arr(&a.indices)),
        ("a", f32_arr(&a.vals)),
    ]
}

/// The test matrices: random with empty rows and a full row, an empty matrix, 1×1, all rows
/// full, and 0×0.
fn test_matrices(rng: &mut Rng) -> Vec<Csr> {
    vec![
        Csr::random(rng, 7, 9, 35, &[1, 4], &[2]),
        Csr::random(rng, 4, 3, 0, &[], &[]),
        Csr::random(rng, 1, 1, 100, &[], &[]),
        Csr::random(rng, 3, 5, 0, &[], &[0, 1, 2]),
        Csr::random(rng, 12, 6, 50, &[11], &[]),
        Csr::random(rng, 0, 0, 50, &[], &[]),
    ]
}

#[test]
fn csrmm_matches_dense() {
    let f = csrmm_func();
    let mut rng = Rng::new(1);
    for a in test_matrices(&mut rng) {
        let k = 4;
        let bv = rng.vals(a.n * k);
        let c0: Vec<f64> = (0..a.m * k).map(|x| 100.0 + x as f64).collect();
        let mut args = args(csr_args(&a));
        args.insert("k".into(), int(k));
        args.insert("b".into(), f32_arr(&bv));
        args.insert("c".into(), f32_arr(&c0));
        run(&f, &mut args).expect("csrmm runs");
        let ad = a.dense(0.0);
        let mut want = c0.clone();
        // Every row is reset by the init, also one without elements (a sum over nothing is 0).
        for i in 0..a.m {
            for kk in 0..k {
                want[i * k + kk] = (0..a.n).map(|j| ad[i][j] * bv[j * k + kk]).sum();
            }
        }
        assert_close(&out(&args, "c"), &want, &format!("csrmm {}x{}", a.m, a.n));
        // Inputs are not modified.
        assert_close(&out(&args, "a"), &a.vals, "A");
    }
}

/// csrmm iterating the dense `J_detach` and reading `A[i, j]` (absent → default value).
fn csrmm_dense_iter_func(default: Option<f64>) -> PrimFunc {
    let mut b = Builder::new("csrmm_dense");
    let m = b.scalar("m", I32);
    let n = b.scalar("n", I32);
    let k = b.scalar("k", I32);
    let nnz = b.scalar("nnz", I32);
    let ia = b.dense_fixed("I", m);
    let ja = b.compressed_varied("J", ia, n.clone(), nnz);
    let jd = b.dense_fixed("J_detach", n);
    let ka = b.dense_fixed("K", k);
    let a = b.match_sparse("A", &[ia, ja], F32);
    b.f.buffers[a].default_value = default.map(f32c);
    let bb = b.match_sparse("B", &[jd, ka], F32);
    let c = b.match_sparse("C", &[ia, ka], F32);
    let v = b.vars(&["i", "j", "k"]);
    let (i, j, k) = (&v[0], &v[1], &v[2]);
    let init = st(c, &[i, k], f32c(0.0));
    let body = st(
        c,
        &[i, k],
        add(ld(c, &[i, k]), mul(ld(a, &[i, j]), ld(bb, &[j, k]))),
    );
    b.set_body(sp_iter(
        "csrmm",
        vec![ax(ia), ax(jd), ax(ka)],
        "SRS",
        &v,
        Some(init),
        body,
    ));
    b.f
}

#[test]
fn csrmm_dense_iteration_reads_default() {
    let mut rng = Rng::new(2);
    for default in [None, Some(0.75)] {
        let f = csrmm_dense_iter_func(default);
        for a in test_matrices(&mut rng) {
            let k = 3;
            let bv = rng.vals(a.n * k);
            let mut args = args(csr_args(&a));
            args.insert("k".into(), int(k));
            args.insert("b".into(), f32_arr(&bv));
            args.insert("c".into(), f32_arr(&vec![5.0; a.m * k]));
            run(&f, &mut args).expect("runs");
            let ad = a.dense(default.unwrap_or(0.0));
            let mut want = vec![0.0; a.m * k];
            for i in 0..a.m {
                for kk in 0..k {
                    // J_detach is a root: every row has n elements, so init always runs.
                    want[i * k + kk] = (0..a.n).map(|j| ad[i][j] * bv[j * k + kk]).sum();
                }
            }
            assert_close(&out(&args, "c"), &want, "dense-iteration csrmm");
        }
    }
}

#[test]
fn default_value_other_than_zero_and_skipped_writes() {
    // D[i, j] = A[i, j] over the dense [I, J_detach]; then A[i, j] = 2 over the same space
    // (only stored coordinates are written).
    let mut b = Builder::new("densify");
    let m = b.scalar("m", I32);
    let n = b.scalar("n", I32);
    let nnz = b.scalar("nnz", I32);
    let ia = b.dense_fixed("I", m);
    let ja = b.compressed_varied("J", ia, n.clone(), nnz);
    let jd = b.dense_fixed("J_detach", n);
    let a = b.match_sparse("A", &[ia, ja], F32);
    b.f.buffers[a].default_value = Some(f32c(-7.5));
    let d = b.match_sparse("D", &[ia, jd], F32);
    let v = b.vars(&["i", "j"]);
    let w = b.vars(&["i2", "j2"]);
    let copy = sp_iter(
        "copy",
        vec![ax(ia), ax(jd)],
        "SS",
        &v,
        None,
        st(d, &[&v[0], &v[1]], ld(a, &[&v[0], &v[1]])),
    );
    let fill = sp_iter(
        "fill",
        vec![ax(ia), ax(jd)],
        "SS",
        &w,
        None,
        st(a, &[&w[0], &w[1]], f32c(2.0)),
    );
    b.set_body(Stmt::seq(vec![copy, fill]));
    let mut rng = Rng::new(3);
    let mat = Csr::random(&mut rng, 5, 6, 40, &[3], &[0]);
    let mut args = args(csr_args(&mat));
    args.insert("d".into(), f32_arr(&vec![0.0; 30]));
    run(&b.f, &mut args).expect("runs");
    let want: Vec<f64> = mat.dense(-7.5).concat();
    assert_close(&out(&args, "d"), &want, "D");
    assert_close(&out(&args, "a"), &vec![2.0; mat.nnz()], "A after the fill");
}

// ------------------------------------------------------------------------------------ spmv

#[test]
fn spmv_matches_dense() {
    let mut b = Builder::new("spmv");
    let m = b.scalar("m", I32);
    let n = b.scalar("n", I32);
    let nnz = b.scalar("nnz", I32);
    let ia = b.dense_fixed("I", m);
    let ja = b.compressed_varied("J", ia, n.clone(), nnz);
    let jd = b.dense_fixed("J_detach", n);
    let a = b.match_sparse("A", &[ia, ja], F32);
    let x = b.match_sparse("X", &[jd], F32);
    let y = b.match_sparse("Y", &[ia], F32);
    let v = b.vars(&["i", "j"]);
    let (i, j) = (&v[0], &v[1]);
    let init = st(y, &[i], f32c(0.0));
    let body = st(y, &[i], add(ld(y, &[i]), mul(ld(a, &[i, j]), ld(x, &[j]))));
    b.set_body(sp_iter(
        "spmv",
        vec![ax(ia), ax(ja)],
        "SR",
        &v,
        Some(init),
        body,
    ));
    let mut rng = Rng::new(4);
    for mat in test_matrices(&mut rng) {
        let xv = rng.vals(mat.n);
        let mut args = args(csr_args(&mat));
        args.insert("x".into(), f32_arr(&xv));
        args.insert("y".into(), f32_arr(&vec![-1.0; mat.m]));
        run(&b.f, &mut args).expect("runs");
        let ad = mat.dense(0.0);
        let want: Vec<f64> = (0..mat.m)
            // An empty row gets the init, 0, not the -1 it held.
            .map(|i| (0..mat.n).map(|j| ad[i][j] * xv[j]).sum())
            .collect();
        assert_close(&out(&args, "y"), &want, "spmv");
    }
}

// ------------------------------------------------------------------------------------ sddmm

/// sddmm: `Y[i, j] += A[i, k] * B[j, k] * X[i, j]`, plain or with `fuse(I, J)`.
fn sddmm_func(fused: bool) -> PrimFunc {
    let mut b = Builder::new("sddmm");
    let m = b.scalar("m", I32);
    let n = b.scalar("n", I32);
    let k = b.scalar("k", I32);
    let nnz = b.scalar("nnz", I32);
    let ia = b.dense_fixed("I", m);
    let ja = b.compressed_varied("J", ia, n.clone(), nnz);
    let jd = b.dense_fixed("J_detach", n);
    let ka = b.dense_fixed("K", k);
    let a = b.match_sparse("A", &[ia, ka], F32);
    let bb = b.match_sparse("B", &[jd, ka], F32);
    let x = b.match_sparse("X", &[ia, ja], F32);
    let y = b.match_sparse("Y", &[ia, ja], F32);
    let v = b.vars(&["i", "j", "k"]);
    let (i, j, k) = (&v[0], &v[1], &v[2]);
    let init = st(y, &[i, j], f32c(0.0));
    let prod = mul(mul(ld(a, &[i, k]), ld(bb, &[j, k])), ld(x, &[i, j]));
    let body = st(y, &[i, j], add(ld(y, &[i, j]), prod));
    let axes = if fused {
        vec![IterAxis::Fuse(vec![ia, ja]), ax(ka)]
    } else {
        vec![ax(ia), ax(ja), ax(ka)]
    };
    b.set_body(sp_iter("sddmm", axes, "SSR", &v, Some(init), body));
    b.f
}

#[test]
fn sddmm_plain_and_fused_match_dense() {
    let mut rng = Rng::new(5);
    for fused in [false, true] {
        let f = sddmm_func(fused);
        for mat in test_matrices(&mut rng) {
            let k = 5;
            let av = rng.vals(mat.m * k);
            let bv = rng.vals(mat.n * k);
            let mut args = args(vec![
                ("m", int(mat.m)),
                ("n", int(mat.n)),
                ("k", int(k)),
                ("nnz", int(mat.nnz())),
                ("J_indptr", i32_arr(&mat.indptr)),
                ("J_indices", i32_arr(&mat.indices)),
                ("a", f32_arr(&av)),
                ("b", f32_arr(&bv)),
                ("x", f32_arr(&mat.vals)),
                ("y", f32_arr(&vec![9.0; mat.nnz()])),
            ]);
            run(&f, &mut args).expect("runs");
            // Independent: walk the CSR rows and compute each stored (i, j) directly.
            let mut want = Vec::new();
            for i in 0..mat.m {
                for p in mat.indptr[i] as usize..mat.indptr[i + 1] as usize {
                    let j = mat.indices[p] as usize;
                    let dot: f64 = (0..k).map(|kk| av[i * k + kk] * bv[j * k + kk]).sum();
                    want.push(dot * mat.vals[p]);
                }
            }
            assert_close(&out(&args, "y"), &want, &format!("sddmm fused={fused}"));
        }
    }
}

// ------------------------------------------------------------------------------------ ELL

#[test]
fn ellmm_matches_dense() {
    let (m, n, c, k) = (6usize, 8usize, 3usize, 4usize);
    let mut b = Builder::new("ellmm");
    let ia = b.dense_fixed("I", Expr::int(m as i64));
    let ja = b.compressed_fixed("J", ia, Expr::int(n as i64), Expr::int(c as i64));
    let jd = b.dense_fixed("J_detach", Expr::int(n as i64));
    let ka = b.dense_fixed("K", Expr::int(k as i64));
    let a = b.match_sparse("A", &[ia, ja], F32);
    let bb = b.match_sparse("B", &[jd, ka], F32);
    let cc = b.match_sparse("C", &[ia, ka], F32);
    let v = b.vars(&["i", "j", "k"]);
    let (i, j, kv) = (&v[0], &v[1], &v[2]);
    let init = st(cc, &[i, kv], f32c(0.0));
    let body = st(
        cc,
        &[i, kv],
        add(ld(cc, &[i, kv]), mul(ld(a, &[i, j]), ld(bb, &[j, kv]))),
    );
    b.set_body(sp_iter(
        "ellmm",
        vec![ax(ia), ax(ja), ax(ka)],
        "SRS",
        &v,
        Some(init),
        body,
    ));
    let mut rng = Rng::new(6);
    // c distinct columns per row.
    let mut indices = Vec::new();
    for _ in 0..m {
        let mut row: Vec<i64> = Vec::new();
        while row.len() < c {
            let col = rng.below(n as u32) as i64;
            if !row.contains(&col) {
                row.push(col);
            }
        }
        row.sort();
        indices.extend(row);
    }
    let av = rng.vals(m * c);
    let bv = rng.vals(n * k);
    let mut args = args(vec![
        ("J_indices", i32_arr(&indices)),
        ("a", f32_arr(&av)),
        ("b", f32_arr(&bv)),
        ("c", f32_arr(&vec![0.0; m * k])),
    ]);
    run(&b.f, &mut args).expect("runs");
    let mut dense = vec![vec![0.0; n]; m];
    for r in 0..m {
        for p in 0..c {
            dense[r][indices[r * c + p] as usize] = av[r * c + p];
        }
    }
    let mut want = vec![0.0; m * k];
    for r in 0..m {
        for kk in 0..k {
            want[r * k + kk] = (0..n).map(|col| dense[r][col] * bv[col * k + kk]).sum();
        }
    }
    assert_close(&out(&args, "c"), &want, "ellmm");
}

// ------------------------------------------------------------------------------------ BSR

#[test]
fn bsrmm_matches_dense() {
    let (nb, mb, blk, feat) = (4usize, 3usize, 2usize, 3usize);
    let mut b = Builder::new("bsrmm");
    let nnzb = b.scalar("nnzb", I32);
    let ia = b.dense_fixed("I", Expr::int(nb as i64));
    let ja = b.compressed_varied("J", ia, Expr::int(mb as i64), nnzb);
    let jd = b.dense_fixed("J_detach", Expr::int(mb as i64));
    let bi = b.dense_fixed("BI", Expr::int(blk as i64));
    let bj = b.dense_fixed("BJ", Expr::int(blk as i64));
    let fa = b.dense_fixed("F", Expr::int(feat as i64));
    let a = b.match_sparse("A", &[ia, ja, bi, bj], F32);
    let bb = b.match_sparse("B", &[jd, bj, fa], F32);
    let c = b.match_sparse("C", &[ia, bi, fa], F32);
    let v = b.vars(&["i", "bi", "bj", "f", "j"]);
    let (i, vbi, vbj, f, j) = (&v[0], &v[1], &v[2], &v[3], &v[4]);
    let init = st(c, &[i, vbi, f], f32c(0.0));
    let prod = mul(ld(a, &[i, j, vbi, vbj]), ld(bb, &[j, vbj, f]));
    let body = st(c, &[i, vbi, f], add(ld(c, &[i, vbi, f]), prod));
    let axes = vec![ax(ia), ax(bi), ax(bj), ax(fa), ax(ja)];
    b.set_body(sp_iter("bsrmm", axes, "SSRSR", &v, Some(init), body));

    let mut rng = Rng::new(7);
    let pattern = Csr::random(&mut rng, nb, mb, 50, &[2], &[0]);
    let nnzb_v = pattern.nnz();
    let av = rng.vals(nnzb_v * blk * blk);
    let bv = rng.vals(mb * blk * feat);
    let c0 = vec![3.0; nb * blk * feat];
    let mut args = args(vec![
        ("nnzb", int(nnzb_v)),
        ("J_indptr", i32_arr(&pattern.indptr)),
        ("J_indices", i32_arr(&pattern.indices)),
        ("a", f32_arr(&av)),
        ("b", f32_arr(&bv)),
        ("c", f32_arr(&c0)),
    ]);
    run(&b.f, &mut args).expect("runs");
    // Dense (nb*blk) x (mb*blk) matrix from the blocks.
    let (rows, cols) = (nb * blk, mb * blk);
    let mut dense = vec![vec![0.0; cols]; rows];
    for r in 0..nb {
        for p in pattern.indptr[r] as usize..pattern.indptr[r + 1] as usize {
            let cb = pattern.indices[p] as usize;
            for x in 0..blk {
                for y in 0..blk {
                    dense[r * blk + x][cb * blk + y] = av[(p * blk + x) * blk + y];
                }
            }
        }
    }
    let mut want = c0.clone();
    for row in 0..rows {
        // An empty block row is still initialised: the init belongs to the segment of the first
        // reduction iterator `bj`, which a dense axis always reaches (SPEC §2.3 as refined by
        // the evaluator's init rule); its sum over no blocks is 0.
        for ff in 0..feat {
            want[row * feat + ff] = (0..cols)
                .map(|col| dense[row][col] * bv[col * feat + ff])
                .sum();
        }
    }
    assert_close(&out(&args, "c"), &want, "bsrmm");
}

// ------------------------------------------------------------------------------------ CSF

#[test]
fn csf_square_sum_matches_dense() {
    let (m, n, l) = (5usize, 4usize, 6usize);
    let mut b = Builder::new("csf_sq");
    let nnz_j = b.scalar("nnz_j", I32);
    let nnz_k = b.scalar("nnz_k", I32);
    let ia = b.dense_fixed("I", Expr::int(m as i64));
    let ja = b.compressed_varied("J", ia, Expr::int(n as i64), nnz_j);
    let ka = b.compressed_varied("K", ja, Expr::int(l as i64), nnz_k);
    let a = b.match_sparse("A", &[ia, ja, ka], F32);
    let out_b = b.match_sparse("B", &[ia], F32);
    let v = b.vars(&["i", "j", "k"]);
    let (i, j, k) = (&v[0], &v[1], &v[2]);
    let init = st(out_b, &[i], f32c(0.0));
    let sq = mul(ld(a, &[i, j, k]), ld(a, &[i, j, k]));
    let body = st(out_b, &[i], add(ld(out_b, &[i]), sq));
    b.set_body(sp_iter(
        "sq",
        vec![ax(ia), ax(ja), ax(ka)],
        "SRR",
        &v,
        Some(init),
        body,
    ));

    let mut rng = Rng::new(8);
    let mut dense = vec![vec![vec![None::<f64>; l]; n]; m];
    let (mut ptr_j, mut idx_j, mut ptr_k, mut idx_k, mut vals) =
        (vec![0i64], vec![], vec![0i64], vec![], vec![]);
    for (ii, plane) in dense.iter_mut().enumerate() {
        for (jj, fiber) in plane.iter_mut().enumerate() {
            if ii == 3 || rng.below(100) >= 60 {
                continue;
            }
            idx_j.push(jj as i64);
            for (kk, slot) in fiber.iter_mut().enumerate() {
                if rng.below(100) < 40 {
                    let x = rng.val();
                    *slot = Some(x);
                    idx_k.push(kk as i64);
                    vals.push(x);
                }
            }
            ptr_k.push(idx_k.len() as i64);
        }
        ptr_j.push(idx_j.len() as i64);
    }
    let mut args = args(vec![
        ("nnz_j", int(idx_j.len())),
        ("nnz_k", int(idx_k.len())),
        ("J_indptr", i32_arr(&ptr_j)),
        ("J_indices", i32_arr(&idx_j)),
        ("K_indptr", i32_arr(&ptr_k)),
        ("K_indices", i32_arr(&idx_k)),
        ("a", f32_arr(&vals)),
        ("b", f32_arr(&vec![-2.0; m])),
    ]);
    run(&b.f, &mut args).expect("runs");
    let want: Vec<f64> = dense
        .iter()
        .map(|plane| {
            // Also a row without J fibers, or whose fibers hold no K element, gets the init 0.
            let stored: Vec<f64> = plane.iter().flatten().flatten().copied().collect();
            stored.iter().map(|x| x * x).sum()
        })
        .collect();
    assert_close(&out(&args, "b"), &want, "csf square sum");
}

// ------------------------------------------------------------------------------------ DCSR

#[test]
fn dcsr_spmv_matches_dense() {
    let mut rng = Rng::new(9);
    let mat = Csr::random(&mut rng, 8, 7, 30, &[0, 5, 6], &[3]);
    let (m, n) = (mat.m, mat.n);
    let mut b = Builder::new("dcsr_spmv");
    let nnz1 = b.scalar("nnz1", I32);
    let nnz2 = b.scalar("nnz2", I32);
    let o = b.dense_fixed("O", Expr::int(1));
    let ia = b.compressed_varied("I", o, Expr::int(m as i64), nnz1);
    let ja = b.compressed_varied("J", ia, Expr::int(n as i64), nnz2);
    let id = b.dense_fixed("I_detach", Expr::int(m as i64));
    let jd = b.dense_fixed("J_detach", Expr::int(n as i64));
    let a = b.match_sparse("A", &[o, ia, ja], F32);
    let x = b.match_sparse("X", &[jd], F32);
    let y = b.match_sparse("Y", &[id], F32);
    let v = b.vars(&["o", "i", "j"]);
    let (ov, i, j) = (&v[0], &v[1], &v[2]);
    let init = st(y, &[i], f32c(0.0));
    let body = st(
        y,
        &[i],
        add(ld(y, &[i]), mul(ld(a, &[ov, i, j]), ld(x, &[j]))),
    );
    b.set_body(sp_iter(
        "dcsr",
        vec![ax(o), ax(ia), ax(ja)],
        "SSR",
        &v,
        Some(init),
        body,
    ));

    let rows: Vec<usize> = (0..m)
        .filter(|&r| mat.indptr[r] < mat.indptr[r + 1])
        .collect();
    let mut ptr_j = vec![0i64];
    for &r in &rows {
        ptr_j.push(mat.indptr[r + 1]);
    }
    let xv = rng.vals(n);
    let mut args = args(vec![
        ("nnz1", int(rows.len())),
        ("nnz2", int(mat.nnz())),
        ("I_indptr", i32_arr(&[0, rows.len() as i64])),
        (
            "I_indices",
            i32_arr(&rows.iter().map(|r| *r as i64).collect::<Vec<_>>()),
        ),
        ("J_indptr", i32_arr(&ptr_j)),
        ("J_indices", i32_arr(&mat.indices)),
        ("a", f32_arr(&mat.vals)),
        ("x", f32_arr(&xv)),
        ("y", f32_arr(&vec![4.0; m])),
    ]);
    run(&b.f, &mut args).expect("runs");
    let ad = mat.dense(0.0);
    let want: Vec<f64> = (0..m)
        .map(|r| {
            if rows.contains(&r) {
                (0..n).map(|c| ad[r][c] * xv[c]).sum()
            } else {
                4.0
            }
        })
        .collect();
    assert_close(&out(&args, "y"), &want, "dcsr spmv");
}

// ------------------------------------------------------------------------------------ ragged

#[test]
fn ragged_segment_sum_and_max() {
    let m = 6usize;
    let mut b = Builder::new("segment");
    let nnz = b.scalar("nnz", I32);
    let ia = b.dense_fixed("I", Expr::int(m as i64));
    let ja = b.dense_varied("J", ia, Expr::int(100), Some(nnz));
    let a = b.match_sparse("A", &[ia, ja], F32);
    let s = b.match_sparse("S", &[ia], F32);
    let mx = b.match_sparse("MX", &[ia], F32);
    let v = b.vars(&["i", "j"]);
    let w = b.vars(&["i2", "j2"]);
    let sum = sp_iter(
        "sum",
        vec![ax(ia), ax(ja)],
        "SR",
        &v,
        Some(st(s, &[&v[0]], f32c(0.0))),
        st(s, &[&v[0]], add(ld(s, &[&v[0]]), ld(a, &[&v[0], &v[1]]))),
    );
    let maxi = sp_iter(
        "max",
        vec![ax(ia), ax(ja)],
        "SR",
        &w,
        Some(st(mx, &[&w[0]], min_value_f32())),
        st(mx, &[&w[0]], max(ld(mx, &[&w[0]]), ld(a, &[&w[0], &w[1]]))),
    );
    b.set_body(Stmt::seq(vec![sum, maxi]));
    let mut rng = Rng::new(10);
    let lens = [3usize, 0, 100, 1, 7, 0];
    let mut indptr = vec![0i64];
    for l in lens {
        indptr.push(indptr.last().copied().unwrap_or(0) + l as i64);
    }
    let total = *indptr.last().unwrap_or(&0) as usize;
    let vals = rng.vals(total);
    let mut args = args(vec![
        ("nnz", int(total)),
        ("J_indptr", i32_arr(&indptr)),
        ("a", f32_arr(&vals)),
        ("s", f32_arr(&vec![1.5; m])),
        ("mx", f32_arr(&vec![1.5; m])),
    ]);
    run(&b.f, &mut args).expect("runs");
    // Empty segments get the inits: a sum of 0 and a max of the lowest float32 (not the 1.5
    // they held).
    let mut want_s = vec![1.5; m];
    let mut want_m = vec![1.5; m];
    let mut off = 0;
    for (r, l) in lens.iter().enumerate() {
        let seg = &vals[off..off + l];
        want_s[r] = seg.iter().sum();
        want_m[r] = seg.iter().cloned().fold(f32::MIN as f64, f64::max);
        off += l;
    }
    assert_close(&out(&args, "s"), &want_s, "segment sum");
    assert_close(&out(&args, "mx"), &want_m, "segment max");
}

// ------------------------------------------------------------------------------------ softmax

#[test]
fn sparse_softmax_is_numerically_stable() {
    let mut b = Builder::new("softmax");
    let m = b.scalar("m", I32);
    let n = b.scalar("n", I32);
    let nnz = b.scalar("nnz", I32);
    let ia = b.dense_fixed("I", m);
    let ja = b.compressed_varied("J", ia, n, nnz);
    let a = b.match_sparse("A", &[ia, ja], F32);
    let o = b.match_sparse("O", &[ia, ja], F32);
    let mx = b.alloc_sparse("MX", &[ia], F32);
    let sm = b.alloc_sparse("SM", &[ia], F32);
    let vi = b.vars(&["i"]);
    let j1 = b.vars(&["j1"]);
    let j2 = b.vars(&["j2"]);
    let j3 = b.vars(&["j3"]);
    let i = &vi[0];
    let shifted = |j: &Expr| call(Intrinsic::Exp, vec![sub(ld(a, &[i, j]), ld(mx, &[i]))]);
    let it_max = sp_iter(
        "max",
        vec![ax(ja)],
        "R",
        &j1,
        Some(st(mx, &[i], min_value_f32())),
        st(mx, &[i], max(ld(mx, &[i]), ld(a, &[i, &j1[0]]))),
    );
    let it_sum = sp_iter(
        "sum",
        vec![ax(ja)],
        "R",
        &j2,
        Some(st(sm, &[i], f32c(0.0))),
        st(sm, &[i], add(ld(sm, &[i]), shifted(&j2[0]))),
    );
    let it_div = sp_iter(
        "div",
        vec![ax(ja)],
        "S",
        &j3,
        None,
        st(o, &[i, &j3[0]], div(shifted(&j3[0]), ld(sm, &[i]))),
    );
    let outer = sp_iter(
        "row",
        vec![ax(ia)],
        "S",
        &vi,
        None,
        Stmt::seq(vec![it_max, it_sum, it_div]),
    );
    b.set_body(outer);

    let mut rng = Rng::new(11);
    for mut mat in test_matrices(&mut rng) {
        // Large values: a naive exp would overflow f32.
        for x in mat.vals.iter_mut() {
            *x *= 200.0;
        }
        let mut args = args(csr_args(&mat));
        args.insert("o".into(), f32_arr(&vec![0.0; mat.nnz()]));
        run(&b.f, &mut args).expect("runs");
        let mut want = Vec::new();
        for r in 0..mat.m {
            let row = &mat.vals[mat.indptr[r] as usize..mat.indptr[r + 1] as usize];
            let top = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = row.iter().map(|x| (x - top).exp()).sum();
            want.extend(row.iter().map(|x| (x - top).exp() / z));
        }
        assert_close(&out(&args, "o"), &want, "softmax");
    }
}

// ------------------------------------------------------------------------------------ hypergraph

#[test]
fn hypergraph_attach_matches_dense() {
    // Incidence: vertex v lies in hyperedge e. I → J (edges of a vertex); J_T → I_T (vertices of
    // an edge). Y[i, f] = sum over edges j of i, over vertices u of j, of X[u, f].
    let (nv, ne, nf) = (6usize, 4usize, 3usize);
    let mut rng = Rng::new(12);
    let inc = Csr::random(&mut rng, nv, ne, 45, &[2], &[4]);
    // Transpose.
    let mut t_ptr = vec![0i64];
    let mut t_idx = Vec::new();
    for e in 0..ne {
        for vtx in 0..nv {
            let lo = inc.indptr[vtx] as usize;
            let hi = inc.indptr[vtx + 1] as usize;
            if inc.indices[lo..hi].contains(&(e as i64)) {
                t_idx.push(vtx as i64);
            }
        }
        t_ptr.push(t_idx.len() as i64);
    }
    let mut b = Builder::new("hyper");
    let nnz = b.scalar("nnz", I32);
    let ia = b.dense_fixed("I", Expr::int(nv as i64));
    let ja = b.compressed_varied("J", ia, Expr::int(ne as i64), nnz.clone());
    let jt = b.dense_fixed("J_T", Expr::int(ne as i64));
    let it_ax = b.compressed_varied("I_T", jt, Expr::int(nv as i64), nnz);
    let id = b.dense_fixed("I_detach", Expr::int(nv as i64));
    let fa = b.dense_fixed("F", Expr::int(nf as i64));
    let x = b.match_sparse("X", &[id, fa], F32);
    let y = b.match_sparse("Y", &[ia, fa], F32);
    let v = b.vars(&["i", "f", "j", "u"]);
    let (i, f, u) = (&v[0], &v[1], &v[3]);
    let axes = vec![
        ax(ia),
        ax(fa),
        ax(ja),
        IterAxis::Attach {
            axis: it_ax,
            parent: ja,
        },
    ];
    let init = st(y, &[i, f], f32c(0.0));
    let body = st(y, &[i, f], add(ld(y, &[i, f]), ld(x, &[u, f])));
    b.set_body(sp_iter("hyper", axes, "SSRR", &v, Some(init), body));
    let xv = rng.vals(nv * nf);
    let mut args = args(vec![
        ("nnz", int(inc.nnz())),
        ("J_indptr", i32_arr(&inc.indptr)),
        ("J_indices", i32_arr(&inc.indices)),
        ("I_T_indptr", i32_arr(&t_ptr)),
        ("I_T_indices", i32_arr(&t_idx)),
        ("x", f32_arr(&xv)),
        ("y", f32_arr(&vec![8.0; nv * nf])),
    ]);
    run(&b.f, &mut args).expect("runs");
    let mut want = vec![8.0; nv * nf];
    // Membership matrix from the incidence lists, then a plain triple loop.
    let mut member = vec![vec![false; ne]; nv];
    for (vtx, row) in member.iter_mut().enumerate() {
        for p in inc.indptr[vtx] as usize..inc.indptr[vtx + 1] as usize {
            row[inc.indices[p] as usize] = true;
        }
    }
    // A vertex in no edge gets the init, 0.
    for vtx in 0..nv {
        for ff in 0..nf {
            let mut s = 0.0;
            for e in 0..ne {
                if !member[vtx][e] {
                    continue;
                }
                for u in 0..nv {
                    if member[u][e] {
                        s += xv[u * nf + ff];
                    }
                }
            }
            want[vtx * nf + ff] = s;
        }
    }
    assert_close(&out(&args, "y"), &want, "hypergraph");
}

// ------------------------------------------------------------------------------------ scalars

#[test]
fn integer_arithmetic_wraps_and_floors() {
    let mut b = Builder::new("ints");
    let x = b.scalar("x", I32);
    let y = b.scalar("y", I32);
    let o = b.match_dense("O", vec![Expr::int(4)], I32);
    let body = Stmt::seq(vec![
        st(o, &[&Expr::int(0)], mul(x.clone(), x.clone())),
        st(
            o,
            &[&Expr::int(1)],
            Expr::binary(BinOp::FloorDiv, y.clone(), Expr::int(4)),
        ),
        st(
            o,
            &[&Expr::int(2)],
            Expr::binary(BinOp::FloorMod, y.clone(), Expr::int(4)),
        ),
        st(o, &[&Expr::int(3)], div(y.clone(), Expr::int(4))),
    ]);
    b.set_body(body);
    let mut a = args(vec![
        ("x", ArgValue::Int(70000)),
        ("y", ArgValue::Int(-9)),
        (
            "o",
            ArgValue::Array(Tensor::zeros(I32, vec![4]).expect("zeros")),
        ),
    ]);
    run(&b.f, &mut a).expect("runs");
    let got = match &a["o"] {
        ArgValue::Array(t) => t.to_i64_vec(),
        _ => panic!("array"),
    };
    assert_eq!(
        got,
        vec![
            70000i32.wrapping_mul(70000) as i64,
            (-9f64 / 4.0).floor() as i64,
            3,
            -2
        ]
    );
}

#[test]
fn float16_buffer_rounds_each_store() {
    // O[0] = 1 + 2^-12 in float16 rounds to 1; float32 keeps it.
    let mut b = Builder::new("half");
    let o16 = b.match_dense("O16", vec![Expr::int(1)], DType::F16);
    let o32 = b.match_dense("O32", vec![Expr::int(1)], F32);
    let v = Expr::Float(1.0 + 1.0 / 4096.0, DType::F32);
    b.set_body(Stmt::seq(vec![
        st(o16, &[&Expr::int(0)], v.clone()),
        st(o32, &[&Expr::int(0)], v),
    ]));
    let mut a = args(vec![
        (
            "o16",
            ArgValue::Array(Tensor::zeros(DType::F16, vec![1]).expect("zeros")),
        ),
        (
            "o32",
            ArgValue::Array(Tensor::zeros(F32, vec![1]).expect("zeros")),
        ),
    ]);
    run(&b.f, &mut a).expect("runs");
    assert_eq!(out(&a, "o16"), vec![1.0]);
    assert_eq!(out(&a, "o32"), vec![1.0 + 1.0 / 4096.0]);
}
