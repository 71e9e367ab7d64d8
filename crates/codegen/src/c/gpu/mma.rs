//! Tensor cores on the CUDA target: a loop annotated `{"tensorize": "mma_m16n8k16"}` (or
//! `"mma_fill_m16n8"`) is written as one warp-wide `mma.sync` (or the matching fill of the
//! accumulator tile) instead of a loop nest.
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
//! In the emulator the `mma` is a device function that gathers the warp's fragments with
//! `__shfl_sync` and computes the tile products in float (products of 16-bit values are exact;
//! the order of the sum is the k order, where the hardware's may differ).

use super::*;
use sparsetir_ir::BlockIter;

/// The annotation the writer reads.
pub const TENSORIZE_ATTR: &str = "tensorize";

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
        match f.annotations.get(TENSORIZE_ATTR) {
            Some(AttrValue::Str(s)) if s == "mma_m16n8k16" => Some(Mma::M16n8k16),
            Some(AttrValue::Str(s)) if s == "mma_sp_m16n8k32" => Some(Mma::SpM16n8k32),
            Some(AttrValue::Str(s)) if s == "mma_fill_m16n8" => Some(Mma::Fill),
            _ => None,
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

/// The single statement of `s` (through one-element sequences).
fn single(s: &Stmt) -> &Stmt {
    match s {
        Stmt::Seq(v) if v.len() == 1 => single(&v[0]),
        other => other,
    }
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
        let extents: &[i64] = match form {
            Mma::M16n8k16 => &[16, 8, 16],
            Mma::SpM16n8k32 => &[16, 8, 8, 2],
            Mma::Fill => &[16, 8],
        };
        let mut vars = Vec::new();
        let mut cur = f;
        for (d, &ext) in extents.iter().enumerate() {
            if const_int(&cur.min) != Some(0) || const_int(&cur.extent) != Some(ext) {
                return Err(self.unsupported(
                    &what,
                    format!(
                        "loop {} of the nest must run 0..{ext} (the tile is 16 x 8 x 16)",
                        d + 1
                    ),
                ));
            }
            if cur.kind == ForKind::ThreadBinding {
                return Err(self.unsupported(&what, "a loop of the tile is bound to threads"));
            }
            vars.push(cur.var);
            if d + 1 < extents.len() {
                match single(&cur.body) {
                    Stmt::For(next) => cur = next,
                    _ => {
                        return Err(self.unsupported(
                            &what,
                            format!("loop {} must hold exactly one loop", d + 1),
                        ))
                    }
                }
            }
        }
        let Stmt::Block(b) = single(&cur.body) else {
            return Err(self.unsupported(&what, "the innermost loop must hold exactly one block"));
        };
        if b.init.is_some() || !b.alloc_buffers.is_empty() {
            return Err(self.unsupported(
                &what,
                format!("block `{}` has an init or allocations", b.name),
            ));
        }
        Ok((vars, b))
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
        let info = self.bufs.get(buffer.index()).cloned().flatten()?;
        let map: HashMap<VarId, Expr> = b
            .iters
            .iter()
            .map(|it| (it.var, it.binding.clone()))
            .collect();
        let mut flat = Affine {
            terms: Vec::new(),
            constant: 0,
        };
        for (i, st) in indices.iter().zip(&info.strides) {
            let Stride::Const(c) = st else {
                return None;
            };
            flat = flat.plus(affine(&super::subst(i, &map))?.scaled(*c)?)?;
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
        let map: HashMap<VarId, Expr> = b
            .iters
            .iter()
            .map(|it| (it.var, it.binding.clone()))
            .collect();
        let resolved: Vec<Expr> = indices.iter().map(|i| super::subst(i, &map)).collect();
        self.shared_run(*buffer, &resolved, n, 8)
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
        let Some(info) = self.bufs.get(buffer.index()).cloned().flatten() else {
            return false;
        };
        let mut flat = Affine {
            terms: Vec::new(),
            constant: 0,
        };
        for (d, (i, st)) in indices.iter().zip(&info.strides).enumerate() {
            let Stride::Const(c) = st else {
                return false;
            };
            let mut i = i.clone();
            if let Some(base) = info.window.get(d) {
                i = Expr::sub(i, base.clone());
            }
            let Some(term) = affine(&i).and_then(|a| a.scaled(*c)) else {
                return false;
            };
            let Some(sum) = flat.plus(term) else {
                return false;
            };
            flat = sum;
        }
        let mut seen = false;
        for (t, c) in &flat.terms {
            if *t == Expr::Var(n) {
                seen |= *c == 1;
                if *c != 1 {
                    return false;
                }
            } else if c % width != 0 || super::mentions(t, &[n]) {
                return false;
            }
        }
        seen && flat.constant % width == 0
    }

    /// Whether `load`'s elements at consecutive values of the tile variables in `steps` (each
    /// with the coefficient it must have) are consecutive in memory, the first one (at values
    /// of those variables that keep their terms multiples of `n`) aligned to `n` elements:
    /// every other term of the offset a multiple of `n` and free of those variables.
    fn vector_fragment(&self, load: &Expr, b: &Block, steps: &[(VarId, i64)], n: i64) -> bool {
        let Some(off) = self.fragment_offset(load, b) else {
            return false;
        };
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
        let Stmt::Store(st) = single(&b.body) else {
            return Err(self.unsupported(&what, "the block's body must be one store"));
        };
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

    /// The indices of the accumulator tile of the tensorized nest `nest` inside loop `f`, with
    /// the block iterators inside `f` replaced by their bindings and simplified against the
    /// ranges of `f`'s loops (so `(x * 32 + k) // 32` with `k < 32` becomes `x`).
    pub(crate) fn mma_tile_indices(&self, f: &For, nest: &For) -> Option<Vec<Expr>> {
        let (_, indices) = sync::mma_tile_store(nest)?;
        let mut map = HashMap::new();
        let mut an = sparsetir_arith::Analyzer::new();
        an.assume_no_overflow(true);
        an.bind_range(f.var, &f.min, &f.extent);
        f.body.visit(&mut |s| match s {
            Stmt::Block(b) => {
                for it in &b.iters {
                    map.insert(it.var, it.binding.clone());
                }
            }
            Stmt::For(l) => an.bind_range(l.var, &l.min, &l.extent),
            _ => {}
        });
        Some(
            indices
                .iter()
                .map(|i| {
                    // Bindings may name outer blocks' iterators: substitute to a fixpoint
                    // (blocks nest only so deep).
                    let mut e = i.clone();
                    for _ in 0..8 {
                        e = super::subst(&e, &map);
                    }
                    an.simplify(self.func, &e)
                })
                .collect(),
        )
    }

    /// Whether the accumulator tile of a tensorized nest inside loop `f` moves with `f`'s
    /// variable so that an element one iteration's lane holds may be another lane's in another
    /// iteration: some index of the tile moves both with `f` and within the tile (with the
    /// nest's loops). A tile that only moves from slice to slice (the indices that move with
    /// `f` do not move within the tile, as BSR's block position does) gives every element it
    /// reaches again to the same lane.
    pub(crate) fn mma_tile_moves_with(&self, f: &For) -> bool {
        tensorized_nests(&f.body).iter().any(|(n, _)| {
            let mut tile_vars = Vec::new();
            n.body.visit(&mut |s| {
                if let Stmt::For(l) = s {
                    tile_vars.push(l.var);
                }
            });
            tile_vars.push(n.var);
            match self.mma_tile_indices(f, n) {
                Some(ix) => ix
                    .iter()
                    .any(|i| super::mentions(i, &[f.var]) && super::mentions(i, &tile_vars)),
                None => true,
            }
        })
    }

    /// Whether the serial loop `f` can keep the accumulator fragment of the tensorized product
    /// inside it in registers: the body holds exactly one tensorized nest, a product
    /// (`mma_m16n8k16`, `mma_sp_m16n8k32`), whose tile stays in place across the iterations and
    /// that nothing else in the body touches, addressed by variables bound outside the loop —
    /// or that nest alone inside an unrolled loop of 1 to 8 iterations (the unit loop), each
    /// iteration its own tile: one fragment per tile (several output tiles per warp, which
    /// share the `A` fragment's loads). Returns the nest's outermost variable, the unit loop and
    /// the texts of each fragment's four elements.
    pub(crate) fn mma_accumulator_plan(&mut self, f: &For) -> Res<Option<AccumulatorPlan>> {
        let nests = tensorized_nests(&f.body);
        let [(nest, form)] = nests.as_slice() else {
            return Ok(None);
        };
        if *form == Mma::Fill {
            return Ok(None);
        }
        let Some((mut prod, warp)) = self.product_item(f) else {
            return Ok(None);
        };
        // Row units: an unrolled loop of 1 to 4 around the unit loop, each iteration other
        // rows (several row tiles per warp: each `B` fragment read once for all of them).
        let mut rows: Option<(VarId, i64)> = None;
        if let Stmt::For(r) = single(prod) {
            let inner_unit = matches!(single(&r.body), Stmt::For(u)
                if u.kind == ForKind::Unrolled
                    && matches!(single(&u.body), Stmt::For(n) if n.var == nest.var));
            let n = const_int(&r.extent).filter(|n| (1..=4).contains(n));
            if let (Some(n), true) = (n, inner_unit) {
                if r.kind == ForKind::Unrolled && const_int(&r.min) == Some(0) && r.var != nest.var
                {
                    rows = Some((r.var, n));
                    prod = &r.body;
                }
            }
        }
        // The unit loop: the product is one unrolled loop of constant extent holding the nest.
        let unit = match single(prod) {
            Stmt::For(u) if u.var != nest.var => {
                let units = const_int(&u.extent).filter(|n| (1..=8).contains(n));
                let holds_nest = matches!(single(&u.body), Stmt::For(n) if n.var == nest.var);
                match units {
                    Some(n)
                        if holds_nest
                            && u.kind == ForKind::Unrolled
                            && const_int(&u.min) == Some(0) =>
                    {
                        Some((u.var, n))
                    }
                    // An ordinary loop around the nest (the tile must then stay in place).
                    _ => None,
                }
            }
            _ => None,
        };
        let Ok((vars, b)) = self.mma_nest(nest, *form) else {
            return Ok(None);
        };
        let Stmt::Store(st) = single(&b.body) else {
            return Ok(None);
        };
        if !sync::mma_private(&f.body).contains(&st.buffer) {
            return Ok(None);
        }
        let Ok(guard) = self.mma_guard("", &vars, b) else {
            return Ok(None);
        };
        // The tile's place, from variables bound outside the loop only (the nest's own loops
        // aside): in particular it does not move with the loop.
        let Some(indices) = self.mma_tile_indices(f, nest) else {
            return Ok(None);
        };
        let mut inner = std::collections::HashSet::new();
        inner.insert(f.var);
        let unit_var = unit.map(|(u, _)| u);
        let mut warp_vars: Vec<VarId> = warp.iter().map(|w| w.var).collect();
        // (The row unit loop's variable, like the warps', picks a tile fixed across the loop.)
        warp_vars.extend(rows.map(|(r, _)| r));
        f.body.visit(&mut |s| match s {
            Stmt::For(l)
                if !vars.contains(&l.var)
                    && Some(l.var) != unit_var
                    && !warp_vars.contains(&l.var) =>
            {
                inner.insert(l.var);
            }
            Stmt::Let(l) => {
                inner.insert(l.var);
            }
            Stmt::Block(blk) => {
                inner.extend(blk.iters.iter().map(|it| it.var));
            }
            _ => {}
        });
        let moves = |e: &Expr| {
            let mut hit = false;
            e.visit(&mut |x| hit |= matches!(x, Expr::Var(v) if inner.contains(v)));
            hit
        };
        // The guard, too, must hold for the whole loop (it then guards the tile's load and
        // store around the loop as well as each product) — or, where it moves with the unit
        // loop only (a split of a loop of run-time extent into units), each unit's tile has its
        // own, which guards its load and store.
        let mentions_unit = |e: &Expr| unit_var.is_some_and(|u| super::mentions(e, &[u]));
        if indices.iter().any(moves) || guard.as_ref().is_some_and(moves) {
            return Ok(None);
        }
        // The warp loops' variables are declared before the loop too (the tile's load and store
        // around it name them): bound while the texts are made.
        let mut warp_decl = Vec::new();
        for w in &warp {
            let (_, ct, _) = self.loop_var_type(w)?;
            let name = self.bind(w.var)?;
            let tag = w.thread.clone().unwrap_or_default();
            warp_decl.push(format!(
                "const {ct} {name} = ({ct}){};",
                self.index_text(&tag)
            ));
        }
        // With row units, the tiles row unit by row unit (unit `r * units + u`).
        let mut texts = Ok(Some((Vec::new(), None, Vec::new())));
        let row_count = rows.map_or(1, |(_, n)| n);
        let rows_move_guard =
            rows.is_some_and(|(r, _)| guard.as_ref().is_some_and(|g| super::mentions(g, &[r])));
        for kr in 0..row_count {
            let idx: Vec<Expr> = match rows {
                Some((r, _)) => {
                    let map = HashMap::from([(r, Expr::Int(kr, self.func.vars[r].dtype))]);
                    indices.iter().map(|i| super::subst(i, &map)).collect()
                }
                None => indices.clone(),
            };
            let part = self.plan_texts(st.buffer, &idx, &vars, unit, &guard, &mentions_unit);
            texts = match (texts, part) {
                (Ok(Some((mut t, _, mut ug))), Ok(Some((t2, g2, ug2)))) => {
                    t.extend(t2);
                    ug.extend(ug2);
                    Ok(Some((t, g2, ug)))
                }
                (Err(e), _) | (_, Err(e)) => Err(e),
                _ => Ok(None),
            };
        }
        for w in &warp {
            self.unbind(w.var);
        }
        let Some((texts, guard, unit_guards)) = texts? else {
            return Ok(None);
        };
        if rows.is_some() && (rows_move_guard || unit_guards.iter().any(Option::is_some)) {
            return Ok(None);
        }
        Ok(Some(AccumulatorPlan {
            nest: vars[0],
            unit: unit_var,
            texts,
            guard,
            unit_guards,
            warp_decl,
            rows: rows.map(|(r, _)| (r, unit.map_or(1, |(_, n)| n))),
        }))
    }

    /// The product of the accumulating loop `f`: its body, or the one item of its body's
    /// sequence that holds tensorized nests (the others — a cooperative copy into shared memory
    /// — hold none), and the loops over the block's warps around it, if any: nested loops
    /// bound to `threadIdx.y` and `threadIdx.z` (one each), from 0 over their whole launch
    /// dimension (each warp one value of each, fixed while `f` runs, so the tile may depend on
    /// them).
    fn product_item<'s>(&self, f: &'s For) -> Option<(&'s Stmt, Vec<&'s For>)> {
        let body = single(&f.body);
        let items: Vec<&Stmt> = match body {
            Stmt::Seq(v) => v.iter().collect(),
            other => vec![other],
        };
        let mut with = items.iter().filter(|s| !tensorized_nests(s).is_empty());
        let (Some(item), None) = (with.next(), with.next()) else {
            return None;
        };
        let mut item = single(item);
        let mut warps: Vec<&For> = Vec::new();
        while let Stmt::For(w) = item {
            let tag = w.thread.as_deref().unwrap_or_default();
            let fresh = !warps.iter().any(|o| o.thread.as_deref() == Some(tag));
            if w.kind != ForKind::ThreadBinding
                || !matches!(tag, "threadIdx.y" | "threadIdx.z")
                || !fresh
            {
                break;
            }
            let dim = self.kernel.as_ref().and_then(|k| k.dims.get(tag));
            let ext = self.launch_expr(&w.extent);
            // (The launch dimension may be the larger of several loops' constant extents.)
            let same = |d: &LaunchExpr| match (d.eval(&|_| None), ext.as_ref()) {
                (Some(n), Some(e)) => e.eval(&|_| None) == Some(n),
                _ => Some(d) == ext.as_ref(),
            };
            if const_int(&w.min) != Some(0) || !dim.is_some_and(same) {
                return None;
            }
            warps.push(w);
            item = single(&w.body);
        }
        Some((item, warps))
    }

    /// The texts of the plan's tiles (one per unit) and guards: `None` where a tile's place
    /// cannot be written or the unit loop does not move it.
    #[allow(clippy::type_complexity)]
    fn plan_texts(
        &mut self,
        buffer: BufferId,
        indices: &[Expr],
        vars: &[VarId],
        unit: Option<(VarId, i64)>,
        guard: &Option<Expr>,
        mentions_unit: &impl Fn(&Expr) -> bool,
    ) -> Res<Option<(Vec<Vec<String>>, Option<String>, Vec<Option<String>>)>> {
        let units = unit.map_or(1, |(_, n)| n);
        let (guard, unit_guards) = match (guard, unit) {
            (Some(g), Some((u, _))) if mentions_unit(g) => {
                let mut each = Vec::new();
                for k in 0..units {
                    let map = HashMap::from([(u, Expr::Int(k, self.func.vars[u].dtype))]);
                    let t = self.expr(&super::subst(g, &map))?.0;
                    each.push(Some(strip_parens(&t).to_string()));
                }
                (None, each)
            }
            (Some(g), _) => (
                Some(strip_parens(&self.expr(g)?.0).to_string()),
                vec![None; units as usize],
            ),
            (None, _) => (None, vec![None; units as usize]),
        };
        let mut texts = Vec::new();
        for k in 0..units {
            // The unit loop's iteration `k`: its tile.
            let mut idx = indices.to_vec();
            if let Some((u, _)) = unit {
                let map = HashMap::from([(u, Expr::Int(k, self.func.vars[u].dtype))]);
                idx = idx.iter().map(|i| super::subst(i, &map)).collect();
            }
            let c_target = Expr::Load {
                buffer,
                indices: idx,
            };
            let mut tile = Vec::new();
            for (row, col) in C_FRAGMENT {
                let mut at = vec![row.to_string(), col.to_string()];
                at.resize(vars.len(), "0".to_string());
                match self.text_at(&c_target, vars, &at, &[]) {
                    Ok(t) => tile.push(t),
                    Err(_) => return Ok(None),
                }
            }
            texts.push(tile);
        }
        // Distinct tiles: the unit loop must move the tile.
        if unit.is_some() && texts.windows(2).any(|w| w[0] == w[1]) {
            return Ok(None);
        }
        Ok(Some((texts, guard, unit_guards)))
    }

    /// Writes, before the unit loop `unit` (several output tiles kept in registers, see
    /// [`Self::mma_accumulator_plan`]), the `A` fragment (and a 2:4 product's metadata) of the
    /// product nest inside it when it is the same for every tile — it does not move with the
    /// unit loop; under a predicate, it is read where some unit's tile is live — and
    /// marks it shared (`mma_a_shared`): the tiles' products read it instead of each loading
    /// the same fragment. Returns whether it did; if so, it opened a scope (`{`) the caller
    /// closes after the loop.
    pub(crate) fn mma_share_a(&mut self, unit: &For) -> Res<bool> {
        let nests = tensorized_nests(&unit.body);
        let [(nest, form)] = nests.as_slice() else {
            return Ok(false);
        };
        let Ok((vars, b)) = self.mma_nest(nest, *form) else {
            return Ok(false);
        };
        let Stmt::Store(st) = single(&b.body) else {
            return Ok(false);
        };
        if *form == Mma::Fill {
            return Ok(false);
        }
        // A guarded tile (a unit loop split off a loop of run-time extent): the fragment is
        // read where some unit's tile is live — its loads are then those that tile would do.
        let live = self.mma_unit_live.clone();
        let mention = |e: &Expr, v: VarId| mentions_via(b, e, v);
        let c_target = Expr::Load {
            buffer: st.buffer,
            indices: st.indices.clone(),
        };
        let Ok((a, bb, _)) = self.mma_operands("", &vars, st, &c_target, &mention) else {
            return Ok(false);
        };
        if mention(a, unit.var) {
            return Ok(false);
        }
        // The iterators the fragment may read: those not bound through the unit loop.
        let iters: Vec<BlockIter> = b
            .iters
            .iter()
            .filter(|it| !super::mentions(&it.binding, &[unit.var]))
            .cloned()
            .collect();
        let meta = match form {
            Mma::SpM16n8k32 => match self.sp_metadata("", bb, vars[3], &mention) {
                Ok(m) if !mention(&m.0, unit.var) => Some(m),
                _ => return Ok(false),
            },
            _ => None,
        };
        self.line("{");
        self.indent += 1;
        let init = if live.is_some() {
            " = {0u, 0u, 0u, 0u}"
        } else {
            ""
        };
        match &meta {
            None => self.line(&format!("uint32_t sptir_a[4]{init};")),
            Some(_) => self.line(&format!("uint32_t sptir_a[4]{init}, sptir_e = 0u;")),
        }
        if let Some(g) = &live {
            self.line(&format!("if ({g}) {{"));
            self.indent += 1;
        }
        match meta {
            None => self.write_a_fragment(a, &vars, b, &iters)?,
            Some((meta, meta_dt)) => {
                self.write_sp_a_fragment(a, &meta, meta_dt, &vars, b, &iters)?
            }
        }
        if live.is_some() {
            self.indent -= 1;
            self.line("}");
        }
        self.mma_a_shared = Some(vars[0]);
        Ok(true)
    }

    /// Writes, before the row unit loop `rows` (several row tiles per warp, see
    /// [`Self::mma_accumulator_plan`]), the `B` fragment of each unit of the 2:4 product inside
    /// it into `sptir_bs[u]` when `B` is read from a shared window (`ldmatrix`) and does not
    /// move with the row unit loop — proven by simplifying its row against the loops' ranges —
    /// and marks them shared (`mma_b_shared`). Returns whether it did; if so, it opened a scope
    /// the caller closes after the loop.
    pub(crate) fn mma_share_b(&mut self, rows: &For) -> Res<bool> {
        let Some((_, units)) = self.mma_acc_rows else {
            return Ok(false);
        };
        let Some(u) = self.mma_acc_unit else {
            return Ok(false);
        };
        let nests = tensorized_nests(&rows.body);
        let [(nest, Mma::SpM16n8k32)] = nests.as_slice() else {
            return Ok(false);
        };
        let Ok((vars, b)) = self.mma_nest(nest, Mma::SpM16n8k32) else {
            return Ok(false);
        };
        let Stmt::Store(st) = single(&b.body) else {
            return Ok(false);
        };
        let mention = |e: &Expr, v: VarId| mentions_via(b, e, v);
        let c_target = Expr::Load {
            buffer: st.buffer,
            indices: st.indices.clone(),
        };
        let Ok((_, bb, _)) = self.mma_operands("", &vars, st, &c_target, &mention) else {
            return Ok(false);
        };
        let Ok((meta, _)) = self.sp_metadata("", bb, vars[3], &mention) else {
            return Ok(false);
        };
        let mut b_at = bb.clone();
        b_at.rewrite_post_order(&mut |x| {
            if *x == meta {
                *x = Expr::Var(vars[3]);
            }
        });
        if !self.shared_rows(&b_at, b, vars[1]) || !self.independent_of(&b_at, b, rows.var) {
            return Ok(false);
        }
        self.line("{");
        self.indent += 1;
        self.line(&format!("uint32_t sptir_bs[{units}][4];"));
        let at = [
            "0".to_string(),
            "0".to_string(),
            "sptir_g".to_string(),
            "sptir_t".to_string(),
        ];
        let (rdt, udt) = (self.func.vars[rows.var].dtype, self.func.vars[u].dtype);
        for k in 0..units {
            self.let_subst.insert(rows.var, int_literal(0, rdt));
            self.let_subst
                .insert(u, format!("({})", int_literal(k, udt)));
            let p = self.ptr_at(&b_at, &vars, &at, &b.iters);
            self.let_subst.remove(&rows.var);
            self.let_subst.remove(&u);
            self.line(&format!("sptir_ldmatrix_x4_trans(sptir_bs[{k}], {});", p?));
        }
        self.mma_b_shared = Some(vars[0]);
        Ok(true)
    }

    /// Whether the load `e` of block `b` (its iterators' bindings substituted) provably reads
    /// the same element for every value of the loop over `v`, simplified against the ranges of
    /// the loops of the function.
    fn independent_of(&self, e: &Expr, b: &Block, v: VarId) -> bool {
        let Expr::Load { indices, .. } = e else {
            return false;
        };
        let map: HashMap<VarId, Expr> = b
            .iters
            .iter()
            .map(|it| (it.var, it.binding.clone()))
            .collect();
        let mut an = sparsetir_arith::Analyzer::new();
        an.assume_no_overflow(true);
        self.func.body.visit(&mut |s| {
            if let Stmt::For(l) = s {
                an.bind_range(l.var, &l.min, &l.extent);
            }
        });
        let zero = HashMap::from([(v, Expr::Int(0, self.func.vars[v].dtype))]);
        indices.iter().all(|i| {
            let i = super::subst(i, &map);
            let at0 = super::subst(&i, &zero);
            let d = an.simplify(self.func, &Expr::sub(i, at0));
            matches!(d, Expr::Int(0, _))
        })
    }

    /// The register accumulators of `plan` loaded from their tiles (`into_registers`) or stored
    /// back, where the loop runs (`sptir_acc_live`), each unit's under its own guard.
    pub(crate) fn acc_transfer(&mut self, plan: &AccumulatorPlan, into_registers: bool) {
        self.line("if (sptir_acc_live) {");
        self.indent += 1;
        for (u, texts) in plan.texts.iter().enumerate() {
            let lines = texts
                .iter()
                .enumerate()
                .map(|(i, c)| match into_registers {
                    true => format!("{} = {c};", plan.slot(u, i)),
                    false => format!("{c} = {};", plan.slot(u, i)),
                })
                .collect();
            self.unit_lines(plan, u, lines);
        }
        self.indent -= 1;
        self.line("}");
    }

    /// Writes `lines` (the loads or stores of unit `u`'s accumulator fragment) under the unit's
    /// own guard, if it has one.
    fn unit_lines(&mut self, plan: &AccumulatorPlan, u: usize, lines: Vec<String>) {
        let guard = plan.unit_guard(u);
        if let Some(g) = guard {
            self.line(&format!("if ({g}) {{"));
            self.indent += 1;
        }
        for l in lines {
            self.line(&l);
        }
        if guard.is_some() {
            self.indent -= 1;
            self.line("}");
        }
    }

    /// Whether the tensorized fill `st` is absorbed by `next`, the statement after it: a serial
    /// loop that keeps the same tile in registers ([`Self::mma_accumulator_plan`], the same
    /// four element texts), in code every thread of the block runs alike. The fill is then
    /// not written and the loop's accumulator starts with the filled value (`mma_fill_init`,
    /// which also hands the loop its plan).
    pub(crate) fn mma_fill_absorbed(&mut self, st: &Stmt, next: Option<&Stmt>) -> Res<bool> {
        let (Stmt::For(outer), Some(Stmt::For(next))) = (st, next) else {
            return Ok(false);
        };
        // The fill nest, possibly inside an unrolled loop over the unit tiles (the fill of a
        // loop keeping several tiles in registers).
        let (fill, fill_unit) = match single(&outer.body) {
            Stmt::For(inner)
                if Mma::of(outer).is_none()
                    && outer.kind == ForKind::Unrolled
                    && const_int(&outer.min) == Some(0)
                    && Mma::of(inner) == Some(Mma::Fill) =>
            {
                (
                    &**inner,
                    Some((outer.var, const_int(&outer.extent).unwrap_or(0))),
                )
            }
            _ => (&**outer, None),
        };
        if Mma::of(fill) != Some(Mma::Fill)
            || !self.warp_uniform()
            || self.mma_acc.is_some()
            || next.thread.is_some()
            || next.kind == ForKind::Vectorized
        {
            return Ok(false);
        }
        let Ok((vars, b)) = self.mma_nest(fill, Mma::Fill) else {
            return Ok(false);
        };
        let Stmt::Store(fs) = single(&b.body) else {
            return Ok(false);
        };
        // The filled value must be the same everywhere in the tile (the block's iterators
        // are the tile's loops here) and in every unit.
        let mut iters: Vec<VarId> = b.iters.iter().map(|it| it.var).collect();
        iters.extend(fill_unit.map(|(u, _)| u));
        let moves = super::mentions(&fs.value, &vars) || super::mentions(&fs.value, &iters);
        if moves || self.buf_dtype(fs.buffer) != DType::F32 {
            return Ok(false);
        }
        let Some(plan) = self.mma_accumulator_plan(next)? else {
            return Ok(false);
        };
        let units = fill_unit.map_or(1, |(_, n)| n);
        if plan.unit.is_some() != fill_unit.is_some() || plan.texts.len() as i64 != units {
            return Ok(false);
        }
        let guard = match self.mma_guard("", &vars, b) {
            Ok(g) => g,
            Err(_) => return Ok(false),
        };
        let c_target = Expr::Load {
            buffer: fs.buffer,
            indices: fs.indices.clone(),
        };
        // Unit by unit: the same tile and the same guard as the loop's plan.
        for k in 0..units {
            if let Some((u, _)) = fill_unit {
                self.let_subst.insert(u, k.to_string());
            }
            let r = self.fill_unit_matches(&plan, k as usize, &guard, &c_target, &vars, b);
            if let Some((u, _)) = fill_unit {
                self.let_subst.remove(&u);
            }
            if !r? {
                return Ok(false);
            }
        }
        let (val, vdt) = self.expr(&fs.value)?;
        self.mma_fill_init = Some((strip_parens(&cast(val, vdt, DType::F32)).to_string(), plan));
        Ok(true)
    }

    /// Whether unit `k` of a fill (its unit loop's variable already substituted) writes the
    /// tile `plan` keeps for unit `k`, under the same guard.
    fn fill_unit_matches(
        &mut self,
        plan: &AccumulatorPlan,
        k: usize,
        guard: &Option<Expr>,
        c_target: &Expr,
        vars: &[VarId],
        b: &Block,
    ) -> Res<bool> {
        let fill_guard = match guard {
            Some(g) => Some(strip_parens(&self.expr(g)?.0).to_string()),
            None => None,
        };
        let want_guard = match plan.unit {
            Some(_) => plan
                .unit_guard(k)
                .map(str::to_string)
                .or(plan.guard.clone()),
            None => plan.guard.clone(),
        };
        if fill_guard != want_guard {
            return Ok(false);
        }
        let mut texts = Vec::new();
        for (row, col) in C_FRAGMENT {
            let at = [row.to_string(), col.to_string()];
            match self.text_at(c_target, vars, &at, &b.iters) {
                Ok(t) => texts.push(t),
                Err(_) => return Ok(false),
            }
        }
        Ok(plan.texts.get(k) == Some(&texts))
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

    /// The metadata of a 2:4 product: the integer load inside `B`'s indices that moves with
    /// the slot loop `slot`, and its type.
    fn sp_metadata(
        &self,
        what: &str,
        bb: &Expr,
        slot: VarId,
        mention: &dyn Fn(&Expr, VarId) -> bool,
    ) -> Res<(Expr, DType)> {
        // The metadata: the integer load inside B's indices that moves with the slot.
        let mut meta: Option<(Expr, DType)> = None;
        if let Expr::Load { indices, .. } = bb {
            for e in indices {
                e.visit(&mut |x| {
                    if let Expr::Load { buffer, .. } = x {
                        let dt = self.buf_dtype(*buffer);
                        if meta.is_none() && dt.is_integer() && mention(x, slot) {
                            meta = Some((x.clone(), dt));
                        }
                    }
                });
            }
        }
        meta.ok_or_else(|| {
            self.unsupported(
                what,
                "B's row must move with the slot loop through one integer load (the position \
                 of the stored value in its group of four: `B[4 * group + idx[.., slot], ..]`)",
            )
        })
    }

    /// `A`'s fragment of a 2:4 product into `sptir_a[4]` and its metadata into `sptir_e`
    /// (declared by the caller, `sptir_e` zero), the block iterators `iters` bound.
    fn write_sp_a_fragment(
        &mut self,
        a: &Expr,
        meta: &Expr,
        meta_dt: DType,
        vars: &[VarId],
        b: &Block,
        iters: &[BlockIter],
    ) -> Res<()> {
        let slot = vars[3];
        // A (the compressed 16 x 16 tile, m16n8k16's A layout): register r holds rows g (+8
        // when r is odd) and the two slots of group t (+4 when r >= 2).
        let pairs = self.vector_fragment(a, b, &[(slot, 1)], 2);
        for r in 0..4 {
            let row = if r % 2 == 1 { "sptir_g + 8" } else { "sptir_g" };
            let grp = if r >= 2 { "sptir_t + 4" } else { "sptir_t" };
            if pairs {
                let at = [row.into(), "0".into(), grp.into(), "0".into()];
                let p = self.ptr_at(a, vars, &at, iters)?;
                self.line(&format!("sptir_a[{r}] = sptir_ld_pair({p});"));
                continue;
            }
            let mut half = Vec::new();
            for s in ["0", "1"] {
                let at = [row.into(), "0".into(), grp.into(), s.into()];
                half.push(self.a_element_bits(a, vars, &at, iters)?);
            }
            self.line(&format!(
                "sptir_a[{r}] = (uint32_t)(uint16_t)({}) | ((uint32_t)(uint16_t)({}) << 16);",
                half[0], half[1]
            ));
        }
        // Metadata (sparsity selector 0: lanes t = 0 and 1 of each quad supply it): lane t
        // describes groups 4 (t & 1) .. 4 (t & 1) + 3 of row g in its low 16 bits and of row
        // g + 8 in its high 16 bits, one 4-bit nibble per group (first slot's position in the
        // low 2 bits).
        self.line("const int32_t sptir_h = sptir_t & 1;");
        // The 8 positions of a lane's row and half are consecutive 32-bit integers where the
        // positions are stored group by group: two 16-byte loads.
        let quads =
            meta_dt.bits() == 32 && self.vector_fragment(meta, b, &[(vars[2], 2), (slot, 1)], 4);
        // 8-bit positions (`T.sp.compressed_fixed(G, (4, 2), indices, "int8")`): the 8 of a
        // lane's row and half as one 8-byte load.
        let octs =
            meta_dt.bits() == 8 && self.vector_fragment(meta, b, &[(vars[2], 2), (slot, 1)], 8);
        for (row, shift) in [("sptir_g", 0), ("sptir_g + 8", 16)] {
            if octs {
                let at = [row.into(), "0".into(), "4 * sptir_h".into(), "0".into()];
                let p = self.ptr_at(meta, vars, &at, iters)?;
                let fields: Vec<String> = (0..8)
                    .map(|j| format!("(((uint32_t)(sptir_m >> {}) & 3u) << {})", 8 * j, 2 * j))
                    .collect();
                self.line(&format!("{{ const uint64_t sptir_m = sptir_ld_oct({p});"));
                self.line(&format!(
                    "  sptir_e |= ({}) << {shift}; }}",
                    fields.join(" | ")
                ));
                continue;
            }
            if quads {
                for (k, q) in [0, 2].into_iter().enumerate() {
                    let at = [
                        row.into(),
                        "0".into(),
                        format!("4 * sptir_h + {q}"),
                        "0".into(),
                    ];
                    let p = self.ptr_at(meta, vars, &at, iters)?;
                    let base = shift + 8 * k;
                    self.line(&format!("{{ const int4 sptir_m = sptir_ld_quad({p});"));
                    self.line(&format!(
                        "  sptir_e |= (((uint32_t)sptir_m.x & 3u) | (((uint32_t)sptir_m.y & 3u) << 2) | \
                         (((uint32_t)sptir_m.z & 3u) << 4) | (((uint32_t)sptir_m.w & 3u) << 6)) << {base}; }}"
                    ));
                }
                continue;
            }
            for q in 0..4 {
                let grp = format!("4 * sptir_h + {q}");
                let mut pos = Vec::new();
                for s in ["0", "1"] {
                    let at = [row.into(), "0".into(), grp.clone(), s.into()];
                    pos.push(self.text_at(meta, vars, &at, iters)?);
                }
                self.line(&format!(
                    "sptir_e |= (((uint32_t)({}) & 3u) | (((uint32_t)({}) & 3u) << 2)) << {};",
                    pos[0],
                    pos[1],
                    shift + 4 * q
                ));
            }
        }
        Ok(())
    }

    /// `mma_sp_m16n8k32` (see the module documentation): `A` 2:4 structured sparse, its two
    /// stored values per group of four columns in the slots of the innermost loop, their
    /// positions in the group read from the integer load (the metadata) through which `B`'s
    /// row moves with the slot.
    fn write_mma_sp_product(
        &mut self,
        what: &str,
        vars: &[VarId],
        b: &Block,
        st: &Store,
        c_target: &Expr,
        mention: &dyn Fn(&Expr, VarId) -> bool,
    ) -> Res<()> {
        let (a, bb, suffix) = self.mma_operands(what, vars, st, c_target, mention)?;
        let slot = vars[3];
        let (meta, meta_dt) = self.sp_metadata(what, bb, slot, mention)?;
        // B at a logical row: the metadata load replaced by the position in the group (the
        // slot loop's variable stands for it; B may not otherwise move with the slot).
        let mut b_at = bb.clone();
        b_at.rewrite_post_order(&mut |x| {
            if *x == meta {
                *x = Expr::Var(slot);
            }
        });
        let mut b_without = bb.clone();
        b_without.rewrite_post_order(&mut |x| {
            if *x == meta {
                *x = Expr::int(0);
            }
        });
        if mention(&b_without, slot) || mention(a, vars[1]) {
            return Err(self.unsupported(
                what,
                "B may move with the slot only through the metadata load",
            ));
        }
        // B's fragments written before the row unit loop: this unit's.
        if self.mma_b_shared == Some(vars[0]) {
            let u = self
                .mma_acc_unit
                .map(|u| self.expr(&Expr::Var(u)))
                .transpose()?;
            let u = u.map_or("0".to_string(), |(t, _)| t);
            if self.mma_a_shared != Some(vars[0]) {
                self.line("uint32_t sptir_a[4], sptir_e = 0u;");
                self.write_sp_a_fragment(a, &meta, meta_dt, vars, b, &b.iters)?;
            }
            self.line(&format!("const uint32_t* sptir_b = sptir_bs[{u}];"));
            return self.mma_call(
                &format!("sptir_mma_sp_m16n8k32_{suffix}"),
                ", sptir_e",
                c_target,
                vars,
                b,
            );
        }
        if self.mma_a_shared == Some(vars[0]) {
            self.line("uint32_t sptir_b[4];");
        } else {
            self.line("uint32_t sptir_a[4], sptir_b[4], sptir_e = 0u;");
            self.write_sp_a_fragment(a, &meta, meta_dt, vars, b, &b.iters)?;
        }
        // B (32 x 8): register r holds rows 2t + 8r and 2t + 8r + 1, column g; row k is
        // position k % 4 of group k / 4. Where B's columns are adjacent (row-major B), each
        // 8 x 8 block r is read as pairs along its rows (lane 4g + t: row 8r + g, columns 2t,
        // 2t + 1) and transposed across the warp (`movmatrix`).
        // In shared memory with each row's 8 columns adjacent and aligned: one `ldmatrix`
        // (.x4.trans) reads the four registers, lane l giving the address of row l (group
        // l / 4, position l % 4).
        let b_shared = self.shared_rows(&b_at, b, vars[1]);
        if b_shared {
            let at = ["0".into(), "0".into(), "sptir_g".into(), "sptir_t".into()];
            let p = self.ptr_at(&b_at, vars, &at, &b.iters)?;
            self.line(&format!("sptir_ldmatrix_x4_trans(sptir_b, {p});"));
        }
        let b_rows = !b_shared && self.vector_fragment(&b_at, b, &[(vars[1], 1)], 2);
        for r in (0..4).filter(|_| !b_shared) {
            if b_rows {
                let at = [
                    "0".into(),
                    "2 * sptir_t".into(),
                    format!("{} + (sptir_g >> 2)", 2 * r),
                    "sptir_g & 3".into(),
                ];
                let p = self.ptr_at(&b_at, vars, &at, &b.iters)?;
                self.line(&format!(
                    "sptir_b[{r}] = sptir_movmatrix_trans(sptir_ld_pair({p}));"
                ));
                continue;
            }
            let mut half = Vec::new();
            for e in 0..2 {
                let grp = format!("{} + ((2 * sptir_t + {e}) >> 2)", 2 * r);
                let pos = format!("(2 * sptir_t + {e}) & 3");
                let at = ["0".into(), "sptir_g".into(), grp, pos];
                half.push(self.text_at(&b_at, vars, &at, &b.iters)?);
            }
            self.line(&format!(
                "sptir_b[{r}] = (uint32_t)(uint16_t)({}) | ((uint32_t)(uint16_t)({}) << 16);",
                half[0], half[1]
            ));
        }
        self.mma_call(
            &format!("sptir_mma_sp_m16n8k32_{suffix}"),
            ", sptir_e",
            c_target,
            vars,
            b,
        )
    }
}

/// How a serial loop keeps a tensorized product's accumulator fragment in registers
/// ([`Writer::mma_accumulator_plan`]).
pub(crate) struct AccumulatorPlan {
    /// The nest's outermost loop variable.
    pub nest: VarId,
    /// The unit loop (one tile per iteration), if any.
    pub unit: Option<VarId>,
    /// The C texts of each fragment's four elements (one fragment per unit iteration).
    pub texts: Vec<Vec<String>>,
    /// The tile's guard (its block's predicate), which holds for the whole loop.
    pub guard: Option<String>,
    /// Each unit tile's own guard, where the block's predicate moves with the unit loop (the
    /// tile is loaded, computed and stored only where it holds); `None`s otherwise.
    pub unit_guards: Vec<Option<String>>,
    /// The declarations of the warp loops' variables (the product sits in loops over the
    /// block's warps, see `Writer::product_item`), written before the tile's load.
    pub warp_decl: Vec<String>,
    /// The row unit loop around the unit loop, if any, and the unit loop's extent: the tile of
    /// row unit `r` and unit `u` is fragment `r * units + u`.
    pub rows: Option<(VarId, i64)>,
}

impl AccumulatorPlan {
    /// Where some tile of the plan is live: the units' own guards joined, or the loop's guard
    /// (`None`: always).
    pub(crate) fn live(&self) -> Option<String> {
        let mut any: Vec<&str> = Vec::new();
        for g in self.unit_guards.iter().flatten() {
            if !any.contains(&g.as_str()) {
                any.push(g);
            }
        }
        match any.is_empty() {
            true => self.guard.clone(),
            false => Some(
                any.iter()
                    .map(|g| format!("({g})"))
                    .collect::<Vec<_>>()
                    .join(" || "),
            ),
        }
    }

    /// Unit `u`'s own guard, if it has one.
    pub(crate) fn unit_guard(&self, u: usize) -> Option<&str> {
        self.unit_guards.get(u).and_then(|g| g.as_deref())
    }

    /// The register of element `i` of fragment `u` (`u` is 0 without a unit loop).
    pub(crate) fn slot(&self, u: usize, i: usize) -> String {
        match self.unit {
            Some(_) => format!("sptir_acc[{u}][{i}]"),
            None => format!("sptir_acc[{i}]"),
        }
    }
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

/// The `mma` device functions: PTX on a GPU, the warp's fragments gathered with shuffles in the
/// emulator.
pub(crate) const MMA_PRELUDE: &str = r#"#ifndef SPTIR_EMU
static __device__ __forceinline__ void sptir_mma_m16n8k16_f16(float* c, const uint32_t* a, const uint32_t* b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
static __device__ __forceinline__ void sptir_mma_m16n8k16_bf16(float* c, const uint32_t* a, const uint32_t* b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
static __device__ __forceinline__ void sptir_mma_sp_m16n8k32_f16(float* c, const uint32_t* a, const uint32_t* b, uint32_t e) {
    asm volatile("mma.sp.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, 0x0;"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e));
}
static __device__ __forceinline__ void sptir_mma_sp_m16n8k32_bf16(float* c, const uint32_t* a, const uint32_t* b, uint32_t e) {
    asm volatile("mma.sp.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, 0x0;"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e));
}
/* Two adjacent 16-bit elements as one 32-bit load; four 32-bit integers as one 16-byte load
   (the writer checks the alignment). */
static __device__ __forceinline__ uint32_t sptir_ld_pair(const uint16_t* __restrict__ p) {
    return __ldg(reinterpret_cast<const unsigned int*>(p));
}
static __device__ __forceinline__ int4 sptir_ld_quad(const int32_t* __restrict__ p) {
    return __ldg(reinterpret_cast<const int4*>(p));
}
/* Eight 8-bit positions as one 8-byte load (the writer checks the alignment). */
static __device__ __forceinline__ uint64_t sptir_ld_oct(const int8_t* __restrict__ p) {
    return __ldg(reinterpret_cast<const unsigned long long*>(p));
}
static __device__ __forceinline__ uint64_t sptir_ld_oct(const uint8_t* __restrict__ p) {
    return __ldg(reinterpret_cast<const unsigned long long*>(p));
}
/* The warp's 8 x 8 matrix of 16-bit values transposed (lane 4r + c held row r, columns 2c and
   2c + 1; it gets the same of the transpose): a row-major B read as pairs along its rows
   becomes mma's column fragment. */
static __device__ __forceinline__ uint32_t sptir_movmatrix_trans(uint32_t x) {
    uint32_t d;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(d) : "r"(x));
    return d;
}
/* N (2 or 4) 8 x 8 matrices of 16-bit values from shared memory, transposed: lane 8i + j gives
   the address of row j of matrix i (8 consecutive elements, 16-byte aligned); register i of
   lane 4g + t receives rows 2t and 2t + 1 of matrix i at column g — a row-major B tile in
   shared memory read straight into mma's column fragment. */
static __device__ __forceinline__ void sptir_ldmatrix_x4_trans(uint32_t* r, const uint16_t* p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
}
static __device__ __forceinline__ void sptir_ldmatrix_x2_trans(uint32_t* r, const uint16_t* p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(a) : "memory");
}
#else
/* ldmatrix .trans: every lane's row address gathered with shuffles, the elements read from the
   shared array (race-checked) — the layout of the GPU's instruction; row addresses must be
   16-byte aligned there, and are checked here. */
template <int N>
static void sptir_ldmatrix_trans(uint32_t* r, const ::sptir_emu::SPtr<uint16_t>& p) {
    if (p.off % 8 != 0)
        ::sptir_emu::fail_unsupported("ldmatrix: a row address is not 16-byte aligned");
    const int lane = (int)(threadIdx.x & 31), g = lane >> 2, t = lane & 3;
    for (int i = 0; i < N; ++i) {
        const int64_t r0 = __shfl_sync(0xffffffffu, p.off, 8 * i + 2 * t);
        const int64_t r1 = __shfl_sync(0xffffffffu, p.off, 8 * i + 2 * t + 1);
        const uint16_t lo = ::sptir_emu::SRef<uint16_t>(p.data, p.m, r0 + g).load();
        const uint16_t hi = ::sptir_emu::SRef<uint16_t>(p.data, p.m, r1 + g).load();
        r[i] = (uint32_t)lo | ((uint32_t)hi << 16);
    }
}
static void sptir_ldmatrix_x4_trans(uint32_t* r, const ::sptir_emu::SPtr<uint16_t>& p) {
    sptir_ldmatrix_trans<4>(r, p);
}
static void sptir_ldmatrix_x2_trans(uint32_t* r, const ::sptir_emu::SPtr<uint16_t>& p) {
    sptir_ldmatrix_trans<2>(r, p);
}
template <bool W>
static uint32_t sptir_ld_pair(const ::sptir_emu::GPtr<uint16_t, W>& p) {
    return ::sptir_emu::vector_load<uint32_t, uint16_t, W, 2>(p);
}
template <bool W>
static int4 sptir_ld_quad(const ::sptir_emu::GPtr<int32_t, W>& p) {
    return ::sptir_emu::vector_load<int4, int32_t, W, 4>(p);
}
template <bool W>
static uint64_t sptir_ld_oct(const ::sptir_emu::GPtr<int8_t, W>& p) {
    return ::sptir_emu::vector_load<uint64_t, int8_t, W, 8>(p);
}
template <bool W>
static uint64_t sptir_ld_oct(const ::sptir_emu::GPtr<uint8_t, W>& p) {
    return ::sptir_emu::vector_load<uint64_t, uint8_t, W, 8>(p);
}
/* movmatrix.m8n8.trans.b16: lane 4g + t receives M[2t][g] and M[2t + 1][g], element M[r][c]
   being held by lane 4r + c / 2 (low half for even c). */
static __device__ uint32_t sptir_movmatrix_trans(uint32_t x) {
    const int lane = (int)(threadIdx.x & 31), g = lane >> 2, t = lane & 3;
    const uint32_t lo = __shfl_sync(0xffffffffu, x, 8 * t + (g >> 1));
    const uint32_t hi = __shfl_sync(0xffffffffu, x, 8 * t + 4 + (g >> 1));
    const int sh = (g & 1) * 16;
    return ((lo >> sh) & 0xffffu) | (((hi >> sh) & 0xffffu) << 16);
}
/* The tile product from every lane's fragments (PTX's m16n8k16 layouts). */
static __device__ void sptir_mma_m16n8k16_emu(float* c, const uint32_t* a, const uint32_t* b, bool bf) {
    float A[16][16], B[16][8];
    for (int src = 0; src < 32; ++src) {
        const int sg = src >> 2, st = src & 3;
        for (int r = 0; r < 4; ++r) {
            const uint32_t v = __shfl_sync(0xffffffffu, a[r], src);
            const int row = sg + ((r & 1) ? 8 : 0), col = 2 * st + ((r & 2) ? 8 : 0);
            A[row][col] = bf ? sptir_bf2f((uint16_t)(v & 0xffffu)) : sptir_h2f((uint16_t)(v & 0xffffu));
            A[row][col + 1] = bf ? sptir_bf2f((uint16_t)(v >> 16)) : sptir_h2f((uint16_t)(v >> 16));
        }
        for (int r = 0; r < 2; ++r) {
            const uint32_t v = __shfl_sync(0xffffffffu, b[r], src);
            const int row = 2 * st + (r ? 8 : 0);
            B[row][sg] = bf ? sptir_bf2f((uint16_t)(v & 0xffffu)) : sptir_h2f((uint16_t)(v & 0xffffu));
            B[row + 1][sg] = bf ? sptir_bf2f((uint16_t)(v >> 16)) : sptir_h2f((uint16_t)(v >> 16));
        }
    }
    const int lane = (int)(threadIdx.x & 31), g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 4; ++i) {
        const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
        float s = c[i];
        for (int k = 0; k < 16; ++k) s += A[row][k] * B[k][col];
        c[i] = s;
    }
}
/* The sparse tile product (mma.sp m16n8k32, sparsity selector 0): the compressed 16 x 16 A
   in m16n8k16's A layout, each value placed at the position its metadata gives in its group of
   four columns (lane 4q + h, h < 2, holds row q's and row q + 8's positions for the
   compressed columns 8h .. 8h + 7 in its low and high 16 bits, 2 bits each); B 32 x 8, lane l
   holding rows 2t + 8r, 2t + 8r + 1 of column g in register r. */
