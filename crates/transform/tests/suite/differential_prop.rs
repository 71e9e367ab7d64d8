//! Differential property tests of the lowering passes: for every catalog kernel, on random
//! inputs from `sparsetir_ops::data` (random shapes with empty rows, a single row, rows holding
//! every column, nnz 0, 1x1, 0x0; proptest shrinks the shape and seed), the stage-I reference
//! evaluator (`eval_func`), the stage-II interpreter on `lower_sparse_iter(f)` and the stage-III
//! interpreter on `lower_sparse_buffer(lower_sparse_iter(f))` (`run_func`) leave the same arrays
//! behind, with and without `check_invalid_binary_search`. Floats agree to 1e-5 relative,
//! integers and inputs exactly.

use std::collections::HashMap;
use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use sparsetir_eval::{eval_func, run_func, ArgValue};
use sparsetir_formats::Tensor;
use sparsetir_ir::PrimFunc;
use sparsetir_ops::data::{random_args, Case, Init, Pattern, Shape};
use sparsetir_transform::{lower_sparse_buffer, lower_sparse_iter, LowerOptions};

type Args = HashMap<String, ArgValue>;

/// One lowering of a kernel: stage II and stage III under one setting of the search check.
struct Lowered {
    checked: bool,
    stage2: PrimFunc,
    stage3: PrimFunc,
}

/// A kernel with its lowerings (one per search-check setting, the checked one only when it
/// differs from the unchecked one).
struct Stages {
    func: PrimFunc,
    lowered: Vec<Lowered>,
}

fn build(name: &str) -> Result<Stages, String> {
    let func = sparsetir_ops::load(name).map_err(|e| e.to_string())?;
    let mut lowered: Vec<Lowered> = Vec::new();
    for checked in [false, true] {
        let opts = LowerOptions {
            check_invalid_binary_search: checked,
            assembly: None,
        };
        let stage2 = lower_sparse_iter(&func, &opts).map_err(|e| format!("stage II: {e}"))?;
        let stage3 = lower_sparse_buffer(&stage2).map_err(|e| format!("stage III: {e}"))?;
        if lowered
            .iter()
            .any(|l| sparsetir_ir::equal::func_eq(&l.stage2, &stage2))
        {
            continue;
        }
        lowered.push(Lowered {
            checked,
            stage2,
            stage3,
        });
    }
    Ok(Stages { func, lowered })
}

/// The kernel's stages, lowered once per test binary.
fn stages(name: &str) -> Result<&'static Stages, String> {
    static ALL: OnceLock<HashMap<&'static str, Result<Stages, String>>> = OnceLock::new();
    let all = ALL.get_or_init(|| {
        sparsetir_ops::catalog()
            .iter()
            .map(|k| (k.name, build(k.name)))
            .collect()
    });
    match all.get(name) {
        Some(Ok(s)) => Ok(s),
        Some(Err(e)) => Err(format!("{name}: {e}")),
        None => Err(format!("{name}: not in the catalog")),
    }
}

/// Whether an unchecked search of this kernel may look for an absent coordinate on this case:
/// then the unchecked lowering's behaviour is undefined (the interpreter reports a position out
/// of range), and only the checked lowering is run.
fn search_may_miss(kernel: &str, case: &Case) -> bool {
    match kernel {
        // Iterates the dense J_detach and searches each coordinate in A's row.
        "csrmm_dense_iter" => {
            let (m, n, nnz) = (case.int("m"), case.int("n"), case.int("nnz"));
            !matches!((m, n, nnz), (Some(m), Some(n), Some(nnz)) if m * n == nnz)
        }
        _ => false,
    }
}

