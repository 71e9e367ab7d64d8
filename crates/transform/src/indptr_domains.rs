//! `indptr_domains` (stage III, for the CUDA writer): states what every input `indptr` holds,
//! as `T.assume_buffer_domain(X_indptr_data, (0, nnz + 1))`.
//!
//! A varied axis's `indptr` starts at 0, is monotone and ends at the axis's nnz: the runtime
//! checks exactly that before any launch (`validate`), so its values lie in `[0, nnz]`. Stage
//! III has lost the axes, so the fact is carried from the stage-I function, for the buffers
//! stage III reads an `indptr` through and never writes (an output's `indptr`, assembled or
//! staged, holds whatever the kernel computes). Only axes whose nnz is an expression of the
//! function's scalar parameters qualify: the bound must be computable before a launch. The CUDA
//! writer sizes the grid of a `blockIdx` loop whose extent is read from such an array by it (the
//! rows of a hyb bucket, `indptr[o + 1] - indptr[o]`), instead of a fixed grid of 4096 blocks.
//!
//! The statements go first in the body; the function is otherwise unchanged.

use std::collections::HashSet;

use sparsetir_ir::{BufferDecl, BufferId, Expr, Intrinsic, PrimFunc, Span, Stmt};

/// `stage3` with a domain statement for every input `indptr` of `stage1`'s varied axes that it
/// reads (see the module documentation). `stage3` must come from `stage1` (the same parameter
/// variables).
pub fn indptr_domains(stage1: &PrimFunc, stage3: &PrimFunc) -> PrimFunc {
    let (mut loaded, mut stored): (HashSet<BufferId>, HashSet<BufferId>) = Default::default();
    let mut declared: HashSet<BufferId> = HashSet::new();
    stage3.body.visit(&mut |s| {
        match s {
            Stmt::Store(x) => {
                stored.insert(x.buffer);
            }
            Stmt::Evaluate(Expr::Call {
                op: Intrinsic::AtomicAdd,
                args,
                ..
            }) => {
                if let Some(Expr::Load { buffer, .. }) = args.first() {
                    stored.insert(*buffer);
                }
            }
            Stmt::AssumeBufferDomain { buffer, .. } => {
                declared.insert(*buffer);
            }
            _ => {}
        }
        s.for_each_expr(|e| {
            e.visit(&mut |x| {
                if let Expr::Load { buffer, .. } = x {
                    loaded.insert(*buffer);
                }
            })
        });
    });
    let mut assumes = Vec::new();
    for (_, ax) in stage1.axes.iter() {
        let (Some(ptr), Some(nnz)) = (ax.indptr, ax.nnz.as_ref()) else {
            continue;
        };
        if ax.assembled || !ax.kind.is_varied() || !of_params(stage1, stage3, nnz) {
            continue;
        }
        for (b, buf) in stage3.buffers.iter() {
            let holds = matches!(buf.decl, BufferDecl::Match { data } if data == ptr);
            if holds
                && buf.dtype.is_integer()
                && loaded.contains(&b)
                && !stored.contains(&b)
                && !declared.contains(&b)
            {
                assumes.push(Stmt::AssumeBufferDomain {
                    buffer: b,
                    lo: Expr::Int(0, buf.dtype),
                    hi: Expr::add(nnz.clone(), Expr::Int(1, nnz.dtype(stage1))),
                    span: Span::default(),
                });
            }
        }
    }
    let mut out = stage3.clone();
    if assumes.is_empty() {
        return out;
    }
    match std::mem::replace(&mut out.body, Stmt::Seq(Vec::new())) {
        Stmt::Seq(v) => assumes.extend(v),
        other => assumes.push(other),
    }
    out.body = Stmt::Seq(assumes);
    out
}

/// Whether `e` is an integer made of constants and scalar parameters of both functions.
fn of_params(stage1: &PrimFunc, stage3: &PrimFunc, e: &Expr) -> bool {
    let mut ok = e.dtype(stage1).is_integer();
    e.visit(&mut |x| match x {
        Expr::Var(v) => ok &= stage1.params.contains(v) && stage3.params.contains(v),
        Expr::Int(..) | Expr::Binary(..) | Expr::Cast(..) => {}
        _ => ok = false,
    });
    ok
}
