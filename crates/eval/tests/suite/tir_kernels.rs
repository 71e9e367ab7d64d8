//! Hand-lowered kernels run by the stage II/III interpreter and compared with dense
//! computations written here: CSR SpMM at stage II and III (SPEC §3.2/§3.3), a GPU-style
//! stage-III SpMM with thread-bound loops, a predicate and a per-block accumulator, an ELL SpMV
//! (compressed_fixed) and a CSF square sum (a chain of two varied axes) at stage II.

use crate::tir_common;

use tir_common::*;

const CSRMM_II: &str = r#"
@T.prim_func
def csrmm(a: T.handle, b: T.handle, c: T.handle, indptr: T.handle, indices: T.handle,
          m: T.int32, n: T.int32, k: T.int32, nnz: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 1})
    I = T.sp.dense_fixed(m, idtype="int32")
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices), idtype="int32", sorted=True)
    J_dense = T.sp.dense_varied(I, (n, nnz), indptr, idtype="int32")
    J_detach = T.sp.dense_fixed(n, idtype="int32")
    K = T.sp.dense_fixed(k, idtype="int32")
    A = T.sp.match_buffer(a, [I, J], dtype="float32")
    B = T.sp.match_buffer(b, [J_detach, K], dtype="float32")
    C = T.sp.match_buffer(c, [I, K], dtype="float32")
    J_indptr = T.sp.match_buffer(indptr, [I], dtype="int32", extra_storage=1)
    J_indices = T.sp.match_buffer(indices, [I, J_dense], dtype="int32")
    T.assume_buffer_domain(J_indptr, [0, nnz])
    T.assume_buffer_domain(J_indices, [0, n])
    for i in T.serial(m):
        with T.block("csrmm0"):
            vi = T.axis.spatial(m, i)
            T.block_attr({"sparse": True})
            for j, kk in T.grid(J_indptr[vi + 1] - J_indptr[vi], k):
                with T.block("csrmm1"):
                    vj = T.axis.reduce(n, j)
                    vk = T.axis.spatial(k, kk)
                    T.block_attr({"sparse": True})
                    with T.init():
                        C[vi, vk] = T.float32(0)
                    C[vi, vk] = C[vi, vk] + A[vi, vj] * B[J_indices[vi, vj], vk]
"#;

const CSRMM_III: &str = r#"
@T.prim_func
def csrmm(a: T.handle, b: T.handle, c: T.handle, indptr: T.handle, indices: T.handle,
          m: T.int32, n: T.int32, k: T.int32, nnz: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 0})
    A_data = T.match_buffer(a, (nnz,), "float32")
    B_data = T.match_buffer(b, (n, k), "float32")
    C_data = T.match_buffer(c, (m, k), "float32")
    J_indptr_data = T.match_buffer(indptr, (m + 1,), "int32")
    J_indices_data = T.match_buffer(indices, (nnz,), "int32")
    for i in T.serial(m):
        with T.block("csrmm0"):
            vi = T.axis.spatial(m, i)
            for j, kk in T.grid(J_indptr_data[vi + 1] - J_indptr_data[vi], k):
                with T.block("csrmm1"):
                    vj = T.axis.reduce(n, j)
                    vk = T.axis.spatial(k, kk)
                    with T.init():
                        C_data[vi, vk] = T.float32(0)
                    C_data[vi, vk] = C_data[vi, vk] + A_data[vj + J_indptr_data[vi]] * B_data[J_indices_data[vj + J_indptr_data[vi]], vk]
"#;

