//! Stage-I primitives (get_sp_iters, sparse_reorder, sparse_fuse): snapshots, error cases, trace
//! replay, and semantic equality under the stage-I reference evaluator (and after lowering).

use crate::common;

use sparsetir_ir::equal::func_eq;
use sparsetir_ir::{IterAxis, Stage};
use sparsetir_schedule::{ErrorKind, Schedule};

use common::*;

#[test]
fn get_sp_iters_lists_axes_in_order() {
    let f = kernel("fused_sddmm", Stage::I);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let sp = sch.get_sparse_iteration("sddmm").unwrap();
    let axes = sch.get_sp_iters(sp).unwrap();
    let i = f.axis_by_name("I").unwrap();
    let j = f.axis_by_name("J").unwrap();
    let k = f.axis_by_name("K").unwrap();
    assert_eq!(axes, vec![IterAxis::Fuse(vec![i, j]), IterAxis::Axis(k)]);
    assert_eq!(
        sch.trace().to_text(),
        "sp0 = sch.get_sparse_iteration(\"sddmm\")\nsch.get_sp_iters(sp0)\n"
    );
    assert_replays(&sch, &f);
}

#[test]
fn sparse_reorder_csrmm() {
    let f = kernel("csrmm", Stage::I);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let sp = sch.get_sparse_iteration("csrmm").unwrap();
    sch.sparse_reorder(sp, &["I", "K", "J"]).unwrap();
    insta::assert_snapshot!(print(sch.func()));
    assert!(sch
        .trace()
        .to_text()
        .contains("sch.sparse_reorder(sp0, [\"I\", \"K\", \"J\"])"));
    assert_replays(&sch, &f);
    assert_same("csrmm", sch.func(), &f);
    // The reordered iteration lowers and still computes the same.
    let lowered = lower_func(sch.func().clone(), Stage::III);
    assert_same_as_reference("csrmm", &lowered);
}

#[test]
fn sparse_reorder_bsrmm_moves_the_block_row_reduction() {
    let f = kernel("bsrmm", Stage::I);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let sp = sch.get_sparse_iteration("bsrmm").unwrap();
    sch.sparse_reorder(sp, &["I", "J", "BI", "BJ", "F"])
        .unwrap();
    let it = sch.sp_iter(sp).unwrap();
    let kinds: String = it.kinds.iter().map(|k| k.letter()).collect();
    // I: S, J: R, BI: S, BJ: R, F: S (was SSRSR over I, BI, BJ, F, J).
    assert_eq!(kinds, "SRSRS");
    let names: Vec<&str> = it.vars.iter().map(|v| f.vars[*v].name.as_str()).collect();
    assert_eq!(names, ["i", "j", "bi", "bj", "f"]);
    assert_replays(&sch, &f);
    assert_same("bsrmm", sch.func(), &f);
    let lowered = lower_func(sch.func().clone(), Stage::II);
    assert_same_as_reference("bsrmm", &lowered);
}

#[test]
fn sparse_reorder_errors() {
    let f = kernel("csrmm", Stage::I);
    let mut sch = Schedule::new(f).unwrap();
    let sp = sch.get_sparse_iteration("csrmm").unwrap();
    let e = sch.sparse_reorder(sp, &["J", "I", "K"]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::ParentAfterChild);
    assert!(
        e.message.contains("`J`") && e.message.contains("`I`"),
        "{e}"
    );
    assert!(
        e.ir.contains("--> ") && e.ir.contains("T.sp.iteration("),
        "{e}"
    );
    assert!(e.ir.contains("^^^"), "{e}");
    for order in [
        &["I", "J"][..],
        &["I", "J", "J"],
        &["I", "J", "X"],
        &["I", "J", "K", "K"],
    ] {
        let e = sch.sparse_reorder(sp, order).unwrap_err();
        assert_eq!(e.kind, ErrorKind::NotAPermutation, "{order:?}");
    }
    // Fused groups stay together.
    let mut sch = Schedule::new(kernel("fused_sddmm", Stage::I)).unwrap();
    let sp = sch.get_sparse_iteration("sddmm").unwrap();
    let e = sch.sparse_reorder(sp, &["I", "K", "J"]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotConsecutive);
    let e = sch.sparse_reorder(sp, &["J", "I", "K"]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotConsecutive);
    sch.sparse_reorder(sp, &["K", "I", "J"]).unwrap();
    // Wrong stage.
    let mut sch = Schedule::new(kernel("csrmm", Stage::II)).unwrap();
    assert_eq!(
        sch.get_sparse_iteration("csrmm").unwrap_err().kind,
        ErrorKind::WrongStage
    );
}

#[test]
fn sparse_fuse_sddmm_gives_fused_sddmm() {
    let f = kernel("sddmm", Stage::I);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let sp = sch.get_sparse_iteration("sddmm").unwrap();
    sch.sparse_fuse(sp, &["I", "J"]).unwrap();
    insta::assert_snapshot!(print(sch.func()));
    // The catalog's hand-written fused kernel is the same function.
    assert!(func_eq(sch.func(), &kernel("fused_sddmm", Stage::I)));
    assert_replays(&sch, &f);
    assert_same("sddmm", sch.func(), &f);
    let lowered = lower_func(sch.func().clone(), Stage::III);
    assert_same_as_reference("sddmm", &lowered);
}

#[test]
fn sparse_fuse_csf_chain() {
    let f = kernel("csf_square_sum", Stage::I);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let sp = sch.get_sparse_iteration("csf_square_sum").unwrap();
    sch.sparse_fuse(sp, &["J", "K"]).unwrap();
    insta::assert_snapshot!(print(sch.func()));
    assert_replays(&sch, &f);
    assert_same("csf_square_sum", sch.func(), &f);
    let lowered = lower_func(sch.func().clone(), Stage::II);
    assert_same_as_reference("csf_square_sum", &lowered);
}

