//! End-to-end tests of `sparsetir lower` (stages 1–3, `--print-after`, located errors) and of
//! `sparsetir run --backend interp`: every run scenario of `run.rs` is repeated with both
//! backends, and the interpreter's output files must match the reference evaluator's.

mod common;

use std::process::Output;

use common::*;
use sparsetir_ir::equal::module_eq;
use sparsetir_ir::printer::print_module;
use sparsetir_ir::{verify_func, Stage};
use sparsetir_syntax::parse_module;
use sparsetir_transform::{lower, PipelineOptions};

backend_tests! {
    "interp", true;
    interp_csrmm_random_with_empty_and_full_rows => csrmm_random_with_empty_and_full_rows,
    interp_csrmm_one_by_one => csrmm_one_by_one,
    interp_csrmm_empty_matrix => csrmm_empty_matrix,
    interp_csrmm_dense_iteration_reads_absent_as_zero => csrmm_dense_iteration_reads_absent_as_zero,
    interp_spmv => spmv,
    interp_sddmm_sparse_output => sddmm_sparse_output,
    interp_ell => ell,
    interp_ell_rejects_rows_with_wrong_count => ell_rejects_rows_with_wrong_count,
    interp_csf_square_sum => csf_square_sum,
    interp_sparse_softmax => sparse_softmax,
    interp_errors_name_the_buffer => errors_name_the_buffer,
    interp_second_bind_must_share_the_pattern => second_bind_must_share_the_pattern,
    interp_with_raw_csr_arrays => with_raw_csr_arrays,
    interp_rejects_invalid_raw_structure => rejects_invalid_raw_structure,
}

#[test]
fn unsupported_backend_lists_both() {
    common::backends::unsupported_backend_lists(&["cuda", "eval", "interp"]);
}

// ------------------------------------------------------------------------------------------
// `sparsetir lower`

/// `sparsetir lower` of a catalog kernel: the output parses, verifies at the stage asked for,
/// and equals the library pipeline's result.
fn lower_kernel(name: &str, stage: Stage, check: bool) {
    let d = Dir::new();
    let script = d.script(name);
    let n = match stage {
        Stage::I => "1",
        Stage::II => "2",
        Stage::III => "3",
    };
    let mut args = vec!["lower", &script, "--stage", n];
    if check {
        args.push("--check-invalid-binary-search");
    }
    let o = run(&args);
    assert!(o.status.success(), "{name}: {}", stderr(&o));
    let text = stdout(&o);
    let got = parse_module(&text).unwrap_or_else(|e| panic!("{name}: {e:?}\n{text}"));
    for f in &got.funcs {
        assert_eq!(f.stage(), stage, "{name}");
        verify_func(f).unwrap_or_else(|e| panic!("{name}: {e:?}"));
    }
    let input = parse_module(sparsetir_ops::get(name).unwrap().source).unwrap();
    let want = lower(
        &input,
        &PipelineOptions {
            target_stage: stage,
            check_invalid_binary_search: check,
            verify: true,
            print_after: Vec::new(),
        },
    )
    .unwrap();
    assert!(module_eq(&got, &want), "{name}:\n{text}");
}

#[test]
fn lower_catalog_to_stage_ii() {
    for k in sparsetir_ops::catalog() {
        lower_kernel(k.name, Stage::II, false);
    }
    lower_kernel("csrmm_dense_iter", Stage::II, true);
}

#[test]
fn lower_catalog_to_stage_iii() {
    for k in sparsetir_ops::catalog() {
        lower_kernel(k.name, Stage::III, false);
    }
    lower_kernel("csrmm_dense_iter", Stage::III, true);
}

