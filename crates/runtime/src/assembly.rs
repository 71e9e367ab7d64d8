//! Running functions whose output structure is assembled (issue 15): the symbolic phase fills
//! the assembled axis's `indptr`, the runtime checks it and allocates `indices` and the values
//! (`nnz = indptr[rows]`), then the numeric phase fills them. The argument contract is the
//! evaluator's: the caller may leave the assembled axis's `indptr`, `indices`, `nnz` and its
//! buffer's values out; after the run they hold the result.

use std::collections::HashMap;

use sparsetir_eval::ArgValue;
use sparsetir_formats::Tensor;
use sparsetir_ir::{AxisId, BufferId, DType, Expr, IRModule, PrimFunc, VarId};
pub use sparsetir_transform::assembles;
use sparsetir_transform::{lower, Phase, PipelineOptions};

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
) -> Result<(), RunError> {
    if let Some(ArgValue::Array(t)) = args.get_mut(name) {
        if t.dtype() == dtype {
            t.resize_1d(n);
            return Ok(());
        }
    }
    let t = Tensor::zeros(dtype, vec![n]).map_err(size_err(o))?;
    args.insert(name.to_string(), ArgValue::Array(t));
    Ok(())
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
                sized(args, name, dt, 0, &o)?;
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
/// type) and allocates `indices` and the values of `nnz = indptr[rows]` elements.
pub fn allocate(f: &PrimFunc, args: &mut HashMap<String, ArgValue>) -> Result<(), RunError> {
    for o in outputs(f) {
        let Some(ArgValue::Array(t)) = args.get(&o.indptr) else {
            return Err(RunError::MissingArg {
                name: o.indptr.clone(),
            });
        };
        let offsets = (0..t.len()).map(|i| t.get_i64(i));
        let mut bad = t.is_empty() || t.get_i64(0) != 0;
        let mut prev = 0;
        for x in offsets {
            bad |= x < prev;
            prev = x;
        }
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
        sized(args, &o.indices, o.idtype, n, &o)?;
        args.insert(o.nnz.clone(), ArgValue::Int(nnz));
        for (d, dt) in &o.data {
            sized(args, d, *dt, n, &o)?;
        }
    }
    Ok(())
}

/// Runs a stage-I function on the stage II/III interpreter (checked searches); one that
/// assembles an output runs in two phases.
pub fn run_interp(f: &PrimFunc, args: &mut HashMap<String, ArgValue>) -> Result<(), RunError> {
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
    let sym = lowered(Some(Phase::Symbolic))?;
    let num = lowered(Some(Phase::Numeric))?;
    let mut work = args.clone();
    prepare(f, &mut work)?;
    validate_args(f, &work)?;
    sparsetir_eval::run_func(&sym, &mut work).map_err(interp)?;
    allocate(f, &mut work)?;
    sparsetir_eval::run_func(&num, &mut work).map_err(interp)?;
    *args = work;
    Ok(())
}

/// The two compiled phases of an assembling function.
#[derive(Debug)]
pub struct AssembledKernel {
    stage1: PrimFunc,
    symbolic: Kernel,
    numeric: Kernel,
    threads: Option<usize>,
}

impl AssembledKernel {
    /// Specializes, schedules (the same schedule for both phases: their blocks have the same
    /// names), lowers, emits and compiles both phases of `stage1`.
    pub fn build(
        stage1: &PrimFunc,
        schedule: Option<&str>,
        specialization: &[(String, i64)],
        opts: &CompileOptions,
    ) -> Result<AssembledKernel, BuildError> {
        let one = |phase: Phase| -> Result<(PrimFunc, Kernel), BuildError> {
            let f = phase.mark(stage1);
            let lowered = schedule_and_lower(&f, schedule, specialization)?;
            let c = emit_c_cpu(&lowered.stage3).map_err(|e| BuildError::Codegen(e.to_string()))?;
            let params = kernel_params(&c);
            let k = Kernel::from_source(&lowered.stage1, &c.source, &c.entry, params, opts)?;
            Ok((lowered.stage1, k))
        };
        let (spec, symbolic) = one(Phase::Symbolic)?;
        let (_, numeric) = one(Phase::Numeric)?;
        Ok(AssembledKernel {
            stage1: spec,
            symbolic,
            numeric,
            threads: opts.threads,
        })
    }

    /// The C sources of the symbolic and the numeric phase.
    pub fn sources(&self) -> (&str, &str) {
        (self.symbolic.source(), self.numeric.source())
    }

    /// Validates the inputs, runs the symbolic phase, allocates the output, runs the numeric
    /// phase; on success `args` holds the assembled output.
    pub fn run(&self, args: &mut HashMap<String, ArgValue>) -> Result<(), RunError> {
        let mut work = args.clone();
        prepare(&self.stage1, &mut work)?;
        validate_args(&self.stage1, &work)?;
        self.launch(&mut work)?;
        *args = work;
        Ok(())
    }

    fn launch(&self, work: &mut HashMap<String, ArgValue>) -> Result<(), RunError> {
        if let Some(n) = self.threads {
            self.symbolic.compiled().set_num_threads(n);
        }
        // SAFETY: `work` passed `validate_args` against the stage-I function (inputs, and the
        // placeholder output arrays sized for the symbolic phase, which writes only `indptr`).
        unsafe { self.symbolic.compiled().call_unvalidated(work)? };
        allocate(&self.stage1, work)?;
        // SAFETY: the inputs are the validated ones; the output arrays were just allocated from
        // offsets checked to be a running sum ending at their length.
        unsafe { self.numeric.compiled().call_unvalidated(work) }
    }

    /// Times whole runs (both phases and the allocation between them) on validated inputs.
    pub fn time(
        &self,
        args: &mut HashMap<String, ArgValue>,
        opts: TimingOptions,
    ) -> Result<Timing, RunError> {
        let mut work = args.clone();
        prepare(&self.stage1, &mut work)?;
        validate_args(&self.stage1, &work)?;
        let t = time_with(
            opts,
            || Ok(()),
            || {
                prepare(&self.stage1, &mut work)?;
                self.launch(&mut work)
            },
        )?;
        *args = work;
        Ok(t)
    }
}
