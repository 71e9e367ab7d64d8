//! Positions a binary search found, read back as the coordinates they stand for: an access
//! `Bsr[P[a] + M[x], ...]` whose `M[x]` the function's search wrote as the position of
//! coordinate `C` in fiber `a` (or `-1`), guarded by `M[x] >= 0`, also names `C` and `a`, so
//! that the proofs see the access as the stage-I script wrote it (`Bsr[i // 2, j // 2, ...]`).
//!
//! What a search stored is read from the function itself, not trusted: every store to `M` is
//! a negative constant (a miss) or, at exactly one place, `M[x'] = l` directly under
//! `if IND[..l..] == C'` (at stage III also directly under `if l < P[a' + 1] - P[a']`), with
//! `C'`, `a'` and `IND`'s other indices reading only the store's own variables and arrays the
//! function never writes. Two accesses that meet then read `IND` at one position, so their
//! coordinates are equal; at stage III their `l`s lie in `[0, P[a + 1] - P[a])`, so where `P`
//! never decreases their fibers are equal too. What remains trusted is the slot the consumer
//! reads: that `M[x]` holds what the search's iteration addressing `x` (the store's variables
//! matched against `x`) stored, the lowering running the search over the iteration it serves.

use std::collections::HashMap;

use sparsetir_ir::{BinOp, BufferId, Expr, PrimFunc, Stmt, VarId};

use super::ranges::Guarded;
use super::{replaced, LoopFacts, Need};
use crate::ir_util;
use crate::primitives::scope;

/// How one array's search stored its results (see the module documentation).
struct Search {
    /// The store's indices `x'`; their variables (`vars`) are the search's iteration.
    slot: Vec<Expr>,
    vars: Vec<VarId>,
    /// The stored position `l`.
    value: Expr,
    /// Where the coordinates' array is read, `l` among the indices.
    at: Vec<Expr>,
    /// The coordinate the search looked for.
    coord: Expr,
    /// At stage III: the fiber `(P, a')` whose length bounds `l`.
    fiber: Option<(BufferId, Expr)>,
}

/// The searches of one function, found on demand.
pub(super) struct Searches {
    found: HashMap<BufferId, Option<Search>>,
}

impl Searches {
    pub(super) fn new() -> Searches {
        Searches {
            found: HashMap::new(),
        }
    }

    /// The coordinates (and fibers) the search results in `indices` stand for, as extra indices
    /// of the access; `None` where the access reads no search result, or one it does not
    /// prove. Two accesses whose [`Found::shape`] differ are not comparable through them.
    pub(super) fn coordinates(
        &mut self,
        facts: &LoopFacts,
        indices: &[Expr],
        guards: &[Expr],
    ) -> Option<Found> {
        let func = &facts.func;
        let mut out = Found {
            extra: Vec::new(),
            needs: Vec::new(),
            shape: Vec::new(),
        };
        // The arrays the function computes, read in each index (once per index).
        let mut computed: Vec<(usize, BufferId, Vec<Expr>)> = Vec::new();
        for (k, e) in indices.iter().enumerate() {
            for (buffer, x) in scope::loaded_in_expr(e) {
                let load = (k, buffer, x);
                if func.buffers[buffer].data_param().is_none() && !computed.contains(&load) {
                    computed.push(load);
                }
            }
        }
        if computed.is_empty() {
            return None;
        }
        let simple = |e: &Expr| facts.an.simplify(func, e);
        let simplified: Vec<Expr> = indices.iter().map(simple).collect();
        let same_as_index = |q: &Expr| {
            let q = simple(q);
            simplified.iter().position(|i| *i == q)
        };
        for (k, buffer, x) in &computed {
            let (k, e) = (*k, &indices[*k]);
            let m = Expr::Load {
                buffer: *buffer,
                indices: x.clone(),
            };
            let search = self
                .found
                .entry(*buffer)
                .or_insert_with(|| search_of(func, *buffer))
                .as_ref()?;
            if !guards.iter().any(|g| at_least_zero(g, &m)) {
                return None;
            }
            let mut bound = HashMap::new();
            if search.slot.len() != x.len()
                || !search
                    .slot
                    .iter()
                    .zip(x)
                    .all(|(p, e)| unify(p, e, &search.vars, &mut bound))
            {
                return None;
            }
            let at_here = |e: &Expr| -> Option<Expr> {
                let mut e = e.clone();
                if !scope::vars_of(&e)
                    .iter()
                    .all(|v| bound.contains_key(v) || Expr::Var(*v) == facts.hole)
                {
                    return None;
                }
                ir_util::subst_expr(&mut e, &bound);
                Some(e)
            };
            // Where `IND` is read, with the consumer's `M[x]` for `l`: every index of that
            // read is one of the access's own indices, so two accesses that meet read it
            // at one position.
            let read_at: Vec<usize> = search
                .at
                .iter()
                .map(|q| {
                    let q = at_here(&replaced(q, &search.value, &facts.hole).0)?;
                    same_as_index(&replaced(&q, &facts.hole, &m).0)
                })
                .collect::<Option<_>>()?;
            out.shape.push((*buffer, k, read_at));
            out.extra.push(at_here(&search.coord)?);
            if let Some((p, a)) = &search.fiber {
                // `P[a] + l` with `0 <= l < P[a + 1] - P[a]`: the position names its fiber
                // where `P` never decreases.
                let a = at_here(a)?;
                let start = Expr::Load {
                    buffer: *p,
                    indices: vec![a.clone()],
                };
                if simple(&Expr::add(start, m.clone())) == simple(e) {
                    out.extra.push(a);
                    out.shape.push((*p, k, Vec::new()));
                    let param = func.buffers[*p].data_param()?;
                    if !func.axes.iter().any(|(_, ax)| ax.indptr == Some(param)) {
                        let n = Need::Monotone {
                            param: func.vars[param].name.clone(),
                        };
                        if !out.needs.contains(&n) {
                            out.needs.push(n);
                        }
                    }
                }
            }
        }
        (!out.extra.is_empty()).then_some(out)
    }
}

