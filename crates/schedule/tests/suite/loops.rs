//! Loop primitives (split, fuse, reorder, parallel, vectorize, unroll, bind): snapshots of the
//! scheduled IR, error cases, trace replay and semantic equality under the stage II/III
//! interpreter.

use crate::common;

use sparsetir_ir::Stage;
use sparsetir_schedule::{ErrorKind, Schedule};

use common::*;

#[test]
fn split_variable_extent_adds_predicate() {
    let f = kernel("csrmm", Stage::II);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let l = loops_of(&mut sch, "csrmm1");
    let parts = sch.split(l[0], &[None, Some(4)]).unwrap();
    assert_eq!(parts.len(), 2);
    insta::assert_snapshot!(print(sch.func()));
    assert!(sch
        .trace()
        .to_text()
        .contains("sch.split(l1, factors=[None, 4])"));
    assert_replays(&sch, &f);
    assert_same("csrmm", sch.func(), &f);
    assert_same_as_reference("csrmm", sch.func());
    // The old loop is gone.
    let e = sch.parallel(l[0]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::StaleHandle);
}

#[test]
fn split_stage_iii_rows_three_ways() {
    let f = kernel("csrmm", Stage::III);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let l = loops_of(&mut sch, "csrmm0");
    let p = sch.split(l[0], &[None, Some(2), Some(3)]).unwrap();
    assert_eq!(p.len(), 3);
    insta::assert_snapshot!(print(sch.func()));
    assert_replays(&sch, &f);
    assert_same_as_reference("csrmm", sch.func());
}

