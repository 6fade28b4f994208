/*
 * tensor/quant.c: the weight formats of tensor/quant.h: names, sizes, and
 * ggml's reference row conversions (f32 <-> f16, bf16, Q8_0, Q4_0).
 *
 * What it is not: the quantized products (they read these blocks; they
 * live with the other kernels). The conversions here are the plain
 * reference loops, written for bit equality with ggml rather than speed;
 * quantizing a model is done once.
 */
#include "tensor/quant.h"
#include "tensor/quant_internal.h"

#include "tensor/error_internal.h"
#include "tensor/storage_internal.h" /* lt__bf16_from_f32 */

#include <math.h>
#include <string.h>

static const char *const qformat_names[LT_QFORMAT_COUNT] = {"f32", "bf16", "q8_0", "q4_0"};
static const lt_enum_alias qformat_aliases[] = {
    {"fp32", LT_QFORMAT_F32}, {"q8", LT_QFORMAT_Q8_0}, {"q4", LT_QFORMAT_Q4_0}};

const char *lt_qformat_name(lt_qformat f) { return lt_enum_name(qformat_names, LT_QFORMAT_COUNT, (int)f); }

LT_ENUM_PARSER(lt_qformat_parse, lt_qformat, "weight format", qformat_names, LT_QFORMAT_COUNT, qformat_aliases, 3)

int64_t lt_qformat_block_elems(lt_qformat f) {
  switch (f) {
  case LT_QFORMAT_F32:
  case LT_QFORMAT_BF16: return 1;
  case LT_QFORMAT_Q8_0: return LT_QK8_0;
  case LT_QFORMAT_Q4_0: return LT_QK4_0;
  default: return 0;
  }
}

size_t lt_qformat_block_bytes(lt_qformat f) {
  switch (f) {
  case LT_QFORMAT_F32: return sizeof(float);
  case LT_QFORMAT_BF16: return sizeof(uint16_t);
  case LT_QFORMAT_Q8_0: return sizeof(lt_block_q8_0);
  case LT_QFORMAT_Q4_0: return sizeof(lt_block_q4_0);
  default: return 0;
  }
}

lt_status lt_qformat_row_bytes(lt_qformat f, int64_t n, size_t *bytes) {
  if (!bytes) return lt__err_null("qformat_row_bytes", "bytes");
  const int64_t be = lt_qformat_block_elems(f);
  if (be == 0) return lt__err(LT_ERR_INVALID, "qformat_row_bytes: unknown weight format %d", (int)f);
  if (n < 0) return lt__err(LT_ERR_INVALID, "qformat_row_bytes: %s row of %lld weights", lt_qformat_name(f), (long long)n);
  if (n % be != 0)
    return lt__err(LT_ERR_SHAPE, "qformat_row_bytes: a %s row of %lld weights: not a multiple of the block of %lld",
                   lt_qformat_name(f), (long long)n, (long long)be);
  size_t total;
  if (n > ((int64_t)1 << 62) || __builtin_mul_overflow((size_t)(n / be), lt_qformat_block_bytes(f), &total))
    return lt__err(LT_ERR_OVERFLOW, "qformat_row_bytes: a %s row of %lld weights overflows", lt_qformat_name(f),
                   (long long)n);
  *bytes = total;
  return LT_OK;
}

/* ---- f16 ------------------------------------------------------------------ */

