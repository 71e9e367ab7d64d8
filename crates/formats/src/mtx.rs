//! Matrix Market (`.mtx`) reading and writing: `coordinate` and `array` formats, real / integer /
//! pattern fields, general / symmetric / skew-symmetric storage.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::coo::{Coo, CooError, Field};

/// `coordinate` (sparse) or `array` (dense, column-major).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MtxFormat {
    Coordinate,
    Array,
}

/// How the stored entries relate to the full matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Symmetry {
    General,
    /// Only the lower triangle is stored; `(j, i)` mirrors `(i, j)`.
    Symmetric,
    /// Only the strict lower triangle is stored; `(j, i)` holds the negated value.
    SkewSymmetric,
}

/// The banner line `%%MatrixMarket matrix <format> <field> <symmetry>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MtxHeader {
    pub format: MtxFormat,
    pub field: Field,
    pub symmetry: Symmetry,
}

/// What went wrong on a given line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MtxErrorKind {
    #[error("missing `%%MatrixMarket` header")]
    MissingHeader,
    #[error("bad header: {0}")]
    BadHeader(String),
    #[error("unsupported: {0}")]
    Unsupported(String),
    #[error("bad size line: {0}")]
    BadSizeLine(String),
    #[error("file truncated: expected {expected} entries, found {found}")]
    Truncated { expected: usize, found: usize },
    #[error("too many entries: the size line declares {expected}")]
    TooManyEntries { expected: usize },
    #[error("{which} coordinate {value} is outside 1..={dim}")]
    CoordinateOutOfRange {
        which: &'static str,
        value: i64,
        dim: usize,
    },
    #[error("non-numeric field `{0}`")]
    NotNumeric(String),
    #[error("expected {expected} fields, found {found}")]
    FieldCount { expected: usize, found: usize },
}

/// A Matrix Market reading or writing error.
#[derive(Debug, thiserror::Error)]
pub enum MtxError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// `line` is 1-based.
    #[error("line {line}: {kind}")]
    Parse { line: usize, kind: MtxErrorKind },
    #[error("cannot write: {0}")]
    Write(String),
    #[error(transparent)]
    Coo(#[from] CooError),
}

impl MtxError {
    /// The parse error kind, if any.
    pub fn kind(&self) -> Option<&MtxErrorKind> {
        match self {
            MtxError::Parse { kind, .. } => Some(kind),
            _ => None,
        }
    }
    /// The 1-based line of a parse error, if any.
    pub fn line(&self) -> Option<usize> {
        match self {
            MtxError::Parse { line, .. } => Some(*line),
            _ => None,
        }
    }
}

fn err(line: usize, kind: MtxErrorKind) -> MtxError {
    MtxError::Parse { line, kind }
}

/// Reads a Matrix Market file into a COO (symmetric storage expanded).
pub fn read_mtx(path: impl AsRef<Path>) -> Result<Coo, MtxError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| MtxError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_mtx(&text)
}

