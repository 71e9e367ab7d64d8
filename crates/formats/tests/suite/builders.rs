//! Composable-format builder tests: hyb, condense and ELL3D checked against straightforward
//! reference implementations on seeded random matrices, hand-checked tiny examples, reassembly,
//! and malformed-input errors.

use std::collections::{BTreeMap, BTreeSet};

use sparsetir_formats::builders::{
    condense, ell3d_from_coo, ell3d_from_csf, ell_csr_padded_below, hyb, hyb_every_row,
    hyb_padded_below, BuildError,
};
use sparsetir_formats::{Coo, Field};

// ---------------------------------------------------------------------------------------------
// Deterministic random CSR matrices.

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
    /// A value that sums exactly in f32/f64: a multiple of 0.5 in 0.5..=8.
    fn value(&mut self) -> f32 {
        (self.below(16) + 1) as f32 * 0.5
    }
}

#[derive(Clone, Debug)]
struct Csr {
    rows: usize,
    cols: usize,
    indptr: Vec<i64>,
    indices: Vec<i64>,
    values: Vec<f32>,
}

/// Random CSR: about a quarter of the rows empty, row 1 full (all columns, shuffled), row 2
/// `long` entries, others up to 6 entries; columns drawn with replacement (duplicates happen
/// when `dups`), in random order.
fn random_csr(seed: u64, rows: usize, cols: usize, long: usize, dups: bool) -> Csr {
    let mut rng = Rng(seed);
    let mut indptr = vec![0i64];
    let mut indices = Vec::new();
    let mut values = Vec::new();
    for i in 0..rows {
        let mut row: Vec<i64> = if cols == 0 || rng.below(4) == 0 {
            Vec::new()
        } else if i == 1 {
            (0..cols as i64).collect()
        } else if i == 2 {
            (0..long).map(|_| rng.below(cols) as i64).collect()
        } else {
            let d = rng.below(7).min(cols);
            (0..d).map(|_| rng.below(cols) as i64).collect()
        };
        if !dups {
            let set: BTreeSet<i64> = row.iter().copied().collect();
            row = set.into_iter().collect();
        }
        // Shuffle.
        for a in (1..row.len()).rev() {
            let b = rng.below(a + 1);
            row.swap(a, b);
        }
        for c in row {
            indices.push(c);
            values.push(rng.value());
        }
        indptr.push(indices.len() as i64);
    }
    Csr {
        rows,
        cols,
        indptr,
        indices,
        values,
    }
}

/// The matrix as a sorted map with duplicates summed.
fn csr_map(m: &Csr) -> BTreeMap<(i64, i64), f64> {
    let mut map = BTreeMap::new();
    for i in 0..m.rows {
        for j in m.indptr[i] as usize..m.indptr[i + 1] as usize {
            *map.entry((i as i64, m.indices[j])).or_insert(0.0) += f64::from(m.values[j]);
        }
    }
    map
}

fn coo_map2(c: &Coo) -> BTreeMap<(i64, i64), f64> {
    let mut map = BTreeMap::new();
    for (k, v) in c.coords.iter().zip(&c.values) {
        assert_eq!(k.len(), 2);
        *map.entry((k[0], k[1])).or_insert(0.0) += *v;
    }
    map
}

/// The matrices every reference test runs on: (seed, rows, cols, long row length, dups).
fn cases() -> Vec<(u64, usize, usize, usize, bool)> {
    vec![
        (1, 0, 0, 0, false),
        (2, 0, 5, 0, false),
        (3, 1, 1, 1, false),
        (4, 5, 0, 0, false),
        (5, 12, 9, 20, true),
        (6, 30, 17, 40, false),
        (7, 40, 64, 100, true),
        (8, 3, 3, 3, false),
        (9, 25, 8, 30, true),
    ]
}

// ---------------------------------------------------------------------------------------------
// hyb

/// Expected (row_indices, col_indices, values, mask) of block (p, k), computed by scanning rows.
type Block = (Vec<i32>, Vec<i32>, Vec<f32>, Vec<u8>);

