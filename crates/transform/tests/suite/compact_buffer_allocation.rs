//! Tests of `compact_buffer_allocation`: a per-row partial-sum buffer `Z[m, 4]` used only inside
//! the row's block becomes a 4-element local array of that block (snapshot), and the stage-III
//! interpreter gives the same outputs before and after — equal to a direct computation; SpMV on
//! SELL lowered from its script compacts `Z[nchunk, lanes]` to `Z[lanes]`; buffers shared
//! between top-level nests, indexed by something else than the owner's iterator, owned by a
//! block whose iterator is not a plain loop variable, or too large stay where they are; other
//! stages are left alone.

use std::collections::HashMap;

use sparsetir_eval::{run_func, ArgValue};
use sparsetir_formats::Tensor;
use sparsetir_ir::printer::print_func;
use sparsetir_ir::{verify_func, BufferDecl, DType, PrimFunc, Stmt};
use sparsetir_transform::compact_buffer_allocation;
use sparsetir_transform::pipeline::{lower, PipelineOptions};

fn parse(src: &str) -> PrimFunc {
    sparsetir_syntax::parse_func(src).unwrap_or_else(|d| panic!("parse: {d:?}"))
}

/// Row sums of four column groups, then their maximum: `Z[i, g]` lives only in row `i`'s block.
const ROW_GROUPS: &str = r#"
@T.prim_func
def row_groups(a: T.handle, y: T.handle, m: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (m, 8), "float32")
    Y = T.match_buffer(y, (m,), "float32")
    Z = T.alloc_buffer((m, 4), "float32")
    for i in T.parallel(m):
        with T.block("row"):
            vi = T.axis.spatial(m, i)
            for g, e in T.grid(4, 2):
                with T.block("sum"):
                    vg = T.axis.spatial(4, g)
                    ve = T.axis.reduce(2, e)
                    with T.init():
                        Z[vi, vg] = T.float32(0)
                    Z[vi, vg] = Z[vi, vg] + A[vi, vg * 2 + ve]
            Y[vi] = T.float32(-1000)
            for g in T.serial(4):
                with T.block("max"):
                    vg = T.axis.spatial(4, g)
                    Y[vi] = T.max(Y[vi], Z[vi, vg])
"#;

fn data(m: usize) -> HashMap<String, ArgValue> {
    let a: Vec<f64> = (0..m * 8).map(|v| ((v * 37) % 11) as f64 - 5.0).collect();
    let mut args = HashMap::new();
    let arr = |v: &[f64]| ArgValue::Array(Tensor::from_f64(DType::F32, v).expect("tensor"));
    args.insert("a".to_string(), arr(&a));
    args.insert("y".to_string(), arr(&vec![0.0; m]));
    args.insert("m".to_string(), ArgValue::Int(m as i64));
    args
}

fn ys(args: &HashMap<String, ArgValue>) -> Vec<f64> {
    match args.get("y") {
        Some(ArgValue::Array(t)) => t.to_f64_vec(),
        other => panic!("no y: {other:?}"),
    }
}

/// The buffer named `name` of `f` and whether it is declared at function level.
fn decl_of(f: &PrimFunc, name: &str) -> (sparsetir_ir::BufferId, bool) {
    let (id, _) = f
        .buffers
        .iter()
        .find(|(_, b)| b.name == name)
        .unwrap_or_else(|| panic!("no buffer {name}"));
    (id, f.buffer_decls.contains(&id))
}

