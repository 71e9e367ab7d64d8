//! The stage-I interpreter: binds arguments, validates structure arrays, then walks the statement
//! tree, enumerating the stored element tuples of every sparse iteration in coordinate space.
//! Deliberately shares no code with the stage II/III interpreter (`tir/machine.rs`) it checks:
//! the reference stays independent (an architecture invariant), so do not merge the two.
//!
//! Co-iteration (`T.sp.union`/`T.sp.intersect`) binds its iterator variable to each coordinate
//! of the union or intersection of its parts' fibers in turn, in increasing order. A buffer over
//! an assembled axis starts empty and gains a coordinate at each store to an absent one; after
//! the run its structure and values are written to the axis's `indptr`, `indices` and `nnz`
//! parameters and the buffer's data parameter (see [`crate::eval_func`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use sparsetir_formats::Tensor;
use sparsetir_ir::{
    AxisId, AxisKind, BinOp, BufferDecl, BufferId, BufferShape, CoOp, DType, Expr, IterAxis,
    IterKind, PrimFunc, Span, SparseIteration, Stage, Stmt, VarId,
};

use crate::storage::{
    check_increasing, check_indices, check_indptr, dense_size, index_array, load, sparse_layout,
    store, AssembledValues, AxisData, Layout, MAX_ELEMENTS,
};
use crate::value::{binary, intrinsic, round_float, scalar_argument, unary, Value};
use crate::{ArgValue, EvalError};

mod assembled;

const STAGE_II_MESSAGE: &str =
    "stage II/III statements are not supported by the reference evaluator; use the interpreter";

type Res<T> = Result<T, EvalError>;

/// A buffer ready for access.
struct BufData {
    name: String,
    dtype: DType,
    values: Values,
    default: Value,
}

/// Where a buffer's values live.
enum Values {
    /// In `Machine::arrays[slot]`, laid out by `layout`.
    Array { slot: usize, layout: Layout },
    /// Over an assembled axis: `Machine::assembled[index]`.
    Assembled(usize),
}

/// An assembled axis and the parameters the run writes for it.
struct AssembledAxis {
    axis: AxisId,
    indptr: VarId,
    indices: VarId,
    /// The scalar parameter that is the axis's nnz.
    nnz: VarId,
    /// The one buffer over the axis, if any: `(buffer, index into Machine::assembled)`; the
    /// index is set when the buffers are set up.
    buffer: Option<(BufferId, usize)>,
}

/// One fiber walked by a step: `axis` under the current element of its parent, or, for
/// `T.sp.attach(axis, by)`, in the row given by the coordinate of the iterator over `by`.
#[derive(Clone, Copy, Debug)]
struct Part {
    axis: AxisId,
    attach: Option<AxisId>,
}