fn hyb_reference(m: &Csr, parts: usize, buckets: &[usize]) -> (Vec<Vec<Block>>, bool) {
    let w = m.cols.div_ceil(parts);
    let largest = *buckets.last().unwrap();
    let mut out = vec![vec![(vec![], vec![], vec![], vec![]); buckets.len()]; parts];
    let mut appearances = vec![0usize; m.rows];
    for (p, blocks) in out.iter_mut().enumerate() {
        let lo = p * w;
        let hi = ((p + 1) * w).min(m.cols);
        for (i, seen) in appearances.iter_mut().enumerate() {
            let mut ents = Vec::new();
            for j in m.indptr[i] as usize..m.indptr[i + 1] as usize {
                let c = m.indices[j] as usize;
                if c >= lo && c < hi {
                    ents.push((m.indices[j] as i32, m.values[j]));
                }
            }
            if ents.is_empty() {
                continue;
            }
            // Padding: the smallest column the whole row does not store (0 for a full row).
            let row_cols: Vec<i32> = (m.indptr[i] as usize..m.indptr[i + 1] as usize)
                .map(|j| m.indices[j] as i32)
                .collect();
            let pad = (0..m.cols as i32)
                .find(|c| !row_cols.contains(c))
                .unwrap_or(0);
            let mut k = 0;
            while k < buckets.len() && buckets[k] < ents.len() {
                k += 1;
            }
            let (k, width) = if k == buckets.len() {
                (buckets.len() - 1, largest)
            } else {
                (k, buckets[k])
            };
            // (bucket, width) of every bucket row the entries fill, in order.
            let mut rows_of: Vec<(usize, usize)> = (0..ents.len().div_ceil(width))
                .map(|_| (k, width))
                .collect();
            // A row storing every column is never padded where whole buckets can hold it:
            // largest buckets first, then greedily the largest that fits the rest.
            let stores_all = (0..m.cols as i32).all(|c| row_cols.contains(&c));
            if stores_all && ents.len() % width != 0 {
                let mut exact = Vec::new();
                let mut rest = ents.len();
                while rest > largest {
                    exact.push((buckets.len() - 1, largest));
                    rest -= largest;
                }
                while rest > 0 {
                    match (0..buckets.len()).rev().find(|&b| buckets[b] <= rest) {
                        Some(b) => {
                            exact.push((b, buckets[b]));
                            rest -= buckets[b];
                        }
                        None => break,
                    }
                }
                if rest == 0 {
                    rows_of = exact;
                }
            }
            let mut start = 0;
            for (k, width) in rows_of {
                let b = &mut blocks[k];
                *seen += 1;
                b.0.push(i as i32);
                for s in 0..width {
                    if let Some(&(c, v)) = ents.get(start + s) {
                        b.1.push(c);
                        b.2.push(v);
                        b.3.push(1);
                    } else {
                        b.1.push(pad);
                        b.2.push(0.0);
                        b.3.push(0);
                    }
                }
                start += width;
            }
        }
    }
    let atomic = appearances.iter().any(|&a| a > 1);
    (out, atomic)
}

#[test]
fn hyb_matches_reference_on_random_matrices() {
    let configs: &[(usize, &[usize])] = &[
        (1, &[1]),
        (1, &[1, 2, 4, 8]),
        (2, &[2, 4]),
        (3, &[1, 3, 5]),
        (4, &[4]),
        (5, &[2, 16, 64]),
    ];
    let mut checked = 0;
    for (seed, rows, cols, long, dups) in cases() {
        let m = random_csr(seed, rows, cols, long, dups);
        for &(parts, buckets) in configs {
            if parts > cols.max(1) {
                continue;
            }
            let h = hyb(
                m.rows, m.cols, &m.indptr, &m.indices, &m.values, parts, buckets,
            )
            .expect("valid input");
            let (expected, atomic) = hyb_reference(&m, parts, buckets);
            assert_eq!(h.parts.len(), parts);
            for (p, blocks) in expected.iter().enumerate() {
                for (k, exp) in blocks.iter().enumerate() {
                    let b = h.get(p, k).unwrap();
                    assert_eq!(b.width, buckets[k]);
                    assert_eq!(
                        (&b.row_indices, &b.col_indices, &b.values, &b.mask),
                        (&exp.0, &exp.1, &exp.2, &exp.3),
                        "seed {seed} parts {parts} buckets {buckets:?} block ({p}, {k})"
                    );
                }
            }
            assert_eq!(h.needs_atomic, atomic, "seed {seed} parts {parts}");
            // Each slot names the input entry it holds; every entry is held exactly once.
            let mut held = vec![0u32; m.values.len()];
            for b in h.blocks() {
                for (slot, &src) in b.sources.iter().enumerate() {
                    if b.mask[slot] == 0 {
                        assert_eq!(src, -1, "seed {seed}: padding names an entry");
                        continue;
                    }
                    let e = usize::try_from(src).expect("a real slot names an entry");
                    assert_eq!(b.values[slot], m.values[e], "seed {seed}");
                    assert_eq!(i64::from(b.col_indices[slot]), m.indices[e], "seed {seed}");
                    held[e] += 1;
                }
            }
            assert!(held.iter().all(|&n| n == 1), "seed {seed} parts {parts}");
            assert_eq!(coo_map2(&h.reassemble()), csr_map(&m));
            assert_eq!(h.reassemble().dims, vec![rows, cols]);
            checked += 1;
        }
    }
    assert!(checked > 30);
}

