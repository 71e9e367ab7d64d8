//! Tensor cores on the CUDA target: a loop marked `{"tensorize": "mma_m16n8k16"}` (or
//! `"mma_fill_m16n8"`; `sch.tensorize` / `sch.sparse_tensorize` set it after checking the nest
//! against [`sparsetir_ir::TensorIntrin`], which is checked again here) is written as one
//! warp-wide `mma.sync` (or the matching fill of the accumulator tile) instead of a loop nest.
//!
//! # What is tensorized
//!
//! - `mma_m16n8k16`: the annotated loop (extent 16, rows `m`) holds exactly one loop of extent 8
//!   (columns `n`), which holds exactly one loop of extent 16 (the reduction `k`), which holds
//!   one block (no init, no predicate, no allocation) whose body is the store
//!   `C[c(m, n)] = C[c(m, n)] + A[a(m, k)] * B[b(k, n)]` — the loads of `A` and `B` possibly
//!   cast to float32 — with `A` and `B` both float16 or both bfloat16 and `C` float32. `B` is
//!   the load that moves with `n`. `A` may also be a value computed per element and rounded to
//!   `B`'s type, `T.float16(e)` / `T.bfloat16(e)` (block-sparse attention's probabilities made
//!   from the scores, `formats/bsr_softmax_mm.sp`): each lane computes its fragment's elements
//!   and packs their 16-bit patterns. The 16×16 tile of `A`, the 16×8 tile of `B` and the 16×8
//!   tile of `C` are read in the per-lane fragment layouts of PTX's
//!   `mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}.{f16,bf16}.f32` (lane `l`: group
//!   `g = l / 4`, `t = l % 4`; `A` rows `g`, `g + 8`, columns `2t`, `2t + 1` and the same
//!   plus 8; `B` rows `2t`, `2t + 1` (plus 8), column `g`; `C` rows `g`, `g + 8`, columns `2t`,
//!   `2t + 1`), multiplied and accumulated by the tensor cores, and the `C` tile written back.
//! - `mma_sp_m16n8k32`: `A` 2:4 structured sparse. The annotated loop (16 rows) holds a loop
//!   of 8 (columns `n`), one of 8 (groups of four columns of `A`: 32 columns), one of 2 (the
//!   stored slots of a group), and the block storing `C[c(m, n)] = C[c(m, n)] + A[a(m, q, s)] *
//!   B[b(q, p, n)]`, where `B`'s row moves with the slot only through one integer load `p` —
//!   the stored value's position in its group (`4 * group + idx[.., s]`, spmm_24's form). It is
//!   written as one `mma.sp.sync.aligned.m16n8k32.row.col.f32.{f16,bf16}...` with sparsity
//!   selector 0: `A`'s stored values in m16n8k16's `A` layout (register `r`: rows `g` / `g +
//!   8`, the two slots of group `t` / `t + 4`); the metadata packed from the positions (lanes
//!   `4g + h`, `h` = 0, 1: row `g` in the low 16 bits and row `g + 8` in the high ones, for
//!   groups `4h .. 4h + 3`, two bits a slot); `B` 32 × 8 (register `r`: rows `2t + 8r`, `2t +
//!   8r + 1` of column `g`). The layout was checked on an H200 (`bench/gpu/probe_mma_sp.cu`).
//! - `mma_fill_m16n8`: the annotated loop (16) holds one loop (8) holding one block storing a
//!   value that moves with neither loop into the tile `C[c(m, n)]`: every lane writes the four
//!   elements of its accumulator fragment. With the same `c(m, n)` as the `mma` that follows,
//!   each element is written and later read by the same thread: no barrier is needed between
//!   the fill and the products.
//!
//! Fragment elements adjacent and aligned in a buffer the kernel only reads (the offset's
//! affine form proves it) are read together: `A`'s pairs of 16-bit values as one 32-bit load
//! (and `B`'s, where `B` is stored transposed, rows `k` adjacent; where `B` is row-major,
//! columns adjacent, each 8 × 8 block is read as pairs along its rows and transposed across
//! the warp with `movmatrix`, which the emulator does with shuffles),
//! a lane's 8 stored positions of a 2:4 tile as two 16-byte loads, or one 8-byte load where the
//! positions are 8-bit (`sptir_ld_pair`, `sptir_ld_quad`, `sptir_ld_oct`; the emulator checks
//! their alignment). A `B` tile in a shared buffer's
//! window (`shared_window.rs`) whose rows hold the tile's 8 columns adjacent and 16-byte
//! aligned is read by one `ldmatrix...trans` (x2 for m16n8k16, x4 for `mma.sp`'s 32 rows:
//! lane `l` gives row `l`'s address, register `i` gets rows `2t + 8i`, `2t + 8i + 1` of column
//! `g`, the fragment's layout); the emulator gathers the row addresses with shuffles and reads
//! the shared array (race-checked, alignment checked).
//!
//! A serial loop whose body holds one product nest whose tile stays in place (its address,
//! simplified against the loops' ranges, does not move with the loop) keeps the accumulator
//! fragment in registers (`sptir_acc`: loaded before the loop, stored after it when the loop
//! runs at least once); the writer's locals are `sptir_`-prefixed, names scripts cannot take.
//! With an unrolled unit loop of several tiles inside it (`sptir_acc[u]`), an `A` fragment (and
//! a 2:4 product's metadata) that does not move with the unit loop is written once before it
//! and read by every tile's product (`Writer::mma_share_a`); with an unrolled row unit loop of
//! 1 to 4 around the unit loop (several row tiles per warp, `sptir_acc[r * units + u]`), a 2:4
//! product's `B` fragments, read from a shared window and provably the same for every row
//! unit, are written once before it, one per unit (`sptir_bs[u]`, `Writer::mma_share_b`). Where the tile's guard moves with
//! the unit loop (a loop of run-time extent split into units: the last step may hold fewer
//! tiles), each unit tile is loaded, computed and stored under its own guard, and the shared
//! fragment is read where some unit is live; a fill of the unit tiles just before the loop (an
//! unrolled loop of fill nests) is absorbed unit by unit.
//!
//! The kernel gets 32 threads along `threadIdx.x` (the warp's lanes); no loop of it may bind
//! `threadIdx.x` otherwise, no condition or loop that may differ between the lanes of a warp
//! may enclose a tensorized loop (the whole warp must reach the `mma`; one that depends on
//! `threadIdx.y`/`threadIdx.z` only is uniform over each warp, since a block row is one warp),
//! and the code around the tensorized loops runs in every lane (stores outside them are guarded
//! to one lane as usual).
//!
//! In the emulator the `mma` is a device function that gathers the warp's fragments in one
//! rendezvous of its lanes (`::sptir_emu::warp_gather`, what a shuffle a register would give)
//! and computes the tile products in float (products of 16-bit values are exact;
//! the order of the sum is the k order, where the hardware's may differ).

