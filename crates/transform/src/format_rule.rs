//! Format rewrite rules for [`crate::decompose_format()`] (SPEC §3.1): a new format described as a
//! small stage-I function, the buffers it replaces, the correspondence between old and new axes,
//! and the index maps between old and new coordinates — built from Rust or read from a rule
//! script (a `@T.prim_func` whose `T.func_attr` carries the rule's fields).
//!
//! # Rule scripts
//!
//! ```text
//! @T.prim_func
//! def bsr(a: T.handle, indptr: T.handle, indices: T.handle,
//!         m: T.int32, n: T.int32, nnz: T.int32, block_size: T.int32) -> None:
//!     T.func_attr({
//!         "rule_name": "{block_size}",
//!         "buffer_to_rewrite": ["A"],
//!         "axes_before": ["I", "J"],
//!         "axes_after": ["IO", "JO", "II", "JI"],
//!         "axis_map": {"I": ["IO", "II"], "J": ["JO", "JI"]},
//!         "idx_map": "lambda i, j: (i // block_size, j // block_size, i % block_size, j % block_size)",
//!         "inv_idx_map": "lambda io, jo, ii, ji: (io * block_size + ii, jo * block_size + ji)",
//!     })
//!     IO = T.sp.dense_fixed(m)
//!     JO = T.sp.compressed_varied(IO, (n, nnz), (indptr, indices), "int32")
//!     II = T.sp.dense_fixed(block_size)
//!     JI = T.sp.dense_fixed(block_size)
//!     A = T.sp.match_buffer(a, (IO, JO, II, JI), "float32")
//! ```
//!
//! - `rule_name` (alias `name`): the suffix of everything the rule adds; defaults to the function
//!   name. `{p}` placeholders are replaced by the value bound to the scalar parameter `p`.
//! - `buffer_to_rewrite` (alias `buffers_to_rewrite`): a string or a list of strings.
//! - `axis_map` (alias `iterator_map`): old axis → list of new axes.
//! - `axes_before`: the old buffer's axes (default: the keys of `axis_map`, in order);
//!   `axes_after`: the new buffer's axes in the order of `idx_map`'s results (default: the new
//!   buffer's axes).
//! - `idx_map` (alias `index_map`) and `inv_idx_map` (alias `inverse_index_map`): lambdas
//!   `lambda p, q: (e1, e2, ...)` over integers with `+ - * // %`, unary minus and parentheses;
//!   besides the lambda's parameters an expression may name a scalar parameter of the format
//!   function (a *rule parameter* such as `block_size`).
//!
//! Rule parameters are bound with [`FormatRewriteRule::bind`] (or
//! [`FormatRewriteRule::from_script_with`]): the parameter becomes a constant in the axes and the
//! maps and leaves the format's parameter list. The format function's remaining parameters become
//! parameters of the decomposed kernel, suffixed with the rule name.

use std::fmt;

use sparsetir_ir::attrs::{AttrValue, Attrs};
use sparsetir_ir::{BinOp, BufferShape, DType, Expr, PrimFunc, Span, Stmt, VarId};
use sparsetir_syntax::lexer::{lex, Tok, Token};
use sparsetir_syntax::Diagnostic;

/// Why a rule could not be built.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum RuleError {
    /// The rule script does not parse.
    #[error("rule script: {}", .0.iter().map(|d| d.message.as_str()).collect::<Vec<_>>().join("; "))]
    Parse(Vec<Diagnostic>),
    /// The rule is malformed; `span` locates it in the script (or in the map text for
    /// [`IndexMap::parse`]; empty for rules built from Rust).
    #[error("{message}")]
    Invalid { span: Span, message: String },
}

impl RuleError {
    fn invalid(span: Span, message: impl Into<String>) -> RuleError {
        RuleError::Invalid {
            span,
            message: message.into(),
        }
    }
    /// Where the problem is (the first diagnostic for parse errors).
    pub fn span(&self) -> Span {
        match self {
            RuleError::Parse(d) => d.first().map(|d| d.span).unwrap_or_default(),
            RuleError::Invalid { span, .. } => *span,
        }
    }
    /// The problem as located diagnostics, ready for `sparsetir_syntax::render`.
    pub fn diagnostics(&self) -> Vec<Diagnostic> {
        match self {
            RuleError::Parse(d) => d.clone(),
            RuleError::Invalid { span, message } => vec![Diagnostic::new(*span, message.clone())],
        }
    }
    fn shifted(self, by: usize, fallback: Span) -> RuleError {
        match self {
            RuleError::Invalid { span, message } => {
                let span = if by == usize::MAX {
                    fallback
                } else {
                    Span::new(span.start as usize + by, span.end as usize + by)
                };
                RuleError::Invalid { span, message }
            }
            other => other,
        }
    }
}

