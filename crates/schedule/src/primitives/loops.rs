//! Loop primitives of stages II/III: `split`, `fuse`, `reorder`, `parallel`, `vectorize`,
//! `unroll` and `bind`. Loops may have non-constant extents (a sparse row's
//! `J_indptr[vi + 1] - J_indptr[vi]`): `split` then guards the blocks inside with a predicate,
//! `fuse` multiplies the extents, `reorder` refuses to move a loop outside a loop its range
//! depends on.

use std::collections::{HashMap, HashSet};

use sparsetir_ir::{BinOp, DType, Expr, For, ForKind, IterKind, Stage, Stmt, VarId};

use crate::error::{ErrorKind, Focus};
use crate::ir_util;
use crate::state::{AnyRV, LoopRV, Res, Schedule};
use crate::trace::{Arg, Call, ReplayError};

const STAGES: &[Stage] = &[Stage::II, Stage::III];

/// Thread tags `bind` accepts.
pub const THREAD_TAGS: &[&str] = &[
    "blockIdx.x",
    "blockIdx.y",
    "blockIdx.z",
    "threadIdx.x",
    "threadIdx.y",
    "threadIdx.z",
    "vthread",
    "vthread.x",
    "vthread.y",
    "vthread.z",
];

fn int(v: i64, dt: DType) -> Expr {
    Expr::Int(v, dt)
}

/// `a * b`, folding constants and ones.
fn mul(a: Expr, b: Expr) -> Expr {
    match (a.as_int(), b.as_int()) {
        (Some(x), Some(y)) => match x.checked_mul(y) {
            Some(p) => Expr::Int(p, binary_dt(&a, &b)),
            None => Expr::mul(a, b),
        },
        (Some(1), _) => b,
        (_, Some(1)) => a,
        _ => Expr::mul(a, b),
    }
}

/// `a + b`, dropping zeros.
fn add(a: Expr, b: Expr) -> Expr {
    match (a.as_int(), b.as_int()) {
        (Some(0), _) => b,
        (_, Some(0)) => a,
        _ => Expr::add(a, b),
    }
}

fn binary_dt(a: &Expr, b: &Expr) -> DType {
    match (a, b) {
        (Expr::Int(_, d), _) | (_, Expr::Int(_, d)) => *d,
        _ => DType::I32,
    }
}

/// The single loop a statement consists of, if it is exactly one loop.
fn single_loop(s: &Stmt) -> Option<&For> {
    match s.single() {
        Stmt::For(l) => Some(l),
        _ => None,
    }
}

/// Nests `headers` (outer first) around `body`.
fn nest(headers: Vec<For>, body: Stmt) -> Stmt {
    let mut s = body;
    for mut h in headers.into_iter().rev() {
        h.body = s;
        s = Stmt::For(Box::new(h));
    }
    s
}

/// A loop header (everything but the body).
fn header(l: &For) -> For {
    For {
        var: l.var,
        min: l.min.clone(),
        extent: l.extent.clone(),
        kind: l.kind,
        thread: l.thread.clone(),
        annotations: l.annotations.clone(),
        body: Stmt::empty(),
        span: l.span,
    }
}

/// Adds `pred` to the blocks directly under `body`; when the body holds work outside any block,
/// the whole body is guarded by an `if` instead.
fn guard(body: Stmt, pred: Expr) -> Stmt {
    fn has_loose_work(s: &Stmt) -> bool {
        match s {
            Stmt::Block(_) => false,
            Stmt::Store(_) | Stmt::Evaluate(_) => true,
            _ => {
                let mut ch = Vec::new();
                ir_util::push_children(s, &mut ch);
                ch.into_iter().any(has_loose_work)
            }
        }
    }
    fn add_pred(s: &mut Stmt, pred: &Expr) {
        if let Stmt::Block(b) = s {
            b.predicate = Some(match b.predicate.take() {
                Some(p) => Expr::binary(BinOp::And, p, pred.clone()),
                None => pred.clone(),
            });
            return;
        }
        for c in ir_util::children_mut(s) {
            add_pred(c, pred);
        }
    }
    if has_loose_work(&body) {
        return Stmt::If(Box::new(sparsetir_ir::IfThenElse {
            cond: pred,
            then_case: body,
            else_case: None,
            span: Default::default(),
        }));
    }
    let mut body = body;
    add_pred(&mut body, &pred);
    body
}

impl Schedule {
    fn loop_vars(&self, loops: &[LoopRV]) -> Res<Vec<VarId>> {
        let mut out = Vec::new();
        for l in loops {
            let v = self.loop_var(*l)?;
            if out.contains(&v) {
                return Err(self.error(
                    ErrorKind::NotAPermutation,
                    format!("loop {} is given twice", l.trace_name()),
                    Focus::Loop(v),
                ));
            }
            out.push(v);
        }
        Ok(out)
    }

