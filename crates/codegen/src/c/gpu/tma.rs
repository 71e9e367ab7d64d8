//! The tensor copy engine (`cp.async.bulk.tensor`, sm_90) and the mbarriers its copies complete
//! on, as every kernel that uses them defines them: [`TMA_PRELUDE`].
//!
//! # The source contract
//!
//! A kernel argument with [`crate::cuda::KernelArg::tensor_map`] set is declared
//! `SPTIR_TMAP(T) name`: on a GPU a 128-byte `CUtensorMap` the runtime encodes
//! (`cuTensorMapEncodeTiled`) for the buffer's 2-D view and passes by value
//! (`const __grid_constant__`); in the emulator `::sptir_emu::TMap<T>`, the same view of the
//! checked buffer. In the source:
//!
//! - `sptir_mbar_init(bar, count)`: one thread initializes an mbarrier (a `uint64_t` element of
//!   a shared array) for `count` arrivals per phase; then `sptir_mbar_fence_init()` and a
//!   `__syncthreads()` before any thread uses it.
//! - `sptir_mbar_expect_tx(bar, bytes)`: the calling thread arrives on `bar` and adds `bytes` to
//!   the transaction count its phase waits for.
//! - `sptir_tma_load_2d(dst, map, bar, c0, c1)`: one box of `map` whose first element is at
//!   column `c0`, row `c1` of the view (elements past the view's edge read as zero) copied into
//!   shared memory at `dst` (aligned to the swizzle's span: 1024 bytes for 128-byte swizzling),
//!   its bytes completing `bar`'s transaction count. Box element `(r, c)` lands at byte
//!   `a ^ (((a >> 7) & (2^s - 1)) << 4)` from `dst`, `a = r * row_bytes + c * elem`, `2^s` the
//!   swizzle in 16-byte units (0: none) — checked on an H200 by `bench/gpu/probe_tma.cu`.
//! - `sptir_elect_one()`: true in one lane of the calling warp, which all its lanes call at
//!   once (`elect.sync`: the lowest; the emulator checks that the lanes call it together). A
//!   producer warp's copies are made by the lane it elects, so that the compiler keeps their
//!   operands in uniform registers: under `threadIdx.x == 0` it cannot, and ptxas then wraps
//!   every `cp.async.bulk.tensor` in a loop over the lanes that might hold other operands.
//! - `sptir_mbar_wait(bar, parity)`: waits until the phase of parity `parity` of `bar` is
//!   complete (its arrivals made and its bytes landed); the copies' bytes are then visible to
//!   the waiting thread.
//!
//! The emulator lands a copy's bytes when a thread waits on its barrier; until then its shared
//! elements are in flight (any access to them is a race), as `cp.async`'s are. Precisely
//! (`runtime/src/cuda_emu/tma.hpp`): a copy reads its box at issue and records its shared
//! writes as the issuing thread's; every copy pending on a barrier lands at the first wait on
//! it that finds the phase incomplete (or when every live thread of the block is blocked), its
//! elements then counting as written by no thread, its bytes completing the transaction count;
//! that waiting thread then lets the block's other threads run before it goes on. A phase
//! completes when its arrivals are made and its transaction count is back to zero; a block
//! whose threads all wait on phases that cannot complete (more bytes announced than copied) is
//! a deadlock, a destination not aligned to the swizzle's span (128 bytes unswizzled, each
//! shared array taken as 1024-byte aligned) is unsupported.

/// The definitions of [`super::pipeline::CP_ASYNC_PRELUDE`]'s kind for the tensor copy engine
/// (see the module documentation). Public so that hand-written emulator tests use them too.
pub const TMA_PRELUDE: &str = r#"#ifndef SPTIR_EMU
struct __align__(64) sptir_tmap { unsigned long long w[16]; };
#define SPTIR_TMAP(T) const __grid_constant__ sptir_tmap
static __device__ __forceinline__ unsigned sptir_smem_addr(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}
static __device__ __forceinline__ void sptir_mbar_init(uint64_t* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(sptir_smem_addr(bar)), "r"(count) : "memory");
}
static __device__ __forceinline__ void sptir_mbar_fence_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
static __device__ __forceinline__ bool sptir_elect_one() {
    unsigned p;
    asm volatile("{\n .reg .pred e;\n elect.sync _|e, 0xffffffff;\n selp.u32 %0, 1, 0, e;\n}" : "=r"(p));
    return p != 0u;
}
static __device__ __forceinline__ void sptir_mbar_expect_tx(uint64_t* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(sptir_smem_addr(bar)), "r"(bytes) : "memory");
}
static __device__ __forceinline__ void sptir_mbar_arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(sptir_smem_addr(bar)) : "memory");
}
static __device__ __forceinline__ void sptir_mbar_wait(uint64_t* bar, unsigned parity) {
    asm volatile("{ .reg .pred p;\n"
                 "SPTIR_MBAR_WAIT_%=: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra SPTIR_MBAR_WAIT_%=; }" :: "r"(sptir_smem_addr(bar)), "r"(parity) : "memory");
}
template <class T>
static __device__ __forceinline__ void sptir_tma_load_2d(T* dst, const sptir_tmap& map, uint64_t* bar, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
                 :: "r"(sptir_smem_addr(dst)), "l"((unsigned long long)&map), "r"(sptir_smem_addr(bar)), "r"(c0), "r"(c1) : "memory");
}
static __device__ __forceinline__ unsigned sptir_cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
static __device__ __forceinline__ void sptir_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
static __device__ __forceinline__ void sptir_mbar_arrive_cluster(uint64_t* bar, unsigned rank) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(sptir_smem_addr(bar)), "r"(rank));
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" :: "r"(remote) : "memory");
}
template <class T>
static __device__ __forceinline__ void sptir_tma_load_2d_mc(T* dst, const sptir_tmap& map, uint64_t* bar, int c0, int c1, unsigned short mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;"
                 :: "r"(sptir_smem_addr(dst)), "l"((unsigned long long)&map), "r"(sptir_smem_addr(bar)), "r"(c0), "r"(c1), "h"(mask) : "memory");
}
#define SPTIR_CLUSTER_DIMS(x, y, z) __cluster_dims__(x, y, z)
#else
#define SPTIR_TMAP(T) ::sptir_emu::TMap<T>
static void sptir_mbar_init(const ::sptir_emu::SPtr<uint64_t>& bar, unsigned count) { ::sptir_emu::mbar_init(bar.m, bar.off, count); }
static void sptir_mbar_fence_init() {}
static bool sptir_elect_one() {
    // A rendezvous of the warp's live lanes (a divergent call is reported), then the lowest.
    const unsigned lanes = __ballot_sync(0xffffffffu, 1);
    return (threadIdx.x & 31u) == (unsigned)__builtin_ctz(lanes);
}
static void sptir_mbar_expect_tx(const ::sptir_emu::SPtr<uint64_t>& bar, unsigned bytes) { ::sptir_emu::mbar_expect_tx(bar.m, bar.off, bytes); }
static void sptir_mbar_wait(const ::sptir_emu::SPtr<uint64_t>& bar, unsigned parity) { ::sptir_emu::mbar_wait(bar.m, bar.off, parity); }
static void sptir_mbar_arrive(const ::sptir_emu::SPtr<uint64_t>& bar) { ::sptir_emu::mbar_arrive_cluster(bar.m, bar.off, ::sptir_emu::cluster_rank()); }
template <class T>
static void sptir_tma_load_2d(const ::sptir_emu::SPtr<T>& dst, const ::sptir_emu::TMap<T>& map, const ::sptir_emu::SPtr<uint64_t>& bar, int c0, int c1) {
    ::sptir_emu::tma_load_2d(dst, map, bar.m, bar.off, c0, c1);
}
static unsigned sptir_cluster_rank() { return ::sptir_emu::cluster_rank(); }
static void sptir_cluster_sync() { ::sptir_emu::cluster_sync(); }
static void sptir_mbar_arrive_cluster(const ::sptir_emu::SPtr<uint64_t>& bar, unsigned rank) { ::sptir_emu::mbar_arrive_cluster(bar.m, bar.off, rank); }
template <class T>
static void sptir_tma_load_2d_mc(const ::sptir_emu::SPtr<T>& dst, const ::sptir_emu::TMap<T>& map, const ::sptir_emu::SPtr<uint64_t>& bar, int c0, int c1, unsigned short mask) {
    ::sptir_emu::tma_load_2d_mc(dst, map, bar.m, bar.off, c0, c1, mask);
}
#define SPTIR_CLUSTER_DIMS(x, y, z)
#endif
"#;

