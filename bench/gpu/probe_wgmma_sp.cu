// Which shared-memory descriptor does `wgmma.mma_async.sp.sync.aligned.m64n32k32.f32.f16.f16`
// (A in registers, sparsity selector 0, B transposed: MN-major) take on this GPU, and do the
// register layouts the CUDA writer assumes hold? The writer (crates/codegen/src/c/gpu/mma/
// warpgroup.rs) issues it with each warp's A fragment and metadata in `mma.sp` m16n8k32's
// layouts (the four warps of the warpgroup giving rows 16w .. 16w + 15), the accumulators in
// m16n8's C layout one 8-column group after another, and B in shared memory as 8 x 8 core
// matrices of 8 rows (k) of 16 bytes (8 consecutive columns): element (k, n) at byte
// (n / 8) * SBO + (k / 8) * LBO + (k % 8) * 16 + (n % 8) * 2, LBO = 128 and SBO = 32 * 16
// (a slice of 32 rows): descriptor `D1` below. The others swap the two strides (`D2`) or
// store B K-major (`D3`, transposed flag 0). One warpgroup multiplies a random 64 x 32 2:4
// matrix (small integers: every product and sum is exact) by a random 32 x 32 matrix; the
// result is compared with the host's.
//
//   nvcc -gencode=arch=compute_90a,code=sm_90a -o probe bench/gpu/probe_wgmma_sp.cu && ./probe
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

constexpr int N = 32;

__device__ __forceinline__ uint64_t descriptor(const void* p, uint32_t lbo, uint32_t sbo) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((a & 0x3ffff) >> 4) | ((uint64_t)(lbo >> 4) << 16) |
           ((uint64_t)(sbo >> 4) << 32);
}

// Bs: B's 32 x N elements in the layout under test (1024 16-bit values); lbo, sbo in bytes.
template <int TRANS>
__global__ void product(const uint32_t* A, const uint16_t* Bs, const uint32_t* E, float* D,
                        uint32_t lbo, uint32_t sbo) {
    __shared__ __align__(128) uint16_t sb[32 * N];
    const int tid = threadIdx.x;
    for (int i = tid; i < 32 * N; i += 128) sb[i] = Bs[i];
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    uint32_t a[4];
    for (int r = 0; r < 4; ++r) a[r] = A[tid * 4 + r];
    const uint32_t e = E[tid];
    float d[N / 2];
    for (int i = 0; i < N / 2; ++i) d[i] = 0.0f;
    const uint64_t desc = descriptor(sb, lbo, sbo);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    asm volatile(
        "{ .reg .pred p; setp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sp.sync.aligned.m64n32k32.f32.f16.f16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, %21, 0, "
        "p, 1, 1, %22; }"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),
          "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(e), "n"(TRANS));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    for (int i = 0; i < N / 2; ++i) D[tid * (N / 2) + i] = d[i];
}

static uint16_t h(float v) {
    __half x = __float2half(v);
    uint16_t u;
    memcpy(&u, &x, 2);
    return u;
}

static uint32_t pack(float lo, float hi) { return (uint32_t)h(lo) | ((uint32_t)h(hi) << 16); }

