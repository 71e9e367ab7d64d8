//! Hopper's warpgroup sparse tensor cores without a GPU: spmm_24 scheduled by
//! `schedules/gpu/spmm_24_tc_wgmma.sched` (each 4 row warps issue their products of a run as one
//! `wgmma.mma_async.sp` m64nNk32 reading B's slice from shared memory through a descriptor)
//! runs in the CPU emulation of its CUDA and equals the stage-I reference evaluator, for
//! float16 and bfloat16, one or two warpgroups, several column warps and row tiles, single and
//! double buffers (A's fragments then read one run ahead, or staged in shared memory with the
//! slices: `stage_a`), N from 8 to 256; the source lays the
//! window out in core matrices and fences before its barriers; NVRTC compiles it for sm_90a (the PTX holds the instruction, without
//! spills at m64n256k32) and refuses it elsewhere with the reason; schedules that cannot be
//! written as warpgroup products are typed errors; the accumulators start at zero after
//! spmm_24's zero fill, and are loaded after a fill of ones.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use sparsetir_eval::eval_func;
use sparsetir_ir::DType;
use sparsetir_ops::composable::{spmm_24_tc_smem_gpu_schedule, SharedTiles};
use sparsetir_runtime::build::emit_cuda;
use sparsetir_runtime::cache::KernelCache;
use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};

mod common;
use common::warpgroup::{
    compiled_without_spills, equals_the_reference, kernel, on_a_hopper_gpu,
    sm_90a_ptx_without_spills, spec, tiles,
};
use common::{assert_outputs_close_16, positions_i8, spmm_24_args, spmm_24_dense};

fn cache() -> KernelCache {
    KernelCache::new(std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda-wg"))
}

/// The direct sums of `common::spmm_24_dense` equal the stage-I evaluator's `spmm_24` (both
/// 16-bit types; the evaluator accumulates in `float32`, hence a hundredth of a 16-bit ulp), so
/// that the emulator tests checked against them are checked against the evaluator.
#[test]
fn spmm_24_dense_reference_equals_the_evaluator() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    for (dt, m, n, feat) in [(DType::F16, 32, 64, 24), (DType::BF16, 48, 32, 16)] {
        let args = positions_i8(spmm_24_args(&mut rng, m, n, feat, dt));
        let dense = spmm_24_dense(&args);
        let mut want = args.clone();
        eval_func(&kernel(dt), &mut want).expect("evaluator");
        assert_outputs_close_16(
            "dense reference",
            &["c".to_string()],
            &dense,
            &want,
            dt,
            0.01,
        );
    }
}

#[test]
fn spmm_24_warpgroup_products_equal_the_evaluator_in_the_emulator() {
    spmm_24_warpgroup(GpuDevice::Emulator);
}

/// The same cases on a real GPU of compute capability 9.0, where one is present.
#[test]
fn spmm_24_warpgroup_products_on_a_real_gpu() {
    if !on_a_hopper_gpu() {
        return;
    }
    spmm_24_warpgroup(GpuDevice::Cuda);
}

fn spmm_24_warpgroup(device: GpuDevice) {
    let mut rng = ChaCha8Rng::seed_from_u64(90);
    // (dtype, m, n, feat, row warps, column warps, row tiles, units, slices copied ahead)
    for (dt, m, n, feat, rows, cols, h, units, ahead) in [
        (DType::F16, 64, 64, 64, 4, 1, 1, 8, 0),
        (DType::F16, 128, 96, 16, 4, 2, 2, 1, 1),
        (DType::BF16, 128, 64, 128, 8, 1, 1, 16, 1),
        (DType::F16, 64, 32, 256, 4, 1, 1, 32, 0),
        (DType::BF16, 128, 128, 64, 4, 2, 1, 4, 0),
        (DType::F16, 256, 64, 128, 8, 1, 2, 8, 1),
        (DType::F16, 128, 160, 64, 8, 1, 1, 8, 2),
        (DType::BF16, 128, 96, 32, 4, 1, 2, 4, 3),
    ] {
        let what = format!(
            "spmm_24 {dt} {m}x{n}, feat {feat}, {rows} x {cols} warps of {h} x {units} tiles, \
             slices copied ahead: {ahead}"
        );
        let db = ahead > 0;
        let g = kernel(dt);
        let sched = spmm_24_tc_smem_gpu_schedule(n, tiles(rows, cols, h, ahead), units);
        let k = GpuKernel::build(&g, Some(&sched), &spec(m, n, feat), device, &cache())
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let src = &k.module().source;
        let ty = if dt == DType::BF16 { "bf16" } else { "f16" };
        // One warpgroup instruction per row tile and run, N = 8 units; the slice's window in
        // core matrices (no padding), fenced for the async proxy before each barrier.
        let ins = format!(
            "wgmma.mma_async.sp.sync.aligned.m64n{}k32.f32.{ty}.{ty}",
            8 * units
        );
        assert!(src.contains(&ins), "{what}");
        assert!(
            src.contains(&format!(
                "sptir_wgmma_sp_m64n{}k32_{ty}(sptir_acc",
                8 * units
            )),
            "{what}"
        );
        // One slice per run in flight and the current one; each run waits for its own copy.
        let window = 32 * 8 * units * cols * (ahead + 1);
        assert!(
            src.contains(&format!("SPTIR_SHARED(uint16_t, B_data_shared, {window});")),
            "{what}"
        );
        assert!(
            src.contains("sptir_fence_proxy_async();\n")
                && !src.contains("sptir_ldmatrix_x4_trans(sptir_b"),
            "{what}"
        );
        assert!(k.module().arch_specific, "{what}");
        // Double-buffered: one barrier per run, after the wait for this run's copy (all but
        // the `ahead - 1` newest groups).
        assert_eq!(
            db && src.contains(&format!("sptir_cp_async_wait<{}>();", ahead.max(1) - 1)),
            db,
            "{what}"
        );
        // Double-buffered: A's fragments and metadata read one run ahead into registers.
        assert_eq!(
            src.contains(&format!("uint32_t sptir_an[{h}][4], sptir_en[{h}];")),
            db,
            "{what}"
        );
        equals_the_reference(&what, None, &k, &mut rng, (m, n, feat), dt);
    }
}

/// `2:4(wgdbuf=...,a=smem)`: A's values and positions copied into shared memory with B's
/// slices (`cp.async`, A runs ahead) and read from there (`ldmatrix`), in the emulator.
#[test]
fn spmm_24_with_a_staged_equals_the_evaluator_in_the_emulator() {
    spmm_24_staged(GpuDevice::Emulator);
}

/// The same on a real Hopper GPU, where one is present.
#[test]
fn spmm_24_with_a_staged_on_a_real_gpu() {
    if !on_a_hopper_gpu() {
        return;
    }
    spmm_24_staged(GpuDevice::Cuda);
}