const CSRMM_GPU: &str = r#"
@T.prim_func
def csrmm(a: T.handle, b: T.handle, c: T.handle, indptr: T.handle, indices: T.handle,
          m: T.int32, n: T.int32, k: T.int32, nnz: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 0})
    A_data = T.match_buffer(a, (nnz,), "float32")
    B_data = T.match_buffer(b, (n, k), "float32")
    C_data = T.match_buffer(c, (m, k), "float32")
    J_indptr_data = T.match_buffer(indptr, (m + 1,), "int32")
    J_indices_data = T.match_buffer(indices, (nnz,), "int32")
    for bx in T.thread_binding(m, thread="blockIdx.x"):
        for ko in T.serial((k + 3) // 4):
            for tx in T.thread_binding(4, thread="threadIdx.x"):
                with T.block("row"):
                    vi = T.axis.spatial(m, bx)
                    vk = T.axis.spatial(k, ko * 4 + tx)
                    T.where(ko * 4 + tx < k)
                    acc = T.alloc_buffer((1,), "float32", scope="local")
                    for p in T.serial(J_indptr_data[vi], J_indptr_data[vi + 1]):
                        acc[0] = acc[0] + A_data[p] * B_data[J_indices_data[p], vk]
                    C_data[vi, vk] = acc[0]
"#;

struct Csr {
    m: usize,
    n: usize,
    k: usize,
    indptr: Vec<i64>,
    indices: Vec<i64>,
    a: Vec<f64>,
    b: Vec<f64>,
}

fn csr(seed: u64, m: usize, n: usize, k: usize) -> Csr {
    let mut rng = Rng::new(seed);
    let (indptr, indices) = random_pattern(&mut rng, m, n);
    let a = indices.iter().map(|_| rng.small()).collect();
    let b = (0..n * k).map(|_| rng.small()).collect();
    Csr {
        m,
        n,
        k,
        indptr,
        indices,
        a,
        b,
    }
}

/// Dense `C = A · B`; rows of A without any stored element get `empty_row` (the init of the
/// reduction block runs only with the first stored element of a row).
fn csr_reference(c: &Csr, empty_row: f64) -> Vec<f64> {
    let mut dense = vec![0.0; c.m * c.n];
    for i in 0..c.m {
        for p in c.indptr[i] as usize..c.indptr[i + 1] as usize {
            dense[i * c.n + c.indices[p] as usize] = c.a[p];
        }
    }
    let mut out = vec![0.0; c.m * c.k];
    for i in 0..c.m {
        let empty = c.indptr[i] == c.indptr[i + 1];
        for f in 0..c.k {
            out[i * c.k + f] = if empty {
                empty_row
            } else {
                (0..c.n)
                    .map(|j| dense[i * c.n + j] * c.b[j * c.k + f])
                    .sum()
            };
        }
    }
    out
}

fn run_csr(src: &str, c: &Csr, c0: f64) -> Vec<f64> {
    let f = parse(src);
    let mut a = args(vec![
        ("a", f32_arr(&c.a)),
        ("b", f32_arr(&c.b)),
        ("c", f32_arr(&vec![c0; c.m * c.k])),
        ("indptr", i32_arr(&c.indptr)),
        ("indices", i32_arr(&c.indices)),
        ("m", int(c.m as i64)),
        ("n", int(c.n as i64)),
        ("k", int(c.k as i64)),
        ("nnz", int(c.indices.len() as i64)),
    ]);
    run(&f, &mut a);
    out(&a, "c")
}

const SHAPES: [(usize, usize, usize); 6] = [
    (5, 6, 3),
    (4, 4, 1),
    (1, 5, 2),
    (3, 1, 5),
    (6, 3, 4),
    (2, 2, 7),
];

#[test]
fn csrmm_stage_ii_and_iii_match_dense() {
    for (seed, &(m, n, k)) in SHAPES.iter().enumerate() {
        let c = csr(100 + seed as u64, m, n, k);
        // C starts at 7: rows without stored elements keep it (TVM's init rule).
        let want = csr_reference(&c, 7.0);
        assert_close(
            &run_csr(CSRMM_II, &c, 7.0),
            &want,
            &format!("stage II {seed}"),
        );
        assert_close(
            &run_csr(CSRMM_III, &c, 7.0),
            &want,
            &format!("stage III {seed}"),
        );
    }
}

#[test]
fn csrmm_gpu_style_matches_dense() {
    for (seed, &(m, n, k)) in SHAPES.iter().enumerate() {
        let c = csr(200 + seed as u64, m, n, k);
        // Every (row, column) is written; the per-instance accumulator starts at 0 each time.
        let want = csr_reference(&c, 0.0);
        assert_close(&run_csr(CSRMM_GPU, &c, 7.0), &want, &format!("gpu {seed}"));
    }
}

#[test]
fn csrmm_zero_by_zero() {
    let c = Csr {
        m: 0,
        n: 0,
        k: 0,
        indptr: vec![0],
        indices: vec![],
        a: vec![],
        b: vec![],
    };
    for src in [CSRMM_II, CSRMM_III, CSRMM_GPU] {
        assert!(run_csr(src, &c, 0.0).is_empty());
    }
}

const ELL_SPMV_II: &str = r#"
@T.prim_func
def ellmv(a: T.handle, x: T.handle, y: T.handle, indices: T.handle, m: T.int32, n: T.int32,
          c: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 1})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_fixed(I, (n, c), indices)
    J_dense = T.sp.dense_fixed(c)
    J_detach = T.sp.dense_fixed(n)
    A = T.sp.match_buffer(a, [I, J], "float32")
    X = T.sp.match_buffer(x, [J_detach], "float32")
    Y = T.sp.match_buffer(y, [I], "float32")
    J_indices = T.sp.match_buffer(indices, [I, J_dense], "int32")
    T.assume_buffer_domain(J_indices, [0, n])
    for i, j in T.grid(m, c):
        with T.block("ellmv0"):
            vi, vj = T.axis.remap("SR", [i, j])
            with T.init():
                Y[vi] = T.float32(0)
            Y[vi] = Y[vi] + A[vi, vj] * X[J_indices[vi, vj]]
