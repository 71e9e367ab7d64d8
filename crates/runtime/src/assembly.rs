//! Running functions whose output structure is assembled (issue 15): the symbolic phase fills
//! the assembled axis's `indptr`, the runtime checks it and allocates `indices` and the values
//! (`nnz = indptr[rows]`), then the numeric phase fills them. The argument contract is the
//! evaluator's: the caller may leave the assembled axis's `indptr`, `indices`, `nnz` and its
//! buffer's values out; after the run they hold the result.

use std::collections::HashMap;

use sparsetir_eval::ArgValue;
use sparsetir_formats::{Tensor, TensorData};
use sparsetir_ir::{AxisId, BufferId, DType, Expr, IRModule, IterAxis, PrimFunc, Stmt, VarId};
pub use sparsetir_transform::assembles;
use sparsetir_transform::{lower, stage_param, Phase, PipelineOptions};

use crate::build::{emit_c_cpu, kernel_params, schedule_and_lower, BuildError};
use crate::native::{CompileOptions, Kernel};
use crate::timing::{time_with, Timing, TimingOptions};
use crate::validate::validate_args;
use crate::RunError;

/// One assembled axis: the parameters the run fills.
#[derive(Clone, Debug, PartialEq)]
pub struct AsmOutput {
    pub axis: String,
    pub indptr: String,
    pub indices: String,
    pub nnz: String,
    /// The value arrays of the buffers over the axis, with their dtypes.
    pub data: Vec<(String, DType)>,
    /// The number of rows (the parent axis's length).
    pub rows: Expr,
    /// The number of columns (the assembled axis's length).
    pub cols: Expr,
    pub idtype: DType,
}

/// What a function's assembled axes (`assembled=True`, issue 15) make outputs: for each such
/// axis its `indptr`, `indices` and `nnz` parameters, and the data parameter of every buffer
/// stored over it. Callers omit them; after the run the arguments hold them (`indptr` of parent
/// count + 1 offsets, `indices` and values of nnz entries, `nnz` as an integer).
#[derive(Debug, Clone, Default)]
pub struct Assembled {
    /// The assembled axes, in declaration order.
    pub axes: Vec<AxisId>,
    /// Each parameter the run produces, with the assembled axis it belongs to.
    pub params: HashMap<VarId, AxisId>,
    /// Each buffer stored over an assembled axis, with that axis.
    pub buffers: HashMap<BufferId, AxisId>,
}

impl Assembled {
    pub fn of(func: &PrimFunc) -> Assembled {
        let mut out = Assembled::default();
        for (a, axis) in func.axes.iter() {
            if !axis.assembled {
                continue;
            }
            out.axes.push(a);
            for p in [axis.indptr, axis.indices].into_iter().flatten() {
                out.params.insert(p, a);
            }
            if let Some(Expr::Var(v)) = &axis.nnz {
                out.params.insert(*v, a);
            }
        }
        if out.axes.is_empty() {
            return out;
        }
        for (b, buf) in func.buffers.iter() {
            if let Some(&a) = buf.axes().iter().find(|a| out.axes.contains(a)) {
                out.buffers.insert(b, a);
                if let Some(d) = buf.data_param() {
                    out.params.insert(d, a);
                }
            }
        }
        out
    }
}

/// The assembled axes of a stage-I function by parameter name (empty for ordinary functions).
pub fn outputs(f: &PrimFunc) -> Vec<AsmOutput> {
    let asm = Assembled::of(f);
    let name = |v: VarId| f.vars[v].name.clone();
    let mut out = Vec::new();
    for &id in &asm.axes {
        let a = &f.axes[id];
        let (Some(p), Some(x), Some(Expr::Var(n)), Some(parent)) =
            (a.indptr, a.indices, a.nnz.as_ref(), a.parent)
        else {
            continue;
        };
        let data = asm
            .buffers
            .iter()
            .filter(|(_, axis)| **axis == id)
            .filter_map(|(b, _)| f.buffers.get(*b))
            .filter_map(|b| b.data_param().map(|d| (name(d), b.dtype)))
            .collect();
        out.push(AsmOutput {
            axis: a.name.clone(),
            indptr: name(p),
            indices: name(x),
            nnz: name(*n),
            data,
            rows: f.axes[parent].length.clone(),
            cols: a.length.clone(),
            idtype: a.idtype,
        });
    }
    out
}

fn scalar(e: &Expr, args: &HashMap<String, ArgValue>, f: &PrimFunc) -> Result<i64, RunError> {
    match e {
        Expr::Int(v, _) => Ok(*v),
        Expr::Var(v) => match args.get(&f.vars[*v].name) {
            Some(ArgValue::Int(x)) => Ok(*x),
            _ => Err(RunError::MissingArg {
                name: f.vars[*v].name.clone(),
            }),
        },
        _ => Err(RunError::Size {
            subject: "assembled output".into(),
            message: "the row count must be a parameter or a constant".into(),
        }),
    }
}