#[test]
fn sparse_fuse_errors() {
    let mut sch = Schedule::new(kernel("sddmm", Stage::I)).unwrap();
    let sp = sch.get_sparse_iteration("sddmm").unwrap();
    let e = sch.sparse_fuse(sp, &["J", "K"]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotConsecutive, "K is not J's child");
    assert!(e.ir.contains("-->"), "{e}");
    let e = sch.sparse_fuse(sp, &["J", "I"]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotConsecutive, "reversed");
    let e = sch.sparse_fuse(sp, &["I"]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    let e = sch.sparse_fuse(sp, &["I", "Q"]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
    sch.sparse_fuse(sp, &["I", "J"]).unwrap();
    let e = sch.sparse_fuse(sp, &["I", "J"]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported, "already fused");
    // Mixed spatial/reduction.
    let mut sch = Schedule::new(kernel("csrmm", Stage::I)).unwrap();
    let sp = sch.get_sparse_iteration("csrmm").unwrap();
    let e = sch.sparse_fuse(sp, &["I", "J"]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported);
}

#[test]
fn annotate_iteration_block_and_loop() {
    let f = kernel("csrmm", Stage::I);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let sp = sch.get_sparse_iteration("csrmm").unwrap();
    sch.annotate(sp, "tag", sparsetir_ir::AttrValue::Int(3))
        .unwrap();
    sch.annotate(sp, "other", sparsetir_ir::AttrValue::Str("x".into()))
        .unwrap();
    sch.unannotate(sp, "other").unwrap();
    let text = print(sch.func());
    assert!(text.contains("T.sp.iteration_attr({\"tag\": 3})"), "{text}");
    let e = sch.unannotate(sp, "other").unwrap_err();
    assert_eq!(e.kind, ErrorKind::NoSuchAnnotation);
    assert!(e.ir.contains("-->"), "{e}");
    assert_replays(&sch, &f);

    let g = kernel("csrmm", Stage::II);
    let mut sch = Schedule::new(g.clone()).unwrap();
    let b = sch.get_block("csrmm1").unwrap();
    let l = sch.get_loops(b).unwrap();
    use sparsetir_ir::AttrValue;
    sch.annotate(b, "schedule_rule", AttrValue::Str("none".into()))
        .unwrap();
    sch.annotate(
        l[1],
        "pragma_unroll",
        AttrValue::List(vec![AttrValue::Int(1), AttrValue::Bool(true)]),
    )
    .unwrap();
    sch.annotate(l[0], "ratio", AttrValue::Float(0.5)).unwrap();
    sch.unannotate(b, "sparse").unwrap();
    insta::assert_snapshot!(print(sch.func()));
    let text = sch.trace().to_text();
    let tail: Vec<&str> = text.lines().skip(2).collect();
    assert_eq!(
        tail,
        [
            "sch.annotate(b0, \"schedule_rule\", \"none\")",
            "sch.annotate(l2, \"pragma_unroll\", [1, True])",
            "sch.annotate(l1, \"ratio\", 0.5)",
            "sch.unannotate(b0, \"sparse\")",
        ]
    );
    assert_replays(&sch, &g);
    assert_same("csrmm", sch.func(), &g);
}

/// `sparse_reorder` keeps every dependence, as `reorder` does: in coordinate space, the
/// wavefront `Y[i + 1, j] = Y[i, j + 1] ...` may not iterate `J` outside `I` (the element up and
/// to the right would then come after the one it feeds), the grid that reads straight up may,
/// and computes the same `Y` in the stage-I evaluator. (A reduction moved among spatial axes,
/// bsrmm's `J`, only changes the order of its own additions: the tests above.)
#[test]
fn sparse_reorder_keeps_every_dependence() {
    let f = lower_script(&grid_script("j + 1"), Stage::I);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let sp = sch.get_sparse_iteration("grid").unwrap();
    let e = sch.sparse_reorder(sp, &["J", "I"]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::DependencyViolation, "{e}");
    assert!(
        e.message.contains("axis `J` outside axis `I`") && e.message.contains("`Y[i + 1, j]`"),
        "{e}"
    );
    assert!(e.ir.contains("T.sp.iteration("), "{e}");
    assert!(func_eq(sch.func(), &f), "the schedule is left as it was");

    let f = lower_script(&grid_script("j"), Stage::I);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let sp = sch.get_sparse_iteration("grid").unwrap();
    sch.sparse_reorder(sp, &["J", "I"]).unwrap();
    assert!(!func_eq(sch.func(), &f));
    assert_eq!(grid_y(sch.func()), grid_y(&f));
    assert_replays(&sch, &f);
}

/// An init that stores at a spatial iterator iterated inside the first reduction (bsrmm's
/// `C[i, bi, f] = 0` with `F` after `BJ`) has no point to run at before that reduction: the
/// lowering says so instead of giving a function that reads `f` outside its loop.
#[test]
fn an_init_at_an_iterator_inside_the_reduction_is_refused_when_lowered() {
    let mut sch = Schedule::new(kernel("bsrmm", Stage::I)).unwrap();
    let sp = sch.get_sparse_iteration("bsrmm").unwrap();
    sch.sparse_reorder(sp, &["I", "BI", "BJ", "J", "F"])
        .unwrap();
    let module = sparsetir_ir::IRModule {
        funcs: vec![sch.func().clone()],
    };
    let opts = sparsetir_transform::PipelineOptions::to_stage(Stage::II);
    let e = sparsetir_transform::lower(&module, &opts).unwrap_err();
    assert!(
        e.to_string()
            .contains("its init reads iterator `f`, which is iterated inside the first reduction"),
        "{e}"
    );
}