use super::*;
use sparsetir_ir::{BlockIter, TensorIntrin};

mod accumulate;
mod prelude;
mod sparse;
mod stage_a;
mod warpgroup;
mod warpgroup_ss;

pub(crate) use accumulate::AccumulatorPlan;
pub(crate) use prelude::MMA_PRELUDE;
pub(crate) use stage_a::{stages_a, AStage, SsPass, A_STAGE_PRELUDE, STAGE_A_ATTR, STAGE_A_TMA};
pub(crate) use warpgroup::{read_by_warpgroup, wgmma_prelude, WARPGROUP_ATTR};
pub(crate) use warpgroup_ss::wgmma_ss_prelude;

/// Which tensor-core form a loop asks for.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mma {
    /// `D = A · B + C`, m16n8k16.
    M16n8k16,
    /// `D = A · B + C` with `A` 2:4 structured sparse, m16n8k32 (`mma.sp`).
    SpM16n8k32,
    /// The 16×8 accumulator tile set to one value.
    Fill,
}

impl Mma {
    pub(crate) fn of(f: &For) -> Option<Mma> {
        Some(match TensorIntrin::of(f)? {
            TensorIntrin::MmaM16n8k16 => Mma::M16n8k16,
            TensorIntrin::MmaSpM16n8k32 => Mma::SpM16n8k32,
            TensorIntrin::MmaFillM16n8 => Mma::Fill,
        })
    }

    fn intrin(self) -> TensorIntrin {
        match self {
            Mma::M16n8k16 => TensorIntrin::MmaM16n8k16,
            Mma::SpM16n8k32 => TensorIntrin::MmaSpM16n8k32,
            Mma::Fill => TensorIntrin::MmaFillM16n8,
        }
    }
}

