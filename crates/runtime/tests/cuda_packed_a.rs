//! 2:4 warpgroup kernels reading `A` laid out for the tensor cores, without a GPU: positions
//! packed (`meta=packed`, the CUDA writer's `packed_positions`: one `u32` word per row and run)
//! and values laid out run by run (`vals=packed`, `packed_values`: a run's values for
//! consecutive rows contiguous, in the image of the copy engine's 32-byte swizzle). The kernels
//! take tensor maps of device buffers the runtime derives before the launches; they equal the
//! reference in the emulator (boxes of 64 to 256 rows, clusters sharing A's boxes along y,
//! persistent blocks, float16 and bfloat16), NVRTC compiles them for sm_90a without spills,
//! the packed positions save their sectors, the values' boxes have rows of 128 bytes instead
//! of 32, and schedules that cannot have them are typed errors.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use sparsetir_ir::DType;
use sparsetir_ops::composable::{spmm_24_tc_smem_gpu_schedule, SharedTiles};
use sparsetir_runtime::build::emit_cuda;
use sparsetir_runtime::cache::KernelCache;
use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};

mod common;
use common::warpgroup::{
    equals_the_reference, hopper, kernel, on_a_hopper_gpu, sm_90a_ptx_without_spills, spec, tiles,
};
use common::{assert_outputs_close_16, positions_i8, spmm_24_args, spmm_24_dense};

const F16: DType = DType::F16;
const BF16: DType = DType::BF16;

