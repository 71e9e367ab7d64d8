//! Explicit SIMD for `vectorize`d loops: where every access of the loop body is contiguous in
//! the loop variable or does not move with it, the loop is written one machine vector at a time
//! with GCC/Clang vector types (`SPTIR_VBYTES` bytes: 64 with AVX-512, 32 otherwise).
//!
//! Why not leave it to `#pragma omp simd`: gcc 12 keeps a local accumulator row such as SpMM's
//! `C_local[128]` in memory across the reduction loop (a load and a store per element per stored
//! nonzero) and prefers 256-bit vectors on AVX-512 machines; written with vector types the row
//! lives in registers (measured 1.2–1.4× on SpMM with feature widths 32 and 128).
//!
//! The plan is all-or-nothing: a body with anything else (a gather, a nested loop, a call on a
//! moving value, a cast of a vector, a trip count that is not a multiple of 16 elements) is
//! written as the plain `omp simd` loop.

use std::collections::HashMap;

use sparsetir_ir::{
    BinOp, BufferId, DType, Expr, For, ForKind, Intrinsic, IterKind, Stmt, UnOp, VarId,
};

use super::{const_int, half, AttrValue, Res, Stride, Writer, SIMD_MASKED_TAIL_ATTR};

/// The state of a loop being written one vector at a time.
pub(super) struct VecLoop {
    /// How far each variable moves per step of the loop variable (0 or 1 for the ones in the
    /// plan; the loop variable itself and the block iterators bound to it).
    strides: HashMap<VarId, i64>,
    /// The element type of every vector in the loop.
    dtype: DType,
    /// The C vector type of the loads when it is not the machine vector (`sptir_v_*`): a lane
    /// reduction's accumulator type, `lanes` elements wide.
    ty: Option<String>,
    /// With `ty`: its number of elements.
    lanes: i64,
    /// Whether loads through a contiguous `int32` index array (`X[I[v]]`) are allowed, as
    /// AVX-512 gathers (only inside `#if defined(__AVX512F__)`, with 16-lane `float` vectors).
    gathers: bool,
    /// Inside a gathering loop's last, partial step: the C name of the `__mmask16` of the
    /// lanes that exist; loads and gathers read only those (the others read as 0).
    pub(super) mask: Option<String>,
}

/// Whether an expression is the same in every lane or a vector.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Class {
    Uniform,
    Vector,
}

/// The C names of the vector type and helpers of an element type.
fn suffix(dt: DType) -> Option<&'static str> {
    match dt {
        DType::F32 => Some("f32"),
        DType::F64 => Some("f64"),
        _ => None,
    }
}

/// The helpers the vector loops use (added to the module's head when a loop used them).
pub(super) const VECTOR_PRELUDE: &str = r#"#if defined(__AVX512F__)
#define SPTIR_VBYTES 64
#else
#define SPTIR_VBYTES 32
#endif
/* Unaligned, aliasing vector types: the GCC/Clang way to load and store a vector anywhere. */
typedef float sptir_v_f32 __attribute__((vector_size(SPTIR_VBYTES), aligned(4), may_alias));
typedef double sptir_v_f64 __attribute__((vector_size(SPTIR_VBYTES), aligned(8), may_alias));
#define SPTIR_VL_f32 (SPTIR_VBYTES / 4)
#define SPTIR_VL_f64 (SPTIR_VBYTES / 8)
static inline sptir_v_f32 sptir_vld_f32(const float* p) { return *(const sptir_v_f32*)p; }
static inline sptir_v_f64 sptir_vld_f64(const double* p) { return *(const sptir_v_f64*)p; }
static inline void sptir_vst_f32(float* p, sptir_v_f32 v) { *(sptir_v_f32*)p = v; }
static inline void sptir_vst_f64(double* p, sptir_v_f64 v) { *(sptir_v_f64*)p = v; }
static inline sptir_v_f32 sptir_vbc_f32(float x) { return (sptir_v_f32){0} + x; }
static inline sptir_v_f64 sptir_vbc_f64(double x) { return (sptir_v_f64){0} + x; }

"#;

/// What gathering lane loops need (added to the module's head when one was written).
pub(super) const GATHER_PRELUDE: &str = r#"#if defined(__AVX512F__)
#include <immintrin.h>
typedef int32_t sptir_v16_i32 __attribute__((vector_size(64), aligned(4), may_alias));
#endif

"#;

/// The trip count must be a multiple of this many elements (the widest vector: 64 bytes).
fn min_multiple(dt: DType) -> i64 {
    512 / i64::from(dt.bits().max(1))
}

impl VecLoop {
    /// The element type of the loop's vectors.
    pub(super) fn dtype(&self) -> DType {
        self.dtype
    }

    /// The C vector type of the loop's values: the lane type, or the machine vector.
    pub(super) fn c_type(&self) -> Option<String> {
        match &self.ty {
            Some(t) => Some(t.clone()),
            None => Some(format!("sptir_v_{}", suffix(self.dtype)?)),
        }
    }

