//! Integer division and modulo by a divisor the compiler cannot prove safe, on every backend:
//! by zero, the evaluator and the interpreters stop with an error, a C kernel returns status
//! -3 and the CUDA emulator reports the thread (none of them traps or crashes the process); by
//! -1, the lowest value's quotient wraps as in the evaluator instead of trapping.

use sparsetir_eval::{eval_func, run_func, ArgValue};
use sparsetir_ir::PrimFunc;
use sparsetir_runtime::build::{build, schedule_and_lower};
use sparsetir_runtime::cache::KernelCache;
use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};
use sparsetir_runtime::RunError;

use crate::common;
use common::backends::{self, Backends};
use common::{f32s, have_cc, i32s, int, opts, Args};

const DIVIDE: &str = r#"
@T.prim_func
def divide(x: T.handle, q: T.handle, r: T.handle, t: T.handle, s: T.handle, m: T.int32, d: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    X = T.sp.match_buffer(x, (I,), "int32")
    Q = T.sp.match_buffer(q, (I,), "int32")
    R = T.sp.match_buffer(r, (I,), "int32")
    U = T.sp.match_buffer(t, (I,), "int32")
    S = T.sp.match_buffer(s, (I,), "float32")
    with T.sp.iteration([I], "S", "divide") as [i]:
        Q[i] = X[i] // d
        R[i] = X[i] % d
        U[i] = T.truncdiv(X[i], d)
        S[i] = S[i] * T.float32(2)
"#;

fn parse(src: &str) -> PrimFunc {
    sparsetir_syntax::parse_func(src).unwrap_or_else(|e| panic!("parses: {e:?}\n{src}"))
}

const XS: [i32; 6] = [i32::MIN, -7, -1, 0, 5, i32::MAX];

fn args(d: i32) -> Args {
    let n = XS.len();
    let mut a = Args::new();
    a.insert("m".into(), int(n));
    a.insert("d".into(), ArgValue::Int(i64::from(d)));
    a.insert("x".into(), i32s(&XS));
    for out in ["q", "r", "t"] {
        a.insert(out.into(), i32s(&[0; 6]));
    }
    a.insert("s".into(), f32s(vec![n], vec![1.0; n]));
    a
}

/// Python's floor division and modulo, and truncation, with wrapping (`MIN // -1 == MIN`).
fn expected(d: i32) -> [Vec<f64>; 3] {
    let floor = |x: i32| {
        let q = x.wrapping_div(d);
        if x.wrapping_rem(d) != 0 && ((x < 0) != (d < 0)) {
            q - 1
        } else {
            q
        }
    };
    let modulo = |x: i32| {
        let r = x.wrapping_rem(d);
        if r != 0 && ((r < 0) != (d < 0)) {
            r + d
        } else {
            r
        }
    };
    [
        XS.iter().map(|&x| f64::from(floor(x))).collect(),
        XS.iter().map(|&x| f64::from(modulo(x))).collect(),
        XS.iter().map(|&x| f64::from(x.wrapping_div(d))).collect(),
    ]
}

#[test]
fn divisors_that_are_not_zero_agree_everywhere_minus_one_wrapping() {
    let f = parse(DIVIDE);
    let on = Backends {
        cache: "integer-division-cache",
        schedule: None,
        emulator: true,
    };
    for d in [-1, 3, -4, 7] {
        let [q, r, t] = expected(d);
        for (out, want) in [("q", q), ("r", r), ("t", t)] {
            backends::check_everywhere(
                &format!("{out} with d = {d}"),
                &f,
                &on,
                &args(d),
                out,
                &want,
            );
        }
    }
}

#[test]
fn division_by_a_zero_argument_is_an_error_everywhere() {
    let f = parse(DIVIDE);
    let e = eval_func(&f, &mut args(0)).expect_err("evaluator");
    assert!(e.message.contains("by zero"), "{e}");
    let lowered = schedule_and_lower(&f, None, &[]).expect("lowers");
    for g in [&lowered.stage2, &lowered.stage3] {
        let e = run_func(g, &mut args(0)).expect_err("interpreter");
        assert!(e.message.contains("by zero"), "{e}");
    }
    if have_cc() {
        let k = build(&f, None, &[], &opts("integer-division-cache")).expect("builds");
        match k.run(&mut args(0)) {
            Err(e @ RunError::Kernel { status: -3, .. }) => {
                assert!(e.to_string().contains("division or modulo by zero"), "{e}")
            }
            other => panic!("C kernel: {other:?}"),
        }
        // The same kernel still runs with a valid divisor afterwards.
        let mut a = args(3);
        k.run(&mut a).expect("runs with d = 3");
        assert_eq!(common::f64s(&a, "q"), expected(3)[0]);
    }
    let cache = KernelCache::new(
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("integer-division-cuda"),
    );
    let k = GpuKernel::build(&f, None, &[], GpuDevice::Emulator, &cache).expect("emulated");
    match k.run(&mut args(0)) {
        Err(e @ RunError::EmuDivisionByZero { .. }) => {
            assert!(e.to_string().contains("division or modulo by zero"), "{e}")
        }
        other => panic!("cuda-emu: {other:?}"),
    }
}

/// The C writer checks only divisors it cannot prove safe: a constant divisor other than 0
/// and -1 divides directly; the parameter `d` goes through the checked helper.
#[test]
fn only_unproved_divisors_are_checked() {
    let f = parse(DIVIDE);
    let lowered = schedule_and_lower(&f, None, &[]).expect("lowers");
    let c = sparsetir_runtime::build::emit_c_cpu(&lowered.stage3)
        .expect("C")
        .source;
    assert!(c.contains("sptir_floordiv_chk_i32("), "{c}");
    assert!(c.contains("sptir_floormod_chk_i32("), "{c}");
    assert!(c.contains("sptir_div_chk_i32("), "{c}");
    let constant = parse(
        &DIVIDE
            .replace("// d", "// 4")
            .replace("% d", "% 4")
            .replace("(X[i], d)", "(X[i], 4)"),
    );
    let lowered = schedule_and_lower(&constant, None, &[]).expect("lowers");
    let c = sparsetir_runtime::build::emit_c_cpu(&lowered.stage3)
        .expect("C")
        .source;
    let kernel = &c[c.find("sptir_kernel(").expect("kernel")..];
    assert!(!kernel.contains("_chk_"), "{kernel}");
}
