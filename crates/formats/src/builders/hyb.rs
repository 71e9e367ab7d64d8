//! Column-partitioned, degree-bucketed hyb format (SPEC §5.3): a CSR matrix split into
//! `num_col_parts` column ranges and, inside each, rows grouped into ELL buckets by degree.
//!
//! Exact semantics:
//! - Part width `w = ceil(cols / num_col_parts)` (0 when `cols == 0`); part `p` covers columns
//!   `p*w .. min((p+1)*w, cols)`. The last part is the narrower remainder, and when
//!   `num_col_parts` does not divide evenly some trailing parts may cover no column at all (their
//!   buckets are all empty). `num_col_parts` must be in `1..=max(cols, 1)`.
//! - Inside part `p`, row `i`'s entries in that range (in CSR order) have degree `d`. `d == 0`:
//!   the row appears nowhere in that part. Otherwise it goes to the first bucket `>= d`, as one
//!   bucket row. A row with `d` above the largest bucket `B` is split into `ceil(d / B)` chunks
//!   of `B` consecutive entries (the last one padded), every chunk a bucket row of the *largest*
//!   bucket with the same row index.
//! - Bucket rows are ordered by row index (chunks of one row consecutive, in entry order).
//! - Padding slots hold value 0 and mask 0, and as column the smallest column their matrix row
//!   does not store (column 0 unless the row stores it; column 0 for a row storing every
//!   column; with [`hyb_padded_below`], columns below its bound only, and "every column" means
//!   every one below the bound); real slots mask 1. Column indices are absolute (not relative
//!   to the part). So a padding slot names a coordinate absent from the matrix: the
//!   format-rewrite copy of the hyb rule (`new[o, i, j] = A[i, j]`, SPEC §3.1), which cannot see
//!   the mask, reads 0 there — even when the row stores column 0 — and a stage-I access by
//!   coordinate never confuses padding with a stored element. A row storing every column leaves no such coordinate: where its
//!   run would need padding, it is instead cut into pieces that fill buckets exactly (whole
//!   largest buckets, then the rest greedily from the largest bucket that fits: always possible
//!   when the buckets are powers of two from 1, as the default ones), each piece a bucket row of
//!   the same row index; only bucket sets that cannot cover the rest exactly keep padding there
//!   (column 0).
//! - `needs_atomic` is true when some row is split or has entries in more than one part, i.e.
//!   when two bucket rows write the same output row.
//! - [`hyb_every_row`] builds the same and also places every row that stores nothing (when the
//!   matrix has a column) as one bucket row of part 0's first bucket, all padding (value 0,
//!   mask 0, column 0): a kernel whose bucket rows then hold every matrix row exactly once
//!   ([`Hyb::rows_once`]) may *store* each output row instead of adding into a zeroed one.
//! - [`hyb_with_rest`] (one part) never splits a row: the rows longer than the largest bucket go
//!   whole to a DCSR [`HybRest`], the others (empty ones included) as above, so again every row
//!   is written by one bucket row or one rest row.

use super::{
    check_buckets, check_csr, coo_from_entries, filled, mul, place, to_i32, BuildError, CsrIndex,
};
use crate::coo::Coo;
use crate::tensor::{Tensor, TensorData};

/// One (part, bucket) ELL block of a [`Hyb`]: `r` bucket rows of `width` slots each.
#[derive(Clone, Debug, PartialEq)]
pub struct HybBucket {
    /// Column-part index.
    pub part: usize,
    /// Bucket index into [`Hyb::buckets`].
    pub bucket: usize,
    /// Slots per bucket row (the bucket width).
    pub width: usize,
    /// First column of the part.
    pub col_start: usize,
    /// One past the last column of the part (`col_start` when the part is empty).
    pub col_end: usize,
    /// Output row of each bucket row, shape `(r,)`.
    pub row_indices: Vec<i32>,
    /// Column of each slot, shape `(r, width)` row-major; padding holds the smallest column its
    /// row does not store (see the module documentation).
    pub col_indices: Vec<i32>,
    /// Value of each slot, shape `(r, width)`; padding holds 0.
    pub values: Vec<f32>,
    /// 1 for a real slot, 0 for padding, shape `(r, width)`.
    pub mask: Vec<u8>,
    /// The position in the input CSR of each slot's entry, -1 for padding, shape `(r, width)`:
    /// `values[s] == input_values[sources[s]]`, so that new values of the same matrix (a GNN's
    /// dropout, another layer's weights) are laid out by one gather.
    pub sources: Vec<i64>,
}

