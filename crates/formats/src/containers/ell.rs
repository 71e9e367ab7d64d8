//! ELLPACK (ELL) matrices: a fixed number `width` of slots per row, padded.
//!
//! Layout: `indices` and `values` hold `rows * width` slots, row-major; `counts[i]` says how many
//! leading slots of row `i` are real entries. Every other slot is padding: it holds the declared
//! pad index (usually column 0, so a kernel that computes over all slots stays in bounds) and the
//! value zero (so it adds nothing). This is the `compressed_fixed(I, (cols, width), indices)`
//! storage of SPEC §2.1 plus the per-row counts.

use super::index::cast_slice;
use super::{check_len, mul, FormatError, Index, Value};

/// An ELL matrix.
#[derive(Clone, Debug, PartialEq)]
pub struct Ell<V, I = i32> {
    rows: usize,
    cols: usize,
    width: usize,
    indices: Vec<I>,
    values: Vec<V>,
    counts: Vec<I>,
    pad: I,
    sorted: bool,
}

impl<V: Value, I: Index> Ell<V, I> {
    /// A validated ELL. `sorted` declares the real entries of every row strictly increasing.
    #[allow(clippy::too_many_arguments)]
    pub fn try_new(
        rows: usize,
        cols: usize,
        width: usize,
        indices: Vec<I>,
        values: Vec<V>,
        counts: Vec<I>,
        pad: I,
        sorted: bool,
    ) -> Result<Self, FormatError> {
        let slots = mul(rows, width)?;
        let why = || format!("{rows} rows x width {width}");
        check_len("indices", indices.len(), slots, why)?;
        check_len("values", values.len(), slots, why)?;
        check_len("counts", counts.len(), rows, || "rows".into())?;
        let mut has_padding = false;
        for (row, &k) in counts.iter().enumerate() {
            let k = match k.to_usize() {
                Some(k) if k <= width => k,
                _ => {
                    return Err(FormatError::OutOfRange {
                        array: "counts".into(),
                        pos: row,
                        value: k.to_i64(),
                        extent: width.saturating_add(1),
                    })
                }
            };
            let base = row * width;
            for pos in base..base + k {
                let x = indices[pos];
                if !matches!(x.to_usize(), Some(v) if v < cols) {
                    return Err(FormatError::OutOfRange {
                        array: "indices".into(),
                        pos,
                        value: x.to_i64(),
                        extent: cols,
                    });
                }
                if sorted && pos > base && indices[pos] <= indices[pos - 1] {
                    return Err(FormatError::Unsorted {
                        what: "row".into(),
                        which: row,
                        array: "indices".into(),
                        pos,
                        value: x.to_i64(),
                        prev: indices[pos - 1].to_i64(),
                    });
                }
            }
            for pos in base + k..base + width {
                has_padding = true;
                if indices[pos] != pad {
                    return Err(FormatError::BadPadding {
                        array: "indices",
                        pos,
                        value: indices[pos].to_string(),
                        row,
                        why: format!("is not the pad index {pad}"),
                    });
                }
                if !values[pos].is_zero() {
                    return Err(FormatError::BadPadding {
                        array: "values",
                        pos,
                        value: values[pos].to_string(),
                        row,
                        why: "is not zero".into(),
                    });
                }
            }
        }
        if has_padding && !matches!(pad.to_usize(), Some(v) if v < cols) {
            return Err(FormatError::PadOutOfRange {
                pad: pad.to_i64(),
                cols,
            });
        }
        Ok(Ell {
            rows,
            cols,
            width,
            indices,
            values,
            counts,
            pad,
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
    /// Slots per row.
    pub fn width(&self) -> usize {
        self.width
    }
    /// `rows * width` column indices, row-major, padding included.
    pub fn indices(&self) -> &[I] {
        &self.indices
    }
    /// `rows * width` values, row-major, padding (zeros) included.
    pub fn values(&self) -> &[V] {
        &self.values
    }
    /// Number of real entries of each row.
    pub fn counts(&self) -> &[I] {
        &self.counts
    }
    /// The column index padding slots hold.
    pub fn pad(&self) -> I {
        self.pad
    }
    /// Number of real (non-padding) entries.
    pub fn nnz(&self) -> usize {
        self.counts.iter().map(|c| c.idx()).sum()
    }
    /// Whether the real entries of every row are declared strictly increasing.
    pub fn is_sorted(&self) -> bool {
        self.sorted
    }
    /// The per-slot mask (1 for a real entry, 0 for padding), row-major.
    pub fn mask(&self) -> Vec<u8> {
        let mut mask = vec![0u8; self.indices.len()];
        for (row, c) in self.counts.iter().enumerate() {
            let base = row * self.width;
            mask[base..base + c.idx()].fill(1);
        }
        mask
    }
    /// The same matrix with another index width; fails naming the first value that does not fit.
    pub fn cast_index<J: Index>(&self) -> Result<Ell<V, J>, FormatError> {
        let pad = cast_slice(&[self.pad], "pad index")?;
        Ok(Ell {
            rows: self.rows,
            cols: self.cols,
            width: self.width,
            indices: cast_slice(&self.indices, "indices")?,
            values: self.values.clone(),
            counts: cast_slice(&self.counts, "counts")?,
            pad: pad[0],
            sorted: self.sorted,
        })
    }
}