fn spmm_24_staged(device: GpuDevice) {
    let mut rng = ChaCha8Rng::seed_from_u64(91);
    // (warpgroup, dtype, m, n, feat, row warps, column warps, row tiles, units, slices copied
    // ahead): one and two warpgroups, column warps reading the tiles their first warp copied,
    // two row tiles per warp, one to three slices ahead; per-warp `mma.sp` products alike.
    for (wg, dt, m, n, feat, rows, cols, h, units, ahead) in [
        (true, DType::F16, 128, 64, 256, 8, 1, 1, 32, 1),
        (true, DType::BF16, 128, 96, 64, 4, 2, 2, 4, 1),
        (true, DType::F16, 64, 160, 64, 4, 1, 1, 8, 2),
        (true, DType::F16, 256, 64, 32, 4, 1, 2, 4, 3),
        (true, DType::BF16, 256, 128, 128, 8, 2, 2, 8, 1),
        // Past the 48 KiB a block may declare statically: dynamic shared memory (88 KiB, and
        // 60 KiB).
        (true, DType::F16, 128, 64, 256, 8, 1, 1, 32, 3),
        (true, DType::BF16, 256, 128, 128, 8, 2, 2, 8, 2),
        (false, DType::F16, 128, 64, 64, 4, 2, 2, 4, 1),
        (false, DType::BF16, 64, 96, 32, 2, 2, 2, 2, 3),
    ] {
        let what = format!(
            "spmm_24 {dt} {m}x{n}, feat {feat}, {rows} x {cols} warps of {h} x {units} tiles, \
             A staged, slices copied ahead: {ahead}, warpgroup: {wg}"
        );
        let g = kernel(dt);
        let mut t = tiles(rows, cols, h, ahead);
        t.stage_a = true;
        t.warpgroup = wg;
        let sched = spmm_24_tc_smem_gpu_schedule(n, t, units);
        let k = GpuKernel::build(&g, Some(&sched), &spec(m, n, feat), device, &cache())
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let src = &k.module().source;
        // One tile of 256 values and 256 positions per row-tile warp, row tile and stage; B's
        // slices 32 rows of the block's columns each.
        let stage = (ahead + 1) * rows * h * 256;
        let kernel = k.module().kernels.last().expect("the product kernel");
        // B's slices (rows padded for the per-warp `ldmatrix`) first, then the stages of A.
        let b_bytes = kernel.shared_bytes as usize - 3 * stage;
        assert!(b_bytes >= 2 * (ahead + 1) * 32 * 8 * units * cols, "{what}");
        let dynamic = kernel.shared_bytes > 48 * 1024;
        assert_eq!(kernel.dynamic_shared_bytes > 0, dynamic, "{what}");
        let decl = if dynamic {
            "SPTIR_SHARED_DYN"
        } else {
            "SPTIR_SHARED"
        };
        let end = |off: usize| {
            if dynamic {
                format!(", {off});")
            } else {
                ");".to_string()
            }
        };
        for needle in [
            format!("{decl}(uint16_t, sptir_as, {stage}{}", end(b_bytes)),
            format!(
                "{decl}(int8_t, sptir_es, {stage}{}",
                end(b_bytes + 2 * stage)
            ),
            "sptir_cp_async16(sptir_as + ".to_string(),
            "sptir_ldmatrix_x4(sptir_a, sptir_as + ".to_string(),
            "sptir_lds_oct(sptir_es + ".to_string(),
        ] {
            assert!(src.contains(&needle), "{what}: no `{needle}`");
        }
        // Not read from global memory into registers any more, and the column warps copy
        // nothing of A.
        assert!(
            !src.contains("sptir_ld_pair(A_data") && !src.contains("sptir_an["),
            "{what}"
        );
        assert_eq!(src.contains("if (f_1_2 == 0) {"), cols > 1, "{what}");
        equals_the_reference(&what, None, &k, &mut rng, (m, n, feat), dt);
    }
}

/// `2:4(wgdbuf=...,inflight=1)`: each warpgroup product kept in flight over the next run
/// (`wgmma.wait_group 1`, one more slice and stage of A), in the emulator, which runs a product
/// only at its wait and reports a copy into a slice a product in flight still reads.
#[test]
fn warpgroup_products_kept_in_flight_equal_the_evaluator_in_the_emulator() {
    spmm_24_in_flight(GpuDevice::Emulator);
}

/// The same on a real Hopper GPU, where one is present.
#[test]
fn warpgroup_products_kept_in_flight_on_a_real_gpu() {
    if !on_a_hopper_gpu() {
        return;
    }
    spmm_24_in_flight(GpuDevice::Cuda);
}

fn spmm_24_in_flight(device: GpuDevice) {
    let mut rng = ChaCha8Rng::seed_from_u64(92);
    // (A staged, dtype, m, n, feat, row warps, column warps, row tiles, units, slices copied
    // ahead): one and two warpgroups, two row tiles (two products a run), column warps, one to
    // three slices ahead, A staged or read into registers one run ahead; an odd number of runs
    // (the loop is unrolled by two) and a single run.
    for (staged, dt, m, n, feat, rows, cols, h, units, ahead) in [
        (true, DType::F16, 128, 96, 256, 8, 1, 1, 32, 3),
        (true, DType::BF16, 256, 64, 64, 4, 2, 2, 4, 1),
        (false, DType::F16, 128, 160, 64, 8, 1, 1, 8, 2),
        (false, DType::BF16, 128, 32, 32, 4, 1, 2, 4, 1),
        (true, DType::F16, 64, 32, 128, 4, 1, 1, 16, 2),
    ] {
        let what = format!(
            "spmm_24 {dt} {m}x{n}, feat {feat}, {rows} x {cols} warps of {h} x {units} tiles, \
             slices copied ahead: {ahead}, A staged: {staged}, products in flight"
        );
        let g = kernel(dt);
        let mut t = tiles(rows, cols, h, ahead);
        t.stage_a = staged;
        t.in_flight = true;
        let sched = spmm_24_tc_smem_gpu_schedule(n, t, units);
        let k = GpuKernel::build(&g, Some(&sched), &spec(m, n, feat), device, &cache())
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let src = &k.module().source;
        let ty = if dt == DType::BF16 { "bf16" } else { "f16" };
        let w = 8 * units;
        for needle in [
            format!("sptir_wgmma_sp_m64n{w}k32_{ty}_async(sptir_acc"),
            format!("sptir_wgmma_wait_n{w}<1>(sptir_acc"),
            format!("sptir_wgmma_wait_n{w}<0>(sptir_acc"),
            "#pragma unroll 2\n".to_string(),
            format!("sptir_cp_async_wait<{}>();", ahead - 1),
            // The accumulators stored as 8-byte pairs.
            "sptir_st2(C_data + ".to_string(),
        ] {
            assert!(src.contains(&needle), "{what}: no `{needle}`");
        }
        // `ahead + 2` slices of B: the one used, the `ahead` being copied, the one a product
        // in flight may still read.
        let window = 32 * w * cols * (ahead + 2);
        assert!(
            src.contains(&format!("B_data_shared, {window}")),
            "{what}: {window}"
        );
        // The products are all waited for before the stores: one wait per row tile.
        assert_eq!(src.matches("<0>(sptir_acc").count(), h, "{what}");
        equals_the_reference(&what, None, &k, &mut rng, (m, n, feat), dt);
    }
}

