//! The `sparsetir` command-line tool: `fmt` (canonical text), `check` (parse + verify), `run`
//! (bind data files, execute on a backend, write results), `lower` (print a script lowered to
//! stage II or III), and the formats tools `info`, `gen`, `convert`, `pack`.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use sparsetir_eval::ArgValue;
use sparsetir_ir::{printer, IRModule, PickError, PrimFunc, Stage};
use sparsetir_runtime::gpu::GpuDevice;
use sparsetir_runtime::{read_output, Binder, Output};
use sparsetir_syntax::{parse_bytes, render, Diagnostic};

/// Large arrays start on a cache line, so the kernels' vector loads of dense rows do not
/// straddle two lines (see `sparsetir_runtime::alloc`).
#[global_allocator]
static ALLOC: sparsetir_runtime::SimdAlignedAlloc = sparsetir_runtime::SimdAlignedAlloc;

mod bench;
mod build;
mod convert;
mod demo;
mod gen;
mod info;
mod lower;
mod pack;

#[derive(Parser)]
#[command(
    name = "sparsetir",
    version,
    about = "A sparse tensor compiler: inspect, check and run sparse kernels"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print a script in canonical form (`-` reads standard input).
    Fmt {
        /// Script file, or `-` for standard input.
        file: PathBuf,
    },
    /// Parse and verify a script; report every problem with its location.
    Check {
        /// Script file, or `-` for standard input.
        file: PathBuf,
    },
    /// Run a function on data files and write the results.
    #[command(after_help = RUN_HELP)]
    Run {
        /// Script file, or `-` for standard input.
        file: PathBuf,
        /// The function to run (needed when the script defines several).
        #[arg(long)]
        func: Option<String>,
        /// Execution backend: `eval` (the stage-I reference evaluator), `interp` (lower to
        /// stage III, then the stage II/III interpreter), `c` (compile to C + OpenMP through
        /// the kernel cache; integer `--set` values are specialized into the kernel), `cuda`
        /// (CUDA through NVRTC on an NVIDIA GPU) or `cuda-emu` (the same CUDA in the CPU
        /// emulator: shared-memory races and out-of-bounds accesses are errors).
        #[arg(long, default_value = "eval")]
        backend: String,
        /// `--backend c|cuda|cuda-emu`: a schedule file (trace text; `# stage I` / `# stage II`
        /// / `# stage III` sections, stage II when none is named). The CUDA backends apply the
        /// automatic GPU schedule to every loop nest it leaves off the threads.
        #[arg(long)]
        schedule: Option<PathBuf>,
        /// `--backend c`: OpenMP threads (default: the OpenMP default).
        #[arg(long)]
        threads: Option<usize>,
        /// Bind a buffer to a file: `A=matrix.mtx` (sparse: .mtx, .tns) or `B=dense.npy`.
        #[arg(long = "bind", value_name = "BUF=PATH")]
        binds: Vec<String>,
        /// Write a buffer after the run: dense buffers as .npy, sparse ones as .mtx or .tns.
        #[arg(long = "out", value_name = "BUF=PATH")]
        outs: Vec<String>,
        /// Set a scalar parameter not implied by the data: `feat_size=32`.
        #[arg(long = "set", value_name = "PARAM=VALUE")]
        sets: Vec<String>,
        /// Run on decomposed formats (SPEC §3.1; repeatable, rules applied together, the same
        /// rules as `lower --decompose`): `hyb(parts=P,buckets=W1,W2,...)`, `bsr:B`,
        /// `ell(width=W)`, `ell(width=W)+csr`, `coo`, or a catalog rule script
        /// `FILE:param=value,...`. The bound CSR matrix is converted by the format builders;
        /// outputs are the undecomposed function's.
        #[arg(long = "decompose", value_name = "RULE")]
        decompose: Vec<String>,
    },
    /// Lower a script through the pipeline and print the result (canonical text) on stdout.
    Lower {
        /// Script file, or `-` for standard input.
        file: PathBuf,
        /// The stage to lower to: 1 (the input as is), 2 or 3.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(1..=3))]
        stage: u8,
        /// Absent coordinates behave as in stage I (reads give the default value, stores are
        /// skipped): those a binary search does not find, and those outside their dense axis
        /// (the lowering every backend runs).
        #[arg(long)]
        check_invalid_binary_search: bool,
        /// Print the module after this pass on stderr (repeatable): lower_sparse_iter,
        /// lower_sparse_buffer.
        #[arg(long = "print-after", value_name = "PASS")]
        print_after: Vec<String>,
        /// Lower only this function.
        #[arg(long)]
        func: Option<String>,
        /// Decompose the sparse buffers first (SPEC §3.1; repeatable, rules applied together):
        /// a rule script `FILE` or `FILE:param=value,...` (e.g. `bsr.rule.sp:block_size=4`), or
        /// a builtin `bsr:B`, `hyb(parts=P,buckets=W1,W2,...)`, `ell(width=W)`,
        /// `ell(width=W)+csr`, `coo`.
        #[arg(long = "decompose", value_name = "RULE")]
        decompose: Vec<String>,
        /// With --decompose: drop the format-rewrite (preprocess) iterations, keeping only the
        /// computation on the new formats.
        #[arg(long)]
        no_preprocess: bool,
        /// A function that assembles a sparse output: lower it for this phase only —
        /// `symbolic`, `numeric` (the default prints both), or the staged pass the C backend
        /// runs for SpGEMM: `bound`, `staged`, `staged_dense`, `staged_groups`, `gather`.
        #[arg(long, value_name = "PHASE")]
        phase: Option<String>,
        /// Apply a schedule file (trace text; `# stage I` / `# stage II` / `# stage III`
        /// sections) as `build` and `run` do, and print the scheduled function of `--stage`
        /// (the lowering every backend runs: binary searches checked).
        #[arg(long)]
        schedule: Option<PathBuf>,
        /// With --schedule: specialize an integer parameter first (`feat_size=32`;
        /// repeatable), as `build` does.
        #[arg(long = "set", value_name = "PARAM=VALUE")]
        sets: Vec<String>,
        /// With --schedule, at stage 3: also run the passes the C backend runs before writing
        /// C (`compact_buffer_allocation`, `init_into_cache`), printing what the C writer gets.
        #[arg(long)]
        cpu_passes: bool,
    },
    /// Specialize, schedule and lower a stage-I function and print the generated code.
    Build {
        /// Script file, or `-` for standard input.
        file: PathBuf,
        /// The code to generate: `c` (C11 + OpenMP) or `cuda` (CUDA C++; the automatic GPU
        /// schedule applies to every loop nest the schedule leaves off the threads).
        #[arg(long, default_value = "c")]
        target: String,
        /// `--target cuda`: compile the CUDA with NVRTC (no GPU needed) and write `ptx` or
        /// `cubin` to `-o` instead of printing the source.
        #[arg(long)]
        emit: Option<String>,
        /// `--emit`: the GPU architecture (`sm_80`, `sm_90`, `sm_90a`, ...).
        #[arg(long, default_value = "sm_80")]
        arch: String,
        /// `--emit`: the output file.
        #[arg(short = 'o', long = "output")]
        output: Option<PathBuf>,
        /// The function to build (needed when the script defines several).
        #[arg(long)]
        func: Option<String>,
        /// A schedule file (trace text; `# stage I` / `# stage II` / `# stage III` sections,
        /// stage II when none is named).
        #[arg(long)]
        schedule: Option<PathBuf>,
        /// Bind an integer parameter to a constant: `feat_size=32` (repeatable).
        #[arg(long = "set", value_name = "PARAM=VALUE")]
        sets: Vec<String>,
    },
    /// SpMM end to end through the C backend on a generated power-law graph: compile (cold and
    /// cached), run, time (GFLOP/s), check against an f64 reference.
    Demo {
        /// Where to write the generated files (default: a `sparsetir-demo` temp directory).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Nodes of the generated graph (rows and columns of the matrix).
        #[arg(long, default_value_t = 100_000)]
        rows: usize,
        /// Feature width of the dense operand.
        #[arg(long, default_value_t = 32)]
        feat: usize,
        /// Seed of the generated data.
        #[arg(long, default_value_t = 0)]
        seed: u64,
    },
    /// Benchmark an operator (spmm, sddmm, spmv, attention, spgemm, spadd) compiled with its
    /// default CPU schedule on Matrix Market files: median time, GFLOP/s, and a check against an
    /// independent reference.
    Bench(bench::Options),
    /// Describe a sparse file (.mtx, .tns): shape, nnz (after symmetric expansion), row-degree
    /// min/mean/max, empty rows, and the Matrix Market field and symmetry.
    Info {
        /// A `.mtx` or `.tns` file.
        file: PathBuf,
    },
    /// Generate a sparse matrix or mask (deterministic by seed) and write it as .mtx (or .tns).
    Gen {
        #[command(subcommand)]
        kind: gen::GenKind,
    },
    /// Pack a sparse file (.mtx, .tns) into an MLIR `#sparse_tensor.encoding<{...}>` and print
    /// its storage (`positions[l] : ...`, `coordinates[l] : ...`, `values : ...`).
    Pack {
        /// A `.mtx` or `.tns` file.
        file: PathBuf,
        /// The encoding attribute, e.g. `#sparse_tensor.encoding<{ map = (i, j) -> (i : dense,
        /// j : compressed) }>`.
        #[arg(long)]
        encoding: String,
        /// Values of the map's symbols, in order, comma-separated (`--symbols 3` or `3,4`).
        #[arg(long)]
        symbols: Option<String>,
        /// Also print the equivalent sparse-axis declarations (or why there is none).
        #[arg(long)]
        axes: bool,
    },
    /// Convert a sparse file (.mtx, .tns) to another file format or to the .npy arrays of a
    /// storage format (see FORMATS below).
    #[command(after_help = convert::LAYOUT_HELP)]
    Convert {
        /// Input `.mtx` or `.tns` file.
        input: PathBuf,
        /// Target format: mtx, general, tns, csr, csc, bsr:RxC, `ell[:W]`, dense.
        #[arg(long)]
        to: String,
        /// Output file (mtx, tns, dense) or directory (csr, csc, bsr, ell).
        #[arg(short = 'o', long = "output")]
        output: PathBuf,
        /// Index type of the .npy structure arrays: int32 or int64.
        #[arg(long, default_value = "int32")]
        idtype: String,
        /// Value type of the .npy value arrays: float32 or float64.
        #[arg(long, default_value = "float32")]
        dtype: String,
        /// BSR: allow blocks that overhang the matrix (zero-filled).
        #[arg(long)]
        pad: bool,
    },
}

