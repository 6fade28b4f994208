/*
 * tests/test_vmath.c: the f32 approximations of tensor/vmath.h against libm in
 * double: the whole range, both signs, subnormals included, stratified (every
 * 61st float bit pattern where the code does its work, every 5917th
 * elsewhere: sweep_strat), the special values (+-0, +-inf,
 * NaN, the overflow and underflow edges), and the vectorised loop against the
 * scalar call (same bits); erf also on every 5th float of 0.5 <= |x| <= 4.5
 * (every float near its branch points).
 * Failures print the worst input with both values. lt__verff's coefficients
 * come from tools/fit_erf.py.
 */
#include <check.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tensor/softmax_internal.h" /* includes tensor/vmath.h */
#include "test_util.h"

/* Error of y in units in the last place of the float nearest to ref (a
 * subnormal ulp below 2^-126). */
static double ulp_err(float y, double ref) {
  if (isnan(ref)) return isnan(y) ? 0 : INFINITY;
  if (isnan(y)) return INFINITY;
  if (isinf(ref) || isinf(y)) return (double)y == ref ? 0 : INFINITY;
  const double a = fabs(ref);
  int e;
  frexp(a, &e); /* a in [2^(e-1), 2^e) */
  double ulp = ldexp(1.0, e - 24);
  if (ulp < ldexp(1.0, -149)) ulp = ldexp(1.0, -149);
  return fabs((double)y - ref) / ulp;
}

typedef float (*f32_fn)(float);
typedef double (*f64_fn)(double);

static double sigmoid_ref(double x) { return 1.0 / (1.0 + exp(-x)); }

/* The worst error of a sweep so far. */
typedef struct worst {
  double e;
  float x, y;
} worst;

/* Folds f against ref on the bit patterns b0, b0 + step, ... < b1 into *w.
 * Values within 2 ulp of FLT_MAX may overflow to inf (the true result rounds
 * to FLT_MAX): accepted. */
static void sweep_range(f32_fn f, f64_fn ref, uint64_t b0, uint64_t b1, uint64_t step, worst *w) {
  for (uint64_t b = b0; b < b1; b += step) {
    const float x = lt__u2f((uint32_t)b);
    const float y = f(x);
    const double r = ref((double)x);
    double e = ulp_err(y, r);
    if (isinf(y) && !isinf(r) && fabs(r) > 0x1.fffffcp127 * (1 - 0x1p-22)) e = 0;
    if (e > w->e) w->e = e, w->x = x, w->y = y;
  }
}

static void sweep_report(const worst *w, f64_fn ref, const char *name, double max_ulp) {
  ck_assert_msg(w->e <= max_ulp, "%s: %.3f ulp at x = %a (%.9g): got %a, libm %a", name, w->e, w->x, w->x, w->y,
                ref((double)w->x));
  printf("%s: max %.3f ulp\n", name, w->e);
}

/* Max ulp error of f against ref over the whole range, stratified: every
 * (61 * thin)th bit pattern where lo <= |x| <= hi, the range where f's code
 * does its work (about 2 to 5 million values), and every (61 * 97 * thin)th
 * elsewhere (0.7 million), both signs: there f saturates, is linear in x or
 * rounds to 1, overflows, or propagates NaN, and test_specials checks the
 * edges. The fine points are those of the former sweep of every 61st pattern
 * of the whole range (70 million values), and each function's worst case is
 * the same as that sweep's (exp 1.200, tanh 1.298, sigmoid 2.675, erf 2.493
 * ulp) with a twelfth to a twentieth of the CPU time (the four sweeps: 1 s
 * against 18 s in Release). */
static void sweep_strat(f32_fn f, f64_fn ref, const char *name, double max_ulp, float lo, float hi, uint64_t thin) {
  const uint64_t l = lt__f2u(lo), h = lt__f2u(hi), fine = 61 * thin, coarse = 61 * 97 * thin;
  worst w = {0};
  for (uint64_t sign = 0; sign <= 0x80000000u; sign += 0x80000000u) {
    sweep_range(f, ref, sign, sign + l, coarse, &w);
    sweep_range(f, ref, (sign + l) / fine * fine, sign + h + 1, fine, &w);
    sweep_range(f, ref, sign + h + 1, sign + 0x80000000u, coarse, &w);
  }
  sweep_report(&w, ref, name, max_ulp);
}

