//! The native (C) backend's front door: [`Kernel`] pairs a loaded kernel with the stage-I function
//! its arguments are validated against before every launch.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use sparsetir_codegen::CParamKind;
use sparsetir_eval::ArgValue;
use sparsetir_ir::{IRModule, PrimFunc, Stage};
use sparsetir_transform::pipeline::{lower, PipelineOptions};

use crate::args::{LaunchArg, LaunchArgs};
use crate::cache::{CacheOutcome, KernelCache, LoadReport};
use crate::compile::Compiler;
use crate::error::RunError;
use crate::frozen::ValidationMemo;
use crate::kernel::{CompiledKernel, KernelParam, ParamKind, SparsetirArg};
use crate::timing::{time_with, Timing, TimingOptions};

/// How to compile a kernel.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompileOptions {
    /// The C compiler command; `None` = `$CC`, else `cc`.
    pub cc: Option<String>,
    /// Extra flags after the defaults (`-std=c11 -O3 -march=native -fopenmp -fPIC -shared`).
    pub flags: Vec<String>,
    /// OpenMP threads per launch; `None` = the OpenMP default.
    pub threads: Option<usize>,
    /// The cache directory; `None` = [`KernelCache::default_dir`].
    pub cache_dir: Option<PathBuf>,
}

impl CompileOptions {
    /// The compiler these options name.
    pub fn compiler(&self) -> Compiler {
        Compiler::new(self.cc.as_deref(), &self.flags)
    }
    /// The cache these options name.
    pub fn cache(&self) -> Result<KernelCache, RunError> {
        match &self.cache_dir {
            Some(d) => Ok(KernelCache::new(d.clone())),
            None => KernelCache::from_env(),
        }
    }
}

/// A compiled kernel ready to run: validates every launch's arguments against its stage-I
/// function, then calls the native code.
#[derive(Debug)]
pub struct Kernel {
    stage1: PrimFunc,
    compiled: CompiledKernel,
    source: String,
    threads: Option<usize>,
    report: LoadReport,
    /// Lowering and C emission time (zero for [`Kernel::from_source`]).
    frontend_time: Duration,
    /// The array parameters the kernel writes (buffers it stores to, assembled structure):
    /// [`Kernel::launch`] refuses a read-only array for them.
    written: Vec<String>,
    /// The array parameters every successful launch stores whole without reading them
    /// (sorted; `sparsetir_codegen::CModule::overwritten`): they may be lent write-only.
    overwritten: Vec<String>,
    /// Launch shapes whose validation passed on frozen structure (`crate::frozen`).
    memo: ValidationMemo,
}

