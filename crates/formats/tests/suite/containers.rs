//! Container tests: hand-checked storage for every format (expected arrays worked out by hand in
//! the comments) and malformed containers with their exact error text.

use sparsetir_formats::{
    Bsr, BsrPadding, Coo, Csc, Csf, CsfLevel, Csr, Dcsr, Duplicates, Ell, Field, FormatError, Nm,
    Ragged,
};

/// The seed's 4 x 6 matrix (MLIR BSR example):
/// ```text
/// 1 2 0 0 4 0
/// 0 3 0 0 0 5
/// 0 0 6 7 0 0
/// 0 0 8 0 0 0
/// ```
fn seed_dense() -> Vec<f64> {
    vec![
        1., 2., 0., 0., 4., 0., //
        0., 3., 0., 0., 0., 5., //
        0., 0., 6., 7., 0., 0., //
        0., 0., 8., 0., 0., 0.,
    ]
}

fn seed_csr() -> Csr<f64, i32> {
    Csr::from_dense(4, 6, &seed_dense()).unwrap()
}

fn err_text<T: std::fmt::Debug>(r: Result<T, FormatError>) -> String {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.to_string(),
    }
}

fn assert_err<T: std::fmt::Debug>(r: Result<T, FormatError>, fragment: &str) {
    let text = err_text(r);
    assert!(text.contains(fragment), "error {text:?} lacks {fragment:?}");
}

// ------------------------------------------------------------------ hand-checked storage

#[test]
fn csr_of_seed_matrix() {
    let csr = seed_csr();
    // Row lengths 3, 2, 2, 1 -> indptr 0 3 5 7 8; columns read row by row.
    assert_eq!(csr.indptr(), &[0, 3, 5, 7, 8]);
    assert_eq!(csr.indices(), &[0, 1, 4, 1, 5, 2, 3, 2]);
    assert_eq!(csr.values(), &[1., 2., 4., 3., 5., 6., 7., 8.]);
    assert!(csr.is_sorted());
    assert_eq!(csr.to_dense().unwrap(), seed_dense());
}

#[test]
fn csc_of_seed_matrix() {
    let csc = seed_csr().to_csc().unwrap();
    // Columns: 0 -> {0}, 1 -> {0, 1}, 2 -> {2, 3}, 3 -> {2}, 4 -> {0}, 5 -> {1}.
    assert_eq!(csc.indptr(), &[0, 1, 3, 5, 6, 7, 8]);
    assert_eq!(csc.indices(), &[0, 0, 1, 2, 3, 2, 0, 1]);
    assert_eq!(csc.values(), &[1., 2., 3., 6., 8., 7., 4., 5.]);
    assert!(csc.is_sorted());
    assert_eq!(csc.to_csr().unwrap(), seed_csr());
    let direct = Csc::<f64, i32>::from_dense(4, 6, &seed_dense()).unwrap();
    assert_eq!(direct, csc);
}

#[test]
fn dcsr_skips_empty_rows() {
    // 5 x 4 with rows 0, 2, 4 empty: row 1 = [5 0 0 7], row 3 = [0 9 0 0].
    let mut dense = vec![0.0; 20];
    dense[4] = 5.0;
    dense[7] = 7.0;
    dense[13] = 9.0;
    let d = Dcsr::<f64, i32>::from_dense(5, 4, &dense).unwrap();
    assert_eq!(d.row_indptr(), &[0, 2]);
    assert_eq!(d.row_indices(), &[1, 3]);
    assert_eq!(d.col_indptr(), &[0, 2, 3]);
    assert_eq!(d.col_indices(), &[0, 3, 1]);
    assert_eq!(d.values(), &[5., 7., 9.]);
    let csr = d.to_csr().unwrap();
    assert_eq!(csr.indptr(), &[0, 0, 2, 2, 3, 3]);
    assert_eq!(d.to_dense().unwrap(), dense);
}

