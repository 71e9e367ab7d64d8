//! Hand-written CUDA modules for the emulator tests (`cuda_emu.rs`, and of the tensor copy
//! engine, clusters and mbarriers `cuda_tma.rs`, `cuda_cluster.rs`, `cuda_mbar_order.rs`):
//! their kernels' arguments and the function parameters they name, the module built and
//! compiled once, its Hopper cubin on a real GPU, and what their copies and rings must give.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use sparsetir_codegen::cuda::{CudaKernel, CudaModule, KernelArg, LaunchExpr, TensorMapArg};
use sparsetir_codegen::{CParam, CParamKind};
use sparsetir_ir::DType;
use sparsetir_runtime::cuda_emu::emu_compiler;
use sparsetir_runtime::{EmuModule, KernelCache};

/// One kernel argument: name, dtype, C type, and what it is.
#[derive(Clone, Copy)]
pub enum Kind {
    In,
    Out,
    Scalar,
    /// A tensor map: box `[columns, rows]` and swizzle.
    Map([u32; 2], u32),
}

pub type ArgSpec<'a> = (&'a str, DType, &'a str, Kind);

pub fn params_and_args(
    params: &mut Vec<CParam>,
    index: &mut HashMap<String, usize>,
    spec: &[ArgSpec<'_>],
) -> Vec<KernelArg> {
    spec.iter()
        .map(|&(name, dtype, ctype, kind)| {
            // A map's buffer is the parameter of its name less the `_map` suffix.
            let buffer = name.strip_suffix("_map").unwrap_or(name);
            let param = *index.entry(buffer.to_string()).or_insert_with(|| {
                params.push(CParam {
                    name: buffer.to_string(),
                    kind: if matches!(kind, Kind::Scalar) {
                        CParamKind::Scalar(dtype)
                    } else {
                        CParamKind::Array { elem: dtype }
                    },
                });
                params.len() - 1
            });
            KernelArg {
                param,
                name: name.to_string(),
                dtype,
                ctype: ctype.to_string(),
                pointer: !matches!(kind, Kind::Scalar),
                readonly: !matches!(kind, Kind::Out),
                tensor_map: match kind {
                    Kind::Map(box_dims, swizzle) => Some(TensorMapArg {
                        // (The launches below pass the view themselves.)
                        dims: [LaunchExpr::Const(0), LaunchExpr::Const(0)],
                        box_dims,
                        swizzle,
                    }),
                    _ => None,
                },
            }
        })
        .collect()
}

/// One hand-written kernel of a test module: its name and arguments, and its launch shape as
/// the module records it (`grid` blocks of `threads` threads along x, in clusters of
/// `cluster`); the tests' launches give their own grid and block where they differ.
pub struct Hand<'a> {
    pub name: &'a str,
    pub args: Vec<ArgSpec<'a>>,
    pub grid: i64,
    pub threads: i64,
    pub cluster: [u32; 3],
}

impl<'a> Hand<'a> {
    /// One block of one thread, no cluster.
    pub fn new(name: &'a str, args: Vec<ArgSpec<'a>>) -> Self {
        Hand {
            name,
            args,
            grid: 1,
            threads: 1,
            cluster: [1, 1, 1],
        }
    }

    /// `threads` threads a block.
    pub fn threads(self, threads: i64) -> Self {
        Hand { threads, ..self }
    }

    /// Clusters of `cluster`, two of them along x.
    pub fn cluster(self, cluster: [u32; 3]) -> Self {
        Hand {
            grid: 2 * i64::from(cluster[0]),
            cluster,
            ..self
        }
    }
}

/// The module `func` of `source` whose kernels are `kernels` (`arch_specific`: it needs
/// `sm_90a`).
pub fn module_of(
    func: &str,
    source: String,
    arch_specific: bool,
    kernels: &[Hand<'_>],
) -> CudaModule {
    let mut params = Vec::new();
    let mut index = HashMap::new();
    let one = LaunchExpr::Const(1);
    let kernels = kernels
        .iter()
        .map(|k| CudaKernel {
            name: k.name.to_string(),
            args: params_and_args(&mut params, &mut index, &k.args),
            grid: [LaunchExpr::Const(k.grid), one.clone(), one.clone()],
            block: [LaunchExpr::Const(k.threads), one.clone(), one.clone()],
            shared_bytes: 0,
            dynamic_shared_bytes: 0,
            cluster: k.cluster,
            persistent: false,
        })
        .collect();
    CudaModule {
        source,
        func: func.to_string(),
        params,
        temps: Vec::new(),
        kernels,
        arch_specific,
    }
}

/// The kernel cache `name` under the target directory.
pub fn cache(name: &str) -> KernelCache {
    KernelCache::new(PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name))
}

/// The test binary's module (`build`, compiled in the cache `cache_name`), compiled once per
/// process; `None` (with a note) without a C++ compiler. One module a test binary: the first
/// call's is every later call's.
pub fn compiled_once(build: fn() -> CudaModule, cache_name: &str) -> Option<&'static EmuModule> {
    static M: OnceLock<Option<EmuModule>> = OnceLock::new();
    M.get_or_init(|| {
        if let Err(e) = emu_compiler(None).version() {
            eprintln!("note: skipping: no C++ compiler ({e})");
            return None;
        }
        let (m, _) =
            EmuModule::load(&build(), &cache(cache_name)).unwrap_or_else(|e| panic!("{e}"));
        Some(m)
    })
    .as_ref()
}

/// The index of kernel `name` in `m`.
pub fn kernel(m: &EmuModule, name: &str) -> usize {
    m.kernels()
        .iter()
        .position(|k| k.name == name)
        .expect("kernel")
}

