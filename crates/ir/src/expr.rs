//! Expressions: constants, variables, arithmetic, comparisons, logic, select, casts, buffer loads,
//! intrinsic calls and `let`. Expressions are trees; variables and buffers are handles into the
//! enclosing function's arenas.

use crate::arena::Handle;
use crate::buffer::Buffer;
use crate::dtype::DType;
use crate::func::PrimFunc;

/// A variable: a function parameter, loop variable, block iterator, sparse-iteration iterator or
/// `let` binding. Declared once in [`PrimFunc::vars`].
#[derive(Clone, Debug, PartialEq)]
pub struct Var {
    pub name: String,
    pub dtype: DType,
}

pub type VarId = Handle<Var>;
pub type BufferId = Handle<Buffer>;

/// Binary operators. `Div` truncates for integers; `FloorDiv`/`FloorMod` are Python's `//` and `%`.
/// The bitwise operators take integers; a shift's result has its left operand's type, and its
/// amount counts modulo that type's width (`x << 65` is `x << 1` for a 64-bit `x`), so every
/// shift is defined.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    FloorDiv,
    FloorMod,
    Min,
    Max,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
    /// `a & b`.
    BitAnd,
    /// `a | b`.
    BitOr,
    /// `a ^ b`.
    BitXor,
    /// `a << b`.
    Shl,
    /// `a >> b` (arithmetic for signed types).
    Shr,
}

impl BinOp {
    /// Comparisons and logic produce `bool`.
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinOp::Eq | BinOp::Ne | BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge
        )
    }
    pub fn is_logical(self) -> bool {
        matches!(self, BinOp::And | BinOp::Or)
    }
    /// `&`, `|`, `^`, `<<`, `>>`: integers only.
    pub fn is_bitwise(self) -> bool {
        matches!(
            self,
            BinOp::BitAnd | BinOp::BitOr | BinOp::BitXor | BinOp::Shl | BinOp::Shr
        )
    }
    /// The Python-style infix symbol, where the operator has one (`min`/`max` do not).
    pub fn symbol(self) -> Option<&'static str> {
        Some(match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::FloorDiv => "//",
            BinOp::FloorMod => "%",
            BinOp::Eq => "==",
            BinOp::Ne => "!=",
            BinOp::Lt => "<",
            BinOp::Le => "<=",
            BinOp::Gt => ">",
            BinOp::Ge => ">=",
            BinOp::And => "and",
            BinOp::Or => "or",
            BinOp::BitAnd => "&",
            BinOp::BitOr => "|",
            BinOp::BitXor => "^",
            BinOp::Shl => "<<",
            BinOp::Shr => ">>",
            BinOp::Min | BinOp::Max => return None,
        })
    }
}

/// Unary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnOp {
    Neg,
    Not,
}

/// Intrinsic functions callable as `T.<name>(...)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Intrinsic {
    Exp,
    Exp2,
    Log,
    Log2,
    Sqrt,
    Rsqrt,
    Tanh,
    Sigmoid,
    Abs,
    Pow,
    Floor,
    Ceil,
    Round,
    Sin,
    Cos,
    Erf,
    /// `T.min_value("float32")`: the lowest finite value of the call's dtype.
    MinValue,
    /// `T.max_value("float32")`: the highest finite value of the call's dtype.
    MaxValue,
    /// `T.atomic_add(buffer_load_address..., value)` at stage III; see the lowering issue.
    AtomicAdd,
    /// `T.sort_range(X[idx], n)` as a statement (stage II/III): sorts the `n` integers starting
    /// at element `X[idx]` in increasing order (the column lists of assembled outputs).
    SortRange,
    /// `T.ctz(x)`: the number of trailing zero bits of integer `x` (its width when `x` is 0).
    Ctz,
    /// `T.mask64(X[idx])` (stage II/III, 8-bit integer `X`): a `uint64` whose bit `k` is set
    /// when element `X[idx + k]` is not 0, for `k` in `0..64` (the byte marks of SpGEMM's dense
    /// workspace read 64 at a time).
    Mask64,
    /// `T.popcount(x)`: the number of set bits of integer `x`.
    Popcount,
    /// `T.compress64(D[i], S[j], mask)` as a statement (stage II/III, `D` and `S` of one
    /// dtype): for the `r`-th set bit `k` of the 64-bit `mask`, counted from bit 0,
    /// `D[i + r] = S[j + k]`. Writes exactly `popcount(mask)` elements.
    Compress64,
    /// `T.compress_iota64(D[i], base, mask)` as a statement (stage II/III, integer `D`): for
    /// the `r`-th set bit `k` of `mask`, `D[i + r] = base + k` (the columns of a group of 64
    /// marks, in order).
    CompressIota64,
    /// `T.copy_range(D[i], S[j], n)` as a statement (stage II/III, `D` and `S` of one dtype):
    /// `D[i + k] = S[j + k]` for `k` in `0..n` (nothing when `n <= 0`); the elements may run
    /// past the fiber `D[i]` names, into the next ones of the same storage (a run of rows).
    CopyRange,
}