use super::shared_window::{window, Window};
use super::*;
use crate::cuda::TensorMapArg;

/// The run-loop annotation asking for its window's copies by the tensor copy engine (value 1;
/// the schedule's `sch.annotate(run, "tma", 1)`).
///
/// # When
///
/// A multi-buffered run loop (`pipeline.rs`) whose first statement copies a 16-bit parameter
/// `G` into a function-level shared buffer `S` as is (`S[i, j] = G[i, j]`: a `cache_read`),
/// `S`'s window read by a warpgroup's tensor cores (`mma/warpgroup.rs`) and the rest of the
/// body writing no shared memory. The window (`R` rows of `C` columns, `R` a multiple of 8 up
/// to 256, `C` of 64) is then filled by one thread: `C / 64` boxes of 64 columns × `R` rows
/// of a tensor map of `G` (an extra kernel argument), 128-byte swizzled, each stage completing
/// on its own mbarrier. The window is laid out as those boxes: element `(k, n)` at `(n / 64)
/// 64 R + 64 k + ((n % 64) ^ (8 (k % 8)))`, and the warpgroup reads it through a descriptor of
/// 128-byte swizzling (LBO `128 R` bytes between boxes, SBO 1024 between groups of 8 rows), as
/// `bench/gpu/probe_tma.cu` checked on the hardware.
///
/// # What is written
///
/// Before the loop, one thread initializes the stages' barriers (`sptir_mbar_init`, one
/// arrival a phase), then a barrier; the copy of iteration `k` (its stage `s = (k - min) % S`)
/// is that thread's `sptir_mbar_expect_tx` of the window's bytes and its boxes'
/// `sptir_tma_load_2d` (coordinates: the window's start in `G`); iteration `k` waits for its
/// stage's phase `((k - min) / S) % 2` (`sptir_mbar_wait`) before the loop's barrier. The
/// barrier each iteration keeps (`pipeline.rs`) is what orders a stage's reuse after every
/// product that read it (with [`TMA_RELEASE_ATTR`], the warps' arrivals on the stage's empty
/// barrier do instead). A kernel with such a window keeps all its shared arrays in dynamic
/// shared memory, each window at a multiple of 1024 bytes.
pub const TMA_ATTR: &str = "tma";

/// The run-loop annotation (with [`TMA_ATTR`]) asking for its window's boxes to be multicast
/// to a cluster of `C` thread blocks (value `C`, 2 to 8; the schedule's
/// `sch.annotate(run, "tma_cluster", C)`).
///
/// # When
///
/// The window's start and the run loop's bounds do not depend on the loop bound to
/// `blockIdx.x` (the blocks of a cluster, `C` consecutive along x, need the same slices), and
/// the window's boxes split evenly over the `C` blocks. The kernel is declared in clusters of
/// `C` blocks along x (`SPTIR_CLUSTER_DIMS`, [`crate::cuda::CudaKernel::cluster`]): the grid's
/// x extent must be a multiple of `C`, which the runtime checks.
///
/// # What is written
///
/// Each stage has a second mbarrier, its "empty" barrier (`C` arrivals a phase), after the
/// stages' full ones in the same array. After the barriers' initialization every thread of
/// the cluster syncs (`sptir_cluster_sync`: no copy or arrival reaches a peer's barrier before
/// it is initialized). The copy of iteration `k` (relative to the loop's start), when
/// `k >= S`, first releases the stage's previous use, iteration `k - S`: the block's copying
/// thread arrives on the stage's empty barrier of every block of the cluster
/// (`sptir_mbar_arrive_cluster`; the block's own barrier ordered this after every product of
/// the block that read the stage) and waits for the phase `(k / S - 1) % 2` of its own, which
/// completes when all `C` blocks released it. Then it announces the whole window's bytes on its
/// full barrier and copies its `1 / C` of the boxes with `.multicast::cluster` to all `C` blocks
/// (`sptir_tma_load_2d_mc`): each block's full barrier counts the bytes of every block's
/// boxes. After the run loop every thread of the cluster syncs again, so that no block exits
/// while a peer's copies or arrivals may still reach its shared memory.
pub const TMA_CLUSTER_ATTR: &str = "tma_cluster";

