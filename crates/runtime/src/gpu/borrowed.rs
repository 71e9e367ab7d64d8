//! GPU launches on borrowed arguments ([`GpuKernel::launch`]): the [`LaunchArgs`] the C
//! backend's `Kernel::launch` takes, where an array may also live in GPU memory already
//! ([`ArrayRef::device`]: another library's tensor, passed by address) and a frozen array keeps
//! one device copy for every launch on it. Validation runs through the kernel's memo, so a
//! graph frozen once is read once; it never reads an array in GPU memory (and refuses a launch
//! that would need to: an axis's structure must be lent from the host, frozen).

use std::collections::HashMap;

use sparsetir_codegen::CParamKind;
use sparsetir_ir::DType;

use super::{GpuKernel, Queue, Slot};
use crate::args::{ArrayRef, LaunchArg, LaunchArgs};
use crate::error::RunError;

/// The bytes of a host array lent for a launch.
fn host_bytes<'a>(a: &ArrayRef<'a>) -> &'a [u8] {
    let n = a.len() * a.dtype().bytes();
    // SAFETY: a host `ArrayRef` views `len` initialized elements of its dtype (a write-only
    // one is refused before this is called), borrowed for `'a`; written only by the kernels of
    // the launch this view serves.
    unsafe { std::slice::from_raw_parts(a.ptr().cast::<u8>().cast_const(), n) }
}