impl Intrinsic {
    pub const ALL: [Intrinsic; 26] = [
        Intrinsic::Exp,
        Intrinsic::Exp2,
        Intrinsic::Log,
        Intrinsic::Log2,
        Intrinsic::Sqrt,
        Intrinsic::Rsqrt,
        Intrinsic::Tanh,
        Intrinsic::Sigmoid,
        Intrinsic::Abs,
        Intrinsic::Pow,
        Intrinsic::Floor,
        Intrinsic::Ceil,
        Intrinsic::Round,
        Intrinsic::Sin,
        Intrinsic::Cos,
        Intrinsic::Erf,
        Intrinsic::MinValue,
        Intrinsic::MaxValue,
        Intrinsic::AtomicAdd,
        Intrinsic::SortRange,
        Intrinsic::Ctz,
        Intrinsic::Mask64,
        Intrinsic::Popcount,
        Intrinsic::Compress64,
        Intrinsic::CompressIota64,
        Intrinsic::CopyRange,
    ];

    /// The name after `T.`.
    pub fn name(self) -> &'static str {
        match self {
            Intrinsic::Exp => "exp",
            Intrinsic::Exp2 => "exp2",
            Intrinsic::Log => "log",
            Intrinsic::Log2 => "log2",
            Intrinsic::Sqrt => "sqrt",
            Intrinsic::Rsqrt => "rsqrt",
            Intrinsic::Tanh => "tanh",
            Intrinsic::Sigmoid => "sigmoid",
            Intrinsic::Abs => "abs",
            Intrinsic::Pow => "pow",
            Intrinsic::Floor => "floor",
            Intrinsic::Ceil => "ceil",
            Intrinsic::Round => "round",
            Intrinsic::Sin => "sin",
            Intrinsic::Cos => "cos",
            Intrinsic::Erf => "erf",
            Intrinsic::MinValue => "min_value",
            Intrinsic::MaxValue => "max_value",
            Intrinsic::AtomicAdd => "atomic_add",
            Intrinsic::SortRange => "sort_range",
            Intrinsic::Ctz => "ctz",
            Intrinsic::Mask64 => "mask64",
            Intrinsic::Popcount => "popcount",
            Intrinsic::Compress64 => "compress64",
            Intrinsic::CompressIota64 => "compress_iota64",
            Intrinsic::CopyRange => "copy_range",
        }
    }

    pub fn from_name(name: &str) -> Option<Intrinsic> {
        Intrinsic::ALL.iter().copied().find(|i| i.name() == name)
    }

    /// The statements (`T.evaluate(T.<name>(D[i], ...))`, stages II/III): `sort_range`,
    /// `compress64`, `compress_iota64`, `copy_range`. Each writes elements from the one its
    /// first argument names.
    pub fn is_statement(self) -> bool {
        matches!(
            self,
            Intrinsic::SortRange
                | Intrinsic::Compress64
                | Intrinsic::CompressIota64
                | Intrinsic::CopyRange
        )
    }

    /// The intrinsics that write the buffer element their first argument names (and, for the
    /// statements, the elements after it): `atomic_add` and the statements.
    pub fn writes_first_arg(self) -> bool {
        self == Intrinsic::AtomicAdd || self.is_statement()
    }

    /// Number of expression arguments (`min_value`/`max_value` take only a dtype string).
    pub fn arity(self) -> usize {
        match self {
            Intrinsic::MinValue | Intrinsic::MaxValue => 0,
            Intrinsic::Pow | Intrinsic::AtomicAdd | Intrinsic::SortRange => 2,
            Intrinsic::Compress64 | Intrinsic::CompressIota64 | Intrinsic::CopyRange => 3,
            _ => 1,
        }
    }
}

