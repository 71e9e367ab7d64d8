//! Tensor cores without a GPU: BSR SpMM with 16 x 16 blocks (and 32 x 32 ones, 2 x 2 tiles each,
//! `bsrmm_tc32.sched`), float16 or bfloat16 operands and a
//! float32 output, scheduled by `schedules/gpu/bsrmm_tc.sched` (every block times a 16 x 8
//! slice of B one `mma.sync` m16n8k16), runs in the CPU emulation of its CUDA — the `mma`
//! computed from the warp's fragments in PTX's layouts — and equals the stage-I reference
//! evaluator on random block patterns (empty block rows, a single block, feature widths 8 to
//! 32); the source calls the `mma`, and its PTX (NVRTC, sm_80 and sm_90) holds
//! `mma.sync.aligned.m16n8k16` — also for TC-GNN's condensed tiles (`condense_spmm_tc`, checked
//! against the reference in `cli/tests/suite/bench_device.rs`).

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sparsetir_eval::{eval_func, ArgValue};
use sparsetir_formats::Tensor;
use sparsetir_ir::DType;
use sparsetir_runtime::build::emit_cuda;
use sparsetir_runtime::cache::KernelCache;
use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};

use crate::common;
use common::{assert_outputs_close_16, positions_i8, spmm_24_args, spmm_24_dense, Args};

fn schedule() -> &'static str {
    sparsetir_ops::gpu_schedule("bsrmm_tc").expect("the tensor-core schedule")
}