    /// The loop variable's name as the printed IR (and so the error's IR excerpt) shows it.
    fn var_name(&self, v: VarId) -> String {
        sparsetir_ir::printer::print_expr(&self.func, &Expr::Var(v))
    }

    /// `l0, l1 = sch.split(l, factors=[None, 32])`: splits a loop into nested loops whose
    /// extents are `factors` (at most one `None`, inferred as a ceiling division). When the
    /// factors do not divide the extent exactly (or that cannot be proven), the blocks inside get
    /// the predicate `fused < extent`. Returns the new loops, outer to inner; the old loop's
    /// handle is retired. Annotations of the split loop are dropped.
    pub fn split(&mut self, l: LoopRV, factors: &[Option<i64>]) -> Res<Vec<LoopRV>> {
        self.require_stage("split", STAGES)?;
        let v = self.loop_var(l)?;
        let lp = self.loop_(l)?.clone();
        let focus = Focus::Loop(v);
        if factors.len() < 2 {
            return Err(self.error(
                ErrorKind::InvalidArgument,
                "split needs at least two factors",
                focus,
            ));
        }
        if factors.iter().filter(|f| f.is_none()).count() > 1 {
            return Err(self.error(
                ErrorKind::InvalidArgument,
                "at most one split factor can be None",
                focus,
            ));
        }
        if let Some(bad) = factors.iter().flatten().find(|f| **f < 1) {
            return Err(self.error(
                ErrorKind::InvalidArgument,
                format!("split factor {bad} is not positive"),
                focus,
            ));
        }
        if lp.kind != ForKind::Serial {
            return Err(self.error(
                ErrorKind::LoopNotSerial,
                format!(
                    "loop `{}` is {}; only serial loops can be split",
                    self.var_name(v),
                    lp.kind.script_name()
                ),
                focus,
            ));
        }
        let dt = self.func.vars[v].dtype;
        let known: Option<i64> = factors
            .iter()
            .flatten()
            .try_fold(1i64, |acc, f| acc.checked_mul(*f));
        let Some(known) = known else {
            return Err(self.error(
                ErrorKind::InvalidArgument,
                "the product of the split factors overflows",
                focus,
            ));
        };
        let ext_const = lp.extent.as_int();
        let has_none = factors.iter().any(|f| f.is_none());
        // The loop's start, and an inferred extent of an inner loop, enter the block bindings
        // (`v0 * e1 + v1 + min`), which may only read loop variables and parameters: not a
        // block iterator or `let` around the loop (a sparse row's length, `indptr[vi + 1] -
        // indptr[vi]`; a fused loop's start, `indptr[vi]`).
        let mut around: Vec<VarId> = Vec::new();
        let is_it = |s: &Stmt| ir_util::is_loop(s, v);
        for s in ir_util::path_to(&self.func.body, &is_it).unwrap_or_default() {
            match s {
                Stmt::Block(b) => around.extend(b.iters.iter().map(|it| it.var)),
                Stmt::Let(l) => around.push(l.var),
                _ => {}
            }
        }
        let reads = |e: &Expr| around.iter().copied().find(|w| ir_util::uses_var(e, *w));
        if let Some(w) = reads(&lp.min) {
            return Err(self.error(
                ErrorKind::InvalidArgument,
                format!(
                    "loop `{}` starts at a value that reads `{}`, which is not a loop variable: \
                     the split loops' offset would enter the block bindings",
                    self.var_name(v),
                    self.var_name(w)
                ),
                focus,
            ));
        }
        if has_none && factors[0].is_some() && ext_const.is_none() {
            if let Some(w) = reads(&lp.extent) {
                return Err(self.error(
                    ErrorKind::InvalidArgument,
                    format!(
                        "loop `{}`'s extent reads `{}`, which is not a loop variable: an inner \
                         factor inferred from it would enter the block bindings; give the \
                         inner factors (`[None, k]`)",
                        self.var_name(v),
                        self.var_name(w)
                    ),
                    focus,
                ));
            }
        }
        // Extents of the new loops, and whether a predicate is needed.
        let (extents, needs_pred): (Vec<Expr>, bool) = if has_none {
            let inferred = match ext_const {
                Some(e) => int((e + known - 1).div_euclid(known).max(0), dt),
                None if known == 1 => lp.extent.clone(),
                None => Expr::binary(
                    BinOp::FloorDiv,
                    Expr::add(lp.extent.clone(), int(known - 1, dt)),
                    int(known, dt),
                ),
            };
            let needs = match ext_const {
                Some(e) => e % known != 0,
                None => known != 1,
            };
            let ex = factors
                .iter()
                .map(|f| match f {
                    Some(x) => int(*x, dt),
                    None => inferred.clone(),
                })
                .collect();
            (ex, needs)
        } else {
            match ext_const {
                Some(e) if known < e => {
                    return Err(self.error(
                        ErrorKind::InvalidArgument,
                        format!("the split factors cover {known} iterations but the loop has {e}"),
                        focus,
                    ))
                }
                Some(e) => (
                    factors.iter().flatten().map(|x| int(*x, dt)).collect(),
                    known != e,
                ),
                None => {
                    return Err(self.error(
                        ErrorKind::InvalidArgument,
                        "the loop's extent is not a constant: give None for one factor so it is \
                         inferred",
                        focus,
                    ))
                }
            }
        };
        let base = self.func.vars[v].name.clone();
        let new_vars: Vec<VarId> = (0..factors.len())
            .map(|k| self.func.add_var(format!("{base}_{k}"), dt))
            .collect();
        // fused = ((v0 * e1 + v1) * e2 + v2) ...
        let mut fused = Expr::Var(new_vars[0]);
        for k in 1..new_vars.len() {
            fused = add(mul(fused, extents[k].clone()), Expr::Var(new_vars[k]));
        }
        let mut map = HashMap::new();
        map.insert(v, add(fused.clone(), lp.min.clone()));
        let mut body = lp.body.clone();
        ir_util::subst_stmt(&mut body, &map);
        if needs_pred {
            body = guard(body, Expr::binary(BinOp::Lt, fused, lp.extent.clone()));
        }
        let headers: Vec<For> = new_vars
            .iter()
            .zip(&extents)
            .map(|(nv, ex)| For {
                var: *nv,
                min: int(0, dt),
                extent: ex.clone(),
                kind: ForKind::Serial,
                thread: None,
                annotations: Default::default(),
                body: Stmt::empty(),
                span: lp.span,
            })
            .collect();
        let new = nest(headers, body);
        self.transact("split", |f| {
            ir_util::replace(&mut f.body, &|s| ir_util::is_loop(s, v), |_| (new, ()));
            Ok(())
        })?;
        let out: Vec<LoopRV> = new_vars.iter().map(|nv| self.new_loop_rv(*nv)).collect();
        let fs = factors
            .iter()
            .map(|f| f.map(Arg::Int).unwrap_or(Arg::None))
            .collect();
        self.record(
            "split",
            vec![Arg::Var(l.trace_name())],
            vec![("factors".into(), Arg::List(fs))],
            out.iter().map(|x| (*x).into()).collect(),
            true,
        );
        Ok(out)
    }

