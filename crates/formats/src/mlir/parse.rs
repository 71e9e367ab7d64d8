//! Lexer and recursive-descent parser for MLIR `sparse_tensor` encoding attributes (SPEC §7),
//! with validation; every error carries the byte span of the offending token.

use std::ops::Range;

use super::{
    AffineExpr, DimSlice, DimSpec, Encoding, EncodingError, LevelFormat, LevelProps, LevelSpec,
};

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    /// `#name` (dots allowed: `#sparse_tensor.encoding`).
    Hash(String),
    Ident(String),
    Int(i64),
    Float(f64),
    Punct(&'static str),
    Eof,
}

impl Tok {
    fn describe(&self) -> String {
        match self {
            Tok::Hash(s) => format!("`#{s}`"),
            Tok::Ident(s) => format!("`{s}`"),
            Tok::Int(v) => format!("`{v}`"),
            Tok::Float(v) => format!("`{v}`"),
            Tok::Punct(p) => format!("`{p}`"),
            Tok::Eof => "the end of the text".into(),
        }
    }
}

const PUNCTS: [&str; 15] = [
    "->", "<", ">", "{", "}", "(", ")", "[", "]", ",", ":", "=", "+", "-", "*",
];

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '$' || c == '.'
}

fn lex(text: &str) -> Result<Vec<(Tok, Range<usize>)>, EncodingError> {
    let bytes = text.as_bytes();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if text[i..].starts_with("//") {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
            continue;
        }
        let start = i;
        if c == b'#' {
            i += 1;
            while i < bytes.len() && is_ident_char(bytes[i] as char) {
                i += 1;
            }
            if i == start + 1 {
                return Err(EncodingError::at(
                    text,
                    start..i,
                    "expected a name after `#`",
                ));
            }
            toks.push((Tok::Hash(text[start + 1..i].to_string()), start..i));
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            while i < bytes.len() && is_ident_char(bytes[i] as char) {
                i += 1;
            }
            toks.push((Tok::Ident(text[start..i].to_string()), start..i));
            continue;
        }
        if c.is_ascii_digit() {
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            let mut float = false;
            if i + 1 < bytes.len() && bytes[i] == b'.' && bytes[i + 1].is_ascii_digit() {
                float = true;
                i += 1;
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
            }
            if i < bytes.len() && (bytes[i] == b'e' || bytes[i] == b'E') {
                let mut j = i + 1;
                if j < bytes.len() && (bytes[j] == b'+' || bytes[j] == b'-') {
                    j += 1;
                }
                if j < bytes.len() && bytes[j].is_ascii_digit() {
                    float = true;
                    i = j;
                    while i < bytes.len() && bytes[i].is_ascii_digit() {
                        i += 1;
                    }
                }
            }
            let s = &text[start..i];
            let tok = if float {
                match s.parse::<f64>() {
                    Ok(v) => Tok::Float(v),
                    Err(_) => {
                        return Err(EncodingError::at(text, start..i, "malformed number"));
                    }
                }
            } else {
                match s.parse::<i64>() {
                    Ok(v) => Tok::Int(v),
                    Err(_) => {
                        return Err(EncodingError::at(
                            text,
                            start..i,
                            format!("integer `{s}` is too large"),
                        ));
                    }
                }
            };
            toks.push((tok, start..i));
            continue;
        }
        if let Some(p) = PUNCTS.iter().find(|p| text[i..].starts_with(**p)) {
            i += p.len();
            toks.push((Tok::Punct(p), start..i));
            continue;
        }
        if c == b'?' {
            i += 1;
            toks.push((Tok::Punct("?"), start..i));
            continue;
        }
        let ch = text[i..].chars().next().unwrap_or('?');
        return Err(EncodingError::at(
            text,
            start..start + ch.len_utf8(),
            format!("unexpected character `{ch}`"),
        ));
    }
    toks.push((Tok::Eof, text.len()..text.len()));
    Ok(toks)
}

