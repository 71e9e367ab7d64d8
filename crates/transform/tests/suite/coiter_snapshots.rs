//! Snapshots of the stage II and III forms of the sparse-output kernels (issue 15), both phases:
//! `spadd` (and `spmul`) co-iterate with a merge loop and assemble `C` in merge order; `spgemm`
//! gathers each row in a dense workspace and reads it back in column order through a two-level
//! bitmap (a nonzero default value takes stamps and a sort instead); none of them searches.

use sparsetir_ir::printer::print_module;
use sparsetir_ir::{IRModule, Stage};
use sparsetir_transform::{lower, PipelineOptions};

fn lowered(name: &str, stage: Stage) -> String {
    let f = sparsetir_ops::load(name).expect("kernel parses");
    let opts = PipelineOptions {
        verify: true,
        ..PipelineOptions::to_stage(stage)
    };
    let out = lower(&IRModule { funcs: vec![f] }, &opts).expect("lowers");
    let names: Vec<&str> = out.funcs.iter().map(|f| f.name.as_str()).collect();
    if name != "masked_spgemm" {
        assert_eq!(
            names,
            [format!("{name}_symbolic"), format!("{name}_numeric")],
            "{name}: one function per phase"
        );
    }
    let text = print_module(&out);
    let back = sparsetir_syntax::parse_module(&text).expect("the printed form parses");
    assert!(
        sparsetir_ir::equal::module_eq(&out, &back),
        "{name}: the printed form does not read back equal"
    );
    text
}

#[test]
fn merge_loops_and_assembly_without_searches() {
    for name in ["spadd", "spmul", "spgemm", "masked_spgemm"] {
        for stage in [Stage::II, Stage::III] {
            let text = lowered(name, stage);
            assert!(!text.contains("binary_search"), "{name}: a search\n{text}");
            assert!(!text.contains("mid_"), "{name}: a search result\n{text}");
            let merges = text.matches("while ").count();
            // Per phase, a union of two parts merges while both have entries, then runs out
            // each part alone (3 loops); an intersection stops when either runs out (1 loop).
            let want = match name {
                // The numeric phase reads the bitmaps back: words of `top`, then of `bits`.
                "spgemm" => 2,
                "masked_spgemm" => 1,
                "spadd" => 6,
                _ => 2,
            };
            assert_eq!(merges, want, "{name}: merge loops\n{text}");
            if name == "spgemm" {
                assert!(text.contains("T.ctz("), "{name}: bitmap read-out\n{text}");
                assert!(!text.contains("T.sort_range("), "{name}: no sort\n{text}");
                assert!(text.contains("wval"), "{name}: workspace\n{text}");
            }
            let tag = if stage == Stage::II { "ii" } else { "iii" };
            insta::assert_snapshot!(format!("coiter_stage_{tag}_{name}"), text);
        }
    }
}

/// SpGEMM into a buffer whose default value is not 0: the workspace cannot stand for "absent"
/// with 0, so it holds stamps, and the appended columns are sorted.
#[test]
fn a_nonzero_default_gathers_with_stamps_and_sorts() {
    let src = sparsetir_ops::get("spgemm")
        .expect("kernel")
        .source
        .replace(
            "C = T.sp.match_buffer(c, (I, JC), \"float32\")",
            "C = T.sp.match_buffer(c, (I, JC), \"float32\", default_value=T.float32(0.5))",
        );
    assert!(src.contains("default_value"), "{src}");
    let f = sparsetir_syntax::parse_func(&src).expect("parses");
    let opts = PipelineOptions {
        verify: true,
        ..PipelineOptions::to_stage(Stage::III)
    };
    let out = lower(&IRModule { funcs: vec![f] }, &opts).expect("lowers");
    let text = print_module(&out);
    assert!(text.contains("T.sort_range("), "{text}");
    assert!(text.contains("flag"), "{text}");
    assert!(!text.contains("T.ctz("), "{text}");
}

