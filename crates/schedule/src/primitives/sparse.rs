//! Stage-I primitives on sparse iterations: `get_sp_iters`, `sparse_reorder` (permute the axis
//! list; iterator variables and kinds follow their axes) and `sparse_fuse` (a consecutive
//! parent→child chain becomes one `T.sp.fuse` entry).

use sparsetir_ir::{AxisId, IterAxis, Stage};

use crate::error::{ErrorKind, Focus};
use crate::ir_util;
use crate::state::{AnyRV, Res, Schedule, SpIterRV};
use crate::trace::{Arg, Call, ReplayError};

impl Schedule {
    fn axis_name(&self, a: AxisId) -> String {
        self.func
            .axes
            .get(a)
            .map(|x| x.name.clone())
            .unwrap_or_else(|| format!("{a:?}"))
    }

    /// `sch.get_sp_iters(sp)`: the iteration's axis list, in order.
    pub fn get_sp_iters(&mut self, sp: SpIterRV) -> Res<Vec<IterAxis>> {
        self.require_stage("get_sp_iters", &[Stage::I])?;
        let axes = self.sp_iter(sp)?.axes.clone();
        self.record(
            "get_sp_iters",
            vec![Arg::Var(sp.trace_name())],
            vec![],
            vec![],
            false,
        );
        Ok(axes)
    }

