//! Reused workspaces of the C writer: the buffers a block names in its `workspace` annotation
//! (see [`WORKSPACE_ATTR`]) are allocated once around the outermost loop that holds the block
//! (inside the `omp parallel` region of a parallel loop: one per thread), not once per block
//! instance. SpGEMM's dense workspace has one element per column of the output; zeroing it
//! for every row would make the kernel quadratic.

use super::*;

use sparsetir_ir::WORKSPACE_ATTR;

/// A buffer allocated around a loop for the blocks inside it.
pub(super) struct Hoisted {
    pub(super) buffer: BufferId,
    /// The heap pointer's name (`None` for a stack array).
    pub(super) heap: Option<String>,
}

/// Whether a block under `s` names a workspace.
pub(super) fn any_in(s: &Stmt) -> bool {
    let mut found = false;
    s.visit(&mut |x| {
        found |= matches!(x, Stmt::Block(b) if b.annotations.get(WORKSPACE_ATTR).is_some())
    });
    found
}

impl<'f> Writer<'f> {
    /// The workspace buffers of the blocks under loop `f` that can be allocated before it: not
    /// already allocated further out, and sized by expressions that read no buffer and no
    /// variable bound inside the loop. Nested parallel loops are left to allocate their own
    /// (one per thread of their region).
    pub(super) fn loop_workspaces(&self, f: &For) -> Res<Vec<BufferId>> {
        let mut bound: HashSet<VarId> = HashSet::from([f.var]);
        let mut found = Vec::new();
        self.collect_workspaces(&f.body, &mut bound, &mut found)?;
        let invariant = |e: &Expr| {
            let mut ok = true;
            e.visit(&mut |x| match x {
                Expr::Var(v) if bound.contains(v) => ok = false,
                Expr::Load { .. } => ok = false,
                _ => {}
            });
            ok
        };
        Ok(found
            .into_iter()
            .filter(|b| !self.hoisted.iter().any(|h| h.buffer == *b))
            .filter(|b| match &self.func.buffers[*b].shape {
                BufferShape::Dense(dims) => {
                    dims.iter().all(invariant) && self.func.buffers[*b].strides.is_empty()
                }
                BufferShape::Sparse(_) => false,
            })
            .collect())
    }

    fn collect_workspaces(
        &self,
        s: &Stmt,
        bound: &mut HashSet<VarId>,
        found: &mut Vec<BufferId>,
    ) -> Res<()> {
        match s {
            Stmt::For(l) if l.kind == ForKind::Parallel => return Ok(()),
            Stmt::For(l) => {
                bound.insert(l.var);
            }
            Stmt::Let(l) => {
                bound.insert(l.var);
            }
            Stmt::Block(b) => {
                bound.extend(b.iters.iter().map(|it| it.var));
                found.extend(self.block_workspaces(b)?);
            }
            _ => {}
        }
        let mut r = Ok(());
        s.for_each_child(|c| {
            if r.is_ok() {
                r = self.collect_workspaces(c, bound, found);
            }
        });
        r
    }

    /// The buffers block `b` names in its `workspace` annotation (each must be one it allocates).
    pub(super) fn block_workspaces(&self, b: &Block) -> Res<Vec<BufferId>> {
        let Some(ann) = b.annotations.get(WORKSPACE_ATTR) else {
            return Ok(Vec::new());
        };
        let bad = |what: String| {
            self.invalid(format!(
                "block `{}`: annotation `{WORKSPACE_ATTR}` {what}",
                b.name
            ))
        };
        let AttrValue::List(names) = ann else {
            return Err(bad(format!("must be a list of buffer names, got {ann:?}")));
        };
        let mut out = Vec::new();
        for n in names {
            let AttrValue::Str(n) = n else {
                return Err(bad(format!("must list buffer names, got {n:?}")));
            };
            let Some(id) = b
                .alloc_buffers
                .iter()
                .find(|id| self.func.buffers[**id].name == *n)
            else {
                return Err(bad(format!(
                    "names `{n}`, which the block does not allocate"
                )));
            };
            out.push(*id);
        }
        Ok(out)
    }

    /// Allocates `bufs` at the current point for the blocks that name them (see
    /// [`Writer::loop_workspaces`]); returns how many entries of `self.hoisted` to drop after.
    pub(super) fn open_workspaces(&mut self, bufs: &[BufferId]) -> Res<usize> {
        let mark = self.hoisted.len();
        for &b in bufs {
            // Workspaces are zeroed: their blocks rely on it (`"workspace"` annotation).
            let heap = self.write_allocs(&[b], &[])?;
            self.hoisted.push(Hoisted {
                buffer: b,
                heap: heap.into_iter().next(),
            });
        }
        Ok(mark)
    }

    /// Frees the workspaces allocated by [`Writer::open_workspaces`] since `mark`.
    pub(super) fn close_workspaces(&mut self, mark: usize) {
        let gone: Vec<Hoisted> = self.hoisted.drain(mark..).collect();
        for h in gone.iter().rev() {
            if let Some(p) = &h.heap {
                self.line(&format!("free({p});"));
            }
            self.bufs[h.buffer.index()] = None;
        }
    }

    /// Of block `b`'s allocations, those it makes itself, and the heap pointers of the reused
    /// workspaces it must check (an allocation that failed leaves them null).
    pub(super) fn block_allocs(&self, b: &Block) -> (Vec<BufferId>, Vec<String>) {
        let mut own = Vec::new();
        let mut reused = Vec::new();
        for id in &b.alloc_buffers {
            match self.hoisted.iter().find(|h| h.buffer == *id) {
                Some(h) => reused.extend(h.heap.clone()),
                None => own.push(*id),
            }
        }
        (own, reused)
    }
}
