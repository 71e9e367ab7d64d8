//! Differential tests of the C backend through the build driver: for every catalog kernel, built
//! with its default CPU schedule (when it has one) and without, the compiled kernel gives what
//! the stage-I reference evaluator gives on random data (random rows with empty ones, a single
//! row, full rows, nnz 0, 1×1), floats within 1e-5 relative. Also: specialized builds, schedule
//! sections, and typed build errors. Skipped, with a note, when no C compiler runs.

use sparsetir_eval::eval_func;
use sparsetir_ops::data::{random_args, Init, Pattern, Shape};
use sparsetir_runtime::build;
use sparsetir_runtime::build::{emit, schedule_and_lower, BuildError};

use crate::common;
use common::{have_cc, opts, Args};

const CACHE: &str = "c-differential-cache";

/// Every output of `got` equals `want` within 1e-5 relative (NaN equals NaN).
fn assert_same(what: &str, outputs: &[String], got: &Args, want: &Args) {
    common::assert_outputs_close(what, outputs, got, want, 1e-5);
}

/// The shapes every kernel is checked on.
fn shapes() -> Vec<(&'static str, Shape)> {
    let base = common::catalog_shape;
    vec![
        (
            "random rows, some empty",
            base(Pattern::Random { empty_rows: true }),
        ),
        ("single row", base(Pattern::SingleRow)),
        ("full rows", base(Pattern::FullRows)),
        ("nnz 0", base(Pattern::Empty)),
        ("empty leaves", base(Pattern::EmptyLeaves)),
        (
            "1x1",
            Shape::new(Pattern::OneByOne, 1, 1)
                .with_feat(1)
                .with_block(1)
                .with_depth(1),
        ),
    ]
}

/// Builds `kernel` (with `schedule`) and compares it with the evaluator on every shape; returns
/// the number of cases compared.
fn check_kernel(kernel: &str, schedule: Option<&str>, specialize: &[(String, i64)]) -> usize {
    check_kernel_on(kernel, schedule, specialize, shapes())
}

/// [`check_kernel`] on the given shapes.
fn check_kernel_on(
    kernel: &str,
    schedule: Option<&str>,
    specialize: &[(String, i64)],
    shapes: Vec<(&'static str, Shape)>,
) -> usize {
    check_kernel_with(kernel, schedule, specialize, shapes, &[])
}

/// [`check_kernel_on`] with extra C compiler flags.
fn check_kernel_with(
    kernel: &str,
    schedule: Option<&str>,
    specialize: &[(String, i64)],
    shapes: Vec<(&'static str, Shape)>,
    flags: &[&str],
) -> usize {
    let f = sparsetir_ops::load(kernel).expect("catalog kernel");
    let what = format!(
        "{kernel} ({}{})",
        if schedule.is_some() {
            "default schedule"
        } else {
            "no schedule"
        },
        if specialize.is_empty() {
            String::new()
        } else {
            format!(", specialized {specialize:?}")
        }
    );
    let mut o = opts(CACHE);
    o.flags = flags.iter().map(|s| s.to_string()).collect();
    let k = build(&f, schedule, specialize, &o).unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut compared = 0;
    for (shape_name, shape) in shapes {
        for seed in 0..2 {
            let case = match random_args(kernel, &shape, seed) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("note: {kernel} {shape_name}: no data: {e}");
                    continue;
                }
            };
            // A specialized kernel is only checked on data of its sizes.
            if specialize
                .iter()
                .any(|(p, v)| case.int(p).is_some_and(|c| c != *v))
            {
                continue;
            }
            // Outputs start from values of their own, the same for both: a kernel must not
            // rely on zeroed outputs that stage I does not promise (an init the C path moved
            // into a cache must still reach every element).
            let mut args = case.args.clone();
            prefill_outputs(&mut args, &case.outputs);
            let mut want = args.clone();
            if let Err(e) = eval_func(&f, &mut want) {
                eprintln!("note: {kernel} {shape_name}: the evaluator refuses the data: {e}");
                continue;
            }
            let mut got = args;
            k.run(&mut got)
                .unwrap_or_else(|e| panic!("{what} {shape_name} seed {seed}: refused: {e}"));
            assert_same(
                &format!("{what} {shape_name} seed {seed}"),
                &case.outputs,
                &got,
                &want,
            );
            compared += 1;
        }
    }
    compared
}

