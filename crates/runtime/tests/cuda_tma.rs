//! Hopper's tensor copy engine (`cp.async.bulk.tensor.2d` completing on an mbarrier, the
//! writer's `TMA_PRELUDE`) on hand-written kernels: in the emulator, a box lands in shared
//! memory in the swizzled layout measured on an H200 (`bench/gpu/probe_tma.cu`) for 128-, 64-
//! and 32-byte swizzles and none, elements past the view's edge read as zero; boxes in flight
//! on two barriers over several phases sum right; a read before the wait is a race, announced
//! bytes that never come a deadlock, a wait on a barrier never initialized and a misaligned
//! swizzled destination unsupported, a view larger than its buffer a typed error. NVRTC compiles the same source for sm_90, and on a
//! Hopper GPU the 128-byte-swizzled box lands as the formula says.

use sparsetir_codegen::cuda::{CudaModule, TMA_PRELUDE};
use sparsetir_ir::DType;
use sparsetir_runtime::{EmuArg, EmuModule, RunError};

mod common;
use common::handwritten::{compiled_once, hopper_module, kernel, module_of, ArgSpec, Hand, Kind};

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
// One box of `map` at (c0, c1) copied into `tile` at element `shift`, then the raw shared tile
// (box bytes in shared-memory order) copied out by every thread. `early`: the copying thread
// reads the tile before waiting; `extra`: bytes announced on top of the box's (negative: the
// barrier is never initialized and nothing is copied, every thread waits all the same).
#define SPTIR_TILE(NAME, T, BC, BR)                                                           \
extern "C" __global__ void __launch_bounds__(128) NAME(SPTIR_TMAP(T) map, SPTIR_OUT(T) out,  \
    int c0, int c1, int shift, int early, int extra) {                                        \
  SPTIR_SHARED(T, tile, BC * BR + 1024);                                                      \
  SPTIR_SHARED(uint64_t, bar, 1);                                                             \
  const int t = threadIdx.x;                                                                  \
  if (t == 0 && extra >= 0) {                                                                 \
    sptir_mbar_init(bar, 1);                                                                  \
    sptir_mbar_fence_init();                                                                  \
  }                                                                                           \
  __syncthreads();                                                                            \
  if (t == 0 && extra >= 0) {                                                                 \
    sptir_mbar_expect_tx(bar, (unsigned)(BC * BR * sizeof(T)) + (unsigned)extra);             \
    sptir_tma_load_2d(tile + shift, map, bar, c0, c1);                                        \
    if (early) {                                                                              \
      T v = tile[shift + 1];                                                                  \
      out[0] = v;                                                                             \
    }                                                                                         \
  }                                                                                           \
  sptir_mbar_wait(bar, 0);                                                                    \
  for (int i = t; i < BC * BR; i += blockDim.x) {                                             \
    T v = tile[shift + i];                                                                    \
    out[i] = v;                                                                               \
  }                                                                                           \
}

SPTIR_TILE(tile_sw128, uint16_t, 64, 32)
SPTIR_TILE(tile_sw64, uint16_t, 32, 16)
SPTIR_TILE(tile_sw32, uint16_t, 16, 8)
SPTIR_TILE(tile_none, uint16_t, 24, 8)
SPTIR_TILE(tile_f32_sw128, float, 32, 8)

