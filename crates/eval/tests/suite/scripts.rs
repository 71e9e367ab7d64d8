//! Script-text tests of the reference evaluator: functions parsed by `sparsetir-syntax`, run on
//! small hand-checked data (csr2bsr with index arithmetic, a default value and extra storage).

use crate::common;

use common::*;
use sparsetir_eval::ArgValue;

const CSR2BSR: &str = r#"
@T.prim_func
def csr2bsr(a: T.handle, bsr: T.handle, indptr: T.handle, indices: T.handle,
            indptr_b: T.handle, indices_b: T.handle, nnz: T.int32, nnzb: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(4)
    J = T.sp.compressed_varied(I, (4, nnz), (indptr, indices), "int32")
    IO = T.sp.dense_fixed(2)
    JO = T.sp.compressed_varied(IO, (2, nnzb), (indptr_b, indices_b), "int32")
    II = T.sp.dense_fixed(2)
    JI = T.sp.dense_fixed(2)
    A = T.sp.match_buffer(a, (I, J), "float32")
    Bsr = T.sp.match_buffer(bsr, (IO, JO, II, JI), "float32", extra_storage=1)
    with T.sp.iteration([I, J], "SS", "csr2bsr") as [i, j]:
        Bsr[i // 2, j // 2, i % 2, j % 2] = A[i, j]
"#;

#[test]
fn csr2bsr_from_script() {
    let f = sparsetir_syntax::parse_func(CSR2BSR).expect("parses");
    // 4x4 matrix with entries (0,0)=1, (0,3)=2, (1,1)=3, (3,2)=4, (3,3)=5.
    // Blocks stored: row block 0 → column blocks [0, 1]; row block 1 → [1].
    // The (1, 0) block is not stored, so nothing maps there; (3,2) and (3,3) go to block (1, 1).
    let mut a = args(vec![
        ("nnz", ArgValue::Int(5)),
        ("nnzb", ArgValue::Int(3)),
        ("indptr", i32_arr(&[0, 2, 3, 3, 5])),
        ("indices", i32_arr(&[0, 3, 1, 2, 3])),
        ("indptr_b", i32_arr(&[0, 2, 3])),
        ("indices_b", i32_arr(&[0, 1, 1])),
        ("a", f32_arr(&[1.0, 2.0, 3.0, 4.0, 5.0])),
        ("bsr", f32_arr(&[0.0; 13])),
    ]);
    run(&f, &mut a).expect("runs");
    // Layout (nnzb, 2, 2) + 1 extra slot; block p holds rows (ii, ji).
    let want = [
        1.0, 0.0, 0.0, 3.0, // block (0, 0): (0,0)=1, (1,1)=3
        0.0, 2.0, 0.0, 0.0, // block (0, 1): (0,3) → ii=0, ji=1
        0.0, 0.0, 4.0, 5.0, // block (1, 1): (3,2) → ii=1, ji=0; (3,3) → ii=1, ji=1
        0.0, // extra storage
    ];
    assert_close(&out(&a, "bsr"), &want, "bsr");
}

const DEFAULT: &str = r#"
@T.prim_func
def densify(a: T.handle, d: T.handle, indptr: T.handle, indices: T.handle, m: T.int32,
            n: T.int32, nnz: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices), "int32")
    J_detach = T.sp.dense_fixed(n)
    A = T.sp.match_buffer(a, (I, J), "float32", default_value=T.float32(-1))
    D = T.sp.match_buffer(d, (I, J_detach), "float32")
    with T.sp.iteration([I, J_detach], "SS", "densify") as [i, j]:
        D[i, j] = A[i, j] * T.float32(2)
"#;

#[test]
fn default_value_from_script() {
    let f = sparsetir_syntax::parse_func(DEFAULT).expect("parses");
    let mut rng = Rng::new(21);
    let mat = Csr::random(&mut rng, 4, 5, 40, &[2], &[1]);
    let mut a = args(vec![
        ("m", ArgValue::Int(4)),
        ("n", ArgValue::Int(5)),
        ("nnz", ArgValue::Int(mat.nnz() as i64)),
        ("indptr", i32_arr(&mat.indptr)),
        ("indices", i32_arr(&mat.indices)),
        ("a", f32_arr(&mat.vals)),
        ("d", f32_arr(&[0.0; 20])),
    ]);
    run(&f, &mut a).expect("runs");
    let want: Vec<f64> = mat.dense(-1.0).concat().iter().map(|x| 2.0 * x).collect();
    assert_close(&out(&a, "d"), &want, "densify");
}

const PADDED_ELL_ROWSUM: &str = r#"
@T.prim_func
def ell_rowsum(a: T.handle, y: T.handle, indices: T.handle, m: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_fixed(I, (4, 2), indices, "int32", sorted=False)
    A = T.sp.match_buffer(a, (I, J), "float32")
    Y = T.sp.match_buffer(y, (I,), "float32")
    with T.sp.iteration([I, J], "SR", "rowsum") as [i, j]:
        with T.init():
            Y[i] = T.float32(0)
        Y[i] = Y[i] + A[i, j] * T.float32(10) + A[i, 0]
"#;

#[test]
fn access_at_the_iterated_element_resolves_to_it_even_with_repeated_coordinates() {
    // Row 0 stores column 0 twice (a padded ELL row: value 5, then padding 0 at column 0);
    // row 1 stores columns 1 and 3.
    let f = sparsetir_syntax::parse_func(PADDED_ELL_ROWSUM).expect("parses");
    let mut a = args(vec![
        ("m", ArgValue::Int(2)),
        ("indices", i32_arr(&[0, 0, 1, 3])),
        ("a", f32_arr(&[5.0, 0.0, 2.0, 7.0])),
        ("y", f32_arr(&[0.0; 2])),
    ]);
    run(&f, &mut a).expect("runs");
    // `A[i, j]` is the element being visited (5 then the padding 0), never the first match;
    // `A[i, 0]` names a coordinate, not the iterator, and resolves by search like the lowered
    // binary search (first match in row 0: 5; absent in row 1: 0).
    let want = [5.0 * 10.0 + 5.0 + 0.0 * 10.0 + 5.0, 2.0 * 10.0 + 7.0 * 10.0];
    assert_close(&out(&a, "y"), &want, "y");
}
