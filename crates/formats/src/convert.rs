//! Conversions among COO, CSR, CSC, DCSR, BSR, ELL, n:m, CSF, ragged and dense arrays.
//!
//! CSR is the hub: every 2-D container converts to and from CSR directly, and to and from COO
//! and dense arrays (row-major `Vec<V>` with a `(rows, cols)` shape). Sparse-to-sparse paths
//! never build a dense matrix: they cost O(nnz log nnz) (sorting) or O(nnz + rows + cols), plus
//! the storage the target format inherently holds (BSR blocks, n:m groups, ELL slots).
//!
//! Zeros: a stored entry of CSR, CSC, DCSR, ELL (real slots), CSF and ragged is reported even
//! when its value is zero. BSR blocks and n:m groups cannot tell a stored zero from fill, so
//! their conversions report only non-zero values; dense arrays likewise.
//!
//! Duplicates in a COO follow a [`Duplicates`] policy. `Keep` is honoured by CSR, CSC, DCSR and
//! ELL (the result is then marked unsorted when a repeat exists); formats whose positions are
//! coordinates (dense, BSR blocks, n:m groups, CSF, ragged) add repeats up under `Keep`.

use crate::containers::bsr::block_grid;
use crate::containers::index::checked;
use crate::containers::nm::check_pattern;
use crate::containers::{
    filled, mul, strictly_sorted, Bsr, BsrPadding, Csc, Csf, CsfLevel, Csr, Dcsr, Ell, FormatError,
    Index, Nm, Ragged, Value,
};
use crate::coo::Coo;

/// What to do with repeated coordinates when building a container from COO or triplets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Duplicates {
    /// Add the repeats up into one entry (the Matrix Market convention).
    #[default]
    Sum,
    /// Keep every repeat as its own entry, in input order (see the module docs).
    Keep,
    /// Fail with [`FormatError::Duplicate`].
    Error,
}

/// A `(row, col, value)` entry.
pub type Triplet<V> = (usize, usize, V);

// ---------------------------------------------------------------- shared helpers

/// The entries of a rank-2 COO as triplets (validated, in input order).
fn coo_triplets<V: Value>(coo: &Coo) -> Result<Vec<Triplet<V>>, FormatError> {
    if coo.rank() != 2 {
        return Err(FormatError::Rank {
            expected: "2".into(),
            found: coo.rank(),
        });
    }
    coo.validate()?;
    Ok(coo
        .coords
        .iter()
        .zip(&coo.values)
        .map(|(c, &v)| (c[0] as usize, c[1] as usize, V::from_f64(v)))
        .collect())
}

/// The non-zero entries of a row-major dense array as triplets.
fn dense_triplets<V: Value>(
    rows: usize,
    cols: usize,
    dense: &[V],
) -> Result<Vec<Triplet<V>>, FormatError> {
    let n = mul(rows, cols)?;
    if dense.len() != n {
        return Err(FormatError::Length {
            array: "dense".into(),
            len: dense.len(),
            expected: n,
            why: format!("{rows} x {cols}"),
        });
    }
    Ok(dense
        .iter()
        .enumerate()
        .filter(|(_, v)| !v.is_zero())
        .map(|(k, &v)| (k / cols, k % cols, v))
        .collect())
}

/// A COO holding `entries` (in the given order).
fn triplets_to_coo<V: Value>(rows: usize, cols: usize, entries: Vec<Triplet<V>>) -> Coo {
    let mut coords = Vec::with_capacity(entries.len());
    let mut values = Vec::with_capacity(entries.len());
    for (r, c, v) in entries {
        coords.push(vec![r as i64, c as i64]);
        values.push(v.to_f64());
    }
    Coo {
        dims: vec![rows, cols],
        coords,
        values,
        field: V::FIELD,
    }
}

/// The row-major dense array of `entries` (repeats added up).
fn triplets_to_dense<V: Value>(
    rows: usize,
    cols: usize,
    entries: Vec<Triplet<V>>,
) -> Result<Vec<V>, FormatError> {
    let n = mul(rows, cols)?;
    let mut out = Vec::new();
    out.try_reserve_exact(n)
        .map_err(|_| FormatError::ShapeOverflow {
            shape: vec![rows, cols],
        })?;
    out.resize(n, V::zero());
    for (r, c, v) in entries {
        let k = r * cols + c;
        out[k] = out[k].plus(v);
    }
    Ok(out)
}

