//! The schedule state: the function being transformed, the handle table (random variables in
//! TVM's words) and the trace of successful primitives; plus the lookup primitives `get_block`,
//! `get_loops`, `get_child_blocks` and `get_sparse_iteration`.
//!
//! Identities are stable across primitives: blocks and sparse iterations by name (unique per
//! function, checked by [`Schedule::new`]), loops by their loop variable. A primitive that
//! replaces a loop gives the new loops new variables, which retires the old handle.

use std::collections::HashSet;

use sparsetir_ir::{Block, For, PrimFunc, SparseIteration, Stage, Stmt, VarId};

use crate::error::{ErrorKind, Focus, ScheduleError};
use crate::ir_util;
use crate::trace::{Arg, Instruction, Trace};

/// A handle to a block (stages II/III).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BlockRV(pub(crate) u32);

/// A handle to a loop (stages II/III).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LoopRV(pub(crate) u32);

/// A handle to a sparse iteration (stage I).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SpIterRV(pub(crate) u32);

/// Any handle, as instructions take and return them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AnyRV {
    Block(BlockRV),
    Loop(LoopRV),
    SpIter(SpIterRV),
}

/// What a handle designates.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Target {
    Block(String),
    Loop(VarId),
    SpIter(String),
}

/// A function under scheduling.
#[derive(Clone, Debug)]
pub struct Schedule {
    pub(crate) func: PrimFunc,
    pub(crate) rvs: Vec<Target>,
    pub(crate) trace: Trace,
}

pub type Res<T> = Result<T, ScheduleError>;

impl BlockRV {
    /// The name this handle has in printed traces.
    pub fn trace_name(self) -> String {
        format!("b{}", self.0)
    }
}
impl LoopRV {
    pub fn trace_name(self) -> String {
        format!("l{}", self.0)
    }
}
impl SpIterRV {
    pub fn trace_name(self) -> String {
        format!("sp{}", self.0)
    }
}
impl AnyRV {
    pub fn trace_name(self) -> String {
        match self {
            AnyRV::Block(b) => b.trace_name(),
            AnyRV::Loop(l) => l.trace_name(),
            AnyRV::SpIter(s) => s.trace_name(),
        }
    }
}
impl From<BlockRV> for AnyRV {
    fn from(b: BlockRV) -> Self {
        AnyRV::Block(b)
    }
}
impl From<LoopRV> for AnyRV {
    fn from(l: LoopRV) -> Self {
        AnyRV::Loop(l)
    }
}
impl From<SpIterRV> for AnyRV {
    fn from(s: SpIterRV) -> Self {
        AnyRV::SpIter(s)
    }
}

impl Schedule {
    /// Starts scheduling `func` (any stage). Block names and sparse-iteration names must be
    /// unique, since handles find them by name.
    pub fn new(func: PrimFunc) -> Res<Schedule> {
        for names in [
            ir_util::block_names(&func.body),
            ir_util::sp_iter_names(&func.body),
        ] {
            let mut seen = HashSet::new();
            for n in &names {
                if !seen.insert(n.as_str()) {
                    let focus = if func.stage() == Stage::I {
                        Focus::SparseIteration(n.clone())
                    } else {
                        Focus::Block(n.clone())
                    };
                    return Err(ScheduleError::new(
                        ErrorKind::DuplicateName,
                        format!("the name `{n}` is used by more than one block or iteration"),
                        &func,
                        focus,
                    ));
                }
            }
        }
        Ok(Schedule {
            func,
            rvs: Vec::new(),
            trace: Trace::default(),
        })
    }

    /// The current function.
    pub fn func(&self) -> &PrimFunc {
        &self.func
    }

    /// The current function, consuming the schedule.
    pub fn into_func(self) -> PrimFunc {
        self.func
    }

    /// The instructions applied so far.
    pub fn trace(&self) -> &Trace {
        &self.trace
    }

    /// The function's stage.
    pub fn stage(&self) -> Stage {
        self.func.stage()
    }

    // ----- handle table --------------------------------------------------------------------

