//! CSF → ELL3D bucketing for relational GNNs (SPEC §5.3): a 3-D tensor `A[r, i, j]` (relation,
//! row, column) split, per relation, into ELL buckets by row length, each padded to whole groups
//! of rows.
//!
//! Exact semantics:
//! - Input CSF: `rel_indptr` (`num_rel + 1`) delimits, per relation, a run of `row_indices`
//!   (strictly increasing inside a relation, each `< rows`); `indptr` (`row_indices.len() + 1`)
//!   delimits each such row's `indices` (`< cols`) and `values`.
//! - Inside relation `r`, a row with `d` entries goes to the first bucket `>= d` (one ELL row);
//!   `d == 0` rows are skipped; a row longer than the largest bucket `B` is split into
//!   `ceil(d / B)` chunks of `B` consecutive entries, each an ELL row of the largest bucket with
//!   the same row index. ELL rows are ordered by row index.
//! - Each (relation, bucket) block with `m` real ELL rows is padded to
//!   `n = ceil(m / group_size) * group_size` rows; padding rows (the last `n - m`) have row index
//!   0 and every slot column 0, value 0, mask 0. Padding slots of real rows are the same.
//! - `needs_atomic` is true when some row is split or one row index appears in more than one
//!   (relation, bucket) block (they accumulate into the same output row).

use std::collections::HashMap;

use super::{
    check_buckets, check_indices, check_ptr, check_values, coo_from_entries, filled, mul, place,
    to_i32, BuildError, CsrIndex,
};
use crate::coo::Coo;
use crate::tensor::Tensor;

/// One (relation, bucket) ELL block of an [`Ell3d`]: `n` rows of `width` slots.
#[derive(Clone, Debug, PartialEq)]
pub struct Ell3dBucket {
    pub relation: usize,
    /// Bucket index into [`Ell3d::buckets`].
    pub bucket: usize,
    /// Slots per row (the bucket width).
    pub width: usize,
    /// Real ELL rows `m` (the first `m` of `row_indices`); the rest is group padding.
    pub num_real_rows: usize,
    /// Output row of each ELL row, shape `(n,)`; padding rows hold 0.
    pub row_indices: Vec<i32>,
    /// Shape `(n, width)` row-major; padding holds 0.
    pub col_indices: Vec<i32>,
    /// Shape `(n, width)`; padding holds 0.
    pub values: Vec<f32>,
    /// Shape `(n, width)`: 1 for a real slot, 0 for padding.
    pub mask: Vec<u8>,
}

impl Ell3dBucket {
    /// Number of rows `n`, padding included (a multiple of the group size).
    pub fn num_rows(&self) -> usize {
        self.row_indices.len()
    }
}

/// The ELL3D decomposition of a 3-D (relation, row, column) sparse tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct Ell3d {
    pub num_rel: usize,
    pub rows: usize,
    pub cols: usize,
    /// Bucket widths, strictly increasing.
    pub buckets: Vec<usize>,
    /// Every block's row count is a multiple of this.
    pub group_size: usize,
    /// `blocks[r][k]` is relation `r`, bucket `k`.
    pub blocks: Vec<Vec<Ell3dBucket>>,
    /// Whether two ELL rows may write the same output row.
    pub needs_atomic: bool,
}

impl Ell3d {
    /// The block of relation `rel`, bucket `bucket`.
    pub fn get(&self, rel: usize, bucket: usize) -> Option<&Ell3dBucket> {
        self.blocks.get(rel)?.get(bucket)
    }

    /// Every block's arrays as named host tensors: `row_indices_{r}_{k}` `(n,)` i32,
    /// `col_indices_{r}_{k}` `(n, w)` i32, `values_{r}_{k}` `(n, w)` f32, `mask_{r}_{k}` `(n, w)` u8.
    pub fn tensors(&self) -> Vec<(String, Tensor)> {
        let mut out = Vec::new();
        for b in self.blocks.iter().flatten() {
            let (n, w, tag) = (
                b.num_rows(),
                b.width,
                format!("{}_{}", b.relation, b.bucket),
            );
            out.extend(super::hyb::block_tensors(
                &tag,
                n,
                w,
                &b.row_indices,
                &b.col_indices,
                &b.values,
                &b.mask,
            ));
        }
        out
    }

    /// The original tensor, dims `[num_rel, rows, cols]`, sorted, duplicates summed.
    pub fn reassemble(&self) -> Coo {
        let mut entries = Vec::new();
        for b in self.blocks.iter().flatten() {
            for (r, &row) in b.row_indices.iter().enumerate() {
                for s in 0..b.width {
                    let at = r * b.width + s;
                    if b.mask[at] != 0 {
                        entries.push((
                            vec![
                                b.relation as i64,
                                i64::from(row),
                                i64::from(b.col_indices[at]),
                            ],
                            f64::from(b.values[at]),
                        ));
                    }
                }
            }
        }
        coo_from_entries(vec![self.num_rel, self.rows, self.cols], entries)
    }
}