#[test]
fn bsr_reproduces_the_seed_storage() {
    let bsr = Bsr::from_csr(&seed_csr(), (2, 2), BsrPadding::Deny).unwrap();
    // The seed prints positions[1] : 0 2 3, coordinates[1] : 0 2 1 and twelve values.
    assert_eq!(bsr.indptr(), &[0, 2, 3]);
    assert_eq!(bsr.indices(), &[0, 2, 1]);
    assert_eq!(
        bsr.values(),
        &[1., 2., 0., 3., 4., 0., 0., 5., 6., 7., 8., 0.]
    );
    assert_eq!(bsr.block_shape(), (2, 3));
    assert_eq!(bsr.to_dense().unwrap(), seed_dense());
    assert_eq!(bsr.to_csr().unwrap(), seed_csr());
}

#[test]
fn bsr_with_padding() {
    // 3 x 4 blocks over 4 x 6: block rows {0..3, 3..6}, block cols {0..4, 4..8}.
    // Block row 0 touches columns 0..4 and 4..6; block row 1 (row 3) only column 2.
    let bsr = Bsr::from_csr(&seed_csr(), (3, 4), BsrPadding::Allow).unwrap();
    assert_eq!(bsr.indptr(), &[0, 2, 3]);
    assert_eq!(bsr.indices(), &[0, 1, 0]);
    #[rustfmt::skip]
    let expected = [
        // block (0, 0): rows 0..3, cols 0..4
        1., 2., 0., 0.,  0., 3., 0., 0.,  0., 0., 6., 7.,
        // block (0, 1): rows 0..3, cols 4..8 (cols 6, 7 are padding)
        4., 0., 0., 0.,  0., 5., 0., 0.,  0., 0., 0., 0.,
        // block (1, 0): rows 3..6 (4, 5 padding), cols 0..4
        0., 0., 8., 0.,  0., 0., 0., 0.,  0., 0., 0., 0.,
    ];
    assert_eq!(bsr.values(), &expected);
    assert_eq!(bsr.to_dense().unwrap(), seed_dense());
}

#[test]
fn ell_of_seed_matrix() {
    let ell = Ell::from_csr_padded(&seed_csr()).unwrap();
    // Longest row has 3 entries; shorter rows padded with column 0, value 0.
    assert_eq!(ell.width(), 3);
    assert_eq!(ell.indices(), &[0, 1, 4, 1, 5, 0, 2, 3, 0, 2, 0, 0]);
    assert_eq!(
        ell.values(),
        &[1., 2., 4., 3., 5., 0., 6., 7., 0., 8., 0., 0.]
    );
    assert_eq!(ell.counts(), &[3, 2, 2, 1]);
    assert_eq!(ell.mask(), vec![1, 1, 1, 1, 1, 0, 1, 1, 0, 1, 0, 0]);
    assert_eq!(ell.to_csr().unwrap(), seed_csr());
}

#[test]
fn two_four_exact_and_packed_metadata() {
    // row 0 = [0 3 0 -5 | 1 0 0 0], row 1 = [2 0 0 0 | 0 0 0 0].
    let dense = vec![
        0., 3., 0., -5., 1., 0., 0., 0., //
        2., 0., 0., 0., 0., 0., 0., 0.,
    ];
    let nm = Nm::from_dense(2, 8, &dense, 2, 4).unwrap();
    // row 0 group 0: positions 1, 3; group 1: value at 0, fill at the smallest free slot 1;
    // row 1 group 0: value at 0, fill at 1; group 1: empty -> fill 0, 1.
    assert_eq!(nm.values(), &[3., -5., 1., 0., 2., 0., 0., 0.]);
    assert_eq!(nm.metadata(), &[1, 3, 0, 1, 0, 1, 0, 1]);
    // u16: slot k at bits 2k: 1 + 3<<2 + 1<<6 + 1<<10 + 1<<14 = 1 + 12 + 64 + 1024 + 16384.
    assert_eq!(nm.packed_metadata_u16(), vec![17485]);
    // bytes: slots 0..4 -> 1 + 12 + 0 + 64 = 77; slots 4..8 -> 0 + 4 + 0 + 64 = 68.
    assert_eq!(nm.packed_metadata_u8(), vec![77, 68]);
    let back = Nm::from_packed_u16(2, 8, 2, 4, nm.values().to_vec(), &[17485]).unwrap();
    assert_eq!(back, nm);
    assert_eq!(nm.to_dense().unwrap(), dense);
}

