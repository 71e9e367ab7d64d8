//! Cache primitive tests: `cache_read`, `cache_write`, `reverse_cache_read`,
//! `reverse_cache_write` and `set_scope` on catalog kernels (stages II/III): snapshots, error
//! cases (kind + IR shown), trace replay and equal results against the stage-I reference.

use crate::common;

use sparsetir_ir::{DType, PrimFunc, Stage};
use sparsetir_schedule::{ErrorKind, Schedule};

use common::{assert_replays, assert_same_as_reference, kernel, print};

fn verify(f: &PrimFunc) {
    if let Err(e) = sparsetir_ir::verify_func(f) {
        panic!("{e:?}\n{}", print(f));
    }
}

#[test]
fn reverse_cache_read_gather_csrmm_stage_iii() {
    let f = kernel("csrmm", Stage::III);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("csrmm1").unwrap();
    let c = sch.reverse_cache_read(b, 1, "local").unwrap();
    assert_eq!(sch.block_name(c).unwrap(), "B_data_local");
    verify(sch.func());
    insta::assert_snapshot!(print(sch.func()));
    assert_same_as_reference("csrmm", sch.func());
    assert_replays(&sch, &f);
}

#[test]
fn reverse_cache_read_sparse_buffer_stage_ii() {
    // Stage II: A is a sparse buffer over (I, J); the cache is a dense tile indexed by vj.
    let f = kernel("csrmm", Stage::II);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("csrmm1").unwrap();
    sch.reverse_cache_read(b, 0, "local").unwrap();
    verify(sch.func());
    let text = print(sch.func());
    assert!(text.contains("A_local[vj_1] = A[vi, vj_1]"), "{text}");
    assert_same_as_reference("csrmm", sch.func());
    assert_replays(&sch, &f);
}

#[test]
fn reverse_cache_write_sddmm_keeps_untouched_rows() {
    // The sddmm reduction over k may be empty (feat_size is symbolic), so the cache is filled
    // from Y first; the outputs start non-zero, so a missing fill would show.
    let f = kernel("sddmm", Stage::III);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("sddmm1").unwrap();
    let w = sch.reverse_cache_write(b, 0, "local").unwrap();
    assert_eq!(sch.block_name(w).unwrap(), "Y_data_local");
    verify(sch.func());
    let text = print(sch.func());
    assert!(text.contains("with T.block(\"Y_data_local_in\")"), "{text}");
    insta::assert_snapshot!(text);
    assert_same_as_reference("sddmm", sch.func());
    assert_replays(&sch, &f);
}

#[test]
fn reverse_cache_write_stage_ii_csrmm() {
    let f = kernel("csrmm", Stage::II);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("csrmm1").unwrap();
    sch.reverse_cache_write(b, 0, "local").unwrap();
    verify(sch.func());
    assert_same_as_reference("csrmm", sch.func());
    assert_replays(&sch, &f);
}

#[test]
fn cache_read_dense_operand_csrmm() {
    let f = kernel("csrmm", Stage::III);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("csrmm1").unwrap();
    let c = sch.cache_read(b, 1, "shared").unwrap();
    assert_eq!(sch.block_name(c).unwrap(), "B_data_shared");
    verify(sch.func());
    insta::assert_snapshot!(print(sch.func()));
    assert_same_as_reference("csrmm", sch.func());
    assert_replays(&sch, &f);
}

#[test]
fn cache_write_csrmm_output_has_two_writers() {
    // csrmm's C is written by the hoisted init nest `csrmm1_init` (a row's nonzero fiber may
    // be empty, SPEC §2.3) and by the update `csrmm1`, both in block `csrmm0`: neither is the
    // single writer `cache_write` needs, and the refusal names the other one.
    let f = kernel("csrmm", Stage::III);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("csrmm1").unwrap();
    let e = sch.cache_write(b, 0, "local").unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotSingleWriter, "{e}");
    assert!(e.message.contains("`csrmm1_init`"), "{e}");
    let init = sch.get_block("csrmm1_init").unwrap();
    let e = sch.cache_write(init, 0, "local").unwrap_err();
    assert_eq!(e.kind, ErrorKind::NotSingleWriter, "{e}");
    assert!(e.message.contains("`csrmm1`"), "{e}");
    assert_eq!(print(sch.func()), print(&f), "failures change nothing");
    assert!(!sch.trace().to_text().contains("cache_write"));
}

