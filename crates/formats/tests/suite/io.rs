//! File format tests: Matrix Market, FROSTT `.tns` and `.npy`, including every reader error and
//! the real matrices of `../shared/data` when present.

use half::{bf16, f16};
use sparsetir_formats::mtx::{parse_mtx, write_mtx_string, MtxErrorKind};
use sparsetir_formats::npy::{read_npy_bytes, write_npy_bytes};
use sparsetir_formats::tns::{parse_tns, write_tns_header_string, write_tns_string, TnsErrorKind};
use sparsetir_formats::{
    read_mtx, read_npy, read_tns, write_mtx, write_npy, write_tns, Coo, Field, NpyError, Tensor,
    TensorData,
};

fn dense(c: &Coo) -> Vec<f64> {
    c.to_dense().expect("valid COO")
}

// ------------------------------------------------------------------ Matrix Market

#[test]
fn mtx_general_with_comments_and_blank_lines() {
    let text = "%%MatrixMarket matrix coordinate real general\r\n% a comment\r\n\r\n3 4 3\r\n\
                1 1 1.5\r\n% mid comment\r\n3 4 -2e3\r\n\r\n2 2 .25\r\n";
    let c = parse_mtx(text).unwrap();
    assert_eq!(c.dims, vec![3, 4]);
    assert_eq!(c.field, Field::Real);
    assert_eq!(c.coords, vec![vec![0, 0], vec![2, 3], vec![1, 1]]);
    assert_eq!(c.values, vec![1.5, -2000.0, 0.25]);
}

#[test]
fn mtx_symmetric_skew_pattern_integer() {
    let sym = "%%MatrixMarket matrix coordinate real symmetric\n3 3 3\n1 1 1\n2 1 2\n3 2 3\n";
    let c = parse_mtx(sym).unwrap();
    assert_eq!(c.nnz(), 5);
    assert_eq!(dense(&c), vec![1.0, 2.0, 0.0, 2.0, 0.0, 3.0, 0.0, 3.0, 0.0]);

    let skew = "%%MatrixMarket matrix coordinate real skew-symmetric\n3 3 2\n2 1 2\n3 1 -1\n";
    let c = parse_mtx(skew).unwrap();
    assert_eq!(c.nnz(), 4);
    assert_eq!(
        dense(&c),
        vec![0.0, -2.0, 1.0, 2.0, 0.0, 0.0, -1.0, 0.0, 0.0]
    );

    let pat = "%%MatrixMarket matrix coordinate pattern general\n2 3 2\n1 3\n2 1\n";
    let c = parse_mtx(pat).unwrap();
    assert_eq!(c.field, Field::Pattern);
    assert_eq!(dense(&c), vec![0.0, 0.0, 1.0, 1.0, 0.0, 0.0]);

    let pat_sym = "%%MatrixMarket matrix coordinate pattern symmetric\n2 2 2\n1 1\n2 1\n";
    let c = parse_mtx(pat_sym).unwrap();
    assert_eq!(dense(&c), vec![1.0, 1.0, 1.0, 0.0]);

    let int = "%%MATRIXMARKET Matrix Coordinate Integer General\n2 2 1\n2 2 -7\n";
    let c = parse_mtx(int).unwrap();
    assert_eq!(c.field, Field::Integer);
    assert_eq!(c.values, vec![-7.0]);
}

