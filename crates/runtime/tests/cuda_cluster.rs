//! Thread-block clusters and the tensor copy engine's multicast (`TMA_PRELUDE`'s
//! `sptir_cluster_rank`, `sptir_cluster_sync`, `sptir_mbar_arrive_cluster`,
//! `sptir_tma_load_2d_mc`) on hand-written kernels in clusters of 2 and 4 blocks: in the
//! emulator, a tile whose boxes the ranks of a cluster share out lands whole, swizzled, in every
//! block, its global reads counted once; a ring of stages released by "empty" barriers that
//! every block arrives on remotely sums right over several phases; a read of a multicast
//! destination before the wait is a race, bytes announced and never copied a deadlock (naming
//! the cluster barrier's waits), a grid that is not a whole number of clusters a typed error, a
//! rank outside the cluster unsupported; `sptir_cluster_sync` orders shared memory as a barrier
//! and lets a block that returned early go. NVRTC compiles the same source for sm_90a, and on a
//! Hopper GPU the multicast tiles and the ring give what the emulator gives.

use sparsetir_codegen::cuda::{CudaModule, TMA_PRELUDE};
use sparsetir_ir::DType;
use sparsetir_runtime::cuda_emu::check_cluster;
use sparsetir_runtime::{EmuArg, EmuModule, EmuStats, KernelCache, RunError};

mod common;
use common::handwritten::{
    compiled_once, device_map, gpu_ring, hopper_module, kernel, module_of, want_box, want_ring,
    ArgSpec, Hand, Kind,
};

const HEAD: &str = r#"#ifndef SPTIR_EMU
typedef int int32_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#define SPTIR_IN(T) const T* __restrict__
#define SPTIR_OUT(T) T* __restrict__
#define SPTIR_SHARED(T, name, N) __shared__ __align__(1024) T name[N]
#endif
"#;

const SOURCE: &str = r#"
// A tile of CX * k boxes of 64 x 8 16-bit elements (128-byte swizzled), box b at rows 8 b,
// columns 64 c of the view (c: the cluster's index along x), shared out: rank r copies boxes
// r k .. r k + k - 1, multicast to every block of the cluster; every block waits on its own
// barrier, announcing the whole tile's bytes, and writes its tile out (in shared-memory order),
// then a cluster barrier (no block leaves while a peer may still reach its shared memory).
// `split`: a rank multicasts to the others and copies its boxes for itself with a plain copy.
// `early`: 1, thread 0 reads a box of the next rank before the wait; 2, rank 1's thread 0 reads
// one of rank 0. `extra`: bytes announced on top. `bad`: 1, an arrival on rank CX; 2, a copy
// multicast to rank CX; 3, to no rank.
#define SPTIR_MC_TILE(NAME, CX)                                                               \
extern "C" __global__ void __launch_bounds__(128) SPTIR_CLUSTER_DIMS(CX, 1, 1)                \
NAME(SPTIR_TMAP(uint16_t) map, SPTIR_OUT(uint16_t) out, int k, int split, int early,          \
     int extra, int bad) {                                                                    \
  SPTIR_SHARED(uint16_t, tile, 8 * 512);                                                      \
  SPTIR_SHARED(uint64_t, bar, 1);                                                             \
  const int t = threadIdx.x;                                                                  \
  const unsigned r = sptir_cluster_rank();                                                    \
  const int nb = CX * k;                                                                      \
  const unsigned short all = (unsigned short)((1u << CX) - 1u);                               \
  if (t == 0) {                                                                               \
    sptir_mbar_init(bar, 1);                                                                  \
    sptir_mbar_fence_init();                                                                  \
  }                                                                                           \
  sptir_cluster_sync();                                                                       \
  if (t == 0) {                                                                               \
    sptir_mbar_expect_tx(bar, (unsigned)(nb * 1024 + extra));                                 \
    const int c0 = 64 * (int)(blockIdx.x / CX);                                               \
    for (int j = 0; j < k; ++j) {                                                             \
      const int b = (int)r * k + j;                                                           \
      if (split) {                                                                            \
        sptir_tma_load_2d_mc(tile + b * 512, map, bar, c0, 8 * b,                             \
                             (unsigned short)(all & ~(1u << r)));                             \
        sptir_tma_load_2d(tile + b * 512, map, bar, c0, 8 * b);                               \
      } else {                                                                                \
        sptir_tma_load_2d_mc(tile + b * 512, map, bar, c0, 8 * b, all);                       \
      }                                                                                       \
    }                                                                                         \
    if (bad == 1) sptir_mbar_arrive_cluster(bar, CX);                                         \
    if (bad == 2) sptir_tma_load_2d_mc(tile, map, bar, c0, 0, (unsigned short)(1u << CX));    \
    if (bad == 3) sptir_tma_load_2d_mc(tile, map, bar, c0, 0, (unsigned short)0);             \
    if (early == 1 || (early == 2 && r == 1)) {                                               \
      uint16_t v = tile[((r + 1) % CX) * k * 512 + 1];                                        \
      out[0] = v;                                                                             \
    }                                                                                         \
  }                                                                                           \
  sptir_mbar_wait(bar, 0);                                                                    \
  for (int i = t; i < nb * 512; i += blockDim.x) {                                            \
    uint16_t v = tile[i];                                                                     \
    out[blockIdx.x * nb * 512 + i] = v;                                                       \
  }                                                                                           \
  sptir_cluster_sync();                                                                       \
}

