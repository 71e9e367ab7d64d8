//! Lane-wise math of the C writer's vector loops: `T.exp` of `float` vectors, float
//! `max`/`min` of vectors and selects on a float comparison (`T.Select(x < y, a, b)`), as small
//! inline helpers named after the vector type (`sptir_v_f32_exp`, `sptir_v16_f32_max`,
//! `sptir_v_f32_sel_lt`, ...) written into the module's head.
//!
//! A select computes both of its values in every lane, which the scalar `?:` does not; the
//! vector loop admits one only where neither value reads memory or divides (`Writer::classify`),
//! so that evaluating the value the scalar form skips can neither fault nor trap.
//!
//! Why not the C library: `expf` is a call per element that gcc does not vectorise without
//! `-ffast-math` (which also licenses reassociation everywhere), and glibc's vector variants
//! (libmvec) exist only with glibc, at x86 widths. The helper here is branch-free GCC/Clang
//! vector code, so one definition serves every width and machine, and a softmax or an
//! attention's probabilities stay in the vector schedule.
//!
//! Accuracy of the exponential: under one ulp of `exp` computed in double. Measured over every
//! 7th bit pattern of `float`, the worst was 0.99 ulp; glibc's `expf` measured 0.502 ulp, so
//! the two may differ by an ulp. The test `the_vector_exponential_is_within_one_ulp` checks
//! 2^18 inputs across every binade on each machine build. Special values are exact:
//! `exp(NaN)` is NaN, `exp(+inf)` and anything above 88.7228 is `+inf`, `exp(-inf)` and
//! anything below -103.98 is 0, results between are rounded once into the subnormals.
//! Method: `x = n ln2 + r` with `n` rounded to nearest (the 1.5·2^23 trick, which also
//! yields `n` as an integer bit pattern), `ln2` in two parts (Cody and Waite) so that `n ln2`
//! is exact for every `n` in range, `e^r` on `|r| <= ln2/2` by a degree-7 polynomial
//! (Cephes' `expf` coefficients), and `2^n` applied as two powers `2^(n/2)` built from their
//! exponent bits, so that neither overflows before the result does.

use std::collections::BTreeSet;

use sparsetir_ir::{BinOp, DType, Expr};

use super::vector::Class;
use super::Writer;

/// A lane-wise helper of the vector loops.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum VMath {
    /// `e^x` of `float` lanes.
    Exp,
    /// Lane-wise `fmax`: a NaN lane gives the other operand's lane.
    Max,
    /// Lane-wise `fmin`: a NaN lane gives the other operand's lane.
    Min,
    /// `T.Select(x CMP y, a, b)` lane-wise for a comparison operator (`BinOp::is_comparison`:
    /// its script symbol is its C operator), with
    /// IEEE comparisons (a NaN compares unequal to everything).
    Select(BinOp),
}

impl VMath {
    /// The helper of a float `max`/`min` (`None` for other operators).
    pub(super) fn extreme(op: BinOp) -> Option<VMath> {
        match op {
            BinOp::Max => Some(VMath::Max),
            BinOp::Min => Some(VMath::Min),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            VMath::Exp => "exp",
            VMath::Max => "max",
            VMath::Min => "min",
            VMath::Select(BinOp::Eq) => "sel_eq",
            VMath::Select(BinOp::Ne) => "sel_ne",
            VMath::Select(BinOp::Lt) => "sel_lt",
            VMath::Select(BinOp::Le) => "sel_le",
            VMath::Select(BinOp::Gt) => "sel_gt",
            VMath::Select(_) => "sel_ge",
        }
    }
}

/// The helpers the module used, as (C vector type, element type, helper).
pub(super) type VMathUses = BTreeSet<(String, DType, VMath)>;

/// The C name of helper `fun` of vector type `ty`.
pub(super) fn helper_name(ty: &str, fun: VMath) -> String {
    format!("{ty}_{}", fun.name())
}