/// ptxas keeps the products in flight (no "wgmma serialized" warning: the A fragments of
/// consecutive runs are distinct registers, nothing else writes the accumulators between a
/// product and its wait), without spills; the PTX waits with `wgmma.wait_group 1`.
#[test]
fn products_kept_in_flight_are_not_serialized_by_ptxas() {
    if common::nvrtc().is_none() {
        return;
    }
    for (staged, units, ahead) in [(true, 32, 3), (false, 32, 2), (true, 16, 1)] {
        let mut t = tiles(8, 1, 1, ahead);
        t.stage_a = staged;
        t.in_flight = true;
        let sched = spmm_24_tc_smem_gpu_schedule(64, t, units);
        let (_, m) =
            emit_cuda(&kernel(DType::F16), Some(&sched), &spec(128, 64, 8 * units)).expect("emit");
        let what = format!("units {units}, ahead {ahead}, A staged: {staged}");
        let (c, ptx) = compiled_without_spills(&m.source, "sm_90a", &what).expect("NVRTC");
        assert!(
            !c.log.contains("serialized"),
            "{what}: ptxas serialized the products:\n{}",
            c.log
        );
        assert!(ptx.contains("wgmma.wait_group.sync.aligned 1;"), "{what}");
    }
}

/// `wgmma_in_flight` on a loop without a pipeline or without warpgroup products, or with
/// another value: typed errors.
#[test]
fn products_in_flight_need_a_pipelined_warpgroup_run_loop() {
    let g = kernel(DType::F16);
    let s = spec(64, 64, 64);
    let single = spmm_24_tc_smem_gpu_schedule(64, tiles(4, 1, 1, 0), 8)
        + "sch.annotate(gko, \"wgmma_in_flight\", 1)\n";
    let mut per_warp = tiles(4, 1, 1, 1);
    per_warp.warpgroup = false;
    let per_warp = spmm_24_tc_smem_gpu_schedule(64, per_warp, 8)
        + "sch.annotate(gko, \"wgmma_in_flight\", 1)\n";
    let two = spmm_24_tc_smem_gpu_schedule(64, tiles(4, 1, 1, 1), 8)
        + "sch.annotate(gko, \"wgmma_in_flight\", 2)\n";
    for (sched, needle) in [
        (single, "multi-buffered run loop"),
        (per_warp, "holds no warpgroup product"),
        (two, "its value is 1"),
    ] {
        let e = emit_cuda(&g, Some(&sched), &s).expect_err("refused");
        assert!(e.to_string().contains(needle), "{needle}: {e}");
    }
}

/// `stage_a` where the loop is not the pipelined run loop of 2:4 products: typed errors.
#[test]
fn staging_a_needs_a_pipelined_run_loop() {
    let g = kernel(DType::F16);
    let s = spec(64, 64, 64);
    // One slice (no pipeline), and the annotation on the warp loop.
    let single = spmm_24_tc_smem_gpu_schedule(64, tiles(4, 1, 1, 0), 8)
        + "sch.annotate(gko, \"stage_a\", 1)\n";
    let on_warps = spmm_24_tc_smem_gpu_schedule(64, tiles(4, 1, 1, 1), 8)
        + "sch.annotate(gw, \"stage_a\", 1)\n";
    for (sched, needle) in [
        (single, "double-buffered run loop"),
        (on_warps, "bound to a thread index"),
    ] {
        let e = emit_cuda(&g, Some(&sched), &s).expect_err("refused");
        assert!(e.to_string().contains(needle), "{needle}: {e}");
    }
}

/// Per-warp `mma.sp` products with A staged compile for sm_80 without spills; the PTX reads A
/// with `ldmatrix` (no transpose) and copies it with `cp.async`.
#[test]
fn per_warp_products_with_a_staged_compile_for_sm_80() {
    if common::nvrtc().is_none() {
        return;
    }
    let mut t = tiles(4, 2, 2, 2);
    t.warpgroup = false;
    t.stage_a = true;
    let sched = spmm_24_tc_smem_gpu_schedule(64, t, 8);
    let (_, m) = emit_cuda(&kernel(DType::F16), Some(&sched), &spec(128, 64, 128)).expect("emit");
    assert!(!m.arch_specific);
    let (_, ptx) = compiled_without_spills(&m.source, "sm_80", "per-warp form").expect("NVRTC");
    for ins in [
        "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
        "cp.async.cg.shared.global",
        "mma.sp.sync.aligned.m16n8k32",
    ] {
        assert!(ptx.contains(ins), "no `{ins}` in the PTX");
    }
}

#[test]
fn warpgroup_kernels_compile_for_sm_90a_only() {
    let Some(nvrtc) = common::nvrtc() else {
        return;
    };
    // (16 KiB slices at 32 units: three of them, 48 KiB, with two copied ahead.)
    // (The last two with A staged in shared memory: 44 KiB with two slices, 88 KiB of dynamic
    // shared memory with four.)
    for (dt, ty, units, ahead, staged) in [
        (DType::F16, "f16", 32, 1, false),
        (DType::BF16, "bf16", 8, 1, false),
        (DType::F16, "f16", 32, 2, false),
        (DType::F16, "f16", 32, 1, true),
        (DType::F16, "f16", 32, 3, true),
    ] {
        let mut t = tiles(8, 1, 1, ahead);
        t.stage_a = staged;
        let sched = spmm_24_tc_smem_gpu_schedule(64, t, units);
        let (_, m) = emit_cuda(&kernel(dt), Some(&sched), &spec(128, 64, 8 * units)).expect("emit");
        // 128 accumulators per thread at m64n256k32, all in registers (no spills); past
        // 48 KiB, no static shared memory.
        let (c, ptx) =
            compiled_without_spills(&m.source, "sm_90a", &dt.to_string()).expect("NVRTC");
        let product = m.kernels.last().expect("the product kernel");
        let dynamic = product.dynamic_shared_bytes > 0;
        assert_eq!(dynamic, ahead == 3, "{dt}");
        assert!(c.resources.iter().any(|r| r.kernel == product.name), "{dt}");
        for r in &c.resources {
            if dynamic && r.kernel == product.name {
                assert_eq!(r.shared_bytes, 0, "{dt}: {r:?}");
            }
        }
        let ins = format!(
            "wgmma.mma_async.sp.sync.aligned.m64n{}k32.f32.{ty}.{ty}",
            8 * units
        );
        assert!(ptx.contains(&ins), "{dt}: no `{ins}` in the PTX");
        // A staged: copied without registers, read as four 8 x 8 matrices.
        assert_eq!(
            ptx.contains("ldmatrix.sync.aligned.m8n8.x4.shared.b16"),
            staged,
            "{dt}"
        );
        assert!(ptx.contains("fence.proxy.async.shared::cta"), "{dt}");
        // Without the architecture-specific target: the module says why.
        let a90 = sparsetir_cuda::Arch::parse("sm_90").unwrap();
        let e = nvrtc
            .compile(&m.source, "wg.cu", &a90, sparsetir_cuda::Emit::Ptx, &[])
            .expect_err("sm_90 refused");
        assert!(e.to_string().contains("compile it for sm_90a"), "{e}");
    }
}

