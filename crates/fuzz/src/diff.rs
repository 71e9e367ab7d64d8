//! Targets `diff` and `diff-native`: differential execution. A catalog kernel's stage-I function,
//! with a few of its expressions mutated (an index shifted, scaled, reduced modulo, clamped,
//! replaced by another iterator or read through a float; a value scaled, offset, negated,
//! squared, clamped, selected or truncated), runs on generated *valid* data through the
//! reference evaluator and through the stage II and stage III interpreters of its checked
//! lowering (`diff`), and also through the C backend and the emulated CUDA, each without a
//! schedule and with the kernel's catalog schedule where that still applies (`diff-native`).
//! Each must give the evaluator's results (SPEC §2.3: a coordinate outside its axis reads the
//! default value; a store there is skipped).
//!
//! Loads of the buffers the function writes keep their indices, and so do stores for
//! `diff-native`, so that a parallel schedule stays race-free; everything else may change. Inputs are saved as the data
//! in [`RunInput`]'s text form, a line `script`, then the mutated script.

use std::collections::HashMap;
use std::path::Path;

use sparsetir_eval::{eval_func, run_func, ArgValue};
use sparsetir_formats::Tensor;
use sparsetir_ir::printer::print_module;
use sparsetir_ir::{verify_func, BinOp, DType, Expr, IRModule, PrimFunc, Stage, Stmt, UnOp};
use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};
use sparsetir_runtime::{assembly, validate_args, KernelCache, RunError};
use sparsetir_transform::{lower, PipelineError, PipelineOptions};

use crate::data::RunInput;
use crate::mutate::Mutator;

/// One differential input: the data and the (mutated) script it runs.
#[derive(Clone, Debug, PartialEq)]
pub struct DiffInput {
    pub data: RunInput,
    pub script: String,
}

const SCRIPT_LINE: &str = "script\n";

/// The kernels mutated: the `run` target's, and the co-iteration and sparse-output ones.
fn diff_kernels() -> &'static [&'static str] {
    static KERNELS: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
    KERNELS.get_or_init(|| {
        crate::data::RUN_KERNELS
            .iter()
            .copied()
            .chain(sparsetir_ops::sparse_output().iter().map(|k| k.name))
            .collect()
    })
}

impl DiffInput {
    /// A catalog kernel with one to three mutated expressions (that still verify), and valid
    /// data for it.
    /// `stores` says which stores' indices may change too (sequential backends only:
    /// iterations of a parallel loop would then write each other's elements).
    pub fn generate(m: &mut Mutator, stores: Stores) -> Option<DiffInput> {
        let data = RunInput::generate(m, diff_kernels())?;
        let base = sparsetir_ops::load(&data.kernel).ok()?;
        let assembled = sparsetir_ops::sparse_output()
            .iter()
            .any(|k| k.name == data.kernel);
        let stores = match stores {
            Stores::Given if assembled => Stores::Plain,
            s => s,
        };
        for _ in 0..8 {
            let mut f = base.clone();
            let mut changed = false;
            for _ in 0..1 + m.below(3) {
                // (No draw where stores are kept: a seed gives the inputs it always gave.)
                let store = if stores != Stores::Kept && m.chance(0.25) {
                    stores
                } else {
                    Stores::Kept
                };
                changed |= mutate_func(m, &mut f, store);
            }
            if changed && verify_func(&f).is_ok() {
                let mut data = data;
                if m.chance(0.25) {
                    f = stored_in_16_bits(m, f, &mut data);
                }
                let script = print_module(&IRModule { funcs: vec![f] });
                return Some(DiffInput { data, script });
            }
        }
        None
    }

    /// The saved form (see the module documentation).
    pub fn to_text(&self) -> String {
        format!("{}{SCRIPT_LINE}{}", self.data.to_text(), self.script)
    }

