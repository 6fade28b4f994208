/*
 * tests/test_bf16dot.c: the bf16 tile kernels of tensor/bf16dot.c (AMX and
 * vdpbf16ps) and their packing, against naive loops: every kernel this CPU
 * runs, shapes with partial blocks in M, N and K (the AMX kernel's 32 x 32
 * blocks and 32-deep steps, the vdpbf16ps kernel's 8 x 32 blocks), odd K,
 * accumulate and alpha, leading dimensions larger than the matrix; the
 * packing of contiguous, transposed and strided sources bit for bit against
 * lt__bf16_from_f32 (NaN, infinities, ties and subnormals included), with
 * the zero padding the kernels rely on; the f32 transpose against a loop. On a CPU without AVX512_BF16 there
 * is nothing to run (the attention tests cover the fallback).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/bf16dot_internal.h"
#include "tensor/storage_internal.h"
#include "test_util.h"

static float frand(unsigned *s) {
  *s = *s * 1103515245u + 12345u;
  return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* C = alpha * A B (+ C0) with each kernel, against the f64 sum of the
 * bf16-rounded products: the f32 sums may differ from it by their rounding
 * only (relative 1e-5 of the sum of |products|). alpha 1 without acc: the
 * AMX kernel stores whole blocks straight into C. */
static void check_gemm(int64_t M, int64_t N, int64_t K, bool acc, float alpha) {
  const int64_t Mp = LT__BF16DOT_CEIL(M), Kp = LT__BF16DOT_CEIL(K), Np = LT__BF16DOT_CEIL(N);
  const int64_t lda = Kp + 32, ldb = 2 * Np + 32, ldc = N + 3;
  float *a = malloc(sizeof(float) * (size_t)(M * K)), *b = malloc(sizeof(float) * (size_t)(K * N));
  float *c = malloc(sizeof(float) * (size_t)(M * ldc));
  uint16_t *A = malloc(2 * (size_t)(Mp * lda)), *B = malloc(2 * (size_t)(Kp / 2 * ldb));
  ck_assert(a && b && c && A && B);
  unsigned s = (unsigned)(M * 131 + N * 17 + K);
  for (int64_t i = 0; i < M * K; i++) a[i] = frand(&s);
  for (int64_t i = 0; i < K * N; i++) b[i] = frand(&s);
  /* NaN where the kernels may read but no written element depends on it:
   * rows of A past M, columns of B past N (the header's padding rule) */
  for (int64_t i = 0; i < Mp * lda; i++) A[i] = 0x7fc0;
  for (int64_t i = 0; i < Kp / 2 * ldb; i++) B[i] = 0x7fc0;
  lt__bf16dot_pack_rows(A, lda, a, M, K, K, 1);
  lt__bf16dot_pack_pairs(B, ldb, b, K, N, N, 1);
  for (int kind = LT__BF16DOT_DOT; kind <= (int)lt__bf16dot_best(); kind++) {
    for (int64_t i = 0; i < M * ldc; i++) c[i] = acc ? 0.5f : NAN;
    lt__bf16dot_gemm((lt__bf16dot_kind)kind, M, N, K, alpha, A, lda, B, ldb, acc, c, ldc);
    int64_t bad = 0;
    double worst = 0;
    for (int64_t i = 0; i < M; i++) {
      for (int64_t j = 0; j < N; j++) {
        double sum = 0, mag = 0;
        for (int64_t k = 0; k < K; k++) {
          const double pr = (double)lt__f32_from_bf16(lt__bf16_from_f32(a[i * K + k])) *
                            (double)lt__f32_from_bf16(lt__bf16_from_f32(b[k * N + j]));
          sum += pr, mag += fabs(pr);
        }
        const double want = alpha * sum + (acc ? 0.5 : 0), d = fabs(c[i * ldc + j] - want);
        if (!(d <= 1e-5 * (mag + 1))) bad++;
        if (d > worst) worst = d;
      }
      for (int64_t j = N; j < ldc; j++) /* past N: untouched */
        if (acc ? c[i * ldc + j] != 0.5f : !isnan(c[i * ldc + j])) bad++;
    }
    ck_assert_msg(bad == 0, "kernel %d, M %lld N %lld K %lld%s: %lld bad elements (max diff %g)", kind,
                  (long long)M, (long long)N, (long long)K, acc ? " accumulate" : "", (long long)bad, worst);
  }
  free(a), free(b), free(c), free(A), free(B);
}

START_TEST(test_gemm_shapes) {
  if (lt__bf16dot_best() == LT__BF16DOT_NONE) return;
  const int64_t shapes[][3] = {{1, 1, 1},    {256, 256, 64}, {128, 64, 256}, {33, 17, 5},
                               {31, 47, 63}, {64, 256, 33},  {7, 300, 128},  {257, 40, 2}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int c = 0; c < 3; c++) /* alpha 0.75, then accumulate, then alpha 1 */
      check_gemm(shapes[i][0], shapes[i][1], shapes[i][2], c == 1, c == 2 ? 1.0f : 0.75f);
}
END_TEST

/* Packing [rows, cols] from a source with strides (rs, cs): the rows layout
 * and the pairs layout, bit for bit, and the zero padding. */
