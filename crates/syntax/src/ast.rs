//! The syntax tree of a script (a Python subset), with a span on every node. Produced by the
//! parser, turned into IR by `lower`.

use sparsetir_ir::Span;

/// Binary operators of the surface syntax.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AstBinOp {
    Add,
    Sub,
    Mul,
    Div,
    FloorDiv,
    Mod,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
    BitAnd,
    BitOr,
    BitXor,
    Shl,
    Shr,
}

/// An expression node.
#[derive(Clone, Debug, PartialEq)]
pub enum ExprKind {
    Name(String),
    /// An integer literal (the parser folds a leading unary minus into it).
    Int(i64),
    Float(f64),
    Str(String),
    Bool(bool),
    None,
    /// `value.attr`.
    Attr(Box<Expr>, String),
    Call {
        func: Box<Expr>,
        args: Vec<Expr>,
        kwargs: Vec<Kwarg>,
    },
    /// `value[i, j]`.
    Subscript(Box<Expr>, Vec<Expr>),
    /// `lo:hi` (only inside subscripts).
    Slice(Option<Box<Expr>>, Option<Box<Expr>>),
    Tuple(Vec<Expr>),
    List(Vec<Expr>),
    Dict(Vec<(Expr, Expr)>),
    Binary(AstBinOp, Box<Expr>, Box<Expr>),
    Neg(Box<Expr>),
    Not(Box<Expr>),
}

/// A keyword argument `name=value`.
#[derive(Clone, Debug, PartialEq)]
pub struct Kwarg {
    pub name: String,
    pub name_span: Span,
    pub value: Expr,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Expr {
    pub kind: ExprKind,
    pub span: Span,
}

impl Expr {
    /// `T.sp.dense_fixed` → `Some("T.sp.dense_fixed")`; `None` for anything but a dotted name.
    pub fn dotted(&self) -> Option<String> {
        match &self.kind {
            ExprKind::Name(n) => Some(n.clone()),
            ExprKind::Attr(v, a) => Some(format!("{}.{a}", v.dotted()?)),
            _ => None,
        }
    }
    pub fn as_name(&self) -> Option<&str> {
        match &self.kind {
            ExprKind::Name(n) => Some(n),
            _ => None,
        }
    }
    pub fn as_str(&self) -> Option<&str> {
        match &self.kind {
            ExprKind::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// Augmented assignment operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AugOp {
    Add,
    Sub,
    Mul,
    Div,
}

/// A statement node.
#[derive(Clone, Debug, PartialEq)]
pub enum StmtKind {
    Expr(Expr),
    /// `a = v` or `a, b = v` (targets are names, tuples of names, or subscripts).
    Assign {
        targets: Vec<Expr>,
        value: Expr,
    },
    /// `x: T.int32 = v`.
    AnnAssign {
        target: Expr,
        ann: Expr,
        value: Expr,
    },
    AugAssign {
        target: Expr,
        op: AugOp,
        value: Expr,
    },
    For {
        targets: Vec<Expr>,
        iter: Expr,
        body: Vec<Stmt>,
    },
    With {
        item: Expr,
        target: Option<Expr>,
        body: Vec<Stmt>,
    },
    If {
        cond: Expr,
        then_body: Vec<Stmt>,
        else_body: Option<Vec<Stmt>>,
    },
    /// `while cond: body` (stages II/III).
    While {
        cond: Expr,
        body: Vec<Stmt>,
    },
    Pass,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Stmt {
    pub kind: StmtKind,
    pub span: Span,
}

/// A function parameter `name: annotation`.
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub name: String,
    pub span: Span,
    pub ann: Option<Expr>,
}

/// `@decorator def name(params) -> ret: body`.
#[derive(Clone, Debug, PartialEq)]
pub struct FuncDef {
    pub decorators: Vec<Expr>,
    pub name: String,
    pub name_span: Span,
    pub params: Vec<Param>,
    pub body: Vec<Stmt>,
    pub span: Span,
}
