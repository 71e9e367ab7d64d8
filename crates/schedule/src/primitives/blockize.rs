//! Block-structure primitives: `blockize` and `lift_loop`.
//!
//! `blockize(loop)` wraps the loop (holding exactly one block) in a new block `<name>_o` with
//! one iterator per enclosing loop of the scope that the subtree uses (spatial unless the loop
//! only feeds reduction iterators), bound to that loop; its read/write regions are the inner
//! block's, relaxed to whole dimensions where they vary under the loop. The inner block and its
//! bindings are unchanged, so the function computes exactly what it did.
//!
//! `lift_loop(loop)` (SparseTIR) moves a loop out of the block it sits in: when the loop is the
//! block's whole body and its bounds do not use the block's iterators, the block is re-nested
//! inside the loop (`block { for l: S }` becomes `for l: block { S }`). The block then runs once
//! per iteration with the same iterator values, which is only the same computation when the
//! block has no init (it would re-run) and allocates no buffer (its values would not survive
//! from one iteration to the next); both are refused. Typical use: after `reorder`, lift the
//! dense feature loop of SpMM out of the row block so that it can be bound or vectorized
//! outside the row's data-dependent loop.

use std::collections::HashMap;

use sparsetir_ir::{Block, BlockIter, BufferRegion, Expr, IterKind, PrimFunc, Stage, Stmt, VarId};

use crate::error::{ErrorKind, Focus, ScheduleError};
use crate::ir_util;
use crate::primitives::cache::direct_blocks;
use crate::primitives::scope::{
    block_site, full_region, loop_site, subst, unique_block_name, vars_of,
};
use crate::state::{AnyRV, BlockRV, LoopRV, Res, Schedule};
use crate::trace::{Arg, Call, ReplayError};

impl Schedule {
    /// `b = sch.blockize(loop)`: wraps `loop` in a new outer block, returned.
    pub fn blockize(&mut self, loop_: LoopRV) -> Res<BlockRV> {
        self.require_stage("blockize", &[Stage::II, Stage::III])?;
        let lv = self.loop_var(loop_)?;
        let name = self.transact("blockize", |f| blockize(f, lv))?;
        let out = self.new_block_rv(&name);
        self.record(
            "blockize",
            vec![Arg::Var(loop_.trace_name())],
            vec![],
            vec![out.into()],
            false,
        );
        Ok(out)
    }

    /// `sch.lift_loop(loop)`: moves `loop`, the whole body of its block, out of that block.
    pub fn lift_loop(&mut self, loop_: LoopRV) -> Res<()> {
        self.require_stage("lift_loop", &[Stage::II, Stage::III])?;
        let lv = self.loop_var(loop_)?;
        self.transact("lift_loop", |f| lift(f, lv))?;
        self.record(
            "lift_loop",
            vec![Arg::Var(loop_.trace_name())],
            vec![],
            vec![],
            false,
        );
        Ok(())
    }
}

fn err(f: &PrimFunc, kind: ErrorKind, msg: impl Into<String>, focus: Focus) -> ScheduleError {
    ScheduleError::new(kind, msg, f, focus)
}

