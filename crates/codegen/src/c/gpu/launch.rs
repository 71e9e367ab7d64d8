//! Launch dimensions of a CUDA kernel: the extents of its `blockIdx` and `threadIdx` loops as
//! expressions of the scalar parameters (`LaunchExpr`), bounds of extents read from arrays (a
//! fixed grid striding over them), and their C text.

use super::*;

impl Writer<'_> {
    /// The grid of a `blockIdx` loop ending at `end`, an expression read from memory: at most
    /// [`GRID_STRIDE_BLOCKS`], at least 1, and no more than the bound of `end` where the
    /// buffers it loads have a declared domain (`T.assume_buffer_domain`: a bucket's rows, read
    /// from its `indptr`, are at most the axis's nnz). The loop strides over whatever is left.
    pub(super) fn grid_stride_blocks(&self, end: &Expr) -> LaunchExpr {
        let cap = LaunchExpr::Const(GRID_STRIDE_BLOCKS);
        let mut domains: HashMap<BufferId, (Expr, Expr)> = HashMap::new();
        self.func.body.visit(&mut |s| {
            if let Stmt::AssumeBufferDomain { buffer, lo, hi, .. } = s {
                domains.insert(*buffer, (lo.clone(), hi.clone()));
            }
        });
        match self.launch_bound(end, true, &domains) {
            Some(ub) => LaunchExpr::Max(
                Box::new(LaunchExpr::Min(Box::new(ub), Box::new(cap))),
                Box::new(LaunchExpr::Const(1)),
            ),
            None => cap,
        }
    }

    /// An upper (`upper`) or lower bound of the integer `e` as a launch expression, loads of a
    /// buffer with a domain `[lo, hi)` taken as `hi - 1` or `lo`; `None` where `e` has a form
    /// this does not bound (a product of two unknowns, a division by a non-constant, ...).
    pub(super) fn launch_bound(
        &self,
        e: &Expr,
        upper: bool,
        domains: &HashMap<BufferId, (Expr, Expr)>,
    ) -> Option<LaunchExpr> {
        let b = |x: &Expr, up: bool| self.launch_bound(x, up, domains).map(Box::new);
        Some(match e {
            Expr::Int(..) | Expr::Var(_) => self.launch_expr(e)?,
            Expr::Cast(dt, a) if dt.is_integer() => self.launch_bound(a, upper, domains)?,
            Expr::Load { buffer, .. } => {
                let (lo, hi) = domains.get(buffer)?;
                if upper {
                    // `hi - 1`; an `indptr`'s `nnz + 1` gives `nnz` itself.
                    match hi {
                        Expr::Binary(BinOp::Add, x, one) if matches!(**one, Expr::Int(1, _)) => {
                            self.launch_expr(x)?
                        }
                        _ => LaunchExpr::Sub(
                            Box::new(self.launch_expr(hi)?),
                            Box::new(LaunchExpr::Const(1)),
                        ),
                    }
                } else {
                    self.launch_expr(lo)?
                }
            }
            Expr::Binary(op, x, y) => match op {
                BinOp::Add => LaunchExpr::Add(b(x, upper)?, b(y, upper)?),
                BinOp::Sub => LaunchExpr::Sub(b(x, upper)?, b(y, !upper)?),
                BinOp::Min => LaunchExpr::Min(b(x, upper)?, b(y, upper)?),
                BinOp::Max => LaunchExpr::Max(b(x, upper)?, b(y, upper)?),
                BinOp::Mul | BinOp::FloorDiv | BinOp::Div => {
                    // Only by a non-negative constant (positive for a division), whose sign
                    // keeps the direction of the bound.
                    let c = match &**y {
                        Expr::Int(c, dt) if dt.is_integer() => *c,
                        _ => return None,
                    };
                    match op {
                        BinOp::Mul if c >= 0 => {
                            LaunchExpr::Mul(b(x, upper)?, Box::new(LaunchExpr::Const(c)))
                        }
                        BinOp::FloorDiv | BinOp::Div if c > 0 => {
                            LaunchExpr::FloorDiv(b(x, upper)?, Box::new(LaunchExpr::Const(c)))
                        }
                        _ => return None,
                    }
                }
                _ => return None,
            },
            _ => return None,
        })
    }

    /// `e` as a launch dimension (an expression of integer scalar parameters).
    pub(super) fn launch_expr(&self, e: &Expr) -> Option<LaunchExpr> {
        Some(match e {
            Expr::Int(v, dt) if dt.is_integer() => LaunchExpr::Const(*v),
            Expr::Var(v) => {
                let k = self.func.params.iter().position(|p| p == v)?;
                if !self.func.vars.get(*v)?.dtype.is_integer() {
                    return None;
                }
                LaunchExpr::Param(k)
            }
            Expr::Cast(dt, a) if dt.is_integer() => self.launch_expr(a)?,
            Expr::Binary(op, a, b) => {
                let (x, y) = (
                    Box::new(self.launch_expr(a)?),
                    Box::new(self.launch_expr(b)?),
                );
                match op {
                    BinOp::Add => LaunchExpr::Add(x, y),
                    BinOp::Sub => LaunchExpr::Sub(x, y),
                    BinOp::Mul => LaunchExpr::Mul(x, y),
                    BinOp::FloorDiv => LaunchExpr::FloorDiv(x, y),
                    BinOp::Div => LaunchExpr::FloorDiv(x, y),
                    BinOp::Min => LaunchExpr::Min(x, y),
                    BinOp::Max => LaunchExpr::Max(x, y),
                    _ => return None,
                }
            }
            _ => return None,
        })
    }

    /// A launch expression as C text over the kernel's scalar parameters (`int64_t`).
    pub(super) fn launch_text(&self, e: &LaunchExpr) -> String {
        use LaunchExpr::*;
        let bin = |a: &LaunchExpr, b: &LaunchExpr, f: &dyn Fn(String, String) -> String| {
            f(self.launch_text(a), self.launch_text(b))
        };
        match e {
            Const(c) => format!("INT64_C({c})"),
            Param(k) => {
                let v = self.func.params[*k];
                format!("((int64_t){})", self.var_names[v.index()])
            }
            Add(a, b) => bin(a, b, &|x, y| format!("({x} + {y})")),
            Sub(a, b) => bin(a, b, &|x, y| format!("({x} - {y})")),
            Mul(a, b) => bin(a, b, &|x, y| format!("({x} * {y})")),
            FloorDiv(a, b) => bin(a, b, &|x, y| format!("sptir_floordiv_i64({x}, {y})")),
            Min(a, b) => bin(a, b, &|x, y| format!("sptir_min_i64({x}, {y})")),
            Max(a, b) => bin(a, b, &|x, y| format!("sptir_max_i64({x}, {y})")),
        }
    }

    /// Records the extent of every thread-bound loop under `s` by tag, and checks that
    /// `blockIdx` loops are only nested in other `blockIdx` loops.
    pub(super) fn collect_bound_loops(
        &self,
        s: &Stmt,
        inside_other: bool,
        out: &mut BTreeMap<String, Vec<LaunchExpr>>,
    ) -> Res<()> {
        self.collect_bound_loops_in(s, inside_other, &mut Vec::new(), out)
    }

    pub(super) fn collect_bound_loops_in(
        &self,
        s: &Stmt,
        inside_other: bool,
        enclosing: &mut Vec<String>,
        out: &mut BTreeMap<String, Vec<LaunchExpr>>,
    ) -> Res<()> {
        if let Stmt::For(f) = s {
            let tag = f.thread.as_deref().unwrap_or("");
            let bound = f.kind == ForKind::ThreadBinding && !tag.starts_with("vthread");
            if bound && enclosing.iter().any(|t| t == tag) {
                return Err(CodegenError::Unsupported {
                    construct: format!("loop `{}`", self.func.vars[f.var].name),
                    message: format!(
                        "it is bound to `{tag}` inside another loop bound to `{tag}`: nested \
                         loops need different thread indices"
                    ),
                    span: f.span,
                });
            }
            if bound {
                let is_grid = GRID_TAGS.contains(&tag);
                if !is_grid && !BLOCK_TAGS.contains(&tag) {
                    return Err(CodegenError::Unsupported {
                        construct: format!("thread tag `{tag}`"),
                        message: "the CUDA target binds blockIdx.x/y/z and threadIdx.x/y/z"
                            .to_string(),
                        span: f.span,
                    });
                }
                if is_grid && inside_other {
                    return Err(CodegenError::Unsupported {
                        construct: format!("loop `{}`", self.func.vars[f.var].name),
                        message: format!(
                            "a loop bound to `{tag}` must not be nested in a serial or \
                             `threadIdx` loop (one launch covers the whole grid)"
                        ),
                        span: f.span,
                    });
                }
                let end = loop_end(f);
                let e = match self.launch_expr(&end) {
                    Some(e) => Some(e),
                    // A grid loop whose extent is only known inside the kernel (read from an
                    // array): a fixed grid strides over it.
                    None if is_grid => Some(self.grid_stride_blocks(&end)),
                    None => None,
                };
                let Some(e) = e else {
                    return Err(CodegenError::Unsupported {
                        construct: format!("loop `{}`", self.func.vars[f.var].name),
                        message: format!(
                            "the extent of a loop bound to `{tag}` must be known before the \
                             launch (an expression of the scalar parameters); split the loop \
                             and bind a part of constant extent"
                        ),
                        span: f.span,
                    });
                };
                let list = out.entry(tag.to_string()).or_default();
                if !list.contains(&e) {
                    list.push(e);
                }
                let inner_other = inside_other || !is_grid;
                enclosing.push(tag.to_string());
                let r = self.collect_bound_loops_in(&f.body, inner_other, enclosing, out);
                enclosing.pop();
                return r;
            }
            if mma::Mma::of(f).is_some() {
                // A tensorized nest runs on the 32 lanes of a warp along threadIdx.x.
                if enclosing.iter().any(|t| t == "threadIdx.x") {
                    return Err(CodegenError::Unsupported {
                        construct: format!("tensorized loop `{}`", self.func.vars[f.var].name),
                        message: "it sits under a loop bound to threadIdx.x, which the warp's \
                                  lanes use"
                            .to_string(),
                        span: f.span,
                    });
                }
                let list = out.entry("threadIdx.x".to_string()).or_default();
                if !list.contains(&LaunchExpr::Const(32)) {
                    list.push(LaunchExpr::Const(32));
                }
                return Ok(());
            }
            // A serial loop of one iteration does not repeat what it holds.
            let single = const_int(&f.extent) == Some(1);
            return self.collect_bound_loops_in(&f.body, inside_other || !single, enclosing, out);
        }
        let mut r = Ok(());
        let nested = inside_other || matches!(s, Stmt::If(_));
        s.for_each_child(|c| {
            if r.is_ok() {
                r = self.collect_bound_loops_in(c, nested, enclosing, out);
            }
        });
        r
    }
}
