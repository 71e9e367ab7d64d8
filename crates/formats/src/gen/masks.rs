//! Attention and structured-sparsity masks: Longformer (sliding window + global tokens),
//! Pixelfly (flat block butterfly + global stripes) and random n:m (2:4) masks.

use rand::seq::index::sample;

use super::{area, check_count, check_dim, coo_from_pairs, invalid, rng, GenError};
use crate::coo::Coo;

/// A `seq_len x seq_len` Longformer-style mask: query `i` attends to key `j` when
/// `|i - j| <= window` (a sliding window of `2 * window + 1` keys) or when either `i` or `j` is
/// one of the first `global` tokens (global tokens attend everywhere and are attended by all).
/// Symmetric.
pub fn longformer(seq_len: usize, window: usize, global: usize) -> Result<Coo, GenError> {
    check_dim("seq-len", seq_len)?;
    if global > seq_len {
        return Err(invalid(
            "global",
            format!("{global} global tokens exceed the sequence length {seq_len}"),
        ));
    }
    let band = window.saturating_mul(2).saturating_add(1).min(seq_len);
    check_count(
        seq_len
            .saturating_mul(band)
            .saturating_add(global.saturating_mul(seq_len).saturating_mul(2)),
    )?;
    let mut pairs = Vec::new();
    for i in 0..seq_len {
        if i < global {
            pairs.extend((0..seq_len).map(|j| (i as u32, j as u32)));
            continue;
        }
        let lo = i.saturating_sub(window);
        let hi = i.saturating_add(window).saturating_add(1).min(seq_len);
        // Global columns left of the window, then the window.
        pairs.extend((0..global.min(lo)).map(|j| (i as u32, j as u32)));
        pairs.extend((lo..hi).map(|j| (i as u32, j as u32)));
    }
    Ok(coo_from_pairs(seq_len, seq_len, pairs, None))
}

/// A `n x n` Pixelfly-style mask made of `block x block` blocks (`n` must be a multiple of
/// `block`): block `(I, J)` is stored when `I == J` or `I xor J` is a power of two (the flat
/// block butterfly: the union of the supports of all butterfly factors), or when `I` or `J` is
/// below `global_blocks` (the global stripes standing for the low-rank term). Symmetric.
pub fn pixelfly(n: usize, block: usize, global_blocks: usize) -> Result<Coo, GenError> {
    check_dim("size", n)?;
    if block == 0 {
        return Err(invalid("block", "the block size must be at least 1"));
    }
    if n / block * block != n {
        return Err(invalid(
            "block",
            format!("the block size {block} does not divide the size {n}"),
        ));
    }
    let nb = n / block;
    if global_blocks > nb {
        return Err(invalid(
            "global",
            format!("{global_blocks} global blocks exceed the {nb} block rows"),
        ));
    }
    let keep = |bi: usize, bj: usize| {
        bi == bj || (bi ^ bj).is_power_of_two() || bi < global_blocks || bj < global_blocks
    };
    let mut count = 0usize;
    for bi in 0..nb {
        count += (0..nb).filter(|&bj| keep(bi, bj)).count();
    }
    check_count(count.saturating_mul(area(block, block)?))?;
    let mut pairs = Vec::with_capacity(count * block * block);
    for i in 0..n {
        let bi = i / block;
        for bj in (0..nb).filter(|&bj| keep(bi, bj)) {
            pairs.extend((bj * block..(bj + 1) * block).map(|j| (i as u32, j as u32)));
        }
    }
    Ok(coo_from_pairs(n, n, pairs, None))
}

/// A random `n:m` mask: every row is cut into groups of `m` consecutive columns (`cols` must be a
/// multiple of `m`) and exactly `n` positions of each group, chosen uniformly, are kept.
pub fn mask_nm(rows: usize, cols: usize, n: usize, m: usize, seed: u64) -> Result<Coo, GenError> {
    check_dim("rows", rows)?;
    check_dim("cols", cols)?;
    if m == 0 {
        return Err(invalid("m", "the group size must be at least 1"));
    }
    if n > m {
        return Err(invalid("n", format!("{n} kept of groups of {m}")));
    }
    if cols / m * m != cols {
        return Err(invalid(
            "cols",
            format!("{cols} columns do not split into groups of {m}"),
        ));
    }
    check_count(area(rows, cols)? / m * n)?;
    let mut rng = rng(seed);
    let mut pairs = Vec::with_capacity(rows * (cols / m) * n);
    for i in 0..rows {
        for g in 0..cols / m {
            let mut kept: Vec<usize> = sample(&mut rng, m, n).into_iter().collect();
            kept.sort_unstable();
            pairs.extend(kept.into_iter().map(|k| (i as u32, (g * m + k) as u32)));
        }
    }
    Ok(coo_from_pairs(rows, cols, pairs, None))
}

/// A random 2:4 mask (`cols` a multiple of 4): two of every four consecutive columns per row.
pub fn mask_2_4(rows: usize, cols: usize, seed: u64) -> Result<Coo, GenError> {
    mask_nm(rows, cols, 2, 4, seed)
}
