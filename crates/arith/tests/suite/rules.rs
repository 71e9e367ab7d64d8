//! Unit tests of the simplifier's rules, one or a few per rule, checked on the printed form.

use sparsetir_arith::{simplify, Analyzer};
use sparsetir_ir::printer::print_expr;
use sparsetir_ir::{
    BinOp, Buffer, BufferDecl, BufferId, BufferShape, DType, Expr, PrimFunc, Span, UnOp, VarId,
};

struct Env {
    f: PrimFunc,
    i: VarId,
    j: VarId,
    n: VarId,
    m: VarId,
    x64: VarId,
    fl: VarId,
    b: VarId,
    indptr: BufferId,
}

fn env() -> Env {
    let mut f = PrimFunc::new("t");
    let i = f.add_var("i", DType::I32);
    let j = f.add_var("j", DType::I32);
    let n = f.add_var("n", DType::I32);
    let m = f.add_var("m", DType::I32);
    let x64 = f.add_var("x", DType::I64);
    let fl = f.add_var("y", DType::F32);
    let b = f.add_var("p", DType::Bool);
    let indptr = f.buffers.append(Buffer {
        name: "indptr".into(),
        decl: BufferDecl::Alloc,
        shape: BufferShape::Dense(vec![Expr::int(11)]),
        dtype: DType::I32,
        scope: "global".into(),
        strides: vec![],
        extra_storage: None,
        default_value: None,
        span: Span::default(),
    });
    Env {
        f,
        i,
        j,
        n,
        m,
        x64,
        fl,
        b,
        indptr,
    }
}

fn v(x: VarId) -> Expr {
    Expr::var(x)
}
fn c(x: i64) -> Expr {
    Expr::int(x)
}
fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
    Expr::binary(op, a, b)
}
fn add(a: Expr, b: Expr) -> Expr {
    Expr::add(a, b)
}
fn sub(a: Expr, b: Expr) -> Expr {
    Expr::sub(a, b)
}
fn mul(a: Expr, b: Expr) -> Expr {
    Expr::mul(a, b)
}

impl Env {
    fn s(&self, e: Expr) -> String {
        print_expr(&self.f, &simplify(&self.f, &e))
    }
    fn sa(&self, a: &Analyzer, e: Expr) -> String {
        print_expr(&self.f, &a.simplify(&self.f, &e))
    }
    /// An analyzer knowing `i in [0, 10)`, `j in [0, 4)`.
    fn small(&self) -> Analyzer {
        let mut a = Analyzer::new();
        a.bind_range(self.i, &c(0), &c(10));
        a.bind_range(self.j, &c(0), &c(4));
        a
    }
}

#[test]
fn constant_folding() {
    let e = env();
    assert_eq!(e.s(add(c(2), mul(c(3), c(4)))), "14");
    assert_eq!(e.s(bin(BinOp::FloorDiv, c(-7), c(2))), "-4");
    assert_eq!(e.s(bin(BinOp::FloorMod, c(-7), c(2))), "1");
    assert_eq!(e.s(bin(BinOp::Div, c(-7), c(2))), "-3");
    assert_eq!(e.s(bin(BinOp::Min, c(3), c(-2))), "-2");
    assert_eq!(e.s(bin(BinOp::Lt, c(3), c(-2))), "False");
    // int32 wraps: 2^31 - 1 + 1 = -2^31.
    assert_eq!(
        e.s(add(c(i32::MAX as i64), c(1))),
        (i32::MIN as i64).to_string()
    );
    // int64 does not wrap there.
    let big = add(Expr::Int(i32::MAX as i64, DType::I64), c(1));
    assert_eq!(e.s(big), "T.int64(2147483648)");
    // uint8: 250 + 10 = 4 (mod 256).
    let u = add(Expr::Int(250, DType::U8), Expr::Int(10, DType::U8));
    assert_eq!(e.s(u), "T.uint8(4)");
}

