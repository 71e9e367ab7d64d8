//! Stores through index arrays from iterations that run apart: a schedule may run a loop in
//! parallel (or over GPU threads) when each iteration stores through an index array into an
//! element of its own, which holds only if the array's values are distinct where the loop reads
//! them. The build records that (`assume_distinct` on the validated stage-I function) and every
//! launch checks it: a permutation scatters, a repeated row is refused naming both positions,
//! an unsorted compressed axis may repeat a coordinate across fibers but not inside one, and
//! random tables run exactly where the values read apart are distinct.

use std::collections::HashMap;

use sparsetir_eval::{eval_func, ArgValue};
use sparsetir_ir::{DistinctScope, PrimFunc};
use sparsetir_runtime::build::build;
use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};
use sparsetir_runtime::{KernelCache, RunError};

use crate::common;
use common::{f32s, have_cc, i32s, int, opts, Args};

/// `Y[P[i]] = X[i]` over `n` elements.
const SCATTER: &str = r#"@T.prim_func
def scatter(x: T.handle, y: T.handle, p: T.handle, n: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(n)
    X = T.sp.match_buffer(x, (I,), "float32")
    Y = T.sp.match_buffer(y, (I,), "float32")
    P = T.sp.match_buffer(p, (I,), "int32")
    with T.sp.iteration([I], "S", "scatter") as [i]:
        Y[P[i]] = X[i]
"#;

/// Row `i`'s stored coordinates `j` (an unsorted compressed axis) mark `Z[i, j]`.
const MARK: &str = r#"@T.prim_func
def mark(a: T.handle, z: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices), "int32", sorted=False)
    J_detach = T.sp.dense_fixed(n)
    A = T.sp.match_buffer(a, (I, J), "float32")
    Z = T.sp.match_buffer(z, (I, J_detach), "float32")
    with T.sp.iteration([I, J], "SS", "mark") as [i, j]:
        Z[i, j] = A[i, j]
"#;

fn parse(src: &str) -> PrimFunc {
    sparsetir_syntax::parse_func(src).expect("parse")
}

fn scatter_args(perm: &[i32]) -> Args {
    let n = perm.len();
    let mut a: Args = HashMap::new();
    a.insert("n".into(), int(n));
    a.insert(
        "x".into(),
        f32s(vec![n], (0..n).map(|i| i as f32 * 1.5 - 2.0).collect()),
    );
    a.insert("y".into(), f32s(vec![n], vec![0.0; n]));
    a.insert("p".into(), i32s(perm));
    a
}

fn floats(a: &Args, name: &str) -> Vec<f64> {
    match a.get(name) {
        Some(ArgValue::Array(t)) => t.to_f64_vec(),
        _ => panic!("{name}"),
    }
}

fn cache() -> KernelCache {
    KernelCache::new(std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("distinct"))
}

#[test]
fn a_parallel_scatter_runs_on_a_permutation_and_refuses_a_repeated_index() {
    if !have_cc() {
        return;
    }
    let f = parse(SCATTER);
    let sched = "# stage III\nb = sch.get_block(\"scatter0\")\ni, = sch.get_loops(b)\n\
                 sch.parallel(i)\n";
    let k = build(&f, Some(sched), &[], &opts("distinct-c")).expect("build");
    let perm = [3, 0, 6, 1, 5, 2, 4];
    let mut want = scatter_args(&perm);
    eval_func(&f, &mut want).expect("evaluator");
    let mut got = scatter_args(&perm);
    k.run(&mut got).expect("a permutation runs");
    assert_eq!(floats(&got, "y"), floats(&want, "y"));
    // Independently: y[perm[i]] = x[i].
    let x = floats(&got, "x");
    for (i, &p) in perm.iter().enumerate() {
        assert_eq!(floats(&got, "y")[p as usize], x[i]);
    }
    // Two iterations would store into y[5] together.
    let mut bad = scatter_args(&[3, 5, 6, 1, 5, 2, 4]);
    let e = k.run(&mut bad).expect_err("a repeated index is refused");
    let RunError::Domain { buffer, message } = &e else {
        panic!("{e}")
    };
    assert_eq!(buffer, "P");
    assert!(
        message.contains("values [1] and [4] are both 5"),
        "{message}"
    );
    assert_eq!(floats(&bad, "y"), vec![0.0; 7], "nothing ran");
    // Serial, the same data runs (the last store wins, as in the evaluator).
    let serial = build(&f, None, &[], &opts("distinct-c")).expect("build");
    let mut want = scatter_args(&[3, 5, 6, 1, 5, 2, 4]);
    eval_func(&f, &mut want).expect("evaluator");
    let mut got = scatter_args(&[3, 5, 6, 1, 5, 2, 4]);
    serial.run(&mut got).expect("serial runs");
    assert_eq!(floats(&got, "y"), floats(&want, "y"));
}

