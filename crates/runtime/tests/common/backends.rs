//! One function run on every backend with an expected output computed by the test: the stage-I
//! evaluator, the stage II and stage III interpreters, the C backend (automatic schedule, and a
//! given one), and optionally the generated CUDA in the emulator.

use sparsetir_eval::{eval_func, run_func};
use sparsetir_ir::PrimFunc;
use sparsetir_runtime::build::{build, schedule_and_lower};
use sparsetir_runtime::cache::KernelCache;
use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};

use super::{f64s, have_cc, opts, Args};

/// Where [`check_everywhere`] runs besides the evaluator and the interpreters.
pub struct Backends<'a> {
    /// The kernel cache's name (one per test file).
    pub cache: &'a str,
    /// A stage II/III schedule for a second C run.
    pub schedule: Option<&'a str>,
    /// Also the CUDA emulator (automatic GPU schedule).
    pub emulator: bool,
}

/// Runs `f` on `args` everywhere `on` says and checks output `out` against `want` each time
/// (relative tolerance 1e-5).
pub fn check_everywhere(
    what: &str,
    f: &PrimFunc,
    on: &Backends,
    args: &Args,
    out: &str,
    want: &[f64],
) {
    let check = |backend: &str, got: &Args| {
        let g = f64s(got, out);
        assert_eq!(g.len(), want.len(), "{what} ({backend}): length");
        for (i, (x, y)) in g.iter().zip(want).enumerate() {
            assert!(
                (x - y).abs() <= 1e-5 * y.abs().max(1.0),
                "{what} ({backend}): {out}[{i}] = {x}, want {y}\n  got  {g:?}\n  want {want:?}"
            );
        }
    };
    let mut a = args.clone();
    eval_func(f, &mut a).unwrap_or_else(|e| panic!("{what}: eval: {e}"));
    check("evaluator", &a);
    let lowered = schedule_and_lower(f, None, &[]).unwrap_or_else(|e| panic!("{what}: {e}"));
    for (stage, func) in [
        ("stage II", &lowered.stage2),
        ("stage III", &lowered.stage3),
    ] {
        let mut a = args.clone();
        run_func(func, &mut a).unwrap_or_else(|e| panic!("{what}: {stage}: {e}"));
        check(stage, &a);
    }
    if !have_cc() {
        return;
    }
    let mut schedules = vec![("c", None)];
    if let Some(s) = on.schedule {
        schedules.push(("c, given schedule", Some(s)));
    }
    for (name, s) in schedules {
        let k = build(f, s, &[], &opts(on.cache)).unwrap_or_else(|e| panic!("{what}: {name}: {e}"));
        let mut a = args.clone();
        k.run(&mut a)
            .unwrap_or_else(|e| panic!("{what}: {name}: {e}"));
        check(name, &a);
    }
    if on.emulator {
        let cache = KernelCache::new(
            std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("{}-cuda", on.cache)),
        );
        let k = GpuKernel::build(f, None, &[], GpuDevice::Emulator, &cache)
            .unwrap_or_else(|e| panic!("{what}: cuda-emu: {e}"));
        let mut a = args.clone();
        k.run(&mut a)
            .unwrap_or_else(|e| panic!("{what}: cuda-emu: {e}"));
        check("cuda-emu", &a);
    }
}
