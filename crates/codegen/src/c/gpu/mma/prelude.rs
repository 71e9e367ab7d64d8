//! The `mma` device functions the tensorized loops call: PTX on a GPU, the warp's fragments
//! gathered with shuffles in the emulator.

/// The `mma` device functions: PTX on a GPU, the warp's fragments gathered with shuffles in the
/// emulator.
pub(crate) const MMA_PRELUDE: &str = r#"#ifndef SPTIR_EMU
static __device__ __forceinline__ void sptir_mma_m16n8k16_f16(float* c, const uint32_t* a, const uint32_t* b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
static __device__ __forceinline__ void sptir_mma_m16n8k16_bf16(float* c, const uint32_t* a, const uint32_t* b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
static __device__ __forceinline__ void sptir_mma_sp_m16n8k32_f16(float* c, const uint32_t* a, const uint32_t* b, uint32_t e) {
    asm volatile("mma.sp.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, 0x0;"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e));
}
static __device__ __forceinline__ void sptir_mma_sp_m16n8k32_bf16(float* c, const uint32_t* a, const uint32_t* b, uint32_t e) {
    asm volatile("mma.sp.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, 0x0;"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e));
}
/* Two adjacent 16-bit elements as one 32-bit load; four 32-bit integers as one 16-byte load
   (the writer checks the alignment). */
static __device__ __forceinline__ uint32_t sptir_ld_pair(const uint16_t* __restrict__ p) {
    return __ldg(reinterpret_cast<const unsigned int*>(p));
}
static __device__ __forceinline__ int4 sptir_ld_quad(const int32_t* __restrict__ p) {
    return __ldg(reinterpret_cast<const int4*>(p));
}
/* Eight 8-bit positions as one 8-byte load (the writer checks the alignment). */
static __device__ __forceinline__ uint64_t sptir_ld_oct(const int8_t* __restrict__ p) {
    return __ldg(reinterpret_cast<const unsigned long long*>(p));
}
static __device__ __forceinline__ uint64_t sptir_ld_oct(const uint8_t* __restrict__ p) {
    return __ldg(reinterpret_cast<const unsigned long long*>(p));
}
/* The warp's 8 x 8 matrix of 16-bit values transposed (lane 4r + c held row r, columns 2c and
   2c + 1; it gets the same of the transpose): a row-major B read as pairs along its rows
   becomes mma's column fragment. */
static __device__ __forceinline__ uint32_t sptir_movmatrix_trans(uint32_t x) {
    uint32_t d;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(d) : "r"(x));
    return d;
}
/* N (2 or 4) 8 x 8 matrices of 16-bit values from shared memory, transposed: lane 8i + j gives
   the address of row j of matrix i (8 consecutive elements, 16-byte aligned); register i of
   lane 4g + t receives rows 2t and 2t + 1 of matrix i at column g — a row-major B tile in
   shared memory read straight into mma's column fragment. */
static __device__ __forceinline__ void sptir_ldmatrix_x4_trans(uint32_t* r, const uint16_t* p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
}
static __device__ __forceinline__ void sptir_ldmatrix_x2_trans(uint32_t* r, const uint16_t* p) {
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(a) : "memory");
}
#else
/* Every lane's row offset of an `ldmatrix` (`rows[l]`: lane l's), in one rendezvous of the
   warp. */
static void sptir_ldmatrix_rows(int64_t off, int64_t* rows) {
    const uint32_t mine[2] = {(uint32_t)(uint64_t)off, (uint32_t)((uint64_t)off >> 32)};
    uint32_t all[64];
    ::sptir_emu::warp_gather(mine, 2, all);
    for (int l = 0; l < 32; ++l)
        rows[l] = (int64_t)((uint64_t)all[2 * l] | ((uint64_t)all[2 * l + 1] << 32));
}
/* ldmatrix .trans: every lane's row address gathered, the elements read from the shared array
   (race-checked) — the layout of the GPU's instruction; row addresses must be 16-byte aligned
   there, and are checked here. */
