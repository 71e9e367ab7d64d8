//! Statement and expression semantics of the stage II/III interpreter, each on a small script
//! with expected values worked out by hand: init (TVM's rule), loop kinds and order,
//! predicates, atomic_add, allocations and their scopes, let, lazy select, strides, dtypes.

use crate::tir_common;

use sparsetir_ir::DType;
use tir_common::*;

fn run_src(
    src: &str,
    items: Vec<(&str, sparsetir_eval::ArgValue)>,
) -> std::collections::HashMap<String, sparsetir_eval::ArgValue> {
    let f = parse(src);
    let mut a = args(items);
    run(&f, &mut a);
    a
}

const MATMUL: &str = r#"
@T.prim_func
def mm(a: T.handle, b: T.handle, c: T.handle, n: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (n, n), "float32")
    B = T.match_buffer(b, (n, n), "float32")
    C = T.match_buffer(c, (n, n), "float32")
    for i, j, k in T.grid(n, n, n):
        with T.block("mm"):
            vi, vj, vk = T.axis.remap("SSR", [i, j, k])
            with T.init():
                C[vi, vj] = T.float32(0)
            C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
"#;

#[test]
fn init_runs_at_first_reduction_step() {
    let n = 3;
    let mut rng = Rng::new(3);
    let a: Vec<f64> = (0..n * n).map(|_| rng.small()).collect();
    let b: Vec<f64> = (0..n * n).map(|_| rng.small()).collect();
    let mut want = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            for k in 0..n {
                want[i * n + j] += a[i * n + k] * b[k * n + j];
            }
        }
    }
    let r = run_src(
        MATMUL,
        vec![
            ("a", f32_arr(&a)),
            ("b", f32_arr(&b)),
            ("c", f32_arr(&[-4.0; 9])),
            ("n", int(3)),
        ],
    );
    assert_close(&out(&r, "c"), &want, "c");
}

const INIT_COUNT: &str = r#"
@T.prim_func
def cnt(inits: T.handle, steps: T.handle) -> None:
    T.func_attr({"sparse_tir_level": 0})
    Inits = T.match_buffer(inits, (3,), "int32")
    Steps = T.match_buffer(steps, (3,), "int32")
    for r1 in T.serial(2):
        for s in T.serial(3):
            for r2 in T.serial(4):
                with T.block("b"):
                    vr1 = T.axis.reduce((5, 7), r1 + 5)
                    vs = T.axis.spatial(3, s)
                    vr2 = T.axis.reduce(4, r2)
                    with T.init():
                        Inits[vs] = Inits[vs] + 1
                        Steps[vs] = 100 * Steps[vs]
                    Steps[vs] = Steps[vs] + 1
"#;

#[test]
fn init_needs_every_reduce_iterator_at_its_minimum() {
    // The init runs once per spatial point: when vr1 = 5 (its domain minimum) and vr2 = 0.
    // Steps starts at 1: init makes it 100, then 8 reduction steps add 8.
    let r = run_src(
        INIT_COUNT,
        vec![
            ("inits", i32_arr(&[0, 0, 0])),
            ("steps", i32_arr(&[1, 1, 1])),
        ],
    );
    assert_eq!(out_i64(&r, "inits"), vec![1, 1, 1]);
    assert_eq!(out_i64(&r, "steps"), vec![108, 108, 108]);
}

const LOOPS: &str = r#"
@T.prim_func
def loops(order: T.handle, ctr: T.handle) -> None:
    T.func_attr({"sparse_tir_level": 0})
    Order = T.match_buffer(order, (16,), "int32")
    Ctr = T.match_buffer(ctr, (1,), "int32")
    for bx in T.thread_binding(2, thread="blockIdx.x"):
        for tx in T.thread_binding(2, thread="threadIdx.x"):
            for p in T.parallel(2):
                for v in T.vectorized(1, 3):
                    Order[bx * 8 + tx * 4 + p * 2 + v - 1] = Ctr[0]
                    Ctr[0] = Ctr[0] + 1
    for u in T.unroll(3, 3):
        Ctr[0] = 1000
    for w in T.serial(5, -2):
        Ctr[0] = 2000