    /// How far `e` (an integer expression) moves per step of the loop variable, when it is
    /// affine in the moving variables; `None` otherwise.
    fn stride(&self, e: &Expr) -> Option<i64> {
        match e {
            Expr::Int(..) | Expr::Bool(_) | Expr::Float(..) => Some(0),
            Expr::Var(v) => Some(self.strides.get(v).copied().unwrap_or(0)),
            Expr::Binary(BinOp::Add, a, b) => self.stride(a)?.checked_add(self.stride(b)?),
            Expr::Binary(BinOp::Sub, a, b) => self.stride(a)?.checked_sub(self.stride(b)?),
            Expr::Binary(BinOp::Mul, a, b) => {
                let (sa, sb) = (self.stride(a)?, self.stride(b)?);
                match (sa, sb) {
                    (0, 0) => Some(0),
                    (s, 0) => const_int(b).and_then(|c| s.checked_mul(c)),
                    (0, s) => const_int(a).and_then(|c| s.checked_mul(c)),
                    _ => None,
                }
            }
            Expr::Cast(dt, a) if dt.is_integer() => self.stride(a),
            Expr::Let { .. } => None,
            other => {
                // Anything else may depend on a moving variable only not at all.
                let mut moving = false;
                other.for_each_child(|c| moving |= self.stride(c) != Some(0));
                (!moving).then_some(0)
            }
        }
    }
}