    /// Checks that `vars` (outer to inner) form a perfect nest: each loop's body is exactly the
    /// next loop. Returns the loops.
    fn perfect_chain(&self, vars: &[VarId]) -> Res<Vec<For>> {
        let mut out = Vec::new();
        let first = ir_util::find_loop(&self.func.body, vars[0])
            .cloned()
            .ok_or_else(|| {
                self.error(
                    ErrorKind::StaleHandle,
                    "loop no longer exists",
                    Focus::Nothing,
                )
            })?;
        out.push(first);
        for k in 1..vars.len() {
            let prev = out[k - 1].clone();
            match single_loop(&prev.body) {
                Some(next) if next.var == vars[k] => out.push(next.clone()),
                Some(_) | None => {
                    let inside = ir_util::find_loop(&prev.body, vars[k]).is_some();
                    let (kind, msg) = if !inside {
                        (
                            ErrorKind::NotConsecutive,
                            format!(
                                "loop `{}` is not directly inside loop `{}`",
                                self.var_name(vars[k]),
                                self.var_name(prev.var)
                            ),
                        )
                    } else {
                        (
                            ErrorKind::LoopNotSingleChild,
                            format!(
                                "the body of loop `{}` is not exactly the loop `{}` (the loops \
                                 are not perfectly nested)",
                                self.var_name(prev.var),
                                self.var_name(vars[k])
                            ),
                        )
                    };
                    return Err(self.error(kind, msg, Focus::Loop(prev.var)));
                }
            }
        }
        Ok(out)
    }

