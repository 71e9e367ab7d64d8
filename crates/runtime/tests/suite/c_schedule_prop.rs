//! Property test: random sequences of valid schedule primitives (split with random factors,
//! reorder within a nest, fuse, parallel on an outer loop, vectorize/unroll on an inner loop,
//! annotate) applied to SpMM and SDDMM at stage II or III, recorded as schedule text, built to C
//! by `sparsetir_runtime::build` and run: the results equal the stage-I reference evaluator.
//! Sequences the schedule rejects are skipped primitive by primitive. Skipped, with a note, when
//! no C compiler runs.

use proptest::prelude::*;
use sparsetir_eval::{eval_func, ArgValue};
use sparsetir_ir::AttrValue;
use sparsetir_ops::data::{random_args, Init, Pattern, Shape};
use sparsetir_runtime::build;
use sparsetir_runtime::build::schedule_and_lower;
use sparsetir_schedule::ir_util::block_names;
use sparsetir_schedule::Schedule;

use crate::common;
use common::{have_cc, opts};

const CACHE: &str = "c-schedule-prop-cache";

/// One primitive with its random choices (indices are taken modulo what exists).
#[derive(Clone, Debug)]
struct Op {
    kind: u8,
    block: usize,
    a: usize,
    b: usize,
    factor: i64,
}

fn op() -> impl Strategy<Value = Op> {
    (0u8..7, 0usize..8, 0usize..8, 0usize..8, 1i64..9).prop_map(|(kind, block, a, b, factor)| Op {
        kind,
        block,
        a,
        b,
        factor,
    })
}

/// Applies `op` to `sch`; a primitive the schedule rejects leaves it unchanged.
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
            .split(loops[op.a % n], &[None, Some(op.factor)])
            .map(|_| ()),
        1 if n >= 2 => {
            let (i, j) = (op.a % n, op.b % n);
            if i == j {
                return false;
            }
            // Swap two loops of the nest.
            let (lo, hi) = (i.min(j), i.max(j));
            let mut order: Vec<_> = loops[lo..=hi].to_vec();
            order.swap(0, hi - lo);
            sch.reorder(&order)
        }
        2 if n >= 2 => {
            let i = op.a % (n - 1);
            sch.fuse(&[loops[i], loops[i + 1]]).map(|_| ())
        }
        3 => sch.parallel(loops[0]),
        4 => sch.vectorize(loops[n - 1]),
        5 => sch.unroll(loops[n - 1]),
        6 => {
            let l = loops[op.a % n];
            if op.factor > 4 {
                sch.annotate(l, "schedule", AttrValue::Str("static".into()))
            } else {
                sch.annotate(l, "chunk", AttrValue::Int(op.factor))
            }
        }
        _ => return false,
    };
    r.is_ok()
}

fn check(kernel: &str, stage3: bool, ops: &[Op]) -> Result<(), TestCaseError> {
    if !have_cc() {
        return Ok(());
    }
    let f = sparsetir_ops::load(kernel).expect("kernel");
    let lowered = schedule_and_lower(&f, None, &[]).expect("lowers");
    let start = if stage3 {
        lowered.stage3
    } else {
        lowered.stage2
    };
    let mut sch = Schedule::new(start).expect("schedule");
    for op in ops {
        apply(&mut sch, op);
    }
    let header = if stage3 {
        "# stage III\n"
    } else {
        "# stage II\n"
    };
    let text = format!("{header}{}", sch.trace().to_text());
    let k = build(&f, Some(&text), &[], &opts(CACHE))
        .map_err(|e| TestCaseError::fail(format!("{kernel}: build failed: {e}\n{text}")))?;
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
            .map_err(|e| TestCaseError::fail(format!("{kernel}: run failed: {e}")))?;
        for name in &case.outputs {
            let (Some(ArgValue::Array(a)), Some(ArgValue::Array(b))) =
                (got.get(name), want.get(name))
            else {
                return Err(TestCaseError::fail(format!("output `{name}` missing")));
            };
            for i in 0..a.len() {
                let (x, y) = (a.get_f64(i), b.get_f64(i));
                prop_assert!(
                    (x - y).abs() <= 1e-5 * y.abs().max(1.0),
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
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn spmm_random_schedules_match_the_evaluator(
        stage3 in any::<bool>(),
        ops in prop::collection::vec(op(), 1..7),
    ) {
        check("csrmm", stage3, &ops)?;
    }

    #[test]
    fn sddmm_random_schedules_match_the_evaluator(
        stage3 in any::<bool>(),
        ops in prop::collection::vec(op(), 1..7),
    ) {
        check("sddmm", stage3, &ops)?;
    }
}

#[test]
fn a_fixed_schedule_exercises_every_primitive_kind() {
    if !have_cc() {
        return;
    }
    let f = sparsetir_ops::load("csrmm").unwrap();
    let lowered = schedule_and_lower(&f, None, &[]).unwrap();
    let mut sch = Schedule::new(lowered.stage2).unwrap();
    let b0 = sch.get_block("csrmm0").unwrap();
    let l = sch.get_loops(b0).unwrap();
    let parts = sch.split(l[0], &[None, Some(4)]).unwrap();
    sch.parallel(parts[0]).unwrap();
    sch.annotate(parts[0], "schedule", AttrValue::Str("static".into()))
        .unwrap();
    let b1 = sch.get_block("csrmm1").unwrap();
    let inner = sch.get_loops(b1).unwrap();
    let k = *inner.last().unwrap();
    let ks = sch.split(k, &[None, Some(2)]).unwrap();
    sch.vectorize(ks[1]).unwrap();
    sch.unroll(ks[0]).unwrap();
    let text = sch.trace().to_text();
    let k = build(&f, Some(&text), &[], &opts(CACHE)).expect("builds");
    assert!(k
        .source()
        .contains("#pragma omp parallel for schedule(static"));
    assert!(k.source().contains("#pragma omp simd"));
    let case = random_args("csrmm", &Shape::default().with_feat(7), 3).unwrap();
    let mut want = case.args.clone();
    eval_func(&f, &mut want).unwrap();
    let mut got = case.args.clone();
    k.run(&mut got).unwrap();
    for name in &case.outputs {
        let (Some(ArgValue::Array(a)), Some(ArgValue::Array(b))) = (got.get(name), want.get(name))
        else {
            panic!("missing {name}");
        };
        for i in 0..a.len() {
            assert!((a.get_f64(i) - b.get_f64(i)).abs() <= 1e-5 * b.get_f64(i).abs().max(1.0));
        }
    }
}
