//! Doubly compressed sparse row (DCSR) matrices: only non-empty rows are stored.
//!
//! Layout (SPEC §2.1): `O = dense_fixed(1)`, `I = compressed_varied(O, (rows, nnz1),
//! (row_indptr, row_indices))`, `J = compressed_varied(I, (cols, nnz), (col_indptr,
//! col_indices))`. So `row_indptr = [0, nnz1]`, `row_indices` lists the stored rows (strictly
//! increasing), and `col_indptr` has one segment per stored row.

use super::index::cast_slice;
use super::{check_compressed, check_len, FormatError, Index, Value};

/// A DCSR matrix.
#[derive(Clone, Debug, PartialEq)]
pub struct Dcsr<V, I = i32> {
    rows: usize,
    cols: usize,
    row_indptr: Vec<I>,
    row_indices: Vec<I>,
    col_indptr: Vec<I>,
    col_indices: Vec<I>,
    values: Vec<V>,
    sorted: bool,
}

impl<V: Value, I: Index> Dcsr<V, I> {
    /// A validated DCSR. The stored rows are always required strictly increasing; `sorted`
    /// declares the columns inside each stored row strictly increasing.
    #[allow(clippy::too_many_arguments)]
    pub fn try_new(
        rows: usize,
        cols: usize,
        row_indptr: Vec<I>,
        row_indices: Vec<I>,
        col_indptr: Vec<I>,
        col_indices: Vec<I>,
        values: Vec<V>,
        sorted: bool,
    ) -> Result<Self, FormatError> {
        check_compressed(
            ("row_indptr", "row_indices"),
            &row_indptr,
            &row_indices,
            (1, "1 root", "root"),
            rows,
            true,
        )?;
        check_compressed(
            ("col_indptr", "col_indices"),
            &col_indptr,
            &col_indices,
            (row_indices.len(), "stored rows", "stored row"),
            cols,
            sorted,
        )?;
        check_len("values", values.len(), col_indices.len(), || "nnz".into())?;
        Ok(Dcsr {
            rows,
            cols,
            row_indptr,
            row_indices,
            col_indptr,
            col_indices,
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
        self.col_indices.len()
    }
    /// `[0, number of stored rows]`.
    pub fn row_indptr(&self) -> &[I] {
        &self.row_indptr
    }
    /// The stored rows, strictly increasing.
    pub fn row_indices(&self) -> &[I] {
        &self.row_indices
    }
    /// One segment per stored row.
    pub fn col_indptr(&self) -> &[I] {
        &self.col_indptr
    }
    pub fn col_indices(&self) -> &[I] {
        &self.col_indices
    }
    pub fn values(&self) -> &[V] {
        &self.values
    }
    /// Whether the columns of every stored row are declared strictly increasing.
    pub fn is_sorted(&self) -> bool {
        self.sorted
    }
    /// The same matrix with another index width; fails naming the first value that does not fit.
    pub fn cast_index<J: Index>(&self) -> Result<Dcsr<V, J>, FormatError> {
        Ok(Dcsr {
            rows: self.rows,
            cols: self.cols,
            row_indptr: cast_slice(&self.row_indptr, "row_indptr")?,
            row_indices: cast_slice(&self.row_indices, "row_indices")?,
            col_indptr: cast_slice(&self.col_indptr, "col_indptr")?,
            col_indices: cast_slice(&self.col_indices, "col_indices")?,
            values: self.values.clone(),
            sorted: self.sorted,
        })
    }
}
