//! Helpers of the tests of the 2:4 warpgroup kernels (`cuda_warpgroup.rs`,
//! `cuda_persistent.rs`): spmm_24 in 16-bit storage, its staged tiles and specialization, the
//! comparison with the reference, the Hopper GPU check and NVRTC's sm_90a compile.

use rand_chacha::ChaCha8Rng;
use sparsetir_eval::eval_func;
use sparsetir_ir::DType;
use sparsetir_ops::composable::SharedTiles;
use sparsetir_runtime::gpu::{GpuKernel, GpuRunStats};

use super::{assert_outputs_close_16, positions_i8, spmm_24_args, spmm_24_dense};

/// spmm_24 with 16-bit operands and int8 positions (as `bench --format 2:4(wgmma=...)` runs it).
pub fn kernel(dt: DType) -> sparsetir_ir::PrimFunc {
    let f = sparsetir_ops::load("spmm_24").expect("spmm_24");
    let f = sparsetir_transform::store_as(&f, &["A", "B"], dt).expect("store_as");
    sparsetir_transform::index_dtype(&f, "J", DType::I8).expect("index_dtype")
}

/// `ahead`: slices copied ahead (0: one slice, 1: double-buffered, 2 or 3).
pub fn tiles(rows: usize, cols: usize, row_tiles: usize, ahead: usize) -> SharedTiles {
    SharedTiles {
        warpgroup: true,
        ..SharedTiles::staged(rows, cols, row_tiles, ahead)
    }
}

/// The Hopper form of `rows` row warps of `h` row tiles, `ahead` slices copied ahead (products
/// in flight where `in_flight`), A by the copy engine (its positions packed where `packed`), a
/// producer warp, clusters of `cluster` blocks (along x, y), persistent where `persistent`.
pub fn hopper(
    rows: usize,
    h: usize,
    ahead: usize,
    (in_flight, packed, (cluster, cluster_y), persistent): (bool, bool, (usize, usize), bool),
) -> SharedTiles {
    let mut t = tiles(rows, 1, h, ahead);
    (t.stage_a, t.tma_a, t.packed_positions) = (true, true, packed);
    (t.in_flight, t.tma, t.cluster, t.cluster_y) = (in_flight, true, cluster, cluster_y);
    (t.release, t.producer, t.persistent) = (true, true, persistent);
    t
}

pub fn spec(m: usize, n: usize, feat: usize) -> Vec<(String, i64)> {
    vec![
        ("m".into(), m as i64),
        ("n".into(), n as i64),
        ("feat_size".into(), feat as i64),
    ]
}

/// Whether a GPU of compute capability 9.0 is present (the warpgroup kernels' real-GPU runs;
/// a note says why they are skipped on another GPU).
pub fn on_a_hopper_gpu() -> bool {
    if !super::have_gpu() {
        return false;
    }
    let ctx = sparsetir_cuda::Context::first_device().expect("a device");
    let hopper = ctx.arch().expect("its architecture").compute_capability() == (9, 0);
    if !hopper {
        eprintln!("note: skipping the warpgroup kernels: not a Hopper GPU");
    }
    hopper
}

/// Runs `k` on random `m x n` 2:4 operands at width `feat` and compares C (float16 rounding
/// tolerance) with the stage-I evaluator of `g` or, without `g` (`k` a kernel of `spmm_24`
/// itself), with the direct `f64` sums of `super::spmm_24_dense`, which
/// `spmm_24_dense_reference_equals_the_evaluator` ties to the evaluator: at these sizes the
/// evaluator took three quarters of this file's time. Returns what the run measured.
pub fn equals_the_reference(
    what: &str,
    g: Option<&sparsetir_ir::PrimFunc>,
    k: &GpuKernel,
    rng: &mut ChaCha8Rng,
    (m, n, feat): (usize, usize, usize),
    dt: DType,
) -> GpuRunStats {
    let args = positions_i8(spmm_24_args(rng, m, n, feat, dt));
    let want = match g {
        Some(g) => {
            let mut want = args.clone();
            eval_func(g, &mut want).unwrap_or_else(|e| panic!("{what}: evaluator: {e}"));
            want
        }
        None => spmm_24_dense(&args),
    };
    let mut got = args.clone();
    let stats = k.run(&mut got).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_outputs_close_16(what, &["c".to_string()], &got, &want, dt, 0.05);
    stats
}

/// Compiles `src` with NVRTC for `arch` (`sm_90a`, `sm_80`, ...), asserts that no kernel
/// spills, and returns the cubin's compile (its log and each kernel's resources) and the PTX;
/// `None` where NVRTC is not available.
pub fn compiled_without_spills(
    src: &str,
    arch: &str,
    what: &str,
) -> Option<(sparsetir_cuda::Compiled, String)> {
    let nvrtc = super::nvrtc()?;
    let arch = sparsetir_cuda::Arch::parse(arch).unwrap();
    let c = nvrtc
        .compile(src, "k.cu", &arch, sparsetir_cuda::Emit::Cubin, &[])
        .unwrap_or_else(|e| panic!("{what}: {e}\n{src}"));
    for r in &c.resources {
        assert_eq!(
            (r.spill_stores, r.spill_loads, r.stack_bytes),
            (0, 0, 0),
            "{what}: {r:?}"
        );
    }
    let ptx = nvrtc
        .compile(src, "k.cu", &arch, sparsetir_cuda::Emit::Ptx, &[])
        .expect("PTX");
    Some((c, String::from_utf8_lossy(&ptx.code).into_owned()))
}

/// The PTX of [`compiled_without_spills`] for sm_90a.
pub fn sm_90a_ptx_without_spills(src: &str, what: &str) -> Option<String> {
    compiled_without_spills(src, "sm_90a", what).map(|(_, ptx)| ptx)
}