    /// Parses [`DiffInput::to_text`]'s form.
    pub fn from_text(text: &str) -> Result<DiffInput, String> {
        let at = text
            .find(&format!("\n{SCRIPT_LINE}"))
            .ok_or("missing `script` line")?;
        Ok(DiffInput {
            data: RunInput::from_text(&text[..at + 1])?,
            script: text[at + 1 + SCRIPT_LINE.len()..].to_string(),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Mutation

/// Which stores a mutation may move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stores {
    /// None: every store keeps its indices.
    Kept,
    /// Any store.
    Any,
    /// Stores into a buffer over dense-fixed axes only, at indices that read no memory: where
    /// the lowered element is a function of the iterators alone, so that the schedule's
    /// dependence checks can see two iterations meet.
    Plain,
    /// Any store of a kernel whose sparse buffers all have their structure given (not a
    /// sparse output): the schedule's dependence checks prove a lowered position inside its
    /// fiber's range, and a position a search found stands for the coordinate it compared,
    /// so two iterations that meet there show (a sparse output's row is filled to a count the
    /// lowering keeps, trusted: its kernels take [`Stores::Plain`]).
    Given,
}

/// The expressions of `s` a mutation may change: stored values, branch conditions and `let`
/// values, and a store's indices where `stores` takes the store.
fn mutable_exprs<'a>(
    s: &'a mut Stmt,
    stores: &dyn Fn(&sparsetir_ir::Store) -> bool,
    out: &mut Vec<&'a mut Expr>,
) {
    match s {
        Stmt::Seq(v) => v.iter_mut().for_each(|c| mutable_exprs(c, stores, out)),
        Stmt::SparseIteration(it) => {
            let it = &mut **it;
            if let Some(i) = &mut it.init {
                mutable_exprs(i, stores, out);
            }
            mutable_exprs(&mut it.body, stores, out);
        }
        Stmt::If(i) => {
            let i = &mut **i;
            out.push(&mut i.cond);
            mutable_exprs(&mut i.then_case, stores, out);
            if let Some(e) = &mut i.else_case {
                mutable_exprs(e, stores, out);
            }
        }
        Stmt::Let(l) => {
            let l = &mut **l;
            out.push(&mut l.value);
            mutable_exprs(&mut l.body, stores, out);
        }
        Stmt::Store(st) => {
            if stores(st) {
                out.extend(st.indices.iter_mut());
            }
            out.push(&mut st.value)
        }
        _ => {}
    }
}

/// Whether `e` may be replaced: a float or signed-integer expression.
fn eligible(e: &Expr, f: &PrimFunc) -> bool {
    let d = e.dtype(f);
    d.is_float() || d.is_int()
}

/// Counts the eligible nodes of `e` in pre-order, not descending into the indices of loads of
/// `written` buffers.
fn count_sites(e: &Expr, f: &PrimFunc, written: &[sparsetir_ir::BufferId]) -> usize {
    let own = usize::from(eligible(e, f));
    if let Expr::Load { buffer, .. } = e {
        if written.contains(buffer) {
            return own;
        }
    }
    let mut n = own;
    e.for_each_child(|c| n += count_sites(c, f, written));
    n
}

/// What a mutation may draw on besides the expression itself.
struct Ctx<'f> {
    f: &'f PrimFunc,
    written: Vec<sparsetir_ir::BufferId>,
    /// Variables of integer dtype read somewhere in the body.
    int_vars: Vec<(sparsetir_ir::VarId, DType)>,
}

/// Replaces the `k`-th eligible node of `e` (in [`count_sites`]' order); true once done.
fn rewrite_site(e: &mut Expr, ctx: &Ctx, k: &mut usize, m: &mut Mutator) -> bool {
    if eligible(e, ctx.f) {
        if *k == 0 {
            let old = std::mem::replace(e, Expr::Bool(false));
            *e = mutated(old, ctx, m);
            return true;
        }
        *k -= 1;
    }
    if let Expr::Load { buffer, .. } = e {
        if ctx.written.contains(buffer) {
            return false;
        }
    }
    let mut done = false;
    e.for_each_child_mut(|c| {
        if !done {
            done = rewrite_site(c, ctx, k, m);
        }
    });
    done
}

fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
    Expr::binary(op, a, b)
}

