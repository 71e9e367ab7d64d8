//! MLIR `sparse_tensor` encodings (SPEC §7): the attribute's data model, its canonical printer,
//! located errors, and the entry points for parsing, packing and mapping to sparse axes.
//!
//! - [`parse_encoding`] reads `#sparse_tensor.encoding<{ map = ..., posWidth = ..., ... }>`
//!   (also without the wrapper, or as an alias line `#CSR = #sparse_tensor.encoding<{...}>`).
//! - [`Encoding::to_text`] prints the canonical one-line form, which parses back to an equal
//!   [`Encoding`].
//! - [`Encoding::pack`] packs a [`Coo`](crate::Coo) into the encoding's level storage
//!   ([`Storage`], printed in the seed's `positions[l] : ...` form by [`Storage::to_text`]).
//! - [`Encoding::to_sparse_axes`] gives the equivalent `T.sp.*` declarations, or a
//!   [`NoEquivalent`] that says why there is none.

mod axes;
mod parse;
mod storage;

use std::fmt;
use std::ops::Range;

pub use axes::NoEquivalent;
pub use storage::Storage;

/// Parses an encoding attribute. See the module documentation for the accepted forms.
pub fn parse_encoding(text: &str) -> Result<Encoding, EncodingError> {
    parse::parse(text)
}

/// A parse or packing error. Parse errors carry the byte span of the offending text and its
/// 1-based line and column; `Display` then reads `line:col: message`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodingError {
    /// Byte range in the parsed text (empty `0..0` for packing errors).
    pub span: Range<usize>,
    /// 1-based `(line, column)` of `span.start` for parse errors; `None` for packing errors.
    pub location: Option<(usize, usize)>,
    pub message: String,
}

impl EncodingError {
    /// An error located in `text` at `span` (the column counts characters, not bytes).
    pub fn at(text: &str, span: Range<usize>, message: impl Into<String>) -> EncodingError {
        let start = span.start.min(text.len());
        let before = text.get(..start).unwrap_or("");
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map(|p| p + 1).unwrap_or(0);
        let col = before
            .get(line_start..)
            .map(|s| s.chars().count())
            .unwrap_or(0)
            + 1;
        EncodingError {
            span,
            location: Some((line, col)),
            message: message.into(),
        }
    }

    /// An error without a location in the encoding text (packing).
    pub fn plain(message: impl Into<String>) -> EncodingError {
        EncodingError {
            span: 0..0,
            location: None,
            message: message.into(),
        }
    }
}

impl fmt::Display for EncodingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.location {
            Some((line, col)) => write!(f, "{line}:{col}: {}", self.message),
            None => write!(f, "{}", self.message),
        }
    }
}

impl std::error::Error for EncodingError {}

/// A parsed `#sparse_tensor.encoding<{...}>`.
#[derive(Clone, Debug, PartialEq)]
pub struct Encoding {
    /// The alias name of a definition line `#CSR = ...` (without the `#`).
    pub alias: Option<String>,
    /// The dimension variables, in order.
    pub dims: Vec<DimSpec>,
    /// The `[symbols]` of the map, in order.
    pub symbols: Vec<String>,
    /// The levels, outermost first.
    pub levels: Vec<LevelSpec>,
    /// The explicit inverse map `(i = ib * 2 + ii, ...)` of the explicit form, one expression
    /// per dimension over the level variables (`AffineExpr::Var(l)` = level `l`).
    pub dim_exprs: Option<Vec<AffineExpr>>,
    /// Position bit width (0 = native).
    pub pos_width: u8,
    /// Coordinate bit width (0 = native).
    pub crd_width: u8,
    pub explicit_val: Option<f64>,
    pub implicit_val: Option<f64>,
}

/// One dimension variable with its optional slice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DimSpec {
    pub name: String,
    pub slice: Option<DimSlice>,
}

/// `#sparse_tensor<slice(offset, size, stride)>`; `None` is a dynamic `?`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DimSlice {
    pub offset: Option<i64>,
    pub size: Option<i64>,
    pub stride: Option<i64>,
}

/// One level: `[name =] expr : format[(props)]`.
#[derive(Clone, Debug, PartialEq)]
pub struct LevelSpec {
    /// The level variable's name (explicit form only).
    pub name: Option<String>,
    /// The level coordinate as an affine expression of the dimensions (`Var(d)` = dim `d`).
    pub expr: LevelExpr,
    pub format: LevelFormat,
    pub props: LevelProps,
}

/// Storage format of a level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LevelFormat {
    Dense,
    Batch,
    Compressed,
    LooseCompressed,
    Singleton,
    /// `structured[n, m]`: `n` stored coordinates in every group of `m` (`block2_4` = `[2, 4]`).
    Structured {
        n: u32,
        m: u32,
    },
}

