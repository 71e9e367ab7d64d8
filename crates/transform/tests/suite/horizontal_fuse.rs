//! Tests of `horizontal_fuse`: the CPU form fuses sibling `T.parallel` nests into one parallel
//! loop with an `if`/`elif` chain (snapshot, three parts of one SpMV checked against an
//! independent product, with and without atomics); the GPU form concatenates `blockIdx.x`
//! kernels and pads `threadIdx.x` (snapshot, interpreter result against an independent
//! computation); dependent nests are not fused; bad attributes and non-invariant thread extents
//! are typed errors.

use std::collections::HashMap;

use sparsetir_eval::{run_func, ArgValue};
use sparsetir_formats::Tensor;
use sparsetir_ir::printer::print_func;
use sparsetir_ir::{verify_func, DType, ForKind, PrimFunc, Stmt};
use sparsetir_transform::{fuse_form, horizontal_fuse, lower_atomic, FuseForm, LowerError};

fn parse(src: &str) -> PrimFunc {
    sparsetir_syntax::parse_func(src).unwrap_or_else(|d| panic!("parse: {d:?}"))
}

/// SpMV over a matrix in three parts: ELL (two per row), a COO tail repeating rows, a diagonal.
const THREE_PARTS: &str = r#"
@T.prim_func
def three_parts(a1: T.handle, j1: T.handle, a2: T.handle, r2: T.handle, j2: T.handle, d: T.handle, x: T.handle, y: T.handle, m: T.int32, n: T.int32, n2: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0, "horizontal_fuse": "cpu"})
    A1 = T.match_buffer(a1, (m, 2), "float32")
    J1 = T.match_buffer(j1, (m, 2), "int32")
    A2 = T.match_buffer(a2, (n2,), "float32")
    R2 = T.match_buffer(r2, (n2,), "int32")
    J2 = T.match_buffer(j2, (n2,), "int32")
    D = T.match_buffer(d, (m,), "float32")
    X = T.match_buffer(x, (n,), "float32")
    Y = T.match_buffer(y, (m,), "float32")
    for i in T.parallel(m):
        for k in T.serial(2):
            with T.block("ell"):
                vi = T.axis.spatial(m, i)
                vk = T.axis.reduce(2, k)
                T.block_attr({"atomic": True})
                Y[vi] = Y[vi] + A1[vi, vk] * X[J1[vi, vk]]
    for e in T.parallel(n2):
        with T.block("coo"):
            ve = T.axis.spatial(n2, e)
            T.block_attr({"atomic": True})
            Y[R2[ve]] = Y[R2[ve]] + A2[ve] * X[J2[ve]]
    for p in T.parallel(m):
        with T.block("diag"):
            vp = T.axis.spatial(m, p)
            T.block_attr({"atomic": True})
            Y[vp] = Y[vp] + D[vp] * X[vp]
"#;

fn farr(v: &[f64]) -> ArgValue {
    ArgValue::Array(Tensor::from_f64(DType::F32, v).expect("tensor"))
}
fn iarr(v: &[i64]) -> ArgValue {
    ArgValue::Array(Tensor::from_i64(DType::I32, v).expect("tensor"))
}
fn out(args: &HashMap<String, ArgValue>, name: &str) -> Vec<f64> {
    match &args[name] {
        ArgValue::Array(t) => t.to_f64_vec(),
        other => panic!("{other:?}"),
    }
}
fn assert_close(a: &[f64], b: &[f64]) {
    assert_eq!(a.len(), b.len());
    for (i, (p, q)) in a.iter().zip(b).enumerate() {
        assert!((p - q).abs() <= 1e-4 * (1.0 + q.abs()), "[{i}]: {p} vs {q}");
    }
}

/// Runs the three-part SpMV and returns `y`, with the f64 product computed independently.
fn spmv(f: &PrimFunc) -> (Vec<f64>, Vec<f64>) {
    let (m, n) = (6usize, 7usize);
    let a1: Vec<f64> = (0..m * 2).map(|v| 0.25 + v as f64).collect();
    let j1: Vec<i64> = (0..m * 2).map(|v| ((v * 5 + 1) % n) as i64).collect();
    let r2 = vec![2, 0, 2, 5, 2];
    let j2 = vec![6, 1, 3, 0, 2];
    let a2 = vec![1.5, -2.25, 3.0, 0.5, -1.0];
    let dg: Vec<f64> = (0..m).map(|v| 2.0 - v as f64).collect();
    let x: Vec<f64> = (0..n).map(|v| 1.0 + 0.5 * v as f64).collect();
    let mut want = vec![0.0; m];
    for i in 0..m {
        for k in 0..2 {
            want[i] += a1[i * 2 + k] * x[j1[i * 2 + k] as usize];
        }
        want[i] += dg[i] * x[i];
    }
    for e in 0..a2.len() {
        want[r2[e] as usize] += a2[e] * x[j2[e] as usize];
    }
    let mut args = HashMap::from([
        ("a1".to_string(), farr(&a1)),
        ("j1".to_string(), iarr(&j1)),
        ("a2".to_string(), farr(&a2)),
        ("r2".to_string(), iarr(&r2)),
        ("j2".to_string(), iarr(&j2)),
        ("d".to_string(), farr(&dg)),
        ("x".to_string(), farr(&x)),
        ("y".to_string(), farr(&vec![0.0; m])),
        ("m".to_string(), ArgValue::Int(m as i64)),
        ("n".to_string(), ArgValue::Int(n as i64)),
        ("n2".to_string(), ArgValue::Int(a2.len() as i64)),
    ]);
    run_func(f, &mut args).expect("runs");
    (out(&args, "y"), want)
}

