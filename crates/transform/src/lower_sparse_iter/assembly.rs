//! Assembled outputs in `lower_sparse_iter` (issue 15): the phases of an iteration that stores
//! into a buffer over an `assembled` axis, and what each writes.
//!
//! - **Assembly.** An iteration storing into a buffer over an `assembled` axis is lowered once
//!   per [`Phase`]. The symbolic phase counts the distinct coordinates each row writes (in merge
//!   order, where every write of a row comes in increasing column order; otherwise with a dense
//!   stamp array `flag[col] = row + 1`), writes the count to `indptr[row + 1]`, and a serial
//!   prefix sum turns the counts into offsets. The numeric phase, given those offsets, appends
//!   each new column to the row's `indices` as it comes (merge order), or gathers the row in a
//!   dense workspace (Gustavson's algorithm). Where the buffer's default value is 0 the
//!   workspace is a value array kept at 0 between rows plus a two-level bitmap of the columns
//!   written (`bits`: one bit per column; `top`: one bit per word of `bits`): a write is a store
//!   and two `|=`, and the row is read back in increasing column order by `T.ctz` over the
//!   bitmaps, clearing what it reads, with no sort. Otherwise the workspace holds stamps
//!   (`flag[col] = row + 1`) and the appended columns are sorted (`T.sort_range`).
//! - **One pass.** A Gustavson assembly over a default of 0 may instead be lowered as
//!   [`Phase::Bound`] (each row's stores), [`Phase::Staged`] / [`Phase::StagedDense`] /
//!   [`Phase::StagedGroups`] (the row gathered once, in the bitmap or in byte marks — every
//!   group of 64 scanned, or the groups marked in a second level of bytes — and read back into
//!   a block of a staging
//!   area that the thread takes with an atomic addition) and [`Phase::Gather`] (staged rows
//!   copied into the output the runtime allocated from the offsets); see `runtime::assembly`.

use sparsetir_ir::{
    AttrValue, Attrs, AxisId, BinOp, Block, BlockIter, BufferId, DType, Expr, IfThenElse,
    Intrinsic, IterAxis, IterKind, LetStmt, Span, SparseIteration, Stmt, Store, VarId, While,
};

use super::{invalid, unsupported, wrap_loops, zero, Lowerer, Res};
use crate::regions::block_regions;
use crate::search::{local_buffer, store};

/// Which half of an assembling function to lower.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Count each row's stored coordinates into the assembled axis's `indptr` (offsets after a
    /// prefix sum); values and `indices` are not touched.
    Symbolic,
    /// Given `indptr`, fill `indices` and the values.
    Numeric,
    /// An upper bound of each row's stored coordinates (the number of stores the row makes,
    /// at most the axis length) into `indptr[row + 1]`, for sizing the staging area of
    /// [`Phase::Staged`]; no running sum, values and `indices` are not touched.
    Bound,
    /// Structure and values in one pass (Gustavson workspace over a default of 0 only): each
    /// row is gathered in the workspace and read back into a staging area the runtime provides
    /// (`<indices>__stage`, `<data>__stage`, of `<axis>__cap` elements), at a position taken
    /// from a block of the area that the thread holds (blocks of at least `<axis>__grab`
    /// elements, taken with an atomic addition on `<axis>__used`); the row's start goes to
    /// `<indptr>__start[row]`, its count to `indptr[row + 1]`, then a running sum. The runtime
    /// copies the rows into the output arrays. A row whose block lies past the capacity is not
    /// stored (the workspace is still cleared): `<axis>__used` then exceeds the capacity and
    /// the runtime runs again with more.
    Staged,
    /// [`Phase::Staged`] with a workspace for rows that cover much of the axis: one byte mark
    /// per column (a plain store per write, where the bitmap's `|=` on one word makes a chain
    /// of dependent updates when consecutive writes fall in the same word), read back by
    /// scanning every 64 marks at once (`T.mask64`). The runtime picks it when the bound phase
    /// says the average row makes at least a sixteenth as many stores as there are columns.
    StagedDense,
    /// [`Phase::StagedDense`] for rows whose columns cluster (meshes in a good order): besides
    /// the byte marks, one byte per group of 64 marks (`groups[c >> 6] = 1`, again a plain
    /// store); the row is read back from the groups marked, found 64 at a time
    /// (`T.mask64` over `groups`), instead of from every group. The runtime picks it when the
    /// rows of the operand that gives the output its columns hold, on average, at least 1.5
    /// columns per group of 64 they touch (where that operand is known).
    StagedGroups,
    /// After [`Phase::Staged`] and the allocation of the output from the offsets: each row's
    /// staged columns and values copied into the output (the row loop only, with the schedule
    /// of the rows: a parallel row loop copies in parallel).
    Gather,
}

/// The function attribute marking a stage-I function for one phase.
pub const PHASE_ATTR: &str = "assembly";

impl Phase {
    /// `"symbolic"` / `"numeric"`: the value of [`PHASE_ATTR`] and the suffix of the split
    /// functions' names.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Symbolic => "symbolic",
            Phase::Numeric => "numeric",
            Phase::Bound => "bound",
            Phase::Staged => "staged",
            Phase::StagedDense => "staged_dense",
            Phase::StagedGroups => "staged_groups",
            Phase::Gather => "gather",
        }
    }

    /// The phase computes structure only: stores into other buffers and iterations that do not
    /// assemble are dropped.
    pub fn structure_only(self) -> bool {
        matches!(self, Phase::Symbolic | Phase::Bound | Phase::Gather)
    }

    /// One of the staged phases (bitmap, byte-mark or grouped byte-mark workspace).
    pub fn is_staged(self) -> bool {
        matches!(
            self,
            Phase::Staged | Phase::StagedDense | Phase::StagedGroups
        )
    }

    /// A staged phase with the byte-mark workspace ([`Phase::StagedDense`] or
    /// [`Phase::StagedGroups`]).
    pub fn has_marks(self) -> bool {
        matches!(self, Phase::StagedDense | Phase::StagedGroups)
    }

    /// Every phase, in the order of [`Phase::name`]'s table.
    pub const ALL: [Phase; 7] = [
        Phase::Symbolic,
        Phase::Numeric,
        Phase::Bound,
        Phase::Staged,
        Phase::StagedDense,
        Phase::StagedGroups,
        Phase::Gather,
    ];

    /// The phase called `name` (see [`Phase::name`]).
    pub fn from_name(name: &str) -> Option<Phase> {
        Phase::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The phase a function is marked for, if any.
    pub fn of(f: &sparsetir_ir::PrimFunc) -> Option<Phase> {
        match f.attrs.get(PHASE_ATTR) {
            Some(AttrValue::Str(s)) => Phase::from_name(s),
            _ => None,
        }
    }

    /// `f` marked for this phase: the pipeline lowers it for this phase only.
    pub fn mark(self, f: &sparsetir_ir::PrimFunc) -> sparsetir_ir::PrimFunc {
        let mut g = f.clone();
        g.attrs
            .set(PHASE_ATTR, AttrValue::Str(self.name().to_string()));
        g
    }
}

