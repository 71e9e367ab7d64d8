//! Reductions of the C writer: `simd_reduction` loops (the `omp simd reduction` form, versioned
//! by trip count with `simd_min_trip`), their lane-parallel partial sums (one vector or an array
//! of lanes for constant trip counts, scalar chains for run-time ones), and unroll-and-jam
//! (`jam`) of lane reductions.

use super::vector::VecLoop;
use super::vector_math;
use super::*;

impl<'f> Writer<'f> {
    /// A loop annotated `{"jam": U}` whose body is a `simd_reduction` loop with lanes:
    /// `U` consecutive iterations at a time, their reductions jammed into one lane loop
    /// (see [`Writer::write_simd_reduction`]), then the remaining iterations one by one.
    pub(super) fn write_jam(&mut self, f: &For, ann: &AttrValue) -> Res<()> {
        const WHAT: &str = "loop annotation `jam`";
        let u = match ann {
            AttrValue::Int(n) if (2..=16).contains(n) => *n,
            other => {
                return Err(self.unsupported(
                    WHAT,
                    format!("expected an integer from 2 to 16, got {other:?}"),
                ))
            }
        };
        if !matches!(f.kind, ForKind::Serial | ForKind::Parallel) {
            return Err(self.unsupported(
                WHAT,
                format!(
                    "the loop is {}, not serial or parallel",
                    f.kind.script_name()
                ),
            ));
        }
        if matches!(f.annotations.get(SCHEDULE_ATTR), Some(AttrValue::Str(s)) if s == NNZ_BALANCED)
        {
            return Err(self.unsupported(WHAT, "a loop with `schedule: nnz_balanced`"));
        }
        let inner = match f.body.single() {
            Stmt::For(l) => l,
            _ => {
                return Err(self.unsupported(
                    WHAT,
                    "the loop's body is not exactly one `simd_reduction` loop",
                ))
            }
        };
        let Some(red) = inner.annotations.get(SIMD_REDUCTION_ATTR) else {
            return Err(self.unsupported(
                WHAT,
                "the loop's body is not exactly one `simd_reduction` loop",
            ));
        };
        // Jamming needs lane-parallel partial sums: a `+` reduction over constant bounds (a
        // kernel whose feature width is not specialised has none). Otherwise the annotation
        // is a hint that does not apply, and the loop is written as usual.
        let dt = match inner.body.single() {
            Stmt::Block(b) => match b.body.single() {
                Stmt::Store(st) => self.func.buffers.get(st.buffer).map(|x| x.dtype),
                _ => None,
            },
            _ => None,
        };
        let lanes_apply = matches!(red, AttrValue::Str(op) if op == "+")
            && dt.is_some_and(|dt| {
                matches!(self.reduction_lanes(inner, BinOp::Add, dt), Ok(Some(_)))
            });
        if !lanes_apply {
            return self.write_loop(f, None);
        }
        let (vdt, ct, vname) = self.loop_var_type(f)?;
        let parallel = if f.kind == ForKind::Parallel {
            Some(self.parallel_pragma(f)?)
        } else {
            None
        };
        self.line("{");
        self.indent += 1;
        let (start, end) = self.loop_range(f, vdt, ct, &vname)?;
        let v = self.bind(f.var)?;
        let r = (|| -> Res<()> {
            // Parallel: groups of `u` iterations in parallel, then the last `< u` ones serially
            // from the first iteration past the groups.
            let mut rest_start = None;
            if let Some(pragma) = &parallel {
                let groups = self.namer.fresh(&format!("{v}_groups"));
                let g = self.namer.fresh(&format!("{v}_g"));
                self.line(&format!(
                    "const int64_t {groups} = {end} > {start} ? ((int64_t){end} - (int64_t){start}) / {u} : 0;"
                ));
                self.pragma(pragma);
                self.line(&format!("for (int64_t {g} = 0; {g} < {groups}; ++{g}) {{"));
                self.indent += 1;
                self.line(&format!("const {ct} {v} = ({ct})({start} + {g} * {u});"));
                rest_start = Some(format!("({ct})({start} + {groups} * {u})"));
            } else {
                self.line(&format!("{ct} {v} = {start};"));
                self.line(&format!("for (; {v} <= {end} - {u}; {v} += {u}) {{"));
                self.indent += 1;
            }
            let texts: Vec<String> = (0..u)
                .map(|k| {
                    if k == 0 {
                        v.clone()
                    } else {
                        format!("({v} + {k})")
                    }
                })
                .collect();
            if let Some(p) = f.annotations.get(PREFETCH_ATTR) {
                for t in &texts {
                    self.write_prefetch(f, p, t, &end)?;
                }
            }
            self.write_simd_reduction(inner, red, Some((f.var, &texts)), None)?;
            self.indent -= 1;
            self.line("}");
            match &rest_start {
                Some(r) => self.line(&format!("for ({ct} {v} = {r}; {v} < {end}; ++{v}) {{")),
                None => self.line(&format!("for (; {v} < {end}; ++{v}) {{")),
            }
            self.indent += 1;
            if let Some(p) = f.annotations.get(PREFETCH_ATTR) {
                self.write_prefetch(f, p, &v, &end)?;
            }
            self.write_stmt(&f.body)?;
            self.indent -= 1;
            self.line("}");
            Ok(())
        })();
        self.unbind(f.var);
        r?;
        self.indent -= 1;
        self.line("}");
        Ok(())
    }

