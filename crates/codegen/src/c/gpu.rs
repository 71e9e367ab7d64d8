//! The CUDA side of the stage III writer: the same walk as the C target, with kernels cut at
//! the top-level statements, thread-bound loops read from `threadIdx`/`blockIdx`, launch
//! dimensions inferred from the bound loops' extents, barriers between block-level statements
//! that share memory, warp-shuffle cross-thread reductions, and reductions into one element kept
//! in a register.

use std::collections::{BTreeMap, HashMap};

use crate::cuda::{CudaKernel, CudaModule, KernelArg, LaunchExpr, TempBuffer};

use super::*;

mod launch;
mod launch_fusion;
pub(crate) mod mma;
mod pipeline;
pub use pipeline::CP_ASYNC_PRELUDE;
mod tma;
pub use tma::TMA_PRELUDE;
mod cuda_prelude;
mod fill_start;
use cuda_prelude::CUDA_PRELUDE;
mod reduce;
mod shared_window;
mod sync;
mod vector_loads;
mod zero_start;

pub(crate) use mma::{AStage, SsPass};
pub(crate) use sync::{Divergence, Pending};

/// Blocks launched for a `blockIdx` loop whose extent is read from memory: they stride over it
/// (fewer where the extent's bound, from the buffers' `T.assume_buffer_domain`, is smaller).
pub const GRID_STRIDE_BLOCKS: i64 = 4096;

/// Loop annotation (CUDA): unroll the loop by this factor (`#pragma unroll N`).
pub const UNROLL_FACTOR_ATTR: &str = "unroll_factor";

/// Which language the writer produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// C11 + OpenMP.
    C,
    /// CUDA C++ (see [`crate::cuda`]).
    Cuda,
}

/// The thread tags, in launch-dimension order.
pub(crate) const GRID_TAGS: [&str; 3] = ["blockIdx.x", "blockIdx.y", "blockIdx.z"];
pub(crate) const BLOCK_TAGS: [&str; 3] = ["threadIdx.x", "threadIdx.y", "threadIdx.z"];

/// The shared memory a block may declare statically.
pub(crate) const STATIC_SHARED_BYTES: u64 = 48 * 1024;

/// The most shared memory a block may use once its kernel opts in (227 KiB on sm_90; an sm_80
/// GPU allows 163 KiB, which the runtime checks at launch).
pub(crate) const MAX_SHARED_BYTES: u64 = 227 * 1024;

/// The state of the kernel being written.
#[derive(Default)]
pub(crate) struct KernelCtx {
    /// Launch dimension of every thread tag the kernel uses.
    dims: HashMap<String, LaunchExpr>,
    /// Buffers this kernel never stores to (read through `__ldg`).
    readonly: HashSet<BufferId>,
    /// Bytes of shared memory declared so far.
    shared_bytes: u64,
    /// The shared arrays `declare_shared` declared: element type, name, elements, bytes
    /// (made dynamic where the kernel's total passes the static limit).
    shared_decls: Vec<(String, String, i64, u64)>,
    /// `warp` buffers: elements of each warp's slice.
    warp_slices: HashMap<BufferId, i64>,
    /// Enclosing `threadIdx` loops being written, and how many of them are guarded.
    thread_depth: usize,
    /// The thread tags of the enclosing bound loops, and their variables.
    bound: Vec<String>,
    bound_vars: Vec<VarId>,
    /// Variables whose value may differ between the threads of a block (thread indices and
    /// what is computed from them).
    dependent: HashSet<VarId>,
    /// Enclosing conditions and loops whose outcome may differ between the threads of a block:
    /// a `__syncthreads()` is only written where this is 0.
    divergent: usize,
    /// Variables whose value may differ between the lanes of a warp (`threadIdx.x` and what is
    /// computed from it), and the enclosing conditions and loops that depend on one: where
    /// this is 0 and `blockDim.x` is 32, every warp runs the code as one (tensor cores).
    lane_dependent: HashSet<VarId>,
    lane_divergent: usize,
    /// Whether a block may have more than one thread.
    multi_thread: bool,
    /// In a kernel that runs several nests in one launch (see [`launch_fusion`]): the C names of
    /// the part's own block index and grid width along `blockIdx.x`.
    block_x: Option<(String, String)>,
    guarded_thread_depth: usize,
    /// Whether the kernel's tensor cores read a shared window through a descriptor (the async
    /// proxy): the threads that write it fence before every barrier.
    async_shared: bool,
    /// The windows the tensor copy engine fills (`tma.rs`).
    tma: Vec<tma::TmaWindow>,
    /// Other shared arrays the copy engine fills (aligned as its windows are).
    tma_dst: Vec<String>,
    /// Tensor maps the kernel's body asked for (a staged `A`, `mma/stage_a.rs`): the mapped
    /// buffer, the argument's name and the view; appended to the arguments once the body is
    /// written.
    late_maps: Vec<(MapOf, String, crate::cuda::TensorMapArg)>,
}

impl KernelCtx {
    /// Whether the kernel is persistent (`tma.rs`'s `TMA_PERSISTENT_ATTR`): its `blockIdx.x`/`.y`
    /// loops read the tile of the tile loop's turn (`Writer::write_tile_loop`).
    fn persistent(&self) -> bool {
        self.tma.iter().any(|t| t.persistent.is_some())
    }
}

/// The buffer a late tensor map views.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MapOf {
    /// A buffer of the function (a kernel argument).
    Buffer(BufferId),
    /// The writer's derived buffer of that index (`Writer::derived`).
    Derived(usize),
}

/// A device buffer the writer derives from an input buffer for a kernel's own use (see
/// [`crate::cuda::TempFill`]): the 2:4 positions or values `source` (`rows` rows of
/// `row_slots`) laid out for sparse tensor cores (`mma/stage_a.rs`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Derived {
    pub source: BufferId,
    pub name: String,
    pub rows: i64,
    pub row_slots: i64,
    /// The 8-bit positions packed (`u32` words), or the values laid out run by run (of the
    /// values' type).
    pub kind: DerivedKind,
}

/// What a [`Derived`] buffer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DerivedKind {
    /// `TempFill::TensorCoreMetadata`: one `u32` word per row and run.
    Metadata,
    /// `TempFill::TensorCoreValues`: the values, of this type, run-major, the tiles of each
    /// block of `16 warps units` rows unit-major (`(1, 1)`: in row order).
    Values(DType, (i64, i64)),
}

impl Derived {
    /// The element type of the buffer.
    pub(crate) fn dtype(&self) -> DType {
        match self.kind {
            DerivedKind::Metadata => DType::U32,
            DerivedKind::Values(dt, _) => dt,
        }
    }
}

/// Flattens nested sequences into their statements.
fn flatten<'a>(s: &'a Stmt, out: &mut Vec<&'a Stmt>) {
    match s {
        Stmt::Seq(v) => v.iter().for_each(|c| flatten(c, out)),
        _ => out.push(s),
    }
}

/// Whether some loop of `func` satisfies `p` (an annotation a prelude of the source serves:
/// `double_buffer`, `stage_a`, `tma`).
fn any_loop(func: &PrimFunc, p: impl Fn(&For) -> bool) -> bool {
    let mut found = false;
    func.body.visit(&mut |s| {
        if let Stmt::For(f) = s {
            found |= p(f);
        }
    });
    found
}

