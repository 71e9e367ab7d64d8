//! Accesses in position space: a stage-I expression's buffer reads become loads at positions —
//! coordinates of iterated axes map to their positions, other coordinates to searches (`mid_k`),
//! with the default value where a lookup finds nothing.

use super::*;

impl Lowerer {
    /// A stage-I expression in position space (reads of assembled outputs through the
    /// assembly, other reads through [`Lowerer::access`]).
    pub(super) fn expr(&mut self, e: &Expr) -> Res<Expr> {
        Ok(match e {
            Expr::Int(..) | Expr::Float(..) | Expr::Bool(_) => e.clone(),
            Expr::Var(v) => {
                if let Some(info) = self.find(*v).cloned() {
                    self.coord(&info)?
                } else if self.pending.contains(v) {
                    return Err(unsupported(
                        self.span,
                        format!(
                            "iterator `{}` is used before its block (e.g. in an init placed in an \
                             outer block)",
                            self.f.vars[*v].name
                        ),
                    ));
                } else {
                    e.clone()
                }
            }
            Expr::Binary(op, a, b) => Expr::binary(*op, self.expr(a)?, self.expr(b)?),
            Expr::Unary(op, a) => Expr::Unary(*op, Box::new(self.expr(a)?)),
            Expr::Select(c, a, b) => Expr::Select(
                Box::new(self.expr(c)?),
                Box::new(self.expr(a)?),
                Box::new(self.expr(b)?),
            ),
            Expr::Cast(d, a) => Expr::Cast(*d, Box::new(self.expr(a)?)),
            Expr::Load { buffer, indices } => {
                if self.is_assembled(*buffer) {
                    return self.asm_load(*buffer, indices);
                }
                let saved = std::mem::take(&mut self.guards);
                let idx = self.access(*buffer, indices);
                let guards = std::mem::replace(&mut self.guards, saved);
                let load = Expr::Load {
                    buffer: *buffer,
                    indices: idx?,
                };
                let absent = guards.contains(&Expr::Bool(false));
                match guards
                    .into_iter()
                    .reduce(|a, b| Expr::binary(BinOp::And, a, b))
                {
                    None => load,
                    Some(g) => {
                        let dt = self.f.buffers[*buffer].dtype;
                        let default = self.f.buffers[*buffer]
                            .default_value
                            .clone()
                            .unwrap_or_else(|| zero(dt));
                        if absent {
                            // Through a part known absent: the default value.
                            default
                        } else {
                            Expr::Select(Box::new(g), Box::new(load), Box::new(default))
                        }
                    }
                }
            }
            Expr::Call { op, args, dtype } => Expr::Call {
                op: *op,
                args: args.iter().map(|a| self.expr(a)).collect::<Res<Vec<_>>>()?,
                dtype: *dtype,
            },
            Expr::Let { var, value, body } => Expr::Let {
                var: *var,
                value: Box::new(self.expr(value)?),
                body: Box::new(self.expr(body)?),
            },
        })
    }

    /// Coordinates → positions for an access of `buffer`.
    pub(super) fn access(&mut self, buffer: BufferId, indices: &[Expr]) -> Res<Vec<Expr>> {
        let buf = self.f.buffers.get(buffer).ok_or_else(|| {
            invalid(
                self.span,
                format!("buffer handle #{} is out of range", buffer.index()),
            )
        })?;
        let idx = match &buf.shape {
            BufferShape::Dense(_) => indices
                .iter()
                .map(|i| self.expr(i))
                .collect::<Res<Vec<_>>>()?,
            BufferShape::Sparse(axes) => {
                if axes.len() != indices.len() {
                    return Err(invalid(
                        self.span,
                        format!(
                            "buffer `{}` accessed with {} indices",
                            buf.name,
                            indices.len()
                        ),
                    ));
                }
                let axes = axes.clone();
                self.positions(&axes, indices)?
            }
        };
        Ok(idx
            .iter()
            .map(|i| self.simp.simplify_if_smaller(&self.f, i))
            .collect())
    }

