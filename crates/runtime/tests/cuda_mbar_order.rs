//! mbarrier arrivals and waits, and `__syncwarp`, as synchronization in the emulator's race
//! check (vector clocks, `cuda_emu/prelude.hpp`), on hand-written kernels with no
//! `__syncthreads` between the accesses they order: a thread's write handed to another thread by
//! an arrival and a wait (also through a relay thread, and for an `atomicAdd`) is no race, the
//! same read without the wait, waiting on the wrong parity or after a store that follows the
//! arrival is; a write after two readers needs both released, a read ordered after an atomic
//! update orders no other reader after it; `__syncwarp` orders the lanes of a warp, not two
//! warps; a ring of stages that each warp releases on an "empty"
//! mbarrier (`__syncwarp`, then its lane 0 arrives) and one thread refills with a tensor copy
//! after waiting on it sums right, while a refill without that wait, a wait on the wrong
//! parity, a release without `__syncwarp`, a lane reading after its warp's release, or a warp
//! arriving twice while another never does is a race (a warp that never arrives a deadlock);
//! the same ring over clusters of 2 and 4 blocks (every warp arriving on every rank's empty
//! barrier, each block multicasting its box) sums right, and a multicast refill into a stage a
//! peer's warp did not release to the issuer is a race. NVRTC compiles the source for sm_90a,
//! and on a Hopper GPU the rings give what the emulator gives.

use sparsetir_codegen::cuda::{CudaModule, TMA_PRELUDE};
use sparsetir_ir::DType;
use sparsetir_runtime::{EmuArg, EmuModule, RunError};