fn cache() -> KernelCache {
    KernelCache::new(std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda-tc"))
}

fn kernel(dt: DType) -> sparsetir_ir::PrimFunc {
    let f = sparsetir_ops::load("bsrmm").expect("bsrmm");
    sparsetir_transform::store_as(&f, &["A", "B"], dt).expect("store_as")
}

fn spec(feat: usize) -> Vec<(String, i64)> {
    spec_blk(16, feat)
}

fn spec_blk(blk: usize, feat: usize) -> Vec<(String, i64)> {
    vec![
        ("blk".into(), blk as i64),
        ("feat_size".into(), feat as i64),
    ]
}

/// A random BSR matrix of `nb` x `mb` blocks of 16 (block row 1 empty when there are more than
/// two), its arguments for a dense operand of `feat` columns.
fn bsr_args(
    rng: &mut ChaCha8Rng,
    (nb, mb, blk): (usize, usize, usize),
    feat: usize,
    dt: DType,
) -> Args {
    let (indptr, indices) = common::bsr_pattern(rng, nb, mb);
    let nnzb = indices.len();
    let vals: Vec<f64> = (0..nnzb * blk * blk)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    let b: Vec<f64> = (0..mb * blk * feat)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    let arr = |dt: DType, v: &[f64]| ArgValue::Array(Tensor::from_f64(dt, v).expect("tensor"));
    let int = |v: &[i64]| ArgValue::Array(Tensor::from_i64(DType::I32, v).expect("tensor"));
    let mut args = HashMap::new();
    args.insert("a".into(), arr(dt, &vals));
    args.insert("b".into(), arr(dt, &b));
    args.insert("c".into(), arr(DType::F32, &vec![7.0; nb * blk * feat]));
    args.insert("indptr".into(), int(&indptr));
    args.insert("indices".into(), int(&indices));
    args.insert("nb".into(), ArgValue::Int(nb as i64));
    args.insert("mb".into(), ArgValue::Int(mb as i64));
    args.insert("nnzb".into(), ArgValue::Int(nnzb as i64));
    args.insert("blk".into(), ArgValue::Int(blk as i64));
    args.insert("feat_size".into(), ArgValue::Int(feat as i64));
    args
}

#[test]
fn bsr16_and_bsr32_on_tensor_cores_equal_the_evaluator_in_the_emulator() {
    bsr_on_tensor_cores(GpuDevice::Emulator);
}

/// The same cases on a real GPU, where one is present (the hardware's fragment layouts).
#[test]
fn bsr16_and_bsr32_on_tensor_cores_on_a_real_gpu() {
    if common::have_gpu() {
        bsr_on_tensor_cores(GpuDevice::Cuda);
    }
}

fn bsr_on_tensor_cores(device: GpuDevice) {
    let mut rng = ChaCha8Rng::seed_from_u64(16);
    let tc32 = sparsetir_ops::gpu_schedule("bsrmm_tc32").expect("the 32 x 32 schedule");
    let tc2 = sparsetir_ops::gpu_schedule("bsrmm_tc2").expect("two tiles per warp");
    for dt in [DType::F16, DType::BF16] {
        let g = kernel(dt);
        for (nb, mb, blk, feat, two) in [
            (1, 1, 16, 8, false),
            (3, 4, 16, 16, false),
            (5, 3, 16, 32, false),
            (1, 1, 32, 8, false),
            (3, 2, 32, 16, false),
            // Two output tiles per warp (both fragments in registers across the block row).
            (1, 1, 16, 16, true),
            (4, 3, 16, 48, true),
        ] {
            let what = format!(
                "bsrmm {dt} on tensor cores, {nb}x{mb} blocks of {blk}, feat {feat}{}",
                if two { ", two tiles per warp" } else { "" }
            );
            let sched = match (blk, two) {
                (16, true) => tc2,
                (16, false) => schedule(),
                _ => tc32,
            };
            let k = GpuKernel::build(&g, Some(sched), &spec_blk(blk, feat), device, &cache())
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(
                k.module().source.contains(&format!(
                    "sptir_mma_m16n8k16_{}(",
                    if dt == DType::F16 { "f16" } else { "bf16" }
                )),
                "{what}: no mma call"
            );
            let args = bsr_args(&mut rng, (nb, mb, blk), feat, dt);
            let mut want = args.clone();
            eval_func(&g, &mut want).unwrap_or_else(|e| panic!("{what}: evaluator: {e}"));
            let mut got = args.clone();
            k.run(&mut got).unwrap_or_else(|e| panic!("{what}: {e}"));
            // float32 sums of exact products, in another order than the evaluator's.
            assert_outputs_close_16(&what, &["c".to_string()], &got, &want, DType::F16, 0.05);
        }
    }
}

#[test]
fn the_ptx_holds_the_mma_instruction() {
    let Some(nvrtc) = common::nvrtc() else {
        return;
    };
    let condense = sparsetir_ops::composable::condense_spmm().expect("condense_spmm");
    let condense_tc = sparsetir_ops::gpu_schedule("condense_spmm_tc").expect("schedule");
    let condense_spec: Vec<(String, i64)> =
        vec![("t".into(), 16), ("g".into(), 16), ("feat_size".into(), 32)];
    let mut builds = Vec::new();
    for (dt, ins) in [
        (
            DType::F16,
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
        ),
        (
            DType::BF16,
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
        ),
    ] {
        builds.push((kernel(dt), schedule(), spec(32), dt, ins.to_string()));
        let c = sparsetir_transform::store_as(&condense, &["A", "B"], dt).expect("store_as");
        builds.push((c, condense_tc, condense_spec.clone(), dt, ins.to_string()));
    }
    // 2:4 on sparse tensor cores (`mma.sp` m16n8k32).
    let sp_sched = sparsetir_ops::composable::spmm_24_tc_gpu_schedule(64, 2, 1);
    let sp_spec: Vec<(String, i64)> =
        vec![("m".into(), 32), ("n".into(), 64), ("feat_size".into(), 16)];
    // Four tiles per warp sharing each run's A fragment and metadata.
    let sp_tiles = sparsetir_ops::composable::spmm_24_tc_gpu_schedule(64, 2, 4);
    let tiles_spec: Vec<(String, i64)> =
        vec![("m".into(), 32), ("n".into(), 64), ("feat_size".into(), 64)];
    // B staged in shared memory, 4 row-tile warps of 8 tiles per block.
    let sp_smem = sparsetir_ops::composable::spmm_24_tc_smem_gpu_schedule(
        64,
        sparsetir_ops::composable::SharedTiles::staged(2, 1, 2, 1),
        8,
    );
    let smem_spec: Vec<(String, i64)> = vec![
        ("m".into(), 64),
        ("n".into(), 64),
        ("feat_size".into(), 128),
    ];
    for (dt, ty) in [(DType::F16, "f16"), (DType::BF16, "bf16")] {
        let ins = format!("mma.sp.sync.aligned.m16n8k32.row.col.f32.{ty}.{ty}.f32");
        builds.push((
            spmm24_kernel(dt),
            &sp_smem,
            smem_spec.clone(),
            dt,
            "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16".to_string(),
        ));
        builds.push((
            spmm24_kernel(dt),
            &sp_smem,
            smem_spec.clone(),
            dt,
            "cp.async.cg.shared.global".to_string(),
        ));
        builds.push((
            spmm24_kernel(dt),
            &sp_sched,
            sp_spec.clone(),
            dt,
            ins.clone(),
        ));
        builds.push((
            spmm24_kernel(dt),
            &sp_tiles,
            tiles_spec.clone(),
            dt,
            ins.clone(),
        ));
        builds.push((spmm24_kernel(dt), &sp_smem, smem_spec.clone(), dt, ins));
    }
    for (f, sched, spec, dt, ins) in builds {
        let (_, m) = emit_cuda(&f, Some(sched), &spec).expect("emit");
        for arch in ["sm_80", "sm_90"] {
            let arch = sparsetir_cuda::Arch::parse(arch).unwrap();
            let (ptx, _) = sparsetir_runtime::cuda_dev::compile_cached(
                &nvrtc,
                &m,
                &arch,
                sparsetir_cuda::Emit::Ptx,
                &cache(),
            )
            .unwrap_or_else(|e| panic!("{dt} for {arch}: {e}\n{}", m.source));
            let ptx = String::from_utf8_lossy(&ptx);
            assert!(ptx.contains(&ins), "{dt} {arch}: no `{ins}` in the PTX");
        }
    }
}

#[test]
fn bad_tensorized_nests_are_typed_errors() {
    let f = kernel(DType::F16);
    let tc = schedule();
    for (change, needle) in [
        // Tiles of 16 feature columns: the m16n8k16 nest needs 8.
        (tc.replace("[None, 8]", "[None, 16]"), "must run 0..8"),
        // The warp's lanes are threadIdx.x: no loop around the tile may take it.
        (
            tc.replace(
                "sch.bind(fo, \"threadIdx.y\")",
                "sch.bind(fo, \"threadIdx.x\")",
            ),
            "threadIdx.x",
        ),
    ] {
        assert_ne!(change, tc, "the schedule text changed");
        let e = emit_cuda(&f, Some(&change), &spec(32)).expect_err("refused");
        assert!(e.to_string().contains(needle), "{needle}: {e}");
    }
    // Fewer warps for the products than for the fill: the products' warp loop is guarded on
    // threadIdx.y, a condition every warp takes as one (a block row is one warp), so the `mma`
    // may sit under it, and the kernel still equals the evaluator.
    let fewer = tc.replace(
        "fo, fi = sch.split(f, [None, 8])\nsch.reorder(fo, j, bi, fi, bj)",
        "fo, fi = sch.split(f, [None, 8])\nfoo, fo = sch.split(fo, [None, 2])\nsch.reorder(foo, fo, j, bi, fi, bj)",
    );
    assert_ne!(fewer, tc, "the schedule text changed");
    let k = GpuKernel::build(&f, Some(&fewer), &spec(32), GpuDevice::Emulator, &cache())
        .expect("a warp-uniform guard around the mma");
    assert!(k.module().source.contains("if (f_0_1_1 < 0 + 2)"));
    let args = bsr_args(
        &mut ChaCha8Rng::seed_from_u64(17),
        (3, 4, 16),
        32,
        DType::F16,
    );
    let mut want = args.clone();
    eval_func(&f, &mut want).expect("evaluator");
    let mut got = args.clone();
    k.run(&mut got).expect("emulator");
    assert_outputs_close_16(
        "guarded warps",
        &["c".to_string()],
        &got,
        &want,
        DType::F16,
        0.05,
    );
    // 20 feature columns: the last tile of 8 is cut by a guard that moves with the tile's
    // columns, which a warp-wide `mma` cannot honour.
    let e = emit_cuda(&f, Some(tc), &spec(20)).expect_err("a partial tile refused");
    assert!(e.to_string().contains("in or out as a whole"), "{e}");
    // float32 operands: the tile product needs 16-bit ones.
    let f32k = sparsetir_ops::load("bsrmm").expect("bsrmm");
    let e = emit_cuda(&f32k, Some(tc), &spec(32)).expect_err("float32 refused");
    assert!(e.to_string().contains("float16 or"), "{e}");
}

/// A case of the 2:4 kernels with B staged in shared memory: its index, then (m, n, feat,
/// row-tile warps, column warps, tiles per warp, slices copied ahead, row tiles per warp).
type StagedCase = (
    usize,
    (usize, usize, usize, usize, usize, usize, usize, usize),
);

/// spmm_24 (`m x n`, 2:4) with 16-bit operands, scheduled for sparse tensor cores.
fn spmm24_kernel(dt: DType) -> sparsetir_ir::PrimFunc {
    let f = sparsetir_ops::load("spmm_24").expect("spmm_24");
    sparsetir_transform::store_as(&f, &["A", "B"], dt).expect("store_as")
}

/// spmm_24 with its positions stored as int8 (`index_dtype`, as `bench --format 2:4` runs it).
fn spmm24_kernel_i8(dt: DType) -> sparsetir_ir::PrimFunc {
    sparsetir_transform::index_dtype(&spmm24_kernel(dt), "J", DType::I8).expect("index_dtype")
}

#[test]
fn spmm_24_on_sparse_tensor_cores_equals_the_evaluator_in_the_emulator() {
    spmm_24_on_sparse_tensor_cores(GpuDevice::Emulator);
}

/// The same cases on a real GPU, where one is present (the hardware's metadata layout).
#[test]
fn spmm_24_on_sparse_tensor_cores_on_a_real_gpu() {
    if common::have_gpu() {
        spmm_24_on_sparse_tensor_cores(GpuDevice::Cuda);
    }
}

/// Two kept values of a group of four at the same position: PTX leaves that metadata
/// undefined. The arguments' validation refuses such positions before the launch, naming the
/// axis and the index; metadata a kernel derives itself (padding rows) is checked by the
/// emulator's `mma.sp`, which fails on an equal pair instead of summing the two values.
#[test]
fn equal_2of4_positions_are_refused_before_the_launch() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let (m, n, feat) = (16, 32, 8);
    let g = spmm24_kernel(DType::F16);
    let sched = sparsetir_ops::composable::spmm_24_tc_gpu_schedule(n, 1, 1);
    let spec = vec![
        ("m".to_string(), m as i64),
        ("n".to_string(), n as i64),
        ("feat_size".to_string(), feat as i64),
    ];
    let k =
        GpuKernel::build(&g, Some(&sched), &spec, GpuDevice::Emulator, &cache()).expect("kernel");
    let mut args = spmm_24_args(&mut rng, m, n, feat, DType::F16);
    let mut ok = args.clone();
    k.run(&mut ok).expect("distinct positions run");
    // Group 5's second position made equal to its first.
    let ArgValue::Array(t) = &args["indices"] else {
        panic!("indices")
    };
    let mut pos = t.to_i64_vec();
    pos[11] = pos[10];
    args.insert(
        "indices".into(),
        ArgValue::Array(Tensor::from_i64(DType::I32, &pos).expect("tensor")),
    );
    let err = k
        .run(&mut args)
        .expect_err("equal positions must not run")
        .to_string();
    assert!(
        err.contains("axis `J`")
            && err.contains("not strictly increasing")
            && err.contains("indices[11]"),
        "{err}"
    );
}

