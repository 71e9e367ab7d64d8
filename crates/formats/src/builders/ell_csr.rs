//! ELL+CSR (SPEC §5.3): the first `width` entries of every row of a CSR matrix in an ELL part,
//! the entries of the longer rows past the width in a CSR remainder over those rows only (DCSR:
//! the rows are listed), as `crates/ops/rules/{ell,dcsr}.rule.sp` declare them.
//!
//! Exact semantics:
//! - The input rows must be strictly increasing (sorted, no duplicates).
//! - ELL part: `rows × width` slots, row-major. Row `i` holds its first `min(deg, width)`
//!   entries (its smallest columns) merged with `width - deg` padding slots when shorter; the
//!   padding columns are the smallest columns the row does not store, value 0, so every row's
//!   columns strictly increase (the rule's ELL axis is sorted) and padding adds nothing.
//!   `width` must be at most `cols` (a row of `width` distinct columns must exist), unless the
//!   matrix has no column and `width` is 0. [`ell_csr_padded_below`] pads with columns below
//!   its bound only (an error where a row cannot be padded so).
//! - Remainder: the rows with `deg > width`, increasing, each with its entries past the first
//!   `width` (in CSR order); `rest_indptr` has one segment per listed row.

use super::{check_csr, filled, mul, to_i32, BuildError, CsrIndex};
use crate::coo::Coo;

/// The ELL+CSR split of a CSR matrix (see the module documentation).
#[derive(Clone, Debug, PartialEq)]
pub struct EllCsr {
    pub rows: usize,
    pub cols: usize,
    /// Slots per row of the ELL part.
    pub width: usize,
    /// Column of each ELL slot, shape `(rows, width)` row-major; every row strictly increasing.
    pub ell_indices: Vec<i32>,
    /// Value of each ELL slot (0 for padding), shape `(rows, width)`.
    pub ell_values: Vec<f32>,
    /// 1 for a real ELL slot, 0 for padding, shape `(rows, width)`.
    pub ell_mask: Vec<u8>,
    /// The rows with entries past the width, increasing.
    pub rest_rows: Vec<i32>,
    /// Segments of the remainder rows into `rest_indices` / `rest_values`
    /// (`rest_rows.len() + 1` entries).
    pub rest_indptr: Vec<i32>,
    pub rest_indices: Vec<i32>,
    pub rest_values: Vec<f32>,
}

impl EllCsr {
    /// Stored entries of the remainder.
    pub fn rest_nnz(&self) -> usize {
        self.rest_indices.len()
    }

    /// The matrix back from both parts (padding dropped), entries sorted.
    pub fn reassemble(&self) -> Coo {
        let mut entries = Vec::new();
        for p in 0..self.ell_indices.len() {
            if self.ell_mask[p] == 1 {
                let i = (p / self.width.max(1)) as i64;
                let v = self.ell_values[p] as f64;
                entries.push((vec![i, self.ell_indices[p] as i64], v));
            }
        }
        for (k, &r) in self.rest_rows.iter().enumerate() {
            for p in self.rest_indptr[k] as usize..self.rest_indptr[k + 1] as usize {
                entries.push((
                    vec![r as i64, self.rest_indices[p] as i64],
                    self.rest_values[p] as f64,
                ));
            }
        }
        super::coo_from_entries(vec![self.rows, self.cols], entries)
    }
}

/// Splits a CSR matrix into ELL of width `width` plus a CSR remainder (see the module
/// documentation).
pub fn ell_csr<I: CsrIndex>(
    rows: usize,
    cols: usize,
    indptr: &[I],
    indices: &[I],
    values: &[f32],
    width: usize,
) -> Result<EllCsr, BuildError> {
    ell_csr_padded_below(rows, cols, indptr, indices, values, width, usize::MAX)
}