/// `args[name]` as a tensor of `dtype` with `n` elements: the tensor already there (an earlier
/// run's output) resized on its own storage, else a new zero one.
fn sized(
    args: &mut HashMap<String, ArgValue>,
    name: &str,
    dtype: DType,
    n: usize,
    o: &AsmOutput,
    unfilled: &mut Option<Vec<(String, usize)>>,
) -> Result<(), RunError> {
    // An array at least as long (a caller's, or the last run's) is cut to length and reused.
    // A shorter one (Python passes empty ones) is replaced, not grown: growing zeroes the new
    // elements here, on one thread, page fault by page fault, while `Tensor::zeros` takes
    // zeroed memory from the allocator (for a large array, fresh pages that are zero already
    // and fault in as the phases first write them).
    if let Some(ArgValue::Array(t)) = args.get_mut(name) {
        if t.dtype() == dtype && t.len() >= n {
            t.resize_1d(n);
            return Ok(());
        }
    }
    let t = match unfilled {
        // Written whole by the gather phase: not cleared first (`assume_filled` after it).
        Some(names) => {
            names.push((name.to_string(), n));
            Tensor::unfilled(dtype, n)
        }
        None => Tensor::zeros(dtype, vec![n]),
    }
    .map_err(size_err(o))?;
    args.insert(name.to_string(), ArgValue::Array(t));
    Ok(())
}

/// Whether the integer array `t` fails to be a running sum from 0 (empty, a first element other
/// than 0, a decrease), and its last element (0 when empty). On typed slices: it runs on every
/// product's offsets.
fn ascending(t: &Tensor) -> (bool, i64) {
    fn go<T: Copy + Into<i64>>(v: &[T]) -> (bool, i64) {
        let mut bad = v.first().is_none_or(|x| (*x).into() != 0);
        let mut prev = 0i64;
        for x in v {
            let x: i64 = (*x).into();
            bad |= x < prev;
            prev = x;
        }
        (bad, prev)
    }
    match &t.data {
        TensorData::I32(v) => go(v),
        TensorData::I64(v) => go(v),
        _ => {
            let v: Vec<i64> = (0..t.len()).map(|i| t.get_i64(i)).collect();
            go(&v)
        }
    }
}

/// The sum of the integer array `t` past its first element (negative elements count as 0): the
/// bound phase's total.
fn sum_from_second(t: &Tensor) -> i64 {
    fn go<T: Copy + Into<i64>>(v: &[T]) -> i64 {
        v.iter()
            .skip(1)
            .map(|x| (*x).into().max(0))
            .fold(0i64, i64::saturating_add)
    }
    match &t.data {
        TensorData::I32(v) => go(v),
        TensorData::I64(v) => go(v),
        _ => (1..t.len())
            .map(|i| t.get_i64(i).max(0))
            .fold(0, i64::saturating_add),
    }
}

/// Before the symbolic phase: `indptr` zeroed (rows + 1), `nnz = 0`, `indices` and values
/// empty — or, from an earlier run, kept as they are for [`allocate`] to resize in place.
pub fn prepare(f: &PrimFunc, args: &mut HashMap<String, ArgValue>) -> Result<(), RunError> {
    for o in outputs(f) {
        let rows = scalar(&o.rows, args, f)?;
        let rows = usize::try_from(rows).map_err(|_| RunError::Size {
            subject: o.axis.clone(),
            message: format!("{rows} rows"),
        })?;
        let zeros = Tensor::zeros(o.idtype, vec![rows + 1]).map_err(size_err(&o))?;
        args.insert(o.indptr.clone(), ArgValue::Array(zeros));
        args.insert(o.nnz.clone(), ArgValue::Int(0));
        // The symbolic phase neither reads nor writes them: an earlier run's arrays stay as
        // they are (`allocate` resizes them; the numeric phase overwrites every element), others
        // start empty.
        let mut empty = |name: &str, dt: DType| -> Result<(), RunError> {
            let kept = matches!(args.get(name), Some(ArgValue::Array(t)) if t.dtype() == dt);
            if !kept {
                sized(args, name, dt, 0, &o, &mut None)?;
            }
            Ok(())
        };
        empty(&o.indices, o.idtype)?;
        for (d, dt) in &o.data {
            empty(d, *dt)?;
        }
    }
    Ok(())
}

fn size_err<E: std::fmt::Display>(o: &AsmOutput) -> impl Fn(E) -> RunError + '_ {
    move |e| RunError::Size {
        subject: o.axis.clone(),
        message: e.to_string(),
    }
}

/// After the symbolic phase: checks the offsets (start at 0, never decrease, fit the index
/// type) and allocates `indices` and the values of `nnz = indptr[rows]` elements, zeroed.
pub fn allocate(f: &PrimFunc, args: &mut HashMap<String, ArgValue>) -> Result<(), RunError> {
    allocate_as(f, args, &mut None)
}