fn cache() -> KernelCache {
    KernelCache::new(std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda-packed-a"))
}

/// A's positions packed for the tensor cores (`meta=packed`: `packed_positions`): the kernel
/// takes a tensor map of a `u32` device buffer the runtime derives from the 8-bit positions
/// (`TempFill::TensorCoreMetadata`: `[rows, runs]` words, one box of the stage's rows a run)
/// instead of the positions' map, the stage's barrier counts 64 bytes of metadata a tile
/// instead of 256, and no lane packs positions; NVRTC compiles it for sm_90a without spills.
#[test]
fn packed_positions_compile_for_sm_90a() {
    // (cluster along x and y, row warps, row tiles, slices copied ahead, producer warp)
    for (cluster, cy, rows, h, ahead, producer) in [
        (1, 1, 8, 1, 6, true),
        (2, 2, 8, 1, 3, true),
        (1, 1, 8, 2, 3, false),
    ] {
        let mut t = tiles(rows, 1, h, ahead);
        (t.stage_a, t.tma_a, t.packed_positions) = (true, true, true);
        (t.in_flight, t.tma, t.cluster, t.cluster_y) = (true, true, cluster, cy);
        (t.release, t.producer) = (producer, producer);
        let units = 32 / h;
        let sched = spmm_24_tc_smem_gpu_schedule(512, t, units);
        let (feat, m) = (8 * units * cy, 16 * rows * h * cluster);
        let what = format!("cluster {cluster} x {cy}, {rows} warps of {h} row tiles");
        let (_, module) = emit_cuda(&kernel(DType::F16), Some(&sched), &spec(m, 512, feat))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        // The derived buffer: after the function's own, from the positions.
        let temp = module.temps.last().expect("a derived buffer");
        assert_eq!(temp.dtype, DType::U32, "{what}");
        assert_eq!(
            temp.elems.eval(&|_| None),
            Some(m as i64 * 256 / 16),
            "{what}"
        );
        let Some(sparsetir_codegen::cuda::TempFill::TensorCoreMetadata {
            from,
            rows: r,
            row_slots,
        }) = temp.fill
        else {
            panic!("{what}: not derived from the positions");
        };
        assert_eq!(module.params[from].name, "indices", "{what}");
        assert_eq!((r, row_slots), (m as i64, 256), "{what}");
        let k = module
            .kernels
            .iter()
            .find(|k| k.args.iter().any(|a| a.tensor_map.is_some()))
            .unwrap_or_else(|| panic!("{what}: no kernel takes a tensor map"));
        let map = k.args.last().expect("arguments");
        let view = map
            .tensor_map
            .as_ref()
            .expect("the positions' map comes last");
        assert_eq!(
            (map.name.as_str(), map.dtype, map.param),
            (
                "J_indices_data_tc_tmap",
                DType::U32,
                module.params.len() + module.temps.len() - 1
            ),
            "{what}"
        );
        let dims: Vec<_> = view.dims.iter().map(|d| d.eval(&|_| None)).collect();
        assert_eq!(dims, vec![Some(m as i64), Some(16)], "{what}");
        let part = (16 * rows * h / cy) as u32;
        assert_eq!((view.box_dims, view.swizzle), ([part, 1], 0), "{what}");
        let src = &module.source;
        let bytes = 32 * 8 * units * 2 + 16 * rows * h * (32 + 4);
        for needle in [
            "SPTIR_TMAP(uint32_t) J_indices_data_tc_tmap) {".to_string(),
            format!("{bytes}u);"),
            "J_indices_data_tc_tmap, sptir_bar_B_data_shared + sptir_st, ".to_string(),
            "sptir_e = ((sptir_es[".to_string(),
        ] {
            assert!(src.contains(&needle), "{what}: no `{needle}`\n{src}");
        }
        assert!(!src.contains("sptir_lds_oct(sptir_es"), "{what}");
        sm_90a_ptx_without_spills(src, &what);
    }
    // Packed positions need A's tiles by the copy engine.
    let mut t = tiles(8, 1, 1, 3);
    (t.stage_a, t.in_flight, t.tma) = (true, true, true);
    let sched =
        spmm_24_tc_smem_gpu_schedule(512, t, 32) + "sch.annotate(gko, \"packed_positions\", 1)\n";
    let e = emit_cuda(&kernel(DType::F16), Some(&sched), &spec(128, 512, 256))
        .expect_err("packed positions with A staged by cp.async");
    assert!(e.to_string().contains("come by the copy engine"), "{e}");
    // A block's part of a box must start 128-byte aligned: 64 rows over 4 blocks along y are
    // 16 words each.
    let mut t = tiles(4, 1, 1, 3);
    (t.stage_a, t.tma_a, t.packed_positions) = (true, true, true);
    (t.in_flight, t.tma, t.cluster_y) = (true, true, 4);
    let sched = spmm_24_tc_smem_gpu_schedule(512, t, 32);
    let e = emit_cuda(&kernel(DType::F16), Some(&sched), &spec(64, 512, 1024))
        .expect_err("parts of 16 rows");
    assert!(e.to_string().contains("multiple of 32 rows"), "{e}");
}

#[test]
fn packed_positions_equal_the_evaluator_in_the_emulator() {
    spmm_24_packed_positions(GpuDevice::Emulator);
}

/// The same cases on a real GPU of compute capability 9.0, where one is present.
#[test]
fn packed_positions_on_a_real_gpu() {
    if !on_a_hopper_gpu() {
        return;
    }
    spmm_24_packed_positions(GpuDevice::Cuda);
}

fn spmm_24_packed_positions(device: GpuDevice) {
    let mut rng = ChaCha8Rng::seed_from_u64(98);
    // (cluster along x and y, producer warp, dtype, m, n, feat, row warps, row tiles, units,
    // slices copied ahead): boxes of 64, 128 and 256 rows, several row blocks (the boxes' row
    // coordinate) and runs (their run coordinate), more runs than stages, clusters multicasting
    // B, and A's boxes in parts along y.
    for ((cluster, cy), producer, dt, m, n, feat, rows, h, units, ahead) in [
        ((1, 1), true, DType::F16, 256, 352, 128, 4, 1, 16, 6),
        ((1, 1), false, DType::BF16, 512, 96, 128, 8, 2, 16, 1),
        ((2, 1), true, DType::F16, 256, 224, 128, 8, 1, 16, 2),
        ((2, 2), true, DType::BF16, 256, 224, 512, 4, 1, 16, 3),
    ] {
        let what = format!(
            "spmm_24 {dt} {m}x{n}, feat {feat}, {rows} warps of {h} x {units} tiles, slices \
             copied ahead: {ahead}, cluster {cluster} x {cy}, producer warp: {producer}, \
             packed positions"
        );
        let g = kernel(dt);
        let mut t = tiles(rows, 1, h, ahead);
        (t.stage_a, t.tma_a, t.packed_positions) = (true, true, true);
        (t.in_flight, t.tma, t.cluster, t.cluster_y) = (true, true, cluster, cy);
        (t.release, t.producer) = (producer, producer);
        let sched = spmm_24_tc_smem_gpu_schedule(n, t, units);
        let k = GpuKernel::build(&g, Some(&sched), &spec(m, n, feat), device, &cache())
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(
            k.module().source.contains("J_indices_data_tc_tmap"),
            "{what}"
        );
        equals_the_reference(&what, None, &k, &mut rng, (m, n, feat), dt);
    }
}

/// What the packed positions save, counted by the emulator: the same kernel with 8-bit
/// positions touches a 32-byte sector for each row's 16 positions of a run (rows are `n / 2`
/// bytes apart), the packed one 4 bytes a row and run in boxes of consecutive words; all other
/// traffic is the same.
#[test]
fn packed_positions_save_their_sectors_in_the_emulator() {
    let (m, n, feat) = (256, 352, 128);
    let runs = n / 32;
    let args = positions_i8(spmm_24_args(
        &mut ChaCha8Rng::seed_from_u64(99),
        m,
        n,
        feat,
        DType::F16,
    ));
    let mut sectors = Vec::new();
    for packed in [false, true] {
        let mut t = tiles(4, 1, 1, 3);
        (t.stage_a, t.tma_a, t.packed_positions) = (true, true, packed);
        (t.in_flight, t.tma, t.release, t.producer) = (true, true, true, true);
        // One block of columns (16 units of 8): A is read once.
        let sched = spmm_24_tc_smem_gpu_schedule(n, t, 16);
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
        let want = spmm_24_dense(&args);
        assert_outputs_close_16("packed", &["c".to_string()], &got, &want, DType::F16, 0.05);
        sectors.push(stats.sector_bytes);
    }
    assert_eq!(
        sectors[0] - sectors[1],
        (m * runs * (32 - 4)) as u64,
        "sector bytes, 8-bit then packed: {sectors:?}"
    );
}

/// A's values laid out run by run (`vals=packed`: `packed_values`): the kernel takes a tensor
/// map of a 16-bit device buffer the runtime derives from the values
/// (`TempFill::TensorCoreValues`: as many elements, run-major) instead of the values' map, a
/// box of rows of 64 values (128 bytes, 4 rows of `A`, unswizzled) a stage instead of one row
/// of 16 values (32 bytes, swizzled) a row, the same bytes on the stage's barrier, and the
/// lanes' `ldmatrix` reads unchanged; NVRTC compiles it for sm_90a without spills.
#[test]
fn packed_values_compile_for_sm_90a() {
    // (cluster along x and y, row warps, row tiles, slices copied ahead, packed positions,
    // persistent)
    for (cluster, cy, rows, h, ahead, positions, persistent) in [
        (1, 1, 8, 2, 6, true, true),
        (2, 1, 8, 1, 6, true, true),
        (2, 2, 8, 1, 3, false, false),
        (1, 1, 4, 1, 6, false, false),
    ] {
        let mut t = hopper(rows, h, ahead, (true, positions, (cluster, cy), persistent));
        t.packed_values = true;
        let units = 32 / h;
        let sched = spmm_24_tc_smem_gpu_schedule(512, t, units);
        let (feat, m) = (8 * units * cy, 16 * rows * h * cluster);
        let what = format!("{t:?}");
        let (_, module) = emit_cuda(&kernel(DType::F16), Some(&sched), &spec(m, 512, feat))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        // The derived values: after the function's own buffers, from the values, one element
        // for each of theirs.
        let derived = module
            .temps
            .iter()
            .position(|t| {
                matches!(
                    t.fill,
                    Some(sparsetir_codegen::cuda::TempFill::TensorCoreValues { .. })
                )
            })
            .unwrap_or_else(|| panic!("{what}: no derived values"));
        let temp = &module.temps[derived];
        assert_eq!(temp.dtype, DType::F16, "{what}");
        assert_eq!(temp.elems.eval(&|_| None), Some(m as i64 * 256), "{what}");
        let Some(sparsetir_codegen::cuda::TempFill::TensorCoreValues {
            from,
            rows: r,
            row_slots,
            warps,
            units: row_units,
        }) = temp.fill
        else {
            unreachable!()
        };
        assert_eq!(module.params[from].name, "a", "{what}");
        assert_eq!((r, row_slots), (m as i64, 256), "{what}");
        // (Tiles in row order: only the tensor cores reading A from the stage reorder them.)
        assert_eq!((warps, row_units), (1, 1), "{what}");
        let map = module
            .kernels
            .iter()
            .flat_map(|k| &k.args)
            .find(|a| a.name == "A_data_tc_tmap")
            .unwrap_or_else(|| panic!("{what}: no map of the derived values"));
        assert_eq!(
            (map.dtype, map.param),
            (DType::F16, module.params.len() + derived),
            "{what}"
        );
        let view = map.tensor_map.as_ref().expect("a tensor map");
        let dims: Vec<_> = view.dims.iter().map(|d| d.eval(&|_| None)).collect();
        assert_eq!(dims, vec![Some(64), Some(m as i64 * 256 / 64)], "{what}");
        let part = (16 * rows * h / cy) as u32;
        assert_eq!((view.box_dims, view.swizzle), ([64, part / 4], 0), "{what}");
        let src = &module.source;
        for needle in [
            "SPTIR_TMAP(uint16_t) A_data_tc_tmap".to_string(),
            "A_data_tc_tmap, sptir_bar_B_data_shared + sptir_st, 0, ".to_string(),
            "sptir_ldmatrix_x4(sptir_a, sptir_as + ".to_string(),
        ] {
            assert!(src.contains(&needle), "{what}: no `{needle}`\n{src}");
        }
        assert!(!src.contains("A_data_tmap"), "{what}: the values' own map");
        sm_90a_ptx_without_spills(src, &what);
    }
    // Packed values need A's tiles by the copy engine.
    let mut t = tiles(8, 1, 1, 3);
    (t.stage_a, t.in_flight, t.tma) = (true, true, true);
    let sched =
        spmm_24_tc_smem_gpu_schedule(512, t, 32) + "sch.annotate(gko, \"packed_values\", 1)\n";
    let e = emit_cuda(&kernel(DType::F16), Some(&sched), &spec(128, 512, 256))
        .expect_err("packed values with A staged by cp.async");
    assert!(
        e.to_string()
            .contains("packed values come by the copy engine"),
        "{e}"
    );
}

#[test]
fn packed_values_equal_the_evaluator_in_the_emulator() {
    spmm_24_packed_values(GpuDevice::Emulator);
}

/// The same cases on a real GPU of compute capability 9.0, where one is present.
#[test]
fn packed_values_on_a_real_gpu() {
    if !on_a_hopper_gpu() {
        return;
    }
    spmm_24_packed_values(GpuDevice::Cuda);
}

fn spmm_24_packed_values(device: GpuDevice) {
    // Boxes of 64, 128 and 256 rows, several row blocks and runs (rows 4-7 of every 8 swapped
    // halves), clusters multicasting B, A's boxes in parts along y, blocks walking tiles; the
    // positions packed or not.
    // (One case a line: cluster, packed positions and values, in flight and persistent, type,
    // m x n x feat, row warps, row tiles, units, slices ahead.)
    #[rustfmt::skip]
    let cases = [
        case((1, 1), (true, true), (true, false), F16, (256, 352, 128), (4, 1, 16, 6)),
        case((1, 1), (false, true), (true, false), BF16, (512, 96, 128), (8, 2, 16, 1)),
        case((1, 1), (true, true), (true, true), F16, (512, 256, 256), (8, 2, 16, 6)),
        case((2, 1), (true, true), (true, true), BF16, (512, 256, 128), (8, 1, 16, 6)),
        case((2, 2), (false, true), (true, false), F16, (256, 224, 512), (4, 1, 16, 3)),
    ];
    hopper_cases(device, 101, &cases, |_| {}, "A_data_tc_tmap");
}

/// One case of the emulator's and the real GPU's runs: the Hopper form (`hopper`) of
/// `rows` row warps of `h` row tiles, `ahead` slices copied ahead, clusters of `cluster`
/// blocks, positions and values packed or not (`packed`), products in flight and blocks
/// persistent or not (`flow`), on an `m x n` 2:4 matrix of `dt` at width `feat`, `units`
/// units a product.
#[derive(Clone, Copy)]
struct Case {
    cluster: (usize, usize),
    packed: (bool, bool),
    flow: (bool, bool),
    dt: DType,
    mnf: (usize, usize, usize),
    warps: (usize, usize, usize, usize),
}

fn case(
    cluster: (usize, usize),
    packed: (bool, bool),
    flow: (bool, bool),
    dt: DType,
    mnf: (usize, usize, usize),
    warps: (usize, usize, usize, usize),
) -> Case {
    Case {
        cluster,
        packed,
        flow,
        dt,
        mnf,
        warps,
    }
}

/// Each of `cases` (its form changed by `adjust`) built for `device`, its source holding
/// `needle`, equal to the reference on random inputs (`seed`).
fn hopper_cases(
    device: GpuDevice,
    seed: u64,
    cases: &[Case],
    adjust: impl Fn(&mut SharedTiles),
    needle: &str,
) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for c in cases {
        let ((in_flight, persistent), (m, n, feat), (rows, h, units, ahead)) =
            (c.flow, c.mnf, c.warps);
        let mut t = hopper(
            rows,
            h,
            ahead,
            (in_flight, c.packed.0, c.cluster, persistent),
        );
        t.packed_values = c.packed.1;
        adjust(&mut t);
        let dt = c.dt;
        let what = format!("spmm_24 {dt} {m}x{n}, feat {feat}, {units} units: {t:?}");
        let sched = spmm_24_tc_smem_gpu_schedule(n, t, units);
        let k = GpuKernel::build(
            &kernel(dt),
            Some(&sched),
            &spec(m, n, feat),
            device,
            &cache(),
        )
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(k.module().source.contains(needle), "{what}");
        equals_the_reference(&what, None, &k, &mut rng, (m, n, feat), dt);
    }
}