/// A changed `e` of the same dtype.
fn mutated(e: Expr, ctx: &Ctx, m: &mut Mutator) -> Expr {
    let d = e.dtype(ctx.f);
    if d.is_float() {
        let c = |v: f64| Expr::Float(v, d);
        let k = *m.pick(&[0.5, 2.0, -1.0, 0.25, 3.0]);
        match m.below(9) {
            0 => bin(BinOp::Mul, e, c(k)),
            1 => bin(BinOp::Add, e, c(k)),
            2 => Expr::Unary(UnOp::Neg, Box::new(e)),
            3 => bin(BinOp::Max, e, c(k)),
            4 => bin(BinOp::Min, e, c(k)),
            5 => {
                let cond = bin(BinOp::Lt, e.clone(), c(k));
                Expr::Select(
                    Box::new(cond),
                    Box::new(e.clone()),
                    Box::new(bin(BinOp::Mul, e, c(k))),
                )
            }
            6 => bin(BinOp::Mul, e.clone(), e),
            7 => {
                // A mask as a factor: a select whose values read nothing (vector loops take
                // it lane-wise), on a comparison that NaNs fail.
                let op = *m.pick(&[BinOp::Lt, BinOp::Ge, BinOp::Eq, BinOp::Ne]);
                let cond = bin(op, e.clone(), c(k));
                let mask = Expr::Select(Box::new(cond), Box::new(c(1.0)), Box::new(c(-0.5)));
                bin(BinOp::Mul, e, mask)
            }
            _ => {
                // Truncation toward zero of a bounded value (the cast of a float outside the
                // integer's range is not defined the same everywhere).
                let bounded = bin(
                    BinOp::Min,
                    bin(BinOp::Max, bin(BinOp::Mul, e, c(4.0)), c(-1e6)),
                    c(1e6),
                );
                Expr::Cast(d, Box::new(Expr::Cast(DType::I32, Box::new(bounded))))
            }
        }
    } else {
        let c = |v: i64| Expr::Int(v, d);
        let k = *m.pick(&[1i64, 2, 3, -1]);
        match m.below(9) {
            0 => bin(BinOp::Add, e, c(k)),
            1 => bin(BinOp::Sub, e, c(k)),
            2 => bin(BinOp::Mul, e, c(2)),
            3 => bin(BinOp::FloorDiv, e, c(2)),
            4 => bin(BinOp::FloorMod, e, c(k.abs() + 1)),
            5 => bin(*m.pick(&[BinOp::Max, BinOp::Min]), e, c(k)),
            6 => {
                let same: Vec<_> = ctx.int_vars.iter().filter(|(_, vd)| *vd == d).collect();
                if same.is_empty() {
                    bin(BinOp::Add, e, c(k))
                } else {
                    Expr::Var(m.pick(&same).0)
                }
            }
            7 => {
                let cond = bin(BinOp::Lt, e.clone(), c(k));
                Expr::Select(
                    Box::new(cond),
                    Box::new(bin(BinOp::Add, e.clone(), c(1))),
                    Box::new(e),
                )
            }
            _ => {
                // Through a float and back: `int(float(e) * 0.5)` truncates toward zero.
                let half = bin(
                    BinOp::Mul,
                    Expr::Cast(DType::F32, Box::new(e)),
                    Expr::Float(0.5, DType::F32),
                );
                Expr::Cast(d, Box::new(half))
            }
        }
    }
}

/// Mutates one eligible expression of `f`'s body; false when there is none.
fn mutate_func(m: &mut Mutator, f: &mut PrimFunc, stores: Stores) -> bool {
    let written: Vec<_> = f.body.written_buffers().into_iter().collect();
    let mut body = std::mem::replace(&mut f.body, Stmt::empty());
    let movable = |st: &sparsetir_ir::Store| match stores {
        Stores::Kept => false,
        Stores::Any | Stores::Given => true,
        Stores::Plain => {
            let dense = match &f.buffers[st.buffer].shape {
                sparsetir_ir::BufferShape::Sparse(axes) => axes
                    .iter()
                    .all(|a| f.axes[*a].kind == sparsetir_ir::AxisKind::DenseFixed),
                sparsetir_ir::BufferShape::Dense(_) => true,
            };
            let mut loads = false;
            for e in &st.indices {
                e.visit(&mut |x| loads |= matches!(x, Expr::Load { .. }));
            }
            dense && !loads
        }
    };
    let done = {
        let mut exprs = Vec::new();
        mutable_exprs(&mut body, &movable, &mut exprs);
        let mut int_vars = Vec::new();
        for e in &exprs {
            e.visit(&mut |x| {
                if let Expr::Var(v) = x {
                    let d = f.vars[*v].dtype;
                    if d.is_int() && !int_vars.iter().any(|(w, _)| w == v) {
                        int_vars.push((*v, d));
                    }
                }
            });
        }
        let ctx = Ctx {
            f,
            written,
            int_vars,
        };
        let total: usize = exprs.iter().map(|e| count_sites(e, f, &ctx.written)).sum();
        if total == 0 {
            false
        } else {
            let mut k = m.below(total);
            exprs.iter_mut().any(|e| rewrite_site(e, &ctx, &mut k, m))
        }
    };
    f.body = body;
    done
}

