//! Random *valid* IR for property tests (cargo feature `arbitrary`): proptest strategies that
//! build stage-I functions (axis forests of all four kinds, sparse buffers over valid axis lists,
//! nested sparse iterations with fused and attached axes, stores of well-typed random
//! expressions) and stage-II/III functions (loops of every kind, blocks with iterators, regions,
//! init, predicate, allocations and annotations; branches, `let`, `T.allocate`, `T.evaluate`).
//!
//! Each strategy draws a seed and a size; a deterministic generator ([`gen_func`]) turns them
//! into a function. Shrinking lowers the size (fewer and shallower statements), so a failing case
//! shrinks to a small function. Every generated function passes [`crate::verify_func`].

use proptest::prelude::*;

use crate::attrs::{AttrValue, Attrs};
use crate::axis::{Axis, AxisId, AxisKind, IterAxis, IterKind};
use crate::buffer::{Buffer, BufferDecl, BufferShape};
use crate::dtype::DType;
use crate::expr::{BinOp, BufferId, Expr, Intrinsic, UnOp, VarId};
use crate::func::{PrimFunc, Stage};
use crate::span::Span;
use crate::stmt::{
    Block, BlockIter, BufferRegion, For, ForKind, IfThenElse, LetStmt, SparseIteration, Stmt, Store,
};

/// The largest `size` the strategies draw.
pub const MAX_SIZE: u32 = 8;

/// Random valid stage-I functions.
pub fn arb_stage1_func() -> impl Strategy<Value = PrimFunc> {
    (any::<u64>(), 1..=MAX_SIZE).prop_map(|(seed, size)| gen_func(Stage::I, seed, size))
}

/// Random valid stage-II functions (loops and blocks; axes and sparse buffers present).
pub fn arb_stage2_func() -> impl Strategy<Value = PrimFunc> {
    (any::<u64>(), 1..=MAX_SIZE).prop_map(|(seed, size)| gen_func(Stage::II, seed, size))
}

/// Random valid stage-III functions (loops and blocks over dense buffers).
pub fn arb_stage3_func() -> impl Strategy<Value = PrimFunc> {
    (any::<u64>(), 1..=MAX_SIZE).prop_map(|(seed, size)| gen_func(Stage::III, seed, size))
}

/// Random valid functions of any stage.
pub fn arb_func() -> impl Strategy<Value = PrimFunc> {
    prop_oneof![arb_stage1_func(), arb_stage2_func(), arb_stage3_func()]
}

/// Builds one random valid function of `stage`; the same `(stage, seed, size)` always gives the
/// same function. `size` (1 and up) bounds the number and nesting of statements.
pub fn gen_func(stage: Stage, seed: u64, size: u32) -> PrimFunc {
    let mut g = Gen::new(stage, seed, size.max(1));
    g.func();
    g.f
}

/// SplitMix64: small, fast and good enough for generating test inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    /// True with probability `num / den`.
    fn chance(&mut self, num: u64, den: u64) -> bool {
        self.next() % den < num
    }
    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        let span = (hi - lo) as u64 + 1;
        lo + (self.next() % span) as i64
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }
    /// An index drawn with the given weights.
    fn weighted(&mut self, weights: &[u32]) -> usize {
        let total: u32 = weights.iter().sum();
        let mut r = self.below(total.max(1) as usize) as u32;
        for (i, &w) in weights.iter().enumerate() {
            if r < w {
                return i;
            }
            r -= w;
        }
        weights.len() - 1
    }
}

/// Dtypes of generated expressions.
const EXPR_DTYPES: [DType; 6] = [
    DType::I32,
    DType::I64,
    DType::F32,
    DType::F64,
    DType::F16,
    DType::Bool,
];
/// Dtypes of generated buffers.
const BUFFER_DTYPES: [DType; 8] = [
    DType::F32,
    DType::F32,
    DType::F64,
    DType::F16,
    DType::BF16,
    DType::I32,
    DType::I64,
    DType::I8,
];
/// Extra cast targets.
const CAST_DTYPES: [DType; 10] = [
    DType::I8,
    DType::I16,
    DType::I32,
    DType::I64,
    DType::U8,
    DType::U32,
    DType::F16,
    DType::BF16,
    DType::F32,
    DType::F64,
];
const FLOAT_UNARY: [Intrinsic; 15] = [
    Intrinsic::Exp,
    Intrinsic::Exp2,
    Intrinsic::Log,
    Intrinsic::Log2,
    Intrinsic::Sqrt,
    Intrinsic::Rsqrt,
    Intrinsic::Tanh,
    Intrinsic::Sigmoid,
    Intrinsic::Abs,
    Intrinsic::Floor,
    Intrinsic::Ceil,
    Intrinsic::Round,
    Intrinsic::Sin,
    Intrinsic::Cos,
    Intrinsic::Erf,
];
const ATTR_KEYS: [&str; 6] = [
    "hint",
    "preprocess",
    "tile",
    "pragma_unroll",
    "note",
    "composable",
];

/// What a statement or expression may refer to at a point of the tree.
#[derive(Clone, Default)]
struct Scope {
    /// Non-handle variables usable in expressions.
    vars: Vec<VarId>,
    /// Loop variables (usable in block iterator bindings).
    loop_vars: Vec<VarId>,
    /// Buffers usable in loads and stores.
    buffers: Vec<BufferId>,
    /// Stage I: axes iterated by enclosing sparse iterations.
    iterated: Vec<AxisId>,
    /// Inside a block or sparse iteration (stores are natural there).
    in_compute: bool,
}

