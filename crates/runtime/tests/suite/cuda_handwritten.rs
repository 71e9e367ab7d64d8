//! Hand-written stage III kernels and schedules through the CUDA writer and the emulator:
//! `horizontal_fuse` (GPU form) feeding one launch (three kernels of different grids and block
//! shapes concatenated over `blockIdx.x`: one grid, the widest block, narrower parts guarded);
//! shared memory written by some threads and read by others gets exactly one `__syncthreads`;
//! `warp` buffers (a slice per warp); a four-warp reduction; a shared-memory cache of the output
//! row (`reverse_cache_write`); a function-level shared buffer declared as the window one block
//! uses (and refused where it has none: two kernels, an index read from data); the grid of a
//! `blockIdx` loop whose extent is read from memory, bounded by the array's declared domain.

use sparsetir_codegen::emit_cuda;
use sparsetir_runtime::cache::KernelCache;
use sparsetir_runtime::{EmuArg, EmuModule};
use sparsetir_transform::horizontal_fuse;

const KERNELS: &str = r#"
@T.prim_func
def kernels(a: T.handle, b: T.handle, c: T.handle, d: T.handle, f: T.handle, e: T.handle, m: T.int32, p: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0, "horizontal_fuse": True})
    A = T.match_buffer(a, (m, 4), "float32")
    B = T.match_buffer(b, (p, 2), "float32")
    C = T.match_buffer(c, (m, 4), "float32")
    D = T.match_buffer(d, (p, 2), "float32")
    F = T.match_buffer(f, (3,), "float32")
    E = T.match_buffer(e, (3,), "float32")
    for bx in T.thread_binding(m, thread="blockIdx.x"):
        for tx in T.thread_binding(4, thread="threadIdx.x"):
            with T.block("k1"):
                vi = T.axis.spatial(m, bx)
                vj = T.axis.spatial(4, tx)
                C[vi, vj] = A[vi, vj] * T.float32(2)
    for bx2 in T.thread_binding(p, thread="blockIdx.x"):
        for tx2 in T.thread_binding(2, thread="threadIdx.x"):
            with T.block("k2"):
                vi2 = T.axis.spatial(p, bx2)
                vj2 = T.axis.spatial(2, tx2)
                D[vi2, vj2] = B[vi2, vj2] + T.float32(1)
    for bx3 in T.thread_binding(3, thread="blockIdx.x"):
        with T.block("k3"):
            vk = T.axis.spatial(3, bx3)
            E[vk] = F[vk] * T.float32(3)
"#;

