//! Compressed sparse row (CSR) matrices: `indptr` (rows + 1), column `indices` and `values`.

use super::index::cast_slice;
use super::{check_compressed, check_len, FormatError, Index, Value};

/// A CSR matrix. Row `i` holds `indices[indptr[i]..indptr[i + 1]]` with the matching `values`.
/// When `sorted`, the columns of every row are strictly increasing (no duplicates); an unsorted
/// CSR may hold columns in any order and repeat a column (repeats add up).
#[derive(Clone, Debug, PartialEq)]
pub struct Csr<V, I = i32> {
    rows: usize,
    cols: usize,
    indptr: Vec<I>,
    indices: Vec<I>,
    values: Vec<V>,
    sorted: bool,
}

impl<V: Value, I: Index> Csr<V, I> {
    /// A validated CSR (see the module docs of [`crate::containers`] for the checks).
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
            (rows, "rows", "row"),
            cols,
            sorted,
        )?;
        check_len("values", values.len(), indices.len(), || "nnz".into())?;
        Ok(Csr {
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
    /// Whether the columns of every row are declared strictly increasing.
    pub fn is_sorted(&self) -> bool {
        self.sorted
    }
    /// The columns and values of row `i`, or `None` when `i` is out of range.
    pub fn row(&self, i: usize) -> Option<(&[I], &[V])> {
        if i >= self.rows {
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
    pub fn cast_index<J: Index>(&self) -> Result<Csr<V, J>, FormatError> {
        Ok(Csr {
            rows: self.rows,
            cols: self.cols,
            indptr: cast_slice(&self.indptr, "indptr")?,
            indices: cast_slice(&self.indices, "indices")?,
            values: self.values.clone(),
            sorted: self.sorted,
        })
    }
}