/// The definitions of the helpers in `uses`, for the module's head (after the vector types).
pub(super) fn prelude(uses: &VMathUses) -> String {
    let mut out = String::new();
    if uses.is_empty() {
        return out;
    }
    out.push_str("/* Lane-wise math of the vector loops (see the C writer's vector_math.rs). */\n");
    out.push_str("#if defined(__AVX512F__)\n#include <immintrin.h>\n#endif\n");
    let mut masked = BTreeSet::new();
    for (ty, dt, fun) in uses {
        // Vector comparisons give lanes of all ones or zeros of the signed integer type of the
        // element's width; `sel(m, a, b)` takes `a`'s lanes where `m` is set. Casts between
        // vector types of one size reinterpret the bits.
        if masked.insert(ty.clone()) {
            let (int, uint) = if *dt == DType::F64 {
                ("int64_t", "uint64_t")
            } else {
                ("int32_t", "uint32_t")
            };
            out.push_str(&format!(
                "typedef {int} {ty}_i __attribute__((vector_size(sizeof({ty}))));\n\
                 typedef {uint} {ty}_u __attribute__((vector_size(sizeof({ty}))));\n"
            ));
        }
        let sel = |m: &str, a: &str, b: &str| {
            format!("({ty})((({ty}_i){a} & {m}) | (({ty}_i){b} & ~{m}))")
        };
        let name = helper_name(ty, *fun);
        match fun {
            VMath::Max | VMath::Min => {
                let cmp = if *fun == VMath::Max { ">=" } else { "<=" };
                let generic = format!(
                    "\x20   const {ty}_i m = (a {cmp} b) | (b != b);\n\
                     \x20   return {};\n",
                    sel("m", "a", "b")
                );
                // 16 floats under AVX-512: `vmaxps(b, a)` is `b > a ? b : a`, the same lanes
                // as the generic form wherever `a` is not NaN (a NaN `b` gives `a`; equal
                // lanes, signed zeros included, give `a`); a NaN `a` then takes `b`. Three
                // instructions for the generic form's seven, in a loop-carried chain.
                let wide = *dt == DType::F32 && (ty == "sptir_v_f32" || ty == "sptir_v16_f32");
                let body = if wide {
                    let op = if *fun == VMath::Max { "max" } else { "min" };
                    format!(
                        "#if defined(__AVX512F__)\n\
                         \x20   const __m512 t = _mm512_{op}_ps((__m512)b, (__m512)a);\n\
                         \x20   return ({ty})_mm512_mask_mov_ps(t, \
                         _mm512_cmp_ps_mask((__m512)a, (__m512)a, _CMP_UNORD_Q), (__m512)b);\n\
                         #else\n{generic}#endif\n"
                    )
                } else {
                    generic
                };
                out.push_str(&format!(
                    "static inline {ty} {name}({ty} a, {ty} b) {{\n{body}}}\n"
                ));
            }
            VMath::Select(op) => {
                out.push_str(&format!(
                    "static inline {ty} {name}({ty} x, {ty} y, {ty} a, {ty} b) {{\n\
                     \x20   const {ty}_i m = x {} y;\n\
                     \x20   return {};\n}}\n",
                    op.symbol().unwrap_or(">="),
                    sel("m", "a", "b")
                ));
            }
            VMath::Exp => {
                out.push_str(&format!(
                    "static inline {ty} {name}({ty} x) {{\n\
                     \x20   const {ty} zero = {{0}};\n\
                     \x20   const {ty} lo = zero - 104.0f, hi = zero + 89.0f;\n\
                     \x20   const {ty} magic = zero + 12582912.0f; /* 1.5 * 2^23 */\n\
                     \x20   {ty}_i m = x < lo;\n\
                     \x20   x = {};\n\
                     \x20   m = x > hi;\n\
                     \x20   x = {};\n\
                     \x20   const {ty} t = x * 1.44269504088896341f + magic;\n\
                     \x20   const {ty} n = t - magic;\n\
                     \x20   const {ty}_u ni = ({ty}_u)t - ({ty}_u)magic;\n\
                     \x20   const {ty} r = (x - n * 0.693359375f) + n * 2.12194440e-4f;\n\
                     \x20   {ty} p = zero + 1.9875691500e-4f;\n\
                     \x20   p = p * r + 1.3981999507e-3f;\n\
                     \x20   p = p * r + 8.3334519073e-3f;\n\
                     \x20   p = p * r + 4.1665795894e-2f;\n\
                     \x20   p = p * r + 1.6666665459e-1f;\n\
                     \x20   p = p * r + 5.0000001201e-1f;\n\
                     \x20   const {ty} y = p * r * r + r + 1.0f;\n\
                     \x20   const {ty}_u n1 = ({ty}_u)(({ty}_i)ni >> 1);\n\
                     \x20   const {ty}_u n2 = ni - n1;\n\
                     \x20   return y * ({ty})((n1 + 127u) << 23) * ({ty})((n2 + 127u) << 23);\n}}\n",
                    sel("m", "lo", "x"),
                    sel("m", "hi", "x"),
                ));
            }
        }
    }
    out.push('\n');
    out
}