#[test]
fn hyb_hand_checked_two_parts() {
    // 3 x 4: row 0 = {0: 1, 1: 2, 3: 3}, row 1 empty, row 2 = {2: 4}. Two parts of width 2.
    let indptr = [0i32, 3, 3, 4];
    let indices = [0i32, 1, 3, 2];
    let values = [1.0f32, 2.0, 3.0, 4.0];
    let h = hyb(3, 4, &indptr, &indices, &values, 2, &[1, 2]).unwrap();
    assert_eq!(h.part_width, 2);
    // Part 0 (cols 0..2): row 0 has degree 2 -> bucket width 2.
    let b = h.get(0, 0).unwrap();
    assert!(b.row_indices.is_empty() && b.col_indices.is_empty());
    let b = h.get(0, 1).unwrap();
    assert_eq!((b.col_start, b.col_end), (0, 2));
    assert_eq!(b.row_indices, vec![0]);
    assert_eq!(b.col_indices, vec![0, 1]);
    assert_eq!(b.values, vec![1.0, 2.0]);
    assert_eq!(b.mask, vec![1, 1]);
    // Part 1 (cols 2..4): rows 0 and 2 each have degree 1 -> bucket width 1.
    let b = h.get(1, 0).unwrap();
    assert_eq!((b.col_start, b.col_end), (2, 4));
    assert_eq!(b.row_indices, vec![0, 2]);
    assert_eq!(b.col_indices, vec![3, 2]);
    assert_eq!(b.values, vec![3.0, 4.0]);
    assert_eq!(b.mask, vec![1, 1]);
    assert!(h.get(1, 1).unwrap().row_indices.is_empty());
    // Row 0 lives in two parts.
    assert!(h.needs_atomic);
}

#[test]
fn hyb_hand_checked_split_and_padding() {
    // One row of 5 entries, largest bucket 2: chunks [0,1], [2,3], [4,pad]; the row stores
    // every column, so the padding falls back to column 0.
    let h = hyb(
        1,
        5,
        &[0usize, 5],
        &[0usize, 1, 2, 3, 4],
        &[1.0, 2.0, 3.0, 4.0, 5.0],
        1,
        &[2],
    )
    .unwrap();
    let b = h.get(0, 0).unwrap();
    assert_eq!(b.row_indices, vec![0, 0, 0]);
    assert_eq!(b.col_indices, vec![0, 1, 2, 3, 4, 0]);
    assert_eq!(b.values, vec![1.0, 2.0, 3.0, 4.0, 5.0, 0.0]);
    assert_eq!(b.mask, vec![1, 1, 1, 1, 1, 0]);
    assert!(h.needs_atomic);

    // No split, one part: padding to width 4, no atomics; row 0 pads with column 0 (absent),
    // row 1 (storing 0 and 1) with column 2.
    let h = hyb(
        2,
        3,
        &[0i64, 1, 3],
        &[2i64, 0, 1],
        &[7.0, 8.0, 9.0],
        1,
        &[4],
    )
    .unwrap();
    let b = h.get(0, 0).unwrap();
    assert_eq!(b.row_indices, vec![0, 1]);
    assert_eq!(b.col_indices, vec![2, 0, 0, 0, 0, 1, 2, 2]);
    assert_eq!(b.values, vec![7.0, 0.0, 0.0, 0.0, 8.0, 9.0, 0.0, 0.0]);
    assert_eq!(b.mask, vec![1, 0, 0, 0, 1, 1, 0, 0]);
    assert!(!h.needs_atomic);
}