SPTIR_MC_TILE(mc_tile_2, 2)
SPTIR_MC_TILE(mc_tile_4, 4)

// A ring of two stages of CX boxes of 32 x 8 floats (128-byte swizzled): iteration `it` fills
// stage it % 2 with the boxes of rows 8 (CX it + r) (rank r copies box r, multicast to the
// cluster; columns 32 c, c the cluster's index along x) and completes on the stage's "full"
// barrier in every block; after a block consumed a stage (its threads' barrier), its thread 0
// arrives on the stage's "empty" barrier of every rank (count CX), and waits on its own before
// it multicasts into the stage again. Thread t sums the stage elements k = t (mod 64).
// `release`: 0 leaves out the arrivals and the wait on "empty". A cluster barrier at the end.
#define SPTIR_MC_RING(NAME, CX)                                                               \
extern "C" __global__ void __launch_bounds__(64) SPTIR_CLUSTER_DIMS(CX, 1, 1)                 \
NAME(SPTIR_TMAP(float) map, SPTIR_OUT(float) out, int iters, int release) {                   \
  SPTIR_SHARED(float, stage, 2 * CX * 256);                                                   \
  SPTIR_SHARED(uint64_t, full, 2);                                                            \
  SPTIR_SHARED(uint64_t, empty, 2);                                                           \
  const int t = threadIdx.x;                                                                  \
  const unsigned r = sptir_cluster_rank();                                                    \
  const unsigned short all = (unsigned short)((1u << CX) - 1u);                               \
  const int c0 = 32 * (int)(blockIdx.x / CX);                                                 \
  if (t == 0) {                                                                               \
    for (int s = 0; s < 2; ++s) {                                                             \
      sptir_mbar_init(full + s, 1);                                                           \
      sptir_mbar_init(empty + s, CX);                                                         \
    }                                                                                         \
    sptir_mbar_fence_init();                                                                  \
  }                                                                                           \
  sptir_cluster_sync();                                                                       \
  if (t == 0) {                                                                               \
    for (int s = 0; s < 2 && s < iters; ++s) {                                                \
      sptir_mbar_expect_tx(full + s, CX * 1024u);                                             \
      sptir_tma_load_2d_mc(stage + (s * CX + (int)r) * 256, map, full + s, c0,                \
                           8 * (s * CX + (int)r), all);                                       \
    }                                                                                         \
  }                                                                                           \
  float acc = 0.0f;                                                                           \
  for (int it = 0; it < iters; ++it) {                                                        \
    const int s = it % 2;                                                                     \
    const unsigned par = (unsigned)((it / 2) % 2);                                            \
    sptir_mbar_wait(full + s, par);                                                           \
    for (int k = t; k < CX * 256; k += 64) {                                                  \
      float v = stage[s * CX * 256 + k];                                                      \
      acc += v;                                                                               \
    }                                                                                         \
    __syncthreads();                                                                          \
    if (t == 0 && it + 2 < iters) {                                                           \
      if (release) {                                                                          \
        for (unsigned q = 0; q < CX; ++q) sptir_mbar_arrive_cluster(empty + s, q);            \
        sptir_mbar_wait(empty + s, par);                                                      \
      }                                                                                       \
      sptir_mbar_expect_tx(full + s, CX * 1024u);                                             \
      sptir_tma_load_2d_mc(stage + (s * CX + (int)r) * 256, map, full + s, c0,                \
                           8 * ((it + 2) * CX + (int)r), all);                                \
    }                                                                                         \
  }                                                                                           \
  out[blockIdx.x * 64 + t] = acc;                                                             \
  sptir_cluster_sync();                                                                       \
}

