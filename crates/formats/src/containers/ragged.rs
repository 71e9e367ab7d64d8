//! Ragged 2-D arrays (`dense_varied` rows): row `i` holds `indptr[i + 1] - indptr[i]` values at
//! columns `0..len`.

use super::index::cast_slice;
use super::{check_indptr, FormatError, Index, Value};

/// A ragged array: `I = dense_fixed(rows)`, `J = dense_varied(I, (cols, nnz), indptr)`.
/// `cols` is the declared maximum row length.
#[derive(Clone, Debug, PartialEq)]
pub struct Ragged<V, I = i32> {
    rows: usize,
    cols: usize,
    indptr: Vec<I>,
    values: Vec<V>,
}

impl<V: Value, I: Index> Ragged<V, I> {
    /// A validated ragged array: `indptr` as for CSR (ending at `values.len()`), and no row
    /// longer than `cols`.
    pub fn try_new(
        rows: usize,
        cols: usize,
        indptr: Vec<I>,
        values: Vec<V>,
    ) -> Result<Self, FormatError> {
        check_indptr("indptr", &indptr, rows, "rows", values.len(), "values")?;
        for row in 0..rows {
            let len = indptr[row + 1].idx() - indptr[row].idx();
            if len > cols {
                return Err(FormatError::RowTooLong {
                    row,
                    len,
                    max: cols,
                    what: "ragged length",
                });
            }
        }
        Ok(Ragged {
            rows,
            cols,
            indptr,
            values,
        })
    }

    pub fn rows(&self) -> usize {
        self.rows
    }
    /// The maximum row length.
    pub fn cols(&self) -> usize {
        self.cols
    }
    /// `(rows, cols)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }
    /// Total number of stored values.
    pub fn nnz(&self) -> usize {
        self.values.len()
    }
    pub fn indptr(&self) -> &[I] {
        &self.indptr
    }
    pub fn values(&self) -> &[V] {
        &self.values
    }
    /// The values of row `i`, or `None` when `i` is out of range.
    pub fn row(&self, i: usize) -> Option<&[V]> {
        if i >= self.rows {
            return None;
        }
        Some(&self.values[self.indptr[i].idx()..self.indptr[i + 1].idx()])
    }
    /// The same array with another index width; fails naming the first value that does not fit.
    pub fn cast_index<J: Index>(&self) -> Result<Ragged<V, J>, FormatError> {
        Ok(Ragged {
            rows: self.rows,
            cols: self.cols,
            indptr: cast_slice(&self.indptr, "indptr")?,
            values: self.values.clone(),
        })
    }
}