/// `run --help`'s closing notes.
const RUN_HELP: &str = "DECOMPOSED FORMATS:
  With --decompose, the function is decomposed by the rules as `lower --decompose ... \
--no-preprocess` prints it, and the new formats' arrays are built from the bound CSR matrix by \
the format builders (the preprocess copy is not run): hyb (column parts x degree buckets, \
rows longer than the largest bucket split, padding slots naming a column their row does not \
store), bsr:B (rows and columns must be multiples of B), ell(width=W) (no row longer than W) \
or ell(width=W)+csr (longer rows' remainder in DCSR), coo (the row of every stored element). \
Padding columns also stay inside every dense dimension the column coordinate indexes (B[j, j] \
keeps them below B's second extent), as validation asks of the stored ones. Outputs are the \
undecomposed function's, written as without --decompose.

  sparsetir run csrmm.sp --decompose 'hyb(parts=1,buckets=1,2,4)' --bind A=g.mtx \
--bind B=feat.npy --out C=out.npy --backend c

ASSEMBLED OUTPUTS:
  An output over an axis declared `assembled=True` (spadd, spmul, spgemm) gets its structure \
from the run: bind only the operands, each from its own file (the sizes follow from their \
shapes, which must conform), and write the result with --out (.mtx). --backend eval only, for \
now.

  sparsetir run spgemm.sp --bind A=a.mtx --bind B=b.mtx --out C=c.mtx";

/// Subcommands whose usage errors exit with code 1 (the older ones keep clap's code 2).
const EXIT_ONE_ON_USAGE: &[&str] = &["info", "gen", "convert", "pack", "lower", "bench", "build"];

/// A user-facing failure: printed to stderr, exit code 1.
struct Failure(String);

impl<E: std::fmt::Display> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure(format!("error: {e}"))
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let sub = std::env::args().nth(1).unwrap_or_default();
            if e.use_stderr() && EXIT_ONE_ON_USAGE.contains(&sub.as_str()) {
                let _ = e.print();
                return ExitCode::from(1);
            }
            e.exit()
        }
    };
    let result = match cli.command {
        Command::Fmt { file } => cmd_fmt(&file),
        Command::Check { file } => cmd_check(&file),
        Command::Run {
            file,
            func,
            backend,
            schedule,
            threads,
            binds,
            outs,
            sets,
            decompose,
        } => cmd_run(
            &file,
            &RunOptions {
                func: func.as_deref(),
                backend: &backend,
                binds: &binds,
                outs: &outs,
                sets: &sets,
                schedule: schedule.as_deref(),
                threads,
                decompose: &decompose,
            },
        ),
        Command::Build {
            file,
            target,
            emit,
            arch,
            output,
            func,
            schedule,
            sets,
        } => build::run(&build::Options {
            file: &file,
            target: &target,
            emit: emit.as_deref(),
            arch: &arch,
            output: output.as_deref(),
            func: func.as_deref(),
            schedule: schedule.as_deref(),
            sets: &sets,
        }),
        Command::Lower {
            file,
            stage,
            check_invalid_binary_search,
            print_after,
            func,
            decompose,
            no_preprocess,
            phase,
            schedule,
            sets,
            cpu_passes,
        } => lower::run(&lower::Options {
            file: &file,
            stage,
            check_invalid_binary_search,
            print_after: &print_after,
            func: func.as_deref(),
            decompose: &decompose,
            no_preprocess,
            phase: phase.as_deref(),
            schedule: schedule.as_deref(),
            sets: &sets,
            cpu_passes,
        }),
        Command::Demo {
            dir,
            rows,
            feat,
            seed,
        } => demo::run(dir, rows, feat, seed),
        Command::Bench(options) => bench::run(&options),
        Command::Info { file } => info::run(&file),
        Command::Gen { kind } => gen::run(kind),
        Command::Pack {
            file,
            encoding,
            symbols,
            axes,
        } => pack::run(&file, &encoding, symbols.as_deref(), axes),
        Command::Convert {
            input,
            to,
            output,
            idtype,
            dtype,
            pad,
        } => convert::run(&convert::Options {
            input: &input,
            to: &to,
            output: &output,
            idtype: &idtype,
            dtype: &dtype,
            pad,
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(msg)) => {
            eprintln!("{}", msg.trim_end());
            ExitCode::from(1)
        }
    }
}