SPTIR_MC_RING(mc_ring_2, 2)
SPTIR_MC_RING(mc_ring_4, 4)

// Every thread writes its shared element, then (`sync`) a cluster barrier, then reads its
// neighbour's. `leave`: the block of that rank returns at once. `stuck`: rank 1's thread 0
// waits on an mbarrier nobody arrives on, before the cluster barrier. `poke`: after it, thread 0
// arrives on the other rank's mbarrier.
extern "C" __global__ void __launch_bounds__(64) SPTIR_CLUSTER_DIMS(2, 1, 1)
csync_2(SPTIR_OUT(int) out, int sync, int leave, int stuck, int poke) {
  SPTIR_SHARED(int, sh, 64);
  SPTIR_SHARED(uint64_t, bar, 1);
  const int t = threadIdx.x;
  const unsigned r = sptir_cluster_rank();
  if ((int)r == leave) {
    out[blockIdx.x * 64 + t] = -1;
    return;
  }
  sh[t] = t * 10 + (int)blockIdx.x;
  if (stuck && r == 1 && t == 0) {
    sptir_mbar_init(bar, 1);
    sptir_mbar_wait(bar, 0);
  }
  if (sync) sptir_cluster_sync();
  if (poke && t == 0) sptir_mbar_arrive_cluster(bar, 1 - r);
  int v = sh[(t + 1) % 64];
  out[blockIdx.x * 64 + t] = v + 1000 * (int)r;
}

// Thread 0 of every block writes its rank in a 2 x 2 cluster at its linear block id.
extern "C" __global__ void __launch_bounds__(32) SPTIR_CLUSTER_DIMS(2, 2, 1)
ranks_2x2(SPTIR_OUT(int) out) {
  if (threadIdx.x == 0)
    out[blockIdx.x + gridDim.x * blockIdx.y] = (int)sptir_cluster_rank();
}
"#;

fn source() -> String {
    format!("{HEAD}{TMA_PRELUDE}{SOURCE}")
}

/// The test module; `tweak` may change a kernel's metadata (its cluster) by name.
fn test_module_with(tweak: &dyn Fn(&str, &mut [u32; 3])) -> CudaModule {
    use DType::*;
    let tile = |name: &'static str| {
        (
            name,
            vec![
                ("a_map", U16, "uint16_t", Kind::Map([64, 8], 128)),
                ("out", U16, "uint16_t", Kind::Out),
                ("k", I32, "int", Kind::Scalar),
                ("split", I32, "int", Kind::Scalar),
                ("early", I32, "int", Kind::Scalar),
                ("extra", I32, "int", Kind::Scalar),
                ("bad", I32, "int", Kind::Scalar),
            ],
            [if name.ends_with('2') { 2 } else { 4 }, 1, 1],
            128,
        )
    };
    let ring = |name: &'static str| {
        (
            name,
            vec![
                ("x_map", F32, "float", Kind::Map([32, 8], 128)),
                ("sums", F32, "float", Kind::Out),
                ("iters", I32, "int", Kind::Scalar),
                ("release", I32, "int", Kind::Scalar),
            ],
            [if name.ends_with('2') { 2 } else { 4 }, 1, 1],
            64,
        )
    };
    let kernels: Vec<(&str, Vec<ArgSpec<'_>>, [u32; 3], u32)> = vec![
        tile("mc_tile_2"),
        tile("mc_tile_4"),
        ring("mc_ring_2"),
        ring("mc_ring_4"),
        (
            "csync_2",
            vec![
                ("vals", I32, "int", Kind::Out),
                ("sync", I32, "int", Kind::Scalar),
                ("leave", I32, "int", Kind::Scalar),
                ("stuck", I32, "int", Kind::Scalar),
                ("poke", I32, "int", Kind::Scalar),
            ],
            [2, 1, 1],
            64,
        ),
        (
            "ranks_2x2",
            vec![("ranks", I32, "int", Kind::Out)],
            [2, 2, 1],
            32,
        ),
    ];
    let kernels: Vec<Hand<'_>> = kernels
        .into_iter()
        .map(|(name, args, mut cluster, threads)| {
            tweak(name, &mut cluster);
            Hand::new(name, args)
                .threads(i64::from(threads))
                .cluster(cluster)
        })
        .collect();
    module_of("cluster_tests", source(), true, &kernels)
}