impl LevelFormat {
    /// The format's keyword as printed (`structured[2, 4]` for `block2_4`).
    pub fn keyword(&self) -> String {
        match self {
            LevelFormat::Dense => "dense".into(),
            LevelFormat::Batch => "batch".into(),
            LevelFormat::Compressed => "compressed".into(),
            LevelFormat::LooseCompressed => "loose_compressed".into(),
            LevelFormat::Singleton => "singleton".into(),
            LevelFormat::Structured { n, m } => format!("structured[{n}, {m}]"),
        }
    }
}

/// Level properties; the defaults (all `false`) are unique and ordered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LevelProps {
    pub nonunique: bool,
    pub nonordered: bool,
    /// Structure-of-arrays coordinates (singleton levels only).
    pub soa: bool,
}

/// A level expression: affine in the dimensions (`Var(d)`), symbols count.
pub type LevelExpr = AffineExpr;

/// An affine expression. `Var(k)` names a dimension in level expressions and a level in the
/// explicit inverse map; `Sym(k)` names the `k`-th symbol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AffineExpr {
    Var(usize),
    Sym(usize),
    Const(i64),
    Add(Box<AffineExpr>, Box<AffineExpr>),
    Sub(Box<AffineExpr>, Box<AffineExpr>),
    Mul(Box<AffineExpr>, Box<AffineExpr>),
    /// Floor division by a positive constant.
    FloorDiv(Box<AffineExpr>, i64),
    /// Remainder (non-negative) by a positive constant.
    Mod(Box<AffineExpr>, i64),
}

impl AffineExpr {
    fn prec(&self) -> u8 {
        match self {
            AffineExpr::Add(..) | AffineExpr::Sub(..) => 1,
            AffineExpr::Mul(..) | AffineExpr::FloorDiv(..) | AffineExpr::Mod(..) => 2,
            _ => 3,
        }
    }

    /// Whether a `Var` occurs in the expression.
    pub fn has_var(&self) -> bool {
        match self {
            AffineExpr::Var(_) => true,
            AffineExpr::Sym(_) | AffineExpr::Const(_) => false,
            AffineExpr::Add(a, b) | AffineExpr::Sub(a, b) | AffineExpr::Mul(a, b) => {
                a.has_var() || b.has_var()
            }
            AffineExpr::FloorDiv(a, _) | AffineExpr::Mod(a, _) => a.has_var(),
        }
    }

    /// Whether `Var(v)` occurs in the expression.
    pub fn uses_var(&self, v: usize) -> bool {
        match self {
            AffineExpr::Var(x) => *x == v,
            AffineExpr::Sym(_) | AffineExpr::Const(_) => false,
            AffineExpr::Add(a, b) | AffineExpr::Sub(a, b) | AffineExpr::Mul(a, b) => {
                a.uses_var(v) || b.uses_var(v)
            }
            AffineExpr::FloorDiv(a, _) | AffineExpr::Mod(a, _) => a.uses_var(v),
        }
    }

    /// Whether a `Sym` occurs in the expression.
    pub fn has_sym(&self) -> bool {
        match self {
            AffineExpr::Sym(_) => true,
            AffineExpr::Var(_) | AffineExpr::Const(_) => false,
            AffineExpr::Add(a, b) | AffineExpr::Sub(a, b) | AffineExpr::Mul(a, b) => {
                a.has_sym() || b.has_sym()
            }
            AffineExpr::FloorDiv(a, _) | AffineExpr::Mod(a, _) => a.has_sym(),
        }
    }

    /// Evaluates with the given variable and symbol values (`None` on a missing value or an
    /// overflow).
    pub fn eval(&self, vars: &[i64], syms: &[i64]) -> Option<i64> {
        Some(match self {
            AffineExpr::Var(v) => *vars.get(*v)?,
            AffineExpr::Sym(s) => *syms.get(*s)?,
            AffineExpr::Const(c) => *c,
            AffineExpr::Add(a, b) => a.eval(vars, syms)?.checked_add(b.eval(vars, syms)?)?,
            AffineExpr::Sub(a, b) => a.eval(vars, syms)?.checked_sub(b.eval(vars, syms)?)?,
            AffineExpr::Mul(a, b) => a.eval(vars, syms)?.checked_mul(b.eval(vars, syms)?)?,
            AffineExpr::FloorDiv(a, k) => a.eval(vars, syms)?.checked_div_euclid(*k)?,
            AffineExpr::Mod(a, k) => a.eval(vars, syms)?.checked_rem_euclid(*k)?,
        })
    }

    /// Prints with the given variable and symbol names, parenthesising only where needed (so
    /// the text parses back to the same tree).
    pub fn to_text(&self, vars: &[String], syms: &[String]) -> String {
        let mut s = String::new();
        self.write(&mut s, vars, syms);
        s
    }