#[test]
fn padding_below_a_bound_names_columns_below_it() {
    // Row 0 stores columns 0 and 1 of 6, row 1 column 4. Unbounded, row 0 pads with column 2.
    let (indptr, indices, values) = ([0usize, 2, 3], [0usize, 1, 4], [1.0, 2.0, 3.0]);
    let h = hyb(2, 6, &indptr, &indices, &values, 1, &[4]).unwrap();
    assert_eq!(
        h.get(0, 0).unwrap().col_indices,
        vec![0, 1, 2, 2, 4, 0, 0, 0]
    );
    // Below 3: the same (column 2 is below it).
    let h = hyb_padded_below(2, 6, &indptr, &indices, &values, 1, &[4], 3).unwrap();
    assert_eq!(
        h.get(0, 0).unwrap().col_indices,
        vec![0, 1, 2, 2, 4, 0, 0, 0]
    );
    // Below 2: row 0 stores every column below the bound; it fits bucket 2 exactly (row 1
    // pads with column 0) ...
    let h = hyb_padded_below(2, 6, &indptr, &indices, &values, 1, &[2, 4], 2).unwrap();
    let b = h.get(0, 0).unwrap();
    assert_eq!(b.row_indices, vec![0, 1]);
    assert_eq!(b.col_indices, vec![0, 1, 4, 0]);
    // ... a run of 3 storing every column below 3 is cut into 2 + 1 instead of padded in 4.
    let h = hyb_padded_below(
        1,
        6,
        &[0usize, 3],
        &[0usize, 1, 2],
        &[1.0, 2.0, 3.0],
        1,
        &[1, 2, 4],
        3,
    )
    .unwrap();
    assert_eq!(h.get(0, 1).unwrap().col_indices, vec![0, 1]);
    assert_eq!(h.get(0, 0).unwrap().col_indices, vec![2]);
    assert!(h.get(0, 2).unwrap().row_indices.is_empty());
    assert_eq!(
        hyb(
            1,
            6,
            &[0usize, 3],
            &[0usize, 1, 2],
            &[1.0, 2.0, 3.0],
            1,
            &[1, 2, 4]
        )
        .unwrap()
        .get(0, 2)
        .unwrap()
        .col_indices,
        vec![0, 1, 2, 3]
    );
    // ... and padded with column 0 at value 0 where they do not; row 1 pads with column 0.
    let h = hyb_padded_below(2, 6, &indptr, &indices, &values, 1, &[4], 2).unwrap();
    let b = h.get(0, 0).unwrap();
    assert_eq!(b.col_indices, vec![0, 1, 0, 0, 4, 0, 0, 0]);
    assert_eq!(b.values, vec![1.0, 2.0, 0.0, 0.0, 3.0, 0.0, 0.0, 0.0]);
    assert!(b
        .col_indices
        .iter()
        .zip(&b.mask)
        .all(|(&c, &k)| k == 1 || c < 2));

    // ELL+CSR of width 3 below 4: row 0 pads with 2 (distinct, increasing), row 1 with 0, 1.
    let e = ell_csr_padded_below(2, 6, &indptr, &indices, &values, 3, 4).unwrap();
    assert_eq!(e.ell_indices, vec![0, 1, 2, 0, 1, 4]);
    assert_eq!(e.ell_mask, vec![1, 1, 0, 0, 0, 1]);
    // Below 2, row 0 has no free column to pad with: an error naming the row and the bound.
    let err = ell_csr_padded_below(2, 6, &indptr, &indices, &values, 3, 2).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("row 0") && text.contains("below 2"), "{text}");
}

#[test]
fn hyb_every_row_places_empty_rows_as_padding() {
    // Rows 0 and 2 store nothing; row 1 two entries, row 3 five (split past the bucket of 4).
    let (indptr, indices) = ([0i32, 0, 2, 2, 7], [1i32, 3, 0, 1, 2, 3, 4]);
    let values = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0];
    let plain = hyb(4, 5, &indptr, &indices, &values, 1, &[1, 2, 4]).unwrap();
    let every = hyb_every_row(4, 5, &indptr, &indices, &values, 1, &[1, 2, 4]).unwrap();
    // The empty rows are one bucket row each of the first bucket, all padding, in row order
    // (row 3 stores every column: its last piece, one entry, fills that bucket exactly).
    assert_eq!(plain.get(0, 0).unwrap().row_indices, vec![3]);
    let b = every.get(0, 0).unwrap();
    assert_eq!(b.row_indices, vec![0, 2, 3]);
    assert_eq!(b.values, vec![0.0, 0.0, 7.0]);
    assert_eq!(b.mask, vec![0, 0, 1]);
    assert_eq!(b.col_indices, vec![0, 0, 4]);
    // The other buckets as without them; the same matrix.
    assert_eq!(every.get(0, 1), plain.get(0, 1));
    assert_eq!(every.get(0, 2), plain.get(0, 2));
    assert_eq!(coo_map2(&every.reassemble()), coo_map2(&plain.reassemble()));
    // Row 3 is split (bucket rows in buckets 4 and 1): not every row once.
    assert!(!every.rows_once() && !plain.rows_once());
    // Without the long row, every row is held once only when the empty ones are placed.
    let (ip, ix, v) = (&indptr[..4], &indices[..2], &values[..2]);
    assert!(hyb_every_row(3, 5, ip, ix, v, 1, &[1, 2, 4])
        .unwrap()
        .rows_once());
    assert!(!hyb(3, 5, ip, ix, v, 1, &[1, 2, 4]).unwrap().rows_once());
    // A row in two column parts is held twice.
    let two = hyb_every_row(3, 5, ip, ix, v, 2, &[1, 2, 4]).unwrap();
    assert!(!two.rows_once());
    // No column, no padding column: the empty rows stay out.
    let none = hyb_every_row(2, 0, &[0i32, 0, 0], &[], &[], 1, &[1]).unwrap();
    assert!(none.get(0, 0).unwrap().row_indices.is_empty() && !none.rows_once());
}

#[test]
fn hyb_uneven_parts_have_empty_trailing_part() {
    // cols 5, 4 parts -> width 2: parts [0,2), [2,4), [4,5), [5,5) (empty).
    let h = hyb(1, 5, &[0i32, 5], &[0, 1, 2, 3, 4], &[1.0; 5], 4, &[2]).unwrap();
    let spans: Vec<(usize, usize)> = (0..4)
        .map(|p| {
            let b = h.get(p, 0).unwrap();
            (b.col_start, b.col_end)
        })
        .collect();
    assert_eq!(spans, vec![(0, 2), (2, 4), (4, 5), (5, 5)]);
    assert_eq!(h.get(2, 0).unwrap().col_indices, vec![4, 0]);
    assert!(h.get(3, 0).unwrap().row_indices.is_empty());
}

