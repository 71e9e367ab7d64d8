//! Lowering: syntax tree → IR. Resolves names in lexical scopes, checks arities, keyword
//! arguments, dtypes, kinds strings and index counts, and reports each problem as a located
//! [`Diagnostic`].

use std::collections::HashMap;

use crate::ast::{self, AstBinOp, AugOp, ExprKind, Kwarg, StmtKind};
use crate::Diagnostic;
use sparsetir_ir::{
    AttrValue, Attrs, Axis, AxisId, AxisKind, BinOp, Block, BlockIter, Buffer, BufferDecl,
    BufferId, BufferRegion, BufferShape, CoOp, DType, Expr, For, ForKind, IRModule, IfThenElse,
    Intrinsic, IterAxis, IterKind, LetStmt, PrimFunc, Span, SparseIteration, Stmt, Store, UnOp,
    VarId, While,
};

mod blocks;
mod decl;
mod expr;

type LResult<T> = Result<T, Diagnostic>;

fn err(span: Span, message: impl Into<String>) -> Diagnostic {
    Diagnostic {
        span,
        message: message.into(),
        notes: Vec::new(),
    }
}

/// Every `T.*` name the language knows (canonical names and aliases), for suggestions.
const KNOWN: &[&str] = &[
    "T.prim_func",
    "T.handle",
    "T.var",
    "T.func_attr",
    "T.sp.dense_fixed",
    "T.sp.dense_varied",
    "T.sp.compressed_fixed",
    "T.sp.compressed_varied",
    "T.dense_fixed",
    "T.dense_variable",
    "T.sparse_fixed",
    "T.sparse_variable",
    "T.sp.match_buffer",
    "T.match_sparse_buffer",
    "T.sp.alloc_buffer",
    "T.alloc_sparse_buffer",
    "T.match_buffer",
    "T.alloc_buffer",
    "T.assume_buffer_domain",
    "T.sp.iteration",
    "T.sp_iter",
    "T.iter",
    "T.sp.fuse",
    "T.fuse",
    "T.sp.attach",
    "T.attach",
    "T.sp.union",
    "T.sp.intersect",
    "T.sp.iteration_attr",
    "T.init",
    "T.serial",
    "T.parallel",
    "T.vectorized",
    "T.unroll",
    "T.thread_binding",
    "T.grid",
    "T.block",
    "T.axis.spatial",
    "T.axis.reduce",
    "T.axis.remap",
    "T.where",
    "T.reads",
    "T.writes",
    "T.block_attr",
    "T.evaluate",
    "T.allocate",
    "T.min",
    "T.max",
    "T.floordiv",
    "T.floormod",
    "T.truncdiv",
    "T.Select",
    "T.if_then_else",
    "T.Cast",
    "T.cast",
    "T.let",
    "T.LetStmt",
    "T.bool",
    "T.int8",
    "T.int16",
    "T.int32",
    "T.int64",
    "T.uint8",
    "T.uint16",
    "T.uint32",
    "T.uint64",
    "T.float16",
    "T.bfloat16",
    "T.float32",
    "T.float64",
    "T.exp",
    "T.exp2",
    "T.log",
    "T.log2",
    "T.sqrt",
    "T.rsqrt",
    "T.tanh",
    "T.sigmoid",
    "T.abs",
    "T.pow",
    "T.floor",
    "T.ceil",
    "T.round",
    "T.sin",
    "T.cos",
    "T.erf",
    "T.min_value",
    "T.max_value",
    "T.atomic_add",
];

/// Maps alias spellings to canonical names.
fn canonical(name: &str) -> &str {
    match name {
        "T.dense_fixed" => "T.sp.dense_fixed",
        "T.dense_variable" => "T.sp.dense_varied",
        "T.sparse_fixed" => "T.sp.compressed_fixed",
        "T.sparse_variable" => "T.sp.compressed_varied",
        "T.match_sparse_buffer" => "T.sp.match_buffer",
        "T.alloc_sparse_buffer" => "T.sp.alloc_buffer",
        "T.sp_iter" | "T.iter" => "T.sp.iteration",
        "T.fuse" => "T.sp.fuse",
        "T.attach" => "T.sp.attach",
        other => other,
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let v = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
            cur.push(v);
        }
        prev = cur;
    }
    prev[b.len()]
}

