//! Structural equality and hashing up to renaming of variables, axes and buffers.
//!
//! Both are computed from one canonical token stream per function: a deterministic walk that
//! emits every compared field and replaces each variable, axis and buffer by the index of its
//! definition in walk order. Two functions are equal exactly when their streams are equal (so
//! the renaming found is a bijection, definition by definition), and the hash is the hash of the
//! stream, which makes it consistent with equality by construction. Names of variables, axes,
//! buffers and of the function, and spans, are never emitted.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use crate::attrs::{AttrValue, Attrs};
use crate::axis::{Axis, AxisId, IterAxis};
use crate::buffer::{Buffer, BufferDecl, BufferShape};
use crate::dtype::DType;
use crate::expr::{BufferId, Expr, VarId};
use crate::func::{IRModule, PrimFunc};
use crate::stmt::{Block, BufferRegion, Stmt};

/// True when the two functions are equal up to renaming (names of variables, axes, buffers and
/// the function itself are ignored; block and iteration names, attributes and structure count).
pub fn func_eq(a: &PrimFunc, b: &PrimFunc) -> bool {
    canonical_tokens(a) == canonical_tokens(b)
}

/// Module equality: same number of functions, pairwise [`func_eq`] in order.
pub fn module_eq(a: &IRModule, b: &IRModule) -> bool {
    a.funcs.len() == b.funcs.len() && a.funcs.iter().zip(&b.funcs).all(|(x, y)| func_eq(x, y))
}

/// Where two functions first differ for [`func_eq`], for a report: the canonical streams'
/// first differing token with the few before it (variables, axes and buffers are definition
/// indices in walk order); `None` when they are equal.
pub fn first_difference(a: &PrimFunc, b: &PrimFunc) -> Option<String> {
    let (ta, tb) = (canonical_tokens(a), canonical_tokens(b));
    let at = ta
        .iter()
        .zip(&tb)
        .position(|(x, y)| x != y)
        .or_else(|| (ta.len() != tb.len()).then_some(ta.len().min(tb.len())))?;
    let from = at.saturating_sub(8);
    Some(format!(
        "at token {at} of {} / {}: after {:?}, {:?} against {:?}",
        ta.len(),
        tb.len(),
        &ta[from..at],
        ta.get(at),
        tb.get(at)
    ))
}

/// A hash consistent with [`func_eq`]: equal functions hash equal.
pub fn func_hash(f: &PrimFunc) -> u64 {
    let mut h = DefaultHasher::new();
    canonical_tokens(f).hash(&mut h);
    h.finish()
}

/// One element of the canonical stream.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Tok<'a> {
    /// A structural tag (node kind, enum variant, presence marker).
    Tag(&'static str),
    /// A count, an integer constant or a definition index.
    Int(i64),
    /// A float's bit pattern.
    Bits(u64),
    /// A compared string (block/iteration names, attribute keys, scopes, thread tags).
    Str(&'a str),
    DType(DType),
}

/// The canonical stream of `f` (see the module documentation).
fn canonical_tokens(f: &PrimFunc) -> Vec<Tok<'_>> {
    let mut c = Canon::new(f);
    c.func();
    c.out
}

struct Canon<'a> {
    f: &'a PrimFunc,
    out: Vec<Tok<'a>>,
    /// Current definition index of each variable (rebinding a variable gives it a new index).
    vars: HashMap<VarId, i64>,
    var_count: i64,
    /// Variables used without any definition, numbered by first use.
    free_vars: HashMap<VarId, i64>,
    buffers: HashMap<BufferId, i64>,
    buffer_count: i64,
    free_buffers: HashMap<BufferId, i64>,
}

impl<'a> Canon<'a> {
    fn new(f: &'a PrimFunc) -> Self {
        Canon {
            f,
            out: Vec::new(),
            vars: HashMap::new(),
            var_count: 0,
            free_vars: HashMap::new(),
            buffers: HashMap::new(),
            buffer_count: 0,
            free_buffers: HashMap::new(),
        }
    }