/// Sorts triplets by `(major, minor)` (stable) and applies the duplicate policy. `swap` says the
/// triplets are `(col, row, v)` (for messages). Returns the entries and whether they are
/// strictly increasing inside each major segment.
fn sort_merge<V: Value>(
    mut t: Vec<Triplet<V>>,
    dup: Duplicates,
    swap: bool,
) -> Result<(Vec<Triplet<V>>, bool), FormatError> {
    t.sort_by_key(|e| (e.0, e.1));
    let mut out: Vec<Triplet<V>> = Vec::with_capacity(t.len());
    let mut strict = true;
    for (a, b, v) in t {
        match out.last_mut() {
            Some(last) if last.0 == a && last.1 == b => match dup {
                Duplicates::Sum => last.2 = last.2.plus(v),
                Duplicates::Keep => {
                    strict = false;
                    out.push((a, b, v));
                }
                Duplicates::Error => {
                    let (r, c) = if swap { (b, a) } else { (a, b) };
                    return Err(FormatError::Duplicate {
                        coords: format!("{r}, {c}"),
                    });
                }
            },
            _ => out.push((a, b, v)),
        }
    }
    Ok((out, strict))
}

/// Compressed arrays from sorted `(major, minor, v)` entries.
type Compressed<V, I> = (Vec<I>, Vec<I>, Vec<V>);

fn compress<V: Value, I: Index>(
    major: usize,
    entries: &[Triplet<V>],
) -> Result<Compressed<V, I>, FormatError> {
    checked::<I>(entries.len(), "indptr", major)?;
    let mut counts = filled(major, 0usize)?;
    for e in entries {
        counts[e.0] += 1;
    }
    let mut indptr = Vec::with_capacity(major + 1);
    let mut acc = 0usize;
    indptr.push(checked(0, "indptr", 0)?);
    for (i, c) in counts.iter().enumerate() {
        acc += c;
        indptr.push(checked(acc, "indptr", i + 1)?);
    }
    let mut indices = Vec::with_capacity(entries.len());
    let mut values = Vec::with_capacity(entries.len());
    for (pos, e) in entries.iter().enumerate() {
        indices.push(checked(e.1, "indices", pos)?);
        values.push(e.2);
    }
    Ok((indptr, indices, values))
}

