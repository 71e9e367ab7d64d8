//! Buffers known to hold zeros when a kernel starts: a kernel that only stores `0` into every
//! element of a buffer (the zero fill a reduction's output gets first, as spmm_24's
//! `spmm_24_zero`) leaves it all zeros for the next launch, until a kernel writes it otherwise.
//! A tensorized product's accumulator plan (`mma/accumulate.rs`) in such a kernel starts its
//! registers at zero instead of loading its tiles, where nothing in the kernel can have written
//! them first: every store of the buffer in the kernel is in one tensorized product nest, and
//! the plan's loop sits under no serial loop (each thread loads each of its tiles once).
//!
//! The zero fill itself is left out where the kernel after it overwrites its buffer whole
//! without reading it: its only product nest's plan started at zero and stores tiles that
//! cover every element (`covers`: the tile's indices are mixed-radix numbers over loops from 0
//! of constant extents, the plan's loop runs, no condition of the function encloses it), and no
//! other load of the buffer is in the kernel.
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
    let Stmt::Store(st) = b.body.single() else {
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

/// Whether an intrinsic call statement (`atomic_add`, `sort_range`, ...) names `b`: taken as
/// a write of it.
fn evaluates_on(s: &Stmt, b: BufferId) -> bool {
    let mut hit = false;
    if let Stmt::Evaluate(_) = s {
        s.for_each_expr(|e| {
            e.visit(&mut |x| hit |= matches!(x, Expr::Load { buffer, .. } if *buffer == b))
        });
    }
    hit
}

/// The buffer `parts` fills with zeros whole, storing into nothing else.
fn only_zero_fill(w: &Writer<'_>, parts: &[&Stmt]) -> Option<BufferId> {
    let (mut writes, mut reads) = (HashSet::new(), HashSet::new());
    for p in parts {
        accesses(p, &mut writes, &mut reads);
    }
    zero_fill(w, parts).filter(|_| writes.len() == 1)
}

/// For each kernel of `groups` (in launch order): the buffers it may assume all zeros at its
/// start — a zero fill's buffer, from the kernel after the fill until a kernel stores into it
/// again — and the buffer it zero-fills itself, if that is all it does.
pub(super) fn zeros_at_start(
    w: &Writer<'_>,
    groups: &[Vec<&Stmt>],
) -> Vec<(HashSet<BufferId>, Option<BufferId>)> {
    let mut zero: HashSet<BufferId> = HashSet::new();
    let mut out = Vec::new();
    for parts in groups {
        let fill = only_zero_fill(w, parts);
        out.push((zero.clone(), fill));
        let (mut writes, mut reads) = (HashSet::new(), HashSet::new());
        for p in parts {
            accesses(p, &mut writes, &mut reads);
        }
        zero.retain(|b| {
            !writes.contains(b)
                && !parts.iter().any(|p| {
                    let mut hit = false;
                    p.visit(&mut |x| hit |= evaluates_on(x, *b));
                    hit
                })
        });
        zero.extend(fill);
    }
    out
}

impl Writer<'_> {
    /// Whether the accumulator plan `plan` of loop `f` starts its registers at zero: its tiles
    /// are a zero fill's still (the buffer is in `zero_tiles`, and the loop sits under no serial
    /// loop: each thread loads each of its tiles once). Where, besides, every element of the
    /// buffer is stored from them (the loop runs, no condition of the function around it, the
    /// tiles cover the buffer), the buffer is noted in `zero_covered`: the fill is dead.
    pub(super) fn plan_starts_at_zero(
        &mut self,
        f: &For,
        plan: &mma::AccumulatorPlan,
    ) -> Res<bool> {
        if !self.zero_tiles.contains(&plan.buffer) || self.serial_depth > 0 {
            return Ok(false);
        }
        let runs = const_int(&f.min).is_some() && const_int(&f.extent).is_some_and(|n| n > 0);
        if runs && self.ir_conds == 0 && plan.guard.is_none() {
            let extents = self.dense_extents(plan.buffer)?;
            if covers(&plan.tile, extents, &loop_ranges(&self.func.body)) {
                self.zero_covered.insert(plan.buffer);
            }
        }
        Ok(true)
    }
}

/// Whether the tiles of a plan (`tile`: its indices, in loop variables, the nest's own loops
/// giving each element of a tile) cover every element of a buffer of `extents`: along each
/// dimension the index is a sum of distinct loop variables (from 0, constant extents `ranges`)
/// times coefficients that make it a mixed-radix number — sorted by coefficient, the first 1 and
/// each the previous times its variable's extent — spanning exactly the extent, and no variable
/// serves two dimensions.
fn covers(tile: &[Expr], extents: &[Expr], ranges: &HashMap<VarId, i64>) -> bool {
    if tile.len() != extents.len() {
        return false;
    }
    let mut used: HashSet<VarId> = HashSet::new();
    for (i, ext) in tile.iter().zip(extents) {
        let (Some(a), Some(total)) = (affine(i), const_int(ext)) else {
            return false;
        };
        if a.constant != 0 {
            return false;
        }
        let mut digits = Vec::new();
        for (t, c) in &a.terms {
            let Expr::Var(v) = t else {
                return false;
            };
            let Some(&n) = ranges.get(v) else {
                return false;
            };
            if !used.insert(*v) || *c <= 0 {
                return false;
            }
            digits.push((*c, n));
        }
        digits.sort_unstable();
        let mut next = 1i64;
        for (c, n) in digits {
            if c != next {
                return false;
            }
            next = match c.checked_mul(n) {
                Some(x) => x,
                None => return false,
            };
        }
        if next != total {
            return false;
        }
    }
    true
}

