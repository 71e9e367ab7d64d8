//! `sparsetir info FILE`: shape, entry count and row-degree statistics of a `.mtx` / `.tns` file.

use std::fmt::Write as _;
use std::path::Path;

use sparsetir_formats::mtx::{parse_header, parse_mtx, MtxFormat, Symmetry};
use sparsetir_formats::tns::parse_tns;
use sparsetir_formats::{Coo, Field};

use crate::Failure;

/// Reads a sparse file by extension, naming the file (and the line) in errors.
pub fn read_sparse(path: &Path) -> Result<Coo, Failure> {
    Ok(read_with_header(path)?.0)
}

/// A file's text, failing with its name.
fn read_text(path: &Path) -> Result<String, Failure> {
    std::fs::read_to_string(path)
        .map_err(|e| Failure(format!("error: cannot read {}: {e}", path.display())))
}

/// The COO and, for Matrix Market files, the header's description lines.
fn read_with_header(path: &Path) -> Result<(Coo, Vec<(String, String)>), Failure> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    let name = path.display();
    match ext.as_str() {
        "mtx" => {
            let text = read_text(path)?;
            let coo = parse_mtx(&text).map_err(|e| Failure(format!("error: {name}: {e}")))?;
            let mut meta = Vec::new();
            if let Ok(h) = parse_header(text.lines().next().unwrap_or("")) {
                let format = match h.format {
                    MtxFormat::Coordinate => "coordinate",
                    MtxFormat::Array => "array",
                };
                let field = match h.field {
                    Field::Real => "real",
                    Field::Integer => "integer",
                    Field::Pattern => "pattern",
                };
                let symmetry = match h.symmetry {
                    Symmetry::General => "general",
                    Symmetry::Symmetric => "symmetric",
                    Symmetry::SkewSymmetric => "skew-symmetric",
                };
                meta.push(("format".into(), format!("matrix market {format}")));
                meta.push(("field".into(), field.into()));
                meta.push(("symmetry".into(), symmetry.into()));
            }
            Ok((coo, meta))
        }
        "tns" => {
            let text = read_text(path)?;
            let coo = parse_tns(&text).map_err(|e| Failure(format!("error: {name}: {e}")))?;
            Ok((coo, vec![("format".into(), "frostt tns".into())]))
        }
        other => Err(Failure(format!(
            "error: {name}: unknown file type `.{other}` (expected .mtx or .tns)"
        ))),
    }
}

/// The report `sparsetir info` prints: one `key: value` per line.
pub fn report(path: &Path) -> Result<String, Failure> {
    let (coo, meta) = read_with_header(path)?;
    let mut s = String::new();
    let _ = writeln!(s, "file: {}", path.display());
    for (k, v) in &meta {
        let _ = writeln!(s, "{k}: {v}");
    }
    if coo.rank() == 2 {
        let _ = writeln!(s, "rows: {}", coo.dims[0]);
        let _ = writeln!(s, "cols: {}", coo.dims[1]);
    } else {
        let _ = writeln!(s, "rank: {}", coo.rank());
        let dims: Vec<String> = coo.dims.iter().map(|d| d.to_string()).collect();
        let _ = writeln!(s, "dims: {}", dims.join(" x "));
    }
    let _ = writeln!(s, "nnz: {}", coo.nnz());
    let mut distinct: Vec<&[i64]> = coo.coords.iter().map(|c| c.as_slice()).collect();
    distinct.sort_unstable();
    distinct.dedup();
    let dups = coo.nnz() - distinct.len();
    if dups > 0 {
        let _ = writeln!(s, "duplicates: {dups}");
    }
    if coo.rank() >= 1 {
        let rows = coo.dims[0];
        let mut deg = vec![0usize; rows];
        for c in &coo.coords {
            deg[c[0] as usize] += 1;
        }
        if rows == 0 {
            let _ = writeln!(s, "row degree: none (0 rows)");
        } else {
            let min = deg.iter().min().copied().unwrap_or(0);
            let max = deg.iter().max().copied().unwrap_or(0);
            let mean = coo.nnz() as f64 / rows as f64;
            let _ = writeln!(s, "row degree: min {min}, mean {mean:.4}, max {max}");
        }
        let empty = deg.iter().filter(|&&d| d == 0).count();
        let _ = writeln!(s, "empty rows: {empty}");
    }
    Ok(s)
}

pub fn run(path: &Path) -> Result<(), Failure> {
    print!("{}", report(path)?);
    Ok(())
}
