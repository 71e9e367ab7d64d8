//! `sparsetir-fuzz --target T --iters N --seed S [--time-limit SECS]`: runs one fuzz target
//! (or `all`), prints executions per second and every finding (its input saved under `--out`).
//! `--replay DIR` replays a regression corpus instead; `--asan` re-executes the process with
//! AddressSanitizer preloaded (for the `c` target).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use sparsetir_fuzz::{guard, replay_dir, Fuzzer, Options, Target};

#[global_allocator]
static ALLOC: guard::LimitedAlloc = guard::LimitedAlloc;

const USAGE: &str = "usage: sparsetir-fuzz --target script|run|files|c|cuda-emu|diff|diff-native|schedule|schedule-native|all [--iters N] [--seed S] \
[--time-limit SECS] [--exec-timeout SECS] [--out DIR] [--asan] [--asan-control] [--input FILE] | --replay DIR";

fn main() -> ExitCode {
    let mut target = "all".to_string();
    let mut iters = u64::MAX;
    let mut seed = 0u64;
    let mut time_limit = None;
    let mut exec_timeout = 10.0f64;
    let mut out = PathBuf::from("fuzz-findings");
    let mut asan = false;
    let mut replay = None;
    let mut control = false;
    let mut input: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_default();
        match a.as_str() {
            "--target" => target = val(),
            "--iters" => iters = val().parse().unwrap_or(0),
            "--seed" => seed = val().parse().unwrap_or(0),
            "--time-limit" => time_limit = val().parse::<f64>().ok().map(Duration::from_secs_f64),
            "--exec-timeout" => exec_timeout = val().parse().unwrap_or(10.0),
            "--out" => out = PathBuf::from(val()),
            "--replay" => replay = Some(PathBuf::from(val())),
            "--input" => input = Some(PathBuf::from(val())),
            "--asan" => asan = true,
            "--asan-control" => {
                asan = true;
                control = true;
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("error: unknown argument `{other}`\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    if asan && std::env::var_os("SPARSETIR_FUZZ_ASAN").is_none() {
        return reexec_with_asan();
    }
    let asan = std::env::var_os("SPARSETIR_FUZZ_ASAN").is_some();
    let targets: Vec<Target> = if target == "all" {
        Target::ALL.to_vec()
    } else {
        match Target::parse(&target) {
            Some(t) => vec![t],
            None => {
                eprintln!("error: unknown target `{target}`\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    };
    sparsetir_fuzz::setup(
        &out,
        &target,
        Duration::from_secs_f64(exec_timeout.max(0.01)),
    );
    // (The control run ends in AddressSanitizer's abort, before the cleanup at the end: its
    // cache goes in the output directory rather than stay behind in the temporary one.)
    let cache_dir = if control {
        out.join("asan-control-cache")
    } else {
        std::env::temp_dir().join(format!("sparsetir-fuzz-cache-{}", std::process::id()))
    };
    let base = Options {
        target: Target::Script,
        seed,
        iters,
        time_limit,
        out_dir: out.clone(),
        cache_dir: cache_dir.clone(),
        asan,
    };
    let mut failed = false;
    if control {
        let opts = sparsetir_fuzz::data::c_options(&cache_dir, asan);
        if let Err(e) = sparsetir_fuzz::data::asan_control(&opts) {
            println!("control: {e}");
            failed = true;
        }
    } else if let Some(file) = input {
        let bytes = std::fs::read(&file).unwrap_or_default();
        let o = Options {
            target: targets[0],
            ..base.clone()
        };
        if let Err((kind, msg)) = sparsetir_fuzz::execute(targets[0], &bytes, &o) {
            println!("FINDING {kind}: {msg}");
            failed = true;
        }
    } else if let Some(dir) = replay {
        for (p, kind, msg) in replay_dir(&dir, &base) {
            println!("FINDING {kind}: {}: {msg}", p.display());
            failed = true;
        }
    } else {
        for t in targets {
            let mut f = Fuzzer::new(Options {
                target: t,
                ..base.clone()
            });
            let before = sparsetir_fuzz::DEEP.load(std::sync::atomic::Ordering::Relaxed);
            let s = f.run();
            let deep = sparsetir_fuzz::DEEP.load(std::sync::atomic::Ordering::Relaxed) - before;
            println!(
                "target {}: seed {seed}: {} executions in {:.1} s ({:.0} exec/s), {deep} past \
                 input checks, {} findings",
                t.name(),
                s.executions,
                s.elapsed.as_secs_f64(),
                s.per_second(),
                s.findings.len()
            );
            for fd in &s.findings {
                failed = true;
                let first = fd.message.lines().next().unwrap_or("");
                match &fd.saved {
                    Some(p) => println!("FINDING {}: {first} (input: {})", fd.kind, p.display()),
                    None => println!("FINDING {}: {first}", fd.kind),
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&cache_dir);
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Runs this same command again with ASan's runtime preloaded.
fn reexec_with_asan() -> ExitCode {
    let Some(lib) = libasan() else {
        eprintln!("error: --asan: the C compiler has no AddressSanitizer runtime");
        return ExitCode::from(2);
    };
    let exe = std::env::current_exe().expect("own path");
    let status = std::process::Command::new(exe)
        .args(std::env::args().skip(1))
        .env("SPARSETIR_FUZZ_ASAN", "1")
        .env("LD_PRELOAD", lib)
        .env(
            "ASAN_OPTIONS",
            "detect_leaks=0:abort_on_error=0:exitcode=77",
        )
        .status();
    match status {
        Ok(s) if s.success() => ExitCode::SUCCESS,
        Ok(s) => {
            eprintln!("sparsetir-fuzz: the ASan run ended with {s}");
            ExitCode::from(s.code().unwrap_or(1).clamp(1, 255) as u8)
        }
        Err(e) => {
            eprintln!("error: cannot re-execute under ASan: {e}");
            ExitCode::from(2)
        }
    }
}

/// Where AddressSanitizer's runtime lives, if the C compiler ships it.
pub fn libasan() -> Option<PathBuf> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = std::process::Command::new(cc)
        .arg("-print-file-name=libasan.so")
        .output()
        .ok()?;
    let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    (p.is_absolute() && p.exists()).then_some(p)
}