fn unknown_function(name: &str, span: Span) -> Diagnostic {
    let best = KNOWN.iter().min_by_key(|k| edit_distance(name, k)).copied();
    let mut d = err(span, format!("unknown function `{name}`"));
    if let Some(b) = best {
        if edit_distance(name, b) <= name.len().max(4) / 2 + 1 {
            d.message = format!("unknown function `{name}` (did you mean `{b}`?)");
        }
    }
    d
}

/// The type of a loop variable over `[min, min + extent)`: the wider of the two integer types (as
/// TVMScript's `T.serial` does), `int32` when neither is an integer.
fn loop_var_dtype(min: DType, extent: DType) -> DType {
    match (min.is_integer(), extent.is_integer()) {
        (true, true) if min.bits() > extent.bits() => min,
        (_, true) => extent,
        (true, false) => min,
        (false, false) => DType::I32,
    }
}

fn parse_dtype(e: &ast::Expr, allow_handle: bool) -> LResult<DType> {
    let Some(s) = e.as_str() else {
        return Err(err(e.span, "expected a dtype string such as \"float32\""));
    };
    match s.parse::<DType>() {
        Ok(DType::Handle) if !allow_handle => {
            Err(err(e.span, "dtype `handle` is not allowed here"))
        }
        Ok(d) => Ok(d),
        Err(_) => Err(err(e.span, format!("unknown dtype `{s}`"))),
    }
}

fn expect_str(e: &ast::Expr, what: &str) -> LResult<String> {
    e.as_str()
        .map(str::to_string)
        .ok_or_else(|| err(e.span, format!("expected {what} (a string)")))
}

/// A literal attribute value.
fn attr_value(e: &ast::Expr) -> LResult<AttrValue> {
    Ok(match &e.kind {
        ExprKind::Bool(b) => AttrValue::Bool(*b),
        ExprKind::Int(v) => AttrValue::Int(*v),
        ExprKind::Float(v) => AttrValue::Float(*v),
        ExprKind::Str(s) => AttrValue::Str(s.clone()),
        ExprKind::List(v) | ExprKind::Tuple(v) => {
            AttrValue::List(v.iter().map(attr_value).collect::<LResult<_>>()?)
        }
        ExprKind::Dict(_) => AttrValue::Dict(attr_dict(e)?),
        _ => return Err(err(e.span, "attribute values must be literals")),
    })
}

fn attr_dict(e: &ast::Expr) -> LResult<Attrs> {
    let ExprKind::Dict(items) = &e.kind else {
        return Err(err(e.span, "expected a dictionary `{\"key\": value}`"));
    };
    let mut attrs = Attrs::new();
    for (k, v) in items {
        let key = k
            .as_str()
            .ok_or_else(|| err(k.span, "attribute keys must be strings"))?;
        if attrs.get(key).is_some() {
            return Err(err(k.span, format!("duplicate attribute key `{key}`")));
        }
        attrs.set(key, attr_value(v)?);
    }
    Ok(attrs)
}

/// A copy of `e` with every span cleared, for syntactic comparison.
fn strip(e: &ast::Expr) -> ast::Expr {
    let b = |x: &ast::Expr| Box::new(strip(x));
    let kind = match &e.kind {
        ExprKind::Attr(v, a) => ExprKind::Attr(b(v), a.clone()),
        ExprKind::Call { func, args, kwargs } => ExprKind::Call {
            func: b(func),
            args: args.iter().map(strip).collect(),
            kwargs: kwargs
                .iter()
                .map(|k| Kwarg {
                    name: k.name.clone(),
                    name_span: Span::default(),
                    value: strip(&k.value),
                })
                .collect(),
        },
        ExprKind::Subscript(v, i) => ExprKind::Subscript(b(v), i.iter().map(strip).collect()),
        ExprKind::Slice(l, h) => ExprKind::Slice(l.as_deref().map(&b), h.as_deref().map(&b)),
        ExprKind::Tuple(v) => ExprKind::Tuple(v.iter().map(strip).collect()),
        ExprKind::List(v) => ExprKind::List(v.iter().map(strip).collect()),
        ExprKind::Dict(v) => ExprKind::Dict(v.iter().map(|(k, x)| (strip(k), strip(x))).collect()),
        ExprKind::Binary(op, l, r) => ExprKind::Binary(*op, b(l), b(r)),
        ExprKind::Neg(x) => ExprKind::Neg(b(x)),
        ExprKind::Not(x) => ExprKind::Not(b(x)),
        other => other.clone(),
    };
    ast::Expr {
        kind,
        span: Span::default(),
    }
}

