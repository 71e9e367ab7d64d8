//! Read/write region analysis for the blocks built by the lowering passes: the union of the
//! block's accesses, with the variables bound inside the block (loops, nested block iterators,
//! `let`s) relaxed over their ranges. An index that depends on a relaxed variable through a load
//! is widened to the loaded buffer's domain hint (`T.assume_buffer_domain`), or to the whole
//! dimension when there is none.

use std::collections::{HashMap, HashSet};

use sparsetir_ir::{
    AxisKind, BinOp, BufferId, BufferRegion, BufferShape, Expr, Intrinsic, PrimFunc, Stmt, VarId,
};

use crate::simplify::Simplifier;

/// Domain hints: every value of the buffer lies in `[lo, hi)`.
pub(crate) type Hints = HashMap<BufferId, (Expr, Expr)>;

/// Computes `(reads, writes)` of a block with the given init, body and allocated buffers. Reads
/// identical to a write region are dropped (the reduction update pattern).
pub(crate) fn block_regions(
    f: &PrimFunc,
    simp: &Simplifier,
    hints: &Hints,
    init: Option<&Stmt>,
    body: &Stmt,
    allocs: &[BufferId],
) -> (Vec<BufferRegion>, Vec<BufferRegion>) {
    let mut r = Collector {
        f,
        simp,
        hints,
        relax: HashMap::new(),
        exclude: allocs.iter().copied().collect(),
        reads: Vec::new(),
        writes: Vec::new(),
    };
    if let Some(i) = init {
        r.stmt(i);
    }
    r.stmt(body);
    let Collector {
        reads,
        writes,
        exclude,
        ..
    } = r;
    let reads = reads
        .into_iter()
        .filter(|rd| !writes.contains(rd) && !exclude.contains(&rd.buffer))
        .collect();
    let writes = writes
        .into_iter()
        .filter(|w| !exclude.contains(&w.buffer))
        .collect();
    (reads, writes)
}

struct Collector<'a> {
    f: &'a PrimFunc,
    simp: &'a Simplifier,
    hints: &'a Hints,
    /// Variables bound inside the block: `Some((min, extent))`, or `None` for an unknown range.
    relax: HashMap<VarId, Option<(Expr, Expr)>>,
    exclude: HashSet<BufferId>,
    reads: Vec<BufferRegion>,
    writes: Vec<BufferRegion>,
}

impl Collector<'_> {
    fn depends(&self, e: &Expr) -> bool {
        let mut dep = false;
        e.visit(&mut |x| match x {
            Expr::Var(v) => dep |= self.relax.contains_key(v),
            Expr::Load { buffer, .. } => dep |= self.exclude.contains(buffer),
            _ => {}
        });
        dep
    }

    fn bind(&mut self, v: VarId, min: &Expr, extent: &Expr) -> Option<Option<(Expr, Expr)>> {
        let range = if self.depends(min) || self.depends(extent) {
            None
        } else {
            Some((min.clone(), extent.clone()))
        };
        self.relax.insert(v, range)
    }

    fn unbind(&mut self, v: VarId, prev: Option<Option<(Expr, Expr)>>) {
        match prev {
            Some(p) => {
                self.relax.insert(v, p);
            }
            None => {
                self.relax.remove(&v);
            }
        }
    }

    fn stmt(&mut self, s: &Stmt) {
        match s {
            Stmt::Seq(v) => v.iter().for_each(|x| self.stmt(x)),
            Stmt::For(l) => {
                self.expr(&l.min);
                self.expr(&l.extent);
                let prev = self.bind(l.var, &l.min, &l.extent);
                self.stmt(&l.body);
                self.unbind(l.var, prev);
            }
            Stmt::Block(b) => {
                for it in &b.iters {
                    self.expr(&it.binding);
                }
                self.exclude.extend(b.alloc_buffers.iter().copied());
                let prevs: Vec<_> = b
                    .iters
                    .iter()
                    .map(|it| (it.var, self.bind(it.var, &it.min, &it.extent)))
                    .collect();
                if let Some(p) = &b.predicate {
                    self.expr(p);
                }
                for r in &b.reads {
                    let r = self.relax_region(r);
                    add(self.f, self.simp, &mut self.reads, r);
                }
                for r in &b.writes {
                    let r = self.relax_region(r);
                    add(self.f, self.simp, &mut self.writes, r);
                }
                for (v, p) in prevs.into_iter().rev() {
                    self.unbind(v, p);
                }
            }
            Stmt::Store(st) => {
                let r = self.region(st.buffer, &st.indices);
                add(self.f, self.simp, &mut self.writes, r);
                st.indices.iter().for_each(|i| self.expr(i));
                self.expr(&st.value);
            }
            Stmt::While(w) => {
                self.expr(&w.cond);
                self.stmt(&w.body);
            }
            Stmt::If(i) => {
                self.expr(&i.cond);
                self.stmt(&i.then_case);
                if let Some(e) = &i.else_case {
                    self.stmt(e);
                }
            }
            Stmt::Let(l) => {
                self.expr(&l.value);
                let prev = self.relax.insert(l.var, None);
                self.stmt(&l.body);
                self.unbind(l.var, prev);
            }
            // The intrinsics that write through their first argument, and read past the element
            // they name (`compress64`'s source: 64 of them; `copy_range`'s: `n`): whole
            // buffers, conservatively.
            Stmt::Evaluate(Expr::Call { op, args, .. }) if op.is_statement() => {
                for (k, a) in args.iter().enumerate() {
                    match a {
                        Expr::Load { buffer, indices } if k < 2 => {
                            indices.iter().for_each(|i| self.expr(i));
                            let r = BufferRegion {
                                buffer: *buffer,
                                ranges: (0..indices.len())
                                    .map(|d| whole(self.f, self.simp, *buffer, d))
                                    .collect(),
                            };
                            if k == 0 {
                                add(self.f, self.simp, &mut self.writes, r.clone());
                            }
                            if k == 1 || *op == Intrinsic::SortRange {
                                add(self.f, self.simp, &mut self.reads, r);
                            }
                        }
                        _ => self.expr(a),
                    }
                }
            }
            Stmt::Evaluate(e) => self.expr(e),
            Stmt::Allocate(b) => {
                self.exclude.insert(*b);
            }
            Stmt::SparseIteration(_) | Stmt::AssumeBufferDomain { .. } => {}
        }
    }

    fn expr(&mut self, e: &Expr) {
        let mut loads = Vec::new();
        e.visit(&mut |x| {
            if let Expr::Load { buffer, indices } = x {
                loads.push((*buffer, indices.clone()));
            }
        });
        for (b, idx) in loads {
            let r = self.region(b, &idx);
            add(self.f, self.simp, &mut self.reads, r);
        }
    }

    fn region(&self, buffer: BufferId, indices: &[Expr]) -> BufferRegion {
        let ranges = indices
            .iter()
            .enumerate()
            .map(|(d, i)| self.range(buffer, d, i))
            .collect();
        BufferRegion { buffer, ranges }
    }

    fn relax_region(&self, r: &BufferRegion) -> BufferRegion {
        let ranges = r
            .ranges
            .iter()
            .enumerate()
            .map(|(d, (min, ext))| {
                if ext.as_int() == Some(1) {
                    self.range(r.buffer, d, min)
                } else if !self.depends(min) && !self.depends(ext) {
                    (min.clone(), ext.clone())
                } else {
                    whole(self.f, self.simp, r.buffer, d)
                }
            })
            .collect();
        BufferRegion {
            buffer: r.buffer,
            ranges,
        }
    }

    /// The range an index expression covers when the relaxed variables vary.
    fn range(&self, buffer: BufferId, d: usize, e: &Expr) -> (Expr, Expr) {
        if !self.depends(e) {
            return (e.clone(), Expr::int(1));
        }
        let var_range = |x: &Expr| match x {
            Expr::Var(v) => self.relax.get(v).cloned().flatten(),
            _ => None,
        };
        if let Some(r) = var_range(e) {
            return r;
        }
        match e {
            Expr::Binary(op @ (BinOp::Add | BinOp::Sub), a, c) if !self.depends(c) => {
                if let Some((m, x)) = var_range(a) {
                    let m = if *op == BinOp::Add {
                        self.simp.add(self.f, m, (**c).clone())
                    } else {
                        self.simp.sub(self.f, m, (**c).clone())
                    };
                    return (m, x);
                }
            }
            Expr::Load { buffer: b, .. } => {
                if let Some((lo, hi)) = self.hints.get(b) {
                    return (lo.clone(), self.simp.sub(self.f, hi.clone(), lo.clone()));
                }
            }
            _ => {}
        }
        whole(self.f, self.simp, buffer, d)
    }
}

