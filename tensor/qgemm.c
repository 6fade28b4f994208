/*
 * tensor/qgemm.c: quantized weight matrices (lt_qmatrix, tensor/quant.h)
 * and y = x W^T with W in Q8_0, Q4_0 or bf16, as llama.cpp computes it
 * (ggml_vec_dot_q8_0_q8_0, ggml_vec_dot_q4_0_q8_0, ggml_vec_dot_bf16).
 *
 * The activations: each row of x is padded with zeros to the padded K of
 * W and quantized to Q8_0 blocks by the reference rounding
 * (lt__quantize_q8_0), unpacked to a float scale per block and the int8
 * quants. A block of x that holds a NaN or an infinity gets a NaN scale, so
 * the output is NaN as an f32 product would be.
 *
 * The kernels, per element y[m, n] = sum over blocks b of
 * (d_w[b] * d_x[b]) * isum_b, isum_b = sum_j qw_j * qx_j exact in int32:
 *   portable: that sum in order, one f32 accumulator;
 *   AVX-512: two blocks per 512-bit vpdpbusd (unsigned bytes times signed
 *     bytes, four products summed per 32-bit lane: lanes 0-7 belong to the
 *     first block, 8-15 to the second). vpdpbusd wants one operand
 *     unsigned: Q4_0's nibbles are (q + 8), so isum = dot(nibbles, x) -
 *     dot(8, x), the second computed once per activation block; Q8_0's
 *     activations are shifted instead, isum = dot(x + 128, w) - dot(128,
 *     w), the second once per weight block and row tile. The int32 lanes
 *     are converted to f32 and multiplied by the blocks' scales into 16 f32
 *     accumulators, summed across lanes at the end of the row.
 * bf16: x stays f32; each weight is widened to f32 exactly (a shift) and
 * multiplied and summed in f32 (FMA on AVX-512, 16 lanes; the portable
 * loop in order).
 *
 * Tiles: a row of W is read once per tile of up to QG_MR rows of x (so a
 * prompt of M tokens reads W ceil(M / QG_MR) times, a decoding step once);
 * the rows of W are split over the threads.
 *
 * What it is not: a GEMM for large M (no packing or cache blocking beyond
 * the row tile), or AMX-INT8 (not on the machines this was measured on;
 * nothing here would run there untested).
 */
#include "tensor/quant.h"
#include "tensor/quant_internal.h"

#include "tensor/error_internal.h"
#include "tensor/runtime_internal.h"
#include "tensor/storage_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 10
#define QG_X86 1
#include <immintrin.h>
#define QG_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c,avx2")))
#endif

#define QG_MR 4

struct lt_qmatrix {
  lt_qformat format;
  int64_t N, K, Kp;  /* rows, columns, columns padded to the block */
  size_t row_bytes;
  size_t bytes;
  void *data;        /* N * row_bytes, 64-byte aligned */
};

/* ---- the kernel switch ----------------------------------------------------- */

static lt__qdot_kind qd_limit = LT__QDOT_AVX512;
static int qd_best = -1;

lt__qdot_kind lt__qdot_best(void) {
  if (qd_best < 0) {
    int b = LT__QDOT_PORTABLE;
#ifdef QG_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c"))
      b = LT__QDOT_AVX512;
#endif
    const char *e = getenv("LT_QDOT");
    if (e && strcmp(e, "portable") == 0) qd_limit = LT__QDOT_PORTABLE;
    qd_best = b;
  }
  return (lt__qdot_kind)qd_best;
}

lt__qdot_kind lt__qdot_limit(lt__qdot_kind kind) {
  (void)lt__qdot_best();
  const lt__qdot_kind prev = qd_limit;
  qd_limit = kind;
  return prev;
}

static lt__qdot_kind qd_kind(void) {
  const lt__qdot_kind b = lt__qdot_best();
  return qd_limit < b ? qd_limit : b;
}

