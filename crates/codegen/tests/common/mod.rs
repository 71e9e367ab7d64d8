//! Shared helpers of the codegen integration tests: parsing scripts, lowering catalog kernels to
//! stage III, and the C harness that compiles a generated module into a program calling the entry
//! point on embedded data, runs it, and compares its arrays with the interpreter's.
#![allow(dead_code)]

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use sparsetir_codegen::{emit_c, CModule, CParamKind, CodegenError};
use sparsetir_eval::{run_func, ArgValue};
use sparsetir_formats::{Tensor, TensorData};
use sparsetir_ir::{DType, IRModule, PrimFunc};
use sparsetir_transform::pipeline::{lower, PipelineOptions};

/// The C compiler to use: `$CC` or `cc`, if it runs.
pub fn compiler() -> Option<String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let ok = Command::new(&cc)
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    ok.then_some(cc)
}

/// Parses one script function (panics with the diagnostics on failure).
pub fn parse(src: &str) -> PrimFunc {
    sparsetir_syntax::parse_func(src).unwrap_or_else(|d| panic!("parse: {d:?}"))
}

/// Parses a script and emits its C module.
pub fn emit_script(src: &str) -> CModule {
    emit_c(&parse(src)).unwrap_or_else(|e| panic!("{e}"))
}

/// The C text from the kernel function on (the part after the shared preamble).
pub fn kernel_text(m: &CModule) -> String {
    let at = m
        .source
        .find("static int32_t sptir_kernel")
        .expect("kernel");
    m.source[at..].to_string()
}

/// Asserts that the script is refused as unsupported, with `needle` in the message.
pub fn refused(src: &str, needle: &str) {
    let e = emit_c(&parse(src)).expect_err("must be refused");
    assert!(matches!(e, CodegenError::Unsupported { .. }), "{e:?}");
    assert!(e.to_string().contains(needle), "{e}");
}

/// Loads a catalog kernel and lowers it to stage III with `opts`.
pub fn stage3_with(name: &str, opts: &PipelineOptions) -> PrimFunc {
    let f = sparsetir_ops::load(name).expect("catalog kernel loads");
    let mut out = lower(&IRModule { funcs: vec![f] }, opts).expect("catalog kernel lowers");
    out.funcs.remove(0)
}

/// Loads a catalog kernel and lowers it to stage III with checked binary searches.
pub fn stage3(name: &str) -> PrimFunc {
    let opts = PipelineOptions {
        check_invalid_binary_search: true,
        ..PipelineOptions::default()
    };
    stage3_with(name, &opts)
}

/// An integer array argument of element type `dt`.
pub fn ints(dt: DType, v: &[i64]) -> ArgValue {
    ArgValue::Array(Tensor::from_i64(dt, v).expect("tensor"))
}

/// A float array argument of element type `dt`.
pub fn floats(dt: DType, v: &[f64]) -> ArgValue {
    ArgValue::Array(Tensor::from_f64(dt, v).expect("tensor"))
}

/// The values of array argument `k` (panics when it is missing or not an array).
pub fn array(args: &HashMap<String, ArgValue>, k: &str) -> Vec<f64> {
    match args.get(k) {
        Some(ArgValue::Array(t)) => t.to_f64_vec(),
        _ => panic!("{k}"),
    }
}

/// C text of one array element (floats exact, in shortest round-trip form; 16-bit floats as
/// their bit patterns).
fn elem_text(t: &Tensor, i: usize) -> String {
    match &t.data {
        TensorData::F16(v) => return format!("0x{:04x}", v[i].to_bits()),
        TensorData::BF16(v) => return format!("0x{:04x}", v[i].to_bits()),
        _ => {}
    }
    match t.dtype() {
        DType::F32 | DType::F64 => {
            let x = t.get_f64(i);
            if x.is_nan() {
                "NAN".to_string()
            } else if x.is_infinite() {
                if x < 0.0 { "-INFINITY" } else { "INFINITY" }.to_string()
            } else {
                format!("{x:e}")
            }
        }
        DType::U64 => format!("{}u", t.get_i64(i) as u64),
        DType::Bool => (t.get_i64(i) != 0).to_string(),
        _ => format!("{}LL", t.get_i64(i)),
    }
}

