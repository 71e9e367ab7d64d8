//! Tests of the MLIR `sparse_tensor` encoding library: parsing (with located errors), canonical
//! printing, packing COO data into level storage, and mapping to sparse-axis declarations.

use sparsetir_formats::mlir::{parse_encoding, AffineExpr, Encoding, LevelFormat, Storage};
use sparsetir_formats::{Coo, Field};

/// A COO from a dense row-major matrix (zeros skipped).
fn coo_from_dense(rows: &[&[f64]]) -> Coo {
    let m = rows.len();
    let n = rows.first().map(|r| r.len()).unwrap_or(0);
    let mut coords = Vec::new();
    let mut values = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        for (j, &v) in r.iter().enumerate() {
            if v != 0.0 {
                coords.push(vec![i as i64, j as i64]);
                values.push(v);
            }
        }
    }
    Coo::new(vec![m, n], coords, values, Field::Real).expect("valid COO")
}

fn pack(enc: &str, coo: &Coo) -> Storage {
    let e = parse_encoding(enc).unwrap_or_else(|e| panic!("{enc}: {e}"));
    e.pack(coo, &[]).unwrap_or_else(|e| panic!("{enc}: {e}"))
}

fn ints(s: &str) -> Vec<i64> {
    s.split_whitespace()
        .map(|x| x.parse().expect("int"))
        .collect()
}

fn floats(s: &str) -> Vec<f64> {
    s.split_whitespace()
        .map(|x| x.parse().expect("float"))
        .collect()
}

// ---------------------------------------------------------------- seed examples

/// The seed's 4×6 matrix with 2×2 blocks.
fn seed_bsr_matrix() -> Coo {
    coo_from_dense(&[
        &[1., 2., 0., 0., 4., 0.],
        &[0., 3., 0., 0., 0., 5.],
        &[0., 0., 6., 7., 0., 0.],
        &[0., 0., 8., 0., 0., 0.],
    ])
}

#[test]
fn seed_bsr_prints_exactly() {
    // The seed's text (its closing `}>` restored), alias line and line breaks included.
    let text = "#BSR = #sparse_tensor.encoding<{\n  map = ( i, j ) ->\n  ( i floordiv 2 : dense\n  , j floordiv 2 : compressed\n  , i mod 2 : dense\n  , j mod 2 : dense\n  )\n}>";
    let enc = parse_encoding(text).unwrap();
    assert_eq!(enc.alias.as_deref(), Some("BSR"));
    let st = enc.pack(&seed_bsr_matrix(), &[]).unwrap();
    assert_eq!(
        st.to_text(),
        "positions[1] : 0 2 3\ncoordinates[1] : 0 2 1\nvalues : 1 2 0 3 4 0 0 5 6 7 8 0\n"
    );
    assert_eq!(st.level_sizes, vec![2, 3, 2, 2]);
    assert_eq!(st.positions[0], None);
    assert_eq!(st.coordinates[2], None);
}

/// The seed's 2:4 storage, row by row (16 rows of 8 coordinates and 8 values).
const SEED_24_CRD: &str = "
0 2 0 2 0 2 0 2
1 3 1 3 1 3 1 3
0 1 2 3 0 1 2 3
2 3 0 1 2 3 0 1
0 1 0 1 0 1 0 1
0 1 0 1 0 1 0 1
2 3 2 3 2 3 2 3
2 3 2 3 2 3 2 3
0 2 0 2 0 2 0 2
1 3 1 3 1 3 1 3
0 1 2 3 0 1 2 3
2 3 0 1 2 3 0 1
0 1 0 1 0 1 0 1
0 1 0 1 0 1 0 1
2 3 2 3 2 3 2 3
2 3 2 3 2 3 2 3";

const SEED_24_VAL: &str = "
1 2 3 4 1 2 3 4
5 6 7 8 5 6 7 8
9 10 11 12 9 10 11 12
13 14 15 16 13 14 15 16
17 18 19 20 17 18 19 20
21 22 23 24 21 22 23 24
25 26 27 28 25 26 27 28
29 30 31 32 29 30 31 32
1 2 3 4 1 2 3 4
5 6 7 8 5 6 7 8
9 10 11 12 9 10 11 12
13 14 15 16 13 14 15 16
17 18 19 20 17 18 19 20
21 22 23 24 21 22 23 24
25 26 27 28 25 26 27 28
29 30 31 32 29 30 31 32";

