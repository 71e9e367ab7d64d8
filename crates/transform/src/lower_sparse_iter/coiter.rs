//! Co-iteration in `lower_sparse_iter` (issue 15).
//!
//! - **Merge loops.** A `T.sp.union`/`T.sp.intersect` entry walks one position per part
//!   (block-local `int` buffers `p_<axis>`). Two parts take TACO's merge lattice: while both
//!   have entries, one three-way branch on their coordinates runs the body specialised to the
//!   parts present (reads through an absent part fold to its default, stores through it vanish)
//!   and advances them; a union then runs each part's remaining entries alone. More parts take
//!   one `while` loop: each step reads every part's coordinate (the axis length once a part is
//!   exhausted), takes their minimum `c`, runs the body at `c` (union: always; intersection:
//!   only where every part stands at `c`, with selects guarding the reads) and advances the
//!   parts standing at `c`. No binary search is involved.

use sparsetir_ir::{
    AxisId, BinOp, BufferId, Expr, IfThenElse, IterAxis, LetStmt, Span, Stmt, VarId, While,
};

use super::assembly::{at0, set0, typed, when};
use super::{invalid, unsupported, IterInfo, Lowerer, Res, Step};
use crate::search::local_buffer;

/// One part of a co-iteration: the axis walked, its fiber, and the local position in it.
struct Part {
    axis: AxisId,
    anc: Vec<Expr>,
    len: Expr,
    ptr: BufferId,
    cvar: VarId,
    length: Expr,
}