/// The assembly of one iteration.
#[derive(Clone, Debug)]
pub(super) struct Asm {
    pub buffer: BufferId,
    pub axis: AxisId,
    pub row_var: VarId,
    pub col_var: VarId,
    /// Writes of a row come in increasing column order (a merge or a sorted axis right below
    /// the row): no workspace.
    pub sorted: bool,
    /// One store into the buffer per iteration, outside any loop: in a sorted assembly every
    /// store is then a new column (no check against the last one).
    pub single: bool,
    pub phase: Phase,
    pub idtype: DType,
    /// Count (symbolic, workspace numeric) or fill position (sorted numeric).
    pub cnt: BufferId,
    /// Sorted symbolic: the last column counted.
    pub last: Option<BufferId>,
    /// Workspace: stamps and values, one per column.
    pub flag: Option<BufferId>,
    pub wval: Option<BufferId>,
    /// Numeric workspace over a default of 0: the columns written, one bit each (`uint64`
    /// words), and one bit per word of `bits` that has any.
    pub bits: Option<BufferId>,
    pub top: Option<BufferId>,
    /// Dense staged workspace: one byte per column (`uint8`, padded to whole groups of 64).
    pub marks: Option<BufferId>,
    /// Grouped staged workspace: one byte per group of 64 marks (`uint8`, padded likewise).
    pub groups: Option<BufferId>,
    /// Bound and staged phases: the stores the row makes (`int64`).
    pub stores: Option<BufferId>,
    /// Staged phase: the staging area and the thread's block of it.
    pub stage: Option<StageBufs>,
}

/// The buffers of a [`Phase::Staged`] assembly.
#[derive(Clone, Debug)]
pub(super) struct StageBufs {
    /// Staged columns and values (`cap` elements each).
    pub indices: BufferId,
    pub values: BufferId,
    /// Where each row starts in the staging area (`int64`, one per row).
    pub start: BufferId,
    /// The elements of the staging area handed out so far (`int64`, one element).
    pub used: BufferId,
    /// The capacity of the staging area (scalar parameter, `int64`).
    pub cap: VarId,
    /// The least number of elements a thread takes at a time (scalar parameter, `int64`).
    pub grab: VarId,
    /// The thread's block: next free position, end (`int64` workspace of two elements).
    pub block: BufferId,
}

/// The name of a parameter of a [`Phase::Staged`] function: `<base>__<what>`, where `base` is
/// the output's `indices` or data parameter (`what` = `"stage"`), its `indptr` parameter
/// (`"start"`) or the assembled axis (`"used"`, `"cap"`, `"grab"`).
pub fn stage_param(base: &str, what: &str) -> String {
    format!("{base}__{what}")
}

/// Where [`Lowerer::asm_bitmap_readout`] puts each column it reads back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sink {
    /// The row of the output (numeric phase).
    Output,
    /// The staging area, from the row's start in the thread's block (staged phase).
    Stage,
    /// Nowhere: the row is only counted and the workspace cleared (its block lies past the
    /// staging area's capacity).
    Discard,
}

/// `(n + 2^shift - 1) // 2^shift`: the words of `2^shift` columns covering an axis of length
/// `n` (`bits` and the groups of 64 byte marks: shift 6; `top`: shift 12).
fn words(n: &Expr, shift: i64, d: DType) -> Expr {
    Expr::binary(
        BinOp::FloorDiv,
        Expr::add(n.clone(), Expr::Int((1 << shift) - 1, d)),
        Expr::Int(1 << shift, d),
    )
}

/// Columns per `bits` word, and per `top` word (as shifts).
const WORD_SHIFT: i64 = 6;
const TOP_SHIFT: i64 = 12;

pub(super) fn at0(b: BufferId) -> Expr {
    Expr::load(b, vec![Expr::int(0)])
}

pub(super) fn set0(b: BufferId, v: Expr) -> Stmt {
    Stmt::Store(Store {
        buffer: b,
        indices: vec![Expr::int(0)],
        value: v,
        span: Span::default(),
    })
}

pub(super) fn when(cond: Expr, then_case: Stmt) -> Stmt {
    Stmt::If(Box::new(IfThenElse {
        cond,
        then_case,
        else_case: None,
        span: Span::default(),
    }))
}

pub(super) fn typed(v: i64, d: DType) -> Expr {
    Expr::Int(v, d)
}

/// Each set bit of the one-element `uint64` buffer `word`, lowest first: while `word` is not 0,
/// `var = (base << 6) + ctz(word)` (`d`), the bit cleared, then `body`.
fn each_set_bit(word: BufferId, base: Expr, var: VarId, d: DType, body: Vec<Stmt>) -> Stmt {
    let u64c = |v: i64| Expr::Int(v, DType::U64);
    let mut stmts = vec![set0(
        word,
        Expr::binary(BinOp::BitAnd, at0(word), Expr::sub(at0(word), u64c(1))),
    )];
    stmts.extend(body);
    Stmt::While(Box::new(While {
        cond: Expr::binary(BinOp::Ne, at0(word), u64c(0)),
        body: Stmt::Let(Box::new(LetStmt {
            var,
            value: Expr::add(
                Expr::binary(BinOp::Shl, base, typed(WORD_SHIFT, d)),
                Expr::Call {
                    op: Intrinsic::Ctz,
                    args: vec![at0(word)],
                    dtype: d,
                },
            ),
            body: Stmt::seq(stmts),
            span: Span::default(),
        })),
        span: Span::default(),
    }))
}

impl Lowerer {
    /// True when buffer `b` is declared over an assembled axis.
    pub(super) fn is_assembled(&self, b: BufferId) -> bool {
        self.f
            .buffers
            .get(b)
            .is_some_and(|buf| buf.axes().iter().any(|a| self.f.axes[*a].assembled))
    }

