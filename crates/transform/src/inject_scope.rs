//! `inject_scope` (stage III): makes every instance of an atomic block run once, even when it
//! sits in thread-bound loops it does not depend on (SPEC §3.5).
//!
//! A block instance is defined by the values of what it depends on; a thread-bound loop
//! (`T.thread_binding`, any tag: `blockIdx.*`, `threadIdx.*`, ...) whose variable the block does
//! not depend on makes every thread of that loop execute the *same* instance. For plain stores
//! that redundancy is harmless (every thread writes the same value); for an atomic update it
//! adds the contribution once per thread. This pass guards such blocks.
//!
//! # Definition
//!
//! For each block annotated `{"atomic": True}` (see [`crate::lower_atomic::is_atomic_block`])
//! and each enclosing thread-bound loop `for t in T.thread_binding(min, ...)`, the block
//! *depends on* `t` when `t` appears
//! - in the block itself (iterator bindings, predicate, regions, init, body), or
//! - in a header between the loop and the block: the start or extent of a loop, the condition
//!   of an `if`, the value of a `let`, or the iterator bindings/predicate/regions of an
//!   enclosing (non-atomic) block.
//!
//! The block is replaced by `if t1 == min1 and t2 == min2 ...: block` over the loops it does
//! not depend on, outermost first (with the usual zero start: `thread == 0`). Thread loops
//! inside an atomic block are handled for the atomic blocks nested in it, afresh. Running the
//! pass twice changes nothing (the guard itself is a header that mentions the loops).

use sparsetir_ir::{BinOp, Expr, ForKind, IRModule, IfThenElse, PrimFunc, Stage, Stmt, VarId};

use crate::lower_atomic::is_atomic_block;
use crate::remove_unused_args::{expr_mentions, stmt_mentions};
use crate::LowerError;

/// Guards atomic blocks by `thread == 0` for the enclosing thread loops they do not depend on
/// (see the module documentation). A no-op on functions that are not at stage III.
pub fn inject_scope(func: &PrimFunc) -> Result<PrimFunc, LowerError> {
    if func.stage() != Stage::III {
        return Ok(func.clone());
    }
    let mut out = func.clone();
    let body = std::mem::replace(&mut out.body, Stmt::empty());
    out.body = stmt(body, &[]);
    Ok(out)
}

/// [`inject_scope`] on every function of `module`.
pub fn inject_scope_module(module: &IRModule) -> Result<IRModule, LowerError> {
    let funcs = module
        .funcs
        .iter()
        .map(inject_scope)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(IRModule { funcs })
}

/// An enclosing thread-bound loop and whether a header below it mentions its variable.
#[derive(Clone)]
struct Frame {
    var: VarId,
    min: Expr,
    used: bool,
}

/// The frames with `used` set for the loops whose variable one of `headers` mentions.
fn mark<'e>(frames: &[Frame], headers: impl Iterator<Item = &'e Expr> + Clone) -> Vec<Frame> {
    frames
        .iter()
        .map(|f| Frame {
            used: f.used || headers.clone().any(|e| expr_mentions(e, f.var)),
            ..f.clone()
        })
        .collect()
}

fn stmt(s: Stmt, frames: &[Frame]) -> Stmt {
    match s {
        Stmt::Seq(items) => Stmt::Seq(items.into_iter().map(|c| stmt(c, frames)).collect()),
        Stmt::For(mut l) => {
            let mut inner = mark(frames, [&l.min, &l.extent].into_iter());
            if l.kind == ForKind::ThreadBinding {
                inner.push(Frame {
                    var: l.var,
                    min: l.min.clone(),
                    used: false,
                });
            }
            l.body = stmt(l.body, &inner);
            Stmt::For(l)
        }
        Stmt::If(mut i) => {
            let inner = mark(frames, std::iter::once(&i.cond));
            i.then_case = stmt(i.then_case, &inner);
            i.else_case = i.else_case.map(|e| stmt(e, &inner));
            Stmt::If(i)
        }
        Stmt::Let(mut l) => {
            let inner = mark(frames, std::iter::once(&l.value));
            l.body = stmt(l.body, &inner);
            Stmt::Let(l)
        }
        Stmt::Block(mut b) => {
            if is_atomic_block(&b) {
                let whole = Stmt::Block(b.clone());
                let unused: Vec<&Frame> = frames
                    .iter()
                    .filter(|f| !f.used && !stmt_mentions(&whole, f.var))
                    .collect();
                let cond = unused
                    .iter()
                    .map(|f| Expr::binary(BinOp::Eq, Expr::Var(f.var), f.min.clone()))
                    .reduce(|a, c| Expr::binary(BinOp::And, a, c));
                b.init = b.init.map(|i| stmt(i, &[]));
                b.body = stmt(b.body, &[]);
                let span = b.span;
                let block = Stmt::Block(b);
                match cond {
                    Some(cond) => Stmt::If(Box::new(IfThenElse {
                        cond,
                        then_case: block,
                        else_case: None,
                        span,
                    })),
                    None => block,
                }
            } else {
                let mut headers: Vec<&Expr> = Vec::new();
                for it in &b.iters {
                    headers.extend([&it.min, &it.extent, &it.binding]);
                }
                headers.extend(b.predicate.as_ref());
                for r in b.reads.iter().chain(&b.writes) {
                    for (lo, ext) in &r.ranges {
                        headers.extend([lo, ext]);
                    }
                }
                let inner = mark(frames, headers.iter().copied());
                b.init = b.init.map(|i| stmt(i, &inner));
                b.body = stmt(b.body, &inner);
                Stmt::Block(b)
            }
        }
        other => other,
    }
}
