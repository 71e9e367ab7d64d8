//! SELL-C-σ builder tests: on seeded random matrices (empty rows, a long row, row counts that
//! are not multiples of the lanes) every row sits in exactly one lane with its entries in CSR
//! order, rows are sorted by decreasing length inside each window, chunk widths are the longest
//! lane, padding slots hold 0 and a column the lane stores (0 for an empty lane), padding lanes
//! get the rows past the matrix; the reassembled matrix equals the input; a hand-checked
//! example; malformed input and parameters are typed errors.

use std::collections::BTreeMap;

use sparsetir_formats::builders::{sell, BuildError};

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) % n.max(1) as u64) as usize
    }
}

/// A random CSR matrix: a third of the rows empty, row 0 `long` entries, others up to 9.
fn random_csr(seed: u64, rows: usize, cols: usize, long: usize) -> (Vec<i32>, Vec<i32>, Vec<f32>) {
    let mut rng = Rng(seed);
    let (mut indptr, mut indices, mut values) = (vec![0i32], Vec::new(), Vec::new());
    for i in 0..rows {
        let n = match i {
            0 => long,
            _ if rng.below(3) == 0 => 0,
            _ => 1 + rng.below(9),
        };
        for _ in 0..n {
            indices.push(rng.below(cols) as i32);
            values.push((rng.below(16) + 1) as f32 * 0.5);
        }
        indptr.push(indices.len() as i32);
    }
    (indptr, indices, values)
}

#[test]
fn sell_holds_every_row_once_sorted_inside_windows() {
    for (seed, rows, cols, long, lanes, sigma) in [
        (1u64, 1usize, 1usize, 1usize, 16usize, 1usize),
        (2, 17, 5, 4, 16, 4),
        (3, 100, 40, 30, 16, 16),
        (4, 333, 64, 60, 8, 1000),
        (5, 50, 50, 0, 4, 7),
    ] {
        let (indptr, indices, values) = random_csr(seed, rows, cols, long);
        let s = sell(rows, cols, &indptr, &indices, &values, lanes, sigma).expect("sell");
        let what = format!("seed {seed}");
        let len = |r: usize| (indptr[r + 1] - indptr[r]) as usize;
        assert_eq!(s.nchunk(), rows.div_ceil(lanes), "{what}");
        assert_eq!(s.padded_rows(), s.nchunk() * lanes, "{what}");
        assert_eq!(s.col_indices.len(), s.slots() * lanes, "{what}");
        // Every row once; padding lanes numbered past the matrix.
        let mut seen = vec![false; rows];
        for (slot, &r) in s.row_ids.iter().enumerate() {
            let r = r as usize;
            if slot >= rows {
                assert_eq!(r, slot, "{what}: padding lane {slot}");
                continue;
            }
            assert!(
                r < rows && !seen[r],
                "{what}: row {r} twice or out of range"
            );
            seen[r] = true;
        }
        // Inside each window, lengths decrease (ties in row order).
        let order: Vec<usize> = s.row_ids[..rows].iter().map(|&r| r as usize).collect();
        for (w, window) in order.chunks(sigma).enumerate() {
            let mut rows_in: Vec<usize> = window.to_vec();
            rows_in.sort_unstable();
            let first = w * sigma;
            assert_eq!(
                rows_in,
                (first..first + window.len()).collect::<Vec<_>>(),
                "{what}"
            );
            for p in window.windows(2) {
                let key = |r: usize| (std::cmp::Reverse(len(r)), r);
                assert!(key(p[0]) < key(p[1]), "{what}: window {w} order");
            }
        }
        // Widths, entries in CSR order, padding.
        for k in 0..s.nchunk() {
            let base = s.chunk_ptr[k] as usize;
            let width = s.chunk_ptr[k + 1] as usize - base;
            let lane_rows = &s.row_ids[k * lanes..(k + 1) * lanes];
            let longest = lane_rows
                .iter()
                .map(|&r| {
                    if (r as usize) < rows {
                        len(r as usize)
                    } else {
                        0
                    }
                })
                .max()
                .unwrap_or(0);
            assert_eq!(width, longest, "{what}: chunk {k} width");
            for (l, &r) in lane_rows.iter().enumerate() {
                let r = r as usize;
                let n = if r < rows { len(r) } else { 0 };
                let lo = if r < rows { indptr[r] as usize } else { 0 };
                for slot in 0..width {
                    let p = (base + slot) * lanes + l;
                    if slot < n {
                        assert_eq!(s.col_indices[p], indices[lo + slot], "{what}");
                        assert_eq!(s.values[p], values[lo + slot], "{what}");
                    } else {
                        let last = if n > 0 { indices[lo + n - 1] } else { 0 };
                        assert_eq!(s.col_indices[p], last, "{what}: padding column");
                        assert_eq!(s.values[p], 0.0, "{what}: padding value");
                    }
                }
            }
        }
        // The matrix back.
        let lens: Vec<usize> = (0..rows).map(len).collect();
        let back = s.reassemble(&lens);
        let mut want: BTreeMap<(i64, i64), f64> = BTreeMap::new();
        for r in 0..rows {
            for p in indptr[r] as usize..indptr[r + 1] as usize {
                *want.entry((r as i64, indices[p] as i64)).or_default() += values[p] as f64;
            }
        }
        let mut got: BTreeMap<(i64, i64), f64> = BTreeMap::new();
        for (k, v) in back.coords.iter().zip(&back.values) {
            *got.entry((k[0], k[1])).or_default() += v;
        }
        assert_eq!(got, want, "{what}: reassembled");
    }
}