/// The run-loop annotation (with [`TMA_CLUSTER_ATTR`]) extending the cluster along y to `Cy`
/// blocks (value `Cy`; `Cx Cy` at most 8) that share `A`'s tiles staged by the copy engine
/// (`mma/stage_a.rs` with `"tma"`): the blocks of a cluster with the same x rank need the same
/// rows of `A` (whose offset must not depend on the loop bound to `blockIdx.y`), and each
/// copies `1 / Cy` of the box's rows to all of them; B's boxes go to the blocks of the same y
/// rank. A stage is released to every block of the cluster (`Cx Cy` arrivals), whichever
/// copied into it.
pub const TMA_CLUSTER_Y_ATTR: &str = "tma_cluster_y";

/// The run-loop annotation (with [`TMA_ATTR`], value 1) asking each warp to release the stages
/// it used on an mbarrier instead of the block's barrier each run (the schedule's
/// `sch.annotate(run, "tma_release", 1)`).
///
/// # When
///
/// Every copy into the loop's shared memory is the copy engine's: its window's, and `A`'s
/// tiles if they are staged (`mma/stage_a.rs` with `"tma"`); the block's threads are whole
/// warps.
///
/// # What is written
///
/// Each stage has an "empty" mbarrier (as with a cluster) of `W C` arrivals a phase, `W` the
/// block's warps and `C` the blocks of its cluster. An iteration waits for its stage's full
/// phase and goes on without a block barrier. Once its products of iteration `j` are complete
/// (`j` the iteration itself, or the one before with a product kept in flight), each warp
/// (`__syncwarp`, then its first lane) arrives on stage `j`'s empty barrier of every block of
/// the cluster, when a later copy into that stage waits for it (`j + S` before the loop's
/// end). The copying thread waits for that phase before the copy of iteration `j + S`, as with
/// a cluster, but makes no arrival itself. Warps thus run up to the stages' depth apart, and a
/// stage is refilled as soon as its last reader is done.
pub const TMA_RELEASE_ATTR: &str = "tma_release";

/// The run-loop annotation (with [`TMA_RELEASE_ATTR`], value 1) asking for a warp of its own
/// that makes every copy of the loop: a producer warp (the schedule's
/// `sch.annotate(run, "tma_producer", 1)`).
///
/// # Why
///
/// Without it, the thread that copies is the first of the block's warps, which also issue the
/// products: when it waits for a stage to be released (by every warp of every block of the
/// cluster) its warp, and with it its warpgroup's products, waits too, and the blocks of a
/// cluster run in lockstep. A producer warp waits alone, up to the stages' depth ahead.
///
/// # When
///
/// The block's threads are `32 × Y` (`threadIdx.x` the lanes, `threadIdx.y` the warps,
/// `threadIdx.z` 1), and what the kernel runs after the loop is the store of the products'
/// accumulators (guarded by `sptir_acc_live`): the kernels of `2:4(wgdbuf=...)`.
///
/// # What is written
///
/// The block gets one more warp, `threadIdx.y == Y` ([`crate::cuda::CudaKernel::block`] and
/// `__launch_bounds__` count it). After the barriers' initialization (which it joins) the
/// lane it elects (`sptir_elect_one`) runs the whole copy loop: for every iteration `k`, once
/// the stage's previous use is released (the empty barrier's phase, as with
/// [`TMA_RELEASE_ATTR`]), the stage's bytes announced and its boxes copied (the variables of
/// the enclosing `threadIdx` loops standing for 0 there, as for the copying thread without a
/// producer). The other warps run the loop with no copy: each iteration waits for its stage's
/// full phase, issues its products and releases the stage it finished with. Every thread then meets at the barrier after the loop
/// (and the cluster's); the producer's accumulators are not live, so it stores nothing.
pub const TMA_PRODUCER_ATTR: &str = "tma_producer";

/// The run-loop annotation (with [`TMA_PRODUCER_ATTR`], value 1) asking for a persistent
/// kernel: fewer blocks than tiles, each walking tiles in turn, its pipeline running on from
/// one tile into the next (the schedule's `sch.annotate(run, "tma_persistent", 1)`).
///
/// # Why
///
/// A block of the other kernels fills its pipeline when it starts (a copy's whole latency
/// before the first product) and stores its accumulators when its loop ends, its tensor
/// cores idle meanwhile, and the next block on the SM starts only once it exited. A persistent
/// block's producer warp copies the next tile's first stages while the other warps store
/// the last tile's accumulators.
///
/// # When
///
/// The kernel is one nest whose grid is `blockIdx.x` × `blockIdx.y` (no `blockIdx.z`); the
/// run loop's trip count `R` is a constant, a multiple of its stages `S` (a stage and parity
/// then follow from the iteration within a tile and the tile's turn).
///
/// # What is written
///
/// The kernel's body runs in a loop over its tiles: turn `sptir_it` of a block takes tile
/// `blockIdx.x + sptir_it * gridDim.x` of the `sptir_tiles_x × sptir_tiles_y` tiles (the logical
/// grid, [`crate::cuda::CudaKernel::grid`]), x first, its `blockIdx.x`/`.y` loops reading the
/// tile's coordinates. With clusters of `Cx × Cy` blocks, `Cy` > 1, a cluster takes `Cx × Cy`
/// tiles a turn, each block the one of its rank. The runtime launches at most as many blocks
/// as fit on the GPU at once, a whole number of clusters
/// ([`crate::cuda::CudaKernel::launch_grid`]). The barriers are
/// initialized in the first turn only; the phase of iteration `k` of turn `t` is that of
/// iteration `t R + k`; every stage is released after its last product (the last iteration's
/// after the loop's final wait), since the next tile refills it; and the barrier after the run
/// loop (and the cluster's) is written once, after the tile loop, so that nothing holds the
/// producer warp at a tile's end.
pub const TMA_PERSISTENT_ATTR: &str = "tma_persistent";