/// One flattened entry of an iteration's axis list.
struct Step {
    var: VarId,
    /// One part for a plain axis; the parts of a co-iteration.
    parts: Vec<Part>,
    /// `Some` for `T.sp.union`/`T.sp.intersect`: the variable walks coordinates, not the
    /// elements of one axis.
    co: Option<CoOp>,
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
    /// The assembled axes, in declaration order.
    assembled_axes: Vec<AssembledAxis>,
    /// The stored elements of the buffers over assembled axes.
    assembled: Vec<AssembledValues>,
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
        assembled_axes: Vec::new(),
        assembled: Vec::new(),
        span: func.span,
    };
    m.plan_assembled()?;
    m.bind_scalars(args)?;
    m.setup_axes(args)?;
    m.setup_buffers(args)?;
    m.check_iterations()?;
    m.exec(&func.body)?;
    let assembled = m.assembled_outputs()?;
    for (t, p) in m.arrays.into_iter().zip(m.array_params) {
        if let Some(p) = p {
            args.insert(func.vars[p].name.clone(), ArgValue::Array(t));
        }
    }
    args.extend(assembled);
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

    /// Checks every iteration's axis list before the run: no assembled axis is iterated, and
    /// the compressed axes walked by a co-iteration are declared sorted and hold strictly
    /// increasing coordinates in every fiber.
    fn check_iterations(&self) -> Res<()> {
        let mut first: Option<EvalError> = None;
        let mut checked: HashSet<AxisId> = HashSet::new();
        self.func.body.visit(&mut |s| {
            if first.is_some() {
                return;
            }
            if let Stmt::SparseIteration(it) = s {
                if let Err(e) = self.check_entries(it, &mut checked) {
                    first = Some(e);
                }
            }
        });
        first.map_or(Ok(()), Err)
    }

    fn check_entries(&self, it: &SparseIteration, checked: &mut HashSet<AxisId>) -> Res<()> {
        let func = self.func;
        let err = |message: String| EvalError {
            span: it.span,
            message,
        };
        fn walked(entry: &IterAxis, out: &mut Vec<AxisId>) {
            match entry {
                IterAxis::Axis(a) => out.push(*a),
                IterAxis::Fuse(v) => out.extend(v.iter().copied()),
                IterAxis::Attach { axis, parent } => out.extend([*axis, *parent]),
                IterAxis::CoIter { parts, .. } => parts.iter().for_each(|p| walked(p, out)),
            }
        }
        for entry in &it.axes {
            let mut axes = Vec::new();
            walked(entry, &mut axes);
            for a in axes {
                let ax = func
                    .axes
                    .get(a)
                    .ok_or_else(|| err(format!("unknown axis {a:?}")))?;
                if ax.assembled {
                    return Err(err(format!(
                        "iteration `{}`: assembled axis `{}` cannot be iterated (its structure is \
                         what the function computes)",
                        it.name, ax.name
                    )));
                }
            }
            let IterAxis::CoIter { op, parts } = entry else {
                continue;
            };
            for p in parts {
                let a = match p {
                    IterAxis::Axis(a) | IterAxis::Attach { axis: a, .. } => *a,
                    _ => {
                        return Err(err(format!(
                            "iteration `{}`: the parts of T.sp.{} are axes or T.sp.attach(...)",
                            it.name,
                            op.name()
                        )))
                    }
                };
                let ad = self.axis(a)?;
                if ad.kind.is_dense() || !checked.insert(a) {
                    continue;
                }
                if !func.axes[a].sorted {
                    return Err(err(format!(
                        "iteration `{}`: T.sp.{} walks axis `{}`, which is declared \
                         sorted=False; co-iterated axes must be sorted",
                        it.name,
                        op.name(),
                        ad.name
                    )));
                }
                let array = func.axes[a]
                    .indices
                    .map(|v| self.var_name(v))
                    .unwrap_or("?");
                check_increasing(ad, array).map_err(err)?;
            }
        }
        Ok(())
    }

    fn bind_scalars(&mut self, args: &HashMap<String, ArgValue>) -> Res<()> {
        for &p in &self.func.params {
            let Some(var) = self.func.vars.get(p) else {
                return Err(self.err(format!("parameter {p:?} is not declared")));
            };
            let dt = var.dtype;
            if dt == DType::Handle || self.assembled_nnz_of(p).is_some() {
                // Handles are read where used; an assembled axis's nnz is an output.
                continue;
            }
            let name = &var.name;
            let v = scalar_argument(name, dt, args.get(name)).map_err(|m| self.err(m))?;
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
            if ax.assembled {
                // No element yet: the arguments behind its indptr, indices and nnz are ignored
                // (checked to be of the supported form by `plan_assembled`).
                data.indptr = vec![0; data.parent_count as usize + 1];
                data.level_count = 0;
                self.axes.push(data);
                continue;
            }
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
            let assembled = self
                .assembled_axes
                .iter()
                .position(|x| x.buffer.map(|y| y.0) == Some(b));
            if let Some(ai) = assembled {
                // `(I, JC)` (see `plan_assembled`): starts with no stored element; the argument
                // behind its data parameter is ignored.
                let jc = self.assembled_axes[ai].axis;
                let rows = self.axes[jc.index()].parent_count;
                let cols = self.axes[jc.index()].length;
                let default = self.buffer_default(b)?;
                self.assembled.push(AssembledValues::new(rows, cols));
                let index = self.assembled.len() - 1;
                self.assembled_axes[ai].buffer = Some((b, index));
                self.bufs[b.index()] = Some(BufData {
                    name: name.clone(),
                    dtype: buf.dtype,
                    values: Values::Assembled(index),
                    default,
                });
                continue;
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
            let default = self.buffer_default(b)?;
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
                values: Values::Array { slot, layout },
                default,
            });
        }
        Ok(())
    }

    /// The value a read of an unstored element of buffer `b` gives: its `default_value`, else 0.
    fn buffer_default(&mut self, b: BufferId) -> Res<Value> {
        let buf = &self.func.buffers[b];
        match &buf.default_value {
            Some(e) => {
                let v = self.eval(e)?;
                v.cast(buf.dtype).map_err(|m| self.err(m))
            }
            None => Ok(Value::from_i128(0, buf.dtype)),
        }
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
                self.write(st.buffer, &coords, &st.indices, value)
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
            Stmt::Evaluate(Expr::Call {
                op: sparsetir_ir::Intrinsic::SortRange,
                args,
                ..
            }) => self.sort_range(args),
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
                let name = buf.name.clone();
                let values: Vec<Value> = match &buf.values {
                    Values::Array { slot, .. } => {
                        let t = &self.arrays[*slot];
                        (0..t.len()).map_while(|i| load(t, i)).collect()
                    }
                    Values::Assembled(i) => self.assembled[*i].values(),
                };
                for (i, v) in values.into_iter().enumerate() {
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

    /// The value offset of element `coords` in a buffer laid out by `layout` (`None` where the
    /// buffer does not store it).
    fn offset(
        &self,
        buffer: &str,
        layout: &Layout,
        coords: &[i64],
        indices: &[Expr],
    ) -> Res<Option<usize>> {
        layout
            .offset(
                buffer,
                coords,
                &self.axes,
                &self.hints(layout.axes(), indices),
            )
            .map_err(|m| self.err(m))
    }

    /// `T.sort_range(X[i], n)` on a one-dimensional buffer: the elements at coordinates
    /// `i .. i + n` in increasing order (integers; each must be stored).
    fn sort_range(&mut self, args: &[Expr]) -> Res<()> {
        let [Expr::Load { buffer, indices }, n] = args else {
            return Err(self.err("`sort_range` takes a buffer element `X[idx]` and a count"));
        };
        let n = self.eval(n)?.as_i128();
        let coords = self.eval_coords(indices)?;
        let [start] = coords[..] else {
            return Err(self.err("`sort_range` at stage I sorts a one-dimensional buffer"));
        };
        let at = |k: i128| i64::try_from(i128::from(start) + k);
        let mut vals = Vec::new();
        for k in 0..n.max(0) {
            let c = at(k).map_err(|_| self.err("`sort_range`: coordinate overflow"))?;
            match self.read(*buffer, &[c], indices)? {
                v @ Value::Int(..) => vals.push(v),
                _ => return Err(self.err("`sort_range` sorts integers")),
            }
        }
        vals.sort_by_key(|v| v.as_i128());
        for (k, v) in vals.into_iter().enumerate() {
            let c = at(k as i128).map_err(|_| self.err("`sort_range`: coordinate overflow"))?;
            self.write(*buffer, &[c], indices, v)?;
        }
        Ok(())
    }

    /// The value of element `coords` of buffer `b` (its default where not stored); `indices` are
    /// the access's index expressions (for [`Machine::hints`]).
    fn read(&self, b: BufferId, coords: &[i64], indices: &[Expr]) -> Res<Value> {
        let buf = self.buf(b)?;
        match &buf.values {
            Values::Array { slot, layout } => {
                match self.offset(&buf.name, layout, coords, indices)? {
                    None => Ok(buf.default),
                    Some(o) => load(&self.arrays[*slot], o)
                        .ok_or_else(|| self.err("internal: value offset out of range")),
                }
            }
            Values::Assembled(i) => {
                let [row, col] = self.assembled_coords(&buf.name, coords)?;
                Ok(self.assembled[*i].get(row, col).unwrap_or(buf.default))
            }
        }
    }

    /// Stores `value` (converted to the buffer's dtype) at `coords` of buffer `b`: nothing
    /// happens where a buffer over given axes does not store the element; a buffer over an
    /// assembled axis gains the coordinate.
    fn write(&mut self, b: BufferId, coords: &[i64], indices: &[Expr], value: Value) -> Res<()> {
        let buf = self.buf(b)?;
        let dtype = buf.dtype;
        match &buf.values {
            Values::Array { slot, layout } => {
                let off = self.offset(&buf.name, layout, coords, indices)?;
                let slot = *slot;
                if let Some(off) = off {
                    let v = value.cast(dtype).map_err(|m| self.err(m))?;
                    if !store(&mut self.arrays[slot], off, v) {
                        return Err(self.err("internal: value offset out of range"));
                    }
                }
                Ok(())
            }
            Values::Assembled(i) => {
                let i = *i;
                let name = buf.name.clone();
                let [row, col] = self.assembled_coords(&name, coords)?;
                let v = value.cast(dtype).map_err(|m| self.err(m))?;
                self.assembled[i]
                    .set(&name, row, col, v)
                    .map_err(|m| self.err(m))
            }
        }
    }

    /// The two coordinates of an access to a buffer `(I, JC)` over an assembled axis.
    fn assembled_coords(&self, buffer: &str, coords: &[i64]) -> Res<[i64; 2]> {
        match coords {
            [row, col] => Ok([*row, *col]),
            _ => Err(self.err(format!(
                "buffer `{buffer}` takes 2 indices, got {}",
                coords.len()
            ))),
        }
    }

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

    /// Binds `var`, returning the previous binding.
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
        let mut steps: Vec<Step> = Vec::with_capacity(arity);
        let mut k = 0;
        for entry in &it.axes {
            let (parts, co) = match entry {
                IterAxis::Axis(a) => (
                    vec![Part {
                        axis: *a,
                        attach: None,
                    }],
                    None,
                ),
                IterAxis::CoIter { op, parts } => {
                    let mut out = Vec::with_capacity(parts.len());
                    for p in parts {
                        out.push(match p {
                            IterAxis::Axis(a) => Part {
                                axis: *a,
                                attach: None,
                            },
                            IterAxis::Attach { axis, parent } => {
                                self.attach_part(it, *axis, *parent)?
                            }
                            _ => {
                                return Err(self.err(format!(
                                    "iteration `{}`: the parts of T.sp.{} are axes or \
                                     T.sp.attach(...)",
                                    it.name,
                                    op.name()
                                )))
                            }
                        });
                    }
                    if out.is_empty() {
                        return Err(self.err(format!(
                            "iteration `{}`: T.sp.{} has no part",
                            it.name,
                            op.name()
                        )));
                    }
                    (out, Some(*op))
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
                    // One step per fused axis, each under the element of the one before.
                    for &a in chain {
                        self.axis(a)?;
                        self.not_under_coiteration(
                            it,
                            &steps,
                            Part {
                                axis: a,
                                attach: None,
                            },
                        )?;
                        steps.push(Step {
                            var: it.vars[k],
                            parts: vec![Part {
                                axis: a,
                                attach: None,
                            }],
                            co: None,
                            spatial: it.kinds[k] == IterKind::Spatial,
                        });
                        k += 1;
                    }
                    continue;
                }
                IterAxis::Attach { axis, parent } => {
                    (vec![self.attach_part(it, *axis, *parent)?], None)
                }
            };
            for &p in &parts {
                self.axis(p.axis)?;
                self.not_under_coiteration(it, &steps, p)?;
            }
            steps.push(Step {
                var: it.vars[k],
                parts,
                co,
                spatial: it.kinds[k] == IterKind::Spatial,
            });
            k += 1;
        }
        Ok(steps)
    }

    /// `T.sp.attach(axis, parent)`, supported when `axis`'s own parent is a `dense_fixed` root.
    fn attach_part(&self, it: &SparseIteration, axis: AxisId, parent: AxisId) -> Res<Part> {
        self.axis(parent)?;
        let ad = self.axis(axis)?;
        let own_parent_is_root = ad
            .parent
            .map(|p| self.axes[p.index()].kind == AxisKind::DenseFixed)
            .unwrap_or(false);
        if !own_parent_is_root {
            return Err(self.err(format!(
                "iteration `{}`: attach of `{}` is supported only when its own parent is a \
                 dense_fixed root",
                it.name, ad.name
            )));
        }
        Ok(Part {
            axis,
            attach: Some(parent),
        })
    }

    /// Refuses a part whose fiber depends on an axis walked by an earlier union step of the
    /// same iteration: a coordinate of the union may be absent from that axis's fiber, so it
    /// has no current element to hang a fiber from. (Under an intersection every part has the
    /// coordinate: its element is the current one.)
    fn not_under_coiteration(&self, it: &SparseIteration, steps: &[Step], p: Part) -> Res<()> {
        let Some(dep) = p.attach.or(self.axes[p.axis.index()].parent) else {
            return Ok(());
        };
        for st in steps.iter().filter(|s| s.co == Some(CoOp::Union)) {
            if st.parts.iter().any(|q| q.axis == dep) {
                return Err(self.err(format!(
                    "iteration `{}`: axis `{}` depends on axis `{}`, which T.sp.union iterates \
                     as `{}` (a coordinate of the union may be absent from `{2}`'s fiber: no \
                     element to hang `{1}`'s fiber from)",
                    it.name,
                    self.axes[p.axis.index()].name,
                    self.axes[dep.index()].name,
                    self.var_name(st.var)
                )));
            }
        }
        Ok(())
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
                let under_reduction = st.parts.iter().find_map(|part| {
                    let parent = part.attach.or(self.axes[part.axis.index()].parent)?;
                    steps[at..t]
                        .iter()
                        .find(|s| !s.spatial && s.parts.iter().any(|q| q.axis == parent))
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

    /// The parent position whose fiber `part` walks: the current element of its parent axis,
    /// or, for an attach, the coordinate of the iterator over the attach axis (a row of the
    /// attached axis's `dense_fixed` parent); 0 for a root.
    fn parent_position(&self, it: &SparseIteration, part: Part) -> Res<i64> {
        let ad = &self.axes[part.axis.index()];
        match (part.attach, ad.parent) {
            (Some(by), _) => match self.pos[by.index()] {
                Some((_, coord)) => Ok(coord),
                None => Err(self.err(format!(
                    "iteration `{}`: attach of `{}` needs `{}` to be iterated before it",
                    it.name,
                    ad.name,
                    self.axes[by.index()].name
                ))),
            },
            (None, None) => Ok(0),
            (None, Some(p)) => match self.pos[p.index()] {
                Some((global, _)) => Ok(global),
                None => Err(self.err(format!(
                    "iteration `{}`: the parent `{}` of axis `{}` is not iterated by this or an \
                     enclosing iteration",
                    it.name,
                    self.axes[p.index()].name,
                    ad.name
                ))),
            },
        }
    }

    /// Binds `step` to each element of its fiber in turn (under the current elements of its
    /// parent or attach axis), or, for a co-iteration, to each coordinate it walks, and runs `f`;
    /// restores the previous binding afterwards.
    fn each_element(
        &mut self,
        it: &SparseIteration,
        step: &Step,
        f: &mut dyn FnMut(&mut Self) -> Res<()>,
    ) -> Res<()> {
        let var_dtype = self
            .func
            .vars
            .get(step.var)
            .map(|v| v.dtype)
            .unwrap_or(DType::I32);
        if let Some(op) = step.co {
            return self.each_coordinate(it, step, op, var_dtype, f);
        }
        let part = step.parts[0];
        let ai = part.axis.index();
        let q = self.parent_position(it, part)?;
        let (start, count) = self.axes[ai].fiber(q).map_err(|m| self.err(m))?;
        let saved_pos = self.pos[ai];
        let saved_var = self.bind(step.var, None)?;
        let saved_axis = self.iter_axis[step.var.index()].replace(part.axis);
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

    /// A co-iteration step: binds its variable to each coordinate stored in any (union) or
    /// every (intersection) part's fiber, in increasing order, each once. The variable walks no
    /// single axis, so accesses through it resolve by coordinate search.
    fn each_coordinate(
        &mut self,
        it: &SparseIteration,
        step: &Step,
        op: CoOp,
        var_dtype: DType,
        f: &mut dyn FnMut(&mut Self) -> Res<()>,
    ) -> Res<()> {
        // Each part's fiber: coordinate -> global position.
        let mut fibers: Vec<BTreeMap<i64, i64>> = Vec::with_capacity(step.parts.len());
        for &part in &step.parts {
            let q = self.parent_position(it, part)?;
            let ad = &self.axes[part.axis.index()];
            let (start, count) = ad.fiber(q).map_err(|m| self.err(m))?;
            fibers.push(
                (start..start + count)
                    .map(|g| (ad.coord_at(start, g), g))
                    .collect(),
            );
        }
        let coords: BTreeSet<i64> = match op {
            CoOp::Union => fibers.iter().flat_map(|f| f.keys()).copied().collect(),
            CoOp::Intersect => fibers[0]
                .keys()
                .copied()
                .filter(|c| fibers[1..].iter().all(|f| f.contains_key(c)))
                .collect(),
        };
        let saved_var = self.bind(step.var, None)?;
        let saved_axis = self.iter_axis[step.var.index()].take();
        // Under an intersection every part holds the coordinate: each part's element is
        // current, so axes under a part (or attached by its coordinate) walk its fiber.
        let saved_pos: Vec<_> = step
            .parts
            .iter()
            .map(|p| self.pos[p.axis.index()])
            .collect();
        for coord in coords {
            if op == CoOp::Intersect {
                for (part, fiber) in step.parts.iter().zip(&fibers) {
                    self.pos[part.axis.index()] = Some((fiber[&coord], coord));
                }
            }
            self.vars[step.var.index()] = Some(Value::from_i128(coord as i128, var_dtype));
            f(self)?;
        }
        for (part, pos) in step.parts.iter().zip(saved_pos) {
            self.pos[part.axis.index()] = pos;
        }
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
                    if let Some(x) = self.assembled_nnz_of(*v) {
                        return Err(self.err(format!(
                            "`{}` is the nnz of assembled axis `{}`, known only after the run",
                            self.var_name(*v),
                            self.func.axes[x.axis].name
                        )));
                    }
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
                Ok(unary(*op, x))
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
                self.read(*buffer, &coords, indices)
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