/// Parses the banner line (without requiring anything after it).
pub fn parse_header(line: &str) -> Result<MtxHeader, MtxErrorKind> {
    let mut it = line.split_ascii_whitespace();
    match it.next() {
        Some(b) if b.eq_ignore_ascii_case("%%MatrixMarket") => {}
        _ => return Err(MtxErrorKind::MissingHeader),
    }
    let words: Vec<String> = it.map(|w| w.to_ascii_lowercase()).collect();
    if words.len() != 4 {
        return Err(MtxErrorKind::BadHeader(format!(
            "expected `%%MatrixMarket matrix <format> <field> <symmetry>`, found {} words after \
             the banner",
            words.len()
        )));
    }
    if words[0] != "matrix" {
        return Err(MtxErrorKind::Unsupported(format!(
            "object `{}` (only `matrix`)",
            words[0]
        )));
    }
    let format = match words[1].as_str() {
        "coordinate" => MtxFormat::Coordinate,
        "array" => MtxFormat::Array,
        other => return Err(MtxErrorKind::BadHeader(format!("unknown format `{other}`"))),
    };
    let field = match words[2].as_str() {
        "real" | "double" => Field::Real,
        "integer" => Field::Integer,
        "pattern" => Field::Pattern,
        "complex" => {
            return Err(MtxErrorKind::Unsupported(
                "complex matrices are not supported (only real, integer and pattern)".into(),
            ))
        }
        other => return Err(MtxErrorKind::BadHeader(format!("unknown field `{other}`"))),
    };
    let symmetry = match words[3].as_str() {
        "general" => Symmetry::General,
        "symmetric" => Symmetry::Symmetric,
        "skew-symmetric" => Symmetry::SkewSymmetric,
        "hermitian" => {
            return Err(MtxErrorKind::Unsupported(
                "hermitian matrices are not supported (only general, symmetric and \
                 skew-symmetric)"
                    .into(),
            ))
        }
        other => {
            return Err(MtxErrorKind::BadHeader(format!(
                "unknown symmetry `{other}`"
            )))
        }
    };
    if format == MtxFormat::Array && field == Field::Pattern {
        return Err(MtxErrorKind::BadHeader(
            "`array` format cannot be `pattern`".into(),
        ));
    }
    Ok(MtxHeader {
        format,
        field,
        symmetry,
    })
}

/// Parses a non-negative integer made only of ASCII digits.
fn parse_uint(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 19 {
        return None;
    }
    let mut v: u64 = 0;
    for b in s.bytes() {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v * 10 + (b - b'0') as u64;
    }
    Some(v)
}

/// Parses a signed integer coordinate (so that `0` and `-3` give range errors, not syntax ones).
fn parse_int(s: &str) -> Option<i64> {
    let (neg, digits) = match s.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let v = i64::try_from(parse_uint(digits)?).ok()?;
    Some(if neg { -v } else { v })
}

fn parse_value(s: &str, field: Field, line: usize) -> Result<f64, MtxError> {
    let v = match field {
        Field::Integer => parse_int(s).map(|v| v as f64),
        _ => s.parse::<f64>().ok(),
    };
    v.ok_or_else(|| err(line, MtxErrorKind::NotNumeric(s.to_string())))
}

/// Iterates the non-blank, non-comment lines after the banner with 1-based line numbers.
fn data_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines().enumerate().skip(1).filter_map(|(i, l)| {
        let t = l.trim();
        if t.is_empty() || t.starts_with('%') {
            None
        } else {
            Some((i + 1, t))
        }
    })
}

/// Parses the text of a Matrix Market file into a COO. Symmetric and skew-symmetric storage is
/// expanded (the mirror `(j, i)` of every off-diagonal entry is added, negated for skew);
/// pattern values are `1.0`; `array` files give one entry per element (zeros included).
pub fn parse_mtx(text: &str) -> Result<Coo, MtxError> {
    let first = text.lines().next().unwrap_or("");
    let header = parse_header(first).map_err(|k| err(1, k))?;
    let mut lines = data_lines(text);
    let last_line = text.lines().count().max(1);
    let (size_line, size_text) = lines.next().ok_or_else(|| {
        err(
            last_line,
            MtxErrorKind::BadSizeLine("missing size line".into()),
        )
    })?;
    let size_fields: Vec<&str> = size_text.split_ascii_whitespace().collect();
    let want = if header.format == MtxFormat::Coordinate {
        3
    } else {
        2
    };
    if size_fields.len() != want {
        return Err(err(
            size_line,
            MtxErrorKind::BadSizeLine(format!(
                "expected {want} integers ({}), found {} fields",
                if want == 3 {
                    "rows cols entries"
                } else {
                    "rows cols"
                },
                size_fields.len()
            )),
        ));
    }
    let mut sizes = [0usize; 3];
    for (k, f) in size_fields.iter().enumerate() {
        sizes[k] = parse_uint(f)
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| {
                err(
                    size_line,
                    MtxErrorKind::BadSizeLine(format!("`{f}` is not a non-negative integer")),
                )
            })?;
    }
    let (rows, cols) = (sizes[0], sizes[1]);
    if header.symmetry != Symmetry::General && rows != cols {
        return Err(err(
            size_line,
            MtxErrorKind::BadSizeLine(format!(
                "a {} matrix must be square, found {rows} x {cols}",
                if header.symmetry == Symmetry::Symmetric {
                    "symmetric"
                } else {
                    "skew-symmetric"
                }
            )),
        ));
    }
    match header.format {
        MtxFormat::Coordinate => {
            parse_coordinate(header, rows, cols, sizes[2], lines, last_line, text.len())
        }
        MtxFormat::Array => parse_array(header, rows, cols, lines, last_line, size_line),
    }
}

