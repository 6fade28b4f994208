/*
 * tensor/qgemm_avx2.c: the AVX2 kernels of lt_qmatrix_linear, for CPUs
 * without AVX512-VNNI (tensor/qgemm.c owns the matrix, the activations, the
 * portable kernels and the choice between them): Q8_0 and Q4_0 weights
 * times Q8_0 activations with vpmaddubsw, bf16 weights times f32
 * activations with FMA. llama.cpp computes the same products with the
 * same instructions on such CPUs (ggml_vec_dot_q8_0_q8_0 and
 * ggml_vec_dot_q4_0_q8_0 for AVX2).
 *
 * The integer dot of a block of 32: vpmaddubsw multiplies unsigned bytes by
 * signed bytes and adds adjacent pairs into 16-bit lanes, saturating. The
 * unsigned operand is |w| and the signed one x with w's sign (vpsignb), so
 * each pair is at most 2 * 128 * 127 = 32512: no saturation (Q8_0's -128
 * included; the activations are within [-127, 127]). vpmaddwd by ones adds
 * the pairs into 8 int32 lanes, converted to f32 exactly (below 2^24),
 * multiplied by the blocks' d_w * d_x and added into 8 f32 accumulators,
 * summed across lanes at the end of the row. Q4_0's nibbles are unpacked
 * to q = nibble - 8 first (low nibbles weights 0-15, high ones 16-31).
 *
 * Tiles and cache blocks: LT__QG_BLOCKED (tensor/quant_internal.h), tiles
 * of 4 rows of x by QA_NR rows of W (16 ymm registers: 8 accumulators, 2
 * weights and their magnitudes, the row of x and temporaries). An
 * element's sums run in the same order in every tile shape, so the split
 * over threads and the number of rows of x change no bit.
 *
 * What it is not: the AVX-512 kernels (tensor/qgemm_vnni.c), or the choice
 * of kernel (tensor/qgemm.c asks the path table).
 */
#include "tensor/quant_internal.h"

#include <stdbool.h>
#include <string.h>

#ifdef LT__QDOT_X86
#include <immintrin.h>

#define QA_TARGET __attribute__((target("avx2,fma,f16c")))
#define QA_INLINE QA_TARGET static inline __attribute__((always_inline))

#define QA_NR 2
/* Bytes of W per cache block: half of a 512 KB L2 (Zen 2 and 3; Intel's
 * AVX2 cores have 256 KB-2 MB), the rest for the rows of x going past. */
#define QA_BLOCK_BYTES (256 * 1024)

/* ---- Q8_0 and Q4_0 -------------------------------------------------------- */

/* Block b of a row as 32 signed weights. */
QA_INLINE __m256i block_q(const char *row, int64_t b, int q4) {
  if (q4) {
    const __m128i v = _mm_loadu_si128((const __m128i *)((const lt_block_q4_0 *)row + b)->qs), lo = _mm_set1_epi8(0x0F);
    const __m256i u = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(v, lo)),
                                              _mm_and_si128(_mm_srli_epi16(v, 4), lo), 1);
    return _mm256_sub_epi8(u, _mm256_set1_epi8(8));
  }
  return _mm256_loadu_si256((const __m256i *)((const lt_block_q8_0 *)row + b)->qs);
}

/* The f16 scale of block b of a row, as f32 (exact). */
QA_INLINE float block_d(const char *row, int64_t b, size_t bb) {
  uint16_t d;
  memcpy(&d, row + (size_t)b * bb, sizeof d);
  return _cvtsh_ss(d);
}

/* The sum of 8 f32 lanes. */
QA_INLINE float hsum8(__m256 v) {
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

/* y[m0 + r, n + j] for r < MR, j < NR (q4, MR, NR constants: inlined). */
QA_INLINE void blocks_tile(int q4, int MR, int NR, const char *w, size_t rb, const lt__qact *a, int64_t m0, int64_t n,
                           float *y, int64_t ldy) {
  const int64_t nb = a->nb, Kp = a->Kp;
  const size_t bb = q4 ? sizeof(lt_block_q4_0) : sizeof(lt_block_q8_0);
  const __m256i ones = _mm256_set1_epi16(1);
  const char *row[QA_NR];
  __m256 acc[LT__QG_MR][QA_NR];
  for (int j = 0; j < NR; j++) row[j] = w + (size_t)(n + j) * rb;
  for (int r = 0; r < MR; r++)
    for (int j = 0; j < NR; j++) acc[r][j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    __m256i wq[QA_NR], wa[QA_NR];
    float dw[QA_NR];
    for (int j = 0; j < NR; j++) wq[j] = block_q(row[j], b, q4), wa[j] = _mm256_sign_epi8(wq[j], wq[j]);
    for (int j = 0; j < NR; j++) dw[j] = block_d(row[j], b, bb);
    for (int r = 0; r < MR; r++) {
      const int64_t m = m0 + r;
      const __m256i xv = _mm256_loadu_si256((const __m256i *)(a->xq + m * Kp + b * LT_QK8_0));
      const float dx = a->xd[m * nb + b];
      for (int j = 0; j < NR; j++) {
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(wa[j], _mm256_sign_epi8(xv, wq[j])), ones);
        acc[r][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw[j] * dx), acc[r][j]);
      }
    }
  }
  for (int r = 0; r < MR; r++)
    for (int j = 0; j < NR; j++) y[(m0 + r) * ldy + n + j] = hsum8(acc[r][j]);
}

