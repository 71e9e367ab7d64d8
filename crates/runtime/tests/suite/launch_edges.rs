//! GPU launches at their edges, both found by the `schedule-native` fuzz target: a thread loop
//! over a matrix's nonzeros when the matrix has none (a block dimension of 0, which no launch
//! takes: the loop is guarded and the block keeps one thread), and a loop bound to a block
//! index beside work that writes global memory (every block along that index would redo it,
//! unordered: refused when the CUDA is written).

use sparsetir_eval::{eval_func, ArgValue};
use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};
use sparsetir_runtime::KernelCache;

use crate::common;
use common::{f32s, have_cc, i32s, int, Args};

fn cache() -> KernelCache {
    KernelCache::new(std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("launch-edges"))
}

/// fused_sddmm on `m` rows, all empty, `n` columns and `feat` features.
fn empty_sddmm_args(m: usize, n: usize, feat: usize) -> Args {
    let mut a = Args::new();
    for (p, v) in [("m", m), ("n", n), ("feat_size", feat), ("nnz", 0)] {
        a.insert(p.into(), int(v));
    }
    let dense = |rows: usize| {
        let v: Vec<f32> = (0..rows * feat).map(|i| (i % 5) as f32 - 2.0).collect();
        f32s(vec![rows, feat], v)
    };
    a.insert("a".into(), dense(m));
    a.insert("b".into(), dense(n));
    a.insert("x".into(), f32s(vec![0], Vec::new()));
    a.insert("y".into(), f32s(vec![0], Vec::new()));
    a.insert("indptr".into(), i32s(&vec![0; m + 1]));
    a.insert("indices".into(), i32s(&[]));
    a
}

#[test]
fn a_thread_loop_over_no_nonzeros_launches_and_does_nothing() {
    if !have_cc() {
        return;
    }
    let f = sparsetir_ops::load("fused_sddmm").expect("catalog");
    // The nonzeros over threadIdx.x: with no nonzero the block would have no thread.
    let sched = "# stage III\nb0 = sch.get_block(\"sddmm0\")\nl0, l1 = sch.get_loops(b0)\n\
                 sch.bind(l0, \"threadIdx.x\")\n";
    let k = GpuKernel::build(&f, Some(sched), &[], GpuDevice::Emulator, &cache())
        .unwrap_or_else(|e| panic!("build: {e}"));
    assert!(
        k.module().source.contains("< nnz)"),
        "the loop over the nonzeros is guarded:\n{}",
        k.module().source
    );
    let args = empty_sddmm_args(3, 4, 2);
    let mut want = args.clone();
    eval_func(&f, &mut want).expect("evaluator");
    let mut got = args.clone();
    k.run(&mut got).unwrap_or_else(|e| panic!("emulator: {e}"));
    for (name, v) in &want {
        assert_eq!(Some(v), got.get(name), "{name}");
    }
    // And with nonzeros, the guarded loop still covers them all.
    let mut args = empty_sddmm_args(2, 3, 2);
    args.insert("nnz".into(), int(3));
    args.insert("indptr".into(), i32s(&[0, 2, 3]));
    args.insert("indices".into(), i32s(&[0, 2, 1]));
    args.insert("x".into(), f32s(vec![3], vec![1.0, -2.0, 0.5]));
    args.insert("y".into(), f32s(vec![3], vec![9.0; 3]));
    let mut want = args.clone();
    eval_func(&f, &mut want).expect("evaluator");
    let mut got = args;
    k.run(&mut got).unwrap_or_else(|e| panic!("emulator: {e}"));
    let (Some(ArgValue::Array(w)), Some(ArgValue::Array(g))) = (want.get("y"), got.get("y")) else {
        panic!("y")
    };
    assert_eq!(w.to_f64_vec(), g.to_f64_vec());
    assert_ne!(w.to_f64_vec(), vec![9.0; 3], "the products were stored");
}

#[test]
fn a_block_index_beside_work_on_global_memory_is_refused() {
    let f = sparsetir_ops::load("sparse_softmax").expect("catalog");
    // The rows over blockIdx.x and the division of a row over blockIdx.y: each block along y
    // would compute the row's maximum and sum into global memory again.
    let sched = "# stage III\nb0 = sch.get_block(\"row_div0\")\nl0, = sch.get_loops(b0)\n\
                 sch.bind(l0, \"blockIdx.y\")\nb1 = sch.get_block(\"sparse_softmax0\")\n\
                 l1, = sch.get_loops(b1)\nsch.bind(l1, \"blockIdx.x\")\n";
    let e = match sparsetir_runtime::build::emit_cuda(&f, Some(sched), &[]) {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    };
    assert!(
        e.contains("block `row_max0_init` writes global memory beside loop")
            && e.contains("bound to `blockIdx.y`"),
        "{e}"
    );
    // The catalog's own GPU schedule keeps each row's work in one block.
    let own = sparsetir_ops::gpu_schedule("sparse_softmax");
    sparsetir_runtime::build::emit_cuda(&f, own, &[]).expect("the catalog schedule");
}
