//! Printer: IR → canonical script text. `parse(print(ir))` is structurally equal to `ir` and
//! `print(parse(print(ir)))` is the same text.
//!
//! Canonical form: four-space indentation, `T.sp.*` spellings, optional arguments only when not
//! default, directly nested plain serial loops merged into `T.grid`, `T.axis.remap` where every
//! block iterator is an enclosing loop variable over the loop's whole range, typed float
//! constants, parentheses only where precedence needs them. Names are made unique and valid
//! identifiers (a clash gets a `_1`, `_2`, ... suffix).

use std::collections::HashSet;
use std::fmt::Write;

use crate::attrs::{AttrValue, Attrs};
use crate::axis::{Axis, AxisKind, IterAxis, IterKind};
use crate::buffer::{Buffer, BufferDecl, BufferShape};
use crate::dtype::DType;
use crate::expr::{BinOp, BufferId, Expr, UnOp, VarId};
use crate::func::{IRModule, PrimFunc};
use crate::stmt::{Block, BufferRegion, For, ForKind, Stmt};

/// Prints every function of the module, separated by a blank line.
pub fn print_module(module: &IRModule) -> String {
    module
        .funcs
        .iter()
        .map(print_func)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Prints one function as `@T.prim_func def ...`.
pub fn print_func(func: &PrimFunc) -> String {
    Printer::new(func).func()
}

/// Prints one expression of `func` (names as `print_func` would print them).
pub fn print_expr(func: &PrimFunc, e: &Expr) -> String {
    Printer::new(func).expr(e)
}

/// Prints one statement of `func` at indentation level 0.
pub fn print_stmt(func: &PrimFunc, s: &Stmt) -> String {
    let mut p = Printer::new(func);
    p.stmt(s, 0);
    p.out
}

const RESERVED: [&str; 24] = [
    "def", "with", "as", "for", "in", "if", "elif", "else", "pass", "and", "or", "not", "True",
    "False", "None", "import", "from", "return", "lambda", "while", "T", "range", "is", "del",
];

fn sanitize(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() {
        s.push('v');
    }
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert_str(0, "v_");
    }
    if RESERVED.contains(&s.as_str()) {
        s.push('_');
    }
    s
}

/// Python string literal with double quotes.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\0' => out.push_str("\\0"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A round-trippable number for a float constant's argument.
fn float_repr(v: f64) -> String {
    if v.is_nan() {
        return "\"nan\"".to_string();
    }
    if v.is_infinite() {
        return if v > 0.0 {
            "\"inf\"".to_string()
        } else {
            "\"-inf\"".to_string()
        };
    }
    if v == 0.0 && v.is_sign_negative() {
        return "-0.0".to_string();
    }
    if v.fract() == 0.0 && v.abs() < 1e15 {
        return format!("{}", v as i64);
    }
    format!("{v:?}")
}

fn attr_value(v: &AttrValue) -> String {
    match v {
        AttrValue::Bool(b) => if *b { "True" } else { "False" }.to_string(),
        AttrValue::Int(i) => i.to_string(),
        AttrValue::Float(f) => {
            if f.is_infinite() {
                if *f > 0.0 { "1e999" } else { "-1e999" }.to_string()
            } else {
                format!("{f:?}")
            }
        }
        AttrValue::Str(s) => quote(s),
        AttrValue::List(items) => {
            format!(
                "[{}]",
                items.iter().map(attr_value).collect::<Vec<_>>().join(", ")
            )
        }
        AttrValue::Dict(d) => attr_dict(d),
    }
}

/// `{"key": value, ...}`.
pub fn attr_dict(a: &Attrs) -> String {
    let items: Vec<String> = a
        .iter()
        .map(|(k, v)| format!("{}: {}", quote(k), attr_value(v)))
        .collect();
    format!("{{{}}}", items.join(", "))
}

fn zero(e: &Expr) -> bool {
    *e == Expr::Int(0, DType::I32)
}
fn one(e: &Expr) -> bool {
    *e == Expr::Int(1, DType::I32)
}

