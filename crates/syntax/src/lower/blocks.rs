//! Lowering of loops, sparse iterations and blocks (`for`, `T.sp.iteration`, `T.block` and
//! its header: iterators, reads/writes regions, `T.init`).

use super::*;

impl<'a> Lower<'a> {
    pub(super) fn for_loop(
        &mut self,
        targets: &[ast::Expr],
        iter: &ast::Expr,
        body: &[ast::Stmt],
        span: Span,
    ) -> LResult<Option<Stmt>> {
        let Some((fname, args, kwargs)) = as_call(iter) else {
            return Err(err(iter.span, "expected a loop kind such as `T.serial(n)`"));
        };
        let fname = if fname == "range" {
            "T.serial".to_string()
        } else {
            fname
        };
        // (min, extent) per loop variable.
        let mut ranges: Vec<(Expr, Expr)> = Vec::new();
        let mut kind = ForKind::Serial;
        let mut thread = None;
        let mut annotations = Attrs::new();
        match fname.as_str() {
            "T.grid" => {
                if !kwargs.is_empty() {
                    return Err(err(
                        kwargs[0].name_span,
                        format!("unknown keyword argument `{}` for `T.grid`", kwargs[0].name),
                    ));
                }
                if args.is_empty() {
                    return Err(err(iter.span, "`T.grid` takes at least 1 argument"));
                }
                for a in args {
                    ranges.push((Expr::int(0), self.int_expr(a)?));
                }
            }
            "T.serial" | "T.parallel" | "T.vectorized" | "T.unroll" | "T.thread_binding" => {
                kind = match fname.as_str() {
                    "T.serial" => ForKind::Serial,
                    "T.parallel" => ForKind::Parallel,
                    "T.vectorized" => ForKind::Vectorized,
                    "T.unroll" => ForKind::Unrolled,
                    _ => ForKind::ThreadBinding,
                };
                let mut pos: Vec<&ast::Expr> = args.iter().collect();
                let mut thread_pos = None;
                if kind == ForKind::ThreadBinding && pos.len() >= 2 {
                    if let Some(last) = pos.last() {
                        if matches!(last.kind, ExprKind::Str(_)) {
                            thread_pos = pos.pop();
                        }
                    }
                }
                let params: &[&str] = if kind == ForKind::ThreadBinding {
                    &["start", "stop", "thread", "annotations"]
                } else {
                    &["start", "stop", "annotations"]
                };
                let pos_owned: Vec<ast::Expr> = pos.into_iter().cloned().collect();
                let a = bind(&fname, iter.span, &pos_owned, kwargs, params, 1)?;
                let first = a[0].unwrap_or(iter);
                let range = match a[1] {
                    Some(hi) if !matches!(hi.kind, ExprKind::None) => self.range_of(first, hi)?,
                    _ => (Expr::int(0), self.int_expr(first)?),
                };
                ranges.push(range);
                if kind == ForKind::ThreadBinding {
                    let t = thread_pos.or(a[2]).ok_or_else(|| {
                        err(
                            iter.span,
                            "`T.thread_binding` needs `thread=\"threadIdx.x\"`",
                        )
                    })?;
                    thread = Some(expect_str(t, "a thread tag")?);
                }
                if let Some(an) = a[params.len() - 1] {
                    annotations = attr_dict(an)?;
                }
            }
            n if n.starts_with("T.") && !KNOWN.contains(&n) => {
                return Err(unknown_function(n, iter.span))
            }
            n => return Err(err(iter.span, format!("`{n}` is not a loop kind"))),
        }
        if targets.len() != ranges.len() {
            let tspan = targets[0].span.join(targets[targets.len() - 1].span);
            return Err(err(
                tspan,
                format!(
                    "expected {} loop variable(s), found {}",
                    ranges.len(),
                    targets.len()
                ),
            ));
        }
        let depth = self.loops.len();
        let scopes = self.scopes.len();
        let result = (|| {
            let mut vars = Vec::new();
            for (t, (min, ext)) in targets.iter().zip(&ranges) {
                self.scopes.push(HashMap::new());
                let dt = loop_var_dtype(min.dtype(&self.f), ext.dtype(&self.f));
                let name = self.name_of(t, "a loop variable")?;
                let v = self.new_var(name, dt, t.span)?;
                self.loops.push((v, min.clone(), ext.clone()));
                vars.push(v);
            }
            let mut stmt = self.scoped(|me| me.seq(body, Level::Inner))?;
            for (i, (v, (min, ext))) in vars.iter().zip(ranges).enumerate().rev() {
                let last = i == 0;
                stmt = Stmt::For(Box::new(For {
                    var: *v,
                    min,
                    extent: ext,
                    kind,
                    thread: thread.clone(),
                    annotations: if last {
                        annotations.clone()
                    } else {
                        Attrs::new()
                    },
                    body: stmt,
                    span,
                }));
            }
            Ok(Some(stmt))
        })();
        self.loops.truncate(depth);
        self.scopes.truncate(scopes);
        result
    }

