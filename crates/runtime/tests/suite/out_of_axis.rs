//! Coordinates outside their dense axes (SPEC §2.3: any integer expression may index a buffer;
//! where its coordinates are not stored, a read yields the buffer's default value and a write is
//! skipped), on every backend: the stage-I evaluator, the stage II and stage III interpreters,
//! the C backend and the generated CUDA in the emulator. Every result is checked against a dense
//! computation in the test; outputs start at a sentinel, so a skipped write is seen.

use sparsetir_ir::PrimFunc;

use crate::common;
use common::backends::{self, Backends};
use common::{f32s, i32s, int, Args};

const SENTINEL: f32 = 7.0;

fn parse(src: &str) -> PrimFunc {
    sparsetir_syntax::parse_func(src).unwrap_or_else(|e| panic!("parses: {e:?}\n{src}"))
}

/// Runs the script `src` on `args` with every backend, the CUDA emulator included, and checks output `out`
/// against `want` each time.
fn check_everywhere(what: &str, src: &str, args: &Args, out: &str, want: &[f64]) {
    let on = Backends {
        cache: "out-of-axis-cache",
        schedule: None,
        emulator: true,
    };
    backends::check_everywhere(what, &parse(src), &on, args, out, want);
}

/// Values with both signs, some of them (cast to int) inside `0..n`, some outside.
fn xs(n: usize) -> Vec<f32> {
    (0..n).map(|i| (i as f32) * 1.5 - 3.25).collect()
}

/// `x[j]`, or 0 (the default) outside `x`.
fn at_or_zero(x: &[f32], j: i64) -> f64 {
    usize::try_from(j)
        .ok()
        .and_then(|j| x.get(j))
        .map_or(0.0, |v| f64::from(*v))
}

fn vector_args(n: usize) -> Args {
    let mut a = Args::new();
    a.insert("m".into(), int(n));
    a.insert("x".into(), f32s(vec![n], xs(n)));
    a.insert("y".into(), f32s(vec![n], vec![SENTINEL; n]));
    a
}