/// The most iterations a producer warp's copies may run ahead (`double_buffer`): ten stages
/// with a product in flight (what fits in shared memory is checked where the window is
/// declared).
pub(crate) const MAX_PRODUCER_PREFETCH: i64 = 8;

/// The C name of a persistent kernel's turn in its tile loop (see [`TMA_PERSISTENT_ATTR`]).
pub(crate) const TILE_TURN: &str = "sptir_it";

/// Columns of a box: 128 bytes of 16-bit values, the 128-byte swizzle's span.
pub(crate) const TMA_BOX_COLS: i64 = 64;

/// A window of a kernel that the tensor copy engine fills (see [`TMA_ATTR`]).
#[derive(Clone, Debug)]
pub(crate) struct TmaWindow {
    /// The copied parameter and the shared buffer.
    pub global: BufferId,
    pub shared: BufferId,
    /// The run loop.
    pub run: VarId,
    /// The tensor map argument's name, the barriers' shared array's name.
    pub map: String,
    pub bars: String,
    /// The window's rows and columns.
    pub rows: i64,
    pub cols: i64,
    /// Its stages (the run loop's windows).
    pub stages: i64,
    /// Blocks per cluster along x that share its boxes by multicast (1: no cluster; see
    /// [`TMA_CLUSTER_ATTR`]), and along y (sharing a staged `A`, [`TMA_CLUSTER_Y_ATTR`]).
    pub cluster: i64,
    pub cluster_y: i64,
    /// With [`TMA_RELEASE_ATTR`]: the block's warps, each releasing the stages it used.
    pub release: Option<i64>,
    /// With [`TMA_PRODUCER_ATTR`]: the producer warp's `threadIdx.y` (the block's warps along
    /// y before it was added).
    pub producer: Option<i64>,
    /// With [`TMA_PERSISTENT_ATTR`]: the run loop's iterations a tile (a multiple of `stages`).
    pub persistent: Option<i64>,
}

impl TmaWindow {
    /// The blocks of the kernel's clusters.
    pub fn blocks(&self) -> i64 {
        self.cluster * self.cluster_y
    }
}

/// The extent of each `threadIdx` tag of kernel part `part`'s thread loops (the largest bound to
/// it); `None` where one is not a constant.
fn block_dims(part: &Stmt) -> Option<HashMap<String, i64>> {
    let mut dims: HashMap<String, i64> = HashMap::new();
    let mut known = true;
    part.visit(&mut |s| {
        if let Stmt::For(l) = s {
            if let Some(tag) = l.thread.as_deref().filter(|t| t.starts_with("threadIdx")) {
                match const_int(&l.extent) {
                    Some(n) => {
                        let d = dims.entry(tag.to_string()).or_insert(1);
                        *d = (*d).max(n);
                    }
                    None => known = false,
                }
            }
        }
    });
    known.then_some(dims)
}

/// Whether loop `f` asks for its window's copies by the tensor copy engine.
pub(crate) fn tma_requested(f: &For) -> bool {
    f.annotations.get(TMA_ATTR).is_some()
}

