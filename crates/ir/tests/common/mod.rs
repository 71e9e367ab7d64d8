//! A small hand builder for IR used by the equality and verifier tests, and three fixtures
//! (stage-I csrmm, stage-II and stage-III row-sum kernels) with knobs for single changes.
#![allow(dead_code)]

use sparsetir_ir::*;

/// Builds a `PrimFunc` step by step.
pub struct Builder {
    pub f: PrimFunc,
    next_span: usize,
}

impl Builder {
    pub fn new(name: &str) -> Self {
        Builder {
            f: PrimFunc::new(name),
            next_span: 1,
        }
    }
    /// A fresh non-empty span (distinct per call) so errors can be located.
    pub fn span(&mut self) -> Span {
        let s = Span::new(self.next_span * 10, self.next_span * 10 + 5);
        self.next_span += 1;
        s
    }
    pub fn param(&mut self, name: &str, dtype: DType) -> VarId {
        let v = self.f.add_var(name, dtype);
        self.f.params.push(v);
        v
    }
    pub fn var(&mut self, name: &str, dtype: DType) -> VarId {
        self.f.add_var(name, dtype)
    }
    pub fn dense_fixed(&mut self, name: &str, length: Expr) -> AxisId {
        let mut a = Axis::dense_fixed(name, length);
        a.span = self.span();
        self.f.axes.append(a)
    }
    #[allow(clippy::too_many_arguments)]
    pub fn axis(
        &mut self,
        name: &str,
        kind: AxisKind,
        parent: AxisId,
        length: Expr,
        nnz: Option<Expr>,
        nnz_cols: Option<Expr>,
        indptr: Option<VarId>,
        indices: Option<VarId>,
    ) -> AxisId {
        let span = self.span();
        self.f.axes.append(Axis {
            name: name.into(),
            kind,
            parent: Some(parent),
            length,
            nnz,
            nnz_cols,
            indptr,
            indices,
            idtype: DType::I32,
            sorted: true,
            assembled: false,
            span,
        })
    }
    fn buffer(
        &mut self,
        name: &str,
        decl: BufferDecl,
        shape: BufferShape,
        dtype: DType,
    ) -> BufferId {
        let span = self.span();
        self.f.buffers.append(Buffer {
            name: name.into(),
            decl,
            shape,
            dtype,
            scope: "global".into(),
            strides: vec![],
            extra_storage: None,
            default_value: None,
            span,
        })
    }
    /// `name = T.sp.match_buffer(data, axes, dtype)` at function level.
    pub fn match_sparse(
        &mut self,
        name: &str,
        data: VarId,
        axes: Vec<AxisId>,
        dtype: DType,
    ) -> BufferId {
        let b = self.buffer(
            name,
            BufferDecl::Match { data },
            BufferShape::Sparse(axes),
            dtype,
        );
        self.f.buffer_decls.push(b);
        b
    }
    /// `name = T.match_buffer(data, dims, dtype)` at function level.
    pub fn match_dense(
        &mut self,
        name: &str,
        data: VarId,
        dims: Vec<Expr>,
        dtype: DType,
    ) -> BufferId {
        let b = self.buffer(
            name,
            BufferDecl::Match { data },
            BufferShape::Dense(dims),
            dtype,
        );
        self.f.buffer_decls.push(b);
        b
    }
    /// A dense alloc buffer that is not listed at function level (for blocks and `T.allocate`).
    pub fn alloc_dense(&mut self, name: &str, dims: Vec<Expr>, dtype: DType) -> BufferId {
        self.buffer(name, BufferDecl::Alloc, BufferShape::Dense(dims), dtype)
    }
    pub fn store(&mut self, buffer: BufferId, indices: Vec<Expr>, value: Expr) -> Stmt {
        let span = self.span();
        Stmt::Store(Store {
            buffer,
            indices,
            value,
            span,
        })
    }
    pub fn iteration(
        &mut self,
        name: &str,
        axes: Vec<IterAxis>,
        kinds: &str,
        vars: Vec<VarId>,
        init: Option<Stmt>,
        body: Stmt,
    ) -> Stmt {
        let span = self.span();
        Stmt::SparseIteration(Box::new(SparseIteration {
            name: name.into(),
            axes,
            kinds: kinds.chars().filter_map(IterKind::from_letter).collect(),
            vars,
            init,
            body,
            annotations: Attrs::new(),
            span,
        }))
    }
    pub fn serial(&mut self, var: VarId, extent: Expr, body: Stmt) -> Stmt {
        let span = self.span();
        Stmt::For(Box::new(For {
            var,
            min: Expr::int(0),
            extent,
            kind: ForKind::Serial,
            thread: None,
            annotations: Attrs::new(),
            body,
            span,
        }))
    }
    pub fn finish(mut self, stage: Stage, body: Stmt) -> PrimFunc {
        self.f.set_stage(stage);
        self.f.body = body;
        self.f
    }
}

