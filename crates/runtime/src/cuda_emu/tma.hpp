// sparsetir CUDA emulator prelude, part 2 of 4 (after `prelude.hpp`, before `cluster.hpp`):
// mbarriers and the tensor copy engine.

namespace sptir_emu {

// ---------------------------------------------------------------------------------------------
// mbarriers and the tensor copy engine (`TMA_PRELUDE` of the CUDA writer). An mbarrier's state
// is the block's (`Block::mbars`), not the `uint64_t` element's bytes. A tensor copy reads its
// box from global memory at issue (bounds-checked, counted as traffic), records the writes of
// its shared destination as the issuing thread's (a race with what other threads did in the
// same barrier epoch) and marks them in flight: any access to them is a race until they land.
// Approximation: the GPU lands a copy at some point before its barrier's phase completes; here
// every copy pending on a barrier lands when a thread first waits on that barrier with the
// phase incomplete (or when every live thread of the cluster is blocked, before a deadlock is
// reported), and that thread then lets the others run before it goes on. Landed elements count
// as written by no thread in the current epoch, so the waiting threads may read them; their
// bytes complete the barrier's transaction count. Arrivals release and waits acquire for the
// race check (vector clocks, `prelude.hpp`): the first `mbarrier.init` of a cluster starts them.

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

}  // namespace sptir_emu

#ifdef SPTIR_EMU_RUNTIME
namespace sptir_emu {

inline int mbar_index(Block* b, SharedMeta* m, int64_t off) {
  for (size_t i = 0; i < b->mbars.size(); ++i)
    if (b->mbars[i].m == m && b->mbars[i].off == off) return int(i);
  return -1;
}

// The initialized mbarrier at (m, off); `what` is refused on any other element.
int mbar_get(SharedMeta* m, int64_t off, const char* what) {
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
  vc_complete(x);
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
      if (c.m->vsh) c.m->vsh[e].clear(b->epoch);
      else c.m->shadow[e] = Shadow{b->epoch, -1, -1, -1, -1, -1};
      std::memcpy(c.m->data.get() + size_t(e) * c.elem, c.data.data() + k * c.elem, c.elem);
    }
    b->mbars[size_t(i)].tx -= int64_t(c.bytes);
  }
  mbar_try_complete(b, i);
  return true;
}

// Every live thread of cluster `c` is blocked: lands the copies still pending on any barrier of
// its blocks (the GPU would land them); true when that let a thread run again.
inline bool mbar_land_all(Cluster* c) {
  bool any = false;
  for (unsigned r = 0; r < c->size; ++r) {
    Block* b = &c->blocks[r];
    for (size_t i = 0; i < b->mbars.size(); ++i) any |= mbar_land(b, int(i));
  }
  if (!any) return false;
  for (unsigned r = 0; r < c->size; ++r)
    for (const Fiber& f : c->blocks[r].fibers)
      if (f.st == St::Ready) return true;
  return false;
}

// `mbarrier.init`: `count` arrivals a phase; re-initializing resets the barrier. The first in a
// cluster starts its vector clocks.
void mbar_init(SharedMeta* m, int64_t off, unsigned count) {
  if (off < 0 || off >= m->len) fail_oob(m->name, off, m->len);
  if (count == 0 || count >= (1u << 20))
    fail_unsupported("mbarrier.init with an arrival count outside 1..2^20-1");
  Block* b = cur()->blk;
  vc_activate(b->cl);
  int i = mbar_index(b, m, off);
  if (i < 0) {
    b->mbars.push_back(MBar{m, off, 0, 0, 0, 0, {}, {}, {}, {}, {}});
    i = int(b->mbars.size() - 1);
  } else if (!b->mbars[size_t(i)].copies.empty()) {
    fail_unsupported("mbarrier.init of a barrier with tensor copies in flight");
  }
  MBar& x = b->mbars[size_t(i)];
  x.count = count;
  x.pending = count;
  x.tx = 0;
  x.phase = 0;
  x.acc.assign(b->n, 0u);
  x.done.assign(b->n, 0u);
  x.racc.clear();
  x.rdone.clear();
}

