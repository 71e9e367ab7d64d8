//! Warpgroup tensor-core products (Hopper's `wgmma`, sm_90a): the four warps of a warpgroup
//! issue their 2:4 products as one `wgmma.mma_async.sp` that reads `B` from shared memory
//! through a descriptor.
//!
//! # When
//!
//! A `threadIdx.y` loop over the block's warps annotated `warpgroup` (the schedule's
//! `sch.annotate(loop, "warpgroup", 1)`) around a `mma_sp_m16n8k32` product that a serial loop
//! keeps in registers with a unit loop of 1 to 32 tiles of 8 columns (`accumulate.rs`). The
//! warps of a warpgroup (4 consecutive `threadIdx.y` values: `blockDim.x` is 32 and the loop's
//! extent a multiple of 4) then each hold their own `A` fragment and metadata and all read the
//! same `B`: the 32 rows × 8 U columns of a shared window (`shared_window.rs`) that does not
//! move with the warp loop (nor with a row unit loop). The instruction is
//! `wgmma.mma_async.sp.sync.aligned.m64n{8U}k32.f32.{f16,bf16}` with `A` in registers: warp
//! `w`'s registers are rows `16 w .. 16 w + 15` of the 64-row `A` in `mma.sp` m16n8k32's
//! layouts (fragment and metadata alike, sparsity selector 0), and its accumulators are its
//! units' m16n8 fragments one after another — the registers the per-warp form keeps
//! (`sptir_acc[u]`), so nothing around the product changes. A guard on the tile is refused:
//! the four warps must all issue the instruction.
//!
//! # The window
//!
//! A shared window read this way holds 8 × 8 core matrices (8 rows `k` of 16 bytes: 8
//! consecutive columns): element `(k, n)` at `(n / 8) * 8 R + 8 k + n % 8` (`R` the window's
//! rows), the layout PTX calls MN-major without swizzling (transposed `B`). The descriptor
//! gives its start (the tile's first row and column: a multiple of 8 each, 128-byte aligned),
//! the byte distance between core matrices along `k` (LBO, 128) and along `n` (SBO, `16 R`).
//! A window the tensor copy engine fills (a run loop annotated `tma`, `tma.rs`) is laid out
//! as its 128-byte-swizzled boxes of 64 columns instead, and read through a descriptor of
//! layout 1 (128-byte swizzle): LBO the bytes between boxes (`128 R`), SBO 1024 (8 rows of
//! 128 bytes); the tile must then start at a box (`_sw128` forms).
//! Every thread fences its writes of shared memory before the async proxy reads them
//! (`fence.proxy.async.shared::cta` before each barrier of the kernel). The product waits for
//! its own completion (`wgmma.wait_group 0`), so the window may be overwritten after the next
//! barrier as before; in a run loop annotated `wgmma_in_flight` it stays in flight until the
//! next product is issued (`wgmma.wait_group 1`; the windows and the loop's unrolling that
//! this takes: `pipeline.rs`). Each wait names the accumulators it completes (`"+f"`), so the
//! compiler reads them only after it.
//!
//! In a double-buffered run loop (`pipeline.rs`) each warp reads its row units' `A` fragments
//! and metadata one run ahead into registers (`sptir_an`, `sptir_en`: the first run's before the
//! loop, run `k + 1`'s before run `k`'s product), so their loads are in flight during the
//! product instead of before it; with the run loop annotated `stage_a`, they are copied into
//! shared memory with `B`'s slices instead (`stage_a.rs`).
//!
//! The layouts are those of CUTLASS's `SM90::GMMA` traits for the sparse register-`A` form
//! (checked on the hardware by `bench/gpu/probe_wgmma_sp.cu`). The emulator computes each
//! warp's units as `mma.sp` products whose `B` fragments it reads from the window at the
//! addresses the descriptor names (race-checked).

use super::*;

/// The loop annotation asking for a warpgroup's products as one `wgmma` (see the module
/// documentation).
pub const WARPGROUP_ATTR: &str = "warpgroup";

/// The most units (tiles of 8 columns) one warpgroup product covers: `m64n256k32`.
pub(crate) const MAX_WARPGROUP_UNITS: i64 = 32;