// Two stages of 32 x 8 floats (1024 bytes, 128-byte swizzled), each on its own mbarrier: the
// boxes of rows 8 it .. 8 it + 7 for it < iters, two in flight, refilled after the barrier that
// follows their reads; every thread sums the stage elements k = t (mod 64). The same buffer is
// also passed as a pointer `x`, read once. `sync`: 0 leaves out the barrier before a refill.
extern "C" __global__ void __launch_bounds__(64) two_stages(SPTIR_TMAP(float) map, SPTIR_IN(float) x,
    SPTIR_OUT(float) out, int iters, int sync) {
  SPTIR_SHARED(float, stage, 2 * 256);
  SPTIR_SHARED(uint64_t, bars, 2);
  const int t = threadIdx.x;
  if (t == 0) {
    sptir_mbar_init(bars + 0, 1);
    sptir_mbar_init(bars + 1, 1);
    sptir_mbar_fence_init();
  }
  __syncthreads();
  if (t == 0) {
    for (int s = 0; s < 2 && s < iters; ++s) {
      sptir_mbar_expect_tx(bars + s, 1024u);
      sptir_tma_load_2d(stage + s * 256, map, bars + s, 0, s * 8);
    }
  }
  float acc = 0.0f;
  for (int it = 0; it < iters; ++it) {
    const int s = it % 2;
    sptir_mbar_wait(bars + s, (unsigned)((it / 2) % 2));
    for (int k = t; k < 256; k += 64) {
      float v = stage[s * 256 + k];
      acc += v;
    }
    if (sync) __syncthreads();
    if (t == 0 && it + 2 < iters) {
      sptir_mbar_expect_tx(bars + s, 1024u);
      sptir_tma_load_2d(stage + s * 256, map, bars + s, 0, (it + 2) * 8);
    }
  }
  float x0 = x[0];
  out[t] = acc + 0.0f * x0;
}
"#;

fn source() -> String {
    format!("{HEAD}{TMA_PRELUDE}{SOURCE}")
}

/// The tile kernels: name, element type (dtype, C type), box, swizzle.
const TILES: [(&str, DType, &str, [u32; 2], u32); 5] = [
    ("tile_sw128", DType::U16, "uint16_t", [64, 32], 128),
    ("tile_sw64", DType::U16, "uint16_t", [32, 16], 64),
    ("tile_sw32", DType::U16, "uint16_t", [16, 8], 32),
    ("tile_none", DType::U16, "uint16_t", [24, 8], 0),
    ("tile_f32_sw128", DType::F32, "float", [32, 8], 128),
];

fn test_module() -> CudaModule {
    use DType::*;
    let mut kernels: Vec<(&str, Vec<ArgSpec<'_>>)> = TILES
        .iter()
        .map(|&(name, dt, ct, b, s)| {
            (
                name,
                vec![
                    ("m_map", dt, ct, Kind::Map(b, s)),
                    ("out", dt, ct, Kind::Out),
                    ("c0", I32, "int", Kind::Scalar),
                    ("c1", I32, "int", Kind::Scalar),
                    ("shift", I32, "int", Kind::Scalar),
                    ("early", I32, "int", Kind::Scalar),
                    ("extra", I32, "int", Kind::Scalar),
                ],
            )
        })
        .collect();
    kernels.push((
        "two_stages",
        vec![
            ("x_map", F32, "float", Kind::Map([32, 8], 128)),
            ("x", F32, "float", Kind::In),
            ("sums", F32, "float", Kind::Out),
            ("iters", I32, "int", Kind::Scalar),
            ("sync", I32, "int", Kind::Scalar),
        ],
    ));
    let kernels: Vec<Hand<'_>> = kernels
        .into_iter()
        .map(|(name, args)| Hand::new(name, args).threads(128))
        .collect();
    module_of("tma_tests", source(), false, &kernels)
}

/// The test module, compiled once per process; `None` (with a note) without a C++ compiler.
fn module() -> Option<&'static EmuModule> {
    compiled_once(test_module, "cuda_tma")
}

/// The byte offset from the box's shared start where box element (r, c) lands (the formula
/// measured on an H200, `bench/gpu/results/session21-probe/probe_tma.txt`).
fn swizzled(r: usize, c: usize, row_bytes: usize, elem: usize, swizzle: u32) -> usize {
    let s = match swizzle {
        32 => 1,
        64 => 2,
        128 => 3,
        _ => 0,
    };
    let a = r * row_bytes + c * elem;
    a ^ (((a >> 7) & ((1 << s) - 1)) << 4)
}

