//! The stage-I interpreter: binds arguments, validates structure arrays, then walks the statement
//! tree, enumerating the stored element tuples of every sparse iteration in coordinate space.
//! Deliberately shares no code with the stage II/III interpreter (`tir/machine.rs`) it checks:
//! the reference stays independent (an architecture invariant), so do not merge the two.

use std::collections::HashMap;

use sparsetir_formats::Tensor;
use sparsetir_ir::{
    AxisId, AxisKind, BinOp, BufferDecl, BufferId, BufferShape, DType, Expr, IterAxis, IterKind,
    PrimFunc, Span, SparseIteration, Stage, Stmt, VarId,
};

use crate::storage::{
    check_indices, check_indptr, dense_size, index_array, load, sparse_layout, store, AxisData,
    Layout, MAX_ELEMENTS,
};
use crate::value::{binary, intrinsic, round_float, unary, Value};
use crate::{ArgValue, EvalError};

const STAGE_II_MESSAGE: &str =
    "stage II/III statements are not supported by the reference evaluator; use the interpreter";

type Res<T> = Result<T, EvalError>;

/// A buffer ready for access.
struct BufData {
    name: String,
    dtype: DType,
    /// Index into `Machine::arrays`.
    slot: usize,
    layout: Layout,
    default: Value,
}

/// One flattened entry of an iteration's axis list.
struct Step {
    axis: AxisId,
    var: VarId,
    /// `T.sp.attach(axis, parent)`: the parent whose coordinate selects the fiber.
    attach: Option<AxisId>,
    spatial: bool,
}

/// When an iteration's `init` runs (see [`Machine::init_plan`]).
#[derive(Clone, Debug)]
enum InitPlan {
    /// No reduction iterator: before every body execution.
    EveryStep,
    /// Once the steps before `at` (the first reduction step) are bound, for every point of the
    /// spatial steps `spatial` that follow it, before any reduction step runs.
    Sweep { at: usize, spatial: Vec<usize> },
}

/// The evaluation state of one call.
struct Machine<'f> {
    func: &'f PrimFunc,
    axes: Vec<AxisData>,
    bufs: Vec<Option<BufData>>,
    arrays: Vec<Tensor>,
    /// The parameter each array came from (`None` for alloc buffers).
    array_params: Vec<Option<VarId>>,
    vars: Vec<Option<Value>>,
    /// Current `(global position, coordinate)` of every axis being iterated.
    pos: Vec<Option<(i64, i64)>>,
    /// For each variable that is an iterator of an enclosing iteration, the axis it walks.
    iter_axis: Vec<Option<AxisId>>,
    /// Where errors are reported.
    span: Span,
}

/// Runs `func` on `args`; see [`crate::eval_func`].
pub fn run(func: &PrimFunc, args: &mut HashMap<String, ArgValue>) -> Res<()> {
    if func.stage() != Stage::I {
        return Err(EvalError {
            span: func.span,
            message: format!(
                "function `{}` is at stage {:?}; the reference evaluator runs stage I only",
                func.name,
                func.stage()
            ),
        });
    }
    let mut m = Machine {
        func,
        axes: Vec::new(),
        bufs: (0..func.buffers.len()).map(|_| None).collect(),
        arrays: Vec::new(),
        array_params: Vec::new(),
        vars: vec![None; func.vars.len()],
        pos: vec![None; func.axes.len()],
        iter_axis: vec![None; func.vars.len()],
        span: func.span,
    };
    m.bind_scalars(args)?;
    m.setup_axes(args)?;
    m.setup_buffers(args)?;
    m.exec(&func.body)?;
    for (t, p) in m.arrays.into_iter().zip(m.array_params) {
        if let Some(p) = p {
            args.insert(func.vars[p].name.clone(), ArgValue::Array(t));
        }
    }
    Ok(())
}

impl<'f> Machine<'f> {
    fn err(&self, message: impl Into<String>) -> EvalError {
        EvalError {
            span: self.span,
            message: message.into(),
        }
    }

    fn var_name(&self, v: VarId) -> &str {
        self.func
            .vars
            .get(v)
            .map(|x| x.name.as_str())
            .unwrap_or("?")
    }