#[test]
fn division_by_zero_is_left_alone() {
    let e = env();
    assert_eq!(e.s(bin(BinOp::FloorDiv, c(7), c(0))), "7 // 0");
    assert_eq!(e.s(bin(BinOp::FloorMod, v(e.i), c(0))), "i % 0");
    assert_eq!(e.s(bin(BinOp::Div, add(c(1), c(2)), c(0))), "3 / 0");
}

#[test]
fn float_folding_and_exact_identities() {
    let e = env();
    // 0.1f + 0.2f in f32 is 0.3f (0.30000001192092896 as f64).
    let s = e.s(add(Expr::f32(0.1), Expr::f32(0.2)));
    let want = Expr::Float((0.1f32 + 0.2f32) as f64, DType::F32);
    assert_eq!(s, print_expr(&e.f, &want));
    assert_eq!(e.s(mul(v(e.fl), Expr::f32(1.0))), "y");
    assert_eq!(e.s(sub(v(e.fl), Expr::f32(0.0))), "y");
    // Never x * 0 → 0 for floats (NaN, infinities, -0.0), nor x + 0.0 → x (-0.0).
    assert_eq!(e.s(mul(v(e.fl), Expr::f32(0.0))), "y * T.float32(0)");
    assert_eq!(e.s(add(v(e.fl), Expr::f32(0.0))), "y + T.float32(0)");
    assert_eq!(e.s(sub(v(e.fl), v(e.fl))), "y - y");
}

#[test]
fn identities_and_collection() {
    let e = env();
    let (i, j) = (v(e.i), v(e.j));
    assert_eq!(e.s(add(i.clone(), c(0))), "i");
    assert_eq!(e.s(mul(i.clone(), c(1))), "i");
    assert_eq!(e.s(mul(i.clone(), c(0))), "0");
    assert_eq!(e.s(sub(i.clone(), i.clone())), "0");
    // a*c1 + a*c2 → a*(c1+c2)
    assert_eq!(
        e.s(add(mul(i.clone(), c(3)), mul(i.clone(), c(4)))),
        "i * 7"
    );
    // constants to the right
    assert_eq!(e.s(add(c(5), i.clone())), "i + 5");
    assert_eq!(e.s(mul(c(5), i.clone())), "i * 5");
    // (x + c1) + c2
    assert_eq!(e.s(add(add(i.clone(), c(2)), c(3))), "i + 5");
    assert_eq!(e.s(sub(add(i.clone(), c(2)), c(3))), "i - 1");
    // (x + c) - x → c
    assert_eq!(e.s(sub(add(i.clone(), c(7)), i.clone())), "7");
    // (a + b) - a → b
    assert_eq!(e.s(sub(add(i.clone(), j.clone()), i.clone())), "j");
    // nested flattening, distribution of constants
    let x = sub(
        add(mul(add(i.clone(), c(1)), c(4)), j.clone()),
        add(mul(i.clone(), c(4)), c(4)),
    );
    assert_eq!(e.s(x), "j");
    // negative terms go after positive ones
    assert_eq!(e.s(add(sub(c(0), i.clone()), j.clone())), "j - i");
    assert_eq!(e.s(sub(c(3), i.clone())), "3 - i");
    assert_eq!(e.s(sub(c(-3), i.clone())), "-i - 3");
    assert_eq!(
        e.s(Expr::Unary(
            UnOp::Neg,
            Box::new(Expr::Unary(UnOp::Neg, Box::new(i.clone())))
        )),
        "i"
    );
}

#[test]
fn order_is_variables_then_loads() {
    let e = env();
    let ld = Expr::load(e.indptr, vec![v(e.i)]);
    assert_eq!(e.s(add(ld.clone(), v(e.j))), "j + indptr[i]");
    assert_eq!(e.s(add(v(e.j), ld)), "j + indptr[i]");
    // otherwise first appearance
    assert_eq!(e.s(add(v(e.j), v(e.i))), "j + i");
    assert_eq!(e.s(add(v(e.i), v(e.j))), "i + j");
}

