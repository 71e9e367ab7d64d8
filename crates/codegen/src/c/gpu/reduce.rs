//! Reductions of the CUDA writer: a nest reducing into one element kept in registers (one per
//! element a small innermost loop selects; atomic adds summed first), and reductions bound to
//! `threadIdx.x` combined by warp shuffles (several warps: through shared memory).

use super::*;

/// How a reduction update combines: `Y = Y op e`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RedOp {
    Add,
    Max,
    Min,
}

/// A reduction into one element over a loop nest: the single block at the bottom, its store and
/// the reduced operand.
pub(crate) struct Accumulation<'a> {
    /// The block adds atomically (`T.atomic_add`): the register starts at 0 and is added to
    /// the element atomically after the nest.
    pub(super) atomic: bool,
    /// The innermost loop when it selects the element (its variable and constant extent).
    pub(super) lane: Option<(VarId, i64)>,
    /// The loops of the nest below the first one.
    chain: Vec<VarId>,
    pub(super) block: &'a Block,
    /// The update as a store `Y[idx] = Y[idx] op e` (an atomic add is written so too).
    pub(super) store: Store,
    /// The block iterators' bindings (in the nest's loop variables).
    bindings: HashMap<VarId, Expr>,
    op: RedOp,
    /// The store's indices with the block iterators replaced by their bindings.
    pub(super) outer_indices: Vec<Expr>,
}

impl Accumulation<'_> {
    /// The conditions of a cross-thread reduction over `f` that guard its combination: the
    /// block's conjuncts that do not move with the reduction (its reduce iterators, `f`, the
    /// loops inside), in the enclosing loops' variables. A condition on the reduction's steps
    /// skips those steps inside; the total needs no guard for it (the init, in the RFC form,
    /// runs once per element).
    pub(super) fn combination_guards(&self, f: &For) -> Vec<Expr> {
        let Some(p) = &self.block.predicate else {
            return Vec::new();
        };
        let moving: Vec<VarId> = self
            .block
            .iters
            .iter()
            .filter(|it| it.kind == IterKind::Reduce)
            .map(|it| it.var)
            .chain(std::iter::once(f.var))
            .chain(self.chain.iter().copied())
            .collect();
        let spatial: HashMap<VarId, Expr> = self
            .block
            .iters
            .iter()
            .filter(|it| it.kind != IterKind::Reduce)
            .map(|it| (it.var, it.binding.clone()))
            .collect();
        let mut parts = Vec::new();
        conjuncts(p, &mut parts);
        parts
            .into_iter()
            .map(|c| subst(c, &spatial))
            .filter(|c| !mentions(c, &moving))
            .collect()
    }
}

impl<'f> Writer<'f> {
    /// Runs `inner` with the reduced element of `acc` redirected to the register `name`.
    fn in_register(
        &mut self,
        acc: &Accumulation<'_>,
        name: String,
        inner: impl FnOnce(&mut Self) -> Res<()>,
    ) -> Res<()> {
        self.simd_acc = Some(SimdAcc {
            buffer: acc.store.buffer,
            indices: acc.store.indices.clone(),
            name,
            hoisted: Vec::new(),
        });
        let r = inner(self);
        self.simd_acc = None;
        r
    }

