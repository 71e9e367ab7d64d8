//! `.npy` reading and writing of [`Tensor`]s (C order only), through the `npyz` crate.
//!
//! Every [`TensorData`] dtype maps to its numpy type (`|b1`, `<i1`..`<i8`, `|u1`..`<u8`, `<f2`,
//! `<f4`, `<f8`), except `bfloat16`, which numpy has no name for: it is written as 2-byte raw
//! records (`|V2`, the little-endian bits), and `|V2`/`<V2` arrays read back as `bfloat16`.
//! Big-endian files are read (npyz swaps bytes); Fortran-order files are rejected.

use std::io::Write;
use std::path::{Path, PathBuf};

use half::{bf16, f16};
use npyz::{FixedSizeBytes, Order, TypeChar, WriterBuilder};

use crate::tensor::{Tensor, TensorData};

/// A `.npy` reading or writing error.
#[derive(Debug, thiserror::Error)]
pub enum NpyError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("malformed .npy data: {0}")]
    Format(std::io::Error),
    #[error(
        "Fortran-order arrays are not supported (save with C order, e.g. numpy.ascontiguousarray)"
    )]
    FortranOrder,
    #[error("unsupported .npy dtype `{0}`")]
    UnsupportedDType(String),
    #[error("tensor shape {shape:?} holds {expected} elements but the data has {found}")]
    ShapeMismatch {
        shape: Vec<usize>,
        expected: usize,
        found: usize,
    },
}

/// Reads a `.npy` file.
pub fn read_npy(path: impl AsRef<Path>) -> Result<Tensor, NpyError> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|source| NpyError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    read_npy_bytes(&bytes)
}

