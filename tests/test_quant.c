/*
 * tests/test_quant.c: the weight formats of tensor/quant.h against the
 * `gguf` Python package (tests/fixtures/quant.bin, written by
 * tests/fixtures/make_quant_fixtures.py): Q8_0, Q4_0, bf16 and f16 bytes bit
 * for bit, dequantized values bit for bit, then sizes, names and errors.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"
#include "tensor/quant.h"
#include "tensor/quant_internal.h"
#include "tensor/paths_internal.h"
#include "test_util.h"
#include "util_fixtures.h"

static lt_fixture *load_fixture(void) {
  char path[4096];
  return LT_NNP(lt_fixture_load(lt_fixture_path("quant.bin", path, sizeof path)));
}

/* Compares n bytes with a record of i32 bytes; prints the first mismatches.
 * skip (may be NULL) marks bytes checked by the caller instead. */
static void expect_bytes(const char *what, const uint8_t *got, const lt_tensor *want, int64_t n, const bool *skip) {
  ck_assert_int_eq(want->numel, n);
  const int32_t *w = want->data;
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++)
    if (!(skip && skip[i]) && got[i] != (uint8_t)w[i] && bad++ < 8)
      fprintf(stderr, "%s: byte %lld: got 0x%02x, gguf 0x%02x\n", what, (long long)i, got[i], (unsigned)w[i]);
  ck_assert_msg(bad == 0, "%s: %lld of %lld bytes differ from gguf/quants.py", what, (long long)bad, (long long)n);
}

/* Bit equality, except that zero_sign[i] (may be NULL) allows 0 against -0. */
static void expect_bits(const char *what, const float *got, const float *want, int64_t n, const bool *zero_sign) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++)
    if (memcmp(&got[i], &want[i], sizeof(float)) != 0 &&
        !(zero_sign && zero_sign[i] && got[i] == 0.0f && want[i] == 0.0f) && bad++ < 8)
      fprintf(stderr, "%s: element %lld: got %.9g, gguf %.9g\n", what, (long long)i, got[i], want[i]);
  ck_assert_msg(bad == 0, "%s: %lld of %lld values differ from gguf/quants.py", what, (long long)bad, (long long)n);
}

START_TEST(test_blocks_match_gguf) {
  lt_fixture *f = load_fixture();
  lt_tensor *x = LT_NN(lt_fixture_get(f, "x"));
  const int64_t R = x->shape[0], N = x->shape[1];
  const lt_qformat fmts[2] = {LT_QFORMAT_Q8_0, LT_QFORMAT_Q4_0};
  for (int k = 0; k < 2; k++) {
    char name[64];
    size_t rb;
    LT_OK_OR_FAIL(lt_qformat_row_bytes(fmts[k], N, &rb));
    snprintf(name, sizeof name, "%s", lt_qformat_name(fmts[k]));
    lt_tensor *want = LT_NN(lt_fixture_get(f, name));
    snprintf(name, sizeof name, "%s.deq", lt_qformat_name(fmts[k]));
    lt_tensor *want_deq = LT_NN(lt_fixture_get(f, name));
    ck_assert_int_eq(want->shape[1], (int64_t)rb);
    uint8_t *q = malloc(rb * (size_t)R);
    float *y = malloc(sizeof(float) * (size_t)(R * N));
    bool *skip = calloc(rb * (size_t)R, 1), *zero_sign = calloc((size_t)(R * N), 1);
    for (int64_t r = 0; r < R; r++) {
      const float *xr = (const float *)x->data + r * N;
      LT_OK_OR_FAIL(lt_quantize_row(fmts[k], xr, N, q + r * rb));
      LT_OK_OR_FAIL(lt_dequantize_row(fmts[k], q + r * rb, N, y + r * N));
      /* Q4_0 of a block of zeros: ggml's C has d = 0.0f / -8 = -0 (f16
       * 0x8000) for +0 and -0 alike; gguf/quants.py takes the sign of the
       * block's first zero (-0 / -8 = +0). ggml's C is the reference. */
      for (int64_t b = 0; fmts[k] == LT_QFORMAT_Q4_0 && b < N / 32; b++) {
        bool zeros = true;
        for (int j = 0; j < 32; j++) zeros = zeros && xr[b * 32 + j] == 0.0f;
        if (!zeros) continue;
        const lt_block_q4_0 *blk = (const lt_block_q4_0 *)(q + r * rb) + b;
        ck_assert_uint_eq(blk->d, 0x8000);
        for (int j = 0; j < 16; j++) ck_assert_uint_eq(blk->qs[j], 0x88);
        skip[r * rb + b * sizeof *blk] = skip[r * rb + b * sizeof *blk + 1] = true;
        memset(zero_sign + r * N + b * 32, 1, 32);
      }
    }
    expect_bytes(lt_qformat_name(fmts[k]), q, want, (int64_t)rb * R, skip);
    expect_bits(name, y, want_deq->data, R * N, zero_sign);
    free(q);
    free(y);
    free(skip);
    free(zero_sign);
    LT_FREE_ALL(want, want_deq);
  }
  lt_tensor_free(x);
  lt_fixture_free(f);
}
END_TEST

