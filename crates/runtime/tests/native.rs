//! Native kernels: compiling through the cache (hits, misses, keys, concurrency, corrupt entries),
//! compiler errors, argument marshalling errors, and validation that refuses garbage data before
//! any launch, with an AddressSanitizer run proving no out-of-bounds access happens.
//!
//! The C kernel here is hand-written to the kernel ABI (`int32_t entry(const sparsetir_arg*,
//! int32_t)`), so these tests do not depend on the C writer. Every test skips with a printed note
//! when no C compiler runs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Barrier};

use sparsetir_eval::ArgValue;
use sparsetir_formats::Tensor;
use sparsetir_ir::{DType, PrimFunc};
use sparsetir_runtime::{
    CacheOutcome, CompileOptions, Compiler, FrozenArray, Kernel, KernelCache, KernelParam,
    LaunchArgs, ParamKind, RunError, TimingOptions,
};

/// SpMM over CSR, parameters in the order of the catalog's `csrmm` script.
const CSRMM_C: &str = r#"#include <stdint.h>
#include <omp.h>
typedef union { void* ptr; int64_t i; double f; } sparsetir_arg;
void sparsetir_set_num_threads(int32_t n) { omp_set_num_threads(n); }
int32_t csrmm_kernel(const sparsetir_arg* args, int32_t nargs) {
  if (nargs != 9) return -1;
  const float* restrict a = (const float*)args[0].ptr;
  const float* restrict b = (const float*)args[1].ptr;
  float* restrict c = (float*)args[2].ptr;
  const int32_t* restrict indptr = (const int32_t*)args[3].ptr;
  const int32_t* restrict indices = (const int32_t*)args[4].ptr;
  int64_t m = args[5].i;
  int64_t f = args[7].i;
  #pragma omp parallel for
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t k = 0; k < f; ++k) {
      float acc = 0.0f;
      for (int64_t p = indptr[i]; p < indptr[i + 1]; ++p)
        acc += a[p] * b[(int64_t)indices[p] * f + k];
      c[i * f + k] = acc;
    }
  }
  return 0;
}
"#;

const ENTRY: &str = "csrmm_kernel";

fn params() -> Vec<KernelParam> {
    let arr = |name: &str, elem| KernelParam {
        name: name.into(),
        kind: ParamKind::Array { elem },
    };
    let int = |name: &str| KernelParam {
        name: name.into(),
        kind: ParamKind::Scalar(DType::I32),
    };
    vec![
        arr("a", DType::F32),
        arr("b", DType::F32),
        arr("c", DType::F32),
        arr("indptr", DType::I32),
        arr("indices", DType::I32),
        int("m"),
        int("n"),
        int("feat_size"),
        int("nnz"),
    ]
}

fn stage1() -> PrimFunc {
    sparsetir_ops::load("csrmm").expect("catalog csrmm parses")
}