    /// `l = sch.fuse(l0, l1, ...)`: fuses consecutive perfectly nested serial loops (outer
    /// first) into one loop whose extent is the product of theirs. Inner extents must not depend
    /// on the fused loops. The old handles are retired.
    pub fn fuse(&mut self, loops: &[LoopRV]) -> Res<LoopRV> {
        self.require_stage("fuse", STAGES)?;
        let vars = self.loop_vars(loops)?;
        if vars.len() < 2 {
            let focus = vars
                .first()
                .map(|v| Focus::Loop(*v))
                .unwrap_or(Focus::Nothing);
            return Err(self.error(
                ErrorKind::InvalidArgument,
                "fuse needs at least two loops",
                focus,
            ));
        }
        let chain = self.perfect_chain(&vars)?;
        for (k, l) in chain.iter().enumerate() {
            if l.kind != ForKind::Serial {
                return Err(self.error(
                    ErrorKind::LoopNotSerial,
                    format!(
                        "loop `{}` is {}; only serial loops can be fused",
                        self.var_name(l.var),
                        l.kind.script_name()
                    ),
                    Focus::Loop(l.var),
                ));
            }
            if ir_util::uses_any(&l.extent, &vars[..k]) || ir_util::uses_any(&l.min, &vars[..k]) {
                return Err(self.error(
                    ErrorKind::NotAnAffineLoop,
                    format!(
                        "the range of loop `{}` depends on an outer loop being fused",
                        self.var_name(l.var)
                    ),
                    Focus::Loop(l.var),
                ));
            }
        }
        // The fused loops' variables become divisions and remainders by the inner loops'
        // extents, in the bindings of the blocks below: an extent read through an enclosing
        // block's iterator (a sparse row's length, `indptr[vi + 1] - indptr[vi]`) would put that
        // iterator into a binding, which only loop variables and parameters may use.
        let mut block_iters = Vec::new();
        self.func.body.visit(&mut |s| {
            if let Stmt::Block(b) = s {
                block_iters.extend(b.iters.iter().map(|it| it.var));
            }
        });
        for l in &chain[1..] {
            if ir_util::uses_any(&l.extent, &block_iters) || ir_util::uses_any(&l.min, &block_iters)
            {
                return Err(self.error(
                    ErrorKind::NotAnAffineLoop,
                    format!(
                        "the range of loop `{}` is read through an enclosing block's iterator \
                         (a sparse row's length): it cannot be fused under another loop",
                        self.var_name(l.var)
                    ),
                    Focus::Loop(l.var),
                ));
            }
        }
        let dt = self.func.vars[vars[0]].dtype;
        let name = vars
            .iter()
            .map(|v| self.func.vars[*v].name.clone())
            .collect::<Vec<_>>()
            .join("_")
            + "_fused";
        let fv = self.func.add_var(name, dt);
        let n = chain.len();
        // inner[k] = product of the extents of loops k+1..n
        let mut inner = vec![int(1, dt); n];
        for k in (0..n - 1).rev() {
            inner[k] = mul(chain[k + 1].extent.clone(), inner[k + 1].clone());
        }
        let total = mul(chain[0].extent.clone(), inner[0].clone());
        let mut map = HashMap::new();
        // A loop of extent 1 keeps its start; a loop whose outer fused loops all have extent 1
        // needs no `% extent` (the quotient is already below its extent), so fusing unit loops
        // into a loop adds no divisions.
        let unit = |l: &For| l.extent.as_int() == Some(1);
        for (k, l) in chain.iter().enumerate() {
            if unit(l) {
                map.insert(l.var, l.min.clone());
                continue;
            }
            let mut e = Expr::Var(fv);
            if inner[k].as_int() != Some(1) {
                e = Expr::binary(BinOp::FloorDiv, e, inner[k].clone());
            }
            if !chain[..k].iter().all(&unit) {
                e = Expr::binary(BinOp::FloorMod, e, l.extent.clone());
            }
            map.insert(l.var, add(e, l.min.clone()));
        }
        let mut body = chain[n - 1].body.clone();
        ir_util::subst_stmt(&mut body, &map);
        let new = Stmt::For(Box::new(For {
            var: fv,
            min: int(0, dt),
            extent: total,
            kind: ForKind::Serial,
            thread: None,
            annotations: Default::default(),
            body,
            span: chain[0].span,
        }));
        let outer = vars[0];
        self.transact("fuse", |f| {
            ir_util::replace(&mut f.body, &|s| ir_util::is_loop(s, outer), |_| (new, ()));
            Ok(())
        })?;
        let out = self.new_loop_rv(fv);
        self.record(
            "fuse",
            loops.iter().map(|l| Arg::Var(l.trace_name())).collect(),
            vec![],
            vec![out.into()],
            false,
        );
        Ok(out)
    }