START_TEST(test_bf16_f16_match_gguf) {
  lt_fixture *f = load_fixture();
  lt_tensor *bx = LT_NN(lt_fixture_get(f, "bf16.x")), *bw = LT_NN(lt_fixture_get(f, "bf16"));
  uint16_t *b = malloc(2 * (size_t)bx->numel);
  LT_OK_OR_FAIL(lt_quantize_row(LT_QFORMAT_BF16, bx->data, bx->numel, b));
  expect_bytes("bf16", (const uint8_t *)b, bw, 2 * bx->numel, NULL);
  float *back = malloc(sizeof(float) * (size_t)bx->numel);
  LT_OK_OR_FAIL(lt_dequantize_row(LT_QFORMAT_BF16, b, bx->numel, back));
  for (int64_t i = 0; i < bx->numel; i++) ck_assert_uint_eq(lt_bf16_from_f32(back[i]), b[i]);
  free(back);
  free(b);

  lt_tensor *fx = LT_NN(lt_fixture_get(f, "f16.x")), *fw = LT_NN(lt_fixture_get(f, "f16"));
  uint16_t *h = malloc(2 * (size_t)fx->numel);
  for (int64_t i = 0; i < fx->numel; i++) h[i] = lt_f16_from_f32(((const float *)fx->data)[i]);
  expect_bytes("f16", (const uint8_t *)h, fw, 2 * fx->numel, NULL);
  free(h);
  LT_FREE_ALL(bx, bw, fx, fw);
  lt_fixture_free(f);
}
END_TEST

/* Every f16 converts to f32 and back to itself (NaNs stay NaNs). */
START_TEST(test_f16_round_trip) {
  for (uint32_t u = 0; u < 65536; u++) {
    const float v = lt_f32_from_f16((uint16_t)u);
    if (((u >> 10) & 0x1F) == 0x1F && (u & 0x3FF)) {
      ck_assert(isnan(v));
      ck_assert(((lt_f16_from_f32(v) >> 10) & 0x1F) == 0x1F && (lt_f16_from_f32(v) & 0x3FF));
      continue;
    }
    ck_assert_msg(lt_f16_from_f32(v) == u, "f16 0x%04x -> %g -> 0x%04x", u, v, lt_f16_from_f32(v));
  }
  ck_assert_float_eq(lt_f32_from_f16(0x3C00), 1.0f);
  ck_assert_float_eq(lt_f32_from_f16(0x0001), 0x1p-24f);
  ck_assert_float_eq(lt_f32_from_f16(0xC000), -2.0f);
}
END_TEST

START_TEST(test_sizes_names_errors) {
  size_t b = 0;
  LT_OK_OR_FAIL(lt_qformat_row_bytes(LT_QFORMAT_Q8_0, 4096, &b));
  ck_assert_uint_eq(b, 4096 / 32 * 34);
  LT_OK_OR_FAIL(lt_qformat_row_bytes(LT_QFORMAT_Q4_0, 64, &b));
  ck_assert_uint_eq(b, 36);
  LT_OK_OR_FAIL(lt_qformat_row_bytes(LT_QFORMAT_BF16, 7, &b));
  ck_assert_uint_eq(b, 14);
  LT_OK_OR_FAIL(lt_qformat_row_bytes(LT_QFORMAT_F32, 0, &b));
  ck_assert_uint_eq(b, 0);
  b = 99;
  LT_EXPECT_ERR(lt_qformat_row_bytes(LT_QFORMAT_Q4_0, 48, &b), LT_ERR_SHAPE, "q4_0 row of 48 weights: not a multiple");
  ck_assert_uint_eq(b, 99);
  LT_EXPECT_ERR(lt_qformat_row_bytes(LT_QFORMAT_Q8_0, -32, &b), LT_ERR_INVALID, "-32");
  LT_EXPECT_ERR(lt_qformat_row_bytes(LT_QFORMAT_Q8_0, INT64_MAX / 32 * 32, &b), LT_ERR_OVERFLOW, "overflows");
  LT_EXPECT_ERR(lt_qformat_row_bytes((lt_qformat)17, 32, &b), LT_ERR_INVALID, "unknown weight format");
  ck_assert_int_eq(lt_qformat_block_elems(LT_QFORMAT_Q4_0), 32);
  ck_assert_uint_eq(lt_qformat_block_bytes(LT_QFORMAT_Q4_0), 18);
  ck_assert_uint_eq(lt_qformat_block_bytes((lt_qformat)-1), 0);
  const char *names[] = {"f32", "bf16", "q8_0", "q4_0"};
  for (int i = 0; i < LT_QFORMAT_COUNT; i++) {
    lt_qformat f;
    ck_assert_str_eq(lt_qformat_name((lt_qformat)i), names[i]);
    LT_OK_OR_FAIL(lt_qformat_parse(names[i], &f));
    ck_assert_int_eq(f, i);
  }
  lt_qformat f = LT_QFORMAT_BF16;
  LT_OK_OR_FAIL(lt_qformat_parse("q4", &f));
  ck_assert_int_eq(f, LT_QFORMAT_Q4_0);
  LT_EXPECT_ERR(lt_qformat_parse("q5_k", &f), LT_ERR_INVALID, "q8_0");
  ck_assert_int_eq(f, LT_QFORMAT_Q4_0);

  float x[64] = {0};
  uint8_t q[68];
  memset(q, 0xAB, sizeof q);
  x[40] = NAN;
  LT_EXPECT_ERR(lt_quantize_row(LT_QFORMAT_Q8_0, x, 64, q), LT_ERR_NUMERIC, "weight 40 of 64");
  x[40] = -INFINITY;
  LT_EXPECT_ERR(lt_quantize_row(LT_QFORMAT_Q4_0, x, 64, q), LT_ERR_NUMERIC, "q4_0: weight 40");
  for (size_t i = 0; i < sizeof q; i++) ck_assert_uint_eq(q[i], 0xAB); /* nothing written */
  LT_EXPECT_ERR(lt_quantize_row(LT_QFORMAT_Q8_0, x, 33, q), LT_ERR_SHAPE, "quantize_row");
  LT_EXPECT_ERR(lt_quantize_row(LT_QFORMAT_Q8_0, NULL, 32, q), LT_ERR_NULL, "quantize_row");
  LT_EXPECT_ERR(lt_dequantize_row(LT_QFORMAT_Q8_0, q, 32, NULL), LT_ERR_NULL, "dequantize_row");

  /* A block whose largest weight is so small that 1/d overflows: no
   * undefined behaviour (UBSan), all quants 0 as ggml's casts give on x86. */
  for (int i = 0; i < 64; i++) x[i] = (i % 3 - 1) * 1e-39f;
  LT_OK_OR_FAIL(lt_quantize_row(LT_QFORMAT_Q8_0, x, 64, q));
  for (int i = 0; i < 32; i++) ck_assert_int_eq(((const lt_block_q8_0 *)q)->qs[i], 0);
  LT_OK_OR_FAIL(lt_quantize_row(LT_QFORMAT_Q4_0, x, 64, q));
}
END_TEST


