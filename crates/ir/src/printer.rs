//! Printer: IR → canonical script text. `parse(print(ir))` is structurally equal to `ir` and
//! `print(parse(print(ir)))` is the same text.
//!
//! Canonical form: four-space indentation, `T.sp.*` spellings, optional arguments only when not
//! default, directly nested plain serial loops merged into `T.grid`, `T.axis.remap` where every
//! block iterator is an enclosing loop variable over the loop's whole range, typed float
//! constants, parentheses only where precedence needs them. Names are made unique and valid
//! identifiers (a clash gets a `_1`, `_2`, ... suffix).
//!
//! Layout rules beyond one statement per line:
//! - **Line width.** A line longer than [`LINE_WIDTH`] characters is broken inside brackets the way
//!   black does it: at the last bracket pair whose opening line and closing line both fit, with the
//!   contents on one indented line when they fit there, else one item per line with a trailing
//!   comma (comma lists) or one operand per line with the operator in front (operator chains). The
//!   right-hand side of a store or `let` and the condition of an `if` that are operator chains get
//!   parentheses that only appear when the line is broken. A line with no bracket to break in
//!   (e.g. a very long name) stays long.
//! - **`let` statements.** A `let` whose body runs to the end of its statement list prints as
//!   `x: T.int32 = value` followed by the body at the same indentation (the parser gives every
//!   following statement to the `let`). A `let` followed by other statements prints in the scoped
//!   form `with T.LetStmt(value) as x:` with its body indented; the variable's dtype is added as a
//!   second argument, `T.LetStmt(value, "int64")`, when it differs from the value's dtype.
//! - **Sparse allocations.** `T.allocate` takes dense extents only (as in TVMScript); a sparse
//!   intermediate is declared with `T.sp.alloc_buffer` at function level or in a block header. An
//!   `Allocate` statement of a sparse buffer is outside the script language: it prints as a
//!   statement-level `X = T.sp.alloc_buffer((I, J), ...)`, which the parser rejects with a clear
//!   message rather than as a `T.allocate` over axes.
//! - **Ranges.** A range whose start is the constant 0 of any integer type prints as
//!   `start, extent` (`T.serial(T.int64(0), n)`); the `int32` zero start is omitted.

use std::collections::HashSet;

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
    p.stmt(s, 0, true);
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
    flat(&attr_dict_segs(a))
}

fn attr_value_segs(v: &AttrValue) -> Vec<Seg> {
    match v {
        AttrValue::List(items) => {
            vec![group("[", "]", items.iter().map(attr_value_segs).collect())]
        }
        AttrValue::Dict(d) => attr_dict_segs(d),
        other => vec![text(attr_value(other))],
    }
}

fn attr_dict_segs(a: &Attrs) -> Vec<Seg> {
    let items = a
        .iter()
        .map(|(k, v)| {
            let mut item = vec![text(format!("{}: ", quote(k)))];
            item.extend(attr_value_segs(v));
            item
        })
        .collect();
    vec![group("{", "}", items)]
}

fn zero(e: &Expr) -> bool {
    *e == Expr::Int(0, DType::I32)
}
fn one(e: &Expr) -> bool {
    *e == Expr::Int(1, DType::I32)
}
/// The constant 0 of any integer type (a range starting there prints as `start, extent`).
fn zero_any(e: &Expr) -> bool {
    matches!(e, Expr::Int(0, d) if d.is_integer())
}

/// Unary minus binds tighter than every infix operator.
const NEG_PREC: u8 = 11;

fn binop_prec(op: BinOp) -> u8 {
    match op {
        BinOp::Or => 1,
        BinOp::And => 2,
        BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => 4,
        // Python's order: `|` below `^` below `&` below shifts below `+`.
        BinOp::BitOr => 5,
        BinOp::BitXor => 6,
        BinOp::BitAnd => 7,
        BinOp::Shl | BinOp::Shr => 8,
        BinOp::Add | BinOp::Sub => 9,
        BinOp::Mul | BinOp::Div | BinOp::FloorDiv | BinOp::FloorMod => 10,
        BinOp::Min | BinOp::Max => 12,
    }
}

fn prec(e: &Expr) -> u8 {
    match e {
        Expr::Binary(op, _, _) => binop_prec(*op),
        Expr::Unary(UnOp::Not, _) => 3,
        Expr::Unary(UnOp::Neg, _) => NEG_PREC,
        Expr::Int(v, DType::I32) if *v < 0 => NEG_PREC,
        _ => 12,
    }
}

