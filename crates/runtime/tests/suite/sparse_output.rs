//! The sparse-output kernels (issue 15) through the stage II/III interpreter and the C backend,
//! against the stage-I evaluator (the oracle) and a dense computation written here: assembled
//! outputs in two phases or, for SpGEMM, in one staged pass (`runtime::assembly`), merge loops
//! for `T.sp.union`/`T.sp.intersect`, Gustavson's workspace for SpGEMM; random operands with different structures, empty rows,
//! empty operands and rectangular shapes; serial and parallel schedules.

#![allow(clippy::needless_range_loop)]

use crate::common;

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sparsetir_eval::{eval_func, ArgValue};
use sparsetir_ir::PrimFunc;
use sparsetir_runtime::assembly::{run_interp, run_interp_with, AssembledKernel, Plan};
use sparsetir_runtime::compile_c;

use common::{f32s, f64s, have_cc, i32s, int, opts, Args};

/// A CSR matrix with sorted unique columns.
#[derive(Clone, Debug)]
struct Csr {
    m: usize,
    n: usize,
    indptr: Vec<i32>,
    indices: Vec<i32>,
    vals: Vec<f32>,
}

impl Csr {
    fn random(rng: &mut ChaCha8Rng, m: usize, n: usize, density: f64) -> Csr {
        let mut indptr = vec![0];
        let (mut indices, mut vals) = (Vec::new(), Vec::new());
        for i in 0..m {
            let empty_row = i % 5 == 3;
            for j in 0..n {
                if !empty_row && rng.random_bool(density) {
                    indices.push(j as i32);
                    vals.push((rng.random_range(1..16) as f32) / 4.0 - 2.0);
                }
            }
            indptr.push(indices.len() as i32);
        }
        Csr {
            m,
            n,
            indptr,
            indices,
            vals,
        }
    }
    fn dense(&self) -> Vec<Vec<Option<f64>>> {
        let mut d = vec![vec![None; self.n]; self.m];
        for i in 0..self.m {
            for p in self.indptr[i] as usize..self.indptr[i + 1] as usize {
                d[i][self.indices[p] as usize] = Some(f64::from(self.vals[p]));
            }
        }
        d
    }
    fn bind(&self, args: &mut Args, data: &str, prefix: &str) {
        args.insert(data.into(), f32s(vec![self.vals.len()], self.vals.clone()));
        args.insert(format!("{prefix}_indptr"), i32s(&self.indptr));
        args.insert(format!("{prefix}_indices"), i32s(&self.indices));
        args.insert(format!("nnz_{prefix}"), int(self.vals.len()));
    }
}

/// The assembled `C` of `args` as a dense matrix of `Some(value)` where stored.
fn result(args: &Args, m: usize, n: usize) -> Vec<Vec<Option<f64>>> {
    let ip = f64s(args, "c_indptr");
    let ix = f64s(args, "c_indices");
    let v = f64s(args, "c");
    assert_eq!(ip.len(), m + 1);
    assert_eq!(args.get("nnz_c"), Some(&ArgValue::Int(v.len() as i64)));
    let mut d = vec![vec![None; n]; m];
    for i in 0..m {
        let (lo, hi) = (ip[i] as usize, ip[i + 1] as usize);
        for p in lo..hi {
            if p > lo {
                assert!(ix[p] > ix[p - 1], "row {i}: columns not increasing");
            }
            d[i][ix[p] as usize] = Some(v[p]);
        }
    }
    d
}

fn close(got: &[Vec<Option<f64>>], want: &[Vec<Option<f64>>], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: rows");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        for (j, (a, b)) in g.iter().zip(w).enumerate() {
            match (a, b) {
                (Some(a), Some(b)) => assert!(
                    (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                    "{what}: ({i}, {j}) = {a}, want {b}"
                ),
                (None, None) => {}
                _ => panic!("{what}: ({i}, {j}) stored {a:?}, want {b:?}"),
            }
        }
    }
}

/// A dense reference of each kernel.
fn reference(kernel: &str, a: &Csr, b: &Csr, mask: Option<&Csr>) -> Vec<Vec<Option<f64>>> {
    let (da, db) = (a.dense(), b.dense());
    match kernel {
        "spadd" | "spmul" => (0..a.m)
            .map(|i| {
                (0..a.n)
                    .map(|j| match (da[i][j], db[i][j], kernel) {
                        (Some(x), Some(y), "spadd") => Some(x + y),
                        (Some(x), Some(y), _) => Some(x * y),
                        (Some(x), None, "spadd") | (None, Some(x), "spadd") => Some(x),
                        _ => None,
                    })
                    .collect()
            })
            .collect(),
        _ => {
            let mut c = vec![vec![None; b.n]; a.m];
            for i in 0..a.m {
                for k in 0..a.n {
                    let Some(x) = da[i][k] else { continue };
                    for j in 0..b.n {
                        if let Some(y) = db[k][j] {
                            *c[i][j].get_or_insert(0.0) += x * y;
                        }
                    }
                }
            }
            if let Some(mk) = mask {
                let dm = mk.dense();
                for i in 0..a.m {
                    for j in 0..b.n {
                        c[i][j] = dm[i][j].map(|mv| mv * c[i][j].unwrap_or(0.0));
                    }
                }
            }
            c
        }
    }
}

