//! `vectorize_reduction(loop)`: an explicit opt-in that vectorises a reduction loop by
//! reassociating the reduction across SIMD lanes.
//!
//! `vectorize` refuses loops that carry a reduction: running their steps in lanes changes the
//! order of the combining operations. `vectorize_reduction` is the user's permission to do that
//! anyway. The loop becomes `T.vectorized` with the loop annotation `{"simd_reduction": OP}`
//! (`"+"`, `"max"` or `"min"`); the C writer then keeps the reduced element in a local
//! accumulator and emits `#pragma omp simd reduction(OP: acc)`. Each lane accumulates a partial
//! result and the partial results are combined at the end, so results equal the serial order's
//! up to floating-point rounding for `+` (max and min are exact). For `+` over a loop with
//! constant bounds the C writer instead keeps explicit lane-parallel partial sums (loop
//! annotation `"lanes"`, default one 64-byte vector), sums them pairwise, and applies a
//! loop-invariant loaded factor of the summed product once. The stage-I/II/III evaluators
//! ignore the annotations and run the loop serially.
//!
//! Preconditions (each failure is a typed error showing the IR around the loop):
//! - stage II or III, the loop is serial;
//! - the loop's body is exactly one block, without `T.init()` (run `decompose_reduction` first)
//!   unless the init only sets the reduced element and runs exactly at the loop's first
//!   iteration (every reduction iterator of the block is the loop variable itself, with the
//!   loop's start as its minimum): the accumulator then starts at the init value;
//! - the block's body is exactly one store `Y[idx] = Y[idx] OP e` (also `e OP Y[idx]`,
//!   `T.max(Y[idx], e)`, `T.min(e, Y[idx])`, ...) of a float or integer buffer;
//! - `idx` is invariant in the loop (after replacing the block's iterators by their bindings);
//!   neither `idx`, `e` nor the block's predicate reads `Y`;
//! - the loop variable feeds only reduction iterators of that block, and at least one.

use std::collections::HashMap;

use sparsetir_ir::printer::print_expr;
use sparsetir_ir::{
    AttrValue, BinOp, Block, BufferId, Expr, ForKind, IterKind, PrimFunc, Stage, Stmt, Store, VarId,
};

use crate::error::{ErrorKind, Focus};
use crate::ir_util;
use crate::state::{AnyRV, LoopRV, Res, Schedule};
use crate::trace::{Arg, Call, ReplayError};

/// The loop annotation key set by [`Schedule::vectorize_reduction`].
pub const SIMD_REDUCTION_ATTR: &str = "simd_reduction";

/// A reduction operator that may be reassociated across SIMD lanes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimdReduceOp {
    Add,
    Max,
    Min,
}

impl SimdReduceOp {
    /// The annotation value: `"+"`, `"max"` or `"min"`.
    pub fn symbol(self) -> &'static str {
        match self {
            SimdReduceOp::Add => "+",
            SimdReduceOp::Max => "max",
            SimdReduceOp::Min => "min",
        }
    }

    /// Parses an annotation value.
    pub fn from_symbol(s: &str) -> Option<SimdReduceOp> {
        match s {
            "+" => Some(SimdReduceOp::Add),
            "max" => Some(SimdReduceOp::Max),
            "min" => Some(SimdReduceOp::Min),
            _ => None,
        }
    }

    fn of_binop(op: BinOp) -> Option<SimdReduceOp> {
        match op {
            BinOp::Add => Some(SimdReduceOp::Add),
            BinOp::Max => Some(SimdReduceOp::Max),
            BinOp::Min => Some(SimdReduceOp::Min),
            _ => None,
        }
    }
}

/// The recognised update `Y[idx] = Y[idx] OP e` of a reduction step.
#[derive(Clone, Debug, PartialEq)]
pub struct ReductionUpdate<'a> {
    pub buffer: BufferId,
    pub indices: &'a [Expr],
    pub op: SimdReduceOp,
    /// `e`: the value combined into the accumulator.
    pub value: &'a Expr,
}

/// Recognises `Y[idx] = Y[idx] OP e` / `Y[idx] = e OP Y[idx]` (`OP` one of `+`, `max`, `min`)
/// where `e` and `idx` do not read `Y`. `None` for any other store.
pub fn match_update(st: &Store) -> Option<ReductionUpdate<'_>> {
    let Expr::Binary(op, a, b) = &st.value else {
        return None;
    };
    let op = SimdReduceOp::of_binop(*op)?;
    let is_self = |e: &Expr| matches!(e, Expr::Load { buffer, indices } if *buffer == st.buffer && *indices == st.indices);
    let value: &Expr = if is_self(a) {
        b
    } else if is_self(b) {
        a
    } else {
        return None;
    };
    if value.loads(st.buffer) || st.indices.iter().any(|i| i.loads(st.buffer)) {
        return None;
    }
    Some(ReductionUpdate {
        buffer: st.buffer,
        indices: &st.indices,
        op,
        value,
    })
}