const char *lt_qmatrix_kernel(lt_qformat f) {
  const bool simd = qd_kind() == LT__QDOT_AVX512;
  switch (f) {
  case LT_QFORMAT_Q8_0:
  case LT_QFORMAT_Q4_0: return simd ? "AVX512-VNNI (vpdpbusd)" : "portable C";
  case LT_QFORMAT_BF16: return simd ? "AVX-512 FMA" : "portable C";
  case LT_QFORMAT_F32: return "BLIS (lt_linear)";
  default: return "unknown";
  }
}

/* ---- the matrix ------------------------------------------------------------ */

static lt_qmatrix *qm_alloc(const char *op, lt_qformat f, int64_t N, int64_t K) {
  if (N < 0 || K < 0)
    return lt__err(LT_ERR_INVALID, "%s: %lld rows of %lld weights", op, (long long)N, (long long)K), NULL;
  const int64_t be = lt_qformat_block_elems(f);
  if (be == 0) return lt__err(LT_ERR_INVALID, "%s: unknown weight format %d", op, (int)f), NULL;
  if (K > ((int64_t)1 << 40)) return lt__err(LT_ERR_OVERFLOW, "%s: rows of %lld weights", op, (long long)K), NULL;
  const int64_t Kp = (K + be - 1) / be * be;
  size_t rb, total, alloc;
  if (lt_qformat_row_bytes(f, Kp, &rb) != LT_OK) return lt__err(lt_last_status(), "%s: %s", op, lt_last_error()), NULL;
  if (__builtin_mul_overflow((size_t)N, rb, &total) || total > ((size_t)1 << 48))
    return lt__err(LT_ERR_OVERFLOW, "%s: %lld rows of %zu bytes", op, (long long)N, rb), NULL;
  lt_qmatrix *m = calloc(1, sizeof *m);
  alloc = (total + 63) / 64 * 64;
  void *d = alloc ? aligned_alloc(64, alloc) : NULL;
  if (!m || (alloc && !d)) {
    free(m);
    free(d);
    return lt__err(LT_ERR_NOMEM, "%s: %zu bytes for %lld x %lld %s weights", op, total, (long long)N, (long long)K,
                   lt_qformat_name(f)),
           NULL;
  }
  if (alloc > total) memset((char *)d + total, 0, alloc - total);
  *m = (lt_qmatrix){.format = f, .N = N, .K = K, .Kp = Kp, .row_bytes = rb, .bytes = total, .data = d};
  return m;
}

lt_qmatrix *lt__qmatrix_alloc(const char *op, lt_qformat f, int64_t N, int64_t K) { return qm_alloc(op, f, N, K); }

void lt_qmatrix_free(lt_qmatrix *m) {
  if (!m) return;
  free(m->data);
  free(m);
}

lt_qmatrix *lt_qmatrix_quantize(const lt_tensor *w, lt_qformat f) {
  if (!w) return lt__err_null("qmatrix_quantize", "w"), NULL;
  if (w->dtype != LT_DTYPE_F32)
    return lt__err(LT_ERR_DTYPE, "qmatrix_quantize: w is %s: need f32", LT__D(w)), NULL;
  if (w->ndim != 2) return lt__err(LT_ERR_SHAPE, "qmatrix_quantize: w is %s: need 2-d [N, K]", LT__D(w)), NULL;
  lt_qmatrix *m = qm_alloc("qmatrix_quantize", f, w->shape[0], w->shape[1]);
  if (!m) return NULL;
  float *row = malloc(sizeof(float) * (size_t)(m->Kp > 0 ? m->Kp : 1));
  if (!row) {
    const long long kp = (long long)m->Kp;
    lt_qmatrix_free(m);
    return lt__err(LT_ERR_NOMEM, "qmatrix_quantize: a row of %lld floats", kp), NULL;
  }
  const float *src = w->data;
  for (int64_t n = 0; n < m->N; n++) {
    for (int64_t k = 0; k < m->K; k++) row[k] = src[n * w->stride[0] + k * w->stride[1]];
    for (int64_t k = m->K; k < m->Kp; k++) row[k] = 0.0f;
    if (lt_quantize_row(f, row, m->Kp, (char *)m->data + (size_t)n * m->row_bytes) != LT_OK) {
      lt_status s = lt_last_status();
      char msg[256];
      snprintf(msg, sizeof msg, "%s", lt_last_error());
      free(row);
      lt_qmatrix_free(m);
      return lt__err(s, "qmatrix_quantize: w %s, row %lld: %s", LT__D(w), (long long)n, msg), NULL;
    }
  }
  free(row);
  return m;
}