fn args_for(kernel: &str, a: &Csr, b: &Csr, mask: Option<&Csr>) -> Args {
    let mut args = HashMap::new();
    a.bind(&mut args, "a", "a");
    b.bind(&mut args, "b", "b");
    args.insert("m".into(), int(a.m));
    if kernel == "spadd" || kernel == "spmul" {
        args.insert("n".into(), int(a.n));
    } else {
        args.insert("k".into(), int(a.n));
        args.insert("n".into(), int(b.n));
    }
    if let Some(mk) = mask {
        mk.bind(&mut args, "mask", "m");
        // `m` is both the mask's prefix and the row count: the mask's arrays are m_indptr,
        // m_indices, nnz_m; the row count stays `m`.
        args.insert("m".into(), int(a.m));
        args.insert(
            "c".into(),
            f32s(vec![mk.vals.len()], vec![0.0; mk.vals.len()]),
        );
    }
    args
}

/// Pairs of operands: (m, k, n, density of A, density of B).
const SHAPES: &[(usize, usize, usize, f64, f64)] = &[
    (9, 9, 9, 0.3, 0.25),
    (7, 5, 9, 0.4, 0.3),
    (12, 6, 4, 0.2, 0.5),
    (6, 6, 6, 0.0, 0.4),
    (1, 1, 1, 1.0, 1.0),
    (30, 30, 30, 0.1, 0.15),
];

const PARALLEL: &str = "# stage III\nb0 = sch.get_block(\"{name}0\")\nl0, = sch.get_loops(b0)\nsch.parallel(l0)\nsch.annotate(l0, \"schedule\", \"dynamic\")\n";

fn operands(kernel: &str, seed: u64) -> Vec<(Csr, Csr, Option<Csr>)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    SHAPES
        .iter()
        .map(|&(m, k, n, da, db)| {
            let elementwise = kernel == "spadd" || kernel == "spmul";
            let a = Csr::random(&mut rng, m, if elementwise { n } else { k }, da);
            let b = if elementwise {
                Csr::random(&mut rng, m, n, db)
            } else {
                Csr::random(&mut rng, k, n, db)
            };
            let mask = (kernel == "masked_spgemm").then(|| Csr::random(&mut rng, m, n, 0.4));
            (a, b, mask)
        })
        .collect()
}

/// `f` built in C for every schedule of `schedules` (none without a C compiler).
fn build_all(f: &PrimFunc, schedules: &[Option<&str>], cache: &str) -> Vec<AssembledKernel> {
    if !have_cc() {
        return Vec::new();
    }
    schedules
        .iter()
        .map(|s| {
            AssembledKernel::build(f, *s, &[], &opts(cache))
                .unwrap_or_else(|e| panic!("{cache}: build: {e}"))
        })
        .collect()
}

/// Stage-I function `f` on the evaluator, the interpreter and every kernel of `compiled`, each
/// on fresh `args()`: the assembled `C` (`m × n`) must be `want`.
fn same_everywhere(
    f: &PrimFunc,
    compiled: &[AssembledKernel],
    args: impl Fn() -> Args,
    (m, n): (usize, usize),
    want: &[Vec<Option<f64>>],
    what: &str,
) {
    let mut e = args();
    eval_func(f, &mut e).unwrap_or_else(|err| panic!("{what}: eval: {err}"));
    close(&result(&e, m, n), want, &format!("{what}, eval"));
    let mut i = args();
    run_interp(f, &mut i).unwrap_or_else(|err| panic!("{what}: interp: {err}"));
    close(&result(&i, m, n), want, &format!("{what}, interp"));
    for (s, k) in compiled.iter().enumerate() {
        let mut c = args();
        k.run(&mut c)
            .unwrap_or_else(|err| panic!("{what}: C: {err}"));
        close(&result(&c, m, n), want, &format!("{what}, C schedule {s}"));
    }
}

fn check_assembling(kernel: &str) {
    let f = sparsetir_ops::load(kernel).expect("kernel");
    let parallel = PARALLEL.replace("{name}", kernel);
    let compiled = build_all(
        &f,
        &[None, Some(parallel.as_str())],
        &format!("sparse_output_{kernel}"),
    );
    for (t, (a, b, _)) in operands(kernel, 15).iter().enumerate() {
        let want = reference(kernel, a, b, None);
        let what = format!("{kernel} case {t} ({}x{} and {}x{})", a.m, a.n, b.m, b.n);
        let args = || args_for(kernel, a, b, None);
        same_everywhere(&f, &compiled, args, (a.m, b.n), &want, &what);
    }
}

#[test]
fn spadd_on_every_backend() {
    check_assembling("spadd");
}

#[test]
fn spmul_on_every_backend() {
    check_assembling("spmul");
}