#[test]
fn mtx_array_formats() {
    // Column-major: column 0 = (1, 2), column 1 = (3, 4), column 2 = (5, 6).
    let a = "%%MatrixMarket matrix array real general\n% c\n2 3\n1\n2\n3\n4\n5\n6\n";
    let c = parse_mtx(a).unwrap();
    assert_eq!(c.nnz(), 6);
    assert_eq!(dense(&c), vec![1.0, 3.0, 5.0, 2.0, 4.0, 6.0]);
    // Symmetric array: lower triangle by columns: a11, a21, a22.
    let s = "%%MatrixMarket matrix array real symmetric\n2 2\n1\n2\n3\n";
    assert_eq!(dense(&parse_mtx(s).unwrap()), vec![1.0, 2.0, 2.0, 3.0]);
    // Skew array: strict lower triangle only: a21.
    let k = "%%MatrixMarket matrix array integer skew-symmetric\n2 2\n5\n";
    assert_eq!(dense(&parse_mtx(k).unwrap()), vec![0.0, -5.0, 5.0, 0.0]);
    // Zeros are stored entries in array form.
    let z = "%%MatrixMarket matrix array real general\n1 2\n0\n7\n";
    let c = parse_mtx(z).unwrap();
    assert_eq!(c.coords, vec![vec![0, 0], vec![0, 1]]);
    assert_eq!(c.values, vec![0.0, 7.0]);
    // No rows and 4e10 columns: an empty matrix of that shape (a fuzz finding: the column loop
    // ran 4e10 empty iterations; `crates/fuzz/regressions/files` replays it under the fuzzer's
    // time limit).
    let wide = "%%MatrixMarket matrix array real general\n0 39999999999\n";
    let c = parse_mtx(wide).unwrap();
    assert_eq!((c.dims.clone(), c.nnz()), (vec![0, 39_999_999_999], 0));
}

fn mtx_err(text: &str) -> (usize, MtxErrorKind) {
    let e = parse_mtx(text).unwrap_err();
    let msg = e.to_string();
    let line = e.line().expect("parse error has a line");
    assert!(msg.starts_with(&format!("line {line}: ")), "{msg}");
    (line, e.kind().cloned().expect("parse error has a kind"))
}

