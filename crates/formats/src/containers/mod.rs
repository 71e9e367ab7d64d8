//! Validated sparse-matrix containers (CSR, CSC, DCSR, BSR, ELL, n:m, CSF, ragged), generic over
//! the value type ([`Value`]) and the index width ([`Index`]), with typed [`FormatError`]s.
//!
//! Every container checks its arrays in `try_new` (SPEC §5.1): `indptr` has the right length,
//! starts at 0, never decreases and ends at nnz; indices are in range; indices are strictly
//! increasing inside each row (or column, fiber) when declared sorted; block sizes divide the
//! shape unless padding is declared. Conversions between containers live in
//! [`crate::convert`].

pub mod bsr;
mod compressed;
pub mod csc;
pub mod csf;
pub mod csr;
pub mod dcsr;
pub mod ell;
pub mod index;
pub mod nm;
pub mod ragged;

use std::fmt::{Debug, Display};

pub use bsr::{Bsr, BsrPadding};
pub use csc::Csc;
pub use csf::{Csf, CsfLevel};
pub use csr::Csr;
pub use dcsr::Dcsr;
pub use ell::Ell;
pub use index::Index;
pub use nm::Nm;
pub use ragged::Ragged;

use crate::coo::{CooError, Field};

/// A scalar a container can hold.
pub trait Value:
    Copy + PartialEq + PartialOrd + Debug + Display + Default + Send + Sync + 'static
{
    /// The Matrix Market field of a COO produced from values of this type.
    const FIELD: Field;
    /// The additive identity (what fill and padding slots hold).
    fn zero() -> Self {
        Self::default()
    }
    /// Whether this is the zero value.
    fn is_zero(self) -> bool {
        self == Self::zero()
    }
    /// Sum used when duplicates are combined (wrapping for integers: never a panic).
    fn plus(self, other: Self) -> Self;
    /// Magnitude used by prune-and-compress.
    fn magnitude(self) -> f64;
    /// The value as `f64` (for COO).
    fn to_f64(self) -> f64;
    /// The value of an `f64` (a plain `as` cast for integers: saturating, NaN gives 0).
    fn from_f64(v: f64) -> Self;
}

impl Value for f64 {
    const FIELD: Field = Field::Real;
    fn plus(self, other: Self) -> Self {
        self + other
    }
    fn magnitude(self) -> f64 {
        self.abs()
    }
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(v: f64) -> Self {
        v
    }
}

impl Value for f32 {
    const FIELD: Field = Field::Real;
    fn plus(self, other: Self) -> Self {
        self + other
    }
    fn magnitude(self) -> f64 {
        f64::from(self.abs())
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}

impl Value for i32 {
    const FIELD: Field = Field::Integer;
    fn plus(self, other: Self) -> Self {
        self.wrapping_add(other)
    }
    fn magnitude(self) -> f64 {
        f64::from(self).abs()
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn from_f64(v: f64) -> Self {
        v as i32
    }
}

impl Value for i64 {
    const FIELD: Field = Field::Integer;
    fn plus(self, other: Self) -> Self {
        self.wrapping_add(other)
    }
    fn magnitude(self) -> f64 {
        (self as f64).abs()
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as i64
    }
}

/// A malformed container or an impossible conversion. Messages name the array and the index.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("{array} has length {len}, expected {expected} ({why})")]
    Length {
        array: String,
        len: usize,
        expected: usize,
        why: String,
    },
    #[error("{array}[0] = {value}, expected 0")]
    IndptrStart { array: String, value: i64 },
    #[error("{array}[{pos}] = {value} is less than {array}[{prev_pos}] = {prev}")]
    IndptrDecreasing {
        array: String,
        pos: usize,
        value: i64,
        prev_pos: usize,
        prev: i64,
    },
    #[error("{array}[{pos}] = {value} does not equal nnz = {nnz} (the length of {of})")]
    IndptrEnd {
        array: String,
        pos: usize,
        value: i64,
        nnz: usize,
        of: String,
    },
    #[error("{array}[{pos}] = {value} is outside 0..{extent}")]
    OutOfRange {
        array: String,
        pos: usize,
        value: i64,
        extent: usize,
    },
    #[error("{what} {which} is not sorted at {array}[{pos}] ({value} after {prev})")]
    Unsorted {
        what: String,
        which: usize,
        array: String,
        pos: usize,
        value: i64,
        prev: i64,
    },
    #[error("block size {block} does not divide {extent} {what} (declare padding to allow it)")]
    BlockNotDividing {
        block: usize,
        extent: usize,
        what: &'static str,
    },
    #[error("{what} must be positive, got {value}")]
    NotPositive { what: &'static str, value: usize },
    #[error("values[{pos}] = {value} lies in the padding outside the {rows}x{cols} matrix")]
    PaddingValue {
        pos: usize,
        value: String,
        rows: usize,
        cols: usize,
    },
    #[error("the pad index {pad} is outside 0..{cols} (padding slots need a valid column)")]
    PadOutOfRange { pad: i64, cols: usize },
    #[error("row {row} has {len} entries, more than the {what} {max}")]
    RowTooLong {
        row: usize,
        len: usize,
        max: usize,
        what: &'static str,
    },
    #[error("{array}[{pos}] = {value} is a padding slot of row {row} but {why}")]
    BadPadding {
        array: &'static str,
        pos: usize,
        value: String,
        row: usize,
        why: String,
    },
    #[error(
        "row {row}, group {group} (columns {lo}..{hi}) holds {count} values, more than n = {n} \
         of the {n}:{m} pattern"
    )]
    NmGroupOverfull {
        row: usize,
        group: usize,
        lo: usize,
        hi: usize,
        count: usize,
        n: usize,
        m: usize,
    },
    #[error(
        "metadata of row {row}, group {group} is not strictly increasing at metadata[{pos}] \
         ({value} after {prev})"
    )]
    NmMetadataOrder {
        row: usize,
        group: usize,
        pos: usize,
        value: u8,
        prev: u8,
    },
    #[error("invalid {n}:{m} pattern: {why}")]
    NmPattern { n: usize, m: usize, why: String },
    #[error("CSF of rank {rank} needs {expected} compressed levels, got {found}")]
    CsfLevels {
        rank: usize,
        expected: usize,
        found: usize,
    },
    #[error("{array}[{pos}] = {value} does not fit in {ty}")]
    IndexOverflow {
        array: String,
        pos: usize,
        value: i128,
        ty: &'static str,
    },
    #[error("duplicate entry at ({coords}) (the duplicate policy is Error)")]
    Duplicate { coords: String },
    #[error("expected a rank-{expected} tensor, got rank {found}")]
    Rank { expected: String, found: usize },
    #[error("the shape {shape:?} has too many elements")]
    ShapeOverflow { shape: Vec<usize> },
    #[error(transparent)]
    Coo(#[from] CooError),
}

