//! Synchronisation analysis of the CUDA writer: which values and conditions differ between the
//! threads of a block (where a barrier may be written), barriers between the statements of a
//! sequence, and stores kept to one thread along block dimensions no loop binds.

use super::*;

impl<'f> Writer<'f> {
    /// Whether `e` may differ between the threads of a block.
    pub(crate) fn thread_dependent(&self, e: &Expr) -> bool {
        let Some(k) = self.kernel.as_ref() else {
            return false;
        };
        let mut hit = false;
        e.visit(&mut |x| hit |= matches!(x, Expr::Var(v) if k.dependent.contains(v)));
        hit
    }

    /// Whether `e` may differ between the lanes of a warp (it depends on `threadIdx.x`).
    pub(crate) fn lane_dependent(&self, e: &Expr) -> bool {
        let Some(k) = self.kernel.as_ref() else {
            return false;
        };
        let mut hit = false;
        e.visit(&mut |x| hit |= matches!(x, Expr::Var(v) if k.lane_dependent.contains(v)));
        hit
    }

    /// Whether every warp runs the current code as one: no enclosing condition or loop range
    /// depends on `threadIdx.x`, and any that depends on other thread indices is uniform over
    /// each warp because a block row is exactly one warp (`blockDim.x` = 32).
    pub(crate) fn warp_uniform(&self) -> bool {
        let Some(k) = self.kernel.as_ref() else {
            return false;
        };
        k.lane_divergent == 0
            && (k.divergent == 0 || k.dims.get("threadIdx.x") == Some(&LaunchExpr::Const(32)))
    }

    /// Records that `v` is bound to `e` (thread-dependent when `e` is).
    pub(crate) fn note_binding(&mut self, v: VarId, e: &Expr) {
        let (thread, lane) = (self.thread_dependent(e), self.lane_dependent(e));
        if let Some(k) = self.kernel.as_mut() {
            if thread {
                k.dependent.insert(v);
            }
            if lane {
                k.lane_dependent.insert(v);
            }
        }
    }

    /// Enters a condition or loop range `e`: whether it made the code divergent among the
    /// block's threads, and among a warp's lanes.
    pub(crate) fn enter_divergence(&mut self, e: &Expr) -> Divergence {
        let d = Divergence {
            block: self.thread_dependent(e),
            lane: self.lane_dependent(e),
        };
        self.diverge(d);
        d
    }

    /// Enters code that `d` says is divergent (a thread guard, a condition); undone by
    /// [`Self::leave_divergence`].
    pub(crate) fn diverge(&mut self, d: Divergence) {
        if let Some(k) = self.kernel.as_mut() {
            k.divergent += usize::from(d.block);
            k.lane_divergent += usize::from(d.lane);
        }
    }

    pub(crate) fn leave_divergence(&mut self, entered: Divergence) {
        if let Some(k) = self.kernel.as_mut() {
            k.divergent -= usize::from(entered.block);
            k.lane_divergent -= usize::from(entered.lane);
        }
    }

    /// Before writing statement `k` of a block-level sequence: a barrier when an earlier
    /// statement since the last barrier touched shared memory that this one touches, one of
    /// the two writing.
    pub(crate) fn cuda_barrier_before(&mut self, pending: &mut Pending, next: &Stmt) -> Res<()> {
        let Some(k) = self.kernel.as_ref() else {
            return Ok(());
        };
        let (uniform, multi) = (k.divergent == 0, k.multi_thread);
        let base: Vec<(String, VarId)> = k
            .bound
            .iter()
            .cloned()
            .zip(k.bound_vars.iter().copied())
            .collect();
        let (mut w, mut r) = (HashSet::new(), HashSet::new());
        accesses(next, &mut w, &mut r);
        if let Some(acc) = &self.simd_acc {
            w.remove(&acc.buffer);
            r.remove(&acc.buffer);
        }
        // Shared memory is always seen by other threads; global memory too when the block has
        // several threads (statements may map their elements to threads differently).
        w.retain(|b| self.is_shared(*b) || multi);
        r.retain(|b| self.is_shared(*b) || multi);
        let mut tags: HashMap<BufferId, HashSet<Mapping>> = HashMap::new();
        self.access_tags(
            next,
            &mut base.clone(),
            &mut Vec::new(),
            &mut HashMap::new(),
            &mut tags,
        );
        let atomics = atomic_targets(next);
        // Accumulator tiles of tensorized nests on both sides: each element stays with the lane
        // whose fragment holds it (see `mma_private`).
        let private = mma_private(next);
        let hazards: Vec<BufferId> = w
            .iter()
            .filter(|b| pending.w.contains(b) || pending.r.contains(b))
            .chain(r.iter().filter(|b| pending.w.contains(b)))
            .filter(|b| !(private.contains(b) && pending.mma_only.contains(b)))
            .copied()
            .collect();
        // Global memory that both statements reach under the same thread bindings is taken to
        // be mapped to the threads the same way (each thread reads what it wrote: the
        // schedules' init nests, a cross-thread reduction's element and its init); shared
        // memory, atomically updated elements and elements reached under other bindings are
        // touched by other threads.
        let cross = |b: &BufferId| {
            if self.is_shared(*b) || atomics.contains(b) || pending.atomics.contains(b) {
                return true;
            }
            let mut all: HashSet<&Mapping> = HashSet::new();
            all.extend(tags.get(b).into_iter().flatten());
            all.extend(pending.tags.get(b).into_iter().flatten());
            all.len() > 1
        };
        if uniform && !hazards.is_empty() {
            // Where the whole block is present a barrier costs little: one is written for
            // every hazard, whatever the mapping.
            self.write_barrier();
            *pending = Pending::default();
        } else if let Some(b) = hazards.iter().find(|b| cross(b)) {
            // Where threads diverge no barrier can be written: the schedule is refused.
            return Err(self.unsupported(
                &format!("buffer `{}`", self.func.buffers[*b].name),
                "other threads of the block touch it between two statements, but the threads \
                 diverge there (a condition or loop range depends on a thread index), so no \
                 barrier can order them: bind the loops so the block is uniform around these \
                 statements",
            ));
        }
        for b in w.iter().chain(&r) {
            let touched = pending.w.contains(b) || pending.r.contains(b);
            if private.contains(b) && (!touched || pending.mma_only.contains(b)) {
                pending.mma_only.insert(*b);
            } else {
                pending.mma_only.remove(b);
            }
        }
        pending.w.extend(w);
        pending.r.extend(r);
        pending.atomics.extend(atomics);
        for (b, t) in tags {
            pending.tags.entry(b).or_default().extend(t);
        }
        Ok(())
    }