/// Tensor-core metadata: word `k * rows + r` holds the 16 slots of run `k` of row `r`, slot `i`
/// at bits `2 i` — the two `u16` words of the row-major packing that cover the run.
#[test]
fn two_four_tensor_core_metadata() {
    use sparsetir_formats::containers::nm::tensor_core_metadata_2of4;
    // Two rows of 64 columns (32 slots: two runs); slot s of row r at position (s + r) % 4,
    // kept as given (not an ordered pattern: the packing does not look at the order).
    let (rows, row_slots) = (2, 32);
    let positions: Vec<u8> = (0..rows * row_slots)
        .map(|k| ((k % row_slots + k / row_slots) % 4) as u8)
        .collect();
    let words = tensor_core_metadata_2of4(&positions, rows, row_slots).unwrap();
    assert_eq!(words.len(), 4);
    // Row 0, run 0: positions 0 1 2 3 0 1 2 3 ...: 0b11_10_01_00 in every byte: 0xe4e4e4e4.
    // Row 1, run 0: positions 1 2 3 0 ...: 0b00_11_10_01 = 0x39 in every byte.
    // Run 1 repeats run 0 (16 slots is a multiple of the period 4).
    assert_eq!(
        words,
        vec![0xe4e4_e4e4, 0x3939_3939, 0xe4e4_e4e4, 0x3939_3939]
    );
    // The same as the row-major u16 packing of a real 2:4 matrix, two words a run.
    let dense: Vec<f32> = (0..4 * 64)
        .map(|k| {
            if (k * 7) % 5 < 2 {
                (k % 9) as f32 - 4.0
            } else {
                0.0
            }
        })
        .collect();
    let nm = Nm::prune_from_dense(4, 64, &dense, 2, 4).unwrap();
    let tc = tensor_core_metadata_2of4(nm.metadata(), 4, 32).unwrap();
    let u16s = nm.packed_metadata_u16();
    for r in 0..4 {
        for k in 0..2 {
            let w = (r * 32 + 16 * k) / 8;
            let want = u32::from(u16s[w]) | (u32::from(u16s[w + 1]) << 16);
            assert_eq!(tc[k * 4 + r], want, "row {r}, run {k}");
        }
    }
    // Rows of a number of slots that is not whole runs, and a wrong length: errors.
    let e = tensor_core_metadata_2of4(&[0u8; 24], 1, 24).unwrap_err();
    assert!(e.to_string().contains("multiple of 16 slots"), "{e}");
    let e = tensor_core_metadata_2of4(&[0u8; 31], 1, 32).unwrap_err();
    assert!(e.to_string().contains("positions"), "{e}");
}