#[test]
fn spgemm_on_every_backend() {
    check_assembling("spgemm");
}

/// SpGEMM compiles to the one-pass (staged) plan; the merge kernels keep two phases.
#[test]
fn spgemm_stages_in_one_pass_and_merges_take_two_phases() {
    if !have_cc() {
        return;
    }
    for (name, plan) in [("spgemm", Plan::Staged), ("spadd", Plan::TwoPhase)] {
        let f = sparsetir_ops::load(name).expect("kernel");
        let k = AssembledKernel::build(&f, None, &[], &opts(&format!("sparse_output_plan_{name}")))
            .expect("builds");
        assert_eq!(k.plan(), plan, "{name}");
        let phases: Vec<_> = k.sources().iter().map(|(p, _)| *p).collect();
        assert_eq!(phases, plan.phases(), "{name}");
    }
}

/// The three workspaces of the staged pass — the bitmap, the byte marks read 64 at a time, and
/// the byte marks found through a byte per group — on the interpreter and in C (the byte marks
/// also through the AVX2 and the portable `sptir_mask64` and compress loops), whatever the
/// bound phase would choose: widths around multiples of 64 and of 4,096 (the marks and the
/// group bytes are padded to whole groups), empty rows and operands, sparse and dense rows.
#[test]
fn spgemm_every_staged_workspace_on_every_backend() {
    use sparsetir_transform::Phase;
    let f = sparsetir_ops::load("spgemm").expect("kernel");
    let parallel = PARALLEL.replace("{name}", "spgemm");
    let mut rng = ChaCha8Rng::seed_from_u64(57);
    let mut cases: Vec<(Csr, Csr)> = operands("spgemm", 58)
        .into_iter()
        .map(|(a, b, _)| (a, b))
        .collect();
    for &(m, k, n, da, db) in &[
        (20, 30, 64, 0.2, 0.3),
        (17, 40, 65, 0.1, 0.5),
        (40, 25, 130, 0.15, 0.05),
        (60, 90, 200, 0.02, 0.02),
        (5, 8, 63, 0.0, 0.5),
        // Past one group of 64 group bytes (4,096 columns): two words of `groups`.
        (12, 30, 4160, 0.2, 0.01),
    ] {
        cases.push((
            Csr::random(&mut rng, m, k, da),
            Csr::random(&mut rng, k, n, db),
        ));
    }
    for ws in [Phase::Staged, Phase::StagedDense, Phase::StagedGroups] {
        let mut kernels = Vec::new();
        if have_cc() {
            let flag_sets: &[&[&str]] = if ws.has_marks() {
                &[&[], &["-mno-avx512bw"], &["-mno-avx512bw", "-mno-avx2"]]
            } else {
                &[&[]]
            };
            for flags in flag_sets {
                for schedule in [None, Some(parallel.as_str())] {
                    let mut o = opts("sparse_output_workspaces");
                    o.flags = flags.iter().map(|x| x.to_string()).collect();
                    let k = AssembledKernel::build(&f, schedule, &[], &o)
                        .expect("builds")
                        .with_workspace(ws);
                    kernels.push((format!("{flags:?}, schedule {}", schedule.is_some()), k));
                }
            }
        }
        for (t, (a, b)) in cases.iter().enumerate() {
            let want = reference("spgemm", a, b, None);
            let what = format!(
                "{} case {t} ({}x{} by {}x{})",
                ws.name(),
                a.m,
                a.n,
                b.m,
                b.n
            );
            let mut i = args_for("spgemm", a, b, None);
            run_interp_with(&f, &mut i, Some(ws)).unwrap_or_else(|e| panic!("{what}: interp: {e}"));
            close(&result(&i, a.m, b.n), &want, &format!("{what}, interp"));
            for (name, k) in &kernels {
                let mut c = args_for("spgemm", a, b, None);
                k.run(&mut c)
                    .unwrap_or_else(|e| panic!("{what}: C {name}: {e}"));
                close(&result(&c, a.m, b.n), &want, &format!("{what}, C {name}"));
            }
        }
    }
}