    /// A loop annotated `{"simd_reduction": OP}` (schedule primitive `vectorize_reduction`):
    /// its body is one block whose only statement is `Y[idx] = Y[idx] OP e` with `idx` invariant
    /// in the loop. Written as
    /// `{ T acc = Y[idx]; #pragma omp simd reduction(OP: acc) for (...) { acc = acc OP e; }
    /// Y[idx] = acc; }`: the lanes' partial results are combined at the end (the annotation is
    /// the user's permission to reassociate). Float `max`/`min` use a declared reduction built
    /// on `fmaxf`/`fminf` with NaN as identity, so NaNs are ignored exactly as the evaluator's
    /// `max`/`min` do, in any order.
    ///
    /// `jam`: the variable of the enclosing loop and the texts it takes in the copies of the
    /// reduction written side by side (unroll-and-jam, loop annotation `"jam"`): one lane loop
    /// updates every copy's partial sums, so the loop-invariant operand is loaded once for all.
    ///
    /// `outer`: a serial loop whose whole body is `f` (see [`Writer::reduction_across`]): the
    /// lanes then accumulate across it too, their totals taken once after it.
    pub(super) fn write_simd_reduction(
        &mut self,
        f: &For,
        ann: &AttrValue,
        jam: Option<(VarId, &[String])>,
        outer: Option<&For>,
    ) -> Res<()> {
        const WHAT: &str = "loop annotation `simd_reduction`";
        let Some(op) = reduction_op(ann) else {
            return Err(self.unsupported(
                WHAT,
                format!("expected \"+\", \"max\" or \"min\", got {ann:?}"),
            ));
        };
        if !matches!(f.kind, ForKind::Serial | ForKind::Vectorized) {
            return Err(self.unsupported(
                WHAT,
                format!("the loop is {}, not vectorized", f.kind.script_name()),
            ));
        }
        if self.simd_acc.is_some() {
            return Err(self.unsupported(WHAT, "a SIMD reduction nested in another one"));
        }
        let Stmt::Block(b) = f.body.single() else {
            return Err(self.unsupported(WHAT, "the loop's body is not exactly one block"));
        };
        let Stmt::Store(st) = b.body.single() else {
            return Err(self.unsupported(
                WHAT,
                format!("the body of block `{}` is not a single store", b.name),
            ));
        };
        // An init that runs exactly at the loop's first iteration and only sets the element
        // becomes the accumulator's start value.
        let init_value = b.init_folded_into(f.var, &f.min, st.buffer, &st.indices);
        if b.init.is_some() && init_value.is_none() {
            return Err(self.unsupported(
                WHAT,
                format!(
                    "block `{}` has an init that does not run exactly at the loop's first \
                     iteration (decompose the reduction first)",
                    b.name
                ),
            ));
        }
        // The init's effect is the accumulator's start value; the loop body runs without it.
        let stripped;
        let f = if init_value.is_some() {
            let mut g = f.clone();
            strip_block_init(&mut g.body);
            stripped = g;
            &stripped
        } else {
            f
        };
        let Expr::Binary(sop, x, y) = &st.value else {
            return Err(self.unsupported(WHAT, "the store is not `Y[idx] = Y[idx] op e`"));
        };
        let is_self = |e: &Expr| matches!(e, Expr::Load { buffer, indices } if *buffer == st.buffer && *indices == st.indices);
        let value = match (is_self(x), is_self(y)) {
            (true, _) => y,
            (false, true) => x,
            _ => return Err(self.unsupported(WHAT, "the store is not `Y[idx] = Y[idx] op e`")),
        };
        if *sop != op {
            return Err(self.unsupported(
                WHAT,
                format!("the store combines with {sop:?}, the annotation says {ann:?}"),
            ));
        }
        let reads_y = |e: &Expr| {
            let mut found = false;
            e.visit(&mut |z| {
                if let Expr::Load { buffer, .. } = z {
                    found |= *buffer == st.buffer;
                }
            });
            found
        };
        if reads_y(value)
            || st.indices.iter().any(reads_y)
            || b.predicate.as_ref().is_some_and(reads_y)
        {
            return Err(self.unsupported(WHAT, "the reduced value reads the reduced buffer"));
        }
        // Iterators that move with the loop must be reduction iterators absent from `idx`.
        let mut moving = vec![f.var];
        moving.extend(outer.map(|g| g.var));
        let loop_vars = moving.clone();
        for it in &b.iters {
            if mentions(&it.binding, &loop_vars) {
                if it.kind != IterKind::Reduce {
                    return Err(self.unsupported(
                        WHAT,
                        "the loop variable feeds a spatial iterator of the block",
                    ));
                }
                moving.push(it.var);
            }
        }
        let mut moves = false;
        for e in &st.indices {
            e.visit(&mut |z| moves |= matches!(z, Expr::Var(v) if moving.contains(v)));
        }
        if moves {
            return Err(self.unsupported(WHAT, "the reduced element changes with the loop"));
        }
        let dt = self.buf_dtype(st.buffer);
        if !(dt.is_integer() || dt.is_float()) {
            return Err(self.unsupported(WHAT, format!("a reduction of {dt} values")));
        }
        let ct = self.ctype(dt, "reduction accumulator")?;
        let copies: Vec<Option<String>> = match jam {
            Some((_, texts)) => texts.iter().map(|t| Some(t.clone())).collect(),
            None => vec![None],
        };
        let mut planned = Vec::new();
        for copy in &copies {
            if let (Some((jv, _)), Some(t)) = (jam, copy) {
                self.let_subst.insert(jv, t.clone());
            }
            // The element's offset outside the loop: the block's other iterators are replaced by
            // their bindings (in terms of loops that are bound here).
            let mut substituted = Vec::new();
            for it in &b.iters {
                if moving.contains(&it.var) || self.let_subst.contains_key(&it.var) {
                    continue;
                }
                let idt = self
                    .func
                    .vars
                    .get(it.var)
                    .map(|v| v.dtype)
                    .unwrap_or(DType::I32);
                let text = match self.expr(&it.binding) {
                    Ok((s, sdt)) => cast(s, sdt, idt),
                    Err(e) => {
                        substituted.iter().for_each(|v| {
                            self.let_subst.remove(v);
                        });
                        return Err(e);
                    }
                };
                self.let_subst.insert(it.var, text);
                substituted.push(it.var);
            }
            // The element is only touched when the loop runs at least once and the parts of the
            // block's predicate that do not move with the loop hold (they may guard `idx`).
            let mut conds: Vec<&Expr> = Vec::new();
            if let Some(p) = &b.predicate {
                conjuncts(p, &mut conds);
                conds.retain(|c| {
                    let mut m = false;
                    c.visit(&mut |z| m |= matches!(z, Expr::Var(v) if moving.contains(v)));
                    !m
                });
            }
            let guard = (|| -> Res<Vec<String>> {
                let mut out = Vec::new();
                if const_int(&f.extent).is_none_or(|n| n <= 0) {
                    let (e, _) = self.expr(&f.extent)?;
                    out.push(format!("{} > 0", strip_parens(&e)));
                }
                for c in &conds {
                    out.push(strip_parens(&self.expr(c)?.0).to_string());
                }
                Ok(out)
            })();
            // Loads that do not move with the loop are read once before it (gcc does not hoist
            // them out of an `omp simd` loop by itself and falls back to gathers). Only when the
            // whole predicate is hoisted too: a load is then read exactly when the loop would read
            // it at least once. Loads under a `Select` branch or the right side of `and`/`or`
            // (evaluated conditionally) stay inside.
            let all_hoisted = b.predicate.as_ref().is_none_or(|p| {
                let mut all = Vec::new();
                conjuncts(p, &mut all);
                all.len() == conds.len()
            });
            let mut loads = Vec::new();
            if all_hoisted {
                let outer = |w: &Self, v: VarId| {
                    w.bound.get(v.index()).copied().unwrap_or(false) || w.let_subst.contains_key(&v)
                };
                invariant_loads(value, &|v| outer(self, v), &mut loads);
            }
            let off = guard.and_then(|g| {
                let mut texts = Vec::new();
                for l in &loads {
                    texts.push(self.expr(l)?);
                }
                let start = match init_value {
                    Some(v) => {
                        let (t, vdt) = self.expr(v)?;
                        Some(cast(t, vdt, dt))
                    }
                    None => None,
                };
                Ok((g, self.offset(st.buffer, &st.indices)?, texts, start))
            });
            for v in &substituted {
                self.let_subst.remove(v);
            }
            if let Some((jv, _)) = jam {
                self.let_subst.remove(&jv);
            }
            planned.push((off?, loads));
        }
        if jam.is_some() {
            if planned.iter().any(|((g, ..), _)| !g.is_empty()) {
                return Err(self.unsupported(
                    "loop annotation `jam`",
                    "the reduction is guarded (a loop of unknown extent or a predicate)",
                ));
            }
            if self.reduction_lanes(f, op, dt)?.is_none() {
                return Err(self.unsupported(
                    "loop annotation `jam`",
                    "the reduction has no lane-parallel partial sums (constant bounds, `+`)",
                ));
            }
        }
        let name = self.buf_name(st.buffer)?.to_string();
        let mut lane_copies = Vec::new();
        let mut finals = Vec::new();
        let n_copies = planned.len();
        for (ci, ((guard, off, texts, start), loads)) in planned.into_iter().enumerate() {
            let acc = self.namer.fresh(&format!("{name}_acc"));
            let sym = match op {
                BinOp::Add => "+",
                BinOp::Max => "max",
                _ => "min",
            };
            if guard.is_empty() {
                self.line(&format!("{{ /* SIMD reduction ({sym}) into {name} */"));
            } else {
                self.line(&format!(
                    "if ({}) {{ /* SIMD reduction ({sym}) into {name} */",
                    guard.join(" && ")
                ));
            }
            self.indent += 1;
            match &start {
                Some(v) => self.line(&format!("{ct} {acc} = {};", strip_parens(v))),
                None => self.line(&format!("{ct} {acc} = {name}[{off}];")),
            }
            let mut hoisted = Vec::new();
            for (l, (text, ldt)) in loads.into_iter().zip(texts) {
                let base = match &l {
                    Expr::Load { buffer, .. } => self.buf_name(*buffer)?.to_string(),
                    _ => "v".to_string(),
                };
                let local = self.namer.fresh(&format!("{base}_h"));
                let lct = self.ctype(ldt, "hoisted load")?;
                self.line(&format!("const {lct} {local} = {};", strip_parens(&text)));
                hoisted.push((l, local));
            }
            let mut lanes = self.reduction_lanes(f, op, dt)?;
            if op != BinOp::Add {
                // `max`/`min` lanes exist only in the vector form.
                lanes = lanes.filter(|&n| {
                    self.lane_vector_plan(f, &f.body, st.buffer, &st.indices, n, dt)
                        .is_some()
                });
            }
            if let Some(lanes) = lanes {
                // A product with a hoisted (loop-invariant) factor: the factor multiplies the total
                // once instead of every term (distributivity, part of the reassociation permission).
                let mut factor = None;
                let mut body = f.body.clone();
                let product = match value.as_ref() {
                    Expr::Binary(BinOp::Mul, a, c) if op == BinOp::Add => Some((a, c)),
                    _ => None,
                };
                if let Some((a, c)) = product {
                    // A hoisted 16-bit load is also the factor as `T.Cast("float32", ..)`:
                    // its local holds the value in `float` already (the conversion is exact).
                    let local_of = |e: &Expr| {
                        let e = match e {
                            Expr::Cast(DType::F32, inner)
                                if matches!(inner.as_ref(), Expr::Load { buffer, .. }
                                    if half::is_half(self.buf_dtype(*buffer))) =>
                            {
                                inner.as_ref()
                            }
                            _ => e,
                        };
                        hoisted.iter().find(|(l, _)| l == e).map(|h| h.1.clone())
                    };
                    let split = match (local_of(c), local_of(a)) {
                        (Some(h), _) => Some((h, a.as_ref().clone())),
                        (None, Some(h)) => Some((h, c.as_ref().clone())),
                        _ => None,
                    };
                    if let Some((h, rest)) = split {
                        if dt.is_float() {
                            let y = Expr::Load {
                                buffer: st.buffer,
                                indices: st.indices.clone(),
                            };
                            let nv = if is_self(x) {
                                Expr::Binary(BinOp::Add, Box::new(y), Box::new(rest))
                            } else {
                                Expr::Binary(BinOp::Add, Box::new(rest), Box::new(y))
                            };
                            if replace_single_store_value(&mut body, nv) {
                                factor = Some(h);
                            } else {
                                body = f.body.clone();
                            }
                        }
                    }
                }
                let subst = jam.and_then(|(jv, _)| copies[ci].clone().map(|t| (jv, t)));
                lane_copies.push(LaneCopy {
                    subst,
                    hoisted,
                    acc: acc.clone(),
                });
                finals.push((off, acc, factor));
                if ci + 1 < n_copies {
                    continue;
                }
                let totals = self.write_lane_reduction(
                    (f, outer),
                    &body,
                    (lanes, op),
                    st.buffer,
                    &st.indices,
                    &lane_copies,
                    ct,
                )?;
                for ((off, acc, factor), total) in finals.iter().zip(&totals) {
                    let both = match factor {
                        Some(h) => format!("{acc} + {h} * {total}"),
                        None => scalar_combine(op, dt, acc, total),
                    };
                    self.line(&format!("{name}[{off}] = {both};"));
                }
                for _ in 0..n_copies {
                    self.indent -= 1;
                    self.line("}");
                }
                return Ok(());
            }
            // The OpenMP clause, and for float `max`/`min` the declared reduction it names
            // (written just before the `omp simd` loop that uses it).
            let clause = match (op, dt) {
                (BinOp::Max | BinOp::Min, DType::F32 | DType::F64) => {
                    let (fun, nan) = match (op, dt) {
                        (BinOp::Max, DType::F32) => ("fmaxf", "NAN"),
                        (BinOp::Min, DType::F32) => ("fminf", "NAN"),
                        (BinOp::Max, _) => ("fmax", "(double)NAN"),
                        _ => ("fmin", "(double)NAN"),
                    };
                    let red = format!("sptir_{fun}");
                    let declare = format!(
                        "omp declare reduction({red} : {ct} : omp_out = {fun}(omp_out, omp_in)) \
                     initializer(omp_priv = {nan})"
                    );
                    (Some(declare), format!("reduction({red}:{acc})"))
                }
                _ => (None, format!("reduction({sym}:{acc})")),
            };
            self.simd_acc = Some(SimdAcc {
                buffer: st.buffer,
                indices: st.indices.clone(),
                name: acc.clone(),
                hoisted,
            });
            let r = self.write_versioned_simd_loop(f, &clause, op);
            self.simd_acc = None;
            r?;
            self.line(&format!("{name}[{off}] = {acc};"));
            self.indent -= 1;
            self.line("}");
            return Ok(());
        }
        Ok(())
    }