impl Writer<'_> {
    /// The flat stride of `buffer[indices]` in the loop (`None` when it is not affine or the
    /// buffer's layout is not known).
    fn access_stride(&self, vl: &VecLoop, buffer: BufferId, indices: &[Expr]) -> Option<i64> {
        let info = self.bufs.get(buffer.index()).cloned().flatten()?;
        if info.strides.len() != indices.len() {
            return None;
        }
        let mut total = 0i64;
        for (i, s) in indices.iter().zip(&info.strides) {
            let d = vl.stride(i)?;
            if d == 0 {
                continue;
            }
            match s {
                Stride::Const(c) => total = total.checked_add(d.checked_mul(*c)?)?,
                Stride::Local(_) => return None,
            }
        }
        Some(total)
    }

    /// The class of a value expression in the loop, `None` when the loop cannot be written
    /// with vectors.
    pub(super) fn classify(&self, vl: &VecLoop, e: &Expr) -> Option<Class> {
        match e {
            Expr::Load { buffer, indices } => {
                let dt = self.func.buffers.get(*buffer)?.dtype;
                if vl.gathers && self.gather_index(vl, *buffer, indices).is_some() {
                    return Some(Class::Vector);
                }
                match self.access_stride(vl, *buffer, indices)? {
                    0 => Some(Class::Uniform),
                    1 if dt == vl.dtype => Some(Class::Vector),
                    _ => None,
                }
            }
            Expr::Binary(BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div, a, b) => {
                let (ca, cb) = (self.classify(vl, a)?, self.classify(vl, b)?);
                if ca == Class::Uniform && cb == Class::Uniform {
                    return Some(Class::Uniform);
                }
                // A vector operand: both sides must have the loop's element type (the scalar
                // side is broadcast by the vector extension).
                let ok = [a, b].iter().all(|x| x.dtype(self.func) == vl.dtype);
                ok.then_some(Class::Vector)
            }
            // Lane-wise helpers (`vector_math`): float `max`/`min`, `exp` of `float`s.
            Expr::Binary(BinOp::Max | BinOp::Min, a, b) if vl.dtype.is_float() => {
                let (ca, cb) = (self.classify(vl, a)?, self.classify(vl, b)?);
                if ca == Class::Uniform && cb == Class::Uniform {
                    return Some(Class::Uniform);
                }
                let ok = [a, b].iter().all(|x| x.dtype(self.func) == vl.dtype);
                ok.then_some(Class::Vector)
            }
            Expr::Call {
                op: Intrinsic::Exp,
                args,
                dtype: DType::F32,
            } if vl.dtype == DType::F32 && args.len() == 1 => {
                let c = self.classify(vl, &args[0])?;
                (c == Class::Uniform || args[0].dtype(self.func) == DType::F32).then_some(c)
            }
            Expr::Unary(UnOp::Neg, a) => self.classify(vl, a),
            // A select on a float comparison (`vector_math`'s `sel_*`): every lane computes
            // both values, so neither may read memory or divide (the scalar `?:` skips one).
            Expr::Select(c, a, b) if vl.dtype.is_float() => {
                let Expr::Binary(op, x, y) = &**c else {
                    return None;
                };
                if !op.is_comparison() {
                    return None;
                }
                if [a, b].iter().any(|v| reads_or_divides(v)) {
                    return None;
                }
                let parts = [x, y, a, b];
                let mut uniform = true;
                for p in parts {
                    uniform &= self.classify(vl, p)? == Class::Uniform;
                }
                if uniform {
                    return Some(Class::Uniform);
                }
                let ok = parts.iter().all(|p| p.dtype(self.func) == vl.dtype);
                ok.then_some(Class::Vector)
            }
            Expr::Cast(to, a) if self.widening(vl, *to, a).is_some() => {
                let (buffer, indices) = self.widening(vl, *to, a)?;
                match self.access_stride(vl, buffer, indices)? {
                    0 => Some(Class::Uniform),
                    1 => Some(Class::Vector),
                    _ => None,
                }
            }
            Expr::Let { .. } => None,
            other => {
                // Everything else must not move with the loop, inside and out.
                let mut ok = true;
                other.visit(&mut |z| match z {
                    Expr::Var(v) => ok &= vl.strides.get(v).copied().unwrap_or(0) == 0,
                    Expr::Load { buffer, indices } => {
                        ok &= self.access_stride(vl, *buffer, indices) == Some(0)
                    }
                    Expr::Let { .. } => ok = false,
                    _ => {}
                });
                ok.then_some(Class::Uniform)
            }
        }
    }

    /// Checks the loop body, recording the strides of block iterators; `false` when any
    /// statement cannot be written with vectors.
    fn plan_stmt(&self, vl: &mut VecLoop, s: &Stmt) -> bool {
        match s {
            Stmt::Seq(v) => v.iter().all(|x| self.plan_stmt(vl, x)),
            Stmt::Block(b) => {
                if !b.alloc_buffers.is_empty() {
                    return false;
                }
                for it in &b.iters {
                    let Some(st) = vl.stride(&it.binding) else {
                        return false;
                    };
                    // Spatial iterators move by 0 or 1 element per step; reduction iterators stay put.
                    if !(st == 0 || (st == 1 && it.kind != IterKind::Reduce)) {
                        return false;
                    }
                    vl.strides.insert(it.var, st);
                }
                let uniform = |e: &Expr| vl.stride(e) == Some(0);
                if b.predicate.as_ref().is_some_and(|p| !uniform(p)) {
                    return false;
                }
                if b.iters.iter().any(|it| !uniform(&it.min)) {
                    return false;
                }
                if let Some(init) = &b.init {
                    if !self.plan_stmt(vl, init) {
                        return false;
                    }
                }
                self.plan_stmt(vl, &b.body)
            }
            Stmt::Store(st) => {
                let Some(buf) = self.func.buffers.get(st.buffer) else {
                    return false;
                };
                let class = self.classify(vl, &st.value);
                // A 16-bit float buffer takes `float` vectors from a machine-width loop (a
                // narrowing store: the value rounds once, as a scalar store rounds it).
                let narrowing =
                    half::is_half(buf.dtype) && vl.dtype == DType::F32 && vl.ty.is_none();
                (buf.dtype == vl.dtype || narrowing)
                    && self.access_stride(vl, st.buffer, &st.indices) == Some(1)
                    && (class == Some(Class::Uniform)
                        || (class.is_some() && st.value.dtype(self.func) == vl.dtype))
            }
            Stmt::If(i) => {
                vl.stride(&i.cond) == Some(0)
                    && self.plan_stmt(vl, &i.then_case)
                    && i.else_case.as_ref().is_none_or(|e| self.plan_stmt(vl, e))
            }
            _ => false,
        }
    }

    /// The trip count of `f` when it may be written with vectors: a vectorised loop without
    /// annotations, with a constant start and a positive constant trip count.
    fn vector_trip_count(f: &For) -> Option<i64> {
        if f.kind != ForKind::Vectorized || !f.annotations.is_empty() {
            return None;
        }
        const_int(&f.min)?;
        const_int(&f.extent).filter(|&ext| ext > 0)
    }

    /// The element type of the first store in `f`'s body ([`Writer::plan_stmt`] then holds
    /// every store to it).
    fn first_store_dtype(&self, f: &For) -> Option<DType> {
        let mut dtype = None;
        f.body.visit(&mut |s| {
            if let Stmt::Store(st) = s {
                if dtype.is_none() {
                    dtype = self.func.buffers.get(st.buffer).map(|b| b.dtype);
                }
            }
        });
        dtype
    }

    /// Plans `f`'s body for vectors of `dtype` (`lanes`: of the lane type of that many
    /// elements, `None` for the machine's widest), with or without gathered loads.
    fn plan_loop(
        &self,
        f: &For,
        dtype: DType,
        lanes: Option<i64>,
        gathers: bool,
    ) -> Option<VecLoop> {
        let mut vl = VecLoop {
            strides: HashMap::from([(f.var, 1)]),
            dtype,
            ty: lanes.map(|n| lane_type(dtype, n)),
            lanes: lanes.unwrap_or(0),
            gathers,
            mask: None,
        };
        self.plan_stmt(&mut vl, &f.body).then_some(vl)
    }

    /// The plan for writing `f` with vectors, if it has one: a vectorised loop with a constant
    /// start and a constant trip count that is a multiple of the widest vector, whose stores
    /// all go to consecutive elements of one float type.
    fn vector_plan(&self, f: &For) -> Option<VecLoop> {
        let ext = Self::vector_trip_count(f)?;
        let dtype = self.vector_dtype(f)?;
        suffix(dtype)?;
        if ext % min_multiple(dtype) != 0 {
            return None;
        }
        self.plan_loop(f, dtype, None, false)
    }

    /// The plan for writing `f` 16 `float`s at a time with AVX-512 gathers for its `X[I[v]]`
    /// loads (`I` an `int32` array contiguous in the loop), where [`Writer::vector_plan`] has
    /// none because of them: a trip count that is a multiple of 16, stores of `float`s to
    /// consecutive elements. SpMV on SELL-C (a chunk's 16 rows side by side) is this loop.
    fn gather_vector_plan(&self, f: &For) -> Option<VecLoop> {
        let ext = Self::vector_trip_count(f)?;
        if ext % 16 != 0 || self.first_store_dtype(f)? != DType::F32 {
            return None;
        }
        self.plan_loop(f, DType::F32, Some(16), true)
    }

    /// Writes `f` one vector at a time when it has a plan; `Ok(false)` (nothing written)
    /// otherwise. A loop that needs gathers is written 16 lanes at a time where the machine
    /// has AVX-512, as the plain `omp simd` loop elsewhere.
    pub(super) fn try_write_vector_loop(&mut self, f: &For) -> Res<bool> {
        if self.vec_loop.is_some() || self.simd_acc.is_some() || self.prefetch_clamp.is_some() {
            return Ok(false);
        }
        if let Some(plan) = self.vector_plan(f) {
            let sfx = suffix(plan.dtype).unwrap_or("f32");
            self.uses_vectors = true;
            self.write_vector_steps(f, plan, &format!("SPTIR_VL_{sfx}"))?;
            return Ok(true);
        }
        if let Some(plan) = self.runtime_vector_plan(f) {
            self.uses_vectors = true;
            self.write_runtime_vector_steps(f, plan)?;
            return Ok(true);
        }
        let Some(plan) = self.gather_vector_plan(f) else {
            return Ok(false);
        };
        self.lane_types.insert((DType::F32, 16));
        self.uses_gathers = true;
        self.line("#if defined(__AVX512F__)");
        self.write_vector_steps(f, plan, "16")?;
        self.line("#else");
        self.write_loop(f, Some("omp simd".to_string()))?;
        self.line("#endif");
        Ok(true)
    }

    /// The plan for a vectorised loop whose trip count is only known at run time (a CSR row):
    /// the body as [`Writer::vector_plan`] takes it, written a machine vector at a time while
    /// a whole one remains, the rest one element at a time
    /// ([`Writer::write_runtime_vector_steps`]).
    fn runtime_vector_plan(&self, f: &For) -> Option<VecLoop> {
        let only_masked_tail = f
            .annotations
            .0
            .iter()
            .all(|(k, _)| k == SIMD_MASKED_TAIL_ATTR);
        if f.kind != ForKind::Vectorized || !only_masked_tail || const_int(&f.extent).is_some() {
            return None;
        }
        let dtype = self.vector_dtype(f)?;
        suffix(dtype)?;
        self.plan_loop(f, dtype, None, false)
    }

    /// The element type of a vector loop's vectors: its first store's, `float` for a 16-bit
    /// float buffer (narrowing stores).
    fn vector_dtype(&self, f: &For) -> Option<DType> {
        let dt = self.first_store_dtype(f)?;
        Some(if half::is_half(dt) { DType::F32 } else { dt })
    }

    /// The plan for the last, partial step of a run-time trip count loop annotated
    /// `simd_masked_tail` as one AVX-512 step of 16 `float` lanes, loads and stores masked to
    /// the lanes that exist: a loop of `float` vectors whose every access that moves with the
    /// loop is to a `float` buffer (16-bit ones convert; the masked forms do not).
    fn masked_tail_plan(&self, f: &For, plan: &VecLoop) -> Option<VecLoop> {
        let masked = matches!(
            f.annotations.get(SIMD_MASKED_TAIL_ATTR),
            Some(AttrValue::Int(1)) | Some(AttrValue::Bool(true))
        );
        if !masked || plan.dtype != DType::F32 {
            return None;
        }
        let vl = self.plan_loop(f, DType::F32, Some(16), false)?;
        let mut all_float = true;
        let mut check = |buffer: BufferId, indices: &[Expr]| {
            let moving = self.access_stride(&vl, buffer, indices) != Some(0);
            all_float &= !moving || self.buf_dtype(buffer) == DType::F32;
        };
        f.body.visit(&mut |st| {
            if let Stmt::Store(x) = st {
                check(x.buffer, &x.indices);
                x.value.visit(&mut |e| {
                    if let Expr::Load { buffer, indices } = e {
                        check(*buffer, indices);
                    }
                });
            }
        });
        all_float.then_some(vl)
    }

    /// `v = start; for (; a whole vector remains; v += VL) { vector body }` then
    /// `for (; v < end; ++v) { body }`: the last `< VL` iterations in the scalar form, or
    /// with `simd_masked_tail` on AVX-512 machines one masked step ([`Self::masked_tail_plan`]).
    fn write_runtime_vector_steps(&mut self, f: &For, plan: VecLoop) -> Res<()> {
        let masked = self.masked_tail_plan(f, &plan);
        let has_mask = masked.is_some();
        let sfx = suffix(plan.dtype).unwrap_or("f32");
        let (vdt, ct, vname) = self.loop_var_type(f)?;
        let (start, end) = self.loop_range(f, vdt, ct, &vname)?;
        self.line("{");
        self.indent += 1;
        let v = self.bind(f.var)?;
        self.line(&format!("{ct} {v} = {start};"));
        // The distance in 64 bits: `v + VL` could overflow the loop variable's type.
        self.line(&format!(
            "for (; {v} < {end} && (int64_t){end} - (int64_t){v} >= SPTIR_VL_{sfx}; {v} += SPTIR_VL_{sfx}) {{"
        ));
        self.indent += 1;
        self.vec_loop = Some(plan);
        let r = self.write_stmt(&f.body);
        self.vec_loop = None;
        self.indent -= 1;
        let r = r.and_then(|()| {
            self.line("}");
            if let Some(mut tail) = masked {
                self.lane_types.insert((DType::F32, 16));
                self.uses_gathers = true;
                let k = self.namer.fresh("tail_k");
                self.line("#if defined(__AVX512F__)");
                self.line(&format!("if ({v} < {end}) {{"));
                self.indent += 1;
                self.line(&format!(
                    "const __mmask16 {k} = (__mmask16)((1u << ({end} - {v})) - 1u);"
                ));
                tail.mask = Some(k);
                self.vec_loop = Some(tail);
                let r = self.write_stmt(&f.body);
                self.vec_loop = None;
                self.indent -= 1;
                r?;
                self.line("}");
                self.line("#else");
            }
            self.line(&format!("for (; {v} < {end}; ++{v}) {{"));
            self.indent += 1;
            let r = self.write_stmt(&f.body);
            self.indent -= 1;
            r
        });
        self.unbind(f.var);
        r?;
        self.line("}");
        if has_mask {
            self.line("#endif");
        }
        self.indent -= 1;
        self.line("}");
        Ok(())
    }

    /// `for (v = start; v < end; v += step) { body }` with the body written under `plan`.
    fn write_vector_steps(&mut self, f: &For, plan: VecLoop, step: &str) -> Res<()> {
        let (vdt, ct, vname) = self.loop_var_type(f)?;
        let (start, end) = self.loop_range(f, vdt, ct, &vname)?;
        let v = self.bind(f.var)?;
        self.line(&format!(
            "for ({ct} {v} = {start}; {v} < {end}; {v} += {step}) {{"
        ));
        self.indent += 1;
        self.vec_loop = Some(plan);
        let r = self.write_stmt(&f.body);
        self.vec_loop = None;
        self.indent -= 1;
        self.unbind(f.var);
        r?;
        self.line("}");
        Ok(())
    }

    /// A gather `X[I[..]]`: `X` a one-dimensional `float` buffer of the loop's type (unit
    /// stride), indexed by a load of an `int32` buffer that is contiguous in the loop. Returns
    /// the index load's buffer and indices.
    fn gather_index<'e>(
        &self,
        vl: &VecLoop,
        buffer: BufferId,
        indices: &'e [Expr],
    ) -> Option<(BufferId, &'e [Expr])> {
        let x = self.func.buffers.get(buffer)?;
        let info = self.bufs.get(buffer.index()).cloned().flatten()?;
        if x.dtype != DType::F32 || vl.dtype != DType::F32 || info.strides.len() != 1 {
            return None;
        }
        if !matches!(info.strides[0], Stride::Const(1)) {
            return None;
        }
        let [Expr::Load {
            buffer: ib,
            indices: ii,
        }] = indices
        else {
            return None;
        };
        let ibuf = self.func.buffers.get(*ib)?;
        (ibuf.dtype == DType::I32 && self.access_stride(vl, *ib, ii) == Some(1))
            .then_some((*ib, ii.as_slice()))
    }

    /// `T.Cast("float32", X[..])` of a 16-bit float buffer `X` in a `float` vector loop that
    /// does not gather: a widening load (vector or uniform), as `X` and its indices.
    fn widening<'e>(&self, vl: &VecLoop, to: DType, e: &'e Expr) -> Option<(BufferId, &'e [Expr])> {
        let Expr::Load { buffer, indices } = e else {
            return None;
        };
        let dt = self.func.buffers.get(*buffer)?.dtype;
        (to == DType::F32 && vl.dtype == DType::F32 && !vl.gathers && half::is_half(dt))
            .then_some((*buffer, indices.as_slice()))
    }

    /// In a vector loop: the C text of `T.Cast(to, e)` as a widening vector load of a
    /// contiguous 16-bit float buffer (`None`: not one; see [`half::widen_prelude`]).
    pub(super) fn widening_vector_load(&mut self, to: DType, e: &Expr) -> Res<Option<String>> {
        let Some(vl) = &self.vec_loop else {
            return Ok(None);
        };
        let Some((buffer, indices)) = self.widening(vl, to, e) else {
            return Ok(None);
        };
        if vl.mask.is_some() || self.access_stride(vl, buffer, indices) != Some(1) {
            return Ok(None);
        }
        let lanes = vl.lanes;
        let dt = self.buf_dtype(buffer);
        let sfx = if dt == DType::F16 { "f16" } else { "bf16" };
        self.widen_dtypes.insert(dt);
        let helper = if lanes == 0 {
            self.widen_machine = true;
            format!("sptir_vld_{sfx}")
        } else {
            self.widen_lanes.insert(lanes);
            format!("sptir_wld{lanes}_{sfx}")
        };
        let off = self.offset(buffer, indices)?;
        let name = self.buf_name(buffer)?;
        Ok(Some(format!("{helper}(&{name}[{off}])")))
    }

    /// In a vector loop: the C text of a contiguous load (`None`: not a vector load).
    pub(super) fn vector_load(
        &mut self,
        buffer: BufferId,
        indices: &[Expr],
    ) -> Res<Option<String>> {
        let Some(vl) = &self.vec_loop else {
            return Ok(None);
        };
        let mask = vl.mask.clone();
        if vl.gathers {
            if let Some((ib, ii)) = self.gather_index(vl, buffer, indices) {
                let ii = ii.to_vec();
                let off = self.offset(ib, &ii)?;
                let iname = self.buf_name(ib)?.to_string();
                let name = self.buf_name(buffer)?;
                return Ok(Some(match mask {
                    Some(k) => format!(
                        "((sptir_v16_f32)_mm512_mask_i32gather_ps(_mm512_setzero_ps(), {k}, \
                         _mm512_maskz_loadu_epi32({k}, &{iname}[{off}]), {name}, 4))"
                    ),
                    None => format!(
                        "((sptir_v16_f32)_mm512_i32gather_ps((__m512i)(*(const sptir_v16_i32*)&{iname}[{off}]), {name}, 4))"
                    ),
                }));
            }
        }
        if self.access_stride(vl, buffer, indices) != Some(1) {
            return Ok(None);
        }
        if let Some(k) = mask {
            let off = self.offset(buffer, indices)?;
            let name = self.buf_name(buffer)?;
            return Ok(Some(format!(
                "((sptir_v16_f32)_mm512_maskz_loadu_ps({k}, &{name}[{off}]))"
            )));
        }
        let sfx = suffix(vl.dtype).unwrap_or("f32");
        let ty = vl.ty.clone();
        let off = self.offset(buffer, indices)?;
        let name = self.buf_name(buffer)?;
        Ok(Some(match ty {
            Some(ty) => format!("(*(const {ty}*)&{name}[{off}])"),
            None => format!("sptir_vld_{sfx}(&{name}[{off}])"),
        }))
    }

    /// In a vector loop: writes the store of `value` (C text) to `buffer[indices]` as a vector
    /// store, broadcasting a uniform value; `Ok(false)` outside vector loops.
    pub(super) fn vector_store(
        &mut self,
        buffer: BufferId,
        indices: &[Expr],
        value_expr: &Expr,
        value: &str,
    ) -> Res<bool> {
        let Some(vl) = &self.vec_loop else {
            return Ok(false);
        };
        let sfx = suffix(vl.dtype).unwrap_or("f32");
        let uniform = self.classify(vl, value_expr) == Some(Class::Uniform);
        let ty = vl.ty.clone();
        let off = self.offset(buffer, indices)?;
        let name = self.buf_name(buffer)?.to_string();
        if let Some(ty) = ty {
            // A fixed-width lane vector (the gathering loops'), not the machine vector.
            let value = if uniform {
                format!("(({ty}){{0}} + {value})")
            } else {
                value.to_string()
            };
            match &self.vec_loop.as_ref().and_then(|v| v.mask.clone()) {
                // A masked last step stores only the lanes that exist.
                Some(k) => self.line(&format!(
                    "_mm512_mask_storeu_ps(&{name}[{off}], {k}, (__m512)({value}));"
                )),
                None => self.line(&format!("*({ty}*)&{name}[{off}] = {value};")),
            }
            return Ok(true);
        }
        let value = if uniform {
            format!("sptir_vbc_{sfx}({value})")
        } else {
            value.to_string()
        };
        let bdt = self.buf_dtype(buffer);
        let sfx = match bdt {
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            _ => sfx,
        };
        if half::is_half(bdt) {
            self.narrow_dtypes.insert(bdt);
        }
        self.line(&format!("sptir_vst_{sfx}(&{name}[{off}], {value});"));
        Ok(true)
    }
}

