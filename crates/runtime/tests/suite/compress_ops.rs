//! `T.compress64`, `T.compress_iota64` and `T.popcount` (the group read-back of SpGEMM's dense
//! workspace) on the stage II/III interpreter and in C — the AVX-512 forms and the portable
//! loops (`-mno-avx512bw`: 8/16-bit elements by loop; `-mno-avx512f`: all by loop) — against
//! the values computed here, for every element width, masks from empty to full; and the
//! printed script read back equal.

use crate::common;

use std::collections::HashMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sparsetir_eval::ArgValue;
use sparsetir_formats::Tensor;
use sparsetir_ir::DType;
use sparsetir_runtime::assembly::run_interp;
use sparsetir_runtime::compile_c;

use common::{have_cc, int, opts, Args};

/// Group `w` of 64 source elements is compressed by mask `M[w]` to the count so far; its
/// columns `64 w + base` likewise; the count goes up by the mask's set bits (`e = 64 g`; both
/// destinations have a guard element after the `e` the widest masks fill). The groups run in
/// order: nothing parallelizes the iteration.
const SRC: &str = r#"
@T.prim_func
def comp(s: T.handle, m: T.handle, d: T.handle, di: T.handle, c: T.handle, g: T.int32, e: T.int32, base: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 2})
    G = T.sp.dense_fixed(g)
    G1 = T.sp.dense_fixed(g + 1)
    E = T.sp.dense_fixed(e)
    E1 = T.sp.dense_fixed(e + 1)
    S = T.sp.match_buffer(s, (E,), "DT")
    M = T.sp.match_buffer(m, (G,), "uint64")
    D = T.sp.match_buffer(d, (E1,), "DT")
    DI = T.sp.match_buffer(di, (E1,), "IT")
    C = T.sp.match_buffer(c, (G1,), "int32")
    with T.sp.iteration([G], "S", "comp") as [w]:
        T.evaluate(T.compress64(D[C[w]], S[w * 64], M[w]))
        T.evaluate(T.compress_iota64(DI[C[w]], T.Cast("IT", w * 64 + base), M[w]))
        C[w + 1] = C[w] + T.popcount(M[w], dtype="int32")
"#;

fn masks() -> Vec<u64> {
    let mut rng = ChaCha8Rng::seed_from_u64(64);
    let mut v = vec![
        0,
        u64::MAX,
        1,
        1 << 63,
        0x5555_5555_5555_5555,
        0xffff_0000_ffff_0000,
        0x0000_0000_ffff_ffff,
        0x8000_0001_0000_8000,
    ];
    v.extend((0..8).map(|_| rng.random::<u64>()));
    v.extend((0..4).map(|_| rng.random::<u64>() & rng.random::<u64>() & rng.random::<u64>()));
    v
}

