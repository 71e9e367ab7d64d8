//! `sparsetir convert IN --to FORMAT -o OUT`: rewrite a sparse file in another file format, or
//! split it into the `.npy` arrays of a storage format (CSR, CSC, BSR, ELL, dense).

use std::path::Path;

use sparsetir_formats::containers::{Bsr, BsrPadding, Csc, Csr, Ell};
use sparsetir_formats::convert::Duplicates;
use sparsetir_formats::{write_npy, Coo, Tensor, TensorData};

use crate::gen::write_coo;
use crate::info::read_sparse;
use crate::Failure;

/// The text of `sparsetir convert --help` after the options.
pub const LAYOUT_HELP: &str = "\
FORMATS
  mtx, general   Matrix Market coordinate general file (symmetric input is expanded)
  tns            FROSTT .tns file (header form: `rank nnz`, dims, entries)
  csr            directory OUT with indptr.npy (rows+1), indices.npy (nnz column ids),
                 values.npy (nnz), shape.npy ([rows, cols], int64)
  csc            directory OUT with indptr.npy (cols+1), indices.npy (nnz row ids),
                 values.npy (nnz), shape.npy
  bsr:RxC        directory OUT with indptr.npy (rows/R + 1), indices.npy (block columns),
                 values.npy (nnz_blocks, R, C; row-major inside a block), shape.npy;
                 R and C must divide the shape unless --pad is given (overhang holds zeros)
  ell[:W]        directory OUT with indices.npy (rows, W), values.npy (rows, W),
                 counts.npy (rows: real entries per row), shape.npy; W defaults to the
                 largest row degree; padding slots hold column 0 and value 0
  dense          one .npy file OUT of shape (rows, cols)
Duplicate entries are summed and columns sorted in every array format; indices are
int32 unless --idtype int64, values float32 unless --dtype float64.";

/// Options of one conversion.
pub struct Options<'a> {
    pub input: &'a Path,
    pub to: &'a str,
    pub output: &'a Path,
    pub idtype: &'a str,
    pub dtype: &'a str,
    pub pad: bool,
}

pub fn run(o: &Options) -> Result<(), Failure> {
    let (idx64, val64) = dtypes(o.idtype, o.dtype)?;
    let coo = read_sparse(o.input)?;
    let to = o.to.to_ascii_lowercase();
    let (name, arg) = match to.split_once(':') {
        Some((n, a)) => (n, Some(a)),
        None => (to.as_str(), None),
    };
    let no_arg = |arg: Option<&str>| match arg {
        None => Ok(()),
        Some(a) => Err(Failure(format!(
            "error: --to {name} takes no `:{a}` argument"
        ))),
    };
    let comment = format!("converted from {}", o.input.display());
    let w = Writer { idx64, val64 };
    match name {
        "mtx" | "general" => {
            no_arg(arg)?;
            write_coo(&with_ext(o.output, "mtx")?, &coo, &comment)
        }
        "tns" => {
            no_arg(arg)?;
            write_coo(&with_ext(o.output, "tns")?, &coo, &comment)
        }
        "dense" => {
            no_arg(arg)?;
            let (rows, cols) = matrix(&coo)?;
            let dense = coo.to_dense().ok_or_else(|| {
                Failure(format!("error: a dense {rows} x {cols} array is too large"))
            })?;
            w.values(o.output, &dense, vec![rows, cols])
        }
        "csr" | "csc" => {
            no_arg(arg)?;
            let (rows, cols) = matrix(&coo)?;
            let dir = out_dir(o.output)?;
            if name == "csr" {
                let m = Csr::<f64, i64>::from_coo(&coo, Duplicates::Sum)
                    .map_err(|e| Failure(format!("error: CSR: {e}")))?;
                w.index(&dir.join("indptr.npy"), m.indptr(), vec![rows + 1])?;
                w.index(&dir.join("indices.npy"), m.indices(), vec![m.nnz()])?;
                w.values(&dir.join("values.npy"), m.values(), vec![m.nnz()])?;
            } else {
                let m = Csc::<f64, i64>::from_coo(&coo, Duplicates::Sum)
                    .map_err(|e| Failure(format!("error: CSC: {e}")))?;
                w.index(&dir.join("indptr.npy"), m.indptr(), vec![cols + 1])?;
                w.index(&dir.join("indices.npy"), m.indices(), vec![m.nnz()])?;
                w.values(&dir.join("values.npy"), m.values(), vec![m.nnz()])?;
            }
            write_shape(dir, rows, cols)
        }
        "bsr" => {
            let (rows, cols) = matrix(&coo)?;
            let (r, c) = parse_block(arg)?;
            let padding = if o.pad {
                BsrPadding::Allow
            } else {
                BsrPadding::Deny
            };
            let m = Bsr::<f64, i64>::from_coo(&coo, (r, c), padding, Duplicates::Sum)
                .map_err(|e| Failure(format!("error: BSR {r}x{c}: {e}")))?;
            let dir = out_dir(o.output)?;
            w.index(&dir.join("indptr.npy"), m.indptr(), vec![m.indptr().len()])?;
            w.index(&dir.join("indices.npy"), m.indices(), vec![m.nnz_blocks()])?;
            w.values(
                &dir.join("values.npy"),
                m.values(),
                vec![m.nnz_blocks(), r, c],
            )?;
            write_shape(dir, rows, cols)
        }
        "ell" => {
            let (rows, cols) = matrix(&coo)?;
            let width = match arg {
                None => None,
                Some(a) => Some(a.trim().parse::<usize>().map_err(|_| {
                    Failure(format!("error: --to ell:W expects a width, got `{a}`"))
                })?),
            };
            let m = Ell::<f64, i64>::from_coo(&coo, width, Duplicates::Sum)
                .map_err(|e| Failure(format!("error: ELL: {e}")))?;
            let width = m.width();
            let dir = out_dir(o.output)?;
            w.index(&dir.join("indices.npy"), m.indices(), vec![rows, width])?;
            w.values(&dir.join("values.npy"), m.values(), vec![rows, width])?;
            w.index(&dir.join("counts.npy"), m.counts(), vec![rows])?;
            write_shape(dir, rows, cols)
        }
        other => Err(Failure(format!(
            "error: unknown format `{other}` (expected mtx, general, tns, csr, csc, bsr:RxC, \
             ell[:W] or dense)"
        ))),
    }
}

