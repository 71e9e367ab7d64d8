// sparsetir CUDA emulator prelude, part 3 of 4 (after `tma.hpp`, before `launch.hpp`):
// thread-block clusters.

namespace sptir_emu {

// ---------------------------------------------------------------------------------------------
// Thread-block clusters (`TMA_PRELUDE`'s `sptir_cluster_*`, `sptir_mbar_arrive_cluster`,
// `sptir_tma_load_2d_mc`). The blocks of a cluster run together, their threads interleaved on
// one OS thread; each keeps its own shared memory, mbarriers, barrier epochs and records. A
// remote operation finds the peer's array by its declaration (`SharedMeta::tag`) and the same
// element offset, as `mapa` maps an address to the same offset in another block's shared
// memory. A tensor copy multicast into a peer marks the peer's elements in flight as a local
// copy does; it races with what the peer's threads did with them since their last barrier
// (`__syncthreads`, or `cluster_sync`), as a local copy races with the other threads of the
// issuer's block, unless a remote arrival of theirs, after their accesses (themselves, or their
// warp's lane after a `__syncwarp`), on a barrier of the issuer's block whose phase the issuer's
// wait observed before the copy, orders them (vector clocks, `prelude.hpp`). The blocks of a
// cluster are still checked against each other for races on global memory as any two blocks of
// a launch are (a cluster barrier does not order them there).

// `%cluster_ctarank`: `(bid.x % cx) + cx * ((bid.y % cy) + cy * (bid.z % cz))`.
inline unsigned cluster_rank() { return cur()->blk->rank; }

}  // namespace sptir_emu

#ifdef SPTIR_EMU_RUNTIME
namespace sptir_emu {

// `barrier.cluster.arrive.release` + `barrier.cluster.wait.acquire`: returns once every thread
// of every block of the cluster that has not returned arrived; a new barrier epoch in each block.
void cluster_sync() {
  Fiber* f = cur();
  Cluster* c = f->blk->cl;
  f->st = St::Cluster;
  ++c->arrived;
  if (c->arrived + c->exited == c->threads) release_cluster(c);
  else yield(f);
  f->since_yield = 0;
}

// Block `rank` of the calling thread's cluster, the target of `what`: refused outside the
// cluster, and when every thread of that block returned (its shared memory is gone on a GPU: a
// block a peer may still reach ends with a cluster barrier).
Block* cluster_peer(unsigned rank, const char* what) {
  Block* b = cur()->blk;
  Cluster* c = b->cl;
  char msg[320];
  if (rank >= c->size) {
    std::snprintf(msg, sizeof msg,
                  "%s block rank %u of a cluster of %u block(s) (%u x %u x %u): no such rank",
                  what, rank, c->size, c->dim.x, c->dim.y, c->dim.z);
    fail_unsupported(msg);
  }
  Block* p = &c->blocks[rank];
  if (p != b && p->exited == p->n) {
    std::snprintf(msg, sizeof msg,
                  "%s block rank %u of the cluster after all its threads returned (a block "
                  "must not exit while another block of its cluster may still reach its shared "
                  "memory: end with cluster_sync)",
                  what, rank);
    fail_unsupported(msg);
  }
  return p;
}

// The initialized mbarrier of block `p` of the cluster at the array and offset of (m, off) in
// the calling thread's block; `what` is refused on any other element.
int peer_mbar(Block* p, SharedMeta* m, int64_t off, const char* what) {
  if (off < 0 || off >= m->len) fail_oob(m->name, off, m->len);
  Block* b = cur()->blk;
  if (p == b) return mbar_get(m, off, what);
  int i = -1;
  for (auto& pm : p->shared)
    if (pm->tag == m->tag) i = mbar_index(p, pm.get(), off);
  if (i < 0) {
    char msg[320];
    std::snprintf(msg, sizeof msg,
                  "%s an mbarrier never initialized in block rank %u of the cluster (`%s`[%lld]; "
                  "a block initializes its barriers, then a cluster_sync, before its peers use "
                  "them)",
                  what, p->rank, m->name, (long long)off);
    fail_unsupported(msg);
  }
  return i;
}

// A tensor copy issued by another block of the cluster writes element `e` of `m` in block `p`:
// an element still in flight, or read by a product in flight, or accessed by a thread of `p`
// since its last barrier (with vector clocks: an access that does not happen before the copy),
// races with it; else it is in flight (`Pend::tma` = `code`).
void tma_mark_remote(Block* p, SharedMeta* m, int64_t e, int32_t code) {
  Pend& q = m->pend[e];
  const char* what = nullptr;
  int32_t other = -1;
  if (q.tma) {
    what = "a tensor copy multicast from another block of the cluster into an element a tensor "
           "copy is still copying into";
    other = q.tma > 0 ? q.tma - 1 : int32_t(unsigned(-q.tma - 1) % 1024);
  } else if (q.copy) {
    what = "a tensor copy multicast from another block of the cluster into an element a "
           "cp.async of this block is still copying into";
    other = q.copy - 1;
  } else if (q.reads) {
    what = "a tensor copy multicast from another block of the cluster into an element a "
           "tensor-core product in flight in this block reads";
    other = q.reader - 1;
  } else if (m->vsh) {
    VShadow& s = m->vsh[e];
    if (s.epoch == p->epoch) {
      // What the issuer learned of `p`'s threads (nothing without a remote arrival).
      const Fiber* f = cur();
      const std::vector<uint32_t>& vr = f->blk->vr[f->lin];
      const size_t at = size_t(p->rank) * p->n;
      auto before = [&](int32_t u, uint32_t c) { return !vr.empty() && vr[at + size_t(u)] >= c; };
      if (s.w != -1 && !before(s.w, s.wc)) other = s.w;
      for (uint32_t k = 0; other == -1 && k < s.n; ++k) {
        const VRec r = s.at(k);
        if (!before(r.t & ~VATOM, r.c)) other = r.t & ~VATOM;
      }
      if (other != -1)
        what = "a tensor copy multicast from another block of the cluster into an element a "
               "thread of this block accessed since its last barrier, not released to the "
               "issuer (its access, then its arrival, or its warp's after a __syncwarp, on the "
               "issuer's \"empty\" mbarrier, whose phase the issuer's wait observed before the "
               "copy)";
    }
  } else {
    const Shadow& s = m->shadow[e];
    if (s.epoch == p->epoch) {
      other = s.w != -1 ? s.w : s.r1 != -1 ? s.r1 : s.a1;
      if (other != -1)
        what = "a tensor copy multicast from another block of the cluster into an element a "
               "thread of this block accessed since its last barrier (the stage was not "
               "released: its consumers' barrier, then their arrival on the issuer's \"empty\" "
               "mbarrier, before the issuer waits on it)";
    }
  }
  if (!what) {
    q.tma = code;
    return;
  }
  const Fiber* f = cur();
  ErrorOut e2 = new_error(ERR_RACE, p);
  e2.index = e;
  e2.length = m->len;
  copy_dim(e2.thread_a, tid_of(p, unsigned(std::max(other, 0))));
  copy_dim(e2.thread_b, f->tid);
  set_str(e2.buffer, sizeof e2.buffer, m->name);
  std::snprintf(e2.message, sizeof e2.message,
                "%s (the second thread named is the issuer, in block (%u, %u, %u), rank %u of "
                "the cluster)",
                what, f->blk->bid.x, f->blk->bid.y, f->blk->bid.z, f->blk->rank);
  fail(e2);
}

// `mapa` + `mbarrier.arrive.shared::cluster` (the default release semantics, CTA scope): one
// arrival (no transaction bytes, release) on the mbarrier at the array and offset of (m, off) in
// block `rank` of the cluster.
void mbar_arrive_cluster(SharedMeta* m, int64_t off, unsigned rank) {
  Block* p = cluster_peer(rank, "an mbarrier arrival on");
  int i = peer_mbar(p, m, off, "an arrival on");
  MBar& x = p->mbars[size_t(i)];
  if (x.pending == 0)
    fail_unsupported("an arrival on an mbarrier whose current phase has all its arrivals "
                     "(more arrivals than its count)");
  vc_release(cur(), p, x);
  --x.pending;
  mbar_try_complete(p, i);
}

}  // namespace sptir_emu
#endif  // SPTIR_EMU_RUNTIME