#[test]
fn sell_hand_checked() {
    // Rows: 0: [c1], 1: [], 2: [c0, c2], with 2 lanes and one window: order 2, 0, 1.
    let s = sell(3, 3, &[0, 1, 1, 3], &[1, 0, 2], &[1.0, 2.0, 3.0], 2, 3).expect("sell");
    assert_eq!(s.row_ids, vec![2, 0, 1, 3]);
    assert_eq!(s.chunk_ptr, vec![0, 2, 2]);
    // Chunk 0, slot-major: (slot 0: row 2 c0, row 0 c1), (slot 1: row 2 c2, row 0 padding c1).
    assert_eq!(s.col_indices, vec![0, 1, 2, 1]);
    assert_eq!(s.values, vec![2.0, 1.0, 3.0, 0.0]);
    assert_eq!(s.max_width(), 2);
    assert!((s.fill_ratio(3) - 4.0 / 3.0).abs() < 1e-12);
}

#[test]
fn malformed_sell_inputs_are_typed_errors() {
    let ok = |r: Result<_, BuildError>| {
        r.map(|_: sparsetir_formats::builders::Sell| ())
            .map_err(|e| e.to_string())
    };
    assert!(ok(sell(2, 2, &[0, 1, 2], &[0, 1], &[1.0, 1.0], 16, 4)).is_ok());
    let e = ok(sell(2, 2, &[0, 1, 2], &[0, 1], &[1.0, 1.0], 0, 4)).unwrap_err();
    assert!(e.contains("lanes"), "{e}");
    let e = ok(sell(2, 2, &[0, 1, 2], &[0, 1], &[1.0, 1.0], 16, 0)).unwrap_err();
    assert!(e.contains("sigma"), "{e}");
    let e = ok(sell(2, 2, &[0, 2, 1], &[0, 1], &[1.0, 1.0], 16, 4)).unwrap_err();
    assert!(e.contains("monotone"), "{e}");
    let e = ok(sell(2, 2, &[0, 1, 2], &[0, 5], &[1.0, 1.0], 16, 4)).unwrap_err();
    assert!(e.contains("outside"), "{e}");
    let e = ok(sell(2, 2, &[0, 1, 2], &[0, 1], &[1.0], 16, 4)).unwrap_err();
    assert!(e.contains("length"), "{e}");
}