/// The width the printer keeps lines within, where there is a bracket to break in.
pub const LINE_WIDTH: usize = 100;

/// A piece of a printed line: text, or a bracketed group the line may be broken inside.
#[derive(Clone, Debug)]
enum Seg {
    Text(String),
    Group(Box<Group>),
}

#[derive(Clone, Debug)]
struct Group {
    open: &'static str,
    close: &'static str,
    /// Brackets shown only when the group is broken (black's invisible parentheses).
    invisible: bool,
    body: Body,
}

#[derive(Clone, Debug)]
enum Body {
    /// Comma-separated items; `tuple1`: a one-element tuple keeps its comma.
    Items { items: Vec<Vec<Seg>>, tuple1: bool },
    /// `first op x op y ...`: the operands of one precedence level.
    Chain {
        first: Vec<Seg>,
        rest: Vec<(&'static str, Vec<Seg>)>,
    },
}

impl Body {
    fn is_empty(&self) -> bool {
        match self {
            Body::Items { items, .. } => items.is_empty(),
            Body::Chain { first, rest } => first.is_empty() && rest.is_empty(),
        }
    }
}

fn text(s: impl Into<String>) -> Seg {
    Seg::Text(s.into())
}

fn group(open: &'static str, close: &'static str, items: Vec<Vec<Seg>>) -> Seg {
    Seg::Group(Box::new(Group {
        open,
        close,
        invisible: false,
        body: Body::Items {
            items,
            tuple1: false,
        },
    }))
}

/// A parenthesised tuple: `(a, b)`, `(a,)`.
fn tuple_seg(items: Vec<Vec<Seg>>) -> Seg {
    let tuple1 = items.len() == 1;
    Seg::Group(Box::new(Group {
        open: "(",
        close: ")",
        invisible: false,
        body: Body::Items { items, tuple1 },
    }))
}

/// `name(args...)`.
fn call(name: &str, args: Vec<Vec<Seg>>) -> Vec<Seg> {
    vec![text(name), group("(", ")", args)]
}

/// `name=value` as a call argument.
fn kwarg(name: &str, mut value: Vec<Seg>) -> Vec<Seg> {
    value.insert(0, text(format!("{name}=")));
    value
}

fn flat_into(segs: &[Seg], out: &mut String) {
    for s in segs {
        match s {
            Seg::Text(t) => out.push_str(t),
            Seg::Group(g) => {
                if !g.invisible {
                    out.push_str(g.open);
                }
                body_flat_into(&g.body, out);
                if !g.invisible {
                    out.push_str(g.close);
                }
            }
        }
    }
}

fn body_flat_into(b: &Body, out: &mut String) {
    match b {
        Body::Items { items, tuple1 } => {
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                flat_into(item, out);
            }
            if *tuple1 {
                out.push(',');
            }
        }
        Body::Chain { first, rest } => {
            flat_into(first, out);
            for (op, x) in rest {
                out.push(' ');
                out.push_str(op);
                out.push(' ');
                flat_into(x, out);
            }
        }
    }
}

/// The segments on one line.
fn flat(segs: &[Seg]) -> String {
    let mut s = String::new();
    flat_into(segs, &mut s);
    s
}