// `mbarrier.arrive.expect_tx`: `bytes` added to the transaction count, then one arrival
// (release).
void mbar_expect_tx(SharedMeta* m, int64_t off, unsigned bytes) {
  Fiber* f = cur();
  Block* b = f->blk;
  int i = mbar_get(m, off, "expect_tx on");
  MBar& x = b->mbars[size_t(i)];
  if (x.pending == 0)
    fail_unsupported("an arrival on an mbarrier whose current phase has all its arrivals "
                     "(more arrivals than its count)");
  vc_release(f, b, x);
  x.tx += int64_t(bytes);
  --x.pending;
  mbar_try_complete(b, i);
}

// `mbarrier.try_wait.parity` in a loop: returns once the phase of parity `parity` completed
// (the current phase's parity differs from it), acquiring that phase's arrivals.
void mbar_wait(SharedMeta* m, int64_t off, unsigned parity) {
  Fiber* f = cur();
  Block* b = f->blk;
  int i = mbar_get(m, off, "a wait on");
  const uint32_t par = parity & 1u;
  auto done = [&]() { return (b->mbars[size_t(i)].phase & 1) != par; };
  if (done()) {
    vc_acquire(f, b->mbars[size_t(i)]);
    return;
  }
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
  vc_acquire(f, b->mbars[size_t(i)]);
}

}  // namespace sptir_emu
#endif  // SPTIR_EMU_RUNTIME

namespace sptir_emu {

// One destination of a tensor copy: a block of the cluster, its shared array the box lands in
// (at the offset of the issuer's destination) and its mbarrier the bytes complete (an index into
// the block's `mbars`).
struct TmaDest {
  Block* b;
  SharedMeta* m;
  int bar;
};

// The box at column `c0`, row `c1` of `map`, read once, into the `nd` destinations `dests` at
// `dst`'s offset (the calling thread's own block among them or not).
template <class T>
inline void tma_copy(const SPtr<T>& dst, const TMap<T>& map, const TmaDest* dests, unsigned nd,
                     int c0, int c1) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4,
                "tensor copies of 8-, 16- or 32-bit elements");
  Fiber* f = cur();
  Block* b = f->blk;
  const int32_t remote = remote_issuer(f->lin, b->rank);
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
      for (unsigned d = 0; d < nd; ++d) {
        const TmaDest& t = dests[d];
        if (t.b == b) {
          saccess(t.m, e, Acc::Write);
          t.m->pend[e].tma = int32_t(f->lin) + 1;
        } else {
          if (e >= t.m->len) fail_oob(t.m->name, e, t.m->len);
          tma_mark_remote(t.b, t.m, e, remote);
        }
      }
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
      // (The offset in the buffer, whose device allocation is 256-byte aligned: see `Rec`.)
      const int64_t byte = g * int64_t(E);
      if (run_lo < 0) run_lo = byte;
      run_hi = byte + E;
      b->requested += uint64_t(E);
    }
    // One box row is one contiguous run of the view's row: its 32-byte sectors move.
    if (run_lo >= 0) b->sectors += 32 * uint64_t(((run_hi - 1) >> 5) - (run_lo >> 5) + 1);
  }
  // The copy's elements in box order, their bytes in box order: `data` is laid out by the
  // unswizzled offset, `idx` was pushed in the same order. One copy per destination.
  for (unsigned d = 0; d < nd; ++d) {
    const TmaDest& t = dests[d];
    TmaCopy one = d + 1 < nd ? c : std::move(c);
    one.m = t.m;
    t.b->mbars[size_t(t.bar)].copies.push_back(std::move(one));
  }
}

// `cp.async.bulk.tensor.2d` of the box at column `c0`, row `c1` of `map` into `dst`, completing
// on the mbarrier at (bm, boff).
template <class T>
inline void tma_load_2d(const SPtr<T>& dst, const TMap<T>& map, SharedMeta* bm, int64_t boff,
                        int c0, int c1) {
  TmaDest d{cur()->blk, dst.m, mbar_get(bm, boff, "a tensor copy completing on")};
  tma_copy(dst, map, &d, 1, c0, c1);
}

}  // namespace sptir_emu
