//! Uniform random sparse matrices (exact entry count) and banded matrices.

use super::{area, check_count, check_dim, coo_from_pairs, invalid, rng, value, GenError};
use crate::coo::Coo;

/// A `rows x cols` matrix with exactly `round(density * rows * cols)` entries at distinct
/// positions chosen uniformly at random; values uniform in `(0, 1]`.
pub fn uniform(rows: usize, cols: usize, density: f64, seed: u64) -> Result<Coo, GenError> {
    check_dim("rows", rows)?;
    check_dim("cols", cols)?;
    if !(0.0..=1.0).contains(&density) {
        return Err(invalid("density", format!("{density} is outside [0, 1]")));
    }
    let total = area(rows, cols)?;
    let count = ((total as f64) * density).round() as usize;
    let count = count.min(total);
    check_count(count)?;
    let mut rng = rng(seed);
    let picked = rand::seq::index::sample(&mut rng, total, count);
    let mut positions: Vec<usize> = picked.into_iter().collect();
    positions.sort_unstable();
    let pairs: Vec<(u32, u32)> = positions
        .iter()
        .map(|&p| ((p / cols) as u32, (p % cols) as u32))
        .collect();
    let values = (0..pairs.len()).map(|_| value(&mut rng)).collect();
    Ok(coo_from_pairs(rows, cols, pairs, Some(values)))
}

/// A `rows x cols` banded matrix: `(i, j)` is stored exactly when `|i - j| <= bandwidth`
/// (bandwidth 0 is the diagonal); values uniform in `(0, 1]`.
pub fn banded(rows: usize, cols: usize, bandwidth: usize, seed: u64) -> Result<Coo, GenError> {
    check_dim("rows", rows)?;
    check_dim("cols", cols)?;
    let per_row = bandwidth.saturating_mul(2).saturating_add(1).min(cols);
    check_count(rows.saturating_mul(per_row))?;
    let mut rng = rng(seed);
    let mut pairs = Vec::new();
    for i in 0..rows {
        let lo = i.saturating_sub(bandwidth);
        let hi = i.saturating_add(bandwidth).saturating_add(1).min(cols);
        for j in lo..hi {
            pairs.push((i as u32, j as u32));
        }
    }
    let values = (0..pairs.len()).map(|_| value(&mut rng)).collect();
    Ok(coo_from_pairs(rows, cols, pairs, Some(values)))
}