/* ---- the quantized product ------------------------------------------------ */

static uint64_t rng_state = 12345;
static float urand(void) { /* in [-1, 1) */
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((rng_state >> 40) * 0x1p-24) * 2.0f - 1.0f;
}

static lt_tensor *rand_tensor(int ndim, const int64_t *shape, float scale) {
  lt_tensor *t = LT_NN(lt_empty(LT_DTYPE_F32, ndim, shape));
  float *d = t->data;
  for (int64_t i = 0; i < t->numel; i++) d[i] = urand() * scale;
  return t;
}

/* Checks y [M, N] = x [M, K] W^T + bias of the kernel in use against two
 * references in double:
 *  (a) exact: dequantized W times the Q8_0-quantized-then-dequantized x
 *      (bf16: times x), which the kernel computes up to the f32 rounding
 *      of its sums: |y - a| <= (terms + 2) * 2^-24 * sum |w_k x_k|;
 *  (b) dequantized W times x itself: |y - b| <= the activation
 *      quantization's bound sum_k |w_k| |x_k - xq_k| plus (a)'s. */
static void check_linear(lt_qformat f, int64_t M, int64_t N, int64_t K, bool with_bias) {
  lt_tensor *x = rand_tensor(2, (int64_t[]){M, K}, 2.0f), *w = rand_tensor(2, (int64_t[]){N, K}, 0.5f);
  lt_tensor *bias = with_bias ? rand_tensor(1, (int64_t[]){N}, 1.0f) : NULL;
  lt_qmatrix *q = LT_NNP(lt_qmatrix_quantize(w, f));
  ck_assert_int_eq(lt_qmatrix_rows(q), N);
  ck_assert_int_eq(lt_qmatrix_cols(q), K);
  lt_tensor *wd = LT_NN(lt_qmatrix_dequantize(q));
  lt_tensor *y = LT_NN(lt_qmatrix_linear(x, q, bias));
  ck_assert_int_eq(y->ndim, 2);
  ck_assert_int_eq(y->shape[0], M);
  ck_assert_int_eq(y->shape[1], N);
  const int64_t Kp = lt_qmatrix_padded_cols(q);
  float *xq = calloc((size_t)(M * Kp), sizeof(float));
  for (int64_t m = 0; m < M; m++) {
    if (f == LT_QFORMAT_BF16) {
      memcpy(xq + m * Kp, (float *)x->data + m * K, sizeof(float) * (size_t)K);
      continue;
    }
    float *row = calloc((size_t)Kp, sizeof(float));
    lt_block_q8_0 *blk = malloc(sizeof(lt_block_q8_0) * (size_t)(Kp / 32));
    memcpy(row, (float *)x->data + m * K, sizeof(float) * (size_t)K);
    LT_OK_OR_FAIL(lt_quantize_row(LT_QFORMAT_Q8_0, row, Kp, blk));
    LT_OK_OR_FAIL(lt_dequantize_row(LT_QFORMAT_Q8_0, blk, Kp, xq + m * Kp));
    free(row);
    free(blk);
  }
  const float *xv = x->data, *wv = wd->data, *yv = y->data;
  const double terms = f == LT_QFORMAT_BF16 ? (double)K : (double)(Kp / 32);
  double worst_a = 0, worst_b = 0;
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      double a = 0, b = 0, mag = 0, qerr = 0;
      for (int64_t k = 0; k < K; k++) {
        const double wk = wv[n * K + k];
        a += wk * xq[m * Kp + k];
        b += wk * xv[m * K + k];
        mag += fabs(wk * xq[m * Kp + k]);
        qerr += fabs(wk) * fabs((double)xv[m * K + k] - xq[m * Kp + k]);
      }
      const double bb = bias ? ((float *)bias->data)[n] : 0.0;
      const double tol_a = (terms + 2) * 0x1p-24 * (mag + fabs(bb)) + 1e-30;
      const double tol_b = qerr * (1 + 1e-6) + tol_a;
      const double ea = fabs(yv[m * N + n] - (a + bb)), eb = fabs(yv[m * N + n] - (b + bb));
      if (ea / tol_a > worst_a) worst_a = ea / tol_a;
      if (eb / tol_b > worst_b) worst_b = eb / tol_b;
      ck_assert_msg(ea <= tol_a && eb <= tol_b,
                    "%s [%lld,%lld,%lld] (%s) y[%lld,%lld] = %.9g: exact %.9g (|d| %.3g, tol %.3g), f32 x %.9g (|d| %.3g, "
                    "tol %.3g)",
                    lt_qformat_name(f), (long long)M, (long long)N, (long long)K, lt_qmatrix_kernel(f), (long long)m,
                    (long long)n, yv[m * N + n], a + bb, ea, tol_a, b + bb, eb, tol_b);
    }
  free(xq);
  lt_qmatrix_free(q);
  LT_FREE_ALL(x, w, bias, wd, y);
}

/* M = 1 (decoding), 3, 17 (the register tile of 4 rows of x and its
 * edges), N odd (the tile of 4 rows of W and its edge), K below, at and
 * past the block and not a multiple of it; M = 512 (a prompt); a W of more
 * than one cache block (512 KB) and past the thread thresholds. */