// ---------------------------------------------------------------------------------------------
// condense

#[test]
fn condense_matches_reference_on_random_matrices() {
    for (seed, rows, cols, long, dups) in cases() {
        let m = random_csr(seed, rows, cols, long, dups);
        for (t, g) in [(1, 1), (2, 3), (4, 2), (16, 8), (3, 64)] {
            let c = condense(m.rows, m.cols, &m.indptr, &m.indices, &m.values, t, g).unwrap();
            // Reference: per tile, the column set, then a dense scan of every slot.
            let mut gptr = vec![0i32];
            let mut tile_idx = Vec::new();
            let mut mask = Vec::new();
            let mut vals = Vec::new();
            let tiles = rows.div_ceil(t);
            for tile in 0..tiles {
                let mut set = BTreeSet::new();
                for i in tile * t..((tile + 1) * t).min(rows) {
                    for j in m.indptr[i]..m.indptr[i + 1] {
                        set.insert(m.indices[j as usize]);
                    }
                }
                let colsv: Vec<i64> = set.into_iter().collect();
                let ngroups = colsv.len().div_ceil(g);
                gptr.push(gptr.last().unwrap() + ngroups as i32);
                for q in 0..ngroups {
                    let slot_col = |s: usize| colsv.get(q * g + s).copied();
                    for s in 0..g {
                        tile_idx.push(slot_col(s).unwrap_or(0) as i32);
                    }
                    for r in 0..t {
                        let i = tile * t + r;
                        for s in 0..g {
                            let mut hit = false;
                            let mut sum = 0.0f32;
                            if let (Some(col), true) = (slot_col(s), i < rows) {
                                for j in m.indptr[i]..m.indptr[i + 1] {
                                    if m.indices[j as usize] == col {
                                        hit = true;
                                        sum += m.values[j as usize];
                                    }
                                }
                            }
                            mask.push(u8::from(hit));
                            vals.push(sum);
                        }
                    }
                }
            }
            let ctx = format!("seed {seed} t {t} g {g}");
            assert_eq!(c.group_indptr, gptr, "{ctx}");
            assert_eq!(c.tile_indices, tile_idx, "{ctx}");
            assert_eq!(c.mask, mask, "{ctx}");
            assert_eq!(c.values, vals, "{ctx}");
            assert_eq!(c.num_tiles(), tiles);
            assert_eq!(coo_map2(&c.reassemble()), csr_map(&m), "{ctx}");
        }
    }
}

#[test]
fn condense_hand_checked() {
    // 3 x 6: row 0 = {1: 1, 4: 2}, row 1 = {4: 3, 5: 4}, row 2 = {0: 5}; t = 2, g = 2.
    // Tile 0 columns {1, 4, 5} -> groups [1, 4], [5, pad]; tile 1 columns {0} -> [0, pad].
    let c = condense(
        3,
        6,
        &[0i32, 2, 4, 5],
        &[1i32, 4, 4, 5, 0],
        &[1.0, 2.0, 3.0, 4.0, 5.0],
        2,
        2,
    )
    .unwrap();
    assert_eq!(c.group_indptr, vec![0, 2, 3]);
    assert_eq!(c.tile_indices, vec![1, 4, 5, 0, 0, 0]);
    assert_eq!(c.num_groups(), 3);
    // (G, t, g): group 0 rows 0/1; group 1 rows 0/1; group 2 rows 2/(3: absent).
    assert_eq!(c.mask, vec![1, 1, 0, 1, 0, 0, 1, 0, 1, 0, 0, 0]);
    assert_eq!(
        c.values,
        vec![1.0, 2.0, 0.0, 3.0, 0.0, 0.0, 4.0, 0.0, 5.0, 0.0, 0.0, 0.0]
    );
}

// ---------------------------------------------------------------------------------------------
// ELL3D

/// Random rank-3 COO (relation, row, col) with a full row, a long row and empty relations/rows.
fn random_coo3(seed: u64, rels: usize, rows: usize, cols: usize, long: usize) -> Coo {
    let mut rng = Rng(seed);
    let mut coords = Vec::new();
    let mut values = Vec::new();
    for r in 0..rels {
        if rels > 1 && r == rels - 1 {
            continue; // an empty relation
        }
        for i in 0..rows {
            let d = if cols == 0 || rng.below(3) == 0 {
                0
            } else if r == 0 && i == 0 {
                cols
            } else if i == 1 {
                long
            } else {
                rng.below(5)
            };
            for q in 0..d {
                let c = if d == cols { q } else { rng.below(cols) };
                coords.push(vec![r as i64, i as i64, c as i64]);
                values.push(f64::from(rng.value()));
            }
        }
    }
    Coo::new(vec![rels, rows, cols], coords, values, Field::Real).unwrap()
}