    pub(crate) fn new_rv(&mut self, t: Target) -> u32 {
        self.rvs.push(t);
        (self.rvs.len() - 1) as u32
    }
    pub(crate) fn new_block_rv(&mut self, name: &str) -> BlockRV {
        BlockRV(self.new_rv(Target::Block(name.to_string())))
    }
    pub(crate) fn new_loop_rv(&mut self, var: VarId) -> LoopRV {
        LoopRV(self.new_rv(Target::Loop(var)))
    }
    pub(crate) fn new_sp_iter_rv(&mut self, name: &str) -> SpIterRV {
        SpIterRV(self.new_rv(Target::SpIter(name.to_string())))
    }

    /// Builds an error located at `focus` in the current function.
    pub fn error(
        &self,
        kind: ErrorKind,
        message: impl Into<String>,
        focus: Focus,
    ) -> ScheduleError {
        ScheduleError::new(kind, message, &self.func, focus)
    }

    fn unknown_handle(&self, what: &str, id: u32) -> ScheduleError {
        self.error(
            ErrorKind::NotFound,
            format!("{what} handle #{id} was not made by this schedule"),
            Focus::Nothing,
        )
    }

    /// Fails with `WrongStage` unless the function is at one of `stages`.
    pub fn require_stage(&self, primitive: &str, stages: &[Stage]) -> Res<()> {
        let s = self.stage();
        if stages.contains(&s) {
            Ok(())
        } else {
            Err(self.error(
                ErrorKind::WrongStage,
                format!(
                    "`{primitive}` works at stage {}, but function `{}` is at stage {s:?}",
                    stages
                        .iter()
                        .map(|s| format!("{s:?}"))
                        .collect::<Vec<_>>()
                        .join("/"),
                    self.func.name
                ),
                Focus::Nothing,
            ))
        }
    }

    /// The name of the block behind `b`, checking it still exists.
    pub fn block_name(&self, b: BlockRV) -> Res<String> {
        match self.rvs.get(b.0 as usize) {
            Some(Target::Block(name)) => {
                if ir_util::find_block(&self.func.body, name).is_some() {
                    Ok(name.clone())
                } else {
                    Err(self.error(
                        ErrorKind::StaleHandle,
                        format!("block `{name}` ({}) no longer exists", b.trace_name()),
                        Focus::Nothing,
                    ))
                }
            }
            _ => Err(self.unknown_handle("block", b.0)),
        }
    }

    /// The block behind `b`.
    pub fn block(&self, b: BlockRV) -> Res<&Block> {
        let name = self.block_name(b)?;
        ir_util::find_block(&self.func.body, &name).ok_or_else(|| {
            self.error(
                ErrorKind::StaleHandle,
                format!("block `{name}` no longer exists"),
                Focus::Nothing,
            )
        })
    }

    /// The loop variable of the loop behind `l`, checking the loop still exists.
    pub fn loop_var(&self, l: LoopRV) -> Res<VarId> {
        match self.rvs.get(l.0 as usize) {
            Some(Target::Loop(v)) => {
                if ir_util::find_loop(&self.func.body, *v).is_some() {
                    Ok(*v)
                } else {
                    let name = self
                        .func
                        .vars
                        .get(*v)
                        .map(|x| x.name.clone())
                        .unwrap_or_default();
                    Err(self.error(
                        ErrorKind::StaleHandle,
                        format!(
                            "loop `{name}` ({}) no longer exists (a primitive replaced it)",
                            l.trace_name()
                        ),
                        Focus::Nothing,
                    ))
                }
            }
            _ => Err(self.unknown_handle("loop", l.0)),
        }
    }

    /// The loop behind `l`.
    pub fn loop_(&self, l: LoopRV) -> Res<&For> {
        let v = self.loop_var(l)?;
        ir_util::find_loop(&self.func.body, v).ok_or_else(|| {
            self.error(
                ErrorKind::StaleHandle,
                "the loop no longer exists",
                Focus::Nothing,
            )
        })
    }