#[test]
fn a_per_row_buffer_moves_into_the_row_block() {
    let f = parse(ROW_GROUPS);
    let g = compact_buffer_allocation(&f);
    assert!(verify_func(&g).is_ok(), "{:?}", verify_func(&g));
    let (z, at_function_level) = decl_of(&g, "Z");
    assert!(!at_function_level);
    assert!(matches!(g.buffers[z].decl, BufferDecl::Alloc));
    assert_eq!(g.buffers[z].scope, "local");
    let mut owner = None;
    g.body.visit(&mut |s| {
        if let Stmt::Block(b) = s {
            if b.alloc_buffers.contains(&z) {
                owner = Some(b.name.clone());
            }
        }
    });
    assert_eq!(owner.as_deref(), Some("row"));
    insta::assert_snapshot!(print_func(&g));
    // Same results as before, and as a direct computation.
    let m = 7;
    let (mut before, mut after) = (data(m), data(m));
    run_func(&f, &mut before).expect("before");
    run_func(&g, &mut after).expect("after");
    assert_eq!(ys(&before), ys(&after));
    let a: Vec<f64> = (0..m * 8).map(|v| ((v * 37) % 11) as f64 - 5.0).collect();
    for i in 0..m {
        let want = (0..4)
            .map(|g| a[i * 8 + 2 * g] + a[i * 8 + 2 * g + 1])
            .fold(-1000.0f64, f64::max);
        assert_eq!(ys(&after)[i], want, "row {i}");
    }
    // The printed result parses back to the same function.
    let again = parse(&print_func(&g));
    assert_eq!(print_func(&again), print_func(&g));
}

#[test]
fn sell_partial_sums_become_a_chunk_array() {
    let f = sparsetir_ops::composable::spmv_sell().expect("spmv_sell");
    let f = sparsetir_transform::specialize(&f, &[("lanes".to_string(), 16)]).expect("specialize");
    let module = sparsetir_ir::IRModule { funcs: vec![f] };
    let out = lower(&module, &PipelineOptions::default()).expect("lower");
    let g = compact_buffer_allocation(&out.funcs[0]);
    let (z, at_function_level) = decl_of(&g, "Z_data");
    assert!(!at_function_level);
    let sparsetir_ir::BufferShape::Dense(shape) = &g.buffers[z].shape else {
        panic!("dense");
    };
    assert_eq!(shape.len(), 1);
    assert_eq!(shape[0].as_int(), Some(16));
}

#[test]
fn buffers_that_cannot_move_stay() {
    // Written by one top-level nest, read by another.
    let shared = r#"
@T.prim_func
def shared(a: T.handle, y: T.handle, m: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (m,), "float32")
    Y = T.match_buffer(y, (m,), "float32")
    Z = T.alloc_buffer((m,), "float32")
    for i in T.serial(m):
        with T.block("w"):
            vi = T.axis.spatial(m, i)
            Z[vi] = A[vi] * T.float32(2)
    for i in T.serial(m):
        with T.block("r"):
            vi = T.axis.spatial(m, i)
            Y[vi] = Z[vi] + T.float32(1)
"#;
    // Indexed by a neighbour row: instances share elements.
    let neighbour = r#"
@T.prim_func
def neighbour(a: T.handle, y: T.handle, m: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (m,), "float32")
    Y = T.match_buffer(y, (m,), "float32")
    Z = T.alloc_buffer((m + 1,), "float32")
    for i in T.serial(m):
        with T.block("w"):
            vi = T.axis.spatial(m, i)
            Z[vi + 1] = A[vi]
            Y[vi] = Z[vi]
"#;
    // The owner's iterator is not a plain loop variable (two instances per value).
    let halves = r#"
@T.prim_func
def halves(a: T.handle, y: T.handle, m: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (m,), "float32")
    Y = T.match_buffer(y, (m,), "float32")
    Z = T.alloc_buffer((m,), "float32")
    for i in T.serial(m * 2):
        with T.block("w"):
            vi = T.axis.spatial(m, i // 2)
            Z[vi] = Z[vi] + A[vi]
            Y[vi] = Z[vi]
"#;
    // The rest of the buffer is too large for the stack.
    let large = r#"
@T.prim_func
def large(a: T.handle, y: T.handle, m: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (m,), "float32")
    Y = T.match_buffer(y, (m,), "float32")
    Z = T.alloc_buffer((m, 100000), "float32")
    for i in T.serial(m):
        with T.block("w"):
            vi = T.axis.spatial(m, i)
            Z[vi, 0] = A[vi]
            Y[vi] = Z[vi, 0]
"#;
    for src in [shared, neighbour, halves, large] {
        let f = parse(src);
        let g = compact_buffer_allocation(&f);
        assert_eq!(print_func(&g), print_func(&f), "{}", f.name);
    }
}

#[test]
fn other_stages_are_left_alone() {
    let f = sparsetir_ops::composable::spmv_sell().expect("spmv_sell");
    assert_eq!(compact_buffer_allocation(&f), f);
}
