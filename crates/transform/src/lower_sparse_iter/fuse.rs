//! Fused iterations (`T.sp.fuse`) in `lower_sparse_iter`: the loop over the last axis's global
//! positions under the first axis's parent, and the once-per-chain row searches (`mid_k`) that
//! give the positions of the ancestor levels (see the parent module's "Fused loops").

use super::*;

impl Lowerer {
    /// A fused entry `T.sp.fuse(a0, ..., an)`: one loop over the stored elements of `an` under
    /// the current element of `a0`'s parent (all of them when `a0` is a root); the positions of
    /// `a0 .. a(n-1)` come from the row searches of [`Lowerer::fused_search`].
    pub(super) fn fused_iter(
        &mut self,
        chain: &[AxisId],
        s: &Step,
        loops: &mut Vec<(VarId, Expr, Expr)>,
        iters: &mut Vec<BlockIter>,
    ) -> Res<()> {
        let names: Vec<String> = chain
            .iter()
            .map(|a| self.axis(*a).map(|x| x.name.clone()))
            .collect::<Res<_>>()?;
        let shown = names.join(", ");
        let (Some(&first), Some(&last)) = (chain.first(), chain.last()) else {
            return Err(invalid(self.span, "empty T.sp.fuse"));
        };
        if chain.len() < 2 {
            return Err(unsupported(
                self.span,
                format!("T.sp.fuse({shown}) of a single axis"),
            ));
        }
        for w in chain.windows(2) {
            let child = self.axis(w[1])?;
            if child.parent != Some(w[0]) {
                return Err(invalid(
                    self.span,
                    format!("T.sp.fuse({shown}): the axes do not form a parent→child chain"),
                ));
            }
            if !child.kind.is_varied() {
                return Err(unsupported(
                    self.span,
                    format!(
                        "T.sp.fuse({shown}): `{}` is fixed; only varied axes follow the first",
                        child.name
                    ),
                ));
            }
        }
        // The full chain from the root: the searches run over it.
        let mut full = self.ancestors(first);
        let off = full.len();
        full.extend_from_slice(chain);
        let root = self.axis(full[0])?;
        let root_ok = root.kind == AxisKind::DenseFixed && root.parent.is_none();
        let mut chain_ok = root_ok;
        for &a in &full[1..] {
            chain_ok &= self.axis(a)?.kind.is_varied();
        }
        if !chain_ok || full.len() > 3 {
            return Err(unsupported(
                self.span,
                format!(
                    "T.sp.fuse({shown}): supported when the axes and their ancestors form a \
                     dense_fixed root followed by at most two varied axes"
                ),
            ));
        }
        let nnz = self.axis(last)?.nnz.clone().ok_or_else(|| {
            unsupported(
                self.span,
                format!(
                    "T.sp.fuse({shown}): axis `{}` declares no nnz",
                    names[chain.len() - 1]
                ),
            )
        })?;
        let anc = self.iter_ancestors(first)?;
        let mids = self.fused_search(&full, &nnz)?;
        let last_indptr = self.indptr_buf(last)?;
        let dtype = self.axis(last)?.idtype;
        let var_names: Vec<String> = s
            .vars
            .iter()
            .map(|v| self.f.vars[*v].name.clone())
            .collect();
        let p = self.f.add_var(var_names.join("_"), dtype);
        // The loop runs over the global positions of `last` under the current element of
        // `first`'s parent (all of them for a root); every binding reads the row searches.
        let (min, extent) = if off == 0 {
            (Expr::int(0), nnz.clone())
        } else {
            let len = self.fiber_len(first, &anc)?;
            let mut lo = anc.clone();
            lo.push(Expr::int(0));
            let mut hi = anc.clone();
            hi.push(len);
            let base = Expr::load(last_indptr, lo);
            let ext = Expr::sub(Expr::load(last_indptr, hi), base.clone());
            (base, self.simp.simplify(&self.f, &ext))
        };
        let (min, extent) = (
            as_dtype(&self.f, min, dtype),
            as_dtype(&self.f, extent, dtype),
        );
        self.simp.bind_range(p, &min, &extent);
        loops.push((p, min, extent));
        let g = Expr::var(p);
        let levels: Vec<Expr> = mids
            .iter()
            .map(|m| Expr::load(*m, vec![g.clone()]))
            .collect();
        let mut bound = Vec::new();
        for (k, &a) in chain.iter().enumerate() {
            let binding = if k + 1 < chain.len() {
                levels[off + k].clone()
            } else {
                let start = Expr::load(last_indptr, levels.clone());
                self.simp.sub(&self.f, g.clone(), start)
            };
            let vdtype = self.f.vars[s.vars[k]].dtype;
            let v = self.f.add_var(format!("v{}", var_names[k]), vdtype);
            let domain = as_dtype(&self.f, self.domain(a)?, vdtype);
            self.simp.bind_range(v, &Expr::int(0), &domain);
            iters.push(BlockIter {
                var: v,
                min: Expr::int(0),
                extent: domain,
                kind: s.kinds[k],
                binding,
            });
            bound.push(v);
        }
        let mut pos_anc = anc;
        for (k, &a) in chain.iter().enumerate() {
            self.push(a, s, k, Expr::var(bound[k]), pos_anc.clone());
            pos_anc.push(Expr::var(bound[k]));
        }
        Ok(())
    }