/// A fresh cache directory under the target directory (no global state touched).
fn temp_dir(tag: &str) -> PathBuf {
    let base = std::env::temp_dir().join(format!(
        "sparsetir-runtime-test-{}-{tag}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    std::fs::create_dir_all(&base).expect("temp dir");
    base
}

fn opts(dir: &Path) -> CompileOptions {
    CompileOptions {
        cc: None,
        flags: Vec::new(),
        threads: Some(2),
        cache_dir: Some(dir.to_path_buf()),
    }
}

/// Whether a C compiler with OpenMP works here (probed once per process); prints why not.
fn have_cc() -> bool {
    static HAVE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAVE.get_or_init(probe_cc)
}

fn probe_cc() -> bool {
    let c = Compiler::new(None, &[]);
    if let Err(e) = c.version() {
        eprintln!("note: skipping: no C compiler ({e})");
        return false;
    }
    let dir = temp_dir("probe");
    let r = KernelCache::new(&dir).load(CSRMM_C, ENTRY, &params(), &c);
    let _ = std::fs::remove_dir_all(&dir);
    match r {
        Ok(_) => true,
        Err(e) => {
            eprintln!("note: skipping: the C compiler cannot build an OpenMP kernel: {e}");
            false
        }
    }
}

/// A 5 x 7 CSR matrix (row 2 empty, row 4 holding 3 entries), feature width 3.
struct Case {
    indptr: Vec<i32>,
    indices: Vec<i32>,
    a: Vec<f32>,
    b: Vec<f32>,
    m: usize,
    n: usize,
    f: usize,
    nnz: usize,
}

fn case() -> Case {
    let (m, n, f) = (5, 7, 3);
    let indptr = vec![0, 2, 3, 3, 5, 8];
    let indices = vec![1, 6, 0, 2, 3, 0, 4, 6];
    let a: Vec<f32> = (0..8).map(|i| 0.5 + i as f32).collect();
    let b: Vec<f32> = (0..n * f).map(|i| ((i * 7) % 11) as f32 - 3.0).collect();
    Case {
        indptr,
        indices,
        a,
        b,
        m,
        n,
        f,
        nnz: 8,
    }
}

fn args_of(c: &Case) -> HashMap<String, ArgValue> {
    let mut args = HashMap::new();
    let arr = |d: DType, v: Vec<f64>| ArgValue::Array(Tensor::from_f64(d, &v).expect("tensor"));
    args.insert(
        "a".into(),
        arr(DType::F32, c.a.iter().map(|x| *x as f64).collect()),
    );
    args.insert(
        "b".into(),
        arr(DType::F32, c.b.iter().map(|x| *x as f64).collect()),
    );
    args.insert("c".into(), arr(DType::F32, vec![-1.0; c.m * c.f]));
    args.insert(
        "indptr".into(),
        arr(DType::I32, c.indptr.iter().map(|x| *x as f64).collect()),
    );
    args.insert(
        "indices".into(),
        arr(DType::I32, c.indices.iter().map(|x| *x as f64).collect()),
    );
    args.insert("m".into(), ArgValue::Int(c.m as i64));
    args.insert("n".into(), ArgValue::Int(c.n as i64));
    args.insert("feat_size".into(), ArgValue::Int(c.f as i64));
    args.insert("nnz".into(), ArgValue::Int(c.nnz as i64));
    args
}

/// C = A·B through a dense copy of A (independent of CSR traversal).
fn expected(c: &Case) -> Vec<f64> {
    let mut dense = vec![0.0f64; c.m * c.n];
    for i in 0..c.m {
        for p in c.indptr[i] as usize..c.indptr[i + 1] as usize {
            dense[i * c.n + c.indices[p] as usize] += c.a[p] as f64;
        }
    }
    let mut out = vec![0.0; c.m * c.f];
    for i in 0..c.m {
        for j in 0..c.n {
            for k in 0..c.f {
                out[i * c.f + k] += dense[i * c.n + j] * c.b[j * c.f + k] as f64;
            }
        }
    }
    out
}

fn output(args: &HashMap<String, ArgValue>) -> Vec<f64> {
    match args.get("c") {
        Some(ArgValue::Array(t)) => t.to_f64_vec(),
        _ => panic!("no output array"),
    }
}

fn assert_close(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "[{i}]: {g} vs {w}");
    }
}

