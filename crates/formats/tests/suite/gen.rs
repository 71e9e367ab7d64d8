//! Structural tests of the seeded generators: sizes, symmetry, degree distributions,
//! determinism by seed, absence of duplicates, parameter errors.

use std::collections::HashSet;

use sparsetir_formats::gen::{
    banded, block_sparse, chung_lu, chung_lu_weights, longformer, mask_2_4, mask_nm, pixelfly,
    rmat, uniform, GenError, RmatParams,
};
use sparsetir_formats::{Coo, Field};

fn pairs(coo: &Coo) -> Vec<(i64, i64)> {
    coo.coords.iter().map(|c| (c[0], c[1])).collect()
}

/// Valid, sorted, duplicate-free.
fn check_clean(coo: &Coo) {
    coo.validate().expect("valid COO");
    assert_eq!(coo.rank(), 2);
    let p = pairs(coo);
    for w in p.windows(2) {
        assert!(
            w[0] < w[1],
            "not strictly sorted: {:?} then {:?}",
            w[0],
            w[1]
        );
    }
}

fn set(coo: &Coo) -> HashSet<(i64, i64)> {
    pairs(coo).into_iter().collect()
}

fn is_symmetric(coo: &Coo) -> bool {
    let s = set(coo);
    s.iter().all(|&(i, j)| s.contains(&(j, i)))
}

fn row_degrees(coo: &Coo) -> Vec<usize> {
    let mut d = vec![0; coo.dims[0]];
    for c in &coo.coords {
        d[c[0] as usize] += 1;
    }
    d
}

#[test]
fn rmat_sizes_dedup_determinism() {
    let p = RmatParams::new(1000, 8000);
    let g = rmat(&p, 7).unwrap();
    check_clean(&g);
    assert_eq!(g.dims, vec![1000, 1000]);
    assert_eq!(g.nnz(), 8000);
    assert_eq!(g.field, Field::Pattern);
    assert!(g.values.iter().all(|&v| v == 1.0));
    assert_eq!(g, rmat(&p, 7).unwrap());
    assert_ne!(g, rmat(&p, 8).unwrap());
}

#[test]
fn rmat_is_skewed_towards_low_ids_without_permutation() {
    // Without permutation, vertex 0 is the corner every level favours (a = 0.57 > b, c > d):
    // P(row bit = 0) = a + b = 0.76 per level, so rows with few 1 bits dominate.
    let g = rmat(&RmatParams::new(1024, 10000), 1).unwrap();
    let d = row_degrees(&g);
    let low: usize = d[..32].iter().sum();
    let high: usize = d[992..].iter().sum();
    assert!(low > 10 * high.max(1), "low {low} high {high}");
    let max = *d.iter().max().unwrap();
    let mean = 10000.0 / 1024.0;
    assert!(max as f64 > 8.0 * mean, "max degree {max} not heavy-tailed");
}

#[test]
fn rmat_self_loops_and_permutation() {
    let mut p = RmatParams::new(256, 3000);
    p.self_loops = false;
    let g = rmat(&p, 3).unwrap();
    assert!(g.coords.iter().all(|c| c[0] != c[1]));
    assert_eq!(g.nnz(), 3000);
    // Permuting relabels vertices: the sorted degree sequence is unchanged in distribution but
    // vertex 0 is no longer the hub; check it is a relabelling of the same size and that the
    // hub moved for this seed.
    p.permute = true;
    let h = rmat(&p, 3).unwrap();
    check_clean(&h);
    assert_eq!(h.nnz(), 3000);
    assert!(h.coords.iter().all(|c| c[0] != c[1]));
    let dg = row_degrees(&g);
    let dh = row_degrees(&h);
    let argmax = |d: &[usize]| {
        (0..d.len())
            .max_by_key(|&i| (d[i], std::cmp::Reverse(i)))
            .unwrap()
    };
    assert_eq!(argmax(&dg), 0);
    assert_ne!(argmax(&dh), 0);
}

#[test]
fn rmat_full_and_impossible() {
    // Every edge of a 4-node graph with self loops.
    let g = rmat(&RmatParams::new(4, 16), 0).unwrap();
    assert_eq!(g.nnz(), 16);
    let mut p = RmatParams::new(4, 13);
    p.self_loops = false;
    assert!(matches!(
        rmat(&p, 0),
        Err(GenError::Invalid { name: "edges", .. })
    ));
    let mut q = RmatParams::new(10, 5);
    q.a = 0.9;
    assert!(matches!(rmat(&q, 0), Err(GenError::Invalid { .. })));
    assert_eq!(rmat(&RmatParams::new(0, 0), 0).unwrap().nnz(), 0);
}