/// The raw shared tile after copying the box at (c0, c1) of the `cols x rows` matrix `m`
/// (elements past the view zero), element by element in shared-memory order.
fn want_tile<T: Copy + Default>(
    m: &[T],
    (cols, rows): (usize, usize),
    [bc, br]: [u32; 2],
    swizzle: u32,
    (c0, c1): (i64, i64),
) -> Vec<T> {
    let (bc, br) = (bc as usize, br as usize);
    let elem = std::mem::size_of::<T>();
    let mut tile = vec![T::default(); bc * br];
    for r in 0..br {
        for c in 0..bc {
            let (gr, gc) = (c1 + r as i64, c0 + c as i64);
            let inside = gr >= 0 && gc >= 0 && (gr as usize) < rows && (gc as usize) < cols;
            let v = if inside {
                m[gr as usize * cols + gc as usize]
            } else {
                T::default()
            };
            tile[swizzled(r, c, bc * elem, elem, swizzle) / elem] = v;
        }
    }
    tile
}

const COLS: usize = 96;
const ROWS: usize = 40;

fn matrix_u16() -> Vec<u16> {
    (0..COLS * ROWS).map(|i| i as u16).collect()
}

/// Runs tile kernel `name` on `mat` (`COLS x ROWS`) with the given box origin, shift, early
/// read and extra bytes.
fn run_tile<T: sparsetir_runtime::cuda_emu::EmuElem + Default>(
    m: &EmuModule,
    name: &str,
    mat: &[T],
    view: (i64, i64),
    (c0, c1, shift, early, extra): (i32, i32, i32, i32, i32),
    out: &mut [T],
) -> Result<sparsetir_runtime::EmuStats, RunError> {
    m.launch(
        kernel(m, name),
        [1, 1, 1],
        [128, 1, 1],
        &mut [
            EmuArg::tensor_map(mat, view.0, view.1),
            EmuArg::output(out),
            EmuArg::I32(c0),
            EmuArg::I32(c1),
            EmuArg::I32(shift),
            EmuArg::I32(early),
            EmuArg::I32(extra),
        ],
    )
}

#[test]
fn boxes_land_in_the_measured_swizzled_layouts() {
    let Some(m) = module() else { return };
    let mat = matrix_u16();
    for &(name, dt, _, b, sw) in &TILES[..4] {
        assert_eq!(dt, DType::U16);
        // Inside the view, and at a shifted destination on the swizzle's span (1024 bytes).
        for (c0, c1, shift) in [(8, 4, 0), (0, 0, 512), (16, 7, 0)] {
            let mut out = vec![0xffffu16; (b[0] * b[1]) as usize];
            let stats = run_tile(
                m,
                name,
                &mat,
                (COLS as i64, ROWS as i64),
                (c0, c1, shift, 0, 0),
                &mut out,
            )
            .unwrap_or_else(|e| panic!("{name}: {e}"));
            let want = want_tile(&mat, (COLS, ROWS), b, sw, (c0 as i64, c1 as i64));
            assert_eq!(out, want, "{name} at ({c0}, {c1}), shift {shift}");
            // The box's reads are counted: one element each, whole sectors per box row (the
            // output's writes besides).
            let box_bytes = u64::from(b[0] * b[1]) * 2;
            assert!(stats.requested_bytes >= 2 * box_bytes, "{name}: {stats:?}");
        }
    }
    // The 128-byte swizzle really permutes: row 1's first 16 bytes land at 16..32.
    let want = want_tile(&mat, (COLS, ROWS), [64, 32], 128, (0, 0));
    assert_eq!(want[64 + 8], mat[COLS]);
    // 32-bit elements.
    let matf: Vec<f32> = (0..COLS * ROWS).map(|i| i as f32 * 0.5).collect();
    let mut out = vec![-1.0f32; 256];
    run_tile(
        m,
        "tile_f32_sw128",
        &matf,
        (COLS as i64, ROWS as i64),
        (32, 9, 256, 0, 0),
        &mut out,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out, want_tile(&matf, (COLS, ROWS), [32, 8], 128, (32, 9)));
}

