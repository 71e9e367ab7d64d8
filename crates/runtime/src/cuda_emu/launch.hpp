// sparsetir CUDA emulator prelude, part 4 of 4 (after `prelude.hpp`, `tma.hpp` and
// `cluster.hpp`): atomics, running a grid, and the CUDA surface the generated source uses.

namespace sptir_emu {

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

}  // namespace sptir_emu

#ifdef SPTIR_EMU_RUNTIME
namespace sptir_emu {

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

// Every live thread of cluster `c` is blocked for good: the error names the waits (the block
// of the first blocked thread; over the whole cluster when it has several blocks).
inline void deadlock(Cluster* c) {
  unsigned at_bar = 0, at_warp = 0, at_mbar = 0, at_cl = 0, exited = 0;
  const Fiber *first_bar = nullptr, *first_warp = nullptr, *first_mbar = nullptr,
              *first_cl = nullptr;
  for (unsigned r = 0; r < c->size; ++r) {
    const Block* b = &c->blocks[r];
    exited += b->exited;
    for (unsigned i = 0; i < b->n; ++i) {
      const Fiber& f = b->fibers[i];
      if (f.st == St::Barrier) {
        if (!first_bar) first_bar = &f;
        ++at_bar;
      } else if (f.st == St::Warp) {
        if (!first_warp) first_warp = &f;
        ++at_warp;
      } else if (f.st == St::MBar) {
        if (!first_mbar) first_mbar = &f;
        ++at_mbar;
      } else if (f.st == St::Cluster) {
        if (!first_cl) first_cl = &f;
        ++at_cl;
      }
    }
  }
  const Fiber* a = first_bar ? first_bar : first_mbar ? first_mbar : first_cl;
  const Fiber* any = a ? a : first_warp;
  ErrorOut e = new_error(ERR_DEADLOCK, any ? any->blk : &c->blocks[0]);
  if (a) copy_dim(e.thread_a, a->tid);
  if (first_warp) copy_dim(e.thread_b, first_warp->tid);
  char mb[256] = "";
  if (first_mbar) {
    const Block* b = first_mbar->blk;
    const MBar& x = b->mbars[first_mbar->wbar];
    char rank[48] = "";
    if (c->size > 1) std::snprintf(rank, sizeof rank, " of block rank %u", b->rank);
    std::snprintf(mb, sizeof mb,
                  " (`%s`[%lld]%s waits for %u more arrival(s) and %lld more byte(s) of its "
                  "transaction count, with no tensor copy left to land)",
                  x.m->name, (long long)x.off, rank, x.pending, (long long)x.tx);
  }
  char cl[160] = "";
  if (at_cl > 0 || c->size > 1)
    std::snprintf(cl, sizeof cl, ", %u in cluster_sync (barrier.cluster)", at_cl);
  char over[96] = "";
  if (c->size > 1)
    std::snprintf(over, sizeof over, ", over the %u blocks of the cluster", c->size);
  std::snprintf(e.message, sizeof e.message,
                "%u thread(s) wait in __syncthreads, %u in a warp collective%s%s, %u on an "
                "mbarrier%s%s, %u returned%s",
                at_bar, at_warp, first_warp ? " " : "", first_warp ? wop_name(first_warp->wop) : "",
                at_mbar, mb, cl, exited, over);
  record_error(c->blocks[0].L, e);
}

// Prepares block `b` for a run.
inline void reset_block(Block* b) {
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
}

// Runs the blocks of cluster `c` to their end, their threads interleaved; false when one failed
// (the error is recorded).
inline bool run_cluster(Cluster* c) {
  c->arrived = 0;
  c->exited = 0;
  c->vc_on = false;
  for (unsigned r = 0; r < c->size; ++r) reset_block(&c->blocks[r]);
  for (;;) {
    bool any = false;
    for (unsigned r = 0; r < c->size; ++r) {
      Block* b = &c->blocks[r];
      for (unsigned i = 0; i < b->n; ++i) {
        Fiber* f = &b->fibers[i];
        if (f->st != St::Ready) continue;
        any = true;
        resume(b, f);
        if (b->aborted) return false;
      }
    }
    if (c->exited == c->threads) break;
    if (c->blocks[0].L->abort.load(std::memory_order_relaxed)) return false;
    if (!any) {
      if (mbar_land_all(c)) continue;
      deadlock(c);
      return false;
    }
  }
  for (unsigned r = 0; r < c->size; ++r) {
    flush_all(&c->blocks[r]);
    if (!merge_block(&c->blocks[r])) return false;
  }
  return true;
}

// The clusters of the grid, in the order of their linear ids (`block_of` over the grid of
// clusters); the blocks of one by rank.
inline void run_worker(Launch* L, Body body) {
  const LaunchDesc* d = L->d;
  const uint3 gdim{d->grid[0], d->grid[1], d->grid[2]};
  const uint3 cdim{d->cluster[0], d->cluster[1], d->cluster[2]};
  const unsigned csize = cdim.x * cdim.y * cdim.z;
  const unsigned n = d->block[0] * d->block[1] * d->block[2];
  // (Never resized: the fibers point at their block.)
  std::vector<Block> blocks(csize);
  Cluster c;
  c.dim = cdim;
  c.size = csize;
  c.blocks = blocks.data();
  c.threads = n * csize;
  c.arrived = 0;
  c.exited = 0;
  c.vc_on = false;
  Worker wk;
  size_t per = STACK_SIZE + GUARD;
  wk.map_size = per * n * csize;
  void* mem = mmap(nullptr, wk.map_size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) {
    ErrorOut e = new_error(ERR_INTERNAL, nullptr);
    set_str(e.message, sizeof e.message, "cannot map the fibers' stacks");
    record_error(L, e);
    return;
  }
  wk.stacks = static_cast<char*>(mem);
  for (unsigned r = 0; r < csize; ++r) {
    Block& b = blocks[r];
    b.L = L;
    b.body = body;
    b.cl = &c;
    b.rank = r;
    b.bdim = uint3{d->block[0], d->block[1], d->block[2]};
    b.gdim = gdim;
    b.n = n;
    b.requested = 0;
    b.sectors = 0;
    b.fibers.resize(n);
    b.warps.resize((n + 31) / 32);
    for (unsigned i = 0; i < n; ++i) {
      Fiber& f = b.fibers[i];
      char* lo = wk.stacks + per * (size_t(r) * n + i);
      mprotect(lo, GUARD, PROT_NONE);
      f.stack = lo + GUARD;
      f.stack_size = STACK_SIZE;
      f.blk = &b;
      f.lin = i;
      f.tid = tid_of(&b, i);
    }
  }
  const uint3 cgrid{gdim.x / cdim.x, gdim.y / cdim.y, gdim.z / cdim.z};
  uint64_t nclusters = uint64_t(cgrid.x) * cgrid.y * cgrid.z;
  for (;;) {
    if (L->abort.load(std::memory_order_relaxed)) break;
    uint64_t id = L->next_cluster.fetch_add(1, std::memory_order_relaxed);
    if (id >= nclusters) break;
    const uint3 at = block_of(id, cgrid);
    for (unsigned r = 0; r < csize; ++r) {
      Block& b = blocks[r];
      b.bid = uint3{at.x * cdim.x + r % cdim.x, at.y * cdim.y + (r / cdim.x) % cdim.y,
                    at.z * cdim.z + r / (cdim.x * cdim.y)};
      b.lin_id = b.bid.x + uint64_t(gdim.x) * (b.bid.y + uint64_t(gdim.y) * b.bid.z);
    }
    if (!run_cluster(&c)) break;
  }
  for (const Block& b : blocks) {
    L->requested.fetch_add(b.requested, std::memory_order_relaxed);
    L->sectors.fetch_add(b.sectors, std::memory_order_relaxed);
  }
}

int run_grid(LaunchDesc* d, Body body) {
  Launch L;
  L.d = d;
  std::memset(&d->err, 0, sizeof d->err);
  // (The runtime checked the clusters; refused here all the same rather than run wrong.)
  for (int k = 0; k < 3; ++k)
    if (d->cluster[k] == 0 || d->grid[k] % d->cluster[k] != 0 ||
        uint64_t(d->cluster[0]) * d->cluster[1] * d->cluster[2] > 16) {
      ErrorOut e = new_error(ERR_UNSUPPORTED, nullptr);
      set_str(e.message, sizeof e.message,
              "a grid that is not a whole number of clusters, or clusters of over 16 blocks");
      d->err = e;
      return e.kind;
    }
  uint64_t nclusters = uint64_t(d->grid[0] / d->cluster[0]) * (d->grid[1] / d->cluster[1]) *
                       (d->grid[2] / d->cluster[2]);
  uint64_t nthreads = std::max<uint64_t>(1, std::min<uint64_t>(d->os_threads, nclusters));
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

#endif  // SPTIR_EMU_RUNTIME

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
