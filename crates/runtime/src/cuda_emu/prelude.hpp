// sparsetir CUDA emulator prelude, part 1 of 4 (then `tma.hpp`, `cluster.hpp` and `launch.hpp`,
// concatenated by `cuda_emu.rs`): runs the generated CUDA source on the host CPU.
//
// Two views of one text. With SPTIR_EMU_RUNTIME defined it is the runtime (the scheduler, the
// traffic counter, the race checker, mbarriers, tensor copies, clusters, grids): every function
// defined, compiled once per kernel cache into the library its modules link
// (`cuda_emu/prelude_cache.rs`), or into each module where the cache holds no shared prelude.
// Without, it is what a module's source is compiled against: the types, the proxies and the
// other templates, the CUDA surface, and the runtime's entry points (SPTIR_API) declared only.
//
// Compiled before the module source (with SPTIR_EMU defined) by the host C++ compiler. A launch
// runs the grid cluster by cluster (a block is a cluster of its own unless the kernel declares
// clusters), on at most `os_threads` OS threads; the threads of one cluster's blocks are
// user-level fibers on one OS thread that switch only at `__syncthreads`, at warp collectives, at
// cluster barriers and mbarrier waits, after a few hundred global accesses (to keep the lanes of
// a warp close together) and at their end. Global pointers and shared arrays are proxies: every element access is bounds-checked;
// global accesses are grouped per warp into memory transactions (traffic counting) and shared
// accesses are checked for races between barriers (and, once a cluster uses an mbarrier or
// `__syncwarp`, against the order their arrivals, waits and rendezvous give: vector clocks).
// Errors stop the launch and are returned to the Rust side in `ErrorOut`; nothing here aborts
// the process on bad input.
//
// Layouts of `LaunchArg`, `ErrorOut` and `LaunchDesc` are mirrored in `cuda_emu.rs`.

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cfloat>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <vector>
#include <sys/mman.h>
#if !defined(__x86_64__)
#include <ucontext.h>
#endif

// A runtime entry point, exported by the runtime library (compiled with hidden visibility).
#define SPTIR_API __attribute__((visibility("default")))