static void linear_shapes(lt__qdot_kind kind) {
  const lt__qdot_kind prev = lt__qdot_limit(kind);
  /* the hand kernels, x in f32 (oneDNN's bf16 path from 16 rows rounds x to bf16: tests/test_load_quant.c) */
  const int64_t prev_rows = lt__qgemm_bf16_min_rows(INT64_MAX);
  const lt_qformat fmts[3] = {LT_QFORMAT_Q8_0, LT_QFORMAT_Q4_0, LT_QFORMAT_BF16};
  const int64_t Ms[] = {1, 3, 4, 5, 9, 17}, Ns[] = {1, 7, 33}, Ks[] = {1, 17, 31, 32, 33, 64, 96, 100, 257};
  for (int f = 0; f < 3; f++)
    for (size_t i = 0; i < sizeof Ms / sizeof *Ms; i++)
      for (size_t j = 0; j < sizeof Ns / sizeof *Ns; j++)
        for (size_t k = 0; k < sizeof Ks / sizeof *Ks; k++) check_linear(fmts[f], Ms[i], Ns[j], Ks[k], (i + k) % 2);
  for (int f = 0; f < 3; f++) {
    check_linear(fmts[f], 33, 520, 257, true);  /* past 2^22 multiply-adds: two threads */
    check_linear(fmts[f], 512, 37, 100, false); /* a prompt */
    check_linear(fmts[f], 1, 2051, 1000, true); /* 0.6-4 MB: cache blocks, threads by bytes */
    check_linear(fmts[f], 6, 4099, 160, false); /* Q8_0 rows of 170 bytes: 3084 rows a block, a second block */
  }
  lt__qgemm_bf16_min_rows(prev_rows);
  lt__qdot_limit(prev);
}

/* Every path of the qdot family this CPU runs, forced through the path
 * table (as LT_QDOT=... does). */
START_TEST(test_linear_every_path) {
  int ran = 0;
  const int64_t prev_rows = lt__qgemm_bf16_min_rows(INT64_MAX); /* the hand kernels (linear_shapes) */
  for (int p = 0; p < LT__PATH_COUNT; p++) {
    if (lt__path_family_of((lt__path)p) != LT__PATH_FAMILY_qdot || !lt__path_supported((lt__path)p)) continue;
    const lt__path before = lt__path_force(LT__PATH_FAMILY_qdot, (lt__path)p);
    fprintf(stderr, "quant: path %s: q8_0 %s, bf16 %s\n", lt__path_switch((lt__path)p), lt_qmatrix_kernel(LT_QFORMAT_Q8_0),
            lt_qmatrix_kernel(LT_QFORMAT_BF16));
    ck_assert_str_eq(lt_qmatrix_kernel(LT_QFORMAT_Q8_0), p == LT__PATH_qdot_portable ? "portable C"
                                                         : p == LT__PATH_qdot_avx2   ? "AVX2 (vpmaddubsw)"
                                                                                     : "AVX512-VNNI (vpdpbusd)");
    check_linear(LT_QFORMAT_Q8_0, 17, 33, 100, true);
    check_linear(LT_QFORMAT_Q4_0, 17, 33, 100, false);
    check_linear(LT_QFORMAT_BF16, 17, 33, 100, true);
    lt__path_force(LT__PATH_FAMILY_qdot, before);
    ran++;
  }
  lt__qgemm_bf16_min_rows(prev_rows);
  ck_assert_int_ge(ran, 1); /* portable C runs everywhere */
}
END_TEST

#ifdef LT__QDOT_X86
/* The SIMD activation quantizers (AVX-512, AVX2) against the reference rounding
 * (lt__quantize_q8_0) bit for bit: ties x * id = k + 0.5 (rounded away
 * from zero), zero blocks, a partial last block, tiny and huge values. */
START_TEST(test_activation_quantizer) {
  const bool vnni = lt__path_supported(LT__PATH_qdot_vnni);
  if (!vnni && !lt__path_supported(LT__PATH_qdot_avx2)) return;
  enum { M = 3, K = 100, KP = 128, NB = 4 };
  float x[M * K];
  for (int i = 0; i < M * K; i++) x[i] = urand() * 3.0f;
  for (int j = 0; j < 32; j++) x[j] = (float)(j - 16) + 0.5f; /* amax 16.5: id = 127 / 16.5, ties elsewhere */
  x[40] = 127.0f;                                               /* block 1: d = 1, id = 1 */
  for (int j = 41; j < 64; j++) x[j] = (float)(j - 52) + (j % 2 ? 0.5f : -0.5f);
  for (int j = 64; j < 96; j++) x[j] = 0.0f;                    /* a zero block */
  x[K + 3] = 1e-30f, x[K + 4] = -3e38f;
  lt__qact a = {.M = M, .nb = NB, .Kp = KP};
  a.xd = malloc(sizeof(float) * M * NB), a.xq = malloc(M * KP), a.nc = malloc(sizeof(int32_t) * M * NB * 8);
  a.xsum = malloc(sizeof(int32_t) * M * NB); /* the AVX2 quantizer's block sums (Q4_0's correction) */
  for (int pass = vnni ? 0 : 1; pass < 2; pass++) {
    memset(a.xd, 0, sizeof(float) * M * NB), memset(a.xq, 0x55, M * KP);
    if (pass == 0) lt__qact_fill_vnni(x, M, K, 128, &a);
    else lt__qact_fill_avx2(x, M, K, &a);
    for (int m = 0; m < M; m++) {
      float row[KP] = {0};
      lt_block_q8_0 blk[NB];
      memcpy(row, x + m * K, sizeof(float) * K);
      lt__quantize_q8_0(row, blk, NB);
      for (int b = 0; b < NB; b++) {
        ck_assert_msg(memcmp(&a.xd[m * NB + b], &(float){lt_f32_from_f16(blk[b].d)}, 4) == 0, "row %d block %d: scale %a, "
                      "reference %a", m, b, (double)a.xd[m * NB + b], (double)lt_f32_from_f16(blk[b].d));
        for (int j = 0; j < 32; j++)
          ck_assert_msg(a.xq[m * KP + b * 32 + j] == blk[b].qs[j], "row %d block %d quant %d: %d, reference %d (x %a)", m,
                        b, j, a.xq[m * KP + b * 32 + j], blk[b].qs[j], (double)row[b * 32 + j]);
        for (int i = 0; pass == 0 && i < 8; i++) { /* the VNNI kernels' correction */
          const int8_t *q = blk[b].qs + 4 * i;
          ck_assert_int_eq(a.nc[(m * NB + b) * 8 + i], -128 * (q[0] + q[1] + q[2] + q[3]));
        }
        int32_t sum = 0;
        for (int j = 0; j < 32; j++) sum += blk[b].qs[j];
        if (pass == 1) ck_assert_int_eq(a.xsum[m * NB + b], sum);
      }
    }
  }
  free(a.xd), free(a.xq), free(a.nc), free(a.xsum);
}
END_TEST
#endif