#[test]
fn runs_and_caches() {
    if !have_cc() {
        return;
    }
    let dir = temp_dir("hit");
    let f = stage1();
    let o = opts(&dir);
    let k1 = Kernel::from_source(&f, CSRMM_C, ENTRY, params(), &o).expect("compiles");
    assert_eq!(k1.report().outcome, CacheOutcome::Miss);
    assert!(k1.report().compile_time.as_nanos() > 0);
    let c = case();
    let mut args = args_of(&c);
    k1.run(&mut args).expect("runs");
    assert_close(&output(&args), &expected(&c));

    let k2 = Kernel::from_source(&f, CSRMM_C, ENTRY, params(), &o).expect("loads");
    assert_eq!(k2.report().outcome, CacheOutcome::Hit);
    assert!(k2.cache_hit());
    assert_eq!(k2.report().key, k1.report().key);
    assert_eq!(k2.report().path, k1.report().path);
    let mut args = args_of(&c);
    k2.run(&mut args).expect("runs");
    assert_close(&output(&args), &expected(&c));

    // Only the entry and its source remain: no temporary file is left behind.
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| !(n.starts_with("cc-") && n.ends_with(".version")))
        .collect();
    names.sort();
    let key = &k1.report().key;
    assert_eq!(names, vec![format!("{key}.c"), format!("{key}.so")]);

    let t = k2
        .time(
            &mut args,
            TimingOptions {
                warmup: 1,
                repeats: 5,
                ..TimingOptions::default()
            },
        )
        .expect("times");
    assert_eq!(t.samples.len(), 5);
    assert!(t.min <= t.median && t.median <= t.max && t.min > 0.0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn key_changes_with_source_and_flags() {
    if !have_cc() {
        return;
    }
    let dir = temp_dir("keys");
    let cache = KernelCache::new(&dir);
    let base = Compiler::new(None, &[]);
    let k0 = cache.key(CSRMM_C, &base).expect("key");
    assert_eq!(
        k0,
        cache.key(CSRMM_C, &base).expect("key"),
        "keys are stable"
    );
    assert_eq!(k0.len(), 64);
    let edited = format!("{CSRMM_C}/* edited */\n");
    assert_ne!(k0, cache.key(&edited, &base).expect("key"));
    let flagged = Compiler::new(None, &["-DSPARSETIR_TEST=1".to_string()]);
    assert_ne!(k0, cache.key(CSRMM_C, &flagged).expect("key"));

    // The compiler's version is remembered in the cache directory (no spawn on later loads),
    // tied to the compiler binary's identity: a memo for another binary is ignored.
    if let Some(identity) = base.identity() {
        let memo: Vec<PathBuf> = std::fs::read_dir(&dir)
            .expect("read dir")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "version"))
            .collect();
        assert_eq!(memo.len(), 1, "{memo:?}");
        let real = std::fs::read_to_string(&memo[0]).expect("memo");
        assert!(real.starts_with(&format!("{identity}\n")));
        std::fs::write(&memo[0], format!("{identity}\npretend compiler 0.1\n")).expect("w");
        let pretend = KernelCache::new(&dir).key(CSRMM_C, &base).expect("key");
        assert_ne!(pretend, k0, "the remembered version is part of the key");
        std::fs::write(&memo[0], "other|1|2\npretend compiler 0.1\n").expect("w");
        assert_eq!(
            cache.key(CSRMM_C, &base).expect("key"),
            k0,
            "stale memo ignored"
        );
    }

    // Each distinct key compiles once, then hits.
    let f = stage1();
    let mut o = opts(&dir);
    let outcome = |o: &CompileOptions, src: &str| {
        Kernel::from_source(&f, src, ENTRY, params(), o)
            .expect("builds")
            .report()
            .outcome
    };
    assert_eq!(outcome(&o, CSRMM_C), CacheOutcome::Miss);
    assert_eq!(outcome(&o, &edited), CacheOutcome::Miss);
    assert_eq!(outcome(&o, CSRMM_C), CacheOutcome::Hit);
    o.flags = vec!["-DSPARSETIR_TEST=1".to_string()];
    assert_eq!(outcome(&o, CSRMM_C), CacheOutcome::Miss);
    assert_eq!(outcome(&o, CSRMM_C), CacheOutcome::Hit);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn concurrent_threads_compile_the_same_kernel() {
    if !have_cc() {
        return;
    }
    let dir = temp_dir("threads");
    let src = format!("{CSRMM_C}/* threads */\n");
    let barrier = Arc::new(Barrier::new(3));
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let (dir, src, barrier) = (dir.clone(), src.clone(), barrier.clone());
            std::thread::spawn(move || {
                // A separate cache object per thread, as separate processes would have.
                let cache = KernelCache::new(&dir);
                barrier.wait();
                cache
                    .load(&src, ENTRY, &params(), &Compiler::new(None, &[]))
                    .map(|(_, r)| r)
            })
        })
        .collect();
    for h in handles {
        let r = h.join().expect("thread").expect("each compile succeeds");
        assert!(matches!(r.outcome, CacheOutcome::Miss | CacheOutcome::Hit));
    }
    let k = Kernel::from_source(&stage1(), &src, ENTRY, params(), &opts(&dir)).expect("loads");
    assert_eq!(
        k.report().outcome,
        CacheOutcome::Hit,
        "the final file is valid"
    );
    let c = case();
    let mut args = args_of(&c);
    k.run(&mut args).expect("runs");
    assert_close(&output(&args), &expected(&c));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Child half of [`concurrent_processes_compile_the_same_kernel`]: does nothing unless the
/// parent set `SPARSETIR_TEST_CHILD_CACHE`.
#[test]
fn child_compile_same_kernel() {
    let Some(dir) = std::env::var_os("SPARSETIR_TEST_CHILD_CACHE") else {
        return;
    };
    let src = format!("{CSRMM_C}/* processes */\n");
    let k = Kernel::from_source(&stage1(), &src, ENTRY, params(), &opts(Path::new(&dir)))
        .expect("child compiles");
    let c = case();
    let mut args = args_of(&c);
    k.run(&mut args).expect("child runs");
    assert_close(&output(&args), &expected(&c));
}