impl Lowerer {
    /// The merge loop of a co-iteration entry; `inner` builds what runs at each coordinate.
    pub(super) fn coiter_loop(
        &mut self,
        s: &Step,
        inner: &mut dyn FnMut(&mut Lowerer) -> Res<Stmt>,
    ) -> Res<Stmt> {
        let IterAxis::CoIter { op, parts } = &s.entry else {
            return Err(invalid(self.span, "coiter_loop on a plain entry"));
        };
        let union = *op == sparsetir_ir::CoOp::Union;
        let var = s.vars[0];
        let vname = self.f.vars[var].name.clone();
        let dtype = self.f.vars[var].dtype;
        let mut ps = Vec::new();
        for p in parts {
            let (axis, anc) = match p {
                IterAxis::Axis(a) => (*a, self.iter_ancestors(*a)?),
                IterAxis::Attach { axis, parent } => {
                    let Some(pi) = self.stack.iter().rev().find(|i| i.axis == *parent).cloned()
                    else {
                        return Err(invalid(
                            self.span,
                            "T.sp.attach: the new parent is not iterated",
                        ));
                    };
                    (*axis, vec![self.coord(&pi)?])
                }
                _ => {
                    return Err(unsupported(
                        self.span,
                        format!("T.sp.{}: parts must be axes or T.sp.attach(...)", op.name()),
                    ))
                }
            };
            let ax = self.axis(axis)?.clone();
            if !ax.kind.is_compressed() || !ax.kind.is_varied() || !ax.sorted {
                return Err(unsupported(
                    self.span,
                    format!(
                        "T.sp.{} over `{}`: merge loops walk sorted compressed_varied axes",
                        op.name(),
                        ax.name
                    ),
                ));
            }
            let len = self.fiber_len(axis, &anc)?;
            let ptr = local_buffer(
                &mut self.f,
                &format!("p_{}", ax.name),
                Expr::int(1),
                ax.idtype,
            );
            let cvar = self.f.add_var(format!("{vname}_{}", ax.name), dtype);
            ps.push(Part {
                axis,
                anc,
                len,
                ptr,
                cvar,
                length: ax.length.clone(),
            });
        }
        let mut start = Vec::new();
        let mut conds = Vec::new();
        for p in &ps {
            start.push(set0(p.ptr, typed(0, self.f.buffers[p.ptr].dtype)));
            conds.push(Expr::binary(BinOp::Lt, at0(p.ptr), p.len.clone()));
        }
        if ps.len() == 2 {
            self.pending_allocs.extend(ps.iter().map(|p| p.ptr));
            start.extend(self.merge_lattice2(s, &ps, union, inner)?);
            return Ok(Stmt::seq(start));
        }
        let c = self.f.add_var(vname.clone(), dtype);
        let join = if union { BinOp::Or } else { BinOp::And };
        let cond = conds
            .iter()
            .cloned()
            .reduce(|a, b| Expr::binary(join, a, b))
            .unwrap_or(Expr::Bool(false));
        // The body at coordinate `c`.
        let valid: Vec<Option<Expr>> = ps
            .iter()
            .map(|p| union.then(|| Expr::binary(BinOp::Eq, Expr::var(p.cvar), Expr::var(c))))
            .collect();
        let body = self.at_coord(s, &ps, &Expr::var(c), &valid, inner)?;
        let all_here = ps
            .iter()
            .map(|p| Expr::binary(BinOp::Eq, Expr::var(p.cvar), Expr::var(c)))
            .reduce(|a, b| Expr::binary(BinOp::And, a, b))
            .unwrap_or(Expr::Bool(true));
        let body = if union { body } else { when(all_here, body) };
        let mut step = vec![body];
        for p in &ps {
            // A branch, not a select: which parts advance is predictable on most structures
            // (every part, on a symmetric A + Aᵀ), and a select would chain every step's load
            // of the next coordinate to the previous comparison (measured 2-3x slower merges).
            step.push(when(
                Expr::binary(BinOp::Eq, Expr::var(p.cvar), Expr::var(c)),
                self.advance(p),
            ));
        }
        let min = ps
            .iter()
            .map(|p| Expr::var(p.cvar))
            .reduce(|a, b| Expr::binary(BinOp::Min, a, b))
            .unwrap_or(Expr::int(0));
        let mut body = Stmt::Let(Box::new(LetStmt {
            var: c,
            value: min,
            body: Stmt::seq(step),
            span: Span::default(),
        }));
        for p in ps.iter().rev() {
            let load = self.part_coord(p)?;
            let value = if union {
                Expr::Select(
                    Box::new(Expr::binary(BinOp::Lt, at0(p.ptr), p.len.clone())),
                    Box::new(load),
                    Box::new(p.length.clone()),
                )
            } else {
                load
            };
            body = Stmt::Let(Box::new(LetStmt {
                var: p.cvar,
                value,
                body,
                span: Span::default(),
            }));
        }
        self.pending_allocs.extend(ps.iter().map(|p| p.ptr));
        start.push(Stmt::While(Box::new(While {
            cond,
            body,
            span: Span::default(),
        })));
        Ok(Stmt::seq(start))
    }