START_TEST(test_linear_best_kernel) {
  fprintf(stderr, "quant: kernels on this CPU: q8_0 %s, q4_0 %s, bf16 %s\n", lt_qmatrix_kernel(LT_QFORMAT_Q8_0),
          lt_qmatrix_kernel(LT_QFORMAT_Q4_0), lt_qmatrix_kernel(LT_QFORMAT_BF16));
  linear_shapes(LT__QDOT_AVX512);
}
END_TEST

/* The AVX2 kernels where the CPU has them (on an AVX512-VNNI CPU they are
 * not its best, and only this test and the path test reach them). */
START_TEST(test_linear_avx2) {
  if (lt__qdot_best() < LT__QDOT_AVX512) return; /* below, test_linear_best_kernel runs them */
  linear_shapes(LT__QDOT_AVX2);
}
END_TEST

START_TEST(test_linear_portable) {
  lt__qdot_limit(LT__QDOT_PORTABLE);
  ck_assert_str_eq(lt_qmatrix_kernel(LT_QFORMAT_Q8_0), "portable C");
  lt__qdot_limit(LT__QDOT_AVX512);
  linear_shapes(LT__QDOT_PORTABLE);
}
END_TEST

/* The kernels agree with each other (up to the order of f32 sums), the
 * output does not depend on the thread count, views and 3-d inputs work,
 * from_blocks gives the same matrix, and errors name the operands. */
