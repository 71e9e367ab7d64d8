//! Tests of `lower_sparse_iter`: the RFC's BSR example lowers to the RFC's stage-II form; every
//! catalog kernel lowers to IR that verifies at stage II, prints, and parses back equal.

use sparsetir_ir::equal::func_eq;
use sparsetir_ir::printer::print_func;
use sparsetir_ir::{verify_func, PrimFunc, Stage};
use sparsetir_transform::{lower_sparse_iter, LowerOptions};

const BSRMM_STAGE_I: &str = r#"
@T.prim_func
def bsrmm(a: T.handle, b: T.handle, c: T.handle, indptr: T.handle, indices: T.handle,
          nb: T.int32, mb: T.int32, nnzb: T.int32, blk: T.int32, feat_size: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(nb)
    J = T.sp.compressed_varied(I, (mb, nnzb), (indptr, indices), "int32")
    J_detach = T.sp.dense_fixed(mb)
    BI = T.sp.dense_fixed(blk)
    BJ = T.sp.dense_fixed(blk)
    F = T.sp.dense_fixed(feat_size)
    A = T.sp.match_buffer(a, (I, J, BI, BJ), "float32")
    B = T.sp.match_buffer(b, (J_detach, BJ, F), "float32")
    C = T.sp.match_buffer(c, (I, BI, F), "float32")
    with T.sp.iteration([I, BI, BJ, F, J], "SSRSR", "bsrmm") as [i, bi, bj, f, j]:
        with T.init():
            C[i, bi, f] = T.float32(0)
        C[i, bi, f] = C[i, bi, f] + A[i, j, bi, bj] * B[j, bj, f]
"#;

/// The RFC's stage-II form of the BSR example (SPEC §3.4), written out independently.
const BSRMM_STAGE_II: &str = r#"
@T.prim_func
def bsrmm_stage_ii(a: T.handle, b: T.handle, c: T.handle, indptr: T.handle, indices: T.handle,
                   nb: T.int32, mb: T.int32, nnzb: T.int32, blk: T.int32,
                   feat_size: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 1})
    I = T.sp.dense_fixed(nb, idtype="int32")
    J = T.sp.compressed_varied(I, (mb, nnzb), (indptr, indices), idtype="int32", sorted=True)
    J_dense = T.sp.dense_varied(I, (mb, nnzb), indptr, idtype="int32")
    J_detach = T.sp.dense_fixed(mb, idtype="int32")
    BI = T.sp.dense_fixed(blk, idtype="int32")
    BJ = T.sp.dense_fixed(blk, idtype="int32")
    F = T.sp.dense_fixed(feat_size, idtype="int32")
    A = T.sp.match_buffer(a, [I, J, BI, BJ], dtype="float32")
    B = T.sp.match_buffer(b, [J_detach, BJ, F], dtype="float32")
    C = T.sp.match_buffer(c, [I, BI, F], dtype="float32")
    J_indptr = T.sp.match_buffer(indptr, [I], dtype="int32", extra_storage=1)
    J_indices = T.sp.match_buffer(indices, [I, J_dense], dtype="int32")
    T.assume_buffer_domain(J_indptr, [0, nnzb])
    T.assume_buffer_domain(J_indices, [0, mb])
    for i, bi, bj, f in T.grid(nb, blk, blk, feat_size):
        with T.block("bsrmm0"):
            vi, vbi, vbj, vf = T.axis.remap("SSRS", [i, bi, bj, f])
            T.reads(J_indptr[vi : vi + 2], A[vi, 0:mb, vbi, vbj], B[0:mb, vbj, vf], J_indices[vi, 0:mb])
            T.writes(C[vi, vbi, vf])
            T.block_attr({"sparse": True})
            with T.init():
                C[vi, vbi, vf] = T.float32(0)
            for j in T.serial(J_indptr[vi + 1] - J_indptr[vi]):
                with T.block("bsrmm1"):
                    vj = T.axis.reduce(mb, j)
                    T.reads(A[vi, vj, vbi, vbj], B[J_indices[vi, vj], vbj, vf], J_indices[vi, vj])
                    T.writes(C[vi, vbi, vf])
                    T.block_attr({"sparse": True})
                    C[vi, vbi, vf] = C[vi, vbi, vf] + A[vi, vj, vbi, vbj] * B[J_indices[vi, vj], vbj, vf]
"#;

fn parse(src: &str) -> PrimFunc {
    match sparsetir_syntax::parse_func(src) {
        Ok(f) => f,
        Err(d) => panic!("parse failed: {d:?}"),
    }
}

fn lower(f: &PrimFunc, check: bool) -> PrimFunc {
    let opts = LowerOptions {
        check_invalid_binary_search: check,
        assembly: None,
    };
    let out = match lower_sparse_iter(f, &opts) {
        Ok(o) => o,
        Err(e) => panic!("{}: lowering failed: {e}", f.name),
    };
    if let Err(errs) = verify_func(&out) {
        panic!(
            "{}: stage II does not verify: {errs:?}\n{}",
            f.name,
            print_func(&out)
        );
    }
    assert_eq!(out.stage(), Stage::II);
    out
}

