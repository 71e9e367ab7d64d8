//! Traces: the list of primitives a schedule applied, printed as Python-like lines
//! (`l1, l2 = sch.get_loops(b0)`), parsed back by a small hand-written parser (errors located by
//! line:col) and replayed on a function. The same text is the schedule-file format.
//!
//! Grammar (one instruction per line; blank lines and `#` comments are ignored):
//! ```text
//! line    := [targets "="] "sch" "." name "(" [arg ("," arg)* [","]] ")"
//! targets := ident ("," ident)* [","]
//! arg     := [ident "="] value
//! value   := ident | string | int | float | "None" | "True" | "False"
//!          | "[" [value ("," value)* [","]] "]" | "{" [string ":" value ("," ...)*] "}"
//! ```

use std::collections::HashMap;
use std::fmt;

use sparsetir_ir::{AttrValue, Attrs, PrimFunc};

use crate::error::ScheduleError;
use crate::state::{AnyRV, BlockRV, LoopRV, Schedule, SpIterRV};

/// An argument of an instruction.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    /// A handle (by its name in the trace).
    Var(String),
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
    None,
    List(Vec<Arg>),
    Dict(Vec<(String, Arg)>),
}

impl Arg {
    /// The argument as an attribute value (handles are not values).
    pub fn to_attr(&self) -> Option<AttrValue> {
        Some(match self {
            Arg::Str(s) => AttrValue::Str(s.clone()),
            Arg::Int(v) => AttrValue::Int(*v),
            Arg::Float(v) => AttrValue::Float(*v),
            Arg::Bool(b) => AttrValue::Bool(*b),
            Arg::List(v) => AttrValue::List(v.iter().map(Arg::to_attr).collect::<Option<_>>()?),
            Arg::Dict(v) => AttrValue::Dict(Attrs(
                v.iter()
                    .map(|(k, a)| Some((k.clone(), a.to_attr()?)))
                    .collect::<Option<_>>()?,
            )),
            Arg::Var(_) | Arg::None => return None,
        })
    }

    /// An attribute value as an argument.
    pub fn from_attr(v: &AttrValue) -> Arg {
        match v {
            AttrValue::Bool(b) => Arg::Bool(*b),
            AttrValue::Int(i) => Arg::Int(*i),
            AttrValue::Float(f) => Arg::Float(*f),
            AttrValue::Str(s) => Arg::Str(s.clone()),
            AttrValue::List(v) => Arg::List(v.iter().map(Arg::from_attr).collect()),
            AttrValue::Dict(d) => Arg::Dict(
                d.0.iter()
                    .map(|(k, v)| (k.clone(), Arg::from_attr(v)))
                    .collect(),
            ),
        }
    }
}

impl fmt::Display for Arg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arg::Var(n) => write!(f, "{n}"),
            Arg::Str(s) => write!(f, "{}", sparsetir_ir::printer::quote(s)),
            Arg::Int(v) => write!(f, "{v}"),
            Arg::Float(v) => {
                if v.is_finite() {
                    write!(f, "{v:?}")
                } else if v.is_nan() {
                    write!(f, "float(\"nan\")")
                } else if *v > 0.0 {
                    write!(f, "float(\"inf\")")
                } else {
                    write!(f, "float(\"-inf\")")
                }
            }
            Arg::Bool(b) => write!(f, "{}", if *b { "True" } else { "False" }),
            Arg::None => write!(f, "None"),
            Arg::List(v) => {
                write!(f, "[")?;
                for (i, a) in v.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{a}")?;
                }
                write!(f, "]")
            }
            Arg::Dict(v) => {
                write!(f, "{{")?;
                for (i, (k, a)) in v.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{}: {a}", sparsetir_ir::printer::quote(k))?;
                }
                write!(f, "}}")
            }
        }
    }
}

/// One applied primitive.
#[derive(Clone, Debug, PartialEq)]
pub struct Instruction {
    /// The primitive's name (`split`, `get_loops`, ...).
    pub name: String,
    pub args: Vec<Arg>,
    pub kwargs: Vec<(String, Arg)>,
    /// Names of the handles it returned.
    pub outputs: Vec<String>,
    /// The primitive returns a list (printed `l1, = ...` when it has one element).
    pub list_output: bool,
    /// The source line (1-based) of a parsed instruction; 0 when recorded.
    pub line: usize,
}

