//! `sparsetir pack FILE --encoding '#sparse_tensor.encoding<{...}>'`: pack a sparse file into an
//! MLIR encoding's level storage and print it (`positions[l] : ...`, `coordinates[l] : ...`,
//! `values : ...`); `--axes` also prints the equivalent sparse-axis declarations.

use std::path::Path;

use sparsetir_formats::mlir::{parse_encoding, EncodingError};

use crate::info::read_sparse;
use crate::Failure;

/// `--symbols 3,4` as numbers.
fn parse_symbols(s: Option<&str>) -> Result<Vec<i64>, Failure> {
    let Some(s) = s else {
        return Ok(Vec::new());
    };
    s.split(',')
        .map(|x| {
            x.trim().parse::<i64>().map_err(|_| {
                Failure(format!(
                    "error: --symbols expects comma-separated integers, got `{x}`"
                ))
            })
        })
        .collect()
}

/// An encoding parse error with the offending line of the attribute and a caret.
fn located(text: &str, e: &EncodingError) -> Failure {
    let mut msg = format!("error: --encoding: {e}");
    if let Some((line, col)) = e.location {
        if let Some(l) = text.lines().nth(line - 1) {
            msg.push_str(&format!(
                "\n  {l}\n  {}^",
                " ".repeat(col.saturating_sub(1))
            ));
        }
    }
    Failure(msg)
}

pub fn run(path: &Path, encoding: &str, symbols: Option<&str>, axes: bool) -> Result<(), Failure> {
    let enc = parse_encoding(encoding).map_err(|e| located(encoding, &e))?;
    let symbols = parse_symbols(symbols)?;
    let coo = read_sparse(path)?;
    let storage = enc
        .pack(&coo, &symbols)
        .map_err(|e| Failure(format!("error: packing {}: {e}", path.display())))?;
    print!("{}", storage.to_text());
    if axes {
        match enc.to_sparse_axes() {
            Ok(decl) => {
                println!();
                print!("{decl}");
                if !decl.ends_with('\n') {
                    println!();
                }
            }
            Err(e) => println!("\n# {e}"),
        }
    }
    Ok(())
}
