//! Tests of `init_into_cache`: a row's start `C[vi, vk] = 0.5`, its copy into a local cache,
//! the accumulation there and the write-back become a cache started at 0.5 (snapshot); the
//! stage-III interpreter gives the same outputs before and after, equal to a direct
//! computation, with the output holding other values beforehand and rows that store nothing.
//! Anything that could make the start's stores live, or the fill read other values, leaves the
//! function as it is.

use std::collections::HashMap;

use sparsetir_eval::{run_func, ArgValue};
use sparsetir_formats::Tensor;
use sparsetir_ir::printer::print_func;
use sparsetir_ir::{verify_func, DType, PrimFunc};
use sparsetir_transform::init_into_cache;

fn parse(src: &str) -> PrimFunc {
    sparsetir_syntax::parse_func(src).unwrap_or_else(|d| panic!("parse: {d:?}"))
}

/// Row sums of CSR rows of 4-wide vectors, started at `START`, accumulated in `L`: the form
/// `reverse_cache_write` leaves a lowered reduction in. `FILL`, `BETWEEN` and `BACK` are
/// replaced by the cases below.
const ROWS: &str = r#"
@T.prim_func
def rows(a: T.handle, indptr: T.handle, c: T.handle, m: T.int32, nnz: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (nnz, 4), "float32")
    P = T.match_buffer(indptr, (m + 1,), "int32")
    C = T.match_buffer(c, (m, 4), "float32")
    for i in T.serial(m):
        with T.block("row"):
            vi = T.axis.spatial(m, i)
            L = T.alloc_buffer((4,), "float32", scope="local")
            for k in T.serial(4):
                with T.block("start"):
                    vk = T.axis.spatial(4, k)
                    C[vi, vk] = START
            BETWEEN
            for k in T.vectorized(4):
                with T.block("fill"):
                    vk = T.axis.spatial(4, k)
                    L[vk] = C[vi, vk]
            for j, k in T.grid(P[vi + 1] - P[vi], 4):
                with T.block("acc"):
                    vj = T.axis.reduce(nnz, j)
                    vk = T.axis.spatial(4, k)
                    L[vk] = L[vk] + A[P[vi] + vj, vk]
            BACK
"#;

const BACK: &str = r#"for k in T.vectorized(4):
                with T.block("back"):
                    vk = T.axis.spatial(4, k)
                    C[vi, vk] = L[vk]"#;

fn script(start: &str, between: &str, back: &str) -> PrimFunc {
    parse(
        &ROWS
            .replace("START", start)
            .replace("BETWEEN", between)
            .replace("BACK", back),
    )
}

/// Rows of 0, 2, 0, 3 and 1 stored vectors; `C` holds other values before the call.
fn data() -> (HashMap<String, ArgValue>, Vec<i64>, Vec<f64>) {
    let indptr: Vec<i64> = vec![0, 0, 2, 2, 5, 6];
    let nnz = 6;
    let a: Vec<f64> = (0..nnz * 4).map(|v| ((v * 7) % 5) as f64 - 2.0).collect();
    let mut args = HashMap::new();
    let t = |dt, v: &[f64]| ArgValue::Array(Tensor::from_f64(dt, v).expect("tensor"));
    let p: Vec<f64> = indptr.iter().map(|&x| x as f64).collect();
    args.insert("a".to_string(), t(DType::F32, &a));
    args.insert("indptr".to_string(), t(DType::I32, &p));
    let garbage: Vec<f64> = (0..5 * 4).map(|v| 100.0 + v as f64).collect();
    args.insert("c".to_string(), t(DType::F32, &garbage));
    args.insert("m".to_string(), ArgValue::Int(5));
    args.insert("nnz".to_string(), ArgValue::Int(nnz as i64));
    (args, indptr, a)
}

fn run(f: &PrimFunc) -> Vec<f64> {
    let (mut args, _, _) = data();
    run_func(f, &mut args).unwrap_or_else(|e| panic!("{e}\n{}", print_func(f)));
    match args.get("c") {
        Some(ArgValue::Array(t)) => t.to_f64_vec(),
        other => panic!("no c: {other:?}"),
    }
}

#[test]
fn the_start_goes_into_the_cache() {
    let f = script("T.float32(0.5)", "", BACK);
    let g = init_into_cache(&f);
    assert!(verify_func(&g).is_ok(), "{:?}", verify_func(&g));
    let text = print_func(&g);
    assert!(!text.contains("T.block(\"start\")"), "{text}");
    assert!(text.contains("L[vk_1] = T.float32(0.5)"), "{text}");
    insta::assert_snapshot!(text);
    // Same results as before, and as a direct computation: empty rows get the start, and
    // nothing of what C held survives.
    let (_, indptr, a) = data();
    let got = run(&g);
    assert_eq!(run(&f), got);
    for i in 0..5 {
        for k in 0..4 {
            let want = 0.5
                + (indptr[i]..indptr[i + 1])
                    .map(|j| a[j as usize * 4 + k])
                    .sum::<f64>();
            assert_eq!(got[i * 4 + k], want, "C[{i}, {k}]");
        }
    }
    // The printed result parses back to the same function.
    assert_eq!(print_func(&parse(&text)), text);
}

#[test]
fn what_could_make_the_start_live_keeps_it() {
    // Each case: (start value, statements between start and fill, write-back).
    let read_between = r#"for k in T.serial(1):
                with T.block("peek"):
                    vk = T.axis.spatial(1, k)
                    C[vi, 3] = C[vi, 0] + T.float32(1)"#;
    let partial_back = r#"for k in T.vectorized(3):
                with T.block("back"):
                    vk = T.axis.spatial(3, k)
                    C[vi, vk] = L[vk]"#;
    let reversed_back = r#"for k in T.vectorized(4):
                with T.block("back"):
                    vk = T.axis.spatial(4, k)
                    C[vi, 3 - vk] = L[vk]"#;
    let other_row_back = r#"for k in T.vectorized(4):
                with T.block("back"):
                    vk = T.axis.spatial(4, k)
                    C[0, vk] = L[vk]"#;
    let predicated_back = r#"for k in T.vectorized(4):
                with T.block("back"):
                    vk = T.axis.spatial(4, k)
                    T.where(vi < 3)
                    C[vi, vk] = L[vk]"#;
    let no_back = "";
    let cases = [
        ("a read of C between", "T.float32(0.5)", read_between, BACK),
        (
            "a write-back of fewer elements",
            "T.float32(0.5)",
            "",
            partial_back,
        ),
        (
            "a write-back of another row",
            "T.float32(0.5)",
            "",
            other_row_back,
        ),
        // The same elements, but not position by position: left alone (no proof attempted).
        (
            "a write-back indexed otherwise",
            "T.float32(0.5)",
            "",
            reversed_back,
        ),
        (
            "a write-back under a predicate",
            "T.float32(0.5)",
            "",
            predicated_back,
        ),
        ("no write-back", "T.float32(0.5)", "", no_back),
        ("a start that loads", "A[vi, vk]", "", BACK),
        // `k` is the start's own loop: out of scope in the fill.
        (
            "a start naming its loop",
            "T.Cast(\"float32\", k)",
            "",
            BACK,
        ),
    ];
    for (what, start, between, back) in cases {
        let f = script(start, between, back);
        let g = init_into_cache(&f);
        assert_eq!(print_func(&g), print_func(&f), "{what}: changed");
    }
}
