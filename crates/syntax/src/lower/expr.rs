//! Lowering of expressions: names, operators, subscripts, `T.*` calls (intrinsics, casts,
//! typed constants) with their arities and keyword arguments.

use super::*;

impl<'a> Lower<'a> {
    pub(super) fn expr(&mut self, e: &ast::Expr) -> LResult<Expr> {
        Ok(match &e.kind {
            ExprKind::Name(n) => match self.lookup(n) {
                // Checked here, where the name's own span is known (the verifier, which knows
                // only statements' spans, would point at the whole statement).
                Some((Sym::Var(v), _)) if self.f.vars[v].dtype == DType::Handle => {
                    return Err(err(
                        e.span,
                        format!(
                            "`{n}` is a handle (an array argument), not a value: index a buffer \
                             declared on it"
                        ),
                    ))
                }
                Some((Sym::Var(v), _)) => Expr::Var(v),
                Some((Sym::Axis(_), _)) => {
                    return Err(err(e.span, format!("axis `{n}` cannot be used as a value")))
                }
                Some((Sym::Buffer(_), _)) => {
                    return Err(err(e.span, format!("buffer `{n}` used without indices")))
                }
                None => return Err(self.undefined("variable", n, e.span)),
            },
            ExprKind::Int(v) => Expr::Int(*v, DType::I32),
            ExprKind::Float(v) => Expr::Float(*v, DType::F32),
            ExprKind::Bool(b) => Expr::Bool(*b),
            ExprKind::Str(_) => return Err(err(e.span, "a string is not allowed here")),
            ExprKind::None => return Err(err(e.span, "`None` is not allowed here")),
            ExprKind::Binary(op, a, b) => {
                let op = match op {
                    AstBinOp::Add => BinOp::Add,
                    AstBinOp::Sub => BinOp::Sub,
                    AstBinOp::Mul => BinOp::Mul,
                    AstBinOp::Div => BinOp::Div,
                    AstBinOp::FloorDiv => BinOp::FloorDiv,
                    AstBinOp::Mod => BinOp::FloorMod,
                    AstBinOp::Eq => BinOp::Eq,
                    AstBinOp::Ne => BinOp::Ne,
                    AstBinOp::Lt => BinOp::Lt,
                    AstBinOp::Le => BinOp::Le,
                    AstBinOp::Gt => BinOp::Gt,
                    AstBinOp::Ge => BinOp::Ge,
                    AstBinOp::And => BinOp::And,
                    AstBinOp::Or => BinOp::Or,
                    AstBinOp::BitAnd => BinOp::BitAnd,
                    AstBinOp::BitOr => BinOp::BitOr,
                    AstBinOp::BitXor => BinOp::BitXor,
                    AstBinOp::Shl => BinOp::Shl,
                    AstBinOp::Shr => BinOp::Shr,
                };
                let (x, y) = if op.is_bitwise() {
                    let why = |dt: DType| {
                        format!(
                            "operator `{}` takes integers, got {dt}",
                            op.symbol().unwrap_or("?")
                        )
                    };
                    (self.integer(a, why)?, self.integer(b, why)?)
                } else {
                    (self.expr(a)?, self.expr(b)?)
                };
                Expr::binary(op, x, y)
            }
            ExprKind::Neg(a) => Expr::Unary(UnOp::Neg, Box::new(self.expr(a)?)),
            ExprKind::Not(a) => Expr::Unary(UnOp::Not, Box::new(self.expr(a)?)),
            ExprKind::Subscript(base, idx) => {
                let Some(name) = base.as_name() else {
                    return Err(err(base.span, "only buffers can be indexed"));
                };
                let buffer = match self.lookup(name) {
                    Some((Sym::Buffer(b), _)) => b,
                    Some(_) => {
                        return Err(err(base.span, format!("`{name}` is not a buffer")));
                    }
                    None => return Err(self.undefined("buffer", name, base.span)),
                };
                if let Some(s) = idx.iter().find(|i| matches!(i.kind, ExprKind::Slice(..))) {
                    return Err(err(
                        s.span,
                        "a slice is only allowed in `T.reads`/`T.writes`",
                    ));
                }
                let indices = self.indices(buffer, idx, e.span)?;
                Expr::Load { buffer, indices }
            }
            ExprKind::Call { func, args, kwargs } => {
                let Some(name) = func.dotted() else {
                    return Err(err(func.span, "only `T.*` functions can be called"));
                };
                self.call(canonical(&name), e, args, kwargs)?
            }
            ExprKind::Slice(..) => {
                return Err(err(
                    e.span,
                    "a slice is only allowed in `T.reads`/`T.writes`",
                ))
            }
            ExprKind::Attr(..) => {
                let n = e.dotted().unwrap_or_default();
                return Err(err(e.span, format!("`{n}` is not a value")));
            }
            ExprKind::Tuple(_) | ExprKind::List(_) | ExprKind::Dict(_) => {
                return Err(err(e.span, "a tuple, list or dict is not allowed here"))
            }
        })
    }