impl Instruction {
    /// The instruction as one line of text.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        if !self.outputs.is_empty() {
            s.push_str(&self.outputs.join(", "));
            if self.list_output && self.outputs.len() == 1 {
                s.push(',');
            }
            s.push_str(" = ");
        }
        s.push_str("sch.");
        s.push_str(&self.name);
        s.push('(');
        let mut parts: Vec<String> = self.args.iter().map(|a| a.to_string()).collect();
        parts.extend(self.kwargs.iter().map(|(k, a)| format!("{k}={a}")));
        s.push_str(&parts.join(", "));
        s.push(')');
        s
    }

    /// The keyword argument `key`.
    pub fn kwarg(&self, key: &str) -> Option<&Arg> {
        self.kwargs.iter().find(|(k, _)| k == key).map(|(_, a)| a)
    }
}

/// A sequence of instructions.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Trace {
    pub insts: Vec<Instruction>,
}

/// Why a trace could not be parsed or replayed.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum TraceError {
    /// The text is not a valid trace.
    #[error("{line}:{col}: {message}")]
    Syntax {
        line: usize,
        col: usize,
        message: String,
    },
    /// An instruction is unknown or its arguments do not fit the primitive.
    #[error("{line}:{col}: {message}")]
    Replay {
        line: usize,
        col: usize,
        message: String,
    },
    /// A primitive failed while replaying.
    #[error("{line}:1: {error}")]
    Schedule { line: usize, error: ScheduleError },
}

impl Trace {
    /// The trace as text, one instruction per line (each line ends with a newline).
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for i in &self.insts {
            out.push_str(&i.to_text());
            out.push('\n');
        }
        out
    }

    /// Parses trace text.
    pub fn parse(text: &str) -> Result<Trace, TraceError> {
        let mut insts = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let mut p = LineParser {
                chars: line.chars().collect(),
                pos: 0,
                line: i + 1,
            };
            p.skip_ws();
            if p.at_end() {
                continue;
            }
            insts.push(p.instruction()?);
        }
        Ok(Trace { insts })
    }

    /// Replays the trace on `func` and returns the resulting schedule (whose own trace is the
    /// replayed one, with handles renumbered).
    pub fn apply(&self, func: PrimFunc) -> Result<Schedule, TraceError> {
        let mut sch =
            Schedule::new(func).map_err(|error| TraceError::Schedule { line: 0, error })?;
        self.apply_to(&mut sch)?;
        Ok(sch)
    }

    /// Replays the trace on an existing schedule.
    pub fn apply_to(&self, sch: &mut Schedule) -> Result<(), TraceError> {
        let mut env: HashMap<String, AnyRV> = HashMap::new();
        for inst in &self.insts {
            let call = Call { inst, env: &env };
            let outs = match crate::primitives::replay(sch, &call) {
                Ok(Some(outs)) => outs,
                Ok(None) => {
                    return Err(call.replay_error(format!("unknown primitive `{}`", inst.name)))
                }
                Err(ReplayError::Args(m)) => return Err(call.replay_error(m)),
                Err(ReplayError::Schedule(error)) => {
                    return Err(TraceError::Schedule {
                        line: inst.line,
                        error,
                    })
                }
            };
            if outs.len() != inst.outputs.len() {
                return Err(call.replay_error(format!(
                    "`{}` returned {} handle(s) but the line names {}",
                    inst.name,
                    outs.len(),
                    inst.outputs.len()
                )));
            }
            for (n, rv) in inst.outputs.iter().zip(outs) {
                env.insert(n.clone(), rv);
            }
        }
        Ok(())
    }
}

/// Parses schedule text and applies it to `func`.
pub fn apply_schedule_text(func: PrimFunc, text: &str) -> Result<Schedule, TraceError> {
    Trace::parse(text)?.apply(func)
}

/// A failure while replaying one instruction.
#[derive(Clone, Debug)]
pub enum ReplayError {
    /// The arguments do not fit the primitive.
    Args(String),
    /// The primitive failed.
    Schedule(ScheduleError),
}

impl From<ScheduleError> for ReplayError {
    fn from(e: ScheduleError) -> Self {
        ReplayError::Schedule(e)
    }
}