    /// Positions of the coordinates `exprs` along the leading `axes` of a sparse buffer.
    pub(super) fn positions(&mut self, axes: &[AxisId], exprs: &[Expr]) -> Res<Vec<Expr>> {
        let mut pos: Vec<Expr> = Vec::with_capacity(exprs.len());
        for (d, e) in exprs.iter().enumerate() {
            let x = axes[d];
            let anc_axes = if self.axis(x)?.kind == AxisKind::DenseFixed {
                Vec::new()
            } else {
                self.ancestors(x)
            };
            let anc = self.anc_positions(axes, &pos, &anc_axes)?;
            if let Expr::Var(v) = e {
                let hit = self
                    .stack
                    .iter()
                    .rev()
                    .find(|i| i.var == *v && i.axis == x && i.anc == anc)
                    .map(|i| (i.pos.clone(), i.valid.clone()));
                if let Some((p, valid)) = hit {
                    pos.push(p);
                    // A part known present needs no guard.
                    self.guards.extend(valid.filter(|g| *g != Expr::Bool(true)));
                    continue;
                }
            }
            if self.axis(x)?.kind.is_dense() {
                pos.push(self.expr(e)?);
            } else {
                let m = self.search(&axes[..=d], &exprs[..=d])?;
                pos.push(m);
            }
        }
        Ok(pos)
    }

    pub(super) fn anc_positions(
        &self,
        axes: &[AxisId],
        pos: &[Expr],
        anc_axes: &[AxisId],
    ) -> Res<Vec<Expr>> {
        anc_axes
            .iter()
            .map(|a| {
                axes.iter()
                    .position(|x| x == a)
                    .and_then(|i| pos.get(i).cloned())
                    .ok_or_else(|| {
                        invalid(
                            self.span,
                            format!(
                                "axis `{}` is not an earlier dimension of the buffer",
                                self.f.axes[*a].name
                            ),
                        )
                    })
            })
            .collect()
    }

    /// A lookup of coordinate `exprs[last]` in compressed axis `axes[last]`: emits (once) the
    /// search nest and returns the load of its result.
    pub(super) fn search(&mut self, axes: &[AxisId], exprs: &[Expr]) -> Res<Expr> {
        // The iterators the search depends on: a prefix of the scope, up to whole entries.
        let mut last = None;
        for e in exprs {
            e.visit(&mut |x| {
                if let Expr::Var(v) = x {
                    if let Some(k) = self.stack.iter().rposition(|i| i.var == *v) {
                        last = Some(last.map_or(k, |l: usize| l.max(k)));
                    }
                }
            });
        }
        let Some(mut end) = last.map(|k| k + 1) else {
            return Err(unsupported(
                self.span,
                "a coordinate lookup in a compressed axis that depends on no iterator",
            ));
        };
        while end < self.stack.len() && !self.stack[end].entry_start {
            end += 1;
        }
        let ctx: Vec<IterInfo> = self.stack[..end].to_vec();
        let key = SearchKey::Coord {
            axes: axes.to_vec(),
            exprs: exprs.to_vec(),
            ctx: ctx.iter().map(|i| i.var).collect(),
        };
        let target: Vec<Expr> = ctx.iter().map(|i| i.pos.clone()).collect();
        if let Some((_, b)) = self.searches.iter().find(|(k, _)| *k == key) {
            return Ok(Expr::load(*b, target));
        }
        if ctx
            .iter()
            .any(|i| matches!(i.entry, IterAxis::Attach { .. }))
        {
            return Err(unsupported(
                self.span,
                "a coordinate lookup inside an attached iteration",
            ));
        }
        let x = *axes
            .last()
            .ok_or_else(|| invalid(self.span, "empty access"))?;
        let dtype = self.axis(x)?.idtype;
        let k = self.mids.len();
        let mid = self.mid_buffer(
            k,
            BufferShape::Sparse(ctx.iter().map(|i| i.axis).collect()),
            dtype,
        );
        self.searches.push((key, mid));
        // The nest: the context's entries, all spatial, in a fresh scope.
        let mut steps = Vec::new();
        for i in ctx.iter().filter(|i| i.entry_start) {
            steps.push(Step {
                entry: i.entry.clone(),
                vars: i.entry_vars.clone(),
                kinds: vec![IterKind::Spatial; i.entry_vars.len()],
            });
        }
        let saved = std::mem::take(&mut self.stack);
        let mut ann = Attrs::new();
        ann.set("preprocess", AttrValue::Bool(true));
        let r = self.nest(
            &format!("binary_search_block_{k}_"),
            &steps,
            &ann,
            NestBody::Search {
                axes: axes.to_vec(),
                exprs: exprs.to_vec(),
                mid,
            },
        );
        self.stack = saved;
        self.nests.push(r?);
        Ok(Expr::load(mid, target))
    }
}