pub fn v(x: VarId) -> Expr {
    Expr::Var(x)
}

/// Knobs of the csrmm fixture: each field away from its default is one single change.
#[derive(Clone)]
pub struct CsrmmOpts {
    /// Use other names for every variable, axis, buffer and the function.
    pub rename: bool,
    /// Declare the variables in another arena order and add an unused variable.
    pub shuffle: bool,
    pub init_value: f64,
    pub op: BinOp,
    pub c_dtype: DType,
    pub kinds: &'static str,
    pub iter_name: &'static str,
    pub attr_value: i64,
    pub extra_stmt: bool,
    pub swap_operands: bool,
    /// Read `A` where `B` is read (A has the same arity).
    pub wrong_buffer: bool,
}

impl Default for CsrmmOpts {
    fn default() -> Self {
        CsrmmOpts {
            rename: false,
            shuffle: false,
            init_value: 0.0,
            op: BinOp::Add,
            c_dtype: DType::F32,
            kinds: "SRS",
            iter_name: "csrmm",
            attr_value: 1,
            extra_stmt: false,
            swap_operands: false,
            wrong_buffer: false,
        }
    }
}

/// The csrmm kernel of SPEC §6 at stage I:
/// `C[i, k] = C[i, k] + A[i, j] * B[j, k]` over `[I, J, K] "SRS"`.
pub fn csrmm(o: &CsrmmOpts) -> PrimFunc {
    let n = |plain: &str, other: &str| {
        if o.rename {
            other.to_string()
        } else {
            plain.to_string()
        }
    };
    let mut b = Builder::new(&n("csrmm", "spmm_kernel"));
    let mut early = Vec::new();
    if o.shuffle {
        // iterator variables first, plus an unused variable, then the parameters
        b.var("unused", DType::F64);
        for name in ["k", "j", "i"] {
            early.push(b.var(&n(name, &format!("{name}{name}")), DType::I32));
        }
    }
    let a = b.param(&n("a", "p0"), DType::Handle);
    let bb = b.param(&n("b", "p1"), DType::Handle);
    let c = b.param(&n("c", "p2"), DType::Handle);
    let indptr = b.param(&n("indptr", "p3"), DType::Handle);
    let indices = b.param(&n("indices", "p4"), DType::Handle);
    let m = b.param(&n("m", "p5"), DType::I32);
    let nn = b.param(&n("n", "p6"), DType::I32);
    let nnz = b.param(&n("nnz", "p7"), DType::I32);
    let k = b.param(&n("k", "p8"), DType::I32);
    let ax_i = b.dense_fixed(&n("I", "Row"), v(m));
    let ax_j = b.axis(
        &n("J", "Col"),
        AxisKind::CompressedVaried,
        ax_i,
        v(nn),
        Some(v(nnz)),
        None,
        Some(indptr),
        Some(indices),
    );
    let ax_jd = b.dense_fixed(&n("J_detach", "ColD"), v(nn));
    let ax_k = b.dense_fixed(&n("K", "Feat"), v(k));
    let buf_a = b.match_sparse(&n("A", "AA"), a, vec![ax_i, ax_j], DType::F32);
    let buf_b = b.match_sparse(&n("B", "BB"), bb, vec![ax_jd, ax_k], DType::F32);
    let buf_c = b.match_sparse(&n("C", "CC"), c, vec![ax_i, ax_k], o.c_dtype);
    let (vi, vj, vk) = if o.shuffle {
        (early[2], early[1], early[0])
    } else {
        (
            b.var(&n("i", "ii"), DType::I32),
            b.var(&n("j", "jj"), DType::I32),
            b.var(&n("k", "kk"), DType::I32),
        )
    };
    let init_value = if o.c_dtype == DType::F32 {
        Expr::f32(o.init_value)
    } else {
        Expr::Float(o.init_value, o.c_dtype)
    };
    let init = b.store(buf_c, vec![v(vi), v(vk)], init_value);
    let lhs = Expr::load(buf_a, vec![v(vi), v(vj)]);
    let rhs = Expr::load(
        if o.wrong_buffer { buf_a } else { buf_b },
        vec![v(vj), v(vk)],
    );
    let prod = if o.swap_operands {
        Expr::mul(rhs, lhs)
    } else {
        Expr::mul(lhs, rhs)
    };
    let value = Expr::binary(o.op, Expr::load(buf_c, vec![v(vi), v(vk)]), prod);
    let mut body = vec![b.store(buf_c, vec![v(vi), v(vk)], value)];
    if o.extra_stmt {
        body.push(Stmt::Evaluate(Expr::int(0)));
    }
    let body = Stmt::seq(body);
    let mut it = b.iteration(
        o.iter_name,
        vec![
            IterAxis::Axis(ax_i),
            IterAxis::Axis(ax_j),
            IterAxis::Axis(ax_k),
        ],
        o.kinds,
        vec![vi, vj, vk],
        Some(init),
        body,
    );
    if let Stmt::SparseIteration(s) = &mut it {
        s.annotations.set("hint", AttrValue::Int(o.attr_value));
    }
    b.finish(Stage::I, it)
}

