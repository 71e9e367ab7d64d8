//! Property tests: every container round-trips through COO and through dense arrays on random
//! matrices (0x0, 1x1, empty rows and columns, full rows, repeated coordinates), with the
//! expected results computed independently here (summing map, dense loop, reference pruning).

use std::collections::BTreeMap;

use proptest::prelude::*;
use sparsetir_formats::{
    Bsr, BsrPadding, Coo, Csc, Csf, Csr, Dcsr, Duplicates, Ell, Field, FormatError, Nm, Ragged,
};

type Entries = Vec<(usize, usize, f64)>;

/// The reference: coordinates -> summed value (values are positive, so sums never cancel).
fn reference(entries: &Entries) -> BTreeMap<(usize, usize), f64> {
    let mut map = BTreeMap::new();
    for &(r, c, v) in entries {
        *map.entry((r, c)).or_insert(0.0) += v;
    }
    map
}

fn ref_dense(rows: usize, cols: usize, entries: &Entries) -> Vec<f64> {
    let mut d = vec![0.0; rows * cols];
    for &(r, c, v) in entries {
        d[r * cols + c] += v;
    }
    d
}

fn make_coo(rows: usize, cols: usize, entries: &Entries) -> Coo {
    Coo::new(
        vec![rows, cols],
        entries
            .iter()
            .map(|&(r, c, _)| vec![r as i64, c as i64])
            .collect(),
        entries.iter().map(|e| e.2).collect(),
        Field::Real,
    )
    .expect("generated COO is valid")
}

/// A COO's entries as a sorted map (asserting it holds no repeated coordinate).
fn coo_map(coo: &Coo) -> BTreeMap<(usize, usize), f64> {
    let mut map = BTreeMap::new();
    for (c, &v) in coo.coords.iter().zip(&coo.values) {
        let old = map.insert((c[0] as usize, c[1] as usize), v);
        assert!(old.is_none(), "repeated coordinate {c:?}");
    }
    map
}

fn check_csr_family(rows: usize, cols: usize, entries: &Entries) {
    let coo = make_coo(rows, cols, entries);
    let want = reference(entries);
    let dense = ref_dense(rows, cols, entries);

    let csr = Csr::<f64, i32>::from_coo(&coo, Duplicates::Sum).unwrap();
    assert_eq!(coo_map(&csr.to_coo()), want);
    assert_eq!(csr.to_dense().unwrap(), dense);
    assert_eq!(Csr::from_dense(rows, cols, &dense).unwrap(), csr);
    assert_eq!(
        Csr::from_coo(&csr.to_coo(), Duplicates::Error).unwrap(),
        csr
    );
    assert_eq!(csr.nnz(), want.len());

    let csc = Csc::<f64, i32>::from_coo(&coo, Duplicates::Sum).unwrap();
    assert_eq!(coo_map(&csc.to_coo()), want);
    assert_eq!(csc.to_dense().unwrap(), dense);
    assert_eq!(csc.to_csr().unwrap(), csr);
    assert_eq!(csr.to_csc().unwrap(), csc);
    assert_eq!(Csc::from_dense(rows, cols, &dense).unwrap(), csc);

    let dcsr = Dcsr::<f64, i32>::from_coo(&coo, Duplicates::Sum).unwrap();
    assert_eq!(coo_map(&dcsr.to_coo()), want);
    assert_eq!(dcsr.to_dense().unwrap(), dense);
    assert_eq!(dcsr.to_csr().unwrap(), csr);
    let mut stored_rows: Vec<i32> = want.keys().map(|&(r, _)| r as i32).collect();
    stored_rows.dedup();
    assert_eq!(dcsr.row_indices(), stored_rows.as_slice());
    assert_eq!(Dcsr::from_dense(rows, cols, &dense).unwrap(), dcsr);

    let ell = Ell::<f64, i32>::from_coo(&coo, None, Duplicates::Sum).unwrap();
    let mut lens = vec![0usize; rows];
    for &(r, _) in want.keys() {
        lens[r] += 1;
    }
    assert_eq!(ell.width(), lens.iter().copied().max().unwrap_or(0));
    assert_eq!(coo_map(&ell.to_coo()), want);
    assert_eq!(ell.to_dense().unwrap(), dense);
    assert_eq!(ell.to_csr().unwrap(), csr);
    // A wider ELL has padding in every row: fine unless there is no column for the pad index.
    match Ell::from_csr(&csr, ell.width() + 1) {
        Ok(wider) => assert_eq!(wider.to_csr().unwrap(), csr),
        Err(e) => {
            assert!(cols == 0 && rows > 0);
            assert_eq!(
                e.to_string(),
                "the pad index 0 is outside 0..0 (padding slots need a valid column)"
            );
        }
    }
    assert_eq!(Ell::from_dense(rows, cols, &dense, None).unwrap(), ell);

    // Keep: same dense matrix, one stored entry per input entry.
    let keep = Csr::<f64, i32>::from_coo(&coo, Duplicates::Keep).unwrap();
    assert_eq!(keep.nnz(), entries.len());
    assert_eq!(keep.to_dense().unwrap(), dense);
    assert_eq!(keep.is_sorted(), entries.len() == want.len());

    // Other value and index types.
    let wide = Csr::<i32, i64>::from_coo(&coo, Duplicates::Sum).unwrap();
    let narrow: Csr<i32, i32> = wide.cast_index().unwrap();
    assert_eq!(
        narrow,
        Csr::<i32, i32>::from_coo(&coo, Duplicates::Sum).unwrap()
    );
    let f: Vec<f32> = dense.iter().map(|&x| x as f32).collect();
    assert_eq!(
        Csr::<f32, i64>::from_coo(&coo, Duplicates::Sum)
            .unwrap()
            .to_dense()
            .unwrap(),
        f
    );
}

