//! The C11 + OpenMP writer: turns one stage III [`PrimFunc`] into a self-contained C source with
//! the uniform entry point described in the crate documentation.
//!
//! The [`Writer`] holds the output text, the indentation and the naming state; there is one method
//! per statement kind (`write_for`, `write_block`, ...) and one per expression kind (`binary`,
//! `call`, `load`, ...). Expressions are returned as C text together with the sparsetir dtype of
//! their value; every compound expression is parenthesised, so the text can be embedded anywhere.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;

use sparsetir_ir::expr::binary_result_dtype;
use sparsetir_ir::{
    AttrValue, BinOp, Block, BufferDecl, BufferId, BufferShape, DType, Expr, For, ForKind,
    IfThenElse, Intrinsic, IterKind, LetStmt, PrimFunc, Span, Stage, Stmt, Store, UnOp, VarId,
    While,
};

use crate::{CModule, CParam, CParamKind, CodegenError};

mod evaluate;
mod expr;
mod first_write;
mod gpu;
pub use gpu::{CP_ASYNC_PRELUDE, TMA_PRELUDE};
mod half;
mod memory;
mod names;
mod overwrite;
mod parallel;
mod prefetch;
mod prelude;
mod reduction;
mod vector;
mod vector_math;
mod workspace;

use expr::{cast, int_literal, limit_literal};
pub(crate) use gpu::Target;
pub use names::entry_symbol;
use names::{sanitize, Namer};
use prelude::write_prelude;

type Res<T> = Result<T, CodegenError>;

/// The largest number of elements an allocation of constant size may have to live on the stack.
pub const STACK_LIMIT: i64 = 4096;

/// Default OpenMP schedule of `ForKind::Parallel` loops.
const DEFAULT_SCHEDULE: &str = "dynamic";
const DEFAULT_CHUNK: i64 = 64;

/// Emits the C source of a stage III function; see [`crate::emit_c`].
pub fn emit_c(func: &PrimFunc) -> Res<CModule> {
    require_stage_iii(func)?;
    let mut w = Writer::new(func);
    w.write_module()
}

/// Both targets take stage III functions only.
pub(crate) fn require_stage_iii(func: &PrimFunc) -> Res<()> {
    let stage = func.stage();
    if stage != Stage::III {
        return Err(CodegenError::NotStageIII {
            func: func.name.clone(),
            stage: match stage {
                Stage::I => "I",
                Stage::II => "II",
                Stage::III => "III",
            },
            span: func.span,
        });
    }
    Ok(())
}

/// The loop annotation written by the schedule primitive `vectorize_reduction`.
pub const SIMD_REDUCTION_ATTR: &str = "simd_reduction";

/// Loop annotation `"BUF:D"`: prefetch the element of `BUF` read `D` iterations ahead (clamped
/// to the loop's last iteration); `"BUF:D:flat"`: `D` iterations ahead even past the loop's end
/// (the next rows of a CSR position space), every read on the way clamped into its buffer.
pub const PREFETCH_ATTR: &str = "prefetch";

/// Loop annotation `U` (2 to 16) on a loop whose body is a `simd_reduction` loop with lanes:
/// unroll-and-jam, `U` consecutive iterations' reductions share one lane loop. A hint: where
/// the reduction has no lanes (bounds not constant, not `+`), the loop is written unjammed.
pub const JAM_ATTR: &str = "jam";
/// Loop annotation: the number of lane-parallel partial sums of a `simd_reduction` loop.
pub const LANES_ATTR: &str = "lanes";
/// Loop annotation `N` on a `simd_reduction` loop (plain `omp simd reduction` form) whose trip
/// count is only known at run time: the loop is versioned, SIMD where the trip count is at
/// least `N`, one scalar chain below (short CSR rows do not pay for vector gathers and the
/// horizontal sum; long ones get them).
pub const SIMD_MIN_TRIP_ATTR: &str = "simd_min_trip";
/// Loop annotation `1` beside [`SIMD_MIN_TRIP_ATTR`] on a `+` reduction of run-time trip
/// count with a gather plan: every trip count runs the AVX-512 form, the last `< 16`
/// iterations as one masked step instead of a scalar loop (no branch on the trip count: rows
/// of power-law graphs, whose lengths are unpredictable, cost no mispredictions).
pub const SIMD_MASKED_TAIL_ATTR: &str = "simd_masked_tail";

/// Loop annotation: the OpenMP schedule of a parallel loop (`"static"`, `"dynamic"`,
/// `"guided"`, `"auto"`, `"runtime"`, or [`NNZ_BALANCED`]).
pub const SCHEDULE_ATTR: &str = "schedule";

/// Value of [`SCHEDULE_ATTR`]: contiguous row ranges with equal numbers of stored elements,
/// cut by binary search in the buffer named by [`INDPTR_ATTR`].
pub const NNZ_BALANCED: &str = "nnz_balanced";

/// Loop annotation: the indptr buffer of an `nnz_balanced` loop's rows.
pub const INDPTR_ATTR: &str = "indptr";

/// An integer expression as `constant + sum of coeff * term`, the terms being the maximal
/// subexpressions that are not sums, differences or products by constants.
#[derive(Clone)]
struct Affine {
    terms: Vec<(Expr, i64)>,
    constant: i64,
}

impl Affine {
    fn add_term(&mut self, e: Expr, c: i64) -> Option<()> {
        match self.terms.iter_mut().find(|(t, _)| *t == e) {
            Some((_, k)) => *k = k.checked_add(c)?,
            None => self.terms.push((e, c)),
        }
        Some(())
    }

    fn scaled(mut self, c: i64) -> Option<Affine> {
        for (_, k) in &mut self.terms {
            *k = k.checked_mul(c)?;
        }
        self.constant = self.constant.checked_mul(c)?;
        Some(self)
    }

    fn plus(mut self, o: Affine) -> Option<Affine> {
        for (e, c) in o.terms {
            self.add_term(e, c)?;
        }
        self.constant = self.constant.checked_add(o.constant)?;
        Some(self)
    }

    /// `self - o` (`None` on overflow).
    fn sub(&self, o: &Affine) -> Option<Affine> {
        self.clone().plus(o.clone().scaled(-1)?)
    }
}

/// The affine form of an integer expression (`None` on overflow).
fn affine(e: &Expr) -> Option<Affine> {
    if let Some(c) = const_int(e) {
        return Some(Affine {
            terms: Vec::new(),
            constant: c,
        });
    }
    match e {
        Expr::Binary(BinOp::Add, a, b) => affine(a)?.plus(affine(b)?),
        Expr::Binary(BinOp::Sub, a, b) => affine(a)?.plus(affine(b)?.scaled(-1)?),
        Expr::Binary(BinOp::Mul, a, b) if const_int(b).is_some() => {
            affine(a)?.scaled(const_int(b)?)
        }
        Expr::Binary(BinOp::Mul, a, b) if const_int(a).is_some() => {
            affine(b)?.scaled(const_int(a)?)
        }
        other => {
            let mut a = Affine {
                terms: Vec::new(),
                constant: 0,
            };
            a.add_term(other.clone(), 1)?;
            Some(a)
        }
    }
}

