//! `sparsetir bench ... --device cuda-emu`: the generated CUDA of every operator and format the
//! GPU path runs (csr; for spmm hyb, bsr:B, ell(width=W) and auto; for spmv sell; 16-bit
//! operands with `--dtype`; masked attention (token- and block-level masks); 16 x 16 BSR blocks and TC-GNN's condensed tiles on tensor
//! cores; 2:4 on sparse tensor cores) runs in the CPU emulator, prints one JSON line per case with
//! `check: true` against the f64 reference, the format that ran and the emulator's traffic
//! counts; formats without a GPU kernel and bad combinations exit with code 1. Skipped, with a
//! note, when no C++ compiler runs.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Output;

use common::{have_cxx, run};

/// A 20 × 18 matrix with rows of 3 entries (uniform: ELL without remainder) and blocks of 2
/// that are mostly full.
fn write_matrix(dir: &Path) -> PathBuf {
    let mut entries = Vec::new();
    for i in 0..20usize {
        for k in 0..3usize {
            entries.push((i + 1, (i / 2 * 2 + k * 5) % 18 + 1));
        }
    }
    entries.sort();
    entries.dedup();
    let mut text = format!(
        "%%MatrixMarket matrix coordinate pattern general\n20 18 {}\n",
        entries.len()
    );
    for (i, j) in &entries {
        text.push_str(&format!("{i} {j}\n"));
    }
    let p = dir.join("u.mtx");
    std::fs::write(&p, text).expect("write");
    p
}

fn bench(op: &str, m: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "bench",
        op,
        "--matrix",
        m.to_str().expect("utf-8"),
        "--device",
        "cuda-emu",
        "--json",
    ];
    // Width 8 unless the case names its own.
    if !extra.contains(&"--feat") {
        args.extend_from_slice(&["--feat", "8"]);
    }
    args.extend_from_slice(extra);
    run(&args)
}

/// `f` over `items` on two threads, the results in order: each call is a CLI process that
/// compiles its kernels, so that a test of many keeps both cores busy even when it runs alone.
fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let (a, b) = items.split_at(items.len().div_ceil(2));
    std::thread::scope(|s| {
        let second = s.spawn(|| b.iter().map(&f).collect::<Vec<R>>());
        let mut out: Vec<R> = a.iter().map(&f).collect();
        out.extend(second.join().expect("the second thread"));
        out
    })
}

fn line(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    serde_json::from_str(lines[0]).expect("JSON")
}

#[test]
fn every_gpu_format_runs_and_checks_in_the_emulator() {
    if !have_cxx() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let m = write_matrix(dir.path());
    let cases = [
        ("spmm", "csr", "csr"),
        ("spmm", "hyb", "hyb(parts=1,buckets=1,2,4)"),
        ("spmm", "bsr:2", "bsr(block=2)"),
        ("spmm", "ell(width=3)", "ell(width=3)"),
        ("spmm", "condense", "condense"),
        ("sddmm", "csr", "csr"),
        ("spmv", "csr", "csr"),
        ("spmv", "sell", "sell(sigma=20)"),
    ];
    let runs = par_map(&cases, |(op, format, _)| {
        bench(op, &m, &["--format", format])
    });
    for ((op, format, ran), o) in cases.iter().zip(&runs) {
        let j = line(o);
        assert_eq!(j["format"], *ran, "{op} {format}: {j}");
        assert_eq!(j["check"], true, "{op} {format}: {j}");
        assert_eq!(j["device"], "cuda-emu");
        assert!(j["sector_bytes"].as_u64().unwrap() > 0, "{j}");
    }
    // auto: CSR, hyb and the BSR/ELL candidates of the matrix; the emulator has no device
    // time, so CSR is reported.
    let j = line(&bench("spmm", &m, &["--format", "auto"]));
    let names: Vec<&str> = j["candidates"]
        .as_array()
        .expect("candidates")
        .iter()
        .map(|c| c["format"].as_str().expect("name"))
        .collect();
    assert_eq!(names[0], "csr", "{j}");
    assert!(names.iter().any(|n| n.starts_with("hyb")), "{j}");
    assert!(names.contains(&"ell(width=3)"), "{j}");
    assert_eq!(j["check"], true, "{j}");
    // 16-bit operands; with 16 x 16 BSR blocks on tensor cores.
    for dtype in ["float16", "bfloat16"] {
        let j = line(&bench("spmm", &m, &["--dtype", dtype]));
        assert_eq!(j["dtype"], dtype);
        assert_eq!(j["check"], true, "{j}");
        for (format, ran) in [
            ("bsr:16", "bsr(block=16)"),
            ("bsr:32", "bsr(block=32)"),
            ("condense", "condense"),
        ] {
            let j = line(&bench("spmm", &m, &["--dtype", dtype, "--format", format]));
            assert_eq!(j["format"], ran, "{j}");
            assert_eq!(j["schedule"], "tensor cores", "{j}");
            assert_eq!(j["check"], true, "{j}");
        }
    }
}