fn binop_prec(op: BinOp) -> u8 {
    match op {
        BinOp::Or => 1,
        BinOp::And => 2,
        BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => 4,
        BinOp::Add | BinOp::Sub => 5,
        BinOp::Mul | BinOp::Div | BinOp::FloorDiv | BinOp::FloorMod => 6,
        BinOp::Min | BinOp::Max => 8,
    }
}

fn prec(e: &Expr) -> u8 {
    match e {
        Expr::Binary(op, _, _) => binop_prec(*op),
        Expr::Unary(UnOp::Not, _) => 3,
        Expr::Unary(UnOp::Neg, _) => 7,
        Expr::Int(v, DType::I32) if *v < 0 => 7,
        _ => 8,
    }
}

struct Printer<'a> {
    f: &'a PrimFunc,
    vars: Vec<String>,
    axes: Vec<String>,
    buffers: Vec<String>,
    out: String,
    /// Enclosing loops (variable, min, extent), for `T.axis.remap`.
    loops: Vec<(VarId, Expr, Expr)>,
}

impl<'a> Printer<'a> {
    fn new(f: &'a PrimFunc) -> Self {
        let mut used: HashSet<String> = HashSet::new();
        let mut unique = |name: &str| {
            let base = sanitize(name);
            let mut cand = base.clone();
            let mut k = 1;
            while used.contains(&cand) {
                cand = format!("{base}_{k}");
                k += 1;
            }
            used.insert(cand.clone());
            cand
        };
        let mut vars = vec![String::new(); f.vars.len()];
        for p in &f.params {
            if p.index() < vars.len() && vars[p.index()].is_empty() {
                vars[p.index()] = unique(&f.vars[*p].name);
            }
        }
        let axes = f.axes.iter().map(|(_, a)| unique(&a.name)).collect();
        let buffers = f.buffers.iter().map(|(_, b)| unique(&b.name)).collect();
        for (h, v) in f.vars.iter() {
            if vars[h.index()].is_empty() {
                vars[h.index()] = unique(&v.name);
            }
        }
        Printer {
            f,
            vars,
            axes,
            buffers,
            out: String::new(),
            loops: Vec::new(),
        }
    }

    fn var(&self, v: VarId) -> String {
        self.vars
            .get(v.index())
            .cloned()
            .unwrap_or_else(|| format!("v_{}", v.index()))
    }
    fn axis_name(&self, a: crate::AxisId) -> String {
        self.axes
            .get(a.index())
            .cloned()
            .unwrap_or_else(|| format!("axis_{}", a.index()))
    }
    fn buf(&self, b: BufferId) -> String {
        self.buffers
            .get(b.index())
            .cloned()
            .unwrap_or_else(|| format!("buffer_{}", b.index()))
    }
    fn var_dtype(&self, v: VarId) -> DType {
        self.f.vars.get(v).map(|x| x.dtype).unwrap_or(DType::I32)
    }

    fn line(&mut self, ind: usize, text: &str) {
        for _ in 0..ind {
            self.out.push_str("    ");
        }
        self.out.push_str(text);
        self.out.push('\n');
    }

    // ------------------------------------------------------------------ function

    fn func(mut self) -> String {
        let f = self.f;
        self.out.push_str("@T.prim_func\n");
        let params: Vec<String> = f
            .params
            .iter()
            .map(|p| {
                let d = self.var_dtype(*p);
                format!("{}: T.{}", self.var(*p), d.name())
            })
            .collect();
        let name = sanitize(&f.name);
        let one_line = format!("def {name}({}) -> None:", params.join(", "));
        if one_line.len() <= 100 {
            self.line(0, &one_line);
        } else {
            self.line(0, &format!("def {name}("));
            for p in &params {
                self.line(1, &format!("{p},"));
            }
            self.line(0, ") -> None:");
        }
        let start = self.out.len();
        if !f.attrs.is_empty() {
            let s = format!("T.func_attr({})", attr_dict(&f.attrs));
            self.line(1, &s);
        }
        for (h, a) in f.axes.iter() {
            let s = format!("{} = {}", self.axis_name(h), self.axis_decl(a));
            self.line(1, &s);
        }
        for b in &f.buffer_decls {
            if let Some(buf) = f.buffers.get(*b) {
                let s = format!("{} = {}", self.buf(*b), self.buffer_decl(buf));
                self.line(1, &s);
            }
        }
        self.stmt(&f.body, 1);
        if self.out.len() == start {
            self.line(1, "pass");
        }
        self.out
    }

