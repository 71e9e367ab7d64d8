//! 2:4 tensor-core products' operand `A` (compressed values, 8-bit positions) staged in shared
//! memory by the run loop's own pipelined copies, instead of read from global memory (into
//! registers one run ahead, for a warpgroup).
//!
//! # When
//!
//! The double-buffered run loop (`pipeline.rs`) of a 2:4 product's accumulator plan with a
//! unit loop (`accumulate.rs`; per warp, or a warpgroup's, `warpgroup.rs`) annotated
//! `{"stage_a": 1}` (the schedule's `sch.annotate(run, "stage_a", 1)`). Each row tile of 16
//! rows of a run is 16 × 16 compressed values (32 bytes a row) and 16 × 16 positions (one byte
//! each); both must be stored row by row there (the 16 of a row and run adjacent and 16-element
//! aligned: the affine offset proves it), the positions 8-bit, the tile unguarded.
//!
//! # What is written
//!
//! Two shared arrays of `d + 1` stages (the run loop's windows) of one tile per row-tile warp
//! and row unit: `sptir_as` (256 16-bit values a tile) and `sptir_es` (256 bytes). With the
//! copy of run `k + d` into the loop's window, in the same `cp.async` group, each warp copies
//! its tiles of run `k + d`: lane `l` the 16 bytes of row `l / 2` holding groups `4 (l % 2) ..`
//! (one `cp.async` of 16 bytes; the two halves of a row swapped in rows 4-7 and 12-15 so that
//! the eight rows an `ldmatrix` phase reads fall in distinct banks), lanes 0-15 the 16
//! positions of their row. Column warps (a warp loop `A` does not move with) read the tiles
//! their index-0 warp copied. At the product, after the pipeline's wait and barrier, a lane
//! reads its fragment with one `ldmatrix.x4` (lane `l` naming row `l % 16`, half `l / 16`: the
//! four 8 × 8 matrices are `mma.sp`'s four `A` registers) and its positions with two 8-byte
//! loads. The loads of `A` thus run `d` runs ahead without registers held across the product,
//! and as 16-byte copies instead of 4-byte loads.
//!
//! With the run loop also annotated `{"packed_positions": 1}` (and `stage_a` = `"tma"`), the
//! positions come packed for the tensor cores instead: the kernel takes a tensor map of a
//! device buffer the runtime derives from the 8-bit positions before the launches
//! (`TempFill::TensorCoreMetadata`: one `u32` word per row and run, 2 bits a position, the
//! words of a run consecutive over the rows), one box of the stage's rows' words a stage
//! (`sptir_es` then holds 16 words a tile: 64 bytes instead of 256), and a lane's metadata is
//! half of the word of each of its two rows: two 4-byte shared loads, a shift and a mask each,
//! instead of two 8-byte loads and the packing of 16 positions. The copy engine then moves
//! 576 bytes of `A` a tile and run instead of 768.
//!
//! With the run loop also annotated `{"packed_values": 1}`, the values' box likewise comes
//! from a derived buffer (`TempFill::TensorCoreValues`): a run's values for consecutive rows
//! contiguous, in the image of the 32-byte swizzle, so that the box's rows are 128 bytes.
//!
//! With the run loop annotated `{"wgmma_ss": 1}` too (warpgroup products, `A` by the copy
//! engine), the tensor cores read `A` from the stage themselves (`wgmma`'s shared-memory form:
//! a descriptor of the warpgroup's 64 rows, 32-byte swizzled, K-major, 256 bytes between
//! groups of 8 rows) instead of from registers an `ldmatrix` filled, and a run's products are
//! one group: every row unit's metadata is loaded first (`sptir_er`, the run's body written
//! once for it), then one `wgmma.fence`, every row unit's product (the body written again),
//! one `wgmma.commit_group` and the wait. `ptxas` keeps such a group in flight while the
//! next run's metadata loads (a product reading `A` from registers is serialized instead: the
//! registers an `ldmatrix` defines while products are in flight). With several row units a
//! warp, the warpgroup's tiles of one row unit must be adjacent: the stage then holds the
//! tiles unit-major, which the values' derived layout makes (`packed_values`, blocks of
//! `16 warps units` rows reordered).
//!
//! The emulator runs `cp.async` as the copy, `ldmatrix` by gathering the lanes' row addresses
//! in one rendezvous of the warp, race-checked like every shared array; a product reading `A`
//! through a descriptor reads the lanes' fragments from the stage when its group completes,
//! race-checked from its issue.

use super::super::DerivedKind;
use super::sparse::pack_positions8;
use super::warpgroup::SpProduct;
use super::*;
use crate::cuda::{LaunchExpr, TensorMapArg};

/// The run-loop annotation asking for `A` staged in shared memory (see the module
/// documentation).
pub const STAGE_A_ATTR: &str = "stage_a";