/// [`allocate`], the arrays it makes left unfilled where `unfilled` is `Some` (for a C phase
/// that writes every element; their names and lengths are pushed there, for
/// [`Tensor::assume_filled`] once that phase succeeded).
fn allocate_as(
    f: &PrimFunc,
    args: &mut HashMap<String, ArgValue>,
    unfilled: &mut Option<Vec<(String, usize)>>,
) -> Result<(), RunError> {
    for o in outputs(f) {
        let Some(ArgValue::Array(t)) = args.get(&o.indptr) else {
            return Err(RunError::MissingArg {
                name: o.indptr.clone(),
            });
        };
        let (bad, prev) = ascending(t);
        if bad {
            return Err(RunError::Indptr {
                axis: o.axis.clone(),
                param: o.indptr.clone(),
                message: "the symbolic phase produced offsets that are not a running sum".into(),
            });
        }
        let nnz = prev;
        let limit = match o.idtype {
            DType::I32 => i64::from(i32::MAX),
            _ => i64::MAX,
        };
        if nnz > limit {
            return Err(RunError::Size {
                subject: o.axis.clone(),
                message: format!(
                    "the output has {nnz} stored elements, more than {} offsets can hold \
                     (declare the axis with idtype=\"int64\")",
                    o.idtype
                ),
            });
        }
        let n = nnz as usize;
        sparsetir_formats::limits::check(n, 8).map_err(|message| RunError::Size {
            subject: o.axis.clone(),
            message,
        })?;
        sized(args, &o.indices, o.idtype, n, &o, unfilled)?;
        args.insert(o.nnz.clone(), ArgValue::Int(nnz));
        for (d, dt) in &o.data {
            sized(args, d, *dt, n, &o, unfilled)?;
        }
    }
    Ok(())
}

/// The phases a function that assembles an output is lowered to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Symbolic (row counts), allocation, numeric (fill).
    TwoPhase,
    /// Bound (each row's stores), staging area, staged (one pass over the products, with the
    /// bitmap workspace or, where rows are dense, the byte marks of [`Phase::StagedDense`], or
    /// where their columns cluster, the grouped byte marks of [`Phase::StagedGroups`]), gather
    /// (the staged rows copied into the output; see [`Phase::Staged`]).
    Staged,
}

impl Plan {
    /// The lowered phases, in run order.
    pub fn phases(self) -> &'static [Phase] {
        match self {
            Plan::TwoPhase => &[Phase::Symbolic, Phase::Numeric],
            Plan::Staged => &[
                Phase::Bound,
                Phase::Staged,
                Phase::StagedDense,
                Phase::StagedGroups,
                Phase::Gather,
            ],
        }
    }
}

/// The operand whose fibers give an assembled output its columns: the compressed axis an
/// iteration that stores into an assembled buffer walks last (the rows of `B` in
/// `C[i, j] += A[i, k] * B[k, j]`), as the names of its `indptr` and `indices` parameters.
fn column_operand(f: &PrimFunc) -> Option<(String, String)> {
    let asm = Assembled::of(f);
    let name = |v: VarId| f.vars[v].name.clone();
    let mut found = None;
    f.body.visit(&mut |s| {
        let Stmt::SparseIteration(it) = s else { return };
        let mut assembles = false;
        it.body.visit(&mut |x| {
            assembles |= matches!(x, Stmt::Store(st) if asm.buffers.contains_key(&st.buffer))
        });
        let (Some(IterAxis::Axis(a)) | Some(IterAxis::Attach { axis: a, .. })) = it.axes.last()
        else {
            return;
        };
        let Some(ax) = f.axes.get(*a) else { return };
        if let (true, false, true, Some(p), Some(x)) = (
            assembles,
            ax.assembled,
            ax.kind.is_compressed(),
            ax.indptr,
            ax.indices,
        ) {
            found.get_or_insert((name(p), name(x)));
        }
    });
    found
}

/// Columns per group of 64 columns touched, on average over the fibers of a compressed axis
/// (`indptr`, `indices`): about 1 where a fiber's columns spread over the axis (graphs), more
/// where they cluster (meshes in a good order). Read from at most 1,024 fibers spread over the
/// axis, so that it costs a few microseconds whatever the operand's size; unsorted fibers
/// count more groups (a lower figure, the bitmap workspace), which is safe.
fn columns_per_group(indptr: &Tensor, indices: &Tensor) -> Option<f64> {
    fn go<P: Copy + Into<i64>, X: Copy + Into<i64>>(ip: &[P], ix: &[X]) -> Option<f64> {
        let fibers = ip.len().checked_sub(1)?;
        let step = fibers.div_ceil(1024).max(1);
        let (mut entries, mut groups) = (0u64, 0u64);
        for r in (0..fibers).step_by(step) {
            let lo = usize::try_from(ip[r].into()).ok()?;
            let hi = usize::try_from(ip[r + 1].into()).ok()?;
            let mut prev = -1i64;
            for &c in ix.get(lo..hi)? {
                let g = c.into() >> 6;
                groups += u64::from(g != prev);
                prev = g;
            }
            entries += (hi - lo) as u64;
        }
        (groups > 0).then(|| entries as f64 / groups as f64)
    }
    match (&indptr.data, &indices.data) {
        (TensorData::I32(p), TensorData::I32(x)) => go(p, x),
        (TensorData::I64(p), TensorData::I64(x)) => go(p, x),
        (TensorData::I32(p), TensorData::I64(x)) => go(p, x),
        (TensorData::I64(p), TensorData::I32(x)) => go(p, x),
        _ => None,
    }
}