fn loads_buffer(e: &Expr, b: BufferId) -> bool {
    let mut hit = false;
    e.visit(&mut |x| hit |= matches!(x, Expr::Load { buffer, .. } if *buffer == b));
    hit
}

/// The loop over `v` in `s`.
fn find_loop(s: &Stmt, v: VarId) -> Option<&For> {
    if let Stmt::For(f) = s {
        if f.var == v {
            return Some(f);
        }
    }
    match s {
        Stmt::Seq(items) => items.iter().find_map(|c| find_loop(c, v)),
        Stmt::For(f) => find_loop(&f.body, v),
        Stmt::While(w) => find_loop(&w.body, v),
        Stmt::Let(l) => find_loop(&l.body, v),
        Stmt::Block(b) => b
            .init
            .as_ref()
            .and_then(|i| find_loop(i, v))
            .or_else(|| find_loop(&b.body, v)),
        Stmt::If(i) => find_loop(&i.then_case, v)
            .or_else(|| i.else_case.as_ref().and_then(|e| find_loop(e, v))),
        _ => None,
    }
}

/// The end of loop `f` (`min + extent`, or `extent` from 0).
fn loop_end(f: &For) -> Expr {
    if const_int(&f.min) == Some(0) {
        f.extent.clone()
    } else {
        Expr::add(f.min.clone(), f.extent.clone())
    }
}

/// The bindings of a block's iterators, by iterator.
fn bindings(b: &Block) -> HashMap<VarId, Expr> {
    b.iters
        .iter()
        .map(|it| (it.var, it.binding.clone()))
        .collect()
}

fn subst(e: &Expr, map: &HashMap<VarId, Expr>) -> Expr {
    let mut e = e.clone();
    e.rewrite_post_order(&mut |x| {
        if let Expr::Var(v) = x {
            if let Some(r) = map.get(v) {
                *x = r.clone();
            }
        }
    });
    e
}

/// Buffers `s` stores to (plain stores and atomics) and reads from.
fn accesses(s: &Stmt, writes: &mut HashSet<BufferId>, reads: &mut HashSet<BufferId>) {
    s.visit(&mut |x| {
        if let Stmt::Store(st) = x {
            writes.insert(st.buffer);
        }
        x.for_each_expr(|e| {
            e.visit(&mut |y| match y {
                Expr::Call {
                    op: Intrinsic::AtomicAdd,
                    args,
                    ..
                } => {
                    if let Some(Expr::Load { buffer, .. }) = args.first() {
                        writes.insert(*buffer);
                    }
                }
                Expr::Load { buffer, .. } => {
                    reads.insert(*buffer);
                }
                _ => {}
            })
        });
    });
}

impl<'f> Writer<'f> {
    /// A buffer each thread has its own copy of: allocated inside a kernel, not shared.
    pub(super) fn is_per_thread(&self, b: BufferId) -> bool {
        self.func.buffers.get(b).is_some_and(|x| {
            matches!(x.decl, BufferDecl::Alloc)
                && !self.func.buffer_decls.contains(&b)
                && !matches!(x.scope.as_str(), "shared" | "shared.dyn" | "warp")
        })
    }

    fn is_shared(&self, b: BufferId) -> bool {
        self.func
            .buffers
            .get(b)
            .is_some_and(|x| matches!(x.scope.as_str(), "shared" | "shared.dyn" | "warp"))
    }

    /// For a `warp` buffer of the kernel: the start of the calling warp's slice.
    pub(super) fn warp_slice(&self, b: BufferId) -> Option<String> {
        let k = self.kernel.as_ref()?;
        let size = k.warp_slices.get(&b)?;
        Some(format!(
            "(int64_t)((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) / \
             32u) * {size}"
        ))
    }

    // ------------------------------------------------------------------ module

