//! Property tests: on random integer expressions and random in-range variable values, the
//! simplified expression evaluates to the same value (dtype included) as the original, and
//! simplification is idempotent. The evaluator here is independent of the simplifier's rewrite
//! rules: it shares with the folder only the operators' meaning on constants
//! (`sparsetir_ir::scalar`, the reference evaluator's arithmetic).

use proptest::prelude::*;
use sparsetir_arith::{simplify, Analyzer};
use sparsetir_ir::printer::print_expr;
use sparsetir_ir::scalar::{binary, unary, Value};
use sparsetir_ir::{
    BinOp, Buffer, BufferDecl, BufferId, BufferShape, DType, Expr, PrimFunc, Span, UnOp, VarId,
};

const VAR_TYPES: [DType; 5] = [DType::I32, DType::I32, DType::I32, DType::I64, DType::U32];
const ARR_LEN: usize = 6;

fn func() -> (PrimFunc, Vec<VarId>, BufferId) {
    let mut f = PrimFunc::new("p");
    let vars = VAR_TYPES
        .iter()
        .enumerate()
        .map(|(k, d)| f.add_var(format!("v{k}"), *d))
        .collect();
    let arr = f.buffers.append(Buffer {
        name: "arr".into(),
        decl: BufferDecl::Alloc,
        shape: BufferShape::Dense(vec![Expr::int(ARR_LEN as i64)]),
        dtype: DType::I32,
        scope: "global".into(),
        strides: vec![],
        extra_storage: None,
        default_value: None,
        span: Span::default(),
    });
    (f, vars, arr)
}

/// Variable values, array contents; `None` = evaluation error (division by zero, bad index).
struct Env<'a> {
    f: &'a PrimFunc,
    vals: Vec<Value>,
    arr: Vec<i128>,
}

impl Env<'_> {
    fn eval(&self, e: &Expr) -> Option<Value> {
        Some(match e {
            Expr::Int(v, d) => Value::from_i128(*v as i128, *d),
            Expr::Bool(b) => Value::Bool(*b),
            Expr::Var(v) => self.vals[v.index()],
            Expr::Binary(op, a, b) => {
                let x = self.eval(a)?;
                match op {
                    BinOp::And if !x.truthy() => return Some(Value::Bool(false)),
                    BinOp::Or if x.truthy() => return Some(Value::Bool(true)),
                    _ => {}
                }
                binary(*op, x, self.eval(b)?).ok()?
            }
            Expr::Unary(op, a) => unary(*op, self.eval(a)?),
            Expr::Select(c, a, b) => {
                let dt = e.dtype(self.f);
                let v = if self.eval(c)?.truthy() {
                    self.eval(a)?
                } else {
                    self.eval(b)?
                };
                v.cast(dt).ok()?
            }
            Expr::Cast(d, a) => self.eval(a)?.cast(*d).ok()?,
            Expr::Load { indices, .. } => {
                let i = self.eval(&indices[0])?.as_i128();
                let i = usize::try_from(i).ok().filter(|i| *i < ARR_LEN)?;
                Value::Int(self.arr[i], DType::I32)
            }
            _ => return None,
        })
    }
}

fn leaf(vars: Vec<VarId>, big: bool) -> impl Strategy<Value = Expr> {
    let big_weight = if big { 1 } else { 0 };
    prop_oneof![
        4 => (0..vars.len()).prop_map(move |k| Expr::var(vars[k])),
        3 => (-6i64..20).prop_map(Expr::int),
        big_weight => prop_oneof![
            Just(i32::MAX as i64),
            Just(i32::MIN as i64),
            Just(1 << 20),
            Just(-(1 << 16)),
        ]
        .prop_map(Expr::int),
        1 => (-4i64..9).prop_map(|v| Expr::Int(v, DType::I64)),
        1 => (0i64..9).prop_map(|v| Expr::Int(v, DType::U32)),
    ]
}

fn expr(vars: Vec<VarId>, arr: BufferId, big: bool) -> impl Strategy<Value = Expr> {
    const OPS: [BinOp; 8] = [
        BinOp::Add,
        BinOp::Sub,
        BinOp::Mul,
        BinOp::FloorDiv,
        BinOp::FloorMod,
        BinOp::Div,
        BinOp::Min,
        BinOp::Max,
    ];
    const CMPS: [BinOp; 6] = [
        BinOp::Lt,
        BinOp::Le,
        BinOp::Gt,
        BinOp::Ge,
        BinOp::Eq,
        BinOp::Ne,
    ];
    leaf(vars, big).prop_recursive(5, 40, 3, move |inner| {
        prop_oneof![
            6 => (0..OPS.len(), inner.clone(), inner.clone())
                .prop_map(|(o, a, b)| Expr::binary(OPS[o], a, b)),
            // Divisions mostly by small positive constants, as in index arithmetic.
            3 => (0..3usize, inner.clone(), 1i64..9).prop_map(|(o, a, c)| {
                let op = [BinOp::FloorDiv, BinOp::FloorMod, BinOp::Div][o];
                Expr::binary(op, a, Expr::int(c))
            }),
            3 => (inner.clone(), 2i64..9, inner.clone())
                .prop_map(|(a, c, b)| Expr::add(Expr::mul(a, Expr::int(c)), b)),
            1 => inner.clone().prop_map(|a| Expr::Unary(UnOp::Neg, Box::new(a))),
            1 => inner.clone().prop_map(|a| Expr::Cast(DType::I64, Box::new(a))),
            1 => inner.clone().prop_map(move |a| Expr::load(arr, vec![a])),
            2 => (0..CMPS.len(), inner.clone(), inner.clone(), inner.clone(), inner.clone())
                .prop_map(|(o, a, b, x, y)| {
                    let c = Expr::binary(CMPS[o], a, b);
                    Expr::Select(Box::new(c), Box::new(x), Box::new(y))
                }),
            1 => (inner.clone(), inner.clone(), inner.clone(), any::<bool>())
                .prop_map(|(a, b, x, and)| {
                    let op = if and { BinOp::And } else { BinOp::Or };
                    let c = Expr::binary(op, Expr::binary(BinOp::Lt, a, b), Expr::binary(BinOp::Ge, b_clone(&x), Expr::int(0)));
                    Expr::Select(Box::new(c), Box::new(x), Box::new(Expr::int(1)))
                }),
        ]
    })
}