mod common;
use common::handwritten::{
    compiled_once, gpu_ring, hopper_module, kernel, module_of, want_ring, ArgSpec, Hand, Kind,
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
// Thread `a` stores to `sh[0]` (`op` 0) or adds to it atomically (1), then arrives on `bar`
// (`op` 2: stores, arrives, then stores again)
// (one arrival a phase); thread `b` (mode 0) waits for the phase and reads it, or reads it
// without waiting (1), or after a wait on the wrong parity (2: it returns at once when the
// phase has not completed, else waits for the next one). `relay`
// (>= 0): that thread waits on `bar` and arrives on `bar2`, the one `b` waits on instead.
extern "C" __global__ void __launch_bounds__(64) handoff(SPTIR_OUT(int) out, int a, int b,
    int relay, int op, int mode) {
  SPTIR_SHARED(int, sh, 4);
  SPTIR_SHARED(uint64_t, bars, 2);
  const int t = threadIdx.x;
  if (t == 0) {
    sptir_mbar_init(bars + 0, 1);
    sptir_mbar_init(bars + 1, 1);
    sptir_mbar_fence_init();
  }
  __syncthreads();
  if (t == a) {
    if (op == 1) atomicAdd(sh + 0, 40 + a);
    else sh[0] = 40 + a;
    sptir_mbar_arrive(bars + 0);
    if (op == 2) sh[0] = 41 + a;
  }
  if (t == relay) {
    sptir_mbar_wait(bars + 0, 0u);
    sptir_mbar_arrive(bars + 1);
  }
  if (t == b) {
    const int on = relay >= 0 ? 1 : 0;
    if (mode == 0) sptir_mbar_wait(bars + on, 0u);
    if (mode == 2) sptir_mbar_wait(bars + on, 1u);
    int v = sh[0];
    out[0] = v;
  }
}

// Threads `r1` and `r2` read `sh[0]` (`op` 0) or add to it atomically (1); both arrive on `bar`
// (`rel` < 0: two arrivals a phase), or only thread `rel` (one arrival); thread `w` waits for
// the phase and stores to `sh[0]`.
extern "C" __global__ void __launch_bounds__(64) readers(SPTIR_OUT(int) out, int r1, int r2,
    int rel, int w, int op) {
  SPTIR_SHARED(int, sh, 4);
  SPTIR_SHARED(uint64_t, bar, 1);
  const int t = threadIdx.x;
  if (t == 0) {
    sptir_mbar_init(bar, rel < 0 ? 2u : 1u);
    sptir_mbar_fence_init();
  }
  __syncthreads();
  if (t == r1 || t == r2) {
    if (op == 0) {
      int v = sh[0];
      out[t] = v;
    } else {
      atomicAdd(sh + 0, 1);
    }
    if (rel < 0 || t == rel) sptir_mbar_arrive(bar);
  }
  if (t == w) {
    sptir_mbar_wait(bar, 0u);
    sh[0] = 7;
  }
}

// Thread `u` adds to `sh[0]` atomically and arrives on `bar` (one arrival); thread `t1` waits
// for the phase and reads `sh[0]`; then thread `x` reads it, after waiting too when `xwait`.
extern "C" __global__ void __launch_bounds__(64) mixed(SPTIR_OUT(int) out, int u, int t1,
    int x, int xwait) {
  SPTIR_SHARED(int, sh, 4);
  SPTIR_SHARED(uint64_t, bar, 1);
  const int t = threadIdx.x;
  if (t == 0) {
    sptir_mbar_init(bar, 1u);
    sptir_mbar_fence_init();
  }
  __syncthreads();
  if (t == u) {
    atomicAdd(sh + 0, 5);
    sptir_mbar_arrive(bar);
  }
  if (t == t1 || (t == x && xwait)) sptir_mbar_wait(bar, 0u);
  if (t == t1 || t == x) {
    int v = sh[0];
    out[t] = v;
  }
}

// Thread `wr` stores to `sh[0]`; every thread reaches `__syncwarp` (when `sync`); thread `rd`
// reads `sh[0]`. No mbarrier at all.
extern "C" __global__ void __launch_bounds__(64) warp_pass(SPTIR_OUT(int) out, int wr, int rd,
    int sync) {
  SPTIR_SHARED(int, sh, 4);
  const int t = threadIdx.x;
  if (t == wr) sh[0] = 70 + t;
  if (sync) __syncwarp();
  if (t == rd) {
    int v = sh[0];
    out[t] = v;
  }
}

// A ring of two stages of 32 x 8 floats (1024 bytes, 128-byte swizzled, the boxes of rows
// 8 it .. 8 it + 7, columns 32 b of the view, b the block), each with a "full" barrier (the copying thread's expect_tx
// and the box's bytes) and an "empty" one (one arrival per warp). Iteration `it` waits for its
// stage's full phase and every thread sums the stage elements k = t (mod 64) (each read by two
// threads, of warps w and w + 2); when a
// later copy reuses the stage, each warp releases it (`__syncwarp`, then lane 0 arrives on
// its empty barrier) and thread 0 waits for that phase before it refills the stage. No
// `__syncthreads` after the barriers' initialization. `mode`: 0 as said; 1 thread 0 refills
// without waiting; 2 it waits on the wrong parity; 3 no `__syncwarp` before the arrival; 4
// lane 1 reads the stage again after its warp's release; 5 warp 1 never arrives; 6 warp 3
// arrives twice and warp 1 never (the count is met).
extern "C" __global__ void __launch_bounds__(128) warp_ring(SPTIR_TMAP(float) map,
    SPTIR_OUT(float) out, int iters, int mode) {
  SPTIR_SHARED(float, stage, 2 * 256);
  SPTIR_SHARED(uint64_t, full, 2);
  SPTIR_SHARED(uint64_t, empty, 2);
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int nt = (int)blockDim.x, c0 = 32 * (int)blockIdx.x;
  if (t == 0) {
    for (int s = 0; s < 2; ++s) {
      sptir_mbar_init(full + s, 1);
      sptir_mbar_init(empty + s, (unsigned)(nt / 32));
    }
    sptir_mbar_fence_init();
  }
  __syncthreads();
  if (t == 0) {
    for (int s = 0; s < 2 && s < iters; ++s) {
      sptir_mbar_expect_tx(full + s, 1024u);
      sptir_tma_load_2d(stage + s * 256, map, full + s, c0, s * 8);
    }
  }
  float acc = 0.0f;
  for (int it = 0; it < iters; ++it) {
    const int s = it % 2;
    const unsigned par = (unsigned)((it / 2) % 2);
    sptir_mbar_wait(full + s, par);
    for (int k = t % 64; k < 256; k += 64) {
      float v = stage[s * 256 + k];
      acc += v;
    }
    if (it + 2 < iters) {
      if (mode != 3) __syncwarp();
      int arrivals = 1;
      if (mode == 5 && warp == 1) arrivals = 0;
      if (mode == 6 && warp == 3) arrivals = 2;
      if (mode == 6 && warp == 1) arrivals = 0;
      if (lane == 0)
        for (int j = 0; j < arrivals; ++j) sptir_mbar_arrive(empty + s);
      if (mode == 4 && lane == 1) {
        float v = stage[s * 256 + 1];
        acc += 0.0f * v;
      }
      if (t == 0) {
        if (mode == 2) sptir_mbar_wait(empty + s, par ^ 1u);
        else if (mode != 1) sptir_mbar_wait(empty + s, par);
        sptir_mbar_expect_tx(full + s, 1024u);
        sptir_tma_load_2d(stage + s * 256, map, full + s, c0, (it + 2) * 8);
      }
    }
  }
  out[blockIdx.x * nt + t] = acc;
}

// The ring over a cluster of CX blocks of 128 threads: a stage is CX boxes of 32 x 8 floats,
// rank r copying box r (rows 8 (CX it + r), columns 32 c, c the cluster's index along x) and
// multicasting it to the cluster; the full barrier of every block counts the bytes of all CX
// boxes (every thread summing the elements k = t (mod 64)), the empty barrier of every block
// 4 CX arrivals: each warp of each block, after
// `__syncwarp`, arrives by its lane 0 on the stage's empty barrier of every rank; thread 0 of
// each block waits on its own before it multicasts into the stage again. A cluster barrier at
// the end. `mode`: 0 as said; 1 thread 0 does not wait; 2 warp 1 arrives on its own rank's
// barrier where it should arrive on the next rank's (every count met).
#define SPTIR_WARP_MC_RING(NAME, CX)                                                          \
extern "C" __global__ void __launch_bounds__(128) SPTIR_CLUSTER_DIMS(CX, 1, 1)                \
NAME(SPTIR_TMAP(float) map, SPTIR_OUT(float) out, int iters, int mode) {                      \
  SPTIR_SHARED(float, stage, 2 * CX * 256);                                                   \
  SPTIR_SHARED(uint64_t, full, 2);                                                            \
  SPTIR_SHARED(uint64_t, empty, 2);                                                           \
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;                                    \
  const int nt = (int)blockDim.x;                                                             \
  const unsigned r = sptir_cluster_rank();                                                    \
  const unsigned short all = (unsigned short)((1u << CX) - 1u);                               \
  const int c0 = 32 * (int)(blockIdx.x / CX);                                                 \
  if (t == 0) {                                                                               \
    for (int s = 0; s < 2; ++s) {                                                             \
      sptir_mbar_init(full + s, 1);                                                           \
      sptir_mbar_init(empty + s, (unsigned)(CX * nt / 32));                                   \
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
    for (int k = t % 64; k < CX * 256; k += 64) {                                             \
      float v = stage[s * CX * 256 + k];                                                      \
      acc += v;                                                                               \
    }                                                                                         \
    if (it + 2 < iters) {                                                                     \
      __syncwarp();                                                                           \
      if (lane == 0)                                                                          \
        for (unsigned q = 0; q < CX; ++q) {                                                   \
          const bool stray = mode == 2 && warp == 1 && q == (r + 1) % CX;                     \
          sptir_mbar_arrive_cluster(empty + s, stray ? r : q);                                \
        }                                                                                     \
      if (t == 0) {                                                                           \
        if (mode != 1) sptir_mbar_wait(empty + s, par);                                       \
        sptir_mbar_expect_tx(full + s, CX * 1024u);                                           \
        sptir_tma_load_2d_mc(stage + (s * CX + (int)r) * 256, map, full + s, c0,              \
                             8 * ((it + 2) * CX + (int)r), all);                              \
      }                                                                                       \
    }                                                                                         \
  }                                                                                           \
  out[blockIdx.x * nt + t] = acc;                                                             \
  sptir_cluster_sync();                                                                       \
}

SPTIR_WARP_MC_RING(warp_mc_ring_2, 2)
SPTIR_WARP_MC_RING(warp_mc_ring_4, 4)
"#;

fn source() -> String {
    format!("{HEAD}{TMA_PRELUDE}{SOURCE}")
}

fn test_module() -> CudaModule {
    use DType::*;
    let ring = |name: &'static str, cluster: u32| {
        (
            name,
            vec![
                ("x_map", F32, "float", Kind::Map([32, 8], 128)),
                ("sums", F32, "float", Kind::Out),
                ("iters", I32, "int", Kind::Scalar),
                ("mode", I32, "int", Kind::Scalar),
            ],
            [cluster, 1, 1],
            128,
        )
    };
    let kernels: Vec<(&str, Vec<ArgSpec<'_>>, [u32; 3], u32)> = vec![
        (
            "handoff",
            vec![
                ("vals", I32, "int", Kind::Out),
                ("a", I32, "int", Kind::Scalar),
                ("b", I32, "int", Kind::Scalar),
                ("relay", I32, "int", Kind::Scalar),
                ("op", I32, "int", Kind::Scalar),
                ("mode", I32, "int", Kind::Scalar),
            ],
            [1, 1, 1],
            64,
        ),
        (
            "readers",
            vec![
                ("vals", I32, "int", Kind::Out),
                ("r1", I32, "int", Kind::Scalar),
                ("r2", I32, "int", Kind::Scalar),
                ("rel", I32, "int", Kind::Scalar),
                ("w", I32, "int", Kind::Scalar),
                ("op", I32, "int", Kind::Scalar),
            ],
            [1, 1, 1],
            64,
        ),
        (
            "mixed",
            vec![
                ("vals", I32, "int", Kind::Out),
                ("u", I32, "int", Kind::Scalar),
                ("t1", I32, "int", Kind::Scalar),
                ("x", I32, "int", Kind::Scalar),
                ("xwait", I32, "int", Kind::Scalar),
            ],
            [1, 1, 1],
            64,
        ),
        (
            "warp_pass",
            vec![
                ("vals", I32, "int", Kind::Out),
                ("wr", I32, "int", Kind::Scalar),
                ("rd", I32, "int", Kind::Scalar),
                ("sync", I32, "int", Kind::Scalar),
            ],
            [1, 1, 1],
            64,
        ),
        ring("warp_ring", 1),
        ring("warp_mc_ring_2", 2),
        ring("warp_mc_ring_4", 4),
    ];
    let kernels: Vec<Hand<'_>> = kernels
        .into_iter()
        .map(|(name, args, cluster, threads)| {
            Hand::new(name, args)
                .threads(i64::from(threads))
                .cluster(cluster)
        })
        .collect();
    module_of("mbar_order_tests", source(), true, &kernels)
}

/// The test module, compiled once per process; `None` (with a note) without a C++ compiler.
fn module() -> Option<&'static EmuModule> {
    compiled_once(test_module, "cuda_mbar_order")
}