struct Gen {
    rng: Rng,
    size: u32,
    stage: Stage,
    f: PrimFunc,
    counter: usize,
    /// Scalar parameters (usable in size expressions).
    scalar_params: Vec<VarId>,
    /// Function-level buffers.
    global_buffers: Vec<BufferId>,
    /// Statement budget left (keeps functions small).
    budget: i64,
}

impl Gen {
    fn new(stage: Stage, seed: u64, size: u32) -> Self {
        Gen {
            rng: Rng(seed ^ ((size as u64) << 56) ^ ((stage.level() as u64) << 48)),
            size,
            stage,
            f: PrimFunc::new(format!("func{}", seed % 1000)),
            counter: 0,
            scalar_params: Vec::new(),
            global_buffers: Vec::new(),
            budget: 4 + 3 * size as i64,
        }
    }

    fn fresh(&mut self, prefix: &str) -> String {
        self.counter += 1;
        format!("{prefix}{}", self.counter)
    }

    fn param(&mut self, prefix: &str, dtype: DType) -> VarId {
        let name = self.fresh(prefix);
        let v = self.f.add_var(name, dtype);
        self.f.params.push(v);
        if dtype != DType::Handle {
            self.scalar_params.push(v);
        }
        v
    }

    fn handle_param(&mut self) -> VarId {
        self.param("h", DType::Handle)
    }

    fn var(&mut self, prefix: &str, dtype: DType) -> VarId {
        let name = self.fresh(prefix);
        self.f.add_var(name, dtype)
    }

    fn func(&mut self) {
        // a few scalar parameters up front (more are made on demand)
        for _ in 0..1 + self.rng.below(3) {
            let d = if self.rng.chance(1, 5) {
                DType::I64
            } else {
                DType::I32
            };
            self.param("n", d);
        }
        let mut attrs = Attrs::new();
        if self.rng.chance(1, 2) {
            attrs.set("global_symbol", AttrValue::Str(self.f.name.clone()));
        }
        if self.rng.chance(1, 2) {
            attrs.set("tir.noalias", AttrValue::Bool(true));
        }
        attrs.set(crate::func::STAGE_ATTR, AttrValue::Int(self.stage.level()));
        if self.rng.chance(1, 4) {
            let extra = self.attrs(1);
            for (k, v) in extra.0 {
                if k != crate::func::STAGE_ATTR {
                    attrs.set(k, v);
                }
            }
        }
        self.f.attrs = attrs;
        if self.stage != Stage::III {
            self.axes();
            let n = 1 + self.rng.below(4);
            for _ in 0..n {
                self.sparse_buffer();
            }
        }
        let dense = match self.stage {
            Stage::I => usize::from(self.rng.chance(1, 4)),
            _ => 1 + self.rng.below(3),
        };
        for _ in 0..dense {
            self.dense_global_buffer();
        }
        let scope = Scope {
            vars: self.scalar_params.clone(),
            buffers: self.global_buffers.clone(),
            ..Scope::default()
        };
        let body = match self.stage {
            Stage::I => self.stage1_top(&scope),
            _ => {
                let s = self.stmts(&scope, self.size.min(4));
                Stmt::seq(s)
            }
        };
        self.f.body = body;
    }

    // ----- sizes, constants and attributes ------------------------------------------------

    /// A scalar parameter of dtype `d` (an existing one or a new one).
    fn scalar_param(&mut self, d: DType) -> VarId {
        let existing: Vec<VarId> = self
            .scalar_params
            .iter()
            .copied()
            .filter(|v| self.f.vars[*v].dtype == d)
            .collect();
        if !existing.is_empty() && self.rng.chance(2, 3) {
            self.rng.pick(&existing)
        } else {
            self.param("n", d)
        }
    }

    /// An `int32` size: a constant, a parameter, or a parameter combined with a constant.
    fn size_expr(&mut self) -> Expr {
        match self.rng.below(5) {
            0 | 1 => Expr::int(self.rng.range(1, 64)),
            2 | 3 => Expr::Var(self.scalar_param(DType::I32)),
            _ => {
                let p = Expr::Var(self.scalar_param(DType::I32));
                let op = self.rng.pick(&[BinOp::Add, BinOp::Mul, BinOp::FloorDiv]);
                Expr::binary(op, p, Expr::int(self.rng.range(1, 8)))
            }
        }
    }

    fn int_const(&mut self, d: DType) -> Expr {
        let v = match d {
            DType::I8 => self.rng.range(-20, 20),
            DType::I16 => self.rng.range(-300, 300),
            DType::I64 => {
                if self.rng.chance(1, 4) {
                    self.rng.range(1 << 33, 1 << 40)
                } else {
                    self.rng.range(-100, 1000)
                }
            }
            DType::U8 => self.rng.range(0, 200),
            DType::U16 | DType::U32 | DType::U64 => self.rng.range(0, 5000),
            _ => self.rng.range(-100, 1000),
        };
        Expr::Int(v, d)
    }