#[test]
fn schedules_that_are_not_warpgroup_products_are_typed_errors() {
    let g = kernel(DType::F16);
    let wg = spmm_24_tc_smem_gpu_schedule(64, tiles(4, 1, 1, 0), 8);
    let s = spec(64, 64, 64);
    emit_cuda(&g, Some(&wg), &s).expect("the schedule itself is written");
    for (change, needle) in [
        // Two row warps: not a warpgroup.
        (
            wg.replace("[None, 4, 1, 16, 16]", "[None, 2, 1, 16, 16]")
                .replace("[None, 1, 4, 32]", "[None, 1, 2, 32]"),
            "4 consecutive warps",
        ),
        // The slice read straight from global memory: no window for a descriptor.
        (
            wg.replace("bs = sch.cache_read(b0, 1, \"shared\")", "")
                .replace("sch.compute_at(bs, gko)", "")
                .lines()
                .take_while(|l| !l.starts_with("sbx,"))
                .collect::<Vec<_>>()
                .join("\n"),
            "shared window",
        ),
    ] {
        assert_ne!(change, wg, "the schedule text changed");
        let e = emit_cuda(&g, Some(&change), &s).expect_err("refused");
        assert!(e.to_string().contains(needle), "{needle}: {e}");
    }
}

/// The warpgroup kernel's CUDA (the prelude left out), text in, text out.
#[test]
fn snapshot_warpgroup_kernel() {
    let sched = spmm_24_tc_smem_gpu_schedule(64, tiles(4, 1, 1, 1), 2);
    let (_, m) = emit_cuda(&kernel(DType::F16), Some(&sched), &spec(64, 64, 16)).expect("emit");
    let src = &m.source;
    insta::assert_snapshot!(
        "spmm_24_wgmma_dbuf_f16",
        &src[src.find("extern \"C\"").expect("a kernel")..]
    );
}

/// Accumulators start at zero only where the tiles are a zero fill's, and the fill is then left
/// out: spmm_24 whose first iteration stores 1 instead of 0 keeps it and loads its tiles (and
/// adds the product to the ones), and both equal the evaluator.
#[test]
fn accumulators_start_at_zero_only_after_a_zero_fill() {
    let src = sparsetir_ops::get("spmm_24").expect("spmm_24").source;
    let ones = src.replace("C[i, f] = T.float32(0)", "C[i, f] = T.float32(1)");
    assert_ne!(ones, src, "the fill changed");
    let load = |text: &str| {
        let f = sparsetir_syntax::parse_module(text)
            .expect("parse")
            .funcs
            .remove(0);
        let f = sparsetir_transform::store_as(&f, &["A", "B"], DType::F16).expect("store_as");
        sparsetir_transform::index_dtype(&f, "J", DType::I8).expect("index_dtype")
    };
    let sched = spmm_24_tc_smem_gpu_schedule(64, tiles(4, 1, 1, 1), 4);
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for (text, zero) in [(src, true), (ones.as_str(), false)] {
        let g = load(text);
        let k = GpuKernel::build(
            &g,
            Some(&sched),
            &spec(64, 64, 32),
            GpuDevice::Emulator,
            &cache(),
        )
        .expect("build");
        let source = &k.module().source;
        assert_eq!(source.contains("float sptir_acc[4][4] = {};"), zero);
        assert_eq!(source.contains("sptir_acc[0][0] = C_data["), !zero);
        // The zero fill is dead where the products overwrite all of C without reading it (C
        // starts at 7 in the arguments: an element left out would show).
        let kernels = k.module().kernels.len();
        assert_eq!(kernels, if zero { 1 } else { 2 });
        equals_the_reference("fill", Some(&g), &k, &mut rng, (64, 64, 32), DType::F16);
    }
}

/// B's slices by the tensor copy engine (`tma=1`): the kernel takes a tensor map of B (a
/// `[feat, n]` view, boxes of 64 columns × 32 rows, 128-byte swizzled) after its other
/// arguments, one thread announces and copies each slice's boxes on its stage's mbarrier, every
/// thread waits for its run's phase, and the products read the swizzled window through the
/// `_sw128` descriptor; NVRTC compiles it for sm_90a without spills, the PTX holding the bulk
/// tensor copy and the barrier wait.
#[test]
fn tma_slices_compile_for_sm_90a() {
    for (staged, in_flight, units, ahead, rows_h) in [
        (true, true, 32, 3, 1),
        (false, false, 16, 2, 2),
        (true, false, 8, 1, 1),
    ] {
        let mut t = tiles(8, 1, rows_h, ahead);
        t.stage_a = staged;
        t.in_flight = in_flight;
        t.tma = true;
        let sched = spmm_24_tc_smem_gpu_schedule(64, t, units);
        let feat = 8 * units;
        let (_, m) = emit_cuda(&kernel(DType::F16), Some(&sched), &spec(256, 64, feat))
            .unwrap_or_else(|e| panic!("units {units}: {e}"));
        let what =
            format!("units {units}, ahead {ahead}, A staged: {staged}, in flight: {in_flight}");
        let k = m
            .kernels
            .iter()
            .find(|k| k.args.iter().any(|a| a.tensor_map.is_some()))
            .unwrap_or_else(|| panic!("{what}: no kernel takes a tensor map"));
        let a = k.args.last().expect("arguments");
        let map = a.tensor_map.as_ref().expect("the tensor map comes last");
        assert_eq!(a.name, "B_data_tmap", "{what}");
        assert_eq!(map.box_dims, [64, 32], "{what}");
        assert_eq!(map.swizzle, 128, "{what}");
        let value = |i: usize| match m.params[i].name.as_str() {
            "m" => Some(256),
            "n" => Some(64),
            "feat_size" => Some(feat as i64),
            _ => None,
        };
        let dims: Vec<Option<i64>> = map.dims.iter().map(|d| d.eval(&value)).collect();
        assert_eq!(dims, vec![Some(feat as i64), Some(64)], "{what}");
        assert_eq!(m.params[a.param].name, "b", "{what}");
        let src = &m.source;
        let w = 8 * units;
        for needle in [
            "SPTIR_TMAP(uint16_t) B_data_tmap".to_string(),
            "sptir_mbar_init(sptir_bar_B_data_shared + sptir_s, 1u);".to_string(),
            "sptir_mbar_expect_tx(sptir_bar_B_data_shared + ".to_string(),
            format!("{}u);", 32 * w * 2),
            "sptir_mbar_wait(sptir_bar_B_data_shared + ".to_string(),
            format!("sptir_wgmma_sp_m64n{w}k32_f16_sw128"),
        ] {
            assert!(src.contains(&needle), "{what}: no `{needle}`");
        }
        // One box per 64 columns, none of B copied by the threads.
        assert_eq!(
            src.matches("sptir_tma_load_2d(B_data_shared").count(),
            (w / 64).max(1) * (ahead + 1),
            "{what}"
        );
        assert!(!src.contains("sptir_cp_async16(B_data_shared"), "{what}");
        let Some(ptx) = sm_90a_ptx_without_spills(src, &what) else {
            continue;
        };
        for needle in [
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes",
            "mbarrier.try_wait.parity.shared::cta.b64",
            "mbarrier.arrive.expect_tx.shared::cta.b64",
        ] {
            assert!(ptx.contains(needle), "{what}: no `{needle}` in the PTX");
        }
    }
}