fn spmm_24_on_sparse_tensor_cores(device: GpuDevice) {
    let mut rng = ChaCha8Rng::seed_from_u64(24);
    for dt in [DType::F16, DType::BF16] {
        let g = spmm24_kernel(dt);
        // (m, n, feat, warps per block, tiles per warp)
        for (m, n, feat, warps, units) in [
            (16, 32, 8, 1, 1),
            (32, 64, 16, 2, 1),
            (48, 96, 16, 1, 1),
            (32, 64, 32, 2, 2),
            (16, 96, 64, 2, 4),
        ] {
            let what = format!(
                "spmm_24 {dt} on sparse tensor cores, {m}x{n}, feat {feat}, {warps} warps of \
                 {units} tiles"
            );
            let sched = sparsetir_ops::composable::spmm_24_tc_gpu_schedule(n, warps, units);
            let spec = vec![
                ("m".to_string(), m as i64),
                ("n".to_string(), n as i64),
                ("feat_size".to_string(), feat as i64),
            ];
            let k = GpuKernel::build(&g, Some(&sched), &spec, device, &cache())
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let suffix = if dt == DType::F16 { "f16" } else { "bf16" };
            assert!(
                k.module()
                    .source
                    .contains(&format!("sptir_mma_sp_m16n8k32_{suffix}(")),
                "{what}: no mma.sp call"
            );
            if units > 1 {
                // The tiles' accumulators in registers, one A fragment and metadata for all;
                // they start at zero (C was zeroed by the kernel before, and only the products
                // store into it), C read by no kernel but the check.
                let src = &k.module().source;
                assert!(
                    src.contains(&format!("float sptir_acc[{units}][4] = {{}};"))
                        && !src.contains("sptir_acc[0][0] = C_data["),
                    "{what}"
                );
                assert_eq!(src.matches("uint32_t sptir_a[4], sptir_e = 0u;").count(), 1);
                assert!(!src.contains("sptir_b[4], sptir_e"), "{what}");
            }
            let args = spmm_24_args(&mut rng, m, n, feat, dt);
            let mut want = args.clone();
            eval_func(&g, &mut want).unwrap_or_else(|e| panic!("{what}: evaluator: {e}"));
            let mut got = args.clone();
            k.run(&mut got).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_outputs_close_16(&what, &["c".to_string()], &got, &want, DType::F16, 0.05);
        }
        // B staged in shared memory: (m, n, feat, row-tile warps, column warps, tiles per
        // warp) — one and several runs of 32 columns, blocks of 1 to 8 row tiles and 1 or 2
        // column warps, 1 to 8 tiles; the positions int32 and int8 (one 8-byte load per lane
        // and row for its 8 positions).
        let g8 = spmm24_kernel_i8(dt);
        let cases: Vec<_> = [
            (16, 32, 8, 1, 1, 1, 0, 1),
            (64, 64, 32, 2, 1, 2, 0, 1),
            (64, 96, 64, 4, 1, 8, 0, 1),
            (128, 64, 64, 8, 1, 4, 0, 1),
            (32, 64, 64, 2, 2, 4, 0, 1),
            (64, 64, 128, 4, 2, 8, 0, 1),
            (16, 32, 8, 1, 1, 1, 1, 1),
            (64, 96, 64, 4, 1, 8, 1, 1),
            (32, 128, 64, 2, 2, 4, 1, 1),
            (64, 64, 128, 4, 2, 8, 1, 1),
            (64, 64, 64, 2, 1, 8, 0, 2),
            (128, 96, 128, 2, 2, 4, 1, 4),
            (64, 64, 64, 1, 2, 4, 1, 2),
            (64, 160, 64, 4, 1, 8, 2, 1),
            (32, 128, 64, 2, 2, 4, 3, 1),
        ]
        .into_iter()
        .enumerate()
        .collect();
        let build = |&(case, (m, n, feat, rows, cols, units, ahead, h)): &StagedCase| {
            let int8 = case % 2 == 1;
            let db = ahead > 0;
            let g = if int8 { &g8 } else { &g };
            let what = format!(
                "spmm_24 {dt}, B in shared memory, {m}x{n}, feat {feat}, {rows} x {cols} warps \
                 of {h} x {units} tiles, int8 positions: {int8}, slices copied ahead: {ahead}"
            );
            let tiles = sparsetir_ops::composable::SharedTiles::staged(rows, cols, h, ahead);
            let sched = sparsetir_ops::composable::spmm_24_tc_smem_gpu_schedule(n, tiles, units);
            let spec = vec![
                ("m".to_string(), m as i64),
                ("n".to_string(), n as i64),
                ("feat_size".to_string(), feat as i64),
            ];
            let k = GpuKernel::build(g, Some(&sched), &spec, device, &cache());
            (what, int8, db, k)
        };
        common::with_warming(
            &cases,
            |c| drop(build(c)),
            |c| {
                let (_, (m, n, feat, _, cols, units, ahead, h)) = *c;
                let (what, int8, db, k) = build(c);
                let k = k.unwrap_or_else(|e| panic!("{what}: {e}"));
                let src = &k.module().source;
                // The block's 32-row slice of B in shared memory (rows of 128 bytes padded by 16:
                // no bank holds a column), read by `ldmatrix`; the tiles' accumulators in
                // registers across the runs, one A fragment per run for all the tiles.
                let row = 8 * units * cols + if (units * cols) % 8 == 0 { 8 } else { 0 };
                assert!(
                    src.contains(&format!(
                        "SPTIR_SHARED(uint16_t, B_data_shared, {});",
                        32 * row * (ahead + 1)
                    )),
                    "{what}"
                );
                assert!(
                    src.contains("sptir_ldmatrix_x4_trans(sptir_b, B_data_shared + ")
                        || src.contains("sptir_ldmatrix_x4_trans(sptir_bs[0], B_data_shared + "),
                    "{what}"
                );
                assert!(
                    src.contains(&format!("float sptir_acc[{}][4] = {{}};", h * units))
                        || h * units == 1,
                    "{what}"
                );
                // Several row tiles per warp: each unit's B fragment read once for all of them.
                if h > 1 {
                    assert!(
                        src.contains(&format!("uint32_t sptir_bs[{units}][4];"))
                            && src.contains("const uint32_t* sptir_b = sptir_bs["),
                        "{what}"
                    );
                }
                // The copy: 16 bytes per thread and step, loaded and stored as one vector each —
                // or, double-buffered, one `cp.async` (the next run's, during this one's products).
                let copy = if db {
                    "sptir_cp_async16(B_data_shared + "
                } else {
                    "sptir_st8h(B_data_shared + "
                };
                assert!(
                    src.contains(copy) && src.contains("__syncthreads();"),
                    "{what}"
                );
                assert_eq!(src.contains("sptir_ld_oct(J_indices_data"), int8, "{what}");
                let mut args = spmm_24_args(&mut rng, m, n, feat, dt);
                if int8 {
                    args = positions_i8(args);
                }
                // (The direct sums, which `cuda_warpgroup.rs` ties to the evaluator: at these
                // sizes the evaluator took most of the test's time.)
                let want = spmm_24_dense(&args);
                let mut got = args.clone();
                k.run(&mut got).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_outputs_close_16(&what, &["c".to_string()], &got, &want, DType::F16, 0.05);
            },
        );
    }
}

