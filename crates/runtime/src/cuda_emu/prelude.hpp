// sparsetir CUDA emulator prelude: runs the generated CUDA source on the host CPU.
//
// Compiled before the module source (with SPTIR_EMU defined) by the host C++ compiler. A launch
// runs the grid block by block, on at most `os_threads` OS threads; the threads of one block are
// user-level fibers on one OS thread that switch only at `__syncthreads`, at warp collectives,
// after a few hundred global accesses (to keep the lanes of a warp close together) and at their
// end. Global pointers and shared arrays are proxies: every element access is bounds-checked;
// global accesses are grouped per warp into memory transactions (traffic counting) and shared
// accesses are checked for races between barriers. Errors stop the launch and are returned to
// the Rust side in `ErrorOut`; nothing here aborts the process on bad input.
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

namespace sptir_emu {

constexpr int ABI_VERSION = 2;

// Error kinds (`ErrorOut::kind`), mirrored in Rust.
enum : int32_t {
  ERR_NONE = 0,
  ERR_OOB = 1,
  ERR_RACE = 2,
  ERR_DEADLOCK = 3,
  ERR_UNSUPPORTED = 4,
  ERR_INTERNAL = 5,
  ERR_BLOCK_RACE = 6,
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
  uint32_t os_threads;
  uint32_t reserved;
  const LaunchArg* args;
  uint64_t requested_bytes;
  uint64_t sector_bytes;
  ErrorOut err;
};

struct uint3 {
  unsigned x, y, z;
};

enum class St : uint8_t { Ready, Barrier, Warp, MBar, Done };
enum class WOp : uint8_t { Sync, Shfl, Ballot, Any, All };

inline const char* wop_name(WOp op) {
  switch (op) {
    case WOp::Sync: return "__syncwarp";
    case WOp::Shfl: return "__shfl_*_sync";
    case WOp::Ballot: return "__ballot_sync";
    case WOp::Any: return "__any_sync";
    case WOp::All: return "__all_sync";
  }
  return "?";
}

struct Block;
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
struct Rec {
  uintptr_t site;
  uint32_t occ;
  uint32_t bytes;
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
// (`cp.async.bulk.tensor`) into it has not landed yet.
struct Pend {
  int32_t copy, reads, reader, tma;
};

struct SharedMeta {
  const void* tag;
  const char* name;
  int64_t len;
  std::unique_ptr<unsigned char[]> data;
  std::unique_ptr<Shadow[]> shadow;
  std::unique_ptr<Pend[]> pend;
};

struct Launch {
  const LaunchDesc* d;
  std::atomic<bool> abort{false};
  std::mutex mu;
  bool has_err = false;
  ErrorOut err;
  std::atomic<uint64_t> next_block{0};
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
// phases (the current phase's parity is its lowest bit), and the copies completing on it.
struct MBar {
  SharedMeta* m;
  int64_t off;
  uint32_t count, pending;
  int64_t tx;
  uint64_t phase;
  std::vector<TmaCopy> copies;
};

struct Block {
  Launch* L;
  Body body;
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
};

static thread_local Fiber* g_cur = nullptr;

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

inline Fiber* cur() { return g_cur; }

inline uint3 tid_of(const Block* b, unsigned lin) {
  return uint3{lin % b->bdim.x, (lin / b->bdim.x) % b->bdim.y, lin / (b->bdim.x * b->bdim.y)};
}

inline void copy_dim(uint32_t* out, uint3 v) {
  out[0] = v.x;
  out[1] = v.y;
  out[2] = v.z;
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

[[noreturn]] __attribute__((noinline)) inline void fail_oob(const char* name, int64_t idx,
                                                            int64_t len) {
  Fiber* f = cur();
  ErrorOut e = new_error(ERR_OOB, f->blk);
  e.index = idx;
  e.length = len;
  copy_dim(e.thread_a, f->tid);
  set_str(e.buffer, sizeof e.buffer, name);
  fail(e);
}

[[noreturn]] __attribute__((noinline)) inline void fail_unsupported(const char* what) {
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
      bool first = true;
      for (; j < w.pending.size() && w.pending[j].site == site && w.pending[j].occ == occ; ++j) {
        bytes += w.pending[j].bytes;
        if (first || w.pending[j].sector != last) ++sectors;
        last = w.pending[j].sector;
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
__attribute__((noinline)) inline void gaccess(const void* base, int64_t len, int64_t idx,
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
  uint64_t a = reinterpret_cast<uint64_t>(base) + uint64_t(idx) * size;
  uint64_t s0 = a >> 5, s1 = (a + size - 1) >> 5;
  for (uint64_t s = s0; s <= s1; ++s) w.pending.push_back(Rec{site, k, s == s0 ? size : 0, s});
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

[[noreturn]] inline void fail_divergent(Block* b, unsigned x, unsigned y) {
  ErrorOut e = new_error(ERR_DEADLOCK, b);
  copy_dim(e.thread_a, b->fibers[x].tid);
  copy_dim(e.thread_b, b->fibers[y].tid);
  std::snprintf(e.message, sizeof e.message,
                "divergent warp collective: one lane waits in %s, another in %s",
                wop_name(b->fibers[x].wop), wop_name(b->fibers[y].wop));
  fail(e);
}

// Completes the collective every live lane of warp `wi` waits in.
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
    }
  }
  for (unsigned l = 0; l < count; ++l)
    if (lanes[l].st == St::Warp) lanes[l].st = St::Ready;
  w.arrived = 0;
  flush_warp(b, wi, true);
}

inline uint64_t warp_op(WOp op, unsigned mask, uint64_t val, int src) {
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

inline void syncthreads() {
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
  yield(f);
  __builtin_unreachable();
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

// ---------------------------------------------------------------------------------------------
// Shared arrays.

// The block's shared array declared at `tag` (allocated, zeroed, by the first thread that
// reaches the declaration).
inline SharedMeta* block_shared(const void* tag, int64_t len, size_t elem, const char* name) {
  Block* b = cur()->blk;
  for (auto& m : b->shared)
    if (m->tag == tag) return m.get();
  std::unique_ptr<SharedMeta> m(new SharedMeta);
  m->tag = tag;
  m->name = name;
  m->len = len;
  m->data.reset(new unsigned char[size_t(len) * elem]());
  m->shadow.reset(new Shadow[size_t(len)]());
  m->pend.reset(new Pend[size_t(len)]());
  b->shared.push_back(std::move(m));
  return b->shared.back().get();
}

enum class Acc { Read, Write, Atomic };

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

inline void saccess(SharedMeta* m, int64_t idx, Acc kind) {
  if (idx < 0 || idx >= m->len) fail_oob(m->name, idx, m->len);
  Fiber* f = cur();
  Block* b = f->blk;
  const Pend& p = m->pend[idx];
  if (p.tma)
    fail_race(m->name, idx, m->len, p.tma - 1,
              "an access to an element a tensor copy (cp.async.bulk.tensor) is still copying "
              "into (before a wait on its mbarrier sees the copy's phase complete)");
  if (p.copy)
    fail_race(m->name, idx, m->len, p.copy - 1,
              "an access to an element a cp.async is still copying into (before the copying "
              "thread's cp.async.wait_group completes it)");
  if (p.reads && kind != Acc::Read)
    fail_race(m->name, idx, m->len, p.reader - 1,
              "a write to an element a tensor-core product in flight reads (before the "
              "issuing warpgroup's wgmma.wait_group completes it)");
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

inline void cp_async_issue(SharedMeta* m, int64_t idx, const void* src, uint32_t count,
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

inline void cp_async_commit() {
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
inline void cp_async_wait(size_t n) {
  Fiber* f = cur();
  while (f->cp_groups.size() > n) {
    for (const AsyncCopy& c : f->cp_groups.front()) cp_async_land(c);
    f->cp_groups.pop_front();
  }
}

// A product issued (`wgmma.mma_async`): its shared reads checked now, the product run when its
// group completes.
inline void mma_issue(std::vector<std::pair<SharedMeta*, int64_t>> reads,
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

inline void mma_commit() {
  Fiber* f = cur();
  f->mma_groups.push_back(std::move(f->mma_open));
  f->mma_open.clear();
}

// `wgmma.wait_group n`: every committed group of products but the `n` newest complete.
inline void mma_wait(size_t n) {
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
__attribute__((noinline)) inline void grace(const void* base, int64_t len, int64_t idx,
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

// ---------------------------------------------------------------------------------------------
// mbarriers and the tensor copy engine (`TMA_PRELUDE` of the CUDA writer). An mbarrier's state
// is the block's (`Block::mbars`), not the `uint64_t` element's bytes. A tensor copy reads its
// box from global memory at issue (bounds-checked, counted as traffic), records the writes of
// its shared destination as the issuing thread's (a race with what other threads did in the
// same barrier epoch) and marks them in flight: any access to them is a race until they land.
// Approximation: the GPU lands a copy at some point before its barrier's phase completes; here
// every copy pending on a barrier lands when a thread first waits on that barrier with the
// phase incomplete (or when every live thread of the block is blocked, before a deadlock is
// reported), and that thread then lets the others run before it goes on. Landed elements count as written by no thread in the current epoch, so the waiting
// threads may read them; their bytes complete the barrier's transaction count.

// A tensor map (`SPTIR_TMAP(T)`): the row-major [columns, rows] view of a checked global buffer
// (the runtime checked it fits), the box one copy moves and its swizzle in bytes (0/32/64/128);
// `race`: the kernel also writes the buffer, so the copies' reads are race-checked.
template <class T>
struct TMap {
  const T* base;
  int64_t len;
  const char* name;
  int64_t cols, rows;
  uint32_t box_c, box_r, swizzle;
  bool race;
  static TMap make(void* p, int64_t l, const char* n, int64_t c, int64_t r, uint32_t bc,
                   uint32_t br, uint32_t sw, bool w) {
    return TMap{static_cast<const T*>(p), l, n, c, r, bc, br, sw, w};
  }
};

inline int mbar_index(Block* b, SharedMeta* m, int64_t off) {
  for (size_t i = 0; i < b->mbars.size(); ++i)
    if (b->mbars[i].m == m && b->mbars[i].off == off) return int(i);
  return -1;
}

// The initialized mbarrier at (m, off); `what` is refused on any other element.
inline int mbar_get(SharedMeta* m, int64_t off, const char* what) {
  if (off < 0 || off >= m->len) fail_oob(m->name, off, m->len);
  int i = mbar_index(cur()->blk, m, off);
  if (i < 0) {
    char msg[256];
    std::snprintf(msg, sizeof msg, "%s an mbarrier never initialized (`%s`[%lld])", what,
                  m->name, (long long)off);
    fail_unsupported(msg);
  }
  return i;
}

// Completes the current phase of mbarrier `i` when its arrivals are made and its bytes landed:
// the threads waiting for that phase's parity run again.
inline void mbar_try_complete(Block* b, int i) {
  MBar& x = b->mbars[size_t(i)];
  if (x.pending != 0 || x.tx != 0) return;
  ++x.phase;
  x.pending = x.count;
  for (Fiber& f : b->fibers)
    if (f.st == St::MBar && f.wbar == uint32_t(i) && (x.phase & 1) != f.wpar) f.st = St::Ready;
}

// Lands every copy pending on mbarrier `i`; true when there was one.
inline bool mbar_land(Block* b, int i) {
  if (b->mbars[size_t(i)].copies.empty()) return false;
  std::vector<TmaCopy> copies = std::move(b->mbars[size_t(i)].copies);
  b->mbars[size_t(i)].copies.clear();
  for (const TmaCopy& c : copies) {
    for (size_t k = 0; k < c.idx.size(); ++k) {
      int64_t e = c.idx[k];
      c.m->pend[e].tma = 0;
      c.m->shadow[e] = Shadow{b->epoch, -1, -1, -1, -1, -1};
      std::memcpy(c.m->data.get() + size_t(e) * c.elem, c.data.data() + k * c.elem, c.elem);
    }
    b->mbars[size_t(i)].tx -= int64_t(c.bytes);
  }
  mbar_try_complete(b, i);
  return true;
}

// Every live thread of `b` is blocked: lands the copies still pending on any barrier (the GPU
// would land them); true when that let a thread run again.
inline bool mbar_land_all(Block* b) {
  bool any = false;
  for (size_t i = 0; i < b->mbars.size(); ++i) any |= mbar_land(b, int(i));
  if (!any) return false;
  for (const Fiber& f : b->fibers)
    if (f.st == St::Ready) return true;
  return false;
}

// `mbarrier.init`: `count` arrivals a phase; re-initializing resets the barrier.
inline void mbar_init(SharedMeta* m, int64_t off, unsigned count) {
  if (off < 0 || off >= m->len) fail_oob(m->name, off, m->len);
  if (count == 0 || count >= (1u << 20))
    fail_unsupported("mbarrier.init with an arrival count outside 1..2^20-1");
  Block* b = cur()->blk;
  int i = mbar_index(b, m, off);
  if (i < 0) {
    b->mbars.push_back(MBar{m, off, 0, 0, 0, 0, {}});
    i = int(b->mbars.size() - 1);
  } else if (!b->mbars[size_t(i)].copies.empty()) {
    fail_unsupported("mbarrier.init of a barrier with tensor copies in flight");
  }
  MBar& x = b->mbars[size_t(i)];
  x.count = count;
  x.pending = count;
  x.tx = 0;
  x.phase = 0;
}

// `mbarrier.arrive.expect_tx`: `bytes` added to the transaction count, then one arrival.
inline void mbar_expect_tx(SharedMeta* m, int64_t off, unsigned bytes) {
  Block* b = cur()->blk;
  int i = mbar_get(m, off, "expect_tx on");
  MBar& x = b->mbars[size_t(i)];
  if (x.pending == 0)
    fail_unsupported("an arrival on an mbarrier whose current phase has all its arrivals "
                     "(more arrivals than its count)");
  x.tx += int64_t(bytes);
  --x.pending;
  mbar_try_complete(b, i);
}

// `mbarrier.try_wait.parity` in a loop: returns once the phase of parity `parity` completed
// (the current phase's parity differs from it).
inline void mbar_wait(SharedMeta* m, int64_t off, unsigned parity) {
  Fiber* f = cur();
  Block* b = f->blk;
  int i = mbar_get(m, off, "a wait on");
  const uint32_t par = parity & 1u;
  auto done = [&]() { return (b->mbars[size_t(i)].phase & 1) != par; };
  if (done()) return;
  mbar_land(b, i);
  // A wait that found its phase incomplete lets the block's other threads run on before this
  // one goes on (even when landing completed the phase), as they may on the GPU: their
  // accesses then meet the copies this thread issues next.
  do {
    if (!done()) {
      f->st = St::MBar;
      f->wbar = uint32_t(i);
      f->wpar = par;
    }
    yield(f);
  } while (!done());
  f->since_yield = 0;
}

// `cp.async.bulk.tensor.2d` of the box at column `c0`, row `c1` of `map` into `dst`, completing
// on the mbarrier at (bm, boff).
template <class T>
inline void tma_load_2d(const SPtr<T>& dst, const TMap<T>& map, SharedMeta* bm, int64_t boff,
                        int c0, int c1) {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4, "tensor copies of 16- or 32-bit elements");
  Fiber* f = cur();
  Block* b = f->blk;
  int i = mbar_get(bm, boff, "a tensor copy completing on");
  const int64_t E = int64_t(sizeof(T));
  uint32_t s = map.swizzle == 32 ? 1 : map.swizzle == 64 ? 2 : map.swizzle == 128 ? 3 : 0;
  // Shared arrays start 1024-byte aligned here; the box must start on its swizzle's span
  // (a tensor copy's destination is at least 128-byte aligned).
  const int64_t align = s == 0 ? 128 : int64_t(128) << s;
  if (dst.off < 0 || (dst.off * E) % align != 0) {
    char msg[256];
    std::snprintf(msg, sizeof msg,
                  "a tensor copy into `%s` at byte %lld: its destination must be %lld-byte "
                  "aligned (%u-byte swizzle)",
                  dst.m->name, (long long)(dst.off * E), (long long)align, map.swizzle);
    fail_unsupported(msg);
  }
  const int64_t row_bytes = int64_t(map.box_c) * E;
  TmaCopy c;
  c.m = dst.m;
  c.elem = uint32_t(E);
  c.bytes = uint32_t(row_bytes * map.box_r);
  c.idx.reserve(size_t(map.box_c) * map.box_r);
  c.data.resize(size_t(c.bytes));
  for (uint32_t r = 0; r < map.box_r; ++r) {
    const int64_t gr = int64_t(c1) + r;
    int64_t run_lo = -1, run_hi = -1;
    for (uint32_t col = 0; col < map.box_c; ++col) {
      const int64_t a = int64_t(r) * row_bytes + int64_t(col) * E;
      const int64_t sa = a ^ (((a >> 7) & ((int64_t(1) << s) - 1)) << 4);
      const int64_t e = dst.off + sa / E;
      saccess(dst.m, e, Acc::Write);
      dst.m->pend[e].tma = int32_t(f->lin) + 1;
      c.idx.push_back(e);
      unsigned char* out = c.data.data() + size_t(a);
      const int64_t gc = int64_t(c0) + col;
      if (gr < 0 || gc < 0 || gr >= map.rows || gc >= map.cols) {
        std::memset(out, 0, size_t(E));
        continue;
      }
      const int64_t g = gr * map.cols + gc;
      if (g >= map.len) fail_oob(map.name, g, map.len);
      if (map.race) grace(map.base, map.len, g, unsigned(E), map.name, Acc::Read);
      std::memcpy(out, map.base + g, size_t(E));
      const int64_t byte = reinterpret_cast<int64_t>(map.base + g);
      if (run_lo < 0) run_lo = byte;
      run_hi = byte + E;
      b->requested += uint64_t(E);
    }
    // One box row is one contiguous run of the view's row: its 32-byte sectors move.
    if (run_lo >= 0) b->sectors += 32 * uint64_t(((run_hi - 1) >> 5) - (run_lo >> 5) + 1);
  }
  // The copy's elements in box order, their bytes in box order: `data` is laid out by the
  // unswizzled offset, `idx` was pushed in the same order.
  b->mbars[size_t(i)].copies.push_back(std::move(c));
}

// Real atomics on global memory (blocks run on several OS threads).
template <class T>
inline T atomic_add_raw(T* p, T v) {
  if constexpr (std::is_integral<T>::value) {
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
  } else {
    using U = typename std::conditional<sizeof(T) == 4, uint32_t, uint64_t>::type;
    static_assert(sizeof(T) == sizeof(U), "atomicAdd on this type");
    U* u = reinterpret_cast<U*>(p);
    U old = __atomic_load_n(u, __ATOMIC_RELAXED);
    for (;;) {
      T f;
      std::memcpy(&f, &old, sizeof f);
      T nf = f + v;
      U nu;
      std::memcpy(&nu, &nf, sizeof nu);
      if (__atomic_compare_exchange_n(u, &old, nu, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return f;
    }
  }
}

// Per launch: runs every block of the grid.
struct Worker {
  char* stacks = nullptr;
  size_t map_size = 0;
  ~Worker() {
    if (stacks) munmap(stacks, map_size);
  }
};

constexpr size_t STACK_SIZE = 256 * 1024;
constexpr size_t GUARD = 4096;

inline void deadlock(Block* b) {
  ErrorOut e = new_error(ERR_DEADLOCK, b);
  unsigned at_bar = 0, at_warp = 0, at_mbar = 0;
  int first_bar = -1, first_warp = -1, first_mbar = -1;
  for (unsigned i = 0; i < b->n; ++i) {
    const Fiber& f = b->fibers[i];
    if (f.st == St::Barrier) {
      if (first_bar < 0) first_bar = int(i);
      ++at_bar;
    } else if (f.st == St::Warp) {
      if (first_warp < 0) first_warp = int(i);
      ++at_warp;
    } else if (f.st == St::MBar) {
      if (first_mbar < 0) first_mbar = int(i);
      ++at_mbar;
    }
  }
  if (first_bar >= 0) copy_dim(e.thread_a, b->fibers[first_bar].tid);
  if (first_warp >= 0) copy_dim(e.thread_b, b->fibers[first_warp].tid);
  if (first_mbar >= 0 && first_bar < 0) copy_dim(e.thread_a, b->fibers[first_mbar].tid);
  char mb[256] = "";
  if (first_mbar >= 0) {
    const MBar& x = b->mbars[b->fibers[first_mbar].wbar];
    std::snprintf(mb, sizeof mb,
                  " (`%s`[%lld] waits for %u more arrival(s) and %lld more byte(s) of its "
                  "transaction count, with no tensor copy left to land)",
                  x.m->name, (long long)x.off, x.pending, (long long)x.tx);
  }
  std::snprintf(e.message, sizeof e.message,
                "%u thread(s) wait in __syncthreads, %u in a warp collective%s%s, %u on an "
                "mbarrier%s, %u returned",
                at_bar, at_warp, first_warp >= 0 ? " " : "",
                first_warp >= 0 ? wop_name(b->fibers[first_warp].wop) : "", at_mbar, mb,
                b->exited);
  record_error(b->L, e);
}

// Runs block `b` to its end; false when it failed (the error is recorded).
inline bool run_block(Block* b) {
  b->exited = 0;
  b->bar_arrived = 0;
  b->epoch = 1;
  b->aborted = false;
  b->shared.clear();
  b->gshadow.clear();
  b->mbars.clear();
  for (unsigned wi = 0; wi < b->warps.size(); ++wi) {
    Warp& w = b->warps[wi];
    w.live = std::min(32u, b->n - wi * 32);
    w.arrived = 0;
    w.next_flush = SOFT_FLUSH;
    w.pending.clear();
    w.occ.clear();
  }
  for (Fiber& f : b->fibers) {
    f.st = St::Ready;
    f.since_yield = 0;
    f.cp_open.clear();
    f.cp_groups.clear();
    f.mma_open.clear();
    f.mma_groups.clear();
    fiber_init(&f);
  }
  for (;;) {
    bool any = false;
    for (unsigned i = 0; i < b->n; ++i) {
      Fiber* f = &b->fibers[i];
      if (f->st != St::Ready) continue;
      any = true;
      resume(b, f);
      if (b->aborted) return false;
    }
    if (b->exited == b->n) break;
    if (b->L->abort.load(std::memory_order_relaxed)) return false;
    if (!any) {
      if (mbar_land_all(b)) continue;
      deadlock(b);
      return false;
    }
  }
  flush_all(b);
  return merge_block(b);
}

inline void run_worker(Launch* L, Body body) {
  const LaunchDesc* d = L->d;
  Block b;
  b.L = L;
  b.body = body;
  b.bdim = uint3{d->block[0], d->block[1], d->block[2]};
  b.gdim = uint3{d->grid[0], d->grid[1], d->grid[2]};
  b.n = d->block[0] * d->block[1] * d->block[2];
  b.requested = 0;
  b.sectors = 0;
  Worker wk;
  size_t per = STACK_SIZE + GUARD;
  wk.map_size = per * b.n;
  void* mem = mmap(nullptr, wk.map_size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) {
    ErrorOut e = new_error(ERR_INTERNAL, nullptr);
    set_str(e.message, sizeof e.message, "cannot map the fibers' stacks");
    record_error(L, e);
    return;
  }
  wk.stacks = static_cast<char*>(mem);
  b.fibers.resize(b.n);
  b.warps.resize((b.n + 31) / 32);
  for (unsigned i = 0; i < b.n; ++i) {
    Fiber& f = b.fibers[i];
    char* lo = wk.stacks + per * i;
    mprotect(lo, GUARD, PROT_NONE);
    f.stack = lo + GUARD;
    f.stack_size = STACK_SIZE;
    f.blk = &b;
    f.lin = i;
    f.tid = tid_of(&b, i);
  }
  uint64_t nblocks = uint64_t(d->grid[0]) * d->grid[1] * d->grid[2];
  for (;;) {
    if (L->abort.load(std::memory_order_relaxed)) break;
    uint64_t id = L->next_block.fetch_add(1, std::memory_order_relaxed);
    if (id >= nblocks) break;
    b.bid = block_of(id, b.gdim);
    b.lin_id = id;
    if (!run_block(&b)) break;
  }
  L->requested.fetch_add(b.requested, std::memory_order_relaxed);
  L->sectors.fetch_add(b.sectors, std::memory_order_relaxed);
}

inline int run_grid(LaunchDesc* d, Body body) {
  Launch L;
  L.d = d;
  std::memset(&d->err, 0, sizeof d->err);
  uint64_t nblocks = uint64_t(d->grid[0]) * d->grid[1] * d->grid[2];
  uint64_t nthreads = std::max<uint64_t>(1, std::min<uint64_t>(d->os_threads, nblocks));
  std::vector<std::thread> extra;
  try {
    for (uint64_t t = 1; t < nthreads; ++t) extra.emplace_back(run_worker, &L, body);
  } catch (...) {
    // Fewer OS threads than asked: the ones started (and this one) share the grid.
  }
  try {
    run_worker(&L, body);
  } catch (...) {
    ErrorOut e = new_error(ERR_INTERNAL, nullptr);
    set_str(e.message, sizeof e.message, "out of memory in the emulator");
    record_error(&L, e);
  }
  for (auto& t : extra) t.join();
  d->requested_bytes = L.requested.load();
  d->sector_bytes = L.sectors.load();
  if (L.has_err) d->err = L.err;
  return L.has_err ? L.err.kind : ERR_NONE;
}

}  // namespace sptir_emu

extern "C" __attribute__((noreturn)) void sptir_emu_fiber_main(sptir_emu::Fiber* f) {
  f->blk->body(f->blk->L->d->args);
  sptir_emu::thread_exit(f);
}

extern "C" int sptir_emu_abi_version(void) { return sptir_emu::ABI_VERSION; }
extern "C" uint64_t sptir_emu_desc_size(void) { return sizeof(sptir_emu::LaunchDesc); }

// ---------------------------------------------------------------------------------------------
// The CUDA surface the generated source uses.

#define SPTIR_IN(T) ::sptir_emu::GPtr<T, false>
#define SPTIR_OUT(T) ::sptir_emu::GPtr<T, true>
#define SPTIR_SHARED(T, name, N)        \
  static char sptir_tag_##name; \
  const ::sptir_emu::SPtr<T> name = ::sptir_emu::shared_array<T>(&sptir_tag_##name, (N), #name)
// A slice of the launch's dynamic shared memory on a GPU: here an array of its own, as above.
#define SPTIR_SHARED_DYN(T, name, N, OFF) SPTIR_SHARED(T, name, N)

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define threadIdx (::sptir_emu::g_cur->tid)
#define blockIdx (::sptir_emu::g_cur->blk->bid)
#define blockDim (::sptir_emu::g_cur->blk->bdim)
#define gridDim (::sptir_emu::g_cur->blk->gdim)
#define warpSize 32

using dim3 = ::sptir_emu::uint3;
using uint3 = ::sptir_emu::uint3;

inline void __syncthreads() { ::sptir_emu::syncthreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  ::sptir_emu::warp_op(::sptir_emu::WOp::Sync, mask, 0, 0);
}

inline unsigned sptir_emu_lane() { return ::sptir_emu::g_cur->lin % 32; }

// Find-first-set (1-based position of the lowest set bit, 0 for 0) and population count, as
// CUDA's device functions.
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline int __popc(unsigned int x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }

template <class T>
inline ::sptir_emu::val_t<T> __shfl_sync(unsigned mask, const T& var, int src, int width = 32) {
  using V = ::sptir_emu::val_t<T>;
  V v = var;
  int lane = int(sptir_emu_lane());
  int seg = lane / width * width;
  int s = seg + ((src % width) + width) % width;
  return ::sptir_emu::from_bits<V>(
      ::sptir_emu::warp_op(::sptir_emu::WOp::Shfl, mask, ::sptir_emu::to_bits(v), s));
}

template <class T>
inline ::sptir_emu::val_t<T> __shfl_down_sync(unsigned mask, const T& var, unsigned delta,
                                              int width = 32) {
  using V = ::sptir_emu::val_t<T>;
  V v = var;
  int lane = int(sptir_emu_lane());
  int s = (lane % width) + int(delta) < width ? lane + int(delta) : lane;
  return ::sptir_emu::from_bits<V>(
      ::sptir_emu::warp_op(::sptir_emu::WOp::Shfl, mask, ::sptir_emu::to_bits(v), s));
}

template <class T>
inline ::sptir_emu::val_t<T> __shfl_up_sync(unsigned mask, const T& var, unsigned delta,
                                            int width = 32) {
  using V = ::sptir_emu::val_t<T>;
  V v = var;
  int lane = int(sptir_emu_lane());
  int s = (lane % width) >= int(delta) ? lane - int(delta) : lane;
  return ::sptir_emu::from_bits<V>(
      ::sptir_emu::warp_op(::sptir_emu::WOp::Shfl, mask, ::sptir_emu::to_bits(v), s));
}

template <class T>
inline ::sptir_emu::val_t<T> __shfl_xor_sync(unsigned mask, const T& var, int lane_mask,
                                             int width = 32) {
  using V = ::sptir_emu::val_t<T>;
  V v = var;
  int lane = int(sptir_emu_lane());
  int s = lane ^ lane_mask;
  if (s / width > lane / width) s = lane;
  return ::sptir_emu::from_bits<V>(
      ::sptir_emu::warp_op(::sptir_emu::WOp::Shfl, mask, ::sptir_emu::to_bits(v), s));
}

inline unsigned __ballot_sync(unsigned mask, int pred) {
  return unsigned(::sptir_emu::warp_op(::sptir_emu::WOp::Ballot, mask, pred != 0, 0));
}
inline int __any_sync(unsigned mask, int pred) {
  return int(::sptir_emu::warp_op(::sptir_emu::WOp::Any, mask, pred != 0, 0));
}
inline int __all_sync(unsigned mask, int pred) {
  return int(::sptir_emu::warp_op(::sptir_emu::WOp::All, mask, pred != 0, 0));
}
inline unsigned __activemask() {
  ::sptir_emu::Fiber* f = ::sptir_emu::g_cur;
  ::sptir_emu::Block* b = f->blk;
  unsigned base = f->lin / 32 * 32, m = 0;
  for (unsigned l = 0; l < 32 && base + l < b->n; ++l)
    if (b->fibers[base + l].st != ::sptir_emu::St::Done) m |= 1u << l;
  return m;
}

template <class T, bool W>
__attribute__((always_inline)) inline T __ldg(const ::sptir_emu::GPtr<T, W>& p) {
  return *p;
}

// CUDA's vector types and the writer's vector loads (`sptir_ld2`/`sptir_ld4`): N consecutive
// elements read as one access of N * sizeof(T) bytes, which the GPU requires to be aligned to
// its size (a misaligned vector access faults there; here an offset that is not a multiple of N
// is reported).
struct float2 {
  float x, y;
};
struct float4 {
  float x, y, z, w;
};
struct double2 {
  double x, y;
};
struct int4 {
  int x, y, z, w;
};

namespace sptir_emu {
template <class V, class T, bool W, int N>
__attribute__((always_inline)) inline V vector_load(const GPtr<T, W>& p) {
  if (p.off < 0 || p.off + N > p.len) fail_oob(p.name, p.off < 0 ? p.off : p.off + N - 1, p.len);
  // Device buffers start on 256-byte boundaries (host arrays here may not: not checked).
  if (p.off % N != 0)
    fail_unsupported("misaligned vector load (the element offset must be a multiple of the vector width)");
  gaccess(p.base, p.len / N, p.off / N, unsigned(N * sizeof(T)), p.name);
  if (W)
    for (int k = 0; k < N; ++k) grace(p.base, p.len, p.off + k, sizeof(T), p.name, Acc::Read);
  V v;
  std::memcpy(&v, p.base + p.off, sizeof(V));
  return v;
}
}  // namespace sptir_emu

template <bool W>
__attribute__((always_inline)) inline float4 sptir_ld4(const ::sptir_emu::GPtr<float, W>& p) {
  return ::sptir_emu::vector_load<float4, float, W, 4>(p);
}
template <bool W>
__attribute__((always_inline)) inline float2 sptir_ld2(const ::sptir_emu::GPtr<float, W>& p) {
  return ::sptir_emu::vector_load<float2, float, W, 2>(p);
}
template <bool W>
__attribute__((always_inline)) inline double2 sptir_ld2(const ::sptir_emu::GPtr<double, W>& p) {
  return ::sptir_emu::vector_load<double2, double, W, 2>(p);
}

// Two adjacent floats stored as one 8-byte access (`sptir_st2`), which the GPU requires to be
// 8-byte aligned: an odd element offset is reported.
template <bool W>
__attribute__((always_inline)) inline void sptir_st2(const ::sptir_emu::GPtr<float, W>& p, float a,
                                                     float b) {
  static_assert(W, "a store through an SPTIR_IN pointer");
  if (p.off < 0 || p.off + 2 > p.len) ::sptir_emu::fail_oob(p.name, p.off < 0 ? p.off : p.off + 1, p.len);
  if (p.off % 2 != 0)
    ::sptir_emu::fail_unsupported("misaligned 8-byte store (the element offset must be even)");
  ::sptir_emu::gaccess(p.base, p.len / 2, p.off / 2, 8u, p.name);
  for (int k = 0; k < 2; ++k)
    ::sptir_emu::grace(p.base, p.len, p.off + k, sizeof(float), p.name, ::sptir_emu::Acc::Write);
  p.base[p.off] = a;
  p.base[p.off + 1] = b;
}

template <class T, bool W, class V>
__attribute__((always_inline)) inline T atomicAdd(const ::sptir_emu::GPtr<T, W>& p, const V& v) {
  static_assert(W, "atomicAdd through an SPTIR_IN pointer");
  ::sptir_emu::gaccess(p.base, p.len, p.off, sizeof(T), p.name);
  ::sptir_emu::grace(p.base, p.len, p.off, sizeof(T), p.name, ::sptir_emu::Acc::Atomic);
  return ::sptir_emu::atomic_add_raw<T>(p.base + p.off, T(::sptir_emu::val_t<V>(v)));
}

// 16-bit compare-and-swap (the generated code's float16/bfloat16 atomic additions).
template <bool W>
inline uint16_t sptir_cas16(const ::sptir_emu::GPtr<uint16_t, W>& p, uint16_t expected,
                            uint16_t desired) {
  static_assert(W, "an atomic update through an SPTIR_IN pointer");
  ::sptir_emu::gaccess(p.base, p.len, p.off, sizeof(uint16_t), p.name);
  ::sptir_emu::grace(p.base, p.len, p.off, sizeof(uint16_t), p.name, ::sptir_emu::Acc::Atomic);
  uint16_t e = expected;
  __atomic_compare_exchange_n(p.base + p.off, &e, desired, false, __ATOMIC_RELAXED,
                              __ATOMIC_RELAXED);
  return e;
}

inline uint16_t sptir_cas16(const ::sptir_emu::SPtr<uint16_t>& p, uint16_t expected,
                            uint16_t desired) {
  ::sptir_emu::saccess(p.m, p.off, ::sptir_emu::Acc::Atomic);
  uint16_t old = p.data[p.off];
  if (old == expected) p.data[p.off] = desired;
  return old;
}

template <class T, class V>
inline T atomicAdd(const ::sptir_emu::SPtr<T>& p, const V& v) {
  ::sptir_emu::saccess(p.m, p.off, ::sptir_emu::Acc::Atomic);
  T old = p.data[p.off];
  p.data[p.off] = T(old + T(::sptir_emu::val_t<V>(v)));
  return old;
}

template <class A, class B>
inline typename std::common_type<::sptir_emu::val_t<A>, ::sptir_emu::val_t<B>>::type min(
    const A& a, const B& b) {
  using C = typename std::common_type<::sptir_emu::val_t<A>, ::sptir_emu::val_t<B>>::type;
  C x = C(::sptir_emu::val_t<A>(a)), y = C(::sptir_emu::val_t<B>(b));
  return y < x ? y : x;
}

template <class A, class B>
inline typename std::common_type<::sptir_emu::val_t<A>, ::sptir_emu::val_t<B>>::type max(
    const A& a, const B& b) {
  using C = typename std::common_type<::sptir_emu::val_t<A>, ::sptir_emu::val_t<B>>::type;
  C x = C(::sptir_emu::val_t<A>(a)), y = C(::sptir_emu::val_t<B>(b));
  return x < y ? y : x;
}

inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __exp10f(float x) { return powf(10.0f, x); }
inline float exp10f(float x) { return powf(10.0f, x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float fdividef(float x, float y) { return x / y; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fadd_rn(float x, float y) { return x + y; }
inline float __fmul_rn(float x, float y) { return x * y; }
inline float __fmaf_rn(float x, float y, float z) { return fmaf(x, y, z); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline int __float_as_int(float x) {
  int i;
  std::memcpy(&i, &x, 4);
  return i;
}
inline float __int_as_float(int i) {
  float x;
  std::memcpy(&x, &i, 4);
  return x;
}
inline int __float2int_rz(float x) { return int(x); }
inline int __float2int_rn(float x) { return int(nearbyintf(x)); }

#define SPTIR_EMU_PRELUDE_END