namespace sptir_emu {

constexpr int ABI_VERSION = 3;

// Error kinds (`ErrorOut::kind`), mirrored in Rust.
enum : int32_t {
  ERR_NONE = 0,
  ERR_OOB = 1,
  ERR_RACE = 2,
  ERR_DEADLOCK = 3,
  ERR_UNSUPPORTED = 4,
  ERR_INTERNAL = 5,
  ERR_BLOCK_RACE = 6,
  ERR_DIV_BY_ZERO = 7,
};

struct ErrorOut {
  int32_t kind;
  int32_t reserved;
  int64_t index;
  int64_t length;
  uint32_t block[3];
  uint32_t thread_a[3];
  uint32_t thread_b[3];
  uint32_t reserved2;
  char buffer[128];
  char message[512];
};

struct LaunchArg {
  void* ptr;
  int64_t len;
  int64_t i;
  double f;
  // A tensor map's view: [columns, rows].
  int64_t d[2];
};

struct LaunchDesc {
  uint32_t grid[3];
  uint32_t block[3];
  // Blocks per thread-block cluster along x, y, z (1, 1, 1: none); the grid is a multiple.
  uint32_t cluster[3];
  uint32_t os_threads;
  const LaunchArg* args;
  uint64_t requested_bytes;
  uint64_t sector_bytes;
  ErrorOut err;
};

struct uint3 {
  unsigned x, y, z;
};

enum class St : uint8_t { Ready, Barrier, Warp, MBar, Cluster, Done };
enum class WOp : uint8_t { Sync, Shfl, Ballot, Any, All, Gather };

inline const char* wop_name(WOp op) {
  switch (op) {
    case WOp::Sync: return "__syncwarp";
    case WOp::Shfl: return "__shfl_*_sync";
    case WOp::Ballot: return "__ballot_sync";
    case WOp::Any: return "__any_sync";
    case WOp::All: return "__all_sync";
    case WOp::Gather: return "a tensor-core instruction";
  }
  return "?";
}

struct Block;
struct Cluster;
struct SharedMeta;

// One `cp.async` of a thread that its `cp.async.wait_group` has not completed yet: the bytes
// it read (global inputs are read-only, so reading them at issue is exact) and the shared
// elements they go to, written when the wait completes the copy's group.
struct AsyncCopy {
  SharedMeta* m;
  int64_t idx;
  uint32_t count, elem;
  unsigned char bytes[16];
};

// One tensor-core product in flight (`wgmma.mma_async` before its `wgmma.wait_group`): the
// shared elements it reads and the product, run when the wait completes its group.
struct AsyncMma {
  std::vector<std::pair<SharedMeta*, int64_t>> reads;
  std::function<void()> run;
};

struct Fiber {
#if defined(__x86_64__)
  void* sp;
#else
  ucontext_t uc;
#endif
  Block* blk;
  unsigned lin;
  uint3 tid;
  St st;
  WOp wop;
  int wsrc;
  uint64_t wval;
  uint64_t wres;
  // In `WOp::Gather`: the lane's `gn` words and where every lane's go (lane `l`'s at `l * gn`).
  const uint32_t* gin = nullptr;
  uint32_t* gout = nullptr;
  unsigned gn = 0;
  uint32_t since_yield;
  char* stack;
  size_t stack_size;
  // Asynchronous operations issued and not yet waited for: the copies since the last
  // `cp.async.commit_group`, the committed groups (oldest first); the same for products.
  std::vector<AsyncCopy> cp_open;
  std::deque<std::vector<AsyncCopy>> cp_groups;
  std::vector<AsyncMma> mma_open;
  std::deque<std::vector<AsyncMma>> mma_groups;
  // In `St::MBar`: the block's mbarrier (index into `Block::mbars`) and the parity waited for.
  uint32_t wbar, wpar;
};

// One global access of one lane: grouped with the other lanes' accesses at the same site and
// the same per-lane occurrence count of that site.
// Sectors are counted in the buffer's own offsets (`buf` its start): a device allocation is
// 256-byte aligned, wherever the host put the array, so the count is the GPU's and does not
// change from run to run.
struct Rec {
  uintptr_t site;
  uint32_t occ;
  uint32_t bytes;
  uintptr_t buf;
  uint64_t sector;
};

struct Warp {
  unsigned live;
  unsigned arrived;
  size_t next_flush;
  std::vector<Rec> pending;
  std::unordered_map<uintptr_t, std::array<uint32_t, 32>> occ;
};

// The race-detection state of one shared element within the current barrier epoch: the last
// plain writer, up to two distinct plain readers, up to two distinct atomic updaters (linear
// thread ids, -1 for none).
struct Shadow {
  uint32_t epoch;
  int32_t w, r1, r2, a1, a2;
};

// One element of a writable global buffer as one block touched it: its race state in the
// current barrier epoch, and which kinds of access (bits of `Acc`) the block made over its whole
// run, for the check between the blocks of a launch.
struct GShadow {
  Shadow s;
  uint8_t kinds;
  const char* name;
  int64_t idx, len;
};

// One element of a writable global buffer as the blocks of a launch that finished touched it:
// the linear id of the block that wrote it plainly, up to two distinct blocks that read it and
// two that updated it atomically (-1 for none).
struct Cross {
  int64_t w = -1, r1 = -1, r2 = -1, a1 = -1, a2 = -1;
};

// An element's asynchronous state, kept across barriers: the thread (linear id + 1; 0 for
// none) whose `cp.async` into it has not been waited for, how many tensor-core products in
// flight read it (with the last issuer's linear id + 1), and the thread whose tensor copy
// (`cp.async.bulk.tensor`) into it has not landed yet (`remote_issuer` when another block of
// the cluster issued it: negative).
struct Pend {
  int32_t copy, reads, reader, tma;
};

// One access a shared element's vector-clock shadow remembers: the thread (linear id in the
// block; `VATOM` set for an atomic update) and its own clock at the access.
struct VRec {
  int32_t t;
  uint32_t c;
};
constexpr int32_t VATOM = int32_t(1) << 30;
constexpr uint32_t VS_INLINE = 2;

// The race-detection state of one shared element once its cluster orders by mbarriers (the
// `Shadow` is then unused): within the current barrier epoch, the last plain writer and its
// clock, and the reads and atomic updates since (each thread's latest, less those ordered
// before a later access of the same kind by another thread: those mutually unordered).
struct VShadow {
  uint32_t epoch = 0;
  int32_t w = -1;
  uint32_t wc = 0;
  uint32_t n = 0, cap = 0;
  VRec in[VS_INLINE] = {};
  VRec* more = nullptr;  // entries VS_INLINE.. (malloc'd, `cap` of them; kept when cleared)
  VShadow() = default;
  VShadow(const VShadow&) = delete;
  VShadow& operator=(const VShadow&) = delete;
  ~VShadow() { std::free(more); }
  VRec& at(uint32_t i) { return i < VS_INLINE ? in[i] : more[i - VS_INLINE]; }
  void clear(uint32_t e) {
    epoch = e;
    w = -1;
    n = 0;
  }
  void push(VRec r) {
    if (n >= VS_INLINE && n - VS_INLINE >= cap) {
      const uint32_t c2 = cap ? 2 * cap : 4;
      void* p = std::realloc(more, size_t(c2) * sizeof(VRec));
      if (!p) throw std::bad_alloc();
      more = static_cast<VRec*>(p);
      cap = c2;
    }
    at(n++) = r;
  }
};

struct SharedMeta {
  const void* tag;
  const char* name;
  int64_t len;
  std::unique_ptr<unsigned char[]> data;
  std::unique_ptr<Shadow[]> shadow;
  std::unique_ptr<Pend[]> pend;
  // The vector-clock shadows (null until the cluster orders by mbarriers).
  std::unique_ptr<VShadow[]> vsh;
};

struct Launch {
  const LaunchDesc* d;
  std::atomic<bool> abort{false};
  std::mutex mu;
  bool has_err = false;
  ErrorOut err;
  std::atomic<uint64_t> next_cluster{0};  // the next cluster (a block without clusters) to run
  std::atomic<uint64_t> requested{0};
  std::atomic<uint64_t> sectors{0};
  // The global elements finished blocks touched (by byte address), under `cross_mu`.
  std::mutex cross_mu;
  std::unordered_map<uint64_t, Cross> cross;
};

using Body = void (*)(const LaunchArg*);

// One tensor copy (`cp.async.bulk.tensor`) in flight: the box's bytes, read from global memory
// at issue, and the shared elements they go to (box order), landed by a wait on its mbarrier.
struct TmaCopy {
  SharedMeta* m;
  uint32_t elem;
  uint32_t bytes;  // the whole box: what the copy completes of its barrier's transaction count
  std::vector<int64_t> idx;
  std::vector<unsigned char> data;
};

// An mbarrier (a `uint64_t` element of a shared array, by array and element offset): arrivals
// per phase, arrivals still pending in the current phase, the transaction count (bytes announced
// by `expect_tx` minus bytes landed; negative when bytes land first), the number of completed
// phases (the current phase's parity is its lowest bit), and the copies completing on it. With
// vector clocks: the join of the clocks its current phase's arrivals released and that of the
// last completed phase, over the threads of its block (`acc`, `done`: `n` entries) and of the
// other blocks of the cluster (`racc`, `rdone`: `n` per rank; empty until a remote arrival).
struct MBar {
  SharedMeta* m;
  int64_t off;
  uint32_t count, pending;
  int64_t tx;
  uint64_t phase;
  std::vector<TmaCopy> copies;
  std::vector<uint32_t> acc, done, racc, rdone;
};

struct Block {
  Launch* L;
  Body body;
  // Its cluster and its rank there (`%cluster_ctarank`).
  Cluster* cl;
  unsigned rank;
  uint3 bid, bdim, gdim;
  unsigned n;
  unsigned exited;
  unsigned bar_arrived;
  uint32_t epoch;
  bool aborted;
  uint64_t lin_id;
  uint64_t requested, sectors;
#if defined(__x86_64__)
  void* sched_sp;
#else
  ucontext_t sched_uc;
#endif
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  std::vector<std::unique_ptr<SharedMeta>> shared;
  // The elements of writable global buffers this block touched, by byte address: their race
  // state in the current barrier epoch (reset lazily) and the kinds of access over the run.
  std::unordered_map<uint64_t, GShadow> gshadow;
  // The mbarriers initialized so far (kept apart from the shared data: never race-checked).
  std::vector<MBar> mbars;
  // With vector clocks (`vc_activate`): its threads' clocks over its threads, `n` rows of `n`
  // (row t: thread t's), and what each learned of the other blocks' threads (`n` entries a
  // rank; empty until a wait of the thread acquired a remote arrival).
  std::vector<uint32_t> vcl;
  std::vector<std::vector<uint32_t>> vr;
};

// The blocks of one thread-block cluster, run together by one worker: blocks per cluster along
// x, y, z, the blocks by rank, the threads of all of them, how many of those wait in
// `cluster_sync` and how many returned. A launch without clusters runs each block as a
// cluster of one.
struct Cluster {
  uint3 dim;
  unsigned size;
  Block* blocks;
  unsigned threads, arrived, exited;
  // Whether its shared accesses are ordered by vector clocks (`vc_activate`).
  bool vc_on;
};

// `Pend::tma` of an element that thread `lin` of block `rank` of the cluster copies into from
// another block (decoded by `fail_tma_pending`).
inline int32_t remote_issuer(unsigned lin, unsigned rank) {
  return -(1 + int32_t(lin) + 1024 * int32_t(rank));
}

// ---------------------------------------------------------------------------------------------
// The runtime's entry points: what the templates below, the CUDA surface (`launch.hpp`) and the
// generated source call. Defined where SPTIR_EMU_RUNTIME is (the runtime library every module
// of a kernel cache links, or a module compiled with the whole prelude); a module's own view of
// the prelude only declares them, so that its compile neither parses nor instantiates what runs
// behind them.

// The running thread (fiber) of the calling OS thread; null in the scheduler.
SPTIR_API extern __thread Fiber* g_cur;

enum class Acc { Read, Write, Atomic };

[[noreturn]] SPTIR_API void fail_oob(const char* name, int64_t idx, int64_t len);
[[noreturn]] SPTIR_API void fail_unsupported(const char* what);
[[noreturn]] SPTIR_API void fail_div_by_zero();
SPTIR_API void gaccess(const void* base, int64_t len, int64_t idx, unsigned size,
                       const char* name);
SPTIR_API void grace(const void* base, int64_t len, int64_t idx, unsigned size, const char* name,
                     Acc kind);
SPTIR_API void saccess(SharedMeta* m, int64_t idx, Acc kind);
SPTIR_API SharedMeta* block_shared_in(Block* b, const void* tag, int64_t len, size_t elem,
                                      const char* name);
SPTIR_API SharedMeta* block_shared(const void* tag, int64_t len, size_t elem, const char* name);
SPTIR_API void syncthreads();
SPTIR_API uint64_t warp_op(WOp op, unsigned mask, uint64_t val, int src);
// The registers of a warp-wide instruction (an emulated `mma`): each lane gives its `n` words
// `mine` and receives every lane's in `all` (`32 n` words, lane `l`'s at `l n`; a lane the
// warp does not have gives the caller's own), in one rendezvous instead of `n` shuffles a lane.
SPTIR_API void warp_gather(const uint32_t* mine, unsigned n, uint32_t* all);
SPTIR_API void cp_async_issue(SharedMeta* m, int64_t idx, const void* src, uint32_t count,
                              uint32_t elem);
SPTIR_API void cp_async_commit();
SPTIR_API void cp_async_wait(size_t n);
SPTIR_API void mma_issue(std::vector<std::pair<SharedMeta*, int64_t>> reads,
                         std::function<void()> run);
SPTIR_API void mma_commit();
SPTIR_API void mma_wait(size_t n);
// `tma.hpp`
SPTIR_API int mbar_get(SharedMeta* m, int64_t off, const char* what);
SPTIR_API void mbar_init(SharedMeta* m, int64_t off, unsigned count);
SPTIR_API void mbar_expect_tx(SharedMeta* m, int64_t off, unsigned bytes);
SPTIR_API void mbar_wait(SharedMeta* m, int64_t off, unsigned parity);
SPTIR_API void tma_mark_remote(Block* p, SharedMeta* m, int64_t e, int32_t code);
// `cluster.hpp`
SPTIR_API void cluster_sync();
SPTIR_API Block* cluster_peer(unsigned rank, const char* what);
SPTIR_API int peer_mbar(Block* p, SharedMeta* m, int64_t off, const char* what);
SPTIR_API void mbar_arrive_cluster(SharedMeta* m, int64_t off, unsigned rank);
// `launch.hpp`
SPTIR_API int run_grid(LaunchDesc* d, Body body);

inline Fiber* cur() { return g_cur; }

inline uint3 tid_of(const Block* b, unsigned lin) {
  return uint3{lin % b->bdim.x, (lin / b->bdim.x) % b->bdim.y, lin / (b->bdim.x * b->bdim.y)};
}

inline void copy_dim(uint32_t* out, uint3 v) {
  out[0] = v.x;
  out[1] = v.y;
  out[2] = v.z;
}

template <class V>
inline uint64_t to_bits(V v) {
  static_assert(std::is_arithmetic<V>::value && sizeof(V) <= 8, "warp collective on this type");
  uint64_t u = 0;
  std::memcpy(&u, &v, sizeof v);
  return u;
}

template <class V>
inline V from_bits(uint64_t u) {
  V v;
  std::memcpy(&v, &u, sizeof v);
  return v;
}

}  // namespace sptir_emu

