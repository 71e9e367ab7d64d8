//! Tests of `lower_sparse_buffer`: the RFC's BSR example lowers to the stage-III form of SPEC
//! §3.4; every catalog kernel lowers (through `lower_sparse_iter`) to IR that verifies at stage
//! III, prints, and parses back equal; functions of other stages are left alone.

use sparsetir_ir::equal::func_eq;
use sparsetir_ir::printer::print_func;
use sparsetir_ir::{verify_func, PrimFunc, Stage};
use sparsetir_transform::{lower_sparse_buffer, lower_sparse_iter, LowerOptions};

fn parse(src: &str) -> PrimFunc {
    match sparsetir_syntax::parse_func(src) {
        Ok(f) => f,
        Err(d) => panic!("parse failed: {d:?}"),
    }
}

fn stage_iii(f: &PrimFunc) -> PrimFunc {
    let ii = lower_sparse_iter(f, &LowerOptions::default()).expect("lower_sparse_iter");
    let iii = match lower_sparse_buffer(&ii) {
        Ok(o) => o,
        Err(e) => panic!("{}: lower_sparse_buffer failed: {e}", f.name),
    };
    if let Err(errs) = verify_func(&iii) {
        panic!(
            "{}: stage III does not verify: {errs:?}\n{}",
            f.name,
            print_func(&iii)
        );
    }
    iii
}

#[test]
fn catalog_lowers_verifies_and_round_trips() {
    for k in sparsetir_ops::catalog() {
        let f = sparsetir_ops::load(k.name).expect("kernel parses");
        let out = stage_iii(&f);
        assert_eq!(out.stage(), Stage::III, "{}", k.name);
        assert!(out.axes.is_empty(), "{}", k.name);
        let text = print_func(&out);
        println!("{text}");
        let back = parse(&text);
        assert!(
            func_eq(&out, &back),
            "{}: printed stage III does not parse back equal\n{text}",
            k.name
        );
    }
}

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

/// The stage-III form of SPEC §3.4, written out independently: the RFC's buffers and store.
/// Two deliberate differences from the RFC's text: no `strides=[1]` (compact row-major either
/// way), and the outer block's regions keep what stage II knew (`J_indptr_data[vi:vi + 2]`,
/// `A_data[0:nnzb, vbi, vbj]`, `B_data[0:mb, vbj, vf]`): only the varied dimension is widened to
/// the whole flat range, where the RFC widens every dimension.
const BSRMM_STAGE_III: &str = r#"
@T.prim_func
def bsrmm(a: T.handle, b: T.handle, c: T.handle, indptr: T.handle, indices: T.handle,
          nb: T.int32, mb: T.int32, nnzb: T.int32, blk: T.int32, feat_size: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 0})
    A_data = T.match_buffer(a, [nnzb, blk, blk], dtype="float32")
    B_data = T.match_buffer(b, [mb, blk, feat_size], dtype="float32")
    C_data = T.match_buffer(c, [nb, blk, feat_size], dtype="float32")
    J_indptr_data = T.match_buffer(indptr, [nb + 1], dtype="int32")
    J_indices_data = T.match_buffer(indices, [nnzb], dtype="int32")
    for i, bi, bj, f in T.grid(nb, blk, blk, feat_size):
        with T.block("bsrmm0"):
            vi, vbi, vbj, vf = T.axis.remap("SSRS", [i, bi, bj, f])
            T.reads(
                J_indptr_data[vi : vi + 2],
                A_data[0:nnzb, vbi, vbj],
                B_data[0:mb, vbj, vf],
                J_indices_data[0:nnzb],
            )
            T.writes(C_data[vi, vbi, vf])
            T.block_attr({"sparse": True})
            with T.init():
                C_data[vi, vbi, vf] = T.float32(0)
            for j in T.serial(J_indptr_data[vi + 1] - J_indptr_data[vi]):
                with T.block("bsrmm1"):
                    vj = T.axis.reduce(mb, j)
                    T.reads(
                        A_data[(vj + J_indptr_data[vi]), vbi, vbj],
                        B_data[J_indices_data[vj + J_indptr_data[vi]], vbj, vf],
                        J_indices_data[vj + J_indptr_data[vi]],
                    )
                    T.writes(C_data[vi, vbi, vf])
                    T.block_attr({"sparse": True})
                    C_data[vi, vbi, vf] = (
                        C_data[vi, vbi, vf]
                        + A_data[(vj + J_indptr_data[vi]), vbi, vbj]
                        * B_data[J_indices_data[vj + J_indptr_data[vi]], vbj, vf])
"#;

#[test]
fn rfc_bsr_example_lowers_to_the_spec_form() {
    let got = stage_iii(&parse(BSRMM_STAGE_I));
    let want = parse(BSRMM_STAGE_III);
    assert!(
        func_eq(&got, &want),
        "stage III differs from SPEC §3.4:\n{}\nexpected:\n{}",
        print_func(&got),
        print_func(&want)
    );
    let a = got.buffer_by_name("A_data").expect("A_data");
    assert_eq!(
        print_func(&got)
            .matches("A_data = T.match_buffer(a, (nnzb, blk, blk)")
            .count(),
        1
    );
    assert_eq!(got.buffers[a].ndim(), 3);
}

#[test]
fn other_stages_are_left_alone() {
    let f = parse(BSRMM_STAGE_I);
    let same = lower_sparse_buffer(&f).expect("no-op");
    assert_eq!(same, f);
    let iii = stage_iii(&f);
    assert_eq!(lower_sparse_buffer(&iii).expect("no-op"), iii);
}