/// The race a launch reported: (buffer, what, first thread, second thread).
fn race(err: &RunError) -> (&str, &str, [u32; 3], [u32; 3]) {
    match err {
        RunError::EmuRace {
            buffer,
            what,
            first,
            second,
            ..
        } => (buffer.as_str(), what.as_str(), *first, *second),
        other => panic!("expected a race, got {other}"),
    }
}

/// Runs `handoff` (one block of 64 threads) with `(a, b, relay, op, mode)`: the value `b` read.
fn handoff(
    m: &EmuModule,
    (a, b, relay, op, mode): (i32, i32, i32, i32, i32),
) -> Result<i32, RunError> {
    let mut vals = vec![-1i32; 1];
    m.launch(
        kernel(m, "handoff"),
        [1, 1, 1],
        [64, 1, 1],
        &mut [
            EmuArg::output(&mut vals),
            EmuArg::I32(a),
            EmuArg::I32(b),
            EmuArg::I32(relay),
            EmuArg::I32(op),
            EmuArg::I32(mode),
        ],
    )?;
    Ok(vals[0])
}

#[test]
fn a_write_handed_over_by_an_arrival_and_a_wait_is_no_race() {
    let Some(m) = module() else { return };
    // The writer before and after the reader in the emulator's order, in one warp and in two;
    // a plain store and an atomicAdd; directly and through a relay thread.
    for (a, b) in [(0, 1), (5, 2), (3, 40), (50, 33)] {
        for op in [0, 1] {
            for relay in [-1, 20] {
                let v = handoff(m, (a, b, relay, op, 0))
                    .unwrap_or_else(|e| panic!("a {a}, b {b}, relay {relay}, op {op}: {e}"));
                assert_eq!(v, 40 + a, "a {a}, b {b}, relay {relay}, op {op}");
            }
        }
    }
}