#[test]
fn seed_2_4_reproduced() {
    let crd = ints(SEED_24_CRD);
    let val = floats(SEED_24_VAL);
    assert_eq!((crd.len(), val.len()), (128, 128));
    // Reconstruct the 16×16 matrix: row i, group g (4 columns), slot t.
    let mut dense = vec![vec![0.0; 16]; 16];
    for (i, row) in dense.iter_mut().enumerate() {
        for g in 0..4 {
            for t in 0..2 {
                let k = i * 8 + g * 2 + t;
                row[4 * g + crd[k] as usize] = val[k];
            }
        }
    }
    let rows: Vec<&[f64]> = dense.iter().map(|r| r.as_slice()).collect();
    let coo = coo_from_dense(&rows);
    assert_eq!(coo.nnz(), 128);
    // The seed's NV_24 encoding without its `crdWidth = 2` (not an accepted width, see the
    // malformed tests), with the seed's comment kept.
    let text = "#NV_24 = #sparse_tensor.encoding<{\n  map = ( i, j ) -> ( i : dense,\n    j floordiv 4 : dense,\n    j mod 4 : block2_4) // 2-bits for each coordinate\n}>";
    let enc = parse_encoding(text).unwrap();
    assert_eq!(enc.levels[2].format, LevelFormat::Structured { n: 2, m: 4 });
    let st = enc.pack(&coo, &[]).unwrap();
    assert_eq!(st.level_sizes, vec![16, 4, 4]);
    assert_eq!(st.coordinates[2].as_deref(), Some(crd.as_slice()));
    assert_eq!(st.values, val);
    assert_eq!(st.positions, vec![None, None, None]);
    // Same with the spelled-out structured[2, 4].
    let st2 = pack(
        "map = (i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : structured[2, 4])",
        &coo,
    );
    assert_eq!(st2, st);
}

// ---------------------------------------------------------------- hand-checked formats

/// 3×4: row 0 has columns 1 (5) and 3 (7), row 1 is empty, row 2 has 0 (1) and 2 (2). Given
/// unsorted, with 5 split into a duplicate 2 + 3.
fn small() -> Coo {
    Coo::new(
        vec![3, 4],
        vec![vec![2, 2], vec![0, 3], vec![0, 1], vec![2, 0], vec![0, 1]],
        vec![2., 7., 2., 1., 3.],
        Field::Real,
    )
    .unwrap()
}

#[test]
fn csr_storage() {
    let st = pack(
        "#sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compressed) }>",
        &small(),
    );
    assert_eq!(st.level_sizes, vec![3, 4]);
    assert_eq!(st.positions[1].as_deref(), Some(&[0, 2, 2, 4][..]));
    assert_eq!(st.coordinates[1].as_deref(), Some(&[1, 3, 0, 2][..]));
    assert_eq!(st.values, vec![5., 7., 1., 2.]);
    assert_eq!(
        st.to_text(),
        "positions[1] : 0 2 2 4\ncoordinates[1] : 1 3 0 2\nvalues : 5 7 1 2\n"
    );
}

#[test]
fn csc_storage() {
    let st = pack("map = (i, j) -> (j : dense, i : compressed)", &small());
    assert_eq!(st.level_sizes, vec![4, 3]);
    assert_eq!(st.positions[1].as_deref(), Some(&[0, 1, 2, 3, 4][..]));
    assert_eq!(st.coordinates[1].as_deref(), Some(&[2, 0, 2, 0][..]));
    assert_eq!(st.values, vec![1., 5., 2., 7.]);
}

#[test]
fn dcsr_and_dcsc_storage() {
    let st = pack(
        "{ map = (i, j) -> (i : compressed, j : compressed) }",
        &small(),
    );
    assert_eq!(st.positions[0].as_deref(), Some(&[0, 2][..]));
    assert_eq!(st.coordinates[0].as_deref(), Some(&[0, 2][..]));
    assert_eq!(st.positions[1].as_deref(), Some(&[0, 2, 4][..]));
    assert_eq!(st.coordinates[1].as_deref(), Some(&[1, 3, 0, 2][..]));
    assert_eq!(st.values, vec![5., 7., 1., 2.]);
    // The seed's DCSC with its widths.
    let st = pack(
        "#DCSC = #sparse_tensor.encoding<{\n map = (i, j) -> (j : compressed, i : compressed),\n posWidth = 32,\n crdWidth = 8\n}>",
        &small(),
    );
    assert_eq!(st.positions[0].as_deref(), Some(&[0, 4][..]));
    assert_eq!(st.coordinates[0].as_deref(), Some(&[0, 1, 2, 3][..]));
    assert_eq!(st.positions[1].as_deref(), Some(&[0, 1, 2, 3, 4][..]));
    assert_eq!(st.coordinates[1].as_deref(), Some(&[2, 0, 2, 0][..]));
    assert_eq!(st.values, vec![1., 5., 2., 7.]);
}