    /// The name of the sparse iteration behind `sp`, checking it still exists.
    pub fn sp_iter_name(&self, sp: SpIterRV) -> Res<String> {
        match self.rvs.get(sp.0 as usize) {
            Some(Target::SpIter(name)) => {
                if ir_util::find_sp_iter(&self.func.body, name).is_some() {
                    Ok(name.clone())
                } else {
                    Err(self.error(
                        ErrorKind::StaleHandle,
                        format!("sparse iteration `{name}` no longer exists"),
                        Focus::Nothing,
                    ))
                }
            }
            _ => Err(self.unknown_handle("sparse iteration", sp.0)),
        }
    }

    /// The sparse iteration behind `sp`.
    pub fn sp_iter(&self, sp: SpIterRV) -> Res<&SparseIteration> {
        let name = self.sp_iter_name(sp)?;
        ir_util::find_sp_iter(&self.func.body, &name).ok_or_else(|| {
            self.error(
                ErrorKind::StaleHandle,
                format!("sparse iteration `{name}` no longer exists"),
                Focus::Nothing,
            )
        })
    }

    /// Where an error about `rv` should point.
    pub fn focus_of(&self, rv: AnyRV) -> Focus {
        match (rv, self.rvs.get(rv_index(rv))) {
            (_, Some(Target::Block(n))) => Focus::Block(n.clone()),
            (_, Some(Target::Loop(v))) => Focus::Loop(*v),
            (_, Some(Target::SpIter(n))) => Focus::SparseIteration(n.clone()),
            _ => Focus::Nothing,
        }
    }

    // ----- recording -----------------------------------------------------------------------

    /// Appends an instruction to the trace.
    pub(crate) fn record(
        &mut self,
        name: &str,
        args: Vec<Arg>,
        kwargs: Vec<(String, Arg)>,
        outputs: Vec<AnyRV>,
        list_output: bool,
    ) {
        self.trace.insts.push(Instruction {
            name: name.to_string(),
            args,
            kwargs,
            outputs: outputs.into_iter().map(|o| o.trace_name()).collect(),
            list_output,
            line: 0,
        });
    }

    /// Checks (in debug builds) that the function still verifies after a primitive; a failure
    /// is a bug of the primitive and is returned as an `Internal` error.
    pub(crate) fn check(&self, primitive: &str) -> Res<()> {
        if cfg!(debug_assertions) {
            if let Err(errs) = sparsetir_ir::verify_func(&self.func) {
                let msgs: Vec<String> = errs.iter().map(|e| e.message.clone()).collect();
                return Err(self.error(
                    ErrorKind::Internal,
                    format!(
                        "after `{primitive}` the function fails verification: {}",
                        msgs.join("; ")
                    ),
                    Focus::Nothing,
                ));
            }
        }
        Ok(())
    }

    /// Runs a rewriting step on a copy of the function; on success it replaces the function and
    /// is verified (debug builds), on failure the function is unchanged.
    pub(crate) fn transact<R>(
        &mut self,
        primitive: &str,
        f: impl FnOnce(&mut PrimFunc) -> Res<R>,
    ) -> Res<R> {
        let mut copy = self.func.clone();
        let r = f(&mut copy)?;
        let old = std::mem::replace(&mut self.func, copy);
        if let Err(e) = self.check(primitive) {
            self.func = old;
            return Err(e);
        }
        Ok(r)
    }

    // ----- lookup primitives ---------------------------------------------------------------

    /// `b = sch.get_block("name")` (stages II/III).
    pub fn get_block(&mut self, name: &str) -> Res<BlockRV> {
        self.require_stage("get_block", &[Stage::II, Stage::III])?;
        if ir_util::find_block(&self.func.body, name).is_none() {
            let names = ir_util::block_names(&self.func.body);
            return Err(self.error(
                ErrorKind::NotFound,
                format!(
                    "no block named `{name}` in function `{}` (blocks: {})",
                    self.func.name,
                    names.join(", ")
                ),
                Focus::Nothing,
            ));
        }
        let b = self.new_block_rv(name);
        self.record(
            "get_block",
            vec![Arg::Str(name.to_string())],
            vec![],
            vec![b.into()],
            false,
        );
        Ok(b)
    }

