//! The dependence checks against enumeration: random stores (and reads) of `Y` under a nest of
//! two loops, `i` outside and `j` inside, both spatial (`"SS"`) or `i` a reduction updating
//! `Y` in place (`"RS"`). Where `parallel(i)` is taken, going through every `(i, j)` finds no
//! element that one iteration of `i` writes and another touches. The
//! index forms cover every case of the proof: a step with an inner span, offsets that
//! interleave (`32 * j + i`), `//` and `%` alone, and a `//`, `%` pair read back as one index,
//! with the iterators as they are or widened to int64. On the same nests, where `reorder(j, i)`
//! is taken no two such iterations change order (a reduction's updates of one element aside),
//! and the interpreter computes the same `Y`; `sparse_reorder(["J", "I"])` on the stage-I
//! iteration answers the same.

use crate::common;

use std::collections::{HashMap, HashSet};

use sparsetir_ir::{DType, PrimFunc, Stage};
use sparsetir_schedule::{ErrorKind, Schedule};

use common::*;

/// `a * i + b * j + c` (`c` keeps it non-negative), then `// d` or `% d` or neither.
#[derive(Clone, Copy, Debug)]
struct Index {
    a: i64,
    b: i64,
    c: i64,
    op: Op,
    /// `i` and `j` widened to int64 (`T.Cast("int64", i)`).
    wide: bool,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Plain,
    Div(i64),
    Mod(i64),
    /// A 2-D element `[e // d, e % d]` (it stands for `e`).
    Pair(i64),
}

impl Index {
    /// Steps and spans around the interesting edges: 0, 1, the inner extent, the outer.
    fn random(rng: &mut Rng, ni: i64, nj: i64) -> Index {
        let pick = |rng: &mut Rng, n: i64| match rng.range(0, 3) {
            0 => rng.range(-2, 2),
            1 => n + rng.range(-1, 1),
            _ => rng.range(-3, 2 * n + 1),
        };
        let a = pick(rng, nj);
        let b = pick(rng, ni);
        let d = rng.range(1, 5);
        let op = match rng.range(0, 5) {
            0 | 1 => Op::Plain,
            2 => Op::Div(d),
            3 => Op::Mod(d),
            _ => Op::Pair(d),
        };
        Index::with(a, b, op, ni, nj)
    }

    /// The forms schedules make: tiles (`s * nj * i + t * j`, `t <= s`), interleaved offsets
    /// (`s * i + t * s * ni * j`) and a fused loop's pair (`(nj * i + j) // nj`, `% nj`).
    fn schedule_like(rng: &mut Rng, ni: i64, nj: i64) -> Index {
        let s = rng.range(1, 3);
        match rng.range(0, 2) {
            0 => Index::with(s * nj, rng.range(1, s), Op::Plain, ni, nj),
            1 => Index::with(s, s * ni * rng.range(1, 2), Op::Plain, ni, nj),
            _ => Index::with(nj, 1, Op::Pair(nj), ni, nj),
        }
    }

    /// `c` keeps the index non-negative.
    fn with(a: i64, b: i64, op: Op, ni: i64, nj: i64) -> Index {
        let c = a.min(0).abs() * (ni - 1) + b.min(0).abs() * (nj - 1);
        Index {
            a,
            b,
            c,
            op,
            wide: false,
        }
    }

    fn base(&self) -> String {
        let (i, j) = if self.wide {
            ("T.Cast(\"int64\", i)", "T.Cast(\"int64\", j)")
        } else {
            ("i", "j")
        };
        format!("({}) * {i} + ({}) * {j} + {}", self.a, self.b, self.c)
    }

    fn text(&self) -> String {
        match self.op {
            Op::Plain => self.base(),
            Op::Div(d) => format!("({}) // {d}", self.base()),
            Op::Mod(d) => format!("({}) % {d}", self.base()),
            Op::Pair(d) => format!("({b}) // {d}, ({b}) % {d}", b = self.base()),
        }
    }

    /// The element at `(i, j)`, as a flat number in `Y`'s shape.
    fn at(&self, i: i64, j: i64, width: i64) -> i64 {
        let e = self.a * i + self.b * j + self.c;
        match self.op {
            Op::Plain => e,
            Op::Div(d) => e.div_euclid(d),
            Op::Mod(d) => e.rem_euclid(d),
            Op::Pair(d) => e.div_euclid(d) * width + e.rem_euclid(d),
        }
    }
}

/// Whether two iterations of `i` touch one element, one of them writing it.
fn conflict(ni: i64, nj: i64, w: &Index, r: Option<&Index>, width: i64) -> bool {
    let mut writer: HashMap<i64, i64> = HashMap::new();
    let mut touched: HashMap<i64, HashSet<i64>> = HashMap::new();
    for i in 0..ni {
        for j in 0..nj {
            let e = w.at(i, j, width);
            if writer.insert(e, i).is_some_and(|o| o != i) {
                return true;
            }
            touched.entry(e).or_default().insert(i);
            if let Some(r) = r {
                touched.entry(r.at(i, j, width)).or_default().insert(i);
            }
        }
    }
    writer
        .iter()
        .any(|(e, i)| touched.get(e).is_some_and(|s| s.iter().any(|o| o != i)))
}

