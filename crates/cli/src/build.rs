//! `sparsetir build FILE --target c`: specialize, schedule and lower a stage-I function, and
//! print the generated C; and the `c` backend of `sparsetir run` (the same pipeline, compiled
//! through the kernel cache and launched on the bound data).

use std::path::Path;

use sparsetir_ir::{PrimFunc, Stage};
use sparsetir_runtime::build::{build, emit, emit_cuda, BuildError};
use sparsetir_runtime::{CompileOptions, Kernel};

use crate::{parse, pick_func, read_source, split_pair, stage_name, verify, Failure, Source};

/// The targets `build` knows, with what each means.
const TARGETS: &str = "c (C11 + OpenMP), cuda (CUDA C++)";

/// Options of `sparsetir build`.
pub struct Options<'a> {
    pub file: &'a Path,
    pub target: &'a str,
    /// `--emit ptx|cubin` (CUDA only).
    pub emit: Option<&'a str>,
    pub arch: &'a str,
    pub output: Option<&'a Path>,
    pub func: Option<&'a str>,
    pub schedule: Option<&'a Path>,
    pub sets: &'a [String],
}

/// A schedule file's name and text.
struct ScheduleFile {
    name: String,
    text: String,
}

/// Reads a schedule file.
fn read_schedule(path: Option<&Path>) -> Result<Option<ScheduleFile>, Failure> {
    path.map(|p| {
        std::fs::read_to_string(p)
            .map(|text| ScheduleFile {
                name: p.display().to_string(),
                text,
            })
            .map_err(|e| Failure(format!("error: cannot read schedule {}: {e}", p.display())))
    })
    .transpose()
}

/// Runs a build step with the schedule's text; the schedule's errors are located in its file
/// ([`BuildError::render_in_schedule`]).
fn with_schedule<T>(
    schedule: &Option<ScheduleFile>,
    step: impl FnOnce(Option<&str>) -> Result<T, BuildError>,
) -> Result<T, Failure> {
    step(schedule.as_ref().map(|s| s.text.as_str())).map_err(|e| {
        schedule
            .as_ref()
            .and_then(|s| e.render_in_schedule(&s.name, &s.text))
            .map_or_else(|| e.into(), Failure)
    })
}

/// `--set PARAM=VALUE` pairs as integer specializations; `strict` refuses values that are not
/// integers (for `build`), otherwise they are left to the binder (for `run`).
fn specializations(
    f: &PrimFunc,
    sets: &[String],
    strict: bool,
) -> Result<Vec<(String, i64)>, Failure> {
    let mut out = Vec::new();
    for s in sets {
        let (k, v) = split_pair(s, "set")?;
        match v.parse::<i64>() {
            Ok(n) if f.param(k).is_some() || strict => out.push((k.to_string(), n)),
            Ok(_) => {}
            Err(_) if strict => {
                return Err(Failure(format!(
                    "error: --set {k}={v}: build specializes integer parameters; `{v}` is not an \
                     integer"
                )))
            }
            Err(_) => {}
        }
    }
    Ok(out)
}

fn stage_one<'m>(src: &Source, f: &'m PrimFunc, what: &str) -> Result<&'m PrimFunc, Failure> {
    if f.stage() != Stage::I {
        return Err(Failure(format!(
            "error: {what} takes stage-I functions; `{}` in {} is {}",
            f.name,
            src.name,
            stage_name(f.stage())
        )));
    }
    Ok(f)
}

/// `sparsetir build`.
pub fn run(o: &Options) -> Result<(), Failure> {
    if o.target != "c" && o.target != "cuda" {
        return Err(Failure(format!(
            "error: unsupported target `{}` (available: {TARGETS})",
            o.target
        )));
    }
    let src = read_source(o.file)?;
    let module = parse(&src)?;
    verify(&src, &module)?;
    let f = stage_one(&src, pick_func(&module, o.func)?, "build")?;
    let schedule = read_schedule(o.schedule)?;
    let spec = specializations(f, o.sets, true)?;
    if o.target == "cuda" {
        let (_, m) = with_schedule(&schedule, |s| emit_cuda(f, s, &spec))?;
        return match o.emit {
            None => {
                print!("{}", m.source);
                Ok(())
            }
            Some(kind) => compile_cuda(&m, kind, o.arch, o.output),
        };
    }
    if o.emit.is_some() {
        return Err(Failure("error: --emit applies to --target cuda".into()));
    }
    let c = with_schedule(&schedule, |s| emit(f, s, &spec))?;
    print!("{}", c.source);
    Ok(())
}