/// Tensor-core values: run `k` of row `r` at `16 (k rows + r)`, the halves of 8 swapped in
/// rows 4-7 of every 8 (the image of the copy engine's 32-byte swizzle).
#[test]
fn two_four_tensor_core_values() {
    use sparsetir_formats::containers::nm::tensor_core_values_2of4;
    // Ten rows of two runs (32 slots); slot s of row r holds 100 r + s.
    let (rows, row_slots) = (10, 32);
    let values: Vec<u32> = (0..rows * row_slots)
        .map(|k| (100 * (k / row_slots) + k % row_slots) as u32)
        .collect();
    let out = tensor_core_values_2of4(&values, rows, row_slots).unwrap();
    assert_eq!(out.len(), values.len());
    for r in 0..rows {
        for s in 0..row_slots {
            let (k, h, c) = (s / 16, (s % 16) / 8, s % 8);
            let swapped = (4..8).contains(&(r % 8));
            let at = 16 * (k * rows + r) + 8 * if swapped { 1 - h } else { h } + c;
            assert_eq!(out[at], (100 * r + s) as u32, "row {r}, slot {s}");
        }
    }
    // Row 4's first run starts with its second half: slots 8..16, then 0..8.
    let row4: Vec<u32> = out[16 * 4..16 * 5].to_vec();
    let want: Vec<u32> = (8..16).chain(0..8).map(|s| 400 + s).collect();
    assert_eq!(row4, want);
    // A permutation: every value once.
    let mut sorted = out.clone();
    sorted.sort_unstable();
    let mut all = values.clone();
    all.sort_unstable();
    assert_eq!(sorted, all);
    // By row unit: 2 warps of 2 units, blocks of 64 rows; tile w * 2 + u goes to u * 2 + w
    // (tiles 1 and 2 swap), rows within a tile kept, the halves swapped by the new row's bit 2.
    use sparsetir_formats::containers::nm::tensor_core_values_2of4_by_unit;
    let (rows, row_slots) = (128, 16);
    let values: Vec<u32> = (0..rows * row_slots).map(|k| k as u32).collect();
    let out = tensor_core_values_2of4_by_unit(&values, rows, row_slots, 2, 2).unwrap();
    for r in 0..rows {
        let (b, tile, i) = (r / 64, (r % 64) / 16, r % 16);
        let moved = [0, 2, 1, 3][tile];
        let p = 64 * b + 16 * moved + i;
        for s in 0..16 {
            let h = s / 8;
            let at = 16 * p + 8 * (h ^ ((p >> 2) & 1)) + s % 8;
            assert_eq!(out[at], (r * row_slots + s) as u32, "row {r}, slot {s}");
        }
    }
    assert_eq!(
        tensor_core_values_2of4_by_unit(&values, rows, row_slots, 1, 1).unwrap(),
        tensor_core_values_2of4(&values, rows, row_slots).unwrap()
    );
    let e = tensor_core_values_2of4_by_unit(&values[..96 * 16], 96, 16, 2, 2).unwrap_err();
    assert!(e.to_string().contains("whole blocks of 64 rows"), "{e}");
    let e = tensor_core_values_2of4(&[0u16; 24], 1, 24).unwrap_err();
    assert!(e.to_string().contains("multiple of 16 slots"), "{e}");
    let e = tensor_core_values_2of4(&[0u16; 31], 1, 32).unwrap_err();
    assert!(e.to_string().contains("values"), "{e}");
}

#[test]
fn two_four_prune_keeps_largest_with_ties_to_smaller_column() {
    // group 0 = [4 -4 1 4]: magnitudes 4, 4, 1, 4 -> keep columns 0 and 1 (ties: smaller col);
    // group 1 = [1 -3 2 0]: keep -3 (pos 1) and 2 (pos 2).
    let dense = [4., -4., 1., 4., 1., -3., 2., 0.];
    let nm = Nm::prune_from_dense(1, 8, &dense, 2, 4).unwrap();
    assert_eq!(nm.values(), &[4., -4., -3., 2.]);
    assert_eq!(nm.metadata(), &[0, 1, 1, 2]);
    assert_eq!(
        nm.to_dense().unwrap(),
        vec![4., -4., 0., 0., 0., -3., 2., 0.]
    );
}

