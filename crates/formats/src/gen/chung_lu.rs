//! Chung–Lu random graphs with a power-law expected degree sequence (undirected, symmetric).
//!
//! Vertex `i` (0-based) gets the weight `w_i = (i + 1)^(-1 / (exponent - 1))`, scaled so that the
//! weights sum to `nodes * avg_degree`; the degree distribution of such weights follows
//! `P(deg = k) ~ k^(-exponent)`. Edges are drawn the "fast Chung–Lu" way: both endpoints of an
//! edge are picked independently with probability proportional to the weights, self loops and
//! repeated edges are discarded, and draws continue until `round(nodes * avg_degree / 2)`
//! distinct undirected edges exist. Both directions of every edge are stored, so the result is
//! symmetric with mean degree close to `avg_degree` and no diagonal.

use rand::Rng;

use super::{check_count, check_dim, coo_from_pairs, invalid, rng, GenError};
use crate::coo::Coo;

const MAX_ROUNDS: usize = 64;

/// The normalised Chung–Lu weights (expected degrees) of [`chung_lu`]'s vertices.
pub fn chung_lu_weights(nodes: usize, exponent: f64, avg_degree: f64) -> Vec<f64> {
    let p = -1.0 / (exponent - 1.0);
    let raw: Vec<f64> = (0..nodes).map(|i| ((i + 1) as f64).powf(p)).collect();
    let sum: f64 = raw.iter().sum();
    let scale = if sum > 0.0 {
        nodes as f64 * avg_degree / sum
    } else {
        0.0
    };
    raw.into_iter().map(|w| w * scale).collect()
}

/// A symmetric pattern COO of a power-law graph on `nodes` vertices.
/// `exponent` must be `> 1` (2 to 3 is typical), `avg_degree` in `[0, nodes - 1]`.
pub fn chung_lu(nodes: usize, exponent: f64, avg_degree: f64, seed: u64) -> Result<Coo, GenError> {
    check_dim("nodes", nodes)?;
    if !(exponent > 1.0 && exponent.is_finite()) {
        return Err(invalid(
            "exponent",
            format!("{exponent} must be a finite number > 1"),
        ));
    }
    let max_deg = nodes.saturating_sub(1) as f64;
    if !(avg_degree >= 0.0 && avg_degree <= max_deg) {
        return Err(invalid(
            "avg-degree",
            format!("{avg_degree} must lie in [0, {max_deg}] for {nodes} nodes"),
        ));
    }
    let target = (nodes as f64 * avg_degree / 2.0).round() as usize;
    check_count(target.saturating_mul(2))?;
    let weights = chung_lu_weights(nodes, exponent, avg_degree);
    let mut cumulative = Vec::with_capacity(nodes);
    let mut acc = 0.0;
    for w in &weights {
        acc += w;
        cumulative.push(acc);
    }
    let total = acc;
    let mut rng = rng(seed);
    let draw = |rng: &mut rand_chacha::ChaCha8Rng| -> u64 {
        let u = rng.random::<f64>() * total;
        cumulative.partition_point(|&c| c <= u).min(nodes - 1) as u64
    };
    let n64 = nodes as u64;
    let mut keys: Vec<u64> = Vec::new();
    let mut rounds = 0;
    while keys.len() < target {
        if rounds == MAX_ROUNDS {
            return Err(GenError::Saturated {
                wanted: target,
                found: keys.len(),
                rounds,
            });
        }
        rounds += 1;
        let m = (target - keys.len()) * 5 / 4 + 100;
        for _ in 0..m {
            let (u, v) = (draw(&mut rng), draw(&mut rng));
            if u != v {
                keys.push(u.min(v) * n64 + u.max(v));
            }
        }
        keys.sort_unstable();
        keys.dedup();
    }
    // Keep a random subset of exactly `target` edges (a prefix would bias towards low ids).
    if keys.len() > target {
        use rand::seq::SliceRandom;
        keys.shuffle(&mut rng);
        keys.truncate(target);
    }
    let mut pairs = Vec::with_capacity(2 * keys.len());
    for k in keys {
        let (u, v) = ((k / n64) as u32, (k % n64) as u32);
        pairs.push((u, v));
        pairs.push((v, u));
    }
    Ok(coo_from_pairs(nodes, nodes, pairs, None))
}