#[test]
fn split_constant_extent() {
    let spec = specialize(kernel("csrmm", Stage::I), "feat_size", 5);
    let f = lower_func(spec, Stage::III);
    // Divisible: no predicate.
    let mut sch = Schedule::new(f.clone()).unwrap();
    let l = loops_of(&mut sch, "csrmm1");
    sch.split(l[1], &[Some(5), Some(1)]).unwrap();
    let text = print(sch.func());
    assert!(!text.contains("T.where"), "{text}");
    assert_same_as_reference("csrmm", sch.func());
    // Inferred outer factor, not divisible: predicate.
    let mut sch = Schedule::new(f.clone()).unwrap();
    let l = loops_of(&mut sch, "csrmm1");
    let p = sch.split(l[1], &[None, Some(2)]).unwrap();
    let inner = sch.loop_(p[0]).unwrap();
    assert_eq!(inner.extent.as_int(), Some(3), "ceil(5 / 2)");
    insta::assert_snapshot!(print(sch.func()));
    assert_replays(&sch, &f);
    assert_same_as_reference("csrmm", sch.func());
    // Factors that cover more than the extent: predicate; fewer: error.
    let mut sch = Schedule::new(f.clone()).unwrap();
    let l = loops_of(&mut sch, "csrmm1");
    sch.split(l[1], &[Some(2), Some(4)]).unwrap();
    assert!(print(sch.func()).contains("T.where"));
    assert_same_as_reference("csrmm", sch.func());
    let mut sch = Schedule::new(f).unwrap();
    let l = loops_of(&mut sch, "csrmm1");
    let e = sch.split(l[1], &[Some(2), Some(2)]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(e.ir.contains("-->"), "{e}");
}

#[test]
fn split_errors() {
    let mut sch = Schedule::new(kernel("csrmm", Stage::II)).unwrap();
    let l = loops_of(&mut sch, "csrmm1");
    for (factors, what) in [
        (vec![None, None], "two None"),
        (vec![Some(4)], "one factor"),
        (vec![Some(0), None], "zero"),
        (vec![Some(2), Some(2)], "symbolic extent without None"),
    ] {
        let e = sch.split(l[0], &factors).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{what}");
        assert!(e.to_string().contains("for j"), "{what}: {e}");
    }
    // An inner factor inferred from a row's length (`J_indptr[vi + 1] - J_indptr[vi]`, `vi`
    // the block iterator around) would enter the block bindings, which read loop variables
    // only; an inner factor given is fine.
    let e = sch.split(l[0], &[Some(4), None]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(e.message.contains("reads `vi`"), "{e}");
    let before = sch.trace().insts.len();
    sch.unroll(l[0]).unwrap();
    let e = sch.split(l[0], &[None, Some(2)]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::LoopNotSerial);
    assert_eq!(sch.trace().insts.len(), before + 1);
}

/// A loop that starts at a value read through a block iterator around it (a fused row's
/// `K_indptr[vi, 0]`) cannot be split: the offset would enter the block bindings.
#[test]
fn split_refuses_a_start_read_through_a_block_iterator() {
    let mut sch = Schedule::new(kernel("csf_square_sum", Stage::I)).unwrap();
    let sp = sch.get_sparse_iteration("csf_square_sum").unwrap();
    sch.sparse_fuse(sp, &["J", "K"]).unwrap();
    let f = lower_func(sch.func().clone(), Stage::II);
    let mut sch = Schedule::new(f).unwrap();
    let l = loops_of(&mut sch, "csf_square_sum1");
    let e = sch.split(l[0], &[None, Some(4)]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
    assert!(
        e.message.contains("starts at a value that reads `vi`"),
        "{e}"
    );
    sparsetir_ir::verify_func(sch.func()).expect("left as it was");
}

/// A split's padded iterations are guarded before the block's bindings are read: a binding
/// that reads memory (a fused loop's row, `mid[p]`) has no element there. The interpreter
/// checks the predicate first, as the writers do.
#[test]
fn a_padded_split_reads_no_binding_past_its_loop() {
    let f = kernel("fused_sddmm", Stage::III);
    let mut sch = Schedule::new(f.clone()).unwrap();
    for block in ["sddmm0_init", "sddmm0"] {
        let l = loops_of(&mut sch, block);
        // More than any case's nonzeros: every iteration past them is padding.
        sch.split(l[0], &[None, Some(64)]).unwrap();
    }
    assert!(print(sch.func()).contains("T.where"));
    assert_same_as_reference("fused_sddmm", sch.func());
}

#[test]
fn fuse_variable_and_fixed_loops() {
    let f = kernel("csrmm", Stage::II);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let l = loops_of(&mut sch, "csrmm1");
    let fused = sch.fuse(&[l[0], l[1]]).unwrap();
    insta::assert_snapshot!(print(sch.func()));
    assert!(sch.trace().to_text().contains("l3 = sch.fuse(l1, l2)"));
    assert_replays(&sch, &f);
    assert_same("csrmm", sch.func(), &f);
    // Split the fused loop again, non-divisibly.
    sch.split(fused, &[None, Some(3)]).unwrap();
    assert_replays(&sch, &f);
    assert_same_as_reference("csrmm", sch.func());
}

#[test]
fn fuse_three_loops_of_a_grid() {
    let f = kernel("csrmm_dense_iter", Stage::III);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let l = loops_of(&mut sch, "csrmm0");
    assert_eq!(l.len(), 3);
    sch.fuse(&l).unwrap();
    insta::assert_snapshot!(print(sch.func()));
    assert_replays(&sch, &f);
    assert_same_as_reference("csrmm_dense_iter", sch.func());
}

#[test]
fn fuse_errors() {
    let mut sch = Schedule::new(kernel("csrmm", Stage::II)).unwrap();
    let outer = loops_of(&mut sch, "csrmm0");
    let inner = loops_of(&mut sch, "csrmm1");
    let e = sch.fuse(&[outer[0], inner[0]]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::LoopNotSingleChild, "{e}");
    assert!(e.ir.contains("--> ") && e.ir.contains("^^^"), "{e}");
    let e = sch.fuse(&[inner[1], inner[0]]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotConsecutive, "{e}");
    let e = sch.fuse(&[inner[0]]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    let e = sch.fuse(&[inner[0], inner[0]]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotAPermutation);
    sch.vectorize(inner[1]).unwrap();
    let e = sch.fuse(&[inner[0], inner[1]]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::LoopNotSerial);
    // Dependent extents.
    let tri = sparsetir_syntax::parse_func(TRI).unwrap();
    let mut sch = Schedule::new(tri).unwrap();
    let l = loops_of(&mut sch, "tri");
    let e = sch.fuse(&l).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotAnAffineLoop);
    assert!(e.ir.contains("--> "), "{e}");
    // A row's stored elements (an extent read through the row block's iterator) under the
    // feature loop: fusing would bind the element through that iterator (found by
    // `c_schedule_prop`: the scheduled function failed to verify).
    let mut sch = Schedule::new(kernel("sddmm", Stage::II)).unwrap();
    let l = loops_of(&mut sch, "sddmm1");
    sch.reorder(&[l[1], l[0]]).unwrap();
    let e = sch.fuse(&[l[1], l[0]]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotAnAffineLoop, "{e}");
    assert!(e.message.contains("enclosing block's iterator"), "{e}");
}

#[test]
fn fuse_unit_loops_adds_no_division() {
    // Unit loops around a loop (COO's `O` and `J` axes) fuse into that loop without `//` or
    // `%`: the unit loops' variables keep their start, the other one is the fused variable.
    let f = sparsetir_syntax::parse_func(UNIT).unwrap();
    let mut sch = Schedule::new(f.clone()).unwrap();
    let l = loops_of(&mut sch, "u");
    sch.fuse(&l).unwrap();
    let text = print(sch.func());
    assert!(!text.contains("//") && !text.contains(" % "), "{text}");
    assert!(text.contains("for o_i_j_fused in T.serial(n)"), "{text}");
    assert_replays(&sch, &f);
    // Not only unit loops: a loop after a non-unit one still takes `%`.
    let f =
        sparsetir_syntax::parse_func(&UNIT.replace("T.grid(1, n, 1)", "T.grid(1, n, 2)")).unwrap();
    let mut sch = Schedule::new(f).unwrap();
    let l = loops_of(&mut sch, "u");
    sch.fuse(&l).unwrap();
    let text = print(sch.func());
    assert!(
        text.contains("o_i_j_fused // 2") && text.contains("o_i_j_fused % 2"),
        "{text}"
    );
}

const UNIT: &str = r#"
@T.prim_func
def unit(a: T.handle, b: T.handle, n: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (1, n, 2), "float32")
    B = T.match_buffer(b, (1, n, 2), "float32")
    for o, i, j in T.grid(1, n, 1):
        with T.block("u"):
            vo, vi, vj = T.axis.remap("SSS", [o, i, j])
            B[vo, vi, vj] = A[vo, vi, vj] * T.float32(2)
"#;

const TRI: &str = r#"
@T.prim_func
def tri(a: T.handle, m: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (m, m), "float32")
    for i in T.serial(m):
        for j in T.serial(i + 1):
            with T.block("tri"):
                vi = T.axis.spatial(m, i)
                vj = T.axis.spatial(m, j)
                T.writes(A[vi, vj])
                A[vi, vj] = T.float32(1)
"#;

#[test]
fn reorder_reduction_and_spatial_loops() {
    let f = kernel("csrmm", Stage::II);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let l = loops_of(&mut sch, "csrmm1");
    sch.reorder(&[l[1], l[0]]).unwrap();
    insta::assert_snapshot!(print(sch.func()));
    assert!(sch.trace().to_text().contains("sch.reorder(l2, l1)"));
    assert_replays(&sch, &f);
    assert_same("csrmm", sch.func(), &f);
    assert_same_as_reference("csrmm", sch.func());
}

#[test]
fn reorder_three_with_a_split() {
    let f = kernel("csrmm_dense_iter", Stage::III);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let l = loops_of(&mut sch, "csrmm0");
    let k = sch.split(l[2], &[None, Some(2)]).unwrap();
    // Only the given loops move; l[1] (j) keeps its place.
    sch.reorder(&[k[1], l[0], k[0]]).unwrap();
    let text = print(sch.func());
    insta::assert_snapshot!(text);
    assert_replays(&sch, &f);
    assert_same_as_reference("csrmm_dense_iter", sch.func());
}

#[test]
fn reorder_errors() {
    let tri = sparsetir_syntax::parse_func(TRI).unwrap();
    let mut sch = Schedule::new(tri).unwrap();
    let l = loops_of(&mut sch, "tri");
    let e = sch.reorder(&[l[1], l[0]]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotAnAffineLoop);
    assert!(e.ir.contains("for i in T.serial(m)"), "{e}");
    let mut sch = Schedule::new(kernel("csrmm", Stage::II)).unwrap();
    let outer = loops_of(&mut sch, "csrmm0");
    let inner = loops_of(&mut sch, "csrmm1");
    let e = sch.reorder(&[inner[0], outer[0]]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::LoopNotSingleChild, "{e}");
    let e = sch.reorder(&[inner[0], inner[0]]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotAPermutation);
    let mut sch = Schedule::new(kernel("csrmm_dense_iter", Stage::III)).unwrap();
    let search = loops_of(&mut sch, "binary_search_block_0_0");
    let main = loops_of(&mut sch, "csrmm0");
    let e = sch.reorder(&[main[0], search[0]]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotConsecutive, "{e}");
    // A threaded loop may not move inside a vectorized one (C has no parallel loop inside a
    // SIMD region); the schedule is left as it was.
    let f = kernel("csrmm", Stage::II);
    let mut sch = Schedule::new(f).unwrap();
    let l = loops_of(&mut sch, "csrmm1_init");
    let k = sch.split(l[0], &[None, Some(1)]).unwrap();
    sch.vectorize(k[1]).unwrap();
    sch.parallel(k[0]).unwrap();
    let before = print(sch.func());
    let e = sch.reorder(&[k[1], k[0]]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::BadPlacement, "{e}");
    assert!(e.to_string().contains("inside the vectorized loop"), "{e}");
    assert_eq!(print(sch.func()), before);
}

/// The grid of [`grid_script`] lowered to stage III.
fn grid(read_j: &str) -> sparsetir_ir::PrimFunc {
    lower_script(&grid_script(read_j), Stage::III)
}

/// `Y` after running `f` on the grid's data, beside the same nest run by hand in Rust.
fn run_grid(f: &sparsetir_ir::PrimFunc, read_right: bool) -> (Vec<f64>, Vec<f64>) {
    let (x, y) = grid_data();
    let mut want = y.clone();
    for i in 0..6 {
        for j in 0..5 {
            let jr = if read_right { j + 1 } else { j };
            want[(i + 1) * 6 + j] = want[i * 6 + jr] * 0.5 + x[i * 5 + j];
        }
    }
    (grid_y(f), want)
}

/// `reorder` keeps every dependence: the wavefront's `j, i` is refused (naming the accesses),
/// also once its loops are tiled; the grid that reads straight up may be reordered, tiles and
/// all, and still computes the same `Y`.
#[test]
fn a_reorder_keeps_the_order_of_dependent_iterations() {
    let f = grid("j + 1");
    let (got, want) = run_grid(&f, true);
    assert_eq!(got, want);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let l = loops_of(&mut sch, "grid0");
    let e = sch.reorder(&[l[1], l[0]]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::DependencyViolation, "{e}");
    assert!(e.message.contains("around loop `i_1`"), "{e}");
    assert!(e.message.contains("element of `Y"), "{e}");
    assert!(e.message.contains("Y_data["), "{e}");
    assert_eq!(
        print(sch.func()),
        print(&f),
        "the schedule is left as it was"
    );
    // Nor may it be tiled as a rectangle (the element up and to the right may lie in the next
    // tile along `j`), nor may its tiles' loops trade places. Under both loops of `i` the
    // columns run in any order: one row reads only the row above.
    let mut sch = Schedule::new(f.clone()).unwrap();
    let l = loops_of(&mut sch, "grid0");
    let a = sch.split(l[0], &[None, Some(2)]).unwrap();
    let b = sch.split(l[1], &[None, Some(2)]).unwrap();
    for order in [[a[0], b[0], a[1], b[1]], [b[0], a[0], a[1], b[1]]] {
        let e = sch.reorder(&order).unwrap_err();
        assert_eq!(e.kind, ErrorKind::DependencyViolation, "{e}");
    }
    sch.reorder(&[a[0], a[1], b[1], b[0]]).unwrap();
    assert_eq!(run_grid(sch.func(), true).0, want);

    let f = grid("j");
    let (_, want) = run_grid(&f, false);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let l = loops_of(&mut sch, "grid0");
    sch.reorder(&[l[1], l[0]]).unwrap();
    assert_eq!(run_grid(sch.func(), false).0, want);
    assert_replays(&sch, &f);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let l = loops_of(&mut sch, "grid0");
    let a = sch.split(l[0], &[None, Some(2)]).unwrap();
    let b = sch.split(l[1], &[None, Some(2)]).unwrap();
    sch.reorder(&[b[0], a[0], a[1], b[1]]).unwrap();
    assert_eq!(run_grid(sch.func(), false).0, want);
    // The rows' two loops may not trade places: the row above may then come later.
    let e = sch.reorder(&[a[1], a[0]]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::DependencyViolation, "{e}");
}

/// Reductions may run in another order only where their update commutes: `reorder` moves
/// the loops of `Y[0] = Y[0] + X[i, j]` ("RR") but not of `Y[0] = Y[0] * 0.5 + X[i, j]`; and
/// `bind(.., "threadIdx.x")` splits over threads only a sum, `min` or `max`.
#[test]
fn reductions_change_order_only_where_their_update_commutes() {
    for (update, commutes) in [
        ("Y[0] + X[i, j]", true),
        ("T.max(Y[0], X[i, j])", true),
        ("Y[0] * T.float32(0.5) + X[i, j]", false),
        ("T.max(Y[0], T.float32(3)) + X[i, j]", false),
    ] {
        let src = format!(
            r#"@T.prim_func
def f(x: T.handle, y: T.handle) -> None:
    T.func_attr({{"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2}})
    I = T.sp.dense_fixed(4)
    J = T.sp.dense_fixed(3)
    K = T.sp.dense_fixed(1)
    X = T.sp.match_buffer(x, (I, J), "float32")
    Y = T.sp.match_buffer(y, (K,), "float32")
    with T.sp.iteration([I, J], "RR", "red") as [i, j]:
        Y[0] = {update}
"#
        );
        let f = lower_script(&src, Stage::III);
        let mut sch = Schedule::new(f.clone()).unwrap();
        let l = loops_of(&mut sch, "red0");
        match sch.reorder(&[l[1], l[0]]) {
            Ok(()) => assert!(commutes, "{update}: reordered"),
            Err(e) => {
                assert!(!commutes, "{update}: {e}");
                assert_eq!(e.kind, ErrorKind::DependencyViolation, "{e}");
            }
        }
        let mut sch = Schedule::new(f).unwrap();
        let l = loops_of(&mut sch, "red0");
        match sch.bind(l[1], "threadIdx.x") {
            Ok(()) => assert!(commutes, "{update}: bound"),
            Err(e) => {
                assert!(!commutes, "{update}: {e}");
                assert_eq!(e.kind, ErrorKind::ReductionLoop, "{e}");
                assert!(e.message.contains("threads can only combine"), "{e}");
            }
        }
    }
}

/// The same in a co-iteration (masked SpGEMM: the intersection of B's row `kk` with the mask's
/// row `i`, walked by positions kept in locals): the loop over `kk` may be split and its halves
/// reordered where the update is a sum, not where it is `C * 0.5 + ...`, whose position
/// `C_indptr[vi] + p_JM[0]` every `kk` shares (found by the schedule fuzzer, which the
/// positions' locals had passed as slots of each iteration's own); the rows still take blocks.
#[test]
fn a_co_iteration_reduction_changes_order_only_where_its_update_commutes() {
    let catalog = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../ops/kernels/masked_spgemm.sp"
    ))
    .expect("the catalog's masked_spgemm");
    let sum = "C[i_1, j_1] = C[i_1, j_1] + A[i_1, kk] * B[kk, j_1] * M[i_1, j_1]";
    assert!(catalog.contains(sum));
    for (update, commutes) in [
        (sum.to_string(), true),
        (
            "C[i_1, j_1] = C[i_1, j_1] * T.float32(0.5) + A[i_1, kk] * B[kk, j_1] * M[i_1, j_1]"
                .to_string(),
            false,
        ),
    ] {
        let f = lower_script(&catalog.replace(sum, &update), Stage::III);
        let mut sch = Schedule::new(f.clone()).unwrap();
        let rows = loops_of(&mut sch, "masked_spgemm0");
        sch.bind(rows[0], "blockIdx.x")
            .unwrap_or_else(|e| panic!("{update}: {e}"));
        let kk = loops_of(&mut sch, "masked_spgemm1");
        let halves = sch.split(kk[0], &[None, Some(2)]).unwrap();
        match sch.reorder(&[halves[1], halves[0]]) {
            Ok(()) => assert!(commutes, "{update}: reordered"),
            Err(e) => {
                assert!(!commutes, "{update}: {e}");
                assert_eq!(e.kind, ErrorKind::DependencyViolation, "{e}");
                assert!(e.message.contains("p_JM[0]"), "{e}");
            }
        }
    }
}

/// A loop fusing SDDMM's nonzeros with their reduction over `k` moves the element it updates,
/// so threads do not combine it into one element: `bind(.., "threadIdx.x")` refuses it (threads
/// of one nonzero would add into it together), while the nonzeros alone may take the threads.
#[test]
fn threads_take_a_fused_reduction_only_where_they_combine_it() {
    let mut stage1 = Schedule::new(kernel("sddmm", Stage::I)).unwrap();
    let sp = stage1.get_sparse_iteration("sddmm").unwrap();
    stage1.sparse_fuse(sp, &["I", "J"]).unwrap();
    let f = lower_func(stage1.func().clone(), Stage::III);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let l = loops_of(&mut sch, "sddmm0");
    let fused = sch.fuse(&[l[0], l[1]]).unwrap();
    let e = sch.bind(fused, "threadIdx.x").unwrap_err();
    assert_eq!(e.kind, ErrorKind::ReductionLoop, "{e}");
    assert!(e.message.contains("moves with the loop"), "{e}");
    let mut sch = Schedule::new(f).unwrap();
    let l = loops_of(&mut sch, "sddmm0");
    sch.bind(l[0], "threadIdx.x").unwrap();
}

/// A store through a coordinate is trusted to give each iteration its element only along its
/// own fiber: rgcn_hetero's relations `r` share destination rows (`Y[I_indices[i +
/// I_indptr[r]], fo]`), so `parallel(r)`, or of a loop fusing `r` and `i`, is refused until the
/// update is atomic, while the rows `i` of one relation may run apart.
#[test]
fn a_coordinate_of_another_fiber_is_no_element_of_its_own() {
    let f = kernel("rgcn_hetero", Stage::III);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let l = loops_of(&mut sch, "rgcn_hetero0");
    let e = sch.parallel(l[1]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::DependencyViolation, "{e}");
    assert!(e.message.contains("Y_data[I_indices_data["), "{e}");
    let rows = loops_of(&mut sch, "rgcn_hetero1");
    sch.parallel(rows[0]).unwrap();
    assert_same_as_reference("rgcn_hetero", sch.func());
    // Nor may a loop fusing the relations and their rows run apart.
    let mut stage1 = Schedule::new(kernel("rgcn_hetero", Stage::I)).unwrap();
    let sp = stage1.get_sparse_iteration("rgcn_hetero").unwrap();
    stage1.sparse_fuse(sp, &["R", "I"]).unwrap();
    for stage in [Stage::II, Stage::III] {
        let fused = lower_func(stage1.func().clone(), stage);
        let mut sch = Schedule::new(fused).unwrap();
        let l = loops_of(&mut sch, "rgcn_hetero0");
        let e = sch.parallel(l[1]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::DependencyViolation, "{stage:?}: {e}");
    }
    let mut sch = Schedule::new(f).unwrap();
    let b = sch.get_block("rgcn_hetero2").unwrap();
    sch.annotate(b, "atomic", sparsetir_ir::AttrValue::Bool(true))
        .unwrap();
    let l = loops_of(&mut sch, "rgcn_hetero0");
    sch.bind(l[1], "blockIdx.y").unwrap();
}

#[test]
fn parallel_vectorize_unroll_bind() {
    let f = kernel("csrmm", Stage::III);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let outer = loops_of(&mut sch, "csrmm0");
    let inner = loops_of(&mut sch, "csrmm1");
    sch.parallel(outer[0]).unwrap();
    sch.vectorize(inner[1]).unwrap();
    sch.unroll(inner[0]).unwrap();
    insta::assert_snapshot!(print(sch.func()));
    assert_eq!(
        sch.trace().to_text().lines().skip(4).collect::<Vec<_>>(),
        ["sch.parallel(l1)", "sch.vectorize(l4)", "sch.unroll(l3)"]
    );
    assert_replays(&sch, &f);
    assert_same_as_reference("csrmm", sch.func());

    let mut sch = Schedule::new(f.clone()).unwrap();
    let outer = loops_of(&mut sch, "csrmm0");
    let inner = loops_of(&mut sch, "csrmm1");
    sch.bind(outer[0], "blockIdx.x").unwrap();
    sch.bind(inner[1], "threadIdx.x").unwrap();
    // The reduction over a row's elements on threadIdx.y: no writer combines partial sums
    // across that axis (every thread would update C[i, k] in place), so it is refused...
    let e = sch.bind(inner[0], "threadIdx.y").unwrap_err();
    assert_eq!(e.kind, ErrorKind::ReductionLoop, "{}", e.message);
    let text = print(sch.func());
    assert!(
        text.contains("T.thread_binding(m, thread=\"blockIdx.x\")"),
        "{text}"
    );
    assert_replays(&sch, &f);
    assert_same_as_reference("csrmm", sch.func());
    // ... unless the block's updates are atomic.
    let b = sch.get_block("csrmm1").unwrap();
    sch.annotate(b, "atomic", sparsetir_ir::AttrValue::Bool(true))
        .unwrap();
    sch.bind(inner[0], "threadIdx.y").unwrap();
    assert_replays(&sch, &f);
    assert_same_as_reference("csrmm", sch.func());
}

#[test]
fn loop_kind_errors() {
    let mut sch = Schedule::new(kernel("csrmm", Stage::II)).unwrap();
    let outer = loops_of(&mut sch, "csrmm0");
    let inner = loops_of(&mut sch, "csrmm1");
    for e in [
        sch.parallel(inner[0]).unwrap_err(),
        sch.vectorize(inner[0]).unwrap_err(),
        sch.bind(inner[0], "blockIdx.x").unwrap_err(),
    ] {
        assert_eq!(e.kind, ErrorKind::ReductionLoop);
        assert!(e.message.contains("csrmm1"), "{e}");
        assert!(e.ir.contains("--> ") && e.ir.contains("T.grid"), "{e}");
    }
    let e = sch.bind(outer[0], "warp.x").unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    sch.parallel(outer[0]).unwrap();
    let e = sch.parallel(outer[0]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::LoopNotSerial);
    assert!(e.ir.contains("T.parallel(m)"), "{e}");
}

#[test]
fn replayed_failures_and_stage_i() {
    let mut sch = Schedule::new(kernel("csrmm", Stage::II)).unwrap();
    loops_of(&mut sch, "csrmm1");
    let trace = sch.trace().to_text() + "sch.parallel(l1)\n";
    let e =
        sparsetir_schedule::apply_schedule_text(kernel("csrmm", Stage::II), &trace).unwrap_err();
    assert!(e.to_string().contains("ReductionLoop"), "{e}");
    let mut s1 = Schedule::new(kernel("csrmm", Stage::I)).unwrap();
    assert_eq!(
        s1.get_block("csrmm0").unwrap_err().kind,
        ErrorKind::WrongStage
    );
}

#[test]
fn threaded_loops_never_nest_inside_vectorized_loops() {
    // sddmm at stage II: `sddmm0` holds the row loop, `sddmm1` the row's elements and k.
    // Vectorizing the row loop around a parallel element loop, either order, is refused.
    let mut sch = Schedule::new(kernel("sddmm", Stage::II)).unwrap();
    let inner = loops_of(&mut sch, "sddmm1");
    let outer = loops_of(&mut sch, "sddmm0");
    sch.parallel(inner[0]).unwrap();
    let e = sch.vectorize(outer[0]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::BadPlacement);
    assert!(e.message.contains("contains the threaded loop"), "{e}");
    assert!(e.ir.contains("--> "), "{e}");

    let mut sch = Schedule::new(kernel("sddmm", Stage::II)).unwrap();
    let inner = loops_of(&mut sch, "sddmm1");
    let outer = loops_of(&mut sch, "sddmm0");
    sch.vectorize(outer[0]).unwrap();
    for e in [
        sch.parallel(inner[0]).unwrap_err(),
        sch.bind(inner[0], "threadIdx.x").unwrap_err(),
    ] {
        assert_eq!(e.kind, ErrorKind::BadPlacement);
        assert!(e.message.contains("inside the vectorized loop"), "{e}");
    }
    // Serial, unrolled and vectorized loops stay allowed inside.
    sch.unroll(inner[0]).unwrap();
}

/// A reduction loop whose iterations write disjoint elements may still run them apart:
/// spmm_24's fused group loop (n = 32: 8 groups a row), split into tiles of 2 rows, the rows of
/// a tile and the groups of a row, binds its tile part to `blockIdx.x` and parallelises its row
/// part; the groups of a row (every iteration adds into the same row), a split that cuts rows
/// apart (runs of 3 groups) and csrmm's column loop stay refused.
#[test]
fn reduction_loops_that_write_disjoint_rows_run_apart() {
    let f = kernel_specialized("spmm_24", Stage::III, &[("n", 32)]);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let l = loops_of(&mut sch, "spmm_240");
    let parts = sch.split(l[0], &[None, Some(2), Some(8)]).unwrap();
    let e = sch.parallel(parts[2]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::ReductionLoop, "{e}");
    sch.bind(parts[0], "blockIdx.x").unwrap();
    sch.parallel(parts[1]).unwrap();
    assert_replays(&sch, &f);

    let mut sch = Schedule::new(f.clone()).unwrap();
    let l = loops_of(&mut sch, "spmm_240");
    let parts = sch.split(l[0], &[None, Some(3)]).unwrap();
    let e = sch.bind(parts[0], "blockIdx.x").unwrap_err();
    assert_eq!(e.kind, ErrorKind::ReductionLoop, "{e}");
    assert!(e.message.contains("disjoint"), "{e}");

    let mut sch = Schedule::new(kernel("csrmm", Stage::III)).unwrap();
    let inner = loops_of(&mut sch, "csrmm1");
    let e = sch.bind(inner[0], "blockIdx.x").unwrap_err();
    assert_eq!(e.kind, ErrorKind::ReductionLoop, "{e}");
}

/// A one-axis stage-I function over `X` and `Y` (length `n`) whose iteration `it` (declared
/// `"S"`) runs `body`, lowered to `stage`.
fn spatial_loop(body: &str, stage: Stage) -> sparsetir_ir::PrimFunc {
    let src = format!(
        r#"@T.prim_func
def f(x: T.handle, y: T.handle, n: T.int32) -> None:
    T.func_attr({{"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2}})
    I = T.sp.dense_fixed(n)
    X = T.sp.match_buffer(x, (I,), "float32")
    Y = T.sp.match_buffer(y, (I,), "float32")
    with T.sp.iteration([I], "S", "it") as [i]:
{body}
"#
    );
    lower_script(&src, stage)
}

#[test]
fn a_dependence_carried_by_a_spatial_loop_keeps_it_serial() {
    // Each iteration reads the element the one before wrote (a prefix sum declared "S"), or all
    // write one element: running the iterations apart would race.
    for (body, stage) in [
        ("        Y[i + 1] = X[i] + Y[i]", Stage::II),
        ("        Y[i + 1] = X[i] + Y[i]", Stage::III),
        ("        Y[i] = Y[i - 1] * 2.0", Stage::III),
        ("        Y[0] = X[i]", Stage::III),
    ] {
        let f = spatial_loop(body, stage);
        for which in ["parallel", "vectorize", "blockIdx.x"] {
            let mut sch = Schedule::new(f.clone()).unwrap();
            let l = loops_of(&mut sch, "it0")[0];
            let e = match which {
                "parallel" => sch.parallel(l),
                "vectorize" => sch.vectorize(l),
                tag => sch.bind(l, tag),
            }
            .unwrap_err();
            assert_eq!(e.kind, ErrorKind::DependencyViolation, "{body}: {e}");
            assert!(e.message.contains("element of `Y"), "{e}");
            // The accesses, as the stage's IR writes them.
            let store = body.trim().split(" = ").next().unwrap().replace('i', "vi");
            let store = match stage {
                Stage::II => store,
                _ => store.replace("Y[", "Y_data["),
            };
            assert!(
                e.message.contains(&format!("under the loop: `{store}`")),
                "{store}: {e}"
            );
            assert!(e.ir.contains("--> "), "{e}");
        }
        // Split by 4: the inner part carries it inside each group of 4, the outer part across
        // groups.
        let mut sch = Schedule::new(f.clone()).unwrap();
        let l = loops_of(&mut sch, "it0")[0];
        let p = sch.split(l, &[None, Some(4)]).unwrap();
        for (part, tag) in p.into_iter().zip(["blockIdx.x", "threadIdx.x"]) {
            let e = sch.bind(part, tag).unwrap_err();
            assert_eq!(e.kind, ErrorKind::DependencyViolation, "{body}: {e}");
        }
    }
    // Iterations that touch elements of their own are taken: in place, in two statements, and
    // two elements per iteration that never meet another iteration's.
    for body in [
        "        Y[i] = Y[i] * 2.0 + X[i]",
        "        Y[i] = X[i]\n        Y[i] = Y[i] + 1.0",
        "        Y[2 * i + 1] = Y[2 * i] + X[i]",
    ] {
        let f = spatial_loop(body, Stage::III);
        let mut sch = Schedule::new(f.clone()).unwrap();
        let l = loops_of(&mut sch, "it0")[0];
        let p = sch.split(l, &[None, Some(4)]).unwrap();
        sch.bind(p[0], "blockIdx.x").unwrap();
        sch.bind(p[1], "threadIdx.x").unwrap();
        let mut sch = Schedule::new(f).unwrap();
        let l = loops_of(&mut sch, "it0")[0];
        sch.parallel(l).unwrap();
    }
    // Two iterations store into each element of `Y[i // 2]`: the loop is refused, and so is
    // the inner part of its split by 4, but not the outer part (groups of 4 write 2 elements
    // of their own).
    let f = spatial_loop("        Y[i // 2] = X[i]", Stage::III);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let l = loops_of(&mut sch, "it0")[0];
    let e = sch.parallel(l).unwrap_err();
    assert_eq!(e.kind, ErrorKind::DependencyViolation, "{e}");
    let p = sch.split(l, &[None, Some(4)]).unwrap();
    let e = sch.bind(p[1], "threadIdx.x").unwrap_err();
    assert_eq!(e.kind, ErrorKind::DependencyViolation, "{e}");
    sch.bind(p[0], "blockIdx.x").unwrap();
}

/// A loop over `i` with a loop over `j` inside, both spatial, writing `Y` over `K` (sizes given).
fn spatial_nest(i: usize, j: usize, k: usize, body: &str) -> sparsetir_ir::PrimFunc {
    let src = format!(
        r#"@T.prim_func
def f(x: T.handle, y: T.handle) -> None:
    T.func_attr({{"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2}})
    I = T.sp.dense_fixed({i})
    J = T.sp.dense_fixed({j})
    K = T.sp.dense_fixed({k})
    X = T.sp.match_buffer(x, (I,), "float32")
    Y = T.sp.match_buffer(y, (K,), "float32")
    with T.sp.iteration([I, J], "SS", "it") as [i, j]:
{body}
"#
    );
    lower_script(&src, Stage::III)
}

/// One store whose index steps with the outer loop is taken only where the inner loop cannot
/// carry it onto another iteration's element: `Y[i + j]` meets itself (`i = 1, j = 0` and
/// `i = 0, j = 1`), `Y[4 * i + j]` over `j < 4` does not, nor does `Y[32 * j + i]` over
/// `i < 32` (the inner loop's offsets are multiples of the outer loop's whole span); over
/// `i < 33` it does (`i = 32, j = 0` and `i = 0, j = 1`). The same holds of indices widened to
/// int64. Other affine forms are decided exactly: `Y[2 * i + 9 * j]` over `j < 3` meets itself
/// only once `i` spans 10 (`i = 9, j = 0` and `i = 0, j = 2`).
#[test]
fn an_inner_loop_may_carry_a_store_onto_another_iteration() {
    for (sizes, body, apart) in [
        ((16, 4, 20), "        Y[i + j] = X[i]", false),
        ((16, 4, 64), "        Y[4 * i + j] = X[i]", true),
        ((16, 5, 80), "        Y[4 * i + j] = X[i]", false),
        ((32, 2, 64), "        Y[32 * j + i] = X[i]", true),
        ((33, 2, 66), "        Y[32 * j + i] = X[i]", false),
        (
            (32, 2, 64),
            "        Y[32 * j + i] = Y[32 * j + i] + X[i]",
            true,
        ),
        // Widened to int64, as an index into a large buffer is.
        (
            (16, 4, 64),
            "        Y[T.Cast(\"int64\", i) * 4 + T.Cast(\"int64\", j)] = X[i]",
            true,
        ),
        (
            (16, 4, 20),
            "        Y[T.Cast(\"int64\", i + j)] = X[i]",
            false,
        ),
        // Forms whose offsets do not interleave, decided by the values they take: `2 i + 9 j`
        // meets itself only where `i` moves by 9 while `j` moves by 2.
        ((9, 3, 40), "        Y[2 * i + 9 * j] = X[i]", true),
        ((10, 3, 40), "        Y[2 * i + 9 * j] = X[i]", false),
        ((16, 2, 60), "        Y[2 * i + 9 * j] = X[i]", true),
        ((5, 4, 40), "        Y[3 * i + 5 * j + 1] = X[i]", true),
        ((6, 4, 40), "        Y[3 * i + 5 * j + 1] = X[i]", false),
        ((6, 4, 40), "        Y[3 * i + 6 * j] = X[i]", false),
    ] {
        let f = spatial_nest(sizes.0, sizes.1, sizes.2, body);
        for which in ["parallel", "threadIdx.x"] {
            let mut sch = Schedule::new(f.clone()).unwrap();
            let l = loops_of(&mut sch, "it0")[0];
            let got = match which {
                "parallel" => sch.parallel(l),
                tag => sch.bind(l, tag),
            };
            match got {
                Ok(()) => assert!(apart, "{sizes:?} {body}: {which} was taken"),
                Err(e) => {
                    assert!(!apart, "{sizes:?} {body}: {e}");
                    assert_eq!(e.kind, ErrorKind::DependencyViolation, "{body}: {e}");
                    assert!(e.message.contains("element of `Y"), "{e}");
                    assert!(e.message.contains("under the loop: `Y_data["), "{e}");
                }
            }
        }
    }
}

/// A fused loop's iterations each write their own element of `Y[i, j]` (the block reads back
/// `i = f // 4, j = f % 4`, which together step with `f`), but not of `Y[i, 0]`.
#[test]
fn a_fused_loop_writes_elements_of_its_own() {
    for (store, apart) in [("Y[i, j]", true), ("Y[i, 0]", false)] {
        let src = format!(
            r#"@T.prim_func
def f(x: T.handle, y: T.handle) -> None:
    T.func_attr({{"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2}})
    I = T.sp.dense_fixed(16)
    J = T.sp.dense_fixed(4)
    X = T.sp.match_buffer(x, (I,), "float32")
    Y = T.sp.match_buffer(y, (I, J), "float32")
    with T.sp.iteration([I, J], "SS", "it") as [i, j]:
        {store} = X[i]
"#
        );
        let f = lower_script(&src, Stage::III);
        let mut sch = Schedule::new(f).unwrap();
        let l = loops_of(&mut sch, "it0");
        let fused = sch.fuse(&[l[0], l[1]]).unwrap();
        match sch.parallel(fused) {
            Ok(()) => assert!(apart, "{store}: parallel was taken"),
            Err(e) => {
                assert!(!apart, "{store}: {e}");
                assert_eq!(e.kind, ErrorKind::DependencyViolation, "{e}");
            }
        }
    }
}

/// A quotient and remainder pair stands for its dividend only where every access of the buffer
/// has the pair at the same positions: here the store's pair is at positions 0 and 1 and the
/// read's at 1 and 2, so both dividends being `4 * i` says nothing (with `n = 2`, iteration 1
/// writes `Y[2, 0, 0]`, which iteration 0 reads).
#[test]
fn a_quotient_and_remainder_pair_counts_where_every_access_has_it() {
    let src = r#"@T.prim_func
def f(x: T.handle, y: T.handle, n: T.int32, m: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(16)
    K0 = T.sp.dense_fixed(m)
    K1 = T.sp.dense_fixed(m)
    K2 = T.sp.dense_fixed(m)
    X = T.sp.match_buffer(x, (I,), "float32")
    Y = T.sp.match_buffer(y, (K0, K1, K2), "float32")
    with T.sp.iteration([I], "S", "it") as [i]:
        Y[(4 * i) // n, (4 * i) % n, 0] = Y[2, (4 * i) // n, (4 * i) % n] + X[i]
"#;
    let f = lower_script(src, Stage::III);
    let mut sch = Schedule::new(f).unwrap();
    let l = loops_of(&mut sch, "it0")[0];
    let e = sch.parallel(l).unwrap_err();
    assert_eq!(e.kind, ErrorKind::DependencyViolation, "{e}");
}

/// SpGEMM's row accumulator and bitmaps (a `workspace` of the row block) are shared by the
/// row's inner iterations: a loop inside the row may not run apart (bit words and counters are
/// read-modify-write), whatever the phase; the row loop may (each row has the workspace to
/// itself, one per thread).
#[test]
fn a_loop_writing_its_rows_workspace_keeps_its_order() {
    use sparsetir_transform::lower_sparse_iter::Phase;
    let f = kernel("spgemm", Stage::I);
    for phase in [Phase::Numeric, Phase::Staged] {
        let g = lower_func(phase.mark(&f), Stage::III);
        let mut sch = Schedule::new(g).unwrap();
        let inner = loops_of(&mut sch, "spgemm2")[0];
        for e in [
            sch.parallel(inner).unwrap_err(),
            sch.vectorize(inner).unwrap_err(),
        ] {
            assert_eq!(e.kind, ErrorKind::DependencyViolation, "{phase:?}: {e}");
            assert!(e.message.contains("element of `wval`"), "{phase:?}: {e}");
        }
        let rows = loops_of(&mut sch, "spgemm0")[0];
        sch.parallel(rows).unwrap();
    }
}

/// A one-axis stage-I function with an index array `P` over `I` and an integer workspace `W`,
/// whose iteration `it` runs `body` after `fill` sets `W[i] = i // 2`; lowered to `stage`.
fn indexed_loop(body: &str, stage: Stage) -> sparsetir_ir::PrimFunc {
    let src = format!(
        r#"@T.prim_func
def f(x: T.handle, y: T.handle, p: T.handle, n: T.int32) -> None:
    T.func_attr({{"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2}})
    I = T.sp.dense_fixed(n)
    X = T.sp.match_buffer(x, (I,), "float32")
    Y = T.sp.match_buffer(y, (I,), "float32")
    P = T.sp.match_buffer(p, (I,), "int32")
    W = T.sp.alloc_buffer((I,), "int32")
    with T.sp.iteration([I], "S", "fill") as [i]:
        W[i] = i // 2
    with T.sp.iteration([I], "S", "it") as [i]:
{body}
"#
    );
    lower_script(&src, stage)
}

/// A store through an index array gives each iteration an element of its own only where no two
/// iterations read one position of it and its values are distinct there, which the runtime
/// checks (`data_requirements`): `Y[P[i]]` runs apart asking `P` distinct, `Y[P[i // 2]]`
/// (two iterations read `P[0]`) and `Y[W[i]]` (an array the function fills itself) do not, nor
/// `Y[i // 2 + P[0]]`, while `Y[i + P[0]]` is apart by its form.
#[test]
fn a_store_through_an_index_array_asks_its_values_distinct() {
    use sparsetir_ir::DistinctScope;
    use sparsetir_schedule::data_requirements;
    for stage in [Stage::II, Stage::III] {
        for (body, asks) in [
            (
                "Y[P[i]] = X[i]",
                Some(vec![("p".to_string(), DistinctScope::All)]),
            ),
            ("Y[i + P[0]] = X[i]", Some(vec![])),
            ("Y[P[i // 2]] = X[i]", None),
            ("Y[W[i]] = X[i]", None),
            ("Y[i // 2 + P[0]] = X[i]", None),
        ] {
            let f = indexed_loop(&format!("        {body}"), stage);
            let mut sch = Schedule::new(f).unwrap();
            let l = loops_of(&mut sch, "it0")[0];
            match (sch.parallel(l), asks) {
                (Ok(()), Some(asks)) => {
                    assert_eq!(
                        data_requirements(sch.func()).distinct,
                        asks,
                        "{stage:?}: {body}"
                    )
                }
                (Err(e), None) => {
                    assert_eq!(
                        e.kind,
                        ErrorKind::DependencyViolation,
                        "{stage:?}: {body}: {e}"
                    )
                }
                (r, asks) => panic!("{stage:?}: {body}: {r:?}, expected {asks:?}"),
            }
        }
    }
}

/// ELL's columns `J_indices[i, j]` are distinct inside a row only (found when the runtime's
/// check of the trusted arrays was written: rows `i` apart storing `Y[j]` were trusted with
/// nothing checked). At stage II, where the function knows the array holds an axis's
/// coordinates, rows apart are refused; at stage III, where it no longer does, they ask every
/// column of the array to be distinct, which the runtime checks (and ELL data seldom holds).
/// The slots `j` of one row ask distinct columns in each row, what a sorted axis's validation
/// already gives.
#[test]
fn the_rows_of_a_fixed_axis_share_coordinates() {
    use sparsetir_ir::DistinctScope;
    let src = r#"@T.prim_func
def f(a: T.handle, y: T.handle, indices: T.handle, m: T.int32, n: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_fixed(I, (n, 4), indices)
    J_detach = T.sp.dense_fixed(n)
    A = T.sp.match_buffer(a, (I, J), "float32")
    Y = T.sp.match_buffer(y, (J_detach,), "float32")
    with T.sp.iteration([I, J], "SS", "it") as [i, j]:
        Y[j] = A[i, j]
"#;
    for stage in [Stage::II, Stage::III] {
        for (which, scope) in [(0, DistinctScope::All), (1, DistinctScope::Fiber)] {
            let f = lower_script(src, stage);
            let mut sch = Schedule::new(f).unwrap();
            let l = loops_of(&mut sch, "it0");
            if stage == Stage::II && which == 0 {
                let e = sch.parallel(l[which]).unwrap_err();
                assert_eq!(e.kind, ErrorKind::DependencyViolation, "{e}");
                assert!(e.message.contains("element of `Y`"), "{e}");
                continue;
            }
            sch.parallel(l[which]).unwrap();
            assert_eq!(
                sparsetir_schedule::data_requirements(sch.func()).distinct,
                vec![("indices".to_string(), scope)],
                "{stage:?}"
            );
        }
    }
}

/// `Y[k + P[i]] = X[i, k]` over `k < 4`, `P` a plain table.
const FIXED_OFFSET: &str = r#"@T.prim_func
def f(x: T.handle, y: T.handle, p: T.handle, n: T.int32, m: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(n)
    K = T.sp.dense_fixed(4)
    M = T.sp.dense_fixed(m)
    X = T.sp.match_buffer(x, (I, K), "float32")
    Y = T.sp.match_buffer(y, (M,), "float32")
    P = T.sp.match_buffer(p, (I,), "int32")
    with T.sp.iteration([I, K], "SS", "it") as [i, k]:
        Y[k + P[i]] = X[i, k]
"#;

/// A position `k + P[i]` that adds an offset to a start read from memory is an element of the
/// iteration's own only inside the range `P[i]..P[i + 1]`: where the offset's loop runs over
/// that range (a fiber's positions), and under the predicate of a split of it, rows run apart
/// (at stage III the `indptr` is a plain array, asked never to decrease; the build drops the
/// demand for an axis's `indptr`, validated so). An offset over a fixed range is not proven
/// inside: rows apart are refused, as they race where `P[i + 1] - P[i] < 4`.
#[test]
fn a_position_read_from_memory_owns_its_range_only() {
    let fixed = FIXED_OFFSET;
    for stage in [Stage::II, Stage::III] {
        let mut sch = Schedule::new(lower_script(fixed, stage)).unwrap();
        let rows = loops_of(&mut sch, "it0")[0];
        let e = sch.parallel(rows).unwrap_err();
        assert_eq!(e.kind, ErrorKind::DependencyViolation, "{stage:?}: {e}");
        assert!(e.message.contains("element of `Y"), "{stage:?}: {e}");
    }
    let csr = r#"@T.prim_func
def f(a: T.handle, b: T.handle, indptr: T.handle, indices: T.handle, m: T.int32, n: T.int32, nnz: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices), "int32")
    A = T.sp.match_buffer(a, (I, J), "float32")
    B = T.sp.match_buffer(b, (I, J), "float32")
    with T.sp.iteration([I, J], "SS", "it") as [i, j]:
        B[i, j] = A[i, j] * 2.0
"#;
    for split in [false, true] {
        for stage in [Stage::II, Stage::III] {
            let mut sch = Schedule::new(lower_script(csr, stage)).unwrap();
            let rows = loops_of(&mut sch, "it0")[0];
            if split {
                let j = *loops_of(&mut sch, "it1").last().unwrap();
                sch.split(j, &[None, Some(4)]).unwrap();
            }
            sch.parallel(rows).unwrap();
            let needs = sparsetir_schedule::data_requirements(sch.func());
            assert!(needs.distinct.is_empty(), "{stage:?}: {needs:?}");
            let expected: Vec<String> = match stage {
                Stage::III => vec!["indptr".into()],
                _ => vec![],
            };
            assert_eq!(needs.monotone, expected, "{stage:?}, split {split}");
        }
    }
}

/// Accesses of one fiber with different offsets (SDDMM's init, split by 4, beside the
/// update's unsplit `j + J_indptr[i]`) still stay inside row `i`'s range: rows run apart.
/// Before ranges were compared as ranges, only accesses of one form were trusted, and this
/// was refused.
#[test]
fn accesses_of_one_range_with_different_offsets_run_apart() {
    let f = kernel("sddmm", Stage::III);
    let mut sch = Schedule::new(f).unwrap();
    let init = sch.get_block("sddmm1_init").unwrap();
    let il = sch.get_loops(init).unwrap();
    sch.split(il[il.len() - 1], &[None, Some(4)]).unwrap();
    let rows = loops_of(&mut sch, "sddmm0")[0];
    sch.parallel(rows).unwrap();
    let text = sparsetir_ir::printer::print_func(sch.func());
    assert!(text.contains("j_0 * 4 + j_1"), "{text}");
    let needs = sparsetir_schedule::data_requirements(sch.func());
    assert_eq!(needs.monotone, vec!["indptr".to_string()], "{text}");
}

/// An offset added to a value the function computed itself (`k + W[i]`, `W` filled by an
/// earlier iteration) is no range of its own: rows apart race wherever two `W[i]` are less
/// than 4 apart, and are refused at stages II and III. (It used to be trusted as the
/// lowering's own lookup.)
#[test]
fn an_offset_into_an_array_the_function_fills_is_refused() {
    let src = FIXED_OFFSET
        .replace(
            "    with T.sp.iteration([I, K]",
            "    W = T.alloc_buffer((n,), \"int32\")\n    \
             with T.sp.iteration([I], \"S\", \"fill\") as [i]:\n        \
             W[i] = P[i] // 2\n    with T.sp.iteration([I, K]",
        )
        .replace("Y[k + P[i]]", "Y[k + W[i]]");
    assert!(
        src.contains("W[i] = P[i] // 2") && src.contains("Y[k + W[i]]"),
        "{src}"
    );
    for stage in [Stage::II, Stage::III] {
        let mut sch = Schedule::new(lower_script(&src, stage)).unwrap();
        let rows = loops_of(&mut sch, "it0")[0];
        let e = sch.parallel(rows).unwrap_err();
        assert_eq!(e.kind, ErrorKind::DependencyViolation, "{stage:?}: {e}");
        assert!(e.message.contains("element of `Y"), "{stage:?}: {e}");
    }
}

/// csr2bsr stores each element at `JO_indptr[i // 2] + mid[p]`, `mid[p]` the position its
/// search found for block column `J_indices[p] // 2` in block row `i // 2`. The proof reads
/// what the search stored from the search itself and sees the access as the script wrote it,
/// `Bsr[i // 2, j // 2, i % 2, j % 2]`: rows run apart, and so do a row's elements (their
/// columns distinct in the row, which the runtime checks). A script that drops `i % 2` makes
/// rows `2 r` and `2 r + 1` write one slot: refused at stages II and III, its elements still
/// apart. A search that stores a position it did not check against the column, or any
/// unchecked value, proves nothing.
#[test]
fn search_results_stand_for_the_coordinates_they_found() {
    let good = sparsetir_ops::load("csr2bsr").unwrap();
    let good_src = sparsetir_ir::printer::print_func(&good);
    let bad_src = good_src.replace(
        "Bsr[i // 2, j // 2, i % 2, j % 2]",
        "Bsr[i // 2, j // 2, 0, j % 2]",
    );
    assert_ne!(good_src, bad_src);
    let parallel = |f: sparsetir_ir::PrimFunc, elements: bool| {
        let mut sch = Schedule::new(f).unwrap();
        let l = loops_of(&mut sch, if elements { "csr2bsr1" } else { "csr2bsr0" })[0];
        sch.parallel(l)
            .map(|_| sparsetir_schedule::data_requirements(sch.func()))
    };
    for stage in [Stage::II, Stage::III] {
        for elements in [false, true] {
            let needs = parallel(lower_script(&good_src, stage), elements)
                .unwrap_or_else(|e| panic!("{stage:?}, elements {elements}: {e}"));
            assert!(needs.unproven.is_empty(), "{needs:?}");
            let bad = parallel(lower_script(&bad_src, stage), elements);
            if elements {
                bad.unwrap_or_else(|e| panic!("{stage:?}: {e}"));
            } else {
                let e = bad.unwrap_err();
                assert_eq!(e.kind, ErrorKind::DependencyViolation, "{stage:?}: {e}");
                assert!(e.message.contains("element of `Bsr"), "{stage:?}: {e}");
            }
        }
    }
    // The search's own code, altered at stage III.
    let text = sparsetir_ir::printer::print_func(&lower_script(&good_src, Stage::III));
    let reparse = |t: &str| {
        let m = sparsetir_syntax::parse_module(t).unwrap_or_else(|e| panic!("{e:?}\n{t}"));
        m.funcs.into_iter().next().unwrap()
    };
    for elements in [false, true] {
        parallel(reparse(&text), elements).expect("the printed function proves the same");
    }
    let compare = "== J_indices_data[vj_1 + J_indptr_data[vi_1]] // 2";
    assert!(text.contains(compare), "{text}");
    let unchecked_column = text.replace(compare, "== 0");
    let e = parallel(reparse(&unchecked_column), true).unwrap_err();
    assert_eq!(e.kind, ErrorKind::DependencyViolation, "{e}");
    let miss = "mid_0_data[vj_1 + J_indptr_data[vi_1]] = -1";
    assert!(text.contains(miss), "{text}");
    let stray = text.replacen(miss, "mid_0_data[vj_1 + J_indptr_data[vi_1]] = 0", 1);
    let e = parallel(reparse(&stray), false).unwrap_err();
    assert_eq!(e.kind, ErrorKind::DependencyViolation, "{e}");
}
