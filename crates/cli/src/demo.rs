//! `sparsetir demo`: SpMM end to end through the C backend on a generated power-law graph.
//! Generates a Chung–Lu graph (`sparsetir_formats::gen::chung_lu`) and writes it as `.mtx`,
//! compiles the catalog's csrmm with its default CPU schedule (feature width specialised) —
//! once cold, to show the compile time, then through the kernel cache — runs and times it,
//! checks the result against an independent f64 reference and writes it as `.npy`.

use std::path::PathBuf;
use std::time::Instant;

use sparsetir_eval::ArgValue;
use sparsetir_formats::{Tensor, TensorData};
use sparsetir_runtime::{CacheOutcome, CompileOptions, TimingOptions};

use crate::bench::{self, Op};
use crate::Failure;

/// Power-law exponent of the generated graph's degree distribution.
const EXPONENT: f64 = 2.1;
/// Mean degree of the generated graph (capped by the number of nodes).
const AVG_DEGREE: f64 = 16.0;

pub fn run(dir: Option<PathBuf>, rows: usize, feat: usize, seed: u64) -> Result<(), Failure> {
    if rows == 0 || feat == 0 {
        return Err(Failure(
            "error: --rows and --feat must be positive".to_string(),
        ));
    }
    let dir = dir.unwrap_or_else(|| std::env::temp_dir().join("sparsetir-demo"));
    std::fs::create_dir_all(&dir)
        .map_err(|e| Failure(format!("error: cannot create {}: {e}", dir.display())))?;
    let a_path = dir.join("A.mtx");
    let c_path = dir.join("C.npy");

    // 1. The graph, written as a Matrix Market file and read back as CSR.
    let start = Instant::now();
    let avg = AVG_DEGREE.min(rows.saturating_sub(1) as f64);
    let graph = sparsetir_formats::gen::chung_lu(rows, EXPONENT, avg, seed)
        .map_err(|e| Failure(format!("error: generating the graph: {e}")))?;
    sparsetir_formats::write_mtx(&a_path, &graph)?;
    let a = bench::load_csr(&a_path)?;
    let max_deg = (0..a.rows)
        .map(|i| a.indptr[i + 1] - a.indptr[i])
        .max()
        .unwrap_or(0);
    println!(
        "sparsetir demo: SpMM C = A * B, A a power-law graph (Chung-Lu, exponent {EXPONENT}): \
         {rows} x {rows}, {} stored entries (max row {max_deg}), B {rows} x {feat}",
        a.nnz()
    );
    println!(
        "  graph generated and written to {} in {:.0} ms",
        a_path.display(),
        start.elapsed().as_secs_f64() * 1e3
    );

    // 2. Compile: cold (an empty cache), then through the kernel cache.
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let opts = CompileOptions {
        threads: Some(threads),
        flags: bench::BENCH_CFLAGS.iter().map(|s| s.to_string()).collect(),
        ..CompileOptions::default()
    };
    let schedule = sparsetir_ops::cpu_schedule("csrmm");
    let built = bench::build(Op::Spmm, feat, schedule, &opts, sparsetir_ir::DType::F32)?;
    println!(
        "  kernel: catalog csrmm + default CPU schedule, feat_size = {feat}; cold compile \
         {:.0} ms; through the kernel cache {:.2} ms ({}, front end {:.1} ms)",
        built.compile_cold.as_secs_f64() * 1e3,
        built.load.as_secs_f64() * 1e3,
        match built.outcome {
            CacheOutcome::Hit => "a hit: loaded",
            CacheOutcome::Miss => "a miss: compiled and stored; the next run loads it",
            CacheOutcome::Rebuilt => "an unusable entry: rebuilt",
        },
        built.frontend.as_secs_f64() * 1e3
    );

    // 3. Run and time.
    let dense_b = bench::random_values(3, a.cols * feat, 0.0);
    let mut args = bench::arguments(Op::Spmm, &a, feat, &[], &dense_b);
    let timing = built.kernel.time(
        &mut args,
        TimingOptions {
            warmup: 2,
            repeats: 10,
            warmup_time: std::time::Duration::from_millis(100),
        },
    )?;
    let gflops = Op::Spmm.flops(a.nnz(), feat) / timing.median.max(1e-12) / 1e9;
    println!(
        "  run: median {:.3} ms over 10 launches on {threads} thread(s): {gflops:.2} GFLOP/s",
        timing.median * 1e3
    );

    // 4. Check against plain f64 loops over the CSR arrays, and write the result.
    let want = bench::reference(Op::Spmm, &a, feat, &[], &dense_b);
    let got = match args.remove("c") {
        Some(ArgValue::Array(Tensor {
            data: TensorData::F32(v),
            ..
        })) => v,
        _ => return Err(Failure("error: the kernel's output is missing".into())),
    };
    let got64: Vec<f64> = got.iter().map(|&v| v as f64).collect();
    let err = bench::relative_error(&got64, &want);
    println!("  check against an f64 reference: max relative error {err:.2e}");
    if err > bench::TOLERANCE {
        return Err(Failure(format!(
            "error: result differs from the reference (max relative error {err:.3e})"
        )));
    }
    let c = Tensor {
        shape: vec![a.rows, feat],
        data: TensorData::F32(got),
    };
    sparsetir_formats::write_npy(&c_path, &c)?;
    println!("  OK: result written to {}", c_path.display());
    println!(
        "  (the same measurement: sparsetir bench spmm --matrix {} --feat {feat})",
        a_path.display()
    );
    Ok(())
}
