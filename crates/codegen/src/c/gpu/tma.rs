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
//! - `sptir_mbar_wait(bar, parity)`: waits until the phase of parity `parity` of `bar` is
//!   complete (its arrivals made and its bytes landed); the copies' bytes are then visible to
//!   the waiting thread.
//!
//! The emulator lands a copy's bytes when a thread waits on its barrier; until then its shared
//! elements are in flight (any access to them is a race), as `cp.async`'s are. Precisely
//! (`runtime/src/cuda_emu/prelude.hpp`): a copy reads its box at issue and records its shared
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
static __device__ __forceinline__ void sptir_mbar_expect_tx(uint64_t* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(sptir_smem_addr(bar)), "r"(bytes) : "memory");
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
#else
#define SPTIR_TMAP(T) ::sptir_emu::TMap<T>
static void sptir_mbar_init(const ::sptir_emu::SPtr<uint64_t>& bar, unsigned count) { ::sptir_emu::mbar_init(bar.m, bar.off, count); }
static void sptir_mbar_fence_init() {}
static void sptir_mbar_expect_tx(const ::sptir_emu::SPtr<uint64_t>& bar, unsigned bytes) { ::sptir_emu::mbar_expect_tx(bar.m, bar.off, bytes); }
static void sptir_mbar_wait(const ::sptir_emu::SPtr<uint64_t>& bar, unsigned parity) { ::sptir_emu::mbar_wait(bar.m, bar.off, parity); }
template <class T>
static void sptir_tma_load_2d(const ::sptir_emu::SPtr<T>& dst, const ::sptir_emu::TMap<T>& map, const ::sptir_emu::SPtr<uint64_t>& bar, int c0, int c1) {
    ::sptir_emu::tma_load_2d(dst, map, bar.m, bar.off, c0, c1);
}
#endif
"#;
