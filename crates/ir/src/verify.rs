//! The per-stage verifier: checks a function is well formed for its stage. Run after parsing
//! (`sparsetir check`) and after every pass in tests and debug builds.
//!
//! The checks follow SPEC §2: handles in range, variables in scope, buffer accesses of the right
//! arity with integer indices, numeric stores, axis and sparse-buffer structure, the statements
//! each stage allows, sparse-iteration shape (kinds, variables, fused chains, iterated parents)
//! and block well-formedness. Every problem is reported (the walk does not stop at the first),
//! each located at the closest declaration or statement that has a span.

use std::collections::HashSet;

use crate::attrs::AttrValue;
use crate::axis::{AxisId, AxisKind, CoOp, IterAxis, IterKind};
use crate::buffer::{BufferDecl, BufferShape};
use crate::dtype::DType;
use crate::expr::{binary_result_dtype, BinOp, BufferId, Expr, Intrinsic, UnOp, VarId};
use crate::func::{PrimFunc, Stage, STAGE_ATTR};
use crate::span::Span;
use crate::stmt::{Block, SparseIteration, Stmt};

/// One verifier finding, located at the offending declaration or statement where known.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct VerifyError {
    pub span: Span,
    pub message: String,
}

/// Checks `func` against the rules of its stage; returns every problem found.
pub fn verify_func(func: &PrimFunc) -> Result<(), Vec<VerifyError>> {
    let mut v = Verifier::new(func);
    v.run();
    if v.errors.is_empty() {
        Ok(())
    } else {
        Err(v.errors)
    }
}

/// What introduced a variable that is currently in scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum VarKind {
    Param,
    Loop,
    BlockIter,
    SparseIter,
    Let,
}

struct Verifier<'a> {
    f: &'a PrimFunc,
    stage: Stage,
    errors: Vec<VerifyError>,
    /// The innermost binding of each variable currently in scope (indexed by variable index).
    var_scope: Vec<Option<VarKind>>,
    /// How many enclosing declarations make each buffer visible.
    buffer_scope: Vec<u32>,
    /// Axes iterated by the enclosing sparse iterations (and the earlier entries of the current).
    iterated: Vec<AxisId>,
    iteration_names: HashSet<String>,
}

impl<'a> Verifier<'a> {
    fn new(f: &'a PrimFunc) -> Self {
        Verifier {
            f,
            stage: f.stage(),
            errors: Vec::new(),
            var_scope: vec![None; f.vars.len()],
            buffer_scope: vec![0; f.buffers.len()],
            iterated: Vec::new(),
            iteration_names: HashSet::new(),
        }
    }

    fn err(&mut self, span: Span, message: impl Into<String>) {
        self.errors.push(VerifyError {
            span,
            message: message.into(),
        });
    }

