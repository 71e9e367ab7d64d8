//! Accesses in position space: a stage-I expression's buffer reads become loads at positions —
//! coordinates of iterated axes map to their positions, other coordinates to searches (`mid_k`),
//! with the default value where a lookup finds nothing or (checked lowering) a coordinate lies
//! outside its dense axis.

use super::*;

/// What the guards gathered while building an access's positions say of it.
pub(super) enum Guard {
    /// Present wherever it is reached.
    Always,
    /// Through a part known absent (or a coordinate known outside its axis).
    Never,
    /// Present where the condition holds (union parts present, coordinates inside their axes).
    When(Expr),
}

impl Lowerer {
    /// Runs `f`, which builds positions, with guards of its own: its result and what they say.
    pub(super) fn guarded<T>(&mut self, f: impl FnOnce(&mut Self) -> Res<T>) -> Res<(T, Guard)> {
        let saved = std::mem::take(&mut self.guards);
        let r = f(self);
        let guards = std::mem::replace(&mut self.guards, saved);
        let guard = if guards.contains(&Expr::Bool(false)) {
            Guard::Never
        } else {
            match guards
                .into_iter()
                .reduce(|a, b| Expr::binary(BinOp::And, a, b))
            {
                None => Guard::Always,
                Some(g) => Guard::When(g),
            }
        };
        Ok((r?, guard))
    }

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
                let (idx, guard) = self.guarded(|l| l.access(*buffer, indices))?;
                let load = Expr::Load {
                    buffer: *buffer,
                    indices: idx,
                };
                let default = || {
                    let b = &self.f.buffers[*buffer];
                    b.default_value.clone().unwrap_or_else(|| zero(b.dtype))
                };
                match guard {
                    Guard::Always => load,
                    Guard::Never => default(),
                    Guard::When(g) => {
                        Expr::Select(Box::new(g), Box::new(load), Box::new(default()))
                    }
                }
            }
            Expr::Call { op, args, dtype } => {
                // The range intrinsics take elements as addresses (`D[C[w]]`: where a run
                // starts), not as values a default could stand for: their coordinates are not
                // guarded (the runs' ends are the kernel's to keep inside).
                let saved = self.addresses;
                self.addresses = matches!(
                    op,
                    Intrinsic::Compress64
                        | Intrinsic::CompressIota64
                        | Intrinsic::CopyRange
                        | Intrinsic::Mask64
                        | Intrinsic::SortRange
                );
                let args = args.iter().map(|a| self.expr(a)).collect::<Res<Vec<_>>>();
                self.addresses = saved;
                Expr::Call {
                    op: *op,
                    args: args?,
                    dtype: *dtype,
                }
            }
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
            BufferShape::Dense(dims) => {
                let dims = dims.clone();
                let mut idx = Vec::with_capacity(indices.len());
                for (k, i) in indices.iter().enumerate() {
                    let p = self.expr(i)?;
                    if let Some(d) = dims.get(k) {
                        if self.opts.check_invalid_binary_search
                            && !self.addresses
                            && !self.validated(i)
                        {
                            self.bound_guard(&p, d.clone());
                        }
                    }
                    idx.push(p);
                }
                idx
            }
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
                let p = self.expr(e)?;
                if self.opts.check_invalid_binary_search
                    && !self.addresses
                    && !self.validated_coordinate(x, e)
                {
                    let len = self.fiber_len(x, &anc)?;
                    self.bound_guard(&p, len);
                }
                pos.push(p);
            } else {
                let m = self.search(&axes[..=d], &exprs[..=d])?;
                pos.push(m);
            }
        }
        Ok(pos)
    }

    /// Whether the coordinate `e` of dense axis `x` is known to lie inside it before the launch:
    /// a `dense_fixed` axis indexed by an iterator's coordinate, or by a value of an integer
    /// array argument the function never writes, both of which the runtime's validation checks
    /// against the axis's length (`runtime::validate`).
    fn validated_coordinate(&self, x: AxisId, e: &Expr) -> bool {
        self.f.axes[x].kind == AxisKind::DenseFixed && self.validated(e)
    }

    /// Whether the runtime validates `e` against the extent it indexes (a `dense_fixed` axis or
    /// a dense buffer's dimension): an iterator's coordinate, or a value of an integer array
    /// argument the function never writes.
    fn validated(&self, e: &Expr) -> bool {
        match e {
            Expr::Var(v) => self.iter_vars.contains(v),
            // Validation checks the values the array stores; the load must read one of them,
            // or its default value 0: no default of its own, and indexed by iterators (a guard
            // of its own, or a search that may miss, would read the default instead).
            Expr::Load { buffer, indices } => {
                let b = &self.f.buffers[*buffer];
                matches!(b.decl, BufferDecl::Match { .. })
                    && b.dtype.is_integer()
                    && b.default_value.is_none()
                    && !self.written.contains(buffer)
                    && indices
                        .iter()
                        .all(|i| matches!(i, Expr::Var(v) if self.iter_vars.contains(v)))
            }
            _ => false,
        }
    }

    /// Guards the access being built by `0 <= p < len` (a coordinate `p` of a dense axis whose
    /// fiber holds `len` elements), unless it is proved: outside, a read gives the default value
    /// and a write is skipped, as in stage I.
    fn bound_guard(&mut self, p: &Expr, len: Expr) {
        let pr = self.size_prover();
        let pr = &pr;
        let dt = p.dtype(&self.f);
        let len = Expr::Cast(dt, Box::new(len));
        let zero = Expr::Cast(dt, Box::new(Expr::int(0)));
        let mut parts = Vec::new();
        if !dt.is_uint() && !self.nonnegative(pr, p) {
            parts.push(Expr::binary(BinOp::Le, zero, p.clone()));
        }
        if !self.below(pr, p, &len) {
            parts.push(Expr::binary(BinOp::Lt, p.clone(), len));
        }
        for part in parts {
            match pr.prove(&self.f, &part) {
                Some(true) => {}
                Some(false) => self.guards.push(Expr::Bool(false)),
                None => {
                    let g = self.simp.simplify(&self.f, &part);
                    self.guards.push(g);
                }
            }
        }
    }

    /// The simplifier with what the runtime checks of the size parameters: no axis length,
    /// `nnz` or `nnz_cols` that is a parameter is negative.
    fn size_prover(&self) -> Simplifier {
        let mut pr = self.simp.clone();
        for (_, ax) in self.f.axes.iter() {
            for e in [Some(&ax.length), ax.nnz.as_ref(), ax.nnz_cols.as_ref()]
                .into_iter()
                .flatten()
            {
                if let Expr::Var(v) = e {
                    pr.bind_nonnegative(*v);
                }
            }
        }
        pr
    }

    /// Whether `p >= 0` is proved: by the simplifier, or from the parts of `p` (`a // c` from
    /// `a >= 0` and `c >= 0`, `c` not 0 where the quotient is evaluated at all; `x % c` from
    /// `c >= 0`; sums, and products by a positive constant, of such).
    fn nonnegative(&self, pr: &Simplifier, p: &Expr) -> bool {
        let dt = p.dtype(&self.f);
        let zero = Expr::Cast(dt, Box::new(Expr::int(0)));
        let ge0 = |e: &Expr| {
            pr.prove(&self.f, &Expr::binary(BinOp::Le, zero.clone(), e.clone())) == Some(true)
        };
        if ge0(p) {
            return true;
        }
        let positive = |k: &Expr| matches!(k, Expr::Int(v, _) if *v > 0);
        match p {
            Expr::Binary(BinOp::FloorDiv, a, c) => {
                self.nonnegative(pr, a) && self.nonnegative(pr, c)
            }
            // Python's modulo has the divisor's sign.
            Expr::Binary(BinOp::FloorMod, _, c) => self.nonnegative(pr, c),
            Expr::Binary(BinOp::Add, a, b) => self.nonnegative(pr, a) && self.nonnegative(pr, b),
            Expr::Binary(BinOp::Mul, a, k) | Expr::Binary(BinOp::Mul, k, a) if positive(k) => {
                self.nonnegative(pr, a)
            }
            _ => false,
        }
    }

    /// Whether `p < len` is proved: by the simplifier; for `a // c` from `a < len * c` (`c >= 0`,
    /// not 0 where evaluated); or with every addend `x % c` (times a positive constant) of `p`
    /// at its largest value `c - 1`.
    fn below(&self, pr: &Simplifier, p: &Expr, len: &Expr) -> bool {
        let lt = |a: Expr, b: Expr| pr.prove(&self.f, &Expr::binary(BinOp::Lt, a, b)) == Some(true);
        if lt(p.clone(), len.clone()) {
            return true;
        }
        if let Expr::Binary(BinOp::FloorDiv, a, c) = p {
            if self.nonnegative(pr, c) && lt((**a).clone(), Expr::mul(len.clone(), (**c).clone())) {
                return true;
            }
        }
        let mut changed = false;
        let widened = self.widen_mods(pr, p, &mut changed);
        changed && lt(widened, len.clone())
    }

    /// `a` when `m` is `x % (a // k)` with `a >= 0` proved.
    fn mod_of_quotient_by(&self, pr: &Simplifier, m: &Expr, k: &Expr) -> Option<Expr> {
        let Expr::Binary(BinOp::FloorMod, _, c) = m else {
            return None;
        };
        let Expr::Binary(BinOp::FloorDiv, a, k2) = &**c else {
            return None;
        };
        (**k2 == *k && self.nonnegative(pr, a)).then(|| (**a).clone())
    }

    /// `p` with each addend `x % c` (alone or times a positive constant) replaced by `c - 1`, its
    /// largest value for `c >= 1` (`c >= 0` proved; not 0 where evaluated).
    fn widen_mods(&self, pr: &Simplifier, p: &Expr, changed: &mut bool) -> Expr {
        let positive = |k: &Expr| matches!(k, Expr::Int(v, _) if *v > 0);
        match p {
            Expr::Binary(BinOp::Add, a, b) => Expr::add(
                self.widen_mods(pr, a, changed),
                self.widen_mods(pr, b, changed),
            ),
            // `(x % (a // k)) * k` is at most `(a // k - 1) * k <= a - k`: the n:m layouts'
            // column `4 * (g % (n // 4)) + j`.
            Expr::Binary(BinOp::Mul, m, k) | Expr::Binary(BinOp::Mul, k, m)
                if positive(k) && self.mod_of_quotient_by(pr, m, k).is_some() =>
            {
                *changed = true;
                let a = self
                    .mod_of_quotient_by(pr, m, k)
                    .expect("checked by the guard");
                Expr::sub(a, (**k).clone())
            }
            Expr::Binary(BinOp::Mul, a, k) if positive(k) => {
                Expr::mul(self.widen_mods(pr, a, changed), (**k).clone())
            }
            Expr::Binary(BinOp::Mul, k, a) if positive(k) => {
                Expr::mul((**k).clone(), self.widen_mods(pr, a, changed))
            }
            Expr::Binary(BinOp::FloorMod, _, c) if self.nonnegative(pr, c) => {
                *changed = true;
                let dt = c.dtype(&self.f);
                Expr::sub((**c).clone(), Expr::Cast(dt, Box::new(Expr::int(1))))
            }
            _ => p.clone(),
        }
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
        let attached = |e: &IterAxis| match e {
            IterAxis::Attach { .. } => true,
            IterAxis::CoIter { parts, .. } => {
                parts.iter().any(|p| matches!(p, IterAxis::Attach { .. }))
            }
            _ => false,
        };
        if ctx.iter().any(|i| attached(&i.entry)) {
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
