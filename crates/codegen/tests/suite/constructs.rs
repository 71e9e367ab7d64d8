//! C backend tests of single constructs: loop kinds and their pragmas, allocations, atomics, and
//! the typed errors (stage I input, thread bindings, bad annotations); float16/bfloat16 as bit
//! patterns.

use crate::common;

use common::*;
use sparsetir_codegen::{emit_c, CodegenError};

#[test]
fn snapshot_schedules_allocations_atomics() {
    let m = emit_c(&parse(include_str!("../scripts/sched.sp"))).expect("emits");
    insta::assert_snapshot!(kernel_text(&m));
}

#[test]
fn loop_kinds_give_their_pragmas() {
    let src = m_source(include_str!("../scripts/sched.sp"));
    assert!(src.contains("#pragma omp parallel for schedule(dynamic, 64)\n"));
    assert!(src.contains("#pragma omp parallel for schedule(static, 16)\n"));
    assert!(src.contains("#pragma omp parallel for schedule(guided)\n"));
    assert!(src.contains("#pragma omp simd\n"));
    assert!(src.contains("#pragma GCC unroll 8\n"));
    assert!(src.contains("#pragma omp atomic update\n"));
    // `tmp` has 8 elements: a zeroed stack array; `big` has `n`: calloc with a NULL check.
    assert!(src.contains("float tmp[8] = {0};"));
    assert!(src.contains("calloc("));
    assert!(src.contains("sptir_status = -2;"));
    assert!(src.contains("free(big);"));
}

fn m_source(src: &str) -> String {
    emit_c(&parse(src)).expect("emits").source
}

#[test]
fn stage_one_input_is_refused() {
    let f = sparsetir_ops::load("csrmm").expect("loads");
    let e = emit_c(&f).expect_err("stage I must be refused");
    assert!(matches!(e, CodegenError::NotStageIII { .. }), "{e:?}");
    assert!(e.to_string().contains("lower it first"), "{e}");
}