/// An instruction being replayed, with the handles bound so far: typed argument access for the
/// primitives' replay functions.
pub struct Call<'a> {
    pub inst: &'a Instruction,
    pub env: &'a HashMap<String, AnyRV>,
}

type ArgRes<T> = Result<T, ReplayError>;

impl<'a> Call<'a> {
    fn replay_error(&self, message: String) -> TraceError {
        TraceError::Replay {
            line: self.inst.line,
            col: 1,
            message,
        }
    }

    pub fn name(&self) -> &str {
        &self.inst.name
    }

    /// Positional argument `i`, or keyword `key`.
    pub fn arg(&self, i: usize, key: &str) -> ArgRes<&'a Arg> {
        self.inst
            .args
            .get(i)
            .or_else(|| self.inst.kwarg(key))
            .ok_or_else(|| {
                ReplayError::Args(format!(
                    "`{}` needs argument {} (`{key}`)",
                    self.inst.name,
                    i + 1
                ))
            })
    }

    /// Optional positional argument `i` or keyword `key`.
    pub fn opt_arg(&self, i: usize, key: &str) -> Option<&'a Arg> {
        self.inst.args.get(i).or_else(|| self.inst.kwarg(key))
    }

    /// Number of positional arguments.
    pub fn n_args(&self) -> usize {
        self.inst.args.len()
    }

    pub fn rv_of(&self, a: &Arg) -> ArgRes<AnyRV> {
        match a {
            Arg::Var(n) => self.env.get(n).copied().ok_or_else(|| {
                ReplayError::Args(format!("`{n}` is not defined by an earlier line"))
            }),
            other => Err(ReplayError::Args(format!(
                "`{}`: expected a handle, got `{other}`",
                self.inst.name
            ))),
        }
    }

    pub fn rv(&self, i: usize, key: &str) -> ArgRes<AnyRV> {
        self.rv_of(self.arg(i, key)?)
    }

    pub fn block_of(&self, a: &Arg) -> ArgRes<BlockRV> {
        match self.rv_of(a)? {
            AnyRV::Block(b) => Ok(b),
            _ => Err(ReplayError::Args(format!(
                "`{}`: `{a}` is not a block handle",
                self.inst.name
            ))),
        }
    }
    pub fn loop_of(&self, a: &Arg) -> ArgRes<LoopRV> {
        match self.rv_of(a)? {
            AnyRV::Loop(l) => Ok(l),
            _ => Err(ReplayError::Args(format!(
                "`{}`: `{a}` is not a loop handle",
                self.inst.name
            ))),
        }
    }
    pub fn sp_iter_of(&self, a: &Arg) -> ArgRes<SpIterRV> {
        match self.rv_of(a)? {
            AnyRV::SpIter(s) => Ok(s),
            _ => Err(ReplayError::Args(format!(
                "`{}`: `{a}` is not a sparse-iteration handle",
                self.inst.name
            ))),
        }
    }
    pub fn block(&self, i: usize, key: &str) -> ArgRes<BlockRV> {
        self.block_of(self.arg(i, key)?)
    }
    pub fn loop_(&self, i: usize, key: &str) -> ArgRes<LoopRV> {
        self.loop_of(self.arg(i, key)?)
    }
    pub fn sp_iter(&self, i: usize, key: &str) -> ArgRes<SpIterRV> {
        self.sp_iter_of(self.arg(i, key)?)
    }

    pub fn str_of(&self, a: &'a Arg) -> ArgRes<&'a str> {
        match a {
            Arg::Str(s) => Ok(s),
            other => Err(ReplayError::Args(format!(
                "`{}`: expected a string, got `{other}`",
                self.inst.name
            ))),
        }
    }
    pub fn str(&self, i: usize, key: &str) -> ArgRes<&'a str> {
        self.str_of(self.arg(i, key)?)
    }
    pub fn int_of(&self, a: &Arg) -> ArgRes<i64> {
        match a {
            Arg::Int(v) => Ok(*v),
            other => Err(ReplayError::Args(format!(
                "`{}`: expected an integer, got `{other}`",
                self.inst.name
            ))),
        }
    }
    pub fn int(&self, i: usize, key: &str) -> ArgRes<i64> {
        self.int_of(self.arg(i, key)?)
    }
    pub fn list_of(&self, a: &'a Arg) -> ArgRes<&'a [Arg]> {
        match a {
            Arg::List(v) => Ok(v),
            other => Err(ReplayError::Args(format!(
                "`{}`: expected a list, got `{other}`",
                self.inst.name
            ))),
        }
    }
    pub fn list(&self, i: usize, key: &str) -> ArgRes<&'a [Arg]> {
        self.list_of(self.arg(i, key)?)
    }
    /// A string list argument.
    pub fn strs(&self, i: usize, key: &str) -> ArgRes<Vec<String>> {
        self.list(i, key)?
            .iter()
            .map(|a| self.str_of(a).map(str::to_string))
            .collect()
    }
    /// Every positional argument from `from` on, as loop handles (or one list of them).
    pub fn loops_from(&self, from: usize) -> ArgRes<Vec<LoopRV>> {
        let rest = self.inst.args.get(from..).unwrap_or(&[]);
        if let [Arg::List(v)] = rest {
            return v.iter().map(|a| self.loop_of(a)).collect();
        }
        rest.iter().map(|a| self.loop_of(a)).collect()
    }
    pub fn attr(&self, i: usize, key: &str) -> ArgRes<AttrValue> {
        let a = self.arg(i, key)?;
        a.to_attr().ok_or_else(|| {
            ReplayError::Args(format!(
                "`{}`: `{a}` is not an annotation value",
                self.inst.name
            ))
        })
    }
}