    /// `sch.reorder(l2, l0, l1)`: puts the given loops, which must lie in one perfect nest, in
    /// the given order (outer first); loops of the nest that are not given keep their places.
    /// A loop cannot move outside a loop its range depends on, nor change the order of two
    /// iterations that touch one element, one of them writing it (`DependencyViolation`; see
    /// `check_reorder_dependences`).
    pub fn reorder(&mut self, order: &[LoopRV]) -> Res<()> {
        self.require_stage("reorder", STAGES)?;
        let vars = self.loop_vars(order)?;
        if vars.is_empty() {
            return Err(self.error(
                ErrorKind::InvalidArgument,
                "reorder needs at least one loop",
                Focus::Nothing,
            ));
        }
        // Order the given loops by depth and check they lie on one path.
        let mut paths = Vec::new();
        for v in &vars {
            let p = ir_util::path_to(&self.func.body, &|s| ir_util::is_loop(s, *v))
                .map(|p| p.len())
                .unwrap_or(0);
            paths.push((p, *v));
        }
        paths.sort();
        let by_depth: Vec<VarId> = paths.iter().map(|(_, v)| *v).collect();
        let top = by_depth[0];
        let bottom = *by_depth.last().unwrap_or(&top);
        // Walk the nest from the top loop down to the bottom one.
        let mut chain: Vec<For> = Vec::new();
        let mut cur = ir_util::find_loop(&self.func.body, top)
            .cloned()
            .ok_or_else(|| {
                self.error(
                    ErrorKind::StaleHandle,
                    "loop no longer exists",
                    Focus::Nothing,
                )
            })?;
        loop {
            let stop = cur.var == bottom;
            let next = single_loop(&cur.body).cloned();
            chain.push(cur);
            if stop {
                break;
            }
            match next {
                Some(n) => cur = n,
                None => {
                    let last = chain.last().map(|l| l.var).unwrap_or(top);
                    let below = ir_util::find_loop(&chain[chain.len() - 1].body, bottom).is_some();
                    let (kind, msg) = if below {
                        (
                            ErrorKind::LoopNotSingleChild,
                            format!(
                                "the body of loop `{}` is not a single loop, so the loops are \
                                 not one perfect nest",
                                self.var_name(last)
                            ),
                        )
                    } else {
                        (
                            ErrorKind::NotConsecutive,
                            "the loops do not lie in one nest".to_string(),
                        )
                    };
                    return Err(self.error(kind, msg, Focus::Loop(last)));
                }
            }
        }
        let chain_vars: Vec<VarId> = chain.iter().map(|l| l.var).collect();
        if let Some(v) = vars.iter().find(|v| !chain_vars.contains(v)) {
            return Err(self.error(
                ErrorKind::NotConsecutive,
                format!(
                    "loop `{}` is not in the nest of loop `{}`",
                    self.var_name(*v),
                    self.var_name(top)
                ),
                Focus::Loop(*v),
            ));
        }
        let given: HashSet<VarId> = vars.iter().copied().collect();
        let mut queue = vars.iter();
        let new_vars: Vec<VarId> = chain_vars
            .iter()
            .map(|v| {
                if given.contains(v) {
                    *queue.next().unwrap_or(v)
                } else {
                    *v
                }
            })
            .collect();
        let headers: HashMap<VarId, For> = chain.iter().map(|l| (l.var, header(l))).collect();
        for (p, v) in new_vars.iter().enumerate() {
            let h = &headers[v];
            let inner = &new_vars[p + 1..];
            if ir_util::uses_any(&h.extent, inner) || ir_util::uses_any(&h.min, inner) {
                return Err(self.error(
                    ErrorKind::NotAnAffineLoop,
                    format!(
                        "the range of loop `{}` depends on a loop that would be inside it",
                        self.var_name(*v)
                    ),
                    Focus::Loop(*v),
                ));
            }
        }
        // A vectorized loop may not end up around a threaded one (see `check_simd_nesting`):
        // the body below the nest counts too.
        let threaded = |k: ForKind| matches!(k, ForKind::Parallel | ForKind::ThreadBinding);
        let body_threaded = {
            let mut t = false;
            chain[chain.len() - 1].body.visit(&mut |s| {
                if let Stmt::For(f) = s {
                    t |= threaded(f.kind);
                }
            });
            t
        };
        for (p, v) in new_vars.iter().enumerate() {
            if headers[v].kind != ForKind::Vectorized {
                continue;
            }
            let inner = new_vars[p + 1..]
                .iter()
                .find(|w| threaded(headers[*w].kind))
                .map(|w| format!("the threaded loop `{}`", self.var_name(*w)));
            let inner = inner.or_else(|| body_threaded.then(|| "a threaded loop".to_string()));
            if let Some(what) = inner {
                return Err(self.error(
                    ErrorKind::BadPlacement,
                    format!(
                        "`reorder` would put {what} inside the vectorized loop `{}`; a \
                         vectorized loop may only hold serial, unrolled or vectorized loops",
                        self.var_name(*v)
                    ),
                    Focus::Loop(*v),
                ));
            }
        }
        let body = chain[chain.len() - 1].body.clone();
        let new = nest(new_vars.iter().map(|v| headers[v].clone()).collect(), body);
        self.check_reorder_dependences(&chain_vars, &new_vars, top, &new)?;
        self.transact("reorder", |f| {
            ir_util::replace(&mut f.body, &|s| ir_util::is_loop(s, top), |_| (new, ()));
            Ok(())
        })?;
        self.record(
            "reorder",
            order.iter().map(|l| Arg::Var(l.trace_name())).collect(),
            vec![],
            vec![],
            false,
        );
        Ok(())
    }