"#;

#[test]
fn loops_run_sequentially_in_order() {
    let r = run_src(
        LOOPS,
        vec![("order", i32_arr(&[0; 16])), ("ctr", i32_arr(&[0]))],
    );
    assert_eq!(out_i64(&r, "order"), (0..16).collect::<Vec<i64>>());
    // Zero and negative extents run nothing.
    assert_eq!(out_i64(&r, "ctr"), vec![16]);
}

const PREDICATE: &str = r#"
@T.prim_func
def pred(y: T.handle, m: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    Y = T.match_buffer(y, (m,), "int32")
    for o, t in T.grid((m + 3) // 4, 4):
        with T.block("b"):
            vi = T.axis.spatial(m, o * 4 + t)
            T.where(o * 4 + t < m and (o * 4 + t) % 3 != 1)
            Y[vi] = vi * 10
"#;

#[test]
fn predicate_skips_instances() {
    // Instances past m are skipped before their (out-of-domain) iterator is checked.
    let r = run_src(PREDICATE, vec![("y", i32_arr(&[-1; 7])), ("m", int(7))]);
    assert_eq!(out_i64(&r, "y"), vec![0, -1, 20, 30, -1, 50, 60]);
}

const ATOMIC: &str = r#"
@T.prim_func
def atomic(x: T.handle, c: T.handle, old: T.handle, h: T.handle) -> None:
    T.func_attr({"sparse_tir_level": 0})
    X = T.match_buffer(x, (4,), "float32")
    C = T.match_buffer(c, (2,), "float32")
    Old = T.match_buffer(old, (4,), "float32")
    H = T.match_buffer(h, (3,), "int8")
    for t in T.thread_binding(4, thread="threadIdx.x"):
        Old[t] = T.atomic_add(C[t % 2], X[t])
    for i in T.serial(3):
        T.evaluate(T.atomic_add(H[1], T.int8(100)))
"#;

#[test]
fn atomic_add_adds_and_returns_the_old_value() {
    let r = run_src(
        ATOMIC,
        vec![
            ("x", f32_arr(&[1.0, 2.0, 3.0, 4.0])),
            ("c", f32_arr(&[0.5, 10.0])),
            ("old", f32_arr(&[0.0; 4])),
            ("h", arr(DType::I8, &[0, 0, 0])),
        ],
    );
    // C[0]: 0.5 → 1.5 → 4.5; C[1]: 10 → 12 → 16.
    assert_eq!(out(&r, "c"), vec![4.5, 16.0]);
    assert_eq!(out(&r, "old"), vec![0.5, 10.0, 1.5, 12.0]);
    // int8 wraps: 300 mod 256 = 44.
    assert_eq!(out_i64(&r, "h"), vec![0, 44, 0]);
}

const ALLOCS: &str = r#"
@T.prim_func
def allocs(o1: T.handle, o2: T.handle, o3: T.handle) -> None:
    T.func_attr({"sparse_tir_level": 0})
    O1 = T.match_buffer(o1, (4,), "int32")
    O2 = T.match_buffer(o2, (4,), "int32")
    O3 = T.match_buffer(o3, (4,), "int32")
    G = T.alloc_buffer((1,), "int32")
    for i in T.serial(4):
        G[0] = G[0] + 1
        O1[i] = G[0]
        tmp = T.allocate((2,), "int32", "local")
        tmp[1] = tmp[1] + i + 1
        O2[i] = tmp[1]
        with T.block("b"):
            vi = T.axis.spatial(4, i)
            acc = T.alloc_buffer((1,), "int32", scope="local")
            acc[0] = acc[0] + 5
            O3[vi] = acc[0]
"#;

#[test]
fn allocations_are_zeroed_in_their_scope() {
    let r = run_src(
        ALLOCS,
        vec![
            ("o1", i32_arr(&[0; 4])),
            ("o2", i32_arr(&[0; 4])),
            ("o3", i32_arr(&[0; 4])),
        ],
    );
    // Function level: once (a running count); `T.allocate`: each time it runs; block header:
    // per block instance.
    assert_eq!(out_i64(&r, "o1"), vec![1, 2, 3, 4]);
    assert_eq!(out_i64(&r, "o2"), vec![1, 2, 3, 4]);
    assert_eq!(out_i64(&r, "o3"), vec![5, 5, 5, 5]);
}

const SPARSE_ALLOC: &str = r#"
@T.prim_func
def rowscale(a: T.handle, y: T.handle, indptr: T.handle, indices: T.handle, m: T.int32,
             n: T.int32, nnz: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 1})
    I = T.sp.dense_fixed(m)
    J = T.sp.compressed_varied(I, (n, nnz), (indptr, indices))
    A = T.sp.match_buffer(a, [I, J], "float32")
    Y = T.sp.match_buffer(y, [I, J], "float32")
    S = T.sp.alloc_buffer([I, J], "float32")
    J_indptr = T.sp.match_buffer(indptr, [I], "int32", extra_storage=1)
    for i in T.serial(m):
        for j in T.serial(J_indptr[i + 1] - J_indptr[i]):
            S[i, j] = A[i, j] * T.float32(i + 1)
    for i in T.serial(m):
        for j in T.serial(J_indptr[i + 1] - J_indptr[i]):
            Y[i, j] = S[i, j] + T.float32(j)
"#;

#[test]
fn sparse_alloc_buffer_follows_the_storage_model() {
    // Rows [2 elements, 0, 3 elements]: Y = A·(row + 1) + position in row.
    let r = run_src(
        SPARSE_ALLOC,
        vec![
            ("a", f32_arr(&[1.0, 2.0, 3.0, 4.0, 5.0])),
            ("y", f32_arr(&[0.0; 5])),
            ("indptr", i32_arr(&[0, 2, 2, 5])),
            ("indices", i32_arr(&[0, 3, 1, 2, 3])),
            ("m", int(3)),
            ("n", int(4)),
            ("nnz", int(5)),
        ],
    );
    assert_eq!(out(&r, "y"), vec![1.0, 3.0, 9.0, 13.0, 17.0]);
}

const EXPRS: &str = r#"
@T.prim_func
def exprs(x: T.handle, y: T.handle, z: T.handle, w: T.handle) -> None:
    T.func_attr({"sparse_tir_level": 0})
    X = T.match_buffer(x, (2,), "float32")
    Y = T.match_buffer(y, (4,), "float32")
    Z = T.match_buffer(z, (6,), "int32")
    W = T.match_buffer(w, (3,), "float64")
    for i in T.serial(4):
        Y[i] = T.if_then_else(i < 2, X[i], T.float32(-1))
    t: T.int32 = 7
    Z[0] = t * 3
    Z[1] = T.let(u, t + 1, u * u)
    Z[2] = T.floordiv(-7, 2)
    Z[3] = T.floormod(-7, 2)
    Z[4] = T.Cast("int32", T.int8(100) + T.int8(100))
    Z[5] = T.Cast("int32", T.uint8(3) - T.uint8(5))
    W[0] = T.exp(T.float64(1))
    W[1] = T.Cast("float64", T.float16(1) + T.float16(0.0001))
    W[2] = T.Cast("float64", T.max_value("int16"))
"#;

#[test]
fn expressions_follow_dtype_semantics() {
    let r = run_src(
        EXPRS,
        vec![
            ("x", f32_arr(&[1.5, 2.5])),
            ("y", f32_arr(&[0.0; 4])),
            ("z", i32_arr(&[0; 6])),
            ("w", f64_arr(&[0.0; 3])),
        ],
    );
    // The select reads X only where i < 2 (X has two elements).
    assert_eq!(out(&r, "y"), vec![1.5, 2.5, -1.0, -1.0]);
    // int8: 200 wraps to -56; uint8: -2 wraps to 254.
    assert_eq!(out_i64(&r, "z"), vec![21, 64, -4, 1, -56, 254]);
    let w = out(&r, "w");
    assert_eq!(w[0], std::f64::consts::E);
    // 0.0001 is below half an ulp of 1 in float16 (2^-11 ≈ 0.00049): the sum rounds to 1.
    assert_eq!(w[1], 1.0);
    assert_eq!(w[2], 32767.0);
}

const STRIDES: &str = r#"
@T.prim_func
def strided(a: T.handle, o: T.handle) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (2, 3), "float32", strides=[1, 2])
    O = T.match_buffer(o, (2, 3), "float32", strides=[1])
    for i, j in T.grid(2, 3):
        O[i, j] = A[i, j]