/// What [`Searches::coordinates`] read from an access.
pub(super) struct Found {
    /// The coordinates (and fibers) its search results stand for.
    pub(super) extra: Vec<Expr>,
    /// What the fibers ask of the data: the arrays of starts never decreasing.
    pub(super) needs: Vec<Need>,
    /// For each extra index, the array it came through, the index that reads it, and the
    /// indices of the access the coordinates' array is read at: two accesses that meet have
    /// equal extra indices where their shapes are equal.
    pub(super) shape: Vec<(BufferId, usize, Vec<usize>)>,
}

/// The search results' coordinates ([`Searches::coordinates`]) for every access of buffer `b`
/// (`resolved`, as [`LoopFacts::resolve`] writes them), wherever it runs (`accesses`): `None`
/// unless every access reads its search results through the same shape.
pub(super) fn searched(
    facts: &LoopFacts,
    searches: &mut Searches,
    b: BufferId,
    resolved: &[Vec<Expr>],
    accesses: &[Guarded],
) -> Option<Vec<Found>> {
    let mut out: Vec<Found> = Vec::new();
    for idx in resolved {
        let mut this: Option<Found> = None;
        for g in accesses
            .iter()
            .filter(|g| g.buffer == b && g.indices == *idx)
        {
            let f = searches.coordinates(facts, idx, &g.guards)?;
            if this
                .as_ref()
                .is_some_and(|t| t.shape != f.shape || t.extra != f.extra)
            {
                return None;
            }
            this = Some(f);
        }
        let this = this?;
        if out.first().is_some_and(|first| first.shape != this.shape) {
            return None;
        }
        out.push(this);
    }
    Some(out)
}

/// Whether condition `g` says `m >= 0`.
fn at_least_zero(g: &Expr, m: &Expr) -> bool {
    match g {
        Expr::Binary(BinOp::Ge, a, b) => **a == *m && matches!(**b, Expr::Int(0, _)),
        Expr::Binary(BinOp::Gt, a, b) => **a == *m && matches!(**b, Expr::Int(-1, _)),
        Expr::Binary(BinOp::Le, a, b) => **b == *m && matches!(**a, Expr::Int(0, _)),
        Expr::Binary(BinOp::Lt, a, b) => **b == *m && matches!(**a, Expr::Int(-1, _)),
        _ => false,
    }
}

/// Whether `e` is `pattern` with each of `vars` standing for one expression (bound in `bound`).
fn unify(pattern: &Expr, e: &Expr, vars: &[VarId], bound: &mut HashMap<VarId, Expr>) -> bool {
    if let Expr::Var(v) = pattern {
        if vars.contains(v) {
            return match bound.get(v) {
                Some(b) => b == e,
                None => {
                    bound.insert(*v, e.clone());
                    true
                }
            };
        }
    }
    // The same node, children aside.
    let shell = |x: &Expr| {
        let mut x = x.clone();
        x.for_each_child_mut(|c| *c = Expr::Bool(false));
        x
    };
    if shell(pattern) != shell(e) {
        return false;
    }
    let (mut ps, mut es) = (Vec::new(), Vec::new());
    pattern.for_each_child(|c| ps.push(c.clone()));
    e.for_each_child(|c| es.push(c.clone()));
    ps.len() == es.len() && ps.iter().zip(&es).all(|(p, x)| unify(p, x, vars, bound))
}