#[test]
fn compress_and_popcount_agree_on_every_path() {
    let ms = masks();
    let g = ms.len();
    let base = 1000i64;
    for (dt, it) in [
        (DType::I8, DType::I32),
        (DType::U8, DType::I64),
        (DType::I16, DType::I32),
        (DType::F16, DType::I32),
        (DType::BF16, DType::I64),
        (DType::I32, DType::I32),
        (DType::F32, DType::I32),
        (DType::F32, DType::I64),
        (DType::I64, DType::I64),
        (DType::F64, DType::I32),
    ] {
        let what = format!("{dt} / {it}");
        let src = SRC.replace("DT", dt.name()).replace("IT", it.name());
        let f = sparsetir_syntax::parse_func(&src).unwrap_or_else(|e| panic!("{what}: {e:?}"));
        let printed = sparsetir_ir::printer::print_func(&f);
        let back = sparsetir_syntax::parse_func(&printed).expect("printed form parses");
        assert!(sparsetir_ir::equal::func_eq(&f, &back), "{printed}");
        // Source values exact in every dtype (0..97), no two alike within a run of 97.
        let s: Vec<i64> = (0..g * 64).map(|i| ((i * 37) % 97) as i64).collect();
        let guard = 77i64;
        let args = || -> Args {
            let mut a = HashMap::new();
            let t = |d: DType, v: &[i64]| ArgValue::Array(Tensor::from_i64(d, v).unwrap());
            a.insert("s".into(), t(dt, &s));
            let mv: Vec<i64> = ms.iter().map(|&m| m as i64).collect();
            a.insert("m".into(), t(DType::U64, &mv));
            a.insert("d".into(), t(dt, &vec![guard; g * 64 + 1]));
            a.insert("di".into(), t(it, &vec![guard; g * 64 + 1]));
            a.insert("c".into(), t(DType::I32, &vec![0; g + 1]));
            a.insert("g".into(), int(g));
            a.insert("e".into(), int(g * 64));
            a.insert("base".into(), ArgValue::Int(base));
            a
        };
        let (mut want_d, mut want_i, mut want_c) = (Vec::new(), Vec::new(), vec![0i64]);
        for (w, &m) in ms.iter().enumerate() {
            for k in (0..64).filter(|k| m >> k & 1 == 1) {
                want_d.push(s[w * 64 + k]);
                want_i.push((w * 64 + k) as i64 + base);
            }
            want_c.push(want_d.len() as i64);
        }
        let total = want_d.len();
        want_d.resize(g * 64 + 1, guard);
        want_i.resize(g * 64 + 1, guard);
        let get = |a: &Args, name: &str| -> Vec<i64> {
            match a.get(name) {
                Some(ArgValue::Array(t)) => (0..t.len()).map(|i| t.get_i64(i)).collect(),
                _ => panic!("no {name}"),
            }
        };
        let check = |a: &Args, path: &str| {
            assert_eq!(get(a, "c"), want_c, "{what}, {path}: counts");
            assert_eq!(
                get(a, "d"),
                want_d,
                "{what}, {path}: values ({total} written)"
            );
            assert_eq!(get(a, "di"), want_i, "{what}, {path}: columns");
        };
        let mut i = args();
        run_interp(&f, &mut i).unwrap_or_else(|e| panic!("{what}: interp: {e}"));
        check(&i, "interpreter");
        if have_cc() {
            for flags in [&[][..], &["-mno-avx512bw"], &["-mno-avx512f"]] {
                let mut o = opts("compress_ops");
                // Warnings are errors: the destinations must not be `const` pointers (the
                // writer counts these statements' first arguments as stored).
                o.flags = flags.iter().map(|x| x.to_string()).collect();
                o.flags.push("-Werror".into());
                let k = compile_c(&f, &o).unwrap_or_else(|e| panic!("{what}: build: {e}"));
                assert!(k.source().contains("sptir_compress64_"), "{what}");
                let mut c = args();
                k.run(&mut c)
                    .unwrap_or_else(|e| panic!("{what}: C {flags:?}: {e}"));
                check(&c, &format!("C {flags:?}"));
            }
        }
    }
}

/// The statements are refused where they have no meaning: as values, on the CUDA target, and
/// between buffers of different dtypes.
#[test]
fn compress_misuse_is_an_error() {
    let mixed = SRC
        .replace("\"DT\")\n    M", "\"float32\")\n    M")
        .replace("DT", "int32")
        .replace("IT", "int32");
    let f = sparsetir_syntax::parse_func(&mixed).expect("parse");
    let mut a: Args = HashMap::new();
    let t = |d: DType, n: usize| ArgValue::Array(Tensor::zeros(d, vec![n]).unwrap());
    a.insert("s".into(), t(DType::F32, 64));
    a.insert(
        "m".into(),
        ArgValue::Array(Tensor::from_i64(DType::U64, &[3]).unwrap()),
    );
    a.insert("d".into(), t(DType::I32, 65));
    a.insert("di".into(), t(DType::I32, 65));
    a.insert("c".into(), t(DType::I32, 2));
    a.insert("g".into(), int(1));
    a.insert("e".into(), int(64));
    a.insert("base".into(), ArgValue::Int(0));
    let e = run_interp(&f, &mut a).expect_err("dtypes differ");
    assert!(e.to_string().contains("one dtype"), "{e}");
    if have_cc() {
        let Err(e) = compile_c(&f, &opts("compress_ops")) else {
            panic!("dtypes differ")
        };
        assert!(e.to_string().contains("compress64"), "{e}");
    }
    let cuda = sparsetir_runtime::build::emit_cuda(
        &sparsetir_syntax::parse_func(&SRC.replace("DT", "float32").replace("IT", "int32"))
            .expect("parse"),
        None,
        &[],
    );
    let Err(e) = cuda else {
        panic!("no compress on CUDA")
    };
    assert!(e.to_string().contains("CPUs only"), "{e}");
}