    fn stage_name(&self) -> &'static str {
        match self.stage {
            Stage::I => "stage I (sparse_tir_level = 2)",
            Stage::II => "stage II (sparse_tir_level = 1)",
            Stage::III => "stage III (sparse_tir_level = 0)",
        }
    }

    // ----- names for messages -------------------------------------------------------------

    fn var_name(&self, v: VarId) -> String {
        match self.f.vars.get(v) {
            Some(var) => var.name.clone(),
            None => format!("<var #{}>", v.index()),
        }
    }
    fn axis_name(&self, a: AxisId) -> String {
        match self.f.axes.get(a) {
            Some(axis) => axis.name.clone(),
            None => format!("<axis #{}>", a.index()),
        }
    }
    fn buffer_name(&self, b: BufferId) -> String {
        match self.f.buffers.get(b) {
            Some(buf) => buf.name.clone(),
            None => format!("<buffer #{}>", b.index()),
        }
    }

    // ----- scopes -------------------------------------------------------------------------

    /// Brings `v` into scope; returns the binding it shadows, for [`Self::undefine`].
    fn define(&mut self, v: VarId, kind: VarKind, span: Span) -> Option<Option<VarKind>> {
        match self.var_scope.get_mut(v.index()) {
            Some(slot) => Some(slot.replace(kind)),
            None => {
                self.err(
                    span,
                    format!("variable handle #{} is out of range", v.index()),
                );
                None
            }
        }
    }
    fn undefine(&mut self, v: VarId, previous: Option<Option<VarKind>>) {
        if let (Some(prev), Some(slot)) = (previous, self.var_scope.get_mut(v.index())) {
            *slot = prev;
        }
    }

    fn axis_ok(&mut self, a: AxisId, span: Span) -> bool {
        if a.index() < self.f.axes.len() {
            true
        } else {
            self.err(span, format!("axis handle #{} is out of range", a.index()));
            false
        }
    }

    /// Checks a buffer handle is in range and declared where it is used.
    fn buffer_use(&mut self, b: BufferId, span: Span) -> bool {
        match self.buffer_scope.get(b.index()) {
            None => {
                self.err(
                    span,
                    format!("buffer handle #{} is out of range", b.index()),
                );
                false
            }
            Some(0) => {
                let name = self.buffer_name(b);
                self.err(
                    span,
                    format!("buffer `{name}` is used outside the scope of its declaration"),
                );
                true
            }
            Some(_) => true,
        }
    }

    /// Checks that `v` is a `T.handle` parameter (structure arrays, buffer data).
    fn handle_param(&mut self, v: VarId, what: &str, span: Span) {
        let Some(var) = self.f.vars.get(v) else {
            self.err(
                span,
                format!("{what}: variable handle #{} is out of range", v.index()),
            );
            return;
        };
        if !self.f.params.contains(&v) || var.dtype != DType::Handle {
            let name = var.name.clone();
            self.err(
                span,
                format!("{what}: `{name}` must be a T.handle parameter"),
            );
        }
    }

    // ----- the function -------------------------------------------------------------------

    fn run(&mut self) {
        let f = self.f;
        if let Some(v) = f.attrs.get(STAGE_ATTR) {
            let ok = matches!(v, AttrValue::Int(0..=2));
            if !ok {
                self.err(
                    f.span,
                    format!("attribute {STAGE_ATTR} must be 0, 1 or 2, got {v:?}"),
                );
            }
        }
        let mut seen = HashSet::new();
        for &p in &f.params {
            if p.index() >= f.vars.len() {
                self.err(
                    f.span,
                    format!("parameter handle #{} is out of range", p.index()),
                );
                continue;
            }
            if !seen.insert(p) {
                let name = self.var_name(p);
                self.err(f.span, format!("parameter `{name}` is listed twice"));
            }
            self.var_scope[p.index()] = Some(VarKind::Param);
        }
        self.axes();
        for &b in &f.buffer_decls {
            self.buffer_decl(b, f.span);
            if let Some(c) = self.buffer_scope.get_mut(b.index()) {
                *c += 1;
            }
        }
        self.stmt(&f.body, f.span);
    }

    fn axes(&mut self) {
        let f = self.f;
        if self.stage == Stage::III && !f.axes.is_empty() {
            let names: Vec<_> = f.axes.iter().map(|(_, a)| a.name.as_str()).collect();
            let span = f.axes.iter().next().map(|(_, a)| a.span).unwrap_or(f.span);
            self.err(
                span,
                format!(
                    "{} does not allow sparse axes (found {})",
                    self.stage_name(),
                    names.join(", ")
                ),
            );
        }
        for (id, axis) in f.axes.iter() {
            let name = &axis.name;
            let span = axis.span;
            let kind = axis.kind.canonical_name();
            match (axis.kind, axis.parent) {
                (AxisKind::DenseFixed, Some(p)) => {
                    let pn = self.axis_name(p);
                    self.err(
                        span,
                        format!("dense_fixed axis `{name}` cannot have a parent (has `{pn}`)"),
                    );
                }
                (AxisKind::DenseFixed, None) => {}
                (_, None) => self.err(span, format!("{kind} axis `{name}` needs a parent axis")),
                (_, Some(p)) => {
                    if p.index() >= f.axes.len() {
                        self.err(
                            span,
                            format!(
                                "axis `{name}`: parent handle #{} is out of range",
                                p.index()
                            ),
                        );
                    } else if p.index() >= id.index() {
                        let pn = self.axis_name(p);
                        self.err(
                            span,
                            format!("axis `{name}`: its parent `{pn}` must be declared before it"),
                        );
                    }
                }
            }
            if axis.kind.is_varied() {
                match axis.indptr {
                    Some(v) => self.handle_param(v, &format!("indptr of axis `{name}`"), span),
                    None => self.err(
                        span,
                        format!("{kind} axis `{name}` needs an indptr parameter"),
                    ),
                }
            }
            if axis.kind.is_compressed() {
                match axis.indices {
                    Some(v) => self.handle_param(v, &format!("indices of axis `{name}`"), span),
                    None => self.err(
                        span,
                        format!("{kind} axis `{name}` needs an indices parameter"),
                    ),
                }
            }
            if axis.assembled && axis.kind != AxisKind::CompressedVaried {
                self.err(
                    span,
                    format!("{kind} axis `{name}` cannot be assembled (only compressed_varied)"),
                );
            }
            if axis.assembled && axis.nnz.is_none() {
                self.err(
                    span,
                    format!("assembled axis `{name}` needs an nnz parameter (set after assembly)"),
                );
            }
            if axis.kind == AxisKind::CompressedFixed && axis.nnz_cols.is_none() {
                self.err(
                    span,
                    format!("compressed_fixed axis `{name}` needs nnz_cols"),
                );
            }
            self.size_expr(&axis.length, &format!("length of axis `{name}`"), span);
            if let Some(e) = &axis.nnz {
                self.size_expr(e, &format!("nnz of axis `{name}`"), span);
            }
            if let Some(e) = &axis.nnz_cols {
                self.size_expr(e, &format!("nnz_cols of axis `{name}`"), span);
            }
            if !axis.idtype.is_integer() {
                self.err(
                    span,
                    format!(
                        "axis `{name}`: idtype {} is not an integer type",
                        axis.idtype
                    ),
                );
            }
        }
    }

    /// An axis size: an integer expression of parameters and constants.
    fn size_expr(&mut self, e: &Expr, what: &str, span: Span) {
        let mut bad = Vec::new();
        e.visit(&mut |x| match x {
            Expr::Var(v) if !self.f.params.contains(v) => bad.push(format!(
                "variable `{}`, which is not a parameter",
                self.var_name(*v)
            )),
            Expr::Load { .. } => bad.push("a buffer load".to_string()),
            Expr::Call { .. } => bad.push("an intrinsic call".to_string()),
            Expr::Let { .. } => bad.push("a let".to_string()),
            _ => {}
        });
        for b in bad {
            self.err(
                span,
                format!("{what} must only use parameters and constants, found {b}"),
            );
        }
        if let Some(d) = self.expr(e, span) {
            if !d.is_integer() {
                self.err(
                    span,
                    format!("{what} must be an integer expression, got {d}"),
                );
            }
        }
    }

    fn buffer_decl(&mut self, b: BufferId, ctx: Span) {
        let f = self.f;
        let Some(buf) = f.buffers.get(b) else {
            self.err(ctx, format!("buffer handle #{} is out of range", b.index()));
            return;
        };
        let span = if buf.span.is_unknown() { ctx } else { buf.span };
        let name = &buf.name;
        if let BufferDecl::Match { data } = buf.decl {
            self.handle_param(data, &format!("data of buffer `{name}`"), span);
        }
        match &buf.shape {
            BufferShape::Sparse(axes) => {
                if self.stage == Stage::III {
                    self.err(
                        span,
                        format!(
                            "{} does not allow sparse buffer `{name}`",
                            self.stage_name()
                        ),
                    );
                }
                for (i, &a) in axes.iter().enumerate() {
                    if !self.axis_ok(a, span) {
                        continue;
                    }
                    let an = self.axis_name(a);
                    if axes[..i].contains(&a) {
                        self.err(span, format!("buffer `{name}` lists axis `{an}` twice"));
                        continue;
                    }
                    if let Some(p) = f.axes[a].parent {
                        if f.axes[a].kind != AxisKind::DenseFixed && !axes[..i].contains(&p) {
                            let pn = self.axis_name(p);
                            self.err(
                                span,
                                format!(
                                    "buffer `{name}`: axis `{an}`'s parent `{pn}` must appear \
                                     before it in the buffer's axes"
                                ),
                            );
                        }
                    }
                }
            }
            BufferShape::Dense(dims) => {
                for d in dims {
                    self.index_expr(d, &format!("extent of buffer `{name}`"), span);
                }
            }
        }
        for s in &buf.strides {
            self.index_expr(s, &format!("stride of buffer `{name}`"), span);
        }
        if let Some(e) = &buf.extra_storage {
            self.index_expr(e, &format!("extra_storage of buffer `{name}`"), span);
        }
        if let Some(e) = &buf.default_value {
            self.expr(e, span);
        }
        if buf.dtype == DType::Handle {
            self.err(span, format!("buffer `{name}` cannot hold handles"));
        }
    }

    // ----- expressions --------------------------------------------------------------------

    /// Checks an expression that must be integer typed.
    fn index_expr(&mut self, e: &Expr, what: &str, span: Span) {
        if let Some(d) = self.expr(e, span) {
            if !d.is_integer() {
                self.err(
                    span,
                    format!("{what} must be an integer expression, got {d}"),
                );
            }
        }
    }

    /// Reports a handle-typed operand of an arithmetic, logic, cast, select or call.
    fn no_handle(&mut self, operand: &Expr, d: Option<DType>, span: Span) {
        if d == Some(DType::Handle) {
            let what = match operand {
                Expr::Var(v) => format!("handle variable `{}`", self.var_name(*v)),
                _ => "a handle value".to_string(),
            };
            self.err(span, format!("{what} cannot be used in arithmetic"));
        }
    }

    /// Checks an expression; returns its dtype when it can be computed.
    fn expr(&mut self, e: &Expr, span: Span) -> Option<DType> {
        match e {
            Expr::Int(_, d) => {
                if d.is_float() || *d == DType::Handle {
                    self.err(span, format!("integer constant with non-integer dtype {d}"));
                }
                Some(*d)
            }
            Expr::Float(_, d) => {
                if !d.is_float() {
                    self.err(span, format!("float constant with non-float dtype {d}"));
                }
                Some(*d)
            }
            Expr::Bool(_) => Some(DType::Bool),
            Expr::Var(v) => {
                let Some(var) = self.f.vars.get(*v) else {
                    self.err(
                        span,
                        format!("variable handle #{} is out of range", v.index()),
                    );
                    return None;
                };
                if self.var_scope[v.index()].is_none() {
                    self.err(
                        span,
                        format!(
                            "variable `{}` is used outside its scope (or before its definition)",
                            var.name
                        ),
                    );
                }
                Some(var.dtype)
            }
            Expr::Binary(op, a, b) => {
                let da = self.expr(a, span);
                let db = self.expr(b, span);
                self.no_handle(a, da, span);
                self.no_handle(b, db, span);
                if da == Some(DType::Handle) || db == Some(DType::Handle) {
                    // Reported once, at the handle: no second error for every operator above it.
                    return None;
                }
                if op.is_comparison() || op.is_logical() {
                    Some(DType::Bool)
                } else if op.is_bitwise() {
                    let (da, db) = (da?, db?);
                    if !da.is_integer() || !db.is_integer() {
                        self.err(
                            span,
                            format!(
                                "operator `{}` takes integers, got {} and {}",
                                op.symbol().unwrap_or("?"),
                                da.name(),
                                db.name()
                            ),
                        );
                        return None;
                    }
                    Some(if matches!(op, BinOp::Shl | BinOp::Shr) {
                        da
                    } else {
                        binary_result_dtype(da, db)
                    })
                } else {
                    let dt = binary_result_dtype(da?, db?);
                    let divides = matches!(op, BinOp::Div | BinOp::FloorDiv | BinOp::FloorMod);
                    // Stage I only: lowering may simplify a divisor the user wrote to 0
                    // (`j // 4` over a 4-wide axis), which is then a division by zero where it
                    // runs, as in the evaluator.
                    if divides && dt.is_integer() && self.stage == Stage::I {
                        if let Some(v) = crate::scalar::constant(b) {
                            if !v.is_float() && v.as_i128() == 0 {
                                self.err(
                                    span,
                                    format!(
                                        "integer {} by zero (the divisor is a constant 0)",
                                        if *op == BinOp::FloorMod {
                                            "modulo"
                                        } else {
                                            "division"
                                        }
                                    ),
                                );
                            }
                        }
                    }
                    Some(dt)
                }
            }
            Expr::Unary(op, a) => {
                let da = self.expr(a, span);
                self.no_handle(a, da, span);
                if da == Some(DType::Handle) {
                    return None;
                }
                match op {
                    UnOp::Not => Some(DType::Bool),
                    UnOp::Neg => da,
                }
            }
            Expr::Select(c, a, b) => {
                let dc = self.expr(c, span);
                let da = self.expr(a, span);
                let db = self.expr(b, span);
                self.no_handle(c, dc, span);
                self.no_handle(a, da, span);
                self.no_handle(b, db, span);
                Some(binary_result_dtype(da?, db?))
            }
            Expr::Cast(d, a) => {
                let da = self.expr(a, span);
                self.no_handle(a, da, span);
                if *d == DType::Handle {
                    self.err(span, "cannot cast to a handle");
                }
                Some(*d)
            }
            Expr::Load { buffer, indices } => {
                let ok = self.buffer_use(*buffer, span);
                self.access_indices(*buffer, ok, indices, span);
                if ok {
                    Some(self.f.buffers[*buffer].dtype)
                } else {
                    None
                }
            }
            Expr::Call { op, args, dtype } => {
                if args.len() != op.arity() {
                    self.err(
                        span,
                        format!(
                            "T.{} takes {} argument(s), got {}",
                            op.name(),
                            op.arity(),
                            args.len()
                        ),
                    );
                }
                let mut dts = Vec::with_capacity(args.len());
                for a in args {
                    let d = self.expr(a, span);
                    self.no_handle(a, d, span);
                    dts.push(d);
                }
                if matches!(op, Intrinsic::Popcount | Intrinsic::Ctz) {
                    // Bit counts: of an integer's bits, into an integer.
                    if let Some(Some(d)) = dts.first() {
                        if !d.is_integer() && *d != DType::Handle {
                            self.err(span, format!("T.{} takes an integer, got {d}", op.name()));
                        }
                    }
                    if !dtype.is_integer() {
                        self.err(
                            span,
                            format!("T.{} gives an integer, not {dtype}", op.name()),
                        );
                    }
                }
                Some(*dtype)
            }
            Expr::Let { var, value, body } => {
                self.expr(value, span);
                let prev = self.define(*var, VarKind::Let, span);
                let d = self.expr(body, span);
                self.undefine(*var, prev);
                d
            }
        }
    }

    /// Checks the indices of a load or store of `buffer` (arity and integer type).
    fn access_indices(&mut self, buffer: BufferId, in_range: bool, indices: &[Expr], span: Span) {
        if in_range {
            let ndim = self.f.buffers[buffer].ndim();
            if indices.len() != ndim {
                let name = self.buffer_name(buffer);
                self.err(
                    span,
                    format!(
                        "buffer `{name}` has {ndim} dimension(s) but is accessed with {} index(es)",
                        indices.len()
                    ),
                );
            }
        }
        let name = self.buffer_name(buffer);
        for i in indices {
            if let Some(d) = self.expr(i, span) {
                if !d.is_integer() {
                    let what = match i {
                        Expr::Var(v) if d == DType::Handle => {
                            format!(
                                "handle variable `{}` cannot be used in arithmetic",
                                self.var_name(*v)
                            )
                        }
                        _ => format!("index of buffer `{name}` must be an integer, got {d}"),
                    };
                    self.err(span, what);
                }
            }
        }
    }

    // ----- statements ---------------------------------------------------------------------

    fn stmt(&mut self, s: &Stmt, ctx: Span) {
        let span = if s.span().is_unknown() { ctx } else { s.span() };
        match s {
            Stmt::Seq(items) => {
                let mut allocated = Vec::new();
                for item in items {
                    self.stmt(item, ctx);
                    if let Stmt::Allocate(b) = item {
                        if let Some(c) = self.buffer_scope.get_mut(b.index()) {
                            *c += 1;
                            allocated.push(*b);
                        }
                    }
                }
                for b in allocated {
                    self.buffer_scope[b.index()] -= 1;
                }
            }
            Stmt::SparseIteration(it) => self.sparse_iteration(it, span),
            Stmt::For(l) => {
                if self.stage == Stage::I {
                    let n = self.var_name(l.var);
                    self.err(
                        span,
                        format!(
                            "{} does not allow loops (loop over `{n}`)",
                            self.stage_name()
                        ),
                    );
                }
                let n = self.var_name(l.var);
                self.index_expr(&l.min, &format!("start of loop `{n}`"), span);
                self.index_expr(&l.extent, &format!("extent of loop `{n}`"), span);
                self.iter_var_type(l.var, "loop variable", span);
                // The printed loop reads back with the wider of its start's and extent's types
                // (as TVMScript infers it): a narrower variable would not round-trip.
                let vd = self.f.vars[l.var].dtype;
                let (md, ed) = (l.min.dtype(self.f), l.extent.dtype(self.f));
                if vd.is_integer() && md.is_integer() && ed.is_integer() {
                    let wide = if md.bits() >= ed.bits() { md } else { ed };
                    if wide.bits() != vd.bits() {
                        self.err(
                            span,
                            format!(
                                "loop `{n}` is {vd} but its range is {wide} (cast the range to \
                                 the variable's type)"
                            ),
                        );
                    }
                }
                let prev = self.define(l.var, VarKind::Loop, span);
                self.stmt(&l.body, span);
                self.undefine(l.var, prev);
            }
            Stmt::Block(b) => self.block(b, span),
            Stmt::Store(st) => {
                let ok = self.buffer_use(st.buffer, span);
                self.access_indices(st.buffer, ok, &st.indices, span);
                let vd = self.expr(&st.value, span);
                if let (true, Some(vd)) = (ok, vd) {
                    let bd = self.f.buffers[st.buffer].dtype;
                    let name = self.buffer_name(st.buffer);
                    let numeric = |d: DType| d.is_integer() || d.is_float();
                    let compatible = (numeric(bd) && numeric(vd)) || (bd.is_bool() && vd.is_bool());
                    if !compatible {
                        self.err(
                            span,
                            format!("cannot store a {vd} value into {bd} buffer `{name}`"),
                        );
                    }
                }
            }
            Stmt::If(i) => {
                let d = self.expr(&i.cond, span);
                self.no_handle(&i.cond, d, span);
                self.stmt(&i.then_case, span);
                if let Some(e) = &i.else_case {
                    self.stmt(e, span);
                }
            }
            Stmt::While(w) => {
                if self.stage == Stage::I {
                    self.err(
                        span,
                        format!("{} does not allow while loops", self.stage_name()),
                    );
                }
                let d = self.expr(&w.cond, span);
                self.no_handle(&w.cond, d, span);
                self.stmt(&w.body, span);
            }
            Stmt::Evaluate(e) => {
                self.expr(e, span);
            }
            Stmt::Allocate(b) => {
                if self.stage == Stage::I {
                    let n = self.buffer_name(*b);
                    self.err(
                        span,
                        format!(
                            "{} does not allow T.allocate (buffer `{n}`)",
                            self.stage_name()
                        ),
                    );
                }
                self.buffer_decl(*b, span);
            }
            Stmt::Let(l) => {
                self.expr(&l.value, span);
                let prev = self.define(l.var, VarKind::Let, span);
                self.stmt(&l.body, span);
                self.undefine(l.var, prev);
            }
            Stmt::AssumeBufferDomain { buffer, lo, hi, .. } => {
                self.buffer_use(*buffer, span);
                self.expr(lo, span);
                self.expr(hi, span);
            }
        }
    }

    fn iter_var_type(&mut self, v: VarId, what: &str, span: Span) {
        if let Some(var) = self.f.vars.get(v) {
            if !var.dtype.is_integer() {
                let (n, d) = (var.name.clone(), var.dtype);
                self.err(
                    span,
                    format!("{what} `{n}` must have an integer type, got {d}"),
                );
            }
        }
    }

    fn sparse_iteration(&mut self, it: &SparseIteration, span: Span) {
        let name = it.name.as_str();
        if self.stage != Stage::I {
            self.err(
                span,
                format!(
                    "{} does not allow sparse iteration `{name}`",
                    self.stage_name()
                ),
            );
        }
        if !self.iteration_names.insert(name.to_string()) {
            self.err(
                span,
                format!("sparse iteration name `{name}` is used more than once"),
            );
        }
        let arity: usize = it.axes.iter().map(|a| a.arity()).sum();
        if it.kinds.len() != arity || it.vars.len() != arity {
            let kinds: String = it.kinds.iter().map(|k| k.letter()).collect();
            self.err(
                span,
                format!(
                    "sparse iteration `{name}`: its axes bind {arity} iterator(s) but it has kinds \
                     \"{kinds}\" ({}) and {} variable(s)",
                    it.kinds.len(),
                    it.vars.len()
                ),
            );
        }
        let outer = self.iterated.len();
        for entry in &it.axes {
            self.iter_entry(entry, name, span);
        }
        let mut prevs = Vec::new();
        for &v in &it.vars {
            self.iter_var_type(v, "iterator variable", span);
            prevs.push((v, self.define(v, VarKind::SparseIter, span)));
        }
        self.under_union(it, span);
        if let Some(init) = &it.init {
            self.stmt(init, span);
            if it.kinds.len() == arity && it.vars.len() == arity {
                self.init_reads(it, init, span);
            }
        }
        self.stmt(&it.body, span);
        for (v, prev) in prevs.into_iter().rev() {
            self.undefine(v, prev);
        }
        self.iterated.truncate(outer);
    }

    /// An axis iterated under a `T.sp.union` of the same iteration may not hang from one of
    /// the union's parts (by its parent or an attach): a coordinate of the union may be absent
    /// from that part's fiber, leaving no element to hang the axis's fiber from. (Under
    /// `T.sp.intersect` every part holds the coordinate.)
    fn under_union(&mut self, it: &SparseIteration, span: Span) {
        let steps = iter_steps(self.f, &it.axes);
        let mut union: Vec<AxisId> = Vec::new();
        for step in &steps {
            for (&axis, dep) in step.axes.iter().zip(&step.deps) {
                let Some(d) = dep.filter(|d| union.contains(d)) else {
                    continue;
                };
                let (an, dn) = (self.axis_name(axis), self.axis_name(d));
                self.err(
                    span,
                    format!(
                        "sparse iteration `{}`: axis {an} hangs from axis {dn}, which \
                         T.sp.union co-iterates: a coordinate of the union may be absent \
                         from {dn}'s fiber (T.sp.intersect has it in every part)",
                        it.name
                    ),
                );
            }
            if step.union {
                union.extend(&step.axes);
            }
        }
    }

    /// The init rule (SPEC §2.3): `T.init()` runs once per point of the iteration's spatial
    /// iterators, before the first reduction step. So it may not read a reduction iterator,
    /// and a spatial iterator after the first reduction may not walk a fiber of a reduction
    /// iterator ([`init_fiber_conflicts`]). The evaluator refuses both when it reaches the
    /// iteration; here they are found up front.
    fn init_reads(&mut self, it: &SparseIteration, init: &Stmt, span: Span) {
        let f = self.f;
        let steps = iter_steps(f, &it.axes);
        let var_name = |v: VarId| f.vars.get(v).map_or("?", |x| x.name.as_str());
        let name = it.name.as_str();
        for (t, r) in init_fiber_conflicts(&steps, &it.kinds) {
            let message = format!(
                "sparse iteration `{name}`: T.init() cannot run once per spatial point, \
                 because spatial iterator `{}` walks a fiber of reduction iterator `{}` \
                 (iterate it before the reductions)",
                var_name(it.vars[t]),
                var_name(it.vars[r])
            );
            self.err(span, message);
        }
        let spatial: Vec<String> = it
            .vars
            .iter()
            .zip(&it.kinds)
            .filter(|(_, k)| **k == IterKind::Spatial)
            .map(|(v, _)| format!("`{}`", var_name(*v)))
            .collect();
        for (&v, _) in it
            .vars
            .iter()
            .zip(&it.kinds)
            .filter(|(_, k)| **k == IterKind::Reduce)
        {
            let mut at_span = None;
            init.visit(&mut |x| {
                let mut found = false;
                x.for_each_expr(|e| {
                    e.visit(&mut |y| found |= matches!(y, Expr::Var(w) if *w == v));
                });
                if found && at_span.is_none() {
                    at_span = Some(x.span());
                }
            });
            if let Some(s) = at_span {
                let s = if s.is_unknown() { span } else { s };
                let message = format!(
                    "sparse iteration `{name}`: T.init() reads reduction iterator `{}`; the \
                     init runs once per point of the spatial iterators ({}) before the \
                     reduction, so it can read only those",
                    var_name(v),
                    if spatial.is_empty() {
                        "none".to_string()
                    } else {
                        spatial.join(", ")
                    }
                );
                self.err(s, message);
            }
        }
    }

    fn iter_entry(&mut self, entry: &IterAxis, name: &str, span: Span) {
        let f = self.f;
        match entry {
            IterAxis::Axis(a) => {
                if !self.axis_ok(*a, span) {
                    return;
                }
                if let Some(p) = f.axes[*a].parent {
                    if !self.iterated.contains(&p) {
                        let (an, pn) = (self.axis_name(*a), self.axis_name(p));
                        self.err(
                            span,
                            format!("sparse iteration `{name}`: axis {an}'s parent {pn} is not iterated"),
                        );
                    }
                }
                self.iterated.push(*a);
            }
            IterAxis::Fuse(axes) => {
                if axes.is_empty() {
                    self.err(span, format!("sparse iteration `{name}`: empty T.sp.fuse"));
                }
                let all_ok = axes.iter().all(|&a| self.axis_ok(a, span));
                if all_ok {
                    for w in axes.windows(2) {
                        if f.axes[w[1]].parent != Some(w[0]) {
                            let (x, y) = (self.axis_name(w[0]), self.axis_name(w[1]));
                            self.err(
                                span,
                                format!(
                                    "sparse iteration `{name}`: fused axes {x}, {y} do not form \
                                     a chain ({y}'s parent is not {x})"
                                ),
                            );
                        }
                    }
                    self.iterated.extend(axes.iter().copied());
                }
            }
            IterAxis::Attach { axis, parent } => {
                let ok = self.axis_ok(*axis, span) & self.axis_ok(*parent, span);
                if !ok {
                    return;
                }
                if !self.iterated.contains(parent) {
                    let (an, pn) = (self.axis_name(*axis), self.axis_name(*parent));
                    self.err(
                        span,
                        format!("sparse iteration `{name}`: attach parent {pn} of axis {an} is not iterated"),
                    );
                }
                self.iterated.push(*axis);
            }
            IterAxis::CoIter { op, parts } => {
                let what = op.name();
                if parts.len() < 2 {
                    self.err(
                        span,
                        format!("sparse iteration `{name}`: T.sp.{what} needs at least two axes"),
                    );
                }
                for p in parts {
                    if matches!(p, IterAxis::Axis(_) | IterAxis::Attach { .. }) {
                        self.iter_entry(p, name, span);
                    } else {
                        self.err(
                            span,
                            format!(
                                "sparse iteration `{name}`: the parts of T.sp.{what} are axes or \
                                 T.sp.attach(...)"
                            ),
                        );
                    }
                }
            }
        }
    }

    fn block(&mut self, b: &Block, span: Span) {
        let name = b.name.as_str();
        if self.stage == Stage::I {
            self.err(
                span,
                format!(
                    "{} does not allow blocks (block `{name}`)",
                    self.stage_name()
                ),
            );
        }
        for it in &b.iters {
            let vn = self.var_name(it.var);
            self.index_expr(
                &it.min,
                &format!("domain start of block `{name}` iterator `{vn}`"),
                span,
            );
            self.index_expr(
                &it.extent,
                &format!("domain extent of block `{name}` iterator `{vn}`"),
                span,
            );
            self.index_expr(
                &it.binding,
                &format!("binding of block `{name}` iterator `{vn}`"),
                span,
            );
            let mut bad = Vec::new();
            it.binding.visit(&mut |e| {
                if let Expr::Var(v) = e {
                    if let Some(Some(k)) = self.var_scope.get(v.index()) {
                        if !matches!(k, VarKind::Param | VarKind::Loop) {
                            bad.push(*v);
                        }
                    }
                }
            });
            for v in bad {
                let n = self.var_name(v);
                self.err(
                    span,
                    format!(
                        "block `{name}`: binding of iterator `{vn}` uses `{n}`, which is not a loop \
                         variable or parameter"
                    ),
                );
            }
            self.iter_var_type(it.var, &format!("block `{name}` iterator"), span);
        }
        let mut prevs = Vec::new();
        for it in &b.iters {
            prevs.push((it.var, self.define(it.var, VarKind::BlockIter, span)));
        }
        for &buf in &b.alloc_buffers {
            self.buffer_decl(buf, span);
            if let Some(c) = self.buffer_scope.get_mut(buf.index()) {
                *c += 1;
            }
        }
        if let Some(p) = &b.predicate {
            let d = self.expr(p, span);
            self.no_handle(p, d, span);
        }
        for r in b.reads.iter().chain(&b.writes) {
            let ok = self.buffer_use(r.buffer, span);
            if ok {
                let ndim = self.f.buffers[r.buffer].ndim();
                if r.ranges.len() != ndim {
                    let bn = self.buffer_name(r.buffer);
                    self.err(
                        span,
                        format!(
                            "block `{name}`: region of buffer `{bn}` has {} range(s) but the buffer \
                             has {ndim} dimension(s)",
                            r.ranges.len()
                        ),
                    );
                }
            }
            for (lo, ext) in &r.ranges {
                self.index_expr(lo, &format!("region start in block `{name}`"), span);
                self.index_expr(ext, &format!("region extent in block `{name}`"), span);
            }
        }
        if let Some(init) = &b.init {
            if !b.iters.iter().any(|i| i.kind == IterKind::Reduce) {
                self.err(
                    span,
                    format!("block `{name}` has T.init() but no reduce iterator"),
                );
            }
            self.stmt(init, span);
        }
        self.stmt(&b.body, span);
        for &buf in &b.alloc_buffers {
            if let Some(c) = self.buffer_scope.get_mut(buf.index()) {
                *c = c.saturating_sub(1);
            }
        }
        for (v, prev) in prevs.into_iter().rev() {
            self.undefine(v, prev);
        }
    }
}