fn parse_coordinate<'a>(
    header: MtxHeader,
    rows: usize,
    cols: usize,
    nnz: usize,
    lines: impl Iterator<Item = (usize, &'a str)>,
    last_line: usize,
    text_len: usize,
) -> Result<Coo, MtxError> {
    let nfields = if header.field == Field::Pattern { 2 } else { 3 };
    let mirror = header.symmetry != Symmetry::General;
    // An entry line takes at least 4 bytes: do not trust a huge declared count for capacity.
    let cap = nnz.min(text_len / 4 + 1);
    let cap = if mirror { cap.saturating_mul(2) } else { cap };
    let mut coords: Vec<Vec<i64>> = Vec::with_capacity(cap);
    let mut values: Vec<f64> = Vec::with_capacity(cap);
    let mut count = 0usize;
    for (line, t) in lines {
        if count == nnz {
            return Err(err(line, MtxErrorKind::TooManyEntries { expected: nnz }));
        }
        let mut it = t.split_ascii_whitespace();
        let mut f = [""; 3];
        let mut found = 0;
        for w in it.by_ref() {
            if found < 3 {
                f[found] = w;
            }
            found += 1;
        }
        if found != nfields {
            return Err(err(
                line,
                MtxErrorKind::FieldCount {
                    expected: nfields,
                    found,
                },
            ));
        }
        let mut rc = [0i64; 2];
        for (k, dim) in [rows, cols].into_iter().enumerate() {
            let v =
                parse_int(f[k]).ok_or_else(|| err(line, MtxErrorKind::NotNumeric(f[k].into())))?;
            if v < 1 || v as u64 > dim as u64 {
                let which = if k == 0 { "row" } else { "column" };
                return Err(err(
                    line,
                    MtxErrorKind::CoordinateOutOfRange {
                        which,
                        value: v,
                        dim,
                    },
                ));
            }
            rc[k] = v - 1;
        }
        let v = if header.field == Field::Pattern {
            1.0
        } else {
            parse_value(f[2], header.field, line)?
        };
        coords.push(vec![rc[0], rc[1]]);
        values.push(v);
        if mirror && rc[0] != rc[1] {
            coords.push(vec![rc[1], rc[0]]);
            values.push(if header.symmetry == Symmetry::SkewSymmetric {
                -v
            } else {
                v
            });
        }
        count += 1;
    }
    if count < nnz {
        return Err(err(
            last_line,
            MtxErrorKind::Truncated {
                expected: nnz,
                found: count,
            },
        ));
    }
    Ok(Coo {
        dims: vec![rows, cols],
        coords,
        values,
        field: header.field,
    })
}