    pub(super) fn call(
        &mut self,
        name: &str,
        e: &ast::Expr,
        args: &[ast::Expr],
        kwargs: &[Kwarg],
    ) -> LResult<Expr> {
        let binop = match name {
            "T.min" => Some(BinOp::Min),
            "T.max" => Some(BinOp::Max),
            "T.floordiv" => Some(BinOp::FloorDiv),
            "T.floormod" => Some(BinOp::FloorMod),
            "T.truncdiv" => Some(BinOp::Div),
            _ => None,
        };
        if let Some(op) = binop {
            let a = bind(name, e.span, args, kwargs, &["a", "b"], 2)?;
            let x = self.expr(a[0].unwrap_or(e))?;
            let y = self.expr(a[1].unwrap_or(e))?;
            return Ok(Expr::binary(op, x, y));
        }
        match name {
            "T.Select" | "T.if_then_else" => {
                let a = bind(
                    name,
                    e.span,
                    args,
                    kwargs,
                    &["cond", "true_value", "false_value"],
                    3,
                )?;
                let c = self.expr(a[0].unwrap_or(e))?;
                let x = self.expr(a[1].unwrap_or(e))?;
                let y = self.expr(a[2].unwrap_or(e))?;
                return Ok(Expr::Select(Box::new(c), Box::new(x), Box::new(y)));
            }
            "T.Cast" => {
                let a = bind(name, e.span, args, kwargs, &["dtype", "value"], 2)?;
                let d = parse_dtype(a[0].unwrap_or(e), false)?;
                let x = self.expr(a[1].unwrap_or(e))?;
                return Ok(Expr::Cast(d, Box::new(x)));
            }
            "T.cast" => {
                let a = bind(name, e.span, args, kwargs, &["value", "dtype"], 2)?;
                let x = self.expr(a[0].unwrap_or(e))?;
                let d = parse_dtype(a[1].unwrap_or(e), false)?;
                return Ok(Expr::Cast(d, Box::new(x)));
            }
            "T.let" => {
                let a = bind(name, e.span, args, kwargs, &["var", "value", "body"], 3)?;
                let (ve, vale, be) = (a[0].unwrap_or(e), a[1].unwrap_or(e), a[2].unwrap_or(e));
                let vname = self.name_of(ve, "a variable")?;
                let value = self.expr(vale)?;
                let dt = value.dtype(&self.f);
                return self.scoped(|me| {
                    let var = me.new_var(vname, dt, ve.span)?;
                    let body = me.expr(be)?;
                    Ok(Expr::Let {
                        var,
                        value: Box::new(value),
                        body: Box::new(body),
                    })
                });
            }
            _ => {}
        }
        let Some(short) = name.strip_prefix("T.") else {
            return Err(unknown_function(name, e.span));
        };
        if let Ok(dt) = short.parse::<DType>() {
            if dt != DType::Handle {
                let a = bind(name, e.span, args, kwargs, &["value"], 1)?;
                return self.typed_const(dt, a[0].unwrap_or(e));
            }
        }
        if let Some(op) = Intrinsic::from_name(short) {
            if op.arity() == 0 {
                let a = bind(name, e.span, args, kwargs, &["dtype"], 1)?;
                let dtype = parse_dtype(a[0].unwrap_or(e), false)?;
                return Ok(Expr::Call {
                    op,
                    args: Vec::new(),
                    dtype,
                });
            }
            if args.len() > op.arity() {
                return Err(err(
                    args[op.arity()].span,
                    format!(
                        "`{name}` takes at most {} positional argument{}, got {}",
                        op.arity(),
                        if op.arity() == 1 { "" } else { "s" },
                        args.len()
                    ),
                ));
            }
            let mut params: Vec<&str> = ["a", "b", "c", "d"]
                .iter()
                .take(op.arity())
                .copied()
                .collect();
            params.push("dtype");
            let a = bind(name, e.span, args, kwargs, &params, op.arity())?;
            // Bit counts take an integer's bits and give an integer.
            let bit_count = matches!(op, Intrinsic::Popcount | Intrinsic::Ctz);
            let mut xs = Vec::new();
            for x in a.iter().take(op.arity()) {
                let x = x.unwrap_or(e);
                xs.push(if bit_count {
                    self.integer(x, |d| format!("`{name}` takes an integer, got {d}"))?
                } else {
                    self.expr(x)?
                });
            }
            let dtype = match a[op.arity()] {
                Some(d) => parse_dtype(d, false)?,
                None => xs.first().map(|x| x.dtype(&self.f)).unwrap_or(DType::F32),
            };
            if bit_count && !dtype.is_integer() {
                let at = a[op.arity()].map_or(e.span, |x| x.span);
                return Err(err(at, format!("`{name}` gives an integer, not {dtype}")));
            }
            return Ok(Expr::Call {
                op,
                args: xs,
                dtype,
            });
        }
        if KNOWN.contains(&name) {
            return Err(err(
                e.span,
                format!("`{name}` cannot be used in an expression"),
            ));
        }
        Err(unknown_function(name, e.span))
    }

    pub(super) fn typed_const(&mut self, dt: DType, v: &ast::Expr) -> LResult<Expr> {
        match (&v.kind, dt) {
            (ExprKind::Bool(b), DType::Bool) => Ok(Expr::Bool(*b)),
            (ExprKind::Int(i), d) if d.is_integer() || d == DType::Bool => Ok(Expr::Int(*i, d)),
            (ExprKind::Int(i), d) if d.is_float() => Ok(Expr::Float(*i as f64, d)),
            (ExprKind::Float(f), d) if d.is_float() => Ok(Expr::Float(*f, d)),
            (ExprKind::Str(s), d) if d.is_float() => {
                let f = match s.as_str() {
                    "inf" => f64::INFINITY,
                    "-inf" => f64::NEG_INFINITY,
                    "nan" => f64::NAN,
                    _ => return Err(err(v.span, format!("invalid float constant \"{s}\""))),
                };
                Ok(Expr::Float(f, d))
            }
            (ExprKind::Float(_) | ExprKind::Str(_), _) | (ExprKind::Bool(_), _) => {
                Err(err(v.span, format!("invalid constant for `T.{dt}`")))
            }
            _ => Ok(Expr::Cast(dt, Box::new(self.expr(v)?))),
        }
    }
}