impl HybBucket {
    /// Number of bucket rows `r`.
    pub fn num_rows(&self) -> usize {
        self.row_indices.len()
    }
}

/// The column-partitioned hyb decomposition of a CSR matrix.
#[derive(Clone, Debug, PartialEq)]
pub struct Hyb {
    pub rows: usize,
    pub cols: usize,
    pub num_col_parts: usize,
    /// Width of every part but possibly the last: `ceil(cols / num_col_parts)`.
    pub part_width: usize,
    /// Bucket widths, strictly increasing.
    pub buckets: Vec<usize>,
    /// `parts[p][k]` is the block of part `p`, bucket `k`.
    pub parts: Vec<Vec<HybBucket>>,
    /// Whether two bucket rows may write the same output row.
    pub needs_atomic: bool,
}

impl Hyb {
    /// The block of part `part`, bucket `bucket`.
    pub fn get(&self, part: usize, bucket: usize) -> Option<&HybBucket> {
        self.parts.get(part)?.get(bucket)
    }

    /// Whether the bucket rows hold every matrix row exactly once (one part, no row split,
    /// every empty row placed: [`hyb_every_row`]): then every output row is written by one
    /// bucket row alone.
    pub fn rows_once(&self) -> bool {
        let mut seen = vec![0u8; self.rows];
        for b in self.blocks() {
            for &r in &b.row_indices {
                match usize::try_from(r).ok().and_then(|r| seen.get_mut(r)) {
                    Some(x) if *x == 0 => *x = 1,
                    _ => return false,
                }
            }
        }
        seen.iter().all(|&x| x == 1)
    }

    /// Iterates over all blocks, part-major.
    pub fn blocks(&self) -> impl Iterator<Item = &HybBucket> {
        self.parts.iter().flatten()
    }

    /// Every block's arrays as named host tensors, ready to bind: `row_indices_{p}_{k}` `(r,)`
    /// i32, `col_indices_{p}_{k}` `(r, w)` i32, `values_{p}_{k}` `(r, w)` f32 and
    /// `mask_{p}_{k}` `(r, w)` u8.
    pub fn tensors(&self) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        for b in self.blocks() {
            let (r, w, tag) = (b.num_rows(), b.width, format!("{}_{}", b.part, b.bucket));
            out.extend(block_tensors(
                &tag,
                r,
                w,
                &b.row_indices,
                &b.col_indices,
                &b.values,
                &b.mask,
            ));
        }
        out
    }

    /// The original matrix: every masked slot as an entry, duplicates (split chunks never
    /// overlap, but duplicate input columns do) summed.
    pub fn reassemble(&self) -> Coo {
        let mut entries = Vec::new();
        for b in self.blocks() {
            for (r, &row) in b.row_indices.iter().enumerate() {
                for s in 0..b.width {
                    let at = r * b.width + s;
                    if b.mask[at] != 0 {
                        entries.push((
                            vec![i64::from(row), i64::from(b.col_indices[at])],
                            f64::from(b.values[at]),
                        ));
                    }
                }
            }
        }
        coo_from_entries(vec![self.rows, self.cols], entries)
    }
}

/// The four named tensors of one ELL-like block (shared with ELL3D).
pub(crate) fn block_tensors(
    tag: &str,
    r: usize,
    w: usize,
    rows: &[i32],
    cols: &[i32],
    values: &[f32],
    mask: &[u8],
) -> [(String, Tensor); 4] {
    let t = |shape: Vec<usize>, data| Tensor { shape, data };
    [
        (
            format!("row_indices_{tag}"),
            t(vec![r], TensorData::I32(rows.to_vec())),
        ),
        (
            format!("col_indices_{tag}"),
            t(vec![r, w], TensorData::I32(cols.to_vec())),
        ),
        (
            format!("values_{tag}"),
            t(vec![r, w], TensorData::F32(values.to_vec())),
        ),
        (
            format!("mask_{tag}"),
            t(vec![r, w], TensorData::U8(mask.to_vec())),
        ),
    ]
}