    /// Plans the assembly of iteration `it` when it stores into an assembled buffer.
    pub(super) fn asm_plan(&mut self, it: &SparseIteration) -> Res<Option<Asm>> {
        let mut targets: Vec<(BufferId, Vec<Expr>)> = Vec::new();
        let mut visit = |s: &Stmt| {
            s.visit(&mut |x| {
                if let Stmt::Store(st) = x {
                    targets.push((st.buffer, st.indices.clone()));
                }
            })
        };
        visit(&it.body);
        if let Some(i) = &it.init {
            visit(i);
        }
        let targets: Vec<_> = targets
            .into_iter()
            .filter(|(b, _)| self.is_assembled(*b))
            .collect();
        let Some((buffer, _)) = targets.first().cloned() else {
            return Ok(None);
        };
        let name = &it.name;
        let Some(phase) = self.opts.assembly else {
            return Err(unsupported(
                it.span,
                format!(
                    "iteration `{name}` assembles the structure of `{}`: lower it once per phase \
                     (symbolic, then numeric)",
                    self.f.buffers[buffer].name
                ),
            ));
        };
        if it.init.is_some() {
            return Err(unsupported(
                it.span,
                format!("iteration `{name}`: T.init() with an assembled output (an absent element reads as the default value, so no init is needed)"),
            ));
        }
        let axes = self.f.buffers[buffer].axes().to_vec();
        let [row_axis, axis] = axes[..] else {
            return Err(unsupported(
                it.span,
                format!(
                    "assembled buffer `{}`: only two-dimensional (row, assembled column) buffers",
                    self.f.buffers[buffer].name
                ),
            ));
        };
        let ax = self.axis(axis)?.clone();
        let root_ok = self.axis(row_axis)?.parent.is_none() && ax.parent == Some(row_axis);
        if !ax.assembled || !root_ok {
            return Err(unsupported(
                it.span,
                "an assembled axis must be the last axis of its buffer, under a dense_fixed root",
            ));
        }
        if targets.iter().any(|(b, _)| *b != buffer) {
            return Err(unsupported(
                it.span,
                format!("iteration `{name}` assembles two buffers"),
            ));
        }
        let first_ok = matches!(it.axes.first(), Some(IterAxis::Axis(a)) if *a == row_axis)
            && it.kinds.first() == Some(&IterKind::Spatial);
        if !first_ok {
            return Err(unsupported(
                it.span,
                format!(
                    "iteration `{name}`: an assembling iteration starts with a spatial iterator \
                     over the rows (`{}`)",
                    self.axis(row_axis)?.name
                ),
            ));
        }
        let row_var = it.vars[0];
        let col_var = *it.vars.last().unwrap_or(&row_var);
        for (_, idx) in &targets {
            let ok =
                matches!(&idx[..], [Expr::Var(r), Expr::Var(c)] if *r == row_var && *c == col_var);
            if !ok {
                return Err(unsupported(
                    it.span,
                    format!(
                        "iteration `{name}`: stores into the assembled buffer must be \
                         `{}[{}, {}]` (the row iterator, then the last iterator)",
                        self.f.buffers[buffer].name,
                        self.f.vars[row_var].name,
                        self.f.vars[col_var].name
                    ),
                ));
            }
        }
        let sorted = it.axes.len() == 2
            && match &it.axes[1] {
                IterAxis::CoIter { .. } => true,
                IterAxis::Axis(a) => {
                    let x = self.axis(*a)?;
                    x.parent == Some(row_axis) && (x.kind.is_dense() || x.sorted)
                }
                _ => false,
            };
        let mut looped = false;
        it.body.visit(&mut |x| {
            looped |= matches!(x, Stmt::For(_) | Stmt::While(_) | Stmt::SparseIteration(_))
        });
        let single = targets.len() == 1 && !looped;
        let idtype = ax.idtype;
        let n = ax.length.clone();
        let cnt = local_buffer(&mut self.f, "cnt", Expr::int(1), idtype);
        let (mut last, mut flag, mut wval) = (None, None, None);
        let (mut bits, mut top) = (None, None);
        let zero_default = self.f.buffers[buffer]
            .default_value
            .as_ref()
            .is_none_or(|d| {
                matches!(d, Expr::Int(0, _))
                    || matches!(d, Expr::Float(z, _) if *z == 0.0 && z.is_sign_positive())
            });
        let (mut stores, mut stage) = (None, None);
        if (phase.is_staged() || phase == Phase::Gather) && (sorted || !zero_default) {
            return Err(unsupported(
                it.span,
                format!(
                    "iteration `{name}`: the one-pass (staged) assembly gathers rows in a \
                     Gustavson workspace over a default of 0; this one {} (use the symbolic and \
                     numeric phases)",
                    if sorted {
                        "writes each row in increasing column order"
                    } else {
                        "stores into a buffer whose default is not 0"
                    }
                ),
            ));
        }
        if phase == Phase::Bound || phase.is_staged() {
            stores = Some(local_buffer(&mut self.f, "nst", Expr::int(1), DType::I64));
        }
        let (mut marks, mut groups) = (None, None);
        if phase == Phase::Bound {
            // Only the stores are counted.
        } else if phase.has_marks() {
            // Padded to whole groups of 64: the read-back takes a group at a time.
            let dt = self.f.buffers[buffer].dtype;
            let nw = words(&n, WORD_SHIFT, idtype);
            let padded = Expr::mul(nw.clone(), Expr::Int(64, idtype));
            wval = Some(local_buffer(&mut self.f, "wval", padded.clone(), dt));
            marks = Some(local_buffer(&mut self.f, "marks", padded, DType::U8));
            if phase == Phase::StagedGroups {
                let padded = Expr::mul(words(&nw, WORD_SHIFT, idtype), Expr::Int(64, idtype));
                groups = Some(local_buffer(&mut self.f, "groups", padded, DType::U8));
            }
            stage = Some(self.stage_bufs(buffer, axis, it.span)?);
        } else if phase == Phase::Gather {
            stage = Some(self.stage_bufs(buffer, axis, it.span)?);
        } else if sorted {
            if phase == Phase::Symbolic && !single {
                last = Some(local_buffer(&mut self.f, "last", Expr::int(1), idtype));
            }
        } else if matches!(phase, Phase::Numeric | Phase::Staged) && zero_default {
            let dt = self.f.buffers[buffer].dtype;
            wval = Some(local_buffer(&mut self.f, "wval", n.clone(), dt));
            bits = Some(local_buffer(
                &mut self.f,
                "bits",
                words(&n, WORD_SHIFT, idtype),
                DType::U64,
            ));
            top = Some(local_buffer(
                &mut self.f,
                "top",
                words(&n, TOP_SHIFT, idtype),
                DType::U64,
            ));
            if phase == Phase::Staged {
                stage = Some(self.stage_bufs(buffer, axis, it.span)?);
            }
        } else {
            flag = Some(local_buffer(&mut self.f, "flag", n.clone(), idtype));
            if phase == Phase::Numeric {
                let dt = self.f.buffers[buffer].dtype;
                wval = Some(local_buffer(&mut self.f, "wval", n, dt));
            }
        }
        Ok(Some(Asm {
            buffer,
            axis,
            row_var,
            col_var,
            sorted,
            single,
            phase,
            idtype,
            cnt,
            last,
            flag,
            wval,
            bits,
            top,
            marks,
            groups,
            stores,
            stage,
        }))
    }

