//! Block sparse row (BSR) matrices with `r x c` dense blocks.
//!
//! Layout (SPEC §2.1, the seed's 4x6 example): `indptr` has one segment per block row
//! (`ceil(rows / r) + 1` entries), `indices` holds block columns (strictly increasing in each
//! block row) and `values` holds `r * c` values per stored block, row-major inside the block.
//! When `r` or `c` does not divide the shape, padding must be declared
//! ([`BsrPadding::Allow`]); the padded part of the last blocks must then hold zeros.

use super::index::cast_slice;
use super::{check_compressed, check_len, mul, FormatError, Index, Value};

/// Whether blocks may overhang the matrix's last rows / columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BsrPadding {
    /// Blocks may overhang; the overhanging values must be zero.
    Allow,
    /// The block sizes must divide the shape.
    Deny,
}

/// A BSR matrix.
#[derive(Clone, Debug, PartialEq)]
pub struct Bsr<V, I = i32> {
    rows: usize,
    cols: usize,
    block: (usize, usize),
    padding: BsrPadding,
    indptr: Vec<I>,
    indices: Vec<I>,
    values: Vec<V>,
}

impl<V: Value, I: Index> Bsr<V, I> {
    /// A validated BSR with `block = (r, c)`.
    pub fn try_new(
        rows: usize,
        cols: usize,
        block: (usize, usize),
        padding: BsrPadding,
        indptr: Vec<I>,
        indices: Vec<I>,
        values: Vec<V>,
    ) -> Result<Self, FormatError> {
        let (mb, nb) = block_grid(rows, cols, block, padding)?;
        check_compressed(
            ("indptr", "indices"),
            &indptr,
            &indices,
            (mb, "block rows", "block row"),
            nb,
            true,
        )?;
        let (r, c) = block;
        let expected = mul(mul(indices.len(), r)?, c)?;
        check_len("values", values.len(), expected, || {
            format!("{} blocks x {r} x {c}", indices.len())
        })?;
        if !rows.is_multiple_of(r) || !cols.is_multiple_of(c) {
            for br in 0..mb {
                let lo = indptr[br].idx();
                for (k, x) in indices[lo..indptr[br + 1].idx()].iter().enumerate() {
                    let (p, bc) = (lo + k, x.idx());
                    for ii in 0..r {
                        for jj in 0..c {
                            let pos = (p * r + ii) * c + jj;
                            let outside = br * r + ii >= rows || bc * c + jj >= cols;
                            if outside && !values[pos].is_zero() {
                                return Err(FormatError::PaddingValue {
                                    pos,
                                    value: values[pos].to_string(),
                                    rows,
                                    cols,
                                });
                            }
                        }
                    }
                }
            }
        }
        Ok(Bsr {
            rows,
            cols,
            block,
            padding,
            indptr,
            indices,
            values,
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
    /// `(r, c)`.
    pub fn block(&self) -> (usize, usize) {
        self.block
    }
    pub fn padding(&self) -> BsrPadding {
        self.padding
    }
    /// `(block rows, block columns)` = `(ceil(rows / r), ceil(cols / c))`.
    pub fn block_shape(&self) -> (usize, usize) {
        (
            self.rows.div_ceil(self.block.0),
            self.cols.div_ceil(self.block.1),
        )
    }
    /// Number of stored blocks.
    pub fn nnz_blocks(&self) -> usize {
        self.indices.len()
    }
    pub fn indptr(&self) -> &[I] {
        &self.indptr
    }
    pub fn indices(&self) -> &[I] {
        &self.indices
    }
    /// `r * c` values per stored block, row-major inside the block.
    pub fn values(&self) -> &[V] {
        &self.values
    }
    /// The same matrix with another index width; fails naming the first value that does not fit.
    pub fn cast_index<J: Index>(&self) -> Result<Bsr<V, J>, FormatError> {
        Ok(Bsr {
            rows: self.rows,
            cols: self.cols,
            block: self.block,
            padding: self.padding,
            indptr: cast_slice(&self.indptr, "indptr")?,
            indices: cast_slice(&self.indices, "indices")?,
            values: self.values.clone(),
        })
    }
}

/// Checks the block sizes against the shape and returns `(block rows, block columns)`.
pub(crate) fn block_grid(
    rows: usize,
    cols: usize,
    (r, c): (usize, usize),
    padding: BsrPadding,
) -> Result<(usize, usize), FormatError> {
    if r == 0 {
        return Err(FormatError::NotPositive {
            what: "BSR block rows",
            value: r,
        });
    }
    if c == 0 {
        return Err(FormatError::NotPositive {
            what: "BSR block columns",
            value: c,
        });
    }
    if padding == BsrPadding::Deny {
        if !rows.is_multiple_of(r) {
            return Err(FormatError::BlockNotDividing {
                block: r,
                extent: rows,
                what: "rows",
            });
        }
        if !cols.is_multiple_of(c) {
            return Err(FormatError::BlockNotDividing {
                block: c,
                extent: cols,
                what: "columns",
            });
        }
    }
    Ok((rows.div_ceil(r), cols.div_ceil(c)))
}