    fn float_value(&mut self, d: DType) -> f64 {
        match d {
            DType::F32 if self.rng.chance(1, 3) => {
                let x = (self.rng.next() >> 40) as f32 / (1u64 << 24) as f32;
                f64::from(x * 2000.0 - 1000.0)
            }
            DType::F64 if self.rng.chance(1, 3) => {
                let x = (self.rng.next() >> 11) as f64 / (1u64 << 53) as f64;
                x * 2.0e6 - 1.0e6
            }
            _ => self.rng.range(-16, 16) as f64 / 4.0,
        }
    }

    fn constant(&mut self, d: DType) -> Expr {
        if d.is_bool() {
            Expr::Bool(self.rng.chance(1, 2))
        } else if d.is_float() {
            Expr::Float(self.float_value(d), d)
        } else {
            self.int_const(d)
        }
    }

    fn attr_value(&mut self, depth: u32) -> AttrValue {
        match self.rng.below(if depth > 0 { 6 } else { 4 }) {
            0 => AttrValue::Bool(self.rng.chance(1, 2)),
            1 => AttrValue::Int(self.rng.range(-5, 100)),
            2 => AttrValue::Float(self.rng.range(-8, 8) as f64 / 4.0 + 0.25),
            3 => {
                let s = self
                    .rng
                    .pick(&["a", "shared", "local", "x y", "threadIdx.x"]);
                AttrValue::Str(s.to_string())
            }
            4 => {
                let n = self.rng.below(3);
                AttrValue::List((0..n).map(|_| self.attr_value(depth - 1)).collect())
            }
            _ => AttrValue::Dict(self.attrs(depth - 1)),
        }
    }

    /// 1 to 2 attributes with distinct keys.
    fn attrs(&mut self, depth: u32) -> Attrs {
        let mut a = Attrs::new();
        for _ in 0..1 + self.rng.below(2) {
            let k = self.rng.pick(&ATTR_KEYS);
            let v = self.attr_value(depth);
            a.set(k, v);
        }
        a
    }

    fn maybe_attrs(&mut self) -> Attrs {
        if self.rng.chance(1, 3) {
            self.attrs(1)
        } else {
            Attrs::new()
        }
    }

    // ----- declarations -------------------------------------------------------------------

    /// A forest of 1..=6 axes; the first is a dense_fixed root.
    fn axes(&mut self) {
        let n = 1 + self.rng.below(2 + self.size.min(4) as usize);
        let kinds = [
            AxisKind::DenseFixed,
            AxisKind::DenseVaried,
            AxisKind::CompressedFixed,
            AxisKind::CompressedVaried,
        ];
        for i in 0..n {
            let kind = if i == 0 {
                AxisKind::DenseFixed
            } else {
                self.rng.pick(&kinds)
            };
            let name = self.fresh("AX");
            let mut axis = Axis::dense_fixed(name, self.size_expr());
            axis.kind = kind;
            if self.rng.chance(1, 4) {
                axis.idtype = DType::I64;
            }
            if kind != AxisKind::DenseFixed {
                axis.parent = Some(AxisId::from_index(self.rng.below(i)));
            }
            if kind.is_varied() {
                axis.indptr = Some(self.handle_param());
                let short_form = kind == AxisKind::DenseVaried && self.rng.chance(1, 3);
                if !short_form {
                    axis.nnz = Some(self.size_expr());
                }
            }
            if kind.is_compressed() {
                axis.indices = Some(self.handle_param());
                axis.sorted = self.rng.chance(3, 4);
            }
            if kind == AxisKind::CompressedFixed {
                axis.nnz_cols = Some(self.size_expr());
            }
            self.f.axes.append(axis);
        }
    }

    /// A valid axis list: every axis's parent comes earlier in the list.
    fn axis_list(&mut self) -> Vec<AxisId> {
        let want = 1 + self.rng.below(4);
        let mut list: Vec<AxisId> = Vec::new();
        while list.len() < want {
            let cands: Vec<AxisId> = self
                .f
                .axes
                .iter()
                .filter(|(h, a)| !list.contains(h) && a.parent.iter().all(|p| list.contains(p)))
                .map(|(h, _)| h)
                .collect();
            if cands.is_empty() {
                break;
            }
            list.push(self.rng.pick(&cands));
        }
        list
    }

    fn new_buffer(
        &mut self,
        decl: BufferDecl,
        shape: BufferShape,
        dtype: DType,
        scope: &str,
    ) -> BufferId {
        let name = self.fresh("B");
        self.f.buffers.append(Buffer {
            name,
            decl,
            shape,
            dtype,
            scope: scope.to_string(),
            strides: Vec::new(),
            extra_storage: None,
            default_value: None,
            span: Span::default(),
        })
    }

    fn sparse_buffer(&mut self) {
        let axes = self.axis_list();
        let dtype = self.rng.pick(&BUFFER_DTYPES);
        let b = if self.rng.chance(3, 4) {
            let data = self.handle_param();
            self.new_buffer(
                BufferDecl::Match { data },
                BufferShape::Sparse(axes),
                dtype,
                "global",
            )
        } else {
            let scope = self.rng.pick(&["global", "shared"]);
            self.new_buffer(BufferDecl::Alloc, BufferShape::Sparse(axes), dtype, scope)
        };
        if self.rng.chance(1, 4) {
            self.f.buffers[b].extra_storage = Some(Expr::int(self.rng.range(1, 4)));
        }
        if self.rng.chance(1, 4) {
            let v = self.constant(dtype);
            self.f.buffers[b].default_value = Some(v);
        }
        self.f.buffer_decls.push(b);
        self.global_buffers.push(b);
    }

