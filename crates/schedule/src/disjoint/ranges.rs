//! Positions read from memory (`k + P[q]`, a fiber's element at stage III) proven inside a
//! range of their own, and accesses apart through such ranges (see the parent module).

use std::collections::HashMap;

use sparsetir_arith::Analyzer;
use sparsetir_ir::{BufferId, Expr, For, Stmt, VarId};

use super::{
    disjoint_accesses, loads_to_zero, moves_load, outer_loads, reads_any, LoopFacts, Need,
};
use crate::ir_util;

/// A position proven inside a range of its own ([`range_verdicts`]).
#[derive(Clone, Debug)]
pub(super) struct InRange {
    /// What owning it asks of the data.
    pub(super) needs: Vec<Need>,
    /// The arrays whose ranges nest, the one the index adds first (`IK_indptr`, `I_indptr` for
    /// `k + IK_indptr[i + I_indptr[b]]`).
    pub(super) chain: Vec<BufferId>,
    /// Where the innermost array is read (`b`), simplified: no two iterations share it.
    pub(super) base: Expr,
}

/// What running the loop over `v` apart asks where every access in `written` (as written)
/// has, at one index, a position proven inside a range of its own through the same arrays,
/// whatever its offset (an init's split fiber `j0 * 4 + j1 + C_indptr[i]` beside the update's
/// `j + C_indptr[i]`), and the innermost arrays are read at positions no two iterations share:
/// two iterations then reach ranges that never overlap. `None` otherwise.
pub(super) fn range_apart(
    facts: &LoopFacts,
    written: &[Vec<Expr>],
    v: VarId,
    ranges: &[(Expr, Option<InRange>)],
) -> Option<Vec<Need>> {
    let width = written.first()?.len();
    (0..width).find_map(|k| {
        let proofs = written
            .iter()
            .map(|idx| {
                let e = facts.resolve(idx.get(k)?);
                ranges.iter().find(|(x, _)| *x == e)?.1.as_ref()
            })
            .collect::<Option<Vec<&InRange>>>()?;
        if proofs.iter().any(|p| p.chain != proofs[0].chain) {
            return None;
        }
        let bases: Vec<Vec<Expr>> = proofs.iter().map(|p| vec![p.base.clone()]).collect();
        if !disjoint_accesses(facts, &bases, v) {
            return None;
        }
        let mut needs: Vec<Need> = Vec::new();
        for n in proofs.iter().flat_map(|p| &p.needs) {
            if !needs.contains(n) {
                needs.push(n.clone());
            }
        }
        Some(needs)
    })
}