#[test]
fn mixed_dtypes_keep_the_result_dtype() {
    let e = env();
    let x = v(e.x64);
    // x (int64) + 1 - x: the value is 1 as int64.
    let r = simplify(&e.f, &sub(add(x.clone(), c(1)), x.clone()));
    assert_eq!(r, Expr::Int(1, DType::I64));
    // i (int32) + x - x: i converted to int64.
    let r = simplify(&e.f, &sub(add(v(e.i), x.clone()), x.clone()));
    assert_eq!(r.dtype(&e.f), DType::I64);
    assert_eq!(print_expr(&e.f, &r), "T.Cast(\"int64\", i)");
    // int64 terms with small coefficients print plain literals
    assert_eq!(e.s(add(mul(x.clone(), c(2)), x.clone())), "x * 3");
}

#[test]
fn floordiv_floormod_with_bounds() {
    let e = env();
    let a = e.small();
    let (i, j) = (v(e.i), v(e.j));
    assert_eq!(e.sa(&a, bin(BinOp::FloorDiv, j.clone(), c(4))), "0");
    assert_eq!(e.sa(&a, bin(BinOp::FloorMod, j.clone(), c(4))), "j");
    assert_eq!(
        e.sa(&a, bin(BinOp::FloorDiv, add(j.clone(), c(4)), c(4))),
        "1"
    );
    assert_eq!(
        e.sa(&a, bin(BinOp::FloorMod, add(j.clone(), c(4)), c(4))),
        "j"
    );
    // (x*c) // c → x needs x*c not to wrap: not for an unbounded int32 n (n = 2^29 gives
    // n*8 = -2^32 → -2^29), yes for bounded i, or assuming no overflow.
    assert_eq!(
        e.s(bin(BinOp::FloorDiv, mul(v(e.n), c(8)), c(8))),
        "n * 8 // 8"
    );
    assert_eq!(
        e.sa(&a, bin(BinOp::FloorDiv, mul(i.clone(), c(8)), c(8))),
        "i"
    );
    let mut no_ovf = Analyzer::new();
    no_ovf.assume_no_overflow(true);
    assert_eq!(
        e.sa(&no_ovf, bin(BinOp::FloorDiv, mul(v(e.n), c(8)), c(8))),
        "n"
    );
    // % by a power of two is exact even when the sum wraps (2^32 is a multiple of 8).
    assert_eq!(e.s(bin(BinOp::FloorMod, mul(v(e.n), c(8)), c(8))), "0");
    assert_eq!(
        e.s(bin(BinOp::FloorMod, mul(v(e.n), c(6)), c(6))),
        "n * 6 % 6"
    );
    assert_eq!(
        e.sa(&no_ovf, bin(BinOp::FloorMod, mul(v(e.n), c(6)), c(6))),
        "0"
    );
    // (x*c + y) // c → x when 0 <= y < c; % → y
    let xy = add(mul(i.clone(), c(4)), j.clone());
    assert_eq!(e.sa(&a, bin(BinOp::FloorDiv, xy.clone(), c(4))), "i");
    assert_eq!(e.sa(&a, bin(BinOp::FloorMod, xy.clone(), c(4))), "j");
    // without bounds on y: split off the multiple
    let ny = add(mul(v(e.n), c(4)), v(e.m));
    assert_eq!(
        e.s(bin(BinOp::FloorDiv, ny.clone(), c(4))),
        "(n * 4 + m) // 4"
    );
    assert_eq!(
        e.sa(&no_ovf, bin(BinOp::FloorDiv, ny.clone(), c(4))),
        "n + m // 4"
    );
    assert_eq!(e.s(bin(BinOp::FloorMod, ny.clone(), c(4))), "m % 4");
    let ny5 = add(add(mul(v(e.n), c(5)), v(e.m)), c(7));
    assert_eq!(
        e.sa(&no_ovf, bin(BinOp::FloorMod, ny5, c(5))),
        "(m + 2) % 5"
    );
    // unknown x: left alone
    assert_eq!(e.s(bin(BinOp::FloorDiv, v(e.n), c(4))), "n // 4");
    assert_eq!(e.s(bin(BinOp::FloorMod, v(e.n), c(1))), "0");
    // truncating division of a non-negative bounded value
    assert_eq!(e.sa(&a, bin(BinOp::Div, j, c(4))), "0");
}