QA_TARGET static void q8_0_avx2(const char *w, size_t rb, const lt__qact *a, int64_t n0, int64_t n1, float *y,
                                int64_t ldy) {
  const int64_t M = a->M;
#define QA_T8(MR, NR) blocks_tile(0, MR, NR, w, rb, a, m0, n, y, ldy)
  LT__QG_BLOCKED(QA_BLOCK_BYTES, QA_NR, QA_T8);
#undef QA_T8
}

QA_TARGET static void q4_0_avx2(const char *w, size_t rb, const lt__qact *a, int64_t n0, int64_t n1, float *y,
                                int64_t ldy) {
  const int64_t M = a->M;
#define QA_T4(MR, NR) blocks_tile(1, MR, NR, w, rb, a, m0, n, y, ldy)
  LT__QG_BLOCKED(QA_BLOCK_BYTES, QA_NR, QA_T4);
#undef QA_T4
}

void lt__qgemm_blocks_avx2(lt_qformat fmt, const char *w, size_t row_bytes, const lt__qact *a, int64_t n0, int64_t n1,
                           float *y, int64_t ldy) {
  if (fmt == LT_QFORMAT_Q4_0) q4_0_avx2(w, row_bytes, a, n0, n1, y, ldy);
  else q8_0_avx2(w, row_bytes, a, n0, n1, y, ldy);
}

/* ---- bf16 ----------------------------------------------------------------- */

/* 8 bf16 weights widened to f32 (exact: a shift). */
QA_INLINE __m256 bf16_widen(__m128i v) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16)); }

/* The last K % 8 columns go through a zero-padded copy of the tail (AVX2
 * has no masked 16-bit loads), added as one more step of the same lanes. */
QA_INLINE void bf16_tile(int MR, int NR, const char *w, size_t rb, int64_t K, const float *x, int64_t m0, int64_t n,
                         float *y, int64_t ldy) {
  const uint16_t *row[QA_NR];
  __m256 acc[LT__QG_MR][QA_NR];
  for (int j = 0; j < NR; j++) row[j] = (const uint16_t *)(w + (size_t)(n + j) * rb);
  for (int r = 0; r < MR; r++)
    for (int j = 0; j < NR; j++) acc[r][j] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    __m256 wv[QA_NR];
    for (int j = 0; j < NR; j++) wv[j] = bf16_widen(_mm_loadu_si128((const __m128i *)(row[j] + k)));
    for (int r = 0; r < MR; r++) {
      const __m256 xv = _mm256_loadu_ps(x + (m0 + r) * K + k);
      for (int j = 0; j < NR; j++) acc[r][j] = _mm256_fmadd_ps(wv[j], xv, acc[r][j]);
    }
  }
  if (k < K) {
    const int t = (int)(K - k);
    __m256 wv[QA_NR];
    for (int j = 0; j < NR; j++) {
      uint16_t tail[8] = {0};
      memcpy(tail, row[j] + k, sizeof(uint16_t) * (size_t)t);
      wv[j] = bf16_widen(_mm_loadu_si128((const __m128i *)tail));
    }
    for (int r = 0; r < MR; r++) {
      float tail[8] = {0};
      memcpy(tail, x + (m0 + r) * K + k, sizeof(float) * (size_t)t);
      const __m256 xv = _mm256_loadu_ps(tail);
      for (int j = 0; j < NR; j++) acc[r][j] = _mm256_fmadd_ps(wv[j], xv, acc[r][j]);
    }
  }
  for (int r = 0; r < MR; r++)
    for (int j = 0; j < NR; j++) y[(m0 + r) * ldy + n + j] = hsum8(acc[r][j]);
}

QA_TARGET void lt__qgemm_bf16_avx2(const char *w, size_t rb, int64_t K, const float *x, int64_t M, int64_t n0,
                                   int64_t n1, float *y, int64_t ldy) {
#define QA_TB(MR, NR) bf16_tile(MR, NR, w, rb, K, x, m0, n, y, ldy)
  LT__QG_BLOCKED(QA_BLOCK_BYTES, QA_NR, QA_TB);
#undef QA_TB
}

#endif /* LT__QDOT_X86 */