    pub(super) fn iteration(
        &mut self,
        item: &ast::Expr,
        args: &[ast::Expr],
        kwargs: &[Kwarg],
        target: Option<&ast::Expr>,
        body: &[ast::Stmt],
        span: Span,
    ) -> LResult<Option<Stmt>> {
        let fname = "T.sp.iteration";
        let a = bind(
            fname,
            item.span,
            args,
            kwargs,
            &["axes", "kinds", "name"],
            3,
        )?;
        let (axes_e, kinds_e, name_e) = (
            a[0].unwrap_or(item),
            a[1].unwrap_or(item),
            a[2].unwrap_or(item),
        );
        let Some(entries) = list_items(axes_e) else {
            return Err(err(axes_e.span, "expected a list of axes `[I, J]`"));
        };
        let mut axes = Vec::new();
        for e in entries {
            axes.push(self.iter_entry(e, true)?);
        }
        let nvars: usize = axes.iter().map(IterAxis::arity).sum();
        let kinds_s = expect_str(kinds_e, "a kinds string such as \"SRS\"")?;
        if kinds_s.chars().count() != nvars {
            return Err(err(
                kinds_e.span,
                format!(
                    "kinds string \"{kinds_s}\" has {} letters but the iteration has {nvars} \
                     iterator(s)",
                    kinds_s.chars().count()
                ),
            ));
        }
        let mut kinds = Vec::new();
        for c in kinds_s.chars() {
            match IterKind::from_letter(c) {
                Some(k) => kinds.push(k),
                None => {
                    return Err(err(
                        kinds_e.span,
                        format!("bad iterator kind `{c}` in \"{kinds_s}\" (expected S or R)"),
                    ))
                }
            }
        }
        let name = expect_str(name_e, "an iteration name")?;
        let Some(target) = target else {
            return Err(err(
                item.span,
                "`T.sp.iteration` needs iterator variables: `with T.sp.iteration(...) as [i, j]:`",
            ));
        };
        let names: Vec<&ast::Expr> = match list_items(target) {
            Some(v) => v.iter().collect(),
            None => vec![target],
        };
        if names.len() != nvars {
            return Err(err(
                target.span,
                format!(
                    "expected {nvars} iteration variable(s), found {}",
                    names.len()
                ),
            ));
        }
        let axis_list: Vec<AxisId> = axes.iter().flat_map(IterAxis::axes).collect();
        self.scoped(|me| {
            let mut vars = Vec::new();
            for (n, ax) in names.iter().zip(&axis_list) {
                let vname = me.name_of(n, "an iteration variable")?;
                let dt = me.f.axes[*ax].idtype;
                vars.push(me.new_var(vname, dt, n.span)?);
            }
            let mut annotations = Attrs::new();
            let mut init = None;
            let mut rest = Vec::new();
            for s in body {
                match &s.kind {
                    StmtKind::Expr(e)
                        if as_call(e).is_some_and(|(n, _, _)| n == "T.sp.iteration_attr") =>
                    {
                        let Some((n, a, k)) = as_call(e) else {
                            continue;
                        };
                        let b = bind(&n, e.span, a, k, &["attrs"], 1)?;
                        for (key, v) in attr_dict(b[0].unwrap_or(e))?.0 {
                            annotations.set(key, v);
                        }
                    }
                    StmtKind::With { item, target, body } if me.is_init(item) => {
                        if init.is_some() {
                            return Err(err(s.span, "duplicate `T.init()`"));
                        }
                        if let Some(t) = target {
                            return Err(err(t.span, "`T.init()` takes no `as` target"));
                        }
                        init = Some(me.scoped(|m| m.seq(body, Level::Inner))?);
                    }
                    _ => rest.push(s.clone()),
                }
            }
            let body = me.scoped(|m| m.seq(&rest, Level::Inner))?;
            Ok(Some(Stmt::SparseIteration(Box::new(SparseIteration {
                name,
                axes,
                kinds,
                vars,
                init,
                body,
                annotations,
                span,
            }))))
        })
    }