/// Builds the harness program: the module, one static array per array argument, a `main` that
/// fills the arguments, sets `threads` OpenMP threads, calls the entry and prints `rc` then every
/// array argument (one line each, led by its parameter index).
pub fn harness(m: &CModule, args: &HashMap<String, ArgValue>, threads: usize) -> String {
    let mut s = m.source.clone();
    s.push_str("\n#include <stdio.h>\n");
    let (mut fill, mut print) = (String::new(), String::new());
    for (k, p) in m.params.iter().enumerate() {
        let arg = args
            .get(&p.name)
            .unwrap_or_else(|| panic!("no argument `{}`", p.name));
        match (p.kind, arg) {
            (CParamKind::Array { elem }, ArgValue::Array(t)) => {
                let ct = match elem {
                    DType::F32 => "float",
                    DType::F64 => "double",
                    DType::I32 => "int32_t",
                    DType::I64 => "int64_t",
                    DType::Bool => "bool",
                    DType::I8 => "int8_t",
                    DType::U8 => "uint8_t",
                    // Bit patterns, printed as their values through the module's conversions.
                    DType::F16 | DType::BF16 => "uint16_t",
                    d => panic!("harness: element type {d}"),
                };
                assert_eq!(t.dtype(), elem, "argument `{}`", p.name);
                let vals: Vec<String> = (0..t.len()).map(|i| elem_text(t, i)).collect();
                let init = if vals.is_empty() {
                    "0".to_string()
                } else {
                    vals.join(", ")
                };
                let _ = writeln!(s, "static {ct} arr{k}[{}] = {{{init}}};", t.len().max(1));
                let _ = writeln!(fill, "    args[{k}].ptr = arr{k};");
                let (fmt, conv) = if elem == DType::F16 {
                    ("%.17g", "(double)sptir_h2f")
                } else if elem == DType::BF16 {
                    ("%.17g", "(double)sptir_bf2f")
                } else if elem.is_float() {
                    ("%.17g", "(double)")
                } else {
                    ("%lld", "(long long)")
                };
                let _ = writeln!(
                    print,
                    "    printf(\"{k}\");\n    for (int i = 0; i < {}; ++i) printf(\" {fmt}\", {conv}(arr{k}[i]));\n    printf(\"\\n\");",
                    t.len()
                );
            }
            (CParamKind::Scalar(d), ArgValue::Int(v)) if !d.is_float() => {
                let _ = writeln!(fill, "    args[{k}].i = {v}LL;");
            }
            (CParamKind::Scalar(_), ArgValue::Float(x)) => {
                let _ = writeln!(fill, "    args[{k}].f = {x:e};");
            }
            (CParamKind::Scalar(_), ArgValue::Int(v)) => {
                let _ = writeln!(fill, "    args[{k}].f = {v};");
            }
            (kind, _) => panic!("harness: parameter `{}` ({kind:?}) mismatched", p.name),
        }
    }
    let n = m.params.len().max(1);
    let _ = write!(
        s,
        "int main(void) {{\n    sparsetir_arg args[{n}];\n{fill}    sparsetir_set_num_threads({threads});\n    int rc = {}(args, {});\n    printf(\"rc %d\\n\", rc);\n{print}    return 0;\n}}\n",
        m.entry,
        m.params.len()
    );
    s
}

/// Compiles and runs the harness in `dir` (files named after `tag`) with `threads` threads;
/// asserts the entry point returned 0 and returns the printed arrays by parameter index.
pub fn run_c(
    cc: &str,
    dir: &Path,
    tag: &str,
    m: &CModule,
    args: &HashMap<String, ArgValue>,
    threads: usize,
) -> HashMap<usize, Vec<f64>> {
    run_c_with(cc, dir, tag, m, args, threads, &[])
}

