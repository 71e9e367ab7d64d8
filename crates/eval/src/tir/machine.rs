//! The stage II/III interpreter proper: binds arguments (scalars, structure arrays, buffer
//! arrays), then walks loops, blocks and statements, evaluating expressions with the
//! dtype-exact arithmetic of [`crate::value`].
//! Deliberately shares no code with the stage-I reference evaluator (`interp.rs`), which it is
//! checked against (an architecture invariant), so do not merge the two.

use std::collections::HashMap;

use sparsetir_formats::Tensor;
use sparsetir_ir::{
    AxisKind, BinOp, Block, BufferDecl, BufferId, BufferShape, DType, Expr, For, Intrinsic,
    IterKind, PrimFunc, Span, Stage, Stmt, VarId,
};

use super::layout::{dense_size, resolve_strides, sparse_layout, AxisRt, Layout, MAX_VALUES};
use crate::storage::{load as read, store as write};
use crate::value::{binary, intrinsic, round_float, scalar_argument, unary, Value};
use crate::{ArgValue, EvalError};

type Res<T> = Result<T, EvalError>;

/// A buffer ready for access.
#[derive(Clone, Debug)]
struct BufRt {
    name: String,
    dtype: DType,
    /// Index into `Machine::arrays`.
    slot: usize,
    layout: Layout,
    /// `extra_storage` slots after the values.
    extra: i64,
    /// Values + extra storage: the number of array elements the buffer owns.
    total: i64,
}

/// The evaluation state of one call.
struct Machine<'f> {
    func: &'f PrimFunc,
    axes: Vec<AxisRt>,
    bufs: Vec<Option<BufRt>>,
    arrays: Vec<Tensor>,
    /// The parameter each array came from (`None` for allocations).
    array_params: Vec<Option<VarId>>,
    slot_of_param: HashMap<VarId, usize>,
    /// The array slot reused by each allocated buffer.
    alloc_slot: Vec<Option<usize>>,
    vars: Vec<Option<Value>>,
    /// Where errors are reported: the innermost statement being run.
    span: Span,
}

/// Runs a stage II or III function; see [`super::run_func`].
pub(crate) fn run(func: &PrimFunc, args: &mut HashMap<String, ArgValue>) -> Res<()> {
    let stage = func.stage();
    if stage == Stage::I {
        return Err(EvalError {
            span: func.span,
            message: format!(
                "function `{}` is at stage I; the stage II/III interpreter needs a lowered \
                 function (use the reference evaluator for stage I)",
                func.name
            ),
        });
    }
    let mut m = Machine {
        func,
        axes: Vec::new(),
        bufs: vec![None; func.buffers.len()],
        arrays: Vec::new(),
        array_params: Vec::new(),
        slot_of_param: HashMap::new(),
        alloc_slot: vec![None; func.buffers.len()],
        vars: vec![None; func.vars.len()],
        span: func.span,
    };
    m.bind_scalars(args)?;
    m.setup_axes(args)?;
    for &b in &func.buffer_decls {
        m.declare_buffer(b, Some(args))?;
    }
    m.span = func.span;
    m.exec(&func.body)?;
    for (t, p) in m.arrays.into_iter().zip(m.array_params) {
        if let Some(p) = p {
            args.insert(func.vars[p].name.clone(), ArgValue::Array(t));
        }
    }
    Ok(())
}

/// Formats a value for messages.
fn show(v: Value) -> String {
    match v {
        Value::Int(i, _) => i.to_string(),
        Value::Float(x, _) => x.to_string(),
        Value::Bool(b) => if b { "True" } else { "False" }.to_string(),
    }
}

impl<'f> Machine<'f> {
    fn err(&self, message: impl Into<String>) -> EvalError {
        EvalError {
            span: self.span,
            message: message.into(),
        }
    }

    fn var_name(&self, v: VarId) -> String {
        self.func
            .vars
            .get(v)
            .map(|x| x.name.clone())
            .unwrap_or_else(|| format!("{v:?}"))
    }

    fn var_dtype(&self, v: VarId) -> Res<DType> {
        match self.func.vars.get(v) {
            Some(x) => Ok(x.dtype),
            None => Err(self.err(format!("variable {v:?} is not declared"))),
        }
    }

    // ------------------------------------------------------------------ arguments