    pub(super) fn is_init(&self, item: &ast::Expr) -> bool {
        as_call(item).is_some_and(|(n, a, k)| n == "T.init" && a.is_empty() && k.is_empty())
    }

    pub(super) fn region(&mut self, e: &ast::Expr) -> LResult<BufferRegion> {
        let ExprKind::Subscript(base, idx) = &e.kind else {
            return Err(err(e.span, "expected a buffer region such as `A[i, 0:n]`"));
        };
        let buffer = self.buffer(base)?;
        let ndim = self.f.buffers[buffer].ndim();
        if idx.len() != ndim {
            return Err(err(
                e.span,
                format!(
                    "buffer `{}` takes {ndim} ind{}, got {}",
                    self.f.buffers[buffer].name,
                    if ndim == 1 { "ex" } else { "ices" },
                    idx.len()
                ),
            ));
        }
        let mut ranges = Vec::new();
        for i in idx {
            if let ExprKind::Slice(lo, hi) = &i.kind {
                let (Some(lo), Some(hi)) = (lo, hi) else {
                    return Err(err(i.span, "a region slice needs both bounds `lo:hi`"));
                };
                ranges.push(self.range_of(lo, hi)?);
            } else {
                ranges.push((self.expr(i)?, Expr::int(1)));
            }
        }
        Ok(BufferRegion { buffer, ranges })
    }

    pub(super) fn regions(
        &mut self,
        args: &[ast::Expr],
        kwargs: &[Kwarg],
    ) -> LResult<Vec<BufferRegion>> {
        if let Some(k) = kwargs.first() {
            return Err(err(
                k.name_span,
                format!("unknown keyword argument `{}`", k.name),
            ));
        }
        let mut out = Vec::new();
        for a in args {
            match list_items(a) {
                Some(items) => {
                    for i in items {
                        out.push(self.region(i)?);
                    }
                }
                None => out.push(self.region(a)?),
            }
        }
        Ok(out)
    }

    pub(super) fn block(
        &mut self,
        item: &ast::Expr,
        args: &[ast::Expr],
        kwargs: &[Kwarg],
        body: &[ast::Stmt],
        span: Span,
    ) -> LResult<Option<Stmt>> {
        let a = bind("T.block", item.span, args, kwargs, &["name"], 1)?;
        let name = expect_str(a[0].unwrap_or(item), "a block name")?;
        self.scoped(|me| {
            let mut blk = Block {
                name,
                iters: Vec::new(),
                predicate: None,
                reads: Vec::new(),
                writes: Vec::new(),
                init: None,
                alloc_buffers: Vec::new(),
                annotations: Attrs::new(),
                body: Stmt::empty(),
                span,
            };
            let mut rest = Vec::new();
            for s in body {
                if !rest.is_empty() {
                    rest.push(s.clone());
                    continue;
                }
                if !me.block_header(&mut blk, s)? {
                    rest.push(s.clone());
                }
            }
            blk.body = me.scoped(|m| m.seq(&rest, Level::Inner))?;
            Ok(Some(Stmt::Block(Box::new(blk))))
        })
    }

