/*
 * tensor/softmax_internal.h: the softmax row kernel, in one place. Not
 * installed.
 *
 * Every softmax-shaped computation in the library (lt_softmax,
 * lt_log_softmax and their backward in tensor/softmax_ops.c, the fused
 * cross-entropy in nn/loss.c, the attention probabilities in nn/attention.c)
 * builds a contiguous row from these steps:
 *   m   = lt__row_max(x)                  max, NaN wins (propagates; vectorised
 *                                         over integer keys);
 *   s   = lt__row_sumexp(x, m)            sum of exp(x - m), in double;
 *   s   = lt__row_exp(x, m, y)            the same, storing y = exp(x - m);
 *   lse = m + log(s)                      (callers write this line);
 * plus the row sum and dot product a backward needs. exp is lt__exp_f32
 * (tensor/vmath.h's branch-free lt__vexpf, <= 2 ulp, so row loops vectorise;
 * exp(-inf) is exactly 0) and libm's exp for f64. Sums run in 8 double lanes
 * combined in one fixed order (LT__ROW_LANES_SUM), so a row's result never
 * depends on threads or on which caller computed it.
 *
 * What this is not: the strided logsumexp reduction (tensor/reduce.c walks
 * any dims; it uses lt__exp_* from here), or the masking of attention rows
 * (nn/attention.c applies masks first and treats a row without a finite
 * score itself).
 *
 * Static inline on purpose: the callers' loops (some compiled for several
 * instruction sets with target_clones) inline them.
 */
#ifndef LT_TENSOR_SOFTMAX_INTERNAL_H
#define LT_TENSOR_SOFTMAX_INTERNAL_H

#include "tensor/vmath.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float lt__exp_f32(float x) { return lt__vexpf(x); }
static inline double lt__exp_f64(double x) { return exp(x); }

/* max over x[0..n), NaN wins (any NaN gives NaN); -inf for n == 0. gcc
 * vectorises no float max without -ffinite-math-only, so the max is taken
 * over integer keys of the same order (the bits, with the magnitude bits
 * flipped for negative numbers: -inf < ... < -0 < +0 < ... < +inf), and a
 * second loop looks for NaN; both vectorise. The value is the same as a
 * plain comparison loop's (up to the sign of a zero). */
#define LT__ROW_MAX(NAME, T, I, MAG)                                    \
  static inline I lt__fkey_##NAME(I b) { return b ^ ((b >> (8 * (int)sizeof(I) - 1)) & (I)(MAG)); } \
  static inline T lt__row_max_##NAME(const T *x, int64_t n) {           \
    const T ninf = -INFINITY;                                           \
    I k, b;                                                             \
    memcpy(&b, &ninf, sizeof b);                                        \
    k = lt__fkey_##NAME(b);                                             \
    for (int64_t i = 0; i < n; i++) {                                   \
      memcpy(&b, x + i, sizeof b);                                      \
      const I key = lt__fkey_##NAME(b);                                 \
      k = key > k ? key : k;                                            \
    }                                                                   \
    int nan = 0;                                                        \
    for (int64_t i = 0; i < n; i++) nan |= x[i] != x[i];                \
    if (nan) return (T)NAN;                                             \
    b = lt__fkey_##NAME(k);                                             \
    T m;                                                                \
    memcpy(&m, &b, sizeof m);                                           \
    return m;                                                           \
  }
LT__ROW_MAX(f32, float, int32_t, 0x7fffffff)
LT__ROW_MAX(f64, double, int64_t, 0x7fffffffffffffffLL)
#undef LT__ROW_MAX

/* The fixed combination of 8 lanes. */
#define LT__ROW_LANES_SUM(a) ((((a)[0] + (a)[4]) + ((a)[1] + (a)[5])) + (((a)[2] + (a)[6]) + ((a)[3] + (a)[7])))

/* Each row loop runs in blocks of 8 lanes (element i + l goes to lane l) and
 * a tail whose element k goes to lane k. */