    /// The `omp simd reduction` loop of a `simd_reduction`, versioned by trip count where the
    /// loop asks for it ([`SIMD_MIN_TRIP_ATTR`]): `if (extent >= N) { SIMD } else { scalar }`.
    pub(super) fn write_versioned_simd_loop(
        &mut self,
        f: &For,
        (declare, clause): &(Option<String>, String),
        op: BinOp,
    ) -> Res<()> {
        let min_trip = match f.annotations.get(SIMD_MIN_TRIP_ATTR) {
            None => None,
            Some(AttrValue::Int(n)) if *n >= 1 => Some(*n),
            Some(other) => {
                return Err(self.unsupported(
                    "loop annotation `simd_min_trip`",
                    format!("expected a positive integer, got {other:?}"),
                ))
            }
        };
        let Some(n) = min_trip.filter(|_| const_int(&f.extent).is_none()) else {
            if let Some(d) = declare {
                self.pragma(d);
            }
            return self.write_loop(f, Some(format!("omp simd {clause}")));
        };
        if self.write_gathered_scalar_loop(f, op)? {
            return Ok(());
        }
        if let Some(d) = declare {
            self.pragma(d);
        }
        let (ext, _) = self.expr(&f.extent)?;
        self.line(&format!("if ({} >= {n}) {{", strip_parens(&ext)));
        self.indent += 1;
        let r = self.write_loop(f, Some(format!("omp simd {clause}")));
        self.indent -= 1;
        r?;
        self.line("} else {");
        self.indent += 1;
        let mut scalar = f.clone();
        scalar.kind = ForKind::Serial;
        scalar.annotations = Default::default();
        let r = self.write_loop(&scalar, None);
        self.indent -= 1;
        r?;
        self.line("}");
        Ok(())
    }