fn b_clone(e: &Expr) -> Expr {
    e.clone()
}

/// Per variable: range minimum, extent and where the value falls inside the range.
fn ranges() -> impl Strategy<Value = Vec<(i64, i64, i64)>> {
    proptest::collection::vec((-8i64..12, 1i64..20, 0i64..1000), VAR_TYPES.len())
}

fn check(f: &PrimFunc, an: &Analyzer, e: &Expr, env: &Env) -> Result<(), TestCaseError> {
    let s = an.simplify(f, e);
    prop_assert_eq!(
        s.dtype(f),
        e.dtype(f),
        "dtype changed: {}",
        print_expr(f, &s)
    );
    if let Some(want) = env.eval(e) {
        let got = env.eval(&s);
        prop_assert_eq!(
            got,
            Some(want),
            "\n  original:   {}\n  simplified: {}",
            print_expr(f, e),
            print_expr(f, &s)
        );
    }
    let again = an.simplify(f, &s);
    prop_assert_eq!(
        &again,
        &s,
        "not idempotent: {} -> {}",
        print_expr(f, &s),
        print_expr(f, &again)
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    /// Sound with variable ranges and the array's domain known to the analyzer.
    #[test]
    fn sound_with_ranges(
        e in { let (_, vars, arr) = func(); expr(vars, arr, true) },
        rs in ranges(),
        arr_vals in proptest::collection::vec(0i128..50, ARR_LEN),
    ) {
        let (f, vars, arr) = func();
        let mut an = Analyzer::new();
        let mut vals = Vec::new();
        for (k, (min, ext, at)) in rs.iter().enumerate() {
            let min = if VAR_TYPES[k].is_uint() { min.abs() } else { *min };
            an.bind_range(vars[k], &Expr::int(min), &Expr::int(*ext));
            vals.push(Value::from_i128((min + at % ext) as i128, VAR_TYPES[k]));
        }
        an.bind_buffer_domain(arr, &Expr::int(0), &Expr::int(49));
        let env = Env { f: &f, vals, arr: arr_vals };
        check(&f, &an, &e, &env)?;
    }

    /// Sound without any knowledge, on arbitrary (also extreme) values.
    #[test]
    fn sound_without_knowledge(
        e in { let (_, vars, arr) = func(); expr(vars, arr, true) },
        raw in proptest::collection::vec(prop_oneof![
            3 => -20i128..20,
            1 => any::<i64>().prop_map(|v| v as i128),
        ], VAR_TYPES.len()),
        arr_vals in proptest::collection::vec(any::<i32>().prop_map(|v| v as i128), ARR_LEN),
    ) {
        let (f, _, _) = func();
        let vals = raw.iter().enumerate().map(|(k, v)| Value::from_i128(*v, VAR_TYPES[k])).collect();
        let env = Env { f: &f, vals, arr: arr_vals };
        let an = Analyzer::new();
        check(&f, &an, &e, &env)?;
        prop_assert_eq!(simplify(&f, &e), an.simplify(&f, &e));
    }

    /// With the no-overflow assumption: sound where nothing overflows (small values, small
    /// constants, shallow expressions).
    #[test]
    fn sound_assuming_no_overflow(
        e in { let (_, vars, arr) = func(); expr(vars, arr, false) },
        rs in ranges(),
        arr_vals in proptest::collection::vec(0i128..50, ARR_LEN),
    ) {
        let (f, vars, arr) = func();
        let mut an = Analyzer::new();
        an.assume_no_overflow(true);
        let mut vals = Vec::new();
        // Only some variables get a range; the others are unknown to the analyzer.
        for (k, (min, ext, at)) in rs.iter().enumerate() {
            let min = if VAR_TYPES[k].is_uint() { min.abs() } else { *min };
            if k % 2 == 0 {
                an.bind_range(vars[k], &Expr::int(min), &Expr::int(*ext));
            }
            vals.push(Value::from_i128((min + at % ext) as i128, VAR_TYPES[k]));
        }
        an.bind_buffer_domain(arr, &Expr::int(0), &Expr::int(49));
        let env = Env { f: &f, vals, arr: arr_vals };
        check(&f, &an, &e, &env)?;
    }
}