fn roundtrip(f: &PrimFunc) {
    let text = print_func(f);
    let back = match sparsetir_syntax::parse_func(&text) {
        Ok(b) => b,
        Err(d) => panic!("{}: printed stage II does not parse: {d:?}\n{text}", f.name),
    };
    assert!(
        func_eq(f, &back),
        "{}: round trip differs\n{text}\n---\n{}",
        f.name,
        print_func(&back)
    );
}

#[test]
fn bsrmm_matches_rfc_stage_ii() {
    let out = lower(&parse(BSRMM_STAGE_I), false);
    let expected = parse(BSRMM_STAGE_II);
    assert!(
        func_eq(&out, &expected),
        "got:\n{}\nexpected:\n{}",
        print_func(&out),
        print_func(&expected)
    );
}

#[test]
fn catalog_lowers_verifies_and_round_trips() {
    for k in sparsetir_ops::catalog() {
        let f = sparsetir_ops::load(k.name).expect("catalog kernel parses");
        for check in [false, true] {
            let out = lower(&f, check);
            roundtrip(&out);
        }
    }
}

#[test]
fn non_stage_i_is_a_clone() {
    let f = parse(BSRMM_STAGE_II);
    let out = lower_sparse_iter(&f, &LowerOptions::default()).expect("no-op");
    assert_eq!(out, f);
}

fn count_blocks(f: &PrimFunc, prefix: &str) -> usize {
    let mut n = 0;
    f.body.visit(&mut |s| {
        if let sparsetir_ir::Stmt::Block(b) = s {
            n += b.name.starts_with(prefix) as usize;
        }
    });
    n
}

#[test]
fn dense_iteration_emits_one_search() {
    let f = sparsetir_ops::load("csrmm_dense_iter").expect("parses");
    for check in [false, true] {
        let out = lower(&f, check);
        assert_eq!(count_blocks(&out, "binary_search_block_"), 1);
        let mids = out
            .buffers
            .iter()
            .filter(|(_, b)| b.name.starts_with("mid_"))
            .count();
        assert_eq!(mids, 1);
    }
}

#[test]
fn fuse_of_four_axes_is_a_lower_error() {
    let src = r#"
@T.prim_func
def f(a: T.handle, ip1: T.handle, ix1: T.handle, ip2: T.handle, ix2: T.handle, ip3: T.handle,
      ix3: T.handle, m: T.int32, n: T.int32, p: T.int32, q: T.int32, nnz1: T.int32,
      nnz2: T.int32, nnz3: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz1), (ip1, ix1), "int32")
    K = T.sp.compressed_varied(J, (p, nnz2), (ip2, ix2), "int32")
    L = T.sp.compressed_varied(K, (q, nnz3), (ip3, ix3), "int32")
    A = T.sp.match_buffer(a, (I, J, K, L), "float32")
    with T.sp.iteration([T.sp.fuse(I, J, K, L)], "SSSS", "f") as [i, j, k, l]:
        A[i, j, k, l] = T.float32(1)
"#;
    let f = parse(src);
    match lower_sparse_iter(&f, &LowerOptions::default()) {
        Err(e @ sparsetir_transform::LowerError::Unsupported { .. }) => {
            assert!(e.message().contains("fuse"), "{e}")
        }
        other => panic!("expected an unsupported error, got {other:?}"),
    }
}

/// An init must write the element its reduction updates at the same point: lowering runs the
/// inits of a block's points ahead of (or at the first step of) the reduction, not interleaved
/// with the other points' steps as stage I does, so any other init is refused, whether it goes
/// before the block (sddmm: the reduction fiber may be empty) or into it (bsrmm). The
/// unchanged kernels lower; the evaluator still runs the changed ones (their stage-I meaning
/// is defined).
#[test]
fn an_init_that_writes_another_points_element_is_unsupported() {
    for (kernel, from, to) in [
        (
            "sddmm",
            "Y[i, j] = T.float32(0)",
            "Y[i, j // 2] = T.float32(0)",
        ),
        (
            "bsrmm",
            "C[i, bi, f] = T.float32(0)",
            "C[i, bi, f - 1] = T.float32(0)",
        ),
        ("csrmm", "C[i, k] = T.float32(0)", "C[i, 0] = T.float32(0)"),
    ] {
        let src = sparsetir_ops::get(kernel).expect("catalog").source;
        assert!(src.contains(from), "{kernel}: {src}");
        lower(&parse(src), true);
        let changed = parse(&src.replace(from, to));
        match lower_sparse_iter(&changed, &LowerOptions::default()) {
            Err(e @ sparsetir_transform::LowerError::Unsupported { .. }) => {
                assert!(
                    e.message().contains("its init writes an element"),
                    "{kernel}: {e}"
                )
            }
            other => panic!("{kernel}: expected an unsupported error, got {other:?}"),
        }
    }
}