/// The values' layout moves the same sectors (each row's 16 values of a run were one whole
/// sector already): what it changes is the copy engine's requests, rows of 128 bytes instead
/// of 32 (the tensor map's box, checked above).
#[test]
fn packed_values_move_the_same_sectors_in_the_emulator() {
    let (m, n, feat) = (256, 352, 128);
    let args = positions_i8(spmm_24_args(
        &mut ChaCha8Rng::seed_from_u64(102),
        m,
        n,
        feat,
        DType::F16,
    ));
    let mut sectors = Vec::new();
    for packed in [false, true] {
        let mut t = hopper(4, 1, 3, (true, true, (1, 1), false));
        t.packed_values = packed;
        let sched = spmm_24_tc_smem_gpu_schedule(n, t, 16);
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
        let want = spmm_24_dense(&args);
        assert_outputs_close_16("values", &["c".to_string()], &got, &want, DType::F16, 0.05);
        sectors.push(stats.sector_bytes);
    }
    assert_eq!(
        sectors[0], sectors[1],
        "sector bytes, row-major then run by run"
    );
}

/// The tensor cores reading A from the stage (`ss=1`: `wgmma_ss`): each product names A by a
/// descriptor instead of registers (no `ldmatrix`), a run's products are one group between
/// one fence and one commit, every row unit's metadata loaded before them; ptxas keeps the
/// group in flight (no "serialized" in its log) and spills nothing.
#[test]
fn a_from_shared_memory_compiles_for_sm_90a_without_serialization() {
    // (row warps, row tiles, packed values, cluster along x and y, persistent, dtype)
    for (rows, h, values, (cluster, cy), persistent, dt) in [
        (8, 1, false, (1, 1), false, DType::F16),
        (8, 2, true, (1, 1), true, DType::F16),
        (8, 1, true, (2, 1), true, DType::BF16),
        (8, 2, true, (2, 2), false, DType::F16),
    ] {
        let mut t = hopper(rows, h, 6, (true, true, (cluster, cy), persistent));
        (t.packed_values, t.a_from_shared) = (values, true);
        let units = 32 / h;
        let (feat, m) = (8 * units * cy, 16 * rows * h * cluster);
        let sched = spmm_24_tc_smem_gpu_schedule(512, t, units);
        let what = format!("{dt} {t:?}");
        let (_, module) = emit_cuda(&kernel(dt), Some(&sched), &spec(m, 512, feat))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let src = &module.source;
        let ty = if dt == DType::F16 { "f16" } else { "bf16" };
        for needle in [
            format!(
                "sptir_wgmma_sp_m64n{}k32_{ty}_sw128_ss(sptir_acc",
                8 * units
            ),
            format!("uint32_t sptir_er[{h}];"),
            "sptir_wgmma_fence();".to_string(),
            "sptir_wgmma_commit();".to_string(),
            format!("sptir_wgmma_wait_n{}<1>(sptir_acc", 8 * units),
        ] {
            assert!(src.contains(&needle), "{what}: no `{needle}`\n{src}");
        }
        assert!(!src.contains("sptir_ldmatrix_x4(sptir_a"), "{what}");
        if let Some((c, ptx)) = common::warpgroup::compiled_without_spills(src, "sm_90a", &what) {
            assert!(
                !c.log.contains("serialized"),
                "{what}: ptxas serialized:\n{}",
                c.log
            );
            assert!(
                ptx.contains(&format!(
                    "wgmma.mma_async.sp.sync.aligned.m64n{}k32",
                    8 * units
                )),
                "{what}"
            );
        }
    }
}

