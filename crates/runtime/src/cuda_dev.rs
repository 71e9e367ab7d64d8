//! A CUDA module on a real GPU: compiled by NVRTC for the device's architecture (the cubin kept
//! in the kernel cache under a key of source, architecture and NVRTC version), loaded through
//! the CUDA driver, launched kernel after kernel on device copies of the bound arrays.

use std::sync::Arc;
use std::time::Duration;

use sparsetir_codegen::cuda::CudaModule;
use sparsetir_cuda::{
    launch, launch_async, launch_on_stream, Arch, Context, DeviceBuffer, Emit, Function, LaunchArg,
    Module, Nvrtc, TensorMap,
};
use sparsetir_ir::DType;

use crate::cache::KernelCache;
use crate::error::RunError;
use crate::gpu::{Dims, GpuRunStats, MapViews, Queue, Slot};

/// NVRTC compiles `module` for `arch` (`emit`: PTX or cubin), through the cache: the result is
/// published atomically under a key hashing the source, the architecture, the output kind and
/// NVRTC's version. Returns the code and whether it came from the cache.
pub fn compile_cached(
    nvrtc: &Nvrtc,
    module: &CudaModule,
    arch: &Arch,
    emit: Emit,
    cache: &KernelCache,
) -> Result<(Vec<u8>, bool), RunError> {
    let (maj, min) = nvrtc.version();
    let kind = match emit {
        Emit::Ptx => "ptx",
        Emit::Cubin => "cubin",
    };
    let mut h = blake3::Hasher::new();
    h.update(b"sparsetir-cuda-v1\0");
    h.update(module.source.as_bytes());
    h.update(format!("\0{}\0{kind}\0nvrtc {maj}.{min}", arch.sm_name()).as_bytes());
    let key = h.finalize().to_hex().to_string();
    let file_name = format!("{key}.{kind}");
    if let Ok(bytes) = std::fs::read(cache.dir().join(&file_name)) {
        let ok = match emit {
            Emit::Cubin => bytes.starts_with(b"\x7fELF"),
            Emit::Ptx => bytes.windows(7).any(|w| w == b".entry "),
        };
        if ok {
            return Ok((bytes, true));
        }
    }
    let name = format!("{}.cu", module.func);
    let compiled = nvrtc.compile(&module.source, &name, arch, emit, &[])?;
    cache.publish(&file_name, &compiled.code)?;
    Ok((compiled.code, false))
}

/// The most clusters of kernel `k` (its function `f`; blocks, without clusters) the GPU runs
/// at once: the driver's cluster occupancy, which counts what fits in each GPU processing
/// cluster; without it (or without clusters) the blocks a multiprocessor runs at once times
/// the multiprocessors, in whole clusters.
fn resident_clusters(
    ctx: &Context,
    f: &Function,
    k: &sparsetir_codegen::cuda::CudaKernel,
) -> Result<u32, RunError> {
    let mut block = [1u32; 3];
    for (d, e) in block.iter_mut().zip(&k.block) {
        *d = e
            .eval(&|_| None)
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| {
                RunError::InvalidLaunch(format!(
                    "persistent kernel `{}`: its block `{e}` is not a constant",
                    k.name
                ))
            })?;
    }
    let dynamic = u32::try_from(k.dynamic_shared_bytes).unwrap_or(u32::MAX);
    let c = k.cluster.iter().product::<u32>().max(1);
    let per_sm = f.max_active_blocks_per_sm(block.iter().product(), dynamic as usize)?;
    let blocks = per_sm.max(1) * ctx.device().multiprocessor_count()?;
    if c > 1 {
        // (Else a few clusters would start only once others finished all their tiles.)
        if let Ok(n @ 1..) = f.max_active_clusters(block, k.cluster, dynamic) {
            if n * c <= blocks {
                return Ok(n);
            }
        }
    }
    Ok((blocks / c).max(1))
}

/// A module loaded on the first GPU.
pub struct DeviceModule {
    ctx: Context,
    _module: Module,
    funcs: Vec<Function>,
    /// By kernel: the most of its clusters (blocks, without clusters) the GPU runs at once,
    /// for a persistent kernel's grid (0 for the others).
    resident: Vec<u32>,
    device_name: String,
}