/// An expression of an index map.
#[derive(Clone, Debug, PartialEq)]
pub enum MapExpr {
    /// The map's `k`-th parameter.
    Param(usize),
    Int(i64),
    /// A scalar parameter of the format function (a rule parameter), by name.
    Sym(String),
    /// `+`, `-`, `*`, `//`, `%` (as [`BinOp::Add`], [`BinOp::Sub`], [`BinOp::Mul`],
    /// [`BinOp::FloorDiv`], [`BinOp::FloorMod`]).
    Binary(BinOp, Box<MapExpr>, Box<MapExpr>),
    Neg(Box<MapExpr>),
}

impl MapExpr {
    fn bin(op: BinOp, a: MapExpr, b: MapExpr) -> MapExpr {
        MapExpr::Binary(op, Box::new(a), Box::new(b))
    }

    /// The IR expression, with `args[k]` for parameter `k` and `sym` resolving named symbols.
    pub fn to_expr(
        &self,
        args: &[Expr],
        sym: &mut dyn FnMut(&str) -> Option<Expr>,
    ) -> Result<Expr, String> {
        Ok(match self {
            MapExpr::Param(k) => args
                .get(*k)
                .cloned()
                .ok_or_else(|| format!("index map parameter {k} has no argument"))?,
            MapExpr::Int(v) => Expr::int(*v),
            MapExpr::Sym(s) => sym(s).ok_or_else(|| format!("unknown name `{s}` in index map"))?,
            MapExpr::Binary(op, a, b) => {
                Expr::binary(*op, a.to_expr(args, sym)?, b.to_expr(args, sym)?)
            }
            MapExpr::Neg(a) => {
                Expr::Unary(sparsetir_ir::UnOp::Neg, Box::new(a.to_expr(args, sym)?))
            }
        })
    }

    fn visit_syms(&self, f: &mut dyn FnMut(&str)) {
        match self {
            MapExpr::Sym(s) => f(s),
            MapExpr::Binary(_, a, b) => {
                a.visit_syms(f);
                b.visit_syms(f)
            }
            MapExpr::Neg(a) => a.visit_syms(f),
            MapExpr::Param(_) | MapExpr::Int(_) => {}
        }
    }

    fn bind_sym(&mut self, name: &str, value: i64) {
        match self {
            MapExpr::Sym(s) if s == name => *self = MapExpr::Int(value),
            MapExpr::Binary(_, a, b) => {
                a.bind_sym(name, value);
                b.bind_sym(name, value)
            }
            MapExpr::Neg(a) => a.bind_sym(name, value),
            _ => {}
        }
    }

    fn fmt_with(&self, params: &[String], prec: u8, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MapExpr::Param(k) => match params.get(*k) {
                Some(p) => f.write_str(p),
                None => write!(f, "_{k}"),
            },
            MapExpr::Int(v) => write!(f, "{v}"),
            MapExpr::Sym(s) => f.write_str(s),
            MapExpr::Neg(a) => {
                f.write_str("-")?;
                a.fmt_with(params, 3, f)
            }
            MapExpr::Binary(op, a, b) => {
                let (p, sym) = match op {
                    BinOp::Add => (1, "+"),
                    BinOp::Sub => (1, "-"),
                    BinOp::Mul => (2, "*"),
                    BinOp::FloorDiv => (2, "//"),
                    BinOp::FloorMod => (2, "%"),
                    _ => (2, "?"),
                };
                if p < prec {
                    f.write_str("(")?;
                }
                a.fmt_with(params, p, f)?;
                write!(f, " {sym} ")?;
                b.fmt_with(params, p + 1, f)?;
                if p < prec {
                    f.write_str(")")?;
                }
                Ok(())
            }
        }
    }
}

/// An index map `lambda p1, p2, ...: (e1, e2, ...)`.
#[derive(Clone, Debug, PartialEq)]
pub struct IndexMap {
    pub params: Vec<String>,
    pub results: Vec<MapExpr>,
}

impl fmt::Display for IndexMap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lambda {}: (", self.params.join(", "))?;
        for (k, r) in self.results.iter().enumerate() {
            if k > 0 {
                f.write_str(", ")?;
            }
            r.fmt_with(&self.params, 0, f)?;
        }
        if self.results.len() == 1 {
            f.write_str(",")?;
        }
        f.write_str(")")
    }
}

impl IndexMap {
    pub fn new(params: Vec<String>, results: Vec<MapExpr>) -> IndexMap {
        IndexMap { params, results }
    }

