//! Launch arguments without copies: numpy float arrays lent to a C kernel as they are, and
//! frozen arrays (`freeze`) that Rust owns and no Python code can change.
//!
//! What is lent and what is copied, and why:
//! - **Index arrays are never lent.** Validation checks an `indptr` or `indices` array and then
//!   the kernel addresses memory with it. A numpy array can be written by another Python thread
//!   while the kernel runs without the GIL, so an index array lent from numpy could leave its
//!   validated range mid-launch. Index arrays are therefore copied (integer numpy arrays), or
//!   passed as [`NativeArray`]s: copied once by `freeze`, immutable, never copied again, and
//!   read by a kernel's validation once per launch shape (`sparsetir_runtime::FrozenArray`: a
//!   launch with the same scalars, lengths and frozen arrays passes on what was read).
//!   `sparsetir.ops` freezes the structure of each cached matrix.
//! - **Float arrays are lent** (read-only borrows through the numpy crate, C-contiguous and
//!   aligned ones): a concurrent writer can change the numbers a kernel reads, never where it
//!   reads, since no address is computed from a float.
//! - **Arrays the kernel writes** that the caller passes as inputs are copied, as before (the
//!   kernel writes the copy); outputs are allocated here and handed to numpy without a copy.

use numpy::{
    Element, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArray, PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use sparsetir_formats::Tensor;
use sparsetir_ir::DType;
use sparsetir_runtime::{ArrayRef, FrozenArray, LaunchArg};

use crate::convert;

/// An array owned by sparsetir that no Python code can write: an index array copied once and
/// then passed to any number of launches without a copy (`sparsetir._native.freeze`).
#[pyclass(module = "sparsetir._native", frozen)]
pub struct NativeArray {
    frozen: FrozenArray,
}

impl NativeArray {
    /// The frozen array.
    pub(crate) fn frozen(&self) -> &FrozenArray {
        &self.frozen
    }
}

#[pymethods]
impl NativeArray {
    /// The element type (`int32`, `float32`, ...).
    #[getter]
    fn dtype(&self) -> String {
        self.frozen.tensor().dtype().to_string()
    }

    #[getter]
    fn shape(&self) -> Vec<usize> {
        self.frozen.tensor().shape.clone()
    }

    fn __len__(&self) -> usize {
        self.frozen.tensor().shape.first().copied().unwrap_or(1)
    }

    /// A copy as a numpy array.
    fn numpy<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        convert::numpy_from_tensor(py, self.frozen.tensor().clone())
    }

    fn __repr__(&self) -> String {
        format!(
            "<sparsetir.NativeArray {} {:?}>",
            self.frozen.tensor().dtype(),
            self.frozen.tensor().shape
        )
    }
}

/// Copies `arr` into an immutable [`NativeArray`].
#[pyfunction]
pub fn freeze(arr: &Bound<'_, PyUntypedArray>) -> PyResult<NativeArray> {
    let tensor = convert::tensor_from_numpy(arr).map_err(crate::err)?;
    Ok(NativeArray {
        frozen: FrozenArray::new(tensor),
    })
}

/// One launch argument as the caller gave it, held for the launch.
pub enum Lent<'py> {
    Int(i64),
    Float(f64),
    /// A copy (integer arrays, arrays the kernel writes, non-contiguous or misaligned ones).
    Owned(Tensor),
    Frozen(Bound<'py, NativeArray>),
    F32(PyReadonlyArrayDyn<'py, f32>),
    F64(PyReadonlyArrayDyn<'py, f64>),
    /// float16 or bfloat16, read through a `uint16` view of the same memory.
    Bits16(DType, PyReadonlyArrayDyn<'py, u16>),
}

/// A read-only borrow of `arr` as `T` when it is C-contiguous and aligned for `T`.
fn borrow<'py, T: Element>(arr: &Bound<'py, PyUntypedArray>) -> Option<PyReadonlyArrayDyn<'py, T>> {
    let typed = arr.downcast::<PyArrayDyn<T>>().ok()?;
    // `as_slice` also accepts Fortran order, which is not the row-major layout kernels read.
    if !typed.is_c_contiguous() || typed.data().align_offset(std::mem::align_of::<T>()) != 0 {
        return None;
    }
    typed.try_readonly().ok()
}

impl<'py> Lent<'py> {
    /// `value` for parameter `name`; `written`: the kernel writes this parameter.
    pub fn new(name: &str, value: &Bound<'py, PyAny>, written: bool) -> PyResult<Lent<'py>> {
        if let Ok(frozen) = value.downcast::<NativeArray>() {
            if written {
                return Ok(Lent::Owned(frozen.get().frozen.tensor().clone()));
            }
            return Ok(Lent::Frozen(frozen.clone()));
        }
        if let Ok(arr) = value.downcast::<PyUntypedArray>() {
            if !written {
                if let Some(b) = borrow::<f32>(arr) {
                    return Ok(Lent::F32(b));
                }
                if let Some(b) = borrow::<f64>(arr) {
                    return Ok(Lent::F64(b));
                }
                if let Some(d) = convert::sixteen_bit_float(arr) {
                    let bits = arr.call_method1("view", ("uint16",))?;
                    if let Some(b) = bits.downcast::<PyUntypedArray>().ok().and_then(borrow) {
                        return Ok(Lent::Bits16(d, b));
                    }
                }
            }
            return convert::tensor_from_numpy(arr)
                .map(Lent::Owned)
                .map_err(|m| crate::err(format!("argument `{name}`: {m}")));
        }
        if let Ok(i) = value.extract::<i64>() {
            return Ok(Lent::Int(i));
        }
        if let Ok(x) = value.extract::<f64>() {
            return Ok(Lent::Float(x));
        }
        Err(crate::err(format!(
            "argument `{name}`: expected a numpy array, an int or a float"
        )))
    }

    /// The launch argument: a view of what is held, no copy (an owned copy lent writable).
    pub fn arg(&mut self) -> PyResult<LaunchArg<'_>> {
        // `borrow` granted only C-contiguous arrays, so `as_slice` does not fail; should it,
        // the launch is refused rather than given other memory.
        let contiguous = |e: numpy::NotContiguousError| crate::err(format!("internal: {e}"));
        Ok(match self {
            Lent::Int(i) => LaunchArg::Int(*i),
            Lent::Float(x) => LaunchArg::Float(*x),
            Lent::Owned(t) => LaunchArg::Array(ArrayRef::of_tensor_mut(t)),
            Lent::Frozen(f) => LaunchArg::Array(ArrayRef::frozen(&f.get().frozen)),
            Lent::F32(a) => LaunchArg::Array(ArrayRef::read(a.as_slice().map_err(contiguous)?)),
            Lent::F64(a) => LaunchArg::Array(ArrayRef::read(a.as_slice().map_err(contiguous)?)),
            Lent::Bits16(d, a) => {
                use half::slice::HalfBitsSliceExt;
                let bits = a.as_slice().map_err(contiguous)?;
                LaunchArg::Array(if *d == DType::F16 {
                    ArrayRef::read(bits.reinterpret_cast::<half::f16>())
                } else {
                    ArrayRef::read(bits.reinterpret_cast::<half::bf16>())
                })
            }
        })
    }
}