#[test]
fn elements_past_the_views_edge_are_zero() {
    let Some(m) = module() else { return };
    let mat = matrix_u16();
    for &(name, _, _, b, sw) in &TILES[..4] {
        for (c0, c1) in [(80, 36), (-8, -3), (90, 0), (0, 39)] {
            let mut out = vec![0xffffu16; (b[0] * b[1]) as usize];
            run_tile(
                m,
                name,
                &mat,
                (COLS as i64, ROWS as i64),
                (c0, c1, 0, 0, 0),
                &mut out,
            )
            .unwrap_or_else(|e| panic!("{name}: {e}"));
            let want = want_tile(&mat, (COLS, ROWS), b, sw, (c0 as i64, c1 as i64));
            assert!(want.contains(&0), "{name}: the box crosses the edge");
            assert_eq!(out, want, "{name} at ({c0}, {c1})");
        }
    }
    // A view smaller than the buffer: its own edge counts, not the buffer's.
    let mut out = vec![0xffffu16; 64 * 32];
    run_tile(m, "tile_sw128", &mat, (64, 20), (0, 0, 0, 0, 0), &mut out)
        .unwrap_or_else(|e| panic!("{e}"));
    let small: Vec<u16> = (0..64 * 20).map(|i| mat[(i / 64) * 64 + i % 64]).collect();
    assert_eq!(out, want_tile(&small, (64, 20), [64, 32], 128, (0, 0)));
}

/// Two stages on two barriers, two boxes in flight, parities over three phases each.
#[test]
fn boxes_in_flight_on_two_barriers_over_several_phases_sum_right() {
    let Some(m) = module() else { return };
    let k = kernel(m, "two_stages");
    for iters in [1usize, 2, 5, 6] {
        let rows = iters * 8;
        let x: Vec<f32> = (0..32 * rows).map(|i| (i % 13) as f32 - 4.0).collect();
        let mut sums = vec![0.0f32; 64];
        m.launch(
            k,
            [1, 1, 1],
            [64, 1, 1],
            &mut [
                EmuArg::TensorMapOf {
                    arg: 0,
                    dims: [32, rows as i64],
                },
                EmuArg::input(&x),
                EmuArg::output(&mut sums),
                EmuArg::I32(iters as i32),
                EmuArg::I32(1),
            ],
        )
        .expect_err("a map of itself is refused");
        m.launch(
            k,
            [1, 1, 1],
            [64, 1, 1],
            &mut [
                EmuArg::TensorMapOf {
                    arg: 1,
                    dims: [32, rows as i64],
                },
                EmuArg::input(&x),
                EmuArg::output(&mut sums),
                EmuArg::I32(iters as i32),
                EmuArg::I32(1),
            ],
        )
        .unwrap_or_else(|e| panic!("{iters} iterations: {e}"));
        // Thread t sums stage elements t, t + 64, ... of every box (shared-memory order).
        let mut want = vec![0.0f32; 64];
        for it in 0..iters {
            let tile = want_tile(&x, (32, rows), [32, 8], 128, (0, it as i64 * 8));
            for (k, v) in tile.iter().enumerate() {
                want[k % 64] += v;
            }
        }
        assert_eq!(sums, want, "{iters} iterations");
        let total: f32 = x.iter().sum();
        assert_eq!(sums.iter().sum::<f32>(), total);
    }
    // Without the barrier before a refill, the refill writes a stage other threads read in the
    // same barrier epoch.
    let x: Vec<f32> = (0..32 * 40).map(|i| i as f32).collect();
    let mut sums = vec![0.0f32; 64];
    let err = m
        .launch(
            k,
            [1, 1, 1],
            [64, 1, 1],
            &mut [
                EmuArg::tensor_map(&x, 32, 40),
                EmuArg::input(&x),
                EmuArg::output(&mut sums),
                EmuArg::I32(5),
                EmuArg::I32(0),
            ],
        )
        .expect_err("a race");
    assert!(
        matches!(&err, RunError::EmuRace { buffer, .. } if buffer == "stage"),
        "{err}"
    );
}