/// [`ell_csr`] with padding columns below `pad_below` only: a kernel that also uses a column's
/// coordinate in a dense dimension narrower than the matrix (`B[j, j]` with `B` over
/// `(n, feat_size)`) then reads padding inside that dimension. A row short of the width whose
/// padding cannot be found below the bound is an error.
pub fn ell_csr_padded_below<I: CsrIndex>(
    rows: usize,
    cols: usize,
    indptr: &[I],
    indices: &[I],
    values: &[f32],
    width: usize,
    pad_below: usize,
) -> Result<EllCsr, BuildError> {
    let pad_cols = cols.min(pad_below);
    let csr = check_csr(rows, cols, indptr, indices, Some(values))?;
    if width > cols {
        return Err(BuildError::BadParam {
            name: "width",
            reason: format!(
                "{width} is more than the {cols} columns (padding needs distinct columns)"
            ),
        });
    }
    for i in 0..rows {
        for p in csr.indptr[i] + 1..csr.indptr[i + 1] {
            if csr.indices[p] <= csr.indices[p - 1] {
                return Err(BuildError::NotIncreasing {
                    array: "indices",
                    index: p,
                    prev: csr.indices[p - 1] as i64,
                    value: csr.indices[p] as i64,
                });
            }
        }
    }
    let slots = mul(rows, width, "ELL slots")?;
    let mut ell_indices = filled(slots, 0i32, "ELL indices")?;
    let mut ell_values = filled(slots, 0f32, "ELL values")?;
    let mut ell_mask = filled(slots, 0u8, "ELL mask")?;
    let (mut rest_rows, mut rest_indptr) = (Vec::new(), vec![0i32]);
    let (mut rest_indices, mut rest_values) = (Vec::new(), Vec::new());
    let mut padding = Vec::with_capacity(width);
    for i in 0..rows {
        let (lo, hi) = (csr.indptr[i], csr.indptr[i + 1]);
        let k = (hi - lo).min(width);
        let real = &csr.indices[lo..lo + k];
        // The smallest columns absent from the row, as many as padding slots are needed.
        padding.clear();
        let (mut c, mut q) = (0usize, 0usize);
        while padding.len() < width - k {
            if c >= pad_cols {
                return Err(BuildError::BadParam {
                    name: "width",
                    reason: format!(
                        "row {i} stores {k} of the {width} slots, and fewer than {} columns \
                         below {pad_cols} are free to pad it with",
                        width - k
                    ),
                });
            }
            if q < real.len() && real[q] == c {
                q += 1;
            } else {
                padding.push(c);
            }
            c += 1;
        }
        // Merge the two increasing lists into the row's slots.
        let base = i * width;
        let (mut a, mut b) = (0usize, 0usize);
        for s in base..base + width {
            if b >= padding.len() || (a < k && real[a] < padding[b]) {
                ell_indices[s] = to_i32(real[a], "column")?;
                ell_values[s] = values[lo + a];
                ell_mask[s] = 1;
                a += 1;
            } else {
                ell_indices[s] = to_i32(padding[b], "column")?;
                b += 1;
            }
        }
        if hi - lo > width {
            rest_rows.push(to_i32(i, "row")?);
            for (&c, &v) in csr.indices[lo + width..hi]
                .iter()
                .zip(&values[lo + width..hi])
            {
                rest_indices.push(to_i32(c, "column")?);
                rest_values.push(v);
            }
            rest_indptr.push(to_i32(rest_indices.len(), "remainder indptr")?);
        }
    }
    Ok(EllCsr {
        rows,
        cols,
        width,
        ell_indices,
        ell_values,
        ell_mask,
        rest_rows,
        rest_indptr,
        rest_indices,
        rest_values,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_pads_with_absent_columns_and_reassembles() {
        // Row 0: columns 1, 3 (padded to 3 with column 0); row 1: empty (0, 1, 2); row 2:
        // 0, 1, 2, 4 (one past the width, column 4); row 3: 2 (padded with 0, 1).
        let indptr = [0, 2, 2, 6, 7];
        let indices = [1, 3, 0, 1, 2, 4, 2];
        let values = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0];
        let e = ell_csr(4, 5, &indptr, &indices, &values, 3).unwrap();
        assert_eq!(e.ell_indices, [0, 1, 3, 0, 1, 2, 0, 1, 2, 0, 1, 2]);
        assert_eq!(
            e.ell_values,
            [0.0, 1.0, 2.0, 0.0, 0.0, 0.0, 3.0, 4.0, 5.0, 0.0, 0.0, 7.0]
        );
        assert_eq!(e.ell_mask, [0, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 1]);
        assert_eq!(e.rest_rows, [2]);
        assert_eq!(e.rest_indptr, [0, 1]);
        assert_eq!(e.rest_indices, [4]);
        assert_eq!(e.rest_values, [6.0]);
        let back = e.reassemble();
        let mut want = Coo::empty(vec![4, 5]);
        for (r, (c, v)) in [(0, (1, 1.0)), (0, (3, 2.0)), (2, (0, 3.0)), (2, (1, 4.0))]
            .into_iter()
            .chain([(2, (2, 5.0)), (2, (4, 6.0)), (3, (2, 7.0))])
        {
            want.coords.push(vec![r, c]);
            want.values.push(v);
        }
        assert_eq!(back, want.summed());
        // Every ELL row strictly increases.
        for row in e.ell_indices.chunks(3) {
            assert!(row.windows(2).all(|w| w[0] < w[1]), "{row:?}");
        }
    }

    #[test]
    fn full_width_has_no_remainder_and_bad_inputs_are_refused() {
        let e = ell_csr(2, 2, &[0, 2, 3], &[0, 1, 1], &[1.0, 2.0, 3.0], 2).unwrap();
        assert_eq!(e.ell_indices, [0, 1, 0, 1]);
        assert_eq!(e.ell_values, [1.0, 2.0, 0.0, 3.0]);
        assert!(e.rest_rows.is_empty() && e.rest_nnz() == 0);
        assert_eq!(e.rest_indptr, [0]);
        // Wider than the columns, unsorted rows, a bad indptr.
        assert!(ell_csr(2, 2, &[0, 2, 3], &[0, 1, 1], &[1.0; 3], 3).is_err());
        assert!(ell_csr(2, 2, &[0, 2, 3], &[1, 0, 1], &[1.0; 3], 2).is_err());
        assert!(ell_csr(2, 2, &[0, 4, 3], &[0, 1, 1], &[1.0; 3], 2).is_err());
        // Width 0: everything in the remainder.
        let e = ell_csr(2, 2, &[0, 2, 3], &[0, 1, 1], &[1.0, 2.0, 3.0], 0).unwrap();
        assert_eq!(e.rest_rows, [0, 1]);
        assert_eq!(e.rest_indptr, [0, 2, 3]);
    }
}