lt_qmatrix *lt_qmatrix_from_blocks(lt_qformat f, int64_t N, int64_t K, const void *src) {
  if (!src && N > 0 && K > 0) return lt__err_null("qmatrix_from_blocks", "src"), NULL;
  const int64_t be = lt_qformat_block_elems(f);
  if (be > 0 && K >= 0 && K % be != 0)
    return lt__err(LT_ERR_SHAPE, "qmatrix_from_blocks: %s rows of %lld weights: not a multiple of the block of %lld",
                   lt_qformat_name(f), (long long)K, (long long)be),
           NULL;
  lt_qmatrix *m = qm_alloc("qmatrix_from_blocks", f, N, K);
  if (m && m->bytes) memcpy(m->data, src, m->bytes);
  return m;
}

lt_qformat lt_qmatrix_format(const lt_qmatrix *m) { return m ? m->format : LT_QFORMAT_COUNT; }
int64_t lt_qmatrix_rows(const lt_qmatrix *m) { return m ? m->N : 0; }
int64_t lt_qmatrix_cols(const lt_qmatrix *m) { return m ? m->K : 0; }
int64_t lt_qmatrix_padded_cols(const lt_qmatrix *m) { return m ? m->Kp : 0; }
size_t lt_qmatrix_row_bytes(const lt_qmatrix *m) { return m ? m->row_bytes : 0; }
size_t lt_qmatrix_bytes(const lt_qmatrix *m) { return m ? m->bytes : 0; }
const void *lt_qmatrix_data(const lt_qmatrix *m) { return m ? m->data : NULL; }

lt_status lt_qmatrix_dequantize_rows(const lt_qmatrix *m, int64_t n0, int64_t count, float *y) {
  if (!m) return lt__err_null("qmatrix_dequantize_rows", "m");
  if (!y && count > 0) return lt__err_null("qmatrix_dequantize_rows", "y");
  if (n0 < 0 || count < 0 || n0 > m->N - count)
    return lt__err(LT_ERR_INDEX, "qmatrix_dequantize_rows: rows [%lld, %lld + %lld) of a matrix of %lld rows",
                   (long long)n0, (long long)n0, (long long)count, (long long)m->N);
  float *row = m->Kp == m->K ? NULL : malloc(sizeof(float) * (size_t)m->Kp);
  if (m->Kp != m->K && !row) return lt__err(LT_ERR_NOMEM, "qmatrix_dequantize_rows: a row of %lld", (long long)m->Kp);
  for (int64_t i = 0; i < count; i++) {
    const void *src = (const char *)m->data + (size_t)(n0 + i) * m->row_bytes;
    float *dst = row ? row : y + i * m->K;
    LT_CHECK(lt_dequantize_row(m->format, src, m->Kp, dst) == LT_OK);
    if (row) memcpy(y + i * m->K, row, sizeof(float) * (size_t)m->K);
  }
  free(row);
  return LT_OK;
}

lt_tensor *lt_qmatrix_dequantize(const lt_qmatrix *m) {
  if (!m) return lt__err_null("qmatrix_dequantize", "m"), NULL;
  lt_tensor *t = lt_empty(LT_DTYPE_F32, 2, (int64_t[]){m->N, m->K});
  if (!t) return NULL;
  if (lt_qmatrix_dequantize_rows(m, 0, m->N, t->data) != LT_OK) {
    lt_tensor_free(t);
    return NULL;
  }
  return t;
}

/* ---- quantized weight tensors ------------------------------------------------ */

const lt_qmatrix *lt_tensor_qmatrix(const lt_tensor *t) { return t ? t->qmatrix_ : NULL; }

