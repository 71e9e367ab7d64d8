//! The CUDA emulator on hand-written sources that follow the writer's contract
//! (`sparsetir_codegen::cuda`): values against Rust computations, the race, bounds and deadlock
//! checks, traffic counting and atomics. All kernels live in one module, compiled once (through
//! the cache under the target directory). Skipped, with a note, when no C++ compiler runs.

use std::path::PathBuf;

use sparsetir_codegen::cuda::{CudaModule, CP_ASYNC_PRELUDE};
use sparsetir_ir::DType;
use sparsetir_runtime::{EmuArg, EmuModule, KernelCache, RunError};

mod common;
use common::handwritten::{self, compiled_once, kernel, ArgSpec, Hand, Kind};

const SOURCE: &str = r#"#ifndef SPTIR_EMU
#define SPTIR_IN(T) const T* __restrict__
#define SPTIR_OUT(T) T* __restrict__
#define SPTIR_SHARED(T, name, N) __shared__ T name[N]
typedef int int32_t;
typedef long long int64_t;
#endif

extern "C" __global__ void __launch_bounds__(128) saxpy(SPTIR_IN(float) x, SPTIR_OUT(float) y, float a, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    y[i] = a * x[i] + y[i];
  }
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  return v;
}

extern "C" __global__ void __launch_bounds__(128) row_sum(SPTIR_IN(int32_t) indptr, SPTIR_IN(float) val, SPTIR_OUT(float) out, int m) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= m) return;
  float acc = 0.0f;
  for (int k = indptr[row] + lane; k < indptr[row + 1]; k += 32) acc += __ldg(val + k);
  acc = warp_sum(acc);
  if (lane == 0) out[row] = acc;
}

extern "C" __global__ void __launch_bounds__(256) block_sum(SPTIR_IN(float) x, SPTIR_OUT(float) out, int n) {
  SPTIR_SHARED(float, part, 256);
  int i = blockIdx.x * 256 + threadIdx.x;
  part[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int s = 128; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(out + blockIdx.x, part[0]);
}

extern "C" __global__ void __launch_bounds__(256) block_sum_racy(SPTIR_IN(float) x, SPTIR_OUT(float) out, int n) {
  SPTIR_SHARED(float, part, 256);
  int i = blockIdx.x * 256 + threadIdx.x;
  part[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int s = 128; s > 0; s >>= 1) {
    if ((int)threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
  }
  if (threadIdx.x == 0) atomicAdd(out + blockIdx.x, part[0]);
}

// Every thread adds into its block's element of a global buffer without atomics: a race.
extern "C" __global__ void __launch_bounds__(64) block_sum_global_racy(SPTIR_IN(float) x, SPTIR_OUT(float) out, int n) {
  int i = blockIdx.x * 64 + threadIdx.x;
  if (i < n) out[blockIdx.x] += x[i];
}

// One thread per block. Mode 0: every block writes out[0]; 1: block 0 writes out[0], the others
// read it; 2: block 0 adds into out[0] atomically, block 1 writes it (the only pair, in
// whatever order the blocks finish); 3: every block adds into out[0] atomically and writes its
// own out[1 + block] (no race).
extern "C" __global__ void __launch_bounds__(1) blocks(SPTIR_OUT(float) out, int mode) {
  int b = blockIdx.x;
  if (mode == 0) out[0] = (float)b;
  if (mode == 1) {
    if (b == 0) out[0] = 1.0f;
    else out[1 + b] = out[0];
  }
  if (mode == 2) {
    if (b == 0) atomicAdd(&out[0], 1.0f);
    else if (b == 1) out[0] = 2.0f;
  }
  if (mode == 3) {
    atomicAdd(&out[0], 1.0f);
    out[1 + b] = (float)b;
  }
}

extern "C" __global__ void __launch_bounds__(128) copy(SPTIR_IN(float) A, SPTIR_OUT(float) B, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) B[i] = A[i];
}

extern "C" __global__ void __launch_bounds__(128) gather32(SPTIR_IN(float) A, SPTIR_OUT(float) sink, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float v = A[i * 32];
    if (v == -1.0f) sink[0] = v;
  }
}

extern "C" __global__ void __launch_bounds__(128) count(SPTIR_OUT(float) cf, SPTIR_OUT(int32_t) ci, SPTIR_OUT(double) cd) {
  atomicAdd(cf + 0, 1.0f);
  atomicAdd(ci + 0, 2);
  atomicAdd(cd + 0, 0.5);
}

extern "C" __global__ void __launch_bounds__(64) partial_barrier(SPTIR_OUT(float) out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    float v = __shfl_down_sync(0xffffffffu, (float)threadIdx.x, 1);
    out[threadIdx.x] = v;
  }
}