/* erf's checks are the newest and the longest; under the sanitizers (10x
 * slower) they take every 7th of those points, so that the test stays
 * within its time budget there (the Release build runs them all). */
#if defined(__SANITIZE_ADDRESS__)
#define ERF_THIN 7
#else
#define ERF_THIN 1
#endif

/* exp: below 2^-25 it rounds to 1; above 104 it overflows or underflows (the
 * subnormal results, from -87.3 down to -103.97, are in the fine range). */
START_TEST(test_exp_range) { sweep_strat(lt__vexpf, exp, "vexpf", 2.0, 0x1p-25f, 104.0f, 1); }
END_TEST

/* tanh: x to within rounding below 2^-13, +-1 above 9.02. */
START_TEST(test_tanh_range) { sweep_strat(lt__vtanhf, tanh, "vtanhf", 2.0, 0x1p-13f, 9.5f, 1); }
END_TEST

/* sigmoid: 1/2 to within rounding below 2^-25; 0 or 1 beyond 104. */
START_TEST(test_sigmoid_range) { sweep_strat(lt__vsigmoidf, sigmoid_ref, "vsigmoidf", 3.0, 0x1p-25f, 104.0f, 1); }
END_TEST

/* erf: its polynomials work on 2^-16 <= |x| <= 4.5; below, subnormals
 * included, erf(x) is x times 2/sqrt(pi) to within rounding, above it is
 * +-1. Every 5th float of [0.5, 4.5] is test_erf_dense's. (0.25 s of CPU
 * against 6.8 s for every 61st pattern in Release, 0.11 s against 1.9 s for
 * every 427th under ASan, with the same worst case.) */
START_TEST(test_erf_range) { sweep_strat(lt__verff, erf, "verff", 3.0, 0x1p-16f, 4.5f, ERF_THIN); }
END_TEST

/* erf on every 5th float of [0.5, 4.5] and of [-4.5, -0.5] (the tail where
 * the result reaches 1 included), on every float within 2^18 patterns of the
 * switch at 0.921875 and of the clamp at 3.925, and on tiny values (below
 * 2^-60 in magnitude, stepping by 2^16 patterns). */
START_TEST(test_erf_dense) {
  double worst = 0;
  float wx = 0;
  const uint32_t lo = lt__f2u(0.5f), hi = lt__f2u(4.5f), sw = lt__f2u(0.921875f), cl = lt__f2u(3.925f);
  for (uint32_t b = lo; b <= hi; b++) {
    const bool near = (b > sw - (1u << 18) && b < sw + (1u << 18)) || (b > cl - (1u << 18) && b < cl + (1u << 18));
    if (!near && b % 5) continue;
    if (b % ERF_THIN) continue;
    for (int s = 0; s < 2; s++) {
      const float x = lt__u2f(b | (s ? 0x80000000u : 0u));
      const double e = ulp_err(lt__verff(x), erf((double)x));
      if (e > worst) worst = e, wx = x;
    }
  }
  for (uint32_t b = 0; b < lt__f2u(0x1p-60f); b += 1u << 16) {
    const float x = lt__u2f(b);
    const double e = ulp_err(lt__verff(x), erf((double)x));
    if (e > worst) worst = e, wx = x;
  }
  ck_assert_msg(worst <= 3.0, "verff: %.3f ulp at x = %a: got %a, libm %a", worst, wx, lt__verff(wx), erf((double)wx));
  printf("verff dense: max %.3f ulp\n", worst);
}
END_TEST

static void same_bits(float got, float want, const char *what, float x) {
  ck_assert_msg(lt__f2u(got) == lt__f2u(want) || (isnan(got) && isnan(want)), "%s(%a): got %a, want %a", what, x,
                got, want);
}