/// The loops of `s` that start at 0 and have a constant extent, with it.
fn loop_ranges(s: &Stmt) -> HashMap<VarId, i64> {
    let mut out = HashMap::new();
    s.visit(&mut |x| {
        if let Stmt::For(f) = x {
            if let (Some(0), Some(n)) = (const_int(&f.min), const_int(&f.extent)) {
                out.insert(f.var, n);
            }
        }
    });
    out
}

/// How one kernel touches a buffer outside its tensorized product nests, and how many of those
/// nests store into it.
pub(super) struct ProductUse {
    /// A store outside the nests, or an intrinsic call naming the buffer anywhere.
    other_writes: bool,
    /// A load outside the nests (loop bounds included).
    other_reads: bool,
    /// Product nests storing into it.
    nests: usize,
}

impl ProductUse {
    /// One product nest alone stores into the buffer: two could accumulate into one tile one
    /// after the other, and the second must then start from the first's sums.
    pub(super) fn sole_writer(&self) -> bool {
        !self.other_writes && self.nests == 1
    }

    /// That nest alone reads it, too.
    pub(super) fn sole_user(&self) -> bool {
        self.sole_writer() && !self.other_reads
    }
}

/// How `parts` (one kernel's top-level statements) touch `b` (see [`ProductUse`]).
pub(super) fn product_use(parts: &[&Stmt], b: BufferId) -> ProductUse {
    fn loads(e: &Expr, b: BufferId) -> bool {
        let mut hit = false;
        e.visit(&mut |x| hit |= matches!(x, Expr::Load { buffer, .. } if *buffer == b));
        hit
    }
    fn walk(s: &Stmt, b: BufferId, in_product: bool, u: &mut ProductUse) {
        u.other_writes |= evaluates_on(s, b);
        if let Stmt::For(f) = s {
            let product = matches!(mma::Mma::of(f), Some(m) if m != mma::Mma::Fill);
            if product && !in_product {
                let mut stores = false;
                f.body
                    .visit(&mut |x| stores |= matches!(x, Stmt::Store(st) if st.buffer == b));
                u.nests += usize::from(stores);
            }
            u.other_reads |= !in_product && (loads(&f.min, b) || loads(&f.extent, b));
            return walk(&f.body, b, in_product || product, u);
        }
        if !in_product {
            u.other_writes |= matches!(s, Stmt::Store(st) if st.buffer == b);
            s.for_each_expr(|e| u.other_reads |= loads(e, b));
        }
        s.for_each_child(|c| walk(c, b, in_product, u));
    }
    let mut u = ProductUse {
        other_writes: false,
        other_reads: false,
        nests: 0,
    };
    for p in parts {
        walk(p, b, false, &mut u);
    }
    u
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(i: usize) -> Expr {
        Expr::Var(VarId::from_index(i))
    }

    fn c(n: i64) -> Expr {
        Expr::Int(n, DType::I32)
    }

    /// Rows `16 b + m` (b < 4, m < 16) by columns `8 u + n` (u < 2, n < 8): a 64 x 16 buffer
    /// covered; other extents, overlapping or gapped digits, a variable in two dimensions, an
    /// offset, a variable of unknown range are not.
    #[test]
    fn mixed_radix_tiles_cover_exactly() {
        let ranges: HashMap<VarId, i64> = [(0, 4), (1, 16), (2, 2), (3, 8)]
            .into_iter()
            .map(|(i, n)| (VarId::from_index(i), n))
            .collect();
        let row = Expr::add(Expr::mul(v(0), c(16)), v(1));
        let col = Expr::add(Expr::mul(v(2), c(8)), v(3));
        let tile = [row.clone(), col.clone()];
        assert!(covers(&tile, &[c(64), c(16)], &ranges));
        assert!(!covers(&tile, &[c(64), c(32)], &ranges));
        assert!(!covers(&tile, &[c(128), c(16)], &ranges));
        // Digits of stride 8 over a 16-wide one overlap; of stride 32 leave gaps.
        for stride in [8, 32] {
            let bad = Expr::add(Expr::mul(v(0), c(stride)), v(1));
            assert!(!covers(
                &[bad, col.clone()],
                &[c(4 * stride), c(16)],
                &ranges
            ));
        }
        let twice = [row.clone(), Expr::add(Expr::mul(v(0), c(8)), v(3))];
        assert!(!covers(&twice, &[c(64), c(32)], &ranges));
        let offset = [Expr::add(row.clone(), c(1)), col.clone()];
        assert!(!covers(&offset, &[c(65), c(16)], &ranges));
        let unknown = [Expr::add(Expr::mul(v(9), c(16)), v(1)), col];
        assert!(!covers(&unknown, &[c(64), c(16)], &ranges));
    }
}