impl Schedule {
    /// `sch.vectorize_reduction(l)`: vectorises the reduction loop `l`, permitting the
    /// reduction to be reassociated across SIMD lanes (results equal the serial order's up to
    /// rounding). See the module documentation for the preconditions.
    pub fn vectorize_reduction(&mut self, l: LoopRV) -> Res<()> {
        const P: &str = "vectorize_reduction";
        self.require_stage(P, &[Stage::II, Stage::III])?;
        let v = self.loop_var(l)?;
        let lp = self.loop_(l)?;
        let name = self
            .func()
            .vars
            .get(v)
            .map(|x| x.name.clone())
            .unwrap_or_default();
        let fail = |sch: &Schedule, kind: ErrorKind, msg: String| {
            Err(sch.error(kind, msg, Focus::Loop(v)))
        };
        if lp.kind != ForKind::Serial {
            return fail(
                self,
                ErrorKind::LoopNotSerial,
                format!("loop `{name}` is already {}", lp.kind.script_name()),
            );
        }
        let Stmt::Block(b) = lp.body.single() else {
            return fail(
                self,
                ErrorKind::Unsupported,
                format!(
                    "the body of loop `{name}` is not exactly one block; `{P}` needs the loop \
                     directly around the reduction block"
                ),
            );
        };
        let op = match check_block(self.func(), b, v, &lp.min) {
            Ok(op) => op,
            Err((kind, msg)) => return fail(self, kind, format!("loop `{name}`: {msg}")),
        };
        let dt = match b.body.single() {
            Stmt::Store(st) => self.func().buffers.get(st.buffer).map(|x| x.dtype),
            _ => None,
        };
        if let Some(dt) = dt {
            if !(dt.is_float() || dt.is_integer()) {
                return fail(
                    self,
                    ErrorKind::Unsupported,
                    format!("loop `{name}`: a reduction of {dt} values cannot be vectorised"),
                );
            }
        }
        self.transact(P, |f| {
            if let Some(lp) = ir_util::find_loop_mut(&mut f.body, v) {
                lp.kind = ForKind::Vectorized;
                lp.annotations
                    .set(SIMD_REDUCTION_ATTR, AttrValue::Str(op.symbol().to_string()));
            }
            Ok(())
        })?;
        self.record(P, vec![Arg::Var(l.trace_name())], vec![], vec![], false);
        Ok(())
    }
}

/// Checks the block under a `vectorize_reduction` loop over `v`; returns the operator.
fn check_block(
    f: &PrimFunc,
    b: &Block,
    v: VarId,
    loop_min: &Expr,
) -> Result<SimdReduceOp, (ErrorKind, String)> {
    let init_folds = match b.body.single() {
        Stmt::Store(st) => match_update(st)
            .and_then(|u| b.init_folded_into(v, loop_min, u.buffer, u.indices))
            .is_some(),
        _ => false,
    };
    if b.init.is_some() && !init_folds {
        return Err((
            ErrorKind::NotReductionBlock,
            format!(
                "block `{}` has a `T.init()` that does not run exactly at the loop's first \
                 iteration (or does more than set the reduced element); run \
                 `decompose_reduction` first so that the loop holds only the reduction steps",
                b.name
            ),
        ));
    }
    let mut feeds_reduce = false;
    for it in &b.iters {
        if ir_util::uses_var(&it.binding, v) {
            match it.kind {
                IterKind::Reduce => feeds_reduce = true,
                IterKind::Spatial => {
                    return Err((
                        ErrorKind::InvalidArgument,
                        format!(
                            "the loop variable feeds a spatial iterator of block `{}`; only a \
                             loop over reduction iterators can be reassociated",
                            b.name
                        ),
                    ))
                }
            }
        }
    }
    if !feeds_reduce {
        return Err((
            ErrorKind::InvalidArgument,
            format!(
                "the loop does not feed any reduction iterator of block `{}`",
                b.name
            ),
        ));
    }
    let Stmt::Store(st) = b.body.single() else {
        return Err((
            ErrorKind::NotReductionBlock,
            format!(
                "the body of block `{}` is not a single store `Y[idx] = Y[idx] op e`",
                b.name
            ),
        ));
    };
    let Some(upd) = match_update(st) else {
        return Err((
            ErrorKind::NotReductionBlock,
            format!(
                "the store of block `{}` is not `Y[idx] = Y[idx] op e` with op one of +, max, \
                 min and `e` not reading `Y`",
                b.name
            ),
        ));
    };
    if let Some(p) = &b.predicate {
        if p.loads(upd.buffer) {
            return Err((
                ErrorKind::NotReductionBlock,
                format!(
                    "the predicate of block `{}` reads the reduced buffer",
                    b.name
                ),
            ));
        }
    }
    // The reduced element must not move with the loop.
    let map: HashMap<VarId, Expr> = b
        .iters
        .iter()
        .map(|it| (it.var, it.binding.clone()))
        .collect();
    for idx in upd.indices {
        let mut e = idx.clone();
        ir_util::subst_expr(&mut e, &map);
        if ir_util::uses_var(&e, v) {
            return Err((
                ErrorKind::NotReductionBlock,
                format!(
                    "the element block `{}` reduces into changes with the loop (index `{}`)",
                    b.name,
                    print_expr(f, idx)
                ),
            ));
        }
    }
    Ok(upd.op)
}

pub(crate) fn replay(sch: &mut Schedule, call: &Call) -> Result<Option<Vec<AnyRV>>, ReplayError> {
    match call.name() {
        "vectorize_reduction" => {
            sch.vectorize_reduction(call.loop_(0, "loop")?)?;
            Ok(Some(vec![]))
        }
        _ => Ok(None),
    }
}