static void check_pack(int64_t rows, int64_t cols, int64_t rs, int64_t cs, const float *x) {
  const int64_t ldr = LT__BF16DOT_CEIL(cols) + 16, ldp = 2 * cols + 8, np = LT__BF16DOT_CEIL(rows) / 2;
  uint16_t *r = malloc(2 * (size_t)(rows * ldr)), *p = malloc(2 * (size_t)(np * ldp));
  ck_assert(r && p);
  memset(r, 0xff, 2 * (size_t)(rows * ldr));
  memset(p, 0xff, 2 * (size_t)(np * ldp));
  lt__bf16dot_pack_rows(r, ldr, x, rows, cols, rs, cs);
  lt__bf16dot_pack_pairs(p, ldp, x, rows, cols, rs, cs);
  int64_t bad = 0;
  for (int64_t i = 0; i < rows; i++) {
    for (int64_t j = 0; j < cols; j++) bad += r[i * ldr + j] != lt__bf16_from_f32(x[i * rs + j * cs]);
    for (int64_t j = cols; j < LT__BF16DOT_CEIL(cols); j++) bad += r[i * ldr + j] != 0;
  }
  for (int64_t q = 0; q < np; q++)
    for (int64_t j = 0; j < cols; j++)
      for (int e = 0; e < 2; e++) {
        const int64_t i = 2 * q + e;
        bad += p[q * ldp + 2 * j + e] != (i < rows ? lt__bf16_from_f32(x[i * rs + j * cs]) : 0);
      }
  ck_assert_msg(bad == 0, "pack [%lld, %lld] strides (%lld, %lld): %lld wrong elements", (long long)rows,
                (long long)cols, (long long)rs, (long long)cs, (long long)bad);
  if (cs == 1) { /* both layouts in one pass: the same bytes, padding and untouched elements included */
    uint16_t *r2 = malloc(2 * (size_t)(rows * ldr)), *p2 = malloc(2 * (size_t)(np * ldp));
    ck_assert(r2 && p2);
    memset(r2, 0xff, 2 * (size_t)(rows * ldr));
    memset(p2, 0xff, 2 * (size_t)(np * ldp));
    lt__bf16dot_pack_rows_pairs(r2, ldr, p2, ldp, x, rows, cols, rs);
    ck_assert_msg(!memcmp(r, r2, 2 * (size_t)(rows * ldr)) && !memcmp(p, p2, 2 * (size_t)(np * ldp)),
                  "pack_rows_pairs [%lld, %lld] differs from pack_rows + pack_pairs", (long long)rows,
                  (long long)cols);
    free(r2), free(p2);
  }
  free(r), free(p);
}

START_TEST(test_pack) {
  if (lt__bf16dot_best() == LT__BF16DOT_NONE) return;
  const int64_t n = 600 * 70;
  float *x = malloc(sizeof(float) * (size_t)n);
  ck_assert(x);
  unsigned s = 7;
  for (int64_t i = 0; i < n; i++) x[i] = frand(&s) * 100.0f;
  /* special values: ties to even, NaN (quiet bit kept), infinities, a subnormal, the largest float */
  const uint32_t special[] = {0x3f808000u, 0x3f818000u, 0x7f800001u, 0xffc12345u, 0x7f800000u,
                              0xff800000u, 0x00000001u, 0x7f7fffffu, 0x80000000u};
  for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) memcpy(&x[i * 37], &special[i], 4);
  const int64_t shapes[][2] = {{1, 1}, {5, 33}, {64, 70}, {70, 64}, {17, 1}, {300, 7}, {513, 40}, {2, 600}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
    const int64_t R = shapes[i][0], C = shapes[i][1];
    check_pack(R, C, C, 1, x);     /* contiguous rows */
    check_pack(R, C, 1, R, x);     /* transposed: columns contiguous */
    check_pack(R, C, 2 * C, 2, x); /* strided both ways (R * C * 4 <= n) */
  }
  free(x);
}
END_TEST

START_TEST(test_transpose) {
  if (lt__bf16dot_best() == LT__BF16DOT_NONE) return;
  const int64_t shapes[][2] = {{1, 1}, {16, 16}, {64, 128}, {17, 33}, {40, 5}, {3, 70}};
  for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
    const int64_t n = shapes[c][0], m = shapes[c][1], lds = m + 5, ldd = n + 3;
    float *src = malloc(sizeof(float) * (size_t)(n * lds)), *dst = malloc(sizeof(float) * (size_t)(m * ldd));
    ck_assert(src && dst);
    for (int64_t i = 0; i < n * lds; i++) src[i] = (float)i;
    for (int64_t i = 0; i < m * ldd; i++) dst[i] = -1;
    lt__bf16dot_transpose_f32(dst, ldd, src, lds, n, m);
    int64_t bad = 0;
    for (int64_t j = 0; j < m; j++)
      for (int64_t i = 0; i < ldd; i++) bad += dst[j * ldd + i] != (i < n ? src[i * lds + j] : -1.0f);
    ck_assert_msg(bad == 0, "transpose [%lld, %lld]: %lld wrong elements", (long long)n, (long long)m, (long long)bad);
    free(src), free(dst);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("bf16dot");
  TCase *tc = tcase_create("kernels");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_gemm_shapes);
  tcase_add_test(tc, test_pack);
  tcase_add_test(tc, test_transpose);
  suite_add_tcase(s, tc);
  return lt_test_run(s);
}