fn parse_array<'a>(
    header: MtxHeader,
    rows: usize,
    cols: usize,
    lines: impl Iterator<Item = (usize, &'a str)>,
    last_line: usize,
    size_line: usize,
) -> Result<Coo, MtxError> {
    // Stored values run column-major; symmetric storage keeps the lower triangle (with the
    // diagonal), skew-symmetric the strict lower triangle.
    let too_large = || {
        err(
            size_line,
            MtxErrorKind::BadSizeLine(format!("{rows} x {cols} is too large")),
        )
    };
    let n = rows.checked_mul(cols).ok_or_else(too_large)?;
    let expected = match header.symmetry {
        Symmetry::General => n,
        Symmetry::Symmetric => {
            rows.checked_add(1)
                .and_then(|r| r.checked_mul(rows))
                .ok_or_else(too_large)?
                / 2
        }
        Symmetry::SkewSymmetric => rows * rows.saturating_sub(1) / 2,
    };
    // Read the values first: memory stays bounded by the file size even for a bogus size line.
    let mut stored: Vec<f64> = Vec::new();
    for (line, t) in lines {
        if stored.len() == expected {
            return Err(err(line, MtxErrorKind::TooManyEntries { expected }));
        }
        let found = t.split_ascii_whitespace().count();
        if found != 1 {
            return Err(err(line, MtxErrorKind::FieldCount { expected: 1, found }));
        }
        stored.push(parse_value(t, header.field, line)?);
    }
    if stored.len() < expected {
        return Err(err(
            last_line,
            MtxErrorKind::Truncated {
                expected,
                found: stored.len(),
            },
        ));
    }
    // No elements (a dimension of 0): nothing to place — and no loop over the other
    // dimension, which the size line may make arbitrarily long.
    if n == 0 {
        return Ok(Coo {
            dims: vec![rows, cols],
            coords: Vec::new(),
            values: Vec::new(),
            field: header.field,
        });
    }
    let mut dense = vec![0.0f64; n];
    let mut k = 0usize;
    for j in 0..cols {
        let first = match header.symmetry {
            Symmetry::General => 0,
            Symmetry::Symmetric => j,
            Symmetry::SkewSymmetric => j + 1,
        };
        for i in first..rows {
            let v = stored[k];
            k += 1;
            dense[i * cols + j] = v;
            match header.symmetry {
                Symmetry::Symmetric if i != j => dense[j * cols + i] = v,
                Symmetry::SkewSymmetric => dense[j * cols + i] = -v,
                _ => {}
            }
        }
    }
    let mut coords = Vec::with_capacity(n);
    let mut values = Vec::with_capacity(n);
    for i in 0..rows {
        for j in 0..cols {
            coords.push(vec![i as i64, j as i64]);
            values.push(dense[i * cols + j]);
        }
    }
    Ok(Coo {
        dims: vec![rows, cols],
        coords,
        values,
        field: header.field,
    })
}

/// Formats a COO as `coordinate real general` text (1-based; values print round-trippably).
pub fn write_mtx_string(coo: &Coo) -> Result<String, MtxError> {
    if coo.rank() != 2 {
        return Err(MtxError::Write(format!(
            "Matrix Market holds matrices; this COO has rank {}",
            coo.rank()
        )));
    }
    coo.validate()?;
    let mut s = String::with_capacity(32 + coo.nnz() * 24);
    s.push_str("%%MatrixMarket matrix coordinate real general\n");
    let _ = writeln!(s, "{} {} {}", coo.dims[0], coo.dims[1], coo.nnz());
    for (c, v) in coo.coords.iter().zip(&coo.values) {
        // `{:?}` of f64 is the shortest representation that parses back to the same value.
        let _ = writeln!(s, "{} {} {:?}", c[0] + 1, c[1] + 1, v);
    }
    Ok(s)
}

/// Writes a COO as a `coordinate real general` Matrix Market file.
pub fn write_mtx(path: impl AsRef<Path>, coo: &Coo) -> Result<(), MtxError> {
    let path = path.as_ref();
    let s = write_mtx_string(coo)?;
    std::fs::write(path, s).map_err(|source| MtxError::Io {
        path: path.to_path_buf(),
        source,
    })
}