    /// Writes the CUDA module: one kernel per top-level statement of the body.
    pub(crate) fn write_cuda_module(&mut self) -> Res<CudaModule> {
        let func = self.func;
        // Parameters: buffers by their first matched buffer, scalars by value.
        let mut temps_decl = Vec::new();
        for &b in &func.buffer_decls {
            if let Some(buf) = func.buffers.get(b) {
                // A function-level `shared` buffer is per thread block: declared in the one
                // kernel that uses it, as the window a block touches (`shared_window`).
                if let BufferDecl::Alloc = buf.decl {
                    if self.is_shared(b) {
                        self.shared_temps.push(b);
                    } else {
                        temps_decl.push(b);
                    }
                }
            }
        }
        let mut params = Vec::new();
        // (param index, first buffer, other users) for handles; (param index, var) for scalars.
        let mut ptrs: Vec<(usize, BufferId, Vec<BufferId>)> = Vec::new();
        let mut scalars: Vec<(usize, VarId)> = Vec::new();
        for (k, info) in self.param_layout()?.into_iter().enumerate() {
            params.push(info.param);
            match info.kind {
                ParamLayout::Unmatched => {}
                ParamLayout::Buffer { first, others } => ptrs.push((k, first, others)),
                ParamLayout::Scalar(p) => scalars.push((k, p)),
            }
        }
        // Intermediate buffers of the function live in device memory the runtime allocates.
        let mut temps = Vec::new();
        for &b in &temps_decl {
            let buf = &func.buffers[b];
            self.span = buf.span;
            self.ctype(buf.dtype, &format!("buffer `{}`", buf.name))?;
            let extents = self.dense_extents(b)?;
            if !buf.strides.is_empty() || buf.extra_storage.is_some() {
                return Err(self.unsupported(
                    &format!("buffer `{}`", buf.name),
                    "an intermediate buffer of a CUDA function must be compact",
                ));
            }
            let mut elems = LaunchExpr::Const(1);
            for e in extents {
                let Some(x) = self.launch_expr(e) else {
                    return Err(self.unsupported(
                        &format!("buffer `{}`", buf.name),
                        "its size must be an expression of the scalar parameters",
                    ));
                };
                elems = LaunchExpr::Mul(Box::new(elems), Box::new(x));
            }
            temps.push(TempBuffer {
                name: buf.name.clone(),
                dtype: buf.dtype,
                elems,
                fill: None,
            });
        }
        self.span = func.span;
        // Derived buffers the kernels ask for come after the function's own.
        self.derived_base = params.len() + temps.len();

        let mut tops = Vec::new();
        flatten(&func.body, &mut tops);
        let mut kernels = Vec::new();
        let mut body = String::new();
        let tops: Vec<&Stmt> = tops
            .into_iter()
            .filter(|s| !matches!(s, Stmt::AssumeBufferDomain { .. }) && !s.is_empty())
            .collect();
        let groups = if launch_fusion::requested(func) {
            launch_fusion::groups(func, &tops)
        } else {
            tops.iter().map(|s| vec![*s]).collect()
        };
        let zeros = zero_start::zeros_at_start(self, &groups);
        let mut bodies: Vec<String> = Vec::new();
        let mut fill_before: Option<BufferId> = None;
        for (k, (parts, (zeros, fill))) in groups.into_iter().zip(zeros).enumerate() {
            // Buffers all zeros at the kernel's start that one product nest alone stores into:
            // their accumulator plans start at zero (`zero_start.rs`).
            let uses: HashMap<BufferId, zero_start::ProductUse> = zeros
                .into_iter()
                .map(|b| (b, zero_start::product_use(&parts, b)))
                .collect();
            self.zero_tiles = uses
                .iter()
                .filter(|(_, u)| u.sole_writer())
                .map(|(b, _)| *b)
                .collect();
            let kernel = self.write_kernel(k, &parts, &ptrs, &scalars, &temps_decl)?;
            self.zero_tiles.clear();
            // The zero fill just before, dead where this kernel overwrites its buffer whole
            // without reading it.
            let covered = std::mem::take(&mut self.zero_covered);
            let dead = fill_before
                .filter(|b| covered.contains(b))
                .filter(|b| uses.get(b).is_some_and(|u| u.sole_user()));
            if dead.is_some() {
                bodies.pop();
                kernels.pop();
            }
            bodies.push(std::mem::take(&mut self.out));
            kernels.push(kernel);
            fill_before = fill;
        }
        for b in bodies {
            body.push_str(&b);
            body.push('\n');
        }
        let mut source = String::new();
        let _ = writeln!(
            source,
            "/* Generated by sparsetir from function `{}` (stage III, CUDA). Do not edit. */",
            comment_safe(&func.name)
        );
        source.push_str(CUDA_PRELUDE);
        let tensor_cores = mma::uses_mma(func);
        if half::uses_half(func) || tensor_cores {
            source.push_str(&half::cuda_prelude());
        }
        if tensor_cores {
            source.push_str(mma::MMA_PRELUDE);
        }
        if !self.wgmma_forms.is_empty() {
            source.push_str(&mma::wgmma_prelude(&self.wgmma_forms));
        }
        if !self.wgmma_ss_forms.is_empty() {
            source.push_str(&mma::wgmma_ss_prelude(&self.wgmma_ss_forms));
        }
        if any_loop(func, mma::stages_a) {
            source.push_str(mma::A_STAGE_PRELUDE);
        }
        if any_loop(func, Writer::double_buffered) {
            if !(half::uses_half(func) || tensor_cores) {
                source.push_str(&half::cuda_prelude());
            }
            source.push_str(pipeline::CP_ASYNC_PRELUDE);
        }
        if any_loop(func, tma::tma_requested) {
            source.push_str(tma::TMA_PRELUDE);
        }
        source.push_str(&body);
        for d in std::mem::take(&mut self.derived) {
            let from = self.param_of(&ptrs, d.source, "the derived buffer's source")?;
            let (rows, row_slots) = (d.rows, d.row_slots);
            let (elems, fill) = match d.kind {
                DerivedKind::Metadata => (
                    rows * row_slots / 16,
                    crate::cuda::TempFill::TensorCoreMetadata {
                        from,
                        rows,
                        row_slots,
                    },
                ),
                DerivedKind::Values(_, (warps, units)) => (
                    rows * row_slots,
                    crate::cuda::TempFill::TensorCoreValues {
                        from,
                        rows,
                        row_slots,
                        warps,
                        units,
                    },
                ),
            };
            temps.push(TempBuffer {
                dtype: d.dtype(),
                name: d.name,
                elems: LaunchExpr::Const(elems),
                fill: Some(fill),
            });
        }
        Ok(CudaModule {
            source,
            func: func.name.clone(),
            params,
            temps,
            kernels,
            arch_specific: !self.wgmma_forms.is_empty(),
        })
    }

    /// The parameter (index) that passes buffer `b` among the pointer parameters `ptrs` (`what`
    /// names `b` in the error where none does).
    fn param_of(
        &self,
        ptrs: &[(usize, BufferId, Vec<BufferId>)],
        b: BufferId,
        what: &str,
    ) -> Res<usize> {
        ptrs.iter()
            .find(|(_, first, others)| *first == b || others.contains(&b))
            .map(|(k, _, _)| *k)
            .ok_or_else(|| {
                self.invalid(format!(
                    "{what} `{}` is not a kernel argument",
                    self.func.buffers[b].name
                ))
            })
    }

    /// The C text of thread index `tag` (`blockIdx.x` is the part's own in a fused launch).
    /// In a persistent kernel, `blockIdx.x`/`.y` are the coordinates of the tile.
    fn index_text(&self, tag: &str) -> String {
        if self.kernel.as_ref().is_some_and(KernelCtx::persistent) {
            match tag {
                "blockIdx.x" => return "sptir_tile_x".to_string(),
                "blockIdx.y" => return "sptir_tile_y".to_string(),
                _ => {}
            }
        }
        match self.kernel.as_ref().and_then(|k| k.block_x.as_ref()) {
            Some((bx, _)) if tag == "blockIdx.x" => bx.clone(),
            _ => tag.to_string(),
        }
    }

    /// The C text of the grid width along `tag` (a `blockIdx` tag; the tiles along it in a
    /// persistent kernel).
    fn grid_text(&self, tag: &str) -> String {
        if self.kernel.as_ref().is_some_and(KernelCtx::persistent) {
            match tag {
                "blockIdx.x" => return "sptir_tiles_x".to_string(),
                "blockIdx.y" => return "sptir_tiles_y".to_string(),
                _ => {}
            }
        }
        match self.kernel.as_ref().and_then(|k| k.block_x.as_ref()) {
            Some((_, g)) if tag == "blockIdx.x" => g.clone(),
            _ => tag.replace("blockIdx", "gridDim"),
        }
    }

    /// The body `s` of a persistent kernel (`tma.rs`'s `TMA_PERSISTENT_ATTR`) over the tiles of
    /// the logical grid `grid` (x first): turn `t` of a block takes tile `blockIdx.x + t
    /// gridDim.x`; with clusters of `cx` blocks along x (a divisor of both the tiles along x and
    /// the launched blocks) the blocks of a cluster take consecutive tiles of the same row. With
    /// clusters of `cx × cy` blocks, `cy` > 1 (the launch `cx n × cy` blocks), turn `t` of
    /// cluster `c` takes group `c + t n` of `cx × cy` tiles (x first), each block the tile of its
    /// rank in it. The cluster's barrier after the run loop comes after the tile loop.
    fn write_tile_loop(
        &mut self,
        s: &'f Stmt,
        grid: &[LaunchExpr; 3],
        (cx, cy): (i64, i64),
    ) -> Res<()> {
        let turn = tma::TILE_TURN;
        let (gx, gy) = (self.launch_text(&grid[0]), self.launch_text(&grid[1]));
        self.line("{");
        self.indent += 1;
        self.line(&format!(
            "const int32_t sptir_tiles_x = (int32_t)({gx}), sptir_tiles_y = (int32_t)({gy});"
        ));
        if cy > 1 {
            self.line(&format!(
                "const int32_t sptir_groups_x = sptir_tiles_x / {cx}, sptir_clusters = \
                 (int32_t)(gridDim.x / {cx});"
            ));
            self.line(&format!(
                "for (int32_t {turn} = 0, sptir_group = (int32_t)(blockIdx.x / {cx}); \
                 sptir_group < sptir_groups_x * (sptir_tiles_y / {cy}); ++{turn}, sptir_group += \
                 sptir_clusters) {{"
            ));
            self.indent += 1;
            self.line(&format!(
                "const int32_t sptir_tile_x = sptir_group % sptir_groups_x * {cx} + \
                 (int32_t)(blockIdx.x % {cx}), sptir_tile_y = sptir_group / sptir_groups_x * {cy} \
                 + (int32_t)blockIdx.y;"
            ));
        } else {
            self.line(&format!(
                "for (int32_t {turn} = 0, sptir_tile = (int32_t)blockIdx.x; sptir_tile < \
                 sptir_tiles_x * sptir_tiles_y; ++{turn}, sptir_tile += (int32_t)gridDim.x) {{"
            ));
            self.indent += 1;
            self.line(
                "const int32_t sptir_tile_x = sptir_tile % sptir_tiles_x, sptir_tile_y = \
                 sptir_tile / sptir_tiles_x;",
            );
        }
        let r = self.write_stmt(s);
        self.indent -= 1;
        self.line("}");
        if cx * cy > 1 {
            // No block exits while a peer's copies or arrivals may still reach it.
            self.line("sptir_cluster_sync();");
        }
        self.indent -= 1;
        self.line("}");
        r
    }