#[test]
fn a_from_shared_memory_equals_the_evaluator_in_the_emulator() {
    spmm_24_a_from_shared(GpuDevice::Emulator);
}

/// The same cases on a real GPU of compute capability 9.0, where one is present.
#[test]
fn a_from_shared_memory_on_a_real_gpu() {
    if !on_a_hopper_gpu() {
        return;
    }
    spmm_24_a_from_shared(GpuDevice::Cuda);
}

fn spmm_24_a_from_shared(device: GpuDevice) {
    // One warpgroup and two, one row tile a warp (A as the 32-byte swizzle lays it, or run by
    // run) and two or four (unit-major), products in flight or waited for, clusters, A's boxes
    // in parts along y, persistent blocks.
    // (One case a line: cluster, packed positions and values, in flight and persistent, type,
    // m x n x feat, row warps, row tiles, units, slices ahead.)
    #[rustfmt::skip]
    let cases = [
        case((1, 1), (true, false), (true, false), F16, (256, 352, 128), (4, 1, 16, 6)),
        case((1, 1), (true, true), (false, false), BF16, (256, 96, 128), (8, 1, 16, 2)),
        case((1, 1), (true, true), (true, true), F16, (512, 256, 256), (8, 2, 16, 6)),
        case((1, 1), (true, true), (true, false), BF16, (512, 160, 64), (4, 4, 8, 3)),
        case((2, 1), (true, true), (true, true), BF16, (512, 256, 128), (8, 1, 16, 6)),
        case((2, 2), (true, true), (true, false), F16, (512, 224, 512), (4, 2, 16, 3)),
    ];
    hopper_cases(
        device,
        103,
        &cases,
        |t| t.a_from_shared = true,
        "_sw128_ss(",
    );
}