    /// The staging area of a [`Phase::Staged`] assembly of `buffer` over `axis`: new
    /// parameters named after the axis's (`<indices>__stage`, `<data>__stage`,
    /// `<indptr>__start`, `<axis>__used`, `<axis>__cap`, `<axis>__grab`), and the thread's
    /// block.
    fn stage_bufs(&mut self, buffer: BufferId, axis: AxisId, span: Span) -> Res<StageBufs> {
        let ax = self.axis(axis)?.clone();
        let rows = self.asm_rows(axis, span)?;
        let (Some(indices), Some(indptr), Some(data)) =
            (ax.indices, ax.indptr, self.f.buffers[buffer].data_param())
        else {
            return Err(invalid(
                span,
                "staged assembly: the output has no indices, indptr or data parameter",
            ));
        };
        let name = |me: &Self, v: VarId, what: &str| stage_param(&me.f.vars[v].name, what);
        let names = [
            name(self, indices, "stage"),
            name(self, data, "stage"),
            name(self, indptr, "start"),
            stage_param(&ax.name, "used"),
            stage_param(&ax.name, "cap"),
            stage_param(&ax.name, "grab"),
        ];
        for n in &names {
            if self.f.param(n).is_some() {
                return Err(unsupported(
                    span,
                    format!(
                        "staged assembly: parameter `{n}` is the name of the staging area's \
                         parameter (rename it)"
                    ),
                ));
            }
        }
        let [idx_n, val_n, start_n, used_n, cap_n, grab_n] = names;
        let cap = self.f.add_var(cap_n, DType::I64);
        let grab = self.f.add_var(grab_n, DType::I64);
        let param_buffer = |me: &mut Self, n: String, extent: Expr, dtype: DType| {
            let data = me.f.add_var(n.clone(), DType::Handle);
            me.f.params.push(data);
            let b = me.f.buffers.append(sparsetir_ir::Buffer {
                name: n,
                decl: sparsetir_ir::BufferDecl::Match { data },
                shape: sparsetir_ir::BufferShape::Dense(vec![extent]),
                dtype,
                scope: "global".to_string(),
                strides: Vec::new(),
                extra_storage: None,
                default_value: None,
                span: Span::default(),
            });
            me.f.buffer_decls.push(b);
            b
        };
        let dt = self.f.buffers[buffer].dtype;
        let indices = param_buffer(self, idx_n, Expr::var(cap), ax.idtype);
        let values = param_buffer(self, val_n, Expr::var(cap), dt);
        let start = param_buffer(self, start_n, rows, DType::I64);
        let used = param_buffer(self, used_n, Expr::int(1), DType::I64);
        self.f.params.push(cap);
        self.f.params.push(grab);
        let block = local_buffer(&mut self.f, "block", Expr::int(2), DType::I64);
        Ok(StageBufs {
            indices,
            values,
            start,
            used,
            cap,
            grab,
            block,
        })
    }

    /// The row position (block iterator) of the assembly's row variable.
    fn asm_row(&self, a: &Asm) -> Res<Expr> {
        self.find(a.row_var)
            .map(|i| i.pos.clone())
            .ok_or_else(|| invalid(self.span, "assembly: the row iterator is not in scope"))
    }

    /// Statements run at the start and at the end of every row, and the row block's buffers.
    pub(super) fn asm_row_parts(&mut self, a: &Asm) -> Res<(Vec<Stmt>, Vec<Stmt>, Vec<BufferId>)> {
        let vi = self.asm_row(a)?;
        let d = a.idtype;
        let mut pro = vec![set0(a.cnt, typed(0, d))];
        let mut epi = Vec::new();
        let mut allocs = vec![a.cnt];
        allocs.extend(a.last);
        allocs.extend(a.flag);
        allocs.extend(a.wval);
        allocs.extend(a.bits);
        allocs.extend(a.top);
        allocs.extend(a.marks);
        allocs.extend(a.groups);
        allocs.extend(a.stores);
        if let Some(nst) = a.stores {
            pro.push(set0(nst, Expr::Int(0, DType::I64)));
        }
        if let Some(l) = a.last {
            pro.push(set0(l, typed(-1, d)));
        }
        // `flag` needs no start: allocations are zeroed and rows stamp `row + 1`.
        match a.phase {
            Phase::Symbolic => {
                let indptr = self.indptr_buf(a.axis)?;
                let next = self.simp.add(&self.f, vi.clone(), Expr::int(1));
                epi.push(store(indptr, vec![next], at0(a.cnt)));
            }
            Phase::Bound => {
                let Some(nst) = a.stores else {
                    return Err(invalid(self.span, "assembly: store count missing"));
                };
                let indptr = self.indptr_buf(a.axis)?;
                let next = self.simp.add(&self.f, vi.clone(), Expr::int(1));
                epi.push(store(indptr, vec![next], self.row_bound(a, nst)?));
            }
            Phase::Staged | Phase::StagedDense | Phase::StagedGroups => {
                let (Some(nst), Some(st)) = (a.stores, a.stage.clone()) else {
                    return Err(invalid(self.span, "assembly: staging area missing"));
                };
                allocs.push(st.block);
                epi.extend(self.stage_row(a, &st, nst, &vi)?);
                let (write, discard) = if a.phase.has_marks() {
                    let (write, w1) = self.asm_marks_readout(a, Sink::Stage)?;
                    let (discard, w2) = self.asm_marks_readout(a, Sink::Discard)?;
                    allocs.extend(w1);
                    allocs.extend(w2);
                    (write, discard)
                } else {
                    let (write, w1) = self.asm_bitmap_readout(a, &vi, Sink::Stage)?;
                    let (discard, w2) = self.asm_bitmap_readout(a, &vi, Sink::Discard)?;
                    allocs.extend(w1);
                    allocs.extend(w2);
                    (write, discard)
                };
                epi.push(Stmt::If(Box::new(IfThenElse {
                    cond: Expr::binary(
                        BinOp::Le,
                        Expr::load(st.block, vec![Expr::int(1)]),
                        Expr::var(st.cap),
                    ),
                    then_case: Stmt::seq(write),
                    else_case: Some(Stmt::seq(discard)),
                    span: Span::default(),
                })));
                let indptr = self.indptr_buf(a.axis)?;
                let next = self.simp.add(&self.f, vi.clone(), Expr::int(1));
                epi.push(store(indptr, vec![next], at0(a.cnt)));
                epi.push(set0(
                    st.block,
                    Expr::add(at0(st.block), Expr::Cast(DType::I64, Box::new(at0(a.cnt)))),
                ));
            }
            Phase::Gather => {
                let Some(st) = a.stage.clone() else {
                    return Err(invalid(self.span, "assembly: staging area missing"));
                };
                let (copy, bufs) = self.gather_row(a, &st, &vi)?;
                epi.push(copy);
                allocs.extend(bufs);
            }
            Phase::Numeric if !a.sorted && a.bits.is_some() => {
                let (readout, words) = self.asm_bitmap_readout(a, &vi, Sink::Output)?;
                epi.extend(readout);
                allocs.extend(words);
            }
            Phase::Numeric if !a.sorted => {
                let indices = self.indices_buf(a.axis)?;
                let (Some(wval), true) = (a.wval, a.flag.is_some()) else {
                    return Err(invalid(self.span, "assembly: workspace buffers missing"));
                };
                epi.push(Stmt::Evaluate(Expr::Call {
                    op: Intrinsic::SortRange,
                    args: vec![
                        Expr::load(indices, vec![vi.clone(), typed(0, d)]),
                        at0(a.cnt),
                    ],
                    dtype: DType::I32,
                }));
                let p = self.f.add_var("p", d);
                let col = Expr::load(indices, vec![vi.clone(), Expr::var(p)]);
                let copy = store(
                    a.buffer,
                    vec![vi.clone(), Expr::var(p)],
                    Expr::load(wval, vec![col]),
                );
                epi.push(wrap_loops(vec![(p, typed(0, d), at0(a.cnt))], copy));
            }
            Phase::Numeric => {}
        }
        Ok((pro, epi, allocs))
    }