#[test]
fn mtx_errors_name_the_line() {
    let h = "%%MatrixMarket matrix coordinate real general\n";
    assert_eq!(mtx_err("3 3 1\n1 1 1\n"), (1, MtxErrorKind::MissingHeader));
    assert_eq!(mtx_err(""), (1, MtxErrorKind::MissingHeader));
    assert!(matches!(
        mtx_err("%%MatrixMarket matrix coordinate real\n"),
        (1, MtxErrorKind::BadHeader(_))
    ));
    assert!(matches!(
        mtx_err("%%MatrixMarket matrix sparse real general\n"),
        (1, MtxErrorKind::BadHeader(_))
    ));
    let (l, k) = mtx_err("%%MatrixMarket matrix coordinate complex general\n1 1 1\n1 1 1 0\n");
    assert_eq!(l, 1);
    assert!(matches!(&k, MtxErrorKind::Unsupported(m) if m.contains("complex")));
    let (_, k) = mtx_err("%%MatrixMarket matrix coordinate real hermitian\n1 1 1\n1 1 1\n");
    assert!(matches!(&k, MtxErrorKind::Unsupported(m) if m.contains("hermitian")));
    // Size line problems (line numbers count comments).
    assert!(matches!(
        mtx_err(&format!("{h}% x\n3 3\n")),
        (3, MtxErrorKind::BadSizeLine(_))
    ));
    assert!(matches!(
        mtx_err(&format!("{h}3 x 1\n")),
        (2, MtxErrorKind::BadSizeLine(_))
    ));
    assert!(matches!(
        mtx_err(&format!("{h}3 -3 1\n")),
        (2, MtxErrorKind::BadSizeLine(_))
    ));
    assert!(matches!(
        mtx_err(&format!("{h}% only comments\n")),
        (2, MtxErrorKind::BadSizeLine(_))
    ));
    let sym = "%%MatrixMarket matrix coordinate real symmetric\n2 3 0\n";
    assert!(matches!(mtx_err(sym), (2, MtxErrorKind::BadSizeLine(_))));
    // Entry counts.
    assert_eq!(
        mtx_err(&format!("{h}3 3 3\n1 1 1\n2 2 2\n")),
        (
            4,
            MtxErrorKind::Truncated {
                expected: 3,
                found: 2
            }
        )
    );
    assert_eq!(
        mtx_err(&format!("{h}3 3 1\n1 1 1\n\n2 2 2\n")),
        (5, MtxErrorKind::TooManyEntries { expected: 1 })
    );
    // Coordinates.
    assert_eq!(
        mtx_err(&format!("{h}3 4 2\n1 1 1\n0 2 1\n")),
        (
            4,
            MtxErrorKind::CoordinateOutOfRange {
                which: "row",
                value: 0,
                dim: 3
            }
        )
    );
    assert_eq!(
        mtx_err(&format!("{h}3 4 1\n1 -2 1\n")),
        (
            3,
            MtxErrorKind::CoordinateOutOfRange {
                which: "column",
                value: -2,
                dim: 4
            }
        )
    );
    assert_eq!(
        mtx_err(&format!("{h}3 4 1\n4 1 1\n")),
        (
            3,
            MtxErrorKind::CoordinateOutOfRange {
                which: "row",
                value: 4,
                dim: 3
            }
        )
    );
    // Fields.
    assert_eq!(
        mtx_err(&format!("{h}3 4 1\n1 a 1\n")),
        (3, MtxErrorKind::NotNumeric("a".into()))
    );
    assert_eq!(
        mtx_err(&format!("{h}3 4 1\n1 1 x1\n")),
        (3, MtxErrorKind::NotNumeric("x1".into()))
    );
    let int = "%%MatrixMarket matrix coordinate integer general\n1 1 1\n1 1 1.5\n";
    assert_eq!(mtx_err(int), (3, MtxErrorKind::NotNumeric("1.5".into())));
    assert_eq!(
        mtx_err(&format!("{h}3 4 1\n1 1\n")),
        (
            3,
            MtxErrorKind::FieldCount {
                expected: 3,
                found: 2
            }
        )
    );
    let pat = "%%MatrixMarket matrix coordinate pattern general\n3 4 1\n1 1 1\n";
    assert_eq!(
        mtx_err(pat),
        (
            3,
            MtxErrorKind::FieldCount {
                expected: 2,
                found: 3
            }
        )
    );
    let arr = "%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n";
    assert_eq!(
        mtx_err(arr),
        (
            5,
            MtxErrorKind::Truncated {
                expected: 4,
                found: 3
            }
        )
    );
    // Absurd declared sizes fail as truncated files without allocating for them.
    let huge = format!("{h}1000000000 1000000000 999999999999\n1 1 1\n");
    assert_eq!(
        mtx_err(&huge),
        (
            3,
            MtxErrorKind::Truncated {
                expected: 999999999999,
                found: 1
            }
        )
    );
    let huge = "%%MatrixMarket matrix array real general\n3000000 3000000\n1\n";
    assert!(matches!(
        mtx_err(huge),
        (3, MtxErrorKind::Truncated { found: 1, .. })
    ));
    let arr = "%%MatrixMarket matrix array real general\n1 1\n1 2\n";
    assert_eq!(
        mtx_err(arr),
        (
            3,
            MtxErrorKind::FieldCount {
                expected: 1,
                found: 2
            }
        )
    );
}

#[test]
fn mtx_write_roundtrip() {
    let values = vec![0.1, -1e-300, 3.5, 1.0 / 3.0, 12345678.875];
    let c = Coo::new(
        vec![3, 5],
        vec![vec![0, 0], vec![2, 4], vec![1, 3], vec![0, 4], vec![2, 0]],
        values.clone(),
        Field::Real,
    )
    .unwrap();
    let s = write_mtx_string(&c).unwrap();
    let mut lines = s.lines();
    assert_eq!(
        lines.next(),
        Some("%%MatrixMarket matrix coordinate real general")
    );
    assert_eq!(lines.next(), Some("3 5 5"));
    assert!(lines.next().unwrap().starts_with("1 1 "));
    assert!(lines.next().unwrap().starts_with("3 5 "));
    let back = parse_mtx(&s).unwrap();
    assert_eq!(back.coords, c.coords);
    assert_eq!(back.values, values); // bit-exact
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.mtx");
    write_mtx(&path, &c).unwrap();
    assert_eq!(read_mtx(&path).unwrap().values, values);
    let three_d = Coo::new(vec![1, 1, 1], vec![], vec![], Field::Real).unwrap();
    assert!(write_mtx_string(&three_d).is_err());
    assert!(read_mtx(dir.path().join("missing.mtx")).is_err());
}

