//! Compute-location primitive tests: `compute_at`, `reverse_compute_at` and `compute_inline`
//! on a hand-written stage-III elementwise pipeline and on catalog kernels after reverse
//! caching: snapshots, error cases (kind + IR shown), trace replay and equal results.

use crate::common;

use std::collections::HashMap;

use sparsetir_eval::ArgValue;
use sparsetir_formats::Tensor;
use sparsetir_ir::{DType, PrimFunc, Stage};
use sparsetir_schedule::{ErrorKind, Schedule};

use common::{assert_replays, assert_same_as_reference, kernel, print};

/// `B = A * 2` then `C = B + 1` over `(n, 8)`, with an optional extra stage between.
fn pipeline(middle: &str, c_index: &str) -> PrimFunc {
    let src = format!(
        r#"@T.prim_func
def pipe(a: T.handle, c: T.handle, n: T.int32) -> None:
    T.func_attr({{"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 0}})
    A = T.match_buffer(a, (n, 8), "float32")
    C = T.match_buffer(c, (n, 8), "float32")
    B = T.alloc_buffer((n, 8), "float32")
    for i, j in T.grid(n, 8):
        with T.block("B"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(A[vi, vj])
            T.writes(B[vi, vj])
            B[vi, vj] = A[vi, vj] * T.float32(2)
{middle}    for i, j in T.grid(n, 8):
        with T.block("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.reads(B[vi, {c_index}])
            T.writes(C[vi, vj])
            C[vi, vj] = B[vi, {c_index}] + T.float32(1)
"#
    );
    sparsetir_syntax::parse_func(&src).unwrap_or_else(|e| panic!("{e:?}"))
}

/// Runs the pipeline on `n = 5` rows of known data; returns `C`.
fn run_pipe(f: &PrimFunc) -> Vec<f64> {
    let n = 5usize;
    let a: Vec<f64> = (0..n * 8).map(|x| x as f64 * 0.5 - 3.0).collect();
    let mut args = HashMap::new();
    args.insert(
        "a".to_string(),
        ArgValue::Array(Tensor::from_f64(DType::F32, &a).unwrap()),
    );
    args.insert(
        "c".to_string(),
        ArgValue::Array(Tensor::from_f64(DType::F32, &vec![-7.0; n * 8]).unwrap()),
    );
    args.insert("n".to_string(), ArgValue::Int(n as i64));
    sparsetir_eval::run_func(f, &mut args).expect("runs");
    match &args["c"] {
        ArgValue::Array(t) => t.to_f64_vec(),
        _ => unreachable!(),
    }
}

/// The expected `C` computed directly: `2 a + 1`.
fn expected() -> Vec<f64> {
    (0..40)
        .map(|x| (x as f64 * 0.5 - 3.0) * 2.0 + 1.0)
        .collect()
}

fn verify(f: &PrimFunc) {
    if let Err(e) = sparsetir_ir::verify_func(f) {
        panic!("{e:?}\n{}", print(f));
    }
}

#[test]
fn compute_at_elementwise_row() {
    let f = pipeline("", "vj");
    assert_eq!(run_pipe(&f), expected());
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("B").unwrap();
    let c = sch.get_block("C").unwrap();
    let loops = sch.get_loops(c).unwrap();
    sch.compute_at(b, loops[0]).unwrap();
    verify(sch.func());
    insta::assert_snapshot!(print(sch.func()));
    assert_eq!(run_pipe(sch.func()), expected());
    assert_replays(&sch, &f);
}

#[test]
fn compute_at_innermost_gives_points() {
    let f = pipeline("", "vj");
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("B").unwrap();
    let c = sch.get_block("C").unwrap();
    let loops = sch.get_loops(c).unwrap();
    sch.compute_at(b, loops[1]).unwrap();
    verify(sch.func());
    let text = print(sch.func());
    // No loop is left around the producer: both iterators are bound to the consumer's loops.
    assert!(
        text.contains("vi, vj = T.axis.remap(\"SS\", [i_1, j_1])"),
        "{text}"
    );
    assert_eq!(run_pipe(sch.func()), expected());
    assert_replays(&sch, &f);
}

#[test]
fn reverse_compute_at_elementwise_row() {
    let f = pipeline("", "vj");
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("B").unwrap();
    let c = sch.get_block("C").unwrap();
    let loops = sch.get_loops(b).unwrap();
    sch.reverse_compute_at(c, loops[0]).unwrap();
    verify(sch.func());
    insta::assert_snapshot!(print(sch.func()));
    assert_eq!(run_pipe(sch.func()), expected());
    assert_replays(&sch, &f);
}

#[test]
fn compute_inline_elementwise() {
    let f = pipeline("", "vj");
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("B").unwrap();
    sch.compute_inline(b).unwrap();
    verify(sch.func());
    insta::assert_snapshot!(print(sch.func()));
    assert_eq!(run_pipe(sch.func()), expected());
    assert_replays(&sch, &f);
    assert!(
        sch.func().buffer_by_name("B").is_some(),
        "arena keeps the declaration"
    );
    assert!(
        !print(sch.func()).contains("alloc_buffer"),
        "allocation removed"
    );
}

#[test]
fn compute_inline_reversed_index() {
    // C reads B[vi, 7 - vj]: inlining substitutes the index into the producer's value.
    let f = pipeline("", "7 - vj");
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("B").unwrap();
    sch.compute_inline(b).unwrap();
    verify(sch.func());
    let want: Vec<f64> = (0..40)
        .map(|x| {
            let (r, c) = (x / 8, x % 8);
            ((r * 8 + 7 - c) as f64 * 0.5 - 3.0) * 2.0 + 1.0
        })
        .collect();
    assert_eq!(run_pipe(&f), want);
    assert_eq!(run_pipe(sch.func()), want);
    assert_replays(&sch, &f);
}

#[test]
fn compute_at_index_with_constant_span_is_bounded() {
    // `7 - vj` over `vj` in 0..8 reads the whole row: B is recomputed for 8 columns per row.
    let f = pipeline("", "7 - vj");
    let mut sch = Schedule::new(f).unwrap();
    let b = sch.get_block("B").unwrap();
    let c = sch.get_block("C").unwrap();
    let loops = sch.get_loops(c).unwrap();
    sch.compute_at(b, loops[0]).unwrap();
    let inner = sch.get_loops(b).unwrap();
    assert_eq!(inner.len(), 2);
    let text = print(sch.func());
    assert!(
        text.contains("T.serial(8)") || text.contains("T.grid(8"),
        "{text}"
    );
}

#[test]
fn compute_at_region_past_the_producer_is_refused() {
    // `2 * vj` spans 15 columns, more than the 8 block B computes.
    let f = pipeline("", "2 * vj");
    let mut sch = Schedule::new(f).unwrap();
    let b = sch.get_block("B").unwrap();
    let c = sch.get_block("C").unwrap();
    let loops = sch.get_loops(c).unwrap();
    let e = sch.compute_at(b, loops[0]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::RegionNotCovered, "{e}");
    assert!(
        e.ir.contains("for j_1 in T.serial(8)") || e.ir.contains("T.grid(n, 8)"),
        "{e}"
    );
    assert!(e.to_string().contains("-->"), "{e}");
}

#[test]
fn compute_at_across_a_writer_is_refused() {
    let middle = r#"    for i, j in T.grid(n, 8):
        with T.block("W"):
            vi, vj = T.axis.remap("SS", [i, j])
            T.writes(A[vi, vj])
            A[vi, vj] = T.float32(0)
"#;
    let f = pipeline(middle, "vj");
    let mut sch = Schedule::new(f).unwrap();
    let b = sch.get_block("B").unwrap();
    let c = sch.get_block("C").unwrap();
    let loops = sch.get_loops(c).unwrap();
    let e = sch.compute_at(b, loops[0]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::DependencyViolation, "{e}");
    assert!(e.ir.contains("with T.block(\"B\")"), "{e}");
}

#[test]
fn compute_at_placement_errors() {
    let f = pipeline("", "vj");
    let mut sch = Schedule::new(f).unwrap();
    let b = sch.get_block("B").unwrap();
    let c = sch.get_block("C").unwrap();
    let own = sch.get_loops(b).unwrap();
    let e = sch.compute_at(b, own[0]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::BadPlacement, "{e}");
    assert!(e.ir.contains("^^^"), "{e}");
    let later = sch.get_loops(c).unwrap();
    let e = sch.reverse_compute_at(b, later[0]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::BadPlacement, "{e}");
}

#[test]
fn compute_inline_errors() {
    let f = pipeline("", "vj");
    let mut sch = Schedule::new(f).unwrap();
    let c = sch.get_block("C").unwrap();
    let e = sch.compute_inline(c).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
    assert!(e.ir.contains("with T.block(\"C\")"), "{e}");
    let mut sch = Schedule::new(kernel("csrmm", Stage::III)).unwrap();
    let b = sch.get_block("csrmm1").unwrap();
    let e = sch.compute_inline(b).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotCompleteBlock, "{e}");
    assert!(e.ir.contains("with T.block(\"csrmm1\")"), "{e}");
    let before = sch.func().clone();
    assert!(sparsetir_ir::equal::func_eq(sch.func(), &before));
}

#[test]
fn compute_at_reduction_block_is_refused() {
    let mut sch = Schedule::new(kernel("csrmm", Stage::III)).unwrap();
    let b = sch.get_block("csrmm1").unwrap();
    let fill = sch.reverse_cache_read(b, 1, "local").unwrap();
    let loops = sch.get_loops(fill).unwrap();
    // Moving the reduction block under the fill's loop: refused as a reduction.
    let e = sch.reverse_compute_at(b, loops[0]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotCompleteBlock, "{e}");
}

#[test]
fn gather_tile_under_row_loop_csrmm() {
    // SparseTIR's pattern: the gathered rows of B go to a per-nonzero local tile computed at
    // the nonzero loop; the output row is accumulated locally and written back per feature.
    let f = kernel("csrmm", Stage::III);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("csrmm1").unwrap();
    let c = sch.reverse_cache_read(b, 1, "local").unwrap();
    let loops = sch.get_loops(b).unwrap();
    sch.compute_at(c, loops[0]).unwrap();
    let w = sch.reverse_cache_write(b, 0, "local").unwrap();
    let loops = sch.get_loops(b).unwrap();
    sch.reverse_compute_at(w, loops[1]).unwrap();
    verify(sch.func());
    insta::assert_snapshot!(print(sch.func()));
    assert_same_as_reference("csrmm", sch.func());
    assert_replays(&sch, &f);
}

#[test]
fn compute_at_stage_ii_sddmm() {
    let f = kernel("sddmm", Stage::II);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("sddmm1").unwrap();
    let c = sch.reverse_cache_read(b, 0, "local").unwrap();
    let loops = sch.get_loops(b).unwrap();
    sch.compute_at(c, loops[0]).unwrap();
    verify(sch.func());
    assert_same_as_reference("sddmm", sch.func());
    assert_replays(&sch, &f);
}