fn same_tensor(a: &Tensor, b: &Tensor) -> Result<(), String> {
    if a.dtype() != b.dtype() || a.len() != b.len() {
        return Err(format!(
            "{} of {} vs {} of {}",
            a.dtype(),
            a.len(),
            b.dtype(),
            b.len()
        ));
    }
    if a.dtype().is_float() {
        let (x, y) = (a.to_f64_vec(), b.to_f64_vec());
        for (i, (p, q)) in x.iter().zip(&y).enumerate() {
            let same = (p.is_nan() && q.is_nan())
                || p == q
                || (p - q).abs() <= 1e-5 * p.abs().max(q.abs()).max(1.0);
            if !same {
                return Err(format!("element {i}: {p} vs {q}\n  {x:?}\n  {y:?}"));
            }
        }
    } else {
        let (x, y) = (a.to_i64_vec(), b.to_i64_vec());
        if let Some(i) = (0..x.len()).find(|&i| x[i] != y[i]) {
            return Err(format!(
                "element {i}: {} vs {}\n  {x:?}\n  {y:?}",
                x[i], y[i]
            ));
        }
    }
    Ok(())
}

/// Every array of `want` equals the one of `got` (outputs within tolerance, inputs unchanged).
fn same_arrays(want: &Args, got: &Args) -> Result<(), String> {
    let mut names: Vec<&String> = want.keys().collect();
    names.sort();
    for name in names {
        match (&want[name], got.get(name)) {
            (ArgValue::Array(w), Some(ArgValue::Array(g))) => {
                same_tensor(w, g).map_err(|e| format!("`{name}` differs: {e}"))?
            }
            (w, g) if Some(w) != g => return Err(format!("`{name}`: {w:?} vs {g:?}")),
            _ => {}
        }
    }
    Ok(())
}

/// Runs the three stages of `kernel` on the case of `(shape, seed)` and compares them.
fn check(kernel: &str, shape: &Shape, seed: u64) -> Result<(), String> {
    let st = stages(kernel)?;
    let case = random_args(kernel, shape, seed).map_err(|e| format!("data: {e}"))?;
    let mut stage1 = case.args.clone();
    eval_func(&st.func, &mut stage1).map_err(|e| format!("stage I: {e}"))?;
    for low in &st.lowered {
        if !low.checked && search_may_miss(kernel, &case) {
            continue;
        }
        let mode = format!("check_invalid_binary_search={}", low.checked);
        let mut stage2 = case.args.clone();
        run_func(&low.stage2, &mut stage2).map_err(|e| format!("stage II ({mode}): {e}"))?;
        let mut stage3 = case.args.clone();
        run_func(&low.stage3, &mut stage3).map_err(|e| format!("stage III ({mode}): {e}"))?;
        same_arrays(&stage1, &stage2).map_err(|e| format!("stage I vs II ({mode}): {e}"))?;
        same_arrays(&stage2, &stage3).map_err(|e| format!("stage II vs III ({mode}): {e}"))?;
    }
    Ok(())
}

fn pattern() -> impl Strategy<Value = Pattern> {
    prop_oneof![
        any::<bool>().prop_map(|empty_rows| Pattern::Random { empty_rows }),
        Just(Pattern::SingleRow),
        Just(Pattern::FullRows),
        Just(Pattern::Empty),
        Just(Pattern::EmptyLeaves),
        Just(Pattern::OneByOne),
    ]
}

fn shape() -> impl Strategy<Value = Shape> {
    (
        pattern(),
        (0usize..6, 0usize..7, 0usize..4),
        (1usize..4, 1usize..4),
        0u32..=10,
        any::<bool>(),
    )
        .prop_map(
            |(pattern, (rows, cols, depth), (feat, block), density, random_init)| Shape {
                rows,
                cols,
                depth,
                feat,
                block,
                density: f64::from(density) / 10.0,
                values: (-2.0, 2.0),
                init: if random_init {
                    Init::Random
                } else {
                    Init::Zero
                },
                pattern,
            },
        )
}

