//! The backward kernels of SpMM aggregating by max or min (`extreme_count`, `extreme_grad_a`,
//! `extreme_grad_b`), compiled by the C backend with and without their default schedules, equal
//! the stage-I evaluator, and the evaluator equals the definition written here: on a matrix with
//! empty rows and a full one, values drawn from few levels so that products tie, and the
//! forward output `E` the evaluator's `csrmm_max`/`csrmm_min`. Under their default schedules
//! the CUDA code of the same kernels (GPU schedules, run in the emulator) equals it too.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sparsetir_eval::eval_func;
use sparsetir_runtime::build;
use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};

use crate::common;
use common::{f32s, f64s, have_cc, i32s, int, opts, Args};

/// A CSR matrix (m × n) and its values from few levels, none zero; row 1 empty, row 2 full.
fn matrix(rng: &mut ChaCha8Rng, m: usize, n: usize) -> (Vec<i32>, Vec<i32>, Vec<f32>) {
    let levels = [-0.75f32, -0.5, -0.25, 0.25, 0.5, 0.75];
    let (mut indptr, mut indices, mut values) = (vec![0], Vec::new(), Vec::new());
    for i in 0..m {
        for j in 0..n {
            if i != 1 && (i == 2 || rng.random_bool(0.35)) {
                indices.push(j as i32);
                values.push(levels[rng.random_range(0..levels.len())]);
            }
        }
        indptr.push(indices.len() as i32);
    }
    (indptr, indices, values)
}

fn run(kernel: &str, schedule: bool, args: &Args) -> Args {
    let f = sparsetir_ops::load(kernel).expect("kernel");
    let mut want = args.clone();
    eval_func(&f, &mut want).unwrap_or_else(|e| panic!("{kernel}: evaluator: {e}"));
    if have_cc() {
        let s = if schedule {
            Some(sparsetir_ops::cpu_schedule(kernel).expect("schedule"))
        } else {
            None
        };
        let k = build(&f, s, &[], &opts("aggregation")).unwrap_or_else(|e| panic!("{e}"));
        let mut got = args.clone();
        k.run(&mut got).unwrap_or_else(|e| panic!("{kernel}: {e}"));
        same(&format!("{kernel} (C, schedule {schedule})"), &got, &want);
        if schedule {
            // The GPU path (Python's, on CUDA tensors): the default GPU schedule with
            // `feat_size` specialised, in the emulator.
            let feat = match args.get("feat_size") {
                Some(sparsetir_eval::ArgValue::Int(v)) => *v,
                _ => panic!("{kernel}: no feat_size"),
            };
            let sched = sparsetir_ops::gpu_schedule(kernel).expect("a GPU schedule");
            let cache = sparsetir_runtime::cache::KernelCache::new(
                std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("aggregation-gpu"),
            );
            let spec = [("feat_size".to_string(), feat)];
            let k = GpuKernel::build(&f, Some(sched), &spec, GpuDevice::Emulator, &cache)
                .unwrap_or_else(|e| panic!("{kernel} (GPU): {e}"));
            let mut got = args.clone();
            k.run(&mut got)
                .unwrap_or_else(|e| panic!("{kernel} (GPU): {e}"));
            same(&format!("{kernel} (GPU schedule, emulator)"), &got, &want);
        }
    }
    want
}

/// Every array of `got` equals `want`'s within 1e-5 relative.
fn same(what: &str, got: &Args, want: &Args) {
    for (name, v) in want {
        if matches!(v, sparsetir_eval::ArgValue::Array(_)) {
            let (g, w) = (f64s(got, name), f64s(want, name));
            for (x, (a, b)) in g.iter().zip(&w).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-5 * (1.0 + b.abs()),
                    "{what} `{name}`[{x}]: got {a}, evaluator {b}"
                );
            }
        }
    }
}