    fn opt_expr(&self, e: &Option<Expr>) -> String {
        e.as_ref()
            .map(|x| self.expr(x))
            .unwrap_or_else(|| "None".to_string())
    }
    fn opt_var(&self, v: Option<VarId>) -> String {
        v.map(|x| self.var(x)).unwrap_or_else(|| "None".to_string())
    }

    fn axis_decl(&self, a: &Axis) -> String {
        let parent = a
            .parent
            .map(|p| self.axis_name(p))
            .unwrap_or_else(|| "None".to_string());
        let len = self.expr(&a.length);
        let mut s = match a.kind {
            AxisKind::DenseFixed => format!("T.sp.dense_fixed({len}"),
            AxisKind::DenseVaried => {
                let shape = match &a.nnz {
                    Some(n) => format!("({len}, {})", self.expr(n)),
                    None => len,
                };
                format!(
                    "T.sp.dense_varied({parent}, {shape}, {}",
                    self.opt_var(a.indptr)
                )
            }
            AxisKind::CompressedFixed => format!(
                "T.sp.compressed_fixed({parent}, ({len}, {}), {}",
                self.opt_expr(&a.nnz_cols),
                self.opt_var(a.indices)
            ),
            AxisKind::CompressedVaried => format!(
                "T.sp.compressed_varied({parent}, ({len}, {}), ({}, {})",
                self.opt_expr(&a.nnz),
                self.opt_var(a.indptr),
                self.opt_var(a.indices)
            ),
        };
        if a.idtype != DType::I32 {
            let _ = write!(s, ", idtype={}", quote(a.idtype.name()));
        }
        if !a.sorted {
            s.push_str(", sorted=False");
        }
        s.push(')');
        s
    }

    fn tuple(&self, items: &[String]) -> String {
        if items.len() == 1 {
            format!("({},)", items[0])
        } else {
            format!("({})", items.join(", "))
        }
    }

    fn shape(&self, b: &Buffer) -> String {
        let items: Vec<String> = match &b.shape {
            BufferShape::Sparse(ax) => ax.iter().map(|a| self.axis_name(*a)).collect(),
            BufferShape::Dense(d) => d.iter().map(|e| self.expr(e)).collect(),
        };
        self.tuple(&items)
    }

    fn buffer_decl(&self, b: &Buffer) -> String {
        let ns = if b.is_sparse() { "T.sp." } else { "T." };
        let mut s = match b.decl {
            BufferDecl::Match { data } => {
                format!(
                    "{ns}match_buffer({}, {}, {}",
                    self.var(data),
                    self.shape(b),
                    quote(b.dtype.name())
                )
            }
            BufferDecl::Alloc => {
                format!(
                    "{ns}alloc_buffer({}, {}",
                    self.shape(b),
                    quote(b.dtype.name())
                )
            }
        };
        if b.scope != "global" {
            let _ = write!(s, ", scope={}", quote(&b.scope));
        }
        if !b.strides.is_empty() {
            let st: Vec<String> = b.strides.iter().map(|e| self.expr(e)).collect();
            let _ = write!(s, ", strides=[{}]", st.join(", "));
        }
        if let Some(e) = &b.extra_storage {
            let _ = write!(s, ", extra_storage={}", self.expr(e));
        }
        if let Some(e) = &b.default_value {
            let _ = write!(s, ", default_value={}", self.expr(e));
        }
        s.push(')');
        s
    }

    // ------------------------------------------------------------------ statements

    /// A statement used as a block body: `pass` when empty.
    fn body(&mut self, s: &Stmt, ind: usize) {
        if s.is_empty() {
            self.line(ind, "pass");
        } else {
            self.stmt(s, ind);
        }
    }