#[test]
fn min_max_comparisons_select() {
    let e = env();
    let a = e.small();
    let (i, j, n) = (v(e.i), v(e.j), v(e.n));
    assert_eq!(e.sa(&a, bin(BinOp::Min, i.clone(), c(10))), "i");
    assert_eq!(e.sa(&a, bin(BinOp::Max, i.clone(), c(10))), "10");
    assert_eq!(e.sa(&a, bin(BinOp::Min, i.clone(), c(5))), "T.min(i, 5)");
    // n + 1 wraps for n = 2^31 - 1: only under the no-overflow assumption.
    let mx = bin(BinOp::Max, add(n.clone(), c(1)), n.clone());
    assert_eq!(e.s(mx.clone()), "T.max(n + 1, n)");
    let mut no_ovf = Analyzer::new();
    no_ovf.assume_no_overflow(true);
    assert_eq!(e.sa(&no_ovf, mx), "n + 1");
    assert_eq!(e.s(bin(BinOp::Min, n.clone(), n.clone())), "n");
    assert_eq!(e.sa(&a, bin(BinOp::Lt, i.clone(), c(10))), "True");
    assert_eq!(e.sa(&a, bin(BinOp::Ge, i.clone(), c(0))), "True");
    assert_eq!(e.sa(&a, bin(BinOp::Gt, j.clone(), c(3))), "False");
    assert_eq!(e.sa(&a, bin(BinOp::Lt, i.clone(), c(9))), "i < 9");
    let sel = Expr::Select(
        Box::new(bin(BinOp::Lt, j.clone(), c(4))),
        Box::new(i.clone()),
        Box::new(c(0)),
    );
    assert_eq!(e.sa(&a, sel), "i");
    let same = Expr::Select(Box::new(v(e.b)), Box::new(i.clone()), Box::new(i.clone()));
    assert_eq!(e.s(same), "i");
}

#[test]
fn symbolic_ranges() {
    let e = env();
    let (i, j, n) = (v(e.i), v(e.j), v(e.n));
    let mut a = Analyzer::new();
    a.bind_range(e.i, &c(0), &n);
    assert_eq!(
        a.prove(&e.f, &bin(BinOp::Lt, i.clone(), n.clone())),
        Some(true)
    );
    assert_eq!(
        a.prove(&e.f, &bin(BinOp::Ge, i.clone(), n.clone())),
        Some(false)
    );
    assert_eq!(
        a.prove(&e.f, &bin(BinOp::Le, add(i.clone(), c(1)), n.clone())),
        Some(true)
    );
    assert_eq!(
        a.prove(&e.f, &bin(BinOp::Lt, add(i.clone(), c(1)), n.clone())),
        None
    );
    // j in [0, indptr[i+1] - indptr[i]), indptr values in [0, m]
    let lo = Expr::load(e.indptr, vec![i.clone()]);
    let hi = Expr::load(e.indptr, vec![add(i.clone(), c(1))]);
    a.bind_range(e.j, &c(0), &sub(hi.clone(), lo.clone()));
    a.bind_buffer_domain(e.indptr, &c(0), &v(e.m));
    let cond = bin(BinOp::Lt, j.clone(), sub(hi.clone(), lo.clone()));
    assert_eq!(a.prove(&e.f, &cond), Some(true));
    let off = add(lo.clone(), j.clone());
    assert_eq!(
        a.prove(&e.f, &bin(BinOp::Lt, off.clone(), hi.clone())),
        Some(true)
    );
    assert_eq!(
        a.prove(&e.f, &bin(BinOp::Le, off.clone(), v(e.m))),
        Some(true)
    );
    assert_eq!(a.prove(&e.f, &bin(BinOp::Ge, lo.clone(), c(0))), Some(true));
    assert!(a.can_prove_equal(
        &e.f,
        &add(off.clone(), c(1)),
        &add(c(1), add(j.clone(), lo))
    ));
    assert!(!a.can_prove_equal(&e.f, &off, &hi));
}