/// Parser of one line.
struct LineParser {
    chars: Vec<char>,
    pos: usize,
    line: usize,
}

impl LineParser {
    fn err<T>(&self, message: impl Into<String>) -> Result<T, TraceError> {
        Err(TraceError::Syntax {
            line: self.line,
            col: self.pos + 1,
            message: message.into(),
        })
    }
    fn at_end(&self) -> bool {
        self.pos >= self.chars.len() || self.chars[self.pos] == '#'
    }
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }
    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(c) if c == ' ' || c == '\t' || c == '\r') {
            self.pos += 1;
        }
    }
    fn eat(&mut self, c: char) -> bool {
        self.skip_ws();
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }
    fn expect(&mut self, c: char) -> Result<(), TraceError> {
        if self.eat(c) {
            Ok(())
        } else {
            let got = self
                .peek()
                .map(|g| format!("`{g}`"))
                .unwrap_or_else(|| "the end of the line".into());
            self.err(format!("expected `{c}`, found {got}"))
        }
    }
    fn ident(&mut self) -> Option<String> {
        self.skip_ws();
        let start = self.pos;
        match self.peek() {
            Some(c) if c.is_alphabetic() || c == '_' => {}
            _ => return None,
        }
        while matches!(self.peek(), Some(c) if c.is_alphanumeric() || c == '_') {
            self.pos += 1;
        }
        Some(self.chars[start..self.pos].iter().collect())
    }
    fn expect_ident(&mut self, what: &str) -> Result<String, TraceError> {
        match self.ident() {
            Some(s) => Ok(s),
            None => self.err(format!("expected {what}")),
        }
    }

    fn instruction(&mut self) -> Result<Instruction, TraceError> {
        let line = self.line;
        let first = self.expect_ident("`sch.` or a handle name")?;
        let mut outputs = Vec::new();
        let mut list_output = false;
        if first != "sch" || self.peek_non_ws() != Some('.') {
            outputs.push(first);
            loop {
                if self.eat(',') {
                    self.skip_ws();
                    if self.peek() == Some('=') {
                        list_output = true;
                        break;
                    }
                    outputs.push(self.expect_ident("a handle name")?);
                    list_output = true;
                } else {
                    break;
                }
            }
            self.expect('=')?;
            let sch = self.expect_ident("`sch`")?;
            if sch != "sch" {
                self.pos -= sch.chars().count();
                return self.err(format!("expected `sch`, found `{sch}`"));
            }
        }
        self.expect('.')?;
        let name = self.expect_ident("a primitive name")?;
        self.expect('(')?;
        let mut args = Vec::new();
        let mut kwargs: Vec<(String, Arg)> = Vec::new();
        loop {
            self.skip_ws();
            if self.eat(')') {
                break;
            }
            // keyword?
            let save = self.pos;
            if let Some(id) = self.ident() {
                if self.eat('=') {
                    let v = self.value()?;
                    kwargs.push((id, v));
                    if !self.eat(',') {
                        self.expect(')')?;
                        break;
                    }
                    continue;
                }
                self.pos = save;
            }
            if !kwargs.is_empty() {
                return self.err("positional argument after keyword argument");
            }
            args.push(self.value()?);
            if !self.eat(',') {
                self.expect(')')?;
                break;
            }
        }
        self.skip_ws();
        if !self.at_end() {
            return self.err("unexpected text after the instruction");
        }
        Ok(Instruction {
            name,
            args,
            kwargs,
            outputs,
            list_output,
            line,
        })
    }

    fn peek_non_ws(&mut self) -> Option<char> {
        self.skip_ws();
        self.peek()
    }

    fn value(&mut self) -> Result<Arg, TraceError> {
        self.skip_ws();
        match self.peek() {
            Some('"') | Some('\'') => self.string().map(Arg::Str),
            Some('[') => {
                self.pos += 1;
                let mut v = Vec::new();
                loop {
                    if self.eat(']') {
                        break;
                    }
                    v.push(self.value()?);
                    if !self.eat(',') {
                        self.expect(']')?;
                        break;
                    }
                }
                Ok(Arg::List(v))
            }
            Some('{') => {
                self.pos += 1;
                let mut v = Vec::new();
                loop {
                    if self.eat('}') {
                        break;
                    }
                    self.skip_ws();
                    let k = self.string()?;
                    self.expect(':')?;
                    v.push((k, self.value()?));
                    if !self.eat(',') {
                        self.expect('}')?;
                        break;
                    }
                }
                Ok(Arg::Dict(v))
            }
            Some(c) if c.is_ascii_digit() || c == '-' || c == '+' || c == '.' => self.number(),
            Some(c) if c.is_alphabetic() || c == '_' => {
                let id = self.ident().unwrap_or_default();
                Ok(match id.as_str() {
                    "None" => Arg::None,
                    "True" => Arg::Bool(true),
                    "False" => Arg::Bool(false),
                    "float" => {
                        self.expect('(')?;
                        self.skip_ws();
                        let s = self.string()?;
                        self.expect(')')?;
                        match s.as_str() {
                            "nan" => Arg::Float(f64::NAN),
                            "inf" => Arg::Float(f64::INFINITY),
                            "-inf" => Arg::Float(f64::NEG_INFINITY),
                            _ => return self.err(format!("unknown float literal `{s}`")),
                        }
                    }
                    _ => Arg::Var(id),
                })
            }
            Some(c) => self.err(format!("unexpected `{c}`")),
            None => self.err("unexpected end of the line"),
        }
    }

    fn number(&mut self) -> Result<Arg, TraceError> {
        let start = self.pos;
        if matches!(self.peek(), Some('-') | Some('+')) {
            self.pos += 1;
        }
        while matches!(self.peek(), Some(c) if c.is_ascii_alphanumeric() || c == '.' || c == '_'
            || ((c == '-' || c == '+') && matches!(self.chars.get(self.pos - 1), Some('e') | Some('E'))))
        {
            self.pos += 1;
        }
        let text: String = self.chars[start..self.pos].iter().collect();
        let clean = text.replace('_', "");
        if let Ok(v) = clean.parse::<i64>() {
            return Ok(Arg::Int(v));
        }
        if let Ok(v) = clean.parse::<f64>() {
            if clean.contains(['.', 'e', 'E']) {
                return Ok(Arg::Float(v));
            }
        }
        self.pos = start;
        self.err(format!("invalid number `{text}`"))
    }

    fn string(&mut self) -> Result<String, TraceError> {
        let quote = match self.peek() {
            Some(q @ ('"' | '\'')) => q,
            _ => return self.err("expected a string"),
        };
        let start = self.pos;
        self.pos += 1;
        let mut out = String::new();
        loop {
            match self.peek() {
                None => {
                    self.pos = start;
                    return self.err("unterminated string");
                }
                Some(c) if c == quote => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some('\\') => {
                    self.pos += 1;
                    let c = match self.peek() {
                        Some('n') => '\n',
                        Some('t') => '\t',
                        Some('r') => '\r',
                        Some('0') => '\0',
                        Some(c @ ('\\' | '"' | '\'')) => c,
                        _ => return self.err("unknown escape in string"),
                    };
                    out.push(c);
                    self.pos += 1;
                }
                Some(c) => {
                    out.push(c);
                    self.pos += 1;
                }
            }
        }
    }
}