fn top_loops(f: &PrimFunc) -> Vec<(ForKind, Option<String>)> {
    let items = match &f.body {
        Stmt::Seq(v) => v.clone(),
        s => vec![s.clone()],
    };
    items
        .iter()
        .filter_map(|s| match s {
            Stmt::For(l) => Some((l.kind, l.thread.clone())),
            _ => None,
        })
        .collect()
}

#[test]
fn cpu_snapshot_three_parts() {
    let f = lower_atomic(&parse(THREE_PARTS)).expect("atomics");
    let g = horizontal_fuse(&f).expect("fuses");
    verify_func(&g).expect("verifies");
    assert_eq!(top_loops(&g), vec![(ForKind::Parallel, None)]);
    insta::assert_snapshot!(print_func(&g));
}

#[test]
fn cpu_fusion_keeps_the_product() {
    let plain = parse(THREE_PARTS);
    let atomic = lower_atomic(&plain).expect("atomics");
    for f in [&plain, &atomic] {
        let g = horizontal_fuse(f).expect("fuses");
        assert_eq!(top_loops(&g).len(), 1);
        let (got, want) = spmv(&g);
        assert_close(&got, &want);
        let (before, _) = spmv(f);
        assert_close(&before, &want);
    }
}

#[test]
fn form_selection() {
    let f = parse(THREE_PARTS);
    assert_eq!(fuse_form(&f).expect("form"), Some(FuseForm::Cpu));
    let auto =
        parse(&THREE_PARTS.replace("\"horizontal_fuse\": \"cpu\"", "\"horizontal_fuse\": True"));
    assert_eq!(fuse_form(&auto).expect("form"), Some(FuseForm::Cpu));
    let gpu = parse(&THREE_PARTS.replace(
        "\"horizontal_fuse\": \"cpu\"",
        "\"horizontal_fuse\": \"gpu\"",
    ));
    // Asked for the GPU form, the function has no `blockIdx.x` loops: nothing to fuse.
    assert_eq!(horizontal_fuse(&gpu).expect("no-op"), gpu);
    let off =
        parse(&THREE_PARTS.replace("\"horizontal_fuse\": \"cpu\"", "\"horizontal_fuse\": False"));
    assert_eq!(horizontal_fuse(&off).expect("no-op"), off);
    let none = parse(&THREE_PARTS.replace(", \"horizontal_fuse\": \"cpu\"", ""));
    assert_eq!(horizontal_fuse(&none).expect("no-op"), none);
    let bad = parse(&THREE_PARTS.replace(
        "\"horizontal_fuse\": \"cpu\"",
        "\"horizontal_fuse\": \"tpu\"",
    ));
    let e = horizontal_fuse(&bad).expect_err("bad value");
    assert!(matches!(e, LowerError::Invalid { .. }), "{e:?}");
    assert!(e.to_string().contains("\"cpu\", \"gpu\""), "{e}");
    let c = sparsetir_ops::load("csrmm").expect("catalog");
    assert_eq!(horizontal_fuse(&c).expect("no-op"), c);
}

#[test]
fn dependent_nests_are_not_fused() {
    let src = r#"
@T.prim_func
def dep(a: T.handle, b: T.handle, y: T.handle, m: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0, "horizontal_fuse": "cpu"})
    A = T.match_buffer(a, (m,), "float32")
    B = T.match_buffer(b, (m,), "float32")
    Y = T.match_buffer(y, (m,), "float32")
    Tmp = T.alloc_buffer((m,), "float32")
    for i in T.parallel(m):
        Tmp[i] = A[i] * T.float32(2)
    for i2 in T.parallel(m):
        Y[i2] = Tmp[m - 1 - i2] + T.float32(1)
    for i3 in T.parallel(m):
        B[i3] = A[i3] + T.float32(3)
"#;
    let f = parse(src);
    let g = horizontal_fuse(&f).expect("fuses");
    verify_func(&g).expect("verifies");
    // The second nest reads what the first writes: cut there; the third joins the second.
    assert_eq!(top_loops(&g).len(), 2);
    let a = [1.0, 2.0, 3.0, 4.0];
    let mut args = HashMap::from([
        ("a".to_string(), farr(&a)),
        ("b".to_string(), farr(&[0.0; 4])),
        ("y".to_string(), farr(&[0.0; 4])),
        ("m".to_string(), ArgValue::Int(4)),
    ]);
    run_func(&g, &mut args).expect("runs");
    let want_y: Vec<f64> = (0..4).map(|i| 2.0 * a[3 - i] + 1.0).collect();
    let want_b: Vec<f64> = a.iter().map(|v| v + 3.0).collect();
    assert_close(&out(&args, "y"), &want_y);
    assert_close(&out(&args, "b"), &want_b);
}