/// An expression tree.
#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// An integer constant of an integer (or bool) dtype.
    Int(i64, DType),
    /// A floating-point constant of a float dtype.
    Float(f64, DType),
    Bool(bool),
    Var(VarId),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    Unary(UnOp, Box<Expr>),
    /// `T.Select(cond, a, b)` / `T.if_then_else(cond, a, b)`.
    Select(Box<Expr>, Box<Expr>, Box<Expr>),
    Cast(DType, Box<Expr>),
    /// `A[i, j]`: coordinates at stage I, positions at stage II, offsets at stage III.
    Load {
        buffer: BufferId,
        indices: Vec<Expr>,
    },
    /// `T.exp(x)` and friends; `dtype` is the result type.
    Call {
        op: Intrinsic,
        args: Vec<Expr>,
        dtype: DType,
    },
    /// `T.let(v, value, body)`.
    Let {
        var: VarId,
        value: Box<Expr>,
        body: Box<Expr>,
    },
}

impl Expr {
    pub fn int(v: i64) -> Expr {
        Expr::Int(v, DType::I32)
    }
    pub fn f32(v: f64) -> Expr {
        Expr::Float(v, DType::F32)
    }
    pub fn var(v: VarId) -> Expr {
        Expr::Var(v)
    }
    pub fn binary(op: BinOp, a: Expr, b: Expr) -> Expr {
        Expr::Binary(op, Box::new(a), Box::new(b))
    }
    #[allow(clippy::should_implement_trait)]
    pub fn add(a: Expr, b: Expr) -> Expr {
        Expr::binary(BinOp::Add, a, b)
    }
    #[allow(clippy::should_implement_trait)]
    pub fn sub(a: Expr, b: Expr) -> Expr {
        Expr::binary(BinOp::Sub, a, b)
    }
    #[allow(clippy::should_implement_trait)]
    pub fn mul(a: Expr, b: Expr) -> Expr {
        Expr::binary(BinOp::Mul, a, b)
    }
    pub fn load(buffer: BufferId, indices: Vec<Expr>) -> Expr {
        Expr::Load { buffer, indices }
    }