#[test]
fn cache_write_output_bsrmm() {
    // bsrmm keeps its init in `bsrmm0` (the block reduction over `bj` has the extent of the
    // spatial `bi`), so `bsrmm0` is the single writer of C at its scope.
    let f = kernel("bsrmm", Stage::III);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("bsrmm0").unwrap();
    let c = sch.cache_write(b, 0, "local").unwrap();
    assert_eq!(sch.block_name(c).unwrap(), "C_data_local");
    verify(sch.func());
    let text = print(sch.func());
    assert!(
        text.contains("C_data_local_in"),
        "the cache starts from C: {text}"
    );
    assert!(
        text.contains("C_data_local[vi, vbi, vf] = T.float32(0)"),
        "the init writes the cache: {text}"
    );
    insta::assert_snapshot!(text);
    assert_same_as_reference("bsrmm", sch.func());
    assert_replays(&sch, &f);
}

#[test]
fn set_scope_of_a_cache() {
    let f = kernel("csrmm", Stage::III);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("csrmm1").unwrap();
    let c = sch.reverse_cache_read(b, 1, "local").unwrap();
    sch.set_scope(c, 0, "shared").unwrap();
    let buf = sch.func().buffer_by_name("B_data_local").unwrap();
    assert_eq!(sch.func().buffers[buf].scope, "shared");
    assert!(sch
        .trace()
        .to_text()
        .contains("sch.set_scope(b1, 0, \"shared\")"));
    assert_replays(&sch, &f);
}

#[test]
fn errors_show_the_ir() {
    // A sparse buffer cannot be copied along dimensions.
    let mut sch = Schedule::new(kernel("csrmm", Stage::II)).unwrap();
    let b = sch.get_block("csrmm1").unwrap();
    let e = sch.cache_read(b, 0, "local").unwrap_err();
    assert_eq!(e.kind, ErrorKind::SparseBuffer, "{e}");
    assert!(e.message.contains("reverse_cache_read"), "{e}");
    assert!(
        e.ir.contains("--> ") && e.ir.contains("with T.block(\"csrmm1\")"),
        "{e}"
    );
    let e = sch.cache_write(b, 0, "local").unwrap_err();
    assert_eq!(e.kind, ErrorKind::SparseBuffer, "{e}");

    let mut sch = Schedule::new(kernel("csrmm", Stage::III)).unwrap();
    let b0 = sch.get_block("csrmm0").unwrap();
    let b1 = sch.get_block("csrmm1").unwrap();
    // A region, not a point.
    let e = sch.reverse_cache_read(b0, 2, "local").unwrap_err();
    assert_eq!(e.kind, ErrorKind::RegionNotCovered, "{e}");
    assert!(e.ir.contains("with T.block(\"csrmm0\")"), "{e}");
    // Index out of range and unknown scope.
    let e = sch.cache_read(b1, 9, "local").unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
    let e = sch.reverse_cache_read(b1, 1, "registers").unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
    // A function parameter keeps its scope.
    let e = sch.set_scope(b1, 0, "shared").unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
    // Reading a buffer the same block writes.
    let e = sch
        .reverse_cache_read(b1, 1, "local")
        .map(|_| ())
        .and_then(|_| {
            let b = sch.get_block("csrmm1").unwrap();
            sch.reverse_cache_read(b, 1, "local").map(|_| ())
        });
    assert!(e.is_ok(), "caching the cache is allowed");
    // Nothing changed by failing primitives: the trace only holds the successful ones.
    assert!(!sch.trace().to_text().contains("set_scope"));
}