    fn tag(&mut self, t: &'static str) {
        self.out.push(Tok::Tag(t));
    }
    fn int(&mut self, v: i64) {
        self.out.push(Tok::Int(v));
    }
    fn len(&mut self, n: usize) {
        self.out.push(Tok::Int(n as i64));
    }
    fn dtype(&mut self, d: DType) {
        self.out.push(Tok::DType(d));
    }
    fn string(&mut self, s: &'a str) {
        self.out.push(Tok::Str(s));
    }

    fn def_var(&mut self, v: VarId) {
        let idx = self.var_count;
        self.var_count += 1;
        self.vars.insert(v, idx);
        self.tag("defvar");
        match self.f.vars.get(v) {
            Some(var) => self.dtype(var.dtype),
            None => self.tag("badvar"),
        }
    }

    fn use_var(&mut self, v: VarId) {
        if let Some(&i) = self.vars.get(&v) {
            self.tag("var");
            self.int(i);
            return;
        }
        let next = self.free_vars.len() as i64;
        let i = *self.free_vars.entry(v).or_insert(next);
        self.tag("freevar");
        self.int(i);
        match self.f.vars.get(v) {
            Some(var) => self.dtype(var.dtype),
            None => self.tag("badvar"),
        }
    }

    fn opt_var(&mut self, v: Option<VarId>) {
        match v {
            Some(v) => {
                self.tag("some");
                self.use_var(v)
            }
            None => self.tag("none"),
        }
    }

    fn use_axis(&mut self, a: AxisId) {
        // Axes are defined in arena order, so the definition index is the arena index.
        self.tag("axis");
        self.len(a.index());
    }

    fn def_buffer(&mut self, b: BufferId) {
        let idx = self.buffer_count;
        self.buffer_count += 1;
        self.buffers.insert(b, idx);
        self.tag("defbuf");
        let f = self.f;
        match f.buffers.get(b) {
            Some(buf) => self.buffer_body(buf),
            None => self.tag("badbuf"),
        }
    }

    fn use_buffer(&mut self, b: BufferId) {
        if let Some(&i) = self.buffers.get(&b) {
            self.tag("buf");
            self.int(i);
            return;
        }
        let next = self.free_buffers.len() as i64;
        let i = *self.free_buffers.entry(b).or_insert(next);
        self.tag("freebuf");
        self.int(i);
    }

    fn func(&mut self) {
        let f = self.f;
        self.tag("func");
        self.len(f.params.len());
        for &p in &f.params {
            self.def_var(p);
        }
        self.attrs(&f.attrs);
        self.len(f.axes.len());
        for (_, axis) in f.axes.iter() {
            self.axis(axis);
        }
        self.len(f.buffer_decls.len());
        for &b in &f.buffer_decls {
            self.def_buffer(b);
        }
        self.stmt(&f.body);
    }

    fn axis(&mut self, a: &'a Axis) {
        self.tag(a.kind.canonical_name());
        match a.parent {
            Some(p) => {
                self.tag("some");
                self.use_axis(p)
            }
            None => self.tag("none"),
        }
        self.expr(&a.length);
        self.opt_expr(a.nnz.as_ref());
        self.opt_expr(a.nnz_cols.as_ref());
        self.opt_var(a.indptr);
        self.opt_var(a.indices);
        self.dtype(a.idtype);
        self.tag(if a.sorted { "sorted" } else { "unsorted" });
        self.tag(if a.assembled { "assembled" } else { "given" });
    }

    fn buffer_body(&mut self, b: &'a Buffer) {
        match b.decl {
            BufferDecl::Match { data } => {
                self.tag("match");
                self.use_var(data)
            }
            BufferDecl::Alloc => self.tag("alloc"),
        }
        match &b.shape {
            BufferShape::Sparse(axes) => {
                self.tag("sparse");
                self.len(axes.len());
                for &a in axes {
                    self.use_axis(a);
                }
            }
            BufferShape::Dense(dims) => {
                self.tag("dense");
                self.exprs(dims);
            }
        }
        self.dtype(b.dtype);
        self.string(&b.scope);
        self.exprs(&b.strides);
        self.opt_expr(b.extra_storage.as_ref());
        self.opt_expr(b.default_value.as_ref());
    }