#[test]
fn two_four_reproduces_the_seed_layout() {
    // The seed's 16 x 16 example lists, per row, 8 coordinates (in-group positions of the
    // 4 groups, 2 each) and 8 values. Rebuilding the matrix from the listing and compressing it
    // must give back the same coordinates and values.
    let coords: [[u8; 8]; 8] = [
        [0, 2, 0, 2, 0, 2, 0, 2],
        [1, 3, 1, 3, 1, 3, 1, 3],
        [0, 1, 2, 3, 0, 1, 2, 3],
        [2, 3, 0, 1, 2, 3, 0, 1],
        [0, 1, 0, 1, 0, 1, 0, 1],
        [0, 1, 0, 1, 0, 1, 0, 1],
        [2, 3, 2, 3, 2, 3, 2, 3],
        [2, 3, 2, 3, 2, 3, 2, 3],
    ];
    let mut dense = vec![0f32; 256];
    let mut want_meta = Vec::new();
    let mut want_vals = Vec::new();
    for row in 0..16 {
        let cs = coords[row % 8];
        for (s, &p) in cs.iter().enumerate() {
            // values : 1 2 3 4 1 2 3 4 / 5 6 7 8 5 6 7 8 / ... (period 8 rows)
            let v = ((row % 8) * 4 + s % 4 + 1) as f32;
            let col = (s / 2) * 4 + p as usize;
            dense[row * 16 + col] = v;
            want_meta.push(p);
            want_vals.push(v);
        }
    }
    let nm = Nm::from_dense(16, 16, &dense, 2, 4).unwrap();
    assert_eq!(nm.metadata(), want_meta.as_slice());
    assert_eq!(nm.values(), want_vals.as_slice());
}

#[test]
fn csf_three_d() {
    // dims 2 x 3 x 4 with (0,0,1)=1, (0,0,3)=2, (0,2,0)=3, (1,1,2)=4.
    // level 1: i=0 -> j {0, 2}, i=1 -> j {1}: indptr_1 0 2 3, indices_1 0 2 1.
    // level 2: (0,0) -> k {1, 3}, (0,2) -> {0}, (1,1) -> {2}: indptr_2 0 2 3 4, indices_2 1 3 0 2.
    let coo = Coo::new(
        vec![2, 3, 4],
        vec![vec![1, 1, 2], vec![0, 0, 3], vec![0, 2, 0], vec![0, 0, 1]],
        vec![4., 2., 3., 1.],
        Field::Real,
    )
    .unwrap();
    let csf = Csf::<f64, i32>::from_coo(&coo, Duplicates::Error).unwrap();
    assert_eq!(csf.levels()[0].indptr, vec![0, 2, 3]);
    assert_eq!(csf.levels()[0].indices, vec![0, 2, 1]);
    assert_eq!(csf.levels()[1].indptr, vec![0, 2, 3, 4]);
    assert_eq!(csf.levels()[1].indices, vec![1, 3, 0, 2]);
    assert_eq!(csf.values(), &[1., 2., 3., 4.]);
    let back = csf.to_coo();
    assert_eq!(
        back.coords,
        vec![vec![0, 0, 1], vec![0, 0, 3], vec![0, 2, 0], vec![1, 1, 2]]
    );
    assert_eq!(back.values, vec![1., 2., 3., 4.]);
}

#[test]
fn ragged_rows_are_prefixes() {
    // 3 x 4 with (0,1)=5, (2,0)=1, (2,2)=3: row 0 = [0 5], row 1 = [], row 2 = [1 0 3].
    let coo = Coo::new(
        vec![3, 4],
        vec![vec![0, 1], vec![2, 0], vec![2, 2]],
        vec![5., 1., 3.],
        Field::Real,
    )
    .unwrap();
    let r = Ragged::<f64, i32>::from_coo(&coo, Duplicates::Sum).unwrap();
    assert_eq!(r.indptr(), &[0, 2, 2, 5]);
    assert_eq!(r.values(), &[0., 5., 1., 0., 3.]);
    assert_eq!(r.row(2), Some(&[1., 0., 3.][..]));
}

