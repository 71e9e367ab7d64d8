//! An iteration declared `"S"` whose iterations depend on each other (a prefix sum: each one
//! reads the element the one before wrote): the stage-I meaning is the sequential one, and
//! every backend keeps it. The automatic GPU schedule leaves such a nest on one thread instead
//! of racing (the emulator reports any race as an error) and says so in the CUDA source, and a
//! schedule that asks for the loop to run in parallel is refused with the buffer named. The
//! same holds where the dependence goes through an inner loop (a full convolution declared
//! `"SS"`: iterations `i` and `i + 1` both add into `Y[i + 1]`).

use sparsetir_eval::ArgValue;
use sparsetir_ir::PrimFunc;
use sparsetir_runtime::build::build;

use crate::common;
use common::backends::{self, Backends};
use common::{f32s, have_cc, int, opts, Args};

const SCAN: &str = r#"
@T.prim_func
def scan(x: T.handle, y: T.handle, n: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(n)
    X = T.sp.match_buffer(x, (I,), "float32")
    Y = T.sp.match_buffer(y, (I,), "float32")
    with T.sp.iteration([I], "S", "scan") as [i]:
        Y[i + 1] = X[i] + Y[i]
"#;

fn parse(src: &str) -> PrimFunc {
    sparsetir_syntax::parse_func(src).unwrap_or_else(|e| panic!("parses: {e:?}\n{src}"))
}

/// `n` past one GPU block of the automatic schedule (128 threads).
fn args(n: usize) -> Args {
    let mut a = Args::new();
    a.insert("n".into(), int(n));
    let xs: Vec<f32> = (0..n).map(|i| (i % 7) as f32 - 2.0).collect();
    a.insert("x".into(), f32s(vec![n], xs));
    a.insert("y".into(), f32s(vec![n], vec![1.0; n]));
    a
}

/// `Y[0]` as given, then `Y[i + 1] = X[i] + Y[i]` in order (the last `X` is not read:
/// `Y[n]` is outside and the store is skipped).
fn expected(a: &Args) -> Vec<f64> {
    let (Some(ArgValue::Array(x)), Some(ArgValue::Array(y))) = (a.get("x"), a.get("y")) else {
        panic!("arrays")
    };
    let (x, mut y) = (x.to_f64_vec(), y.to_f64_vec());
    for i in 0..y.len() - 1 {
        y[i + 1] = (x[i] as f32 + y[i] as f32) as f64;
    }
    y
}

#[test]
fn a_prefix_sum_declared_spatial_runs_in_order_everywhere() {
    let f = parse(SCAN);
    let a = args(300);
    let want = expected(&a);
    // The last element depends on every earlier one: a race anywhere changes it.
    assert_eq!(
        want[299],
        want[0] + (0..299).map(|i| (i % 7) as f64 - 2.0).sum::<f64>()
    );
    let on = Backends {
        cache: "carried-dependence-cache",
        schedule: None,
        emulator: true,
    };
    backends::check_everywhere("scan", &f, &on, &a, "y", &want);
    // The CUDA says why its nest runs on one thread.
    let (_, m) = sparsetir_runtime::build::emit_cuda(&f, None, &[]).expect("CUDA");
    let head: String = m.source.lines().take(4).collect::<Vec<_>>().join("\n");
    assert!(head.contains("runs these nests on one thread"), "{head}");
    assert!(head.contains("\"scan0\": DependencyViolation"), "{head}");
    assert!(head.contains("same element of `Y_data`"), "{head}");
}

#[test]
fn a_schedule_that_runs_the_prefix_sum_apart_is_refused() {
    if !have_cc() {
        return;
    }
    let f = parse(SCAN);
    for sched in [
        "# stage III\nb0 = sch.get_block(\"scan0\")\nl0, = sch.get_loops(b0)\nsch.parallel(l0)\n",
        "# stage III\nb0 = sch.get_block(\"scan0\")\nl0, = sch.get_loops(b0)\n\
         l1, l2 = sch.split(l0, factors=[None, 8])\nsch.vectorize(l2)\n",
    ] {
        let e = match build(&f, Some(sched), &[], &opts("carried-dependence-cache")) {
            Ok(_) => panic!("{sched}: accepted"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains("DependencyViolation"), "{e}");
        assert!(e.contains("same element of `Y"), "{e}");
    }
}

/// `Y[k] = sum over i + j = k of X[i] * W[j]`, written as an update of `Y[i + j]` under `"SS"`:
/// every `i` adds into the elements its neighbours add into.
const CONV: &str = r#"
@T.prim_func
def conv(x: T.handle, w: T.handle, y: T.handle, n: T.int32, m: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(n)
    J = T.sp.dense_fixed(5)
    K = T.sp.dense_fixed(m)
    X = T.sp.match_buffer(x, (I,), "float32")
    W = T.sp.match_buffer(w, (J,), "float32")
    Y = T.sp.match_buffer(y, (K,), "float32")
    with T.sp.iteration([I, J], "SS", "conv") as [i, j]:
        Y[i + j] = Y[i + j] + X[i] * W[j]
"#;

#[test]
fn a_dependence_through_an_inner_loop_runs_in_order_everywhere() {
    let f = parse(CONV);
    let n = 300;
    let mut a = Args::new();
    a.insert("n".into(), int(n));
    a.insert("m".into(), int(n + 4));
    let xs: Vec<f32> = (0..n).map(|i| (i % 5) as f32 - 1.0).collect();
    let ws: Vec<f32> = vec![0.5, -1.0, 2.0, 0.25, 1.0];
    a.insert("x".into(), f32s(vec![n], xs.clone()));
    a.insert("w".into(), f32s(vec![5], ws.clone()));
    a.insert("y".into(), f32s(vec![n + 4], vec![0.0; n + 4]));
    // The dense convolution, in the loops' order.
    let mut want = vec![0f32; n + 4];
    for (i, x) in xs.iter().enumerate() {
        for (j, w) in ws.iter().enumerate() {
            want[i + j] += x * w;
        }
    }
    let want: Vec<f64> = want.into_iter().map(f64::from).collect();
    let on = Backends {
        cache: "carried-dependence-cache",
        schedule: None,
        emulator: true,
    };
    backends::check_everywhere("conv", &f, &on, &a, "y", &want);
    let (_, m) = sparsetir_runtime::build::emit_cuda(&f, None, &[]).expect("CUDA");
    let head: String = m.source.lines().take(4).collect::<Vec<_>>().join("\n");
    assert!(head.contains("\"conv0\": DependencyViolation"), "{head}");
    assert!(head.contains("same element of `Y_data`"), "{head}");
}