    /// Parses `lambda i, j: (i // 4, j // 4, i % 4, j % 4)` (the parentheses around the results
    /// are optional). Error spans are byte ranges of `text`.
    pub fn parse(text: &str) -> Result<IndexMap, RuleError> {
        let toks = lex(text).map_err(|d| RuleError::invalid(d.span, d.message))?;
        let mut p = MapParser {
            toks,
            pos: 0,
            params: Vec::new(),
            depth: 0,
        };
        p.lambda()
    }

    /// Number of parameters.
    pub fn arity(&self) -> usize {
        self.params.len()
    }

    /// The results as IR expressions of `args` (one per parameter); `sym` resolves rule
    /// parameters.
    pub fn apply(
        &self,
        args: &[Expr],
        sym: &mut dyn FnMut(&str) -> Option<Expr>,
    ) -> Result<Vec<Expr>, String> {
        if args.len() != self.params.len() {
            return Err(format!(
                "index map `{self}` takes {} arguments, got {}",
                self.params.len(),
                args.len()
            ));
        }
        self.results.iter().map(|r| r.to_expr(args, sym)).collect()
    }

    /// Every symbol (non-parameter name) the results use.
    pub fn symbols(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for r in &self.results {
            r.visit_syms(&mut |s| {
                if !out.iter().any(|o| o == s) {
                    out.push(s.to_string())
                }
            });
        }
        out
    }

    /// Replaces the symbol `name` by the constant `value`.
    pub fn bind(&mut self, name: &str, value: i64) {
        for r in &mut self.results {
            r.bind_sym(name, value);
        }
    }
}

/// A tiny recursive-descent parser for the lambda form, over the script lexer's tokens.
struct MapParser {
    toks: Vec<Token>,
    pos: usize,
    params: Vec<String>,
    depth: usize,
}

enum Parsed {
    One(MapExpr),
    Tuple(Vec<MapExpr>),
}

impl MapParser {
    fn peek(&self) -> &Tok {
        match self.toks.get(self.pos).or(self.toks.last()) {
            Some(t) => &t.tok,
            None => &Tok::Eof,
        }
    }
    fn span(&self) -> Span {
        self.toks
            .get(self.pos)
            .or(self.toks.last())
            .map(|t| t.span)
            .unwrap_or_default()
    }
    fn is_op(&self, op: &str) -> bool {
        matches!(self.peek(), Tok::Op(o) if *o == op)
    }
    fn expect_op(&mut self, op: &str) -> Result<(), RuleError> {
        if self.is_op(op) {
            self.pos += 1;
            Ok(())
        } else {
            Err(RuleError::invalid(
                self.span(),
                format!("expected `{op}`, found {}", self.peek().describe()),
            ))
        }
    }

    fn lambda(&mut self) -> Result<IndexMap, RuleError> {
        match self.peek() {
            Tok::Name(n) if n == "lambda" => self.pos += 1,
            other => {
                return Err(RuleError::invalid(
                    self.span(),
                    format!(
                        "expected an index map `lambda i, j: (...)`, found {}",
                        other.describe()
                    ),
                ))
            }
        }
        while !self.is_op(":") {
            let span = self.span();
            match self.peek().clone() {
                Tok::Name(n) if !sparsetir_syntax::parser::is_keyword(&n) => {
                    if self.params.contains(&n) {
                        return Err(RuleError::invalid(span, format!("parameter `{n}` twice")));
                    }
                    self.params.push(n);
                    self.pos += 1;
                }
                other => {
                    return Err(RuleError::invalid(
                        span,
                        format!("expected a parameter name, found {}", other.describe()),
                    ))
                }
            }
            if !self.is_op(":") {
                self.expect_op(",")?;
            }
        }
        self.expect_op(":")?;
        let results = match self.list()? {
            Parsed::One(e) => vec![e],
            Parsed::Tuple(v) => v,
        };
        while matches!(self.peek(), Tok::Newline | Tok::Dedent) {
            self.pos += 1;
        }
        if !matches!(self.peek(), Tok::Eof) {
            return Err(RuleError::invalid(
                self.span(),
                format!("unexpected {} after the index map", self.peek().describe()),
            ));
        }
        Ok(IndexMap::new(std::mem::take(&mut self.params), results))
    }

    /// A comma list at the top level: one parenthesized tuple or expressions separated by commas.
    fn list(&mut self) -> Result<Parsed, RuleError> {
        let first = self.item()?;
        if !self.is_op(",") {
            return Ok(first);
        }
        let mut items = vec![self.single(first)?];
        while self.is_op(",") {
            self.pos += 1;
            if matches!(self.peek(), Tok::Newline | Tok::Eof) || self.is_op(")") {
                break;
            }
            let it = self.item()?;
            items.push(self.single(it)?);
        }
        Ok(Parsed::Tuple(items))
    }