#[test]
fn sorted_coo_storage() {
    let st = pack(
        "map = (i, j) -> (i : compressed(nonunique), j : singleton)",
        &small(),
    );
    assert_eq!(st.positions[0].as_deref(), Some(&[0, 4][..]));
    assert_eq!(st.coordinates[0].as_deref(), Some(&[0, 0, 2, 2][..]));
    assert_eq!(st.positions[1], None);
    assert_eq!(st.coordinates[1].as_deref(), Some(&[1, 3, 0, 2][..]));
    assert_eq!(st.values, vec![5., 7., 1., 2.]);
    assert_eq!(
        st.to_text(),
        "positions[0] : 0 4\ncoordinates[0] : 0 0 2 2\ncoordinates[1] : 1 3 0 2\nvalues : 5 7 1 2\n"
    );
    // 3-D COO: (i nonunique, j singleton nonunique, k singleton soa).
    let coo = Coo::new(
        vec![2, 2, 3],
        vec![vec![1, 0, 2], vec![0, 1, 1], vec![1, 0, 0]],
        vec![3., 1., 2.],
        Field::Real,
    )
    .unwrap();
    let st = pack(
        "map = (i, j, k) -> (i : compressed(nonunique), j : singleton(nonunique), k : singleton(soa))",
        &coo,
    );
    assert_eq!(st.coordinates[0].as_deref(), Some(&[0, 1, 1][..]));
    assert_eq!(st.coordinates[1].as_deref(), Some(&[1, 0, 0][..]));
    assert_eq!(st.coordinates[2].as_deref(), Some(&[1, 0, 2][..]));
    assert_eq!(st.values, vec![1., 2., 3.]);
}

#[test]
fn explicit_map_bsr_2x3() {
    let text = "#BSR_explicit = #sparse_tensor.encoding<{\n  map = { ib, jb, ii, jj }\n  ( i = ib * 2 + ii,\n    j = jb * 3 + jj) ->\n  ( ib = i floordiv 2 : dense,\n    jb = j floordiv 3 : compressed,\n    ii = i mod 2 : dense,\n    jj = j mod 3 : dense)\n}>";
    let enc = parse_encoding(text).unwrap();
    assert_eq!(enc.levels[1].name.as_deref(), Some("jb"));
    assert_eq!(enc.dim_exprs.as_ref().map(|d| d.len()), Some(2));
    let st = enc.pack(&seed_bsr_matrix(), &[]).unwrap();
    // Blocks of the 4×6 matrix by 2×3: every block is non-empty.
    assert_eq!(st.level_sizes, vec![2, 2, 2, 3]);
    assert_eq!(st.positions[1].as_deref(), Some(&[0, 2, 4][..]));
    assert_eq!(st.coordinates[1].as_deref(), Some(&[0, 1, 0, 1][..]));
    let want = floats("1 2 0 0 3 0  0 4 0 0 0 5  0 0 6 0 0 8  7 0 0 0 0 0");
    assert_eq!(st.values, want);
    // The implicit form gives the same storage.
    let implicit = pack(
        "map = (i, j) -> (i floordiv 2 : dense, j floordiv 3 : compressed, i mod 2 : dense, j mod 3 : dense)",
        &seed_bsr_matrix(),
    );
    assert_eq!(implicit, st);
    // An inverse map that disagrees with the level map is reported at packing.
    let bad = parse_encoding(
        "map = {ib, jb, ii, jj}(i = ib * 2 + ii, j = jb * 2 + jj) -> (ib = i floordiv 2 : dense, jb = j floordiv 3 : compressed, ii = i mod 2 : dense, jj = j mod 3 : dense)",
    )
    .unwrap();
    let err = bad.pack(&seed_bsr_matrix(), &[]).unwrap_err();
    assert!(
        err.to_string().contains("inverse map of dimension `j`"),
        "{err}"
    );
}

#[test]
fn bsr_pads_partial_blocks() {
    // 3×3 with 2×2 blocks: block rows {0,1},{2}; the dense in-block levels pad with zeros.
    let coo = coo_from_dense(&[&[0., 0., 1.], &[0., 0., 0.], &[2., 0., 0.]]);
    let st = pack(
        "map = (i, j) -> (i floordiv 2 : dense, j floordiv 2 : compressed, i mod 2 : dense, j mod 2 : dense)",
        &coo,
    );
    assert_eq!(st.level_sizes, vec![2, 2, 2, 2]);
    assert_eq!(st.positions[1].as_deref(), Some(&[0, 1, 2][..]));
    assert_eq!(st.coordinates[1].as_deref(), Some(&[1, 0][..]));
    assert_eq!(st.values, floats("1 0 0 0  2 0 0 0"));
}

#[test]
fn loose_compressed_storage() {
    let st = pack(
        "map = (i, j) -> (i : dense, j : loose_compressed)",
        &small(),
    );
    assert_eq!(st.positions[1].as_deref(), Some(&[0, 2, 2, 2, 2, 4][..]));
    assert_eq!(st.coordinates[1].as_deref(), Some(&[1, 3, 0, 2][..]));
    assert_eq!(st.values, vec![5., 7., 1., 2.]);
}

#[test]
fn structured_pads_short_groups_and_rejects_full_ones() {
    let coo = coo_from_dense(&[&[0., 0., 3., 0., 0., 0., 0., 0.]]);
    let enc = "map = (i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : block2_4)";
    let st = pack(enc, &coo);
    assert_eq!(st.coordinates[2].as_deref(), Some(&[0, 2, 0, 1][..]));
    assert_eq!(st.values, vec![0., 3., 0., 0.]);
    let full = coo_from_dense(&[&[1., 0., 3., 4., 0., 0., 0., 0.]]);
    let err = parse_encoding(enc).unwrap().pack(&full, &[]).unwrap_err();
    assert!(err.to_string().contains("group 0 has 3 nonzeros"), "{err}");
}

