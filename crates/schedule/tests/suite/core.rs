//! Core schedule tests: handles, lookup primitives, stage checks, error rendering and the trace
//! text round trip.

use crate::common;

use sparsetir_ir::equal::func_eq;
use sparsetir_ir::Stage;
use sparsetir_schedule::{ErrorKind, Schedule, Trace, TraceError};

use common::kernel;

#[test]
fn get_block_loops_and_children() {
    let f = kernel("csrmm", Stage::II);
    let mut sch = Schedule::new(f).unwrap();
    let b0 = sch.get_block("csrmm0").unwrap();
    let outer = sch.get_loops(b0).unwrap();
    assert_eq!(outer.len(), 1);
    let b1 = sch.get_block("csrmm1").unwrap();
    let inner = sch.get_loops(b1).unwrap();
    assert_eq!(inner.len(), 2, "loops up to the enclosing block");
    let names: Vec<String> = inner
        .iter()
        .map(|l| {
            let v = sch.loop_var(*l).unwrap();
            sch.func().vars[v].name.clone()
        })
        .collect();
    assert_eq!(names, ["j", "k"]);
    // The row block holds the hoisted init nest (the nonzero fiber of a row may be empty, so
    // `C[vi, :] = 0` runs before the reduction loops, SPEC §2.3), then the update block.
    let kids = sch.get_child_blocks(b0).unwrap();
    let kid_names: Vec<String> = kids
        .iter()
        .map(|b| sch.block_name(*b).unwrap().to_string())
        .collect();
    assert_eq!(kid_names, ["csrmm1_init", "csrmm1"]);
    assert!(
        sch.get_child_blocks(kids[0]).unwrap().is_empty(),
        "the init block is a leaf"
    );
    let kids = sch.get_child_blocks_of_loop(outer[0]).unwrap();
    assert_eq!(
        kids.len(),
        1,
        "only the outermost block, not the nested ones"
    );
    assert_eq!(sch.block_name(kids[0]).unwrap(), "csrmm0");
    assert!(sch.get_child_blocks(b1).unwrap().is_empty());
    assert_eq!(
        sch.trace().to_text(),
        "b0 = sch.get_block(\"csrmm0\")\n\
         l1, = sch.get_loops(b0)\n\
         b2 = sch.get_block(\"csrmm1\")\n\
         l3, l4 = sch.get_loops(b2)\n\
         b5, b6 = sch.get_child_blocks(b0)\n\
         sch.get_child_blocks(b5)\n\
         b7, = sch.get_child_blocks(l1)\n\
         sch.get_child_blocks(b2)\n"
    );
    let replayed = Trace::parse(&sch.trace().to_text()).unwrap();
    assert_eq!(replayed.to_text(), sch.trace().to_text());
    let sch2 = replayed.apply(kernel("csrmm", Stage::II)).unwrap();
    assert!(func_eq(sch2.func(), sch.func()));
    assert_eq!(sch2.trace().to_text(), sch.trace().to_text());
}

#[test]
fn missing_block_and_wrong_stage() {
    let mut sch = Schedule::new(kernel("csrmm", Stage::III)).unwrap();
    let e = sch.get_block("nope").unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotFound);
    assert!(e.message.contains("csrmm0"), "{e}");
    let e = sch.get_sparse_iteration("csrmm").unwrap_err();
    assert_eq!(e.kind, ErrorKind::WrongStage);
    let mut sch = Schedule::new(kernel("csrmm", Stage::I)).unwrap();
    assert_eq!(
        sch.get_block("csrmm0").unwrap_err().kind,
        ErrorKind::WrongStage
    );
    assert!(sch.get_sparse_iteration("csrmm").is_ok());
    assert_eq!(
        sch.get_sparse_iteration("x").unwrap_err().kind,
        ErrorKind::NotFound
    );
    assert!(sch.trace().insts.len() == 1, "failures are not recorded");
}

