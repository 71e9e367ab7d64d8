//! Packing and unpacking tests: hand-checked CSR / CSF / ELL / BSR / dense / DCSR / ragged
//! storage, structure validation errors, and a pack→unpack round-trip property.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use sparsetir_formats::pack::{group_structure, PackError};
use sparsetir_formats::TensorData;
use sparsetir_formats::{
    group_layout, pack, tns, unpack, validate_levels, Coo, Field, LevelSpec, PackedLevel,
};
use sparsetir_ir::{AxisKind, DType};

fn coo(dims: &[usize], entries: &[(&[i64], f64)]) -> Coo {
    Coo::new(
        dims.to_vec(),
        entries.iter().map(|(c, _)| c.to_vec()).collect(),
        entries.iter().map(|(_, v)| *v).collect(),
        Field::Real,
    )
    .expect("valid test COO")
}

fn csr_levels() -> Vec<LevelSpec> {
    vec![
        LevelSpec::dense_fixed(None),
        LevelSpec::compressed_varied(0),
    ]
}

/// 4 x 5 with an empty row 1 and a duplicate at (2, 2) (1.5 + 2.5 = 4).
fn csr_coo() -> Coo {
    coo(
        &[4, 5],
        &[
            (&[2, 3], 5.0),
            (&[0, 4], 2.0),
            (&[2, 2], 1.5),
            (&[3, 4], 6.0),
            (&[0, 1], 1.0),
            (&[2, 0], 3.0),
            (&[2, 2], 2.5),
        ],
    )
}