fn test_module() -> CudaModule {
    test_module_with(&|_, _| {})
}

fn cache() -> KernelCache {
    common::handwritten::cache("cuda_cluster")
}

/// The test module, compiled once per process; `None` (with a note) without a C++ compiler.
fn module() -> Option<&'static EmuModule> {
    compiled_once(test_module, "cuda_cluster")
}

const COLS: usize = 128;
const ROWS: usize = 64;

fn matrix_u16() -> Vec<u16> {
    (0..COLS * ROWS).map(|i| (i * 7 + 3) as u16).collect()
}

/// The tile every block of cluster `c` (of `cx` blocks) writes: `cx * k` boxes of 64 x 8.
fn want_tile(mat: &[u16], cx: usize, k: usize, c: usize) -> Vec<u16> {
    (0..cx * k)
        .flat_map(|b| want_box(mat, (COLS, ROWS), [64, 8], (64 * c, 8 * b)))
        .collect()
}

/// Runs `mc_tile_<cx>` over two clusters with `(k, split, early, extra, bad)`.
fn run_tile(
    m: &EmuModule,
    cx: usize,
    mat: &[u16],
    (k, split, early, extra, bad): (usize, i32, i32, i32, i32),
    out: &mut [u16],
) -> Result<EmuStats, RunError> {
    m.launch(
        kernel(m, &format!("mc_tile_{cx}")),
        [2 * cx as u32, 1, 1],
        [128, 1, 1],
        &mut [
            EmuArg::tensor_map(mat, COLS as i64, ROWS as i64),
            EmuArg::output(out),
            EmuArg::I32(k as i32),
            EmuArg::I32(split),
            EmuArg::I32(early),
            EmuArg::I32(extra),
            EmuArg::I32(bad),
        ],
    )
}

#[test]
fn multicast_boxes_land_in_every_block_of_the_cluster_read_once() {
    let Some(m) = module() else { return };
    let mat = matrix_u16();
    for (cx, k) in [(2, 1), (2, 3), (4, 1), (4, 2)] {
        for split in [0, 1] {
            let nb = cx * k;
            let mut out = vec![0xffffu16; 2 * cx * nb * 512];
            let stats = run_tile(m, cx, &mat, (k, split, 0, 0, 0), &mut out)
                .unwrap_or_else(|e| panic!("cluster {cx}, k {k}, split {split}: {e}"));
            for b in 0..2 * cx {
                let want = want_tile(&mat, cx, k, b / cx);
                assert!(
                    out[b * nb * 512..(b + 1) * nb * 512] == want[..],
                    "cluster {cx}, k {k}, split {split}: block {b}'s tile"
                );
            }
            // Each box read once per copy (the split copies each box twice: once multicast to
            // the others, once for the issuer), whatever the number of destinations; every
            // block writes its tile out.
            let copies = if split == 1 { 2 } else { 1 };
            let reads = 2 * nb as u64 * 1024 * copies;
            let writes = 2 * cx as u64 * nb as u64 * 1024;
            assert_eq!(
                stats.requested_bytes,
                reads + writes,
                "cluster {cx}, k {k}, split {split}: {stats:?}"
            );
            assert!(stats.sector_bytes >= reads + writes, "{stats:?}");
        }
    }
}