#[test]
fn duplicate_names_are_refused() {
    let mut f = kernel("csrmm", Stage::II);
    let inner = sparsetir_schedule::ir_util::find_block_mut(&mut f.body, "csrmm1").unwrap();
    inner.name = "csrmm0".into();
    let e = Schedule::new(f).unwrap_err();
    assert_eq!(e.kind, ErrorKind::DuplicateName);
    assert!(e.ir.contains("-->"), "{e}");
    assert!(e.ir.contains("T.block(\"csrmm0\")"), "{e}");
}

#[test]
fn trace_parse_errors_are_located() {
    let e = Trace::parse("b0 = sch.get_block(\"x\")\nl1 = sch.get_loops(b0\n").unwrap_err();
    match e {
        TraceError::Syntax { line, col, .. } => {
            assert_eq!(line, 2);
            assert_eq!(col, 22);
        }
        other => panic!("{other:?}"),
    }
    let e = Trace::parse("x = foo.get_block(\"x\")").unwrap_err();
    assert!(
        matches!(
            e,
            TraceError::Syntax {
                line: 1,
                col: 5,
                ..
            }
        ),
        "{e:?}"
    );
    let t = Trace::parse("# a comment\n\nsch.frobnicate(1)\n").unwrap();
    let e = t.apply(kernel("csrmm", Stage::II)).unwrap_err();
    assert!(matches!(e, TraceError::Replay { line: 3, .. }), "{e:?}");
    let t = Trace::parse("l1, l2 = sch.get_loops(b9)").unwrap();
    let e = t.apply(kernel("csrmm", Stage::II)).unwrap_err();
    assert!(e.to_string().contains("b9"), "{e}");
    let t = Trace::parse("b0 = sch.get_block(\"zzz\")").unwrap();
    let e = t.apply(kernel("csrmm", Stage::II)).unwrap_err();
    assert!(matches!(e, TraceError::Schedule { line: 1, .. }), "{e:?}");
}

#[test]
fn trace_values_round_trip() {
    let text = "x, = sch.foo(a, \"s\\\"q\", -3, 2.5, None, True, False, [1, [None]], {\"k\": 1e-3}, key=[\"a\", 'b'])\n";
    let t = Trace::parse(text).unwrap();
    let printed = t.to_text();
    assert_eq!(
        printed,
        "x, = sch.foo(a, \"s\\\"q\", -3, 2.5, None, True, False, [1, [None]], {\"k\": 0.001}, key=[\"a\", \"b\"])\n"
    );
    assert_eq!(
        Trace::parse(&printed).unwrap(),
        Trace::parse(&printed).unwrap()
    );
    assert_eq!(Trace::parse(&printed).unwrap().to_text(), printed);
}

#[test]
fn error_display_marks_the_offending_loop() {
    let mut sch = Schedule::new(kernel("csrmm", Stage::II)).unwrap();
    let b = sch.get_block("csrmm1").unwrap();
    let l = sch.get_loops(b).unwrap();
    let e = sch.parallel(l[0]).unwrap_err();
    let shown = e.to_string();
    println!("{shown}");
    let lines: Vec<&str> = shown.lines().collect();
    assert!(lines[0].starts_with("ReductionLoop: loop `j_1` binds a reduction iterator"));
    // The header of the grid holding `j` is marked and underlined.
    let h = lines
        .iter()
        .position(|l| l.starts_with("--> ") && l.contains("for j_1, k_1 in T.grid("))
        .expect("marked header");
    assert!(lines[h + 1].trim_start().starts_with("^^^"));
    let col = lines[h].find("for").unwrap();
    assert_eq!(
        lines[h + 1].find('^'),
        Some(col),
        "underline starts under `for`"
    );
    // Context before, body after.
    assert!(lines[h - 1].starts_with("    ") && !lines[h - 1].starts_with("-->"));
    assert!(lines[h + 2].starts_with("--> ") && lines[h + 2].contains("T.block(\"csrmm1\")"));
}