    fn attrs(&mut self, attrs: &'a Attrs) {
        self.len(attrs.0.len());
        for (k, v) in &attrs.0 {
            self.string(k);
            self.attr_value(v);
        }
    }

    fn attr_value(&mut self, v: &'a AttrValue) {
        match v {
            AttrValue::Bool(b) => {
                self.tag("abool");
                self.int(*b as i64)
            }
            AttrValue::Int(i) => {
                self.tag("aint");
                self.int(*i)
            }
            AttrValue::Float(x) => {
                self.tag("afloat");
                self.out.push(Tok::Bits(x.to_bits()))
            }
            AttrValue::Str(s) => {
                self.tag("astr");
                self.string(s)
            }
            AttrValue::List(items) => {
                self.tag("alist");
                self.len(items.len());
                for i in items {
                    self.attr_value(i);
                }
            }
            AttrValue::Dict(d) => {
                self.tag("adict");
                self.attrs(d)
            }
        }
    }

    fn exprs(&mut self, es: &'a [Expr]) {
        self.len(es.len());
        for e in es {
            self.expr(e);
        }
    }

    fn opt_expr(&mut self, e: Option<&'a Expr>) {
        match e {
            Some(e) => {
                self.tag("some");
                self.expr(e)
            }
            None => self.tag("none"),
        }
    }

    fn expr(&mut self, e: &'a Expr) {
        match e {
            Expr::Int(v, d) => {
                self.tag("int");
                self.int(*v);
                self.dtype(*d)
            }
            Expr::Float(v, d) => {
                self.tag("float");
                self.out.push(Tok::Bits(v.to_bits()));
                self.dtype(*d)
            }
            Expr::Bool(b) => {
                self.tag("bool");
                self.int(*b as i64)
            }
            Expr::Var(v) => self.use_var(*v),
            Expr::Binary(op, a, b) => {
                self.tag("binary");
                self.tag(binop_tag(*op));
                self.expr(a);
                self.expr(b)
            }
            Expr::Unary(op, a) => {
                self.tag("unary");
                self.tag(match op {
                    crate::expr::UnOp::Neg => "neg",
                    crate::expr::UnOp::Not => "not",
                });
                self.expr(a)
            }
            Expr::Select(c, a, b) => {
                self.tag("select");
                self.expr(c);
                self.expr(a);
                self.expr(b)
            }
            Expr::Cast(d, a) => {
                self.tag("cast");
                self.dtype(*d);
                self.expr(a)
            }
            Expr::Load { buffer, indices } => {
                self.tag("load");
                self.use_buffer(*buffer);
                self.exprs(indices)
            }
            Expr::Call { op, args, dtype } => {
                self.tag("call");
                self.tag(op.name());
                self.dtype(*dtype);
                self.exprs(args)
            }
            Expr::Let { var, value, body } => {
                self.tag("let");
                self.expr(value);
                self.def_var(*var);
                self.expr(body)
            }
        }
    }

    fn region(&mut self, r: &'a BufferRegion) {
        self.use_buffer(r.buffer);
        self.len(r.ranges.len());
        for (lo, ext) in &r.ranges {
            self.expr(lo);
            self.expr(ext);
        }
    }

    fn opt_stmt(&mut self, s: Option<&'a Stmt>) {
        match s {
            Some(s) => {
                self.tag("some");
                self.stmt(s)
            }
            None => self.tag("none"),
        }
    }

    fn iter_axis(&mut self, entry: &IterAxis) {
        match entry {
            IterAxis::Axis(a) => {
                self.tag("iaxis");
                self.use_axis(*a)
            }
            IterAxis::Fuse(axes) => {
                self.tag("ifuse");
                self.len(axes.len());
                for &a in axes {
                    self.use_axis(a);
                }
            }
            IterAxis::Attach { axis, parent } => {
                self.tag("iattach");
                self.use_axis(*axis);
                self.use_axis(*parent)
            }
            IterAxis::CoIter { op, parts } => {
                self.tag(op.name());
                self.len(parts.len());
                for p in parts {
                    self.iter_axis(p);
                }
            }
        }
    }

