//! Running a function's CUDA module on bound data: on a GPU (NVRTC + the CUDA driver, loaded
//! at run time) or in the CPU emulation of the generated CUDA. Launches are validated against
//! the stage-I function exactly as the C backend's are, so garbage `indptr`/`indices` never
//! reach a kernel.

use std::collections::HashMap;
use std::time::Duration;

use sparsetir_codegen::cuda::{CudaModule, LaunchExpr, TempFill};
use sparsetir_codegen::CParamKind;
use sparsetir_eval::ArgValue;
use sparsetir_formats::containers::nm::{
    tensor_core_metadata_2of4, tensor_core_values_2of4_by_unit,
};
use sparsetir_formats::tensor::TensorData;
use sparsetir_formats::Tensor;
use sparsetir_ir::{DType, PrimFunc};

use crate::build::{emit_cuda, BuildError, Lowered};
use crate::cache::KernelCache;
use crate::cuda_emu::{EmuArg, EmuModule, EmuStats};
use crate::error::RunError;
use crate::kernel::data_ptr;
use crate::validate::validate_args;
use crate::ValidationMemo;

mod borrowed;

/// Where the CUDA module runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GpuDevice {
    /// The CPU emulation of the generated CUDA (`cuda-emu`).
    Emulator,
    /// An NVIDIA GPU through the CUDA driver (`cuda`).
    Cuda,
}

impl GpuDevice {
    /// `cuda` or `cuda-emu`.
    pub fn name(self) -> &'static str {
        match self {
            GpuDevice::Emulator => "cuda-emu",
            GpuDevice::Cuda => "cuda",
        }
    }
}

/// What a run measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuRunStats {
    /// Emulator only: global-memory bytes the threads asked for, summed over the launches.
    pub requested_bytes: u64,
    /// Emulator only: bytes of the 32-byte sectors those accesses touched.
    pub sector_bytes: u64,
    /// GPU only: device time of the launches (CUDA events), without copies.
    pub device_time: Option<Duration>,
    /// The grid each kernel was launched with (a persistent kernel's: the blocks that walk
    /// its tiles), in launch order.
    pub grids: Vec<[u32; 3]>,
}

/// The clusters (blocks, without clusters) the emulator runs a persistent kernel's tiles on:
/// few, so that each block walks several tiles and its pipeline crosses from one to the next.
pub const EMU_RESIDENT_CLUSTERS: u32 = 2;

enum Backend {
    Emu(EmuModule),
    Cuda(Box<crate::cuda_dev::DeviceModule>),
}

/// A function built for the GPU path.
pub struct GpuKernel {
    stage1: PrimFunc,
    lowered: Lowered,
    module: CudaModule,
    backend: Backend,
    /// The launch shapes [`GpuKernel::launch`]'s validation passed on frozen structure.
    memo: ValidationMemo,
    /// By parameter: whether a kernel of the module writes it.
    written: Vec<bool>,
}

/// A kernel's launch: its grid and block.
pub(crate) type Dims = ([u32; 3], [u32; 3]);

/// A kernel's tensor-map views (`[columns, rows]`), by argument (`None`: not a tensor map).
pub(crate) type MapViews = Vec<Option<[i64; 2]>>;

/// Where a launch's kernels are queued on a GPU, and whether the call returns only once they
/// finished (it does anyway where an array makes a round trip through the host: copied in
/// and back, or a device copy or scratch buffer freed at the end).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Queue {
    /// A `CUstream` (0: the null stream).
    pub stream: u64,
    /// Return once the kernels finished.
    pub wait: bool,
}