    fn bind_scalars(&mut self, args: &HashMap<String, ArgValue>) -> Res<()> {
        for &p in &self.func.params {
            let Some(var) = self.func.vars.get(p) else {
                return Err(self.err(format!("parameter {p:?} is not declared")));
            };
            let dt = var.dtype;
            if dt == DType::Handle {
                continue;
            }
            let name = &var.name;
            let v = match args.get(name) {
                None => return Err(self.err(format!("missing argument for parameter `{name}`"))),
                Some(ArgValue::Array(_)) => {
                    return Err(self.err(format!(
                        "parameter `{name}` is a scalar of type {dt}, but an array was given"
                    )))
                }
                Some(ArgValue::Int(i)) => {
                    let v = Value::from_i128(*i as i128, dt);
                    if !dt.is_float() && v.as_i128() != *i as i128 {
                        return Err(self.err(format!(
                            "argument `{name}` = {i} does not fit in its type {dt}"
                        )));
                    }
                    v
                }
                Some(ArgValue::Float(x)) => {
                    if !dt.is_float() {
                        return Err(self.err(format!(
                            "parameter `{name}` has type {dt}, but a float ({x}) was given"
                        )));
                    }
                    Value::Float(round_float(*x, dt), dt)
                }
            };
            self.vars[p.index()] = Some(v);
        }
        Ok(())
    }