    /// `sch.sparse_reorder(sp, ["I", "K", "J"])`: iterates the axes in a new order. The new
    /// order names every axis of the iteration exactly once (a fused group stays together, in
    /// its order); every axis comes after its parent; two iterations that touch one element,
    /// one of them writing it, keep their order (`DependencyViolation`).
    pub fn sparse_reorder<S: AsRef<str>>(&mut self, sp: SpIterRV, new_order: &[S]) -> Res<()> {
        self.require_stage("sparse_reorder", &[Stage::I])?;
        let name = self.sp_iter_name(sp)?;
        let it = self.sp_iter(sp)?.clone();
        let focus = || Focus::SparseIteration(name.clone());
        let flat: Vec<AxisId> = it.axes.iter().flat_map(|e| e.axes()).collect();
        let flat_names: Vec<String> = flat.iter().map(|a| self.axis_name(*a)).collect();
        let order: Vec<&str> = new_order.iter().map(|s| s.as_ref()).collect();
        // A permutation of the flattened axis names.
        let mut perm = Vec::new();
        for n in &order {
            match flat_names.iter().position(|x| x == n) {
                None => {
                    return Err(self.error(
                        ErrorKind::NotAPermutation,
                        format!(
                            "axis `{n}` is not iterated by `{name}` (axes: {})",
                            flat_names.join(", ")
                        ),
                        focus(),
                    ))
                }
                Some(p) if perm.contains(&p) => {
                    return Err(self.error(
                        ErrorKind::NotAPermutation,
                        format!("axis `{n}` is listed twice"),
                        focus(),
                    ))
                }
                Some(p) => perm.push(p),
            }
        }
        if perm.len() != flat.len() {
            let missing: Vec<&str> = flat_names
                .iter()
                .enumerate()
                .filter(|(i, _)| !perm.contains(i))
                .map(|(_, n)| n.as_str())
                .collect();
            return Err(self.error(
                ErrorKind::NotAPermutation,
                format!("the new order leaves out {}", missing.join(", ")),
                focus(),
            ));
        }
        // Entries in the new order; fused groups must stay consecutive and in order.
        let mut starts = Vec::new(); // flat index of each entry's first axis
        let mut acc = 0;
        for e in &it.axes {
            starts.push(acc);
            acc += e.arity();
        }
        let mut new_axes = Vec::new();
        let mut k = 0;
        while k < perm.len() {
            let Some(ei) = starts.iter().position(|s| *s == perm[k]) else {
                return Err(self.error(
                    ErrorKind::NotConsecutive,
                    format!(
                        "axis `{}` is inside a fused group and must follow the group's first axis",
                        flat_names[perm[k]]
                    ),
                    focus(),
                ));
            };
            let ar = it.axes[ei].arity();
            for j in 0..ar {
                if perm.get(k + j) != Some(&(perm[k] + j)) {
                    return Err(self.error(
                        ErrorKind::NotConsecutive,
                        format!(
                            "the fused axes {} must stay together and in order",
                            it.axes[ei]
                                .axes()
                                .iter()
                                .map(|a| self.axis_name(*a))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                        focus(),
                    ));
                }
            }
            new_axes.push(it.axes[ei].clone());
            k += ar;
        }
        // Parents before children.
        let new_flat: Vec<AxisId> = perm.iter().map(|p| flat[*p]).collect();
        for e in &new_axes {
            let parents: Vec<(AxisId, AxisId)> = match e {
                IterAxis::Axis(a) => self.func.axes[*a]
                    .parent
                    .map(|p| (*a, p))
                    .into_iter()
                    .collect(),
                IterAxis::Fuse(v) => v
                    .first()
                    .and_then(|a| self.func.axes[*a].parent.map(|p| (*a, p)))
                    .into_iter()
                    .collect(),
                IterAxis::Attach { axis, parent } => vec![(*axis, *parent)],
                IterAxis::CoIter { parts, .. } => parts
                    .iter()
                    .flat_map(|p| match p {
                        IterAxis::Attach { axis, parent } => Some((*axis, *parent)),
                        _ => p
                            .axes()
                            .first()
                            .and_then(|a| self.func.axes[*a].parent.map(|q| (*a, q))),
                    })
                    .collect(),
            };
            for (child, parent) in parents {
                let (Some(pc), Some(pp)) = (
                    new_flat.iter().position(|a| *a == child),
                    new_flat.iter().position(|a| *a == parent),
                ) else {
                    continue;
                };
                if pp > pc {
                    return Err(self.error(
                        ErrorKind::ParentAfterChild,
                        format!(
                            "axis `{}` would come before its parent `{}`",
                            self.axis_name(child),
                            self.axis_name(parent)
                        ),
                        focus(),
                    ));
                }
            }
        }
        let vars: Vec<_> = perm.iter().map(|p| it.vars[*p]).collect();
        let kinds: Vec<_> = perm.iter().map(|p| it.kinds[*p]).collect();
        // The new order keeps every dependence, checked on the iteration as a loop nest.
        let as_nest = |order: &[usize]| {
            let mut f = self.func.clone();
            let nest = crate::disjoint::iteration_as_loops(&mut f, &it, order);
            ir_util::replace(&mut f.body, &|s| ir_util::is_sp_iter(s, &name), |_| {
                (nest, ())
            });
            f
        };
        let before = as_nest(&(0..flat.len()).collect::<Vec<_>>());
        let after = as_nest(&perm);
        if let Some((a, b, c)) =
            crate::disjoint::reorder_conflict(&before, &after, &it.vars, &vars, &mut Vec::new())
        {
            let axis = |v| {
                let p = it.vars.iter().position(|w| *w == v).unwrap_or(0);
                flat_names[p].clone()
            };
            return Err(self.error(
                ErrorKind::DependencyViolation,
                format!(
                    "`sparse_reorder` would iterate axis `{}` outside axis `{}` and so change \
                     the order of iterations that may touch the same element of `{}`, one of \
                     them writing it (`{}`)",
                    axis(b),
                    axis(a),
                    self.func.buffers[c.buffer].name,
                    c.accesses.join("`, `")
                ),
                focus(),
            ));
        }
        self.transact("sparse_reorder", |f| {
            if let Some(x) = ir_util::find_sp_iter_mut(&mut f.body, &name) {
                x.axes = new_axes;
                x.vars = vars;
                x.kinds = kinds;
            }
            Ok(())
        })?;
        self.record(
            "sparse_reorder",
            vec![
                Arg::Var(sp.trace_name()),
                Arg::List(order.iter().map(|s| Arg::Str(s.to_string())).collect()),
            ],
            vec![],
            vec![],
            false,
        );
        Ok(())
    }

    /// `sch.sparse_fuse(sp, ["I", "J"])`: replaces consecutive plain entries forming a
    /// parent→child chain (each axis the parent of the next) by one `T.sp.fuse(...)` entry,
    /// iterated as a single loop over the last axis's stored elements. The fused iterators must
    /// all be spatial or all reductions.
    pub fn sparse_fuse<S: AsRef<str>>(&mut self, sp: SpIterRV, iters: &[S]) -> Res<()> {
        self.require_stage("sparse_fuse", &[Stage::I])?;
        let name = self.sp_iter_name(sp)?;
        let it = self.sp_iter(sp)?.clone();
        let focus = || Focus::SparseIteration(name.clone());
        let names: Vec<&str> = iters.iter().map(|s| s.as_ref()).collect();
        if names.len() < 2 {
            return Err(self.error(
                ErrorKind::InvalidArgument,
                "sparse_fuse needs at least two axes",
                focus(),
            ));
        }
        // Entry index of each named axis (plain entries only).
        let mut idx = Vec::new();
        for n in &names {
            let found = it.axes.iter().position(|e| match e {
                IterAxis::Axis(a) => self.axis_name(*a) == *n,
                _ => false,
            });
            match found {
                Some(i) if idx.contains(&i) => {
                    return Err(self.error(
                        ErrorKind::InvalidArgument,
                        format!("axis `{n}` is listed twice"),
                        focus(),
                    ))
                }
                Some(i) => idx.push(i),
                None => {
                    let inside = it
                        .axes
                        .iter()
                        .any(|e| e.axes().iter().any(|a| self.axis_name(*a) == *n));
                    let msg = if inside {
                        format!("axis `{n}` is already fused or attached")
                    } else {
                        format!("axis `{n}` is not iterated by `{name}`")
                    };
                    let kind = if inside {
                        ErrorKind::Unsupported
                    } else {
                        ErrorKind::NotFound
                    };
                    return Err(self.error(kind, msg, focus()));
                }
            }
        }
        if idx.windows(2).any(|w| w[1] != w[0] + 1) {
            return Err(self.error(
                ErrorKind::NotConsecutive,
                format!(
                    "axes {} are not consecutive entries of the iteration, in this order",
                    names.join(", ")
                ),
                focus(),
            ));
        }
        let axes: Vec<AxisId> = idx.iter().map(|i| it.axes[*i].axes()[0]).collect();
        for w in axes.windows(2) {
            if self.func.axes[w[1]].parent != Some(w[0]) {
                return Err(self.error(
                    ErrorKind::NotConsecutive,
                    format!(
                        "axis `{}` is not the parent of `{}`: only a parent→child chain can be \
                         fused",
                        self.axis_name(w[0]),
                        self.axis_name(w[1])
                    ),
                    focus(),
                ));
            }
        }
        // Flattened positions equal entry positions up to the first fused/attached entry; compute
        // them properly.
        let mut flat_pos = Vec::new();
        let mut acc = 0;
        for e in &it.axes {
            flat_pos.push(acc);
            acc += e.arity();
        }
        let kinds: Vec<_> = idx.iter().map(|i| it.kinds[flat_pos[*i]]).collect();
        if kinds.windows(2).any(|w| w[0] != w[1]) {
            return Err(self.error(
                ErrorKind::Unsupported,
                "fusing spatial with reduction iterators is not supported",
                focus(),
            ));
        }
        let first = idx[0];
        let last = idx[idx.len() - 1];
        let mut new_axes = it.axes[..first].to_vec();
        new_axes.push(IterAxis::Fuse(axes));
        new_axes.extend(it.axes[last + 1..].iter().cloned());
        self.transact("sparse_fuse", |f| {
            if let Some(x) = ir_util::find_sp_iter_mut(&mut f.body, &name) {
                x.axes = new_axes;
            }
            Ok(())
        })?;
        self.record(
            "sparse_fuse",
            vec![
                Arg::Var(sp.trace_name()),
                Arg::List(names.iter().map(|s| Arg::Str(s.to_string())).collect()),
            ],
            vec![],
            vec![],
            false,
        );
        Ok(())
    }
}

pub(crate) fn replay(sch: &mut Schedule, call: &Call) -> Result<Option<Vec<AnyRV>>, ReplayError> {
    match call.name() {
        "get_sp_iters" => {
            sch.get_sp_iters(call.sp_iter(0, "sp_iteration")?)?;
        }
        "sparse_reorder" => {
            let sp = call.sp_iter(0, "sp_iteration")?;
            sch.sparse_reorder(sp, &call.strs(1, "new_order")?)?;
        }
        "sparse_fuse" => {
            let sp = call.sp_iter(0, "sp_iteration")?;
            sch.sparse_fuse(sp, &call.strs(1, "iters_to_fuse")?)?;
        }
        _ => return Ok(None),
    }
    Ok(Some(vec![]))
}