#[test]
fn reading_without_the_wait_or_on_the_wrong_parity_is_a_race() {
    let Some(m) = module() else { return };
    // A store after the arrival is not handed over by it.
    for (a, b) in [(0, 1), (5, 2), (3, 40), (50, 33)] {
        let err = handoff(m, (a, b, -1, 2, 0)).expect_err("a race");
        let (buffer, text, first, second) = race(&err);
        assert_eq!(buffer, "sh");
        assert_eq!(
            (first[0], second[0]),
            (a as u32, b as u32),
            "a {a}, b {b}: {err}"
        );
        assert!(
            text.starts_with("a read after another thread's write"),
            "{text}"
        );
    }
    for (a, b) in [(0, 1), (5, 2), (3, 40), (50, 33)] {
        for op in [0, 1] {
            for relay in [-1, 20] {
                // (Waiting on the wrong parity without a relay.)
                for mode in if relay < 0 { vec![1, 2] } else { vec![1] } {
                    let what = format!("a {a}, b {b}, relay {relay}, op {op}, mode {mode}");
                    let err = handoff(m, (a, b, relay, op, mode)).expect_err(&what);
                    if mode == 2 && a < b {
                        // The phase of parity 0 completed before the reader's wait for parity
                        // 1: it waits for the next phase, which never comes.
                        assert!(matches!(err, RunError::EmuDeadlock { .. }), "{what}: {err}");
                        continue;
                    }
                    let (buffer, text, first, second) = race(&err);
                    assert_eq!(buffer, "sh", "{what}");
                    // The reader first (before the write), or the writer first.
                    let (x, y) = if b < a { (b, a) } else { (a, b) };
                    assert_eq!((first[0], second[0]), (x as u32, y as u32), "{what}: {err}");
                    let want = match (b < a, op) {
                        (true, 0) => "a write after another thread's read",
                        (true, _) => "an atomicAdd after another thread's read",
                        (false, 0) => "a read after another thread's write",
                        (false, _) => "a read after another thread's atomicAdd",
                    };
                    assert!(text.starts_with(want), "{what}: {text}");
                    assert!(text.contains("unordered by mbarriers"), "{what}: {text}");
                }
            }
        }
    }
}