/// Whether the shared buffer `b` is read by a tensorized product under a loop annotated
/// `warpgroup` in `part`.
pub(crate) fn read_by_warpgroup(part: &Stmt, b: BufferId) -> bool {
    let mut found = false;
    part.visit(&mut |s| {
        let Stmt::For(w) = s else {
            return;
        };
        if w.annotations.get(WARPGROUP_ATTR).is_none() {
            return;
        }
        for (n, form) in tensorized_nests(&w.body) {
            if form == Mma::Fill {
                continue;
            }
            n.body.visit(&mut |t| {
                t.for_each_expr(|e| {
                    e.visit(&mut |x| {
                        found |= matches!(x, Expr::Load { buffer, .. } if *buffer == b)
                    })
                })
            });
        }
    });
    found
}

impl Writer<'_> {
    /// Whether the warp loops `warps` around a product (see `Writer::product_item`) ask for
    /// warpgroup products, checked: the annotated loop binds `threadIdx.y` over a multiple of
    /// 4 warps of 32 lanes and the product is a 2:4 one.
    pub(super) fn warpgroup_requested(&self, warps: &[&For], form: Mma) -> Res<bool> {
        let Some(w) = warps
            .iter()
            .find(|w| w.annotations.get(WARPGROUP_ATTR).is_some())
        else {
            return Ok(false);
        };
        let what = format!("warpgroup loop `{}`", self.func.vars[w.var].name);
        let lanes = self
            .kernel
            .as_ref()
            .and_then(|k| k.dims.get("threadIdx.x"))
            .and_then(|d| d.eval(&|_| None));
        let warps_y = const_int(&w.extent);
        if w.thread.as_deref() != Some("threadIdx.y")
            || lanes != Some(32)
            || !warps_y.is_some_and(|n| n > 0 && n % 4 == 0)
        {
            return Err(self.unsupported(
                &what,
                "a warpgroup is 4 consecutive warps: the annotated loop must bind threadIdx.y \
                 over a multiple of 4, with blockDim.x 32",
            ));
        }
        if form != Mma::SpM16n8k32 {
            return Err(self.unsupported(
                &what,
                "warpgroup products are written for `mma_sp_m16n8k32` (2:4 sparse A) only",
            ));
        }
        Ok(true)
    }

    /// `(n / 8, n % 8)` of a core-matrix window's column `n` (its start taken off), simplified
    /// against the ranges of the function's loops and block iterators (see
    /// `simplify_in_loops`).
    pub(crate) fn core_split(&self, n: &Expr) -> (Expr, Expr) {
        let dt = n.dtype(self.func);
        let eight = Expr::Int(8, dt);
        let hi = Expr::binary(sparsetir_ir::BinOp::FloorDiv, n.clone(), eight.clone());
        let lo = Expr::binary(sparsetir_ir::BinOp::FloorMod, n.clone(), eight);
        (self.simplify_in_loops(&hi), self.simplify_in_loops(&lo))
    }

    /// Writes the unit loop `unit` of a warpgroup's accumulating loop (its `A` fragment and
    /// metadata already written, `mma_share_a`) as one `wgmma` of all its units.
    /// The row units of the products being written (each its own product): the extent of
    /// their loop, 1 without one.
    fn mma_row_units(&self) -> i64 {
        self.mma_acc_rows.map_or(1, |(r, _)| {
            find_loop(&self.func.body, r)
                .and_then(|l| const_int(&l.extent))
                .unwrap_or(1)
        })
    }

    /// Waits until at most `pending` groups of warpgroup products are in flight, naming the
    /// accumulators of each of `rows` row units of `units` units (so that the compiler reads
    /// them only after).
    pub(crate) fn write_wgmma_waits(&mut self, units: i64, rows: i64, pending: u8) {
        for r in 0..rows {
            let acc = if rows > 1 {
                format!("sptir_acc + {r} * {units}")
            } else {
                "sptir_acc".to_string()
            };
            self.line(&format!(
                "sptir_wgmma_wait_n{}<{pending}>({acc});",
                8 * units
            ));
        }
    }

    pub(crate) fn write_warpgroup_product(&mut self, unit: &For, warp_y: VarId) -> Res<()> {
        // (The pass that loads a run's metadata writes no product: `stage_a.rs`, `wgmma_ss`.)
        if self.ss_pass == Some(SsPass::Metadata) {
            return Ok(());
        }
        let what = format!(
            "warpgroup product of loop `{}`",
            self.func.vars[unit.var].name
        );
        let units = const_int(&unit.extent).unwrap_or(0);
        let nests = tensorized_nests(&unit.body);
        let SpProduct {
            vars,
            b,
            bb,
            meta,
            suffix,
            ..
        } = self.sp_product(&nests, &what)?;
        let mut b_at = bb.clone();
        b_at.rewrite_post_order(&mut |x| {
            if *x == meta {
                *x = Expr::Var(vars[3]);
            }
        });
        let Expr::Load { buffer, indices } = &b_at else {
            return Err(self.unsupported(&what, "B must be a load"));
        };
        let info = self.bufs.get(buffer.index()).and_then(|i| i.as_ref());
        let swizzled = info.is_some_and(|i| i.swizzled);
        let window = info.map(|i| i.window.clone()).unwrap_or_default();
        let rows = info.and_then(|i| i.core);
        let Some(rows) = rows else {
            return Err(self.unsupported(
                &what,
                "B must be read from a shared window (`cache_read(..., \"shared\")` moved into \
                 the accumulating loop by `compute_at`)",
            ));
        };
        // B's tile: rows 4 q + p and columns n + 8 u from one start, the same for the warps of
        // a warpgroup and every row unit.
        let idx = resolved(indices, b);
        let ty = |v: VarId| self.func.vars[v].dtype;
        let var = |v: VarId| Expr::Var(v);
        let k_rel = Expr::add(
            Expr::mul(var(vars[2]), Expr::Int(4, ty(vars[2]))),
            var(vars[3]),
        );
        let n_rel = Expr::add(
            var(vars[1]),
            Expr::mul(var(unit.var), Expr::Int(8, ty(unit.var))),
        );
        let zero = |vs: &[VarId]| -> HashMap<VarId, Expr> {
            vs.iter().map(|&v| (v, Expr::Int(0, ty(v)))).collect()
        };
        let geometry = idx.len() == 2
            && self.provably_zero(&Expr::sub(
                Expr::sub(
                    idx[0].clone(),
                    super::subst(&idx[0], &zero(&[vars[2], vars[3]])),
                ),
                k_rel,
            ))
            && self.provably_zero(&Expr::sub(
                Expr::sub(
                    idx[1].clone(),
                    super::subst(&idx[1], &zero(&[vars[1], unit.var])),
                ),
                n_rel,
            ));
        if !geometry {
            return Err(self.unsupported(
                &what,
                "B's tile must be 32 consecutive rows (4 group + position) by the units' 8 U \
                 consecutive columns of its window",
            ));
        }
        let mut fixed = vec![warp_y];
        fixed.extend(self.mma_acc_rows.map(|(r, _)| r));
        if fixed.iter().any(|&v| !self.independent_of(&b_at, b, v)) {
            return Err(self.unsupported(
                &what,
                "the warps of a warpgroup (and its row units) must read the same B tile",
            ));
        }
        let start: Vec<Expr> = idx
            .iter()
            .map(|i| {
                let at = super::subst(i, &zero(&[vars[1], vars[2], vars[3], unit.var]));
                self.simplify_in_loops(&at)
            })
            .collect();
        if swizzled {
            // Swizzled boxes (`tma.rs`): the tile starts a box's row group, 1024-byte aligned.
            let rel = |d: usize, n: i64| {
                let e = match window.get(d) {
                    Some(base) => Expr::sub(start[d].clone(), base.clone()),
                    None => start[d].clone(),
                };
                affine(&self.simplify_in_loops(&e)).is_some_and(|a| aligned_steps(&a, &[], n))
            };
            if !(rel(0, 8) && rel(1, super::super::tma::TMA_BOX_COLS)) {
                return Err(self.unsupported(
                    &what,
                    "B's tile must start at a box of its window (rows a multiple of 8, columns \
                     of 64)",
                ));
            }
        } else {
            let off = self.flat_offset(*buffer, &start);
            let aligned = off.is_some_and(|off| aligned_steps(&off, &[], 64));
            if !aligned {
                return Err(self.unsupported(
                    &what,
                    "B's tile must start at a core matrix of its window (row and column \
                     multiples of 8)",
                ));
            }
        }
        let at = [
            "0".to_string(),
            "0".to_string(),
            "0".to_string(),
            "0".to_string(),
        ];
        self.let_subst
            .insert(unit.var, int_literal(0, ty(unit.var)));
        let p = self.ptr_at(&b_at, &vars, &at, &b.iters);
        self.let_subst.remove(&unit.var);
        let p = p?;
        let acc = match self.mma_acc_rows {
            Some((r, n)) => format!("sptir_acc + {} * {n}", self.expr(&Expr::Var(r))?.0),
            None => "sptir_acc".to_string(),
        };
        // The descriptor's stride argument: SBO between core matrices along n (`16 R`), or for
        // swizzled boxes LBO between boxes (`128 R`; SBO is 1024).
        let (stride, form) = if swizzled {
            (128 * rows, "_sw128")
        } else {
            (16 * rows, "")
        };
        let n = 8 * units;
        let row_units = self.mma_row_units();
        // The tensor cores read `A` from the stage (`stage_a.rs`, `wgmma_ss`): issued alone,
        // the run's fence, commit and wait written around the run's products.
        if self.ss_pass == Some(SsPass::Issue) {
            let Some(tile) = self.ss_a_tile.take() else {
                return Err(self.invalid("a product reading A from shared memory without its tile"));
            };
            if !swizzled {
                return Err(self.unsupported(
                    &what,
                    "A read from shared memory goes with B's slices by the copy engine (`tma`)",
                ));
            }
            let r = match self.mma_acc_rows {
                Some((rv, _)) => self.expr(&Expr::Var(rv))?.0,
                None => "0".to_string(),
            };
            if let Some(kept) = &mut self.wgmma_in_flight {
                *kept = Some((units, row_units));
            }
            self.ss_product = Some((units, row_units));
            self.line(&format!(
                "sptir_wgmma_sp_m64n{n}k32_{suffix}_sw128_ss({acc}, sptir_as + {tile}, \
                 sptir_er[{} + {r}], {p}, {stride});",
                self.ss_er_base
            ));
            self.wgmma_forms.insert((units, suffix, swizzled));
            self.wgmma_ss_forms.insert((units, suffix));
            return Ok(());
        }
        match &mut self.wgmma_in_flight {
            // Kept in flight until the next product is issued (`pipeline.rs`).
            Some(kept) => {
                *kept = Some((units, row_units));
                self.line(&format!(
                    "sptir_wgmma_sp_m64n{n}k32_{suffix}{form}_async({acc}, sptir_a, sptir_e, {p}, {stride});"
                ));
                self.line(&format!("sptir_wgmma_wait_n{n}<1>({acc});"));
            }
            None => self.line(&format!(
                "sptir_wgmma_sp_m64n{n}k32_{suffix}{form}({acc}, sptir_a, sptir_e, {p}, {stride});"
            )),
        }
        self.wgmma_forms.insert((units, suffix, swizzled));
        Ok(())
    }

    /// Writes, before the double-buffered run loop `f` of a warpgroup's plan, the registers that
    /// hold each row unit's `A` fragment and metadata one run ahead (`sptir_an[r]`,
    /// `sptir_en[r]`) and fills them with the first run's. Returns the C text of the next run
    /// (`v + 1`, `v` the loop variable's text) and the end the products then read ahead to.
    pub(crate) fn write_a_prefetch_prologue(
        &mut self,
        f: &For,
        plan: &AccumulatorPlan,
        start: &str,
    ) -> Res<()> {
        let Some(unit) = plan.unit.and_then(|u| find_loop(&f.body, u)) else {
            return Err(self.invalid("a warpgroup's plan without its unit loop"));
        };
        let rows = plan.rows.map(|(r, _)| r);
        let n = match rows.and_then(|r| find_loop(&f.body, r)) {
            Some(r) => const_int(&r.extent).unwrap_or(1),
            None => 1,
        };
        self.line(&format!("uint32_t sptir_an[{n}][4], sptir_en[{n}];"));
        self.line("if (sptir_acc_live) {");
        self.indent += 1;
        // The warp loops' variables, declared before the loop (the plan's `warp_decl`).
        let warps: Vec<VarId> = self
            .product_item(f)
            .map(|(_, w)| w.iter().map(|w| w.var).collect())
            .unwrap_or_default();
        for &w in &warps {
            self.bind(w)?;
        }
        self.let_subst.insert(f.var, format!("({start})"));
        let mut r = Ok(());
        for k in 0..n {
            if let Some(rv) = rows {
                self.let_subst
                    .insert(rv, int_literal(k, self.func.vars[rv].dtype));
            }
            r = self.write_unit_fragment(
                unit,
                &format!("sptir_an[{k}]"),
                &format!("sptir_en[{k}]"),
            );
            if r.is_err() {
                break;
            }
        }
        if let Some(rv) = rows {
            self.let_subst.remove(&rv);
        }
        self.let_subst.remove(&f.var);
        for &w in &warps {
            self.unbind(w);
        }
        self.indent -= 1;
        self.line("}");
        r
    }

    /// At a warpgroup's unit loop inside a run loop that reads `A` one run ahead
    /// (`a_prefetch`: the run loop's variable, the next run's text, the loop's end): this run's
    /// fragment and metadata taken from the prefetch registers into `sptir_a`, `sptir_e`, and
    /// the next run's read into them (its loads in flight during this run's product). Opens a
    /// scope the caller closes.
    pub(crate) fn write_prefetched_a(&mut self, unit: &For) -> Res<()> {
        let Some((run, next, end)) = self.a_prefetch.clone() else {
            return Err(self.invalid("no prefetch of A in progress"));
        };
        let r = match self.mma_acc_rows {
            Some((rv, _)) => self.expr(&Expr::Var(rv))?.0,
            None => "0".to_string(),
        };
        self.line("{");
        self.indent += 1;
        self.line(&format!(
            "uint32_t sptir_a[4] = {{sptir_an[{r}][0], sptir_an[{r}][1], sptir_an[{r}][2], \
             sptir_an[{r}][3]}}, sptir_e = sptir_en[{r}];"
        ));
        self.line(&format!("if ({next} < {end}) {{"));
        self.indent += 1;
        self.let_subst.insert(run, format!("({next})"));
        let res =
            self.write_unit_fragment(unit, &format!("sptir_an[{r}]"), &format!("sptir_en[{r}]"));
        self.let_subst.remove(&run);
        self.indent -= 1;
        self.line("}");
        res
    }

    /// The `A` fragment and metadata of the 2:4 product in `unit` (a unit loop they do not move
    /// with) into `dst_a[4]` and `dst_e`, in a scope of their own.
    fn write_unit_fragment(&mut self, unit: &For, dst_a: &str, dst_e: &str) -> Res<()> {
        let what = format!(
            "warpgroup product of loop `{}`",
            self.func.vars[unit.var].name
        );
        let nests = tensorized_nests(&unit.body);
        let SpProduct {
            vars,
            b,
            a,
            meta,
            meta_dt,
            ..
        } = self.sp_product(&nests, &what)?;
        if mentions_via(b, a, unit.var) || mentions_via(b, &meta, unit.var) {
            return Err(self.unsupported(&what, "its A fragment must not move with the unit loop"));
        }
        let iters = iters_fixed_by(b, unit.var);
        self.line("{");
        self.indent += 1;
        self.line(&format!("{dst_e} = 0u;"));
        let r = self.write_sp_a_fragment(a, &meta, meta_dt, &vars, b, &iters, Some((dst_a, dst_e)));
        self.indent -= 1;
        self.line("}");
        r
    }

    /// The 2:4 product that `nests` (a unit loop's tensorized nests) must be alone: its nest's
    /// variables and block, its operands and metadata.
    pub(super) fn sp_product<'n>(&self, nests: &'n [(For, Mma)], what: &str) -> Res<SpProduct<'n>> {
        let [(nest, Mma::SpM16n8k32)] = nests else {
            return Err(self.unsupported(what, "the unit loop must hold one 2:4 product"));
        };
        let (vars, b) = self.mma_nest(nest, Mma::SpM16n8k32)?;
        let Stmt::Store(st) = b.body.single() else {
            return Err(self.unsupported(what, "the block's body must be one store"));
        };
        let mention = |e: &Expr, v: VarId| mentions_via(b, e, v);
        let c_target = Expr::Load {
            buffer: st.buffer,
            indices: st.indices.clone(),
        };
        let (a, bb, suffix) = self.mma_operands(what, &vars, st, &c_target, &mention)?;
        let (meta, meta_dt) = self.sp_metadata(what, bb, vars[3], &mention)?;
        Ok(SpProduct {
            vars,
            b,
            a,
            bb,
            meta,
            meta_dt,
            suffix,
        })
    }

    /// Whether `e` simplifies to 0 against the ranges of the function's loops.
    fn provably_zero(&self, e: &Expr) -> bool {
        matches!(self.simplify_in_loops(e), Expr::Int(0, _))
    }

    /// `e` simplified against the ranges of the function's loops and block iterators, those of
    /// one iteration replaced by their start.
    fn simplify_in_loops(&self, e: &Expr) -> Expr {
        let (an, single) = self.loop_facts.get_or_init(|| loop_facts(self.func));
        an.simplify(self.func, &super::subst(e, single))
    }
}

