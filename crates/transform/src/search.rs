//! Binary-search statement builders used by `lower_sparse_iter`. The IR has no `while`, so a
//! search is a fixed-trip bisection: `low`/`high` live in block-local one-element buffers and a
//! loop of `bits(idtype)` steps halves `[low, high)` while it is non-empty (enough for any range
//! an index of that type can describe).

use sparsetir_ir::{
    BinOp, Buffer, BufferDecl, BufferId, BufferShape, DType, Expr, For, ForKind, IfThenElse,
    PrimFunc, Span, Stmt, Store,
};

use crate::simplify::Simplifier;

/// The state buffers of one search (`low`, `high`), allocated in the search block.
pub(crate) struct SearchState {
    pub low: BufferId,
    pub high: BufferId,
    pub dtype: DType,
}

/// A block-local (`scope="local"`) dense buffer of one dimension, added to `f`'s arena (the
/// block that allocates it lists it).
pub(crate) fn local_buffer(f: &mut PrimFunc, name: &str, extent: Expr, dtype: DType) -> BufferId {
    f.buffers.append(Buffer {
        name: name.to_string(),
        decl: BufferDecl::Alloc,
        shape: BufferShape::Dense(vec![extent]),
        dtype,
        scope: "local".to_string(),
        strides: Vec::new(),
        extra_storage: None,
        default_value: None,
        span: Span::default(),
    })
}

impl SearchState {
    pub fn new(f: &mut PrimFunc, dtype: DType) -> SearchState {
        let low = local_buffer(f, "low", Expr::int(1), dtype);
        let high = local_buffer(f, "high", Expr::int(1), dtype);
        SearchState { low, high, dtype }
    }

    pub fn low(&self) -> Expr {
        Expr::load(self.low, vec![Expr::int(0)])
    }
    fn high_e(&self) -> Expr {
        Expr::load(self.high, vec![Expr::int(0)])
    }
    fn set(&self, b: BufferId, v: Expr) -> Stmt {
        store(b, vec![Expr::int(0)], v)
    }

    /// `low = lo; high = hi; bisect`: after it, `low` is the first position in `[lo, hi)` for
    /// which `go_right(position)` is false (`hi` when there is none), provided `go_right` is
    /// monotone (true then false).
    pub fn bisect(
        &self,
        f: &mut PrimFunc,
        simp: &Simplifier,
        lo: Expr,
        hi: Expr,
        go_right: impl Fn(Expr) -> Expr,
    ) -> Stmt {
        let t = f.add_var("t", self.dtype);
        let mid = Expr::binary(
            BinOp::FloorDiv,
            Expr::add(self.low(), self.high_e()),
            Expr::Int(2, DType::I32),
        );
        let step = Stmt::If(Box::new(IfThenElse {
            cond: go_right(mid.clone()),
            then_case: self.set(self.low, simp.add(f, mid.clone(), Expr::int(1))),
            else_case: Some(self.set(self.high, mid)),
            span: Span::default(),
        }));
        let guarded = Stmt::If(Box::new(IfThenElse {
            cond: Expr::binary(BinOp::Lt, self.low(), self.high_e()),
            then_case: step,
            else_case: None,
            span: Span::default(),
        }));
        let bits = (self.dtype.bits() as i64).max(8);
        let lp = Stmt::For(Box::new(For {
            var: t,
            min: Expr::int(0),
            extent: Expr::int(bits),
            kind: ForKind::Serial,
            thread: None,
            annotations: Default::default(),
            body: guarded,
            span: Span::default(),
        }));
        Stmt::seq(vec![self.set(self.low, lo), self.set(self.high, hi), lp])
    }
}

pub(crate) fn store(buffer: BufferId, indices: Vec<Expr>, value: Expr) -> Stmt {
    Stmt::Store(Store {
        buffer,
        indices,
        value,
        span: Span::default(),
    })
}

/// Lower bound of coordinate `c` among the sorted `len` indices read by `probe(position)`;
/// writes the position into `target` (with `checked`: `-1` when `c` is not stored; without: the
/// insertion point, which is not a valid position of `c`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn lower_bound(
    f: &mut PrimFunc,
    simp: &Simplifier,
    st: &SearchState,
    len: Expr,
    probe: impl Fn(Expr) -> Expr,
    c: Expr,
    target: (BufferId, Vec<Expr>),
    checked: bool,
) -> Stmt {
    let search = st.bisect(f, simp, Expr::int(0), len.clone(), |m| {
        Expr::binary(BinOp::Lt, probe(m), c.clone())
    });
    let (tb, ti) = target;
    let result = if checked {
        let miss = store(tb, ti.clone(), Expr::Int(-1, st.dtype));
        let found = Stmt::If(Box::new(IfThenElse {
            cond: Expr::binary(BinOp::Eq, probe(st.low()), c),
            then_case: store(tb, ti.clone(), st.low()),
            else_case: Some(miss.clone()),
            span: Span::default(),
        }));
        Stmt::If(Box::new(IfThenElse {
            cond: Expr::binary(BinOp::Lt, st.low(), len),
            then_case: found,
            else_case: Some(miss),
            span: Span::default(),
        }))
    } else {
        store(tb, ti, st.low())
    };
    Stmt::seq(vec![search, result])
}

/// The last `r` in `[0, count)` with `start(r) <= p`, written into `target`: with `start`
/// non-decreasing, `start(0) <= p` and `p` below the end of the last element, that is the element
/// whose range `[start(r), start(r + 1))` holds `p` (empty elements are skipped). The search is
/// an upper bound minus one and probes only `start(0 .. count)`.
pub(crate) fn upper_bound_minus_one(
    f: &mut PrimFunc,
    simp: &Simplifier,
    st: &SearchState,
    count: Expr,
    start: impl Fn(Expr) -> Expr,
    p: Expr,
    target: (BufferId, Vec<Expr>),
) -> Stmt {
    let search = st.bisect(f, simp, Expr::int(0), count, |m| {
        Expr::binary(BinOp::Le, start(m), p.clone())
    });
    Stmt::seq(vec![
        search,
        store(target.0, target.1, simp.sub(f, st.low(), Expr::int(1))),
    ])
}