#[test]
fn a_ring_of_stages_released_by_remote_arrivals_sums_right() {
    let Some(m) = module() else { return };
    for cx in [2usize, 4] {
        let k = kernel(m, &format!("mc_ring_{cx}"));
        for iters in [1usize, 2, 3, 6, 7] {
            let (cols, rows) = (64, iters * cx * 8);
            let x: Vec<f32> = (0..cols * rows).map(|i| (i % 29) as f32 - 9.0).collect();
            let mut sums = vec![0.0f32; 2 * cx * 64];
            let stats = m
                .launch(
                    k,
                    [2 * cx as u32, 1, 1],
                    [64, 1, 1],
                    &mut [
                        EmuArg::tensor_map(&x, cols as i64, rows as i64),
                        EmuArg::output(&mut sums),
                        EmuArg::I32(iters as i32),
                        EmuArg::I32(1),
                    ],
                )
                .unwrap_or_else(|e| panic!("cluster {cx}, {iters} iterations: {e}"));
            for b in 0..2 * cx {
                assert_eq!(
                    sums[b * 64..(b + 1) * 64],
                    want_ring(&x, (cols, rows), (cx, 64), iters, b)[..],
                    "cluster {cx}, {iters} iterations, block {b}"
                );
            }
            // Two clusters, each reading its half of the columns once.
            assert_eq!(
                stats.requested_bytes,
                (cols * rows * 4) as u64 + 2 * cx as u64 * 64 * 4,
                "{stats:?}"
            );
        }
        // Without the "empty" barriers, a block multicasts into a stage its peers still read.
        let (cols, rows) = (64, 6 * cx * 8);
        let x: Vec<f32> = (0..cols * rows).map(|i| i as f32).collect();
        let mut sums = vec![0.0f32; 2 * cx * 64];
        let err = m
            .launch(
                k,
                [2 * cx as u32, 1, 1],
                [64, 1, 1],
                &mut [
                    EmuArg::tensor_map(&x, cols as i64, rows as i64),
                    EmuArg::output(&mut sums),
                    EmuArg::I32(6),
                    EmuArg::I32(0),
                ],
            )
            .expect_err("a race");
        match &err {
            RunError::EmuRace { buffer, what, .. } => {
                assert_eq!(buffer, "stage");
                assert!(what.contains("tensor copy"), "{what}");
            }
            other => panic!("cluster {cx}: expected a race, got {other}"),
        }
    }
}

#[test]
fn reading_a_multicast_destination_before_the_wait_is_a_race() {
    let Some(m) = module() else { return };
    let mat = matrix_u16();
    let mut out = vec![0u16; 4 * 2 * 512];
    // Rank 0 reads rank 1's box before rank 1 issued it: rank 1's copy then writes an element
    // a thread of rank 0 read since its last barrier.
    let err = run_tile(m, 2, &mat, (1, 0, 1, 0, 0), &mut out).expect_err("a race");
    match &err {
        RunError::EmuRace {
            buffer,
            what,
            block,
            first,
            second,
            ..
        } => {
            assert_eq!(buffer, "tile");
            assert!(what.contains("accessed since its last barrier"), "{what}");
            assert!(what.contains("rank 1 of the cluster"), "{what}");
            // (Rank 0 of either cluster: they run on two OS threads.)
            assert!([[0, 0, 0], [2, 0, 0]].contains(block), "{block:?}");
            assert_eq!((*first, *second), ([0, 0, 0], [0, 0, 0]));
        }
        other => panic!("expected a race, got {other}"),
    }
    // Rank 1 reads rank 0's box in flight.
    let err = run_tile(m, 2, &mat, (1, 0, 2, 0, 0), &mut out).expect_err("a race");
    match &err {
        RunError::EmuRace {
            buffer,
            what,
            block,
            ..
        } => {
            assert_eq!(buffer, "tile");
            assert!(
                what.contains("multicast by block rank 0 of the cluster"),
                "{what}"
            );
            assert!(what.contains("still copying into"), "{what}");
            assert!([[1, 0, 0], [3, 0, 0]].contains(block), "{block:?}");
        }
        other => panic!("expected a race, got {other}"),
    }
}