/// A staging area too small for the staged rows (from a few elements to one short of what
/// two threads' blocks take): the run finds it out from `used`, runs again with the room it
/// asked for, and the product is still right, serial and parallel.
#[test]
fn spgemm_that_outgrows_its_staging_area_runs_again() {
    if !have_cc() {
        return;
    }
    let f = sparsetir_ops::load("spgemm").expect("kernel");
    let parallel = PARALLEL.replace("{name}", "spgemm");
    let mut rng = ChaCha8Rng::seed_from_u64(41);
    let a = Csr::random(&mut rng, 40, 30, 0.2);
    let b = Csr::random(&mut rng, 30, 50, 0.3);
    let want = reference("spgemm", &a, &b, None);
    for (s, schedule) in [None, Some(parallel.as_str())].into_iter().enumerate() {
        let k = AssembledKernel::build(&f, schedule, &[], &opts("sparse_output_outgrow"))
            .expect("builds");
        for cap in [0, 1, 7, 100, 2047] {
            let k2 = AssembledKernel::build(&f, schedule, &[], &opts("sparse_output_outgrow"))
                .expect("builds")
                .with_first_capacity(cap);
            let mut c = args_for("spgemm", &a, &b, None);
            k2.run(&mut c)
                .unwrap_or_else(|e| panic!("schedule {s}, capacity {cap}: {e}"));
            close(
                &result(&c, a.m, b.n),
                &want,
                &format!("schedule {s}, first capacity {cap}"),
            );
        }
        // And the sized area, run twice on the same arguments (the area is kept).
        let mut c = args_for("spgemm", &a, &b, None);
        k.run(&mut c).expect("runs");
        k.run(&mut c).expect("runs again");
        close(
            &result(&c, a.m, b.n),
            &want,
            &format!("schedule {s}, kept area"),
        );
        // The staging area is the kernel's scratch, not an output.
        let leaked: Vec<&String> = c.keys().filter(|n| n.contains("__")).collect();
        assert!(
            leaked.is_empty(),
            "staging arguments in the results: {leaked:?}"
        );
        let mut i = args_for("spgemm", &a, &b, None);
        run_interp(&f, &mut i).expect("interp");
        assert!(
            i.keys().all(|n| !n.contains("__")),
            "interp results: {:?}",
            i.keys()
        );
    }
}

#[test]
fn masked_spgemm_on_every_backend() {
    let f = sparsetir_ops::load("masked_spgemm").expect("kernel");
    let kernel = have_cc().then(|| compile_c(&f, &opts("sparse_output_masked")));
    for (t, (a, b, mask)) in operands("masked_spgemm", 16).iter().enumerate() {
        let mk = mask.as_ref().expect("mask");
        let want = reference("masked_spgemm", a, b, Some(mk));
        let what = format!("masked_spgemm case {t}");
        let read = |args: &Args| -> Vec<Vec<Option<f64>>> {
            let v = f64s(args, "c");
            let mut d = vec![vec![None; mk.n]; mk.m];
            for i in 0..mk.m {
                for p in mk.indptr[i] as usize..mk.indptr[i + 1] as usize {
                    d[i][mk.indices[p] as usize] = Some(v[p]);
                }
            }
            d
        };
        let mut e = args_for("masked_spgemm", a, b, Some(mk));
        eval_func(&f, &mut e).unwrap_or_else(|err| panic!("{what}: eval: {err}"));
        close(&read(&e), &want, &format!("{what}, eval"));
        let mut i = args_for("masked_spgemm", a, b, Some(mk));
        run_interp(&f, &mut i).unwrap_or_else(|err| panic!("{what}: interp: {err}"));
        close(&read(&i), &want, &format!("{what}, interp"));
        if let Some(k) = &kernel {
            let mut c = args_for("masked_spgemm", a, b, Some(mk));
            k.as_ref()
                .expect("builds")
                .run(&mut c)
                .unwrap_or_else(|err| panic!("{what}: C: {err}"));
            close(&read(&c), &want, &format!("{what}, C"));
        }
    }
}

// ---------------------------------------------------------------- property tests

/// Schedules the property tests draw from (stage III, on the row loop of block `{blk}`): serial,
/// static chunks of one row, dynamic, split rows in parallel chunks (guided), and rows cut by
/// stored elements of `{indptr}` (`nnz_balanced`).
const SCHEDULES: &[&str] = &[
    "",
    "# stage III\nb0 = sch.get_block(\"{blk}\")\nl0, = sch.get_loops(b0)\nsch.parallel(l0)\nsch.annotate(l0, \"schedule\", \"static\")\nsch.annotate(l0, \"chunk\", 1)\n",
    "# stage III\nb0 = sch.get_block(\"{blk}\")\nl0, = sch.get_loops(b0)\nsch.parallel(l0)\nsch.annotate(l0, \"schedule\", \"dynamic\")\n",
    "# stage III\nb0 = sch.get_block(\"{blk}\")\nl0, = sch.get_loops(b0)\nlo, li = sch.split(l0, [None, 3])\nsch.parallel(lo)\nsch.annotate(lo, \"schedule\", \"guided\")\n",
    "# stage III\nb0 = sch.get_block(\"{blk}\")\nl0, = sch.get_loops(b0)\nsch.parallel(l0)\nsch.annotate(l0, \"schedule\", \"nnz_balanced\")\nsch.annotate(l0, \"indptr\", \"{indptr}\")\n",
];

/// A compiled kernel of the property tests: two phases, or one (masked SpGEMM stores on M).
enum Built {
    Assembled(Box<AssembledKernel>),
    Plain(Box<sparsetir_runtime::Kernel>),
}

thread_local! {
    /// Kernels built so far, by (kernel, schedule index): each schedule compiles once.
    static BUILT: std::cell::RefCell<HashMap<(String, usize), std::rc::Rc<Built>>> =
        std::cell::RefCell::new(HashMap::new());
}