fn blockize(f: &mut PrimFunc, lv: VarId) -> Res<String> {
    let lfocus = Focus::Loop(lv);
    let lsite = loop_site(f, lv)?;
    let Some(l) = ir_util::find_loop(&f.body, lv).cloned() else {
        return Err(err(f, ErrorKind::NotFound, "the loop is gone", lfocus));
    };
    let blocks = direct_blocks(&l.body);
    if blocks.len() != 1 {
        return Err(err(
            f,
            ErrorKind::Unsupported,
            format!(
                "`blockize`: the loop must hold exactly one block, it holds {}",
                blocks.len()
            ),
            lfocus,
        ));
    }
    let b: Block = blocks[0].clone();
    let bsite = block_site(f, &b.name)?;
    let Some(lpos) = bsite.loops.iter().position(|v| *v == lv) else {
        return Err(err(
            f,
            ErrorKind::Internal,
            "the block is not under the loop",
            lfocus,
        ));
    };
    let inner: Vec<VarId> = bsite.loops[lpos..].to_vec();
    // Variables the subtree uses.
    let mut used: Vec<VarId> = Vec::new();
    let stmt = Stmt::For(Box::new(l.clone()));
    stmt.visit(&mut |s| {
        s.for_each_expr(|e| {
            for v in vars_of(e) {
                if !used.contains(&v) {
                    used.push(v);
                }
            }
        })
    });
    let mut iters = Vec::new();
    let mut map: HashMap<VarId, Expr> = HashMap::new();
    for ov in &lsite.loops {
        if !used.contains(ov) {
            continue;
        }
        let Some(ol) = ir_util::find_loop(&f.body, *ov).cloned() else {
            continue;
        };
        let mut sp = false;
        let mut rd = false;
        for it in &b.iters {
            if vars_of(&it.binding).contains(ov) {
                match it.kind {
                    IterKind::Spatial => sp = true,
                    IterKind::Reduce => rd = true,
                }
            }
        }
        if sp && rd {
            return Err(err(
                f,
                ErrorKind::Unsupported,
                format!(
                    "`blockize`: loop `{}` feeds both spatial and reduction iterators of `{}`",
                    f.vars[*ov].name, b.name
                ),
                Focus::Loop(*ov),
            ));
        }
        let nv = f.add_var(format!("v{}_o", f.vars[*ov].name), f.vars[*ov].dtype);
        map.insert(*ov, Expr::Var(nv));
        iters.push(BlockIter {
            var: nv,
            min: ol.min.clone(),
            extent: ol.extent.clone(),
            kind: if rd {
                IterKind::Reduce
            } else {
                IterKind::Spatial
            },
            binding: Expr::Var(*ov),
        });
    }
    let bind: HashMap<VarId, Expr> = b
        .iters
        .iter()
        .map(|it| (it.var, it.binding.clone()))
        .collect();
    let relax = |f: &PrimFunc, r: &BufferRegion| -> BufferRegion {
        let full = full_region(f, r.buffer);
        let ranges = r
            .ranges
            .iter()
            .enumerate()
            .map(|(d, (lo, ext))| {
                let (lo, ext) = (subst(lo, &bind), subst(ext, &bind));
                let varies = vars_of(&lo)
                    .iter()
                    .chain(vars_of(&ext).iter())
                    .any(|v| inner.contains(v));
                if varies {
                    full.ranges.get(d).cloned().unwrap_or((lo, ext))
                } else {
                    (subst(&lo, &map), subst(&ext, &map))
                }
            })
            .collect();
        BufferRegion {
            buffer: r.buffer,
            ranges,
        }
    };
    let reads: Vec<BufferRegion> = b.reads.iter().map(|r| relax(f, r)).collect();
    let writes: Vec<BufferRegion> = b.writes.iter().map(|r| relax(f, r)).collect();
    let name = unique_block_name(f, &format!("{}_o", b.name));
    let outer = Stmt::Block(Box::new(Block {
        name: name.clone(),
        iters,
        predicate: None,
        reads,
        writes,
        init: None,
        alloc_buffers: Vec::new(),
        annotations: Default::default(),
        body: stmt,
        span: Default::default(),
    }));
    if let Some(slot) = ir_util::find_mut(&mut f.body, &|s| ir_util::is_loop(s, lv)) {
        *slot = outer;
    }
    Ok(name)
}

fn lift(f: &mut PrimFunc, lv: VarId) -> Res<()> {
    let lfocus = Focus::Loop(lv);
    let lsite = loop_site(f, lv)?;
    let Some(bname) = lsite.scope_block.clone() else {
        return Err(err(
            f,
            ErrorKind::BadPlacement,
            "`lift_loop`: the loop is not inside a block",
            lfocus,
        ));
    };
    let Some(b) = ir_util::find_block(&f.body, &bname).cloned() else {
        return Err(err(
            f,
            ErrorKind::NotFound,
            format!("no block `{bname}`"),
            lfocus,
        ));
    };
    let body_loop = match &b.body {
        Stmt::For(l) => Some(l),
        Stmt::Seq(v) if v.len() == 1 => match &v[0] {
            Stmt::For(l) => Some(l),
            _ => None,
        },
        _ => None,
    };
    let Some(l) = body_loop.filter(|l| l.var == lv).map(|l| (**l).clone()) else {
        return Err(err(
            f,
            ErrorKind::LoopNotSingleChild,
            format!("`lift_loop`: the loop must be the whole body of block `{bname}`"),
            lfocus,
        ));
    };
    let iters: Vec<VarId> = b.iters.iter().map(|it| it.var).collect();
    if let Some(v) = vars_of(&l.min)
        .into_iter()
        .chain(vars_of(&l.extent))
        .find(|v| iters.contains(v))
    {
        return Err(err(
            f,
            ErrorKind::NotAnAffineLoop,
            format!(
                "`lift_loop`: the loop's bounds use `{}`, an iterator of block `{bname}`",
                f.vars[v].name
            ),
            lfocus,
        ));
    }
    if b.init.is_some() {
        return Err(err(
            f,
            ErrorKind::Unsupported,
            format!("`lift_loop`: block `{bname}` has an init, which would run once per iteration"),
            Focus::Block(bname.clone()),
        ));
    }
    if !b.alloc_buffers.is_empty() {
        return Err(err(
            f,
            ErrorKind::Unsupported,
            format!(
                "`lift_loop`: block `{bname}` allocates buffers, whose values would not survive \
                 from one iteration to the next"
            ),
            Focus::Block(bname.clone()),
        ));
    }
    if let Some(slot) = ir_util::find_mut(&mut f.body, &|s| ir_util::is_block(s, &bname)) {
        let mut nb = b.clone();
        nb.body = l.body.clone();
        let mut nl = l;
        nl.body = Stmt::Block(Box::new(nb));
        *slot = Stmt::For(Box::new(nl));
    }
    Ok(())
}

pub(crate) fn replay(sch: &mut Schedule, call: &Call) -> Result<Option<Vec<AnyRV>>, ReplayError> {
    match call.name() {
        "blockize" => Ok(Some(vec![sch.blockize(call.loop_(0, "loop")?)?.into()])),
        "lift_loop" => {
            sch.lift_loop(call.loop_(0, "loop")?)?;
            Ok(Some(vec![]))
        }
        _ => Ok(None),
    }
}