    /// Records, for every buffer `s` accesses, how the element it reaches moves with the thread
    /// indices bound around the access (`bound`: tag and loop variable of the enclosing ones;
    /// `subst`: the bindings of the enclosing block iterators met inside `s`): for every tag,
    /// the coefficient of its variable in each index (`None` where the index is not affine in
    /// it). Inside a `threadIdx.x` loop carrying a cross-thread reduction, the reduced element
    /// is read and written by the group's first lane alone: its accesses do not count that tag
    /// (`lane_only`); the steps' other accesses do.
    pub(crate) fn access_tags(
        &self,
        s: &'f Stmt,
        bound: &mut Vec<(String, VarId)>,
        lane_only: &mut Vec<(BufferId, String)>,
        subst_map: &mut HashMap<VarId, Expr>,
        out: &mut HashMap<BufferId, HashSet<Mapping>>,
    ) {
        match s {
            Stmt::For(f) => {
                let tag = f.thread.as_deref().unwrap_or("");
                let binds = f.kind == ForKind::ThreadBinding && !tag.starts_with("vthread");
                let reduced = (tag == "threadIdx.x")
                    .then(|| self.accumulation(f, true))
                    .flatten()
                    .map(|a| a.store.buffer);
                if binds {
                    bound.push((tag.to_string(), f.var));
                }
                if let Some(b) = reduced {
                    lane_only.push((b, tag.to_string()));
                }
                self.access_tags(&f.body, bound, lane_only, subst_map, out);
                if reduced.is_some() {
                    lane_only.pop();
                }
                if binds {
                    bound.pop();
                }
                return;
            }
            Stmt::Block(b) => {
                for it in &b.iters {
                    let v = subst(&it.binding, subst_map);
                    subst_map.insert(it.var, v);
                }
            }
            Stmt::Store(st) => {
                let m = mapping(bound, lane_only, subst_map, st.buffer, &st.indices);
                out.entry(st.buffer).or_default().insert(m);
            }
            _ => {}
        }
        s.for_each_expr(|e| {
            e.visit(&mut |x| {
                if let Expr::Load { buffer, indices } = x {
                    let m = mapping(bound, lane_only, subst_map, *buffer, indices);
                    out.entry(*buffer).or_default().insert(m);
                }
            })
        });
        s.for_each_child(|c| self.access_tags(c, bound, lane_only, subst_map, out));
    }

    /// The condition that keeps a store to one thread along the block dimensions no enclosing
    /// loop is bound to (those threads would all repeat it), or `None`.
    pub(crate) fn redundant_guard(&self, except_x: bool) -> Option<String> {
        let k = self.kernel.as_ref()?;
        let conds: Vec<String> = BLOCK_TAGS
            .iter()
            .filter(|t| !(except_x && **t == "threadIdx.x"))
            .filter(|t| {
                k.dims.get(**t).is_some_and(|d| *d != LaunchExpr::Const(1))
                    && !k.bound.iter().any(|b| b == **t)
            })
            .map(|t| format!("{t} == 0"))
            .collect();
        (!conds.is_empty()).then(|| conds.join(" && "))
    }