/// The kernels' CUDA (the prelude left out), text in, text out: BSR-16 on tensor cores (the
/// fill, then the products with the accumulator fragment in registers across the block row and
/// no barrier) and 2:4 on sparse tensor cores (row tiles over `blockIdx.x`, the metadata packed
/// from the stored positions).
#[test]
fn snapshot_tensor_core_kernels() {
    let kernels =
        |source: &str| source[source.find("extern \"C\"").expect("a kernel")..].to_string();
    let (_, bsr) = emit_cuda(&kernel(DType::F16), Some(schedule()), &spec(16)).expect("emit");
    insta::assert_snapshot!("bsrmm_tc_f16", kernels(&bsr.source));
    // BSR-32: each 16-row half's fragment stays in registers across the whole block row (the
    // plain loop over the block's two 16-column steps inside it is no unit loop).
    let tc32 = sparsetir_ops::gpu_schedule("bsrmm_tc32").expect("the 32 x 32 schedule");
    let (_, b32) = emit_cuda(&kernel(DType::F16), Some(tc32), &spec_blk(32, 32)).expect("emit");
    assert!(b32
        .source
        .contains("const bool sptir_acc_live = 0 < j_1_ext;"));
    // Two tiles per warp: two fragments kept in registers, the unrolled loop picking one.
    let tc2 = sparsetir_ops::gpu_schedule("bsrmm_tc2").expect("two tiles per warp");
    let (_, two) = emit_cuda(&kernel(DType::F16), Some(tc2), &spec(32)).expect("emit");
    assert!(two.source.contains("float sptir_acc[2][4];"));
    assert!(two
        .source
        .contains("sptir_mma_m16n8k16_f16(sptir_acc[f_1_2]"));
    insta::assert_snapshot!("bsrmm_tc2_f16", kernels(&two.source));
    let sched = sparsetir_ops::composable::spmm_24_tc_gpu_schedule(64, 2, 1);
    let spec24: Vec<(String, i64)> =
        vec![("m".into(), 32), ("n".into(), 64), ("feat_size".into(), 16)];
    let (_, sp) = emit_cuda(&spmm24_kernel(DType::F16), Some(&sched), &spec24).expect("emit");
    insta::assert_snapshot!("spmm_24_tc_f16", kernels(&sp.source));
    // B staged in shared memory, double-buffered (`cp.async` of the next run's slice before
    // this run's products), two row tiles per warp (each unit's B fragment read once by
    // `ldmatrix` for both), int8 positions (one 8-byte load per lane and row).
    let staged = sparsetir_ops::composable::spmm_24_tc_smem_gpu_schedule(
        64,
        sparsetir_ops::composable::SharedTiles::staged(2, 1, 2, 1),
        2,
    );
    let spec64: Vec<(String, i64)> =
        vec![("m".into(), 64), ("n".into(), 64), ("feat_size".into(), 16)];
    let (_, st) = emit_cuda(&spmm24_kernel_i8(DType::F16), Some(&staged), &spec64).expect("emit");
    insta::assert_snapshot!("spmm_24_tc_dbuf_f16", kernels(&st.source));
}