fn built(kernel: &str, s: usize) -> std::rc::Rc<Built> {
    let key = (kernel.to_string(), s);
    if let Some(b) = BUILT.with(|m| m.borrow().get(&key).cloned()) {
        return b;
    }
    let f = sparsetir_ops::load(kernel).expect("kernel");
    let (blk, indptr) = match kernel {
        "spadd" | "spmul" => (format!("{kernel}0"), "JA_indptr"),
        _ => (format!("{kernel}0"), "KA_indptr"),
    };
    let text = SCHEDULES[s]
        .replace("{blk}", &blk)
        .replace("{indptr}", indptr);
    let sched = (!text.is_empty()).then_some(text.as_str());
    let o = opts(&format!("sparse_output_props_{kernel}"));
    let b = if kernel == "masked_spgemm" {
        Built::Plain(Box::new(
            sparsetir_runtime::build(&f, sched, &[], &o)
                .unwrap_or_else(|e| panic!("{kernel} schedule {s}: {e}")),
        ))
    } else {
        Built::Assembled(Box::new(
            AssembledKernel::build(&f, sched, &[], &o)
                .unwrap_or_else(|e| panic!("{kernel} schedule {s}: {e}")),
        ))
    };
    let b = std::rc::Rc::new(b);
    BUILT.with(|m| m.borrow_mut().insert(key, b.clone()));
    b
}

/// The output of `kernel` as a dense matrix of `Some(value)` where stored (masked SpGEMM: on
/// the mask's pattern).
fn output_of(
    kernel: &str,
    args: &Args,
    m: usize,
    n: usize,
    mask: Option<&Csr>,
) -> Vec<Vec<Option<f64>>> {
    match mask {
        Some(mk) if kernel == "masked_spgemm" => {
            let v = f64s(args, "c");
            let mut d = vec![vec![None; mk.n]; mk.m];
            for i in 0..mk.m {
                for p in mk.indptr[i] as usize..mk.indptr[i + 1] as usize {
                    d[i][mk.indices[p] as usize] = Some(v[p]);
                }
            }
            d
        }
        _ => result(args, m, n),
    }
}

/// One property case: operands of shapes `(m, k, n)` and densities drawn from `seed`, the
/// stage-I evaluator against the C backend under schedule `s`.
#[allow(clippy::too_many_arguments)]
fn eval_equals_c(
    kernel: &str,
    m: usize,
    k: usize,
    n: usize,
    da: f64,
    db: f64,
    seed: u64,
    s: usize,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let elementwise = kernel == "spadd" || kernel == "spmul";
    let a = Csr::random(&mut rng, m, if elementwise { n } else { k }, da);
    let b = if elementwise {
        Csr::random(&mut rng, m, n, db)
    } else {
        Csr::random(&mut rng, k, n, db)
    };
    let mask = (kernel == "masked_spgemm").then(|| Csr::random(&mut rng, m, n, 0.5));
    let f = sparsetir_ops::load(kernel).expect("kernel");
    let what = format!("{kernel} {m}x{k}x{n} densities {da:.2}/{db:.2} seed {seed} schedule {s}");
    let mut e = args_for(kernel, &a, &b, mask.as_ref());
    eval_func(&f, &mut e).unwrap_or_else(|err| panic!("{what}: eval: {err}"));
    let want = output_of(kernel, &e, a.m, b.n, mask.as_ref());
    // The evaluator is itself checked against the dense computation.
    close(
        &want,
        &reference(kernel, &a, &b, mask.as_ref()),
        &format!("{what}, eval"),
    );
    let mut c = args_for(kernel, &a, &b, mask.as_ref());
    match &*built(kernel, s) {
        Built::Assembled(k) => k.run(&mut c).map(|_| ()),
        Built::Plain(k) => k.run(&mut c).map(|_| ()),
    }
    .unwrap_or_else(|err| panic!("{what}: C: {err}"));
    close(
        &output_of(kernel, &c, a.m, b.n, mask.as_ref()),
        &want,
        &format!("{what}, C"),
    );
}

fn prop_config() -> proptest::test_runner::Config {
    proptest::test_runner::Config {
        cases: 40,
        failure_persistence: None,
        ..Default::default()
    }
}

/// Sizes: mostly small, sometimes wide enough (n up to 100, dense) that rows of C hold more than
/// 32 columns and take the bitmap sort.
fn dim() -> impl proptest::strategy::Strategy<Value = usize> {
    use proptest::prelude::*;
    prop_oneof![3 => 1usize..=16, 1 => 40usize..=100]
}