    fn stmt(&mut self, s: &Stmt, ind: usize) {
        match s {
            Stmt::Seq(v) => {
                for c in v {
                    self.stmt(c, ind);
                }
            }
            Stmt::SparseIteration(it) => {
                let axes: Vec<String> = it
                    .axes
                    .iter()
                    .map(|a| match a {
                        IterAxis::Axis(x) => self.axis_name(*x),
                        IterAxis::Fuse(v) => format!(
                            "T.sp.fuse({})",
                            v.iter()
                                .map(|x| self.axis_name(*x))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                        IterAxis::Attach { axis, parent } => {
                            format!(
                                "T.sp.attach({}, {})",
                                self.axis_name(*axis),
                                self.axis_name(*parent)
                            )
                        }
                    })
                    .collect();
                let kinds: String = it.kinds.iter().map(|k| k.letter()).collect();
                let vars: Vec<String> = it.vars.iter().map(|v| self.var(*v)).collect();
                let head = format!(
                    "with T.sp.iteration([{}], {}, {}) as [{}]:",
                    axes.join(", "),
                    quote(&kinds),
                    quote(&it.name),
                    vars.join(", ")
                );
                self.line(ind, &head);
                let start = self.out.len();
                if !it.annotations.is_empty() {
                    let a = format!("T.sp.iteration_attr({})", attr_dict(&it.annotations));
                    self.line(ind + 1, &a);
                }
                if let Some(init) = &it.init {
                    self.line(ind + 1, "with T.init():");
                    self.body(init, ind + 2);
                }
                self.stmt(&it.body, ind + 1);
                if self.out.len() == start {
                    self.line(ind + 1, "pass");
                }
            }
            Stmt::For(l) => self.for_loop(l, ind),
            Stmt::Block(b) => self.block(b, ind),
            Stmt::Store(st) => {
                let idx: Vec<String> = st.indices.iter().map(|e| self.expr(e)).collect();
                let s = format!(
                    "{}[{}] = {}",
                    self.buf(st.buffer),
                    idx.join(", "),
                    self.expr(&st.value)
                );
                self.line(ind, &s);
            }
            Stmt::If(i) => {
                let s = format!("if {}:", self.expr(&i.cond));
                self.line(ind, &s);
                self.body(&i.then_case, ind + 1);
                let mut els = i.else_case.as_ref();
                while let Some(e) = els {
                    if let Stmt::If(inner) = e {
                        let s = format!("elif {}:", self.expr(&inner.cond));
                        self.line(ind, &s);
                        self.body(&inner.then_case, ind + 1);
                        els = inner.else_case.as_ref();
                    } else {
                        self.line(ind, "else:");
                        self.body(e, ind + 1);
                        els = None;
                    }
                }
            }
            Stmt::Evaluate(e) => {
                let s = format!("T.evaluate({})", self.expr(e));
                self.line(ind, &s);
            }
            Stmt::Allocate(b) => {
                let (shape, dtype, scope) = match self.f.buffers.get(*b) {
                    Some(buf) => (self.shape(buf), buf.dtype, buf.scope.clone()),
                    None => ("()".to_string(), DType::F32, "global".to_string()),
                };
                let s = format!(
                    "{} = T.allocate({shape}, {}, {})",
                    self.buf(*b),
                    quote(dtype.name()),
                    quote(&scope)
                );
                self.line(ind, &s);
            }
            Stmt::Let(l) => {
                let s = format!(
                    "{}: T.{} = {}",
                    self.var(l.var),
                    self.var_dtype(l.var).name(),
                    self.expr(&l.value)
                );
                self.line(ind, &s);
                self.stmt(&l.body, ind);
            }
            Stmt::AssumeBufferDomain { buffer, lo, hi, .. } => {
                let s = format!(
                    "T.assume_buffer_domain({}, ({}, {}))",
                    self.buf(*buffer),
                    self.expr(lo),
                    self.expr(hi)
                );
                self.line(ind, &s);
            }
        }
    }

    /// `lo, lo + ext` or just `ext` when `lo` is 0.
    fn range_args(&self, min: &Expr, ext: &Expr) -> String {
        if zero(min) {
            self.expr(ext)
        } else {
            let hi = Expr::add(min.clone(), ext.clone());
            format!("{}, {}", self.expr(min), self.expr(&hi))
        }
    }

    fn plain_serial(l: &For) -> bool {
        l.kind == ForKind::Serial && zero(&l.min) && l.annotations.is_empty() && l.thread.is_none()
    }

    fn for_loop(&mut self, l: &For, ind: usize) {
        // Merge directly nested plain serial loops into T.grid.
        let mut chain: Vec<&For> = vec![l];
        if Self::plain_serial(l) {
            while let Stmt::For(inner) = &chain[chain.len() - 1].body {
                let mut uses_chain = false;
                inner.extent.visit(&mut |e| {
                    if let Expr::Var(v) = e {
                        uses_chain |= chain.iter().any(|c| c.var == *v);
                    }
                });
                if !Self::plain_serial(inner) || uses_chain {
                    break;
                }
                chain.push(inner);
            }
        }
        let head = if chain.len() > 1 {
            let vars: Vec<String> = chain.iter().map(|c| self.var(c.var)).collect();
            let exts: Vec<String> = chain.iter().map(|c| self.expr(&c.extent)).collect();
            format!("for {} in T.grid({}):", vars.join(", "), exts.join(", "))
        } else {
            let mut args = self.range_args(&l.min, &l.extent);
            if l.kind == ForKind::ThreadBinding {
                let _ = write!(
                    args,
                    ", thread={}",
                    quote(l.thread.as_deref().unwrap_or(""))
                );
            }
            if !l.annotations.is_empty() {
                let _ = write!(args, ", annotations={}", attr_dict(&l.annotations));
            }
            format!(
                "for {} in T.{}({args}):",
                self.var(l.var),
                l.kind.script_name()
            )
        };
        self.line(ind, &head);
        let depth = self.loops.len();
        for c in &chain {
            self.loops.push((c.var, c.min.clone(), c.extent.clone()));
        }
        let body = &chain[chain.len() - 1].body;
        self.body(body, ind + 1);
        self.loops.truncate(depth);
    }

    fn region(&self, r: &BufferRegion) -> String {
        let parts: Vec<String> = r
            .ranges
            .iter()
            .map(|(lo, ext)| {
                if one(ext) {
                    self.expr(lo)
                } else if zero(lo) {
                    format!("0:{}", self.expr(ext))
                } else {
                    let hi = Expr::add(lo.clone(), ext.clone());
                    format!("{}:{}", self.expr(lo), self.expr(&hi))
                }
            })
            .collect();
        format!("{}[{}]", self.buf(r.buffer), parts.join(", "))
    }

    fn block(&mut self, b: &Block, ind: usize) {
        self.line(ind, &format!("with T.block({}):", quote(&b.name)));
        let i = ind + 1;
        let start = self.out.len();
        let remap = !b.iters.is_empty()
            && b.iters.iter().all(|it| {
                let Some(v) = it.binding.as_var() else {
                    return false;
                };
                let Some((_, lmin, lext)) = self.loops.iter().rev().find(|(lv, _, _)| *lv == v)
                else {
                    return false;
                };
                zero(lmin)
                    && zero(&it.min)
                    && it.extent == *lext
                    && self.var_dtype(it.var) == self.var_dtype(v)
            });
        if remap {
            let vars: Vec<String> = b.iters.iter().map(|it| self.var(it.var)).collect();
            let kinds: String = b.iters.iter().map(|it| it.kind.letter()).collect();
            let binds: Vec<String> = b.iters.iter().map(|it| self.expr(&it.binding)).collect();
            let s = format!(
                "{} = T.axis.remap({}, [{}])",
                vars.join(", "),
                quote(&kinds),
                binds.join(", ")
            );
            self.line(i, &s);
        } else {
            for it in &b.iters {
                let kind = match it.kind {
                    IterKind::Spatial => "spatial",
                    IterKind::Reduce => "reduce",
                };
                let dom = if zero(&it.min) {
                    self.expr(&it.extent)
                } else {
                    let hi = Expr::add(it.min.clone(), it.extent.clone());
                    format!("({}, {})", self.expr(&it.min), self.expr(&hi))
                };
                let s = format!(
                    "{} = T.axis.{kind}({dom}, {})",
                    self.var(it.var),
                    self.expr(&it.binding)
                );
                self.line(i, &s);
            }
        }
        for ab in &b.alloc_buffers {
            if let Some(buf) = self.f.buffers.get(*ab) {
                let s = format!("{} = {}", self.buf(*ab), self.buffer_decl(buf));
                self.line(i, &s);
            }
        }
        if let Some(p) = &b.predicate {
            let s = format!("T.where({})", self.expr(p));
            self.line(i, &s);
        }
        if !b.reads.is_empty() {
            let r: Vec<String> = b.reads.iter().map(|r| self.region(r)).collect();
            self.line(i, &format!("T.reads({})", r.join(", ")));
        }
        if !b.writes.is_empty() {
            let w: Vec<String> = b.writes.iter().map(|r| self.region(r)).collect();
            self.line(i, &format!("T.writes({})", w.join(", ")));
        }
        if !b.annotations.is_empty() {
            self.line(i, &format!("T.block_attr({})", attr_dict(&b.annotations)));
        }
        if let Some(init) = &b.init {
            self.line(i, "with T.init():");
            self.body(init, i + 1);
        }
        self.stmt(&b.body, i);
        if self.out.len() == start {
            self.line(i, "pass");
        }
    }

    // ------------------------------------------------------------------ expressions

    fn operand(&self, e: &Expr, min_prec: u8) -> String {
        let s = self.expr(e);
        if prec(e) < min_prec {
            format!("({s})")
        } else {
            s
        }
    }

    fn expr(&self, e: &Expr) -> String {
        match e {
            Expr::Int(v, DType::I32) => v.to_string(),
            Expr::Int(v, d) => format!("T.{}({v})", d.name()),
            Expr::Float(v, d) => format!("T.{}({})", d.name(), float_repr(*v)),
            Expr::Bool(b) => if *b { "True" } else { "False" }.to_string(),
            Expr::Var(v) => self.var(*v),
            Expr::Binary(op, a, b) => match op.symbol() {
                Some(sym) => {
                    let p = binop_prec(*op);
                    let (lp, rp) = if op.is_comparison() {
                        (p + 1, p + 1)
                    } else {
                        (p, p + 1)
                    };
                    format!("{} {sym} {}", self.operand(a, lp), self.operand(b, rp))
                }
                None => {
                    let name = if *op == BinOp::Min { "min" } else { "max" };
                    format!("T.{name}({}, {})", self.expr(a), self.expr(b))
                }
            },
            Expr::Unary(UnOp::Neg, a) => {
                if matches!(**a, Expr::Int(_, DType::I32)) {
                    format!("-({})", self.expr(a))
                } else {
                    format!("-{}", self.operand(a, 7))
                }
            }
            Expr::Unary(UnOp::Not, a) => format!("not {}", self.operand(a, 3)),
            Expr::Select(c, a, b) => {
                format!(
                    "T.Select({}, {}, {})",
                    self.expr(c),
                    self.expr(a),
                    self.expr(b)
                )
            }
            Expr::Cast(d, a) => format!("T.Cast({}, {})", quote(d.name()), self.expr(a)),
            Expr::Load { buffer, indices } => {
                let idx: Vec<String> = indices.iter().map(|i| self.expr(i)).collect();
                format!("{}[{}]", self.buf(*buffer), idx.join(", "))
            }
            Expr::Call { op, args, dtype } => {
                if args.is_empty() && op.arity() == 0 {
                    return format!("T.{}({})", op.name(), quote(dtype.name()));
                }
                let mut parts: Vec<String> = args.iter().map(|a| self.expr(a)).collect();
                let inferred = args.first().map(|a| a.dtype(self.f));
                if inferred != Some(*dtype) || args.len() != op.arity() {
                    parts.push(format!("dtype={}", quote(dtype.name())));
                }
                format!("T.{}({})", op.name(), parts.join(", "))
            }
            Expr::Let { var, value, body } => {
                format!(
                    "T.let({}, {}, {})",
                    self.var(*var),
                    self.expr(value),
                    self.expr(body)
                )
            }
        }
    }
}
