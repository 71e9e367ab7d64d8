// Which register layouts does `mma.sp.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32` (sparsity
// selector 0) use on this GPU? PTX's manual gives the metadata's layout as a figure only, so the
// CUDA writer's choice (crates/codegen/src/c/gpu/mma.rs) and the emulator's model of it are
// checked here against the hardware: one warp multiplies a random 16 x 32 2:4 matrix (values and
// positions random, small integers: every product and sum is exact) by a random 32 x 8 matrix,
// with the metadata and B fragments packed under each candidate layout, and the result is
// compared with the product computed on the host. The layout the writer uses is `B1 E1`.
//
//   nvcc -arch=sm_90 -o probe bench/gpu/probe_mma_sp.cu && ./probe
#include <cuda_fp16.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CHECK(x)                                                              \
    do {                                                                      \
        cudaError_t err = (x);                                                \
        if (err != cudaSuccess) {                                             \
            printf("CUDA error %s at %s:%d\n", cudaGetErrorString(err), __FILE__, __LINE__); \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

__global__ void product(const uint32_t* A, const uint32_t* B, const uint32_t* E, float* D) {
    const int l = threadIdx.x;
    uint32_t a[4], b[4];
    float c[4] = {0.f, 0.f, 0.f, 0.f};
    for (int r = 0; r < 4; ++r) {
        a[r] = A[l * 4 + r];
        b[r] = B[l * 4 + r];
    }
    const uint32_t e = E[l];
    asm volatile(
        "mma.sp.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9,%10,%11}, {%0,%1,%2,%3}, %12, 0x0;"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(b[2]), "r"(b[3]),
          "r"(e));
    for (int i = 0; i < 4; ++i) D[l * 4 + i] = c[i];
}

static uint16_t h(float v) {
    __half x = __float2half(v);
    uint16_t u;
    memcpy(&u, &x, 2);
    return u;
}

static uint32_t pack(float lo, float hi) { return (uint32_t)h(lo) | ((uint32_t)h(hi) << 16); }

int main() {
    srand(7);
    float V[16][16], Bm[32][8], A[16][32] = {}, ref[16][8] = {};
    int P[16][16];
    for (int r = 0; r < 16; ++r)
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
        for (int n = 0; n < 8; ++n) Bm[k][n] = (float)(rand() % 7 - 3);
    for (int r = 0; r < 16; ++r)
        for (int n = 0; n < 8; ++n)
            for (int k = 0; k < 32; ++k) ref[r][n] += A[r][k] * Bm[k][n];
    // A: the compressed 16 x 16 in m16n8k16's A layout.
    uint32_t hA[128];
    for (int l = 0; l < 32; ++l) {
        int g = l >> 2, t = l & 3;
        for (int r = 0; r < 4; ++r) {
            int row = g + 8 * (r & 1), col = 2 * t + 8 * (r >> 1);
            hA[l * 4 + r] = pack(V[row][col], V[row][col + 1]);
        }
    }
    // B candidates. B1: register r holds rows 2t + 8r, 2t + 8r + 1 of column g.
    // B2: register r holds rows 4t + 2(r & 1) + 16(r >> 1) and the next.
    uint32_t hB[2][128];
    for (int l = 0; l < 32; ++l) {
        int g = l >> 2, t = l & 3;
        for (int r = 0; r < 4; ++r) {
            int k1 = 2 * t + 8 * r, k2 = 4 * t + 2 * (r & 1) + 16 * (r >> 1);
            hB[0][l * 4 + r] = pack(Bm[k1][g], Bm[k1 + 1][g]);
            hB[1][l * 4 + r] = pack(Bm[k2][g], Bm[k2 + 1][g]);
        }
    }
    // Metadata candidates (16 bits = 8 positions of one row's 8 compressed columns).
    auto word = [&](int row, int c0) {
        uint32_t w = 0;
        for (int j = 0; j < 8; ++j) w |= (uint32_t)P[row][c0 + j] << (2 * j);
        return w;
    };
    const char* ename[4] = {
        "E1: lane 4g+h (h<2): low row g, high row g+8, compressed cols 8h..8h+7",
        "E2: lane 4g+0: row g (low cols 0-7, high 8-15); lane 4g+1: row g+8",
        "E3: lane 4g+h (h<2): low row 2g, high row 2g+1, compressed cols 8h..8h+7",
        "E4: lane 4g+0: row 2g (low cols 0-7, high 8-15); lane 4g+1: row 2g+1",
    };
    uint32_t hE[4][32];
    for (int l = 0; l < 32; ++l) {
        int g = l >> 2, t = l & 3;
        for (int c = 0; c < 4; ++c) hE[c][l] = 0;
        if (t < 2) {
            hE[0][l] = word(g, 8 * t) | (word(g + 8, 8 * t) << 16);
            int rr = t == 0 ? g : g + 8;
            hE[1][l] = word(rr, 0) | (word(rr, 8) << 16);
            hE[2][l] = word(2 * g, 8 * t) | (word(2 * g + 1, 8 * t) << 16);
            hE[3][l] = word(2 * g + t, 0) | (word(2 * g + t, 8) << 16);
        }
    }
    uint32_t *dA, *dB, *dE;
    float* dD;
    CHECK(cudaMalloc(&dA, sizeof hA));
    CHECK(cudaMalloc(&dB, sizeof hB[0]));
    CHECK(cudaMalloc(&dE, sizeof hE[0]));
    CHECK(cudaMalloc(&dD, 128 * sizeof(float)));
    CHECK(cudaMemcpy(dA, hA, sizeof hA, cudaMemcpyHostToDevice));
    int matches = 0;
    for (int bc = 0; bc < 2; ++bc)
        for (int ec = 0; ec < 4; ++ec) {
            CHECK(cudaMemcpy(dB, hB[bc], sizeof hB[bc], cudaMemcpyHostToDevice));
            CHECK(cudaMemcpy(dE, hE[ec], sizeof hE[ec], cudaMemcpyHostToDevice));
            product<<<1, 32>>>(dA, dB, dE, dD);
            CHECK(cudaGetLastError());
            CHECK(cudaDeviceSynchronize());
            float hD[128];
            CHECK(cudaMemcpy(hD, dD, sizeof hD, cudaMemcpyDeviceToHost));
            double err = 0;
            for (int l = 0; l < 32; ++l) {
                int g = l >> 2, t = l & 3;
                for (int i = 0; i < 4; ++i) {
                    int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
                    double d = hD[l * 4 + i] - ref[row][col];
                    err = d < 0 ? (-d > err ? -d : err) : (d > err ? d : err);
                }
            }
            printf("B%d E%d max|D - ref| = %g%s   (%s)\n", bc + 1, ec + 1, err,
                   err == 0 ? "  MATCH" : "", ename[ec]);
            matches += err == 0;
        }
    printf("probe_mma_sp: %d matching layout(s)\n", matches);
    return 0;
}
