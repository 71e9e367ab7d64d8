//! Reduction primitive tests: `decompose_reduction` and `rfactor` on catalog kernels and small
//! hand-written stage-III scripts: snapshots, error cases, trace replay and equal results.

mod common;

use sparsetir_ir::Stage;
use sparsetir_schedule::Schedule;

use common::{assert_replays, assert_same_as_reference, kernel, print};

#[test]
fn smoke() {
    let f = kernel("csrmm", Stage::III);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("csrmm1").unwrap();
    let loops = sch.get_loops(b).unwrap();
    let r = sch.decompose_reduction(b, loops[0]);
    if let Err(e) = &r {
        panic!("{e}");
    }
    println!("{}", print(sch.func()));
    assert_same_as_reference("csrmm", sch.func());
    assert_replays(&sch, &f);

    let f = kernel("sddmm", Stage::III);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("sddmm1").unwrap();
    let loops = sch.get_loops(b).unwrap();
    let r = sch.rfactor(loops[1], 0);
    if let Err(e) = &r {
        panic!("{e}");
    }
    println!("{}", print(sch.func()));
    println!("{}", sch.trace().to_text());
    assert_same_as_reference("sddmm", sch.func());
    assert_replays(&sch, &f);
}
