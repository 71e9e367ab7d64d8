//! The sparse-output kernels (issue 15) through the stage II/III interpreter and the C backend,
//! against the stage-I evaluator (the oracle) and a dense computation written here: assembled
//! outputs in two phases (`runtime::assembly`), merge loops for `T.sp.union`/`T.sp.intersect`,
//! Gustavson's workspace for SpGEMM; random operands with different structures, empty rows,
//! empty operands and rectangular shapes; serial and parallel schedules.

#![allow(clippy::needless_range_loop)]

mod common;

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sparsetir_eval::{eval_func, ArgValue};
use sparsetir_runtime::assembly::{run_interp, AssembledKernel};
use sparsetir_runtime::compile_c;

use common::{f32s, f64s, have_cc, i32s, int, opts, Args};

/// A CSR matrix with sorted unique columns.
#[derive(Clone, Debug)]
struct Csr {
    m: usize,
    n: usize,
    indptr: Vec<i32>,
    indices: Vec<i32>,
    vals: Vec<f32>,
}

impl Csr {
    fn random(rng: &mut ChaCha8Rng, m: usize, n: usize, density: f64) -> Csr {
        let mut indptr = vec![0];
        let (mut indices, mut vals) = (Vec::new(), Vec::new());
        for i in 0..m {
            let empty_row = i % 5 == 3;
            for j in 0..n {
                if !empty_row && rng.random_bool(density) {
                    indices.push(j as i32);
                    vals.push((rng.random_range(1..16) as f32) / 4.0 - 2.0);
                }
            }
            indptr.push(indices.len() as i32);
        }
        Csr {
            m,
            n,
            indptr,
            indices,
            vals,
        }
    }
    fn dense(&self) -> Vec<Vec<Option<f64>>> {
        let mut d = vec![vec![None; self.n]; self.m];
        for i in 0..self.m {
            for p in self.indptr[i] as usize..self.indptr[i + 1] as usize {
                d[i][self.indices[p] as usize] = Some(f64::from(self.vals[p]));
            }
        }
        d
    }
    fn bind(&self, args: &mut Args, data: &str, prefix: &str) {
        args.insert(data.into(), f32s(vec![self.vals.len()], self.vals.clone()));
        args.insert(format!("{prefix}_indptr"), i32s(&self.indptr));
        args.insert(format!("{prefix}_indices"), i32s(&self.indices));
        args.insert(format!("nnz_{prefix}"), int(self.vals.len()));
    }
}

/// The assembled `C` of `args` as a dense matrix of `Some(value)` where stored.
fn result(args: &Args, m: usize, n: usize) -> Vec<Vec<Option<f64>>> {
    let ip = f64s(args, "c_indptr");
    let ix = f64s(args, "c_indices");
    let v = f64s(args, "c");
    assert_eq!(ip.len(), m + 1);
    assert_eq!(args.get("nnz_c"), Some(&ArgValue::Int(v.len() as i64)));
    let mut d = vec![vec![None; n]; m];
    for i in 0..m {
        let (lo, hi) = (ip[i] as usize, ip[i + 1] as usize);
        for p in lo..hi {
            if p > lo {
                assert!(ix[p] > ix[p - 1], "row {i}: columns not increasing");
            }
            d[i][ix[p] as usize] = Some(v[p]);
        }
    }
    d
}

fn close(got: &[Vec<Option<f64>>], want: &[Vec<Option<f64>>], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: rows");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        for (j, (a, b)) in g.iter().zip(w).enumerate() {
            match (a, b) {
                (Some(a), Some(b)) => assert!(
                    (a - b).abs() <= 1e-4 * (1.0 + b.abs()),
                    "{what}: ({i}, {j}) = {a}, want {b}"
                ),
                (None, None) => {}
                _ => panic!("{what}: ({i}, {j}) stored {a:?}, want {b:?}"),
            }
        }
    }
}

/// A dense reference of each kernel.
fn reference(kernel: &str, a: &Csr, b: &Csr, mask: Option<&Csr>) -> Vec<Vec<Option<f64>>> {
    let (da, db) = (a.dense(), b.dense());
    match kernel {
        "spadd" | "spmul" => (0..a.m)
            .map(|i| {
                (0..a.n)
                    .map(|j| match (da[i][j], db[i][j], kernel) {
                        (Some(x), Some(y), "spadd") => Some(x + y),
                        (Some(x), Some(y), _) => Some(x * y),
                        (Some(x), None, "spadd") | (None, Some(x), "spadd") => Some(x),
                        _ => None,
                    })
                    .collect()
            })
            .collect(),
        _ => {
            let mut c = vec![vec![None; b.n]; a.m];
            for i in 0..a.m {
                for k in 0..a.n {
                    let Some(x) = da[i][k] else { continue };
                    for j in 0..b.n {
                        if let Some(y) = db[k][j] {
                            *c[i][j].get_or_insert(0.0) += x * y;
                        }
                    }
                }
            }
            if let Some(mk) = mask {
                let dm = mk.dense();
                for i in 0..a.m {
                    for j in 0..b.n {
                        c[i][j] = dm[i][j].map(|mv| mv * c[i][j].unwrap_or(0.0));
                    }
                }
            }
            c
        }
    }
}