impl DeviceModule {
    /// Compiles (through the cache) and loads `m` on the first GPU.
    pub fn load(m: &CudaModule, cache: &KernelCache) -> Result<DeviceModule, RunError> {
        let ctx = Context::first_device()?;
        let mut arch = ctx.arch()?;
        // Architecture-specific instructions (`wgmma`): sm_90a, on a GPU of compute
        // capability 9.0 only.
        if m.arch_specific {
            if arch.compute_capability() != (9, 0) {
                return Err(RunError::Cuda(format!(
                    "`{}` uses Hopper's warpgroup tensor-core instructions (wgmma, sm_90a); \
                     this GPU is {}",
                    m.func,
                    arch.sm_name()
                )));
            }
            arch = arch.with_arch_specific();
        }
        // Thread-block clusters (`__cluster_dims__`): compute capability 9.0 and later.
        if let Some(k) = m.kernels.iter().find(|k| k.cluster != [1, 1, 1]) {
            if arch.compute_capability() < (9, 0) {
                return Err(RunError::Cuda(format!(
                    "kernel `{}` of `{}` runs in thread-block clusters of {:?} blocks (sm_90 and \
                     later); this GPU is {}",
                    k.name,
                    m.func,
                    k.cluster,
                    arch.sm_name()
                )));
            }
        }
        let nvrtc = Nvrtc::load()?;
        let (cubin, _) = compile_cached(&nvrtc, m, &arch, Emit::Cubin, cache)?;
        let module = Module::load(&ctx, &cubin)?;
        let mut funcs = Vec::new();
        for k in &m.kernels {
            let f = module.function(&k.name)?;
            // Shared memory past the static 48 KiB: opted in to, within the device's limit.
            if k.dynamic_shared_bytes > 0 {
                let limit = ctx.max_shared_per_block_optin()? as u64;
                if k.shared_bytes > limit {
                    return Err(RunError::Cuda(format!(
                        "kernel `{}` of `{}` needs {} bytes of shared memory per block; {} \
                         allows at most {limit}",
                        k.name,
                        m.func,
                        k.shared_bytes,
                        arch.sm_name()
                    )));
                }
                f.set_max_dynamic_shared(k.dynamic_shared_bytes as u32)?;
            }
            funcs.push(f);
        }
        let mut resident = Vec::with_capacity(funcs.len());
        for (k, f) in m.kernels.iter().zip(&funcs) {
            resident.push(if k.persistent {
                resident_clusters(&ctx, f, k)?
            } else {
                0
            });
        }
        let device_name = ctx.name()?;
        Ok(DeviceModule {
            ctx,
            _module: module,
            funcs,
            resident,
            device_name,
        })
    }

    /// The most clusters of kernel `k` (blocks, without clusters) the GPU runs at once: what a
    /// launch of a persistent kernel takes ([`sparsetir_codegen::cuda::CudaKernel::launch_grid`]).
    pub fn resident_clusters(&self, k: usize) -> u32 {
        self.resident.get(k).copied().unwrap_or(0)
    }

    /// The GPU's name.
    pub fn device_name(&self) -> &str {
        &self.device_name
    }

