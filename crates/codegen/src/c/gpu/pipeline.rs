//! Multi-buffered shared-memory copies on the CUDA target: a serial loop annotated
//! `{"double_buffer": d}` (d = 1, 2 or 3) whose body starts with the copy of a function-level
//! shared window (`shared_window.rs`; the copy `compute_at` placed there) keeps `d + 1` windows,
//! and copies the slice of iteration `k + d` while iteration `k`'s is used: `d = 1` is double
//! buffering, `d = 2` and `3` keep more copies in flight where one iteration's work is shorter
//! than a copy's latency.
//!
//! # What is written
//!
//! The window is declared `S = d + 1` times its size, iteration `k` using window `(k - min) %
//! S`. Before the loop, the copies of the first `d` iterations (each its own group, empty past
//! the end). Where the rest of the body writes no shared memory, iteration `k` is
//! `cp.async.wait_group d - 1` (every copy but the `d - 1` newest is complete: iteration
//! `k`'s), one barrier (every thread's copy of iteration `k` landed, and every thread done
//! with iteration `k - 1`), the copy of iteration `k + d` (an empty group past the end) into
//! the window iteration `k - 1` used, then the rest; one barrier after the loop (a loop around
//! it may copy again). Otherwise the copy comes first, then `cp.async.wait_group d`, a barrier,
//! the rest and a second barrier.
//!
//! A run loop also annotated `{"wgmma_in_flight": 1}` (its warpgroup products, `mma/
//! warpgroup.rs`) keeps each product in flight until the next one is issued: `wgmma.commit_group`
//! and `wgmma.wait_group 1` after it, `wgmma.wait_group 0` after the loop. A product may then
//! still read iteration `k - 1`'s window while iteration `k` runs, so there are `S = d + 2`
//! windows (the copy of iteration `k + d` goes to iteration `k - 2`'s, whose products every
//! warpgroup completed before the barrier), and the loop is unrolled by two so that
//! consecutive products' `A` fragments are distinct registers (an in-flight product's
//! registers must not be rewritten before its wait). A copy of
//! 16 bytes per thread from a
//! buffer the kernel only reads (`sptir_ld8h` / `sptir_st8h`) becomes one `cp.async` (sm_80+:
//! global to shared without registers, `cp.async.cg...16`), so the loads of iteration `k + 1`
//! are in flight during iteration `k`'s products; other copies are written as plain code.
//!
//! A run loop also annotated `{"tma": 1}` has its window filled by the tensor copy engine
//! instead (`tma.rs`): one thread's box copies completing on the stage's mbarrier, which
//! iteration `k` waits for before the barrier. With `{"tma_release": 1}` too the iteration
//! has no barrier: after its products each warp releases the stage they read on the stage's
//! "empty" mbarrier, which the copying thread waits for before refilling it; with
//! `{"tma_producer": 1}` that thread is the lane a warp of its own elects, which makes every
//! iteration's copy in a loop of its own (`write_producer_warp`) while the other warps run
//! theirs, so that the warps issuing products never wait for a release.
//!
//! The emulator lands a thread's `cp.async` bytes only when its `cp.async.wait_group`
//! completes their group, and reports any access to an element still in flight as a race:
//! a wait that lets too many groups pend, or a copy into a window still being read, fails
//! there as it could on the GPU.

use super::*;

/// The loop annotation that asks for a multi-buffered copy; its value is how many iterations
/// ahead the copy runs (1: double buffering).
pub const DOUBLE_BUFFER_ATTR: &str = "double_buffer";

/// The farthest a copy may run ahead (four windows).
pub const MAX_PREFETCH: i64 = 3;

/// The loop annotation that keeps a double-buffered run loop's warpgroup products in flight
/// over the next iteration (value 1; see the module documentation).
pub const WGMMA_IN_FLIGHT_ATTR: &str = "wgmma_in_flight";

