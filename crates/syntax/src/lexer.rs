//! Lexer: script text → tokens with spans, including Python-style `Newline`/`Indent`/`Dedent`
//! tokens, implicit line joining inside brackets and bracket-matching diagnostics.

use crate::Diagnostic;
use sparsetir_ir::Span;

/// A token kind.
#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    /// An identifier or keyword.
    Name(String),
    /// An integer literal (non-negative; unary minus is applied by the parser).
    Int(u64),
    Float(f64),
    Str(String),
    /// Punctuation and operators: `( ) [ ] { } , : . -> @ = + - * / // % ** == != < <= > >=
    /// += -= *= /=`.
    Op(&'static str),
    Newline,
    Indent,
    Dedent,
    Eof,
}

impl Tok {
    /// A short description for "expected ..., found ..." messages.
    pub fn describe(&self) -> String {
        match self {
            Tok::Name(n) => format!("`{n}`"),
            Tok::Int(v) => format!("integer `{v}`"),
            Tok::Float(v) => format!("number `{v}`"),
            Tok::Str(_) => "a string".to_string(),
            Tok::Op(o) => format!("`{o}`"),
            Tok::Newline => "end of line".to_string(),
            Tok::Indent => "an indented block".to_string(),
            Tok::Dedent => "the end of the block".to_string(),
            Tok::Eof => "end of file".to_string(),
        }
    }
}

/// A token with its source span.
#[derive(Clone, Debug, PartialEq)]
pub struct Token {
    pub tok: Tok,
    pub span: Span,
}

const OPS2: [&str; 13] = [
    "->", "//", "**", "==", "!=", "<=", ">=", "+=", "-=", "*=", "/=", "<<", ">>",
];
const OPS1: [&str; 22] = [
    "(", ")", "[", "]", "{", "}", ",", ":", ".", "@", "=", "+", "-", "*", "/", "%", "<", ">", ";",
    "&", "|", "^",
];

fn err(span: Span, message: impl Into<String>) -> Diagnostic {
    Diagnostic {
        span,
        message: message.into(),
        notes: Vec::new(),
    }
}

/// Splits `src` into tokens. The token stream always ends with `Newline`, the pending `Dedent`s
/// and `Eof`.
pub fn lex(src: &str) -> Result<Vec<Token>, Diagnostic> {
    Lexer {
        src,
        bytes: src.as_bytes(),
        pos: 0,
        out: Vec::new(),
        indents: vec![String::new()],
    }
    .run()
}

struct Lexer<'a> {
    src: &'a str,
    bytes: &'a [u8],
    pos: usize,
    out: Vec<Token>,
    indents: Vec<String>,
}

impl<'a> Lexer<'a> {
    fn push(&mut self, tok: Tok, start: usize, end: usize) {
        self.out.push(Token {
            tok,
            span: Span::new(start, end),
        });
    }

