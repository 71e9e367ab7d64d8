//! Launches on memory the caller's GPU tensors already hold (`sparsetir.ops` with PyTorch
//! CUDA tensors): a `DeviceArray` names a tensor's device address, length and element type,
//! and `Kernel.launch_device` runs a CUDA kernel on such arrays, frozen structure arrays (copied
//! to the GPU once and kept there) and scalars, on the caller's stream, without copying the
//! tensors. For the `cuda-emu` target the "device" is host memory: a CPU tensor's address.

use pyo3::prelude::*;
use pyo3::types::PyDict;
use sparsetir_ir::DType;
use sparsetir_runtime::{ArrayRef, LaunchArg, LaunchArgs};

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

/// Runs `k` on `held` on stream `stream`, without the GIL.
pub(crate) fn launch(
    py: Python<'_>,
    k: &sparsetir_runtime::gpu::GpuKernel,
    held: &[(String, Held<'_>)],
    stream: u64,
) -> PyResult<()> {
    let mut args = LaunchArgs::new();
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
    // primary context both use.
    let r = py.allow_threads(|| unsafe { k.launch(&args, stream) });
    r.map_err(|e| err(e.to_string()))
}