    fn dense_dims(&mut self, constant_only: bool) -> Vec<Expr> {
        let n = 1 + self.rng.below(3);
        (0..n)
            .map(|_| {
                if constant_only {
                    Expr::int(self.rng.range(1, 16))
                } else {
                    self.size_expr()
                }
            })
            .collect()
    }

    fn dense_global_buffer(&mut self) {
        let dims = self.dense_dims(false);
        let dtype = self.rng.pick(&BUFFER_DTYPES);
        let b = if self.stage == Stage::I || self.rng.chance(3, 4) {
            let data = self.handle_param();
            self.new_buffer(
                BufferDecl::Match { data },
                BufferShape::Dense(dims),
                dtype,
                "global",
            )
        } else {
            self.new_buffer(BufferDecl::Alloc, BufferShape::Dense(dims), dtype, "global")
        };
        self.f.buffer_decls.push(b);
        self.global_buffers.push(b);
    }

    /// A dense buffer declared inside the body (block header or `T.allocate`).
    fn local_buffer(&mut self) -> BufferId {
        let dims = self.dense_dims(true);
        let dtype = self.rng.pick(&BUFFER_DTYPES);
        let scope = self.rng.pick(&["local", "shared", "global"]);
        self.new_buffer(BufferDecl::Alloc, BufferShape::Dense(dims), dtype, scope)
    }

    // ----- expressions --------------------------------------------------------------------

    fn vars_of(&self, sc: &Scope, d: DType) -> Vec<VarId> {
        sc.vars
            .iter()
            .copied()
            .filter(|v| self.f.vars[*v].dtype == d)
            .collect()
    }

    fn leaf(&mut self, sc: &Scope, d: DType) -> Expr {
        let vars = self.vars_of(sc, d);
        if !vars.is_empty() && self.rng.chance(2, 3) {
            Expr::Var(self.rng.pick(&vars))
        } else {
            self.constant(d)
        }
    }

    /// An integer index expression (int32, sometimes int64).
    fn index(&mut self, sc: &Scope, depth: u32) -> Expr {
        let d = if self.rng.chance(1, 6) {
            DType::I64
        } else {
            DType::I32
        };
        let vars = self.vars_of(sc, d);
        if !vars.is_empty() && self.rng.chance(1, 2) {
            return Expr::Var(self.rng.pick(&vars));
        }
        self.expr(sc, d, depth)
    }

    fn load(&mut self, sc: &Scope, d: DType, depth: u32) -> Option<Expr> {
        let bufs: Vec<BufferId> = sc
            .buffers
            .iter()
            .copied()
            .filter(|b| self.f.buffers[*b].dtype == d)
            .collect();
        if bufs.is_empty() {
            return None;
        }
        let b = self.rng.pick(&bufs);
        let n = self.f.buffers[b].ndim();
        let indices = (0..n)
            .map(|_| self.index(sc, depth.saturating_sub(1)))
            .collect();
        Some(Expr::Load { buffer: b, indices })
    }

