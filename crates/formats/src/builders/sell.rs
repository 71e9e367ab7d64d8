//! SELL-C-σ (sliced ELLPACK with sorting windows): the rows of a CSR matrix packed into chunks
//! of `lanes` rows stored side by side, so one vector instruction handles one slot of `lanes`
//! rows at once — no per-row branch and no per-row horizontal sum, what short and irregular rows
//! want from a SIMD machine (Kreutzer et al., "A unified sparse matrix data format for efficient
//! general sparse matrix-vector multiplication on modern processors with wide SIMD units").
//!
//! Exact semantics:
//! - Rows are taken in windows of `sigma` consecutive rows (`sigma` ≥ 1; the last window may be
//!   shorter); inside a window they are ordered by decreasing length, rows of equal length in
//!   increasing row order. The sequence of all windows, in order, is cut into chunks of `lanes`
//!   rows; the last chunk is completed with *padding lanes*.
//! - Chunk `k`'s width `w_k` is the length of its longest row; the chunk holds `w_k × lanes`
//!   slots, slot `(s, l)` (slot `s` of lane `l`) at flat position
//!   `(chunk_ptr[k] + s) * lanes + l`, where `chunk_ptr` (length `nchunk + 1`) is the running
//!   sum of the widths. Lane `l` of chunk `k` holds row `row_ids[k * lanes + l]`'s entries in
//!   CSR order in slots `0..len`, then padding slots: value 0 and, as column, the lane's last
//!   real column (column 0 for a lane with no entry), a column the matrix has, so a kernel reads
//!   inside its operand and adds `0 · x[c]`.
//! - Every row of the matrix is in exactly one lane (empty rows too: their lanes are all
//!   padding, and a kernel that writes one output per lane sets them). Padding lanes get the
//!   row ids `rows, rows + 1, ...`: distinct, past the matrix, so a kernel writes them into an
//!   output of `padded_rows() = nchunk * lanes` rows whose first `rows` are the result.
//! - Sizes must fit `i32` indexing: `nchunk * lanes` and the slot count times `lanes`.

use super::{check_csr, filled, mul, to_i32, BuildError, CsrIndex};
use crate::coo::Coo;

/// A CSR matrix in SELL-C-σ (see the module documentation).
#[derive(Clone, Debug, PartialEq)]
pub struct Sell {
    pub rows: usize,
    pub cols: usize,
    /// Rows per chunk (`C`).
    pub lanes: usize,
    /// Rows per sorting window (`σ`).
    pub sigma: usize,
    /// Running sum of the chunk widths, `nchunk + 1` entries (slot offsets, not element ones).
    pub chunk_ptr: Vec<i32>,
    /// Column of every slot, `slots() * lanes` entries, slot-major within a chunk.
    pub col_indices: Vec<i32>,
    /// Value of every slot (0 for padding), laid out as `col_indices`.
    pub values: Vec<f32>,
    /// The row each lane computes, `nchunk * lanes` entries (padding lanes: `rows..`).
    pub row_ids: Vec<i32>,
}

impl Sell {
    /// Number of chunks.
    pub fn nchunk(&self) -> usize {
        self.chunk_ptr.len().saturating_sub(1)
    }

    /// Slots of all chunks together (the sum of the widths).
    pub fn slots(&self) -> usize {
        self.chunk_ptr.last().map_or(0, |&s| s as usize)
    }

    /// The widest chunk.
    pub fn max_width(&self) -> usize {
        self.chunk_ptr
            .windows(2)
            .map(|w| (w[1] - w[0]) as usize)
            .max()
            .unwrap_or(0)
    }

    /// Rows of an output written once per lane: the matrix's rows, then the padding lanes'.
    pub fn padded_rows(&self) -> usize {
        self.nchunk() * self.lanes
    }

    /// Stored slots over stored entries (1 when nothing is padded).
    pub fn fill_ratio(&self, nnz: usize) -> f64 {
        if nnz == 0 {
            return 1.0;
        }
        (self.slots() * self.lanes) as f64 / nnz as f64
    }