"#;

#[test]
fn strides_are_honoured() {
    // A is column-major (element (i, j) at i + 2j); O is row-major.
    let a: Vec<f64> = (0..6).map(|v| v as f64).collect();
    // A longer array than the buffer spans is accepted; the tail is left alone.
    let r = run_src(
        STRIDES,
        vec![("a", f32_arr(&a)), ("o", f32_arr(&[-1.0; 7]))],
    );
    let mut want = vec![0.0; 7];
    for i in 0..2 {
        for j in 0..3 {
            want[i * 3 + j] = a[i + 2 * j];
        }
    }
    want[6] = -1.0;
    assert_eq!(out(&r, "o"), want);
}

const STORAGE_DTYPES: &str = r#"
@T.prim_func
def dts(h: T.handle, g: T.handle, b: T.handle, u: T.handle) -> None:
    T.func_attr({"sparse_tir_level": 0})
    H = T.match_buffer(h, (2,), "float16")
    G = T.match_buffer(g, (1,), "bfloat16")
    B = T.match_buffer(b, (2,), "bool")
    U = T.match_buffer(u, (1,), "uint64")
    H[0] = T.float16(1) + T.float16(0.0001)
    H[1] = H[0] * T.float16(3) + T.float16(0.25)
    G[0] = T.bfloat16(1) + T.bfloat16(0.001)
    B[0] = 3 < 4
    B[1] = T.float32(0) != T.float32(0)
    U[0] = T.uint64(0) - T.uint64(1)
