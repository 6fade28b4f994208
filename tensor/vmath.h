/*
 * tensor/vmath.h (internal): f32 exp, tanh and erf written so that GCC vectorises
 * the loops that call them (`omp simd` loops in tensor/elementwise_kernels.c and
 * nn/attention.c), without -ffast-math: branch-free, no libm call, integer
 * bit tricks for 2^n and for the selects that -ftrapping-math would
 * otherwise keep scalar. libm's expf/tanhf are scalar calls and were most of
 * a GPT training step's time (GELU-tanh forward and backward).
 *
 * Accuracy (tests/test_vmath.c checks it against libm in double over the
 * whole float range, including subnormals, +-inf and NaN):
 *   lt__vexpf:  <= 2 ulp; exact 0 below -103.98, +inf above 88.73, NaN kept;
 *               subnormal results are computed (not flushed).
 *   lt__vtanhf: <= 2 ulp; odd, tanh(+-inf) = +-1, tanh(-0) = -0, NaN kept.
 *   lt__vsigmoidf: 1 / (1 + exp(-x)), <= 3 ulp (subnormal results
 *               included), never NaN for finite x.
 *   lt__verff:  <= 3 ulp; odd, erf(+-inf) = +-1, erf(-0) = -0, NaN kept
 *               (the erf GELU and its derivative, tensor/elementwise_kernels.c).
 * And on AVX-512, 16 lanes at once: lt__vexpf16 (<= 2 ulp, FMA, not
 * lt__vexpf's bits), lt__vexpf16_exact (lt__vexpf's bits) and
 * lt__verff16_exact (lt__verff's bits).
 *
 * What this is not: an f64 library. f64 kernels keep libm (they serve
 * gradient checks and references, where accuracy matters more than speed).
 */
#ifndef LT_VMATH_H
#define LT_VMATH_H