#[test]
fn reading_the_destination_before_the_wait_is_a_race() {
    let Some(m) = module() else { return };
    let mat = matrix_u16();
    let mut out = vec![0u16; 64 * 32];
    let err = run_tile(
        m,
        "tile_sw128",
        &mat,
        (COLS as i64, ROWS as i64),
        (0, 0, 0, 1, 0),
        &mut out,
    )
    .expect_err("a race");
    match &err {
        RunError::EmuRace { buffer, what, .. } => {
            assert_eq!(buffer, "tile");
            assert!(what.contains("tensor copy"), "{what}");
        }
        other => panic!("expected a race, got {other}"),
    }
}

#[test]
fn bytes_announced_and_never_copied_deadlock() {
    let Some(m) = module() else { return };
    let mat = matrix_u16();
    let mut out = vec![0u16; 64 * 32];
    let err = run_tile(
        m,
        "tile_sw128",
        &mat,
        (COLS as i64, ROWS as i64),
        (0, 0, 0, 0, 16),
        &mut out,
    )
    .expect_err("a deadlock");
    match &err {
        RunError::EmuDeadlock { message, .. } => {
            assert!(message.contains("128 on an mbarrier"), "{message}");
            assert!(message.contains("16 more byte(s)"), "{message}");
        }
        other => panic!("expected a deadlock, got {other}"),
    }
}

#[test]
fn waiting_on_a_barrier_never_initialized_is_unsupported() {
    let Some(m) = module() else { return };
    let mat = matrix_u16();
    let mut out = vec![0u16; 64 * 32];
    let err = run_tile(
        m,
        "tile_sw128",
        &mat,
        (COLS as i64, ROWS as i64),
        (0, 0, 0, 0, -1),
        &mut out,
    )
    .expect_err("unsupported");
    match &err {
        RunError::EmuUnsupported { message, .. } => {
            assert!(
                message.contains("a wait on an mbarrier never initialized (`bar`[0])"),
                "{message}"
            );
        }
        other => panic!("expected an unsupported wait, got {other}"),
    }
}

#[test]
fn a_misaligned_swizzled_destination_is_unsupported() {
    let Some(m) = module() else { return };
    let mat = matrix_u16();
    // 64 elements = 128 bytes: aligned for an unswizzled copy, not for a 128-byte swizzle.
    for (name, shift, ok) in [
        ("tile_sw128", 64, false),
        ("tile_sw128", 256, false),
        ("tile_sw64", 128, false),
        ("tile_sw64", 256, true),
        ("tile_sw32", 64, false),
        ("tile_sw32", 128, true),
        ("tile_none", 64, true),
        ("tile_none", 8, false),
    ] {
        let mut out = vec![0u16; 64 * 32];
        let r = run_tile(
            m,
            name,
            &mat,
            (COLS as i64, ROWS as i64),
            (0, 0, shift, 0, 0),
            &mut out,
        );
        match r {
            Ok(_) => assert!(ok, "{name} at {shift}"),
            Err(RunError::EmuUnsupported { message, .. }) => {
                assert!(!ok, "{name} at {shift}: {message}");
                assert!(message.contains("aligned"), "{message}");
            }
            Err(e) => panic!("{name} at {shift}: {e}"),
        }
    }
}