extern "C" __global__ void __launch_bounds__(32) shuffles(SPTIR_OUT(int32_t) out, SPTIR_OUT(double) outd) {
  int lane = threadIdx.x;
  out[lane * 6 + 0] = __shfl_xor_sync(0xffffffffu, lane, 1);
  out[lane * 6 + 1] = __shfl_up_sync(0xffffffffu, lane, 1);
  out[lane * 6 + 2] = __shfl_sync(0xffffffffu, lane * 10, 31 - lane);
  out[lane * 6 + 3] = (int)__ballot_sync(0xffffffffu, lane % 2);
  out[lane * 6 + 4] = __any_sync(0xffffffffu, lane == 7) + 2 * __all_sync(0xffffffffu, lane < 31);
  __syncwarp();
  long long big = 1LL << 40;
  out[lane * 6 + 5] = (int)(__shfl_down_sync(0xffffffffu, big + lane, 2) - big);
  outd[lane] = __shfl_xor_sync(0xffffffffu, 0.5 * lane, 16);
}

// Eight threads stream `runs` runs of 32 floats through two shared slots with cp.async (the
// writer's definitions, `CP_ASYNC_PRELUDE`), each thread summing its neighbour's 4 values of
// every run. Mode 0: the right pipeline; 1: the wait lets the current run's group pend; 2: no
// barrier after the reads (the next copy overwrites a slot a neighbour may still read).
extern "C" __global__ void __launch_bounds__(8) cp_pipeline(SPTIR_IN(float) x, SPTIR_OUT(float) out, int runs, int mode) {
  SPTIR_SHARED(float, slots, 64);
  const int t = threadIdx.x;
  sptir_cp_async16(slots + t * 4, x + t * 4);
  sptir_cp_async_commit();
  float acc = 0.0f;
  for (int r = 0; r < runs; ++r) {
    if (r + 1 < runs) sptir_cp_async16(slots + ((r + 1) % 2) * 32 + t * 4, x + (r + 1) * 32 + t * 4);
    sptir_cp_async_commit();
    if (mode == 1) sptir_cp_async_wait<2>();
    else sptir_cp_async_wait<1>();
    __syncthreads();
    const int u = (t + 1) % 8;
    for (int k = 0; k < 4; ++k) acc += slots[(r % 2) * 32 + u * 4 + k];
    if (mode != 2) __syncthreads();
  }
  out[t] = acc;
}

// Each thread stores the pair (t, -t) at element 2 t + shift as one 8-byte store: with an odd
// shift the store is misaligned.
extern "C" __global__ void __launch_bounds__(4) pairs(SPTIR_OUT(float) out, int shift) {
  const int t = threadIdx.x;
  sptir_st2(out + 2 * t + shift, (float)t, (float)-t);
}

extern "C" __global__ void __launch_bounds__(64) spmm(SPTIR_IN(int32_t) indptr, SPTIR_IN(int32_t) J, SPTIR_IN(float) val, SPTIR_IN(float) Bm, SPTIR_OUT(float) C, int m, int n) {
  int row = blockIdx.x;
  int c = threadIdx.x;
  if (row >= m || c >= n) return;
  C[row * n + c] = 0.0f;
  for (int k = indptr[row]; k < indptr[row + 1]; ++k) {
    C[row * n + c] = C[row * n + c] + val[k] * Bm[J[k] * n + c];
  }
  C[row * n + c] += 0.0f;
  float v = C[row * n + c];
  if ((float)C[row * n + c] < 0.0f && v < 0.0f) C[row * n + c] = fmaxf(C[row * n + c], val[0]);
  int w = max(J[indptr[row]], 0);
  (void)w;
}
"#;

const IN: Kind = Kind::In;
const OUT: Kind = Kind::Out;
const SCALAR: Kind = Kind::Scalar;