lt_status lt_tensor_quantize_(lt_tensor *t, lt_qformat f) {
  if (!t) return lt__err_null("tensor_quantize_", "t");
  if (t->qmatrix_) return lt__err(LT_ERR_STATE, "tensor_quantize_: t %s is already quantized", LT__D(t));
  if (t->dtype != LT_DTYPE_F32) return lt__err(LT_ERR_DTYPE, "tensor_quantize_: t is %s: need f32", LT__D(t));
  if (t->ndim != 2) return lt__err(LT_ERR_SHAPE, "tensor_quantize_: t is %s: need 2-d [N, K]", LT__D(t));
  if (t->grad_fn) return lt__err(LT_ERR_STATE, "tensor_quantize_: t %s is the output of an op, not a weight", LT__D(t));
  if (t->offset != 0 || !lt_is_contiguous(t))
    return lt__err(LT_ERR_INVALID, "tensor_quantize_: t %s is a view (offset or strides): quantize the weight itself",
                   LT__D(t));
  if (f == LT_QFORMAT_F32) return LT_OK;
  lt_qmatrix *q = lt_qmatrix_quantize(t, f);
  if (!q) return lt__err(lt_last_status(), "tensor_quantize_: %s", lt_last_error());
  return lt_tensor_set_qmatrix_(t, q);
}

/* ---- activations ------------------------------------------------------------ */

/* M rows of x quantized to Q8_0: scale xd[m * nb + b] (f32 of the f16
 * scale, NaN for a block that is not finite), quants xq[m * Kp + k]; for
 * the AVX-512 kernels also xu = xq + 128 (Q8_0 weights), per block the 8
 * lanes of dot(8, xq) (Q4_0 weights), and per block pair the scales in 16
 * lanes xs[(m * npair + p) * 16 + i] = xd[2p + i / 8]. */
typedef struct qact {
  int64_t M, nb, Kp;
  float *xd, *xs;
  int8_t *xq;
  uint8_t *xu;
  int32_t *c8;
} qact;

static void qact_free(qact *a) {
  free(a->xd);
  free(a->xs);
  free(a->xq);
  free(a->xu);
  free(a->c8);
}

/* x2: [M, K] contiguous f32. */
static lt_status qact_make(qact *a, const float *x2, int64_t M, int64_t K, int64_t Kp, lt_qformat f, bool simd) {
  const int64_t nb = Kp / LT_QK8_0;
  *a = (qact){.M = M, .nb = nb, .Kp = Kp};
  a->xd = malloc(sizeof(float) * (size_t)(M * nb + 1));
  a->xq = malloc((size_t)(M * Kp + 1));
  if (simd) a->xs = malloc(sizeof(float) * (size_t)(M * (nb / 2) * 16 + 1));
  if (simd && f == LT_QFORMAT_Q8_0) a->xu = malloc((size_t)(M * Kp + 1));
  if (simd && f == LT_QFORMAT_Q4_0) a->c8 = malloc(sizeof(int32_t) * (size_t)(M * nb * 8 + 1));
  float *row = malloc(sizeof(float) * (size_t)(Kp + 1));
  lt_block_q8_0 *blk = malloc(sizeof(lt_block_q8_0) * (size_t)(nb + 1));
  if (!a->xd || !a->xq || (simd && !a->xs) || (simd && f == LT_QFORMAT_Q8_0 && !a->xu) || (simd && f == LT_QFORMAT_Q4_0 && !a->c8) ||
      !row || !blk) {
    free(row);
    free(blk);
    qact_free(a);
    return lt__err(LT_ERR_NOMEM, "qmatrix_linear: quantized activations of %lld rows of %lld", (long long)M,
                   (long long)Kp);
  }
  for (int64_t m = 0; m < M; m++) {
    memcpy(row, x2 + m * K, sizeof(float) * (size_t)K);
    for (int64_t k = K; k < Kp; k++) row[k] = 0.0f;
    lt__quantize_q8_0(row, blk, nb);
    for (int64_t b = 0; b < nb; b++) {
      bool finite = true;
      for (int j = 0; j < LT_QK8_0; j++) finite = finite && isfinite(row[b * LT_QK8_0 + j]);
      a->xd[m * nb + b] = finite ? lt_f32_from_f16(blk[b].d) : NAN;
      int8_t *q = a->xq + m * Kp + b * LT_QK8_0;
      memcpy(q, blk[b].qs, LT_QK8_0);
      if (a->xu)
        for (int j = 0; j < LT_QK8_0; j++) a->xu[m * Kp + b * LT_QK8_0 + j] = (uint8_t)(q[j] + 128);
      if (a->c8)
        for (int i = 0; i < 8; i++)
          a->c8[(m * nb + b) * 8 + i] = 8 * (q[4 * i] + q[4 * i + 1] + q[4 * i + 2] + q[4 * i + 3]);
    }
  }
  for (int64_t m = 0; simd && m < M; m++)
    for (int64_t p = 0; p < nb / 2; p++)
      for (int i = 0; i < 16; i++) a->xs[(m * (nb / 2) + p) * 16 + i] = a->xd[m * nb + 2 * p + i / 8];
  free(row);
  free(blk);
  return LT_OK;
}