/// Checks triplet coordinates against the shape.
fn check_triplets<V>(rows: usize, cols: usize, t: &[Triplet<V>]) -> Result<(), FormatError> {
    for (pos, e) in t.iter().enumerate() {
        for (value, extent, array) in [(e.0, rows, "triplet rows"), (e.1, cols, "triplet columns")]
        {
            if value >= extent {
                return Err(FormatError::OutOfRange {
                    array: array.into(),
                    pos,
                    value: i64::try_from(value).unwrap_or(i64::MAX),
                    extent,
                });
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- CSR

impl<V: Value, I: Index> Csr<V, I> {
    /// A CSR from `(row, col, value)` triplets in any order (sorted by column in each row).
    pub fn from_triplets(
        rows: usize,
        cols: usize,
        triplets: Vec<Triplet<V>>,
        dup: Duplicates,
    ) -> Result<Self, FormatError> {
        check_triplets(rows, cols, &triplets)?;
        let (entries, strict) = sort_merge(triplets, dup, false)?;
        let (indptr, indices, values) = compress(rows, &entries)?;
        Csr::try_new(rows, cols, indptr, indices, values, strict)
    }

    /// A CSR from a rank-2 COO.
    pub fn from_coo(coo: &Coo, dup: Duplicates) -> Result<Self, FormatError> {
        Self::from_triplets(coo.dims[0], coo.dims[1], coo_triplets(coo)?, dup)
    }

    /// A CSR of the non-zeros of a row-major dense array.
    pub fn from_dense(rows: usize, cols: usize, dense: &[V]) -> Result<Self, FormatError> {
        Self::from_triplets(
            rows,
            cols,
            dense_triplets(rows, cols, dense)?,
            Duplicates::Sum,
        )
    }

    /// The stored entries in storage order.
    pub fn triplets(&self) -> Vec<Triplet<V>> {
        let mut out = Vec::with_capacity(self.nnz());
        for i in 0..self.rows() {
            if let Some((cols, vals)) = self.row(i) {
                out.extend(cols.iter().zip(vals).map(|(c, &v)| (i, c.idx(), v)));
            }
        }
        out
    }

    /// The stored entries as a COO (storage order; explicit zeros kept).
    pub fn to_coo(&self) -> Coo {
        triplets_to_coo(self.rows(), self.cols(), self.triplets())
    }

    /// The row-major dense array (repeats added up).
    pub fn to_dense(&self) -> Result<Vec<V>, FormatError> {
        triplets_to_dense(self.rows(), self.cols(), self.triplets())
    }

    /// The transpose storage: the same matrix as CSC (O(nnz + cols)).
    pub fn to_csc(&self) -> Result<Csc<V, I>, FormatError> {
        let (indptr, indices, values) = transpose(
            self.rows(),
            self.cols(),
            self.indptr(),
            self.indices(),
            self.values(),
        )?;
        let sorted = strictly_sorted(&indptr, &indices);
        Csc::try_new(self.rows(), self.cols(), indptr, indices, values, sorted)
    }
}

/// Transposes compressed storage of `major x minor` into `minor x major` (counting sort; stable,
/// so a sorted input gives sorted output).
fn transpose<V: Value, I: Index>(
    major: usize,
    minor: usize,
    indptr: &[I],
    indices: &[I],
    values: &[V],
) -> Result<Compressed<V, I>, FormatError> {
    let mut counts = filled(minor.saturating_add(1), 0usize)?;
    for x in indices {
        counts[x.idx() + 1] += 1;
    }
    for k in 1..counts.len() {
        counts[k] += counts[k - 1];
    }
    let out_indptr = counts
        .iter()
        .enumerate()
        .map(|(k, &c)| checked(c, "indptr", k))
        .collect::<Result<Vec<I>, _>>()?;
    let mut next = counts;
    let mut out_indices = vec![I::default(); indices.len()];
    let mut out_values = vec![V::zero(); values.len()];
    for i in 0..major {
        for p in indptr[i].idx()..indptr[i + 1].idx() {
            let j = indices[p].idx();
            let q = next[j];
            next[j] += 1;
            out_indices[q] = checked(i, "indices", q)?;
            out_values[q] = values[p];
        }
    }
    Ok((out_indptr, out_indices, out_values))
}

// ---------------------------------------------------------------- CSC

impl<V: Value, I: Index> Csc<V, I> {
    /// A CSC from `(row, col, value)` triplets in any order.
    pub fn from_triplets(
        rows: usize,
        cols: usize,
        triplets: Vec<Triplet<V>>,
        dup: Duplicates,
    ) -> Result<Self, FormatError> {
        check_triplets(rows, cols, &triplets)?;
        let swapped = triplets.into_iter().map(|(r, c, v)| (c, r, v)).collect();
        let (entries, strict) = sort_merge(swapped, dup, true)?;
        let (indptr, indices, values) = compress(cols, &entries)?;
        Csc::try_new(rows, cols, indptr, indices, values, strict)
    }

    /// A CSC from a rank-2 COO.
    pub fn from_coo(coo: &Coo, dup: Duplicates) -> Result<Self, FormatError> {
        Self::from_triplets(coo.dims[0], coo.dims[1], coo_triplets(coo)?, dup)
    }

    /// A CSC of the non-zeros of a row-major dense array.
    pub fn from_dense(rows: usize, cols: usize, dense: &[V]) -> Result<Self, FormatError> {
        Self::from_triplets(
            rows,
            cols,
            dense_triplets(rows, cols, dense)?,
            Duplicates::Sum,
        )
    }

    /// A CSC of a CSR (O(nnz + cols)).
    pub fn from_csr(csr: &Csr<V, I>) -> Result<Self, FormatError> {
        csr.to_csc()
    }

    /// The same matrix as CSR (O(nnz + rows)).
    pub fn to_csr(&self) -> Result<Csr<V, I>, FormatError> {
        let (indptr, indices, values) = transpose(
            self.cols(),
            self.rows(),
            self.indptr(),
            self.indices(),
            self.values(),
        )?;
        let sorted = strictly_sorted(&indptr, &indices);
        Csr::try_new(self.rows(), self.cols(), indptr, indices, values, sorted)
    }

    /// The stored entries in storage order (column by column).
    pub fn triplets(&self) -> Vec<Triplet<V>> {
        let mut out = Vec::with_capacity(self.nnz());
        for j in 0..self.cols() {
            if let Some((rows, vals)) = self.col(j) {
                out.extend(rows.iter().zip(vals).map(|(r, &v)| (r.idx(), j, v)));
            }
        }
        out
    }

    /// The stored entries as a COO (column-major order; explicit zeros kept).
    pub fn to_coo(&self) -> Coo {
        triplets_to_coo(self.rows(), self.cols(), self.triplets())
    }

    /// The row-major dense array.
    pub fn to_dense(&self) -> Result<Vec<V>, FormatError> {
        triplets_to_dense(self.rows(), self.cols(), self.triplets())
    }
}

// ---------------------------------------------------------------- DCSR

impl<V: Value, I: Index> Dcsr<V, I> {
    /// A DCSR of a CSR: its non-empty rows (O(nnz + rows)).
    pub fn from_csr(csr: &Csr<V, I>) -> Result<Self, FormatError> {
        let ip = csr.indptr();
        let mut row_indices = Vec::new();
        let mut col_indptr = vec![I::default()];
        for i in 0..csr.rows() {
            if ip[i + 1] > ip[i] {
                row_indices.push(checked(i, "row_indices", row_indices.len())?);
                col_indptr.push(ip[i + 1]);
            }
        }
        let row_indptr = vec![I::default(), checked(row_indices.len(), "row_indptr", 1)?];
        Dcsr::try_new(
            csr.rows(),
            csr.cols(),
            row_indptr,
            row_indices,
            col_indptr,
            csr.indices().to_vec(),
            csr.values().to_vec(),
            csr.is_sorted(),
        )
    }

    /// The same matrix as CSR (O(nnz + rows)).
    pub fn to_csr(&self) -> Result<Csr<V, I>, FormatError> {
        let mut indptr = filled(self.rows().saturating_add(1), I::default())?;
        for (k, r) in self.row_indices().iter().enumerate() {
            indptr[r.idx() + 1] = checked(
                self.col_indptr()[k + 1].idx() - self.col_indptr()[k].idx(),
                "indptr",
                r.idx() + 1,
            )?;
        }
        let mut acc = 0usize;
        for (k, x) in indptr.iter_mut().enumerate().skip(1) {
            acc += x.idx();
            *x = checked(acc, "indptr", k)?;
        }
        Csr::try_new(
            self.rows(),
            self.cols(),
            indptr,
            self.col_indices().to_vec(),
            self.values().to_vec(),
            self.is_sorted(),
        )
    }

    /// A DCSR from a rank-2 COO.
    pub fn from_coo(coo: &Coo, dup: Duplicates) -> Result<Self, FormatError> {
        Self::from_csr(&Csr::from_coo(coo, dup)?)
    }

    /// A DCSR of the non-zeros of a row-major dense array.
    pub fn from_dense(rows: usize, cols: usize, dense: &[V]) -> Result<Self, FormatError> {
        Self::from_csr(&Csr::from_dense(rows, cols, dense)?)
    }

    /// The stored entries in storage order.
    pub fn triplets(&self) -> Vec<Triplet<V>> {
        let mut out = Vec::with_capacity(self.nnz());
        let (ip, ci, vals) = (self.col_indptr(), self.col_indices(), self.values());
        for (k, r) in self.row_indices().iter().enumerate() {
            for p in ip[k].idx()..ip[k + 1].idx() {
                out.push((r.idx(), ci[p].idx(), vals[p]));
            }
        }
        out
    }

    /// The stored entries as a COO.
    pub fn to_coo(&self) -> Coo {
        triplets_to_coo(self.rows(), self.cols(), self.triplets())
    }

    /// The row-major dense array.
    pub fn to_dense(&self) -> Result<Vec<V>, FormatError> {
        triplets_to_dense(self.rows(), self.cols(), self.triplets())
    }
}

// ---------------------------------------------------------------- BSR

impl<V: Value, I: Index> Bsr<V, I> {
    /// A BSR with `block = (r, c)` of a CSR: every block holding at least one stored entry is
    /// stored (repeats add up inside the block). O(nnz log nnz + stored blocks * r * c).
    pub fn from_csr(
        csr: &Csr<V, I>,
        block: (usize, usize),
        padding: BsrPadding,
    ) -> Result<Self, FormatError> {
        let (rows, cols) = csr.shape();
        let (mb, nb) = block_grid(rows, cols, block, padding)?;
        let (r, c) = block;
        let rc = mul(r, c)?;
        let mut slot = filled(nb, usize::MAX)?;
        let mut indptr = vec![I::default()];
        let mut indices: Vec<I> = Vec::new();
        let mut values: Vec<V> = Vec::new();
        for br in 0..mb {
            let (r0, r1) = (br * r, (br * r).saturating_add(r).min(rows));
            let mut touched = Vec::new();
            for i in r0..r1 {
                for x in csr.row(i).map(|(cols, _)| cols).unwrap_or(&[]) {
                    let bc = x.idx() / c;
                    if slot[bc] == usize::MAX {
                        slot[bc] = 0;
                        touched.push(bc);
                    }
                }
            }
            touched.sort_unstable();
            let base = indices.len();
            for (k, &bc) in touched.iter().enumerate() {
                slot[bc] = base + k;
                indices.push(checked(bc, "indices", base + k)?);
            }
            values.resize(mul(indices.len(), rc)?, V::zero());
            for i in r0..r1 {
                if let Some((cols, vals)) = csr.row(i) {
                    for (x, &v) in cols.iter().zip(vals) {
                        let j = x.idx();
                        let pos = slot[j / c] * rc + (i - r0) * c + j % c;
                        values[pos] = values[pos].plus(v);
                    }
                }
            }
            for &bc in &touched {
                slot[bc] = usize::MAX;
            }
            indptr.push(checked(indices.len(), "indptr", br + 1)?);
        }
        Bsr::try_new(rows, cols, block, padding, indptr, indices, values)
    }

    /// A BSR from a rank-2 COO.
    pub fn from_coo(
        coo: &Coo,
        block: (usize, usize),
        padding: BsrPadding,
        dup: Duplicates,
    ) -> Result<Self, FormatError> {
        Self::from_csr(&Csr::from_coo(coo, dup)?, block, padding)
    }

    /// A BSR of the non-zeros of a row-major dense array.
    pub fn from_dense(
        rows: usize,
        cols: usize,
        dense: &[V],
        block: (usize, usize),
        padding: BsrPadding,
    ) -> Result<Self, FormatError> {
        Self::from_csr(&Csr::from_dense(rows, cols, dense)?, block, padding)
    }

    /// The non-zero values inside the matrix, row by row, columns increasing.
    pub fn triplets(&self) -> Vec<Triplet<V>> {
        let (r, c) = self.block();
        let (rows, cols) = self.shape();
        let (ip, ind, vals) = (self.indptr(), self.indices(), self.values());
        let mut out = Vec::new();
        for br in 0..self.block_shape().0 {
            for ii in 0..r {
                let i = br * r + ii;
                if i >= rows {
                    break;
                }
                for p in ip[br].idx()..ip[br + 1].idx() {
                    let bc = ind[p].idx();
                    for jj in 0..c {
                        let j = bc * c + jj;
                        let v = vals[(p * r + ii) * c + jj];
                        if j < cols && !v.is_zero() {
                            out.push((i, j, v));
                        }
                    }
                }
            }
        }
        out
    }

    /// The non-zeros as CSR.
    pub fn to_csr(&self) -> Result<Csr<V, I>, FormatError> {
        let (rows, cols) = self.shape();
        Csr::from_triplets(rows, cols, self.triplets(), Duplicates::Sum)
    }

    /// The non-zeros as a COO (row-major order).
    pub fn to_coo(&self) -> Coo {
        triplets_to_coo(self.rows(), self.cols(), self.triplets())
    }

    /// The row-major dense array.
    pub fn to_dense(&self) -> Result<Vec<V>, FormatError> {
        triplets_to_dense(self.rows(), self.cols(), self.triplets())
    }
}

// ---------------------------------------------------------------- ELL

impl<V: Value, I: Index> Ell<V, I> {
    /// An ELL of width `width` of a CSR; fails naming the first row longer than `width`.
    /// Padding slots hold column 0 and value 0.
    pub fn from_csr(csr: &Csr<V, I>, width: usize) -> Result<Self, FormatError> {
        let (rows, cols) = csr.shape();
        let slots = mul(rows, width)?;
        let mut indices = filled(slots, I::default())?;
        let mut values = filled(slots, V::zero())?;
        let mut counts = Vec::with_capacity(rows);
        for i in 0..rows {
            let (ci, vi) = csr.row(i).unwrap_or((&[], &[]));
            if ci.len() > width {
                return Err(FormatError::RowTooLong {
                    row: i,
                    len: ci.len(),
                    max: width,
                    what: "ELL width",
                });
            }
            indices[i * width..i * width + ci.len()].copy_from_slice(ci);
            values[i * width..i * width + ci.len()].copy_from_slice(vi);
            counts.push(checked(ci.len(), "counts", i)?);
        }
        Ell::try_new(
            rows,
            cols,
            width,
            indices,
            values,
            counts,
            I::default(),
            csr.is_sorted(),
        )
    }

    /// An ELL of a CSR whose width is the longest row's length.
    pub fn from_csr_padded(csr: &Csr<V, I>) -> Result<Self, FormatError> {
        let width = csr
            .indptr()
            .windows(2)
            .map(|w| w[1].idx() - w[0].idx())
            .max()
            .unwrap_or(0);
        Self::from_csr(csr, width)
    }

    /// The real entries as CSR (O(nnz + rows)).
    pub fn to_csr(&self) -> Result<Csr<V, I>, FormatError> {
        let w = self.width();
        let mut indptr = vec![I::default()];
        let mut indices = Vec::with_capacity(self.nnz());
        let mut values = Vec::with_capacity(self.nnz());
        for (i, k) in self.counts().iter().enumerate() {
            indices.extend_from_slice(&self.indices()[i * w..i * w + k.idx()]);
            values.extend_from_slice(&self.values()[i * w..i * w + k.idx()]);
            indptr.push(checked(indices.len(), "indptr", i + 1)?);
        }
        Csr::try_new(
            self.rows(),
            self.cols(),
            indptr,
            indices,
            values,
            self.is_sorted(),
        )
    }

    /// An ELL from a rank-2 COO; `width: None` takes the longest row's length.
    pub fn from_coo(coo: &Coo, width: Option<usize>, dup: Duplicates) -> Result<Self, FormatError> {
        let csr = Csr::from_coo(coo, dup)?;
        match width {
            Some(w) => Self::from_csr(&csr, w),
            None => Self::from_csr_padded(&csr),
        }
    }

    /// An ELL of the non-zeros of a dense array; `width: None` takes the longest row's length.
    pub fn from_dense(
        rows: usize,
        cols: usize,
        dense: &[V],
        width: Option<usize>,
    ) -> Result<Self, FormatError> {
        let csr = Csr::from_dense(rows, cols, dense)?;
        match width {
            Some(w) => Self::from_csr(&csr, w),
            None => Self::from_csr_padded(&csr),
        }
    }

    /// The real entries in storage order.
    pub fn triplets(&self) -> Vec<Triplet<V>> {
        let w = self.width();
        let mut out = Vec::with_capacity(self.nnz());
        for (i, k) in self.counts().iter().enumerate() {
            for p in i * w..i * w + k.idx() {
                out.push((i, self.indices()[p].idx(), self.values()[p]));
            }
        }
        out
    }

    /// The real entries as a COO.
    pub fn to_coo(&self) -> Coo {
        triplets_to_coo(self.rows(), self.cols(), self.triplets())
    }

    /// The row-major dense array.
    pub fn to_dense(&self) -> Result<Vec<V>, FormatError> {
        triplets_to_dense(self.rows(), self.cols(), self.triplets())
    }
}

// ---------------------------------------------------------------- n:m

impl<V: Value> Nm<V> {
    /// The exact n:m storage of a CSR; fails naming the first group holding more than `n`
    /// non-zeros (repeats add up first; zero values do not count).
    pub fn from_csr<I: Index>(csr: &Csr<V, I>, n: usize, m: usize) -> Result<Self, FormatError> {
        nm_from_csr(csr, n, m, false)
    }

    /// Prune-and-compress: keeps the `n` largest-magnitude non-zeros of every group of `m`
    /// columns. Ties go to the smaller column (NaN counts as the largest magnitude).
    pub fn prune_from_csr<I: Index>(
        csr: &Csr<V, I>,
        n: usize,
        m: usize,
    ) -> Result<Self, FormatError> {
        nm_from_csr(csr, n, m, true)
    }

    /// Prune-and-compress of a row-major dense array (see [`Nm::prune_from_csr`]).
    pub fn prune_from_dense(
        rows: usize,
        cols: usize,
        dense: &[V],
        n: usize,
        m: usize,
    ) -> Result<Self, FormatError> {
        nm_from_csr(&Csr::<V, i64>::from_dense(rows, cols, dense)?, n, m, true)
    }

    /// The exact n:m storage of a dense array (fails on an overfull group).
    pub fn from_dense(
        rows: usize,
        cols: usize,
        dense: &[V],
        n: usize,
        m: usize,
    ) -> Result<Self, FormatError> {
        nm_from_csr(&Csr::<V, i64>::from_dense(rows, cols, dense)?, n, m, false)
    }

    /// The exact n:m storage of a rank-2 COO.
    pub fn from_coo(coo: &Coo, n: usize, m: usize, dup: Duplicates) -> Result<Self, FormatError> {
        nm_from_csr(&Csr::<V, i64>::from_coo(coo, dup)?, n, m, false)
    }

    /// The non-zero slots, row by row, columns increasing.
    pub fn triplets(&self) -> Vec<Triplet<V>> {
        let per_row = self.groups_per_row() * self.pattern().0;
        let mut out = Vec::new();
        for (k, &v) in self.values().iter().enumerate() {
            if !v.is_zero() {
                if let Some(j) = self.column_of_slot(k) {
                    out.push((k / per_row, j, v));
                }
            }
        }
        out
    }

    /// The non-zeros as CSR.
    pub fn to_csr<I: Index>(&self) -> Result<Csr<V, I>, FormatError> {
        Csr::from_triplets(self.rows(), self.cols(), self.triplets(), Duplicates::Sum)
    }

    /// The non-zeros as a COO.
    pub fn to_coo(&self) -> Coo {
        triplets_to_coo(self.rows(), self.cols(), self.triplets())
    }

    /// The row-major dense array.
    pub fn to_dense(&self) -> Result<Vec<V>, FormatError> {
        triplets_to_dense(self.rows(), self.cols(), self.triplets())
    }
}

fn nm_from_csr<V: Value, I: Index>(
    csr: &Csr<V, I>,
    n: usize,
    m: usize,
    prune: bool,
) -> Result<Nm<V>, FormatError> {
    let (rows, cols) = csr.shape();
    let per_row = check_pattern(cols, n, m)?;
    let slots = mul(rows, per_row)?;
    let mut values = filled(slots, V::zero())?;
    // Default groups: zeros at positions 0..n (n <= m <= 256).
    let mut metadata: Vec<u8> = filled(slots, 0u8)?;
    for (k, p) in metadata.iter_mut().enumerate() {
        *p = (k % n) as u8;
    }
    let mut entries: Vec<(usize, V)> = Vec::new();
    let mut group: Vec<(usize, V)> = Vec::new();
    for i in 0..rows {
        let (ci, vi) = csr.row(i).unwrap_or((&[], &[]));
        entries.clear();
        entries.extend(ci.iter().zip(vi).map(|(c, &v)| (c.idx(), v)));
        entries.sort_by_key(|e| e.0);
        let mut k = 0;
        while k < entries.len() {
            let g = entries[k].0 / m;
            group.clear();
            while k < entries.len() && entries[k].0 / m == g {
                let (j, v) = entries[k];
                match group.last_mut() {
                    Some(last) if last.0 == j % m => last.1 = last.1.plus(v),
                    _ => group.push((j % m, v)),
                }
                k += 1;
            }
            group.retain(|e| !e.1.is_zero());
            if group.len() > n {
                if !prune {
                    return Err(FormatError::NmGroupOverfull {
                        row: i,
                        group: g,
                        lo: g * m,
                        hi: g * m + m,
                        count: group.len(),
                        n,
                        m,
                    });
                }
                group.sort_by(|a, b| {
                    b.1.magnitude()
                        .total_cmp(&a.1.magnitude())
                        .then(a.0.cmp(&b.0))
                });
                group.truncate(n);
            }
            let mut used = vec![false; m];
            for e in &group {
                used[e.0] = true;
            }
            let mut free = (0..m).filter(|&p| !used[p]);
            while group.len() < n {
                match free.next() {
                    Some(p) => group.push((p, V::zero())),
                    None => break,
                }
            }
            group.sort_by_key(|e| e.0);
            let base = i * per_row + g * n;
            for (s, &(p, v)) in group.iter().enumerate() {
                values[base + s] = v;
                metadata[base + s] = p as u8;
            }
        }
    }
    Nm::try_new(rows, cols, n, m, values, metadata)
}

// ---------------------------------------------------------------- CSF

impl<V: Value, I: Index> Csf<V, I> {
    /// A CSF of a COO of any rank >= 1 (entries sorted lexicographically; `Keep` adds repeats
    /// up). O(nnz log nnz + dims\[0\]).
    pub fn from_coo(coo: &Coo, dup: Duplicates) -> Result<Self, FormatError> {
        coo.validate()?;
        let rank = coo.rank();
        if rank == 0 {
            return Err(FormatError::Rank {
                expected: ">= 1".into(),
                found: 0,
            });
        }
        let mut order: Vec<usize> = (0..coo.nnz()).collect();
        order.sort_by(|&a, &b| coo.coords[a].cmp(&coo.coords[b]));
        // Merged entries: (index into coo, value).
        let mut merged: Vec<(usize, V)> = Vec::with_capacity(order.len());
        for &e in &order {
            let v = V::from_f64(coo.values[e]);
            match merged.last_mut() {
                Some(last) if coo.coords[last.0] == coo.coords[e] => {
                    if dup == Duplicates::Error {
                        let c: Vec<String> = coo.coords[e].iter().map(|x| x.to_string()).collect();
                        return Err(FormatError::Duplicate {
                            coords: c.join(", "),
                        });
                    }
                    last.1 = last.1.plus(v);
                }
                _ => merged.push((e, v)),
            }
        }
        let dim0 = coo.dims[0];
        let mut first: Vec<usize> = Vec::new();
        first
            .try_reserve_exact(dim0)
            .map_err(|_| FormatError::ShapeOverflow {
                shape: coo.dims.clone(),
            })?;
        first.resize(dim0, 0);
        if rank == 1 {
            let mut values = filled(dim0, V::zero())?;
            for &(e, v) in &merged {
                let i = coo.coords[e][0] as usize;
                values[i] = values[i].plus(v);
            }
            return Csf::try_new(coo.dims.clone(), Vec::new(), values);
        }
        // counts[k] = children per element of level k (k in 0..rank-1); idx[k] = indices of
        // level k + 1.
        let mut counts: Vec<Vec<usize>> = vec![Vec::new(); rank - 1];
        counts[0] = first;
        let mut idx: Vec<Vec<I>> = vec![Vec::new(); rank - 1];
        let mut values = Vec::with_capacity(merged.len());
        let mut prev: Option<&[i64]> = None;
        for &(e, v) in &merged {
            let c = coo.coords[e].as_slice();
            let d = prev.map_or(0, |p| p.iter().zip(c).take_while(|(a, b)| a == b).count());
            for k in d.max(1)..rank {
                let parent = if k == 1 {
                    c[0] as usize
                } else {
                    idx[k - 2].len() - 1
                };
                counts[k - 1][parent] += 1;
                let pos = idx[k - 1].len();
                idx[k - 1].push(checked(c[k] as usize, &format!("indices_{k}"), pos)?);
                if k < rank - 1 {
                    counts[k].push(0);
                }
            }
            values.push(v);
            prev = Some(c);
        }
        let mut levels = Vec::with_capacity(rank - 1);
        for (k, (cnt, indices)) in counts.into_iter().zip(idx).enumerate() {
            let name = format!("indptr_{}", k + 1);
            let mut indptr = Vec::with_capacity(cnt.len() + 1);
            indptr.push(I::default());
            let mut acc = 0usize;
            for (p, c) in cnt.iter().enumerate() {
                acc += c;
                indptr.push(checked(acc, &name, p + 1)?);
            }
            levels.push(CsfLevel { indptr, indices });
        }
        Csf::try_new(coo.dims.clone(), levels, values)
    }

    /// The stored entries as a COO in lexicographic order (explicit zeros kept, except for a
    /// rank-1 CSF, whose dense values report only non-zeros).
    pub fn to_coo(&self) -> Coo {
        let mut coo = Coo::empty(self.dims().to_vec());
        coo.field = V::FIELD;
        if self.rank() == 1 {
            for (i, &v) in self.values().iter().enumerate() {
                if !v.is_zero() {
                    coo.coords.push(vec![i as i64]);
                    coo.values.push(v.to_f64());
                }
            }
            return coo;
        }
        let mut prefix = Vec::with_capacity(self.rank());
        for i in 0..self.dims()[0] {
            prefix.push(i as i64);
            let ip = &self.levels()[0].indptr;
            self.walk(1, ip[i].idx(), ip[i + 1].idx(), &mut prefix, &mut coo);
            prefix.pop();
        }
        coo
    }

    fn walk(&self, k: usize, lo: usize, hi: usize, prefix: &mut Vec<i64>, out: &mut Coo) {
        let level = &self.levels()[k - 1];
        for p in lo..hi {
            prefix.push(level.indices[p].to_i64());
            if k == self.rank() - 1 {
                out.coords.push(prefix.clone());
                out.values.push(self.values()[p].to_f64());
            } else {
                let ip = &self.levels()[k].indptr;
                self.walk(k + 1, ip[p].idx(), ip[p + 1].idx(), prefix, out);
            }
            prefix.pop();
        }
    }
}

// ---------------------------------------------------------------- ragged

impl<V: Value, I: Index> Ragged<V, I> {
    /// A ragged array of a rank-2 COO: row `i` gets length (its largest column + 1), and the
    /// columns below that which the COO does not hold become explicit zeros.
    pub fn from_coo(coo: &Coo, dup: Duplicates) -> Result<Self, FormatError> {
        let csr = Csr::<V, i64>::from_coo(coo, dup)?;
        Self::from_sorted_rows(&csr)
    }

    /// A ragged array of a dense array: row `i` keeps its columns up to its last non-zero.
    pub fn from_dense(rows: usize, cols: usize, dense: &[V]) -> Result<Self, FormatError> {
        Self::from_sorted_rows(&Csr::<V, i64>::from_dense(rows, cols, dense)?)
    }

    fn from_sorted_rows<J: Index>(csr: &Csr<V, J>) -> Result<Self, FormatError> {
        let mut indptr = vec![I::default()];
        let mut values = Vec::new();
        for i in 0..csr.rows() {
            let (ci, vi) = csr.row(i).unwrap_or((&[], &[]));
            let len = ci.last().map_or(0, |c| c.idx() + 1);
            let base = values.len();
            values
                .try_reserve(len)
                .map_err(|_| FormatError::ShapeOverflow {
                    shape: vec![csr.rows(), csr.cols()],
                })?;
            values.resize(base + len, V::zero());
            for (c, &v) in ci.iter().zip(vi) {
                values[base + c.idx()] = values[base + c.idx()].plus(v);
            }
            indptr.push(checked(values.len(), "indptr", i + 1)?);
        }
        Ragged::try_new(csr.rows(), csr.cols(), indptr, values)
    }

    /// The stored values (zeros included) as `(row, col, value)`.
    pub fn triplets(&self) -> Vec<Triplet<V>> {
        let mut out = Vec::with_capacity(self.nnz());
        for i in 0..self.rows() {
            if let Some(vals) = self.row(i) {
                out.extend(vals.iter().enumerate().map(|(j, &v)| (i, j, v)));
            }
        }
        out
    }

    /// The stored values as a COO (zeros included).
    pub fn to_coo(&self) -> Coo {
        triplets_to_coo(self.rows(), self.cols(), self.triplets())
    }

    /// The row-major dense `rows x cols` array.
    pub fn to_dense(&self) -> Result<Vec<V>, FormatError> {
        triplets_to_dense(self.rows(), self.cols(), self.triplets())
    }
}
