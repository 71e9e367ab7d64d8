//! `lower_atomic` (stage III): stores inside blocks annotated `{"atomic": True}` become atomic
//! additions, because the parts of a composable format may write the same output element from
//! different threads (SPEC §3.5).
//!
//! # Rules
//!
//! - A block is *atomic* when its annotation `atomic` is `True` (or a non-zero integer). Every
//!   store below it (nested loops, branches and blocks included) to a buffer that is not
//!   allocated inside the atomic block is rewritten:
//!   - `A[idx] = A[idx] + v` and `A[idx] = v + A[idx]` become
//!     `T.evaluate(T.atomic_add(A[idx], v))`;
//!   - `A[idx] = A[idx] - v` becomes `T.evaluate(T.atomic_add(A[idx], -v))`.
//! - Buffers allocated inside the atomic block (block headers, `T.allocate`) are private to
//!   one block instance: their stores stay plain stores.
//! - Anything else is an error ([`LowerError::Unsupported`]): another store form (no atomic
//!   equivalent), a value `v` that itself reads the target buffer (a racy read of data other
//!   writers update), a boolean target, or a `T.init()` inside the atomic block (each writer
//!   would reset the shared output; initialize it beforehand instead, e.g. with
//!   `decompose_reduction`).
//! - The `atomic` annotation stays on the block: [`crate::inject_scope()`] reads it.

use std::collections::HashSet;

use sparsetir_ir::{
    BinOp, Block, BufferId, Expr, IRModule, Intrinsic, PrimFunc, Span, Stage, Stmt, Store, UnOp,
};

use crate::LowerError;

pub use sparsetir_ir::ATOMIC_ATTR;

/// Whether `block` is annotated `{"atomic": True}` (or a non-zero integer): [`Block::is_atomic`].
pub fn is_atomic_block(block: &Block) -> bool {
    block.is_atomic()
}

/// Rewrites the stores of atomic blocks into atomic additions (see the module documentation).
/// A no-op on functions that are not at stage III.
pub fn lower_atomic(func: &PrimFunc) -> Result<PrimFunc, LowerError> {
    if func.stage() != Stage::III {
        return Ok(func.clone());
    }
    let mut out = func.clone();
    let body = std::mem::replace(&mut out.body, Stmt::empty());
    let mut l = Lowerer { func, ctx: None };
    out.body = l.stmt(body)?;
    Ok(out)
}

/// [`lower_atomic`] on every function of `module`.
pub fn lower_atomic_module(module: &IRModule) -> Result<IRModule, LowerError> {
    let funcs = module
        .funcs
        .iter()
        .map(lower_atomic)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(IRModule { funcs })
}

/// The atomic block being lowered: its name and the buffers private to its instances.
struct AtomicCtx {
    block: String,
    local: HashSet<BufferId>,
}

struct Lowerer<'a> {
    func: &'a PrimFunc,
    ctx: Option<AtomicCtx>,
}

fn unsupported(span: Span, message: String) -> LowerError {
    LowerError::Unsupported { span, message }
}

impl Lowerer<'_> {
    fn name(&self, b: BufferId) -> &str {
        self.func
            .buffers
            .get(b)
            .map(|x| x.name.as_str())
            .unwrap_or("?")
    }

    fn stmt(&mut self, s: Stmt) -> Result<Stmt, LowerError> {
        Ok(match s {
            Stmt::Seq(items) => {
                let mut out = Vec::with_capacity(items.len());
                for it in items {
                    if let (Stmt::Allocate(b), Some(ctx)) = (&it, &mut self.ctx) {
                        ctx.local.insert(*b);
                    }
                    out.push(self.stmt(it)?);
                }
                Stmt::Seq(out)
            }
            Stmt::For(mut l) => {
                l.body = self.stmt(l.body)?;
                Stmt::For(l)
            }
            Stmt::If(mut i) => {
                i.then_case = self.stmt(i.then_case)?;
                if let Some(e) = i.else_case.take() {
                    i.else_case = Some(self.stmt(e)?);
                }
                Stmt::If(i)
            }
            Stmt::Let(mut l) => {
                l.body = self.stmt(l.body)?;
                Stmt::Let(l)
            }
            Stmt::Block(b) => self.block(*b)?,
            Stmt::Store(st) if self.ctx.is_some() => self.store(st)?,
            other => other,
        })
    }

    fn block(&mut self, mut b: Block) -> Result<Stmt, LowerError> {
        let opened = self.ctx.is_none() && is_atomic_block(&b);
        if opened {
            self.ctx = Some(AtomicCtx {
                block: b.name.clone(),
                local: HashSet::new(),
            });
        }
        let result = self.block_inner(&mut b);
        if opened {
            self.ctx = None;
        }
        result?;
        Ok(Stmt::Block(Box::new(b)))
    }

    fn block_inner(&mut self, b: &mut Block) -> Result<(), LowerError> {
        if let Some(ctx) = &mut self.ctx {
            ctx.local.extend(b.alloc_buffers.iter().copied());
            if b.init.is_some() {
                let outer = ctx.block.clone();
                return Err(unsupported(
                    b.span,
                    format!(
                        "block `{}` inside atomic block `{outer}` has T.init(): every writer \
                         would reset the shared output; initialize it before the atomic \
                         updates (e.g. decompose_reduction) and remove the init",
                        b.name
                    ),
                ));
            }
        }
        let body = std::mem::replace(&mut b.body, Stmt::empty());
        b.body = self.stmt(body)?;
        Ok(())
    }

    fn store(&mut self, st: Store) -> Result<Stmt, LowerError> {
        let Some(ctx) = &self.ctx else {
            return Ok(Stmt::Store(st));
        };
        if ctx.local.contains(&st.buffer) {
            return Ok(Stmt::Store(st));
        }
        let block = ctx.block.clone();
        let name = self.name(st.buffer).to_string();
        let target = Expr::load(st.buffer, st.indices.clone());
        let addend = match &st.value {
            Expr::Binary(BinOp::Add, a, b) if **a == target => (**b).clone(),
            Expr::Binary(BinOp::Add, a, b) if **b == target => (**a).clone(),
            Expr::Binary(BinOp::Sub, a, b) if **a == target => Expr::Unary(UnOp::Neg, b.clone()),
            _ => {
                return Err(unsupported(
                    st.span,
                    format!(
                        "store to `{name}` in atomic block `{block}` is not an accumulation \
                         `{name}[idx] = {name}[idx] + value` (or `- value`) of the element it \
                         writes: it has no atomic form"
                    ),
                ))
            }
        };
        let mut reads_target = false;
        addend.visit(&mut |x| {
            reads_target |= matches!(x, Expr::Load { buffer, .. } if *buffer == st.buffer)
        });
        if reads_target {
            return Err(unsupported(
                st.span,
                format!(
                    "the value added to `{name}` in atomic block `{block}` reads `{name}`, which \
                     other writers update concurrently"
                ),
            ));
        }
        let dtype = match self.func.buffers.get(st.buffer) {
            Some(b) if b.dtype.is_bool() => {
                return Err(unsupported(
                    st.span,
                    format!("atomic block `{block}`: `{name}` is boolean, it has no atomic add"),
                ))
            }
            Some(b) => b.dtype,
            None => {
                return Err(LowerError::Invalid {
                    span: st.span,
                    message: format!("buffer handle #{} is out of range", st.buffer.index()),
                })
            }
        };
        Ok(Stmt::Evaluate(Expr::Call {
            op: Intrinsic::AtomicAdd,
            args: vec![target, addend],
            dtype,
        }))
    }
}