#[test]
fn threads_scattering_are_checked_alike_in_the_emulator() {
    if !have_cc() {
        return;
    }
    let f = parse(SCATTER);
    // The automatic GPU schedule puts the loop over blocks and threads.
    let k = GpuKernel::build(&f, None, &[], GpuDevice::Emulator, &cache()).expect("build");
    let perm: Vec<i32> = (0..300).map(|i| (i * 7) % 300).collect();
    let mut want = scatter_args(&perm);
    eval_func(&f, &mut want).expect("evaluator");
    let mut got = scatter_args(&perm);
    k.run(&mut got).expect("a permutation runs");
    assert_eq!(floats(&got, "y"), floats(&want, "y"));
    let mut perm = perm;
    perm[299] = perm[0];
    let e = k.run(&mut scatter_args(&perm)).expect_err("refused");
    assert!(
        e.to_string().contains("values [0] and [299] are both 0"),
        "{e}"
    );
}

#[test]
fn an_unsorted_axis_may_repeat_a_coordinate_across_fibers_not_inside_one() {
    if !have_cc() {
        return;
    }
    let f = parse(MARK);
    // The coordinates of one row over the threads of a parallel loop.
    let sched = "# stage III\nb = sch.get_block(\"mark1\")\nj, = sch.get_loops(b)\n\
                 sch.parallel(j)\n";
    let k = build(&f, Some(sched), &[], &opts("distinct-c")).expect("build");
    let args = |indices: &[i32]| {
        let mut a: Args = HashMap::new();
        for (p, v) in [("m", 3), ("n", 4), ("nnz", 5)] {
            a.insert(p.into(), int(v));
        }
        a.insert("indptr".into(), i32s(&[0, 2, 2, 5]));
        a.insert("indices".into(), i32s(indices));
        a.insert("a".into(), f32s(vec![5], vec![1.0, 2.0, 3.0, 4.0, 5.0]));
        a.insert("z".into(), f32s(vec![3, 4], vec![0.0; 12]));
        a
    };
    // Column 3 in rows 0 and 2, unsorted inside row 2.
    let ok = [3, 1, 2, 0, 3];
    let mut want = args(&ok);
    eval_func(&f, &mut want).expect("evaluator");
    let mut got = args(&ok);
    k.run(&mut got).expect("distinct inside each row");
    let z = floats(&got, "z");
    assert_eq!(z, floats(&want, "z"));
    assert_eq!(
        (z[3], z[1], z[4 * 2 + 2], z[4 * 2], z[4 * 2 + 3]),
        (1.0, 2.0, 3.0, 4.0, 5.0)
    );
    // Row 2 stores column 0 twice: its two positions would store into z[2, 0] together.
    let e = k.run(&mut args(&[3, 1, 0, 2, 0])).expect_err("refused");
    let RunError::Indices {
        axis,
        param,
        message,
    } = &e
    else {
        panic!("{e}")
    };
    assert_eq!((axis.as_str(), param.as_str()), ("J", "indices"));
    assert!(
        message.contains("values [2] and [4] are both 0 (both in fiber 2"),
        "{message}"
    );
}

/// What each build asks: the parameter and where its values must be distinct.
#[test]
fn the_build_records_what_the_final_function_trusts() {
    let lowered = |src: &str, sched: &str| {
        sparsetir_runtime::build::schedule_and_lower(&parse(src), Some(sched), &[])
            .expect("lower")
            .stage1
            .attrs
            .distinct()
    };
    let par = |block: &str, loops: &str, which: &str| {
        format!(
            "# stage III\nb = sch.get_block(\"{block}\")\n{loops} = sch.get_loops(b)\n\
             sch.parallel({which})\n"
        )
    };
    assert_eq!(
        lowered(SCATTER, &par("scatter0", "i,", "i")),
        vec![("p".to_string(), DistinctScope::All)]
    );
    assert_eq!(
        lowered(MARK, &par("mark1", "j,", "j")),
        vec![("indices".to_string(), DistinctScope::Fiber)]
    );
    // Rows apart store into rows of their own: nothing read from memory is trusted.
    assert_eq!(lowered(MARK, &par("mark0", "i,", "i")), vec![]);
    // No parallel loop, nothing asked.
    assert_eq!(lowered(SCATTER, "# stage III\n"), vec![]);
}