/// `a * b`, or a [`FormatError::ShapeOverflow`].
pub(crate) fn mul(a: usize, b: usize) -> Result<usize, FormatError> {
    a.checked_mul(b)
        .ok_or(FormatError::ShapeOverflow { shape: vec![a, b] })
}

/// A vector of `n` copies of `fill`, or a [`FormatError::ShapeOverflow`] when it cannot be
/// allocated (a huge user-declared shape must not abort the process).
pub(crate) fn filled<T: Clone>(n: usize, fill: T) -> Result<Vec<T>, FormatError> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| FormatError::ShapeOverflow { shape: vec![n] })?;
    v.resize(n, fill);
    Ok(v)
}

/// Checks that `array` has length `expected`.
pub(crate) fn check_len(
    array: &str,
    len: usize,
    expected: usize,
    why: impl FnOnce() -> String,
) -> Result<(), FormatError> {
    if len == expected {
        Ok(())
    } else {
        Err(FormatError::Length {
            array: array.to_string(),
            len,
            expected,
            why: why(),
        })
    }
}

/// Checks an offsets array for `major` segments holding `nnz` elements in all: length
/// `major + 1`, first 0, never decreasing, last `nnz` (`of` names the array of length nnz).
pub(crate) fn check_indptr<I: Index>(
    array: &str,
    indptr: &[I],
    major: usize,
    major_name: &str,
    nnz: usize,
    of: &str,
) -> Result<(), FormatError> {
    let expected = major
        .checked_add(1)
        .ok_or(FormatError::ShapeOverflow { shape: vec![major] })?;
    check_len(array, indptr.len(), expected, || {
        format!("{major_name} + 1")
    })?;
    let first = indptr[0].to_i64();
    if first != 0 {
        return Err(FormatError::IndptrStart {
            array: array.to_string(),
            value: first,
        });
    }
    for pos in 1..indptr.len() {
        let (prev, value) = (indptr[pos - 1].to_i64(), indptr[pos].to_i64());
        if value < prev {
            return Err(FormatError::IndptrDecreasing {
                array: array.to_string(),
                pos,
                value,
                prev_pos: pos - 1,
                prev,
            });
        }
    }
    let last = indptr[major].to_i64();
    if usize::try_from(last).ok() != Some(nnz) {
        return Err(FormatError::IndptrEnd {
            array: array.to_string(),
            pos: major,
            value: last,
            nnz,
            of: of.to_string(),
        });
    }
    Ok(())
}

/// Checks a compressed structure: `indptr` for `major` segments, `indices` in `0..minor`,
/// strictly increasing inside each segment when `sorted`. `what` names a segment ("row").
pub(crate) fn check_compressed<I: Index>(
    names: (&str, &str),
    indptr: &[I],
    indices: &[I],
    (major, major_name, what): (usize, &str, &str),
    minor: usize,
    sorted: bool,
) -> Result<(), FormatError> {
    let (indptr_name, indices_name) = names;
    check_indptr(
        indptr_name,
        indptr,
        major,
        major_name,
        indices.len(),
        indices_name,
    )?;
    check_indices(indices_name, indices, minor)?;
    if sorted {
        for seg in 0..major {
            let (lo, hi) = (indptr[seg].idx(), indptr[seg + 1].idx());
            for pos in lo + 1..hi {
                if indices[pos] <= indices[pos - 1] {
                    return Err(FormatError::Unsorted {
                        what: what.to_string(),
                        which: seg,
                        array: indices_name.to_string(),
                        pos,
                        value: indices[pos].to_i64(),
                        prev: indices[pos - 1].to_i64(),
                    });
                }
            }
        }
    }
    Ok(())
}

/// Checks that every element of `indices` is in `0..extent`.
pub(crate) fn check_indices<I: Index>(
    array: &str,
    indices: &[I],
    extent: usize,
) -> Result<(), FormatError> {
    for (pos, &x) in indices.iter().enumerate() {
        if !matches!(x.to_usize(), Some(v) if v < extent) {
            return Err(FormatError::OutOfRange {
                array: array.to_string(),
                pos,
                value: x.to_i64(),
                extent,
            });
        }
    }
    Ok(())
}

/// Whether the indices are strictly increasing inside every segment of `indptr` (which must
/// already be valid).
pub(crate) fn strictly_sorted<I: Index>(indptr: &[I], indices: &[I]) -> bool {
    indptr.windows(2).all(|w| {
        let seg = &indices[w[0].idx()..w[1].idx()];
        seg.windows(2).all(|p| p[0] < p[1])
    })
}