    fn bind_scalars(&mut self, args: &HashMap<String, ArgValue>) -> Res<()> {
        for &p in &self.func.params {
            let dt = self.var_dtype(p)?;
            if dt == DType::Handle {
                continue;
            }
            let name = self.var_name(p);
            let v = scalar_argument(&name, dt, args.get(&name)).map_err(|m| self.err(m))?;
            self.vars[p.index()] = Some(v);
        }
        Ok(())
    }

    /// The array slot of a handle parameter, cloning the argument on first use.
    fn param_slot(&mut self, args: &HashMap<String, ArgValue>, p: VarId, what: &str) -> Res<usize> {
        if let Some(&s) = self.slot_of_param.get(&p) {
            return Ok(s);
        }
        let name = self.var_name(p);
        if !self.func.params.contains(&p) {
            return Err(self.err(format!(
                "`{name}` ({what}) is not a parameter of the function"
            )));
        }
        let t = match args.get(&name) {
            Some(ArgValue::Array(t)) => t.clone(),
            Some(_) => return Err(self.err(format!("argument `{name}` ({what}) must be an array"))),
            None => return Err(self.err(format!("missing argument `{name}` ({what})"))),
        };
        self.arrays.push(t);
        self.array_params.push(Some(p));
        let s = self.arrays.len() - 1;
        self.slot_of_param.insert(p, s);
        Ok(s)
    }

    /// Evaluates a size expression (over scalar parameters) to an integer in `0..=2^31`.
    fn eval_size(&mut self, e: &Expr, what: &str) -> Res<i64> {
        let v = self.eval(e)?;
        if v.is_float() {
            return Err(self.err(format!("{what} must be an integer, got {}", show(v))));
        }
        let n = v.as_i128();
        if n < 0 || n > MAX_VALUES as i128 {
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
            let mut rt = AxisRt {
                name: name.clone(),
                kind: ax.kind,
                parent: None,
                length,
                per_parent: 0,
                indptr: None,
                parent_count: 1,
                level_count: length,
            };
            if ax.kind == AxisKind::DenseFixed {
                self.axes.push(rt);
                continue;
            }
            let parent = match ax.parent {
                Some(p) if p.index() < h.index() => p.index(),
                Some(_) => {
                    return Err(self.err(format!(
                        "axis `{name}`: its parent must be declared before it"
                    )))
                }
                None => {
                    return Err(self.err(format!(
                        "axis `{name}` ({}) needs a parent",
                        ax.kind.canonical_name()
                    )))
                }
            };
            rt.parent = Some(parent);
            rt.parent_count = self.axes[parent].level_count;
            if ax.kind == AxisKind::CompressedFixed {
                let Some(c) = &ax.nnz_cols else {
                    return Err(self.err(format!("axis `{name}` has no nnz_cols")));
                };
                rt.per_parent = self.eval_size(c, &format!("nnz_cols of axis `{name}`"))?;
                rt.level_count = rt
                    .parent_count
                    .checked_mul(rt.per_parent)
                    .filter(|n| *n <= MAX_VALUES)
                    .ok_or_else(|| self.err(format!("axis `{name}`: more than 2^31 elements")))?;
                self.axes.push(rt);
                continue;
            }
            let nnz = match &ax.nnz {
                Some(e) => Some(self.eval_size(e, &format!("nnz of axis `{name}`"))?),
                None => None,
            };
            let Some(p) = ax.indptr else {
                return Err(self.err(format!("axis `{name}` has no indptr parameter")));
            };
            let slot = self.param_slot(args, p, &format!("indptr of axis `{name}`"))?;
            rt.level_count = self.check_indptr(&name, slot, rt.parent_count, nnz)?;
            rt.indptr = Some(slot);
            self.axes.push(rt);
        }
        Ok(())
    }