#[test]
fn duplicate_policies() {
    // 2 x 2 with (0,1)=1, (0,1)=2, (1,0)=3.
    let coo = Coo::new(
        vec![2, 2],
        vec![vec![0, 1], vec![1, 0], vec![0, 1]],
        vec![1., 3., 2.],
        Field::Real,
    )
    .unwrap();
    let sum = Csr::<f64, i32>::from_coo(&coo, Duplicates::Sum).unwrap();
    assert_eq!(sum.indptr(), &[0, 1, 2]);
    assert_eq!(sum.indices(), &[1, 0]);
    assert_eq!(sum.values(), &[3., 3.]);
    assert!(sum.is_sorted());
    let keep = Csr::<f64, i32>::from_coo(&coo, Duplicates::Keep).unwrap();
    assert_eq!(keep.indptr(), &[0, 2, 3]);
    assert_eq!(keep.indices(), &[1, 1, 0]);
    assert_eq!(keep.values(), &[1., 2., 3.]);
    assert!(!keep.is_sorted());
    assert_eq!(keep.to_dense().unwrap(), vec![0., 3., 3., 0.]);
    assert_err(
        Csr::<f64, i32>::from_coo(&coo, Duplicates::Error),
        "duplicate entry at (0, 1)",
    );
    assert_err(
        Csc::<f64, i32>::from_coo(&coo, Duplicates::Error),
        "duplicate entry at (0, 1)",
    );
}

#[test]
fn other_value_and_index_types() {
    let dense: Vec<i32> = vec![0, 7, -2, 0, 0, 0];
    let csr = Csr::<i32, i64>::from_dense(2, 3, &dense).unwrap();
    assert_eq!(csr.indptr(), &[0i64, 2, 2]);
    let coo = csr.to_coo();
    assert_eq!(coo.field, Field::Integer);
    assert_eq!(coo.values, vec![7.0, -2.0]);
    let f: Csr<f32, i32> = Csr::from_coo(&coo, Duplicates::Sum).unwrap();
    assert_eq!(f.values(), &[7.0f32, -2.0]);
    let narrow: Csr<i32, i32> = csr.cast_index().unwrap();
    assert_eq!(narrow.indices(), &[1, 2]);
}

// ------------------------------------------------------------------ malformed containers

#[test]
fn bad_indptr_start() {
    let r = Csr::<f64, i32>::try_new(2, 3, vec![1, 1, 2], vec![0, 1], vec![1., 2.], true);
    assert_eq!(err_text(r), "indptr[0] = 1, expected 0");
}

#[test]
fn non_monotone_indptr() {
    let r = Csr::<f64, i32>::try_new(3, 9, vec![0, 7, 5, 7], vec![0; 7], vec![0.; 7], false);
    assert_eq!(err_text(r), "indptr[2] = 5 is less than indptr[1] = 7");
}

#[test]
fn wrong_last_indptr() {
    let r = Csr::<f64, i32>::try_new(2, 3, vec![0, 1, 2], vec![0, 1, 2], vec![1.; 3], true);
    assert_eq!(
        err_text(r),
        "indptr[2] = 2 does not equal nnz = 3 (the length of indices)"
    );
}

#[test]
fn wrong_indptr_length() {
    let r = Csr::<f64, i32>::try_new(3, 3, vec![0, 1, 2], vec![0, 1], vec![1.; 2], true);
    assert_eq!(err_text(r), "indptr has length 3, expected 4 (rows + 1)");
}

#[test]
fn index_out_of_range() {
    let r = Csr::<f64, i32>::try_new(1, 32, vec![0, 2], vec![3, 40], vec![1.; 2], true);
    assert_eq!(err_text(r), "indices[1] = 40 is outside 0..32");
    let neg = Csc::<f64, i64>::try_new(4, 1, vec![0, 1], vec![-1], vec![1.], true);
    assert_eq!(err_text(neg), "indices[0] = -1 is outside 0..4");
}

#[test]
fn unsorted_row() {
    let r = Csr::<f64, i32>::try_new(2, 8, vec![0, 1, 4], vec![0, 2, 5, 3], vec![1.; 4], true);
    assert_eq!(err_text(r), "row 1 is not sorted at indices[3] (3 after 5)");
    // The same arrays are fine when not declared sorted.
    assert!(
        Csr::<f64, i32>::try_new(2, 8, vec![0, 1, 4], vec![0, 2, 5, 3], vec![1.; 4], false).is_ok()
    );
    let dup = Csc::<f64, i32>::try_new(2, 1, vec![0, 2], vec![1, 1], vec![1.; 2], true);
    assert_eq!(
        err_text(dup),
        "column 0 is not sorted at indices[1] (1 after 1)"
    );
}