    /// One column `col` read back from the workspace: to `sink` at the row's count so far,
    /// then `wval[col]` back to 0 and the count up by one.
    fn put_column(&mut self, a: &Asm, vi: &Expr, sink: Sink, col: VarId) -> Res<Vec<Stmt>> {
        let d = a.idtype;
        let Some(wval) = a.wval else {
            return Err(invalid(self.span, "assembly: workspace values missing"));
        };
        let indices = self.indices_buf(a.axis)?;
        let dt = self.f.buffers[a.buffer].dtype;
        let mut put = Vec::new();
        let value = Expr::load(wval, vec![Expr::var(col)]);
        match (sink, &a.stage) {
            (Sink::Output, _) => put.extend([
                store(indices, vec![vi.clone(), at0(a.cnt)], Expr::var(col)),
                store(a.buffer, vec![vi.clone(), at0(a.cnt)], value),
            ]),
            (Sink::Stage, Some(st)) => {
                // At the row's start in the thread's block, plus the count so far.
                let pos = Expr::add(at0(st.block), Expr::Cast(DType::I64, Box::new(at0(a.cnt))));
                put.extend([
                    store(st.indices, vec![pos.clone()], Expr::var(col)),
                    store(st.values, vec![pos], value),
                ]);
            }
            (Sink::Stage, None) => {
                return Err(invalid(self.span, "assembly: staging area missing"));
            }
            (Sink::Discard, _) => {}
        }
        put.extend([
            store(wval, vec![Expr::var(col)], zero(dt)),
            set0(a.cnt, Expr::add(at0(a.cnt), typed(1, d))),
        ]);
        Ok(put)
    }

    /// The end of a row gathered in the byte marks of the dense staged workspace: for every
    /// group of 64 marks with any set (`T.mask64`), the group cleared, its columns and values
    /// put to the staging area at the row's count so far, in order (`T.compress_iota64`,
    /// `T.compress64`: a few vector instructions per group where a column at a time was a
    /// mispredicted loop exit per group), the count up by the group's marks
    /// (`T.popcount`) and the group's `wval` back to 0 (`wval` is padded to whole groups).
    /// [`Sink::Discard`] only counts and clears. With [`Asm::groups`] (the grouped workspace)
    /// only the groups marked there are visited, found 64 at a time, and cleared in turn.
    /// Returns the statements and the word buffers they use (the row block allocates them).
    fn asm_marks_readout(&mut self, a: &Asm, sink: Sink) -> Res<(Vec<Stmt>, Vec<BufferId>)> {
        let (Some(marks), Some(wval)) = (a.marks, a.wval) else {
            return Err(invalid(self.span, "assembly: byte marks missing"));
        };
        let d = a.idtype;
        let dt = self.f.buffers[a.buffer].dtype;
        let n = self.axis(a.axis)?.length.clone();
        let bw = local_buffer(&mut self.f, "mark_word", Expr::int(1), DType::U64);
        let w = self.f.add_var("w", d);
        let k = self.f.add_var("k", d);
        let k2 = self.f.add_var("k", d);
        let base = Expr::binary(BinOp::Shl, Expr::var(w), typed(WORD_SHIFT, d));
        let serial = |var: VarId, extent: Expr, body: Stmt| {
            wrap_loops(vec![(var, typed(0, d), extent)], body)
        };
        // The 64 elements of `buf` from `at` set to `value`.
        let clear = |buf: BufferId, at: &Expr, k: VarId, value: Expr| {
            serial(
                k,
                typed(64, d),
                store(buf, vec![Expr::add(at.clone(), Expr::var(k))], value),
            )
        };
        let mut put = vec![clear(marks, &base, k, Expr::Int(0, DType::U8))];
        match (sink, &a.stage) {
            (Sink::Stage, Some(st)) => {
                // At the row's start in the thread's block, plus the count so far.
                let pos = Expr::add(at0(st.block), Expr::Cast(DType::I64, Box::new(at0(a.cnt))));
                put.push(Stmt::Evaluate(Expr::Call {
                    op: Intrinsic::CompressIota64,
                    args: vec![
                        Expr::load(st.indices, vec![pos.clone()]),
                        base.clone(),
                        at0(bw),
                    ],
                    dtype: d,
                }));
                put.push(Stmt::Evaluate(Expr::Call {
                    op: Intrinsic::Compress64,
                    args: vec![
                        Expr::load(st.values, vec![pos]),
                        Expr::load(wval, vec![base.clone()]),
                        at0(bw),
                    ],
                    dtype: dt,
                }));
            }
            (Sink::Discard, _) => {}
            _ => {
                return Err(invalid(
                    self.span,
                    "assembly: the byte marks are read back into the staging area only",
                ))
            }
        }
        put.push(set0(
            a.cnt,
            Expr::add(
                at0(a.cnt),
                Expr::Call {
                    op: Intrinsic::Popcount,
                    args: vec![at0(bw)],
                    dtype: d,
                },
            ),
        ));
        put.push(clear(wval, &base, k2, zero(dt)));
        let mask64 = |buf: BufferId, at: Expr| Expr::Call {
            op: Intrinsic::Mask64,
            args: vec![Expr::load(buf, vec![at])],
            dtype: DType::U64,
        };
        let nonzero = |b: BufferId| Expr::binary(BinOp::Ne, at0(b), Expr::Int(0, DType::U64));
        let nw = words(&n, WORD_SHIFT, d);
        let Some(groups) = a.groups else {
            // Every group, the empty ones skipped.
            let group = Stmt::seq(vec![
                set0(bw, mask64(marks, base.clone())),
                when(nonzero(bw), Stmt::seq(put)),
            ]);
            return Ok((
                vec![set0(a.cnt, typed(0, d)), serial(w, nw, group)],
                vec![bw],
            ));
        };
        // The groups marked in `groups`, 64 at a time: each marked group has marks.
        let gw = local_buffer(&mut self.f, "group_word", Expr::int(1), DType::U64);
        let u = self.f.add_var("u", d);
        let k3 = self.f.add_var("k", d);
        let ubase = Expr::binary(BinOp::Shl, Expr::var(u), typed(WORD_SHIFT, d));
        let mut body = vec![set0(bw, mask64(marks, base.clone()))];
        body.extend(put);
        let top = Stmt::seq(vec![
            set0(gw, mask64(groups, ubase.clone())),
            when(
                nonzero(gw),
                Stmt::seq(vec![
                    clear(groups, &ubase, k3, Expr::Int(0, DType::U8)),
                    each_set_bit(gw, Expr::var(u), w, d, body),
                ]),
            ),
        ]);
        Ok((
            vec![
                set0(a.cnt, typed(0, d)),
                serial(u, words(&nw, WORD_SHIFT, d), top),
            ],
            vec![bw, gw],
        ))
    }

