//! Compressed sparse column (CSC) matrices: `indptr` (cols + 1), row `indices` and `values`.

use super::index::cast_slice;
use super::{check_compressed, check_len, FormatError, Index, Value};

/// A CSC matrix. Column `j` holds the rows `indices[indptr[j]..indptr[j + 1]]` with the
/// matching `values`. When `sorted`, the rows of every column are strictly increasing; an
/// unsorted CSC may hold rows in any order and repeat a row (repeats add up).
#[derive(Clone, Debug, PartialEq)]
pub struct Csc<V, I = i32> {
    rows: usize,
    cols: usize,
    indptr: Vec<I>,
    indices: Vec<I>,
    values: Vec<V>,
    sorted: bool,
}

impl<V: Value, I: Index> Csc<V, I> {
    /// A validated CSC (see the module docs of [`crate::containers`] for the checks).
    pub fn try_new(
        rows: usize,
        cols: usize,
        indptr: Vec<I>,
        indices: Vec<I>,
        values: Vec<V>,
        sorted: bool,
    ) -> Result<Self, FormatError> {
        check_compressed(
            ("indptr", "indices"),
            &indptr,
            &indices,
            (cols, "cols", "column"),
            rows,
            sorted,
        )?;
        check_len("values", values.len(), indices.len(), || "nnz".into())?;
        Ok(Csc {
            rows,
            cols,
            indptr,
            indices,
            values,
            sorted,
        })
    }

    pub fn rows(&self) -> usize {
        self.rows
    }
    pub fn cols(&self) -> usize {
        self.cols
    }
    /// `(rows, cols)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }
    /// Number of stored entries.
    pub fn nnz(&self) -> usize {
        self.indices.len()
    }
    pub fn indptr(&self) -> &[I] {
        &self.indptr
    }
    pub fn indices(&self) -> &[I] {
        &self.indices
    }
    pub fn values(&self) -> &[V] {
        &self.values
    }
    /// Whether the rows of every column are declared strictly increasing.
    pub fn is_sorted(&self) -> bool {
        self.sorted
    }
    /// The rows and values of column `i`, or `None` when `i` is out of range.
    pub fn col(&self, i: usize) -> Option<(&[I], &[V])> {
        if i >= self.cols {
            return None;
        }
        let (lo, hi) = (self.indptr[i].idx(), self.indptr[i + 1].idx());
        Some((&self.indices[lo..hi], &self.values[lo..hi]))
    }
    /// `(indptr, indices, values)`.
    pub fn into_parts(self) -> (Vec<I>, Vec<I>, Vec<V>) {
        (self.indptr, self.indices, self.values)
    }
    /// The same matrix with another index width; fails naming the first value that does not fit.
    pub fn cast_index<J: Index>(&self) -> Result<Csc<V, J>, FormatError> {
        Ok(Csc {
            rows: self.rows,
            cols: self.cols,
            indptr: cast_slice(&self.indptr, "indptr")?,
            indices: cast_slice(&self.indices, "indices")?,
            values: self.values.clone(),
            sorted: self.sorted,
        })
    }
}