/// Builds ELL3D from a 3-D CSF (see the module docs for the arrays and the result).
#[allow(clippy::too_many_arguments)]
pub fn ell3d_from_csf<I: CsrIndex>(
    num_rel: usize,
    rows: usize,
    cols: usize,
    rel_indptr: &[I],
    row_indices: &[I],
    indptr: &[I],
    indices: &[I],
    values: &[f32],
    buckets: &[usize],
    group_size: usize,
) -> Result<Ell3d, BuildError> {
    let rel_ptr = check_ptr(
        "rel_indptr",
        rel_indptr,
        num_rel,
        "row_indices",
        row_indices.len(),
    )?;
    let row_idx = check_indices("row_indices", row_indices, rows)?;
    for r in 0..num_rel {
        for p in rel_ptr[r] + 1..rel_ptr[r + 1] {
            if row_idx[p] <= row_idx[p - 1] {
                return Err(BuildError::NotIncreasing {
                    array: "row_indices",
                    index: p,
                    prev: row_idx[p - 1] as i64,
                    value: row_idx[p] as i64,
                });
            }
        }
    }
    let ptr = check_ptr("indptr", indptr, row_idx.len(), "indices", indices.len())?;
    let col_idx = check_indices("indices", indices, cols)?;
    check_values(values, col_idx.len())?;
    check_buckets(buckets)?;
    if group_size == 0 {
        return Err(BuildError::BadParam {
            name: "group_size",
            reason: "must be at least 1".into(),
        });
    }
    if rows > 0 {
        to_i32(rows - 1, "row index")?;
    }
    if cols > 0 {
        to_i32(cols - 1, "column index")?;
    }
    let nb = buckets.len();

    // Pass 1: real ELL rows per (relation, bucket); atomics.
    let mut counts = filled(num_rel, vec![0usize; nb], "ell3d block table")?;
    let mut needs_atomic = false;
    let mut seen_in: HashMap<usize, (usize, usize)> = HashMap::new();
    for (r, rel_counts) in counts.iter_mut().enumerate() {
        for p in rel_ptr[r]..rel_ptr[r + 1] {
            let d = ptr[p + 1] - ptr[p];
            if d == 0 {
                continue;
            }
            let (k, pieces) = place(d, buckets);
            rel_counts[k] += pieces;
            if pieces > 1 {
                needs_atomic = true;
            }
            let row = row_idx[p];
            if *seen_in.entry(row).or_insert((r, k)) != (r, k) {
                needs_atomic = true;
            }
        }
    }

    let mut blocks = Vec::with_capacity(num_rel);
    for (r, rel_counts) in counts.iter().enumerate() {
        let mut rel_blocks = Vec::with_capacity(nb);
        for (k, &m) in rel_counts.iter().enumerate() {
            let width = buckets[k];
            let n = mul(m.div_ceil(group_size), group_size, "ell3d rows")?;
            let size = mul(n, width, "ell3d block size")?;
            let mut row_indices = filled(n, 0i32, "ell3d row_indices")?;
            row_indices.truncate(0);
            rel_blocks.push(Ell3dBucket {
                relation: r,
                bucket: k,
                width,
                num_real_rows: m,
                row_indices,
                col_indices: filled(size, 0, "ell3d col_indices")?,
                values: filled(size, 0.0, "ell3d values")?,
                mask: filled(size, 0, "ell3d mask")?,
            });
        }
        blocks.push(rel_blocks);
    }

    // Pass 2: fill real rows, then pad the row indices.
    for r in 0..num_rel {
        for p in rel_ptr[r]..rel_ptr[r + 1] {
            let (lo, hi) = (ptr[p], ptr[p + 1]);
            if hi == lo {
                continue;
            }
            let (k, _) = place(hi - lo, buckets);
            let b = &mut blocks[r][k];
            let mut j = lo;
            while j < hi {
                let end = (j + b.width).min(hi);
                let base = b.row_indices.len() * b.width;
                b.row_indices.push(row_idx[p] as i32);
                for (s, q) in (j..end).enumerate() {
                    b.col_indices[base + s] = col_idx[q] as i32;
                    b.values[base + s] = values[q];
                    b.mask[base + s] = 1;
                }
                j = end;
            }
        }
        for b in &mut blocks[r] {
            let n = b.col_indices.len() / b.width;
            b.row_indices.resize(n, 0);
        }
    }

    Ok(Ell3d {
        num_rel,
        rows,
        cols,
        buckets: buckets.to_vec(),
        group_size,
        blocks,
        needs_atomic,
    })
}

/// Builds ELL3D from a rank-3 COO `(relation, row, column)`: duplicates are summed first, values
/// are converted to `f32`.
pub fn ell3d_from_coo(
    coo: &Coo,
    buckets: &[usize],
    group_size: usize,
) -> Result<Ell3d, BuildError> {
    if coo.rank() != 3 {
        return Err(BuildError::Rank {
            found: coo.rank(),
            expected: 3,
        });
    }
    coo.validate()?;
    let s = coo.summed();
    let (num_rel, rows, cols) = (coo.dims[0], coo.dims[1], coo.dims[2]);
    let mut rel_indptr = filled(num_rel.saturating_add(1), 0i64, "rel_indptr")?;
    let mut row_indices: Vec<i64> = Vec::new();
    let mut indptr = vec![0i64];
    let mut indices = Vec::with_capacity(s.nnz());
    let mut values = Vec::with_capacity(s.nnz());
    for (e, (c, &v)) in s.coords.iter().zip(&s.values).enumerate() {
        // Validated above: 0 <= c[0] < num_rel.
        let (r, i) = (c[0] as usize, c[1]);
        let new_row = e == 0 || s.coords[e - 1][..2] != c[..2];
        if new_row {
            row_indices.push(i);
            rel_indptr[r + 1] += 1;
            indptr.push(indices.len() as i64);
        }
        indices.push(c[2]);
        values.push(v as f32);
        if let Some(last) = indptr.last_mut() {
            *last = indices.len() as i64;
        }
    }
    for r in 0..num_rel {
        rel_indptr[r + 1] += rel_indptr[r];
    }
    ell3d_from_csf(
        num_rel,
        rows,
        cols,
        &rel_indptr,
        &row_indices,
        &indptr,
        &indices,
        &values,
        buckets,
        group_size,
    )
}