#ifdef SPTIR_EMU_RUNTIME
// ---------------------------------------------------------------------------------------------
// The runtime (to `#endif  // SPTIR_EMU_RUNTIME`).

namespace sptir_emu {
__thread Fiber* g_cur = nullptr;
}  // namespace sptir_emu

// ---------------------------------------------------------------------------------------------
// Context switching.

#if defined(__x86_64__)
extern "C" void sptir_emu_switch(void** save_sp, void* to_sp);
extern "C" void sptir_emu_fiber_start();
extern "C" __attribute__((visibility("hidden"), noreturn, used)) void sptir_emu_fiber_main(
    sptir_emu::Fiber* f);
// Saves the callee-saved registers on the current stack, stores the stack pointer in *save_sp,
// switches to to_sp and restores the registers saved there. A new fiber's stack is prepared so
// that the first switch "returns" into sptir_emu_fiber_start with the fiber in %rbx.
asm(".text\n"
    ".p2align 4\n"
    ".globl sptir_emu_switch\n"
    ".hidden sptir_emu_switch\n"
    ".type sptir_emu_switch,@function\n"
    "sptir_emu_switch:\n"
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    ".size sptir_emu_switch, .-sptir_emu_switch\n"
    ".p2align 4\n"
    ".globl sptir_emu_fiber_start\n"
    ".hidden sptir_emu_fiber_start\n"
    ".type sptir_emu_fiber_start,@function\n"
    "sptir_emu_fiber_start:\n"
    "  movq %rbx, %rdi\n"
    "  andq $-16, %rsp\n"
    "  call sptir_emu_fiber_main\n"
    "  ud2\n"
    ".size sptir_emu_fiber_start, .-sptir_emu_fiber_start\n");
#else
extern "C" __attribute__((noreturn)) void sptir_emu_fiber_main(sptir_emu::Fiber* f);
#endif