    /// A well-typed expression of dtype `d`.
    fn expr(&mut self, sc: &Scope, d: DType, depth: u32) -> Expr {
        if depth == 0 || self.rng.chance(1, 4) {
            return self.leaf(sc, d);
        }
        let sub = depth - 1;
        if d.is_bool() {
            return match self.rng.below(4) {
                0 => {
                    let od = self
                        .rng
                        .pick(&[DType::I32, DType::I64, DType::F32, DType::F64]);
                    let op = self.rng.pick(&[
                        BinOp::Eq,
                        BinOp::Ne,
                        BinOp::Lt,
                        BinOp::Le,
                        BinOp::Gt,
                        BinOp::Ge,
                    ]);
                    let a = self.expr(sc, od, sub);
                    let b = self.expr(sc, od, sub);
                    Expr::binary(op, a, b)
                }
                1 => {
                    let op = self.rng.pick(&[BinOp::And, BinOp::Or]);
                    let a = self.expr(sc, DType::Bool, sub);
                    let b = self.expr(sc, DType::Bool, sub);
                    Expr::binary(op, a, b)
                }
                2 => Expr::Unary(UnOp::Not, Box::new(self.expr(sc, DType::Bool, sub))),
                _ => self.leaf(sc, d),
            };
        }
        // numeric
        match self.rng.weighted(&[5, 1, 1, 1, 2, 2, 1]) {
            0 => {
                let ops: &[BinOp] = if d.is_float() {
                    &[
                        BinOp::Add,
                        BinOp::Sub,
                        BinOp::Mul,
                        BinOp::Div,
                        BinOp::Min,
                        BinOp::Max,
                    ]
                } else {
                    &[
                        BinOp::Add,
                        BinOp::Sub,
                        BinOp::Mul,
                        BinOp::Div,
                        BinOp::FloorDiv,
                        BinOp::FloorMod,
                        BinOp::Min,
                        BinOp::Max,
                        BinOp::BitAnd,
                        BinOp::BitOr,
                        BinOp::BitXor,
                        BinOp::Shl,
                        BinOp::Shr,
                    ]
                };
                let op = self.rng.pick(ops);
                let a = self.expr(sc, d, sub);
                let mut b = self.expr(sc, d, sub);
                // A divisor that is a constant 0 does not verify (stage I).
                let divides = matches!(op, BinOp::Div | BinOp::FloorDiv | BinOp::FloorMod);
                if divides && d.is_integer() {
                    if let Some(v) = crate::scalar::constant(&b) {
                        if v.as_i128() == 0 {
                            b = crate::scalar::int_literal(3, d);
                        }
                    }
                }
                Expr::binary(op, a, b)
            }
            1 => Expr::Unary(UnOp::Neg, Box::new(self.expr(sc, d, sub))),
            2 => {
                let c = self.expr(sc, DType::Bool, sub);
                let a = self.expr(sc, d, sub);
                let b = self.expr(sc, d, sub);
                Expr::Select(Box::new(c), Box::new(a), Box::new(b))
            }
            3 => {
                let from = self.rng.pick(&CAST_DTYPES);
                let from = if from == d { DType::I32 } else { from };
                let inner = if CAST_DTYPES.contains(&from) && EXPR_DTYPES.contains(&from) {
                    self.expr(sc, from, sub)
                } else {
                    self.constant(from)
                };
                Expr::Cast(d, Box::new(inner))
            }
            4 => match self.load(sc, d, sub) {
                Some(e) => e,
                None => self.leaf(sc, d),
            },
            5 if d.is_float() => {
                if self.rng.chance(1, 5) {
                    let op = self.rng.pick(&[Intrinsic::MinValue, Intrinsic::MaxValue]);
                    Expr::Call {
                        op,
                        args: vec![],
                        dtype: d,
                    }
                } else if self.rng.chance(1, 5) {
                    let a = self.expr(sc, d, sub);
                    let b = self.expr(sc, d, sub);
                    Expr::Call {
                        op: Intrinsic::Pow,
                        args: vec![a, b],
                        dtype: d,
                    }
                } else {
                    let op = self.rng.pick(&FLOAT_UNARY);
                    let a = self.expr(sc, d, sub);
                    Expr::Call {
                        op,
                        args: vec![a],
                        dtype: d,
                    }
                }
            }
            5 => {
                if self.rng.chance(1, 3) {
                    let op = self.rng.pick(&[Intrinsic::MinValue, Intrinsic::MaxValue]);
                    Expr::Call {
                        op,
                        args: vec![],
                        dtype: d,
                    }
                } else {
                    self.leaf(sc, d)
                }
            }
            _ => {
                let vd = self.rng.pick(&EXPR_DTYPES);
                let value = self.expr(sc, vd, sub);
                let var = self.var("t", vd);
                let mut inner = sc.clone();
                inner.vars.push(var);
                let body = self.expr(&inner, d, sub);
                Expr::Let {
                    var,
                    value: Box::new(value),
                    body: Box::new(body),
                }
            }
        }
    }

    // ----- statements shared by all stages ------------------------------------------------

    fn store(&mut self, sc: &Scope) -> Option<Stmt> {
        if sc.buffers.is_empty() {
            return None;
        }
        let b = self.rng.pick(&sc.buffers);
        let n = self.f.buffers[b].ndim();
        let indices = (0..n).map(|_| self.index(sc, 1)).collect();
        let bd = self.f.buffers[b].dtype;
        // numeric stores may convert; mostly the value has the buffer's dtype
        let vd = if bd.is_bool() || (EXPR_DTYPES.contains(&bd) && self.rng.chance(4, 5)) {
            bd
        } else if EXPR_DTYPES.contains(&bd) || self.rng.chance(1, 2) {
            self.rng.pick(&[DType::I32, DType::F32, DType::F64])
        } else {
            bd
        };
        let value = self.expr(sc, vd, 3);
        Some(Stmt::Store(Store {
            buffer: b,
            indices,
            value,
            span: Span::default(),
        }))
    }

    fn evaluate(&mut self, sc: &Scope) -> Stmt {
        let d = self.rng.pick(&EXPR_DTYPES);
        Stmt::Evaluate(self.expr(sc, d, 2))
    }

    fn let_var(&mut self, sc: &Scope) -> (VarId, Expr) {
        let d = self.rng.pick(&[
            DType::I32,
            DType::I32,
            DType::I64,
            DType::F32,
            DType::F64,
            DType::Bool,
        ]);
        let value = self.expr(sc, d, 2);
        (self.var("t", d), value)
    }

    fn if_stmt(&mut self, sc: &Scope, depth: u32) -> Stmt {
        let cond = self.expr(sc, DType::Bool, 2);
        let then_case = Stmt::seq(self.stmts(sc, depth - 1));
        let else_case = if self.rng.chance(1, 2) {
            Some(Stmt::seq(self.stmts(sc, depth - 1)))
        } else {
            None
        };
        Stmt::If(Box::new(IfThenElse {
            cond,
            then_case,
            else_case,
            span: Span::default(),
        }))
    }