macro_rules! kernel_props {
    ($($name:ident),* $(,)?) => {
        /// The kernels with a property below.
        const PROPERTY_KERNELS: &[&str] = &[$(stringify!($name)),*];

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(24))]
            $(
                #[test]
                fn $name(shape in shape(), seed in 0u64..1_000_000) {
                    let kernel = stringify!($name);
                    if let Err(e) = check(kernel, &shape, seed) {
                        return Err(TestCaseError::fail(format!(
                            "{kernel}, seed {seed}, {shape:?}: {e}"
                        )));
                    }
                }
            )*
        }
    };
}

kernel_props![
    csrmm,
    csrmm_dense_iter,
    sddmm,
    fused_sddmm,
    spmv,
    bsrmm,
    ellmm,
    rgcn_hetero,
    rgcn_homo,
    csf_square_sum,
    segment_sum,
    segment_max,
    segment_min,
    segment_mean,
    ragged_bmm,
    sparse_softmax,
    csr2bsr,
    hyper_gnn,
    spmm_24,
    csrmm_alias,
    sddmm_alias,
];

#[test]
fn every_catalog_kernel_has_a_property() {
    let mut want: Vec<&str> = sparsetir_ops::catalog().iter().map(|k| k.name).collect();
    let mut got = PROPERTY_KERNELS.to_vec();
    want.sort_unstable();
    got.sort_unstable();
    assert_eq!(got, want);
}

/// The structural edge cases on every kernel, whatever proptest happens to draw.
#[test]
fn edge_cases_every_kernel() {
    let random = Pattern::Random { empty_rows: true };
    let shapes = [
        Shape::new(random, 7, 5).with_density(0.6),
        Shape::new(Pattern::SingleRow, 1, 5),
        Shape::new(Pattern::FullRows, 3, 4),
        Shape::new(Pattern::Empty, 4, 3),
        Shape::new(Pattern::EmptyLeaves, 3, 3),
        Shape::new(Pattern::OneByOne, 1, 1),
        Shape::new(Pattern::Empty, 0, 0).with_depth(0),
    ];
    let mut failures = Vec::new();
    for k in sparsetir_ops::catalog() {
        for (s, shape) in shapes.iter().enumerate() {
            for init in [Init::Zero, Init::Random] {
                let shape = shape.with_init(init);
                if let Err(e) = check(k.name, &shape, 40 + s as u64) {
                    failures.push(format!("{}, seed {}, {shape:?}: {e}", k.name, 40 + s));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// The kernels whose lowering depends on `check_invalid_binary_search` are run both ways.
#[test]
fn search_kernels_run_both_ways() {
    let mut both: Vec<&str> = sparsetir_ops::catalog()
        .iter()
        .map(|k| k.name)
        .filter(|k| stages(k).map(|s| s.lowered.len() == 2).unwrap_or(false))
        .collect();
    both.sort_unstable();
    for k in ["csr2bsr", "csrmm_dense_iter"] {
        assert!(both.contains(&k), "{k}: {both:?}");
    }
}

/// The comparison sees a float difference beyond the tolerance, an integer difference and a
/// changed input, and accepts rounding-level differences.
#[test]
fn comparison_detects_differences() {
    let shape = Shape::new(Pattern::FullRows, 2, 3);
    let case = random_args("rgcn_homo", &shape, 1).expect("data");
    let f = &stages("rgcn_homo").expect("lowers").func;
    let mut base = case.args.clone();
    eval_func(f, &mut base).expect("runs");
    let edit = |key: &str, delta: f64| {
        let mut args = base.clone();
        if let Some(ArgValue::Array(t)) = args.get_mut(key) {
            let v = t.get_f64(0);
            t.set_f64(0, v + delta);
        }
        args
    };
    assert!(same_arrays(&base, &base).is_ok());
    assert!(same_arrays(&base, &edit("y", 1e-3)).is_err());
    assert!(same_arrays(&base, &edit("y", 1e-7)).is_ok());
    assert!(same_arrays(&base, &edit("x", 1e-3)).is_err());
    assert!(same_arrays(&base, &edit("etype", 1.0)).is_err());
}