    /// The end of a row gathered in the bitmap workspace: for every set bit of `top` (in
    /// order), every set bit of the `bits` word it names (in order), the column `col` goes to
    /// the row's `indices` and `wval[col]` to its values; everything read is cleared, so the
    /// workspace is all zero again for the next row.
    /// Returns the statements and the two word buffers they use (the row block allocates them).
    fn asm_bitmap_readout(
        &mut self,
        a: &Asm,
        vi: &Expr,
        sink: Sink,
    ) -> Res<(Vec<Stmt>, [BufferId; 2])> {
        let (Some(_), Some(bits), Some(top)) = (a.wval, a.bits, a.top) else {
            return Err(invalid(self.span, "assembly: bitmap workspace missing"));
        };
        let d = a.idtype;
        let u64c = |v: i64| Expr::Int(v, DType::U64);
        let tw = local_buffer(&mut self.f, "top_word", Expr::int(1), DType::U64);
        let bw = local_buffer(&mut self.f, "bits_word", Expr::int(1), DType::U64);
        let ntop = match &self.f.buffers[top].shape {
            sparsetir_ir::BufferShape::Dense(dims) => dims.first().cloned(),
            _ => None,
        }
        .ok_or_else(|| invalid(self.span, "assembly: `top` is not one-dimensional"))?;
        let u = self.f.add_var("u", d);
        let w = self.f.add_var("w", d);
        let col = self.f.add_var("col", d);
        // Innermost: each column of word `w`; around it, each word of `bits` named by a bit of
        // `top`.
        let put = self.put_column(a, vi, sink, col)?;
        let columns = each_set_bit(bw, Expr::var(w), col, d, put);
        let words = each_set_bit(
            tw,
            Expr::var(u),
            w,
            d,
            vec![
                set0(bw, Expr::load(bits, vec![Expr::var(w)])),
                store(bits, vec![Expr::var(w)], u64c(0)),
                columns,
            ],
        );
        let per_top = Stmt::seq(vec![
            set0(tw, Expr::load(top, vec![Expr::var(u)])),
            store(top, vec![Expr::var(u)], u64c(0)),
            words,
        ]);
        let stmts = vec![
            set0(a.cnt, typed(0, d)),
            wrap_loops(vec![(u, typed(0, d), ntop)], per_top),
        ];
        Ok((stmts, [tw, bw]))
    }

    /// The row's bound: its stores (`int64` buffer `nst`), at most the axis length, in the
    /// index type.
    fn row_bound(&self, a: &Asm, nst: BufferId) -> Res<Expr> {
        let n = Expr::Cast(DType::I64, Box::new(self.axis(a.axis)?.length.clone()));
        Ok(Expr::Cast(
            a.idtype,
            Box::new(Expr::binary(BinOp::Min, at0(nst), n)),
        ))
    }

    /// The start of a staged row: when the thread's block has less room than the row's bound,
    /// the thread takes a new block of `max(bound, grab)` elements (an atomic addition on
    /// `used`, which returns where it starts); the row starts at the block's free position.
    fn stage_row(&mut self, a: &Asm, st: &StageBufs, nst: BufferId, vi: &Expr) -> Res<Vec<Stmt>> {
        let bound = Expr::Cast(DType::I64, Box::new(self.row_bound(a, nst)?));
        let free = at0(st.block);
        let end = Expr::load(st.block, vec![Expr::int(1)]);
        let size = Expr::binary(BinOp::Max, bound.clone(), Expr::var(st.grab));
        let take = Stmt::seq(vec![
            set0(
                st.block,
                Expr::Call {
                    op: Intrinsic::AtomicAdd,
                    args: vec![Expr::load(st.used, vec![Expr::int(0)]), size.clone()],
                    dtype: DType::I64,
                },
            ),
            store(st.block, vec![Expr::int(1)], Expr::add(at0(st.block), size)),
        ]);
        Ok(vec![
            when(
                Expr::binary(BinOp::Gt, Expr::add(free.clone(), bound), end),
                take,
            ),
            store(st.start, vec![vi.clone()], free),
        ])
    }

    /// The gather of row `vi`: rows staged one after another in one block of the staging area
    /// (a run: each row starts where the one before it ends) are copied together, by the row
    /// that starts the run — two `T.copy_range` from the run's first row with elements, where
    /// the copy of each row alone would make a short loop per row — and the other rows do
    /// nothing. Returns the statement and the row block's local buffers (`run`: the run's end
    /// and its first row with elements; `more`: the scans' flag).
    fn gather_row(&mut self, a: &Asm, st: &StageBufs, vi: &Expr) -> Res<(Stmt, Vec<BufferId>)> {
        let d = a.idtype;
        let indices = self.indices_buf(a.axis)?;
        let indptr = self.indptr_buf(a.axis)?;
        let rows = self.asm_rows(a.axis, self.span)?;
        let run = local_buffer(&mut self.f, "run", Expr::int(2), d);
        let more = local_buffer(&mut self.f, "more", Expr::int(1), d);
        let at = |b: BufferId, k: i64| Expr::load(b, vec![Expr::int(k)]);
        let set = |b: BufferId, k: i64, v: Expr| store(b, vec![Expr::int(k)], v);
        let one = |x: Expr| Expr::add(x, typed(1, d));
        let ptr = |r: Expr| Expr::load(indptr, vec![r]);
        let len = |r: Expr| Expr::sub(ptr(one(r.clone())), ptr(r));
        let start = |r: Expr| Expr::load(st.start, vec![r]);
        // Row `r` (> 0) starts where row `r - 1` ends in the staging area (`Eq`), or not (`Ne`).
        let follows = |r: Expr, op: BinOp| {
            let prev = Expr::sub(r.clone(), typed(1, d));
            let prev_len = Expr::sub(ptr(r.clone()), ptr(prev.clone()));
            Expr::binary(
                op,
                start(r),
                Expr::add(start(prev), Expr::Cast(DType::I64, Box::new(prev_len))),
            )
        };
        let scan = |cond_outer: Expr, cond_inner: Expr, step: Stmt| {
            Stmt::seq(vec![
                set(more, 0, typed(1, d)),
                Stmt::While(Box::new(While {
                    cond: Expr::binary(BinOp::Ne, at(more, 0), typed(0, d)),
                    body: Stmt::seq(vec![
                        set(more, 0, typed(0, d)),
                        when(
                            cond_outer,
                            when(cond_inner, Stmt::seq(vec![step, set(more, 0, typed(1, d))])),
                        ),
                    ]),
                    span: Span::default(),
                })),
            ])
        };
        // run[0]: the end of the run row `vi` starts (0 where `vi` does not start one).
        let head = Stmt::seq(vec![
            set(run, 0, typed(0, d)),
            Stmt::If(Box::new(IfThenElse {
                cond: Expr::binary(BinOp::Eq, vi.clone(), typed(0, d)),
                then_case: set(run, 0, one(vi.clone())),
                else_case: Some(when(
                    follows(vi.clone(), BinOp::Ne),
                    set(run, 0, one(vi.clone())),
                )),
                span: Span::default(),
            })),
        ]);
        let extend = scan(
            Expr::binary(BinOp::Lt, at(run, 0), rows),
            follows(at(run, 0), BinOp::Eq),
            set(run, 0, one(at(run, 0))),
        );
        // run[1]: the run's first row with elements (its last row if none has any).
        let first = scan(
            Expr::binary(BinOp::Lt, at(run, 1), Expr::sub(at(run, 0), typed(1, d))),
            Expr::binary(BinOp::Eq, len(at(run, 1)), typed(0, d)),
            set(run, 1, one(at(run, 1))),
        );
        let n = Expr::sub(ptr(at(run, 0)), ptr(at(run, 1)));
        let dt = self.f.buffers[a.buffer].dtype;
        let copy = |dst: BufferId, src: BufferId, dtype: DType| {
            Stmt::Evaluate(Expr::Call {
                op: Intrinsic::CopyRange,
                args: vec![
                    Expr::load(dst, vec![at(run, 1), typed(0, d)]),
                    Expr::load(src, vec![start(at(run, 1))]),
                    n.clone(),
                ],
                dtype,
            })
        };
        let body = Stmt::seq(vec![
            head,
            when(
                Expr::binary(BinOp::Ne, at(run, 0), typed(0, d)),
                Stmt::seq(vec![
                    extend,
                    set(run, 1, vi.clone()),
                    first,
                    when(
                        Expr::binary(BinOp::Gt, n.clone(), typed(0, d)),
                        Stmt::seq(vec![
                            copy(indices, st.indices, d),
                            copy(a.buffer, st.values, dt),
                        ]),
                    ),
                ]),
            ),
        ]);
        Ok((body, vec![run, more]))
    }