/* exp's special values and edges, for lt__vexpf and the 16-lane lt__vexpf16. */
static void exp_specials(f32_fn f, const char *name) {
  const float inf = INFINITY, nan = NAN;
  same_bits(f(0.0f), 1.0f, name, 0.0f);
  same_bits(f(-0.0f), 1.0f, name, -0.0f);
  same_bits(f(inf), inf, name, inf);
  same_bits(f(-inf), 0.0f, name, -inf);
  same_bits(f(nan), nan, name, nan);
  same_bits(f(-nan), nan, name, -nan);
  same_bits(f(89.0f), inf, name, 89.0f);
  same_bits(f(1e30f), inf, name, 1e30f);
  same_bits(f(-104.0f), 0.0f, name, -104.0f);
  same_bits(f(-1e30f), 0.0f, name, -1e30f);
  same_bits(f(-103.9f), 0x1p-149f, name, -103.9f); /* the smallest subnormal */
  ck_assert_msg(f(-90.0f) > 0 && f(-90.0f) < 0x1p-126f, "%s(-90): not subnormal", name); /* not flushed */
  same_bits(f(1e-40f), 1.0f, name, 1e-40f);
  same_bits(f(1.0f), expf(1.0f), name, 1.0f);
}

START_TEST(test_specials) {
  const float inf = INFINITY, nan = NAN;
  exp_specials(lt__vexpf, "exp");

  same_bits(lt__vtanhf(0.0f), 0.0f, "tanh", 0.0f);
  same_bits(lt__vtanhf(-0.0f), -0.0f, "tanh", -0.0f);
  same_bits(lt__vtanhf(inf), 1.0f, "tanh", inf);
  same_bits(lt__vtanhf(-inf), -1.0f, "tanh", -inf);
  same_bits(lt__vtanhf(nan), nan, "tanh", nan);
  same_bits(lt__vtanhf(1e-40f), 1e-40f, "tanh", 1e-40f);
  same_bits(lt__vtanhf(-1e-40f), -1e-40f, "tanh", -1e-40f);
  same_bits(lt__vtanhf(20.0f), 1.0f, "tanh", 20.0f);
  same_bits(lt__vtanhf(-1e30f), -1.0f, "tanh", -1e30f);

  same_bits(lt__verff(0.0f), 0.0f, "erf", 0.0f);
  same_bits(lt__verff(-0.0f), -0.0f, "erf", -0.0f);
  same_bits(lt__verff(inf), 1.0f, "erf", inf);
  same_bits(lt__verff(-inf), -1.0f, "erf", -inf);
  same_bits(lt__verff(nan), nan, "erf", nan);
  same_bits(lt__verff(-nan), nan, "erf", -nan);
  same_bits(lt__verff(1e-40f), erff(1e-40f), "erf", 1e-40f);
  same_bits(lt__verff(4.0f), 1.0f, "erf", 4.0f);
  same_bits(lt__verff(-1e30f), -1.0f, "erf", -1e30f);
  same_bits(lt__verff(3.4e38f), 1.0f, "erf", 3.4e38f);

  same_bits(lt__vsigmoidf(0.0f), 0.5f, "sigmoid", 0.0f);
  same_bits(lt__vsigmoidf(-0.0f), 0.5f, "sigmoid", -0.0f);
  same_bits(lt__vsigmoidf(inf), 1.0f, "sigmoid", inf);
  same_bits(lt__vsigmoidf(-inf), 0.0f, "sigmoid", -inf);
  same_bits(lt__vsigmoidf(nan), nan, "sigmoid", nan);
  same_bits(lt__vsigmoidf(-1e30f), 0.0f, "sigmoid", -1e30f);
  ck_assert(lt__vsigmoidf(-95.0f) > 0 && lt__vsigmoidf(-95.0f) < 0x1p-126f); /* subnormal */
}
END_TEST

/* The vectorised loop (as elementwise.c and attention.c run it) gives the
 * same bits as one call at a time. */
static void vloop_exp(float *restrict o, const float *restrict x, int n) {
#pragma omp simd
  for (int i = 0; i < n; i++) o[i] = lt__vexpf(x[i]);
}
static void vloop_tanh(float *restrict o, const float *restrict x, int n) {
#pragma omp simd
  for (int i = 0; i < n; i++) o[i] = lt__vtanhf(x[i]);
}
static void vloop_erf(float *restrict o, const float *restrict x, int n) {
#pragma omp simd
  for (int i = 0; i < n; i++) o[i] = lt__verff(x[i]);
}
static void vloop_sigmoid(float *restrict o, const float *restrict x, int n) {
#pragma omp simd
  for (int i = 0; i < n; i++) o[i] = lt__vsigmoidf(x[i]);
}