/// Three kernels: `C = 2 A` (m blocks x 4 threads), `D = B + 1` (p blocks x 2 threads) and
/// `E = 3 F` (3 blocks, no `threadIdx.x`).
const GPU: &str = r#"
@T.prim_func
def kernels(a: T.handle, b: T.handle, c: T.handle, d: T.handle, f: T.handle, e: T.handle, m: T.int32, p: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0, "horizontal_fuse": True})
    A = T.match_buffer(a, (m, 4), "float32")
    B = T.match_buffer(b, (p, 2), "float32")
    C = T.match_buffer(c, (m, 4), "float32")
    D = T.match_buffer(d, (p, 2), "float32")
    F = T.match_buffer(f, (3,), "float32")
    E = T.match_buffer(e, (3,), "float32")
    for bx in T.thread_binding(m, thread="blockIdx.x"):
        for tx in T.thread_binding(4, thread="threadIdx.x"):
            with T.block("k1"):
                vi = T.axis.spatial(m, bx)
                vj = T.axis.spatial(4, tx)
                C[vi, vj] = A[vi, vj] * T.float32(2)
    for bx2 in T.thread_binding(p, thread="blockIdx.x"):
        for tx2 in T.thread_binding(2, thread="threadIdx.x"):
            with T.block("k2"):
                vi2 = T.axis.spatial(p, bx2)
                vj2 = T.axis.spatial(2, tx2)
                D[vi2, vj2] = B[vi2, vj2] + T.float32(1)
    for bx3 in T.thread_binding(3, thread="blockIdx.x"):
        with T.block("k3"):
            vk = T.axis.spatial(3, bx3)
            E[vk] = F[vk] * T.float32(3)
"#;

#[test]
fn gpu_snapshot() {
    let f = parse(GPU);
    assert_eq!(fuse_form(&f).expect("form"), Some(FuseForm::Gpu));
    let g = horizontal_fuse(&f).expect("fuses");
    verify_func(&g).expect("verifies");
    assert_eq!(
        top_loops(&g),
        vec![(ForKind::ThreadBinding, Some("blockIdx.x".to_string()))]
    );
    insta::assert_snapshot!(print_func(&g));
}

#[test]
fn gpu_fusion_keeps_the_results() {
    let (m, p) = (3usize, 2usize);
    let a: Vec<f64> = (0..m * 4).map(|v| v as f64 - 3.5).collect();
    let b: Vec<f64> = (0..p * 2).map(|v| 0.5 * v as f64).collect();
    let fv = [1.0, -2.0, 0.25];
    let g = horizontal_fuse(&parse(GPU)).expect("fuses");
    let mut args = HashMap::from([
        ("a".to_string(), farr(&a)),
        ("b".to_string(), farr(&b)),
        ("c".to_string(), farr(&vec![0.0; m * 4])),
        ("d".to_string(), farr(&vec![0.0; p * 2])),
        ("f".to_string(), farr(&fv)),
        ("e".to_string(), farr(&[0.0; 3])),
        ("m".to_string(), ArgValue::Int(m as i64)),
        ("p".to_string(), ArgValue::Int(p as i64)),
    ]);
    run_func(&g, &mut args).expect("runs");
    let want_c: Vec<f64> = a.iter().map(|v| 2.0 * v).collect();
    let want_d: Vec<f64> = b.iter().map(|v| v + 1.0).collect();
    let want_e: Vec<f64> = fv.iter().map(|v| 3.0 * v).collect();
    assert_close(&out(&args, "c"), &want_c);
    assert_close(&out(&args, "d"), &want_d);
    assert_close(&out(&args, "e"), &want_e);
}

#[test]
fn gpu_thread_extent_must_be_invariant() {
    let src = GPU.replace(
        "for tx2 in T.thread_binding(2, thread=\"threadIdx.x\")",
        "for tx2 in T.thread_binding(bx2 + 1, thread=\"threadIdx.x\")",
    );
    let e = horizontal_fuse(&parse(&src)).expect_err("variant extent");
    assert!(matches!(e, LowerError::Unsupported { .. }), "{e:?}");
    assert!(e.to_string().contains("`bx2`"), "{e}");
    let src = GPU.replace(
        "for tx2 in T.thread_binding(2, thread=\"threadIdx.x\")",
        "for tx2 in T.thread_binding(2, thread=\"blockIdx.x\")",
    );
    let e = horizontal_fuse(&parse(&src)).expect_err("nested blockIdx.x");
    assert!(e.to_string().contains("nested `blockIdx.x`"), "{e}");
}
