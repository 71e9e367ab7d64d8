//! Compressed sparse row (CSR) matrices: `indptr` (rows + 1), column `indices` and `values`.

use std::fmt;

use super::compressed::Compressed;
use super::{FormatError, Index, Value};

/// A CSR matrix. Row `i` holds `indices[indptr[i]..indptr[i + 1]]` with the matching `values`.
/// When `sorted`, the columns of every row are strictly increasing (no duplicates); an unsorted
/// CSR may hold columns in any order and repeat a column (repeats add up).
#[derive(Clone, PartialEq)]
pub struct Csr<V, I = i32>(Compressed<V, I>);

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
        let names = ("rows", "row");
        Compressed::try_new((rows, names), cols, indptr, indices, values, sorted).map(Csr)
    }

    pub fn rows(&self) -> usize {
        self.0.major()
    }
    pub fn cols(&self) -> usize {
        self.0.minor()
    }
    /// `(rows, cols)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.rows(), self.cols())
    }
    /// Number of stored entries.
    pub fn nnz(&self) -> usize {
        self.0.nnz()
    }
    pub fn indptr(&self) -> &[I] {
        self.0.indptr()
    }
    pub fn indices(&self) -> &[I] {
        self.0.indices()
    }
    pub fn values(&self) -> &[V] {
        self.0.values()
    }
    /// Whether the columns of every row are declared strictly increasing.
    pub fn is_sorted(&self) -> bool {
        self.0.is_sorted()
    }
    /// The columns and values of row `i`, or `None` when `i` is out of range.
    pub fn row(&self, i: usize) -> Option<(&[I], &[V])> {
        self.0.segment(i)
    }
    /// `(indptr, indices, values)`.
    pub fn into_parts(self) -> (Vec<I>, Vec<I>, Vec<V>) {
        self.0.into_parts()
    }
    /// The same matrix with another index width; fails naming the first value that does not fit.
    pub fn cast_index<J: Index>(&self) -> Result<Csr<V, J>, FormatError> {
        self.0.cast_index().map(Csr)
    }
}

impl<V: fmt::Debug, I: fmt::Debug> fmt::Debug for Csr<V, I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shape = (self.0.major(), self.0.minor());
        self.0.debug_as(f, "Csr", shape)
    }
}