#[test]
fn values_length_mismatch() {
    let r = Csr::<f64, i32>::try_new(1, 3, vec![0, 3], vec![0, 1, 2], vec![1.; 2], true);
    assert_eq!(err_text(r), "values has length 2, expected 3 (nnz)");
}

#[test]
fn dcsr_unsorted_stored_rows() {
    let r = Dcsr::<f64, i32>::try_new(
        4,
        4,
        vec![0, 2],
        vec![2, 1],
        vec![0, 1, 2],
        vec![0, 0],
        vec![1., 1.],
        true,
    );
    assert_eq!(
        err_text(r),
        "root 0 is not sorted at row_indices[1] (1 after 2)"
    );
}

#[test]
fn bsr_block_not_dividing() {
    let r = Bsr::<f64, i32>::try_new(10, 6, (3, 2), BsrPadding::Deny, vec![0; 5], vec![], vec![]);
    assert_eq!(
        err_text(r),
        "block size 3 does not divide 10 rows (declare padding to allow it)"
    );
    let csr = Csr::<f64, i32>::from_dense(2, 3, &[1., 0., 0., 0., 0., 1.]).unwrap();
    assert_err(
        Bsr::from_csr(&csr, (2, 2), BsrPadding::Deny),
        "block size 2 does not divide 3 columns",
    );
    assert_err(
        Bsr::from_csr(&csr, (0, 2), BsrPadding::Allow),
        "BSR block rows must be positive, got 0",
    );
}

#[test]
fn bsr_padding_must_be_zero() {
    // 3 x 3 with one 2 x 2 block at block (1, 1): its row 1 and column 1 lie outside.
    let r = Bsr::<f64, i32>::try_new(
        3,
        3,
        (2, 2),
        BsrPadding::Allow,
        vec![0, 0, 1],
        vec![1],
        vec![1., 9., 0., 0.],
    );
    assert_eq!(
        err_text(r),
        "values[1] = 9 lies in the padding outside the 3x3 matrix"
    );
}

#[test]
fn ell_row_too_long() {
    assert_eq!(
        err_text(Ell::from_csr(&seed_csr(), 2)),
        "row 0 has 3 entries, more than the ELL width 2"
    );
}

#[test]
fn ell_bad_padding_and_counts() {
    // 2 rows, width 2: row 1 has one entry, so slot 3 is padding and must hold pad index 0.
    let r = Ell::<f64, i32>::try_new(2, 4, 2, vec![0, 1, 3, 2], vec![1.; 4], vec![2, 1], 0, true);
    assert_eq!(
        err_text(r),
        "indices[3] = 2 is a padding slot of row 1 but is not the pad index 0"
    );
    let v = Ell::<f64, i32>::try_new(2, 4, 2, vec![0, 1, 3, 0], vec![1.; 4], vec![2, 1], 0, true);
    assert_eq!(
        err_text(v),
        "values[3] = 1 is a padding slot of row 1 but is not zero"
    );
    let c = Ell::<f64, i32>::try_new(1, 4, 2, vec![0, 1], vec![1.; 2], vec![3], 0, true);
    assert_eq!(err_text(c), "counts[0] = 3 is outside 0..3");
}

#[test]
fn nm_group_overfull() {
    let dense = [1., 0., 2., 3., 0., 0., 0., 0.];
    assert_eq!(
        err_text(Nm::from_dense(1, 8, &dense, 2, 4)),
        "row 0, group 0 (columns 0..4) holds 3 values, more than n = 2 of the 2:4 pattern"
    );
}

