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
};

use crate::{CModule, CParam, CParamKind, CodegenError};

mod vector;

type Res<T> = Result<T, CodegenError>;

/// The largest number of elements an allocation of constant size may have to live on the stack.
pub const STACK_LIMIT: i64 = 4096;

/// Default OpenMP schedule of `ForKind::Parallel` loops.
const DEFAULT_SCHEDULE: &str = "dynamic";
const DEFAULT_CHUNK: i64 = 64;

/// Emits the C source of a stage III function; see [`crate::emit_c`].
pub fn emit_c(func: &PrimFunc) -> Res<CModule> {
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
    let mut w = Writer::new(func);
    w.write_module()
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

/// A step on the path from a `prefetch` loop's body to the load it prefetches.
enum PrefetchHop<'a> {
    For(&'a For),
    Block(&'a Block),
}

/// The indices of the first load of `buffer` reached through sequences, blocks without
/// predicates and loops of constant positive extent (recorded in `chain`), in the stored
/// values and indices; `None` when there is none on such a path.
fn find_prefetch_load<'a>(
    s: &'a Stmt,
    buffer: BufferId,
    any_extent: bool,
    chain: &mut Vec<PrefetchHop<'a>>,
) -> Option<Vec<Expr>> {
    match s {
        Stmt::Seq(v) => v
            .iter()
            .find_map(|x| find_prefetch_load(x, buffer, any_extent, chain)),
        Stmt::Block(b) if b.predicate.is_none() => {
            chain.push(PrefetchHop::Block(b));
            let r = find_prefetch_load(&b.body, buffer, any_extent, chain);
            if r.is_none() {
                chain.pop();
            }
            r
        }
        Stmt::For(l) if any_extent || const_int(&l.extent).is_some_and(|n| n > 0) => {
            chain.push(PrefetchHop::For(l));
            let r = find_prefetch_load(&l.body, buffer, any_extent, chain);
            if r.is_none() {
                chain.pop();
            }
            r
        }
        Stmt::Store(st) => {
            let mut found = None;
            let mut look = |e: &Expr| {
                e.visit(&mut |z| {
                    if let Expr::Load { buffer: b, indices } = z {
                        if *b == buffer && found.is_none() {
                            found = Some(indices.clone());
                        }
                    }
                })
            };
            look(&st.value);
            st.indices.iter().for_each(&mut look);
            found
        }
        _ => None,
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

/// The statement itself, or the single statement of a one-element sequence.
fn single_stmt(s: &Stmt) -> &Stmt {
    match s {
        Stmt::Seq(v) if v.len() == 1 => single_stmt(&v[0]),
        other => other,
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
        DType::F16 | DType::BF16 | DType::Handle => return None,
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

/// Words a generated identifier must never be: C keywords, the standard names the generated
/// source uses, and the ABI's names.
const RESERVED: &[&str] = &[
    "auto",
    "break",
    "case",
    "char",
    "const",
    "continue",
    "default",
    "do",
    "double",
    "else",
    "enum",
    "extern",
    "float",
    "for",
    "goto",
    "if",
    "inline",
    "int",
    "long",
    "register",
    "restrict",
    "return",
    "short",
    "signed",
    "sizeof",
    "static",
    "struct",
    "switch",
    "typedef",
    "union",
    "unsigned",
    "void",
    "volatile",
    "while",
    "bool",
    "true",
    "false",
    "main",
    "errno",
    "int8_t",
    "int16_t",
    "int32_t",
    "int64_t",
    "uint8_t",
    "uint16_t",
    "uint32_t",
    "uint64_t",
    "size_t",
    "NULL",
    "INFINITY",
    "NAN",
    "FLT_MAX",
    "DBL_MAX",
    "INT8_MIN",
    "INT8_MAX",
    "INT16_MIN",
    "INT16_MAX",
    "INT32_MIN",
    "INT32_MAX",
    "INT64_MIN",
    "INT64_MAX",
    "UINT8_MAX",
    "UINT16_MAX",
    "UINT32_MAX",
    "UINT64_MAX",
    "INT64_C",
    "UINT64_C",
    "calloc",
    "malloc",
    "free",
    "memset",
    "abs",
    "exp",
    "expf",
    "exp2",
    "exp2f",
    "log",
    "logf",
    "log2",
    "log2f",
    "sqrt",
    "sqrtf",
    "tanh",
    "tanhf",
    "fabs",
    "fabsf",
    "pow",
    "powf",
    "floor",
    "floorf",
    "ceil",
    "ceilf",
    "round",
    "roundf",
    "sin",
    "sinf",
    "cos",
    "cosf",
    "erf",
    "erff",
    "fmin",
    "fminf",
    "fmax",
    "fmaxf",
    "fmod",
    "fmodf",
    "args",
    "nargs",
    "omp_set_num_threads",
    "sparsetir_arg",
];

/// Makes `name` a valid, non-reserved C identifier.
fn sanitize(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if s.is_empty() {
        s.push('v');
    }
    let first = s.as_bytes()[0];
    if first.is_ascii_digit()
        || s.starts_with("__")
        || (first == b'_' && s.len() > 1 && s.as_bytes()[1].is_ascii_uppercase())
    {
        s.insert_str(0, "v_");
    }
    if RESERVED.contains(&s.as_str()) || s.starts_with("sptir_") || s.starts_with("sparsetir_") {
        s.push('_');
    }
    s
}

/// The entry symbol of a function named `name`.
pub fn entry_symbol(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if s == "set_num_threads" || s.is_empty() {
        s.push('_');
    }
    format!("sparsetir_{s}")
}

/// Hands out unique identifiers.
#[derive(Default)]
struct Namer {
    used: HashSet<String>,
}

impl Namer {
    fn fresh(&mut self, base: &str) -> String {
        let s = sanitize(base);
        if self.used.insert(s.clone()) {
            return s;
        }
        let mut k = 1;
        loop {
            let c = format!("{s}_{k}");
            if self.used.insert(c.clone()) {
                return c;
            }
            k += 1;
        }
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
    /// The lane vector types (element type, lanes) the lane reductions use.
    lane_types: BTreeSet<(DType, i64)>,
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
        let mut namer = Namer::default();
        namer.used.insert("sptir_status".to_string());
        let mut stored = HashSet::new();
        func.body.visit(&mut |s| {
            if let Stmt::Store(st) = s {
                stored.insert(st.buffer);
            }
            s.for_each_expr(|e| {
                e.visit(&mut |x| {
                    if let Expr::Call {
                        op: Intrinsic::AtomicAdd,
                        args,
                        ..
                    } = x
                    {
                        if let Some(Expr::Load { buffer, .. }) = args.first() {
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
            lane_types: BTreeSet::new(),
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

    fn ctype(&self, dt: DType, what: &str) -> Res<&'static str> {
        match dt {
            DType::F16 | DType::BF16 => Err(CodegenError::UnsupportedDType {
                dtype: dt,
                what: what.to_string(),
                span: self.span,
            }),
            DType::Handle => Err(self.unsupported(what, "a `handle` cannot be used as a value")),
            _ => Ok(c_type(dt).unwrap_or("void")),
        }
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

    fn buf_name(&self, b: BufferId) -> Res<&str> {
        match self.buf_names.get(b.index()) {
            Some(n) => Ok(n),
            None => Err(self.invalid(format!("buffer {b:?} is not declared"))),
        }
    }

    // ------------------------------------------------------------------ module

    /// Writes the whole source: prelude, kernel body function and entry point.
    pub fn write_module(&mut self) -> Res<CModule> {
        let func = self.func;
        let entry = entry_symbol(&func.name);
        // Parameters.
        let mut params = Vec::new();
        let mut c_params = Vec::new();
        let mut unpack = Vec::new();
        let mut handle_users: HashMap<VarId, Vec<BufferId>> = HashMap::new();
        for &b in &func.buffer_decls {
            if let Some(buf) = func.buffers.get(b) {
                if let BufferDecl::Match { data } = buf.decl {
                    handle_users.entry(data).or_default().push(b);
                }
            }
        }
        // Buffers sharing one handle each get a pointer, derived from the first one's parameter.
        let mut aliases: Vec<(BufferId, BufferId, bool)> = Vec::new();
        for (k, &p) in func.params.iter().enumerate() {
            let Some(var) = func.vars.get(p) else {
                return Err(self.invalid(format!("parameter {p:?} is not declared")));
            };
            self.span = func.span;
            if var.dtype == DType::Handle {
                let users = handle_users.get(&p).cloned().unwrap_or_default();
                let Some(&first) = users.first() else {
                    let name = self.namer.fresh(&var.name);
                    params.push(CParam {
                        name: var.name.clone(),
                        kind: CParamKind::Array {
                            elem: DType::Handle,
                        },
                    });
                    c_params.push(format!("void* {name}"));
                    unpack.push(format!("args[{k}].ptr"));
                    continue;
                };
                let elem = func.buffers[first].dtype;
                self.span = func.buffers[first].span;
                let ct = self.ctype(elem, &format!("buffer `{}`", func.buffers[first].name))?;
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
                let is_const = users.iter().all(|u| !self.stored.contains(u));
                for &u in &users[1..] {
                    aliases.push((u, first, is_const));
                }
                let restrict = if users.len() == 1 { " restrict" } else { "" };
                let cst = if is_const { "const " } else { "" };
                let name = self.buf_name(first)?.to_string();
                params.push(CParam {
                    name: var.name.clone(),
                    kind: CParamKind::Array { elem },
                });
                c_params.push(format!("{cst}{ct}*{restrict} {name}"));
                unpack.push(format!("({cst}{ct}*)args[{k}].ptr"));
            } else {
                let dt = var.dtype;
                let ct = self.ctype(dt, &format!("parameter `{}`", var.name))?;
                let name = self.bind(p)?;
                params.push(CParam {
                    name: var.name.clone(),
                    kind: CParamKind::Scalar(dt),
                });
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
        let heap = self.write_allocs(&allocs)?;
        let body = &func.body;
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
        let source = head + &self.out;
        Ok(CModule {
            source,
            entry,
            params,
        })
    }

    /// Runs `inner` inside `if (every heap pointer is non-null) { ... } else { status = -2 }`
    /// followed by the `free` calls (no guard when `heap` is empty).
    fn write_guarded(
        &mut self,
        heap: &[String],
        inner: impl FnOnce(&mut Self) -> Res<()>,
    ) -> Res<()> {
        if heap.is_empty() {
            return inner(self);
        }
        let cond = heap
            .iter()
            .map(|p| format!("{p} != NULL"))
            .collect::<Vec<_>>()
            .join(" && ");
        self.line(&format!("if ({cond}) {{"));
        self.indent += 1;
        inner(self)?;
        self.indent -= 1;
        self.line("} else {");
        self.line("    #pragma omp atomic write");
        self.line("    sptir_status = -2;");
        self.line("}");
        for p in heap.iter().rev() {
            self.line(&format!("free({p});"));
        }
        Ok(())
    }

    // ------------------------------------------------------------------ buffers

    /// The extents of a dense buffer (error for sparse buffers).
    fn dense_extents(&self, b: BufferId) -> Res<&'f [Expr]> {
        let buf = &self.func.buffers[b];
        match &buf.shape {
            BufferShape::Dense(d) => Ok(d),
            BufferShape::Sparse(_) => Err(self.unsupported(
                &format!("sparse buffer `{}`", buf.name),
                "sparse buffers must be lowered to dense arrays first (stage III)",
            )),
        }
    }

    /// An extent or stride as `int64_t` C text, or its constant value.
    fn size_expr(&mut self, e: &Expr, what: &str) -> Res<Result<i64, String>> {
        if let Some(c) = const_int(e) {
            return Ok(Ok(c));
        }
        let (s, dt) = self.expr(e)?;
        if !(dt.is_integer() || dt.is_bool()) {
            return Err(self.invalid(format!("{what} must be an integer, got {dt}")));
        }
        Ok(Err(format!("(int64_t){s}")))
    }

    /// Computes the strides of dense buffer `b` (hoisting non-constant ones into `const int64_t`
    /// locals) and marks the buffer in scope. Strides follow the interpreter: explicit strides
    /// give the innermost dimensions, the outer ones are compact over them.
    fn declare_strides(&mut self, b: BufferId) -> Res<()> {
        let extents = self.dense_extents(b)?;
        let buf = &self.func.buffers[b];
        let n = extents.len();
        let given = &buf.strides;
        if given.len() > n {
            return Err(self.invalid(format!(
                "buffer `{}`: {} strides for {n} dimension(s)",
                buf.name,
                given.len()
            )));
        }
        let mut out: Vec<Option<Result<i64, String>>> = vec![None; n];
        let k = given.len();
        for (d, s) in given.iter().enumerate() {
            out[n - k + d] = Some(self.size_expr(s, "a stride")?);
        }
        if n > 0 && k == 0 {
            out[n - 1] = Some(Ok(1));
        }
        let first_given = if k == 0 { n.saturating_sub(1) } else { n - k };
        for d in (0..first_given).rev() {
            let inner = out[d + 1].clone().unwrap_or(Ok(1));
            let ext = self.size_expr(&extents[d + 1], "an extent")?;
            out[d] = Some(match (inner, ext) {
                (Ok(a), Ok(b)) => match a.checked_mul(b) {
                    Some(v) => Ok(v),
                    None => {
                        return Err(self.invalid(format!("buffer `{}`: stride overflow", buf.name)))
                    }
                },
                (Ok(1), Err(e)) | (Err(e), Ok(1)) => Err(e),
                (Ok(a), Err(e)) | (Err(e), Ok(a)) => Err(format!("{e} * {a}")),
                (Err(a), Err(e)) => Err(format!("{a} * {e}")),
            });
        }
        let bname = self.buf_name(b)?.to_string();
        let mut strides = Vec::with_capacity(n);
        for (d, s) in out.into_iter().enumerate() {
            strides.push(match s.unwrap_or(Ok(1)) {
                Ok(c) => Stride::Const(c),
                Err(text) => {
                    let local = self.namer.fresh(&format!("{bname}_stride{d}"));
                    self.line(&format!("const int64_t {local} = {text};"));
                    Stride::Local(local)
                }
            });
        }
        self.bufs[b.index()] = Some(BufInfo { strides });
        Ok(())
    }

    /// The number of elements an allocation of `b` needs (values + extra storage).
    fn alloc_size(&mut self, b: BufferId) -> Res<Result<i64, String>> {
        let extents = self.dense_extents(b)?;
        let buf = &self.func.buffers[b];
        let mut exts = Vec::with_capacity(extents.len());
        for e in extents {
            exts.push(self.size_expr(e, "an extent")?);
        }
        let extra = match &buf.extra_storage {
            Some(e) => Some(self.size_expr(e, "extra_storage")?),
            None => None,
        };
        let strides = self.bufs[b.index()]
            .as_ref()
            .map(|i| i.strides.clone())
            .unwrap_or_default();
        let compact = buf.strides.is_empty();
        let all_const = exts.iter().all(|e| e.is_ok())
            && strides.iter().all(|s| matches!(s, Stride::Const(_)))
            && !matches!(extra, Some(Err(_)));
        if all_const {
            let mut size: i64 = if exts.iter().any(|e| matches!(e, Ok(0))) {
                0
            } else {
                1
            };
            if size == 1 {
                for (e, s) in exts.iter().zip(&strides) {
                    let (Ok(e), Stride::Const(s)) = (e, s) else {
                        continue;
                    };
                    size = (e - 1)
                        .checked_mul(*s)
                        .and_then(|x| x.checked_add(size))
                        .ok_or_else(|| {
                            self.invalid(format!("buffer `{}` is too large", buf.name))
                        })?;
                }
            }
            if let Some(Ok(x)) = extra {
                size = size
                    .checked_add(x)
                    .ok_or_else(|| self.invalid("allocation too large"))?;
            }
            return Ok(Ok(size));
        }
        let text = |e: &Result<i64, String>| match e {
            Ok(c) => format!("INT64_C({c})"),
            Err(s) => s.clone(),
        };
        let mut size = if compact {
            exts.iter().map(text).collect::<Vec<_>>().join(" * ")
        } else {
            let mut terms = vec!["1".to_string()];
            let mut nonzero = Vec::new();
            for (e, s) in exts.iter().zip(&strides) {
                let st = match s {
                    Stride::Const(c) => format!("INT64_C({c})"),
                    Stride::Local(l) => l.clone(),
                };
                terms.push(format!("({} - 1) * {st}", text(e)));
                nonzero.push(format!("{} > 0", text(e)));
            }
            format!("({} ? {} : 0)", nonzero.join(" && "), terms.join(" + "))
        };
        if size.is_empty() {
            size = "1".to_string();
        }
        if let Some(e) = extra {
            size = format!("{size} + {}", text(&e));
        }
        Ok(Err(size))
    }

    /// Declares the storage of allocated buffers at the current point; returns the names of the
    /// heap pointers (to guard and free).
    fn write_allocs(&mut self, bufs: &[BufferId]) -> Res<Vec<String>> {
        let mut heap = Vec::new();
        for &b in bufs {
            let buf = &self.func.buffers[b];
            let saved = self.span;
            if !buf.span.is_unknown() {
                self.span = buf.span;
            }
            let ct = self.ctype(buf.dtype, &format!("buffer `{}`", buf.name))?;
            self.declare_strides(b)?;
            let kind = match self.alloc_size(b)? {
                Ok(n) if n <= STACK_LIMIT => AllocKind::Stack(n.max(1)),
                Ok(n) => AllocKind::Heap(format!("INT64_C({n})")),
                Err(s) => AllocKind::Heap(s),
            };
            let name = self.buf_name(b)?.to_string();
            match kind {
                AllocKind::Stack(n) => self.line(&format!("{ct} {name}[{n}] = {{0}};")),
                AllocKind::Heap(size) => {
                    let size_name = self.namer.fresh(&format!("{name}_size"));
                    self.line(&format!("const int64_t {size_name} = {size};"));
                    self.line(&format!(
                        "{ct}* {name} = ({ct}*)calloc({size_name} > 0 ? (size_t){size_name} : 1, sizeof({ct}));"
                    ));
                    heap.push(name);
                }
            }
            self.span = saved;
        }
        Ok(heap)
    }

    fn end_scope(&mut self, bufs: &[BufferId]) {
        for b in bufs {
            self.bufs[b.index()] = None;
        }
    }

    /// The flat element offset of `b[indices]`: a plain index for compact 1-D buffers, otherwise
    /// a sum of `int64_t` products with the strides.
    /// The number of elements of dense buffer `b`, as a C `int64_t` expression.
    fn flat_size(&mut self, b: BufferId) -> Res<String> {
        let name = self.buf_name(b)?.to_string();
        let shape = match self.func.buffers.get(b).map(|x| &x.shape) {
            Some(BufferShape::Dense(dims)) => dims.clone(),
            _ => {
                return Err(self.invalid(format!(
                    "buffer `{name}` has no dense shape to bound a read with"
                )))
            }
        };
        let mut terms = Vec::new();
        for d in &shape {
            let (t, _) = self.expr(d)?;
            terms.push(format!("(int64_t){t}"));
        }
        if terms.is_empty() {
            return Ok("(int64_t)1".to_string());
        }
        Ok(format!("({})", terms.join(" * ")))
    }

    fn offset(&mut self, b: BufferId, indices: &[Expr]) -> Res<String> {
        let name = self.buf_name(b)?.to_string();
        let Some(info) = self.bufs.get(b.index()).cloned().flatten() else {
            return Err(self.invalid(format!("buffer `{name}` is used outside its scope")));
        };
        if indices.len() != info.strides.len() {
            return Err(self.invalid(format!(
                "buffer `{name}` takes {} indices, got {}",
                info.strides.len(),
                indices.len()
            )));
        }
        let mut idx = Vec::with_capacity(indices.len());
        for e in indices {
            let (s, dt) = self.expr(e)?;
            if !(dt.is_integer() || dt.is_bool()) {
                return Err(self.invalid(format!("an index of `{name}` has type {dt}")));
            }
            idx.push(s);
        }
        if idx.len() == 1 && matches!(info.strides[0], Stride::Const(1)) {
            return Ok(strip_parens(&idx[0]).to_string());
        }
        let mut terms = Vec::new();
        for (i, s) in idx.iter().zip(&info.strides) {
            match s {
                Stride::Const(0) => {}
                Stride::Const(1) => terms.push(format!("(int64_t){i}")),
                Stride::Const(c) => terms.push(format!("(int64_t){i} * {c}")),
                Stride::Local(l) => terms.push(format!("(int64_t){i} * {l}")),
            }
        }
        if terms.is_empty() {
            return Ok("0".to_string());
        }
        Ok(terms.join(" + "))
    }

    // ------------------------------------------------------------------ statements

    fn write_stmt(&mut self, s: &Stmt) -> Res<()> {
        let outer = self.span;
        if !s.span().is_unknown() {
            self.span = s.span();
        }
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
            Stmt::Evaluate(e) => self.write_evaluate(e),
            Stmt::Allocate(_) => self.write_seq(std::slice::from_ref(s)),
            Stmt::Let(l) => self.write_let(l),
            Stmt::AssumeBufferDomain { buffer, .. } => {
                let name = self.buf_name(*buffer)?.to_string();
                self.line(&format!("/* assume_buffer_domain({name}) */"));
                Ok(())
            }
        };
        self.span = outer;
        r
    }

    /// A sequence; an `Allocate` opens a scope holding the rest of the sequence.
    fn write_seq(&mut self, v: &[Stmt]) -> Res<()> {
        for (k, st) in v.iter().enumerate() {
            if let Stmt::Allocate(b) = st {
                self.line("{");
                self.indent += 1;
                let heap = self.write_allocs(&[*b])?;
                let rest = &v[k + 1..];
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
            self.write_stmt(st)?;
        }
        Ok(())
    }

    fn write_for(&mut self, f: &For) -> Res<()> {
        if let Some(ann) = f.annotations.get(SIMD_REDUCTION_ATTR) {
            return self.write_simd_reduction(f, ann, None);
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

    /// A parallel loop over CSR rows annotated `{"schedule": "nnz_balanced", "indptr": P}`:
    /// one `omp parallel` region in which thread `t` of `T` takes the contiguous rows
    /// `[cut(t), cut(t + 1))`, where `cut(t)` is the first row `r` of the loop's range with
    /// `P[r] >= P[start] + t * nnz / T` (binary search; `nnz = P[end] - P[start]`,
    /// `cut(0) = start`, `cut(T) = end`), so every thread gets about the same number of stored
    /// elements. The indptr buffer must be a 1-D integer buffer whose extent provably covers
    /// `end + 1` entries.
    fn write_nnz_balanced(&mut self, f: &For) -> Res<()> {
        const WHAT: &str = "loop annotation `schedule: nnz_balanced`";
        if f.kind != ForKind::Parallel {
            return Err(self.unsupported(
                WHAT,
                format!("the loop is {}, not parallel", f.kind.script_name()),
            ));
        }
        if let Some(c) = f.annotations.get("chunk") {
            return Err(self.unsupported(
                WHAT,
                format!("a `chunk` ({c:?}) has no meaning for nnz-balanced row ranges"),
            ));
        }
        let bname =
            match f.annotations.get(INDPTR_ATTR) {
                Some(AttrValue::Str(s)) => s.clone(),
                None => return Err(self.unsupported(
                    WHAT,
                    "needs the loop annotation `\"indptr\": \"BUFFER\"` naming the rows' indptr",
                )),
                Some(other) => {
                    return Err(self.unsupported(
                        WHAT,
                        format!("`indptr` must name a buffer (a string), got {other:?}"),
                    ))
                }
            };
        let found = self.func.buffers.iter().find_map(|(id, b)| {
            let c = self.buf_names.get(id.index())?;
            (b.name == bname || *c == bname || *c == format!("{bname}_data")).then_some(id)
        });
        let Some(indptr) = found else {
            return Err(self.unsupported(WHAT, format!("no buffer named `{bname}`")));
        };
        let buf = &self.func.buffers[indptr];
        let extent = match &buf.shape {
            BufferShape::Dense(d) if d.len() == 1 => d[0].clone(),
            _ => {
                return Err(self.unsupported(
                    WHAT,
                    format!("indptr buffer `{bname}` is not a one-dimensional dense buffer"),
                ))
            }
        };
        if !buf.dtype.is_integer() {
            return Err(self.unsupported(
                WHAT,
                format!(
                    "indptr buffer `{bname}` holds {} values, not integers",
                    buf.dtype
                ),
            ));
        }
        let Some(min) = const_int(&f.min).filter(|m| *m >= 0) else {
            return Err(self.unsupported(WHAT, "the loop must start at a constant row index >= 0"));
        };
        // extent(indptr) - (min + extent(loop)) - 1 must be a constant >= 0.
        let covered = match (affine(&extent), affine(&f.extent)) {
            (Some(e), Some(l)) => e.sub(&l).is_some_and(|d| {
                d.terms.iter().all(|(_, c)| *c == 0)
                    && d.constant
                        .checked_sub(min.saturating_add(1))
                        .is_some_and(|x| x >= 0)
            }),
            _ => false,
        };
        if !covered {
            return Err(self.unsupported(
                WHAT,
                format!(
                    "cannot show that indptr buffer `{bname}` has an entry for every row of the \
                     loop and the one after (its extent must be the loop's end + 1 or more)"
                ),
            ));
        }
        let (_, ct, vname) = self.loop_var_type(f)?;
        let (ext, edt) = self.expr(&f.extent)?;
        let ext = cast(ext, edt, DType::I64);
        let start = format!("{min}");
        let end_name = self.namer.fresh(&format!("{vname}_end"));
        let nt = self.namer.fresh(&format!("{vname}_nt"));
        let tid = self.namer.fresh(&format!("{vname}_tid"));
        let base = self.namer.fresh(&format!("{vname}_base"));
        let total = self.namer.fresh(&format!("{vname}_total"));
        let cut = self.namer.fresh(&format!("{vname}_cut"));
        let k = self.namer.fresh("k");
        let lo = self.namer.fresh("lo");
        let hi = self.namer.fresh("hi");
        let mid = self.namer.fresh("mid");
        let goal = self.namer.fresh("goal");
        let t = self.namer.fresh("t");
        // Reads of the indptr at a C index, through the buffer's own offset arithmetic.
        let read = |w: &mut Self, at: &str| -> Res<String> {
            w.let_subst.insert(f.var, at.to_string());
            let off = w.offset(indptr, &[Expr::Var(f.var)]);
            w.let_subst.remove(&f.var);
            let bn = w.buf_name(indptr)?.to_string();
            Ok(format!("(int64_t){bn}[{}]", off?))
        };
        let at_start = read(self, &start)?;
        let at_end = read(self, &end_name)?;
        let at_mid = read(self, &mid)?;
        let end_text = if min == 0 {
            strip_parens(&ext).to_string()
        } else {
            format!("{start} + {ext}")
        };
        self.line(&format!("const int64_t {end_name} = {end_text};"));
        self.line(&format!(
            "/* nnz-balanced rows [{start}, {end_name}): thread t takes the rows whose entries \
             start in [t * nnz / T, (t + 1) * nnz / T) of {bname} */"
        ));
        self.line(&format!("if ({end_name} > {start}) {{"));
        self.indent += 1;
        self.pragma("omp parallel");
        self.line("{");
        self.indent += 1;
        self.line(&format!("int64_t {nt} = 1, {tid} = 0;"));
        self.line("#ifdef _OPENMP");
        self.line(&format!("{nt} = (int64_t)omp_get_num_threads();"));
        self.line(&format!("{tid} = (int64_t)omp_get_thread_num();"));
        self.line("#endif");
        self.line(&format!("const int64_t {base} = {at_start};"));
        self.line(&format!("const int64_t {total} = {at_end} - {base};"));
        self.line(&format!("int64_t {cut}[2];"));
        self.line(&format!("for (int {k} = 0; {k} < 2; ++{k}) {{"));
        self.indent += 1;
        self.line(&format!("const int64_t {t} = {tid} + {k};"));
        self.line(&format!("int64_t {lo} = {start}, {hi} = {end_name};"));
        self.line(&format!("if ({t} >= {nt}) {{"));
        self.line(&format!("    {lo} = {end_name};"));
        self.line(&format!("}} else if ({t} > 0 && {total} > 0) {{"));
        self.indent += 1;
        // floor(t * total / T) without overflow: total = q * T + r.
        self.line(&format!(
            "const int64_t {goal} = {base} + ({total} / {nt}) * {t} + ({total} % {nt}) * {t} / {nt};"
        ));
        self.line(&format!("while ({lo} < {hi}) {{"));
        self.line(&format!(
            "    const int64_t {mid} = {lo} + ({hi} - {lo}) / 2;"
        ));
        self.line(&format!(
            "    if ({at_mid} < {goal}) {{ {lo} = {mid} + 1; }} else {{ {hi} = {mid}; }}"
        ));
        self.line("}");
        self.indent -= 1;
        self.line("}");
        self.line(&format!("{cut}[{k}] = {lo};"));
        self.indent -= 1;
        self.line("}");
        let v = self.bind(f.var)?;
        self.line(&format!(
            "for ({ct} {v} = ({ct}){cut}[0]; {v} < ({ct}){cut}[1]; ++{v}) {{"
        ));
        self.indent += 1;
        let hi_text = format!("(({ct}){cut}[1])");
        let r = match f.annotations.get(PREFETCH_ATTR) {
            Some(ann) => self.write_prefetch(f, ann, &v, &hi_text),
            None => Ok(()),
        };
        let r = r.and_then(|()| self.write_stmt(&f.body));
        self.indent -= 1;
        self.unbind(f.var);
        r?;
        self.line("}");
        self.indent -= 1;
        self.line("}");
        self.indent -= 1;
        self.line("}");
        Ok(())
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
        let pragma = match f.kind {
            _ if pragma_override.is_some() => pragma_override,
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
        if let Some(p) = pragma {
            self.pragma(&p);
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

    /// A loop annotated `{"jam": U}` whose body is a `simd_reduction` loop with lanes:
    /// `U` consecutive iterations at a time, their reductions jammed into one lane loop
    /// (see [`Writer::write_simd_reduction`]), then the remaining iterations one by one.
    fn write_jam(&mut self, f: &For, ann: &AttrValue) -> Res<()> {
        const WHAT: &str = "loop annotation `jam`";
        let u = match ann {
            AttrValue::Int(n) if (2..=16).contains(n) => *n,
            other => {
                return Err(self.unsupported(
                    WHAT,
                    format!("expected an integer from 2 to 16, got {other:?}"),
                ))
            }
        };
        if !matches!(f.kind, ForKind::Serial | ForKind::Parallel) {
            return Err(self.unsupported(
                WHAT,
                format!(
                    "the loop is {}, not serial or parallel",
                    f.kind.script_name()
                ),
            ));
        }
        if matches!(f.annotations.get(SCHEDULE_ATTR), Some(AttrValue::Str(s)) if s == NNZ_BALANCED)
        {
            return Err(self.unsupported(WHAT, "a loop with `schedule: nnz_balanced`"));
        }
        let inner = match single_stmt(&f.body) {
            Stmt::For(l) => l,
            _ => {
                return Err(self.unsupported(
                    WHAT,
                    "the loop's body is not exactly one `simd_reduction` loop",
                ))
            }
        };
        let Some(red) = inner.annotations.get(SIMD_REDUCTION_ATTR) else {
            return Err(self.unsupported(
                WHAT,
                "the loop's body is not exactly one `simd_reduction` loop",
            ));
        };
        // Jamming needs lane-parallel partial sums: a `+` reduction over constant bounds (a
        // kernel whose feature width is not specialised has none). Otherwise the annotation
        // is a hint that does not apply, and the loop is written as usual.
        let dt = match single_stmt(&inner.body) {
            Stmt::Block(b) => match single_stmt(&b.body) {
                Stmt::Store(st) => self.func.buffers.get(st.buffer).map(|x| x.dtype),
                _ => None,
            },
            _ => None,
        };
        let lanes_apply = matches!(red, AttrValue::Str(op) if op == "+")
            && dt.is_some_and(|dt| {
                matches!(self.reduction_lanes(inner, BinOp::Add, dt), Ok(Some(_)))
            });
        if !lanes_apply {
            return self.write_loop(f, None);
        }
        let (vdt, ct, vname) = self.loop_var_type(f)?;
        let parallel = if f.kind == ForKind::Parallel {
            Some(self.parallel_pragma(f)?)
        } else {
            None
        };
        self.line("{");
        self.indent += 1;
        let (start, end) = self.loop_range(f, vdt, ct, &vname)?;
        let v = self.bind(f.var)?;
        let r = (|| -> Res<()> {
            // Parallel: groups of `u` iterations in parallel, then the last `< u` ones serially
            // from the first iteration past the groups.
            let mut rest_start = None;
            if let Some(pragma) = &parallel {
                let groups = self.namer.fresh(&format!("{v}_groups"));
                let g = self.namer.fresh(&format!("{v}_g"));
                self.line(&format!(
                    "const int64_t {groups} = {end} > {start} ? ((int64_t){end} - (int64_t){start}) / {u} : 0;"
                ));
                self.pragma(pragma);
                self.line(&format!("for (int64_t {g} = 0; {g} < {groups}; ++{g}) {{"));
                self.indent += 1;
                self.line(&format!("const {ct} {v} = ({ct})({start} + {g} * {u});"));
                rest_start = Some(format!("({ct})({start} + {groups} * {u})"));
            } else {
                self.line(&format!("{ct} {v} = {start};"));
                self.line(&format!("for (; {v} <= {end} - {u}; {v} += {u}) {{"));
                self.indent += 1;
            }
            let texts: Vec<String> = (0..u)
                .map(|k| {
                    if k == 0 {
                        v.clone()
                    } else {
                        format!("({v} + {k})")
                    }
                })
                .collect();
            if let Some(p) = f.annotations.get(PREFETCH_ATTR) {
                for t in &texts {
                    self.write_prefetch(f, p, t, &end)?;
                }
            }
            self.write_simd_reduction(inner, red, Some((f.var, &texts)))?;
            self.indent -= 1;
            self.line("}");
            match &rest_start {
                Some(r) => self.line(&format!("for ({ct} {v} = {r}; {v} < {end}; ++{v}) {{")),
                None => self.line(&format!("for (; {v} < {end}; ++{v}) {{")),
            }
            self.indent += 1;
            if let Some(p) = f.annotations.get(PREFETCH_ATTR) {
                self.write_prefetch(f, p, &v, &end)?;
            }
            self.write_stmt(&f.body)?;
            self.indent -= 1;
            self.line("}");
            Ok(())
        })();
        self.unbind(f.var);
        r?;
        self.indent -= 1;
        self.line("}");
        Ok(())
    }

    /// A loop annotated `{"simd_reduction": OP}` (schedule primitive `vectorize_reduction`):
    /// its body is one block whose only statement is `Y[idx] = Y[idx] OP e` with `idx` invariant
    /// in the loop. Written as
    /// `{ T acc = Y[idx]; #pragma omp simd reduction(OP: acc) for (...) { acc = acc OP e; }
    /// Y[idx] = acc; }`: the lanes' partial results are combined at the end (the annotation is
    /// the user's permission to reassociate). Float `max`/`min` use a declared reduction built
    /// on `fmaxf`/`fminf` with NaN as identity, so NaNs are ignored exactly as the evaluator's
    /// `max`/`min` do, in any order.
    ///
    /// `jam`: the variable of the enclosing loop and the texts it takes in the copies of the
    /// reduction written side by side (unroll-and-jam, loop annotation `"jam"`): one lane loop
    /// updates every copy's partial sums, so the loop-invariant operand is loaded once for all.
    fn write_simd_reduction(
        &mut self,
        f: &For,
        ann: &AttrValue,
        jam: Option<(VarId, &[String])>,
    ) -> Res<()> {
        const WHAT: &str = "loop annotation `simd_reduction`";
        let op = match ann {
            AttrValue::Str(s) if s == "+" => BinOp::Add,
            AttrValue::Str(s) if s == "max" => BinOp::Max,
            AttrValue::Str(s) if s == "min" => BinOp::Min,
            other => {
                return Err(self.unsupported(
                    WHAT,
                    format!("expected \"+\", \"max\" or \"min\", got {other:?}"),
                ))
            }
        };
        if !matches!(f.kind, ForKind::Serial | ForKind::Vectorized) {
            return Err(self.unsupported(
                WHAT,
                format!("the loop is {}, not vectorized", f.kind.script_name()),
            ));
        }
        if self.simd_acc.is_some() {
            return Err(self.unsupported(WHAT, "a SIMD reduction nested in another one"));
        }
        let Stmt::Block(b) = single_stmt(&f.body) else {
            return Err(self.unsupported(WHAT, "the loop's body is not exactly one block"));
        };
        let Stmt::Store(st) = single_stmt(&b.body) else {
            return Err(self.unsupported(
                WHAT,
                format!("the body of block `{}` is not a single store", b.name),
            ));
        };
        // An init that runs exactly at the loop's first iteration and only sets the element
        // becomes the accumulator's start value.
        let init_value = b.init_folded_into(f.var, &f.min, st.buffer, &st.indices);
        if b.init.is_some() && init_value.is_none() {
            return Err(self.unsupported(
                WHAT,
                format!(
                    "block `{}` has an init that does not run exactly at the loop's first \
                     iteration (decompose the reduction first)",
                    b.name
                ),
            ));
        }
        // The init's effect is the accumulator's start value; the loop body runs without it.
        let stripped;
        let f = if init_value.is_some() {
            let mut g = f.clone();
            strip_block_init(&mut g.body);
            stripped = g;
            &stripped
        } else {
            f
        };
        let Expr::Binary(sop, x, y) = &st.value else {
            return Err(self.unsupported(WHAT, "the store is not `Y[idx] = Y[idx] op e`"));
        };
        let is_self = |e: &Expr| matches!(e, Expr::Load { buffer, indices } if *buffer == st.buffer && *indices == st.indices);
        let value = match (is_self(x), is_self(y)) {
            (true, _) => y,
            (false, true) => x,
            _ => return Err(self.unsupported(WHAT, "the store is not `Y[idx] = Y[idx] op e`")),
        };
        if *sop != op {
            return Err(self.unsupported(
                WHAT,
                format!("the store combines with {sop:?}, the annotation says {ann:?}"),
            ));
        }
        let reads_y = |e: &Expr| {
            let mut found = false;
            e.visit(&mut |z| {
                if let Expr::Load { buffer, .. } = z {
                    found |= *buffer == st.buffer;
                }
            });
            found
        };
        if reads_y(value)
            || st.indices.iter().any(reads_y)
            || b.predicate.as_ref().is_some_and(reads_y)
        {
            return Err(self.unsupported(WHAT, "the reduced value reads the reduced buffer"));
        }
        // Iterators that move with the loop must be reduction iterators absent from `idx`.
        let mut moving = vec![f.var];
        for it in &b.iters {
            let mut uses = false;
            it.binding
                .visit(&mut |z| uses |= matches!(z, Expr::Var(v) if *v == f.var));
            if uses {
                if it.kind != IterKind::Reduce {
                    return Err(self.unsupported(
                        WHAT,
                        "the loop variable feeds a spatial iterator of the block",
                    ));
                }
                moving.push(it.var);
            }
        }
        let mut moves = false;
        for e in &st.indices {
            e.visit(&mut |z| moves |= matches!(z, Expr::Var(v) if moving.contains(v)));
        }
        if moves {
            return Err(self.unsupported(WHAT, "the reduced element changes with the loop"));
        }
        let dt = self
            .func
            .buffers
            .get(st.buffer)
            .map(|bf| bf.dtype)
            .unwrap_or(DType::F32);
        if !(dt.is_integer() || dt.is_float()) {
            return Err(self.unsupported(WHAT, format!("a reduction of {dt} values")));
        }
        let ct = self.ctype(dt, "reduction accumulator")?;
        let copies: Vec<Option<String>> = match jam {
            Some((_, texts)) => texts.iter().map(|t| Some(t.clone())).collect(),
            None => vec![None],
        };
        let mut planned = Vec::new();
        for copy in &copies {
            if let (Some((jv, _)), Some(t)) = (jam, copy) {
                self.let_subst.insert(jv, t.clone());
            }
            // The element's offset outside the loop: the block's other iterators are replaced by
            // their bindings (in terms of loops that are bound here).
            let mut substituted = Vec::new();
            for it in &b.iters {
                if moving.contains(&it.var) || self.let_subst.contains_key(&it.var) {
                    continue;
                }
                let idt = self
                    .func
                    .vars
                    .get(it.var)
                    .map(|v| v.dtype)
                    .unwrap_or(DType::I32);
                let text = match self.expr(&it.binding) {
                    Ok((s, sdt)) => cast(s, sdt, idt),
                    Err(e) => {
                        substituted.iter().for_each(|v| {
                            self.let_subst.remove(v);
                        });
                        return Err(e);
                    }
                };
                self.let_subst.insert(it.var, text);
                substituted.push(it.var);
            }
            // The element is only touched when the loop runs at least once and the parts of the
            // block's predicate that do not move with the loop hold (they may guard `idx`).
            let mut conds: Vec<&Expr> = Vec::new();
            if let Some(p) = &b.predicate {
                conjuncts(p, &mut conds);
                conds.retain(|c| {
                    let mut m = false;
                    c.visit(&mut |z| m |= matches!(z, Expr::Var(v) if moving.contains(v)));
                    !m
                });
            }
            let guard = (|| -> Res<Vec<String>> {
                let mut out = Vec::new();
                if const_int(&f.extent).is_none_or(|n| n <= 0) {
                    let (e, _) = self.expr(&f.extent)?;
                    out.push(format!("{} > 0", strip_parens(&e)));
                }
                for c in &conds {
                    out.push(strip_parens(&self.expr(c)?.0).to_string());
                }
                Ok(out)
            })();
            // Loads that do not move with the loop are read once before it (gcc does not hoist
            // them out of an `omp simd` loop by itself and falls back to gathers). Only when the
            // whole predicate is hoisted too: a load is then read exactly when the loop would read
            // it at least once. Loads under a `Select` branch or the right side of `and`/`or`
            // (evaluated conditionally) stay inside.
            let all_hoisted = b.predicate.as_ref().is_none_or(|p| {
                let mut all = Vec::new();
                conjuncts(p, &mut all);
                all.len() == conds.len()
            });
            let mut loads = Vec::new();
            if all_hoisted {
                let outer = |w: &Self, v: VarId| {
                    w.bound.get(v.index()).copied().unwrap_or(false) || w.let_subst.contains_key(&v)
                };
                invariant_loads(value, &|v| outer(self, v), &mut loads);
            }
            let off = guard.and_then(|g| {
                let mut texts = Vec::new();
                for l in &loads {
                    texts.push(self.expr(l)?);
                }
                let start = match init_value {
                    Some(v) => {
                        let (t, vdt) = self.expr(v)?;
                        Some(cast(t, vdt, dt))
                    }
                    None => None,
                };
                Ok((g, self.offset(st.buffer, &st.indices)?, texts, start))
            });
            for v in &substituted {
                self.let_subst.remove(v);
            }
            if let Some((jv, _)) = jam {
                self.let_subst.remove(&jv);
            }
            planned.push((off?, loads));
        }
        if jam.is_some() {
            if planned.iter().any(|((g, ..), _)| !g.is_empty()) {
                return Err(self.unsupported(
                    "loop annotation `jam`",
                    "the reduction is guarded (a loop of unknown extent or a predicate)",
                ));
            }
            if self.reduction_lanes(f, op, dt)?.is_none() {
                return Err(self.unsupported(
                    "loop annotation `jam`",
                    "the reduction has no lane-parallel partial sums (constant bounds, `+`)",
                ));
            }
        }
        let name = self.buf_name(st.buffer)?.to_string();
        let mut lane_copies = Vec::new();
        let mut finals = Vec::new();
        let n_copies = planned.len();
        for (ci, ((guard, off, texts, start), loads)) in planned.into_iter().enumerate() {
            let acc = self.namer.fresh(&format!("{name}_acc"));
            let sym = match op {
                BinOp::Add => "+",
                BinOp::Max => "max",
                _ => "min",
            };
            if guard.is_empty() {
                self.line(&format!("{{ /* SIMD reduction ({sym}) into {name} */"));
            } else {
                self.line(&format!(
                    "if ({}) {{ /* SIMD reduction ({sym}) into {name} */",
                    guard.join(" && ")
                ));
            }
            self.indent += 1;
            match &start {
                Some(v) => self.line(&format!("{ct} {acc} = {};", strip_parens(v))),
                None => self.line(&format!("{ct} {acc} = {name}[{off}];")),
            }
            let mut hoisted = Vec::new();
            for (l, (text, ldt)) in loads.into_iter().zip(texts) {
                let base = match &l {
                    Expr::Load { buffer, .. } => self.buf_name(*buffer)?.to_string(),
                    _ => "v".to_string(),
                };
                let local = self.namer.fresh(&format!("{base}_h"));
                let lct = self.ctype(ldt, "hoisted load")?;
                self.line(&format!("const {lct} {local} = {};", strip_parens(&text)));
                hoisted.push((l, local));
            }
            let clause = match (op, dt) {
                (BinOp::Max | BinOp::Min, DType::F32 | DType::F64) => {
                    let (fun, nan) = match (op, dt) {
                        (BinOp::Max, DType::F32) => ("fmaxf", "NAN"),
                        (BinOp::Min, DType::F32) => ("fminf", "NAN"),
                        (BinOp::Max, _) => ("fmax", "(double)NAN"),
                        _ => ("fmin", "(double)NAN"),
                    };
                    let red = format!("sptir_{fun}");
                    self.pragma(&format!(
                        "omp declare reduction({red} : {ct} : omp_out = {fun}(omp_out, omp_in)) \
                     initializer(omp_priv = {nan})"
                    ));
                    format!("reduction({red}:{acc})")
                }
                _ => format!("reduction({sym}:{acc})"),
            };
            let lanes = self.reduction_lanes(f, op, dt)?;
            if let Some(lanes) = lanes {
                // A product with a hoisted (loop-invariant) factor: the factor multiplies the total
                // once instead of every term (distributivity, part of the reassociation permission).
                let mut factor = None;
                let mut body = f.body.clone();
                if let Expr::Binary(BinOp::Mul, a, c) = value.as_ref() {
                    let local_of =
                        |e: &Expr| hoisted.iter().find(|(l, _)| l == e).map(|h| h.1.clone());
                    let split = match (local_of(c), local_of(a)) {
                        (Some(h), _) => Some((h, a.as_ref().clone())),
                        (None, Some(h)) => Some((h, c.as_ref().clone())),
                        _ => None,
                    };
                    if let Some((h, rest)) = split {
                        if dt.is_float() {
                            let y = Expr::Load {
                                buffer: st.buffer,
                                indices: st.indices.clone(),
                            };
                            let nv = if is_self(x) {
                                Expr::Binary(BinOp::Add, Box::new(y), Box::new(rest))
                            } else {
                                Expr::Binary(BinOp::Add, Box::new(rest), Box::new(y))
                            };
                            if replace_single_store_value(&mut body, nv) {
                                factor = Some(h);
                            } else {
                                body = f.body.clone();
                            }
                        }
                    }
                }
                let subst = jam.and_then(|(jv, _)| copies[ci].clone().map(|t| (jv, t)));
                lane_copies.push(LaneCopy {
                    subst,
                    hoisted,
                    acc: acc.clone(),
                });
                finals.push((off, acc, factor));
                if ci + 1 < n_copies {
                    continue;
                }
                let totals = self.write_lane_reduction(
                    f,
                    &body,
                    lanes,
                    st.buffer,
                    &st.indices,
                    &lane_copies,
                    ct,
                )?;
                for ((off, acc, factor), total) in finals.iter().zip(&totals) {
                    match factor {
                        Some(h) => self.line(&format!("{name}[{off}] = {acc} + {h} * {total};")),
                        None => self.line(&format!("{name}[{off}] = {acc} + {total};")),
                    }
                }
                for _ in 0..n_copies {
                    self.indent -= 1;
                    self.line("}");
                }
                return Ok(());
            }
            self.simd_acc = Some(SimdAcc {
                buffer: st.buffer,
                indices: st.indices.clone(),
                name: acc.clone(),
                hoisted,
            });
            let r = self.write_versioned_simd_loop(f, &clause);
            self.simd_acc = None;
            r?;
            self.line(&format!("{name}[{off}] = {acc};"));
            self.indent -= 1;
            self.line("}");
            return Ok(());
        }
        Ok(())
    }

    /// The prefetches of a loop annotated `{"prefetch": "BUF:D"}` (D a positive distance), at the
    /// top of its body: the element of `BUF` that the first load of `BUF` in the body reads
    /// `D` iterations later (the iteration clamped to the loop's last one, so index arrays are
    /// read in bounds), at every 64-byte line of the row an inner constant loop walks.
    /// The load must sit on a straight path of blocks without predicates and loops of constant
    /// positive extent; others are refused. With `"BUF:D:flat"` the iteration is not clamped:
    /// the position `D` ahead may lie in the rows after this loop's, and every load on the way
    /// to the address (index arrays) is clamped into its buffer instead (the prefetch itself is
    /// skipped when such a buffer is empty), so loops of any extent may be crossed too.
    fn write_prefetch(&mut self, f: &For, ann: &AttrValue, v: &str, end: &str) -> Res<()> {
        const WHAT: &str = "loop annotation `prefetch`";
        let spec = match ann {
            AttrValue::Str(s) => {
                let parts: Vec<&str> = s.split(':').map(str::trim).collect();
                let (b, d, flat) = match parts.as_slice() {
                    [b, d] => (*b, *d, false),
                    [b, d, "flat"] => (*b, *d, true),
                    _ => ("", "", false),
                };
                d.parse::<i64>()
                    .ok()
                    .filter(|d| *d > 0 && *d <= 4096 && !b.is_empty())
                    .map(|d| (b.to_string(), d, flat))
            }
            _ => None,
        };
        let Some((bname, dist, flat)) = spec else {
            return Err(self.unsupported(
                WHAT,
                format!(
                    "expected \"BUFFER:DISTANCE\" or \"BUFFER:DISTANCE:flat\" with a distance \
                     from 1 to 4096, got {ann:?}"
                ),
            ));
        };
        let found = self.func.buffers.iter().find_map(|(id, b)| {
            let c = self.buf_names.get(id.index())?;
            (b.name == bname || *c == bname || *c == format!("{bname}_data")).then_some(id)
        });
        let Some(buffer) = found else {
            return Err(self.unsupported(WHAT, format!("no buffer named `{bname}`")));
        };
        let mut chain = Vec::new();
        // Flat prefetches clamp every read on the way, so loops of any extent may be crossed
        // (at their first iteration); row-clamped ones only cross loops known to run.
        let Some(indices) = find_prefetch_load(&f.body, buffer, flat, &mut chain) else {
            return Err(self.unsupported(
                WHAT,
                format!(
                    "no load of `{bname}` on a straight path of blocks and constant loops in the body"
                ),
            ));
        };
        let elem = self
            .func
            .buffers
            .get(buffer)
            .map(|b| i64::from(b.dtype.bits().max(8) / 8))
            .unwrap_or(4);
        let mut set = Vec::new();
        let mut guards: Vec<String> = Vec::new();
        // What the look-ahead moves: this loop's variable, the inner loops' (taken at their
        // first value, which a loop of unknown extent may not have) and the block iterators
        // bound through them. Only loads indexed by these can leave their buffers.
        let mut moved = vec![f.var];
        for hop in &chain {
            match hop {
                PrefetchHop::For(l) => moved.push(l.var),
                PrefetchHop::Block(b) => {
                    for it in &b.iters {
                        let mut uses = false;
                        it.binding
                            .visit(&mut |z| uses |= matches!(z, Expr::Var(v) if moved.contains(v)));
                        if uses {
                            moved.push(it.var);
                        }
                    }
                }
            }
        }
        let r = (|| -> Res<Vec<String>> {
            let next = if flat {
                format!("({v} + {dist})")
            } else {
                format!("({v} + {dist} < {end} ? {v} + {dist} : {end} - 1)")
            };
            self.let_subst.insert(f.var, next);
            set.push(f.var);
            // The first inner loop walks the row, line by line.
            let walk = chain.iter().find_map(|h| match h {
                PrefetchHop::For(l) => Some(const_int(&l.extent).unwrap_or(1)),
                PrefetchHop::Block(_) => None,
            });
            let lines = walk
                .filter(|ext| *ext > 0)
                .map(|ext| ((ext * elem + 63) / 64).clamp(1, 16))
                .unwrap_or(1);
            let mut out = Vec::new();
            for t in 0..lines {
                // Bindings on the way may read index arrays too: clamp from here on.
                if flat {
                    self.prefetch_clamp = Some((moved.clone(), Vec::new()));
                }
                let mut first = true;
                for hop in &chain {
                    match hop {
                        PrefetchHop::Block(b) => {
                            for it in &b.iters {
                                let (x, _) = self.expr(&it.binding)?;
                                self.let_subst
                                    .insert(it.var, format!("({})", strip_parens(&x)));
                                set.push(it.var);
                            }
                        }
                        PrefetchHop::For(l) => {
                            let (m, _) = self.expr(&l.min)?;
                            let m = if first && t > 0 {
                                format!("({} + {})", strip_parens(&m), t * (64 / elem).max(1))
                            } else {
                                m
                            };
                            first = false;
                            self.let_subst.insert(l.var, m);
                            set.push(l.var);
                        }
                    }
                }
                let off = self.offset(buffer, &indices);
                let sizes = self
                    .prefetch_clamp
                    .take()
                    .map(|(_, s)| s)
                    .unwrap_or_default();
                let off = off?;
                for size in sizes {
                    if !guards.contains(&size) {
                        guards.push(size);
                    }
                }
                if !out.contains(&off) {
                    out.push(off);
                }
                // Inner substitutions are recomputed for the next line.
                for var in set.drain(1..) {
                    self.let_subst.remove(&var);
                }
            }
            Ok(out)
        })();
        self.prefetch_clamp = None;
        for var in set {
            self.let_subst.remove(&var);
        }
        let offs = r?;
        let name = self.buf_name(buffer)?.to_string();
        // Reads clamped into an empty buffer would still be out of bounds.
        let guard = guards
            .iter()
            .map(|g| format!("{g} > 0"))
            .collect::<Vec<_>>()
            .join(" && ");
        for off in offs {
            let pf = format!("__builtin_prefetch(&{name}[{off}], 0, 3);");
            if guard.is_empty() {
                self.line(&pf);
            } else {
                self.line(&format!("if ({guard}) {pf}"));
            }
        }
        Ok(())
    }

    /// The `omp simd reduction` loop of a `simd_reduction`, versioned by trip count where the
    /// loop asks for it ([`SIMD_MIN_TRIP_ATTR`]): `if (extent >= N) { SIMD } else { scalar }`.
    fn write_versioned_simd_loop(&mut self, f: &For, clause: &str) -> Res<()> {
        let min_trip = match f.annotations.get(SIMD_MIN_TRIP_ATTR) {
            None => None,
            Some(AttrValue::Int(n)) if *n >= 1 => Some(*n),
            Some(other) => {
                return Err(self.unsupported(
                    "loop annotation `simd_min_trip`",
                    format!("expected a positive integer, got {other:?}"),
                ))
            }
        };
        let Some(n) = min_trip.filter(|_| const_int(&f.extent).is_none()) else {
            return self.write_loop(f, Some(format!("omp simd {clause}")));
        };
        let (ext, _) = self.expr(&f.extent)?;
        self.line(&format!("if ({} >= {n}) {{", strip_parens(&ext)));
        self.indent += 1;
        let r = self.write_loop(f, Some(format!("omp simd {clause}")));
        self.indent -= 1;
        r?;
        self.line("} else {");
        self.indent += 1;
        let mut scalar = f.clone();
        scalar.kind = ForKind::Serial;
        scalar.annotations = Default::default();
        let r = self.write_loop(&scalar, None);
        self.indent -= 1;
        r?;
        self.line("}");
        Ok(())
    }

    /// The number of lane-parallel partial sums of a `simd_reduction` loop, or `None` for the
    /// plain `omp simd reduction` form. Lanes apply to `+` over a loop with constant bounds:
    /// the loop annotation `"lanes"` (a power of two from 1 to 64; 1 turns lanes off) or, by
    /// default, one 64-byte vector of the accumulator type (16 `float`s), halved until it fits
    /// the trip count.
    fn reduction_lanes(&self, f: &For, op: BinOp, dt: DType) -> Res<Option<i64>> {
        let asked = match f.annotations.get(LANES_ATTR) {
            None => None,
            Some(AttrValue::Int(n)) if (1..=64).contains(n) && (*n as u64).is_power_of_two() => {
                Some(*n)
            }
            Some(other) => {
                return Err(self.unsupported(
                    "loop annotation `lanes`",
                    format!("expected a power of two from 1 to 64, got {other:?}"),
                ))
            }
        };
        if op != BinOp::Add {
            return Ok(None);
        }
        let (Some(_), Some(ext)) = (const_int(&f.min), const_int(&f.extent)) else {
            // A data-dependent trip count: lanes only where the schedule asks for them (the
            // scalar form of `write_lane_reduction`).
            return Ok(asked.filter(|n| *n > 1));
        };
        let mut lanes = match asked {
            Some(n) => n,
            None => {
                let bytes = i64::from(dt.bits().max(8) / 8);
                (64 / bytes).max(1)
            }
        };
        if asked.is_none() {
            while lanes > 1 && lanes > ext {
                lanes /= 2;
            }
        }
        Ok((lanes > 1 && ext >= lanes).then_some(lanes))
    }

    /// Every copy's update of a lane reduction, one after the other in the same lane loop (the
    /// copies differ only in the enclosing loop's variable): the reduced element redirected to
    /// `acc_of(copy)`, the copy's hoisted loads read from their locals.
    fn write_lane_copies(
        &mut self,
        body: &Stmt,
        buffer: BufferId,
        indices: &[Expr],
        copies: &[LaneCopy],
        acc_of: impl Fn(&LaneCopy) -> String,
    ) -> Res<()> {
        for c in copies {
            self.simd_acc = Some(SimdAcc {
                buffer,
                indices: indices.to_vec(),
                name: acc_of(c),
                hoisted: c.hoisted.clone(),
            });
            if let Some((jv, t)) = &c.subst {
                self.let_subst.insert(*jv, t.clone());
            }
            let r = self.write_stmt(body);
            if let Some((jv, _)) = &c.subst {
                self.let_subst.remove(jv);
            }
            self.simd_acc = None;
            r?;
        }
        Ok(())
    }

    /// A lane reduction over a loop whose trip count is only known at run time (an SpMV row):
    /// `lanes` scalar partial sums per copy, `{acc}_s0 .. {acc}_s{L-1}`, updated by `lanes`
    /// copies of the body per step (no `omp simd`: lanes over gathered operands would become
    /// vector gathers, slower than independent scalar chains), the last `< lanes` iterations
    /// added into `{acc}_s0`, then a pairwise sum. What it buys is independent dependency
    /// chains: one accumulator per row waits a whole FMA latency per stored element.
    #[allow(clippy::too_many_arguments)]
    fn write_scalar_lanes(
        &mut self,
        f: &For,
        body: &Stmt,
        lanes: i64,
        buffer: BufferId,
        indices: &[Expr],
        copies: &[LaneCopy],
        (ct, lct): (&str, &str),
    ) -> Res<Vec<String>> {
        let (min, mdt) = self.expr(&f.min)?;
        let (ext, edt) = self.expr(&f.extent)?;
        let vdt = self
            .func
            .vars
            .get(f.var)
            .map(|v| v.dtype)
            .unwrap_or(DType::I32);
        let name = self.var_names[f.var.index()].clone();
        let start = self.namer.fresh(&format!("{name}_lo"));
        let end = self.namer.fresh(&format!("{name}_hi"));
        let chunk = self.namer.fresh(&format!("{name}_c"));
        self.line(&format!(
            "const {lct} {start} = {};",
            cast(min.clone(), mdt, vdt)
        ));
        self.line(&format!(
            "const {lct} {end} = {start} + {};",
            cast(ext, edt, vdt)
        ));
        for c in copies {
            let parts: Vec<String> = (0..lanes).map(|l| format!("{}_s{l} = 0", c.acc)).collect();
            self.line(&format!("{ct} {};", parts.join(", ")));
        }
        self.line(&format!("{lct} {chunk} = {start};"));
        self.line(&format!(
            "for (; {chunk} + {lanes} <= {end}; {chunk} += {lanes}) {{"
        ));
        self.indent += 1;
        let r = (|| -> Res<()> {
            for l in 0..lanes {
                self.let_subst.insert(f.var, format!("({chunk} + {l})"));
                let r = self.write_lane_copies(body, buffer, indices, copies, |c| {
                    format!("{}_s{l}", c.acc)
                });
                self.let_subst.remove(&f.var);
                r?;
            }
            Ok(())
        })();
        self.indent -= 1;
        r?;
        self.line("}");
        self.line(&format!("for (; {chunk} < {end}; ++{chunk}) {{"));
        self.indent += 1;
        self.let_subst.insert(f.var, chunk.clone());
        let r = self.write_lane_copies(body, buffer, indices, copies, |c| format!("{}_s0", c.acc));
        self.let_subst.remove(&f.var);
        self.indent -= 1;
        r?;
        self.line("}");
        Ok(copies
            .iter()
            .map(|c| {
                let mut terms: Vec<String> =
                    (0..lanes).map(|l| format!("{}_s{l}", c.acc)).collect();
                while terms.len() > 1 {
                    let half = terms.len() / 2;
                    terms = (0..half)
                        .map(|i| format!("({} + {})", terms[i], terms[i + half]))
                        .collect();
                }
                terms.pop().unwrap_or_else(|| "0".to_string())
            })
            .collect())
    }

    /// The body of a `simd_reduction` loop with `lanes` independent partial sums, and the C
    /// text of each copy's total. Where [`Writer::lane_vector_plan`] applies, the partial sums
    /// are one vector `{acc}_v` of `lanes` elements updated a whole vector per step, and the
    /// copies' totals are combined together ([`Writer::write_lane_vector_totals`]). Otherwise
    /// they are an array `{acc}_part[lanes]`: the loop runs in chunks of `lanes` iterations
    /// whose lane `l` adds into `{acc}_part[l]` (a SIMD loop that needs no reassociation), the
    /// remainder adds into the first lanes, then a pairwise (tree-shaped) sum leaves the total
    /// in `{acc}_part[0]`.
    #[allow(clippy::too_many_arguments)]
    fn write_lane_reduction(
        &mut self,
        f: &For,
        body: &Stmt,
        lanes: i64,
        buffer: BufferId,
        indices: &[Expr],
        copies: &[LaneCopy],
        ct: &str,
    ) -> Res<Vec<String>> {
        let vdt = self
            .func
            .vars
            .get(f.var)
            .map(|v| v.dtype)
            .unwrap_or(DType::I32);
        let lct = self.ctype(vdt, "loop variable")?;
        let (Some(min), Some(ext)) = (const_int(&f.min), const_int(&f.extent)) else {
            return self.write_scalar_lanes(f, body, lanes, buffer, indices, copies, (ct, lct));
        };
        let dt = self
            .func
            .buffers
            .get(buffer)
            .map(|b| b.dtype)
            .unwrap_or(DType::F32);
        if let Some(plan) = self.lane_vector_plan(f, body, buffer, indices, lanes, dt) {
            let ty = vector::lane_type(dt, lanes);
            self.lane_types.insert((dt, lanes));
            for c in copies {
                self.line(&format!("{ty} {}_v = {{0}};", c.acc));
            }
            self.write_lane_vector_loop(f, plan, (min, ext, lanes), lct, |w| {
                w.write_lane_copies(body, buffer, indices, copies, |c| format!("{}_v", c.acc))
            })?;
            let accs: Vec<String> = copies.iter().map(|c| format!("{}_v", c.acc)).collect();
            return Ok(self.write_lane_vector_totals(&accs, lanes, dt));
        }
        for c in copies {
            self.line(&format!("{ct} {}_part[{lanes}] = {{0}};", c.acc));
        }
        let main = ext - ext % lanes;
        let v = self.bind(f.var)?;
        let chunk = self.namer.fresh(&format!("{v}_c"));
        let run = |w: &mut Self, start: String, end: String, base: String| -> Res<()> {
            w.pragma("omp simd");
            w.line(&format!("for ({lct} {v} = {start}; {v} < {end}; ++{v}) {{"));
            w.indent += 1;
            let r = w.write_lane_copies(body, buffer, indices, copies, |c| {
                format!("{}_part[{v} - {base}]", c.acc)
            });
            w.indent -= 1;
            r?;
            w.line("}");
            Ok(())
        };
        let r = (|| -> Res<()> {
            self.line(&format!(
                "for ({lct} {chunk} = {}; {chunk} < {}; {chunk} += {lanes}) {{",
                int_literal(min, vdt),
                int_literal(min + main, vdt)
            ));
            self.indent += 1;
            run(
                self,
                chunk.clone(),
                format!("{chunk} + {lanes}"),
                chunk.clone(),
            )?;
            self.indent -= 1;
            self.line("}");
            if main < ext {
                let b = int_literal(min + main, vdt);
                run(self, b.clone(), int_literal(min + ext, vdt), b)?;
            }
            Ok(())
        })();
        self.unbind(f.var);
        r?;
        let l = self.namer.fresh("lane");
        for c in copies {
            let part = format!("{}_part", c.acc);
            let mut w = lanes / 2;
            while w >= 1 {
                self.pragma("omp simd");
                self.line(&format!(
                    "for (int {l} = 0; {l} < {w}; ++{l}) {part}[{l}] += {part}[{l} + {w}];"
                ));
                w /= 2;
            }
        }
        Ok(copies
            .iter()
            .map(|c| format!("{}_part[0]", c.acc))
            .collect())
    }

    /// `omp parallel for` with the schedule of the loop's annotations: `"schedule"` (one of
    /// `static`, `dynamic`, `guided`, `auto`, `runtime`) and `"chunk"` (a positive integer).
    fn parallel_pragma(&self, f: &For) -> Res<String> {
        let sched = match f.annotations.get("schedule") {
            None => None,
            Some(AttrValue::Str(s))
                if ["static", "dynamic", "guided", "auto", "runtime"].contains(&s.as_str()) =>
            {
                Some(s.clone())
            }
            Some(other) => {
                return Err(self.unsupported(
                    "loop annotation `schedule`",
                    format!(
                        "expected one of \"static\", \"dynamic\", \"guided\", \"auto\", \"runtime\", got {other:?}"
                    ),
                ))
            }
        };
        let chunk = match f.annotations.get("chunk") {
            None => None,
            Some(AttrValue::Int(c)) if *c > 0 => Some(*c),
            Some(other) => {
                return Err(self.unsupported(
                    "loop annotation `chunk`",
                    format!("expected a positive integer, got {other:?}"),
                ))
            }
        };
        let clause = match (sched, chunk) {
            (None, None) => format!("{DEFAULT_SCHEDULE}, {DEFAULT_CHUNK}"),
            (None, Some(c)) => format!("{DEFAULT_SCHEDULE}, {c}"),
            (Some(s), _) if s == "auto" || s == "runtime" => s,
            (Some(s), None) => s,
            (Some(s), Some(c)) => format!("{s}, {c}"),
        };
        Ok(format!("omp parallel for schedule({clause})"))
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
            self.line(&format!("const {ct} {v} = {};", strip_parens(&s)));
            if it.kind == IterKind::Reduce {
                let (m, mdt) = self.expr(&it.min)?;
                at_min.push(format!("{v} == {}", cast(m, mdt, dt)));
            }
        }
        let mut opened = false;
        if let Some(p) = &b.predicate {
            let (c, _) = self.expr(p)?;
            self.line(&format!("if ({}) {{", strip_parens(&c)));
            self.indent += 1;
            opened = true;
        }
        let heap = self.write_allocs(&b.alloc_buffers)?;
        self.write_guarded(&heap, |w| {
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
        if opened {
            self.indent -= 1;
            self.line("}");
        }
        Ok(())
    }

    fn write_store(&mut self, st: &Store) -> Res<()> {
        let dt = self
            .func
            .buffers
            .get(st.buffer)
            .map(|b| b.dtype)
            .unwrap_or(DType::F32);
        let (v, vdt) = self.expr(&st.value)?;
        let v = cast(v, vdt, dt);
        if let Some(acc) = &self.simd_acc {
            if acc.buffer == st.buffer && acc.indices == st.indices {
                let acc = acc.name.clone();
                self.line(&format!("{acc} = {};", strip_parens(&v)));
                return Ok(());
            }
        }
        if self.vector_store(st.buffer, &st.indices, &st.value, strip_parens(&v))? {
            return Ok(());
        }
        let off = self.offset(st.buffer, &st.indices)?;
        let name = self.buf_name(st.buffer)?.to_string();
        self.line(&format!("{name}[{off}] = {};", strip_parens(&v)));
        Ok(())
    }

    fn write_if(&mut self, i: &IfThenElse, chained: bool) -> Res<()> {
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

    fn write_evaluate(&mut self, e: &Expr) -> Res<()> {
        if let Expr::Call {
            op: Intrinsic::AtomicAdd,
            args,
            ..
        } = e
        {
            let [Expr::Load { buffer, indices }, value] = args.as_slice() else {
                return Err(
                    self.invalid("`atomic_add` takes a buffer element `A[idx]` and a value")
                );
            };
            let bdt = self
                .func
                .buffers
                .get(*buffer)
                .map(|b| b.dtype)
                .unwrap_or(DType::F32);
            if bdt.is_bool() {
                return Err(self.unsupported("atomic_add", "the target buffer is boolean"));
            }
            let (v, vdt) = self.expr(value)?;
            let off = self.offset(*buffer, indices)?;
            let name = self.buf_name(*buffer)?.to_string();
            let v = cast(v, vdt, binary_result_dtype(bdt, vdt));
            self.pragma("omp atomic update");
            self.line(&format!("{name}[{off}] += {};", strip_parens(&v)));
            return Ok(());
        }
        let (s, _) = self.expr(e)?;
        self.line(&format!("(void){s};"));
        Ok(())
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

    /// The C text of `e` (an atom or parenthesised) and the dtype of its value.
    fn expr(&mut self, e: &Expr) -> Res<(String, DType)> {
        match e {
            Expr::Int(v, dt) => self.int_const(*v, *dt),
            Expr::Float(x, dt) => self.float_const(*x, *dt),
            Expr::Bool(b) => Ok((if *b { "true" } else { "false" }.to_string(), DType::Bool)),
            Expr::Var(v) => self.var(*v),
            Expr::Binary(op, a, b) => self.binary(*op, a, b),
            Expr::Unary(op, a) => self.unary(*op, a),
            Expr::Select(c, a, b) => {
                let (c, _) = self.expr(c)?;
                let (x, xd) = self.expr(a)?;
                let (y, yd) = self.expr(b)?;
                let dt = binary_result_dtype(xd, yd);
                Ok((
                    format!("({c} ? {} : {})", cast(x, xd, dt), cast(y, yd, dt)),
                    dt,
                ))
            }
            Expr::Cast(dt, a) => {
                self.ctype(*dt, "cast")?;
                let (s, sdt) = self.expr(a)?;
                Ok((cast(s, sdt, *dt), *dt))
            }
            Expr::Load { buffer, indices } => {
                let dt = match self.func.buffers.get(*buffer) {
                    Some(b) => b.dtype,
                    None => return Err(self.invalid(format!("buffer {buffer:?} is not declared"))),
                };
                if let Some(acc) = &self.simd_acc {
                    if acc.buffer == *buffer && acc.indices == *indices {
                        return Ok((acc.name.clone(), dt));
                    }
                    if let Some((_, local)) = acc.hoisted.iter().find(|(l, _)| l == e) {
                        return Ok((local.clone(), dt));
                    }
                }
                if let Some(v) = self.vector_load(*buffer, indices)? {
                    return Ok((v, dt));
                }
                let off = self.offset(*buffer, indices)?;
                let moved = self.prefetch_clamp.as_ref().is_some_and(|(vars, _)| {
                    let mut hit = false;
                    for i in indices {
                        i.visit(&mut |z| {
                            hit |= matches!(z, Expr::Var(v) if vars.contains(v));
                        });
                    }
                    hit
                });
                if moved {
                    let size = self.flat_size(*buffer)?;
                    let off = format!(
                        "sptir_max_i64(0, sptir_min_i64((int64_t)({}), {size} - 1))",
                        strip_parens(&off)
                    );
                    if let Some((_, sizes)) = &mut self.prefetch_clamp {
                        if !sizes.contains(&size) {
                            sizes.push(size);
                        }
                    }
                    return Ok((format!("{}[{off}]", self.buf_name(*buffer)?), dt));
                }
                Ok((format!("{}[{off}]", self.buf_name(*buffer)?), dt))
            }
            Expr::Call { op, args, dtype } => self.call(*op, args, *dtype),
            Expr::Let { var, value, body } => {
                let dt = self
                    .func
                    .vars
                    .get(*var)
                    .map(|v| v.dtype)
                    .unwrap_or(DType::I32);
                self.ctype(dt, "let variable")?;
                let (s, sdt) = self.expr(value)?;
                if self.bound.get(var.index()).copied().unwrap_or(false)
                    || self.let_subst.contains_key(var)
                {
                    return Err(self.invalid("a `let` variable is bound again inside its scope"));
                }
                self.let_subst.insert(*var, cast(s, sdt, dt));
                let r = self.expr(body);
                self.let_subst.remove(var);
                r
            }
        }
    }

    fn var(&mut self, v: VarId) -> Res<(String, DType)> {
        let Some(var) = self.func.vars.get(v) else {
            return Err(self.invalid(format!("variable {v:?} is not declared")));
        };
        if let Some(s) = self.let_subst.get(&v) {
            return Ok((s.clone(), var.dtype));
        }
        if var.dtype == DType::Handle {
            return Err(self.unsupported(
                &format!("handle `{}`", var.name),
                "a handle cannot be used as a value",
            ));
        }
        if !self.bound[v.index()] {
            return Err(self.invalid(format!(
                "variable `{}` is used where it has no value",
                var.name
            )));
        }
        Ok((self.var_names[v.index()].clone(), var.dtype))
    }

    fn int_const(&mut self, v: i64, dt: DType) -> Res<(String, DType)> {
        if dt.is_float() {
            self.ctype(dt, "constant")?;
            return Ok((format!("(({})({v}))", c_type(dt).unwrap_or("double")), dt));
        }
        if dt == DType::Handle {
            return Err(self.unsupported("constant", "a constant cannot be a handle"));
        }
        Ok((int_literal(v, dt), dt))
    }

    fn float_const(&mut self, x: f64, dt: DType) -> Res<(String, DType)> {
        if !dt.is_float() {
            // An integer-typed float literal: the evaluator converts it (truncating).
            if dt.is_bool() {
                return Ok((if x != 0.0 { "true" } else { "false" }.to_string(), dt));
            }
            return self.int_const(x as i64, dt);
        }
        self.ctype(dt, "constant")?;
        Ok((float_literal(x, dt), dt))
    }

    fn binary(&mut self, op: BinOp, a: &Expr, b: &Expr) -> Res<(String, DType)> {
        let (x, xd) = self.expr(a)?;
        let (y, yd) = self.expr(b)?;
        if op.is_logical() {
            let sym = if op == BinOp::And { "&&" } else { "||" };
            return Ok((format!("({x} {sym} {y})"), DType::Bool));
        }
        let mut dt = binary_result_dtype(xd, yd);
        if dt.is_bool() {
            dt = DType::I32;
        }
        self.ctype(dt, "operand")?;
        if op.is_comparison() {
            let sym = match op {
                BinOp::Eq => "==",
                BinOp::Ne => "!=",
                BinOp::Lt => "<",
                BinOp::Le => "<=",
                BinOp::Gt => ">",
                _ => ">=",
            };
            return Ok((
                format!("({} {sym} {})", cast(x, xd, dt), cast(y, yd, dt)),
                DType::Bool,
            ));
        }
        // Narrow unsigned types are computed in uint32_t (C would promote them to int, where a
        // product can overflow); narrow results are wrapped back to their width.
        let work = match dt {
            DType::U8 | DType::U16 => DType::U32,
            DType::I8 | DType::I16 => DType::I32,
            d => d,
        };
        let (x, y) = (cast(x, xd, work), cast(y, yd, work));
        let sfx = helper_suffix(dt);
        let text = match op {
            BinOp::Add => format!("({x} + {y})"),
            BinOp::Sub => format!("({x} - {y})"),
            BinOp::Mul => format!("({x} * {y})"),
            BinOp::Div => format!("({x} / {y})"),
            BinOp::FloorDiv if dt.is_uint() => format!("({x} / {y})"),
            BinOp::FloorMod if dt.is_uint() => format!("({x} % {y})"),
            BinOp::FloorDiv => format!("sptir_floordiv_{sfx}({x}, {y})"),
            BinOp::FloorMod => format!("sptir_floormod_{sfx}({x}, {y})"),
            BinOp::Min if dt == DType::F32 => format!("fminf({x}, {y})"),
            BinOp::Min if dt == DType::F64 => format!("fmin({x}, {y})"),
            BinOp::Max if dt == DType::F32 => format!("fmaxf({x}, {y})"),
            BinOp::Max if dt == DType::F64 => format!("fmax({x}, {y})"),
            BinOp::Min => format!("sptir_min_{sfx}({x}, {y})"),
            _ => format!("sptir_max_{sfx}({x}, {y})"),
        };
        Ok((cast(text, work, dt), dt))
    }

    fn unary(&mut self, op: UnOp, a: &Expr) -> Res<(String, DType)> {
        let (x, dt) = self.expr(a)?;
        match op {
            UnOp::Not => Ok((format!("(!{x})"), DType::Bool)),
            UnOp::Neg => {
                let rdt = if dt.is_bool() { DType::I32 } else { dt };
                self.ctype(rdt, "operand")?;
                let work = match rdt {
                    DType::U8 | DType::U16 => DType::U32,
                    DType::I8 | DType::I16 => DType::I32,
                    d => d,
                };
                let x = cast(x, dt, work);
                Ok((cast(format!("(-{x})"), work, rdt), rdt))
            }
        }
    }

    fn call(&mut self, op: Intrinsic, args: &[Expr], dt: DType) -> Res<(String, DType)> {
        match op {
            Intrinsic::AtomicAdd => {
                return Err(self.unsupported(
                    "atomic_add",
                    "the C target supports `atomic_add` only as a statement \
                     (`T.evaluate(T.atomic_add(A[i], v))`)",
                ))
            }
            Intrinsic::MinValue | Intrinsic::MaxValue => {
                let max = op == Intrinsic::MaxValue;
                self.ctype(dt, op.name())?;
                return Ok((limit_literal(dt, max), dt));
            }
            _ => {}
        }
        if args.len() != op.arity() {
            return Err(self.invalid(format!(
                "intrinsic `{}` takes {} argument(s), got {}",
                op.name(),
                op.arity(),
                args.len()
            )));
        }
        self.ctype(dt, op.name())?;
        let mut xs = Vec::with_capacity(args.len());
        for a in args {
            xs.push(self.expr(a)?);
        }
        if dt.is_float() {
            let xs: Vec<String> = xs.into_iter().map(|(s, d)| cast(s, d, dt)).collect();
            return Ok((float_call(op, &xs, dt), dt));
        }
        // Integer (or bool) results.
        match op {
            Intrinsic::Abs | Intrinsic::Floor | Intrinsic::Ceil | Intrinsic::Round => {
                let (s, sdt) = xs.swap_remove(0);
                let work = if dt.is_bool() { DType::I64 } else { dt };
                let v = cast(s, sdt, work);
                let v = if op == Intrinsic::Abs && work.is_int() {
                    format!("sptir_abs_{}({v})", helper_suffix(work))
                } else {
                    v
                };
                Ok((cast(v, work, dt), dt))
            }
            _ => {
                let xs: Vec<String> = xs
                    .into_iter()
                    .map(|(s, d)| cast(s, d, DType::F64))
                    .collect();
                Ok((cast(float_call(op, &xs, DType::F64), DType::F64, dt), dt))
            }
        }
    }
}

/// A float intrinsic applied to already converted arguments, in the precision of `dt`.
fn float_call(op: Intrinsic, xs: &[String], dt: DType) -> String {
    let f = if dt == DType::F32 { "f" } else { "" };
    let one = if dt == DType::F32 { "1.0f" } else { "1.0" };
    let a = xs.first().map(String::as_str).unwrap_or("0");
    let b = xs.get(1).map(String::as_str).unwrap_or("0");
    match op {
        Intrinsic::Exp => format!("exp{f}({a})"),
        Intrinsic::Exp2 => format!("exp2{f}({a})"),
        Intrinsic::Log => format!("log{f}({a})"),
        Intrinsic::Log2 => format!("log2{f}({a})"),
        Intrinsic::Sqrt => format!("sqrt{f}({a})"),
        Intrinsic::Rsqrt => format!("({one} / sqrt{f}({a}))"),
        Intrinsic::Tanh => format!("tanh{f}({a})"),
        Intrinsic::Sigmoid => format!("({one} / ({one} + exp{f}(-{a})))"),
        Intrinsic::Abs => format!("fabs{f}({a})"),
        Intrinsic::Pow => format!("pow{f}({a}, {b})"),
        Intrinsic::Floor => format!("floor{f}({a})"),
        Intrinsic::Ceil => format!("ceil{f}({a})"),
        Intrinsic::Round => format!("round{f}({a})"),
        Intrinsic::Sin => format!("sin{f}({a})"),
        Intrinsic::Cos => format!("cos{f}({a})"),
        // The evaluator computes erf in double precision and rounds.
        Intrinsic::Erf if dt == DType::F32 => format!("((float)erf((double){a}))"),
        Intrinsic::Erf => format!("erf({a})"),
        Intrinsic::MinValue | Intrinsic::MaxValue | Intrinsic::AtomicAdd => "0".to_string(),
    }
}

/// Converts C text of dtype `from` to `to`, with the evaluator's conversions: anything → bool
/// tests for nonzero, float → narrow integer goes through `int64_t` (so out-of-range values wrap
/// like the evaluator's instead of being undefined).
fn cast(s: String, from: DType, to: DType) -> String {
    if from == to {
        return s;
    }
    let ct = c_type(to).unwrap_or("double");
    if from.is_float() && to.is_integer() && to != DType::I64 && to != DType::U64 {
        return format!("(({ct})(int64_t){s})");
    }
    format!("(({ct}){s})")
}

/// An integer constant of dtype `dt`, wrapped to its width, as C text of that type.
fn int_literal(v: i64, dt: DType) -> String {
    match dt {
        DType::Bool => (if v != 0 { "true" } else { "false" }).to_string(),
        DType::I64 => {
            if v == i64::MIN {
                "INT64_MIN".to_string()
            } else if v < 0 {
                format!("(-INT64_C({}))", -v)
            } else {
                format!("INT64_C({v})")
            }
        }
        DType::U64 => format!("UINT64_C({})", v as u64),
        DType::I32 => {
            let v = v as i32;
            if v == i32::MIN {
                "INT32_MIN".to_string()
            } else if v < 0 {
                format!("(-{})", -v)
            } else {
                v.to_string()
            }
        }
        DType::U32 => format!("{}u", v as u32),
        DType::I16 => format!("((int16_t){})", wrap_paren(v as i16 as i64)),
        DType::I8 => format!("((int8_t){})", wrap_paren(v as i8 as i64)),
        DType::U16 => format!("((uint16_t){})", v as u16),
        DType::U8 => format!("((uint8_t){})", v as u8),
        DType::F32 => format!("((float){})", wrap_paren(v)),
        _ => format!("((double){})", wrap_paren(v)),
    }
}

fn wrap_paren(v: i64) -> String {
    if v < 0 {
        format!("({v})")
    } else {
        v.to_string()
    }
}

/// A float constant of a float dtype: the shortest decimal that reads back to the same value
/// (`f` suffix for float32), or `INFINITY`/`NAN`.
fn float_literal(x: f64, dt: DType) -> String {
    let f32_ = dt == DType::F32;
    let cty = if f32_ { "float" } else { "double" };
    if x.is_nan() {
        return format!("(({cty})NAN)");
    }
    if x.is_infinite() {
        let sign = if x < 0.0 { "-" } else { "" };
        return format!("({sign}({cty})INFINITY)");
    }
    let text = if f32_ {
        format!("{:?}f", x as f32)
    } else {
        format!("{x:?}")
    };
    if text.starts_with('-') {
        format!("({text})")
    } else {
        text
    }
}

/// The lowest (`max = false`) or highest finite value of `dt`.
fn limit_literal(dt: DType, max: bool) -> String {
    let s = match (dt, max) {
        (DType::Bool, m) => return (if m { "true" } else { "false" }).to_string(),
        (DType::F32, false) => "(-FLT_MAX)",
        (DType::F32, true) => "FLT_MAX",
        (DType::F64, false) => "(-DBL_MAX)",
        (DType::F64, true) => "DBL_MAX",
        (DType::I8, false) => "((int8_t)INT8_MIN)",
        (DType::I8, true) => "((int8_t)INT8_MAX)",
        (DType::I16, false) => "((int16_t)INT16_MIN)",
        (DType::I16, true) => "((int16_t)INT16_MAX)",
        (DType::I32, false) => "INT32_MIN",
        (DType::I32, true) => "INT32_MAX",
        (DType::I64, false) => "INT64_MIN",
        (DType::I64, true) => "INT64_MAX",
        (DType::U8, false) => "((uint8_t)0)",
        (DType::U8, true) => "((uint8_t)UINT8_MAX)",
        (DType::U16, false) => "((uint16_t)0)",
        (DType::U16, true) => "((uint16_t)UINT16_MAX)",
        (DType::U32, false) => "0u",
        (DType::U32, true) => "UINT32_MAX",
        (DType::U64, false) => "UINT64_C(0)",
        (DType::U64, true) => "UINT64_MAX",
        _ => "0",
    };
    s.to_string()
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

/// Text safe inside a `/* */` comment.
fn comment_safe(s: &str) -> String {
    s.replace("*/", "* /").replace(['\n', '\r'], " ")
}

/// The fixed part of every source: includes, the argument union, helpers, thread control.
fn write_prelude(out: &mut String, func_name: &str) {
    let _ = writeln!(
        out,
        "/* Generated by sparsetir from function `{}` (stage III). Do not edit. */",
        comment_safe(func_name)
    );
    out.push_str(PRELUDE);
}

const PRELUDE: &str = r#"#include <stdint.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <float.h>
#ifdef _OPENMP
#include <omp.h>
#endif

typedef union { void* ptr; int64_t i; double f; } sparsetir_arg;

#define SPTIR_MINMAX(S, T) \
    static inline T sptir_min_##S(T a, T b) { return a < b ? a : b; } \
    static inline T sptir_max_##S(T a, T b) { return a > b ? a : b; }
#define SPTIR_SIGNED(S, T, U) \
    SPTIR_MINMAX(S, T) \
    static inline T sptir_floordiv_##S(T a, T b) { \
        T q = (T)(a / b); \
        return (a % b != 0 && ((a < 0) != (b < 0))) ? (T)(q - 1) : q; \
    } \
    static inline T sptir_floormod_##S(T a, T b) { \
        T r = (T)(a % b); \
        return (r != 0 && ((r < 0) != (b < 0))) ? (T)(r + b) : r; \
    } \
    static inline T sptir_abs_##S(T a) { return a < 0 ? (T)((U)0 - (U)a) : a; }
SPTIR_SIGNED(i8, int8_t, uint8_t)
SPTIR_SIGNED(i16, int16_t, uint16_t)
SPTIR_SIGNED(i32, int32_t, uint32_t)
SPTIR_SIGNED(i64, int64_t, uint64_t)
SPTIR_MINMAX(u8, uint8_t)
SPTIR_MINMAX(u16, uint16_t)
SPTIR_MINMAX(u32, uint32_t)
SPTIR_MINMAX(u64, uint64_t)
static inline float sptir_floordiv_f32(float a, float b) { return floorf(a / b); }
static inline double sptir_floordiv_f64(double a, double b) { return floor(a / b); }
static inline float sptir_floormod_f32(float a, float b) {
    float r = fmodf(a, b);
    return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r;
}
static inline double sptir_floormod_f64(double a, double b) {
    double r = fmod(a, b);
    return (r != 0.0 && ((r < 0.0) != (b < 0.0))) ? r + b : r;
}

void sparsetir_set_num_threads(int32_t n) {
#ifdef _OPENMP
    if (n > 0) {
        omp_set_num_threads(n);
    }
#else
    (void)n;
#endif
}

"#;