"#;

#[test]
fn buffers_of_every_width() {
    let r = run_src(
        STORAGE_DTYPES,
        vec![
            (
                "h",
                sparsetir_eval::ArgValue::Array(
                    sparsetir_formats::Tensor::from_f64(DType::F16, &[0.0; 2]).expect("f16"),
                ),
            ),
            (
                "g",
                sparsetir_eval::ArgValue::Array(
                    sparsetir_formats::Tensor::from_f64(DType::BF16, &[0.0]).expect("bf16"),
                ),
            ),
            ("b", arr(DType::Bool, &[0, 1])),
            ("u", arr(DType::U64, &[0])),
        ],
    );
    // float16 keeps 10 fraction bits, bfloat16 7: both small increments round away.
    assert_eq!(out(&r, "h"), vec![1.0, 3.25]);
    assert_eq!(out(&r, "g"), vec![1.0]);
    assert_eq!(out_i64(&r, "b"), vec![1, 0]);
    match r.get("u") {
        Some(sparsetir_eval::ArgValue::Array(t)) => match &t.data {
            sparsetir_formats::TensorData::U64(v) => assert_eq!(v, &vec![u64::MAX]),
            other => panic!("u holds {other:?}"),
        },
        other => panic!("u is {other:?}"),
    }
}