#[test]
fn ell_counting_symbol() {
    let enc = parse_encoding(
        "#ELL = #sparse_tensor.encoding<{\n  map = [c](i, j) -> (c * 3 * i : dense, i : dense, j : compressed)\n}>",
    )
    .unwrap();
    assert_eq!(enc.symbols, vec!["c".to_string()]);
    let st = enc.pack(&small(), &[]).unwrap();
    // Slot k holds the k-th entry of every row: slot 0 = (0,1),(2,0); slot 1 = (0,3),(2,2).
    assert_eq!(st.level_sizes, vec![3, 3, 4]);
    assert_eq!(
        st.positions[2].as_deref(),
        Some(&[0, 1, 1, 2, 3, 3, 4, 4, 4, 4][..])
    );
    assert_eq!(st.coordinates[2].as_deref(), Some(&[1, 0, 3, 2][..]));
    assert_eq!(st.values, vec![5., 1., 7., 2.]);
    // A row with more entries than slots.
    let err = enc.pack(&small(), &[1]).unwrap_err();
    assert!(
        err.to_string()
            .contains("has 2 entries but the level has 1 slots"),
        "{err}"
    );
}

#[test]
fn nonordered_keeps_appearance_order() {
    let coo = Coo::new(
        vec![2, 4],
        vec![vec![0, 3], vec![1, 2], vec![0, 1], vec![1, 0]],
        vec![7., 2., 5., 1.],
        Field::Real,
    )
    .unwrap();
    let st = pack(
        "map = (i, j) -> (i : dense, j : compressed(nonordered))",
        &coo,
    );
    assert_eq!(st.positions[1].as_deref(), Some(&[0, 2, 4][..]));
    assert_eq!(st.coordinates[1].as_deref(), Some(&[3, 1, 2, 0][..]));
    assert_eq!(st.values, vec![7., 5., 2., 1.]);
}

#[test]
fn implicit_val_fills_padding_and_explicit_val_is_checked() {
    let coo = coo_from_dense(&[&[0., 1.], &[0., 0.]]);
    let st = pack(
        "map = (i, j) -> (i : dense, j : dense), implicitVal = -1.5",
        &coo,
    );
    assert_eq!(st.values, vec![-1.5, 1., -1.5, -1.5]);
    assert_eq!(st.to_text(), "values : -1.5 1 -1.5 -1.5\n");
    let enc =
        parse_encoding("map = (i, j) -> (i : dense, j : compressed), explicitVal = 2.0").unwrap();
    let err = enc.pack(&coo, &[]).unwrap_err();
    assert!(err.to_string().contains("explicitVal is 2"), "{err}");
}

#[test]
fn widths_bound_storage() {
    let coo = Coo::new(vec![1, 400], vec![vec![0, 300]], vec![1.], Field::Real).unwrap();
    let enc = parse_encoding("map = (i, j) -> (i : dense, j : compressed), crdWidth = 8").unwrap();
    let err = enc.pack(&coo, &[]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "coordinates[1] holds 300, which does not fit crdWidth = 8"
    );
    assert!(err.location.is_none());
    let ok = parse_encoding("map = (i, j) -> (i : dense, j : compressed), crdWidth = 16").unwrap();
    assert_eq!(
        ok.pack(&coo, &[]).unwrap().coordinates[1].as_deref(),
        Some(&[300][..])
    );
}

#[test]
fn pack_errors() {
    let enc = parse_encoding("map = (i, j, k) -> (i : dense, j : dense, k : compressed)").unwrap();
    let err = enc.pack(&small(), &[]).unwrap_err();
    assert!(
        err.to_string()
            .contains("2 dimensions but the encoding maps 3"),
        "{err}"
    );
    // A non-injective map.
    let enc = parse_encoding("map = (i, j) -> (i : dense, j floordiv 4 : compressed, i : dense)");
    let enc = enc.unwrap();
    let err = enc.pack(&small(), &[]).unwrap_err();
    assert!(err.to_string().contains("same level coordinates"), "{err}");
    // Unique compressed parent under a singleton with two children.
    let enc = parse_encoding("map = (i, j) -> (i : compressed(nonunique), j : singleton)").unwrap();
    assert!(enc
        .pack(&Coo::empty(vec![0, 0]), &[])
        .unwrap()
        .values
        .is_empty());
}

// ---------------------------------------------------------------- printing round trips