/// Schedules the shared-memory form cannot take are typed errors: `A` not by the copy engine,
/// and several row tiles a warp without the values' unit-major layout.
#[test]
fn a_from_shared_memory_needs_its_layout() {
    let mut t = hopper(8, 2, 3, (true, true, (1, 1), false));
    t.a_from_shared = true;
    let sched = spmm_24_tc_smem_gpu_schedule(512, t, 16);
    let e = emit_cuda(&kernel(DType::F16), Some(&sched), &spec(256, 512, 128))
        .expect_err("two row tiles a warp, values in row order");
    assert!(
        e.to_string()
            .contains("annotate the loop `packed_values` too"),
        "{e}"
    );
    let mut t = tiles(8, 1, 1, 3);
    (t.stage_a, t.in_flight, t.tma) = (true, true, true);
    let sched = spmm_24_tc_smem_gpu_schedule(512, t, 32) + "sch.annotate(gko, \"wgmma_ss\", 1)\n";
    let e = emit_cuda(&kernel(DType::F16), Some(&sched), &spec(128, 512, 256))
        .expect_err("A staged by cp.async");
    assert!(
        e.to_string().contains("a stage the copy engine fills"),
        "{e}"
    );
}

/// Two runs' products a group (`runs=2`: `wgmma_ss_runs`, 64 columns of A a group as
/// cuSPARSELt's tiles): the loop steps by two runs, waits for both stages, loads both runs'
/// metadata, issues both runs' products between one fence and one commit, and releases the
/// two stages of the group completed before; ptxas keeps the group in flight.
#[test]
fn paired_runs_compile_for_sm_90a_without_serialization() {
    for (rows, h, values, cluster, persistent) in [
        (8, 1, false, 1, true),
        (8, 2, true, 1, true),
        (8, 1, true, 2, false),
    ] {
        let mut t = hopper(rows, h, 6, (true, true, (cluster, 1), persistent));
        (t.packed_values, t.a_from_shared, t.paired_runs) = (values, true, true);
        let units = 32 / h;
        let (feat, m) = (8 * units, 16 * rows * h * cluster);
        let sched = spmm_24_tc_smem_gpu_schedule(512, t, units);
        let what = format!("{t:?}");
        let (_, module) = emit_cuda(&kernel(DType::F16), Some(&sched), &spec(m, 512, feat))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let src = &module.source;
        for needle in [
            "g_4_0 += 2) {".to_string(),
            format!("uint32_t sptir_er[{}];", 2 * h),
            format!("sptir_er[{h} + "),
            "(((g_4_0 + 1 - 2) - (0)) % 8)".to_string(),
        ] {
            assert!(src.contains(&needle), "{what}: no `{needle}`\n{src}");
        }
        assert_eq!(src.matches("sptir_wgmma_commit();").count(), 1, "{what}");
        if let Some((c, _)) = common::warpgroup::compiled_without_spills(src, "sm_90a", &what) {
            assert!(
                !c.log.contains("serialized"),
                "{what}: ptxas serialized:\n{}",
                c.log
            );
        }
    }
}