/// The script text and its display name.
struct Source {
    name: String,
    bytes: Vec<u8>,
}

impl Source {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
    fn fail(&self, diags: &[Diagnostic]) -> Failure {
        Failure(render(diags, &self.name, &self.text()))
    }
}

/// Reads a `.npy` file, naming it in every error (a missing file's error names it already).
fn read_npy_named(file: &str) -> Result<sparsetir_formats::Tensor, Failure> {
    sparsetir_formats::read_npy(file).map_err(|e| {
        let text = e.to_string();
        if text.contains(file) {
            Failure(format!("error: {text}"))
        } else {
            Failure(format!("error: {file}: {text}"))
        }
    })
}

fn read_source(path: &Path) -> Result<Source, Failure> {
    let stdin = path == Path::new("-") || path == Path::new("/dev/stdin");
    let mut bytes = Vec::new();
    if stdin {
        std::io::stdin()
            .read_to_end(&mut bytes)
            .map_err(|e| Failure(format!("error: cannot read standard input: {e}")))?;
        return Ok(Source {
            name: "<stdin>".into(),
            bytes,
        });
    }
    let bytes = std::fs::read(path)
        .map_err(|e| Failure(format!("error: cannot read {}: {e}", path.display())))?;
    Ok(Source {
        name: path.display().to_string(),
        bytes,
    })
}

