//! `specialize_buffer` (stage III): replaces every load of a read-only index buffer by a closed
//! form of its indices, e.g. the `indptr` of an ELL-like part that is `i * c` (SPEC §3.5), then
//! removes the buffer, its hints and regions, and its parameter when nothing else uses it.
//!
//! The closed form is a Rust closure `(function, indices) -> expression`: it receives the
//! function (to look up scalar parameters by name) and the index expressions of one load, and
//! returns the value of that element, or `None` when it cannot be built for this function (a
//! [`LowerError::Invalid`]). Its result is cast to the buffer's dtype when the types differ, and
//! every expression that changed is simplified. The closed form may use the function's scalar
//! parameters, constants and the given indices (the result is verified).
//!
//! The buffer must be a parameter's match buffer that nothing writes. Removing the parameter
//! changes the function's signature: callers pass the remaining parameters in order.

use sparsetir_arith::simplify;
use sparsetir_ir::{verify_func, BufferDecl, Expr, IRModule, PrimFunc, Stage, Stmt};

use crate::remove_unused_args::{
    atomic_target, compact_buffers, drop_assumes, drop_param_if_unused, rewrite_expr,
    walk_exprs_mut, walk_stmts_mut,
};
use crate::LowerError;

/// Replaces the buffer named `buffer` of `func` by `closed_form` (see the module
/// documentation). A no-op on functions that are not at stage III.
pub fn specialize_buffer<F>(
    func: &PrimFunc,
    buffer: &str,
    closed_form: F,
) -> Result<PrimFunc, LowerError>
where
    F: Fn(&PrimFunc, &[Expr]) -> Option<Expr>,
{
    if func.stage() != Stage::III {
        return Ok(func.clone());
    }
    let invalid = |message: String| LowerError::Invalid {
        span: func.span,
        message,
    };
    let b = func
        .buffer_by_name(buffer)
        .ok_or_else(|| invalid(format!("function `{}` has no buffer `{buffer}`", func.name)))?;
    let data = match func.buffers[b].decl {
        BufferDecl::Match { data } if func.buffer_decls.contains(&b) => data,
        _ => {
            return Err(invalid(format!(
                "buffer `{buffer}` is not bound to a parameter (match_buffer): only index \
                 arrays passed to the function can be specialized"
            )))
        }
    };
    let mut written = false;
    func.body.visit(&mut |s| {
        written |= matches!(s, Stmt::Store(st) if st.buffer == b);
        s.for_each_expr(|e| e.visit(&mut |x| written |= atomic_target(x) == Some(b)));
    });
    if written {
        return Err(invalid(format!(
            "buffer `{buffer}` is written by `{}`: only read-only buffers can be specialized",
            func.name
        )));
    }
    let dtype = func.buffers[b].dtype;
    let mut out = func.clone();
    let mut body = std::mem::replace(&mut out.body, Stmt::empty());
    let mut error = None;
    walk_exprs_mut(&mut body, &mut |e| {
        let mut changed = false;
        rewrite_expr(e, &mut |x| {
            let Expr::Load {
                buffer: lb,
                indices,
            } = x
            else {
                return;
            };
            if *lb != b || error.is_some() {
                return;
            }
            match closed_form(func, indices) {
                Some(mut r) => {
                    let mut recursive = false;
                    r.visit(&mut |y| {
                        recursive |= matches!(y, Expr::Load { buffer, .. } if *buffer == b)
                    });
                    if recursive {
                        error = Some(invalid(format!(
                            "the closed form of `{buffer}` loads `{buffer}` itself"
                        )));
                        return;
                    }
                    if r.dtype(func) != dtype {
                        r = Expr::Cast(dtype, Box::new(r));
                    }
                    *x = r;
                    changed = true;
                }
                None => {
                    error = Some(invalid(format!(
                        "the closed form of `{buffer}` cannot be built for function `{}`",
                        func.name
                    )))
                }
            }
        });
        if changed {
            *e = simplify(func, e);
        }
    });
    if let Some(e) = error {
        return Err(e);
    }
    walk_stmts_mut(&mut body, &mut |s| {
        if let Stmt::Block(blk) = s {
            blk.reads.retain(|r| r.buffer != b);
            blk.writes.retain(|r| r.buffer != b);
        }
    });
    drop_assumes(&mut body, &|x| x == b);
    out.body = body;
    out.buffer_decls.retain(|x| *x != b);
    compact_buffers(&mut out)?;
    drop_param_if_unused(&mut out, data);
    if let Err(errs) = verify_func(&out) {
        let msgs: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        return Err(invalid(format!(
            "specializing `{buffer}` gives an invalid function: {}",
            msgs.join("; ")
        )));
    }
    Ok(out)
}

/// [`specialize_buffer`] on every stage-III function of `module` that has a buffer named
/// `buffer`; the others are kept as they are.
pub fn specialize_buffer_module<F>(
    module: &IRModule,
    buffer: &str,
    closed_form: F,
) -> Result<IRModule, LowerError>
where
    F: Fn(&PrimFunc, &[Expr]) -> Option<Expr>,
{
    let funcs = module
        .funcs
        .iter()
        .map(|f| {
            if f.buffer_by_name(buffer).is_some() {
                specialize_buffer(f, buffer, &closed_form)
            } else {
                Ok(f.clone())
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(IRModule { funcs })
}
