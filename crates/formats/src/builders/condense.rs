//! TC-GNN condense tiling (SPEC §5.3): rows cut into tiles of `t`, each tile's used columns
//! condensed and packed `g` per group, with a `(t, g)` mask and value block per group.
//!
//! Exact semantics:
//! - Tile `T` covers rows `T*t .. min((T+1)*t, rows)`; there are `ceil(rows / t)` tiles (the last
//!   may be short: its missing rows have mask 0 everywhere).
//! - The tile's sorted, de-duplicated columns `u_0 < u_1 < ...` are packed `g` per group: group
//!   `q` of the tile holds `u_{q*g} .. u_{q*g+g-1}`; the last group is padded with column 0. A
//!   tile with no entries has no group.
//! - `group_indptr[T]` is the number of groups of tiles before `T` (length `num_tiles + 1`).
//!   `G` = total groups.
//! - `tile_indices` has shape `(G, g)`; `mask` and `values` have shape `(G, t, g)`:
//!   `mask[q][r][s] = 1` exactly when row `T*t + r` has an entry at column slot `s` of group `q`
//!   (a real slot), and `values[q][r][s]` is that entry's value (duplicates summed), else 0.

use super::{check_csr, coo_from_entries, filled, mul, to_i32, BuildError, CsrIndex};
use crate::coo::Coo;
use crate::tensor::{Tensor, TensorData};

/// The condensed (TC-GNN) tiling of a CSR matrix.
#[derive(Clone, Debug, PartialEq)]
pub struct Condensed {
    pub rows: usize,
    pub cols: usize,
    /// Rows per tile `t`.
    pub tile_rows: usize,
    /// Columns per group `g`.
    pub group_size: usize,
    /// Prefix sum of the groups per tile, length `ceil(rows / t) + 1`.
    pub group_indptr: Vec<i32>,
    /// Columns of each group, shape `(G, g)`; padding holds 0.
    pub tile_indices: Vec<i32>,
    /// Shape `(G, t, g)`: 1 where the row has an entry at that group slot.
    pub mask: Vec<u8>,
    /// Shape `(G, t, g)`: the entry values, 0 elsewhere.
    pub values: Vec<f32>,
}

impl Condensed {
    /// Number of tiles.
    pub fn num_tiles(&self) -> usize {
        self.group_indptr.len().saturating_sub(1)
    }

    /// Total number of groups `G`.
    pub fn num_groups(&self) -> usize {
        self.tile_indices
            .len()
            .checked_div(self.group_size)
            .unwrap_or(0)
    }

    /// The arrays as named host tensors: `group_indptr` `(tiles + 1,)` i32, `tile_indices`
    /// `(G, g)` i32, `mask` `(G, t, g)` u8, `values` `(G, t, g)` f32.
    pub fn tensors(&self) -> Vec<(String, Tensor)> {
        let (gs, t, g) = (self.num_groups(), self.tile_rows, self.group_size);
        let named =
            |name: &str, shape: Vec<usize>, data| (name.to_string(), Tensor { shape, data });
        vec![
            named(
                "group_indptr",
                vec![self.group_indptr.len()],
                TensorData::I32(self.group_indptr.clone()),
            ),
            named(
                "tile_indices",
                vec![gs, g],
                TensorData::I32(self.tile_indices.clone()),
            ),
            named("mask", vec![gs, t, g], TensorData::U8(self.mask.clone())),
            named(
                "values",
                vec![gs, t, g],
                TensorData::F32(self.values.clone()),
            ),
        ]
    }

    /// The original matrix (duplicate input entries come back summed).
    pub fn reassemble(&self) -> Coo {
        let (t, g) = (self.tile_rows, self.group_size);
        let mut entries = Vec::new();
        for tile in 0..self.num_tiles() {
            let (lo, hi) = (
                self.group_indptr[tile] as usize,
                self.group_indptr[tile + 1] as usize,
            );
            for q in lo..hi {
                for r in 0..t {
                    for s in 0..g {
                        let at = (q * t + r) * g + s;
                        if self.mask[at] != 0 {
                            let row = (tile * t + r) as i64;
                            let col = i64::from(self.tile_indices[q * g + s]);
                            entries.push((vec![row, col], f64::from(self.values[at])));
                        }
                    }
                }
            }
        }
        coo_from_entries(vec![self.rows, self.cols], entries)
    }
}

/// Builds the condensed tiling of a CSR matrix with tiles of `t` rows and groups of `g` columns
/// (see the module docs). `t` and `g` must be at least 1.
pub fn condense<I: CsrIndex>(
    rows: usize,
    cols: usize,
    indptr: &[I],
    indices: &[I],
    values: &[f32],
    t: usize,
    g: usize,
) -> Result<Condensed, BuildError> {
    let csr = check_csr(rows, cols, indptr, indices, Some(values))?;
    for (name, v) in [("t", t), ("g", g)] {
        if v == 0 {
            return Err(BuildError::BadParam {
                name,
                reason: "must be at least 1".into(),
            });
        }
    }
    if cols > 0 {
        to_i32(cols - 1, "column index")?;
    }
    let block = mul(t, g, "condense group block")?;
    let num_tiles = rows.div_ceil(t);

    // Pass 1: each tile's sorted unique columns, and the group prefix sum.
    let mut tile_cols: Vec<Vec<usize>> = Vec::with_capacity(num_tiles);
    let mut group_indptr = Vec::with_capacity(num_tiles + 1);
    group_indptr.push(0i32);
    let mut total = 0usize;
    for tile in 0..num_tiles {
        let (r0, r1) = (tile * t, ((tile + 1) * t).min(rows));
        let mut u: Vec<usize> = csr.indices[csr.indptr[r0]..csr.indptr[r1]].to_vec();
        u.sort_unstable();
        u.dedup();
        total += u.len().div_ceil(g);
        group_indptr.push(to_i32(total, "group count")?);
        tile_cols.push(u);
    }

    let mut tile_indices = filled(mul(total, g, "tile_indices")?, 0i32, "tile_indices")?;
    let n = mul(total, block, "condense mask")?;
    let mut mask = filled(n, 0u8, "condense mask")?;
    let mut vals = filled(n, 0f32, "condense values")?;

    // Pass 2: fill.
    for (tile, u) in tile_cols.iter().enumerate() {
        let q0 = group_indptr[tile] as usize;
        for (pos, &c) in u.iter().enumerate() {
            tile_indices[q0 * g + pos] = c as i32;
        }
        let (r0, r1) = (tile * t, ((tile + 1) * t).min(rows));
        for i in r0..r1 {
            let r = i - r0;
            let span = csr.indptr[i]..csr.indptr[i + 1];
            for (c, &v) in csr.indices[span.clone()].iter().zip(&values[span]) {
                // Present by construction: `u` holds every column of the tile.
                let Ok(pos) = u.binary_search(c) else {
                    continue;
                };
                let at = ((q0 + pos / g) * t + r) * g + pos % g;
                mask[at] = 1;
                vals[at] += v;
            }
        }
    }

    Ok(Condensed {
        rows,
        cols,
        tile_rows: t,
        group_size: g,
        group_indptr,
        tile_indices,
        mask,
        values: vals,
    })
}