    /// A non-empty statement list valid at this point (a `let` is always last: its body is the
    /// rest of the sequence).
    fn stmts(&mut self, sc: &Scope, depth: u32) -> Vec<Stmt> {
        let n = 1 + self.rng.below(3);
        let mut out = Vec::new();
        let mut sc = sc.clone();
        for _ in 0..n {
            if self.budget <= 0 && !out.is_empty() {
                break;
            }
            self.budget -= 1;
            match self.stmt_or_let(&mut sc, depth) {
                Ok(s) => out.push(s),
                Err(last) => {
                    out.push(last);
                    break;
                }
            }
        }
        if out.is_empty() {
            out.push(self.fallback(&sc));
        }
        out
    }

    /// A statement that needs nothing: a store if possible, else an evaluate.
    fn fallback(&mut self, sc: &Scope) -> Stmt {
        match self.store(sc) {
            Some(s) => s,
            None => self.evaluate(sc),
        }
    }

    /// One statement; `Err` carries a statement that must end the sequence (a `let`).
    /// `T.allocate` adds its buffer to `sc` for the statements after it.
    fn stmt_or_let(&mut self, sc: &mut Scope, depth: u32) -> Result<Stmt, Stmt> {
        let nested = depth > 0 && self.budget > 0;
        let stage1 = self.stage == Stage::I;
        // store, evaluate, if, let, for, block, allocate, sparse iteration
        let weights = [
            if sc.in_compute || stage1 { 5 } else { 1 },
            1,
            if nested { 1 } else { 0 },
            if nested { 1 } else { 0 },
            if nested && !stage1 { 4 } else { 0 },
            if nested && !stage1 { 3 } else { 0 },
            if !stage1 { 1 } else { 0 },
            if nested && stage1 { 2 } else { 0 },
        ];
        Ok(match self.rng.weighted(&weights) {
            0 => self.fallback(sc),
            1 => self.evaluate(sc),
            2 => self.if_stmt(sc, depth),
            3 => {
                let (var, value) = self.let_var(sc);
                let mut inner = sc.clone();
                inner.vars.push(var);
                let body = Stmt::seq(self.stmts(&inner, depth - 1));
                return Err(Stmt::Let(Box::new(LetStmt {
                    var,
                    value,
                    body,
                    span: Span::default(),
                })));
            }
            4 => self.for_loop(sc, depth),
            5 => self.block(sc, depth),
            6 => {
                let b = self.local_buffer();
                sc.buffers.push(b);
                Stmt::Allocate(b)
            }
            _ => match self.sparse_iteration(sc, depth) {
                Some(s) => s,
                None => self.fallback(sc),
            },
        })
    }

    // ----- stage I ------------------------------------------------------------------------

    fn stage1_top(&mut self, sc: &Scope) -> Stmt {
        let mut out = Vec::new();
        if self.rng.chance(1, 4) && !sc.buffers.is_empty() {
            let buffer = self.rng.pick(&sc.buffers);
            let lo = Expr::int(self.rng.range(0, 4));
            let hi = self.size_expr();
            out.push(Stmt::AssumeBufferDomain {
                buffer,
                lo,
                hi,
                span: Span::default(),
            });
        }
        let n = 1 + self.rng.below(1 + self.size.min(3) as usize);
        for _ in 0..n {
            match self.sparse_iteration(sc, self.size.min(3)) {
                Some(s) => out.push(s),
                None => break,
            }
        }
        if self.rng.chance(1, 8) {
            out.push(self.evaluate(sc));
        }
        Stmt::seq(out)
    }