#[test]
fn bytes_announced_and_never_copied_deadlock_the_cluster() {
    let Some(m) = module() else { return };
    let mat = matrix_u16();
    let mut out = vec![0u16; 8 * 4 * 512];
    let err = run_tile(m, 4, &mat, (1, 0, 0, 64, 0), &mut out).expect_err("a deadlock");
    match &err {
        RunError::EmuDeadlock { message, .. } => {
            assert!(message.contains("512 on an mbarrier"), "{message}");
            assert!(message.contains("64 more byte(s)"), "{message}");
            assert!(
                message.contains("over the 4 blocks of the cluster"),
                "{message}"
            );
        }
        other => panic!("expected a deadlock, got {other}"),
    }
    // A thread stuck on an mbarrier while the rest of the cluster waits at its barrier.
    let k = kernel(m, "csync_2");
    let mut vals = vec![0i32; 4 * 64];
    let err = m
        .launch(
            k,
            [4, 1, 1],
            [64, 1, 1],
            &mut [
                EmuArg::output(&mut vals),
                EmuArg::I32(1),
                EmuArg::I32(-1),
                EmuArg::I32(1),
                EmuArg::I32(0),
            ],
        )
        .expect_err("a deadlock");
    match &err {
        RunError::EmuDeadlock { message, block, .. } => {
            assert!(
                message.contains("1 on an mbarrier (`bar`[0] of block rank 1 waits"),
                "{message}"
            );
            assert!(
                message.contains("127 in cluster_sync (barrier.cluster)"),
                "{message}"
            );
            assert!([[1, 0, 0], [3, 0, 0]].contains(block), "{block:?}");
        }
        other => panic!("expected a deadlock, got {other}"),
    }
}

#[test]
fn ranks_and_masks_outside_the_cluster_are_unsupported() {
    let Some(m) = module() else { return };
    let mat = matrix_u16();
    let mut out = vec![0u16; 4 * 2 * 512];
    for (bad, what) in [
        (
            1,
            "an mbarrier arrival on block rank 2 of a cluster of 2 block(s)",
        ),
        (2, "multicast to the ranks of mask 0x4 in a cluster of 2"),
        (3, "multicast to the ranks of mask 0x0"),
    ] {
        let err = run_tile(m, 2, &mat, (1, 0, 0, 0, bad), &mut out).expect_err("unsupported");
        match &err {
            RunError::EmuUnsupported { message, .. } => {
                assert!(message.contains(what), "{bad}: {message}")
            }
            other => panic!("{bad}: expected an unsupported operation, got {other}"),
        }
    }
}

#[test]
fn grids_that_are_not_whole_clusters_are_typed_errors() {
    let Some(m) = module() else { return };
    let mat = matrix_u16();
    let mut out = vec![0u16; 8 * 4 * 512];
    for (cx, grid) in [(2usize, [3u32, 1, 1]), (4, [6, 1, 1]), (4, [2, 1, 1])] {
        let err = m
            .launch(
                kernel(m, &format!("mc_tile_{cx}")),
                grid,
                [128, 1, 1],
                &mut [
                    EmuArg::tensor_map(&mat, COLS as i64, ROWS as i64),
                    EmuArg::output(&mut out),
                    EmuArg::I32(1),
                    EmuArg::I32(0),
                    EmuArg::I32(0),
                    EmuArg::I32(0),
                    EmuArg::I32(0),
                ],
            )
            .expect_err("refused");
        match &err {
            RunError::Cluster {
                kernel,
                grid: g,
                cluster,
                message,
            } => {
                assert_eq!(kernel, &format!("mc_tile_{cx}"));
                assert_eq!((*g, *cluster), (grid, [cx as u32, 1, 1]));
                assert!(message.contains("not a multiple"), "{message}");
            }
            other => panic!("{grid:?}: expected a cluster error, got {other}"),
        }
    }
    // The shared check (the GPU path runs it too): clusters of more than 8 blocks, of 0.
    assert!(check_cluster("k", [16, 2, 1], [2, 2, 1]).is_ok());
    assert!(check_cluster("k", [7, 3, 5], [1, 1, 1]).is_ok());
    for (grid, cluster, what) in [
        ([16, 1, 1], [16, 1, 1], "16 blocks in a cluster; at most 8"),
        ([8, 4, 1], [4, 4, 1], "16 blocks in a cluster; at most 8"),
        ([4, 1, 1], [0, 1, 1], "a cluster dimension is 0"),
        (
            [4, 3, 1],
            [2, 2, 1],
            "grid.y = 3 is not a multiple of the cluster's 2",
        ),
    ] {
        match check_cluster("k", grid, cluster) {
            Err(e @ RunError::Cluster { .. }) => {
                assert!(e.to_string().contains(what), "{e}")
            }
            other => panic!("{grid:?} in {cluster:?}: {other:?}"),
        }
    }
    // A kernel whose metadata asks for 16-block clusters is refused at launch.
    let big = test_module_with(&|name, c| {
        if name == "mc_tile_4" {
            *c = [16, 1, 1];
        }
    });
    let (mb, _) = EmuModule::load(&big, &cache()).unwrap_or_else(|e| panic!("{e}"));
    let err = run_tile(&mb, 4, &mat, (1, 0, 0, 0, 0), &mut out).expect_err("refused");
    assert!(
        matches!(&err, RunError::Cluster { message, .. } if message.contains("at most 8")),
        "{err}"
    );
}

