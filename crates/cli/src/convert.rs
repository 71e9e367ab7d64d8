//! `sparsetir convert IN --to FORMAT -o OUT`: rewrite a sparse file in another file format, or
//! split it into the `.npy` arrays of a storage format (CSR, CSC, BSR, ELL, dense).

use std::path::Path;

use sparsetir_formats::containers::{Bsr, BsrPadding, Csc, Csr, Ell};
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
                let (indptr, indices, values) = compress(&coo, false);
                let m = Csr::<f64, i64>::try_new(rows, cols, indptr, indices, values, true)
                    .map_err(|e| Failure(format!("error: CSR: {e}")))?;
                w.index(&dir.join("indptr.npy"), m.indptr(), vec![rows + 1])?;
                w.index(&dir.join("indices.npy"), m.indices(), vec![m.nnz()])?;
                w.values(&dir.join("values.npy"), m.values(), vec![m.nnz()])?;
            } else {
                let (indptr, indices, values) = compress(&coo, true);
                let m = Csc::<f64, i64>::try_new(rows, cols, indptr, indices, values, true)
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
            let (indptr, indices, values) = bsr_parts(&coo, r, c);
            let m = Bsr::<f64, i64>::try_new(rows, cols, (r, c), padding, indptr, indices, values)
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
            let (indptr, indices, values) = compress(&coo, false);
            let max_deg = indptr.windows(2).map(|p| p[1] - p[0]).max().unwrap_or(0) as usize;
            let width = match arg {
                None => max_deg,
                Some(a) => a.trim().parse::<usize>().map_err(|_| {
                    Failure(format!("error: --to ell:W expects a width, got `{a}`"))
                })?,
            };
            let slots = rows.checked_mul(width).ok_or_else(|| {
                Failure(format!("error: {rows} rows x width {width} is too large"))
            })?;
            let mut eidx = vec![0i64; slots];
            let mut evals = vec![0.0f64; slots];
            let mut counts = vec![0i64; rows];
            for i in 0..rows {
                let (lo, hi) = (indptr[i] as usize, indptr[i + 1] as usize);
                if hi - lo > width {
                    return Err(Failure(format!(
                        "error: ELL: row {i} has {} entries, more than the width {width}",
                        hi - lo
                    )));
                }
                eidx[i * width..i * width + hi - lo].copy_from_slice(&indices[lo..hi]);
                evals[i * width..i * width + hi - lo].copy_from_slice(&values[lo..hi]);
                counts[i] = (hi - lo) as i64;
            }
            let m = Ell::<f64, i64>::try_new(rows, cols, width, eidx, evals, counts, 0, true)
                .map_err(|e| Failure(format!("error: ELL: {e}")))?;
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

/// Compressed rows (or columns when `transpose`) with sorted minor indices and summed
/// duplicates, by a counting sort (no dense intermediate).
fn compress(coo: &Coo, transpose: bool) -> (Vec<i64>, Vec<i64>, Vec<f64>) {
    let (maj, min) = if transpose { (1, 0) } else { (0, 1) };
    let major = coo.dims[maj];
    let mut counts = vec![0usize; major + 1];
    for c in &coo.coords {
        counts[c[maj] as usize + 1] += 1;
    }
    for i in 0..major {
        counts[i + 1] += counts[i];
    }
    let mut next = counts.clone();
    let mut order = vec![0usize; coo.nnz()];
    for (k, c) in coo.coords.iter().enumerate() {
        let slot = &mut next[c[maj] as usize];
        order[*slot] = k;
        *slot += 1;
    }
    let mut indptr = Vec::with_capacity(major + 1);
    let mut indices = Vec::with_capacity(coo.nnz());
    let mut values = Vec::with_capacity(coo.nnz());
    indptr.push(0i64);
    for i in 0..major {
        let seg = &mut order[counts[i]..counts[i + 1]];
        seg.sort_by_key(|&k| coo.coords[k][min]);
        for &k in seg.iter() {
            let j = coo.coords[k][min];
            match indices.last() {
                Some(&last) if last == j && indices.len() as i64 > indptr[i] => {
                    if let Some(v) = values.last_mut() {
                        *v += coo.values[k];
                    }
                }
                _ => {
                    indices.push(j);
                    values.push(coo.values[k]);
                }
            }
        }
        indptr.push(indices.len() as i64);
    }
    (indptr, indices, values)
}

/// BSR arrays: the stored blocks of every block row (sorted), `r * c` values per block.
fn bsr_parts(coo: &Coo, r: usize, c: usize) -> (Vec<i64>, Vec<i64>, Vec<f64>) {
    let mb = coo.dims[0].div_ceil(r);
    let mut entries: Vec<(usize, usize, usize, f64)> = coo
        .coords
        .iter()
        .zip(&coo.values)
        .map(|(x, &v)| {
            let (i, j) = (x[0] as usize, x[1] as usize);
            (i / r, j / c, (i % r) * c + j % c, v)
        })
        .collect();
    entries.sort_by_key(|e| (e.0, e.1));
    let mut indptr = vec![0i64; mb + 1];
    let mut indices: Vec<i64> = Vec::new();
    let mut values: Vec<f64> = Vec::new();
    let mut last: Option<(usize, usize)> = None;
    for (bi, bj, off, v) in entries {
        if last != Some((bi, bj)) {
            last = Some((bi, bj));
            indices.push(bj as i64);
            values.resize(values.len() + r * c, 0.0);
            indptr[bi + 1] += 1;
        }
        let base = values.len() - r * c;
        values[base + off] += v;
    }
    for i in 0..mb {
        indptr[i + 1] += indptr[i];
    }
    (indptr, indices, values)
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