    /// The versioned `+` reduction of run-time trip count as the AVX-512 gather main loop
    /// ([`Writer::write_gather_main`]) followed by one scalar chain for the rest (short rows,
    /// and the last `< 16` iterations of long ones; the whole loop where the machine has no
    /// AVX-512). `Ok(false)` (nothing written) when the body has no gather plan.
    fn write_gathered_scalar_loop(&mut self, f: &For, op: BinOp) -> Res<bool> {
        let Some(acc) = self.simd_acc.as_ref().map(|a| {
            (
                a.buffer,
                a.indices.clone(),
                a.name.clone(),
                a.hoisted.clone(),
            )
        }) else {
            return Ok(false);
        };
        let (buffer, indices, name, hoisted) = acc;
        if !(op == BinOp::Add || self.buf_dtype(buffer).is_float()) {
            return Ok(false);
        }
        let Some(plan) = self.gather_plan(f, &f.body, buffer, &indices) else {
            return Ok(false);
        };
        let (_, end, chunk) = self.declare_run_bounds(f)?;
        // The vector copies write into their own accumulators; the reduced element stays `name`.
        let saved = self.simd_acc.take();
        let r = self.write_gather_main(
            f,
            (plan, op),
            &f.body,
            buffer,
            &indices,
            (&name, &name),
            (&chunk, &end),
            &hoisted,
        );
        self.simd_acc = saved;
        r?;
        self.line(&format!("for (; {chunk} < {end}; ++{chunk}) {{"));
        self.indent += 1;
        self.let_subst.insert(f.var, chunk.clone());
        let r = self.write_stmt(&f.body);
        self.let_subst.remove(&f.var);
        self.indent -= 1;
        r?;
        self.line("}");
        Ok(true)
    }