/// Rows, columns, expanded entry count (`awk` over the files: symmetric off-diagonal entries
/// count twice), for the matrices of `../shared/README.md`.
const SHARED: &[(&str, usize, usize, usize)] = &[
    ("cora.mtx", 2708, 2708, 10556),
    ("citeseer.mtx", 3327, 3327, 9104),
    ("pubmed.mtx", 19717, 19717, 88648),
    ("4elt.mtx", 15606, 15606, 91756),
    ("bcsstk13.mtx", 2003, 2003, 83883),
    ("pushpull.mtx", 4000, 4000, 196305),
    ("cryg2500.mtx", 2500, 2500, 12349),
    ("jagmesh7.mtx", 1138, 1138, 7450),
    ("n1024-l1.mtx", 1024, 1024, 32768),
    ("olm1000.mtx", 1000, 1000, 3996),
    ("sparse-images-1024_subset.mtx", 1200, 1024, 122713),
    ("zenios.mtx", 2873, 2873, 27191),
];

#[test]
fn shared_matrices_read() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data");
    if !dir.is_dir() {
        eprintln!("skipping: {} is absent", dir.display());
        return;
    }
    for &(name, rows, cols, nnz) in SHARED {
        let path = dir.join(name);
        if !path.is_file() {
            eprintln!("skipping {name}: absent");
            continue;
        }
        let t = std::time::Instant::now();
        let c = read_mtx(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        eprintln!("{name}: {:?}", t.elapsed());
        assert_eq!(c.dims, vec![rows, cols], "{name}");
        assert_eq!(c.nnz(), nnz, "{name}");
        c.validate().unwrap();
    }
}

// ------------------------------------------------------------------ FROSTT

#[test]
fn tns_plain_and_header_forms() {
    let plain = "# comment\n1 2 3 1.5\n\n4 1 1 -2\n2 5 1 3e1\n";
    let c = parse_tns(plain).unwrap();
    assert_eq!(c.dims, vec![4, 5, 3]);
    assert_eq!(c.coords, vec![vec![0, 1, 2], vec![3, 0, 0], vec![1, 4, 0]]);
    assert_eq!(c.values, vec![1.5, -2.0, 30.0]);
    assert_eq!(c.field, Field::Real);

    let header = "3 2\n4 5 6\n1 1 1 1.5\n4 5 2 2\n";
    let c = parse_tns(header).unwrap();
    assert_eq!(c.dims, vec![4, 5, 6]);
    assert_eq!(c.coords, vec![vec![0, 0, 0], vec![3, 4, 1]]);
    assert_eq!(c.values, vec![1.5, 2.0]);

    // A plain 1-D file whose first line has two integers is not mistaken for a header.
    let one_d = "2 7\n4 1\n5 3\n";
    let c = parse_tns(one_d).unwrap();
    assert_eq!(c.dims, vec![5]);
    assert_eq!(c.coords, vec![vec![1], vec![3], vec![4]]);
    assert_eq!(c.values, vec![7.0, 1.0, 3.0]);
    assert_eq!(c.field, Field::Integer);

    // Looks like a rank-2 header, but the entry line has 2 fields, not 3 (rule 3): plain 1-D.
    let c = parse_tns("2 1\n3 3\n1 1\n").unwrap();
    assert_eq!(c.dims, vec![3]);
    assert_eq!(c.coords, vec![vec![1], vec![2], vec![0]]);
    assert_eq!(c.values, vec![1.0, 3.0, 1.0]);
}

fn tns_err(text: &str) -> (usize, TnsErrorKind) {
    let e = parse_tns(text).unwrap_err();
    assert!(e.to_string().starts_with("line "), "{e}");
    (e.line().unwrap(), e.kind().cloned().unwrap())
}