    fn write(&self, out: &mut String, vars: &[String], syms: &[String]) {
        let child = |out: &mut String, e: &AffineExpr, paren: bool| {
            if paren {
                out.push('(');
            }
            e.write(out, vars, syms);
            if paren {
                out.push(')');
            }
        };
        let p = self.prec();
        match self {
            AffineExpr::Var(v) => out.push_str(vars.get(*v).map(|s| s.as_str()).unwrap_or("?")),
            AffineExpr::Sym(s) => out.push_str(syms.get(*s).map(|s| s.as_str()).unwrap_or("?")),
            AffineExpr::Const(c) => out.push_str(&c.to_string()),
            AffineExpr::Add(a, b) | AffineExpr::Sub(a, b) | AffineExpr::Mul(a, b) => {
                let op = match self {
                    AffineExpr::Add(..) => " + ",
                    AffineExpr::Sub(..) => " - ",
                    _ => " * ",
                };
                child(out, a, a.prec() < p);
                out.push_str(op);
                child(out, b, b.prec() <= p);
            }
            AffineExpr::FloorDiv(a, k) | AffineExpr::Mod(a, k) => {
                let op = if matches!(self, AffineExpr::Mod(..)) {
                    " mod "
                } else {
                    " floordiv "
                };
                child(out, a, a.prec() < p);
                out.push_str(op);
                out.push_str(&k.to_string());
            }
        }
    }
}

fn slice_part(v: Option<i64>) -> String {
    v.map(|x| x.to_string()).unwrap_or_else(|| "?".into())
}

fn value_text(v: f64) -> String {
    // `{:?}` keeps a `.0` on integral values and uses exponents for extreme ones; both lex back.
    format!("{v:?}")
}

impl Encoding {
    /// Names of the dimensions, in order.
    pub fn dim_names(&self) -> Vec<String> {
        self.dims.iter().map(|d| d.name.clone()).collect()
    }

    /// Names of the level variables (`l0`, `l1`, ... where the implicit form leaves them
    /// unnamed).
    pub fn level_names(&self) -> Vec<String> {
        self.levels
            .iter()
            .enumerate()
            .map(|(i, l)| l.name.clone().unwrap_or_else(|| format!("l{i}")))
            .collect()
    }

    /// The canonical one-line text: `#sparse_tensor.encoding<{ map = ... }>` (prefixed by
    /// `#Alias = ` for an alias definition). Fields other than `map` are printed only when they
    /// differ from their defaults. It parses back to an equal `Encoding`.
    pub fn to_text(&self) -> String {
        let dims = self.dim_names();
        let lvls = self.level_names();
        let mut map = String::new();
        if !self.symbols.is_empty() {
            map.push('[');
            map.push_str(&self.symbols.join(", "));
            map.push(']');
        }
        if self.dim_exprs.is_some() {
            map.push('{');
            map.push_str(&lvls.join(", "));
            map.push('}');
        }
        map.push('(');
        for (d, dim) in self.dims.iter().enumerate() {
            if d > 0 {
                map.push_str(", ");
            }
            map.push_str(&dim.name);
            if let Some(e) = self.dim_exprs.as_ref().and_then(|es| es.get(d)) {
                map.push_str(" = ");
                map.push_str(&e.to_text(&lvls, &self.symbols));
            }
            if let Some(s) = dim.slice {
                map.push_str(&format!(
                    " : #sparse_tensor<slice({}, {}, {})>",
                    slice_part(s.offset),
                    slice_part(s.size),
                    slice_part(s.stride)
                ));
            }
        }
        map.push_str(") -> (");
        for (l, lvl) in self.levels.iter().enumerate() {
            if l > 0 {
                map.push_str(", ");
            }
            if let Some(name) = &lvl.name {
                map.push_str(name);
                map.push_str(" = ");
            }
            map.push_str(&lvl.expr.to_text(&dims, &self.symbols));
            map.push_str(" : ");
            map.push_str(&lvl.format.keyword());
            let mut props = Vec::new();
            if lvl.props.nonunique {
                props.push("nonunique");
            }
            if lvl.props.nonordered {
                props.push("nonordered");
            }
            if lvl.props.soa {
                props.push("soa");
            }
            if !props.is_empty() {
                map.push('(');
                map.push_str(&props.join(", "));
                map.push(')');
            }
        }
        map.push(')');
        let mut fields = vec![format!("map = {map}")];
        if self.pos_width != 0 {
            fields.push(format!("posWidth = {}", self.pos_width));
        }
        if self.crd_width != 0 {
            fields.push(format!("crdWidth = {}", self.crd_width));
        }
        if let Some(v) = self.explicit_val {
            fields.push(format!("explicitVal = {}", value_text(v)));
        }
        if let Some(v) = self.implicit_val {
            fields.push(format!("implicitVal = {}", value_text(v)));
        }
        let body = format!("#sparse_tensor.encoding<{{ {} }}>", fields.join(", "));
        match &self.alias {
            Some(a) => format!("#{a} = {body}"),
            None => body,
        }
    }
}