    /// Copies the arrays in, runs the kernels (`repeats` > 0: that many timed rounds, the
    /// median reported), copies the arrays the kernels write back out. `tmaps`: the view of
    /// every tensor-map argument, by kernel and argument.
    pub(crate) fn run(
        &self,
        m: &CudaModule,
        launches: &[Dims],
        tmaps: &[MapViews],
        slots: &mut [Option<Slot<'_>>],
        repeats: usize,
        queue: Queue,
    ) -> Result<GpuRunStats, RunError> {
        let stream = queue.stream;
        // An array making a round trip through the host (copied in, copied back, or a device
        // copy or scratch buffer freed below) waits for the kernels.
        let round_trip = slots
            .iter()
            .any(|s| matches!(s, Some(Slot::Buffer(_) | Slot::Read(_) | Slot::Scratch(_))));
        let wait = queue.wait || round_trip || repeats > 0;
        // Every grid a whole number of its kernel's clusters (declared in the source by
        // `__cluster_dims__`, so the launch itself needs no attribute), checked before any copy.
        for (k, &(grid, _)) in m.kernels.iter().zip(launches) {
            if !grid.contains(&0) {
                crate::cuda_emu::check_cluster(&k.name, grid, k.cluster)?;
            }
        }
        // Host arrays are copied in; a frozen one's copy is made once and kept with it.
        let mut bufs: Vec<Option<Arc<DeviceBuffer>>> = Vec::with_capacity(slots.len());
        for s in slots.iter() {
            bufs.push(match s {
                Some(Slot::Buffer(b)) => Some(Arc::new(DeviceBuffer::from_host(&self.ctx, b)?)),
                Some(Slot::Read(b)) => Some(Arc::new(DeviceBuffer::from_host(&self.ctx, b)?)),
                Some(Slot::Scratch(b)) => Some(Arc::new(DeviceBuffer::zeroed(&self.ctx, b.len())?)),
                Some(Slot::Frozen(b, f)) => Some(f.device_copy(&self.ctx, b)?),
                _ => None,
            });
        }
        // The tensor maps, checked and encoded once for every launch (they hold the buffers'
        // device addresses).
        let mut maps: Vec<Vec<Option<TensorMap>>> = Vec::with_capacity(m.kernels.len());
        for (ki, k) in m.kernels.iter().enumerate() {
            let mut row = Vec::with_capacity(k.args.len());
            for (j, a) in k.args.iter().enumerate() {
                let dims = tmaps.get(ki).and_then(|t| t.get(j).copied()).flatten();
                row.push(match (dims, bufs.get(a.param)) {
                    (Some(dims), Some(Some(b))) => Some(self.encode(&k.name, a, dims, b)?),
                    (Some(_), _)
                        if matches!(slots.get(a.param), Some(Some(Slot::Device { .. }))) =>
                    {
                        return Err(crate::gpu::tensor_map_of_device_array(&k.name, &a.name))
                    }
                    (Some(_), _) => {
                        return Err(RunError::InvalidLaunch(format!(
                            "kernel `{}`: tensor map `{}` has no buffer",
                            k.name, a.name
                        )))
                    }
                    (None, _) => None,
                });
            }
            maps.push(row);
        }
        let mut written = vec![false; slots.len()];
        let mut args_of = Vec::with_capacity(m.kernels.len());
        for (ki, k) in m.kernels.iter().enumerate() {
            let mut args = Vec::with_capacity(k.args.len());
            for (j, a) in k.args.iter().enumerate() {
                if let Some(Some(map)) = maps[ki].get(j) {
                    args.push(LaunchArg::TensorMap(map));
                    continue;
                }
                let arg = match (slots.get(a.param), bufs.get(a.param)) {
                    (_, Some(Some(b))) => {
                        if !a.readonly {
                            written[a.param] = true;
                        }
                        LaunchArg::Ptr(b)
                    }
                    (Some(Some(Slot::Device { addr, .. })), _) => LaunchArg::Addr(*addr),
                    (Some(Some(Slot::Int(v))), _) => match a.dtype {
                        DType::I64 => LaunchArg::I64(*v),
                        DType::U32 => LaunchArg::U32(*v as u32),
                        _ => LaunchArg::I32(*v as i32),
                    },
                    (Some(Some(Slot::Float(v))), _) => match a.dtype {
                        DType::F64 => LaunchArg::F64(*v),
                        _ => LaunchArg::F32(*v as f32),
                    },
                    _ => {
                        return Err(RunError::InvalidLaunch(format!(
                            "kernel `{}`: argument `{}` has no value",
                            k.name, a.name
                        )))
                    }
                };
                args.push(arg);
            }
            args_of.push(args);
        }
        let run_all = |sync: bool| -> Result<(), sparsetir_cuda::CudaError> {
            for (i, f) in self.funcs.iter().enumerate() {
                let (grid, block) = launches[i];
                if grid.contains(&0) {
                    continue;
                }
                let dynamic = m.kernels[i].dynamic_shared_bytes as u32;
                if stream != 0 || !wait {
                    // SAFETY: the stream is the caller's (`GpuKernel::launch`'s contract),
                    // and every `Addr` an array its maker vouched for. Without a wait, every
                    // array is the caller's or a frozen array's device copy, none freed here.
                    unsafe { launch_on_stream(f, grid, block, dynamic, &args_of[i], stream)? };
                    if sync && wait {
                        self.ctx.synchronize()?;
                    }
                } else if sync {
                    launch(f, grid, block, dynamic, &args_of[i])?;
                } else {
                    launch_async(f, grid, block, dynamic, &args_of[i])?;
                }
            }
            Ok(())
        };
        run_all(true)?;
        for (i, s) in slots.iter_mut().enumerate() {
            if let (Some(Slot::Buffer(host)), Some(Some(b)), true) =
                (s, bufs.get(i), written.get(i).copied().unwrap_or(false))
            {
                b.copy_to_host(host)?;
            }
        }
        let mut stats = GpuRunStats::default();
        if repeats > 0 {
            // The results read back are the first round's; the timed rounds run on the same
            // device arrays (the generated kernels initialise what they accumulate into).
            let mut times = Vec::with_capacity(repeats);
            for _ in 0..repeats {
                times.push(self.ctx.time_ms(|| run_all(false))?);
            }
            times.sort_by(|a, b| a.total_cmp(b));
            let med = times[times.len() / 2];
            stats.device_time = Some(Duration::from_secs_f64(f64::from(med) / 1e3));
        }
        Ok(stats)
    }

    /// The tensor map of argument `a` (a view `dims` of device buffer `b`), checked first.
    fn encode(
        &self,
        kernel: &str,
        a: &sparsetir_codegen::cuda::KernelArg,
        dims: [i64; 2],
        b: &DeviceBuffer,
    ) -> Result<TensorMap, RunError> {
        let map = crate::tensor_map::check_view(kernel, a, dims, b.len(), Some(b.device_ptr()))?;
        self.ctx
            .encode_tensor_map_2d(b, &map)
            .map_err(|e| RunError::TensorMap {
                kernel: kernel.to_string(),
                arg: a.name.clone(),
                message: e.to_string(),
            })
    }
}