/// The module `func` of `source` with `kernels` (one block of one thread as recorded; the
/// launches give their own).
fn module_of(func: &str, source: &str, kernels: &[(&str, Vec<ArgSpec<'_>>)]) -> CudaModule {
    let kernels: Vec<Hand<'_>> = kernels
        .iter()
        .map(|(name, args)| Hand::new(name, args.clone()))
        .collect();
    handwritten::module_of(func, source.to_string(), false, &kernels)
}

fn test_module() -> CudaModule {
    use DType::*;
    module_of(
        "emu_tests",
        &format!("{CP_ASYNC_PRELUDE}{SOURCE}"),
        &[
            (
                "pairs",
                vec![("out", F32, "float", OUT), ("shift", I32, "int", SCALAR)],
            ),
            (
                "cp_pipeline",
                vec![
                    ("x", F32, "float", IN),
                    ("out", F32, "float", OUT),
                    ("runs", I32, "int", SCALAR),
                    ("mode", I32, "int", SCALAR),
                ],
            ),
            (
                "saxpy",
                vec![
                    ("x", F32, "float", IN),
                    ("y", F32, "float", OUT),
                    ("a", F32, "float", SCALAR),
                    ("n", I32, "int", SCALAR),
                ],
            ),
            (
                "row_sum",
                vec![
                    ("indptr", I32, "int32_t", IN),
                    ("val", F32, "float", IN),
                    ("out", F32, "float", OUT),
                    ("m", I32, "int", SCALAR),
                ],
            ),
            (
                "block_sum",
                vec![
                    ("x", F32, "float", IN),
                    ("out", F32, "float", OUT),
                    ("n", I32, "int", SCALAR),
                ],
            ),
            (
                "block_sum_racy",
                vec![
                    ("x", F32, "float", IN),
                    ("out", F32, "float", OUT),
                    ("n", I32, "int", SCALAR),
                ],
            ),
            (
                "block_sum_global_racy",
                vec![
                    ("x", F32, "float", IN),
                    ("out", F32, "float", OUT),
                    ("n", I32, "int", SCALAR),
                ],
            ),
            (
                "blocks",
                vec![("out", F32, "float", OUT), ("mode", I32, "int", SCALAR)],
            ),
            (
                "copy",
                vec![
                    ("A", F32, "float", IN),
                    ("B", F32, "float", OUT),
                    ("n", I32, "int", SCALAR),
                ],
            ),
            (
                "gather32",
                vec![
                    ("A", F32, "float", IN),
                    ("sink", F32, "float", OUT),
                    ("n", I32, "int", SCALAR),
                ],
            ),
            (
                "count",
                vec![
                    ("cf", F32, "float", OUT),
                    ("ci", I32, "int32_t", OUT),
                    ("cd", F64, "double", OUT),
                ],
            ),
            ("partial_barrier", vec![("out", F32, "float", OUT)]),
            (
                "shuffles",
                vec![("out", I32, "int32_t", OUT), ("outd", F64, "double", OUT)],
            ),
            (
                "spmm",
                vec![
                    ("indptr", I32, "int32_t", IN),
                    ("J", I32, "int32_t", IN),
                    ("val", F32, "float", IN),
                    ("Bm", F32, "float", IN),
                    ("C", F32, "float", OUT),
                    ("m", I32, "int", SCALAR),
                    ("n", I32, "int", SCALAR),
                ],
            ),
        ],
    )
}

fn cache() -> KernelCache {
    handwritten::cache("cuda_emu")
}

/// The test module, compiled once per process; `None` (with a note) without a C++ compiler.
fn module() -> Option<&'static EmuModule> {
    compiled_once(test_module, "cuda_emu")
}

/// A 32-byte aligned window of `n` floats inside `storage`.
fn aligned(storage: &mut Vec<f32>, n: usize) -> &mut [f32] {
    storage.clear();
    storage.resize(n + 8, 0.0);
    let off = storage.as_ptr().align_offset(32);
    &mut storage[off..off + n]
}

/// Launches `saxpy` of [`test_module`] in `m` over `n` elements on `blocks` blocks of 128
/// threads and checks `y = a x + y`.
fn saxpy_is_right(m: &EmuModule, n: usize, blocks: u32, a: f32) {
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let mut y: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let want: Vec<f32> = x.iter().zip(&y).map(|(x, y)| a * x + y).collect();
    m.launch(
        kernel(m, "saxpy"),
        [blocks, 1, 1],
        [128, 1, 1],
        &mut [
            EmuArg::input(&x),
            EmuArg::output(&mut y),
            EmuArg::F32(a),
            EmuArg::I32(n as i32),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(y, want);
}

#[test]
fn grid_stride_saxpy_with_a_partial_last_block() {
    let Some(m) = module() else { return };
    saxpy_is_right(m, 1000, 3, 3.0);
}

#[test]
fn warp_per_row_shuffle_reduction() {
    let Some(m) = module() else { return };
    let lens = [0usize, 1, 31, 32, 33, 0, 100, 7, 64, 0, 3];
    let mut indptr = vec![0i32];
    for l in lens {
        indptr.push(indptr.last().copied().unwrap_or(0) + l as i32);
    }
    let nnz = *indptr.last().unwrap_or(&0) as usize;
    let val: Vec<f32> = (0..nnz).map(|k| (k % 13) as f32 - 4.0).collect();
    let rows = lens.len();
    let mut out = vec![f32::NAN; rows];
    // 4 warps per block: 3 blocks cover 11 rows, the last block partly.
    m.launch(
        kernel(m, "row_sum"),
        [3, 1, 1],
        [128, 1, 1],
        &mut [
            EmuArg::input(&indptr),
            EmuArg::input(&val),
            EmuArg::output(&mut out),
            EmuArg::I32(rows as i32),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    for r in 0..rows {
        let want: f32 = val[indptr[r] as usize..indptr[r + 1] as usize].iter().sum();
        assert_eq!(out[r], want, "row {r}");
    }
}

fn block_sum_inputs() -> (Vec<f32>, usize) {
    let n = 1000;
    ((0..n).map(|i| (i % 10) as f32).collect(), n)
}

#[test]
fn block_reduction_through_shared_memory() {
    let Some(m) = module() else { return };
    let (x, n) = block_sum_inputs();
    let blocks = n.div_ceil(256);
    let mut out = vec![0.0f32; blocks];
    m.launch(
        kernel(m, "block_sum"),
        [blocks as u32, 1, 1],
        [256, 1, 1],
        &mut [
            EmuArg::input(&x),
            EmuArg::output(&mut out),
            EmuArg::I32(n as i32),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    for (b, got) in out.iter().enumerate() {
        let want: f32 = x[b * 256..((b + 1) * 256).min(n)].iter().sum();
        assert_eq!(*got, want, "block {b}");
    }
}

#[test]
fn a_missing_barrier_is_a_race_on_the_shared_buffer() {
    let Some(m) = module() else { return };
    let (x, n) = block_sum_inputs();
    let mut out = vec![0.0f32; 4];
    let err = m
        .launch(
            kernel(m, "block_sum_racy"),
            [4, 1, 1],
            [256, 1, 1],
            &mut [
                EmuArg::input(&x),
                EmuArg::output(&mut out),
                EmuArg::I32(n as i32),
            ],
        )
        .expect_err("the planted race is found");
    match &err {
        RunError::EmuRace {
            kernel,
            buffer,
            first,
            second,
            ..
        } => {
            assert_eq!(kernel, "block_sum_racy");
            assert_eq!(buffer, "part");
            assert_ne!(first, second);
        }
        other => panic!("expected a race, got: {other}"),
    }
    let text = err.to_string();
    assert!(text.contains("race on `part`"), "{text}");
}

/// Threads of one block updating one element of a global buffer without atomics race too (the
/// sequential emulation would otherwise sum them correctly and hide it); the atomic version
/// (`block_sum`, one atomicAdd per block) runs clean above.
#[test]
fn planted_global_race_is_detected() {
    let Some(m) = module() else { return };
    let n = 128;
    let x = vec![1.0f32; n];
    let mut out = vec![0.0f32; 2];
    let err = m
        .launch(
            kernel(m, "block_sum_global_racy"),
            [2, 1, 1],
            [64, 1, 1],
            &mut [
                EmuArg::input(&x),
                EmuArg::output(&mut out),
                EmuArg::I32(n as i32),
            ],
        )
        .expect_err("the planted race is found");
    match &err {
        RunError::EmuRace {
            buffer,
            index,
            first,
            second,
            ..
        } => {
            assert_eq!(buffer, "out");
            assert!(*index == 0 || *index == 1, "{err}");
            assert_ne!(first, second);
        }
        other => panic!("expected a race, got: {other}"),
    }
}

/// Blocks of one launch are not ordered: an element written by one block and written, read or
/// updated atomically by another is a race between blocks; atomic updates from every block and
/// each block's own elements are not.
#[test]
fn accesses_of_different_blocks_to_one_global_element_race() {
    let Some(m) = module() else { return };
    for (mode, what) in [
        (0, "written by two blocks"),
        (1, "read by"),
        (2, "atomicAdd"),
    ] {
        let mut out = vec![0.0f32; 6];
        let err = m
            .launch(
                kernel(m, "blocks"),
                [4, 1, 1],
                [1, 1, 1],
                &mut [EmuArg::output(&mut out), EmuArg::I32(mode)],
            )
            .expect_err("the planted race between blocks is found");
        match &err {
            RunError::EmuBlockRace {
                kernel,
                buffer,
                index,
                first,
                second,
                what: w,
            } => {
                assert_eq!(
                    (kernel.as_str(), buffer.as_str(), *index),
                    ("blocks", "out", 0)
                );
                assert_ne!(first, second, "mode {mode}");
                assert!(w.contains(what), "mode {mode}: {err}");
            }
            other => panic!("mode {mode}: expected a race between blocks, got: {other}"),
        }
        assert!(err.to_string().contains("between blocks"), "{err}");
    }
    let mut out = vec![0.0f32; 6];
    m.launch(
        kernel(m, "blocks"),
        [4, 1, 1],
        [1, 1, 1],
        &mut [EmuArg::output(&mut out), EmuArg::I32(3)],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out, vec![4.0, 0.0, 1.0, 2.0, 3.0, 0.0]);
}

#[test]
fn traffic_of_coalesced_copy_and_strided_gather() {
    let Some(m) = module() else { return };
    let n = 4096;
    let mut a_store = Vec::new();
    let mut b_store = Vec::new();
    let a = aligned(&mut a_store, n * 32);
    for (i, v) in a.iter_mut().enumerate() {
        *v = i as f32;
    }
    let a: &[f32] = a;
    let copy = |src: &[f32], dst: &mut [f32]| {
        let stats = m
            .launch(
                kernel(m, "copy"),
                [(n / 128) as u32, 1, 1],
                [128, 1, 1],
                &mut [
                    EmuArg::input(src),
                    EmuArg::output(&mut *dst),
                    EmuArg::I32(n as i32),
                ],
            )
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(dst, src);
        stats
    };
    let stats = copy(&a[..n], aligned(&mut b_store, n));
    assert_eq!(stats.requested_bytes, 2 * 4 * n as u64);
    assert_eq!(stats.efficiency(), 1.0, "{stats:?}");
    // Arrays the host placed off a sector's start count as the GPU's, whose allocations are
    // 256-byte aligned: the same sectors.
    let mut c = vec![0.0f32; n + 1];
    let again = copy(&a[1..n + 1], &mut c[1..]);
    assert_eq!(
        (again.requested_bytes, again.sector_bytes),
        (stats.requested_bytes, stats.sector_bytes)
    );

    let mut sink = [0.0f32];
    let stats = m
        .launch(
            kernel(m, "gather32"),
            [(n / 128) as u32, 1, 1],
            [128, 1, 1],
            &mut [
                EmuArg::input(a),
                EmuArg::output(&mut sink),
                EmuArg::I32(n as i32),
            ],
        )
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(stats.requested_bytes, 4 * n as u64);
    assert_eq!(stats.sector_bytes, 32 * n as u64);
    assert_eq!(stats.efficiency(), 0.125);
}

#[test]
fn out_of_bounds_read_names_the_buffer() {
    let Some(m) = module() else { return };
    let a = vec![1.0f32; 100];
    let mut b = vec![0.0f32; 200];
    let err = m
        .launch(
            kernel(m, "copy"),
            [1, 1, 1],
            [256, 1, 1],
            &mut [EmuArg::input(&a), EmuArg::output(&mut b), EmuArg::I32(200)],
        )
        .expect_err("reads past A");
    match &err {
        RunError::EmuOutOfBounds {
            buffer,
            index,
            length,
            block,
            thread,
            ..
        } => {
            assert_eq!(buffer, "A");
            assert_eq!((*index, *length), (100, 100));
            assert_eq!(*block, [0, 0, 0]);
            assert_eq!(*thread, [100, 0, 0]);
        }
        other => panic!("expected an out-of-bounds error, got: {other}"),
    }
    assert!(err.to_string().contains("`A`[100] (length 100)"), "{err}");
}

#[test]
fn atomic_adds_from_many_blocks_are_exact() {
    let Some(m) = module() else { return };
    let mut cf = [0.0f32];
    let mut ci = [0i32];
    let mut cd = [0.0f64];
    let (blocks, threads) = (64u32, 128u32);
    m.launch(
        kernel(m, "count"),
        [blocks, 1, 1],
        [threads, 1, 1],
        &mut [
            EmuArg::output(&mut cf),
            EmuArg::output(&mut ci),
            EmuArg::output(&mut cd),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let total = blocks * threads;
    assert_eq!(cf[0], total as f32);
    assert_eq!(ci[0], 2 * total as i32);
    assert_eq!(cd[0], 0.5 * total as f64);
}

#[test]
fn a_barrier_reached_by_part_of_the_block_is_reported() {
    let Some(m) = module() else { return };
    let mut out = vec![0.0f32; 64];
    let err = m
        .launch(
            kernel(m, "partial_barrier"),
            [2, 1, 1],
            [64, 1, 1],
            &mut [EmuArg::output(&mut out)],
        )
        .expect_err("cannot complete");
    match &err {
        RunError::EmuDeadlock { message, .. } => {
            assert!(
                message.contains("16 thread(s) wait in __syncthreads"),
                "{message}"
            );
        }
        other => panic!("expected a deadlock, got: {other}"),
    }
    assert!(
        err.to_string().contains("deadlock/divergent barrier"),
        "{err}"
    );
}

#[test]
fn shuffle_variants_ballot_and_votes() {
    let Some(m) = module() else { return };
    let mut out = vec![0i32; 32 * 6];
    let mut outd = vec![0.0f64; 32];
    m.launch(
        kernel(m, "shuffles"),
        [1, 1, 1],
        [32, 1, 1],
        &mut [EmuArg::output(&mut out), EmuArg::output(&mut outd)],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    for lane in 0..32i32 {
        let o = &out[lane as usize * 6..lane as usize * 6 + 6];
        assert_eq!(o[0], lane ^ 1);
        assert_eq!(o[1], if lane >= 1 { lane - 1 } else { lane });
        assert_eq!(o[2], (31 - lane) * 10);
        assert_eq!(o[3] as u32, 0xaaaa_aaaa);
        assert_eq!(o[4], 1);
        assert_eq!(o[5], if lane + 2 < 32 { lane + 2 } else { lane });
        assert_eq!(outd[lane as usize], 0.5 * f64::from(lane ^ 16));
    }
}

/// `cp.async` lands when the copying thread's wait completes its group: a pipeline whose wait
/// lets the current group pend, or whose next copy overwrites a slot still being read, is a
/// race in the emulator (as on the GPU), not a right answer from copies made at once.
#[test]
fn cp_async_lands_at_its_wait_and_early_reads_race() {
    let Some(m) = module() else { return };
    let runs = 5usize;
    let x: Vec<f32> = (0..runs * 32).map(|v| (v % 13) as f32 - 6.0).collect();
    let mut out = vec![0.0f32; 8];
    let k = kernel(m, "cp_pipeline");
    let launch = |mode: i32, out: &mut Vec<f32>| {
        m.launch(
            k,
            [1, 1, 1],
            [8, 1, 1],
            &mut [
                EmuArg::input(&x),
                EmuArg::output(out),
                EmuArg::I32(runs as i32),
                EmuArg::I32(mode),
            ],
        )
    };
    launch(0, &mut out).expect("the right pipeline runs");
    for (t, got) in out.iter().enumerate() {
        let u = (t + 1) % 8;
        let want: f32 = (0..runs)
            .flat_map(|r| (0..4).map(move |q| r * 32 + u * 4 + q))
            .map(|i| x[i])
            .sum();
        assert_eq!(*got, want, "thread {t}");
    }
    for mode in [1, 2] {
        match launch(mode, &mut out) {
            Err(RunError::EmuRace { buffer, what, .. }) => {
                assert_eq!(buffer, "slots");
                // Mode 2's copy may be issued after its neighbour's read (a write after a
                // read, in one barrier epoch) or before it (a read of an element in flight).
                assert!(
                    mode == 2 || what.contains("cp.async"),
                    "mode {mode}: {what}"
                );
            }
            other => panic!("mode {mode}: expected a race on the slots, got {other:?}"),
        }
    }
}

/// `sptir_st2`: two floats as one 8-byte store, counted as one access; a misaligned pair is
/// refused as on the GPU, a pair past the end is out of bounds.
#[test]
fn pair_stores_are_aligned_eight_byte_accesses() {
    let Some(m) = module() else { return };
    let k = kernel(m, "pairs");
    let mut out = vec![0.0f32; 10];
    m.launch(
        k,
        [1, 1, 1],
        [4, 1, 1],
        &mut [EmuArg::output(&mut out), EmuArg::I32(2)],
    )
    .expect("aligned pairs");
    let want: Vec<f32> = (0..10)
        .map(|i| match i {
            2..=9 => {
                let t = (i - 2) / 2;
                if i % 2 == 0 {
                    t as f32
                } else {
                    -(t as f32)
                }
            }
            _ => 0.0,
        })
        .collect();
    assert_eq!(out, want);
    let e = m
        .launch(
            k,
            [1, 1, 1],
            [4, 1, 1],
            &mut [EmuArg::output(&mut out), EmuArg::I32(1)],
        )
        .expect_err("misaligned");
    assert!(e.to_string().contains("misaligned 8-byte store"), "{e}");
    let e = m
        .launch(
            k,
            [1, 1, 1],
            [4, 1, 1],
            &mut [EmuArg::output(&mut out), EmuArg::I32(4)],
        )
        .expect_err("past the end");
    assert!(matches!(e, RunError::EmuOutOfBounds { .. }), "{e}");
}

#[test]
fn proxies_in_expression_contexts_compute_spmm() {
    let Some(m) = module() else { return };
    let (rows, cols, n) = (5usize, 7usize, 16usize);
    let indptr = [0i32, 2, 2, 5, 6, 9];
    let j = [0i32, 6, 1, 2, 3, 6, 0, 4, 5];
    let val: Vec<f32> = (0..9).map(|k| k as f32 + 1.0).collect();
    let b: Vec<f32> = (0..cols * n).map(|i| (i % 5) as f32 - 1.0).collect();
    let mut c = vec![f32::NAN; rows * n];
    m.launch(
        kernel(m, "spmm"),
        [rows as u32, 1, 1],
        [64, 1, 1],
        &mut [
            EmuArg::input(&indptr),
            EmuArg::input(&j),
            EmuArg::input(&val),
            EmuArg::input(&b),
            EmuArg::output(&mut c),
            EmuArg::I32(rows as i32),
            EmuArg::I32(n as i32),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    for r in 0..rows {
        for col in 0..n {
            let mut want = 0.0f32;
            for k in indptr[r] as usize..indptr[r + 1] as usize {
                want += val[k] * b[j[k] as usize * n + col];
            }
            let got = c[r * n + col];
            let want = if want < 0.0 { want.max(val[0]) } else { want };
            assert_eq!(got, want, "C[{r}, {col}]");
        }
    }
}

#[test]
fn invalid_launches_and_arguments_are_refused() {
    let Some(m) = module() else { return };
    let mut out = vec![0.0f32; 64];
    let k = kernel(m, "partial_barrier");
    for (grid, block) in [
        ([1, 1, 1], [2048, 1, 1]),
        ([0, 1, 1], [32, 1, 1]),
        ([1, 1, 1], [64, 32, 1]),
    ] {
        let err = m
            .launch(k, grid, block, &mut [EmuArg::output(&mut out)])
            .expect_err("invalid dims");
        assert!(matches!(err, RunError::EmuInvalidLaunch { .. }), "{err}");
    }
    let err = m
        .launch(k, [1, 1, 1], [32, 1, 1], &mut [])
        .expect_err("no args");
    assert!(matches!(err, RunError::EmuInvalidLaunch { .. }), "{err}");
    let ro = vec![0.0f32; 64];
    let err = m
        .launch(k, [1, 1, 1], [32, 1, 1], &mut [EmuArg::input(&ro)])
        .expect_err("read-only buffer for an output");
    assert!(matches!(err, RunError::ArgKind { .. }), "{err}");
    let mut ints = vec![0i32; 64];
    let err = m
        .launch(k, [1, 1, 1], [32, 1, 1], &mut [EmuArg::output(&mut ints)])
        .expect_err("wrong dtype");
    assert!(matches!(err, RunError::DTypeMismatch { .. }), "{err}");
    let err = m
        .launch(99, [1, 1, 1], [32, 1, 1], &mut [])
        .expect_err("no such kernel");
    assert!(matches!(err, RunError::EmuInvalidLaunch { .. }), "{err}");
}

#[test]
fn compile_errors_show_the_offending_line() {
    if module().is_none() {
        return;
    }
    let src = "extern \"C\" __global__ void broken(SPTIR_OUT(float) y) {\n  y[0] = 1.0f;\n  y[1] = undefined_name;\n}\n";
    let module = module_of(
        "broken_fn",
        src,
        &[("broken", vec![("y", DType::F32, "float", OUT)])],
    );
    let err = EmuModule::load(&module, &cache()).expect_err("does not compile");
    match &err {
        RunError::Compile {
            stderr,
            numbered_source,
            ..
        } => {
            assert!(stderr.contains("--- offending lines ---"), "{stderr}");
            assert!(
                stderr.contains("broken_fn.cu:3:   y[1] = undefined_name;"),
                "{stderr}"
            );
            assert!(
                numbered_source.contains("3 |   y[1] = undefined_name;"),
                "{numbered_source}"
            );
        }
        other => panic!("expected a compile error, got: {other}"),
    }
}

/// The files of cache directory `dir`.
fn cache_files(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("cache dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect()
}

/// The prelude is a header of the cache, precompiled next to it (`cuda_emu/prelude_cache.rs`):
/// a module's cached source includes it by path instead of holding its text, and a damaged
/// precompiled header (truncated, as by a full disk outside the cache's atomic writes) is
/// dropped and the module compiled from the header's text, loading and running as before.
#[test]
fn the_prelude_is_a_precompiled_header_of_the_cache() {
    if module().is_none() {
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda_emu_pch");
    let _ = std::fs::remove_dir_all(&dir);
    let cache = KernelCache::new(&dir);
    let (_, first) = EmuModule::load(&test_module(), &cache).expect("compiles");
    let names = cache_files(&dir);
    let header = names
        .iter()
        .find(|n| n.starts_with("emu-prelude-") && n.ends_with(".hpp"))
        .unwrap_or_else(|| panic!("no prelude header in {names:?}"));
    let source = std::fs::read_to_string(dir.join(format!("{}.c", first.key))).expect("source");
    let include = format!("#include \"{}\"", dir.join(header).display());
    assert!(source.starts_with(&include), "{}", &source[..200]);
    assert!(
        !source.contains("namespace sptir_emu"),
        "the prelude's text is embedded"
    );
    // GCC precompiles it (another compiler may not: then there is no `.gch` to damage).
    let gch = dir.join(format!("{header}.gch"));
    let Ok(bytes) = std::fs::read(&gch) else {
        eprintln!("note: the compiler made no precompiled header");
        return;
    };
    std::fs::write(&gch, &bytes[..bytes.len() / 2]).expect("truncate");
    let mut other = test_module();
    other.source.push_str("\n// another module\n");
    let (m, second) = EmuModule::load(&other, &cache).expect("compiles without the damaged .gch");
    assert_ne!(second.key, first.key);
    assert!(!gch.exists(), "the damaged .gch is dropped");
    saxpy_is_right(&m, 100, 1, 2.0);
}

/// The runtime is one library of the cache that every module links (`emu-runtime-<hash>.so`,
/// its source next to it; the header is the runtime's view without it): two modules of one
/// cache share it, and in a later process a module whose library went missing is compiled again,
/// with the library, instead of failing to load. (That process is a child of this test binary:
/// a library once loaded stays in the process that loaded it.)
#[test]
fn the_runtime_is_one_library_of_the_cache() {
    const CHILD: &str = "SPARSETIR_TEST_RUNTIME_LIB_CHILD";
    // (The child loads nothing else first: a library of the same name loaded from another cache
    // would stand in for the missing one.)
    if std::env::var_os(CHILD).is_none() && module().is_none() {
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda_emu_runtime_lib");
    let runtime_libs = || -> Vec<PathBuf> {
        cache_files(&dir)
            .into_iter()
            .filter(|n| n.starts_with("emu-runtime-") && n.ends_with(".so"))
            .map(|n| dir.join(n))
            .collect()
    };
    let cache = KernelCache::new(&dir);
    if std::env::var_os(CHILD).is_some() {
        let (m, again) = EmuModule::load(&test_module(), &cache).expect("rebuilt");
        assert_eq!(again.outcome, sparsetir_runtime::CacheOutcome::Rebuilt);
        assert_eq!(runtime_libs().len(), 1, "the library is built again");
        saxpy_is_right(&m, 100, 1, 2.0);
        return;
    }
    let _ = std::fs::remove_dir_all(&dir);
    let (m, _) = EmuModule::load(&test_module(), &cache).expect("compiles");
    saxpy_is_right(&m, 100, 1, 2.0);
    let libs = runtime_libs();
    assert_eq!(libs.len(), 1, "{libs:?}");
    let runtime_source = std::fs::read_to_string(libs[0].with_extension("cpp")).expect("source");
    assert!(runtime_source.starts_with("#define SPTIR_EMU_RUNTIME 1\n"));
    let header = cache_files(&dir)
        .into_iter()
        .find(|n| n.starts_with("emu-prelude-") && n.ends_with(".hpp"))
        .expect("header");
    let header_text = std::fs::read_to_string(dir.join(header)).expect("header text");
    assert!(header_text.contains("SPTIR_API int run_grid(LaunchDesc* d, Body body);"));
    assert!(
        !header_text.contains("#define SPTIR_EMU_RUNTIME"),
        "the header is the runtime's view"
    );
    // A second module links the same library.
    let mut other = test_module();
    other.source.push_str("\n// a second module\n");
    let (m2, _) = EmuModule::load(&other, &cache).expect("compiles");
    saxpy_is_right(&m2, 100, 1, 2.0);
    assert_eq!(runtime_libs(), libs);
    std::fs::remove_file(&libs[0]).expect("remove the library");
    passes_in_a_child("the_runtime_is_one_library_of_the_cache", &[(CHILD, "1")]);
}

/// Runs test `name` of this test binary alone in a child process with the environment `env`
/// added, and checks that it passed.
fn passes_in_a_child(name: &str, env: &[(&str, &str)]) {
    let out = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", name, "--nocapture"])
        .envs(env.iter().copied())
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether C++ text `text` defines the function `name` (a line `... name(...) {`).
fn source_defines(text: &str, name: &str) -> bool {
    text.lines()
        .any(|l| l.contains(&format!(" {name}(")) && l.trim_end().ends_with('{'))
}

/// With `SPARSETIR_EMU_PCH=0` a module embeds the whole prelude, runtime included: no header or
/// library in the cache, and the module runs as before. (In a child process of this test
/// binary: the variable is read by the whole process.)
#[test]
fn a_module_can_embed_the_whole_prelude() {
    if module().is_none() {
        return;
    }
    const CHILD: &str = "SPARSETIR_TEST_EMBEDDED_PRELUDE_CHILD";
    if std::env::var_os(CHILD).is_none() {
        passes_in_a_child(
            "a_module_can_embed_the_whole_prelude",
            &[("SPARSETIR_EMU_PCH", "0"), (CHILD, "1")],
        );
        return;
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda_emu_embedded");
    let _ = std::fs::remove_dir_all(&dir);
    let cache = KernelCache::new(&dir);
    let (m, report) = EmuModule::load(&test_module(), &cache).expect("compiles");
    saxpy_is_right(&m, 100, 1, 2.0);
    let names = cache_files(&dir);
    assert!(
        !names.iter().any(|n| n.starts_with("emu-")),
        "shared prelude files: {names:?}"
    );
    let source = std::fs::read_to_string(dir.join(format!("{}.c", report.key))).expect("source");
    assert!(source.starts_with("#define SPTIR_EMU_RUNTIME 1\n"));
    assert!(source_defines(&source, "run_grid"));
}