#[test]
fn const_bounds() {
    let e = env();
    let a = e.small();
    let (i, j) = (v(e.i), v(e.j));
    assert_eq!(
        a.const_bounds(&e.f, &add(mul(i.clone(), c(4)), j.clone())),
        Some((0, 39))
    );
    assert_eq!(
        a.const_bounds(&e.f, &sub(j.clone(), i.clone())),
        Some((-9, 3))
    );
    assert_eq!(
        a.const_bounds(&e.f, &bin(BinOp::FloorMod, i.clone(), c(3))),
        Some((0, 2))
    );
    assert_eq!(
        a.const_bounds(&e.f, &bin(BinOp::FloorDiv, i.clone(), c(3))),
        Some((0, 3))
    );
    assert_eq!(
        a.const_bounds(&e.f, &bin(BinOp::Max, i.clone(), c(5))),
        Some((5, 9))
    );
    // An unknown int32 has the full int32 range; nothing with the no-overflow assumption.
    let full = Some((i32::MIN as i64, i32::MAX as i64));
    assert_eq!(a.const_bounds(&e.f, &v(e.n)), full);
    let mut no_ovf = Analyzer::new();
    no_ovf.assume_no_overflow(true);
    assert_eq!(no_ovf.const_bounds(&e.f, &v(e.n)), None);
    let mut b = Analyzer::new();
    b.bind_buffer_domain(e.indptr, &c(0), &c(100));
    assert_eq!(
        b.const_bounds(&e.f, &Expr::load(e.indptr, vec![v(e.n)])),
        Some((0, 100))
    );
}

/// `k * (x // k) + x % k` is `x`, for any `x` (unbounded, wrapping too) and any nonzero
/// constant `k`; the same with a common factor. Other coefficients stay.
#[test]
fn a_quotient_and_remainder_rebuild_the_dividend() {
    let e = env();
    let (n, m) = (v(e.n), v(e.m));
    let x = add(mul(n.clone(), c(3)), m.clone());
    let q = bin(BinOp::FloorDiv, x.clone(), c(4));
    let r = bin(BinOp::FloorMod, x.clone(), c(4));
    assert_eq!(e.s(add(mul(q.clone(), c(4)), r.clone())), "n * 3 + m");
    assert_eq!(
        e.s(add(mul(q.clone(), c(8)), mul(r.clone(), c(2)))),
        "n * 6 + m * 2"
    );
    assert_eq!(
        e.s(sub(
            add(add(mul(q.clone(), c(4)), r.clone()), c(1)),
            m.clone()
        )),
        "n * 3 + 1"
    );
    let neg_q = bin(BinOp::FloorDiv, n.clone(), c(-3));
    let neg_r = bin(BinOp::FloorMod, n.clone(), c(-3));
    assert_eq!(e.s(add(mul(neg_q, c(-3)), neg_r)), "n");
    assert_eq!(
        e.s(add(mul(q, c(2)), r)),
        "(n * 3 + m) // 4 * 2 + (n * 3 + m) % 4"
    );
}

/// `e = m * q + s`: the bounds of `s` once the multiples of `m` are taken away, whatever the
/// variables under them (even an unbounded `n`).
#[test]
fn remainder_bounds() {
    let e = env();
    let a = e.small();
    let (i, j, n) = (v(e.i), v(e.j), v(e.n));
    let rb = |x: Expr, m| a.remainder_bounds(&e.f, &x, m);
    assert_eq!(rb(add(mul(i.clone(), c(32)), j.clone()), 32), Some((0, 3)));
    // The constant's nearest multiple goes too.
    assert_eq!(
        rb(add(add(mul(i.clone(), c(32)), j.clone()), c(33)), 32),
        Some((1, 4))
    );
    assert_eq!(
        rb(
            sub(add(mul(i.clone(), c(64)), j.clone()), mul(n.clone(), c(32))),
            32
        ),
        Some((0, 3))
    );
    // A coefficient that is not a multiple stays.
    assert_eq!(
        rb(add(mul(i.clone(), c(31)), j.clone()), 32),
        Some((0, 282))
    );
    assert_eq!(rb(i, 0), None);
}

