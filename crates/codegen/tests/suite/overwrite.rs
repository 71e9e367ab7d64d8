//! `CModule::overwritten`: the array parameters every call stores whole without reading. A
//! row-by-row copy of `A` into `C` over `m × 4` names `c`; each change that leaves an element
//! unstored on some run (a predicate, an `if`, a shorter loop, a loop from 1, the store only
//! in an init, one dimension indexed twice) or reads `C` (an accumulation, an atomic) removes
//! it, and the input `a` is never named.

use crate::common::emit_script;

/// `C[i, k] = BODY` over `i < m`, `k < K` (a row block around a feature block).
const MAP: &str = r#"
@T.prim_func
def copy(a: T.handle, c: T.handle, m: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (m, 4), "float32")
    C = T.match_buffer(c, (m, 4), "float32")
    for i in T.parallel(m):
        with T.block("row"):
            vi = T.axis.spatial(m, i)
            for k in T.vectorized(KEXT):
                with T.block("f"):
                    vk = T.axis.spatial(KEXT, k)
                    PRED
                    STORE
"#;

fn overwritten(kext: &str, pred: &str, store: &str) -> Vec<String> {
    let src = MAP
        .replace("KEXT", kext)
        .replace("PRED", pred)
        .replace("STORE", store);
    emit_script(&src).overwritten
}

#[test]
fn a_plain_map_overwrites_its_output() {
    assert_eq!(
        overwritten("4", "", "C[vi, vk] = A[vi, vk] * T.float32(2)"),
        ["c"]
    );
    // A constant, a `let` on the way: still every element.
    let src = MAP
        .replace("KEXT", "4")
        .replace("PRED", "")
        .replace("STORE", "C[vi, vk] = T.min_value(\"float32\")");
    assert_eq!(emit_script(&src).overwritten, ["c"]);
}

#[test]
fn what_may_leave_an_element_or_read_one_is_not_overwritten() {
    let none: Vec<String> = Vec::new();
    let cases = [
        (
            "a predicate",
            "4",
            "T.where(vk < 3)",
            "C[vi, vk] = A[vi, vk]",
        ),
        ("a shorter loop", "3", "", "C[vi, vk] = A[vi, vk]"),
        ("a read of C", "4", "", "C[vi, vk] = C[vi, vk] + A[vi, vk]"),
        ("one dimension twice", "4", "", "C[vk, vk] = A[vi, vk]"),
        ("a constant index", "4", "", "C[vi, 0] = A[vi, vk]"),
        (
            "an atomic",
            "4",
            "",
            "T.evaluate(T.atomic_add(C[vi, vk], A[vi, vk]))",
        ),
    ];
    for (what, kext, pred, store) in cases {
        assert_eq!(overwritten(kext, pred, store), none, "{what}");
    }
}

#[test]
fn stores_that_may_not_run_do_not_count() {
    // Under an `if`.
    let under_if = r#"
@T.prim_func
def f(a: T.handle, c: T.handle, m: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (m,), "float32")
    C = T.match_buffer(c, (m,), "float32")
    for i in T.serial(m):
        with T.block("f"):
            vi = T.axis.spatial(m, i)
            if A[vi] > T.float32(0):
                C[vi] = A[vi]
"#;
    assert!(emit_script(under_if).overwritten.is_empty());
    // From 1: element 0 is never stored.
    let from_one = r#"
@T.prim_func
def f(a: T.handle, c: T.handle, m: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (m,), "float32")
    C = T.match_buffer(c, (m,), "float32")
    for i in T.serial(1, m):
        C[i] = A[i]
"#;
    assert!(emit_script(from_one).overwritten.is_empty());
    // The same loop from 0 over the loop variable itself, no block: overwritten.
    let from_zero = from_one.replace("T.serial(1, m)", "T.serial(m)");
    assert_eq!(emit_script(&from_zero).overwritten, ["c"]);
    // In a reduction's init only: the init runs only when its reduction does.
    let init_only = r#"
@T.prim_func
def f(a: T.handle, c: T.handle, m: T.int32, n: T.int32) -> None:
    T.func_attr({"sparse_tir_level": 0})
    A = T.match_buffer(a, (m, n), "float32")
    C = T.match_buffer(c, (m,), "float32")
    Z = T.alloc_buffer((m,), "float32")
    for i, j in T.grid(m, n):
        with T.block("f"):
            vi = T.axis.spatial(m, i)
            vj = T.axis.reduce(n, j)
            with T.init():
                C[vi] = T.float32(0)
            Z[vi] = Z[vi] + A[vi, vj]
"#;
    assert!(emit_script(init_only).overwritten.is_empty());
}
