//! Binding user data to a function: `Binder` collects scalar settings, sparse (COO) and dense
//! (array) binds per buffer, infers size parameters from the data, checks that buffers sharing
//! axes share their structure, and produces the argument map the backends take.

use std::collections::{HashMap, HashSet};

use crate::assembly::Assembled;
use sparsetir_eval::ArgValue;
use sparsetir_formats::pack::{self, LevelSpec, PackedLevel};
use sparsetir_formats::{Coo, Field, Tensor};
use sparsetir_ir::{
    AxisId, AxisKind, BinOp, BufferId, BufferShape, DType, Expr, IterAxis, PrimFunc, Stmt, VarId,
};

/// Why binding failed. Every message names the buffer, axis or parameter concerned.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BindError {
    #[error("function `{func}` has no buffer `{name}` (buffers: {known})")]
    UnknownBuffer {
        func: String,
        name: String,
        known: String,
    },
    #[error("buffer `{0}` is allocated inside the function, not a parameter: it cannot be bound")]
    NotAParameter(String),
    #[error("function `{func}` has no scalar parameter `{name}` (scalar parameters: {known})")]
    UnknownParam {
        func: String,
        name: String,
        known: String,
    },
    #[error("parameter `{name}`: cannot read `{value}` as {dtype}")]
    BadValue {
        name: String,
        value: String,
        dtype: DType,
    },
    #[error("{what} `{name}` = {value} does not fit its dtype {dtype}")]
    OutOfRange {
        what: String,
        name: String,
        value: i64,
        dtype: DType,
    },
    #[error("buffer `{0}` was bound twice")]
    BoundTwice(String),
    #[error("buffer `{buffer}` has {expected} dimensions but the data has {found}")]
    RankMismatch {
        buffer: String,
        expected: usize,
        found: usize,
    },
    #[error("buffer `{buffer}`: {what} is {expected} but the data gives {found}")]
    SizeMismatch {
        buffer: String,
        what: String,
        expected: i64,
        found: i64,
    },
    #[error("buffer `{buffer}` has dtype {expected} but the data is {found}")]
    DTypeMismatch {
        buffer: String,
        expected: DType,
        found: String,
    },
    #[error(
        "buffer `{buffer}` is sparse (axes {axes}): bind a .mtx or .tns file, not a dense array"
    )]
    NotDense { buffer: String, axes: String },
    #[error(
        "buffer `{buffer}`: its sparsity pattern on axis `{axis}` differs from the one bound \
         before by `{by}` (buffers over the same axes must share their structure)"
    )]
    PatternMismatch {
        buffer: String,
        axis: String,
        by: String,
    },
    #[error("buffer `{buffer}`: {message}")]
    Pack { buffer: String, message: String },
    #[error("axis `{axis}`: invalid structure arrays: {message}")]
    Structure { axis: String, message: String },
    #[error("input buffer `{0}` is not bound: pass --bind {0}=FILE")]
    MissingBind(String),
    #[error(
        "axis `{axis}` has no structure yet (needed by `{needed_by}`): bind a buffer over it first"
    )]
    MissingStructure { axis: String, needed_by: String },
    #[error("parameter `{0}` has no value: pass --set {0}=VALUE, or bind data that implies it")]
    MissingParam(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("buffer `{buffer}`: {message}")]
    Output { buffer: String, message: String },
    #[error(
        "shapes do not conform: {first} but {second}: `{param}` would be {first_value} and \
         {second_value}"
    )]
    Nonconforming {
        param: String,
        /// The buffer that set the parameter first, its file where known, and its shape:
        /// `` `A` (a.mtx) is 7×5 ``.
        first: String,
        first_value: i64,
        /// The same for the buffer that conflicts with it.
        second: String,
        second_value: i64,
    },
    #[error(
        "buffer `{buffer}` is stored over axis `{axis}`, whose structure the kernel assembles: \
         its structure and values are outputs of the run, not inputs"
    )]
    AssembledBuffer { buffer: String, axis: String },
    #[error(
        "parameter `{param}` belongs to axis `{axis}`, whose structure the kernel assembles: it \
         is an output of the run, not an input"
    )]
    AssembledParam { param: String, axis: String },
}

/// Whether `value` is representable in the integer dtype `dtype` (other dtypes: always).
fn fits(dtype: DType, value: i64) -> bool {
    let bits = dtype.bits();
    if !dtype.is_integer() || bits >= 64 && dtype.is_int() {
        return true;
    }
    if dtype.is_uint() {
        return value >= 0 && (bits >= 64 || value < (1i64 << bits));
    }
    let half = 1i64 << (bits - 1);
    (-half..half).contains(&value)
}

/// `7×5`.
fn shape_text(dims: &[usize]) -> String {
    dims.iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("×")
}

/// A result read back from a buffer.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// A buffer whose axes are all dense: the full array, shaped by the axis lengths.
    Dense(Tensor),
    /// A sparse buffer: its stored pattern with the computed values.
    Sparse(Coo),
}

/// Collects binds for one function, then produces its arguments.
pub struct Binder<'f> {
    func: &'f PrimFunc,
    ints: HashMap<VarId, i64>,
    floats: HashMap<VarId, f64>,
    /// Structure of every axis known so far (dense_fixed axes once their length is known).
    structure: HashMap<AxisId, (PackedLevel, String)>,
    arrays: HashMap<VarId, Tensor>,
    /// Structure arrays (`indptr`/`indices`) bound directly by parameter name.
    raw: HashMap<VarId, Tensor>,
    bound: HashSet<BufferId>,
    /// Where a buffer's data came from (a file), by buffer name, for messages.
    sources: HashMap<String, String>,
    /// Each size parameter set from a bound array's shape: the buffer and that shape.
    dim_origin: HashMap<VarId, (String, Vec<usize>)>,
    assembled: Assembled,
}

fn names<'a>(it: impl Iterator<Item = &'a str>) -> String {
    let v: Vec<&str> = it.collect();
    if v.is_empty() {
        "none".to_string()
    } else {
        v.join(", ")
    }
}