/// The outermost loads of `e` whose variables all satisfy `outer`, skipping subexpressions
/// that C evaluates conditionally (`Select` branches, right operands of `and`/`or`).
fn invariant_loads(e: &Expr, outer: &dyn Fn(VarId) -> bool, out: &mut Vec<Expr>) {
    match e {
        Expr::Load { indices, .. } => {
            let mut ok = true;
            e.visit(&mut |z| {
                if let Expr::Var(v) = z {
                    ok &= outer(*v);
                }
                ok &= !matches!(z, Expr::Let { .. } | Expr::Select(..));
            });
            if ok {
                if !out.contains(e) {
                    out.push(e.clone());
                }
            } else {
                indices.iter().for_each(|i| invariant_loads(i, outer, out));
            }
        }
        Expr::Select(c, _, _) => invariant_loads(c, outer, out),
        Expr::Binary(BinOp::And | BinOp::Or, a, _) => invariant_loads(a, outer, out),
        Expr::Let { value, .. } => invariant_loads(value, outer, out),
        other => other.for_each_child(|c| invariant_loads(c, outer, out)),
    }
}

/// The operands of a chain of `and`s.
fn conjuncts<'e>(e: &'e Expr, out: &mut Vec<&'e Expr>) {
    match e {
        Expr::Binary(BinOp::And, a, b) => {
            conjuncts(a, out);
            conjuncts(b, out);
        }
        other => out.push(other),
    }
}

/// Replaces the value of the single store under `s` (through one-element sequences and one
/// block); false when `s` is not of that shape.
fn replace_single_store_value(s: &mut Stmt, value: Expr) -> bool {
    match s {
        Stmt::Seq(v) if v.len() == 1 => replace_single_store_value(&mut v[0], value),
        Stmt::Block(b) => replace_single_store_value(&mut b.body, value),
        Stmt::Store(st) => {
            st.value = value;
            true
        }
        _ => false,
    }
}

/// Removes the `init` of the single block `s` is (or holds in a one-element sequence).
fn strip_block_init(s: &mut Stmt) {
    match s {
        Stmt::Seq(v) if v.len() == 1 => strip_block_init(&mut v[0]),
        Stmt::Block(b) => b.init = None,
        _ => {}
    }
}

/// The C type of a value of `dt`, or `None` for dtypes the C target cannot hold.
fn c_type(dt: DType) -> Option<&'static str> {
    Some(match dt {
        DType::Bool => "bool",
        DType::I8 => "int8_t",
        DType::I16 => "int16_t",
        DType::I32 => "int32_t",
        DType::I64 => "int64_t",
        DType::U8 => "uint8_t",
        DType::U16 => "uint16_t",
        DType::U32 => "uint32_t",
        DType::U64 => "uint64_t",
        DType::F32 => "float",
        DType::F64 => "double",
        // In memory: the bit patterns (values are `float`s, see `half`).
        DType::F16 | DType::BF16 => "uint16_t",
        DType::Handle => return None,
    })
}

/// The suffix of the prelude helpers for `dt` (`sptir_min_i32`, ...).
fn helper_suffix(dt: DType) -> &'static str {
    match dt {
        DType::I8 => "i8",
        DType::I16 => "i16",
        DType::I32 => "i32",
        DType::I64 => "i64",
        DType::U8 => "u8",
        DType::U16 => "u16",
        DType::U32 => "u32",
        DType::U64 => "u64",
        DType::F32 => "f32",
        _ => "f64",
    }
}

/// A stride of a dense buffer: a constant or the name of a `const int64_t` local.
#[derive(Clone, Debug)]
enum Stride {
    Const(i64),
    Local(String),
}

/// The C view of a buffer that is in scope.
#[derive(Clone, Debug)]
struct BufInfo {
    strides: Vec<Stride>,
    /// Where the part of the buffer the code holds starts, per dimension (a function-level
    /// shared buffer's window, `gpu/shared_window.rs`); empty: the whole buffer.
    window: Vec<Expr>,
    /// A double-buffered window's offset to the current half (`gpu/pipeline.rs`).
    stage: Option<Expr>,
    /// A two-dimensional shared window laid out as the 8 x 8 core matrices a warpgroup's
    /// tensor cores read through a descriptor (`gpu/mma/warpgroup.rs`): its number of rows
    /// `R`; element `(k, n)` (the window's start taken off) at `(n / 8) * 8 R + 8 k + n % 8`.
    core: Option<i64>,
    /// With `core`: the window is laid out instead as the 128-byte-swizzled boxes of 64 columns
    /// the tensor copy engine writes (`gpu/tma.rs`): element `(k, n)` at `(n / 64) * 64 R +
    /// 64 k + ((n % 64) ^ (8 (k % 8)))`.
    swizzled: bool,
}

/// How an allocation is made.
enum AllocKind {
    /// `T name[n] = {0};`
    Stack(i64),
    /// `T* name = (T*)calloc(size, sizeof(T));` with the size expression.
    Heap(String),
}