START_TEST(test_linear_views_errors) {
  lt_tensor *w = rand_tensor(2, (int64_t[]){40, 96}, 1.0f), *x3 = rand_tensor(3, (int64_t[]){2, 3, 96}, 1.0f);
  lt_tensor *xt = rand_tensor(2, (int64_t[]){96, 6}, 1.0f);
  lt_tensor *xv = LT_NN(lt_transpose(xt, 0, 1)); /* [6, 96], strided */
  const lt_qformat fmts[3] = {LT_QFORMAT_Q8_0, LT_QFORMAT_Q4_0, LT_QFORMAT_BF16};
  for (int f = 0; f < 3; f++) {
    lt_qmatrix *q = LT_NNP(lt_qmatrix_quantize(w, fmts[f]));
    lt_tensor *y3 = LT_NN(lt_qmatrix_linear(x3, q, NULL));
    ck_assert_int_eq(y3->ndim, 3);
    ck_assert_int_eq(y3->shape[2], 40);
    lt_tensor *x2 = LT_NN(lt_reshape(x3, 2, (int64_t[]){6, 96}));
    lt_tensor *y2 = LT_NN(lt_qmatrix_linear(x2, q, NULL));
    ck_assert_mem_eq(y3->data, y2->data, sizeof(float) * 240);
    const lt__qdot_kind prev = lt__qdot_limit(LT__QDOT_PORTABLE);
    lt_tensor *yp = LT_NN(lt_qmatrix_linear(x2, q, NULL));
    lt__qdot_limit(prev);
    for (int i = 0; i < 240; i++)
      ck_assert_msg(fabsf(((float *)yp->data)[i] - ((float *)y2->data)[i]) <= 1e-5f * (1 + fabsf(((float *)yp->data)[i])),
                    "%s: kernels differ at %d: %g %g", lt_qformat_name(fmts[f]), i, ((float *)yp->data)[i],
                    ((float *)y2->data)[i]);
    int prev_threads = lt_get_num_threads();
    lt_set_num_threads(1);
    lt_tensor *y1 = LT_NN(lt_qmatrix_linear(x2, q, NULL));
    lt_set_num_threads(prev_threads);
    ck_assert_mem_eq(y1->data, y2->data, sizeof(float) * 240);
    lt_tensor *ys = LT_NN(lt_qmatrix_linear(xv, q, NULL));
    lt_tensor *xc = LT_NN(lt_contiguous(xv));
    lt_tensor *yc = LT_NN(lt_qmatrix_linear(xc, q, NULL));
    ck_assert_mem_eq(ys->data, yc->data, sizeof(float) * 240);
    lt_qmatrix *qb = LT_NNP(lt_qmatrix_from_blocks(fmts[f], 40, 96, lt_qmatrix_data(q)));
    ck_assert_uint_eq(lt_qmatrix_bytes(qb), lt_qmatrix_bytes(q));
    lt_tensor *yb = LT_NN(lt_qmatrix_linear(x2, qb, NULL));
    ck_assert_mem_eq(yb->data, y2->data, sizeof(float) * 240);
    LT_FREE_ALL(y3, x2, y2, yp, y1, ys, xc, yc, yb);
    lt_qmatrix_free(qb);
    lt_qmatrix_free(q);
  }
  /* two threads and one give the same bits (rows of W split, sums unchanged) */
  for (int f = 0; f < 3; f++) {
    lt_tensor *wb = rand_tensor(2, (int64_t[]){520, 256}, 1.0f), *xb = rand_tensor(2, (int64_t[]){33, 256}, 1.0f);
    lt_qmatrix *q = LT_NNP(lt_qmatrix_quantize(wb, fmts[f]));
    lt_tensor *y2 = LT_NN(lt_qmatrix_linear(xb, q, NULL));
    int prev_threads = lt_get_num_threads();
    lt_set_num_threads(1);
    lt_tensor *y1 = LT_NN(lt_qmatrix_linear(xb, q, NULL));
    lt_set_num_threads(prev_threads);
    ck_assert_mem_eq(y1->data, y2->data, sizeof(float) * 33 * 520);
    lt_qmatrix_free(q);
    LT_FREE_ALL(wb, xb, y1, y2);
  }
  ck_assert_uint_eq(lt_qmatrix_bytes(NULL), 0);
  lt_qmatrix *q = LT_NNP(lt_qmatrix_quantize(w, LT_QFORMAT_Q8_0));
  ck_assert_uint_eq(lt_qmatrix_bytes(q), 40 * 3 * 34);
  lt_tensor *bad = rand_tensor(2, (int64_t[]){2, 95}, 1.0f);
  LT_EXPECT_NULL_ERR(lt_qmatrix_linear(bad, q, NULL), LT_ERR_SHAPE, "x is [2,95] f32, W is [40,96] q8_0");
  lt_tensor *bb = rand_tensor(1, (int64_t[]){39}, 1.0f);
  LT_EXPECT_NULL_ERR(lt_qmatrix_linear(x3, q, bb), LT_ERR_SHAPE, "bias is [39] f32");
  lt_tensor *xd = LT_NN(lt_to_dtype(x3, LT_DTYPE_F64));
  LT_EXPECT_NULL_ERR(lt_qmatrix_linear(xd, q, NULL), LT_ERR_DTYPE, "x and bias must be f32");
  LT_EXPECT_NULL_ERR(lt_qmatrix_linear(NULL, q, NULL), LT_ERR_NULL, "qmatrix_linear");
  LT_EXPECT_NULLP_ERR(lt_qmatrix_quantize(xd, LT_QFORMAT_Q4_0), LT_ERR_DTYPE, "need f32");
  LT_EXPECT_NULLP_ERR(lt_qmatrix_quantize(bb, LT_QFORMAT_Q4_0), LT_ERR_SHAPE, "need 2-d");
  LT_EXPECT_NULLP_ERR(lt_qmatrix_from_blocks(LT_QFORMAT_Q4_0, 2, 48, lt_qmatrix_data(q)), LT_ERR_SHAPE, "48");
  LT_EXPECT_NULLP_ERR(lt_qmatrix_from_blocks(LT_QFORMAT_Q4_0, -1, 32, lt_qmatrix_data(q)), LT_ERR_INVALID, "-1");
  LT_EXPECT_NULLP_ERR(lt_qmatrix_from_blocks(LT_QFORMAT_Q8_0, (int64_t)1 << 40, (int64_t)1 << 30, lt_qmatrix_data(q)),
                      LT_ERR_OVERFLOW, "qmatrix_from_blocks");
  float rows[2 * 96];
  LT_EXPECT_ERR(lt_qmatrix_dequantize_rows(q, 39, 2, rows), LT_ERR_INDEX, "rows [39, 39 + 2)");
  /* a NaN in the activations reaches the outputs */
  ((float *)x3->data)[5] = NAN;
  lt_tensor *yn = LT_NN(lt_qmatrix_linear(x3, q, NULL));
  ck_assert(isnan(((float *)yn->data)[0]));
  ck_assert(!isnan(((float *)yn->data)[40]));
  /* a NaN weight is refused */
  ((float *)w->data)[7] = NAN;
  LT_EXPECT_NULLP_ERR(lt_qmatrix_quantize(w, LT_QFORMAT_Q8_0), LT_ERR_NUMERIC, "row 0");
  lt_qmatrix_free(q);
  LT_FREE_ALL(w, x3, xt, xv, bad, bb, xd, yn);
}
END_TEST

/* The rows of a batch below 16 (the row tiles of every SIMD kernel) give
 * the bits of each row alone: several cache blocks, an odd block count per
 * row (K 1050: 33 blocks), a last tile of W of 3 rows, two threads. */
START_TEST(test_linear_prompt_rows_alone) {
  enum { M = 12, N = 1031, K = 1050 };
  lt_tensor *w = rand_tensor(2, (int64_t[]){N, K}, 0.5f), *x = rand_tensor(2, (int64_t[]){M, K}, 2.0f);
  const lt_qformat fmts[2] = {LT_QFORMAT_Q8_0, LT_QFORMAT_Q4_0};
  for (int f = 0; f < 2; f++) {
    lt_qmatrix *q = LT_NNP(lt_qmatrix_quantize(w, fmts[f]));
    lt_tensor *y = LT_NN(lt_qmatrix_linear(x, q, NULL));
    for (int64_t m = 0; m < M; m++) {
      lt_tensor *xm = LT_NN(lt_narrow(x, 0, m, 1));
      lt_tensor *ym = LT_NN(lt_qmatrix_linear(xm, q, NULL));
      ck_assert_mem_eq((const float *)y->data + m * N, ym->data, sizeof(float) * N);
      LT_FREE_ALL(xm, ym);
    }
    lt_qmatrix_free(q);
    LT_FREE_ALL(y);
  }
  LT_FREE_ALL(w, x);
}
END_TEST