#[test]
fn ell3d_matches_reference_on_random_tensors() {
    let shapes = [
        (11, 0, 0, 0, 0),
        (12, 1, 1, 1, 1),
        (13, 1, 0, 3, 0),
        (14, 3, 10, 7, 12),
        (15, 4, 20, 30, 50),
        (16, 2, 6, 6, 6),
    ];
    let configs: &[(&[usize], usize)] = &[(&[1], 1), (&[1, 2, 4], 2), (&[2, 8], 3), (&[3], 4)];
    for (seed, rels, rows, cols, long) in shapes {
        let coo = random_coo3(seed, rels, rows, cols, long);
        // Reference view: (rel, row) -> sorted (col, summed value).
        let mut fibers: BTreeMap<(i64, i64), BTreeMap<i64, f64>> = BTreeMap::new();
        for (c, v) in coo.coords.iter().zip(&coo.values) {
            *fibers
                .entry((c[0], c[1]))
                .or_default()
                .entry(c[2])
                .or_insert(0.0) += *v;
        }
        for &(buckets, group) in configs {
            let e = ell3d_from_coo(&coo, buckets, group).unwrap();
            let largest = *buckets.last().unwrap();
            let mut blocks_of_row: BTreeMap<i64, BTreeSet<(usize, usize)>> = BTreeMap::new();
            let mut split = false;
            for r in 0..rels {
                let mut exp: Vec<Block> = vec![(vec![], vec![], vec![], vec![]); buckets.len()];
                for i in 0..rows {
                    let Some(f) = fibers.get(&(r as i64, i as i64)) else {
                        continue;
                    };
                    let ents: Vec<(i64, f64)> = f.iter().map(|(&c, &v)| (c, v)).collect();
                    let k = buckets
                        .iter()
                        .position(|&b| b >= ents.len())
                        .unwrap_or(buckets.len() - 1);
                    let w = buckets[k];
                    split |= ents.len() > largest;
                    blocks_of_row.entry(i as i64).or_default().insert((r, k));
                    for chunk in ents.chunks(w) {
                        exp[k].0.push(i as i32);
                        for s in 0..w {
                            let (c, v, mk) = chunk.get(s).map_or((0, 0.0, 0), |&(c, v)| (c, v, 1));
                            exp[k].1.push(c as i32);
                            exp[k].2.push(v as f32);
                            exp[k].3.push(mk);
                        }
                    }
                }
                for (k, x) in exp.iter_mut().enumerate() {
                    let real = x.0.len();
                    while x.0.len() % group != 0 {
                        x.0.push(0);
                        for _ in 0..buckets[k] {
                            x.1.push(0);
                            x.2.push(0.0);
                            x.3.push(0);
                        }
                    }
                    let b = e.get(r, k).unwrap();
                    assert_eq!(b.num_real_rows, real);
                    assert_eq!(b.num_rows() % group, 0);
                    assert_eq!(
                        (&b.row_indices, &b.col_indices, &b.values, &b.mask),
                        (&x.0, &x.1, &x.2, &x.3),
                        "seed {seed} buckets {buckets:?} group {group} block ({r}, {k})"
                    );
                }
            }
            let atomic = split || blocks_of_row.values().any(|s| s.len() > 1);
            assert_eq!(e.needs_atomic, atomic, "seed {seed}");
            assert_eq!(e.reassemble(), coo.summed(), "seed {seed}");
        }
    }
}

#[test]
fn ell3d_hand_checked() {
    // Relation 0: row 0 = {0: 1, 1: 2, 2: 3}, row 2 = {1: 4}; relation 1: row 1 = {2: 5}.
    // Buckets [1, 2], groups of 2 rows.
    let e = ell3d_from_csf(
        2,
        3,
        3,
        &[0i32, 2, 3],
        &[0, 2, 1],
        &[0, 3, 4, 5],
        &[0, 1, 2, 1, 2],
        &[1.0, 2.0, 3.0, 4.0, 5.0],
        &[1, 2],
        2,
    )
    .unwrap();
    let b = e.get(0, 0).unwrap();
    assert_eq!(b.num_real_rows, 1);
    assert_eq!(b.row_indices, vec![2, 0]);
    assert_eq!(b.col_indices, vec![1, 0]);
    assert_eq!(b.values, vec![4.0, 0.0]);
    assert_eq!(b.mask, vec![1, 0]);
    // Row 0 (3 entries) is split into two chunks of the largest bucket (2).
    let b = e.get(0, 1).unwrap();
    assert_eq!(b.num_real_rows, 2);
    assert_eq!(b.row_indices, vec![0, 0]);
    assert_eq!(b.col_indices, vec![0, 1, 2, 0]);
    assert_eq!(b.values, vec![1.0, 2.0, 3.0, 0.0]);
    assert_eq!(b.mask, vec![1, 1, 1, 0]);
    let b = e.get(1, 0).unwrap();
    assert_eq!(b.row_indices, vec![1, 0]);
    assert_eq!(b.col_indices, vec![2, 0]);
    assert_eq!(b.mask, vec![1, 0]);
    let b = e.get(1, 1).unwrap();
    assert_eq!((b.num_rows(), b.col_indices.len()), (0, 0));
    assert!(e.needs_atomic);
}

