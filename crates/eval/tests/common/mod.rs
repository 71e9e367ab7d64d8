//! Shared test helpers: a small builder for stage-I functions, deterministic pseudo-random data,
//! sparse test matrices and float comparison.
#![allow(dead_code)]
#![allow(clippy::needless_range_loop)]
use std::collections::HashMap;

use sparsetir_eval::{eval_func, ArgValue, EvalError};
use sparsetir_formats::Tensor;
use sparsetir_ir::{
    Axis, AxisId, AxisKind, BinOp, Buffer, BufferDecl, BufferId, BufferShape, DType, Expr,
    Intrinsic, IterAxis, IterKind, PrimFunc, Span, SparseIteration, Stage, Stmt, Store, VarId,
};

/// Builds a stage-I function by hand.
pub struct Builder {
    pub f: PrimFunc,
}

impl Builder {
    pub fn new(name: &str) -> Builder {
        let mut f = PrimFunc::new(name);
        f.set_stage(Stage::I);
        Builder { f }
    }

    /// A scalar parameter.
    pub fn scalar(&mut self, name: &str, dtype: DType) -> Expr {
        let v = self.f.add_var(name, dtype);
        self.f.params.push(v);
        Expr::Var(v)
    }

    /// A `T.handle` parameter.
    pub fn handle(&mut self, name: &str) -> VarId {
        let v = self.f.add_var(name, DType::Handle);
        self.f.params.push(v);
        v
    }

    pub fn dense_fixed(&mut self, name: &str, length: Expr) -> AxisId {
        self.f.axes.append(Axis::dense_fixed(name, length))
    }

    fn axis(&mut self, name: &str, kind: AxisKind, parent: AxisId, length: Expr) -> Axis {
        let mut a = Axis::dense_fixed(name, length);
        a.kind = kind;
        a.parent = Some(parent);
        a
    }

    /// `compressed_varied(parent, (length, nnz), (indptr, indices))`; handles named
    /// `<name>_indptr` and `<name>_indices`.
    pub fn compressed_varied(
        &mut self,
        name: &str,
        parent: AxisId,
        length: Expr,
        nnz: Expr,
    ) -> AxisId {
        let mut a = self.axis(name, AxisKind::CompressedVaried, parent, length);
        a.nnz = Some(nnz);
        a.indptr = Some(self.handle(&format!("{name}_indptr")));
        a.indices = Some(self.handle(&format!("{name}_indices")));
        self.f.axes.append(a)
    }

    /// `dense_varied(parent, (length, nnz), indptr)`; handle named `<name>_indptr`.
    pub fn dense_varied(
        &mut self,
        name: &str,
        parent: AxisId,
        length: Expr,
        nnz: Option<Expr>,
    ) -> AxisId {
        let mut a = self.axis(name, AxisKind::DenseVaried, parent, length);
        a.nnz = nnz;
        a.indptr = Some(self.handle(&format!("{name}_indptr")));
        self.f.axes.append(a)
    }

    /// `compressed_fixed(parent, (length, c), indices)`; handle named `<name>_indices`.
    pub fn compressed_fixed(
        &mut self,
        name: &str,
        parent: AxisId,
        length: Expr,
        c: Expr,
    ) -> AxisId {
        let mut a = self.axis(name, AxisKind::CompressedFixed, parent, length);
        a.nnz_cols = Some(c);
        a.indices = Some(self.handle(&format!("{name}_indices")));
        self.f.axes.append(a)
    }

    fn buffer(
        &mut self,
        name: &str,
        decl: BufferDecl,
        shape: BufferShape,
        dtype: DType,
    ) -> BufferId {
        let b = self.f.buffers.append(Buffer {
            name: name.to_string(),
            decl,
            shape,
            dtype,
            scope: "global".to_string(),
            strides: Vec::new(),
            extra_storage: None,
            default_value: None,
            span: Span::default(),
        });
        self.f.buffer_decls.push(b);
        b
    }

    /// `name = T.sp.match_buffer(<name lowercased>, axes, dtype)`; the handle is named `name`
    /// in lower case.
    pub fn match_sparse(&mut self, name: &str, axes: &[AxisId], dtype: DType) -> BufferId {
        let h = self.handle(&name.to_lowercase());
        self.buffer(
            name,
            BufferDecl::Match { data: h },
            BufferShape::Sparse(axes.to_vec()),
            dtype,
        )
    }

    pub fn match_dense(&mut self, name: &str, dims: Vec<Expr>, dtype: DType) -> BufferId {
        let h = self.handle(&name.to_lowercase());
        self.buffer(
            name,
            BufferDecl::Match { data: h },
            BufferShape::Dense(dims),
            dtype,
        )
    }

    pub fn alloc_sparse(&mut self, name: &str, axes: &[AxisId], dtype: DType) -> BufferId {
        self.buffer(
            name,
            BufferDecl::Alloc,
            BufferShape::Sparse(axes.to_vec()),
            dtype,
        )
    }

    /// Fresh int32 iterator variables.
    pub fn vars(&mut self, names: &[&str]) -> Vec<Expr> {
        names
            .iter()
            .map(|n| Expr::Var(self.f.add_var(*n, DType::I32)))
            .collect()
    }

    pub fn set_body(&mut self, body: Stmt) {
        self.f.body = body;
    }
}