/// The run-loop annotation grouping the products of consecutive runs (`{"wgmma_ss_runs": 2}`,
/// with `wgmma_ss` and a producer warp): each iteration of the loop takes two runs, waits for
/// both stages, loads both runs' metadata, issues both runs' products as one group (64
/// columns of `A` a group, as cuSPARSELt's 128 x 256 x 64 tiles), and releases the two stages
/// of the group completed before it.
pub const SS_RUNS_ATTR: &str = "wgmma_ss_runs";

impl<'f> Writer<'f> {
    /// Whether a function-level shared buffer whose window's loop is `l` gets several windows.
    pub(super) fn double_buffered(l: &For) -> bool {
        Self::prefetch_distance(l) > 0
    }

    /// How many iterations ahead loop `l`'s copy runs: its `double_buffer` annotation (0 for
    /// none; values past [`MAX_PREFETCH`] are refused where the window is declared).
    pub(super) fn prefetch_distance(l: &For) -> i64 {
        match l.annotations.get(DOUBLE_BUFFER_ATTR) {
            Some(AttrValue::Int(n)) if *n > 0 => *n,
            Some(AttrValue::Bool(true)) => 1,
            _ => 0,
        }
    }

    /// The farthest loop `l`'s copies may run ahead: [`MAX_PREFETCH`], or more with a producer
    /// warp making them (`tma.rs`).
    pub(super) fn max_prefetch(l: &For) -> i64 {
        if l.annotations.get(super::tma::TMA_PRODUCER_ATTR).is_some() {
            super::tma::MAX_PRODUCER_PREFETCH
        } else {
            MAX_PREFETCH
        }
    }

    /// Whether loop `f` keeps its warpgroup products in flight (`wgmma_in_flight`).
    pub(super) fn in_flight(f: &For) -> bool {
        matches!(
            f.annotations.get(WGMMA_IN_FLIGHT_ATTR),
            Some(AttrValue::Int(1)) | Some(AttrValue::Bool(true))
        )
    }

    /// The runs a group of products holds in run loop `f` (`wgmma_ss_runs`; 1 without it).
    pub(super) fn ss_runs(f: &For) -> i64 {
        match f.annotations.get(SS_RUNS_ATTR) {
            Some(AttrValue::Int(n)) if *n > 1 => *n,
            _ => 1,
        }
    }

    /// [`Self::ss_runs`] of the pipelined run loop `f`, checked: 2 at most, with the tensor
    /// cores reading `A` from the stage and a producer warp, a trip count of whole groups, and
    /// stages for the group in flight, the group waited for and one more run.
    pub(super) fn ss_runs_checked(&self, f: &For) -> Res<i64> {
        if f.annotations.get(SS_RUNS_ATTR).is_none() {
            return Ok(1);
        }
        let runs = Self::ss_runs(f);
        let name = self.func.vars[f.var].name.clone();
        let what = format!("loop `{name}` annotated `{SS_RUNS_ATTR}`");
        let ss = self
            .a_stage
            .as_ref()
            .is_some_and(|st| st.ss_row_units().is_some());
        if runs != 2 || !ss || self.producer_of(f).is_none() {
            return Err(self.unsupported(
                &what,
                "groups of 2 runs go with the tensor cores reading A from the stage \
                 (`wgmma_ss`) and a producer warp (`tma_producer`)",
            ));
        }
        if const_int(&f.extent).is_none_or(|n| n % runs != 0) {
            return Err(self.unsupported(
                &what,
                format!("its trip count must be a constant multiple of {runs}"),
            ));
        }
        let need = if Self::in_flight(f) { 2 * runs } else { runs };
        if Self::pipeline_stages(f) < need {
            return Err(self.unsupported(
                &what,
                format!("groups of {runs} runs take at least {need} stages (more slices ahead)"),
            ));
        }
        Ok(runs)
    }

    /// How many windows (stages) a multi-buffered copy under loop `f` keeps: the iteration
    /// being used, the `d` being copied, and one more while a product is in flight.
    pub(super) fn pipeline_stages(f: &For) -> i64 {
        Self::prefetch_distance(f) + 1 + i64::from(Self::in_flight(f))
    }

