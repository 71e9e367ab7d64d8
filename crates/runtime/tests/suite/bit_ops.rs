//! Bitwise operators (`&`, `|`, `^`, `<<`, `>>`), `T.ctz` and `T.popcount` on every path: the stage-I
//! evaluator, the stage II/III interpreter, C and the generated CUDA in the emulator (NVRTC
//! compiles the same source where it is installed), against the values computed here in Rust —
//! signed and unsigned, 8 to 64 bits, negative values, shift amounts past the width (they count
//! modulo it), and the printed script read back equal.

use crate::common;

use std::collections::HashMap;

use sparsetir_eval::{eval_func, ArgValue};
use sparsetir_formats::Tensor;
use sparsetir_ir::DType;
use sparsetir_runtime::assembly::run_interp;
use sparsetir_runtime::cache::KernelCache;
use sparsetir_runtime::compile_c;
use sparsetir_runtime::gpu::{GpuDevice, GpuKernel};

use common::{have_cc, int, opts, Args};

const SRC: &str = r#"
@T.prim_func
def bits(x: T.handle, s: T.handle, y: T.handle, n: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 2})
    I = T.sp.dense_fixed(n)
    J = T.sp.dense_fixed(7)
    X = T.sp.match_buffer(x, (I,), "DT")
    S = T.sp.match_buffer(s, (I,), "int32")
    Y = T.sp.match_buffer(y, (I, J), "DT")
    with T.sp.iteration([I], "S", "bits") as [i]:
        Y[i, 0] = X[i] & T.DT(0x5a5a) | X[i] >> 3 ^ T.DT(7)
        Y[i, 1] = X[i] << S[i]
        Y[i, 2] = X[i] >> S[i]
        Y[i, 3] = T.ctz(X[i])
        Y[i, 4] = (X[i] ^ X[i] >> 1) & (X[i] | T.DT(1))
        Y[i, 5] = X[i] << 2 + 1
        Y[i, 6] = T.popcount(X[i])
"#;

/// `v` wrapped to `dt`'s width (two's complement for signed types).
fn wrap(v: i128, dt: DType) -> i128 {
    let bits = dt.bits();
    let m = v & ((1i128 << bits) - 1);
    if dt.is_uint() || m < (1i128 << (bits - 1)) {
        m
    } else {
        m - (1i128 << bits)
    }
}

fn expected(x: i128, s: i128, dt: DType) -> [i128; 7] {
    let bits = dt.bits();
    let amt = |a: i128| a.rem_euclid(i128::from(bits)) as u32;
    let w = |v: i128| wrap(v, dt);
    let ctz = {
        let u = x & ((1i128 << bits) - 1);
        if u == 0 {
            i128::from(bits)
        } else {
            i128::from(u.trailing_zeros())
        }
    };
    [
        // Python precedence: `(x & 0x5a5a) | ((x >> 3) ^ 7)`.
        w((x & w(0x5a5a)) | ((x >> 3) ^ 7)),
        w(x << amt(s)),
        w(x >> amt(s)),
        ctz,
        w((x ^ (x >> 1)) & (x | 1)),
        // `<<` binds looser than `+`: `x << 3`.
        w(x << 3),
        i128::from((x & ((1i128 << bits) - 1)).count_ones()),
    ]
}