/// `T.copy_range(D[i], S[j], n)` — the gather of staged runs of rows — copies `n` elements in
/// order, nothing for `n <= 0`, on the interpreter and in C (`memcpy`), every element width.
#[test]
fn copy_range_agrees_on_every_path() {
    const COPY: &str = r#"
@T.prim_func
def cp(s: T.handle, d: T.handle, c: T.handle, l: T.handle, r: T.int32, e: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 2})
    R = T.sp.dense_fixed(r)
    E = T.sp.dense_fixed(e)
    K = T.sp.dense_fixed(2)
    S = T.sp.match_buffer(s, (E,), "DT")
    D = T.sp.match_buffer(d, (E,), "DT")
    C = T.sp.match_buffer(c, (R, K), "int32")
    L = T.sp.match_buffer(l, (R,), "int32")
    with T.sp.iteration([R], "S", "cp") as [q]:
        T.evaluate(T.copy_range(D[C[q, 0]], S[C[q, 1]], L[q]))
"#;
    // (destination, source, count): empty, negative, short, long, up to the last element.
    let copies: [(i64, i64, i64); 5] = [
        (0, 0, 0),
        (5, 70, -3),
        (3, 10, 5),
        (20, 30, 40),
        (90, 1, 10),
    ];
    let e = 100usize;
    for dt in [
        DType::I8,
        DType::F16,
        DType::I32,
        DType::F32,
        DType::I64,
        DType::F64,
    ] {
        let f = sparsetir_syntax::parse_func(&COPY.replace("DT", dt.name()))
            .unwrap_or_else(|x| panic!("{dt}: {x:?}"));
        let s: Vec<i64> = (0..e).map(|i| ((i * 13) % 101) as i64 - 7).collect();
        let mut want = vec![-1i64; e];
        for &(to, from, n) in &copies {
            for k in 0..n.max(0) as usize {
                want[to as usize + k] = s[from as usize + k];
            }
        }
        let args = || -> Args {
            let mut a = HashMap::new();
            let t = |d: DType, v: &[i64]| ArgValue::Array(Tensor::from_i64(d, v).unwrap());
            a.insert("s".into(), t(dt, &s));
            a.insert("d".into(), t(dt, &vec![-1; e]));
            let c: Vec<i64> = copies.iter().flat_map(|&(a, b, _)| [a, b]).collect();
            a.insert("c".into(), t(DType::I32, &c));
            let l: Vec<i64> = copies.iter().map(|c| c.2).collect();
            a.insert("l".into(), t(DType::I32, &l));
            a.insert("r".into(), int(copies.len()));
            a.insert("e".into(), int(e));
            a
        };
        let got = |a: &Args| -> Vec<i64> {
            match a.get("d") {
                Some(ArgValue::Array(t)) => (0..t.len()).map(|i| t.get_i64(i)).collect(),
                _ => panic!("no d"),
            }
        };
        let mut i = args();
        run_interp(&f, &mut i).unwrap_or_else(|x| panic!("{dt}: interp: {x}"));
        assert_eq!(got(&i), want, "{dt}: interpreter");
        if have_cc() {
            let mut o = opts("compress_ops");
            o.flags.push("-Werror".into());
            let k = compile_c(&f, &o).unwrap_or_else(|x| panic!("{dt}: build: {x}"));
            assert!(k.source().contains("memcpy("), "{dt}");
            let mut c = args();
            k.run(&mut c).unwrap_or_else(|x| panic!("{dt}: C: {x}"));
            assert_eq!(got(&c), want, "{dt}: C");
        }
    }
}

/// The buffers the range intrinsics write count as written, as stores' targets do: the binder
/// allocates them as outputs, and lowering never takes their values for validated indices.
#[test]
fn range_intrinsics_write_their_first_argument() {
    let src = SRC.replace("DT", "int32").replace("IT", "int32");
    let f = sparsetir_syntax::parse_func(&src).expect("parses");
    let written: std::collections::BTreeSet<String> = f
        .body
        .written_buffers()
        .into_iter()
        .map(|b| f.buffers[b].name.clone())
        .collect();
    let want: std::collections::BTreeSet<String> =
        ["C", "D", "DI"].iter().map(|s| s.to_string()).collect();
    assert_eq!(written, want);
}