#[test]
fn tma_slices_equal_the_evaluator_in_the_emulator() {
    spmm_24_tma(GpuDevice::Emulator);
}

/// The same cases on a real GPU of compute capability 9.0, where one is present.
#[test]
fn tma_slices_on_a_real_gpu() {
    if !on_a_hopper_gpu() {
        return;
    }
    spmm_24_tma(GpuDevice::Cuda);
}

fn spmm_24_tma(device: GpuDevice) {
    let mut rng = ChaCha8Rng::seed_from_u64(93);
    // (A staged, products in flight, dtype, m, n, feat, row warps, column warps, row tiles,
    // units, slices copied ahead): one to four boxes a slice, more runs than stages (each
    // barrier through several phases), column warps reading the second box, two column blocks
    // (the copies' column coordinate), one and two warpgroups.
    for (staged, in_flight, dt, m, n, feat, rows, cols, h, units, ahead) in [
        (true, true, DType::F16, 128, 96, 256, 8, 1, 1, 32, 3),
        (false, false, DType::BF16, 256, 64, 128, 8, 1, 2, 16, 1),
        (true, false, DType::F16, 64, 160, 64, 4, 1, 1, 8, 2),
        (true, true, DType::F16, 128, 128, 256, 4, 2, 1, 8, 1),
        (false, true, DType::BF16, 128, 224, 128, 8, 1, 1, 16, 2),
    ] {
        let what = format!(
            "spmm_24 {dt} {m}x{n}, feat {feat}, {rows} x {cols} warps of {h} x {units} tiles, \
             slices copied ahead: {ahead}, A staged: {staged}, in flight: {in_flight}, tma"
        );
        let g = kernel(dt);
        let mut t = tiles(rows, cols, h, ahead);
        t.stage_a = staged;
        t.in_flight = in_flight;
        t.tma = true;
        let sched = spmm_24_tc_smem_gpu_schedule(n, t, units);
        let k = GpuKernel::build(&g, Some(&sched), &spec(m, n, feat), device, &cache())
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let src = &k.module().source;
        assert!(src.contains("sptir_tma_load_2d(B_data_shared"), "{what}");
        assert!(src.contains("_sw128"), "{what}");
        equals_the_reference(&what, None, &k, &mut rng, (m, n, feat), dt);
    }
}

/// `tma` where the copy engine cannot fill the window: typed errors.
#[test]
fn tma_needs_a_pipelined_warpgroup_window_of_whole_boxes() {
    let g = kernel(DType::F16);
    let s = spec(64, 64, 64);
    let annotate = |t: SharedTiles, units: usize, v: i64| {
        spmm_24_tc_smem_gpu_schedule(64, t, units) + &format!("sch.annotate(gko, \"tma\", {v})\n")
    };
    let mut per_warp = tiles(4, 1, 1, 1);
    per_warp.warpgroup = false;
    for (sched, needle) in [
        (annotate(tiles(4, 1, 1, 0), 8, 1), "multi-buffered run loop"),
        (annotate(per_warp, 8, 1), "read by a warpgroup"),
        (annotate(tiles(4, 1, 1, 1), 8, 2), "`tma` is 1"),
        (annotate(tiles(4, 1, 1, 1), 4, 1), "boxes of 64"),
    ] {
        let e = emit_cuda(&g, Some(&sched), &s).expect_err("refused");
        assert!(e.to_string().contains(needle), "{needle}: {e}");
    }
}

/// B's boxes multicast to a cluster of blocks (`tma=1,cluster=C`): the kernel is declared in
/// clusters of C blocks along x (`SPTIR_CLUSTER_DIMS`, `CudaKernel::cluster`), initializes a
/// full and an empty barrier a stage (C arrivals) before a cluster-wide sync, each block
/// releases a stage on every block's empty barrier before its copy into it again and copies
/// its share of the boxes with `.multicast::cluster`, and the cluster syncs again after the run
/// loop; NVRTC compiles it for sm_90a without spills, the PTX holding the multicast copy, the
/// remote arrival and the cluster barrier.
#[test]
fn tma_multicast_compiles_for_sm_90a() {
    for (cluster, in_flight, units, ahead) in
        [(2, true, 32, 3), (4, false, 32, 2), (2, false, 16, 1)]
    {
        let mut t = tiles(8, 1, 1, ahead);
        t.stage_a = true;
        t.in_flight = in_flight;
        t.tma = true;
        t.cluster = cluster;
        // (16 runs: every stage used several times, released between.)
        let sched = spmm_24_tc_smem_gpu_schedule(512, t, units);
        let feat = 8 * units;
        let (_, m) = emit_cuda(
            &kernel(DType::F16),
            Some(&sched),
            &spec(128 * cluster, 512, feat),
        )
        .unwrap_or_else(|e| panic!("cluster {cluster}: {e}"));
        let what =
            format!("cluster {cluster}, units {units}, ahead {ahead}, in flight: {in_flight}");
        let k = m
            .kernels
            .iter()
            .find(|k| k.args.iter().any(|a| a.tensor_map.is_some()))
            .unwrap_or_else(|| panic!("{what}: no kernel takes a tensor map"));
        assert_eq!(k.cluster, [cluster as u32, 1, 1], "{what}");
        // The zero fill (if any) runs in no cluster.
        for other in m.kernels.iter().filter(|o| o.name != k.name) {
            assert_eq!(other.cluster, [1, 1, 1], "{what}: {}", other.name);
        }
        let src = &m.source;
        let stages = ahead + 1 + usize::from(in_flight);
        let boxes = 8 * units / 64;
        for needle in [
            format!("SPTIR_CLUSTER_DIMS({cluster}, 1, 1) __launch_bounds__(256)"),
            format!("sptir_mbar_init(sptir_bar_B_data_shared + {stages} + sptir_s, {cluster}u);"),
            format!("sptir_mbar_arrive_cluster(sptir_bar_B_data_shared + {stages} + "),
            format!("sptir_r < {cluster}u"),
            format!("(int)sptir_cluster_rank() * {}", boxes / cluster),
            format!("(unsigned short){}u);", (1u32 << cluster) - 1),
            format!("{}u);", 32 * 8 * units * 2),
        ] {
            assert!(src.contains(&needle), "{what}: no `{needle}`\n{src}");
        }
        // The barriers' sync and the one before the blocks leave.
        assert_eq!(src.matches("sptir_cluster_sync();").count(), 2, "{what}");
        assert!(!src.contains("sptir_tma_load_2d(B_data_shared"), "{what}");
        let Some(ptx) = sm_90a_ptx_without_spills(src, &what) else {
            continue;
        };
        for needle in [
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster",
            "mapa.shared::cluster.u32",
            "mbarrier.arrive.shared::cluster.b64",
            "barrier.cluster.arrive.release.aligned",
            "barrier.cluster.wait.acquire.aligned",
            "%cluster_ctarank",
            &format!(".reqnctapercluster {cluster}, 1, 1"),
        ] {
            assert!(ptx.contains(needle), "{what}: no `{needle}` in the PTX");
        }
    }
}