/// A run loop's staging of `A` (see the module documentation).
#[derive(Clone)]
pub(crate) struct AStage {
    /// The run loop's variable.
    run: VarId,
    /// The run loop's start (C text).
    min: String,
    /// Stages: the run loop's windows.
    depth: i64,
    /// The plan's unit loop (holding the one 2:4 product).
    unit: For,
    /// The row unit loop and its extent, if any.
    rows: Option<(VarId, i64)>,
    /// The warp loops around the product: variable, extent, and whether `A` moves with it.
    warps: Vec<(VarId, i64, bool)>,
    /// Filled by the tensor copy engine instead of `cp.async` (`stage_a` = `"tma"`).
    tma: Option<ATma>,
    /// The tensor cores read `A` from the stage (`wgmma_ss`); the values' tiles are then
    /// unit-major where a warp has several row units.
    ss: bool,
}

/// The pass over a run's products of a run loop annotated `wgmma_ss` (see the module
/// documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SsPass {
    /// Every row unit's metadata into `sptir_er`.
    Metadata,
    /// Every row unit's product, issued.
    Issue,
}

/// The run-loop annotation asking for the tensor cores to read `A` from shared memory (see
/// the module documentation).
pub const WGMMA_SS_ATTR: &str = "wgmma_ss";

/// A staged `A` the tensor copy engine fills (see the module documentation): one box of the
/// values and one of the positions a stage, both covering the stage's tiles, completing on the
/// stage's barrier of the run loop's copy-engine window (`tma.rs`).
#[derive(Clone)]
pub(crate) struct ATma {
    /// The values' and the positions' buffers and tensor maps (kernel arguments).
    values: BufferId,
    positions: BufferId,
    values_map: String,
    positions_map: String,
    /// `[columns, rows]` of the values' and the positions' views (the rows of `A`).
    values_view: [i64; 2],
    positions_view: [i64; 2],
    /// The window's barriers.
    bars: String,
    /// The cluster's blocks along x and y where blocks along y share the boxes (`tma.rs`'s
    /// `TMA_CLUSTER_Y_ATTR`): each copies `1 / Cy` of their rows to the blocks of its x rank.
    share: Option<(i64, i64)>,
    /// The positions packed for the tensor cores (`packed_positions`): the index of the
    /// derived buffer (`Writer::derived`) the positions' map views instead of the positions.
    packed: Option<usize>,
    /// The values laid out run by run (`packed_values`): the index of the derived buffer the
    /// values' map views instead of the values.
    packed_values: Option<usize>,
}

/// What of `A` comes laid out for the tensor cores (`packed_positions`, `packed_values`).
#[derive(Clone, Copy)]
struct Packing {
    positions: bool,
    values: bool,
    /// The values' tiles reordered unit-major in blocks of `(warps, units)` tiles.
    by_unit: (i64, i64),
}

/// The value of the `stage_a` annotation asking for `A`'s tiles by the tensor copy engine.
pub const STAGE_A_TMA: &str = "tma";

/// The run-loop annotation asking for the positions packed for the tensor cores (see the
/// module documentation).
pub const PACKED_POSITIONS_ATTR: &str = "packed_positions";

/// The run-loop annotation asking for the values laid out run by run for the tensor cores (see
/// the module documentation).
pub const PACKED_VALUES_ATTR: &str = "packed_values";

/// Elements of a tile in `sptir_es`: 256 8-bit positions, or 16 packed words.
fn es_tile(packed: bool) -> i64 {
    if packed {
        16
    } else {
        256
    }
}

/// Bytes the copy engine moves into a stage of `A` per tile: 256 16-bit values and 256
/// 8-bit positions (or their 16 packed words).
fn tile_bytes(packed: bool) -> i64 {
    256 * 2 + if packed { 16 * 4 } else { 256 }
}

impl AStage {
    /// Where the tensor cores read `A` from the stage (`wgmma_ss`): the row units a warp.
    pub(crate) fn ss_row_units(&self) -> Option<i64> {
        self.ss.then(|| self.row_units())
    }

    /// Whether its positions come packed for the tensor cores (`packed_positions`).
    fn packed(&self) -> bool {
        self.tma.as_ref().is_some_and(|t| t.packed.is_some())
    }

    /// Tiles per stage.
    fn tiles(&self) -> i64 {
        let w: i64 = self.warps.iter().filter(|w| w.2).map(|w| w.1).product();
        w * self.row_units()
    }

    /// Row units a warp (1 without a row unit loop).
    fn row_units(&self) -> i64 {
        self.rows.map_or(1, |(_, n)| n)
    }
}

/// Whether `f` asks for `A` staged in shared memory.
pub(crate) fn stages_a(f: &For) -> bool {
    f.annotations.get(STAGE_A_ATTR).is_some()
}