    /// Recognises a reduction into one element over the nest of `f`: single-statement loops
    /// (serial; `f` itself may be thread-bound when `cross` is set) down to one block with no
    /// allocations whose body is `Y[idx] = Y[idx] op e`, `idx` moving with none of the nest's
    /// loops, `e` not reading `Y`. With `cross`, one of the block's reduction iterators must
    /// move with `f` (the loop reduces across threads) and `f` must be `threadIdx.x`.
    pub(crate) fn accumulation(&self, f: &'f For, cross: bool) -> Option<Accumulation<'f>> {
        let mut loop_vars = vec![f.var];
        let mut inner: Option<&For> = None;
        let mut s = f.body.single();
        while let Stmt::For(g) = s {
            // A partial unroll only changes how the loop is written.
            let only_unroll = g
                .annotations
                .0
                .iter()
                .all(|(k, _)| k == super::UNROLL_FACTOR_ATTR);
            if !matches!(
                g.kind,
                ForKind::Serial | ForKind::Unrolled | ForKind::Vectorized
            ) || !only_unroll
            {
                return None;
            }
            loop_vars.push(g.var);
            inner = Some(g);
            s = g.body.single();
        }
        let Stmt::Block(b) = s else { return None };
        if !b.alloc_buffers.is_empty() {
            return None;
        }
        let (st, atomic) = match b.body.single() {
            Stmt::Store(st) => (st.clone(), false),
            // `T.atomic_add(Y[idx], e)`: summed in a register, added atomically once.
            Stmt::Evaluate(Expr::Call {
                op: Intrinsic::AtomicAdd,
                args,
                ..
            }) if !cross => {
                let [Expr::Load { buffer, indices }, e] = args.as_slice() else {
                    return None;
                };
                let y = Expr::Load {
                    buffer: *buffer,
                    indices: indices.clone(),
                };
                (
                    Store {
                        buffer: *buffer,
                        indices: indices.clone(),
                        value: Expr::add(y, e.clone()),
                        span: Span::default(),
                    },
                    true,
                )
            }
            _ => return None,
        };
        let st = &st;
        let y = Expr::Load {
            buffer: st.buffer,
            indices: st.indices.clone(),
        };
        let (op, other) = match &st.value {
            Expr::Binary(op, a, c) => {
                let op = match op {
                    BinOp::Add => RedOp::Add,
                    BinOp::Max => RedOp::Max,
                    BinOp::Min => RedOp::Min,
                    _ => return None,
                };
                if **a == y {
                    (op, c.as_ref())
                } else if **c == y {
                    (op, a.as_ref())
                } else {
                    return None;
                }
            }
            _ => return None,
        };
        if loads_buffer(other, st.buffer) {
            return None;
        }
        if let Some(p) = &b.predicate {
            if loads_buffer(p, st.buffer) {
                return None;
            }
        }
        let map = bindings(b);
        let outer_indices: Vec<Expr> = st.indices.iter().map(|i| subst(i, &map)).collect();
        // The innermost loop may pick the element among a few (a constant extent up to 32,
        // from 0): one register per element, the loop unrolled over them ("lanes").
        let mut lane = None;
        if !cross {
            if let Some(g) = inner {
                let n = const_int(&g.extent).filter(|n| (1..=32).contains(n));
                if n.is_some()
                    && const_int(&g.min) == Some(0)
                    && outer_indices.iter().any(|i| mentions(i, &[g.var]))
                {
                    lane = n.map(|n| (g.var, n));
                }
            }
        }
        let moving: Vec<VarId> = loop_vars
            .iter()
            .copied()
            .filter(|v| lane.is_none_or(|(l, _)| l != *v))
            .collect();
        if outer_indices.iter().any(|i| mentions(i, &moving)) {
            return None;
        }
        if outer_indices.iter().any(|i| loads_buffer(i, st.buffer)) {
            return None;
        }
        if !cross {
            if let Some(p) = &b.predicate {
                // The element is read before the nest and written after it: the conditions
                // that do not move with the nest guard that (see `write_register_accumulation`);
                // those of the lane loop alone (the width's tail: `32 ko + lane < 40`) guard
                // each lane element's read and write; the others only skip reduction steps. A
                // condition of the lane loop and of a reduction loop together is refused.
                let p = subst(p, &map);
                if let Some((lv, _)) = lane {
                    let mut parts = Vec::new();
                    conjuncts(&p, &mut parts);
                    if parts
                        .iter()
                        .any(|c| mentions(c, &[lv]) && mentions(c, &moving))
                    {
                        return None;
                    }
                }
            }
        }
        if cross {
            if f.thread.as_deref() != Some("threadIdx.x") {
                return None;
            }
            let moves = b
                .iters
                .iter()
                .any(|it| it.kind == IterKind::Reduce && mentions(&it.binding, &[f.var]));
            if !moves {
                return None;
            }
        } else if b.init.is_some()
            && b.init_folded_into(f.var, &f.min, st.buffer, &st.indices)
                .is_none()
        {
            // The init runs at the reduction's first step, inside the nest; kept as written.
            return None;
        }
        Some(Accumulation {
            atomic,
            lane,
            chain: loop_vars[1..].to_vec(),
            block: b,
            store: st.clone(),
            bindings: map,
            op,
            outer_indices,
        })
    }

    /// `acc = Y[idx]; loops { acc = acc op e } Y[idx] = acc;` for a reduction into one element
    /// over a serial nest. Where the store is kept to one thread (block dimensions no enclosing
    /// loop binds, [`Self::redundant_guard`]), the whole accumulation is: the other threads
    /// would only read the element while that thread writes it (a race, if a harmless one).
    pub(crate) fn write_register_accumulation(
        &mut self,
        f: &For,
        acc: Accumulation<'_>,
    ) -> Res<()> {
        let Some(lone) = self.redundant_guard(false) else {
            return self.write_register_accumulation_here(f, acc);
        };
        self.line(&format!("if ({lone}) {{"));
        self.indent += 1;
        let div = Divergence {
            block: true,
            lane: lone.contains("threadIdx.x"),
        };
        self.diverge(div);
        let r = self.write_register_accumulation_here(f, acc);
        self.leave_divergence(div);
        self.indent -= 1;
        self.line("}");
        r
    }

    fn write_register_accumulation_here(&mut self, f: &For, acc: Accumulation<'_>) -> Res<()> {
        let buffer = acc.store.buffer;
        let dt = self.buf_dtype(buffer);
        let ct = self.ctype(dt, "accumulator")?;
        let name = self.namer.fresh(&format!("{}_acc", self.buf_name(buffer)?));
        let bname = self.buf_name(buffer)?.to_string();
        self.line("{");
        self.indent += 1;
        // The block's conditions that do not move with the nest guard it whole; those of the
        // lane loop alone guard each lane element's read and write.
        let (mut fixed, mut lane_conds) = (Vec::new(), Vec::new());
        if let Some(p) = &acc.block.predicate {
            let p = subst(p, &acc.bindings);
            let mut parts = Vec::new();
            conjuncts(&p, &mut parts);
            let mut moving = vec![f.var];
            moving.extend(acc.chain.iter().copied());
            for c in parts {
                if !mentions(c, &moving) {
                    fixed.push(c.clone());
                } else if acc.lane.is_some_and(|(lv, _)| mentions(c, &[lv])) {
                    lane_conds.push(c.clone());
                }
            }
        }
        let guarded = !fixed.is_empty();
        if let Some(g) = self.conjunction(&fixed)? {
            self.line(&format!("if ({g}) {{"));
            self.indent += 1;
        }
        // The init runs exactly at the loop's first iteration: the registers start at it.
        // Or a fill before the nest was absorbed: they start at its value (`fill_start.rs`).
        let folded = acc
            .block
            .init_folded_into(f.var, &f.min, buffer, &acc.store.indices)
            .cloned()
            .or_else(|| self.take_fill_start(f.var));
        if let Some((lv, n)) = acc.lane {
            // One register per element the lane loop selects.
            let vdt = self.func.vars[lv].dtype;
            let vct = self.ctype(vdt, "loop variable")?;
            self.line(&format!("{ct} {name}[{n}];"));
            let v = self.bind(lv)?;
            self.pragma("unroll");
            self.line(&format!("for ({vct} {v} = 0; {v} < {n}; ++{v}) {{"));
            if let Some(init) = &folded {
                let (t, tdt) = self.expr(&subst(init, &acc.bindings))?;
                self.line(&format!(
                    "    {name}[{v}] = {};",
                    strip_parens(&cast(t, tdt, dt))
                ));
            } else if acc.atomic {
                self.line(&format!("    {name}[{v}] = {};", int_literal(0, dt)));
            } else {
                let off_l = self.offset(buffer, &acc.outer_indices)?;
                let cur = half::load_value(dt, format!("{bname}[{off_l}]"));
                match self.conjunction(&lane_conds)? {
                    // Past the guard the register is never stored: 0 keeps it defined.
                    Some(g) => self.line(&format!(
                        "    {name}[{v}] = ({g}) ? {cur} : {};",
                        int_literal(0, dt)
                    )),
                    None => self.line(&format!("    {name}[{v}] = {cur};")),
                }
            }
            self.line("}");
            self.unbind(lv);
            let mut body = f.clone();
            if folded.is_some() {
                strip_init_of(&mut body.body, &acc.block.name);
            }
            self.in_register(&acc, format!("{name}[{v}]"), |w| {
                w.write_serial_cuda_loop(&body)
            })?;
            let v = self.bind(lv)?;
            self.pragma("unroll");
            self.line(&format!("for ({vct} {v} = 0; {v} < {n}; ++{v}) {{"));
            let off_l = self.offset(buffer, &acc.outer_indices)?;
            self.indent += 1;
            let lane_guard = self.conjunction(&lane_conds)?;
            if let Some(g) = &lane_guard {
                self.line(&format!("if ({g}) {{"));
                self.indent += 1;
            }
            if acc.atomic {
                self.guarded_line(
                    &half::atomic_add(dt, &format!("{bname} + {off_l}"), &format!("{name}[{v}]")),
                    false,
                );
            } else {
                let bits = half::store_bits(dt, &format!("{name}[{v}]"));
                self.guarded_line(&format!("{bname}[{off_l}] = {bits};"), false);
            }
            if lane_guard.is_some() {
                self.indent -= 1;
                self.line("}");
            }
            self.indent -= 1;
            self.line("}");
            self.unbind(lv);
            if guarded {
                self.indent -= 1;
                self.line("}");
            }
            self.indent -= 1;
            self.line("}");
            return Ok(());
        }
        let off = self.offset(buffer, &acc.outer_indices)?;
        let mut body = f.clone();
        match folded {
            // The init runs exactly at the loop's first iteration: the register starts at it.
            Some(v) => {
                let (t, tdt) = self.expr(&subst(&v, &acc.bindings))?;
                self.line(&format!(
                    "{ct} {name} = {};",
                    strip_parens(&cast(t, tdt, dt))
                ));
                strip_init_of(&mut body.body, &acc.block.name);
            }
            None if acc.atomic => self.line(&format!("{ct} {name} = {};", int_literal(0, dt))),
            None => {
                let cur = half::load_value(dt, format!("{bname}[{off}]"));
                self.line(&format!("{ct} {name} = {cur};"))
            }
        }
        self.in_register(&acc, name.clone(), |w| w.write_serial_cuda_loop(&body))?;
        if acc.atomic {
            self.guarded_line(
                &half::atomic_add(dt, &format!("{bname} + {off}"), &name),
                false,
            );
        } else {
            let bits = half::store_bits(dt, &name);
            self.guarded_line(&format!("{bname}[{off}] = {bits};"), false);
        }
        if guarded {
            self.indent -= 1;
            self.line("}");
        }
        self.indent -= 1;
        self.line("}");
        Ok(())
    }

    /// The conjunction of `conds` as C text, if any.
    fn conjunction(&mut self, conds: &[Expr]) -> Res<Option<String>> {
        if conds.is_empty() {
            return Ok(None);
        }
        let mut texts = Vec::new();
        for c in conds {
            texts.push(self.expr(c)?.0);
        }
        Ok(Some(texts.join(" && ")))
    }

    /// A reduction whose loop is bound to `threadIdx.x`: each thread reduces its part into a
    /// register, the lanes combine theirs with butterfly shuffles, and the first thread of the
    /// group runs the block's init (if any) and combines the total into the element.
    /// A block inside the thread loop `f` (not written as a cross-thread reduction) that
    /// reduces over `f` — a reduction iterator bound to `f`'s variable — into an element its
    /// store's indices do not tie to `f`: every thread would update that element in place, a
    /// race. Returns the block's name. (An atomic block stores through `atomicAdd`, which is
    /// no store here.)
    pub(crate) fn racy_thread_reduction(&self, f: &For) -> Option<String> {
        let mut found = None;
        f.body.visit(&mut |s| {
            let Stmt::Block(b) = s else { return };
            if found.is_some() {
                return;
            }
            let reduces = b
                .iters
                .iter()
                .any(|it| it.kind == IterKind::Reduce && mentions(&it.binding, &[f.var]));
            if !reduces {
                return;
            }
            let map = bindings(b);
            let mut tied = true;
            b.body.visit(&mut |x| {
                if let Stmt::Store(st) = x {
                    tied &= st
                        .indices
                        .iter()
                        .any(|i| mentions(&subst(i, &map), &[f.var]));
                }
            });
            if !tied {
                found = Some(b.name.clone());
            }
        });
        found
    }

    pub(crate) fn write_cross_thread_reduction(
        &mut self,
        f: &For,
        acc: Accumulation<'_>,
    ) -> Res<()> {
        let name_v = self.func.vars[f.var].name.clone();
        let Some(lanes) = const_int(&f.extent)
            .filter(|n| (*n > 0 && 32 % n == 0) || (*n > 32 && n % 32 == 0 && *n <= 1024))
        else {
            return Err(self.unsupported(
                &format!("cross-thread reduction over `{name_v}`"),
                "the loop bound to threadIdx.x must have a constant extent dividing 32 (one \
                 warp: 1 to 32 lanes) or a multiple of 32 up to 1024 (several warps, combined \
                 through shared memory)",
            ));
        };
        let ctx = self.kernel.as_ref();
        let dim_x = ctx
            .and_then(|k| k.dims.get("threadIdx.x"))
            .and_then(|d| d.eval(&|_| None));
        if dim_x.is_none_or(|d| d % lanes != 0) {
            return Err(self.unsupported(
                &format!("cross-thread reduction over `{name_v}`"),
                "blockDim.x must be a constant multiple of the reduction's lanes",
            ));
        }
        // Several warps: their totals meet in shared memory, behind barriers, so the whole
        // block must be there and blockDim.x must be the reduction's extent.
        let warps = lanes / 32;
        if warps > 1 && (dim_x != Some(lanes) || ctx.is_some_and(|k| k.divergent > 0)) {
            return Err(self.unsupported(
                &format!("cross-thread reduction over `{name_v}`"),
                "a reduction over several warps needs blockDim.x equal to its extent and the \
                 whole block there (no enclosing condition or loop range that depends on a \
                 thread index)",
            ));
        }
        let guarded_above = ctx.is_some_and(|k| k.guarded_thread_depth > 0);
        if guarded_above {
            return Err(self.unsupported(
                &format!("cross-thread reduction over `{name_v}`"),
                "it sits under a guarded thread loop (a thread loop whose extent is smaller \
                 than its launch dimension): every lane must reach the shuffles",
            ));
        }
        if const_int(&f.min) != Some(0) {
            return Err(self.unsupported(
                &format!("cross-thread reduction over `{name_v}`"),
                "the loop must start at 0",
            ));
        }
        let buffer = acc.store.buffer;
        let dt = self.buf_dtype(buffer);
        let ct = self.ctype(dt, "accumulator")?;
        // 16-bit floats are float values in registers (see `half`): shuffled as floats.
        if !matches!(
            dt,
            DType::F32
                | DType::F64
                | DType::I32
                | DType::I64
                | DType::U32
                | DType::F16
                | DType::BF16
        ) {
            return Err(self.unsupported(
                &format!("cross-thread reduction over `{name_v}`"),
                format!("{dt} values cannot be shuffled"),
            ));
        }
        let identity = match (acc.op, dt.is_float()) {
            (RedOp::Add, _) => int_literal(0, dt),
            (RedOp::Max, true) => format!("(-({ct})INFINITY)"),
            (RedOp::Min, true) => format!("(({ct})INFINITY)"),
            (RedOp::Max, false) => limit_literal(dt, false),
            (RedOp::Min, false) => limit_literal(dt, true),
        };
        let combine = |a: &str, b: &str| match (acc.op, dt) {
            (RedOp::Add, _) => format!("{a} + {b}"),
            (RedOp::Max, DType::F32) => format!("fmaxf({a}, {b})"),
            (RedOp::Min, DType::F32) => format!("fminf({a}, {b})"),
            (RedOp::Max, DType::F64) => format!("fmax({a}, {b})"),
            (RedOp::Min, DType::F64) => format!("fmin({a}, {b})"),
            (RedOp::Max, _) => format!("max({a}, {b})"),
            (RedOp::Min, _) => format!("min({a}, {b})"),
        };
        let bname = self.buf_name(buffer)?.to_string();
        let name = self.namer.fresh(&format!("{bname}_red"));
        self.line(&format!(
            "{{ /* cross-thread reduction of block {} over threadIdx.x ({lanes} lanes) */",
            comment_safe(&acc.block.name)
        ));
        self.indent += 1;
        self.line(&format!("{ct} {name} = {identity};"));
        // Each thread's part: the loop nest with the element redirected to the register. The
        // block's init is left to the combining thread.
        let mut part = f.clone();
        strip_init_of(&mut part.body, &acc.block.name);
        // The redirected store is `acc = acc op e` (the element read inside becomes `acc`).
        self.in_register(&acc, name.clone(), |w| w.write_thread_loop(&part))?;
        let mut off = lanes.min(32) / 2;
        while off >= 1 {
            let shf = format!("__shfl_xor_sync(0xffffffffu, {name}, {off})");
            let c = combine(&name, &shf);
            self.line(&format!("{name} = {c};"));
            off /= 2;
        }
        if warps > 1 {
            // One slot per warp of every reduction group (the other block dimensions).
            let dims = self
                .kernel
                .as_ref()
                .map(|k| k.dims.clone())
                .unwrap_or_default();
            let dim = |t: &str| {
                dims.get(t)
                    .and_then(|d| d.eval(&|_| None))
                    .unwrap_or(1)
                    .max(1)
            };
            let (dy, dz) = (dim("threadIdx.y"), dim("threadIdx.z"));
            let slots = warps * dy * dz;
            let buf = self.namer.fresh(&format!("{bname}_warps"));
            let bytes = slots as u64 * dt.bytes() as u64;
            if let Some(k) = self.kernel.as_mut() {
                k.shared_bytes += bytes;
            }
            let group = format!("((threadIdx.z * {dy} + threadIdx.y) * {warps})");
            self.line(&format!("SPTIR_SHARED({ct}, {buf}, {slots});"));
            self.line(&format!(
                "if ((threadIdx.x & 31u) == 0u) {{ {buf}[{group} + threadIdx.x / 32u] = {name}; }}"
            ));
            self.write_barrier();
            self.line(&format!("{name} = {buf}[{group}];"));
            self.line("#pragma unroll");
            self.line(&format!("for (int32_t w = 1; w < {warps}; ++w) {{"));
            let c = combine(&name, &format!("{buf}[{group} + w]"));
            self.line(&format!("    {name} = {c};"));
            self.line("}");
            // The slots may be written again (a loop around): everyone has read them first.
            self.write_barrier();
        }
        let lead = format!("(threadIdx.x & {}u) == 0u", lanes.min(32) - 1);
        let lead = if warps > 1 {
            "threadIdx.x == 0u".to_string()
        } else {
            lead
        };
        let mut cond = match self.redundant_guard(true) {
            Some(g) => format!("{lead} && {g}"),
            None => lead,
        };
        for c in acc.combination_guards(f) {
            let (t, _) = self.expr(&c)?;
            cond = format!("{cond} && {t}");
        }
        self.line(&format!("if ({cond}) {{"));
        self.indent += 1;
        // The combination starts from a fill absorbed before the reduction, or from the
        // block's init where that stores a constant and this thread is the only one to
        // combine (`fill_start.rs`); else from the element as memory holds it.
        let start = match self.take_fill_start(f.var) {
            Some(v) => Some(v),
            None if self.lone_combiner(f) => fill_start::constant_init(&acc),
            None => None,
        };
        if let Some(init) = acc.block.init.as_ref().filter(|_| start.is_none()) {
            // The init's element is written in terms of the block's spatial iterators.
            self.line("{");
            self.indent += 1;
            let mut bound = Vec::new();
            for it in &acc.block.iters {
                if it.kind == IterKind::Reduce {
                    continue;
                }
                let vdt = self.func.vars[it.var].dtype;
                let vct = self.ctype(vdt, "block iterator")?;
                let (s, sdt) = self.expr(&it.binding)?;
                let v = self.bind(it.var)?;
                bound.push(it.var);
                self.line(&format!(
                    "const {vct} {v} = {};",
                    strip_parens(&cast(s, sdt, vdt))
                ));
            }
            let r = self.write_stmt(init);
            for v in bound {
                self.unbind(v);
            }
            r?;
            self.indent -= 1;
            self.line("}");
        }
        let off_t = self.offset(buffer, &acc.outer_indices)?;
        let cur = match &start {
            Some(v) => {
                let (t, tdt) = self.expr(v)?;
                cast(t, tdt, dt)
            }
            None => half::load_value(dt, format!("{bname}[{off_t}]")),
        };
        let c = combine(&cur, &name);
        self.line(&format!("{bname}[{off_t}] = {};", half::store_bits(dt, &c)));
        self.indent -= 1;
        self.line("}");
        self.indent -= 1;
        self.line("}");
        Ok(())
    }
}

/// Removes the init of block `name` under `s`.
fn strip_init_of(s: &mut Stmt, name: &str) {
    if let Stmt::Block(b) = s {
        if b.name == name {
            b.init = None;
            return;
        }
    }
    s.for_each_child_mut(|c| strip_init_of(c, name));
}