/// `sparsetir lower --schedule`: `f` specialized (integer `--set` values, as `build` takes
/// them), scheduled and lowered as every backend lowers it; the scheduled function of `stage`.
pub fn scheduled(
    src: &Source,
    f: &PrimFunc,
    schedule: &Path,
    sets: &[String],
    stage: Stage,
) -> Result<PrimFunc, Failure> {
    let f = stage_one(src, f, "lower --schedule")?;
    let schedule = read_schedule(Some(schedule))?;
    let spec = specializations(f, sets, true)?;
    let lowered = with_schedule(&schedule, |s| {
        sparsetir_runtime::build::schedule_and_lower(f, s, &spec)
    })?;
    Ok(match stage {
        Stage::I => lowered.scheduled1,
        Stage::II => lowered.stage2,
        Stage::III => lowered.stage3,
    })
}

/// Builds the kernel `sparsetir run --backend c` launches: integer `--set` values of the
/// function's parameters are specialized (they are bound as arguments too, so the kernel's
/// arguments always match).
pub fn for_run(
    src: &Source,
    f: &PrimFunc,
    schedule: Option<&Path>,
    threads: Option<usize>,
    sets: &[String],
) -> Result<Kernel, Failure> {
    let f = stage_one(src, f, "the c backend")?;
    let schedule = read_schedule(schedule)?;
    let spec = specializations(f, sets, false)?;
    let opts = CompileOptions {
        threads,
        ..CompileOptions::default()
    };
    with_schedule(&schedule, |s| build(f, s, &spec, &opts))
}

/// `run --backend c` of a function that assembles its output: both phases compiled.
pub fn for_run_assembled(
    src: &Source,
    f: &PrimFunc,
    schedule: Option<&Path>,
    threads: Option<usize>,
    sets: &[String],
) -> Result<sparsetir_runtime::assembly::AssembledKernel, Failure> {
    let f = stage_one(src, f, "the c backend")?;
    let schedule = read_schedule(schedule)?;
    let spec = specializations(f, sets, false)?;
    let opts = CompileOptions {
        threads,
        ..CompileOptions::default()
    };
    with_schedule(&schedule, |s| {
        sparsetir_runtime::assembly::AssembledKernel::build(f, s, &spec, &opts)
    })
}

/// `build --target cuda --emit ptx|cubin --arch A -o OUT`: NVRTC compiles the module (through
/// the kernel cache); the registers and spills ptxas reports are printed for cubins.
fn compile_cuda(
    m: &sparsetir_codegen::cuda::CudaModule,
    kind: &str,
    arch: &str,
    output: Option<&Path>,
) -> Result<(), Failure> {
    use sparsetir_cuda::{Arch, Emit, Nvrtc};
    let emit = match kind {
        "ptx" => Emit::Ptx,
        "cubin" => Emit::Cubin,
        other => {
            return Err(Failure(format!(
                "error: --emit {other}: expected `ptx` or `cubin`"
            )))
        }
    };
    let Some(out) = output else {
        return Err(Failure(
            "error: --emit needs an output file (-o OUT)".into(),
        ));
    };
    let arch = Arch::parse(arch).map_err(|e| Failure(format!("error: --arch: {e}")))?;
    let nvrtc = Nvrtc::load().map_err(|e| Failure(format!("error: {e}")))?;
    let name = format!("{}.cu", m.func);
    let compiled = nvrtc
        .compile(&m.source, &name, &arch, emit, &[])
        .map_err(|e| Failure(format!("error: {e}")))?;
    for r in &compiled.resources {
        eprintln!(
            "{}: {} registers, {} bytes spill stores, {} bytes spill loads, {} bytes shared",
            r.kernel, r.registers, r.spill_stores, r.spill_loads, r.shared_bytes
        );
    }
    std::fs::write(out, &compiled.code)
        .map_err(|e| Failure(format!("error: cannot write {}: {e}", out.display())))?;
    Ok(())
}

/// Builds the GPU module `sparsetir run --backend cuda|cuda-emu` launches (specializations as
/// for [`for_run`]).
pub fn for_gpu(
    src: &Source,
    f: &PrimFunc,
    schedule: Option<&Path>,
    sets: &[String],
    device: sparsetir_runtime::gpu::GpuDevice,
) -> Result<sparsetir_runtime::gpu::GpuKernel, Failure> {
    let f = stage_one(src, f, &format!("the {} backend", device.name()))?;
    let schedule = read_schedule(schedule)?;
    let spec = specializations(f, sets, false)?;
    let cache = sparsetir_runtime::cache::KernelCache::from_env()?;
    with_schedule(&schedule, |s| {
        sparsetir_runtime::gpu::GpuKernel::build(f, s, &spec, device, &cache)
    })
}