/* Q8_0 weights of -128 (a file may hold them; lt_quantize_row never
 * writes them) against activations of +-127: the SIMD kernels' 16-bit pair
 * sums (AVX2's vpmaddubsw saturates at 32767) give the portable result. */
START_TEST(test_linear_q8_0_extremes) {
  enum { N = 6, K = 96, NB = K / 32 };
  lt_block_q8_0 blk[N * NB];
  for (int i = 0; i < N * NB; i++) {
    blk[i].d = lt_f16_from_f32(0.5f);
    for (int j = 0; j < 32; j++) blk[i].qs[j] = (int8_t)(j % 3 == 0 ? -128 : i % 2 ? 127 : -127);
  }
  lt_qmatrix *q = LT_NNP(lt_qmatrix_from_blocks(LT_QFORMAT_Q8_0, N, K, blk));
  lt_tensor *x = LT_NN(lt_empty(LT_DTYPE_F32, 2, (int64_t[]){5, K}));
  for (int i = 0; i < 5 * K; i++) ((float *)x->data)[i] = i % 2 ? -127.0f : 127.0f; /* scale 1, quants +-127 */
  lt_tensor *y = LT_NN(lt_qmatrix_linear(x, q, NULL));
  const lt__qdot_kind prev = lt__qdot_limit(LT__QDOT_PORTABLE);
  lt_tensor *yp = LT_NN(lt_qmatrix_linear(x, q, NULL));
  lt__qdot_limit(prev);
  for (int i = 0; i < 5 * N; i++) /* integer sums times powers of two: exact in every order */
    ck_assert_msg(((float *)y->data)[i] == ((float *)yp->data)[i], "%s: y[%d] = %g, portable %g",
                  lt_qmatrix_kernel(LT_QFORMAT_Q8_0), i, ((float *)y->data)[i], ((float *)yp->data)[i]);
  lt_qmatrix_free(q);
  LT_FREE_ALL(x, y, yp);
}
END_TEST

/* lt_qmatrix_linear_many and lt_linear_many give each matrix's
 * lt_qmatrix_linear / lt_linear bits (one parallel region over the rows of
 * all of them: a tile range may span two matrices), with and without
 * biases, on 2 threads and 1; the errors set no output. */
START_TEST(test_linear_many) {
  const lt_qformat fmts[3] = {LT_QFORMAT_Q8_0, LT_QFORMAT_Q4_0, LT_QFORMAT_BF16};
  const int64_t Ns[3] = {37, 5, 1030}, Ms[3] = {1, 3, 17}, K = 100;
  lt_tensor *w[3], *b[3];
  for (int i = 0; i < 3; i++) w[i] = rand_tensor(2, (int64_t[]){Ns[i], K}, 0.5f), b[i] = rand_tensor(1, &Ns[i], 1.0f);
  const lt_tensor *bias[3] = {b[0], NULL, b[2]};
  for (int f = 0; f < 3; f++) {
    lt_qmatrix *q[3];
    for (int i = 0; i < 3; i++) q[i] = LT_NNP(lt_qmatrix_quantize(w[i], fmts[f]));
    for (int mi = 0; mi < 3; mi++)
      for (int threads = 2; threads >= 1; threads--) {
        const int prev = lt_get_num_threads();
        lt_set_num_threads(threads);
        lt_tensor *x = rand_tensor(2, (int64_t[]){Ms[mi], K}, 2.0f), *y[3];
        ck_assert_int_eq(lt_qmatrix_linear_many(x, 3, (const lt_qmatrix *const *)q, bias, y), LT_OK);
        for (int i = 0; i < 3; i++) {
          lt_tensor *y1 = LT_NN(lt_qmatrix_linear(x, q[i], bias[i]));
          ck_assert_msg(memcmp(y[i]->data, y1->data, sizeof(float) * (size_t)(Ms[mi] * Ns[i])) == 0,
                        "%s M %lld: matrix %d not lt_qmatrix_linear's bits", lt_qformat_name(fmts[f]),
                        (long long)Ms[mi], i);
          LT_FREE_ALL(y1, y[i]);
        }
        lt_set_num_threads(prev);
        LT_FREE_ALL(x);
      }
    for (int i = 0; i < 3; i++) lt_qmatrix_free(q[i]);
  }
  /* errors: n out of range, two formats, a K that differs; nothing set */
  lt_qmatrix *q8 = LT_NNP(lt_qmatrix_quantize(w[0], LT_QFORMAT_Q8_0)), *q4 = LT_NNP(lt_qmatrix_quantize(w[1], LT_QFORMAT_Q4_0));
  lt_tensor *w2 = rand_tensor(2, (int64_t[]){4, 64}, 0.5f);
  lt_qmatrix *k64 = LT_NNP(lt_qmatrix_quantize(w2, LT_QFORMAT_Q8_0));
  lt_tensor *x = rand_tensor(2, (int64_t[]){2, K}, 1.0f), *y[LT_QMATRIX_MANY_MAX + 1];
  const lt_qmatrix *mixed[2] = {q8, q4}, *ks[2] = {q8, k64}, *many[LT_QMATRIX_MANY_MAX + 1];
  for (int i = 0; i <= LT_QMATRIX_MANY_MAX; i++) many[i] = q8;
  y[0] = y[1] = (lt_tensor *)1;
  ck_assert_int_eq(lt_qmatrix_linear_many(x, 2, mixed, NULL, y), LT_ERR_INVALID);
  ck_assert_ptr_null(y[0]);
  ck_assert_ptr_null(y[1]);
  ck_assert_ptr_nonnull(strstr(lt_last_error(), "one format"));
  ck_assert_int_eq(lt_qmatrix_linear_many(x, 2, ks, NULL, y), LT_ERR_SHAPE);
  ck_assert_ptr_null(y[0]);
  ck_assert_ptr_null(y[1]);
  ck_assert_int_eq(lt_qmatrix_linear_many(x, 0, many, NULL, y), LT_ERR_INVALID);
  ck_assert_int_eq(lt_qmatrix_linear_many(x, LT_QMATRIX_MANY_MAX + 1, many, NULL, y), LT_ERR_INVALID);
  /* lt_linear_many: quantized weights of one format fused, others one by one, the same bits */
  lt_tensor *t[3];
  for (int i = 0; i < 3; i++) t[i] = rand_tensor(2, (int64_t[]){Ns[i], K}, 0.5f);
  lt_tensor *ref[3];
  for (int pass = 0; pass < 2; pass++) { /* f32, then Q8_0 */
    const lt_tensor *tw[3] = {t[0], t[1], t[2]};
    ck_assert_int_eq(lt_linear_many(x, 3, tw, bias, y), LT_OK);
    for (int i = 0; i < 3; i++) {
      ref[i] = LT_NN(lt_linear(x, t[i], bias[i]));
      ck_assert_mem_eq(y[i]->data, ref[i]->data, sizeof(float) * (size_t)(2 * Ns[i]));
      LT_FREE_ALL(ref[i], y[i]);
    }
    for (int i = 0; pass == 0 && i < 3; i++) ck_assert_int_eq(lt_tensor_quantize_(t[i], LT_QFORMAT_Q8_0), LT_OK);
  }
  lt_tensor *xg = rand_tensor(2, (int64_t[]){2, K}, 1.0f);
  ck_assert_int_eq(lt_requires_grad_(xg, true), LT_OK);
  const lt_tensor *tw[2] = {t[0], t[1]};
  ck_assert_int_eq(lt_linear_many(xg, 2, tw, NULL, y), LT_ERR_AUTOGRAD);
  ck_assert_ptr_null(y[0]);
  ck_assert_ptr_null(y[1]);
  lt_qmatrix_free(q8), lt_qmatrix_free(q4), lt_qmatrix_free(k64);
  LT_FREE_ALL(x, xg, w2, t[0], t[1], t[2], w[0], w[1], w[2], b[0], b[1], b[2]);
}
END_TEST

