//! Validation of a launch's arguments against the **stage-I** function (the compiled stage-III
//! function has lost its axes): scalars fit their types, every `indptr` has parent count + 1
//! entries, starts at 0, is monotone and ends at the axis nnz; every `indices` array has one
//! entry per stored element, all in `0..length`, strictly increasing inside each parent where the
//! axis is `sorted` (compiled binary searches rely on it); value and dense arrays are at least as
//! long as their layouts; coordinates that index a dense axis of another buffer (a compressed
//! axis's indices into `B[J_detach, K]`, or buffer values as in `W[E[i, j], ...]`) stay inside
//! it; `T.sp.attach` parents stay inside the attached axis's `indptr`; and
//! `T.assume_buffer_domain` holds; and the index arrays that the compiled function's parallel,
//! vectorized or thread-bound loops store through (the function attribute `assume_distinct`,
//! which the build records, [`sparsetir_ir::DISTINCT_ATTR`]) hold distinct values inside each
//! fiber or over the whole array, and those whose consecutive values bound each iteration's
//! range of positions (`assume_monotone`, [`sparsetir_ir::MONOTONE_ATTR`]) never decrease. Any
//! violation is a [`RunError`] naming the axis, buffer or
//! parameter and the offending index; native code never runs on data that fails here.
//!
//! Assembled axes (`assembled=True`, issue 15) are outputs: their `indptr`, `indices` and `nnz`
//! and the values of the buffers stored over them are not inputs, so they may be absent and are
//! not checked (whatever they hold is overwritten); their length must still be known.

use std::cell::RefCell;
use std::collections::HashMap;

use sparsetir_eval::storage::{dense_size, sparse_layout, AxisData, MAX_ELEMENTS};
use sparsetir_eval::ArgValue;
use sparsetir_ir::{
    AxisId, AxisKind, BufferDecl, BufferId, BufferShape, DType, DistinctScope, Expr, IterAxis,
    PrimFunc, Stmt, VarId, DISTINCT_ATTR, MONOTONE_ATTR,
};

use crate::args::{ArrayRef, LaunchArg, LaunchArgs};
use crate::assembly::Assembled;
use crate::bind::eval_size;
use crate::error::RunError;
use crate::kernel::int_fits;