#[test]
fn extreme_backward_kernels_equal_the_definition() {
    let (m, n, f) = (9, 7, 5);
    let mut rng = ChaCha8Rng::seed_from_u64(41);
    let (indptr, indices, values) = matrix(&mut rng, m, n);
    let nnz = indices.len();
    let levels = [-1.0f32, -0.5, 0.5, 1.0];
    let b: Vec<f32> = (0..n * f)
        .map(|_| levels[rng.random_range(0..levels.len())])
        .collect();
    let w: Vec<f32> = (0..m * f).map(|_| rng.random_range(-1.0..1.0)).collect();
    let structure = |args: &mut Args| {
        args.insert("indptr".into(), i32s(&indptr));
        args.insert("indices".into(), i32s(&indices));
        args.insert("m".into(), int(m));
        args.insert("n".into(), int(n));
        args.insert("feat_size".into(), int(f));
        args.insert("nnz".into(), int(nnz));
    };
    // The transpose: its rows are A's columns, each listing its rows in order.
    let mut t_indptr = vec![0i32];
    let (mut t_indices, mut t_values) = (Vec::new(), Vec::new());
    for j in 0..n as i32 {
        for i in 0..m {
            for p in indptr[i] as usize..indptr[i + 1] as usize {
                if indices[p] == j {
                    t_indices.push(i as i32);
                    t_values.push(values[p]);
                }
            }
        }
        t_indptr.push(t_indices.len() as i32);
    }
    let mut tied = 0;
    for (forward, pick) in [
        ("csrmm_max", f32::max as fn(f32, f32) -> f32),
        ("csrmm_min", f32::min),
    ] {
        let mut args = Args::new();
        structure(&mut args);
        args.insert("a".into(), f32s(vec![nnz], values.clone()));
        args.insert("b".into(), f32s(vec![n, f], b.clone()));
        args.insert("c".into(), f32s(vec![m, f], vec![0.0; m * f]));
        let e = f64s(&run(forward, true, &args), "c");
        for schedule in [false, true] {
            // The definition, per output (i, k): the stored j whose product equals E[i, k].
            let hits = |i: usize, k: usize| -> Vec<usize> {
                (indptr[i] as usize..indptr[i + 1] as usize)
                    .filter(|&p| {
                        (values[p] * b[indices[p] as usize * f + k]) as f64 == e[i * f + k]
                    })
                    .collect()
            };
            let mut args = Args::new();
            structure(&mut args);
            args.insert("a".into(), f32s(vec![nnz], values.clone()));
            args.insert("b".into(), f32s(vec![n, f], b.clone()));
            args.insert(
                "e".into(),
                f32s(vec![m, f], e.iter().map(|x| *x as f32).collect()),
            );
            args.insert("c".into(), f32s(vec![m, f], vec![7.0; m * f]));
            let count = f64s(&run("extreme_count", schedule, &args), "c");
            for i in 0..m {
                for k in 0..f {
                    let want = hits(i, k).len();
                    assert_eq!(count[i * f + k], want as f64, "count [{i}, {k}]");
                    tied += usize::from(want > 1);
                    if want > 0 {
                        // E is the extremum of the row's products.
                        let ext = hits(i, k)
                            .into_iter()
                            .map(|p| values[p] * b[indices[p] as usize * f + k]);
                        let all = (indptr[i] as usize..indptr[i + 1] as usize)
                            .map(|p| values[p] * b[indices[p] as usize * f + k]);
                        assert_eq!(ext.fold(f32::NAN, pick), all.fold(f32::NAN, pick));
                    }
                }
            }
            args.remove("c");
            args.insert("w".into(), f32s(vec![m, f], w.clone()));
            args.insert("y".into(), f32s(vec![nnz], vec![7.0; nnz]));
            let ga = f64s(&run("extreme_grad_a", schedule, &args), "y");
            for i in 0..m {
                for p in indptr[i] as usize..indptr[i + 1] as usize {
                    let want: f64 = (0..f)
                        .filter(|&k| hits(i, k).contains(&p))
                        .map(|k| (w[i * f + k] * b[indices[p] as usize * f + k]) as f64)
                        .sum();
                    assert!(
                        (ga[p] - want).abs() <= 1e-5,
                        "grad_a [{p}]: {} vs {want}",
                        ga[p]
                    );
                }
            }
            let mut targs = Args::new();
            targs.insert("indptr".into(), i32s(&t_indptr));
            targs.insert("indices".into(), i32s(&t_indices));
            targs.insert("n".into(), int(n));
            targs.insert("m".into(), int(m));
            targs.insert("feat_size".into(), int(f));
            targs.insert("nnz".into(), int(nnz));
            targs.insert("at".into(), f32s(vec![nnz], t_values.clone()));
            targs.insert("b".into(), f32s(vec![n, f], b.clone()));
            targs.insert(
                "e".into(),
                f32s(vec![m, f], e.iter().map(|x| *x as f32).collect()),
            );
            targs.insert("w".into(), f32s(vec![m, f], w.clone()));
            targs.insert("c".into(), f32s(vec![n, f], vec![7.0; n * f]));
            let gb = f64s(&run("extreme_grad_b", schedule, &targs), "c");
            for j in 0..n {
                for k in 0..f {
                    let want: f64 = (0..m)
                        .flat_map(|i| hits(i, k).into_iter().map(move |p| (i, p)))
                        .filter(|&(_, p)| indices[p] as usize == j)
                        .map(|(i, p)| (values[p] * w[i * f + k]) as f64)
                        .sum();
                    assert!((gb[j * f + k] - want).abs() <= 1e-5, "grad_b [{j}, {k}]");
                }
            }
        }
    }
    assert!(tied > 0, "the data has no ties to split");
}