template <int N>
static void sptir_ldmatrix_trans(uint32_t* r, const ::sptir_emu::SPtr<uint16_t>& p) {
    if (p.off % 8 != 0)
        ::sptir_emu::fail_unsupported("ldmatrix: a row address is not 16-byte aligned");
    const int lane = (int)(threadIdx.x & 31), g = lane >> 2, t = lane & 3;
    int64_t rows[32];
    sptir_ldmatrix_rows(p.off, rows);
    for (int i = 0; i < N; ++i) {
        const int64_t r0 = rows[8 * i + 2 * t];
        const int64_t r1 = rows[8 * i + 2 * t + 1];
        const uint16_t lo = ::sptir_emu::SRef<uint16_t>(p.data, p.m, r0 + g).load();
        const uint16_t hi = ::sptir_emu::SRef<uint16_t>(p.data, p.m, r1 + g).load();
        r[i] = (uint32_t)lo | ((uint32_t)hi << 16);
    }
}
static void sptir_ldmatrix_x4_trans(uint32_t* r, const ::sptir_emu::SPtr<uint16_t>& p) {
    sptir_ldmatrix_trans<4>(r, p);
}
static void sptir_ldmatrix_x2_trans(uint32_t* r, const ::sptir_emu::SPtr<uint16_t>& p) {
    sptir_ldmatrix_trans<2>(r, p);
}
template <bool W>
static uint32_t sptir_ld_pair(const ::sptir_emu::GPtr<uint16_t, W>& p) {
    return ::sptir_emu::vector_load<uint32_t, uint16_t, W, 2>(p);
}
template <bool W>
static int4 sptir_ld_quad(const ::sptir_emu::GPtr<int32_t, W>& p) {
    return ::sptir_emu::vector_load<int4, int32_t, W, 4>(p);
}
template <bool W>
static uint64_t sptir_ld_oct(const ::sptir_emu::GPtr<int8_t, W>& p) {
    return ::sptir_emu::vector_load<uint64_t, int8_t, W, 8>(p);
}
template <bool W>
static uint64_t sptir_ld_oct(const ::sptir_emu::GPtr<uint8_t, W>& p) {
    return ::sptir_emu::vector_load<uint64_t, uint8_t, W, 8>(p);
}
/* movmatrix.m8n8.trans.b16: lane 4g + t receives M[2t][g] and M[2t + 1][g], element M[r][c]
   being held by lane 4r + c / 2 (low half for even c). */
static __device__ uint32_t sptir_movmatrix_trans(uint32_t x) {
    const int lane = (int)(threadIdx.x & 31), g = lane >> 2, t = lane & 3;
    uint32_t all[32];
    ::sptir_emu::warp_gather(&x, 1, all);
    const uint32_t lo = all[8 * t + (g >> 1)];
    const uint32_t hi = all[8 * t + 4 + (g >> 1)];
    const int sh = (g & 1) * 16;
    return ((lo >> sh) & 0xffffu) | (((hi >> sh) & 0xffffu) << 16);
}
/* The tile product from every lane's fragments (PTX's m16n8k16 layouts), gathered in one
   rendezvous of the warp (`warp_gather`: what 6 shuffles a lane would give). */
static __device__ void sptir_mma_m16n8k16_emu(float* c, const uint32_t* a, const uint32_t* b, bool bf) {
    float A[16][16], B[16][8];
    const uint32_t mine[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
    uint32_t all[32 * 6];
    ::sptir_emu::warp_gather(mine, 6, all);
    for (int src = 0; src < 32; ++src) {
        const int sg = src >> 2, st = src & 3;
        const uint32_t* in = all + 6 * src;
        for (int r = 0; r < 4; ++r) {
            const uint32_t v = in[r];
            const int row = sg + ((r & 1) ? 8 : 0), col = 2 * st + ((r & 2) ? 8 : 0);
            A[row][col] = bf ? sptir_bf2f((uint16_t)(v & 0xffffu)) : sptir_h2f((uint16_t)(v & 0xffffu));
            A[row][col + 1] = bf ? sptir_bf2f((uint16_t)(v >> 16)) : sptir_h2f((uint16_t)(v >> 16));
        }
        for (int r = 0; r < 2; ++r) {
            const uint32_t v = in[4 + r];
            const int row = 2 * st + (r ? 8 : 0);
            B[row][sg] = bf ? sptir_bf2f((uint16_t)(v & 0xffffu)) : sptir_h2f((uint16_t)(v & 0xffffu));
            B[row + 1][sg] = bf ? sptir_bf2f((uint16_t)(v >> 16)) : sptir_h2f((uint16_t)(v >> 16));
        }
    }
    const int lane = (int)(threadIdx.x & 31), g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 4; ++i) {
        const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
        float s = c[i];
        for (int k = 0; k < 16; ++k) s += A[row][k] * B[k][col];
        c[i] = s;
    }
}
/* The sparse tile product (mma.sp m16n8k32, sparsity selector 0): the compressed 16 x 16 A
   in m16n8k16's A layout, each value placed at the position its metadata gives in its group of
   four columns (lane 4q + h, h < 2, holds row q's and row q + 8's positions for the
   compressed columns 8h .. 8h + 7 in its low and high 16 bits, 2 bits each); B 32 x 8, lane l
   holding rows 2t + 8r, 2t + 8r + 1 of column g in register r. The lanes' 9 registers are
   gathered in one rendezvous of the warp. */
