//! `fold_zero_fill` (stage I): an output first filled with a constant by one iteration, then
//! reduced into by others, gets that constant as the init of each reduction instead, and the
//! fill goes — one pass over the output fewer (on the GPU, one launch fewer: a hyb SpMM's
//! buckets store their sums instead of adding them to a zeroed `C`).
//!
//! **Valid only where the reductions together reach every element of the output, each at
//! exactly one spatial point of one iteration.** That is a fact about the data the caller
//! vouches for (a hyb whose bucket rows hold every matrix row exactly once:
//! `Hyb::rows_once` in the formats library); elsewhere an element two iterations reach keeps
//! only the last one's sum, and an element none reaches keeps what it held. The pass checks the
//! shapes it relies on:
//!
//! - the fill is a top-level iteration over exactly the output's axes, all spatial, with no
//!   init, whose body is one store of a constant at its iterators in order;
//! - every other top-level statement that touches the output comes after the fill and is an
//!   iteration with a reduction axis and no init whose body is one store into the output,
//!   `X[idx] = f(X[idx], ...)` (it reads the output at `idx` only);
//! - there is at least one.
//!
//! Each of those gets `with T.init(): X[idx] = c`, which stage-I semantics runs at every
//! spatial point before its first reduction step. The function is otherwise unchanged.

use sparsetir_ir::{BufferId, Expr, IterAxis, IterKind, PrimFunc, Stage, Stmt, Store};

/// Why `fold_zero_fill` refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FoldZeroFillError {
    #[error("`fold_zero_fill` takes a stage-I function (got stage {0:?})")]
    Stage(Stage),
    #[error("no buffer named `{0}`")]
    NoBuffer(String),
    #[error(
        "no top-level iteration fills `{0}` with a constant (one spatial iteration over its \
         axes storing a constant at its iterators)"
    )]
    NoFill(String),
    #[error("`{buffer}` is touched before its fill, by `{by}`")]
    TouchedBeforeFill { buffer: String, by: String },
    #[error("`{iteration}` touches `{buffer}` but is not a reduction into it: {why}")]
    NotAnUpdate {
        iteration: String,
        buffer: String,
        why: &'static str,
    },
    #[error("no iteration reduces into `{0}` after its fill")]
    NoUpdates(String),
}

/// `func` with the constant fill of buffer `buffer` moved into the inits of the reductions
/// after it (see the module documentation for when that is valid).
pub fn fold_zero_fill(func: &PrimFunc, buffer: &str) -> Result<PrimFunc, FoldZeroFillError> {
    if func.stage() != Stage::I {
        return Err(FoldZeroFillError::Stage(func.stage()));
    }
    let Some((x, buf)) = func.buffers.iter().find(|(_, b)| b.name == buffer) else {
        return Err(FoldZeroFillError::NoBuffer(buffer.to_string()));
    };
    let mut out = func.clone();
    let mut top = match std::mem::replace(&mut out.body, Stmt::empty()) {
        Stmt::Seq(v) => v,
        one => vec![one],
    };
    let axes: Vec<IterAxis> = buf.axes().iter().map(|&a| IterAxis::Axis(a)).collect();
    let mut fill: Option<(usize, Expr)> = None;
    let mut updates = Vec::new();
    for (at, s) in top.iter().enumerate() {
        if !s.touches(x) {
            continue;
        }
        let name = match s {
            Stmt::SparseIteration(it) => it.name.clone(),
            _ => "a statement that is not an iteration".to_string(),
        };
        match &fill {
            None => match fill_value(s, x, &axes) {
                Some(c) => fill = Some((at, c)),
                None => {
                    return Err(FoldZeroFillError::TouchedBeforeFill {
                        buffer: buffer.to_string(),
                        by: name,
                    })
                }
            },
            Some(_) => {
                let st = update_of(s, x).map_err(|why| FoldZeroFillError::NotAnUpdate {
                    iteration: name,
                    buffer: buffer.to_string(),
                    why,
                })?;
                // The init stores at the update's indices.
                updates.push((at, st.indices.clone(), st.span));
            }
        }
    }
    let Some((fill_at, value)) = fill else {
        return Err(FoldZeroFillError::NoFill(buffer.to_string()));
    };
    if updates.is_empty() {
        return Err(FoldZeroFillError::NoUpdates(buffer.to_string()));
    }
    for (at, indices, span) in updates {
        if let Stmt::SparseIteration(it) = &mut top[at] {
            it.init = Some(Stmt::Store(Store {
                buffer: x,
                indices,
                value: value.clone(),
                span,
            }));
        }
    }
    top.remove(fill_at);
    out.body = Stmt::Seq(top);
    Ok(out)
}