/// Knobs of the stage-III fixture.
#[derive(Clone, Default)]
pub struct RowSumOpts {
    pub rename: bool,
    pub block_name: Option<&'static str>,
    /// Use a parallel loop instead of a serial one for `i`.
    pub parallel: bool,
}

/// Stage III: `y[i] = sum_j x[i, j]` with loops `i`, `j` and a block `rowsum` with iterators
/// `vi` (spatial) and `vj` (reduce), an init, read/write regions and a scratch allocation.
pub fn rowsum(o: &RowSumOpts) -> PrimFunc {
    let n = |plain: &str, other: &str| {
        if o.rename {
            other.to_string()
        } else {
            plain.to_string()
        }
    };
    let mut b = Builder::new(&n("rowsum", "rs"));
    let x = b.param(&n("x", "q0"), DType::Handle);
    let y = b.param(&n("y", "q1"), DType::Handle);
    let m = b.param(&n("m", "q2"), DType::I32);
    let nn = b.param(&n("n", "q3"), DType::I32);
    let bx = b.match_dense(&n("X", "XX"), x, vec![v(m), v(nn)], DType::F32);
    let by = b.match_dense(&n("Y", "YY"), y, vec![v(m)], DType::F32);
    let i = b.var(&n("i", "ii"), DType::I32);
    let j = b.var(&n("j", "jj"), DType::I32);
    let vi = b.var(&n("vi", "vii"), DType::I32);
    let vj = b.var(&n("vj", "vjj"), DType::I32);
    let init = b.store(by, vec![v(vi)], Expr::f32(0.0));
    let body = b.store(
        by,
        vec![v(vi)],
        Expr::add(
            Expr::load(by, vec![v(vi)]),
            Expr::load(bx, vec![v(vi), v(vj)]),
        ),
    );
    let span = b.span();
    let block = Stmt::Block(Box::new(Block {
        name: o.block_name.unwrap_or("rowsum").into(),
        iters: vec![
            BlockIter {
                var: vi,
                min: Expr::int(0),
                extent: v(m),
                kind: IterKind::Spatial,
                binding: v(i),
            },
            BlockIter {
                var: vj,
                min: Expr::int(0),
                extent: v(nn),
                kind: IterKind::Reduce,
                binding: v(j),
            },
        ],
        predicate: None,
        reads: vec![
            BufferRegion {
                buffer: by,
                ranges: vec![(v(vi), Expr::int(1))],
            },
            BufferRegion {
                buffer: bx,
                ranges: vec![(v(vi), Expr::int(1)), (v(vj), Expr::int(1))],
            },
        ],
        writes: vec![BufferRegion {
            buffer: by,
            ranges: vec![(v(vi), Expr::int(1))],
        }],
        init: Some(init),
        alloc_buffers: vec![],
        annotations: Attrs::new(),
        body,
        span,
    }));
    let inner = b.serial(j, v(nn), block);
    let mut outer = b.serial(i, v(m), inner);
    if o.parallel {
        if let Stmt::For(l) = &mut outer {
            l.kind = ForKind::Parallel;
        }
    }
    b.finish(Stage::III, outer)
}
