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
        idx.iter().map(|i| self.expr(i)).collect()
    }

    /// `name = T.<declaration>(...)` and `name = T.allocate(...)`.
    fn decl(
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
    fn range_of(&mut self, lo: &ast::Expr, hi: &ast::Expr) -> LResult<(Expr, Expr)> {
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

    fn int_expr(&mut self, e: &ast::Expr) -> LResult<Expr> {
        let x = self.expr(e)?;
        if !x.dtype(&self.f).is_integer() {
            return Err(err(e.span, "expected an integer expression"));
        }
        Ok(x)
    }

    fn axis_decl(
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
    fn iter_entry(&mut self, e: &ast::Expr, top: bool) -> LResult<IterAxis> {
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

    fn dense_shape(&mut self, e: &ast::Expr) -> LResult<Vec<Expr>> {
        match list_items(e) {
            Some(items) => items.iter().map(|x| self.int_expr(x)).collect(),
            None => Ok(vec![self.int_expr(e)?]),
        }
    }

    fn buffer_decl(
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

    fn for_loop(
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

    fn iteration(
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

    fn is_init(&self, item: &ast::Expr) -> bool {
        as_call(item).is_some_and(|(n, a, k)| n == "T.init" && a.is_empty() && k.is_empty())
    }

    fn region(&mut self, e: &ast::Expr) -> LResult<BufferRegion> {
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

    fn regions(&mut self, args: &[ast::Expr], kwargs: &[Kwarg]) -> LResult<Vec<BufferRegion>> {
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

    fn block(
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
    fn block_header(&mut self, blk: &mut Block, s: &ast::Stmt) -> LResult<bool> {
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

    // ---------------------------------------------------------------- expressions

    fn expr(&mut self, e: &ast::Expr) -> LResult<Expr> {
        Ok(match &e.kind {
            ExprKind::Name(n) => match self.lookup(n) {
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
                Expr::binary(op, self.expr(a)?, self.expr(b)?)
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

    fn call(
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
            let mut xs = Vec::new();
            for x in a.iter().take(op.arity()) {
                xs.push(self.expr(x.unwrap_or(e))?);
            }
            let dtype = match a[op.arity()] {
                Some(d) => parse_dtype(d, false)?,
                None => xs.first().map(|x| x.dtype(&self.f)).unwrap_or(DType::F32),
            };
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

    fn typed_const(&mut self, dt: DType, v: &ast::Expr) -> LResult<Expr> {
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