#[test]
fn logic_and_casts() {
    let e = env();
    let p = v(e.b);
    assert_eq!(e.s(bin(BinOp::And, p.clone(), Expr::Bool(true))), "p");
    assert_eq!(e.s(bin(BinOp::And, p.clone(), Expr::Bool(false))), "False");
    assert_eq!(e.s(bin(BinOp::Or, Expr::Bool(true), p.clone())), "True");
    assert_eq!(
        e.s(Expr::Unary(UnOp::Not, Box::new(Expr::Bool(true)))),
        "False"
    );
    assert_eq!(
        e.s(Expr::Unary(
            UnOp::Not,
            Box::new(bin(BinOp::Lt, v(e.n), v(e.m)))
        )),
        "n >= m"
    );
    assert_eq!(e.s(Expr::Cast(DType::I8, Box::new(c(300)))), "T.int8(44)");
    assert_eq!(e.s(Expr::Cast(DType::F32, Box::new(c(3)))), "T.float32(3)");
    assert_eq!(e.s(Expr::Cast(DType::I32, Box::new(Expr::f32(-2.7)))), "-2");
    assert_eq!(e.s(Expr::Cast(DType::I32, Box::new(v(e.n)))), "n");
}

/// Expressions as the lowering passes build them (SPEC §3.3/§3.4): offsets through `indptr`.
#[test]
fn lowering_offsets() {
    let e = env();
    let (i, j) = (v(e.i), v(e.j));
    let ptr = |x: Expr| Expr::load(e.indptr, vec![x]);
    // off(J) = J_indptr[off(I)] + pos_J prints position first, as in the RFC's stage III.
    assert_eq!(e.s(add(ptr(i.clone()), j.clone())), "j + indptr[i]");
    // The extent of a varied axis stays as written.
    let ext = sub(ptr(add(i.clone(), c(1))), ptr(i.clone()));
    assert_eq!(e.s(ext.clone()), "indptr[i + 1] - indptr[i]");
    // Offsets cancel: (indptr[i] + j) - indptr[i] → j; nested flattening of index sums.
    assert_eq!(
        e.s(sub(add(ptr(i.clone()), j.clone()), ptr(i.clone()))),
        "j"
    );
    let k = add(mul(add(ptr(add(c(1), i.clone())), j.clone()), c(4)), c(2));
    assert_eq!(e.s(k), "j * 4 + indptr[i + 1] * 4 + 2");
    // Block offsets: (off * 4 + r) // 4 and % 4 with r in [0, 4) and a bounded offset.
    let mut a = Analyzer::new();
    a.bind_range(e.j, &c(0), &c(4));
    a.bind_buffer_domain(e.indptr, &c(0), &c(1000));
    let flat = add(mul(ptr(i.clone()), c(4)), j.clone());
    assert_eq!(
        e.sa(&a, bin(BinOp::FloorDiv, flat.clone(), c(4))),
        "indptr[i]"
    );
    assert_eq!(e.sa(&a, bin(BinOp::FloorMod, flat, c(4))), "j");
    // `indptr[i] + j < indptr[i + 1]` for j in [0, indptr[i + 1] - indptr[i]), even though
    // indptr's domain is symbolic ([0, m]) and the sum could overflow by intervals alone.
    let mut b = Analyzer::new();
    b.bind_range(e.j, &c(0), &ext);
    b.bind_buffer_domain(e.indptr, &c(0), &v(e.m));
    let lt = bin(
        BinOp::Lt,
        add(ptr(i.clone()), j.clone()),
        ptr(add(i.clone(), c(1))),
    );
    assert_eq!(e.sa(&b, lt), "True");
    let guard = Expr::Select(
        Box::new(bin(BinOp::Lt, j.clone(), ext.clone())),
        Box::new(ptr(add(ptr(i.clone()), j.clone()))),
        Box::new(c(-1)),
    );
    assert_eq!(e.sa(&b, guard), "indptr[j + indptr[i]]");
}