/* ---- portable kernels ------------------------------------------------------- */
/* y[m * ldy + n] for m < M, n in [n0, n1). */

static int32_t isum_q8_0(const lt_block_q8_0 *w, const int8_t *x) {
  int32_t isum = 0;
  for (int j = 0; j < LT_QK8_0; j++) isum += (int32_t)w->qs[j] * x[j];
  return isum;
}

static int32_t isum_q4_0(const lt_block_q4_0 *w, const int8_t *x) {
  int32_t isum = 0;
  for (int j = 0; j < LT_QK4_0 / 2; j++)
    isum += ((w->qs[j] & 0x0F) - 8) * x[j] + ((w->qs[j] >> 4) - 8) * x[j + LT_QK4_0 / 2];
  return isum;
}

/* Q8_0 and Q4_0 (both blocks start with their f16 scale). */
static void blocks_portable(const lt_qmatrix *w, const qact *a, int64_t n0, int64_t n1, float *y, int64_t ldy) {
  const size_t bb = lt_qformat_block_bytes(w->format);
  for (int64_t n = n0; n < n1; n++) {
    const char *wr = (const char *)w->data + (size_t)n * w->row_bytes;
    for (int64_t m = 0; m < a->M; m++) {
      const int8_t *xq = a->xq + m * a->Kp;
      const float *xd = a->xd + m * a->nb;
      float acc = 0.0f;
      for (int64_t b = 0; b < a->nb; b++) {
        const void *blk = wr + (size_t)b * bb;
        uint16_t d;
        memcpy(&d, blk, sizeof d);
        const int32_t isum = w->format == LT_QFORMAT_Q8_0 ? isum_q8_0(blk, xq + b * LT_QK8_0)
                                                          : isum_q4_0(blk, xq + b * LT_QK4_0);
        acc += (lt_f32_from_f16(d) * xd[b]) * (float)isum;
      }
      y[m * ldy + n] = acc;
    }
  }
}

/* x2 [M, K] f32 contiguous. */
static void bf16_portable(const lt_qmatrix *w, const float *x2, int64_t M, int64_t n0, int64_t n1, float *y,
                          int64_t ldy) {
  for (int64_t n = n0; n < n1; n++) {
    const uint16_t *wr = (const uint16_t *)((const char *)w->data + (size_t)n * w->row_bytes);
    for (int64_t m = 0; m < M; m++) {
      const float *xr = x2 + m * w->K;
      float acc = 0.0f;
      for (int64_t k = 0; k < w->K; k++) acc += lt__f32_from_bf16(wr[k]) * xr[k];
      y[m * ldy + n] = acc;
    }
  }
}

/* ---- AVX-512 kernels ---------------------------------------------------------- */
#ifdef QG_X86

QG_TARGET static inline float hsum16(__m512 v) { return _mm512_reduce_add_ps(v); }