#[test]
fn horizontally_fused_kernels_run_as_one_launch() {
    let f = sparsetir_syntax::parse_func(KERNELS).expect("parses");
    let unfused = emit_cuda(&f).expect("emits");
    assert_eq!(unfused.kernels.len(), 3);
    let g = horizontal_fuse(&f).expect("fuses");
    let m = emit_cuda(&g).expect("emits");
    assert_eq!(m.kernels.len(), 1, "{}", m.source);
    let cache =
        KernelCache::new(std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda-fused"));
    let (emu, _) = EmuModule::load(&m, &cache).expect("compiles");
    let (mm, p) = (5usize, 3usize);
    let a: Vec<f32> = (0..mm * 4).map(|v| v as f32 - 7.5).collect();
    let b: Vec<f32> = (0..p * 2).map(|v| 0.25 * v as f32).collect();
    let fv = vec![1.0f32, -2.0, 0.5];
    let (mut c, mut d, mut e) = (vec![0f32; mm * 4], vec![0f32; p * 2], vec![0f32; 3]);
    let params = [
        None,
        None,
        None,
        None,
        None,
        None,
        Some(mm as i64),
        Some(p as i64),
    ];
    let (grid, block) = emu
        .dims(0, &|k| params.get(k).copied().flatten())
        .expect("dims");
    assert_eq!(grid, [(mm + p + 3) as u32, 1, 1]);
    assert_eq!(block, [4, 1, 1]);
    let mut args = vec![
        EmuArg::input(&a),
        EmuArg::input(&b),
        EmuArg::output(&mut c),
        EmuArg::output(&mut d),
        EmuArg::input(&fv),
        EmuArg::output(&mut e),
        EmuArg::I32(mm as i32),
        EmuArg::I32(p as i32),
    ];
    emu.launch(0, grid, block, &mut args).expect("runs");
    drop(args);
    assert_eq!(c, a.iter().map(|v| 2.0 * v).collect::<Vec<_>>());
    assert_eq!(d, b.iter().map(|v| v + 1.0).collect::<Vec<_>>());
    assert_eq!(e, fv.iter().map(|v| 3.0 * v).collect::<Vec<_>>());
}

/// Each block loads a row into shared memory, then every thread reads its neighbour's element:
/// the writer must put a barrier between the two thread loops (the emulator would report the
/// race otherwise), and no barrier inside either.
const SHIFT: &str = r#"
@T.prim_func
def shift(x: T.handle, y: T.handle) -> None:
    T.func_attr({"sparse_tir_level": 0})
    X = T.match_buffer(x, (4, 32), "float32")
    Y = T.match_buffer(y, (4, 32), "float32")
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        with T.block("row"):
            vb = T.axis.spatial(4, bx)
            S = T.alloc_buffer((32,), "float32", scope="shared")
            for tx in T.thread_binding(32, thread="threadIdx.x"):
                with T.block("load"):
                    vt = T.axis.spatial(32, tx)
                    S[vt] = X[vb, vt]
            for tx2 in T.thread_binding(32, thread="threadIdx.x"):
                with T.block("use"):
                    vt2 = T.axis.spatial(32, tx2)
                    Y[vb, vt2] = S[(vt2 + 1) % 32] + S[vt2]
"#;

#[test]
fn shared_memory_written_then_read_by_other_threads_gets_one_barrier() {
    let f = sparsetir_syntax::parse_func(SHIFT).expect("parses");
    let m = emit_cuda(&f).expect("emits");
    assert_eq!(
        m.source.matches("__syncthreads();").count(),
        1,
        "{}",
        m.source
    );
    assert!(
        m.source.contains("SPTIR_SHARED(float, S, 32);"),
        "{}",
        m.source
    );
    assert_eq!(m.kernels[0].shared_bytes, 128);
    check_shift(&m, "cuda-fused", |v| (v * v % 17) as f32);
}

/// Runs a kernel computing `Y[b, t] = X[b, (t + 1) % 32] + X[b, t]` over 4 blocks of 32
/// threads in the emulator (races reported) on `X[i] = x(i)` and checks every element.
fn check_shift(m: &sparsetir_codegen::cuda::CudaModule, dir: &str, x: impl Fn(usize) -> f32) {
    let cache = KernelCache::new(std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(dir));
    let (emu, _) = EmuModule::load(m, &cache).expect("compiles");
    let x: Vec<f32> = (0..128).map(x).collect();
    let mut y = vec![0f32; 128];
    let mut args = vec![EmuArg::input(&x), EmuArg::output(&mut y)];
    emu.launch(0, [4, 1, 1], [32, 1, 1], &mut args)
        .expect("no race");
    drop(args);
    for b in 0..4 {
        for t in 0..32 {
            assert_eq!(y[b * 32 + t], x[b * 32 + (t + 1) % 32] + x[b * 32 + t]);
        }
    }
}

/// A row reduced by 128 threads (four warps): shuffles within each warp, the warps' totals
/// through shared memory behind barriers; equals the evaluator on rows of every length.
#[test]
fn a_cross_thread_reduction_over_four_warps_equals_the_evaluator() {
    use sparsetir_eval::{eval_func, ArgValue};
    use sparsetir_ops::data::{random_args, Pattern, Shape};
    use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};
    let sched = "# stage III\nb0 = sch.get_block(\"spmv0\")\nl0, = sch.get_loops(b0)\n\
                 sch.bind(l0, \"blockIdx.x\")\nb1 = sch.get_block(\"spmv1\")\n\
                 l1, = sch.get_loops(b1)\nl1o, l1i = sch.split(l1, [None, 128])\n\
                 sch.reorder(l1i, l1o)\nsch.bind(l1i, \"threadIdx.x\")\n";
    let f = sparsetir_ops::load("spmv").unwrap();
    let (_, m) = sparsetir_runtime::build::emit_cuda(&f, Some(sched), &[]).expect("emits");
    // Two barriers around the warps' slots, one after the init (the block is uniform there).
    assert_eq!(
        m.source.matches("__syncthreads();").count(),
        3,
        "{}",
        m.source
    );
    let cache =
        KernelCache::new(std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda-fused"));
    let k = GpuKernel::build(&f, Some(sched), &[], GpuDevice::Emulator, &cache).expect("builds");
    for (rows, cols, density) in [(7, 300, 0.9), (40, 200, 0.1), (3, 1000, 0.5)] {
        let shape =
            Shape::new(Pattern::Random { empty_rows: true }, rows, cols).with_density(density);
        let case = random_args("spmv", &shape, 1).expect("data");
        let mut want = case.args.clone();
        eval_func(&f, &mut want).expect("reference");
        let mut got = case.args.clone();
        k.run(&mut got).expect("runs without races");
        let (Some(ArgValue::Array(a)), Some(ArgValue::Array(b))) = (got.get("y"), want.get("y"))
        else {
            panic!("no output");
        };
        for i in 0..a.len() {
            let (x, y) = (a.get_f64(i), b.get_f64(i));
            assert!(
                (x - y).abs() <= 1e-4 * y.abs().max(1.0),
                "y[{i}] = {x}, want {y}"
            );
        }
    }
}

/// A `warp` buffer: each warp writes its lanes' values into its own slice, then every lane
/// reads its neighbour's (one barrier between); two warps per block must not see each other's
/// slice.
const WARP_SHIFT: &str = r#"
@T.prim_func
def warp_shift(x: T.handle, y: T.handle) -> None:
    T.func_attr({"sparse_tir_level": 0})
    X = T.match_buffer(x, (4, 64), "float32")
    Y = T.match_buffer(y, (4, 64), "float32")
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for ty in T.thread_binding(2, thread="threadIdx.y"):
            with T.block("row"):
                vb = T.axis.spatial(4, bx)
                vw = T.axis.spatial(2, ty)
                W = T.alloc_buffer((32,), "float32", scope="warp")
                for tx in T.thread_binding(32, thread="threadIdx.x"):
                    with T.block("load"):
                        vt = T.axis.spatial(32, tx)
                        W[vt] = X[vb, vw * 32 + vt]
                for tx2 in T.thread_binding(32, thread="threadIdx.x"):
                    with T.block("use"):
                        vt2 = T.axis.spatial(32, tx2)
                        Y[vb, vw * 32 + vt2] = W[(vt2 + 1) % 32] * T.float32(2)
"#;

#[test]
fn warp_buffers_are_one_slice_per_warp() {
    let f = sparsetir_syntax::parse_func(WARP_SHIFT).expect("parses");
    let m = emit_cuda(&f).expect("emits");
    assert!(
        m.source.contains("SPTIR_SHARED(float, W, 64);"),
        "{}",
        m.source
    );
    assert_eq!(m.kernels[0].shared_bytes, 256);
    let cache =
        KernelCache::new(std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda-fused"));
    let (emu, _) = EmuModule::load(&m, &cache).expect("compiles");
    let x: Vec<f32> = (0..256).map(|v| (v * 7 % 23) as f32).collect();
    let mut y = vec![0f32; 256];
    let mut args = vec![EmuArg::input(&x), EmuArg::output(&mut y)];
    emu.launch(0, [4, 1, 1], [32, 2, 1], &mut args)
        .expect("no race");
    drop(args);
    for b in 0..4 {
        for w in 0..2 {
            for t in 0..32 {
                let want = 2.0 * x[b * 64 + w * 32 + (t + 1) % 32];
                assert_eq!(y[b * 64 + w * 32 + t], want, "block {b} warp {w} lane {t}");
            }
        }
    }
}

/// `reverse_cache_write` into shared memory on the GPU: the row of C is gathered in shared
/// memory, accumulated there by the feature threads and written back; barriers separate the
/// zeroing, the copy in (by one thread), the accumulation and the copy out.
#[test]
fn a_shared_memory_cache_of_the_output_row_equals_the_evaluator() {
    use sparsetir_eval::{eval_func, ArgValue};
    use sparsetir_ops::data::{random_args, Init, Pattern, Shape};
    use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};
    let sched = "# stage III\nb0 = sch.get_block(\"csrmm0\")\nl0, = sch.get_loops(b0)\n\
                 sch.bind(l0, \"blockIdx.x\")\nbi = sch.get_block(\"csrmm1_init\")\n\
                 k2, = sch.get_loops(bi)\nsch.bind(k2, \"threadIdx.x\")\n\
                 b1 = sch.get_block(\"csrmm1\")\nc0 = sch.reverse_cache_write(b1, 0, \"shared\")\n\
                 j, k = sch.get_loops(b1)\nsch.reorder(k, j)\nsch.bind(k, \"threadIdx.x\")\n\
                 lw, = sch.get_loops(c0)\nsch.bind(lw, \"threadIdx.x\")\n";
    let f = sparsetir_ops::load("csrmm").unwrap();
    let spec = [("feat_size".to_string(), 24)];
    let (_, m) = sparsetir_runtime::build::emit_cuda(&f, Some(sched), &spec).expect("emits");
    assert!(
        m.source.contains("SPTIR_SHARED(float, C_data_shared, 24);"),
        "{}",
        m.source
    );
    assert_eq!(
        m.source.matches("__syncthreads();").count(),
        3,
        "{}",
        m.source
    );
    let cache =
        KernelCache::new(std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda-fused"));
    let k = GpuKernel::build(&f, Some(sched), &spec, GpuDevice::Emulator, &cache).expect("builds");
    let shape = Shape::new(Pattern::Random { empty_rows: true }, 30, 40)
        .with_density(0.3)
        .with_feat(24)
        .with_init(Init::Random);
    let case = random_args("csrmm", &shape, 3).expect("data");
    let mut want = case.args.clone();
    eval_func(&f, &mut want).expect("reference");
    let mut got = case.args.clone();
    k.run(&mut got).expect("runs without races");
    let (Some(ArgValue::Array(a)), Some(ArgValue::Array(b))) = (got.get("c"), want.get("c")) else {
        panic!("no output");
    };
    for i in 0..a.len() {
        let (x, y) = (a.get_f64(i), b.get_f64(i));
        assert!(
            (x - y).abs() <= 1e-4 * y.abs().max(1.0),
            "c[{i}] = {x}, want {y}"
        );
    }
}

/// A shared buffer past the 48 KiB a block may declare statically becomes a slice of the
/// launch's dynamic shared memory (the runtime opts the kernel in); one larger than any GPU
/// allows a block (227 KiB) is a located error of the CUDA writer, not a kernel that fails to
/// launch.
#[test]
fn shared_buffers_past_48_kib_are_dynamic_and_past_227_kib_refused() {
    let big = SHIFT.replace(
        "(32,), \"float32\", scope=\"shared\"",
        "(16384,), \"float32\", scope=\"shared\"",
    );
    let f = sparsetir_syntax::parse_func(&big).expect("parses");
    let m = emit_cuda(&f).expect("64 KiB: dynamic");
    let k = &m.kernels[0];
    assert_eq!((k.shared_bytes, k.dynamic_shared_bytes), (65536, 65536));
    assert!(
        m.source.contains("SPTIR_SHARED_DYN(float, "),
        "{}",
        m.source
    );
    let src = SHIFT.replace(
        "(32,), \"float32\", scope=\"shared\"",
        "(65536,), \"float32\", scope=\"shared\"",
    );
    let f = sparsetir_syntax::parse_func(&src).expect("parses");
    let e = emit_cuda(&f).expect_err("too much shared memory");
    let msg = e.to_string();
    assert!(msg.contains("262144") && msg.contains("232448"), "{msg}");
    assert!(!e.span().is_unknown() || msg.contains("`S`"), "{msg}");
}

/// A function-level shared buffer: each thread block uses only its row of it, so the kernel
/// declares that row (its window: 32 elements, offset by the block's row), fills it and reads
/// it shifted — the result equals the computation's, with one barrier and no race.
const WINDOW: &str = r#"
@T.prim_func
def window(x: T.handle, y: T.handle) -> None:
    T.func_attr({"sparse_tir_level": 0})
    X = T.match_buffer(x, (4, 32), "float32")
    Y = T.match_buffer(y, (4, 32), "float32")
    S = T.alloc_buffer((4, 32), "float32", scope="shared")
    for bx in T.thread_binding(4, thread="blockIdx.x"):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            with T.block("load"):
                vb, vt = T.axis.remap("SS", [bx, tx])
                S[vb, vt] = X[vb, vt]
        for tx2 in T.thread_binding(32, thread="threadIdx.x"):
            with T.block("use"):
                vb2, vt2 = T.axis.remap("SS", [bx, tx2])
                Y[vb2, vt2] = S[vb2, (vt2 + 1) % 32] + S[vb2, vt2]
"#;

#[test]
fn a_function_level_shared_buffer_is_declared_as_its_window() {
    let f = sparsetir_syntax::parse_func(WINDOW).expect("parses");
    let m = emit_cuda(&f).expect("emits");
    assert!(
        m.source.contains("SPTIR_SHARED(float, S, 32);"),
        "{}",
        m.source
    );
    assert!(m.temps.is_empty(), "no device buffer for S: {}", m.source);
    assert_eq!(
        m.source.matches("__syncthreads();").count(),
        1,
        "{}",
        m.source
    );
    check_shift(&m, "cuda-window", |v| (v * 7 % 23) as f32);
}

#[test]
fn function_level_shared_buffers_the_writer_cannot_window_are_refused() {
    // Used by two kernels: a shared array lives as long as one thread block.
    let two = WINDOW.replace(
        "        for tx2 in T.thread_binding(32, thread=\"threadIdx.x\"):",
        "    for bx2 in T.thread_binding(4, thread=\"blockIdx.x\"):\n        for tx2 in T.thread_binding(32, thread=\"threadIdx.x\"):",
    )
    .replace("[bx, tx2]", "[bx2, tx2]");
    let f = sparsetir_syntax::parse_func(&two).expect("parses");
    let e = emit_cuda(&f).expect_err("two kernels");
    assert!(e.to_string().contains("one kernel may use it"), "{e}");
    // An index read from data: no window of constant size.
    let gather = WINDOW.replace(
        "S[vb2, (vt2 + 1) % 32] + S[vb2, vt2]",
        "S[vb2, T.Cast(\"int32\", X[vb2, vt2])]",
    );
    let f = sparsetir_syntax::parse_func(&gather).expect("parses");
    let e = emit_cuda(&f).expect_err("an unbounded index");
    let msg = e.to_string();
    assert!(
        msg.contains("`S`") && msg.contains("no constant span"),
        "{msg}"
    );
}

/// A `blockIdx` loop whose extent is read from an array: a fixed grid of 4096 blocks strides
/// over it, unless the array has a declared domain (`T.assume_buffer_domain`, as the runtime
/// states for every input `indptr`): then the grid is the extent's bound, at least one block,
/// and the loop still strides over whatever the data holds.
const ROWS_FROM_MEMORY: &str = r#"
@T.prim_func
def rows(p: T.handle, c: T.handle, nnz: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    P = T.match_buffer(p, (2,), "int32")
    C = T.match_buffer(c, (nnz,), "float32")
    DOMAIN
    for bx in T.thread_binding((P[1] - P[0] + 7) // 8, thread="blockIdx.x"):
        for tx in T.thread_binding(8, thread="threadIdx.x"):
            with T.block("row"):
                vb = T.axis.spatial(nnz, bx * 8 + tx)
                T.where(bx * 8 + tx < P[1] - P[0])
                C[P[0] + vb] = C[P[0] + vb] + T.float32(1)
"#;

#[test]
fn grids_of_loops_read_from_memory_are_bounded_by_the_arrays_domain() {
    let cache =
        KernelCache::new(std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cuda-rows"));
    for (domain, want) in [
        ("", None),
        ("T.assume_buffer_domain(P, (0, nnz + 1))", Some(())),
    ] {
        let text = ROWS_FROM_MEMORY.replace("DOMAIN", domain);
        let f = sparsetir_syntax::parse_func(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
        let m = emit_cuda(&f).unwrap_or_else(|e| panic!("{e}"));
        let (emu, _) = EmuModule::load(&m, &cache).expect("compiles");
        for (nnz, p) in [
            (0usize, [0i32, 0]),
            (5, [1, 4]),
            (70, [3, 70]),
            (100_000, [0, 99_999]),
        ] {
            let params = [None, None, Some(nnz as i64)];
            let (grid, _) = emu
                .dims(0, &|k| params.get(k).copied().flatten())
                .expect("dims");
            let bound = (nnz as u32).div_ceil(8);
            match want {
                None => assert_eq!(grid[0], 4096),
                Some(()) => assert_eq!(grid[0], bound.clamp(1, 4096), "nnz {nnz}"),
            }
            // Every row of the data's range counted once, whatever the grid.
            let mut c = vec![0f32; nnz.max(1)];
            if nnz > 0 {
                let mut args = vec![
                    EmuArg::input(&p),
                    EmuArg::output(&mut c),
                    EmuArg::I32(nnz as i32),
                ];
                emu.launch(0, grid, [8, 1, 1], &mut args)
                    .unwrap_or_else(|e| panic!("{e}"));
                drop(args);
                for (i, v) in c.iter().enumerate() {
                    let inside = i >= p[0] as usize && i < p[1] as usize;
                    assert_eq!(*v, f32::from(u8::from(inside)), "nnz {nnz}, C[{i}]");
                }
            }
        }
    }
}