START_TEST(test_vector_equals_scalar) {
  enum { N = 4099 };
  static float x[N], o[N];
  uint32_t s = 12345;
  for (int i = 0; i < N; i++) {
    s = s * 1664525u + 1013904223u;
    x[i] = lt__u2f(s); /* any bit pattern: NaNs, infinities, subnormals too */
  }
  x[0] = INFINITY, x[1] = -INFINITY, x[2] = NAN, x[3] = -0.0f;
  vloop_exp(o, x, N);
  for (int i = 0; i < N; i++) same_bits(o[i], lt__vexpf(x[i]), "exp (loop)", x[i]);
  vloop_tanh(o, x, N);
  for (int i = 0; i < N; i++) same_bits(o[i], lt__vtanhf(x[i]), "tanh (loop)", x[i]);
  vloop_sigmoid(o, x, N);
  for (int i = 0; i < N; i++) same_bits(o[i], lt__vsigmoidf(x[i]), "sigmoid (loop)", x[i]);
  vloop_erf(o, x, N);
  for (int i = 0; i < N; i++) same_bits(o[i], lt__verff(x[i]), "erf (loop)", x[i]);
}
END_TEST

#ifdef LT__HAVE_VEXP16
/* lt__vexpf16 (AVX-512) one lane at a time, the others fed other values:
 * the lanes must not interfere. */
LT__VEXP16_TARGET static float vexp16_lane(float x) {
  const __m512 v = _mm512_set_ps(x, 1, -1, 0, 2, -2, 3, -3, 4, -4, 5, -5, 6, -6, 7, x);
  float o[16];
  _mm512_storeu_ps(o, lt__vexpf16(v));
  return o[0] == o[15] || (o[0] != o[0] && o[15] != o[15]) ? o[0] : -12345.0f;
}

/* lt__vexpf16_exact has lt__vexpf's bits (sweep16_same_bits) and the
 * specials. */
LT__VEXP16_TARGET static void vexp16x_block(const float *x, float *o) {
  _mm512_storeu_ps(o, lt__vexpf16_exact(_mm512_loadu_ps(x)));
}
LT__VEXP16_TARGET static float vexp16x_lane(float x) {
  float in[16], o[16];
  for (int i = 0; i < 16; i++) in[i] = x;
  vexp16x_block(in, o);
  return o[0];
}
/* A 16-lane kernel (block: 16 floats in, 16 out) against its scalar form,
 * bit for bit, over every 251st float bit pattern (17 million: all
 * exponents, both signs, subnormals, infinities), 16 neighbours at a time;
 * a NaN input must give NaN (perhaps with another payload). */
static void sweep16_same_bits(void (*block)(const float *, float *), float (*scalar)(float), const char *name) {
  float x[16], o[16];
  int64_t checked = 0;
  for (uint64_t u = 0; u <= 0xFFFFFFFFu; u += 16 * 251) {
    for (int i = 0; i < 16; i++) x[i] = lt__u2f((uint32_t)(u + (uint64_t)i * 251 > 0xFFFFFFFFu ? u : u + (uint64_t)i * 251));
    block(x, o);
    for (int i = 0; i < 16; i++) {
      const float want = scalar(x[i]);
      if (lt__f2u(o[i]) != lt__f2u(want) && !(isnan(x[i]) && isnan(o[i])))
        ck_abort_msg("%s(%a) = %a, the scalar form gives %a", name, x[i], o[i], want);
    }
    checked += 16;
  }
  ck_assert_int_gt(checked, 17000000);
}