impl Writer<'_> {
    /// For the run loop `f` (`plan`: its accumulator plan, if any; `pipelined`: whether it is
    /// double-buffered): the staging of `A` it asks for, its shared arrays declared. `None`
    /// where it asks for none; an error where it asks but cannot have it.
    pub(crate) fn a_stage_plan(
        &mut self,
        f: &For,
        plan: Option<&AccumulatorPlan>,
        pipelined: bool,
        start: &str,
    ) -> Res<Option<AStage>> {
        if !stages_a(f) {
            return Ok(None);
        }
        let what = format!(
            "loop `{}` annotated `{STAGE_A_ATTR}`",
            self.func.vars[f.var].name
        );
        let Some(plan) = plan.filter(|p| p.unit.is_some() && pipelined) else {
            return Err(self.unsupported(
                &what,
                "it must be the double-buffered run loop (`double_buffer`) of 2:4 products \
                 kept in registers with a unit loop",
            ));
        };
        if plan.guard.is_some() || plan.unit_guards.iter().any(Option::is_some) {
            return Err(self.unsupported(&what, "the products' tiles must not be guarded"));
        }
        let Some(unit) = plan.unit.and_then(|u| find_loop(&f.body, u)) else {
            return Err(self.invalid("an accumulator plan's unit loop is not in its loop"));
        };
        let nests = tensorized_nests(&unit.body);
        let SpProduct {
            vars,
            b,
            a,
            meta,
            meta_dt,
            ..
        } = self.sp_product(&nests, &what)?;
        let rows16 = self.vector_fragment(a, b, &[(vars[2], 2), (vars[3], 1)], 16);
        let pos16 = meta_dt.bits() == 8
            && self.vector_fragment(&meta, b, &[(vars[2], 2), (vars[3], 1)], 16);
        if !rows16 || !pos16 {
            return Err(self.unsupported(
                &what,
                "A's 16 values of a row and run, and their 16 8-bit positions, must be \
                 adjacent and 16-element aligned",
            ));
        }
        let warps = match self.product_item(f) {
            Some((_, w)) => w
                .iter()
                .map(|w| {
                    let moves = mentions_via(b, a, w.var) || mentions_via(b, &meta, w.var);
                    (w.var, const_int(&w.extent).unwrap_or(1), moves)
                })
                .collect(),
            None => Vec::new(),
        };
        let mut stage = AStage {
            run: f.var,
            min: start.to_string(),
            depth: Self::pipeline_stages(f),
            unit: unit.clone(),
            rows: plan.rows.map(|(r, _)| {
                let n = find_loop(&f.body, r).and_then(|l| const_int(&l.extent));
                (r, n.unwrap_or(1))
            }),
            warps,
            tma: None,
            ss: f.annotations.get(WGMMA_SS_ATTR).is_some(),
        };
        let tma =
            matches!(f.annotations.get(STAGE_A_ATTR), Some(AttrValue::Str(v)) if v == STAGE_A_TMA);
        let packed = f.annotations.get(PACKED_POSITIONS_ATTR).is_some();
        let packed_values = f.annotations.get(PACKED_VALUES_ATTR).is_some();
        for (asked, attr, what_) in [
            (packed, PACKED_POSITIONS_ATTR, "positions"),
            (packed_values, PACKED_VALUES_ATTR, "values"),
        ] {
            if asked && !tma {
                return Err(self.unsupported(
                    &format!("loop `{}` annotated `{attr}`", self.func.vars[f.var].name),
                    format!(
                        "the packed {what_} come by the copy engine: annotate the loop \
                         `{STAGE_A_ATTR}` = \"{STAGE_A_TMA}\" too"
                    ),
                ));
            }
        }
        let h = stage.row_units();
        if stage.ss {
            let ss_what = format!(
                "loop `{}` annotated `{WGMMA_SS_ATTR}`",
                self.func.vars[f.var].name
            );
            if !tma || plan.warpgroup.is_none() {
                return Err(self.unsupported(
                    &ss_what,
                    format!(
                        "the tensor cores read A from a stage the copy engine fills, for \
                         warpgroup products: annotate the loop `{STAGE_A_ATTR}` = \
                         \"{STAGE_A_TMA}\" and its products `warpgroup`"
                    ),
                ));
            }
            if stage.warps.iter().any(|w| !w.2 && w.1 > 1) {
                return Err(self.unsupported(
                    &ss_what,
                    "a warpgroup's 4 warps must be row warps (no column warps)",
                ));
            }
            if h > 1 && !packed_values {
                return Err(self.unsupported(
                    &ss_what,
                    format!(
                        "with {h} row units a warp, the stage holds A's tiles unit-major, \
                         which the values' derived layout makes: annotate the loop \
                         `{PACKED_VALUES_ATTR}` too"
                    ),
                ));
            }
        }
        if tma {
            let what = format!("{what} \"{STAGE_A_TMA}\"");
            let packing = Packing {
                positions: packed,
                values: packed_values,
                by_unit: if stage.ss && h > 1 {
                    (stage.tiles() / h, h)
                } else {
                    (1, 1)
                },
            };
            stage.tma = Some(self.a_tma_plan(f, &stage, b, a, &meta, &vars, packing, &what)?);
        }
        let size = stage.depth * stage.tiles() * 256;
        self.declare_shared(&what, DType::F16, "uint16_t", "sptir_as", size)?;
        if packed {
            let words = stage.depth * stage.tiles() * es_tile(true);
            self.declare_shared(&what, DType::U32, "uint32_t", "sptir_es", words)?;
        } else {
            self.declare_shared(&what, DType::I8, "int8_t", "sptir_es", size)?;
        }
        if let (Some(t), Some(k)) = (&stage.tma, self.kernel.as_mut()) {
            // The boxes land at the arrays' starts' alignment (`Writer::dynamic_shared`), and
            // the kernel takes the two maps after its other arguments.
            k.tma_dst
                .extend(["sptir_as".to_string(), "sptir_es".to_string()]);
            let cy = t.share.map_or(1, |(_, cy)| cy);
            let rows = (stage.tiles() * 16 / cy) as u32;
            let [pc, pr] = t.positions_view;
            let positions = match t.packed {
                // The words of a run for the stage's rows: `[rows, runs]`, a box of the rows.
                Some(d) => (MapOf::Derived(d), [pr, pc / 16], [rows, 1]),
                None => (MapOf::Buffer(t.positions), [pc, pr], [16, rows]),
            };
            let [vc, vr] = t.values_view;
            let values = match t.packed_values {
                // A run's values for the stage's rows, contiguous: rows of 64 values (128
                // bytes), 4 of the matrix's rows each, unswizzled (the layout is the swizzle's
                // image already).
                Some(d) => (MapOf::Derived(d), [64, vc * vr / 64], [64, rows / 4], 0),
                None => (MapOf::Buffer(t.values), [vc, vr], [16, rows], 32),
            };
            for (of, name, [c, r], box_dims, swizzle) in [
                (values.0, &t.values_map, values.1, values.2, values.3),
                (positions.0, &t.positions_map, positions.1, positions.2, 0),
            ] {
                k.late_maps.push((
                    of,
                    name.clone(),
                    TensorMapArg {
                        dims: [LaunchExpr::Const(c), LaunchExpr::Const(r)],
                        box_dims,
                        swizzle,
                    },
                ));
            }
        }
        Ok(Some(stage))
    }

    /// The copy engine's staging of `A` for run loop `f` (its staging `st`, the product's
    /// block `b`, values `a`, positions `meta` and nest variables `vars`), checked: the loop's
    /// window is filled by the copy engine, and the stage's tiles are consecutive rows of `A`
    /// (row unit `r` of warp `w` at rows `16 (w h + r)` of the block's first), so that one box
    /// of `16 x tiles` rows of each view fills them.
    #[allow(clippy::too_many_arguments)]
    fn a_tma_plan(
        &mut self,
        f: &For,
        st: &AStage,
        b: &Block,
        a: &Expr,
        meta: &Expr,
        vars: &[VarId],
        packing: Packing,
        what: &str,
    ) -> Res<ATma> {
        let Some(window) = self.tma_of_run(f.var) else {
            return Err(self.unsupported(
                what,
                "A's tiles come by the copy engine with the run loop's window (annotate it \
                 `tma` too)",
            ));
        };
        let h = st.row_units();
        let share = (window.cluster_y > 1).then_some((window.cluster, window.cluster_y));
        if let Some((_, cy)) = share {
            if (st.tiles() * 16) % (8 * cy) != 0 {
                return Err(self.unsupported(
                    what,
                    format!(
                        "the {} rows of a stage's tiles split over a cluster's {cy} blocks \
                         along y in multiples of 8",
                        st.tiles() * 16
                    ),
                ));
            }
        }
        // The loop bound to `blockIdx.y`, which `A` must not depend on when shared along y.
        let by: Vec<VarId> = self
            .kernel
            .as_ref()
            .map(|k| {
                k.bound
                    .iter()
                    .zip(&k.bound_vars)
                    .filter(|(t, _)| *t == "blockIdx.y")
                    .map(|(_, v)| *v)
                    .collect()
            })
            .unwrap_or_default();
        if st.tiles() * 16 > 256 {
            return Err(self.unsupported(
                what,
                format!(
                    "one box holds at most 256 rows: the stage's {} tiles of 16 are more",
                    st.tiles()
                ),
            ));
        }
        let mut views = Vec::new();
        for e in [a, meta] {
            let Expr::Load { buffer, .. } = e else {
                return Err(self.invalid("a 2:4 operand that is not a load"));
            };
            let off = self.fragment_offset(e, b).ok_or_else(|| {
                self.unsupported(
                    what,
                    "A's values and positions must be read-only buffers of constant strides",
                )
            })?;
            let coeff = |v: VarId| {
                off.terms
                    .iter()
                    .find(|(t, _)| *t == Expr::Var(v))
                    .map_or(0, |(_, c)| *c)
            };
            // Elements per row: the step of the tile's row; the tiles' rows must follow.
            if share.is_some()
                && off
                    .terms
                    .iter()
                    .any(|(t, _)| super::super::mentions(t, &by))
            {
                return Err(self.unsupported(
                    what,
                    "the blocks of a cluster along y share A's tiles: their offset must not \
                     depend on the loop bound to `blockIdx.y`",
                ));
            }
            let row = coeff(vars[0]);
            let mut want = 16 * row;
            let mut ok = row > 0 && row % 16 == 0;
            if let Some((r, _)) = st.rows {
                ok &= coeff(r) == want;
            }
            want *= h;
            for &(w, n, moves) in st.warps.iter().rev() {
                if moves {
                    ok &= coeff(w) == want;
                    want *= n;
                }
            }
            let len = match &self.func.buffers[*buffer].shape {
                BufferShape::Dense(d) => {
                    d.iter().try_fold(1i64, |n, e| n.checked_mul(const_int(e)?))
                }
                _ => None,
            };
            ok &= len.is_some_and(|l| row > 0 && l % row == 0);
            if !ok {
                return Err(self.unsupported(
                    what,
                    format!(
                        "one box of the copy engine fills a stage: the tiles of `{}` must be \
                         consecutive 16-row blocks of rows of a whole number of elements, a \
                         multiple of 16 (row unit by row unit, warp by warp)",
                        self.func.buffers[*buffer].name
                    ),
                ));
            }
            views.push((*buffer, [row, len.unwrap_or(0) / row.max(1)]));
        }
        let [(values, values_view), (positions, positions_view)] = views[..] else {
            return Err(self.invalid("two views"));
        };
        let map = |b: BufferId| -> Res<String> { Ok(format!("{}_tmap", self.buf_name(b)?)) };
        // This block's rows of a stage (a cluster's blocks along y share them).
        let part = st.tiles() * 16 / share.map_or(1, |(_, cy)| cy);
        let mut values_map = map(values)?;
        let mut positions_map = map(positions)?;
        let packed_values = if packing.values {
            // The stage's rows (of this block's share) are whole rows of 64 values of the
            // view, 128-byte aligned in the stage.
            let [row_slots, rows] = values_view;
            if part % 4 != 0 || (rows * row_slots) % 64 != 0 {
                return Err(self.unsupported(
                    what,
                    format!(
                        "packed values take boxes of a multiple of 4 rows a block, of a matrix \
                         of a multiple of 64 values: the stage's {part} rows of {rows} x \
                         {row_slots} are not"
                    ),
                ));
            }
            let dtype = self.func.buffers[values].dtype;
            let name = format!("{}_tc", self.buf_name(values)?);
            values_map = format!("{name}_tmap");
            Some(self.derive(Derived {
                source: values,
                name,
                rows,
                row_slots,
                kind: DerivedKind::Values(dtype, packing.by_unit),
            }))
        } else {
            None
        };
        let packed = if packing.positions {
            // A box of a run's words lands at 128-byte boundaries only if it covers a multiple
            // of 32 rows.
            if part % 32 != 0 {
                return Err(self.unsupported(
                    what,
                    format!(
                        "packed positions take boxes of a multiple of 32 rows a block: the \
                         stage's {part} are not"
                    ),
                ));
            }
            let [row_slots, rows] = positions_view;
            let name = format!("{}_tc", self.buf_name(positions)?);
            positions_map = format!("{name}_tmap");
            Some(self.derive(Derived {
                source: positions,
                name,
                rows,
                row_slots,
                kind: DerivedKind::Metadata,
            }))
        } else {
            None
        };
        Ok(ATma {
            values,
            positions,
            values_map,
            positions_map,
            values_view,
            positions_view,
            bars: window.bars,
            share,
            packed,
            packed_values,
        })
    }

    /// The index of derived buffer `d` among the writer's (`Writer::derived`), added if new.
    fn derive(&mut self, d: Derived) -> usize {
        match self.derived.iter().position(|x| *x == d) {
            Some(i) => i,
            None => {
                self.derived.push(d);
                self.derived.len() - 1
            }
        }
    }

    /// The bytes the copy engine moves into a stage of the staged `A`, if it fills it.
    pub(crate) fn a_stage_tma_bytes(&self) -> i64 {
        self.a_stage
            .as_ref()
            .filter(|st| st.tma.is_some())
            .map_or(0, |st| st.tiles() * tile_bytes(st.packed()))
    }

    /// The tile of row unit `r` (C text) in the stage of run `run` (C text), the warp loops'
    /// variables bound: its first element in arrays of `elems` elements a tile.
    fn a_stage_tile(&mut self, st: &AStage, run: &str, r: &str, elems: i64) -> Res<String> {
        let widx = self.a_stage_warp(st)?;
        let (depth, tiles) = (st.depth, st.tiles());
        let h = st.row_units();
        Ok(format!(
            "(int64_t)((((({run}) - ({})) % {depth}) * {} + {widx}) * {h} + {r}) * {elems}",
            st.min,
            tiles / h
        ))
    }

    /// The index of the warp among those `A` moves with (the warp loops bound), as C text.
    fn a_stage_warp(&mut self, st: &AStage) -> Res<String> {
        let mut widx = String::from("0");
        for &(w, n, moves) in &st.warps {
            if moves {
                let (t, _) = self.expr(&Expr::Var(w))?;
                widx = format!("({widx}) * {n} + {t}");
            }
        }
        Ok(widx)
    }

    /// The stage tile of `A`'s values that the warpgroup product of row unit `r` (C text) in
    /// run `run` reads through its descriptor (`wgmma_ss`): the tile of the warpgroup's first
    /// warp, the tiles unit-major where a warp has several row units (see the module
    /// documentation).
    fn a_stage_ss_tile(&mut self, st: &AStage, run: &str, r: &str) -> Res<String> {
        let first = format!("(({}) / 4 * 4)", self.a_stage_warp(st)?);
        let (depth, tiles) = (st.depth, st.tiles());
        let h = st.row_units();
        Ok(format!(
            "(int64_t)((((({run}) - ({})) % {depth}) * {h} + {r}) * {} + {first}) * 256",
            st.min,
            tiles / h
        ))
    }

    /// In a pipelined copy of the run loop (its variable standing for the run being copied):
    /// each warp's `A` tiles and positions of that run into their stage.
    pub(crate) fn write_a_stage_copy(&mut self, run: &str) -> Res<()> {
        let Some(st) = self.a_stage.clone() else {
            return Ok(());
        };
        if let Some(t) = &st.tma {
            return self.write_a_stage_tma(&st, t, run);
        }
        let what = format!("`{STAGE_A_ATTR}` copy");
        let nests = tensorized_nests(&st.unit.body);
        let SpProduct {
            vars, b, a, meta, ..
        } = self.sp_product(&nests, &what)?;
        let iters = iters_fixed_by(b, st.unit.var);
        for &(w, _, _) in &st.warps {
            self.bind(w)?;
        }
        let r = (|| {
            self.line("{");
            self.indent += 1;
            self.line("const int32_t sptir_sl = (int32_t)(threadIdx.x & 31u);");
            // Warps that do not move `A` (column warps) read what their first one copied.
            let mut first = Vec::new();
            for &(w, n, moves) in &st.warps {
                if !moves && n > 1 {
                    first.push(format!("{} == 0", self.expr(&Expr::Var(w))?.0));
                }
            }
            if !first.is_empty() {
                self.line(&format!("if ({}) {{", first.join(" && ")));
                self.indent += 1;
            }
            let h = st.row_units();
            for k in 0..h {
                if let Some((rv, _)) = st.rows {
                    self.let_subst
                        .insert(rv, int_literal(k, self.func.vars[rv].dtype));
                }
                let tile = self.a_stage_tile(&st, run, &k.to_string(), 256)?;
                let row = "sptir_sl >> 1".to_string();
                let at = [row, "0".into(), "4 * (sptir_sl & 1)".into(), "0".into()];
                let src = self.ptr_at(a, &vars, &at, &iters)?;
                self.line(&format!(
                    "sptir_cp_async16(sptir_as + {tile} + (sptir_sl >> 1) * 16 + \
                     (((sptir_sl & 1) ^ ((sptir_sl >> 3) & 1)) * 8), {src});"
                ));
                let at = ["sptir_sl".into(), "0".into(), "0".into(), "0".into()];
                let src = self.ptr_at(&meta, &vars, &at, &iters)?;
                self.line(&format!(
                    "if (sptir_sl < 16) sptir_cp_async16(sptir_es + {tile} + sptir_sl * 16, {src});"
                ));
            }
            if let Some((rv, _)) = st.rows {
                self.let_subst.remove(&rv);
            }
            if !first.is_empty() {
                self.indent -= 1;
                self.line("}");
            }
            self.indent -= 1;
            self.line("}");
            Ok(())
        })();
        for &(w, _, _) in &st.warps {
            self.unbind(w);
        }
        r
    }

    /// The copy engine's copy of run `run`'s tiles (C text; the run loop's variable stands for
    /// it): one thread copies the box of values and the box of positions of the stage's first
    /// tile's rows, completing on the stage's barrier (whose bytes `tma.rs` announced).
    fn write_a_stage_tma(&mut self, st: &AStage, t: &ATma, run: &str) -> Res<()> {
        let what = format!("`{STAGE_A_ATTR}` copy");
        let nests = tensorized_nests(&st.unit.body);
        let SpProduct {
            vars, b, a, meta, ..
        } = self.sp_product(&nests, &what)?;
        let iters = iters_fixed_by(b, st.unit.var);
        // The first tile: every warp and row unit at 0.
        let mut fixed = st.warps.iter().map(|w| w.0).collect::<Vec<_>>();
        if let Some((r, _)) = st.rows {
            fixed.push(r);
        }
        for &v in &fixed {
            self.let_subst
                .insert(v, int_literal(0, self.func.vars[v].dtype));
        }
        let r = (|| {
            let zero = ["0".to_string(), "0".into(), "0".into(), "0".into()];
            let mut boxes = Vec::new();
            // (Operand, shared array, map, elements per row of the operand, packed words,
            // values run by run.)
            for (e, dst, map, row, packed, by_run) in [
                (
                    a,
                    "sptir_as",
                    &t.values_map,
                    t.values_view[0],
                    false,
                    t.packed_values.is_some(),
                ),
                (
                    &meta,
                    "sptir_es",
                    &t.positions_map,
                    t.positions_view[0],
                    st.packed(),
                    false,
                ),
            ] {
                let elems = if packed { es_tile(true) } else { 256 };
                let tile = self.a_stage_tile(st, run, "0", elems)?;
                let Expr::Load { buffer, .. } = e else {
                    return Err(self.invalid("a 2:4 operand that is not a load"));
                };
                let name = self.buf_name(*buffer)?.to_string();
                let ptr = self.ptr_at(e, &vars, &zero, &iters)?;
                let off = ptr
                    .strip_prefix(&format!("{name} + "))
                    .ok_or_else(|| self.invalid("a 2:4 operand's address"))?
                    .to_string();
                // The box's coordinates: (column, row) of the view; packed, (row, run) of the
                // words (a row's 16 positions of a run are one word); run by run, (0, the
                // first of the rows of 64 values holding run `k` of row `r`: `(k rows + r) /
                // 4`).
                let rows_of = t.values_view[1];
                let (mut x, mut y) = if by_run {
                    (
                        "0".to_string(),
                        format!(
                            "(int)(((({off}) % {row}) / 16 * {rows_of} + ({off}) / {row}) / 4)"
                        ),
                    )
                } else if packed {
                    (
                        format!("(int)(({off}) / {row})"),
                        format!("(int)((({off}) % {row}) / 16)"),
                    )
                } else {
                    (
                        format!("(int)(({off}) % {row})"),
                        format!("(int)(({off}) / {row})"),
                    )
                };
                boxes.push(match t.share {
                    // This block's rows of the box (its x when packed), to the blocks of its x
                    // rank: `part` rows of `elems / 16` elements each in the stage.
                    Some((cx, cy)) => {
                        let part = st.tiles() * 16 / cy;
                        let ymask: u32 = (0..cy).map(|i| 1u32 << (cx * i)).sum();
                        if by_run {
                            y.push_str(&format!(" + sptir_cy * {}", part / 4));
                        } else if packed {
                            x.push_str(&format!(" + sptir_cy * {part}"));
                        } else {
                            y.push_str(&format!(" + sptir_cy * {part}"));
                        }
                        format!(
                            "sptir_tma_load_2d_mc({dst} + {tile} + sptir_cy * {}, {map}, {} + \
                             sptir_st, {x}, {y}, (unsigned short)({ymask}u << \
                             (sptir_cluster_rank() % {cx})));",
                            part * elems / 16,
                            t.bars
                        )
                    }
                    None => format!(
                        "sptir_tma_load_2d({dst} + {tile}, {map}, {} + sptir_st, {x}, {y});",
                        t.bars
                    ),
                });
            }
            let stage = format!("(int)((({run}) - ({})) % {})", st.min, st.depth);
            self.open_copier();
            self.indent += 1;
            self.line(&format!("const int sptir_st = {stage};"));
            if let Some((cx, _)) = t.share {
                self.line(&format!(
                    "const int sptir_cy = (int)(sptir_cluster_rank() / {cx});"
                ));
            }
            for l in boxes {
                self.line(&l);
            }
            self.indent -= 1;
            self.line("}");
            Ok(())
        })();
        for v in fixed {
            self.let_subst.remove(&v);
        }
        r
    }

    /// At the unit loop in a run loop staging `A`: this run's fragment and metadata read from
    /// the stage into `sptir_a`, `sptir_e`. Opens a scope the caller closes; returns the
    /// product nest's outermost variable (for `mma_a_shared`).
    pub(crate) fn write_staged_a(&mut self) -> Res<VarId> {
        let Some(st) = self.a_stage.clone() else {
            return Err(self.invalid("no staging of A in progress"));
        };
        let nests = tensorized_nests(&st.unit.body);
        let nest = self.sp_product(&nests, "`stage_a` product")?.vars[0];
        let run = self.expr(&Expr::Var(st.run))?.0;
        let r = match self.mma_acc_rows {
            Some((rv, _)) => self.expr(&Expr::Var(rv))?.0,
            None => "0".to_string(),
        };
        self.line("{");
        self.indent += 1;
        // The tensor cores read `A` from the stage (`wgmma_ss`): the product's tile, or this
        // row unit's metadata into `sptir_er` (the two passes over the run's products).
        if st.ss && self.ss_pass != Some(SsPass::Metadata) {
            if self.ss_pass != Some(SsPass::Issue) {
                return Err(
                    self.invalid("a product reading A from shared memory outside its passes")
                );
            }
            self.ss_a_tile = Some(self.a_stage_ss_tile(&st, &run, &r)?);
            return Ok(nest);
        }
        let tile = self.a_stage_tile(&st, &run, &r, 256)?;
        let words = if st.packed() {
            Some(self.a_stage_tile(&st, &run, &r, es_tile(true))?)
        } else {
            None
        };
        self.line(if st.ss {
            "uint32_t sptir_e = 0u;"
        } else {
            "uint32_t sptir_a[4], sptir_e = 0u;"
        });
        self.line("{");
        self.indent += 1;
        self.line(
            "const int32_t sptir_sl = (int32_t)(threadIdx.x & 31u), sptir_sr = sptir_sl & 15;",
        );
        if !st.ss {
            self.line(&format!(
                "sptir_ldmatrix_x4(sptir_a, sptir_as + {tile} + sptir_sr * 16 + \
                 ((((sptir_sl >> 4) ^ (sptir_sr >> 2)) & 1) * 8));"
            ));
        }
        self.line("const int32_t sptir_h = sptir_t & 1;");
        if let Some(words) = words {
            // Half of each row's word: the 8 positions of groups 4 h .. 4 h + 3.
            self.line(&format!(
                "sptir_e = ((sptir_es[{words} + sptir_g] >> (16 * sptir_h)) & 0xffffu) | \
                 ((sptir_es[{words} + sptir_g + 8] >> (16 * sptir_h)) << 16);"
            ));
        } else {
            for (row, shift) in [("sptir_g", 0), ("sptir_g + 8", 16)] {
                self.line(&format!(
                    "{{ const uint64_t sptir_m = sptir_lds_oct(sptir_es + {tile} + ({row}) * 16 \
                     + 8 * sptir_h);"
                ));
                self.line(&format!(
                    "  sptir_e |= ({}) << {shift}; }}",
                    pack_positions8("sptir_m")
                ));
            }
        }
        self.indent -= 1;
        self.line("}");
        if st.ss {
            self.line(&format!("sptir_er[{} + {r}] = sptir_e;", self.ss_er_base));
        }
        Ok(nest)
    }
}