    fn single(&self, p: Parsed) -> Result<MapExpr, RuleError> {
        match p {
            Parsed::One(e) => Ok(e),
            Parsed::Tuple(_) => Err(RuleError::invalid(
                self.span(),
                "nested tuples are not allowed",
            )),
        }
    }

    fn item(&mut self) -> Result<Parsed, RuleError> {
        if self.is_op("(") {
            // A parenthesized expression or tuple at the start of an item: parse the group, then
            // continue the expression if an operator follows.
            let save = self.pos;
            self.pos += 1;
            let inner = self.group()?;
            if let Parsed::Tuple(v) = inner {
                if self.is_op(",")
                    || self.is_op(")")
                    || matches!(self.peek(), Tok::Newline | Tok::Eof)
                {
                    return Ok(Parsed::Tuple(v));
                }
                return Err(RuleError::invalid(
                    self.span(),
                    "a tuple cannot be an operand",
                ));
            }
            self.pos = save;
        }
        Ok(Parsed::One(self.expr()?))
    }

    /// After `(`: a parenthesized expression or a tuple, through the closing `)`.
    fn group(&mut self) -> Result<Parsed, RuleError> {
        self.enter()?;
        let first = self.expr()?;
        let out = if self.is_op(",") {
            let mut v = vec![first];
            while self.is_op(",") {
                self.pos += 1;
                if self.is_op(")") {
                    break;
                }
                v.push(self.expr()?);
            }
            Parsed::Tuple(v)
        } else {
            Parsed::One(first)
        };
        self.expect_op(")")?;
        self.depth -= 1;
        Ok(out)
    }

    fn enter(&mut self) -> Result<(), RuleError> {
        self.depth += 1;
        if self.depth > 64 {
            return Err(RuleError::invalid(
                self.span(),
                "index map nested too deeply",
            ));
        }
        Ok(())
    }

    fn expr(&mut self) -> Result<MapExpr, RuleError> {
        self.enter()?;
        let mut a = self.term()?;
        loop {
            let op = if self.is_op("+") {
                BinOp::Add
            } else if self.is_op("-") {
                BinOp::Sub
            } else {
                break;
            };
            self.pos += 1;
            let b = self.term()?;
            a = MapExpr::bin(op, a, b);
        }
        self.depth -= 1;
        Ok(a)
    }

    fn term(&mut self) -> Result<MapExpr, RuleError> {
        let mut a = self.unary()?;
        loop {
            let op = if self.is_op("*") {
                BinOp::Mul
            } else if self.is_op("//") {
                BinOp::FloorDiv
            } else if self.is_op("%") {
                BinOp::FloorMod
            } else if self.is_op("/") {
                return Err(RuleError::invalid(
                    self.span(),
                    "index maps use integer division `//`, not `/`",
                ));
            } else {
                break;
            };
            self.pos += 1;
            let b = self.unary()?;
            a = MapExpr::bin(op, a, b);
        }
        Ok(a)
    }

    fn unary(&mut self) -> Result<MapExpr, RuleError> {
        if self.is_op("-") {
            self.pos += 1;
            self.enter()?;
            let a = self.unary()?;
            self.depth -= 1;
            return Ok(match a {
                MapExpr::Int(v) => MapExpr::Int(v.wrapping_neg()),
                a => MapExpr::Neg(Box::new(a)),
            });
        }
        self.atom()
    }

    fn atom(&mut self) -> Result<MapExpr, RuleError> {
        let span = self.span();
        match self.peek().clone() {
            Tok::Int(v) => {
                self.pos += 1;
                let v =
                    i64::try_from(v).map_err(|_| RuleError::invalid(span, "integer too large"))?;
                Ok(MapExpr::Int(v))
            }
            Tok::Name(n) if !sparsetir_syntax::parser::is_keyword(&n) => {
                self.pos += 1;
                if self.is_op("[") || self.is_op("(") || self.is_op(".") {
                    return Err(RuleError::invalid(
                        self.span(),
                        "index maps support integer arithmetic on names only (no loads or calls)",
                    ));
                }
                Ok(match self.params.iter().position(|p| *p == n) {
                    Some(k) => MapExpr::Param(k),
                    None => MapExpr::Sym(n),
                })
            }
            Tok::Op("(") => {
                self.pos += 1;
                match self.group()? {
                    Parsed::One(e) => Ok(e),
                    Parsed::Tuple(_) => {
                        Err(RuleError::invalid(span, "a tuple cannot be an operand"))
                    }
                }
            }
            other => Err(RuleError::invalid(
                span,
                format!("expected an integer expression, found {}", other.describe()),
            )),
        }
    }
}