static __device__ void sptir_mma_sp_m16n8k32_emu(float* c, const uint32_t* a, const uint32_t* b, uint32_t e, bool bf) {
    float A[16][32], B[32][8], V[16][16];
    int P[16][16];
    for (int r = 0; r < 16; ++r) for (int k = 0; k < 32; ++k) A[r][k] = 0.0f;
    const uint32_t mine[9] = {a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3], e};
    uint32_t all[32 * 9];
    ::sptir_emu::warp_gather(mine, 9, all);
    for (int src = 0; src < 32; ++src) {
        const int sg = src >> 2, st = src & 3;
        const uint32_t* in = all + 9 * src;
        for (int r = 0; r < 4; ++r) {
            const uint32_t v = in[r];
            const int row = sg + ((r & 1) ? 8 : 0), col = 2 * st + ((r & 2) ? 8 : 0);
            V[row][col] = bf ? sptir_bf2f((uint16_t)(v & 0xffffu)) : sptir_h2f((uint16_t)(v & 0xffffu));
            V[row][col + 1] = bf ? sptir_bf2f((uint16_t)(v >> 16)) : sptir_h2f((uint16_t)(v >> 16));
        }
        for (int r = 0; r < 4; ++r) {
            const uint32_t v = in[4 + r];
            const int row = 2 * st + 8 * r;
            B[row][sg] = bf ? sptir_bf2f((uint16_t)(v & 0xffffu)) : sptir_h2f((uint16_t)(v & 0xffffu));
            B[row + 1][sg] = bf ? sptir_bf2f((uint16_t)(v >> 16)) : sptir_h2f((uint16_t)(v >> 16));
        }
        const uint32_t ev = in[8];
        if (st < 2) {
            for (int j = 0; j < 8; ++j) {
                P[sg][8 * st + j] = (int)((ev >> (2 * j)) & 3u);
                P[sg + 8][8 * st + j] = (int)((ev >> (16 + 2 * j)) & 3u);
            }
        }
    }
    // PTX leaves a pair of equal positions undefined (metadata 0b0000, 0b0101, 0b1010,
    // 0b1111): refused here rather than summed, so that the GPU cannot differ.
    for (int r = 0; r < 16; ++r)
        for (int q = 0; q < 8; ++q)
            if (P[r][2 * q] == P[r][2 * q + 1])
                ::sptir_emu::fail_unsupported("mma.sp: a pair of 2:4 metadata positions is equal (undefined on the GPU; the two kept values of a group of four need distinct positions)");
    for (int r = 0; r < 16; ++r)
        for (int j = 0; j < 16; ++j) A[r][4 * (j >> 1) + P[r][j]] += V[r][j];
    const int lane = (int)(threadIdx.x & 31), g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 4; ++i) {
        const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
        float s = c[i];
        for (int k = 0; k < 32; ++k) s += A[row][k] * B[k][col];
        c[i] = s;
    }
}
static __device__ void sptir_mma_sp_m16n8k32_f16(float* c, const uint32_t* a, const uint32_t* b, uint32_t e) { sptir_mma_sp_m16n8k32_emu(c, a, b, e, false); }
static __device__ void sptir_mma_sp_m16n8k32_bf16(float* c, const uint32_t* a, const uint32_t* b, uint32_t e) { sptir_mma_sp_m16n8k32_emu(c, a, b, e, true); }
static __device__ void sptir_mma_m16n8k16_f16(float* c, const uint32_t* a, const uint32_t* b) { sptir_mma_m16n8k16_emu(c, a, b, false); }
static __device__ void sptir_mma_m16n8k16_bf16(float* c, const uint32_t* a, const uint32_t* b) { sptir_mma_m16n8k16_emu(c, a, b, true); }
#endif

"#;