    /// The merge of two parts as TACO's lattice for two operands: while both fibers have
    /// entries, one three-way branch on the two coordinates (both equal, the first below, the
    /// second below) runs the body specialised to the parts present there; a union then runs
    /// each part's remaining entries alone. No select per step and no load past a fiber's end.
    fn merge_lattice2(
        &mut self,
        s: &Step,
        ps: &[Part],
        union: bool,
        inner: &mut dyn FnMut(&mut Lowerer) -> Res<Stmt>,
    ) -> Res<Vec<Stmt>> {
        let dtype = self.f.vars[s.vars[0]].dtype;
        let vname = self.f.vars[s.vars[0]].name.clone();
        let alive = |p: &Part| Expr::binary(BinOp::Lt, at0(p.ptr), p.len.clone());
        let coord = |me: &mut Lowerer, p: &Part| -> Res<(VarId, Expr)> {
            let v =
                me.f.add_var(format!("{vname}_{}", me.f.axes[p.axis].name), dtype);
            Ok((v, me.part_coord(p)?))
        };
        let bind = |v: VarId, value: Expr, body: Stmt| {
            Stmt::Let(Box::new(LetStmt {
                var: v,
                value,
                body,
                span: Span::default(),
            }))
        };
        let (ca, la) = coord(self, &ps[0])?;
        let (cb, lb) = coord(self, &ps[1])?;
        let both = self.merge_case(s, ps, [true, true], Expr::var(ca), inner)?;
        let (only_a, only_b) = if union {
            (
                self.merge_case(s, ps, [true, false], Expr::var(ca), inner)?,
                self.merge_case(s, ps, [false, true], Expr::var(cb), inner)?,
            )
        } else {
            (self.advance(&ps[0]), self.advance(&ps[1]))
        };
        let branch = Stmt::If(Box::new(IfThenElse {
            cond: Expr::binary(BinOp::Eq, Expr::var(ca), Expr::var(cb)),
            then_case: both,
            else_case: Some(Stmt::If(Box::new(IfThenElse {
                cond: Expr::binary(BinOp::Lt, Expr::var(ca), Expr::var(cb)),
                then_case: only_a,
                else_case: Some(only_b),
                span: Span::default(),
            }))),
            span: Span::default(),
        }));
        let mut out = vec![Stmt::While(Box::new(While {
            cond: Expr::binary(BinOp::And, alive(&ps[0]), alive(&ps[1])),
            body: bind(ca, la, bind(cb, lb, branch)),
            span: Span::default(),
        }))];
        if union {
            for (k, present) in [(0, [true, false]), (1, [false, true])] {
                let (cv, load) = coord(self, &ps[k])?;
                let body = self.merge_case(s, ps, present, Expr::var(cv), inner)?;
                out.push(Stmt::While(Box::new(While {
                    cond: alive(&ps[k]),
                    body: bind(cv, load, body),
                    span: Span::default(),
                })));
            }
        }
        Ok(out)
    }

    /// The coordinate stored at `p`'s current position.
    fn part_coord(&self, p: &Part) -> Res<Expr> {
        let ind = self.indices_buf(p.axis)?;
        let mut idx = p.anc.clone();
        idx.push(at0(p.ptr));
        Ok(Expr::load(ind, idx))
    }

    /// Runs `inner` with every part of co-iteration `s` in scope at coordinate `coord`, part
    /// `k`'s reads guarded by `valid[k]` (none: always stored there).
    fn at_coord(
        &mut self,
        s: &Step,
        ps: &[Part],
        coord: &Expr,
        valid: &[Option<Expr>],
        inner: &mut dyn FnMut(&mut Lowerer) -> Res<Stmt>,
    ) -> Res<Stmt> {
        let var = s.vars[0];
        let base = self.stack.len();
        for (k, p) in ps.iter().enumerate() {
            self.pending.remove(&var);
            self.stack.push(IterInfo {
                axis: p.axis,
                var,
                pos: at0(p.ptr),
                anc: p.anc.clone(),
                entry: s.entry.clone(),
                entry_vars: s.vars.clone(),
                entry_start: k == 0,
                coord: Some(coord.clone()),
                valid: valid[k].clone(),
            });
        }
        let body = inner(self);
        self.stack.truncate(base);
        body
    }

    /// `p`'s position moves to its next entry.
    fn advance(&self, p: &Part) -> Stmt {
        let pd = self.f.buffers[p.ptr].dtype;
        set0(p.ptr, Expr::add(at0(p.ptr), typed(1, pd)))
    }

    /// The body at coordinate `coord` where exactly the parts marked `present` store it, then
    /// those parts advance. Reads through an absent part give its default value.
    fn merge_case(
        &mut self,
        s: &Step,
        ps: &[Part],
        present: [bool; 2],
        coord: Expr,
        inner: &mut dyn FnMut(&mut Lowerer) -> Res<Stmt>,
    ) -> Res<Stmt> {
        let valid = present.map(|x| Some(Expr::Bool(x)));
        let mut v = vec![self.at_coord(s, ps, &coord, &valid, inner)?];
        for (k, p) in ps.iter().enumerate() {
            if present[k] {
                v.push(self.advance(p));
            }
        }
        Ok(Stmt::seq(v))
    }
}