impl GpuKernel {
    /// Validates `args` against the stage-I function (through the kernel's memo: arrays lent
    /// frozen are read once per launch shape) and runs every kernel on them, in order, on
    /// stream `stream` of a GPU (0: the null stream; the emulator ignores it). Returns when
    /// the kernels finished.
    ///
    /// Host arrays are copied to the GPU and the written ones back; a frozen array is copied
    /// once and the copy kept with it; an array in GPU memory ([`ArrayRef::device`]) is passed
    /// as it is. Scalars and dtypes are checked as [`GpuKernel::run`] checks them, and an
    /// array the kernels write must be writable.
    ///
    /// # Safety
    ///
    /// `stream` must be 0 or a live stream of the context the kernels run in (the first GPU's
    /// primary context, which PyTorch uses too).
    ///
    /// ```
    /// use sparsetir_formats::Tensor;
    /// use sparsetir_ir::DType;
    /// use sparsetir_runtime::cache::KernelCache;
    /// use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};
    /// use sparsetir_runtime::{ArrayRef, FrozenArray, LaunchArg, LaunchArgs};
    /// // SpMM under its default GPU schedule, in the emulator (`GpuDevice::Cuda` on a GPU).
    /// let csrmm = sparsetir_ops::load("csrmm")?;
    /// let schedule = sparsetir_ops::gpu_schedule("csrmm");
    /// let spec = [("feat_size".to_string(), 2)];
    /// let cache = KernelCache::new(std::env::temp_dir().join("sparsetir-doc-gpu-launch"));
    /// let kernel = GpuKernel::build(&csrmm, schedule, &spec, GpuDevice::Emulator, &cache)?;
    /// // A = [[1, 0, 2], [0, 0, 0]]: its structure frozen (validated once, copied to a GPU
    /// // once), B = 3 x 2 ones.
    /// let indptr = FrozenArray::new(Tensor::from_i64(DType::I32, &[0, 2, 2])?);
    /// let indices = FrozenArray::new(Tensor::from_i64(DType::I32, &[0, 2])?);
    /// let (a, b, mut c) = ([1.0f32, 2.0], [1.0f32; 6], [0.0f32; 4]);
    /// let mut args = LaunchArgs::new();
    /// args.int("m", 2).int("n", 3).int("nnz", 2).int("feat_size", 2);
    /// args.frozen("indptr", &indptr).frozen("indices", &indices);
    /// args.read("a", &a).read("b", &b);
    /// // An output already in "device" memory: the emulator's is host memory.
    /// // SAFETY: `c` is borrowed for the launch, and nothing else touches it meanwhile.
    /// let c_dev = unsafe { ArrayRef::device(DType::F32, c.as_mut_ptr() as usize as u64, 4, true) };
    /// args.set("c", LaunchArg::Array(c_dev));
    /// // SAFETY: the null stream.
    /// unsafe { kernel.launch(&args, 0)? };
    /// drop(args);
    /// assert_eq!(c, [3.0, 3.0, 0.0, 0.0]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub unsafe fn launch(&self, args: &LaunchArgs<'_>, stream: u64) -> Result<(), RunError> {
        // SAFETY: the caller's contract.
        unsafe { self.launch_with(args, Queue { stream, wait: true }) }
    }

    /// [`GpuKernel::launch`] that returns once the kernels are queued on `stream`, as
    /// PyTorch's operators return, where every array stays where the caller keeps it: arrays
    /// in GPU memory and frozen arrays only (a host array, or a module with intermediate
    /// buffers, makes it wait as `launch` does). A fault of the kernels shows at a later
    /// synchronising call.
    ///
    /// # Safety
    ///
    /// As for [`GpuKernel::launch`], and the arrays lent in GPU memory (and the frozen arrays)
    /// stay valid, and untouched by the host, until the stream has run the kernels.
    pub unsafe fn launch_queued(&self, args: &LaunchArgs<'_>, stream: u64) -> Result<(), RunError> {
        // SAFETY: the caller's contract.
        unsafe {
            self.launch_with(
                args,
                Queue {
                    stream,
                    wait: false,
                },
            )
        }
    }

    /// The launch on borrowed arguments, queued as `queue` says.
    unsafe fn launch_with(&self, args: &LaunchArgs<'_>, queue: Queue) -> Result<(), RunError> {
        let m = &self.module;
        for (name, arg) in args.iter() {
            if let LaunchArg::Array(a) = arg {
                if a.is_write_only() {
                    return Err(RunError::ArgKind {
                        name: name.to_string(),
                        expected: "an initialized array (a GPU launch copies its host arrays)"
                            .into(),
                        found: "a write-only one".into(),
                    });
                }
            }
        }
        self.memo.validate(&self.stage1, args)?;
        let mut ints: HashMap<usize, i64> = HashMap::new();
        let mut slots: Vec<Option<Slot<'_>>> = Vec::with_capacity(m.params.len());
        for (k, p) in m.params.iter().enumerate() {
            let written = self.written.get(k).copied().unwrap_or(false);
            let slot = match (&p.kind, args.get(&p.name)) {
                (CParamKind::Array { elem }, Some(LaunchArg::Array(a))) => {
                    if a.dtype() != *elem && *elem != DType::Handle {
                        return Err(RunError::DTypeMismatch {
                            name: p.name.clone(),
                            expected: *elem,
                            found: a.dtype(),
                        });
                    }
                    if written && !a.is_writable() {
                        return Err(RunError::ArgKind {
                            name: p.name.clone(),
                            expected: "a writable array (the kernel stores to it)".into(),
                            found: "a read-only one".into(),
                        });
                    }
                    let bytes = a.len() * a.dtype().bytes();
                    Some(if a.is_on_device() {
                        Slot::Device {
                            addr: a.ptr() as usize as u64,
                            bytes,
                            writable: a.is_writable(),
                        }
                    } else if let Some(f) = a.frozen_array() {
                        Slot::Frozen(host_bytes(a), f)
                    } else if a.is_writable() {
                        // SAFETY: a writable host `ArrayRef` comes from a `&'a mut` slice
                        // (or `ArrayRef::device`'s contract), borrowed by `args` for this
                        // launch; the kernels are its only writers meanwhile.
                        Slot::Buffer(unsafe {
                            std::slice::from_raw_parts_mut(a.ptr().cast::<u8>(), bytes)
                        })
                    } else {
                        Slot::Read(host_bytes(a))
                    })
                }
                (CParamKind::Scalar(dt), Some(LaunchArg::Int(v))) => {
                    if dt.is_integer() || dt.is_bool() {
                        ints.insert(k, *v);
                    }
                    Some(Slot::Int(*v))
                }
                (CParamKind::Scalar(_), Some(LaunchArg::Float(v))) => Some(Slot::Float(*v)),
                (CParamKind::Array { elem }, None) if *elem == DType::Handle => None,
                (_, None) => return Err(super::unbound(&p.name)),
                (_, Some(_)) => return Err(super::wrong_kind(&p.name)),
            };
            slots.push(slot);
        }
        let mut temps = self.temps(&ints, |name, _, _| {
            Err(RunError::InvalidLaunch(format!(
                "`{}` derives `{name}` from an input before its launches, which a launch on \
                 borrowed arguments does not do: run it with `GpuKernel::run`",
                m.func
            )))
        })?;
        let (launches, tmaps) = self.plan(&ints)?;
        self.push_temps(&mut slots, &mut temps);
        self.execute(&launches, &tmaps, &mut slots, 0, queue)
            .map(|_| ())
    }
}
