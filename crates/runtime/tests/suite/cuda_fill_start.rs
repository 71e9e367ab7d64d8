//! Fills absorbed by the reductions after them in the CUDA writer (`gpu/fill_start.rs`): the
//! default SpMM schedule's registers, and the cross-thread reductions of segment_sum and
//! spmv, start from the filled value and the fill is not written; where a thread would read an
//! element another thread filled, or a guard might skip the write-back, the fill stays. Every
//! case runs in the emulator with its outputs filled with NaN first (a kernel that read an
//! element it no longer fills would give NaN) and equals the stage-I evaluator.

use sparsetir_eval::{eval_func, ArgValue};
use sparsetir_ops::data::{random_args, Init, Pattern, Shape};
use sparsetir_runtime::cache::KernelCache;
use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};

use crate::common;
use common::Args;

fn cache() -> KernelCache {
    KernelCache::new(std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda-fill-start"))
}

/// Every float output of `args` set to NaN.
fn poison_outputs(args: &mut Args, outputs: &[String]) {
    for name in outputs {
        if let Some(ArgValue::Array(t)) = args.get_mut(name) {
            if t.dtype().is_float() {
                for i in 0..t.len() {
                    t.set_f64(i, f64::NAN);
                }
            }
        }
    }
}

/// Builds `kernel` with `schedule` (`feat_size` set to `feat` where the kernel has it), runs
/// it in the emulator on random data whose outputs hold NaN, checks it against the
/// evaluator, and returns the CUDA source.
fn run(kernel: &str, schedule: &str, feat: usize) -> String {
    let (f, k) = build(kernel, schedule, feat);
    let shapes = [
        Shape::new(Pattern::Random { empty_rows: true }, 37, 41),
        Shape::new(Pattern::FullRows, 9, 70),
        Shape::new(Pattern::Empty, 5, 7),
    ];
    let mut compared = 0;
    for shape in shapes {
        let shape = shape
            .with_density(0.3)
            .with_feat(feat.max(1))
            .with_init(Init::Random);
        let case = random_args(kernel, &shape, 3).expect("random data");
        let mut args = case.args.clone();
        poison_outputs(&mut args, &case.outputs);
        let mut want = args.clone();
        eval_func(&f, &mut want).expect("evaluates");
        let mut got = args;
        k.run(&mut got).unwrap_or_else(|e| panic!("{kernel}: {e}"));
        common::assert_outputs_close(kernel, &case.outputs, &got, &want, 1e-4);
        compared += 1;
    }
    assert_eq!(compared, 3);
    k.module().source.clone()
}

/// `kernel` with `schedule`, `feat_size` set to `feat` where the kernel has it.
fn build(kernel: &str, schedule: &str, feat: usize) -> (sparsetir_ir::PrimFunc, GpuKernel) {
    let f = sparsetir_ops::load(kernel).expect("catalog kernel");
    let spec: Vec<(String, i64)> = match f.param("feat_size") {
        Some(_) => vec![("feat_size".to_string(), feat as i64)],
        None => Vec::new(),
    };
    let k = GpuKernel::build(&f, Some(schedule), &spec, GpuDevice::Emulator, &cache())
        .unwrap_or_else(|e| panic!("{kernel}: {e}"));
    (f, k)
}

/// Lines of `src` storing the constant `value` into `buffer`.
fn fills(src: &str, buffer: &str, value: &str) -> usize {
    src.lines()
        .filter(|l| l.contains(&format!("{buffer}[")) && l.contains(&format!("] = {value};")))
        .count()
}

const CSRMM: &str = "\
b0 = sch.get_block(\"csrmm0\")
l0, = sch.get_loops(b0)
l0o, l0i = sch.split(l0, [None, 8])
sch.bind(l0o, \"blockIdx.x\")
sch.bind(l0i, \"threadIdx.y\")
bi = sch.get_block(\"csrmm1_init\")
k2, = sch.get_loops(bi)
k2o, k2i = sch.split(k2, [None, FILL])
sch.bind(k2i, \"threadIdx.x\")
b1 = sch.get_block(\"csrmm1\")
j, k = sch.get_loops(b1)
ko, ki = sch.split(k, [None, 32])
sch.reorder(ki, j, ko)
sch.bind(ki, \"threadIdx.x\")
sch.unroll(ko)
";

#[test]
fn spmm_registers_start_at_zero_where_each_thread_filled_its_own_elements() {
    let default = sparsetir_ops::gpu_schedule("csrmm").expect("csrmm's GPU schedule");
    for feat in [32, 64, 96] {
        let src = run("csrmm", default, feat);
        assert_eq!(fills(&src, "C_data", "0.0f"), 0, "feat {feat}:\n{src}");
        assert!(
            src.contains("C_data_acc[k_0_1] = 0.0f;"),
            "feat {feat}:\n{src}"
        );
        // The registers are stored once, and never loaded from C.
        assert!(!src.contains("= C_data["), "feat {feat}:\n{src}");
    }
    // The same schedule with the fill's lanes 32 apart too: absorbed.
    let src = run("csrmm", &CSRMM.replace("FILL", "32"), 64);
    assert_eq!(fills(&src, "C_data", "0.0f"), 0, "{src}");
}

#[test]
fn the_fill_stays_where_other_threads_accumulate_it_or_a_guard_could_skip_the_write_back() {
    // The fill's lanes 16 apart, the accumulation's 32: thread 0 fills C[i, 16], which
    // thread 16 accumulates, with no barrier between. The fill stays, and the emulator
    // reports the race (starting the registers at zero would have hidden it).
    let (_, k) = build("csrmm", &CSRMM.replace("FILL", "16"), 32);
    let src = k.module().source.clone();
    assert!(fills(&src, "C_data", "0.0f") > 0, "{src}");
    let shape = Shape::new(Pattern::FullRows, 9, 70).with_feat(32);
    let mut args = random_args("csrmm", &shape, 1).expect("random data").args;
    let e = k.run(&mut args).expect_err("a race").to_string();
    assert!(e.contains("race on `C_data`"), "{e}");
    // Width 40: both nests are guarded by `32 k_0 + lane < 40`.
    let default = sparsetir_ops::gpu_schedule("csrmm").expect("csrmm's GPU schedule");
    let src = run("csrmm", default, 40);
    assert!(fills(&src, "C_data", "0.0f") > 0, "{src}");
}

#[test]
fn cross_thread_reductions_combine_from_the_filled_value() {
    for (kernel, buffer) in [
        ("segment_sum", "B_data"),
        ("spmv", "Y_data"),
        ("sddmm", "Y_data"),
    ] {
        let sched = sparsetir_ops::gpu_schedule(kernel).expect("a GPU schedule");
        let src = run(kernel, sched, 64);
        assert_eq!(fills(&src, buffer, "0.0f"), 0, "{kernel}:\n{src}");
        assert!(src.contains("= 0.0f + "), "{kernel}:\n{src}");
    }
    // The row maximum starts from the init's -FLT_MAX.
    let sched = sparsetir_ops::gpu_schedule("segment_max").expect("a GPU schedule");
    let src = run("segment_max", sched, 0);
    assert!(src.contains("fmaxf((-FLT_MAX), "), "{src}");
    // Lanes 16 of a 16-wide block: thread 0 is still the one that combines.
    let sched = sparsetir_ops::gpu_schedule("segment_sum")
        .expect("a GPU schedule")
        .replace("[None, 32]", "[None, 16]");
    let src = run("segment_sum", &sched, 0);
    assert_eq!(fills(&src, "B_data", "0.0f"), 0, "{src}");
    assert!(src.contains("(16 lanes)"), "{src}");
}