/// One random nest of the tests: `Y[w] = (Y[r] or nothing) + X[i]` under `i < ni`, `j < nj`,
/// and its script.
struct Nest {
    ni: i64,
    nj: i64,
    /// A form a schedule makes, without reads: the checks must tell exactly there.
    like: bool,
    /// `i` declared a reduction updating `Y` in place.
    reduce: bool,
    w: Index,
    r: Option<Index>,
    /// `Y`'s second extent (1 unless the store is a pair).
    width: i64,
    /// `Y`'s first extent.
    len: i64,
    src: String,
}

impl Nest {
    /// Case `case` (every other one schedule-like, every other pair a reduction), `i` below
    /// `max_ni`; with `scaled`, a spatial read is halved (so that order shows in the result).
    fn random(rng: &mut Rng, case: usize, max_ni: i64, scaled: bool) -> Nest {
        let ni = rng.range(1, max_ni);
        let nj = rng.range(1, 6);
        let like = case.is_multiple_of(2);
        let mut w = if like {
            Index::schedule_like(rng, ni, nj)
        } else {
            Index::random(rng, ni, nj)
        };
        w.wide = rng.range(0, 2) == 0;
        let reduce = case % 4 >= 2;
        // The reads use the store's layout (1-D, or the pair's 2-D).
        let r = if reduce {
            Some(w)
        } else {
            (!like && rng.range(0, 2) == 0).then(|| {
                let mut r = Index::random(rng, ni, nj);
                r.op = match (w.op, r.op) {
                    (Op::Pair(d), _) => Op::Pair(d),
                    (_, Op::Pair(_)) => Op::Plain,
                    (_, o) => o,
                };
                r
            })
        };
        let max = |x: &Index| x.a.abs() * (ni - 1) + x.b.abs() * (nj - 1) + 2 * x.c + 1;
        let len = max(&w).max(r.as_ref().map_or(0, max)) + 1;
        let (decl, width) = match w.op {
            Op::Pair(d) => (format!("K = T.sp.dense_fixed({len})\n    D = T.sp.dense_fixed({d})\n    Y = T.sp.match_buffer(y, (K, D), \"float32\")"), d),
            _ => (format!("K = T.sp.dense_fixed({len})\n    Y = T.sp.match_buffer(y, (K,), \"float32\")"), 1),
        };
        let rhs = match &r {
            Some(r) if scaled && !reduce => format!("Y[{}] * 0.5 + X[i]", r.text()),
            Some(r) => format!("Y[{}] + X[i]", r.text()),
            None => "X[i]".to_string(),
        };
        let src = format!(
            r#"@T.prim_func
def f(x: T.handle, y: T.handle) -> None:
    T.func_attr({{"global_symbol": "main", "tir.noalias": True, "sparse_tir_level": 2}})
    I = T.sp.dense_fixed({ni})
    J = T.sp.dense_fixed({nj})
    {decl}
    X = T.sp.match_buffer(x, (I,), "float32")
    with T.sp.iteration([I, J], "{kinds}", "it") as [i, j]:
        Y[{}] = {rhs}
"#,
            w.text(),
            kinds = if reduce { "RS" } else { "SS" },
        );
        Nest {
            ni,
            nj,
            like,
            reduce,
            w,
            r,
            width,
            len,
            src,
        }
    }
}

#[test]
fn a_parallel_loop_the_check_takes_never_meets_itself() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut taken, mut refused, mut true_conflicts) = (0, 0, 0);
    for case in 0..2000 {
        let Nest {
            ni,
            nj,
            like,
            reduce,
            w,
            r,
            width,
            src,
            ..
        } = Nest::random(&mut rng, case, 40, false);
        let f = lower_script(&src, Stage::III);
        let mut sch = Schedule::new(f).unwrap();
        let l = loops_of(&mut sch, "it0")[0];
        let meets = conflict(ni, nj, &w, r.as_ref(), width);
        true_conflicts += usize::from(meets);
        match sch.parallel(l) {
            Ok(()) => {
                assert!(!meets, "case {case}: taken, but iterations meet\n{src}");
                taken += 1;
            }
            // Forms the check decides exactly: those schedules make, and one store
            // `Y[a * i + b * j + c]` with nothing read back.
            Err(e) if (like || (!reduce && r.is_none() && w.op == Op::Plain)) && !meets => {
                panic!("case {case}: refused, apart: {e}\n{src}")
            }
            Err(e) => {
                let want = if reduce {
                    ErrorKind::ReductionLoop
                } else {
                    ErrorKind::DependencyViolation
                };
                assert_eq!(e.kind, want, "case {case}: {e}\n{src}");
                refused += 1;
            }
        }
    }
    // Both answers come up.
    assert!(
        taken > 500 && true_conflicts > 300,
        "taken {taken}, refused {refused}, conflicts {true_conflicts}"
    );
}