/// A format rewrite rule (SPEC §3.1). Build with [`FormatRewriteRule::new`] (checks it) or
/// [`FormatRewriteRule::from_script`].
#[derive(Clone, Debug, PartialEq)]
pub struct FormatRewriteRule {
    /// Suffix of the parameters, axes, buffers and iterations the rule adds (`A` → `A_<name>`).
    pub name: String,
    /// A stage-I function that only declares axes and one sparse buffer (bound to a parameter).
    pub new_format: PrimFunc,
    /// Names of the buffers of the rewritten function stored in the new format.
    pub buffers_to_rewrite: Vec<String>,
    /// The axes of the rewritten buffers, in order (the parameters of `idx_map`).
    pub axes_before: Vec<String>,
    /// The new buffer's axes in the order of `idx_map`'s results (the parameters of
    /// `inv_idx_map`).
    pub axes_after: Vec<String>,
    /// Old axis → new axes that replace its iterator (in iteration order).
    pub axis_map: Vec<(String, Vec<String>)>,
    /// Old coordinates → new coordinates.
    pub idx_map: IndexMap,
    /// New coordinates → old coordinates.
    pub inv_idx_map: IndexMap,
}

impl FormatRewriteRule {
    /// A checked rule (see [`FormatRewriteRule::validate`]).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        name: impl Into<String>,
        new_format: PrimFunc,
        buffers_to_rewrite: Vec<String>,
        axes_before: Vec<String>,
        axes_after: Vec<String>,
        axis_map: Vec<(String, Vec<String>)>,
        idx_map: IndexMap,
        inv_idx_map: IndexMap,
    ) -> Result<FormatRewriteRule, RuleError> {
        let rule = FormatRewriteRule {
            name: name.into(),
            new_format,
            buffers_to_rewrite,
            axes_before,
            axes_after,
            axis_map,
            idx_map,
            inv_idx_map,
        };
        rule.validate()?;
        Ok(rule)
    }

    /// Reads a rule script (see the module documentation).
    pub fn from_script(text: &str) -> Result<FormatRewriteRule, RuleError> {
        Self::from_script_with(text, &[])
    }

    /// Reads a rule script and binds rule parameters (scalar parameters of the format function)
    /// to constants.
    pub fn from_script_with(
        text: &str,
        bindings: &[(&str, i64)],
    ) -> Result<FormatRewriteRule, RuleError> {
        let func = sparsetir_syntax::parse_func(text).map_err(RuleError::Parse)?;
        let fspan = func.span;
        let attrs = func.attrs.clone();
        let get = |keys: &[&'static str]| get_attr(&attrs, keys);
        let strings = |key: &str, v: &AttrValue| -> Result<Vec<String>, RuleError> {
            match v {
                AttrValue::Str(s) => Ok(vec![s.clone()]),
                AttrValue::List(items) => items
                    .iter()
                    .map(|i| match i {
                        AttrValue::Str(s) => Ok(s.clone()),
                        _ => Err(RuleError::invalid(
                            fspan,
                            format!("rule attribute `{key}` must be a list of strings"),
                        )),
                    })
                    .collect(),
                _ => Err(RuleError::invalid(
                    fspan,
                    format!("rule attribute `{key}` must be a string or a list of strings"),
                )),
            }
        };
        let name = match get(&["rule_name", "name"]) {
            Some((_, AttrValue::Str(s))) => s.clone(),
            Some((k, _)) => {
                return Err(RuleError::invalid(fspan, format!("`{k}` must be a string")))
            }
            None => func.name.clone(),
        };
        let buffers = match get(&["buffer_to_rewrite", "buffers_to_rewrite"]) {
            Some((k, v)) => strings(k, v)?,
            None => {
                return Err(RuleError::invalid(
                    fspan,
                    "a rule script needs `\"buffer_to_rewrite\"` in its `T.func_attr`",
                ))
            }
        };
        let axis_map = match get(&["axis_map", "iterator_map"]) {
            Some((k, AttrValue::Dict(d))) => d
                .iter()
                .map(|(old, v)| Ok((old.to_string(), strings(k, v)?)))
                .collect::<Result<Vec<_>, RuleError>>()?,
            Some((k, _)) => {
                return Err(RuleError::invalid(
                    fspan,
                    format!("`{k}` must be a dictionary old axis -> list of new axes"),
                ))
            }
            None => {
                return Err(RuleError::invalid(
                    fspan,
                    "a rule script needs `\"axis_map\"` in its `T.func_attr`",
                ))
            }
        };
        let axes_before = match get(&["axes_before"]) {
            Some((k, v)) => strings(k, v)?,
            None => axis_map.iter().map(|(k, _)| k.clone()).collect(),
        };
        let axes_after = match get(&["axes_after"]) {
            Some((k, v)) => strings(k, v)?,
            None => format_buffer_axes(&func).unwrap_or_default(),
        };
        let map = |keys: &[&'static str]| -> Result<IndexMap, RuleError> {
            match get(keys) {
                Some((_, AttrValue::Str(s))) => {
                    // Locate the map text in the source to report errors where they are.
                    let at = text.find(s.as_str()).unwrap_or(usize::MAX);
                    IndexMap::parse(s).map_err(|e| {
                        let e = e.shifted(at, fspan);
                        match e {
                            RuleError::Invalid { span, message } => RuleError::Invalid {
                                span,
                                message: format!("in `{}`: {message}", keys[0]),
                            },
                            o => o,
                        }
                    })
                }
                Some((k, _)) => Err(RuleError::invalid(
                    fspan,
                    format!("`{k}` must be a string `lambda ...: (...)`"),
                )),
                None => Err(RuleError::invalid(
                    fspan,
                    format!("a rule script needs `\"{}\"` in its `T.func_attr`", keys[0]),
                )),
            }
        };
        let idx_map = map(&["idx_map", "index_map"])?;
        let inv_idx_map = map(&["inv_idx_map", "inverse_index_map"])?;
        let mut new_format = func;
        new_format.attrs = Attrs::new();
        let rule = FormatRewriteRule {
            name,
            new_format,
            buffers_to_rewrite: buffers,
            axes_before,
            axes_after,
            axis_map,
            idx_map,
            inv_idx_map,
        };
        let rule = rule.bind(bindings).map_err(|e| match e {
            RuleError::Invalid { message, .. } => RuleError::invalid(fspan, message),
            o => o,
        })?;
        rule.validate().map_err(|e| match e {
            RuleError::Invalid { span, message } if span == Span::default() => {
                RuleError::invalid(fspan, message)
            }
            o => o,
        })?;
        Ok(rule)
    }

    /// Binds rule parameters (scalar parameters of the format function) to constants: in the
    /// axes, the buffer, the index maps and `{param}` placeholders of the name; the parameters
    /// leave the format's parameter list.
    pub fn bind(&self, bindings: &[(&str, i64)]) -> Result<FormatRewriteRule, RuleError> {
        let mut out = self.clone();
        for &(pname, value) in bindings {
            let f = &out.new_format;
            let Some(v) = f.param(pname) else {
                return Err(RuleError::invalid(
                    Span::default(),
                    format!(
                        "rule `{}` has no scalar parameter `{pname}` to bind",
                        self.name
                    ),
                ));
            };
            let dtype = f.vars[v].dtype;
            if dtype == DType::Handle || dtype.is_float() {
                return Err(RuleError::invalid(
                    Span::default(),
                    format!("rule parameter `{pname}` is not an integer scalar"),
                ));
            }
            let c = Expr::Int(value, dtype);
            let mut sub = |x: VarId| (x == v).then(|| c.clone());
            let nf = &mut out.new_format;
            for h in nf.axes.handles().collect::<Vec<_>>() {
                let a = &mut nf.axes[h];
                a.length = subst_vars(&a.length, &mut sub);
                a.nnz = a.nnz.as_ref().map(|e| subst_vars(e, &mut sub));
                a.nnz_cols = a.nnz_cols.as_ref().map(|e| subst_vars(e, &mut sub));
            }
            for h in nf.buffers.handles().collect::<Vec<_>>() {
                let b = &mut nf.buffers[h];
                if let BufferShape::Dense(d) = &b.shape {
                    b.shape =
                        BufferShape::Dense(d.iter().map(|e| subst_vars(e, &mut sub)).collect());
                }
                b.extra_storage = b.extra_storage.as_ref().map(|e| subst_vars(e, &mut sub));
                b.default_value = b.default_value.as_ref().map(|e| subst_vars(e, &mut sub));
            }
            nf.params.retain(|p| *p != v);
            out.idx_map.bind(pname, value);
            out.inv_idx_map.bind(pname, value);
            out.name = out
                .name
                .replace(&format!("{{{pname}}}"), &value.to_string());
        }
        Ok(out)
    }

    /// The same rule under another name.
    pub fn with_name(mut self, name: impl Into<String>) -> FormatRewriteRule {
        self.name = name.into();
        self
    }

    /// Checks the rule's internal consistency: the name is a non-empty identifier tail (letters,
    /// digits, `_`); the format declares exactly one sparse buffer bound to a parameter and no
    /// statements; `axes_after` is a permutation of that buffer's axes; the maps' arities match
    /// `axes_before`/`axes_after`; `axis_map` names old axes of `axes_before` and new axes of
    /// `axes_after`, each new axis at most once; every symbol of the maps is a scalar parameter
    /// of the format.
    pub fn validate(&self) -> Result<(), RuleError> {
        let bad = |m: String| Err(RuleError::invalid(Span::default(), m));
        let r = &self.name;
        if r.is_empty() || !r.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return bad(format!(
                "rule name `{r}` must be non-empty and made of letters, digits and `_`"
            ));
        }
        if self.buffers_to_rewrite.is_empty() {
            return bad(format!("rule `{r}` rewrites no buffer"));
        }
        let f = &self.new_format;
        if f.buffer_decls.len() != 1 {
            return bad(format!(
                "rule `{r}`: the new format must declare exactly one buffer, found {}",
                f.buffer_decls.len()
            ));
        }
        let b = &f.buffers[f.buffer_decls[0]];
        if !b.is_sparse() || b.data_param().is_none() {
            return bad(format!(
                "rule `{r}`: the new format's buffer `{}` must be a sparse `match_buffer`",
                b.name
            ));
        }
        let mut has_stmt = false;
        f.body.visit(&mut |s| {
            has_stmt |= !matches!(s, Stmt::Seq(_) | Stmt::Evaluate(_));
        });
        if has_stmt {
            return bad(format!(
                "rule `{r}`: the new format may only declare axes and one buffer"
            ));
        }
        let buf_axes = format_buffer_axes(f).unwrap_or_default();
        let mut sorted_after = self.axes_after.clone();
        sorted_after.sort();
        let mut sorted_buf = buf_axes.clone();
        sorted_buf.sort();
        if sorted_after != sorted_buf {
            return bad(format!(
                "rule `{r}`: axes_after {:?} must be the new buffer's axes {:?} in some order",
                self.axes_after, buf_axes
            ));
        }
        if self.idx_map.arity() != self.axes_before.len()
            || self.idx_map.results.len() != self.axes_after.len()
        {
            return bad(format!(
                "rule `{r}`: idx_map `{}` must map {} old coordinates to {} new ones",
                self.idx_map,
                self.axes_before.len(),
                self.axes_after.len()
            ));
        }
        if self.inv_idx_map.arity() != self.axes_after.len()
            || self.inv_idx_map.results.len() != self.axes_before.len()
        {
            return bad(format!(
                "rule `{r}`: inv_idx_map `{}` must map {} new coordinates to {} old ones",
                self.inv_idx_map,
                self.axes_after.len(),
                self.axes_before.len()
            ));
        }
        let mut seen: Vec<&str> = Vec::new();
        for (old, news) in &self.axis_map {
            if !self.axes_before.contains(old) {
                return bad(format!(
                    "rule `{r}`: axis_map key `{old}` is not one of axes_before {:?}",
                    self.axes_before
                ));
            }
            if news.is_empty() {
                return bad(format!("rule `{r}`: axis_map maps `{old}` to no axis"));
            }
            for n in news {
                if !self.axes_after.contains(n) {
                    return bad(format!(
                        "rule `{r}`: axis_map value `{n}` is not one of axes_after {:?}",
                        self.axes_after
                    ));
                }
                if seen.contains(&n.as_str()) {
                    return bad(format!("rule `{r}`: new axis `{n}` is mapped twice"));
                }
                seen.push(n);
            }
        }
        for s in self
            .idx_map
            .symbols()
            .into_iter()
            .chain(self.inv_idx_map.symbols())
        {
            let ok = f
                .param(&s)
                .is_some_and(|v| f.vars[v].dtype != DType::Handle);
            if !ok {
                return bad(format!(
                    "rule `{r}`: index maps name `{s}`, which is neither a map parameter nor a \
                     scalar parameter of the format"
                ));
            }
        }
        Ok(())
    }

    /// The new format's buffer (checked by [`FormatRewriteRule::validate`]).
    pub fn format_buffer(&self) -> Option<sparsetir_ir::BufferId> {
        self.new_format.buffer_decls.first().copied()
    }
}