    /// Writes the parts of a fused launch (see [`launch_fusion`]): part `k` runs in the blocks
    /// `[off_k, off_k + g_k)` along `blockIdx.x`, with that range as its own grid.
    fn write_fused_parts(
        &mut self,
        parts: &[&'f Stmt],
        part_dims: &[HashMap<String, LaunchExpr>],
    ) -> Res<()> {
        let mut off = LaunchExpr::Const(0);
        for (k, (s, dims)) in parts.iter().zip(part_dims).enumerate() {
            let g = dims
                .get("blockIdx.x")
                .cloned()
                .unwrap_or(LaunchExpr::Const(1));
            let (off_t, g_t) = (self.launch_text(&off), self.launch_text(&g));
            let (bx, gx) = (format!("sptir_bx{k}"), format!("sptir_gx{k}"));
            self.line("{");
            self.indent += 1;
            self.line(&format!("const int32_t {gx} = (int32_t)({g_t});"));
            self.line(&format!(
                "const int32_t {bx} = (int32_t)blockIdx.x - (int32_t)({off_t});"
            ));
            self.line(&format!("if ({bx} >= 0 && {bx} < {gx}) {{"));
            self.indent += 1;
            let saved = self.kernel.as_mut().map(|kc| {
                let old_dim = kc.dims.insert("blockIdx.x".to_string(), g.clone());
                let old_bx = kc.block_x.replace((bx.clone(), gx.clone()));
                (old_dim, old_bx)
            });
            let r = self.write_stmt(s);
            if let (Some(kc), Some((old_dim, old_bx))) = (self.kernel.as_mut(), saved) {
                match old_dim {
                    Some(d) => kc.dims.insert("blockIdx.x".to_string(), d),
                    None => kc.dims.remove("blockIdx.x"),
                };
                kc.block_x = old_bx;
            }
            r?;
            self.indent -= 1;
            self.line("}");
            self.indent -= 1;
            self.line("}");
            off = LaunchExpr::Add(Box::new(off), Box::new(g));
        }
        Ok(())
    }

    /// Writes the kernel of top-level statement `s`.
    fn write_kernel(
        &mut self,
        index: usize,
        parts: &[&'f Stmt],
        ptrs: &[(usize, BufferId, Vec<BufferId>)],
        scalars: &[(usize, VarId)],
        temps: &[BufferId],
    ) -> Res<CudaKernel> {
        let func = self.func;
        // Launch dimensions: the largest extent bound to each tag (per part; parts fused into
        // one launch get blockIdx.x ranges of their own, one after the other).
        let mut part_dims = Vec::new();
        for s in parts {
            let mut extents: BTreeMap<String, Vec<LaunchExpr>> = BTreeMap::new();
            self.collect_bound_loops(s, false, &mut extents)?;
            let mut dims = HashMap::new();
            for (tag, exts) in extents {
                let mut it = exts.into_iter();
                let mut d = it.next().unwrap_or(LaunchExpr::Const(1));
                for e in it {
                    if e != d {
                        d = LaunchExpr::Max(Box::new(d), Box::new(e));
                    }
                }
                dims.insert(tag, d);
            }
            part_dims.push(dims);
        }
        let dims = launch_fusion::merge_dims(&part_dims);
        let dim_of = |t: &str| dims.get(t).cloned().unwrap_or(LaunchExpr::Const(1));
        let grid = [
            dim_of(GRID_TAGS[0]),
            dim_of(GRID_TAGS[1]),
            dim_of(GRID_TAGS[2]),
        ];
        let block = [
            dim_of(BLOCK_TAGS[0]),
            dim_of(BLOCK_TAGS[1]),
            dim_of(BLOCK_TAGS[2]),
        ];
        let threads = block
            .iter()
            .map(|d| d.eval(&|_| None))
            .try_fold(1i64, |acc, d| Some(acc * d?));
        if let Some(t) = threads {
            if !(1..=1024).contains(&t) {
                return Err(self.unsupported(
                    "thread block",
                    format!("kernel {index} has {t} threads per block; a block holds 1 to 1024"),
                ));
            }
        }
        let (mut writes, mut reads) = (HashSet::new(), HashSet::new());
        for s in parts {
            accesses(s, &mut writes, &mut reads);
        }
        let stored = |b: &BufferId, others: &[BufferId]| {
            writes.contains(b) || others.iter().any(|o| writes.contains(o))
        };
        let mut readonly = HashSet::new();
        // Arguments: every parameter, then every intermediate buffer.
        let mut args = Vec::new();
        let mut sig = Vec::new();
        for (k, first, others) in ptrs {
            let ro = !stored(first, others);
            let elem = func.buffers[*first].dtype;
            let ct = c_type(elem).unwrap_or("float");
            let name = self.buf_name(*first)?.to_string();
            sig.push(format!(
                "{}({ct}) {name}",
                if ro { "SPTIR_IN" } else { "SPTIR_OUT" }
            ));
            if ro {
                readonly.insert(*first);
                readonly.extend(others.iter().copied());
            }
            args.push(KernelArg {
                param: *k,
                name,
                dtype: elem,
                ctype: ct.to_string(),
                pointer: true,
                readonly: ro,
                tensor_map: None,
            });
        }
        for (k, v) in scalars {
            let dt = func.vars[*v].dtype;
            let ct = c_type(dt).unwrap_or("int32_t");
            let name = self.var_names[v.index()].clone();
            sig.push(format!("{ct} {name}"));
            args.push(KernelArg {
                param: *k,
                name,
                dtype: dt,
                ctype: ct.to_string(),
                pointer: false,
                readonly: false,
                tensor_map: None,
            });
        }
        for (t, &b) in temps.iter().enumerate() {
            let ro = !writes.contains(&b);
            let elem = func.buffers[b].dtype;
            let ct = c_type(elem).unwrap_or("float");
            let name = self.buf_name(b)?.to_string();
            sig.push(format!(
                "{}({ct}) {name}",
                if ro { "SPTIR_IN" } else { "SPTIR_OUT" }
            ));
            if ro {
                readonly.insert(b);
            }
            args.push(KernelArg {
                param: func.params.len() + t,
                name,
                dtype: elem,
                ctype: ct.to_string(),
                pointer: true,
                readonly: ro,
                tensor_map: None,
            });
        }
        // Arguments in parameter order (pointers and scalars interleaved as declared).
        let mut order: Vec<usize> = (0..args.len()).collect();
        order.sort_by_key(|&i| args[i].param);
        let mut args: Vec<KernelArg> = order.iter().map(|&i| args[i].clone()).collect();
        let mut sig: Vec<String> = order.iter().map(|&i| sig[i].clone()).collect();
        // The tensor maps of the windows the copy engine fills, after the other arguments.
        let tma = self.tma_windows(parts)?;
        for t in &tma {
            let k = self.param_of(ptrs, t.global, "the copy engine's source")?;
            let (arg, decl) = self.tma_arg(t, k)?;
            args.push(arg);
            sig.push(decl);
        }

        // A producer warp (`tma.rs`): one more warp along y.
        let (mut block, mut threads) = (block, threads);
        if let Some(y) = tma.iter().find_map(|t| t.producer) {
            block[1] = LaunchExpr::Const(y + 1);
            threads = threads.map(|n| n + 32);
        }
        let name = format!("{}_kernel{index}", sanitize(&func.name));
        let mut bounds = threads
            .map(|t| format!(" __launch_bounds__({t})"))
            .unwrap_or_default();
        // Blocks in clusters along x where the copy engine multicasts (`tma.rs`).
        let cluster = tma
            .iter()
            .map(|t| (t.cluster, t.cluster_y))
            .max()
            .unwrap_or((1, 1));
        if tma.iter().any(|t| (t.cluster, t.cluster_y) != cluster) {
            return Err(self.unsupported(
                "the kernel's copy-engine windows",
                "they must ask for the same cluster",
            ));
        }
        if cluster != (1, 1) {
            bounds = format!(
                " SPTIR_CLUSTER_DIMS({}, {}, 1){bounds}",
                cluster.0, cluster.1
            );
        }
        // A persistent kernel (`tma.rs`): one nest over a grid of x and y, every window's run
        // loop persistent.
        let persistent = tma.iter().any(|t| t.persistent.is_some());
        if persistent {
            let why = if parts.len() != 1 {
                Some("the kernel runs one nest (not several launches fused)")
            } else if tma.iter().any(|t| t.persistent.is_none()) {
                Some("every run loop of the kernel whose window the copy engine fills is")
            } else if grid[2] != LaunchExpr::Const(1) {
                Some("its grid has no `blockIdx.z`")
            } else {
                None
            };
            if let Some(why) = why {
                return Err(self.unsupported(
                    &format!("kernel {index} annotated `{}`", tma::TMA_PERSISTENT_ATTR),
                    format!("a persistent kernel: {why}"),
                ));
            }
        }
        self.kernel = Some(KernelCtx {
            dims,
            readonly,
            multi_thread: threads != Some(1),
            tma,
            ..KernelCtx::default()
        });
        self.indent = 0;
        let start = self.out.len();
        self.line(&format!(
            "extern \"C\" __global__ void{bounds} {name}({}) {{",
            if sig.is_empty() {
                "void".to_string()
            } else {
                sig.join(", ")
            }
        ));
        self.indent = 1;
        for (_, first, others) in ptrs {
            let fname = self.buf_name(*first)?.to_string();
            for u in others {
                let un = self.buf_name(*u)?.to_string();
                self.line(&format!("auto {un} = {fname};"));
            }
        }
        let mut scoped = Vec::new();
        for (_, first, others) in ptrs {
            for &b in std::iter::once(first).chain(others) {
                self.span = func.buffers[b].span;
                self.declare_strides(b)?;
                scoped.push(b);
            }
        }
        for &b in temps {
            self.declare_strides(b)?;
            scoped.push(b);
        }
        for b in self.shared_temps.clone() {
            if !(writes.contains(&b) || reads.contains(&b)) {
                continue;
            }
            self.declare_shared_window(b, parts)?;
            scoped.push(b);
        }
        self.span = func.span;
        let r = if let [s] = parts {
            if persistent {
                self.write_tile_loop(s, &grid, cluster)
            } else {
                self.write_stmt(s)
            }
        } else {
            self.write_fused_parts(parts, &part_dims)
        };
        self.end_scope(&scoped);
        let ctx = self.kernel.take().unwrap_or_default();
        r?;
        self.indent = 0;
        self.line("}");
        // The tensor maps the body asked for, after the other arguments.
        for (of, map, view) in &ctx.late_maps {
            let (param, dtype) = match *of {
                MapOf::Buffer(b) => (
                    self.param_of(ptrs, b, "the copy engine's source")?,
                    func.buffers[b].dtype,
                ),
                MapOf::Derived(t) => {
                    let d = self
                        .derived
                        .get(t)
                        .ok_or_else(|| self.invalid("a tensor map of no derived buffer"))?;
                    (self.derived_base + t, d.dtype())
                }
            };
            let ct = c_type(dtype).unwrap_or("uint16_t");
            args.push(KernelArg {
                param,
                name: map.clone(),
                dtype,
                ctype: ct.to_string(),
                pointer: true,
                readonly: true,
                tensor_map: Some(view.clone()),
            });
            let Some(end) = self.out[start..].find(") {\n") else {
                return Err(self.invalid("a kernel without its signature"));
            };
            self.out
                .insert_str(start + end, &format!(", SPTIR_TMAP({ct}) {map}"));
        }
        let dynamic_shared_bytes = self.dynamic_shared(&ctx, start);
        Ok(CudaKernel {
            name,
            args,
            grid,
            block,
            shared_bytes: ctx.shared_bytes,
            dynamic_shared_bytes,
            cluster: [cluster.0 as u32, cluster.1 as u32, 1],
            persistent,
        })
    }

    /// Where the kernel written from `start` of the output declares more shared memory than a
    /// block may declare statically (48 KiB): its `declare_shared` arrays rewritten as slices
    /// of the dynamic shared memory, one after the other (each 128-byte aligned). Returns the
    /// dynamic bytes each launch must pass (0 where all is static).
    fn dynamic_shared(&mut self, ctx: &KernelCtx, start: usize) -> u64 {
        // (A kernel whose windows the copy engine fills places them itself: `tma.rs`.)
        if ctx.shared_bytes <= STATIC_SHARED_BYTES && ctx.tma.is_empty() {
            return 0;
        }
        let mut text = self.out.split_off(start);
        let mut off = 0u64;
        for (ct, name, n, bytes) in &ctx.shared_decls {
            if ctx.tma_dst.contains(name)
                || ctx
                    .tma
                    .iter()
                    .any(|t| self.buf_name(t.shared).is_ok_and(|n| n == name))
            {
                off = off.div_ceil(1024) * 1024;
            }
            let decl = format!("SPTIR_SHARED({ct}, {name}, {n});");
            text = text.replacen(
                &decl,
                &format!("SPTIR_SHARED_DYN({ct}, {name}, {n}, {off});"),
                1,
            );
            off += bytes.div_ceil(128) * 128;
        }
        self.out.push_str(&text);
        off
    }

    // ------------------------------------------------------------------ statements

    /// A loop of a CUDA kernel (`write_loop` hands every loop over in the CUDA target).
    pub(super) fn write_cuda_loop(&mut self, f: &For) -> Res<()> {
        match f.kind {
            ForKind::ThreadBinding if !f.thread.as_deref().unwrap_or("").starts_with("vthread") => {
                self.write_thread_loop(f)
            }
            ForKind::Parallel => Err(self.unsupported(
                &format!("parallel loop `{}`", self.func.vars[f.var].name),
                "the CUDA target runs loops on threads: bind the loop to `blockIdx.*` or \
                 `threadIdx.*` instead of `parallel`",
            )),
            _ if mma::Mma::of(f).is_some() => {
                let form = mma::Mma::of(f).unwrap_or(mma::Mma::Fill);
                self.write_mma(f, form)
            }
            _ => {
                if self.simd_acc.is_none() {
                    if let Some(acc) = self.accumulation(f, false) {
                        return self.write_register_accumulation(f, acc);
                    }
                }
                self.write_serial_cuda_loop(f)
            }
        }
    }

    /// A loop each thread runs by itself (serial, unrolled, vectorized: all plain loops here).
    fn write_serial_cuda_loop(&mut self, f: &For) -> Res<()> {
        if f.kind == ForKind::Vectorized && self.write_vector_loads(f)? {
            return Ok(());
        }
        // The row unit loop around the unit loop: the units' `B` fragments first, for every
        // row unit (`mma_share_b` opens a scope; the loop is written inside).
        if self.mma_acc_rows.map(|(r, _)| r) == Some(f.var)
            && self.mma_b_shared.is_none()
            && self.mma_share_b(f)?
        {
            let r = self.write_serial_cuda_loop(f);
            self.mma_b_shared = None;
            self.indent -= 1;
            self.line("}");
            return r;
        }
        // A warpgroup's unit loop: its `A` fragment, then one `wgmma` of all the units.
        if let (true, Some(w)) = (self.mma_acc_unit == Some(f.var), self.mma_warpgroup) {
            if self.a_stage.is_some() {
                self.write_staged_a()?;
            } else if self.a_prefetch.is_some() {
                self.write_prefetched_a(f)?;
            } else if !self.mma_share_a(f)? {
                return Err(self.unsupported(
                    &format!("warpgroup product of loop `{}`", self.func.vars[f.var].name),
                    "its A fragment must not move with the unit loop",
                ));
            }
            let r = self.write_warpgroup_product(f, w);
            self.mma_a_shared = None;
            self.indent -= 1;
            self.line("}");
            return r;
        }
        // The unit loop of several tiles kept in registers: their common `A` fragment first,
        // from its stage where the run loop stages it (`mma/stage_a.rs`). (Both open a scope
        // for it; the loop itself is written inside.)
        if self.mma_acc_unit == Some(f.var) && self.mma_a_shared.is_none() && self.a_stage.is_some()
        {
            self.mma_a_shared = Some(self.write_staged_a()?);
            let r = self.write_serial_cuda_loop(f);
            self.mma_a_shared = None;
            self.indent -= 1;
            self.line("}");
            return r;
        }
        if self.mma_acc_unit == Some(f.var) && self.mma_a_shared.is_none() && self.mma_share_a(f)? {
            let r = self.write_serial_cuda_loop(f);
            self.mma_a_shared = None;
            self.indent -= 1;
            self.line("}");
            return r;
        }
        let (vdt, ct, vname) = self.loop_var_type(f)?;
        let (start, end) = self.loop_range(f, vdt, ct, &vname)?;
        // A tensorized product that accumulates into the same tile in every iteration: its
        // fragment lives in registers across the loop (loaded before, stored after).
        // A fill of the same tile just before the loop (its plan made when the fill was
        // absorbed): the accumulator starts with its value, and the tile is stored even when
        // the loop does not run (as the fill would have).
        let (filled, hoist) = match self.mma_fill_init.take() {
            Some((value, plan)) => (Some(value), Some(plan)),
            None => match self.mma_acc {
                None if self.warp_uniform() => (None, self.mma_accumulator_plan(f)?),
                _ => (None, None),
            },
        };
        let v = self.bind(f.var)?;
        if let Some(plan) = &hoist {
            self.line("{");
            self.indent += 1;
            self.line("const int32_t sptir_g = (int32_t)(threadIdx.x >> 2), sptir_t = (int32_t)(threadIdx.x & 3);");
            for d in &plan.warp_decl {
                self.line(d);
            }
            // A producer warp (`tma.rs`) holds no products.
            let guard = match (plan.guard.as_deref(), self.producer_of(f)) {
                (g, Some(y)) => Some(match g {
                    Some(g) => format!("({g}) && threadIdx.y < {y}"),
                    None => format!("threadIdx.y < {y}"),
                }),
                (g, None) => g.map(str::to_string),
            };
            let guard = guard.as_deref();
            if let Some(v) = &filled {
                self.line(&format!(
                    "const bool sptir_acc_live = {};",
                    guard.unwrap_or("true")
                ));
                match plan.unit {
                    // One fragment per unit tile, every element the filled value.
                    Some(_) => {
                        let tile = format!("{{{v}, {v}, {v}, {v}}}");
                        let all = vec![tile; plan.texts.len()].join(", ");
                        self.line(&format!(
                            "float sptir_acc[{}][4] = {{{all}}};",
                            plan.texts.len()
                        ));
                    }
                    None => self.line(&format!("float sptir_acc[4] = {{{v}, {v}, {v}, {v}}};")),
                }
            } else {
                let live = match guard {
                    Some(g) => format!("{start} < {end} && ({g})"),
                    None => format!("{start} < {end}"),
                };
                self.line(&format!("const bool sptir_acc_live = {live};"));
                // Tiles still all zeros: the registers start at zero instead of loading them.
                let zero = self.plan_starts_at_zero(f, plan)?;
                // One fragment, or one per tile of the unit loop.
                match (plan.unit, zero) {
                    (Some(_), false) => {
                        self.line(&format!("float sptir_acc[{}][4];", plan.texts.len()))
                    }
                    (Some(_), true) => {
                        self.line(&format!("float sptir_acc[{}][4] = {{}};", plan.texts.len()))
                    }
                    (None, _) => self.line("float sptir_acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};"),
                }
                if !zero {
                    self.acc_transfer(plan, true);
                }
            }
            self.mma_acc = Some(plan.nest);
            self.mma_acc_unit = plan.unit;
            self.mma_acc_rows = plan.rows;
            self.mma_unit_live = plan.live();
            self.mma_warpgroup = plan.warpgroup;
        }
        // A double-buffered copy: the first iteration's before the loop. A warpgroup's run
        // loop may stage its products' A with it (`mma/stage_a.rs`).
        let pipelined = self.pipeline_items(f)?;
        let staged = self.a_stage_plan(f, hoist.as_ref(), pipelined.is_some(), &start)?;
        let staging = staged.is_some();
        if let Some(st) = staged {
            self.a_stage = Some(st);
        }
        if let Some(items) = &pipelined {
            self.write_pipeline_prologue(f, items[0], &start, &end)?;
        }
        // A warpgroup's double-buffered run loop: each run's A fragments and metadata read
        // one run ahead, into registers (`warpgroup.rs`), unless staged.
        let prefetch = match (&hoist, &pipelined) {
            (Some(plan), Some(_)) if plan.warpgroup.is_some() && !staging => {
                self.write_a_prefetch_prologue(f, plan, &start)?;
                true
            }
            _ => false,
        };
        // (The pragma right before the `for`, after any accumulator prologue.)
        if f.kind == ForKind::Unrolled {
            self.pragma("unroll");
        } else if pipelined.is_some() && Self::in_flight(f) {
            // Consecutive products' A fragments in distinct registers (`pipeline.rs`).
            self.pragma("unroll 2");
        } else if let Some(AttrValue::Int(n)) = f.annotations.get(UNROLL_FACTOR_ATTR) {
            // A partial unroll of a loop of run-time trip count: loads of several iterations
            // in flight at once.
            self.pragma(&format!("unroll {}", (*n).clamp(1, 64)));
        }
        let step = if pipelined.is_some() {
            self.ss_runs_checked(f)?
        } else {
            1
        };
        let next = if step > 1 {
            format!("{v} += {step}")
        } else {
            format!("++{v}")
        };
        self.line(&format!("for ({ct} {v} = {start}; {v} < {end}; {next}) {{"));
        self.indent += 1;
        let range = Expr::add(f.min.clone(), f.extent.clone());
        let div = self.enter_divergence(&range);
        if div.block {
            self.note_binding(f.var, &range);
        }
        if prefetch {
            self.a_prefetch = Some((f.var, format!("{v} + 1"), end.clone()));
        }
        self.serial_depth += 1;
        let r = match &pipelined {
            // The next iteration's copy into the other half, this one's awaited, the rest
            // between two barriers (see `pipeline.rs`).
            Some(items) => self.write_pipeline_iteration(f, items, &v, &end),
            None => self.write_stmt(&f.body),
        };
        self.serial_depth -= 1;
        if prefetch {
            self.a_prefetch = None;
        }
        if staging {
            self.a_stage = None;
        }
        self.leave_divergence(div);
        let uniform = self.kernel.as_ref().is_some_and(|k| k.divergent == 0);
        if r.is_ok() && uniform && const_int(&f.extent) != Some(1) && pipelined.is_none() {
            // The next iteration's writes must not overtake this one's reads of shared memory.
            let (mut w, mut rd) = (HashSet::new(), HashSet::new());
            accesses(&f.body, &mut w, &mut rd);
            // The element a register accumulation holds is not in memory while the loop runs.
            if let Some(acc) = &self.simd_acc {
                w.remove(&acc.buffer);
                rd.remove(&acc.buffer);
            }
            // An accumulator tile the loop's tensorized nests keep in place stays with its lanes;
            // tiles an enclosing loop keeps in registers are not in memory at all.
            if !self.mma_tile_moves_with(f) || self.mma_acc.is_some() {
                for b in sync::mma_private(&f.body) {
                    w.remove(&b);
                    rd.remove(&b);
                }
            }
            let multi = self.kernel.as_ref().is_some_and(|k| k.multi_thread);
            if w.iter()
                .any(|b| (self.is_shared(*b) || multi) && (rd.contains(b) || w.len() > 1))
            {
                self.write_barrier();
            }
        }
        self.indent -= 1;
        self.unbind(f.var);
        r?;
        self.line("}");
        if let Some(items) = &pipelined {
            self.write_pipeline_epilogue(f, items, &end)?;
        }
        if let Some(plan) = &hoist {
            self.mma_acc = None;
            self.mma_acc_unit = None;
            self.mma_acc_rows = None;
            self.mma_unit_live = None;
            self.mma_warpgroup = None;
            self.acc_transfer(plan, false);
            self.indent -= 1;
            self.line("}");
        }
        Ok(())
    }

    /// A barrier of the block; in a kernel whose tensor cores read a shared window through a
    /// descriptor, each thread first orders its own writes of shared memory before those
    /// reads (`fence.proxy.async.shared::cta`: the tensor cores read through the async proxy).
    pub(super) fn write_barrier(&mut self) {
        if self.kernel.as_ref().is_some_and(|k| k.async_shared) {
            self.line("sptir_fence_proxy_async();");
        }
        self.line("__syncthreads();");
    }

    /// A loop bound to a thread index: its variable is the index (plus the loop's start),
    /// guarded when the launch dimension can exceed the loop's extent.
    fn write_thread_loop(&mut self, f: &For) -> Res<()> {
        let tag = f.thread.clone().unwrap_or_default();
        if mma::stages_a(f) {
            let name = self.func.vars[f.var].name.clone();
            return Err(self.unsupported(
                &format!("loop `{name}` annotated `stage_a`"),
                "it is bound to a thread index; `stage_a` goes on the serial run loop of 2:4 \
                 products",
            ));
        }
        let is_thread = tag.starts_with("threadIdx");
        if is_thread && self.simd_acc.is_none() {
            if let Some(acc) = self.accumulation(f, true) {
                return self.write_cross_thread_reduction(f, acc);
            }
        }
        if is_thread && self.simd_acc.is_none() {
            if let Some(block) = self.racy_thread_reduction(f) {
                let name = self.func.vars[f.var].name.clone();
                return Err(self.unsupported(
                    &format!("loop `{name}` bound to {tag}"),
                    format!(
                        "block `{block}` reduces over it into elements every thread would update \
                         at once; a reduction over threads must be written as a cross-thread \
                         reduction (its nest directly under a `threadIdx.x` loop, the element \
                         not moving with the loops inside) or be atomic"
                    ),
                ));
            }
        }
        let (vdt, ct, _) = self.loop_var_type(f)?;
        let end_expr = loop_end(f);
        let dim = self.kernel.as_ref().and_then(|k| k.dims.get(&tag).cloned());
        if GRID_TAGS.contains(&tag.as_str()) && self.launch_expr(&end_expr).is_none() {
            return self.write_grid_stride_loop(f, &tag);
        }
        // A thread loop whose extent may be 0 (a row's length, `nnz`) is guarded too: the
        // runtime launches at least one thread along each block dimension.
        let start = const_int(&f.min);
        let may_be_empty = !GRID_TAGS.contains(&tag.as_str())
            && const_int(&end_expr).is_none_or(|e| e <= start.unwrap_or(i64::MAX));
        let guard = dim != self.launch_expr(&end_expr) || start != Some(0) || may_be_empty;
        self.line("{");
        self.indent += 1;
        let min = if const_int(&f.min) == Some(0) {
            String::new()
        } else {
            let (m, mdt) = self.expr(&f.min)?;
            format!(" + {}", cast(m, mdt, vdt))
        };
        let v = self.bind(f.var)?;
        let index = self.index_text(&tag);
        self.line(&format!("const {ct} {v} = ({ct}){index}{min};"));
        if guard {
            let (e, edt) = self.expr(&f.extent)?;
            let (m, mdt) = self.expr(&f.min)?;
            self.line(&format!(
                "if ({v} < {} + {}) {{",
                cast(m, mdt, vdt),
                cast(e, edt, vdt)
            ));
            self.indent += 1;
        }
        if let Some(k) = self.kernel.as_mut() {
            k.bound.push(tag.clone());
            k.bound_vars.push(f.var);
            if is_thread {
                k.dependent.insert(f.var);
                k.thread_depth += 1;
                if tag == "threadIdx.x" {
                    k.lane_dependent.insert(f.var);
                }
                if guard {
                    k.guarded_thread_depth += 1;
                }
            }
        }
        // A guarded thread loop: its threads past the extent skip the body.
        let div = Divergence {
            block: is_thread && guard,
            lane: is_thread && guard && tag == "threadIdx.x",
        };
        self.diverge(div);
        let wg = usize::from(f.annotations.get(mma::WARPGROUP_ATTR).is_some());
        self.warpgroup_depth += wg;
        let r = self.write_stmt(&f.body);
        self.warpgroup_depth -= wg;
        self.leave_divergence(div);
        if let Some(k) = self.kernel.as_mut() {
            k.bound.pop();
            k.bound_vars.pop();
            if is_thread {
                k.thread_depth -= 1;
                if guard {
                    k.guarded_thread_depth -= 1;
                }
            }
        }
        if guard {
            self.indent -= 1;
            self.line("}");
        }
        self.unbind(f.var);
        r?;
        self.indent -= 1;
        self.line("}");
        Ok(())
    }

    /// A `blockIdx` loop whose extent is only known inside the kernel: the blocks of a fixed
    /// grid take its iterations in turn (every thread of a block alike, so the block stays
    /// uniform).
    fn write_grid_stride_loop(&mut self, f: &For, tag: &str) -> Res<()> {
        let (vdt, ct, vname) = self.loop_var_type(f)?;
        let (start, end) = self.loop_range(f, vdt, ct, &vname)?;
        let v = self.bind(f.var)?;
        let (index, dim) = (self.index_text(tag), self.grid_text(tag));
        self.line(&format!(
            "for ({ct} {v} = {start} + ({ct}){index}; {v} < {end}; {v} += ({ct}){dim}) {{"
        ));
        self.indent += 1;
        if let Some(k) = self.kernel.as_mut() {
            k.bound.push(tag.to_string());
            k.bound_vars.push(f.var);
        }
        let r = self.write_stmt(&f.body);
        if let Some(k) = self.kernel.as_mut() {
            k.bound.pop();
            k.bound_vars.pop();
        }
        self.indent -= 1;
        self.unbind(f.var);
        r?;
        self.line("}");
        Ok(())
    }

    /// Writes an atomic add in CUDA.
    pub(super) fn write_cuda_atomic(
        &mut self,
        buffer: BufferId,
        indices: &[Expr],
        value: &Expr,
    ) -> Res<()> {
        let bdt = self.buf_dtype(buffer);
        if !matches!(
            bdt,
            DType::F32
                | DType::F64
                | DType::I32
                | DType::U32
                | DType::U64
                | DType::F16
                | DType::BF16
        ) {
            return Err(self.unsupported(
                "atomic_add",
                format!("CUDA has no atomicAdd on {bdt} elements"),
            ));
        }
        let (v, vdt) = self.expr(value)?;
        let v = cast(v, vdt, bdt);
        if let Some(acc) = &self.simd_acc {
            if acc.buffer == buffer && acc.indices == indices {
                // Summed in the register of a register accumulation.
                let a = acc.name.clone();
                self.line(&format!("{a} = {a} + {};", sum_operand(&v)));
                return Ok(());
            }
        }
        let off = self.offset(buffer, indices)?;
        let name = self.buf_name(buffer)?.to_string();
        let text = half::atomic_add(bdt, &format!("{name} + {off}"), strip_parens(&v));
        self.guarded_line(&text, false);
        Ok(())
    }

    /// The text of a load in a CUDA kernel: `__ldg` for buffers the kernel never stores to.
    pub(super) fn cuda_load(&self, buffer: BufferId, off: &str) -> Res<String> {
        let name = self.buf_name(buffer)?;
        let ro = self
            .kernel
            .as_ref()
            .is_some_and(|k| k.readonly.contains(&buffer));
        let dt = self.buf_dtype(buffer);
        if ro
            && !self.is_shared(buffer)
            && matches!(
                dt,
                DType::F32 | DType::F64 | DType::I32 | DType::I64 | DType::U32 | DType::U64
            )
        {
            // `off` comes from `offset`, parenthesized where a `+` needs it.
            return Ok(format!("__ldg({name} + {off})"));
        }
        Ok(format!("{name}[{off}]"))
    }

    /// Declares an allocation inside a CUDA kernel: shared arrays, per-thread arrays.
    pub(super) fn write_cuda_alloc(&mut self, b: BufferId, ct: &str, name: &str) -> Res<()> {
        let buf = &self.func.buffers[b];
        let size = match self.alloc_size(b)? {
            Ok(n) => n.max(1),
            Err(_) => {
                return Err(self.unsupported(
                    &format!("buffer `{}`", buf.name),
                    "a buffer allocated inside a CUDA kernel needs a constant size",
                ))
            }
        };
        match buf.scope.as_str() {
            "shared" | "shared.dyn" => {
                let what = format!("shared buffer `{}`", buf.name);
                self.declare_shared(&what, buf.dtype, ct, name, size)?;
            }
            "warp" => {
                // One slice per warp of a shared array: lanes of a warp share it, warps do not.
                let threads = self.kernel.as_ref().and_then(|k| {
                    BLOCK_TAGS.iter().try_fold(1i64, |acc, t| {
                        let d = k.dims.get(*t).map_or(Some(1), |d| d.eval(&|_| None))?;
                        Some(acc * d)
                    })
                });
                let Some(threads) = threads else {
                    return Err(self.unsupported(
                        &format!("warp buffer `{}`", buf.name),
                        "a `warp` buffer needs a block of constant size",
                    ));
                };
                let warps = (threads + 31) / 32;
                let bytes = (size * warps) as u64 * buf.dtype.bytes() as u64;
                let total = match self.kernel.as_mut() {
                    Some(k) => {
                        k.shared_bytes += bytes;
                        k.warp_slices.insert(b, size);
                        k.shared_bytes
                    }
                    None => bytes,
                };
                if total > STATIC_SHARED_BYTES {
                    return Err(self.unsupported(
                        &format!("warp buffer `{}`", self.func.buffers[b].name),
                        format!(
                            "the kernel declares {total} bytes of shared memory; a block may use \
                             at most {STATIC_SHARED_BYTES} without an opt-in"
                        ),
                    ));
                }
                self.line(&format!("SPTIR_SHARED({ct}, {name}, {});", size * warps));
            }
            _ => {
                if size > STACK_LIMIT {
                    return Err(self.unsupported(
                        &format!("buffer `{}`", buf.name),
                        format!(
                            "a per-thread buffer of {size} elements is too large for registers \
                             and local memory (at most {STACK_LIMIT})"
                        ),
                    ));
                }
                self.line(&format!("{ct} {name}[{size}] = {{0}};"));
            }
        }
        Ok(())
    }
}
