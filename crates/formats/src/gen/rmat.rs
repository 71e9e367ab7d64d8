//! Graph500 R-MAT graphs (directed, deduplicated, optional vertex permutation).
//!
//! Semantics follow `bench/peers.py --gen-rmat` (the script that makes the peers' R-MAT inputs):
//! `scale = ceil(log2(max(nodes, 2)))` levels of quadrant choices with probabilities
//! `a, b, c, d = 1 - a - b - c`; samples whose row or column is `>= nodes` are rejected;
//! duplicates are removed and rounds of `1.6 * missing + 1000` fresh samples are drawn until
//! `edges` distinct edges exist; a random subset of exactly `edges` of them is kept; then, when
//! asked, vertex ids go through one random permutation. Differences from the script: it always
//! drops self loops and always permutes (here both are options: `self_loops = false`,
//! `permute = true` give its semantics), its random stream is numpy's PCG64 (here ChaCha8, so
//! the graphs are alike in size and degree distribution but not identical), and it writes
//! entries in scipy's order (here sorted by row, then column).

use rand::seq::SliceRandom;
use rand::Rng;

use super::{check_count, check_dim, coo_from_pairs, invalid, rng, GenError};
use crate::coo::Coo;

/// Parameters of [`rmat`].
#[derive(Clone, Debug, PartialEq)]
pub struct RmatParams {
    /// Number of vertices (the matrix is `nodes x nodes`).
    pub nodes: usize,
    /// Number of distinct directed edges to produce.
    pub edges: usize,
    /// Quadrant probabilities (Graph500: 0.57, 0.19, 0.19; `d = 1 - a - b - c`).
    pub a: f64,
    pub b: f64,
    pub c: f64,
    /// Relabel the vertices with a random permutation.
    pub permute: bool,
    /// Keep edges `(v, v)`.
    pub self_loops: bool,
}

impl RmatParams {
    /// Graph500 probabilities, self loops kept, no permutation.
    pub fn new(nodes: usize, edges: usize) -> RmatParams {
        RmatParams {
            nodes,
            edges,
            a: 0.57,
            b: 0.19,
            c: 0.19,
            permute: false,
            self_loops: true,
        }
    }
}

/// Gives up when this many sampling rounds did not reach the edge count.
const MAX_ROUNDS: usize = 64;

/// An R-MAT graph as a `nodes x nodes` pattern COO with exactly `params.edges` distinct entries.
pub fn rmat(params: &RmatParams, seed: u64) -> Result<Coo, GenError> {
    let RmatParams {
        nodes: n,
        edges,
        a,
        b,
        c,
        ..
    } = *params;
    check_dim("nodes", n)?;
    check_count(edges)?;
    for (name, p) in [("a", a), ("b", b), ("c", c)] {
        if !(0.0..=1.0).contains(&p) {
            return Err(invalid(name, format!("probability {p} is outside [0, 1]")));
        }
    }
    if a + b + c > 1.0 + 1e-12 {
        return Err(invalid("c", format!("a + b + c = {} exceeds 1", a + b + c)));
    }
    let n64 = n as u64;
    let possible = if params.self_loops {
        n64 * n64
    } else {
        n64 * n64.saturating_sub(1)
    };
    if edges as u64 > possible {
        return Err(invalid(
            "edges",
            format!(
                "{edges} distinct edges do not fit in a graph of {n} nodes ({possible} possible)"
            ),
        ));
    }
    let mut rng = rng(seed);
    let scale = usize::BITS - (n.max(2) - 1).leading_zeros();
    let (ab, abc) = (a + b, a + b + c);
    let mut keys: Vec<u64> = Vec::new();
    let mut rounds = 0;
    while keys.len() < edges {
        if rounds == MAX_ROUNDS {
            return Err(GenError::Saturated {
                wanted: edges,
                found: keys.len(),
                rounds,
            });
        }
        rounds += 1;
        let m = (edges - keys.len()) * 8 / 5 + 1000;
        keys.reserve(m);
        for _ in 0..m {
            let (mut r, mut q) = (0u64, 0u64);
            for lvl in 0..scale {
                let u: f64 = rng.random();
                let row_bit = u >= ab;
                let col_bit = (u >= a && u < ab) || u >= abc;
                r |= (row_bit as u64) << lvl;
                q |= (col_bit as u64) << lvl;
            }
            if r < n64 && q < n64 && (params.self_loops || r != q) {
                keys.push(r * n64 + q);
            }
        }
        keys.sort_unstable();
        keys.dedup();
    }
    keys.shuffle(&mut rng);
    keys.truncate(edges);
    let perm: Vec<u32> = if params.permute {
        let mut p: Vec<u32> = (0..n as u32).collect();
        p.shuffle(&mut rng);
        p
    } else {
        (0..n as u32).collect()
    };
    let pairs = keys
        .iter()
        .map(|&k| (perm[(k / n64) as usize], perm[(k % n64) as usize]))
        .collect();
    Ok(coo_from_pairs(n, n, pairs, None))
}