/// The smallest column below `cols` absent from `stored` (a row's columns, any order), or 0
/// when the row stores every column.
fn unstored_column(stored: &[usize], cols: usize) -> i32 {
    let mut sorted = stored.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let c = sorted
        .iter()
        .enumerate()
        .find(|&(k, &c)| c != k)
        .map_or(sorted.len(), |(k, _)| k);
    if c < cols {
        c as i32 // fits: columns were checked to fit i32
    } else {
        0
    }
}

/// Whether a row's columns (any order, duplicates allowed) cover every column `0..cols`.
fn stores_every_column(stored: &[usize], cols: usize) -> bool {
    if stored.len() < cols {
        return false;
    }
    let mut seen = vec![false; cols];
    for &c in stored {
        if let Some(x) = seen.get_mut(c) {
            *x = true;
        }
    }
    seen.iter().all(|&x| x)
}

/// How a run of `d` entries of one row goes into buckets: `(bucket, entries)` per bucket row,
/// in order. A run fits the first bucket at least `d` wide, or is cut into chunks of the
/// largest bucket (the last padded); a run of a row that stores every column (`exact`) is cut
/// so that no chunk needs padding, where the buckets allow it (see the module docs).
fn pieces(d: usize, buckets: &[usize], exact: bool) -> Vec<(usize, usize)> {
    let (k, n) = place(d, buckets);
    let plain = || -> Vec<(usize, usize)> {
        let w = buckets[k];
        (0..n).map(|c| (k, w.min(d - c * w))).collect()
    };
    if !exact || n * buckets[k] == d {
        return plain();
    }
    let last = buckets.len() - 1;
    let mut out: Vec<(usize, usize)> = Vec::new();
    let mut rest = d;
    while rest > buckets[last] {
        out.push((last, buckets[last]));
        rest -= buckets[last];
    }
    while rest > 0 {
        match (0..=last).rev().find(|&b| buckets[b] <= rest) {
            Some(b) => {
                out.push((b, buckets[b]));
                rest -= buckets[b];
            }
            None => return plain(),
        }
    }
    out
}

/// Builds the column-partitioned hyb format of a CSR matrix (see the module docs).
pub fn hyb<I: CsrIndex>(
    rows: usize,
    cols: usize,
    indptr: &[I],
    indices: &[I],
    values: &[f32],
    num_col_parts: usize,
    buckets: &[usize],
) -> Result<Hyb, BuildError> {
    hyb_padded_below(
        rows,
        cols,
        indptr,
        indices,
        values,
        num_col_parts,
        buckets,
        usize::MAX,
    )
}

/// [`hyb`] with padding slots naming columns below `pad_below` only (the smallest one below it
/// that their row does not store; a row storing every column below it is cut as one storing
/// every column is). A kernel that also uses a column's coordinate in a dense dimension
/// narrower than the matrix (`B[j, j]` with `B` over `(n, feat_size)`) then reads padding
/// inside that dimension, as it reads the stored entries.
#[allow(clippy::too_many_arguments)]
pub fn hyb_padded_below<I: CsrIndex>(
    rows: usize,
    cols: usize,
    indptr: &[I],
    indices: &[I],
    values: &[f32],
    num_col_parts: usize,
    buckets: &[usize],
    pad_below: usize,
) -> Result<Hyb, BuildError> {
    build(
        rows,
        cols,
        indptr,
        indices,
        values,
        num_col_parts,
        buckets,
        &|_| false,
        pad_below,
    )
}

/// [`hyb`] with every row that stores nothing placed too, as one bucket row of padding in part
/// 0's first bucket (none where the matrix has no column: no padding column exists).
pub fn hyb_every_row<I: CsrIndex>(
    rows: usize,
    cols: usize,
    indptr: &[I],
    indices: &[I],
    values: &[f32],
    num_col_parts: usize,
    buckets: &[usize],
) -> Result<Hyb, BuildError> {
    build(
        rows,
        cols,
        indptr,
        indices,
        values,
        num_col_parts,
        buckets,
        &|_| true,
        usize::MAX,
    )
}