/// Whether any loop of `func` is tensorized (the CUDA source then needs [`MMA_PRELUDE`]).
pub(crate) fn uses_mma(func: &PrimFunc) -> bool {
    let mut found = false;
    func.body.visit(&mut |s| {
        if let Stmt::For(f) = s {
            found |= Mma::of(f).is_some();
        }
    });
    found
}

/// A load, possibly under a cast to float32: the load.
fn strip_cast(e: &Expr) -> &Expr {
    match e {
        Expr::Cast(DType::F32, inner) => inner,
        other => other,
    }
}

/// The four `(row, column)` pairs of a lane's accumulator fragment, as C text in the lane's
/// group `g` and index `t`.
const C_FRAGMENT: [(&str, &str); 4] = [
    ("sptir_g", "2 * sptir_t"),
    ("sptir_g", "2 * sptir_t + 1"),
    ("sptir_g + 8", "2 * sptir_t"),
    ("sptir_g + 8", "2 * sptir_t + 1"),
];

impl Writer<'_> {
    /// The nest of a tensorized loop: the loops' variables (outermost first, as many as the
    /// form has) and the block at the bottom.
    fn mma_nest<'a>(&self, f: &'a For, form: Mma) -> Res<(Vec<VarId>, &'a Block)> {
        let what = format!("tensorized loop `{}`", self.func.vars[f.var].name);
        form.intrin()
            .nest(f)
            .map_err(|why| self.unsupported(&what, why))
    }

    /// The block's predicate with its iterators replaced by their bindings (a split that does
    /// not divide its loop's extent guards the tile), `None` without one. It must not move with
    /// the tile's loops: the whole tile is in or out.
    fn mma_guard(&self, what: &str, vars: &[VarId], b: &Block) -> Res<Option<Expr>> {
        let Some(p) = &b.predicate else {
            return Ok(None);
        };
        let p = super::subst(p, &super::bindings(b));
        if super::mentions(&p, vars) {
            return Err(self.unsupported(
                what,
                format!(
                    "block `{}`'s predicate moves with the tile's loops (a tile must be in or \
                     out as a whole)",
                    b.name
                ),
            ));
        }
        Ok(Some(p))
    }

    /// The C text of `e` with the nest's loop variables replaced by `values` and the block
    /// iterators `iters` by their bindings.
    fn text_at(
        &mut self,
        e: &Expr,
        vars: &[VarId],
        values: &[String],
        iters: &[BlockIter],
    ) -> Res<String> {
        self.text_or_ptr_at(e, vars, values, iters, false)
    }

    /// [`Self::text_at`] of a load's address (`name + offset`) instead of its value.
    fn ptr_at(
        &mut self,
        e: &Expr,
        vars: &[VarId],
        values: &[String],
        iters: &[BlockIter],
    ) -> Res<String> {
        self.text_or_ptr_at(e, vars, values, iters, true)
    }

    fn text_or_ptr_at(
        &mut self,
        e: &Expr,
        vars: &[VarId],
        values: &[String],
        block_iters: &[BlockIter],
        ptr: bool,
    ) -> Res<String> {
        for (v, t) in vars.iter().zip(values) {
            self.let_subst.insert(*v, format!("({t})"));
        }
        let mut iters = Vec::new();
        let mut r = Ok(String::new());
        for it in block_iters {
            match self.expr(&it.binding) {
                Ok((t, _)) => {
                    self.let_subst.insert(it.var, t);
                    iters.push(it.var);
                }
                Err(e) => {
                    r = Err(e);
                    break;
                }
            }
        }
        if r.is_ok() {
            r = match e {
                Expr::Load { buffer, indices } => self.offset(*buffer, indices).and_then(|off| {
                    let name = self.buf_name(*buffer)?;
                    Ok(if ptr {
                        format!("{name} + {off}")
                    } else {
                        format!("{name}[{off}]")
                    })
                }),
                other => self.expr(other).map(|(t, _)| t),
            };
        }
        for v in vars.iter().chain(&iters) {
            self.let_subst.remove(v);
        }
        r
    }

    /// The flat element offset of `load` (a load of a global buffer the kernel only reads) in
    /// affine form, the block's iterators replaced by their bindings; `None` when the buffer is
    /// written, shared, or has a stride that is not a constant.
    fn fragment_offset(&self, load: &Expr, b: &Block) -> Option<Affine> {
        let Expr::Load { buffer, indices } = load else {
            return None;
        };
        let readonly = self
            .kernel
            .as_ref()
            .is_some_and(|k| k.readonly.contains(buffer));
        if !readonly || self.is_shared(*buffer) {
            return None;
        }
        self.flat_offset(*buffer, &resolved(indices, b))
    }

    /// The flat element offset of `buffer` at `indices` (loop variables only) in affine form,
    /// a shared window's start taken off; `None` for a stride that is not a constant.
    fn flat_offset(&self, buffer: BufferId, indices: &[Expr]) -> Option<Affine> {
        let info = self.bufs.get(buffer.index())?.as_ref()?;
        let mut flat = Affine {
            terms: Vec::new(),
            constant: 0,
        };
        // A window of swizzled boxes (`gpu/tma.rs`) has no affine offset.
        if info.swizzled {
            return None;
        }
        // A core-matrix window: `(n / 8) * 8 R + 8 k + n % 8`, `n / 8` and `n % 8` simplified.
        if let (Some(rows), [k, n]) = (info.core, indices) {
            let at = |d: usize, i: &Expr| match info.window.get(d) {
                Some(base) => Expr::sub(i.clone(), base.clone()),
                None => i.clone(),
            };
            let (hi, lo) = self.core_split(&at(1, n));
            for (e, c) in [(hi, 8 * rows), (at(0, k), 8), (lo, 1)] {
                flat = flat.plus(affine(&e)?.scaled(c)?)?;
            }
            return Some(flat);
        }
        for (d, (i, st)) in indices.iter().zip(&info.strides).enumerate() {
            let Stride::Const(c) = st else {
                return None;
            };
            let i = match info.window.get(d) {
                Some(base) => Expr::sub(i.clone(), base.clone()),
                None => i.clone(),
            };
            flat = flat.plus(affine(&i)?.scaled(*c)?)?;
        }
        Some(flat)
    }

    /// Whether `load` reads a shared buffer's window (`shared_window`) in which the tile's
    /// columns (`n`, coefficient 1) are adjacent and every row of 8 starts 16-byte aligned:
    /// every other term of the offset (the window's start taken off) a multiple of 8 and free
    /// of `n` — what `ldmatrix` needs.
    fn shared_rows(&self, load: &Expr, b: &Block, n: VarId) -> bool {
        let Expr::Load { buffer, indices } = load else {
            return false;
        };
        self.shared_run(*buffer, &resolved(indices, b), n, 8)
    }

    /// Whether the 16-bit shared buffer `buffer`, at `indices` (block iterators resolved), holds
    /// `width` consecutive elements as `n` steps by one from a start aligned to `width`
    /// elements: in its window's flat offset (the window's start taken off), `n` has
    /// coefficient 1 and every other term is a multiple of `width` free of `n`.
    pub(crate) fn shared_run(
        &self,
        buffer: BufferId,
        indices: &[Expr],
        n: VarId,
        width: i64,
    ) -> bool {
        if !self.is_shared(buffer) || self.func.buffers[buffer].dtype.bytes() != 2 {
            return false;
        }
        self.flat_offset(buffer, indices)
            .is_some_and(|off| aligned_steps(&off, &[(n, 1)], width))
    }

    /// Whether `load`'s elements at consecutive values of the tile variables in `steps` (each
    /// with the coefficient it must have) are consecutive in memory, the first one (at values
    /// of those variables that keep their terms multiples of `n`) aligned to `n` elements:
    /// every other term of the offset a multiple of `n` and free of those variables.
    fn vector_fragment(&self, load: &Expr, b: &Block, steps: &[(VarId, i64)], n: i64) -> bool {
        self.fragment_offset(load, b)
            .is_some_and(|off| aligned_steps(&off, steps, n))
    }

    /// Writes a tensorized loop (see the module documentation).
    pub(crate) fn write_mma(&mut self, f: &For, form: Mma) -> Res<()> {
        let what = format!("tensorized loop `{}`", self.func.vars[f.var].name);
        let (vars, b) = self.mma_nest(f, form)?;
        // `mma.sync` needs the whole warp: no condition or loop whose outcome may differ
        // between its lanes may enclose it.
        if !self.warp_uniform() {
            return Err(self.unsupported(
                &what,
                "it sits under a condition or loop whose outcome may differ between the lanes \
                 of a warp (one on threadIdx.x, or on another thread index while blockDim.x \
                 is not 32); every lane of the warp must reach the `mma`",
            ));
        }
        let Stmt::Store(st) = b.body.single() else {
            return Err(self.unsupported(&what, "the block's body must be one store"));
        };
        if self.warpgroup_depth > 0 && form != Mma::Fill {
            return Err(self.unsupported(
                &what,
                "under a loop annotated `warpgroup` a product must be kept in registers by a \
                 serial loop around it, with a unit loop of 1 to 32 tiles (the warpgroup's \
                 products are then one `wgmma`), and no guard on its tile",
            ));
        }
        if self.buf_dtype(st.buffer) != DType::F32 {
            return Err(self.unsupported(&what, "the accumulator tile must be float32"));
        }
        let mention = |e: &Expr, v: VarId| mentions_via(b, e, v);
        let c_target = Expr::Load {
            buffer: st.buffer,
            indices: st.indices.clone(),
        };
        // A guard that the whole warp takes as one (see `warp_uniform`): the tile is skipped.
        let guard = self.mma_guard(&what, &vars, b)?;
        let div = match &guard {
            Some(g) => {
                let d = self.enter_divergence(g);
                if !self.warp_uniform() {
                    self.leave_divergence(d);
                    return Err(self.unsupported(
                        &what,
                        "its block's predicate may differ between the lanes of a warp",
                    ));
                }
                let (t, _) = self.expr(g)?;
                self.line(&format!("if ({}) {{", strip_parens(&t)));
                self.indent += 1;
                Some(d)
            }
            None => None,
        };
        self.line("{");
        self.indent += 1;
        self.line("const int32_t sptir_g = (int32_t)(threadIdx.x >> 2), sptir_t = (int32_t)(threadIdx.x & 3);");
        let r = match form {
            Mma::Fill => {
                if vars.iter().any(|&v| mention(&st.value, v)) {
                    Err(self.unsupported(&what, "the filled value must not move with the tile"))
                } else {
                    let (val, vdt) = self.expr(&st.value)?;
                    let val = cast(val, vdt, DType::F32);
                    for (row, col) in C_FRAGMENT {
                        let at = [row.to_string(), col.to_string()];
                        let c = self.text_at(&c_target, &vars, &at, &b.iters)?;
                        self.line(&format!("{c} = {};", strip_parens(&val)));
                    }
                    Ok(())
                }
            }
            Mma::M16n8k16 => self.write_mma_product(&what, &vars, b, st, &c_target, &mention),
            Mma::SpM16n8k32 => self.write_mma_sp_product(&what, &vars, b, st, &c_target, &mention),
        };
        self.indent -= 1;
        self.line("}");
        if let Some(d) = div {
            self.leave_divergence(d);
            self.indent -= 1;
            self.line("}");
        }
        r
    }

    /// The operands of the tile product `C[..] = C[..] + A[..] * B[..]`: `A` (which does not
    /// move with the tile's columns, `vars[1]`) — a load, or a value computed per element and
    /// rounded to the 16-bit type (`T.float16(e)`, `T.bfloat16(e)`: softmax probabilities
    /// made on the fly) — and the load of `B` (which does), and the PTX type suffix of their
    /// 16-bit type.
    fn mma_operands<'e>(
        &self,
        what: &str,
        vars: &[VarId],
        st: &'e Store,
        c_target: &Expr,
        mention: &dyn Fn(&Expr, VarId) -> bool,
    ) -> Res<(&'e Expr, &'e Expr, &'static str)> {
        let bad = |w: &Self| {
            w.unsupported(
                what,
                "the block must store `C[..] = C[..] + A[..] * B[..]` (B a load of float16 or \
                 bfloat16, A a load of the same type or a value rounded to it, either possibly \
                 cast to float32)",
            )
        };
        let Expr::Binary(BinOp::Add, acc, prod) = &st.value else {
            return Err(bad(self));
        };
        if **acc != *c_target {
            return Err(bad(self));
        }
        let Expr::Binary(BinOp::Mul, x, y) = &**prod else {
            return Err(bad(self));
        };
        let (x, y) = (strip_cast(x), strip_cast(y));
        // B moves with the tile's columns (the second loop), A does not.
        let n_var = vars[1];
        let (a, bb) = match (mention(x, n_var), mention(y, n_var)) {
            (false, true) => (x, y),
            (true, false) => (y, x),
            _ => return Err(bad(self)),
        };
        let Expr::Load { buffer: bbuf, .. } = bb else {
            return Err(bad(self));
        };
        let a_dt = match a {
            Expr::Load { buffer, .. } => self.buf_dtype(*buffer),
            Expr::Cast(dt, _) if half::is_half(*dt) => *dt,
            _ => return Err(bad(self)),
        };
        let suffix = match (a_dt, self.buf_dtype(*bbuf)) {
            (DType::F16, DType::F16) => "f16",
            (DType::BF16, DType::BF16) => "bf16",
            _ => return Err(bad(self)),
        };
        Ok((a, bb, suffix))
    }

    /// For `A` computed per element (`T.float16(e)`): the one load in `e` that moves with the
    /// tile's column `k`, when it is a float32 buffer the kernel only reads whose two elements
    /// of a fragment register are adjacent and 8-byte aligned; `None` otherwise (every other
    /// load of `e` must not move with `k`).
    fn computed_pair_operand(&self, a: &Expr, b: &Block, k: VarId) -> Option<Expr> {
        let Expr::Cast(dt, inner) = a else {
            return None;
        };
        if !half::is_half(*dt) {
            return None;
        }
        let mut moving = Vec::new();
        inner.visit(&mut |x| {
            if matches!(x, Expr::Load { .. }) && mentions_via(b, x, k) && !moving.contains(x) {
                moving.push(x.clone());
            }
        });
        let [ld] = moving.as_slice() else {
            return None;
        };
        let Expr::Load { buffer, .. } = ld else {
            return None;
        };
        (self.buf_dtype(*buffer) == DType::F32 && self.vector_fragment(ld, b, &[(k, 1)], 2))
            .then(|| ld.clone())
    }

    /// The 16-bit pattern of `A`'s element at the tile coordinates `at`, as C text: the
    /// loaded bits, or a computed value (`T.float16(e)`) rounded once to its type.
    fn a_element_bits(
        &mut self,
        a: &Expr,
        vars: &[VarId],
        at: &[String],
        iters: &[BlockIter],
    ) -> Res<String> {
        match a {
            Expr::Cast(dt, inner) if half::is_half(*dt) => {
                let as_float = Expr::Cast(DType::F32, inner.clone());
                let t = self.text_at(&as_float, vars, at, iters)?;
                Ok(half::store_bits(*dt, &t))
            }
            _ => self.text_at(a, vars, at, iters),
        }
    }

    /// `A`'s fragment of an m16n8k16 product into `sptir_a[4]` (declared by the caller), the
    /// block iterators `iters` bound.
    fn write_a_fragment(
        &mut self,
        a: &Expr,
        vars: &[VarId],
        b: &Block,
        iters: &[BlockIter],
    ) -> Res<()> {
        // A: register r holds rows g (+8 when r is odd), columns 2t, 2t+1 (+8 when r >= 2);
        // one 32-bit load where the two elements are adjacent and aligned. A value computed
        // from one float32 load that moves with the columns (the fused softmax's score) reads
        // the two elements' operands as one 8-byte load where they are adjacent and aligned.
        let pairs = self.vector_fragment(a, b, &[(vars[2], 1)], 2);
        let pair_load = self.computed_pair_operand(a, b, vars[2]);
        let pair_load = pair_load.as_ref();
        for r in 0..4 {
            let row = if r % 2 == 1 { "sptir_g + 8" } else { "sptir_g" };
            let col = if r >= 2 {
                "2 * sptir_t + 8"
            } else {
                "2 * sptir_t"
            };
            if pairs {
                let p = self.ptr_at(a, vars, &[row.into(), "0".into(), col.into()], iters)?;
                self.line(&format!("sptir_a[{r}] = sptir_ld_pair({p});"));
                continue;
            }
            let col1 = format!("{col} + 1");
            let (lo, hi) = match pair_load {
                // The computed value's two elements from one 8-byte load of their operand.
                Some(ld) => {
                    let p = self.ptr_at(ld, vars, &[row.into(), "0".into(), col.into()], iters)?;
                    self.line(&format!("const float2 sptir_p{r} = sptir_ld2({p});"));
                    let mut halves = Vec::new();
                    for (u, c) in [col.to_string(), col1].into_iter().enumerate() {
                        self.vec_sub = Some((vec![(ld.clone(), format!("sptir_p{r}"))], u));
                        let t = self.a_element_bits(a, vars, &[row.into(), "0".into(), c], iters);
                        self.vec_sub = None;
                        halves.push(t?);
                    }
                    (halves.remove(0), halves.remove(0))
                }
                None => (
                    self.a_element_bits(a, vars, &[row.into(), "0".into(), col.into()], iters)?,
                    self.a_element_bits(a, vars, &[row.into(), "0".into(), col1], iters)?,
                ),
            };
            self.line(&format!(
                "sptir_a[{r}] = (uint32_t)(uint16_t)({lo}) | ((uint32_t)(uint16_t)({hi}) << 16);"
            ));
        }
        Ok(())
    }

    fn write_mma_product(
        &mut self,
        what: &str,
        vars: &[VarId],
        b: &Block,
        st: &Store,
        c_target: &Expr,
        mention: &dyn Fn(&Expr, VarId) -> bool,
    ) -> Res<()> {
        let (a, bb, suffix) = self.mma_operands(what, vars, st, c_target, mention)?;
        if self.mma_a_shared == Some(vars[0]) {
            self.line("uint32_t sptir_b[2];");
        } else {
            self.line("uint32_t sptir_a[4], sptir_b[2];");
            self.write_a_fragment(a, vars, b, &b.iters)?;
        }
        // B: register r holds rows 2t, 2t+1 (+8 when r is 1), column g; one 32-bit load where
        // the two rows are adjacent and aligned (B stored transposed, as SDDMM's second
        // operand is). Where B's columns are adjacent instead (row-major B, SpMM's dense
        // operand), each 8 x 8 half is read as pairs along its rows — lane 4g + t: row g,
        // columns 2t, 2t + 1 — and transposed across the warp (`movmatrix`).
        // In shared memory with each row's 8 columns adjacent and aligned: one `ldmatrix`
        // (.x2.trans) reads both registers, lane l giving the address of row l % 16.
        if self.shared_rows(bb, b, vars[1]) {
            let at = ["0".into(), "0".into(), "(int32_t)(threadIdx.x & 15)".into()];
            let p = self.ptr_at(bb, vars, &at, &b.iters)?;
            self.line(&format!("sptir_ldmatrix_x2_trans(sptir_b, {p});"));
            return self.mma_call(
                &format!("sptir_mma_m16n8k16_{suffix}"),
                "",
                c_target,
                vars,
                b,
            );
        }
        let b_pairs = self.vector_fragment(bb, b, &[(vars[2], 1)], 2);
        let b_rows = !b_pairs && self.vector_fragment(bb, b, &[(vars[1], 1)], 2);
        for r in 0..2 {
            if b_rows {
                let k = if r == 1 { "sptir_g + 8" } else { "sptir_g" };
                let at = ["0".into(), "2 * sptir_t".into(), k.into()];
                let p = self.ptr_at(bb, vars, &at, &b.iters)?;
                self.line(&format!(
                    "sptir_b[{r}] = sptir_movmatrix_trans(sptir_ld_pair({p}));"
                ));
                continue;
            }
            let k0 = if r == 1 {
                "2 * sptir_t + 8"
            } else {
                "2 * sptir_t"
            };
            if b_pairs {
                let p = self.ptr_at(
                    bb,
                    vars,
                    &["0".into(), "sptir_g".into(), k0.into()],
                    &b.iters,
                )?;
                self.line(&format!("sptir_b[{r}] = sptir_ld_pair({p});"));
                continue;
            }
            let k1 = format!("{k0} + 1");
            let lo = self.text_at(
                bb,
                vars,
                &["0".into(), "sptir_g".into(), k0.into()],
                &b.iters,
            )?;
            let hi = self.text_at(bb, vars, &["0".into(), "sptir_g".into(), k1], &b.iters)?;
            self.line(&format!(
                "sptir_b[{r}] = (uint32_t)(uint16_t)({lo}) | ((uint32_t)(uint16_t)({hi}) << 16);"
            ));
        }
        self.mma_call(
            &format!("sptir_mma_m16n8k16_{suffix}"),
            "",
            c_target,
            vars,
            b,
        )
    }

    /// The product call: on the accumulator fragment an enclosing loop keeps in registers
    /// (`sptir_acc`, see [`Self::mma_accumulator_plan`]), else on `c[4]` loaded from the `C`
    /// tile and stored back.
    fn mma_call(
        &mut self,
        func: &str,
        extra: &str,
        c_target: &Expr,
        vars: &[VarId],
        b: &Block,
    ) -> Res<()> {
        if self.mma_acc == Some(vars[0]) {
            let acc = match (self.mma_acc_unit, self.mma_acc_rows) {
                (Some(u), Some((r, units))) => format!(
                    "sptir_acc[{} * {units} + {}]",
                    self.expr(&Expr::Var(r))?.0,
                    self.expr(&Expr::Var(u))?.0
                ),
                (Some(u), None) => format!("sptir_acc[{}]", self.expr(&Expr::Var(u))?.0),
                _ => "sptir_acc".to_string(),
            };
            self.line(&format!("{func}({acc}, sptir_a, sptir_b{extra});"));
            return Ok(());
        }
        self.line("float sptir_c[4];");
        let c_texts = self.load_c_fragment(c_target, vars, b)?;
        self.line(&format!("{func}(sptir_c, sptir_a, sptir_b{extra});"));
        for (i, c) in c_texts.iter().enumerate() {
            self.line(&format!("{c} = sptir_c[{i}];"));
        }
        Ok(())
    }

    /// The accumulator fragment: loads `c[0..4]` from the `C` tile and returns the four
    /// elements' texts (to store the result back).
    fn load_c_fragment(&mut self, c_target: &Expr, vars: &[VarId], b: &Block) -> Res<Vec<String>> {
        let mut c_texts = Vec::new();
        for (i, (row, col)) in C_FRAGMENT.iter().enumerate() {
            let mut at = vec![row.to_string(), col.to_string()];
            at.resize(vars.len(), "0".to_string());
            let c = self.text_at(c_target, vars, &at, &b.iters)?;
            self.line(&format!("sptir_c[{i}] = {c};"));
            c_texts.push(c);
        }
        Ok(c_texts)
    }
}