/// Runs a kernel of one block of 64 threads on an output of 64 ints and the given scalars.
fn run_small(m: &EmuModule, name: &str, scalars: &[i32]) -> Result<Vec<i32>, RunError> {
    let mut vals = vec![-1i32; 64];
    let mut args = vec![EmuArg::output(&mut vals)];
    args.extend(scalars.iter().map(|v| EmuArg::I32(*v)));
    m.launch(kernel(m, name), [1, 1, 1], [64, 1, 1], &mut args)?;
    drop(args);
    Ok(vals)
}

#[test]
fn a_write_after_several_readers_needs_every_one_released() {
    let Some(m) = module() else { return };
    // (r1, r2, w): the writer waiting before both readers ran, or after (the emulator runs
    // the threads in order of their ids); in one warp and in two.
    for (r1, r2, w) in [
        (3, 9, 20),
        (3, 40, 0),
        (10, 50, 63),
        (33, 50, 5),
        (1, 2, 60),
    ] {
        for op in [0, 1] {
            let what = format!("r1 {r1}, r2 {r2}, w {w}, op {op}");
            run_small(m, "readers", &[r1, r2, -1, w, op]).unwrap_or_else(|e| panic!("{what}: {e}"));
            // Only one reader released: the other one (read first, or last) races.
            for (rel, other) in [(r2, r1), (r1, r2)] {
                let err = run_small(m, "readers", &[r1, r2, rel, w, op]).expect_err(&what);
                let (buffer, text, first, second) = race(&err);
                assert_eq!(buffer, "sh", "{what}");
                assert_eq!(
                    (first[0], second[0]),
                    (other as u32, w as u32),
                    "{what}: {err}"
                );
                let want = if op == 0 {
                    "a write after another thread's read"
                } else {
                    "a write after another thread's atomicAdd"
                };
                assert!(text.starts_with(want), "{what}: {text}");
            }
        }
    }
}

