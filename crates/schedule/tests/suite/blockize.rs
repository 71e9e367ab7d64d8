//! Block-structure primitive tests: `blockize` and `lift_loop` on catalog kernels: snapshots,
//! error cases (kind + IR shown), trace replay and equal results.

use crate::common;

use sparsetir_ir::{PrimFunc, Stage};
use sparsetir_schedule::{ErrorKind, Schedule};

use common::{assert_replays, assert_same_as_reference, kernel, kernel_specialized, print};

fn verify(f: &PrimFunc) {
    if let Err(e) = sparsetir_ir::verify_func(f) {
        panic!("{e:?}\n{}", print(f));
    }
}

#[test]
fn lift_feature_loop_then_blockize_row() {
    // sddmm with `feat_size = 5`: the feature reduction cannot be empty, so its init stays in
    // `sddmm1` and the nonzero/feature grid is the whole body of the row block. (csrmm's row
    // block also holds the `csrmm1_init` nest now, see `lift_loop_errors`.)
    let f = kernel_specialized("sddmm", Stage::III, &[("feat_size", 5)]);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("sddmm1").unwrap();
    let loops = sch.get_loops(b).unwrap();
    sch.reorder(&[loops[1], loops[0]]).unwrap();
    sch.lift_loop(loops[1]).unwrap();
    let b0 = sch.get_block("sddmm0").unwrap();
    assert_eq!(
        sch.get_loops(b0).unwrap().len(),
        2,
        "k now encloses the row block"
    );
    let bo = sch.blockize(loops[0]).unwrap();
    assert_eq!(sch.block_name(bo).unwrap(), "sddmm1_o");
    verify(sch.func());
    let text = print(sch.func());
    assert!(text.contains("for i_1, k_1 in T.grid(m, 5):"), "{text}");
    assert!(
        text.contains("T.init()"),
        "the init stays in sddmm1: {text}"
    );
    insta::assert_snapshot!(text);
    assert_same_as_reference("sddmm", sch.func());
    assert_replays(&sch, &f);
}

#[test]
fn blockize_bsrmm_block_loops() {
    let f = kernel("bsrmm", Stage::III);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("bsrmm0").unwrap();
    let loops = sch.get_loops(b).unwrap();
    let bo = sch.blockize(loops[1]).unwrap();
    verify(sch.func());
    let text = print(sch.func());
    assert!(text.contains("with T.block(\"bsrmm0_o\")"), "{text}");
    insta::assert_snapshot!(text);
    let _ = bo;
    assert_same_as_reference("bsrmm", sch.func());
    assert_replays(&sch, &f);
}

#[test]
fn lift_loop_stage_ii_sddmm() {
    // `feat_size = 5` keeps the init in `sddmm1` (a symbolic feature size hoists it into an
    // `sddmm1_init` nest beside the grid, and the grid is no longer the row block's body).
    let f = kernel_specialized("sddmm", Stage::II, &[("feat_size", 5)]);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("sddmm1").unwrap();
    let loops = sch.get_loops(b).unwrap();
    sch.reorder(&[loops[1], loops[0]]).unwrap();
    sch.lift_loop(loops[1]).unwrap();
    verify(sch.func());
    let b0 = sch.get_block("sddmm0").unwrap();
    assert_eq!(
        sch.get_loops(b0).unwrap().len(),
        2,
        "k encloses the row block"
    );
    assert_same_as_reference("sddmm", sch.func());
    assert_replays(&sch, &f);
}

#[test]
fn lift_loop_errors() {
    // csrmm: the row block holds the `csrmm1_init` nest before the update grid, so no loop of
    // the grid is the whole body of `csrmm0`.
    let mut sch = Schedule::new(kernel("csrmm", Stage::III)).unwrap();
    let b0 = sch.get_block("csrmm0").unwrap();
    let kids = sch.get_child_blocks(b0).unwrap();
    assert_eq!(sch.block_name(kids[0]).unwrap(), "csrmm1_init");
    let b1 = sch.get_block("csrmm1").unwrap();
    let outer = sch.get_loops(b0).unwrap();
    let inner = sch.get_loops(b1).unwrap();
    // The row loop is not inside a block.
    let e = sch.lift_loop(outer[0]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::BadPlacement, "{e}");
    let e = sch.lift_loop(inner[0]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::LoopNotSingleChild, "{e}");
    assert!(e.message.contains("whole body of block `csrmm0`"), "{e}");
    assert!(e.ir.contains("C_data[vi, vk_1] = T.float32(0)"), "{e}");

    // sddmm with `feat_size = 5` (init inside `sddmm1`, the grid is the row block's body).
    let f = kernel_specialized("sddmm", Stage::III, &[("feat_size", 5)]);
    let mut sch = Schedule::new(f).unwrap();
    let b0 = sch.get_block("sddmm0").unwrap();
    let b1 = sch.get_block("sddmm1").unwrap();
    let outer = sch.get_loops(b0).unwrap();
    let inner = sch.get_loops(b1).unwrap();
    let e = sch.lift_loop(outer[0]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::BadPlacement, "{e}");
    // The nonzero loop's extent uses the row iterator.
    let e = sch.lift_loop(inner[0]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotAnAffineLoop, "{e}");
    assert!(e.ir.contains("for j_1, k_1 in T.grid("), "{e}");
    // Not the whole body of its block.
    let e = sch.lift_loop(inner[1]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::LoopNotSingleChild, "{e}");
    // A block with an allocation.
    sch.reorder(&[inner[1], inner[0]]).unwrap();
    sch.reverse_cache_read(b1, 1, "local").unwrap();
    let e = sch.lift_loop(inner[1]).unwrap_err();
    assert!(
        matches!(
            e.kind,
            ErrorKind::Unsupported | ErrorKind::LoopNotSingleChild
        ),
        "{e}"
    );
    // Blockize needs exactly one block under the loop: move the gather under the feature
    // loop, which then holds two blocks.
    let fill = sch.get_block("B_data_local").unwrap();
    sch.compute_at(fill, inner[1]).unwrap();
    let e = sch.blockize(inner[1]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported, "{e}");
    assert!(e.message.contains("exactly one block"), "{e}");
}
