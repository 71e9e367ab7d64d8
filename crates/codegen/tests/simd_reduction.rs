//! C backend tests of loops annotated `{"simd_reduction": OP}` (schedule primitive
//! `vectorize_reduction`): the accumulator form (snapshot), the hoisted loads and guards, and
//! the typed errors for annotated loops of the wrong shape. Execution against the interpreter is
//! in `exec.rs` (`simd_reductions_match_the_interpreter`).

use sparsetir_codegen::{emit_c, CodegenError};
use sparsetir_ir::PrimFunc;

fn parse(src: &str) -> PrimFunc {
    sparsetir_syntax::parse_func(src).unwrap_or_else(|d| panic!("parse: {d:?}"))
}

fn kernel_text(src: &str) -> String {
    let m = emit_c(&parse(src)).unwrap_or_else(|e| panic!("{e}"));
    let at = m
        .source
        .find("static int32_t sptir_kernel")
        .expect("kernel");
    m.source[at..].to_string()
}

#[test]
fn snapshot_simd_reductions() {
    insta::assert_snapshot!(kernel_text(include_str!("scripts/simd_reduction.sp")));
}

#[test]
fn accumulator_pragmas_guards_and_hoisting() {
    let src = kernel_text(include_str!("scripts/simd_reduction.sp"));
    // `+` on float and int: the OpenMP reduction; the element is loaded once and stored once.
    assert!(src.contains("#pragma omp simd reduction(+:S_acc)"), "{src}");
    assert!(src.contains("S_acc = S_acc + "), "{src}");
    assert!(src.contains("S[i] = S_acc;"), "{src}");
    assert!(
        src.contains("#pragma omp simd reduction(+:SI_acc)"),
        "{src}"
    );
    // Float max/min: a declared reduction on fmaxf/fminf whose identity is NaN.
    assert!(
        src.contains(
            "#pragma omp declare reduction(sptir_fmaxf : float : omp_out = fmaxf(omp_out, \
             omp_in)) initializer(omp_priv = NAN)"
        ),
        "{src}"
    );
    assert!(src.contains("reduction(sptir_fmaxf:MX_acc)"), "{src}");
    assert!(src.contains("reduction(sptir_fminf:MN_acc)"), "{src}");
    // A data-dependent extent guards the accumulator (an empty loop touches nothing).
    assert!(
        src.contains("if (P[i + 1] - P[i] > 0) { /* SIMD reduction (+) into S */"),
        "{src}"
    );
    // A predicate that does not move with the loop guards the whole reduction, and the loads
    // that do not move with the loop are read once before it.
    assert!(
        src.contains("if (n > 0 && (i + 1) < m) { /* SIMD reduction (+) into SP */"),
        "{src}"
    );
    assert!(src.contains("const int32_t P_h = P[i + 1];"), "{src}");
    // A predicate on the loop variable stays inside and nothing is hoisted past it.
    let moving = &src[src.find("block moving_guard").expect("block")..];
    assert!(moving.contains("if (vk_5 < 3) {"), "{src}");
    assert!(moving.contains("(float)P[vi_5]"), "{src}");
}

fn refused(src: &str, needle: &str) {
    let e = emit_c(&parse(src)).expect_err("must be refused");
    assert!(matches!(e, CodegenError::Unsupported { .. }), "{e:?}");
    assert!(e.to_string().contains(needle), "{e}");
}

const HEADER: &str = r#"
@T.prim_func
def bad(a: T.handle, s: T.handle, m: T.int32, n: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (m, n), "float32")
    S = T.match_buffer(s, (m,), "float32")
    for i in T.serial(m):
"#;

#[test]
fn malformed_simd_reductions_are_refused() {
    // Unknown operator.
    let src = format!(
        "{HEADER}        for k in T.vectorized(n, annotations={{\"simd_reduction\": \"*\"}}):
            with T.block(\"b\"):
                vi, vk = T.axis.remap(\"SR\", [i, k])
                S[vi] = S[vi] * A[vi, vk]
"
    );
    refused(&src, "expected \"+\", \"max\" or \"min\"");
    // The annotation does not match the store's operator.
    let src = format!(
        "{HEADER}        for k in T.vectorized(n, annotations={{\"simd_reduction\": \"max\"}}):
            with T.block(\"b\"):
                vi, vk = T.axis.remap(\"SR\", [i, k])
                S[vi] = S[vi] + A[vi, vk]
"
    );
    refused(&src, "the annotation says");
    // The value reads the reduced buffer.
    let src = format!(
        "{HEADER}        for k in T.vectorized(n, annotations={{\"simd_reduction\": \"+\"}}):
            with T.block(\"b\"):
                vi, vk = T.axis.remap(\"SR\", [i, k])
                S[vi] = S[vi] + S[0] * A[vi, vk]
"
    );
    refused(&src, "reads the reduced buffer");
    // The reduced element moves with the loop.
    let src = format!(
        "{HEADER}        for k in T.vectorized(m, annotations={{\"simd_reduction\": \"+\"}}):
            with T.block(\"b\"):
                vi, vk = T.axis.remap(\"SR\", [i, k])
                S[vk] = S[vk] + A[vi, vk]
"
    );
    refused(&src, "changes with the loop");
    // The body is not a block.
    let src = format!(
        "{HEADER}        for k in T.vectorized(n, annotations={{\"simd_reduction\": \"+\"}}):
            S[i] = S[i] + A[i, k]
"
    );
    refused(&src, "not exactly one block");
    // A parallel loop cannot carry the annotation.
    let src = format!(
        "{HEADER}        for k in T.parallel(n, annotations={{\"simd_reduction\": \"+\"}}):
            with T.block(\"b\"):
                vi, vk = T.axis.remap(\"SR\", [i, k])
                S[vi] = S[vi] + A[vi, vk]
"
    );
    refused(&src, "not vectorized");
}