namespace sptir_emu {

#if !defined(__x86_64__)
static void fiber_entry_uc(unsigned lo, unsigned hi) {
  uintptr_t p = (uintptr_t(hi) << 32) | uintptr_t(lo);
  sptir_emu_fiber_main(reinterpret_cast<Fiber*>(p));
}
#endif

// Prepares `f` to start at sptir_emu_fiber_main on its own stack.
inline void fiber_init(Fiber* f) {
#if defined(__x86_64__)
  uintptr_t top = (uintptr_t(f->stack) + f->stack_size) & ~uintptr_t(15);
  void** sp = reinterpret_cast<void**>(top) - 8;
  for (int k = 0; k < 8; ++k) sp[k] = nullptr;
  sp[4] = f;                                                     // %rbx
  sp[6] = reinterpret_cast<void*>(&sptir_emu_fiber_start);       // return address
  f->sp = sp;
#else
  getcontext(&f->uc);
  f->uc.uc_stack.ss_sp = f->stack;
  f->uc.uc_stack.ss_size = f->stack_size;
  f->uc.uc_link = nullptr;
  uintptr_t p = reinterpret_cast<uintptr_t>(f);
  makecontext(&f->uc, (void (*)())fiber_entry_uc, 2, unsigned(p & 0xffffffffu),
              unsigned(p >> 32));
#endif
}

// Scheduler -> fiber.
inline void resume(Block* b, Fiber* f) {
  g_cur = f;
#if defined(__x86_64__)
  sptir_emu_switch(&b->sched_sp, f->sp);
#else
  swapcontext(&b->sched_uc, &f->uc);
#endif
  g_cur = nullptr;
}

// Fiber -> scheduler; returns when the scheduler resumes the fiber.
inline void yield(Fiber* f) {
#if defined(__x86_64__)
  sptir_emu_switch(&f->sp, f->blk->sched_sp);
#else
  swapcontext(&f->uc, &f->blk->sched_uc);
#endif
}

// Records the launch's first error (later ones are dropped).
inline void record_error(Launch* L, const ErrorOut& e) {
  std::lock_guard<std::mutex> g(L->mu);
  if (!L->has_err) {
    L->has_err = true;
    L->err = e;
  }
  L->abort.store(true, std::memory_order_relaxed);
}

inline ErrorOut new_error(int32_t kind, const Block* b) {
  ErrorOut e;
  std::memset(&e, 0, sizeof e);
  e.kind = kind;
  if (b) copy_dim(e.block, b->bid);
  return e;
}

inline void set_str(char* dst, size_t cap, const char* s) {
  std::snprintf(dst, cap, "%s", s ? s : "");
}

// Stops the calling fiber for good: the error is recorded, the block abandoned.
[[noreturn]] inline void fail(const ErrorOut& e) {
  Fiber* f = cur();
  Block* b = f->blk;
  record_error(b->L, e);
  b->aborted = true;
  f->st = St::Done;
  yield(f);
  __builtin_unreachable();
}

[[noreturn]] __attribute__((noinline)) void fail_oob(const char* name, int64_t idx,
                                                     int64_t len) {
  Fiber* f = cur();
  ErrorOut e = new_error(ERR_OOB, f->blk);
  e.index = idx;
  e.length = len;
  copy_dim(e.thread_a, f->tid);
  set_str(e.buffer, sizeof e.buffer, name);
  fail(e);
}

[[noreturn]] __attribute__((noinline)) void fail_div_by_zero() {
  Fiber* f = cur();
  ErrorOut e = new_error(ERR_DIV_BY_ZERO, f->blk);
  copy_dim(e.thread_a, f->tid);
  fail(e);
}

[[noreturn]] __attribute__((noinline)) void fail_unsupported(const char* what) {
  Fiber* f = cur();
  ErrorOut e = new_error(ERR_UNSUPPORTED, f->blk);
  copy_dim(e.thread_a, f->tid);
  set_str(e.message, sizeof e.message, what);
  fail(e);
}

// ---------------------------------------------------------------------------------------------
// Traffic counting.

constexpr size_t SOFT_FLUSH = 32 * 512;
constexpr size_t HARD_FLUSH = size_t(1) << 22;
constexpr uint32_t YIELD_EVERY = 256;

// Adds up the groups of `w.pending` that are complete: every lane of the warp that can still
// run has passed that occurrence of the site (all of them when `all`).
inline void flush_warp(Block* b, unsigned wi, bool all) {
  Warp& w = b->warps[wi];
  if (w.pending.empty()) {
    if (all) w.occ.clear();
    return;
  }
  std::sort(w.pending.begin(), w.pending.end(), [](const Rec& x, const Rec& y) {
    if (x.site != y.site) return x.site < y.site;
    if (x.occ != y.occ) return x.occ < y.occ;
    if (x.buf != y.buf) return x.buf < y.buf;
    return x.sector < y.sector;
  });
  std::vector<Rec> keep;
  unsigned base = wi * 32;
  unsigned count = std::min(32u, b->n - base);
  size_t i = 0;
  while (i < w.pending.size()) {
    uintptr_t site = w.pending[i].site;
    uint32_t limit = UINT32_MAX;
    if (!all) {
      auto it = w.occ.find(site);
      for (unsigned l = 0; l < count; ++l) {
        const Fiber& f = b->fibers[base + l];
        if (f.st == St::Ready && it != w.occ.end()) limit = std::min(limit, it->second[l]);
      }
    }
    while (i < w.pending.size() && w.pending[i].site == site) {
      uint32_t occ = w.pending[i].occ;
      size_t j = i;
      uint64_t bytes = 0, sectors = 0, last = 0;
      uintptr_t last_buf = 0;
      bool first = true;
      for (; j < w.pending.size() && w.pending[j].site == site && w.pending[j].occ == occ; ++j) {
        bytes += w.pending[j].bytes;
        if (first || w.pending[j].sector != last || w.pending[j].buf != last_buf) ++sectors;
        last = w.pending[j].sector;
        last_buf = w.pending[j].buf;
        first = false;
      }
      if (occ < limit) {
        b->requested += bytes;
        b->sectors += 32 * sectors;
      } else {
        keep.insert(keep.end(), w.pending.begin() + i, w.pending.begin() + j);
      }
      i = j;
    }
  }
  w.pending.swap(keep);
  if (all) w.occ.clear();
  if (w.pending.size() >= HARD_FLUSH) flush_warp(b, wi, true);
}

inline void flush_all(Block* b) {
  for (unsigned wi = 0; wi < b->warps.size(); ++wi) flush_warp(b, wi, true);
}

// Bounds-checks one global access and records it for traffic counting. Never inlined: its
// return address identifies the access's site in the kernel.
__attribute__((noinline)) void gaccess(const void* base, int64_t len, int64_t idx,
                                       unsigned size, const char* name) {
  uintptr_t site = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  if (idx < 0 || idx >= len) fail_oob(name, idx, len);
  Fiber* f = cur();
  Block* b = f->blk;
  unsigned wi = f->lin / 32, lane = f->lin % 32;
  Warp& w = b->warps[wi];
  auto it = w.occ.find(site);
  if (it == w.occ.end()) {
    std::array<uint32_t, 32> z;
    z.fill(0);
    it = w.occ.emplace(site, z).first;
  }
  uint32_t k = it->second[lane]++;
  // (The offset in the buffer: see `Rec`.)
  uint64_t a = uint64_t(idx) * size;
  uint64_t s0 = a >> 5, s1 = (a + size - 1) >> 5;
  const uintptr_t buf = reinterpret_cast<uintptr_t>(base);
  for (uint64_t s = s0; s <= s1; ++s)
    w.pending.push_back(Rec{site, k, s == s0 ? size : 0, buf, s});
  if (w.pending.size() >= w.next_flush) {
    flush_warp(b, wi, false);
    w.next_flush = std::max(SOFT_FLUSH, 2 * w.pending.size());
  }
  if (++f->since_yield >= YIELD_EVERY) {
    f->since_yield = 0;
    yield(f);
  }
}

// ---------------------------------------------------------------------------------------------
// Block barrier and warp collectives.

inline void release_barrier(Block* b) {
  for (Fiber& f : b->fibers)
    if (f.st == St::Barrier) f.st = St::Ready;
  b->bar_arrived = 0;
  ++b->epoch;
  flush_all(b);
}

// Completes a cluster barrier (`cluster_sync`) every thread of the cluster that has not
// returned arrived at: in every block of the cluster it orders accesses as `__syncthreads` does.
inline void release_cluster(Cluster* c) {
  for (unsigned r = 0; r < c->size; ++r) {
    Block* b = &c->blocks[r];
    for (Fiber& f : b->fibers)
      if (f.st == St::Cluster) f.st = St::Ready;
    ++b->epoch;
    flush_all(b);
  }
  c->arrived = 0;
}

inline void vc_activate(Cluster* c);

[[noreturn]] inline void fail_divergent(Block* b, unsigned x, unsigned y) {
  ErrorOut e = new_error(ERR_DEADLOCK, b);
  copy_dim(e.thread_a, b->fibers[x].tid);
  copy_dim(e.thread_b, b->fibers[y].tid);
  std::snprintf(e.message, sizeof e.message,
                "divergent warp collective: one lane waits in %s, another in %s",
                wop_name(b->fibers[x].wop), wop_name(b->fibers[y].wop));
  fail(e);
}

inline void vc_join_warp(Block* b, unsigned wi);

// Completes the collective every live lane of warp `wi` waits in (`__syncwarp`, with vector
// clocks: the lanes' clocks joined).
inline void complete_warp(Block* b, unsigned wi) {
  Warp& w = b->warps[wi];
  unsigned base = wi * 32;
  unsigned count = std::min(32u, b->n - base);
  Fiber* lanes = &b->fibers[base];
  int first = -1;
  for (unsigned l = 0; l < count; ++l) {
    if (lanes[l].st != St::Warp) continue;
    if (first < 0) first = int(l);
    else if (lanes[l].wop != lanes[first].wop) fail_divergent(b, base + first, base + l);
  }
  if (first < 0) return;
  WOp op = lanes[first].wop;
  if (op == WOp::Sync) {
    vc_activate(b->cl);
    vc_join_warp(b, wi);
  }
  uint64_t ballot = 0;
  bool all = true;
  for (unsigned l = 0; l < count; ++l)
    if (lanes[l].st == St::Warp) {
      if (lanes[l].wval != 0) ballot |= uint64_t(1) << l;
      else all = false;
    }
  for (unsigned l = 0; l < count; ++l) {
    Fiber& f = lanes[l];
    if (f.st != St::Warp) continue;
    switch (op) {
      case WOp::Sync: f.wres = 0; break;
      case WOp::Shfl: {
        int s = f.wsrc;
        bool ok = s >= 0 && unsigned(s) < count && lanes[s].st == St::Warp;
        f.wres = ok ? lanes[s].wval : f.wval;
        break;
      }
      case WOp::Ballot: f.wres = ballot; break;
      case WOp::Any: f.wres = ballot != 0; break;
      case WOp::All: f.wres = all; break;
      case WOp::Gather:
        for (unsigned s = 0; s < 32; ++s) {
          bool ok = s < count && lanes[s].st == St::Warp && lanes[s].gn == f.gn;
          std::memcpy(f.gout + size_t(s) * f.gn, ok ? lanes[s].gin : f.gin,
                      size_t(f.gn) * sizeof(uint32_t));
        }
        break;
    }
  }
  for (unsigned l = 0; l < count; ++l)
    if (lanes[l].st == St::Warp) lanes[l].st = St::Ready;
  w.arrived = 0;
  flush_warp(b, wi, true);
}

uint64_t warp_op(WOp op, unsigned mask, uint64_t val, int src) {
  Fiber* f = cur();
  if (mask != 0xffffffffu) fail_unsupported("warp collective with a mask other than 0xffffffff");
  Block* b = f->blk;
  unsigned wi = f->lin / 32;
  Warp& w = b->warps[wi];
  f->wop = op;
  f->wval = val;
  f->wsrc = src;
  f->st = St::Warp;
  ++w.arrived;
  if (w.arrived == w.live) complete_warp(b, wi);
  else yield(f);
  f->since_yield = 0;
  return f->wres;
}

void warp_gather(const uint32_t* mine, unsigned n, uint32_t* all) {
  Fiber* f = cur();
  f->gin = mine;
  f->gout = all;
  f->gn = n;
  warp_op(WOp::Gather, 0xffffffffu, 0, 0);
}

void syncthreads() {
  Fiber* f = cur();
  Block* b = f->blk;
  f->st = St::Barrier;
  ++b->bar_arrived;
  if (b->bar_arrived + b->exited == b->n) release_barrier(b);
  else yield(f);
  f->since_yield = 0;
}

inline void async_at_exit(Fiber* f);

[[noreturn]] inline void thread_exit(Fiber* f) {
  async_at_exit(f);
  Block* b = f->blk;
  unsigned wi = f->lin / 32;
  Warp& w = b->warps[wi];
  f->st = St::Done;
  ++b->exited;
  --w.live;
  if (w.arrived > 0 && w.arrived == w.live) complete_warp(b, wi);
  if (b->bar_arrived > 0 && b->bar_arrived + b->exited == b->n) release_barrier(b);
  Cluster* c = b->cl;
  ++c->exited;
  if (c->arrived > 0 && c->arrived + c->exited == c->threads) release_cluster(c);
  yield(f);
  __builtin_unreachable();
}

// ---------------------------------------------------------------------------------------------
// Shared arrays.

// Block `b`'s shared array declared at `tag` (allocated, zeroed, by the first thread that
// reaches the declaration, or by a tensor copy another block of the cluster multicasts into it).
SharedMeta* block_shared_in(Block* b, const void* tag, int64_t len, size_t elem,
                            const char* name) {
  for (auto& m : b->shared)
    if (m->tag == tag) return m.get();
  std::unique_ptr<SharedMeta> m(new SharedMeta);
  m->tag = tag;
  m->name = name;
  m->len = len;
  m->data.reset(new unsigned char[size_t(len) * elem]());
  m->shadow.reset(new Shadow[size_t(len)]());
  m->pend.reset(new Pend[size_t(len)]());
  if (b->cl->vc_on) m->vsh.reset(new VShadow[size_t(len)]());
  b->shared.push_back(std::move(m));
  return b->shared.back().get();
}

SharedMeta* block_shared(const void* tag, int64_t len, size_t elem, const char* name) {
  return block_shared_in(cur()->blk, tag, len, elem, name);
}

[[noreturn]] __attribute__((noinline)) inline void fail_race(const char* name, int64_t idx,
                                                             int64_t len, int32_t other,
                                                             const char* what) {
  Fiber* f = cur();
  Block* b = f->blk;
  ErrorOut e = new_error(ERR_RACE, b);
  e.index = idx;
  e.length = len;
  copy_dim(e.thread_a, tid_of(b, unsigned(other)));
  copy_dim(e.thread_b, f->tid);
  set_str(e.buffer, sizeof e.buffer, name);
  set_str(e.message, sizeof e.message, what);
  fail(e);
}

// An access to element `idx` of `m`, which the tensor copy of `Pend::tma` `code` is still
// copying into.
[[noreturn]] __attribute__((noinline)) inline void fail_tma_pending(SharedMeta* m, int64_t idx,
                                                                    int32_t code) {
  if (code > 0)
    fail_race(m->name, idx, m->len, code - 1,
              "an access to an element a tensor copy (cp.async.bulk.tensor) is still copying "
              "into (before a wait on its mbarrier sees the copy's phase complete)");
  const unsigned v = unsigned(-code - 1);
  char msg[256];
  std::snprintf(msg, sizeof msg,
                "an access to an element a tensor copy multicast by block rank %u of the cluster "
                "(the first thread named is its issuer there) is still copying into (before a "
                "wait on its mbarrier sees the copy's phase complete)",
                v / 1024);
  fail_race(m->name, idx, m->len, int32_t(v % 1024), msg);
}

// The messages of the races `race_step` finds: the access, then the other party's.
struct RaceText {
  const char *read_write, *read_atomic, *write_write, *write_read, *write_atomic, *atomic_write,
      *atomic_read;
};

// Between the threads of a block, within one barrier epoch.
constexpr RaceText THREAD_RACES = {
    "a read after another thread's write",     "a read after another thread's atomicAdd",
    "a write after another thread's write",    "a write after another thread's read",
    "a write after another thread's atomicAdd", "an atomicAdd after another thread's write",
    "an atomicAdd after another thread's read"};

// Between the blocks of a launch, over their whole runs.
constexpr RaceText BLOCK_RACES = {
    "read by one block, written by another of the same launch",
    "read by one block, updated with atomicAdd by another of the same launch",
    "written by two blocks of one launch",
    "written by one block, read by another of the same launch",
    "written by one block, updated with atomicAdd by another of the same launch",
    "updated with atomicAdd by one block, written by another of the same launch",
    "updated with atomicAdd by one block, read by another of the same launch"};

// One access of `kind` by party `t` (a thread, or a block) to the element whose state is `s`
// (the last plain writer, two distinct readers, two distinct atomic updaters; -1 for none): the
// message of the race it completes (`o` the other party), or nullptr; otherwise `t` recorded.
template <class S, class Id>
inline const char* race_step(S& s, Id t, Acc kind, Id& o, const RaceText& text) {
  auto other = [t](Id a, Id c) -> Id {
    if (a != -1 && a != t) return a;
    if (c != -1 && c != t) return c;
    return -1;
  };
  auto add = [t](Id& a, Id& c) {
    if (a == -1) a = t;
    else if (a != t && c == -1) c = t;
  };
  switch (kind) {
    case Acc::Read:
      if (s.w != -1 && s.w != t) return o = s.w, text.read_write;
      if ((o = other(s.a1, s.a2)) != -1) return text.read_atomic;
      add(s.r1, s.r2);
      break;
    case Acc::Write:
      if (s.w != -1 && s.w != t) return o = s.w, text.write_write;
      if ((o = other(s.r1, s.r2)) != -1) return text.write_read;
      if ((o = other(s.a1, s.a2)) != -1) return text.write_atomic;
      s.w = t;
      break;
    case Acc::Atomic:
      if (s.w != -1 && s.w != t) return o = s.w, text.atomic_write;
      if ((o = other(s.r1, s.r2)) != -1) return text.atomic_read;
      add(s.a1, s.a2);
      break;
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Vector clocks: mbarriers and `__syncwarp` as synchronization.
//
// A barrier (`__syncthreads`, `cluster_sync`) orders every access before it before every access
// after it: a new barrier epoch, whose shadows start empty. Within an epoch, once a cluster
// orders by them (from its first `mbarrier.init` or `__syncwarp`, `vc_activate`), an access
// races with a recorded access of another thread only if that one does not happen before it.
// Each thread has a vector clock over the threads of its block (its own entry: its clock). An
// arrival on an mbarrier (`arrive`, `arrive.expect_tx`, a remote arrival: release) joins the
// thread's clock into the barrier's current phase and then increments the thread's own entry;
// when the phase completes, that join becomes the phase's; a wait that returns (acquire) joins
// the barrier's last completed phase into the waiter's clock; `__syncwarp` joins the clocks of
// the warp's lanes (each lane's own entry incremented after). An access recorded as (thread u,
// u's clock c) happens before an access of thread t iff t's entry for u is at least c. A wait
// for parity p returns once the barrier's current phase has the other parity: the phase it
// observes is the last completed one (the one before has the other parity, so no wait that
// returns observes it, and only the last is kept). A tensor copy's landing still counts as
// written by no thread (`mbar_land`); copies and products in flight stay races whatever the
// clocks say (`Pend`).
// Across the blocks of a cluster: a remote arrival joins the arriving thread's clock into the
// barrier's entries for the arriver's block (`MBar::racc`), and a wait that acquires them keeps
// them apart (`Fiber::vr`): they order the waiting thread's tensor copies multicast into that
// block after its threads' accesses there (`tma_mark_remote`). What a thread learned of other
// blocks is not passed on by its own arrivals or `__syncwarp`: only the thread that waits on
// the barrier the remote arrivals reach relies on them (more races reported, never fewer).
// Before the first `mbarrier.init` or `__syncwarp`, the epoch shadows suffice: the accesses of
// the current epoch they hold (two readers and two atomic updaters at most) are taken over then.

// Starts vector clocks in every block of cluster `c` (once per run): every thread at clock 1,
// knowing nothing of the others; the shared elements' records of the current epoch taken over
// at clock 1.
inline void vc_activate(Cluster* c) {
  if (c->vc_on) return;
  c->vc_on = true;
  for (unsigned r = 0; r < c->size; ++r) {
    Block* b = &c->blocks[r];
    const size_t n = b->n;
    b->vcl.assign(n * n, 0);
    for (size_t t = 0; t < n; ++t) b->vcl[t * n + t] = 1;
    b->vr.resize(n);
    for (auto& v : b->vr) v.clear();
    for (auto& mp : b->shared) {
      SharedMeta* m = mp.get();
      m->vsh.reset(new VShadow[size_t(m->len)]());
      for (int64_t e = 0; e < m->len; ++e) {
        const Shadow& s = m->shadow[e];
        if (s.epoch != b->epoch) continue;
        VShadow& v = m->vsh[e];
        v.clear(b->epoch);
        v.w = s.w;
        v.wc = 1;
        for (int32_t u : {s.r1, s.r2})
          if (u != -1) v.push(VRec{u, 1});
        for (int32_t u : {s.a1, s.a2})
          if (u != -1) v.push(VRec{u | VATOM, 1});
      }
    }
    for (MBar& x : b->mbars) {
      x.acc.assign(n, 0);
      x.done.assign(n, 0);
      x.racc.clear();
      x.rdone.clear();
    }
  }
}

// Thread `f`'s clock (with vector clocks).
inline uint32_t* vc_of(Fiber* f) { return f->blk->vcl.data() + size_t(f->lin) * f->blk->n; }

// Thread `f` arrives on mbarrier `x` of block `p` (release): its clock joined into the current
// phase's (into the entries of `f`'s block when `p` is another block), then its own entry
// incremented.
inline void vc_release(Fiber* f, Block* p, MBar& x) {
  Block* b = f->blk;
  const unsigned n = b->n;
  uint32_t* vc = vc_of(f);
  uint32_t* d = x.acc.data();
  if (p != b) {
    if (x.racc.empty()) x.racc.assign(size_t(n) * b->cl->size, 0);
    d = x.racc.data() + size_t(b->rank) * n;
  }
  for (unsigned k = 0; k < n; ++k) d[k] = std::max(d[k], vc[k]);
  ++vc[f->lin];
}

// The current phase of `x` completed: its join becomes the last completed phase's.
inline void vc_complete(MBar& x) {
  x.done.swap(x.acc);
  std::fill(x.acc.begin(), x.acc.end(), 0u);
  x.rdone.swap(x.racc);
  std::fill(x.racc.begin(), x.racc.end(), 0u);
}

// A wait of `f` on `x` returned (acquire): the last completed phase's join joined into its
// clock (the other blocks' entries into `Block::vr`).
inline void vc_acquire(Fiber* f, const MBar& x) {
  const unsigned n = f->blk->n;
  uint32_t* vc = vc_of(f);
  for (unsigned k = 0; k < n; ++k) vc[k] = std::max(vc[k], x.done[k]);
  if (!x.rdone.empty()) {
    std::vector<uint32_t>& vr = f->blk->vr[f->lin];
    if (vr.empty()) vr.assign(x.rdone.size(), 0u);
    for (size_t k = 0; k < x.rdone.size(); ++k) vr[k] = std::max(vr[k], x.rdone[k]);
  }
}

// `__syncwarp` of warp `wi` completes: the clocks of the lanes waiting in it joined, then each
// lane's own entry incremented.
inline void vc_join_warp(Block* b, unsigned wi) {
  const unsigned n = b->n, base = wi * 32, count = std::min(32u, n - base);
  const Fiber* lanes = &b->fibers[base];
  uint32_t* row = b->vcl.data() + size_t(base) * n;
  uint32_t* j = nullptr;
  for (unsigned l = 0; l < count; ++l) {
    if (lanes[l].st != St::Warp) continue;
    const uint32_t* v = row + size_t(l) * n;
    if (!j) {
      j = row + size_t(l) * n;
      continue;
    }
    for (unsigned k = 0; k < n; ++k) j[k] = std::max(j[k], v[k]);
  }
  for (unsigned l = 0; l < count; ++l) {
    uint32_t* v = row + size_t(l) * n;
    if (lanes[l].st != St::Warp) continue;
    if (v != j) std::memcpy(v, j, size_t(n) * sizeof(uint32_t));
    ++v[base + l];
  }
}

[[noreturn]] __attribute__((noinline)) inline void fail_race_vc(SharedMeta* m, int64_t idx,
                                                                int32_t other, const char* what) {
  char msg[400];
  std::snprintf(msg, sizeof msg,
                "%s, unordered by mbarriers too (no arrival of the first thread after its access, "
                "itself or through its warp's __syncwarp, whose phase a wait of the second "
                "observed before its access)",
                what);
  fail_race(m->name, idx, m->len, other, msg);
}

// `saccess` with vector clocks (see above): the access races with the recorded writer, reads
// or atomic updates it conflicts with that do not happen before it; then it is recorded.
__attribute__((noinline)) inline void saccess_vc(SharedMeta* m, int64_t idx, Acc kind, Fiber* f) {
  Block* b = f->blk;
  VShadow& s = m->vsh[idx];
  if (s.epoch != b->epoch) s.clear(b->epoch);
  const uint32_t* vc = vc_of(f);
  const int32_t t = int32_t(f->lin);
  const uint32_t now = vc[t];
  if (s.w != -1 && vc[s.w] < s.wc)
    fail_race_vc(m, idx, s.w,
                 kind == Acc::Read    ? THREAD_RACES.read_write
                 : kind == Acc::Write ? THREAD_RACES.write_write
                                      : THREAD_RACES.atomic_write);
  const bool atomic = kind == Acc::Atomic;
  uint32_t keep = 0;
  for (uint32_t i = 0; i < s.n; ++i) {
    const VRec r = s.at(i);
    const bool ra = (r.t & VATOM) != 0;
    const int32_t u = r.t & ~VATOM;
    const bool before = vc[u] >= r.c;  // (always for the thread's own records)
    if (!before) {
      if (kind == Acc::Write)
        fail_race_vc(m, idx, u, ra ? THREAD_RACES.write_atomic : THREAD_RACES.write_read);
      if (ra != atomic)
        fail_race_vc(m, idx, u, atomic ? THREAD_RACES.atomic_read : THREAD_RACES.read_atomic);
    }
    // A record of the same kind that happens before this access is implied by it (what
    // conflicts with one conflicts with the other); a write replaces them all.
    if (kind == Acc::Write || (before && ra == atomic)) continue;
    s.at(keep++) = r;
  }
  if (kind == Acc::Write) {
    s.n = 0;
    s.w = t;
    s.wc = now;
  } else {
    s.n = keep;
    s.push(VRec{atomic ? (t | VATOM) : t, now});
  }
}

void saccess(SharedMeta* m, int64_t idx, Acc kind) {
  if (idx < 0 || idx >= m->len) fail_oob(m->name, idx, m->len);
  Fiber* f = cur();
  Block* b = f->blk;
  const Pend& p = m->pend[idx];
  if (p.tma) fail_tma_pending(m, idx, p.tma);
  if (p.copy)
    fail_race(m->name, idx, m->len, p.copy - 1,
              "an access to an element a cp.async is still copying into (before the copying "
              "thread's cp.async.wait_group completes it)");
  if (p.reads && kind != Acc::Read)
    fail_race(m->name, idx, m->len, p.reader - 1,
              "a write to an element a tensor-core product in flight reads (before the "
              "issuing warpgroup's wgmma.wait_group completes it)");
  if (m->vsh) return saccess_vc(m, idx, kind, f);
  Shadow& s = m->shadow[idx];
  if (s.epoch != b->epoch) s = Shadow{b->epoch, -1, -1, -1, -1, -1};
  int32_t o = -1;
  if (const char* what = race_step(s, int32_t(f->lin), kind, o, THREAD_RACES))
    fail_race(m->name, idx, m->len, o, what);
}

// ---------------------------------------------------------------------------------------------
// Asynchronous copies and products. A `cp.async` records its write at issue (a race with what
// other threads did in the same barrier epoch) and marks its elements as being copied into:
// any access to them before the issuing thread's `cp.async.wait_group` completes the copy is a
// race, as the GPU may land the bytes at any point in between. The wait writes them (a write
// in the wait's epoch). A tensor-core product in flight reads its shared operand at issue and
// again when its `wgmma.wait_group` completes it, where it is computed; a write to those
// elements in between is a race. So a pipeline whose waits or buffer count are wrong fails
// here rather than giving the right answer only because the emulator copied at once.

void cp_async_issue(SharedMeta* m, int64_t idx, const void* src, uint32_t count,
                    uint32_t elem) {
  Fiber* f = cur();
  for (uint32_t k = 0; k < count; ++k) {
    saccess(m, idx + k, Acc::Write);
    m->pend[idx + k].copy = int32_t(f->lin) + 1;
  }
  AsyncCopy c;
  c.m = m;
  c.idx = idx;
  c.count = count;
  c.elem = elem;
  std::memcpy(c.bytes, src, size_t(count) * elem);
  f->cp_open.push_back(c);
}

void cp_async_commit() {
  Fiber* f = cur();
  f->cp_groups.push_back(std::move(f->cp_open));
  f->cp_open.clear();
}

inline void cp_async_land(const AsyncCopy& c) {
  for (uint32_t k = 0; k < c.count; ++k) {
    c.m->pend[c.idx + k].copy = 0;
    saccess(c.m, c.idx + k, Acc::Write);
  }
  std::memcpy(c.m->data.get() + size_t(c.idx) * c.elem, c.bytes, size_t(c.count) * c.elem);
}

// `cp.async.wait_group n`: every committed group but the `n` newest complete.
void cp_async_wait(size_t n) {
  Fiber* f = cur();
  while (f->cp_groups.size() > n) {
    for (const AsyncCopy& c : f->cp_groups.front()) cp_async_land(c);
    f->cp_groups.pop_front();
  }
}

// A product issued (`wgmma.mma_async`): its shared reads checked now, the product run when its
// group completes.
void mma_issue(std::vector<std::pair<SharedMeta*, int64_t>> reads,
               std::function<void()> run) {
  Fiber* f = cur();
  for (const auto& [m, idx] : reads) {
    saccess(m, idx, Acc::Read);
    Pend& p = m->pend[idx];
    ++p.reads;
    p.reader = int32_t(f->lin) + 1;
  }
  f->mma_open.push_back(AsyncMma{std::move(reads), std::move(run)});
}

void mma_commit() {
  Fiber* f = cur();
  f->mma_groups.push_back(std::move(f->mma_open));
  f->mma_open.clear();
}

// `wgmma.wait_group n`: every committed group of products but the `n` newest complete.
void mma_wait(size_t n) {
  Fiber* f = cur();
  while (f->mma_groups.size() > n) {
    std::vector<AsyncMma> g = std::move(f->mma_groups.front());
    f->mma_groups.pop_front();
    for (AsyncMma& op : g) {
      for (const auto& [m, idx] : op.reads) --m->pend[idx].reads;
      op.run();
    }
  }
}

// At a thread's end: its copies land (the GPU completes them); a product still in flight is an
// error (its accumulators were never waited for).
inline void async_at_exit(Fiber* f) {
  for (const AsyncCopy& c : f->cp_open) cp_async_land(c);
  f->cp_open.clear();
  cp_async_wait(0);
  if (!f->mma_open.empty() || !f->mma_groups.empty())
    fail_unsupported("a thread ended with a tensor-core product in flight (no wgmma.wait_group "
                     "after its wgmma.mma_async)");
}

// The same check for an element of a writable global buffer among the threads of one block
// (the blocks are checked against each other as each finishes, `merge_block`; the kinds of
// access are recorded here for that): two threads touching it between barriers, one
// writing, not both atomically, race — a reduction whose lanes all update one element without
// a cross-thread combination, for one.
__attribute__((noinline)) void grace(const void* base, int64_t len, int64_t idx,
                                     unsigned size, const char* name, Acc kind) {
  if (idx < 0 || idx >= len) return;  // reported by gaccess
  Fiber* f = cur();
  Block* b = f->blk;
  uint64_t a = reinterpret_cast<uint64_t>(base) + uint64_t(idx) * size;
  GShadow& g = b->gshadow[a];
  g.kinds |= uint8_t(1u << unsigned(kind));
  g.name = name;
  g.idx = idx;
  g.len = len;
  Shadow& s = g.s;
  if (s.epoch != b->epoch) s = Shadow{b->epoch, -1, -1, -1, -1, -1};
  int32_t o = -1;
  if (const char* what = race_step(s, int32_t(f->lin), kind, o, THREAD_RACES))
    fail_race(name, idx, len, o, what);
}

// The block id (x, y, z) of linear id `id` in a grid of `g`.
inline uint3 block_of(uint64_t id, uint3 g) {
  return uint3{unsigned(id % g.x), unsigned((id / g.x) % g.y), unsigned(id / (uint64_t(g.x) * g.y))};
}

// Adds what finished block `b` touched to its launch's record. Blocks of one launch run in no
// order CUDA defines: an element one block wrote plainly and another block read, wrote or
// updated atomically, or one block read and another updated atomically, is a race. False (the
// error recorded) when `b` completes one.
inline bool merge_block(Block* b) {
  Launch* L = b->L;
  const int64_t x = int64_t(b->lin_id);
  const char* what = nullptr;
  int64_t o = -1;
  const GShadow* at = nullptr;
  {
    std::lock_guard<std::mutex> g(L->cross_mu);
    for (const auto& [addr, t] : b->gshadow) {
      Cross& c = L->cross[addr];
      // The block's kinds of access in turn, as one party (its own accesses never race).
      for (Acc kind : {Acc::Read, Acc::Atomic, Acc::Write}) {
        if (!(t.kinds & (1u << unsigned(kind)))) continue;
        if ((what = race_step(c, x, kind, o, BLOCK_RACES))) break;
      }
      if (what) {
        at = &t;
        break;
      }
    }
  }
  if (!what) return true;
  ErrorOut e = new_error(ERR_BLOCK_RACE, b);
  e.index = at->idx;
  e.length = at->len;
  copy_dim(e.thread_a, block_of(uint64_t(o), b->gdim));
  set_str(e.buffer, sizeof e.buffer, at->name);
  set_str(e.message, sizeof e.message, what);
  record_error(L, e);
  return false;
}

}  // namespace sptir_emu
#endif  // SPTIR_EMU_RUNTIME

namespace sptir_emu {

// ---------------------------------------------------------------------------------------------
// Proxies.

template <class T, bool W>
struct GPtr;

// One element of a global buffer: reads and writes are checked and counted where they happen.
template <class T, bool W>
struct GRef {
  T* base;
  int64_t len;
  int64_t idx;
  const char* name;

  GRef(T* b, int64_t l, int64_t i, const char* n) : base(b), len(l), idx(i), name(n) {}
  GRef(const GRef&) = default;

  __attribute__((always_inline)) T load() const {
    gaccess(base, len, idx, sizeof(T), name);
    if (W) grace(base, len, idx, sizeof(T), name, Acc::Read);
    return base[idx];
  }
  __attribute__((always_inline)) void store(T v) const {
    static_assert(W, "a store through an SPTIR_IN pointer");
    gaccess(base, len, idx, sizeof(T), name);
    grace(base, len, idx, sizeof(T), name, Acc::Write);
    base[idx] = v;
  }
  __attribute__((always_inline)) operator T() const { return load(); }
  __attribute__((always_inline)) GRef& operator=(T v) {
    store(v);
    return *this;
  }
  __attribute__((always_inline)) GRef& operator=(const GRef& o) {
    store(o.load());
    return *this;
  }
  template <class U, bool W2>
  __attribute__((always_inline)) GRef& operator=(const GRef<U, W2>& o) {
    store(T(o.load()));
    return *this;
  }
  template <class U>
  __attribute__((always_inline)) GRef& operator+=(const U& v) {
    T c = load();
    store(T(c + v));
    return *this;
  }
  template <class U>
  __attribute__((always_inline)) GRef& operator-=(const U& v) {
    T c = load();
    store(T(c - v));
    return *this;
  }
  template <class U>
  __attribute__((always_inline)) GRef& operator*=(const U& v) {
    T c = load();
    store(T(c * v));
    return *this;
  }
  template <class U>
  __attribute__((always_inline)) GRef& operator/=(const U& v) {
    T c = load();
    store(T(c / v));
    return *this;
  }
  GPtr<T, W> operator&() const { return GPtr<T, W>(base, len, idx, name); }
};

// A pointer into a global buffer: the buffer's base, length and name, and an offset.
template <class T, bool W>
struct GPtr {
  T* base;
  int64_t len;
  int64_t off;
  const char* name;

  GPtr(T* b, int64_t l, int64_t o, const char* n) : base(b), len(l), off(o), name(n) {}
  template <bool W2, class = typename std::enable_if<!W && W2>::type>
  GPtr(const GPtr<T, W2>& o) : base(o.base), len(o.len), off(o.off), name(o.name) {}
  static GPtr make(void* p, int64_t l, const char* n) { return GPtr(static_cast<T*>(p), l, 0, n); }

  __attribute__((always_inline)) GRef<T, W> operator[](int64_t i) const {
    return GRef<T, W>(base, len, off + i, name);
  }
  __attribute__((always_inline)) GRef<T, W> operator*() const {
    return GRef<T, W>(base, len, off, name);
  }
  GPtr operator+(int64_t i) const { return GPtr(base, len, off + i, name); }
  GPtr operator-(int64_t i) const { return GPtr(base, len, off - i, name); }
  friend GPtr operator+(int64_t i, const GPtr& p) { return p + i; }
  GPtr& operator+=(int64_t i) {
    off += i;
    return *this;
  }
  GPtr& operator-=(int64_t i) {
    off -= i;
    return *this;
  }
};

template <class T>
struct SPtr;

// One element of a shared array: accesses are checked for races.
template <class T>
struct SRef {
  T* data;
  SharedMeta* m;
  int64_t idx;

  SRef(T* d, SharedMeta* mm, int64_t i) : data(d), m(mm), idx(i) {}
  SRef(const SRef&) = default;

  T load() const {
    saccess(m, idx, Acc::Read);
    return data[idx];
  }
  void store(T v) const {
    saccess(m, idx, Acc::Write);
    data[idx] = v;
  }
  operator T() const { return load(); }
  SRef& operator=(T v) {
    store(v);
    return *this;
  }
  SRef& operator=(const SRef& o) {
    store(o.load());
    return *this;
  }
  template <class U>
  SRef& operator=(const SRef<U>& o) {
    store(T(o.load()));
    return *this;
  }
  template <class U, bool W2>
  SRef& operator=(const GRef<U, W2>& o) {
    store(T(o.load()));
    return *this;
  }
  template <class U>
  SRef& operator+=(const U& v) {
    T c = load();
    store(T(c + v));
    return *this;
  }
  template <class U>
  SRef& operator-=(const U& v) {
    T c = load();
    store(T(c - v));
    return *this;
  }
  template <class U>
  SRef& operator*=(const U& v) {
    T c = load();
    store(T(c * v));
    return *this;
  }
  template <class U>
  SRef& operator/=(const U& v) {
    T c = load();
    store(T(c / v));
    return *this;
  }
  SPtr<T> operator&() const { return SPtr<T>(data, m, idx); }
};

template <class T>
struct SPtr {
  T* data;
  SharedMeta* m;
  int64_t off;

  SPtr(T* d, SharedMeta* mm, int64_t o) : data(d), m(mm), off(o) {}
  SRef<T> operator[](int64_t i) const { return SRef<T>(data, m, off + i); }
  SRef<T> operator*() const { return SRef<T>(data, m, off); }
  SPtr operator+(int64_t i) const { return SPtr(data, m, off + i); }
  SPtr operator-(int64_t i) const { return SPtr(data, m, off - i); }
  friend SPtr operator+(int64_t i, const SPtr& p) { return p + i; }
};

template <class T>
inline SPtr<T> shared_array(const void* tag, int64_t len, const char* name) {
  SharedMeta* m = block_shared(tag, len, sizeof(T), name);
  return SPtr<T>(reinterpret_cast<T*>(m->data.get()), m, 0);
}

// The value type behind a proxy (the type itself otherwise).
template <class T>
struct val_of {
  using type = T;
};
template <class T, bool W>
struct val_of<GRef<T, W>> {
  using type = T;
};
template <class T>
struct val_of<SRef<T>> {
  using type = T;
};
template <class T>
using val_t = typename val_of<typename std::decay<T>::type>::type;

}  // namespace sptir_emu
