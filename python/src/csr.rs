//! Binding a CSR matrix (scipy's `indptr`/`indices`/`data`) to a sparse buffer.
//!
//! Where the buffer's storage *is* CSR — axes `[I, J]` with `I = dense_fixed(m)` a root and
//! `J = compressed_varied(I, (n, nnz), (indptr, indices))`, `m` and `n` plain parameters — the
//! three arrays are bound as they are to the parameters the axes name (one copy each, into the
//! runtime's tensors; indices converted only when their integer type differs from the axis's),
//! exactly as `sparsetir run --bind indptr=... --bind indices=... --bind a=...` binds ready-made
//! arrays: the binder checks the structure (monotone, in range, sorted where declared) and the
//! sizes against everything else bound. Any other storage goes through a coordinate list,
//! packed into the declared storage as for `.mtx` files. A second matrix over the same axes (an
//! elementwise product's operands) must have the first one's pattern; only its values are bound.

use sparsetir_formats::{Coo, Field, Tensor};
use sparsetir_ir::{AxisKind, DType, Expr, PrimFunc};
use sparsetir_runtime::{BindError, Binder};

/// A CSR matrix from Python (any index and value dtypes).
pub struct CsrInput {
    pub rows: usize,
    pub cols: usize,
    pub indptr: Tensor,
    pub indices: Tensor,
    pub data: Tensor,
}

/// The parameters a CSR buffer's arrays bind to.
struct CsrParams {
    rows: String,
    cols: String,
    indptr: String,
    indices: String,
    values: String,
    idtype: DType,
    vdtype: DType,
}

fn scalar_param(f: &PrimFunc, e: &Expr) -> Option<String> {
    match e {
        Expr::Var(v) if f.params.contains(v) && f.vars[*v].dtype.is_integer() => {
            Some(f.vars[*v].name.clone())
        }
        _ => None,
    }
}

/// The parameters of `buffer` when its storage is CSR as described in the module docs.
fn csr_params(f: &PrimFunc, buffer: &str) -> Option<CsrParams> {
    let id = f.buffer_by_name(buffer)?;
    let buf = &f.buffers[id];
    let values = buf.data_param()?;
    let [i, j] = buf.axes() else { return None };
    let (ai, aj) = (&f.axes[*i], &f.axes[*j]);
    if ai.kind != AxisKind::DenseFixed
        || ai.parent.is_some()
        || aj.kind != AxisKind::CompressedVaried
        || aj.parent != Some(*i)
        || buf.extra_storage.is_some()
    {
        return None;
    }
    Some(CsrParams {
        rows: scalar_param(f, &ai.length)?,
        cols: scalar_param(f, &aj.length)?,
        indptr: f.vars[aj.indptr?].name.clone(),
        indices: f.vars[aj.indices?].name.clone(),
        values: f.vars[values].name.clone(),
        idtype: aj.idtype,
        vdtype: buf.dtype,
    })
}

/// `t` as integers of type `dtype` (unchanged when it already is); values that do not fit are
/// an error naming `what`.
fn index_tensor(t: Tensor, dtype: DType, what: &str) -> Result<Tensor, String> {
    if t.dtype() == dtype {
        return Ok(t);
    }
    if !t.dtype().is_integer() {
        return Err(format!("{what} must be integers, not {}", t.dtype()));
    }
    let v = t.to_i64_vec();
    let bits = dtype.bits();
    let fits = |x: i64| {
        if dtype.is_uint() {
            x >= 0 && (bits >= 64 || x < (1i64 << bits))
        } else {
            bits >= 64 || (-(1i64 << (bits - 1))..(1i64 << (bits - 1))).contains(&x)
        }
    };
    if let Some(x) = v.iter().find(|x| !fits(**x)) {
        return Err(format!(
            "{what}: {x} does not fit the axis's index type {dtype}"
        ));
    }
    Tensor::from_i64(dtype, &v).map_err(|e| e.to_string())
}

/// A CSR structure bound in this call: which buffer brought it, and its arrays.
pub struct BoundCsr {
    indptr_param: String,
    buffer: String,
    dims: (usize, usize),
    indptr: Vec<i64>,
    indices: Vec<i64>,
}

