//! Block-sparse random matrices: a random subset of the `r x c` blocks is stored in full.

use super::{area, check_count, check_dim, coo_from_pairs, invalid, rng, value, GenError};
use crate::coo::Coo;

/// A `rows x cols` matrix cut into `block_rows x block_cols` blocks (the last block row and
/// column are clipped when the sizes do not divide); exactly `round(density * blocks)` distinct
/// blocks, chosen uniformly, hold every one of their elements; values uniform in `(0, 1]`.
pub fn block_sparse(
    rows: usize,
    cols: usize,
    block_rows: usize,
    block_cols: usize,
    density: f64,
    seed: u64,
) -> Result<Coo, GenError> {
    check_dim("rows", rows)?;
    check_dim("cols", cols)?;
    if block_rows == 0 {
        return Err(invalid("block", "the block height must be at least 1"));
    }
    if block_cols == 0 {
        return Err(invalid("block", "the block width must be at least 1"));
    }
    if !(0.0..=1.0).contains(&density) {
        return Err(invalid("density", format!("{density} is outside [0, 1]")));
    }
    let (mb, nb) = (rows.div_ceil(block_rows), cols.div_ceil(block_cols));
    let blocks = area(mb, nb)?;
    let count = (((blocks as f64) * density).round() as usize).min(blocks);
    check_count(count.saturating_mul(block_rows.saturating_mul(block_cols)))?;
    let mut rng = rng(seed);
    let mut chosen: Vec<usize> = rand::seq::index::sample(&mut rng, blocks, count)
        .into_iter()
        .collect();
    chosen.sort_unstable();
    let mut pairs = Vec::new();
    for b in chosen {
        let (bi, bj) = (b / nb, b % nb);
        let (r0, c0) = (bi * block_rows, bj * block_cols);
        for i in r0..(r0 + block_rows).min(rows) {
            for j in c0..(c0 + block_cols).min(cols) {
                pairs.push((i as u32, j as u32));
            }
        }
    }
    let values = (0..pairs.len()).map(|_| value(&mut rng)).collect();
    Ok(coo_from_pairs(rows, cols, pairs, Some(values)))
}