fn args_for(kernel: &str, a: &Csr, b: &Csr, mask: Option<&Csr>) -> Args {
    let mut args = HashMap::new();
    a.bind(&mut args, "a", "a");
    b.bind(&mut args, "b", "b");
    args.insert("m".into(), int(a.m));
    if kernel == "spadd" || kernel == "spmul" {
        args.insert("n".into(), int(a.n));
    } else {
        args.insert("k".into(), int(a.n));
        args.insert("n".into(), int(b.n));
    }
    if let Some(mk) = mask {
        mk.bind(&mut args, "mask", "m");
        // `m` is both the mask's prefix and the row count: the mask's arrays are m_indptr,
        // m_indices, nnz_m; the row count stays `m`.
        args.insert("m".into(), int(a.m));
        args.insert(
            "c".into(),
            f32s(vec![mk.vals.len()], vec![0.0; mk.vals.len()]),
        );
    }
    args
}

/// Pairs of operands: (m, k, n, density of A, density of B).
const SHAPES: &[(usize, usize, usize, f64, f64)] = &[
    (9, 9, 9, 0.3, 0.25),
    (7, 5, 9, 0.4, 0.3),
    (12, 6, 4, 0.2, 0.5),
    (6, 6, 6, 0.0, 0.4),
    (1, 1, 1, 1.0, 1.0),
    (30, 30, 30, 0.1, 0.15),
];

const PARALLEL: &str = "# stage III\nb0 = sch.get_block(\"{name}0\")\nl0, = sch.get_loops(b0)\nsch.parallel(l0)\nsch.annotate(l0, \"schedule\", \"dynamic\")\n";

fn operands(kernel: &str, seed: u64) -> Vec<(Csr, Csr, Option<Csr>)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    SHAPES
        .iter()
        .map(|&(m, k, n, da, db)| {
            let elementwise = kernel == "spadd" || kernel == "spmul";
            let a = Csr::random(&mut rng, m, if elementwise { n } else { k }, da);
            let b = if elementwise {
                Csr::random(&mut rng, m, n, db)
            } else {
                Csr::random(&mut rng, k, n, db)
            };
            let mask = (kernel == "masked_spgemm").then(|| Csr::random(&mut rng, m, n, 0.4));
            (a, b, mask)
        })
        .collect()
}

fn check_assembling(kernel: &str) {
    let f = sparsetir_ops::load(kernel).expect("kernel");
    let name = kernel;
    let parallel = PARALLEL.replace("{name}", name);
    let compiled = have_cc().then(|| {
        [None, Some(parallel.as_str())].map(|s| {
            AssembledKernel::build(&f, s, &[], &opts(&format!("sparse_output_{kernel}")))
                .unwrap_or_else(|e| panic!("{kernel}: build: {e}"))
        })
    });
    for (t, (a, b, _)) in operands(kernel, 15).iter().enumerate() {
        let want = reference(kernel, a, b, None);
        let what = format!("{kernel} case {t} ({}x{} and {}x{})", a.m, a.n, b.m, b.n);
        let mut e = args_for(kernel, a, b, None);
        eval_func(&f, &mut e).unwrap_or_else(|err| panic!("{what}: eval: {err}"));
        close(&result(&e, a.m, b.n), &want, &format!("{what}, eval"));
        let mut i = args_for(kernel, a, b, None);
        run_interp(&f, &mut i).unwrap_or_else(|err| panic!("{what}: interp: {err}"));
        close(&result(&i, a.m, b.n), &want, &format!("{what}, interp"));
        if let Some(ks) = &compiled {
            for (s, k) in ks.iter().enumerate() {
                let mut c = args_for(kernel, a, b, None);
                k.run(&mut c)
                    .unwrap_or_else(|err| panic!("{what}: C: {err}"));
                close(
                    &result(&c, a.m, b.n),
                    &want,
                    &format!("{what}, C schedule {s}"),
                );
            }
        }
    }
}

#[test]
fn spadd_on_every_backend() {
    check_assembling("spadd");
}

#[test]
fn spmul_on_every_backend() {
    check_assembling("spmul");
}

#[test]
fn spgemm_on_every_backend() {
    check_assembling("spgemm");
}

#[test]
fn masked_spgemm_on_every_backend() {
    let f = sparsetir_ops::load("masked_spgemm").expect("kernel");
    let kernel = have_cc().then(|| compile_c(&f, &opts("sparse_output_masked")));
    for (t, (a, b, mask)) in operands("masked_spgemm", 16).iter().enumerate() {
        let mk = mask.as_ref().expect("mask");
        let want = reference("masked_spgemm", a, b, Some(mk));
        let what = format!("masked_spgemm case {t}");
        let read = |args: &Args| -> Vec<Vec<Option<f64>>> {
            let v = f64s(args, "c");
            let mut d = vec![vec![None; mk.n]; mk.m];
            for i in 0..mk.m {
                for p in mk.indptr[i] as usize..mk.indptr[i + 1] as usize {
                    d[i][mk.indices[p] as usize] = Some(v[p]);
                }
            }
            d
        };
        let mut e = args_for("masked_spgemm", a, b, Some(mk));
        eval_func(&f, &mut e).unwrap_or_else(|err| panic!("{what}: eval: {err}"));
        close(&read(&e), &want, &format!("{what}, eval"));
        let mut i = args_for("masked_spgemm", a, b, Some(mk));
        run_interp(&f, &mut i).unwrap_or_else(|err| panic!("{what}: interp: {err}"));
        close(&read(&i), &want, &format!("{what}, interp"));
        if let Some(k) = &kernel {
            let mut c = args_for("masked_spgemm", a, b, Some(mk));
            k.as_ref()
                .expect("builds")
                .run(&mut c)
                .unwrap_or_else(|err| panic!("{what}: C: {err}"));
            close(&read(&c), &want, &format!("{what}, C"));
        }
    }
}
