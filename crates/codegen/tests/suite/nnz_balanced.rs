//! C backend tests of parallel loops annotated `{"schedule": "nnz_balanced", "indptr": P}`:
//! the emitted region (snapshot), execution against the interpreter on skewed row lengths (empty
//! rows, one heavy row, no rows, more threads than rows; catalog `spmv` and `csrmm` at stage III),
//! and the typed errors for malformed annotations and loops the indptr does not cover.

use crate::common;

use std::collections::HashMap;

use common::*;
use sparsetir_codegen::emit_c;
use sparsetir_eval::ArgValue;
use sparsetir_ir::{AttrValue, DType, ForKind, Stmt};
use sparsetir_ops::data::{random_args, Pattern, Shape};
use sparsetir_transform::pipeline::PipelineOptions;

#[test]
fn snapshot_nnz_balanced() {
    let m = emit_c(&parse(include_str!("../scripts/nnz_balanced.sp"))).expect("emits");
    insta::assert_snapshot!(kernel_text(&m));
}

#[test]
fn region_shape() {
    let m = emit_c(&parse(include_str!("../scripts/nnz_balanced.sp"))).expect("emits");
    let src = kernel_text(&m);
    // One parallel region (no worksharing loop), rows from 1 to m + 1.
    assert!(src.contains("#pragma omp parallel\n"), "{src}");
    assert!(!src.contains("omp parallel for"), "{src}");
    assert!(src.contains("const int64_t i_end = 1 + "), "{src}");
    assert!(src.contains("(int64_t)P[1]"), "{src}");
    assert!(src.contains("(int64_t)P[i_end]"), "{src}");
    assert!(src.contains("omp_get_thread_num()"), "{src}");
    assert!(
        src.contains("for (int32_t i = (int32_t)i_cut[0]; i < (int32_t)i_cut[1]; ++i) {"),
        "{src}"
    );
}

/// Runs `nnz_balanced.sp` (rows 1..=m of `ptr`; row 0 of `ptr` is a leading offset) and checks
/// against the interpreter and against sums computed here: every row visited exactly once, `Y`
/// its row's sum of `A` plus the initial 0.5.
fn run_rows(cc: &str, dir: &std::path::Path, tag: &str, lens: &[usize], threads: usize) {
    let f = parse(include_str!("../scripts/nnz_balanced.sp"));
    let m = lens.len();
    // P[0] = P[1] = 3: the loop's rows start at index 1 and the first entries are skipped.
    let mut p = vec![3i64, 3];
    for l in lens {
        p.push(p[p.len() - 1] + *l as i64);
    }
    let nnz = *p.last().expect("ptr") as usize;
    let a: Vec<f64> = (0..nnz).map(|x| ((x * 7) % 13) as f64 - 4.0).collect();
    let mut args = HashMap::new();
    args.insert("a".to_string(), floats(DType::F32, &a));
    args.insert("ptr".to_string(), ints(DType::I32, &p));
    args.insert("y".to_string(), floats(DType::F32, &vec![0.5; m + 1]));
    args.insert("z".to_string(), ints(DType::I32, &vec![0; m + 1]));
    args.insert("m".to_string(), ArgValue::Int(m as i64));
    args.insert("nnz".to_string(), ArgValue::Int(nnz as i64));
    let after = check(cc, dir, tag, &f, &args, threads, 0.0);
    let mut want_z = vec![1.0; m + 1];
    want_z[0] = 0.0;
    assert_eq!(array(&after, "z"), want_z, "{tag}: rows visited once");
    let y = array(&after, "y");
    assert_eq!(y[0], 0.5, "{tag}");
    for r in 0..m {
        let (s, e) = (p[r + 1] as usize, p[r + 2] as usize);
        let want = 0.5 + a[s..e].iter().sum::<f64>();
        assert_eq!(y[r + 1], want, "{tag}: row {r}");
    }
}