/* The SIMD kernels on a prompt (16 rows of x and more: W in groups of 8
 * rows (AVX2) or 16 (AVX-512), one per lane) give the portable kernel's
 * bits: each element's sum in its order and roundings. Several cache
 * blocks, a last group of 3 or 11 rows, an odd block count, a last tile of
 * x of 5 rows (AVX-512: tiles of 8), two threads and one. */
START_TEST(test_linear_prompt_bits) {
  const int64_t Ms[] = {16, 37}, Ks[] = {1050, 96};
  const lt_qformat fmts[2] = {LT_QFORMAT_Q8_0, LT_QFORMAT_Q4_0};
  const lt__qdot_kind kinds[2] = {LT__QDOT_AVX2, LT__QDOT_AVX512};
  for (int kd = 0; kd < 2 && lt__qdot_best() >= kinds[kd]; kd++)
    for (int i = 0; i < 2; i++) {
      lt_tensor *w = rand_tensor(2, (int64_t[]){1035, Ks[i]}, 0.5f), *x = rand_tensor(2, (int64_t[]){Ms[i], Ks[i]}, 2.0f);
      for (int f = 0; f < 2; f++) {
        lt_qmatrix *q = LT_NNP(lt_qmatrix_quantize(w, fmts[f]));
        const lt__qdot_kind prev = lt__qdot_limit(kinds[kd]);
        lt_tensor *y = LT_NN(lt_qmatrix_linear(x, q, NULL));
        const int threads = lt_get_num_threads();
        lt_set_num_threads(1);
        lt_tensor *y1 = LT_NN(lt_qmatrix_linear(x, q, NULL));
        lt_set_num_threads(threads);
        lt__qdot_limit(LT__QDOT_PORTABLE);
        lt_tensor *yp = LT_NN(lt_qmatrix_linear(x, q, NULL));
        lt__qdot_limit(prev);
        ck_assert_msg(memcmp(y->data, yp->data, sizeof(float) * (size_t)(Ms[i] * 1035)) == 0, "%s %s M %lld K %lld: "
                      "not the portable bits", kd ? "AVX-512" : "AVX2", lt_qformat_name(fmts[f]), (long long)Ms[i],
                      (long long)Ks[i]);
        ck_assert_mem_eq(y1->data, yp->data, sizeof(float) * (size_t)(Ms[i] * 1035));
        lt_qmatrix_free(q);
        LT_FREE_ALL(y, y1, yp);
      }
      LT_FREE_ALL(w, x);
    }
}
END_TEST

int main(void) {
  Suite *s = suite_create("quant");
  TCase *tc = tcase_create("formats");
  tcase_add_test(tc, test_blocks_match_gguf);
  tcase_add_test(tc, test_bf16_f16_match_gguf);
  tcase_add_test(tc, test_f16_round_trip);
  tcase_add_test(tc, test_sizes_names_errors);
  suite_add_tcase(s, tc);
  TCase *tp = tcase_create("product");
  tcase_set_timeout(tp, 120);
  tcase_add_test(tp, test_linear_best_kernel);
  tcase_add_test(tp, test_linear_portable);
  tcase_add_test(tp, test_linear_avx2);
  tcase_add_test(tp, test_linear_views_errors);
  tcase_add_test(tp, test_linear_every_path);
  tcase_add_test(tp, test_linear_prompt_rows_alone);
  tcase_add_test(tp, test_linear_q8_0_extremes);
  tcase_add_test(tp, test_linear_prompt_bits);
  tcase_add_test(tp, test_linear_many);
#ifdef LT__QDOT_X86
  tcase_add_test(tp, test_activation_quantizer);
#endif
  suite_add_tcase(s, tp);
  return lt_test_run(s);
}