#[test]
fn concurrent_processes_compile_the_same_kernel() {
    if !have_cc() {
        return;
    }
    let dir = temp_dir("procs");
    let exe = std::env::current_exe().expect("test binary");
    let children: Vec<_> = (0..2)
        .map(|_| {
            Command::new(&exe)
                .args(["--exact", "child_compile_same_kernel", "--test-threads=1"])
                .env("SPARSETIR_TEST_CHILD_CACHE", &dir)
                .output_async()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().expect("child ran");
        assert!(
            out.status.success(),
            "child failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let src = format!("{CSRMM_C}/* processes */\n");
    let k = Kernel::from_source(&stage1(), &src, ENTRY, params(), &opts(&dir)).expect("loads");
    assert_eq!(
        k.report().outcome,
        CacheOutcome::Hit,
        "the final file is valid"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Spawning without waiting, so both children run at once.
trait SpawnAsync {
    fn output_async(&mut self) -> std::process::Child;
}
impl SpawnAsync for Command {
    fn output_async(&mut self) -> std::process::Child {
        self.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn child")
    }
}

#[test]
fn corrupt_entries_are_rebuilt() {
    if !have_cc() {
        return;
    }
    let dir = temp_dir("corrupt");
    let f = stage1();
    let o = opts(&dir);
    for (i, garbage) in [b"not an ELF file".to_vec(), Vec::new()]
        .into_iter()
        .enumerate()
    {
        let src = format!("{CSRMM_C}/* corrupt {i} */\n");
        // Built without loading it in this process: a library loaded here stays mapped (OpenMP
        // libraries are not unloaded), and dlopen would hand back the mapped copy instead of
        // reading the damaged file, as a fresh process would.
        let cache = KernelCache::new(&dir);
        let compiler = o.compiler();
        let key = cache.key(&src, &compiler).expect("key");
        cache.build(&src, &compiler, &key).expect("builds");
        let path = cache.entry_path(&key);
        assert!(path.exists());
        let mut bytes = garbage;
        if bytes.is_empty() {
            // A truncated library: its first half.
            let full = std::fs::read(&path).expect("read entry");
            bytes = full[..full.len() / 2].to_vec();
        }
        std::fs::write(&path, &bytes).expect("damage entry");
        let k = Kernel::from_source(&f, &src, ENTRY, params(), &o).expect("rebuilds");
        assert_eq!(k.report().outcome, CacheOutcome::Rebuilt);
        let c = case();
        let mut args = args_of(&c);
        k.run(&mut args).expect("runs");
        assert_close(&output(&args), &expected(&c));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn compiler_errors_show_numbered_source() {
    if !have_cc() {
        return;
    }
    let dir = temp_dir("cc-error");
    let src = "#include <stdint.h>\nint32_t broken(void) {\n  return undeclared_name;\n}\n";
    let err = KernelCache::new(&dir)
        .load(src, "broken", &[], &Compiler::new(None, &[]))
        .expect_err("does not compile");
    match &err {
        RunError::Compile {
            stderr,
            numbered_source,
            ..
        } => {
            assert!(stderr.contains("undeclared_name"), "stderr: {stderr}");
            assert!(numbered_source.contains("3 |   return undeclared_name;"));
            assert!(numbered_source.contains("1 | #include <stdint.h>"));
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains("undeclared_name") && text.contains("--- generated source ---"));
    // Nothing is published for a failed compile.
    let leftovers: Vec<String> = std::fs::read_dir(&dir)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.ends_with(".version"))
                .collect()
        })
        .unwrap_or_default();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn missing_compiler_is_an_error() {
    let dir = temp_dir("no-cc");
    let c = Compiler::new(Some("/nonexistent/sparsetir-cc"), &[]);
    let err = KernelCache::new(&dir)
        .load(CSRMM_C, ENTRY, &params(), &c)
        .expect_err("no such compiler");
    assert!(matches!(err, RunError::NoCompiler { .. }), "{err:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn dtype_and_missing_argument_errors() {
    if !have_cc() {
        return;
    }
    let dir = temp_dir("args");
    let k = Kernel::from_source(&stage1(), CSRMM_C, ENTRY, params(), &opts(&dir)).expect("ok");
    let c = case();

    let mut args = args_of(&c);
    args.remove("b");
    assert_eq!(
        k.run(&mut args),
        Err(RunError::MissingArg { name: "b".into() })
    );

    let mut args = args_of(&c);
    let b64 = Tensor::from_f64(DType::F64, &vec![0.0; c.n * c.f]).expect("tensor");
    args.insert("b".into(), ArgValue::Array(b64));
    match k.run(&mut args) {
        Err(RunError::DTypeMismatch {
            name,
            expected,
            found,
        }) => assert_eq!(
            (name.as_str(), expected, found),
            ("b", DType::F32, DType::F64)
        ),
        other => panic!("expected a dtype mismatch, got {other:?}"),
    }

    let mut args = args_of(&c);
    args.insert("m".into(), ArgValue::Float(5.0));
    assert!(matches!(k.run(&mut args), Err(RunError::Scalar { name, .. }) if name == "m"));

    let mut args = args_of(&c);
    args.insert("m".into(), ArgValue::Int(1 << 40));
    assert!(matches!(k.run(&mut args), Err(RunError::Scalar { name, .. }) if name == "m"));

    // The launcher's own marshalling checks dtypes too (independently of validation).
    let mut args = args_of(&c);
    let idx64 = Tensor::from_i64(DType::I64, &[0, 2, 3, 3, 5, 8]).expect("tensor");
    args.insert("indptr".into(), ArgValue::Array(idx64));
    // SAFETY: the marshalling fails before any launch.
    let r = unsafe { k.compiled().call_unvalidated(&mut args) };
    assert!(matches!(r, Err(RunError::DTypeMismatch { name, .. }) if name == "indptr"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn borrowed_arrays_launch_in_place() {
    if !have_cc() {
        return;
    }
    let dir = temp_dir("borrowed");
    let k = Kernel::from_source(&stage1(), CSRMM_C, ENTRY, params(), &opts(&dir)).expect("ok");
    let c = case();
    let mut out = vec![-1.0f32; c.m * c.f];
    let scalars = |args: &mut LaunchArgs| {
        args.int("m", c.m as i64)
            .int("n", c.n as i64)
            .int("feat_size", c.f as i64)
            .int("nnz", c.nnz as i64);
    };
    {
        let mut args = LaunchArgs::new();
        args.read("indptr", &c.indptr)
            .read("indices", &c.indices)
            .read("a", &c.a)
            .read("b", &c.b)
            .write("c", &mut out);
        scalars(&mut args);
        k.launch(&args).expect("runs");
    }
    let got: Vec<f64> = out.iter().map(|x| *x as f64).collect();
    assert_close(&got, &expected(&c));

    // The output lent read-only is refused before the launch: `c` keeps its values.
    let before = out.clone();
    {
        let mut args = LaunchArgs::new();
        args.read("indptr", &c.indptr)
            .read("indices", &c.indices)
            .read("a", &c.a)
            .read("b", &c.b)
            .read("c", &out);
        scalars(&mut args);
        match k.launch(&args) {
            Err(RunError::ArgKind { name, found, .. }) => {
                assert_eq!((name.as_str(), found.as_str()), ("c", "a read-only one"))
            }
            other => panic!("expected a read-only refusal, got {other:?}"),
        }
    }
    assert_eq!(out, before);

    // Borrowed structure is validated as owned structure is: a column past n, an indptr of
    // another integer type, a short value array.
    let mut bad = c.indices.clone();
    bad[3] = c.n as i32;
    let idx64: Vec<i64> = c.indptr.iter().map(|&x| x as i64).collect();
    for (what, indices, short) in [
        ("column", &bad[..], false),
        ("short a", &c.indices[..], true),
    ] {
        let mut args = LaunchArgs::new();
        args.read("indptr", &c.indptr)
            .read("indices", indices)
            .read("a", if short { &c.a[..c.nnz - 1] } else { &c.a[..] })
            .read("b", &c.b)
            .write("c", &mut out);
        scalars(&mut args);
        assert!(k.launch(&args).is_err(), "{what} refused");
    }
    assert_eq!(out, before, "nothing written by refused launches");
    let mut args = LaunchArgs::new();
    args.read("indptr", &idx64)
        .read("indices", &c.indices)
        .read("a", &c.a)
        .read("b", &c.b)
        .write("c", &mut out);
    scalars(&mut args);
    assert!(
        k.launch(&args).is_err(),
        "an int64 indptr for an int32 parameter"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn frozen_structure_is_validated_once_per_shape() {
    if !have_cc() {
        return;
    }
    let dir = temp_dir("frozen");
    let k = Kernel::from_source(&stage1(), CSRMM_C, ENTRY, params(), &opts(&dir)).expect("ok");
    let c = case();
    let i32s = |v: &[i32]| {
        let v: Vec<i64> = v.iter().map(|&x| x.into()).collect();
        FrozenArray::new(Tensor::from_i64(DType::I32, &v).expect("tensor"))
    };
    let (indptr, indices) = (i32s(&c.indptr), i32s(&c.indices));
    let launch = |b: &[f32], out: &mut [f32], indices: &FrozenArray| {
        let mut args = LaunchArgs::new();
        args.frozen("indptr", &indptr)
            .frozen("indices", indices)
            .read("a", &c.a)
            .read("b", b)
            .write("c", out)
            .int("m", c.m as i64)
            .int("n", c.n as i64)
            .int("feat_size", c.f as i64)
            .int("nnz", c.nnz as i64);
        k.launch(&args)
    };
    // Two launches on new B values: both right, the structure read once.
    let mut b = c.b.clone();
    for round in 0..2 {
        let mut out = vec![-1.0f32; c.m * c.f];
        launch(&b, &mut out, &indices).expect("runs");
        let got: Vec<f64> = out.iter().map(|x| *x as f64).collect();
        assert_close(
            &got,
            &expected(&Case {
                b: b.clone(),
                ..case()
            }),
        );
        assert_eq!(k.validation_memo().full_validations(), 1, "round {round}");
        b.iter_mut().for_each(|x| *x = -*x + 1.0);
    }
    // Another frozen `indices` holding a column past n: read, refused, nothing written.
    let mut bad = c.indices.clone();
    bad[3] = c.n as i32;
    let mut out = vec![-1.0f32; c.m * c.f];
    let err = launch(&b, &mut out, &i32s(&bad)).expect_err("column past n");
    assert!(matches!(err, RunError::Indices { .. }), "{err}");
    assert!(out.iter().all(|&x| x == -1.0));
    assert_eq!(k.validation_memo().full_validations(), 2);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each mutation of valid data, and the error it must produce.
/// A named mutation of valid data and the check its error must pass.
type GarbageCase = (&'static str, Box<dyn Fn(&mut Case)>, fn(&RunError) -> bool);

fn garbage_cases() -> Vec<GarbageCase> {
    vec![
        (
            "non-monotone indptr",
            Box::new(|c: &mut Case| c.indptr = vec![0, 2, 1, 3, 5, 8]),
            |e| matches!(e, RunError::Indptr { axis, message, .. } if axis == "J" && message.contains("monotone")),
        ),
        (
            "indptr ending past nnz",
            Box::new(|c: &mut Case| c.indptr = vec![0, 2, 3, 3, 5, 9]),
            |e| matches!(e, RunError::Indptr { message, .. } if message.contains("nnz")),
        ),
        (
            "indptr not starting at 0",
            Box::new(|c: &mut Case| c.indptr = vec![1, 2, 3, 3, 5, 8]),
            |e| matches!(e, RunError::Indptr { message, .. } if message.contains("indptr[0]")),
        ),
        (
            "indptr too short",
            Box::new(|c: &mut Case| c.indptr = vec![0, 2, 3, 3, 8]),
            |e| matches!(e, RunError::Indptr { param, message, .. } if param == "indptr" && message.contains("entries")),
        ),
        (
            "index out of range",
            Box::new(|c: &mut Case| c.indices[4] = 7),
            |e| matches!(e, RunError::Indices { message, .. } if message.contains("indices[4] = 7")),
        ),
        (
            "negative index",
            Box::new(|c: &mut Case| c.indices[0] = -1),
            |e| matches!(e, RunError::Indices { message, .. } if message.contains("indices[0] = -1")),
        ),
        (
            "unsorted indices",
            Box::new(|c: &mut Case| c.indices.swap(0, 1)),
            |e| matches!(e, RunError::Indices { message, .. } if message.contains("strictly increasing")),
        ),
        (
            "duplicate indices",
            Box::new(|c: &mut Case| c.indices[6] = 0),
            |e| matches!(e, RunError::Indices { message, .. } if message.contains("parent position 4")),
        ),
        (
            "value array too short",
            Box::new(|c: &mut Case| {
                c.a.pop();
            }),
            |e| matches!(e, RunError::ArrayTooShort { buffer, needed: 8, found: 7, .. } if buffer == "A"),
        ),
        (
            "dense operand too short",
            Box::new(|c: &mut Case| c.b.truncate(c.b.len() - 1)),
            |e| matches!(e, RunError::ArrayTooShort { buffer, needed: 21, found: 20, .. } if buffer == "B"),
        ),
        (
            "row count disagreeing with indptr",
            Box::new(|c: &mut Case| c.m = 6),
            |e| matches!(e, RunError::Indptr { message, .. } if message.contains("expected 7")),
        ),
    ]
}

#[test]
fn garbage_is_refused_before_launch() {
    if !have_cc() {
        return;
    }
    let dir = temp_dir("garbage");
    let k = Kernel::from_source(&stage1(), CSRMM_C, ENTRY, params(), &opts(&dir)).expect("ok");
    for (what, mutate, check) in garbage_cases() {
        let mut c = case();
        mutate(&mut c);
        let mut args = args_of(&c);
        let before = output(&args);
        let err = k.run(&mut args).expect_err(what);
        assert!(check(&err), "{what}: unexpected error {err:?}");
        assert_eq!(
            output(&args),
            before,
            "{what}: the kernel must not have run"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn dense_operand_indexed_beyond_its_axis_is_refused() {
    // `B[j, k]` with `j` from `J` (length n) indexes `J_detach`: a J_detach shorter than the
    // coordinates J stores would be read out of bounds by the compiled code.
    let src = sparsetir_ops::get("csrmm").expect("csrmm").source.replace(
        "J_detach = T.sp.dense_fixed(n)",
        "J_detach = T.sp.dense_fixed(n - 1)",
    );
    let f = sparsetir_syntax::parse_module(&src)
        .expect("parses")
        .funcs
        .remove(0);
    let c = case();
    let mut args = args_of(&c);
    let b = Tensor::from_f64(DType::F32, &vec![1.0; (c.n - 1) * c.f]).expect("tensor");
    args.insert("b".into(), ArgValue::Array(b));
    let err = sparsetir_runtime::validate_args(&f, &args).expect_err("refused");
    assert!(
        matches!(&err, RunError::Domain { buffer, message } if buffer == "B" && message.contains("reach 6")),
        "{err:?}"
    );
    // With column 6 unused, the same data is accepted.
    let mut c2 = case();
    c2.indices = vec![1, 5, 0, 2, 3, 0, 4, 5];
    let mut args = args_of(&c2);
    let b = Tensor::from_f64(DType::F32, &vec![1.0; (c.n - 1) * c.f]).expect("tensor");
    args.insert("b".into(), ArgValue::Array(b));
    sparsetir_runtime::validate_args(&f, &args).expect("accepted");
}

/// Where AddressSanitizer's runtime lives, if the compiler ships it.
fn libasan() -> Option<PathBuf> {
    let out = Command::new("cc")
        .arg("-print-file-name=libasan.so")
        .output()
        .ok()?;
    let p = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    (p.is_absolute() && p.exists()).then_some(p)
}

/// Child half of [`no_out_of_bounds_access_under_asan`]: runs with AddressSanitizer preloaded,
/// the kernel compiled with `-fsanitize=address`, and every Rust allocation (our tensors) under
/// ASan's malloc, so a byte read past any array is reported and aborts the process.
#[test]
fn child_asan() {
    let Some(mode) = std::env::var_os("SPARSETIR_TEST_ASAN_MODE") else {
        return;
    };
    let dir = PathBuf::from(std::env::var_os("SPARSETIR_TEST_ASAN_CACHE").expect("cache dir"));
    let mut o = opts(&dir);
    o.flags = vec![
        "-fsanitize=address".into(),
        "-fno-omit-frame-pointer".into(),
    ];
    let k = Kernel::from_source(&stage1(), CSRMM_C, ENTRY, params(), &o).expect("compiles");
    if mode == "control" {
        // Bypass validation with a dense operand one row short: ASan must catch the read.
        let mut c = case();
        c.b.truncate(c.b.len() - c.f);
        let mut args = args_of(&c);
        // SAFETY: deliberately unsound: this is the control run showing the guard fires.
        let _ = unsafe { k.compiled().call_unvalidated(&mut args) };
        println!("control run finished without a report");
        return;
    }
    let c = case();
    let mut args = args_of(&c);
    k.run(&mut args).expect("valid data runs");
    assert_close(&output(&args), &expected(&c));
    for (what, mutate, check) in garbage_cases() {
        let mut c = case();
        mutate(&mut c);
        let mut args = args_of(&c);
        let err = k.run(&mut args).expect_err(what);
        assert!(check(&err), "{what}: {err:?}");
    }
    sddmm_flat_prefetch_in_bounds(&o);
    println!("asan child: all launches clean");
}

/// The default sddmm schedule prefetches the `B` row 8 stored elements ahead, past the row's
/// end (`"B:8:flat"`): on matrices with fewer than 8 elements after most positions, every read
/// on the way must stay inside `J_indices` (ASan reports any that does not).
fn sddmm_flat_prefetch_in_bounds(o: &sparsetir_runtime::CompileOptions) {
    use sparsetir_ops::data::{random_args, Pattern, Shape};
    let f = sparsetir_ops::load("sddmm").expect("catalog kernel");
    let schedule = sparsetir_ops::cpu_schedule("sddmm").expect("default schedule");
    assert!(schedule.contains(":flat"), "{schedule}");
    for feat in [4_i64, 32] {
        let k = sparsetir_runtime::build(&f, Some(schedule), &[("feat_size".into(), feat)], o)
            .expect("sddmm builds");
        for (pattern, seed) in [
            (Pattern::FullRows, 0),
            (Pattern::SingleRow, 1),
            (Pattern::Random { empty_rows: true }, 2),
        ] {
            let shape = Shape::new(pattern, 5, 6)
                .with_density(0.5)
                .with_feat(feat as usize);
            let case = random_args("sddmm", &shape, seed).expect("data");
            let mut got = case.args.clone();
            k.run(&mut got).expect("valid data runs");
            let mut want_args = case.args.clone();
            sparsetir_eval::eval_func(&f, &mut want_args).expect("evaluator");
            let (Some(ArgValue::Array(a)), Some(ArgValue::Array(b))) =
                (got.get("y"), want_args.get("y"))
            else {
                panic!("output y missing");
            };
            for i in 0..a.len() {
                let (x, y) = (a.get_f64(i), b.get_f64(i));
                assert!(
                    (x - y).abs() <= 1e-4 * y.abs().max(1.0),
                    "y[{i}]: {x} vs {y}"
                );
            }
        }
    }
}

#[test]
fn no_out_of_bounds_access_under_asan() {
    if !have_cc() {
        return;
    }
    let Some(asan) = libasan() else {
        eprintln!("note: skipping: the C compiler has no AddressSanitizer runtime");
        return;
    };
    let dir = temp_dir("asan");
    let exe = std::env::current_exe().expect("test binary");
    let run = |mode: &str| {
        Command::new(&exe)
            .args(["--exact", "child_asan", "--test-threads=1", "--nocapture"])
            .env("SPARSETIR_TEST_ASAN_MODE", mode)
            .env("SPARSETIR_TEST_ASAN_CACHE", &dir)
            .env("LD_PRELOAD", &asan)
            .env(
                "ASAN_OPTIONS",
                "detect_leaks=0:abort_on_error=0:exitcode=77",
            )
            .output()
            .expect("child ran")
    };
    // The control: without validation, the short operand is reported by ASan. This shows the
    // instrumentation sees out-of-bounds reads of our tensors...
    let control = run("control");
    let control_err = String::from_utf8_lossy(&control.stderr);
    if control_err.contains("ASan runtime does not come first")
        || control_err.contains("AddressSanitizer: failed")
    {
        eprintln!("note: skipping: AddressSanitizer cannot be preloaded here: {control_err}");
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    assert!(
        control_err.contains("heap-buffer-overflow"),
        "control run: status {:?}, stderr: {control_err}",
        control.status
    );
    // ...so the validated runs (valid data, then every garbage case) finishing without a report
    // proves no out-of-bounds access happened.
    let checked = run("validated");
    let stdout = String::from_utf8_lossy(&checked.stdout);
    assert!(
        checked.status.success() && stdout.contains("all launches clean"),
        "validated run: status {:?}\nstdout: {stdout}\nstderr: {}",
        checked.status,
        String::from_utf8_lossy(&checked.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