/// Fills every float output array with `0.5 + i / 8` (element `i`).
fn prefill_outputs(args: &mut Args, outputs: &[String]) {
    for name in outputs {
        if let Some(sparsetir_eval::ArgValue::Array(t)) = args.get_mut(name) {
            if t.dtype().is_float() {
                for i in 0..t.len() {
                    t.set_f64(i, 0.5 + (i % 64) as f64 / 8.0);
                }
            }
        }
    }
}

#[test]
fn every_catalog_kernel_with_and_without_its_default_schedule() {
    if !have_cc() {
        return;
    }
    let mut scheduled = 0;
    for k in sparsetir_ops::catalog() {
        let plain = check_kernel(k.name, None, &[]);
        assert!(plain > 0, "{}: no case compared", k.name);
        if let Some(s) = sparsetir_ops::cpu_schedule(k.name) {
            let n = check_kernel(k.name, Some(s), &[]);
            assert!(n > 0, "{}: no scheduled case compared", k.name);
            scheduled += 1;
        }
    }
    // Every canonical kernel has a default schedule.
    assert_eq!(scheduled, sparsetir_ops::catalog().len());
}

#[test]
fn default_schedules_parallelise_the_generated_code() {
    for k in sparsetir_ops::catalog() {
        let Some(s) = sparsetir_ops::cpu_schedule(k.name) else {
            panic!("{}: no default schedule", k.name);
        };
        let f = sparsetir_ops::load(k.name).unwrap();
        let c = emit(&f, Some(s), &[]).unwrap_or_else(|e| panic!("{}: {e}", k.name));
        // `parallel for`, or one `parallel` region with nnz-balanced row ranges.
        assert!(
            c.source.contains("#pragma omp parallel"),
            "{}: no parallel loop in\n{}",
            k.name,
            c.source
        );
        let plain = emit(&f, None, &[]).unwrap();
        assert!(!plain.source.contains("#pragma omp parallel for"));
    }
}

/// The max and min aggregations (csrmm with another reduction, under csrmm's schedule, its
/// feature width specialized as `sparsetir.ops` builds it) equal the evaluator on every shape:
/// an empty row keeps its init value (the lowest or highest float).
#[test]
fn aggregations_by_max_and_min_equal_the_evaluator() {
    if !have_cc() {
        return;
    }
    for name in ["csrmm_max", "csrmm_min"] {
        let s = sparsetir_ops::cpu_schedule(name).expect("csrmm's schedule");
        for (schedule, spec) in [
            (None, vec![]),
            (Some(s), vec![]),
            (Some(s), vec![("feat_size".to_string(), 5)]),
        ] {
            let n = check_kernel(name, schedule, &spec);
            assert!(n > 0, "{name}: nothing compared");
        }
    }
}

#[test]
fn specialized_feature_widths() {
    if !have_cc() {
        return;
    }
    for (kernel, param) in [
        ("csrmm", "feat_size"),
        ("sddmm", "feat_size"),
        ("bsrmm", "feat_size"),
    ] {
        let spec = vec![(param.to_string(), 5)];
        let n = check_kernel(kernel, sparsetir_ops::cpu_schedule(kernel), &spec);
        assert!(n > 0, "{kernel}: nothing compared");
    }
    // The constant reaches the C source: no loop bound reads the parameter any more.
    let f = sparsetir_ops::load("csrmm").unwrap();
    let lowered = schedule_and_lower(&f, None, &[("feat_size".into(), 16)]).unwrap();
    let k = lowered.stage3.param("feat_size").unwrap();
    let mut used = false;
    lowered
        .stage3
        .body
        .visit(&mut |s| s.for_each_expr(|e| e.visit(&mut |x| used |= x.as_var() == Some(k))));
    assert!(!used, "feat_size still read at stage III");
    assert_eq!(lowered.stage3.params, lowered.stage2.params);
}