/// `source` (file name `file`) compiled by NVRTC and loaded on the first GPU, when there is
/// one of compute capability 9.0 (`arch_specific`: exactly 9.0, compiled for `sm_90a`; else
/// 9.0 or later); `None`, with a note naming `what` is skipped, otherwise.
pub fn hopper_module(
    source: &str,
    file: &str,
    arch_specific: bool,
    what: &str,
) -> Option<(sparsetir_cuda::Context, sparsetir_cuda::Module)> {
    use sparsetir_cuda::{Context, Emit, Module};
    let nvrtc = super::nvrtc()?;
    if !super::have_gpu() {
        return None;
    }
    let ctx = Context::first_device().expect("a device");
    let arch = ctx.arch().expect("its architecture");
    let cc = arch.compute_capability();
    if (arch_specific && cc != (9, 0)) || cc < (9, 0) {
        eprintln!("note: skipping {what}: not a Hopper GPU");
        return None;
    }
    let arch = if arch_specific {
        arch.with_arch_specific()
    } else {
        arch
    };
    let cubin = nvrtc
        .compile(source, file, &arch, Emit::Cubin, &[])
        .unwrap_or_else(|e| panic!("{e}"));
    let module = Module::load(&ctx, &cubin.code).expect("module");
    Some((ctx, module))
}

/// The tensor map of kernel `name`'s first argument (in `module`) over the `cols x rows`
/// matrix in `dev`, checked as the runtime checks a view.
pub fn device_map(
    ctx: &sparsetir_cuda::Context,
    module: &CudaModule,
    name: &str,
    dev: &sparsetir_cuda::DeviceBuffer,
    (cols, rows): (usize, usize),
) -> sparsetir_cuda::TensorMap {
    let k = module
        .kernels
        .iter()
        .find(|k| k.name == name)
        .expect("kernel");
    let view = sparsetir_runtime::tensor_map::check_view(
        name,
        &k.args[0],
        [cols as i64, rows as i64],
        dev.len(),
        Some(dev.device_ptr()),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    ctx.encode_tensor_map_2d(dev, &view)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The sums of ring kernel `name` (arguments: the map of `x`, the sums, `iters` and `mode`) on
/// the GPU: two clusters of `cx` blocks of `threads` threads, one sum a thread.
#[allow(clippy::too_many_arguments)]
pub fn gpu_ring(
    (ctx, dev_module, module): (
        &sparsetir_cuda::Context,
        &sparsetir_cuda::Module,
        &CudaModule,
    ),
    name: &str,
    x: &[f32],
    view: (usize, usize),
    cx: usize,
    threads: usize,
    iters: usize,
    mode: i32,
) -> Vec<f32> {
    use sparsetir_cuda::{launch, DeviceBuffer, LaunchArg};
    let bytes: Vec<u8> = x.iter().flat_map(|v| v.to_le_bytes()).collect();
    let xd = DeviceBuffer::from_host(ctx, &bytes).expect("copy in");
    let map = device_map(ctx, module, name, &xd, view);
    let out = DeviceBuffer::zeroed(ctx, 2 * cx * threads * 4).expect("out");
    let f = dev_module.function(name).expect("function");
    launch(
        &f,
        [2 * cx as u32, 1, 1],
        [threads as u32, 1, 1],
        0,
        &[
            LaunchArg::TensorMap(&map),
            LaunchArg::Ptr(&out),
            LaunchArg::I32(iters as i32),
            LaunchArg::I32(mode),
        ],
    )
    .unwrap_or_else(|e| panic!("{name}: {e}"));
    out.to_host()
        .expect("copy out")
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// The raw shared tile after copying the box at (c0, c1) of the `cols x rows` matrix `m`
/// (elements past the view zero), element by element in shared-memory order: box element
/// (r, c) at byte `a ^ (((a >> 7) & 7) << 4)`, `a = r * row_bytes + c * elem` (128-byte
/// swizzle, as measured on an H200).
pub fn want_box<T: Copy + Default>(
    m: &[T],
    (cols, rows): (usize, usize),
    [bc, br]: [usize; 2],
    (c0, c1): (usize, usize),
) -> Vec<T> {
    let elem = std::mem::size_of::<T>();
    let mut tile = vec![T::default(); bc * br];
    for r in 0..br {
        for c in 0..bc {
            let (gr, gc) = (c1 + r, c0 + c);
            let v = if gr < rows && gc < cols {
                m[gr * cols + gc]
            } else {
                T::default()
            };
            let a = r * bc * elem + c * elem;
            tile[(a ^ (((a >> 7) & 7) << 4)) / elem] = v;
        }
    }
    tile
}

/// Sums of a ring of stages over clusters of `cx` blocks of `threads` threads (a multiple of
/// 64; `cx` = 1: no cluster): block `b`, thread t, the stage elements k = t (mod 64) of every
/// iteration, each stage `cx` boxes of 32 x 8 of the `cols x rows` matrix `x`.
pub fn want_ring(
    x: &[f32],
    (cols, rows): (usize, usize),
    (cx, threads): (usize, usize),
    iters: usize,
    b: usize,
) -> Vec<f32> {
    let mut want = vec![0.0f32; threads];
    for it in 0..iters {
        let stage: Vec<f32> = (0..cx)
            .flat_map(|r| want_box(x, (cols, rows), [32, 8], (32 * (b / cx), 8 * (it * cx + r))))
            .collect();
        for (k, v) in stage.iter().enumerate() {
            for j in 0..threads / 64 {
                want[k % 64 + 64 * j] += v;
            }
        }
    }
    want
}