proptest::proptest! {
    #![proptest_config(prop_config())]

    #[test]
    fn spadd_eval_equals_c_under_random_schedules(
        m in 1usize..=24, n in dim(), da in 0.0f64..0.7, db in 0.0f64..0.7,
        seed in proptest::prelude::any::<u64>(), s in 0usize..SCHEDULES.len(),
    ) {
        if have_cc() {
            eval_equals_c("spadd", m, 1, n, da, db, seed, s);
        }
    }

    #[test]
    fn spmul_eval_equals_c_under_random_schedules(
        m in 1usize..=24, n in dim(), da in 0.0f64..0.7, db in 0.0f64..0.7,
        seed in proptest::prelude::any::<u64>(), s in 0usize..SCHEDULES.len(),
    ) {
        if have_cc() {
            eval_equals_c("spmul", m, 1, n, da, db, seed, s);
        }
    }

    #[test]
    fn spgemm_eval_equals_c_under_random_schedules(
        m in 1usize..=20, k in 1usize..=16, n in dim(), da in 0.0f64..0.7, db in 0.0f64..0.7,
        seed in proptest::prelude::any::<u64>(), s in 0usize..SCHEDULES.len(),
    ) {
        if have_cc() {
            eval_equals_c("spgemm", m, k, n, da, db, seed, s);
        }
    }

    #[test]
    fn masked_spgemm_eval_equals_c_under_random_schedules(
        m in 1usize..=20, k in 1usize..=16, n in dim(), da in 0.0f64..0.7, db in 0.0f64..0.7,
        seed in proptest::prelude::any::<u64>(), s in 0usize..SCHEDULES.len(),
    ) {
        if have_cc() {
            eval_equals_c("masked_spgemm", m, k, n, da, db, seed, s);
        }
    }
}

/// `T.sort_range` (the C prelude's hybrid sort: bitmap for distinct values of a small range,
/// comparison sort otherwise) against Rust's sort, the evaluator and the stage II/III interpreter: segments
/// with duplicates, negative values, ranges wider than the bitmap, 0, 1, 32 and 33 elements,
/// int32 and int64.
#[test]
fn sort_range_sorts_every_kind_of_segment() {
    for (dt, name) in [("int32", "i32"), ("int64", "i64")] {
        let src = format!(
            r#"
@T.prim_func
def sort_{name}(x: T.handle, p: T.handle, n: T.int32, s: T.int32) -> None:
    T.func_attr({{"sparse_tir_level": 2}})
    R = T.sp.dense_fixed(s)
    X = T.match_buffer(x, (n,), "{dt}")
    P = T.match_buffer(p, (s + 1,), "int32")
    with T.sp.iteration([R], "S", "sort") as [r]:
        T.evaluate(T.sort_range(X[P[r]], P[r + 1] - P[r]))
"#
        );
        let f = sparsetir_syntax::parse_func(&src).expect("parse");
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut segs: Vec<Vec<i64>> = Vec::new();
        for &(len, range, distinct) in &[
            (0usize, 10i64, true),
            (1, 10, true),
            (32, 1000, true),
            (33, 1000, true),
            (100, 150, true),
            (100, 50, false),
            (300, 300_000, true),
            (300, 1 << 20, true),
            (64, 64, true),
            (500, 20_000, false),
        ] {
            let mut pool: Vec<i64> = (0..range).map(|v| v - range / 3).collect();
            let seg: Vec<i64> = if distinct {
                (0..len)
                    .map(|_| pool.swap_remove(rng.random_range(0..pool.len())))
                    .collect()
            } else {
                (0..len)
                    .map(|_| pool[rng.random_range(0..pool.len())])
                    .collect()
            };
            segs.push(seg);
        }
        let mut ptr = vec![0i32];
        let mut flat = Vec::new();
        for s in &segs {
            flat.extend(s.iter().copied());
            ptr.push(flat.len() as i32);
        }
        let mut want = Vec::new();
        for s in &segs {
            let mut t = s.clone();
            t.sort();
            want.extend(t);
        }
        // One element past the last segment: the checked interpreter reads `P[s]` as a
        // position of X too.
        flat.push(-1);
        want.push(-1);
        let dtype = if name == "i32" {
            sparsetir_ir::DType::I32
        } else {
            sparsetir_ir::DType::I64
        };
        let args = || -> Args {
            let mut a = HashMap::new();
            a.insert(
                "x".into(),
                ArgValue::Array(sparsetir_formats::Tensor::from_i64(dtype, &flat).unwrap()),
            );
            a.insert("p".into(), i32s(&ptr));
            a.insert("n".into(), int(flat.len()));
            a.insert("s".into(), int(segs.len()));
            a
        };
        let as_i64 = |a: &Args| match a.get("x") {
            Some(ArgValue::Array(t)) => t.to_i64_vec(),
            _ => panic!("no x"),
        };
        let mut e = args();
        eval_func(&f, &mut e).expect("eval");
        assert_eq!(as_i64(&e), want, "{dt}: evaluator");
        let mut i = args();
        run_interp(&f, &mut i).expect("interp");
        assert_eq!(as_i64(&i), want, "{dt}: interpreter");
        if have_cc() {
            let k = compile_c(&f, &opts("sparse_output_sort")).expect("build");
            let mut c = args();
            k.run(&mut c).expect("run");
            assert_eq!(as_i64(&c), want, "{dt}: C");
        }
    }
}

