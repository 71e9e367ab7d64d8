// The tensor copy engine on Hopper, settled on the hardware before the CUDA writer relies on it
// (the 2:4 kernels' next step, bench/gpu/RESULTS.md session 21): does `cp.async.bulk.tensor`
// with a 128-byte swizzle lay a tile of B out as the formula below says; does its cluster
// multicast fill the shared memory of both blocks of a cluster of two; and which strides does
// `wgmma.mma_async.sp` (A in registers, B MN-major, 128-byte swizzle) take for B so laid out?
//
// B is K x N float16, row-major (N contiguous: the layout of the dense operand of every SpMM
// here). The tensor map's box is 64 columns (128 bytes) by 32 rows (one 2:4 run of k); a box
// lands as 32 rows of 128 bytes, and SWIZZLE_128B is expected to store element (k, n) of a box
// at byte  k * 128 + ((n / 8) ^ (k % 8)) * 16 + (n % 8) * 2  (the box 1024-byte aligned); the
// boxes of one slice are consecutive, 4096 bytes apart.
//
// wgmma's descriptor for a swizzled MN-major B: start >> 4 in bits 0-13, LBO >> 4 in 16-29,
// SBO >> 4 in 32-45, the layout (1: 128-byte swizzle) in 62-63. Expected (S1): LBO = 4096, the
// step between 64-column boxes, and SBO = 1024, the step between groups of 8 rows of k; S2
// swaps them (on an H200, session 21, S2 reads outside the tile and the launch faults, which
// ends the program: it runs last). Values are small integers, so every product and sum is exact and a match is
// equality. Last, boxes shaped as a run of A's compressed values (16 or 32 columns of 64 rows)
// under each swizzle (none, 32, 64, 128 bytes): one formula (`swizzled`) is expected for all.
//
//   nvcc -gencode=arch=compute_90a,code=sm_90a -o probe_tma bench/gpu/probe_tma.cu -lcuda && ./probe_tma
#include <cuda.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CHECK(x)                                                                         \
    do {                                                                                 \
        cudaError_t err = (x);                                                           \
        if (err != cudaSuccess) {                                                        \
            printf("CUDA error %s at %s:%d\n", cudaGetErrorString(err), __FILE__, __LINE__); \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

// The tensor map as a kernel parameter: 128 opaque bytes (what NVRTC-compiled kernels, which
// have no cuda.h, would declare).
struct __align__(64) TMap {
    unsigned long long w[16];
};

constexpr int KG = 64, NG = 256;  // B in global memory
constexpr int BOX_N = 64, BOX_K = 32;
constexpr int BOX_ELEMS = BOX_N * BOX_K;  // 2048 halves, 4096 bytes

__device__ __forceinline__ uint32_t smem(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void bar_init(uint64_t* bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void bar_expect(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bar_wait(uint64_t* bar, uint32_t parity) {
    asm volatile(
        "{ .reg .pred p;\n"
        "WAIT_%=: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra WAIT_%=; }" ::"r"(smem(bar)),
        "r"(parity)
        : "memory");
}
__device__ __forceinline__ void tma_load(void* dst, const TMap* map, uint64_t* bar, int n0, int k0) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(
            smem(dst)),
        "l"((uint64_t)map), "r"(smem(bar)), "r"(n0), "r"(k0)
        : "memory");
}
__device__ __forceinline__ void tma_load_multicast(void* dst, const TMap* map, uint64_t* bar, int n0, int k0,
                                                   uint16_t mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%3, "
        "%4}], [%2], %5;" ::"r"(smem(dst)),
        "l"((uint64_t)map), "r"(smem(bar)), "r"(n0), "r"(k0), "h"(mask)
        : "memory");
}
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ uint32_t cluster_rank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

// 1. Four boxes (columns 0-255 of rows k0 .. k0 + 31) into one block's shared memory, copied
// back raw.
__global__ void swizzle_copy(const __grid_constant__ TMap map, int k0, uint16_t* out) {
    __shared__ __align__(1024) uint16_t tile[4 * BOX_ELEMS];
    __shared__ __align__(8) uint64_t bar;
    if (threadIdx.x == 0) {
        bar_init(&bar, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        bar_expect(&bar, sizeof tile);
        for (int j = 0; j < 4; ++j) tma_load(tile + j * BOX_ELEMS, &map, &bar, j * BOX_N, k0);
    }
    bar_wait(&bar, 0);
    for (int i = threadIdx.x; i < 4 * BOX_ELEMS; i += blockDim.x) out[i] = tile[i];
}

// 4. One box of any shape and swizzle (at most 8 KB) into shared memory, copied back raw.
__global__ void copy_box(const __grid_constant__ TMap map, int c0, int r0, uint32_t bytes, uint16_t* out) {
    __shared__ __align__(1024) uint16_t tile[4096];
    __shared__ __align__(8) uint64_t bar;
    if (threadIdx.x == 0) {
        bar_init(&bar, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        bar_expect(&bar, bytes);
        tma_load(tile, &map, &bar, c0, r0);
    }
    bar_wait(&bar, 0);
    for (uint32_t i = threadIdx.x; i < bytes / 2; i += blockDim.x) out[i] = tile[i];
}

// 2. A cluster of two: block r copies boxes 2r and 2r + 1 to both blocks (mask 0b11); each
// block waits on its own barrier for all four and copies its tile back.
__global__ void __cluster_dims__(2, 1, 1) multicast_copy(const __grid_constant__ TMap map, int k0, uint16_t* out) {
    __shared__ __align__(1024) uint16_t tile[4 * BOX_ELEMS];
    __shared__ __align__(8) uint64_t bar;
    const uint32_t rank = cluster_rank();
    if (threadIdx.x == 0) {
        bar_init(&bar, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    cluster_sync();  // both barriers initialized before either block's copies signal them
    if (threadIdx.x == 0) {
        bar_expect(&bar, sizeof tile);
        for (int j = 2 * rank; j < 2 * rank + 2; ++j)
            tma_load_multicast(tile + j * BOX_ELEMS, &map, &bar, j * BOX_N, k0, (uint16_t)0x3);
    }
    bar_wait(&bar, 0);
    for (int i = threadIdx.x; i < 4 * BOX_ELEMS; i += blockDim.x) out[rank * 4 * BOX_ELEMS + i] = tile[i];
    cluster_sync();  // no block leaves while the other's copies may still write into it
}

// 3. One warpgroup: B's rows k0 .. k0 + 31, columns 0-127 (two boxes) by the copy engine, then
// wgmma.mma_async.sp m64n128k32 with A (64 x 32, 2:4) in registers.
__global__ void product_sw128(const __grid_constant__ TMap map, int k0, const uint32_t* A, const uint32_t* E,
                              float* D, uint32_t lbo, uint32_t sbo) {
    __shared__ __align__(1024) uint16_t tile[2 * BOX_ELEMS];
    __shared__ __align__(8) uint64_t bar;
    const int tid = threadIdx.x;
    if (tid == 0) {
        bar_init(&bar, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (tid == 0) {
        bar_expect(&bar, sizeof tile);
        for (int j = 0; j < 2; ++j) tma_load(tile + j * BOX_ELEMS, &map, &bar, j * BOX_N, k0);
    }
    uint32_t a[4];
    for (int r = 0; r < 4; ++r) a[r] = A[tid * 4 + r];
    const uint32_t e = E[tid];
    float d[64];
    for (int i = 0; i < 64; ++i) d[i] = 0.0f;
    bar_wait(&bar, 0);
    const uint64_t desc = (uint64_t)((smem(tile) & 0x3ffff) >> 4) | ((uint64_t)(lbo >> 4) << 16) |
                          ((uint64_t)(sbo >> 4) << 32) | (1ull << 62);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    asm volatile(
        "{ .reg .pred p; setp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sp.sync.aligned.m64n128k32.f32.f16.f16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, %69, 0, p, 1, 1, 1; }"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(e));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    for (int i = 0; i < 64; ++i) D[tid * 64 + i] = d[i];
}

static uint16_t h(float v) {
    __half x = __float2half(v);
    uint16_t u;
    memcpy(&u, &x, 2);
    return u;
}
static uint32_t pack(float lo, float hi) { return (uint32_t)h(lo) | ((uint32_t)h(hi) << 16); }

// Where a box's element (row r, column c) is expected, in 16-bit elements from the box's start,
// for rows of `row_bytes` and a swizzle of 2^s 16-byte chunks (s = 0: none, 1: 32 B, 2: 64 B,
// 3: 128 B): bits 4 .. 4 + s of the byte offset XORed with bits 7 .. 7 + s.
static int swizzled(int r, int c, int row_bytes, int s) {
    const int a = r * row_bytes + c * 2;
    return (a ^ (((a >> 7) & ((1 << s) - 1)) << 4)) / 2;
}

// Compares a copied tile of four boxes (rows k0 ..) with B; prints the first differences.
static int check_tile(const char* what, const uint16_t* got, const uint16_t* B, int k0) {
    int bad = 0;
    for (int j = 0; j < 4; ++j)
        for (int k = 0; k < BOX_K; ++k)
            for (int n = 0; n < BOX_N; ++n) {
                uint16_t want = B[(k0 + k) * NG + j * BOX_N + n], g = got[j * BOX_ELEMS + swizzled(k, n, 128, 3)];
                if (want != g && bad++ < 4)
                    printf("  %s: box %d (k %d, n %d): got %04x, want %04x\n", what, j, k, n, g, want);
            }
    printf("%s: %s (%d of %d elements differ)\n", what, bad == 0 ? "MATCH" : "MISMATCH", bad, 4 * BOX_ELEMS);
    return bad == 0;
}

int main() {
    srand(21);
    // B: small integers as float16, but distinct bit patterns for the copy checks would need
    // distinct values: the copy tests use a second matrix of raw 16-bit indices.
    static uint16_t Bidx[KG * NG], Bval[KG * NG];
    static float Bf[KG][NG];
    for (int k = 0; k < KG; ++k)
        for (int n = 0; n < NG; ++n) {
            Bidx[k * NG + n] = (uint16_t)(k * NG + n);
            Bf[k][n] = (float)(rand() % 7 - 3);
            Bval[k * NG + n] = h(Bf[k][n]);
        }
    uint16_t *dBidx, *dBval, *dOut;
    CHECK(cudaMalloc(&dBidx, sizeof Bidx));
    CHECK(cudaMalloc(&dBval, sizeof Bval));
    CHECK(cudaMalloc(&dOut, 2 * 4 * BOX_ELEMS * 2));
    CHECK(cudaMemcpy(dBidx, Bidx, sizeof Bidx, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dBval, Bval, sizeof Bval, cudaMemcpyHostToDevice));

    auto encode = [](void* base, cuuint64_t cols, cuuint64_t rows, cuuint32_t box_c, cuuint32_t box_r,
                     CUtensorMapSwizzle swz) {
        CUtensorMap m;
        cuuint64_t dims[2] = {cols, rows};
        cuuint64_t strides[1] = {cols * 2};
        cuuint32_t box[2] = {box_c, box_r};
        cuuint32_t estr[2] = {1, 1};
        CUresult r = cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, base, dims, strides, box, estr,
                                            CU_TENSOR_MAP_INTERLEAVE_NONE, swz,
                                            CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        if (r != CUDA_SUCCESS) {
            printf("cuTensorMapEncodeTiled failed: %d\n", (int)r);
            exit(1);
        }
        TMap t;
        static_assert(sizeof(CUtensorMap) == sizeof(TMap), "tensor map size");
        memcpy(&t, &m, sizeof t);
        return t;
    };
    CHECK(cudaFree(0));
    TMap mapIdx = encode(dBidx, NG, KG, BOX_N, BOX_K, CU_TENSOR_MAP_SWIZZLE_128B),
         mapVal = encode(dBval, NG, KG, BOX_N, BOX_K, CU_TENSOR_MAP_SWIZZLE_128B);
    static uint16_t got[2 * 4 * BOX_ELEMS];
    int ok = 0;

    swizzle_copy<<<1, 128>>>(mapIdx, 32, dOut);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(got, dOut, 4 * BOX_ELEMS * 2, cudaMemcpyDeviceToHost));
    ok += check_tile("1. SWIZZLE_128B box layout (rows 32-63, four boxes)", got, Bidx, 32);

    multicast_copy<<<2, 128>>>(mapIdx, 0, dOut);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(got, dOut, 2 * 4 * BOX_ELEMS * 2, cudaMemcpyDeviceToHost));
    ok += check_tile("2. multicast, block 0 of the cluster", got, Bidx, 0);
    ok += check_tile("2. multicast, block 1 of the cluster", got + 4 * BOX_ELEMS, Bidx, 0);

    // 4. Boxes shaped as a run of A's compressed values would be (16 or 32 columns of 64 rows),
    // each swizzle: the same formula.
    {
        struct Case {
            const char* name;
            cuuint32_t box_c;
            CUtensorMapSwizzle swz;
            int s;
        } cases[4] = {{"no swizzle, 16 x 64", 16, CU_TENSOR_MAP_SWIZZLE_NONE, 0},
                      {"SWIZZLE_32B, 16 x 64", 16, CU_TENSOR_MAP_SWIZZLE_32B, 1},
                      {"SWIZZLE_64B, 32 x 64", 32, CU_TENSOR_MAP_SWIZZLE_64B, 2},
                      {"SWIZZLE_128B, 64 x 64", 64, CU_TENSOR_MAP_SWIZZLE_128B, 3}};
        for (auto& c : cases) {
            // Bidx seen as 64 rows of 256 columns; the box at column 64, row 0.
            TMap m = encode(dBidx, NG, KG, c.box_c, 64, c.swz);
            const uint32_t bytes = c.box_c * 2 * 64;
            copy_box<<<1, 128>>>(m, 64, 0, bytes, dOut);
            CHECK(cudaGetLastError());
            CHECK(cudaDeviceSynchronize());
            CHECK(cudaMemcpy(got, dOut, bytes, cudaMemcpyDeviceToHost));
            int bad = 0;
            for (int r = 0; r < 64; ++r)
                for (int col = 0; col < (int)c.box_c; ++col) {
                    uint16_t want = Bidx[r * NG + 64 + col], g = got[swizzled(r, col, c.box_c * 2, c.s)];
                    if (want != g && bad++ < 4)
                        printf("  (row %d, column %d): got %04x, want %04x\n", r, col, g, want);
                }
            printf("4. %s: %s (%d of %d elements differ)\n", c.name, bad == 0 ? "MATCH" : "MISMATCH", bad,
                   64 * (int)c.box_c);
            ok += bad == 0;
        }
    }

    // 3. A: 64 x 32, 2:4, in mma.sp m16n8k32's per-warp layouts (as probe_wgmma_sp.cu).
    static float V[64][16], A[64][32], ref[64][128];
    static int P[64][16];
    memset(A, 0, sizeof A);
    memset(ref, 0, sizeof ref);
    for (int r = 0; r < 64; ++r)
        for (int q = 0; q < 8; ++q) {
            int p0 = rand() % 3, p1 = p0 + 1 + rand() % (3 - p0);
            P[r][2 * q] = p0;
            P[r][2 * q + 1] = p1;
            V[r][2 * q] = (float)(rand() % 7 - 3);
            V[r][2 * q + 1] = (float)(rand() % 7 - 3);
            A[r][4 * q + p0] = V[r][2 * q];
            A[r][4 * q + p1] = V[r][2 * q + 1];
        }
    const int k0 = 32;
    for (int r = 0; r < 64; ++r)
        for (int n = 0; n < 128; ++n)
            for (int k = 0; k < 32; ++k) ref[r][n] += A[r][k] * Bf[k0 + k][n];
    static uint32_t hA[128 * 4], hE[128];
    auto word = [&](int row, int c0) {
        uint32_t w = 0;
        for (int j = 0; j < 8; ++j) w |= (uint32_t)P[row][c0 + j] << (2 * j);
        return w;
    };
    for (int tid = 0; tid < 128; ++tid) {
        int w = tid >> 5, l = tid & 31, g = l >> 2, t = l & 3;
        for (int r = 0; r < 4; ++r) {
            int row = 16 * w + g + 8 * (r & 1), col = 2 * t + 8 * (r >> 1);
            hA[tid * 4 + r] = pack(V[row][col], V[row][col + 1]);
        }
        int hh = t & 1;
        hE[tid] = word(16 * w + g, 8 * hh) | (word(16 * w + g + 8, 8 * hh) << 16);
    }
    uint32_t *dA, *dE;
    float* dD;
    CHECK(cudaMalloc(&dA, sizeof hA));
    CHECK(cudaMalloc(&dE, sizeof hE));
    CHECK(cudaMalloc(&dD, 64 * 128 * sizeof(float)));
    CHECK(cudaMemcpy(dA, hA, sizeof hA, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dE, hE, sizeof hE, cudaMemcpyHostToDevice));
    const char* name[2] = {"S1: LBO 4096 (between boxes), SBO 1024 (between 8-row groups)",
                           "S2: LBO 1024, SBO 4096 (swapped)"};
    const uint32_t lbo[2] = {4096, 1024}, sbo[2] = {1024, 4096};
    int products = 0;
    for (int c = 0; c < 2; ++c) {
        CHECK(cudaMemset(dD, 0, 64 * 128 * sizeof(float)));
        product_sw128<<<1, 128>>>(mapVal, k0, dA, dE, dD, lbo[c], sbo[c]);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        static float hD[128 * 64];
        CHECK(cudaMemcpy(hD, dD, sizeof hD, cudaMemcpyDeviceToHost));
        double err = 0;
        for (int tid = 0; tid < 128; ++tid) {
            int w = tid >> 5, l = tid & 31, g = l >> 2, t = l & 3;
            for (int i = 0; i < 64; ++i) {
                int row = 16 * w + g + ((i & 2) ? 8 : 0), col = 8 * (i >> 2) + 2 * t + (i & 1);
                double d = hD[tid * 64 + i] - ref[row][col];
                if (d < 0) d = -d;
                if (d > err) err = d;
            }
        }
        printf("3. wgmma.sp m64n128k32, B by the copy engine, %s: max|D - ref| = %g%s\n", name[c], err,
               err == 0 ? "  MATCH" : "");
        products += err == 0;
    }
    printf("probe_tma: %d of 7 copy checks, %d matching descriptor(s)\n", ok, products);
    return 0;
}