    /// The number of rows over assembled `axis` (its parent axis's length).
    fn asm_rows(&self, axis: AxisId, span: Span) -> Res<Expr> {
        let p = self.axis(axis)?.parent;
        let p = p.ok_or_else(|| invalid(span, "assembled axis without a parent"))?;
        Ok(self.axis(p)?.length.clone())
    }

    /// After the symbolic nest: `indptr[0] = 0`, then the running sum of the row counts.
    pub(super) fn asm_prefix_sum(&mut self, a: &Asm, name: &str) -> Res<Stmt> {
        let indptr = self.indptr_buf(a.axis)?;
        let d = a.idtype;
        // (Rows counted in the indices' type: `int64` offsets over an `int32` row count.)
        let rows = super::as_dtype(&self.f, self.asm_rows(a.axis, self.span)?, d);
        let r = self.f.add_var("r", d);
        let vr = self.f.add_var("vr", d);
        let next = Expr::add(Expr::var(vr), Expr::int(1));
        let sum = store(
            indptr,
            vec![next.clone()],
            Expr::add(
                Expr::load(indptr, vec![next]),
                Expr::load(indptr, vec![Expr::var(vr)]),
            ),
        );
        let (reads, writes) = block_regions(&self.f, &self.simp, &self.hints, None, &sum, &[]);
        let mut ann = Attrs::new();
        ann.set("sparse", AttrValue::Bool(true));
        let block = Stmt::Block(Box::new(Block {
            name: format!("{name}_offsets"),
            iters: vec![BlockIter {
                var: vr,
                min: Expr::int(0),
                extent: rows.clone(),
                kind: IterKind::Reduce,
                binding: Expr::var(r),
            }],
            predicate: None,
            reads,
            writes,
            init: None,
            alloc_buffers: Vec::new(),
            annotations: ann,
            body: sum,
            span: Span::default(),
        }));
        Ok(Stmt::seq(vec![
            store(indptr, vec![Expr::int(0)], typed(0, d)),
            wrap_loops(vec![(r, Expr::int(0), rows)], block),
        ]))
    }

    /// A store into the assembled buffer, per phase and mode.
    /// A stored value in position space; with checked searches, its reads through search
    /// results give the default value where those missed (as `guard_store` does for other
    /// stores).
    fn asm_value(&mut self, value: &Expr) -> Res<Expr> {
        let v = self.expr(value)?;
        Ok(self.guard_expr(&v))
    }