#[test]
fn a_read_ordered_after_an_atomic_update_does_not_order_another_reader() {
    let Some(m) = module() else { return };
    for (u, t1, x) in [(2, 5, 9), (2, 40, 50), (30, 31, 62)] {
        let vals = run_small(m, "mixed", &[u, t1, x, 1]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((vals[t1 as usize], vals[x as usize]), (5, 5));
        let err = run_small(m, "mixed", &[u, t1, x, 0]).expect_err("a race");
        let (buffer, text, first, second) = race(&err);
        assert_eq!(buffer, "sh");
        assert_eq!((first[0], second[0]), (u as u32, x as u32), "{err}");
        assert!(
            text.starts_with("a read after another thread's atomicAdd"),
            "{text}"
        );
    }
}

#[test]
fn syncwarp_orders_the_lanes_of_a_warp_only() {
    let Some(m) = module() else { return };
    // Within a warp, either lane first.
    for (wr, rd) in [(0, 5), (7, 2), (33, 63)] {
        let vals = run_small(m, "warp_pass", &[wr, rd, 1]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(vals[rd as usize], 70 + wr);
        let err = run_small(m, "warp_pass", &[wr, rd, 0]).expect_err("a race");
        assert_eq!(race(&err).0, "sh", "{err}");
    }
    // Across warps, __syncwarp orders nothing.
    for (wr, rd) in [(0, 40), (40, 3)] {
        let err = run_small(m, "warp_pass", &[wr, rd, 1]).expect_err("a race");
        let (buffer, _, first, second) = race(&err);
        assert_eq!(buffer, "sh");
        assert_eq!((first[0], second[0]), (wr as u32, rd as u32));
    }
}

/// Runs the ring of `cx` blocks a cluster (`warp_ring` for 1) over two clusters: the sums.
fn run_ring(
    m: &EmuModule,
    cx: usize,
    x: &[f32],
    (cols, rows): (usize, usize),
    iters: usize,
    mode: i32,
) -> Result<Vec<f32>, RunError> {
    let name = if cx == 1 {
        "warp_ring".to_string()
    } else {
        format!("warp_mc_ring_{cx}")
    };
    let mut sums = vec![0.0f32; 2 * cx * 128];
    m.launch(
        kernel(m, &name),
        [2 * cx as u32, 1, 1],
        [128, 1, 1],
        &mut [
            EmuArg::tensor_map(x, cols as i64, rows as i64),
            EmuArg::output(&mut sums),
            EmuArg::I32(iters as i32),
            EmuArg::I32(mode),
        ],
    )?;
    Ok(sums)
}

fn ring_input(cx: usize, iters: usize) -> (Vec<f32>, (usize, usize)) {
    let (cols, rows) = (64, iters * cx * 8);
    let x = (0..cols * rows).map(|i| (i % 29) as f32 - 9.0).collect();
    (x, (cols, rows))
}

#[test]
fn stages_released_by_warp_arrivals_sum_right() {
    let Some(m) = module() else { return };
    for cx in [1usize, 2, 4] {
        for iters in [1usize, 2, 3, 6, 7] {
            let (x, view) = ring_input(cx, iters);
            let sums = run_ring(m, cx, &x, view, iters, 0)
                .unwrap_or_else(|e| panic!("cluster {cx}, {iters} iterations: {e}"));
            for b in 0..2 * cx {
                assert_eq!(
                    sums[b * 128..(b + 1) * 128],
                    want_ring(&x, view, (cx, 128), iters, b)[..],
                    "cluster {cx}, {iters} iterations, block {b}"
                );
            }
        }
    }
}

#[test]
fn a_refill_before_every_warp_released_the_stage_is_a_race() {
    let Some(m) = module() else { return };
    let (x, view) = ring_input(1, 6);
    // (mode, what the race names): no wait, the wrong parity, no __syncwarp, a lane reading
    // after the release, a warp arriving twice for one that never does.
    for (mode, reader_lane_0) in [
        (1, None),
        (2, None),
        (3, Some(false)),
        (4, Some(false)),
        (6, None),
    ] {
        let err = run_ring(m, 1, &x, view, 6, mode).expect_err("a race");
        let (buffer, text, first, second) = race(&err);
        assert_eq!(buffer, "stage", "mode {mode}: {err}");
        assert!(
            text.starts_with("a write after another thread's read"),
            "mode {mode}: {text}"
        );
        assert!(
            text.contains("unordered by mbarriers"),
            "mode {mode}: {text}"
        );
        // The copying thread second, a reader first: of the warp that did not arrive, or a
        // lane other than 0 when the lanes' reads did not reach the arrival.
        assert_eq!(second, [0, 0, 0], "mode {mode}");
        if mode == 6 {
            // Read by a lane of warp 1 (before a lane of warp 3, which did release it).
            assert_eq!(first[0] / 32, 1, "mode {mode}: {err}");
        }
        if reader_lane_0 == Some(false) {
            assert_ne!(first[0] % 32, 0, "mode {mode}: {err}");
        }
        if mode == 4 {
            assert_eq!(first[0] % 32, 1, "mode {mode}: {err}");
        }
    }
    // A warp that never arrives: the copying thread waits for good.
    let err = run_ring(m, 1, &x, view, 6, 5).expect_err("a deadlock");
    match &err {
        RunError::EmuDeadlock { message, .. } => {
            assert!(
                message.contains("`empty`[0] waits for 1 more arrival(s)"),
                "{message}"
            )
        }
        other => panic!("expected a deadlock, got {other}"),
    }
}

#[test]
fn a_multicast_refill_before_every_peer_warp_released_the_stage_is_a_race() {
    let Some(m) = module() else { return };
    for cx in [2usize, 4] {
        let (x, view) = ring_input(cx, 6);
        for mode in [1, 2] {
            let err = run_ring(m, cx, &x, view, 6, mode).expect_err("a race");
            let (buffer, text, _, second) = race(&err);
            assert_eq!(buffer, "stage", "cluster {cx}, mode {mode}: {err}");
            // A copy thread's refill (a local copy or a multicast into a peer).
            assert_eq!(second, [0, 0, 0], "cluster {cx}, mode {mode}: {err}");
            // (Without the wait, the refill may also meet the previous one still in flight in
            // a block that has not waited for it yet.)
            assert!(
                text.starts_with("a write after another thread's read")
                    || text.contains("not released to the issuer")
                    || text.contains("a tensor copy is still copying into"),
                "cluster {cx}, mode {mode}: {text}"
            );
            if mode == 2 {
                // Only the peer's warp 1 did not release the stage to the issuer: a multicast.
                assert!(
                    text.contains("not released to the issuer"),
                    "cluster {cx}: {text}"
                );
            }
        }
    }
}

#[test]
fn the_mbarrier_order_kernels_compile_for_sm_90a() {
    common::ptx_holding(
        &source(),
        "mbar_order.cu",
        "sm_90a",
        &[
            "mbarrier.arrive.shared::cta.b64",
            "mbarrier.arrive.shared::cluster.b64",
            "mbarrier.try_wait.parity.shared::cta.b64",
            "bar.warp.sync",
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster",
        ],
    );
}

/// The rings and the hand-over on a GPU of compute capability 9.0, against what the emulator
/// computes.
#[test]
fn the_rings_match_the_emulator_on_a_real_gpu() {
    let Some((ctx, dev_module)) = hopper_module(&source(), "mbar_order.cu", true, "the rings")
    else {
        return;
    };
    let tm = test_module();
    for cx in [1usize, 2, 4] {
        let name = if cx == 1 {
            "warp_ring".to_string()
        } else {
            format!("warp_mc_ring_{cx}")
        };
        let iters = 7usize;
        let (x, view) = ring_input(cx, iters);
        let got = gpu_ring((&ctx, &dev_module, &tm), &name, &x, view, cx, 128, iters, 0);
        for b in 0..2 * cx {
            assert_eq!(
                got[b * 128..(b + 1) * 128],
                want_ring(&x, view, (cx, 128), iters, b)[..],
                "{name}, block {b}"
            );
        }
        if let Some(m) = module() {
            let emu = run_ring(m, cx, &x, view, iters, 0).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(emu, got, "{name}: the emulator differs from the GPU");
        }
    }
}