fn check_bsr(rows: usize, cols: usize, entries: &Entries, block: (usize, usize)) {
    let coo = make_coo(rows, cols, entries);
    let want = reference(entries);
    let dense = ref_dense(rows, cols, entries);
    let bsr = Bsr::<f64, i32>::from_coo(&coo, block, BsrPadding::Allow, Duplicates::Sum).unwrap();
    assert_eq!(coo_map(&bsr.to_coo()), want);
    assert_eq!(bsr.to_dense().unwrap(), dense);
    let blocks: std::collections::BTreeSet<_> = want
        .keys()
        .map(|&(r, c)| (r / block.0, c / block.1))
        .collect();
    assert_eq!(bsr.nnz_blocks(), blocks.len());
    assert_eq!(
        Bsr::from_coo(&bsr.to_coo(), block, BsrPadding::Allow, Duplicates::Error).unwrap(),
        bsr
    );
    assert_eq!(
        Bsr::from_dense(rows, cols, &dense, block, BsrPadding::Allow).unwrap(),
        bsr
    );
    let divides = rows.is_multiple_of(block.0) && cols.is_multiple_of(block.1);
    let deny = Bsr::<f64, i32>::from_coo(&coo, block, BsrPadding::Deny, Duplicates::Sum);
    match deny {
        Ok(d) => {
            assert!(divides);
            assert_eq!(d.to_dense().unwrap(), dense);
        }
        Err(e) => {
            assert!(!divides);
            assert!(matches!(e, FormatError::BlockNotDividing { .. }), "{e}");
        }
    }
}

fn check_ragged(rows: usize, cols: usize, entries: &Entries) {
    let dense = ref_dense(rows, cols, entries);
    let r = Ragged::<f64, i32>::from_dense(rows, cols, &dense).unwrap();
    assert_eq!(r.to_dense().unwrap(), dense);
    // Each row is stored up to its last non-zero.
    for i in 0..rows {
        let row = &dense[i * cols..(i + 1) * cols];
        let len = row.iter().rposition(|&v| v != 0.0).map_or(0, |p| p + 1);
        assert_eq!(r.row(i).unwrap(), &row[..len]);
    }
    assert_eq!(Ragged::from_coo(&r.to_coo(), Duplicates::Error).unwrap(), r);
}