/// How the function fills `m`: see the module documentation. `None` where any store does
/// not fit.
fn search_of(func: &PrimFunc, m: BufferId) -> Option<Search> {
    let mut written: Vec<BufferId> = Vec::new();
    func.body.visit(&mut |s| {
        if let Stmt::Store(st) = s {
            written.push(st.buffer);
        }
    });
    let mut found: Vec<Option<Search>> = Vec::new();
    let mut stray = false;
    visit_ifs(&func.body, None, &mut |s, outer, own| {
        let Stmt::Store(st) = s else { return };
        if st.buffer != m || matches!(st.value, Expr::Int(c, _) if c < 0) {
            return;
        }
        let Some(cond) = own else {
            stray = true;
            return;
        };
        found.push(search_at(func, st, cond, outer, &written));
    });
    if stray {
        return None;
    }
    match found.len() {
        1 => found.pop().flatten(),
        _ => None,
    }
}

/// `st` (`M[x'] = l`) directly under `if cond`, itself directly under `if outer` where any.
fn search_at(
    func: &PrimFunc,
    st: &sparsetir_ir::Store,
    cond: &Expr,
    outer: Option<&Expr>,
    written: &[BufferId],
) -> Option<Search> {
    let l = &st.value;
    let Expr::Binary(BinOp::Eq, a, b) = cond else {
        return None;
    };
    let holds_l = |x: &Expr| {
        let mut hit = false;
        x.visit(&mut |y| hit |= y == l);
        hit
    };
    let (read, coord) = if holds_l(a) {
        (&**a, &**b)
    } else {
        (&**b, &**a)
    };
    let Expr::Load { indices: at, .. } = read else {
        return None;
    };
    if holds_l(coord) || !at.iter().any(holds_l) {
        return None;
    }
    // What the coordinate and the read's position depend on stays what it was when the
    // search ran: the store's own variables and arrays the function never writes.
    let mut vars: Vec<VarId> = Vec::new();
    for i in &st.indices {
        for v in scope::vars_of(i) {
            if !vars.contains(&v) {
                vars.push(v);
            }
        }
    }
    let stable = |x: &Expr| {
        let x = replaced(x, l, &Expr::Int(0, sparsetir_ir::DType::I32)).0;
        let mut ok = true;
        x.visit(&mut |y| match y {
            Expr::Var(v) => ok &= vars.contains(v),
            Expr::Load { buffer, .. } => {
                ok &= func.buffers[*buffer].data_param().is_some() && !written.contains(buffer)
            }
            _ => {}
        });
        ok
    };
    if !stable(coord) || !at.iter().all(stable) || !stable(read) {
        return None;
    }
    // `l < P[a' + 1] - P[a']` around the comparison.
    let fiber = match outer {
        Some(Expr::Binary(BinOp::Lt, x, len)) if **x == *l => match &**len {
            Expr::Binary(BinOp::Sub, hi, lo) => match (&**hi, &**lo) {
                (
                    Expr::Load {
                        buffer: p,
                        indices: next,
                    },
                    Expr::Load {
                        buffer: p2,
                        indices: first,
                    },
                ) if p == p2
                    && func.buffers[*p].data_param().is_some()
                    && !written.contains(p)
                    && next.len() == 1
                    && first.len() == 1
                    && next[0] == Expr::add(first[0].clone(), Expr::int(1))
                    && stable(&first[0]) =>
                {
                    Some((*p, first[0].clone()))
                }
                _ => None,
            },
            _ => None,
        },
        _ => None,
    };
    Some(Search {
        slot: st.indices.clone(),
        vars,
        value: l.clone(),
        at: at.clone(),
        coord: coord.clone(),
        fiber,
    })
}

/// Calls `f` on every statement with the condition of the `if` whose then-branch it is
/// directly (`own`), and that of the `if` whose then-branch holds that `if` directly.
fn visit_ifs<'s>(
    s: &'s Stmt,
    own: Option<(&'s Expr, Option<&'s Expr>)>,
    f: &mut dyn FnMut(&'s Stmt, Option<&'s Expr>, Option<&'s Expr>),
) {
    f(s, own.and_then(|(_, o)| o), own.map(|(c, _)| c));
    match s {
        Stmt::If(i) => {
            visit_ifs(&i.then_case, Some((&i.cond, own.map(|(c, _)| c))), f);
            if let Some(e) = &i.else_case {
                visit_ifs(e, None, f);
            }
        }
        _ => {
            let mut ch = Vec::new();
            ir_util::push_children(s, &mut ch);
            for c in ch {
                visit_ifs(c, None, f);
            }
        }
    }
}