#[test]
fn tns_errors_name_the_line() {
    assert_eq!(tns_err(""), (1, TnsErrorKind::Empty));
    assert_eq!(tns_err("# only\n"), (1, TnsErrorKind::Empty));
    assert_eq!(tns_err("5\n"), (1, TnsErrorKind::TooFewFields));
    assert_eq!(
        tns_err("1 1 1\n2 2 2\n\n3 3\n"),
        (
            4,
            TnsErrorKind::FieldCount {
                expected: 3,
                found: 2
            }
        )
    );
    assert_eq!(
        tns_err("1 1 1\n2 b 2\n"),
        (2, TnsErrorKind::NotNumeric("b".into()))
    );
    assert_eq!(
        tns_err("1 1 1\n2 2 v\n"),
        (2, TnsErrorKind::NotNumeric("v".into()))
    );
    assert_eq!(
        tns_err("1 1 1\n0 2 1\n"),
        (
            2,
            TnsErrorKind::CoordinateOutOfRange {
                dim: 0,
                value: 0,
                extent: usize::MAX
            }
        )
    );
    assert_eq!(
        tns_err("2 1\n3 3\n1 4 1\n"),
        (
            3,
            TnsErrorKind::CoordinateOutOfRange {
                dim: 1,
                value: 4,
                extent: 3
            }
        )
    );
}

#[test]
fn tns_write_roundtrip() {
    let c = Coo::new(
        vec![3, 2, 4],
        vec![vec![0, 1, 3], vec![2, 0, 0]],
        vec![0.1, -7.0],
        Field::Real,
    )
    .unwrap();
    let s = write_tns_string(&c).unwrap();
    assert_eq!(s.lines().next(), Some("1 2 4 0.1"));
    assert_eq!(parse_tns(&s).unwrap(), c);
    // Header form keeps dimensions past the last entry.
    let mut wide = c.clone();
    wide.dims = vec![5, 6, 7];
    let s = write_tns_header_string(&wide).unwrap();
    assert!(s.starts_with("3 2\n5 6 7\n"));
    assert_eq!(parse_tns(&s).unwrap(), wide);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.tns");
    write_tns(&path, &c).unwrap();
    assert_eq!(read_tns(&path).unwrap(), c);
}

// ------------------------------------------------------------------ npy