/// The grouped byte marks ([`Phase::StagedGroups`]) are taken where the column operand holds
/// at least this many columns per group of 64 it touches.
const GROUPED_COLUMNS: f64 = 1.5;

/// Whether `f`'s outputs can be assembled in one staged pass: each assembled axis carries one
/// value buffer (the staged lowering then decides whether the iteration suits it).
fn staged_outputs(f: &PrimFunc) -> bool {
    let outs = outputs(f);
    !outs.is_empty() && outs.iter().all(|o| o.data.len() == 1)
}

/// Runs a stage-I function on the stage II/III interpreter (checked searches); one that
/// assembles an output runs in two phases (staged where its iteration suits it).
pub fn run_interp(f: &PrimFunc, args: &mut HashMap<String, ArgValue>) -> Result<(), RunError> {
    run_interp_with(f, args, None)
}

/// [`run_interp`] with the staged workspace forced (`Phase::Staged`, `Phase::StagedDense` or
/// `Phase::StagedGroups`) instead of chosen from the bound phase. For tests of each.
#[doc(hidden)]
pub fn run_interp_with(
    f: &PrimFunc,
    args: &mut HashMap<String, ArgValue>,
    workspace: Option<Phase>,
) -> Result<(), RunError> {
    let interp = |e: sparsetir_eval::EvalError| RunError::Lower(format!("interpreter: {e}"));
    let lowered = |phase: Option<Phase>| -> Result<PrimFunc, RunError> {
        let opts = PipelineOptions {
            assembly: phase,
            ..PipelineOptions::for_interpreter()
        };
        let module = IRModule {
            funcs: vec![f.clone()],
        };
        let out = lower(&module, &opts).map_err(|e| RunError::Lower(e.to_string()))?;
        out.funcs
            .into_iter()
            .next()
            .ok_or_else(|| RunError::Lower(format!("function `{}` vanished", f.name)))
    };
    if !assembles(f) {
        validate_args(f, args)?;
        return sparsetir_eval::run_func(&lowered(None)?, args).map_err(interp);
    }
    let staged = if staged_outputs(f) {
        lowered(Some(Phase::Staged)).ok()
    } else {
        None
    };
    let mut work = args.clone();
    prepare(f, &mut work)?;
    validate_args(f, &work)?;
    match staged {
        Some(staged) => {
            let bound = lowered(Some(Phase::Bound))?;
            let dense = lowered(Some(Phase::StagedDense))?;
            let groups = lowered(Some(Phase::StagedGroups))?;
            let gather = lowered(Some(Phase::Gather))?;
            let opts = StagedOptions {
                threads: 1,
                first_cap: None,
                workspace,
                native: false,
            };
            run_staged(f, &mut work, opts, |phase, work| {
                let func = match phase {
                    Phase::Bound => &bound,
                    Phase::StagedDense => &dense,
                    Phase::StagedGroups => &groups,
                    Phase::Gather => &gather,
                    _ => &staged,
                };
                sparsetir_eval::run_func(func, work).map_err(interp)
            })?;
            take_stage(f, &mut work);
        }
        None => {
            let sym = lowered(Some(Phase::Symbolic))?;
            let num = lowered(Some(Phase::Numeric))?;
            sparsetir_eval::run_func(&sym, &mut work).map_err(interp)?;
            allocate(f, &mut work)?;
            sparsetir_eval::run_func(&num, &mut work).map_err(interp)?;
        }
    }
    *args = work;
    Ok(())
}

/// How [`run_staged`] runs: the threads (for the area's slack), and test overrides of the
/// first capacity and of the workspace choice.
#[derive(Clone, Copy, Debug)]
struct StagedOptions {
    threads: usize,
    first_cap: Option<i64>,
    workspace: Option<Phase>,
    /// The phases are compiled C, which writes through the arrays' addresses: the output is
    /// allocated unfilled for the gather phase to write (the interpreter needs it filled).
    native: bool,
}