/// The C element type of a lane vector type.
fn elem_c(dt: DType) -> &'static str {
    if dt == DType::F64 {
        "double"
    } else {
        "float"
    }
}

/// The typedef of the lane vector type of `n` elements of `dt` (see [`lane_type`]).
pub(super) fn lane_typedef(dt: DType, n: i64) -> String {
    let bytes = n * i64::from(dt.bits() / 8);
    format!(
        "typedef {} {} __attribute__((vector_size({bytes}), aligned({}), may_alias));\n",
        elem_c(dt),
        lane_type(dt, n),
        dt.bits() / 8
    )
}

/// The C name of the vector type of `n` elements of `dt` used by lane reductions (declared by
/// [`lane_typedef`] in the module's head; its width does not depend on the machine: GCC and
/// Clang split a vector wider than the machine's into several).
pub(super) fn lane_type(dt: DType, n: i64) -> String {
    format!("sptir_v{n}_{}", suffix(dt).unwrap_or("f32"))
}

/// `__builtin_shufflevector(a, b, idx...)` text.
fn shuffle(a: &str, b: &str, idx: &[i64]) -> String {
    let list: Vec<String> = idx.iter().map(i64::to_string).collect();
    format!("__builtin_shufflevector({a}, {b}, {})", list.join(", "))
}