/// Whether running the nest as `j, i` instead of `i, j` puts two iterations that touch one
/// element, one of them writing it, in the other order: one of them is before the other in `i`
/// and after it in `j`.
fn order_flips(ni: i64, nj: i64, w: &Index, r: Option<&Index>, width: i64) -> bool {
    let mut touch: HashMap<i64, Vec<(i64, i64, bool)>> = HashMap::new();
    for i in 0..ni {
        for j in 0..nj {
            touch
                .entry(w.at(i, j, width))
                .or_default()
                .push((i, j, true));
            if let Some(r) = r {
                touch
                    .entry(r.at(i, j, width))
                    .or_default()
                    .push((i, j, false));
            }
        }
    }
    touch.values().any(|list| {
        list.iter().any(|&(i, j, wr)| {
            list.iter()
                .any(|&(i2, j2, wr2)| (wr || wr2) && i < i2 && j > j2)
        })
    })
}

/// `reorder(j, i)` on the same nests: where it is taken, no two iterations that touch one
/// element (one writing it) change order, unless they are a reduction's updates of one element
/// (`"RS"` with the store's index free of `i`); on the forms schedules make it is refused only
/// where some do. The reordered nest also computes what the nest did.
#[test]
fn a_reorder_the_check_takes_keeps_every_dependence() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let (mut taken, mut refused, mut flips) = (0, 0, 0);
    for case in 0..1500 {
        let Nest {
            ni,
            nj,
            like,
            reduce,
            w,
            r,
            width,
            len,
            src,
        } = Nest::random(&mut rng, case, 12, true);
        // A reduction's updates of one element commute where its store does not move with `i`
        // (the `+` of the update is what the reduction promises).
        let rhs_reduces =
            reduce && (0..nj).all(|j| (0..ni).all(|i| w.at(i, j, width) == w.at(0, j, width)));
        let f = lower_script(&src, Stage::III);
        let mut sch = Schedule::new(f.clone()).unwrap();
        let l = loops_of(&mut sch, "it0");
        let flipped = order_flips(ni, nj, &w, r.as_ref(), width);
        flips += usize::from(flipped);
        let got = sch.reorder(&[l[1], l[0]]);
        // `sparse_reorder` answers the same in coordinate space.
        let mut sparse = Schedule::new(lower_script(&src, Stage::I)).unwrap();
        let sp = sparse.get_sparse_iteration("it").unwrap();
        let in_coordinates = sparse.sparse_reorder(sp, &["J", "I"]);
        assert_eq!(
            got.is_ok(),
            in_coordinates.is_ok(),
            "case {case}: reorder {got:?}, sparse_reorder {in_coordinates:?}\n{src}"
        );
        match got {
            Ok(()) => {
                assert!(
                    !flipped || rhs_reduces,
                    "case {case}: taken, but two dependent iterations change order\n{src}"
                );
                if !rhs_reduces {
                    same_on_random_inputs(&f, sch.func(), ni, len, width, case);
                }
                taken += 1;
            }
            Err(e) if like && !flipped => {
                panic!("case {case}: refused, no order flips: {e}\n{src}")
            }
            Err(e) => {
                assert_eq!(
                    e.kind,
                    ErrorKind::DependencyViolation,
                    "case {case}: {e}\n{src}"
                );
                assert!(e.message.contains("element of `Y"), "{e}");
                refused += 1;
            }
        }
    }
    assert!(
        taken > 400 && refused > 200 && flips > 200,
        "taken {taken}, refused {refused}, flips {flips}"
    );
}

/// `a` and `b` leave the same `Y` from one random `X` and `Y` (the interpreter, exact: products
/// by 0.5 and sums of small integers).
fn same_on_random_inputs(a: &PrimFunc, b: &PrimFunc, ni: i64, len: i64, width: i64, case: usize) {
    use sparsetir_eval::ArgValue;
    use sparsetir_formats::Tensor;
    let mut rng = Rng(0x51_7cc1_b727_220a ^ case as u64);
    let x: Vec<f64> = (0..ni).map(|_| rng.range(-8, 8) as f64).collect();
    let y: Vec<f64> = (0..len * width).map(|_| rng.range(-8, 8) as f64).collect();
    let go = |f: &PrimFunc| {
        let mut args = HashMap::new();
        let array = |v: &[f64]| ArgValue::Array(Tensor::from_f64(DType::F32, v).unwrap());
        args.insert("x".to_string(), array(&x));
        args.insert("y".to_string(), array(&y));
        sparsetir_eval::run_func(f, &mut args).expect("runs");
        match &args["y"] {
            ArgValue::Array(t) => t.to_f64_vec(),
            _ => unreachable!(),
        }
    };
    assert_eq!(
        go(a),
        go(b),
        "case {case}: the reordered nest computes another Y"
    );
}
