//! Launches on memory the caller's GPU tensors already hold (`sparsetir.ops` with PyTorch
//! CUDA tensors): a `DeviceArray` names a tensor's device address, length and element type,
//! and `Kernel.launch_device` runs a CUDA kernel on such arrays, frozen structure arrays (copied
//! to the GPU once and kept there) and scalars, on the caller's stream, without copying the
//! tensors. For the `cuda-emu` target the "device" is host memory: a CPU tensor's address.

use numpy::{PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use sparsetir_eval::ArgValue;
use sparsetir_ir::DType;
use sparsetir_runtime::cache::KernelCache;
use sparsetir_runtime::composable::hyb_gpu_spmm;
use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};
use sparsetir_runtime::{ArrayRef, FrozenArray, LaunchArg, LaunchArgs};

use crate::borrow::NativeArray;
use crate::{convert, err};

/// A tensor in GPU memory (or, for the emulator, host memory), by address: what
/// `Kernel.launch_device` passes to the kernels without a copy. Internal to `sparsetir.ops`,
/// which makes one from a tensor it holds for the whole launch: nothing here can check that
/// the address is valid.
#[pyclass(module = "sparsetir._native", frozen)]
pub struct DeviceArray {
    addr: u64,
    len: usize,
    dtype: DType,
    writable: bool,
}

#[pymethods]
impl DeviceArray {
    fn __repr__(&self) -> String {
        format!(
            "<sparsetir.DeviceArray {} x {} at {:#x}{}>",
            self.len,
            self.dtype,
            self.addr,
            if self.writable { ", writable" } else { "" }
        )
    }
}

/// `len` elements of `dtype` at device address `addr` (a tensor's `data_ptr()`), written by
/// the kernel if `writable`. The caller keeps the tensor alive and contiguous, and does not
/// touch it, for the launch.
#[pyfunction]
pub fn device_array(addr: u64, len: usize, dtype: &str, writable: bool) -> PyResult<DeviceArray> {
    let dtype = convert::parse_dtype(dtype).map_err(err)?;
    if addr == 0 && len > 0 {
        return Err(err("a device array at address 0"));
    }
    Ok(DeviceArray {
        addr,
        len,
        dtype,
        writable,
    })
}

/// Arrays and sizes a kernel object keeps for its launches (a hyb format's).
#[derive(Default)]
pub(crate) struct Own {
    frozen: Vec<(String, FrozenArray)>,
    ints: Vec<(String, i64)>,
}

/// The hyb SpMM of one matrix structure on the GPU (`hyb_spmm`): the kernel, the format's
/// index arrays (frozen: copied to the GPU once) and sizes, and where each values slot takes
/// its value from in the CSR values (`sources`), so that `sparsetir.ops` lays out new values
/// with one gather on the GPU.
#[pyclass(module = "sparsetir._native", frozen)]
pub struct HybSpmm {
    kernel: GpuKernel,
    own: Own,
    sources: Vec<(String, Vec<i64>)>,
}

#[pymethods]
impl HybSpmm {
    /// `(values parameter, CSR position of each slot's entry, -1 for padding)`, one per bucket.
    fn sources<'py>(&self, py: Python<'py>) -> Vec<(String, Bound<'py, PyArray1<i64>>)> {
        self.sources
            .iter()
            .map(|(n, s)| (n.clone(), PyArray1::from_slice(py, s)))
            .collect()
    }

    /// Runs the kernels on `args` (device arrays: `b`, `c` and the values of every bucket;
    /// frozen `indptr`/`indices`; `m`, `n`, `nnz`, `feat_size`) on stream `stream`.
    #[pyo3(signature = (args, stream=0))]
    fn launch_device(&self, py: Python<'_>, args: &Bound<'_, PyDict>, stream: u64) -> PyResult<()> {
        let held = launch_args(args)?;
        launch(py, &self.kernel, &held, &self.own, stream)
    }
}