const ROUND_TRIP: &[&str] = &[
    "#sparse_tensor.encoding<{ map = (i) -> (i : compressed) }>",
    "#SortedCOO = #sparse_tensor.encoding<{ map = (i, j) -> (i : compressed(nonunique), j : singleton) }>",
    "#sparse_tensor.encoding<{ map = (i, j) -> (j : compressed, i : compressed), posWidth = 32, crdWidth = 8 }>",
    "map = ( i, j ) -> ( i floordiv 2 : dense, j floordiv 3 : compressed, i mod 2 : dense, j mod 3 : dense)",
    "{ map = { ib, jb, ii, jj } ( i = ib * 2 + ii, j = jb * 3 + jj) -> ( ib = i floordiv 2 : dense, jb = j floordiv 3 : compressed, ii = i mod 2 : dense, jj = j mod 3 : dense) }",
    "map = [c](i, j) -> (c * 3 * i : dense, i : dense, j : compressed)",
    "map = (i : #sparse_tensor<slice(0, 4, 1)>, j : #sparse_tensor<slice(0, 8, ?)>) -> (i : dense, j : compressed)",
    "map = (i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : block2_4), crdWidth = 64",
    "map = (b, i, j) -> (b : batch, i : dense, j : loose_compressed(nonordered))",
    "map = (i, j) -> ((i + j) floordiv 2 : dense, i - (j - 1) : compressed, -i : dense, 2 * (j mod 3) - -4 : dense)",
    "map = (i, j, k) -> (i : compressed(nonunique, nonordered), j : singleton(nonunique), k : singleton(soa))",
    "map = (i, j) -> (i : dense, j : structured[3, 8]), explicitVal = 1.0, implicitVal = -0.25",
    "map = () -> ()",
];

#[test]
fn to_text_round_trips() {
    for text in ROUND_TRIP {
        let e = parse_encoding(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        let printed = e.to_text();
        let back = parse_encoding(&printed).unwrap_or_else(|err| panic!("{printed}: {err}"));
        assert_eq!(back, e, "{text} -> {printed}");
        assert_eq!(back.to_text(), printed);
    }
}

#[test]
fn canonical_text_and_tree_shapes() {
    let e = parse_encoding("map=(i,j)->(i:dense,j:compressed),posWidth=0").unwrap();
    assert_eq!(
        e.to_text(),
        "#sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compressed) }>"
    );
    let e = parse_encoding("map = (i, j) -> (i - (j - 1) : dense, j : dense)").unwrap();
    // i - (j - 1) keeps its right-nested shape.
    use AffineExpr::*;
    assert_eq!(
        e.levels[0].expr,
        Sub(
            Box::new(Var(0)),
            Box::new(Sub(Box::new(Var(1)), Box::new(Const(1))))
        )
    );
    let e = parse_encoding("map = (i) -> (block2_4 : dense)");
    assert!(e.is_err());
}

fn arb_expr() -> impl proptest::strategy::Strategy<Value = AffineExpr> {
    use proptest::prelude::*;
    let leaf = prop_oneof![
        (0usize..2).prop_map(AffineExpr::Var),
        (-5i64..6).prop_map(AffineExpr::Const),
    ];
    leaf.prop_recursive(4, 24, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone())
                .prop_map(|(a, b)| AffineExpr::Add(Box::new(a), Box::new(b))),
            (inner.clone(), inner.clone())
                .prop_map(|(a, b)| AffineExpr::Sub(Box::new(a), Box::new(b))),
            (inner.clone(), -3i64..4)
                .prop_map(|(a, k)| AffineExpr::Mul(Box::new(a), Box::new(AffineExpr::Const(k)))),
            (inner.clone(), 1i64..5).prop_map(|(a, k)| AffineExpr::FloorDiv(Box::new(a), k)),
            (inner, 1i64..5).prop_map(|(a, k)| AffineExpr::Mod(Box::new(a), k)),
        ]
    })
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config::with_cases(200))]
    #[test]
    fn random_level_expressions_round_trip(e in arb_expr()) {
        let names = vec!["i".to_string(), "j".to_string()];
        let text = format!(
            "map = (i, j) -> ({} : dense, i : dense, j : compressed)",
            e.to_text(&names, &[])
        );
        let parsed = parse_encoding(&text).unwrap();
        // Negative constants are folded by the parser: compare by value on a grid instead of
        // by tree when the printed form changes.
        let reprinted = parsed.levels[0].expr.to_text(&names, &[]);
        proptest::prop_assert_eq!(&reprinted, &e.to_text(&names, &[]));
        for i in -3..4 {
            for j in -3..4 {
                proptest::prop_assert_eq!(parsed.levels[0].expr.eval(&[i, j], &[]), e.eval(&[i, j], &[]));
            }
        }
    }
}

// ---------------------------------------------------------------- malformed encodings

/// Parses `text`, expects an error at `line:col` whose message contains `fragment`.
fn bad(text: &str, line: usize, col: usize, fragment: &str) {
    let err = match parse_encoding(text) {
        Ok(e) => panic!("{text:?} parsed: {e:?}"),
        Err(e) => e,
    };
    let shown = err.to_string();
    assert_eq!(err.location, Some((line, col)), "{text:?}: {shown}");
    assert!(shown.starts_with(&format!("{line}:{col}: ")), "{shown}");
    assert!(
        shown.contains(fragment),
        "{text:?}: {shown} lacks {fragment:?}"
    );
}

