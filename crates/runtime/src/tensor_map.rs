//! Tensor-map kernel arguments (`KernelArg::tensor_map`): the 2-D view of a buffer a launch
//! passes to the tensor copy engine, evaluated from the scalar parameters and checked against
//! the buffer and the engine's limits before the GPU path encodes it (`cuTensorMapEncodeTiled`)
//! or the emulator builds its `TMap`.

use sparsetir_codegen::cuda::{KernelArg, LaunchExpr, TensorMapArg};
use sparsetir_ir::DType;

use crate::error::RunError;

/// A checked view: what both backends need to build the map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorMapView {
    pub columns: u64,
    pub rows: u64,
    /// Bytes from one row to the next (`columns` elements).
    pub row_stride_bytes: u64,
    pub box_dims: [u32; 2],
    pub swizzle: u32,
    pub elem_bytes: u64,
}

fn error(kernel: &str, arg: &KernelArg, message: String) -> RunError {
    RunError::TensorMap {
        kernel: kernel.to_string(),
        arg: arg.name.clone(),
        message,
    }
}

/// The map's description, or a typed error when `arg` is not a tensor map.
pub fn map_of<'a>(kernel: &str, arg: &'a KernelArg) -> Result<&'a TensorMapArg, RunError> {
    arg.tensor_map
        .as_ref()
        .ok_or_else(|| error(kernel, arg, "the argument is not a tensor map".into()))
}

/// `[columns, rows]` of the view of `arg`, given the integer scalar parameters by index.
pub fn eval_dims(
    kernel: &str,
    arg: &KernelArg,
    params: &dyn Fn(usize) -> Option<i64>,
) -> Result<[i64; 2], RunError> {
    let tm = map_of(kernel, arg)?;
    let eval = |e: &LaunchExpr, what: &str| {
        e.eval(params)
            .ok_or_else(|| error(kernel, arg, format!("the view's {what} `{e}` has no value")))
    };
    Ok([eval(&tm.dims[0], "columns")?, eval(&tm.dims[1], "rows")?])
}

/// Checks the view `dims` of `arg` over a buffer of `buffer_bytes` bytes (at device address
/// `address`, where the GPU path knows it): columns × rows elements within the buffer, a row
/// stride of a multiple of 16 bytes, a 16-byte aligned start, 16- or 32-bit elements, a box of
/// 1 to 256 each way whose rows are a multiple of 16 bytes and at most the swizzle's span.
pub fn check_view(
    kernel: &str,
    arg: &KernelArg,
    dims: [i64; 2],
    buffer_bytes: usize,
    address: Option<u64>,
) -> Result<TensorMapView, RunError> {
    let tm = map_of(kernel, arg)?;
    let bad = |m: String| error(kernel, arg, m);
    let elem_bytes = match arg.dtype {
        DType::F16 | DType::BF16 | DType::U16 | DType::I16 => 2,
        DType::F32 | DType::I32 | DType::U32 => 4,
        d => {
            return Err(bad(format!(
                "elements of {d}: tensor maps here take 16- or 32-bit elements"
            )))
        }
    };
    let [c, r] = dims;
    if c < 1 || r < 1 || c > 1 << 32 || r > 1 << 32 {
        return Err(bad(format!(
            "the view's dimensions {c} x {r} (columns x rows) must be 1 to 2^32 each"
        )));
    }
    let (columns, rows) = (c as u64, r as u64);
    let buffer_elems = buffer_bytes as u64 / elem_bytes;
    if columns.checked_mul(rows).is_none_or(|n| n > buffer_elems) {
        return Err(bad(format!(
            "the view of {rows} rows of {columns} elements is larger than the buffer's \
             {buffer_elems} elements"
        )));
    }
    let row_stride_bytes = columns * elem_bytes;
    if !row_stride_bytes.is_multiple_of(16) {
        return Err(bad(format!(
            "a row of {columns} elements is {row_stride_bytes} bytes, not a multiple of 16 \
             (the copy engine's row stride)"
        )));
    }
    if let Some(a) = address {
        if !a.is_multiple_of(16) {
            return Err(bad(format!(
                "the buffer's device address {a:#x} is not 16-byte aligned"
            )));
        }
    }
    let [bc, br] = tm.box_dims;
    if !(1..=256).contains(&bc) || !(1..=256).contains(&br) {
        return Err(bad(format!(
            "the box {bc} x {br} (columns x rows) must be 1 to 256 each way"
        )));
    }
    let box_row = u64::from(bc) * elem_bytes;
    if !box_row.is_multiple_of(16) {
        return Err(bad(format!(
            "a box row of {bc} elements is {box_row} bytes, not a multiple of 16"
        )));
    }
    match tm.swizzle {
        0 => {}
        32 | 64 | 128 if box_row <= u64::from(tm.swizzle) => {}
        32 | 64 | 128 => {
            return Err(bad(format!(
                "a box row of {box_row} bytes is wider than the {}-byte swizzle",
                tm.swizzle
            )))
        }
        s => return Err(bad(format!("swizzle of {s} bytes (0, 32, 64 or 128)"))),
    }
    Ok(TensorMapView {
        columns,
        rows,
        row_stride_bytes,
        box_dims: tm.box_dims,
        swizzle: tm.swizzle,
        elem_bytes,
    })
}