/// The staged protocol on prepared arguments: the bound phase, the staging area sized from it
/// (kept from an earlier run when large enough), the staged phase with the workspace the bound
/// suggests (again with the capacity it asked for, in the rare case its blocks overran the
/// area), the output allocated from the offsets, and the gather phase copying the staged rows
/// into it. `threads` sizes the slack of the area (each thread's last block is partly empty).
/// Returns the staged phase (workspace) it ran.
fn run_staged(
    f: &PrimFunc,
    work: &mut HashMap<String, ArgValue>,
    opts: StagedOptions,
    mut call: impl FnMut(Phase, &mut HashMap<String, ArgValue>) -> Result<(), RunError>,
) -> Result<Phase, RunError> {
    let StagedOptions {
        threads,
        first_cap,
        workspace,
        native,
    } = opts;
    call(Phase::Bound, work)?;
    let outs = outputs(f);
    let mut caps = Vec::new();
    let mut dense = true;
    for o in &outs {
        let Some(ArgValue::Array(t)) = work.get(&o.indptr) else {
            return Err(RunError::MissingArg {
                name: o.indptr.clone(),
            });
        };
        // The bound phase leaves each row's bound in `indptr[row + 1]` (no running sum).
        let total = sum_from_second(t);
        // Rows that store into a sixteenth of the columns or more, on average: byte marks.
        let rows = (t.len() as i64 - 1).max(0);
        let cols = scalar(&o.cols, work, f)?.max(0);
        dense &= total.saturating_mul(16) >= rows.saturating_mul(cols) && total > 0;
        let g = grab(total, threads);
        let slack = g.saturating_mul(threads as i64 + 1);
        // The bound can exceed the output many times over (columns that many products hit):
        // no more than an eighth of the allocation limit at first (two arrays); a run that
        // needs more says so in `used` and runs again with it.
        let most =
            i64::try_from(sparsetir_formats::limits::max_alloc_bytes() / 64).unwrap_or(i64::MAX);
        let sized = total
            .saturating_add(total / 8)
            .saturating_add(slack)
            .min(most.max(slack));
        let cap = first_cap.unwrap_or(sized);
        caps.push((cap, g));
    }
    let clustered = || {
        let (ip, ix) = column_operand(f)?;
        match (work.get(&ip), work.get(&ix)) {
            (Some(ArgValue::Array(p)), Some(ArgValue::Array(x))) => columns_per_group(p, x),
            _ => None,
        }
    };
    let staged = match workspace {
        Some(p) if p.is_staged() => p,
        _ if dense => Phase::StagedDense,
        _ if clustered().is_some_and(|c| c >= GROUPED_COLUMNS) => Phase::StagedGroups,
        _ => Phase::Staged,
    };
    for attempt in 0.. {
        let mut over = false;
        for (o, &(cap, g)) in outs.iter().zip(&caps) {
            stage_area(o, work, cap, g)?;
        }
        call(staged, work)?;
        for (o, (cap, _)) in outs.iter().zip(caps.iter_mut()) {
            let used = match work.get(&stage_param(&o.axis, "used")) {
                Some(ArgValue::Array(t)) if !t.is_empty() => t.get_i64(0),
                _ => 0,
            };
            if used > *cap {
                over = true;
                *cap = used.saturating_add(used / 8);
            }
        }
        if !over {
            break;
        }
        if attempt >= 3 {
            return Err(RunError::Size {
                subject: "staging area".into(),
                message: "the staged assembly kept outgrowing its staging area".into(),
            });
        }
    }
    // The gather phase copies every staged row to its place in the output: each element of
    // the arrays is written once (rows lie back to back, `indptr` their running sum). In C it
    // writes through the addresses, so the arrays need not be cleared first.
    let mut unfilled = native.then(Vec::new);
    allocate_as(f, work, &mut unfilled)?;
    call(Phase::Gather, work)?;
    for (name, n) in unfilled.unwrap_or_default() {
        if let Some(ArgValue::Array(t)) = work.get_mut(&name) {
            // SAFETY: `allocate_as` made this array with room for `n` elements, and the gather
            // phase, which succeeded, wrote each of them (see above).
            unsafe { t.assume_filled(n) };
        }
    }
    Ok(staged)
}

/// The staged columns and values of output `o`: `<indices>__stage`, `<data>__stage`, with
/// their dtypes.
fn stage_arrays(o: &AsmOutput) -> Vec<(String, DType)> {
    let mut area = vec![(stage_param(&o.indices, "stage"), o.idtype)];
    area.extend(o.data.iter().map(|(d, dt)| (stage_param(d, "stage"), *dt)));
    area
}

/// The names of the staging area's arguments of `f`'s outputs (none are outputs of the run).
fn stage_names(f: &PrimFunc) -> Vec<String> {
    let mut names = Vec::new();
    for o in outputs(f) {
        names.extend(stage_arrays(&o).into_iter().map(|(n, _)| n));
        names.push(stage_param(&o.indptr, "start"));
        for what in ["used", "cap", "grab"] {
            names.push(stage_param(&o.axis, what));
        }
    }
    names
}

/// Moves the staging area's arguments out of `work` (into the kernel's keeping, or away).
fn take_stage(f: &PrimFunc, work: &mut HashMap<String, ArgValue>) -> HashMap<String, ArgValue> {
    stage_names(f)
        .into_iter()
        .filter_map(|n| work.remove(&n).map(|v| (n, v)))
        .collect()
}