int main() {
    srand(11);
    static float V[64][16], Bm[32][N], A[64][32], ref[64][N];
    static int P[64][16];
    memset(A, 0, sizeof A);
    memset(ref, 0, sizeof ref);
    for (int r = 0; r < 64; ++r)
        for (int q = 0; q < 8; ++q) {
            int p0 = rand() % 3;
            int p1 = p0 + 1 + rand() % (3 - p0);
            P[r][2 * q] = p0;
            P[r][2 * q + 1] = p1;
            V[r][2 * q] = (float)(rand() % 7 - 3);
            V[r][2 * q + 1] = (float)(rand() % 7 - 3);
            A[r][4 * q + p0] = V[r][2 * q];
            A[r][4 * q + p1] = V[r][2 * q + 1];
        }
    for (int k = 0; k < 32; ++k)
        for (int n = 0; n < N; ++n) Bm[k][n] = (float)(rand() % 7 - 3);
    for (int r = 0; r < 64; ++r)
        for (int n = 0; n < N; ++n)
            for (int k = 0; k < 32; ++k) ref[r][n] += A[r][k] * Bm[k][n];
    // A: warp w's compressed 16 x 16 rows 16w .. 16w + 15 in m16n8k16's A layout.
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
        // Metadata (E1 of probe_mma_sp.cu, per warp): lane 4g + h (h = t & 1): row g's
        // positions of compressed columns 8h .. 8h + 7 low, row g + 8's high.
        int hh = t & 1;
        hE[tid] = word(16 * w + g, 8 * hh) | (word(16 * w + g + 8, 8 * hh) << 16);
    }
    // B layouts (16-bit element index of (k, n)).
    const char* dname[3] = {
        "D1: MN-major core matrices, (n/8)*512 B + (k/8)*128 B, LBO 128 SBO 512, trans-b 1",
        "D2: the same bytes, LBO 512 SBO 128 (strides swapped), trans-b 1",
        "D3: K-major core matrices, (n/8)*128 B + (k/8)*(N*16) B, LBO N*16 SBO 128, trans-b 0",
    };
    static uint16_t hB[3][32 * N];
    for (int k = 0; k < 32; ++k)
        for (int n = 0; n < N; ++n) {
            uint16_t v = h(Bm[k][n]);
            hB[0][(n / 8) * 256 + (k / 8) * 64 + (k % 8) * 8 + n % 8] = v;
            hB[1][(n / 8) * 256 + (k / 8) * 64 + (k % 8) * 8 + n % 8] = v;
            // K-major: core matrix = 8 rows (n) of 8 k values (16 bytes).
            hB[2][(k / 8) * (N * 8) + (n / 8) * 64 + (n % 8) * 8 + k % 8] = v;
        }
    const uint32_t lbo[3] = {128, 512, N * 16}, sbo[3] = {512, 128, 128};
    uint32_t *dA, *dE;
    uint16_t* dB;
    float* dD;
    CHECK(cudaMalloc(&dA, sizeof hA));
    CHECK(cudaMalloc(&dE, sizeof hE));
    CHECK(cudaMalloc(&dB, sizeof hB[0]));
    CHECK(cudaMalloc(&dD, 64 * N * sizeof(float)));
    CHECK(cudaMemcpy(dA, hA, sizeof hA, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dE, hE, sizeof hE, cudaMemcpyHostToDevice));
    int matches = 0;
    for (int c = 0; c < 3; ++c) {
        CHECK(cudaMemcpy(dB, hB[c], sizeof hB[c], cudaMemcpyHostToDevice));
        CHECK(cudaMemset(dD, 0, 64 * N * sizeof(float)));
        if (c < 2)
            product<1><<<1, 128>>>(dA, dB, dE, dD, lbo[c], sbo[c]);
        else
            product<0><<<1, 128>>>(dA, dB, dE, dD, lbo[c], sbo[c]);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        static float hD[64 * N];
        CHECK(cudaMemcpy(hD, dD, sizeof hD, cudaMemcpyDeviceToHost));
        double err = 0;
        for (int tid = 0; tid < 128; ++tid) {
            int w = tid >> 5, l = tid & 31, g = l >> 2, t = l & 3;
            for (int i = 0; i < N / 2; ++i) {
                // Accumulator i: column group i / 4, element i % 4 of m16n8's C fragment.
                int row = 16 * w + g + ((i & 2) ? 8 : 0), col = 8 * (i >> 2) + 2 * t + (i & 1);
                double d = hD[tid * (N / 2) + i] - ref[row][col];
                err = d < 0 ? (-d > err ? -d : err) : (d > err ? d : err);
            }
        }
        printf("%s: max|D - ref| = %g%s\n", dname[c], err, err == 0 ? "  MATCH" : "");
        matches += err == 0;
    }
    printf("probe_wgmma_sp: %d matching layout(s)\n", matches);
    return 0;
}