/// What the function's loops and block iterators say of their variables, for
/// `Writer::simplify_in_loops` (made once per function): an analyzer knowing their ranges, and
/// the start of each one of a single iteration.
fn loop_facts(func: &PrimFunc) -> (sparsetir_arith::Analyzer, HashMap<VarId, Expr>) {
    let mut an = sparsetir_arith::Analyzer::new();
    an.assume_no_overflow(true);
    let mut single = HashMap::new();
    let mut bind = |v: VarId, min: &Expr, extent: &Expr| {
        an.bind_range(v, min, extent);
        if const_int(extent) == Some(1) {
            single.insert(v, min.clone());
        }
    };
    func.body.visit(&mut |s| match s {
        Stmt::For(l) => bind(l.var, &l.min, &l.extent),
        Stmt::Block(b) => {
            for it in &b.iters {
                bind(it.var, &it.min, &it.extent);
            }
        }
        _ => {}
    });
    (an, single)
}

/// A 2:4 product nest's parts (`Writer::sp_product`).
pub(super) struct SpProduct<'n> {
    pub vars: Vec<VarId>,
    pub b: &'n Block,
    pub a: &'n Expr,
    pub bb: &'n Expr,
    pub meta: Expr,
    pub meta_dt: DType,
    pub suffix: &'static str,
}