impl<'f> Binder<'f> {
    pub fn new(func: &'f PrimFunc) -> Binder<'f> {
        Binder {
            func,
            ints: HashMap::new(),
            floats: HashMap::new(),
            structure: HashMap::new(),
            arrays: HashMap::new(),
            raw: HashMap::new(),
            bound: HashSet::new(),
            sources: HashMap::new(),
            dim_origin: HashMap::new(),
            assembled: Assembled::of(func),
        }
    }

    /// Names the file (or other source) of buffer `name`'s data in later messages, e.g. shapes
    /// that do not conform: `` `A` (a.mtx) is 7×5 but `B` (b.mtx) is 4×9 ``.
    pub fn set_source(&mut self, name: &str, source: impl Into<String>) {
        self.sources.insert(name.to_string(), source.into());
    }

    /// `` `A` (a.mtx) ``, or `` `A` `` when no source was given.
    fn describe(&self, name: &str) -> String {
        match self.sources.get(name) {
            Some(s) => format!("`{name}` ({s})"),
            None => format!("`{name}`"),
        }
    }

    /// Checks that the dimensions of data bound to `name` agree with the ones other bound data
    /// set for the same size parameters (`lengths[l]` is dimension `l`'s declared length), then
    /// records which buffer set each. A conflict names both buffers, their files and shapes.
    fn conform(&mut self, name: &str, lengths: &[Expr], dims: &[usize]) -> Result<(), BindError> {
        for (e, &d) in lengths.iter().zip(dims) {
            let Expr::Var(v) = e else { continue };
            let (Some(&old), Some((by, shape))) = (self.ints.get(v), self.dim_origin.get(v)) else {
                continue;
            };
            if old != d as i64 {
                return Err(BindError::Nonconforming {
                    param: self.func.vars[*v].name.clone(),
                    first: format!("{} is {}", self.describe(by), shape_text(shape)),
                    first_value: old,
                    second: format!("{} is {}", self.describe(name), shape_text(dims)),
                    second_value: d as i64,
                });
            }
        }
        for e in lengths {
            if let Expr::Var(v) = e {
                if !self.ints.contains_key(v) {
                    self.dim_origin
                        .entry(*v)
                        .or_insert_with(|| (name.to_string(), dims.to_vec()));
                }
            }
        }
        Ok(())
    }

    fn scalar_params(&self) -> impl Iterator<Item = VarId> + '_ {
        self.func
            .params
            .iter()
            .copied()
            .filter(|v| self.func.vars[*v].dtype != DType::Handle)
    }