/// The start of a reduction's vector of lanes of type `ty`: 0 for `+`, NaN for float
/// `max`/`min` (which ignore it).
pub(super) fn lane_identity(op: BinOp, ty: &str, dt: DType) -> String {
    match op {
        BinOp::Add => "{0}".to_string(),
        _ if dt == DType::F64 => format!("({ty}){{0}} + (double)NAN"),
        _ => format!("({ty}){{0}} + NAN"),
    }
}

impl Writer<'_> {
    /// Two vectors of a reduction's lanes (type `ty`) combined: `a + b`, or the lane-wise
    /// `max`/`min` helper (recorded for the module's head).
    pub(super) fn lane_combine(
        &mut self,
        op: BinOp,
        ty: &str,
        dt: DType,
        a: &str,
        b: &str,
    ) -> String {
        match VMath::extreme(op) {
            Some(fun) => {
                self.vector_math.insert((ty.to_string(), dt, fun));
                format!("{}({a}, {b})", helper_name(ty, fun))
            }
            None => format!("{a} + {b}"),
        }
    }

    /// In a vector loop: the C call of helper `fun` on the operands `args` (their C texts in
    /// `texts`), uniform operands broadcast, when some operand is a vector; `None` outside
    /// vector loops, when every operand is uniform (the scalar form applies) or the helper
    /// does not exist for the loop's element type.
    pub(super) fn vector_math(
        &mut self,
        fun: VMath,
        args: &[&Expr],
        texts: &[String],
    ) -> Option<String> {
        let vl = self.vec_loop.as_ref()?;
        let dtype = vl.dtype();
        if fun == VMath::Exp && dtype != DType::F32 {
            return None;
        }
        // Inside a lane reduction's vector loop the reduced element is the vector accumulator.
        let is_acc = |e: &Expr| {
            matches!((e, &self.simd_acc), (Expr::Load { buffer, indices }, Some(acc))
                if acc.buffer == *buffer && acc.indices == *indices)
        };
        let classes: Vec<Option<Class>> = args
            .iter()
            .map(|a| {
                if is_acc(a) {
                    Some(Class::Vector)
                } else {
                    self.classify(vl, a)
                }
            })
            .collect();
        if !classes.contains(&Some(Class::Vector)) {
            return None;
        }
        let ty = vl.c_type()?;
        let operands: Vec<String> = texts
            .iter()
            .zip(&classes)
            .map(|(t, c)| match c {
                Some(Class::Vector) => t.clone(),
                _ => format!("(({ty}){{0}} + {t})"),
            })
            .collect();
        let call = format!("{}({})", helper_name(&ty, fun), operands.join(", "));
        self.vector_math.insert((ty, dtype, fun));
        Some(call)
    }
}
