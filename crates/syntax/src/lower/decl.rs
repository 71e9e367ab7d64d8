//! Lowering of declarations: `T.sp.*` axes, sparse and dense buffers, `T.allocate`, and the
//! entries of a sparse iteration's axis list.

use super::*;

impl<'a> Lower<'a> {
    /// `name = T.<declaration>(...)` and `name = T.allocate(...)`.
    pub(super) fn decl(
        &mut self,
        name: &str,
        nspan: Span,
        value: &ast::Expr,
        level: Level,
    ) -> LResult<Option<Stmt>> {
        let Some((fname, args, kwargs)) = as_call(value) else {
            return Err(err(value.span, "expected a declaration"));
        };
        let func_level = |what: &str| {
            if level != Level::Func {
                Err(err(
                    value.span,
                    format!("`{what}` is only allowed at function level"),
                ))
            } else {
                Ok(())
            }
        };
        match fname.as_str() {
            "T.sp.dense_fixed"
            | "T.sp.dense_varied"
            | "T.sp.compressed_fixed"
            | "T.sp.compressed_varied" => {
                func_level(&fname)?;
                let axis = self.axis_decl(name, &fname, value, args, kwargs)?;
                let id = self.f.axes.append(axis);
                self.define(name, Sym::Axis(id), nspan)?;
                Ok(None)
            }
            "T.sp.match_buffer" | "T.sp.alloc_buffer" | "T.match_buffer" | "T.alloc_buffer" => {
                if let Err(mut d) = func_level(&fname) {
                    if fname == "T.sp.alloc_buffer" {
                        d.notes.push(
                            "a sparse intermediate is declared at function level or in a block \
                             header; `T.allocate` in a body takes dense extents only"
                                .to_string(),
                        );
                    }
                    return Err(d);
                }
                let b = self.buffer_decl(name, &fname, value, args, kwargs)?;
                let id = self.f.buffers.append(b);
                self.define(name, Sym::Buffer(id), nspan)?;
                self.f.buffer_decls.push(id);
                Ok(None)
            }
            "T.allocate" => {
                let a = bind(
                    &fname,
                    value.span,
                    args,
                    kwargs,
                    &["extents", "dtype", "scope"],
                    2,
                )?;
                let extents = a[0].unwrap_or(value);
                let items: Vec<&ast::Expr> = match list_items(extents) {
                    Some(v) => v.iter().collect(),
                    None => vec![extents],
                };
                for it in items {
                    let Some(n) = it.as_name() else { continue };
                    if let Some((Sym::Axis(_), _)) = self.lookup(n) {
                        let mut d = err(
                            it.span,
                            format!("`T.allocate` takes dense extents, but `{n}` is a sparse axis"),
                        );
                        d.notes.push(format!(
                            "declare a sparse intermediate at function level or in a block \
                             header: `{name} = T.sp.alloc_buffer(({n}, ...), \"float32\")`"
                        ));
                        return Err(d);
                    }
                }
                let shape = self.dense_shape(extents)?;
                let dtype = parse_dtype(a[1].unwrap_or(value), false)?;
                let scope = match a[2] {
                    Some(s) => expect_str(s, "a scope")?,
                    None => "global".to_string(),
                };
                let b = Buffer {
                    name: name.to_string(),
                    decl: BufferDecl::Alloc,
                    shape: BufferShape::Dense(shape),
                    dtype,
                    scope,
                    strides: Vec::new(),
                    extra_storage: None,
                    default_value: None,
                    span: value.span,
                };
                let id = self.f.buffers.append(b);
                self.define(name, Sym::Buffer(id), nspan)?;
                Ok(Some(Stmt::Allocate(id)))
            }
            "T.axis.spatial" | "T.axis.reduce" => Err(err(
                value.span,
                format!("`{fname}` is only allowed in a block header"),
            )),
            n if KNOWN.contains(&n) => {
                Err(err(value.span, format!("`{n}` does not declare anything")))
            }
            n if n.starts_with("T.") => Err(unknown_function(n, value.span)),
            n => Err(unknown_function(n, value.span)),
        }
    }

    /// `(lo, hi)` → `(min, extent)`: a constant 0 of any integer type for `lo` (`0`,
    /// `T.int64(0)`) gives `hi`, `hi` written as `lo + e` gives `e`, anything else `hi - lo`.
    pub(super) fn range_of(&mut self, lo: &ast::Expr, hi: &ast::Expr) -> LResult<(Expr, Expr)> {
        let min = self.int_expr(lo)?;
        if matches!(min, Expr::Int(0, d) if d.is_integer()) {
            return Ok((min, self.int_expr(hi)?));
        }
        if let ExprKind::Binary(AstBinOp::Add, l, e) = &hi.kind {
            if strip(l) == strip(lo) {
                return Ok((min, self.int_expr(e)?));
            }
        }
        let hi = self.int_expr(hi)?;
        Ok((min.clone(), Expr::sub(hi, min)))
    }

