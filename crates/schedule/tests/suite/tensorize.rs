//! `tensorize` / `sparse_tensorize`: bsr_sddmm with float16 operands at stage III, tiled as the
//! tensor-core GPU schedule tiles it, marks the same loop either way (the nest under it checked
//! against `mma_m16n8k16`, the fill's against `mma_fill_m16n8`) and replays from its printed
//! trace (the CUDA tests run the schedules that use it: gpu/*_tc*.sched); nests of the wrong shape, operands of the wrong type, unknown intrinsics and the wrong stage
//! are refused with their kind, pointing at the loop or block.

use crate::common;

use sparsetir_ir::{AttrValue, PrimFunc, Stage, TENSORIZE_ATTR};
use sparsetir_schedule::{BlockRV, ErrorKind, LoopRV, Schedule};

use common::{assert_replays, lower_func, print, specialize};

/// bsr_sddmm (`blk` 16, `feat_size` 32) at `stage`, its inputs stored as `dtype`.
fn bsr_sddmm(dtype: sparsetir_ir::DType, stage: Stage) -> PrimFunc {
    let f = sparsetir_syntax::parse_func(sparsetir_ops::composable::BSR_SDDMM_SCRIPT)
        .expect("formats/bsr_sddmm.sp parses");
    let f = specialize(specialize(f, "blk", 16), "feat_size", 32);
    let f = if dtype == sparsetir_ir::DType::F32 {
        f
    } else {
        sparsetir_transform::store_as(&f, &["A", "B"], dtype).expect("store_as")
    };
    lower_func(f, stage)
}

/// The tensor-core tiling of gpu/bsr_sddmm_tc.sched, the init split off: returns the 16-row
/// loop `bi` of the products and the fill block.
fn tile(sch: &mut Schedule) -> (LoopRV, BlockRV) {
    let (bi, ko) = tile_only(sch);
    let b1 = sch.get_block("bsr_sddmm1").unwrap();
    let fill = sch.decompose_reduction(b1, ko).unwrap();
    (bi, fill)
}

/// The tiling alone (the block keeps its init): `bi` and `ko`.
fn tile_only(sch: &mut Schedule) -> (LoopRV, LoopRV) {
    let b1 = sch.get_block("bsr_sddmm1").unwrap();
    let [j, bi, bj, k] = sch.get_loops(b1).unwrap()[..] else {
        panic!("four loops")
    };
    let [bjo, bji] = sch.split(bj, &[None, Some(8)]).unwrap()[..] else {
        panic!("split")
    };
    let [ko, ki] = sch.split(k, &[None, Some(16)]).unwrap()[..] else {
        panic!("split")
    };
    sch.reorder(&[bjo, j, ko, bi, bji, ki]).unwrap();
    (bi, ko)
}

fn mark(f: &PrimFunc) -> Vec<String> {
    let mut out = Vec::new();
    f.body.visit(&mut |s| {
        if let sparsetir_ir::Stmt::For(l) = s {
            if let Some(AttrValue::Str(v)) = l.annotations.get(TENSORIZE_ATTR) {
                out.push(format!("{} {v}", f.vars[l.var].name));
            }
        }
    });
    out
}