#[test]
fn chung_lu_power_law() {
    let (n, gamma, d) = (20000, 2.5, 10.0);
    let g = chung_lu(n, gamma, d, 11).unwrap();
    check_clean(&g);
    assert!(is_symmetric(&g));
    assert!(g.coords.iter().all(|c| c[0] != c[1]));
    // Exactly round(n * d / 2) undirected edges, both directions stored.
    assert_eq!(g.nnz(), 2 * (n as f64 * d / 2.0).round() as usize);
    let deg = row_degrees(&g);
    // Expected degrees computed here from the formula w_i ∝ (i + 1)^(-1/(gamma - 1)).
    let w: Vec<f64> = (0..n)
        .map(|i| ((i + 1) as f64).powf(-1.0 / (gamma - 1.0)))
        .collect();
    let wsum: f64 = w.iter().sum();
    let lib_w = chung_lu_weights(n, gamma, d);
    assert!((lib_w[0] - w[0] * n as f64 * d / wsum).abs() < 1e-6 * lib_w[0]);
    // Degree share of vertices 100..2000 (hubs excluded: repeated edges cap them) against the
    // weight share, and of the low-weight half.
    let share = |r: std::ops::Range<usize>| -> (f64, f64) {
        let dg: usize = deg[r.clone()].iter().sum();
        let ws: f64 = w[r].iter().sum();
        (dg as f64 / g.nnz() as f64, ws / wsum)
    };
    for r in [100..2000, 10000..20000] {
        let (got, want) = share(r.clone());
        assert!(
            (got - want).abs() < 0.15 * want,
            "{r:?}: degree share {got}, weight share {want}"
        );
    }
    // Heavy tail: the hub has far more than the mean degree.
    assert!(deg[0] as f64 > 20.0 * d);
    assert_eq!(g, chung_lu(n, gamma, d, 11).unwrap());
}

#[test]
fn chung_lu_rejects_bad_parameters() {
    assert!(matches!(
        chung_lu(10, 1.0, 2.0, 0),
        Err(GenError::Invalid {
            name: "exponent",
            ..
        })
    ));
    assert!(matches!(
        chung_lu(10, 2.5, 10.0, 0),
        Err(GenError::Invalid {
            name: "avg-degree",
            ..
        })
    ));
    assert!(matches!(
        chung_lu(10, f64::NAN, 2.0, 0),
        Err(GenError::Invalid { .. })
    ));
    assert_eq!(chung_lu(0, 2.5, 0.0, 0).unwrap().nnz(), 0);
}

#[test]
fn uniform_exact_count_and_spread() {
    let g = uniform(200, 300, 0.05, 5).unwrap();
    check_clean(&g);
    assert_eq!(g.nnz(), 3000);
    assert_eq!(g.field, Field::Real);
    assert!(g.values.iter().all(|&v| v > 0.0 && v <= 1.0));
    // Row counts are binomial-ish around 15: no row may hold a big share.
    let deg = row_degrees(&g);
    assert!(*deg.iter().max().unwrap() < 45);
    // Each quadrant gets about a quarter.
    let q = g.coords.iter().filter(|c| c[0] < 100 && c[1] < 150).count();
    assert!((600..900).contains(&q), "quadrant count {q}");
    assert_eq!(g, uniform(200, 300, 0.05, 5).unwrap());
    assert_eq!(uniform(3, 4, 1.0, 0).unwrap().nnz(), 12);
    assert_eq!(uniform(0, 0, 0.5, 0).unwrap().nnz(), 0);
    assert!(matches!(
        uniform(3, 3, 1.5, 0),
        Err(GenError::Invalid {
            name: "density",
            ..
        })
    ));
}

#[test]
fn banded_structure() {
    let g = banded(6, 8, 2, 0).unwrap();
    check_clean(&g);
    let want: HashSet<(i64, i64)> = (0..6i64)
        .flat_map(|i| {
            (0..8i64)
                .filter(move |j| (i - j).abs() <= 2)
                .map(move |j| (i, j))
        })
        .collect();
    assert_eq!(set(&g), want);
    let sq = banded(10, 10, 1, 4).unwrap();
    assert!(is_symmetric(&sq));
    assert_eq!(sq.nnz(), 10 + 2 * 9);
}