/// For every index of an access to a `wanted` buffer under the loop over `v` that adds a load
/// moving with `v` to an offset (`k + P[q]`), as [`LoopFacts::resolve`] writes it: what owning a range of its own asks of
/// the data (`Some`: nothing for an axis's `indptr` at stages I and II, [`Need::Monotone`]
/// otherwise), or `None` where some access with that index is not proven inside its range.
///
/// The proof of an access reads the loops' ranges with their bounds resolved to loop
/// variables (`j < J_indptr[i + 1] - J_indptr[i]` where the extent reads a block iterator
/// bound to `i`) and the conditions around it (a block's predicate, the branch of an `if`):
/// a split loop's `j0 * 4 + j1` stays below its fiber's length only under its predicate.
/// An offset whose loops all run to a count the iteration keeps itself (`p < cnt[0]`, `cnt`
/// `private` to it: a sparse output's row, whose slots `P[i] + cnt[0]` it handed out, and
/// whose range the symbolic phase sized by the same count) is taken as inside too.
pub(super) fn range_verdicts(
    facts: &LoopFacts,
    v: VarId,
    private: &[BufferId],
    wanted: &[BufferId],
) -> Walked {
    struct Walk<'f, 'a> {
        facts: &'f LoopFacts<'a>,
        v: VarId,
        private: &'f [BufferId],
        /// The buffers whose accesses are asked about.
        wanted: &'f [BufferId],
        /// The loops inside, with their extents resolved.
        extents: HashMap<VarId, Expr>,
        an: Analyzer,
        guards: Vec<Expr>,
        out: Vec<(Expr, Option<InRange>)>,
        accesses: Vec<Guarded>,
    }
    impl Walk<'_, '_> {
        fn bind(&mut self, f: &For) {
            // Simplified as the indices are, so that the prover matches the loads in both.
            let func = &self.facts.func;
            let min = self.an.simplify(func, &self.facts.resolve(&f.min));
            let extent = self.an.simplify(func, &self.facts.resolve(&f.extent));
            self.an.bind_range(f.var, &min, &extent);
            self.extents.insert(f.var, extent);
        }
        /// Whether every variable of `offset` is a loop inside running to a count read from a
        /// buffer private to the iteration (and there is one).
        fn counted(&self, offset: &Expr) -> bool {
            let mut vars = Vec::new();
            offset.visit(&mut |x| {
                if let Expr::Var(x) = x {
                    vars.push(*x);
                }
            });
            !vars.is_empty()
                && vars.iter().all(|x| {
                    self.extents
                        .get(x)
                        .is_some_and(|e| reads_any(e, self.private))
                })
        }
        fn guard(&mut self, cond: &Expr) {
            let cond = self.facts.resolve(cond);
            let mut parts = vec![cond];
            while let Some(c) = parts.pop() {
                match c {
                    Expr::Binary(sparsetir_ir::BinOp::And, a, b) => {
                        parts.push(*a);
                        parts.push(*b);
                    }
                    c => self.guards.push(c),
                }
            }
        }
        fn expr(&mut self, e: &Expr) {
            e.visit(&mut |x| {
                if let Expr::Load { buffer, indices } = x {
                    if self.wanted.contains(buffer) {
                        self.access(*buffer, indices);
                    }
                }
            });
        }
        fn access(&mut self, buffer: BufferId, indices: &[Expr]) {
            for i in indices {
                self.index(i);
            }
            self.accesses.push(Guarded {
                buffer,
                indices: indices.iter().map(|i| self.facts.resolve(i)).collect(),
                guards: self.guards.clone(),
            });
        }
        fn index(&mut self, i: &Expr) {
            let e = self.facts.resolve(i);
            if !moves_load(&e, self.v) {
                return;
            }
            let proof = in_own_range(self, &e);
            match self.out.iter_mut().find(|(x, _)| *x == e) {
                Some((_, verdict)) => match (verdict.as_mut(), proof) {
                    (Some(old), Some(new)) => {
                        for n in new.needs {
                            if !old.needs.contains(&n) {
                                old.needs.push(n);
                            }
                        }
                    }
                    _ => *verdict = None,
                },
                None => self.out.push((e, proof)),
            }
        }
        fn stmt(&mut self, s: &Stmt) {
            let depth = self.guards.len();
            match s {
                Stmt::For(f) => {
                    self.expr(&f.min);
                    self.expr(&f.extent);
                    self.bind(f);
                    self.stmt(&f.body);
                }
                Stmt::Block(b) => {
                    // The bindings and the predicate are read whatever the predicate says; the
                    // regions describe the body's accesses, which it guards.
                    for it in &b.iters {
                        self.expr(&it.binding);
                    }
                    if let Some(p) = &b.predicate {
                        self.expr(p);
                        self.guard(p);
                    }
                    s.for_each_expr(|e| self.expr(e));
                    if let Some(i) = &b.init {
                        self.stmt(i);
                    }
                    self.stmt(&b.body);
                }
                Stmt::Store(st) => {
                    if self.wanted.contains(&st.buffer) {
                        self.access(st.buffer, &st.indices);
                    }
                    s.for_each_expr(|e| self.expr(e));
                }
                Stmt::If(i) => {
                    self.expr(&i.cond);
                    self.guard(&i.cond);
                    self.stmt(&i.then_case);
                    self.guards.truncate(depth);
                    if let Some(e) = &i.else_case {
                        let not = Expr::Unary(sparsetir_ir::UnOp::Not, Box::new(i.cond.clone()));
                        self.guard(&not);
                        self.stmt(e);
                    }
                }
                _ => {
                    s.for_each_expr(|e| self.expr(e));
                    let mut ch = Vec::new();
                    ir_util::push_children(s, &mut ch);
                    for c in ch {
                        self.stmt(c);
                    }
                }
            }
            self.guards.truncate(depth);
        }
        /// Whether `x < y` always holds: proven from the ranges, or from a guard `a < b` (or
        /// `<=`, `>`, `>=`) with `x - y <= a - b` (`x - y <= a - b - 1` for `<=`).
        fn below(&self, x: &Expr, y: &Expr) -> bool {
            use sparsetir_ir::BinOp::{Ge, Gt, Le, Lt};
            let func = &self.facts.func;
            let cmp = |op, a: Expr, b: Expr| self.an.prove(func, &Expr::binary(op, a, b));
            if cmp(Lt, x.clone(), y.clone()) == Some(true) {
                return true;
            }
            let gap = Expr::sub(x.clone(), y.clone());
            self.guards.iter().any(|g| {
                let Expr::Binary(op, a, b) = g else {
                    return false;
                };
                let (a, b) = ((**a).clone(), (**b).clone());
                let bound = match op {
                    Lt => Expr::sub(a, b),
                    Le => Expr::sub(Expr::sub(a, b), Expr::int(1)),
                    Gt => Expr::sub(b, a),
                    Ge => Expr::sub(Expr::sub(b, a), Expr::int(1)),
                    _ => return false,
                };
                cmp(Le, gap.clone(), bound) == Some(true)
            })
        }
    }
    /// `e` is `offset + P[q]`, `P` a parameter and `q` moving with `v`, `0 <= offset < P[q + 1]
    /// - P[q]`, and `q` apart or itself such a position.
    fn in_own_range(w: &Walk, e: &Expr) -> Option<InRange> {
        let func = &w.facts.func;
        let loads = outer_loads(e);
        let [load @ Expr::Load { buffer, indices }] = loads.as_slice() else {
            return None;
        };
        let [q] = indices.as_slice() else {
            return None;
        };
        let param = func.buffers[*buffer].data_param()?;
        if !ir_util::uses_var(q, w.v) {
            return None;
        }
        let mut offset = e.clone();
        loads_to_zero(&mut offset);
        let an = &w.an;
        if !an.can_prove_equal(func, e, &Expr::add(offset.clone(), load.clone())) {
            return None;
        }
        let next = Expr::Load {
            buffer: *buffer,
            indices: vec![Expr::add(q.clone(), Expr::int(1))],
        };
        let len = Expr::sub(next, load.clone());
        let zero = Expr::Int(0, offset.dtype(func));
        if an.prove(
            func,
            &Expr::binary(sparsetir_ir::BinOp::Ge, offset.clone(), zero),
        ) != Some(true)
            || !(w.below(&offset, &len) || w.counted(&offset))
        {
            return None;
        }
        let mut proof = if moves_load(q, w.v) {
            in_own_range(w, q)?
        } else {
            let base = w.an.simplify(func, q);
            if !disjoint_accesses(w.facts, &[vec![base.clone()]], w.v) {
                return None;
            }
            InRange {
                needs: Vec::new(),
                chain: Vec::new(),
                base,
            }
        };
        proof.chain.insert(0, *buffer);
        // An axis's `indptr` is validated monotone; any other parameter is checked at launch.
        if !func.axes.iter().any(|(_, a)| a.indptr == Some(param)) {
            let n = Need::Monotone {
                param: func.vars[param].name.clone(),
            };
            if !proof.needs.contains(&n) {
                proof.needs.insert(0, n);
            }
        }
        Some(proof)
    }
    let mut walk = Walk {
        facts,
        v,
        private,
        wanted,
        extents: HashMap::new(),
        an: facts.an.clone(),
        guards: Vec::new(),
        out: Vec::new(),
        accesses: Vec::new(),
    };
    // The path ends at the loop over `v` itself.
    for s in &facts.path {
        match s {
            Stmt::For(f) => walk.bind(f),
            Stmt::Block(b) => {
                if let Some(p) = &b.predicate {
                    walk.guard(p);
                }
            }
            _ => {}
        }
    }
    walk.stmt(&facts.lp.body);
    Walked {
        ranges: walk.out,
        accesses: walk.accesses,
    }
}

/// What [`range_verdicts`] found under the loop.
pub(super) struct Walked {
    /// Each index that adds a moving load to an offset, and its verdict.
    pub(super) ranges: Vec<(Expr, Option<InRange>)>,
    /// Every access to a wanted buffer, with the conditions around it.
    pub(super) accesses: Vec<Guarded>,
}

/// An access under the loop with the conditions that hold where it runs (block predicates,
/// `if` branches), everything in terms of loop variables ([`LoopFacts::resolve`]).
pub(super) struct Guarded {
    pub(super) buffer: BufferId,
    pub(super) indices: Vec<Expr>,
    pub(super) guards: Vec<Expr>,
}