/// ELL rows apart storing `Y[j]` ask every stored column to be distinct (rows share columns):
/// checked over the whole array, sorted or not.
#[test]
fn rows_apart_storing_through_their_columns_ask_every_column_distinct() {
    if !have_cc() {
        return;
    }
    let f = parse(
        r#"@T.prim_func
def ell(a: T.handle, y: T.handle, indices: T.handle, m: T.int32, n: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_fixed(I, (n, 2), indices)
    J_detach = T.sp.dense_fixed(n)
    A = T.sp.match_buffer(a, (I, J), "float32")
    Y = T.sp.match_buffer(y, (J_detach,), "float32")
    with T.sp.iteration([I, J], "SS", "ell") as [i, j]:
        Y[j] = A[i, j]
"#,
    );
    let sched = "# stage III\nb = sch.get_block(\"ell0\")\ni, j = sch.get_loops(b)\n\
                 sch.parallel(i)\n";
    let k = build(&f, Some(sched), &[], &opts("distinct-c")).expect("build");
    let args = |indices: &[i32]| {
        let mut a: Args = HashMap::new();
        a.insert("m".into(), int(3));
        a.insert("n".into(), int(6));
        a.insert("indices".into(), i32s(indices));
        a.insert(
            "a".into(),
            f32s(vec![6], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
        );
        a.insert("y".into(), f32s(vec![6], vec![0.0; 6]));
        a
    };
    let mut got = args(&[0, 4, 1, 2, 3, 5]);
    k.run(&mut got).expect("every column once");
    assert_eq!(floats(&got, "y"), vec![1.0, 3.0, 4.0, 5.0, 2.0, 6.0]);
    let e = k.run(&mut args(&[0, 4, 1, 4, 3, 5])).expect_err("refused");
    assert!(
        e.to_string()
            .contains("values [1] and [3] are both 4, but the kernel's schedule"),
        "{e}"
    );
    assert!(e.to_string().contains("over the whole array"), "{e}");
}

/// `Y[R[k, l]] = X[k, l]` over a `K × L` table of rows.
const TABLE: &str = r#"@T.prim_func
def table(x: T.handle, y: T.handle, r: T.handle, nk: T.int32, nl: T.int32, n: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    K = T.sp.dense_fixed(nk)
    L = T.sp.dense_fixed(nl)
    N = T.sp.dense_fixed(n)
    X = T.sp.match_buffer(x, (K, L), "float32")
    Y = T.sp.match_buffer(y, (N,), "float32")
    R = T.sp.match_buffer(r, (K, L), "int32")
    with T.sp.iteration([K, L], "SS", "table") as [k, l]:
        Y[R[k, l]] = X[k, l]
"#;

/// Random tables, half of them with values repeated somewhere: each launch of a kernel that
/// runs the rows `k` (whole table) or the slots `l` of a row (each row) apart either equals the
/// evaluator or is refused, and it is refused exactly where two values the loop reads apart
/// repeat.
#[test]
fn launches_run_exactly_where_the_values_read_apart_are_distinct() {
    if !have_cc() {
        return;
    }
    let f = parse(TABLE);
    let (nk, nl, n) = (4usize, 3usize, 12usize);
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move |below: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % below as u64) as usize
    };
    for (which, per_row) in [(0, false), (1, true)] {
        let sched = format!(
            "# stage III\nb = sch.get_block(\"table0\")\nk, l = sch.get_loops(b)\n\
             sch.parallel({})\n",
            ["k", "l"][which]
        );
        let kernel = build(&f, Some(&sched), &[], &opts("distinct-c")).expect("build");
        let (mut ran, mut refused) = (0, 0);
        for case in 0..40 {
            // A permutation of 0..n, then (every other case) one value copied onto another.
            let mut r: Vec<i32> = (0..n as i32).collect();
            for i in (1..n).rev() {
                r.swap(i, next(i + 1));
            }
            if case % 2 == 1 {
                let (a, b) = (next(n), next(n));
                r[a] = r[b];
            }
            let repeats = |lo: usize, hi: usize| {
                let mut v = r[lo..hi].to_vec();
                v.sort_unstable();
                v.windows(2).any(|w| w[0] == w[1])
            };
            let expect_refusal = if per_row {
                (0..nk).any(|k| repeats(k * nl, (k + 1) * nl))
            } else {
                repeats(0, n)
            };
            let args = || {
                let mut a: Args = HashMap::new();
                for (p, v) in [("nk", nk), ("nl", nl), ("n", n)] {
                    a.insert(p.into(), int(v));
                }
                let x: Vec<f32> = (0..n).map(|i| i as f32 + 0.5).collect();
                a.insert("x".into(), f32s(vec![nk, nl], x));
                a.insert("y".into(), f32s(vec![n], vec![-1.0; n]));
                a.insert("r".into(), i32s(&r));
                a
            };
            let mut got = args();
            match kernel.run(&mut got) {
                Ok(()) => {
                    assert!(!expect_refusal, "{r:?} ran with {sched}");
                    let mut want = args();
                    eval_func(&f, &mut want).expect("evaluator");
                    assert_eq!(floats(&got, "y"), floats(&want, "y"), "{r:?}");
                    ran += 1;
                }
                Err(e) => {
                    assert!(expect_refusal, "{r:?} refused with {sched}: {e}");
                    assert!(matches!(e, RunError::Domain { .. }), "{e}");
                    refused += 1;
                }
            }
        }
        assert!(
            ran >= 20 && refused >= 3,
            "{sched}: {ran} ran, {refused} refused"
        );
    }
}

/// `assume_monotone`: a parameter whose consecutive values a schedule takes as the bounds of
/// each iteration's range of positions must never decrease; a launch that breaks it is refused
/// naming the two values. The build asks it of no axis's `indptr` (validated so already): rows
/// of a CSR matrix apart, each storing its own fiber's positions, record nothing.
#[test]
fn ranges_read_from_memory_are_checked_never_to_decrease() {
    use sparsetir_runtime::validate::validate_args;
    let mut f = parse(SCATTER);
    f.attrs.assume_monotone("p");
    assert_eq!(f.attrs.monotone(), vec!["p".to_string()]);
    // Printed and parsed back, the demand stays.
    let text = sparsetir_ir::printer::print_func(&f);
    assert_eq!(parse(&text).attrs.monotone(), vec!["p".to_string()]);
    validate_args(&f, &scatter_args(&[0, 0, 2, 3, 3, 5, 6])).expect("non-decreasing");
    let e = validate_args(&f, &scatter_args(&[0, 1, 4, 3, 5, 6, 6])).expect_err("decreasing");
    let RunError::Domain { buffer, message } = &e else {
        panic!("{e}")
    };
    assert_eq!(buffer, "P");
    assert!(
        message.contains("value [2] = 4 is greater than value [3] = 3"),
        "{message}"
    );
    // Without the demand the same data validates.
    validate_args(&parse(SCATTER), &scatter_args(&[0, 1, 4, 3, 5, 6, 6])).expect("unchecked");
    let rows = "# stage III\nb = sch.get_block(\"mark0\")\ni, = sch.get_loops(b)\n\
                sch.parallel(i)\n";
    let stage1 = sparsetir_runtime::build::schedule_and_lower(&parse(MARK), Some(rows), &[])
        .expect("lower")
        .stage1;
    assert_eq!(stage1.attrs.monotone(), Vec::<String>::new());
}

/// Every catalog kernel, built for the CPU (serial and with its schedule) and for the GPU
/// (the automatic schedule, and its GPU schedule): the final stage III function still proves
/// every parallel, vectorized and thread-bound loop apart (`data_requirements` reports none
/// `unproven`), whatever the primitives after the one that set the loop's kind changed.
#[test]
fn the_final_function_of_every_catalog_schedule_proves_its_loops_apart() {
    use sparsetir_runtime::build::{emit_cuda, schedule_and_lower};
    let mut checked = 0;
    for k in sparsetir_ops::catalog() {
        let f = sparsetir_ops::load(k.name).expect("load");
        let spec = |sched: Option<&str>| -> Vec<(String, i64)> {
            if sched.is_some() && f.param("feat_size").is_some() {
                vec![("feat_size".into(), 128)]
            } else {
                Vec::new()
            }
        };
        let cpu = sparsetir_ops::cpu_schedule(k.name);
        let gpu = sparsetir_ops::gpu_schedule(k.name);
        let mut finals = Vec::new();
        for sched in [None, cpu] {
            if let Ok(l) = schedule_and_lower(&f, sched, &spec(sched)) {
                finals.push((format!("{} cpu {}", k.name, sched.is_some()), l.stage3));
            }
        }
        for sched in [None, gpu] {
            if let Ok((l, _)) = emit_cuda(&f, sched, &spec(sched)) {
                finals.push((format!("{} gpu {}", k.name, sched.is_some()), l.stage3));
            }
        }
        for (what, g) in finals {
            let needs = sparsetir_schedule::data_requirements(&g);
            assert!(needs.unproven.is_empty(), "{what}: {:?}", needs.unproven);
            checked += 1;
        }
    }
    // 84 today: every kernel builds on both paths.
    assert!(checked >= 80, "{checked} functions checked");
}