    /// Whether the rest of a pipelined loop's body (`items[1..]`) writes no shared memory: one
    /// barrier per iteration then suffices (see the module documentation).
    fn one_barrier(&self, items: &[&Stmt]) -> bool {
        items[1..].iter().all(|s| {
            let (mut w, mut r) = (HashSet::new(), HashSet::new());
            accesses(s, &mut w, &mut r);
            !w.iter().any(|b| self.is_shared(*b))
        })
    }

    /// For a loop annotated `double_buffer`: its body's items, the first being a copy into a
    /// double-buffered shared window (its only writer) that the others do not write. `None`
    /// for other loops; an annotated loop not of that form is an error.
    pub(super) fn pipeline_items<'s>(&self, f: &'s For) -> Res<Option<Vec<&'s Stmt>>> {
        if !Self::double_buffered(f) {
            if f.annotations.get(WGMMA_IN_FLIGHT_ATTR).is_some() {
                let name = self.func.vars[f.var].name.clone();
                return Err(self.unsupported(
                    &format!("loop `{name}` annotated `{WGMMA_IN_FLIGHT_ATTR}`"),
                    "products stay in flight only in a multi-buffered run loop \
                     (`double_buffer`)",
                ));
            }
            return Ok(None);
        }
        let items: Vec<&Stmt> = match &f.body {
            Stmt::Seq(v) => v.iter().collect(),
            other => vec![other],
        };
        let name = self.func.vars[f.var].name.clone();
        let what = format!("loop `{name}` annotated `double_buffer`");
        let Some((copy, rest)) = items.split_first() else {
            return Err(self.unsupported(&what, "its body is empty"));
        };
        let (mut w, mut r) = (HashSet::new(), HashSet::new());
        accesses(copy, &mut w, &mut r);
        let staged: Vec<BufferId> = w
            .iter()
            .copied()
            .filter(|b| self.double_window(*b))
            .collect();
        let [buf] = staged.as_slice() else {
            return Err(self.unsupported(
                &what,
                "its body must start with the copy into one shared buffer's window (a \
                 `cache_read(.., \"shared\")` moved under it by `compute_at`)",
            ));
        };
        for s in rest {
            let (mut w2, mut r2) = (HashSet::new(), HashSet::new());
            accesses(s, &mut w2, &mut r2);
            if w2.contains(buf) {
                return Err(
                    self.unsupported(&what, "only its first statement may write the window")
                );
            }
        }
        if super::tma::tma_requested(f) && !self.one_barrier(&items) {
            return Err(self.unsupported(
                &what,
                format!(
                    "with `{}` the rest of its body must write no shared memory",
                    super::tma::TMA_ATTR
                ),
            ));
        }
        match f.annotations.get(WGMMA_IN_FLIGHT_ATTR) {
            None => {}
            Some(_) if !Self::in_flight(f) => {
                return Err(self.unsupported(
                    &what,
                    format!("`{WGMMA_IN_FLIGHT_ATTR}` keeps one product in flight: its value is 1"),
                ))
            }
            Some(_) if !self.one_barrier(&items) => {
                return Err(self.unsupported(
                    &what,
                    format!(
                        "with `{WGMMA_IN_FLIGHT_ATTR}` the rest of its body must write no shared \
                         memory"
                    ),
                ))
            }
            Some(_) => {}
        }
        Ok(Some(items))
    }

    /// Whether `b` is declared as a double-buffered window (its offset to the current half,
    /// `(L - min) % 2 * size`, in its `BufInfo`).
    fn double_window(&self, b: BufferId) -> bool {
        self.bufs
            .get(b.index())
            .and_then(Option::as_ref)
            .is_some_and(|i| i.stage.is_some())
    }

    /// Before loop `f` (`start`, `end`: its range as C text): the first `d` iterations' copies
    /// (one group each; with `d` = 1 the copy alone, as the group count then does not matter).
    pub(super) fn write_pipeline_prologue(
        &mut self,
        f: &For,
        copy: &Stmt,
        start: &str,
        end: &str,
    ) -> Res<()> {
        let first = self.expr(&f.min)?.0;
        let d = Self::prefetch_distance(f);
        // Copies by the tensor copy engine: the stages' barriers first (`tma.rs`).
        if let Some(t) = self.tma_of_run(f.var) {
            self.write_tma_init(&t);
            // A producer warp makes every copy; the other warps run the loop (closed in the
            // epilogue).
            if let Some(y) = t.producer {
                return self.write_producer_warp(f, &t, copy, y, start, end);
            }
        }
        for j in 0..d {
            let at = if j == 0 {
                first.clone()
            } else {
                format!("{first} + {j}")
            };
            let cond = if j == 0 {
                format!("{start} < {end}")
            } else {
                format!("{start} + {j} < {end}")
            };
            self.line(&format!("if ({cond}) {{"));
            self.indent += 1;
            self.write_pipelined_copy(f, copy, &at)?;
            self.indent -= 1;
            if d > 1 {
                self.line("} else {");
                self.line("    sptir_cp_async_commit();");
            }
            self.line("}");
        }
        Ok(())
    }

    /// The body of iteration `v` (C text) of loop `f` ending at `end` (see the module
    /// documentation): with one barrier, this iteration's copy awaited, the barrier, iteration
    /// `v + d`'s copy (an empty group past the end), the rest of `items`; otherwise the copy
    /// first and the rest between two barriers.
    pub(super) fn write_pipeline_iteration(
        &mut self,
        f: &For,
        items: &[&Stmt],
        v: &str,
        end: &str,
    ) -> Res<()> {
        let d = Self::prefetch_distance(f);
        let one = self.one_barrier(items);
        // Stages the warps release (`tma.rs`): no copy but the engine's, no block barrier.
        let release = one && self.warps_release(f);
        let runs = Self::ss_runs(f);
        let run_at = |j: i64| {
            if j == 0 {
                v.to_string()
            } else {
                format!("{v} + {j}")
            }
        };
        if release {
            if let Some(t) = self.tma_of_run(f.var) {
                for j in 0..runs {
                    self.write_tma_wait(f, &t, &run_at(j))?;
                }
            }
        } else if one {
            self.line(&format!("sptir_cp_async_wait<{}>();", d - 1));
            if let Some(t) = self.tma_of_run(f.var) {
                self.write_tma_wait(f, &t, v)?;
            }
            self.write_barrier();
        }
        if self.producer_of(f).is_none() {
            self.line(&format!("if ({v} + {d} < {end}) {{"));
            self.indent += 1;
            self.write_pipelined_copy(f, items[0], &format!("{v} + {d}"))?;
            self.indent -= 1;
            self.line("} else {");
            self.line("    sptir_cp_async_commit();");
            self.line("}");
        }
        if !one {
            self.line(&format!("sptir_cp_async_wait<{d}>();"));
            self.write_barrier();
        }
        let rest: Vec<Stmt> = items[1..].iter().map(|s| (*s).clone()).collect();
        let in_flight = Self::in_flight(f);
        if in_flight {
            self.wgmma_in_flight = Some(None);
        }
        if let Some(units) = self.a_stage.as_ref().and_then(|st| st.ss_row_units()) {
            self.write_ss_products(f, &Stmt::Seq(rest), units, in_flight, v, runs)?;
        } else {
            self.write_stmt(&Stmt::Seq(rest))?;
        }
        // (The product recorded what the epilogue waits for.)
        if self.wgmma_in_flight == Some(None) {
            let name = self.func.vars[f.var].name.clone();
            return Err(self.unsupported(
                &format!("loop `{name}` annotated `{WGMMA_IN_FLIGHT_ATTR}`"),
                "its body holds no warpgroup product (`warpgroup` row warps of 2:4 products)",
            ));
        }
        if !one {
            self.write_barrier();
        }
        if release {
            for j in 0..runs {
                self.write_tma_release(f, &run_at(j), end)?;
            }
        }
        Ok(())
    }

    /// The products of `runs` runs from iteration `v` (C text) of run loop `f`, reading `A`
    /// from shared memory (`mma/stage_a.rs`, `wgmma_ss`; `rows` row units a warp): `body`
    /// written for each run twice, every row unit's metadata of every run into `sptir_er`
    /// first, then each product issued, between one `wgmma.fence` and one
    /// `wgmma.commit_group`; then the wait, for the group before this one where the products
    /// stay in flight (`in_flight`), else for this one.
    fn write_ss_products(
        &mut self,
        f: &For,
        body: &Stmt,
        rows: i64,
        in_flight: bool,
        v: &str,
        runs: i64,
    ) -> Res<()> {
        self.line(&format!("uint32_t sptir_er[{}];", rows * runs));
        for pass in [super::SsPass::Metadata, super::SsPass::Issue] {
            if pass == super::SsPass::Issue {
                self.line("sptir_wgmma_fence();");
            }
            for j in 0..runs {
                // Run `v + j`: the loop's variable stands for it.
                if j > 0 {
                    self.let_subst.insert(f.var, format!("({v} + {j})"));
                }
                self.ss_er_base = j * rows;
                self.ss_pass = Some(pass);
                let r = self.write_stmt(body);
                self.ss_pass = None;
                self.ss_er_base = 0;
                self.let_subst.remove(&f.var);
                r?;
            }
        }
        let Some((units, rows)) = self.ss_product.take() else {
            return Err(self.invalid("a run reading A from shared memory without its products"));
        };
        self.line("sptir_wgmma_commit();");
        self.write_wgmma_waits(units, rows, u8::from(in_flight));
        Ok(())
    }

    /// After a pipelined loop (its body's `items`, ending at `end`): the products kept in
    /// flight completed, and with one barrier per iteration a barrier (every thread done with
    /// the windows before anything after the loop, a loop around it included, copies into them
    /// again). In a persistent kernel (`tma.rs`'s `TMA_PERSISTENT_ATTR`) the warps release the
    /// last iteration's stage instead, and the barrier comes after the tile loop.
    pub(super) fn write_pipeline_epilogue(
        &mut self,
        f: &For,
        items: &[&Stmt],
        end: &str,
    ) -> Res<()> {
        if let Some(Some((units, rows))) = self.wgmma_in_flight.take() {
            self.write_wgmma_waits(units, rows, 0);
        }
        self.write_tma_release_last(f, end)?;
        if self.producer_of(f).is_some() {
            // The consumer warps' branch (opened by `write_producer_warp`).
            if let Some(k) = self.kernel.as_mut() {
                k.divergent -= 1;
            }
            self.indent -= 1;
            self.line("}");
        }
        let tma = self.tma_of_run(f.var);
        let persistent = tma.as_ref().is_some_and(|t| t.persistent.is_some());
        if self.one_barrier(items) && !persistent {
            self.write_barrier();
        }
        if let Some(t) = tma {
            self.write_tma_end(&t);
        }
        Ok(())
    }

    /// Before run loop `f` (`start`, `end`: its range as C text) whose window `t` has a producer
    /// warp (`threadIdx.y == y`, see `tma.rs`'s `TMA_PRODUCER_ATTR`): the lane that warp elects
    /// copies every iteration's stage, each after its previous use was released; then the other
    /// warps' branch is opened, which the loop's epilogue closes.
    fn write_producer_warp(
        &mut self,
        f: &For,
        t: &super::tma::TmaWindow,
        copy: &Stmt,
        y: i64,
        start: &str,
        end: &str,
    ) -> Res<()> {
        // The window is the block's: its start may not differ between threads (else the
        // block's first thread could not copy it for all).
        let base = self.tma_window_start(t)?;
        if base.iter().any(|e| self.thread_dependent(e)) {
            let name = self.func.vars[f.var].name.clone();
            return Err(self.unsupported(
                &format!(
                    "loop `{name}` annotated `{}`",
                    super::tma::TMA_PRODUCER_ATTR
                ),
                "the window's start depends on the thread",
            ));
        }
        self.line(&format!("if (threadIdx.y == {y}) {{"));
        self.indent += 1;
        // One lane elected (`elect.sync`, see `tma.rs`): the copies' operands stay uniform.
        self.line("if (sptir_elect_one()) {");
        self.indent += 1;
        // The copies as the block's first thread would make them.
        let vars: Vec<VarId> = self.kernel.as_ref().map_or_else(Vec::new, |k| {
            k.bound
                .iter()
                .zip(&k.bound_vars)
                .filter(|(tag, _)| tag.starts_with("threadIdx"))
                .map(|(_, v)| *v)
                .collect()
        });
        for v in vars {
            let name = self.expr(&Expr::Var(v))?.0;
            let ct = c_type(self.func.vars[v].dtype).unwrap_or("int32_t");
            self.line(&format!("const {ct} {name} = 0;"));
        }
        let ct = c_type(self.func.vars[f.var].dtype).unwrap_or("int64_t");
        self.line(&format!(
            "for ({ct} sptir_k = {start}; sptir_k < {end}; ++sptir_k) {{"
        ));
        self.indent += 1;
        self.write_pipelined_copy(f, copy, "sptir_k")?;
        self.indent -= 1;
        self.line("}");
        self.indent -= 1;
        self.line("}");
        // The warp reconverged before the barriers after the loop (`.aligned`: all its lanes
        // at once).
        self.line("__syncwarp();");
        self.indent -= 1;
        self.line("} else {");
        self.indent += 1;
        if let Some(k) = self.kernel.as_mut() {
            k.divergent += 1;
        }
        Ok(())
    }

    /// Writes `copy` as iteration `at` (C text) of loop `f` would: the loop's variable stands
    /// for `at`, 16-byte copies into the window as `cp.async`, then the group committed.
    fn write_pipelined_copy(&mut self, f: &For, copy: &Stmt, at: &str) -> Res<()> {
        self.let_subst.insert(f.var, format!("({at})"));
        let r = match self.tma_of_run(f.var) {
            // By the tensor copy engine (`tma.rs`).
            Some(t) => self.write_tma_copy(f, &t, at),
            None => {
                self.cp_async = true;
                let r = self.write_stmt(copy);
                self.cp_async = false;
                r
            }
        };
        // A staged `A` (`mma/stage_a.rs`): its tiles of the same run, in the same group.
        let r = r.and_then(|_| self.write_a_stage_copy(at));
        self.let_subst.remove(&f.var);
        r?;
        // (Copies all by the copy engine, with a producer warp: no `cp.async` group waited on.)
        let engine_only = self.tma_of_run(f.var).is_some()
            && (self.a_stage.is_none() || self.a_stage_tma_bytes() > 0);
        if !(engine_only && self.producer_of(f).is_some()) {
            self.line("sptir_cp_async_commit();");
        }
        Ok(())
    }
}