/// Binds `csr` to `buffer`: its arrays as they are where the storage is CSR, else through a
/// coordinate list. A second buffer over axes already bound in this call (`bound`) binds only
/// its values, after its pattern is compared with the first one's.
pub fn bind_csr(
    binder: &mut Binder<'_>,
    f: &PrimFunc,
    buffer: &str,
    csr: CsrInput,
    bound: &mut Vec<BoundCsr>,
) -> Result<(), String> {
    binder.check_bindable(buffer).map_err(|e| e.to_string())?;
    let Some(p) = csr_params(f, buffer) else {
        let coo = coo_of(&csr).map_err(|e| format!("buffer `{buffer}`: {e}"))?;
        return binder.bind_coo(buffer, &coo).map_err(|e| e.to_string());
    };
    let what = |x: &str| format!("buffer `{buffer}`: {x}");
    let values = if csr.data.dtype() == p.vdtype {
        csr.data
    } else {
        Tensor::from_f64(p.vdtype, &csr.data.to_f64_vec()).map_err(|e| what(&e.to_string()))?
    };
    if let Some(first) = bound.iter().find(|b| b.indptr_param == p.indptr) {
        if (csr.rows, csr.cols) != first.dims {
            return Err(what(&format!(
                "a {}x{} matrix, but `{}` over the same axes is {}x{}",
                csr.rows, csr.cols, first.buffer, first.dims.0, first.dims.1
            )));
        }
        if csr.indptr.to_i64_vec() != first.indptr || csr.indices.to_i64_vec() != first.indices {
            return Err(what(&format!(
                "its sparsity pattern differs from `{}`'s (buffers over the same axes must share \
                 their structure)",
                first.buffer
            )));
        }
        return binder
            .bind_param_array(&p.values, values)
            .map_err(|e| e.to_string());
    }
    for (param, size) in [(&p.rows, csr.rows), (&p.cols, csr.cols)] {
        binder.set(param, &size.to_string()).map_err(|e| match e {
            BindError::SizeMismatch {
                expected, found, ..
            } => what(&format!(
                "`{param}` is {expected} from the data bound before, but the matrix gives \
                     {found}"
            )),
            other => what(&other.to_string()),
        })?;
    }
    let indptr = index_tensor(csr.indptr, p.idtype, &what("indptr"))?;
    let indices = index_tensor(csr.indices, p.idtype, &what("indices"))?;
    bound.push(BoundCsr {
        indptr_param: p.indptr.clone(),
        buffer: buffer.to_string(),
        dims: (csr.rows, csr.cols),
        indptr: indptr.to_i64_vec(),
        indices: indices.to_i64_vec(),
    });
    for (param, t) in [
        (&p.indptr, indptr),
        (&p.indices, indices),
        (&p.values, values),
    ] {
        binder
            .bind_param_array(param, t)
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The coordinate list of a CSR matrix (its arrays checked first).
fn coo_of(csr: &CsrInput) -> Result<Coo, String> {
    let ip = csr.indptr.to_i64_vec();
    let ix = csr.indices.to_i64_vec();
    let vals = csr.data.to_f64_vec();
    if ip.len() != csr.rows + 1 {
        return Err(format!(
            "indptr has {} entries for {} rows",
            ip.len(),
            csr.rows
        ));
    }
    if ix.len() != vals.len() {
        return Err(format!("{} indices but {} values", ix.len(), vals.len()));
    }
    let mut coords = Vec::with_capacity(ix.len());
    for r in 0..csr.rows {
        let (lo, hi) = (ip[r], ip[r + 1]);
        if lo < 0 || hi < lo || hi as usize > ix.len() {
            return Err(format!(
                "indptr[{r}..={}] = {lo}, {hi} is not a valid row range",
                r + 1
            ));
        }
        for &c in &ix[lo as usize..hi as usize] {
            coords.push(vec![r as i64, c]);
        }
    }
    Coo::new(vec![csr.rows, csr.cols], coords, vals, Field::Real).map_err(|e| e.to_string())
}
