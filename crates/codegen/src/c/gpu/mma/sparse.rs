//! 2:4 structured sparsity on sparse tensor cores (`mma_sp_m16n8k32`): the metadata load,
//! the compressed `A` fragment with its packed positions, and the product (see the parent
//! module's documentation).

use super::*;

impl Writer<'_> {
    /// The metadata of a 2:4 product: the integer load inside `B`'s indices that moves with
    /// the slot loop `slot`, and its type.
    pub(super) fn sp_metadata(
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
    /// (declared by the caller, `sptir_e` zero; `dst`: other names for the two), the block
    /// iterators `iters` bound.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn write_sp_a_fragment(
        &mut self,
        a: &Expr,
        meta: &Expr,
        meta_dt: DType,
        vars: &[VarId],
        b: &Block,
        iters: &[BlockIter],
        dst: Option<(&str, &str)>,
    ) -> Res<()> {
        let (fa, fe) = dst.unwrap_or(("sptir_a", "sptir_e"));
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
                self.line(&format!("{fa}[{r}] = sptir_ld_pair({p});"));
                continue;
            }
            let mut half = Vec::new();
            for s in ["0", "1"] {
                let at = [row.into(), "0".into(), grp.into(), s.into()];
                half.push(self.a_element_bits(a, vars, &at, iters)?);
            }
            self.line(&format!(
                "{fa}[{r}] = (uint32_t)(uint16_t)({}) | ((uint32_t)(uint16_t)({}) << 16);",
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
                self.line(&format!("{{ const uint64_t sptir_m = sptir_ld_oct({p});"));
                self.line(&format!(
                    "  {fe} |= ({}) << {shift}; }}",
                    pack_positions8("sptir_m")
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
                        "  {fe} |= (((uint32_t)sptir_m.x & 3u) | (((uint32_t)sptir_m.y & 3u) << 2) | \
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
                    "{fe} |= (((uint32_t)({}) & 3u) | (((uint32_t)({}) & 3u) << 2)) << {};",
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
    pub(super) fn write_mma_sp_product(
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
                self.write_sp_a_fragment(a, &meta, meta_dt, vars, b, &b.iters, None)?;
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
            self.write_sp_a_fragment(a, &meta, meta_dt, vars, b, &b.iters, None)?;
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

/// The C text packing the eight 8-bit positions of the 64-bit `word` (C text), two bits each,
/// into the low 16 bits of `mma.sp`'s metadata (the first position lowest).
///
/// Each 32-bit half is masked to its positions' two bits (`0x03030303`) and multiplied by
/// `2^6 + 2^12 + 2^18 + 2^24`: byte `i`'s bits land at bit `24 + 2 i` and every other product
/// below bit 24 (at 6, 12, 14, 18, 20 and 22, two bits each: no carries) or past bit 31, so
/// the top byte is the four positions packed. Three instructions a half instead of a shift,
/// a mask and a merge a position (the run loop of a warpgroup's 2:4 products reads two words
/// a run: about 24 fewer instructions).
pub(super) fn pack_positions8(word: &str) -> String {
    let half = |w: String| format!("((((uint32_t)({w}) & 0x03030303u) * 0x01041040u) >> 24)");
    format!(
        "({} | ({} << 8))",
        half(word.to_string()),
        half(format!("({word}) >> 32"))
    )
}
