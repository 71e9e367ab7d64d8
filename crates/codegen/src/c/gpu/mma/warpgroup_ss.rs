//! The prelude of warpgroup 2:4 products whose tensor cores read `A` from shared memory
//! (`wgmma.mma_async.sp`'s shared-memory form; `stage_a.rs`, `wgmma_ss`).
//!
//! On a GPU, `sptir_wgmma_sp_m64nNk32_{f16,bf16}_sw128_ss` issues one product alone (no fence,
//! no commit: the run writes one `wgmma.fence` before its products and one
//! `wgmma.commit_group` after them), `A` named by a descriptor of the warpgroup's 64 rows of
//! 16 compressed values (32-byte swizzle, K-major: rows of 32 bytes, 256 bytes between groups
//! of 8 rows), `B` by the descriptor of its 128-byte-swizzled boxes as in `warpgroup.rs`.
//!
//! In the emulator, a product reads each lane's `A` fragment from the stage when its group
//! completes, at the elements the descriptor names: warp `w` of the warpgroup holds rows
//! `16 w ..`, lane `4 g + t` registers (row `g`, columns `2 t ..`), (row `g + 8`, the same),
//! then the same two in columns `8 + 2 t ..` (the fragment an `ldmatrix.x4` of the tile gives
//! the register form). Those elements, with `B`'s, are race-checked as in flight from the
//! issue until the group completes.

use std::collections::BTreeSet;
use std::fmt::Write as _;

/// The functions of `forms` (units of 8 columns, `f16` or `bf16`), with the fence and commit
/// they are written between; for the GPU and the emulator. Goes after `wgmma_prelude` (its
/// waits and the emulator's products).
pub(crate) fn wgmma_ss_prelude(forms: &BTreeSet<(i64, &'static str)>) -> String {
    let mut s = String::from(
        "#ifndef SPTIR_EMU\n\
         static __device__ __forceinline__ void sptir_wgmma_fence() {\n    \
         asm volatile(\"wgmma.fence.sync.aligned;\" ::: \"memory\");\n}\n\
         static __device__ __forceinline__ void sptir_wgmma_commit() {\n    \
         asm volatile(\"wgmma.commit_group.sync.aligned;\" ::: \"memory\");\n}\n",
    );
    for &(units, ty) in forms {
        let n = 8 * units;
        let regs = 4 * units as usize;
        let d: Vec<String> = (0..regs).map(|i| format!("%{i}")).collect();
        let _ = write!(
            s,
            "static __device__ __forceinline__ void sptir_wgmma_sp_m64n{n}k32_{ty}_sw128_ss(\
             float (*c)[4], const uint16_t* a, uint32_t e, const uint16_t* b, uint32_t lbo) {{\n    \
             const uint32_t sa = (uint32_t)__cvta_generic_to_shared(a);\n    \
             const uint32_t s = (uint32_t)__cvta_generic_to_shared(b);\n    \
             const uint64_t da = (uint64_t)((sa & 0x3ffffu) >> 4) | (1ull << 16) | \
             ((uint64_t)(256u >> 4) << 32) | (3ull << 62);\n    \
             const uint64_t db = (uint64_t)((s & 0x3ffffu) >> 4) | ((uint64_t)(lbo >> 4) << 16) | \
             ((uint64_t)(1024u >> 4) << 32) | (1ull << 62);\n    \
             asm volatile(\"{{ .reg .pred p; setp.ne.b32 p, 1, 0;\\n\"\n                 \
             \"wgmma.mma_async.sp.sync.aligned.m64n{n}k32.f32.{ty}.{ty} {{{}}}, %{}, %{}, %{}, 0, p, 1, 1, 0, 1; }}\"\n                 \
             : {}\n                 \
             : \"l\"(da), \"l\"(db), \"r\"(e) : \"memory\");\n}}\n",
            d.join(","),
            regs,
            regs + 1,
            regs + 2,
            super::warpgroup::tied(regs)
        );
    }
    s.push_str(
        "#else\n\
         static inline void sptir_wgmma_fence() {}\n\
         static inline void sptir_wgmma_commit() { ::sptir_emu::mma_commit(); }\n\
         /* Element (row, column) of a warpgroup's A tile read through its descriptor: rows of\n   \
         16 values, 8 rows a group of 256 bytes, the two halves of a row swapped in rows 4-7 of\n   \
         each group (the 32-byte swizzle). */\n\
         static int64_t sptir_wgmma_a_elem(const ::sptir_emu::SPtr<uint16_t>& a, int row, int col) {\n    \
         return a.off + (int64_t)row * 16 + (((col >> 3) ^ ((row >> 2) & 1)) << 3) + (col & 7);\n\
         }\n\
         template <int U>\n\
         static void sptir_wgmma_sp_issue_ss_emu(float (*c)[4], const ::sptir_emu::SPtr<uint16_t>& a, \
         uint32_t e, const ::sptir_emu::SPtr<uint16_t>& p, uint32_t lbo, bool bf) {\n    \
         if (a.off % 128 != 0)\n        \
         ::sptir_emu::fail_unsupported(\"wgmma: a 32-byte-swizzled A tile must start 256-byte aligned\");\n    \
         sptir_wgmma_issue_checks(p, 1);\n    \
         const unsigned lin = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);\n    \
         const int lane = (int)(lin & 31), g = lane >> 2, t = lane & 3, w = (int)((lin / 32) % 4);\n    \
         /* Register i: rows 16 w + g (+ 8 for i odd), columns 2 t, 2 t + 1 (+ 8 for i >= 2). */\n    \
         std::array<int64_t, 8> at;\n    \
         for (int i = 0; i < 4; ++i)\n        \
         for (int h = 0; h < 2; ++h)\n            \
         at[2 * i + h] = sptir_wgmma_a_elem(a, 16 * w + g + 8 * (i & 1), 8 * (i >> 1) + 2 * t + h);\n    \
         std::vector<std::pair<::sptir_emu::SharedMeta*, int64_t>> reads;\n    \
         reads.reserve(8 * U + 8);\n    \
         for (const int64_t x : at) reads.emplace_back(a.m, x);\n    \
         sptir_wgmma_b_reads(reads, p, 1, lbo, 1024, U);\n    \
         ::sptir_emu::mma_issue(std::move(reads), [=]() {\n        \
         uint32_t av[4];\n        \
         for (int i = 0; i < 4; ++i) {\n            \
         const uint16_t lo = ::sptir_emu::SRef<uint16_t>(a.data, a.m, at[2 * i]).load();\n            \
         const uint16_t hi = ::sptir_emu::SRef<uint16_t>(a.data, a.m, at[2 * i + 1]).load();\n            \
         av[i] = (uint32_t)lo | ((uint32_t)hi << 16);\n        \
         }\n        \
         sptir_wgmma_sp_emu<U>(c, av, e, p, 1, lbo, 1024, bf);\n    \
         });\n\
         }\n",
    );
    for &(units, ty) in forms {
        let _ = writeln!(
            s,
            "static inline void sptir_wgmma_sp_m64n{}k32_{ty}_sw128_ss(float (*c)[4], \
             const ::sptir_emu::SPtr<uint16_t>& a, uint32_t e, const ::sptir_emu::SPtr<uint16_t>& p, \
             uint32_t lbo) {{ sptir_wgmma_sp_issue_ss_emu<{units}>(c, a, e, p, lbo, {}); }}",
            8 * units,
            ty == "bf16"
        );
    }
    s.push_str("#endif\n");
    s
}
