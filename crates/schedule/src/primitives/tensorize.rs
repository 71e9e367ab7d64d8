//! `tensorize(loop, intrin)` and `sparse_tensorize(block, intrin)`: a loop nest replaced by a
//! tensor-core instruction ([`TensorIntrin`]). Stage III only (the instruction's operands are
//! flat buffers). The nest is checked against the intrinsic's description here, where the error
//! can point at it, and marked with [`TENSORIZE_ATTR`] on its outer loop; the CUDA writer emits
//! the instruction (and checks what needs the buffers' layouts: fragment addressing, the 2:4
//! positions). Backends without tensor instructions (C, the interpreter) run the nest as the
//! loops it is: the mark changes no result. The nest must be final: its init split off first
//! (`decompose_reduction`), and no later primitive may reshape it (the writer refuses one
//! that no longer matches).

use sparsetir_ir::{AttrValue, Stage, TensorIntrin, VarId, TENSORIZE_ATTR};

use crate::error::{ErrorKind, Focus};
use crate::ir_util;
use crate::state::{AnyRV, BlockRV, LoopRV, Res, Schedule};
use crate::trace::{Arg, Call, ReplayError};

impl Schedule {
    /// `sch.tensorize(loop, "mma_m16n8k16")`: the nest under `loop` (rows, columns, reduction:
    /// the intrinsic's tile) becomes one tensor-core instruction.
    pub fn tensorize(&mut self, lp: LoopRV, intrin: &str) -> Res<()> {
        self.require_stage("tensorize", &[Stage::III])?;
        let v = self.loop_var(lp)?;
        let t = self.intrin("tensorize", intrin, Focus::Loop(v))?;
        self.tensorize_at("tensorize", v, t)?;
        self.record(
            "tensorize",
            vec![Arg::Var(lp.trace_name()), Arg::Str(intrin.to_string())],
            vec![],
            vec![],
            false,
        );
        Ok(())
    }

    /// `sch.sparse_tensorize(block, "mma_m16n8k16")`: the innermost loops around `block`, as
    /// many as the intrinsic's tile has dimensions, become one tensor-core instruction (the
    /// block-level form SparseTIR's schedules use).
    pub fn sparse_tensorize(&mut self, block: BlockRV, intrin: &str) -> Res<()> {
        self.require_stage("sparse_tensorize", &[Stage::III])?;
        let name = self.block_name(block)?;
        let t = self.intrin("sparse_tensorize", intrin, Focus::Block(name.clone()))?;
        let loops = self.loops_above(&name);
        let depth = t.extents().len();
        if loops.len() < depth {
            return Err(self.error(
                ErrorKind::NotTensorizable,
                format!(
                    "`{}` replaces a nest of {depth} loops, but block `{name}` has {} loops \
                     above it",
                    t.name(),
                    loops.len()
                ),
                Focus::Block(name),
            ));
        }
        self.tensorize_at("sparse_tensorize", loops[loops.len() - depth], t)?;
        self.record(
            "sparse_tensorize",
            vec![Arg::Var(block.trace_name()), Arg::Str(intrin.to_string())],
            vec![],
            vec![],
            false,
        );
        Ok(())
    }

    fn intrin(&self, primitive: &str, name: &str, focus: Focus) -> Res<TensorIntrin> {
        TensorIntrin::from_name(name).ok_or_else(|| {
            let known: Vec<&str> = TensorIntrin::ALL.iter().map(|t| t.name()).collect();
            self.error(
                ErrorKind::InvalidArgument,
                format!(
                    "`{primitive}`: no tensor intrinsic `{name}` (known: {})",
                    known.join(", ")
                ),
                focus,
            )
        })
    }

    /// Checks the nest under loop `v` against `t` and marks the loop.
    fn tensorize_at(&mut self, primitive: &str, v: VarId, t: TensorIntrin) -> Res<()> {
        let func = &self.func;
        let Some(f) = ir_util::find_loop(&func.body, v) else {
            return Err(self.error(
                ErrorKind::StaleHandle,
                "the loop no longer exists",
                Focus::Loop(v),
            ));
        };
        let why = match t.nest(f) {
            Ok((_, b)) => t.check_store(func, b).err(),
            Err(why) => Some(why),
        };
        if let Some(why) = why {
            return Err(self.error(
                ErrorKind::NotTensorizable,
                format!("`{primitive}` to `{}`: {why}", t.name()),
                Focus::Loop(v),
            ));
        }
        if f.annotations.get(TENSORIZE_ATTR).is_some() {
            return Err(self.error(
                ErrorKind::NotTensorizable,
                "the loop is already tensorized",
                Focus::Loop(v),
            ));
        }
        self.transact(primitive, |f| {
            if let Some(l) = ir_util::find_loop_mut(&mut f.body, v) {
                l.annotations
                    .set(TENSORIZE_ATTR, AttrValue::Str(t.name().to_string()));
            }
            Ok(())
        })
    }
}

pub(crate) fn replay(sch: &mut Schedule, call: &Call) -> Result<Option<Vec<AnyRV>>, ReplayError> {
    match call.name() {
        "tensorize" => {
            let lp = call.loop_(0, "loop")?;
            sch.tensorize(lp, call.str(1, "tensor_intrin")?)?;
        }
        "sparse_tensorize" => {
            let b = call.block(0, "block")?;
            sch.sparse_tensorize(b, call.str(1, "tensor_intrin")?)?;
        }
        _ => return Ok(None),
    }
    Ok(Some(vec![]))
}