    fn run(mut self) -> Result<Vec<Token>, Diagnostic> {
        let mut brackets: Vec<(u8, Span)> = Vec::new();
        let mut at_line_start = true;
        while self.pos < self.bytes.len() {
            if at_line_start && brackets.is_empty() {
                if self.indentation()? {
                    continue;
                }
                at_line_start = false;
            }
            let c = self.bytes[self.pos];
            let start = self.pos;
            match c {
                b' ' | b'\t' | b'\x0c' => self.pos += 1,
                b'\r' => self.pos += 1,
                b'#' => {
                    while self.pos < self.bytes.len() && self.bytes[self.pos] != b'\n' {
                        self.pos += 1;
                    }
                }
                b'\n' => {
                    self.pos += 1;
                    if brackets.is_empty() {
                        self.push(Tok::Newline, start, start + 1);
                        at_line_start = true;
                    }
                }
                b'\\' => {
                    let rest = &self.bytes[self.pos + 1..];
                    let skip = if rest.starts_with(b"\r\n") {
                        3
                    } else if rest.starts_with(b"\n") {
                        2
                    } else {
                        return Err(err(
                            Span::new(start, start + 1),
                            "unexpected character `\\`",
                        ));
                    };
                    self.pos += skip;
                }
                b'"' | b'\'' => self.string()?,
                b'0'..=b'9' => self.number()?,
                b'.' if self
                    .bytes
                    .get(self.pos + 1)
                    .is_some_and(|b| b.is_ascii_digit()) =>
                {
                    self.number()?
                }
                b'a'..=b'z' | b'A'..=b'Z' | b'_' => {
                    while self.pos < self.bytes.len()
                        && (self.bytes[self.pos].is_ascii_alphanumeric()
                            || self.bytes[self.pos] == b'_')
                    {
                        self.pos += 1;
                    }
                    let name = self.src[start..self.pos].to_string();
                    self.push(Tok::Name(name), start, self.pos);
                }
                _ => {
                    let op = OPS2
                        .iter()
                        .chain(OPS1.iter())
                        .find(|o| self.bytes[self.pos..].starts_with(o.as_bytes()));
                    let Some(op) = op else {
                        let ch = self.src[self.pos..].chars().next().unwrap_or('?');
                        let end = self.pos + ch.len_utf8();
                        return Err(err(
                            Span::new(start, end),
                            format!("unexpected character `{}`", ch.escape_default()),
                        ));
                    };
                    self.pos += op.len();
                    let span = Span::new(start, self.pos);
                    match *op {
                        "(" | "[" | "{" => brackets.push((c, span)),
                        ")" | "]" | "}" => {
                            let open = match c {
                                b')' => b'(',
                                b']' => b'[',
                                _ => b'{',
                            };
                            match brackets.pop() {
                                None => {
                                    return Err(err(
                                        span,
                                        format!("unmatched closing bracket `{op}`"),
                                    ))
                                }
                                Some((o, ospan)) if o != open => {
                                    let (line, col) = sparsetir_ir::span::line_col(
                                        self.src,
                                        ospan.start as usize,
                                    );
                                    let mut d = err(
                                        span,
                                        format!(
                                            "mismatched closing bracket `{op}` for `{}` opened at \
                                             line {line}",
                                            o as char
                                        ),
                                    );
                                    d.notes.push(format!(
                                        "`{}` opened at line {line}, column {col}",
                                        o as char
                                    ));
                                    return Err(d);
                                }
                                Some(_) => {}
                            }
                        }
                        _ => {}
                    }
                    self.push(Tok::Op(op), start, self.pos);
                }
            }
        }
        if let Some((o, span)) = brackets.last() {
            return Err(err(*span, format!("unclosed bracket `{}`", *o as char)));
        }
        let end = self.bytes.len();
        if !matches!(
            self.out.last(),
            None | Some(Token {
                tok: Tok::Newline,
                ..
            })
        ) {
            self.push(Tok::Newline, end, end);
        }
        while self.indents.len() > 1 {
            self.indents.pop();
            self.push(Tok::Dedent, end, end);
        }
        self.push(Tok::Eof, end, end);
        Ok(self.out)
    }

    /// Handles the indentation of a new logical line. Returns true when the line is blank or a
    /// comment (consumed whole, including its newline).
    fn indentation(&mut self) -> Result<bool, Diagnostic> {
        let start = self.pos;
        while self.pos < self.bytes.len() && matches!(self.bytes[self.pos], b' ' | b'\t' | b'\x0c')
        {
            self.pos += 1;
        }
        let indent = &self.src[start..self.pos];
        match self.bytes.get(self.pos) {
            None => return Ok(true),
            Some(b'\n') => {
                self.pos += 1;
                return Ok(true);
            }
            Some(b'\r') if self.bytes.get(self.pos + 1) == Some(&b'\n') => {
                self.pos += 2;
                return Ok(true);
            }
            Some(b'#') => {
                while self.pos < self.bytes.len() && self.bytes[self.pos] != b'\n' {
                    self.pos += 1;
                }
                if self.pos < self.bytes.len() {
                    self.pos += 1;
                }
                return Ok(true);
            }
            _ => {}
        }
        let span = Span::new(start, self.pos.max(start + 1).min(self.bytes.len()));
        if indent.contains('\t') && indent.contains(' ') {
            return Err(err(span, "indentation mixes tabs and spaces"));
        }
        let top = self.indents.last().cloned().unwrap_or_default();
        if indent == top {
            return Ok(false);
        }
        if indent.starts_with(top.as_str()) {
            self.indents.push(indent.to_string());
            self.push(Tok::Indent, start, self.pos);
            return Ok(false);
        }
        if top.starts_with(indent) {
            while self.indents.last().is_some_and(|t| t.len() > indent.len()) {
                self.indents.pop();
                self.push(Tok::Dedent, self.pos, self.pos);
            }
            if self.indents.last().map(String::as_str) != Some(indent) {
                return Err(err(
                    span,
                    "unindent does not match any outer indentation level",
                ));
            }
            return Ok(false);
        }
        Err(err(
            span,
            "inconsistent use of tabs and spaces in indentation",
        ))
    }