/// `f` with some of its `float32` inputs stored as float16 or bfloat16 (`store_as`: every load
/// of them read as `T.Cast("float32", ...)`, the mixed-precision form of `bench --dtype`), and
/// their arrays in `data` rounded to that type; `f` itself where none was taken.
fn stored_in_16_bits(m: &mut Mutator, f: PrimFunc, data: &mut RunInput) -> PrimFunc {
    let dt = *m.pick(&[DType::F16, DType::BF16]);
    let written = f.body.written_buffers();
    let mut names = Vec::new();
    let mut params = Vec::new();
    for (id, b) in f.buffers.iter() {
        let sparsetir_ir::BufferDecl::Match { data: param } = b.decl else {
            continue;
        };
        if b.dtype == DType::F32 && !written.contains(&id) && m.chance(0.6) {
            names.push(b.name.clone());
            params.push(f.vars[param].name.clone());
        }
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let Ok(g) = sparsetir_transform::store_as(&f, &refs, dt) else {
        return f;
    };
    if names.is_empty() || verify_func(&g).is_err() {
        return f;
    }
    for (name, v) in &mut data.args {
        let ArgValue::Array(t) = v else { continue };
        if !params.contains(name) || t.dtype() != DType::F32 {
            continue;
        }
        let Ok(mut out) = Tensor::zeros(dt, t.shape.clone()) else {
            return f;
        };
        for k in 0..t.len() {
            out.set_f64(k, t.get_f64(k));
        }
        *t = out;
    }
    g
}

// ---------------------------------------------------------------------------------------------
// Execution

/// The checked lowering every backend runs, to `stage`.
fn options(stage: Stage) -> PipelineOptions {
    PipelineOptions {
        target_stage: stage,
        ..PipelineOptions::for_interpreter()
    }
}

/// An input ready to compare: its stage-I function, the data, and what the evaluator made of
/// it.
pub(crate) struct Prepared {
    pub f: PrimFunc,
    pub args: HashMap<String, ArgValue>,
    pub reference: HashMap<String, ArgValue>,
    /// Whether the function assembles a sparse output.
    pub assembled: bool,
}

/// The script parsed and verified at stage I, the data validated for it, and the evaluator's
/// results; `None` where any of that fails (no result to compare: no finding).
pub(crate) fn prepare(input: &DiffInput) -> Option<Prepared> {
    let module = sparsetir_syntax::parse_module(&input.script).ok()?;
    let [f] = module.funcs.as_slice() else {
        return None;
    };
    if f.stage() != Stage::I || verify_func(f).is_err() {
        return None;
    }
    let args = input.data.map();
    let assembled = !assembly::outputs(f).is_empty();
    let valid = {
        let mut prepared = args.clone();
        !assembled
            || assembly::prepare(f, &mut prepared).is_ok() && {
                validate_args(f, &prepared).is_ok()
            }
    };
    if !crate::data::runnable(&args) || !valid || (!assembled && validate_args(f, &args).is_err()) {
        return None;
    }
    let mut reference = args.clone();
    eval_func(f, &mut reference).ok()?;
    crate::deep();
    Some(Prepared {
        f: f.clone(),
        args,
        reference,
        assembled,
    })
}

/// Runs one input: every backend must give the evaluator's results. `native` (the kernel
/// cache's directory) adds the C backend and the CUDA emulator.
pub fn execute(input: &DiffInput, native: Option<&Path>) -> Result<(), String> {
    let Some(Prepared {
        f,
        args,
        reference,
        assembled,
    }) = prepare(input)
    else {
        return Ok(());
    };
    let f = &f;
    if assembled {
        return execute_assembled(f, input, &args, &reference, native);
    }
    // Stage III lowers on from the stage-II module (the first pass leaves it as it is).
    let mut module = IRModule {
        funcs: vec![f.clone()],
    };
    for stage in [Stage::II, Stage::III] {
        module = match lower(&module, &options(stage)) {
            Ok(l) => l,
            Err(e @ PipelineError::Verify { .. }) => return Err(e.to_string()),
            // A construct a pass does not support: no result to compare.
            Err(_) => return Ok(()),
        };
        let Some(g) = module.funcs.iter().find(|g| g.stage() == stage) else {
            return Err(format!(
                "lowering to stage {stage:?} gave no stage-{stage:?} function"
            ));
        };
        let mut got = args.clone();
        match run_func(g, &mut got) {
            Ok(()) => {}
            // A coordinate lookup runs ahead of the statement that needs it (for every
            // position of its context, even where the statement's inner loops are empty): a
            // division by zero in that coordinate stops it there, where the evaluator never
            // reached it.
            Err(e) if e.message.contains("by zero") => return Ok(()),
            Err(e) => {
                return Err(format!(
                    "the stage {stage:?} interpreter refuses what the evaluator runs: {e}"
                ))
            }
        }
        compare(&reference, &got).map_err(|e| format!("stage {stage:?} interpreter: {e}"))?;
    }
    decomposed(f, input, &args, &reference, native)?;
    let Some(dir) = native else {
        return Ok(());
    };
    let kernel = input.data.kernel.as_str();
    let schedules = (
        sparsetir_ops::cpu_schedule(kernel),
        sparsetir_ops::gpu_schedule(kernel),
    );
    native_runs("", f, &args, &reference, dir, schedules)
}

/// Runs `f` on `args` through the C backend and the CUDA emulator, each without a schedule and
/// with its catalog schedule (`schedules`: CPU, GPU) where there is one; every run must give
/// `reference`. `what` prefixes the backends' names in a finding.
fn native_runs(
    what: &str,
    f: &PrimFunc,
    args: &HashMap<String, ArgValue>,
    reference: &HashMap<String, ArgValue>,
    dir: &Path,
    (cpu, gpu): (Option<&str>, Option<&str>),
) -> Result<(), String> {
    let c_opts = crate::data::c_options(&dir.join("c"), false);
    each_schedule(&format!("{what}C backend"), cpu, reference, |s| {
        let k = sparsetir_runtime::build(f, s, &[], &c_opts).ok()?;
        let mut got = args.clone();
        Some(k.run(&mut got).map(|_| got))
    })?;
    let cache = KernelCache::new(dir.join("cuda-emu"));
    each_schedule(&format!("{what}cuda-emu"), gpu, reference, |s| {
        let k = GpuKernel::build(f, s, &[], GpuDevice::Emulator, &cache).ok()?;
        let mut got = args.clone();
        Some(k.run(&mut got).map(|_| got))
    })
}

/// The decomposition rules tried on the CSR kernels (one per input, chosen by the script's
/// hash so that a saved input replays the same).
const RULES: &[&str] = &[
    "hyb(parts=2,buckets=1,2)",
    "hyb(parts=1,buckets=1,2,4)",
    "bsr:2",
    "ell(width=2)+csr",
    "ell(width=3)+csr",
    "coo",
];

/// The mutated function decomposed into composable formats (SPEC §3.1) as `run --decompose`
/// does: the formats built from the same data, then the decomposed function on the evaluator
/// and on the stage III interpreter (with `native`, also the C backend and the CUDA emulator,
/// automatic schedules) must give the undecomposed function's results. A rule that does not fit
/// the function or its data is no finding.
fn decomposed(
    f: &PrimFunc,
    input: &DiffInput,
    args: &HashMap<String, ArgValue>,
    reference: &HashMap<String, ArgValue>,
    native: Option<&Path>,
) -> Result<(), String> {
    if !matches!(input.data.kernel.as_str(), "csrmm" | "spmv" | "sddmm") {
        return Ok(());
    }
    let h = input.script.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    });
    let rule = RULES[(h % RULES.len() as u64) as usize];
    let src = sparsetir_runtime::decompose::Script {
        name: "<diff>".into(),
        text: input.script.clone(),
    };
    let Ok((g, decomposition)) =
        sparsetir_runtime::decompose::for_run(&src, f, &[rule.to_string()])
    else {
        return Ok(());
    };
    let Ok(extra) = decomposition.arguments(f, args) else {
        return Ok(());
    };
    let mut base = args.clone();
    base.extend(extra);
    let mut got = base.clone();
    match eval_func(&g, &mut got) {
        Ok(()) => {
            compare(reference, &got).map_err(|e| format!("decomposed by {rule}, evaluator: {e}"))?
        }
        Err(e) if e.message.contains("by zero") => return Ok(()),
        Err(e) => {
            return Err(format!(
                "decomposed by {rule}: the evaluator refuses what it runs undecomposed: {e}"
            ))
        }
    }
    let one = IRModule {
        funcs: vec![g.clone()],
    };
    let lowered = match lower(&one, &options(Stage::III)) {
        Ok(l) => l,
        Err(e @ PipelineError::Verify { .. }) => return Err(format!("decomposed by {rule}: {e}")),
        Err(_) => return Ok(()),
    };
    let Some(l) = lowered.funcs.iter().find(|l| l.stage() == Stage::III) else {
        return Ok(());
    };
    let mut got = base.clone();
    match run_func(l, &mut got) {
        Ok(()) => compare(reference, &got)
            .map_err(|e| format!("decomposed by {rule}, stage III interpreter: {e}"))?,
        Err(e) if e.message.contains("by zero") => return Ok(()),
        Err(e) => {
            return Err(format!(
                "decomposed by {rule}: the stage III interpreter refuses what the evaluator \
                 runs: {e}"
            ))
        }
    }
    match native {
        Some(dir) => native_runs(
            &format!("decomposed by {rule}, "),
            &g,
            &base,
            reference,
            dir,
            (None, None),
        ),
        None => Ok(()),
    }
}