#[test]
fn nm_bad_metadata() {
    let r = Nm::<f32>::try_new(1, 4, 2, 4, vec![1., 2.], vec![0, 4]);
    assert_eq!(err_text(r), "metadata[1] = 4 is outside 0..4");
    let o = Nm::<f32>::try_new(1, 8, 2, 4, vec![1.; 4], vec![0, 1, 1, 1]);
    assert_eq!(
        err_text(o),
        "metadata of row 0, group 1 is not strictly increasing at metadata[3] (1 after 1)"
    );
    let p = Nm::<f32>::try_new(1, 6, 2, 4, vec![], vec![]);
    assert_eq!(
        err_text(p),
        "invalid 2:4 pattern: groups of 4 do not divide 6 columns"
    );
    let w = Nm::<f32>::from_packed_u16(1, 16, 2, 4, vec![0.; 8], &[0, 0]);
    assert_eq!(
        err_text(w),
        "packed metadata has length 2, expected 1 (8 slots, 8 per u16)"
    );
}

#[test]
fn csf_level_mismatch() {
    let one = vec![CsfLevel {
        indptr: vec![0, 1],
        indices: vec![0],
    }];
    let r = Csf::<f64, i32>::try_new(vec![1, 2, 2], one, vec![1.]);
    assert_eq!(
        err_text(r),
        "CSF of rank 3 needs 2 compressed levels, got 1"
    );
    // Level 1 stores 3 elements, so level 2 needs 4 indptr entries.
    let levels = vec![
        CsfLevel {
            indptr: vec![0, 3],
            indices: vec![0, 1, 2],
        },
        CsfLevel {
            indptr: vec![0, 1, 2],
            indices: vec![0, 0],
        },
    ];
    let r = Csf::<f64, i32>::try_new(vec![1, 3, 2], levels, vec![1., 1.]);
    assert_eq!(
        err_text(r),
        "indptr_2 has length 3, expected 4 (level 1 nnz + 1)"
    );
}

#[test]
fn index_overflow_narrowing_to_i32() {
    let wide = Csr::<f64, i64>::try_new(
        1,
        5_000_000_000,
        vec![0, 1],
        vec![4_000_000_000],
        vec![1.],
        true,
    )
    .unwrap();
    assert_eq!(
        err_text(wide.cast_index::<i32>()),
        "indices[0] = 4000000000 does not fit in i32"
    );
    let coo = Coo::new(
        vec![1, 3_000_000_000],
        vec![vec![0, 2_999_999_999]],
        vec![1.],
        Field::Real,
    )
    .unwrap();
    assert_eq!(
        err_text(Csr::<f64, i32>::from_coo(&coo, Duplicates::Sum)),
        "indices[0] = 2999999999 does not fit in i32"
    );
}

#[test]
fn ragged_row_too_long() {
    let r = Ragged::<f64, i32>::try_new(2, 2, vec![0, 1, 4], vec![1.; 4]);
    assert_eq!(
        err_text(r),
        "row 1 has 3 entries, more than the ragged length 2"
    );
}

#[test]
fn wrong_rank_and_dense_length() {
    let coo = Coo::empty(vec![2, 2, 2]);
    assert_eq!(
        err_text(Csr::<f64, i32>::from_coo(&coo, Duplicates::Sum)),
        "expected a rank-2 tensor, got rank 3"
    );
    assert_eq!(
        err_text(Csr::<f64, i32>::from_dense(2, 3, &[1.; 5])),
        "dense has length 5, expected 6 (2 x 3)"
    );
    assert_eq!(
        err_text(Csr::<f64, i32>::from_triplets(
            2,
            2,
            vec![(0, 0, 1.), (2, 1, 1.)],
            Duplicates::Sum
        )),
        "triplet rows[1] = 2 is outside 0..2"
    );
}

#[test]
fn huge_shapes_are_errors_not_aborts() {
    let coo = Coo::empty(vec![usize::MAX / 2, 3]);
    assert_err(
        Csr::<f64, i32>::from_coo(&coo, Duplicates::Sum),
        "has too many elements",
    );
    assert_err(
        Csr::<f64, i32>::from_dense(usize::MAX, 2, &[]),
        "has too many elements",
    );
    let empty = Dcsr::<f64, i64>::try_new(
        usize::MAX,
        1,
        vec![0, 0],
        vec![],
        vec![0],
        vec![],
        vec![],
        true,
    )
    .unwrap();
    assert_err(empty.to_csr(), "has too many elements");
}