fn parse(src: &Source) -> Result<IRModule, Failure> {
    parse_bytes(&src.bytes).map_err(|d| src.fail(&d))
}

fn verify(src: &Source, module: &IRModule) -> Result<(), Failure> {
    let diags = sparsetir_syntax::verify_diagnostics(module);
    if diags.is_empty() {
        Ok(())
    } else {
        Err(src.fail(&diags))
    }
}

fn cmd_fmt(path: &Path) -> Result<(), Failure> {
    let src = read_source(path)?;
    let module = parse(&src)?;
    print!("{}", printer::print_module(&module));
    Ok(())
}

fn stage_name(s: Stage) -> &'static str {
    match s {
        Stage::I => "stage I",
        Stage::II => "stage II",
        Stage::III => "stage III",
    }
}

fn cmd_check(path: &Path) -> Result<(), Failure> {
    let src = read_source(path)?;
    let module = parse(&src)?;
    verify(&src, &module)?;
    for f in &module.funcs {
        println!("{}: `{}` ok ({})", src.name, f.name, stage_name(f.stage()));
    }
    Ok(())
}

fn split_pair<'a>(s: &'a str, flag: &str) -> Result<(&'a str, &'a str), Failure> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() && !v.is_empty() => Ok((k.trim(), v.trim())),
        _ => Err(Failure(format!(
            "error: --{flag} expects NAME=VALUE, got `{s}`"
        ))),
    }
}