    /// Handles one block header line; false when `s` starts the body.
    pub(super) fn block_header(&mut self, blk: &mut Block, s: &ast::Stmt) -> LResult<bool> {
        match &s.kind {
            StmtKind::Assign { targets, value } => {
                let Some((n, args, kwargs)) = as_call(value) else {
                    return Ok(false);
                };
                match n.as_str() {
                    "T.axis.spatial" | "T.axis.reduce" => {
                        let kind = if n == "T.axis.spatial" {
                            IterKind::Spatial
                        } else {
                            IterKind::Reduce
                        };
                        if targets.len() != 1 {
                            return Err(err(s.span, format!("`{n}` binds exactly one variable")));
                        }
                        let a = bind(&n, value.span, args, kwargs, &["dom", "binding"], 2)?;
                        let (dom, binding) = (a[0].unwrap_or(value), a[1].unwrap_or(value));
                        let (min, extent) = match list_items(dom) {
                            Some([lo, hi]) => self.range_of(lo, hi)?,
                            Some(_) => return Err(err(dom.span, "expected a domain `(lo, hi)`")),
                            None => (Expr::int(0), self.int_expr(dom)?),
                        };
                        let binding = self.int_expr(binding)?;
                        let dt = binding.dtype(&self.f);
                        let vname = self.name_of(&targets[0], "a block iterator")?;
                        let var = self.new_var(vname, dt, targets[0].span)?;
                        blk.iters.push(BlockIter {
                            var,
                            min,
                            extent,
                            kind,
                            binding,
                        });
                        Ok(true)
                    }
                    "T.axis.remap" => {
                        let a = bind(&n, value.span, args, kwargs, &["kinds", "bindings"], 2)?;
                        let (ke, be) = (a[0].unwrap_or(value), a[1].unwrap_or(value));
                        let ks = expect_str(ke, "a kinds string such as \"SR\"")?;
                        let Some(bs) = list_items(be) else {
                            return Err(err(be.span, "expected a list of loop variables"));
                        };
                        if ks.chars().count() != bs.len() {
                            return Err(err(
                                ke.span,
                                format!(
                                    "kinds string \"{ks}\" has {} letters but {} variables are \
                                     remapped",
                                    ks.chars().count(),
                                    bs.len()
                                ),
                            ));
                        }
                        if targets.len() != bs.len() {
                            return Err(err(
                                s.span,
                                format!(
                                    "expected {} block iterator(s), found {}",
                                    bs.len(),
                                    targets.len()
                                ),
                            ));
                        }
                        let mut new_iters = Vec::new();
                        for ((c, b), t) in ks.chars().zip(bs).zip(targets) {
                            let kind = IterKind::from_letter(c).ok_or_else(|| {
                                err(
                                    ke.span,
                                    format!(
                                        "bad iterator kind `{c}` in \"{ks}\" (expected S or R)"
                                    ),
                                )
                            })?;
                            let binding = self.expr(b)?;
                            let Some(lv) = binding.as_var() else {
                                return Err(err(b.span, "`T.axis.remap` takes loop variables"));
                            };
                            let Some((_, _, lext)) =
                                self.loops.iter().rev().find(|(v, _, _)| *v == lv).cloned()
                            else {
                                return Err(err(
                                    b.span,
                                    "`T.axis.remap` needs a variable of an enclosing loop",
                                ));
                            };
                            let dt = self.f.vars[lv].dtype;
                            new_iters.push((t, kind, binding, lext, dt));
                        }
                        for (t, kind, binding, extent, dt) in new_iters {
                            let vname = self.name_of(t, "a block iterator")?;
                            let var = self.new_var(vname, dt, t.span)?;
                            blk.iters.push(BlockIter {
                                var,
                                min: Expr::int(0),
                                extent,
                                kind,
                                binding,
                            });
                        }
                        Ok(true)
                    }
                    "T.alloc_buffer" | "T.sp.alloc_buffer" => {
                        if targets.len() != 1 {
                            return Ok(false);
                        }
                        let vname = self.name_of(&targets[0], "a buffer")?;
                        let b = self.buffer_decl(vname, &n, value, args, kwargs)?;
                        let id = self.f.buffers.append(b);
                        self.define(vname, Sym::Buffer(id), targets[0].span)?;
                        blk.alloc_buffers.push(id);
                        Ok(true)
                    }
                    _ => Ok(false),
                }
            }
            StmtKind::Expr(e) => {
                let Some((n, args, kwargs)) = as_call(e) else {
                    return Ok(false);
                };
                match n.as_str() {
                    "T.where" => {
                        let a = bind(&n, e.span, args, kwargs, &["predicate"], 1)?;
                        if blk.predicate.is_some() {
                            return Err(err(e.span, "duplicate `T.where`"));
                        }
                        blk.predicate = Some(self.expr(a[0].unwrap_or(e))?);
                    }
                    "T.reads" => {
                        let r = self.regions(args, kwargs)?;
                        blk.reads.extend(r);
                    }
                    "T.writes" => {
                        let r = self.regions(args, kwargs)?;
                        blk.writes.extend(r);
                    }
                    "T.block_attr" => {
                        let a = bind(&n, e.span, args, kwargs, &["attrs"], 1)?;
                        for (k, v) in attr_dict(a[0].unwrap_or(e))?.0 {
                            blk.annotations.set(k, v);
                        }
                    }
                    _ => return Ok(false),
                }
                Ok(true)
            }
            StmtKind::With { item, target, body } if self.is_init(item) => {
                if blk.init.is_some() {
                    return Err(err(s.span, "duplicate `T.init()`"));
                }
                if let Some(t) = target {
                    return Err(err(t.span, "`T.init()` takes no `as` target"));
                }
                blk.init = Some(self.scoped(|m| m.seq(body, Level::Inner))?);
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}
