//! The accumulator plan of a tensorized product inside a serial loop: its tiles kept in
//! registers across the loop (`sptir_acc`), unit loops of several tiles, row unit loops, the
//! `A` and `B` fragments read once for several tiles, and a fill absorbed into the
//! accumulators (see the parent module's documentation).

use super::*;

impl Writer<'_> {
    /// The indices of the accumulator tile of the tensorized nest `nest` inside loop `f`, with
    /// the block iterators inside `f` replaced by their bindings and simplified against the
    /// ranges of `f`'s loops (so `(x * 32 + k) // 32` with `k < 32` becomes `x`).
    pub(crate) fn mma_tile_indices(&self, f: &For, nest: &For) -> Option<Vec<Expr>> {
        let (_, indices) = sync::mma_tile_store(nest)?;
        let mut map = HashMap::new();
        let mut an = sparsetir_arith::Analyzer::new();
        an.assume_no_overflow(true);
        an.bind_range(f.var, &f.min, &f.extent);
        // A loop of one iteration (the loop itself included: a single run) holds its start.
        let mut single = HashMap::new();
        if const_int(&f.extent) == Some(1) {
            single.insert(f.var, f.min.clone());
        }
        f.body.visit(&mut |s| match s {
            Stmt::Block(b) => {
                for it in &b.iters {
                    map.insert(it.var, it.binding.clone());
                }
            }
            Stmt::For(l) => {
                an.bind_range(l.var, &l.min, &l.extent);
                if const_int(&l.extent) == Some(1) {
                    single.insert(l.var, l.min.clone());
                }
            }
            _ => {}
        });
        Some(
            indices
                .iter()
                .map(|i| {
                    // Bindings may name outer blocks' iterators: substitute to a fixpoint
                    // (blocks nest only so deep).
                    let mut e = i.clone();
                    for _ in 0..8 {
                        e = super::subst(&e, &map);
                    }
                    an.simplify(self.func, &super::subst(&e, &single))
                })
                .collect(),
        )
    }

    /// Whether the accumulator tile of a tensorized nest inside loop `f` moves with `f`'s
    /// variable so that an element one iteration's lane holds may be another lane's in another
    /// iteration: some index of the tile moves both with `f` and within the tile (with the
    /// nest's loops). A tile that only moves from slice to slice (the indices that move with
    /// `f` do not move within the tile, as BSR's block position does) gives every element it
    /// reaches again to the same lane.
    pub(crate) fn mma_tile_moves_with(&self, f: &For) -> bool {
        tensorized_nests(&f.body).iter().any(|(n, _)| {
            let mut tile_vars = Vec::new();
            n.body.visit(&mut |s| {
                if let Stmt::For(l) = s {
                    tile_vars.push(l.var);
                }
            });
            tile_vars.push(n.var);
            match self.mma_tile_indices(f, n) {
                Some(ix) => ix
                    .iter()
                    .any(|i| super::mentions(i, &[f.var]) && super::mentions(i, &tile_vars)),
                None => true,
            }
        })
    }

    /// Whether the serial loop `f` can keep the accumulator fragment of the tensorized product
    /// inside it in registers: the body holds exactly one tensorized nest, a product
    /// (`mma_m16n8k16`, `mma_sp_m16n8k32`), whose tile stays in place across the iterations and
    /// that nothing else in the body touches, addressed by variables bound outside the loop —
    /// or that nest alone inside an unrolled loop of 1 to 8 iterations (the unit loop), each
    /// iteration its own tile: one fragment per tile (several output tiles per warp, which
    /// share the `A` fragment's loads). Returns the nest's outermost variable, the unit loop and
    /// the texts of each fragment's four elements.
    pub(crate) fn mma_accumulator_plan(&mut self, f: &For) -> Res<Option<AccumulatorPlan>> {
        let nests = tensorized_nests(&f.body);
        let [(nest, form)] = nests.as_slice() else {
            return Ok(None);
        };
        if *form == Mma::Fill {
            return Ok(None);
        }
        let Some((mut prod, warp)) = self.product_item(f) else {
            return Ok(None);
        };
        // The warps' products as warpgroup instructions (`warpgroup.rs`): up to 32 units.
        let warpgroup = self.warpgroup_requested(&warp, *form)?;
        let max_units = if warpgroup {
            warpgroup::MAX_WARPGROUP_UNITS
        } else {
            8
        };
        // Row units: an unrolled loop of 1 to 4 around the unit loop, each iteration other
        // rows (several row tiles per warp: each `B` fragment read once for all of them).
        let mut rows: Option<(VarId, i64)> = None;
        if let Stmt::For(r) = prod.single() {
            let inner_unit = matches!(r.body.single(), Stmt::For(u)
                if u.kind == ForKind::Unrolled
                    && matches!(u.body.single(), Stmt::For(n) if n.var == nest.var));
            let n = const_int(&r.extent).filter(|n| (1..=4).contains(n));
            if let (Some(n), true) = (n, inner_unit) {
                if r.kind == ForKind::Unrolled && const_int(&r.min) == Some(0) && r.var != nest.var
                {
                    rows = Some((r.var, n));
                    prod = &r.body;
                }
            }
        }
        // The unit loop: the product is one unrolled loop of constant extent holding the nest.
        let unit = match prod.single() {
            Stmt::For(u) if u.var != nest.var => {
                let units = const_int(&u.extent).filter(|n| (1..=max_units).contains(n));
                let holds_nest = matches!(u.body.single(), Stmt::For(n) if n.var == nest.var);
                match units {
                    Some(n)
                        if holds_nest
                            && u.kind == ForKind::Unrolled
                            && const_int(&u.min) == Some(0) =>
                    {
                        Some((u.var, n))
                    }
                    // An ordinary loop around the nest (the tile must then stay in place).
                    _ => None,
                }
            }
            _ => None,
        };
        let Ok((vars, b)) = self.mma_nest(nest, *form) else {
            return Ok(None);
        };
        let Stmt::Store(st) = b.body.single() else {
            return Ok(None);
        };
        if !sync::mma_private(&f.body).contains(&st.buffer) {
            return Ok(None);
        }
        let Ok(guard) = self.mma_guard("", &vars, b) else {
            return Ok(None);
        };
        // The tile's place, from variables bound outside the loop only (the nest's own loops
        // aside): in particular it does not move with the loop.
        let Some(indices) = self.mma_tile_indices(f, nest) else {
            return Ok(None);
        };
        let mut inner = std::collections::HashSet::new();
        inner.insert(f.var);
        let unit_var = unit.map(|(u, _)| u);
        let mut warp_vars: Vec<VarId> = warp.iter().map(|w| w.var).collect();
        // (The row unit loop's variable, like the warps', picks a tile fixed across the loop.)
        warp_vars.extend(rows.map(|(r, _)| r));
        f.body.visit(&mut |s| match s {
            Stmt::For(l)
                if !vars.contains(&l.var)
                    && Some(l.var) != unit_var
                    && !warp_vars.contains(&l.var) =>
            {
                inner.insert(l.var);
            }
            Stmt::Let(l) => {
                inner.insert(l.var);
            }
            Stmt::Block(blk) => {
                inner.extend(blk.iters.iter().map(|it| it.var));
            }
            _ => {}
        });
        let moves = |e: &Expr| {
            let mut hit = false;
            e.visit(&mut |x| hit |= matches!(x, Expr::Var(v) if inner.contains(v)));
            hit
        };
        // The guard, too, must hold for the whole loop (it then guards the tile's load and
        // store around the loop as well as each product) — or, where it moves with the unit
        // loop only (a split of a loop of run-time extent into units), each unit's tile has its
        // own, which guards its load and store.
        let mentions_unit = |e: &Expr| unit_var.is_some_and(|u| super::mentions(e, &[u]));
        if indices.iter().any(moves) || guard.as_ref().is_some_and(moves) {
            return Ok(None);
        }
        // The warp loops' variables are declared before the loop too (the tile's load and store
        // around it name them): bound while the texts are made.
        let mut warp_decl = Vec::new();
        for w in &warp {
            let (_, ct, _) = self.loop_var_type(w)?;
            let name = self.bind(w.var)?;
            let tag = w.thread.clone().unwrap_or_default();
            warp_decl.push(format!(
                "const {ct} {name} = ({ct}){};",
                self.index_text(&tag)
            ));
        }
        let texts = self.plan_texts(
            st.buffer,
            &indices,
            &vars,
            (rows, unit),
            &guard,
            &mentions_unit,
        );
        let pairs = match &texts {
            Ok(Some(_)) => self.plan_pairs(st.buffer, &indices, &vars, (rows, unit)),
            _ => Vec::new(),
        };
        for w in &warp {
            self.unbind(w.var);
        }
        let Some((texts, guard, unit_guards)) = texts? else {
            return Ok(None);
        };
        // A warpgroup's four warps all issue the product: no guard, and units.
        let warpgroup = match warpgroup {
            true if unit.is_none()
                || guard.is_some()
                || unit_guards.iter().any(Option::is_some) =>
            {
                return Ok(None)
            }
            true => warp
                .iter()
                .find(|w| w.annotations.get(WARPGROUP_ATTR).is_some())
                .map(|w| w.var),
            false => None,
        };
        Ok(Some(AccumulatorPlan {
            buffer: st.buffer,
            tile: indices,
            warpgroup,
            nest: vars[0],
            unit: unit_var,
            texts,
            pairs,
            guard,
            unit_guards,
            warp_decl,
            rows: rows.map(|(r, _)| (r, unit.map_or(1, |(_, n)| n))),
        }))
    }

    /// The indices of each tile of a plan (row unit by row unit, unit by unit: tile
    /// `r * units + u`), the row unit and unit loops' variables replaced by the tile's.
    fn tile_indices(&self, indices: &[Expr], (rows, unit): (Loop, Loop)) -> Vec<Vec<Expr>> {
        let units = unit.map_or(1, |(_, n)| n);
        (0..rows.map_or(1, |(_, n)| n))
            .flat_map(|kr| (0..units).map(move |k| (kr, k)))
            .map(|(kr, k)| {
                let mut map = HashMap::new();
                for (l, v) in [(rows, kr), (unit, k)] {
                    if let Some((l, _)) = l {
                        map.insert(l, Expr::Int(v, self.func.vars[l].dtype));
                    }
                }
                indices.iter().map(|i| super::subst(i, &map)).collect()
            })
            .collect()
    }

    /// Where every tile's elements `(g, 2 t)` and `(g, 2 t + 1)` (and the same 8 rows down)
    /// are adjacent float32 elements of a global buffer, 8-byte aligned (the column's step 1,
    /// every other term of the offset even), the addresses of each tile's elements 0 and 2:
    /// its stores are then two 8-byte stores (`sptir_st2`) instead of four. Empty otherwise.
    fn plan_pairs(
        &mut self,
        buffer: BufferId,
        indices: &[Expr],
        vars: &[VarId],
        (rows, unit): (Loop, Loop),
    ) -> Vec<[String; 2]> {
        if self.buf_dtype(buffer) != DType::F32 || self.is_shared(buffer) || vars.len() < 2 {
            return Vec::new();
        }
        let mut out = Vec::new();
        for at in self.tile_indices(indices, (rows, unit)) {
            let paired = self
                .flat_offset(buffer, &at)
                .is_some_and(|off| aligned_steps(&off, &[(vars[1], 1)], 2));
            if !paired {
                return Vec::new();
            }
            let target = Expr::Load {
                buffer,
                indices: at,
            };
            let mut ptr = |(row, col): (&str, &str)| {
                let mut at = vec![row.to_string(), col.to_string()];
                at.resize(vars.len(), "0".to_string());
                self.ptr_at(&target, vars, &at, &[]).ok()
            };
            let (Some(p0), Some(p2)) = (ptr(C_FRAGMENT[0]), ptr(C_FRAGMENT[2])) else {
                return Vec::new();
            };
            out.push([p0, p2]);
        }
        out
    }

    /// The product of the accumulating loop `f`: its body, or the one item of its body's
    /// sequence that holds tensorized nests (the others — a cooperative copy into shared memory
    /// — hold none), and the loops over the block's warps around it, if any: nested loops
    /// bound to `threadIdx.y` and `threadIdx.z` (one each), from 0 over their whole launch
    /// dimension (each warp one value of each, fixed while `f` runs, so the tile may depend on
    /// them).
    pub(super) fn product_item<'s>(&self, f: &'s For) -> Option<(&'s Stmt, Vec<&'s For>)> {
        let body = f.body.single();
        let items: Vec<&Stmt> = match body {
            Stmt::Seq(v) => v.iter().collect(),
            other => vec![other],
        };
        let mut with = items.iter().filter(|s| !tensorized_nests(s).is_empty());
        let (Some(item), None) = (with.next(), with.next()) else {
            return None;
        };
        let mut item = item.single();
        let mut warps: Vec<&For> = Vec::new();
        while let Stmt::For(w) = item {
            let tag = w.thread.as_deref().unwrap_or_default();
            let fresh = !warps.iter().any(|o| o.thread.as_deref() == Some(tag));
            if w.kind != ForKind::ThreadBinding
                || !matches!(tag, "threadIdx.y" | "threadIdx.z")
                || !fresh
            {
                break;
            }
            let dim = self.kernel.as_ref().and_then(|k| k.dims.get(tag));
            let ext = self.launch_expr(&w.extent);
            // (The launch dimension may be the larger of several loops' constant extents.)
            let same = |d: &LaunchExpr| match (d.eval(&|_| None), ext.as_ref()) {
                (Some(n), Some(e)) => e.eval(&|_| None) == Some(n),
                _ => Some(d) == ext.as_ref(),
            };
            if const_int(&w.min) != Some(0) || !dim.is_some_and(same) {
                return None;
            }
            warps.push(w);
            item = w.body.single();
        }
        Some((item, warps))
    }

    /// The texts of the plan's tiles (one per unit; with row units, row unit by row unit: tile
    /// `r * units + u`) and guards: `None` where a tile's place cannot be written, the unit loop
    /// does not move it, or a guard moves with the row units or needs one per unit beside them.
    #[allow(clippy::type_complexity)]
    pub(super) fn plan_texts(
        &mut self,
        buffer: BufferId,
        indices: &[Expr],
        vars: &[VarId],
        (rows, unit): (Loop, Loop),
        guard: &Option<Expr>,
        mentions_unit: &impl Fn(&Expr) -> bool,
    ) -> Res<Option<(Vec<Vec<String>>, Option<String>, Vec<Option<String>>)>> {
        if let (Some((r, _)), Some(g)) = (rows, guard) {
            if super::mentions(g, &[r]) || mentions_unit(g) {
                return Ok(None);
            }
        }
        let units = unit.map_or(1, |(_, n)| n);
        let (guard, unit_guards) = match (guard, unit) {
            (Some(g), Some((u, _))) if mentions_unit(g) => {
                let mut each = Vec::new();
                for k in 0..units {
                    let map = HashMap::from([(u, Expr::Int(k, self.func.vars[u].dtype))]);
                    let t = self.expr(&super::subst(g, &map))?.0;
                    each.push(Some(strip_parens(&t).to_string()));
                }
                (None, each)
            }
            (Some(g), _) => (
                Some(strip_parens(&self.expr(g)?.0).to_string()),
                vec![None; units as usize],
            ),
            (None, _) => (None, vec![None; units as usize]),
        };
        let mut texts = Vec::new();
        for at in self.tile_indices(indices, (rows, unit)) {
            let c_target = Expr::Load {
                buffer,
                indices: at,
            };
            let mut tile = Vec::new();
            for (row, col) in C_FRAGMENT {
                let mut at = vec![row.to_string(), col.to_string()];
                at.resize(vars.len(), "0".to_string());
                match self.text_at(&c_target, vars, &at, &[]) {
                    Ok(t) => tile.push(t),
                    Err(_) => return Ok(None),
                }
            }
            texts.push(tile);
        }
        let unit_guards: Vec<Option<String>> = (0..rows.map_or(1, |(_, n)| n))
            .flat_map(|_| unit_guards.iter().cloned())
            .collect();
        // Distinct tiles: the unit loop must move the tile.
        if unit.is_some() && texts.windows(2).any(|w| w[0] == w[1]) {
            return Ok(None);
        }
        Ok(Some((texts, guard, unit_guards)))
    }

    /// Writes, before the unit loop `unit` (several output tiles kept in registers, see
    /// [`Self::mma_accumulator_plan`]), the `A` fragment (and a 2:4 product's metadata) of the
    /// product nest inside it when it is the same for every tile — it does not move with the
    /// unit loop; under a predicate, it is read where some unit's tile is live — and
    /// marks it shared (`mma_a_shared`): the tiles' products read it instead of each loading
    /// the same fragment. Returns whether it did; if so, it opened a scope (`{`) the caller
    /// closes after the loop.
    pub(crate) fn mma_share_a(&mut self, unit: &For) -> Res<bool> {
        let nests = tensorized_nests(&unit.body);
        let [(nest, form)] = nests.as_slice() else {
            return Ok(false);
        };
        let Ok((vars, b)) = self.mma_nest(nest, *form) else {
            return Ok(false);
        };
        let Stmt::Store(st) = b.body.single() else {
            return Ok(false);
        };
        if *form == Mma::Fill {
            return Ok(false);
        }
        // A guarded tile (a unit loop split off a loop of run-time extent): the fragment is
        // read where some unit's tile is live — its loads are then those that tile would do.
        let live = self.mma_unit_live.clone();
        let mention = |e: &Expr, v: VarId| mentions_via(b, e, v);
        let c_target = Expr::Load {
            buffer: st.buffer,
            indices: st.indices.clone(),
        };
        let Ok((a, bb, _)) = self.mma_operands("", &vars, st, &c_target, &mention) else {
            return Ok(false);
        };
        if mention(a, unit.var) {
            return Ok(false);
        }
        // The iterators the fragment may read: those not bound through the unit loop.
        let iters = iters_fixed_by(b, unit.var);
        let meta = match form {
            Mma::SpM16n8k32 => match self.sp_metadata("", bb, vars[3], &mention) {
                Ok(m) if !mention(&m.0, unit.var) => Some(m),
                _ => return Ok(false),
            },
            _ => None,
        };
        self.line("{");
        self.indent += 1;
        let init = if live.is_some() {
            " = {0u, 0u, 0u, 0u}"
        } else {
            ""
        };
        match &meta {
            None => self.line(&format!("uint32_t sptir_a[4]{init};")),
            Some(_) => self.line(&format!("uint32_t sptir_a[4]{init}, sptir_e = 0u;")),
        }
        if let Some(g) = &live {
            self.line(&format!("if ({g}) {{"));
            self.indent += 1;
        }
        match meta {
            None => self.write_a_fragment(a, &vars, b, &iters)?,
            Some((meta, meta_dt)) => {
                self.write_sp_a_fragment(a, &meta, meta_dt, &vars, b, &iters, None)?
            }
        }
        if live.is_some() {
            self.indent -= 1;
            self.line("}");
        }
        self.mma_a_shared = Some(vars[0]);
        Ok(true)
    }

    /// Writes, before the row unit loop `rows` (several row tiles per warp, see
    /// [`Self::mma_accumulator_plan`]), the `B` fragment of each unit of the 2:4 product inside
    /// it into `sptir_bs[u]` when `B` is read from a shared window (`ldmatrix`) and does not
    /// move with the row unit loop — proven by simplifying its row against the loops' ranges —
    /// and marks them shared (`mma_b_shared`). Returns whether it did; if so, it opened a scope
    /// the caller closes after the loop.
    pub(crate) fn mma_share_b(&mut self, rows: &For) -> Res<bool> {
        if self.mma_warpgroup.is_some() {
            return Ok(false);
        }
        let Some((_, units)) = self.mma_acc_rows else {
            return Ok(false);
        };
        let Some(u) = self.mma_acc_unit else {
            return Ok(false);
        };
        let nests = tensorized_nests(&rows.body);
        let [(nest, Mma::SpM16n8k32)] = nests.as_slice() else {
            return Ok(false);
        };
        let Ok((vars, b)) = self.mma_nest(nest, Mma::SpM16n8k32) else {
            return Ok(false);
        };
        let Stmt::Store(st) = b.body.single() else {
            return Ok(false);
        };
        let mention = |e: &Expr, v: VarId| mentions_via(b, e, v);
        let c_target = Expr::Load {
            buffer: st.buffer,
            indices: st.indices.clone(),
        };
        let Ok((_, bb, _)) = self.mma_operands("", &vars, st, &c_target, &mention) else {
            return Ok(false);
        };
        let Ok((meta, _)) = self.sp_metadata("", bb, vars[3], &mention) else {
            return Ok(false);
        };
        let mut b_at = bb.clone();
        b_at.rewrite_post_order(&mut |x| {
            if *x == meta {
                *x = Expr::Var(vars[3]);
            }
        });
        if !self.shared_rows(&b_at, b, vars[1]) || !self.independent_of(&b_at, b, rows.var) {
            return Ok(false);
        }
        self.line("{");
        self.indent += 1;
        self.line(&format!("uint32_t sptir_bs[{units}][4];"));
        let at = [
            "0".to_string(),
            "0".to_string(),
            "sptir_g".to_string(),
            "sptir_t".to_string(),
        ];
        let (rdt, udt) = (self.func.vars[rows.var].dtype, self.func.vars[u].dtype);
        for k in 0..units {
            self.let_subst.insert(rows.var, int_literal(0, rdt));
            self.let_subst
                .insert(u, format!("({})", int_literal(k, udt)));
            let p = self.ptr_at(&b_at, &vars, &at, &b.iters);
            self.let_subst.remove(&rows.var);
            self.let_subst.remove(&u);
            self.line(&format!("sptir_ldmatrix_x4_trans(sptir_bs[{k}], {});", p?));
        }
        self.mma_b_shared = Some(vars[0]);
        Ok(true)
    }

    /// Whether the load `e` of block `b` (its iterators' bindings substituted) provably reads
    /// the same element for every value of the loop over `v`, simplified against the ranges of
    /// the loops of the function.
    pub(super) fn independent_of(&self, e: &Expr, b: &Block, v: VarId) -> bool {
        let Expr::Load { indices, .. } = e else {
            return false;
        };
        let map: HashMap<VarId, Expr> = b
            .iters
            .iter()
            .map(|it| (it.var, it.binding.clone()))
            .collect();
        let mut an = sparsetir_arith::Analyzer::new();
        an.assume_no_overflow(true);
        self.func.body.visit(&mut |s| {
            if let Stmt::For(l) = s {
                an.bind_range(l.var, &l.min, &l.extent);
            }
        });
        let zero = HashMap::from([(v, Expr::Int(0, self.func.vars[v].dtype))]);
        indices.iter().all(|i| {
            let i = super::subst(i, &map);
            let at0 = super::subst(&i, &zero);
            let d = an.simplify(self.func, &Expr::sub(i, at0));
            matches!(d, Expr::Int(0, _))
        })
    }

    /// The register accumulators of `plan` loaded from their tiles (`into_registers`) or stored
    /// back, where the loop runs (`sptir_acc_live`), each unit's under its own guard.
    pub(crate) fn acc_transfer(&mut self, plan: &AccumulatorPlan, into_registers: bool) {
        self.line("if (sptir_acc_live) {");
        self.indent += 1;
        for (u, texts) in plan.texts.iter().enumerate() {
            let lines = match plan.pairs.get(u) {
                // Stored as two 8-byte pairs.
                Some(p) if !into_registers => (0..2)
                    .map(|h| {
                        format!(
                            "sptir_st2({}, {}, {});",
                            p[h],
                            plan.slot(u, 2 * h),
                            plan.slot(u, 2 * h + 1)
                        )
                    })
                    .collect(),
                _ => texts
                    .iter()
                    .enumerate()
                    .map(|(i, c)| match into_registers {
                        true => format!("{} = {c};", plan.slot(u, i)),
                        false => format!("{c} = {};", plan.slot(u, i)),
                    })
                    .collect(),
            };
            self.unit_lines(plan, u, lines);
        }
        self.indent -= 1;
        self.line("}");
    }

    /// Writes `lines` (the loads or stores of unit `u`'s accumulator fragment) under the unit's
    /// own guard, if it has one.
    pub(super) fn unit_lines(&mut self, plan: &AccumulatorPlan, u: usize, lines: Vec<String>) {
        let guard = plan.unit_guard(u);
        if let Some(g) = guard {
            self.line(&format!("if ({g}) {{"));
            self.indent += 1;
        }
        for l in lines {
            self.line(&l);
        }
        if guard.is_some() {
            self.indent -= 1;
            self.line("}");
        }
    }

    /// Whether the tensorized fill `st` is absorbed by `next`, the statement after it: a serial
    /// loop that keeps the same tile in registers ([`Self::mma_accumulator_plan`], the same
    /// four element texts), in code every thread of the block runs alike. The fill is then
    /// not written and the loop's accumulator starts with the filled value (`mma_fill_init`,
    /// which also hands the loop its plan).
    pub(crate) fn mma_fill_absorbed(&mut self, st: &Stmt, next: Option<&Stmt>) -> Res<bool> {
        let (Stmt::For(outer), Some(Stmt::For(next))) = (st, next) else {
            return Ok(false);
        };
        // The fill nest, possibly inside an unrolled loop over the unit tiles (the fill of a
        // loop keeping several tiles in registers).
        let (fill, fill_unit) = match outer.body.single() {
            Stmt::For(inner)
                if Mma::of(outer).is_none()
                    && outer.kind == ForKind::Unrolled
                    && const_int(&outer.min) == Some(0)
                    && Mma::of(inner) == Some(Mma::Fill) =>
            {
                (
                    &**inner,
                    Some((outer.var, const_int(&outer.extent).unwrap_or(0))),
                )
            }
            _ => (&**outer, None),
        };
        if Mma::of(fill) != Some(Mma::Fill)
            || !self.warp_uniform()
            || self.mma_acc.is_some()
            || next.thread.is_some()
            || next.kind == ForKind::Vectorized
        {
            return Ok(false);
        }
        let Ok((vars, b)) = self.mma_nest(fill, Mma::Fill) else {
            return Ok(false);
        };
        let Stmt::Store(fs) = b.body.single() else {
            return Ok(false);
        };
        // The filled value must be the same everywhere in the tile (the block's iterators
        // are the tile's loops here) and in every unit.
        let mut iters: Vec<VarId> = b.iters.iter().map(|it| it.var).collect();
        iters.extend(fill_unit.map(|(u, _)| u));
        let moves = super::mentions(&fs.value, &vars) || super::mentions(&fs.value, &iters);
        if moves || self.buf_dtype(fs.buffer) != DType::F32 {
            return Ok(false);
        }
        let Some(plan) = self.mma_accumulator_plan(next)? else {
            return Ok(false);
        };
        let units = fill_unit.map_or(1, |(_, n)| n);
        if plan.unit.is_some() != fill_unit.is_some() || plan.texts.len() as i64 != units {
            return Ok(false);
        }
        let guard = match self.mma_guard("", &vars, b) {
            Ok(g) => g,
            Err(_) => return Ok(false),
        };
        let c_target = Expr::Load {
            buffer: fs.buffer,
            indices: fs.indices.clone(),
        };
        // Unit by unit: the same tile and the same guard as the loop's plan.
        for k in 0..units {
            if let Some((u, _)) = fill_unit {
                self.let_subst.insert(u, k.to_string());
            }
            let r = self.fill_unit_matches(&plan, k as usize, &guard, &c_target, &vars, b);
            if let Some((u, _)) = fill_unit {
                self.let_subst.remove(&u);
            }
            if !r? {
                return Ok(false);
            }
        }
        let (val, vdt) = self.expr(&fs.value)?;
        self.mma_fill_init = Some((strip_parens(&cast(val, vdt, DType::F32)).to_string(), plan));
        Ok(true)
    }

    /// Whether unit `k` of a fill (its unit loop's variable already substituted) writes the
    /// tile `plan` keeps for unit `k`, under the same guard.
    pub(super) fn fill_unit_matches(
        &mut self,
        plan: &AccumulatorPlan,
        k: usize,
        guard: &Option<Expr>,
        c_target: &Expr,
        vars: &[VarId],
        b: &Block,
    ) -> Res<bool> {
        let fill_guard = match guard {
            Some(g) => Some(strip_parens(&self.expr(g)?.0).to_string()),
            None => None,
        };
        let want_guard = match plan.unit {
            Some(_) => plan
                .unit_guard(k)
                .map(str::to_string)
                .or(plan.guard.clone()),
            None => plan.guard.clone(),
        };
        if fill_guard != want_guard {
            return Ok(false);
        }
        let mut texts = Vec::new();
        for (row, col) in C_FRAGMENT {
            let at = [row.to_string(), col.to_string()];
            match self.text_at(c_target, vars, &at, &b.iters) {
                Ok(t) => texts.push(t),
                Err(_) => return Ok(false),
            }
        }
        Ok(plan.texts.get(k) == Some(&texts))
    }
}