#[test]
fn ell3d_no_atomic_when_rows_are_disjoint() {
    // Relation 0 row 0 = {1}, relation 1 row 1 = {0}: no split, no shared row.
    let e = ell3d_from_csf(
        2,
        2,
        2,
        &[0i64, 1, 2],
        &[0, 1],
        &[0, 1, 2],
        &[1, 0],
        &[1.0, 2.0],
        &[1],
        1,
    )
    .unwrap();
    assert!(!e.needs_atomic);
}

// ---------------------------------------------------------------------------------------------
// Malformed input: typed errors with their messages.

fn err_text(e: BuildError) -> String {
    e.to_string()
}

#[test]
fn malformed_inputs_are_typed_errors() {
    let v3 = [1.0f32; 3];
    // indptr length.
    let e = hyb(2, 3, &[0i32, 1], &[0], &[1.0], 1, &[1]).unwrap_err();
    assert_eq!(err_text(e), "`indptr` has length 2, expected 3");
    // indptr not starting at 0.
    let e = hyb(1, 3, &[1i32, 3], &[0, 1, 2], &v3, 1, &[1]).unwrap_err();
    assert_eq!(err_text(e), "`indptr`[0] is 1, expected 0");
    // indptr not monotone.
    let e = hyb(3, 3, &[0i64, 2, 1, 3], &[0, 1, 2], &v3, 1, &[1]).unwrap_err();
    assert!(matches!(
        e,
        BuildError::PtrNotMonotone {
            array: "indptr",
            index: 2,
            ..
        }
    ));
    assert_eq!(
        err_text(e),
        "`indptr` is not monotone: `indptr`[2] = 1 < `indptr`[1] = 2"
    );
    // indptr not ending at nnz.
    let e = condense(2, 3, &[0i32, 1, 2], &[0, 1, 2], &v3, 1, 1).unwrap_err();
    assert_eq!(
        err_text(e),
        "`indptr` ends at 2, but `indices` has length 3"
    );
    // index above the column count.
    let e = hyb(1, 3, &[0i32, 2], &[0, 5], &[1.0, 1.0], 1, &[1]).unwrap_err();
    assert_eq!(err_text(e), "`indices`[1] = 5 is outside 0..3");
    // negative index.
    let e = condense(1, 3, &[0i64, 1], &[-1], &[1.0], 1, 1).unwrap_err();
    assert_eq!(err_text(e), "`indices`[0] = -1 is outside 0..3");
    // values length.
    let e = hyb(1, 3, &[0i32, 2], &[0, 1], &[1.0], 1, &[1]).unwrap_err();
    assert_eq!(err_text(e), "`values` has length 1, expected 2");
    // buckets not strictly increasing.
    let e = hyb(1, 3, &[0i32, 1], &[0], &[1.0], 1, &[2, 2]).unwrap_err();
    assert_eq!(
        err_text(e),
        "`buckets`[1] = 2 is not greater than `buckets`[0] = 2 (must strictly increase)"
    );
    // zero bucket.
    let e = hyb(1, 3, &[0i32, 1], &[0], &[1.0], 1, &[0, 1]).unwrap_err();
    assert_eq!(
        err_text(e),
        "invalid parameter `buckets`: width at index 0 is 0, widths must be positive"
    );
    // no buckets.
    let e = hyb(1, 3, &[0i32, 1], &[0], &[1.0], 1, &[]).unwrap_err();
    assert_eq!(
        err_text(e),
        "invalid parameter `buckets`: at least one bucket width is required"
    );
    // num_col_parts 0 and too many.
    let e = hyb(1, 3, &[0i32, 1], &[0], &[1.0], 0, &[1]).unwrap_err();
    assert_eq!(
        err_text(e),
        "invalid parameter `num_col_parts`: 0 is not in 1..=3"
    );
    let e = hyb(1, 3, &[0i32, 1], &[0], &[1.0], 4, &[1]).unwrap_err();
    assert_eq!(
        err_text(e),
        "invalid parameter `num_col_parts`: 4 is not in 1..=3"
    );
    // condense tile size 0.
    let e = condense(1, 3, &[0i32, 1], &[0], &[1.0], 0, 2).unwrap_err();
    assert_eq!(err_text(e), "invalid parameter `t`: must be at least 1");
    let e = condense(1, 3, &[0i32, 1], &[0], &[1.0], 2, 0).unwrap_err();
    assert_eq!(err_text(e), "invalid parameter `g`: must be at least 1");
}