/// The rows of [`hyb_with_rest`] longer than its largest bucket, whole, as DCSR: `rows` (row
/// indices, increasing), `indptr` (`rows.len() + 1` offsets) into `indices` / `values`, every
/// row's entries by increasing column (duplicates kept, in input order).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HybRest {
    pub rows: Vec<i32>,
    pub indptr: Vec<i32>,
    pub indices: Vec<i32>,
    pub values: Vec<f32>,
}

impl HybRest {
    /// Stored entries.
    pub fn nnz(&self) -> usize {
        self.indices.len()
    }
}

/// One column part, rows never split: a row of at most the largest bucket's entries is one
/// bucket row (as [`hyb`]; an empty row one bucket row of padding, as [`hyb_every_row`]), a
/// longer row goes whole to the [`HybRest`]. Every row is then written by exactly one bucket
/// row or one rest row (`needs_atomic` is false): a kernel may store each output row, a long
/// one summed by one thread block, with no zero fill of the output first.
pub fn hyb_with_rest<I: CsrIndex>(
    rows: usize,
    cols: usize,
    indptr: &[I],
    indices: &[I],
    values: &[f32],
    buckets: &[usize],
) -> Result<(Hyb, HybRest), BuildError> {
    let csr = check_csr(rows, cols, indptr, indices, Some(values))?;
    check_buckets(buckets)?;
    let widest = buckets.last().copied().unwrap_or(0);
    let long: Vec<bool> = (0..rows)
        .map(|i| csr.indptr[i + 1] - csr.indptr[i] > widest)
        .collect();
    // The short rows' CSR (the long ones emptied) for the buckets.
    let (mut s_indptr, mut s_indices, mut s_values) = (vec![0usize], Vec::new(), Vec::new());
    let mut rest = HybRest {
        indptr: vec![0],
        ..HybRest::default()
    };
    for (i, &is_long) in long.iter().enumerate() {
        let (lo, hi) = (csr.indptr[i], csr.indptr[i + 1]);
        if is_long {
            let mut e: Vec<(usize, f32)> = (lo..hi).map(|j| (csr.indices[j], values[j])).collect();
            e.sort_by_key(|&(c, _)| c);
            rest.rows.push(to_i32(i, "row index")?);
            for (c, v) in e {
                rest.indices.push(to_i32(c, "column index")?);
                rest.values.push(v);
            }
            rest.indptr.push(to_i32(rest.indices.len(), "rest nnz")?);
        } else {
            s_indices.extend_from_slice(&csr.indices[lo..hi]);
            s_values.extend_from_slice(&values[lo..hi]);
        }
        s_indptr.push(s_indices.len());
    }
    let short = |i: usize| !long[i];
    let h = build(
        rows,
        cols,
        &s_indptr,
        &s_indices,
        &s_values,
        1,
        buckets,
        &short,
        usize::MAX,
    )?;
    Ok((h, rest))
}