    /// The row searches of a fused chain `full` (a `dense_fixed` root, then at most two varied
    /// axes), emitted once per chain: for every global position `vp` of the last axis,
    /// `mid_l[vp]` is the position of the level-`l` ancestor (`l < full.len() - 1`) inside its
    /// parent's fiber, found by an upper-bound search (minus one) over the start offsets of the
    /// level's elements, read from the last axis's `indptr` (trailing index 0, which is valid
    /// even under an empty fiber because `indptr` has extra storage).
    fn fused_search(&mut self, full: &[AxisId], nnz: &Expr) -> Res<Vec<BufferId>> {
        if let Some((_, b)) = self.fused.iter().find(|(k, _)| k == full) {
            return Ok(b.clone());
        }
        let last = full[full.len() - 1];
        let dtype = self.axis(last)?.idtype;
        let k0 = self.mids.len();
        let levels = full.len() - 1;
        let mids: Vec<BufferId> = (0..levels)
            .map(|l| self.mid_buffer(k0 + l, BufferShape::Dense(vec![nnz.clone()]), dtype))
            .collect();
        self.fused.push((full.to_vec(), mids.clone()));
        let indptr = self.indptr_buf(last)?;
        let p = self.f.add_var("p", dtype);
        let vp = self.f.add_var("vp", dtype);
        // (An `int64` size over `int32` positions is cast, as the iteration's own loops are.)
        let extent = as_dtype(&self.f, nnz.clone(), dtype);
        self.simp.bind_range(p, &Expr::int(0), &extent);
        self.simp.bind_range(vp, &Expr::int(0), &extent);
        let st = SearchState::new(&mut self.f, dtype);
        let mut body = Vec::new();
        let mut prefix: Vec<Expr> = Vec::new();
        for (l, &mid) in mids.iter().enumerate() {
            let count = if l == 0 {
                self.axis(full[0])?.length.clone()
            } else {
                self.fiber_len(full[l], &prefix)?
            };
            let zeros = levels - 1 - l;
            let pre = prefix.clone();
            let start = move |m: Expr| {
                let mut idx = pre.clone();
                idx.push(m);
                idx.extend((0..zeros).map(|_| Expr::int(0)));
                Expr::load(indptr, idx)
            };
            body.push(search::upper_bound_minus_one(
                &mut self.f,
                &self.simp,
                &st,
                count,
                start,
                Expr::var(vp),
                (mid, vec![Expr::var(vp)]),
            ));
            prefix.push(Expr::load(mid, vec![Expr::var(vp)]));
        }
        let body = Stmt::seq(body);
        let allocs = vec![st.low, st.high];
        let (reads, writes) = block_regions(&self.f, &self.simp, &self.hints, None, &body, &allocs);
        let mut ann = Attrs::new();
        ann.set("preprocess", AttrValue::Bool(true));
        let block = Stmt::Block(Box::new(Block {
            name: format!("binary_search_block_{k0}_0"),
            iters: vec![BlockIter {
                var: vp,
                min: Expr::int(0),
                extent: extent.clone(),
                kind: IterKind::Spatial,
                binding: Expr::var(p),
            }],
            predicate: None,
            reads,
            writes,
            init: None,
            alloc_buffers: allocs,
            annotations: ann,
            body,
            span: Span::default(),
        }));
        self.nests.push(Stmt::For(Box::new(For {
            var: p,
            min: Expr::int(0),
            extent,
            kind: ForKind::Serial,
            thread: None,
            annotations: Attrs::new(),
            body: block,
            span: Span::default(),
        })));
        Ok(mids)
    }
}