#[test]
fn malformed_ell3d_inputs_are_typed_errors() {
    // rel_indptr length.
    let e = ell3d_from_csf(2, 2, 2, &[0i32, 1], &[0], &[0, 1], &[0], &[1.0], &[1], 1).unwrap_err();
    assert_eq!(e.to_string(), "`rel_indptr` has length 2, expected 3");
    // row index out of range.
    let e = ell3d_from_csf(1, 2, 2, &[0i32, 1], &[7], &[0, 1], &[0], &[1.0], &[1], 1).unwrap_err();
    assert_eq!(e.to_string(), "`row_indices`[0] = 7 is outside 0..2");
    // rows of a relation not strictly increasing.
    let e = ell3d_from_csf(
        1,
        3,
        2,
        &[0i32, 2],
        &[1, 1],
        &[0, 1, 2],
        &[0, 1],
        &[1.0, 1.0],
        &[1],
        1,
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "`row_indices`[1] = 1 is not greater than `row_indices`[0] = 1 (must strictly increase)"
    );
    // (Across relations the row sequence restarts: this one is fine.)
    ell3d_from_csf(
        2,
        3,
        2,
        &[0i32, 1, 2],
        &[1, 1],
        &[0, 1, 2],
        &[0, 1],
        &[1.0, 1.0],
        &[1],
        1,
    )
    .unwrap();
    // indptr over the fibers ends short.
    let e = ell3d_from_csf(
        1,
        2,
        2,
        &[0i32, 1],
        &[0],
        &[0, 1],
        &[0, 1],
        &[1.0, 1.0],
        &[1],
        1,
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "`indptr` ends at 1, but `indices` has length 2"
    );
    // group size 0.
    let e = ell3d_from_csf(1, 2, 2, &[0i32, 1], &[0], &[0, 1], &[0], &[1.0], &[1], 0).unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid parameter `group_size`: must be at least 1"
    );
    // COO of the wrong rank, and an invalid COO.
    let coo = Coo::new(vec![2, 2], vec![vec![0, 1]], vec![1.0], Field::Real).unwrap();
    let e = ell3d_from_coo(&coo, &[1], 1).unwrap_err();
    assert_eq!(e.to_string(), "COO input has rank 2, expected 3");
    let bad = Coo {
        dims: vec![1, 2, 2],
        coords: vec![vec![0, 2, 0]],
        values: vec![1.0],
        field: Field::Real,
    };
    let e = ell3d_from_coo(&bad, &[1], 1).unwrap_err();
    assert!(matches!(e, BuildError::Coo(_)));
    assert_eq!(
        e.to_string(),
        "invalid COO input: COO entry 0: coordinate 2 of dimension 1 is outside 0..2"
    );
}

#[test]
fn huge_padding_is_an_error_not_an_abort() {
    // One entry in a bucket of width usize::MAX / 2: the block size overflows.
    let e = hyb(2, 2, &[0i32, 1, 1], &[0], &[1.0], 1, &[usize::MAX / 2]).unwrap_err();
    assert!(matches!(e, BuildError::TooLarge(_)), "{e}");
    let e = condense(1, 1, &[0i32, 1], &[0], &[1.0], usize::MAX / 2, 4).unwrap_err();
    assert!(matches!(e, BuildError::TooLarge(_)), "{e}");
}

#[test]
fn tensors_have_consistent_shapes_and_names() {
    use sparsetir_formats::TensorData;
    let len = |d: &TensorData| match d {
        TensorData::I32(v) => v.len(),
        TensorData::U8(v) => v.len(),
        TensorData::F32(v) => v.len(),
        other => panic!("unexpected dtype {other:?}"),
    };
    let m = random_csr(21, 10, 6, 9, false);
    let h = hyb(m.rows, m.cols, &m.indptr, &m.indices, &m.values, 2, &[1, 4]).unwrap();
    let ts = h.tensors();
    assert_eq!(ts.len(), 2 * 2 * 4);
    for (name, t) in &ts {
        assert_eq!(t.shape.iter().product::<usize>(), len(&t.data), "{name}");
    }
    let b = h.get(1, 1).unwrap();
    let (_, cols) = ts.iter().find(|(n, _)| n == "col_indices_1_1").unwrap();
    assert_eq!(cols.shape, vec![b.num_rows(), 4]);
    assert_eq!(cols.data, TensorData::I32(b.col_indices.clone()));

    let c = condense(m.rows, m.cols, &m.indptr, &m.indices, &m.values, 4, 2).unwrap();
    let names: Vec<String> = c.tensors().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["group_indptr", "tile_indices", "mask", "values"]);
    for (name, t) in c.tensors() {
        assert_eq!(t.shape.iter().product::<usize>(), len(&t.data), "{name}");
    }
    let e = ell3d_from_coo(&random_coo3(22, 2, 5, 5, 7), &[2, 4], 3).unwrap();
    for (name, t) in e.tensors() {
        assert_eq!(t.shape.iter().product::<usize>(), len(&t.data), "{name}");
        assert_eq!(t.shape[0] % 3, 0, "{name}");
    }
}