fn get_attr<'a>(attrs: &'a Attrs, keys: &[&'static str]) -> Option<(&'static str, &'a AttrValue)> {
    keys.iter().find_map(|k| attrs.get(k).map(|v| (*k, v)))
}

/// Axis names of the format function's first declared buffer.
fn format_buffer_axes(f: &PrimFunc) -> Option<Vec<String>> {
    let b = f.buffer_decls.first()?;
    Some(
        f.buffers[*b]
            .axes()
            .iter()
            .map(|a| f.axes[*a].name.clone())
            .collect(),
    )
}

/// `e` with every variable `v` for which `sub(v)` is `Some` replaced.
pub(crate) fn subst_vars(e: &Expr, sub: &mut dyn FnMut(VarId) -> Option<Expr>) -> Expr {
    map_expr(e, &mut |x| match x {
        Expr::Var(v) => sub(*v),
        _ => None,
    })
}

/// Rebuilds `e` bottom-up where `f` declines (`None`) and takes `f`'s replacement (not revisited)
/// where it accepts.
pub(crate) fn map_expr(e: &Expr, f: &mut dyn FnMut(&Expr) -> Option<Expr>) -> Expr {
    if let Some(r) = f(e) {
        return r;
    }
    let mut go = |x: &Expr| Box::new(map_expr(x, f));
    match e {
        Expr::Int(..) | Expr::Float(..) | Expr::Bool(_) | Expr::Var(_) => e.clone(),
        Expr::Binary(op, a, b) => {
            let a = go(a);
            Expr::Binary(*op, a, go(b))
        }
        Expr::Unary(op, a) => Expr::Unary(*op, go(a)),
        Expr::Select(c, a, b) => {
            let c = go(c);
            let a = go(a);
            Expr::Select(c, a, go(b))
        }
        Expr::Cast(d, a) => Expr::Cast(*d, go(a)),
        Expr::Load { buffer, indices } => Expr::Load {
            buffer: *buffer,
            indices: indices.iter().map(|i| *go(i)).collect(),
        },
        Expr::Call { op, args, dtype } => Expr::Call {
            op: *op,
            args: args.iter().map(|i| *go(i)).collect(),
            dtype: *dtype,
        },
        Expr::Let { var, value, body } => {
            let value = go(value);
            Expr::Let {
                var: *var,
                value,
                body: go(body),
            }
        }
    }
}

