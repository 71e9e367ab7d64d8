//! Helpers shared by the runtime crate's C-backend tests: the compiler check, compile options
//! with a cache under the target directory, argument builders and random dense matrices.
#![allow(dead_code)]

pub mod backends;
pub mod handwritten;
pub mod warpgroup;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use sparsetir_eval::ArgValue;
use sparsetir_formats::{Tensor, TensorData};
use sparsetir_runtime::{CompileOptions, Compiler};

pub type Args = HashMap<String, ArgValue>;

/// Whether a C compiler runs; the first time it does not, a note says the tests are skipped.
pub fn have_cc() -> bool {
    static NOTE: std::sync::Once = std::sync::Once::new();
    match Compiler::new(None, &[]).version() {
        Ok(_) => true,
        Err(e) => {
            NOTE.call_once(|| eprintln!("note: skipping: no C compiler ({e})"));
            false
        }
    }
}

/// Two threads, the default compiler, the kernel cache in `dir`.
pub fn opts_in(dir: &Path) -> CompileOptions {
    CompileOptions {
        cc: None,
        flags: Vec::new(),
        threads: Some(2),
        cache_dir: Some(dir.to_path_buf()),
    }
}

/// [`opts_in`] the cache `name` under the target directory, so reruns reuse compiled kernels
/// and the user's cache is never touched.
pub fn opts(name: &str) -> CompileOptions {
    opts_in(&PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name))
}

pub fn f32s(shape: Vec<usize>, v: Vec<f32>) -> ArgValue {
    ArgValue::Array(Tensor {
        shape,
        data: TensorData::F32(v),
    })
}

pub fn i32s(v: &[i32]) -> ArgValue {
    ArgValue::Array(Tensor {
        shape: vec![v.len()],
        data: TensorData::I32(v.to_vec()),
    })
}

pub fn int(n: usize) -> ArgValue {
    ArgValue::Int(n as i64)
}

/// The array `name` of `args` as f64s; panics when there is none.
pub fn f64s(args: &Args, name: &str) -> Vec<f64> {
    match args.get(name) {
        Some(ArgValue::Array(t)) => t.to_f64_vec(),
        other => panic!("no array `{name}`: {other:?}"),
    }
}

/// A random `rows × cols` matrix as a dense row-major array: row 1 empty (when there are more
/// than two rows), row 2 full, the others holding each column with probability `p`; values in
/// ±[0.05, 1), never exactly zero, so every kept entry is stored.
/// A random CSR pattern: `m` rows (every 7th empty), `n` columns, sorted unique columns per
/// row (each present with probability 0.3).
pub fn csr_pattern(rng: &mut ChaCha8Rng, m: usize, n: usize) -> (Vec<i32>, Vec<i32>) {
    let mut indptr = vec![0i32];
    let mut indices = Vec::new();
    for i in 0..m {
        if i % 7 != 3 {
            for j in 0..n {
                if rng.random_bool(0.3) {
                    indices.push(j as i32);
                }
            }
        }
        indptr.push(indices.len() as i32);
    }
    (indptr, indices)
}

pub fn random_dense(rng: &mut ChaCha8Rng, rows: usize, cols: usize, p: f64) -> Vec<f32> {
    let mut d = vec![0.0f32; rows * cols];
    for i in 0..rows {
        for j in 0..cols {
            let keep = match i {
                1 if rows > 2 => false,
                2 => true,
                _ => rng.random_bool(p),
            };
            if keep {
                d[i * cols + j] =
                    rng.random_range(0.05f32..1.0) * if rng.random_bool(0.5) { 1.0 } else { -1.0 };
            }
        }
    }
    d
}

/// Every output of `got` equals `want` within `rel` relative (NaN equals NaN, an infinity
/// itself).
pub fn assert_outputs_close(what: &str, outputs: &[String], got: &Args, want: &Args, rel: f64) {
    for name in outputs {
        let (Some(ArgValue::Array(a)), Some(ArgValue::Array(b))) = (got.get(name), want.get(name))
        else {
            panic!("{what}: output `{name}` missing");
        };
        assert_eq!(a.len(), b.len(), "{what}: `{name}` length");
        for i in 0..a.len() {
            let (x, y) = (a.get_f64(i), b.get_f64(i));
            let ok = (x - y).abs() <= rel * y.abs().max(1.0)
                || (x.is_nan() && y.is_nan())
                || (x.is_infinite() && x == y);
            assert!(ok, "{what}: `{name}`[{i}] = {x}, the reference gives {y}");
        }
    }
}

/// `f` with every `float32` buffer retyped to `dt` (float16/bfloat16 storage tests), and the
/// parameter names of the retyped buffers.
pub fn retype_floats(
    f: &sparsetir_ir::PrimFunc,
    dt: sparsetir_ir::DType,
) -> (sparsetir_ir::PrimFunc, Vec<String>) {
    let mut g = f.clone();
    let mut params = Vec::new();
    let handles: Vec<_> = g.buffers.handles().collect();
    for h in handles {
        let b = &mut g.buffers[h];
        if b.dtype == sparsetir_ir::DType::F32 {
            b.dtype = dt;
            if let sparsetir_ir::BufferDecl::Match { data } = b.decl {
                params.push(f.vars[data].name.clone());
            }
        }
    }
    (g, params)
}

