//! Composable-format builders (SPEC §5.3): column-partitioned degree-bucketed hyb, ELL+CSR
//! (ELL of a fixed width plus a CSR remainder), SELL-C-σ (rows side by side in chunks), TC-GNN
//! condense tiling and CSF → ELL3D bucketing, each built from plain CSR/CSF slices.
//!
//! Every builder validates its input first (typed [`BuildError`] naming the array and index,
//! never a panic), returns owned structs holding exactly the arrays a kernel binds (index arrays
//! as `i32`, values as `f32`, masks as `u8` holding 0 or 1, 2-D arrays row-major), and offers a
//! `reassemble` method that gives back the original tensor as a [`Coo`] (entries sorted, stored
//! duplicates summed), used by the tests.

use crate::coo::Coo;

pub mod condense;
pub mod ell3d;
pub mod ell_csr;
pub mod hyb;
pub mod sell;

pub use condense::{condense, Condensed};
pub use ell3d::{ell3d_from_coo, ell3d_from_csf, Ell3d, Ell3dBucket};
pub use ell_csr::{ell_csr, ell_csr_padded_below, EllCsr};
pub use hyb::{hyb, hyb_every_row, hyb_padded_below, hyb_with_rest, Hyb, HybBucket, HybRest};
pub use sell::{sell, Sell};

/// An integer type accepted for `indptr` / `indices` slices (`i32`, `i64`, `u32`, `usize`).
pub trait CsrIndex: Copy {
    /// The value as `i64`; `None` when it does not fit (huge `usize` / `u64`).
    fn to_i64(self) -> Option<i64>;
}

impl CsrIndex for i32 {
    fn to_i64(self) -> Option<i64> {
        Some(i64::from(self))
    }
}

impl CsrIndex for i64 {
    fn to_i64(self) -> Option<i64> {
        Some(self)
    }
}

impl CsrIndex for u32 {
    fn to_i64(self) -> Option<i64> {
        Some(i64::from(self))
    }
}

impl CsrIndex for usize {
    fn to_i64(self) -> Option<i64> {
        i64::try_from(self).ok()
    }
}

/// Bad input to a builder, or an output too large to represent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    #[error("`{array}` has length {found}, expected {expected}")]
    Length {
        array: &'static str,
        expected: usize,
        found: usize,
    },
    #[error("`{array}`[0] is {found}, expected 0")]
    PtrStart { array: &'static str, found: i64 },
    #[error("`{array}` is not monotone: `{array}`[{index}] = {value} < `{array}`[{prev_index}] = {prev}", prev_index = .index - 1)]
    PtrNotMonotone {
        array: &'static str,
        index: usize,
        prev: i64,
        value: i64,
    },
    #[error("`{array}` ends at {last}, but `{target}` has length {len}")]
    PtrEnd {
        array: &'static str,
        last: i64,
        target: &'static str,
        len: usize,
    },
    #[error("`{array}`[{index}] = {value} is outside 0..{extent}")]
    OutOfRange {
        array: &'static str,
        index: usize,
        value: i64,
        extent: usize,
    },
    #[error("`{array}`[{index}] = {value} is not greater than `{array}`[{prev_index}] = {prev} (must strictly increase)", prev_index = .index - 1)]
    NotIncreasing {
        array: &'static str,
        index: usize,
        prev: i64,
        value: i64,
    },
    #[error("invalid parameter `{name}`: {reason}")]
    BadParam { name: &'static str, reason: String },
    #[error("COO input has rank {found}, expected {expected}")]
    Rank { found: usize, expected: usize },
    #[error("invalid COO input: {0}")]
    Coo(#[from] crate::coo::CooError),
    #[error("output too large: {0}")]
    TooLarge(String),
}

/// `x` as an `i32` index for an output array, or [`BuildError::TooLarge`].
pub(crate) fn to_i32(x: usize, what: &str) -> Result<i32, BuildError> {
    i32::try_from(x).map_err(|_| BuildError::TooLarge(format!("{what} {x} does not fit in i32")))
}

/// A vector of `n` copies of `fill`, failing (not aborting) when `n` is unreasonably large.
pub(crate) fn filled<T: Clone>(n: usize, fill: T, what: &str) -> Result<Vec<T>, BuildError> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| BuildError::TooLarge(format!("cannot allocate {n} entries for {what}")))?;
    v.resize(n, fill);
    Ok(v)
}

/// `a * b`, or [`BuildError::TooLarge`] on overflow.
pub(crate) fn mul(a: usize, b: usize, what: &str) -> Result<usize, BuildError> {
    a.checked_mul(b)
        .ok_or_else(|| BuildError::TooLarge(format!("{what}: {a} x {b} overflows")))
}

