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
 * over threads and the number of rows of x below 16 change no bit; from
 * 16 rows (prompts) the grouped kernel below sums in the portable kernel's
 * order instead.
 *
 * What it is not: the AVX-512 kernels (tensor/qgemm_vnni.c), or the choice
 * of kernel (tensor/qgemm.c asks the path table).
 */
#include "tensor/quant_internal.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
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

/* Q4_0 block b of a row as its 32 nibbles, q + 8 (low nibbles weights
 * 0-15, high ones 16-31). */
QA_INLINE __m256i block_nibbles(const char *row, int64_t b) {
  const __m128i v = _mm_loadu_si128((const __m128i *)((const lt_block_q4_0 *)row + b)->qs), lo = _mm_set1_epi8(0x0F);
  return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(v, lo)), _mm_and_si128(_mm_srli_epi16(v, 4), lo),
                                 1);
}

/* Block b of a row as 32 signed weights. */
QA_INLINE __m256i block_q(const char *row, int64_t b, int q4) {
  if (q4) return _mm256_sub_epi8(block_nibbles(row, b), _mm256_set1_epi8(8));
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

/* ---- prompts: groups of 8 rows of W, one row per lane ---------------------
 * From LT__QG_GROUP_M rows of x on, the rows of W are repacked, a cache block at
 * a time, into groups of 8 (QA_G): per block b of a group, 8 vectors s =
 * 0..7 whose 32-bit lane j holds weights 4s .. 4s + 3 of the group's row j
 * (Q8_0 signed, Q4_0 its nibbles 0..15 unsigned), then the 8 rows' scales
 * as f32 (QA_GBLK bytes a block). A row of x then meets the 8 rows at once:
 * its 4 activations 4s .. 4s + 3 broadcast to every lane, one vpmaddubsw
 * per s for 8 rows, the block's sum ends in lane j for row j, and its
 * scaling is one vector product for 8 rows; no sums across lanes. Q4_0
 * keeps the 16-bit pair sums over the 8 steps (each at most 2 x 15 x 127,
 * eight of them 30480 < 32767) and takes 8 sum(x) off the block's sum;
 * Q8_0 widens each step (vpmaddwd). Each element is then the portable
 * kernel's sum, in its order and roundings: y = sum over b of (d_w d_x) x
 * isum_b, multiplied then added, block after block: the same bits. */
#define QA_G 8
#define QA_GBLK (QA_G * LT_QK8_0 + QA_G * (int)sizeof(float))

/* Rows [g, min(g + 8, n1)) of W repacked into dst (nb blocks of QA_GBLK;
 * rows past n1 as zero weights and scales). */
QA_TARGET static void repack_group(int q4, const char *w, size_t rb, int64_t nb, int64_t g, int64_t n1, char *dst) {
  const size_t bb = q4 ? sizeof(lt_block_q4_0) : sizeof(lt_block_q8_0);
  for (int64_t b = 0; b < nb; b++) {
    __m256 r[QA_G]; /* row j's 32 weights as 8 lanes of 4 bytes */
    float d[QA_G];
    for (int j = 0; j < QA_G; j++) {
      if (g + j >= n1) {
        r[j] = _mm256_setzero_ps(), d[j] = 0.0f;
        continue;
      }
      const char *row = w + (size_t)(g + j) * rb;
      r[j] = _mm256_castsi256_ps(q4 ? block_nibbles(row, b) : block_q(row, b, 0)), d[j] = block_d(row, b, bb);
    }
    /* the 8 x 8 transpose of 32-bit elements: vector s, lane j = row j's element s */
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    float *o = (float *)(dst + (size_t)b * QA_GBLK);
    _mm256_store_ps(o + 0 * 8, _mm256_permute2f128_ps(u0, u4, 0x20));
    _mm256_store_ps(o + 1 * 8, _mm256_permute2f128_ps(u1, u5, 0x20));
    _mm256_store_ps(o + 2 * 8, _mm256_permute2f128_ps(u2, u6, 0x20));
    _mm256_store_ps(o + 3 * 8, _mm256_permute2f128_ps(u3, u7, 0x20));
    _mm256_store_ps(o + 4 * 8, _mm256_permute2f128_ps(u0, u4, 0x31));
    _mm256_store_ps(o + 5 * 8, _mm256_permute2f128_ps(u1, u5, 0x31));
    _mm256_store_ps(o + 6 * 8, _mm256_permute2f128_ps(u2, u6, 0x31));
    _mm256_store_ps(o + 7 * 8, _mm256_permute2f128_ps(u3, u7, 0x31));
    _mm256_store_ps(o + 8 * 8, _mm256_loadu_ps(d));
  }
}

/* y[m0 + r, g + j] for r < MR and the group's rows j below n1 - g (q4, MR
 * constants: inlined); grp the group as repack_group wrote it. */
QA_INLINE void group_tile(int q4, int MR, const char *grp, const lt__qact *a, int64_t m0, int64_t g,
                          int64_t n1, float *y, int64_t ldy) {
  const int64_t nb = a->nb, Kp = a->Kp;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[LT__QG_MR];
  for (int r = 0; r < MR; r++) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    const char *gb = grp + (size_t)b * QA_GBLK;
    const __m256 dw = _mm256_load_ps((const float *)(gb + QA_G * LT_QK8_0));
    /* one row of x at a time over the block's 8 steps (the steps reload the
     * group's vectors from L1: all rows' sums at once ran out of registers) */
    for (int r = 0; r < MR; r++) {
      const int64_t m = m0 + r;
      const int8_t *xr = a->xq + m * Kp + b * LT_QK8_0;
      __m256i isum = _mm256_setzero_si256();
      for (int st = 0; st < QA_G; st++) {
        const __m256i wv = _mm256_load_si256((const __m256i *)(gb + st * 32));
        int32_t x4;
        memcpy(&x4, xr + 4 * st, sizeof x4);
        const __m256i xb = _mm256_set1_epi32(x4);
        if (q4) isum = _mm256_add_epi16(isum, _mm256_maddubs_epi16(wv, xb));
        else
          isum = _mm256_add_epi32(
              isum, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xb, wv)), ones));
      }
      if (q4) isum = _mm256_sub_epi32(_mm256_madd_epi16(isum, ones), _mm256_set1_epi32(8 * a->xsum[m * nb + b]));
      const __m256 d = _mm256_mul_ps(dw, _mm256_set1_ps(a->xd[m * nb + b]));
      acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum)));
    }
  }
  const int nj = n1 - g < QA_G ? (int)(n1 - g) : QA_G;
  for (int r = 0; r < MR; r++) {
    if (nj == QA_G) {
      _mm256_storeu_ps(y + (m0 + r) * ldy + g, acc[r]);
    } else {
      float o[QA_G];
      _mm256_storeu_ps(o, acc[r]);
      memcpy(y + (m0 + r) * ldy + g, o, sizeof(float) * (size_t)nj);
    }
  }
}

