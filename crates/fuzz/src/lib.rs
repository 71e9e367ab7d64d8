//! Seeded, structure-aware fuzzing of sparsetir (no coverage instrumentation: stable Rust has
//! no sanitizer coverage without nightly). Targets:
//! - `script`: parse → verify → print → reparse (round trip) → lower to stage III;
//! - `run`: a catalog kernel with mutated bound data through the binder, the reference
//!   evaluator and the stage II/III interpreter, which must not index out of its buffers where
//!   validation accepts the data and the evaluator runs it (the access a native backend would
//!   make out of bounds);
//! - `diff` and `diff-native`: catalog kernels with mutated expressions on valid data, whose
//!   results on the stage II/III interpreters (and, for `diff-native`, the C backend and the
//!   CUDA emulator) must equal the reference evaluator's ([`diff`]);
//! - `schedule`: random schedules (stage I, then II or III) on mutated catalog kernels, whose
//!   stage III interpreter must give the evaluator's results, also with every parallel and
//!   thread-bound loop run backwards, and with `schedule-native` on the emulator or the C
//!   backend ([`schedule`]);
//! - `files`: the `.mtx`/`.tns`/`.npy` readers on mutated bytes, and binding what they read;
//! - `c`: mutated data launched on compiled kernels (validation before launch), meant to run
//!   with AddressSanitizer preloaded (`--asan` in the binary).
//!
//! Every execution is bounded ([`guard`]): allocations past a limit, executions past a time
//! limit and fatal signals are reported with the input saved. Panics and broken invariants are
//! findings too, saved by [`Fuzzer`].

pub mod data;
pub mod diff;
pub mod files;
pub mod guard;
pub mod mutate;
pub mod schedule;
pub mod script;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use mutate::Mutator;

/// What is fuzzed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Script,
    Run,
    Files,
    C,
    /// The catalog kernels' CUDA (default GPU schedules) in the CPU emulator, whose bounds,
    /// race and barrier checks turn any out-of-bounds access, race or deadlock of generated
    /// code on validated data into a finding.
    CudaEmu,
    /// Mutated catalog kernels on valid data: the stage II/III interpreters against the
    /// evaluator.
    Diff,
    /// [`Target::Diff`] plus the C backend and the CUDA emulator (a compile per input).
    DiffNative,
    /// Random schedules on mutated catalog kernels: the stage III interpreter against the
    /// evaluator, in order and with the loops run apart run backwards.
    Schedule,
    /// [`Target::Schedule`] plus the backend the schedule is for (the CUDA emulator or C).
    ScheduleNative,
}

impl Target {
    pub const ALL: [Target; 9] = [
        Target::Script,
        Target::Run,
        Target::Files,
        Target::C,
        Target::CudaEmu,
        Target::Diff,
        Target::DiffNative,
        Target::Schedule,
        Target::ScheduleNative,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Target::Script => "script",
            Target::Run => "run",
            Target::Files => "files",
            Target::C => "c",
            Target::CudaEmu => "cuda-emu",
            Target::Diff => "diff",
            Target::DiffNative => "diff-native",
            Target::Schedule => "schedule",
            Target::ScheduleNative => "schedule-native",
        }
    }

    pub fn parse(s: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|t| t.name() == s)
    }

    /// File extension of saved inputs.
    pub fn extension(self) -> &'static str {
        match self {
            Target::Script => "sp",
            Target::Run | Target::C | Target::CudaEmu => "run",
            Target::Files => "bin",
            Target::Diff | Target::DiffNative => "diff",
            Target::Schedule | Target::ScheduleNative => "sched",
        }
    }
}

/// A finding: what broke, and where its input was saved.
#[derive(Clone, Debug)]
pub struct Finding {
    pub kind: String,
    pub message: String,
    pub saved: Option<PathBuf>,
}

/// The figures of one fuzzing run.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub executions: u64,
    pub elapsed: Duration,
    pub findings: Vec<Finding>,
}

