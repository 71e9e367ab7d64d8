//! `float16` and `bfloat16` on the C and CUDA targets: such buffers are stored as their 16-bit patterns
//! (`uint16_t`), and their values are computed in `float` and rounded to the 16-bit type after
//! every operation, exactly as the reference evaluator rounds (round to nearest, ties to even):
//! a load converts the bits to `float` (`sptir_h2f`, `sptir_bf2f`), an operation of a 16-bit
//! type rounds its `float` result (`sptir_rh`, `sptir_rbf`), a store converts to bits
//! (`sptir_f2h`, `sptir_f2bf`). A `T.Cast("float32", x)` of a half value is exact, so kernels that
//! accumulate in `float32` (the usual mixed-precision form) round only where they store.
//!
//! Why bit patterns and hand-written conversions rather than `_Float16`/`__bf16`: gcc 12 on
//! x86-64 has `_Float16` but keeps excess precision in expressions unless told otherwise, and
//! `__bf16` is only a storage type there; conversions written once in portable C give the same
//! bits on every compiler and machine, which is what the tests compare against; on CUDA the
//! same helpers are device functions (tensor-core code will pass the bit patterns to `mma`
//! directly).
//!
//! Loops that store to a 16-bit buffer lose their SIMD annotations (`simd_reduction`, `lanes`,
//! `simd_min_trip`, `jam`, ...): these are performance hints whose special forms accumulate in
//! the stored element's type. Loops that only read 16-bit buffers keep them: a load's value is
//! a `float`, and in a vector loop `T.Cast("float32", X[..])` of a contiguous 16-bit load is
//! one widening vector load (`sptir_vld_f16`, `sptir_wld16_bf16`, ...: F16C/AVX-512
//! conversions where the machine has them, exact like every other conversion here; see
//! [`widen_prelude`]). A `vectorize`d loop whose stores put `float` values into consecutive
//! 16-bit elements (a softmax writing float16 probabilities) is a vector loop of `float`s whose
//! stores round once, a vector at a time ([`narrow_prelude`]).

use sparsetir_ir::{DType, Expr, For, PrimFunc, Stmt};

/// Whether `dt` is stored as 16-bit patterns.
pub(super) fn is_half(dt: DType) -> bool {
    matches!(dt, DType::F16 | DType::BF16)
}

/// The conversion of a loaded 16-bit pattern (C text) to its `float` value.
pub(super) fn load_value(dt: DType, bits: String) -> String {
    match dt {
        DType::F16 => format!("sptir_h2f({bits})"),
        DType::BF16 => format!("sptir_bf2f({bits})"),
        _ => bits,
    }
}

/// The 16-bit pattern of a `float` value (C text) to store in a buffer of `dt`.
pub(super) fn store_bits(dt: DType, value: &str) -> String {
    match dt {
        DType::F16 => format!("sptir_f2h({value})"),
        DType::BF16 => format!("sptir_f2bf({value})"),
        _ => value.to_string(),
    }
}

/// A `float` value (C text) rounded to the nearest value of `dt` (still a `float`).
pub(super) fn round_to(dt: DType, value: &str) -> String {
    match dt {
        DType::F16 => format!("sptir_rh({value})"),
        DType::BF16 => format!("sptir_rbf({value})"),
        _ => value.to_string(),
    }
}

/// A CUDA atomic addition of the `float` value `value` to the element at pointer `ptr` (C text)
/// of a buffer of `dt`: `atomicAdd` for the types CUDA has it for, a compare-and-swap loop on
/// the 16-bit pattern for float16/bfloat16 (`sptir_atomic_add_f16`/`_bf16`, rounding the sum as
/// every other operation of the type).
pub(super) fn atomic_add(dt: DType, ptr: &str, value: &str) -> String {
    match dt {
        DType::F16 => format!("sptir_atomic_add_f16({ptr}, {value});"),
        DType::BF16 => format!("sptir_atomic_add_bf16({ptr}, {value});"),
        _ => format!("atomicAdd({ptr}, {value});"),
    }
}

