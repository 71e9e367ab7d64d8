//! Persistent 2:4 warpgroup kernels (`2:4(wgdbuf=...,producer=1,persistent=1)`, the CUDA
//! writer's `tma_persistent`) without a GPU: fewer blocks than tiles, each walking tiles in turn
//! with its producer warp's pipeline running on from one tile into the next. In the emulator
//! (two clusters' worth of blocks, so that every block takes several tiles) they equal the
//! reference — stages reused across tiles, barrier phases counted on, the last stage of a tile
//! released after its final wait, clusters of 2 — and move the same sectors as the kernel of a
//! block a tile; NVRTC compiles them for sm_90a without spills; the launch grid is the tiles
//! capped at the clusters that run at once; kernels that cannot be persistent are typed errors.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use sparsetir_codegen::cuda::{CudaKernel, LaunchExpr};
use sparsetir_ir::DType;
use sparsetir_ops::composable::{spmm_24_tc_smem_gpu_schedule, SharedTiles};
use sparsetir_runtime::build::emit_cuda;
use sparsetir_runtime::cache::KernelCache;
use sparsetir_runtime::gpu::{GpuDevice, GpuKernel, EMU_RESIDENT_CLUSTERS};

mod common;
use common::warpgroup::{
    equals_the_reference, hopper, kernel, on_a_hopper_gpu, sm_90a_ptx_without_spills, spec,
};
use common::{assert_outputs_close_16, positions_i8, spmm_24_args, spmm_24_dense};