/// `tma_cluster` where the blocks of a cluster cannot share the window: typed errors.
#[test]
fn tma_multicast_needs_boxes_for_every_block() {
    let g = kernel(DType::F16);
    let s = spec(256, 64, 128);
    let mut t = tiles(8, 1, 1, 1);
    t.tma = true;
    let annotate = |units: usize, v: i64| {
        spmm_24_tc_smem_gpu_schedule(64, t, units)
            + &format!("sch.annotate(gko, \"tma_cluster\", {v})\n")
    };
    for (sched, needle) in [
        // One box of 64 columns for two blocks; two boxes for four.
        (annotate(8, 2), "multiple of 2"),
        (annotate(16, 4), "multiple of 4"),
        (annotate(16, 9), "1 to 8"),
        (annotate(16, 0), "1 to 8"),
        // Along y the blocks share A's tiles staged by the copy engine; 8 blocks at most.
        (
            annotate(16, 2) + "sch.annotate(gko, \"tma_cluster_y\", 2)\n",
            "share A's tiles",
        ),
        (
            annotate(16, 4) + "sch.annotate(gko, \"tma_cluster_y\", 4)\n",
            "at most 8 blocks",
        ),
    ] {
        let e = emit_cuda(&g, Some(&sched), &s).expect_err("refused");
        assert!(e.to_string().contains(needle), "{needle}: {e}");
    }
}

#[test]
fn tma_multicast_equals_the_evaluator_in_the_emulator() {
    spmm_24_tma_multicast(GpuDevice::Emulator);
}

/// The same cases on a real GPU of compute capability 9.0, where one is present.
#[test]
fn tma_multicast_on_a_real_gpu() {
    if !on_a_hopper_gpu() {
        return;
    }
    spmm_24_tma_multicast(GpuDevice::Cuda);
}

fn spmm_24_tma_multicast(device: GpuDevice) {
    let mut rng = ChaCha8Rng::seed_from_u64(94);
    // (cluster, A staged, products in flight, dtype, m, n, feat, row warps, row tiles, units,
    // slices copied ahead): two and four blocks a cluster, two clusters along x (each its own
    // rows), two column blocks (each its own slices), more runs than stages (the empty
    // barriers through several phases), one and two warpgroups.
    for (cluster, staged, in_flight, dt, m, n, feat, rows, h, units, ahead) in [
        (2, true, true, DType::F16, 256, 288, 128, 4, 1, 16, 3),
        (2, false, false, DType::BF16, 256, 160, 256, 8, 1, 16, 1),
        (4, true, false, DType::F16, 256, 224, 256, 4, 1, 32, 2),
    ] {
        let what = format!(
            "spmm_24 {dt} {m}x{n}, feat {feat}, {rows} warps of {h} x {units} tiles, slices \
             copied ahead: {ahead}, A staged: {staged}, in flight: {in_flight}, tma, cluster \
             {cluster}"
        );
        let g = kernel(dt);
        let mut t = tiles(rows, 1, h, ahead);
        t.stage_a = staged;
        t.in_flight = in_flight;
        t.tma = true;
        t.cluster = cluster;
        let sched = spmm_24_tc_smem_gpu_schedule(n, t, units);
        let k = GpuKernel::build(&g, Some(&sched), &spec(m, n, feat), device, &cache())
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let src = &k.module().source;
        assert!(src.contains("sptir_tma_load_2d_mc(B_data_shared"), "{what}");
        equals_the_reference(&what, None, &k, &mut rng, (m, n, feat), dt);
    }
}

/// A's tiles by the tensor copy engine too (`a=tma`: `stage_a` = "tma"): the kernel takes
/// tensor maps of A's values (boxes of 16 x 16 tiles rows, 32-byte swizzled: the staged tiles'
/// layout) and of its 8-bit positions (unswizzled) after B's, one thread copies one box of each
/// a stage on the stage's barrier (whose announced bytes count them), and no thread copies A
/// with `cp.async`; NVRTC compiles it for sm_90a without spills.
#[test]
fn tma_staged_a_compiles_for_sm_90a() {
    // (cluster along x and y, row warps, row tiles, units, slices copied ahead, warps release)
    for (cluster, cy, rows, h, units, ahead, release) in [
        (1, 1, 8, 1, 32, 3, false),
        (2, 1, 4, 2, 16, 2, false),
        (2, 2, 8, 1, 32, 3, false),
        (1, 1, 8, 1, 32, 3, true),
        (4, 2, 8, 1, 32, 3, true),
    ] {
        let mut t = tiles(rows, 1, h, ahead);
        t.stage_a = true;
        t.tma_a = true;
        t.in_flight = true;
        t.tma = true;
        t.cluster = cluster;
        t.cluster_y = cy;
        t.release = release;
        let sched = spmm_24_tc_smem_gpu_schedule(512, t, units);
        let feat = 8 * units * cy;
        let m = 16 * rows * h * cluster;
        let (_, module) = emit_cuda(&kernel(DType::F16), Some(&sched), &spec(m, 512, feat))
            .unwrap_or_else(|e| panic!("cluster {cluster}: {e}"));
        let what = format!(
            "cluster {cluster} x {cy}, {rows} warps of {h} x {units} tiles, warps release: \
             {release}"
        );
        let k = module
            .kernels
            .iter()
            .find(|k| k.args.iter().any(|a| a.tensor_map.is_some()))
            .unwrap_or_else(|| panic!("{what}: no kernel takes a tensor map"));
        let maps: Vec<_> = k
            .args
            .iter()
            .filter_map(|a| a.tensor_map.as_ref().map(|t| (a.name.as_str(), a.dtype, t)))
            .collect();
        let tiles16 = (16 * rows * h / cy) as u32;
        let names: Vec<_> = maps.iter().map(|m| (m.0, m.1)).collect();
        assert_eq!(
            names,
            vec![
                ("B_data_tmap", DType::F16),
                ("A_data_tmap", DType::F16),
                ("J_indices_data_tmap", DType::I8)
            ],
            "{what}"
        );
        assert_eq!(
            (maps[1].2.box_dims, maps[1].2.swizzle),
            ([16, tiles16], 32),
            "{what}"
        );
        assert_eq!(
            (maps[2].2.box_dims, maps[2].2.swizzle),
            ([16, tiles16], 0),
            "{what}"
        );
        // A's views: rows of 256 values and positions (512 columns of A, 2 of every 4 kept).
        for (_, _, map) in &maps[1..] {
            let dims: Vec<_> = map.dims.iter().map(|d| d.eval(&|_| None)).collect();
            assert_eq!(dims, vec![Some(256), Some(m as i64)], "{what}");
        }
        let src = &module.source;
        let stages = ahead + 2;
        let bytes = 32 * 8 * units * 2 + 16 * rows * h * 16 * 3;
        for needle in [
            "SPTIR_TMAP(uint16_t) B_data_tmap, SPTIR_TMAP(uint16_t) A_data_tmap, \
             SPTIR_TMAP(int8_t) J_indices_data_tmap) {"
                .to_string(),
            "sptir_mbar_expect_tx(sptir_bar_B_data_shared + ".to_string(),
            format!("{bytes}u);"),
            format!("% {stages});"),
            format!(
                "sptir_tma_load_2d{}(sptir_as + ",
                if cy > 1 { "_mc" } else { "" }
            ),
            "A_data_tmap, sptir_bar_B_data_shared + sptir_st, ".to_string(),
            format!(
                "sptir_tma_load_2d{}(sptir_es + ",
                if cy > 1 { "_mc" } else { "" }
            ),
            "J_indices_data_tmap, sptir_bar_B_data_shared + sptir_st, ".to_string(),
        ] {
            assert!(src.contains(&needle), "{what}: no `{needle}`\n{src}");
        }
        if cluster * cy > 1 {
            let dims = format!("SPTIR_CLUSTER_DIMS({cluster}, {cy}, 1)");
            assert!(src.contains(&dims), "{what}: no `{dims}`");
        }
        assert!(!src.contains("sptir_cp_async16(sptir_as"), "{what}");
        assert!(!src.contains("sptir_cp_async16(sptir_es"), "{what}");
        let Some(ptx) = sm_90a_ptx_without_spills(src, &what) else {
            continue;
        };
        // Warps releasing stages: their arrivals (local, or remote in a cluster) in the PTX.
        if release {
            let arrive = if cluster * cy > 1 {
                "mbarrier.arrive.shared::cluster.b64"
            } else {
                "mbarrier.arrive.shared::cta.b64"
            };
            assert!(ptx.contains(arrive), "{what}: no `{arrive}` in the PTX");
        }
    }
}

