//! Tests of `lower_sparse_buffer`: the RFC's BSR example lowers to the stage-III form of SPEC
//! §3.4; every catalog kernel lowers (through `lower_sparse_iter`) to IR that verifies at stage
//! III, prints, and parses back equal; functions of other stages are left alone.

use sparsetir_ir::equal::func_eq;
use sparsetir_ir::printer::print_func;
use std::collections::HashMap;

use sparsetir_eval::{run_func, ArgValue};
use sparsetir_formats::Tensor;
use sparsetir_ir::{verify_func, DType, IRModule, PrimFunc, Stage, Stmt};
use sparsetir_transform::{
    lower_sparse_buffer, lower_sparse_buffer_module, lower_sparse_iter, LowerError, LowerOptions,
};

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

/// DCSR (SPEC §2.1): `O = dense_fixed(1)`, so `off(I) = I_indptr_data[vo] + vi` — and with `vo`
/// known to be 0, the load of `indptr[0]` disappears.
const DCSR_SPMV: &str = r#"
@T.prim_func
def dcsr_spmv(a: T.handle, x: T.handle, y: T.handle, indptr_i: T.handle, indices_i: T.handle,
              indptr_j: T.handle, indices_j: T.handle, m: T.int32, n: T.int32, nnz_i: T.int32,
              nnz_j: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    O = T.sp.dense_fixed(1)
    I = T.sp.compressed_varied(O, (m, nnz_i), (indptr_i, indices_i))
    J = T.sp.compressed_varied(I, (n, nnz_j), (indptr_j, indices_j))
    J_detach = T.sp.dense_fixed(n)
    I_detach = T.sp.dense_fixed(m)
    A = T.sp.match_buffer(a, (O, I, J), "float32")
    X = T.sp.match_buffer(x, (J_detach,), "float32")
    Y = T.sp.match_buffer(y, (I_detach,), "float32")
    with T.sp.iteration([O, I, J], "SSR", "dcsr_spmv") as [o, i, j]:
        with T.init():
            Y[i] = T.float32(0)
        Y[i] = Y[i] + A[o, i, j] * X[j]
"#;

fn f32s(v: &[f64]) -> ArgValue {
    ArgValue::Array(Tensor::from_f64(DType::F32, v).expect("f32"))
}
fn i32s(v: &[i64]) -> ArgValue {
    ArgValue::Array(Tensor::from_i64(DType::I32, v).expect("i32"))
}

#[test]
fn dcsr_flattens_the_whole_chain() {
    let out = stage_iii(&parse(DCSR_SPMV));
    let text = print_func(&out);
    for want in [
        "A_data = T.match_buffer(a, (nnz_j,), \"float32\")",
        "I_indptr_data = T.match_buffer(indptr_i, (2,), \"int32\")",
        "J_indptr_data = T.match_buffer(indptr_j, (nnz_i + 1,), \"int32\")",
        // indptr_i[vo] with vo in [0, 1) is indptr_i[0] = 0.
        "T.serial(I_indptr_data[vo + 1])",
        "A_data[vj + J_indptr_data[vi]]",
        "Y_data[I_indices_data[vi]] = T.float32(0)",
    ] {
        assert!(text.contains(want), "missing `{want}` in\n{text}");
    }
    assert!(!text.contains("I_indptr_data[vo]"), "{text}");

    // Rows 0 and 2 of a 4 x 3 matrix are stored: [1, _, 2] and [_, 3, _]; x = [10, 20, 30].
    let mut args: HashMap<String, ArgValue> = HashMap::new();
    for (k, v) in [("m", 4), ("n", 3), ("nnz_i", 2), ("nnz_j", 3)] {
        args.insert(k.into(), ArgValue::Int(v));
    }
    args.insert("indptr_i".into(), i32s(&[0, 2]));
    args.insert("indices_i".into(), i32s(&[0, 2]));
    args.insert("indptr_j".into(), i32s(&[0, 2, 3]));
    args.insert("indices_j".into(), i32s(&[0, 2, 1]));
    args.insert("a".into(), f32s(&[1.0, 2.0, 3.0]));
    args.insert("x".into(), f32s(&[10.0, 20.0, 30.0]));
    args.insert("y".into(), f32s(&[5.0; 4]));
    let mut want = args.clone();
    sparsetir_eval::eval_func(&parse(DCSR_SPMV), &mut want).expect("stage I runs");
    run_func(&out, &mut args).expect("stage III runs");
    let y = |a: &HashMap<String, ArgValue>| match a.get("y") {
        Some(ArgValue::Array(t)) => t.to_f64_vec(),
        _ => panic!("no y"),
    };
    // Rows without stored elements keep their value.
    assert_eq!(
        y(&args),
        vec![1.0 * 10.0 + 2.0 * 30.0, 5.0, 3.0 * 20.0, 5.0]
    );
    assert_eq!(y(&want), y(&args));
}

/// A stage-II function over the given axes and buffer declaration, with one store.
fn stage_ii_with(decls: &str, store: &str) -> PrimFunc {
    parse(&format!(
        r#"
@T.prim_func
def f(a: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32,
      k: T.int32) -> None:
    T.func_attr({{"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 1}})
{decls}
    for i in T.serial(m):
        with T.block("b"):
            vi = T.axis.remap("S", [i])
            {store}
"#
    ))
}

#[test]
fn unsupported_layouts_are_errors() {
    let cases = [
        (
            // Two varied chains under I in one buffer.
            "    I = T.sp.dense_fixed(m)\n    \
             J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices))\n    \
             J2 = T.sp.dense_varied(I, (k, nnz), indptr)\n    \
             A = T.sp.match_buffer(a, (I, J, J2), \"float32\")",
            "A[vi, 0, 0] = T.float32(1)",
            "does not directly follow",
        ),
        (
            // A varied chain headed by a compressed_fixed axis.
            "    I = T.sp.dense_fixed(m)\n    \
             J = T.sp.compressed_fixed(I, (n, 2), indices)\n    \
             K = T.sp.dense_varied(J, (k, nnz), indptr)\n    \
             A = T.sp.match_buffer(a, (I, J, K), \"float32\")",
            "A[vi, 0, 0] = T.float32(1)",
            "heads a varied chain",
        ),
        (
            // A chain ending in a dense_varied axis without nnz.
            "    I = T.sp.dense_fixed(m)\n    J = T.sp.dense_varied(I, n, indptr)\n    \
             A = T.sp.match_buffer(a, (I, J), \"float32\")",
            "A[vi, 0] = T.float32(1)",
            "no declared nnz",
        ),
    ];
    for (decls, store, message) in cases {
        let f = stage_ii_with(decls, store);
        match lower_sparse_buffer(&f) {
            Err(e @ LowerError::Unsupported { .. }) => {
                assert!(e.message().contains(message), "{e}")
            }
            other => panic!("expected an unsupported-layout error, got {other:?}"),
        }
    }
}

#[test]
fn wrong_index_count_is_an_error() {
    let mut f = stage_ii_with(
        "    I = T.sp.dense_fixed(m)\n    \
         J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices))\n    \
         A = T.sp.match_buffer(a, (I, J), \"float32\")",
        "A[vi, 0] = T.float32(1)",
    );
    // The parser checks index counts: drop one index from the parsed store.
    let Stmt::For(l) = &mut f.body else {
        panic!("a loop")
    };
    let Stmt::Block(b) = &mut l.body else {
        panic!("a block")
    };
    let Stmt::Store(st) = &mut b.body else {
        panic!("a store")
    };
    st.indices.pop();
    assert!(matches!(
        lower_sparse_buffer(&f),
        Err(LowerError::Invalid { .. })
    ));
}

#[test]
fn missing_indptr_buffer_is_declared() {
    // No `J_indptr` buffer at stage II: the pass declares one over the axis's indptr handle.
    let f = stage_ii_with(
        "    I = T.sp.dense_fixed(m)\n    \
         J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices))\n    \
         A = T.sp.match_buffer(a, (I, J), \"float32\")",
        "A[vi, 1] = T.float32(1)",
    );
    let out = lower_sparse_buffer(&f).expect("lowers");
    verify_func(&out).expect("verifies");
    let text = print_func(&out);
    assert!(
        text.contains("J_indptr_data = T.match_buffer(indptr, (m + 1,), \"int32\")"),
        "{text}"
    );
    assert!(
        text.contains("A_data[J_indptr_data[vi] + 1] = T.float32(1)"),
        "{text}"
    );
    let module = IRModule {
        funcs: vec![f.clone(), out.clone()],
    };
    let lowered = lower_sparse_buffer_module(&module).expect("module lowers");
    assert!(func_eq(&lowered.funcs[0], &out) && func_eq(&lowered.funcs[1], &out));
}
