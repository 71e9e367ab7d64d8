//! The storage shared by CSR and CSC: `indptr` over the major dimension (rows of a CSR, columns
//! of a CSC), minor `indices` and `values`. A CSC is the CSR of the transpose, so both are thin
//! wrappers over this one validated structure, differing only in which dimension is major.

use std::fmt;

use super::index::cast_slice;
use super::{check_compressed, check_len, FormatError, Index, Value};

/// Names of the major dimension in messages: `("rows", "row")` or `("cols", "column")`.
pub(crate) type MajorNames = (&'static str, &'static str);

#[derive(Clone, PartialEq)]
pub(crate) struct Compressed<V, I> {
    major: usize,
    minor: usize,
    indptr: Vec<I>,
    indices: Vec<I>,
    values: Vec<V>,
    sorted: bool,
}

impl<V, I> Compressed<V, I> {
    pub(crate) fn major(&self) -> usize {
        self.major
    }
    pub(crate) fn minor(&self) -> usize {
        self.minor
    }
    pub(crate) fn nnz(&self) -> usize {
        self.indices.len()
    }
    pub(crate) fn indptr(&self) -> &[I] {
        &self.indptr
    }
    pub(crate) fn indices(&self) -> &[I] {
        &self.indices
    }
    pub(crate) fn values(&self) -> &[V] {
        &self.values
    }
    pub(crate) fn is_sorted(&self) -> bool {
        self.sorted
    }
    pub(crate) fn into_parts(self) -> (Vec<I>, Vec<I>, Vec<V>) {
        (self.indptr, self.indices, self.values)
    }
}

impl<V: Value, I: Index> Compressed<V, I> {
    /// A validated structure of `major` segments over indices in `0..minor`.
    pub(crate) fn try_new(
        (major, names): (usize, MajorNames),
        minor: usize,
        indptr: Vec<I>,
        indices: Vec<I>,
        values: Vec<V>,
        sorted: bool,
    ) -> Result<Self, FormatError> {
        check_compressed(
            ("indptr", "indices"),
            &indptr,
            &indices,
            (major, names.0, names.1),
            minor,
            sorted,
        )?;
        check_len("values", values.len(), indices.len(), || "nnz".into())?;
        Ok(Compressed {
            major,
            minor,
            indptr,
            indices,
            values,
            sorted,
        })
    }

    /// The minor indices and values of major segment `i`, or `None` when `i` is out of range.
    pub(crate) fn segment(&self, i: usize) -> Option<(&[I], &[V])> {
        if i >= self.major {
            return None;
        }
        let (lo, hi) = (self.indptr[i].idx(), self.indptr[i + 1].idx());
        Some((&self.indices[lo..hi], &self.values[lo..hi]))
    }
    /// The same structure with another index width; fails naming the first value that does not
    /// fit.
    pub(crate) fn cast_index<J: Index>(&self) -> Result<Compressed<V, J>, FormatError> {
        Ok(Compressed {
            major: self.major,
            minor: self.minor,
            indptr: cast_slice(&self.indptr, "indptr")?,
            indices: cast_slice(&self.indices, "indices")?,
            values: self.values.clone(),
            sorted: self.sorted,
        })
    }
}

impl<V: fmt::Debug, I: fmt::Debug> Compressed<V, I> {
    /// Debug-formats as `name { rows, cols, indptr, indices, values, sorted }`, `(rows, cols)`
    /// given by the wrapper.
    pub(crate) fn debug_as(
        &self,
        f: &mut fmt::Formatter<'_>,
        name: &str,
        (rows, cols): (usize, usize),
    ) -> fmt::Result {
        f.debug_struct(name)
            .field("rows", &rows)
            .field("cols", &cols)
            .field("indptr", &self.indptr)
            .field("indices", &self.indices)
            .field("values", &self.values)
            .field("sorted", &self.sorted)
            .finish()
    }
}