/// Lowers parsed functions into a module.
pub fn lower_module(src: &str, funcs: &[ast::FuncDef]) -> LResult<IRModule> {
    if funcs.is_empty() {
        return Err(err(Span::new(0, 0), "no @T.prim_func found"));
    }
    let mut module = IRModule::new();
    for fd in funcs {
        if module.get(&fd.name).is_some() {
            return Err(err(
                fd.name_span,
                format!("duplicate function `{}`", fd.name),
            ));
        }
        let f = Lower::new(src).func(fd)?;
        module.funcs.push(f);
    }
    Ok(module)
}

#[derive(Clone, Copy, Debug)]
enum Sym {
    Var(VarId),
    Axis(AxisId),
    Buffer(BufferId),
}

/// What kind of statement list is being lowered (decides where declarations go).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    /// Directly in the function body.
    Func,
    /// Anywhere else.
    Inner,
}

struct Lower<'a> {
    src: &'a str,
    f: PrimFunc,
    scopes: Vec<HashMap<String, (Sym, Span)>>,
    /// Offsets of every definition site of each name in the function (for "declared later").
    sites: HashMap<String, Vec<u32>>,
    /// Enclosing loops: variable, min, extent.
    loops: Vec<(VarId, Expr, Expr)>,
}

fn collect_sites(stmts: &[ast::Stmt], out: &mut HashMap<String, Vec<u32>>) {
    fn names(e: &ast::Expr, out: &mut HashMap<String, Vec<u32>>) {
        match &e.kind {
            ExprKind::Name(n) => out.entry(n.clone()).or_default().push(e.span.start),
            ExprKind::Tuple(v) | ExprKind::List(v) => v.iter().for_each(|x| names(x, out)),
            _ => {}
        }
    }
    for s in stmts {
        match &s.kind {
            StmtKind::Assign { targets, .. } => targets.iter().for_each(|t| names(t, out)),
            StmtKind::AnnAssign { target, .. } => names(target, out),
            StmtKind::For { targets, body, .. } => {
                targets.iter().for_each(|t| names(t, out));
                collect_sites(body, out);
            }
            StmtKind::With { target, body, .. } => {
                if let Some(t) = target {
                    names(t, out);
                }
                collect_sites(body, out);
            }
            StmtKind::While { body, .. } => collect_sites(body, out),
            StmtKind::If {
                then_body,
                else_body,
                ..
            } => {
                collect_sites(then_body, out);
                if let Some(e) = else_body {
                    collect_sites(e, out);
                }
            }
            _ => {}
        }
    }
}

/// Binds positional and keyword arguments of a call to named parameters.
fn bind<'e>(
    fname: &str,
    call_span: Span,
    args: &'e [ast::Expr],
    kwargs: &'e [Kwarg],
    params: &[&str],
    required: usize,
) -> LResult<Vec<Option<&'e ast::Expr>>> {
    let mut out: Vec<Option<&ast::Expr>> = vec![None; params.len()];
    if args.len() > params.len() {
        return Err(err(
            args[params.len()].span,
            format!(
                "`{fname}` takes at most {} positional argument{}, got {}",
                params.len(),
                if params.len() == 1 { "" } else { "s" },
                args.len()
            ),
        ));
    }
    for (i, a) in args.iter().enumerate() {
        out[i] = Some(a);
    }
    for k in kwargs {
        let Some(i) = params.iter().position(|p| *p == k.name) else {
            let mut d = err(
                k.name_span,
                format!("unknown keyword argument `{}` for `{fname}`", k.name),
            );
            d.notes
                .push(format!("expected one of: {}", params.join(", ")));
            return Err(d);
        };
        if out[i].is_some() {
            return Err(err(
                k.name_span,
                format!("argument `{}` given twice", k.name),
            ));
        }
        out[i] = Some(&k.value);
    }
    for (i, p) in params.iter().enumerate().take(required) {
        if out[i].is_none() {
            return Err(err(
                call_span,
                format!(
                    "`{fname}` takes at least {required} argument{}: missing `{p}`",
                    if required == 1 { "" } else { "s" }
                ),
            ));
        }
    }
    Ok(out)
}