/// The staging area of output `o` with room for `cap` elements: `<indices>__stage` and
/// `<data>__stage` (grown, never shrunk: an earlier run's arrays are kept), `<indptr>__start`
/// (one per row), `<axis>__used` = 0, `<axis>__cap` and `<axis>__grab`.
fn stage_area(
    o: &AsmOutput,
    work: &mut HashMap<String, ArgValue>,
    cap: i64,
    grab: i64,
) -> Result<(), RunError> {
    let want = usize::try_from(cap).map_err(|_| RunError::Size {
        subject: o.axis.clone(),
        message: format!("a staging area of {cap} elements"),
    })?;
    sparsetir_formats::limits::check(want, 8).map_err(|message| RunError::Size {
        subject: o.axis.clone(),
        message,
    })?;
    let mut have = usize::MAX;
    for (name, dt) in &stage_arrays(o) {
        // A new array rather than a resized one: a fresh zeroed allocation is not touched
        // until the kernel writes it.
        let keep = matches!(work.get(name), Some(ArgValue::Array(t)) if t.dtype() == *dt && t.len() >= want);
        if !keep {
            let t = Tensor::zeros(*dt, vec![want]).map_err(size_err(o))?;
            work.insert(name.clone(), ArgValue::Array(t));
        }
        if let Some(ArgValue::Array(t)) = work.get(name) {
            have = have.min(t.len());
        }
    }
    let rows = match work.get(&o.indptr) {
        Some(ArgValue::Array(t)) => t.len().saturating_sub(1),
        _ => 0,
    };
    let start = stage_param(&o.indptr, "start");
    let keep = matches!(work.get(&start), Some(ArgValue::Array(t)) if t.dtype() == DType::I64 && t.len() == rows);
    if !keep {
        let t = Tensor::zeros(DType::I64, vec![rows]).map_err(size_err(o))?;
        work.insert(start, ArgValue::Array(t));
    }
    let used = Tensor::zeros(DType::I64, vec![1]).map_err(size_err(o))?;
    work.insert(stage_param(&o.axis, "used"), ArgValue::Array(used));
    work.insert(stage_param(&o.axis, "cap"), ArgValue::Int(have as i64));
    work.insert(stage_param(&o.axis, "grab"), ArgValue::Int(grab));
    Ok(())
}

/// The least block of the staging area a thread takes at a time: none on one thread (a row
/// takes its bound: the interpreter allocates a block's workspace afresh for every row),
/// else about a sixteenth of each thread's share, between 2^10 and 2^16 elements.
fn grab(total: i64, threads: usize) -> i64 {
    if threads <= 1 {
        return 0;
    }
    (total / (16 * threads as i64)).clamp(1 << 10, 1 << 16)
}

/// The compiled phases of an assembling function.
#[derive(Debug)]
pub struct AssembledKernel {
    stage1: PrimFunc,
    plan: Plan,
    /// One per phase of the plan, in run order.
    kernels: Vec<Kernel>,
    threads: Option<usize>,
    /// Staged plan: the staging area's first capacity instead of the one sized from the
    /// bound phase (tests of the run that outgrows it).
    first_cap: Option<i64>,
    /// Staged plan: the workspace to use instead of the one the bound phase suggests (tests).
    workspace: Option<Phase>,
    /// Staged plan: the staging area of the last run, kept for the next (it is scratch, not
    /// an output: the caller's arguments never hold it).
    scratch: std::sync::Mutex<HashMap<String, ArgValue>>,
    /// Staged plan: the workspace the last run used.
    last_workspace: std::sync::Mutex<Option<Phase>>,
}

impl AssembledKernel {
    /// Specializes, schedules (the same schedule for both phases: their blocks have the same
    /// names), lowers, emits and compiles the phases of `stage1`: bound and staged where the
    /// staged lowering accepts the iteration (a Gustavson workspace over a default of 0), else
    /// symbolic and numeric.
    pub fn build(
        stage1: &PrimFunc,
        schedule: Option<&str>,
        specialization: &[(String, i64)],
        opts: &CompileOptions,
    ) -> Result<AssembledKernel, BuildError> {
        let lower_one =
            |phase: Phase| schedule_and_lower(&phase.mark(stage1), schedule, specialization);
        let compile = |lowered: crate::build::Lowered| -> Result<(PrimFunc, Kernel), BuildError> {
            let c = emit_c_cpu(&lowered.stage3).map_err(|e| BuildError::Codegen(e.to_string()))?;
            let params = kernel_params(&c);
            let k = Kernel::from_source(&lowered.stage1, &c.source, &c.entry, params, opts)?;
            Ok((lowered.stage1, k))
        };
        // The staged plan where its lowering accepts the iteration; a schedule that fails on
        // it is the user's to see (it names the same blocks in every phase), not a reason to
        // fall back to the two phases quietly.
        let staged = if staged_outputs(stage1) {
            match lower_one(Phase::Staged) {
                Ok(l) => Some(l),
                Err(e @ BuildError::Schedule { .. }) => return Err(e),
                Err(_) => None,
            }
        } else {
            None
        };
        let (plan, lowered) = match staged {
            Some(staged) => (
                Plan::Staged,
                vec![
                    lower_one(Phase::Bound)?,
                    staged,
                    lower_one(Phase::StagedDense)?,
                    lower_one(Phase::StagedGroups)?,
                    lower_one(Phase::Gather)?,
                ],
            ),
            None => (
                Plan::TwoPhase,
                vec![lower_one(Phase::Symbolic)?, lower_one(Phase::Numeric)?],
            ),
        };
        let mut spec = None;
        let mut kernels = Vec::new();
        for l in lowered {
            let (s1, k) = compile(l)?;
            spec.get_or_insert(s1);
            kernels.push(k);
        }
        let stage1 = spec.unwrap_or_else(|| stage1.clone());
        Ok(AssembledKernel {
            stage1,
            plan,
            kernels,
            threads: opts.threads,
            first_cap: None,
            workspace: None,
            scratch: std::sync::Mutex::new(HashMap::new()),
            last_workspace: std::sync::Mutex::new(None),
        })
    }