    /// A serial loop `g` whose whole body is a `simd_reduction` loop `f` with lanes in the
    /// vector form (constant bounds) into an element that does not move with `g` either
    /// (`g` feeds only reduction iterators of the block, which has no init): `f` and its
    /// annotation. Such a nest (a BSR row's blocks, 16 elements each) keeps the lanes across
    /// `g` and takes their totals once, instead of once per iteration of `g`.
    pub(super) fn reduction_across<'g>(&self, g: &'g For) -> Option<(&'g For, &'g AttrValue)> {
        if g.kind != ForKind::Serial || !g.annotations.is_empty() {
            return None;
        }
        let Stmt::For(f) = g.body.single() else {
            return None;
        };
        let ann = f.annotations.get(SIMD_REDUCTION_ATTR)?;
        if f.annotations.get(JAM_ATTR).is_some()
            || f.annotations.get(SIMD_MIN_TRIP_ATTR).is_some()
            || half::loop_stores_half(self.func, f)
        {
            return None;
        }
        let op = reduction_op(ann)?;
        let Stmt::Block(b) = f.body.single() else {
            return None;
        };
        let Stmt::Store(st) = b.body.single() else {
            return None;
        };
        if b.init.is_some() {
            return None;
        }
        if mentions(&f.min, &[g.var]) || mentions(&f.extent, &[g.var]) {
            return None;
        }
        let mut moving = vec![g.var];
        for it in &b.iters {
            if mentions(&it.binding, &[g.var]) {
                if it.kind != IterKind::Reduce {
                    return None;
                }
                moving.push(it.var);
            }
        }
        if st.indices.iter().any(|e| mentions(e, &moving)) {
            return None;
        }
        let dt = self.buf_dtype(st.buffer);
        let lanes = self.reduction_lanes(f, op, dt).ok()??;
        self.lane_vector_plan(f, &f.body, st.buffer, &st.indices, lanes, dt)?;
        Some((f, ann))
    }

    /// `for (v = start; v < end; ++v) { inner }` for the serial loop `g`, `inner` writing its
    /// body.
    fn write_serial_around(
        &mut self,
        g: &For,
        inner: impl FnOnce(&mut Self) -> Res<()>,
    ) -> Res<()> {
        let (vdt, ct, vname) = self.loop_var_type(g)?;
        let (start, end) = self.loop_range(g, vdt, ct, &vname)?;
        let v = self.bind(g.var)?;
        self.line(&format!("for ({ct} {v} = {start}; {v} < {end}; ++{v}) {{"));
        self.indent += 1;
        let r = inner(self);
        self.indent -= 1;
        self.unbind(g.var);
        r?;
        self.line("}");
        Ok(())
    }

    /// The number of lane-parallel partial sums of a `simd_reduction` loop, or `None` for the
    /// plain `omp simd reduction` form. Lanes apply to `+` over a loop with constant bounds
    /// (and to float `max`/`min` there, where the loop has the vector form):
    /// the loop annotation `"lanes"` (a power of two from 1 to 64; 1 turns lanes off) or, by
    /// default, one 64-byte vector of the accumulator type (16 `float`s), halved until it fits
    /// the trip count.
    pub(super) fn reduction_lanes(&self, f: &For, op: BinOp, dt: DType) -> Res<Option<i64>> {
        let asked = match f.annotations.get(LANES_ATTR) {
            None => None,
            Some(AttrValue::Int(n)) if (1..=64).contains(n) && (*n as u64).is_power_of_two() => {
                Some(*n)
            }
            Some(other) => {
                return Err(self.unsupported(
                    "loop annotation `lanes`",
                    format!("expected a power of two from 1 to 64, got {other:?}"),
                ))
            }
        };
        let float_extreme = matches!(op, BinOp::Max | BinOp::Min) && dt.is_float();
        if op != BinOp::Add && !float_extreme {
            return Ok(None);
        }
        let (Some(_), Some(ext)) = (const_int(&f.min), const_int(&f.extent)) else {
            if float_extreme {
                return Ok(None);
            }
            // A data-dependent trip count: lanes only where the schedule asks for them (the
            // scalar form of `write_lane_reduction`).
            return Ok(asked.filter(|n| *n > 1));
        };
        let mut lanes = match asked {
            Some(n) => n,
            None => {
                let bytes = i64::from(dt.bits().max(8) / 8);
                (64 / bytes).max(1)
            }
        };
        if asked.is_none() {
            while lanes > 1 && lanes > ext {
                lanes /= 2;
            }
        }
        Ok((lanes > 1 && ext >= lanes).then_some(lanes))
    }

    /// Every copy's update of a lane reduction, one after the other in the same lane loop (the
    /// copies differ only in the enclosing loop's variable): the reduced element redirected to
    /// `acc_of(copy)`, the copy's hoisted loads read from their locals.
    pub(super) fn write_lane_copies(
        &mut self,
        body: &Stmt,
        buffer: BufferId,
        indices: &[Expr],
        copies: &[LaneCopy],
        acc_of: impl Fn(&LaneCopy) -> String,
    ) -> Res<()> {
        for c in copies {
            self.simd_acc = Some(SimdAcc {
                buffer,
                indices: indices.to_vec(),
                name: acc_of(c),
                hoisted: c.hoisted.clone(),
            });
            if let Some((jv, t)) = &c.subst {
                self.let_subst.insert(*jv, t.clone());
            }
            let r = self.write_stmt(body);
            if let Some((jv, _)) = &c.subst {
                self.let_subst.remove(jv);
            }
            self.simd_acc = None;
            r?;
        }
        Ok(())
    }

    /// [`Writer::write_lane_copies`] with loop `var` read as the C text `at`.
    #[allow(clippy::too_many_arguments)]
    fn write_copies_at(
        &mut self,
        var: VarId,
        at: String,
        body: &Stmt,
        buffer: BufferId,
        indices: &[Expr],
        copies: &[LaneCopy],
        acc_of: impl Fn(&LaneCopy) -> String,
    ) -> Res<()> {
        self.let_subst.insert(var, at);
        let r = self.write_lane_copies(body, buffer, indices, copies, acc_of);
        self.let_subst.remove(&var);
        r
    }

    /// The AVX-512 main loop of a `+` reduction of run-time trip count whose loop asks for
    /// `simd_min_trip` `N`: where the machine has AVX-512 and at least `max(N, 16)` iterations
    /// remain, 32 iterations at a time into two vector accumulators (two independent FMA
    /// chains) while 32 remain, then 16 into one, contiguous loads as vector loads and
    /// `X[I[v]]` as gathers (`plan`, from [`Writer::gather_plan`]); the total is added to the
    /// scalar `target`, and `chunk` is left at the first iteration not done.
    #[allow(clippy::too_many_arguments)]
    fn write_gather_main(
        &mut self,
        f: &For,
        ((plan, min_trip), op): ((VecLoop, i64), BinOp),
        body: &Stmt,
        buffer: BufferId,
        indices: &[Expr],
        (acc_base, target): (&str, &str),
        (chunk, end): (&str, &str),
        hoisted: &[(Expr, String)],
    ) -> Res<()> {
        let dt = self.buf_dtype(buffer);
        let ty = vector::lane_type(dt, 16);
        self.lane_types.insert((dt, 16));
        self.uses_gathers = true;
        let acc = format!("{acc_base}_v");
        let acc2 = format!("{acc_base}_v2");
        let copy = LaneCopy {
            subst: None,
            hoisted: hoisted.to_vec(),
            acc: acc_base.to_string(),
        };
        let masked = matches!(
            f.annotations.get(SIMD_MASKED_TAIL_ATTR),
            Some(AttrValue::Int(1)) | Some(AttrValue::Bool(true))
        );
        self.line("#if defined(__AVX512F__)");
        if masked {
            self.line("{");
        } else {
            self.line(&format!("if ({end} - {chunk} >= {}) {{", min_trip.max(16)));
        }
        self.indent += 1;
        let start = vector_math::lane_identity(op, &ty, dt);
        self.line(&format!("{ty} {acc} = {start}, {acc2} = {start};"));
        let outer = self.vec_loop.replace(plan);
        let r = (|| -> Res<()> {
            for (step, accs) in [
                (32, vec![acc.clone(), acc2.clone()]),
                (16, vec![acc.clone()]),
            ] {
                self.line(&format!(
                    "for (; {chunk} + {step} <= {end}; {chunk} += {step}) {{"
                ));
                self.indent += 1;
                for (k, a) in accs.iter().enumerate() {
                    let at = if k == 0 {
                        chunk.to_string()
                    } else {
                        format!("({chunk} + {})", 16 * k)
                    };
                    let copies = std::slice::from_ref(&copy);
                    self.write_copies_at(f.var, at, body, buffer, indices, copies, |_| a.clone())?;
                }
                self.indent -= 1;
                self.line("}");
            }
            Ok(())
        })();
        let r = r.and_then(|()| {
            if !masked {
                return Ok(());
            }
            // The last `end - chunk < 16` iterations: one step over the lanes that exist.
            let k = self.namer.fresh("tail_k");
            let tmp = format!("{acc_base}_t");
            self.line(&format!(
                "const __mmask16 {k} = (__mmask16)((1u << ({end} - {chunk})) - 1u);"
            ));
            self.line(&format!("{ty} {tmp} = {start};"));
            if let Some(vl) = self.vec_loop.as_mut() {
                vl.mask = Some(k.clone());
            }
            let copies = std::slice::from_ref(&copy);
            self.write_copies_at(
                f.var,
                chunk.to_string(),
                body,
                buffer,
                indices,
                copies,
                |_| tmp.clone(),
            )?;
            // Lanes past the end hold whatever the value makes of zeros: drop them (0 for
            // `+`, NaN for `max`/`min`).
            let kept = match op {
                BinOp::Add => format!("(({ty})_mm512_maskz_mov_ps({k}, (__m512){tmp}))"),
                _ => format!("(({ty})_mm512_mask_mov_ps(_mm512_set1_ps(NAN), {k}, (__m512){tmp}))"),
            };
            let both = self.lane_combine(op, &ty, dt, &acc2, &kept);
            self.line(&format!("{acc2} = {both};"));
            self.line(&format!("{chunk} = {end};"));
            Ok(())
        });
        self.vec_loop = outer;
        r?;
        let both = self.lane_combine(op, &ty, dt, &acc, &acc2);
        self.line(&format!("{acc} = {both};"));
        let total = self.write_lane_vector_totals(std::slice::from_ref(&acc), (16, op), dt);
        if let Some(t) = total.first() {
            let sum = scalar_combine(op, dt, target, t);
            self.line(&format!("{target} = {sum};"));
        }
        self.indent -= 1;
        self.line("}");
        self.line("#endif");
        Ok(())
    }

    /// The gather plan of a `+` reduction of run-time trip count whose loop asks for
    /// `simd_min_trip` `N`, with `N` (see [`Writer::write_gather_main`]); `None` when the loop
    /// does not ask or its body has no such plan.
    fn gather_plan(
        &self,
        f: &For,
        body: &Stmt,
        buffer: BufferId,
        indices: &[Expr],
    ) -> Option<(VecLoop, i64)> {
        let Some(AttrValue::Int(n)) = f.annotations.get(SIMD_MIN_TRIP_ATTR) else {
            return None;
        };
        let plan = self.gather_lane_plan(f, body, buffer, indices, self.buf_dtype(buffer))?;
        Some((plan, *n))
    }

    /// Declares the C bounds of loop `f` walked by hand: `{v}_lo` (its start), `{v}_hi` (one
    /// past its end) and the cursor `{v}_c`, set to the start; returns their names.
    fn declare_run_bounds(&mut self, f: &For) -> Res<(String, String, String)> {
        let (min, mdt) = self.expr(&f.min)?;
        let (ext, edt) = self.expr(&f.extent)?;
        let (vdt, lct, vname) = self.loop_var_type(f)?;
        let start = self.namer.fresh(&format!("{vname}_lo"));
        let end = self.namer.fresh(&format!("{vname}_hi"));
        let chunk = self.namer.fresh(&format!("{vname}_c"));
        self.line(&format!("const {lct} {start} = {};", cast(min, mdt, vdt)));
        self.line(&format!(
            "const {lct} {end} = {start} + {};",
            cast(ext, edt, vdt)
        ));
        self.line(&format!("{lct} {chunk} = {start};"));
        Ok((start, end, chunk))
    }

    /// A lane reduction over a loop whose trip count is only known at run time (an SpMV row):
    /// `lanes` scalar partial sums per copy, `{acc}_s0 .. {acc}_s{L-1}`, updated by `lanes`
    /// copies of the body per step (no `omp simd`: lanes over gathered operands would become
    /// vector gathers, slower than independent scalar chains), the last `< lanes` iterations
    /// added into `{acc}_s0`, then a pairwise sum. What it buys is independent dependency
    /// chains: one accumulator per row waits a whole FMA latency per stored element.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn write_scalar_lanes(
        &mut self,
        f: &For,
        body: &Stmt,
        lanes: i64,
        buffer: BufferId,
        indices: &[Expr],
        copies: &[LaneCopy],
        ct: &str,
    ) -> Res<Vec<String>> {
        for c in copies {
            let parts: Vec<String> = (0..lanes).map(|l| format!("{}_s{l} = 0", c.acc)).collect();
            self.line(&format!("{ct} {};", parts.join(", ")));
        }
        let (_, end, chunk) = self.declare_run_bounds(f)?;
        let plan = self.gather_plan(f, body, buffer, indices);
        if let ([copy], Some(plan)) = (copies, plan) {
            let s0 = format!("{}_s0", copy.acc);
            self.write_gather_main(
                f,
                (plan, BinOp::Add),
                body,
                buffer,
                indices,
                (&copy.acc, &s0),
                (&chunk, &end),
                &copy.hoisted,
            )?;
        }
        self.line(&format!(
            "for (; {chunk} + {lanes} <= {end}; {chunk} += {lanes}) {{"
        ));
        self.indent += 1;
        let r = (|| -> Res<()> {
            for l in 0..lanes {
                let at = format!("({chunk} + {l})");
                self.write_copies_at(f.var, at, body, buffer, indices, copies, |c| {
                    format!("{}_s{l}", c.acc)
                })?;
            }
            Ok(())
        })();
        self.indent -= 1;
        r?;
        self.line("}");
        self.line(&format!("for (; {chunk} < {end}; ++{chunk}) {{"));
        self.indent += 1;
        let r = self.write_copies_at(f.var, chunk.clone(), body, buffer, indices, copies, |c| {
            format!("{}_s0", c.acc)
        });
        self.indent -= 1;
        r?;
        self.line("}");
        Ok(copies
            .iter()
            .map(|c| {
                let mut terms: Vec<String> =
                    (0..lanes).map(|l| format!("{}_s{l}", c.acc)).collect();
                while terms.len() > 1 {
                    let half = terms.len() / 2;
                    terms = (0..half)
                        .map(|i| format!("({} + {})", terms[i], terms[i + half]))
                        .collect();
                }
                terms.pop().unwrap_or_else(|| "0".to_string())
            })
            .collect())
    }

    /// The body of a `simd_reduction` loop with `lanes` independent partial sums, and the C
    /// text of each copy's total. Where [`Writer::lane_vector_plan`] applies, the partial sums
    /// are one vector `{acc}_v` of `lanes` elements updated a whole vector per step, and the
    /// copies' totals are combined together ([`Writer::write_lane_vector_totals`]). Otherwise
    /// they are an array `{acc}_part[lanes]`: the loop runs in chunks of `lanes` iterations
    /// whose lane `l` adds into `{acc}_part[l]` (a SIMD loop that needs no reassociation), the
    /// remainder adds into the first lanes, then a pairwise (tree-shaped) sum leaves the total
    /// in `{acc}_part[0]`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn write_lane_reduction(
        &mut self,
        (f, outer): (&For, Option<&For>),
        body: &Stmt,
        (lanes, op): (i64, BinOp),
        buffer: BufferId,
        indices: &[Expr],
        copies: &[LaneCopy],
        ct: &str,
    ) -> Res<Vec<String>> {
        let vdt = self
            .func
            .vars
            .get(f.var)
            .map(|v| v.dtype)
            .unwrap_or(DType::I32);
        let lct = self.ctype(vdt, "loop variable")?;
        let (Some(min), Some(ext)) = (const_int(&f.min), const_int(&f.extent)) else {
            return self.write_scalar_lanes(f, body, lanes, buffer, indices, copies, ct);
        };
        let dt = self.buf_dtype(buffer);
        if let Some(plan) = self.lane_vector_plan(f, body, buffer, indices, lanes, dt) {
            let ty = vector::lane_type(dt, lanes);
            self.lane_types.insert((dt, lanes));
            let start = vector_math::lane_identity(op, &ty, dt);
            for c in copies {
                self.line(&format!("{ty} {}_v = {start};", c.acc));
            }
            let lane_loop = |w: &mut Self| {
                w.write_lane_vector_loop(f, plan, (min, ext, lanes), lct, |w| {
                    w.write_lane_copies(body, buffer, indices, copies, |c| format!("{}_v", c.acc))
                })
            };
            match outer {
                Some(g) => self.write_serial_around(g, lane_loop)?,
                None => lane_loop(self)?,
            }
            let accs: Vec<String> = copies.iter().map(|c| format!("{}_v", c.acc)).collect();
            return Ok(self.write_lane_vector_totals(&accs, (lanes, op), dt));
        }
        if op != BinOp::Add || outer.is_some() {
            return Err(self.invalid("a lane reduction without the vector form"));
        }
        for c in copies {
            self.line(&format!("{ct} {}_part[{lanes}] = {{0}};", c.acc));
        }
        let main = ext - ext % lanes;
        let v = self.bind(f.var)?;
        let chunk = self.namer.fresh(&format!("{v}_c"));
        let run = |w: &mut Self, start: String, end: String, base: String| -> Res<()> {
            w.pragma("omp simd");
            w.line(&format!("for ({lct} {v} = {start}; {v} < {end}; ++{v}) {{"));
            w.indent += 1;
            let r = w.write_lane_copies(body, buffer, indices, copies, |c| {
                format!("{}_part[{v} - {base}]", c.acc)
            });
            w.indent -= 1;
            r?;
            w.line("}");
            Ok(())
        };
        let r = (|| -> Res<()> {
            self.line(&format!(
                "for ({lct} {chunk} = {}; {chunk} < {}; {chunk} += {lanes}) {{",
                int_literal(min, vdt),
                int_literal(min + main, vdt)
            ));
            self.indent += 1;
            run(
                self,
                chunk.clone(),
                format!("{chunk} + {lanes}"),
                chunk.clone(),
            )?;
            self.indent -= 1;
            self.line("}");
            if main < ext {
                let b = int_literal(min + main, vdt);
                run(self, b.clone(), int_literal(min + ext, vdt), b)?;
            }
            Ok(())
        })();
        self.unbind(f.var);
        r?;
        let l = self.namer.fresh("lane");
        for c in copies {
            let part = format!("{}_part", c.acc);
            let mut w = lanes / 2;
            while w >= 1 {
                self.pragma("omp simd");
                self.line(&format!(
                    "for (int {l} = 0; {l} < {w}; ++{l}) {part}[{l}] += {part}[{l} + {w}];"
                ));
                w /= 2;
            }
        }
        Ok(copies
            .iter()
            .map(|c| format!("{}_part[0]", c.acc))
            .collect())
    }
}

/// The `BinOp` a `simd_reduction` annotation names (`"+"`, `"max"`, `"min"`).
fn reduction_op(ann: &AttrValue) -> Option<BinOp> {
    match ann {
        AttrValue::Str(s) if s == "+" => Some(BinOp::Add),
        AttrValue::Str(s) if s == "max" => Some(BinOp::Max),
        AttrValue::Str(s) if s == "min" => Some(BinOp::Min),
        _ => None,
    }
}

/// The C text combining two scalar partial results of a reduction: `a + b`, or for float
/// `max`/`min` `fmaxf(a, b)`, `fmin(a, b)`, ... (NaN gives the other operand, as the
/// evaluator's `max`/`min`).
pub(super) fn scalar_combine(op: BinOp, dt: DType, a: &str, b: &str) -> String {
    if op == BinOp::Add {
        return format!("{a} + {b}");
    }
    let f = if dt == DType::F64 { "" } else { "f" };
    let fun = if op == BinOp::Max { "fmax" } else { "fmin" };
    format!("{fun}{f}({a}, {b})")
}