    pub(super) fn int_expr(&mut self, e: &ast::Expr) -> LResult<Expr> {
        self.integer(e, |_| "expected an integer expression".to_string())
    }

    /// `e` lowered, which must be an integer: otherwise the error `why(its dtype)`, located at
    /// `e` (the verifier, which knows only statements' spans, would point at the statement).
    pub(super) fn integer(
        &mut self,
        e: &ast::Expr,
        why: impl FnOnce(DType) -> String,
    ) -> LResult<Expr> {
        let x = self.expr(e)?;
        let dt = x.dtype(&self.f);
        if !dt.is_integer() {
            return Err(err(e.span, why(dt)));
        }
        Ok(x)
    }

    pub(super) fn axis_decl(
        &mut self,
        name: &str,
        fname: &str,
        call: &ast::Expr,
        args: &[ast::Expr],
        kwargs: &[Kwarg],
    ) -> LResult<Axis> {
        let span = call.span;
        let mut axis = Axis::dense_fixed(name, Expr::int(0));
        axis.span = span;
        let (idtype_at, sorted_at) = if fname == "T.sp.dense_fixed" {
            let a = bind(
                fname,
                span,
                args,
                kwargs,
                &["length", "idtype", "sorted"],
                1,
            )?;
            axis.length = self.int_expr(a[0].unwrap_or(call))?;
            (a[1], a[2])
        } else {
            let third = match fname {
                "T.sp.dense_varied" => "indptr",
                "T.sp.compressed_fixed" => "indices",
                _ => "indptr_indices",
            };
            let a = bind(
                fname,
                span,
                args,
                kwargs,
                &["parent", "shape", third, "idtype", "sorted", "assembled"],
                3,
            )?;
            if let Some(x) = a[5] {
                if fname != "T.sp.compressed_varied" {
                    return Err(err(
                        x.span,
                        "only a compressed_varied axis can be assembled",
                    ));
                }
                match x.kind {
                    ExprKind::Bool(b) => axis.assembled = b,
                    _ => return Err(err(x.span, "`assembled` must be True or False")),
                }
            }
            let (p, shape, st) = (a[0].unwrap_or(call), a[1].unwrap_or(call), a[2]);
            let st = st.unwrap_or(call);
            axis.parent = Some(self.axis(p)?);
            let pair = list_items(shape);
            match fname {
                "T.sp.dense_varied" => {
                    axis.kind = AxisKind::DenseVaried;
                    match pair {
                        Some([l, n]) => {
                            axis.length = self.int_expr(l)?;
                            axis.nnz = Some(self.int_expr(n)?);
                        }
                        Some(_) => return Err(err(shape.span, "expected `(length, nnz)`")),
                        None => axis.length = self.int_expr(shape)?,
                    }
                    axis.indptr = Some(self.handle_param(st)?);
                }
                _ => {
                    let Some([l, n]) = pair else {
                        let what = if fname == "T.sp.compressed_fixed" {
                            "`(length, nnz_cols)`"
                        } else {
                            "`(length, nnz)`"
                        };
                        return Err(err(shape.span, format!("expected {what}")));
                    };
                    axis.length = self.int_expr(l)?;
                    let n = self.int_expr(n)?;
                    if fname == "T.sp.compressed_fixed" {
                        axis.kind = AxisKind::CompressedFixed;
                        axis.nnz_cols = Some(n);
                        axis.indices = Some(self.handle_param(st)?);
                    } else {
                        axis.kind = AxisKind::CompressedVaried;
                        axis.nnz = Some(n);
                        let Some([ip, ix]) = list_items(st) else {
                            return Err(err(st.span, "expected `(indptr, indices)`"));
                        };
                        axis.indptr = Some(self.handle_param(ip)?);
                        axis.indices = Some(self.handle_param(ix)?);
                    }
                }
            }
            (a[3], a[4])
        };
        if let Some(d) = idtype_at {
            axis.idtype = parse_dtype(d, false)?;
            if !axis.idtype.is_integer() {
                return Err(err(d.span, "an axis idtype must be an integer dtype"));
            }
        }
        if let Some(s) = sorted_at {
            match s.kind {
                ExprKind::Bool(b) => axis.sorted = b,
                _ => return Err(err(s.span, "`sorted` must be True or False")),
            }
        }
        Ok(axis)
    }

