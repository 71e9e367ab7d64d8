//! Buffers known to hold zeros when a kernel starts: a kernel that only stores `0` into every
//! element of a buffer (the zero fill a reduction's output gets first, as spmm_24's
//! `spmm_24_zero`) leaves it all zeros for the next launch, until a kernel writes it otherwise.
//! A tensorized product's accumulator plan (`mma/accumulate.rs`) in such a kernel starts its
//! registers at zero instead of loading its tiles, where nothing in the kernel can have written
//! them first: every store of the buffer in the kernel is in a tensorized product, and the
//! plan's loop sits under no serial loop (each thread loads each of its tiles once).
//!
//! A zero fill here is one block under loops only (no condition around it; a predicate only of
//! the `binding < extent` an imperfect split adds) storing a constant 0 at `B[v_0, .., v_k]`, its
//! iterators in order, each ranging over exactly the buffer's extent along its dimension: a
//! schedule runs a block once for every point of its iterators' domain, so every element is
//! written.

use super::*;

/// The buffer `parts` (one kernel's top-level statements) fills with zeros whole, if that is all
/// the kernel stores.
pub(super) fn zero_fill(w: &Writer<'_>, parts: &[&Stmt]) -> Option<BufferId> {
    let [part] = parts else {
        return None;
    };
    let mut s: &Stmt = part;
    // Loops only, down to the block.
    let b = loop {
        match s {
            Stmt::For(f) => s = &f.body,
            Stmt::Seq(v) if v.len() == 1 => s = &v[0],
            Stmt::Block(b) => break b,
            _ => return None,
        }
    };
    if b.init.is_some() || !b.alloc_buffers.is_empty() {
        return None;
    }
    // A predicate may only cut what an imperfect split adds past an iterator's domain:
    // `binding < extent` for some iterator.
    if let Some(p) = &b.predicate {
        let mut parts = Vec::new();
        conjuncts(p, &mut parts);
        let past_domain = |c: &Expr| {
            matches!(c, Expr::Binary(sparsetir_ir::BinOp::Lt, l, r)
                if b.iters.iter().any(|it| **l == it.binding && **r == it.extent))
        };
        if !parts.into_iter().all(past_domain) {
            return None;
        }
    }
    let Stmt::Store(st) = only(&b.body) else {
        return None;
    };
    let zero = match &st.value {
        Expr::Float(v, _) => *v == 0.0,
        Expr::Int(v, _) => *v == 0,
        _ => false,
    };
    let extents = w.dense_extents(st.buffer).ok()?;
    if !zero || st.indices.len() != b.iters.len() || extents.len() != b.iters.len() {
        return None;
    }
    let whole = st
        .indices
        .iter()
        .zip(&b.iters)
        .zip(extents)
        .all(|((i, it), ext)| {
            let same = it.extent == *ext
                || const_int(&it.extent).is_some_and(|n| Some(n) == const_int(ext));
            *i == Expr::Var(it.var) && const_int(&it.min) == Some(0) && same
        });
    whole.then_some(st.buffer)
}

/// Whether every store of `b` in `parts` lies inside a tensorized product nest.
pub(super) fn stored_only_by_products(parts: &[&Stmt], b: BufferId) -> bool {
    fn walk(s: &Stmt, b: BufferId, in_product: bool) -> bool {
        match s {
            Stmt::For(f) => {
                let product = matches!(mma::Mma::of(f), Some(m) if m != mma::Mma::Fill);
                walk(&f.body, b, in_product || product)
            }
            Stmt::Store(st) if st.buffer == b => in_product,
            _ => {
                let mut ok = true;
                s.for_each_child(|c| ok &= walk(c, b, in_product));
                ok
            }
        }
    }
    parts.iter().all(|p| walk(p, b, false))
}

/// The buffers each kernel of `groups` (in launch order) may assume all zeros at its start: a
/// zero fill's buffer, from the kernel after the fill until a kernel stores into it again.
pub(super) fn zeros_at_start(w: &Writer<'_>, groups: &[Vec<&Stmt>]) -> Vec<HashSet<BufferId>> {
    let mut zero: HashSet<BufferId> = HashSet::new();
    let mut out = Vec::new();
    for parts in groups {
        out.push(zero.clone());
        let (mut writes, mut reads) = (HashSet::new(), HashSet::new());
        for p in parts {
            accesses(p, &mut writes, &mut reads);
        }
        zero.retain(|b| !writes.contains(b));
        if let Some(b) = zero_fill(w, parts) {
            if writes.len() == 1 {
                zero.insert(b);
            }
        }
    }
    out
}