/// bsrmm with `dt` operands under CPU schedule `sched` (`feat` columns), built by the C backend
/// and run on a random BSR matrix of `nb x mb` blocks of 16 (a block row empty), equals the
/// evaluator; returns the C source.
fn c_bsrmm_equals_the_evaluator(
    what: &str,
    sched: &str,
    dt: DType,
    feat: usize,
    (nb, mb, seed): (usize, usize, u64),
) -> String {
    let f = kernel(dt);
    let k = sparsetir_runtime::build::build(&f, Some(sched), &spec(feat), &common::opts(what))
        .unwrap_or_else(|e| panic!("{what} {dt}: {e}"));
    let args = bsr_args(&mut ChaCha8Rng::seed_from_u64(seed), (nb, mb, 16), feat, dt);
    let mut want = args.clone();
    eval_func(&f, &mut want).expect("evaluator");
    let mut got = args;
    k.run(&mut got).expect("runs");
    assert_outputs_close_16(what, &["c".to_string()], &got, &want, dt, 0.05);
    k.source().to_string()
}

/// The tensor-core schedule without its thread bindings, on the C backend: the tensorized
/// nests (`sch.tensorize`) run as the loops they are, and equal the evaluator.
#[test]
fn tensorized_nests_run_as_loops_on_the_cpu() {
    if !common::have_cc() {
        return;
    }
    let cpu: String = schedule()
        .lines()
        .filter(|l| !l.starts_with("sch.bind("))
        .map(|l| format!("{l}\n"))
        .collect();
    assert!(cpu.contains("sch.tensorize("), "{cpu}");
    c_bsrmm_equals_the_evaluator("tc-cpu", &cpu, DType::F16, 24, (4, 3, 29));
}

/// BSR SpMM with 16-bit operands under its CPU schedule (`bsr_spmm_half.sched`: each block's
/// rows of B widened to float32 once), on the C backend, equals the evaluator, empty block
/// rows included.
#[test]
fn sixteen_bit_bsr_spmm_widens_b_per_block_on_the_cpu() {
    // The schedules widen only tiles that the C writer keeps on the stack.
    assert_eq!(
        sparsetir_ops::composable::WIDENED_TILE_MAX as i64,
        sparsetir_codegen::c::STACK_LIMIT
    );
    if !common::have_cc() {
        return;
    }
    for dt in [DType::F16, DType::BF16] {
        let sched = sparsetir_ops::composable::BSR_SPMM_HALF_SCHEDULE;
        let src = c_bsrmm_equals_the_evaluator("bsr-half", sched, dt, 40, (5, 4, 31));
        assert!(src.contains("float B_data_local["), "{src}");
    }
}