/// The constant `s` fills `x` with, if `s` is the fill of the module documentation.
fn fill_value(s: &Stmt, x: BufferId, axes: &[IterAxis]) -> Option<Expr> {
    let Stmt::SparseIteration(it) = s else {
        return None;
    };
    if it.init.is_some()
        || it.axes != axes
        || it.kinds.iter().any(|k| *k != IterKind::Spatial)
        || it.vars.len() != axes.len()
    {
        return None;
    }
    let Stmt::Store(st) = it.body.single() else {
        return None;
    };
    let at_iterators = st.buffer == x
        && st.indices.len() == it.vars.len()
        && st
            .indices
            .iter()
            .zip(&it.vars)
            .all(|(i, v)| *i == Expr::Var(*v));
    let constant = matches!(st.value, Expr::Float(..) | Expr::Int(..));
    (at_iterators && constant).then(|| st.value.clone())
}

/// The store of `s` if `s` is a reduction into `x` of the module documentation.
fn update_of(s: &Stmt, x: BufferId) -> Result<&Store, &'static str> {
    let Stmt::SparseIteration(it) = s else {
        return Err("it is not an iteration");
    };
    if it.init.is_some() {
        return Err("it has an init of its own");
    }
    if !it.kinds.contains(&IterKind::Reduce) {
        return Err("it has no reduction axis");
    }
    let Stmt::Store(st) = it.body.single() else {
        return Err("its body is not one store");
    };
    if st.buffer != x {
        return Err("its store is into another buffer");
    }
    let mut other_read = false;
    st.indices.iter().for_each(|i| {
        i.visit(&mut |y| other_read |= matches!(y, Expr::Load { buffer, .. } if *buffer == x))
    });
    st.value.visit(&mut |y| {
        if let Expr::Load { buffer, indices } = y {
            other_read |= *buffer == x && *indices != st.indices;
        }
    });
    if other_read {
        return Err("it reads the buffer at other indices than it stores");
    }
    Ok(st)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sparsetir_ir::equal::func_eq;
    use sparsetir_ir::printer::print_func;

    fn parse(src: &str) -> PrimFunc {
        sparsetir_syntax::parse_func(src).expect("parses")
    }

    const BEFORE: &str = r#"
@T.prim_func
def f(a: T.handle, c: T.handle, m: T.int32, n: T.int32) -> None:
    T.func_attr({"global_symbol": "f", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.dense_fixed(n)
    A = T.sp.match_buffer(a, (I, J), "float32")
    C = T.sp.match_buffer(c, (I,), "float32")
    with T.sp.iteration([I], "S", "fill") as [i]:
        C[i] = T.float32(0)
    with T.sp.iteration([I, J], "SR", "sum") as [i, j]:
        C[i] = C[i] + A[i, j]
"#;

    #[test]
    fn the_fill_becomes_the_init_of_the_reduction() {
        let got = fold_zero_fill(&parse(BEFORE), "C").expect("folds");
        let want = parse(
            r#"
@T.prim_func
def f(a: T.handle, c: T.handle, m: T.int32, n: T.int32) -> None:
    T.func_attr({"global_symbol": "f", "tir.noalias": True, "sparse_tir_level": 2})
    I = T.sp.dense_fixed(m)
    J = T.sp.dense_fixed(n)
    A = T.sp.match_buffer(a, (I, J), "float32")
    C = T.sp.match_buffer(c, (I,), "float32")
    with T.sp.iteration([I, J], "SR", "sum") as [i, j]:
        with T.init():
            C[i] = T.float32(0)
        C[i] = C[i] + A[i, j]
"#,
        );
        // Structurally equal up to renaming, once printed and parsed back (the fill's iterator
        // stays in the arena, so the printer names the update's `i_1`).
        let back = parse(&print_func(&got));
        assert!(
            func_eq(&back, &want),
            "{}\n---\n{}",
            print_func(&got),
            print_func(&want)
        );
    }

    #[test]
    fn refusals_name_what_is_wrong() {
        let f = parse(BEFORE);
        assert_eq!(
            fold_zero_fill(&f, "D"),
            Err(FoldZeroFillError::NoBuffer("D".into()))
        );
        assert_eq!(
            fold_zero_fill(&f, "A"),
            Err(FoldZeroFillError::TouchedBeforeFill {
                buffer: "A".into(),
                by: "sum".into()
            })
        );
        // A fill of something else than a constant is no fill.
        let g = parse(&BEFORE.replace("C[i] = T.float32(0)", "C[i] = A[i, 0]"));
        assert!(matches!(
            fold_zero_fill(&g, "C"),
            Err(FoldZeroFillError::TouchedBeforeFill { .. })
        ));
        // A later iteration that is not a reduction.
        let h = parse(&BEFORE.replace("\"SR\"", "\"SS\""));
        assert_eq!(
            fold_zero_fill(&h, "C"),
            Err(FoldZeroFillError::NotAnUpdate {
                iteration: "sum".into(),
                buffer: "C".into(),
                why: "it has no reduction axis"
            })
        );
        // The fill alone.
        let lone = BEFORE
            .lines()
            .take_while(|l| !l.contains("\"sum\""))
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!(
            fold_zero_fill(&parse(&lone), "C"),
            Err(FoldZeroFillError::NoUpdates("C".into()))
        );
    }
}