/// Whether `func` holds a 16-bit float anywhere (a buffer, a variable or an expression's type):
/// the module then needs [`c_prelude`] (or [`cuda_prelude`]).
pub(super) fn uses_half(func: &PrimFunc) -> bool {
    if func.buffers.iter().any(|(_, b)| is_half(b.dtype)) {
        return true;
    }
    if func.vars.iter().any(|(_, v)| is_half(v.dtype)) {
        return true;
    }
    let mut found = false;
    func.body.visit(&mut |s| {
        s.for_each_expr(|e| {
            e.visit(&mut |x| match x {
                Expr::Cast(dt, _) | Expr::Float(_, dt) | Expr::Int(_, dt) => found |= is_half(*dt),
                Expr::Call { dtype, .. } => found |= is_half(*dtype),
                _ => {}
            })
        })
    });
    found
}

/// Whether the loop `f` stores to a 16-bit float buffer.
pub(super) fn loop_stores_half(func: &PrimFunc, f: &For) -> bool {
    let half = |b| func.buffers.get(b).is_some_and(|x| is_half(x.dtype));
    let mut found = false;
    f.body.visit(&mut |s| {
        if let Stmt::Store(st) = s {
            found |= half(st.buffer);
        }
    });
    found
}

/// The conversion helpers (C and CUDA: `SPTIR_HFN` is the function qualifier the including
/// prelude defines).
pub(super) const HALF_HELPERS: &str = r#"/* float16 / bfloat16 as 16-bit patterns, values computed in float (round to nearest even). */
SPTIR_HFN float sptir_u2f(uint32_t u) { union { uint32_t u; float f; } x; x.u = u; return x.f; }
SPTIR_HFN uint32_t sptir_f2u(float f) { union { uint32_t u; float f; } x; x.f = f; return x.u; }
#ifndef SPTIR_HW_CVT
SPTIR_HFN float sptir_h2f(uint16_t h) {
    uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
    uint32_t e = ((uint32_t)h >> 10) & 0x1fu, m = (uint32_t)h & 0x3ffu;
    if (e == 0u) {
        float v = (float)m * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (e == 31u) return sptir_u2f(sign | 0x7f800000u | (m << 13));
    return sptir_u2f(sign | ((e + 112u) << 23) | (m << 13));
}
SPTIR_HFN uint16_t sptir_f2h(float f) {
    uint32_t x = sptir_f2u(f);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) {
        /* Below the smallest normal: a multiple of 2^-24, rounded to nearest even. */
        float s = sptir_u2f(ax) * 16777216.0f;
        uint32_t q = (uint32_t)s;
        float r = s - (float)q;
        if (r > 0.5f || (r == 0.5f && (q & 1u))) q += 1u;
        return (uint16_t)(sign | q);
    }
    uint32_t r = ax - 0x38000000u;
    r += 0x0fffu + ((r >> 13) & 1u);
    return (uint16_t)(sign | (r >> 13));
}
#endif
SPTIR_HFN float sptir_bf2f(uint16_t b) { return sptir_u2f((uint32_t)b << 16); }
#ifndef SPTIR_HW_CVT_BF16
SPTIR_HFN uint16_t sptir_f2bf(float f) {
    uint32_t x = sptir_f2u(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}
#endif
SPTIR_HFN float sptir_rh(float f) { return sptir_h2f(sptir_f2h(f)); }
SPTIR_HFN float sptir_rbf(float f) { return sptir_bf2f(sptir_f2bf(f)); }

"#;

/// The CUDA prelude's 16-bit float part (device functions; the emulator compiles them for the
/// host).
pub(super) fn cuda_prelude() -> String {
    format!(
        "#define SPTIR_HFN static __device__ __forceinline__\n{HW_CONVERSIONS}{HALF_HELPERS}{HALF_ATOMICS}{HALF_VECTORS}"
    )
}

/// Eight consecutive 16-bit elements as one 16-byte load (`sptir_ld8h`, a `vectorize`d loop of 8
/// over a float16/bfloat16 buffer the kernel only reads, from an aligned start); element `u` is
/// bits `16 (u % 2)` of word `u / 2`.
const HALF_VECTORS: &str = r#"#ifndef SPTIR_EMU
typedef uint4 sptir_h8;
static __device__ __forceinline__ sptir_h8 sptir_ld8h(const uint16_t* __restrict__ p) {
    return __ldg(reinterpret_cast<const uint4*>(p));
}
static __device__ __forceinline__ void sptir_st8h(uint16_t* p, sptir_h8 v) {
    *reinterpret_cast<uint4*>(p) = v;
}
#else
struct sptir_h8 {
    uint32_t x, y, z, w;
};
template <bool W>
static sptir_h8 sptir_ld8h(const ::sptir_emu::GPtr<uint16_t, W>& p) {
    return ::sptir_emu::vector_load<sptir_h8, uint16_t, W, 8>(p);
}
/* Eight 16-bit elements into a shared array as one 16-byte store (alignment and races checked
   element by element). */
static void sptir_st8h(const ::sptir_emu::SPtr<uint16_t>& p, sptir_h8 v) {
    if (p.off % 8 != 0)
        ::sptir_emu::fail_unsupported("misaligned 16-byte shared store");
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    for (int k = 0; k < 8; ++k) p[k] = (uint16_t)(w[k / 2] >> (16 * (k % 2)));
}
#endif
"#;

/// On a GPU the conversions are the hardware's (`cvt`, round to nearest even, subnormals kept:
/// the same values as the software versions, which the emulator and the C backend use); the
/// bfloat16 rounding needs sm_80.
const HW_CONVERSIONS: &str = r#"#ifndef SPTIR_EMU
#define SPTIR_HW_CVT 1
SPTIR_HFN float sptir_h2f(uint16_t h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
SPTIR_HFN uint16_t sptir_f2h(float f) { uint16_t h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define SPTIR_HW_CVT_BF16 1
SPTIR_HFN uint16_t sptir_f2bf(float f) { uint16_t h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
#endif
#endif
"#;

/// 16-bit atomic additions for CUDA: a compare-and-swap loop on the element's 16 bits
/// (`atom.cas.b16`, sm_70 and later; the emulator provides `sptir_cas16` for its pointers). The
/// first attempt assumes the element holds 0, so no plain read races with other updaters.
const HALF_ATOMICS: &str = r#"#ifndef SPTIR_EMU
static __device__ __forceinline__ uint16_t sptir_cas16(uint16_t* p, uint16_t expected, uint16_t desired) {
    uint16_t old;
    asm volatile("atom.cas.b16 %0, [%1], %2, %3;" : "=h"(old) : "l"(p), "h"(expected), "h"(desired) : "memory");
    return old;
}
#endif
template <class P>
static __device__ __forceinline__ void sptir_atomic_add_f16(P p, float v) {
    uint16_t assumed = 0;
    for (;;) {
        uint16_t old = sptir_cas16(p, assumed, sptir_f2h(sptir_h2f(assumed) + v));
        if (old == assumed) return;
        assumed = old;
    }
}
template <class P>
static __device__ __forceinline__ void sptir_atomic_add_bf16(P p, float v) {
    uint16_t assumed = 0;
    for (;;) {
        uint16_t old = sptir_cas16(p, assumed, sptir_f2bf(sptir_bf2f(assumed) + v));
        if (old == assumed) return;
        assumed = old;
    }
}

"#;

/// The C prelude's 16-bit float part.
pub(super) fn c_prelude() -> String {
    format!("#define SPTIR_HFN static inline\n{C_HW_CONVERSIONS}{HALF_HELPERS}")
}

/// On x86 machines with F16C (`-march=native` sets `__F16C__`), float16 conversions are the
/// hardware's (`vcvtph2ps`, `vcvtps2ph` rounding to nearest even, subnormals kept): the same
/// values as the software versions, which the CUDA emulator still compiles. bfloat16 keeps the
/// software rounding (AVX-512 BF16's conversion flushes subnormals).
const C_HW_CONVERSIONS: &str = r#"#if defined(__F16C__)
#include <immintrin.h>
#define SPTIR_HW_CVT 1
SPTIR_HFN float sptir_h2f(uint16_t h) { return _cvtsh_ss(h); }
SPTIR_HFN uint16_t sptir_f2h(float f) { return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }
#endif
"#;

/// The widening loads of the C writer's vector loops (see the module comment): at the width
/// of the machine vector (`sptir_vld_f16`/`sptir_vld_bf16`, `sptir_v_f32` from
/// `vector::VECTOR_PRELUDE`) when `machine`, and at each lane width in `lanes`
/// (`sptir_wld{N}_f16`/`_bf16`, `sptir_v{N}_f32` from the lane typedefs), for the 16-bit types
/// in `dtypes`.
pub(super) fn widen_prelude(machine: bool, lanes: &[i64], dtypes: &[DType]) -> String {
    let mut out = String::from(
        "/* Widening loads: 16-bit floats (bit patterns) read into a vector of floats (exact). */\n\
         #if defined(__F16C__) || defined(__AVX2__)\n#include <immintrin.h>\n#endif\n",
    );
    let has = |d: DType| dtypes.contains(&d);
    if has(DType::BF16) {
        // bfloat16 to float: the 16 bits above 16 zero bits.
        out.push_str(
            "#if defined(__AVX512F__)\n\
             static inline __m512i sptir_bf16x16(__m256i v) { return _mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16); }\n\
             #endif\n\
             #if defined(__AVX2__)\n\
             static inline __m256i sptir_bf8(__m128i v) { return _mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16); }\n\
             #endif\n",
        );
    }
    if machine {
        out.push_str(
            "typedef uint16_t sptir_vh_u16 __attribute__((vector_size(SPTIR_VBYTES / 2), aligned(2), may_alias));\n\
             typedef uint32_t sptir_v_u32 __attribute__((vector_size(SPTIR_VBYTES), aligned(4)));\n",
        );
        if has(DType::BF16) {
            out.push_str(
                "static inline sptir_v_f32 sptir_vld_bf16(const uint16_t* p) {\n\
                 #if defined(__AVX512F__)\n\
                 \x20   return (sptir_v_f32)sptir_bf16x16(_mm256_loadu_si256((const __m256i*)p));\n\
                 #elif defined(__AVX2__)\n\
                 \x20   return (sptir_v_f32)sptir_bf8(_mm_loadu_si128((const __m128i*)p));\n\
                 #else\n\
                 \x20   return (sptir_v_f32)(__builtin_convertvector(*(const sptir_vh_u16*)p, sptir_v_u32) << 16);\n\
                 #endif\n}\n",
            );
        }
        if has(DType::F16) {
            out.push_str(
                "static inline sptir_v_f32 sptir_vld_f16(const uint16_t* p) {\n\
                 #if defined(__AVX512F__)\n\
                 \x20   return (sptir_v_f32)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)p));\n\
                 #elif defined(__F16C__)\n\
                 \x20   return (sptir_v_f32)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p));\n\
                 #else\n\
                 \x20   sptir_v_f32 r;\n\
                 \x20   for (int l = 0; l < SPTIR_VL_f32; ++l) r[l] = sptir_h2f(p[l]);\n\
                 \x20   return r;\n\
                 #endif\n}\n",
            );
        }
    }
    for &n in lanes {
        // Chunks of 16 (AVX-512) or 8 (AVX2, F16C) lanes converted by the machine's instructions
        // and copied into the lane vector (gcc keeps it in registers).
        let chunked = |w: i64, ty: &str, cvt: &str, load: &str| {
            format!(
                "    for (int c = 0; c < {n}; c += {w}) {{\n\
                 \x20       const {ty} x = {cvt}({load}((const void*)(p + c)));\n\
                 \x20       __builtin_memcpy((float*)&r + c, &x, {});\n\
                 \x20   }}\n",
                4 * w
            )
        };
        if has(DType::BF16) {
            out.push_str(&format!(
                "typedef uint16_t sptir_v{n}_u16 __attribute__((vector_size({}), aligned(2), may_alias));\n\
                 typedef uint32_t sptir_v{n}_u32 __attribute__((vector_size({})));\n\
                 static inline sptir_v{n}_f32 sptir_wld{n}_bf16(const uint16_t* p) {{\n",
                2 * n,
                4 * n
            ));
            let portable = format!(
                "    return (sptir_v{n}_f32)(__builtin_convertvector(*(const sptir_v{n}_u16*)p, sptir_v{n}_u32) << 16);\n"
            );
            if n % 8 == 0 {
                let avx2 = chunked(8, "__m256i", "sptir_bf8", "_mm_loadu_si128");
                let mut text = String::new();
                if n % 16 == 0 {
                    let avx512 = chunked(16, "__m512i", "sptir_bf16x16", "_mm256_loadu_si256");
                    text += &format!("#if defined(__AVX512F__)\n    sptir_v{n}_f32 r;\n{avx512}    return r;\n#elif");
                } else {
                    text += "#if";
                }
                text += &format!(" defined(__AVX2__)\n    sptir_v{n}_f32 r;\n{avx2}    return r;\n#else\n{portable}#endif\n");
                out.push_str(&text);
            } else {
                out.push_str(&portable);
            }
            out.push_str("}\n");
        }
        if has(DType::F16) {
            out.push_str(&format!(
                "static inline sptir_v{n}_f32 sptir_wld{n}_f16(const uint16_t* p) {{\n    sptir_v{n}_f32 r;\n"
            ));
            let scalar = format!("    for (int l = 0; l < {n}; ++l) r[l] = sptir_h2f(p[l]);\n");
            let f16c = match n {
                _ if n % 8 == 0 => chunked(8, "__m256", "_mm256_cvtph_ps", "_mm_loadu_si128"),
                _ => chunked(4, "__m128", "_mm_cvtph_ps", "_mm_loadl_epi64"),
            };
            if n % 16 == 0 {
                let avx512 = chunked(16, "__m512", "_mm512_cvtph_ps", "_mm256_loadu_si256");
                out.push_str(&format!(
                    "#if defined(__AVX512F__)\n{avx512}#elif defined(__F16C__)\n{f16c}#else\n{scalar}#endif\n"
                ));
            } else if n >= 4 {
                out.push_str(&format!(
                    "#if defined(__F16C__)\n{f16c}#else\n{scalar}#endif\n"
                ));
            } else {
                out.push_str(&scalar);
            }
            out.push_str("    return r;\n}\n");
        }
    }
    out.push('\n');
    out
}

/// The narrowing stores of the C writer's machine-width vector loops: a vector of `float`s
/// rounded to 16 bits and stored at `p` (`sptir_vst_f16`, `sptir_vst_bf16`), for the types in
/// `dtypes`. float16 rounds as `sptir_f2h` does (to nearest even, subnormals kept: `vcvtps2ph`
/// with AVX-512 or F16C, the scalar helper elsewhere); bfloat16 with the same integer steps
/// as `sptir_f2bf`, lane by lane in vector arithmetic.
pub(super) fn narrow_prelude(dtypes: &[DType]) -> String {
    let mut out = String::from(
        "/* Narrowing stores: a vector of floats rounded to 16-bit patterns (round to nearest even). */\n\
         #if defined(__F16C__) || defined(__AVX512F__)\n#include <immintrin.h>\n#endif\n\
         typedef uint16_t sptir_vn_u16 __attribute__((vector_size(SPTIR_VBYTES / 2), aligned(2), may_alias));\n\
         typedef uint32_t sptir_vn_u32 __attribute__((vector_size(SPTIR_VBYTES)));\n\
         typedef int32_t sptir_vn_i32 __attribute__((vector_size(SPTIR_VBYTES)));\n",
    );
    if dtypes.contains(&DType::F16) {
        out.push_str(
            "static inline void sptir_vst_f16(uint16_t* p, sptir_v_f32 v) {\n\
             #if defined(__AVX512F__)\n\
             \x20   _mm256_storeu_si256((__m256i*)p, _mm512_cvtps_ph((__m512)v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));\n\
             #elif defined(__F16C__)\n\
             \x20   _mm_storeu_si128((__m128i*)p, _mm256_cvtps_ph((__m256)v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));\n\
             #else\n\
             \x20   for (int l = 0; l < SPTIR_VL_f32; ++l) p[l] = sptir_f2h(v[l]);\n\
             #endif\n}\n",
        );
    }
    if dtypes.contains(&DType::BF16) {
        out.push_str(
            "static inline void sptir_vst_bf16(uint16_t* p, sptir_v_f32 v) {\n\
             \x20   const sptir_vn_u32 x = (sptir_vn_u32)v;\n\
             \x20   const sptir_vn_i32 nan = (x & 0x7fffffffu) > 0x7f800000u;\n\
             \x20   const sptir_vn_u32 r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;\n\
             \x20   const sptir_vn_u32 q = (x >> 16) | 0x40u;\n\
             \x20   const sptir_vn_u32 bits = (r & ~(sptir_vn_u32)nan) | (q & (sptir_vn_u32)nan);\n\
             \x20   *(sptir_vn_u16*)p = __builtin_convertvector(bits, sptir_vn_u16);\n}\n",
        );
    }
    out.push('\n');
    out
}