/// Which names an expression may use.
struct Scope<'a> {
    vars: &'a [String],
    /// What the variables are called in messages ("dimension", "level").
    what: &'a str,
    syms: &'a [String],
}

struct Parser<'t> {
    text: &'t str,
    toks: Vec<(Tok, Range<usize>)>,
    pos: usize,
}

type PResult<T> = Result<T, EncodingError>;

impl<'t> Parser<'t> {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos.min(self.toks.len() - 1)].0
    }
    fn peek_at(&self, k: usize) -> &Tok {
        &self.toks[(self.pos + k).min(self.toks.len() - 1)].0
    }
    fn span(&self) -> Range<usize> {
        self.toks[self.pos.min(self.toks.len() - 1)].1.clone()
    }
    fn bump(&mut self) -> (Tok, Range<usize>) {
        let t = self.toks[self.pos.min(self.toks.len() - 1)].clone();
        if self.pos < self.toks.len() - 1 {
            self.pos += 1;
        }
        t
    }
    fn err<T>(&self, span: Range<usize>, msg: impl Into<String>) -> PResult<T> {
        Err(EncodingError::at(self.text, span, msg))
    }
    fn expected<T>(&self, what: &str) -> PResult<T> {
        self.err(
            self.span(),
            format!("expected {what}, found {}", self.peek().describe()),
        )
    }
    fn is_punct(&self, p: &str) -> bool {
        matches!(self.peek(), Tok::Punct(q) if *q == p)
    }
    fn eat(&mut self, p: &str) -> bool {
        if self.is_punct(p) {
            self.bump();
            true
        } else {
            false
        }
    }
    fn expect(&mut self, p: &str) -> PResult<Range<usize>> {
        if self.is_punct(p) {
            Ok(self.bump().1)
        } else {
            self.expected(&format!("`{p}`"))
        }
    }
    fn ident(&mut self, what: &str) -> PResult<(String, Range<usize>)> {
        match self.peek().clone() {
            Tok::Ident(s) => {
                let sp = self.bump().1;
                Ok((s, sp))
            }
            _ => self.expected(what),
        }
    }
    fn int(&mut self, what: &str) -> PResult<(i64, Range<usize>)> {
        match self.peek().clone() {
            Tok::Int(v) => {
                let sp = self.bump().1;
                Ok((v, sp))
            }
            _ => self.expected(what),
        }
    }

    fn top(&mut self) -> PResult<Encoding> {
        let mut alias = None;
        if let (Tok::Hash(name), Tok::Punct("=")) = (self.peek().clone(), self.peek_at(1).clone()) {
            alias = Some(name);
            self.bump();
            self.bump();
        }
        let enc = match self.peek().clone() {
            Tok::Hash(h) if h == "sparse_tensor.encoding" => {
                self.bump();
                self.expect("<")?;
                let e = self.body(alias)?;
                self.expect(">")?;
                e
            }
            Tok::Hash(h) => {
                return self.err(
                    self.span(),
                    format!("expected `#sparse_tensor.encoding`, found `#{h}`"),
                )
            }
            Tok::Punct("{") | Tok::Ident(_) => self.body(alias)?,
            _ => return self.expected("`#sparse_tensor.encoding<{...}>` or `{ map = ... }`"),
        };
        if *self.peek() != Tok::Eof {
            return self.expected("the end of the encoding");
        }
        Ok(enc)
    }

    fn body(&mut self, alias: Option<String>) -> PResult<Encoding> {
        let braced = self.eat("{");
        let mut enc = Encoding {
            alias,
            dims: Vec::new(),
            symbols: Vec::new(),
            levels: Vec::new(),
            dim_exprs: None,
            pos_width: 0,
            crd_width: 0,
            explicit_val: None,
            implicit_val: None,
        };
        let mut seen: Vec<String> = Vec::new();
        loop {
            if braced && self.is_punct("}") {
                break;
            }
            let (field, fspan) =
                self.ident("a field name (map, posWidth, crdWidth, explicitVal, implicitVal)")?;
            if seen.contains(&field) {
                return self.err(fspan, format!("duplicate field `{field}`"));
            }
            self.expect("=")?;
            match field.as_str() {
                "map" => self.map(&mut enc)?,
                "posWidth" => enc.pos_width = self.width("posWidth")?,
                "crdWidth" => enc.crd_width = self.width("crdWidth")?,
                "explicitVal" => enc.explicit_val = Some(self.value()?),
                "implicitVal" => enc.implicit_val = Some(self.value()?),
                _ => {
                    return self.err(
                        fspan,
                        format!(
                            "unknown field `{field}`, expected map, posWidth, crdWidth, \
                             explicitVal or implicitVal"
                        ),
                    )
                }
            }
            seen.push(field);
            if !self.eat(",") {
                break;
            }
        }
        let end = self.span();
        if braced {
            self.expect("}")?;
        }
        if !seen.iter().any(|f| f == "map") {
            return self.err(end, "missing the `map` field");
        }
        Ok(enc)
    }

    fn width(&mut self, field: &str) -> PResult<u8> {
        let (v, sp) = self.int(&format!("an integer bit width for {field}"))?;
        match v {
            0 | 8 | 16 | 32 | 64 => Ok(v as u8),
            _ => self.err(sp, format!("{field} must be 0, 8, 16, 32 or 64, found {v}")),
        }
    }

    fn value(&mut self) -> PResult<f64> {
        let neg = self.eat("-");
        let v = match self.peek().clone() {
            Tok::Int(v) => v as f64,
            Tok::Float(v) => v,
            Tok::Ident(s) if s.eq_ignore_ascii_case("inf") => f64::INFINITY,
            Tok::Ident(s) if s.eq_ignore_ascii_case("nan") => f64::NAN,
            _ => return self.expected("a number"),
        };
        self.bump();
        // An MLIR typed attribute `1.0 : f32`: the type is accepted and not kept.
        if self.eat(":") {
            self.ident("a type after `:`")?;
        }
        Ok(if neg { -v } else { v })
    }

    fn name_list(&mut self, close: &str, what: &str) -> PResult<Vec<String>> {
        let mut names: Vec<String> = Vec::new();
        if self.eat(close) {
            return Ok(names);
        }
        loop {
            let (n, sp) = self.ident(what)?;
            if names.contains(&n) {
                return self.err(sp, format!("`{n}` is declared twice"));
            }
            names.push(n);
            if self.eat(close) {
                return Ok(names);
            }
            if !self.eat(",") {
                return self.expected(&format!("`,` or `{close}`"));
            }
        }
    }

    fn map(&mut self, enc: &mut Encoding) -> PResult<()> {
        if self.eat("[") {
            enc.symbols = self.name_list("]", "a symbol name")?;
        }
        let mut lvl_vars: Option<Vec<String>> = None;
        if self.eat("{") {
            lvl_vars = Some(self.name_list("}", "a level variable name")?);
        }
        for s in &enc.symbols {
            if lvl_vars.as_ref().is_some_and(|l| l.contains(s)) {
                return self.err(self.span(), format!("`{s}` is both a symbol and a level"));
            }
        }
        // Dimensions.
        self.expect("(")?;
        let mut dim_exprs: Vec<AffineExpr> = Vec::new();
        if !self.eat(")") {
            loop {
                let (name, sp) = self.ident("a dimension name")?;
                if enc.dims.iter().any(|d| d.name == name)
                    || enc.symbols.contains(&name)
                    || lvl_vars.as_ref().is_some_and(|l| l.contains(&name))
                {
                    return self.err(sp, format!("`{name}` is declared twice"));
                }
                if self.eat("=") {
                    if lvl_vars.is_none() {
                        return self.err(
                            sp,
                            format!(
                                "dimension `{name}` has an inverse expression but the map \
                                 declares no level variables `{{...}}`"
                            ),
                        );
                    }
                    let lv = lvl_vars.clone().unwrap_or_default();
                    let scope = Scope {
                        vars: &lv,
                        what: "level",
                        syms: &enc.symbols,
                    };
                    dim_exprs.push(self.expr(&scope)?);
                } else if lvl_vars.is_some() {
                    return self.expected(&format!(
                        "`=` and the inverse expression of dimension `{name}`"
                    ));
                }
                let slice = if self.eat(":") {
                    Some(self.slice()?)
                } else {
                    None
                };
                enc.dims.push(DimSpec { name, slice });
                if self.eat(")") {
                    break;
                }
                if !self.eat(",") {
                    return self.expected("`,` or `)` after a dimension");
                }
            }
        }
        if lvl_vars.is_some() {
            enc.dim_exprs = Some(dim_exprs);
        }
        let arrow = self.span();
        self.expect("->")?;
        // Levels.
        self.expect("(")?;
        let dims = enc.dim_names();
        let mut level_spans = Vec::new();
        if !self.eat(")") {
            loop {
                let lspan = self.span();
                let mut name = None;
                if let (Tok::Ident(n), Tok::Punct("=")) =
                    (self.peek().clone(), self.peek_at(1).clone())
                {
                    let nsp = self.span();
                    let Some(lv) = &lvl_vars else {
                        return self.err(
                            nsp,
                            format!(
                                "level name `{n}` needs a `{{...}}` declaration of the level \
                                 variables before the dimensions"
                            ),
                        );
                    };
                    let idx = enc.levels.len();
                    if lv.get(idx) != Some(&n) {
                        let want = lv
                            .get(idx)
                            .map(|w| format!("`{w}`"))
                            .unwrap_or_else(|| "no more levels".into());
                        return self.err(
                            nsp,
                            format!("level {idx} is named `{n}` but the declaration says {want}"),
                        );
                    }
                    name = Some(n);
                    self.bump();
                    self.bump();
                } else if let Some(lv) = &lvl_vars {
                    name = lv.get(enc.levels.len()).cloned();
                }
                let scope = Scope {
                    vars: &dims,
                    what: "dimension",
                    syms: &enc.symbols,
                };
                let expr = self.expr(&scope)?;
                self.expect(":")?;
                let (format, props) = self.level_type()?;
                enc.levels.push(LevelSpec {
                    name,
                    expr,
                    format,
                    props,
                });
                level_spans.push(lspan.start..self.toks[self.pos.saturating_sub(1)].1.end);
                if self.eat(")") {
                    break;
                }
                if !self.eat(",") {
                    return self.expected("`,` or `)` after a level");
                }
            }
        }
        if let Some(lv) = &lvl_vars {
            if lv.len() != enc.levels.len() {
                return self.err(
                    arrow,
                    format!(
                        "the map declares {} level variables but has {} levels",
                        lv.len(),
                        enc.levels.len()
                    ),
                );
            }
        }
        self.validate(enc, &level_spans, arrow)
    }

    fn validate(
        &self,
        enc: &Encoding,
        level_spans: &[Range<usize>],
        arrow: Range<usize>,
    ) -> PResult<()> {
        if enc.levels.is_empty() && !enc.dims.is_empty() {
            return self.err(arrow, "the map has dimensions but no levels");
        }
        for (d, dim) in enc.dims.iter().enumerate() {
            if !enc.levels.iter().any(|l| l.expr.uses_var(d)) {
                return self.err(
                    arrow,
                    format!("dimension `{}` is not used by any level", dim.name),
                );
            }
        }
        let n = enc.levels.len();
        for (l, lvl) in enc.levels.iter().enumerate() {
            let sp = level_spans.get(l).cloned().unwrap_or(arrow.clone());
            match lvl.format {
                LevelFormat::Singleton => {
                    let ok = l > 0
                        && matches!(
                            enc.levels[l - 1].format,
                            LevelFormat::Compressed
                                | LevelFormat::LooseCompressed
                                | LevelFormat::Singleton
                        )
                        && enc.levels[l - 1].props.nonunique;
                    if !ok {
                        return self.err(
                            sp,
                            format!(
                                "singleton level {l} must follow a nonunique compressed, \
                                 loose_compressed or singleton level"
                            ),
                        );
                    }
                }
                LevelFormat::Structured { .. } if l + 1 != n => {
                    return self.err(sp, "a structured[n, m] level must be the last level");
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn slice(&mut self) -> PResult<DimSlice> {
        match self.peek().clone() {
            Tok::Hash(h) if h == "sparse_tensor" => {
                self.bump();
            }
            _ => return self.expected("`#sparse_tensor<slice(offset, size, stride)>`"),
        }
        self.expect("<")?;
        let (kw, ksp) = self.ident("`slice`")?;
        if kw != "slice" {
            return self.err(ksp, format!("expected `slice`, found `{kw}`"));
        }
        self.expect("(")?;
        let offset = self.slice_part("offset", false)?;
        self.expect(",")?;
        let size = self.slice_part("size", true)?;
        self.expect(",")?;
        let stride = self.slice_part("stride", true)?;
        self.expect(")")?;
        self.expect(">")?;
        Ok(DimSlice {
            offset,
            size,
            stride,
        })
    }

    fn slice_part(&mut self, what: &str, positive: bool) -> PResult<Option<i64>> {
        if self.eat("?") {
            return Ok(None);
        }
        let sp = self.span();
        if self.is_punct("-") {
            return self.err(sp, format!("slice {what} must not be negative"));
        }
        let (v, sp) = self.int(&format!("the slice {what} (an integer or `?`)"))?;
        if positive && v <= 0 {
            return self.err(sp, format!("slice {what} must be positive, found {v}"));
        }
        Ok(Some(v))
    }

    fn level_type(&mut self) -> PResult<(LevelFormat, LevelProps)> {
        let (kw, ksp) = self.ident("a level format")?;
        let format = match kw.as_str() {
            "dense" => LevelFormat::Dense,
            "batch" => LevelFormat::Batch,
            "compressed" => LevelFormat::Compressed,
            "loose_compressed" => LevelFormat::LooseCompressed,
            "singleton" => LevelFormat::Singleton,
            "block2_4" => LevelFormat::Structured { n: 2, m: 4 },
            "structured" => {
                self.expect("[")?;
                let (n, nsp) = self.int("the n of structured[n, m]")?;
                self.expect(",")?;
                let (m, msp) = self.int("the m of structured[n, m]")?;
                self.expect("]")?;
                if !(1..=1024).contains(&m) {
                    return self.err(msp, format!("structured m must be in 1..=1024, found {m}"));
                }
                if n < 1 || n > m {
                    return self.err(
                        nsp,
                        format!("structured n must be in 1..={m} (at most m), found {n}"),
                    );
                }
                LevelFormat::Structured {
                    n: n as u32,
                    m: m as u32,
                }
            }
            _ => {
                return self.err(
                    ksp,
                    format!(
                        "unknown level format `{kw}`, expected dense, batch, compressed, \
                         loose_compressed, singleton, structured[n, m] or block2_4"
                    ),
                )
            }
        };
        let mut props = LevelProps::default();
        if self.is_punct("(") {
            let psp = self.span();
            self.bump();
            if matches!(
                format,
                LevelFormat::Dense | LevelFormat::Batch | LevelFormat::Structured { .. }
            ) {
                return self.err(psp, format!("a {} level takes no properties", kw));
            }
            loop {
                let (p, sp) = self.ident("a level property (nonunique, nonordered, soa)")?;
                let slot = match p.as_str() {
                    "nonunique" => &mut props.nonunique,
                    "nonordered" => &mut props.nonordered,
                    "soa" => {
                        if format != LevelFormat::Singleton {
                            return self.err(sp, "`soa` applies to singleton levels only");
                        }
                        &mut props.soa
                    }
                    _ => {
                        return self.err(
                            sp,
                            format!(
                                "unknown level property `{p}`, expected nonunique, nonordered \
                                 or soa"
                            ),
                        )
                    }
                };
                if *slot {
                    return self.err(sp, format!("duplicate level property `{p}`"));
                }
                *slot = true;
                if self.eat(")") {
                    break;
                }
                if !self.eat(",") {
                    return self.expected("`,` or `)` after a level property");
                }
            }
        }
        Ok((format, props))
    }

    // expr := term (('+' | '-') term)*
    fn expr(&mut self, sc: &Scope) -> PResult<AffineExpr> {
        let mut lhs = self.term(sc)?;
        loop {
            if self.eat("+") {
                let rhs = self.term(sc)?;
                lhs = AffineExpr::Add(Box::new(lhs), Box::new(rhs));
            } else if self.eat("-") {
                let rhs = self.term(sc)?;
                lhs = AffineExpr::Sub(Box::new(lhs), Box::new(rhs));
            } else {
                return Ok(lhs);
            }
        }
    }

    // term := unary (('*' unary) | ('floordiv' INT) | ('mod' INT))*
    fn term(&mut self, sc: &Scope) -> PResult<AffineExpr> {
        let mut lhs = self.unary(sc)?;
        loop {
            if self.is_punct("*") {
                let opsp = self.bump().1;
                let rhs = self.unary(sc)?;
                if lhs.has_var() && rhs.has_var() {
                    return self.err(
                        opsp,
                        format!(
                            "non-affine product: both sides of `*` use a {} variable",
                            sc.what
                        ),
                    );
                }
                lhs = AffineExpr::Mul(Box::new(lhs), Box::new(rhs));
                continue;
            }
            let op = match self.peek() {
                Tok::Ident(s) if s == "floordiv" || s == "mod" => s.clone(),
                Tok::Ident(s) if s == "ceildiv" => {
                    return self.err(self.span(), "`ceildiv` is not supported in level maps")
                }
                _ => return Ok(lhs),
            };
            self.bump();
            let sp = self.span();
            let k = match self.peek() {
                Tok::Int(k) if *k > 0 => *k,
                _ => {
                    return self.err(
                        sp,
                        format!(
                            "`{op}` needs a positive integer constant, found {}",
                            self.peek().describe()
                        ),
                    )
                }
            };
            self.bump();
            lhs = if op == "mod" {
                AffineExpr::Mod(Box::new(lhs), k)
            } else {
                AffineExpr::FloorDiv(Box::new(lhs), k)
            };
        }
    }

    fn unary(&mut self, sc: &Scope) -> PResult<AffineExpr> {
        if self.eat("-") {
            let e = self.unary(sc)?;
            return Ok(match e {
                AffineExpr::Const(c) => AffineExpr::Const(c.wrapping_neg()),
                e => AffineExpr::Mul(Box::new(AffineExpr::Const(-1)), Box::new(e)),
            });
        }
        match self.peek().clone() {
            Tok::Int(v) => {
                self.bump();
                Ok(AffineExpr::Const(v))
            }
            Tok::Ident(name) => {
                let sp = self.bump().1;
                if let Some(i) = sc.vars.iter().position(|v| *v == name) {
                    Ok(AffineExpr::Var(i))
                } else if let Some(i) = sc.syms.iter().position(|v| *v == name) {
                    Ok(AffineExpr::Sym(i))
                } else {
                    let mut known = sc.vars.to_vec();
                    known.extend(sc.syms.iter().cloned());
                    self.err(
                        sp,
                        format!(
                            "unknown name `{name}`; the {} variables and symbols are ({})",
                            sc.what,
                            known.join(", ")
                        ),
                    )
                }
            }
            Tok::Punct("(") => {
                self.bump();
                let e = self.expr(sc)?;
                self.expect(")")?;
                Ok(e)
            }
            _ => self.expected(&format!(
                "an affine expression (a {} name, symbol, integer or `(`)",
                sc.what
            )),
        }
    }
}

/// Parses and validates one encoding.
pub(super) fn parse(text: &str) -> Result<Encoding, EncodingError> {
    let toks = lex(text)?;
    let mut p = Parser { text, toks, pos: 0 };
    p.top()
}