/// One argument of a launch, before it is handed to a backend.
pub(crate) enum Slot<'a> {
    /// A host array the kernels may write (copied back from a GPU).
    Buffer(&'a mut [u8]),
    /// A host array the kernels only read.
    Read(&'a [u8]),
    /// An intermediate buffer the kernels start from zeros (these host bytes, zeroed): a GPU
    /// allocates it zeroed on the device and copies nothing back.
    Scratch(&'a mut [u8]),
    /// A frozen array's bytes and the array, which keeps its device copy for every launch.
    Frozen(&'a [u8], &'a crate::FrozenArray),
    /// An array in device memory (the emulator's device memory is host memory).
    Device {
        addr: u64,
        bytes: usize,
        writable: bool,
    },
    Int(i64),
    Float(f64),
}

/// The bytes of a vector of words.
fn tensor_bytes_u64(v: &mut [u64]) -> &mut [u8] {
    let n = std::mem::size_of_val(v);
    // SAFETY: plain integers; the view covers exactly the slice and borrows it.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), n) }
}

/// The bytes of a host array.
pub(crate) fn tensor_bytes(t: &mut Tensor) -> &mut [u8] {
    let n = t.len() * t.dtype().bytes();
    // SAFETY: `data_ptr` points at the tensor's `len` initialized elements of plain data
    // (integers, floats, bool, f16/bf16), `n` bytes in all; the view borrows the tensor.
    unsafe { std::slice::from_raw_parts_mut(data_ptr(&mut t.data).cast::<u8>(), n) }
}

impl GpuKernel {
    /// Specializes, schedules and lowers `stage1`, writes its CUDA and loads it on `device`
    /// (the emulator compiles it with the host C++ compiler through `cache`; the GPU path
    /// compiles it with NVRTC for the device's architecture).
    pub fn build(
        stage1: &PrimFunc,
        schedule: Option<&str>,
        specialization: &[(String, i64)],
        device: GpuDevice,
        cache: &KernelCache,
    ) -> Result<GpuKernel, BuildError> {
        let (lowered, module) = emit_cuda(stage1, schedule, specialization)?;
        let backend = match device {
            GpuDevice::Emulator => Backend::Emu(EmuModule::load(&module, cache)?.0),
            GpuDevice::Cuda => Backend::Cuda(Box::new(crate::cuda_dev::DeviceModule::load(
                &module, cache,
            )?)),
        };
        let mut written = vec![false; module.params.len()];
        for a in module.kernels.iter().flat_map(|k| &k.args) {
            if !a.readonly {
                if let Some(w) = written.get_mut(a.param) {
                    *w = true;
                }
            }
        }
        Ok(GpuKernel {
            stage1: lowered.stage1.clone(),
            lowered,
            module,
            written,
            backend,
            memo: ValidationMemo::new(),
        })
    }

    pub fn module(&self) -> &CudaModule {
        &self.module
    }
    pub fn lowered(&self) -> &Lowered {
        &self.lowered
    }
    pub fn stage1(&self) -> &PrimFunc {
        &self.stage1
    }
    /// The memo [`GpuKernel::launch`] validates through.
    pub fn validation_memo(&self) -> &ValidationMemo {
        &self.memo
    }

    /// Validates `args` against the stage-I function, then runs every kernel in order;
    /// outputs are written into the arrays of `args`.
    pub fn run(&self, args: &mut HashMap<String, ArgValue>) -> Result<GpuRunStats, RunError> {
        validate_args(&self.stage1, args)?;
        self.run_validated(args, 0)
    }

    /// Validates once, then runs `repeats` times (GPU: returns the median device time of the
    /// kernels, copies excluded).
    pub fn time(
        &self,
        args: &mut HashMap<String, ArgValue>,
        repeats: usize,
    ) -> Result<GpuRunStats, RunError> {
        validate_args(&self.stage1, args)?;
        self.run_validated(args, repeats.max(1))
    }

    fn run_validated(
        &self,
        args: &mut HashMap<String, ArgValue>,
        repeats: usize,
    ) -> Result<GpuRunStats, RunError> {
        let m = &self.module;
        // Scalar values by parameter index, for launch dimensions and temporaries.
        let mut ints: HashMap<usize, i64> = HashMap::new();
        for (k, p) in m.params.iter().enumerate() {
            if let (CParamKind::Scalar(dt), Some(ArgValue::Int(v))) = (&p.kind, args.get(&p.name)) {
                if dt.is_integer() || dt.is_bool() {
                    ints.insert(k, *v);
                }
            }
        }
        let mut temps = self.temps(&ints, |name, fill, dst| {
            derive_temp(m, args, name, fill, dst)
        })?;
        let (launches, tmaps) = self.plan(&ints)?;
        // Byte views of every parameter's array.
        let mut by_name: HashMap<String, &mut ArgValue> =
            args.iter_mut().map(|(k, v)| (k.clone(), v)).collect();
        let mut slots: Vec<Option<Slot<'_>>> = Vec::new();
        for p in &m.params {
            let slot = match (&p.kind, by_name.remove(&p.name)) {
                (CParamKind::Array { elem }, Some(ArgValue::Array(t))) => {
                    // The kernel reads elements of the declared type: an array of another
                    // type would be read past its end.
                    if t.dtype() != *elem && *elem != DType::Handle {
                        return Err(RunError::DTypeMismatch {
                            name: p.name.clone(),
                            expected: *elem,
                            found: t.dtype(),
                        });
                    }
                    Some(Slot::Buffer(tensor_bytes(t)))
                }
                (CParamKind::Scalar(_), Some(ArgValue::Int(v))) => Some(Slot::Int(*v)),
                (CParamKind::Scalar(_), Some(ArgValue::Float(v))) => Some(Slot::Float(*v)),
                (CParamKind::Array { elem }, None) if *elem == DType::Handle => None,
                (_, None) => return Err(unbound(&p.name)),
                (_, Some(_)) => return Err(wrong_kind(&p.name)),
            };
            slots.push(slot);
        }
        self.push_temps(&mut slots, &mut temps);
        let queue = Queue {
            stream: 0,
            wait: true,
        };
        self.execute(&launches, &tmaps, &mut slots, repeats, queue)
    }

    /// The module's intermediate buffers, zeroed, in 8-byte words (aligned for every element
    /// type), each with its exact size in bytes (one element when empty); `derive` writes
    /// those derived from an input (`name`, its [`TempFill`], the bytes).
    fn temps(
        &self,
        ints: &HashMap<usize, i64>,
        mut derive: impl FnMut(&str, &TempFill, &mut [u8]) -> Result<(), RunError>,
    ) -> Result<Vec<(Vec<u64>, usize)>, RunError> {
        let mut temps: Vec<(Vec<u64>, usize)> = Vec::new();
        for t in &self.module.temps {
            let n = eval_launch(ints, &t.elems, &format!("the size of `{}`", t.name))?;
            let n = usize::try_from(n).map_err(|_| {
                RunError::InvalidLaunch(format!("buffer `{}` has a negative size {n}", t.name))
            })?;
            let bytes = n.max(1).saturating_mul(t.dtype.bytes());
            let mut words = vec![0u64; bytes.div_ceil(8)];
            if let Some(fill) = &t.fill {
                derive(&t.name, fill, &mut tensor_bytes_u64(&mut words)[..bytes])?;
            }
            temps.push((words, bytes));
        }
        Ok(temps)
    }

    /// The slots of the temporaries `temps` made: the derived ones as host arrays, the others
    /// as scratch.
    fn push_temps<'s>(
        &self,
        slots: &mut Vec<Option<Slot<'s>>>,
        temps: &'s mut [(Vec<u64>, usize)],
    ) {
        for (t, (words, bytes)) in self.module.temps.iter().zip(temps.iter_mut()) {
            let view = &mut tensor_bytes_u64(words)[..*bytes];
            slots.push(Some(match t.fill {
                Some(_) => Slot::Buffer(view),
                None => Slot::Scratch(view),
            }));
        }
    }

    /// Every kernel's grid and block, and the views of its tensor-map arguments, from the
    /// scalar parameters `ints` (by parameter index).
    fn plan(&self, ints: &HashMap<usize, i64>) -> Result<(Vec<Dims>, Vec<MapViews>), RunError> {
        let m = &self.module;
        let eval = |e: &LaunchExpr, what: &str| eval_launch(ints, e, what);
        let mut launches = Vec::new();
        for k in &m.kernels {
            let mut grid = [0u32; 3];
            let mut block = [0u32; 3];
            for d in 0..3 {
                let g = eval(&k.grid[d], &format!("grid dimension of `{}`", k.name))?;
                let b = eval(&k.block[d], &format!("block dimension of `{}`", k.name))?;
                grid[d] = u32::try_from(g.max(0)).map_err(|_| {
                    RunError::InvalidLaunch(format!("grid of `{}` too large: {g}", k.name))
                })?;
                // At least one thread along each block dimension: a thread loop whose extent
                // may be 0 is guarded by the writer, and the block's other work still runs.
                block[d] = u32::try_from(b.max(1)).map_err(|_| {
                    RunError::InvalidLaunch(format!("block of `{}` too large: {b}", k.name))
                })?;
            }
            // A persistent kernel: as many blocks as run at once, walking its tiles.
            let resident = match &self.backend {
                Backend::Emu(_) => EMU_RESIDENT_CLUSTERS,
                Backend::Cuda(d) => d.resident_clusters(launches.len()),
            };
            let grid = k
                .launch_grid(grid, resident)
                .map_err(|e| RunError::InvalidLaunch(format!("kernel `{}`: {e}", k.name)))?;
            launches.push((grid, block));
        }
        // The views of the tensor-map arguments, by kernel and argument (checked against
        // their buffers by each backend).
        let mut tmaps: Vec<MapViews> = Vec::with_capacity(m.kernels.len());
        for k in &m.kernels {
            let mut dims = Vec::with_capacity(k.args.len());
            for a in &k.args {
                dims.push(match a.tensor_map {
                    Some(_) => Some(crate::tensor_map::eval_dims(&k.name, a, &|p| {
                        ints.get(&p).copied()
                    })?),
                    None => None,
                });
            }
            tmaps.push(dims);
        }
        Ok((launches, tmaps))
    }

    /// Runs every kernel on `slots` (one per parameter, then the temporaries), `repeats` > 0
    /// timed rounds after the first on a GPU, kernels queued as `queue` says there.
    fn execute(
        &self,
        launches: &[Dims],
        tmaps: &[MapViews],
        slots: &mut [Option<Slot<'_>>],
        repeats: usize,
        queue: Queue,
    ) -> Result<GpuRunStats, RunError> {
        let m = &self.module;
        let mut stats = match &self.backend {
            Backend::Emu(e) => {
                let mut stats = GpuRunStats::default();
                for (ki, k) in m.kernels.iter().enumerate() {
                    let (grid, block) = launches[ki];
                    if grid.contains(&0) {
                        continue;
                    }
                    // Each parameter's slot goes to its first pointer argument (or, without one,
                    // its first tensor map); its other tensor maps refer to that argument.
                    let mut placed: Vec<Option<EmuArg<'_>>> =
                        std::iter::repeat_with(|| None).take(k.args.len()).collect();
                    for (i, slot) in slots.iter_mut().enumerate() {
                        let uses: Vec<usize> = (0..k.args.len())
                            .filter(|&j| k.args[j].param == i)
                            .collect();
                        let Some(&owner) = uses
                            .iter()
                            .find(|&&j| k.args[j].tensor_map.is_none())
                            .or(uses.first())
                        else {
                            continue;
                        };
                        let a = &k.args[owner];
                        let Some(slot) = slot.as_mut() else {
                            return Err(RunError::InvalidLaunch(format!(
                                "kernel `{}`: argument `{}` has no value",
                                k.name, a.name
                            )));
                        };
                        placed[owner] = Some(match (tmaps[ki][owner], slot) {
                            (Some(dims), Slot::Buffer(b) | Slot::Scratch(b)) => EmuArg::TensorMap {
                                bytes: b,
                                dtype: Some(a.dtype),
                                dims,
                            },
                            (Some(dims), Slot::Read(b) | Slot::Frozen(b, _)) => EmuArg::TensorMap {
                                bytes: b,
                                dtype: Some(a.dtype),
                                dims,
                            },
                            (Some(_), Slot::Device { .. }) => {
                                return Err(tensor_map_of_device_array(&k.name, &a.name))
                            }
                            (_, slot) => emu_arg(slot, a.dtype),
                        });
                        for &j in &uses {
                            if let (true, Some(dims)) = (j != owner, tmaps[ki][j]) {
                                placed[j] = Some(EmuArg::TensorMapOf { arg: owner, dims });
                            }
                        }
                    }
                    let mut eargs = Vec::with_capacity(k.args.len());
                    for (a, p) in k.args.iter().zip(placed) {
                        let Some(p) = p else {
                            return Err(RunError::InvalidLaunch(format!(
                                "kernel `{}`: argument `{}` has no value",
                                k.name, a.name
                            )));
                        };
                        eargs.push(p);
                    }
                    let s: EmuStats = e.launch(ki, grid, block, &mut eargs)?;
                    stats.requested_bytes += s.requested_bytes;
                    stats.sector_bytes += s.sector_bytes;
                }
                stats
            }
            Backend::Cuda(d) => d.run(m, launches, tmaps, slots, repeats, queue)?,
        };
        stats.grids = launches.iter().map(|(g, _)| *g).collect();
        Ok(stats)
    }
}

/// A parameter the launch's arguments leave unbound.
fn unbound(name: &str) -> RunError {
    RunError::InvalidLaunch(format!("parameter `{name}` is not bound"))
}

/// A parameter bound to a scalar where it takes an array, or the other way round.
fn wrong_kind(name: &str) -> RunError {
    RunError::InvalidLaunch(format!(
        "parameter `{name}` is bound to a value of the wrong kind"
    ))
}

/// A tensor map asked of an array lent in device memory: the runtime encodes maps of the
/// buffers it allocates only.
pub(crate) fn tensor_map_of_device_array(kernel: &str, arg: &str) -> RunError {
    RunError::InvalidLaunch(format!(
        "kernel `{kernel}` takes `{arg}` as a tensor map, which a launch on an array in GPU \
         memory cannot give (lend it as a host array)"
    ))
}

/// The value of launch expression `e` (`what` it is, for the error) given the scalar
/// parameters `ints` by index.
fn eval_launch(ints: &HashMap<usize, i64>, e: &LaunchExpr, what: &str) -> Result<i64, RunError> {
    e.eval(&|k| ints.get(&k).copied())
        .ok_or_else(|| RunError::InvalidLaunch(format!("{what} `{e}` cannot be computed")))
}

/// Writes the derived buffer `name` of `m` (`dst`, its bytes) from the input it derives from
/// (see [`TempFill`]).
fn derive_temp(
    m: &CudaModule,
    args: &HashMap<String, ArgValue>,
    name: &str,
    fill: &TempFill,
    dst: &mut [u8],
) -> Result<(), RunError> {
    let (TempFill::TensorCoreMetadata {
        from,
        rows,
        row_slots,
    }
    | TempFill::TensorCoreValues {
        from,
        rows,
        row_slots,
        ..
    }) = *fill;
    let p = m
        .params
        .get(from)
        .ok_or_else(|| RunError::InvalidLaunch(format!("`{name}` derives from no parameter")))?;
    let Some(ArgValue::Array(t)) = args.get(&p.name) else {
        return Err(RunError::InvalidLaunch(format!(
            "parameter `{}` (the source of `{name}`) is not bound to an array",
            p.name
        )));
    };
    let (rows, row_slots) = (
        usize::try_from(rows).unwrap_or(0),
        usize::try_from(row_slots).unwrap_or(0),
    );
    let derived =
        |e: sparsetir_formats::FormatError| RunError::InvalidLaunch(format!("`{name}`: {e}"));
    let mismatch = |expected| RunError::DTypeMismatch {
        name: p.name.clone(),
        expected,
        found: t.dtype(),
    };
    // (The derived buffer's bytes, little-endian.)
    let bytes: Vec<u8> = match (fill, &t.data) {
        (TempFill::TensorCoreMetadata { .. }, TensorData::I8(positions)) => {
            tensor_core_metadata_2of4(positions, rows, row_slots)
                .map_err(derived)?
                .iter()
                .flat_map(|w| w.to_le_bytes())
                .collect()
        }
        (TempFill::TensorCoreMetadata { .. }, _) => return Err(mismatch(DType::I8)),
        (TempFill::TensorCoreValues { warps, units, .. }, data) => {
            // The 16-bit values as their bit patterns (the layout moves them whole).
            let bits: Vec<u16> = match data {
                TensorData::F16(v) => v.iter().map(|x| x.to_bits()).collect(),
                TensorData::BF16(v) => v.iter().map(|x| x.to_bits()).collect(),
                _ => return Err(mismatch(DType::F16)),
            };
            let (warps, units) = (
                usize::try_from(*warps).unwrap_or(0),
                usize::try_from(*units).unwrap_or(0),
            );
            tensor_core_values_2of4_by_unit(&bits, rows, row_slots, warps, units)
                .map_err(derived)?
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect()
        }
    };
    if bytes.len() != dst.len() {
        return Err(RunError::InvalidLaunch(format!(
            "`{name}` holds {} bytes, its source gives {}",
            dst.len(),
            bytes.len()
        )));
    }
    dst.copy_from_slice(&bytes);
    Ok(())
}

fn emu_arg<'s>(slot: &'s mut Slot<'_>, dt: DType) -> EmuArg<'s> {
    match slot {
        Slot::Buffer(b) | Slot::Scratch(b) => EmuArg::Out {
            bytes: b,
            dtype: Some(dt),
        },
        Slot::Read(b) | Slot::Frozen(b, _) => EmuArg::In {
            bytes: b,
            dtype: Some(dt),
        },
        // An empty array may sit at any address (a tensor of no elements at 0): the emulator
        // gets an empty view at an address aligned for every element type.
        Slot::Device { bytes: 0, .. } => {
            static ALIGNED: [u64; 2] = [0; 2];
            // SAFETY: an empty view of a static, non-null and 8-byte aligned.
            let empty = unsafe { std::slice::from_raw_parts(ALIGNED.as_ptr().cast::<u8>(), 0) };
            EmuArg::In {
                bytes: empty,
                dtype: Some(dt),
            }
        }
        // SAFETY: for the emulator, `ArrayRef::device`'s maker vouched that the address is
        // host memory holding `bytes` bytes, written by nothing else (nor read, if writable)
        // while the launch runs; the view lives no longer than the launch.
        Slot::Device {
            addr,
            bytes,
            writable: true,
        } => EmuArg::Out {
            bytes: unsafe { std::slice::from_raw_parts_mut(*addr as usize as *mut u8, *bytes) },
            dtype: Some(dt),
        },
        // SAFETY: as above, read only.
        Slot::Device {
            addr,
            bytes,
            writable: false,
        } => EmuArg::In {
            bytes: unsafe { std::slice::from_raw_parts(*addr as usize as *const u8, *bytes) },
            dtype: Some(dt),
        },
        Slot::Int(v) => match dt {
            DType::I64 => EmuArg::I64(*v),
            DType::U32 => EmuArg::U32(*v as u32),
            _ => EmuArg::I32(*v as i32),
        },
        Slot::Float(v) => match dt {
            DType::F64 => EmuArg::F64(*v),
            _ => EmuArg::F32(*v as f32),
        },
    }
}