fn cache() -> KernelCache {
    KernelCache::new(std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda-persistent"))
}

#[test]
fn persistent_kernels_equal_the_evaluator_in_the_emulator() {
    spmm_24_persistent(GpuDevice::Emulator);
}

/// The same cases on a real GPU of compute capability 9.0, where one is present (there the
/// blocks are as many as fit on the GPU: at these sizes one tile each or fewer).
#[test]
fn persistent_kernels_on_a_real_gpu() {
    if !on_a_hopper_gpu() {
        return;
    }
    spmm_24_persistent(GpuDevice::Cuda);
}

fn spmm_24_persistent(device: GpuDevice) {
    let mut rng = ChaCha8Rng::seed_from_u64(131);
    // (dtype, m, n, feat, row warps, row tiles, units, slices ahead, in flight, packed,
    // cluster): runs a tile a multiple of the stages, once (the phases of a turn odd) or twice;
    // 128- and 256-row blocks; products kept in flight or not (a tile's last stage released
    // after the loop or in it); clusters of 2 and 4 taking tiles of the same row.
    for (dt, m, n, feat, rows, h, units, ahead, in_flight, packed, cluster) in [
        (DType::F16, 256, 256, 512, 8, 1, 32, 6, true, true, (1, 1)),
        (DType::BF16, 512, 512, 512, 8, 1, 32, 6, true, false, (2, 1)),
        (DType::F16, 512, 256, 256, 8, 2, 16, 6, true, true, (1, 1)),
        (DType::BF16, 256, 128, 512, 8, 1, 32, 3, false, true, (1, 1)),
        (DType::F16, 512, 256, 1024, 8, 1, 32, 6, true, true, (4, 1)),
        (
            DType::BF16,
            512,
            128,
            1024,
            8,
            1,
            32,
            3,
            false,
            true,
            (2, 2),
        ),
    ] {
        let what = format!(
            "persistent spmm_24 {dt} {m}x{n}, feat {feat}, {rows} warps of {h} x {units} tiles, \
             {ahead} slices ahead, in flight: {in_flight}, packed: {packed}, cluster {cluster:?}"
        );
        let t = hopper(rows, h, ahead, (in_flight, packed, cluster, true));
        let sched = spmm_24_tc_smem_gpu_schedule(n, t, units);
        let k = GpuKernel::build(
            &kernel(dt),
            Some(&sched),
            &spec(m, n, feat),
            device,
            &cache(),
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        let kern = k
            .module()
            .kernels
            .iter()
            .find(|k| k.persistent)
            .unwrap_or_else(|| panic!("{what}: no persistent kernel"));
        let (cx, cy) = (cluster.0 as u32, cluster.1 as u32);
        assert_eq!(kern.cluster, [cx, cy, 1], "{what}");
        // (m, n and feat specialized: the tiles are constants.)
        let tiles: i64 = kern
            .grid
            .iter()
            .map(|e| e.eval(&|_| None).unwrap())
            .product();
        let stats = equals_the_reference(&what, None, &k, &mut rng, (m, n, feat), dt);
        if device == GpuDevice::Emulator {
            // Every block of the emulator's launch walks two tiles or more.
            let blocks = [EMU_RESIDENT_CLUSTERS * cx, cy, 1];
            assert_eq!(stats.grids, vec![blocks], "{what}");
            assert!(tiles >= 4 * i64::from(cx * cy), "{what}: {tiles} tiles");
        }
    }
}

/// A persistent kernel reads what the kernel of a block a tile reads, no more (the emulator's
/// sector count, with and without a cluster), and gives the same products.
#[test]
fn persistent_kernels_move_the_same_sectors_in_the_emulator() {
    let (m, n, feat) = (256, 256, 512);
    let args = positions_i8(spmm_24_args(
        &mut ChaCha8Rng::seed_from_u64(132),
        m,
        n,
        feat,
        DType::F16,
    ));
    let want = spmm_24_dense(&args);
    for cluster in [(1, 1), (2, 1), (2, 2)] {
        let mut sectors = Vec::new();
        for persistent in [false, true] {
            let t = hopper(8, 1, 6, (true, true, cluster, persistent));
            let sched = spmm_24_tc_smem_gpu_schedule(n, t, 32);
            let k = GpuKernel::build(
                &kernel(DType::F16),
                Some(&sched),
                &spec(m, n, feat),
                GpuDevice::Emulator,
                &cache(),
            )
            .expect("build");
            let mut got = args.clone();
            let stats = k.run(&mut got).expect("run");
            let what = format!("cluster {cluster:?}, persistent: {persistent}");
            assert_outputs_close_16(&what, &["c".to_string()], &got, &want, DType::F16, 0.05);
            sectors.push(stats.sector_bytes);
        }
        assert_eq!(sectors[0], sectors[1], "cluster {cluster:?}: sector bytes");
    }
}

/// At the benchmark's shape (4096 x 4096 x 4096) the persistent forms compile for sm_90a
/// without spills, and the source walks the tiles: the barriers initialized in the first turn,
/// the phases counted on over the turns, the stages released across tiles, and the barriers
/// after the run loop written once after the tile loop.
#[test]
fn persistent_kernels_compile_for_sm_90a() {
    let (m, n, feat) = (4096, 4096, 4096);
    // (row warps, row tiles, units, cluster)
    for (rows, h, units, cluster) in [
        (8, 1, 32, (1, 1)),
        (8, 1, 32, (2, 1)),
        (8, 2, 16, (1, 1)),
        (8, 1, 32, (4, 2)),
    ] {
        let what = format!("{rows} warps of {h} x {units} tiles, cluster {cluster:?}");
        let t = hopper(rows, h, 6, (true, true, cluster, true));
        let sched = spmm_24_tc_smem_gpu_schedule(n, t, units);
        let (_, module) = emit_cuda(&kernel(DType::F16), Some(&sched), &spec(m, n, feat))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let k = module
            .kernels
            .iter()
            .find(|k| k.persistent)
            .unwrap_or_else(|| panic!("{what}: no persistent kernel"));
        // The logical grid: the tiles.
        let grid: Vec<_> = k.grid.iter().map(|e| e.eval(&|_| None)).collect();
        let (bm, bn) = (16 * rows * h, 8 * units);
        assert_eq!(
            grid,
            vec![Some((m / bm) as i64), Some((feat / bn) as i64), Some(1)],
            "{what}"
        );
        let src = &module.source;
        // A cluster of several rows of blocks takes a group of tiles a turn.
        let walk = if cluster.1 > 1 {
            "for (int32_t sptir_it = 0, sptir_group = (int32_t)(blockIdx.x / 4); sptir_group < \
             sptir_groups_x * (sptir_tiles_y / 2); ++sptir_it, sptir_group += sptir_clusters) {"
        } else {
            "for (int32_t sptir_it = 0, sptir_tile = (int32_t)blockIdx.x; sptir_tile < \
             sptir_tiles_x * sptir_tiles_y; ++sptir_it, sptir_tile += (int32_t)gridDim.x) {"
        };
        for needle in [
            walk,
            "if (sptir_it == 0) {",
            "if (sptir_it > 0 || ",
            "(((128 - 1) - (0)) % 8)",
        ] {
            assert!(src.contains(needle), "{what}: no `{needle}`\n{src}");
        }
        // 128 runs a tile, 8 stages: 16 phases a turn, the parity of a phase the same in
        // every turn.
        assert!(!src.contains("sptir_it *"), "{what}");
        // Every copy is the engine's: no `cp.async` group committed.
        assert!(!src.contains("sptir_cp_async_commit();"), "{what}");
        // One block barrier (the barriers' initialization), and with a cluster two cluster
        // barriers (after it and after the tile loop).
        assert_eq!(src.matches("__syncthreads();").count(), 1, "{what}");
        let cluster_syncs = src.matches("    sptir_cluster_sync();").count();
        let clustered = cluster != (1, 1);
        assert_eq!(cluster_syncs, if clustered { 2 } else { 0 }, "{what}");
        sm_90a_ptx_without_spills(src, &what);
    }
}

/// Kernels that cannot walk tiles are typed errors: without a producer warp, with a run loop
/// whose trip count is not a multiple of the stages, or another value.
#[test]
fn persistent_kernels_need_a_producer_warp_and_whole_turns_of_the_stages() {
    let refused = |t: SharedTiles, n: usize, extra: &str, needle: &str| {
        let sched = spmm_24_tc_smem_gpu_schedule(n, t, 32) + extra;
        let e = emit_cuda(&kernel(DType::F16), Some(&sched), &spec(256, n, 256)).expect_err(needle);
        assert!(e.to_string().contains(needle), "{e}");
    };
    // No producer warp: the warps release the stages, the first of them copies.
    let mut t = hopper(8, 1, 3, (true, true, (1, 1), false));
    t.producer = false;
    refused(
        t,
        256,
        "sch.annotate(gko, \"tma_persistent\", 1)\n",
        "has a producer warp",
    );
    // 6 slices ahead and one in flight: 8 stages, 12 runs.
    refused(
        hopper(8, 1, 6, (true, true, (1, 1), true)),
        384,
        "",
        "a multiple of its 8 stages; this one runs 12",
    );
    // Another value.
    refused(
        hopper(8, 1, 6, (true, true, (1, 1), false)),
        256,
        "sch.annotate(gko, \"tma_persistent\", 2)\n",
        "`tma_persistent` is 1",
    );
}

/// The launch grid of a persistent kernel: its tiles, at most the clusters that run at once,
/// in whole clusters; other kernels launch their grid as it is.
#[test]
fn a_persistent_launch_takes_the_resident_clusters() {
    let kernel = |persistent: bool, cluster: u32| CudaKernel {
        name: "k".into(),
        args: Vec::new(),
        grid: [
            LaunchExpr::Const(1),
            LaunchExpr::Const(1),
            LaunchExpr::Const(1),
        ],
        block: [
            LaunchExpr::Const(32),
            LaunchExpr::Const(1),
            LaunchExpr::Const(1),
        ],
        shared_bytes: 0,
        dynamic_shared_bytes: 0,
        cluster: [cluster, 1, 1],
        persistent,
    };
    // 32 x 16 tiles on 132 multiprocessors.
    assert_eq!(
        kernel(true, 1).launch_grid([32, 16, 1], 132),
        Ok([132, 1, 1])
    );
    // Fewer tiles than blocks that fit: a block a tile.
    assert_eq!(kernel(true, 1).launch_grid([4, 2, 1], 132), Ok([8, 1, 1]));
    // Clusters of 2: 60 of them fit.
    assert_eq!(
        kernel(true, 2).launch_grid([32, 16, 1], 60),
        Ok([120, 1, 1])
    );
    // Too few tiles for whole clusters, or tiles along x that a cluster does not divide.
    assert_eq!(kernel(true, 4).launch_grid([4, 1, 1], 0), Ok([4, 1, 1]));
    let e = kernel(true, 4)
        .launch_grid([6, 2, 1], 8)
        .expect_err("6 tiles along x");
    assert!(e.contains("whole clusters along x"), "{e}");
    // Clusters of 2 x 2: 16 x 8 groups of tiles, 30 clusters fit.
    let mut k = kernel(true, 2);
    k.cluster[1] = 2;
    assert_eq!(k.launch_grid([32, 16, 1], 30), Ok([60, 2, 1]));
    let e = k.launch_grid([32, 3, 1], 30).expect_err("3 tiles along y");
    assert!(e.contains("whole clusters along x and y"), "{e}");
    // Not persistent: the grid as it is.
    assert_eq!(
        kernel(false, 2).launch_grid([32, 16, 1], 60),
        Ok([32, 16, 1])
    );
}