fn dtypes(idtype: &str, dtype: &str) -> Result<(bool, bool), Failure> {
    let idx64 = match idtype {
        "int32" | "i32" => false,
        "int64" | "i64" => true,
        other => {
            return Err(Failure(format!(
                "error: --idtype must be int32 or int64, got `{other}`"
            )))
        }
    };
    let val64 = match dtype {
        "float32" | "f32" => false,
        "float64" | "f64" => true,
        other => {
            return Err(Failure(format!(
                "error: --dtype must be float32 or float64, got `{other}`"
            )))
        }
    };
    Ok((idx64, val64))
}

fn matrix(coo: &Coo) -> Result<(usize, usize), Failure> {
    if coo.rank() != 2 {
        return Err(Failure(format!(
            "error: this format holds matrices; the input has rank {}",
            coo.rank()
        )));
    }
    Ok((coo.dims[0], coo.dims[1]))
}

/// `path`, refusing an extension other than `ext` (so `--to tns -o x.mtx` is caught).
fn with_ext(path: &Path, ext: &str) -> Result<std::path::PathBuf, Failure> {
    match path.extension().and_then(|e| e.to_str()) {
        Some(e) if !e.eq_ignore_ascii_case(ext) => Err(Failure(format!(
            "error: {}: the output of this conversion is a .{ext} file",
            path.display()
        ))),
        _ => Ok(path.to_path_buf()),
    }
}

fn out_dir(path: &Path) -> Result<&Path, Failure> {
    std::fs::create_dir_all(path)
        .map_err(|e| Failure(format!("error: cannot create {}: {e}", path.display())))?;
    Ok(path)
}

fn parse_block(arg: Option<&str>) -> Result<(usize, usize), Failure> {
    let s = arg.unwrap_or("");
    let bad = || {
        Failure(format!(
            "error: --to bsr:RxC expects a block size like 2x2, got `{s}`"
        ))
    };
    let (r, c) = s.split_once('x').unwrap_or((s, s));
    let r: usize = r.trim().parse().map_err(|_| bad())?;
    let c: usize = c.trim().parse().map_err(|_| bad())?;
    if r == 0 || c == 0 {
        return Err(bad());
    }
    Ok((r, c))
}

struct Writer {
    idx64: bool,
    val64: bool,
}

impl Writer {
    fn index(&self, path: &Path, data: &[i64], shape: Vec<usize>) -> Result<(), Failure> {
        let data = if self.idx64 {
            TensorData::I64(data.to_vec())
        } else {
            let mut v = Vec::with_capacity(data.len());
            for (pos, &x) in data.iter().enumerate() {
                v.push(i32::try_from(x).map_err(|_| {
                    Failure(format!(
                        "error: {}[{pos}] = {x} does not fit in int32 (use --idtype int64)",
                        path.display()
                    ))
                })?);
            }
            TensorData::I32(v)
        };
        save(path, Tensor { shape, data })
    }
    fn values(&self, path: &Path, data: &[f64], shape: Vec<usize>) -> Result<(), Failure> {
        let data = if self.val64 {
            TensorData::F64(data.to_vec())
        } else {
            TensorData::F32(data.iter().map(|&x| x as f32).collect())
        };
        save(path, Tensor { shape, data })
    }
}

fn save(path: &Path, t: Tensor) -> Result<(), Failure> {
    write_npy(path, &t).map_err(|e| Failure(format!("error: {}: {e}", path.display())))
}

fn write_shape(dir: &Path, rows: usize, cols: usize) -> Result<(), Failure> {
    save(
        &dir.join("shape.npy"),
        Tensor {
            shape: vec![2],
            data: TensorData::I64(vec![rows as i64, cols as i64]),
        },
    )
}