    /// A reorder keeps every dependence (see [`crate::disjoint::reorder_conflict`]): the
    /// wavefront `Y[i, j] = Y[i - 1, j + 1] + X[i, j]` may not become `j, i`, while `Y[i, j] =
    /// Y[i - 1, j] + X[i, j]` may, as its columns are apart.
    fn check_reorder_dependences(
        &self,
        old: &[VarId],
        new: &[VarId],
        top: VarId,
        reordered: &Stmt,
    ) -> Res<()> {
        let func = self.func();
        let mut after = func.clone();
        ir_util::replace(&mut after.body, &|s| ir_util::is_loop(s, top), |_| {
            (reordered.clone(), ())
        });
        let Some((a, b, c)) =
            crate::disjoint::reorder_conflict(func, &after, old, new, &mut Vec::new())
        else {
            return Ok(());
        };
        let name = self.var_name(a);
        Err(self.error(
            ErrorKind::DependencyViolation,
            format!(
                "`reorder` would put loop `{}` around loop `{name}` and so change the order of \
                 iterations of `{name}` that may touch the same element of `{}`, one of them \
                 writing it (under the loop: `{}`)",
                self.var_name(b),
                func.buffers[c.buffer].name,
                c.accesses.join("`, `")
            ),
            Focus::Loop(a),
        ))
    }

    /// Sets a serial loop's kind after checking the blocks under it: with `spatial_only`, no
    /// block may bind a reduction iterator to the loop variable, and the loop must not do work
    /// outside blocks.
    /// A vectorized loop may only hold serial, unrolled or vectorized loops (OpenMP allows no
    /// other construct inside a `simd` region, and threads inside SIMD lanes make no sense), so
    /// vectorizing a loop around a parallel or thread-bound loop, or parallelising or binding a
    /// loop inside a vectorized one, is refused.
    fn check_simd_nesting(&self, primitive: &str, l: LoopRV, v: VarId, kind: ForKind) -> Res<()> {
        let threaded = |k: ForKind| matches!(k, ForKind::Parallel | ForKind::ThreadBinding);
        let conflict = match kind {
            ForKind::Vectorized => {
                let lp = self.loop_(l)?;
                let mut inner = None;
                lp.body.visit(&mut |s| {
                    if let Stmt::For(f) = s {
                        if inner.is_none() && threaded(f.kind) {
                            inner = Some(f.var);
                        }
                    }
                });
                inner.map(|w| format!("it contains the threaded loop `{}`", self.var_name(w)))
            }
            k if threaded(k) => {
                let f = self.func();
                let is_it = |s: &Stmt| matches!(s, Stmt::For(f) if f.var == v);
                ir_util::path_to(&f.body, &is_it).and_then(|path| {
                    path.iter().rev().skip(1).find_map(|s| match s {
                        Stmt::For(o) if o.kind == ForKind::Vectorized => Some(format!(
                            "it sits inside the vectorized loop `{}`",
                            self.var_name(o.var)
                        )),
                        _ => None,
                    })
                })
            }
            _ => None,
        };
        match conflict {
            None => Ok(()),
            Some(why) => Err(self.error(
                ErrorKind::BadPlacement,
                format!(
                    "`{primitive}` on loop `{}`: {why}; a vectorized loop may only hold serial, \
                     unrolled or vectorized loops",
                    self.var_name(v)
                ),
                Focus::Loop(v),
            )),
        }
    }