"#;

#[test]
fn ell_spmv_stage_ii() {
    let (m, n, c) = (4usize, 6usize, 3usize);
    let mut rng = Rng::new(7);
    let mut indices = Vec::new();
    for _ in 0..m {
        let mut cols: Vec<i64> = (0..n as i64).collect();
        for _ in 0..n - c {
            let r = rng.below(cols.len() as u64) as usize;
            cols.remove(r);
        }
        indices.extend(cols);
    }
    let a: Vec<f64> = (0..m * c).map(|_| rng.small()).collect();
    let x: Vec<f64> = (0..n).map(|_| rng.small()).collect();
    let mut want = vec![0.0; m];
    for i in 0..m {
        for j in 0..c {
            want[i] += a[i * c + j] * x[indices[i * c + j] as usize];
        }
    }
    let f = parse(ELL_SPMV_II);
    let mut args = args(vec![
        ("a", f32_arr(&a)),
        ("x", f32_arr(&x)),
        ("y", f32_arr(&[9.0; 4])),
        ("indices", i32_arr(&indices)),
        ("m", int(m as i64)),
        ("n", int(n as i64)),
        ("c", int(c as i64)),
    ]);
    run(&f, &mut args);
    assert_close(&out(&args, "y"), &want, "y");
}

const CSF_SQUARE_SUM_II: &str = r#"
@T.prim_func
def csf_sq(a: T.handle, b: T.handle, indptr_j: T.handle, indices_j: T.handle,
           indptr_k: T.handle, indices_k: T.handle, m: T.int32, n: T.int32, l: T.int32,
           nnz_j: T.int32, nnz_k: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 1})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz_j), (indptr_j, indices_j))
    K = T.sp.compressed_varied(J, (l, nnz_k), (indptr_k, indices_k))
    A = T.sp.match_buffer(a, [I, J, K], "float32")
    B = T.sp.match_buffer(b, [I], "float32")
    J_indptr = T.sp.match_buffer(indptr_j, [I], "int32", extra_storage=1)
    K_indptr = T.sp.match_buffer(indptr_k, [I, J], "int32", extra_storage=1)
    T.assume_buffer_domain(J_indptr, [0, nnz_j])
    T.assume_buffer_domain(K_indptr, [0, nnz_k])
    for i in T.serial(m):
        with T.block("csf0"):
            vi = T.axis.spatial(m, i)
            with T.init():
                B[vi] = T.float32(0)
            for j in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
                with T.block("csf1"):
                    vj = T.axis.reduce(n, j)
                    for k in T.serial(K_indptr[vi, vj + 1] - K_indptr[vi, vj]):
                        with T.block("csf2"):
                            vk = T.axis.reduce(l, k)
                            B[vi] = B[vi] + A[vi, vj, vk] * A[vi, vj, vk]
"#;

#[test]
fn csf_square_sum_stage_ii() {
    // 3 × 3 × 4 tensor: slice 0 empty, slice 1 with fibers of 2 and 0 elements, slice 2 with
    // fibers of 1, 4 and 1 elements.
    let indptr_j = [0, 0, 2, 5];
    let indices_j = [0, 2, 0, 1, 2];
    let indptr_k = [0, 2, 2, 3, 7, 8];
    let indices_k = [1, 3, 0, 0, 1, 2, 3, 2];
    let vals = [1.0, 2.0, 3.0, 0.5, -1.0, 1.5, 2.0, -2.0];
    // B[i] = sum of squares of the values under slice i, by slice.
    let want = [0.0, 1.0 + 4.0, 9.0 + 0.25 + 1.0 + 2.25 + 4.0 + 4.0];
    let f = parse(CSF_SQUARE_SUM_II);
    let mut a = args(vec![
        ("a", f32_arr(&vals)),
        ("b", f32_arr(&[5.0; 3])),
        ("indptr_j", i32_arr(&indptr_j)),
        ("indices_j", i32_arr(&indices_j)),
        ("indptr_k", i32_arr(&indptr_k)),
        ("indices_k", i32_arr(&indices_k)),
        ("m", int(3)),
        ("n", int(3)),
        ("l", int(4)),
        ("nnz_j", int(5)),
        ("nnz_k", int(8)),
    ]);
    run(&f, &mut a);
    assert_close(&out(&a, "b"), &want, "b");
}
