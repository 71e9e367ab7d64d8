//! The bounded fuzzing run of CI: a fixed number of executions of every in-process target
//! (script, run and files in this process; cuda-emu, diff, diff-native and schedule meanwhile in
//! child processes) with a fixed seed, the regression corpus replayed, and the `c` target in a
//! child process with AddressSanitizer preloaded (after a control run showing ASan sees reads
//! past our arrays). The long runs are recorded in `bench/RESULTS.md`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use sparsetir_fuzz::{guard, replay_dir, setup, Fuzzer, Options, Target};

#[global_allocator]
static ALLOC: guard::LimitedAlloc = guard::LimitedAlloc;

fn out_dir(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("sparsetir-fuzz-test-{}-{tag}", std::process::id()))
}

fn options(target: Target, iters: u64, out: &Path) -> Options {
    Options {
        target,
        seed: SEED,
        iters,
        time_limit: None,
        out_dir: out.to_path_buf(),
        cache_dir: out.join("cache"),
        asan: false,
    }
}

/// Seed of every bounded run.
const SEED: u64 = 20_261_124;

/// The targets the bounded run sends to a child process (the fuzzer binary, one target at a
/// time), with their executions. They run while this process fuzzes the others: the guards
/// (allocation limits, the execution timer, the panic hook) are process-wide, so two targets
/// cannot share one process at once, and one process would leave a core idle for a minute.
const IN_CHILD: [(&str, u64); 4] = [
    // Each execution launches emulated CUDA: fewer, still thousands past validation.
    ("cuda-emu", 4_000),
    // Mutated kernels through the evaluator and both interpreters.
    ("diff", 10_000),
    // Each execution compiles a C kernel and an emulated CUDA module.
    ("diff-native", 24),
    // Random schedules on mutated kernels, through the stage III interpreter twice.
    ("schedule", 3_000),
];

/// Runs the [`IN_CHILD`] targets one after the other in child processes; the error names
/// the first that failed, with what it printed.
fn fuzz_in_children() -> Result<(), String> {
    let exe = env!("CARGO_BIN_EXE_sparsetir-fuzz");
    let out = out_dir("child");
    for (target, iters) in IN_CHILD {
        let start = Instant::now();
        let r = Command::new(exe)
            .args(["--target", target, "--iters", &iters.to_string()])
            .args(["--seed", &SEED.to_string(), "--exec-timeout", "30", "--out"])
            .arg(&out)
            .output()
            .map_err(|e| format!("cannot start {exe}: {e}"))?;
        let stdout = String::from_utf8_lossy(&r.stdout);
        eprintln!("{} ({:.1} s)", stdout.trim(), start.elapsed().as_secs_f64());
        let counted = format!("target {target}: seed {SEED}: {iters} executions in ");
        if !r.status.success() || !stdout.contains(&counted) || !stdout.contains(", 0 findings") {
            return Err(format!(
                "target {target}: {}\n{stdout}\n{}",
                r.status,
                String::from_utf8_lossy(&r.stderr)
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&out);
    Ok(())
}

/// Everything in-process runs in this one test: the guards are process-wide. The other
/// targets run meanwhile in child processes ([`IN_CHILD`]).
#[test]
fn bounded_run_and_regressions_are_clean() {
    let children = std::thread::spawn(fuzz_in_children);
    let out = out_dir("inproc");
    setup(&out, "test", Duration::from_secs(30));
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("regressions");
    let failures = replay_dir(&corpus, &options(Target::Script, 1, &out));
    assert!(failures.is_empty(), "regression corpus: {failures:#?}");
    for (target, iters) in [
        (Target::Script, 100_000),
        (Target::Run, 100_000),
        (Target::Files, 300_000),
    ] {
        let start = Instant::now();
        let stats = Fuzzer::new(options(target, iters, &out)).run();
        eprintln!(
            "target {}: {} executions in {:.1} s",
            target.name(),
            stats.executions,
            start.elapsed().as_secs_f64()
        );
        assert_eq!(stats.executions, iters);
        assert!(
            stats.findings.is_empty(),
            "target {}: {:#?}",
            target.name(),
            stats.findings
        );
    }
    let _ = std::fs::remove_dir_all(&out);
    if let Err(e) = children.join().expect("the child runs' thread ended") {
        panic!("{e}");
    }
}

/// Whether a C compiler with AddressSanitizer is here.
fn have_asan() -> bool {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let Ok(o) = Command::new(cc).arg("-print-file-name=libasan.so").output() else {
        return false;
    };
    let p = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim());
    p.is_absolute() && p.exists()
}

#[test]
fn c_target_under_asan_is_clean() {
    if !have_asan() {
        eprintln!("note: skipping: no C compiler with AddressSanitizer");
        return;
    }
    let exe = env!("CARGO_BIN_EXE_sparsetir-fuzz");
    let out = out_dir("asan");
    let run = |args: &[&str]| {
        Command::new(exe)
            .args(args)
            .arg("--out")
            .arg(&out)
            .output()
            .expect("fuzzer ran")
    };
    let control = run(&["--asan-control"]);
    let err = String::from_utf8_lossy(&control.stderr);
    if err.contains("ASan runtime does not come first") || err.contains("cannot build") {
        eprintln!("note: skipping: ASan cannot run kernels here: {err}");
        return;
    }
    assert!(
        err.contains("heap-buffer-overflow"),
        "control: {:?}: {err}",
        control.status
    );
    let r = run(&[
        "--target",
        "c",
        "--asan",
        "--iters",
        "2000",
        "--seed",
        "20261124",
        "--exec-timeout",
        "120",
    ]);
    let stdout = String::from_utf8_lossy(&r.stdout);
    assert!(
        r.status.success(),
        "{:?}\n{stdout}\n{}",
        r.status,
        String::from_utf8_lossy(&r.stderr)
    );
    assert!(stdout.contains("2000 executions"), "{stdout}");
    let _ = std::fs::remove_dir_all(&out);
}