#include "tensor/cpu_internal.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t lt__f2u(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}
static inline float lt__u2f(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

/* e^x. Clamp x to [-104, 89] (by bits: NaN stays NaN), reduce x = n ln2 + r
 * with |r| <= ln2/2 (Cody-Waite, ln2 in two parts), e^r by its degree-7
 * Taylor polynomial (truncation < 6e-9 relative), and scale by 2^n as two
 * factors 2^(n/2) 2^(n - n/2) so that results down to the subnormals and up
 * to overflow come out right. */
static inline float lt__vexpf(float x) {
  const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
  uint32_t xb = lt__f2u(x);
  /* x < -104 (including -inf): negative floats above -104's bits. */
  const uint32_t lo = 0xC2D00000u, hi = 0x42B20000u; /* -104.0f, 89.0f */
  const uint32_t below = 0u - (uint32_t)(xb > lo && xb <= 0xFF800000u);
  const uint32_t above = 0u - (uint32_t)(xb > hi && xb <= 0x7F800000u);
  xb = (xb & ~below) | (lo & below);
  xb = (xb & ~above) | (hi & above);
  const float xc = lt__u2f(xb);
  const float nm = xc * 1.44269504088896341f + magic, n = nm - magic;
  float r = xc - n * 0.693145751953125f;
  r = r - n * 1.42860682030941723212e-6f;
  float q = 1.0f / 5040.0f;
  q = q * r + 1.0f / 720.0f;
  q = q * r + 1.0f / 120.0f;
  q = q * r + 1.0f / 24.0f;
  q = q * r + 1.0f / 6.0f;
  q = q * r + 0.5f;
  q = q * r + 1.0f;
  q = q * r + 1.0f;
  /* n (in -150..129) sits in the low mantissa bits of nm. */
  const int32_t ni = (int32_t)(lt__f2u(nm) - 0x4B400000u);
  const int32_t n1 = ni >> 1, n2 = ni - n1; /* each in -75..65 */
  const float s1 = lt__u2f((uint32_t)(n1 + 127) << 23), s2 = lt__u2f((uint32_t)(n2 + 127) << 23);
  return q * s1 * s2;
}

/* tanh(x): |x| < 0.625 by x + x^3 P(x^2) (P of degree 4, fitted for relative
 * error, 0.73 ulp in float), else sign(x) (1 - 2 / (e^(2|x|) + 1)) (no
 * cancellation there: the subtracted term is at most 0.45). Both are
 * computed and the result selected by bits. */
static inline float lt__vtanhf(float x) {
  const uint32_t xb = lt__f2u(x), sign = xb & 0x80000000u;
  const float a = lt__u2f(xb & 0x7FFFFFFFu);
  const float z = x * x;
  float p = -0.005706078372895718f;
  p = p * z + 0.020639989525079727f;
  p = p * z - 0.05373996123671532f;
  p = p * z + 0.13331444561481476f;
  p = p * z - 0.3333328068256378f;
  const float small = lt__u2f(lt__f2u(a + a * z * p) | sign); /* -0 stays -0 */
  const float e = lt__vexpf(2.0f * a);
  const float big = lt__u2f(lt__f2u(1.0f - 2.0f / (e + 1.0f)) | sign);
  const uint32_t use_small = 0u - (uint32_t)((xb & 0x7FFFFFFFu) < 0x3F200000u); /* |x| < 0.625 */
  return lt__u2f((lt__f2u(small) & use_small) | (lt__f2u(big) & ~use_small));
}

/* 1 / (1 + e^-x) without overflow: z = e^-|x|, r = 1 / (1 + z), then r for
 * x >= 0 and z r = 1 - r (without its cancellation) for x < 0, selected by
 * the sign bit (-0 gives 0.5, NaN stays NaN). */
static inline float lt__vsigmoidf(float x) {
  const uint32_t xb = lt__f2u(x);
  const float z = lt__vexpf(-lt__u2f(xb & 0x7FFFFFFFu));
  const float r = 1.0f / (1.0f + z), zr = z * r;
  const uint32_t neg = 0u - (xb >> 31);
  return lt__u2f((lt__f2u(zr) & neg) | (lt__f2u(r) & ~neg));
}

/* erf(x): |x| < 0.921875 by x P(x^2) (P of degree 6, fitted for relative
 * error), else sign(x) (1 - e^(-x^2) R(|x| - 0.921875)), where R (degree 10,
 * fitted to erfc(x) e^(x^2) on [0.921875, 3.925]) is evaluated at |x|
 * clamped to 3.925 (beyond, erfc(x) < 2^-26 and the result rounds to 1).
 * The errors of e^(-x^2) and R are scaled down by erfc <= 0.2 against a
 * result near 1. Both branches are computed and selected by bits; NaN is
 * never clamped, so it propagates. Coefficients: least squares on Chebyshev
 * nodes, by tools/fit_erf.py. */
/* The coefficients of lt__verff's two polynomials, highest degree first:
 * P (erf(x) / x in x^2, |x| < 0.921875) and R (erfc(x) e^(x^2) in
 * |x| - 0.921875). Shared by the scalar and the 16-lane form. */
static const float lt__erf_p[7] = {8.438100485363975e-05f, -0.0008160604629665613f, 0.005202817264944315f,
                                   -0.026860231533646584f, 0.11283713579177856f,   -0.37612634897232056f,
                                   1.128379225730896f};
static const float lt__erf_r[11] = {2.097428932756884e-06f, -3.9388523873640224e-05f, 0.0003365884767845273f,
                                    -0.0017611319199204445f, 0.0064722029492259026f,  -0.01838773488998413f,
                                    0.04366926848888397f,    -0.0916784480214119f,    0.17433209717273712f,
                                    -0.29885333776474f,      0.44990965723991394f};

static inline float lt__verff(float x) {
  const uint32_t xb = lt__f2u(x), sign = xb & 0x80000000u, ab = xb & 0x7FFFFFFFu;
  const float z = x * x;
  float p = lt__erf_p[0];
#pragma GCC unroll 8
  for (int i = 1; i < 7; i++) p = p * z + lt__erf_p[i];
  const float small = x * p; /* -0 stays -0 */
  const uint32_t hib = 0x407B3333u; /* 3.925f */
  const uint32_t clamp = 0u - (uint32_t)(ab > hib && ab <= 0x7F800000u);
  const float t = lt__u2f((ab & ~clamp) | (hib & clamp)) - 0.921875f;
  float r = lt__erf_r[0];
#pragma GCC unroll 12
  for (int i = 1; i < 11; i++) r = r * t + lt__erf_r[i];
  const float big = lt__u2f(lt__f2u(1.0f - lt__vexpf(-z) * r) | sign);
  const uint32_t use_small = 0u - (uint32_t)(ab < 0x3F6C0000u); /* |x| < 0.921875 */
  return lt__u2f((lt__f2u(small) & use_small) | (lt__f2u(big) & ~use_small));
}

/* e^x on 16 floats at once (AVX-512), for row loops where exp is the
 * largest cost (the fused attention's softmax rows, docs/attention.md): the
 * method of lt__vexpf with the hardware's help, about 15 vector operations
 * where gcc's vectorisation of lt__vexpf takes 33 and only 8 lanes wide.
 * x clamped to [-104, 89] (max/min keep NaN), n = round(x log2 e), r = x - n
 * ln2 (Cody-Waite, by FMA), e^r by the same degree-7 Taylor polynomial in
 * FMA (Horner), and 2^n applied by vscalefps, one rounding (subnormal
 * results right, overflow to +inf). <= 2 ulp like lt__vexpf, but not its
 * bits (FMA rounds once where lt__vexpf rounds twice): tests/test_vmath.c
 * sweeps it against libm and checks the specials. Callable only from
 * functions compiled for AVX-512 (LT__VEXP16_TARGET); LT__HAVE_VEXP16 says
 * whether this compiler has it, lt__cpu_avx512() whether the CPU does. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LT__HAVE_VEXP16 1
#include <immintrin.h>
#define LT__VEXP16_TARGET __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,fma,avx2")))
static inline bool lt__cpu_avx512(void) { return lt__cpu()->avx512; } /* tensor/cpu_internal.h */
/* The one body of lt__vexpf16 (fused: each multiply-add one FMA) and
 * lt__vexpf16_exact (not fused: a multiply then an add, lt__vexpf's two
 * roundings); fused is a constant at both call sites. */
LT__VEXP16_TARGET static inline __m512 lt__vexpf16_body(__m512 x, const bool fused) {
#define LT__VX_MADD(a, b, c) (fused ? _mm512_fmadd_ps(a, b, c) : _mm512_add_ps(_mm512_mul_ps(a, b), c))
#define LT__VX_NMADD(a, b, c) (fused ? _mm512_fnmadd_ps(a, b, c) : _mm512_sub_ps(c, _mm512_mul_ps(a, b)))
  /* max/min return their second operand when either is NaN: x, so NaN stays */
  x = _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = LT__VX_NMADD(n, _mm512_set1_ps(0.693145751953125f), x);
  r = LT__VX_NMADD(n, _mm512_set1_ps(1.42860682030941723212e-6f), r);
  __m512 q = _mm512_set1_ps(1.0f / 5040.0f);
  q = LT__VX_MADD(q, r, _mm512_set1_ps(1.0f / 720.0f));
  q = LT__VX_MADD(q, r, _mm512_set1_ps(1.0f / 120.0f));
  q = LT__VX_MADD(q, r, _mm512_set1_ps(1.0f / 24.0f));
  q = LT__VX_MADD(q, r, _mm512_set1_ps(1.0f / 6.0f));
  q = LT__VX_MADD(q, r, _mm512_set1_ps(0.5f));
  q = LT__VX_MADD(q, r, _mm512_set1_ps(1.0f));
  q = LT__VX_MADD(q, r, _mm512_set1_ps(1.0f));
#undef LT__VX_MADD
#undef LT__VX_NMADD
  return _mm512_scalef_ps(q, n);
}
LT__VEXP16_TARGET static inline __m512 lt__vexpf16(__m512 x) { return lt__vexpf16_body(x, true); }

/* lt__vexpf on 16 floats with lt__vexpf's bits (for every input but NaN,
 * which stays NaN with perhaps another payload): its operations in its
 * order, without FMA, where the bit tricks that gcc vectorises into about 15
 * integer operations become three instructions of the same result: the
 * clamp is max/min (NaN passes), n = round(x log2 e) is vrndscaleps (the
 * magic-number rounding is round-to-nearest-even too), and q 2^(n/2)
 * 2^(n - n/2), whose first product is exact (q 2^(n/2) is never below the
 * normal range), is q 2^n rounded once: vscalefps. For kernels whose results
 * must not change with the CPU (GELU-tanh forward and backward,
 * tensor/elementwise_kernels.c); lt__vexpf16 is the faster one where bits may
 * differ. tests/test_vmath.c compares the two bit for bit. */
LT__VEXP16_TARGET static inline __m512 lt__vexpf16_exact(__m512 x) { return lt__vexpf16_body(x, false); }

/* lt__verff on 16 floats with lt__verff's bits (NaN stays NaN, perhaps with
 * another payload): its operations in its order, a multiply then an add
 * (no FMA), lt__vexpf16_exact for its exp, and its bit selections as
 * vector ones: the clamp of |x| to 3.925 is a min (NaN passes: min returns
 * its second operand when either is NaN, as the bit test leaves NaN
 * unclamped), the branch a compare of |x|'s bits. gcc does not vectorise
 * lt__verff inside the GELU loops (it calls it, one float at a time, and
 * the erf GELU is a large share of a decoder step (figures: docs/mixed-precision.md, "Figures behind the code's rules")); tests/test_vmath.c compares the two bit for bit
 * over every 251st float. */
LT__VEXP16_TARGET static inline __m512 lt__verff16_exact(__m512 x) {
  const __m512i xb = _mm512_castps_si512(x);
  const __m512i sign = _mm512_and_si512(xb, _mm512_set1_epi32((int)0x80000000u));
  const __m512i ab = _mm512_and_si512(xb, _mm512_set1_epi32(0x7FFFFFFF));
  const __m512 z = _mm512_mul_ps(x, x);
  __m512 p = _mm512_set1_ps(lt__erf_p[0]);
#pragma GCC unroll 8
  for (int i = 1; i < 7; i++) p = _mm512_add_ps(_mm512_mul_ps(p, z), _mm512_set1_ps(lt__erf_p[i]));
  const __m512 small = _mm512_mul_ps(x, p);
  const __m512 t = _mm512_sub_ps(_mm512_min_ps(_mm512_set1_ps(3.925f), _mm512_castsi512_ps(ab)),
                                 _mm512_set1_ps(0.921875f));
  __m512 r = _mm512_set1_ps(lt__erf_r[0]);
#pragma GCC unroll 12
  for (int i = 1; i < 11; i++) r = _mm512_add_ps(_mm512_mul_ps(r, t), _mm512_set1_ps(lt__erf_r[i]));
  const __m512 e = lt__vexpf16_exact(_mm512_xor_ps(z, _mm512_set1_ps(-0.0f))); /* -z */
  const __m512 big = _mm512_castsi512_ps(
      _mm512_or_si512(_mm512_castps_si512(_mm512_sub_ps(_mm512_set1_ps(1.0f), _mm512_mul_ps(e, r))), sign));
  const __mmask16 use_small = _mm512_cmplt_epi32_mask(ab, _mm512_set1_epi32(0x3F6C0000)); /* |x| < 0.921875 */
  return _mm512_mask_blend_ps(use_small, big, small);
}
#endif

#endif /* LT_VMATH_H */