#[test]
fn csr_with_empty_row() {
    let p = pack(&csr_levels(), &csr_coo(), 0).unwrap();
    assert_eq!(p.levels[0].count, 4);
    assert_eq!(p.levels[1].indptr.as_deref(), Some(&[0, 2, 2, 5, 6][..]));
    assert_eq!(
        p.levels[1].indices.as_deref(),
        Some(&[1, 4, 0, 2, 3, 4][..])
    );
    assert_eq!(p.levels[1].count, 6);
    assert_eq!(p.levels[1].length, 5);
    assert_eq!(p.shape, vec![6]);
    assert_eq!(p.values, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let u = unpack(&csr_levels(), &p.levels, &p.values).unwrap();
    let want: Vec<Vec<i64>> = vec![
        vec![0, 1],
        vec![0, 4],
        vec![2, 0],
        vec![2, 2],
        vec![2, 3],
        vec![3, 4],
    ];
    assert_eq!(u.coords, want);
    assert_eq!(u.values, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(u.dims, vec![4, 5]);
}

#[test]
fn extra_storage_appends_zeros() {
    let p = pack(&csr_levels(), &csr_coo(), 3).unwrap();
    assert_eq!(p.values.len(), 9);
    assert_eq!(&p.values[6..], &[0.0, 0.0, 0.0]);
    assert_eq!(p.shape, vec![6]);
}

#[test]
fn csf_3d() {
    let levels = vec![
        LevelSpec::dense_fixed(None),
        LevelSpec::compressed_varied(0),
        LevelSpec::compressed_varied(1),
    ];
    let c = coo(
        &[2, 3, 4],
        &[
            (&[1, 1, 2], 5.0),
            (&[0, 0, 3], 2.0),
            (&[0, 2, 0], 3.0),
            (&[0, 0, 1], 1.0),
            (&[1, 1, 1], 4.0),
        ],
    );
    let p = pack(&levels, &c, 0).unwrap();
    assert_eq!(p.levels[1].indptr.as_deref(), Some(&[0, 2, 3][..]));
    assert_eq!(p.levels[1].indices.as_deref(), Some(&[0, 2, 1][..]));
    assert_eq!(p.levels[2].indptr.as_deref(), Some(&[0, 2, 3, 5][..]));
    assert_eq!(p.levels[2].indices.as_deref(), Some(&[1, 3, 0, 1, 2][..]));
    assert_eq!(p.shape, vec![5]);
    assert_eq!(p.values, vec![1.0, 2.0, 3.0, 4.0, 5.0]);
}

fn ell_levels(c: Option<usize>) -> Vec<LevelSpec> {
    vec![
        LevelSpec::dense_fixed(None),
        LevelSpec::compressed_fixed(0, c),
    ]
}

#[test]
fn ell_c2() {
    let c = coo(
        &[3, 4],
        &[
            (&[0, 3], 2.0),
            (&[0, 0], 1.0),
            (&[1, 1], 3.0),
            (&[1, 2], 4.0),
            (&[2, 3], 6.0),
            (&[2, 2], 5.0),
        ],
    );
    for given in [Some(2), None] {
        let p = pack(&ell_levels(given), &c, 0).unwrap();
        assert_eq!(p.levels[1].nnz_cols, Some(2));
        assert_eq!(p.levels[1].count, 6);
        assert_eq!(p.levels[1].indptr, None);
        assert_eq!(
            p.levels[1].indices.as_deref(),
            Some(&[0, 3, 1, 2, 2, 3][..])
        );
        assert_eq!(p.shape, vec![3, 2]);
        assert_eq!(p.values, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let u = unpack(&ell_levels(given), &p.levels, &p.values).unwrap();
        assert_eq!(u.coords.len(), 6);
        assert_eq!(u.coords[3], vec![1, 2]);
        assert_eq!(u.values[3], 4.0);
    }
}

#[test]
fn ell_wrong_row_count() {
    // Row 1 has a single entry.
    let c = coo(
        &[3, 4],
        &[
            (&[0, 0], 1.0),
            (&[0, 3], 1.0),
            (&[1, 1], 1.0),
            (&[2, 0], 1.0),
        ],
    );
    let e = pack(&ell_levels(Some(2)), &c, 0).unwrap_err();
    assert_eq!(
        e,
        PackError::NnzColsMismatch {
            level: 1,
            parent: 1,
            count: 1,
            expected: 2
        }
    );
    assert!(e
        .to_string()
        .contains("parent position 1 has 1 entries, expected nnz_cols = 2"));
    // Inferred from row 0 (2 entries) as well.
    let e = pack(&ell_levels(None), &c, 0).unwrap_err();
    assert!(matches!(
        e,
        PackError::NnzColsMismatch {
            parent: 1,
            count: 1,
            expected: 2,
            ..
        }
    ));
    // An empty row counts as wrong unless c = 0.
    let c = coo(&[3, 4], &[(&[0, 0], 1.0), (&[2, 0], 1.0)]);
    let e = pack(&ell_levels(Some(1)), &c, 0).unwrap_err();
    assert_eq!(
        e,
        PackError::NnzColsMismatch {
            level: 1,
            parent: 1,
            count: 0,
            expected: 1
        }
    );
    let empty = coo(&[3, 4], &[]);
    let p = pack(&ell_levels(Some(0)), &empty, 0).unwrap();
    assert_eq!(p.shape, vec![3, 0]);
    assert!(p.values.is_empty());
}

#[test]
fn bsr_from_tns_block_coordinates() {
    // Block size 2, 2 x 3 blocks; blocks (0,1), (1,0), (1,2) hold entries.
    let text =
        "# io jo ii ji value\n1 2 1 1 1.0\n1 2 2 2 2.0\n2 1 1 2 3.0\n2 3 2 1 4.0\n2 3 1 1 5.0\n";
    let c = tns::parse_tns(text).unwrap();
    assert_eq!(c.dims, vec![2, 3, 2, 2]);
    let levels = vec![
        LevelSpec::dense_fixed(None),
        LevelSpec::compressed_varied(0),
        LevelSpec::dense_fixed(Some(2)),
        LevelSpec::dense_fixed(Some(2)),
    ];
    let p = pack(&levels, &c, 0).unwrap();
    assert_eq!(p.levels[1].indptr.as_deref(), Some(&[0, 1, 3][..]));
    assert_eq!(p.levels[1].indices.as_deref(), Some(&[1, 0, 2][..]));
    assert_eq!(p.shape, vec![3, 2, 2]);
    #[rustfmt::skip]
    let want = vec![
        1.0, 0.0, 0.0, 2.0, // block (0, 1)
        0.0, 3.0, 0.0, 0.0, // block (1, 0)
        5.0, 0.0, 4.0, 0.0, // block (1, 2)
    ];
    assert_eq!(p.values, want);
    let u = unpack(&levels, &p.levels, &p.values).unwrap();
    assert_eq!(u.coords.len(), 12);
    assert_eq!(u.coords[9], vec![1, 2, 0, 1]);
    assert_eq!(u.values[10], 4.0);
}

#[test]
fn dense_2d() {
    let levels = vec![LevelSpec::dense_fixed(None), LevelSpec::dense_fixed(None)];
    let c = coo(&[2, 3], &[(&[1, 2], 7.0), (&[0, 0], 1.0)]);
    let p = pack(&levels, &c, 0).unwrap();
    assert_eq!(p.shape, vec![2, 3]);
    assert_eq!(p.values, vec![1.0, 0.0, 0.0, 0.0, 0.0, 7.0]);
    assert_eq!(p.levels[0].count, 2);
    assert_eq!(p.levels[1].count, 3);
    let u = unpack(&levels, &p.levels, &p.values).unwrap();
    assert_eq!(u.coords.len(), 6);
    assert_eq!(u.coords[5], vec![1, 2]);
    assert_eq!(u.values[5], 7.0);
}

#[test]
fn dcsr_with_unit_root() {
    let levels = vec![
        LevelSpec::dense_fixed(Some(1)),
        LevelSpec::compressed_varied(0),
        LevelSpec::compressed_varied(1),
    ];
    let c = coo(
        &[1, 5, 4],
        &[(&[0, 4, 2], 3.0), (&[0, 1, 3], 2.0), (&[0, 1, 0], 1.0)],
    );
    let p = pack(&levels, &c, 0).unwrap();
    assert_eq!(p.levels[1].indptr.as_deref(), Some(&[0, 2][..]));
    assert_eq!(p.levels[1].indices.as_deref(), Some(&[1, 4][..]));
    assert_eq!(p.levels[2].indptr.as_deref(), Some(&[0, 2, 3][..]));
    assert_eq!(p.levels[2].indices.as_deref(), Some(&[0, 3, 2][..]));
    assert_eq!(p.shape, vec![3]);
    assert_eq!(p.values, vec![1.0, 2.0, 3.0]);
}

#[test]
fn dense_varied_ragged() {
    let levels = vec![LevelSpec::dense_fixed(None), LevelSpec::dense_varied(0)];
    let c = coo(&[3, 4], &[(&[2, 1], 3.0), (&[0, 2], 1.0), (&[2, 0], 2.0)]);
    let p = pack(&levels, &c, 0).unwrap();
    assert_eq!(p.levels[1].indptr.as_deref(), Some(&[0, 3, 3, 5][..]));
    assert_eq!(p.levels[1].indices, None);
    assert_eq!(p.levels[1].count, 5);
    assert_eq!(p.shape, vec![5]);
    assert_eq!(p.values, vec![0.0, 0.0, 1.0, 2.0, 3.0]);
    let u = unpack(&levels, &p.levels, &p.values).unwrap();
    let want: Vec<Vec<i64>> = vec![vec![0, 0], vec![0, 1], vec![0, 2], vec![2, 0], vec![2, 1]];
    assert_eq!(u.coords, want);
}

#[test]
fn compressed_fixed_under_a_varied_axis() {
    // K = compressed_fixed(J, (3, 1)) under J = compressed_varied(I): one k per stored (i, j).
    let levels = vec![
        LevelSpec::dense_fixed(None),
        LevelSpec::compressed_varied(0),
        LevelSpec::compressed_fixed(1, None),
    ];
    let c = coo(
        &[2, 4, 3],
        &[(&[1, 0, 1], 3.0), (&[0, 3, 0], 2.0), (&[0, 1, 2], 1.0)],
    );
    let p = pack(&levels, &c, 0).unwrap();
    assert_eq!(p.levels[1].indptr.as_deref(), Some(&[0, 2, 3][..]));
    assert_eq!(p.levels[1].indices.as_deref(), Some(&[1, 3, 0][..]));
    assert_eq!(p.levels[2].nnz_cols, Some(1));
    assert_eq!(p.levels[2].indices.as_deref(), Some(&[2, 0, 1][..]));
    assert_eq!(p.shape, vec![3, 1]);
    assert_eq!(p.values, vec![1.0, 2.0, 3.0]);
    let t = p.values_tensor(DType::F32).unwrap();
    assert_eq!(t.data, TensorData::F32(vec![1.0, 2.0, 3.0]));
    let ip = p.levels[1].indptr_tensor(DType::I32).unwrap().unwrap();
    assert_eq!(ip.data, TensorData::I32(vec![0, 2, 3]));
    assert!(p.levels[2].indptr_tensor(DType::I32).is_none());
}

#[test]
fn csr_with_dense_last_axis() {
    // A[I, J, K] with K dense_fixed(2): extents (nnz, 2).
    let levels = vec![
        LevelSpec::dense_fixed(None),
        LevelSpec::compressed_varied(0),
        LevelSpec::dense_fixed(Some(2)),
    ];
    let c = coo(&[2, 3, 2], &[(&[1, 0, 1], 4.0), (&[0, 2, 0], 1.0)]);
    let p = pack(&levels, &c, 0).unwrap();
    assert_eq!(p.shape, vec![2, 2]);
    assert_eq!(p.values, vec![1.0, 0.0, 0.0, 4.0]);
}

#[test]
fn layout_rules() {
    // Two varied children of the same root: the second does not extend the chain.
    let bad = vec![
        LevelSpec::dense_fixed(None),
        LevelSpec::compressed_varied(0),
        LevelSpec::compressed_varied(0),
    ];
    assert!(matches!(
        group_structure(&bad),
        Err(PackError::UnsupportedLayout { level: 2, .. })
    ));
    // A compressed_fixed head (with a parent) carrying a varied chain.
    let bad = vec![
        LevelSpec::dense_fixed(None),
        LevelSpec::compressed_fixed(0, Some(2)),
        LevelSpec::compressed_varied(1),
    ];
    assert!(matches!(
        group_structure(&bad),
        Err(PackError::UnsupportedLayout { level: 2, .. })
    ));
    // Parent not earlier / missing / a root with a parent.
    let bad = vec![
        LevelSpec::compressed_varied(1),
        LevelSpec::dense_fixed(None),
    ];
    assert!(matches!(
        group_structure(&bad),
        Err(PackError::BadSpec { level: 0, .. })
    ));
    let mut no_parent = LevelSpec::compressed_varied(0);
    no_parent.parent = None;
    let bad = vec![LevelSpec::dense_fixed(None), no_parent];
    assert!(matches!(
        group_structure(&bad),
        Err(PackError::BadSpec { level: 1, .. })
    ));
    // A varied chain interleaved with another group: [I, K, J(I)] groups (I,J) then K.
    let ok = vec![
        LevelSpec::dense_fixed(None),
        LevelSpec::dense_fixed(None),
        LevelSpec::compressed_varied(0),
    ];
    assert_eq!(
        group_structure(&ok).unwrap(),
        vec![(0, vec![2]), (1, vec![])]
    );
    let c = coo(
        &[2, 3, 4],
        &[(&[0, 1, 3], 1.0), (&[1, 2, 0], 2.0), (&[1, 0, 2], 3.0)],
    );
    let p = pack(&ok, &c, 0).unwrap();
    // J: row 0 -> {3}, row 1 -> {0, 2}: nnz 3; extents (3, 3); offset = posJ * 3 + k.
    assert_eq!(p.shape, vec![3, 3]);
    let mut want = vec![0.0; 9];
    want[1] = 1.0; // (i0, j3) pos 0, k 1
    want[3 + 2] = 2.0; // (i1, j0) pos 1, k 2
    want[2 * 3] = 3.0; // (i1, j2) pos 2, k 0
    assert_eq!(p.values, want);
    let layout = group_layout(&ok, &p.levels).unwrap();
    assert_eq!(layout.level_group, vec![0, 1, 0]);
}

#[test]
fn pack_errors() {
    let c = csr_coo();
    // Rank mismatch.
    let e = pack(&[LevelSpec::dense_fixed(None)], &c, 0).unwrap_err();
    assert_eq!(e, PackError::RankMismatch { levels: 1, rank: 2 });
    // Coordinate beyond a given length: entry 1 is (0, 4), length 4.
    let levels = vec![
        LevelSpec::dense_fixed(None),
        LevelSpec::compressed_varied(0).with_length(4),
    ];
    let e = pack(&levels, &c, 0).unwrap_err();
    assert_eq!(
        e,
        PackError::CoordOutOfRange {
            level: 1,
            entry: 1,
            coord: 4,
            bound: 4
        }
    );
    assert!(e.to_string().contains("axis 1, entry 1"));
    // Coordinate beyond the COO dims (fields are public, so a COO can be inconsistent).
    let mut bad = csr_coo();
    bad.coords[3] = vec![-1, 0];
    let e = pack(&csr_levels(), &bad, 0).unwrap_err();
    assert_eq!(
        e,
        PackError::CoordOutOfRange {
            level: 0,
            entry: 3,
            coord: -1,
            bound: 4
        }
    );
    let mut bad = csr_coo();
    bad.values.pop();
    assert!(matches!(
        pack(&csr_levels(), &bad, 0),
        Err(PackError::Coo(_))
    ));
}

fn csr_packed() -> Vec<PackedLevel> {
    pack(&csr_levels(), &csr_coo(), 0).unwrap().levels
}

#[test]
fn validate_levels_errors() {
    let levels = csr_levels();
    validate_levels(&levels, &csr_packed()).unwrap();
    let check = |f: &dyn Fn(&mut PackedLevel)| {
        let mut p = csr_packed();
        f(&mut p[1]);
        validate_levels(&levels, &p).unwrap_err()
    };
    let e = check(&|p| p.indptr = Some(vec![0, 2, 5, 6]));
    assert_eq!(
        e,
        PackError::ArrayLength {
            level: 1,
            array: "indptr",
            found: 4,
            expected: 5
        }
    );
    let e = check(&|p| p.indptr = Some(vec![1, 2, 2, 5, 6]));
    assert!(matches!(
        e,
        PackError::BadArray {
            array: "indptr",
            index: 0,
            ..
        }
    ));
    let e = check(&|p| p.indptr = Some(vec![0, 3, 2, 5, 6]));
    assert!(matches!(
        e,
        PackError::BadArray {
            array: "indptr",
            index: 2,
            ..
        }
    ));
    assert!(e.to_string().contains("indptr[2]"));
    let e = check(&|p| p.indptr = Some(vec![0, 2, 2, 5, 5]));
    assert!(matches!(
        e,
        PackError::BadArray {
            array: "indptr",
            index: 4,
            ..
        }
    ));
    let e = check(&|p| p.indices = Some(vec![1, 4, 0, 2, 3]));
    assert_eq!(
        e,
        PackError::ArrayLength {
            level: 1,
            array: "indices",
            found: 5,
            expected: 6
        }
    );
    let e = check(&|p| p.indices = Some(vec![1, 4, 0, 2, 5, 4]));
    assert!(matches!(
        e,
        PackError::BadArray {
            array: "indices",
            index: 4,
            ..
        }
    ));
    let e = check(&|p| p.indices = Some(vec![1, 4, 0, 3, 2, 4]));
    assert!(matches!(
        e,
        PackError::BadArray {
            array: "indices",
            index: 4,
            ..
        }
    ));
    assert!(e
        .to_string()
        .contains("not strictly increasing inside parent 2"));
    let e = check(&|p| p.indices = None);
    assert_eq!(
        e,
        PackError::MissingArray {
            level: 1,
            array: "indices"
        }
    );
    let e = check(&|p| p.indptr = None);
    assert_eq!(
        e,
        PackError::MissingArray {
            level: 1,
            array: "indptr"
        }
    );
    // Unsorted is fine when not declared sorted.
    let unsorted = vec![
        LevelSpec::dense_fixed(None),
        LevelSpec::compressed_varied(0).with_sorted(false),
    ];
    let mut p = csr_packed();
    p[1].indices = Some(vec![4, 1, 0, 3, 2, 4]);
    validate_levels(&unsorted, &p).unwrap();
    // Unpack refuses invalid arrays and short values.
    let mut p = csr_packed();
    p[1].indptr = Some(vec![0, 2, 2, 5, 7]);
    assert!(unpack(&levels, &p, &[0.0; 6]).is_err());
    let e = unpack(&levels, &csr_packed(), &[0.0; 5]).unwrap_err();
    assert_eq!(
        e,
        PackError::ValuesTooShort {
            found: 5,
            expected: 6
        }
    );
    // compressed_fixed: indices length must be parent count * c.
    let ell = ell_levels(Some(2));
    let mut p = vec![
        PackedLevel {
            length: 2,
            count: 2,
            nnz_cols: None,
            indptr: None,
            indices: None,
        },
        PackedLevel {
            length: 3,
            count: 4,
            nnz_cols: Some(2),
            indptr: None,
            indices: Some(vec![0, 2, 1]),
        },
    ];
    let e = validate_levels(&ell, &p).unwrap_err();
    assert_eq!(
        e,
        PackError::ArrayLength {
            level: 1,
            array: "indices",
            found: 3,
            expected: 4
        }
    );
    p[1].indices = Some(vec![0, 2, 1, 2]);
    validate_levels(&ell, &p).unwrap();
    p[1].count = 6;
    assert!(matches!(
        validate_levels(&ell, &p),
        Err(PackError::CountMismatch { .. })
    ));
    // dense_varied: a fiber longer than the axis length.
    let dv = vec![LevelSpec::dense_fixed(None), LevelSpec::dense_varied(0)];
    let p = vec![
        PackedLevel {
            length: 2,
            count: 2,
            nnz_cols: None,
            indptr: None,
            indices: None,
        },
        PackedLevel {
            length: 3,
            count: 4,
            nnz_cols: None,
            indptr: Some(vec![0, 4, 4]),
            indices: None,
        },
    ];
    let e = validate_levels(&dv, &p).unwrap_err();
    assert!(matches!(
        e,
        PackError::BadArray {
            array: "indptr",
            index: 1,
            ..
        }
    ));
}

// ---------------------------------------------------------------- property tests

/// Builds an axis list from choice bytes: level 0 is a root; later levels are a root, a varied
/// axis extending some group headed by a dense_fixed axis, or a compressed_fixed child.
fn build_levels(rank: usize, choices: &[u8]) -> Vec<LevelSpec> {
    let mut levels = vec![LevelSpec::dense_fixed(None)];
    // (head, last axis) of the groups whose head is dense_fixed.
    let mut chains: Vec<(usize, usize)> = vec![(0, 0)];
    for (l, &c) in choices.iter().enumerate().take(rank).skip(1) {
        let pick = (c / 4) as usize;
        match c % 4 {
            0 => {
                levels.push(LevelSpec::dense_fixed(None));
                chains.push((l, l));
            }
            1 | 2 => {
                let k = pick % chains.len();
                let parent = chains[k].1;
                levels.push(if c % 4 == 1 {
                    LevelSpec::dense_varied(parent)
                } else {
                    LevelSpec::compressed_varied(parent)
                });
                chains[k].1 = l;
            }
            _ => levels.push(LevelSpec::compressed_fixed(pick % l, None)),
        }
    }
    levels
}

/// Checks that unpacking a packed COO gives back exactly the summed entries, plus stored zeros.
fn check_roundtrip(levels: &[LevelSpec], c: &Coo) -> Result<(), TestCaseError> {
    let mut want: BTreeMap<Vec<i64>, f64> = BTreeMap::new();
    for (k, v) in c.coords.iter().zip(&c.values) {
        *want.entry(k.clone()).or_insert(0.0) += *v;
    }
    let p = match pack(levels, c, 0) {
        Ok(p) => p,
        Err(PackError::NnzColsMismatch { .. })
            if levels.iter().any(|l| l.kind == AxisKind::CompressedFixed) =>
        {
            return Ok(())
        }
        Err(e) => return Err(TestCaseError::fail(format!("pack failed: {e}"))),
    };
    prop_assert_eq!(p.values.len(), p.shape.iter().product::<usize>());
    validate_levels(levels, &p.levels).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let u = unpack(levels, &p.levels, &p.values).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut seen = BTreeSet::new();
    for (k, v) in u.coords.iter().zip(&u.values) {
        prop_assert!(seen.insert(k.clone()), "tuple {:?} stored twice", k);
        prop_assert_eq!(*v, want.get(k).copied().unwrap_or(0.0), "value of {:?}", k);
    }
    for k in want.keys() {
        prop_assert!(seen.contains(k), "entry {:?} not stored", k);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn pack_unpack_roundtrip(
        rank in 1usize..=4,
        choices in proptest::collection::vec(any::<u8>(), 4),
        dims in proptest::collection::vec(1usize..5, 4),
        raw in proptest::collection::vec((proptest::collection::vec(0i64..100, 4), -4i32..5), 0..16),
    ) {
        let levels = build_levels(rank, &choices);
        let dims = dims[..rank].to_vec();
        let coords: Vec<Vec<i64>> =
            raw.iter().map(|(c, _)| (0..rank).map(|l| c[l] % dims[l] as i64).collect()).collect();
        let values = raw.iter().map(|(_, v)| *v as f64).collect();
        let c = Coo::new(dims, coords, values, Field::Integer).unwrap();
        check_roundtrip(&levels, &c)?;
    }

    #[test]
    fn ell_roundtrip(
        rows in 0usize..6,
        cols in 1usize..6,
        c in 0usize..6,
        seeds in proptest::collection::vec(any::<u64>(), 6),
    ) {
        let c = c.min(cols);
        let mut coords = Vec::new();
        let mut values = Vec::new();
        for (r, seed) in seeds.iter().enumerate().take(rows) {
            // c distinct columns chosen by rotating from a seed-dependent start with a stride
            // that is 1 (always distinct).
            let start = (*seed % cols as u64) as usize;
            for k in 0..c {
                coords.push(vec![r as i64, ((start + k) % cols) as i64]);
                values.push((r * 10 + k) as f64);
            }
        }
        let coo = Coo::new(vec![rows, cols], coords, values, Field::Real).unwrap();
        let levels = ell_levels(Some(c));
        let p = pack(&levels, &coo, 0).unwrap();
        prop_assert_eq!(&p.shape, &vec![rows, c]);
        check_roundtrip(&levels, &coo)?;
    }
}

/// Found by fuzzing: an ELL level of width 0 under 2^31 - 1 rows (no arrays at all) was
/// checked for sortedness one parent at a time, billions of iterations over empty fibers.
#[test]
fn sorted_check_skips_levels_without_two_elements() {
    let rows = i32::MAX as usize;
    let levels = vec![
        LevelSpec {
            kind: AxisKind::DenseFixed,
            parent: None,
            length: Some(rows),
            nnz_cols: None,
            sorted: false,
        },
        LevelSpec {
            kind: AxisKind::CompressedFixed,
            parent: Some(0),
            length: Some(5),
            nnz_cols: Some(0),
            sorted: true,
        },
    ];
    let packed = vec![
        PackedLevel {
            length: rows,
            count: rows,
            nnz_cols: None,
            indptr: None,
            indices: None,
        },
        PackedLevel {
            length: 5,
            count: 0,
            nnz_cols: Some(0),
            indptr: None,
            indices: Some(Vec::new()),
        },
    ];
    let start = std::time::Instant::now();
    validate_levels(&levels, &packed).unwrap();
    assert!(start.elapsed() < std::time::Duration::from_millis(100));
}