    fn set_loop_kind(
        &mut self,
        primitive: &str,
        l: LoopRV,
        kind: ForKind,
        thread: Option<String>,
        spatial_only: bool,
    ) -> Res<()> {
        self.require_stage(primitive, STAGES)?;
        let v = self.loop_var(l)?;
        let lp = self.loop_(l)?;
        if lp.kind != ForKind::Serial {
            return Err(self.error(
                ErrorKind::LoopNotSerial,
                format!(
                    "loop `{}` is already {}",
                    self.var_name(v),
                    lp.kind.script_name()
                ),
                Focus::Loop(v),
            ));
        }
        if kind != ForKind::Unrolled {
            let mut reduce_block = None;
            let mut loose = false;
            check_body(&lp.body, v, false, &mut reduce_block, &mut loose);
            let spatial = reduce_block.is_none() && !loose;
            // A loop over spatial iterators only: the `"S"` it comes from promises iterations
            // apart, but a body that reads or writes another iteration's element (`Y[i + 1] =
            // X[i] + Y[i]`) breaks the promise; running it apart would race.
            if spatial {
                let scoped_private = kind == ForKind::ThreadBinding;
                if let Some(c) = crate::disjoint::carried_conflict(
                    self.func(),
                    &self.func().body,
                    v,
                    scoped_private,
                    &mut Vec::new(),
                ) {
                    return Err(self.error(
                        ErrorKind::DependencyViolation,
                        format!(
                            "loop `{}`: its iterations may touch the same element of `{}`, one \
                             of them writing it (a dependence carried by a loop over spatial \
                             iterators; under the loop: `{}`); `{primitive}` needs iterations \
                             that touch elements of their own",
                            self.var_name(v),
                            self.func().buffers[c.buffer].name,
                            c.accesses.join("`, `")
                        ),
                        Focus::Loop(v),
                    ));
                }
            }
        }
        if spatial_only {
            let mut reduce_block = None;
            let mut loose = false;
            // A block whose updates are atomic (`{"atomic": True}`) may run its reduction's
            // iterations on different threads.
            let atomic_ok = primitive == "bind";
            check_body(&lp.body, v, atomic_ok, &mut reduce_block, &mut loose);
            // A reduction loop whose iterations provably write disjoint elements (a fused
            // iterator split into its output's rows) may still run its iterations apart.
            if reduce_block.is_some()
                && matches!(primitive, "parallel" | "bind")
                && crate::disjoint::iterations_disjoint(self.func(), &self.func().body, v)
            {
                reduce_block = None;
            }
            if let Some(b) = reduce_block {
                return Err(self.error(
                    ErrorKind::ReductionLoop,
                    format!(
                        "loop `{}` binds a reduction iterator of block `{b}`; `{primitive}` \
                         needs a loop over spatial iterators only (or one whose iterations \
                         provably write disjoint elements)",
                        self.var_name(v)
                    ),
                    Focus::Loop(v),
                ));
            }
            if loose {
                return Err(self.error(
                    ErrorKind::Unsupported,
                    format!(
                        "loop `{}` writes memory outside a block; `{primitive}` needs its work \
                         in blocks",
                        self.var_name(v)
                    ),
                    Focus::Loop(v),
                ));
            }
        }
        self.check_simd_nesting(primitive, l, v, kind)?;
        self.transact(primitive, |f| {
            if let Some(lp) = ir_util::find_loop_mut(&mut f.body, v) {
                lp.kind = kind;
                lp.thread = thread.clone();
            }
            Ok(())
        })?;
        let mut args = vec![Arg::Var(l.trace_name())];
        if let Some(t) = thread {
            args.push(Arg::Str(t));
        }
        self.record(primitive, args, vec![], vec![], false);
        Ok(())
    }

    /// `sch.parallel(l)`: runs the loop's iterations in parallel (spatial loops only).
    pub fn parallel(&mut self, l: LoopRV) -> Res<()> {
        self.set_loop_kind("parallel", l, ForKind::Parallel, None, true)
    }

    /// `sch.vectorize(l)`: vectorizes the loop (spatial loops only).
    pub fn vectorize(&mut self, l: LoopRV) -> Res<()> {
        self.set_loop_kind("vectorize", l, ForKind::Vectorized, None, true)
    }

    /// `sch.unroll(l)`: unrolls the loop.
    pub fn unroll(&mut self, l: LoopRV) -> Res<()> {
        self.set_loop_kind("unroll", l, ForKind::Unrolled, None, false)
    }