/// A function that assembles its output: the interpreter runs its phases
/// (`assembly::run_interp`), the C backend its compiled phases (`AssembledKernel`), with and
/// without the catalog schedule; the emulator has no assembled outputs.
fn execute_assembled(
    f: &PrimFunc,
    input: &DiffInput,
    args: &HashMap<String, ArgValue>,
    reference: &HashMap<String, ArgValue>,
    native: Option<&Path>,
) -> Result<(), String> {
    let by_zero = |e: &RunError| e.to_string().contains("by zero");
    let mut got = args.clone();
    match assembly::run_interp(f, &mut got) {
        Ok(()) => compare(reference, &got).map_err(|e| format!("interpreter: {e}"))?,
        Err(RunError::Lower(e)) if !e.contains("interpreter:") && !e.contains("internal") => {
            // A construct lowering does not support: no result to compare.
            return Ok(());
        }
        Err(e) if by_zero(&e) => return Ok(()),
        Err(e) => {
            return Err(format!(
                "the interpreter refuses what the evaluator runs: {e}"
            ))
        }
    }
    let Some(dir) = native else {
        return Ok(());
    };
    let c_opts = crate::data::c_options(&dir.join("c"), false);
    let kernel = input.data.kernel.as_str();
    each_schedule(
        "C backend",
        sparsetir_ops::cpu_schedule(kernel),
        reference,
        |s| {
            let k = assembly::AssembledKernel::build(f, s, &[], &c_opts).ok()?;
            let mut got = args.clone();
            Some(k.run(&mut got).map(|_| got))
        },
    )?;
    Ok(())
}

