//! The native half of the `sparsetir` Python package (`sparsetir._native`, built by maturin with
//! PyO3, abi3 so one wheel serves CPython ≥ 3.9).
//!
//! Design: everything that knows about sparsetir — parsing and verifying scripts, scheduling,
//! lowering, the kernel cache, binding data to buffers (size inference, packing into the declared
//! storage, shared-structure checks), validation of every launch, reading outputs back — is the
//! Rust crates' code, called here exactly as `sparsetir run` calls it. The Python layer
//! (`sparsetir/__init__.py`, `sparsetir/ops.py`) only turns scipy/PyTorch objects into plain
//! numpy arrays and COO triplets on the way in, and back on the way out.
//!
//! Data crossing the boundary (`borrow.rs`): `launch` on a C kernel copies nothing it need not.
//! Float arrays are lent read-only as they are (C-contiguous, aligned ones); index arrays
//! are copied, or passed as `NativeArray`s that `freeze` copied once and that each kernel
//! validates once per launch shape (a numpy index array could be rewritten by another thread
//! while the kernel runs without the GIL, after validation);
//! every output array is handed to numpy **without a copy** (the `Vec` becomes the array's
//! storage). `call` and the other targets copy their inputs into the runtime's owned
//! [`sparsetir_formats::Tensor`]s once. Kernels run with the GIL released.
//!
//! Errors are `sparsetir.SparsetirError` with the CLI's messages: script problems rendered as
//! `file:line:col` diagnostics, data problems naming the buffer, axis or parameter.

mod borrow;
mod convert;
mod csr;
mod device;
mod fresh;

use std::collections::HashMap;

use numpy::PyUntypedArray;
use pyo3::create_exception;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use sparsetir_eval::ArgValue;
use sparsetir_ir::{IRModule, PickError, PrimFunc, Stage};
use sparsetir_runtime::assembly::AssembledKernel;
use sparsetir_runtime::composable::data::Decomposition;
use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};
use sparsetir_runtime::{read_output, Binder, CompileOptions, LaunchArg, LaunchArgs, Output};
use sparsetir_syntax::{parse_module, render, Diagnostic};
use sparsetir_transform::pipeline::{lower_traced, PipelineOptions};

create_exception!(
    _native,
    SparsetirError,
    pyo3::exceptions::PyException,
    "A sparsetir failure: a script that does not parse or verify (located as file:line:col), \
     a schedule or lowering error, or data that does not fit the function (naming the buffer, \
     axis or parameter)."
);

fn err(message: impl std::fmt::Display) -> PyErr {
    SparsetirError::new_err(message.to_string())
}

/// The script text and the name diagnostics show for it (a path, or `<string>`).
struct Script {
    name: String,
    text: String,
}

impl Script {
    fn fail(&self, diags: &[Diagnostic]) -> PyErr {
        err(render(diags, &self.name, &self.text).trim_end())
    }
}

/// Parses and verifies a script, every problem rendered as the CLI renders it.
fn parse_verified(script: &Script) -> PyResult<IRModule> {
    let module = parse_module(&script.text).map_err(|d| script.fail(&d))?;
    let diags = sparsetir_syntax::verify_diagnostics(&module);
    if diags.is_empty() {
        Ok(module)
    } else {
        Err(script.fail(&diags))
    }
}

fn pick_func(module: &IRModule, name: Option<&str>) -> PyResult<PrimFunc> {
    module.pick(name).cloned().map_err(|e| match e {
        PickError::Several { .. } => err(format!("{e}: choose one with func=")),
        e => err(e.to_string()),
    })
}

/// What executes a kernel (one per compiled kernel: the variants' sizes do not matter).
#[allow(clippy::large_enum_variant)]
enum Exec {
    /// The stage-I reference evaluator.
    Eval,
    /// The stage II/III interpreter on the lowered function.
    Interp(PrimFunc),
    /// C + OpenMP through the kernel cache.
    C(sparsetir_runtime::Kernel),
    /// CUDA on a GPU or in the CPU emulator.
    Gpu(Box<GpuKernel>),
    /// An output whose structure the kernel assembles, on the interpreter (two phases, lowered
    /// at each call from the stage-I function).
    InterpAssembled,
    /// An output whose structure the kernel assembles, in C (both phases compiled).
    CAssembled(Box<AssembledKernel>),
}