/* The sum of 8 int32 lanes, as f32 (exact: each lane is below 2^24). */
QG_TARGET static inline float hsum8_epi32(__m256i isum) {
  __m256 v = _mm256_cvtepi32_ps(isum);
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

/* The f16 scales of a block pair in 16 f32 lanes: d0 in lanes 0-7, d1 in
 * 8-15 (vcvtph2ps, exact). */
QG_TARGET static inline __m512 pair_scale(uint16_t d0, uint16_t d1) {
  const __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)d0 | (uint32_t)d1 << 16)));
  return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                               _mm512_castps128_ps512(f));
}

QG_TARGET static void q8_0_avx512(const lt_qmatrix *w, const qact *a, int64_t n0, int64_t n1, float *y,
                                  int64_t ldy) {
  const int64_t nb = a->nb, npair = nb / 2;
  const __m512i c128 = _mm512_set1_epi8((char)0x80);
  for (int64_t m0 = 0; m0 < a->M; m0 += QG_MR) {
    const int mr = (int)(a->M - m0 < QG_MR ? a->M - m0 : QG_MR);
    for (int64_t n = n0; n < n1; n++) {
      const lt_block_q8_0 *wb = (const lt_block_q8_0 *)((const char *)w->data + (size_t)n * w->row_bytes);
      __m512 acc[QG_MR];
      for (int r = 0; r < QG_MR; r++) acc[r] = _mm512_setzero_ps();
      for (int64_t p = 0; p < npair; p++) {
        const lt_block_q8_0 *b0 = wb + 2 * p, *b1 = b0 + 1;
        const __m512i wv = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)b0->qs)),
                                              _mm256_loadu_si256((const __m256i *)b1->qs), 1);
        const __m512i corr = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c128, wv);
        const __m512 dw = pair_scale(b0->d, b1->d);
        for (int r = 0; r < mr; r++) {
          const int64_t m = m0 + r;
          const __m512i xv = _mm512_loadu_si512((const void *)(a->xu + m * a->Kp + 2 * p * LT_QK8_0));
          const __m512i isum = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), xv, wv), corr);
          const __m512 sc = _mm512_mul_ps(dw, _mm512_loadu_ps(a->xs + (m * npair + p) * 16));
          acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), sc, acc[r]);
        }
      }
      for (int r = 0; r < mr; r++) {
        float s = hsum16(acc[r]);
        if (nb & 1) { /* the last block alone, in 256 bits */
          const int64_t b = nb - 1, m = m0 + r;
          const __m256i wv = _mm256_loadu_si256((const __m256i *)wb[b].qs);
          const __m256i xv = _mm256_loadu_si256((const __m256i *)(a->xu + m * a->Kp + b * LT_QK8_0));
          const __m256i isum = _mm256_sub_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), xv, wv),
                                                _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm512_castsi512_si256(c128), wv));
          s += (lt_f32_from_f16(wb[b].d) * a->xd[m * nb + b]) * hsum8_epi32(isum);
        }
        y[(m0 + r) * ldy + n] = s;
      }
    }
  }
}

/* The 32 nibbles of a Q4_0 block as bytes: the low nibbles (weights 0-15)
 * then the high ones (16-31), each q + 8. */
QG_TARGET static inline __m256i q4_bytes(const lt_block_q4_0 *b) {
  const __m128i v = _mm_loadu_si128((const __m128i *)b->qs), lo = _mm_set1_epi8(0x0F);
  return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(v, lo)),
                                 _mm_and_si128(_mm_srli_epi16(v, 4), lo), 1);
}