/// The rule scripts shipped with the kernel catalog (`crates/ops/rules/`).
pub mod scripts {
    /// CSR → BSR with a `block_size` rule parameter (RFC "csr2bsr").
    pub const BSR: &str = include_str!("../../ops/rules/bsr.rule.sp");
    /// CSR → one ELL bucket of a column-partitioned hyb format (SparseTIR's hyb SpMM), with rule
    /// parameter `nnz_cols` (the bucket width).
    pub const HYB: &str = include_str!("../../ops/rules/hyb.rule.sp");
    /// CSR → ELL of every row with a `width` rule parameter (padding columns absent from
    /// their rows, so every row strictly increases).
    pub const ELL: &str = include_str!("../../ops/rules/ell.rule.sp");
    /// CSR → doubly compressed rows (a listed subset of the rows, each a CSR row): the
    /// remainder of ELL+CSR.
    pub const DCSR: &str = include_str!("../../ops/rules/dcsr.rule.sp");
}

/// The RFC's CSR → BSR rule with `block_size = b`, named `"<b>"`.
pub fn bsr_rule(block_size: i64) -> Result<FormatRewriteRule, RuleError> {
    FormatRewriteRule::from_script_with(scripts::BSR, &[("block_size", block_size)])
}

/// The CSR → ELL rule of every row with `width` slots, named `"ell<width>"`.
pub fn ell_rule(width: i64) -> Result<FormatRewriteRule, RuleError> {
    FormatRewriteRule::from_script_with(scripts::ELL, &[("width", width)])
}