/* Rows [n0, n1) of W in cache blocks of whole groups, each repacked once
 * into u and then under every tile of 4 rows of x. */
QA_INLINE void groups_run(int q4, const char *w, size_t rb, const lt__qact *a, int64_t n0,
                          int64_t n1, char *u, int64_t gblk, float *y, int64_t ldy) {
  const int64_t M = a->M, nb = a->nb;
  const size_t gbytes = (size_t)nb * QA_GBLK;
  for (int64_t b0 = n0; b0 < n1; b0 += gblk * QA_G) {
    const int64_t b1 = n1 - b0 < gblk * QA_G ? n1 : b0 + gblk * QA_G;
    for (int64_t g = b0; g < b1; g += QA_G) repack_group(q4, w, rb, nb, g, b1, u + (size_t)((g - b0) / QA_G) * gbytes);
    for (int64_t m0 = 0; m0 < M; m0 += LT__QG_MR) {
      const int mr = (int)(M - m0 < LT__QG_MR ? M - m0 : LT__QG_MR);
      for (int64_t g = b0; g < b1; g += QA_G) {
        const char *grp = u + (size_t)((g - b0) / QA_G) * gbytes;
        switch (mr) {
        case 1: group_tile(q4, 1, grp, a, m0, g, b1, y, ldy); break;
        case 2: group_tile(q4, 2, grp, a, m0, g, b1, y, ldy); break;
        case 3: group_tile(q4, 3, grp, a, m0, g, b1, y, ldy); break;
        default: group_tile(q4, LT__QG_MR, grp, a, m0, g, b1, y, ldy); break;
        }
      }
    }
  }
}

/* Q8_0 (q4 0) or Q4_0 (q4 1): groups from LT__QG_GROUP_M rows of x on (when
 * their buffers can be had), the row tiles below. */