/// SpGEMM's one-pass assembly, as the C backend runs it: the bound phase counts each row's
/// stores (no workspace), the staged phase gathers the row in the bitmap workspace (or, for
/// dense rows, in byte marks read 64 at a time) and reads it back into a block of the staging
/// area taken with an atomic addition, and the gather phase copies the staged rows into the
/// output; no sort, no search.
#[test]
fn spgemm_staged_phases() {
    use sparsetir_transform::Phase;
    let f = sparsetir_ops::load("spgemm").expect("kernel parses");
    for phase in [
        Phase::Bound,
        Phase::Staged,
        Phase::StagedDense,
        Phase::StagedGroups,
        Phase::Gather,
    ] {
        for stage in [Stage::II, Stage::III] {
            let opts = PipelineOptions {
                verify: true,
                assembly: Some(phase),
                ..PipelineOptions::to_stage(stage)
            };
            let out = lower(
                &IRModule {
                    funcs: vec![f.clone()],
                },
                &opts,
            )
            .expect("lowers");
            let text = print_module(&out);
            let back = sparsetir_syntax::parse_module(&text).expect("the printed form parses");
            assert!(
                sparsetir_ir::equal::module_eq(&out, &back),
                "{}: the printed form does not read back equal",
                phase.name()
            );
            let what = format!("{} at stage {stage:?}\n{text}", phase.name());
            assert!(
                !text.contains("binary_search") && !text.contains("T.sort_range("),
                "{what}"
            );
            match phase {
                Phase::Bound => {
                    assert!(!text.contains("wval") && text.contains("nst"), "{what}");
                    assert!(!text.contains("while "), "{what}");
                }
                Phase::Staged => {
                    assert!(
                        text.contains("T.atomic_add(") && text.contains("JC__used"),
                        "{what}"
                    );
                    assert!(
                        text.contains("T.ctz(") && text.contains("c__stage"),
                        "{what}"
                    );
                    // The read-back into the area, and the one that only clears the workspace
                    // (the row's block lies past the capacity): two `while` loops each.
                    assert_eq!(text.matches("while ").count(), 4, "{what}");
                }
                Phase::StagedDense => {
                    assert!(
                        text.contains("T.atomic_add(") && text.contains("T.mask64("),
                        "{what}"
                    );
                    assert!(text.contains("marks") && !text.contains("bits["), "{what}");
                    // Each group of 64 marks read back as a whole: its columns and values
                    // compressed into the area (once: the read-back that only clears counts
                    // with `T.popcount`), no loop over single columns.
                    assert_eq!(text.matches("while ").count(), 0, "{what}");
                    assert_eq!(text.matches("T.compress_iota64(").count(), 1, "{what}");
                    assert_eq!(text.matches("T.compress64(").count(), 1, "{what}");
                    assert_eq!(text.matches("T.popcount(").count(), 2, "{what}");
                    assert!(!text.contains("groups["), "{what}");
                }
                Phase::StagedGroups => {
                    // The groups marked in a second level of bytes, 64 at a time: a `while`
                    // over each word of group marks in both read-backs, and the same group
                    // writes as the dense workspace.
                    assert!(text.contains("marks") && text.contains("groups["), "{what}");
                    assert!(!text.contains("bits["), "{what}");
                    assert_eq!(text.matches("while ").count(), 2, "{what}");
                    assert_eq!(text.matches("T.mask64(").count(), 4, "{what}");
                    assert_eq!(text.matches("T.compress64(").count(), 1, "{what}");
                }
                _ => {
                    assert!(
                        text.contains("c_indptr__start") && !text.contains("wval"),
                        "{what}"
                    );
                    // A row starting a run of rows staged back to back copies the run: two
                    // scans (the run's end, its first row with elements), two copies.
                    assert!(!text.contains("B["), "{what}");
                    assert_eq!(text.matches("while ").count(), 2, "{what}");
                    assert_eq!(text.matches("T.copy_range(").count(), 2, "{what}");
                }
            }
            let tag = if stage == Stage::II { "ii" } else { "iii" };
            insta::assert_snapshot!(format!("coiter_stage_{tag}_spgemm_{}", phase.name()), text);
        }
    }
}