    fn stmt(&mut self, s: &'a Stmt) {
        match s {
            Stmt::Seq(v) => {
                self.tag("seq");
                self.len(v.len());
                for s in v {
                    self.stmt(s);
                }
            }
            Stmt::SparseIteration(it) => {
                self.tag("spiter");
                self.string(&it.name);
                self.len(it.axes.len());
                for entry in &it.axes {
                    self.iter_axis(entry);
                }
                self.len(it.kinds.len());
                for k in &it.kinds {
                    self.tag(if k.letter() == 'S' { "S" } else { "R" });
                }
                self.len(it.vars.len());
                for &v in &it.vars {
                    self.def_var(v);
                }
                self.attrs(&it.annotations);
                self.opt_stmt(it.init.as_ref());
                self.stmt(&it.body)
            }
            Stmt::For(l) => {
                self.tag("for");
                self.tag(l.kind.script_name());
                match &l.thread {
                    Some(t) => {
                        self.tag("some");
                        self.string(t)
                    }
                    None => self.tag("none"),
                }
                self.expr(&l.min);
                self.expr(&l.extent);
                self.attrs(&l.annotations);
                self.def_var(l.var);
                self.stmt(&l.body)
            }
            Stmt::Block(b) => self.block(b),
            Stmt::Store(st) => {
                self.tag("store");
                self.use_buffer(st.buffer);
                self.exprs(&st.indices);
                self.expr(&st.value)
            }
            Stmt::If(i) => {
                self.tag("if");
                self.expr(&i.cond);
                self.stmt(&i.then_case);
                self.opt_stmt(i.else_case.as_ref())
            }
            Stmt::While(w) => {
                self.tag("while");
                self.expr(&w.cond);
                self.stmt(&w.body)
            }
            Stmt::Evaluate(e) => {
                self.tag("evaluate");
                self.expr(e)
            }
            Stmt::Allocate(b) => {
                self.tag("allocate");
                self.def_buffer(*b)
            }
            Stmt::Let(l) => {
                self.tag("letstmt");
                self.expr(&l.value);
                self.def_var(l.var);
                self.stmt(&l.body)
            }
            Stmt::AssumeBufferDomain { buffer, lo, hi, .. } => {
                self.tag("assume");
                self.use_buffer(*buffer);
                self.expr(lo);
                self.expr(hi)
            }
        }
    }

    fn block(&mut self, b: &'a Block) {
        self.tag("block");
        self.string(&b.name);
        self.len(b.iters.len());
        // Domains and bindings are evaluated outside the block, before its iterators exist.
        for it in &b.iters {
            self.tag(if it.kind.letter() == 'S' { "S" } else { "R" });
            self.expr(&it.min);
            self.expr(&it.extent);
            self.expr(&it.binding);
        }
        for it in &b.iters {
            self.def_var(it.var);
        }
        self.opt_expr(b.predicate.as_ref());
        self.len(b.alloc_buffers.len());
        for &buf in &b.alloc_buffers {
            self.def_buffer(buf);
        }
        self.len(b.reads.len());
        for r in &b.reads {
            self.region(r);
        }
        self.len(b.writes.len());
        for r in &b.writes {
            self.region(r);
        }
        self.attrs(&b.annotations);
        self.opt_stmt(b.init.as_ref());
        self.stmt(&b.body)
    }
}

fn binop_tag(op: crate::expr::BinOp) -> &'static str {
    use crate::expr::BinOp::*;
    match op {
        Add => "add",
        Sub => "sub",
        Mul => "mul",
        Div => "div",
        FloorDiv => "floordiv",
        FloorMod => "floormod",
        Min => "min",
        Max => "max",
        Eq => "eq",
        Ne => "ne",
        Lt => "lt",
        Le => "le",
        Gt => "gt",
        Ge => "ge",
        And => "and",
        Or => "or",
        BitAnd => "bitand",
        BitOr => "bitor",
        BitXor => "bitxor",
        Shl => "shl",
        Shr => "shr",
    }
}
