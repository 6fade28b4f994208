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

#include "tensor/quant.h"
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

int main(void) {
  Suite *s = suite_create("quant");
  TCase *tc = tcase_create("formats");
  tcase_add_test(tc, test_blocks_match_gguf);
  tcase_add_test(tc, test_bf16_f16_match_gguf);
  tcase_add_test(tc, test_f16_round_trip);
  tcase_add_test(tc, test_sizes_names_errors);
  suite_add_tcase(s, tc);
  return lt_test_run(s);
}