/// A sparse iteration statement; `vars` are the `Expr::Var`s from [`Builder::vars`].
pub fn sp_iter(
    name: &str,
    axes: Vec<IterAxis>,
    kinds: &str,
    vars: &[Expr],
    init: Option<Stmt>,
    body: Stmt,
) -> Stmt {
    Stmt::SparseIteration(Box::new(SparseIteration {
        name: name.to_string(),
        axes,
        kinds: kinds
            .chars()
            .map(|c| IterKind::from_letter(c).expect("S or R"))
            .collect(),
        vars: vars
            .iter()
            .map(|v| v.as_var().expect("a variable"))
            .collect(),
        init,
        body,
        annotations: Default::default(),
        span: Span::default(),
    }))
}

pub fn ax(a: AxisId) -> IterAxis {
    IterAxis::Axis(a)
}

pub fn ld(b: BufferId, idx: &[&Expr]) -> Expr {
    Expr::load(b, idx.iter().map(|e| (*e).clone()).collect())
}

pub fn st(b: BufferId, idx: &[&Expr], value: Expr) -> Stmt {
    Stmt::Store(Store {
        buffer: b,
        indices: idx.iter().map(|e| (*e).clone()).collect(),
        value,
        span: Span::default(),
    })
}

pub fn add(a: Expr, b: Expr) -> Expr {
    Expr::add(a, b)
}
pub fn mul(a: Expr, b: Expr) -> Expr {
    Expr::mul(a, b)
}
pub fn sub(a: Expr, b: Expr) -> Expr {
    Expr::sub(a, b)
}
pub fn div(a: Expr, b: Expr) -> Expr {
    Expr::binary(BinOp::Div, a, b)
}
pub fn max(a: Expr, b: Expr) -> Expr {
    Expr::binary(BinOp::Max, a, b)
}
pub fn f32c(x: f64) -> Expr {
    Expr::f32(x)
}
pub fn call(op: Intrinsic, args: Vec<Expr>) -> Expr {
    Expr::Call {
        op,
        args,
        dtype: DType::F32,
    }
}
pub fn min_value_f32() -> Expr {
    Expr::Call {
        op: Intrinsic::MinValue,
        args: vec![],
        dtype: DType::F32,
    }
}

/// Deterministic pseudo-random numbers (64-bit LCG, high bits).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407))
    }
    pub fn next_u32(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }
    /// Uniform in [-1, 1), exactly representable in f32.
    pub fn val(&mut self) -> f64 {
        (self.next_u32() % 2048) as f64 / 1024.0 - 1.0
    }
    pub fn below(&mut self, n: u32) -> u32 {
        self.next_u32() % n
    }
    pub fn vals(&mut self, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.val()).collect()
    }
}

/// A CSR matrix in plain vectors.
#[derive(Clone, Debug)]
pub struct Csr {
    pub m: usize,
    pub n: usize,
    pub indptr: Vec<i64>,
    pub indices: Vec<i64>,
    pub vals: Vec<f64>,
}

impl Csr {
    /// Random pattern: each entry kept with probability `pct`%; rows in `empty` are empty, rows in
    /// `full` hold every column.
    pub fn random(
        rng: &mut Rng,
        m: usize,
        n: usize,
        pct: u32,
        empty: &[usize],
        full: &[usize],
    ) -> Csr {
        let mut indptr = vec![0i64];
        let mut indices = Vec::new();
        for i in 0..m {
            for j in 0..n {
                let keep = if empty.contains(&i) {
                    false
                } else if full.contains(&i) {
                    true
                } else {
                    rng.below(100) < pct
                };
                if keep {
                    indices.push(j as i64);
                }
            }
            indptr.push(indices.len() as i64);
        }
        let vals = rng.vals(indices.len());
        Csr {
            m,
            n,
            indptr,
            indices,
            vals,
        }
    }

    pub fn nnz(&self) -> usize {
        self.indices.len()
    }

    /// The dense m×n matrix, `fill` where nothing is stored.
    pub fn dense(&self, fill: f64) -> Vec<Vec<f64>> {
        let mut d = vec![vec![fill; self.n]; self.m];
        for i in 0..self.m {
            for p in self.indptr[i] as usize..self.indptr[i + 1] as usize {
                d[i][self.indices[p] as usize] = self.vals[p];
            }
        }
        d
    }
}

/// Argument maps.
pub fn f32_arr(v: &[f64]) -> ArgValue {
    ArgValue::Array(Tensor::from_f64(DType::F32, v).expect("f32 tensor"))
}
pub fn i32_arr(v: &[i64]) -> ArgValue {
    ArgValue::Array(Tensor::from_i64(DType::I32, v).expect("i32 tensor"))
}

pub fn args(list: Vec<(&str, ArgValue)>) -> HashMap<String, ArgValue> {
    list.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// The f64 values of an array argument.
pub fn out(args: &HashMap<String, ArgValue>, name: &str) -> Vec<f64> {
    match args.get(name) {
        Some(ArgValue::Array(t)) => t.to_f64_vec(),
        other => panic!("argument {name} is not an array: {other:?}"),
    }
}

/// Asserts `got ≈ want` elementwise with relative tolerance 1e-5 (absolute near zero).
pub fn assert_close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let tol = 1e-5 * w.abs().max(1.0);
        assert!((g - w).abs() <= tol, "{what}[{i}]: got {g}, want {w}");
    }
}

pub fn run(f: &PrimFunc, a: &mut HashMap<String, ArgValue>) -> Result<(), EvalError> {
    eval_func(f, a)
}

/// Runs and expects an error whose message contains every one of `needles`.
pub fn expect_err(f: &PrimFunc, mut a: HashMap<String, ArgValue>, needles: &[&str]) {
    match eval_func(f, &mut a) {
        Ok(()) => panic!("expected an error containing {needles:?}"),
        Err(e) => {
            for n in needles {
                assert!(e.message.contains(n), "error `{}` lacks `{n}`", e.message);
            }
        }
    }
}