#[test]
fn lower_stage_one_prints_the_input() {
    let d = Dir::new();
    let script = d.script("sddmm");
    let o = run(&["lower", &script, "--stage", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let fmt = run(&["fmt", &script]);
    assert_eq!(stdout(&o), stdout(&fmt));
}

#[test]
fn lower_print_after_dumps_to_stderr() {
    let d = Dir::new();
    let script = d.script("spmv");
    let o = run(&[
        "lower",
        &script,
        "--stage",
        "2",
        "--print-after",
        "lower_sparse_iter",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let input = parse_module(sparsetir_ops::get("spmv").unwrap().source).unwrap();
    let stage_ii = lower(&input, &PipelineOptions::to_stage(Stage::II)).unwrap();
    let want = print_module(&stage_ii);
    assert_eq!(stderr(&o), format!("# IR after lower_sparse_iter:\n{want}"));
    assert_eq!(stdout(&o), want);
    // Without the flag, stderr stays empty.
    let o = run(&["lower", &script, "--stage", "2"]);
    assert_eq!(stderr(&o), "");
    // An unknown pass is a user error naming the known ones.
    let o = run(&["lower", &script, "--stage", "2", "--print-after", "nope"]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("`nope`") && e.contains("lower_sparse_iter"),
        "{e}"
    );
    assert_eq!(stdout(&o), "");
}

#[test]
fn lower_func_selects_one_function() {
    let d = Dir::new();
    let two = format!(
        "{}\n{}",
        sparsetir_ops::get("spmv").unwrap().source,
        sparsetir_ops::get("csrmm").unwrap().source
    );
    let script = d.write("two.sp", &two);
    let o = run(&["lower", &script, "--stage", "2", "--func", "csrmm"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let got = parse_module(&stdout(&o)).unwrap();
    assert_eq!(got.funcs.len(), 1);
    assert_eq!(got.funcs[0].name, "csrmm");
    let o = run(&["lower", &script, "--stage", "2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(parse_module(&stdout(&o)).unwrap().funcs.len(), 2);
    let o = run(&["lower", &script, "--stage", "2", "--func", "nope"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("`nope`"), "{}", stderr(&o));
}

/// The 1-based line of the first occurrence of `needle` in `text`.
fn line_of(text: &str, needle: &str) -> usize {
    let at = text.find(needle).expect("needle in text");
    text[..at].matches('\n').count() + 1
}

fn assert_located(o: &Output, file: &str, line: usize, needles: &[&str]) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(!e.contains("panicked"), "{e}");
    assert!(
        e.contains(&format!("{file}:{line}:")),
        "expected {file}:{line}: in {e}"
    );
    for n in needles {
        assert!(e.contains(n), "expected `{n}` in: {e}");
    }
    assert_eq!(stdout(o), "");
}

#[test]
fn lower_parse_error_is_located() {
    let d = Dir::new();
    let src = "@T.prim_func\ndef f(a: T.handle) -> None:\n    A = T.match_buffer(a, (4,), \"float32\")\n    A[0] = = 1\n";
    let script = d.write("bad.sp", src);
    let o = run(&["lower", &script, "--stage", "2"]);
    assert_located(&o, &script, 4, &[]);
}

/// Iterates `J` without its parent `I`: it parses, the verifier rejects it.
const ORPHAN: &str = r#"@T.prim_func
def orphan(x: T.handle, indptr: T.handle, indices: T.handle,
           m: T.int32, n: T.int32, nnz: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices), "int32")
    J_detach = T.sp.dense_fixed(n)
    X = T.sp.match_buffer(x, (J_detach,), "float32")
    with T.sp.iteration([J], "S", "orphan") as [j]:
        X[j] = T.float32(1)
"#;

#[test]
fn lower_verify_error_is_located() {
    let d = Dir::new();
    let script = d.write("orphan.sp", ORPHAN);
    let o = run(&["lower", &script, "--stage", "2"]);
    assert_located(
        &o,
        &script,
        line_of(ORPHAN, "with T.sp.iteration"),
        &["`orphan`"],
    );
}

/// A lookup of a constant coordinate in a compressed axis, which `lower_sparse_iter` does not
/// support.
const CONST_LOOKUP: &str = r#"@T.prim_func
def const_lookup(a: T.handle, y: T.handle, indptr: T.handle, indices: T.handle,
                 m: T.int32, n: T.int32, nnz: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices), "int32")
    A = T.sp.match_buffer(a, (I, J), "float32")
    Y = T.sp.match_buffer(y, (I,), "float32")
    with T.sp.iteration([I], "S", "pick") as [i]:
        Y[i] = A[0, 2]
"#;

/// A varied chain under a `compressed_fixed` axis, which `lower_sparse_buffer` does not lay out.
const CF_CHAIN: &str = r#"@T.prim_func
def cf_chain(a: T.handle, b: T.handle, indices_j: T.handle, indptr_k: T.handle,
             indices_k: T.handle, m: T.int32, n: T.int32, c: T.int32, p: T.int32,
             nnz_k: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_fixed(I, (n, c), indices_j, "int32")
    K = T.sp.compressed_varied(J, (p, nnz_k), (indptr_k, indices_k), "int32")
    A = T.sp.match_buffer(a, (I, J, K), "float32")
    B = T.sp.match_buffer(b, (I, J, K), "float32")
    with T.sp.iteration([I, J, K], "SSS", "copy") as [i, j, k]:
        B[i, j, k] = A[i, j, k]
"#;

#[test]
fn lower_pass_errors_are_located() {
    let d = Dir::new();
    let script = d.write("const_lookup.sp", CONST_LOOKUP);
    let line = line_of(CONST_LOOKUP, "with T.sp.iteration");
    let o = run(&["lower", &script, "--stage", "2"]);
    assert_located(&o, &script, line, &["lower_sparse_iter", "`const_lookup`"]);
    // `run --backend interp` reports the same failure before looking at the data (no bind).
    let o = run(&["run", &script, "--backend", "interp"]);
    assert_located(&o, &script, line, &["lower_sparse_iter", "`const_lookup`"]);

    let script = d.write("cf_chain.sp", CF_CHAIN);
    // Stage II is fine; stage III fails at the buffer declaration.
    let o = run(&["lower", &script, "--stage", "2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = run(&["lower", &script, "--stage", "3"]);
    let line = line_of(CF_CHAIN, "A = T.sp.match_buffer");
    assert_located(
        &o,
        &script,
        line,
        &["lower_sparse_buffer", "`cf_chain`", "`A`"],
    );
}

#[test]
fn lower_usage_errors_exit_one() {
    let d = Dir::new();
    let script = d.script("spmv");
    for args in [
        vec!["lower", script.as_str(), "--stage", "4"],
        vec!["lower", script.as_str(), "--stage", "x"],
        vec!["lower", "/nonexistent/x.sp", "--stage", "2"],
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"));
    }
}
