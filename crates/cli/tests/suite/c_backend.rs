//! End-to-end tests of `sparsetir run --backend c` and `sparsetir build`: every run scenario of
//! `run.rs` is repeated with the evaluator and the C backend (with and without the kernels'
//! default schedules), and the compiled kernel's output files must match the evaluator's; bad
//! data is refused before launch with the evaluator's message. `build --target c` prints C
//! naming the entry symbol; unsupported targets fail with exit code 1. Tests that need a C
//! compiler are skipped, with a printed note, when none runs. Kernels are cached under the
//! target directory (`SPARSETIR_CACHE_DIR`), never in the user's cache.

use crate::backend_tests;
use crate::common;

use common::backends::same_outputs;
use common::*;
use sparsetir_formats::{write_mtx, write_npy};

backend_tests! {
    "c", have_cc();
    c_csrmm_random_with_empty_and_full_rows => csrmm_random_with_empty_and_full_rows,
    c_csrmm_one_by_one => csrmm_one_by_one,
    c_csrmm_empty_matrix => csrmm_empty_matrix,
    c_csrmm_dense_iteration_reads_absent_as_zero => csrmm_dense_iteration_reads_absent_as_zero,
    c_spmv => spmv,
    c_sddmm_sparse_output => sddmm_sparse_output,
    c_ell => ell,
    c_ell_rejects_rows_with_wrong_count => ell_rejects_rows_with_wrong_count,
    c_csf_square_sum => csf_square_sum,
    c_sparse_softmax => sparse_softmax,
    c_errors_name_the_buffer => errors_name_the_buffer,
    c_second_bind_must_share_the_pattern => second_bind_must_share_the_pattern,
    c_with_raw_csr_arrays => with_raw_csr_arrays,
    c_rejects_invalid_raw_structure => rejects_invalid_raw_structure,
}

#[test]
fn unsupported_backend_lists_all() {
    if !have_cc() {
        return;
    }
    common::backends::unsupported_backend_lists(&[
        "opencl",
        "eval",
        "interp",
        "c —",
        "cuda —",
        "cuda-emu —",
    ]);
}

// ------------------------------------------------------------------------------------------
// `sparsetir build` and the c backend's own options