#[test]
fn reverse_cache_write_non_injective_index_is_refused() {
    let src = r#"@T.prim_func
def halve(a: T.handle, c: T.handle) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 0})
    A = T.match_buffer(a, (8,), "float32")
    C = T.match_buffer(c, (4,), "float32")
    for i in T.serial(8):
        with T.block("C"):
            vi = T.axis.remap("S", [i])
            T.reads(A[vi], C[vi // 2])
            T.writes(C[vi // 2])
            C[vi // 2] = C[vi // 2] + A[vi]
"#;
    let f = sparsetir_syntax::parse_func(src).unwrap();
    let mut sch = Schedule::new(f).unwrap();
    let b = sch.get_block("C").unwrap();
    let e = sch.reverse_cache_write(b, 0, "local").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported, "{e}");
    assert!(e.ir.contains("with T.block(\"C\")"), "{e}");
}

#[test]
fn storage_align_pads_a_cache_row_and_keeps_results() {
    // csrmm's gather of B cached as a tile B_data_local[vj, vk]: its rows padded to a stride
    // of 1 modulo 16. The interpreter addresses the padded layout; the results stay the
    // reference's.
    let f = kernel_feat("csrmm", 5);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("csrmm1").unwrap();
    let c = sch.reverse_cache_read(b, 1, "local").unwrap();
    let buf = sch.func().buffer_by_name("B_data_local").unwrap();
    assert_eq!(sch.func().buffers[buf].ndim(), 2, "{}", print(sch.func()));
    sch.storage_align(c, 0, 0, 16, 1).unwrap();
    verify(sch.func());
    let text = print(sch.func());
    assert!(text.contains("strides=[T.int64(17), T.int64(1)]"), "{text}");
    assert_same_as_reference("csrmm", sch.func());
    assert!(sch
        .trace()
        .to_text()
        .contains("sch.storage_align(b1, 0, 0, 16, 1)"));
    assert_replays(&sch, &f);
    // A stride already at the offset is kept: 5 % 5 == 0.
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("csrmm1").unwrap();
    let c = sch.reverse_cache_read(b, 1, "local").unwrap();
    sch.storage_align(c, 0, 0, 5, 0).unwrap();
    assert!(print(sch.func()).contains("strides=[T.int64(5), T.int64(1)]"));
}

#[test]
fn storage_align_errors() {
    let f = kernel_feat("csrmm", 5);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("csrmm1").unwrap();
    // C is the function's output: its layout is the caller's.
    let e = sch.storage_align(b, 0, 0, 16, 1).unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
    assert!(e.message.contains("function parameter"), "{e}");
    let c = sch.reverse_cache_read(b, 1, "local").unwrap();
    for (axis, factor, offset, needle) in [
        (2, 16, 1, "out of range"),
        (0, 0, 0, "factor > 0"),
        (0, 8, 8, "offset < factor"),
    ] {
        let e = sch.storage_align(c, 0, axis, factor, offset).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
        assert!(e.message.contains(needle), "{needle}: {e}");
    }
    sch.storage_align(c, 0, 0, 16, 1).unwrap();
    let e = sch.storage_align(c, 0, 0, 16, 2).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported, "{e}");
    // Symbolic feature width: the row's stride is not a constant.
    let g = kernel("csrmm", Stage::III);
    let mut sch = Schedule::new(g).unwrap();
    let b = sch.get_block("csrmm1").unwrap();
    let c = sch.reverse_cache_read(b, 1, "local").unwrap();
    let e = sch.storage_align(c, 0, 0, 16, 1).unwrap_err();
    assert!(e.message.contains("must be constants"), "{e}");
}

/// Catalog kernel `name` at stage III with `feat_size` fixed.
fn kernel_feat(name: &str, feat: i64) -> PrimFunc {
    common::kernel_specialized(name, Stage::III, &[("feat_size", feat)])
}

#[test]
fn reverse_cache_read_fills_after_the_positions_it_is_addressed_through() {
    // fused_sddmm iterates the fused (i, j) and finds each position's row with a binary search
    // block earlier in the scope: the cache of B, addressed through those rows, is filled
    // after that block, not at the start of the scope (found by `sparsetir-fuzz --target
    // schedule`: the fill read the rows before they were computed).
    let f = kernel("fused_sddmm", Stage::III);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("sddmm0").unwrap();
    sch.reverse_cache_read(b, 1, "local").unwrap();
    verify(sch.func());
    let text = print(sch.func());
    let search = text
        .find("with T.block(\"binary_search_block_0_0\")")
        .expect("search");
    let fill = text.find("with T.block(\"B_data_local\")").expect("fill");
    assert!(search < fill, "{text}");
    assert_same_as_reference("fused_sddmm", sch.func());
    assert_replays(&sch, &f);
}

#[test]
fn reverse_caches_of_accesses_made_under_a_condition_are_refused() {
    // csrmm_dense_iter reads A[i, j] for every dense j: a binary search finds its position,
    // and the read runs only where it was found. A cache copied for every (i, j) would read
    // positions that do not exist.
    let f = kernel("csrmm_dense_iter", Stage::III);
    let mut sch = Schedule::new(f).unwrap();
    let b = sch.get_block("csrmm0").unwrap();
    let a = sch.func().buffer_by_name("A_data").unwrap();
    let blk = sparsetir_schedule::ir_util::find_block(&sch.func().body, "csrmm0").unwrap();
    let index = blk
        .reads
        .iter()
        .position(|r| r.buffer == a)
        .expect("reads A");
    let e = sch.reverse_cache_read(b, index, "local").unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported, "{e}");
    assert!(e.message.contains("only under a condition"), "{e}");
}

#[test]
fn a_read_cache_may_widen_sixteen_bit_values() {
    // csrmm with float16 A and B: the gathered rows of B cached as float32. The fill converts
    // each value once; the product, which converted its float16 load to float32 itself, now
    // reads the float32 tile as it is.
    let f = sparsetir_ops::load("csrmm").unwrap();
    let f = sparsetir_transform::store_as(&f, &["A", "B"], DType::F16).unwrap();
    let f = common::lower_func(f, Stage::III);
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("csrmm1").unwrap();
    let c = sch
        .reverse_cache_read_as(b, 1, "local", DType::F32)
        .unwrap();
    verify(sch.func());
    let buf = sch.func().buffer_by_name("B_data_local").unwrap();
    assert_eq!(sch.func().buffers[buf].dtype, DType::F32);
    let text = print(sch.func());
    let fill = sparsetir_schedule::ir_util::find_block(&sch.func().body, "B_data_local").unwrap();
    let src = sch.func().buffer_by_name("B_data").unwrap();
    assert!(
        matches!(fill.body.single(), sparsetir_ir::Stmt::Store(st)
            if matches!(&st.value, sparsetir_ir::Expr::Cast(DType::F32, l)
                if matches!(&**l, sparsetir_ir::Expr::Load { buffer, .. } if *buffer == src))),
        "{text}"
    );
    assert!(!text.contains("T.Cast(\"float32\", B_data_local"), "{text}");
    assert!(text.contains("* B_data_local[vj, vk]"), "{text}");
    assert!(sch
        .trace()
        .to_text()
        .contains("sch.reverse_cache_read(b0, 1, \"local\", dtype=\"float32\")"));
    assert_replays(&sch, &f);
    let _ = c;
    // Narrowing, or converting a cache that is written back, would change values.
    let mut sch = Schedule::new(f.clone()).unwrap();
    let b = sch.get_block("csrmm1").unwrap();
    let e = sch
        .reverse_cache_read_as(b, 1, "local", DType::I32)
        .unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument, "{e}");
    let g = kernel("csrmm", Stage::III);
    let mut sch = Schedule::new(g).unwrap();
    let b = sch.get_block("csrmm1").unwrap();
    let e = sch
        .reverse_cache_read_as(b, 1, "local", DType::F16)
        .unwrap_err();
    assert!(e.message.contains("would not hold its values"), "{e}");
}

#[test]
fn a_function_level_local_cache_is_shared_by_gpu_threads() {
    // fused_sddmm's reads of A cached in a "local" buffer that the function allocates: the GPU
    // keeps it in global memory, so threads filling it are not private to one another, and
    // the fill's positions of one row all write that row (found by `sparsetir-fuzz --target
    // schedule-native`: the emulator saw the race after `bind` had trusted the scope).
    let f = kernel("fused_sddmm", Stage::III);
    let mut sch = Schedule::new(f).unwrap();
    let b = sch.get_block("sddmm0").unwrap();
    let c = sch.reverse_cache_read(b, 0, "local").unwrap();
    let buf = sch.func().buffer_by_name("A_data_local").unwrap();
    assert!(
        sch.func().buffer_decls.contains(&buf),
        "a function-level allocation"
    );
    let loops = sch.get_loops(c).unwrap();
    let e = sch.bind(loops[0], "threadIdx.x").unwrap_err();
    assert_eq!(e.kind, ErrorKind::DependencyViolation, "{e}");
    assert!(e.message.contains("A_data_local"), "{e}");
}