    /// `sch.bind(l, "threadIdx.x")`: binds the loop to a GPU thread axis. `threadIdx.x` may
    /// carry a reduction (the CUDA writer combines the lanes' parts with warp shuffles); every
    /// other axis needs a spatial loop, or one whose iterations provably write disjoint
    /// elements (no writer combines partial results across `threadIdx.y`, say: its threads
    /// would all update the same element).
    pub fn bind(&mut self, l: LoopRV, thread: &str) -> Res<()> {
        if !THREAD_TAGS.contains(&thread) {
            let focus = self.focus_of(l.into());
            return Err(self.error(
                ErrorKind::InvalidArgument,
                format!(
                    "unknown thread tag `{thread}` (expected one of {})",
                    THREAD_TAGS.join(", ")
                ),
                focus,
            ));
        }
        // One thread index cannot number two nested loops: the inner loop would see the
        // outer loop's value.
        let v = self.loop_var(l)?;
        let same = |s: &Stmt| {
            matches!(s, Stmt::For(f) if f.kind == ForKind::ThreadBinding
                && f.thread.as_deref() == Some(thread) && f.var != v)
        };
        let mut nested = false;
        if let Some(path) = ir_util::path_to(&self.func().body, &|s| ir_util::is_loop(s, v)) {
            nested |= path.iter().any(|s| same(s));
            if let Some(Stmt::For(f)) = path.last() {
                f.body.visit(&mut |s| nested |= same(s));
            }
        }
        if nested {
            let focus = self.focus_of(l.into());
            return Err(self.error(
                ErrorKind::ThreadBindingConflict,
                format!(
                    "a loop around or inside this one is already bound to `{thread}`: nested \
                     loops need different thread indices"
                ),
                focus,
            ));
        }
        let spatial = thread != "threadIdx.x";
        // Threads combine a reduction bound to `threadIdx.x` by shuffles: only an update whose
        // order does not matter can be split so.
        if !spatial {
            let f = self.func();
            if let Some((b, why)) = crate::disjoint::uncombinable_reduction(f, &f.body, v) {
                let focus = self.focus_of(l.into());
                return Err(self.error(
                    ErrorKind::ReductionLoop,
                    format!(
                        "loop `{}` binds a reduction iterator of block `{b}`: {why}; threads \
                         can only combine a reduction into one element by a sum, `min` or `max`",
                        self.var_name(v)
                    ),
                    focus,
                ));
            }
        }
        self.set_loop_kind(
            "bind",
            l,
            ForKind::ThreadBinding,
            Some(thread.to_string()),
            spatial,
        )
    }
}

/// Finds a block under `s` that binds a reduction iterator to an expression of `v`, and whether
/// `s` stores outside any block.
pub(crate) fn check_body(
    s: &Stmt,
    v: VarId,
    atomic_ok: bool,
    reduce_block: &mut Option<String>,
    loose: &mut bool,
) {
    match s {
        Stmt::Block(b) => {
            if reduce_block.is_none()
                && !(atomic_ok && b.is_atomic())
                && b.iters
                    .iter()
                    .any(|it| it.kind == IterKind::Reduce && ir_util::uses_var(&it.binding, v))
            {
                *reduce_block = Some(b.name.clone());
            }
            // Blocks nested inside bind to their own loops; keep looking for v there too.
            let mut ch = Vec::new();
            ir_util::push_children(s, &mut ch);
            for c in ch {
                check_nested(c, v, atomic_ok, reduce_block);
            }
        }
        Stmt::Store(_) | Stmt::Evaluate(_) => *loose = true,
        _ => {
            let mut ch = Vec::new();
            ir_util::push_children(s, &mut ch);
            for c in ch {
                check_body(c, v, atomic_ok, reduce_block, loose);
            }
        }
    }
}

/// Inside a block: only looks for reduction bindings of nested blocks.
fn check_nested(s: &Stmt, v: VarId, atomic_ok: bool, reduce_block: &mut Option<String>) {
    s.visit(&mut |x| {
        if let Stmt::Block(b) = x {
            if reduce_block.is_none()
                && !(atomic_ok && b.is_atomic())
                && b.iters
                    .iter()
                    .any(|it| it.kind == IterKind::Reduce && ir_util::uses_var(&it.binding, v))
            {
                *reduce_block = Some(b.name.clone());
            }
        }
    });
}

pub(crate) fn replay(sch: &mut Schedule, call: &Call) -> Result<Option<Vec<AnyRV>>, ReplayError> {
    let out: Vec<AnyRV> = match call.name() {
        "split" => {
            let l = call.loop_(0, "loop")?;
            let fs = call
                .list(1, "factors")?
                .iter()
                .map(|a| match a {
                    Arg::None => Ok(None),
                    other => call.int_of(other).map(Some),
                })
                .collect::<Result<Vec<_>, _>>()?;
            sch.split(l, &fs)?.into_iter().map(Into::into).collect()
        }
        "fuse" => vec![sch.fuse(&call.loops_from(0)?)?.into()],
        "reorder" => {
            sch.reorder(&call.loops_from(0)?)?;
            vec![]
        }
        "parallel" => {
            sch.parallel(call.loop_(0, "loop")?)?;
            vec![]
        }
        "vectorize" => {
            sch.vectorize(call.loop_(0, "loop")?)?;
            vec![]
        }
        "unroll" => {
            sch.unroll(call.loop_(0, "loop")?)?;
            vec![]
        }
        "bind" => {
            sch.bind(call.loop_(0, "loop")?, call.str(1, "thread_axis")?)?;
            vec![]
        }
        _ => return Ok(None),
    };
    Ok(Some(out))
}