#[test]
fn tensorize_and_sparse_tensorize_mark_the_tile_loop() {
    for dt in [sparsetir_ir::DType::F16, sparsetir_ir::DType::BF16] {
        let f = bsr_sddmm(dt, Stage::III);
        let mut by_loop = Schedule::new(f.clone()).unwrap();
        let (bi, fill) = tile(&mut by_loop);
        by_loop.tensorize(bi, "mma_m16n8k16").unwrap();
        let fill_loops = by_loop.get_loops(fill).unwrap();
        by_loop.tensorize(fill_loops[2], "mma_fill_m16n8").unwrap();
        assert_eq!(mark(by_loop.func()).len(), 2, "{}", print(by_loop.func()));
        assert!(
            by_loop.trace().to_text().contains("sch.tensorize("),
            "{}",
            by_loop.trace().to_text()
        );
        assert_replays(&by_loop, &f);

        let mut by_block = Schedule::new(f.clone()).unwrap();
        let (_, fill) = tile(&mut by_block);
        let b1 = by_block.get_block("bsr_sddmm1").unwrap();
        by_block.sparse_tensorize(b1, "mma_m16n8k16").unwrap();
        by_block.sparse_tensorize(fill, "mma_fill_m16n8").unwrap();
        assert_eq!(mark(by_block.func()), mark(by_loop.func()));
        assert_replays(&by_block, &f);

        // The same function as the annotation the writer reads.
        let mut by_ann = Schedule::new(f.clone()).unwrap();
        let (bi, fill) = tile(&mut by_ann);
        by_ann
            .annotate(bi, TENSORIZE_ATTR, AttrValue::Str("mma_m16n8k16".into()))
            .unwrap();
        let fill_loops = by_ann.get_loops(fill).unwrap();
        by_ann
            .annotate(
                fill_loops[2],
                TENSORIZE_ATTR,
                AttrValue::Str("mma_fill_m16n8".into()),
            )
            .unwrap();
        assert!(sparsetir_ir::equal::func_eq(by_ann.func(), by_loop.func()));
    }
}

#[test]
fn nests_that_are_not_the_tile_are_refused() {
    let f = bsr_sddmm(sparsetir_ir::DType::F16, Stage::III);
    // Untiled: the column loop runs 16, not 8.
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b1 = sch.get_block("bsr_sddmm1").unwrap();
    let loops = sch.get_loops(b1).unwrap();
    let e = sch.tensorize(loops[1], "mma_m16n8k16").unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotTensorizable, "{e}");
    assert!(
        e.message.contains("loop 2 of the nest must run 0..8"),
        "{e}"
    );
    assert!(!e.ir.is_empty(), "the error shows the loop");
    assert!(mark(sch.func()).is_empty(), "nothing marked");
    // Tiled, but the init is still in the block.
    let mut sch = Schedule::new(f.clone()).unwrap();
    let (bi, _) = tile_only(&mut sch);
    let e = sch.tensorize(bi, "mma_m16n8k16").unwrap_err();
    assert!(e.message.contains("decompose_reduction"), "{e}");
    // The wrong loop of a tiled nest: `bjo` holds `j` (extent the row's blocks), not 16 rows.
    let mut sch = Schedule::new(f.clone()).unwrap();
    tile(&mut sch);
    let b1 = sch.get_block("bsr_sddmm1").unwrap();
    let loops = sch.get_loops(b1).unwrap();
    let e = sch.tensorize(loops[0], "mma_m16n8k16").unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotTensorizable, "{e}");
    // ... and a fill's tile is two loops with a store of one value.
    let e = sch.sparse_tensorize(b1, "mma_fill_m16n8").unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotTensorizable, "{e}");
    // Twice is refused.
    let bi = loops[3];
    sch.tensorize(bi, "mma_m16n8k16").unwrap();
    let e = sch.tensorize(bi, "mma_m16n8k16").unwrap_err();
    assert!(e.message.contains("already tensorized"), "{e}");
}

#[test]
fn float32_operands_unknown_intrinsics_and_stage_ii_are_refused() {
    let f = bsr_sddmm(sparsetir_ir::DType::F32, Stage::III);
    let mut sch = Schedule::new(f).unwrap();
    let (bi, _) = tile(&mut sch);
    let e = sch.tensorize(bi, "mma_m16n8k16").unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotTensorizable, "{e}");
    assert!(e.message.contains("float16 or both bfloat16"), "{e}");
    let e = sch.tensorize(bi, "wmma_16x16x16").unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
    assert!(
        e.message
            .contains("mma_m16n8k16, mma_sp_m16n8k32, mma_fill_m16n8"),
        "{e}"
    );

    let f2 = bsr_sddmm(sparsetir_ir::DType::F16, Stage::II);
    let mut sch = Schedule::new(f2).unwrap();
    let b1 = sch.get_block("bsr_sddmm1").unwrap();
    let e = sch.sparse_tensorize(b1, "mma_m16n8k16").unwrap_err();
    assert_eq!(e.kind, ErrorKind::WrongStage, "{e}");
}