    /// The integer value if this is an integer constant.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Expr::Int(v, _) => Some(*v),
            _ => None,
        }
    }
    pub fn as_var(&self) -> Option<VarId> {
        match self {
            Expr::Var(v) => Some(*v),
            _ => None,
        }
    }

    /// The type of this expression in `func` (variables and buffers are looked up there).
    pub fn dtype(&self, func: &PrimFunc) -> DType {
        match self {
            Expr::Int(_, d) | Expr::Float(_, d) => *d,
            Expr::Bool(_) => DType::Bool,
            Expr::Var(v) => func.vars[*v].dtype,
            Expr::Binary(op, a, b) => {
                if op.is_comparison() || op.is_logical() {
                    DType::Bool
                } else if matches!(op, BinOp::Shl | BinOp::Shr) {
                    a.dtype(func)
                } else {
                    binary_result_dtype(a.dtype(func), b.dtype(func))
                }
            }
            Expr::Unary(UnOp::Not, _) => DType::Bool,
            Expr::Unary(UnOp::Neg, a) => a.dtype(func),
            Expr::Select(_, a, b) => binary_result_dtype(a.dtype(func), b.dtype(func)),
            Expr::Cast(d, _) => *d,
            Expr::Load { buffer, .. } => func.buffers[*buffer].dtype,
            Expr::Call { dtype, .. } => *dtype,
            Expr::Let { body, .. } => body.dtype(func),
        }
    }

    /// Calls `f` on every direct child expression.
    pub fn for_each_child(&self, mut f: impl FnMut(&Expr)) {
        match self {
            Expr::Int(..) | Expr::Float(..) | Expr::Bool(_) | Expr::Var(_) => {}
            Expr::Binary(_, a, b) => {
                f(a);
                f(b)
            }
            Expr::Unary(_, a) | Expr::Cast(_, a) => f(a),
            Expr::Select(c, a, b) => {
                f(c);
                f(a);
                f(b)
            }
            Expr::Load { indices, .. } => indices.iter().for_each(f),
            Expr::Call { args, .. } => args.iter().for_each(f),
            Expr::Let { value, body, .. } => {
                f(value);
                f(body)
            }
        }
    }

    /// Whether this expression loads from buffer `b` anywhere (indices included).
    pub fn loads(&self, b: BufferId) -> bool {
        let mut found = false;
        self.visit(&mut |x| found |= matches!(x, Expr::Load { buffer, .. } if *buffer == b));
        found
    }

    /// Whether this expression names any of `vars`.
    pub fn mentions_any(&self, vars: &[VarId]) -> bool {
        let mut found = false;
        self.visit(&mut |x| found |= matches!(x, Expr::Var(v) if vars.contains(v)));
        found
    }

    /// Structural equality, except that two integer constants are equal when their values are
    /// (a loop's extent `T.int64(64)` and an iterator's `64` are the same range).
    pub fn same_ignoring_int_type(&self, other: &Expr) -> bool {
        match (self.as_int(), other.as_int()) {
            (Some(x), Some(y)) => x == y,
            _ => self == other,
        }
    }

    /// Visits this expression and all its descendants, parents first.
    pub fn visit(&self, f: &mut impl FnMut(&Expr)) {
        f(self);
        self.for_each_child(|c| c.visit(f));
    }

    /// Calls `f` on every direct child expression, mutably (same order as
    /// [`Expr::for_each_child`]).
    pub fn for_each_child_mut(&mut self, mut f: impl FnMut(&mut Expr)) {
        match self {
            Expr::Int(..) | Expr::Float(..) | Expr::Bool(_) | Expr::Var(_) => {}
            Expr::Binary(_, a, b) => {
                f(a);
                f(b)
            }
            Expr::Unary(_, a) | Expr::Cast(_, a) => f(a),
            Expr::Select(c, a, b) => {
                f(c);
                f(a);
                f(b)
            }
            Expr::Load { indices, .. } => indices.iter_mut().for_each(f),
            Expr::Call { args, .. } => args.iter_mut().for_each(f),
            Expr::Let { value, body, .. } => {
                f(value);
                f(body)
            }
        }
    }

    /// Rewrites this expression bottom-up: every child first, then `f` on the node itself, which
    /// may replace it (a replacement is not visited again).
    pub fn rewrite_post_order(&mut self, f: &mut dyn FnMut(&mut Expr)) {
        self.for_each_child_mut(|c| c.rewrite_post_order(f));
        f(self);
    }
}

/// The dtype of `a op b` for arithmetic: floats win over integers; the wider type wins; a Python
/// literal's default `int32` adopts the other side's integer type.
pub fn binary_result_dtype(a: DType, b: DType) -> DType {
    if a == b {
        return a;
    }
    match (a.is_float(), b.is_float()) {
        (true, false) => a,
        (false, true) => b,
        _ => {
            if a.bits() >= b.bits() {
                a
            } else {
                b
            }
        }
    }
}