/// The C writer of one function.
pub struct Writer<'f> {
    func: &'f PrimFunc,
    out: String,
    indent: usize,
    namer: Namer,
    var_names: Vec<String>,
    buf_names: Vec<String>,
    /// Variables currently bound (loop, block iterator, let, parameter).
    bound: Vec<bool>,
    /// `T.let` expressions are substituted: the C text of each bound let variable.
    let_subst: HashMap<VarId, String>,
    /// Buffers currently in scope, with their strides.
    bufs: Vec<Option<BufInfo>>,
    /// Buffers that are stored to somewhere (others get `const` pointers).
    stored: HashSet<BufferId>,
    /// The statement being written, for error spans.
    span: Span,
    /// Inside a `simd_reduction` loop: the reduced element, redirected to a local accumulator.
    simd_acc: Option<SimdAcc>,
    /// While writing the address of a `prefetch` that looks past its loop's end: the variables
    /// that no longer hold a value of the current iteration (the loop's, the inner loops' and
    /// the block iterators bound to them); loads indexed by them are clamped into their
    /// buffers, whose flat sizes are collected in the second list.
    prefetch_clamp: Option<(Vec<VarId>, Vec<String>)>,
    /// Inside a loop written one vector at a time (see [`vector`]).
    vec_loop: Option<vector::VecLoop>,
    /// Whether a vector loop was written (the module then needs the vector helpers).
    uses_vectors: bool,
    /// Whether a lane loop gathers with AVX-512 (the module head then declares its types).
    uses_gathers: bool,
    /// Some expression called `T.mask64` (the head then needs `sptir_mask64`).
    uses_mask64: bool,
    /// Some statement called `T.compress64` or `T.compress_iota64` (the head then needs the
    /// `sptir_compress*` helpers).
    uses_compress64: bool,
    /// The lane vector types (element type, lanes) the lane reductions use.
    lane_types: BTreeSet<(DType, i64)>,
    /// Widening loads of 16-bit floats written (see [`half::widen_prelude`]): at the machine
    /// vector's width, at these lane widths, of these types.
    widen_machine: bool,
    widen_lanes: BTreeSet<i64>,
    widen_dtypes: BTreeSet<DType>,
    /// The 16-bit float types the vector loops stored to (see [`half::narrow_prelude`]).
    narrow_dtypes: BTreeSet<DType>,
    /// The lane-wise math helpers the vector loops called (see [`vector_math`]).
    vector_math: vector_math::VMathUses,
    /// The language written.
    target: Target,
    /// CUDA: the kernel being written.
    kernel: Option<gpu::KernelCtx>,
    /// CUDA: the function-level `shared` buffers (per thread block, declared in a kernel), and
    /// those a kernel has declared already (one kernel may use each).
    shared_temps: Vec<BufferId>,
    shared_users: HashSet<BufferId>,
    /// CUDA: writing a double-buffered copy (16-byte copies become `cp.async`).
    cp_async: bool,
    /// CUDA: the tensorized nest (its outermost loop's variable) whose accumulator fragment an
    /// enclosing loop keeps in registers (`sptir_acc`) for all its iterations.
    mma_acc: Option<VarId>,
    /// CUDA: with `mma_acc`, the unrolled loop inside the accumulating loop that picks one of
    /// several tiles kept in registers (`sptir_acc[u]`).
    mma_acc_unit: Option<VarId>,
    /// CUDA: the tensorized nest (its outermost loop's variable) whose `A` fragment was written
    /// once before the unit loop (`mma_acc_unit`), for every tile of it.
    mma_a_shared: Option<VarId>,
    /// CUDA: with `mma_acc_unit`, the row unit loop around it and the unit loop's extent.
    mma_acc_rows: Option<(VarId, i64)>,
    /// CUDA: the tensorized nest whose `B` fragments (one per unit) were written once before
    /// the row unit loop (`sptir_bs[u]`), for every row unit.
    mma_b_shared: Option<VarId>,
    /// CUDA: the accumulating loop being written keeps a warpgroup's products
    /// (`gpu/mma/warpgroup.rs`): its unit loop is one `wgmma` of all the units. The annotated
    /// warp loop's variable.
    mma_warpgroup: Option<VarId>,
    /// CUDA: the `wgmma` forms the module calls (units of 8 columns, operand type suffix).
    wgmma_forms: BTreeSet<(i64, &'static str, bool)>,
    /// CUDA: the same, of the forms reading `A` from shared memory (`gpu/mma/warpgroup_ss.rs`).
    wgmma_ss_forms: BTreeSet<(i64, &'static str)>,
    /// CUDA: enclosing thread loops annotated `warpgroup` being written.
    warpgroup_depth: usize,
    /// CUDA: buffers the kernel being written may take as all zeros where its accumulator plans
    /// load their tiles (`gpu/zero_start.rs`).
    zero_tiles: HashSet<BufferId>,
    /// The function's loop and block-iterator ranges (`gpu/mma/warpgroup.rs`), made on first
    /// use.
    loop_facts: std::cell::OnceCell<(sparsetir_arith::Analyzer, HashMap<VarId, Expr>)>,
    /// CUDA: serial loops being written around the current statement.
    serial_depth: usize,
    /// Conditions of the function (`if`, `while`, block predicates) around the current
    /// statement.
    ir_conds: usize,
    /// CUDA: buffers whose every element the kernel being written stores from registers that
    /// started at zero (`gpu/zero_start.rs`).
    zero_covered: HashSet<BufferId>,
    /// CUDA: the double-buffered run loop of a warpgroup's plan reads `A` one run ahead
    /// (`gpu/mma/warpgroup.rs`): its variable, the next run's C text and the loop's end.
    a_prefetch: Option<(VarId, String, String)>,
    /// CUDA: the run loop being written stages its warpgroup products' `A` in shared memory
    /// (`gpu/mma/stage_a.rs`).
    a_stage: Option<gpu::AStage>,
    /// CUDA: which pass over a run's products a run loop whose tensor cores read `A` from
    /// shared memory is writing (`gpu/mma/stage_a.rs`, `wgmma_ss`), the stage tile of `A` the
    /// product being written reads (set by the staged `A`, taken by the product), and the
    /// products' units and row units once one was written.
    ss_pass: Option<gpu::SsPass>,
    ss_a_tile: Option<String>,
    ss_product: Option<(i64, i64)>,
    /// CUDA: where the run being written puts its row units' metadata in `sptir_er` (the
    /// run's place in a group of runs, `wgmma_ss_runs`, times the row units).
    ss_er_base: i64,
    /// CUDA: the run loop being written keeps one warpgroup product in flight
    /// (`gpu/pipeline.rs`, `wgmma_in_flight`): `Some` while its body is written, then the
    /// products' units and row units once one was written.
    wgmma_in_flight: Option<Option<(i64, i64)>>,
    /// CUDA: with `mma_acc_unit`, where some unit tile is live (the accumulator plan's guards,
    /// joined; `None`: every tile always is): the shared `A` fragment is read under it.
    mma_unit_live: Option<String>,
    /// A tensorized fill absorbed by the next loop's register accumulator: the value that
    /// accumulator starts with and the loop's plan, computed once (see
    /// `Writer::mma_fill_absorbed`).
    mma_fill_init: Option<(String, gpu::mma::AccumulatorPlan)>,
    /// CUDA: a constant fill absorbed by the register accumulation after it: that loop's
    /// variable and the value its registers start with (see `gpu/fill_start.rs`).
    fill_start: Option<(VarId, Expr)>,
    /// CUDA, inside one iteration of a loop whose reads were vectorised: those reads, with
    /// the vector holding them, and the iteration (the component to read).
    vec_sub: Option<(Vec<(Expr, String)>, usize)>,
    /// Workspaces allocated around the loop being written (see [`workspace`]).
    hoisted: Vec<workspace::Hoisted>,
    /// Whether any block of the function names a workspace (else loops skip looking).
    has_workspaces: bool,
    /// The workspaces the next parallel region opened allocates, one per thread.
    region_ws: Vec<BufferId>,
    /// CUDA: device buffers the kernels derive from inputs (`gpu/mma/stage_a.rs`'s packed
    /// positions), appended to the module's temporaries: kernel argument `derived_base + t` is
    /// the `t`-th.
    derived: Vec<gpu::Derived>,
    derived_base: usize,
}

/// A parameter of the function as the writers pass it.
pub(crate) struct ParamInfo {
    /// What the module reports for it.
    pub(crate) param: CParam,
    pub(crate) kind: ParamLayout,
}

/// How a parameter reaches the generated code.
pub(crate) enum ParamLayout {
    /// A handle no buffer matches (passed, never read).
    Unmatched,
    /// A handle: a pointer to the elements of `first`; `others` match the same handle.
    Buffer {
        first: BufferId,
        others: Vec<BufferId>,
    },
    /// A scalar passed by value.
    Scalar(VarId),
}

/// One copy of a lane reduction (several when jammed): the enclosing loop variable's text in
/// it, its hoisted loads and the name of its accumulator (`{acc}_part` holds the lanes).
struct LaneCopy {
    subst: Option<(VarId, String)>,
    hoisted: Vec<(Expr, String)>,
    acc: String,
}

/// The element `buffer[indices]` a `simd_reduction` loop reduces into, held in the C local
/// `name` while the loop runs.
struct SimdAcc {
    buffer: BufferId,
    indices: Vec<Expr>,
    name: String,
    /// Loads read once before the loop, with the C local holding each.
    hoisted: Vec<(Expr, String)>,
}

impl<'f> Writer<'f> {
    /// A writer for `func` (any stage; [`Writer::write_module`] does the work).
    pub fn new(func: &'f PrimFunc) -> Writer<'f> {
        Writer::for_target(func, Target::C)
    }

    /// A writer of `func` in the language `target`.
    pub(crate) fn for_target(func: &'f PrimFunc, target: Target) -> Writer<'f> {
        let mut namer = Namer::default();
        namer.used.insert("sptir_status".to_string());
        let mut stored = HashSet::new();
        func.body.visit(&mut |s| {
            if let Stmt::Store(st) = s {
                stored.insert(st.buffer);
            }
            s.for_each_expr(|e| {
                e.visit(&mut |x| {
                    if let Expr::Call { op, args, .. } = x {
                        if let (true, Some(Expr::Load { buffer, .. })) =
                            (op.writes_first_arg(), args.first())
                        {
                            stored.insert(*buffer);
                        }
                    }
                })
            });
        });
        // Names: scalar parameters, then buffers, then the other variables, in declaration order.
        let mut var_names = vec![String::new(); func.vars.len()];
        for &p in &func.params {
            if let Some(v) = func.vars.get(p) {
                if v.dtype != DType::Handle {
                    var_names[p.index()] = namer.fresh(&v.name);
                }
            }
        }
        let buf_names = func
            .buffers
            .iter()
            .map(|(_, b)| namer.fresh(&b.name))
            .collect();
        for (h, v) in func.vars.iter() {
            if var_names[h.index()].is_empty() {
                var_names[h.index()] = namer.fresh(&v.name);
            }
        }
        Writer {
            func,
            out: String::new(),
            indent: 0,
            namer,
            var_names,
            buf_names,
            bound: vec![false; func.vars.len()],
            let_subst: HashMap::new(),
            bufs: vec![None; func.buffers.len()],
            stored,
            span: func.span,
            simd_acc: None,
            prefetch_clamp: None,
            vec_loop: None,
            uses_vectors: false,
            uses_gathers: false,
            uses_mask64: false,
            uses_compress64: false,
            lane_types: BTreeSet::new(),
            widen_machine: false,
            widen_lanes: BTreeSet::new(),
            widen_dtypes: BTreeSet::new(),
            vector_math: BTreeSet::new(),
            narrow_dtypes: BTreeSet::new(),
            target,
            kernel: None,
            mma_acc: None,
            mma_acc_unit: None,
            mma_a_shared: None,
            mma_acc_rows: None,
            mma_b_shared: None,
            mma_unit_live: None,
            mma_warpgroup: None,
            wgmma_forms: BTreeSet::new(),
            wgmma_ss_forms: BTreeSet::new(),
            warpgroup_depth: 0,
            a_prefetch: None,
            a_stage: None,
            ss_pass: None,
            ss_a_tile: None,
            ss_product: None,
            ss_er_base: 0,
            wgmma_in_flight: None,
            zero_tiles: HashSet::new(),
            loop_facts: std::cell::OnceCell::new(),
            serial_depth: 0,
            ir_conds: 0,
            zero_covered: HashSet::new(),
            mma_fill_init: None,
            fill_start: None,
            vec_sub: None,
            hoisted: Vec::new(),
            shared_temps: Vec::new(),
            shared_users: HashSet::new(),
            cp_async: false,
            has_workspaces: workspace::any_in(&func.body),
            region_ws: Vec::new(),
            derived: Vec::new(),
            derived_base: 0,
        }
    }

    // ------------------------------------------------------------------ output helpers

    fn line(&mut self, text: &str) {
        for _ in 0..self.indent {
            self.out.push_str("    ");
        }
        self.out.push_str(text);
        self.out.push('\n');
    }

    /// A `#pragma` line, at the current indentation.
    fn pragma(&mut self, text: &str) {
        self.line(&format!("#pragma {text}"));
    }

    fn unsupported(&self, construct: &str, message: impl Into<String>) -> CodegenError {
        CodegenError::Unsupported {
            construct: construct.to_string(),
            message: message.into(),
            span: self.span,
        }
    }

    fn invalid(&self, message: impl Into<String>) -> CodegenError {
        CodegenError::Invalid {
            message: message.into(),
            span: self.span,
        }
    }

    /// The C type of a *value* of `dt` (16-bit floats are computed in `float`, see [`half`]).
    fn ctype(&self, dt: DType, what: &str) -> Res<&'static str> {
        match dt {
            DType::F16 | DType::BF16 => Ok("float"),
            DType::Handle => Err(self.unsupported(what, "a `handle` cannot be used as a value")),
            _ => Ok(c_type(dt).unwrap_or("void")),
        }
    }

    /// The C type of an *element in memory* of `dt` (16-bit floats as their bit patterns).
    fn storage_ctype(&self, dt: DType, what: &str) -> Res<&'static str> {
        self.ctype(dt, what)?;
        Ok(c_type(dt).unwrap_or("void"))
    }

    fn bind(&mut self, v: VarId) -> Res<String> {
        let Some(var) = self.func.vars.get(v) else {
            return Err(self.invalid(format!("variable {v:?} is not declared")));
        };
        if self.bound[v.index()] {
            return Err(self.invalid(format!(
                "variable `{}` is bound again inside its own scope",
                var.name
            )));
        }
        self.bound[v.index()] = true;
        Ok(self.var_names[v.index()].clone())
    }

    fn unbind(&mut self, v: VarId) {
        if let Some(b) = self.bound.get_mut(v.index()) {
            *b = false;
        }
    }

    /// The element type of buffer `b` (`float32` for an undeclared handle: the writer reports
    /// undeclared buffers where it names them).
    fn buf_dtype(&self, b: BufferId) -> DType {
        self.func
            .buffers
            .get(b)
            .map(|x| x.dtype)
            .unwrap_or(DType::F32)
    }

    fn buf_name(&self, b: BufferId) -> Res<&str> {
        match self.buf_names.get(b.index()) {
            Some(n) => Ok(n),
            None => Err(self.invalid(format!("buffer {b:?} is not declared"))),
        }
    }

    // ------------------------------------------------------------------ module

    /// The function's parameters as both targets pass them (checked: declared, value types
    /// the target has, buffers sharing a handle of one element type); scalar parameters are
    /// bound.
    pub(crate) fn param_layout(&mut self) -> Res<Vec<ParamInfo>> {
        let func = self.func;
        let mut handle_users: HashMap<VarId, Vec<BufferId>> = HashMap::new();
        for &b in &func.buffer_decls {
            if let Some(buf) = func.buffers.get(b) {
                if let BufferDecl::Match { data } = buf.decl {
                    handle_users.entry(data).or_default().push(b);
                }
            }
        }
        let mut out = Vec::new();
        for &p in &func.params {
            let Some(var) = func.vars.get(p) else {
                return Err(self.invalid(format!("parameter {p:?} is not declared")));
            };
            self.span = func.span;
            if var.dtype == DType::Handle {
                let users = handle_users.get(&p).cloned().unwrap_or_default();
                let Some(&first) = users.first() else {
                    out.push(ParamInfo {
                        param: CParam {
                            name: var.name.clone(),
                            kind: CParamKind::Array {
                                elem: DType::Handle,
                            },
                        },
                        kind: ParamLayout::Unmatched,
                    });
                    continue;
                };
                let elem = func.buffers[first].dtype;
                self.span = func.buffers[first].span;
                self.ctype(elem, &format!("buffer `{}`", func.buffers[first].name))?;
                for &u in &users[1..] {
                    let d = func.buffers[u].dtype;
                    if d != elem {
                        return Err(self.unsupported(
                            &format!("buffer `{}`", func.buffers[u].name),
                            format!(
                                "parameter `{}` is matched as {} and as {}",
                                var.name, elem, d
                            ),
                        ));
                    }
                }
                out.push(ParamInfo {
                    param: CParam {
                        name: var.name.clone(),
                        kind: CParamKind::Array { elem },
                    },
                    kind: ParamLayout::Buffer {
                        first,
                        others: users[1..].to_vec(),
                    },
                });
            } else {
                let dt = var.dtype;
                self.ctype(dt, &format!("parameter `{}`", var.name))?;
                self.bind(p)?;
                out.push(ParamInfo {
                    param: CParam {
                        name: var.name.clone(),
                        kind: CParamKind::Scalar(dt),
                    },
                    kind: ParamLayout::Scalar(p),
                });
            }
        }
        self.span = func.span;
        Ok(out)
    }

    /// Writes the whole source: prelude, kernel body function and entry point.
    pub fn write_module(&mut self) -> Res<CModule> {
        let func = self.func;
        let entry = entry_symbol(&func.name);
        // Parameters.
        let mut params = Vec::new();
        let mut c_params = Vec::new();
        let mut unpack = Vec::new();
        // Buffers sharing one handle each get a pointer, derived from the first one's parameter.
        let mut aliases: Vec<(BufferId, BufferId, bool)> = Vec::new();
        for (k, info) in self.param_layout()?.into_iter().enumerate() {
            params.push(info.param.clone());
            match info.kind {
                ParamLayout::Unmatched => {
                    let name = self.namer.fresh(&info.param.name);
                    c_params.push(format!("void* {name}"));
                    unpack.push(format!("args[{k}].ptr"));
                }
                ParamLayout::Buffer { first, others } => {
                    let elem = func.buffers[first].dtype;
                    let ct = c_type(elem).unwrap_or("void");
                    let is_const = std::iter::once(&first)
                        .chain(&others)
                        .all(|u| !self.stored.contains(u));
                    for &u in &others {
                        aliases.push((u, first, is_const));
                    }
                    let restrict = if others.is_empty() { " restrict" } else { "" };
                    let cst = if is_const { "const " } else { "" };
                    let name = self.buf_name(first)?.to_string();
                    c_params.push(format!("{cst}{ct}*{restrict} {name}"));
                    unpack.push(format!("({cst}{ct}*)args[{k}].ptr"));
                }
                ParamLayout::Scalar(p) => {
                    let dt = func.vars[p].dtype;
                    let name = self.var_names[p.index()].clone();
                    if half::is_half(dt) {
                        // A 16-bit float scalar is a float value, rounded on entry.
                        c_params.push(format!("float {name}"));
                        unpack.push(half::round_to(dt, &format!("(float)args[{k}].f")));
                        continue;
                    }
                    let ct = c_type(dt).unwrap_or("void");
                    c_params.push(format!("{ct} {name}"));
                    unpack.push(if dt.is_float() {
                        format!("({ct})args[{k}].f")
                    } else if dt.is_bool() {
                        format!("(args[{k}].i != 0)")
                    } else {
                        format!("({ct})args[{k}].i")
                    });
                }
            }
        }

        let mut head = String::new();
        write_prelude(&mut head, &func.name);
        let sig = if c_params.is_empty() {
            "void".to_string()
        } else {
            c_params.join(", ")
        };
        let kernel_at = head.len();
        let _ = writeln!(head, "static int32_t sptir_kernel({sig}) {{");

        self.indent = 1;
        self.line("int32_t sptir_status = 0;");
        for (u, first, is_const) in &aliases {
            let ct = c_type(func.buffers[*u].dtype).unwrap_or("void");
            let cst = if *is_const { "const " } else { "" };
            let (un, fnm) = (
                self.buf_name(*u)?.to_string(),
                self.buf_name(*first)?.to_string(),
            );
            self.line(&format!("{cst}{ct}* {un} = {fnm};"));
        }
        // Function-level buffers: matched ones get their strides, allocations their storage.
        let mut allocs = Vec::new();
        for &b in &func.buffer_decls {
            let Some(buf) = func.buffers.get(b) else {
                return Err(self.invalid(format!("buffer {b:?} is not declared")));
            };
            self.span = buf.span;
            match buf.decl {
                BufferDecl::Match { .. } => {
                    self.declare_strides(b)?;
                }
                BufferDecl::Alloc => allocs.push(b),
            }
        }
        self.span = func.span;
        let body = &func.body;
        let heap = self.write_allocs(&allocs, &[body])?;
        self.write_guarded(&heap, |w| w.write_stmt(body))?;
        self.line("return sptir_status;");
        self.indent = 0;
        self.line("}");
        self.line("");

        let n = params.len();
        self.line(&format!(
            "int32_t {entry}(const sparsetir_arg* args, int32_t nargs) {{"
        ));
        self.indent = 1;
        self.line(&format!("if (nargs != {n}) {{"));
        self.line("    return -1;");
        self.line("}");
        if n == 0 {
            self.line("(void)args;");
            self.line("return sptir_kernel();");
        } else {
            self.line("return sptir_kernel(");
            for (k, u) in unpack.iter().enumerate() {
                let sep = if k + 1 == n { "" } else { "," };
                self.line(&format!("    {u}{sep}"));
            }
            self.line(");");
        }
        self.indent = 0;
        self.line("}");
        head.insert_str(kernel_at, &vector_math::prelude(&self.vector_math));
        if !self.narrow_dtypes.is_empty() {
            let dtypes: Vec<DType> = self.narrow_dtypes.iter().copied().collect();
            head.insert_str(kernel_at, &half::narrow_prelude(&dtypes));
        }
        if !self.widen_dtypes.is_empty() {
            let lanes: Vec<i64> = self.widen_lanes.iter().copied().collect();
            let dtypes: Vec<DType> = self.widen_dtypes.iter().copied().collect();
            let text = half::widen_prelude(self.widen_machine, &lanes, &dtypes);
            head.insert_str(kernel_at, &text);
            for n in lanes {
                self.lane_types.insert((DType::F32, n));
            }
        }
        if !self.lane_types.is_empty() {
            let defs: String = self
                .lane_types
                .iter()
                .map(|(dt, n)| vector::lane_typedef(*dt, *n))
                .collect();
            head.insert_str(kernel_at, &format!("{defs}\n"));
        }
        if self.uses_vectors {
            head.insert_str(kernel_at, vector::VECTOR_PRELUDE);
        }
        if self.uses_gathers {
            head.insert_str(kernel_at, vector::GATHER_PRELUDE);
        }
        if self.uses_mask64 {
            head.insert_str(kernel_at, prelude::MASK64_PRELUDE);
        }
        if self.uses_compress64 {
            head.insert_str(kernel_at, &prelude::compress64_prelude());
        }
        if half::uses_half(func) {
            head.insert_str(kernel_at, &half::c_prelude());
        }
        let source = head + &self.out;
        let mut overwritten: Vec<String> = overwrite::overwritten_buffers(func)
            .into_iter()
            .filter_map(|b| Some(func.vars.get(func.buffers[b].data_param()?)?.name.clone()))
            .collect();
        overwritten.sort();
        overwritten.dedup();
        Ok(CModule {
            source,
            entry,
            params,
            overwritten,
        })
    }

    // ------------------------------------------------------------------ statements

    fn write_stmt(&mut self, s: &Stmt) -> Res<()> {
        let outer = self.span;
        if !s.span().is_unknown() {
            self.span = s.span();
        }
        // Conditions of the function around what is written (`gpu/zero_start.rs`).
        let cond = matches!(s, Stmt::If(_) | Stmt::While(_))
            || matches!(s, Stmt::Block(b) if b.predicate.is_some());
        self.ir_conds += usize::from(cond);
        let r = match s {
            Stmt::Seq(v) => self.write_seq(v),
            Stmt::SparseIteration(it) => Err(CodegenError::NotStageIII {
                func: self.func.name.clone(),
                stage: "I",
                span: it.span,
            }),
            Stmt::For(f) => self.write_for(f),
            Stmt::Block(b) => self.write_block(b),
            Stmt::Store(st) => self.write_store(st),
            Stmt::If(i) => self.write_if(i, false),
            Stmt::While(w) => self.write_while(w),
            Stmt::Evaluate(e) => self.write_evaluate(e),
            Stmt::Allocate(_) => self.write_seq(std::slice::from_ref(s)),
            Stmt::Let(l) => self.write_let(l),
            Stmt::AssumeBufferDomain { buffer, .. } => {
                let name = self.buf_name(*buffer)?.to_string();
                self.line(&format!("/* assume_buffer_domain({name}) */"));
                Ok(())
            }
        };
        self.ir_conds -= usize::from(cond);
        self.span = outer;
        r
    }

    /// A sequence; an `Allocate` opens a scope holding the rest of the sequence.
    fn write_seq(&mut self, v: &[Stmt]) -> Res<()> {
        let mut pending = gpu::Pending::default();
        for (k, st) in v.iter().enumerate() {
            if self.kernel.is_some() {
                self.cuda_barrier_before(&mut pending, st)?;
            }
            if let Stmt::Allocate(b) = st {
                self.line("{");
                self.indent += 1;
                let rest = &v[k + 1..];
                let scope: Vec<&Stmt> = rest.iter().collect();
                let heap = self.write_allocs(&[*b], &scope)?;
                self.write_guarded(&heap, |w| {
                    for r in rest {
                        w.write_stmt(r)?;
                    }
                    Ok(())
                })?;
                self.end_scope(&[*b]);
                self.indent -= 1;
                self.line("}");
                return Ok(());
            }
            // A tensorized fill whose tile the next loop keeps in registers: the accumulator
            // starts with the filled value instead (no stores and loads of the tile).
            if self.kernel.is_some() && self.mma_fill_absorbed(st, v.get(k + 1))? {
                continue;
            }
            // A scalar fill the next loop's register accumulation starts from.
            if self.kernel.is_some() && self.fill_absorbed(st, v.get(k + 1))? {
                continue;
            }
            self.write_stmt(st)?;
            if let Some((f, _)) = self.fill_start.take() {
                return Err(CodegenError::Invalid {
                    message: format!(
                        "internal: the fill before loop `{}` was left out, but that loop did \
                         not start its registers from it",
                        self.func.vars[f].name
                    ),
                    span: st.span(),
                });
            }
        }
        Ok(())
    }

    fn write_for(&mut self, f: &For) -> Res<()> {
        if self.target == Target::Cuda {
            return self.write_cuda_loop(f);
        }
        let plain = f.annotations.get(SIMD_REDUCTION_ATTR).is_none()
            && f.annotations.get(JAM_ATTR).is_none();
        let ws = if plain && self.has_workspaces {
            self.loop_workspaces(f)?
        } else {
            Vec::new()
        };
        if ws.is_empty() {
            return self.write_for_inner(f);
        }
        if f.kind == ForKind::Parallel {
            // Allocated inside the loop's `omp parallel` region, one per thread.
            self.region_ws = ws;
            let r = self.write_for_inner(f);
            self.region_ws.clear();
            return r;
        }
        self.line("{");
        self.indent += 1;
        let mark = self.open_workspaces(&ws)?;
        let r = self.write_for_inner(f);
        self.close_workspaces(mark);
        self.indent -= 1;
        self.line("}");
        r
    }

    fn write_for_inner(&mut self, f: &For) -> Res<()> {
        if !f.annotations.is_empty() && half::loop_stores_half(self.func, f) {
            // The SIMD forms accumulate in the stored element's type: the plain loop (see
            // `half`), with only the parallel schedule kept.
            let mut g = f.clone();
            g.annotations.0.retain(|(k, v)| {
                (k == SCHEDULE_ATTR && !matches!(v, AttrValue::Str(s) if s == NNZ_BALANCED))
                    || k == "chunk"
            });
            return self.write_loop(&g, None);
        }
        if let Some(ann) = f.annotations.get(SIMD_REDUCTION_ATTR) {
            return self.write_simd_reduction(f, ann, None, None);
        }
        if let Some((inner, ann)) = self.reduction_across(f) {
            return self.write_simd_reduction(inner, ann, None, Some(f));
        }
        if let Some(ann) = f.annotations.get(JAM_ATTR) {
            return self.write_jam(f, ann);
        }
        let balanced = matches!(
            f.annotations.get(SCHEDULE_ATTR),
            Some(AttrValue::Str(s)) if s == NNZ_BALANCED
        );
        if balanced {
            return self.write_nnz_balanced(f);
        }
        if f.annotations.get(INDPTR_ATTR).is_some() {
            return Err(self.unsupported(
                "loop annotation `indptr`",
                "it only goes with `\"schedule\": \"nnz_balanced\"`",
            ));
        }
        self.write_loop(f, None)
    }

    /// The dtype, C type and name of loop `f`'s variable (an integer).
    fn loop_var_type(&self, f: &For) -> Res<(DType, &'static str, String)> {
        let vdt = self
            .func
            .vars
            .get(f.var)
            .map(|v| v.dtype)
            .unwrap_or(DType::I32);
        if !vdt.is_integer() {
            return Err(self.invalid(format!(
                "loop variable has type {vdt}; loops need an integer"
            )));
        }
        let ct = self.ctype(vdt, "loop variable")?;
        Ok((vdt, ct, self.var_names[f.var.index()].clone()))
    }

    /// A loop; `pragma_override` replaces the pragma of the loop's kind.
    fn write_loop(&mut self, f: &For, pragma_override: Option<String>) -> Res<()> {
        if pragma_override.is_none() && self.try_write_vector_loop(f)? {
            return Ok(());
        }
        let (vdt, ct, vname) = self.loop_var_type(f)?;
        let overridden = pragma_override.is_some();
        let pragma = match f.kind {
            _ if overridden => pragma_override,
            ForKind::Serial => None,
            ForKind::Parallel => Some(self.parallel_pragma(f)?),
            ForKind::Vectorized => Some("omp simd".to_string()),
            ForKind::Unrolled => {
                let n = const_int(&f.extent).map(|n| n.clamp(1, 65534)).unwrap_or(8);
                Some(format!("GCC unroll {n}"))
            }
            ForKind::ThreadBinding => {
                return Err(CodegenError::ThreadBinding {
                    var: self.func.vars[f.var].name.clone(),
                    thread: f.thread.clone().unwrap_or_default(),
                    span: f.span,
                })
            }
        };
        let (start, end) = self.loop_range(f, vdt, ct, &vname)?;
        let region_ws = if f.kind == ForKind::Parallel && !overridden {
            std::mem::take(&mut self.region_ws)
        } else {
            Vec::new()
        };
        let mut region = None;
        match pragma {
            Some(p) if !region_ws.is_empty() => {
                // `omp parallel` + per-thread workspaces + `omp for`.
                self.pragma("omp parallel");
                self.line("{");
                self.indent += 1;
                region = Some(self.open_workspaces(&region_ws)?);
                let p = p
                    .strip_prefix("omp parallel for")
                    .map_or(p.clone(), |rest| format!("omp for{rest}"));
                self.pragma(&p);
            }
            Some(p) => self.pragma(&p),
            None => {}
        }
        let v = self.bind(f.var)?;
        self.line(&format!("for ({ct} {v} = {start}; {v} < {end}; ++{v}) {{"));
        self.indent += 1;
        let r = match f.annotations.get(PREFETCH_ATTR) {
            Some(ann) => self.write_prefetch(f, ann, &v, &end),
            None => Ok(()),
        };
        let r = r.and_then(|()| self.write_stmt(&f.body));
        self.indent -= 1;
        self.unbind(f.var);
        r?;
        self.line("}");
        if let Some(mark) = region {
            self.close_workspaces(mark);
            self.indent -= 1;
            self.line("}");
        }
        Ok(())
    }

    /// The start and end texts of loop `f` (non-constant ones in `const` locals written here).
    fn loop_range(&mut self, f: &For, vdt: DType, ct: &str, vname: &str) -> Res<(String, String)> {
        let min = match const_int(&f.min) {
            Some(c) => Ok(c),
            None => {
                let (s, dt) = self.expr(&f.min)?;
                let s = cast(s, dt, vdt);
                let local = self.namer.fresh(&format!("{vname}_min"));
                self.line(&format!("const {ct} {local} = {};", strip_parens(&s)));
                Err(local)
            }
        };
        let ext = match const_int(&f.extent) {
            Some(c) => Ok(c),
            None => {
                let (s, dt) = self.expr(&f.extent)?;
                let s = cast(s, dt, vdt);
                if let Expr::Var(_) = f.extent {
                    Err(s)
                } else {
                    let local = self.namer.fresh(&format!("{vname}_ext"));
                    self.line(&format!("const {ct} {local} = {};", strip_parens(&s)));
                    Err(local)
                }
            }
        };
        let end = match (&min, &ext) {
            (Ok(a), Ok(b)) => int_literal(a.saturating_add(*b), vdt),
            (Ok(0), Err(e)) => e.clone(),
            (Ok(a), Err(e)) => format!("{} + {e}", int_literal(*a, vdt)),
            (Err(m), Ok(b)) => format!("{m} + {}", int_literal(*b, vdt)),
            (Err(m), Err(e)) => format!("{m} + {e}"),
        };
        let start = match &min {
            Ok(a) => int_literal(*a, vdt),
            Err(m) => m.clone(),
        };
        Ok((start, end))
    }

    fn write_block(&mut self, b: &Block) -> Res<()> {
        self.line(&format!("{{ /* block {} */", comment_safe(&b.name)));
        self.indent += 1;
        let mut bound = Vec::new();
        let r = self.write_block_inner(b, &mut bound);
        for v in bound {
            self.unbind(v);
        }
        self.end_scope(&b.alloc_buffers);
        r?;
        self.indent -= 1;
        self.line("}");
        Ok(())
    }

    fn write_block_inner(&mut self, b: &Block, bound: &mut Vec<VarId>) -> Res<()> {
        // A predicate over the loops alone is tested first: bindings may read arrays (a row
        // found by binary search) at positions that exist only where the predicate holds.
        let iter_vars: Vec<VarId> = b.iters.iter().map(|it| it.var).collect();
        let mut early = false;
        if let Some(p) = &b.predicate {
            let mut uses_iter = false;
            p.visit(&mut |x| uses_iter |= matches!(x, Expr::Var(v) if iter_vars.contains(v)));
            if !uses_iter {
                let (c, _) = self.expr(p)?;
                self.line(&format!("if ({}) {{", strip_parens(&c)));
                self.indent += 1;
                early = true;
            }
        }
        let div = match &b.predicate {
            Some(p) if early => self.enter_divergence(p),
            _ => gpu::Divergence::default(),
        };
        let r = self.write_block_bindings(b, bound, early);
        self.leave_divergence(div);
        if early {
            self.indent -= 1;
            self.line("}");
        }
        r
    }

    fn write_block_bindings(&mut self, b: &Block, bound: &mut Vec<VarId>, early: bool) -> Res<()> {
        // Bindings are evaluated before any iterator is bound, as the interpreter does.
        let mut values = Vec::with_capacity(b.iters.len());
        for it in &b.iters {
            let dt = self
                .func
                .vars
                .get(it.var)
                .map(|v| v.dtype)
                .unwrap_or(DType::I32);
            let (s, sdt) = self.expr(&it.binding)?;
            values.push((cast(s, sdt, dt), dt));
        }
        let mut at_min = Vec::new();
        for (it, (s, dt)) in b.iters.iter().zip(values) {
            let ct = self.ctype(dt, "block iterator")?;
            let v = self.bind(it.var)?;
            bound.push(it.var);
            self.note_binding(it.var, &it.binding);
            self.line(&format!("const {ct} {v} = {};", strip_parens(&s)));
            if it.kind == IterKind::Reduce {
                let (m, mdt) = self.expr(&it.min)?;
                at_min.push(format!("{v} == {}", cast(m, mdt, dt)));
            }
        }
        let mut opened = false;
        let mut late_div = gpu::Divergence::default();
        if let Some(p) = b.predicate.as_ref().filter(|_| !early) {
            late_div = self.enter_divergence(p);
            let (c, _) = self.expr(p)?;
            self.line(&format!("if ({}) {{", strip_parens(&c)));
            self.indent += 1;
            opened = true;
        }
        let (own, reused) = self.block_allocs(b);
        let scope: Vec<&Stmt> = b.init.iter().chain([&b.body]).collect();
        let heap = self.write_allocs(&own, &scope)?;
        self.write_guarded_reusing(&heap, &reused, |w| {
            if let Some(init) = &b.init {
                if at_min.is_empty() {
                    w.write_stmt(init)?;
                } else {
                    w.line(&format!("if ({}) {{", at_min.join(" && ")));
                    w.indent += 1;
                    w.write_stmt(init)?;
                    w.indent -= 1;
                    w.line("}");
                }
            }
            w.write_stmt(&b.body)
        })?;
        self.leave_divergence(late_div);
        if opened {
            self.indent -= 1;
            self.line("}");
        }
        Ok(())
    }

    fn write_store(&mut self, st: &Store) -> Res<()> {
        let dt = self.buf_dtype(st.buffer);
        let (v, vdt) = self.expr(&st.value)?;
        // A vector loop's narrowing store rounds a `float` vector itself (see `half`).
        let narrowing = (half::is_half(dt) && vdt == DType::F32).then(|| v.clone());
        let v = cast(v, vdt, dt);
        if let Some(acc) = &self.simd_acc {
            if acc.buffer == st.buffer && acc.indices == st.indices {
                let acc = acc.name.clone();
                self.line(&format!("{acc} = {};", strip_parens(&v)));
                return Ok(());
            }
        }
        let vector_value = narrowing.as_deref().unwrap_or(&v);
        if self.vector_store(
            st.buffer,
            &st.indices,
            &st.value,
            strip_parens(vector_value),
        )? {
            return Ok(());
        }
        let off = self.offset(st.buffer, &st.indices)?;
        let name = self.buf_name(st.buffer)?.to_string();
        let text = format!(
            "{name}[{off}] = {};",
            half::store_bits(dt, strip_parens(&v))
        );
        // CUDA: a store of a shared or global element that threads along unbound block
        // dimensions would all repeat is made by one of them.
        let local = self.is_per_thread(st.buffer);
        if self.target == Target::Cuda && !local {
            self.guarded_line(&text, false);
        } else {
            self.line(&text);
        }
        Ok(())
    }

    fn write_if(&mut self, i: &IfThenElse, chained: bool) -> Res<()> {
        let div = self.enter_divergence(&i.cond);
        let r = self.write_if_inner(i, chained);
        self.leave_divergence(div);
        r
    }

    fn write_if_inner(&mut self, i: &IfThenElse, chained: bool) -> Res<()> {
        let (c, _) = self.expr(&i.cond)?;
        let head = format!("if ({}) {{", strip_parens(&c));
        if chained {
            self.line(&format!("}} else {head}"));
        } else {
            self.line(&head);
        }
        self.indent += 1;
        self.write_stmt(&i.then_case)?;
        self.indent -= 1;
        match &i.else_case {
            Some(Stmt::If(inner)) => return self.write_if(inner, true),
            Some(e) => {
                self.line("} else {");
                self.indent += 1;
                self.write_stmt(e)?;
                self.indent -= 1;
            }
            None => {}
        }
        self.line("}");
        Ok(())
    }

    /// `while (cond) { body }`. On the GPU its condition is treated like an `if`'s: threads that
    /// leave the loop at different times diverge, so no barrier is placed inside it.
    fn write_while(&mut self, w: &While) -> Res<()> {
        let div = self.enter_divergence(&w.cond);
        let r = (|| {
            let (c, _) = self.expr(&w.cond)?;
            self.line(&format!("while ({}) {{", strip_parens(&c)));
            self.indent += 1;
            self.write_stmt(&w.body)?;
            self.indent -= 1;
            self.line("}");
            Ok(())
        })();
        self.leave_divergence(div);
        r
    }

    fn write_let(&mut self, l: &LetStmt) -> Res<()> {
        let dt = self
            .func
            .vars
            .get(l.var)
            .map(|v| v.dtype)
            .unwrap_or(DType::I32);
        let ct = self.ctype(dt, "let variable")?;
        let (s, sdt) = self.expr(&l.value)?;
        self.line("{");
        self.indent += 1;
        let v = self.bind(l.var)?;
        self.note_binding(l.var, &l.value);
        self.line(&format!(
            "const {ct} {v} = {};",
            strip_parens(&cast(s, sdt, dt))
        ));
        let r = self.write_stmt(&l.body);
        self.unbind(l.var);
        r?;
        self.indent -= 1;
        self.line("}");
        Ok(())
    }

    // ------------------------------------------------------------------ expressions
}

/// The value of a constant integer expression (literals and casts of literals).
fn const_int(e: &Expr) -> Option<i64> {
    match e {
        Expr::Int(v, dt) if dt.is_integer() => {
            // Only values that survive their dtype unchanged are reported.
            let w = match dt {
                DType::I8 => *v as i8 as i64,
                DType::I16 => *v as i16 as i64,
                DType::I32 => *v as i32 as i64,
                DType::U8 => *v as u8 as i64,
                DType::U16 => *v as u16 as i64,
                DType::U32 => *v as u32 as i64,
                _ => *v,
            };
            (w == *v).then_some(*v)
        }
        // `T.Cast("int8", 2)`: a loop over a narrow coordinate type.
        Expr::Cast(dt, inner) if dt.is_integer() => {
            const_int(inner).and_then(|v| const_int(&Expr::Int(v, *dt)))
        }
        _ => None,
    }
}

/// Removes one pair of parentheses enclosing the whole text.
fn strip_parens(s: &str) -> &str {
    let b = s.as_bytes();
    if b.len() < 2 || b[0] != b'(' || b[b.len() - 1] != b')' {
        return s;
    }
    let mut depth = 0i32;
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 && i + 1 != b.len() {
                    return s;
                }
            }
            _ => {}
        }
    }
    &s[1..s.len() - 1]
}

/// `s` as an operand of `+`: without outer parentheses where that keeps the meaning (its top
/// level has no operator binding more loosely than `+`: comparison, bitwise, logical,
/// conditional, assignment), in parentheses where it needs them.
fn sum_operand(s: &str) -> std::borrow::Cow<'_, str> {
    let inner = strip_parens(s);
    let mut depth = 0i32;
    for c in inner.bytes() {
        match c {
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth -= 1,
            b'?' | b'<' | b'>' | b'=' | b'&' | b'|' | b'^' | b',' if depth == 0 => {
                return format!("({inner})").into();
            }
            _ => {}
        }
    }
    inner.into()
}

/// Text safe inside a `/* */` comment.
fn comment_safe(s: &str) -> String {
    s.replace("*/", "* /").replace(['\n', '\r'], " ")
}

/// Whether `e` reads any of the variables `vars`.
fn mentions(e: &Expr, vars: &[VarId]) -> bool {
    e.mentions_any(vars)
}