#[test]
fn malformed_unknown_format() {
    bad(
        "#sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compresed) }>",
        1,
        59,
        "unknown level format `compresed`, expected dense",
    );
}

#[test]
fn malformed_width() {
    bad(
        "map = (i) -> (i : dense), posWidth = 12",
        1,
        38,
        "posWidth must be 0, 8, 16, 32 or 64, found 12",
    );
}

#[test]
fn malformed_seed_nv24_crd_width_2() {
    let text = "#NV_24 = #sparse_tensor.encoding<{\n  map = ( i, j ) -> ( i : dense,\n    j floordiv 4 : dense,\n    j mod 4 : block2_4),\n  crdWidth = 2 // 2-bits for each coordinate\n}>";
    bad(text, 5, 14, "crdWidth must be 0, 8, 16, 32 or 64, found 2");
}

#[test]
fn malformed_soa_on_compressed() {
    bad(
        "map = (i, j) -> (i : dense, j : compressed(soa))",
        1,
        44,
        "`soa` applies to singleton levels only",
    );
}

#[test]
fn malformed_missing_map() {
    bad("{ posWidth = 8 }", 1, 16, "missing the `map` field");
}

#[test]
fn malformed_unknown_name() {
    bad(
        "map = (i, j) -> (i : dense, k : compressed)",
        1,
        29,
        "unknown name `k`; the dimension variables and symbols are (i, j)",
    );
}

#[test]
fn malformed_floordiv_by_dim() {
    bad(
        "map = (i, j) -> (i floordiv j : dense, j : dense)",
        1,
        29,
        "`floordiv` needs a positive integer constant, found `j`",
    );
    bad(
        "map = (i, j) -> (i : dense, j mod 0 : dense)",
        1,
        35,
        "`mod` needs a positive integer constant",
    );
}

#[test]
fn malformed_non_affine_product() {
    bad(
        "map = (i, j) -> (i * j : dense, j : dense)",
        1,
        20,
        "non-affine product",
    );
}

#[test]
fn malformed_singleton_parent() {
    bad(
        "map = (i, j) -> (i : compressed,\n  j : singleton)",
        2,
        3,
        "singleton level 1 must follow a nonunique",
    );
    bad(
        "map = (i) -> (i : singleton)",
        1,
        15,
        "singleton level 0 must follow",
    );
}

#[test]
fn malformed_unused_dimension() {
    bad(
        "map = (i, j) -> (i : dense)",
        1,
        14,
        "dimension `j` is not used by any level",
    );
}

#[test]
fn malformed_duplicate_field() {
    bad(
        "map = (i) -> (i : dense), crdWidth = 8, crdWidth = 8",
        1,
        41,
        "duplicate field `crdWidth`",
    );
}

#[test]
fn malformed_bad_character() {
    bad(
        "map = (i) -> (i : dense) @",
        1,
        26,
        "unexpected character `@`",
    );
}

#[test]
fn malformed_unterminated() {
    bad(
        "#sparse_tensor.encoding<{\n  map = (i) -> (i : dense)",
        2,
        27,
        "expected `}`, found the end of the text",
    );
    bad(
        "#sparse_tensor.encoding<{ map = (i) -> (i : dense) }",
        1,
        53,
        "expected `>`",
    );
}

#[test]
fn malformed_structured() {
    bad(
        "map = (i, j) -> (j : block2_4, i : dense)",
        1,
        18,
        "must be the last level",
    );
    bad(
        "map = (i, j) -> (i : dense, j : structured[5, 4])",
        1,
        44,
        "structured n must be in 1..=4",
    );
}

#[test]
fn malformed_level_names() {
    bad(
        "map = (i) -> (l = i : dense)",
        1,
        15,
        "level name `l` needs a `{...}` declaration",
    );
    bad(
        "map = {a, b}(i = a, j = b) -> (b = j : dense, a = i : dense)",
        1,
        32,
        "level 0 is named `b` but the declaration says `a`",
    );
    bad(
        "map = {a}(i) -> (a = i : dense)",
        1,
        12,
        "expected `=` and the inverse expression of dimension `i`",
    );
}

#[test]
fn malformed_slices_props_and_duplicates() {
    bad(
        "map = (i : #sparse_tensor<slice(0, 4, 0)>) -> (i : dense)",
        1,
        39,
        "slice stride must be positive, found 0",
    );
    bad(
        "map = (i) -> (i : dense(nonunique))",
        1,
        24,
        "a dense level takes no properties",
    );
    bad(
        "map = (i, i) -> (i : dense)",
        1,
        11,
        "`i` is declared twice",
    );
    bad(
        "map = (i) -> (i : compressed(nonunique, nonunique))",
        1,
        41,
        "duplicate level property `nonunique`",
    );
    bad(
        "map = (i) -> (i : compressed(high))",
        1,
        30,
        "unknown level property `high`",
    );
    bad(
        "#sparse_tensor.encodingx<{ map = (i) -> (i : dense) }>",
        1,
        1,
        "expected `#sparse_tensor.encoding`",
    );
    bad(
        "{ map = (i) -> (i : dense), dimSlices = 3 }",
        1,
        29,
        "unknown field `dimSlices`",
    );
}