fn fits(ind: usize, s: &str) -> bool {
    ind * 4 + s.chars().count() <= LINE_WIDTH
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

    /// Prints one logical line, broken inside brackets where it is too long.
    fn emit(&mut self, ind: usize, segs: &[Seg]) {
        let one = flat(segs);
        if fits(ind, &one) {
            self.line(ind, &one);
            return;
        }
        let candidates: Vec<usize> = (0..segs.len())
            .rev()
            .filter(|&i| matches!(&segs[i], Seg::Group(g) if !g.body.is_empty()))
            .collect();
        let head_tail = |i: usize| {
            let Seg::Group(g) = &segs[i] else {
                return (String::new(), String::new());
            };
            let mut head = flat(&segs[..i]);
            head.push_str(g.open);
            let mut tail = g.close.to_string();
            tail.push_str(&flat(&segs[i + 1..]));
            (head, tail)
        };
        let chosen = candidates
            .iter()
            .copied()
            .find(|&i| {
                let (h, t) = head_tail(i);
                fits(ind, &h) && fits(ind, &t)
            })
            .or_else(|| {
                candidates
                    .iter()
                    .copied()
                    .find(|&i| fits(ind, &head_tail(i).0))
            })
            .or_else(|| candidates.first().copied());
        let Some(i) = chosen else {
            self.line(ind, &one);
            return;
        };
        let Seg::Group(g) = &segs[i] else {
            self.line(ind, &one);
            return;
        };
        let mut head: Vec<Seg> = segs[..i].to_vec();
        head.push(text(g.open));
        self.emit(ind, &head);
        self.emit_body(ind + 1, &g.body);
        let mut tail = vec![text(g.close)];
        tail.extend_from_slice(&segs[i + 1..]);
        self.emit(ind, &tail);
    }

    /// The contents of a broken group: on one line when they fit, else one item per line.
    fn emit_body(&mut self, ind: usize, body: &Body) {
        let mut one = String::new();
        body_flat_into(body, &mut one);
        if fits(ind, &one) {
            self.line(ind, &one);
            return;
        }
        match body {
            // A lone operator chain inside brackets breaks at its operators without parentheses.
            Body::Items {
                items,
                tuple1: false,
            } if items.len() == 1 => match items[0].as_slice() {
                [Seg::Group(g)] if g.invisible => self.emit_body(ind, &g.body),
                item => self.emit(ind, item),
            },
            Body::Items { items, tuple1 } => {
                let comma = items.len() > 1 || *tuple1;
                for item in items {
                    let mut l = item.clone();
                    if comma {
                        l.push(text(","));
                    }
                    self.emit(ind, &l);
                }
            }
            Body::Chain { first, rest } => {
                self.emit(ind, first);
                for (op, x) in rest {
                    let mut l = vec![text(format!("{op} "))];
                    l.extend_from_slice(x);
                    self.emit(ind, &l);
                }
            }
        }
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
        if fits(0, &one_line) {
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
            self.emit(1, &call("T.func_attr", vec![attr_dict_segs(&f.attrs)]));
        }
        for (h, a) in f.axes.iter() {
            let mut l = vec![text(format!("{} = ", self.axis_name(h)))];
            l.extend(self.axis_decl(a));
            self.emit(1, &l);
        }
        for b in &f.buffer_decls {
            if let Some(buf) = f.buffers.get(*b) {
                let mut l = vec![text(format!("{} = ", self.buf(*b)))];
                l.extend(self.buffer_decl(buf));
                self.emit(1, &l);
            }
        }
        self.stmt(&f.body, 1, true);
        if self.out.len() == start {
            self.line(1, "pass");
        }
        self.out
    }

    fn opt_expr(&self, e: &Option<Expr>) -> Vec<Seg> {
        match e {
            Some(x) => self.ex(x),
            None => vec![text("None")],
        }
    }
    fn opt_var(&self, v: Option<VarId>) -> Vec<Seg> {
        vec![text(
            v.map(|x| self.var(x)).unwrap_or_else(|| "None".to_string()),
        )]
    }

    fn axis_decl(&self, a: &Axis) -> Vec<Seg> {
        let parent = vec![text(
            a.parent
                .map(|p| self.axis_name(p))
                .unwrap_or_else(|| "None".to_string()),
        )];
        let len = self.ex(&a.length);
        let mut args = match a.kind {
            AxisKind::DenseFixed => vec![len],
            AxisKind::DenseVaried => {
                let shape = match &a.nnz {
                    Some(n) => vec![tuple_seg(vec![len, self.ex(n)])],
                    None => len,
                };
                vec![parent, shape, self.opt_var(a.indptr)]
            }
            AxisKind::CompressedFixed => vec![
                parent,
                vec![tuple_seg(vec![len, self.opt_expr(&a.nnz_cols)])],
                self.opt_var(a.indices),
            ],
            AxisKind::CompressedVaried => vec![
                parent,
                vec![tuple_seg(vec![len, self.opt_expr(&a.nnz)])],
                vec![tuple_seg(vec![
                    self.opt_var(a.indptr),
                    self.opt_var(a.indices),
                ])],
            ],
        };
        if a.idtype != DType::I32 {
            args.push(kwarg("idtype", vec![text(quote(a.idtype.name()))]));
        }
        if !a.sorted {
            args.push(kwarg("sorted", vec![text("False")]));
        }
        if a.assembled {
            args.push(kwarg("assembled", vec![text("True")]));
        }
        call(&format!("T.sp.{}", a.kind.canonical_name()), args)
    }

    /// One entry of an iteration's axis list.
    fn iter_axis(&self, a: &IterAxis) -> Vec<Seg> {
        match a {
            IterAxis::Axis(x) => vec![text(self.axis_name(*x))],
            IterAxis::Fuse(v) => call(
                "T.sp.fuse",
                v.iter().map(|x| vec![text(self.axis_name(*x))]).collect(),
            ),
            IterAxis::Attach { axis, parent } => call(
                "T.sp.attach",
                vec![
                    vec![text(self.axis_name(*axis))],
                    vec![text(self.axis_name(*parent))],
                ],
            ),
            IterAxis::CoIter { op, parts } => call(
                &format!("T.sp.{}", op.name()),
                parts.iter().map(|p| self.iter_axis(p)).collect(),
            ),
        }
    }

    fn shape(&self, b: &Buffer) -> Seg {
        let items: Vec<Vec<Seg>> = match &b.shape {
            BufferShape::Sparse(ax) => ax.iter().map(|a| vec![text(self.axis_name(*a))]).collect(),
            BufferShape::Dense(d) => d.iter().map(|e| self.ex(e)).collect(),
        };
        tuple_seg(items)
    }

    fn buffer_decl(&self, b: &Buffer) -> Vec<Seg> {
        let ns = if b.is_sparse() { "T.sp." } else { "T." };
        let dtype = vec![text(quote(b.dtype.name()))];
        let (fname, mut args) = match b.decl {
            BufferDecl::Match { data } => (
                "match_buffer",
                vec![vec![text(self.var(data))], vec![self.shape(b)], dtype],
            ),
            BufferDecl::Alloc => ("alloc_buffer", vec![vec![self.shape(b)], dtype]),
        };
        if b.scope != "global" {
            args.push(kwarg("scope", vec![text(quote(&b.scope))]));
        }
        if !b.strides.is_empty() {
            let st = b.strides.iter().map(|e| self.ex(e)).collect();
            args.push(kwarg("strides", vec![group("[", "]", st)]));
        }
        if let Some(e) = &b.extra_storage {
            args.push(kwarg("extra_storage", self.ex(e)));
        }
        if let Some(e) = &b.default_value {
            args.push(kwarg("default_value", self.ex(e)));
        }
        call(&format!("{ns}{fname}"), args)
    }

    // ------------------------------------------------------------------ statements

    /// A statement used as a block body: `pass` when empty.
    fn body(&mut self, s: &Stmt, ind: usize) {
        if s.is_empty() {
            self.line(ind, "pass");
        } else {
            self.stmt(s, ind, true);
        }
    }

    /// Prints `s` at indentation `ind`; `tail`: nothing follows it in its statement list.
    fn stmt(&mut self, s: &Stmt, ind: usize, tail: bool) {
        match s {
            Stmt::Seq(v) => {
                for (i, c) in v.iter().enumerate() {
                    self.stmt(c, ind, tail && i + 1 == v.len());
                }
            }
            Stmt::SparseIteration(it) => {
                let axes: Vec<Vec<Seg>> = it
                    .axes
                    .iter()
                    .map(|a| match a {
                        IterAxis::Axis(x) => vec![text(self.axis_name(*x))],
                        IterAxis::Fuse(v) => call(
                            "T.sp.fuse",
                            v.iter().map(|x| vec![text(self.axis_name(*x))]).collect(),
                        ),
                        other => self.iter_axis(other),
                    })
                    .collect();
                let kinds: String = it.kinds.iter().map(|k| k.letter()).collect();
                let vars: Vec<Vec<Seg>> =
                    it.vars.iter().map(|v| vec![text(self.var(*v))]).collect();
                let mut head = vec![text("with ")];
                head.extend(call(
                    "T.sp.iteration",
                    vec![
                        vec![group("[", "]", axes)],
                        vec![text(quote(&kinds))],
                        vec![text(quote(&it.name))],
                    ],
                ));
                head.push(text(" as "));
                head.push(group("[", "]", vars));
                head.push(text(":"));
                self.emit(ind, &head);
                let start = self.out.len();
                if !it.annotations.is_empty() {
                    let a = call("T.sp.iteration_attr", vec![attr_dict_segs(&it.annotations)]);
                    self.emit(ind + 1, &a);
                }
                if let Some(init) = &it.init {
                    self.line(ind + 1, "with T.init():");
                    self.body(init, ind + 2);
                }
                self.stmt(&it.body, ind + 1, true);
                if self.out.len() == start {
                    self.line(ind + 1, "pass");
                }
            }
            Stmt::For(l) => self.for_loop(l, ind),
            Stmt::Block(b) => self.block(b, ind),
            Stmt::Store(st) => {
                let idx = st.indices.iter().map(|e| self.ex(e)).collect();
                let mut l = vec![text(self.buf(st.buffer)), group("[", "]", idx)];
                l.push(text(" = "));
                l.extend(self.rhs(&st.value));
                self.emit(ind, &l);
            }
            Stmt::If(i) => {
                let mut l = vec![text("if ")];
                l.extend(self.rhs(&i.cond));
                l.push(text(":"));
                self.emit(ind, &l);
                self.body(&i.then_case, ind + 1);
                let mut els = i.else_case.as_ref();
                while let Some(e) = els {
                    if let Stmt::If(inner) = e {
                        let mut l = vec![text("elif ")];
                        l.extend(self.rhs(&inner.cond));
                        l.push(text(":"));
                        self.emit(ind, &l);
                        self.body(&inner.then_case, ind + 1);
                        els = inner.else_case.as_ref();
                    } else {
                        self.line(ind, "else:");
                        self.body(e, ind + 1);
                        els = None;
                    }
                }
            }
            Stmt::While(w) => {
                let mut l = vec![text("while ")];
                l.extend(self.rhs(&w.cond));
                l.push(text(":"));
                self.emit(ind, &l);
                self.body(&w.body, ind + 1);
            }
            Stmt::Evaluate(e) => {
                let l = call("T.evaluate", vec![self.ex(e)]);
                self.emit(ind, &l);
            }
            Stmt::Allocate(b) => {
                let mut l = vec![text(format!("{} = ", self.buf(*b)))];
                match self.f.buffers.get(*b) {
                    // Outside the script language (see the module documentation): printed with
                    // the spelling TVMScript uses for sparse intermediates.
                    Some(buf) if buf.is_sparse() => l.extend(self.buffer_decl(buf)),
                    Some(buf) => l.extend(call(
                        "T.allocate",
                        vec![
                            vec![self.shape(buf)],
                            vec![text(quote(buf.dtype.name()))],
                            vec![text(quote(&buf.scope))],
                        ],
                    )),
                    None => l.push(text("T.allocate((), \"float32\", \"global\")")),
                }
                self.emit(ind, &l);
            }
            Stmt::Let(l) => {
                let dtype = self.var_dtype(l.var);
                if tail {
                    let mut line =
                        vec![text(format!("{}: T.{} = ", self.var(l.var), dtype.name()))];
                    line.extend(self.rhs(&l.value));
                    self.emit(ind, &line);
                    self.stmt(&l.body, ind, true);
                } else {
                    let mut args = vec![self.ex(&l.value)];
                    if l.value.dtype(self.f) != dtype {
                        args.push(vec![text(quote(dtype.name()))]);
                    }
                    let mut line = vec![text("with ")];
                    line.extend(call("T.LetStmt", args));
                    line.push(text(format!(" as {}:", self.var(l.var))));
                    self.emit(ind, &line);
                    self.body(&l.body, ind + 1);
                }
            }
            Stmt::AssumeBufferDomain { buffer, lo, hi, .. } => {
                let l = call(
                    "T.assume_buffer_domain",
                    vec![
                        vec![text(self.buf(*buffer))],
                        vec![tuple_seg(vec![self.ex(lo), self.ex(hi)])],
                    ],
                );
                self.emit(ind, &l);
            }
        }
    }

    /// An expression on the right of `=` or after `if`. (Every operator chain is a group with
    /// parentheses that show only when the line is broken there.)
    fn rhs(&self, e: &Expr) -> Vec<Seg> {
        self.ex(e)
    }

    /// `lo, lo + ext`, `T.int64(0), ext` or just `ext` when `lo` is the `int32` 0.
    fn range_args(&self, min: &Expr, ext: &Expr) -> Vec<Vec<Seg>> {
        if zero(min) {
            vec![self.ex(ext)]
        } else if zero_any(min) {
            vec![self.ex(min), self.ex(ext)]
        } else {
            let hi = Expr::add(min.clone(), ext.clone());
            vec![self.ex(min), self.ex(&hi)]
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
        let mut head = if chain.len() > 1 {
            let vars: Vec<String> = chain.iter().map(|c| self.var(c.var)).collect();
            let exts = chain.iter().map(|c| self.ex(&c.extent)).collect();
            let mut h = vec![text(format!("for {} in ", vars.join(", ")))];
            h.extend(call("T.grid", exts));
            h
        } else {
            let mut args = self.range_args(&l.min, &l.extent);
            if l.kind == ForKind::ThreadBinding {
                let tag = quote(l.thread.as_deref().unwrap_or(""));
                args.push(kwarg("thread", vec![text(tag)]));
            }
            if !l.annotations.is_empty() {
                args.push(kwarg("annotations", attr_dict_segs(&l.annotations)));
            }
            let mut h = vec![text(format!("for {} in ", self.var(l.var)))];
            h.extend(call(&format!("T.{}", l.kind.script_name()), args));
            h
        };
        head.push(text(":"));
        self.emit(ind, &head);
        let depth = self.loops.len();
        for c in &chain {
            self.loops.push((c.var, c.min.clone(), c.extent.clone()));
        }
        let body = &chain[chain.len() - 1].body;
        self.body(body, ind + 1);
        self.loops.truncate(depth);
    }

    fn region(&self, r: &BufferRegion) -> Vec<Seg> {
        let parts: Vec<Vec<Seg>> = r
            .ranges
            .iter()
            .map(|(lo, ext)| {
                if one(ext) {
                    self.ex(lo)
                } else if zero_any(lo) {
                    let mut v = self.ex(lo);
                    v.push(text(":"));
                    v.extend(self.ex(ext));
                    v
                } else {
                    let hi = Expr::add(lo.clone(), ext.clone());
                    let mut v = self.ex(lo);
                    v.push(text(":"));
                    v.extend(self.ex(&hi));
                    v
                }
            })
            .collect();
        vec![text(self.buf(r.buffer)), group("[", "]", parts)]
    }

    fn block(&mut self, b: &Block, ind: usize) {
        let mut head = vec![text("with ")];
        head.extend(call("T.block", vec![vec![text(quote(&b.name))]]));
        head.push(text(":"));
        self.emit(ind, &head);
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
            let binds = b.iters.iter().map(|it| self.ex(&it.binding)).collect();
            let mut l = vec![text(format!("{} = ", vars.join(", ")))];
            l.extend(call(
                "T.axis.remap",
                vec![vec![text(quote(&kinds))], vec![group("[", "]", binds)]],
            ));
            self.emit(i, &l);
        } else {
            for it in &b.iters {
                let kind = match it.kind {
                    IterKind::Spatial => "spatial",
                    IterKind::Reduce => "reduce",
                };
                let dom = if zero(&it.min) {
                    self.ex(&it.extent)
                } else if zero_any(&it.min) {
                    vec![tuple_seg(vec![self.ex(&it.min), self.ex(&it.extent)])]
                } else {
                    let hi = Expr::add(it.min.clone(), it.extent.clone());
                    vec![tuple_seg(vec![self.ex(&it.min), self.ex(&hi)])]
                };
                let mut l = vec![text(format!("{} = ", self.var(it.var)))];
                l.extend(call(
                    &format!("T.axis.{kind}"),
                    vec![dom, self.ex(&it.binding)],
                ));
                self.emit(i, &l);
            }
        }
        for ab in &b.alloc_buffers {
            if let Some(buf) = self.f.buffers.get(*ab) {
                let mut l = vec![text(format!("{} = ", self.buf(*ab)))];
                l.extend(self.buffer_decl(buf));
                self.emit(i, &l);
            }
        }
        if let Some(p) = &b.predicate {
            let l = call("T.where", vec![self.ex(p)]);
            self.emit(i, &l);
        }
        if !b.reads.is_empty() {
            let r = b.reads.iter().map(|r| self.region(r)).collect();
            self.emit(i, &call("T.reads", r));
        }
        if !b.writes.is_empty() {
            let w = b.writes.iter().map(|r| self.region(r)).collect();
            self.emit(i, &call("T.writes", w));
        }
        if !b.annotations.is_empty() {
            let l = call("T.block_attr", vec![attr_dict_segs(&b.annotations)]);
            self.emit(i, &l);
        }
        if let Some(init) = &b.init {
            self.line(i, "with T.init():");
            self.body(init, i + 1);
        }
        self.stmt(&b.body, i, true);
        if self.out.len() == start {
            self.line(i, "pass");
        }
    }

    // ------------------------------------------------------------------ expressions

    /// `e` where an operand of precedence `min_prec` is expected (parenthesised when lower).
    fn operand(&self, e: &Expr, min_prec: u8) -> Vec<Seg> {
        if prec(e) < min_prec {
            let (first, rest) = self.chain(e);
            vec![Seg::Group(Box::new(Group {
                open: "(",
                close: ")",
                invisible: false,
                body: Body::Chain { first, rest },
            }))]
        } else {
            self.ex(e)
        }
    }

    /// `e` as an operator chain: a left-associated run of infix operators of one precedence
    /// level becomes `first op x op y ...`; anything else is a chain of one operand.
    fn chain(&self, e: &Expr) -> (Vec<Seg>, Vec<(&'static str, Vec<Seg>)>) {
        let Expr::Binary(op, a, b) = e else {
            return (self.ex(e), Vec::new());
        };
        let Some(sym) = op.symbol() else {
            return (self.ex(e), Vec::new());
        };
        let p = binop_prec(*op);
        if op.is_comparison() {
            return (self.operand(a, p + 1), vec![(sym, self.operand(b, p + 1))]);
        }
        let same_level = matches!(&**a, Expr::Binary(aop, _, _)
            if aop.symbol().is_some() && !aop.is_comparison() && binop_prec(*aop) == p);
        let (first, mut rest) = if same_level {
            self.chain(a)
        } else {
            (self.operand(a, p), Vec::new())
        };
        rest.push((sym, self.operand(b, p + 1)));
        (first, rest)
    }

    fn expr(&self, e: &Expr) -> String {
        flat(&self.ex(e))
    }

    /// The segments of an expression.
    fn ex(&self, e: &Expr) -> Vec<Seg> {
        match e {
            Expr::Int(v, DType::I32) => vec![text(v.to_string())],
            Expr::Int(v, d) => vec![text(format!("T.{}({v})", d.name()))],
            Expr::Float(v, d) => vec![text(format!("T.{}({})", d.name(), float_repr(*v)))],
            Expr::Bool(b) => vec![text(if *b { "True" } else { "False" })],
            Expr::Var(v) => vec![text(self.var(*v))],
            Expr::Binary(op, a, b) => match op.symbol() {
                Some(_) => {
                    let (first, rest) = self.chain(e);
                    vec![Seg::Group(Box::new(Group {
                        open: "(",
                        close: ")",
                        invisible: true,
                        body: Body::Chain { first, rest },
                    }))]
                }
                None => {
                    let name = if *op == BinOp::Min { "T.min" } else { "T.max" };
                    call(name, vec![self.ex(a), self.ex(b)])
                }
            },
            Expr::Unary(UnOp::Neg, a) => {
                if let Expr::Int(v, DType::I32) = **a {
                    vec![text(format!("-({v})"))]
                } else {
                    let mut out = vec![text("-")];
                    out.extend(self.operand(a, NEG_PREC));
                    out
                }
            }
            Expr::Unary(UnOp::Not, a) => {
                let mut out = vec![text("not ")];
                out.extend(self.operand(a, 3));
                out
            }
            Expr::Select(c, a, b) => call("T.Select", vec![self.ex(c), self.ex(a), self.ex(b)]),
            Expr::Cast(d, a) => call("T.Cast", vec![vec![text(quote(d.name()))], self.ex(a)]),
            Expr::Load { buffer, indices } => {
                let idx = indices.iter().map(|i| self.ex(i)).collect();
                vec![text(self.buf(*buffer)), group("[", "]", idx)]
            }
            Expr::Call { op, args, dtype } => {
                let name = format!("T.{}", op.name());
                if args.is_empty() && op.arity() == 0 {
                    return call(&name, vec![vec![text(quote(dtype.name()))]]);
                }
                let mut parts: Vec<Vec<Seg>> = args.iter().map(|a| self.ex(a)).collect();
                let inferred = args.first().map(|a| a.dtype(self.f));
                if inferred != Some(*dtype) || args.len() != op.arity() {
                    parts.push(kwarg("dtype", vec![text(quote(dtype.name()))]));
                }
                call(&name, parts)
            }
            Expr::Let { var, value, body } => call(
                "T.let",
                vec![vec![text(self.var(*var))], self.ex(value), self.ex(body)],
            ),
        }
    }
}