#[test]
fn jammed_sddmm_equals_the_evaluator() {
    if !have_cc() {
        return;
    }
    // Unroll-and-jam of the stored-element loop (`"jam"`: U elements' lane reductions in one
    // lane loop, then the remaining elements one by one), on top of the default schedule, for
    // several U and feature widths. Sixteen lanes by default (halved for width 8): widths that
    // are a multiple of the lanes keep the partial sums in vectors and combine the U totals
    // together (U = 3 one by one: not a power of two; U = 16: as many totals as lanes); 20 and
    // 24 take the array form with a remainder chunk.
    let base = sparsetir_ops::cpu_schedule("sddmm").unwrap();
    for u in [2, 3, 4, 8, 16] {
        let text = format!("{base}\nsch.annotate(l1, \"jam\", {u})\n");
        for feat in [8, 16, 20, 24, 48] {
            let spec = vec![("feat_size".to_string(), feat)];
            let wide: Vec<_> = shapes()
                .into_iter()
                .map(|(n, sh)| (n, sh.with_feat(feat as usize)))
                .collect();
            let n = check_kernel_on("sddmm", Some(&text), &spec, wide);
            assert!(n > 0, "jam {u}, feat {feat}: nothing compared");
        }
        let c = emit(
            &sparsetir_ops::load("sddmm").unwrap(),
            Some(&text),
            &[("feat_size".into(), 32)],
        )
        .unwrap();
        assert!(c.source.contains(&format!("j_1 += {u}")), "{}", c.source);
        assert!(
            c.source.contains("sptir_v16_f32 Y_data_acc_v"),
            "{}",
            c.source
        );
        assert!(c.source.contains("__builtin_shufflevector"), "{}", c.source);
        let c = emit(
            &sparsetir_ops::load("sddmm").unwrap(),
            Some(&text),
            &[("feat_size".into(), 20)],
        )
        .unwrap();
        assert!(c.source.contains("Y_data_acc_part[16]"), "{}", c.source);
        assert!(
            !c.source.contains("__builtin_shufflevector"),
            "{}",
            c.source
        );
    }
    // Narrower lane vectors (the `lanes` annotation) through the same paths.
    for lanes in [2, 4, 8] {
        let text =
            format!("{base}\nsch.annotate(l2, \"lanes\", {lanes})\nsch.annotate(l1, \"jam\", 4)\n");
        let spec = vec![("feat_size".to_string(), 16)];
        let wide: Vec<_> = shapes()
            .into_iter()
            .map(|(n, sh)| (n, sh.with_feat(16)))
            .collect();
        assert!(check_kernel_on("sddmm", Some(&text), &spec, wide) > 0);
    }
    // Without constant feature bounds there are no lanes to jam: the hint does not apply and
    // the loop is written one element at a time, with the same results.
    let text = format!("{base}\nsch.annotate(l1, \"jam\", 4)\n");
    let c = emit(&sparsetir_ops::load("sddmm").unwrap(), Some(&text), &[]).unwrap();
    assert!(!c.source.contains("j_1 += 4"), "{}", c.source);
    assert!(check_kernel("sddmm", Some(&text), &[]) > 0);
}

#[test]
fn parallel_jam_equals_the_evaluator() {
    if !have_cc() {
        return;
    }
    // `jam` on a parallel loop: the fused loop over stored elements runs groups of U elements
    // in parallel (across row boundaries), then the last `nnz % U` serially; the matrices have
    // nnz of every residue, including 0 and fewer than U.
    let base = sparsetir_ops::cpu_schedule("fused_sddmm").unwrap();
    for u in [2, 4, 8] {
        let text = format!(
            "{base}\n# stage III\nb9 = sch.get_block(\"sddmm0\")\nl8, l9 = sch.get_loops(b9)\n\
             sch.vectorize_reduction(l9)\nsch.annotate(l8, \"jam\", {u})\n\
             sch.annotate(l8, \"prefetch\", \"B:4\")\n"
        );
        for feat in [16, 20, 32] {
            let spec = vec![("feat_size".to_string(), feat)];
            let wide: Vec<_> = shapes()
                .into_iter()
                .map(|(n, sh)| (n, sh.with_feat(feat as usize)))
                .collect();
            let n = check_kernel_on("fused_sddmm", Some(&text), &spec, wide);
            assert!(n > 0, "jam {u}, feat {feat}: nothing compared");
        }
        let c = emit(
            &sparsetir_ops::load("fused_sddmm").unwrap(),
            Some(&text),
            &[("feat_size".into(), 32)],
        )
        .unwrap();
        assert!(c.source.contains("_groups; ++"), "{}", c.source);
        assert!(
            c.source.contains("#pragma omp parallel for"),
            "{}",
            c.source
        );
    }
}