    /// Writes `line` under [`Self::redundant_guard`].
    pub(crate) fn guarded_line(&mut self, line: &str, except_x: bool) {
        match self.redundant_guard(except_x) {
            Some(g) => self.line(&format!("if ({g}) {{ {line} }}")),
            None => self.line(line),
        }
    }
}

/// The [`Mapping`] of an access to `b[indices]`.
fn mapping(
    bound: &[(String, VarId)],
    lane_only: &[(BufferId, String)],
    subst_map: &HashMap<VarId, Expr>,
    b: BufferId,
    indices: &[Expr],
) -> Mapping {
    let idx: Vec<Expr> = indices.iter().map(|i| subst(i, subst_map)).collect();
    let mut key: Mapping = bound
        .iter()
        .filter(|(t, _)| !lane_only.iter().any(|(lb, lt)| *lb == b && lt == t))
        .map(|(t, v)| {
            let coefs = idx
                .iter()
                .map(|i| {
                    let a = affine(i)?;
                    if a.terms
                        .iter()
                        .any(|(e, _)| *e != Expr::Var(*v) && mentions(e, &[*v]))
                    {
                        return None;
                    }
                    Some(
                        a.terms
                            .iter()
                            .filter(|(e, _)| *e == Expr::Var(*v))
                            .map(|(_, c)| *c)
                            .sum(),
                    )
                })
                .collect();
            (t.clone(), coefs)
        })
        .collect();
    key.sort();
    key
}

/// How an access's element moves with the thread indices bound around it: per tag (sorted),
/// the coefficient of its variable in each index (`None`: not affine in it).
pub(crate) type Mapping = Vec<(String, Vec<Option<i64>>)>;

/// What the statements of a sequence since its last barrier touched.
#[derive(Default)]
pub(crate) struct Pending {
    w: HashSet<BufferId>,
    r: HashSet<BufferId>,
    atomics: HashSet<BufferId>,
    /// For each buffer, the sets of thread tags bound around its accesses (sorted).
    tags: HashMap<BufferId, HashSet<Mapping>>,
    /// Buffers touched only as the accumulator tiles of tensorized nests.
    mma_only: HashSet<BufferId>,
}

/// The buffers `s` touches only as the accumulator tile of tensorized nests (`mma.rs`): an
/// element of such a tile is read and written by the one lane whose fragment holds it, the
/// same lane in every tensorized nest of the tile (its fill and its products take it at the
/// same place, as `mma.rs` requires), so no barrier orders these accesses among themselves.
pub(crate) fn mma_private(s: &Stmt) -> HashSet<BufferId> {
    let (mut acc, mut other) = (HashSet::new(), HashSet::new());
    mma_walk(s, &mut acc, &mut other);
    acc.retain(|b| !other.contains(b));
    acc
}

fn mma_walk(s: &Stmt, acc: &mut HashSet<BufferId>, other: &mut HashSet<BufferId>) {
    if let Stmt::For(f) = s {
        if mma::Mma::of(f).is_some() {
            let tile = mma_tile_store(f).map(|(b, _)| b);
            let (mut w, mut r) = (HashSet::new(), HashSet::new());
            accesses(&f.body, &mut w, &mut r);
            other.extend(w.union(&r).filter(|b| Some(**b) != tile));
            acc.extend(tile);
            return;
        }
    }
    if let Stmt::Store(st) = s {
        other.insert(st.buffer);
    }
    s.for_each_expr(|e| {
        e.visit(&mut |x| match x {
            Expr::Load { buffer, .. } => {
                other.insert(*buffer);
            }
            Expr::Call {
                op: Intrinsic::AtomicAdd,
                args,
                ..
            } => {
                if let Some(Expr::Load { buffer, .. }) = args.first() {
                    other.insert(*buffer);
                }
            }
            _ => {}
        })
    });
    s.for_each_child(|c| mma_walk(c, acc, other));
}

/// The buffer and indices of a tensorized nest's innermost store (the accumulator tile's).
pub(crate) fn mma_tile_store(f: &For) -> Option<(BufferId, Vec<Expr>)> {
    let mut found = None;
    f.body.visit(&mut |x| {
        if let Stmt::Store(st) = x {
            found.get_or_insert_with(|| (st.buffer, st.indices.clone()));
        }
    });
    found
}

/// The buffers `s` updates with atomic additions.
fn atomic_targets(s: &Stmt) -> HashSet<BufferId> {
    let mut out = HashSet::new();
    s.visit(&mut |x| {
        x.for_each_expr(|e| {
            e.visit(&mut |y| {
                if let Expr::Call {
                    op: Intrinsic::AtomicAdd,
                    args,
                    ..
                } = y
                {
                    if let Some(Expr::Load { buffer, .. }) = args.first() {
                        out.insert(*buffer);
                    }
                }
            })
        })
    });
    out
}

/// What entering a condition or loop range did (see `Writer::enter_divergence`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Divergence {
    /// The block's threads may take different paths.
    pub block: bool,
    /// A warp's lanes may (the condition depends on `threadIdx.x`).
    pub lane: bool,
}