    /// The matrix back from the chunks (padding dropped), entries sorted.
    pub fn reassemble(&self, row_lengths: &[usize]) -> Coo {
        let mut entries = Vec::new();
        for k in 0..self.nchunk() {
            let base = self.chunk_ptr[k] as usize;
            let width = self.chunk_ptr[k + 1] as usize - base;
            for l in 0..self.lanes {
                let row = self.row_ids[k * self.lanes + l] as usize;
                let len = row_lengths.get(row).copied().unwrap_or(0).min(width);
                for s in 0..len {
                    let p = (base + s) * self.lanes + l;
                    entries.push((
                        vec![row as i64, self.col_indices[p] as i64],
                        self.values[p] as f64,
                    ));
                }
            }
        }
        super::coo_from_entries(vec![self.rows, self.cols], entries)
    }
}

/// Packs a CSR matrix into SELL-C-σ with `lanes` rows per chunk and sorting windows of `sigma`
/// rows (see the module documentation).
pub fn sell<I: CsrIndex>(
    rows: usize,
    cols: usize,
    indptr: &[I],
    indices: &[I],
    values: &[f32],
    lanes: usize,
    sigma: usize,
) -> Result<Sell, BuildError> {
    let csr = check_csr(rows, cols, indptr, indices, Some(values))?;
    if lanes == 0 || lanes > 64 {
        return Err(BuildError::BadParam {
            name: "lanes",
            reason: format!("{lanes} is not in 1..=64"),
        });
    }
    if sigma == 0 {
        return Err(BuildError::BadParam {
            name: "sigma",
            reason: "the sorting window must hold at least one row".into(),
        });
    }
    let len = |i: usize| csr.indptr[i + 1] - csr.indptr[i];
    // Row order: by decreasing length inside each window (stable: equal lengths keep row order).
    let mut order: Vec<usize> = (0..rows).collect();
    for window in order.chunks_mut(sigma) {
        window.sort_by_key(|&i| std::cmp::Reverse(len(i)));
    }
    let nchunk = rows.div_ceil(lanes);
    let padded = mul(nchunk, lanes, "SELL lanes")?;
    to_i32(padded, "padded row count")?;
    let mut chunk_ptr = Vec::with_capacity(nchunk + 1);
    chunk_ptr.push(0i32);
    let mut total = 0usize;
    for k in 0..nchunk {
        let width = order[k * lanes..((k + 1) * lanes).min(rows)]
            .iter()
            .map(|&i| len(i))
            .max()
            .unwrap_or(0);
        total = total
            .checked_add(width)
            .ok_or_else(|| BuildError::TooLarge("SELL slot count overflows".into()))?;
        chunk_ptr.push(to_i32(total, "SELL slot count")?);
    }
    let elems = mul(total, lanes, "SELL slots")?;
    to_i32(elems, "SELL element count")?;
    let mut col_indices = filled(elems, 0i32, "SELL columns")?;
    let mut vals = filled(elems, 0f32, "SELL values")?;
    let mut row_ids = filled(padded, 0i32, "SELL row ids")?;
    for k in 0..nchunk {
        let base = chunk_ptr[k] as usize;
        let width = chunk_ptr[k + 1] as usize - base;
        for l in 0..lanes {
            let slot = k * lanes + l;
            let Some(&row) = order.get(slot) else {
                // A padding lane: a row id of its own past the matrix, all slots padding.
                row_ids[slot] = to_i32(slot, "padding row id")?;
                continue;
            };
            row_ids[slot] = to_i32(row, "row id")?;
            let (lo, hi) = (csr.indptr[row], csr.indptr[row + 1]);
            let mut last = 0i32;
            for s in 0..width {
                let p = (base + s) * lanes + l;
                if lo + s < hi {
                    last = to_i32(csr.indices[lo + s], "column")?;
                    vals[p] = values[lo + s];
                }
                col_indices[p] = last;
            }
        }
    }
    Ok(Sell {
        rows,
        cols,
        lanes,
        sigma,
        chunk_ptr,
        col_indices,
        values: vals,
        row_ids,
    })
}
