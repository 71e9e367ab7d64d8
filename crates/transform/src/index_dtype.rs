//! `index_dtype` (stage I): the coordinates of a compressed axis stored in another integer type
//! — an axis of `length` coordinates needs only a type that holds `length - 1`, and narrower
//! coordinates are fewer bytes to read (2:4's positions, 0 to 3, as `int8`: a quarter of the
//! bytes `int32` takes). The axis's `idtype` is what lowering gives its `indices` buffer and
//! loop variables, so the function is otherwise unchanged; the caller passes coordinates of
//! that type (the runtime's validation checks them as before).

use sparsetir_ir::{DType, PrimFunc, Stage};

/// Why `index_dtype` refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IndexDtypeError {
    #[error("`index_dtype` takes a stage-I function (got stage {0:?})")]
    Stage(Stage),
    #[error("no axis named `{0}`")]
    NoAxis(String),
    #[error("axis `{0}` is not compressed: it stores no coordinates")]
    NotCompressed(String),
    #[error("{0} is not an integer type")]
    NotInteger(DType),
    #[error("axis `{axis}` has {length} coordinates; {dtype} cannot hold {last}", last = length - 1)]
    TooNarrow {
        axis: String,
        length: i64,
        dtype: DType,
    },
    #[error("axis `{0}` has a length that is not a constant; its coordinates keep their type")]
    SymbolicLength(String),
}

/// `func` with the coordinates of compressed axis `axis` stored as `dt` (see the module
/// documentation).
pub fn index_dtype(func: &PrimFunc, axis: &str, dt: DType) -> Result<PrimFunc, IndexDtypeError> {
    if func.stage() != Stage::I {
        return Err(IndexDtypeError::Stage(func.stage()));
    }
    if !dt.is_integer() {
        return Err(IndexDtypeError::NotInteger(dt));
    }
    let mut out = func.clone();
    let Some((id, ax)) = func.axes.iter().find(|(_, a)| a.name == axis) else {
        return Err(IndexDtypeError::NoAxis(axis.to_string()));
    };
    if !ax.kind.is_compressed() || ax.indices.is_none() {
        return Err(IndexDtypeError::NotCompressed(axis.to_string()));
    }
    let Some(length) = ax.length.as_int() else {
        return Err(IndexDtypeError::SymbolicLength(axis.to_string()));
    };
    let max = match dt.bits() {
        b if b >= 64 => i64::MAX,
        b if dt.is_int() => (1i64 << (b - 1)) - 1,
        b => (1i64 << b) - 1,
    };
    if length - 1 > max {
        return Err(IndexDtypeError::TooNarrow {
            axis: axis.to_string(),
            length,
            dtype: dt,
        });
    }
    out.axes[id].idtype = dt;
    Ok(out)
}