/// Writes a `.npy` file.
pub fn write_npy(path: impl AsRef<Path>, tensor: &Tensor) -> Result<(), NpyError> {
    let path = path.as_ref();
    let bytes = write_npy_bytes(tensor)?;
    std::fs::write(path, bytes).map_err(|source| NpyError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Parses the bytes of a `.npy` file.
pub fn read_npy_bytes(bytes: &[u8]) -> Result<Tensor, NpyError> {
    check_header(bytes)?;
    let file = npyz::NpyFile::new(bytes).map_err(NpyError::Format)?;
    if file.order() == Order::Fortran && file.shape().len() > 1 {
        return Err(NpyError::FortranOrder);
    }
    let shape = file
        .shape()
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<Vec<usize>, _>>()
        .map_err(|_| NpyError::UnsupportedDType("shape does not fit in usize".into()))?;
    let ts = match file.dtype() {
        npyz::DType::Plain(ts) => ts,
        other => return Err(NpyError::UnsupportedDType(other.descr())),
    };
    let name = ts.to_string();
    // Refuse a header that promises more data than the file holds before allocating anything.
    let need = ts
        .num_bytes()
        .and_then(|b| (b as u64).checked_mul(file.len()));
    if !matches!(need, Some(need) if need <= bytes.len() as u64) {
        return Err(NpyError::Format(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!(
                "the header declares {} elements of `{name}`, more than the file holds",
                file.len()
            ),
        )));
    }
    let f = NpyError::Format;
    let data = match (ts.type_char(), ts.size_field()) {
        (TypeChar::Bool, 1) => TensorData::Bool(file.into_vec().map_err(f)?),
        (TypeChar::Int, 1) => TensorData::I8(file.into_vec().map_err(f)?),
        (TypeChar::Int, 2) => TensorData::I16(file.into_vec().map_err(f)?),
        (TypeChar::Int, 4) => TensorData::I32(file.into_vec().map_err(f)?),
        (TypeChar::Int, 8) => TensorData::I64(file.into_vec().map_err(f)?),
        (TypeChar::Uint, 1) => TensorData::U8(file.into_vec().map_err(f)?),
        (TypeChar::Uint, 2) => TensorData::U16(file.into_vec().map_err(f)?),
        (TypeChar::Uint, 4) => TensorData::U32(file.into_vec().map_err(f)?),
        (TypeChar::Uint, 8) => TensorData::U64(file.into_vec().map_err(f)?),
        (TypeChar::Float, 2) => TensorData::F16(file.into_vec().map_err(f)?),
        (TypeChar::Float, 4) => TensorData::F32(file.into_vec().map_err(f)?),
        (TypeChar::Float, 8) => TensorData::F64(file.into_vec().map_err(f)?),
        (TypeChar::RawData, 2) => {
            let raw: Vec<FixedSizeBytes<2>> = file.into_vec().map_err(f)?;
            TensorData::BF16(
                raw.into_iter()
                    .map(|b| bf16::from_bits(u16::from_le_bytes(b.0)))
                    .collect(),
            )
        }
        _ => return Err(NpyError::UnsupportedDType(name)),
    };
    let t = Tensor { shape, data };
    check_shape(&t)?;
    Ok(t)
}

/// Checks what `npyz` trusts before it reads the header: the header length must lie inside
/// the file (it allocates that many bytes), the `descr` must be a plain type string (sub-array
/// and record types multiply their dimensions unchecked), and every `shape` must have at most
/// 2^64 elements (the product is unchecked too: a panic in builds with overflow checks, a
/// wrapped element count otherwise). The header is parsed with the same Python-literal parser
/// `npyz` uses; anything it cannot make out is left to `npyz` to reject.
fn check_header(bytes: &[u8]) -> Result<(), NpyError> {
    let bad = |m: String| NpyError::Format(std::io::Error::new(std::io::ErrorKind::InvalidData, m));
    if bytes.len() < 12 || !bytes.starts_with(b"\x93NUMPY") {
        return Ok(());
    }
    let (start, len) = match bytes[6] {
        1 => (10, u16::from_le_bytes([bytes[8], bytes[9]]) as usize),
        _ => (
            12,
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
        ),
    };
    if start + len > bytes.len() {
        return Err(bad(format!(
            "the header length {len} runs past the end of the file ({} bytes)",
            bytes.len()
        )));
    }
    let Ok(text) = std::str::from_utf8(&bytes[start..start + len]) else {
        return Ok(());
    };
    let Ok(py_literal::Value::Dict(entries)) = text.trim().parse::<py_literal::Value>() else {
        return Ok(());
    };
    for (key, value) in &entries {
        match (key, value) {
            (py_literal::Value::String(k), v)
                if k == "descr" && !matches!(v, py_literal::Value::String(_)) =>
            {
                return Err(NpyError::UnsupportedDType(format!("{v}")));
            }
            (py_literal::Value::String(k), py_literal::Value::Tuple(dims))
            | (py_literal::Value::String(k), py_literal::Value::List(dims))
                if k == "shape" =>
            {
                let mut product = 1u64;
                for d in dims {
                    let n = match d {
                        py_literal::Value::Integer(n) => n.to_string().parse::<u64>().ok(),
                        _ => None,
                    };
                    product = n.and_then(|n| product.checked_mul(n)).ok_or_else(|| {
                        bad(format!(
                            "the shape {value} is not a list of dimensions with at most 2^64 \
                             elements in all"
                        ))
                    })?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn check_shape(t: &Tensor) -> Result<(), NpyError> {
    let expected = t.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    if expected != Some(t.len()) {
        return Err(NpyError::ShapeMismatch {
            shape: t.shape.clone(),
            expected: expected.unwrap_or(usize::MAX),
            found: t.len(),
        });
    }
    Ok(())
}

fn write_auto<T>(out: &mut Vec<u8>, shape: &[u64], data: &[T]) -> std::io::Result<()>
where
    T: npyz::AutoSerialize + Clone,
{
    let mut w = npyz::WriteOptions::<T>::new()
        .default_dtype()
        .shape(shape)
        .writer(&mut *out)
        .begin_nd()?;
    w.extend(data.iter().cloned())?;
    w.finish()
}

/// Serializes a tensor as `.npy` bytes (C order).
pub fn write_npy_bytes(tensor: &Tensor) -> Result<Vec<u8>, NpyError> {
    check_shape(tensor)?;
    let shape: Vec<u64> = tensor.shape.iter().map(|&d| d as u64).collect();
    let mut out = Vec::new();
    let r = match &tensor.data {
        TensorData::Bool(v) => write_auto(&mut out, &shape, v),
        TensorData::I8(v) => write_auto(&mut out, &shape, v),
        TensorData::I16(v) => write_auto(&mut out, &shape, v),
        TensorData::I32(v) => write_auto(&mut out, &shape, v),
        TensorData::I64(v) => write_auto(&mut out, &shape, v),
        TensorData::U8(v) => write_auto(&mut out, &shape, v),
        TensorData::U16(v) => write_auto(&mut out, &shape, v),
        TensorData::U32(v) => write_auto(&mut out, &shape, v),
        TensorData::U64(v) => write_auto(&mut out, &shape, v),
        TensorData::F16(v) => write_auto::<f16>(&mut out, &shape, v),
        TensorData::F32(v) => write_auto(&mut out, &shape, v),
        TensorData::F64(v) => write_auto(&mut out, &shape, v),
        TensorData::BF16(v) => write_bf16(&mut out, &shape, v),
    };
    r.map_err(NpyError::Format)?;
    Ok(out)
}

fn write_bf16(out: &mut Vec<u8>, shape: &[u64], data: &[bf16]) -> std::io::Result<()> {
    let ts: npyz::TypeStr = "|V2"
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{e}")))?;
    let mut w = npyz::WriteOptions::<FixedSizeBytes<2>>::new()
        .dtype(npyz::DType::Plain(ts))
        .shape(shape)
        .writer(&mut *out)
        .begin_nd()?;
    w.extend(
        data.iter()
            .map(|x| FixedSizeBytes(x.to_bits().to_le_bytes())),
    )?;
    w.finish()?;
    out.flush()
}