/// A compiled function: `compile` builds it, `call` binds data by buffer name and runs it,
/// `launch` runs it on arguments given by parameter name.
#[pyclass(module = "sparsetir._native", frozen)]
struct NativeKernel {
    script: Script,
    /// The function data is bound to and read back from (as written, not decomposed).
    func: PrimFunc,
    /// With `decompose=`: the decomposed function that runs, and what builds its formats'
    /// arrays from the data bound to `func` (`sparsetir run --decompose`).
    decomposed: Option<(PrimFunc, Decomposition, String)>,
    target: String,
    exec: Exec,
    /// Parameters baked into the kernel: set on every binder, so data of other sizes is
    /// refused by name before the launch.
    specialized: Vec<(String, i64)>,
}

impl NativeKernel {
    /// Runs the kernel on `args` (by parameter name); outputs are written in place.
    fn execute(&self, args: &mut HashMap<String, ArgValue>) -> Result<(), String> {
        let located = |e: sparsetir_eval::EvalError| {
            if e.span.is_unknown() {
                format!("error: {}", e.message)
            } else {
                render(
                    &[Diagnostic {
                        span: e.span,
                        message: e.message,
                        notes: Vec::new(),
                    }],
                    &self.script.name,
                    &self.script.text,
                )
            }
        };
        match &self.exec {
            Exec::Eval => {
                let g = self.decomposed.as_ref().map_or(&self.func, |(g, _, _)| g);
                sparsetir_eval::eval_func(g, args).map_err(located)
            }
            Exec::Interp(g) => sparsetir_eval::run_func(g, args).map_err(located),
            Exec::InterpAssembled => sparsetir_runtime::assembly::run_interp(&self.func, args)
                .map_err(|e| format!("error: {e}")),
            // (In place: a failed call's arguments are dropped, never read again.)
            Exec::CAssembled(k) => k.run_in_place(args).map_err(|e| format!("error: {e}")),
            Exec::C(k) => k.run(args).map_err(|e| format!("error: {e}")),
            Exec::Gpu(k) => k.run(args).map(|_| ()).map_err(|e| format!("error: {e}")),
        }
    }

