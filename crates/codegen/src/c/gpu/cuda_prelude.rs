//! The fixed head of every CUDA source the writer emits (`CUDA_PRELUDE`).

/// The fixed head of every CUDA source: what NVRTC lacks without headers, the names the
/// emulator replaces, and the helpers of the expression writer.
pub(super) const CUDA_PRELUDE: &str = r#"#ifndef SPTIR_EMU
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#define SPTIR_IN(T) const T* __restrict__
#define SPTIR_OUT(T) T* __restrict__
#define SPTIR_SHARED(T, name, n) __shared__ __align__(128) T name[n]
/* The dynamic window starts 1024-byte aligned: a 128-byte-swizzled copy or wgmma tile must
   start at such an address (a 32-byte-swizzled one at 256), and the windows' offsets are laid
   out from it. */
#define SPTIR_SHARED_DYN(T, name, n, off) \
    extern __shared__ __align__(1024) unsigned char sptir_dyn_smem[]; \
    T* const name = reinterpret_cast<T*>(sptir_dyn_smem + (off))
static __device__ __forceinline__ float4 sptir_ld4(const float* __restrict__ p) {
    return __ldg(reinterpret_cast<const float4*>(p));
}
static __device__ __forceinline__ float2 sptir_ld2(const float* __restrict__ p) {
    return __ldg(reinterpret_cast<const float2*>(p));
}
static __device__ __forceinline__ double2 sptir_ld2(const double* __restrict__ p) {
    return __ldg(reinterpret_cast<const double2*>(p));
}
static __device__ __forceinline__ void sptir_st2(float* __restrict__ p, float a, float b) {
    *reinterpret_cast<float2*>(p) = make_float2(a, b);
}
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fffffff)
#define FLT_MAX 3.402823466e+38F
#define DBL_MAX 1.7976931348623158e+308
#define INT8_MIN (-128)
#define INT8_MAX 127
#define INT16_MIN (-32768)
#define INT16_MAX 32767
#define INT32_MIN (-2147483647 - 1)
#define INT32_MAX 2147483647
#define INT64_MIN (-9223372036854775807LL - 1)
#define INT64_MAX 9223372036854775807LL
#define UINT8_MAX 255
#define UINT16_MAX 65535
#define UINT32_MAX 4294967295u
#define UINT64_MAX 18446744073709551615ull
#define INT64_C(c) c##LL
#define UINT64_C(c) c##ULL
#endif

#define SPTIR_MINMAX(S, T) \
    static __device__ __forceinline__ T sptir_min_##S(T a, T b) { return a < b ? a : b; } \
    static __device__ __forceinline__ T sptir_max_##S(T a, T b) { return a > b ? a : b; }
#define SPTIR_SIGNED(S, T, U) \
    SPTIR_MINMAX(S, T) \
    static __device__ __forceinline__ T sptir_floordiv_##S(T a, T b) { \
        T q = (T)(a / b); \
        return (a % b != 0 && ((a < 0) != (b < 0))) ? (T)(q - 1) : q; \
    } \
    static __device__ __forceinline__ T sptir_floormod_##S(T a, T b) { \
        T r = (T)(a % b); \
        return (r != 0 && ((r < 0) != (b < 0))) ? (T)(r + b) : r; \
    } \
    static __device__ __forceinline__ T sptir_abs_##S(T a) { return a < 0 ? (T)((U)0 - (U)a) : a; } \
    static __device__ __forceinline__ T sptir_div_chk_##S(T a, T b) { \
        if (b == 0) { SPTIR_DIV_BY_ZERO(); return 0; } \
        return b == (T)-1 ? (T)((U)0 - (U)a) : (T)(a / b); \
    } \
    static __device__ __forceinline__ T sptir_floordiv_chk_##S(T a, T b) { \
        if (b == 0) { SPTIR_DIV_BY_ZERO(); return 0; } \
        return b == (T)-1 ? (T)((U)0 - (U)a) : sptir_floordiv_##S(a, b); \
    } \
    static __device__ __forceinline__ T sptir_floormod_chk_##S(T a, T b) { \
        if (b == 0) { SPTIR_DIV_BY_ZERO(); return 0; } \
        return b == (T)-1 ? (T)0 : sptir_floormod_##S(a, b); \
    }
#define SPTIR_UNSIGNED(S, T) \
    SPTIR_MINMAX(S, T) \
    static __device__ __forceinline__ T sptir_div_chk_##S(T a, T b) { \
        if (b == 0) { SPTIR_DIV_BY_ZERO(); return 0; } \
        return (T)(a / b); \
    } \
    static __device__ __forceinline__ T sptir_floordiv_chk_##S(T a, T b) { return sptir_div_chk_##S(a, b); } \
    static __device__ __forceinline__ T sptir_floormod_chk_##S(T a, T b) { \
        if (b == 0) { SPTIR_DIV_BY_ZERO(); return 0; } \
        return (T)(a % b); \
    }
/* Integer division or modulo by a divisor not known to be safe: by zero, the emulator stops
   with an error; a GPU gives 0 (it does not trap). By -1, the quotient wraps. */
#ifdef SPTIR_EMU
#define SPTIR_DIV_BY_ZERO() ::sptir_emu::fail_div_by_zero()
#else
#define SPTIR_DIV_BY_ZERO() ((void)0)
#endif
SPTIR_SIGNED(i8, int8_t, uint8_t)
SPTIR_SIGNED(i16, int16_t, uint16_t)
SPTIR_SIGNED(i32, int32_t, uint32_t)
SPTIR_SIGNED(i64, int64_t, uint64_t)
SPTIR_UNSIGNED(u8, uint8_t)
SPTIR_UNSIGNED(u16, uint16_t)
SPTIR_UNSIGNED(u32, uint32_t)
SPTIR_UNSIGNED(u64, uint64_t)
static __device__ __forceinline__ float sptir_floordiv_f32(float a, float b) { return floorf(a / b); }
static __device__ __forceinline__ double sptir_floordiv_f64(double a, double b) { return floor(a / b); }
static __device__ __forceinline__ float sptir_floormod_f32(float a, float b) {
    float r = fmodf(a, b);
    return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r;
}
static __device__ __forceinline__ double sptir_floormod_f64(double a, double b) {
    double r = fmod(a, b);
    return (r != 0.0 && ((r < 0.0) != (b < 0.0))) ? r + b : r;
}

"#;
