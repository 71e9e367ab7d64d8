//! Random sequences of loop primitives on SpMM and SDDMM (stages II and III): whatever sequence
//! is applied (failures leave the function unchanged), the result verifies, computes the same as
//! the stage-I reference, and its trace replays to an equal function.

use crate::common;

use sparsetir_ir::Stage;
use sparsetir_schedule::{LoopRV, Schedule};

use common::*;

fn all_loops(sch: &mut Schedule) -> Vec<LoopRV> {
    let mut out = Vec::new();
    let names = sparsetir_schedule::ir_util::block_names(&sch.func().body);
    for n in names {
        let b = sch.get_block(&n).unwrap();
        out.extend(sch.get_loops(b).unwrap());
    }
    out
}

fn random_schedule(kernel_name: &str, stage: Stage, seed: u64) -> usize {
    let f = kernel(kernel_name, stage);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut applied = 0;
    for _ in 0..6 {
        let loops = all_loops(&mut sch);
        if loops.is_empty() {
            break;
        }
        let l = loops[rng.below(loops.len())];
        let l2 = loops[rng.below(loops.len())];
        let r = match rng.below(6) {
            0 => sch
                .split(l, &[None, Some(1 + rng.below(4) as i64)])
                .map(|_| ()),
            1 => sch.fuse(&[l, l2]).map(|_| ()),
            2 => sch.reorder(&[l2, l]),
            3 => sch.parallel(l),
            4 => sch.vectorize(l),
            _ => sch.unroll(l),
        };
        applied += r.is_ok() as usize;
    }
    sparsetir_ir::verify_func(sch.func()).expect("verifies");
    assert_replays(&sch, &f);
    let reference = sparsetir_ops::load(kernel_name).unwrap();
    let c = case(kernel_name, seed);
    assert_close(&run(sch.func(), &c), &run(&reference, &c));
    applied
}

#[test]
fn random_loop_schedules_keep_semantics() {
    let mut applied = 0;
    for seed in 0..12 {
        for (k, stage) in [
            ("csrmm", Stage::II),
            ("csrmm", Stage::III),
            ("sddmm", Stage::III),
            ("csrmm_dense_iter", Stage::III),
        ] {
            applied += random_schedule(k, stage, seed);
        }
    }
    println!("{applied} primitives applied");
    assert!(applied >= 48, "too few primitives succeeded: {applied}");
}
