//! FROSTT `.tns` reading and writing: one entry per line, `c1 c2 ... cN value` with 1-based
//! coordinates, optionally preceded by a `rank nnz` line and a line of `rank` dimensions.
//!
//! **Which form a file has.** Blank lines and lines starting with `#` or `%` are ignored. A file
//! is read in the *header form* exactly when all of these hold:
//! 1. the first line has exactly 2 fields, both non-negative integers `rank >= 1` and `nnz`;
//! 2. the second line has exactly `rank` fields, all non-negative integers (the dimensions);
//! 3. exactly `nnz` lines follow, and each of them has `rank + 1` fields.
//!
//! Otherwise the file is in the *plain form*: every line is an entry, all lines have the same
//! number of fields `N + 1`, and the dimensions are the per-dimension maximum coordinates.
//! (A plain rank-1 file cannot pass rule 2 with rank ≥ 2 and rule 3 together unless it has only
//! two lines and its first value is 0: such a file is read as an empty header-form tensor.)

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::coo::{Coo, CooError, Field};

/// What went wrong on a given line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TnsErrorKind {
    #[error("empty file: no entries")]
    Empty,
    #[error("expected {expected} fields, found {found}")]
    FieldCount { expected: usize, found: usize },
    #[error("non-numeric field `{0}`")]
    NotNumeric(String),
    #[error("coordinate {value} of dimension {dim} is outside 1..={extent}")]
    CoordinateOutOfRange {
        dim: usize,
        value: i64,
        extent: usize,
    },
    #[error("an entry needs at least one coordinate and a value")]
    TooFewFields,
}

/// A `.tns` reading or writing error.
#[derive(Debug, thiserror::Error)]
pub enum TnsError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// `line` is 1-based.
    #[error("line {line}: {kind}")]
    Parse { line: usize, kind: TnsErrorKind },
    #[error(transparent)]
    Coo(#[from] CooError),
}

impl TnsError {
    pub fn kind(&self) -> Option<&TnsErrorKind> {
        match self {
            TnsError::Parse { kind, .. } => Some(kind),
            _ => None,
        }
    }
    pub fn line(&self) -> Option<usize> {
        match self {
            TnsError::Parse { line, .. } => Some(*line),
            _ => None,
        }
    }
}

fn err(line: usize, kind: TnsErrorKind) -> TnsError {
    TnsError::Parse { line, kind }
}