    /// One entry of an iteration's axis list: an axis, `T.sp.fuse(...)`, `T.sp.attach(...)`, or
    /// (at the top level only) `T.sp.union(...)`/`T.sp.intersect(...)` of axes and attaches.
    pub(super) fn iter_entry(&mut self, e: &ast::Expr, top: bool) -> LResult<IterAxis> {
        let Some((n, cargs, ckw)) = as_call(e) else {
            return Ok(IterAxis::Axis(self.axis(e)?));
        };
        match n.as_str() {
            "T.sp.fuse" if top => {
                if let Some(k) = ckw.first() {
                    return Err(err(
                        k.name_span,
                        format!("unknown keyword argument `{}` for `T.sp.fuse`", k.name),
                    ));
                }
                if cargs.len() < 2 {
                    return Err(err(e.span, "`T.sp.fuse` takes at least 2 axes"));
                }
                let v = cargs.iter().map(|x| self.axis(x)).collect::<LResult<_>>()?;
                Ok(IterAxis::Fuse(v))
            }
            "T.sp.attach" => {
                let b = bind("T.sp.attach", e.span, cargs, ckw, &["axis", "parent"], 2)?;
                let axis = self.axis(b[0].unwrap_or(e))?;
                let parent = self.axis(b[1].unwrap_or(e))?;
                Ok(IterAxis::Attach { axis, parent })
            }
            "T.sp.union" | "T.sp.intersect" if top => {
                if let Some(k) = ckw.first() {
                    return Err(err(
                        k.name_span,
                        format!("unknown keyword argument `{}` for `{n}`", k.name),
                    ));
                }
                if cargs.len() < 2 {
                    return Err(err(e.span, format!("`{n}` takes at least 2 axes")));
                }
                let parts = cargs
                    .iter()
                    .map(|x| self.iter_entry(x, false))
                    .collect::<LResult<Vec<_>>>()?;
                let op = if n == "T.sp.union" {
                    CoOp::Union
                } else {
                    CoOp::Intersect
                };
                Ok(IterAxis::CoIter { op, parts })
            }
            "T.sp.fuse" | "T.sp.union" | "T.sp.intersect" => Err(err(
                e.span,
                format!("`{n}` cannot be a part of a co-iteration (use axes or `T.sp.attach`)"),
            )),
            n if KNOWN.contains(&n) => Err(err(e.span, format!("`{n}` is not an iteration axis"))),
            n => Err(unknown_function(n, e.span)),
        }
    }

    pub(super) fn dense_shape(&mut self, e: &ast::Expr) -> LResult<Vec<Expr>> {
        match list_items(e) {
            Some(items) => items.iter().map(|x| self.int_expr(x)).collect(),
            None => Ok(vec![self.int_expr(e)?]),
        }
    }

    pub(super) fn buffer_decl(
        &mut self,
        name: &str,
        fname: &str,
        call: &ast::Expr,
        args: &[ast::Expr],
        kwargs: &[Kwarg],
    ) -> LResult<Buffer> {
        let span = call.span;
        let sparse = fname.starts_with("T.sp.");
        let matched = fname.ends_with("match_buffer");
        let mut params: Vec<&str> = Vec::new();
        if matched {
            params.push("data");
        }
        params.extend(["shape", "dtype", "scope"]);
        if sparse {
            params.extend(["extra_storage", "default_value", "strides"]);
        } else {
            params.extend(["strides", "extra_storage", "default_value"]);
        }
        let required = if matched { 2 } else { 1 };
        let a = bind(fname, span, args, kwargs, &params, required)?;
        let get = |n: &str| params.iter().position(|p| *p == n).and_then(|i| a[i]);
        let decl = match get("data") {
            Some(d) => BufferDecl::Match {
                data: self.handle_param(d)?,
            },
            None => BufferDecl::Alloc,
        };
        let shape_e = get("shape").unwrap_or(call);
        let shape = if sparse {
            let Some(items) = list_items(shape_e) else {
                return Err(err(shape_e.span, "expected a list of axes `(I, J)`"));
            };
            BufferShape::Sparse(items.iter().map(|x| self.axis(x)).collect::<LResult<_>>()?)
        } else {
            BufferShape::Dense(self.dense_shape(shape_e)?)
        };
        let dtype = match get("dtype") {
            Some(d) => parse_dtype(d, false)?,
            None => DType::F32,
        };
        let scope = match get("scope") {
            Some(s) => expect_str(s, "a scope")?,
            None => "global".to_string(),
        };
        let strides = match get("strides") {
            Some(s) => match list_items(s) {
                Some(items) => items
                    .iter()
                    .map(|x| self.int_expr(x))
                    .collect::<LResult<_>>()?,
                None => return Err(err(s.span, "expected a list of strides")),
            },
            None => Vec::new(),
        };
        let extra_storage = get("extra_storage").map(|e| self.int_expr(e)).transpose()?;
        let default_value = get("default_value").map(|e| self.expr(e)).transpose()?;
        Ok(Buffer {
            name: name.to_string(),
            decl,
            shape,
            dtype,
            scope,
            strides,
            extra_storage,
            default_value,
            span,
        })
    }
}