#[test]
fn views_the_copy_engine_cannot_take_are_typed_errors() {
    let Some(m) = module() else { return };
    let mat = matrix_u16();
    let mut out = vec![0u16; 64 * 32];
    for (view, what) in [
        ((COLS as i64, ROWS as i64 + 1), "larger than the buffer"),
        ((COLS as i64 * 2, ROWS as i64), "larger than the buffer"),
        ((20, 10), "not a multiple of 16"),
        ((0, 10), "must be 1 to 2^32"),
    ] {
        let err =
            run_tile(m, "tile_sw128", &mat, view, (0, 0, 0, 0, 0), &mut out).expect_err("refused");
        match &err {
            RunError::TensorMap { arg, message, .. } => {
                assert_eq!(arg, "m_map");
                assert!(message.contains(what), "{view:?}: {message}");
            }
            other => panic!("{view:?}: expected a tensor-map error, got {other}"),
        }
    }
    // A buffer where the kernel takes a map.
    let err = m
        .launch(
            kernel(m, "tile_sw128"),
            [1, 1, 1],
            [128, 1, 1],
            &mut [
                EmuArg::input(&mat),
                EmuArg::output(&mut out),
                EmuArg::I32(0),
                EmuArg::I32(0),
                EmuArg::I32(0),
                EmuArg::I32(0),
                EmuArg::I32(0),
            ],
        )
        .expect_err("not a map");
    assert!(matches!(err, RunError::ArgKind { .. }), "{err}");
}

#[test]
fn the_tensor_copy_kernels_compile_for_sm_90() {
    common::ptx_holding(
        &source(),
        "tma.cu",
        "sm_90",
        &[
            "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes",
            "mbarrier.try_wait.parity.shared::cta.b64",
            "mbarrier.arrive.expect_tx.shared::cta.b64",
            "mbarrier.init.shared::cta.b64",
        ],
    );
}

/// The 128-byte-swizzled box (and the unswizzled one, past the edge) on a GPU of compute
/// capability 9.0 or later, through the runtime's view check and the driver's encoder.
#[test]
fn swizzled_boxes_land_as_measured_on_a_real_gpu() {
    use sparsetir_cuda::{launch, DeviceBuffer, LaunchArg};
    let Some((ctx, module)) = hopper_module(&source(), "tma.cu", false, "the tensor copies") else {
        return;
    };
    let tm = test_module();
    let mat = matrix_u16();
    let bytes: Vec<u8> = mat.iter().flat_map(|v| v.to_le_bytes()).collect();
    let dev = DeviceBuffer::from_host(&ctx, &bytes).expect("copy in");
    for (name, (c0, c1), shift) in [
        ("tile_sw128", (8, 4), 0),
        ("tile_sw128", (48, 20), 512),
        ("tile_sw64", (0, 0), 0),
        ("tile_sw32", (-8, 37), 0),
        ("tile_none", (80, 36), 0),
    ] {
        let k = tm.kernels.iter().find(|k| k.name == name).expect("kernel");
        let view = sparsetir_runtime::tensor_map::check_view(
            name,
            &k.args[0],
            [COLS as i64, ROWS as i64],
            dev.len(),
            Some(dev.device_ptr()),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(view.elem, sparsetir_cuda::TensorMapElem::U16);
        let map = ctx
            .encode_tensor_map_2d(&dev, &view)
            .unwrap_or_else(|e| panic!("{e}"));
        let n = (view.box_dims[0] * view.box_dims[1]) as usize;
        let out = DeviceBuffer::zeroed(&ctx, n * 2).expect("out");
        let f = module.function(name).expect("function");
        launch(
            &f,
            [1, 1, 1],
            [128, 1, 1],
            0,
            &[
                LaunchArg::TensorMap(&map),
                LaunchArg::Ptr(&out),
                LaunchArg::I32(c0),
                LaunchArg::I32(c1),
                LaunchArg::I32(shift),
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
        let want = want_tile(
            &mat,
            (COLS, ROWS),
            view.box_dims,
            view.swizzle,
            (i64::from(c0), i64::from(c1)),
        );
        assert_eq!(got, want, "{name} at ({c0}, {c1})");
    }
}