/// Runs a backend without a schedule, then with the kernel's catalog schedule `catalog`
/// (where there is one): `run` builds and launches (`None`: the function does not build with
/// that schedule, as where a primitive refuses the mutated body, which is no finding), and what
/// it gives must equal `reference`. A division by zero is no finding either (see
/// [`execute`]).
fn each_schedule(
    backend: &str,
    catalog: Option<&str>,
    reference: &HashMap<String, ArgValue>,
    mut run: impl FnMut(Option<&str>) -> Option<Result<HashMap<String, ArgValue>, RunError>>,
) -> Result<(), String> {
    for schedule in std::iter::once(None).chain(catalog.map(Some)) {
        let what = match schedule {
            Some(_) => format!("{backend}, catalog schedule"),
            None => backend.to_string(),
        };
        judge(&what, reference, run(schedule))?;
    }
    Ok(())
}

/// What one backend's run `got` says (`what` names the backend): `None` (the function does not
/// build for it) and a division by zero are no finding; results must equal `reference`.
pub(crate) fn judge(
    what: &str,
    reference: &HashMap<String, ArgValue>,
    got: Option<Result<HashMap<String, ArgValue>, RunError>>,
) -> Result<(), String> {
    match got {
        None => Ok(()),
        Some(Ok(got)) => compare(reference, &got).map_err(|e| format!("{what}: {e}")),
        Some(Err(RunError::Kernel { status: -3, .. } | RunError::EmuDivisionByZero { .. })) => {
            Ok(())
        }
        Some(Err(e)) => Err(format!("{what} refuses what the evaluator runs: {e}")),
    }
}