#[test]
fn nnz_balanced_rows_match_the_interpreter() {
    let Some(cc) = compiler() else {
        eprintln!("note: no C compiler (`$CC` or `cc`) runs here; skipping the execution test");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    // Empty rows at the start, in the middle and at the end.
    run_rows(
        &cc,
        d,
        "empty_rows",
        &[0, 0, 3, 1, 0, 0, 4, 2, 0, 5, 0, 0],
        2,
    );
    run_rows(
        &cc,
        d,
        "empty_rows_3t",
        &[0, 0, 3, 1, 0, 0, 4, 2, 0, 5, 0, 0],
        3,
    );
    // One heavy row among light ones, in each position.
    run_rows(&cc, d, "heavy_first", &[60, 1, 0, 2, 1, 1], 4);
    run_rows(&cc, d, "heavy_mid", &[1, 0, 2, 60, 1, 1], 4);
    run_rows(&cc, d, "heavy_last", &[1, 0, 2, 1, 1, 60], 2);
    // No rows at all, and rows without entries.
    run_rows(&cc, d, "no_rows", &[], 2);
    run_rows(&cc, d, "all_empty", &[0, 0, 0, 0, 0], 3);
    // More threads than rows, and one thread.
    run_rows(&cc, d, "threads_gt_rows", &[2, 5, 1], 8);
    run_rows(&cc, d, "one_thread", &[2, 5, 1, 0, 7], 1);
}

/// Marks the outermost loop parallel with the nnz-balanced schedule over `indptr`.
fn balance_outer(s: &mut Stmt, indptr: &str) -> bool {
    match s {
        Stmt::For(l) => {
            l.kind = ForKind::Parallel;
            l.annotations
                .set("schedule", AttrValue::Str("nnz_balanced".into()));
            l.annotations.set("indptr", AttrValue::Str(indptr.into()));
            true
        }
        Stmt::Seq(v) => v.iter_mut().any(|x| balance_outer(x, indptr)),
        _ => false,
    }
}

#[test]
fn catalog_spmv_and_csrmm_balanced_match_the_interpreter() {
    let Some(cc) = compiler() else {
        eprintln!("note: no C compiler runs here; skipping");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let shape = Shape::new(Pattern::Random { empty_rows: true }, 37, 23)
        .with_density(0.3)
        .with_feat(6);
    for name in ["spmv", "csrmm"] {
        let mut f = stage3_with(name, &PipelineOptions::default());
        assert!(balance_outer(&mut f.body, "J_indptr"), "{name}: no loop");
        for (seed, threads) in [(1, 2), (2, 5), (3, 64)] {
            let case = random_args(name, &shape, seed).expect("case");
            let tag = format!("{name}_{seed}");
            let after = check(&cc, dir.path(), &tag, &f, &case.args, threads, 0.0);
            let changed = case
                .outputs
                .iter()
                .any(|o| after.get(o) != case.args.get(o));
            assert!(changed, "{tag}: the outputs stayed as they were");
        }
    }
}

fn script(ptr_extent: &str, head: &str) -> String {
    format!(
        r#"
@T.prim_func
def bad(a: T.handle, ptr: T.handle, y: T.handle, m: T.int32, nnz: T.int32) -> None:
    T.func_attr({{"sparse_tir_level": 0}})
    A = T.match_buffer(a, (nnz,), "float32")
    P = T.match_buffer(ptr, ({ptr_extent},), "int32")
    Y = T.match_buffer(y, (m,), "float32")
    for i in {head}:
        for j in T.serial(P[i + 1] - P[i]):
            with T.block("sum"):
                vi, vj = T.axis.remap("SR", [i, j])
                Y[vi] = Y[vi] + A[P[vi] + vj]
"#
    )
}

#[test]
fn malformed_nnz_balanced_loops_are_refused() {
    let ann = r#"annotations={"schedule": "nnz_balanced", "indptr": "P"}"#;
    // A serial loop.
    refused(
        &script("m + 1", &format!("T.serial(m, {ann})")),
        "not parallel",
    );
    // No indptr, an indptr that is not a string, an unknown buffer.
    refused(
        &script(
            "m + 1",
            r#"T.parallel(m, annotations={"schedule": "nnz_balanced"})"#,
        ),
        "needs the loop annotation",
    );
    refused(
        &script(
            "m + 1",
            r#"T.parallel(m, annotations={"schedule": "nnz_balanced", "indptr": 3})"#,
        ),
        "must name a buffer",
    );
    refused(
        &script(
            "m + 1",
            r#"T.parallel(m, annotations={"schedule": "nnz_balanced", "indptr": "Q"})"#,
        ),
        "no buffer named `Q`",
    );
    // A float buffer, a chunk, an indptr without the schedule.
    refused(
        &script(
            "m + 1",
            r#"T.parallel(m, annotations={"schedule": "nnz_balanced", "indptr": "A"})"#,
        ),
        "not integers",
    );
    refused(
        &script(
            "m + 1",
            r#"T.parallel(m, annotations={"schedule": "nnz_balanced", "indptr": "P", "chunk": 4})"#,
        ),
        "chunk",
    );
    refused(
        &script("m + 1", r#"T.parallel(m, annotations={"indptr": "P"})"#),
        "only goes with",
    );
    // The indptr does not cover the loop's rows plus one: too short, unrelated size.
    refused(
        &script("m", &format!("T.parallel(m, {ann})")),
        "cannot show",
    );
    refused(
        &script("nnz", &format!("T.parallel(m, {ann})")),
        "cannot show",
    );
    refused(
        &script("m + 1", &format!("T.parallel(1, m + 1, {ann})")),
        "cannot show",
    );
    // A longer indptr is fine.
    let ok = script("m + 4", &format!("T.parallel(m, {ann})"));
    emit_c(&parse(&ok)).expect("a longer indptr covers the rows");
}