    /// Validates an `indptr` array (integer, `parent_count + 1` entries at least, starting at 0,
    /// non-decreasing, ending at `nnz` when declared) and returns its last value.
    fn check_indptr(
        &self,
        axis: &str,
        slot: usize,
        parent_count: i64,
        nnz: Option<i64>,
    ) -> Res<i64> {
        let t = &self.arrays[slot];
        if !t.dtype().is_integer() {
            return Err(self.err(format!(
                "indptr of axis `{axis}` must have an integer dtype, got {}",
                t.dtype()
            )));
        }
        let need = parent_count as usize + 1;
        if t.len() < need {
            return Err(self.err(format!(
                "indptr of axis `{axis}` has {} entries, expected {need} (parent count + 1)",
                t.len()
            )));
        }
        let mut prev = 0i128;
        for i in 0..need {
            let v = read(t, i).map(|v| v.as_i128()).unwrap_or(0);
            if (i == 0 && v != 0) || v < prev || v > MAX_VALUES as i128 {
                return Err(self.err(format!(
                    "indptr of axis `{axis}` is invalid at entry {i} (value {v}): it must start at \
                     0 and never decrease"
                )));
            }
            prev = v;
        }
        if let Some(n) = nnz {
            if prev != n as i128 {
                return Err(self.err(format!(
                    "axis `{axis}`: the last indptr value {prev} differs from the declared nnz {n}"
                )));
            }
        }
        Ok(prev as i64)
    }

    /// Evaluates the layout of buffer `b` in the current environment.
    fn make_layout(&mut self, b: BufferId) -> Res<(Layout, i64, i64)> {
        let func = self.func;
        let Some(buf) = func.buffers.get(b) else {
            return Err(self.err(format!("buffer {b:?} is not declared")));
        };
        let name = &buf.name;
        if buf.dtype == DType::Handle {
            return Err(self.err(format!("buffer `{name}` cannot hold values of type handle")));
        }
        let (layout, size) = match &buf.shape {
            BufferShape::Sparse(axes) => {
                let mut idx = Vec::with_capacity(axes.len());
                for a in axes {
                    if a.index() >= self.axes.len() {
                        return Err(self.err(format!("buffer `{name}`: unknown axis {a:?}")));
                    }
                    idx.push(a.index());
                }
                sparse_layout(name, &idx, &self.axes).map_err(|m| self.err(m))?
            }
            BufferShape::Dense(dims) => {
                let mut extents = Vec::with_capacity(dims.len());
                for d in dims {
                    extents.push(self.eval_size(d, &format!("extent of buffer `{name}`"))?);
                }
                let mut given = Vec::with_capacity(buf.strides.len());
                for s in &buf.strides {
                    given.push(self.eval_size(s, &format!("stride of buffer `{name}`"))?);
                }
                let strides = resolve_strides(name, &extents, &given).map_err(|m| self.err(m))?;
                let size = dense_size(name, &extents, &strides).map_err(|m| self.err(m))?;
                (Layout::Dense { extents, strides }, size)
            }
        };
        let extra = match &buf.extra_storage {
            Some(e) => self.eval_size(e, &format!("extra_storage of buffer `{name}`"))?,
            None => 0,
        };
        let total = size + extra;
        if total > MAX_VALUES {
            return Err(self.err(format!("buffer `{name}`: more than 2^31 values")));
        }
        Ok((layout, extra, total))
    }

    /// Makes buffer `b` accessible: a match buffer binds its parameter's array (`args` given), an
    /// allocation gets a zeroed array. Returns the previous state, for scoped allocations.
    fn declare_buffer(
        &mut self,
        b: BufferId,
        args: Option<&HashMap<String, ArgValue>>,
    ) -> Res<Option<BufRt>> {
        let func = self.func;
        let Some(buf) = func.buffers.get(b) else {
            return Err(self.err(format!("buffer {b:?} is not declared")));
        };
        if !buf.span.is_unknown() && args.is_some() {
            self.span = buf.span;
        }
        let (layout, extra, total) = self.make_layout(b)?;
        let name = buf.name.clone();
        let slot = match (buf.decl.clone(), args) {
            (BufferDecl::Match { data }, Some(args)) => {
                let s = self.param_slot(args, data, &format!("values of buffer `{name}`"))?;
                let t = &self.arrays[s];
                if t.dtype() != buf.dtype {
                    return Err(self.err(format!(
                        "buffer `{name}` has dtype {}, but argument `{}` holds {}",
                        buf.dtype,
                        self.var_name(data),
                        t.dtype()
                    )));
                }
                if (t.len() as i64) < total {
                    return Err(self.err(format!(
                        "buffer `{name}` needs {total} values, but argument `{}` holds only {}",
                        self.var_name(data),
                        t.len()
                    )));
                }
                s
            }
            (BufferDecl::Match { .. }, None) => {
                return Err(self.err(format!(
                    "match buffer `{name}` must be declared at function level"
                )))
            }
            (BufferDecl::Alloc, _) => {
                let t = Tensor::zeros(buf.dtype, vec![total as usize])
                    .map_err(|e| self.err(e.to_string()))?;
                match self.alloc_slot[b.index()] {
                    Some(s) => {
                        self.arrays[s] = t;
                        s
                    }
                    None => {
                        self.arrays.push(t);
                        self.array_params.push(None);
                        let s = self.arrays.len() - 1;
                        self.alloc_slot[b.index()] = Some(s);
                        s
                    }
                }
            }
        };
        let rt = BufRt {
            name,
            dtype: buf.dtype,
            slot,
            layout,
            extra,
            total,
        };
        Ok(self.bufs[b.index()].replace(rt))
    }