/// SpGEMM into `C` with default value 0.5 (every product sums onto 0.5): the numeric phase then
/// gathers rows with stamps and sorts their columns (`T.sort_range`, the bitmap sort above 32
/// columns) instead of the zero-kept bitmap workspace. Evaluator, interpreter and C (serial and
/// parallel) against the dense product plus 0.5 on its structure.
#[test]
fn spgemm_with_a_nonzero_default_sorts_its_rows() {
    let src = sparsetir_ops::get("spgemm")
        .expect("kernel")
        .source
        .replace(
            "C = T.sp.match_buffer(c, (I, JC), \"float32\")",
            "C = T.sp.match_buffer(c, (I, JC), \"float32\", default_value=T.float32(0.5))",
        );
    let f = sparsetir_syntax::parse_func(&src).expect("parse");
    let parallel = PARALLEL.replace("{name}", "spgemm");
    let compiled = build_all(
        &f,
        &[None, Some(parallel.as_str())],
        "sparse_output_default",
    );
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    for (t, &(m, k, n, da, db)) in [
        (9, 9, 9, 0.3, 0.25),
        (7, 5, 9, 0.4, 0.3),
        (40, 30, 90, 0.3, 0.5),
    ]
    .iter()
    .enumerate()
    {
        let a = Csr::random(&mut rng, m, k, da);
        let b = Csr::random(&mut rng, k, n, db);
        let want: Vec<Vec<Option<f64>>> = reference("spgemm", &a, &b, None)
            .into_iter()
            .map(|r| r.into_iter().map(|v| v.map(|x| x + 0.5)).collect())
            .collect();
        let what = format!("case {t} ({m}x{k}x{n})");
        let args = || args_for("spgemm", &a, &b, None);
        same_everywhere(&f, &compiled, args, (m, n), &want, &what);
    }
}