#[test]
fn block_sparse_structure() {
    let (r, c, br, bc) = (10, 12, 2, 3);
    let g = block_sparse(r, c, br, bc, 0.4, 9).unwrap();
    check_clean(&g);
    // 5 x 4 = 20 blocks, round(0.4 * 20) = 8 of them, each full (sizes divide).
    assert_eq!(g.nnz(), 8 * br * bc);
    let s = set(&g);
    let mut blocks = HashSet::new();
    for &(i, j) in &s {
        let (bi, bj) = (i / br as i64, j / bc as i64);
        blocks.insert((bi, bj));
        for di in 0..br as i64 {
            for dj in 0..bc as i64 {
                assert!(s.contains(&(bi * br as i64 + di, bj * bc as i64 + dj)));
            }
        }
    }
    assert_eq!(blocks.len(), 8);
    // Clipped edge blocks: 5 x 5 with 2 x 2 blocks, everything kept.
    assert_eq!(block_sparse(5, 5, 2, 2, 1.0, 0).unwrap().nnz(), 25);
    assert!(matches!(
        block_sparse(4, 4, 0, 2, 0.5, 0),
        Err(GenError::Invalid { name: "block", .. })
    ));
}

#[test]
fn longformer_mask() {
    let (n, w, glob) = (16, 2, 2);
    let g = longformer(n, w, glob).unwrap();
    check_clean(&g);
    assert!(is_symmetric(&g));
    let want: HashSet<(i64, i64)> = (0..n as i64)
        .flat_map(|i| (0..n as i64).map(move |j| (i, j)))
        .filter(|&(i, j)| (i - j).abs() <= w as i64 || i < glob as i64 || j < glob as i64)
        .collect();
    assert_eq!(set(&g), want);
    assert_eq!(g.field, Field::Pattern);
    assert!(matches!(
        longformer(4, 1, 5),
        Err(GenError::Invalid { name: "global", .. })
    ));
}

#[test]
fn pixelfly_mask() {
    let (n, b, glob) = (32, 4, 1);
    let g = pixelfly(n, b, glob).unwrap();
    check_clean(&g);
    assert!(is_symmetric(&g));
    let nb = n / b;
    let mut want = HashSet::new();
    for i in 0..n {
        for j in 0..n {
            let (bi, bj) = (i / b, j / b);
            let x = bi ^ bj;
            // Power of two, or zero, by counting bits.
            if x.count_ones() <= 1 || bi < glob || bj < glob {
                want.insert((i as i64, j as i64));
            }
        }
    }
    assert_eq!(set(&g), want);
    // Without global blocks: each block row has 1 + log2(nb) blocks when nb is a power of two.
    let h = pixelfly(n, b, 0).unwrap();
    assert_eq!(h.nnz(), nb * (1 + 3) * b * b);
    assert!(matches!(
        pixelfly(10, 4, 0),
        Err(GenError::Invalid { name: "block", .. })
    ));
}

#[test]
fn mask_2_4_groups() {
    let g = mask_2_4(7, 16, 3).unwrap();
    check_clean(&g);
    assert_eq!(g.nnz(), 7 * 16 / 2);
    let mut groups = std::collections::HashMap::new();
    for (i, j) in pairs(&g) {
        *groups.entry((i, j / 4)).or_insert(0) += 1;
    }
    assert_eq!(groups.len(), 7 * 4);
    assert!(groups.values().all(|&k| k == 2));
    // All six patterns of a group show up over many groups.
    let big = mask_2_4(64, 64, 1).unwrap();
    let mut patterns = HashSet::new();
    let s = set(&big);
    for i in 0..64i64 {
        for gi in 0..16i64 {
            let bits: Vec<bool> = (0..4).map(|k| s.contains(&(i, 4 * gi + k))).collect();
            patterns.insert(bits);
        }
    }
    assert_eq!(patterns.len(), 6);
    assert_ne!(g, mask_2_4(7, 16, 4).unwrap());
    assert_eq!(mask_nm(3, 9, 1, 3, 0).unwrap().nnz(), 9);
    assert!(matches!(
        mask_2_4(2, 6, 0),
        Err(GenError::Invalid { name: "cols", .. })
    ));
    assert!(matches!(
        mask_nm(2, 8, 5, 4, 0),
        Err(GenError::Invalid { name: "n", .. })
    ));
}