impl Writer<'_> {
    /// The windows that the run loops of kernel `parts` annotated `tma` ask the copy engine to
    /// fill, checked (see [`TMA_ATTR`]).
    pub(super) fn tma_windows(&self, parts: &[&Stmt]) -> Res<Vec<TmaWindow>> {
        let mut out: Vec<TmaWindow> = Vec::new();
        for part in parts {
            let mut loops = Vec::new();
            part.visit(&mut |s| {
                if let Stmt::For(f) = s {
                    if tma_requested(f) {
                        loops.push((**f).clone());
                    }
                }
            });
            for f in loops {
                out.push(self.tma_window(part, &f)?);
            }
        }
        Ok(out)
    }

    /// The window run loop `f` of kernel part `part` asks the copy engine to fill.
    fn tma_window(&self, part: &Stmt, f: &For) -> Res<TmaWindow> {
        let name = self.func.vars[f.var].name.clone();
        let what = format!("loop `{name}` annotated `{TMA_ATTR}`");
        if !matches!(
            f.annotations.get(TMA_ATTR),
            Some(AttrValue::Int(1)) | Some(AttrValue::Bool(true))
        ) {
            return Err(self.unsupported(&what, format!("`{TMA_ATTR}` is 1")));
        }
        if !Self::double_buffered(f) {
            return Err(self.unsupported(
                &what,
                "the copy engine fills the windows of a multi-buffered run loop \
                 (`double_buffer`)",
            ));
        }
        let copy = match &f.body {
            Stmt::Seq(v) => v.first(),
            other => Some(other),
        };
        // The copy: `S[i, j] = G[i, j]`, S shared, G a parameter.
        let mut found = None;
        if let Some(c) = copy {
            c.visit(&mut |s| {
                if let Stmt::Store(st) = s {
                    if let Expr::Load { buffer, indices } = &st.value {
                        if found.is_none() && self.is_shared(st.buffer) && *indices == st.indices {
                            found = Some((*buffer, st.buffer));
                        }
                    }
                }
            });
        }
        let Some((global, shared)) = found else {
            return Err(self.unsupported(
                &what,
                "its body must start with a copy `S[i, j] = G[i, j]` into a shared buffer (a \
                 `cache_read(..., \"shared\")` moved under it by `compute_at`)",
            ));
        };
        let (gb, sb) = (&self.func.buffers[global], &self.func.buffers[shared]);
        if self.is_shared(global) || !matches!(gb.decl, BufferDecl::Match { .. }) {
            return Err(self.unsupported(
                &what,
                format!(
                    "the copy engine reads a parameter; `{}` is not one",
                    gb.name
                ),
            ));
        }
        if gb.dtype.bytes() != 2 || sb.dtype != gb.dtype || !gb.strides.is_empty() {
            return Err(self.unsupported(
                &what,
                format!(
                    "the copy engine's windows here hold 16-bit values of a compact buffer; \
                     `{}` is {}",
                    gb.name, gb.dtype
                ),
            ));
        }
        if !super::mma::read_by_warpgroup(part, shared) {
            return Err(self.unsupported(
                &what,
                format!(
                    "the window of `{}` must be read by a warpgroup's tensor cores (a loop \
                     annotated `warpgroup`)",
                    sb.name
                ),
            ));
        }
        let Window { base, ext, lp } =
            window(self.func, part, shared).map_err(|why| self.unsupported(&what, why))?;
        let [rows, cols] = ext.as_slice() else {
            return Err(self.unsupported(&what, "the window must have two dimensions"));
        };
        let (rows, cols) = (*rows, *cols);
        if lp != Some(f.var) {
            return Err(self.unsupported(
                &what,
                format!("the window of `{}` must move with this loop", sb.name),
            ));
        }
        if rows % 8 != 0 || !(8..=256).contains(&rows) || cols % TMA_BOX_COLS != 0 {
            return Err(self.unsupported(
                &what,
                format!(
                    "a window the copy engine fills is 8 to 256 rows (a multiple of 8) of \
                     columns in boxes of {TMA_BOX_COLS}; this one is {rows} x {cols}"
                ),
            ));
        }
        let (cluster, cluster_y) = self.tma_cluster(part, f, &what, &base, cols)?;
        let release = self.tma_release(part, f, &what)?;
        let producer = self.tma_producer(part, f, &what, release.is_some())?;
        let stages = Self::pipeline_stages(f);
        let persistent = self.tma_persistent(f, &what, producer.is_some(), stages)?;
        let global_name = self.buf_name(global)?.to_string();
        let shared_name = self.buf_name(shared)?.to_string();
        Ok(TmaWindow {
            global,
            shared,
            run: f.var,
            map: format!("{global_name}_tmap"),
            bars: format!("sptir_bar_{shared_name}"),
            rows,
            cols,
            stages,
            cluster,
            cluster_y,
            release,
            producer,
            persistent,
        })
    }

    /// The iterations a tile of run loop `f` (its `stages`) where it asks for a persistent
    /// kernel, checked (see [`TMA_PERSISTENT_ATTR`]); `None` when it does not ask.
    fn tma_persistent(&self, f: &For, what: &str, producer: bool, stages: i64) -> Res<Option<i64>> {
        if !self.tma_flag(f, what, TMA_PERSISTENT_ATTR, "a persistent kernel")? {
            return Ok(None);
        }
        if !producer {
            return Err(self.unsupported(
                what,
                format!(
                    "a persistent kernel (`{TMA_PERSISTENT_ATTR}`) has a producer warp \
                     (`{TMA_PRODUCER_ATTR}`), whose copies run on into the next tile"
                ),
            ));
        }
        match const_int(&f.extent) {
            Some(r) if r > 0 && r % stages == 0 => Ok(Some(r)),
            r => Err(self.unsupported(
                what,
                format!(
                    "a persistent kernel (`{TMA_PERSISTENT_ATTR}`) needs a run loop of a \
                     constant trip count, a multiple of its {stages} stages; this one runs {}",
                    r.map_or_else(
                        || "a trip count known at run time".to_string(),
                        |r| r.to_string()
                    )
                ),
            )),
        }
    }

    /// Whether run loop `f` carries the flag annotation `attr` (value 1 or true; `meaning` says
    /// what it asks for in the error for another value).
    fn tma_flag(&self, f: &For, what: &str, attr: &str, meaning: &str) -> Res<bool> {
        match f.annotations.get(attr) {
            None => Ok(false),
            Some(AttrValue::Int(1)) | Some(AttrValue::Bool(true)) => Ok(true),
            Some(_) => Err(self.unsupported(what, format!("`{attr}` is 1 ({meaning})"))),
        }
    }

    /// The `threadIdx.y` of the producer warp run loop `f` (of kernel part `part`) asks for,
    /// checked (see [`TMA_PRODUCER_ATTR`]); `None` when it asks for none.
    fn tma_producer(&self, part: &Stmt, f: &For, what: &str, release: bool) -> Res<Option<i64>> {
        if !self.tma_flag(f, what, TMA_PRODUCER_ATTR, "a producer warp")? {
            return Ok(None);
        }
        if !release {
            return Err(self.unsupported(
                what,
                format!(
                    "a producer warp (`{TMA_PRODUCER_ATTR}`) goes with the warps releasing the \
                     stages (`{TMA_RELEASE_ATTR}`)"
                ),
            ));
        }
        let dims = block_dims(part).unwrap_or_default();
        let (x, y) = (dims.get("threadIdx.x"), dims.get("threadIdx.y").copied());
        match (x, y) {
            (Some(32), Some(y)) if y >= 1 && dims.get("threadIdx.z").is_none_or(|z| *z == 1) => {
                Ok(Some(y))
            }
            _ => Err(self.unsupported(
                what,
                format!(
                    "a producer warp (`{TMA_PRODUCER_ATTR}`) joins blocks of 32 x Y threads \
                     (`threadIdx.x` the lanes, `threadIdx.y` the warps, `threadIdx.z` 1)"
                ),
            )),
        }
    }

    /// Opens the block of the copy-engine copies of the kernel being written, under the
    /// condition on the thread that makes them: the block's first thread, or none where a
    /// producer warp makes them (its copies are written only in its loop, which the lane it
    /// elects alone runs: `pipeline.rs`'s `write_producer_warp`).
    pub(super) fn open_copier(&mut self) {
        let producer = self
            .kernel
            .as_ref()
            .is_some_and(|k| k.tma.iter().any(|t| t.producer.is_some()));
        if producer {
            self.line("{");
        } else {
            self.line("if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {");
        }
    }

    /// The producer warp's `threadIdx.y` where run loop `f` has one.
    pub(super) fn producer_of(&self, f: &For) -> Option<i64> {
        self.tma_of_run(f.var).and_then(|t| t.producer)
    }

    /// The warps of the block of kernel part `part` when run loop `f` asks them to release its
    /// stages (see [`TMA_RELEASE_ATTR`]), checked; `None` when it does not ask.
    fn tma_release(&self, part: &Stmt, f: &For, what: &str) -> Res<Option<i64>> {
        if !self.tma_flag(f, what, TMA_RELEASE_ATTR, "warps release")? {
            return Ok(None);
        }
        if matches!(f.annotations.get(super::mma::STAGE_A_ATTR), Some(v) if *v != AttrValue::Str(super::mma::STAGE_A_TMA.into()))
        {
            return Err(self.unsupported(
                what,
                format!(
                    "with `{TMA_RELEASE_ATTR}` every copy into shared memory is the copy \
                     engine's: A staged by `cp.async` is not (stage it with \"{}\")",
                    super::mma::STAGE_A_TMA
                ),
            ));
        }
        // The block's threads: the extents of its thread loops, whole warps.
        let dims = block_dims(part);
        let threads: i64 = dims.as_ref().map_or(0, |d| d.values().product());
        if dims.is_none() || threads % 32 != 0 {
            return Err(self.unsupported(
                what,
                format!(
                    "with `{TMA_RELEASE_ATTR}` the block is whole warps of a constant size \
                     (here {threads} threads)"
                ),
            ));
        }
        Ok(Some(threads / 32))
    }

    /// The cluster run loop `f` (of kernel part `part`, its window `cols` wide) asks for along
    /// x and y (see [`TMA_CLUSTER_ATTR`], [`TMA_CLUSTER_Y_ATTR`]), checked; 1 where it asks for
    /// none.
    fn tma_cluster(
        &self,
        part: &Stmt,
        f: &For,
        what: &str,
        base: &[Expr],
        cols: i64,
    ) -> Res<(i64, i64)> {
        let get = |attr: &str| match f.annotations.get(attr) {
            None => Ok(1),
            Some(AttrValue::Int(c)) if (1..=8).contains(c) => Ok(*c),
            Some(_) => {
                Err(self.unsupported(what, format!("`{attr}` is the blocks per cluster, 1 to 8")))
            }
        };
        let (c, cy) = (get(TMA_CLUSTER_ATTR)?, get(TMA_CLUSTER_Y_ATTR)?);
        if c * cy > 8 {
            return Err(self.unsupported(
                what,
                format!("a cluster of {c} x {cy} blocks: at most 8 blocks"),
            ));
        }
        if cy > 1
            && f.annotations.get(super::mma::STAGE_A_ATTR)
                != Some(&AttrValue::Str(super::mma::STAGE_A_TMA.into()))
        {
            return Err(self.unsupported(
                what,
                format!(
                    "the blocks of a cluster along y (`{TMA_CLUSTER_Y_ATTR}`) share A's tiles \
                     staged by the copy engine (`stage_a` = \"{}\")",
                    super::mma::STAGE_A_TMA
                ),
            ));
        }
        if c == 1 {
            return Ok((1, cy));
        }
        let boxes = cols / TMA_BOX_COLS;
        if boxes % c != 0 {
            return Err(self.unsupported(
                what,
                format!(
                    "a cluster of {c} blocks shares the window's {boxes} box(es) of \
                     {TMA_BOX_COLS} columns evenly: their number must be a multiple of {c}"
                ),
            ));
        }
        // The blocks of a cluster (consecutive along x) must need the same slices.
        let mut bx = Vec::new();
        part.visit(&mut |s| {
            if let Stmt::For(l) = s {
                if l.thread.as_deref() == Some("blockIdx.x") {
                    bx.push(l.var);
                }
            }
        });
        let moves = |e: &Expr| super::mentions(e, &bx);
        if moves(&f.min) || moves(&f.extent) || base.iter().any(moves) {
            return Err(self.unsupported(
                what,
                "with a cluster the window's start and the run loop's bounds must not depend \
                 on the loop bound to `blockIdx.x` (the blocks of a cluster, consecutive along \
                 x, copy the same slices)",
            ));
        }
        Ok((c, cy))
    }

    /// The tensor map argument of window `t` (its parameter `param`): a `[columns, rows]` view
    /// of the whole parameter, boxes of 64 columns × the window's rows, 128-byte swizzled.
    pub(super) fn tma_arg(&self, t: &TmaWindow, param: usize) -> Res<(KernelArg, String)> {
        let buf = &self.func.buffers[t.global];
        let what = format!("the tensor map of `{}`", buf.name);
        let dims = match &buf.shape {
            BufferShape::Dense(s) if s.len() == 2 => {
                match (self.launch_expr(&s[1]), self.launch_expr(&s[0])) {
                    (Some(c), Some(r)) => [c, r],
                    _ => {
                        return Err(self.unsupported(
                            &what,
                            "its extents must be expressions of scalar parameters",
                        ))
                    }
                }
            }
            _ => return Err(self.unsupported(&what, "the buffer must have two dimensions")),
        };
        let ct = c_type(buf.dtype).unwrap_or("uint16_t");
        let arg = KernelArg {
            param,
            name: t.map.clone(),
            dtype: buf.dtype,
            ctype: ct.to_string(),
            pointer: true,
            readonly: true,
            tensor_map: Some(TensorMapArg {
                dims,
                box_dims: [TMA_BOX_COLS as u32, t.rows as u32],
                swizzle: 128,
            }),
        };
        Ok((arg, format!("SPTIR_TMAP({ct}) {}", t.map)))
    }

    /// The window of the kernel being written that run loop `run` fills by the copy engine.
    pub(super) fn tma_of_run(&self, run: VarId) -> Option<TmaWindow> {
        self.kernel
            .as_ref()?
            .tma
            .iter()
            .find(|t| t.run == run)
            .cloned()
    }

    /// Before the run loop of `t`: one thread initializes the stages' barriers, then a barrier.
    /// In a persistent kernel (see [`TMA_PERSISTENT_ATTR`]) only in the tile loop's first turn.
    pub(super) fn write_tma_init(&mut self, t: &TmaWindow) {
        if t.persistent.is_some() {
            self.line(&format!("if ({TILE_TURN} == 0) {{"));
            self.indent += 1;
        }
        self.line("if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {");
        self.line(&format!(
            "    for (int sptir_s = 0; sptir_s < {}; ++sptir_s) sptir_mbar_init({} + sptir_s, 1u);",
            t.stages, t.bars
        ));
        if let Some(n) = Self::tma_empty_arrivals(t) {
            // The stages' empty barriers: an arrival from each block of the cluster, or from
            // each of their warps.
            self.line(&format!(
                "    for (int sptir_s = 0; sptir_s < {0}; ++sptir_s) sptir_mbar_init({1} + {0} + \
                 sptir_s, {n}u);",
                t.stages, t.bars
            ));
        }
        self.line("    sptir_mbar_fence_init();");
        self.line("}");
        self.write_barrier();
        if t.blocks() > 1 {
            self.line("sptir_cluster_sync();");
        }
        if t.persistent.is_some() {
            self.indent -= 1;
            self.line("}");
        }
    }

    /// After the run loop of `t`: with a cluster, every thread of the cluster syncs (no block
    /// exits while a peer's copies or arrivals may still reach its shared memory); in a
    /// persistent kernel that comes after its tile loop instead (`Writer::write_tile_loop`).
    pub(super) fn write_tma_end(&mut self, t: &TmaWindow) {
        if t.blocks() > 1 && t.persistent.is_none() {
            self.line("sptir_cluster_sync();");
        }
    }

    /// The phases of a stage's barriers that the tiles before the current one completed, as
    /// C text to add to an iteration's phase (` + ...`; empty outside a persistent kernel, or
    /// where it does not change the parity): each tile runs `R` iterations, `R / S` uses of
    /// every stage.
    fn tile_phases(t: &TmaWindow) -> String {
        match t.persistent.map(|r| r / t.stages) {
            Some(p) if p % 2 == 1 => format!(" + {TILE_TURN} * {p}"),
            _ => String::new(),
        }
    }

    /// The mbarriers window `t` declares: a full one a stage, and with a cluster or warps'
    /// releases an empty one a stage after them.
    pub(super) fn tma_barriers(t: &TmaWindow) -> i64 {
        if Self::tma_empty_arrivals(t).is_some() {
            2 * t.stages
        } else {
            t.stages
        }
    }

    /// The arrivals a phase of window `t`'s empty barriers (see [`TMA_CLUSTER_ATTR`] and
    /// [`TMA_RELEASE_ATTR`]); `None` where it has none.
    fn tma_empty_arrivals(t: &TmaWindow) -> Option<i64> {
        match t.release {
            Some(w) => Some(w * t.blocks()),
            None => (t.blocks() > 1).then_some(t.blocks()),
        }
    }

    /// Whether the run loop `f` is written without a block barrier a run: its window's stages
    /// released by the warps (see [`TMA_RELEASE_ATTR`]).
    pub(super) fn warps_release(&self, f: &For) -> bool {
        self.tma_of_run(f.var).is_some_and(|t| t.release.is_some())
    }

    /// After the products of iteration `v` (C text) of run loop `f` (ending at `end`): each
    /// warp releases the stage of the iteration whose products are now complete, where a
    /// later copy waits for it (see [`TMA_RELEASE_ATTR`]).
    pub(super) fn write_tma_release(&mut self, f: &For, v: &str, end: &str) -> Res<()> {
        let Some(t) = self.tma_of_run(f.var) else {
            return Ok(());
        };
        // (The group in flight holds the products of `ss_runs` runs.)
        let back = i64::from(Self::in_flight(f)) * Self::ss_runs(f);
        let at = if back > 0 {
            format!("{v} - {back}")
        } else {
            v.to_string()
        };
        let min = self.expr(&f.min)?.0;
        // (In a persistent kernel every stage is refilled by a later tile.)
        let cond = if t.persistent.is_some() {
            format!("{at} >= {min}")
        } else {
            format!("{at} >= {min} && {at} + {} < {end}", t.stages)
        };
        self.write_tma_release_at(f, &t, &at, &cond)
    }

    /// After the run loop `f` (ending at `end`) of a persistent kernel whose products stay in
    /// flight: each warp releases the stage of the loop's last iteration, which no later
    /// iteration of the tile released (see [`TMA_PERSISTENT_ATTR`]).
    pub(super) fn write_tma_release_last(&mut self, f: &For, end: &str) -> Res<()> {
        let Some(t) = self.tma_of_run(f.var) else {
            return Ok(());
        };
        // (A persistent kernel's warps release the stages: it has a producer warp.)
        if t.persistent.is_none() || !Self::in_flight(f) {
            return Ok(());
        }
        let min = self.expr(&f.min)?.0;
        // (The last group: the last `ss_runs` runs.)
        for j in 1..=Self::ss_runs(f) {
            let at = format!("{end} - {j}");
            self.write_tma_release_at(f, &t, &at, &format!("{at} >= {min}"))?;
        }
        Ok(())
    }

    /// Each warp's release of the stage of iteration `at` (C text) of run loop `f`, where
    /// `cond` holds.
    fn write_tma_release_at(&mut self, f: &For, t: &TmaWindow, at: &str, cond: &str) -> Res<()> {
        let (stage, _) = self.tma_stage(f, t, at)?;
        let s = t.stages;
        self.line(&format!("if ({cond}) {{"));
        self.indent += 1;
        self.line("__syncwarp();");
        // (With a producer warp `threadIdx.x` is the lane: blocks of 32 x Y threads.)
        let lane = if t.producer.is_some() {
            "(threadIdx.x & 31u)"
        } else {
            "((threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31u)"
        };
        if t.blocks() > 1 {
            // Lane `r` arrives on block `r`'s barrier: the warp's arrivals to the cluster at
            // once, none waiting for another.
            self.line(&format!(
                "if ({lane} < {}u) sptir_mbar_arrive_cluster({} + {s} + {stage}, {lane});",
                t.blocks(),
                t.bars
            ));
        } else {
            self.line(&format!(
                "if ({lane} == 0u) sptir_mbar_arrive({} + {s} + {stage});",
                t.bars
            ));
        }
        self.indent -= 1;
        self.line("}");
        Ok(())
    }

    /// The stage of the run loop `f`'s iteration `at` (C text), and the parity of that stage's
    /// phase the iteration uses.
    fn tma_stage(&mut self, f: &For, t: &TmaWindow, at: &str) -> Res<(String, String)> {
        let k = self.tma_iteration(f, at)?;
        let turns = Self::tile_phases(t);
        Ok((
            format!("({k} % {})", t.stages),
            format!("(unsigned)(({k} / {}{turns}) & 1)", t.stages),
        ))
    }

    /// Iteration `at` of run loop `f` counted from the loop's start (C text).
    fn tma_iteration(&mut self, f: &For, at: &str) -> Res<String> {
        let min = self.expr(&f.min)?.0;
        Ok(format!("(({at}) - ({min}))"))
    }

    /// The copy of the run loop `f`'s iteration `at` (its variable already standing for `at`):
    /// one thread announces the window's bytes on the stage's barrier and copies its boxes.
    pub(super) fn write_tma_copy(&mut self, f: &For, t: &TmaWindow, at: &str) -> Res<()> {
        let base = self.tma_window_start(t)?;
        let [k0, n0] = base.as_slice() else {
            return Err(self.invalid("a copy-engine window without its start"));
        };
        let (k0, n0) = (self.expr(k0)?.0, self.expr(n0)?.0);
        let (stage, _) = self.tma_stage(f, t, at)?;
        let name = self.buf_name(t.shared)?.to_string();
        let size = t.rows * t.cols;
        // A staged `A` the engine fills completes on the same barrier (`mma/stage_a.rs`).
        let bytes = size * 2 + self.a_stage_tma_bytes();
        self.open_copier();
        self.indent += 1;
        if Self::tma_empty_arrivals(t).is_some() {
            // The stage's previous use released by every block of the cluster (or every warp)
            // first.
            let k = self.tma_iteration(f, at)?;
            let s = t.stages;
            // (In a persistent kernel, from the second tile on every stage was used before.)
            let turns = Self::tile_phases(t);
            if t.persistent.is_some() {
                self.line(&format!("if ({TILE_TURN} > 0 || {k} >= {s}) {{"));
            } else {
                self.line(&format!("if ({k} >= {s}) {{"));
            }
            if t.release.is_none() {
                self.line(&format!(
                    "    for (unsigned sptir_r = 0; sptir_r < {}u; ++sptir_r) \
                     sptir_mbar_arrive_cluster({} + {s} + {stage}, sptir_r);",
                    t.blocks(),
                    t.bars
                ));
            }
            self.line(&format!(
                "    sptir_mbar_wait({} + {s} + {stage}, (unsigned)(({k} / {s} + 1{turns}) & 1));",
                t.bars
            ));
            self.line("}");
        }
        self.line(&format!(
            "sptir_mbar_expect_tx({} + {stage}, {bytes}u);",
            t.bars
        ));
        if t.cluster > 1 {
            // This block's share of the boxes, to every block of the cluster with its y rank.
            let (c, per) = (t.cluster, t.cols / TMA_BOX_COLS / t.cluster);
            let mask = if t.cluster_y > 1 {
                format!(
                    "(unsigned short)({}u << ({c} * (sptir_cluster_rank() / {c})))",
                    (1u32 << c) - 1
                )
            } else {
                format!("(unsigned short){}u", (1u32 << c) - 1)
            };
            let rank = if t.cluster_y > 1 {
                format!("(int)(sptir_cluster_rank() % {c})")
            } else {
                "(int)sptir_cluster_rank()".to_string()
            };
            self.line(&format!(
                "for (int sptir_j = {rank} * {per}, sptir_je = sptir_j + {per}; sptir_j < \
                 sptir_je; ++sptir_j)"
            ));
            self.line(&format!(
                "    sptir_tma_load_2d_mc({name} + (int64_t){stage} * {size} + sptir_j * {}, {}, \
                 {} + {stage}, (int)({n0}) + sptir_j * {TMA_BOX_COLS}, (int)({k0}), {mask});",
                TMA_BOX_COLS * t.rows,
                t.map,
                t.bars,
            ));
            self.indent -= 1;
            self.line("}");
            return Ok(());
        }
        for j in 0..t.cols / TMA_BOX_COLS {
            self.line(&format!(
                "sptir_tma_load_2d({name} + (int64_t){stage} * {size} + {}, {}, {} + {stage}, \
                 (int)({n0}) + {}, (int)({k0}));",
                j * TMA_BOX_COLS * t.rows,
                t.map,
                t.bars,
                j * TMA_BOX_COLS
            ));
        }
        self.indent -= 1;
        self.line("}");
        Ok(())
    }

    /// The start of window `t` in its parameter (one expression a dimension), as declared.
    pub(super) fn tma_window_start(&self, t: &TmaWindow) -> Res<Vec<Expr>> {
        self.bufs
            .get(t.shared.index())
            .and_then(Option::as_ref)
            .map(|i| i.window.clone())
            .ok_or_else(|| self.invalid("a copy-engine window used before its declaration"))
    }

    /// Iteration `v` of the run loop `f` waits for its stage's copy.
    pub(super) fn write_tma_wait(&mut self, f: &For, t: &TmaWindow, v: &str) -> Res<()> {
        let (stage, parity) = self.tma_stage(f, t, v)?;
        self.line(&format!("sptir_mbar_wait({} + {stage}, {parity});", t.bars));
        Ok(())
    }
}