fn parse_uint(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 19 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn parse_int(s: &str) -> Option<i64> {
    let digits = s
        .strip_prefix('-')
        .or_else(|| s.strip_prefix('+'))
        .unwrap_or(s);
    let v = i64::try_from(parse_uint(digits)?).ok()?;
    Some(if s.starts_with('-') { -v } else { v })
}

/// Reads a `.tns` file.
pub fn read_tns(path: impl AsRef<Path>) -> Result<Coo, TnsError> {
    let path = path.as_ref();
    let text = std::fs::read_to_string(path).map_err(|source| TnsError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_tns(&text)
}

/// Detects the header form (see the module docs); returns `(rank, nnz, dims)`.
fn detect_header(lines: &[(usize, Vec<&str>)]) -> Option<(usize, usize, Vec<usize>)> {
    let (_, first) = lines.first()?;
    if first.len() != 2 {
        return None;
    }
    let rank = usize::try_from(parse_uint(first[0])?).ok()?;
    let nnz = usize::try_from(parse_uint(first[1])?).ok()?;
    if rank == 0 {
        return None;
    }
    let (_, second) = lines.get(1)?;
    if second.len() != rank {
        return None;
    }
    let dims = second
        .iter()
        .map(|f| parse_uint(f).and_then(|v| usize::try_from(v).ok()))
        .collect::<Option<Vec<usize>>>()?;
    let rest = &lines[2..];
    if rest.len() != nnz || rest.iter().any(|(_, f)| f.len() != rank + 1) {
        return None;
    }
    Some((rank, nnz, dims))
}

/// Parses `.tns` text (either form; see the module docs).
pub fn parse_tns(text: &str) -> Result<Coo, TnsError> {
    let lines: Vec<(usize, Vec<&str>)> = text
        .lines()
        .enumerate()
        .filter_map(|(i, l)| {
            let t = l.trim();
            if t.is_empty() || t.starts_with('#') || t.starts_with('%') {
                None
            } else {
                Some((i + 1, t.split_ascii_whitespace().collect()))
            }
        })
        .collect();
    let (rank, entries, dims) = match detect_header(&lines) {
        Some((rank, _nnz, dims)) => (rank, &lines[2..], Some(dims)),
        None => {
            let (line, first) = lines.first().ok_or_else(|| err(1, TnsErrorKind::Empty))?;
            if first.len() < 2 {
                return Err(err(*line, TnsErrorKind::TooFewFields));
            }
            (first.len() - 1, &lines[..], None)
        }
    };
    let mut coords = Vec::with_capacity(entries.len());
    let mut values = Vec::with_capacity(entries.len());
    let mut maxima = vec![0usize; rank];
    let mut all_int = true;
    for (line, fields) in entries {
        let line = *line;
        if fields.len() != rank + 1 {
            return Err(err(
                line,
                TnsErrorKind::FieldCount {
                    expected: rank + 1,
                    found: fields.len(),
                },
            ));
        }
        let mut c = Vec::with_capacity(rank);
        for (d, f) in fields[..rank].iter().enumerate() {
            let v =
                parse_int(f).ok_or_else(|| err(line, TnsErrorKind::NotNumeric(f.to_string())))?;
            let extent = dims.as_ref().map_or(usize::MAX, |d2| d2[d]);
            if v < 1 || v as u64 > extent as u64 {
                return Err(err(
                    line,
                    TnsErrorKind::CoordinateOutOfRange {
                        dim: d,
                        value: v,
                        extent,
                    },
                ));
            }
            maxima[d] = maxima[d].max(v as usize);
            c.push(v - 1);
        }
        let vtext = fields[rank];
        let v: f64 = vtext
            .parse()
            .map_err(|_| err(line, TnsErrorKind::NotNumeric(vtext.to_string())))?;
        all_int &= parse_int(vtext).is_some();
        coords.push(c);
        values.push(v);
    }
    let field = if all_int && !values.is_empty() {
        Field::Integer
    } else {
        Field::Real
    };
    Ok(Coo {
        dims: dims.unwrap_or(maxima),
        coords,
        values,
        field,
    })
}

/// Formats a COO as plain-form `.tns` text (1-based coordinates, round-trippable values).
pub fn write_tns_string(coo: &Coo) -> Result<String, TnsError> {
    coo.validate()?;
    let mut s = String::with_capacity(coo.nnz() * (8 * coo.rank() + 16));
    for (c, v) in coo.coords.iter().zip(&coo.values) {
        for x in c {
            let _ = write!(s, "{} ", x + 1);
        }
        let _ = writeln!(s, "{v:?}");
    }
    Ok(s)
}

/// Formats a COO as header-form `.tns` text (keeps dimensions beyond the last stored entry).
pub fn write_tns_header_string(coo: &Coo) -> Result<String, TnsError> {
    coo.validate()?;
    let mut s = format!("{} {}\n", coo.rank(), coo.nnz());
    let dims: Vec<String> = coo.dims.iter().map(|d| d.to_string()).collect();
    s.push_str(&dims.join(" "));
    s.push('\n');
    s.push_str(&write_tns_string(coo)?);
    Ok(s)
}

/// Writes a COO as a plain-form `.tns` file.
pub fn write_tns(path: impl AsRef<Path>, coo: &Coo) -> Result<(), TnsError> {
    let path = path.as_ref();
    let s = write_tns_string(coo)?;
    std::fs::write(path, s).map_err(|source| TnsError::Io {
        path: path.to_path_buf(),
        source,
    })
}