#[test]
fn paired_runs_equal_the_evaluator_in_the_emulator() {
    spmm_24_paired_runs(GpuDevice::Emulator);
}

/// The same cases on a real GPU of compute capability 9.0, where one is present.
#[test]
fn paired_runs_on_a_real_gpu() {
    if !on_a_hopper_gpu() {
        return;
    }
    spmm_24_paired_runs(GpuDevice::Cuda);
}

fn spmm_24_paired_runs(device: GpuDevice) {
    // The fewest stages groups take (4 in flight, 2 not), more runs than stages, persistent
    // blocks walking tiles (the last group's two stages released after the loop), clusters,
    // A's boxes in parts along y, the most stages a producer warp fills (8 ahead: 10).
    // (One case a line: cluster, packed positions and values, in flight and persistent, type,
    // m x n x feat, row warps, row tiles, units, slices ahead.)
    #[rustfmt::skip]
    let cases = [
        case((1, 1), (true, false), (true, false), F16, (256, 384, 128), (4, 1, 16, 2)),
        case((1, 1), (true, true), (false, false), BF16, (256, 128, 128), (8, 1, 16, 1)),
        case((1, 1), (true, true), (true, true), F16, (512, 512, 256), (8, 2, 16, 6)),
        case((2, 1), (true, true), (true, true), BF16, (512, 256, 128), (8, 1, 16, 6)),
        case((2, 2), (true, true), (true, false), F16, (512, 192, 512), (4, 2, 16, 3)),
        case((1, 1), (true, true), (true, false), F16, (256, 512, 256), (8, 1, 32, 8)),
    ];
    let paired = |t: &mut SharedTiles| (t.a_from_shared, t.paired_runs) = (true, true);
    hopper_cases(device, 104, &cases, paired, "g_4_0 += 2) {");
}

/// Groups of two runs the loop cannot take are typed errors: an odd number of runs, and too
/// few stages for the group in flight and the one waited for.
#[test]
fn paired_runs_need_whole_groups_and_stages() {
    let build = |n: usize, ahead: usize| {
        let mut t = hopper(8, 1, ahead, (true, true, (1, 1), false));
        (t.a_from_shared, t.paired_runs) = (true, true);
        let sched = spmm_24_tc_smem_gpu_schedule(n, t, 32);
        emit_cuda(&kernel(DType::F16), Some(&sched), &spec(128, n, 256))
    };
    let e = build(96, 6).expect_err("3 runs");
    assert!(e.to_string().contains("constant multiple of 2"), "{e}");
    let e = build(128, 1).expect_err("3 stages");
    assert!(e.to_string().contains("at least 4 stages"), "{e}");
    build(128, 2).expect("4 stages");
}
