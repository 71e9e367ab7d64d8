//! End-to-end tests of `sparsetir lower` (stages 1–3, `--print-after`, located errors) and of
//! `sparsetir run --backend interp`: every run scenario of `run.rs` is repeated with both
//! backends, and the interpreter's output files must match the reference evaluator's.

use crate::backend_tests;
use crate::common;

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
    common::backends::unsupported_backend_lists(&["opencl", "eval", "interp", "cuda-emu"]);
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
            assembly: None,
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

/// A row sum whose init reads the reduction's iterator: the init runs once per row, before the
/// row's elements, so `j` has no value there.
const INIT_READS_J: &str = r#"@T.prim_func
def rowsum(a: T.handle, b: T.handle, indptr: T.handle, indices: T.handle,
           m: T.int32, n: T.int32, nnz: T.int32) -> None:
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices), "int32")
    A = T.sp.match_buffer(a, (I, J), "float32")
    B = T.sp.match_buffer(b, (I,), "float32")
    with T.sp.iteration([I, J], "SR", "rowsum") as [i, j]:
        with T.init():
            B[i] = A[i, j]
        B[i] = B[i] + A[i, j]
"#;

#[test]
fn an_init_reading_a_reduction_iterator_is_refused_by_check_lower_and_run() {
    let d = Dir::new();
    let script = d.write("rowsum.sp", INIT_READS_J);
    let line = line_of(INIT_READS_J, "B[i] = A[i, j]");
    let needles = [
        "sparse iteration `rowsum`",
        "T.init() reads reduction iterator `j`",
    ];
    assert_located(&run(&["check", &script]), &script, line, &needles);
    assert_located(
        &run(&["lower", &script, "--stage", "2"]),
        &script,
        line,
        &needles,
    );
    let a = d.write(
        "a.mtx",
        "%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 1.5\n2 1 2.5\n",
    );
    let out = d.path("b.npy");
    let o = run(&[
        "run",
        &script,
        "--backend",
        "eval",
        "--bind",
        &format!("A={a}"),
        "--out",
        &format!("B={}", out.display()),
    ]);
    assert_located(&o, &script, line, &needles);
    assert!(!out.exists(), "nothing is written");
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

// ------------------------------------------------------------------------------------------
// `sparsetir lower --decompose`

use sparsetir_transform::format_rule::scripts;
use sparsetir_transform::{bsr_rule, decompose_format, ell_csr_rules, remove_preprocess};

/// `sparsetir lower csrmm.sp` with `args`: succeeds, and its output parses.
fn lower_ok(d: &Dir, args: &[&str]) -> (String, sparsetir_ir::IRModule) {
    let script = d.script("csrmm");
    let mut all = vec!["lower", script.as_str()];
    all.extend_from_slice(args);
    let o = run(&all);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    let text = stdout(&o);
    let m = parse_module(&text).unwrap_or_else(|e| panic!("{args:?}: {e:?}\n{text}"));
    (text, m)
}

/// The printed text passes `sparsetir check` as a stage-I program.
fn assert_checks(d: &Dir, name: &str, text: &str) {
    let file = d.write(name, text);
    let o = run(&["check", &file]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("ok (stage I)"), "{}", stdout(&o));
}

fn csrmm_module() -> sparsetir_ir::IRModule {
    parse_module(sparsetir_ops::get("csrmm").unwrap().source).unwrap()
}

#[test]
fn lower_decompose_with_a_rule_script_prints_stage_one() {
    let d = Dir::new();
    let rule = d.write("bsr.rule.sp", scripts::BSR);
    let spec = format!("{rule}:block_size=4");
    let (text, got) = lower_ok(&d, &["--stage", "1", "--decompose", &spec]);
    // The library's decomposition with the same rule, preprocess included.
    let want = decompose_format(&csrmm_module(), &[bsr_rule(4).unwrap()], true).unwrap();
    assert!(module_eq(&got, &want), "{text}");
    for needle in [
        "a_4: T.handle",
        "A_4 = T.sp.match_buffer(a_4, (IO_4, JO_4, II_4, JI_4), \"float32\")",
        "\"rewrite_A_4\"",
        "\"SSRRS\", \"csrmm_4\"",
        "C[io_4_1 * 4 + ii_4_1, k_1]",
    ] {
        assert!(text.contains(needle), "`{needle}` in:\n{text}");
    }
    assert_checks(&d, "bsr4.sp", &text);
    // The builtin name gives the same program.
    let (builtin, _) = lower_ok(&d, &["--stage", "1", "--decompose", "bsr:4"]);
    assert_eq!(builtin, text);
}

#[test]
fn lower_decompose_composes_rules_and_lowers() {
    let d = Dir::new();
    let (text, got) = lower_ok(
        &d,
        &[
            "--stage",
            "1",
            "--decompose",
            "ell(width=4)+csr",
            "--no-preprocess",
        ],
    );
    let rules = ell_csr_rules(4, true).unwrap();
    let want = decompose_format(&csrmm_module(), &rules, true).unwrap();
    let want = sparsetir_ir::IRModule {
        funcs: want.funcs.iter().map(remove_preprocess).collect(),
    };
    assert!(module_eq(&got, &want), "{text}");
    // One init of C, then the ELL and DCSR clones accumulate; no preprocess left.
    for needle in [
        "\"composable\": 1",
        "J_ell4 = T.sp.compressed_fixed(I_ell4, (n_ell4, 4), indices_ell4)",
        "\"SS\", \"csrmm_init\"",
        "\"SRS\", \"csrmm_ell4\"",
        "\"SSRS\", \"csrmm_dcsr\"",
    ] {
        assert!(text.contains(needle), "`{needle}` in:\n{text}");
    }
    assert!(
        !text.contains("rewrite_A") && !text.contains("T.init()"),
        "{text}"
    );
    assert_checks(&d, "ell_csr.sp", &text);
    // The same rules from their scripts, one --decompose each, give the same program.
    let ell = d.write("ell.rule.sp", scripts::ELL);
    let dcsr = d.write("dcsr.rule.sp", scripts::DCSR);
    let spec = format!("{ell}:width=4");
    let (from_files, _) = lower_ok(
        &d,
        &[
            "--stage",
            "1",
            "--decompose",
            &spec,
            "--decompose",
            &dcsr,
            "--no-preprocess",
        ],
    );
    assert_eq!(from_files, text);
    // Decompose, then lower: stage II and III verify (preprocess included or not).
    for (stage, s) in [("2", Stage::II), ("3", Stage::III)] {
        for extra in [
            &["--decompose", "ell(width=4)+csr"][..],
            &["--decompose", "hyb(parts=2,buckets=1,4)", "--no-preprocess"][..],
            &["--decompose", "bsr:2"][..],
        ] {
            let mut args = vec!["--stage", stage];
            args.extend_from_slice(extra);
            let (_, m) = lower_ok(&d, &args);
            for f in &m.funcs {
                assert_eq!(f.stage(), s, "{args:?}");
                verify_func(f).unwrap_or_else(|e| panic!("{args:?}: {e:?}"));
            }
        }
    }
}

/// `lower sddmm.sp --stage 1 --decompose coo`: the COO rule rewrites sddmm's input `X` (the
/// only sparse buffer over [I, J] nothing writes; `decompose_format` refuses to rewrite the
/// output `Y`): a preprocess copy into `X_coo`, `Y` zeroed over the CSR axes (the COO axes are
/// compressed, so the clone does not cover the output), and the compute iteration over
/// `[O_coo, I_coo, J_coo, K]`.
const SDDMM_COO_STAGE1: &str = r#"@T.prim_func
def sddmm(
    a: T.handle,
    b: T.handle,
    x: T.handle,
    y: T.handle,
    indptr: T.handle,
    indices: T.handle,
    m: T.int32,
    n: T.int32,
    feat_size: T.int32,
    nnz: T.int32,
    a_coo: T.handle,
    rows_coo: T.handle,
    cols_coo: T.handle,
    m_coo: T.int32,
    n_coo: T.int32,
    nnz_coo: T.int32,
) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices))
    J_detach = T.sp.dense_fixed(n)
    K = T.sp.dense_fixed(feat_size)
    O_coo = T.sp.dense_fixed(1)
    I_coo = T.sp.compressed_fixed(O_coo, (m_coo, nnz_coo), rows_coo, sorted=False)
    J_coo = T.sp.compressed_fixed(I_coo, (n_coo, 1), cols_coo, sorted=False)
    A = T.sp.match_buffer(a, (I, K), "float32")
    B = T.sp.match_buffer(b, (J_detach, K), "float32")
    X = T.sp.match_buffer(x, (I, J), "float32")
    Y = T.sp.match_buffer(y, (I, J), "float32")
    X_coo = T.sp.match_buffer(a_coo, (O_coo, I_coo, J_coo), "float32")
    with T.sp.iteration([O_coo, I_coo, J_coo], "SSS", "rewrite_X_coo") as [o_coo, i_coo, j_coo]:
        T.sp.iteration_attr({"preprocess": True})
        X_coo[o_coo, i_coo, j_coo] = X[i_coo, j_coo]
    with T.sp.iteration([I, J], "SS", "sddmm_init") as [i_1, j_1]:
        Y[i_1, j_1] = T.float32(0)
    with T.sp.iteration([O_coo, I_coo, J_coo, K], "SSSR", "sddmm_coo") as [
        o_coo_1, i_coo_1, j_coo_1, k_1
    ]:
        Y[i_coo_1, j_coo_1] = (
            Y[i_coo_1, j_coo_1]
            + A[i_coo_1, k_1] * B[j_coo_1, k_1] * X_coo[o_coo_1, i_coo_1, j_coo_1]
        )
