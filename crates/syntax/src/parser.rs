//! Parser: tokens → syntax tree (`ast`), recursive descent over the Python subset used by
//! scripts, with a nesting-depth guard so hostile input cannot overflow the stack.

use crate::ast::*;
use crate::lexer::{Tok, Token};
use crate::Diagnostic;
use sparsetir_ir::Span;

/// Maximum nesting of expressions (parentheses, operator chains) and blocks.
pub const MAX_DEPTH: usize = 200;

const KEYWORDS: [&str; 20] = [
    "def", "with", "as", "for", "in", "if", "elif", "else", "pass", "and", "or", "not", "True",
    "False", "None", "import", "from", "return", "lambda", "while",
];

/// True for Python keywords the script language reserves.
pub fn is_keyword(s: &str) -> bool {
    KEYWORDS.contains(&s)
}

/// Parses a token stream into function definitions (import lines are skipped).
pub fn parse_tokens(tokens: Vec<Token>) -> Result<Vec<FuncDef>, Diagnostic> {
    let mut p = Parser {
        toks: tokens,
        pos: 0,
        depth: 0,
    };
    p.module()
}

struct Parser {
    toks: Vec<Token>,
    pos: usize,
    depth: usize,
}

fn err(span: Span, message: impl Into<String>) -> Diagnostic {
    Diagnostic {
        span,
        message: message.into(),
        notes: Vec::new(),
    }
}

type PResult<T> = Result<T, Diagnostic>;