/// A loop by its variable and extent, where there is one (a plan's row unit or unit loop).
type Loop = Option<(VarId, i64)>;

/// How a serial loop keeps a tensorized product's accumulator fragment in registers
/// ([`Writer::mma_accumulator_plan`]).
pub(crate) struct AccumulatorPlan {
    /// The nest's outermost loop variable.
    pub nest: VarId,
    /// The accumulator tiles' buffer.
    pub buffer: BufferId,
    /// The tile's indices, in loop variables (the nest's own loops giving its elements).
    pub tile: Vec<Expr>,
    /// The unit loop (one tile per iteration), if any.
    pub unit: Option<VarId>,
    /// The C texts of each fragment's four elements (one fragment per unit iteration).
    pub texts: Vec<Vec<String>>,
    /// Each fragment's elements 0 and 2 as addresses where elements (0, 1) and (2, 3) are
    /// two aligned 8-byte pairs of a global float32 buffer (`Writer::plan_pairs`); empty
    /// otherwise.
    pub pairs: Vec<[String; 2]>,
    /// The tile's guard (its block's predicate), which holds for the whole loop.
    pub guard: Option<String>,
    /// Each unit tile's own guard, where the block's predicate moves with the unit loop (the
    /// tile is loaded, computed and stored only where it holds); `None`s otherwise.
    pub unit_guards: Vec<Option<String>>,
    /// The declarations of the warp loops' variables (the product sits in loops over the
    /// block's warps, see `Writer::product_item`), written before the tile's load.
    pub warp_decl: Vec<String>,
    /// The row unit loop around the unit loop, if any, and the unit loop's extent: the tile of
    /// row unit `r` and unit `u` is fragment `r * units + u`.
    pub rows: Option<(VarId, i64)>,
    /// The warp loop (`threadIdx.y`) annotated `warpgroup`, where the warps' products are
    /// one `wgmma` per row unit (`warpgroup.rs`).
    pub warpgroup: Option<VarId>,
}

impl AccumulatorPlan {
    /// Where some tile of the plan is live: the units' own guards joined, or the loop's guard
    /// (`None`: always).
    pub(crate) fn live(&self) -> Option<String> {
        let mut any: Vec<&str> = Vec::new();
        for g in self.unit_guards.iter().flatten() {
            if !any.contains(&g.as_str()) {
                any.push(g);
            }
        }
        match any.is_empty() {
            true => self.guard.clone(),
            false => Some(
                any.iter()
                    .map(|g| format!("({g})"))
                    .collect::<Vec<_>>()
                    .join(" || "),
            ),
        }
    }

    /// Unit `u`'s own guard, if it has one.
    pub(crate) fn unit_guard(&self, u: usize) -> Option<&str> {
        self.unit_guards.get(u).and_then(|g| g.as_deref())
    }

    /// The register of element `i` of fragment `u` (`u` is 0 without a unit loop).
    pub(crate) fn slot(&self, u: usize, i: usize) -> String {
        match self.unit {
            Some(_) => format!("sptir_acc[{u}][{i}]"),
            None => format!("sptir_acc[{i}]"),
        }
    }
}