/// Checks a pointer array: length `count + 1`, starts at 0, non-decreasing, ends at
/// `target_len`. Returns it converted to `usize`.
pub(crate) fn check_ptr<I: CsrIndex>(
    array: &'static str,
    ptr: &[I],
    count: usize,
    target: &'static str,
    target_len: usize,
) -> Result<Vec<usize>, BuildError> {
    let expected = count
        .checked_add(1)
        .ok_or_else(|| BuildError::TooLarge(format!("`{array}` would need {count} + 1 entries")))?;
    if ptr.len() != expected {
        return Err(BuildError::Length {
            array,
            expected,
            found: ptr.len(),
        });
    }
    let mut out = Vec::with_capacity(ptr.len());
    let mut prev = 0i64;
    for (index, &p) in ptr.iter().enumerate() {
        let value = p.to_i64().ok_or_else(|| BuildError::OutOfRange {
            array,
            index,
            value: i64::MAX,
            extent: target_len.saturating_add(1),
        })?;
        if index == 0 && value != 0 {
            return Err(BuildError::PtrStart {
                array,
                found: value,
            });
        }
        if value < prev {
            return Err(BuildError::PtrNotMonotone {
                array,
                index,
                prev,
                value,
            });
        }
        prev = value;
        out.push(value as usize);
    }
    if prev as u64 != target_len as u64 {
        return Err(BuildError::PtrEnd {
            array,
            last: prev,
            target,
            len: target_len,
        });
    }
    Ok(out)
}

/// Checks that every entry of `idx` lies in `0..extent`; returns them as `usize`.
pub(crate) fn check_indices<I: CsrIndex>(
    array: &'static str,
    idx: &[I],
    extent: usize,
) -> Result<Vec<usize>, BuildError> {
    idx.iter()
        .enumerate()
        .map(|(index, &c)| match c.to_i64() {
            Some(value) if value >= 0 && (value as u64) < extent as u64 => Ok(value as usize),
            other => Err(BuildError::OutOfRange {
                array,
                index,
                value: other.unwrap_or(i64::MAX),
                extent,
            }),
        })
        .collect()
}

/// Checks that `values` has one entry per index.
pub(crate) fn check_values(values: &[f32], nnz: usize) -> Result<(), BuildError> {
    if values.len() != nnz {
        return Err(BuildError::Length {
            array: "values",
            expected: nnz,
            found: values.len(),
        });
    }
    Ok(())
}

/// A validated CSR matrix with `usize` structure arrays.
pub(crate) struct CheckedCsr {
    pub indptr: Vec<usize>,
    pub indices: Vec<usize>,
}

/// Validates a CSR `(rows, cols, indptr, indices)` (and `values` when given).
pub(crate) fn check_csr<I: CsrIndex>(
    rows: usize,
    cols: usize,
    indptr: &[I],
    indices: &[I],
    values: Option<&[f32]>,
) -> Result<CheckedCsr, BuildError> {
    let indptr = check_ptr("indptr", indptr, rows, "indices", indices.len())?;
    let indices = check_indices("indices", indices, cols)?;
    if let Some(v) = values {
        check_values(v, indices.len())?;
    }
    Ok(CheckedCsr { indptr, indices })
}

/// Checks a bucket-width list: non-empty, positive, strictly increasing.
pub(crate) fn check_buckets(buckets: &[usize]) -> Result<(), BuildError> {
    if buckets.is_empty() {
        return Err(BuildError::BadParam {
            name: "buckets",
            reason: "at least one bucket width is required".into(),
        });
    }
    for (index, &b) in buckets.iter().enumerate() {
        if b == 0 {
            return Err(BuildError::BadParam {
                name: "buckets",
                reason: format!("width at index {index} is 0, widths must be positive"),
            });
        }
        if index > 0 && b <= buckets[index - 1] {
            return Err(BuildError::NotIncreasing {
                array: "buckets",
                index,
                prev: buckets[index - 1] as i64,
                value: b as i64,
            });
        }
    }
    Ok(())
}

/// Splits a row of degree `d > 0` against `buckets`: the index of the first bucket `>= d`
/// (one piece), or the last bucket with `ceil(d / largest)` pieces.
pub(crate) fn place(d: usize, buckets: &[usize]) -> (usize, usize) {
    match buckets.iter().position(|&b| b >= d) {
        Some(k) => (k, 1),
        None => {
            let k = buckets.len() - 1;
            (k, d.div_ceil(buckets[k]))
        }
    }
}

/// Builds a real COO from `(coords, value)` entries, summing duplicates and sorting.
pub(crate) fn coo_from_entries(dims: Vec<usize>, entries: Vec<(Vec<i64>, f64)>) -> Coo {
    let mut coo = Coo::empty(dims);
    for (c, v) in entries {
        coo.coords.push(c);
        coo.values.push(v);
    }
    coo.summed()
}