/// `args` with the arrays named in `params` converted (rounded to nearest even) to `dt`.
pub fn convert_args(args: Args, params: &[String], dt: sparsetir_ir::DType) -> Args {
    args.into_iter()
        .map(|(name, v)| {
            let v = match v {
                ArgValue::Array(t) if params.contains(&name) => {
                    let mut out = Tensor::zeros(dt, t.shape.clone()).expect("tensor");
                    for i in 0..t.len() {
                        out.set_f64(i, t.get_f64(i));
                    }
                    ArgValue::Array(out)
                }
                other => other,
            };
            (name, v)
        })
        .collect()
}

/// Every output of `got` equals `want` within `ulps` units in the last place of `dt` (a 16-bit
/// float type) relative to the output's largest magnitude (at least 1); NaN equals NaN.
pub fn assert_outputs_close_16(
    what: &str,
    outputs: &[String],
    got: &Args,
    want: &Args,
    dt: sparsetir_ir::DType,
    ulps: f64,
) {
    let ulp = if dt == sparsetir_ir::DType::F16 {
        1.0 / 1024.0
    } else {
        1.0 / 128.0
    };
    for name in outputs {
        let (Some(ArgValue::Array(a)), Some(ArgValue::Array(b))) = (got.get(name), want.get(name))
        else {
            panic!("{what}: output `{name}` missing");
        };
        assert_eq!(a.dtype(), b.dtype(), "{what}: `{name}` dtype");
        let scale = (0..b.len())
            .map(|i| b.get_f64(i).abs())
            .filter(|x| x.is_finite())
            .fold(1.0, f64::max);
        let tol = ulps * ulp * scale;
        for i in 0..a.len() {
            let (x, y) = (a.get_f64(i), b.get_f64(i));
            let same = (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= tol;
            assert!(same, "{what}: `{name}`[{i}] = {x}, the reference gives {y}");
        }
    }
}

/// The 7 × 9 shape of the catalog differential tests (feature width 5, blocks of 2, depth 3,
/// random values) with pattern `p`.
pub fn catalog_shape(p: sparsetir_ops::data::Pattern) -> sparsetir_ops::data::Shape {
    sparsetir_ops::data::Shape::new(p, 7, 9)
        .with_density(0.4)
        .with_feat(5)
        .with_block(2)
        .with_depth(3)
        .with_init(sparsetir_ops::data::Init::Random)
}

/// NVRTC, or `None` (with a note) where it is missing outside CI.
pub fn nvrtc() -> Option<sparsetir_cuda::Nvrtc> {
    match sparsetir_cuda::Nvrtc::load() {
        Ok(n) => Some(n),
        Err(e) => {
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "NVRTC is required under CI=true (run scripts/setup-nvrtc.sh): {e}"
            );
            eprintln!("note: skipping NVRTC compiles: {e}");
            None
        }
    }
}

/// The PTX NVRTC makes of `src` (`name` in messages) for `arch`, with every one of
/// `instructions` in it (asserted), and the cubin compiled too without spills
/// ([`warpgroup::compiled_without_spills`]); `None` where NVRTC is missing outside CI.
pub fn ptx_holding(src: &str, name: &str, arch: &str, instructions: &[&str]) -> Option<String> {
    let (_, ptx) = warpgroup::compiled_without_spills(src, arch, name)?;
    for ins in instructions {
        assert!(ptx.contains(ins), "{name}: no `{ins}` in the PTX");
    }
    Some(ptx)
}

/// Whether a real GPU is usable here (driver and a device); a note otherwise. Tests that need
/// one return early without it (CI has none; `bench/gpu/run.sh` runs them on a device).
pub fn have_gpu() -> bool {
    match sparsetir_cuda::Context::first_device() {
        Ok(_) => true,
        Err(e) => {
            eprintln!("note: skipping the real-GPU checks: {e}");
            false
        }
    }
}

/// Arguments of the catalog's spmm_24 for a random `m x n` 2:4 matrix (every group of four
/// columns stores two values at two random distinct positions, in increasing order), the values
/// and the dense operand (`feat` columns) stored as `dt`, the output (float32) pre-filled with 7.
pub fn spmm_24_args(
    rng: &mut ChaCha8Rng,
    m: usize,
    n: usize,
    feat: usize,
    dt: sparsetir_ir::DType,
) -> Args {
    let groups = m * (n / 4);
    let mut pos = Vec::with_capacity(groups * 2);
    for _ in 0..groups {
        let p0 = rng.random_range(0..3i64);
        let p1 = rng.random_range(p0 + 1..4i64);
        pos.extend([p0, p1]);
    }
    let mut random =
        |k: usize| -> Vec<f64> { (0..k).map(|_| rng.random_range(-1.0..1.0)).collect() };
    let (vals, b) = (random(groups * 2), random(n * feat));
    let arr = |dt, v: &[f64]| ArgValue::Array(Tensor::from_f64(dt, v).expect("tensor"));
    let mut args = HashMap::new();
    args.insert("a".into(), arr(dt, &vals));
    args.insert("b".into(), arr(dt, &b));
    args.insert(
        "c".into(),
        arr(sparsetir_ir::DType::F32, &vec![7.0; m * feat]),
    );
    args.insert(
        "indices".into(),
        ArgValue::Array(Tensor::from_i64(sparsetir_ir::DType::I32, &pos).expect("tensor")),
    );
    args.insert("m".into(), ArgValue::Int(m as i64));
    args.insert("n".into(), ArgValue::Int(n as i64));
    args.insert("feat_size".into(), ArgValue::Int(feat as i64));
    args
}

