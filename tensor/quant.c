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
#include <stdio.h>
#include <stdlib.h>
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

/* ---- building quantized weights in place ----------------------------------- */

lt_qmatrix *lt_qmatrix_new(lt_qformat f, int64_t N, int64_t K) {
  if (f == LT_QFORMAT_F32)
    return lt__err(LT_ERR_INVALID, "qmatrix_new: f32 is not a quantized format (an f32 weight is a tensor)"), NULL;
  lt_qmatrix *m = lt__qmatrix_alloc("qmatrix_new", f, N, K);
  if (m && lt_qmatrix_bytes(m)) memset((void *)lt_qmatrix_data(m), 0, lt_qmatrix_bytes(m)); /* ours: quant_internal.h */
  return m;
}

/* The checks lt_tensor_quantize_ and lt_tensor_set_qmatrix_ share. */
static lt_status weight_check(const char *op, const lt_tensor *t) {
  if (t->qmatrix_) return lt__err(LT_ERR_STATE, "%s: t %s is already quantized", op, LT__D(t));
  if (t->dtype != LT_DTYPE_F32) return lt__err(LT_ERR_DTYPE, "%s: t is %s: need f32", op, LT__D(t));
  if (t->ndim != 2) return lt__err(LT_ERR_SHAPE, "%s: t is %s: need 2-d [N, K]", op, LT__D(t));
  if (t->grad_fn) return lt__err(LT_ERR_STATE, "%s: t %s is the output of an op, not a weight", op, LT__D(t));
  /* strides 0: a weight built quantized (nn/nn.h's lt_set_weight_format) before its values came */
  if (t->offset != 0 || (!lt_is_contiguous(t) && (t->stride[0] != 0 || t->stride[1] != 0)) || lt__storage_shared(t))
    return lt__err(LT_ERR_INVALID, "%s: t %s is a view (offset or strides) or shares its memory: quantize the weight "
                   "itself", op, LT__D(t));
  return LT_OK;
}

lt_status lt_tensor_set_qmatrix_(lt_tensor *t, lt_qmatrix *q) {
  const char *op = "tensor_set_qmatrix_";
  lt_status s = !t ? lt__err_null(op, "t") : !q ? lt__err_null(op, "q") : weight_check(op, t);
  if (s == LT_OK && (lt_qmatrix_rows(q) != t->shape[0] || lt_qmatrix_cols(q) != t->shape[1]))
    s = lt__err(LT_ERR_SHAPE, "%s: t is %s, the weights are [%lld, %lld] %s", op, LT__D(t),
                (long long)lt_qmatrix_rows(q), (long long)lt_qmatrix_cols(q), lt_qformat_name(lt_qmatrix_format(q)));
  /* the values become one zero broadcast to [N, K]: an own storage of one
   * float, strides 0 */
  lt_tensor *one = s == LT_OK ? lt_zeros(LT_DTYPE_F32, 1, (int64_t[]){1}) : NULL;
  lt_tensor *z = one ? lt__view_of(one, 2, t->shape, (int64_t[]){0, 0}, 0) : NULL;
  lt_tensor_free(one);
  if (z) z = lt_tensor_keep(z); /* out of any open scope: take_storage wants a fresh tensor */
  if (!z) {
    lt_qmatrix_free(q);
    return s != LT_OK ? s : lt_last_status();
  }
  lt_tensor *g = t->grad; /* a weight held for inference has no gradient */
  t->grad = NULL;
  lt_tensor_free(g);
  lt__tensor_take_storage(t, z);
  t->requires_grad = false;
  t->qmatrix_ = q;
  return LT_OK;
}

lt_tensor *lt_quantized_zeros(lt_qformat f, int64_t N, int64_t K) {
  lt_qmatrix *q = lt_qmatrix_new(f, N, K);
  if (!q) return NULL;
  lt_tensor *one = lt_zeros(LT_DTYPE_F32, 1, (int64_t[]){1});
  lt_tensor *t = one ? lt__view_of(one, 2, (int64_t[]){N, K}, (int64_t[]){0, 0}, 0) : NULL;
  lt_tensor_free(one);
  if (t) t = lt_tensor_keep(t);
  if (!t) {
    lt_qmatrix_free(q);
    return NULL;
  }
  if (lt_tensor_set_qmatrix_(t, q) != LT_OK) {
    lt_tensor_free(t);
    return NULL;
  }
  return t;
}