impl Writer<'_> {
    /// Checks a lane reduction's body (blocks around the one store into the reduced element)
    /// for the vector form, recording the block iterators' strides.
    fn plan_lane_stmt(&self, vl: &mut VecLoop, s: &Stmt, buffer: BufferId, idx: &[Expr]) -> bool {
        match s {
            Stmt::Seq(v) => v.iter().all(|x| self.plan_lane_stmt(vl, x, buffer, idx)),
            Stmt::Block(b) => {
                if !b.alloc_buffers.is_empty() || b.init.is_some() || b.predicate.is_some() {
                    return false;
                }
                for it in &b.iters {
                    match vl.stride(&it.binding) {
                        Some(st @ (0 | 1)) if vl.stride(&it.min) == Some(0) => {
                            vl.strides.insert(it.var, st);
                        }
                        _ => return false,
                    }
                }
                self.plan_lane_stmt(vl, &b.body, buffer, idx)
            }
            Stmt::Store(st) => {
                st.buffer == buffer
                    && st.indices == idx
                    && st.value.dtype(self.func) == vl.dtype
                    && self.classify(vl, &st.value).is_some()
            }
            _ => false,
        }
    }

    /// The plan for a lane reduction (`simd_reduction` `+` over `f`, the reduced element
    /// `buffer[idx]`) written one vector of `lanes` elements at a time: every lane's partial sum
    /// in one vector accumulator instead of an array (gcc keeps such arrays in memory and uses
    /// 256-bit vectors). Needs a float type, a trip count that is a multiple of `lanes`, and a
    /// body whose value is contiguous in the loop variable or does not move with it.
    pub(super) fn lane_vector_plan(
        &self,
        f: &For,
        body: &Stmt,
        buffer: BufferId,
        idx: &[Expr],
        lanes: i64,
        dt: DType,
    ) -> Option<VecLoop> {
        suffix(dt)?;
        let ext = const_int(&f.extent)?;
        if lanes < 2 || ext <= 0 || ext % lanes != 0 {
            return None;
        }
        let mut vl = VecLoop {
            strides: HashMap::from([(f.var, 1)]),
            dtype: dt,
            ty: Some(lane_type(dt, lanes)),
            lanes,
            gathers: false,
            mask: None,
        };
        self.plan_lane_stmt(&mut vl, body, buffer, idx)
            .then_some(vl)
    }

    /// The plan for the AVX-512 main loop of a lane reduction whose trip count is only known at
    /// run time (`float`, 16 lanes, gathers allowed; see `write_scalar_lanes`).
    pub(super) fn gather_lane_plan(
        &self,
        f: &For,
        body: &Stmt,
        buffer: BufferId,
        idx: &[Expr],
        dt: DType,
    ) -> Option<VecLoop> {
        if dt != DType::F32 {
            return None;
        }
        let mut vl = VecLoop {
            strides: HashMap::from([(f.var, 1)]),
            dtype: dt,
            ty: Some(lane_type(dt, 16)),
            lanes: 16,
            gathers: true,
            mask: None,
        };
        self.plan_lane_stmt(&mut vl, body, buffer, idx)
            .then_some(vl)
    }

    /// Writes the vector-form lane loop: `for (v = min; v < min + ext; v += lanes)` (the
    /// loop's constant bounds and lanes in `(min, ext, lanes)`), each copy's accumulator
    /// `{acc}_v` updated with the body's value as a vector. The caller declares the
    /// accumulators; `write_copies` writes the copies' bodies.
    pub(super) fn write_lane_vector_loop(
        &mut self,
        f: &For,
        plan: VecLoop,
        (min, ext, lanes): (i64, i64, i64),
        lct: &str,
        write_copies: impl FnOnce(&mut Self) -> Res<()>,
    ) -> Res<()> {
        let v = self.bind(f.var)?;
        self.line(&format!(
            "for ({lct} {v} = {min}; {v} < {}; {v} += {lanes}) {{",
            min + ext
        ));
        self.indent += 1;
        let outer = self.vec_loop.replace(plan);
        let r = write_copies(self);
        self.vec_loop = outer;
        self.indent -= 1;
        self.unbind(f.var);
        r?;
        self.line("}");
        Ok(())
    }

    /// The totals of lane-vector accumulators `accs` (each `lanes` wide), as C expressions.
    /// A power-of-two number of them (at most `lanes`) is reduced together: each step adds
    /// the halves of two vectors' lane groups into one vector (a transpose and add), so `U`
    /// totals cost about `U + log2(lanes)` shuffle pairs instead of `U * log2(lanes)`; the
    /// lanes are combined in the same pairwise order as the array form (lane `l` with
    /// `l + lanes/2`, then `l + lanes/4`, ...), so the totals are the same.
    pub(super) fn write_lane_vector_totals(
        &mut self,
        accs: &[String],
        (lanes, op): (i64, BinOp),
        dt: DType,
    ) -> Vec<String> {
        let u = accs.len() as i64;
        if u == 0 {
            return Vec::new();
        }
        if u > 1 && !(u as u64).is_power_of_two() || u > lanes {
            return accs
                .iter()
                .flat_map(|a| {
                    self.write_lane_vector_totals(std::slice::from_ref(a), (lanes, op), dt)
                })
                .collect();
        }
        let ty = lane_type(dt, lanes);
        let mut vecs: Vec<String> = accs.to_vec();
        // Group size: how many lanes of a vector still hold partial sums of one accumulator.
        let mut g = lanes;
        while vecs.len() > 1 {
            g /= 2;
            let half = lanes / 2;
            let (mut lo, mut hi) = (Vec::new(), Vec::new());
            for j in 0..lanes {
                let (side, jj) = (j / half, j % half);
                let l = (jj / g) * 2 * g + jj % g + side * lanes;
                lo.push(l);
                hi.push(l + g);
            }
            let mut next = Vec::new();
            for pair in vecs.chunks(2) {
                let t = self.namer.fresh("lane_t");
                let both = self.lane_combine(
                    op,
                    &ty,
                    dt,
                    &shuffle(&pair[0], &pair[1], &lo),
                    &shuffle(&pair[0], &pair[1], &hi),
                );
                self.line(&format!("const {ty} {t} = {both};"));
                next.push(t);
            }
            vecs = next;
        }
        // One vector of `n` lanes: `u` groups of `g` lanes; halve it until one lane per group
        // (two for a single accumulator, added as scalars).
        let mut v = vecs.remove(0);
        let mut n = lanes;
        let stop = u.max(2);
        while n > stop {
            let h = g / 2;
            let (mut lo, mut hi) = (Vec::new(), Vec::new());
            for j in 0..n / 2 {
                let l = (j / h) * g + j % h;
                lo.push(l);
                hi.push(l + h);
            }
            let t = self.namer.fresh("lane_t");
            let half_ty = lane_type(dt, n / 2);
            let both = self.lane_combine(
                op,
                &half_ty,
                dt,
                &shuffle(&v, &v, &lo),
                &shuffle(&v, &v, &hi),
            );
            self.line(&format!("const {half_ty} {t} = {both};"));
            self.lane_types.insert((dt, n / 2));
            v = t;
            g = h;
            n /= 2;
        }
        if u == 1 {
            let both =
                super::reduction::scalar_combine(op, dt, &format!("{v}[0]"), &format!("{v}[1]"));
            vec![if op == BinOp::Add {
                format!("({both})")
            } else {
                both
            }]
        } else {
            (0..u).map(|i| format!("{v}[{i}]")).collect()
        }
    }
}

/// Whether `e` reads memory or divides anywhere (what a vector select may not compute in lanes
/// the scalar form would skip).
fn reads_or_divides(e: &Expr) -> bool {
    let mut hit = false;
    e.visit(&mut |x| {
        hit |= matches!(
            x,
            Expr::Load { .. }
                | Expr::Binary(BinOp::Div | BinOp::FloorDiv | BinOp::FloorMod, _, _)
                | Expr::Call { .. }
        )
    });
    hit
}