/// Reference 2:4 pruning: per group keep the 2 largest magnitudes, ties to the smaller column.
fn ref_prune(rows: usize, cols: usize, dense: &[f64], n: usize, m: usize) -> Vec<f64> {
    let mut out = vec![0.0; dense.len()];
    for i in 0..rows {
        for g in 0..cols / m {
            let mut cand: Vec<(usize, f64)> = (g * m..g * m + m)
                .map(|j| (j, dense[i * cols + j]))
                .filter(|e| e.1 != 0.0)
                .collect();
            cand.sort_by(|a, b| {
                b.1.abs()
                    .partial_cmp(&a.1.abs())
                    .unwrap()
                    .then(a.0.cmp(&b.0))
            });
            for &(j, v) in cand.iter().take(n) {
                out[i * cols + j] = v;
            }
        }
    }
    out
}

fn check_nm(rows: usize, cols: usize, entries: &Entries, n: usize, m: usize) {
    let dense = ref_dense(rows, cols, entries);
    let pruned = Nm::prune_from_dense(rows, cols, &dense, n, m).unwrap();
    let want = ref_prune(rows, cols, &dense, n, m);
    assert_eq!(pruned.to_dense().unwrap(), want);
    assert_eq!(pruned.values().len(), rows * cols / m * n);
    let back = Nm::from_packed_u16(
        rows,
        cols,
        n,
        m,
        pruned.values().to_vec(),
        &pruned.packed_metadata_u16(),
    )
    .unwrap();
    assert_eq!(back, pruned);
    // The pruned matrix compresses exactly, and back through COO / CSR.
    assert_eq!(Nm::from_dense(rows, cols, &want, n, m).unwrap(), pruned);
    assert_eq!(
        Nm::from_coo(&pruned.to_coo(), n, m, Duplicates::Error).unwrap(),
        pruned
    );
    let csr: Csr<f64, i32> = pruned.to_csr().unwrap();
    assert_eq!(Nm::from_csr(&csr, n, m).unwrap(), pruned);
    // Exact compression of the original succeeds iff no group is overfull.
    let overfull = (0..rows).any(|i| {
        (0..cols / m).any(|g| {
            dense[i * cols + g * m..i * cols + g * m + m]
                .iter()
                .filter(|&&v| v != 0.0)
                .count()
                > n
        })
    });
    match Nm::<f64>::from_coo(&make_coo(rows, cols, entries), n, m, Duplicates::Sum) {
        Ok(exact) => {
            assert!(!overfull);
            assert_eq!(exact.to_dense().unwrap(), dense);
        }
        Err(e) => {
            assert!(overfull);
            assert!(matches!(e, FormatError::NmGroupOverfull { .. }), "{e}");
        }
    }
}