#[test]
fn the_cluster_barrier_orders_shared_memory_and_lets_returned_blocks_go() {
    let Some(m) = module() else { return };
    let k = kernel(m, "csync_2");
    let run = |sync: i32, leave: i32, poke: i32, vals: &mut [i32]| {
        m.launch(
            k,
            [4, 1, 1],
            [64, 1, 1],
            &mut [
                EmuArg::output(vals),
                EmuArg::I32(sync),
                EmuArg::I32(leave),
                EmuArg::I32(0),
                EmuArg::I32(poke),
            ],
        )
    };
    for leave in [-1, 0, 1] {
        let mut vals = vec![0i32; 4 * 64];
        run(1, leave, 0, &mut vals).unwrap_or_else(|e| panic!("leave {leave}: {e}"));
        for b in 0..4 {
            let r = b % 2;
            for t in 0..64 {
                let want = if r as i32 == leave {
                    -1
                } else {
                    (((t + 1) % 64) * 10 + b + 1000 * r) as i32
                };
                assert_eq!(
                    vals[b * 64 + t],
                    want,
                    "leave {leave}, block {b}, thread {t}"
                );
            }
        }
    }
    // Without it, a thread reads its neighbour's element written in the same epoch.
    let mut vals = vec![0i32; 4 * 64];
    let err = run(0, -1, 0, &mut vals).expect_err("a race");
    assert!(
        matches!(&err, RunError::EmuRace { buffer, .. } if buffer == "sh"),
        "{err}"
    );
    // An arrival on a block whose threads all returned, and on a barrier a peer never
    // initialized, are unsupported.
    for (leave, what) in [
        (
            1,
            "an mbarrier arrival on block rank 1 of the cluster after all its threads returned",
        ),
        (
            -1,
            "an arrival on an mbarrier never initialized in block rank 1 of the cluster",
        ),
    ] {
        let err = run(1, leave, 1, &mut vals).expect_err("unsupported");
        match &err {
            RunError::EmuUnsupported { message, .. } => {
                assert!(message.contains(what), "{message}")
            }
            other => panic!("leave {leave}: expected an unsupported arrival, got {other}"),
        }
    }
}