QA_INLINE void blocks_avx2(int q4, const char *w, size_t rb, const lt__qact *a, int64_t n0, int64_t n1, float *y,
                           int64_t ldy) {
  int64_t gblk;
  char *u = lt__qg_group_buffer(a, QA_GBLK, QA_BLOCK_BYTES, 32, &gblk);
  if (u) {
    groups_run(q4, w, rb, a, n0, n1, u, gblk, y, ldy);
    free(u);
    return;
  }
  const int64_t M = a->M;
#define QA_TQ(MR, NR) blocks_tile(q4, MR, NR, w, rb, a, m0, n, y, ldy)
  LT__QG_BLOCKED(QA_BLOCK_BYTES, QA_NR, QA_TQ);
#undef QA_TQ
}

QA_TARGET static void q8_0_avx2(const char *w, size_t rb, const lt__qact *a, int64_t n0, int64_t n1, float *y,
                                int64_t ldy) {
  blocks_avx2(0, w, rb, a, n0, n1, y, ldy);
}

QA_TARGET static void q4_0_avx2(const char *w, size_t rb, const lt__qact *a, int64_t n0, int64_t n1, float *y,
                                int64_t ldy) {
  blocks_avx2(1, w, rb, a, n0, n1, y, ldy);
}

void lt__qgemm_blocks_avx2(lt_qformat fmt, const char *w, size_t row_bytes, const lt__qact *a, int64_t n0, int64_t n1,
                           float *y, int64_t ldy) {
  if (fmt == LT_QFORMAT_Q4_0) q4_0_avx2(w, row_bytes, a, n0, n1, y, ldy);
  else q8_0_avx2(w, row_bytes, a, n0, n1, y, ldy);
}

/* ---- the activations ------------------------------------------------------ */

/* roundf (half away from zero) of 8 lanes, exactly (as the VNNI file's
 * round_away: the truncation, plus the sign where the dropped part is at
 * least one half; t - trunc(t) is exact). */
QA_INLINE __m256 round_away(__m256 t) {
  const __m256 r = _mm256_round_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 sign = _mm256_and_ps(t, _mm256_set1_ps(-0.0f));
  const __m256 up = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), _mm256_sub_ps(t, r)), _mm256_set1_ps(0.5f),
                                  _CMP_GE_OQ);
  return _mm256_add_ps(r, _mm256_and_ps(up, _mm256_or_ps(_mm256_set1_ps(1.0f), sign)));
}

QA_TARGET void lt__qact_fill_avx2(const float *x2, int64_t M, int64_t K, lt__qact *a) {
  const int64_t nb = a->nb;
  const __m256 nosign = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)), inf = _mm256_set1_ps(INFINITY);
  for (int64_t m = 0; m < M; m++)
    for (int64_t b = 0; b < nb; b++) {
      const int64_t k0 = b * LT_QK8_0;
      float pad[LT_QK8_0] = {0};
      const float *xb = x2 + m * K + k0;
      if (K - k0 < LT_QK8_0) { /* the last block, zero-padded */
        memcpy(pad, xb, sizeof(float) * (size_t)(K - k0 > 0 ? K - k0 : 0));
        xb = pad;
      }
      __m256 v[4], amax = _mm256_setzero_ps();
      int finite = 0xFF;
      for (int i = 0; i < 4; i++) {
        v[i] = _mm256_loadu_ps(xb + 8 * i);
        const __m256 av = _mm256_and_ps(v[i], nosign);
        finite &= _mm256_movemask_ps(_mm256_cmp_ps(av, inf, _CMP_LT_OQ));
        amax = _mm256_max_ps(amax, av);
      }
      /* lt__quantize_q8_0's rounding: amax, d = amax / 127, id = 1 / d */
      __m128 h = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
      h = _mm_max_ps(h, _mm_movehl_ps(h, h));
      h = _mm_max_ss(h, _mm_movehdup_ps(h));
      const float am = _mm_cvtss_f32(h), d = am / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
      const bool fin = finite == 0xFF;
      a->xd[m * nb + b] = fin ? lt_f32_from_f16(lt_f16_from_f32(d)) : NAN;
      const __m256 vid = _mm256_set1_ps(fin ? id : 0.0f); /* a block that is not finite: quants 0 */
      __m256i q[4];
      for (int i = 0; i < 4; i++) q[i] = _mm256_cvttps_epi32(round_away(_mm256_mul_ps(v[i], vid)));
      /* 32 int32 (within [-127, 127]) to 32 int8 in order: the packs work
       * per 128-bit half, a permutation puts the 32-bit groups back */
      const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
      const __m256i qb = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256((__m256i *)(a->xq + m * a->Kp + k0), qb);
      if (a->xsum) { /* the sum of the 32 quants (Q4_0's correction, group_tile) */
        const __m256i v = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), qb), _mm256_set1_epi16(1));
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
        a->xsum[m * nb + b] = _mm_cvtsi128_si32(h);
      }
    }
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