static inline uint32_t f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}
static inline float f32_from_bits(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

/* ggml_compute_fp32_to_fp16 (from the FP16 library of M. Dukhan): the
 * rounding to 10 mantissa bits is done by the FPU, adding the value to a
 * power of two that puts the f16's last kept bit at the f32's last bit
 * (round to nearest even; needs the default rounding mode and no
 * contraction, which -std=c11 gives). */
uint16_t lt_f16_from_f32(float f) {
  const float scale_to_inf = f32_from_bits(0x77800000u);
  const float scale_to_zero = f32_from_bits(0x08800000u);
  float base = (fabsf(f) * scale_to_inf) * scale_to_zero;
  const uint32_t w = f32_bits(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = f32_from_bits((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = f32_bits(base);
  const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const uint32_t mantissa_bits = bits & 0x00000FFFu;
  const uint32_t nonsign = exp_bits + mantissa_bits;
  return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

/* Exact (every f16 is an f32): normal and special values by moving the
 * exponent, subnormals by scaling their integer mantissa. */
float lt_f32_from_f16(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
  float v;
  if (e == 0) {
    v = (float)m * 0x1p-24f; /* zero or subnormal: m * 2^-24, exact */
    return f32_from_bits(f32_bits(v) | sign);
  }
  if (e == 31) return f32_from_bits(sign | 0x7F800000u | (m << 13));
  return f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

/* ---- rows ----------------------------------------------------------------- */

/* The conversion of a scaled weight to an integer, as ggml's casts run on
 * x86-64 (cvttss2si, then the low byte): a value that is not finite (a
 * block whose largest weight is below about 4e-37 makes 1/d infinite)
 * becomes 0 instead of undefined behaviour. Finite values here are within
 * [-127, 127] (Q8_0) or [0, 16.5] (Q4_0). */
static inline int8_t to_i8(float v) { return isfinite(v) ? (int8_t)v : 0; }

/* quantize_row_q8_0_ref */
void lt__quantize_q8_0(const float *x, lt_block_q8_0 *y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++) {
    const float *xb = x + i * LT_QK8_0;
    float amax = 0.0f;
    for (int j = 0; j < LT_QK8_0; j++) amax = fmaxf(amax, fabsf(xb[j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = lt_f16_from_f32(d);
    for (int j = 0; j < LT_QK8_0; j++) y[i].qs[j] = to_i8(roundf(xb[j] * id));
  }
}

static void q8_0_to_f32(const lt_block_q8_0 *x, float *y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++) {
    const float d = lt_f32_from_f16(x[i].d);
    for (int j = 0; j < LT_QK8_0; j++) y[i * LT_QK8_0 + j] = (float)x[i].qs[j] * d;
  }
}

/* quantize_row_q4_0_ref */
static void q4_0_from_f32(const float *x, lt_block_q4_0 *y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++) {
    const float *xb = x + i * LT_QK4_0;
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < LT_QK4_0; j++)
      if (amax < fabsf(xb[j])) {
        amax = fabsf(xb[j]);
        max = xb[j];
      }
    const float d = max / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = lt_f16_from_f32(d);
    for (int j = 0; j < LT_QK4_0 / 2; j++) {
      const int8_t q0 = to_i8(xb[j] * id + 8.5f), q1 = to_i8(xb[j + LT_QK4_0 / 2] * id + 8.5f);
      const uint8_t xi0 = (uint8_t)(q0 < 15 ? q0 : 15), xi1 = (uint8_t)(q1 < 15 ? q1 : 15);
      y[i].qs[j] = (uint8_t)(xi0 | (xi1 << 4));
    }
  }
}

static void q4_0_to_f32(const lt_block_q4_0 *x, float *y, int64_t nb) {
  for (int64_t i = 0; i < nb; i++) {
    const float d = lt_f32_from_f16(x[i].d);
    for (int j = 0; j < LT_QK4_0 / 2; j++) {
      y[i * LT_QK4_0 + j] = (float)((x[i].qs[j] & 0x0F) - 8) * d;
      y[i * LT_QK4_0 + j + LT_QK4_0 / 2] = (float)((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

static lt_status row_check(const char *op, lt_qformat f, const void *a, const void *b, int64_t n, size_t *bytes) {
  if (!a) return lt__err_null(op, "src");
  if (!b) return lt__err_null(op, "dst");
  lt_status s = lt_qformat_row_bytes(f, n, bytes);
  if (s != LT_OK) return lt__err(s, "%s: %s", op, lt_last_error());
  return LT_OK;
}

lt_status lt_quantize_row(lt_qformat f, const float *x, int64_t n, void *dst) {
  size_t bytes;
  lt_status s = row_check("quantize_row", f, x, dst, n, &bytes);
  if (s != LT_OK) return s;
  if (f == LT_QFORMAT_Q8_0 || f == LT_QFORMAT_Q4_0)
    for (int64_t j = 0; j < n; j++)
      if (!isfinite(x[j]))
        return lt__err(LT_ERR_NUMERIC, "quantize_row: %s: weight %lld of %lld is %g (blocks need finite weights)",
                       lt_qformat_name(f), (long long)j, (long long)n, (double)x[j]);
  switch (f) {
  case LT_QFORMAT_F32: memcpy(dst, x, bytes); break;
  case LT_QFORMAT_BF16: {
    uint16_t *y = dst;
    for (int64_t j = 0; j < n; j++) y[j] = lt__bf16_from_f32(x[j]);
    break;
  }
  case LT_QFORMAT_Q8_0: lt__quantize_q8_0(x, dst, n / LT_QK8_0); break;
  case LT_QFORMAT_Q4_0: q4_0_from_f32(x, dst, n / LT_QK4_0); break;
  default: LT_CHECK(0);
  }
  return LT_OK;
}

lt_status lt_dequantize_row(lt_qformat f, const void *src, int64_t n, float *y) {
  size_t bytes;
  lt_status s = row_check("dequantize_row", f, src, y, n, &bytes);
  if (s != LT_OK) return s;
  switch (f) {
  case LT_QFORMAT_F32: memcpy(y, src, bytes); break;
  case LT_QFORMAT_BF16: {
    const uint16_t *x = src;
    for (int64_t j = 0; j < n; j++) y[j] = lt__f32_from_bf16(x[j]);
    break;
  }
  case LT_QFORMAT_Q8_0: q8_0_to_f32(src, y, n / LT_QK8_0); break;
  case LT_QFORMAT_Q4_0: q4_0_to_f32(src, y, n / LT_QK4_0); break;
  default: LT_CHECK(0);
  }
  return LT_OK;
}