"#;

#[test]
fn lower_decompose_coo_rewrites_the_input_of_sddmm() {
    use sparsetir_runtime::composable::coo::{coo_rule, coo_rule_for, COO_RULE};
    let d = Dir::new();
    let sddmm = d.script("sddmm");
    let lower = |args: &[&str]| {
        let mut all = vec!["lower", sddmm.as_str()];
        all.extend_from_slice(args);
        let o = run(&all);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        stdout(&o)
    };
    let text = lower(&["--stage", "1", "--decompose", "coo"]);
    assert_eq!(text, SDDMM_COO_STAGE1);
    assert_checks(&d, "sddmm_coo.sp", &text);
    // The library's decomposition with the rule pointed at X gives the same program.
    let module = parse_module(sparsetir_ops::get("sddmm").unwrap().source).unwrap();
    let rule = coo_rule_for(&module.funcs[0]).unwrap();
    assert_eq!(rule.buffers_to_rewrite, ["X"]);
    let want = decompose_format(&module, &[rule], true).unwrap();
    assert!(module_eq(&parse_module(&text).unwrap(), &want), "{text}");
    // The rule script itself says `A`: for sddmm that is the dense operand, which the rule
    // does not fit; with its buffer renamed to `X` the script gives the builtin's program.
    assert_eq!(coo_rule().unwrap().buffers_to_rewrite, ["A"]);
    let o = run(&[
        "lower",
        &sddmm,
        "--stage",
        "1",
        "--decompose",
        &d.write("coo.rule.sp", COO_RULE),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("buffer `A` has axes [\"I\", \"K\"]"),
        "{}",
        stderr(&o)
    );
    let renamed = COO_RULE.replace(
        r#""buffer_to_rewrite": ["A"]"#,
        r#""buffer_to_rewrite": ["X"]"#,
    );
    assert_ne!(renamed, COO_RULE);
    let file = d.write("coo_x.rule.sp", &renamed);
    assert_eq!(lower(&["--stage", "1", "--decompose", &file]), text);
    // Without the preprocess, and lowered: stages II and III verify.
    let np = lower(&["--stage", "1", "--decompose", "coo", "--no-preprocess"]);
    assert!(
        !np.contains("rewrite_X_coo") && np.contains("\"sddmm_coo\""),
        "{np}"
    );
    for (stage, s) in [("2", Stage::II), ("3", Stage::III)] {
        let out = lower(&["--stage", stage, "--decompose", "coo", "--no-preprocess"]);
        for f in &parse_module(&out).unwrap().funcs {
            assert_eq!(f.stage(), s);
            verify_func(f).unwrap_or_else(|e| panic!("stage {stage}: {e:?}"));
        }
    }
    // csrmm: the rule rewrites A; a kernel with no read-only CSR buffer is told so.
    let (csrmm, _) = lower_ok(&d, &["--stage", "1", "--decompose", "coo"]);
    assert!(csrmm.contains("\"rewrite_A_coo\""), "{csrmm}");
    assert!(csrmm.contains("\"SSRS\", \"csrmm_coo\""), "{csrmm}");
    let bsrmm = d.script("bsrmm");
    let o = run(&["lower", &bsrmm, "--stage", "1", "--decompose", "coo"]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("does not apply") && e.contains("no read-only sparse buffer over [I, J]"),
        "{e}"
    );
    assert!(!e.contains("panicked"), "{e}");
}

#[test]
fn lower_decompose_errors_are_clear_and_located() {
    let d = Dir::new();
    let csrmm = d.script("csrmm");
    let rule = d.write("bsr.rule.sp", scripts::BSR);
    let decompose =
        |script: &str, spec: &str| run(&["lower", script, "--stage", "1", "--decompose", spec]);
    // An unknown parameter: located at the rule's function in the rule script.
    let def_line = line_of(scripts::BSR, "@T.prim_func");
    let o = decompose(&csrmm, &format!("{rule}:blocksize=4"));
    assert_located(&o, &rule, def_line, &["no scalar parameter `blocksize`"]);
    // An unbound parameter in the rule's name: the same place, with a hint.
    let o = decompose(&csrmm, &rule);
    assert_located(
        &o,
        &rule,
        def_line,
        &["rule name `{block_size}`", "--decompose FILE:block_size=4"],
    );
    // A rule script that does not parse: located at the problem.
    let broken = scripts::BSR.replace("II = T.sp.dense_fixed(block_size)", "II = = 1");
    let bad = d.write("broken.rule.sp", &broken);
    let o = decompose(&csrmm, &format!("{bad}:block_size=4"));
    assert_located(&o, &bad, line_of(&broken, "II = = 1"), &[]);
    // A rule that does not fit the function: at the buffer's declaration in the input script.
    let sddmm = d.script("sddmm");
    let sddmm_src = sparsetir_ops::get("sddmm").unwrap().source;
    let o = decompose(&sddmm, "bsr:4");
    assert_located(
        &o,
        &sddmm,
        line_of(sddmm_src, "A = T.sp.match_buffer"),
        &["buffer `A` has axes [\"I\", \"K\"]", "[\"I\", \"J\"]"],
    );
    // A rule whose buffer no function declares: at the function.
    let rgcn = d.script("rgcn_homo");
    let rgcn_src = sparsetir_ops::get("rgcn_homo").unwrap().source;
    let o = decompose(&rgcn, "bsr:4");
    assert_located(
        &o,
        &rgcn,
        line_of(rgcn_src, "@T.prim_func"),
        &["does not apply", "sparse buffer `A`"],
    );
    // Command-line mistakes: clear messages, exit 1, nothing printed, no panic.
    for (spec, needle) in [
        ("nope", "unknown rule `nope`"),
        ("bsr:0", "block size must be a positive integer"),
        ("hyb(parts=2)", "hyb needs its bucket widths"),
        ("ell", "ell needs its width"),
        ("csr", "not a rewrite rule"),
        (
            "/nonexistent/x.rule.sp:block_size=4",
            "cannot read /nonexistent/x.rule.sp",
        ),
        (
            &format!("{rule}:block_size=x"),
            "bad rule parameter `block_size=x`",
        ),
    ] {
        let o = decompose(&csrmm, spec);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{spec}: {e}");
        assert!(e.contains(needle), "{spec}: expected `{needle}` in {e}");
        assert!(!e.contains("panicked"), "{e}");
        assert_eq!(stdout(&o), "");
    }
    let o = run(&[
        "lower",
        &csrmm,
        "--stage",
        "1",
        "--decompose",
        "bsr:4",
        "--decompose",
        "bsr:4",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("two --decompose rules are named `4`"),
        "{}",
        stderr(&o)
    );
    let o = run(&["lower", &csrmm, "--stage", "1", "--no-preprocess"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("--no-preprocess applies to --decompose"),
        "{}",
        stderr(&o)
    );
}

/// `lower --schedule FILE --set P=V --stage N` prints the function every backend compiles at
/// stage N: the schedule's sections applied up to that stage, the parameter specialized. It
/// equals what the runtime's driver lowers (parsed back from the print), and it parses and
/// verifies as a script of its stage.
#[test]
fn lower_with_a_schedule_prints_the_scheduled_function() {
    let d = Dir::new();
    let kernel = |k: &str| format!("{}/../ops/kernels/{k}.sp", env!("CARGO_MANIFEST_DIR"));
    let sched = |s: &str| format!("{}/../ops/schedules/{s}.sched", env!("CARGO_MANIFEST_DIR"));
    for (k, s, stage) in [
        ("csrmm", "csrmm", Stage::III),
        ("csrmm", "csrmm", Stage::II),
        ("bsrmm", "bsr_spmm", Stage::I),
        ("bsrmm", "bsr_spmm", Stage::III),
    ] {
        let n = match stage {
            Stage::I => "1",
            Stage::II => "2",
            Stage::III => "3",
        };
        let (kf, sf) = (kernel(k), sched(s));
        let o = run(&[
            "lower",
            &kf,
            "--schedule",
            &sf,
            "--set",
            "feat_size=32",
            "--stage",
            n,
        ]);
        let text = stdout(&o);
        assert!(o.status.success(), "{k} {s} {n}: {}", stderr(&o));
        let printed = parse_module(&text).unwrap_or_else(|e| panic!("{k} {n}: {e:?}\n{text}"));
        let f = &printed.funcs[0];
        assert_eq!(f.stage(), stage, "{k} {n}");
        verify_func(f).unwrap_or_else(|e| panic!("{k} {n}: {e:?}"));
        let src = std::fs::read_to_string(&kf).unwrap();
        let stage1 = parse_module(&src).unwrap().funcs.remove(0);
        let schedule = std::fs::read_to_string(&sf).unwrap();
        let spec = [("feat_size".to_string(), 32)];
        let lowered =
            sparsetir_runtime::build::schedule_and_lower(&stage1, Some(&schedule), &spec).unwrap();
        let want = match stage {
            Stage::I => lowered.scheduled1,
            Stage::II => lowered.stage2,
            Stage::III => lowered.stage3,
        };
        // Through the printer both ways, so the comparison is of what parses back.
        let want =
            parse_module(&print_module(&sparsetir_ir::IRModule { funcs: vec![want] })).unwrap();
        assert!(module_eq(&printed, &want), "{k} {n}: differs\n{text}");
        if stage == Stage::I {
            assert!(text.contains("[I, J, BI, BJ, F]"), "reordered:\n{text}");
        }
        if stage == Stage::III && k == "csrmm" {
            assert!(
                text.contains("T.parallel(m") && text.contains("T.vectorized(32)"),
                "{text}"
            );
        }
    }
    // A schedule error points into the schedule; --schedule stands alone.
    let bad = d.write("bad.sched", "# stage III\nsch.parallel(l9)\n");
    let o = run(&["lower", &kernel("csrmm"), "--schedule", &bad]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("bad.sched:2:1: error: `l9` is not defined"),
        "{}",
        stderr(&o)
    );
    let o = run(&[
        "lower",
        &kernel("csrmm"),
        "--schedule",
        &bad,
        "--decompose",
        "bsr:2",
    ]);
    assert!(
        stderr(&o).contains("does not combine with --decompose"),
        "{}",
        stderr(&o)
    );
    let o = run(&["lower", &kernel("csrmm"), "--set", "feat_size=4"]);
    assert!(
        stderr(&o).contains("--set applies to --schedule"),
        "{}",
        stderr(&o)
    );
    // --cpu-passes: what the C writer gets. csrmm's row starts in its local array, `C` is
    // stored once (the write-back), and the text parses back to the passes' own result.
    let (kf, sf) = (kernel("csrmm"), sched("csrmm"));
    let args = ["lower", &kf, "--schedule", &sf, "--set", "feat_size=32"];
    let o = run(&[&args[..], &["--cpu-passes"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(!text.contains("with T.block(\"csrmm1_init\")"), "{text}");
    assert!(text.contains("C_data_local[vk_3] = T.float32(0)"), "{text}");
    // The scope's region, and the write-back's region and store.
    assert_eq!(text.matches("C_data[vi, ").count(), 3, "{text}");
    let plain = stdout(&run(&args));
    let want = sparsetir_runtime::build::cpu_passes(&parse_module(&plain).unwrap().funcs[0]);
    let printed = parse_module(&text).unwrap();
    let want = parse_module(&print_module(&sparsetir_ir::IRModule { funcs: vec![want] })).unwrap();
    assert!(module_eq(&printed, &want), "{text}");
    let o = run(&[&args[..], &["--stage", "2", "--cpu-passes"]].concat());
    assert!(
        stderr(&o).contains("--cpu-passes runs on stage III"),
        "{}",
        stderr(&o)
    );
    let o = run(&["lower", &kernel("csrmm"), "--cpu-passes"]);
    assert!(
        stderr(&o).contains("--cpu-passes applies to --schedule"),
        "{}",
        stderr(&o)
    );
}