#[test]
fn row_reductions_with_lanes_or_versioned_simd_equal_the_evaluator() {
    if !have_cc() {
        return;
    }
    // SpMV rows (a data-dependent trip count): `lanes` gives scalar partial sums (rows of every
    // length modulo the lanes, empty ones included); `simd_min_trip` versions the `omp simd`
    // loop (rows on both sides of the threshold: the matrices have rows of 0 to 9 elements).
    let base = "# stage III\nb0 = sch.get_block(\"spmv0\")\nl0, = sch.get_loops(b0)\n\
                sch.parallel(l0)\nb1 = sch.get_block(\"spmv1\")\n\
                c0 = sch.reverse_cache_write(b1, 0, \"local\")";
    let wide = || {
        let mut v = shapes();
        v.push((
            "wide random rows",
            Shape::new(Pattern::Random { empty_rows: true }, 40, 61)
                .with_density(0.3)
                .with_init(Init::Random),
        ));
        // Rows of about 90 elements: the 32-wide and 16-wide vector steps and every tail.
        v.push((
            "long random rows",
            Shape::new(Pattern::Random { empty_rows: true }, 30, 150)
                .with_density(0.6)
                .with_init(Init::Random),
        ));
        v
    };
    for (extra, marker) in [
        ("sch.annotate(l9, \"lanes\", 2)", "Y_data_local_acc_s1"),
        ("sch.annotate(l9, \"lanes\", 4)", "Y_data_local_acc_s3"),
        ("sch.annotate(l9, \"lanes\", 8)", "Y_data_local_acc_s7"),
        (
            "sch.annotate(l9, \"simd_min_trip\", 4)",
            "_mm512_i32gather_ps",
        ),
        (
            "sch.annotate(l9, \"lanes\", 4)\nsch.annotate(l9, \"simd_min_trip\", 16)",
            "_mm512_i32gather_ps",
        ),
        (
            "sch.annotate(l9, \"simd_min_trip\", 32)\nsch.annotate(l9, \"simd_masked_tail\", 1)",
            "_mm512_mask_i32gather_ps",
        ),
    ] {
        let text = format!(
            "{base}\nb9 = sch.get_block(\"spmv1\")\nl9, = sch.get_loops(b9)\n\
             sch.vectorize_reduction(l9)\n{extra}\n"
        );
        let n = check_kernel_on("spmv", Some(&text), &[], wide());
        assert!(n > 0, "{extra}: nothing compared");
        // The portable fallback of the AVX-512 forms (what a machine without it runs).
        let n = check_kernel_with("spmv", Some(&text), &[], wide(), &["-mno-avx512f"]);
        assert!(n > 0, "{extra}, no AVX-512: nothing compared");
        let c = emit(&sparsetir_ops::load("spmv").unwrap(), Some(&text), &[]).unwrap();
        assert!(c.source.contains(marker), "{extra}: {}", c.source);
        if extra.contains("lanes") || extra.contains("simd_min_trip") {
            // Scalar chains: no SIMD pragma on the row loop (its gathers would be vector
            // gathers).
            assert!(!c.source.contains("omp simd reduction"), "{}", c.source);
        }
    }
}

#[test]
fn spmv_auto_candidate_schedules_equal_the_evaluator() {
    if !have_cc() {
        return;
    }
    for (name, schedule) in sparsetir_ops::composable::SPMV_AUTO_CANDIDATES {
        let mut shapes = shapes();
        shapes.push((
            "long random rows",
            Shape::new(Pattern::Random { empty_rows: true }, 30, 150)
                .with_density(0.6)
                .with_init(Init::Random),
        ));
        let n = check_kernel_on("spmv", Some(schedule), &[], shapes);
        assert!(n > 0, "{name}: nothing compared");
    }
}

#[test]
fn launches_are_validated_against_the_specialized_sizes() {
    if !have_cc() {
        return;
    }
    let f = sparsetir_ops::load("csrmm").unwrap();
    let k = build(&f, None, &[("feat_size".into(), 8)], &opts(CACHE)).unwrap();
    // Data for feat_size = 3: B is too short for the specialized width 8.
    let case = random_args("csrmm", &Shape::default().with_feat(3), 0).unwrap();
    let mut args = case.args.clone();
    let err = k.run(&mut args).expect_err("refused");
    let msg = err.to_string();
    assert!(msg.contains("needs") || msg.contains("feat"), "{msg}");
}