    /// A sparse iteration whose axes are valid where it stands (parents iterated, fused chains,
    /// attach parents iterated); `None` when every axis is already iterated.
    fn sparse_iteration(&mut self, sc: &Scope, depth: u32) -> Option<Stmt> {
        let mut iterated = sc.iterated.clone();
        let outer = iterated.len();
        let mut entries = Vec::new();
        let want = 1 + self.rng.below(3);
        for _ in 0..want {
            let free = |a: AxisId, it: &Vec<AxisId>| !it.contains(&a);
            let plain: Vec<AxisId> = self
                .f
                .axes
                .iter()
                .filter(|(h, a)| {
                    free(*h, &iterated) && a.parent.iter().all(|p| iterated.contains(p))
                })
                .map(|(h, _)| h)
                .collect();
            let chains: Vec<Vec<AxisId>> = self
                .f
                .axes
                .iter()
                .filter_map(|(h, a)| {
                    let p = a.parent?;
                    if !free(h, &iterated) || !free(p, &iterated) {
                        return None;
                    }
                    match self.f.axes[p].parent {
                        Some(g) if free(g, &iterated) && (h.index() + p.index()) % 2 == 0 => {
                            Some(vec![g, p, h])
                        }
                        _ => Some(vec![p, h]),
                    }
                })
                .collect();
            let attachable: Vec<AxisId> = self
                .f
                .axes
                .iter()
                .filter(|(h, a)| a.parent.is_some() && free(*h, &iterated))
                .map(|(h, _)| h)
                .collect();
            let choice = self.rng.weighted(&[
                if plain.is_empty() { 0 } else { 6 },
                if chains.is_empty() { 0 } else { 1 },
                if attachable.is_empty() || iterated.is_empty() {
                    0
                } else {
                    1
                },
            ]);
            match choice {
                0 if !plain.is_empty() => {
                    let a = self.rng.pick(&plain);
                    iterated.push(a);
                    entries.push(IterAxis::Axis(a));
                }
                1 if !chains.is_empty() => {
                    let chain = chains[self.rng.below(chains.len())].clone();
                    iterated.extend(chain.iter().copied());
                    entries.push(IterAxis::Fuse(chain));
                }
                2 if !attachable.is_empty() && !iterated.is_empty() => {
                    let axis = self.rng.pick(&attachable);
                    let parents: Vec<AxisId> =
                        iterated.iter().copied().filter(|p| *p != axis).collect();
                    if parents.is_empty() {
                        continue;
                    }
                    let parent = self.rng.pick(&parents);
                    iterated.push(axis);
                    entries.push(IterAxis::Attach { axis, parent });
                }
                _ => break,
            }
        }
        if entries.is_empty() {
            return None;
        }
        let arity: usize = entries.iter().map(|e| e.arity()).sum();
        // an iterator holds a coordinate of its axis: it has the axis's index type
        let iter_axes: Vec<AxisId> = entries.iter().flat_map(|e| e.axes()).collect();
        let vars: Vec<VarId> = iter_axes
            .iter()
            .map(|a| self.var("v", self.f.axes[*a].idtype))
            .collect();
        let kinds: Vec<IterKind> = (0..arity)
            .map(|_| {
                if self.rng.chance(1, 3) {
                    IterKind::Reduce
                } else {
                    IterKind::Spatial
                }
            })
            .collect();
        let mut inner = sc.clone();
        inner.vars.extend(vars.iter().copied());
        inner.iterated = iterated;
        inner.in_compute = true;
        let _ = outer;
        let name = self.fresh("sp");
        // An init needs a reduction, and spatial points outside the reductions' fibers (the
        // verifier's rule).
        let init_can_run = kinds.contains(&IterKind::Reduce)
            && crate::verify::init_fiber_conflicts(
                &crate::verify::iter_steps(&self.f, &entries),
                &kinds,
            )
            .is_empty();
        let init = if init_can_run && self.rng.chance(1, 2) {
            let mut init_scope = inner.clone();
            init_scope.iterated.clear(); // no nested iterations inside init
                                         // The init runs per point of the spatial iterators: it reads no reduction iterator.
            init_scope.vars.retain(|v| {
                vars.iter()
                    .zip(&kinds)
                    .all(|(w, k)| w != v || *k == IterKind::Spatial)
            });
            let s = self.fallback(&init_scope);
            Some(s)
        } else {
            None
        };
        self.budget -= 1;
        let body = Stmt::seq(self.stmts(&inner, depth.saturating_sub(1)));
        let annotations = self.maybe_attrs();
        Some(Stmt::SparseIteration(Box::new(SparseIteration {
            name,
            axes: entries,
            kinds,
            vars,
            init,
            body,
            annotations,
            span: Span::default(),
        })))
    }

    // ----- stages II and III --------------------------------------------------------------

    fn for_loop(&mut self, sc: &Scope, depth: u32) -> Stmt {
        let var = self.var("i", DType::I32);
        let kind = self.rng.pick(&[
            ForKind::Serial,
            ForKind::Serial,
            ForKind::Parallel,
            ForKind::Vectorized,
            ForKind::Unrolled,
            ForKind::ThreadBinding,
        ]);
        let thread = if kind == ForKind::ThreadBinding {
            let tags = [
                "blockIdx.x",
                "blockIdx.y",
                "threadIdx.x",
                "threadIdx.y",
                "vthread.x",
            ];
            Some(self.rng.pick(&tags).to_string())
        } else {
            None
        };
        let min = if self.rng.chance(1, 5) {
            Expr::int(self.rng.range(1, 4))
        } else {
            Expr::int(0)
        };
        let extent = self.size_expr();
        let annotations = self.maybe_attrs();
        let mut inner = sc.clone();
        inner.vars.push(var);
        inner.loop_vars.push(var);
        let body = Stmt::seq(self.stmts(&inner, depth - 1));
        Stmt::For(Box::new(For {
            var,
            min,
            extent,
            kind,
            thread,
            annotations,
            body,
            span: Span::default(),
        }))
    }

    /// A block iterator binding: an `int32` expression of loop variables, `int32` parameters and
    /// constants.
    fn binding(&mut self, sc: &Scope) -> Expr {
        let mut atoms: Vec<Expr> = sc.loop_vars.iter().map(|v| Expr::Var(*v)).collect();
        if atoms.is_empty() || self.rng.chance(1, 6) {
            atoms.push(Expr::int(self.rng.range(0, 7)));
        }
        let a = atoms[self.rng.below(atoms.len())].clone();
        match self.rng.below(5) {
            0 => Expr::mul(a, Expr::int(self.rng.range(2, 4))),
            1 if atoms.len() > 1 => {
                let b = atoms[self.rng.below(atoms.len())].clone();
                Expr::add(a, b)
            }
            2 => Expr::binary(BinOp::FloorMod, a, Expr::int(self.rng.range(2, 8))),
            _ => a,
        }
    }