const THREADS: &str = r#"
@T.prim_func
def tb(c: T.handle, m: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    C = T.match_buffer(c, (m,), "float32")
    for i in T.thread_binding(m, thread="threadIdx.x"):
        C[i] = T.float32(1)
"#;

#[test]
fn thread_bindings_are_refused() {
    let f = parse(THREADS);
    let e = emit_c(&f).expect_err("thread binding");
    match &e {
        CodegenError::ThreadBinding { var, thread, span } => {
            assert_eq!(var, "i");
            assert_eq!(thread, "threadIdx.x");
            // The span points at the loop (its `for` keyword) in the script.
            assert!(
                THREADS[span.range()].starts_with("for"),
                "{:?}",
                &THREADS[span.range()]
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(e
        .to_string()
        .contains("thread bindings need the CUDA target"));
}

#[test]
fn float16_and_bfloat16_are_bit_patterns_in_c_and_cuda() {
    let f = parse(
        r#"
@T.prim_func
def h(c: T.handle, m: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    C = T.match_buffer(c, (m,), "float16")
    for i in T.serial(m):
        C[i] = T.float16(1)
"#,
    );
    let c = emit_c(&f).expect("float16 in C");
    assert!(c.source.contains("uint16_t* restrict C"), "{}", c.source);
    assert!(
        c.source.contains("= sptir_f2h(sptir_rh(1.0f))"),
        "{}",
        c.source
    );
    let m = sparsetir_codegen::emit_cuda(&f).expect("float16 in CUDA");
    assert!(
        m.source.contains("SPTIR_HFN uint16_t sptir_f2h"),
        "{}",
        m.source
    );
    let f = parse(
        r#"
@T.prim_func
def h(c: T.handle, m: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    C = T.match_buffer(c, (m,), "float32")
    for i in T.serial(m):
        C[i] = T.Cast("float32", T.Cast("bfloat16", C[i]))
"#,
    );
    let c = emit_c(&f).expect("bfloat16 in C");
    assert!(c.source.contains("sptir_rbf(C"), "{}", c.source);
}

#[test]
fn bad_schedule_annotation_is_refused() {
    let f = parse(
        r#"
@T.prim_func
def p(c: T.handle, m: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    C = T.match_buffer(c, (m,), "float32")
    for i in T.parallel(m, annotations={"schedule": "fastest"}):
        C[i] = T.float32(1)
"#,
    );
    let e = emit_c(&f).expect_err("bad schedule");
    assert!(matches!(e, CodegenError::Unsupported { .. }), "{e:?}");
    assert!(e.to_string().contains("schedule"), "{e}");
}

#[test]
fn names_are_sanitised_and_unique() {
    // A buffer named like a C keyword and variables that collide after sanitising.
    let f = parse(
        r#"
@T.prim_func
def odd(int: T.handle, m: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    double = T.match_buffer(int, (m, 2), "float64")
    for sptir_status in T.serial(m):
        for j in T.serial(2):
            double[sptir_status, j] = T.float64(-0.0) + T.float64(1e300)
"#,
    );
    let m = emit_c(&f).expect("emits");
    assert!(
        m.source.contains("double* restrict double_"),
        "{}",
        m.source
    );
    assert!(
        m.source.contains("for (int32_t sptir_status_ = 0;"),
        "{}",
        m.source
    );
    assert!(m.source.contains("(-0.0) + 1e300"), "{}", m.source);
    assert_eq!(m.params[0].name, "int");
}

#[test]
fn float_constants_round_trip() {
    let f = parse(
        r#"
@T.prim_func
def k(c: T.handle) -> None:
    T.func_attr({"sparse_tir_level": 0})
    C = T.match_buffer(c, (4,), "float32")
    C[0] = T.float32(0.1)
    C[1] = T.float32(3.4028234663852886e38)
    C[2] = T.float32(1e-45)
    C[3] = T.min_value("float32")
"#,
    );
    let src = emit_c(&f).expect("emits").source;
    // Each literal reads back (as f32) to the value the script denotes.
    for (lit, want) in [
        ("0.1f", 0.1f32),
        ("3.4028235e38f", f32::MAX),
        ("1e-45f", 1e-45f32),
    ] {
        assert!(src.contains(lit), "{lit} missing:\n{src}");
        let back: f32 = lit.trim_end_matches('f').parse().expect("float");
        assert_eq!(back, want);
    }
    assert!(src.contains("C[3] = -FLT_MAX;"), "{src}");
}

#[test]
fn fuse_launches_groups_independent_nests() {
    // With `fuse_launches`, nests that only read a buffer or only accumulate into it share a
    // launch; a plain store followed by accumulation (an init) and a read of what a launch
    // writes separate them. Part k sees its own block range as its grid.
    let src = |fuse: bool| {
        format!(
            r#"
@T.prim_func
def parts(a: T.handle, y: T.handle, z: T.handle, n: T.int32) -> None:
    T.func_attr({{"sparse_tir_level": 0, "fuse_launches": {}}})
    A = T.match_buffer(a, (n,), "float32")
    Y = T.match_buffer(y, (n,), "float32")
    Z = T.match_buffer(z, (n,), "float32")
    for i in T.thread_binding(n, thread="blockIdx.x"):
        Y[i] = T.float32(0)
    for i in T.thread_binding(n, thread="blockIdx.x"):
        Y[i] = Y[i] + A[i]
    for i in T.thread_binding(n, thread="blockIdx.x"):
        Y[i] = A[i] * T.float32(2) + Y[i]
    for i in T.thread_binding(n, thread="blockIdx.x"):
        Z[i] = Y[i]
"#,
            if fuse { "True" } else { "False" }
        )
    };
    let m = sparsetir_codegen::emit_cuda(&parse(&src(false))).expect("unfused");
    assert_eq!(m.kernels.len(), 4);
    let m = sparsetir_codegen::emit_cuda(&parse(&src(true))).expect("fused");
    assert_eq!(m.kernels.len(), 3, "{}", m.source);
    // The two accumulating nests: one grid of n + n blocks, each part offset by the earlier.
    let grid = &m.kernels[1].grid[0];
    assert_eq!(grid.eval(&|_| Some(5)), Some(10), "{grid:?}");
    assert!(m.source.contains("sptir_bx1"), "{}", m.source);
}
