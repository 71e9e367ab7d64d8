//! numpy arrays ↔ the runtime's host values: dense arrays to and from [`Tensor`]s (inputs copied
//! once, outputs handed over without a copy), COO triplets to and from [`Coo`].

use numpy::{
    Element, PyArray1, PyArrayDescrMethods, PyArrayDyn, PyArrayMethods, PyUntypedArray,
    PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use sparsetir_formats::{Coo, Field, Tensor, TensorData};
use sparsetir_ir::DType;

/// A dtype name (`float32`, `int64`, ...).
pub fn parse_dtype(s: &str) -> Result<DType, String> {
    s.parse::<DType>()
        .map_err(|_| format!("unknown dtype `{s}`"))
}

/// The elements of `arr` (any layout) as a `Vec<T>`, in C order; a contiguous array is one copy.
fn elements<T: Element + Copy>(arr: &Bound<'_, PyUntypedArray>) -> Result<Vec<T>, String> {
    let typed = arr.downcast::<PyArrayDyn<T>>().map_err(|e| e.to_string())?;
    let ro = typed.try_readonly().map_err(|e| e.to_string())?;
    // `as_slice` also takes a Fortran-ordered array, whose memory is not in C order.
    match ro.as_slice() {
        Ok(s) if typed.is_c_contiguous() => Ok(s.to_vec()),
        _ => Ok(ro.as_array().iter().copied().collect()),
    }
}

/// The 16-bit float type of `arr`, read as bit patterns: numpy's float16, or ml_dtypes'
/// bfloat16 (what JAX and others use).
pub fn sixteen_bit_float(arr: &Bound<'_, PyUntypedArray>) -> Option<DType> {
    let dt = arr.dtype();
    if dt.itemsize() != 2 {
        return None;
    }
    match dt.str().map(|s| s.to_string()).unwrap_or_default().as_str() {
        "float16" => Some(DType::F16),
        "bfloat16" => Some(DType::BF16),
        _ => None,
    }
}

/// A numpy array as a runtime tensor of the same dtype and shape.
pub fn tensor_from_numpy(arr: &Bound<'_, PyUntypedArray>) -> Result<Tensor, String> {
    let py = arr.py();
    let dt = arr.dtype();
    let shape = arr.shape().to_vec();
    macro_rules! try_types {
        ($($t:ty => $v:ident),*) => {
            $(if dt.is_equiv_to(&numpy::dtype::<$t>(py)) {
                return Ok(Tensor { shape, data: TensorData::$v(elements::<$t>(arr)?) });
            })*
        };
    }
    try_types!(f32 => F32, f64 => F64, i32 => I32, i64 => I64, i8 => I8, i16 => I16,
               u8 => U8, u16 => U16, u32 => U32, u64 => U64, bool => Bool);
    if let Some(d) = sixteen_bit_float(arr) {
        let bits = arr
            .call_method1("view", ("uint16",))
            .map_err(|e| e.to_string())?;
        let bits = bits
            .downcast::<PyUntypedArray>()
            .map_err(|e| e.to_string())?;
        return Tensor::from_bits16(d, shape, elements::<u16>(bits)?)
            .ok_or_else(|| "internal: not a 16-bit float type".to_string());
    }
    Err(format!(
        "numpy dtype {} has no sparsetir counterpart (use float16/float32/float64, \
         ml_dtypes.bfloat16, int8..int64, uint8..uint64 or bool)",
        dt.str().map(|s| s.to_string()).unwrap_or_default()
    ))
}

fn shaped<'py, T: Element>(
    py: Python<'py>,
    v: Vec<T>,
    shape: &[usize],
) -> PyResult<Bound<'py, PyAny>> {
    let flat = PyArray1::from_vec(py, v);
    if shape.len() == 1 {
        return Ok(flat.into_any());
    }
    // A reshape of a fresh contiguous array is a view: the data is not copied.
    Ok(flat.reshape(shape.to_vec())?.into_any())
}