fn pick_func<'m>(module: &'m IRModule, name: Option<&str>) -> Result<&'m PrimFunc, Failure> {
    module.pick(name).map_err(|e| match e {
        PickError::Several { .. } => Failure(format!("error: {e}: choose one with --func")),
        e => Failure(format!("error: {e}")),
    })
}

fn extension(path: &str) -> String {
    Path::new(path)
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase()
}

/// The options of `sparsetir run`.
#[derive(Clone, Copy)]
struct RunOptions<'a> {
    func: Option<&'a str>,
    backend: &'a str,
    binds: &'a [String],
    outs: &'a [String],
    sets: &'a [String],
    /// `--backend c`: the schedule file and OpenMP threads.
    schedule: Option<&'a Path>,
    threads: Option<usize>,
    /// `--decompose` rules (see `lower::for_run`).
    decompose: &'a [String],
}

/// `sparsetir run`.
fn cmd_run(path: &Path, o: &RunOptions) -> Result<(), Failure> {
    let RunOptions {
        func,
        backend,
        binds,
        outs,
        sets,
        schedule,
        threads,
        decompose,
    } = *o;
    let gpu = match backend {
        "cuda" => Some(GpuDevice::Cuda),
        "cuda-emu" => Some(GpuDevice::Emulator),
        _ => None,
    };
    if backend != "eval" && backend != "interp" && backend != "c" && gpu.is_none() {
        return Err(Failure(format!(
            "error: unsupported backend `{backend}` (available: eval — the stage-I reference \
             evaluator; interp — lowering to stage III and the stage II/III interpreter; c — \
             compiled C + OpenMP; cuda — CUDA on an NVIDIA GPU; cuda-emu — the generated CUDA \
             in the CPU emulator)"
        )));
    }
    if backend != "c" && threads.is_some() {
        return Err(Failure(
            "error: --threads applies to --backend c only".into(),
        ));
    }
    if backend != "c" && gpu.is_none() && schedule.is_some() {
        return Err(Failure(
            "error: --schedule applies to --backend c, cuda and cuda-emu only".into(),
        ));
    }
    let src = read_source(path)?;
    let module = parse(&src)?;
    verify(&src, &module)?;
    let f = pick_func(&module, func)?;
    if f.stage() != Stage::I {
        return Err(Failure(format!(
            "error: the {backend} backend runs stage-I functions; `{}` is {}",
            f.name,
            stage_name(f.stage())
        )));
    }
    // Outputs whose structure the kernel assembles (issue 15): two phases on the interpreter
    // and in C (`runtime::assembly`); not on the GPU yet.
    let assembling = sparsetir_runtime::assembly::assembles(f);
    if let Some((_, a)) = f.axes.iter().find(|(_, a)| a.assembled) {
        if !matches!(backend, "eval" | "interp" | "c") || !decompose.is_empty() {
            return Err(Failure(format!(
                "error: `{}` assembles the structure of its output (axis `{}`, \
                 assembled=True): assembled outputs run on --backend eval, interp or c, \
                 without --decompose",
                f.name, a.name
            )));
        }
    }
    // Decompose and compile first: a lowering failure is reported before any data is read.
    let decomposed = if decompose.is_empty() {
        None
    } else {
        Some(lower::for_run(&src, f, decompose)?)
    };
    // The function that runs (`f` decomposed, or `f`); data is bound, and outputs read, for `f`.
    let g = decomposed.as_ref().map_or(f, |(g, _)| g);
    let lowered = if backend == "interp" && !assembling {
        Some(lower::for_interp(&src, g)?)
    } else {
        None
    };
    let assembled = if backend == "c" && assembling {
        Some(build::for_run_assembled(&src, g, schedule, threads, sets)?)
    } else {
        None
    };
    let native = if backend == "c" && !assembling {
        Some(build::for_run(&src, g, schedule, threads, sets)?)
    } else {
        None
    };
    let gpu_kernel = match gpu {
        Some(device) => Some(build::for_gpu(&src, g, schedule, sets, device)?),
        None => None,
    };
    let mut binder = Binder::new(f);
    for s in sets {
        let (k, v) = split_pair(s, "set")?;
        binder.set(k, v)?;
    }
    for b in binds {
        let (buf, file) = split_pair(b, "bind")?;
        // A name that is not a buffer may be a handle parameter bound to a raw array
        // (`--bind indptr=indptr.npy`, `--bind a=values.npy`).
        let is_buffer = f.buffer_by_name(buf).is_some();
        if !is_buffer && f.param(buf).is_some() {
            if extension(file) != "npy" {
                return Err(Failure(format!(
                    "error: --bind {buf}={file}: parameter `{buf}` takes a 1-D .npy array"
                )));
            }
            binder.bind_param_array(buf, read_npy_named(file)?)?;
            continue;
        }
        binder.check_bindable(buf)?;
        binder.set_source(buf, file);
        match extension(file).as_str() {
            // (Read as `info` reads them: errors name the file and the line.)
            "mtx" | "tns" => binder.bind_coo(buf, &info::read_sparse(Path::new(file))?)?,
            "npy" => binder.bind_tensor(buf, read_npy_named(file)?)?,
            other => {
                return Err(Failure(format!(
                    "error: --bind {buf}={file}: unknown file type `.{other}` (expected .mtx, .tns or .npy)"
                )))
            }
        }
    }
    // Check the output names before running.
    let mut out_pairs = Vec::new();
    for o in outs {
        let (buf, file) = split_pair(o, "out")?;
        if f.buffer_by_name(buf).is_none() {
            return Err(Failure(format!(
                "error: --out {buf}: function `{}` has no buffer `{buf}`",
                f.name
            )));
        }
        out_pairs.push((buf.to_string(), file.to_string()));
    }
    let mut args: HashMap<String, ArgValue> = binder.finish()?;
    if let Some((_, d)) = &decomposed {
        let extra = d.arguments(f, &args).map_err(|e| {
            Failure(format!(
                "error: --decompose {}: {e}",
                decompose.join(" --decompose ")
            ))
        })?;
        args.extend(extra);
    }
    if let Some(k) = &native {
        k.run(&mut args)?;
    }
    if let Some(k) = &assembled {
        k.run(&mut args)?;
    }
    if assembling && backend == "interp" {
        sparsetir_runtime::assembly::run_interp(g, &mut args)?;
    }
    if let Some(k) = &gpu_kernel {
        k.run(&mut args)?;
    }
    let result = match &lowered {
        _ if native.is_some() || gpu_kernel.is_some() || assembled.is_some() => Ok(()),
        None if assembling && backend == "interp" => Ok(()),
        Some(g) => sparsetir_eval::run_func(g, &mut args),
        None => sparsetir_eval::eval_func(g, &mut args),
    };
    result.map_err(|e| {
        if e.span.is_unknown() {
            Failure(format!("error: {}", e.message))
        } else {
            src.fail(&[Diagnostic {
                span: e.span,
                message: e.message,
                notes: Vec::new(),
            }])
        }
    })?;
    for (buf, file) in out_pairs {
        let ext = extension(&file);
        match (read_output(f, &args, &buf)?, ext.as_str()) {
            (Output::Dense(t), "npy") => sparsetir_formats::write_npy(&file, &t)?,
            (Output::Sparse(c), "mtx") if c.rank() == 2 => sparsetir_formats::write_mtx(&file, &c)?,
            (Output::Sparse(c), "tns") => sparsetir_formats::write_tns(&file, &c)?,
            (Output::Dense(_), _) => {
                return Err(Failure(format!(
                    "error: --out {buf}={file}: `{buf}` is dense: write it as .npy"
                )))
            }
            (Output::Sparse(c), _) => {
                return Err(Failure(format!(
                "error: --out {buf}={file}: `{buf}` is sparse with {} dimensions: write it as {}",
                c.rank(),
                if c.rank() == 2 {
                    ".mtx or .tns"
                } else {
                    ".tns"
                }
            )))
            }
        }
    }
    Ok(())
}