QG_TARGET static void q4_0_avx512(const lt_qmatrix *w, const qact *a, int64_t n0, int64_t n1, float *y,
                                  int64_t ldy) {
  const int64_t nb = a->nb, npair = nb / 2;
  for (int64_t m0 = 0; m0 < a->M; m0 += QG_MR) {
    const int mr = (int)(a->M - m0 < QG_MR ? a->M - m0 : QG_MR);
    for (int64_t n = n0; n < n1; n++) {
      const lt_block_q4_0 *wb = (const lt_block_q4_0 *)((const char *)w->data + (size_t)n * w->row_bytes);
      __m512 acc[QG_MR];
      for (int r = 0; r < QG_MR; r++) acc[r] = _mm512_setzero_ps();
      for (int64_t p = 0; p < npair; p++) {
        const lt_block_q4_0 *b0 = wb + 2 * p, *b1 = b0 + 1;
        const __m512i wv = _mm512_inserti64x4(_mm512_castsi256_si512(q4_bytes(b0)), q4_bytes(b1), 1);
        const __m512 dw = pair_scale(b0->d, b1->d);
        for (int r = 0; r < mr; r++) {
          const int64_t m = m0 + r;
          const __m512i xv = _mm512_loadu_si512((const void *)(a->xq + m * a->Kp + 2 * p * LT_QK4_0));
          const __m512i c8 = _mm512_loadu_si512((const void *)(a->c8 + (m * nb + 2 * p) * 8));
          const __m512i isum = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), wv, xv), c8);
          const __m512 sc = _mm512_mul_ps(dw, _mm512_loadu_ps(a->xs + (m * npair + p) * 16));
          acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), sc, acc[r]);
        }
      }
      for (int r = 0; r < mr; r++) {
        float s = hsum16(acc[r]);
        if (nb & 1) {
          const int64_t b = nb - 1, m = m0 + r;
          const __m256i xv = _mm256_loadu_si256((const __m256i *)(a->xq + m * a->Kp + b * LT_QK4_0));
          const __m256i c8 = _mm256_loadu_si256((const __m256i *)(a->c8 + (m * nb + b) * 8));
          const __m256i isum = _mm256_sub_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), q4_bytes(&wb[b]), xv), c8);
          s += (lt_f32_from_f16(wb[b].d) * a->xd[m * nb + b]) * hsum8_epi32(isum);
        }
        y[(m0 + r) * ldy + n] = s;
      }
    }
  }
}

QG_TARGET static void bf16_avx512(const lt_qmatrix *w, const float *x2, int64_t M, int64_t n0, int64_t n1,
                                  float *y, int64_t ldy) {
  const int64_t K = w->K;
  for (int64_t m0 = 0; m0 < M; m0 += QG_MR) {
    const int mr = (int)(M - m0 < QG_MR ? M - m0 : QG_MR);
    for (int64_t n = n0; n < n1; n++) {
      const uint16_t *wr = (const uint16_t *)((const char *)w->data + (size_t)n * w->row_bytes);
      __m512 acc[QG_MR];
      for (int r = 0; r < QG_MR; r++) acc[r] = _mm512_setzero_ps();
      int64_t k = 0;
      for (; k + 16 <= K; k += 16) {
        const __m512 wv = _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(wr + k))), 16));
        for (int r = 0; r < mr; r++) acc[r] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x2 + (m0 + r) * K + k), acc[r]);
      }
      if (k < K) {
        const __mmask16 mk = (__mmask16)((1u << (K - k)) - 1);
        const __m512 wv = _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mk, wr + k)), 16));
        for (int r = 0; r < mr; r++)
          acc[r] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(mk, x2 + (m0 + r) * K + k), acc[r]);
      }
      for (int r = 0; r < mr; r++) y[(m0 + r) * ldy + n] = hsum16(acc[r]);
    }
  }
}

#endif /* QG_X86 */

/* ---- the product -------------------------------------------------------------- */

