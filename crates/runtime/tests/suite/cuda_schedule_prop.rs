//! Property test: random sequences of GPU schedule primitives (split with random factors,
//! three-way splits by 4, reorder within a nest, `bind` to `blockIdx.x`, `threadIdx.x` or
//! `threadIdx.y`, unroll, vectorize, a partial-unroll annotation) applied to SpMM and SDDMM at
//! stage III, recorded as schedule text and built to CUDA: every result the CUDA writer accepts
//! runs in the emulator (no race, no out-of-bounds access, no deadlock) and equals the stage-I
//! reference evaluator. Sequences the schedule rejects are skipped primitive by primitive; a
//! function the writer refuses must be refused with a typed error, never a panic.

use proptest::prelude::*;
use sparsetir_eval::{eval_func, ArgValue};
use sparsetir_ir::AttrValue;
use sparsetir_ops::data::{random_args, Init, Pattern, Shape};
use sparsetir_runtime::build::{schedule_and_lower, BuildError};
use sparsetir_runtime::cache::KernelCache;
use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};
use sparsetir_schedule::ir_util::block_names;
use sparsetir_schedule::Schedule;

const TAGS: [&str; 3] = ["blockIdx.x", "threadIdx.x", "threadIdx.y"];

#[derive(Clone, Debug)]
struct Op {
    kind: u8,
    block: usize,
    a: usize,
    b: usize,
    factor: i64,
}

fn op() -> impl Strategy<Value = Op> {
    (0u8..8, 0usize..8, 0usize..8, 0usize..8, 1i64..9).prop_map(|(kind, block, a, b, factor)| Op {
        kind,
        block,
        a,
        b,
        factor,
    })
}

fn apply(sch: &mut Schedule, op: &Op) -> bool {
    let names = block_names(&sch.func().body);
    if names.is_empty() {
        return false;
    }
    let Ok(b) = sch.get_block(&names[op.block % names.len()]) else {
        return false;
    };
    let Ok(loops) = sch.get_loops(b) else {
        return false;
    };
    let n = loops.len();
    if n == 0 {
        return false;
    }
    let r = match op.kind {
        0 => sch
            .split(loops[op.a % n], &[None, Some(op.factor * 4)])
            .map(|_| ()),
        1 if n >= 2 => {
            let (i, j) = (op.a % n, op.b % n);
            if i == j {
                return false;
            }
            let (lo, hi) = (i.min(j), i.max(j));
            let mut order: Vec<_> = loops[lo..=hi].to_vec();
            order.swap(0, hi - lo);
            sch.reorder(&order)
        }
        2 | 3 => sch.bind(loops[op.a % n], TAGS[op.b % TAGS.len()]),
        4 => sch.unroll(loops[n - 1]),
        5 => sch.annotate(loops[op.a % n], "unroll_factor", AttrValue::Int(op.factor)),
        6 => sch.vectorize(loops[n - 1]),
        // Four consecutive elements per step (vector loads where the writer can prove them).
        7 => sch
            .split(loops[op.a % n], &[None, Some(op.factor * 2), Some(4)])
            .map(|_| ()),
        _ => return false,
    };
    r.is_ok()
}

fn check(kernel: &str, ops: &[Op]) -> Result<(), TestCaseError> {
    let f = sparsetir_ops::load(kernel).expect("kernel");
    let lowered = schedule_and_lower(&f, None, &[]).expect("lowers");
    let mut sch = Schedule::new(lowered.stage3).expect("schedule");
    for op in ops {
        apply(&mut sch, op);
    }
    let text = format!("# stage III\n{}", sch.trace().to_text());
    let cache = KernelCache::new(
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda-schedule-prop"),
    );
    let k = match GpuKernel::build(&f, Some(&text), &[], GpuDevice::Emulator, &cache) {
        Ok(k) => k,
        // The writer's typed refusals (e.g. a blockIdx loop inside a serial loop).
        Err(BuildError::CudaCodegen(_)) => return Ok(()),
        Err(e) => return Err(TestCaseError::fail(format!("{kernel}: {e}\n{text}"))),
    };
    let shape = Shape::new(Pattern::Random { empty_rows: true }, 9, 11)
        .with_density(0.4)
        .with_feat(6)
        .with_init(Init::Random);
    for seed in 0..2 {
        let case = random_args(kernel, &shape, seed).expect("data");
        let mut want = case.args.clone();
        eval_func(&f, &mut want).expect("reference");
        let mut got = case.args.clone();
        k.run(&mut got)
            .map_err(|e| TestCaseError::fail(format!("{kernel}: emulation failed: {e}\n{text}")))?;
        for name in &case.outputs {
            let (Some(ArgValue::Array(a)), Some(ArgValue::Array(b))) =
                (got.get(name), want.get(name))
            else {
                return Err(TestCaseError::fail(format!("output `{name}` missing")));
            };
            for i in 0..a.len() {
                let (x, y) = (a.get_f64(i), b.get_f64(i));
                prop_assert!(
                    (x - y).abs() <= 1e-4 * y.abs().max(1.0),
                    "{}: `{}`[{}] = {}, the evaluator gives {}\nschedule:\n{}",
                    kernel,
                    name,
                    i,
                    x,
                    y,
                    text
                );
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn random_gpu_schedules_of_spmm_equal_the_evaluator(ops in prop::collection::vec(op(), 1..8)) {
        check("csrmm", &ops)?;
    }

    #[test]
    fn random_gpu_schedules_of_sddmm_equal_the_evaluator(ops in prop::collection::vec(op(), 1..8)) {
        check("sddmm", &ops)?;
    }
}