impl Stats {
    pub fn per_second(&self) -> f64 {
        self.executions as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Options of a run.
#[derive(Clone, Debug)]
pub struct Options {
    pub target: Target,
    pub seed: u64,
    pub iters: u64,
    pub time_limit: Option<Duration>,
    /// Where findings are saved.
    pub out_dir: PathBuf,
    /// Compiled-kernel cache of the `c` target.
    pub cache_dir: PathBuf,
    /// Whether ASan is loaded (the `c` target compiles kernels with `-fsanitize=address`).
    pub asan: bool,
}

/// Executions that got past input checking (script: parsed and verified; files: read; run/c:
/// bound, or validated and launched): a measure of how deep the mutations reach.
pub static DEEP: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

pub(crate) fn deep() {
    DEEP.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// Process setup for fuzzing: memory and time limits (arrays sized by user data limited to
/// 256 MiB by `sparsetir_formats::limits`, well under the guard's 1 GiB single allocation), the
/// crash handlers and watchdog, and quiet panics.
pub fn setup(out_dir: &Path, label: &str, exec_timeout: Duration) {
    sparsetir_formats::limits::set_max_alloc_bytes(256 << 20);
    guard::set_limits(1 << 30, 2 << 30, exec_timeout);
    guard::install(out_dir, label);
    quiet_panics();
}

static PANIC_MESSAGE: Mutex<Option<String>> = Mutex::new(None);

/// Replaces the panic hook with one that records the message (with its location) of panics
/// inside an execution instead of printing it (findings are reported by the fuzzer); other
/// panics go to the previous hook.
pub fn quiet_panics() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !guard::armed() {
            return previous(info);
        }
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "<non-string panic>".into());
        let loc = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let trace = if std::env::var_os("SPARSETIR_FUZZ_BACKTRACE").is_some() {
            format!("\n{}", std::backtrace::Backtrace::force_capture())
        } else {
            String::new()
        };
        if let Ok(mut m) = PANIC_MESSAGE.lock() {
            *m = Some(format!("{msg} at {loc}{trace}"));
        }
    }));
}

/// Executes one input of `target` under the guards; `Err` is a finding (kind, message). For
/// `run`/`c` the bytes are [`data::RunInput`] text.
pub fn execute(target: Target, bytes: &[u8], opts: &Options) -> Result<(), (String, String)> {
    guard::arm(bytes);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match target {
        Target::Script => script::execute(bytes),
        Target::Files => files::execute(bytes),
        Target::Diff | Target::DiffNative => {
            match diff::DiffInput::from_text(&String::from_utf8_lossy(bytes)) {
                Ok(input) => {
                    let native = (target == Target::DiffNative).then_some(opts.cache_dir.as_path());
                    diff::execute(&input, native)
                }
                Err(_) => Ok(()),
            }
        }
        Target::Schedule | Target::ScheduleNative => {
            match schedule::ScheduleInput::from_text(&String::from_utf8_lossy(bytes)) {
                Ok(input) => {
                    let native =
                        (target == Target::ScheduleNative).then_some(opts.cache_dir.as_path());
                    schedule::execute(&input, native)
                }
                Err(_) => Ok(()),
            }
        }
        Target::Run | Target::C | Target::CudaEmu => {
            let text = String::from_utf8_lossy(bytes);
            match data::RunInput::from_text(&text) {
                Ok(input) if target == Target::Run => data::execute(&input),
                Ok(input) if target == Target::CudaEmu => {
                    data::execute_cuda_emu(&input, &opts.cache_dir)
                }
                Ok(input) => data::execute_c(&input, &data::c_options(&opts.cache_dir, opts.asan)),
                Err(_) => Ok(()),
            }
        }
    }));
    guard::disarm();
    match r {
        Ok(Ok(())) => Ok(()),
        Ok(Err(msg)) => Err(("invariant".into(), msg)),
        Err(_) => {
            let msg = PANIC_MESSAGE
                .lock()
                .ok()
                .and_then(|mut m| m.take())
                .unwrap_or_else(|| "panic".into());
            Err(("panic".into(), msg))
        }
    }
}

/// The fuzzing loop of one target.
pub struct Fuzzer {
    opts: Options,
    m: Mutator,
    scripts: Vec<String>,
    /// How many of `scripts` (the first ones) are valid.
    valid_scripts: usize,
    files: Vec<Vec<u8>>,
}