// ---------------------------------------------------------------- sparse-axes mapping

fn axes(text: &str) -> String {
    let e: Encoding = parse_encoding(text).unwrap();
    e.to_sparse_axes().unwrap_or_else(|n| panic!("{text}: {n}"))
}

fn no_axes(text: &str, fragment: &str) {
    let e = parse_encoding(text).unwrap();
    match e.to_sparse_axes() {
        Ok(s) => panic!("{text} mapped to {s}"),
        Err(n) => assert!(n.to_string().contains(fragment), "{text}: {n}"),
    }
}

fn decl_lines(s: &str) -> Vec<&str> {
    s.lines().filter(|l| !l.starts_with('#')).collect()
}

#[test]
fn csr_csc_dcsr_axes() {
    let s = axes("map = (i, j) -> (i : dense, j : compressed)");
    assert!(s.starts_with("# CSR: "), "{s}");
    assert_eq!(
        decl_lines(&s),
        vec![
            "I = T.sp.dense_fixed(n_i)",
            "J = T.sp.compressed_varied(I, (n_j, nnz_1), (indptr_1, indices_1), \"int32\")",
            "A = T.sp.match_buffer(a, (I, J), \"float32\")",
        ]
    );
    let s = axes("map = (i, j) -> (j : dense, i : compressed), crdWidth = 64");
    assert!(s.starts_with("# CSC: "), "{s}");
    assert!(
        s.contains("holds element (i, j) at coordinates (j, i)"),
        "{s}"
    );
    assert_eq!(
        decl_lines(&s),
        vec![
            "J = T.sp.dense_fixed(n_j)",
            "I = T.sp.compressed_varied(J, (n_i, nnz_1), (indptr_1, indices_1), \"int64\")",
            "A = T.sp.match_buffer(a, (J, I), \"float32\")",
        ]
    );
    let s = axes("map = (i, j) -> (i : compressed, j : compressed)");
    assert!(s.starts_with("# DCSR: "), "{s}");
    assert_eq!(
        decl_lines(&s),
        vec![
            "O = T.sp.dense_fixed(1)",
            "I = T.sp.compressed_varied(O, (n_i, nnz_0), (indptr_0, indices_0), \"int32\")",
            "J = T.sp.compressed_varied(I, (n_j, nnz_1), (indptr_1, indices_1), \"int32\")",
            "A = T.sp.match_buffer(a, (O, I, J), \"float32\")",
        ]
    );
    assert!(axes("map = (i, j) -> (j : compressed, i : compressed)").starts_with("# DCSC: "));
}

#[test]
fn bsr_ell_24_coo_axes() {
    let s = axes("map = (i, j) -> (i floordiv 2 : dense, j floordiv 3 : compressed, i mod 2 : dense, j mod 3 : dense)");
    assert!(s.starts_with("# BSR: "), "{s}");
    assert!(
        s.contains("at coordinates (i // 2, j // 3, i % 2, j % 3)"),
        "{s}"
    );
    assert_eq!(
        decl_lines(&s),
        vec![
            "IO = T.sp.dense_fixed((n_i + 1) // 2)",
            "JO = T.sp.compressed_varied(IO, ((n_j + 2) // 3, nnz_1), (indptr_1, indices_1), \"int32\")",
            "II = T.sp.dense_fixed(2)",
            "JI = T.sp.dense_fixed(3)",
            "A = T.sp.match_buffer(a, (IO, JO, II, JI), \"float32\")",
        ]
    );
    let s = axes("map = [c](i, j) -> (c * 3 * i : dense, i : dense, j : compressed)");
    assert!(s.starts_with("# ELL: "), "{s}");
    assert_eq!(
        decl_lines(&s),
        vec![
            "I = T.sp.dense_fixed(n_i)",
            "J = T.sp.compressed_fixed(I, (n_j, 3), indices_2, \"int32\")",
            "A = T.sp.match_buffer(a, (I, J), \"float32\")",
        ]
    );
    let s = axes("map = (i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : block2_4)");
    assert!(s.starts_with("# n:m structured: "), "{s}");
    assert_eq!(
        decl_lines(&s),
        vec![
            "G = T.sp.dense_fixed(n_i * ((n_j + 3) // 4))",
            "JI = T.sp.compressed_fixed(G, (4, 2), indices_2, \"int32\")",
            "A = T.sp.match_buffer(a, (G, JI), \"float32\")",
        ]
    );
    assert!(
        s.contains("at coordinates (i * ((n_j + 3) // 4) + j // 4, j % 4)"),
        "{s}"
    );
    let s = axes("map = (i, j) -> (i : compressed(nonunique), j : singleton)");
    assert!(s.starts_with("# COO: "), "{s}");
    assert_eq!(
        decl_lines(&s),
        vec![
            "O = T.sp.dense_fixed(1)",
            "I = T.sp.compressed_varied(O, (n_i, nnz_0), (indptr_0, indices_0), \"int32\", sorted=False)",
            "J = T.sp.compressed_fixed(I, (n_j, 1), indices_1, \"int32\")",
            "A = T.sp.match_buffer(a, (O, I, J), \"float32\")",
        ]
    );
}

