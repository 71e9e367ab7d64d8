//! `store_as` (any stage): named `float32` buffers stored as another float type, computations
//! unchanged — every load of such a buffer becomes `T.Cast("float32", B[...])`, so a kernel with
//! float16 or bfloat16 operands still multiplies and accumulates in float32 (mixed precision:
//! 16-bit storage, 32-bit arithmetic), and a store into one rounds the float32 value once.
//!
//! `sparsetir bench --dtype float16|bfloat16` stores the sparse values and the dense operands
//! this way and keeps the output in float32.

use sparsetir_ir::{DType, Expr, PrimFunc, Stmt};

/// Why `store_as` refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreAsError {
    #[error("no buffer named `{0}`")]
    NoBuffer(String),
    #[error("buffer `{name}` holds {dtype}, not float32")]
    NotFloat32 { name: String, dtype: DType },
    #[error("{0} is not a float type to store values in")]
    NotFloat(DType),
}

/// `func` with the buffers named in `names` stored as `dt` (see the module documentation).
pub fn store_as(func: &PrimFunc, names: &[&str], dt: DType) -> Result<PrimFunc, StoreAsError> {
    if !dt.is_float() {
        return Err(StoreAsError::NotFloat(dt));
    }
    let mut out = func.clone();
    let mut ids = Vec::new();
    for name in names {
        let Some((id, b)) = func.buffers.iter().find(|(_, b)| b.name == *name) else {
            return Err(StoreAsError::NoBuffer(name.to_string()));
        };
        if b.dtype != DType::F32 {
            return Err(StoreAsError::NotFloat32 {
                name: name.to_string(),
                dtype: b.dtype,
            });
        }
        ids.push(id);
    }
    if dt == DType::F32 {
        return Ok(out);
    }
    for &id in &ids {
        out.buffers[id].dtype = dt;
    }
    let wrap = |e: &mut Expr| {
        e.rewrite_post_order(&mut |x| {
            if let Expr::Load { buffer, .. } = x {
                if ids.contains(buffer) {
                    let load = std::mem::replace(x, Expr::Bool(false));
                    *x = Expr::Cast(DType::F32, Box::new(load));
                }
            }
        })
    };
    rewrite(&mut out.body, &wrap);
    Ok(out)
}

fn rewrite(s: &mut Stmt, wrap: &dyn Fn(&mut Expr)) {
    s.for_each_expr_mut(wrap);
    s.for_each_child_mut(|c| rewrite(c, wrap));
}
