//! Where `lower_sparse_iter` puts an iteration's init (ARCHITECTURE.md, "When init runs"): in
//! the block of the first reduction iterator (the RFC's stage II form) when that block's
//! reduction fibers cannot be empty, otherwise in a nest of its own over the block's spatial
//! iterators, right before the block's loops, so a reduction over no element still gives its
//! init.

use super::*;

/// Where an iteration's init goes in its nest.
#[derive(Clone, Copy, Debug)]
pub(super) enum InitAt {
    /// No init (or no reduction iterator).
    Nowhere,
    /// Into block `g`, the block of the first reduction iterator (the RFC's stage II form):
    /// its reduction fibers are fixed, so the block's init runs for every spatial point.
    InBlock(usize),
    /// Into a nest of its own right before the loops of block `g`, whose reduction fibers may
    /// be empty (a reduction over no element still gives its init).
    Before(usize),
}

impl Lowerer {
    /// Whether a reduction iterator of block `g` walks a fiber that may hold no element (a
    /// varied, fused or attached axis, or a fixed one whose extent is not a positive constant
    /// nor the extent of a spatial iterator around it): then the block's init would not run
    /// for some points of the spatial iterators.
    pub(super) fn may_be_empty(
        &self,
        steps: &[Step],
        groups: &[Vec<usize>],
        g: usize,
    ) -> Res<bool> {
        // Extents of the fixed spatial axes iterated up to this block: where a reduction's
        // fixed extent is one of them, an empty reduction leaves no point to initialise.
        let mut spatial_extents = Vec::new();
        for &k in groups[..=g].iter().flatten() {
            let s = &steps[k];
            if let (IterAxis::Axis(a), [IterKind::Spatial]) = (&s.entry, s.kinds.as_slice()) {
                if self.axis(*a)?.kind.is_fixed() {
                    spatial_extents.push(self.domain(*a)?);
                }
            }
        }
        for &k in &groups[g] {
            let s = &steps[k];
            if !s.kinds.contains(&IterKind::Reduce) {
                continue;
            }
            match &s.entry {
                IterAxis::Axis(a) => {
                    if self.axis(*a)?.kind.is_varied() {
                        return Ok(true);
                    }
                    let domain = self.domain(*a)?;
                    let extent = self.simp.simplify(&self.f, &domain);
                    let positive = matches!(extent, Expr::Int(v, _) if v >= 1);
                    if !positive && !spatial_extents.contains(&domain) {
                        return Ok(true);
                    }
                }
                IterAxis::Fuse(_) | IterAxis::Attach { .. } | IterAxis::CoIter { .. } => {
                    return Ok(true)
                }
            }
        }
        Ok(false)
    }