#[test]
fn bit_operators_agree_on_every_path() {
    for dt in [
        DType::I8,
        DType::U8,
        DType::I16,
        DType::I32,
        DType::U32,
        DType::I64,
        DType::U64,
    ] {
        let src = SRC.replace("DT", dt.name());
        let f = sparsetir_syntax::parse_func(&src).expect("parse");
        // The printed form reads back equal.
        let printed = sparsetir_ir::printer::print_func(&f);
        let back = sparsetir_syntax::parse_func(&printed).expect("printed form parses");
        assert!(sparsetir_ir::equal::func_eq(&f, &back), "{printed}");
        let xs: Vec<i128> = [
            0i128,
            1,
            -1,
            2,
            5,
            -6,
            96,
            0x7f,
            -128,
            0x1234,
            1 << 20,
            -(1 << 30),
        ]
        .iter()
        .map(|&v| wrap(v, dt))
        .collect();
        let ss: Vec<i32> = vec![0, 1, 3, 7, 8, 15, 31, 33, 63, 64, 65, -1];
        let n = xs.len();
        let args = || -> Args {
            let mut a = HashMap::new();
            let x: Vec<i64> = xs.iter().map(|&v| v as i64).collect();
            a.insert(
                "x".into(),
                ArgValue::Array(Tensor::from_i64(dt, &x).unwrap()),
            );
            let s: Vec<i64> = ss.iter().map(|&v| i64::from(v)).collect();
            a.insert(
                "s".into(),
                ArgValue::Array(Tensor::from_i64(DType::I32, &s).unwrap()),
            );
            let mut y = Tensor::zeros(dt, vec![n * 7]).unwrap();
            y.shape = vec![n * 7];
            a.insert("y".into(), ArgValue::Array(y));
            a.insert("n".into(), int(n));
            a
        };
        let want: Vec<i128> = xs
            .iter()
            .zip(&ss)
            .flat_map(|(&x, &s)| expected(x, i128::from(s), dt))
            .collect();
        let got = |a: &Args| -> Vec<i128> {
            match a.get("y") {
                Some(ArgValue::Array(t)) => (0..t.len())
                    .map(|i| wrap(i128::from(t.get_i64(i)), dt))
                    .collect(),
                _ => panic!("no y"),
            }
        };
        let mut e = args();
        eval_func(&f, &mut e).expect("eval");
        assert_eq!(got(&e), want, "{dt}: evaluator");
        let mut i = args();
        run_interp(&f, &mut i).expect("interp");
        assert_eq!(got(&i), want, "{dt}: interpreter");
        if have_cc() {
            let k = compile_c(&f, &opts("bit_ops")).expect("build");
            let mut c = args();
            k.run(&mut c).expect("run");
            assert_eq!(got(&c), want, "{dt}: C");
            {
                let cache = KernelCache::new(
                    std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bit-ops-cuda"),
                );
                let k = GpuKernel::build(&f, None, &[], GpuDevice::Emulator, &cache)
                    .unwrap_or_else(|e| panic!("{dt}: CUDA build: {e}"));
                let mut g = args();
                k.run(&mut g)
                    .unwrap_or_else(|e| panic!("{dt}: emulator: {e}"));
                assert_eq!(got(&g), want, "{dt}: CUDA (emulated)");
            }
        }
    }
}

/// The CUDA of the bit-operator kernel (`__ffs`/`__ffsll` for `ctz`, `__popc`/`__popcll`, shifts through unsigned
/// types) compiles with NVRTC for sm_80 and sm_90.
#[test]
fn bit_operators_compile_with_nvrtc() {
    let Some(nvrtc) = common::nvrtc() else { return };
    let cache = KernelCache::new(
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("bit-ops-cuda"),
    );
    for dt in [DType::I32, DType::U64, DType::I8] {
        let f = sparsetir_syntax::parse_func(&SRC.replace("DT", dt.name())).expect("parse");
        let (_, m) = sparsetir_runtime::build::emit_cuda(&f, None, &[]).expect("emit");
        assert!(m.source.contains("__ffs"), "{}", m.source);
        for arch in ["sm_80", "sm_90"] {
            let arch = sparsetir_cuda::Arch::parse(arch).unwrap();
            let (code, _) = sparsetir_runtime::cuda_dev::compile_cached(
                &nvrtc,
                &m,
                &arch,
                sparsetir_cuda::Emit::Cubin,
                &cache,
            )
            .unwrap_or_else(|e| panic!("{dt} for {arch}: {e}\n{}", m.source));
            assert!(code.starts_with(b"\x7fELF"), "{dt}: not a cubin");
        }
    }
}
