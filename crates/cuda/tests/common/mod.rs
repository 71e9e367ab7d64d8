//! Helpers shared by the integration tests: finding NVRTC or skipping, and the test kernels.

#![allow(dead_code)]

use sparsetir_cuda::{CudaError, Nvrtc};

/// NVRTC through the default search; `None` (with the reason printed) when it is missing, unless
/// `CI=true`, where a missing NVRTC fails the test.
pub fn nvrtc_or_skip() -> Option<Nvrtc> {
    match Nvrtc::load() {
        Ok(n) => Some(n),
        Err(e @ (CudaError::NvrtcNotFound { .. } | CudaError::NvrtcLoad { .. })) => {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("CI=true but NVRTC is unavailable (run scripts/setup-nvrtc.sh): {e}");
            }
            eprintln!("skipped: {e}");
            None
        }
        Err(e) => panic!("loading NVRTC: {e}"),
    }
}

/// `y[i] = a * x[i] + y[i]` for `i < n`.
pub const AXPY: &str = r#"
extern "C" __global__ void axpy(int n, float a, const float* __restrict__ x, float* __restrict__ y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + y[i];
    }
}
"#;

/// 32 values live across a loop under a small register limit: ptxas must spill.
pub const SPILL: &str = r#"
extern "C" __global__ void spill(float* __restrict__ out, int n) {
    float acc[32];
    #pragma unroll
    for (int i = 0; i < 32; ++i) acc[i] = out[i * n + threadIdx.x];
    #pragma unroll
    for (int k = 1; k < 4; ++k) {
        #pragma unroll
        for (int i = 0; i < 32; ++i) acc[i] = acc[i] * acc[(i + k) % 32] + 1.0f;
    }
    #pragma unroll
    for (int i = 0; i < 32; ++i) out[i * n + threadIdx.x] = acc[i];
}
"#;

/// Two kernels: a block-wide sum through static shared memory, and a kernel whose launch
/// bounds cap its block at 128 threads.
pub const SHARED: &str = r#"
extern "C" __global__ void __launch_bounds__(256) block_sum(const int* __restrict__ x, int* __restrict__ out, long long n) {
    __shared__ int part[256];
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    part[threadIdx.x] = i < n ? x[i] : 0;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, part[0]);
}

extern "C" __global__ void __launch_bounds__(128) small(double* __restrict__ out, double v, unsigned k) {
    out[threadIdx.x] = v * (double)k;
}
"#;