/// Block `b`'s iterators whose bindings do not move with the loop over `v`.
fn iters_fixed_by(b: &Block, v: VarId) -> Vec<BlockIter> {
    b.iters
        .iter()
        .filter(|it| !super::mentions(&it.binding, &[v]))
        .cloned()
        .collect()
}

/// `indices` with block `b`'s iterators replaced by their bindings.
fn resolved(indices: &[Expr], b: &Block) -> Vec<Expr> {
    let map: HashMap<VarId, Expr> = b
        .iters
        .iter()
        .map(|it| (it.var, it.binding.clone()))
        .collect();
    indices.iter().map(|i| super::subst(i, &map)).collect()
}

/// Whether the offset `off` moves by exactly each step's coefficient with its variable, every
/// other term a multiple of `n` free of those variables and the constant a multiple of `n`
/// (the first element aligned to `n`).
fn aligned_steps(off: &Affine, steps: &[(VarId, i64)], n: i64) -> bool {
    let mut seen = 0;
    for (t, c) in &off.terms {
        match steps.iter().find(|(v, _)| *t == Expr::Var(*v)) {
            Some((_, step)) if c == step => seen += 1,
            Some(_) => return false,
            None => {
                if c % n != 0 || steps.iter().any(|(v, _)| super::mentions(t, &[*v])) {
                    return false;
                }
            }
        }
    }
    seen == steps.len() && off.constant % n == 0
}

/// Whether `e` mentions `v`, directly or through the iterator bindings of block `b`.
fn mentions_via(b: &Block, e: &Expr, v: VarId) -> bool {
    let mut hit = false;
    e.visit(&mut |x| {
        if let Expr::Var(u) = x {
            hit |= *u == v
                || b.iters
                    .iter()
                    .any(|it| it.var == *u && super::mentions(&it.binding, &[v]));
        }
    });
    hit
}

/// The tensorized nests in `s` (copies), with their forms.
fn tensorized_nests(s: &Stmt) -> Vec<(For, Mma)> {
    let mut nests = Vec::new();
    s.visit(&mut |x| {
        if let Stmt::For(n) = x {
            if let Some(form) = Mma::of(n) {
                nests.push(((**n).clone(), form));
            }
        }
    });
    nests
}
