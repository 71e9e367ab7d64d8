//! `sparsetir build FILE --target c`: specialize, schedule and lower a stage-I function, and
//! print the generated C; and the `c` backend of `sparsetir run` (the same pipeline, compiled
//! through the kernel cache and launched on the bound data).

use std::path::Path;

use sparsetir_ir::{PrimFunc, Stage};
use sparsetir_runtime::build::{build, emit, emit_cuda};
use sparsetir_runtime::{CompileOptions, Kernel};

use crate::{parse, pick_func, read_source, split_pair, stage_name, verify, Failure, Source};

/// The targets `build` knows, with what each means.
const TARGETS: &str = "c (C11 + OpenMP), cuda (CUDA C++)";

/// Options of `sparsetir build`.
pub struct Options<'a> {
    pub file: &'a Path,
    pub target: &'a str,
    pub func: Option<&'a str>,
    pub schedule: Option<&'a Path>,
    pub sets: &'a [String],
}

/// Reads a schedule file.
fn read_schedule(path: Option<&Path>) -> Result<Option<String>, Failure> {
    path.map(|p| {
        std::fs::read_to_string(p)
            .map_err(|e| Failure(format!("error: cannot read schedule {}: {e}", p.display())))
    })
    .transpose()
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
        let (_, m) = emit_cuda(f, schedule.as_deref(), &spec)?;
        print!("{}", m.source);
        return Ok(());
    }
    let c = emit(f, schedule.as_deref(), &spec)?;
    print!("{}", c.source);
    Ok(())
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
    Ok(build(f, schedule.as_deref(), &spec, &opts)?)
}
