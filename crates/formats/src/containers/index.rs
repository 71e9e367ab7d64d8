//! Index widths of container structure arrays (`i32`, `i64`) with checked conversions.

use std::fmt::{Debug, Display};
use std::hash::Hash;

use super::FormatError;

/// An integer type usable for `indptr` / `indices` arrays.
///
/// Conversions are checked: [`Index::from_usize`] returns `None` when the value does not fit,
/// [`Index::to_usize`] returns `None` for negative values.
pub trait Index:
    Copy + Ord + Eq + Hash + Debug + Display + Default + Send + Sync + 'static
{
    /// The type's name as printed in messages (`"i32"`, `"i64"`).
    const NAME: &'static str;
    /// The value widened to `i64` (exact for every implementor).
    fn to_i64(self) -> i64;
    /// The value of an `i64`, or `None` when it does not fit.
    fn from_i64(v: i64) -> Option<Self>;
    /// The value as `usize`, or `None` when negative.
    fn to_usize(self) -> Option<usize> {
        usize::try_from(self.to_i64()).ok()
    }
    /// The value of a `usize`, or `None` when it does not fit.
    fn from_usize(v: usize) -> Option<Self> {
        i64::try_from(v).ok().and_then(Self::from_i64)
    }
    /// The value as `usize` for an index already validated non-negative. A negative value gives
    /// `usize::MAX` (never a panic here); containers only call this after validation.
    fn idx(self) -> usize {
        self.to_usize().unwrap_or(usize::MAX)
    }
}

impl Index for i32 {
    const NAME: &'static str = "i32";
    fn to_i64(self) -> i64 {
        i64::from(self)
    }
    fn from_i64(v: i64) -> Option<Self> {
        i32::try_from(v).ok()
    }
}

impl Index for i64 {
    const NAME: &'static str = "i64";
    fn to_i64(self) -> i64 {
        self
    }
    fn from_i64(v: i64) -> Option<Self> {
        Some(v)
    }
}

/// `v` as an `I`, or an [`FormatError::IndexOverflow`] naming `array[pos]`.
pub(crate) fn checked<I: Index>(v: usize, array: &str, pos: usize) -> Result<I, FormatError> {
    I::from_usize(v).ok_or_else(|| FormatError::IndexOverflow {
        array: array.to_string(),
        pos,
        value: v as i128,
        ty: I::NAME,
    })
}

/// Converts a whole array to another index width, naming the first element that does not fit.
pub(crate) fn cast_slice<I: Index, J: Index>(xs: &[I], array: &str) -> Result<Vec<J>, FormatError> {
    xs.iter()
        .enumerate()
        .map(|(pos, &x)| {
            J::from_i64(x.to_i64()).ok_or_else(|| FormatError::IndexOverflow {
                array: array.to_string(),
                pos,
                value: i128::from(x.to_i64()),
                ty: J::NAME,
            })
        })
        .collect()
}
