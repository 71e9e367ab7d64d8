//! Cache primitive tests: `cache_read`, `cache_write`, `reverse_cache_read`,
//! `reverse_cache_write` and `set_scope` on catalog kernels (stages II/III) and small
//! hand-written stage-III scripts: snapshots, error cases, trace replay and equal results.

mod common;

use sparsetir_ir::Stage;
use sparsetir_schedule::Schedule;

use common::{assert_replays, assert_same_as_reference, kernel, print};

#[test]
fn reverse_cache_read_gather_csrmm_stage_iii() {
    let f = kernel("csrmm", Stage::III);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("csrmm1").unwrap();
    let c = sch.reverse_cache_read(b, 1, "local").unwrap();
    assert_eq!(sch.block_name(c).unwrap(), "B_data_local");
    println!("{}", print(sch.func()));
    assert_same_as_reference("csrmm", sch.func());
    assert_replays(&sch, &f);
}

#[test]
fn smoke_compute_at_and_reverse() {
    let f = kernel("csrmm", Stage::III);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("csrmm1").unwrap();
    let c = sch.reverse_cache_read(b, 1, "local").unwrap();
    let loops = sch.get_loops(b).unwrap();
    sch.compute_at(c, loops[0]).unwrap();
    let w = sch.reverse_cache_write(b, 0, "local").unwrap();
    let loops = sch.get_loops(b).unwrap();
    if let Err(e) = sch.reverse_compute_at(w, loops[1]) {
        panic!("{e}");
    }
    println!("{}", print(sch.func()));
    println!("{}", sch.trace().to_text());
    assert_same_as_reference("csrmm", sch.func());
    assert_replays(&sch, &f);
}