    /// Staged plan: always uses `workspace` (`Phase::Staged`, the bitmap, `Phase::StagedDense`,
    /// the byte marks, or `Phase::StagedGroups`, the grouped byte marks) instead of choosing
    /// from the bound phase and the operands. For tests of each.
    #[doc(hidden)]
    pub fn with_workspace(mut self, workspace: Phase) -> AssembledKernel {
        self.workspace = Some(workspace);
        self
    }

    /// Staged plan: starts every run with a staging area of `cap` elements rather than the
    /// capacity the bound phase asks for (a run whose blocks outgrow it runs again with what it
    /// used). For tests of that path.
    #[doc(hidden)]
    pub fn with_first_capacity(mut self, cap: i64) -> AssembledKernel {
        self.first_cap = Some(cap);
        self
    }

    fn kernel(&self, phase: Phase) -> Result<&Kernel, RunError> {
        let k = self.plan.phases().iter().position(|p| *p == phase);
        k.and_then(|k| self.kernels.get(k))
            .ok_or_else(|| RunError::Lower(format!("no {} phase was compiled", phase.name())))
    }

    /// Which phases were compiled.
    pub fn plan(&self) -> Plan {
        self.plan
    }

    /// Staged plan: the staged phase — the workspace: [`Phase::Staged`] (bitmap),
    /// [`Phase::StagedDense`] or [`Phase::StagedGroups`] (byte marks) — the last successful run
    /// used; `None` before a run and for the two-phase plan.
    pub fn last_workspace(&self) -> Option<Phase> {
        *self
            .last_workspace
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// The C source of each phase, in run order (see [`Plan::phases`]).
    pub fn sources(&self) -> Vec<(Phase, &str)> {
        self.plan
            .phases()
            .iter()
            .copied()
            .zip(self.kernels.iter().map(|k| k.source()))
            .collect()
    }

    /// Validates the inputs, runs the phases; on success `args` holds the assembled output.
    pub fn run(&self, args: &mut HashMap<String, ArgValue>) -> Result<(), RunError> {
        let mut work = args.clone();
        self.run_in_place(&mut work)?;
        *args = work;
        Ok(())
    }

    /// [`AssembledKernel::run`] without the copy of the arguments that keeps them unchanged
    /// when it fails: after an error, `args` may hold prepared or partly assembled arrays.
    /// For callers that drop the arguments on an error (Python's calls).
    pub fn run_in_place(&self, args: &mut HashMap<String, ArgValue>) -> Result<(), RunError> {
        prepare(&self.stage1, args)?;
        validate_args(&self.stage1, args)?;
        self.launch(args)
    }

    fn launch(&self, work: &mut HashMap<String, ArgValue>) -> Result<(), RunError> {
        if let (Some(n), Some(k)) = (self.threads, self.kernels.first()) {
            k.compiled().set_num_threads(n);
        }
        match self.plan {
            Plan::TwoPhase => {
                // SAFETY: `work` passed `validate_args` against the stage-I function (inputs,
                // and the placeholder output arrays sized for the symbolic phase, which writes
                // only `indptr`).
                unsafe {
                    self.kernel(Phase::Symbolic)?
                        .compiled()
                        .call_unvalidated(work)?
                };
                allocate(&self.stage1, work)?;
                // SAFETY: the inputs are the validated ones; the output arrays were just
                // allocated from offsets checked to be a running sum ending at their length.
                unsafe {
                    self.kernel(Phase::Numeric)?
                        .compiled()
                        .call_unvalidated(work)
                }
            }
            Plan::Staged => {
                let threads = self
                    .threads
                    .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
                let opts = StagedOptions {
                    threads,
                    first_cap: self.first_cap,
                    workspace: self.workspace,
                    native: true,
                };
                // The last run's area (a poisoned lock only means a run failed midway: the
                // area is then rebuilt as needed).
                let mut scratch = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
                work.extend(scratch.drain());
                let r = run_staged(&self.stage1, work, opts, |phase, work| {
                    let k = self.kernel(phase)?;
                    // SAFETY: the inputs passed `validate_args`. The bound phase writes only
                    // `indptr` (rows + 1, prepared). The staged phase writes `indptr`, the
                    // start of each row (one per row, `stage_area`) and the staging area only
                    // at positions below `<axis>__cap`, which `stage_area` set to the arrays'
                    // length. The gather phase writes the output arrays that `allocate` sized
                    // from the offsets, reading staged rows that lie inside the area.
                    unsafe { k.compiled().call_unvalidated(work) }
                });
                *scratch = take_stage(&self.stage1, work);
                let ws = r?;
                *self
                    .last_workspace
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = Some(ws);
                Ok(())
            }
        }
    }

    /// Times whole runs (every phase and the allocations between them) on validated inputs.
    /// Each run starts without the last run's output arrays, as a library call that returns a
    /// new matrix does: their memory is freed and fresh memory allocated (and faulted in)
    /// within the timed run. Reusing them would leave the output's allocation out of the time.
    pub fn time(
        &self,
        args: &mut HashMap<String, ArgValue>,
        opts: TimingOptions,
    ) -> Result<Timing, RunError> {
        let mut work = args.clone();
        prepare(&self.stage1, &mut work)?;
        validate_args(&self.stage1, &work)?;
        let produced: Vec<String> = outputs(&self.stage1)
            .into_iter()
            .flat_map(|o| std::iter::once(o.indices).chain(o.data.into_iter().map(|(d, _)| d)))
            .collect();
        let t = time_with(
            opts,
            || Ok(()),
            || {
                for name in &produced {
                    work.remove(name);
                }
                prepare(&self.stage1, &mut work)?;
                self.launch(&mut work)
            },
        )?;
        *args = work;
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t32(v: &[i32]) -> Tensor {
        Tensor {
            shape: vec![v.len()],
            data: TensorData::I32(v.to_vec()),
        }
    }

    #[test]
    fn offsets_must_run_up_from_zero() {
        assert_eq!(ascending(&t32(&[0, 2, 2, 5])), (false, 5));
        assert_eq!(ascending(&t32(&[0])), (false, 0));
        assert!(ascending(&t32(&[])).0, "empty");
        assert!(ascending(&t32(&[1, 2])).0, "does not start at 0");
        assert!(ascending(&t32(&[0, 3, 2])).0, "decreases");
        let wide = Tensor {
            shape: vec![3],
            data: TensorData::I64(vec![0, 1 << 40, (1 << 40) + 1]),
        };
        assert_eq!(ascending(&wide), (false, (1 << 40) + 1));
        let narrow = Tensor {
            shape: vec![3],
            data: TensorData::I16(vec![0, 4, 3]),
        };
        assert!(ascending(&narrow).0, "other integer types through get_i64");
    }

    #[test]
    fn the_bound_total_skips_indptr_0_and_saturates() {
        assert_eq!(sum_from_second(&t32(&[7, 1, 2, -3, 4])), 7);
        assert_eq!(sum_from_second(&t32(&[])), 0);
        let huge = Tensor {
            shape: vec![3],
            data: TensorData::I64(vec![0, i64::MAX, 5]),
        };
        assert_eq!(sum_from_second(&huge), i64::MAX);
    }

    #[test]
    fn columns_per_group_counts_groups_of_64_within_each_fiber() {
        // Fiber 0: columns 0..4 (one group); fiber 1: 0, 64, 128 (three); fiber 2 empty;
        // fiber 3: 63, 64 (two groups).
        let ip = t32(&[0, 4, 7, 7, 9]);
        let ix = t32(&[0, 1, 2, 3, 0, 64, 128, 63, 64]);
        assert_eq!(columns_per_group(&ip, &ix), Some(9.0 / 6.0));
        let ix64 = Tensor {
            shape: vec![9],
            data: TensorData::I64(vec![0, 1, 2, 3, 0, 64, 128, 63, 64]),
        };
        assert_eq!(columns_per_group(&ip, &ix64), Some(1.5));
        // Unsorted: 0, 64, 1 counts three groups.
        assert_eq!(
            columns_per_group(&t32(&[0, 3]), &t32(&[0, 64, 1])),
            Some(1.0)
        );
        // Nothing stored, no fibers, or positions past the indices: no figure.
        assert_eq!(columns_per_group(&t32(&[0, 0]), &t32(&[])), None);
        assert_eq!(columns_per_group(&t32(&[]), &t32(&[])), None);
        assert_eq!(columns_per_group(&t32(&[0, 5]), &t32(&[1, 2])), None);
        // Many fibers: sampled (1,024 of 10,000), the figure unchanged for a uniform operand.
        let n = 10_000;
        let ip: Vec<i32> = (0..=n).map(|r| r * 4).collect();
        let ix: Vec<i32> = (0..n).flat_map(|r| [r, r + 1, r + 2, r + 3]).collect();
        let c = columns_per_group(&t32(&ip), &t32(&ix)).expect("a figure");
        assert!((2.0..=4.0).contains(&c), "{c}");
    }

    #[test]
    fn the_column_operand_is_the_axis_the_assembly_walks_last() {
        let f = |name: &str| sparsetir_ops::load(name).expect("kernel");
        assert_eq!(
            column_operand(&f("spgemm")),
            Some(("b_indptr".to_string(), "b_indices".to_string()))
        );
        // Merge assemblies walk a co-iteration last: no single operand.
        assert_eq!(column_operand(&f("spadd")), None);
        // Nothing assembled.
        assert_eq!(column_operand(&f("csrmm")), None);
    }
}