#[test]
fn cluster_ranks_follow_the_block_index() {
    let Some(m) = module() else { return };
    let k = kernel(m, "ranks_2x2");
    let mut ranks = vec![-1i32; 6 * 4];
    m.launch(k, [6, 4, 1], [32, 1, 1], &mut [EmuArg::output(&mut ranks)])
        .unwrap_or_else(|e| panic!("{e}"));
    for y in 0..4 {
        for x in 0..6 {
            assert_eq!(
                ranks[y * 6 + x],
                (x % 2 + 2 * (y % 2)) as i32,
                "block ({x}, {y})"
            );
        }
    }
    // Without clusters, every block's rank is 0 (the same body, its metadata one block).
    let flat = test_module_with(&|name, c| {
        if name == "ranks_2x2" {
            *c = [1, 1, 1];
        }
    });
    let (mf, _) = EmuModule::load(&flat, &cache()).unwrap_or_else(|e| panic!("{e}"));
    let mut ranks = vec![-1i32; 3 * 2];
    mf.launch(
        kernel(&mf, "ranks_2x2"),
        [3, 2, 1],
        [32, 1, 1],
        &mut [EmuArg::output(&mut ranks)],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ranks, vec![0; 6]);
}

#[test]
fn the_cluster_kernels_compile_for_sm_90a() {
    common::ptx_holding(
        &source(),
        "cluster.cu",
        "sm_90a",
        &[
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster",
            "barrier.cluster.arrive.release.aligned",
            "barrier.cluster.wait.acquire.aligned",
            "mapa.shared::cluster.u32",
            "mbarrier.arrive.shared::cluster.b64",
            "%cluster_ctarank",
            ".reqnctapercluster 2, 1, 1",
            ".reqnctapercluster 4, 1, 1",
            ".reqnctapercluster 2, 2, 1",
        ],
    );
}

/// The multicast tiles and the ring on a GPU of compute capability 9.0, through the runtime's
/// view check and the driver's encoder, against what the emulator computes.
#[test]
fn multicast_tiles_and_rings_match_the_emulator_on_a_real_gpu() {
    use sparsetir_cuda::{launch, DeviceBuffer, LaunchArg};
    let Some((ctx, dev_module)) = hopper_module(&source(), "cluster.cu", true, "the clusters")
    else {
        return;
    };
    let tm = test_module();
    // The tiles.
    let mat = matrix_u16();
    let bytes: Vec<u8> = mat.iter().flat_map(|v| v.to_le_bytes()).collect();
    let dev = DeviceBuffer::from_host(&ctx, &bytes).expect("copy in");
    for (cx, k, split) in [(2usize, 1usize, 0), (2, 3, 1), (4, 2, 0), (4, 1, 1)] {
        let name = format!("mc_tile_{cx}");
        let map = device_map(&ctx, &tm, &name, &dev, (COLS, ROWS));
        let n = 2 * cx * cx * k * 512;
        let out = DeviceBuffer::zeroed(&ctx, n * 2).expect("out");
        let f = dev_module.function(&name).expect("function");
        launch(
            &f,
            [2 * cx as u32, 1, 1],
            [128, 1, 1],
            0,
            &[
                LaunchArg::TensorMap(&map),
                LaunchArg::Ptr(&out),
                LaunchArg::I32(k as i32),
                LaunchArg::I32(split),
                LaunchArg::I32(0),
                LaunchArg::I32(0),
                LaunchArg::I32(0),
            ],
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let got: Vec<u16> = out
            .to_host()
            .expect("copy out")
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect();
        let want: Vec<u16> = (0..2 * cx)
            .flat_map(|b| want_tile(&mat, cx, k, b / cx))
            .collect();
        assert!(
            got == want,
            "{name}, k {k}, split {split}: the tiles differ"
        );
        if let Some(m) = module() {
            let mut emu = vec![0u16; n];
            run_tile(m, cx, &mat, (k, split, 0, 0, 0), &mut emu).unwrap_or_else(|e| panic!("{e}"));
            assert!(emu == got, "{name}: the emulator differs from the GPU");
        }
    }
    // The rings.
    for cx in [2usize, 4] {
        let name = format!("mc_ring_{cx}");
        let iters = 7usize;
        let view = (64, iters * cx * 8);
        let x: Vec<f32> = (0..view.0 * view.1)
            .map(|i| (i % 29) as f32 - 9.0)
            .collect();
        let got = gpu_ring((&ctx, &dev_module, &tm), &name, &x, view, cx, 64, iters, 1);
        for b in 0..2 * cx {
            assert_eq!(
                got[b * 64..(b + 1) * 64],
                want_ring(&x, view, (cx, 64), iters, b)[..],
                "{name}, block {b}"
            );
        }
    }
}
