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
 *   portable (here): that sum in order, one f32 accumulator; bf16: each
 *     weight widened to f32 exactly, products summed in order;
 *   AVX-512 (tensor/qgemm_vnni.c): vpdpbusd for Q8_0 and Q4_0, FMA for
 *     bf16, in register tiles of rows of x by rows of W and cache blocks of
 *     W (that file's opening);
 *   AVX2 (tensor/qgemm_avx2.c), where AVX512-VNNI is missing: vpmaddubsw
 *     for Q8_0 and Q4_0, FMA for bf16, in the same tiles and blocks.
 *
 * Threads: the rows of W split over them in equal parts (equal bytes: every
 * row of a matrix is the same size), in multiples of 4 rows (the kernels'
 * tile), once the product has 2^22 multiply-adds or W QG_SPLIT_BYTES
 * (decoding, M = 1: a 768 x 768 matrix is 2^19 multiply-adds, but its
 * bytes take longer to stream than a second thread takes to wake).
 *
 * What it is not: AMX-INT8 (not on the machines this was measured on;
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

#include "tensor/cpu_internal.h"

/* Weight bytes from which a product splits over the threads whatever its
 * multiply-adds (the opening). */
#define QG_SPLIT_BYTES (256 * 1024)
/* Activations from which their quantization splits over the threads. */
#define QG_FILL_SPLIT (64.0 * 1024)

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
#ifdef LT__QDOT_X86
    const lt__cpu_info *c = lt__cpu(); /* the flags of the path qdot=vnni (tensor/paths.def) */
    if (c->avx2 && c->fma && c->f16c) b = LT__QDOT_AVX2; /* qdot=avx2 */
    if (c->avx512f && c->avx512bw && c->avx512vl && c->avx512vnni && c->fma && c->f16c) b = LT__QDOT_AVX512;
#endif
    const char *e = getenv("LT_QDOT");
    if (e && strcmp(e, "portable") == 0) qd_limit = LT__QDOT_PORTABLE;
    if (e && strcmp(e, "avx2") == 0) qd_limit = LT__QDOT_AVX2;
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
  const lt__qdot_kind k = qd_kind();
  switch (f) {
  case LT_QFORMAT_Q8_0:
  case LT_QFORMAT_Q4_0:
    return k == LT__QDOT_AVX512 ? "AVX512-VNNI (vpdpbusd)" : k == LT__QDOT_AVX2 ? "AVX2 (vpmaddubsw)" : "portable C";
  case LT_QFORMAT_BF16: return k == LT__QDOT_AVX512 ? "AVX-512 FMA" : k == LT__QDOT_AVX2 ? "AVX2 FMA" : "portable C";
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

/* The activations (lt__qact, tensor/quant_internal.h). */
static void qact_free(lt__qact *a) {
  free(a->xd);
  free(a->xs);
  free(a->xq);
  free(a->nc);
  free(a->xsum);
}

/* x2: [M, K] contiguous f32; f the weights' format (the correction's
 * shift). */
static lt_status qact_make(lt__qact *a, const float *x2, int64_t M, int64_t K, int64_t Kp, lt_qformat f,
                           lt__qdot_kind kind) {
  const bool simd = kind == LT__QDOT_AVX512, avx2 = kind == LT__QDOT_AVX2;
  const int64_t nb = Kp / LT_QK8_0;
  const int32_t shift = f == LT_QFORMAT_Q4_0 ? 8 : 128;
  *a = (lt__qact){.M = M, .nb = nb, .Kp = Kp};
  a->xd = malloc(sizeof(float) * (size_t)(M * nb + 1));
  a->xq = malloc((size_t)(M * Kp + 1));
  if (simd) a->xs = malloc(sizeof(float) * (size_t)(M * (nb / 2) * 16 + 1));
  if (simd) a->nc = malloc(sizeof(int32_t) * (size_t)(M * nb * 8 + 1));
  /* the block sums: the corrections of the grouped kernels (prompts) */
  const bool xsum = M >= LT__QG_GROUP_M && (simd || (avx2 && f == LT_QFORMAT_Q4_0));
  if (xsum) a->xsum = malloc(sizeof(int32_t) * (size_t)(M * nb + 1));
  /* the portable quantizer's row and blocks (the SIMD ones need none) */
  float *row = simd || avx2 ? NULL : malloc(sizeof(float) * (size_t)(Kp + 1));
  lt_block_q8_0 *blk = simd || avx2 ? NULL : malloc(sizeof(lt_block_q8_0) * (size_t)(nb + 1));
  if (!a->xd || !a->xq || (simd && (!a->xs || !a->nc)) || (xsum && !a->xsum) || (!simd && !avx2 && (!row || !blk))) {
    free(row);
    free(blk);
    qact_free(a);
    return lt__err(LT_ERR_NOMEM, "qmatrix_linear: quantized activations of %lld rows of %lld", (long long)M,
                   (long long)Kp);
  }
#ifdef LT__QDOT_X86
  /* the SIMD quantizers on the rows split over the threads (a prompt: one
   * thread alone spent a seventh of the product's time here) */
  const int nt = (simd || avx2) && (double)M * (double)K >= QG_FILL_SPLIT && !omp_in_parallel() ? lt_get_num_threads() : 1;
#pragma omp parallel for num_threads(nt) if (nt > 1) schedule(static)
  for (int c = 0; c < nt; c++) {
    const int64_t m0 = M * c / nt, m1 = M * (c + 1) / nt;
    lt__qact part = {.M = m1 - m0, .nb = nb, .Kp = Kp, .xd = a->xd + m0 * nb, .xq = a->xq + m0 * Kp};
    if (a->xs) part.xs = a->xs + m0 * (nb / 2) * 16;
    if (a->nc) part.nc = a->nc + m0 * nb * 8;
    if (a->xsum) part.xsum = a->xsum + m0 * nb;
    if (simd) lt__qact_fill_vnni(x2 + m0 * K, part.M, K, shift, &part);
    if (avx2) lt__qact_fill_avx2(x2 + m0 * K, part.M, K, &part);
    for (int64_t m = 0; simd && m < part.M; m++)
      for (int64_t p = 0; p < nb / 2; p++)
        for (int i = 0; i < 16; i++) part.xs[(m * (nb / 2) + p) * 16 + i] = part.xd[m * nb + 2 * p + i / 8];
  }
#endif
  for (int64_t m = 0; !simd && !avx2 && m < M; m++) {
    memcpy(row, x2 + m * K, sizeof(float) * (size_t)K);
    for (int64_t k = K; k < Kp; k++) row[k] = 0.0f;
    lt__quantize_q8_0(row, blk, nb);
    for (int64_t b = 0; b < nb; b++) {
      bool finite = true;
      for (int j = 0; j < LT_QK8_0; j++) finite = finite && isfinite(row[b * LT_QK8_0 + j]);
      a->xd[m * nb + b] = finite ? lt_f32_from_f16(blk[b].d) : NAN;
      const int8_t *q = blk[b].qs;
      memcpy(a->xq + m * Kp + b * LT_QK8_0, q, LT_QK8_0);
      if (a->nc)
        for (int i = 0; i < 8; i++)
          a->nc[(m * nb + b) * 8 + i] = -shift * (q[4 * i] + q[4 * i + 1] + q[4 * i + 2] + q[4 * i + 3]);
    }
  }
  free(row);
  free(blk);
  return LT_OK;
}

char *lt__qg_group_buffer(const lt__qact *a, size_t gblk_bytes, size_t block_bytes, size_t align, int64_t *gblk) {
  if (a->M < LT__QG_GROUP_M || a->nb < 1) return NULL;
  const size_t gbytes = (size_t)a->nb * gblk_bytes; /* one group, every block */
  *gblk = (int64_t)(block_bytes / gbytes) > 1 ? (int64_t)(block_bytes / gbytes) : 1;
  return aligned_alloc(align, (size_t)*gblk * gbytes); /* gbytes is a multiple of align */
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
static void blocks_portable(const lt_qmatrix *w, const lt__qact *a, int64_t n0, int64_t n1, float *y, int64_t ldy) {
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

/* ---- the product -------------------------------------------------------------- */

/* Checks x, w[i] and bias[i] as lt_qmatrix_linear's contract says (w[i]
 * of w[0]'s format and K) and returns LT_OK, or the error. */
static lt_status qlinear_check(const lt_tensor *x, int n, const lt_qmatrix *const *w, const lt_tensor *const *bias) {
  if (!x) return lt__err_null("qmatrix_linear", "x");
  for (int i = 0; i < n; i++) {
    if (!w[i]) return lt__err_null("qmatrix_linear", "w");
    const lt_tensor *b = bias ? bias[i] : NULL;
    char wd[96];
    snprintf(wd, sizeof wd, "[%lld,%lld] %s", (long long)w[i]->N, (long long)w[i]->K, lt_qformat_name(w[i]->format));
    if (x->dtype != LT_DTYPE_F32 || (b && b->dtype != LT_DTYPE_F32))
      return lt__err(LT_ERR_DTYPE, "qmatrix_linear: x is %s, W is %s, bias is %s: x and bias must be f32", LT__D(x),
                     wd, b ? LT__D(b) : "NULL");
    if (x->ndim < 1 || x->shape[x->ndim - 1] != w[i]->K || (b && (b->ndim != 1 || b->shape[0] != w[i]->N)))
      return lt__err(LT_ERR_SHAPE,
                     "qmatrix_linear: x is %s, W is %s, bias is %s: x must be [..., K] and bias [N] for W [N, K]",
                     LT__D(x), wd, b ? LT__D(b) : "NULL");
    if (w[i]->format == LT_QFORMAT_F32)
      return lt__err(LT_ERR_INVALID, "qmatrix_linear: W is %s: f32 weights go through lt_linear", wd);
    if (w[i]->format != w[0]->format)
      return lt__err(LT_ERR_INVALID, "qmatrix_linear_many: W %d is %s, W 0 is %s: one format for all", i, wd,
                     lt_qformat_name(w[0]->format));
  }
  return LT_OK;
}

/* y_i [M, N_i] = x2 [M, K] W_i^T for i < n (x2 contiguous; w of one format
 * and K, not bf16 on oneDNN's path): the activations quantized once, the
 * rows of all the matrices in one parallel region. */
static lt_status qlinear_kernels(const float *x2, int64_t M, int n, const lt_qmatrix *const *w, float *const *y) {
  const lt_qmatrix *w0 = w[0];
  const lt__qdot_kind kind = qd_kind();
  lt__qact a = {0};
  if (w0->format != LT_QFORMAT_BF16 && qact_make(&a, x2, M, w0->K, w0->Kp, w0->format, kind) != LT_OK)
    return lt_last_status();
  /* the rows of W in tiles of 4, matrix after matrix */
  int64_t tiles = 0, N = 0;
  size_t bytes = 0;
  for (int i = 0; i < n; i++) tiles += (w[i]->N + 3) / 4, N += w[i]->N, bytes += w[i]->bytes;
  int nt = ((double)M * (double)N * (double)w0->K < LT__BLAS_SMALL_MACS && bytes < QG_SPLIT_BYTES) || omp_in_parallel()
               ? 1 : lt_get_num_threads();
  if (nt > tiles) nt = (int)tiles;
#pragma omp parallel num_threads(nt) if (nt > 1)
  {
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
    /* contiguous tile ranges, one per thread (deterministic: the sums of an
     * element never depend on the split) */
    const int64_t t0 = tiles * t / T, t1 = tiles * (t + 1) / T;
    int64_t off = 0; /* the first tile of matrix i */
    for (int i = 0; i < n; off += (w[i]->N + 3) / 4, i++) {
      const int64_t lo = t0 > off ? t0 - off : 0, hi = t1 - off < (w[i]->N + 3) / 4 ? t1 - off : (w[i]->N + 3) / 4;
      if (lo >= hi) continue;
      const int64_t n0 = 4 * lo, n1 = 4 * hi < w[i]->N ? 4 * hi : w[i]->N, ldy = w[i]->N;
      const char *wd8 = w[i]->data;
      if (w[i]->format == LT_QFORMAT_BF16) {
#ifdef LT__QDOT_X86
        if (kind == LT__QDOT_AVX512) lt__qgemm_bf16_avx512(wd8, w[i]->row_bytes, w[i]->K, x2, M, n0, n1, y[i], ldy); else
        if (kind == LT__QDOT_AVX2) lt__qgemm_bf16_avx2(wd8, w[i]->row_bytes, w[i]->K, x2, M, n0, n1, y[i], ldy); else
#endif
        bf16_portable(w[i], x2, M, n0, n1, y[i], ldy);
      } else {
#ifdef LT__QDOT_X86
        if (kind == LT__QDOT_AVX512) lt__qgemm_blocks_vnni(w[i]->format, wd8, w[i]->row_bytes, &a, n0, n1, y[i], ldy); else
        if (kind == LT__QDOT_AVX2) lt__qgemm_blocks_avx2(w[i]->format, wd8, w[i]->row_bytes, &a, n0, n1, y[i], ldy); else
#endif
        blocks_portable(w[i], &a, n0, n1, y[i], ldy);
      }
    }
  }
  qact_free(&a);
  return LT_OK;
}

lt_status lt_qmatrix_linear_many(const lt_tensor *x, int n, const lt_qmatrix *const *w, const lt_tensor *const *bias,
                                 lt_tensor **out) {
  if (n < 1 || n > LT_QMATRIX_MANY_MAX)
    return lt__err(LT_ERR_INVALID, "qmatrix_linear_many: %d matrices: 1 to %d", n, LT_QMATRIX_MANY_MAX);
  if (!w) return lt__err_null("qmatrix_linear_many", "w");
  if (!out) return lt__err_null("qmatrix_linear_many", "out");
  for (int i = 0; i < n; i++) out[i] = NULL;
  if (lt__ensure_init() != LT_OK) return lt_last_status();
  if (qlinear_check(x, n, w, bias) != LT_OK) return lt_last_status();
  lt_tensor *o[LT_QMATRIX_MANY_MAX] = {0}, *bt[LT_QMATRIX_MANY_MAX] = {0}, *tmp = NULL;
  const lt_tensor *bc[LT_QMATRIX_MANY_MAX] = {0};
  float *y[LT_QMATRIX_MANY_MAX];
  lt_status st = LT_OK;
  const int64_t K = w[0]->K;
  int64_t oshape[LT_MAX_DIMS];
  memcpy(oshape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
  for (int i = 0; i < n && st == LT_OK; i++) {
    oshape[x->ndim - 1] = w[i]->N;
    o[i] = lt_empty(LT_DTYPE_F32, x->ndim, oshape);
    const lt_tensor *b = bias ? bias[i] : NULL;
    if (o[i] && b) bc[i] = lt__as_contig(b, LT_DTYPE_F32, &bt[i]);
    if (!o[i] || (b && !bc[i])) st = lt_last_status();
    else y[i] = o[i]->data;
  }
  /* M rows of x (K 0: the rows of the output) */
  const int64_t M = st != LT_OK ? 0 : K > 0 ? x->numel / K : (w[0]->N > 0 ? o[0]->numel / w[0]->N : 0);
  int64_t N = 0;
  for (int i = 0; i < n && st == LT_OK; i++) N += w[i]->N;
  const lt_tensor *xc = st == LT_OK && M > 0 && N > 0 ? lt__as_contig(x, LT_DTYPE_F32, &tmp) : NULL;
  if (st == LT_OK && M > 0 && N > 0 && !xc) st = lt_last_status();
  if (xc && lt__qgemm_bf16_wanted(w[0], M)) { /* a prompt or a batch in bf16: oneDNN (tensor/qgemm_bf16.c) */
    for (int i = 0; i < n && st == LT_OK; i++) st = lt__qgemm_bf16(w[i], xc->data, M, y[i], bc[i] ? bc[i]->data : NULL);
  } else if (xc) {
    st = qlinear_kernels(xc->data, M, n, w, y);
    for (int i = 0; i < n && st == LT_OK; i++)
      if (bc[i]) {
        const float *bv = bc[i]->data;
        for (int64_t m = 0; m < M; m++)
          for (int64_t j = 0; j < w[i]->N; j++) y[i][m * w[i]->N + j] += bv[j];
      }
  }
  lt_tensor_free(tmp);
  for (int i = 0; i < n; i++) {
    lt_tensor_free(bt[i]);
    if (st != LT_OK) lt_tensor_free(o[i]);
    else out[i] = o[i];
  }
  return st;
}

lt_tensor *lt_qmatrix_linear(const lt_tensor *x, const lt_qmatrix *w, const lt_tensor *bias) {
  lt_tensor *y;
  return lt_qmatrix_linear_many(x, 1, &w, &bias, &y) == LT_OK ? y : NULL;
}