impl Parser {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos.min(self.toks.len() - 1)].tok
    }
    fn peek_at(&self, k: usize) -> &Tok {
        &self.toks[(self.pos + k).min(self.toks.len() - 1)].tok
    }
    fn span(&self) -> Span {
        self.toks[self.pos.min(self.toks.len() - 1)].span
    }
    fn prev_span(&self) -> Span {
        if self.pos == 0 {
            self.span()
        } else {
            self.toks[(self.pos - 1).min(self.toks.len() - 1)].span
        }
    }
    fn bump(&mut self) -> Token {
        let t = self.toks[self.pos.min(self.toks.len() - 1)].clone();
        if self.pos < self.toks.len() - 1 {
            self.pos += 1;
        }
        t
    }
    fn is_op(&self, op: &str) -> bool {
        matches!(self.peek(), Tok::Op(o) if *o == op)
    }
    fn is_kw(&self, kw: &str) -> bool {
        matches!(self.peek(), Tok::Name(n) if n == kw)
    }
    fn eat_op(&mut self, op: &str) -> bool {
        if self.is_op(op) {
            self.bump();
            true
        } else {
            false
        }
    }
    fn eat_kw(&mut self, kw: &str) -> bool {
        if self.is_kw(kw) {
            self.bump();
            true
        } else {
            false
        }
    }
    fn unexpected(&self, expected: &str) -> Diagnostic {
        let found = self.peek().describe();
        let mut d = err(self.span(), format!("expected {expected}, found {found}"));
        if matches!(self.peek(), Tok::Indent) {
            d.message = format!("unexpected indent (expected {expected})");
        }
        d
    }
    fn expect_op(&mut self, op: &str) -> PResult<Span> {
        if self.is_op(op) {
            Ok(self.bump().span)
        } else {
            Err(self.unexpected(&format!("`{op}`")))
        }
    }
    fn expect_name(&mut self, what: &str) -> PResult<(String, Span)> {
        match self.peek().clone() {
            Tok::Name(n) if !is_keyword(&n) => {
                let s = self.bump().span;
                Ok((n, s))
            }
            _ => Err(self.unexpected(what)),
        }
    }
    fn expect_newline(&mut self) -> PResult<()> {
        match self.peek() {
            Tok::Newline => {
                self.bump();
                Ok(())
            }
            Tok::Eof | Tok::Dedent => Ok(()),
            _ => Err(self.unexpected("end of line")),
        }
    }
    fn enter(&mut self, span: Span) -> PResult<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(err(
                span,
                format!("nesting too deep (more than {MAX_DEPTH} levels)"),
            ));
        }
        Ok(())
    }
    fn leave(&mut self) {
        self.depth -= 1;
    }

    fn module(&mut self) -> PResult<Vec<FuncDef>> {
        let mut funcs = Vec::new();
        loop {
            match self.peek().clone() {
                Tok::Eof => break,
                Tok::Newline => {
                    self.bump();
                }
                Tok::Name(n) if n == "import" || n == "from" => {
                    while !matches!(self.peek(), Tok::Newline | Tok::Eof) {
                        self.bump();
                    }
                }
                Tok::Op("@") | Tok::Name(_) => funcs.push(self.funcdef()?),
                Tok::Indent => return Err(err(self.span(), "unexpected indent")),
                _ => return Err(self.unexpected("`@T.prim_func`")),
            }
        }
        Ok(funcs)
    }

    fn funcdef(&mut self) -> PResult<FuncDef> {
        let start = self.span();
        let mut decorators = Vec::new();
        while self.eat_op("@") {
            decorators.push(self.expr()?);
            self.expect_newline()?;
            while matches!(self.peek(), Tok::Newline) {
                self.bump();
            }
        }
        if decorators.is_empty() && !self.is_kw("def") {
            return Err(self.unexpected("`@T.prim_func`"));
        }
        if !self.eat_kw("def") {
            return Err(self.unexpected("`def`"));
        }
        let (name, name_span) = self.expect_name("a function name")?;
        self.expect_op("(")?;
        let mut params = Vec::new();
        while !self.is_op(")") {
            let (pname, pspan) = self.expect_name("a parameter name")?;
            let ann = if self.eat_op(":") {
                Some(self.expr()?)
            } else {
                None
            };
            params.push(Param {
                name: pname,
                span: pspan,
                ann,
            });
            if !self.eat_op(",") {
                break;
            }
        }
        self.expect_op(")")?;
        if self.eat_op("->") {
            self.expr()?;
        }
        self.expect_op(":")?;
        let body = self.block()?;
        let span = start.join(self.prev_span());
        Ok(FuncDef {
            decorators,
            name,
            name_span,
            params,
            body,
            span,
        })
    }

    /// After a `:`: an indented block, or one simple statement on the same line.
    fn block(&mut self) -> PResult<Vec<Stmt>> {
        if !matches!(self.peek(), Tok::Newline) {
            if matches!(self.peek(), Tok::Eof) {
                return Err(self.unexpected("an indented block"));
            }
            let s = self.simple_stmt()?;
            return Ok(vec![s]);
        }
        self.bump();
        if !matches!(self.peek(), Tok::Indent) {
            return Err(err(self.span(), "expected an indented block"));
        }
        let ind = self.bump().span;
        self.enter(ind)?;
        let mut stmts = Vec::new();
        loop {
            match self.peek() {
                Tok::Dedent => {
                    self.bump();
                    break;
                }
                Tok::Eof => break,
                Tok::Newline => {
                    self.bump();
                }
                _ => stmts.push(self.stmt()?),
            }
        }
        self.leave();
        Ok(stmts)
    }

    fn stmt(&mut self) -> PResult<Stmt> {
        let start = self.span();
        match self.peek().clone() {
            Tok::Indent => Err(err(start, "unexpected indent")),
            Tok::Name(n) if n == "for" => {
                self.bump();
                let mut targets = Vec::new();
                loop {
                    let (name, span) = self.expect_name("a loop variable")?;
                    targets.push(Expr {
                        kind: ExprKind::Name(name),
                        span,
                    });
                    if !self.eat_op(",") {
                        break;
                    }
                }
                if !self.eat_kw("in") {
                    return Err(self.unexpected("`in`"));
                }
                let iter = self.expr()?;
                self.expect_op(":")?;
                let body = self.block()?;
                Ok(Stmt {
                    kind: StmtKind::For {
                        targets,
                        iter,
                        body,
                    },
                    span: start,
                })
            }
            Tok::Name(n) if n == "with" => {
                self.bump();
                let item = self.expr()?;
                let target = if self.eat_kw("as") {
                    Some(self.expr_list()?)
                } else {
                    None
                };
                self.expect_op(":")?;
                let span = start.join(self.prev_span());
                let body = self.block()?;
                Ok(Stmt {
                    kind: StmtKind::With { item, target, body },
                    span,
                })
            }
            Tok::Name(n) if n == "if" => {
                self.bump();
                self.if_rest(start)
            }
            Tok::Name(n) if n == "while" => {
                self.bump();
                let cond = self.expr()?;
                self.expect_op(":")?;
                let body = self.block()?;
                Ok(Stmt {
                    kind: StmtKind::While { cond, body },
                    span: start,
                })
            }
            Tok::Name(n) if n == "elif" || n == "else" => {
                Err(err(start, format!("`{n}` without a matching `if`")))
            }
            _ => self.simple_stmt(),
        }
    }

    fn if_rest(&mut self, start: Span) -> PResult<Stmt> {
        let cond = self.expr()?;
        self.expect_op(":")?;
        let then_body = self.block()?;
        let else_body = if self.is_kw("elif") {
            let s = self.bump().span;
            self.enter(s)?;
            let r = self.if_rest(s)?;
            self.leave();
            Some(vec![r])
        } else if self.eat_kw("else") {
            self.expect_op(":")?;
            Some(self.block()?)
        } else {
            None
        };
        Ok(Stmt {
            kind: StmtKind::If {
                cond,
                then_body,
                else_body,
            },
            span: start,
        })
    }

    fn simple_stmt(&mut self) -> PResult<Stmt> {
        let start = self.span();
        if self.eat_kw("pass") {
            self.expect_newline()?;
            return Ok(Stmt {
                kind: StmtKind::Pass,
                span: start,
            });
        }
        if let Tok::Name(n) = self.peek().clone() {
            if is_keyword(&n) && !matches!(n.as_str(), "not" | "True" | "False" | "None") {
                return Err(err(start, format!("unexpected keyword `{n}`")));
            }
        }
        let first = self.expr_list()?;
        let kind = if self.eat_op("=") {
            let value = self.expr_list()?;
            if self.is_op("=") {
                return Err(err(self.span(), "chained assignment is not supported"));
            }
            let targets = match first.kind {
                ExprKind::Tuple(v) | ExprKind::List(v) => v,
                _ => vec![first],
            };
            StmtKind::Assign { targets, value }
        } else if self.eat_op(":") {
            let ann = self.expr()?;
            self.expect_op("=")?;
            let value = self.expr()?;
            StmtKind::AnnAssign {
                target: first,
                ann,
                value,
            }
        } else if let Tok::Op(o @ ("+=" | "-=" | "*=" | "/=")) = self.peek().clone() {
            self.bump();
            let op = match o {
                "+=" => AugOp::Add,
                "-=" => AugOp::Sub,
                "*=" => AugOp::Mul,
                _ => AugOp::Div,
            };
            let value = self.expr()?;
            StmtKind::AugAssign {
                target: first,
                op,
                value,
            }
        } else {
            StmtKind::Expr(first)
        };
        let span = start.join(self.prev_span());
        self.expect_newline()?;
        Ok(Stmt { kind, span })
    }

    /// `a` or `a, b, c` (an unparenthesised tuple).
    fn expr_list(&mut self) -> PResult<Expr> {
        let first = self.expr()?;
        if !self.is_op(",") {
            return Ok(first);
        }
        let mut items = vec![first];
        while self.eat_op(",") {
            if matches!(self.peek(), Tok::Newline | Tok::Eof) || self.is_op("=") || self.is_op(":")
            {
                break;
            }
            items.push(self.expr()?);
        }
        let span = items[0].span.join(self.prev_span());
        Ok(Expr {
            kind: ExprKind::Tuple(items),
            span,
        })
    }

    pub fn expr(&mut self) -> PResult<Expr> {
        let s = self.span();
        self.enter(s)?;
        let r = self.or_expr();
        self.leave();
        r
    }

    fn chain<F>(&mut self, mut next: F, ops: &[(&str, AstBinOp)], kw: bool) -> PResult<Expr>
    where
        F: FnMut(&mut Self) -> PResult<Expr>,
    {
        let mut lhs = next(self)?;
        let mut added = 0;
        let result = loop {
            let found = ops
                .iter()
                .find(|(o, _)| if kw { self.is_kw(o) } else { self.is_op(o) });
            let Some(&(_, op)) = found else { break Ok(lhs) };
            let opspan = self.bump().span;
            added += 1;
            if let Err(e) = self.enter(opspan) {
                break Err(e);
            }
            match next(self) {
                Ok(rhs) => {
                    let span = lhs.span.join(rhs.span);
                    lhs = Expr {
                        kind: ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)),
                        span,
                    };
                }
                Err(e) => break Err(e),
            }
        };
        self.depth -= added;
        result
    }

    fn or_expr(&mut self) -> PResult<Expr> {
        self.chain(|p| p.and_expr(), &[("or", AstBinOp::Or)], true)
    }
    fn and_expr(&mut self) -> PResult<Expr> {
        self.chain(|p| p.not_expr(), &[("and", AstBinOp::And)], true)
    }
    fn not_expr(&mut self) -> PResult<Expr> {
        if self.is_kw("not") {
            let s = self.bump().span;
            self.enter(s)?;
            let inner = self.not_expr();
            self.leave();
            let inner = inner?;
            let span = s.join(inner.span);
            return Ok(Expr {
                kind: ExprKind::Not(Box::new(inner)),
                span,
            });
        }
        self.comparison()
    }
    fn comparison(&mut self) -> PResult<Expr> {
        const CMP: [(&str, AstBinOp); 6] = [
            ("==", AstBinOp::Eq),
            ("!=", AstBinOp::Ne),
            ("<=", AstBinOp::Le),
            (">=", AstBinOp::Ge),
            ("<", AstBinOp::Lt),
            (">", AstBinOp::Gt),
        ];
        let lhs = self.bit_or()?;
        let Some(&(_, op)) = CMP.iter().find(|(o, _)| self.is_op(o)) else {
            return Ok(lhs);
        };
        self.bump();
        let rhs = self.bit_or()?;
        if CMP.iter().any(|(o, _)| self.is_op(o)) {
            return Err(err(self.span(), "chained comparisons are not supported"));
        }
        let span = lhs.span.join(rhs.span);
        Ok(Expr {
            kind: ExprKind::Binary(op, Box::new(lhs), Box::new(rhs)),
            span,
        })
    }
    // Python's order: `|` below `^` below `&` below shifts below `+`/`-`.
    fn bit_or(&mut self) -> PResult<Expr> {
        self.chain(|p| p.bit_xor(), &[("|", AstBinOp::BitOr)], false)
    }
    fn bit_xor(&mut self) -> PResult<Expr> {
        self.chain(|p| p.bit_and(), &[("^", AstBinOp::BitXor)], false)
    }
    fn bit_and(&mut self) -> PResult<Expr> {
        self.chain(|p| p.shift(), &[("&", AstBinOp::BitAnd)], false)
    }
    fn shift(&mut self) -> PResult<Expr> {
        self.chain(
            |p| p.arith(),
            &[("<<", AstBinOp::Shl), (">>", AstBinOp::Shr)],
            false,
        )
    }
    fn arith(&mut self) -> PResult<Expr> {
        self.chain(
            |p| p.term(),
            &[("+", AstBinOp::Add), ("-", AstBinOp::Sub)],
            false,
        )
    }
    fn term(&mut self) -> PResult<Expr> {
        self.chain(
            |p| p.unary(),
            &[
                ("*", AstBinOp::Mul),
                ("//", AstBinOp::FloorDiv),
                ("/", AstBinOp::Div),
                ("%", AstBinOp::Mod),
            ],
            false,
        )
    }
    fn unary(&mut self) -> PResult<Expr> {
        if self.is_op("-") || self.is_op("+") {
            let neg = self.is_op("-");
            let s = self.bump().span;
            // Fold `-5` / `-0.5` into a literal.
            match self.peek().clone() {
                Tok::Int(v) if neg => {
                    let t = self.bump().span;
                    let span = s.join(t);
                    let val = if v == 1u64 << 63 {
                        i64::MIN
                    } else {
                        let v =
                            i64::try_from(v).map_err(|_| err(t, "integer literal is too large"))?;
                        -v
                    };
                    return self.postfix(Expr {
                        kind: ExprKind::Int(val),
                        span,
                    });
                }
                Tok::Float(v) if neg => {
                    let t = self.bump().span;
                    return self.postfix(Expr {
                        kind: ExprKind::Float(-v),
                        span: s.join(t),
                    });
                }
                _ => {}
            }
            self.enter(s)?;
            let inner = self.unary();
            self.leave();
            let inner = inner?;
            if !neg {
                return Ok(inner);
            }
            let span = s.join(inner.span);
            return Ok(Expr {
                kind: ExprKind::Neg(Box::new(inner)),
                span,
            });
        }
        if self.is_op("**") {
            return Err(err(
                self.span(),
                "`**` is not supported (use `T.pow(a, b)`)",
            ));
        }
        let a = self.atom()?;
        let e = self.postfix(a)?;
        if self.is_op("**") {
            return Err(err(
                self.span(),
                "`**` is not supported (use `T.pow(a, b)`)",
            ));
        }
        Ok(e)
    }

    fn postfix(&mut self, mut e: Expr) -> PResult<Expr> {
        loop {
            if self.eat_op(".") {
                let (name, s) = match self.peek().clone() {
                    Tok::Name(n) => (n, self.bump().span),
                    _ => return Err(self.unexpected("an attribute name")),
                };
                let span = e.span.join(s);
                e = Expr {
                    kind: ExprKind::Attr(Box::new(e), name),
                    span,
                };
            } else if self.is_op("(") {
                let open = self.bump().span;
                self.enter(open)?;
                let r = self.call_args();
                self.leave();
                let (args, kwargs) = r?;
                let span = e.span.join(self.prev_span());
                e = Expr {
                    kind: ExprKind::Call {
                        func: Box::new(e),
                        args,
                        kwargs,
                    },
                    span,
                };
            } else if self.is_op("[") {
                let open = self.bump().span;
                self.enter(open)?;
                let r = self.subscripts();
                self.leave();
                let items = r?;
                let span = e.span.join(self.prev_span());
                e = Expr {
                    kind: ExprKind::Subscript(Box::new(e), items),
                    span,
                };
            } else {
                return Ok(e);
            }
        }
    }

    fn call_args(&mut self) -> PResult<(Vec<Expr>, Vec<Kwarg>)> {
        let mut args = Vec::new();
        let mut kwargs: Vec<Kwarg> = Vec::new();
        while !self.is_op(")") {
            if let (Tok::Name(n), Tok::Op("=")) = (self.peek().clone(), self.peek_at(1).clone()) {
                let name_span = self.bump().span;
                self.bump();
                if kwargs.iter().any(|k| k.name == n) {
                    return Err(err(name_span, format!("keyword argument `{n}` repeated")));
                }
                let value = self.expr()?;
                kwargs.push(Kwarg {
                    name: n,
                    name_span,
                    value,
                });
            } else {
                let e = self.expr()?;
                if !kwargs.is_empty() {
                    return Err(err(e.span, "positional argument follows keyword argument"));
                }
                args.push(e);
            }
            if !self.eat_op(",") {
                break;
            }
        }
        self.expect_op(")")?;
        Ok((args, kwargs))
    }

    fn subscripts(&mut self) -> PResult<Vec<Expr>> {
        let mut items = Vec::new();
        while !self.is_op("]") {
            let start = self.span();
            let lo = if self.is_op(":") {
                None
            } else {
                Some(self.expr()?)
            };
            let item = if self.eat_op(":") {
                let hi = if self.is_op(",") || self.is_op("]") {
                    None
                } else {
                    Some(self.expr()?)
                };
                let span = start.join(self.prev_span());
                Expr {
                    kind: ExprKind::Slice(lo.map(Box::new), hi.map(Box::new)),
                    span,
                }
            } else {
                match lo {
                    Some(e) => e,
                    None => return Err(self.unexpected("an index")),
                }
            };
            items.push(item);
            if !self.eat_op(",") {
                break;
            }
        }
        if items.is_empty() {
            return Err(self.unexpected("an index"));
        }
        self.expect_op("]")?;
        Ok(items)
    }

    fn atom(&mut self) -> PResult<Expr> {
        let start = self.span();
        let tok = self.peek().clone();
        let simple = |kind| Expr { kind, span: start };
        match tok {
            Tok::Name(n) => {
                let kind = match n.as_str() {
                    "True" => ExprKind::Bool(true),
                    "False" => ExprKind::Bool(false),
                    "None" => ExprKind::None,
                    _ if is_keyword(&n) => return Err(self.unexpected("an expression")),
                    _ => ExprKind::Name(n),
                };
                self.bump();
                Ok(simple(kind))
            }
            Tok::Int(v) => {
                self.bump();
                let v = i64::try_from(v).map_err(|_| err(start, "integer literal is too large"))?;
                Ok(simple(ExprKind::Int(v)))
            }
            Tok::Float(v) => {
                self.bump();
                Ok(simple(ExprKind::Float(v)))
            }
            Tok::Str(s) => {
                self.bump();
                let mut s = s;
                let mut span = start;
                while let Tok::Str(more) = self.peek().clone() {
                    span = span.join(self.bump().span);
                    s.push_str(&more);
                }
                Ok(Expr {
                    kind: ExprKind::Str(s),
                    span,
                })
            }
            Tok::Op("(") => {
                self.bump();
                if self.eat_op(")") {
                    return Ok(Expr {
                        kind: ExprKind::Tuple(vec![]),
                        span: start.join(self.prev_span()),
                    });
                }
                let first = self.expr()?;
                if self.eat_op(")") {
                    return Ok(Expr {
                        kind: first.kind,
                        span: start.join(self.prev_span()),
                    });
                }
                let mut items = vec![first];
                while self.eat_op(",") {
                    if self.is_op(")") {
                        break;
                    }
                    items.push(self.expr()?);
                }
                self.expect_op(")")?;
                Ok(Expr {
                    kind: ExprKind::Tuple(items),
                    span: start.join(self.prev_span()),
                })
            }
            Tok::Op("[") => {
                self.bump();
                let mut items = Vec::new();
                while !self.is_op("]") {
                    items.push(self.expr()?);
                    if !self.eat_op(",") {
                        break;
                    }
                }
                self.expect_op("]")?;
                Ok(Expr {
                    kind: ExprKind::List(items),
                    span: start.join(self.prev_span()),
                })
            }
            Tok::Op("{") => {
                self.bump();
                let mut items = Vec::new();
                while !self.is_op("}") {
                    let k = self.expr()?;
                    self.expect_op(":")?;
                    let v = self.expr()?;
                    items.push((k, v));
                    if !self.eat_op(",") {
                        break;
                    }
                }
                self.expect_op("}")?;
                Ok(Expr {
                    kind: ExprKind::Dict(items),
                    span: start.join(self.prev_span()),
                })
            }
            _ => Err(self.unexpected("an expression")),
        }
    }
}