/// A version-1.0 `.npy` file assembled by hand.
fn npy_bytes(descr: &str, fortran: bool, shape: &str, data: &[u8]) -> Vec<u8> {
    let mut header = format!(
        "{{'descr': '{descr}', 'fortran_order': {}, 'shape': {shape}, }}",
        if fortran { "True" } else { "False" }
    );
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

#[test]
fn npy_reads_handmade_files() {
    let data: Vec<u8> = [1.5f64, -2.0, 3.25, 4.0]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let t = read_npy_bytes(&npy_bytes("<f8", false, "(2, 2)", &data)).unwrap();
    assert_eq!(t.shape, vec![2, 2]);
    assert_eq!(t.data, TensorData::F64(vec![1.5, -2.0, 3.25, 4.0]));
    // Big-endian int32.
    let data: Vec<u8> = [7i32, -1, 65536]
        .iter()
        .flat_map(|x| x.to_be_bytes())
        .collect();
    let t = read_npy_bytes(&npy_bytes(">i4", false, "(3,)", &data)).unwrap();
    assert_eq!(t.data, TensorData::I32(vec![7, -1, 65536]));
    // Fortran order is rejected.
    let data = [0u8; 32];
    let e = read_npy_bytes(&npy_bytes("<f8", true, "(2, 2)", &data)).unwrap_err();
    assert!(matches!(e, NpyError::FortranOrder), "{e}");
    // Complex is unsupported.
    let e = read_npy_bytes(&npy_bytes("<c8", false, "(2,)", &[0u8; 16])).unwrap_err();
    assert!(
        matches!(&e, NpyError::UnsupportedDType(d) if d.contains("c8")),
        "{e}"
    );
    // A header promising far more data than present.
    let e = read_npy_bytes(&npy_bytes("<f8", false, "(100000000000,)", &[0u8; 8])).unwrap_err();
    assert!(matches!(e, NpyError::Format(_)), "{e}");
    // Found by fuzzing: a shape whose product overflows u64 made npyz panic (overflow checks).
    let e = read_npy_bytes(&npy_bytes(
        "<i8",
        false,
        "(2, 9223372036854775808)",
        &[0u8; 8],
    ))
    .unwrap_err();
    assert!(e.to_string().contains("at most 2^64"), "{e}");
    // ... also written as an expression the Python-literal parser folds.
    let e = read_npy_bytes(&npy_bytes(
        "<i4",
        false,
        "(4, 9223372036854775807 -1)",
        &[0u8; 8],
    ))
    .unwrap_err();
    assert!(e.to_string().contains("at most 2^64"), "{e}");
    // Sub-array dtypes (npyz multiplies their dimensions unchecked) are refused.
    let header = "{'descr': [('a', '<f4', (4611686018427387904, 8))], 'fortran_order': False, \
                  'shape': (1,), }\n";
    let mut sub = b"\x93NUMPY\x01\x00".to_vec();
    sub.extend_from_slice(&(header.len() as u16).to_le_bytes());
    sub.extend_from_slice(header.as_bytes());
    sub.extend_from_slice(&[0u8; 8]);
    let e = read_npy_bytes(&sub).unwrap_err();
    assert!(matches!(e, NpyError::UnsupportedDType(_)), "{e}");
    // Found by fuzzing: a version-3 header length of ~2 GB in a 100-byte file was allocated.
    let mut v3 = npy_bytes("<f8", false, "(1,)", &[0u8; 8]);
    v3[6] = 3;
    v3.splice(8..10, [0x76, 0xff, 0x00, 0x7b]);
    let e = read_npy_bytes(&v3).unwrap_err();
    assert!(
        e.to_string().contains("runs past the end of the file"),
        "{e}"
    );
    // Truncated data and garbage.
    assert!(read_npy_bytes(&npy_bytes("<f8", false, "(2, 2)", &[0u8; 8])).is_err());
    assert!(matches!(
        read_npy_bytes(b"not an npy file"),
        Err(NpyError::Format(_))
    ));
}

#[test]
fn npy_roundtrip_all_dtypes() {
    let shape = vec![2, 3];
    let tensors = vec![
        TensorData::F32(vec![0.5, -1.0, 3.25, 1e-7, 8.0, -0.0]),
        TensorData::F64(vec![0.1, 1.0 / 3.0, -5.0, 1e300, 0.0, 2.5]),
        TensorData::I32(vec![1, -2, i32::MAX, i32::MIN, 0, 7]),
        TensorData::I64(vec![1, -2, i64::MAX, i64::MIN, 0, 7]),
        TensorData::F16(
            [0.5f32, -1.0, 3.25, 65504.0, 0.0, 2.0]
                .map(f16::from_f32)
                .to_vec(),
        ),
        TensorData::BF16(
            [0.5f32, -1.0, 3.25, 1e30, 0.0, 2.0]
                .map(bf16::from_f32)
                .to_vec(),
        ),
        TensorData::Bool(vec![true, false, true, true, false, false]),
        TensorData::U8(vec![0, 1, 2, 255, 4, 5]),
        TensorData::I8(vec![0, -1, 2, -128, 4, 127]),
        TensorData::U64(vec![0, 1, u64::MAX, 3, 4, 5]),
    ];
    for data in tensors {
        let t = Tensor {
            shape: shape.clone(),
            data,
        };
        let bytes = write_npy_bytes(&t).unwrap();
        assert_eq!(&bytes[..6], b"\x93NUMPY");
        let back = read_npy_bytes(&bytes).unwrap();
        assert_eq!(back, t);
    }
    // The f32 header names numpy's little-endian float32.
    let t = Tensor {
        shape: vec![1],
        data: TensorData::F32(vec![2.0]),
    };
    let bytes = write_npy_bytes(&t).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.contains("'<f4'"), "{text}");
    assert_eq!(&bytes[bytes.len() - 4..], &2.0f32.to_le_bytes());
    // Files.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.npy");
    write_npy(&path, &t).unwrap();
    assert_eq!(read_npy(&path).unwrap(), t);
    // A shape that disagrees with the data.
    let bad = Tensor {
        shape: vec![2, 2],
        data: TensorData::I32(vec![1, 2, 3]),
    };
    assert!(matches!(
        write_npy_bytes(&bad),
        Err(NpyError::ShapeMismatch { .. })
    ));
}