impl Fuzzer {
    pub fn new(opts: Options) -> Fuzzer {
        let ((scripts, valid_scripts), files) = match opts.target {
            Target::Script => (script::seeds(), Vec::new()),
            Target::Files => ((Vec::new(), 0), files::seeds()),
            _ => ((Vec::new(), 0), Vec::new()),
        };
        if opts.target == Target::C {
            data::prepare_c(&data::c_options(&opts.cache_dir, opts.asan));
        }
        if opts.target == Target::CudaEmu {
            data::prepare_cuda_emu(&opts.cache_dir);
        }
        Fuzzer {
            m: Mutator::new(opts.seed),
            opts,
            scripts,
            valid_scripts,
            files,
        }
    }

    /// The next input (deterministic in the seed).
    fn next_input(&mut self) -> Vec<u8> {
        match self.opts.target {
            Target::Script => {
                // Mostly valid seeds: mutations of them reach the verifier and lowering.
                let n = if self.m.chance(0.8) && self.valid_scripts > 0 {
                    self.valid_scripts
                } else {
                    self.scripts.len()
                };
                let s = self.scripts[self.m.below(n)].clone();
                self.m.script(&s, &self.scripts).into_bytes()
            }
            Target::Files => {
                let s = self.m.pick(&self.files).clone();
                files::mutate(&mut self.m, &s)
            }
            Target::Run | Target::C | Target::CudaEmu => {
                let kernels = if matches!(self.opts.target, Target::C | Target::CudaEmu) {
                    data::C_KERNELS
                } else {
                    data::RUN_KERNELS
                };
                let Some(mut input) = data::RunInput::generate(&mut self.m, kernels) else {
                    return Vec::new();
                };
                // Mostly mutated; some valid runs keep the happy path exercised.
                if !self.m.chance(0.1) {
                    input.mutate(&mut self.m);
                }
                input.to_text().into_bytes()
            }
            Target::Schedule | Target::ScheduleNative => {
                schedule::ScheduleInput::generate(&mut self.m)
                    .map(|s| s.to_text().into_bytes())
                    .unwrap_or_default()
            }
            Target::Diff | Target::DiffNative => {
                let stores = if self.opts.target == Target::Diff {
                    diff::Stores::Any
                } else {
                    diff::Stores::Kept
                };
                diff::DiffInput::generate(&mut self.m, stores)
            }
            .map(|d| d.to_text().into_bytes())
            .unwrap_or_default(),
        }
    }

    /// Runs until `iters` executions or the time limit, whichever comes first.
    pub fn run(&mut self) -> Stats {
        let start = Instant::now();
        let mut stats = Stats::default();
        let limit = self.opts.time_limit;
        let within_time = |start: Instant| match limit {
            Some(t) => start.elapsed() < t,
            None => true,
        };
        while stats.executions < self.opts.iters && within_time(start) {
            let input = self.next_input();
            stats.executions += 1;
            if let Err((kind, message)) = execute(self.opts.target, &input, &self.opts) {
                let saved = self.save(&kind, &input);
                stats.findings.push(Finding {
                    kind,
                    message,
                    saved,
                });
            }
        }
        stats.elapsed = start.elapsed();
        stats
    }

    fn save(&self, kind: &str, input: &[u8]) -> Option<PathBuf> {
        std::fs::create_dir_all(&self.opts.out_dir).ok()?;
        let h = blake_free_hash(input);
        let p = self.opts.out_dir.join(format!(
            "{kind}-{}-{h:016x}.{}",
            self.opts.target.name(),
            self.opts.target.extension()
        ));
        std::fs::write(&p, input).ok()?;
        Some(p)
    }
}

/// FNV-1a: a stable name for a saved input.
fn blake_free_hash(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf29ce484222325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100000001b3)
    })
}

/// Replays every file of a regression corpus directory: `<dir>/<target>/*`.
pub fn replay_dir(dir: &Path, opts: &Options) -> Vec<(PathBuf, String, String)> {
    let mut failures = Vec::new();
    for target in Target::ALL {
        let Ok(entries) = std::fs::read_dir(dir.join(target.name())) else {
            continue;
        };
        let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        for p in paths {
            let Ok(bytes) = std::fs::read(&p) else {
                continue;
            };
            let o = Options {
                target,
                ..opts.clone()
            };
            if let Err((kind, msg)) = execute(target, &bytes, &o) {
                failures.push((p, kind, msg));
            }
        }
    }
    failures
}