    fn string(&mut self) -> Result<(), Diagnostic> {
        let start = self.pos;
        let quote = self.bytes[self.pos];
        let triple = self.bytes[self.pos..].starts_with(&[quote, quote, quote]);
        self.pos += if triple { 3 } else { 1 };
        let mut value = String::new();
        loop {
            let Some(ch) = self.src[self.pos..].chars().next() else {
                return Err(err(
                    Span::new(start, start + 1),
                    "unterminated string literal",
                ));
            };
            if ch == quote as char {
                if !triple {
                    self.pos += 1;
                    break;
                }
                if self.bytes[self.pos..].starts_with(&[quote, quote, quote]) {
                    self.pos += 3;
                    break;
                }
            }
            if ch == '\n' && !triple {
                return Err(err(
                    Span::new(start, start + 1),
                    "unterminated string literal",
                ));
            }
            if ch == '\\' {
                let Some(next) = self.src[self.pos + 1..].chars().next() else {
                    return Err(err(
                        Span::new(start, start + 1),
                        "unterminated string literal",
                    ));
                };
                self.pos += 1 + next.len_utf8();
                match next {
                    'n' => value.push('\n'),
                    't' => value.push('\t'),
                    'r' => value.push('\r'),
                    '0' => value.push('\0'),
                    '\\' => value.push('\\'),
                    '\'' => value.push('\''),
                    '"' => value.push('"'),
                    '\n' => {}
                    other => {
                        value.push('\\');
                        value.push(other);
                    }
                }
                continue;
            }
            value.push(ch);
            self.pos += ch.len_utf8();
        }
        self.push(Tok::Str(value), start, self.pos);
        Ok(())
    }

    fn number(&mut self) -> Result<(), Diagnostic> {
        let start = self.pos;
        while let Some(&b) = self.bytes.get(self.pos) {
            if b.is_ascii_alphanumeric() || b == b'_' || b == b'.' {
                let was_exp = (b == b'e' || b == b'E')
                    && !self.src[start..self.pos].starts_with("0x")
                    && !self.src[start..self.pos].starts_with("0X");
                self.pos += 1;
                if was_exp && matches!(self.bytes.get(self.pos), Some(b'+' | b'-')) {
                    self.pos += 1;
                }
            } else {
                break;
            }
        }
        let text = &self.src[start..self.pos];
        let span = Span::new(start, self.pos);
        let clean: String = text.chars().filter(|c| *c != '_').collect();
        let bad = || err(span, format!("invalid number literal `{text}`"));
        if text.ends_with('_') || text.contains("__") {
            return Err(bad());
        }
        let lower = clean.to_ascii_lowercase();
        let int = if let Some(h) = lower.strip_prefix("0x") {
            Some(u64::from_str_radix(h, 16).map_err(|_| h))
        } else if let Some(o) = lower.strip_prefix("0o") {
            Some(u64::from_str_radix(o, 8).map_err(|_| o))
        } else if let Some(b) = lower.strip_prefix("0b") {
            Some(u64::from_str_radix(b, 2).map_err(|_| b))
        } else if !lower.is_empty() && lower.bytes().all(|b| b.is_ascii_digit()) {
            if lower.len() > 1 && lower.starts_with('0') && lower.bytes().any(|b| b != b'0') {
                return Err(bad());
            }
            Some(lower.parse::<u64>().map_err(|_| lower.as_str()))
        } else {
            None
        };
        match int {
            Some(Ok(v)) => self.push(Tok::Int(v), start, self.pos),
            Some(Err(digits)) => {
                if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(err(span, format!("integer literal `{text}` is too large")));
                }
                return Err(bad());
            }
            None => {
                let valid = lower
                    .bytes()
                    .all(|b| b.is_ascii_digit() || b"e.+-".contains(&b))
                    && lower.bytes().any(|b| b.is_ascii_digit());
                match lower.parse::<f64>() {
                    Ok(v) if valid && !lower.starts_with(['+', '-']) => {
                        self.push(Tok::Float(v), start, self.pos)
                    }
                    _ => return Err(bad()),
                }
            }
        }
        Ok(())
    }
}