#[test]
fn schedule_sections_at_every_stage() {
    if !have_cc() {
        return;
    }
    // Stage I: fuse the rows and their elements; stage II: parallel over the fused loop;
    // stage III: annotate it.
    let text = "\
# stage I
sp = sch.get_sparse_iteration(\"sddmm\")
sch.sparse_fuse(sp, [\"I\", \"J\"])
# stage II
b0 = sch.get_block(\"sddmm0\")
l0, l1 = sch.get_loops(b0)
sch.parallel(l0)
# stage III
b0 = sch.get_block(\"sddmm0\")
l0, l1 = sch.get_loops(b0)
sch.annotate(l0, \"schedule\", \"static\")
";
    let f = sparsetir_ops::load("sddmm").unwrap();
    let c = emit(&f, Some(text), &[]).expect("builds");
    assert!(c.source.contains("schedule(static"), "{}", c.source);
    let n = check_kernel("sddmm", Some(text), &[]);
    assert!(n > 0);
}

#[test]
fn build_errors_are_typed() {
    let f = sparsetir_ops::load("csrmm").unwrap();
    // A schedule naming a block that does not exist: the error is at the file's line 3.
    let err = emit(&f, Some("# stage II\n\nb = sch.get_block(\"nope\")\n"), &[]).unwrap_err();
    assert!(
        matches!(err, BuildError::Schedule { stage: "II", .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("3:"), "{err}");
    // Unknown parameter.
    let err = emit(&f, None, &[("width".into(), 3)]).unwrap_err();
    assert!(matches!(err, BuildError::Specialize(_)), "{err:?}");
    // Stage III input.
    let lowered = schedule_and_lower(&f, None, &[]).unwrap();
    let err = emit(&lowered.stage3, None, &[]).unwrap_err();
    assert!(matches!(err, BuildError::NotStageI { .. }), "{err:?}");
    // Bad section header.
    let err = emit(&f, Some("# stage four\n"), &[]).unwrap_err();
    assert!(
        matches!(err, BuildError::BadSection { line: 1, .. }),
        "{err:?}"
    );
    // Thread bindings cannot run on the C target.
    let text =
        "b0 = sch.get_block(\"csrmm0\")\nl0, = sch.get_loops(b0)\nsch.bind(l0, \"blockIdx.x\")\n";
    let err = emit(&f, Some(text), &[]).unwrap_err();
    assert!(matches!(err, BuildError::Codegen(_)), "{err:?}");
}

#[test]
fn vector_loops_equal_the_evaluator() {
    if !have_cc() {
        return;
    }
    // Feature widths that are multiples of 16 are written one machine vector at a time
    // (`SPTIR_VL_f32` steps, vector types); others keep the `omp simd` loop. Both agree with
    // the evaluator, on arrays of whatever alignment the test allocator gives.
    for kernel in ["csrmm", "bsrmm"] {
        let schedule = sparsetir_ops::cpu_schedule(kernel);
        for feat in [16, 20, 32, 128] {
            let spec = vec![("feat_size".to_string(), feat)];
            let wide: Vec<_> = shapes()
                .into_iter()
                .map(|(n, sh)| (n, sh.with_feat(feat as usize)))
                .collect();
            let n = check_kernel_on(kernel, schedule, &spec, wide);
            assert!(n > 0, "{kernel} feat {feat}: nothing compared");
        }
    }
    let f = sparsetir_ops::load("csrmm").unwrap();
    let schedule = sparsetir_ops::cpu_schedule("csrmm");
    let c = emit(&f, schedule, &[("feat_size".into(), 32)]).unwrap();
    assert!(c.source.contains("+= SPTIR_VL_f32)"), "{}", c.source);
    assert!(c.source.contains("sptir_vld_f32(&B_data["), "{}", c.source);
    assert!(!c.source.contains("omp simd"), "{}", c.source);
    let c = emit(&f, schedule, &[("feat_size".into(), 20)]).unwrap();
    assert!(!c.source.contains("SPTIR_VL_f32"), "{}", c.source);
    assert!(c.source.contains("omp simd"), "{}", c.source);
}