/// The whole range of dimension `d` of `buffer` (positions for sparse dimensions).
fn whole(f: &PrimFunc, simp: &Simplifier, buffer: BufferId, d: usize) -> (Expr, Expr) {
    let ext = match f.buffers.get(buffer).map(|b| &b.shape) {
        Some(BufferShape::Dense(dims)) => dims.get(d).cloned(),
        Some(BufferShape::Sparse(axes)) => {
            axes.get(d)
                .and_then(|a| f.axes.get(*a))
                .map(|ax| match ax.kind {
                    AxisKind::CompressedFixed => {
                        ax.nnz_cols.clone().unwrap_or_else(|| ax.length.clone())
                    }
                    _ => ax.length.clone(),
                })
        }
        None => None,
    };
    let mut ext = ext.unwrap_or_else(|| Expr::int(1));
    // The extra slots of the last dimension (`indptr`'s final entry) are addressable too.
    if let Some(buf) = f.buffers.get(buffer) {
        if let (Some(extra), BufferShape::Sparse(axes)) = (&buf.extra_storage, &buf.shape) {
            if d + 1 == axes.len() {
                ext = simp.add(f, ext, extra.clone());
            }
        }
    }
    (Expr::int(0), ext)
}

/// Adds `r` to `list`, merging it with an existing region of the same buffer.
fn add(f: &PrimFunc, simp: &Simplifier, list: &mut Vec<BufferRegion>, r: BufferRegion) {
    let Some(old) = list.iter_mut().find(|x| x.buffer == r.buffer) else {
        list.push(r);
        return;
    };
    if old.ranges.len() != r.ranges.len() {
        return;
    }
    for (d, (a, b)) in old.ranges.iter_mut().zip(r.ranges).enumerate() {
        if *a == b {
            continue;
        }
        *a = union(f, simp, r.buffer, d, a, &b);
    }
}

fn union(
    f: &PrimFunc,
    simp: &Simplifier,
    buffer: BufferId,
    d: usize,
    a: &(Expr, Expr),
    b: &(Expr, Expr),
) -> (Expr, Expr) {
    if let (Some(xa), Some(xb)) = (a.1.as_int(), b.1.as_int()) {
        if let Some(k) = simp.const_diff(f, &a.0, &b.0) {
            // b starts k after a.
            let (lo, ext) = if k >= 0 {
                (a.0.clone(), xa.max(k.saturating_add(xb)))
            } else {
                (b.0.clone(), xb.max(xa.saturating_sub(k)))
            };
            return (lo, Expr::int(ext));
        }
    }
    whole(f, simp, buffer, d)
}