#[test]
fn tma_staged_a_equals_the_evaluator_in_the_emulator() {
    spmm_24_tma_staged_a(GpuDevice::Emulator);
}

/// The same cases on a real GPU of compute capability 9.0, where one is present.
#[test]
fn tma_staged_a_on_a_real_gpu() {
    if !on_a_hopper_gpu() {
        return;
    }
    spmm_24_tma_staged_a(GpuDevice::Cuda);
}

fn spmm_24_tma_staged_a(device: GpuDevice) {
    let mut rng = ChaCha8Rng::seed_from_u64(95);
    // (cluster along x and y, products in flight, dtype, m, n, feat, row warps, row tiles,
    // units, slices copied ahead): A's boxes of 64, 128 and 256 rows (one or two warpgroups,
    // two row tiles a warp), two row blocks (the boxes' row coordinate), more runs than stages,
    // with and without a cluster multicasting B, and clusters along y multicasting A's boxes
    // in parts (1 x 2: A alone, 2 x 2: both, two clusters each way).
    for ((cluster, cy), in_flight, dt, m, n, feat, rows, h, units, ahead) in [
        ((1, 1), true, DType::F16, 128, 288, 128, 4, 1, 16, 3),
        ((1, 1), false, DType::BF16, 512, 96, 128, 8, 2, 16, 1),
        ((2, 1), true, DType::F16, 256, 160, 128, 8, 1, 16, 2),
        ((1, 2), false, DType::F16, 128, 160, 256, 4, 1, 16, 1),
        ((2, 2), true, DType::BF16, 256, 224, 512, 4, 1, 16, 2),
    ] {
        let what = format!(
            "spmm_24 {dt} {m}x{n}, feat {feat}, {rows} warps of {h} x {units} tiles, slices \
             copied ahead: {ahead}, in flight: {in_flight}, A and B by the copy engine, \
             cluster {cluster} x {cy}"
        );
        let g = kernel(dt);
        let mut t = tiles(rows, 1, h, ahead);
        t.stage_a = true;
        t.tma_a = true;
        t.in_flight = in_flight;
        t.tma = true;
        t.cluster = cluster;
        t.cluster_y = cy;
        let sched = spmm_24_tc_smem_gpu_schedule(n, t, units);
        let k = GpuKernel::build(&g, Some(&sched), &spec(m, n, feat), device, &cache())
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let src = &k.module().source;
        let copy = if cy > 1 {
            "sptir_tma_load_2d_mc(sptir_as + "
        } else {
            "sptir_tma_load_2d(sptir_as + "
        };
        assert!(src.contains(copy), "{what}");
        let kernel = k.module().kernels.iter().find(|k| k.cluster != [1, 1, 1]);
        let want = (cluster * cy > 1).then_some([cluster as u32, cy as u32, 1]);
        assert_eq!(kernel.map(|k| k.cluster), want, "{what}");
        equals_the_reference(&what, None, &k, &mut rng, (m, n, feat), dt);
    }
}

#[test]
fn warps_release_equals_the_evaluator_in_the_emulator() {
    spmm_24_warps_release(GpuDevice::Emulator);
}

/// The same cases on a real GPU of compute capability 9.0, where one is present.
#[test]
fn warps_release_on_a_real_gpu() {
    if !on_a_hopper_gpu() {
        return;
    }
    spmm_24_warps_release(GpuDevice::Cuda);
}

/// Stages released by the warps on mbarriers (`release=1`: `tma_release`) instead of a block
/// barrier a run: the loop holds no `__syncthreads`, each warp arrives on the empty barrier of
/// the stage its completed products read, and the copying thread waits for it.
fn spmm_24_warps_release(device: GpuDevice) {
    let mut rng = ChaCha8Rng::seed_from_u64(96);
    // (cluster, A staged by the engine, products in flight, dtype, m, n, feat, row warps, row
    // tiles, units, slices copied ahead): A in registers or staged, one and two warpgroups,
    // more runs than stages, with and without a cluster.
    for (cluster, staged, in_flight, dt, m, n, feat, rows, h, units, ahead) in [
        (1, true, true, DType::F16, 128, 288, 128, 4, 1, 16, 3),
        (1, false, false, DType::BF16, 256, 160, 128, 8, 1, 16, 1),
        (2, true, true, DType::F16, 256, 224, 128, 8, 1, 16, 2),
    ] {
        let what = format!(
            "spmm_24 {dt} {m}x{n}, feat {feat}, {rows} warps of {h} x {units} tiles, slices \
             copied ahead: {ahead}, A staged: {staged}, in flight: {in_flight}, cluster \
             {cluster}, warps release"
        );
        let g = kernel(dt);
        let mut t = tiles(rows, 1, h, ahead);
        t.stage_a = staged;
        t.tma_a = staged;
        t.in_flight = in_flight;
        t.tma = true;
        t.cluster = cluster;
        t.release = true;
        let sched = spmm_24_tc_smem_gpu_schedule(n, t, units);
        let k = GpuKernel::build(&g, Some(&sched), &spec(m, n, feat), device, &cache())
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let src = &k.module().source;
        let run = src
            .split("for (int32_t g_4_0")
            .nth(1)
            .unwrap_or_else(|| panic!("{what}: no run loop\n{src}"));
        // The loop and its epilogue up to C's stores: one barrier, the one after the loop.
        let body = run.split("if (sptir_acc_live)").next().unwrap_or("");
        assert_eq!(
            body.matches("__syncthreads").count(),
            1,
            "{what}: a block barrier in the run loop"
        );
        let empty = format!(
            "sptir_bar_B_data_shared + {}",
            ahead + 1 + usize::from(in_flight)
        );
        if cluster > 1 {
            assert!(
                src.contains(&format!("sptir_mbar_arrive_cluster({empty}")),
                "{what}"
            );
        } else {
            assert!(
                src.contains(&format!("sptir_mbar_arrive({empty}")),
                "{what}"
            );
        }
        equals_the_reference(&what, None, &k, &mut rng, (m, n, feat), dt);
    }
}

