//! `specialize`: binds scalar parameters of a function to constants everywhere they appear (axis
//! sizes, buffer shapes and strides, loop extents, block iterators and regions, bodies) and
//! simplifies the expressions that changed, so later passes and the C compiler see constant sizes
//! (e.g. a feature width the compiler can vectorize). Works on functions of every stage.
//!
//! # ABI: the parameters stay
//!
//! A specialized function keeps its parameter list unchanged: the bound parameters are still
//! parameters (no longer read by the body), so the compiled kernel takes the very same arguments
//! as the unspecialized one and the runtime binds data to it without knowing about the
//! specialization. The caller is expected to pass the value the function was specialized with;
//! since every size inside the function is now the constant, the runtime's launch-time
//! validation checks the data against the constant, so passing another value is never unsafe
//! (the argument is simply ignored).

use sparsetir_arith::simplify;
use sparsetir_ir::{BufferShape, DType, Expr, PrimFunc, VarId};

/// Why [`specialize`] refused a binding.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecializeError {
    /// No parameter has this name.
    #[error("function `{func}` has no scalar parameter `{name}` (scalar parameters: {known})")]
    UnknownParam {
        func: String,
        name: String,
        known: String,
    },
    /// The parameter is a `T.handle` (an array), not a scalar.
    #[error("parameter `{name}` of `{func}` is a handle (an array): only scalars can be bound")]
    NotScalar { func: String, name: String },
    /// The value does not fit the parameter's type.
    #[error("parameter `{name}` has type {dtype}: the value {value} does not fit")]
    DoesNotFit {
        name: String,
        dtype: DType,
        value: i64,
    },
    /// The parameter is a size (axis length, nnz, buffer extent) and the value is negative.
    #[error("parameter `{name}` is a size: the value {value} is negative")]
    NegativeSize { name: String, value: i64 },
    /// The same parameter is bound twice to different values.
    #[error("parameter `{name}` is bound twice, to {first} and to {second}")]
    Conflict {
        name: String,
        first: i64,
        second: i64,
    },
}

/// Binds each `(parameter name, value)` of `bindings` to its constant in a copy of `func` (see
/// the module documentation: the parameters themselves stay in the parameter list). Integer and
/// bool parameters take the value as is (it must fit their type); float parameters take it
/// converted to a float. Every expression that mentions a bound parameter is simplified
/// afterwards. Binding nothing returns an equal function.
pub fn specialize<S: AsRef<str>>(
    func: &PrimFunc,
    bindings: &[(S, i64)],
) -> Result<PrimFunc, SpecializeError> {
    let mut map: Vec<(VarId, Expr, i64)> = Vec::new();
    for (name, value) in bindings {
        let name = name.as_ref();
        let value = *value;
        let v = func
            .param(name)
            .ok_or_else(|| SpecializeError::UnknownParam {
                func: func.name.clone(),
                name: name.to_string(),
                known: scalar_params(func),
            })?;
        let dtype = func.vars[v].dtype;
        if dtype == DType::Handle {
            return Err(SpecializeError::NotScalar {
                func: func.name.clone(),
                name: name.to_string(),
            });
        }
        if let Some((_, _, first)) = map.iter().find(|(w, _, _)| *w == v) {
            if *first != value {
                return Err(SpecializeError::Conflict {
                    name: name.to_string(),
                    first: *first,
                    second: value,
                });
            }
            continue;
        }
        let constant = if dtype.is_float() {
            Expr::Float(value as f64, dtype)
        } else if dtype == DType::Bool {
            if value != 0 && value != 1 {
                return Err(fits_err(name, dtype, value));
            }
            Expr::Bool(value == 1)
        } else {
            if !int_fits(value, dtype) {
                return Err(fits_err(name, dtype, value));
            }
            Expr::Int(value, dtype)
        };
        if value < 0 && is_size(func, v) {
            return Err(SpecializeError::NegativeSize {
                name: name.to_string(),
                value,
            });
        }
        map.push((v, constant, value));
    }
    let mut out = func.clone();
    if map.is_empty() {
        return Ok(out);
    }
    let subst = |e: &mut Expr| rewrite(func, e, &map);
    for h in out.axes.handles().collect::<Vec<_>>() {
        let axis = &mut out.axes[h];
        subst(&mut axis.length);
        if let Some(n) = &mut axis.nnz {
            subst(n);
        }
        if let Some(n) = &mut axis.nnz_cols {
            subst(n);
        }
    }
    for h in out.buffers.handles().collect::<Vec<_>>() {
        let b = &mut out.buffers[h];
        if let BufferShape::Dense(dims) = &mut b.shape {
            dims.iter_mut().for_each(subst);
        }
        b.strides.iter_mut().for_each(subst);
        if let Some(e) = &mut b.extra_storage {
            subst(e);
        }
        if let Some(e) = &mut b.default_value {
            subst(e);
        }
    }
    out.body.visit_exprs_mut(&mut |e| subst(e));
    Ok(out)
}

fn fits_err(name: &str, dtype: DType, value: i64) -> SpecializeError {
    SpecializeError::DoesNotFit {
        name: name.to_string(),
        dtype,
        value,
    }
}

/// The scalar parameters of `func`, comma-separated (for messages).
fn scalar_params(func: &PrimFunc) -> String {
    let v: Vec<&str> = func
        .params
        .iter()
        .filter(|p| func.vars[**p].dtype != DType::Handle)
        .map(|p| func.vars[*p].name.as_str())
        .collect();
    if v.is_empty() {
        "none".to_string()
    } else {
        v.join(", ")
    }
}

/// Whether `v` is used directly as an axis size or a dense buffer extent.
fn is_size(func: &PrimFunc, v: VarId) -> bool {
    let is_v = |e: &Expr| e.as_var() == Some(v);
    func.axes.iter().any(|(_, a)| {
        is_v(&a.length) || a.nnz.as_ref().is_some_and(is_v) || a.nnz_cols.as_ref().is_some_and(is_v)
    }) || func.buffers.iter().any(|(_, b)| match &b.shape {
        BufferShape::Dense(dims) => dims.iter().any(is_v),
        BufferShape::Sparse(_) => false,
    })
}

/// Whether `v` is representable in the integer type `dt`.
fn int_fits(v: i64, dt: DType) -> bool {
    match dt {
        DType::I8 => i8::try_from(v).is_ok(),
        DType::I16 => i16::try_from(v).is_ok(),
        DType::I32 => i32::try_from(v).is_ok(),
        DType::U8 => u8::try_from(v).is_ok(),
        DType::U16 => u16::try_from(v).is_ok(),
        DType::U32 => u32::try_from(v).is_ok(),
        DType::U64 => v >= 0,
        _ => true,
    }
}

/// Substitutes the bound parameters in `e`; when anything was replaced, simplifies the result
/// (knowing nothing else, so the rewrite is sound for any value of the other variables).
fn rewrite(func: &PrimFunc, e: &mut Expr, map: &[(VarId, Expr, i64)]) {
    if substitute(e, map) {
        *e = simplify(func, e);
    }
}

/// Replaces bound variables inside `e`; returns whether anything changed.
fn substitute(e: &mut Expr, map: &[(VarId, Expr, i64)]) -> bool {
    let mut changed = false;
    e.rewrite_post_order(&mut |x| {
        if let Expr::Var(v) = x {
            if let Some((_, c, _)) = map.iter().find(|(w, _, _)| w == v) {
                *x = c.clone();
                changed = true;
            }
        }
    });
    changed
}