static __device__ void sptir_mma_sp_m16n8k32_emu(float* c, const uint32_t* a, const uint32_t* b, uint32_t e, bool bf) {
    float A[16][32], B[32][8], V[16][16];
    int P[16][16];
    for (int r = 0; r < 16; ++r) for (int k = 0; k < 32; ++k) A[r][k] = 0.0f;
    for (int src = 0; src < 32; ++src) {
        const int sg = src >> 2, st = src & 3;
        for (int r = 0; r < 4; ++r) {
            const uint32_t v = __shfl_sync(0xffffffffu, a[r], src);
            const int row = sg + ((r & 1) ? 8 : 0), col = 2 * st + ((r & 2) ? 8 : 0);
            V[row][col] = bf ? sptir_bf2f((uint16_t)(v & 0xffffu)) : sptir_h2f((uint16_t)(v & 0xffffu));
            V[row][col + 1] = bf ? sptir_bf2f((uint16_t)(v >> 16)) : sptir_h2f((uint16_t)(v >> 16));
        }
        for (int r = 0; r < 4; ++r) {
            const uint32_t v = __shfl_sync(0xffffffffu, b[r], src);
            const int row = 2 * st + 8 * r;
            B[row][sg] = bf ? sptir_bf2f((uint16_t)(v & 0xffffu)) : sptir_h2f((uint16_t)(v & 0xffffu));
            B[row + 1][sg] = bf ? sptir_bf2f((uint16_t)(v >> 16)) : sptir_h2f((uint16_t)(v >> 16));
        }
        const uint32_t ev = __shfl_sync(0xffffffffu, e, src);
        if (st < 2) {
            for (int j = 0; j < 8; ++j) {
                P[sg][8 * st + j] = (int)((ev >> (2 * j)) & 3u);
                P[sg + 8][8 * st + j] = (int)((ev >> (16 + 2 * j)) & 3u);
            }
        }
    }
    for (int r = 0; r < 16; ++r)
        for (int j = 0; j < 16; ++j) A[r][4 * (j >> 1) + P[r][j]] += V[r][j];
    const int lane = (int)(threadIdx.x & 31), g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 4; ++i) {
        const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
        float s = c[i];
        for (int k = 0; k < 32; ++k) s += A[row][k] * B[k][col];
        c[i] = s;
    }
}
static __device__ void sptir_mma_sp_m16n8k32_f16(float* c, const uint32_t* a, const uint32_t* b, uint32_t e) { sptir_mma_sp_m16n8k32_emu(c, a, b, e, false); }
static __device__ void sptir_mma_sp_m16n8k32_bf16(float* c, const uint32_t* a, const uint32_t* b, uint32_t e) { sptir_mma_sp_m16n8k32_emu(c, a, b, e, true); }
static __device__ void sptir_mma_m16n8k16_f16(float* c, const uint32_t* a, const uint32_t* b) { sptir_mma_m16n8k16_emu(c, a, b, false); }
static __device__ void sptir_mma_m16n8k16_bf16(float* c, const uint32_t* a, const uint32_t* b) { sptir_mma_m16n8k16_emu(c, a, b, true); }
#endif

"#;
