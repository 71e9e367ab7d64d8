//! Which stack arrays the C writer may leave uninitialized: those whose first access in their
//! scope is a fill nest that writes every element before anything reads one.
//!
//! A local array (a cache tile, a block's accumulator) is declared with `= {0}` so that no
//! element is ever read before it was written. Most are caches whose fill block writes the whole
//! tile first, every time the scope runs (a widened tile of B per block, 4 KiB): zeroing it first
//! doubles the stores for nothing (8% of a float16 block-sparse attention on the CPU). The proof
//! here is by enumeration, so it holds for any index arithmetic the schedule produced: the first
//! statement of the scope that touches the array must be a nest of serial, vectorized or
//! unrolled loops of constant extents (at most [`MAX_FILL_ITERATIONS`] iterations) around a
//! block without predicate or init whose body is one store to the array, and the store's
//! offsets over all iterations must cover every element. Anything else keeps the zeroing.

use std::collections::HashMap;

use sparsetir_ir::scalar::{binary, Value};
use sparsetir_ir::{BufferId, Expr, ForKind, Stmt, VarId};

/// The most iterations of a fill nest enumerated (a stack array holds at most 4096 elements).
pub(super) const MAX_FILL_ITERATIONS: i64 = 1 << 16;

/// Whether the statements `scope` (run in order each time the array's scope runs) write every
/// element of `buf`, a dense array of `size` elements at the constant `strides`, before any
/// statement reads one.
pub(super) fn filled_before_read(
    scope: &[&Stmt],
    buf: BufferId,
    strides: &[i64],
    size: i64,
) -> bool {
    if size <= 0 {
        return false;
    }
    let mut stmts: Vec<&Stmt> = scope.iter().rev().copied().collect();
    while let Some(s) = stmts.pop() {
        match s {
            Stmt::Seq(v) => stmts.extend(v.iter().rev()),
            Stmt::Let(l) if !l.value.loads(buf) => stmts.push(&l.body),
            s if !s.touches(buf) => {}
            s => return covers(s, buf, strides, size),
        }
    }
    false
}

/// Whether `s` is a fill nest of `buf` whose stores cover all `size` elements.
fn covers(s: &Stmt, buf: BufferId, strides: &[i64], size: i64) -> bool {
    let mut loops: Vec<(VarId, i64, i64)> = Vec::new();
    let mut cur = s.single();
    let mut iterations: i64 = 1;
    let block = loop {
        match cur {
            Stmt::For(f)
                if matches!(
                    f.kind,
                    ForKind::Serial | ForKind::Vectorized | ForKind::Unrolled
                ) =>
            {
                let (Some(min), Some(extent)) = (f.min.as_int(), f.extent.as_int()) else {
                    return false;
                };
                iterations = match iterations.checked_mul(extent) {
                    Some(n) if extent > 0 && n <= MAX_FILL_ITERATIONS => n,
                    _ => return false,
                };
                loops.push((f.var, min, extent));
                cur = f.body.single();
            }
            Stmt::Block(b) => break b,
            _ => return false,
        }
    };
    if block.predicate.is_some() || block.init.is_some() || !block.alloc_buffers.is_empty() {
        return false;
    }
    let Stmt::Store(st) = block.body.single() else {
        return false;
    };
    if st.buffer != buf || st.indices.len() != strides.len() || st.value.loads(buf) {
        return false;
    }
    let mut written = vec![false; size as usize];
    let mut env: HashMap<VarId, i64> = HashMap::new();
    for n in 0..iterations {
        // Iteration `n` of the nest, the innermost loop fastest.
        let mut rest = n;
        for &(var, min, extent) in loops.iter().rev() {
            env.insert(var, min + rest % extent);
            rest /= extent;
        }
        for it in &block.iters {
            // An iterator bound to loops outside the nest has no value here: an index that
            // uses it fails to evaluate below, and the proof fails with it.
            match eval(&it.binding, &env) {
                Some(v) => env.insert(it.var, v),
                None => env.remove(&it.var),
            };
        }
        let mut offset: i64 = 0;
        for (idx, stride) in st.indices.iter().zip(strides) {
            let Some(i) = eval(idx, &env) else {
                return false;
            };
            offset = match i.checked_mul(*stride).and_then(|x| x.checked_add(offset)) {
                Some(o) => o,
                None => return false,
            };
        }
        match usize::try_from(offset)
            .ok()
            .and_then(|o| written.get_mut(o))
        {
            Some(w) => *w = true,
            // A store outside the array: not a fill this proof knows.
            None => return false,
        }
    }
    written.iter().all(|w| *w)
}

/// The integer value of `e` with the variables of `env` (the IR's own integer semantics);
/// `None` when it reads anything else.
fn eval(e: &Expr, env: &HashMap<VarId, i64>) -> Option<i64> {
    fn value(e: &Expr, env: &HashMap<VarId, i64>) -> Option<Value> {
        Some(match e {
            Expr::Int(..) => Value::of_literal(e)?,
            Expr::Var(v) => Value::Int(i128::from(*env.get(v)?), sparsetir_ir::DType::I64),
            Expr::Cast(d, a) if d.is_integer() => value(a, env)?.cast(*d).ok()?,
            Expr::Binary(op, a, b) => binary(*op, value(a, env)?, value(b, env)?).ok()?,
            _ => return None,
        })
    }
    match value(e, env)? {
        Value::Int(v, _) => i64::try_from(v).ok(),
        _ => None,
    }
}
