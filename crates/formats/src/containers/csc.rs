//! Compressed sparse column (CSC) matrices: `indptr` (cols + 1), row `indices` and `values`.

use std::fmt;

use super::compressed::Compressed;
use super::{FormatError, Index, Value};

/// A CSC matrix. Column `j` holds the rows `indices[indptr[j]..indptr[j + 1]]` with the
/// matching `values`. When `sorted`, the rows of every column are strictly increasing; an
/// unsorted CSC may hold rows in any order and repeat a row (repeats add up).
///
/// It is stored as the CSR of the transpose: the columns are the major dimension.
#[derive(Clone, PartialEq)]
pub struct Csc<V, I = i32>(Compressed<V, I>);

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
        let names = ("cols", "column");
        Compressed::try_new((cols, names), rows, indptr, indices, values, sorted).map(Csc)
    }

    pub fn rows(&self) -> usize {
        self.0.minor()
    }
    pub fn cols(&self) -> usize {
        self.0.major()
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
    /// Whether the rows of every column are declared strictly increasing.
    pub fn is_sorted(&self) -> bool {
        self.0.is_sorted()
    }
    /// The rows and values of column `i`, or `None` when `i` is out of range.
    pub fn col(&self, i: usize) -> Option<(&[I], &[V])> {
        self.0.segment(i)
    }
    /// `(indptr, indices, values)`.
    pub fn into_parts(self) -> (Vec<I>, Vec<I>, Vec<V>) {
        self.0.into_parts()
    }
    /// The same matrix with another index width; fails naming the first value that does not fit.
    pub fn cast_index<J: Index>(&self) -> Result<Csc<V, J>, FormatError> {
        self.0.cast_index().map(Csc)
    }
}

impl<V: fmt::Debug, I: fmt::Debug> fmt::Debug for Csc<V, I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.debug_as(f, "Csc", (self.0.minor(), self.0.major()))
    }
}