#define LT__ROW_KERNELS(NAME, T)                                                         \
  /* sum of exp(x[i] - m) over [0, n), in double. */                                     \
  static inline double lt__row_sumexp_##NAME(const T *x, T m, int64_t n) {               \
    double a[8] = {0};                                                                   \
    int64_t i = 0;                                                                       \
    for (; i + 8 <= n; i += 8)                                                           \
      for (int l = 0; l < 8; l++) a[l] += (double)lt__exp_##NAME(x[i + l] - m);          \
    for (int l = 0; i < n; i++, l++) a[l] += (double)lt__exp_##NAME(x[i] - m);           \
    return LT__ROW_LANES_SUM(a);                                                         \
  }                                                                                      \
  /* y[i] = exp(x[i] - m) over [0, n) (y may be x) and their sum in double.         \
   * Two loops: gcc vectorises each, not the fused one. */                             \
  static inline double lt__row_sum_##NAME(const T *x, int64_t n);                       \
  static inline double lt__row_exp_##NAME(const T *x, T m, T *y, int64_t n) {            \
    int64_t i = 0;                                                                       \
    for (; i + 8 <= n; i += 8)                                                           \
      for (int l = 0; l < 8; l++) y[i + l] = lt__exp_##NAME(x[i + l] - m);               \
    for (; i < n; i++) y[i] = lt__exp_##NAME(x[i] - m);                                  \
    return lt__row_sum_##NAME(y, n);                                                     \
  }                                                                                      \
  /* sum of x[0..n) in double. */                                                        \
  static inline double lt__row_sum_##NAME(const T *x, int64_t n) {                       \
    double a[8] = {0};                                                                   \
    int64_t i = 0;                                                                       \
    for (; i + 8 <= n; i += 8)                                                           \
      for (int l = 0; l < 8; l++) a[l] += (double)x[i + l];                              \
    for (int l = 0; i < n; i++, l++) a[l] += (double)x[i];                               \
    return LT__ROW_LANES_SUM(a);                                                         \
  }                                                                                      \
  /* sum of p[i] * q[i] over [0, n) in double. */                                        \
  static inline double lt__row_dot_##NAME(const T *p, const T *q, int64_t n) {           \
    double a[8] = {0};                                                                   \
    int64_t i = 0;                                                                       \
    for (; i + 8 <= n; i += 8)                                                           \
      for (int l = 0; l < 8; l++) a[l] += (double)p[i + l] * (double)q[i + l];           \
    for (int l = 0; i < n; i++, l++) a[l] += (double)p[i] * (double)q[i];                \
    return LT__ROW_LANES_SUM(a);                                                         \
  }
LT__ROW_KERNELS(f32, float)
LT__ROW_KERNELS(f64, double)
#undef LT__ROW_KERNELS

#ifdef LT__HAVE_VEXP16
/* lt__row_exp_f32 16 lanes at a time (AVX-512; callers check
 * lt__cpu_avx512() first): y = exp(x - m) by lt__vexpf16 (<= 2 ulp, not
 * lt__vexpf's bits), and their sum in double with lt__row_sum_f32's lanes
 * and order (element i of a block of 8 to lane i % 8, the tail's element k
 * to lane k), so a row's result depends on nothing but the row. */
LT__VEXP16_TARGET static inline double lt__row_exp_f32x16(const float *x, float m, float *y, int64_t n) {
  const __m512 mv = _mm512_set1_ps(m);
  __m512d acc = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 e = lt__vexpf16(_mm512_sub_ps(_mm512_loadu_ps(x + i), mv));
    _mm512_storeu_ps(y + i, e);
    acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    acc = _mm512_add_pd(acc, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
  }
  if (i < n) { /* 1..15 left: the first 8 a whole block, the rest the tail (lane k) */
    const int64_t left = n - i;
    const __mmask16 mk = (__mmask16)((1u << left) - 1);
    const __m512 e = lt__vexpf16(_mm512_sub_ps(_mm512_maskz_loadu_ps(mk, x + i), mv));
    _mm512_mask_storeu_ps(y + i, mk, e);
    acc = _mm512_mask_add_pd(acc, (__mmask8)mk, acc, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    if (left > 8) acc = _mm512_mask_add_pd(acc, (__mmask8)(mk >> 8), acc, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
  }
  double a[8];
  _mm512_storeu_pd(a, acc);
  return LT__ROW_LANES_SUM(a);
}
#endif

#endif /* LT_TENSOR_SOFTMAX_INTERNAL_H */