    pub(super) fn asm_store(&mut self, st: &Store) -> Res<Stmt> {
        let Some(a) = self.asm.clone() else {
            return Err(unsupported(
                st.span,
                format!(
                    "a store into `{}`, whose structure is assembled, outside its assembling iteration",
                    self.f.buffers[st.buffer].name
                ),
            ));
        };
        let vi = self.asm_row(&a)?;
        let c = self.expr(&Expr::var(a.col_var))?;
        let d = a.idtype;
        let stamp = self.simp.add(&self.f, vi.clone(), Expr::int(1));
        let inc = set0(a.cnt, Expr::add(at0(a.cnt), typed(1, d)));
        let count_store = |nst: Option<BufferId>, span: Span| -> Res<Stmt> {
            let nst = nst.ok_or_else(|| invalid(span, "assembly: store count missing"))?;
            Ok(set0(nst, Expr::add(at0(nst), Expr::Int(1, DType::I64))))
        };
        match (a.phase, a.sorted) {
            (Phase::Bound, _) => count_store(a.stores, self.span),
            (Phase::Gather, _) => Ok(Stmt::empty()),
            (Phase::Symbolic, true) if a.single => Ok(inc),
            (Phase::Numeric, true) if a.single => {
                let value = self.asm_value(&st.value)?;
                let indices = self.indices_buf(a.axis)?;
                Ok(Stmt::seq(vec![
                    store(indices, vec![vi.clone(), at0(a.cnt)], c),
                    store(a.buffer, vec![vi, at0(a.cnt)], value),
                    inc,
                ]))
            }
            (Phase::Symbolic, true) => {
                let Some(last) = a.last else {
                    return Err(invalid(self.span, "assembly: `last` missing"));
                };
                Ok(when(
                    Expr::binary(BinOp::Ne, at0(last), c.clone()),
                    Stmt::seq(vec![set0(last, c), inc]),
                ))
            }
            (Phase::Symbolic, false) => {
                let Some(flag) = a.flag else {
                    return Err(invalid(self.span, "assembly: `flag` missing"));
                };
                // Branch-free: count a column the first time this row stamps it.
                let new = Expr::Select(
                    Box::new(Expr::binary(
                        BinOp::Ne,
                        Expr::load(flag, vec![c.clone()]),
                        stamp.clone(),
                    )),
                    Box::new(typed(1, d)),
                    Box::new(typed(0, d)),
                );
                Ok(Stmt::seq(vec![
                    set0(a.cnt, Expr::add(at0(a.cnt), new)),
                    store(flag, vec![c], stamp),
                ]))
            }
            (Phase::Numeric, true) => {
                let value = self.asm_value(&st.value)?;
                let indices = self.indices_buf(a.axis)?;
                let t = self.f.add_var("v", self.f.buffers[a.buffer].dtype);
                let prev = Expr::sub(at0(a.cnt), typed(1, d));
                let is_new = Expr::Select(
                    Box::new(Expr::binary(BinOp::Eq, at0(a.cnt), typed(0, d))),
                    Box::new(Expr::Bool(true)),
                    Box::new(Expr::binary(
                        BinOp::Ne,
                        Expr::load(indices, vec![vi.clone(), prev.clone()]),
                        c.clone(),
                    )),
                );
                let insert = when(
                    is_new,
                    Stmt::seq(vec![store(indices, vec![vi.clone(), at0(a.cnt)], c), inc]),
                );
                let put = store(a.buffer, vec![vi, prev], Expr::var(t));
                Ok(Stmt::Let(Box::new(LetStmt {
                    var: t,
                    value,
                    body: Stmt::seq(vec![insert, put]),
                    span: st.span,
                })))
            }
            (Phase::Numeric | Phase::Staged, false) if a.bits.is_some() => {
                let value = self.asm_value(&st.value)?;
                let (Some(wval), Some(bits), Some(top)) = (a.wval, a.bits, a.top) else {
                    return Err(invalid(self.span, "assembly: bitmap workspace missing"));
                };
                // wval[c] = v; bits[c >> 6] |= 1 << (c & 63); top[c >> 12] |= 1 << ((c >> 6) & 63)
                let one = Expr::Int(1, DType::U64);
                let set_bit = |buf: BufferId, word: Expr, bit: Expr| {
                    store(
                        buf,
                        vec![word.clone()],
                        Expr::binary(
                            BinOp::BitOr,
                            Expr::load(buf, vec![word]),
                            Expr::binary(BinOp::Shl, one.clone(), bit),
                        ),
                    )
                };
                let shr = |x: Expr, k: i64| Expr::binary(BinOp::Shr, x, typed(k, d));
                let low6 = |x: Expr| Expr::binary(BinOp::BitAnd, x, typed(63, d));
                let mut v = vec![
                    store(wval, vec![c.clone()], value),
                    set_bit(bits, shr(c.clone(), WORD_SHIFT), low6(c.clone())),
                    set_bit(top, shr(c.clone(), TOP_SHIFT), low6(shr(c, WORD_SHIFT))),
                ];
                if a.phase == Phase::Staged {
                    v.push(count_store(a.stores, self.span)?);
                }
                Ok(Stmt::seq(v))
            }
            (Phase::StagedDense | Phase::StagedGroups, false) => {
                let value = self.asm_value(&st.value)?;
                let (Some(wval), Some(marks)) = (a.wval, a.marks) else {
                    return Err(invalid(self.span, "assembly: byte-mark workspace missing"));
                };
                let mut v = vec![
                    store(wval, vec![c.clone()], value),
                    store(marks, vec![c.clone()], Expr::Int(1, DType::U8)),
                ];
                if let Some(g) = a.groups {
                    let group = Expr::binary(BinOp::Shr, c, typed(WORD_SHIFT, d));
                    v.push(store(g, vec![group], Expr::Int(1, DType::U8)));
                }
                v.push(count_store(a.stores, self.span)?);
                Ok(Stmt::seq(v))
            }
            (Phase::Staged | Phase::StagedDense | Phase::StagedGroups, _) => Err(invalid(
                self.span,
                "assembly: a staged assembly without its workspace",
            )),
            (Phase::Numeric, false) => {
                let value = self.asm_value(&st.value)?;
                let indices = self.indices_buf(a.axis)?;
                let (Some(flag), Some(wval)) = (a.flag, a.wval) else {
                    return Err(invalid(self.span, "assembly: workspace buffers missing"));
                };
                let t = self.f.add_var("v", self.f.buffers[a.buffer].dtype);
                let insert = when(
                    Expr::binary(BinOp::Ne, Expr::load(flag, vec![c.clone()]), stamp.clone()),
                    Stmt::seq(vec![
                        store(flag, vec![c.clone()], stamp),
                        store(indices, vec![vi, at0(a.cnt)], c.clone()),
                        inc,
                    ]),
                );
                let put = store(wval, vec![c], Expr::var(t));
                Ok(Stmt::Let(Box::new(LetStmt {
                    var: t,
                    value,
                    body: Stmt::seq(vec![insert, put]),
                    span: st.span,
                })))
            }
        }
    }

    /// A read of the assembled buffer: the value written so far in this row, or the default.
    pub(super) fn asm_load(&mut self, buffer: BufferId, indices: &[Expr]) -> Res<Expr> {
        let Some(a) = self.asm.clone() else {
            return Err(unsupported(
                self.span,
                format!(
                    "a read of `{}`, whose structure is assembled, outside its assembling iteration",
                    self.f.buffers[buffer].name
                ),
            ));
        };
        let ok = buffer == a.buffer
            && matches!(indices, [Expr::Var(r), Expr::Var(c)] if *r == a.row_var && *c == a.col_var);
        if !ok {
            return Err(unsupported(
                self.span,
                "reads of an assembled buffer must name the element being written",
            ));
        }
        let dt = self.f.buffers[buffer].dtype;
        let default = self.f.buffers[buffer]
            .default_value
            .clone()
            .unwrap_or_else(|| zero(dt));
        if a.phase.structure_only() {
            return Ok(default);
        }
        let vi = self.asm_row(&a)?;
        let c = self.expr(&Expr::var(a.col_var))?;
        let d = a.idtype;
        if a.sorted {
            let indices_b = self.indices_buf(a.axis)?;
            let prev = Expr::sub(at0(a.cnt), typed(1, d));
            let here = Expr::Select(
                Box::new(Expr::binary(BinOp::Gt, at0(a.cnt), typed(0, d))),
                Box::new(Expr::binary(
                    BinOp::Eq,
                    Expr::load(indices_b, vec![vi.clone(), prev.clone()]),
                    c,
                )),
                Box::new(Expr::Bool(false)),
            );
            Ok(Expr::Select(
                Box::new(here),
                Box::new(Expr::load(buffer, vec![vi, prev])),
                Box::new(default),
            ))
        } else if let (Some(wval), true) = (a.wval, a.bits.is_some() || a.marks.is_some()) {
            // The workspace holds 0, the default, wherever this row has not written.
            Ok(Expr::load(wval, vec![c]))
        } else {
            let (Some(flag), Some(wval)) = (a.flag, a.wval) else {
                return Err(invalid(self.span, "assembly: workspace buffers missing"));
            };
            let stamp = self.simp.add(&self.f, vi, Expr::int(1));
            Ok(Expr::Select(
                Box::new(Expr::binary(
                    BinOp::Eq,
                    Expr::load(flag, vec![c.clone()]),
                    stamp,
                )),
                Box::new(Expr::load(wval, vec![c])),
                Box::new(default),
            ))
        }
    }
}