    /// The init of an iteration whose reduction fiber may be empty, as its own nest placed
    /// before the loops of block `g`: one loop (and one block `<name><g>_init`) per spatial
    /// iterator of that block, so the init runs once for every spatial point, whether or not
    /// the reduction has elements.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn init_nest(
        &mut self,
        name: &str,
        steps: &[Step],
        group: &[usize],
        unbound: &[usize],
        g: usize,
        ann: &Attrs,
        init: &Stmt,
    ) -> Res<Stmt> {
        // The spatial iterators must not walk fibers of the block's reduction iterators; a
        // fused chain whose leading axes are spatial contributes the fuse of those axes.
        let mut reduce_axes: Vec<AxisId> = Vec::new();
        let mut spatial: Vec<Step> = Vec::new();
        for &k in group {
            let s = &steps[k];
            let n_spatial = s
                .kinds
                .iter()
                .take_while(|k| **k == IterKind::Spatial)
                .count();
            let tail_reduce = s.kinds[n_spatial..].iter().all(|k| *k == IterKind::Reduce);
            let axes = s.entry.axes();
            let parent = match &s.entry {
                IterAxis::Attach { parent, .. } => Some(*parent),
                _ => match axes.first() {
                    Some(a) => self.axis(*a)?.parent,
                    None => None,
                },
            };
            let walks_reduction = n_spatial > 0 && parent.is_some_and(|p| reduce_axes.contains(&p));
            if !tail_reduce || walks_reduction {
                let v = s.vars.get(n_spatial).or(s.vars.first());
                let v = v.map(|v| self.f.vars[*v].name.clone());
                return Err(unsupported(
                    self.span,
                    format!(
                        "iteration `{name}`: the init cannot run once per spatial point, because \
                         iterator `{}` walks a fiber of a reduction iterator",
                        v.unwrap_or_default()
                    ),
                ));
            }
            reduce_axes.extend(axes.iter().skip(n_spatial).copied());
            if n_spatial == 0 {
                continue;
            }
            let entry = match &s.entry {
                IterAxis::Fuse(ch) if n_spatial == 1 => IterAxis::Axis(ch[0]),
                IterAxis::Fuse(ch) if n_spatial < ch.len() => {
                    IterAxis::Fuse(ch[..n_spatial].to_vec())
                }
                e => e.clone(),
            };
            spatial.push(Step {
                entry,
                vars: s.vars[..n_spatial].to_vec(),
                kinds: s.kinds[..n_spatial].to_vec(),
            });
        }
        let saved_pending = self.pending.clone();
        // Iterators of this block and the deeper ones are not bound around the init: using one
        // that is not one of its spatial points is an error.
        for v in unbound.iter().flat_map(|&k| &steps[k].vars) {
            self.pending.insert(*v);
        }
        let base = self.stack.len();
        let mut loops = Vec::new();
        let mut iters = Vec::new();
        for s in &spatial {
            self.entry_iter(s, &mut loops, &mut iters)?;
        }
        let body = self.stmt(init)?;
        self.stack.truncate(base);
        self.pending = saved_pending;
        let (reads, writes) = block_regions(&self.f, &self.simp, &self.hints, None, &body, &[]);
        let block = Stmt::Block(Box::new(Block {
            name: format!("{name}{g}_init"),
            iters,
            predicate: None,
            reads,
            writes,
            init: None,
            alloc_buffers: Vec::new(),
            annotations: ann.clone(),
            body,
            span: Span::default(),
        }));
        Ok(wrap_loops(loops, block))
    }

    /// Where the init goes, it runs per spatial point of its block, but not interleaved with
    /// the other points' reduction steps as in stage I: moved ahead of the block's loops, every
    /// point's init runs before any step; in the block (TIR's init), a point's init runs at
    /// its first step, after the steps of the points an outer reduction loop visited before.
    /// Both are stage I's order only when each point's init writes elements its own reduction
    /// updates and no other point's: every store of the init has the indices of a store of the
    /// body to the same buffer, and each spatial iterator `spatial` of the block is one of those
    /// indices. Anything else (`Y[i, j // 2] = 0` before `Y[i, j] = ...`) is refused rather
    /// than run in another order. Nor may the init read an iterator its block does not bind
    /// (`unbound`: its reductions, and the iterators iterated inside them): `C[i, f] = 0` where
    /// `f` comes after the reduction over `j` has no `f` to store at before that reduction.
    pub(super) fn check_init_targets(
        &self,
        name: &str,
        spatial: &[VarId],
        unbound: &[VarId],
        init: &Stmt,
        update: &Stmt,
    ) -> Res<()> {
        let late = unbound
            .iter()
            .find(|v| crate::remove_unused_args::stmt_mentions(init, **v));
        if let Some(&v) = late {
            return Err(unsupported(
                self.span,
                format!(
                    "iteration `{name}`: its init reads iterator `{}`, which is iterated inside \
                     the first reduction iterator: the init runs before that reduction, once \
                     per point of the iterators around it (iterate the spatial axes the init \
                     stores at before the reduction axes)",
                    self.f.vars[v].name
                ),
            ));
        }
        let stores = |s: &Stmt| {
            let mut out: Vec<(BufferId, Vec<Expr>, Span)> = Vec::new();
            s.visit(&mut |x| {
                if let Stmt::Store(st) = x {
                    out.push((st.buffer, st.indices.clone(), st.span));
                }
            });
            out
        };
        let updates = stores(update);
        for (buffer, indices, span) in stores(init) {
            let own = spatial.iter().all(|v| indices.contains(&Expr::Var(*v)));
            let updated = updates
                .iter()
                .any(|(b, ix, _)| *b == buffer && *ix == indices);
            if !own || !updated {
                let span = if span.is_unknown() { self.span } else { span };
                return Err(unsupported(
                    span,
                    format!(
                        "iteration `{name}`: its init writes an element of `{}` that is not the \
                         one its reduction updates at the same point (the init must store to \
                         the indices of the reduction's store{})",
                        self.f.buffers[buffer].name,
                        if own {
                            String::new()
                        } else {
                            format!(
                                ", which index by the spatial iterators {}",
                                spatial
                                    .iter()
                                    .map(|v| format!("`{}`", self.f.vars[*v].name))
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            )
                        }
                    ),
                ));
            }
        }
        Ok(())
    }
}
