//! Block-structure primitive tests: `blockize` and `lift_loop` on catalog kernels: snapshots,
//! error cases, trace replay and equal results.

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
    sch.reorder(&[loops[1], loops[0]]).unwrap();
    if let Err(e) = sch.lift_loop(loops[1]) { panic!("{e}"); }
    let bo = sch.blockize(loops[0]);
    if let Err(e) = &bo { panic!("{e}"); }
    println!("{}", print(sch.func()));
    println!("{}", sch.trace().to_text());
    assert_same_as_reference("csrmm", sch.func());
    assert_replays(&sch, &f);
}