#[test]
fn encodings_without_axes() {
    no_axes(
        "map = (i, j) -> (i : dense, j : loose_compressed)",
        "loose_compressed",
    );
    no_axes(
        "map = (i, j) -> (i : dense, j : compressed(nonordered))",
        "nonordered",
    );
    no_axes(
        "map = (i : #sparse_tensor<slice(0, 4, 1)>, j) -> (i : dense, j : compressed)",
        "slice",
    );
    no_axes(
        "map = (i, b, j) -> (i : dense, b : batch, j : compressed)",
        "batch level after",
    );
    no_axes(
        "map = (i, j) -> (i + j : dense, j : compressed)",
        "is not a dimension",
    );
    no_axes(
        "map = (i, j, k) -> (i : compressed, j : dense, k : compressed)",
        "sparse below a dense level",
    );
    no_axes(
        "map = [s](i, j) -> (i + s : dense, j : compressed)",
        "not the ELL counting form",
    );
    no_axes(
        "map = (i, j) -> (i floordiv 2 : dense, j : compressed, i mod 3 : dense)",
        "one `i floordiv k` and one `i mod k` with the same k",
    );
    no_axes("map = () -> ()", "rank-0");
}

/// Every mapped snippet parses as the declarations of a stage-I function.
#[test]
fn axes_snippets_parse() {
    let texts = [
        "map = (i, j) -> (i : dense, j : compressed)",
        "map = (i, j) -> (j : dense, i : compressed)",
        "map = (i, j) -> (i : compressed, j : compressed)",
        "map = (i, j) -> (j : compressed, i : compressed)",
        "map = (i, j) -> (i floordiv 2 : dense, j floordiv 2 : compressed, i mod 2 : dense, j mod 2 : dense)",
        "map = [c](i, j) -> (c * 3 * i : dense, i : dense, j : compressed)",
        "map = (i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : block2_4)",
        "map = (i, j) -> (i : compressed(nonunique), j : singleton)",
        "map = (b, i, j) -> (b : batch, i : dense, j : compressed)",
        "map = (i, j) -> (i : dense, j : dense)",
    ];
    for t in texts {
        let s = axes(t);
        let list = |key: &str| -> Vec<String> {
            s.lines()
                .find_map(|l| l.strip_prefix(key))
                .map(|r| {
                    r.split(", ")
                        .filter(|x| !x.is_empty())
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut params: Vec<String> = list("# handles: ")
            .iter()
            .map(|h| format!("{h}: T.handle"))
            .collect();
        params.extend(list("# sizes: ").iter().map(|n| format!("{n}: T.int32")));
        let body: String = s.lines().map(|l| format!("    {l}\n")).collect();
        let func = format!(
            "@T.prim_func\ndef f({}) -> None:\n    T.func_attr({{\"global_symbol\": \"main\", \"tir.noalias\": True, \"sparse_tir_level\": 2}})\n{body}",
            params.join(", ")
        );
        if let Err(d) = sparsetir_syntax::parse_func(&func) {
            panic!("{t}\n{func}\n{d:?}");
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::test_runner::Config::with_cases(300))]
    /// Truncated or mutated encodings never panic: they parse (and then pack and map without
    /// panicking) or fail with a located error inside the text.
    #[test]
    fn mutated_encodings_do_not_panic(
        which in 0..ROUND_TRIP.len(),
        cut in 0usize..200,
        at in 0usize..200,
        ch in proptest::sample::select(vec!['(', ')', ',', ':', '-', '*', '#', '<', '>', '{', '}', '7', 'x', ' ', 'é', '?', '[']),
    ) {
        let base = ROUND_TRIP[which];
        let mut chars: Vec<char> = base.chars().collect();
        let at = at % (chars.len() + 1);
        if at < chars.len() {
            chars[at] = ch;
        } else {
            chars.push(ch);
        }
        let cut = cut.min(chars.len());
        for text in [chars.iter().collect::<String>(), chars[..cut].iter().collect::<String>()] {
            match parse_encoding(&text) {
                Ok(e) => {
                    let coo = coo_from_dense(&[&[1., 0., 2.], &[0., 3., 0.]]);
                    if e.dims.len() == 2 {
                        let _ = e.pack(&coo, &[2]);
                    }
                    let _ = e.to_sparse_axes();
                    let printed = e.to_text();
                    proptest::prop_assert_eq!(parse_encoding(&printed).ok(), Some(e));
                }
                Err(err) => {
                    proptest::prop_assert!(err.location.is_some());
                    proptest::prop_assert!(err.span.start <= text.len());
                }
            }
        }
    }
}