START_TEST(test_exp16_exact) {
  if (!lt__cpu_avx512()) {
    printf("exp16_exact: no AVX-512 on this CPU, skipped\n");
    return;
  }
  sweep16_same_bits(vexp16x_block, lt__vexpf, "vexpf16_exact");
  exp_specials(vexp16x_lane, "vexpf16_exact");
  const float edges[] = {-104.0f, -103.97f, -103.98f, -87.4f, -87.34f, -0x1p-30f, 0x1p-30f, 88.72f, 88.73f, 89.0f};
  for (size_t i = 0; i < sizeof edges / sizeof *edges; i++) same_bits(vexp16x_lane(edges[i]), lt__vexpf(edges[i]), "vexpf16_exact", edges[i]);
}
END_TEST

/* lt__verff16_exact has lt__verff's bits (sweep16_same_bits), and at the
 * specials and the two branches' edges. */
LT__VEXP16_TARGET static void verf16_block(const float *x, float *o) {
  _mm512_storeu_ps(o, lt__verff16_exact(_mm512_loadu_ps(x)));
}
START_TEST(test_erf16_exact) {
  if (!lt__cpu_avx512()) {
    printf("erf16_exact: no AVX-512 on this CPU, skipped\n");
    return;
  }
  sweep16_same_bits(verf16_block, lt__verff, "verff16_exact");
  float x[16], o[16];
  const float edges[] = {0.0f, -0.0f, INFINITY, -INFINITY, 1e-40f, -1e-40f, 0.921875f, -0.921875f,
                         0x1.d7fffep-1f, 0x1.d80002p-1f, 3.925f, -3.925f, 3.9250002f, 4.0f, -1e30f, 1e30f};
  _Static_assert(sizeof edges / sizeof *edges == 16, "one block of edges");
  verf16_block(edges, o);
  for (int j = 0; j < 16; j++) same_bits(o[j], lt__verff(edges[j]), "verff16_exact", edges[j]);
  x[0] = NAN, x[1] = -NAN;
  for (int i = 2; i < 16; i++) x[i] = (float)i;
  verf16_block(x, o);
  ck_assert(isnan(o[0]) && isnan(o[1]));
}
END_TEST

/* The 16-lane exp of the fused attention's rows: <= 2 ulp over the float
 * range like lt__vexpf, the same specials, and lt__row_exp_f32x16's row sum
 * equal to the portable row sum of its own exps, whatever the length. */
START_TEST(test_exp16) {
  if (!lt__cpu_avx512()) {
    printf("exp16: no AVX-512 on this CPU, skipped\n");
    return;
  }
  sweep_strat(vexp16_lane, exp, "vexpf16", 2.0, 0x1p-25f, 104.0f, 1); /* lt__vexpf's points */
  exp_specials(vexp16_lane, "exp16");
  const float inf = INFINITY;
  float x[300], y[300];
  uint32_t st = 7;
  for (int i = 0; i < 300; i++) {
    st = st * 1664525u + 1013904223u;
    x[i] = (float)(st >> 8) / 16777216.0f * 20.0f - 10.0f;
  }
  x[5] = -inf;
  for (int n = 0; n <= 300; n += (n < 40 ? 1 : 37)) {
    const double s = lt__row_exp_f32x16(x, 0.5f, y, n);
    for (int i = 0; i < n; i++) same_bits(y[i], vexp16_lane(x[i] - 0.5f), "row exp16", x[i]);
    const double want = lt__row_sum_f32(y, n);
    ck_assert_msg(memcmp(&s, &want, sizeof s) == 0, "row exp16 sum, n %d: %.17g, portable sum %.17g", n, s, want);
  }
}
END_TEST
#endif

static Suite *suite(void) {
  Suite *s = suite_create("vmath");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_exp_range);
  tcase_add_test(tc, test_tanh_range);
  tcase_add_test(tc, test_sigmoid_range);
  tcase_add_test(tc, test_erf_range);
  tcase_add_test(tc, test_erf_dense);
  tcase_add_test(tc, test_specials);
  tcase_add_test(tc, test_vector_equals_scalar);
#ifdef LT__HAVE_VEXP16
  tcase_add_test(tc, test_exp16);
  tcase_add_test(tc, test_exp16_exact);
  tcase_add_test(tc, test_erf16_exact);
#endif
  suite_add_tcase(s, tc);
  return s;
}

int main(void) { return lt_test_run(suite()); }