/* t's matrix, writable (ours: quant_internal.h), rows [n0, n0 + count) checked. */
static lt_status qrows(const char *op, lt_tensor *t, int64_t n0, int64_t count, lt_qmatrix **m) {
  if (!t) return lt__err_null(op, "t");
  if (!(*m = t->qmatrix_)) return lt__err(LT_ERR_STATE, "%s: t %s is not quantized", op, LT__D(t));
  if (n0 < 0 || count < 0 || n0 > lt_qmatrix_rows(*m) - count)
    return lt__err(LT_ERR_INDEX, "%s: rows [%lld, %lld + %lld) of t [%lld, %lld] %s", op, (long long)n0, (long long)n0,
                   (long long)count, (long long)t->shape[0], (long long)t->shape[1],
                   lt_qformat_name(lt_qmatrix_format(*m)));
  return LT_OK;
}

lt_status lt_tensor_qset_rows_(lt_tensor *t, int64_t n0, const lt_tensor *rows) {
  const char *op = "tensor_qset_rows_";
  if (!rows) return lt__err_null(op, "rows");
  lt_qmatrix *m = NULL;
  if (rows->dtype != LT_DTYPE_F32) return lt__err(LT_ERR_DTYPE, "%s: rows is %s: need f32", op, LT__D(rows));
  if (t && (rows->ndim != 2 || rows->shape[1] != t->shape[1]))
    return lt__err(LT_ERR_SHAPE, "%s: rows is %s, t is %s: need [count, %lld]", op, LT__D(rows), LT__D(t),
                   (long long)t->shape[1]);
  lt_status s = qrows(op, t, n0, rows->ndim == 2 ? rows->shape[0] : 0, &m);
  if (s != LT_OK) return s;
  const lt_qformat f = lt_qmatrix_format(m);
  const int64_t K = lt_qmatrix_cols(m), Kp = lt_qmatrix_padded_cols(m);
  const size_t rb = lt_qmatrix_row_bytes(m);
  float *row = malloc(sizeof(float) * (size_t)(Kp > 0 ? Kp : 1));
  if (!row) return lt__err(LT_ERR_NOMEM, "%s: a row of %lld floats", op, (long long)Kp);
  const float *src = rows->data;
  char *dst = (char *)lt_qmatrix_data(m); /* ours: quant_internal.h */
  for (int64_t n = 0; n < rows->shape[0] && s == LT_OK; n++) {
    for (int64_t k = 0; k < K; k++) row[k] = src[n * rows->stride[0] + k * rows->stride[1]];
    for (int64_t k = K; k < Kp; k++) row[k] = 0.0f;
    if (lt_quantize_row(f, row, Kp, dst + (size_t)(n0 + n) * rb) != LT_OK)
      s = lt__err(lt_last_status(), "%s: t %s, row %lld: %s", op, LT__D(t), (long long)(n0 + n), lt_last_error());
  }
  free(row);
  return s;
}

lt_status lt_tensor_qset_blocks_(lt_tensor *t, int64_t n0, int64_t count, const void *src) {
  const char *op = "tensor_qset_blocks_";
  lt_qmatrix *m = NULL;
  lt_status s = qrows(op, t, n0, count, &m);
  if (s != LT_OK) return s;
  if (!src && count > 0) return lt__err_null(op, "src");
  if (lt_qmatrix_padded_cols(m) != lt_qmatrix_cols(m))
    return lt__err(LT_ERR_SHAPE, "%s: t is %s %s: rows of %lld weights are not whole blocks of %lld", op, LT__D(t),
                   lt_qformat_name(lt_qmatrix_format(m)), (long long)lt_qmatrix_cols(m),
                   (long long)lt_qformat_block_elems(lt_qmatrix_format(m)));
  const size_t rb = lt_qmatrix_row_bytes(m);
  if (count > 0) memcpy((char *)lt_qmatrix_data(m) + (size_t)n0 * rb, src, (size_t)count * rb);
  return LT_OK;
}