/// 2:4 SpMM (`--format 2:4`): the catalog's spmm_24 on the exact 2:4 storage (a 20 x 36 matrix:
/// rows and columns padded to the tensor cores' tiles); float32 with its default GPU schedule,
/// 16-bit operands on sparse tensor cores (`mma.sp`), a width that is not a multiple of 8 on
/// the default schedule; a matrix that is not 2:4 exits 1 naming the conversion. And tensor-core formats wider than 256 columns (the
/// feature columns over `blockIdx.y` too).
#[test]
fn two_four_and_wide_tensor_core_formats_in_the_emulator() {
    if !have_cxx() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let m24 = dir.path().join("m24.mtx");
    let o = run(&[
        "gen",
        "mask24",
        "--rows",
        "20",
        "--cols",
        "36",
        "-o",
        m24.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let cases = [
        ("float32", "8", "default"),
        ("float16", "16", "tensor cores"),
        ("bfloat16", "8", "tensor cores"),
        ("float16", "12", "default"),
    ];
    let runs = par_map(&cases, |(dtype, feat, _)| {
        bench(
            "spmm",
            &m24,
            &["--format", "2:4", "--dtype", dtype, "--feat", feat],
        )
    });
    for ((dtype, _, schedule), o) in cases.iter().zip(&runs) {
        let j = line(o);
        assert_eq!(j["format"], "2:4", "{j}");
        assert_eq!(j["schedule"], *schedule, "{dtype}: {j}");
        assert_eq!(j["check"], true, "{dtype}: {j}");
    }
    // Several output tiles per warp: by the rule (width 64: 4 warps of 2 tiles) or asked for;
    // a width the tiles do not divide is refused with the reason.
    // B staged in shared memory (one, two or three slices): blocks of 2 row-tile warps (the matrix's
    // rows padded to 32), one or two column warps, or one warp of two row tiles.
    let formats = [
        "2:4",
        "2:4(tiles=1)",
        "2:4(tiles=4)",
        "2:4(smem=2)",
        "2:4(dbuf=2x2)",
        "2:4(dbuf=1x1x2)",
        "2:4(dbuf=2,ahead=2)",
    ];
    let runs = par_map(&formats, |format| {
        bench(
            "spmm",
            &m24,
            &["--format", format, "--dtype", "float16", "--feat", "64"],
        )
    });
    for (format, o) in formats.iter().zip(&runs) {
        let j = line(o);
        assert_eq!(j["schedule"], "tensor cores", "{format}: {j}");
        assert_eq!(j["check"], true, "{format}: {j}");
    }
    let o = bench(
        "spmm",
        &m24,
        &[
            "--format",
            "2:4(tiles=8)",
            "--dtype",
            "float16",
            "--feat",
            "40",
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not a multiple of 8 x 8 tiles"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Three entries in the group of columns 0..4 of row 0: not 2:4.
    let dense = dir.path().join("dense.mtx");
    std::fs::write(
        &dense,
        "%%MatrixMarket matrix coordinate real general\n4 8 3\n1 1 1.0\n1 2 2.0\n1 3 3.0\n",
    )
    .expect("write");
    let o = bench("spmm", &dense, &["--format", "2:4"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("2:4 conversion"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let m = write_matrix(dir.path());
    for format in ["bsr:16", "condense"] {
        let j = line(&bench(
            "spmm",
            &m,
            &["--format", format, "--dtype", "float16", "--feat", "512"],
        ));
        assert_eq!(j["schedule"], "tensor cores", "{format}: {j}");
        assert_eq!(j["check"], true, "{format}: {j}");
    }
}

/// The Hopper copy-engine forms of 2:4 from the command line: A and B by the copy engine in
/// clusters of 2 x 2 blocks (B's boxes shared along x, A's along y) on a matrix whose shape
/// the clusters do not divide (its rows padded to whole clusters), checked against the
/// reference; the emitted kernel is declared in clusters and multicasts.
#[test]
fn two_four_clusters_run_and_check_in_the_emulator() {
    if !have_cxx() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let m24 = dir.path().join("m24.mtx");
    let o = run(&[
        "gen",
        "mask24",
        "--rows",
        "20",
        "--cols",
        "36",
        "-o",
        m24.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = dir.path().join("cuda");
    let format = "2:4(wgdbuf=4,a=tma,tma=1,cluster=2x2)";
    let j = line(&bench(
        "spmm",
        &m24,
        &[
            "--format",
            format,
            "--dtype",
            "float16",
            "--feat",
            "256",
            "--emit-cuda",
            out.to_str().expect("utf-8"),
        ],
    ));
    assert_eq!(j["requested_format"], format, "{j}");
    assert_eq!(j["schedule"], "tensor cores", "{j}");
    assert_eq!(j["check"], true, "{j}");
    let src: String = std::fs::read_dir(&out)
        .expect("the directory")
        .map(|e| std::fs::read_to_string(e.expect("entry").path()).expect("read"))
        .collect();
    for needle in [
        "SPTIR_CLUSTER_DIMS(2, 2, 1)",
        "sptir_tma_load_2d_mc(B_data_shared",
        "sptir_tma_load_2d_mc(sptir_as",
    ] {
        assert!(src.contains(needle), "no `{needle}`");
    }
    // Feature widths the clusters along y do not divide into whole column blocks: refused.
    let o = bench(
        "spmm",
        &m24,
        &["--format", format, "--dtype", "float16", "--feat", "128"],
    );
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("takes a feature width that is a multiple of 256 (got 128)"),
        "{err}"
    );
    // (The message names the width only: the 20 rows and 36 columns are padded, never refused.)
    assert!(!err.contains("rows"), "{err}");
}

/// A persistent 2:4 kernel from the command line: 300 rows padded to five tiles of 64 rows,
/// walked by the emulator's two resident blocks (the launch grid in the JSON), checked against
/// the reference; a matrix whose runs of 32 columns do not fill the four stages evenly is
/// refused in the user's terms (its columns), not the generated loop's.
#[test]
fn persistent_two_four_runs_and_checks_in_the_emulator() {
    if !have_cxx() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let format = "2:4(wgdbuf=4,ahead=2,a=tma,meta=packed,inflight=1,tma=1,producer=1,persistent=1)";
    let gen = |cols: &str, name: &str| {
        let path = dir.path().join(name);
        let o = run(&[
            "gen",
            "mask24",
            "--rows",
            "300",
            "--cols",
            cols,
            "-o",
            path.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        path
    };
    let even = gen("256", "even.mtx");
    let args = ["--format", format, "--dtype", "float16", "--feat", "64"];
    let j = line(&bench("spmm", &even, &args));
    assert_eq!(j["requested_format"], format, "{j}");
    assert_eq!(j["schedule"], "tensor cores", "{j}");
    assert_eq!(j["check"], true, "{j}");
    assert_eq!(j["grids"], serde_json::json!([[2, 1, 1]]), "{j}");
    let uneven = gen("96", "uneven.mtx");
    let o = bench("spmm", &uneven, &args);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("are a multiple of 128 (4 stages of 32 columns; got 96)"),
        "{err}"
    );
}

/// The forms of session 45 from the CLI: A's values run by run, read by the tensor cores from
/// shared memory, two slices' products a group; what they cannot take is refused in the
/// user's terms (the width of A, the slices in shared memory), not the writer's loop names.
#[test]
fn two_four_groups_of_two_slices_run_and_check_in_the_emulator() {
    if !have_cxx() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let gen = |cols: &str, name: &str| {
        let path = dir.path().join(name);
        let o = run(&[
            "gen",
            "mask24",
            "--rows",
            "200",
            "--cols",
            cols,
            "-o",
            path.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        path
    };
    let format = "2:4(wgdbuf=4,ahead=2,a=tma,meta=packed,vals=packed,ss=1,runs=2,inflight=1,\
                  tma=1,producer=1)";
    let args = |f: &'static str| ["--format", f, "--dtype", "bfloat16", "--feat", "64"];
    let even = gen("252", "even.mtx");
    let j = line(&bench("spmm", &even, &args(format)));
    assert_eq!(j["requested_format"], format, "{j}");
    assert_eq!(j["check"], true, "{j}");
    let odd = gen("96", "odd.mtx");
    let o = bench("spmm", &odd, &args(format));
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("are a multiple of 64 (got 96)"), "{err}");
    assert!(!err.contains("g_4_0"), "{err}");
    let few = "2:4(wgdbuf=4,ahead=1,a=tma,ss=1,runs=2,inflight=1,tma=1,producer=1)";
    let o = bench("spmm", &even, &args(few));
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("at least 4 slices in shared memory (got 3"),
        "{err}"
    );
}

#[test]
fn emit_cuda_writes_every_format_measured() {
    if !have_cxx() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let m = write_matrix(dir.path());
    let out = dir.path().join("cuda");
    let o = bench(
        "spmm",
        &m,
        &[
            "--format",
            "auto",
            "--emit-cuda",
            out.to_str().expect("utf-8"),
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut names: Vec<String> = std::fs::read_dir(&out)
        .expect("the directory")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.contains(&"csrmm_feat8.cu".to_string()), "{names:?}");
    assert!(names.iter().any(|n| n.contains("_hyb_")), "{names:?}");
    assert!(
        names.iter().any(|n| n.contains("_ell_width_3_")),
        "{names:?}"
    );
    for n in &names {
        let text = std::fs::read_to_string(out.join(n)).expect("read");
        assert!(text.contains("extern \"C\" __global__"), "{n}");
    }
}

#[test]
fn attention_runs_and_checks_in_the_emulator() {
    if !have_cxx() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut text = String::from("%%MatrixMarket matrix coordinate pattern general\n10 10 ");
    let mut entries = Vec::new();
    for i in 0..10usize {
        if i == 3 {
            continue; // an empty row: its output is 0
        }
        for j in i.saturating_sub(2)..(i + 3).min(10) {
            entries.push((i + 1, j + 1));
        }
    }
    text.push_str(&format!("{}\n", entries.len()));
    for (i, j) in &entries {
        text.push_str(&format!("{i} {j}\n"));
    }
    let m = dir.path().join("mask.mtx");
    std::fs::write(&m, text).expect("write");
    for dtype in ["float32", "float16"] {
        let j = line(&bench("attention", &m, &["--heads", "2", "--dtype", dtype]));
        assert_eq!(j["check"], true, "{j}");
        assert_eq!(j["device"], "cuda-emu");
        assert_eq!(j["heads"], 2);
    }
    // The same pattern as a block-level mask (`--mask`, `--block 4`): every entry a 4 x 4
    // block of tokens, the empty block row 16 tokens whose outputs are 0.
    let mut args = vec!["bench", "attention", "--mask", m.to_str().unwrap()];
    args.extend_from_slice(&[
        "--block", "4", "--device", "cuda-emu", "--json", "--feat", "8",
    ]);
    let j = line(&run(&args));
    assert_eq!(j["check"], true, "{j}");
    assert_eq!(j["rows"], 40, "{j}");
    assert_eq!(j["nnz"], entries.len() * 16, "{j}");
    // Blocks of 16 tokens as BSR (`--format bsr:16`): the scores and the product on tensor
    // cores for 16-bit operands, every head in one launch, an empty block row giving 0; the
    // CUDA of the three kernels written with --emit-cuda.
    let cu = dir.path().join("cu");
    for dtype in ["float16", "bfloat16", "float32"] {
        let mut args = vec!["bench", "attention", "--mask", m.to_str().unwrap()];
        args.extend_from_slice(&[
            "--block",
            "16",
            "--format",
            "bsr:16",
            "--heads",
            "3",
            "--feat",
            "32",
            "--dtype",
            dtype,
            "--device",
            "cuda-emu",
            "--json",
            "--emit-cuda",
            cu.to_str().unwrap(),
        ]);
        let j = line(&run(&args));
        assert_eq!(j["check"], true, "{j}");
        assert_eq!(j["format"], "bsr:16", "{j}");
        assert_eq!(j["tensor_cores"], dtype != "float32", "{j}");
        assert_eq!(j["rows"], 160, "{j}");
        assert_eq!(j["heads"], 3, "{j}");
        let scores = std::fs::read_to_string(cu.join("attention_mask_scores_feat32.cu"))
            .expect("the scores' CUDA");
        assert_eq!(
            scores.contains("sptir_mma_m16n8k16_"),
            dtype != "float32",
            "{dtype}: tensor cores in the scores"
        );
        // `--softmax auto`: the probabilities made inside the product on tensor cores.
        let fused = dtype != "float32";
        assert_eq!(
            j["softmax"],
            if fused { "fused" } else { "separate" },
            "{j}"
        );
        if fused {
            let product =
                std::fs::read_to_string(cu.join("attention_mask_softmax_product_feat32.cu"))
                    .expect("the product's CUDA");
            assert!(product.contains("sptir_mma_m16n8k16_") && product.contains("expf("));
        }
    }
    // Either softmax asked for, on either operand type: the same check.
    for (softmax, dtype) in [("fused", "float32"), ("separate", "float16")] {
        let mut args = vec!["bench", "attention", "--mask", m.to_str().unwrap()];
        args.extend_from_slice(&[
            "--block",
            "16",
            "--format",
            "bsr:16",
            "--feat",
            "16",
            "--dtype",
            dtype,
            "--softmax",
            softmax,
            "--device",
            "cuda-emu",
            "--json",
        ]);
        let j = line(&run(&args));
        assert_eq!(j["check"], true, "{j}");
        assert_eq!(j["softmax"], softmax, "{j}");
    }
    let mut args = vec!["bench", "attention", "--mask", m.to_str().unwrap()];
    args.extend_from_slice(&["--format", "bsr:16", "--block", "16", "--softmax", "online"]);
    let out = run(&args);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--softmax online"));
    // The fused softmax is a BSR product's: the CSR path refuses it.
    let mut args = vec!["bench", "attention", "--mask", m.to_str().unwrap()];
    args.extend_from_slice(&["--softmax", "fused"]);
    let out = run(&args);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("takes --format bsr:B"));
    // A mask that is not made of whole 16 x 16 blocks is refused with a reason.
    let out = run(&[
        "bench",
        "attention",
        "--mask",
        m.to_str().unwrap(),
        "--block",
        "4",
        "--format",
        "bsr:16",
        "--device",
        "cuda-emu",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bsr:16") && err.contains("blocks"), "{err}");
}

#[test]
fn formats_without_a_gpu_kernel_exit_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = write_matrix(dir.path());
    for (op, format) in [("sddmm", "coo"), ("spmv", "hyb"), ("spmm", "sell")] {
        let o = bench(op, &m, &["--format", format]);
        assert_eq!(o.status.code(), Some(1), "{op} {format}");
        assert!(String::from_utf8_lossy(&o.stderr).contains("--device"));
    }
    // ELL narrower than the longest row needs a CSR remainder: CPU only.
    if have_cxx() {
        let o = bench("spmm", &m, &["--format", "ell(width=2)"]);
        assert_eq!(o.status.code(), Some(1));
        assert!(String::from_utf8_lossy(&o.stderr).contains("CPU only"));
    }
}