/// One iterator variable of a sparse iteration, as the init and union rules see it: the axes
/// whose fibers it walks (one, or a co-iteration's parts) and the axis each hangs from (its
/// parent, or an attach's parent).
pub(crate) struct IterStep {
    pub axes: Vec<AxisId>,
    pub deps: Vec<Option<AxisId>>,
    /// A `T.sp.union`.
    pub union: bool,
}

/// The steps of an iteration over `entries`, one per iterator variable (a fused chain gives
/// one per axis).
pub(crate) fn iter_steps(f: &PrimFunc, entries: &[IterAxis]) -> Vec<IterStep> {
    let parent = |a: AxisId| f.axes.get(a).and_then(|x| x.parent);
    let part = |p: &IterAxis| match p {
        IterAxis::Axis(a) => Some((*a, parent(*a))),
        IterAxis::Attach { axis, parent } => Some((*axis, Some(*parent))),
        _ => None,
    };
    let step = |parts: Vec<(AxisId, Option<AxisId>)>, union| IterStep {
        axes: parts.iter().map(|p| p.0).collect(),
        deps: parts.iter().map(|p| p.1).collect(),
        union,
    };
    let mut steps = Vec::new();
    for entry in entries {
        match entry {
            IterAxis::Fuse(chain) => {
                steps.extend(chain.iter().map(|&a| step(vec![(a, parent(a))], false)));
            }
            IterAxis::CoIter { op, parts } => steps.push(step(
                parts.iter().filter_map(part).collect(),
                *op == CoOp::Union,
            )),
            other => steps.push(step(part(other).into_iter().collect(), false)),
        }
    }
    steps
}

/// Each spatial step after the first reduction that walks a fiber of a reduction step between
/// them, with the first such reduction step: `(spatial, reduction)` indices. The init, which
/// runs per spatial point before the first reduction, has no such point to run at.
pub(crate) fn init_fiber_conflicts(steps: &[IterStep], kinds: &[IterKind]) -> Vec<(usize, usize)> {
    let Some(at) = kinds.iter().position(|k| *k == IterKind::Reduce) else {
        return Vec::new();
    };
    (at + 1..steps.len().min(kinds.len()))
        .filter(|&t| kinds[t] == IterKind::Spatial)
        .filter_map(|t| {
            (at..t)
                .find(|&r| {
                    kinds[r] == IterKind::Reduce
                        && steps[r]
                            .axes
                            .iter()
                            .any(|a| steps[t].deps.contains(&Some(*a)))
                })
                .map(|r| (t, r))
        })
        .collect()
}