    /// `l0, l1 = sch.get_loops(b)`: the loops above the block, outer to inner, up to the
    /// enclosing block (or the function body).
    pub fn get_loops(&mut self, b: BlockRV) -> Res<Vec<LoopRV>> {
        let name = self.block_name(b)?;
        let vars = self.loops_above(&name);
        let out: Vec<LoopRV> = vars.into_iter().map(|v| self.new_loop_rv(v)).collect();
        self.record(
            "get_loops",
            vec![Arg::Var(b.trace_name())],
            vec![],
            out.iter().map(|l| (*l).into()).collect(),
            true,
        );
        Ok(out)
    }

    /// The loop variables above block `name`, outer to inner, up to its enclosing block.
    pub fn loops_above(&self, name: &str) -> Vec<VarId> {
        let Some(path) = ir_util::path_to(&self.func.body, &|s| ir_util::is_block(s, name)) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for s in &path[..path.len() - 1] {
            match s {
                Stmt::Block(_) => out.clear(),
                Stmt::For(l) => out.push(l.var),
                _ => {}
            }
        }
        out
    }

    /// `b1, b2 = sch.get_child_blocks(b)`: the blocks directly inside block `b`.
    pub fn get_child_blocks(&mut self, b: BlockRV) -> Res<Vec<BlockRV>> {
        let name = self.block_name(b)?;
        let names = match ir_util::find(&self.func.body, &|s| ir_util::is_block(s, &name)) {
            Some(s) => ir_util::child_blocks(s),
            None => Vec::new(),
        };
        let out: Vec<BlockRV> = names.iter().map(|n| self.new_block_rv(n)).collect();
        self.record(
            "get_child_blocks",
            vec![Arg::Var(b.trace_name())],
            vec![],
            out.iter().map(|x| (*x).into()).collect(),
            true,
        );
        Ok(out)
    }

    /// `b1, b2 = sch.get_child_blocks(l)`: the blocks directly inside loop `l`.
    pub fn get_child_blocks_of_loop(&mut self, l: LoopRV) -> Res<Vec<BlockRV>> {
        let v = self.loop_var(l)?;
        let names = match ir_util::find(&self.func.body, &|s| ir_util::is_loop(s, v)) {
            Some(s) => ir_util::child_blocks(s),
            None => Vec::new(),
        };
        let out: Vec<BlockRV> = names.iter().map(|n| self.new_block_rv(n)).collect();
        self.record(
            "get_child_blocks",
            vec![Arg::Var(l.trace_name())],
            vec![],
            out.iter().map(|x| (*x).into()).collect(),
            true,
        );
        Ok(out)
    }

    /// Every block of the function at the top level (not inside another block), in order.
    pub fn root_blocks(&self) -> Vec<String> {
        let mut out = Vec::new();
        fn go(s: &Stmt, out: &mut Vec<String>) {
            if let Stmt::Block(b) = s {
                out.push(b.name.clone());
                return;
            }
            let mut ch = Vec::new();
            ir_util::push_children(s, &mut ch);
            for c in ch {
                go(c, out)
            }
        }
        go(&self.func.body, &mut out);
        out
    }

    /// `sp = sch.get_sparse_iteration("name")` (stage I).
    pub fn get_sparse_iteration(&mut self, name: &str) -> Res<SpIterRV> {
        self.require_stage("get_sparse_iteration", &[Stage::I])?;
        if ir_util::find_sp_iter(&self.func.body, name).is_none() {
            let names = ir_util::sp_iter_names(&self.func.body);
            return Err(self.error(
                ErrorKind::NotFound,
                format!(
                    "no sparse iteration named `{name}` in function `{}` (iterations: {})",
                    self.func.name,
                    names.join(", ")
                ),
                Focus::Nothing,
            ));
        }
        let sp = self.new_sp_iter_rv(name);
        self.record(
            "get_sparse_iteration",
            vec![Arg::Str(name.to_string())],
            vec![],
            vec![sp.into()],
            false,
        );
        Ok(sp)
    }
}

fn rv_index(rv: AnyRV) -> usize {
    match rv {
        AnyRV::Block(b) => b.0 as usize,
        AnyRV::Loop(l) => l.0 as usize,
        AnyRV::SpIter(s) => s.0 as usize,
    }
}