/// A read-only integer view of an index array of any integer dtype.
#[derive(Clone, Copy)]
enum IndexView<'a> {
    I8(&'a [i8]),
    I16(&'a [i16]),
    I32(&'a [i32]),
    I64(&'a [i64]),
    U8(&'a [u8]),
    U16(&'a [u16]),
    U32(&'a [u32]),
    U64(&'a [u64]),
}

/// How an `indices` array splits into fibers: by an `indptr` (checked already) over `count`
/// parent positions, or `c` elements each.
#[derive(Clone, Copy)]
enum Fibers<'a> {
    Indptr(IndexView<'a>, usize),
    Fixed(usize, usize),
}

/// What [`IndexView::sorted_fibers`] found.
enum SortedFibers {
    /// Fiber `q` is not strictly increasing at position `i`.
    Unsorted(usize, usize),
    /// Every fiber is; the smallest and largest coordinates (`None`: all empty).
    Sorted(Option<(i64, i64)>),
}

/// An index element read as `i64`; `u64` beyond `i64` saturates.
trait AsI64: Copy + Ord {
    fn as_i64(self) -> i64;
}

macro_rules! as_i64_lossless {
    ($($t:ty),*) => {$(impl AsI64 for $t { fn as_i64(self) -> i64 { self.into() } })*};
}
as_i64_lossless!(i8, i16, i32, i64, u8, u16, u32);

impl AsI64 for u64 {
    fn as_i64(self) -> i64 {
        i64::try_from(self).unwrap_or(i64::MAX)
    }
}

/// `$body` with `$v` bound to the typed slice of the view `$view` (one arm per index type,
/// so the body runs as a tight loop over that type).
macro_rules! typed {
    ($view:expr, $v:ident => $body:expr) => {
        match $view {
            IndexView::I8($v) => $body,
            IndexView::I16($v) => $body,
            IndexView::I32($v) => $body,
            IndexView::I64($v) => $body,
            IndexView::U8($v) => $body,
            IndexView::U16($v) => $body,
            IndexView::U32($v) => $body,
            IndexView::U64($v) => $body,
        }
    };
}

impl<'a> IndexView<'a> {
    fn new(t: &'a ArrayRef<'_>) -> Option<IndexView<'a>> {
        Some(match t.dtype() {
            DType::I8 => IndexView::I8(t.as_slice()?),
            DType::I16 => IndexView::I16(t.as_slice()?),
            DType::I32 => IndexView::I32(t.as_slice()?),
            DType::I64 => IndexView::I64(t.as_slice()?),
            DType::U8 => IndexView::U8(t.as_slice()?),
            DType::U16 => IndexView::U16(t.as_slice()?),
            DType::U32 => IndexView::U32(t.as_slice()?),
            DType::U64 => IndexView::U64(t.as_slice()?),
            _ => return None,
        })
    }

    fn len(&self) -> usize {
        typed!(self, v => v.len())
    }

    /// The smallest and largest elements of `lo..hi` as `i64` (`None` when empty); one tight
    /// pass over the typed slice (a launch validates arrays of millions of coordinates).
    fn min_max(&self, lo: usize, hi: usize) -> Option<(i64, i64)> {
        fn mm<T: AsI64>(v: &[T]) -> Option<(i64, i64)> {
            let first = *v.first()?;
            let (a, b) = v
                .iter()
                .fold((first, first), |(a, b), &x| (a.min(x), b.max(x)));
            Some((a.as_i64(), b.as_i64()))
        }
        typed!(self, v => mm(&v[lo..hi]))
    }

    /// The first `i` whose element is below element `i - 1`.
    fn first_decrease(&self) -> Option<usize> {
        typed!(self, v => v.windows(2).position(|w| w[1] < w[0]).map(|k| k + 1))
    }

    /// Over the fibers `fibers[q]..fibers[q + 1]` of this array (`q < count`), each of which
    /// must be strictly increasing: the first that is not, as (fiber, position of the first
    /// element not above the one before it), else the smallest first and the largest last
    /// element of the fibers. One typed loop per pair of index types: a launch validates
    /// arrays of millions of coordinates in fibers of a few elements, where reading each
    /// bound through the views' type dispatch cost more than the checks.
    fn sorted_fibers(&self, fibers: Fibers<'_>) -> SortedFibers {
        fn scan<T: AsI64>(
            v: &[T],
            bound: impl Fn(usize) -> (usize, usize),
            count: usize,
        ) -> SortedFibers {
            let mut range: Option<(i64, i64)> = None;
            for q in 0..count {
                let (lo, hi) = bound(q);
                let f = &v[lo..hi];
                if let Some(k) = f.windows(2).position(|w| w[1] <= w[0]) {
                    return SortedFibers::Unsorted(q, lo + k + 1);
                }
                if let (Some(a), Some(b)) = (f.first(), f.last()) {
                    let (a, b) = (a.as_i64(), b.as_i64());
                    range = Some(range.map_or((a, b), |(x, y)| (x.min(a), y.max(b))));
                }
            }
            SortedFibers::Sorted(range)
        }
        match fibers {
            Fibers::Indptr(ip, count) => typed!(self, v => typed!(&ip, p => scan(
                v,
                |q| (p[q].as_i64() as usize, p[q + 1].as_i64() as usize),
                count
            ))),
            Fibers::Fixed(c, count) => typed!(self, v => scan(v, |q| (q * c, (q + 1) * c), count)),
        }
    }

    /// The first of the first `n` elements outside `0..extent`, as (position, value).
    fn first_outside(&self, n: usize, extent: i64) -> Option<(usize, i64)> {
        let (lo, hi) = self.min_max(0, n)?;
        if lo >= 0 && hi < extent {
            return None;
        }
        (0..n)
            .map(|i| (i, self.get(i)))
            .find(|&(_, c)| c < 0 || c >= extent)
    }

    /// Element `i` (which must be in range) as `i64`; `u64` beyond `i64` saturates.
    #[inline]
    fn get(&self, i: usize) -> i64 {
        typed!(self, v => v[i].as_i64())
    }
}

/// What validation learned about one axis.
#[derive(Clone)]
struct AxisInfo<'a> {
    name: String,
    length: i64,
    /// Stored elements of the parent level (roots: 1).
    parent_count: i64,
    level_count: i64,
    indptr: Option<IndexView<'a>>,
    /// One more than the largest coordinate any stored element has (0 when there is none).
    coord_bound: i64,
}

struct Checker<'a> {
    func: &'a PrimFunc,
    args: &'a LaunchArgs<'a>,
    ints: HashMap<VarId, i64>,
    axes: Vec<AxisInfo<'a>>,
    /// The same, in the evaluator's layout-computation form (structure arrays left empty).
    layout_axes: Vec<AxisData>,
    /// Values each function-level match buffer needs (layout size, without extra storage).
    buffer_size: HashMap<BufferId, i64>,
    /// The outputs of assembled axes, never checked as inputs.
    assembled: Assembled,
    /// The parameters whose elements were read (not only their dtype and length): what the
    /// outcome depends on beyond the launch's shape (`crate::frozen`).
    read: RefCell<Vec<VarId>>,
}

/// Checks `args` against the stage-I function `func` before a native launch. See the module
/// documentation for the list of checks.
pub fn validate_args(func: &PrimFunc, args: &HashMap<String, ArgValue>) -> Result<(), RunError> {
    validate_launch(func, &LaunchArgs::of_values(args))
}

/// [`validate_args`] on borrowed arguments.
pub fn validate_launch(func: &PrimFunc, args: &LaunchArgs<'_>) -> Result<(), RunError> {
    validate_reading(func, args).map(|_| ())
}

/// [`validate_launch`], returning the names of the parameters whose elements it read: the
/// outcome is a function of those arrays' elements and of the launch's
/// [`crate::LaunchShape`] (scalars, dtypes, lengths) alone.
pub fn validate_reading(func: &PrimFunc, args: &LaunchArgs<'_>) -> Result<Vec<String>, RunError> {
    let mut c = Checker {
        func,
        args,
        ints: HashMap::new(),
        axes: Vec::with_capacity(func.axes.len()),
        layout_axes: Vec::with_capacity(func.axes.len()),
        buffer_size: HashMap::new(),
        assembled: Assembled::of(func),
        read: RefCell::new(Vec::new()),
    };
    c.scalars()?;
    c.check_axes()?;
    c.check_buffers()?;
    c.check_body(&func.body)?;
    c.check_distinct()?;
    c.check_monotone()?;
    let mut read: Vec<String> = c.read.take().into_iter().map(|v| c.var_name(v)).collect();
    read.sort_unstable();
    read.dedup();
    Ok(read)
}

/// The smallest extent of a dense dimension that coordinates of `axis` index directly (as
/// `B[j, k]` indexes `B`'s first axis with `j`), `None` when they index none: every coordinate
/// an iterator over `axis` takes must lie below it, as validation checks the stored ones. A
/// decomposed format's padding slots (`runtime::composable`) name coordinates of their own,
/// and keep below this bound so that the decomposed function's validation holds wherever the
/// original's does. Extents come from `func`'s integer arguments in `args` (an extent they do
/// not give bounds nothing).
pub fn coordinate_bound(
    func: &PrimFunc,
    axis: AxisId,
    args: &HashMap<String, ArgValue>,
) -> Option<i64> {
    let ints: HashMap<VarId, i64> = func
        .params
        .iter()
        .filter_map(|&p| match args.get(&func.vars.get(p)?.name) {
            Some(ArgValue::Int(i)) => Some((p, *i)),
            _ => None,
        })
        .collect();
    let iter_axis = iter_axes(&func.body);
    let mut bound: Option<i64> = None;
    let mut access = |b: BufferId, indices: &[Expr]| {
        for (k, e) in indices.iter().enumerate() {
            let Expr::Var(v) = e else { continue };
            if iter_axis.get(v) != Some(&axis) {
                continue;
            }
            let extent = match direct_dim(func, b, k, e, &iter_axis) {
                Some(Dim::Axis(y)) => eval_size(&func.axes[y].length, &ints),
                Some(Dim::Dense(d)) => eval_size(d, &ints),
                None => None,
            };
            if let Some(n) = extent {
                bound = Some(bound.map_or(n, |m| m.min(n)));
            }
        }
    };
    func.body.visit(&mut |s| {
        if let Stmt::Store(st) = s {
            access(st.buffer, &st.indices);
        }
        s.for_each_expr(|e| {
            e.visit(&mut |x| {
                if let Expr::Load { buffer, indices } = x {
                    access(*buffer, indices);
                }
            })
        });
    });
    bound
}

/// A dimension an index addresses directly.
enum Dim<'f> {
    /// A `dense_fixed` axis of a sparse buffer.
    Axis(AxisId),
    /// A dense buffer's dimension, of this extent.
    Dense(&'f Expr),
}

/// The dimension `k` of buffer `b` where index `e` addresses it directly: a `dense_fixed` axis
/// that `e` is not an iterator of (`B[j, k]` for `j` over `J`, `B` over `(J_detach, K)`), or a
/// dense buffer's dimension; `None` where the index is a position.
fn direct_dim<'f>(
    func: &'f PrimFunc,
    b: BufferId,
    k: usize,
    e: &Expr,
    iter_axis: &HashMap<VarId, AxisId>,
) -> Option<Dim<'f>> {
    match &func.buffers.get(b)?.shape {
        BufferShape::Sparse(axes) => {
            let &y = axes.get(k)?;
            if func.axes.get(y).map(|a| a.kind) != Some(AxisKind::DenseFixed) {
                return None;
            }
            match e {
                Expr::Var(v) if iter_axis.get(v) == Some(&y) => None,
                _ => Some(Dim::Axis(y)),
            }
        }
        BufferShape::Dense(dims) => dims.get(k).map(Dim::Dense),
    }
}

/// Iterator variable → the axis whose coordinate it holds.
fn iter_axes(body: &Stmt) -> HashMap<VarId, AxisId> {
    let mut iter_axis = HashMap::new();
    body.visit(&mut |s| {
        if let Stmt::SparseIteration(it) = s {
            let axes = it.axes.iter().flat_map(|a| a.axes());
            for (v, a) in it.vars.iter().zip(axes) {
                iter_axis.insert(*v, a);
            }
        }
    });
    iter_axis
}

/// Refuses an array in GPU memory whose values validation must read (`what`: its name).
fn on_host(t: &ArrayRef<'_>, what: &str) -> Result<(), RunError> {
    if t.is_on_device() {
        return Err(RunError::ArgKind {
            name: what.to_string(),
            expected: "a host array (validation reads its values before a launch: lend it \
                       frozen, and a GPU launch keeps a device copy)"
                .into(),
            found: "an array in GPU memory".into(),
        });
    }
    Ok(())
}

fn size_err(subject: impl Into<String>, message: impl Into<String>) -> RunError {
    RunError::Size {
        subject: subject.into(),
        message: message.into(),
    }
}

impl<'a> Checker<'a> {
    fn var_name(&self, v: VarId) -> String {
        self.func
            .vars
            .get(v)
            .map(|x| x.name.clone())
            .unwrap_or_else(|| "?".into())
    }

    fn scalars(&mut self) -> Result<(), RunError> {
        for &p in &self.func.params {
            let Some(var) = self.func.vars.get(p) else {
                return Err(RunError::Stage(format!("parameter {p:?} is not declared")));
            };
            let name = &var.name;
            let dt = var.dtype;
            let given = self.args.get(name);
            if self.assembled.params.contains_key(&p) {
                // Produced by the run (an assembled axis's structure or nnz, or values over it).
                continue;
            }
            if dt == DType::Handle {
                // Arrays are checked where they are used (axes, buffers).
                match given {
                    None => return Err(RunError::MissingArg { name: name.clone() }),
                    Some(LaunchArg::Array(_)) => {}
                    Some(_) => {
                        return Err(RunError::ArgKind {
                            name: name.clone(),
                            expected: "an array".into(),
                            found: "a scalar".into(),
                        })
                    }
                }
                continue;
            }
            match given {
                None => return Err(RunError::MissingArg { name: name.clone() }),
                Some(LaunchArg::Array(_)) => {
                    return Err(RunError::ArgKind {
                        name: name.clone(),
                        expected: format!("a scalar of type {dt}"),
                        found: "an array".into(),
                    })
                }
                Some(LaunchArg::Int(i)) => {
                    if !dt.is_float() {
                        if !int_fits(*i, dt) {
                            return Err(RunError::Scalar {
                                name: name.clone(),
                                message: format!("{i} does not fit in its type {dt}"),
                            });
                        }
                        self.ints.insert(p, *i);
                    }
                }
                Some(LaunchArg::Float(x)) => {
                    if !dt.is_float() {
                        return Err(RunError::Scalar {
                            name: name.clone(),
                            message: format!("has type {dt}, but a float ({x}) was given"),
                        });
                    }
                }
            }
        }
        Ok(())
    }

    /// Evaluates an integer expression over the integer scalar parameters.
    fn eval(&self, e: &Expr) -> Option<i64> {
        eval_size(e, &self.ints)
    }

    /// Evaluates a size: an integer in `0..=2^31`.
    fn size(&self, e: &Expr, subject: &str, what: &str) -> Result<i64, RunError> {
        let v = self.eval(e).ok_or_else(|| {
            size_err(
                subject,
                format!("{what} cannot be computed from the integer parameters"),
            )
        })?;
        if !(0..=MAX_ELEMENTS).contains(&v) {
            return Err(size_err(
                subject,
                format!("{what} = {v} is outside 0..=2^31"),
            ));
        }
        Ok(v)
    }

    /// The array behind the handle parameter `param`.
    fn array(&self, param: VarId) -> Result<&'a ArrayRef<'a>, RunError> {
        let name = self.var_name(param);
        match self.args.get(&name) {
            Some(LaunchArg::Array(t)) => Ok(t),
            Some(_) => Err(RunError::ArgKind {
                name,
                expected: "an array".into(),
                found: "a scalar".into(),
            }),
            None => Err(RunError::MissingArg { name }),
        }
    }

    fn index_array(
        &self,
        param: VarId,
        axis: &str,
        indptr: bool,
    ) -> Result<IndexView<'a>, RunError> {
        let t = self.array(param)?;
        self.read.borrow_mut().push(param);
        on_host(t, &self.var_name(param))?;
        IndexView::new(t).ok_or_else(|| {
            let (p, message) = (
                self.var_name(param),
                format!("must hold integers, but holds {}", t.dtype()),
            );
            if indptr {
                RunError::Indptr {
                    axis: axis.into(),
                    param: p,
                    message,
                }
            } else {
                RunError::Indices {
                    axis: axis.into(),
                    param: p,
                    message,
                }
            }
        })
    }

    fn check_axes(&mut self) -> Result<(), RunError> {
        let func = self.func;
        for (h, ax) in func.axes.iter() {
            let name = ax.name.clone();
            let subject = format!("axis `{name}`");
            let length = self.size(&ax.length, &subject, "length")?;
            let mut info = AxisInfo {
                name: name.clone(),
                length,
                parent_count: 1,
                level_count: length,
                indptr: None,
                coord_bound: length,
            };
            let mut per_parent = 0;
            if ax.kind != AxisKind::DenseFixed {
                let parent = ax
                    .parent
                    .filter(|p| p.index() < h.index())
                    .ok_or_else(|| size_err(&subject, "needs a parent declared before it"))?;
                if func.axes[parent].assembled {
                    return Err(size_err(
                        &subject,
                        format!(
                            "its parent `{}` is assembled by the kernel: axes under an \
                             assembled axis are not supported",
                            func.axes[parent].name
                        ),
                    ));
                }
                info.parent_count = self.axes[parent.index()].level_count;
                let nnz = match &ax.nnz {
                    Some(_) if ax.assembled => None,
                    Some(e) => Some(self.size(e, &subject, "nnz")?),
                    None => None,
                };
                if ax.assembled {
                    // An output: no stored elements to check; any coordinate below the
                    // length may be produced.
                    info.level_count = 0;
                } else if ax.kind.is_varied() {
                    let p = ax
                        .indptr
                        .ok_or_else(|| size_err(&subject, "has no indptr parameter"))?;
                    let view = self.index_array(p, &name, true)?;
                    info.level_count = check_indptr(&name, &self.var_name(p), view, &info, nnz)
                        .map_err(|e| self.naming_buffers(h, e))?;
                    if ax.kind == AxisKind::DenseVaried {
                        let mut widest = 0;
                        for q in 0..view.len().saturating_sub(1) {
                            let count = view.get(q + 1) - view.get(q);
                            if count > length {
                                return Err(RunError::Indptr {
                                    axis: name,
                                    param: self.var_name(p),
                                    message: format!(
                                        "parent position {q} holds {count} elements, more than \
                                         the axis length {length}"
                                    ),
                                });
                            }
                            widest = widest.max(count);
                        }
                        info.coord_bound = widest;
                    }
                    info.indptr = Some(view);
                } else {
                    let c = ax
                        .nnz_cols
                        .as_ref()
                        .ok_or_else(|| size_err(&subject, "has no nnz_cols"))?;
                    per_parent = self.size(c, &subject, "nnz_cols")?;
                    info.level_count = info
                        .parent_count
                        .checked_mul(per_parent)
                        .filter(|n| *n <= MAX_ELEMENTS)
                        .ok_or_else(|| size_err(&subject, "more than 2^31 stored elements"))?;
                }
                if ax.kind.is_compressed() && !ax.assembled {
                    let p = ax
                        .indices
                        .ok_or_else(|| size_err(&subject, "has no indices parameter"))?;
                    let view = self.index_array(p, &name, false)?;
                    info.coord_bound =
                        check_indices(&name, &self.var_name(p), view, &info, per_parent, ax.sorted)
                            .map_err(|e| self.naming_buffers(h, e))?;
                }
            }
            self.layout_axes.push(AxisData {
                name,
                kind: ax.kind,
                parent: if ax.kind == AxisKind::DenseFixed {
                    None
                } else {
                    ax.parent
                },
                length,
                per_parent,
                parent_count: info.parent_count,
                indptr: Vec::new(),
                indices: Vec::new(),
                level_count: info.level_count,
            });
            self.axes.push(info);
        }
        Ok(())
    }

    /// An `indptr`/`indices` error with the buffers stored over the axis named: the operands
    /// whose data is malformed.
    fn naming_buffers(&self, a: AxisId, e: RunError) -> RunError {
        let over: Vec<String> = self
            .func
            .buffer_decls
            .iter()
            .filter_map(|b| self.func.buffers.get(*b))
            .filter(|b| b.data_param().is_some() && b.axes().contains(&a))
            .map(|b| format!("`{}`", b.name))
            .collect();
        if over.is_empty() {
            return e;
        }
        let note = |m: String| {
            let s = if over.len() == 1 { "" } else { "s" };
            format!("{m}; it is the structure of buffer{s} {}", over.join(", "))
        };
        match e {
            RunError::Indptr {
                axis,
                param,
                message,
            } => RunError::Indptr {
                axis,
                param,
                message: note(message),
            },
            RunError::Indices {
                axis,
                param,
                message,
            } => RunError::Indices {
                axis,
                param,
                message: note(message),
            },
            e => e,
        }
    }

    fn check_buffers(&mut self) -> Result<(), RunError> {
        let func = self.func;
        for &b in &func.buffer_decls {
            let Some(buf) = func.buffers.get(b) else {
                continue;
            };
            let BufferDecl::Match { data } = buf.decl else {
                continue;
            };
            if self.assembled.buffers.contains_key(&b) {
                // Its values are produced with its assembled structure.
                continue;
            }
            let name = &buf.name;
            let subject = format!("buffer `{name}`");
            let size = match &buf.shape {
                BufferShape::Sparse(axes) => {
                    if axes.iter().any(|a| a.index() >= self.layout_axes.len()) {
                        return Err(size_err(&subject, "refers to an undeclared axis"));
                    }
                    sparse_layout(name, axes, &self.layout_axes)
                        .map_err(|m| size_err(&subject, m))?
                        .1
                }
                BufferShape::Dense(dims) => {
                    let mut extents = Vec::with_capacity(dims.len());
                    for d in dims {
                        extents.push(self.size(d, &subject, "extent")?);
                    }
                    let mut strides = Vec::with_capacity(buf.strides.len());
                    for s in &buf.strides {
                        strides.push(self.size(s, &subject, "stride")?);
                    }
                    if !strides.is_empty() && strides.len() != extents.len() {
                        return Err(size_err(&subject, "strides do not match the dimensions"));
                    }
                    dense_size(name, &extents, &strides).map_err(|m| size_err(&subject, m))?
                }
            };
            let extra = match &buf.extra_storage {
                Some(e) => self.size(e, &subject, "extra_storage")?,
                None => 0,
            };
            let t = self.array(data)?;
            if t.dtype() != buf.dtype {
                return Err(RunError::DTypeMismatch {
                    name: self.var_name(data),
                    expected: buf.dtype,
                    found: t.dtype(),
                });
            }
            let needed = size + extra;
            if (t.len() as i64) < needed {
                return Err(RunError::ArrayTooShort {
                    buffer: name.clone(),
                    param: self.var_name(data),
                    needed,
                    found: t.len() as i64,
                });
            }
            self.buffer_size.insert(b, size);
        }
        Ok(())
    }

    /// Checks what the statements assume about the data: attach parents, coordinates used in
    /// dense axes of other buffers, declared buffer domains.
    fn check_body(&self, body: &Stmt) -> Result<(), RunError> {
        let iter_axis = iter_axes(body);
        let mut result = Ok(());
        body.visit(&mut |s| {
            if let Stmt::SparseIteration(it) = s {
                for a in &it.axes {
                    if let IterAxis::Attach { axis, parent } = a {
                        if result.is_ok() {
                            result = self.check_attach(*axis, *parent);
                        }
                    }
                }
            }
        });
        result?;
        let mut result = Ok(());
        body.visit(&mut |s| {
            if result.is_err() {
                return;
            }
            match s {
                Stmt::AssumeBufferDomain { buffer, lo, hi, .. } => {
                    result = self.check_domain(*buffer, lo, hi);
                }
                Stmt::Store(st) => {
                    result = self.check_access(st.buffer, &st.indices, &iter_axis);
                }
                _ => {}
            }
            if result.is_ok() {
                s.for_each_expr(|e| {
                    e.visit(&mut |x| {
                        if result.is_ok() {
                            if let Expr::Load { buffer, indices } = x {
                                result = self.check_access(*buffer, indices, &iter_axis);
                            }
                        }
                    })
                });
            }
        });
        result
    }

    fn axis(&self, a: AxisId) -> Result<&AxisInfo<'a>, RunError> {
        self.axes
            .get(a.index())
            .ok_or_else(|| RunError::Stage(format!("axis {a:?} is not declared")))
    }

    /// `T.sp.attach(axis, parent)`: `axis`'s indptr is indexed by `parent`'s coordinates.
    fn check_attach(&self, axis: AxisId, parent: AxisId) -> Result<(), RunError> {
        let a = self.axis(axis)?;
        let p = self.axis(parent)?;
        if a.indptr.is_some() && p.coord_bound > a.parent_count {
            return Err(size_err(
                format!("axis `{}`", a.name),
                format!(
                    "attached under `{}`, whose coordinates reach {}, but its indptr covers only \
                     {} parent positions",
                    p.name,
                    p.coord_bound - 1,
                    a.parent_count
                ),
            ));
        }
        Ok(())
    }

    /// The values of the match buffer `b` that its layout covers, if it is bound to an array.
    fn buffer_values(&self, b: BufferId) -> Option<(&'a ArrayRef<'a>, usize)> {
        let buf = self.func.buffers.get(b)?;
        let data = buf.data_param()?;
        let size = *self.buffer_size.get(&b)?;
        let t = self.array(data).ok()?;
        self.read.borrow_mut().push(data);
        Some((t, (size as usize).min(t.len())))
    }

    /// `DISTINCT_ATTR`: the index arrays a schedule stores through from iterations it runs
    /// apart or in another order hold distinct values in each fiber (the runs of an axis's
    /// fibers, or of a buffer's last axis or dimension) or over the whole array. A sorted
    /// axis's fibers already are (checked with its indices).
    fn check_distinct(&self) -> Result<(), RunError> {
        let func = self.func;
        for (param, scope) in func.attrs.distinct() {
            let var = trusted_param(func, &param, DISTINCT_ATTR)?;
            let whole = scope == DistinctScope::All;
            if let Some((a, ax)) = func.axes.iter().find(|(_, ax)| ax.indices == Some(var)) {
                let info = &self.axes[a.index()];
                if ax.assembled || (ax.sorted && (!whole || info.parent_count <= 1)) {
                    continue;
                }
                let view = self.index_array(var, &ax.name, false)?;
                // Lazily, fiber by fiber: a parent count is bounded by the data only through
                // an `indptr`'s length, so a fixed axis stops at the end of its indices.
                let per_parent = self.layout_axes[a.index()].per_parent as usize;
                let len = view.len();
                let runs: Box<dyn Iterator<Item = (usize, usize)>> = if whole {
                    Box::new(std::iter::once((0, len)))
                } else if let Some(ip) = info.indptr {
                    Box::new(
                        (0..info.parent_count as usize)
                            .map(move |q| (ip.get(q) as usize, ip.get(q + 1) as usize)),
                    )
                } else if per_parent == 0 {
                    continue;
                } else {
                    Box::new(
                        (0..info.parent_count as usize)
                            .map(move |q| (q * per_parent, (q + 1) * per_parent))
                            .take_while(move |&(lo, _)| lo < len),
                    )
                };
                if let Some(m) = repeated(view, runs, whole) {
                    return Err(RunError::Indices {
                        axis: ax.name.clone(),
                        param,
                        message: m,
                    });
                }
                continue;
            }
            let Some((b, view, n)) = self.trusted_values(var, &param, DISTINCT_ATTR, "indices")?
            else {
                continue;
            };
            let buf = &func.buffers[b];
            let runs = if whole {
                Box::new(std::iter::once((0, n)))
            } else {
                self.fibers(b, n)
            };
            if let Some(m) = repeated(view, runs, whole) {
                return Err(RunError::Domain {
                    buffer: buf.name.clone(),
                    message: m,
                });
            }
        }
        Ok(())
    }

    /// `MONOTONE_ATTR`: the arrays whose consecutive values a schedule takes as the bounds of
    /// ranges of positions, one per iteration it runs apart, never decrease (so the ranges never
    /// overlap). An axis's `indptr` is checked so with its axis.
    fn check_monotone(&self) -> Result<(), RunError> {
        let func = self.func;
        for param in func.attrs.monotone() {
            let var = trusted_param(func, &param, MONOTONE_ATTR)?;
            if func.axes.iter().any(|(_, ax)| ax.indptr == Some(var)) {
                continue;
            }
            let Some((b, view, n)) = self.trusted_values(var, &param, MONOTONE_ATTR, "indptr")?
            else {
                continue;
            };
            let buf = &func.buffers[b];
            let n = n.min(view.len());
            if let Some(q) = (1..n).find(|&q| view.get(q) < view.get(q - 1)) {
                return Err(RunError::Domain {
                    buffer: buf.name.clone(),
                    message: format!(
                        "value [{}] = {} is greater than value [{q}] = {}, but the kernel's \
                         schedule takes consecutive values as the bounds of ranges of \
                         positions, one per iteration it runs in parallel or reorders \
                         (`assume_monotone`: values never decreasing)",
                        q - 1,
                        view.get(q - 1),
                        view.get(q)
                    ),
                });
            }
        }
        Ok(())
    }

    /// The buffer whose data is parameter `var`, which the schedule's `attr` names (`param`),
    /// with its `n` values read as integers; `None` where it has no values to check. An error
    /// where `var` is no buffer's data (nor, as checked before, an axis's `axis_array`) or its
    /// values are not integers.
    fn trusted_values(
        &self,
        var: VarId,
        param: &str,
        attr: &str,
        axis_array: &str,
    ) -> Result<Option<(BufferId, IndexView<'a>, usize)>, RunError> {
        let func = self.func;
        let Some(b) = func
            .buffer_decls
            .iter()
            .copied()
            .find(|b| func.buffers.get(*b).and_then(|x| x.data_param()) == Some(var))
        else {
            return Err(size_err(
                format!("parameter `{param}`"),
                format!(
                    "is named by the schedule's `{attr}` but is neither an axis's {axis_array} \
                     nor a buffer's data"
                ),
            ));
        };
        let Some((t, n)) = self.buffer_values(b) else {
            return Ok(None);
        };
        on_host(t, &func.buffers[b].name)?;
        let Some(view) = IndexView::new(t) else {
            return Err(RunError::Domain {
                buffer: func.buffers[b].name.clone(),
                message: format!(
                    "holds {}, but the schedule takes its values as indices (`{attr}`)",
                    t.dtype()
                ),
            });
        };
        Ok(Some((b, view, n)))
    }

    /// The runs of match buffer `b`'s `n` values along its last axis or dimension: a varied
    /// last axis's fibers where the buffer's values are that axis's elements, runs of a fixed
    /// last axis's or a dense last dimension's extent; the whole array where no such runs
    /// exist (strided buffers, layouts whose last axis is not innermost).
    /// Yielded lazily: their count is bounded by `n` or by an `indptr`'s length.
    fn fibers(&self, b: BufferId, n: usize) -> Box<dyn Iterator<Item = (usize, usize)> + '_> {
        let whole = Box::new(std::iter::once((0, n)));
        let buf = &self.func.buffers[b];
        let extent = match &buf.shape {
            BufferShape::Dense(dims) if buf.strides.is_empty() => {
                dims.last().and_then(|d| self.eval(d))
            }
            BufferShape::Sparse(axes) => {
                let Some(&last) = axes.last() else {
                    return whole;
                };
                let ax = &self.func.axes[last];
                let data = &self.layout_axes[last.index()];
                if ax.kind.is_varied() {
                    let info = &self.axes[last.index()];
                    let chained = axes
                        .iter()
                        .skip(1)
                        .all(|a| self.func.axes[*a].kind.is_varied());
                    return match info.indptr {
                        Some(ip) if chained && info.level_count as usize == n => Box::new(
                            (0..info.parent_count as usize)
                                .map(move |q| (ip.get(q) as usize, ip.get(q + 1) as usize)),
                        ),
                        _ => whole,
                    };
                }
                Some(if ax.kind == AxisKind::CompressedFixed {
                    data.per_parent
                } else {
                    data.length
                })
            }
            BufferShape::Dense(_) => None,
        };
        match extent {
            Some(d) if d > 0 => {
                let d = d as usize;
                Box::new((0..n.div_ceil(d)).map(move |r| (r * d, ((r + 1) * d).min(n))))
            }
            _ => whole,
        }
    }

    /// `T.assume_buffer_domain(buf, (lo, hi))`: the compiled code may rely on it.
    fn check_domain(&self, b: BufferId, lo: &Expr, hi: &Expr) -> Result<(), RunError> {
        let Some((t, n)) = self.buffer_values(b) else {
            return Ok(());
        };
        let name = self.func.buffers[b].name.clone();
        let subject = format!("buffer `{name}`");
        let lo = self
            .eval(lo)
            .ok_or_else(|| size_err(&subject, "domain bound unknown"))?;
        let hi = self
            .eval(hi)
            .ok_or_else(|| size_err(&subject, "domain bound unknown"))?;
        for i in 0..n {
            let x = t.get_f64(i);
            if !(x >= lo as f64 && x < hi as f64) {
                return Err(RunError::Domain {
                    buffer: name,
                    message: format!(
                        "value [{i}] = {x} is outside its declared domain {lo}..{hi} \
                         (T.assume_buffer_domain)"
                    ),
                });
            }
        }
        Ok(())
    }

    /// An access whose index in a dense axis of the buffer is a coordinate of another axis, or
    /// a value loaded from an integer buffer: the compiled code indexes the dense dimension
    /// directly, so that coordinate must lie inside it.
    fn check_access(
        &self,
        b: BufferId,
        indices: &[Expr],
        iter_axis: &HashMap<VarId, AxisId>,
    ) -> Result<(), RunError> {
        let Some(buf) = self.func.buffers.get(b) else {
            return Ok(());
        };
        for (k, e) in indices.iter().enumerate() {
            let (extent, dim_name) = match direct_dim(self.func, b, k, e, iter_axis) {
                Some(Dim::Axis(y)) => {
                    let info = self.axis(y)?;
                    (info.length, format!("axis `{}`", info.name))
                }
                Some(Dim::Dense(d)) => match self.eval(d) {
                    Some(n) => (n, format!("dimension {k}")),
                    None => continue,
                },
                None => continue,
            };
            match e {
                Expr::Var(v) => {
                    let Some(&x) = iter_axis.get(v) else { continue };
                    let info = self.axis(x)?;
                    if info.coord_bound > extent {
                        return Err(RunError::Domain {
                            buffer: buf.name.clone(),
                            message: format!(
                                "{dim_name} has length {extent}, but it is indexed by \
                                 coordinates of axis `{}`, which reach {}",
                                info.name,
                                info.coord_bound - 1
                            ),
                        });
                    }
                }
                Expr::Load { buffer: src, .. } => {
                    let Some((t, n)) = self.buffer_values(*src) else {
                        continue;
                    };
                    on_host(t, &self.func.buffers[*src].name)?;
                    let Some(view) = IndexView::new(t) else {
                        continue;
                    };
                    if let Some((i, c)) = view.first_outside(n.min(view.len()), extent) {
                        return Err(RunError::Domain {
                            buffer: self.func.buffers[*src].name.clone(),
                            message: format!(
                                "value [{i}] = {c} is used as an index into {dim_name} of \
                                 buffer `{}`, outside 0..{extent}",
                                buf.name
                            ),
                        });
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// The parameter named `param` by the schedule's function attribute `attr`.
fn trusted_param(func: &PrimFunc, param: &str, attr: &str) -> Result<VarId, RunError> {
    func.params
        .iter()
        .copied()
        .find(|p| func.vars.get(*p).is_some_and(|x| x.name == param))
        .ok_or_else(|| {
            size_err(
                format!("parameter `{param}`"),
                format!(
                    "is named by the schedule's `{attr}` but the function has no such parameter"
                ),
            )
        })
}

/// Where `runs` of `v` repeat a value: the message naming the two positions and the value.
fn repeated(
    v: IndexView<'_>,
    runs: impl IntoIterator<Item = (usize, usize)>,
    whole: bool,
) -> Option<String> {
    let mut seen: Vec<(i64, usize)> = Vec::new();
    for (q, (lo, hi)) in runs.into_iter().enumerate() {
        let hi = hi.min(v.len());
        seen.clear();
        seen.extend((lo..hi.max(lo)).map(|i| (v.get(i), i)));
        seen.sort_unstable();
        if let Some(w) = seen.windows(2).find(|w| w[0].0 == w[1].0) {
            let (first, second) = (w[0].1, w[1].1);
            let place = if whole {
                String::new()
            } else {
                format!(" (both in fiber {q}, positions {lo}..{hi})")
            };
            return Some(format!(
                "values [{first}] and [{second}] are both {}{place}, but the kernel's schedule \
                 stores through them from iterations it runs in parallel or reorders, each \
                 trusted to reach an element of its own (`assume_distinct`: distinct {})",
                w[0].0,
                if whole {
                    "over the whole array"
                } else {
                    "inside each fiber"
                }
            ));
        }
    }
    None
}

/// Checks an `indptr`; returns its last value (the level's element count).
fn check_indptr(
    axis: &str,
    param: &str,
    v: IndexView<'_>,
    info: &AxisInfo<'_>,
    nnz: Option<i64>,
) -> Result<i64, RunError> {
    let err = |message: String| RunError::Indptr {
        axis: axis.into(),
        param: param.into(),
        message,
    };
    let expected = info.parent_count + 1;
    if v.len() as i64 != expected {
        return Err(err(format!(
            "has {} entries, expected {expected} (parent element count {} + 1)",
            v.len(),
            info.parent_count
        )));
    }
    if v.get(0) != 0 {
        return Err(err(format!("indptr[0] is {}, expected 0", v.get(0))));
    }
    if let Some(q) = v.first_decrease() {
        return Err(err(format!(
            "not monotone: indptr[{}] = {} > indptr[{q}] = {}",
            q - 1,
            v.get(q - 1),
            v.get(q)
        )));
    }
    let last = v.get(v.len() - 1);
    if let Some(n) = nnz {
        if last != n {
            return Err(err(format!(
                "ends at {last} (indptr[{}]), but the axis nnz is {n}",
                v.len() - 1
            )));
        }
    }
    if last > MAX_ELEMENTS {
        return Err(err(format!("{last} elements exceed the limit of 2^31")));
    }
    Ok(last)
}

/// Checks an `indices` array; returns one more than its largest coordinate (0 when empty).
fn check_indices(
    axis: &str,
    param: &str,
    v: IndexView<'_>,
    info: &AxisInfo<'_>,
    per_parent: i64,
    sorted: bool,
) -> Result<i64, RunError> {
    let err = |message: String| RunError::Indices {
        axis: axis.into(),
        param: param.into(),
        message,
    };
    if v.len() as i64 != info.level_count {
        let why = if info.indptr.is_some() {
            "the last indptr value".to_string()
        } else {
            format!("parent count {} × nnz_cols {per_parent}", info.parent_count)
        };
        return Err(err(format!(
            "has {} entries, expected {} ({why})",
            v.len(),
            info.level_count
        )));
    }
    let length = info.length;
    // Fibers partition the array (the indptr was checked first). Where every fiber is
    // strictly increasing, the smallest and largest coordinates are the smallest first and the
    // largest last of the fibers: one pass over the array instead of two.
    let count = info.parent_count as usize;
    let fibers = match info.indptr {
        Some(ip) => Fibers::Indptr(ip, count),
        None => Fibers::Fixed(per_parent as usize, count),
    };
    let (unsorted, range) = match sorted.then(|| v.sorted_fibers(fibers)) {
        Some(SortedFibers::Sorted(range)) => (None, range),
        Some(SortedFibers::Unsorted(q, i)) => (Some((q, i)), v.min_max(0, v.len())),
        None => (None, v.min_max(0, v.len())),
    };
    if matches!(range, Some((lo, hi)) if lo < 0 || hi >= length) {
        if let Some((i, c)) = v.first_outside(v.len(), length) {
            return Err(err(format!("indices[{i}] = {c} is outside 0..{length}")));
        }
    }
    let bound = range.map_or(0, |(_, hi)| hi + 1);
    if let Some((q, i)) = unsorted {
        return Err(err(format!(
            "not strictly increasing under parent position {q}: indices[{}] = {} \
             then indices[{i}] = {} (the axis is declared sorted)",
            i - 1,
            v.get(i - 1),
            v.get(i)
        )));
    }
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_views_find_the_first_offender_in_every_type() {
        let i32s = [0i32, 3, 7, 7, -2, 9, 12];
        let v = IndexView::I32(&i32s);
        assert_eq!(v.min_max(0, 7), Some((-2, 12)));
        assert_eq!(v.min_max(1, 4), Some((3, 7)));
        assert_eq!(v.min_max(2, 2), None);
        assert_eq!(v.first_outside(7, 10), Some((4, -2)));
        assert_eq!(v.first_outside(7, 13), Some((4, -2)));
        assert_eq!(v.first_outside(4, 8), None);
        assert_eq!(v.first_outside(4, 7), Some((2, 7)));
        // Fibers: 7 then 7 at position 3 breaks the first of 0..4; fibers that stop before
        // it are fine, and give the smallest first and largest last elements.
        let unsorted = |r: SortedFibers| match r {
            SortedFibers::Unsorted(q, i) => Some((q, i)),
            SortedFibers::Sorted(_) => None,
        };
        let ptr = [0i64, 4, 7];
        assert_eq!(
            unsorted(v.sorted_fibers(Fibers::Indptr(IndexView::I64(&ptr), 2))),
            Some((0, 3))
        );
        let ptr = [0u16, 3, 4, 4, 7];
        match v.sorted_fibers(Fibers::Indptr(IndexView::U16(&ptr), 4)) {
            SortedFibers::Unsorted(q, i) => panic!("fiber {q} at {i}"),
            SortedFibers::Sorted(r) => assert_eq!(r, Some((-2, 12))),
        }
        // Fixed fibers of 2: (0, 3), (7, 7) breaks at position 3.
        assert_eq!(unsorted(v.sorted_fibers(Fibers::Fixed(2, 3))), Some((1, 3)));
        assert!(matches!(
            v.sorted_fibers(Fibers::Fixed(0, 5)),
            SortedFibers::Sorted(None)
        ));
        // A decrease: -2 after 7 at position 4.
        assert_eq!(v.first_decrease(), Some(4));
        assert_eq!(IndexView::I32(&[0, 0, 1]).first_decrease(), None);
        // u64 beyond i64 saturates, so it is outside any extent.
        let big = [1u64, u64::MAX, 2];
        let u = IndexView::U64(&big);
        assert_eq!(u.min_max(0, 3), Some((1, i64::MAX)));
        assert_eq!(u.first_outside(3, 100), Some((1, i64::MAX)));
        let ptr = [0i32, 3];
        assert_eq!(
            unsorted(u.sorted_fibers(Fibers::Indptr(IndexView::I32(&ptr), 1))),
            Some((0, 2))
        );
        let small = [5u8, 1, 0];
        assert_eq!(IndexView::U8(&small).first_outside(3, 5), Some((0, 5)));
        assert_eq!(IndexView::U8(&small).min_max(0, 3), Some((0, 5)));
    }
    use crate::bind::Binder;
    use sparsetir_formats::Tensor;
    use sparsetir_formats::{Coo, Field};

    fn coo(dims: [usize; 2], entries: &[(i64, i64)]) -> Coo {
        Coo {
            dims: dims.to_vec(),
            coords: entries.iter().map(|&(i, j)| vec![i, j]).collect(),
            values: entries.iter().map(|_| 1.0).collect(),
            field: Field::Real,
        }
    }

    /// spadd bound as `run --bind` binds it: A 3×4, B 3×4, C left to the run.
    fn spadd_args() -> (PrimFunc, HashMap<String, ArgValue>) {
        let f = sparsetir_ops::load("spadd").expect("spadd");
        let mut b = Binder::new(&f);
        b.bind_coo("A", &coo([3, 4], &[(0, 1), (0, 3), (2, 0)]))
            .expect("A");
        b.bind_coo("B", &coo([3, 4], &[(0, 3), (1, 2)])).expect("B");
        let args = b.finish().expect("finish");
        (f, args)
    }

    fn set(args: &mut HashMap<String, ArgValue>, name: &str, dtype: DType, v: &[i64]) {
        args.insert(
            name.into(),
            ArgValue::Array(Tensor::from_i64(dtype, v).expect("tensor")),
        );
    }

    #[test]
    fn assembled_outputs_are_not_inputs() {
        let (f, mut args) = spadd_args();
        validate_args(&f, &args).expect("no C, no nnz_c: valid");
        // Whatever a caller leaves there (a previous run's result, placeholders of any size or
        // type) is an output: not checked.
        set(&mut args, "c_indptr", DType::I32, &[7]);
        set(&mut args, "c_indices", DType::I64, &[-1, 99]);
        set(&mut args, "c", DType::I32, &[]);
        args.insert("nnz_c".into(), ArgValue::Float(0.5));
        validate_args(&f, &args).expect("outputs ignored");
    }

    #[test]
    fn inputs_stay_strict_beside_assembled_outputs() {
        let (f, args) = spadd_args();
        for name in ["a_indices", "b_indptr", "a", "n", "nnz_b"] {
            let mut a = args.clone();
            a.remove(name);
            let err = validate_args(&f, &a).expect_err("refused");
            assert_eq!(err, RunError::MissingArg { name: name.into() });
        }
        let mut a = args.clone();
        a.insert("nnz_a".into(), ArgValue::Int(2));
        assert!(matches!(
            validate_args(&f, &a),
            Err(RunError::Indptr { .. })
        ));
        // The output's length must still be known and valid.
        let mut a = args.clone();
        a.insert("n".into(), ArgValue::Int(-1));
        assert!(validate_args(&f, &a).is_err());
    }

    #[test]
    fn unsorted_and_duplicate_columns_name_the_operand() {
        let (f, args) = spadd_args();
        // Row 0 of A holds columns 1, 3: swap them, then repeat one.
        for bad in [[3, 1, 0], [1, 1, 0]] {
            let mut a = args.clone();
            set(&mut a, "a_indices", DType::I32, &bad);
            let err = validate_args(&f, &a).expect_err("refused");
            let RunError::Indices { axis, param, .. } = &err else {
                panic!("{err}");
            };
            assert_eq!((axis.as_str(), param.as_str()), ("JA", "a_indices"));
            let text = err.to_string();
            for needle in ["declared sorted", "structure of buffer `A`"] {
                assert!(text.contains(needle), "`{needle}` not in: {text}");
            }
        }
        // B's indptr: its own operand named.
        let mut a = args;
        set(&mut a, "b_indptr", DType::I32, &[0, 2, 1, 2]);
        let err = validate_args(&f, &a).expect_err("refused").to_string();
        assert!(
            err.contains("`b_indptr`") && err.contains("buffer `B`"),
            "{err}"
        );
    }
}