    /// Sets a scalar parameter from its text (`--set feat_size=32`).
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), BindError> {
        let var = self
            .scalar_params()
            .find(|v| self.func.vars[*v].name == name)
            .ok_or_else(|| BindError::UnknownParam {
                func: self.func.name.clone(),
                name: name.to_string(),
                known: names(
                    self.scalar_params()
                        .map(|v| self.func.vars[v].name.as_str()),
                ),
            })?;
        self.refuse_assembled_param(var)?;
        let dtype = self.func.vars[var].dtype;
        let bad = || BindError::BadValue {
            name: name.into(),
            value: value.into(),
            dtype,
        };
        if dtype.is_float() {
            let x: f64 = value.trim().parse().map_err(|_| bad())?;
            self.floats.insert(var, x);
        } else {
            let x: i64 = value.trim().parse().map_err(|_| bad())?;
            self.assign(var, x, name, "parameter")?;
        }
        Ok(())
    }

    fn assign(
        &mut self,
        var: VarId,
        value: i64,
        buffer: &str,
        what: &str,
    ) -> Result<(), BindError> {
        // A size bound to an `int32` parameter must be an `int32` (a 2^32-row file would
        // otherwise be packed, allocating for every row, before anything refuses it).
        let dtype = self.func.vars[var].dtype;
        if !fits(dtype, value) {
            return Err(BindError::OutOfRange {
                what: format!("{what} of `{buffer}`:"),
                name: self.func.vars[var].name.clone(),
                value,
                dtype,
            });
        }
        match self.ints.get(&var) {
            Some(&old) if old != value => Err(BindError::SizeMismatch {
                buffer: buffer.to_string(),
                what: format!("{what} `{}`", self.func.vars[var].name),
                expected: old,
                found: value,
            }),
            _ => {
                self.ints.insert(var, value);
                Ok(())
            }
        }
    }

    /// Evaluates an integer size expression with the parameters known so far.
    fn eval(&self, e: &Expr) -> Option<i64> {
        eval_size(e, &self.ints)
    }

    /// Unifies a size expression with a value found in the data: a lone unknown parameter is
    /// set, anything else is evaluated and compared.
    fn unify(&mut self, e: &Expr, value: usize, buffer: &str, what: &str) -> Result<(), BindError> {
        let value = value as i64;
        if let Expr::Var(v) = e {
            if !self.ints.contains_key(v) {
                return self.assign(*v, value, buffer, what);
            }
        }
        match self.eval(e) {
            Some(expected) if expected != value => Err(BindError::SizeMismatch {
                buffer: buffer.to_string(),
                what: what.to_string(),
                expected,
                found: value,
            }),
            _ => Ok(()),
        }
    }

    /// Checks that `name` is a buffer this function takes as a parameter (before reading data).
    pub fn check_bindable(&self, name: &str) -> Result<(), BindError> {
        self.buffer(name).map(|_| ())
    }

    fn buffer(&self, name: &str) -> Result<BufferId, BindError> {
        let id = self
            .func
            .buffer_by_name(name)
            .ok_or_else(|| BindError::UnknownBuffer {
                func: self.func.name.clone(),
                name: name.to_string(),
                known: names(self.func.buffers.iter().map(|(_, b)| b.name.as_str())),
            })?;
        if self.func.buffers[id].data_param().is_none() {
            return Err(BindError::NotAParameter(name.to_string()));
        }
        if let Some(&a) = self.assembled.buffers.get(&id) {
            return Err(BindError::AssembledBuffer {
                buffer: name.to_string(),
                axis: self.func.axes[a].name.clone(),
            });
        }
        Ok(id)
    }

    /// Parameters of assembled axes are outputs: nothing binds them.
    fn refuse_assembled_param(&self, var: VarId) -> Result<(), BindError> {
        match self.assembled.params.get(&var) {
            Some(&a) => Err(BindError::AssembledParam {
                param: self.func.vars[var].name.clone(),
                axis: self.func.axes[a].name.clone(),
            }),
            None => Ok(()),
        }
    }

    fn level_specs(&self, id: BufferId) -> Result<Vec<LevelSpec>, BindError> {
        let buf = &self.func.buffers[id];
        let axes = buf.axes();
        axes.iter()
            .map(|&a| {
                let axis = &self.func.axes[a];
                let parent = match axis.parent {
                    None => None,
                    Some(p) => Some(axes.iter().position(|x| *x == p).ok_or_else(|| {
                        BindError::Unsupported(format!(
                            "buffer `{}`: axis `{}` appears without its parent `{}`",
                            buf.name, axis.name, self.func.axes[p].name
                        ))
                    })?),
                };
                let known = |e: &Expr| self.eval(e).and_then(|v| usize::try_from(v).ok());
                Ok(LevelSpec {
                    kind: axis.kind,
                    parent,
                    length: known(&axis.length),
                    nnz_cols: axis.nnz_cols.as_ref().and_then(known),
                    sorted: axis.sorted,
                })
            })
            .collect()
    }

    fn extra_storage(&self, id: BufferId) -> Result<usize, BindError> {
        let buf = &self.func.buffers[id];
        match &buf.extra_storage {
            None => Ok(0),
            Some(e) => self
                .eval(e)
                .and_then(|v| usize::try_from(v).ok())
                .ok_or_else(|| BindError::MissingParam(format!("extra_storage of {}", buf.name))),
        }
    }

    /// Binds sparse data (a COO read from `.mtx`/`.tns`) to a buffer: packs it into the storage
    /// its axes declare, fills the axes' structure arrays and the size parameters.
    pub fn bind_coo(&mut self, name: &str, coo: &Coo) -> Result<(), BindError> {
        let id = self.buffer(name)?;
        if !self.bound.insert(id) {
            return Err(BindError::BoundTwice(name.into()));
        }
        let func = self.func;
        let buf = &func.buffers[id];
        let axes: Vec<AxisId> = match &buf.shape {
            BufferShape::Sparse(a) => a.clone(),
            BufferShape::Dense(_) => {
                return Err(BindError::Unsupported(format!(
                    "buffer `{name}` is a dense buffer: bind a .npy array"
                )))
            }
        };
        if coo.rank() != axes.len() {
            return Err(BindError::RankMismatch {
                buffer: name.into(),
                expected: axes.len(),
                found: coo.rank(),
            });
        }
        if buf.dtype.is_integer() && coo.field == Field::Real {
            if let Some(v) = coo.values.iter().find(|v| v.fract() != 0.0) {
                return Err(BindError::DTypeMismatch {
                    buffer: name.into(),
                    expected: buf.dtype,
                    found: format!("real values (e.g. {v})"),
                });
            }
        }
        let lengths: Vec<Expr> = axes.iter().map(|a| func.axes[*a].length.clone()).collect();
        self.conform(name, &lengths, &coo.dims)?;
        // The file's dimensions are the axis lengths.
        for (l, &a) in axes.iter().enumerate() {
            let axis = &func.axes[a];
            self.unify(
                &axis.length,
                coo.dims[l],
                name,
                &format!("the length of axis `{}`", axis.name),
            )?;
        }
        let specs = self.level_specs(id)?;
        let extra = self.extra_storage(id)?;
        let packed = pack::pack(&specs, coo, extra).map_err(|e| BindError::Pack {
            buffer: name.into(),
            message: e.to_string(),
        })?;
        for (l, &a) in axes.iter().enumerate() {
            let axis = &func.axes[a];
            let level = &packed.levels[l];
            // Structure first: a different pattern is reported as such, not as a size.
            self.record_structure(a, level.clone(), name)?;
            self.unify(
                &axis.length,
                level.length,
                name,
                &format!("the length of axis `{}`", axis.name),
            )?;
            if let Some(nnz) = &axis.nnz {
                self.unify(
                    nnz,
                    level.count,
                    name,
                    &format!("the nnz of axis `{}`", axis.name),
                )?;
            }
            if let (Some(c), Some(found)) = (&axis.nnz_cols, level.nnz_cols) {
                self.unify(c, found, name, &format!("nnz_cols of axis `{}`", axis.name))?;
            }
        }
        let values = packed
            .values_tensor(buf.dtype)
            .map_err(|e| BindError::Unsupported(format!("buffer `{name}`: {e}")))?;
        self.arrays
            .insert(buf.data_param().expect("checked in buffer()"), values);
        Ok(())
    }

    fn record_structure(
        &mut self,
        a: AxisId,
        level: PackedLevel,
        by: &str,
    ) -> Result<(), BindError> {
        let axis = &self.func.axes[a];
        if let Some((old, old_by)) = self.structure.get(&a) {
            let same = old.length == level.length
                && old.count == level.count
                && old.indptr == level.indptr
                && old.indices == level.indices;
            if !same {
                return Err(BindError::PatternMismatch {
                    buffer: by.to_string(),
                    axis: axis.name.clone(),
                    by: old_by.clone(),
                });
            }
            return Ok(());
        }
        let to_tensor = |v: &Vec<i64>| {
            Tensor::from_i64(axis.idtype, v)
                .map_err(|e| BindError::Unsupported(format!("axis `{}`: {e}", axis.name)))
        };
        if let (Some(p), Some(v)) = (axis.indptr, &level.indptr) {
            self.arrays.insert(p, to_tensor(v)?);
        }
        if let (Some(p), Some(v)) = (axis.indices, &level.indices) {
            self.arrays.insert(p, to_tensor(v)?);
        }
        self.structure.insert(a, (level, by.to_string()));
        Ok(())
    }

    /// Binds a dense array (`.npy`) to a buffer whose axes are all `dense_fixed` (or a dense
    /// buffer). Its shape gives the axis lengths; its dtype must be the buffer's.
    pub fn bind_tensor(&mut self, name: &str, tensor: Tensor) -> Result<(), BindError> {
        let id = self.buffer(name)?;
        if !self.bound.insert(id) {
            return Err(BindError::BoundTwice(name.into()));
        }
        let func = self.func;
        let buf = &func.buffers[id];
        if tensor.dtype() != buf.dtype {
            return Err(BindError::DTypeMismatch {
                buffer: name.into(),
                expected: buf.dtype,
                found: tensor.dtype().to_string(),
            });
        }
        if tensor.shape.len() != buf.ndim() {
            return Err(BindError::RankMismatch {
                buffer: name.into(),
                expected: buf.ndim(),
                found: tensor.shape.len(),
            });
        }
        match &buf.shape {
            BufferShape::Sparse(axes) => {
                if axes
                    .iter()
                    .any(|a| func.axes[*a].kind != AxisKind::DenseFixed)
                {
                    return Err(BindError::NotDense {
                        buffer: name.into(),
                        axes: names(axes.iter().map(|a| func.axes[*a].name.as_str())),
                    });
                }
                let lengths: Vec<Expr> =
                    axes.iter().map(|a| func.axes[*a].length.clone()).collect();
                self.conform(name, &lengths, &tensor.shape)?;
                for (l, &a) in axes.iter().enumerate() {
                    let axis = &func.axes[a];
                    let what = format!("the length of axis `{}`", axis.name);
                    self.unify(&axis.length, tensor.shape[l], name, &what)?;
                    let level = dense_level(tensor.shape[l]);
                    self.record_structure(a, level, name)?;
                }
                if self.extra_storage(id)? != 0 {
                    return Err(BindError::Unsupported(format!(
                        "buffer `{name}` declares extra_storage: bind it from a sparse file"
                    )));
                }
            }
            BufferShape::Dense(dims) => {
                self.conform(name, dims, &tensor.shape)?;
                for (l, d) in dims.iter().enumerate() {
                    self.unify(d, tensor.shape[l], name, &format!("dimension {l}"))?;
                }
            }
        }
        self.arrays
            .insert(buf.data_param().expect("checked in buffer()"), tensor);
        Ok(())
    }

    /// The structure of an axis: recorded from data, or derived for `dense_fixed` axes.
    fn level_of(&self, a: AxisId) -> Option<PackedLevel> {
        if let Some((l, _)) = self.structure.get(&a) {
            return Some(l.clone());
        }
        let axis = &self.func.axes[a];
        if axis.kind == AxisKind::DenseFixed {
            let n = usize::try_from(self.eval(&axis.length)?).ok()?;
            return Some(dense_level(n));
        }
        None
    }

    /// Shape (group extents) and value count of a buffer, from the known structure.
    fn buffer_extent(&self, id: BufferId) -> Result<(Vec<usize>, usize), BindError> {
        let buf = &self.func.buffers[id];
        match &buf.shape {
            BufferShape::Dense(dims) => {
                let shape = dims
                    .iter()
                    .map(|d| {
                        self.eval(d)
                            .and_then(|v| usize::try_from(v).ok())
                            .ok_or_else(|| {
                                BindError::MissingParam(format!(
                                    "a dimension of buffer {}",
                                    buf.name
                                ))
                            })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let n = shape.iter().product();
                Ok((shape, n))
            }
            BufferShape::Sparse(axes) => {
                let specs = self.level_specs(id)?;
                let mut levels = Vec::new();
                for &a in axes {
                    levels.push(
                        self.level_of(a)
                            .ok_or_else(|| BindError::MissingStructure {
                                axis: self.func.axes[a].name.clone(),
                                needed_by: buf.name.clone(),
                            })?,
                    );
                }
                let layout = pack::group_layout(&specs, &levels).map_err(|e| BindError::Pack {
                    buffer: buf.name.clone(),
                    message: e.to_string(),
                })?;
                let size = layout.size().ok_or_else(|| BindError::Pack {
                    buffer: buf.name.clone(),
                    message: "value array too large".into(),
                })?;
                Ok((layout.shape(), size + self.extra_storage(id)?))
            }
        }
    }

    /// Binds an array directly to a `T.handle` parameter: an axis's `indptr`/`indices` (checked
    /// against the axis declaration when the run starts: monotone, in range, sorted where
    /// declared), or the raw value array of a sparse buffer.
    pub fn bind_param_array(&mut self, param: &str, tensor: Tensor) -> Result<(), BindError> {
        let func = self.func;
        let var = func
            .params
            .iter()
            .copied()
            .find(|v| func.vars[*v].name == param && func.vars[*v].dtype == DType::Handle)
            .ok_or_else(|| BindError::UnknownBuffer {
                func: func.name.clone(),
                name: param.to_string(),
                known: names(func.buffers.iter().map(|(_, b)| b.name.as_str())),
            })?;
        self.refuse_assembled_param(var)?;
        if tensor.shape.len() != 1 {
            return Err(BindError::RankMismatch {
                buffer: param.into(),
                expected: 1,
                found: tensor.shape.len(),
            });
        }
        if let Some((id, buf)) = func
            .buffers
            .iter()
            .find(|(_, b)| b.data_param() == Some(var))
        {
            if tensor.dtype() != buf.dtype {
                return Err(BindError::DTypeMismatch {
                    buffer: buf.name.clone(),
                    expected: buf.dtype,
                    found: tensor.dtype().to_string(),
                });
            }
            if !self.bound.insert(id) {
                return Err(BindError::BoundTwice(buf.name.clone()));
            }
            self.arrays.insert(var, tensor);
            return Ok(());
        }
        let is_structure = func
            .axes
            .iter()
            .any(|(_, a)| a.indptr == Some(var) || a.indices == Some(var));
        if !is_structure {
            return Err(BindError::Unsupported(format!(
                "parameter `{param}` is neither a buffer's data nor an axis's indptr/indices"
            )));
        }
        if !tensor.dtype().is_integer() {
            return Err(BindError::DTypeMismatch {
                buffer: param.into(),
                expected: DType::I32,
                found: tensor.dtype().to_string(),
            });
        }
        if self.raw.insert(var, tensor).is_some() {
            return Err(BindError::BoundTwice(param.into()));
        }
        Ok(())
    }

    /// Builds and validates the structure of axes whose arrays were bound directly, parents
    /// first (arena order is declaration order).
    fn resolve_raw_structure(&mut self) -> Result<(), BindError> {
        let func = self.func;
        for (a, axis) in func.axes.iter() {
            let ip = axis
                .indptr
                .and_then(|v| self.raw.get(&v))
                .map(|t| t.to_i64_vec());
            let ix = axis
                .indices
                .and_then(|v| self.raw.get(&v))
                .map(|t| t.to_i64_vec());
            if ip.is_none() && ix.is_none() {
                continue;
            }
            let what = format!("axis `{}`", axis.name);
            // The chain from the root down to this axis.
            let mut chain = vec![a];
            while let Some(p) = func.axes[*chain.last().unwrap()].parent {
                chain.push(p);
            }
            chain.reverse();
            let mut specs = Vec::new();
            let mut levels = Vec::new();
            for (i, &x) in chain.iter().enumerate() {
                let ax = &func.axes[x];
                let length = self
                    .eval(&ax.length)
                    .and_then(|v| usize::try_from(v).ok())
                    .ok_or_else(|| BindError::MissingParam(param_name(func, &ax.length)))?;
                specs.push(LevelSpec {
                    kind: ax.kind,
                    parent: i.checked_sub(1),
                    length: Some(length),
                    nnz_cols: None,
                    sorted: ax.sorted,
                });
                if x != a {
                    levels.push(
                        self.level_of(x)
                            .ok_or_else(|| BindError::MissingStructure {
                                axis: ax.name.clone(),
                                needed_by: what.clone(),
                            })?,
                    );
                    continue;
                }
                let parent_count = levels.last().map_or(0, |l: &PackedLevel| l.count);
                // A compressed_fixed count not known yet follows from the indices' length.
                let nnz_cols = ax.nnz_cols.as_ref().map(|e| match self.eval(e) {
                    Some(c) => c.max(0) as usize,
                    None => ix.as_ref().map_or(0, |v| v.len()) / parent_count.max(1),
                });
                let count = match ax.kind {
                    AxisKind::DenseFixed => length,
                    AxisKind::CompressedFixed => parent_count * nnz_cols.unwrap_or(0),
                    _ => ip
                        .as_ref()
                        .and_then(|v| v.last())
                        .map_or(0, |v| (*v).max(0) as usize),
                };
                specs[i].nnz_cols = nnz_cols;
                levels.push(PackedLevel {
                    length,
                    count,
                    nnz_cols,
                    indptr: ip.clone(),
                    indices: ix.clone(),
                });
            }
            pack::validate_levels(&specs, &levels).map_err(|e| {
                let mut message = e.to_string();
                if message.contains("strictly increasing") {
                    message.push_str(" (the axis is declared sorted)");
                }
                let arrays: Vec<String> = [axis.indptr, axis.indices]
                    .into_iter()
                    .flatten()
                    .filter(|v| self.raw.contains_key(v))
                    .map(|v| format!("`{}`", func.vars[v].name))
                    .collect();
                let over: Vec<String> = func
                    .buffers
                    .iter()
                    .filter(|(_, b)| b.data_param().is_some() && b.axes().contains(&a))
                    .map(|(_, b)| format!("`{}`", b.name))
                    .collect();
                message.push_str(&format!("; arrays bound: {}", arrays.join(", ")));
                if !over.is_empty() {
                    message.push_str(&format!(
                        "; the structure of buffer{} {}",
                        if over.len() == 1 { "" } else { "s" },
                        over.join(", ")
                    ));
                }
                BindError::Structure {
                    axis: axis.name.clone(),
                    message,
                }
            })?;
            let level = levels.pop().expect("chain holds the axis");
            if let Some(nnz) = &axis.nnz {
                self.unify(nnz, level.count, &what, "nnz")?;
            }
            if let (Some(c), Some(found)) = (&axis.nnz_cols, level.nnz_cols) {
                self.unify(c, found, &what, "nnz_cols")?;
            }
            self.record_structure(a, level, &format!("the arrays bound to {what}"))?;
        }
        Ok(())
    }

    /// Checks every input is bound and every size known, allocates zeroed outputs, and returns
    /// the arguments by parameter name.
    ///
    /// Assembled axes (`assembled=True`) are outputs: their `indptr`, `indices` and `nnz`
    /// parameters and the data of the buffers stored over them are left out of the arguments
    /// (the run adds them); their length and parent structure must be known from the inputs.
    pub fn finish(mut self) -> Result<HashMap<String, ArgValue>, BindError> {
        let func = self.func;
        self.resolve_raw_structure()?;
        let written = func.body.written_buffers();
        // Buffers not bound: outputs get zeros (those over assembled axes nothing: the run
        // produces them), inputs are an error.
        for &id in &func.buffer_decls {
            let buf = &func.buffers[id];
            let Some(data) = buf.data_param() else {
                continue;
            };
            if self.bound.contains(&id) || self.assembled.buffers.contains_key(&id) {
                continue;
            }
            if !written.contains(&id) {
                return Err(BindError::MissingBind(buf.name.clone()));
            }
            let (_, n) = self.buffer_extent(id)?;
            sparsetir_formats::limits::check(n, (buf.dtype.bits() as usize).div_ceil(8)).map_err(
                |e| BindError::Output {
                    buffer: buf.name.clone(),
                    message: format!("cannot allocate the output: {e}"),
                },
            )?;
            let t = Tensor::zeros(buf.dtype, vec![n])
                .map_err(|e| BindError::Unsupported(format!("buffer `{}`: {e}", buf.name)))?;
            self.arrays.insert(data, t);
        }
        // Assembled axes: built by the run under their parents, up to their length.
        for &a in &self.assembled.axes {
            let axis = &func.axes[a];
            if self.eval(&axis.length).is_none() {
                return Err(BindError::MissingParam(param_name(func, &axis.length)));
            }
            let mut cur = axis.parent;
            while let Some(x) = cur {
                if self.level_of(x).is_none() {
                    return Err(BindError::MissingStructure {
                        axis: func.axes[x].name.clone(),
                        needed_by: format!("the assembled axis `{}`", axis.name),
                    });
                }
                cur = func.axes[x].parent;
            }
        }
        // Raw value arrays of sparse buffers must match the layout.
        for &id in &func.buffer_decls {
            let buf = &func.buffers[id];
            let Some(data) = buf.data_param() else {
                continue;
            };
            if let (true, Some(t)) = (buf.is_sparse(), self.arrays.get(&data)) {
                if t.shape.len() == 1 {
                    let (_, n) = self.buffer_extent(id)?;
                    if t.len() != n {
                        return Err(BindError::SizeMismatch {
                            buffer: buf.name.clone(),
                            what: "the number of stored values".into(),
                            expected: n as i64,
                            found: t.len() as i64,
                        });
                    }
                }
            }
        }
        // Every axis used by an iteration needs its structure (but assembled ones: the run
        // builds theirs).
        let mut iterated = Vec::new();
        func.body.visit(&mut |s| {
            if let Stmt::SparseIteration(it) = s {
                let mut axes = Vec::new();
                for e in &it.axes {
                    walked_axes(e, &mut axes);
                }
                iterated.extend(axes.into_iter().map(|a| (a, it.name.clone())));
            }
        });
        for (a, by) in iterated {
            let mut cur = Some(a);
            while let Some(x) = cur {
                if func.axes[x].assembled {
                    break;
                }
                if self.level_of(x).is_none() {
                    return Err(BindError::MissingStructure {
                        axis: func.axes[x].name.clone(),
                        needed_by: by.clone(),
                    });
                }
                cur = func.axes[x].parent;
            }
        }
        let mut args = HashMap::new();
        for &p in &func.params {
            let var = &func.vars[p];
            if var.dtype == DType::Handle {
                if let Some(t) = self.arrays.remove(&p) {
                    args.insert(var.name.clone(), ArgValue::Array(t));
                }
            } else if self.assembled.params.contains_key(&p) {
                // An assembled axis's nnz: the run sets it.
                continue;
            } else if let Some(v) = self.ints.get(&p) {
                args.insert(var.name.clone(), ArgValue::Int(*v));
            } else if let Some(v) = self.floats.get(&p) {
                args.insert(var.name.clone(), ArgValue::Float(*v));
            } else {
                return Err(BindError::MissingParam(var.name.clone()));
            }
        }
        Ok(args)
    }
}

/// Every axis an iteration entry walks or looks up: the parts of co-iterations and fusions,
/// attached axes and the axes they are attached under.
fn walked_axes(e: &IterAxis, out: &mut Vec<AxisId>) {
    match e {
        IterAxis::Axis(a) => out.push(*a),
        IterAxis::Fuse(chain) => out.extend(chain.iter().copied()),
        IterAxis::Attach { axis, parent } => out.extend([*axis, *parent]),
        IterAxis::CoIter { parts, .. } => {
            for p in parts {
                walked_axes(p, out);
            }
        }
    }
}

/// The parameter named by a size expression, for messages.
fn param_name(func: &PrimFunc, e: &Expr) -> String {
    match e {
        Expr::Var(v) => func.vars[*v].name.clone(),
        _ => "a size parameter".into(),
    }
}

/// Evaluates an integer size expression (constants, integer parameters in `ints`, integer
/// casts, `+ - * / // % min max`): `None` when a parameter is unknown, on overflow, division by
/// zero or any other construct.
pub(crate) fn eval_size(e: &Expr, ints: &HashMap<VarId, i64>) -> Option<i64> {
    let ev = |x: &Expr| eval_size(x, ints);
    Some(match e {
        Expr::Int(v, _) => *v,
        Expr::Var(v) => *ints.get(v)?,
        Expr::Cast(dt, a) if dt.is_integer() => ev(a)?,
        Expr::Binary(op, a, b) => {
            let (a, b) = (ev(a)?, ev(b)?);
            match op {
                BinOp::Add => a.checked_add(b)?,
                BinOp::Sub => a.checked_sub(b)?,
                BinOp::Mul => a.checked_mul(b)?,
                BinOp::Div => a.checked_div(b)?,
                BinOp::FloorDiv => floor_div(a, b)?,
                BinOp::FloorMod => a.checked_sub(floor_div(a, b)?.checked_mul(b)?)?,
                BinOp::Min => a.min(b),
                BinOp::Max => a.max(b),
                _ => return None,
            }
        }
        _ => return None,
    })
}

/// Python's `//` on integers; `None` on division by zero or overflow.
fn floor_div(a: i64, b: i64) -> Option<i64> {
    let q = a.checked_div(b)?;
    Some(if a % b != 0 && ((a < 0) != (b < 0)) {
        q - 1
    } else {
        q
    })
}

fn dense_level(n: usize) -> PackedLevel {
    PackedLevel {
        length: n,
        count: n,
        nnz_cols: None,
        indptr: None,
        indices: None,
    }
}

fn int_arg(args: &HashMap<String, ArgValue>, name: &str) -> Option<i64> {
    match args.get(name)? {
        ArgValue::Int(v) => Some(*v),
        _ => None,
    }
}

/// Reads buffer `name` back from the arguments after a run.
pub fn read_output(
    func: &PrimFunc,
    args: &HashMap<String, ArgValue>,
    name: &str,
) -> Result<Output, BindError> {
    let id = func
        .buffer_by_name(name)
        .ok_or_else(|| BindError::UnknownBuffer {
            func: func.name.clone(),
            name: name.to_string(),
            known: names(func.buffers.iter().map(|(_, b)| b.name.as_str())),
        })?;
    let buf = &func.buffers[id];
    let err = |m: String| BindError::Output {
        buffer: name.to_string(),
        message: m,
    };
    let data = buf
        .data_param()
        .ok_or_else(|| err("an allocated buffer has no output".into()))?;
    check_assembled_output(func, args, buf, data).map_err(err)?;
    let Some(ArgValue::Array(values)) = args.get(&func.vars[data].name) else {
        return Err(err("no array was bound or allocated".into()));
    };
    // Rebuild a binder view of the sizes from the integer arguments.
    let mut b = Binder::new(func);
    for &p in &func.params {
        if let Some(v) = int_arg(args, &func.vars[p].name) {
            b.ints.insert(p, v);
        }
    }
    let axes: Vec<AxisId> = buf.axes().to_vec();
    let all_dense = axes
        .iter()
        .all(|a| func.axes[*a].kind == AxisKind::DenseFixed);
    if !buf.is_sparse() || all_dense {
        let (shape, n) = b.buffer_extent(id)?;
        if values.len() < n {
            return Err(err(format!(
                "array has {} values, expected {n}",
                values.len()
            )));
        }
        let mut t = values.clone();
        t.shape = shape;
        return Ok(Output::Dense(t));
    }
    let specs = b.level_specs(id)?;
    let mut levels = Vec::new();
    for &a in &axes {
        let axis = &func.axes[a];
        let arr = |p: Option<VarId>| -> Option<Vec<i64>> {
            match args.get(&func.vars[p?].name) {
                Some(ArgValue::Array(t)) => Some(t.to_i64_vec()),
                _ => None,
            }
        };
        let length = b.eval(&axis.length).and_then(|v| usize::try_from(v).ok());
        let length =
            length.ok_or_else(|| err(format!("length of axis `{}` unknown", axis.name)))?;
        let indptr = arr(axis.indptr);
        let indices = arr(axis.indices);
        let nnz_cols = axis
            .nnz_cols
            .as_ref()
            .and_then(|e| b.eval(e))
            .map(|v| v as usize);
        let count = match axis.kind {
            AxisKind::DenseFixed => length,
            AxisKind::CompressedFixed => indices.as_ref().map_or(0, |v| v.len()),
            _ => indptr
                .as_ref()
                .and_then(|v| v.last())
                .map_or(0, |v| *v as usize),
        };
        levels.push(PackedLevel {
            length,
            count,
            nnz_cols,
            indptr,
            indices,
        });
    }
    let coo =
        pack::unpack(&specs, &levels, &values.to_f64_vec()).map_err(|e| err(e.to_string()))?;
    let field = if buf.dtype.is_float() {
        Field::Real
    } else {
        Field::Integer
    };
    Ok(Output::Sparse(Coo { field, ..coo }))
}

/// A buffer over assembled axes: the run must have left their `indptr`, `indices` and `nnz`
/// and the buffer's values in the arguments, `nnz` agreeing with the last `indptr` value.
fn check_assembled_output(
    func: &PrimFunc,
    args: &HashMap<String, ArgValue>,
    buf: &sparsetir_ir::Buffer,
    data: VarId,
) -> Result<(), String> {
    for &a in buf.axes() {
        let axis = &func.axes[a];
        if !axis.assembled {
            continue;
        }
        let missing = |p: VarId| {
            format!(
                "axis `{}` is assembled by the kernel, but the run left no `{}` (the backend did \
                 not assemble the output)",
                axis.name, func.vars[p].name
            )
        };
        let mut last = None;
        for (p, is_indptr) in [
            (axis.indptr, true),
            (axis.indices, false),
            (Some(data), false),
        ] {
            let Some(p) = p else { continue };
            match args.get(&func.vars[p].name) {
                Some(ArgValue::Array(t)) => {
                    if is_indptr && !t.is_empty() {
                        last = Some(t.get_f64(t.len() - 1) as i64);
                    }
                }
                _ => return Err(missing(p)),
            }
        }
        if let Some(Expr::Var(v)) = &axis.nnz {
            match (int_arg(args, &func.vars[*v].name), last) {
                (None, _) => return Err(missing(*v)),
                (Some(n), Some(l)) if n != l => {
                    return Err(format!(
                        "axis `{}`: the run set `{}` = {n}, but its indptr ends at {l}",
                        axis.name, func.vars[*v].name
                    ))
                }
                _ => {}
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by fuzzing: a file whose row count does not fit `m: T.int32` was packed (one
    /// `indptr` entry per row, 17 GB here) before anything refused it.
    #[test]
    fn sizes_past_the_parameter_dtype_are_refused_before_packing() {
        let f = sparsetir_ops::load("csrmm").expect("catalog csrmm");
        let coo = Coo {
            dims: vec![1 << 32, 3],
            coords: vec![vec![(1 << 32) - 1, 0]],
            values: vec![1.0],
            field: Field::Real,
        };
        let mut b = Binder::new(&f);
        let err = b.bind_coo("A", &coo).expect_err("refused");
        assert!(
            matches!(&err, BindError::OutOfRange { name, .. } if name == "m"),
            "{err}"
        );
        assert!(
            err.to_string().contains("does not fit its dtype int32"),
            "{err}"
        );
        let mut b = Binder::new(&f);
        assert!(matches!(
            b.set("feat_size", "4294967295"),
            Err(BindError::OutOfRange { .. })
        ));
        assert!(b.set("feat_size", "2147483647").is_ok());
        assert!(fits(DType::U8, 255) && !fits(DType::U8, 256) && !fits(DType::U8, -1));
        assert!(fits(DType::I64, i64::MIN) && fits(DType::F32, i64::MAX));
    }

    fn coo(dims: [usize; 2], entries: &[(i64, i64, f64)]) -> Coo {
        Coo {
            dims: dims.to_vec(),
            coords: entries.iter().map(|&(i, j, _)| vec![i, j]).collect(),
            values: entries.iter().map(|&(_, _, v)| v).collect(),
            field: Field::Real,
        }
    }

    fn int(args: &HashMap<String, ArgValue>, name: &str) -> i64 {
        int_arg(args, name).unwrap_or_else(|| panic!("no integer `{name}`"))
    }

    fn ints(args: &HashMap<String, ArgValue>, name: &str) -> Vec<i64> {
        match args.get(name) {
            Some(ArgValue::Array(t)) => t.to_i64_vec(),
            _ => panic!("no array `{name}`"),
        }
    }

    /// spgemm's A (3×4) and B (4×2): different structures, rectangular shapes.
    fn spgemm_operands() -> (Coo, Coo) {
        let a = coo(
            [3, 4],
            &[(0, 0, 1.0), (0, 2, 2.0), (2, 1, 3.0), (2, 3, 4.0)],
        );
        let b = coo([4, 2], &[(0, 0, 1.0), (1, 1, 5.0), (3, 0, 2.0)]);
        (a, b)
    }

    #[test]
    fn spgemm_operands_bind_from_their_own_data_and_leave_the_assembled_output_out() {
        let f = sparsetir_ops::load("spgemm").expect("spgemm");
        let (a, b) = spgemm_operands();
        let mut binder = Binder::new(&f);
        binder.bind_coo("A", &a).expect("A");
        binder.bind_coo("B", &b).expect("B");
        let args = binder.finish().expect("finish");
        for (name, v) in [("m", 3), ("k", 4), ("n", 2), ("nnz_a", 4), ("nnz_b", 3)] {
            assert_eq!(int(&args, name), v, "{name}");
        }
        assert_eq!(ints(&args, "a_indptr"), [0, 2, 2, 4]);
        assert_eq!(ints(&args, "a_indices"), [0, 2, 1, 3]);
        assert_eq!(ints(&args, "b_indptr"), [0, 1, 2, 2, 3]);
        assert_eq!(ints(&args, "b_indices"), [0, 1, 0]);
        for name in ["c", "c_indptr", "c_indices", "nnz_c"] {
            assert!(!args.contains_key(name), "`{name}` is an output: {args:?}");
        }
        // Validation (every launch) accepts them as they are.
        crate::validate::validate_args(&f, &args).expect("valid");
    }

    #[test]
    fn nonconforming_operands_name_both_buffers_their_files_and_the_dimension() {
        let f = sparsetir_ops::load("spgemm").expect("spgemm");
        let a = coo([7, 5], &[(0, 4, 1.0)]);
        let b = coo([4, 9], &[(3, 8, 1.0)]);
        let mut binder = Binder::new(&f);
        binder.set_source("A", "a.mtx");
        binder.set_source("B", "b.mtx");
        binder.bind_coo("A", &a).expect("A");
        let err = binder.bind_coo("B", &b).expect_err("refused");
        assert_eq!(
            err.to_string(),
            "shapes do not conform: `A` (a.mtx) is 7×5 but `B` (b.mtx) is 4×9: `k` would be 5 and \
             4"
        );
        // Without sources, the buffers alone; spadd's `n` likewise.
        let f = sparsetir_ops::load("spadd").expect("spadd");
        let mut binder = Binder::new(&f);
        binder.bind_coo("A", &coo([3, 4], &[])).expect("A");
        let err = binder
            .bind_coo("B", &coo([3, 5], &[(2, 4, 1.0)]))
            .expect_err("refused");
        assert!(
            matches!(&err, BindError::Nonconforming { param, .. } if param == "n"),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains("`A` is 3×4 but `B` is 3×5: `n` would be 4 and 5"),
            "{err}"
        );
        // A size set by hand keeps the plain message.
        let mut binder = Binder::new(&f);
        binder.set("n", "6").expect("set");
        let err = binder
            .bind_coo("A", &coo([3, 4], &[]))
            .expect_err("refused");
        assert!(matches!(err, BindError::SizeMismatch { .. }), "{err}");
    }

    #[test]
    fn assembled_outputs_cannot_be_bound() {
        let f = sparsetir_ops::load("spgemm").expect("spgemm");
        let mut b = Binder::new(&f);
        let err = b.check_bindable("C").expect_err("refused");
        assert_eq!(
            err,
            BindError::AssembledBuffer {
                buffer: "C".into(),
                axis: "JC".into()
            }
        );
        assert!(b.bind_coo("C", &coo([3, 2], &[])).is_err());
        for p in ["c_indptr", "c_indices", "c"] {
            let t = Tensor::from_i64(DType::I32, &[0]).unwrap();
            let err = b.bind_param_array(p, t).expect_err("refused");
            assert!(
                matches!(&err, BindError::AssembledParam { param, axis } if param == p && axis == "JC"),
                "{err}"
            );
        }
        let err = b.set("nnz_c", "3").expect_err("refused");
        assert!(err.to_string().contains("`nnz_c`"), "{err}");
        // The output's rows and columns come from the operands: without B, `n` is unknown.
        let mut b = Binder::new(&f);
        b.bind_coo("A", &coo([3, 4], &[])).expect("A");
        assert_eq!(b.finish(), Err(BindError::MissingBind("B".into())));
    }

    /// The arguments as the evaluator leaves them after assembling spgemm's C (the contract of
    /// issue 15): `c_indptr`, `c_indices`, `c` and `nnz_c`.
    fn assembled_args() -> (PrimFunc, HashMap<String, ArgValue>) {
        let f = sparsetir_ops::load("spgemm").expect("spgemm");
        let (a, b) = spgemm_operands();
        let mut binder = Binder::new(&f);
        binder.bind_coo("A", &a).expect("A");
        binder.bind_coo("B", &b).expect("B");
        let mut args = binder.finish().expect("finish");
        // C = A·B: row 0 = 1·B[0] + 2·B[2] = (1, 0); row 2 = 3·B[1] + 4·B[3] = (8, 15).
        let i32s = |v: &[i64]| ArgValue::Array(Tensor::from_i64(DType::I32, v).unwrap());
        args.insert("c_indptr".into(), i32s(&[0, 1, 1, 3]));
        args.insert("c_indices".into(), i32s(&[0, 0, 1]));
        args.insert(
            "c".into(),
            ArgValue::Array(Tensor::from_f64(DType::F32, &[1.0, 8.0, 15.0]).unwrap()),
        );
        args.insert("nnz_c".into(), ArgValue::Int(3));
        (f, args)
    }

    #[test]
    fn assembled_outputs_are_read_from_the_arrays_the_run_left() {
        let (f, args) = assembled_args();
        let Output::Sparse(c) = read_output(&f, &args, "C").expect("C") else {
            panic!("sparse output expected");
        };
        assert_eq!(c.dims, [3, 2]);
        assert_eq!(c.coords, [vec![0, 0], vec![2, 0], vec![2, 1]]);
        assert_eq!(c.values, [1.0, 8.0, 15.0]);
        assert_eq!(c.field, Field::Real);
        // Validation of a second launch on the same arguments ignores the outputs.
        crate::validate::validate_args(&f, &args).expect("valid");
        // A backend that did not assemble: a clear error, no panic.
        for missing in ["c_indptr", "c_indices", "c", "nnz_c"] {
            let mut a = args.clone();
            a.remove(missing);
            let err = read_output(&f, &a, "C").expect_err("refused").to_string();
            assert!(
                err.contains(&format!("`{missing}`")) && err.contains("assembled"),
                "{missing}: {err}"
            );
        }
        let mut a = args.clone();
        a.insert("nnz_c".into(), ArgValue::Int(2));
        let err = read_output(&f, &a, "C").expect_err("refused").to_string();
        assert!(err.contains("indptr ends at 3"), "{err}");
        // Malformed structure from a run is refused by unpacking, not read past.
        let mut a = args;
        a.insert(
            "c_indices".into(),
            ArgValue::Array(Tensor::from_i64(DType::I32, &[0, 1, 0]).unwrap()),
        );
        let err = read_output(&f, &a, "C").expect_err("refused").to_string();
        assert!(err.contains("strictly increasing"), "{err}");
    }

    /// spadd's A bound as raw CSR arrays (the only path that can hand the binder unsorted or
    /// duplicate columns: files are packed sorted), B from a COO.
    fn spadd_raw(indices: &[i64]) -> Result<HashMap<String, ArgValue>, BindError> {
        let f = sparsetir_ops::load("spadd").expect("spadd");
        let mut b = Binder::new(&f);
        let i32s = |v: &[i64]| Tensor::from_i64(DType::I32, v).unwrap();
        b.bind_param_array("a_indptr", i32s(&[0, 2, 2, 3]))?;
        b.bind_param_array("a_indices", i32s(indices))?;
        b.bind_param_array("a", Tensor::from_f64(DType::F32, &[1.0, 2.0, 3.0]).unwrap())?;
        b.bind_coo("B", &coo([3, 4], &[(1, 1, 1.0)]))?;
        b.finish()
    }

    #[test]
    fn unsorted_or_duplicate_raw_columns_are_refused_naming_the_operand() {
        let args = spadd_raw(&[0, 3, 1]).expect("sorted columns bind");
        assert_eq!(int(&args, "nnz_a"), 3);
        for bad in [[3, 0, 1], [2, 2, 1]] {
            let err = spadd_raw(&bad).expect_err("refused").to_string();
            for needle in [
                "axis `JA`",
                "not strictly increasing",
                "declared sorted",
                "`a_indices`",
                "buffer `A`",
            ] {
                assert!(err.contains(needle), "{bad:?}: `{needle}` not in: {err}");
            }
        }
    }

    #[test]
    fn duplicate_file_entries_are_summed_as_for_any_operand() {
        let f = sparsetir_ops::load("spadd").expect("spadd");
        let mut b = Binder::new(&f);
        let a = coo([2, 3], &[(1, 2, 1.5), (0, 1, 1.0), (1, 2, 2.0)]);
        b.bind_coo("A", &a).expect("A");
        b.bind_coo("B", &coo([2, 3], &[])).expect("B");
        let args = b.finish().expect("finish");
        assert_eq!(int(&args, "nnz_a"), 2);
        assert_eq!(ints(&args, "a_indptr"), [0, 1, 2]);
        assert_eq!(ints(&args, "a_indices"), [1, 2]);
        let Some(ArgValue::Array(v)) = args.get("a") else {
            panic!("no values");
        };
        assert_eq!(v.to_f64_vec(), [1.0, 3.5]);
        assert_eq!(int(&args, "nnz_b"), 0);
        assert_eq!(ints(&args, "b_indptr"), [0, 0, 0]);
    }

    #[test]
    fn masked_spgemm_output_lies_on_the_mask_and_is_allocated() {
        let f = sparsetir_ops::load("masked_spgemm").expect("masked_spgemm");
        let mut b = Binder::new(&f);
        b.bind_coo("M", &coo([2, 3], &[(0, 2, 1.0), (1, 0, 1.0), (1, 1, 1.0)]))
            .expect("M");
        b.bind_coo("A", &coo([2, 4], &[(0, 3, 1.0)])).expect("A");
        let err = b
            .bind_coo("B", &coo([4, 5], &[]))
            .expect_err("n conflicts with M");
        assert!(
            err.to_string()
                .contains("`M` is 2×3 but `B` is 4×5: `n` would be 3 and 5"),
            "{err}"
        );
        let mut b = Binder::new(&f);
        b.bind_coo("M", &coo([2, 3], &[(0, 2, 1.0), (1, 0, 1.0), (1, 1, 1.0)]))
            .expect("M");
        b.bind_coo("A", &coo([2, 4], &[(0, 3, 1.0)])).expect("A");
        b.bind_coo("B", &coo([4, 3], &[(3, 2, 2.0)])).expect("B");
        let args = b.finish().expect("finish");
        let Some(ArgValue::Array(c)) = args.get("c") else {
            panic!("C is allocated over M's pattern");
        };
        assert_eq!(c.to_f64_vec(), [0.0; 3]);
    }
}