lt_tensor *lt_qmatrix_linear(const lt_tensor *x, const lt_qmatrix *w, const lt_tensor *bias) {
  if (!x) return lt__err_null("qmatrix_linear", "x"), NULL;
  if (!w) return lt__err_null("qmatrix_linear", "w"), NULL;
  if (lt__ensure_init() != LT_OK) return NULL;
  char wd[96];
  snprintf(wd, sizeof wd, "[%lld,%lld] %s", (long long)w->N, (long long)w->K, lt_qformat_name(w->format));
  if (x->dtype != LT_DTYPE_F32 || (bias && bias->dtype != LT_DTYPE_F32))
    return lt__err(LT_ERR_DTYPE, "qmatrix_linear: x is %s, W is %s, bias is %s: x and bias must be f32", LT__D(x), wd,
                   bias ? LT__D(bias) : "NULL"),
           NULL;
  if (x->ndim < 1 || x->shape[x->ndim - 1] != w->K || (bias && (bias->ndim != 1 || bias->shape[0] != w->N)))
    return lt__err(LT_ERR_SHAPE,
                   "qmatrix_linear: x is %s, W is %s, bias is %s: x must be [..., K] and bias [N] for W [N, K]",
                   LT__D(x), wd, bias ? LT__D(bias) : "NULL"),
           NULL;
  int64_t oshape[LT_MAX_DIMS];
  memcpy(oshape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
  oshape[x->ndim - 1] = w->N;
  lt_tensor *out = lt_empty(LT_DTYPE_F32, x->ndim, oshape);
  if (!out) return NULL;
  const int64_t M = w->K > 0 ? x->numel / w->K : (w->N > 0 ? out->numel / w->N : 0), N = w->N;
  if (M == 0 || N == 0) return out;
  if (w->format == LT_QFORMAT_F32) {
    lt_tensor_free(out);
    return lt__err(LT_ERR_INVALID, "qmatrix_linear: W is %s: f32 weights go through lt_linear", wd), NULL;
  }
  lt_tensor *tmp = NULL, *bt = NULL;
  const lt_tensor *xc = lt__as_contig(x, LT_DTYPE_F32, &tmp);
  const lt_tensor *bc = bias ? lt__as_contig(bias, LT_DTYPE_F32, &bt) : NULL;
  if (!xc || (bias && !bc)) {
    lt_tensor_free(out), lt_tensor_free(tmp), lt_tensor_free(bt);
    return NULL;
  }
  if (lt__qgemm_bf16_wanted(w, M)) { /* a prompt or a batch in bf16: oneDNN (tensor/qgemm_bf16.c) */
    lt_status s = lt__qgemm_bf16(w, xc->data, M, out->data, bc ? bc->data : NULL);
    lt_tensor_free(tmp), lt_tensor_free(bt);
    if (s == LT_OK) return out;
    lt_tensor_free(out);
    return NULL;
  }
  const lt__qdot_kind kind = qd_kind();
  const bool simd = kind == LT__QDOT_AVX512;
  qact a = {0};
  if (w->format != LT_QFORMAT_BF16 && qact_make(&a, xc->data, M, w->K, w->Kp, w->format, simd) != LT_OK) {
    lt_tensor_free(out), lt_tensor_free(tmp), lt_tensor_free(bt);
    return NULL;
  }
  float *y = out->data;
  int nt = (double)M * (double)N * (double)w->K < LT__BLAS_SMALL_MACS || omp_in_parallel() ? 1 : lt_get_num_threads();
  if (nt > N) nt = (int)N;
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
    /* contiguous row ranges of W, one per thread (deterministic: the sums
     * of an element never depend on the split) */
    const int64_t n0 = N * t / T, n1 = N * (t + 1) / T;
    switch (w->format) {
    case LT_QFORMAT_Q8_0:
#ifdef QG_X86
      if (simd) q8_0_avx512(w, &a, n0, n1, y, N); else
#endif
      blocks_portable(w, &a, n0, n1, y, N);
      break;
    case LT_QFORMAT_Q4_0:
#ifdef QG_X86
      if (simd) q4_0_avx512(w, &a, n0, n1, y, N); else
#endif
      blocks_portable(w, &a, n0, n1, y, N);
      break;
    default:
#ifdef QG_X86
      if (simd) bf16_avx512(w, xc->data, M, n0, n1, y, N); else
#endif
      bf16_portable(w, xc->data, M, n0, n1, y, N);
      break;
    }
  }
  if (bc) {
    const float *bv = bc->data;
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = 0; n < N; n++) y[m * N + n] += bv[n];
  }
  qact_free(&a);
  lt_tensor_free(tmp), lt_tensor_free(bt);
  return out;
}