fn check_csf(dims: &[usize], coords: &[Vec<i64>], values: &[f64]) {
    let coo = Coo::new(dims.to_vec(), coords.to_vec(), values.to_vec(), Field::Real).unwrap();
    let mut want: BTreeMap<Vec<i64>, f64> = BTreeMap::new();
    for (c, &v) in coords.iter().zip(values) {
        *want.entry(c.clone()).or_insert(0.0) += v;
    }
    let csf = Csf::<f64, i32>::from_coo(&coo, Duplicates::Sum).unwrap();
    let back = csf.to_coo();
    let got: BTreeMap<Vec<i64>, f64> = back
        .coords
        .iter()
        .cloned()
        .zip(back.values.iter().copied())
        .collect();
    assert_eq!(got.len(), back.values.len());
    assert_eq!(got, want);
    // The output is in lexicographic order.
    assert!(back.coords.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(Csf::from_coo(&back, Duplicates::Error).unwrap(), csf);
}

/// Random matrices: shape up to 6 x 8, up to 30 entries (repeats likely), optionally a full row.
fn matrix(
    max_rows: usize,
    col_unit: usize,
    max_units: usize,
) -> impl Strategy<Value = (usize, usize, Entries)> {
    (0..=max_rows, 0..=max_units)
        .prop_flat_map(move |(r, u)| {
            let c = u * col_unit;
            let entries = if r == 0 || c == 0 {
                Just(Vec::new()).boxed()
            } else {
                prop::collection::vec((0..r, 0..c, 1u8..10), 0..30)
                    .prop_map(|v| {
                        v.into_iter()
                            .map(|(a, b, x)| (a, b, f64::from(x)))
                            .collect()
                    })
                    .boxed()
            };
            (Just(r), Just(c), entries, any::<bool>(), 0..r.max(1))
        })
        .prop_map(
            |(r, c, mut entries, full, row): (usize, usize, Entries, bool, usize)| {
                if full && r > 0 {
                    entries.extend((0..c).map(|j| (row, j, (j % 7 + 1) as f64)));
                }
                (r, c, entries)
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn csr_csc_dcsr_ell_roundtrip((rows, cols, entries) in matrix(6, 1, 8)) {
        check_csr_family(rows, cols, &entries);
        check_ragged(rows, cols, &entries);
    }

    #[test]
    fn bsr_roundtrip((rows, cols, entries) in matrix(7, 1, 8), br in 1usize..4, bc in 1usize..4) {
        check_bsr(rows, cols, &entries, (br, bc));
    }

    #[test]
    fn nm_roundtrip((rows, cols, entries) in matrix(5, 4, 3), wide in any::<bool>()) {
        check_nm(rows, cols, &entries, 2, 4);
        if wide && cols.is_multiple_of(8) {
            check_nm(rows, cols, &entries, 3, 8);
        }
        if cols.is_multiple_of(2) {
            check_nm(rows, cols, &entries, 1, 2);
        }
    }

    #[test]
    fn csf_roundtrip(
        dims in prop::collection::vec(1usize..5, 1..5),
        raw in prop::collection::vec((prop::collection::vec(0usize..100, 4), 1u8..10), 0..25),
    ) {
        let coords: Vec<Vec<i64>> = raw
            .iter()
            .map(|(c, _)| dims.iter().zip(c).map(|(&d, &x)| (x % d) as i64).collect())
            .collect();
        let values: Vec<f64> = raw.iter().map(|e| f64::from(e.1)).collect();
        // Values are positive, so a rank-1 (dense) CSF reports every entry too.
        check_csf(&dims, &coords, &values);
    }
}

#[test]
fn edge_shapes() {
    // 0 x 0, 0 x n, n x 0, 1 x 1 (empty and full), an empty column, a full row.
    for (rows, cols, entries) in [
        (0, 0, vec![]),
        (0, 3, vec![]),
        (3, 0, vec![]),
        (1, 1, vec![]),
        (1, 1, vec![(0, 0, 2.0)]),
        (2, 3, vec![(1, 0, 1.0), (1, 1, 2.0), (1, 2, 3.0)]),
        (
            3,
            3,
            vec![(0, 0, 1.0), (2, 0, 1.0), (2, 2, 4.0), (2, 2, 1.0)],
        ),
    ] {
        check_csr_family(rows, cols, &entries);
        check_ragged(rows, cols, &entries);
        for block in [(1, 1), (2, 2), (2, 3)] {
            check_bsr(rows, cols, &entries, block);
        }
    }
    check_nm(0, 0, &vec![], 2, 4);
    check_nm(
        1,
        4,
        &vec![(0, 0, 1.0), (0, 1, 2.0), (0, 2, 3.0), (0, 3, 4.0)],
        2,
        4,
    );
    check_csf(&[0], &[], &[]);
    check_csf(&[0, 0, 0], &[], &[]);
    check_csf(&[1, 1, 1], &[vec![0, 0, 0]], &[5.0]);
}
