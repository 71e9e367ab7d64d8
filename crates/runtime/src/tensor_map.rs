//! Tensor-map kernel arguments (`KernelArg::tensor_map`): the 2-D view of a buffer a launch
//! passes to the tensor copy engine, evaluated from the scalar parameters and checked against
//! the buffer and the engine's limits before the GPU path encodes it (`cuTensorMapEncodeTiled`)
//! or the emulator builds its `TMap`.

use sparsetir_codegen::cuda::{KernelArg, LaunchExpr, TensorMapArg};
use sparsetir_cuda::{CudaError, TensorMap2d, TensorMapElem};
use sparsetir_ir::DType;

use crate::error::RunError;

/// The copy engine's element type of buffers of `dtype` (8-bit integers, 16- and 32-bit
/// types).
pub fn tensor_map_elem(dtype: DType) -> Option<TensorMapElem> {
    Some(match dtype {
        DType::U8 | DType::I8 => TensorMapElem::U8,
        DType::F16 => TensorMapElem::F16,
        DType::BF16 => TensorMapElem::BF16,
        DType::U16 | DType::I16 => TensorMapElem::U16,
        DType::F32 => TensorMapElem::F32,
        DType::I32 => TensorMapElem::I32,
        DType::U32 => TensorMapElem::U32,
        _ => return None,
    })
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

/// The map of the view `dims` of `arg` over a buffer of `buffer_bytes` bytes (at device
/// address `address`, where the GPU path knows it), checked against the copy engine's limits by
/// [`TensorMap2d::check`] — the same check the driver makes before encoding — so that both
/// backends refuse the same views with the same [`RunError::TensorMap`].
pub fn check_view(
    kernel: &str,
    arg: &KernelArg,
    dims: [i64; 2],
    buffer_bytes: usize,
    address: Option<u64>,
) -> Result<TensorMap2d, RunError> {
    let tm = map_of(kernel, arg)?;
    let bad = |m: String| error(kernel, arg, m);
    let elem = tensor_map_elem(arg.dtype).ok_or_else(|| {
        bad(format!(
            "elements of {}: tensor maps here take 8-bit integers, 16- or 32-bit elements",
            arg.dtype
        ))
    })?;
    let [c, r] = dims;
    let (Ok(columns), Ok(rows)) = (u64::try_from(c), u64::try_from(r)) else {
        return Err(bad(format!(
            "the view's dimensions {c} x {r} (columns x rows) must be 1 to 2^32 each"
        )));
    };
    let map = TensorMap2d {
        elem,
        dims: [columns, rows],
        row_stride_bytes: columns.saturating_mul(elem.bytes()),
        box_dims: tm.box_dims,
        swizzle: tm.swizzle,
    };
    map.check(buffer_bytes as u64, address.unwrap_or(0))
        .map_err(|e| match e {
            CudaError::InvalidInput { reason, .. } => bad(reason),
            other => bad(other.to_string()),
        })?;
    Ok(map)
}