    // ------------------------------------------------------------------ statements

    fn exec(&mut self, s: &Stmt) -> Res<()> {
        // Only statements that carry a span of their own move the error location (a sequence's
        // span would need a walk over all its children).
        let own = match s {
            Stmt::For(f) => f.span,
            Stmt::Block(b) => b.span,
            Stmt::Store(st) => st.span,
            Stmt::If(i) => i.span,
            Stmt::While(w) => w.span,
            Stmt::Let(l) => l.span,
            Stmt::SparseIteration(it) => it.span,
            Stmt::AssumeBufferDomain { span, .. } => *span,
            Stmt::Seq(_) | Stmt::Evaluate(_) | Stmt::Allocate(_) => Span::default(),
        };
        if !own.is_unknown() {
            self.span = own;
        }
        match s {
            Stmt::Seq(v) => {
                let mut scoped: Vec<(BufferId, Option<BufRt>)> = Vec::new();
                let mut result = Ok(());
                let outer = self.span;
                for st in v {
                    self.span = outer;
                    if let Stmt::Allocate(b) = st {
                        match self.declare_buffer(*b, None) {
                            Ok(prev) => scoped.push((*b, prev)),
                            Err(e) => {
                                result = Err(e);
                                break;
                            }
                        }
                        continue;
                    }
                    if let Err(e) = self.exec(st) {
                        result = Err(e);
                        break;
                    }
                }
                for (b, prev) in scoped.into_iter().rev() {
                    self.bufs[b.index()] = prev;
                }
                result
            }
            Stmt::SparseIteration(it) => Err(self.err(format!(
                "sparse iteration `{}` is a stage-I statement; lower the function first",
                it.name
            ))),
            Stmt::For(f) => self.exec_for(f),
            Stmt::Block(b) => self.exec_block(b),
            Stmt::Store(st) => {
                let value = self.eval(&st.value)?;
                self.span = st.span;
                let (slot, off, dtype) = self.address(st.buffer, &st.indices)?;
                let v = value.cast(dtype).map_err(|m| self.err(m))?;
                if !write(&mut self.arrays[slot], off, v) {
                    return Err(self.err("internal: value offset out of range"));
                }
                Ok(())
            }
            Stmt::If(i) => {
                if self.eval(&i.cond)?.truthy() {
                    self.exec(&i.then_case)
                } else if let Some(e) = &i.else_case {
                    self.exec(e)
                } else {
                    Ok(())
                }
            }
            Stmt::While(w) => {
                while self.eval(&w.cond)?.truthy() {
                    self.exec(&w.body)?;
                }
                Ok(())
            }
            Stmt::Evaluate(e) => self.eval(e).map(|_| ()),
            Stmt::Allocate(b) => {
                // Outside a sequence the allocation has no statements after it to serve.
                self.declare_buffer(*b, None).map(|_| ())
            }
            Stmt::Let(l) => {
                let dt = self.var_dtype(l.var)?;
                let v = self.eval(&l.value)?;
                let v = v.cast(dt).map_err(|m| self.err(m))?;
                let saved = self.vars[l.var.index()].replace(v);
                let r = self.exec(&l.body);
                self.vars[l.var.index()] = saved;
                r
            }
            Stmt::AssumeBufferDomain { buffer, lo, hi, .. } => {
                let lo = self.eval(lo)?;
                let hi = self.eval(hi)?;
                let buf = self.buf(*buffer)?;
                let (name, slot, total) = (buf.name.clone(), buf.slot, buf.total);
                for i in 0..total as usize {
                    let Some(v) = read(&self.arrays[slot], i) else {
                        break;
                    };
                    let ge = binary(BinOp::Ge, v, lo).map_err(|m| self.err(m))?.truthy();
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
        }
    }

    fn exec_for(&mut self, f: &For) -> Res<()> {
        let dt = self.var_dtype(f.var)?;
        if !dt.is_integer() {
            return Err(self.err(format!(
                "loop variable `{}` has type {dt}; loops need an integer variable",
                self.var_name(f.var)
            )));
        }
        let min = self.eval_int(&f.min, "loop start")?;
        let extent = self.eval_int(&f.extent, "loop extent")?;
        let saved = self.vars[f.var.index()];
        let mut result = Ok(());
        let mut k: i128 = 0;
        while k < extent as i128 {
            let v = Value::from_i128(min as i128 + k, dt);
            self.vars[f.var.index()] = Some(v);
            if let Err(e) = self.exec(&f.body) {
                result = Err(e);
                break;
            }
            k += 1;
        }
        self.vars[f.var.index()] = saved;
        result
    }

    fn exec_block(&mut self, b: &Block) -> Res<()> {
        let span = b.span;
        // A predicate over the loops (a split's `T.where(i_0 * 4 + i_1 < n)`) guards the
        // bindings too, as the writers emit it: a binding may read memory (`mid[i_0 * 4 +
        // i_1]`) that the padded iterations have no element of.
        let mut over_loops = false;
        if let Some(p) = &b.predicate {
            let mut own = false;
            p.visit(&mut |e| {
                if let Expr::Var(v) = e {
                    own |= b.iters.iter().any(|it| it.var == *v);
                }
            });
            over_loops = !own;
            if over_loops && !self.eval(p)?.truthy() {
                return Ok(());
            }
        }
        let mut values = Vec::with_capacity(b.iters.len());
        let mut at_min = true;
        for it in &b.iters {
            let dt = self.var_dtype(it.var)?;
            let v = self.eval(&it.binding)?;
            let v = v.cast(dt).map_err(|m| self.err(m))?;
            let min = self.eval_int(&it.min, "block iterator minimum")?;
            let extent = self.eval_int(&it.extent, "block iterator extent")?;
            if it.kind == IterKind::Reduce && v.as_i128() != min as i128 {
                at_min = false;
            }
            values.push((it.var, v, min, extent));
        }
        let saved: Vec<Option<Value>> = values
            .iter()
            .map(|(var, ..)| self.vars[var.index()])
            .collect();
        for (var, v, ..) in &values {
            self.vars[var.index()] = Some(*v);
        }
        let result = self.block_instance(b, &values, at_min, over_loops);
        for ((var, ..), old) in values.iter().zip(saved) {
            self.vars[var.index()] = old;
        }
        self.span = span;
        result
    }

    /// One block instance, with its iterators bound (`checked`: its predicate already held).
    fn block_instance(
        &mut self,
        b: &Block,
        values: &[(VarId, Value, i64, i64)],
        init: bool,
        checked: bool,
    ) -> Res<()> {
        if let (false, Some(p)) = (checked, &b.predicate) {
            if !self.eval(p)?.truthy() {
                return Ok(());
            }
        }
        for (var, v, min, extent) in values {
            let x = v.as_i128();
            if v.is_float() || x < *min as i128 || x >= *min as i128 + *extent as i128 {
                return Err(self.err(format!(
                    "block `{}`: iterator `{}` = {} is outside its domain [{min}, {})",
                    b.name,
                    self.var_name(*var),
                    show(*v),
                    *min as i128 + *extent as i128
                )));
            }
        }
        let mut scoped: Vec<(BufferId, Option<BufRt>)> = Vec::new();
        let mut result = Ok(());
        for &a in &b.alloc_buffers {
            match self.declare_buffer(a, None) {
                Ok(prev) => scoped.push((a, prev)),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        if result.is_ok() {
            if let (true, Some(i)) = (init, &b.init) {
                result = self.exec(i);
            }
        }
        if result.is_ok() {
            result = self.exec(&b.body);
        }
        for (a, prev) in scoped.into_iter().rev() {
            self.bufs[a.index()] = prev;
        }
        result
    }

    // ------------------------------------------------------------------ memory

    fn buf(&self, b: BufferId) -> Res<&BufRt> {
        match self.bufs.get(b.index()).and_then(|x| x.as_ref()) {
            Some(r) => Ok(r),
            None => {
                let name = self
                    .func
                    .buffers
                    .get(b)
                    .map(|x| x.name.clone())
                    .unwrap_or_else(|| format!("{b:?}"));
                Err(self.err(format!("buffer `{name}` is not allocated here")))
            }
        }
    }

    /// The `(array slot, flat offset, dtype)` of `buffer[indices]`.
    fn address(&mut self, buffer: BufferId, indices: &[Expr]) -> Res<(usize, usize, DType)> {
        let mut idx = Vec::with_capacity(indices.len());
        for e in indices {
            idx.push(self.eval_int(e, "buffer index")?);
        }
        let buf = self.buf(buffer)?;
        let arrays = &self.arrays;
        let indptr = |slot: usize, q: i64| -> Result<i64, String> {
            let t = &arrays[slot];
            match usize::try_from(q).ok().and_then(|i| read(t, i)) {
                Some(v) => Ok(v.as_i128() as i64),
                None => Err(format!(
                    "indptr entry {q} is outside the array (length {})",
                    t.len()
                )),
            }
        };
        let off = buf
            .layout
            .offset(&buf.name, &idx, buf.extra > 0, &self.axes, &indptr)
            .map_err(|m| self.err(m))?;
        if off < 0 || off >= buf.total || off as usize >= self.arrays[buf.slot].len() {
            return Err(self.err(format!(
                "buffer `{}`: access {idx:?} gives offset {off}, outside its {} values",
                buf.name, buf.total
            )));
        }
        Ok((buf.slot, off as usize, buf.dtype))
    }

    // ------------------------------------------------------------------ expressions

    /// Evaluates an integer expression to an `i64`.
    fn eval_int(&mut self, e: &Expr, what: &str) -> Res<i64> {
        let v = self.eval(e)?;
        if v.is_float() {
            return Err(self.err(format!("{what} must be an integer, got {}", show(v))));
        }
        i64::try_from(v.as_i128())
            .map_err(|_| self.err(format!("{what} {} does not fit in 64 bits", show(v))))
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
            Expr::Var(v) => {
                if self.var_dtype(*v)? == DType::Handle {
                    return Err(self.err(format!(
                        "handle `{}` cannot be used as a value",
                        self.var_name(*v)
                    )));
                }
                match self.vars.get(v.index()).copied().flatten() {
                    Some(x) => Ok(x),
                    None => Err(self.err(format!(
                        "variable `{}` is used where it has no value",
                        self.var_name(*v)
                    ))),
                }
            }
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
                // Lazy: only the chosen branch runs (guards around searches rely on it).
                if self.eval(c)?.truthy() {
                    self.eval(a)
                } else {
                    self.eval(b)
                }
            }
            Expr::Cast(dt, a) => {
                let x = self.eval(a)?;
                x.cast(*dt).map_err(|m| self.err(m))
            }
            Expr::Load { buffer, indices } => {
                let (slot, off, _) = self.address(*buffer, indices)?;
                read(&self.arrays[slot], off)
                    .ok_or_else(|| self.err("internal: value offset out of range"))
            }
            Expr::Call {
                op: Intrinsic::AtomicAdd,
                args,
                dtype,
            } => self.atomic_add(args, *dtype),
            Expr::Call {
                op: Intrinsic::SortRange,
                args,
                ..
            } => self.sort_range(args),
            Expr::Call {
                op: Intrinsic::Mask64,
                args,
                dtype,
            } => self.mask64(args, *dtype),
            Expr::Call {
                op: op @ (Intrinsic::Compress64 | Intrinsic::CompressIota64),
                args,
                dtype,
            } => self.compress64(*op, args, *dtype),
            Expr::Call {
                op: Intrinsic::CopyRange,
                args,
                dtype,
            } => self.copy_range(args, *dtype),
            Expr::Call { op, args, dtype } => {
                let mut xs = Vec::with_capacity(args.len());
                for a in args {
                    xs.push(self.eval(a)?);
                }
                intrinsic(*op, &xs, *dtype).map_err(|m| self.err(m))
            }
            Expr::Let { var, value, body } => {
                let dt = self.var_dtype(*var)?;
                let v = self.eval(value)?;
                let v = v.cast(dt).map_err(|m| self.err(m))?;
                let saved = self.vars[var.index()].replace(v);
                let r = self.eval(body);
                self.vars[var.index()] = saved;
                r
            }
        }
    }

    /// `T.sort_range(X[idx], n)`: sorts the `n` elements from `X[idx]` on (integers, in
    /// increasing order) and yields 0.
    fn sort_range(&mut self, args: &[Expr]) -> Res<Value> {
        let [Expr::Load { buffer, indices }, n] = args else {
            return Err(self.err("`sort_range` takes a buffer element `X[idx]` and a count"));
        };
        let n = self.eval(n)?.as_i128();
        if n <= 0 {
            return Ok(Value::Int(0, sparsetir_ir::DType::I32));
        }
        let (slot, off, _) = self.address(*buffer, indices)?;
        let mut vals = Vec::new();
        for k in 0..n.max(0) as usize {
            let v = read(&self.arrays[slot], off + k)
                .ok_or_else(|| self.err("`sort_range`: the range runs past its buffer"))?;
            vals.push(v);
        }
        if vals.iter().any(|v| !matches!(v, Value::Int(..))) {
            return Err(self.err("`sort_range` sorts integers"));
        }
        let keys: Vec<i128> = vals.iter().map(|v| v.as_i128()).collect();
        let mut order: Vec<usize> = (0..vals.len()).collect();
        order.sort_by_key(|&k| keys[k]);
        for (k, &o) in order.iter().enumerate() {
            if !write(&mut self.arrays[slot], off + k, vals[o]) {
                return Err(self.err("`sort_range`: the range runs past its buffer"));
            }
        }
        Ok(Value::Int(0, sparsetir_ir::DType::I32))
    }

    /// `T.mask64(X[idx])`: bit `k` set where `X[idx + k]` is not 0, `k` in `0..64`, for an
    /// 8-bit integer buffer `X`; all 64 elements must lie in the buffer.
    fn mask64(&mut self, args: &[Expr], dtype: DType) -> Res<Value> {
        let [Expr::Load { buffer, indices }] = args else {
            return Err(self.err("`mask64` takes one buffer element `X[idx]`"));
        };
        let (slot, off, bdt) = self.address(*buffer, indices)?;
        if !(bdt.is_integer() && bdt.bits() == 8) {
            return Err(self.err(format!("`mask64` reads 8-bit integers, not {}", bdt.name())));
        }
        let mut bits: u64 = 0;
        for k in 0..64 {
            let v = read(&self.arrays[slot], off + k)
                .ok_or_else(|| self.err("`mask64`: the 64 elements run past their buffer"))?;
            if v.as_i128() != 0 {
                bits |= 1 << k;
            }
        }
        Value::from_i128(i128::from(bits), DType::U64)
            .cast(dtype)
            .map_err(|m| self.err(m))
    }

    /// `T.compress64(D[i], S[j], mask)` / `T.compress_iota64(D[i], base, mask)`: for the
    /// `r`-th set bit `k` of `mask`, `D[i + r]` becomes `S[j + k]` (`S` of `D`'s dtype) or
    /// `base + k`; yields 0. Every element written or read must lie in its buffer.
    fn compress64(&mut self, op: Intrinsic, args: &[Expr], dtype: DType) -> Res<Value> {
        let name = op.name();
        let [Expr::Load { buffer, indices }, src, mask] = args else {
            return Err(self.err(format!(
                "`{name}` takes a destination element `D[i]`, a {} and a mask",
                if op == Intrinsic::Compress64 {
                    "source element `S[j]`"
                } else {
                    "base"
                }
            )));
        };
        let mask = self.eval(mask)?;
        let Value::Int(m, md) = mask else {
            return Err(self.err(format!("`{name}`: the mask is an integer")));
        };
        let bits = (m & ((1i128 << md.bits().min(64)) - 1)) as u64;
        let (dslot, doff, ddt) = self.address(*buffer, indices)?;
        let mut values = Vec::with_capacity(bits.count_ones() as usize);
        if op == Intrinsic::Compress64 {
            let Expr::Load {
                buffer: sb,
                indices: si,
            } = src
            else {
                return Err(self.err("`compress64`: the source is a buffer element `S[j]`"));
            };
            let (sslot, soff, sdt) = self.address(*sb, si)?;
            self.one_dtype("compress64", sdt, ddt)?;
            for k in (0..64).filter(|k| bits >> k & 1 == 1) {
                let v = read(&self.arrays[sslot], soff + k)
                    .ok_or_else(|| self.err("`compress64`: the source runs past its buffer"))?;
                values.push(v);
            }
        } else {
            if !ddt.is_integer() {
                return Err(self.err(format!(
                    "`compress_iota64` writes integers, not {}",
                    ddt.name()
                )));
            }
            let base = self.eval(src)?.as_i128();
            for k in (0..64).filter(|k| bits >> k & 1 == 1) {
                values.push(Value::from_i128(base + i128::from(k), ddt));
            }
        }
        for (r, v) in values.into_iter().enumerate() {
            if !write(&mut self.arrays[dslot], doff + r, v) {
                return Err(self.err(format!("`{name}`: the destination runs past its buffer")));
            }
        }
        Ok(Value::from_i128(0, dtype))
    }

    /// The copying statements move elements between buffers of one dtype.
    fn one_dtype(&self, name: &str, src: DType, dst: DType) -> Res<()> {
        if src == dst {
            return Ok(());
        }
        Err(self.err(format!(
            "`{name}` copies between buffers of one dtype, not {} to {}",
            src.name(),
            dst.name()
        )))
    }

    /// `T.copy_range(D[i], S[j], n)`: `D[i + k] = S[j + k]` for `k` in `0..n` (`S` of `D`'s
    /// dtype); yields 0. The elements may run past the fiber `D[i]` names, not past the
    /// buffers' storage.
    fn copy_range(&mut self, args: &[Expr], dtype: DType) -> Res<Value> {
        let [Expr::Load { buffer, indices }, Expr::Load {
            buffer: sb,
            indices: si,
        }, n] = args
        else {
            return Err(self.err(
                "`copy_range` takes a destination element `D[i]`, a source element `S[j]` and a count",
            ));
        };
        let n = self.eval_int(n, "`copy_range` count")?;
        if n <= 0 {
            return Ok(Value::from_i128(0, dtype));
        }
        let (dslot, doff, ddt) = self.address(*buffer, indices)?;
        let (sslot, soff, sdt) = self.address(*sb, si)?;
        self.one_dtype("copy_range", sdt, ddt)?;
        for k in 0..n as usize {
            let v = read(&self.arrays[sslot], soff + k)
                .ok_or_else(|| self.err("`copy_range`: the source runs past its buffer"))?;
            if !write(&mut self.arrays[dslot], doff + k, v) {
                return Err(self.err("`copy_range`: the destination runs past its buffer"));
            }
        }
        Ok(Value::from_i128(0, dtype))
    }

    /// `T.atomic_add(A[idx], value)`: adds `value` to the element `A[idx]` (the first argument
    /// must be a load, which names the address) and returns the element's old value.
    fn atomic_add(&mut self, args: &[Expr], dtype: DType) -> Res<Value> {
        let [target, value] = args else {
            return Err(self.err(format!(
                "`atomic_add` takes 2 arguments (an element `A[idx]` and a value), got {}",
                args.len()
            )));
        };
        let Expr::Load { buffer, indices } = target else {
            return Err(
                self.err("the first argument of `atomic_add` must be a buffer element `A[idx]`")
            );
        };
        let v = self.eval(value)?;
        let (slot, off, bdt) = self.address(*buffer, indices)?;
        let old = read(&self.arrays[slot], off)
            .ok_or_else(|| self.err("internal: value offset out of range"))?;
        let new = binary(BinOp::Add, old, v)
            .and_then(|s| s.cast(bdt))
            .map_err(|m| self.err(m))?;
        if !write(&mut self.arrays[slot], off, new) {
            return Err(self.err("internal: value offset out of range"));
        }
        if dtype == DType::Handle {
            return Ok(old);
        }
        old.cast(dtype).map_err(|m| self.err(m))
    }
}