/// `cp.async` and its groups, as every pipelined kernel's source defines them: PTX on a GPU
/// (sm_80+); in the emulator the copy whose bytes land when the thread's wait completes their
/// group. A copy moves 16 bytes of any element type (16-bit values, 8-bit positions:
/// `mma/stage_a.rs`). Public so that hand-written emulator tests use the same definitions.
pub const CP_ASYNC_PRELUDE: &str = r#"#ifndef SPTIR_EMU
template <class T>
static __device__ __forceinline__ void sptir_cp_async16(T* dst, const T* src) {
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(d), "l"(src) : "memory");
}
static __device__ __forceinline__ void sptir_cp_async_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int N>
static __device__ __forceinline__ void sptir_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
}
#else
/* One 16-byte load (alignment checked, counted as one access) whose bytes land in the shared
   array when the thread's wait completes their group; until then the elements are in flight
   (any access to them is a race; alignment checked). */
template <class T, bool W>
static void sptir_cp_async16(const ::sptir_emu::SPtr<T>& dst, const ::sptir_emu::GPtr<T, W>& src) {
    constexpr int N = 16 / (int)sizeof(T);
    if (dst.off % N != 0)
        ::sptir_emu::fail_unsupported("misaligned 16-byte shared store");
    const int4 v = ::sptir_emu::vector_load<int4, T, W, N>(src);
    ::sptir_emu::cp_async_issue(dst.m, dst.off, &v, N, sizeof(T));
}
static void sptir_cp_async_commit() { ::sptir_emu::cp_async_commit(); }
template <int N>
static void sptir_cp_async_wait() { ::sptir_emu::cp_async_wait(N); }
#endif
"#;
