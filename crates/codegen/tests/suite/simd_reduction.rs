//! C backend tests of loops annotated `{"simd_reduction": OP}` (schedule primitive
//! `vectorize_reduction`): the accumulator form (snapshot), the hoisted loads and guards, and
//! the typed errors for annotated loops of the wrong shape. Execution against the interpreter is
//! in `exec.rs` (`simd_reductions_match_the_interpreter`).

use crate::common;

use common::*;

#[test]
fn snapshot_simd_reductions() {
    insta::assert_snapshot!(kernel_text(&emit_script(include_str!(
        "../scripts/simd_reduction.sp"
    ))));
}

#[test]
fn accumulator_pragmas_guards_and_hoisting() {
    let src = kernel_text(&emit_script(include_str!("../scripts/simd_reduction.sp")));
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

#[test]
fn snapshot_lane_reductions() {
    insta::assert_snapshot!(kernel_text(&emit_script(include_str!(
        "../scripts/simd_lanes.sp"
    ))));
}

#[test]
fn lane_partial_sums_tree_and_factor() {
    let src = kernel_text(&emit_script(include_str!("../scripts/simd_lanes.sp")));
    // float over 37 iterations: 16 lanes (one 64-byte vector), two full chunks, a remainder
    // of 5 into the first lanes, a pairwise final sum, and the invariant factor X applied once.
    assert!(src.contains("float S_acc_part[16] = {0};"), "{src}");
    assert!(
        src.contains("for (int32_t k_c = 0; k_c < 32; k_c += 16) {"),
        "{src}"
    );
    assert!(
        src.contains("S_acc_part[k - k_c] = S_acc_part[k - k_c] + "),
        "{src}"
    );
    assert!(src.contains("for (int32_t k = 32; k < 37; ++k) {"), "{src}");
    assert!(src.contains("S_acc_part[k - 32]"), "{src}");
    for w in [8, 4, 2, 1] {
        let t = format!("lane < {w}; ++lane) S_acc_part[lane] += S_acc_part[lane + {w}];");
        assert!(src.contains(&t), "{t}\n{src}");
    }
    assert!(src.contains("S[i] = S_acc + X_h * S_acc_part[0];"), "{src}");
    // The factored loop no longer multiplies by X.
    let body = &src[src.find("S_acc_part[k - k_c] =").expect("body")..];
    let body = &body[..body.find('\n').expect("line")];
    assert!(!body.contains('X'), "{body}");
    // int32 with "lanes": 4 (no factoring for integers), no remainder.
    assert!(src.contains("int32_t SI_acc_part[4] = {0};"), "{src}");
    assert!(src.contains("k2_c < 32; k2_c += 4"), "{src}");
    assert!(src.contains("SI[i] = SI_acc + SI_acc_part[0];"), "{src}");
    // float64 over 31 iterations: 8 lanes, chunks up to 24, remainder 24..31; the factor is a
    // cast, not a hoisted load, so it stays inside.
    assert!(src.contains("double SD_acc_part[8] = {0};"), "{src}");
    assert!(
        src.contains("for (int32_t k3_c = 0; k3_c < 24; k3_c += 8) {"),
        "{src}"
    );
    assert!(
        src.contains("for (int32_t k3 = 24; k3 < 31; ++k3) {"),
        "{src}"
    );
    assert!(src.contains("SD[i] = SD_acc + SD_acc_part[0];"), "{src}");
}

#[test]
fn bad_lanes_are_refused() {
    for bad in ["3", "0", "128", "\"wide\""] {
        let src = format!(
            "{HEADER}        for k in T.serial(16, annotations={{\"simd_reduction\": \"+\", \"lanes\": {bad}}}):
            with T.block(\"b\"):
                vi, vk = T.axis.remap(\"SR\", [i, k])
                S[vi] = S[vi] + A[vi, vk]
"
        );
        refused(&src, "expected a power of two from 1 to 64");
    }
}

#[test]
fn snapshot_prefetch() {
    insta::assert_snapshot!(kernel_text(&emit_script(include_str!(
        "../scripts/prefetch.sp"
    ))));
}

#[test]
fn prefetch_reads_indices_in_bounds_and_covers_the_row() {
    let src = kernel_text(&emit_script(include_str!("../scripts/prefetch.sp")));
    // The gathered row two elements ahead, clamped to the row's last element; 24 floats = 96
    // bytes = two 64-byte lines.
    let ahead = "J[P[i] + (j + 2 < j_ext ? j + 2 : j_ext - 1)]";
    let lines: Vec<&str> = src
        .lines()
        .filter(|l| l.contains("__builtin_prefetch"))
        .collect();
    assert_eq!(lines.len(), 2, "{src}");
    assert!(lines.iter().all(|l| l.contains(ahead)), "{src}");
    assert!(lines[1].contains("+ 16"), "{src}");
}

#[test]
fn flat_prefetch_clamps_every_read_into_its_buffer() {
    let src = kernel_text(&emit_script(include_str!("../scripts/prefetch_flat.sp")));
    // Two elements ahead in the flat position space (past the row's end): the index read that
    // depends on the look-ahead is clamped into `J` (nnz elements) and the prefetch skipped when
    // `J` is empty; the row pointer `P[i]` does not move with the look-ahead and is read as is.
    let lines: Vec<&str> = src
        .lines()
        .filter(|l| l.contains("__builtin_prefetch"))
        .collect();
    assert_eq!(lines.len(), 2, "{src}");
    for l in &lines {
        assert!(
            l.contains(
                "J[sptir_max_i64(0, sptir_min_i64((int64_t)(P[i] + (j + 2)), ((int64_t)nnz) - 1))]"
            ),
            "{src}"
        );
        assert!(
            l.trim_start()
                .starts_with("if (((int64_t)nnz) > 0) __builtin_prefetch("),
            "{src}"
        );
        assert!(!l.contains("j_ext"), "{src}");
    }
}

#[test]
fn folded_init_starts_the_accumulator() {
    // The init runs exactly at k = 0 and only sets the element: the accumulator starts at the
    // init value and the loop neither stores the init nor reads the element first.
    let src = kernel_text(&emit_script(&format!(
        "{HEADER}        for k in T.serial(16, annotations={{\"simd_reduction\": \"+\", \"lanes\": 8}}):
            with T.block(\"b\"):
                vi, vk = T.axis.remap(\"SR\", [i, k])
                with T.init():
                    S[vi] = T.float32(2)
                S[vi] = S[vi] + A[vi, vk]
"
    )));
    assert!(src.contains("float S_acc = 2.0f;"), "{src}");
    assert!(!src.contains("S[vi] = 2.0f"), "{src}");
    assert!(!src.contains("vk == 0"), "{src}");
    // An init that also runs at other iterations (the reduction iterator is not the loop
    // variable itself) is refused.
    let src = format!(
        "{HEADER}        for k in T.serial(16, annotations={{\"simd_reduction\": \"+\"}}):
            with T.block(\"b\"):
                vi = T.axis.spatial(4, i)
                vk = T.axis.reduce(32, k * 2)
                with T.init():
                    S[vi] = T.float32(0)
                S[vi] = S[vi] + A[vi, vk // 2]
"
    );
    refused(
        &src,
        "has an init that does not run exactly at the loop's first iteration",
    );
}

#[test]
fn bad_prefetches_are_refused() {
    for (ann, needle) in [
        ("\"B\"", "expected \"BUFFER:DISTANCE\""),
        ("\"A:0\"", "expected \"BUFFER:DISTANCE\""),
        ("\"A:4:wide\"", "expected \"BUFFER:DISTANCE\""),
        ("\"Q:4\"", "no buffer named `Q`"),
    ] {
        let src = format!(
            "{HEADER}        for k in T.serial(16, annotations={{\"prefetch\": {ann}}}):
            with T.block(\"b\"):
                vi, vk = T.axis.remap(\"SR\", [i, k])
                S[vi] = S[vi] + A[vi, vk]
"
        );
        refused(&src, needle);
    }
    // A load under a predicate is not prefetched (its indices may be out of range there).
    let src = format!(
        "{HEADER}        for k in T.serial(16, annotations={{\"prefetch\": \"A:4\"}}):
            with T.block(\"b\"):
                vi, vk = T.axis.remap(\"SR\", [i, k])
                T.where(vk < 3)
                S[vi] = S[vi] + A[vi, vk]
"
    );
    refused(&src, "no load of `A`");
}
