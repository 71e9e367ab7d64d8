//! Compressed sparse fiber (CSF) tensors of any rank >= 1.
//!
//! Layout (SPEC §2.1, "CSF (3-D)"): level 0 is dense (`dense_fixed(dims[0])`); each level
//! `k >= 1` is `compressed_varied` under level `k - 1`, stored as a [`CsfLevel`] whose `indptr`
//! has one segment per stored element of level `k - 1` (level 0 has `dims[0]` elements) and whose
//! `indices` (coordinates in `0..dims[k]`) are strictly increasing in every segment. `values`
//! has one entry per stored element of the last level. A rank-1 CSF is a dense vector.

use super::index::cast_slice;
use super::{check_compressed, check_len, FormatError, Index, Value};

/// One compressed level of a [`Csf`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CsfLevel<I> {
    pub indptr: Vec<I>,
    pub indices: Vec<I>,
}

/// A CSF tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct Csf<V, I = i32> {
    dims: Vec<usize>,
    levels: Vec<CsfLevel<I>>,
    values: Vec<V>,
}

impl<V: Value, I: Index> Csf<V, I> {
    /// A validated CSF: `levels[k - 1]` describes level `k` for `k` in `1..rank`.
    pub fn try_new(
        dims: Vec<usize>,
        levels: Vec<CsfLevel<I>>,
        values: Vec<V>,
    ) -> Result<Self, FormatError> {
        let rank = dims.len();
        if rank == 0 {
            return Err(FormatError::Rank {
                expected: ">= 1".into(),
                found: 0,
            });
        }
        if levels.len() != rank - 1 {
            return Err(FormatError::CsfLevels {
                rank,
                expected: rank - 1,
                found: levels.len(),
            });
        }
        let mut parent_nnz = dims[0];
        for (k, level) in levels.iter().enumerate() {
            let k = k + 1;
            check_compressed(
                (&format!("indptr_{k}"), &format!("indices_{k}")),
                &level.indptr,
                &level.indices,
                (
                    parent_nnz,
                    &format!("level {} nnz", k - 1),
                    &format!("level {} fiber", k - 1),
                ),
                dims[k],
                true,
            )?;
            parent_nnz = level.indices.len();
        }
        check_len("values", values.len(), parent_nnz, || {
            format!("level {} nnz", rank - 1)
        })?;
        Ok(Csf {
            dims,
            levels,
            values,
        })
    }

    /// Extent of each dimension.
    pub fn dims(&self) -> &[usize] {
        &self.dims
    }
    pub fn rank(&self) -> usize {
        self.dims.len()
    }
    /// The compressed levels `1..rank` (`levels()[k - 1]` is level `k`).
    pub fn levels(&self) -> &[CsfLevel<I>] {
        &self.levels
    }
    pub fn values(&self) -> &[V] {
        &self.values
    }
    /// Number of stored values.
    pub fn nnz(&self) -> usize {
        self.values.len()
    }
    /// The same tensor with another index width; fails naming the first value that does not fit.
    pub fn cast_index<J: Index>(&self) -> Result<Csf<V, J>, FormatError> {
        let mut levels = Vec::with_capacity(self.levels.len());
        for (k, l) in self.levels.iter().enumerate() {
            levels.push(CsfLevel {
                indptr: cast_slice(&l.indptr, &format!("indptr_{}", k + 1))?,
                indices: cast_slice(&l.indices, &format!("indices_{}", k + 1))?,
            });
        }
        Ok(Csf {
            dims: self.dims.clone(),
            levels,
            values: self.values.clone(),
        })
    }
}