    /// The array behind a handle parameter.
    fn array_arg<'a>(
        &self,
        args: &'a HashMap<String, ArgValue>,
        param: VarId,
        what: &str,
    ) -> Res<&'a Tensor> {
        let name = self.var_name(param);
        match args.get(name) {
            Some(ArgValue::Array(t)) => Ok(t),
            Some(_) => Err(self.err(format!("argument `{name}` ({what}) must be an array"))),
            None => Err(self.err(format!("missing argument `{name}` ({what})"))),
        }
    }

    fn index_arg(
        &self,
        args: &HashMap<String, ArgValue>,
        param: VarId,
        what: &str,
    ) -> Res<Vec<i64>> {
        let t = self.array_arg(args, param, what)?;
        index_array(t).ok_or_else(|| {
            self.err(format!(
                "argument `{}` ({what}) must have an integer dtype, got {}",
                self.var_name(param),
                t.dtype()
            ))
        })
    }

    /// Evaluates a size expression (from scalar parameters) to an integer.
    fn eval_size(&mut self, e: &Expr, what: &str) -> Res<i64> {
        let v = self.eval(e)?;
        if v.is_float() {
            return Err(self.err(format!("{what} must be an integer, got {}", v.as_f64())));
        }
        let n = v.as_i128();
        if n < 0 || n > MAX_ELEMENTS as i128 {
            return Err(self.err(format!("{what} = {n} is outside 0..=2^31")));
        }
        Ok(n as i64)
    }

    fn setup_axes(&mut self, args: &HashMap<String, ArgValue>) -> Res<()> {
        let func = self.func;
        for (h, ax) in func.axes.iter() {
            self.span = ax.span;
            let name = ax.name.clone();
            let length = self.eval_size(&ax.length, &format!("length of axis `{name}`"))?;
            let mut data = AxisData {
                name: name.clone(),
                kind: ax.kind,
                parent: ax.parent,
                length,
                per_parent: 0,
                parent_count: 1,
                indptr: Vec::new(),
                indices: Vec::new(),
                level_count: length,
            };
            if ax.kind == AxisKind::DenseFixed {
                data.parent = None;
                self.axes.push(data);
                continue;
            }
            let Some(parent) = ax.parent else {
                return Err(self.err(format!(
                    "axis `{name}` ({}) needs a parent",
                    ax.kind.canonical_name()
                )));
            };
            if parent.index() >= h.index() {
                return Err(self.err(format!(
                    "axis `{name}`: its parent must be declared before it"
                )));
            }
            data.parent_count = self.axes[parent.index()].level_count;
            let nnz = match &ax.nnz {
                Some(e) => Some(self.eval_size(e, &format!("nnz of axis `{name}`"))?),
                None => None,
            };
            if ax.kind.is_varied() {
                let Some(p) = ax.indptr else {
                    return Err(self.err(format!("axis `{name}` has no indptr parameter")));
                };
                let indptr = self.index_arg(args, p, &format!("indptr of axis `{name}`"))?;
                data.level_count = check_indptr(&name, &indptr, data.parent_count, nnz)
                    .map_err(|m| self.err(m))?;
                if ax.kind == AxisKind::DenseVaried {
                    for (q, w) in indptr.windows(2).enumerate() {
                        if w[1] - w[0] > length {
                            return Err(self.err(format!(
                                "axis `{name}`: parent position {q} holds {} elements, more than \
                                 the axis length {length}",
                                w[1] - w[0]
                            )));
                        }
                    }
                }
                data.indptr = indptr;
            } else {
                let Some(c) = &ax.nnz_cols else {
                    return Err(self.err(format!("axis `{name}` has no nnz_cols")));
                };
                data.per_parent = self.eval_size(c, &format!("nnz_cols of axis `{name}`"))?;
                data.level_count = data
                    .parent_count
                    .checked_mul(data.per_parent)
                    .filter(|n| *n <= MAX_ELEMENTS)
                    .ok_or_else(|| self.err(format!("axis `{name}`: more than 2^31 elements")))?;
            }
            if ax.kind.is_compressed() {
                let Some(p) = ax.indices else {
                    return Err(self.err(format!("axis `{name}` has no indices parameter")));
                };
                let indices = self.index_arg(args, p, &format!("indices of axis `{name}`"))?;
                if indices.len() as i64 != data.level_count {
                    let why = if ax.kind == AxisKind::CompressedFixed {
                        format!(
                            "parent count {} × nnz_cols {}",
                            data.parent_count, data.per_parent
                        )
                    } else {
                        "the last indptr value".to_string()
                    };
                    return Err(self.err(format!(
                        "axis `{name}`: indices has {} entries, expected {} ({why})",
                        indices.len(),
                        data.level_count
                    )));
                }
                check_indices(&name, &indices, length).map_err(|m| self.err(m))?;
                data.indices = indices;
            }
            self.axes.push(data);
        }
        Ok(())
    }

    fn setup_buffers(&mut self, args: &HashMap<String, ArgValue>) -> Res<()> {
        let func = self.func;
        let mut slot_of_param: HashMap<VarId, usize> = HashMap::new();
        for &b in &func.buffer_decls {
            let Some(buf) = func.buffers.get(b) else {
                return Err(self.err(format!("buffer {b:?} is not declared")));
            };
            self.span = buf.span;
            let name = &buf.name;
            if buf.dtype == DType::Handle {
                return Err(self.err(format!("buffer `{name}` cannot hold values of type handle")));
            }
            let (layout, size) = match &buf.shape {
                BufferShape::Sparse(axes) => {
                    if let Some(a) = axes.iter().find(|a| a.index() >= self.axes.len()) {
                        return Err(self.err(format!("buffer `{name}`: unknown axis {a:?}")));
                    }
                    sparse_layout(name, axes, &self.axes).map_err(|m| self.err(m))?
                }
                BufferShape::Dense(dims) => {
                    let mut extents = Vec::with_capacity(dims.len());
                    for d in dims {
                        extents.push(self.eval_size(d, &format!("extent of buffer `{name}`"))?);
                    }
                    let mut strides = Vec::with_capacity(buf.strides.len());
                    for s in &buf.strides {
                        strides.push(self.eval_size(s, &format!("stride of buffer `{name}`"))?);
                    }
                    if !strides.is_empty() && strides.len() != extents.len() {
                        return Err(self.err(format!(
                            "buffer `{name}`: {} strides for {} dimensions",
                            strides.len(),
                            extents.len()
                        )));
                    }
                    let size = dense_size(name, &extents, &strides).map_err(|m| self.err(m))?;
                    (Layout::Dense { extents, strides }, size)
                }
            };
            let extra = match &buf.extra_storage {
                Some(e) => self.eval_size(e, &format!("extra_storage of buffer `{name}`"))?,
                None => 0,
            };
            let total = size + extra;
            if total > MAX_ELEMENTS {
                return Err(self.err(format!("buffer `{name}`: more than 2^31 values")));
            }
            let default = match &buf.default_value {
                Some(e) => {
                    let v = self.eval(e)?;
                    v.cast(buf.dtype).map_err(|m| self.err(m))?
                }
                None => Value::from_i128(0, buf.dtype),
            };
            let slot = match buf.decl {
                BufferDecl::Match { data } => {
                    let t = self.array_arg(args, data, &format!("values of buffer `{name}`"))?;
                    if t.dtype() != buf.dtype {
                        return Err(self.err(format!(
                            "buffer `{name}` has dtype {}, but argument `{}` holds {}",
                            buf.dtype,
                            self.var_name(data),
                            t.dtype()
                        )));
                    }
                    if t.len() as i64 != total {
                        return Err(self.err(format!(
                            "buffer `{name}` needs {total} values, but argument `{}` holds {}",
                            self.var_name(data),
                            t.len()
                        )));
                    }
                    match slot_of_param.get(&data) {
                        Some(&s) => s,
                        None => {
                            self.arrays.push(t.clone());
                            self.array_params.push(Some(data));
                            slot_of_param.insert(data, self.arrays.len() - 1);
                            self.arrays.len() - 1
                        }
                    }
                }
                BufferDecl::Alloc => {
                    let t = Tensor::zeros(buf.dtype, vec![total as usize])
                        .map_err(|e| self.err(e.to_string()))?;
                    self.arrays.push(t);
                    self.array_params.push(None);
                    self.arrays.len() - 1
                }
            };
            self.bufs[b.index()] = Some(BufData {
                name: name.clone(),
                dtype: buf.dtype,
                slot,
                layout,
                default,
            });
        }
        Ok(())
    }

    // ---------------------------------------------------------------- statements

    fn exec(&mut self, s: &Stmt) -> Res<()> {
        match s {
            Stmt::Seq(v) => {
                for st in v {
                    self.exec(st)?;
                }
                Ok(())
            }
            Stmt::SparseIteration(it) => {
                self.span = it.span;
                self.exec_iteration(it)
            }
            Stmt::Store(st) => {
                self.span = st.span;
                let coords = self.eval_coords(&st.indices)?;
                let value = self.eval(&st.value)?;
                let (off, dtype, slot) = {
                    let buf = self.buf(st.buffer)?;
                    let off = buf
                        .layout
                        .offset(
                            &buf.name,
                            &coords,
                            &self.axes,
                            &self.hints(buf.layout.axes(), &st.indices),
                        )
                        .map_err(|m| self.err(m))?;
                    (off, buf.dtype, buf.slot)
                };
                if let Some(off) = off {
                    let v = value.cast(dtype).map_err(|m| self.err(m))?;
                    if !store(&mut self.arrays[slot], off, v) {
                        return Err(self.err("internal: value offset out of range"));
                    }
                }
                Ok(())
            }
            Stmt::If(i) => {
                self.span = i.span;
                if self.eval(&i.cond)?.truthy() {
                    self.exec(&i.then_case)
                } else if let Some(e) = &i.else_case {
                    self.exec(e)
                } else {
                    Ok(())
                }
            }
            Stmt::Let(l) => {
                self.span = l.span;
                let v = self.eval(&l.value)?;
                let v = self.convert_to_var(l.var, v)?;
                let saved = self.bind(l.var, Some(v))?;
                let r = self.exec(&l.body);
                self.vars[l.var.index()] = saved;
                r
            }
            Stmt::Evaluate(e) => self.eval(e).map(|_| ()),
            Stmt::AssumeBufferDomain {
                buffer,
                lo,
                hi,
                span,
            } => {
                self.span = *span;
                let lo = self.eval(lo)?;
                let hi = self.eval(hi)?;
                let buf = self.buf(*buffer)?;
                let (name, slot) = (buf.name.clone(), buf.slot);
                let t = &self.arrays[slot];
                for i in 0..t.len() {
                    let Some(v) = load(t, i) else { break };
                    let ge = binary(BinOp::Ge, v, lo).map_err(|m| self.err(m))?.truthy();
                    // The upper bound is inclusive: `indptr` domains are `(0, nnz)` and the
                    // last `indptr` value is `nnz` (SPEC §3.2; see ARCHITECTURE.md).
                    let le = binary(BinOp::Le, v, hi).map_err(|m| self.err(m))?.truthy();
                    if !(ge && le) {
                        return Err(self.err(format!(
                            "assume_buffer_domain: {name}[{i}] = {} is outside [{}, {}]",
                            show(v),
                            show(lo),
                            show(hi)
                        )));
                    }
                }
                Ok(())
            }
            Stmt::For(f) => {
                self.span = f.span;
                Err(self.err(STAGE_II_MESSAGE))
            }
            Stmt::Block(b) => {
                self.span = b.span;
                Err(self.err(STAGE_II_MESSAGE))
            }
            Stmt::Allocate(_) | Stmt::While(_) => Err(self.err(STAGE_II_MESSAGE)),
        }
    }

    fn buf(&self, b: BufferId) -> Res<&BufData> {
        match self.bufs.get(b.index()).and_then(|x| x.as_ref()) {
            Some(d) => Ok(d),
            None => {
                let name = self
                    .func
                    .buffers
                    .get(b)
                    .map(|x| x.name.as_str())
                    .unwrap_or("?");
                Err(self.err(format!("buffer `{name}` is not declared at function level")))
            }
        }
    }

    /// Binds `var`, returning the previous binding.
    /// Per index of an access: the element currently visited, when the index is syntactically
    /// the iterator variable of that very axis (the lowering turns exactly those accesses into
    /// positions; see `Layout::offset`).
    fn hints(&self, axes: &[AxisId], indices: &[Expr]) -> Vec<Option<(i64, i64)>> {
        indices
            .iter()
            .enumerate()
            .map(|(k, e)| match (e, axes.get(k)) {
                (Expr::Var(v), Some(a))
                    if self.iter_axis.get(v.index()).copied().flatten() == Some(*a) =>
                {
                    self.pos[a.index()]
                }
                _ => None,
            })
            .collect()
    }

    fn bind(&mut self, var: VarId, v: Option<Value>) -> Res<Option<Value>> {
        match self.vars.get_mut(var.index()) {
            Some(slot) => Ok(std::mem::replace(slot, v)),
            None => Err(self.err(format!("variable {var:?} is not declared"))),
        }
    }

    fn convert_to_var(&self, var: VarId, v: Value) -> Res<Value> {
        match self.func.vars.get(var) {
            Some(x) if x.dtype != DType::Handle => v.cast(x.dtype).map_err(|m| self.err(m)),
            Some(_) => Ok(v),
            None => Err(self.err(format!("variable {var:?} is not declared"))),
        }
    }

    /// Flattens an iteration's axis list into one step per iterator variable.
    fn steps(&self, it: &SparseIteration) -> Res<Vec<Step>> {
        let arity: usize = it.axes.iter().map(|a| a.arity()).sum();
        if it.vars.len() != arity || it.kinds.len() != arity {
            return Err(self.err(format!(
                "iteration `{}`: {} axes, {} iterator variables and {} kinds do not match",
                it.name,
                arity,
                it.vars.len(),
                it.kinds.len()
            )));
        }
        let mut steps = Vec::with_capacity(arity);
        let mut k = 0;
        for entry in &it.axes {
            let (axes, attach) = match entry {
                IterAxis::Axis(a) => (vec![*a], None),
                IterAxis::CoIter { op, .. } => {
                    return Err(self.err(format!(
                        "iteration `{}`: T.sp.{} is not supported by the evaluator yet",
                        it.name,
                        op.name()
                    )))
                }
                IterAxis::Fuse(chain) => {
                    for w in chain.windows(2) {
                        let child = self.axis(w[1])?;
                        if child.parent != Some(w[0]) {
                            return Err(self.err(format!(
                                "iteration `{}`: fused axes must form a parent→child chain, but \
                                 the parent of `{}` is not `{}`",
                                it.name,
                                child.name,
                                self.axis(w[0])?.name
                            )));
                        }
                    }
                    (chain.clone(), None)
                }
                IterAxis::Attach { axis, parent } => {
                    self.axis(*parent)?;
                    let ad = self.axis(*axis)?;
                    let own_parent_is_root = ad
                        .parent
                        .map(|p| self.axes[p.index()].kind == AxisKind::DenseFixed)
                        .unwrap_or(false);
                    if !own_parent_is_root {
                        return Err(self.err(format!(
                            "iteration `{}`: attach of `{}` is supported only when its own parent \
                             is a dense_fixed root",
                            it.name, ad.name
                        )));
                    }
                    (vec![*axis], Some(*parent))
                }
            };
            for a in axes {
                self.axis(a)?;
                steps.push(Step {
                    axis: a,
                    var: it.vars[k],
                    attach,
                    spatial: it.kinds[k] == IterKind::Spatial,
                });
                k += 1;
            }
        }
        Ok(steps)
    }

    fn axis(&self, a: AxisId) -> Res<&AxisData> {
        self.axes
            .get(a.index())
            .ok_or_else(|| self.err(format!("unknown axis {a:?}")))
    }

    fn exec_iteration(&mut self, it: &SparseIteration) -> Res<()> {
        let steps = self.steps(it)?;
        let plan = self.init_plan(it, &steps)?;
        self.iterate(it, &steps, 0, &plan)
    }

    /// The init rule (SPEC §2.3): the init runs once for every point of the spatial iterators
    /// around the reduction, before its first reduction step, also where the reduction has no
    /// element (a reduction over nothing is its init). The points are those of the spatial
    /// steps before the first reduction step (bound when it is reached) and of the spatial
    /// steps after it, which must not walk fibers of reduction steps.
    fn init_plan(&self, it: &SparseIteration, steps: &[Step]) -> Res<InitPlan> {
        let Some(at) = steps.iter().position(|s| !s.spatial) else {
            return Ok(InitPlan::EveryStep);
        };
        let mut spatial = Vec::new();
        if it.init.is_some() {
            for (t, st) in steps.iter().enumerate().skip(at + 1) {
                if !st.spatial {
                    continue;
                }
                let parent = st.attach.or(self.axes[st.axis.index()].parent);
                let under_reduction = parent.and_then(|p| {
                    steps[at..t]
                        .iter()
                        .find(|s| !s.spatial && s.axis == p)
                        .map(|s| s.var)
                });
                if let Some(r) = under_reduction {
                    return Err(self.err(format!(
                        "iteration `{}`: the init cannot run once per spatial point, because \
                         spatial iterator `{}` walks a fiber of reduction iterator `{}`",
                        it.name,
                        self.var_name(st.var),
                        self.var_name(r)
                    )));
                }
                spatial.push(t);
            }
        }
        Ok(InitPlan::Sweep { at, spatial })
    }

    fn iterate(
        &mut self,
        it: &SparseIteration,
        steps: &[Step],
        k: usize,
        plan: &InitPlan,
    ) -> Res<()> {
        if let (Some(init), InitPlan::Sweep { at, spatial }) = (&it.init, plan) {
            if k == *at {
                self.sweep(it, steps, spatial, init)?;
            }
        }
        let Some(step) = steps.get(k) else {
            if let (Some(init), InitPlan::EveryStep) = (&it.init, plan) {
                self.exec(init)?;
                self.span = it.span;
            }
            let r = self.exec(&it.body);
            self.span = it.span;
            return r;
        };
        self.each_element(it, step, &mut |m| m.iterate(it, steps, k + 1, plan))
    }

    /// Runs `init` at every point of the steps `spatial` (the rest already bound).
    fn sweep(
        &mut self,
        it: &SparseIteration,
        steps: &[Step],
        spatial: &[usize],
        init: &Stmt,
    ) -> Res<()> {
        let Some((&t, rest)) = spatial.split_first() else {
            let r = self.exec(init);
            self.span = it.span;
            return r;
        };
        self.each_element(it, &steps[t], &mut |m| m.sweep(it, steps, rest, init))
    }

    /// Binds `step` to each element of its fiber in turn (under the current elements of its
    /// parent or attach axis) and runs `f`; restores the previous binding afterwards.
    fn each_element(
        &mut self,
        it: &SparseIteration,
        step: &Step,
        f: &mut dyn FnMut(&mut Self) -> Res<()>,
    ) -> Res<()> {
        let ai = step.axis.index();
        let q =
            {
                let ad = &self.axes[ai];
                match (step.attach, ad.parent) {
                    (Some(by), _) => match self.pos[by.index()] {
                        Some((_, coord)) => coord,
                        None => {
                            return Err(self.err(format!(
                            "iteration `{}`: attach of `{}` needs `{}` to be iterated before it",
                            it.name, ad.name, self.axes[by.index()].name
                        )))
                        }
                    },
                    (None, None) => 0,
                    (None, Some(p)) => match self.pos[p.index()] {
                        Some((global, _)) => global,
                        None => {
                            return Err(self.err(format!(
                            "iteration `{}`: the parent `{}` of axis `{}` is not iterated by this \
                             or an enclosing iteration",
                            it.name, self.axes[p.index()].name, ad.name
                        )))
                        }
                    },
                }
            };
        let (start, count) = self.axes[ai].fiber(q).map_err(|m| self.err(m))?;
        let var_dtype = self
            .func
            .vars
            .get(step.var)
            .map(|v| v.dtype)
            .unwrap_or(DType::I32);
        let saved_pos = self.pos[ai];
        let saved_var = self.bind(step.var, None)?;
        let saved_axis = self.iter_axis[step.var.index()].replace(step.axis);
        for g in start..start + count {
            let coord = self.axes[ai].coord_at(start, g);
            self.pos[ai] = Some((g, coord));
            self.vars[step.var.index()] = Some(Value::from_i128(coord as i128, var_dtype));
            f(self)?;
        }
        self.pos[ai] = saved_pos;
        self.vars[step.var.index()] = saved_var;
        self.iter_axis[step.var.index()] = saved_axis;
        Ok(())
    }

    // ---------------------------------------------------------------- expressions

    fn eval_coords(&mut self, indices: &[Expr]) -> Res<Vec<i64>> {
        let mut out = Vec::with_capacity(indices.len());
        for e in indices {
            let v = self.eval(e)?;
            if v.is_float() {
                return Err(self.err(format!(
                    "buffer index must be an integer, got {}",
                    v.as_f64()
                )));
            }
            let c = v.as_i128();
            // Saturate: a coordinate beyond i64 is out of range of every axis anyway.
            out.push(c.clamp(i64::MIN as i128, i64::MAX as i128) as i64);
        }
        Ok(out)
    }

    fn eval(&mut self, e: &Expr) -> Res<Value> {
        match e {
            Expr::Int(v, dt) => Ok(Value::from_i128(*v as i128, *dt)),
            Expr::Float(x, dt) => {
                if dt.is_float() {
                    Ok(Value::Float(round_float(*x, *dt), *dt))
                } else {
                    Value::Float(*x, DType::F64)
                        .cast(*dt)
                        .map_err(|m| self.err(m))
                }
            }
            Expr::Bool(b) => Ok(Value::Bool(*b)),
            Expr::Var(v) => match self.vars.get(v.index()).copied().flatten() {
                Some(x) => Ok(x),
                None => {
                    let what = match self.func.vars.get(*v) {
                        Some(x) if x.dtype == DType::Handle => "is a handle, not a value",
                        Some(_) => "is not bound here",
                        None => "is not declared",
                    };
                    Err(self.err(format!("variable `{}` {what}", self.var_name(*v))))
                }
            },
            Expr::Binary(op, a, b) => {
                let x = self.eval(a)?;
                match op {
                    BinOp::And if !x.truthy() => return Ok(Value::Bool(false)),
                    BinOp::Or if x.truthy() => return Ok(Value::Bool(true)),
                    _ => {}
                }
                let y = self.eval(b)?;
                binary(*op, x, y).map_err(|m| self.err(m))
            }
            Expr::Unary(op, a) => {
                let x = self.eval(a)?;
                unary(*op, x).map_err(|m| self.err(m))
            }
            Expr::Select(c, a, b) => {
                let dt = e.dtype(self.func);
                let chosen = if self.eval(c)?.truthy() { a } else { b };
                let v = self.eval(chosen)?;
                v.cast(dt).map_err(|m| self.err(m))
            }
            Expr::Cast(dt, a) => {
                let x = self.eval(a)?;
                x.cast(*dt).map_err(|m| self.err(m))
            }
            Expr::Load { buffer, indices } => {
                let coords = self.eval_coords(indices)?;
                let buf = self.buf(*buffer)?;
                let off = buf
                    .layout
                    .offset(
                        &buf.name,
                        &coords,
                        &self.axes,
                        &self.hints(buf.layout.axes(), indices),
                    )
                    .map_err(|m| self.err(m))?;
                match off {
                    None => Ok(buf.default),
                    Some(o) => load(&self.arrays[buf.slot], o)
                        .ok_or_else(|| self.err("internal: value offset out of range")),
                }
            }
            Expr::Call { op, args, dtype } => {
                if *op == sparsetir_ir::Intrinsic::AtomicAdd {
                    return Err(self.err(
                        "`atomic_add` is not supported at stage I by the reference evaluator",
                    ));
                }
                let mut vals = Vec::with_capacity(args.len());
                for a in args {
                    vals.push(self.eval(a)?);
                }
                intrinsic(*op, &vals, *dtype).map_err(|m| self.err(m))
            }
            Expr::Let { var, value, body } => {
                let v = self.eval(value)?;
                let v = self.convert_to_var(*var, v)?;
                let saved = self.bind(*var, Some(v))?;
                let r = self.eval(body);
                self.vars[var.index()] = saved;
                r
            }
        }
    }
}

fn show(v: Value) -> String {
    match v {
        Value::Int(i, _) => i.to_string(),
        Value::Float(x, _) => x.to_string(),
        Value::Bool(b) => b.to_string(),
    }
}