    /// Refuses an integer argument other than the value a parameter was specialized to.
    fn check_specialized(&self, args: &Bound<'_, PyDict>) -> PyResult<()> {
        for (k, v) in &self.specialized {
            if let Some(given) = args.get_item(k)? {
                if let Ok(x) = given.extract::<i64>() {
                    if x != *v {
                        return Err(err(format!(
                            "parameter `{k}` = {x}, but this kernel is specialized to {k} = {v}"
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// Runs without the GIL.
    fn execute_released(
        &self,
        py: Python<'_>,
        args: &mut HashMap<String, ArgValue>,
    ) -> PyResult<()> {
        // Kernels are plain data and loaded code (`NativeKernel` is `Sync`): several Python
        // threads may run them at once, each on its own arguments.
        let result = py.allow_threads(|| self.execute(args));
        result.map_err(|m| err(m.trim_end().trim_start_matches("error: ")))
    }
}

#[pymethods]
impl NativeKernel {
    /// The function's name.
    #[getter]
    fn name(&self) -> String {
        self.func.name.clone()
    }

    /// The backend this kernel runs on.
    #[getter]
    fn target(&self) -> String {
        self.target.clone()
    }

    /// The generated C source (C target only).
    #[getter]
    fn c_source(&self) -> Option<String> {
        match &self.exec {
            Exec::C(k) => Some(k.source().to_string()),
            _ => None,
        }
    }

    /// The array parameters the code stores whole without reading (C target): `launch` makes
    /// these outputs without zeroing them first.
    #[getter]
    fn overwritten(&self) -> Vec<String> {
        match &self.exec {
            Exec::C(k) => k.overwritten_params().to_vec(),
            _ => Vec::new(),
        }
    }

    /// Buffers taken as parameters: `(name, dtype, is_sparse, is_written)` in declaration order.
    fn buffers(&self) -> Vec<(String, String, bool, bool)> {
        let written = self.func.body.written_buffers();
        self.func
            .buffer_decls
            .iter()
            .filter(|b| self.func.buffers[**b].data_param().is_some())
            .map(|&b| {
                let buf = &self.func.buffers[b];
                (
                    buf.name.clone(),
                    buf.dtype.to_string(),
                    buf.is_sparse(),
                    written.contains(&b),
                )
            })
            .collect()
    }

    /// The parameter names, in order.
    fn params(&self) -> Vec<String> {
        self.func
            .params
            .iter()
            .map(|p| self.func.vars[*p].name.clone())
            .collect()
    }

    /// Binds data by buffer name exactly as `sparsetir run --bind` does and runs the kernel.
    ///
    /// `buffers` maps a buffer name (or a handle parameter's name, for ready-made structure or
    /// value arrays) to `("dense", ndarray)`, `("csr", [m, n], indptr, indices, data)` (see
    /// `csr.rs`) or `("coo", dims, coords, values)` with `coords` an int64 array of shape
    /// `(rank, nnz)` and `values` a float64 array; `sets` maps scalar
    /// parameters to their value as text. Returns every buffer the function writes, as
    /// `("dense", ndarray)` or `("coo", dims, coords, values, dtype)`.
    fn call<'py>(
        &self,
        py: Python<'py>,
        buffers: &Bound<'py, PyDict>,
        sets: &Bound<'py, PyDict>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let f = &self.func;
        let mut binder = Binder::new(f);
        for (k, v) in &self.specialized {
            binder.set(k, &v.to_string()).map_err(err)?;
        }
        for (k, v) in sets.iter() {
            let k: String = k.extract()?;
            let v: String = v.str()?.extract()?;
            binder.set(&k, &v).map_err(err)?;
        }
        let mut csr_bound = Vec::new();
        for (k, v) in buffers.iter() {
            let name: String = k.extract()?;
            let item = v.downcast::<PyTuple>()?;
            let kind: String = item.get_item(0)?.extract()?;
            let is_buffer = f.buffer_by_name(&name).is_some();
            match kind.as_str() {
                "dense" => {
                    let arr = item.get_item(1)?;
                    let arr = arr.downcast::<PyUntypedArray>()?;
                    let t = convert::tensor_from_numpy(arr)
                        .map_err(|m| err(format!("buffer `{name}`: {m}")))?;
                    if !is_buffer && f.param(&name).is_some() {
                        binder.bind_param_array(&name, t).map_err(err)?;
                    } else {
                        binder.check_bindable(&name).map_err(err)?;
                        binder.bind_tensor(&name, t).map_err(err)?;
                    }
                }
                "csr" => {
                    let dims: Vec<usize> = item.get_item(1)?.extract()?;
                    let array = |i: usize| -> PyResult<sparsetir_formats::Tensor> {
                        let a = item.get_item(i)?;
                        let a = a.downcast::<PyUntypedArray>()?;
                        convert::tensor_from_numpy(a)
                            .map_err(|m| err(format!("buffer `{name}`: {m}")))
                    };
                    if dims.len() != 2 {
                        return Err(err(format!("buffer `{name}`: a CSR matrix is 2-D")));
                    }
                    let input = csr::CsrInput {
                        rows: dims[0],
                        cols: dims[1],
                        indptr: array(2)?,
                        indices: array(3)?,
                        data: array(4)?,
                    };
                    csr::bind_csr(&mut binder, f, &name, input, &mut csr_bound).map_err(err)?;
                }
                "coo" => {
                    binder.check_bindable(&name).map_err(err)?;
                    let coo = convert::coo_from_parts(item)
                        .map_err(|m| err(format!("buffer `{name}`: {m}")))?;
                    binder.bind_coo(&name, &coo).map_err(err)?;
                }
                other => return Err(err(format!("internal: unknown binding kind `{other}`"))),
            }
        }
        let mut args = binder.finish().map_err(err)?;
        if let Some((_, d, specs)) = &self.decomposed {
            let extra = d
                .arguments(f, &args)
                .map_err(|e| err(format!("decompose={specs}: {e}")))?;
            args.extend(extra);
        }
        self.execute_released(py, &mut args)?;
        let out = PyDict::new(py);
        let written = f.body.written_buffers();
        for &b in &f.buffer_decls {
            let buf = &f.buffers[b];
            if buf.data_param().is_none() || !written.contains(&b) {
                continue;
            }
            let value = match read_output(f, &args, &buf.name).map_err(err)? {
                Output::Dense(t) => {
                    let arr = convert::numpy_from_tensor(py, t)?;
                    PyTuple::new(py, ["dense".into_pyobject(py)?.into_any(), arr])?.into_any()
                }
                Output::Sparse(c) => convert::coo_to_parts(py, &c, &buf.dtype.to_string())?,
            };
            out.set_item(&buf.name, value)?;
        }
        Ok(out)
    }

    /// Runs the kernel on arguments given by parameter name (arrays: numpy arrays, shaped as
    /// the buffers' value arrays; scalars: int or float), validated exactly as `call`'s;
    /// `outputs` lists `(name, dtype, shape)` of arrays allocated here (zeroed, except the
    /// float ones in `overwritten`, which the kernel fills whole), returned in order without a
    /// copy. The fast path of `sparsetir.ops`.
    fn launch<'py>(
        &self,
        py: Python<'py>,
        args: &Bound<'py, PyDict>,
        outputs: &Bound<'py, PyList>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        self.check_specialized(args)?;
        // Outputs start zeroed, except the float ones a C kernel's code stores whole.
        let overwritten: &[String] = match &self.exec {
            Exec::C(k) => k.overwritten_params(),
            _ => &[],
        };
        let mut fresh = Vec::with_capacity(outputs.len());
        for o in outputs.iter() {
            let (name, dtype, shape): (String, String, Vec<usize>) = o.extract()?;
            let dt = convert::parse_dtype(&dtype).map_err(err)?;
            let whole = overwritten.binary_search(&name).is_ok();
            let f = fresh::Fresh::new(dt, shape, whole)
                .map_err(|e| err(format!("output `{name}`: {e}")))?;
            fresh.push((name, f));
        }
        let outs: Vec<sparsetir_formats::Tensor> = match &self.exec {
            // C kernels take borrowed arguments: float arrays lent, frozen arrays as they are.
            Exec::C(k) => {
                let written = k.written_params();
                let mut held = Vec::with_capacity(args.len());
                for (key, v) in args.iter() {
                    let name: String = key.extract()?;
                    let w = written.binary_search(&name).is_ok();
                    let lent = borrow::Lent::new(&name, &v, w)?;
                    held.push((name, lent));
                }
                let mut launch = LaunchArgs::new();
                for (name, lent) in held.iter_mut() {
                    launch.set(name, lent.arg()?);
                }
                for (name, f) in fresh.iter_mut() {
                    launch.set(name, LaunchArg::Array(f.arg()));
                }
                let result = py.allow_threads(|| k.launch(&launch));
                drop(launch);
                result.map_err(|e| err(e.to_string()))?;
                // SAFETY: the launch succeeded.
                fresh
                    .into_iter()
                    .map(|(_, f)| unsafe { f.into_tensor() })
                    .collect()
            }
            _ => {
                let mut map: HashMap<String, ArgValue> = HashMap::with_capacity(args.len() + 2);
                for (key, v) in args.iter() {
                    let name: String = key.extract()?;
                    let value = match borrow::Lent::new(&name, &v, true)? {
                        borrow::Lent::Int(i) => ArgValue::Int(i),
                        borrow::Lent::Float(x) => ArgValue::Float(x),
                        borrow::Lent::Owned(t) => ArgValue::Array(t),
                        _ => return Err(err(format!("internal: `{name}` was lent"))),
                    };
                    map.insert(name, value);
                }
                let names: Vec<String> = fresh.iter().map(|(n, _)| n.clone()).collect();
                for (name, f) in fresh {
                    // SAFETY: no parameter is overwritten off the C path: every output here
                    // is a zeroed tensor.
                    map.insert(name, ArgValue::Array(unsafe { f.into_tensor() }));
                }
                self.execute_released(py, &mut map)?;
                let mut outs = Vec::with_capacity(names.len());
                for n in names {
                    match map.remove(&n) {
                        Some(ArgValue::Array(t)) => outs.push(t),
                        _ => return Err(err(format!("internal: output `{n}` vanished"))),
                    }
                }
                outs
            }
        };
        outs.into_iter()
            .map(|t| convert::numpy_from_tensor(py, t))
            .collect()
    }

    /// Runs a CUDA kernel (`cuda`, `cuda-emu`) on arguments by parameter name: device arrays
    /// (`device_array`: tensors the kernels read and write where they are), frozen arrays
    /// (`freeze`: the structure, copied to the GPU once), ints and floats, queued on CUDA
    /// stream `stream` (a `torch.cuda.Stream`'s `cuda_stream`; 0: the null stream; ignored by
    /// the emulator). Returns once the kernels are queued, as PyTorch's operators do (the
    /// emulator, or a kernel with intermediate buffers: once they finished).
    #[pyo3(signature = (args, stream=0))]
    fn launch_device(&self, py: Python<'_>, args: &Bound<'_, PyDict>, stream: u64) -> PyResult<()> {
        let Exec::Gpu(k) = &self.exec else {
            return Err(err(format!(
                "launch_device runs CUDA kernels; this one's target is `{}`",
                self.target
            )));
        };
        self.check_specialized(args)?;
        let held = device::launch_args(args)?;
        device::launch(py, k, &held, &device::Own::default(), stream)
    }

    fn __repr__(&self) -> String {
        format!(
            "<sparsetir.Kernel `{}` ({}) from {}>",
            self.func.name, self.target, self.script.name
        )
    }
}

/// Lowers `f` to stage III for the interpreter (checked binary searches, verified after every
/// pass), as `sparsetir run --backend interp` does.
fn lower_for_interp(script: &Script, f: &PrimFunc) -> PyResult<PrimFunc> {
    let module = IRModule {
        funcs: vec![f.clone()],
    };
    let opts = PipelineOptions::for_interpreter();
    let lowered = lower_traced(&module, &opts).map_err(|e| {
        let located = e.located();
        if located.is_empty() {
            return err(e.to_string());
        }
        let diags: Vec<Diagnostic> = located
            .into_iter()
            .map(|(span, message)| Diagnostic {
                span: if span.is_unknown() { f.span } else { span },
                message,
                notes: Vec::new(),
            })
            .collect();
        script.fail(&diags)
    })?;
    lowered.module.funcs.into_iter().next().ok_or_else(|| {
        err(format!(
            "internal: lowering `{}` produced no function",
            f.name
        ))
    })
}

/// Compiles `source` (script text; `name` is what diagnostics call it) for `target` (`eval`,
/// `interp`, `c`, `cuda`, `cuda-emu`), with an optional schedule (trace text with `# stage`
/// sections), function name, integer specializations and OpenMP thread count.
#[pyfunction]
#[pyo3(signature = (source, name, target, schedule=None, func=None, specialize=Vec::new(), threads=None, decompose=Vec::new(), schedule_name=None))]
#[allow(clippy::too_many_arguments)]
fn compile(
    py: Python<'_>,
    source: String,
    name: String,
    target: String,
    schedule: Option<String>,
    func: Option<String>,
    specialize: Vec<(String, i64)>,
    threads: Option<usize>,
    decompose: Vec<String>,
    schedule_name: Option<String>,
) -> PyResult<NativeKernel> {
    // A schedule's errors point into it, line and column, as the CLI shows them.
    let build_err = |e: sparsetir_runtime::build::BuildError| {
        let located = schedule.as_deref().and_then(|text| {
            e.render_in_schedule(schedule_name.as_deref().unwrap_or("<schedule>"), text)
        });
        match located {
            Some(text) => err(text),
            None => err(e),
        }
    };
    let gpu = match target.as_str() {
        "cuda" => Some(GpuDevice::Cuda),
        "cuda-emu" => Some(GpuDevice::Emulator),
        "eval" | "interp" | "c" => None,
        other => {
            return Err(err(format!(
                "unsupported target `{other}` (available: eval — the stage-I reference \
                 evaluator; interp — lowering to stage III and the stage II/III interpreter; c — \
                 compiled C + OpenMP; cuda — CUDA on an NVIDIA GPU; cuda-emu — the generated \
                 CUDA in the CPU emulator)"
            )))
        }
    };
    if schedule.is_some() && target != "c" && gpu.is_none() {
        return Err(err(
            "schedule= applies to the c, cuda and cuda-emu targets only",
        ));
    }
    if threads.is_some() && target != "c" {
        return Err(err("threads= applies to the c target only"));
    }
    let script = Script { name, text: source };
    let module = parse_verified(&script)?;
    let f = pick_func(&module, func.as_deref())?;
    if f.stage() != Stage::I {
        return Err(err(format!(
            "the {target} target runs stage-I functions; `{}` is at stage {:?}",
            f.name,
            f.stage()
        )));
    }
    let spec: Vec<(String, i64)> = specialize
        .into_iter()
        .filter(|(k, _)| f.param(k).is_some())
        .collect();
    // Decomposed first (as `run --decompose`): a rule error is reported before any compiling.
    let decomposed = if decompose.is_empty() {
        None
    } else {
        let rt_script = sparsetir_runtime::decompose::Script {
            name: script.name.clone(),
            text: script.text.clone(),
        };
        let (g, d) = sparsetir_runtime::decompose::for_run(&rt_script, &f, &decompose)
            .map_err(|e| err(e.0.trim_end().trim_start_matches("error: ")))?;
        Some((g, d, decompose.join(", ")))
    };
    // The function that runs: decomposed, or as written.
    let g = decomposed.as_ref().map_or(&f, |(g, _, _)| g);
    // Outputs whose structure the kernel assembles (`assembled=True`): two phases on the
    // interpreter and in C; the reference evaluator assembles directly.
    if let Some((_, a)) = f.axes.iter().find(|(_, a)| a.assembled) {
        if gpu.is_some() || decomposed.is_some() {
            return Err(err(format!(
                "`{}` assembles the structure of its output (axis `{}`, assembled=True): \
                 assembled outputs run on the eval, interp and c targets, without decompose=",
                f.name, a.name
            )));
        }
    }
    let assembling = sparsetir_runtime::assembly::assembles(&f);
    let exec = match target.as_str() {
        "eval" => Exec::Eval,
        "interp" if assembling => Exec::InterpAssembled,
        "c" if assembling => {
            let opts = CompileOptions {
                threads,
                ..CompileOptions::default()
            };
            let (fr, sched) = (&f, schedule.as_deref());
            let k = py
                .allow_threads(|| AssembledKernel::build(fr, sched, &spec, &opts))
                .map_err(build_err)?;
            Exec::CAssembled(Box::new(k))
        }
        "interp" => Exec::Interp(lower_for_interp(&script, g)?),
        "c" => {
            let opts = CompileOptions {
                threads,
                ..CompileOptions::default()
            };
            let (fr, sched) = (g, schedule.as_deref());
            let k = py
                .allow_threads(|| sparsetir_runtime::build(fr, sched, &spec, &opts))
                .map_err(build_err)?;
            Exec::C(k)
        }
        _ => {
            let device = gpu.expect("a GPU target");
            let cache = sparsetir_runtime::cache::KernelCache::from_env().map_err(err)?;
            let k = GpuKernel::build(g, schedule.as_deref(), &spec, device, &cache)
                .map_err(build_err)?;
            Exec::Gpu(Box::new(k))
        }
    };
    Ok(NativeKernel {
        script,
        func: f,
        decomposed,
        target,
        exec,
        specialized: spec,
    })
}

/// The script text of a catalog kernel (`crates/ops/kernels/NAME.sp`).
#[pyfunction]
fn catalog_source(name: &str) -> PyResult<String> {
    sparsetir_ops::get(name)
        .map(|k| k.source.to_string())
        .ok_or_else(|| err(format!("no kernel `{name}` in the catalog")))
}

/// The script text of a catalog kernel with its float32 inputs (the buffers it reads and does
/// not write) stored as `dtype` (float16 or bfloat16), read as `T.Cast("float32", ...)`: 16-bit
/// operands, float32 arithmetic and outputs, as `sparsetir bench --dtype` runs them.
#[pyfunction]
fn catalog_source_stored_as(name: &str, dtype: &str) -> PyResult<String> {
    let dt = convert::parse_dtype(dtype).map_err(err)?;
    if !matches!(dt, sparsetir_ir::DType::F16 | sparsetir_ir::DType::BF16) {
        return Err(err(format!("dtype `{dtype}`: float16 or bfloat16")));
    }
    let f = sparsetir_ops::load(name).map_err(err)?;
    let written = f.body.written_buffers();
    let inputs: Vec<&str> = f
        .buffers
        .iter()
        .filter(|(id, b)| {
            b.dtype == sparsetir_ir::DType::F32 && b.data_param().is_some() && !written.contains(id)
        })
        .map(|(_, b)| b.name.as_str())
        .collect();
    let g = sparsetir_transform::store_as(&f, &inputs, dt).map_err(err)?;
    Ok(sparsetir_ir::printer::print_module(&IRModule {
        funcs: vec![g],
    }))
}

/// The default CPU schedule of a catalog kernel, tuned to the data as `sparsetir bench` tunes
/// it: SDDMM drops its gather prefetches where the gathered operand (`cols × feat × elem_bytes`)
/// fits in L2.
#[pyfunction]
#[pyo3(signature = (name, gathered_bytes=0))]
fn cpu_schedule(name: &str, gathered_bytes: usize) -> Option<String> {
    let base = sparsetir_ops::cpu_schedule(name)?;
    Some(if name == "sddmm" {
        sparsetir_ops::composable::gather_prefetch(
            base,
            gathered_bytes,
            sparsetir_runtime::machine::l2_cache_bytes(),
        )
    } else {
        base.to_string()
    })
}

/// The default GPU schedule of a catalog kernel (or of `csrmm_split`, `csrmm_split4`).
#[pyfunction]
fn gpu_schedule(name: &str) -> Option<String> {
    sparsetir_ops::gpu_schedule(name).map(str::to_string)
}

/// The GPU schedule of SpMM for a matrix whose longest row stores `max_row` elements and whose
/// rows store `mean_row` on average, at width `feat`: `csrmm`, or a row-split one, as `sparsetir
/// bench --device cuda` takes it.
#[pyfunction]
fn spmm_gpu_schedule_name(feat: usize, max_row: usize, mean_row: f64) -> &'static str {
    sparsetir_ops::spmm_gpu_schedule_name(feat, max_row, mean_row)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("SparsetirError", m.py().get_type::<SparsetirError>())?;
    m.add_class::<NativeKernel>()?;
    m.add_class::<borrow::NativeArray>()?;
    m.add_function(wrap_pyfunction!(borrow::freeze, m)?)?;
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    m.add_function(wrap_pyfunction!(catalog_source, m)?)?;
    m.add_function(wrap_pyfunction!(catalog_source_stored_as, m)?)?;
    m.add_function(wrap_pyfunction!(cpu_schedule, m)?)?;
    m.add_function(wrap_pyfunction!(gpu_schedule, m)?)?;
    m.add_function(wrap_pyfunction!(spmm_gpu_schedule_name, m)?)?;
    m.add_class::<device::DeviceArray>()?;
    m.add_function(wrap_pyfunction!(device::device_array, m)?)?;
    m.add_class::<device::HybSpmm>()?;
    m.add_function(wrap_pyfunction!(device::hyb_spmm, m)?)?;
    Ok(())
}