/// [`run_c`] with extra compiler `flags` (after `-std=c11 -O2 -fopenmp`: no `-march`, so the
/// portable forms of machine-specific code unless the flags name a machine).
pub fn run_c_with(
    cc: &str,
    dir: &Path,
    tag: &str,
    m: &CModule,
    args: &HashMap<String, ArgValue>,
    threads: usize,
    flags: &[&str],
) -> HashMap<usize, Vec<f64>> {
    let src = dir.join(format!("{tag}.c"));
    let exe = dir.join(tag);
    std::fs::write(&src, harness(m, args, threads)).expect("write harness");
    let out = Command::new(cc)
        .args(["-std=c11", "-O2", "-fopenmp"])
        .args(flags)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg("-lm")
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "{tag}: compile failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        m.source
    );
    let run = Command::new(&exe).output().expect("run harness");
    assert!(
        run.status.success(),
        "{tag}: harness crashed: {:?}",
        run.status
    );
    let text = String::from_utf8_lossy(&run.stdout).into_owned();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("rc 0"), "{tag}: entry point failed");
    let mut arrays = HashMap::new();
    for l in lines {
        let mut it = l.split_whitespace();
        let k: usize = it.next().and_then(|x| x.parse().ok()).expect("array index");
        let vals: Vec<f64> = it.map(|x| x.parse::<f64>().expect("number")).collect();
        arrays.insert(k, vals);
    }
    arrays
}

/// The compiler flags the vector-loop tests build with: no machine named (the portable forms
/// of machine-specific code), AVX2 with F16C (Haswell), and this machine's own (AVX-512 where
/// it has it).
pub const MACHINES: [&[&str]; 3] = [&[], &["-march=haswell"], &["-march=native"]];

/// One build's outputs: its compiler flags and every array parameter's values by name.
pub type MachineRun = (&'static [&'static str], HashMap<String, Vec<f64>>);

/// `m` run on `args` with each of [`MACHINES`].
pub fn run_on_machines(
    cc: &str,
    dir: &Path,
    tag: &str,
    m: &CModule,
    args: &HashMap<String, ArgValue>,
) -> Vec<MachineRun> {
    MACHINES
        .iter()
        .enumerate()
        .map(|(k, flags)| {
            let got = run_c_with(cc, dir, &format!("{tag}{k}"), m, args, 2, flags);
            let named = m
                .params
                .iter()
                .enumerate()
                .filter_map(|(i, p)| got.get(&i).map(|v| (p.name.clone(), v.clone())))
                .collect();
            (*flags, named)
        })
        .collect()
}

/// Asserts that `got` is within `rel` (relative, plus `abs`) of `want` element by element;
/// NaN matches NaN, infinities match exactly.
pub fn assert_near(what: &str, got: &[f64], want: &[f64], rel: f64, abs: f64) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let near = (g.is_nan() && w.is_nan())
            || g == w
            || (w.is_finite() && (g - w).abs() <= rel * w.abs() + abs);
        assert!(near, "{what}[{i}]: C {g}, want {w}");
    }
}

/// Runs `f` in C with `threads` threads and in the interpreter; asserts every array argument
/// ends equal (NaN matches NaN; floats within `tol`, relative) and returns the interpreter's
/// arguments after the run (so callers can check the outputs changed).
pub fn check(
    cc: &str,
    dir: &Path,
    tag: &str,
    f: &PrimFunc,
    args: &HashMap<String, ArgValue>,
    threads: usize,
    tol: f64,
) -> HashMap<String, ArgValue> {
    let m = emit_c(f).unwrap_or_else(|e| panic!("{tag}: {e}"));
    let got = run_c(cc, dir, tag, &m, args, threads);
    let mut want = args.clone();
    run_func(f, &mut want).unwrap_or_else(|e| panic!("{tag}: interpreter: {e}"));
    for (k, p) in m.params.iter().enumerate() {
        let Some(ArgValue::Array(t)) = want.get(&p.name) else {
            continue;
        };
        let w = t.to_f64_vec();
        let g = got
            .get(&k)
            .unwrap_or_else(|| panic!("{tag}: no output for `{}`", p.name));
        assert_eq!(w.len(), g.len(), "{tag}: `{}` length", p.name);
        for (i, (a, b)) in w.iter().zip(g).enumerate() {
            let same =
                (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= tol * a.abs().max(1.0);
            assert!(same, "{tag}: `{}`[{i}]: interpreter {a}, C {b}", p.name);
        }
    }
    want
}