namespace sptir_emu {

// `cp.async.bulk.tensor.2d ... .multicast::cluster`: the box at column `c0`, row `c1` of `map`,
// read once, lands in every block of the cluster whose rank bit is set in `mask`, at `dst`'s
// array and offset there, its bytes completing the mbarrier at (bm, boff)'s array and offset
// there.
template <class T>
inline void tma_load_2d_mc(const SPtr<T>& dst, const TMap<T>& map, SharedMeta* bm, int64_t boff,
                           int c0, int c1, unsigned short mask) {
  Block* b = cur()->blk;
  Cluster* c = b->cl;
  if (mask == 0 || (c->size < 16 && (unsigned(mask) >> c->size) != 0)) {
    char msg[256];
    std::snprintf(msg, sizeof msg,
                  "a tensor copy multicast to the ranks of mask 0x%x in a cluster of %u "
                  "block(s): the mask must be non-empty, of ranks below %u",
                  unsigned(mask), c->size, c->size);
    fail_unsupported(msg);
  }
  TmaDest dests[16];
  unsigned nd = 0;
  for (unsigned r = 0; r < c->size; ++r) {
    if (!((mask >> r) & 1u)) continue;
    Block* p = cluster_peer(r, "a tensor copy multicast into");
    SharedMeta* m = p == b ? dst.m
                           : block_shared_in(p, dst.m->tag, dst.m->len, sizeof(T), dst.m->name);
    dests[nd++] = TmaDest{p, m, peer_mbar(p, bm, boff, "a tensor copy completing on")};
  }
  tma_copy(dst, map, dests, nd, c0, c1);
}

}  // namespace sptir_emu