/// The device functions of the `wgmma` forms `forms` (units, operand type suffix, whether `B`'s
/// window is in 128-byte-swizzled boxes: `tma.rs`): PTX for sm_90a, each warp's units as
/// `mma.sp` products in the emulator; and the async-proxy fence. Each form is issued by
/// `..._async` (fence, product, commit) and completed by `sptir_wgmma_wait_n{8 U}<N>`
/// (`wgmma.wait_group N`, the accumulators tied to it so that the compiler reads them only
/// after it); the plain form is both, with `N` = 0. A core-matrix form takes SBO (LBO 128), a
/// swizzled one (`_sw128`) LBO (SBO 1024, layout 1).
/// The inline-assembly operands tying `regs` accumulator registers (`c[i / 4][i % 4]`), read and
/// written (`"+f"`).
pub(super) fn tied(regs: usize) -> String {
    (0..regs)
        .map(|i| format!("\"+f\"(c[{}][{}])", i / 4, i % 4))
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn wgmma_prelude(forms: &BTreeSet<(i64, &'static str, bool)>) -> String {
    let widths: BTreeSet<i64> = forms.iter().map(|&(u, _, _)| u).collect();
    let mut s = String::from(
        "#ifndef SPTIR_EMU\n\
         #if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)\n\
         #error \"sparsetir: this module uses wgmma (Hopper's warpgroup tensor cores): compile it for sm_90a\"\n\
         #endif\n\
         static __device__ __forceinline__ void sptir_fence_proxy_async() {\n    \
         asm volatile(\"fence.proxy.async.shared::cta;\" ::: \"memory\");\n}\n",
    );
    for &units in &widths {
        let regs = 4 * units as usize;
        let _ = write!(
            s,
            "template <int N>\n\
             static __device__ __forceinline__ void sptir_wgmma_wait_n{}(float (*c)[4]) {{\n    \
             asm volatile(\"wgmma.wait_group.sync.aligned %{regs};\" : {} : \"n\"(N) : \"memory\");\n}}\n",
            8 * units,
            tied(regs)
        );
    }
    for &(units, ty, sw) in forms {
        let n = 8 * units;
        let regs = 4 * units as usize;
        let d: Vec<String> = (0..regs).map(|i| format!("%{i}")).collect();
        let (name, arg, desc) = if sw {
            (
                format!("sptir_wgmma_sp_m64n{n}k32_{ty}_sw128"),
                "lbo",
                "(uint64_t)((s & 0x3ffffu) >> 4) | ((uint64_t)(lbo >> 4) << 16) | \
                 ((uint64_t)(1024u >> 4) << 32) | (1ull << 62)",
            )
        } else {
            (
                format!("sptir_wgmma_sp_m64n{n}k32_{ty}"),
                "sbo",
                "(uint64_t)((s & 0x3ffffu) >> 4) | ((uint64_t)(128u >> 4) << 16) | \
                 ((uint64_t)(sbo >> 4) << 32)",
            )
        };
        let _ = write!(
            s,
            "static __device__ __forceinline__ void {name}_async(float (*c)[4], \
             const uint32_t* a, uint32_t e, const uint16_t* b, uint32_t {arg}) {{\n    \
             const uint32_t s = (uint32_t)__cvta_generic_to_shared(b);\n    \
             const uint64_t d = {desc};\n    \
             asm volatile(\"wgmma.fence.sync.aligned;\" ::: \"memory\");\n    \
             asm volatile(\"{{ .reg .pred p; setp.ne.b32 p, 1, 0;\\n\"\n                 \
             \"wgmma.mma_async.sp.sync.aligned.m64n{n}k32.f32.{ty}.{ty} {{{}}}, {{%{},%{},%{},%{}}}, %{}, %{}, 0, p, 1, 1, 1; }}\"\n                 \
             : {}\n                 \
             : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(d), \"r\"(e) : \"memory\");\n    \
             asm volatile(\"wgmma.commit_group.sync.aligned;\" ::: \"memory\");\n}}\n\
             static __device__ __forceinline__ void {name}(float (*c)[4], \
             const uint32_t* a, uint32_t e, const uint16_t* b, uint32_t {arg}) {{\n    \
             {name}_async(c, a, e, b, {arg});\n    \
             sptir_wgmma_wait_n{n}<0>(c);\n}}\n",
            d.join(","),
            regs,
            regs + 1,
            regs + 2,
            regs + 3,
            regs + 4,
            regs + 5,
            tied(regs)
        );
    }
    s.push_str(
        "#else\n\
         static inline void sptir_fence_proxy_async() {}\n\
         /* A warp's share of a warpgroup's sparse product: its units as mma.sp m16n8k32 products,\n   \
         B's fragments read from the window where the descriptor names them. */\n\
         /* The element (k, n) of B's tile: in core matrices (sw 0: n / 8 of sbo bytes, k / 8 of\n   \
         lbo, k % 8 rows of 16 bytes) or 128-byte-swizzled boxes (sw 1: n / 64 of lbo bytes, k / 8\n   \
         of sbo, k % 8 rows of 128 bytes whose 16-byte chunks are XORed with k % 8). */\n\
         static int64_t sptir_wgmma_b_elem(const ::sptir_emu::SPtr<uint16_t>& p, int sw, uint32_t lbo, \
         uint32_t sbo, int k, int n) {\n    \
         if (sw == 0)\n        \
         return p.off + (int64_t)(n / 8) * (sbo / 2) + (int64_t)(k / 8) * (lbo / 2) + 8 * (k % 8) + n % 8;\n    \
         return p.off + (int64_t)(n / 64) * (lbo / 2) + (int64_t)(k / 8) * (sbo / 2) + 64 * (k % 8) + \
         ((n % 64) ^ ((k % 8) << 3));\n\
         }\n\
         /* The elements of B's tile holding register r of unit u's fragment of this lane: rows\n   \
         k = 8 r + 2 t (low half) and k + 1 (high half) of column n = 8 u + g. */\n\
         static std::pair<int64_t, int64_t> sptir_wgmma_b_at(const ::sptir_emu::SPtr<uint16_t>& p, int sw, \
         uint32_t lbo, uint32_t sbo, int u, int r) {\n    \
         const int lane = (int)(threadIdx.x & 31), g = lane >> 2, t = lane & 3;\n    \
         const int k = 8 * r + 2 * t, n = 8 * u + g;\n    \
         return {sptir_wgmma_b_elem(p, sw, lbo, sbo, k, n), sptir_wgmma_b_elem(p, sw, lbo, sbo, k + 1, n)};\n\
         }\n\
         template <int U>\n\
         static void sptir_wgmma_sp_emu(float (*c)[4], const uint32_t* a, uint32_t e, \
         const ::sptir_emu::SPtr<uint16_t>& p, int sw, uint32_t lbo, uint32_t sbo, bool bf) {\n    \
         for (int u = 0; u < U; ++u) {\n        \
         uint32_t b[4];\n        \
         for (int r = 0; r < 4; ++r) {\n            \
         const auto o = sptir_wgmma_b_at(p, sw, lbo, sbo, u, r);\n            \
         const uint16_t lo = ::sptir_emu::SRef<uint16_t>(p.data, p.m, o.first).load();\n            \
         const uint16_t hi = ::sptir_emu::SRef<uint16_t>(p.data, p.m, o.second).load();\n            \
         b[r] = (uint32_t)lo | ((uint32_t)hi << 16);\n        \
         }\n        \
         sptir_mma_sp_m16n8k32_emu(c[u], a, b, e, bf);\n    \
         }\n\
         }\n\
         /* The checks of a product's issue (B's tile `p`, `sw` its swizzle), and the window\n   \
         elements of its units' B fragments, added to `reads`. */\n\
         static void sptir_wgmma_issue_checks(const ::sptir_emu::SPtr<uint16_t>& p, int sw) {\n    \
         if (p.off % 8 != 0)\n        \
         ::sptir_emu::fail_unsupported(\"wgmma: the descriptor's start is not 16-byte aligned\");\n    \
         if (sw != 0 && p.off % 512 != 0)\n        \
         ::sptir_emu::fail_unsupported(\"wgmma: a 128-byte-swizzled tile must start 1024-byte aligned\");\n    \
         if ((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) / 128 * 128 + 128 > blockDim.x * blockDim.y * blockDim.z)\n        \
         ::sptir_emu::fail_unsupported(\"wgmma: issued by a warp of a partial warpgroup\");\n\
         }\n\
         static void sptir_wgmma_b_reads(std::vector<std::pair<::sptir_emu::SharedMeta*, int64_t>>& reads, \
         const ::sptir_emu::SPtr<uint16_t>& p, int sw, uint32_t lbo, uint32_t sbo, int units) {\n    \
         for (int u = 0; u < units; ++u)\n        \
         for (int r = 0; r < 4; ++r) {\n            \
         const auto o = sptir_wgmma_b_at(p, sw, lbo, sbo, u, r);\n            \
         reads.emplace_back(p.m, o.first);\n            \
         reads.emplace_back(p.m, o.second);\n        \
         }\n\
         }\n\
         /* Issued: the window elements the product reads are checked now and held in flight, the\n   \
         product computed (A's registers as they were at issue) when its group completes. */\n\
         template <int U>\n\
         static void sptir_wgmma_sp_issue_emu(float (*c)[4], const uint32_t* a, uint32_t e, \
         const ::sptir_emu::SPtr<uint16_t>& p, int sw, uint32_t lbo, uint32_t sbo, bool bf) {\n    \
         sptir_wgmma_issue_checks(p, sw);\n    \
         std::vector<std::pair<::sptir_emu::SharedMeta*, int64_t>> reads;\n    \
         reads.reserve(8 * U);\n    \
         sptir_wgmma_b_reads(reads, p, sw, lbo, sbo, U);\n    \
         const std::array<uint32_t, 4> av = {a[0], a[1], a[2], a[3]};\n    \
         ::sptir_emu::mma_issue(std::move(reads), [=]() { sptir_wgmma_sp_emu<U>(c, av.data(), e, p, sw, lbo, sbo, bf); });\n    \
         ::sptir_emu::mma_commit();\n\
         }\n",
    );
    for &units in &widths {
        let _ = writeln!(
            s,
            "template <int N>\nstatic inline void sptir_wgmma_wait_n{}(float (*)[4]) {{ ::sptir_emu::mma_wait(N); }}",
            8 * units
        );
    }
    for &(units, ty, sw) in forms {
        let n = 8 * units;
        let (name, arg, layout) = if sw {
            (
                format!("sptir_wgmma_sp_m64n{n}k32_{ty}_sw128"),
                "lbo",
                "1, lbo, 1024",
            )
        } else {
            (
                format!("sptir_wgmma_sp_m64n{n}k32_{ty}"),
                "sbo",
                "0, 128, sbo",
            )
        };
        let _ = writeln!(
            s,
            "static inline void {name}_async(float (*c)[4], const uint32_t* a, uint32_t e, \
             const ::sptir_emu::SPtr<uint16_t>& p, uint32_t {arg}) {{ sptir_wgmma_sp_issue_emu<{units}>(c, a, e, p, {layout}, {}); }}\n\
             static inline void {name}(float (*c)[4], const uint32_t* a, uint32_t e, \
             const ::sptir_emu::SPtr<uint16_t>& p, uint32_t {arg}) {{ {name}_async(c, a, e, p, {arg}); \
             ::sptir_emu::mma_wait(0); }}",
            ty == "bf16"
        );
    }
    s.push_str("#endif\n");
    s
}