/// Whether every argument of `got` equals the evaluator's (floats within rounding: the
/// backends may sum in another order).
pub(crate) fn compare(
    reference: &HashMap<String, ArgValue>,
    got: &HashMap<String, ArgValue>,
) -> Result<(), String> {
    let mut names: Vec<_> = reference.keys().collect();
    names.sort();
    for name in names {
        match (&reference[name], got.get(name)) {
            (ArgValue::Array(a), Some(ArgValue::Array(b))) => compare_tensors(name, a, b)?,
            (a, Some(b)) if a == b => {}
            (a, b) => return Err(format!("`{name}`: expected {a:?}, got {b:?}")),
        }
    }
    Ok(())
}

fn compare_tensors(name: &str, a: &Tensor, b: &Tensor) -> Result<(), String> {
    if a.len() != b.len() || a.dtype() != b.dtype() {
        return Err(format!(
            "`{name}`: expected {} elements of {}, got {} of {}",
            a.len(),
            a.dtype(),
            b.len(),
            b.dtype()
        ));
    }
    if !a.dtype().is_float() {
        if let Some(k) = (0..a.len()).find(|&k| a.get_i64(k) != b.get_i64(k)) {
            return Err(format!(
                "`{name}`[{k}]: expected {}, got {}",
                a.get_i64(k),
                b.get_i64(k)
            ));
        }
        return Ok(());
    }
    let scale = (0..a.len())
        .map(|k| a.get_f64(k).abs())
        .filter(|x| x.is_finite())
        .fold(1.0f64, f64::max);
    let tol = match a.dtype() {
        DType::F16 | DType::BF16 => 1e-2,
        _ => 1e-4,
    } * scale;
    for k in 0..a.len() {
        let (x, y) = (a.get_f64(k), b.get_f64(k));
        let same = (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= tol;
        if !same {
            return Err(format!("`{name}`[{k}]: expected {x}, got {y}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn some_inputs_store_float32_operands_in_16_bits() {
        // About a quarter of the generated inputs store some float32 inputs as float16 or
        // bfloat16, with their data rounded to that type; the evaluator and both interpreters
        // agree on them.
        let mut m = Mutator::new(38);
        let (mut total, mut sixteen) = (0, 0);
        for _ in 0..200 {
            let Some(input) = DiffInput::generate(&mut m, Stores::Kept) else {
                continue;
            };
            total += 1;
            let f = sparsetir_syntax::parse_func(&input.script).expect("the script parses");
            let stored: Vec<String> = f
                .buffers
                .iter()
                .filter(|(_, b)| matches!(b.dtype, DType::F16 | DType::BF16))
                .filter_map(|(_, b)| match b.decl {
                    sparsetir_ir::BufferDecl::Match { data } => Some(f.vars[data].name.clone()),
                    _ => None,
                })
                .collect();
            if stored.is_empty() {
                continue;
            }
            sixteen += 1;
            for name in &stored {
                let arg = input.data.args.iter().find(|(n, _)| n == name);
                if let Some((_, ArgValue::Array(t))) = arg {
                    assert!(matches!(t.dtype(), DType::F16 | DType::BF16), "{name}");
                }
            }
            execute(&input, None).unwrap_or_else(|e| panic!("{e}\n{}", input.to_text()));
        }
        assert!(total >= 150, "{total} inputs");
        assert!(sixteen * 8 >= total, "{sixteen} of {total} in 16 bits");
    }
}