/// The array parameters of `f` that a launch writes: the data of every buffer the body stores
/// to, and what an assembled axis produces.
fn written_params(f: &PrimFunc) -> Vec<String> {
    let mut out: Vec<String> = f
        .body
        .written_buffers()
        .into_iter()
        .filter_map(|b| f.buffers.get(b)?.data_param())
        .chain(crate::assembly::Assembled::of(f).params.into_keys())
        .filter_map(|v| Some(f.vars.get(v)?.name.clone()))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Lowers the stage-I function `stage1` to stage III (binary searches checked, so absent
/// coordinates keep their stage-I meaning), emits C, compiles it through the cache and loads it.
pub fn compile_c(stage1: &PrimFunc, opts: &CompileOptions) -> Result<Kernel, RunError> {
    let start = Instant::now();
    if stage1.stage() != Stage::I {
        return Err(not_stage1(stage1));
    }
    let pipeline = PipelineOptions {
        check_invalid_binary_search: true,
        ..PipelineOptions::to_stage(Stage::III)
    };
    let module = IRModule {
        funcs: vec![stage1.clone()],
    };
    let lowered = lower(&module, &pipeline).map_err(|e| RunError::Lower(e.to_string()))?;
    let stage3 = lowered
        .get(&stage1.name)
        .ok_or_else(|| RunError::Lower(format!("function `{}` vanished", stage1.name)))?;
    let c = crate::build::emit_c_cpu(stage3).map_err(|e| RunError::Codegen(e.to_string()))?;
    let params = c
        .params
        .iter()
        .map(|p| KernelParam {
            name: p.name.clone(),
            kind: match p.kind {
                CParamKind::Array { elem } => ParamKind::Array { elem },
                CParamKind::Scalar(dt) => ParamKind::Scalar(dt),
            },
        })
        .collect();
    let frontend_time = start.elapsed();
    let mut kernel =
        Kernel::from_source(stage1, &c.source, &c.entry, params, opts)?.overwriting(&c.overwritten);
    kernel.frontend_time = frontend_time;
    Ok(kernel)
}

fn not_stage1(f: &PrimFunc) -> RunError {
    RunError::Stage(format!(
        "function `{}` is at stage {:?}: a kernel is built from a stage-I function, which it \
         keeps to validate its arguments",
        f.name,
        f.stage()
    ))
}

impl Kernel {
    /// Builds (through the cache) and loads C `source` whose entry point `entry` takes `params`,
    /// for the stage-I function `stage1`.
    pub fn from_source(
        stage1: &PrimFunc,
        source: &str,
        entry: &str,
        params: Vec<KernelParam>,
        opts: &CompileOptions,
    ) -> Result<Kernel, RunError> {
        if stage1.stage() != Stage::I {
            return Err(not_stage1(stage1));
        }
        let cache = opts.cache()?;
        let (compiled, report) = cache.load(source, entry, &params, &opts.compiler())?;
        Ok(Kernel {
            stage1: stage1.clone(),
            compiled,
            source: source.to_string(),
            threads: opts.threads,
            report,
            frontend_time: Duration::ZERO,
            written: written_params(stage1),
            overwritten: Vec::new(),
            memo: ValidationMemo::new(),
        })
    }

    /// The kernel, told which array parameters its code overwrites whole without reading them
    /// (what the C writer proved: `CModule::overwritten`); a launch may then pass them
    /// write-only ([`crate::ArrayRef::write_only`]).
    pub(crate) fn overwriting(mut self, params: &[String]) -> Kernel {
        self.overwritten = params.to_vec();
        self.overwritten.sort();
        self
    }

    /// The array parameters every successful launch stores whole without reading them: the
    /// ones a launch may pass as [`crate::ArrayRef::write_only`] (no zeroing first).
    pub fn overwritten_params(&self) -> &[String] {
        &self.overwritten
    }

    /// Checks `args` against the stage-I function (structure, sizes, lengths, dtypes), then
    /// launches the kernel; outputs are written into the arrays of `args` in place.
    pub fn run(&self, args: &mut HashMap<String, ArgValue>) -> Result<(), RunError> {
        self.launch(&LaunchArgs::of_values_mut(args))
    }

    /// [`Kernel::run`] on borrowed arrays: no copy in or out. Checks `args` as `run` does, and
    /// that every array the kernel writes was lent writable ([`LaunchArgs::write`]). Arrays
    /// lent as [`crate::FrozenArray`]s ([`LaunchArgs::frozen`]) are read by validation once:
    /// a later launch with the same scalars, dtypes, lengths and frozen arrays passes without
    /// reading them again ([`crate::ValidationMemo`]).
    ///
    /// ```
    /// use sparsetir_runtime::{compile_c, CompileOptions, LaunchArgs};
    /// let kernel = compile_c(&sparsetir_ops::load("csrmm")?, &CompileOptions::default())?;
    /// // C = A B with A = [[1, 0, 2], [0, 0, 0]] in CSR and B = 3 x 2 ones.
    /// let (indptr, indices, a, b) = ([0i32, 2, 2], [0i32, 2], [1.0f32, 2.0], [1.0f32; 6]);
    /// let mut c = [0.0f32; 4];
    /// let mut args = LaunchArgs::new();
    /// args.int("m", 2).int("n", 3).int("nnz", 2).int("feat_size", 2);
    /// args.read("indptr", &indptr).read("indices", &indices).read("a", &a).read("b", &b);
    /// args.write("c", &mut c);
    /// kernel.launch(&args)?;
    /// drop(args);
    /// assert_eq!(c, [3.0, 3.0, 0.0, 0.0]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn launch(&self, args: &LaunchArgs<'_>) -> Result<(), RunError> {
        let slots = self.checked_slots(args)?;
        if let Some(n) = self.threads {
            self.compiled.set_num_threads(n);
        }
        // SAFETY: the slots point into `args`' arrays, which passed `validate_launch` against
        // the stage-I function this kernel was lowered from, and stay borrowed (written ones
        // exclusively, by `args`) until this call returns; every written array is writable.
        unsafe { self.compiled.call_marshalled(&slots) }
    }

    /// Validates `args` and builds the argument array from them.
    fn checked_slots(&self, args: &LaunchArgs<'_>) -> Result<Vec<SparsetirArg>, RunError> {
        for (name, arg) in args.iter() {
            if let LaunchArg::Array(a) = arg {
                if a.is_on_device() {
                    return Err(RunError::ArgKind {
                        name: name.to_string(),
                        expected: "a host array (the C backend runs on the CPU)".into(),
                        found: "an array in GPU memory".into(),
                    });
                }
                if a.is_write_only()
                    && self
                        .overwritten
                        .binary_search_by(|p| p.as_str().cmp(name))
                        .is_err()
                {
                    return Err(RunError::ArgKind {
                        name: name.to_string(),
                        expected: "an initialized array (the kernel does not store every \
                                   element of it before reading)"
                            .into(),
                        found: "a write-only one".into(),
                    });
                }
            }
        }
        self.memo.validate(&self.stage1, args)?;
        for name in &self.written {
            if let Some(LaunchArg::Array(a)) = args.get(name) {
                if !a.is_writable() {
                    return Err(RunError::ArgKind {
                        name: name.clone(),
                        expected: "a writable array (the kernel stores to it)".into(),
                        found: "a read-only one".into(),
                    });
                }
            }
        }
        self.compiled.marshal(args)
    }

    /// Times launches on `args`: the arguments are validated and the argument array built
    /// once, untimed, then the launches run back to back and each one's call of the compiled
    /// entry point is timed. `args` stays mutably borrowed for the whole run and the kernel
    /// writes only its outputs, never the structure arrays that validation checked, so every
    /// launch sees exactly the validated data. (Validating between launches, as `run` does,
    /// lets the OpenMP worker threads fall asleep between short kernels: +40% on a 70 µs SDDMM.)
    pub fn time(
        &self,
        args: &mut HashMap<String, ArgValue>,
        opts: TimingOptions,
    ) -> Result<Timing, RunError> {
        let slots = self.checked_slots(&LaunchArgs::of_values_mut(args))?;
        time_with(
            opts,
            || Ok(()),
            || {
                if let Some(n) = self.threads {
                    self.compiled.set_num_threads(n);
                }
                // SAFETY: the slots were built from `args` right after it passed
                // `validate_args`; `args` stays mutably borrowed by this function and is not
                // touched while the launches run, so every pointer is live and its length
                // checked.
                unsafe { self.compiled.call_marshalled(&slots) }
            },
        )
    }

    /// Sets the thread count of later launches (`None`: the OpenMP default).
    pub fn set_threads(&mut self, threads: Option<usize>) {
        self.threads = threads;
    }

    /// The array parameters a launch writes (sorted): what [`Kernel::launch`] needs lent
    /// writable.
    pub fn written_params(&self) -> &[String] {
        &self.written
    }

    /// The launch shapes this kernel remembers as validated.
    pub fn validation_memo(&self) -> &ValidationMemo {
        &self.memo
    }

    /// The stage-I function arguments are validated against.
    pub fn stage1(&self) -> &PrimFunc {
        &self.stage1
    }
    /// The C source.
    pub fn source(&self) -> &str {
        &self.source
    }
    pub fn compiled(&self) -> &CompiledKernel {
        &self.compiled
    }
    /// Cache outcome, key, path and timings of loading this kernel.
    pub fn report(&self) -> &LoadReport {
        &self.report
    }
    /// Time spent lowering and emitting C ([`compile_c`] only).
    pub fn frontend_time(&self) -> Duration {
        self.frontend_time
    }
    /// Whether the kernel came from the cache without compiling.
    pub fn cache_hit(&self) -> bool {
        self.report.outcome == CacheOutcome::Hit
    }
}