#[allow(clippy::too_many_arguments)]
fn build<I: CsrIndex>(
    rows: usize,
    cols: usize,
    indptr: &[I],
    indices: &[I],
    values: &[f32],
    num_col_parts: usize,
    buckets: &[usize],
    pad_empty: &dyn Fn(usize) -> bool,
    pad_below: usize,
) -> Result<Hyb, BuildError> {
    let csr = check_csr(rows, cols, indptr, indices, Some(values))?;
    check_buckets(buckets)?;
    if num_col_parts == 0 || num_col_parts > cols.max(1) {
        return Err(BuildError::BadParam {
            name: "num_col_parts",
            reason: format!("{num_col_parts} is not in 1..={}", cols.max(1)),
        });
    }
    if rows > 0 {
        to_i32(rows - 1, "row index")?;
    }
    if cols > 0 {
        to_i32(cols - 1, "column index")?;
    }
    let part_width = cols.div_ceil(num_col_parts);
    let nb = buckets.len();
    // Padding names columns below `pad_cols` only.
    let pad_cols = cols.min(pad_below);
    // Empty rows are placed (where asked) only where a padding column exists.
    let place_empty = |i: usize| pad_cols > 0 && pad_empty(i);

    // The entries of row `i`, as (part, position) sorted by part, CSR order kept inside a part.
    let row_entries = |i: usize| -> Vec<(usize, usize)> {
        let mut e: Vec<(usize, usize)> = (csr.indptr[i]..csr.indptr[i + 1])
            .map(|j| (csr.indices[j] / part_width, j))
            .collect();
        e.sort_by_key(|&(p, _)| p);
        e
    };
    // Calls `f(part, entries)` for every non-empty run of one part in `e`.
    fn runs(e: &[(usize, usize)], mut f: impl FnMut(usize, &[(usize, usize)])) {
        let mut s = 0;
        while s < e.len() {
            let p = e[s].0;
            let mut t = s;
            while t < e.len() && e[t].0 == p {
                t += 1;
            }
            f(p, &e[s..t]);
            s = t;
        }
    }

    // Pass 1: bucket-row counts per (part, bucket), and whether atomics are needed.
    let mut counts = filled(num_col_parts, vec![0usize; nb], "hyb block table")?;
    let mut needs_atomic = false;
    for i in 0..rows {
        let e = row_entries(i);
        let full = stores_every_column(&csr.indices[csr.indptr[i]..csr.indptr[i + 1]], pad_cols);
        if e.is_empty() && place_empty(i) {
            counts[0][0] += 1;
        }
        let mut parts_hit = 0;
        runs(&e, |p, run| {
            let ps = pieces(run.len(), buckets, full);
            for &(k, _) in &ps {
                counts[p][k] += 1;
            }
            parts_hit += 1;
            if ps.len() > 1 {
                needs_atomic = true;
            }
        });
        if parts_hit > 1 {
            needs_atomic = true;
        }
    }

    // Allocate every block.
    let mut parts = Vec::with_capacity(num_col_parts);
    for (p, row_counts) in counts.iter().enumerate() {
        let col_start = (p * part_width).min(cols);
        let col_end = ((p + 1) * part_width).min(cols);
        let mut blocks = Vec::with_capacity(nb);
        for (k, &r) in row_counts.iter().enumerate() {
            let width = buckets[k];
            let n = mul(r, width, "hyb block size")?;
            blocks.push(HybBucket {
                part: p,
                bucket: k,
                width,
                col_start,
                col_end,
                row_indices: Vec::with_capacity(r),
                col_indices: filled(n, 0, "hyb col_indices")?,
                values: filled(n, 0.0, "hyb values")?,
                mask: filled(n, 0, "hyb mask")?,
                sources: filled(n, -1, "hyb sources")?,
            });
        }
        parts.push(blocks);
    }

    // Pass 2: fill.
    for i in 0..rows {
        let e = row_entries(i);
        let row = i as i32; // fits: checked above
        let (lo, hi) = (csr.indptr[i], csr.indptr[i + 1]);
        // The row's padding column, found once the row needs padding.
        let mut pad: Option<i32> = None;
        let full = stores_every_column(&csr.indices[lo..hi], pad_cols);
        if e.is_empty() && place_empty(i) {
            // One bucket row of padding (value 0, mask 0, column 0: the row stores none).
            let b = &mut parts[0][0];
            b.row_indices.push(row);
        }
        runs(&e, |p, run| {
            let mut at = 0;
            for (k, len) in pieces(run.len(), buckets, full) {
                let chunk = &run[at..at + len];
                at += len;
                let b = &mut parts[p][k];
                let base = b.row_indices.len() * b.width;
                b.row_indices.push(row);
                for (s, &(_, j)) in chunk.iter().enumerate() {
                    b.col_indices[base + s] = csr.indices[j] as i32;
                    b.values[base + s] = values[j];
                    b.mask[base + s] = 1;
                    b.sources[base + s] = j as i64;
                }
                if chunk.len() < b.width {
                    let pad =
                        *pad.get_or_insert_with(|| unstored_column(&csr.indices[lo..hi], pad_cols));
                    b.col_indices[base + chunk.len()..base + b.width].fill(pad);
                }
            }
        });
    }

    Ok(Hyb {
        rows,
        cols,
        num_col_parts,
        part_width,
        buckets: buckets.to_vec(),
        parts,
        needs_atomic,
    })
}