/// The CSR → DCSR rule (a subset of the rows, each stored as a CSR row), named `"dcsr"`.
pub fn dcsr_rule() -> Result<FormatRewriteRule, RuleError> {
    FormatRewriteRule::from_script(scripts::DCSR)
}

/// ELL+CSR (SPEC §5.3): [`ell_rule`] of width `width` for every row's first `width` entries
/// and, when `rest` is set, [`dcsr_rule`] for the entries of the longer rows past the width
/// (the two clones then accumulate into an output zeroed once, before them).
pub fn ell_csr_rules(width: i64, rest: bool) -> Result<Vec<FormatRewriteRule>, RuleError> {
    let mut out = vec![ell_rule(width)?];
    if rest {
        out.push(dcsr_rule()?);
    }
    Ok(out)
}

/// The hyb rule family (SPEC §5.3, SparseTIR's hyb SpMM): one rule per (column part, bucket),
/// named `"<part>_<bucket>"`, each an ELL block of width `buckets[bucket]` over the subset of
/// rows listed by its `indices_i` array (`row_indices` of `sparsetir_formats::builders::hyb`),
/// with `indices_j` its `col_indices` (part-major order, as `Hyb::blocks`).
pub fn hyb_rules(
    num_col_parts: usize,
    buckets: &[usize],
) -> Result<Vec<FormatRewriteRule>, RuleError> {
    let mut out = Vec::new();
    for p in 0..num_col_parts {
        for (k, &w) in buckets.iter().enumerate() {
            let w = i64::try_from(w)
                .map_err(|_| RuleError::invalid(Span::default(), "bucket width too large"))?;
            let r = FormatRewriteRule::from_script_with(scripts::HYB, &[("nnz_cols", w)])?;
            out.push(r.with_name(format!("{p}_{k}")));
        }
    }
    Ok(out)
}