/// A producer warp (`producer=1`: `tma_producer`): the block gets a ninth (or fifth) warp along
/// y whose elected lane (`elect.sync`) makes every copy, waiting for each stage's release
/// itself, while the other warps only wait for their stages and issue products; up to 8 slices
/// copied ahead. NVRTC compiles it for sm_90a without spills.
#[test]
fn producer_warp_compiles_for_sm_90a() {
    // (cluster along x and y, row warps, units, slices copied ahead)
    for (cluster, cy, rows, units, ahead) in [
        (1, 1, 8, 32, 6),
        (2, 1, 8, 32, 4),
        (2, 2, 8, 32, 3),
        (4, 2, 4, 32, 5),
    ] {
        let mut t = tiles(rows, 1, 1, ahead);
        t.stage_a = true;
        t.tma_a = true;
        t.in_flight = true;
        t.tma = true;
        t.cluster = cluster;
        t.cluster_y = cy;
        t.release = true;
        t.producer = true;
        let sched = spmm_24_tc_smem_gpu_schedule(512, t, units);
        let feat = 8 * units * cy;
        let m = 16 * rows * cluster;
        let what = format!("cluster {cluster} x {cy}, {rows} warps, {ahead} slices ahead");
        let (_, module) = emit_cuda(&kernel(DType::F16), Some(&sched), &spec(m, 512, feat))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let k = module
            .kernels
            .iter()
            .find(|k| k.args.iter().any(|a| a.tensor_map.is_some()))
            .unwrap_or_else(|| panic!("{what}: no kernel takes a tensor map"));
        let block: Vec<_> = k.block.iter().map(|d| d.eval(&|_| None)).collect();
        assert_eq!(
            block,
            vec![Some(32), Some(rows as i64 + 1), Some(1)],
            "{what}"
        );
        let src = &module.source;
        let threads = 32 * (rows + 1);
        let stages = ahead + 2;
        for needle in [
            format!("__launch_bounds__({threads})"),
            format!("if (threadIdx.y == {rows}) {{"),
            "if (sptir_elect_one()) {".to_string(),
            format!("sptir_acc_live = 0 < 16 && (threadIdx.y < {rows})"),
            format!("% {stages});"),
        ] {
            assert!(src.contains(&needle), "{what}: no `{needle}`\n{src}");
        }
        // The producer's copies made by the lane it elects, under no guard on `threadIdx.x`
        // (which would have ptxas loop over the lanes around every copy).
        let producer = src
            .split(&format!("if (threadIdx.y == {rows}) {{"))
            .nth(1)
            .and_then(|p| p.split("} else {").next())
            .unwrap_or_else(|| panic!("{what}: no producer branch\n{src}"));
        assert!(
            producer.contains("sptir_tma_load_2d") && !producer.contains("threadIdx.x"),
            "{what}: {producer}"
        );
        // The consumers' loop: no copy and no block barrier before C's stores but the one
        // after the loop.
        let run = src
            .split("for (int32_t g_4_0")
            .nth(1)
            .unwrap_or_else(|| panic!("{what}: no run loop\n{src}"));
        let body = run.split("if (sptir_acc_live)").next().unwrap_or("");
        assert_eq!(body.matches("__syncthreads").count(), 1, "{what}");
        assert!(
            !body.contains("sptir_tma_load_2d"),
            "{what}: a copy in the consumers' loop"
        );
        assert!(!body.contains("sptir_cp_async16("), "{what}");
        let Some(ptx) = sm_90a_ptx_without_spills(src, &what) else {
            continue;
        };
        assert!(ptx.contains("mbarrier.try_wait.parity"), "{what}");
        assert!(
            ptx.contains("elect.sync"),
            "{what}: the producer's lane not elected"
        );
        // The consumers' arrivals on a peer's barrier at the CTA scope: a release at the
        // cluster's scope (`mbarrier.arrive.release.cluster`) is a `MEMBAR.ALL.GPU` in the run
        // loop's SASS, which made every cluster form 2-6x slower on an H200 (session 23).
        if cluster * cy > 1 {
            assert!(
                ptx.contains("mbarrier.arrive.shared::cluster.b64"),
                "{what}"
            );
            assert!(!ptx.contains("mbarrier.arrive.release.cluster"), "{what}");
        }
    }
    // A producer warp needs the warps to release the stages.
    let mut t = tiles(8, 1, 1, 3);
    (t.stage_a, t.tma_a, t.in_flight, t.tma) = (true, true, true, true);
    let sched =
        spmm_24_tc_smem_gpu_schedule(512, t, 32) + "sch.annotate(gko, \"tma_producer\", 1)\n";
    let e = emit_cuda(&kernel(DType::F16), Some(&sched), &spec(128, 512, 256))
        .expect_err("a producer warp without the warps releasing");
    assert!(
        e.to_string()
            .contains("goes with the warps releasing the stages"),
        "{e}"
    );
}

#[test]
fn producer_warp_equals_the_evaluator_in_the_emulator() {
    spmm_24_producer_warp(GpuDevice::Emulator);
}

/// The same cases on a real GPU of compute capability 9.0, where one is present.
#[test]
fn producer_warp_on_a_real_gpu() {
    if !on_a_hopper_gpu() {
        return;
    }
    spmm_24_producer_warp(GpuDevice::Cuda);
}

fn spmm_24_producer_warp(device: GpuDevice) {
    let mut rng = ChaCha8Rng::seed_from_u64(97);
    // (cluster along x and y, products in flight, dtype, m, n, feat, row warps, units, slices
    // copied ahead): more runs than stages (the producer waiting for releases through several
    // phases), one and two warpgroups, six slices ahead, clusters both ways.
    for ((cluster, cy), in_flight, dt, m, n, feat, rows, units, ahead) in [
        ((1, 1), true, DType::F16, 128, 352, 128, 4, 16, 6),
        ((1, 1), false, DType::BF16, 256, 160, 128, 8, 16, 1),
        ((2, 1), true, DType::F16, 256, 224, 128, 8, 16, 2),
        ((2, 2), true, DType::BF16, 256, 224, 512, 4, 16, 3),
    ] {
        let what = format!(
            "spmm_24 {dt} {m}x{n}, feat {feat}, {rows} warps of {units} tiles, slices copied \
             ahead: {ahead}, in flight: {in_flight}, cluster {cluster} x {cy}, producer warp"
        );
        let g = kernel(dt);
        let mut t = tiles(rows, 1, 1, ahead);
        t.stage_a = true;
        t.tma_a = true;
        t.in_flight = in_flight;
        t.tma = true;
        t.cluster = cluster;
        t.cluster_y = cy;
        t.release = true;
        t.producer = true;
        let sched = spmm_24_tc_smem_gpu_schedule(n, t, units);
        let k = GpuKernel::build(&g, Some(&sched), &spec(m, n, feat), device, &cache())
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let src = &k.module().source;
        assert!(
            src.contains(&format!("if (threadIdx.y == {rows}) {{")),
            "{what}"
        );
        equals_the_reference(&what, None, &k, &mut rng, (m, n, feat), dt);
    }
}