/// The output `c` of `spmm_24` on `args` (from [`spmm_24_args`], positions of any integer
/// type) computed directly in `f64` from the stored values: `c[i, f]` is the sum over the groups
/// `g` of row `i` and their two slots `s` of `a[i, g, s] * b[4 g + indices[i, g, s], f]`. A
/// reference independent of the evaluator for sizes that would take the tree-walking evaluator
/// most of a minute (checked against it by `spmm_24_dense_reference_equals_the_evaluator`).
pub fn spmm_24_dense(args: &Args) -> Args {
    let int = |k: &str| match args.get(k) {
        Some(ArgValue::Int(v)) => *v as usize,
        _ => panic!("spmm_24 argument `{k}`"),
    };
    let arr = |k: &str| match args.get(k) {
        Some(ArgValue::Array(t)) => (0..t.len()).map(|i| t.get_f64(i)).collect::<Vec<f64>>(),
        _ => panic!("spmm_24 argument `{k}`"),
    };
    let (m, n, feat) = (int("m"), int("n"), int("feat_size"));
    let (a, b, pos) = (arr("a"), arr("b"), arr("indices"));
    let mut c = vec![0.0f64; m * feat];
    for i in 0..m {
        for g in 0..n / 4 {
            for s in 0..2 {
                let e = (i * (n / 4) + g) * 2 + s;
                let row = 4 * g + pos[e] as usize;
                for f in 0..feat {
                    c[i * feat + f] += a[e] * b[row * feat + f];
                }
            }
        }
    }
    let mut out = args.clone();
    out.insert(
        "c".into(),
        ArgValue::Array(Tensor::from_f64(sparsetir_ir::DType::F32, &c).expect("tensor")),
    );
    out
}

/// A random pattern of `nb` x `mb` blocks, `(indptr, indices)`: block row 1 empty when there are
/// more than two, block (0, 0) always stored, each other block with probability 0.4.
pub fn bsr_pattern(rng: &mut ChaCha8Rng, nb: usize, mb: usize) -> (Vec<i64>, Vec<i64>) {
    let (mut indptr, mut indices) = (vec![0i64], Vec::new());
    for i in 0..nb {
        for j in 0..mb {
            if !(i == 1 && nb > 2) && (rng.random_bool(0.4) || (i == 0 && j == 0)) {
                indices.push(j as i64);
            }
        }
        indptr.push(indices.len() as i64);
    }
    (indptr, indices)
}

/// `args` with the positions (`indices`) as int8, as `bench --format 2:4` passes them.
pub fn positions_i8(mut args: Args) -> Args {
    if let Some(ArgValue::Array(t)) = args.get("indices") {
        let v: Vec<i64> = (0..t.len()).map(|i| t.get_f64(i) as i64).collect();
        let t = Tensor::from_i64(sparsetir_ir::DType::I8, &v).expect("int8 positions");
        args.insert("indices".into(), ArgValue::Array(t));
    }
    args
}

/// Walks `items` with `main` in order while a second thread runs `warm` on them from the last
/// one back, until the two meet: `warm` builds what `main` will need (a kernel into the cache),
/// so that a test whose cases each compile a module keeps both cores busy even when it runs
/// alone. `warm`'s failures are ignored (`main` meets and reports them); a panic of `main`
/// stops the second thread at its next item.
pub fn with_warming<T: Sync>(items: &[T], warm: impl Fn(&T) + Sync, mut main: impl FnMut(&T)) {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    // `front`: items `main` has started; `back`: items `warm` has not taken.
    let (front, back, stop) = (
        AtomicUsize::new(0),
        AtomicUsize::new(items.len()),
        AtomicBool::new(false),
    );
    struct Stop<'a>(&'a AtomicBool);
    impl Drop for Stop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Relaxed);
        }
    }
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let i = back.fetch_sub(1, Ordering::Relaxed);
                if i == 0 || i <= front.load(Ordering::Relaxed) + 1 {
                    break;
                }
                let _ =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| warm(&items[i - 1])));
            }
        });
        let _stop = Stop(&stop);
        for (i, item) in items.iter().enumerate() {
            front.store(i + 1, Ordering::Relaxed);
            main(item);
        }
    });
}