#[test]
fn build_prints_c_naming_the_entry_symbol() {
    let d = Dir::new();
    let script = d.script("csrmm");
    let o = run(&["build", &script, "--target", "c"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let c = stdout(&o);
    assert!(c.contains("sparsetir_csrmm("), "{c}");
    assert!(c.contains("sparsetir_set_num_threads"), "{c}");
    assert!(!c.contains("#pragma omp parallel for"), "{c}");
    // With the default schedule and a specialized width: a parallel loop, and the feature loop
    // bound is the constant.
    let sched = d.write("csrmm.sched", sparsetir_ops::cpu_schedule("csrmm").unwrap());
    let o = run(&[
        "build",
        &script,
        "--target",
        "c",
        "--schedule",
        &sched,
        "--set",
        "feat_size=48",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let c = stdout(&o);
    assert!(c.contains("#pragma omp parallel for"), "{c}");
    assert!(c.contains("< 48;"), "{c}");
}

#[test]
fn build_with_stage_sections_and_func() {
    let d = Dir::new();
    let script = d.write(
        "two.sp",
        &format!(
            "{}\n{}",
            sparsetir_ops::get("spmv").unwrap().source,
            sparsetir_ops::get("sddmm").unwrap().source
        ),
    );
    let sched = d.write(
        "s.sched",
        "# stage I\nsp = sch.get_sparse_iteration(\"sddmm\")\nsch.sparse_fuse(sp, [\"I\", \"J\"])\n\
         # stage III\nb = sch.get_block(\"sddmm0\")\nl0, l1 = sch.get_loops(b)\nsch.parallel(l0)\n",
    );
    let o = run(&["build", &script]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--func"), "{}", stderr(&o));
    let o = run(&["build", &script, "--func", "sddmm", "--schedule", &sched]);
    assert!(o.status.success(), "{}", stderr(&o));
    let c = stdout(&o);
    assert!(c.contains("sparsetir_sddmm("), "{c}");
    assert!(c.contains("#pragma omp parallel for"), "{c}");
}

#[test]
fn build_errors_exit_one() {
    let d = Dir::new();
    let script = d.script("csrmm");
    let cases: Vec<(Vec<String>, Vec<&str>)> = vec![
        (
            vec!["--target".into(), "metal".into()],
            vec!["unsupported target `metal`", "c (C11", "cuda"],
        ),
        (
            vec!["--set".into(), "width=3".into()],
            vec!["width", "feat_size"],
        ),
        (
            vec!["--set".into(), "feat_size=x".into()],
            vec!["feat_size", "integer"],
        ),
        (
            vec![
                "--schedule".into(),
                d.write("bad.sched", "# stage II\n\nb = sch.get_block(\"nope\")\n"),
            ],
            vec!["nope", "3:"],
        ),
        (
            vec!["--schedule".into(), d.s("missing.sched")],
            vec!["missing.sched"],
        ),
        (
            vec![
                "--schedule".into(),
                d.write("tb.sched", "b = sch.get_block(\"csrmm0\")\nl, = sch.get_loops(b)\nsch.bind(l, \"blockIdx.x\")\n"),
            ],
            vec!["blockIdx.x", "CUDA"],
        ),
    ];
    for (extra, needles) in cases {
        let mut all = vec!["build".to_string(), script.clone()];
        all.extend(extra);
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        let o = run(&refs);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{all:?}: {e}");
        assert!(!e.contains("panicked"), "{e}");
        for n in needles {
            assert!(e.contains(n), "{all:?}: expected `{n}` in: {e}");
        }
    }
    // Stage III input.
    let lowered = d.write("l.sp", &stdout(&run(&["lower", &script, "--stage", "3"])));
    let o = run(&["build", &lowered]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("stage-I"), "{}", stderr(&o));
}

#[test]
fn schedule_and_threads_need_the_c_backend() {
    let d = Dir::new();
    let script = csrmm_files(&d, &[4, 3], false);
    let (a, b) = (d.bind("A", "a.mtx"), d.bind("B", "b.npy"));
    let o = run(&["run", &script, "--bind", &a, "--bind", &b, "--threads", "2"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--backend c"), "{}", stderr(&o));
}

#[test]
fn c_run_with_a_specialized_width() {
    let d = Dir::new();
    let script = d.script("csrmm");
    let (_, coo) = random_matrix(6, 5, 101);
    write_mtx(d.path("a.mtx"), &coo).unwrap();
    let (_, bt) = dense_tensor(&[5, 4], 102);
    write_npy(d.path("b.npy"), &bt).unwrap();
    let args = [
        "--set".into(),
        "feat_size=4".into(),
        "--bind".into(),
        d.bind("A", "a.mtx"),
        "--bind".into(),
        d.bind("B", "b.npy"),
    ];
    same_outputs(&d, "c", &script, &args, &[("C", "c.npy")]);
}

/// A schedule's errors point into the schedule file, line and column, with the line shown:
/// a line that does not parse, a handle no earlier line defined, a primitive that fails, and a
/// section header naming no stage. `build` and `run` report them alike.
#[test]
fn schedule_errors_are_located_in_the_schedule_file() {
    let d = Dir::new();
    let script = d.script("csrmm");
    let (_, coo) = random_matrix(4, 3, 7);
    write_mtx(d.path("a.mtx"), &coo).unwrap();
    let (_, bt) = dense_tensor(&[3, 4], 8);
    write_npy(d.path("b.npy"), &bt).unwrap();
    let (a, b) = (d.bind("A", "a.mtx"), d.bind("B", "b.npy"));
    let cases = [
        (
            "# stage III\nb0 = sch.get_block(\"csrmm0\")\nl0, = sch.get_loops(b0)\nsch.split(l0 [None, 4])\n",
            "s.sched:4:14:",
            "sch.split(l0 [None, 4])",
        ),
        (
            "# stage III\nb0 = sch.get_block(\"csrmm0\")\n  sch.parallel(l9)  # rows\n",
            "s.sched:3:3:",
            "`l9` is not defined by an earlier line",
        ),
        (
            "# stage III\nb0 = sch.get_block(\"csrmm0\")\nl0, = sch.get_loops(b0)\nsch.split(l0, [None, 0])\n",
            "s.sched:4:1:",
            "split factor 0 is not positive",
        ),
        (
            "# stage III\n# stage four\nb0 = sch.get_block(\"csrmm0\")\n",
            "s.sched:2:1:",
            "names no stage",
        ),
    ];
    for (text, at, needle) in cases {
        let sched = d.write("s.sched", text);
        let line: usize = at.split(':').nth(1).unwrap().parse().unwrap();
        let shown = text.lines().nth(line - 1).unwrap().trim();
        let build = [
            "build",
            &script,
            "--target",
            "c",
            "--schedule",
            &sched,
            "--set",
            "feat_size=4",
        ];
        let runs = [
            "run",
            &script,
            "--backend",
            "c",
            "--schedule",
            &sched,
            "--bind",
            &a,
            "--bind",
            &b,
        ];
        for args in [&build[..], &runs[..]] {
            let o = run(args);
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
            assert!(err.contains(at), "{args:?}: expected `{at}` in\n{err}");
            assert!(
                err.contains(needle),
                "{args:?}: expected `{needle}` in\n{err}"
            );
            assert!(err.contains(shown), "{args:?}: the line is shown\n{err}");
            assert!(!err.contains("panicked"), "{err}");
        }
    }
}