/// A union of three parts (`C = A + B + D`, assembled) takes the general merge loop (one select
/// per part), and a union reduction into a dense vector with an init (`y[i] = -1 + Σ (A + 2B)`
/// over `A_i ∪ B_i`) takes the two-part lattice without assembly: evaluator, interpreter and C
/// (parallel rows) against dense computations.
#[test]
fn three_part_union_and_union_reduction_on_every_backend() {
    const ADD3: &str = r#"
@T.prim_func
def spadd3(a: T.handle, b: T.handle, d: T.handle, c: T.handle, a_indptr: T.handle, a_indices: T.handle, b_indptr: T.handle, b_indices: T.handle, d_indptr: T.handle, d_indices: T.handle, c_indptr: T.handle, c_indices: T.handle, m: T.int32, n: T.int32, nnz_a: T.int32, nnz_b: T.int32, nnz_d: T.int32, nnz_c: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    JA = T.sp.compressed_varied(I, (n, nnz_a), (a_indptr, a_indices))
    JB = T.sp.compressed_varied(I, (n, nnz_b), (b_indptr, b_indices))
    JD = T.sp.compressed_varied(I, (n, nnz_d), (d_indptr, d_indices))
    JC = T.sp.compressed_varied(I, (n, nnz_c), (c_indptr, c_indices), assembled=True)
    A = T.sp.match_buffer(a, (I, JA), "float32")
    B = T.sp.match_buffer(b, (I, JB), "float32")
    D = T.sp.match_buffer(d, (I, JD), "float32")
    C = T.sp.match_buffer(c, (I, JC), "float32")
    with T.sp.iteration([I, T.sp.union(JA, JB, JD)], "SS", "spadd3") as [i, j]:
        C[i, j] = A[i, j] + B[i, j] + D[i, j]
"#;
    const ROWSUM: &str = r#"
@T.prim_func
def rowsum(a: T.handle, b: T.handle, y: T.handle, a_indptr: T.handle, a_indices: T.handle, b_indptr: T.handle, b_indices: T.handle, m: T.int32, n: T.int32, nnz_a: T.int32, nnz_b: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    JA = T.sp.compressed_varied(I, (n, nnz_a), (a_indptr, a_indices))
    JB = T.sp.compressed_varied(I, (n, nnz_b), (b_indptr, b_indices))
    A = T.sp.match_buffer(a, (I, JA), "float32")
    B = T.sp.match_buffer(b, (I, JB), "float32")
    Y = T.sp.match_buffer(y, (I,), "float32")
    with T.sp.iteration([I, T.sp.union(JA, JB)], "SR", "rowsum") as [i, j]:
        with T.init():
            Y[i] = T.float32(-1)
        Y[i] = Y[i] + A[i, j] + T.float32(2) * B[i, j]
"#;
    let add3 = sparsetir_syntax::parse_func(ADD3).expect("parse");
    let rowsum = sparsetir_syntax::parse_func(ROWSUM).expect("parse");
    let par = |blk: &str| PARALLEL.replace("{name}0", blk);
    let k3 = build_all(
        &add3,
        &[Some(par("spadd30").as_str())],
        "sparse_output_add3",
    );
    let kr = have_cc().then(|| {
        sparsetir_runtime::build(
            &rowsum,
            Some(&par("rowsum0")),
            &[],
            &opts("sparse_output_rowsum"),
        )
        .expect("build")
    });
    let mut rng = ChaCha8Rng::seed_from_u64(33);
    for &(m, n) in &[(9, 9), (1, 1), (12, 40), (6, 3)] {
        let a = Csr::random(&mut rng, m, n, 0.3);
        let b = Csr::random(&mut rng, m, n, 0.2);
        let d = Csr::random(&mut rng, m, n, 0.4);
        let (da, db, dd) = (a.dense(), b.dense(), d.dense());
        let what = format!("{m}x{n}");
        // C = A + B + D on the union of the three structures.
        let want: Vec<Vec<Option<f64>>> = (0..m)
            .map(|i| {
                (0..n)
                    .map(|j| {
                        let parts = [da[i][j], db[i][j], dd[i][j]];
                        parts
                            .iter()
                            .any(Option::is_some)
                            .then(|| parts.iter().map(|x| x.unwrap_or(0.0)).sum())
                    })
                    .collect()
            })
            .collect();
        let args3 = || {
            let mut x = args_for("spadd", &a, &b, None);
            d.bind(&mut x, "d", "d");
            x
        };
        same_everywhere(&add3, &k3, args3, (m, n), &want, &format!("{what} spadd3"));
        // y[i] = -1 + Σ_{j ∈ A_i ∪ B_i} (A + 2B).
        let want_y: Vec<f64> = (0..m)
            .map(|i| {
                -1.0 + (0..n)
                    .map(|j| da[i][j].unwrap_or(0.0) + 2.0 * db[i][j].unwrap_or(0.0))
                    .sum::<f64>()
            })
            .collect();
        let args_y = || {
            let mut x = args_for("spadd", &a, &b, None);
            x.insert("y".into(), f32s(vec![m], vec![55.0; m]));
            x
        };
        let check_y = |x: &Args, how: &str| {
            let got = f64s(x, "y");
            for (g, w) in got.iter().zip(&want_y) {
                assert!(
                    (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                    "{what} rowsum {how}: {got:?} want {want_y:?}"
                );
            }
        };
        let mut e = args_y();
        eval_func(&rowsum, &mut e).unwrap_or_else(|err| panic!("{what}: eval: {err}"));
        check_y(&e, "eval");
        let mut i = args_y();
        run_interp(&rowsum, &mut i).unwrap_or_else(|err| panic!("{what}: interp: {err}"));
        check_y(&i, "interp");
        if let Some(k) = &kr {
            let mut c = args_y();
            k.run(&mut c)
                .unwrap_or_else(|err| panic!("{what}: C: {err}"));
            check_y(&c, "C");
        }
    }
}

/// SpGEMM with 64-bit offsets and columns in the assembled axis (`idtype="int64"`, what the
/// overflow error asks for): the bitmap workspace's shifts and `ctz` work on int64 columns;
/// evaluator, interpreter and C (parallel) against the dense product.
#[test]
fn spgemm_with_int64_output_indices() {
    use sparsetir_transform::Phase;
    let src = sparsetir_ops::get("spgemm")
        .expect("kernel")
        .source
        .replace(
            "(c_indptr, c_indices), assembled=True)",
            "(c_indptr, c_indices), idtype=\"int64\", assembled=True)",
        );
    assert!(src.contains("int64"), "{src}");
    let f = sparsetir_syntax::parse_func(&src).expect("parse");
    let parallel = PARALLEL.replace("{name}", "spgemm");
    let compiled = build_all(&f, &[Some(parallel.as_str())], "sparse_output_i64");
    let mut rng = ChaCha8Rng::seed_from_u64(64);
    for &(m, kk, n, da, db) in &[(9, 9, 9, 0.3, 0.25), (20, 15, 90, 0.3, 0.5)] {
        let a = Csr::random(&mut rng, m, kk, da);
        let b = Csr::random(&mut rng, kk, n, db);
        let want = reference("spgemm", &a, &b, None);
        let what = format!("{m}x{kk}x{n}");
        let args = || args_for("spgemm", &a, &b, None);
        same_everywhere(&f, &compiled, args, (m, n), &want, &what);
        // Each staged workspace with 64-bit columns (`compress_iota64` of int64 for the byte
        // marks), on the interpreter and in C.
        for ws in [Phase::Staged, Phase::StagedDense, Phase::StagedGroups] {
            let mut i = args();
            run_interp_with(&f, &mut i, Some(ws))
                .unwrap_or_else(|e| panic!("{what}: interp {}: {e}", ws.name()));
            close(
                &result(&i, m, n),
                &want,
                &format!("{what}, interp {}", ws.name()),
            );
            if have_cc() {
                let o = opts("sparse_output_i64");
                let k = AssembledKernel::build(&f, Some(parallel.as_str()), &[], &o)
                    .expect("builds")
                    .with_workspace(ws);
                let mut c = args();
                k.run(&mut c)
                    .unwrap_or_else(|e| panic!("{what}: C {}: {e}", ws.name()));
                close(
                    &result(&c, m, n),
                    &want,
                    &format!("{what}, C {}", ws.name()),
                );
            }
        }
    }
}