/// The shared loads of a staged `A` (its copies are `pipeline.rs`'s `cp.async`): PTX on a GPU,
/// the emulator's checked accesses.
pub(crate) const A_STAGE_PRELUDE: &str = r#"#ifndef SPTIR_EMU
/* Four 8 x 8 matrices of 16-bit values from shared memory: lane 8i + j gives the address of
   row j of matrix i (8 consecutive elements, 16-byte aligned); register i of lane 4g + t
   receives row g, columns 2t and 2t + 1 of matrix i. */
static __device__ __forceinline__ void sptir_ldmatrix_x4(uint32_t* r, const uint16_t* p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
}
static __device__ __forceinline__ uint64_t sptir_lds_oct(const int8_t* p) {
    return *reinterpret_cast<const unsigned long long*>(p);
}
#else
static void sptir_ldmatrix_x4(uint32_t* r, const ::sptir_emu::SPtr<uint16_t>& p) {
    if (p.off % 8 != 0)
        ::sptir_emu::fail_unsupported("ldmatrix: a row address is not 16-byte aligned");
    const int lane = (int)(threadIdx.x & 31), g = lane >> 2, t = lane & 3;
    int64_t rows[32];
    sptir_ldmatrix_rows(p.off, rows);
    for (int i = 0; i < 4; ++i) {
        const int64_t row = rows[8 * i + g];
        const uint16_t lo = ::sptir_emu::SRef<uint16_t>(p.data, p.m, row + 2 * t).load();
        const uint16_t hi = ::sptir_emu::SRef<uint16_t>(p.data, p.m, row + 2 * t + 1).load();
        r[i] = (uint32_t)lo | ((uint32_t)hi << 16);
    }
}
static uint64_t sptir_lds_oct(const ::sptir_emu::SPtr<int8_t>& p) {
    if (p.off % 8 != 0)
        ::sptir_emu::fail_unsupported("misaligned 8-byte shared load");
    uint64_t v = 0;
    for (int k = 0; k < 8; ++k) v |= (uint64_t)(uint8_t)p[k].load() << (8 * k);
    return v;
}
#endif
"#;