/// The hyb SpMM (`sparsetir_runtime::composable::hyb_gpu_spmm`) of the `rows` x `cols` CSR
/// structure `indptr`/`indices` at width `feat`, built for `target` (`cuda` or `cuda-emu`).
#[pyfunction]
pub fn hyb_spmm(
    indptr: PyReadonlyArray1<'_, i32>,
    indices: PyReadonlyArray1<'_, i32>,
    rows: usize,
    cols: usize,
    feat: i64,
    target: &str,
) -> PyResult<HybSpmm> {
    let device = match target {
        "cuda" => GpuDevice::Cuda,
        "cuda-emu" => GpuDevice::Emulator,
        t => {
            return Err(err(format!(
                "hyb_spmm runs on `cuda` or `cuda-emu`, not `{t}`"
            )))
        }
    };
    let (indptr, indices) = (
        indptr.as_slice().map_err(|e| err(e.to_string()))?,
        indices.as_slice().map_err(|e| err(e.to_string()))?,
    );
    let plan = hyb_gpu_spmm(rows, cols, indptr, indices).map_err(|e| err(e.to_string()))?;
    let cache = KernelCache::from_env().map_err(err)?;
    let spec = [("feat_size".to_string(), feat)];
    let kernel = GpuKernel::build(&plan.stage1, Some(&plan.schedule), &spec, device, &cache)
        .map_err(|e| err(e.to_string()))?;
    let mut own = Own::default();
    for (name, v) in plan.args {
        match v {
            ArgValue::Array(t) => own.frozen.push((name, FrozenArray::new(t))),
            ArgValue::Int(i) => own.ints.push((name, i)),
            ArgValue::Float(_) => {}
        }
    }
    Ok(HybSpmm {
        kernel,
        own,
        sources: plan.sources,
    })
}

/// One launch argument of `launch_device`.
pub(crate) enum Held<'py> {
    Int(i64),
    Float(f64),
    Frozen(Bound<'py, NativeArray>),
    Device(Bound<'py, DeviceArray>),
}

/// The arguments of a launch on device memory, by parameter name.
pub(crate) fn launch_args<'py>(args: &Bound<'py, PyDict>) -> PyResult<Vec<(String, Held<'py>)>> {
    let mut held = Vec::with_capacity(args.len());
    for (key, v) in args.iter() {
        let name: String = key.extract()?;
        let h = if let Ok(d) = v.downcast::<DeviceArray>() {
            Held::Device(d.clone())
        } else if let Ok(f) = v.downcast::<NativeArray>() {
            Held::Frozen(f.clone())
        } else if let Ok(i) = v.extract::<i64>() {
            Held::Int(i)
        } else if let Ok(x) = v.extract::<f64>() {
            Held::Float(x)
        } else {
            return Err(err(format!(
                "argument `{name}`: a device launch takes device arrays, frozen arrays \
                 (`freeze`), ints and floats"
            )));
        };
        held.push((name, h));
    }
    Ok(held)
}

/// Runs `k` on `held` (and `own`: arrays and sizes the caller's kernel object keeps) on
/// stream `stream`, without the GIL.
pub(crate) fn launch(
    py: Python<'_>,
    k: &sparsetir_runtime::gpu::GpuKernel,
    held: &[(String, Held<'_>)],
    own: &Own,
    stream: u64,
) -> PyResult<()> {
    let mut args = LaunchArgs::new();
    for (name, f) in &own.frozen {
        args.frozen(name, f);
    }
    for (name, i) in &own.ints {
        args.int(name, *i);
    }
    for (name, h) in held {
        let a = match h {
            Held::Int(i) => LaunchArg::Int(*i),
            Held::Float(x) => LaunchArg::Float(*x),
            Held::Frozen(f) => LaunchArg::Array(ArrayRef::frozen(f.get().frozen())),
            Held::Device(d) => {
                let d = d.get();
                // SAFETY: `sparsetir.ops` makes a `DeviceArray` of a contiguous tensor of its
                // dtype and length that it holds, untouched, until this launch returns (see
                // `device_array`); the emulator's device memory is host memory, a CPU
                // tensor's.
                LaunchArg::Array(unsafe { ArrayRef::device(d.dtype, d.addr, d.len, d.writable) })
            }
        };
        args.set(name, a);
    }
    // SAFETY: `stream` is PyTorch's current stream of the tensors' device (or 0), in the
    // primary context both use. The call returns once the kernels are queued there, as
    // PyTorch's operators do: the tensors lent are PyTorch's, whose caching allocator hands
    // their memory to later work on that stream only; the frozen structure stays with its
    // matrix (it waits where a module has intermediate buffers).
    let r = py.allow_threads(|| unsafe { k.launch_queued(&args, stream) });
    r.map_err(|e| err(e.to_string()))
}