const NEIGHBOURS: &str = r#"
@T.prim_func
def neighbours(x: T.handle, y: T.handle, m: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    X = T.sp.match_buffer(x, (I,), "float32")
    Y = T.sp.match_buffer(y, (I,), "float32")
    with T.sp.iteration([I], "S", "neighbours") as [i]:
        Y[i] = X[i - 1] + T.float32(2) * X[i + 1]
"#;

#[test]
fn reads_past_either_end_give_the_default() {
    let n = 9;
    let x = xs(n);
    let at = |j: i64| at_or_zero(&x, j);
    let want: Vec<f64> = (0..n as i64).map(|i| at(i - 1) + 2.0 * at(i + 1)).collect();
    check_everywhere(
        "x[i - 1] + 2 x[i + 1]",
        NEIGHBOURS,
        &vector_args(n),
        "y",
        &want,
    );
}

const SHIFTED_STORE: &str = r#"
@T.prim_func
def shifted(x: T.handle, y: T.handle, m: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    X = T.sp.match_buffer(x, (I,), "float32")
    Y = T.sp.match_buffer(y, (I,), "float32")
    with T.sp.iteration([I], "S", "shifted") as [i]:
        Y[i + 3] = X[i]
"#;

#[test]
fn writes_past_the_end_are_skipped() {
    let n = 8;
    let x = xs(n);
    let want: Vec<f64> = (0..n)
        .map(|j| {
            if j >= 3 {
                f64::from(x[j - 3])
            } else {
                f64::from(SENTINEL)
            }
        })
        .collect();
    check_everywhere(
        "y[i + 3] = x[i]",
        SHIFTED_STORE,
        &vector_args(n),
        "y",
        &want,
    );
}

const DATA_INDEX: &str = r#"
@T.prim_func
def data_index(x: T.handle, y: T.handle, m: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    X = T.sp.match_buffer(x, (I,), "float32", default_value=T.float32(-0.5))
    Y = T.sp.match_buffer(y, (I,), "float32")
    with T.sp.iteration([I], "S", "data_index") as [i]:
        Y[i] = X[T.Cast("int32", X[i])]
"#;

/// A coordinate computed from data (no validation can vouch for it) reads the buffer's own
/// default value outside the axis.
#[test]
fn coordinates_computed_from_data_are_guarded() {
    let n = 10;
    let x = xs(n);
    let want: Vec<f64> = x
        .iter()
        .map(|&v| {
            let j = v as i32;
            if (0..n as i32).contains(&j) {
                f64::from(x[j as usize])
            } else {
                -0.5
            }
        })
        .collect();
    assert!(want.contains(&-0.5) && want.iter().any(|w| *w != -0.5));
    check_everywhere("x[int(x[i])]", DATA_INDEX, &vector_args(n), "y", &want);
}

const RAGGED: &str = r#"
@T.prim_func
def ragged_pad(x: T.handle, y: T.handle, indptr: T.handle, m: T.int32, n: T.int32, nnz: T.int32, w: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.dense_varied(I, (n, nnz), indptr, "int32")
    K = T.sp.dense_fixed(w)
    X = T.sp.match_buffer(x, (I, J), "float32")
    Y = T.sp.match_buffer(y, (I, K), "float32")
    with T.sp.iteration([I, K], "SS", "ragged_pad") as [i, k]:
        Y[i, k] = X[i, k]
"#;

/// Rows of a ragged array padded to a width: past a row's length (a `dense_varied` fiber) the
/// read gives the default, not the next row's first values.
#[test]
fn ragged_rows_end_where_their_fiber_ends() {
    let lens = [3usize, 0, 5, 1, 4];
    let (m, w) = (lens.len(), 4usize);
    let mut indptr = vec![0i32];
    for l in lens {
        indptr.push(indptr.last().copied().unwrap_or(0) + l as i32);
    }
    let nnz = *indptr.last().unwrap_or(&0) as usize;
    let vals: Vec<f32> = (0..nnz).map(|p| p as f32 + 0.25).collect();
    let mut a = Args::new();
    a.insert("m".into(), int(m));
    a.insert("n".into(), int(5));
    a.insert("nnz".into(), int(nnz));
    a.insert("w".into(), int(w));
    a.insert("indptr".into(), i32s(&indptr));
    a.insert("x".into(), f32s(vec![nnz], vals.clone()));
    a.insert("y".into(), f32s(vec![m * w], vec![SENTINEL; m * w]));
    let mut want = Vec::new();
    for (i, &l) in lens.iter().enumerate() {
        for k in 0..w {
            want.push(if k < l {
                f64::from(vals[indptr[i] as usize + k])
            } else {
                0.0
            });
        }
    }
    check_everywhere("ragged rows padded", RAGGED, &a, "y", &want);
}

const DENSE_BUFFER: &str = r#"
@T.prim_func
def dense_shift(x: T.handle, y: T.handle, m: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    X = T.match_buffer(x, (m,), "float32")
    Y = T.sp.match_buffer(y, (I,), "float32")
    with T.sp.iteration([I], "S", "dense_shift") as [i]:
        Y[i] = X[i + 2] - X[i - 1]
"#;

/// The same for a dense (not sparse) buffer: outside its shape is not stored either.
#[test]
fn dense_buffers_read_the_default_outside_their_shape() {
    let n = 7;
    let x = xs(n);
    let at = |j: i64| at_or_zero(&x, j);
    let want: Vec<f64> = (0..n as i64).map(|i| at(i + 2) - at(i - 1)).collect();
    check_everywhere(
        "x[i + 2] - x[i - 1]",
        DENSE_BUFFER,
        &vector_args(n),
        "y",
        &want,
    );
}

const GATHER_PAST_THE_END: &str = r#"
@T.prim_func
def gather(x: T.handle, e: T.handle, y: T.handle, m: T.int32) -> None:
    T.func_attr({"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    X = T.sp.match_buffer(x, (I,), "float32")
    E = T.sp.match_buffer(e, (I,), "int32", default_value=T.int32(-1))
    Y = T.sp.match_buffer(y, (I,), "float32")
    with T.sp.iteration([I], "S", "gather") as [i]:
        Y[i] = X[E[i + 1]]
"#;

/// A gather through a validated index array is safe only where it reads a stored index: past
/// the end it reads the array's own default (-1 here), which must not reach `X` unguarded.
#[test]
fn a_gather_past_the_index_array_reads_its_default() {
    let n = 6;
    let x = xs(n);
    let e: Vec<i32> = vec![5, 0, 3, 3, 1, 4];
    let mut a = vector_args(n);
    a.insert("e".into(), i32s(&e));
    let want: Vec<f64> = (0..n)
        .map(|i| {
            if i + 1 < n {
                f64::from(x[e[i + 1] as usize])
            } else {
                0.0
            }
        })
        .collect();
    check_everywhere("x[e[i + 1]]", GATHER_PAST_THE_END, &a, "y", &want);
}