    fn block(&mut self, sc: &Scope, depth: u32) -> Stmt {
        let n_iters = self.rng.below(4);
        let mut iters = Vec::new();
        for _ in 0..n_iters {
            let var = self.var("vb", DType::I32);
            let kind = if self.rng.chance(1, 3) {
                IterKind::Reduce
            } else {
                IterKind::Spatial
            };
            let min = if self.rng.chance(1, 6) {
                Expr::int(self.rng.range(1, 3))
            } else {
                Expr::int(0)
            };
            let extent = self.size_expr();
            let binding = self.binding(sc);
            iters.push(BlockIter {
                var,
                min,
                extent,
                kind,
                binding,
            });
        }
        // inside the block: parameters, its iterators, visible buffers; no outer loop variables
        let mut inner = Scope {
            vars: self.scalar_params.clone(),
            loop_vars: Vec::new(),
            buffers: sc.buffers.clone(),
            iterated: Vec::new(),
            in_compute: true,
        };
        inner.vars.extend(iters.iter().map(|i| i.var));
        let mut alloc_buffers = Vec::new();
        if self.rng.chance(1, 4) {
            let b = self.local_buffer();
            alloc_buffers.push(b);
            inner.buffers.push(b);
        }
        let region = |g: &mut Gen| -> Option<BufferRegion> {
            if inner.buffers.is_empty() {
                return None;
            }
            let buffer = g.rng.pick(&inner.buffers);
            let n = g.f.buffers[buffer].ndim();
            let ranges = (0..n)
                .map(|_| {
                    let lo = g.expr(&inner, DType::I32, 1);
                    let ext = Expr::int(g.rng.range(1, 4));
                    (lo, ext)
                })
                .collect();
            Some(BufferRegion { buffer, ranges })
        };
        let reads: Vec<BufferRegion> = (0..self.rng.below(3))
            .filter_map(|_| region(self))
            .collect();
        let writes: Vec<BufferRegion> = (0..self.rng.below(2))
            .filter_map(|_| region(self))
            .collect();
        let predicate = if self.rng.chance(1, 4) {
            Some(self.expr(&inner, DType::Bool, 2))
        } else {
            None
        };
        let has_reduce = iters.iter().any(|i| i.kind == IterKind::Reduce);
        let init = if has_reduce && self.rng.chance(1, 2) {
            Some(Stmt::seq(self.stmts(&inner, 0)))
        } else {
            None
        };
        let annotations = self.maybe_attrs();
        let body = Stmt::seq(self.stmts(&inner, depth - 1));
        let name = self.fresh("blk");
        Stmt::Block(Box::new(Block {
            name,
            iters,
            predicate,
            reads,
            writes,
            init,
            alloc_buffers,
            annotations,
            body,
            span: Span::default(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify_func;

    #[test]
    fn generated_functions_verify() {
        for stage in [Stage::I, Stage::II, Stage::III] {
            for seed in 0..200u64 {
                let size = 1 + (seed % MAX_SIZE as u64) as u32;
                let f = gen_func(stage, seed, size);
                if let Err(e) = verify_func(&f) {
                    panic!("{stage:?} seed {seed} size {size}: {e:#?}\n{f:#?}");
                }
            }
        }
    }

    #[test]
    fn generation_is_deterministic() {
        for seed in 0..20 {
            assert_eq!(gen_func(Stage::I, seed, 5), gen_func(Stage::I, seed, 5));
            assert_eq!(gen_func(Stage::III, seed, 5), gen_func(Stage::III, seed, 5));
        }
    }

    #[test]
    fn stage_one_covers_every_construct() {
        let mut kinds = std::collections::HashSet::new();
        let (mut fuse, mut attach, mut nested) = (false, false, false);
        for seed in 0..300u64 {
            let f = gen_func(Stage::I, seed, 1 + (seed % MAX_SIZE as u64) as u32);
            for (_, a) in f.axes.iter() {
                kinds.insert(a.kind);
            }
            f.body.visit(&mut |s| {
                if let Stmt::SparseIteration(it) = s {
                    fuse |= it.axes.iter().any(|e| matches!(e, IterAxis::Fuse(_)));
                    attach |= it.axes.iter().any(|e| matches!(e, IterAxis::Attach { .. }));
                    let mut inner = false;
                    it.body
                        .visit(&mut |t| inner |= matches!(t, Stmt::SparseIteration(_)));
                    nested |= inner;
                }
            });
        }
        assert_eq!(kinds.len(), 4);
        assert!(
            fuse && attach && nested,
            "fuse {fuse} attach {attach} nested {nested}"
        );
    }

    #[test]
    fn stage_three_covers_every_loop_kind_and_block_part() {
        let mut kinds = std::collections::HashSet::new();
        let (mut init, mut pred, mut alloc, mut allocate, mut let_stmt, mut else_case) =
            (false, false, false, false, false, false);
        for seed in 0..300u64 {
            let f = gen_func(Stage::III, seed, 1 + (seed % MAX_SIZE as u64) as u32);
            f.body.visit(&mut |s| match s {
                Stmt::For(l) => {
                    kinds.insert(l.kind);
                }
                Stmt::Block(b) => {
                    init |= b.init.is_some();
                    pred |= b.predicate.is_some();
                    alloc |= !b.alloc_buffers.is_empty();
                }
                Stmt::Allocate(_) => allocate = true,
                Stmt::Let(_) => let_stmt = true,
                Stmt::If(i) => else_case |= i.else_case.is_some(),
                _ => {}
            });
        }
        assert_eq!(kinds.len(), 5);
        assert!(init && pred && alloc && allocate && let_stmt && else_case);
    }
}