/// A runtime tensor as a numpy array, taking over its storage (no copy).
pub fn numpy_from_tensor<'py>(py: Python<'py>, t: Tensor) -> PyResult<Bound<'py, PyAny>> {
    let shape = t.shape.clone();
    // 16-bit floats: numpy's float16, or ml_dtypes' bfloat16 where it is installed, viewed
    // from the bit patterns (no conversion); bfloat16 as float32 values otherwise (numpy has
    // no bfloat16 of its own).
    if let Some(bits) = t.bits16() {
        let view = match t.data {
            TensorData::F16(_) => Some(py.import("numpy")?.getattr("float16")?),
            _ => py
                .import("ml_dtypes")
                .and_then(|m| m.getattr("bfloat16"))
                .ok(),
        };
        if let Some(dt) = view {
            return shaped(py, bits, &shape)?.call_method1("view", (dt,));
        }
    }
    match t.data {
        TensorData::F32(v) => shaped(py, v, &shape),
        TensorData::F64(v) => shaped(py, v, &shape),
        TensorData::I32(v) => shaped(py, v, &shape),
        TensorData::I64(v) => shaped(py, v, &shape),
        TensorData::I8(v) => shaped(py, v, &shape),
        TensorData::I16(v) => shaped(py, v, &shape),
        TensorData::U8(v) => shaped(py, v, &shape),
        TensorData::U16(v) => shaped(py, v, &shape),
        TensorData::U32(v) => shaped(py, v, &shape),
        TensorData::U64(v) => shaped(py, v, &shape),
        TensorData::Bool(v) => shaped(py, v, &shape),
        TensorData::F16(v) => shaped(py, v.iter().map(|x| x.to_f32()).collect(), &shape),
        TensorData::BF16(v) => shaped(py, v.iter().map(|x| x.to_f32()).collect(), &shape),
    }
}

/// `("coo", dims, coords, values)` (coords int64 `(rank, nnz)`, values float64) as a [`Coo`].
pub fn coo_from_parts(item: &Bound<'_, PyTuple>) -> Result<Coo, String> {
    let e = |x: PyErr| x.to_string();
    let dims: Vec<usize> = item.get_item(1).map_err(e)?.extract().map_err(e)?;
    let coords_any = item.get_item(2).map_err(e)?;
    let coords = coords_any
        .downcast::<PyUntypedArray>()
        .map_err(|x| x.to_string())?;
    let values_any = item.get_item(3).map_err(e)?;
    let values = values_any
        .downcast::<PyUntypedArray>()
        .map_err(|x| x.to_string())?;
    let rank = dims.len();
    if coords.ndim() != 2 || coords.shape()[0] != rank {
        return Err(format!(
            "coordinates of shape {:?} for a {rank}-dimensional matrix",
            coords.shape()
        ));
    }
    let nnz = coords.shape()[1];
    let flat: Vec<i64> = elements::<i64>(coords)?;
    let vals: Vec<f64> = elements::<f64>(values)?;
    if vals.len() != nnz {
        return Err(format!("{nnz} coordinates but {} values", vals.len()));
    }
    let tuples = (0..nnz)
        .map(|k| (0..rank).map(|d| flat[d * nnz + k]).collect())
        .collect();
    Coo::new(dims, tuples, vals, Field::Real).map_err(|x| x.to_string())
}

/// A [`Coo`] output as `("coo", dims, coords (rank, nnz) int64, values float64, dtype)`.
pub fn coo_to_parts<'py>(py: Python<'py>, c: &Coo, dtype: &str) -> PyResult<Bound<'py, PyAny>> {
    let rank = c.dims.len();
    let nnz = c.coords.len();
    let mut flat = vec![0i64; rank * nnz];
    for (k, t) in c.coords.iter().enumerate() {
        for (d, x) in t.iter().enumerate() {
            flat[d * nnz + k] = *x;
        }
    }
    let coords = shaped(py, flat, &[rank, nnz])?;
    let values = PyArray1::from_vec(py, c.values.clone()).into_any();
    let t = PyTuple::new(
        py,
        [
            "coo".into_pyobject(py)?.into_any(),
            c.dims.clone().into_pyobject(py)?.into_any(),
            coords,
            values,
            dtype.into_pyobject(py)?.into_any(),
        ],
    )?;
    Ok(t.into_any())
}