/// The dotted name, positional and keyword arguments of a call expression.
fn as_call(e: &ast::Expr) -> Option<(String, &[ast::Expr], &[Kwarg])> {
    match &e.kind {
        ExprKind::Call { func, args, kwargs } => {
            Some((canonical(&func.dotted()?).to_string(), args, kwargs))
        }
        _ => None,
    }
}

fn list_items(e: &ast::Expr) -> Option<&[ast::Expr]> {
    match &e.kind {
        ExprKind::List(v) | ExprKind::Tuple(v) => Some(v),
        _ => None,
    }
}

impl<'a> Lower<'a> {
    fn new(src: &'a str) -> Self {
        Lower {
            src,
            f: PrimFunc::new(""),
            scopes: vec![HashMap::new()],
            sites: HashMap::new(),
            loops: Vec::new(),
        }
    }

    fn line(&self, offset: u32) -> usize {
        sparsetir_ir::span::line_col(self.src, offset as usize).0
    }

    fn lookup(&self, name: &str) -> Option<(Sym, Span)> {
        self.scopes.iter().rev().find_map(|s| s.get(name).copied())
    }

    fn undefined(&self, what: &str, name: &str, span: Span) -> Diagnostic {
        let later = self
            .sites
            .get(name)
            .and_then(|v| v.iter().copied().filter(|o| *o > span.start).min());
        match later {
            Some(o) => err(
                span,
                format!(
                    "undefined {what} `{name}` (declared later at line {})",
                    self.line(o)
                ),
            ),
            None => {
                let mut d = err(span, format!("undefined {what} `{name}`"));
                let close = self.close_names(what, name);
                match close.as_slice() {
                    [] => {}
                    [one] => d.notes.push(format!("did you mean `{one}`?")),
                    many => d.notes.push(format!(
                        "did you mean one of {}?",
                        many.iter()
                            .map(|n| format!("`{n}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )),
                }
                d
            }
        }
    }

    /// Names in scope of the wanted kind within a small edit distance of `name` (a third of its
    /// length, at least 1), closest first and then alphabetically, at most three.
    fn close_names(&self, what: &str, name: &str) -> Vec<String> {
        let limit = (name.chars().count() / 3).max(1);
        let kind_ok = |sym: &Sym| match (what, sym) {
            ("axis", Sym::Axis(_)) | ("buffer", Sym::Buffer(_)) => true,
            ("variable", Sym::Var(_)) => true,
            ("parameter", Sym::Var(v)) => self.f.params.contains(v),
            _ => false,
        };
        let mut found: Vec<(usize, String)> = self
            .scopes
            .iter()
            .flat_map(|s| s.iter())
            .filter(|(n, (sym, _))| n.as_str() != name && kind_ok(sym))
            .map(|(n, _)| (edit_distance(name, n), n.clone()))
            // close, and not simply a different short name (`A` for `B`) unless only the case differs
            .filter(|(d, n)| {
                *d <= limit
                    && (*d < name.chars().count().max(n.chars().count())
                        || n.eq_ignore_ascii_case(name))
            })
            .collect();
        found.sort();
        found.dedup();
        found.into_iter().take(3).map(|(_, n)| n).collect()
    }

    fn define(&mut self, name: &str, sym: Sym, span: Span) -> LResult<()> {
        if name == "T" {
            return Err(err(span, "cannot redefine `T`"));
        }
        if let Some((_, prev)) = self.lookup(name) {
            return Err(err(
                span,
                format!(
                    "duplicate definition of `{name}` (first defined at line {})",
                    self.line(prev.start)
                ),
            ));
        }
        if let Some(scope) = self.scopes.last_mut() {
            scope.insert(name.to_string(), (sym, span));
        }
        Ok(())
    }

    fn new_var(&mut self, name: &str, dtype: DType, span: Span) -> LResult<VarId> {
        let v = self.f.add_var(name, dtype);
        self.define(name, Sym::Var(v), span)?;
        Ok(v)
    }

    fn name_of<'e>(&self, e: &'e ast::Expr, what: &str) -> LResult<&'e str> {
        e.as_name()
            .ok_or_else(|| err(e.span, format!("expected {what} name")))
    }

    fn axis(&self, e: &ast::Expr) -> LResult<AxisId> {
        let name = self.name_of(e, "an axis")?;
        match self.lookup(name) {
            Some((Sym::Axis(a), _)) => Ok(a),
            Some(_) => Err(err(e.span, format!("`{name}` is not an axis"))),
            None => Err(self.undefined("axis", name, e.span)),
        }
    }

    fn buffer(&self, e: &ast::Expr) -> LResult<BufferId> {
        let name = self.name_of(e, "a buffer")?;
        match self.lookup(name) {
            Some((Sym::Buffer(b), _)) => Ok(b),
            Some(_) => Err(err(e.span, format!("`{name}` is not a buffer"))),
            None => Err(self.undefined("buffer", name, e.span)),
        }
    }

    fn handle_param(&self, e: &ast::Expr) -> LResult<VarId> {
        let name = self.name_of(e, "a handle parameter")?;
        match self.lookup(name) {
            Some((Sym::Var(v), _))
                if self.f.params.contains(&v) && self.f.vars[v].dtype == DType::Handle =>
            {
                Ok(v)
            }
            Some(_) => Err(err(
                e.span,
                format!("`{name}` is not a `T.handle` parameter"),
            )),
            None => Err(self.undefined("parameter", name, e.span)),
        }
    }

    fn func(mut self, fd: &ast::FuncDef) -> LResult<PrimFunc> {
        if !fd.decorators.iter().any(|d| {
            d.dotted()
                .is_some_and(|n| n == "T.prim_func" || n.ends_with("tir.prim_func"))
        }) {
            return Err(err(fd.name_span, "expected a `@T.prim_func` decorator"));
        }
        self.f.name = fd.name.clone();
        self.f.span = fd.span;
        collect_sites(&fd.body, &mut self.sites);
        for p in &fd.params {
            if self.f.param(&p.name).is_some() {
                return Err(err(p.span, format!("duplicate parameter `{}`", p.name)));
            }
            let Some(ann) = &p.ann else {
                return Err(err(
                    p.span,
                    format!(
                        "parameter `{}` needs a type annotation such as `T.handle`",
                        p.name
                    ),
                ));
            };
            let dtype = self.param_type(ann)?;
            let v = self.new_var(&p.name, dtype, p.span)?;
            self.f.params.push(v);
        }
        self.f.body = self.seq(&fd.body, Level::Func)?;
        Ok(self.f)
    }

    fn param_type(&self, ann: &ast::Expr) -> LResult<DType> {
        if let Some((name, args, kwargs)) = as_call(ann) {
            if name == "T.var" {
                let a = bind("T.var", ann.span, args, kwargs, &["dtype"], 1)?;
                return parse_dtype(a[0].unwrap_or(ann), false);
            }
            return Err(err(ann.span, format!("unknown parameter type `{name}`")));
        }
        let Some(name) = ann.dotted() else {
            return Err(err(
                ann.span,
                "expected a parameter type such as `T.handle`",
            ));
        };
        match name.strip_prefix("T.").map(str::parse::<DType>) {
            Some(Ok(d)) => Ok(d),
            _ => Err(err(ann.span, format!("unknown parameter type `{name}`"))),
        }
    }

    // ---------------------------------------------------------------- statements

    fn scoped<T>(&mut self, f: impl FnOnce(&mut Self) -> LResult<T>) -> LResult<T> {
        self.scopes.push(HashMap::new());
        let r = f(self);
        self.scopes.pop();
        r
    }

    fn seq(&mut self, stmts: &[ast::Stmt], level: Level) -> LResult<Stmt> {
        let mut out = Vec::new();
        for (i, s) in stmts.iter().enumerate() {
            let let_of = match &s.kind {
                StmtKind::AnnAssign { target, ann, value } => Some((target, Some(ann), value)),
                StmtKind::Assign { targets, value }
                    if targets.len() == 1
                        && targets[0].as_name().is_some()
                        && !self.is_decl_call(value) =>
                {
                    Some((&targets[0], None, value))
                }
                _ => None,
            };
            if let Some((target, ann, value)) = let_of {
                let name = self.name_of(target, "a variable")?;
                if let Some((sym, _)) = self.lookup(name) {
                    if !matches!(sym, Sym::Buffer(_)) || ann.is_some() {
                        return Err(err(
                            target.span,
                            format!(
                                "cannot assign to `{name}`: only buffer elements can be stored to"
                            ),
                        ));
                    }
                    return Err(err(
                        target.span,
                        format!("cannot assign to buffer `{name}` without indices"),
                    ));
                }
                let value = self.expr(value)?;
                let dtype = match ann {
                    Some(a) => self.param_type(a)?,
                    None => value.dtype(&self.f),
                };
                let rest = &stmts[i + 1..];
                let (var, body) = self.scoped(|me| {
                    let var = me.new_var(name, dtype, target.span)?;
                    Ok((var, me.seq(rest, level)?))
                })?;
                out.push(Stmt::Let(Box::new(LetStmt {
                    var,
                    value,
                    body,
                    span: s.span,
                })));
                return Ok(Stmt::seq(out));
            }
            if let Some(st) = self.stmt(s, level)? {
                out.push(st);
            }
        }
        Ok(Stmt::seq(out))
    }

    /// `with T.LetStmt(value) as x:` / `with T.LetStmt(value, "int64") as x:` (the type may also
    /// be written `T.int64`): a `let` scoped over the indented body only.
    fn let_stmt(
        &mut self,
        item: &ast::Expr,
        args: &[ast::Expr],
        kwargs: &[Kwarg],
        target: Option<&ast::Expr>,
        body: &[ast::Stmt],
        span: Span,
    ) -> LResult<Option<Stmt>> {
        let fname = "T.LetStmt";
        let a = bind(
            fname,
            item.span,
            args,
            kwargs,
            &["value", "type_annotation"],
            1,
        )?;
        let Some(target) = target else {
            return Err(err(
                item.span,
                "`T.LetStmt` needs a variable: `with T.LetStmt(value) as x:`",
            ));
        };
        let name = self.name_of(target, "a variable")?;
        let value = self.expr(a[0].unwrap_or(item))?;
        let dtype = match a[1] {
            Some(t) if t.as_str().is_some() => parse_dtype(t, false)?,
            Some(t) => self.param_type(t)?,
            None => value.dtype(&self.f),
        };
        let (var, body) = self.scoped(|me| {
            let var = me.new_var(name, dtype, target.span)?;
            Ok((var, me.scoped(|m| m.seq(body, Level::Inner))?))
        })?;
        Ok(Some(Stmt::Let(Box::new(LetStmt {
            var,
            value,
            body,
            span,
        }))))
    }

    fn is_decl_call(&self, e: &ast::Expr) -> bool {
        as_call(e).is_some_and(|(n, _, _)| {
            matches!(
                n.as_str(),
                "T.sp.dense_fixed"
                    | "T.sp.dense_varied"
                    | "T.sp.compressed_fixed"
                    | "T.sp.compressed_varied"
                    | "T.sp.match_buffer"
                    | "T.sp.alloc_buffer"
                    | "T.match_buffer"
                    | "T.alloc_buffer"
                    | "T.allocate"
                    | "T.axis.spatial"
                    | "T.axis.reduce"
                    | "T.axis.remap"
            )
        })
    }

    fn stmt(&mut self, s: &ast::Stmt, level: Level) -> LResult<Option<Stmt>> {
        match &s.kind {
            StmtKind::Pass => Ok(None),
            StmtKind::Expr(e) => self.expr_stmt(e, level),
            StmtKind::Assign { targets, value } => {
                if targets.len() == 1 {
                    let t = &targets[0];
                    if let ExprKind::Subscript(base, idx) = &t.kind {
                        let (buffer, indices) = self.store_target(base, idx, t.span)?;
                        let value = self.expr(value)?;
                        return Ok(Some(Stmt::Store(Store {
                            buffer,
                            indices,
                            value,
                            span: s.span,
                        })));
                    }
                    if let Some(name) = t.as_name() {
                        return self.decl(name, t.span, value, level);
                    }
                    return Err(err(t.span, "cannot assign to this expression"));
                }
                if let Some((n, _, _)) = as_call(value) {
                    if n == "T.axis.remap" {
                        return Err(err(value.span, "`T.axis.remap` is only allowed in a block"));
                    }
                }
                Err(err(
                    s.span,
                    "tuple assignment is only supported for `T.axis.remap`",
                ))
            }
            StmtKind::AnnAssign { target, .. } => Err(err(
                target.span,
                "an annotated assignment must bind a new name",
            )),
            StmtKind::AugAssign { target, op, value } => {
                let ExprKind::Subscript(base, idx) = &target.kind else {
                    return Err(err(
                        target.span,
                        "augmented assignment needs a buffer element target",
                    ));
                };
                let (buffer, indices) = self.store_target(base, idx, target.span)?;
                let rhs = self.expr(value)?;
                let op = match op {
                    AugOp::Add => BinOp::Add,
                    AugOp::Sub => BinOp::Sub,
                    AugOp::Mul => BinOp::Mul,
                    AugOp::Div => BinOp::Div,
                };
                let cur = Expr::load(buffer, indices.clone());
                let value = Expr::binary(op, cur, rhs);
                Ok(Some(Stmt::Store(Store {
                    buffer,
                    indices,
                    value,
                    span: s.span,
                })))
            }
            StmtKind::For {
                targets,
                iter,
                body,
            } => self.for_loop(targets, iter, body, s.span),
            StmtKind::With { item, target, body } => {
                let Some((name, args, kwargs)) = as_call(item) else {
                    return Err(err(
                        item.span,
                        "expected `T.sp.iteration(...)` or `T.block(...)`",
                    ));
                };
                match name.as_str() {
                    "T.sp.iteration" => {
                        self.iteration(item, args, kwargs, target.as_ref(), body, s.span)
                    }
                    "T.block" => {
                        if let Some(t) = target {
                            return Err(err(t.span, "`T.block` takes no `as` target"));
                        }
                        self.block(item, args, kwargs, body, s.span)
                    }
                    "T.LetStmt" => self.let_stmt(item, args, kwargs, target.as_ref(), body, s.span),
                    "T.init" => Err(err(item.span, "`T.init()` outside an iteration or block")),
                    n if KNOWN.contains(&n) => {
                        Err(err(item.span, format!("`{n}` cannot be used with `with`")))
                    }
                    n => Err(unknown_function(n, item.span)),
                }
            }
            StmtKind::While { cond, body } => {
                let cond = self.expr(cond)?;
                let body = self.scoped(|me| me.seq(body, Level::Inner))?;
                Ok(Some(Stmt::While(Box::new(While {
                    cond,
                    body,
                    span: s.span,
                }))))
            }
            StmtKind::If {
                cond,
                then_body,
                else_body,
            } => {
                let cond = self.expr(cond)?;
                let then_case = self.scoped(|me| me.seq(then_body, Level::Inner))?;
                let else_case = match else_body {
                    Some(b) => Some(self.scoped(|me| me.seq(b, Level::Inner))?),
                    None => None,
                };
                Ok(Some(Stmt::If(Box::new(IfThenElse {
                    cond,
                    then_case,
                    else_case,
                    span: s.span,
                }))))
            }
        }
    }

    fn expr_stmt(&mut self, e: &ast::Expr, level: Level) -> LResult<Option<Stmt>> {
        if matches!(e.kind, ExprKind::Str(_)) {
            return Ok(None); // docstring
        }
        let Some((name, args, kwargs)) = as_call(e) else {
            self.expr(e)?;
            return Err(err(
                e.span,
                "expression statement has no effect (use `T.evaluate`)",
            ));
        };
        match name.as_str() {
            "T.func_attr" => {
                if level != Level::Func {
                    return Err(err(
                        e.span,
                        "`T.func_attr` is only allowed at function level",
                    ));
                }
                let a = bind(&name, e.span, args, kwargs, &["attrs"], 1)?;
                let attrs = attr_dict(a[0].unwrap_or(e))?;
                for (k, v) in attrs.0 {
                    self.f.attrs.set(k, v);
                }
                Ok(None)
            }
            "T.assume_buffer_domain" => {
                let a = bind(&name, e.span, args, kwargs, &["buffer", "domain"], 2)?;
                let (b, d) = (a[0].unwrap_or(e), a[1].unwrap_or(e));
                let buffer = self.buffer(b)?;
                let Some([lo, hi]) = list_items(d).and_then(|v| <&[_; 2]>::try_from(v).ok()) else {
                    return Err(err(d.span, "expected a domain `(lo, hi)`"));
                };
                let (lo, hi) = (self.expr(lo)?, self.expr(hi)?);
                Ok(Some(Stmt::AssumeBufferDomain {
                    buffer,
                    lo,
                    hi,
                    span: e.span,
                }))
            }
            "T.evaluate" => {
                let a = bind(&name, e.span, args, kwargs, &["value"], 1)?;
                Ok(Some(Stmt::Evaluate(self.expr(a[0].unwrap_or(e))?)))
            }
            "T.sp.iteration_attr" => Err(err(
                e.span,
                "`T.sp.iteration_attr` is only allowed in a sparse iteration",
            )),
            "T.reads" | "T.writes" | "T.where" | "T.block_attr" => Err(err(
                e.span,
                format!("`{name}` is only allowed in a block header"),
            )),
            "T.init" => Err(err(e.span, "`T.init()` must be used as `with T.init():`")),
            n if n
                .strip_prefix("T.")
                .and_then(Intrinsic::from_name)
                .is_some() =>
            {
                Ok(Some(Stmt::Evaluate(self.expr(e)?)))
            }
            _ => {
                self.expr(e)?;
                Err(err(
                    e.span,
                    "expression statement has no effect (use `T.evaluate`)",
                ))
            }
        }
    }

    fn store_target(
        &mut self,
        base: &ast::Expr,
        idx: &[ast::Expr],
        span: Span,
    ) -> LResult<(BufferId, Vec<Expr>)> {
        let Some(name) = base.as_name() else {
            return Err(err(base.span, "cannot store to this expression"));
        };
        let buffer = match self.lookup(name) {
            Some((Sym::Buffer(b), _)) => b,
            Some(_) => {
                return Err(err(
                    base.span,
                    format!("cannot store to `{name}`: not a buffer"),
                ))
            }
            None => return Err(self.undefined("buffer", name, base.span)),
        };
        let indices = self.indices(buffer, idx, span)?;
        Ok((buffer, indices))
    }

    fn indices(&mut self, buffer: BufferId, idx: &[ast::Expr], span: Span) -> LResult<Vec<Expr>> {
        let ndim = self.f.buffers[buffer].ndim();
        if idx.len() != ndim {
            return Err(err(
                span,
                format!(
                    "buffer `{}` takes {ndim} ind{}, got {}",
                    self.f.buffers[buffer].name,
                    if ndim == 1 { "ex" } else { "ices" },
                    idx.len()
                ),
            ));
        }
        let name = self.f.buffers[buffer].name.clone();
        idx.iter()
            .map(|i| {
                self.integer(i, |dt| {
                    format!("index of buffer `{name}` must be an integer, got {dt}")
                })
            })
            .collect()
    }
}
