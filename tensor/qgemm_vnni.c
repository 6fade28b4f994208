/*
 * tensor/qgemm_vnni.c: the AVX-512 kernels of lt_qmatrix_linear
 * (tensor/qgemm.c owns the matrix, the activations, the portable kernels
 * and the choice between them): Q8_0 and Q4_0 weights times Q8_0
 * activations with AVX512-VNNI vpdpbusd, bf16 weights times f32 activations
 * with FMA.
 *
 * Register tiles: QV_MR rows of x by QV_NR rows of W per inner loop (16
 * accumulators), so a block pair of W in registers serves QV_MR rows of x
 * and a block pair of x serves QV_NR rows of W. Below QV_MR rows of x
 * (decoding) the tiles are one row of W wide: W then streams in order, which
 * the hardware prefetcher follows (four rows side by side measured slower
 * at M = 1, the loads waiting on memory; docs/decoding.md).
 * Cache blocks: the rows of W are taken QV_BLOCK_BYTES at a time and every
 * tile of x runs over the block before the next one starts (prompt
 * processing, M = 512: the block stays in L2 while x goes past it, instead
 * of W being read from memory once per tile of x). From LT__QG_GROUP_M rows
 * of x on (prompts) W is repacked instead, a cache block at a time, into
 * groups of 16 rows, one per lane (the grouped kernel below): the portable
 * kernel's sums, bit for bit.
 *
 * The integer dot: vpdpbusd multiplies unsigned bytes by signed bytes, four
 * products per 32-bit lane added to the accumulator. The weights are the
 * unsigned operand: Q4_0's nibbles are q + 8 as stored; Q8_0's bytes xor
 * 0x80 are q + 128. The accumulator starts at the activation block's
 * correction -shift * sum(x) (lt__qact's nc, computed once per product), so
 * each lane ends at exactly its four w x. Two blocks per 512-bit vector
 * (lanes 0-7 the first, 8-15 the second); the int32 lanes are converted to
 * f32 (exact: below 2^24), multiplied by the blocks' d_w * d_x and added
 * into f32 accumulators, summed across lanes at the end of the row; an odd
 * last block is added alone (256 bits). An element's sums run in the same
 * order in every tile shape (and in every group), so the split over threads
 * changes no bit.
 *
 * What it is not: AMX-INT8 (not on the machines this was measured on), or
 * the choice of kernel (tensor/qgemm.c asks the path table).
 */
#include "tensor/quant_internal.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#ifdef LT__QDOT_X86
#include <immintrin.h>

#define QV_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c,avx2")))
#define QV_INLINE QV_TARGET static inline __attribute__((always_inline))

#define QV_MR LT__QG_MR
#define QV_NR 4
/* Bytes of W per cache block: half of a 1 MB L2 (Zen 4/5, Sapphire Rapids
 * have 1-2 MB per core), the rest for the activations going past. */
#define QV_BLOCK_BYTES (512 * 1024)

/* ---- Q8_0 and Q4_0 -------------------------------------------------------- */

static uint16_t scale_bits(const char *blk) {
  uint16_t d;
  memcpy(&d, blk, sizeof d);
  return d;
}

/* Blocks 2p and 2p + 1 of a row as 64 unsigned bytes: q + 128 (Q8_0) or
 * the nibbles q + 8 (Q4_0: a block's low nibbles, weights 0-15, then its
 * high ones, 16-31). */
QV_INLINE __m512i pair_bytes(const char *row, int64_t p, int q4) {
  if (q4) {
    const lt_block_q4_0 *b = (const lt_block_q4_0 *)row + 2 * p;
    const __m512i t = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)b[0].qs))),
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)b[1].qs)), 1); /* [b0 b0 b1 b1] */
    const __m512i sh = _mm512_set_epi64(4, 4, 0, 0, 4, 4, 0, 0); /* the high nibbles in the 2nd and 4th quarter */
    return _mm512_and_si512(_mm512_srlv_epi64(t, sh), _mm512_set1_epi8(0x0F));
  }
  const lt_block_q8_0 *b = (const lt_block_q8_0 *)row + 2 * p;
  const __m512i t = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)b[0].qs)),
                                       _mm256_loadu_si256((const __m256i *)b[1].qs), 1);
  return _mm512_xor_si512(t, _mm512_set1_epi8((char)0x80));
}

/* One block alone, as pair_bytes. */
QV_INLINE __m256i block_bytes(const char *row, int64_t b, int q4) {
  if (q4) {
    const __m128i v = _mm_loadu_si128((const __m128i *)((const lt_block_q4_0 *)row + b)->qs), lo = _mm_set1_epi8(0x0F);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(v, lo)),
                                   _mm_and_si128(_mm_srli_epi16(v, 4), lo), 1);
  }
  return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)((const lt_block_q8_0 *)row + b)->qs),
                          _mm256_set1_epi8((char)0x80));
}

/* The f16 scales of blocks 2p, 2p + 1 in 16 f32 lanes: d0 in lanes 0-7, d1
 * in 8-15 (two broadcasts from memory and vcvtph2ps, exact). */
QV_INLINE __m512 pair_scale(const char *row, int64_t p, size_t bb) {
  const __m128i d0 = _mm_set1_epi16((short)scale_bits(row + (size_t)(2 * p) * bb));
  const __m128i d1 = _mm_set1_epi16((short)scale_bits(row + (size_t)(2 * p + 1) * bb));
  return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(d0), d1, 1));
}

/* The sum of 8 int32 lanes, as f32 (exact: each lane is below 2^24). */
QV_INLINE float hsum8_epi32(__m256i isum) {
  __m256 v = _mm256_cvtepi32_ps(isum);
  __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  h = _mm_add_ps(h, _mm_movehl_ps(h, h));
  h = _mm_add_ss(h, _mm_movehdup_ps(h));
  return _mm_cvtss_f32(h);
}

/* y[m0 + r, n + j] for r < MR, j < NR (MR, NR, q4 constants: inlined). */
QV_INLINE void blocks_tile(int q4, int MR, int NR, const char *w, size_t rb, const lt__qact *a, int64_t m0, int64_t n,
                           float *y, int64_t ldy) {
  const int64_t nb = a->nb, npair = nb / 2, Kp = a->Kp;
  const size_t bb = q4 ? sizeof(lt_block_q4_0) : sizeof(lt_block_q8_0);
  const char *row[QV_NR];
  __m512 acc[QV_MR][QV_NR];
  for (int j = 0; j < NR; j++) row[j] = w + (size_t)(n + j) * rb;
  for (int r = 0; r < MR; r++)
    for (int j = 0; j < NR; j++) acc[r][j] = _mm512_setzero_ps();
  for (int64_t p = 0; p < npair; p++) {
    __m512i wv[QV_NR];
    __m512 dw[QV_NR];
    for (int j = 0; j < NR; j++) wv[j] = pair_bytes(row[j], p, q4), dw[j] = pair_scale(row[j], p, bb);
    for (int r = 0; r < MR; r++) {
      const int64_t m = m0 + r;
      const __m512i xv = _mm512_loadu_si512((const void *)(a->xq + m * Kp + 2 * p * LT_QK8_0));
      const __m512i nc = _mm512_loadu_si512((const void *)(a->nc + (m * nb + 2 * p) * 8));
      const __m512 xs = _mm512_loadu_ps(a->xs + (m * npair + p) * 16);
      for (int j = 0; j < NR; j++)
        acc[r][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(nc, wv[j], xv)), _mm512_mul_ps(dw[j], xs),
                                    acc[r][j]);
    }
  }
  for (int r = 0; r < MR; r++)
    for (int j = 0; j < NR; j++) {
      float s = _mm512_reduce_add_ps(acc[r][j]);
      if (nb & 1) { /* the last block alone */
        const int64_t b = nb - 1, m = m0 + r;
        const __m256i xv = _mm256_loadu_si256((const __m256i *)(a->xq + m * Kp + b * LT_QK8_0));
        const __m256i nc = _mm256_loadu_si256((const __m256i *)(a->nc + (m * nb + b) * 8));
        const float isum = hsum8_epi32(_mm256_dpbusd_epi32(nc, block_bytes(row[j], b, q4), xv));
        s += (_cvtsh_ss(scale_bits(row[j] + (size_t)b * bb)) * a->xd[m * nb + b]) * isum;
      }
      y[(m0 + r) * ldy + n + j] = s;
    }
}

/* Rows [n0, n1) of W in cache blocks, each block under every tile of x. */
#define QV_BLOCKED(TILE) LT__QG_BLOCKED(QV_BLOCK_BYTES, QV_NR, TILE)

/* ---- prompts: groups of 16 rows of W, one row per lane --------------------
 * From LT__QG_GROUP_M rows of x on, as the AVX2 file's groups (its comment) but
 * 16 rows wide: the rows of W are repacked, a cache block at a time, into
 * groups of 16 (QV_G): per block b of a group, 8 vectors s = 0..7 whose
 * 32-bit lane j holds weights 4s .. 4s + 3 of the group's row j, unsigned
 * as pair_bytes gives them (q + 8 or q + 128), then the 16 rows' scales as
 * f32 (QV_GBLK bytes a block). A row of x meets the 16 rows at once: one
 * vpdpbusd per s with its 4 activations 4s .. 4s + 3 broadcast, started at
 * -shift * sum(x) of the block (lt__qact's xsum), so lane j ends at row j's
 * exact isum; its scaling is one vector product for 16 rows and no sum
 * runs across lanes. Each element is then the portable kernel's sum, in
 * its order and roundings: the same bits. The 8 vectors of a block stay in
 * registers while QV_GMR rows of x go past. */
#define QV_G 16
#define QV_GBLK (8 * 64 + QV_G * (int)sizeof(float))
#define QV_GMR 8

/* Rows [g, min(g + 16, n1)) of W repacked into dst (nb blocks of QV_GBLK,
 * 64-byte aligned; rows past n1 as zero weights and scales). */
QV_TARGET static void repack_group(int q4, const char *w, size_t rb, int64_t nb, int64_t g, int64_t n1, char *dst) {
  const size_t bb = q4 ? sizeof(lt_block_q4_0) : sizeof(lt_block_q8_0);
  /* the 128-bit quarters of the outputs (below) */
  const __m512i even = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
  const __m512i odd = _mm512_setr_epi32(4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
  for (int64_t b = 0; b < nb; b++) {
    /* r[j]: row j's 32 weights as 8 lanes of 4 bytes in its low half, row
     * j + 8's in its high half */
    __m512 r[8];
    float d[QV_G];
    __m256i v[QV_G];
    for (int j = 0; j < QV_G; j++) {
      const char *row = w + (size_t)(g + j) * rb;
      v[j] = g + j < n1 ? block_bytes(row, b, q4) : _mm256_setzero_si256();
      d[j] = g + j < n1 ? _cvtsh_ss(scale_bits(row + (size_t)b * bb)) : 0.0f;
    }
    for (int j = 0; j < 8; j++) r[j] = _mm512_castsi512_ps(_mm512_inserti64x4(_mm512_castsi256_si512(v[j]), v[j + 8], 1));
    /* the AVX2 file's 8 x 8 transpose of 32-bit elements in each half (the
     * unpacks and shuffles work per 128 bits), then each output's quarters
     * gathered: vector s, lane j = row j's element s */
    const __m512 t0 = _mm512_unpacklo_ps(r[0], r[1]), t1 = _mm512_unpackhi_ps(r[0], r[1]);
    const __m512 t2 = _mm512_unpacklo_ps(r[2], r[3]), t3 = _mm512_unpackhi_ps(r[2], r[3]);
    const __m512 t4 = _mm512_unpacklo_ps(r[4], r[5]), t5 = _mm512_unpackhi_ps(r[4], r[5]);
    const __m512 t6 = _mm512_unpacklo_ps(r[6], r[7]), t7 = _mm512_unpackhi_ps(r[6], r[7]);
    const __m512 u0 = _mm512_shuffle_ps(t0, t2, 0x44), u1 = _mm512_shuffle_ps(t0, t2, 0xEE);
    const __m512 u2 = _mm512_shuffle_ps(t1, t3, 0x44), u3 = _mm512_shuffle_ps(t1, t3, 0xEE);
    const __m512 u4 = _mm512_shuffle_ps(t4, t6, 0x44), u5 = _mm512_shuffle_ps(t4, t6, 0xEE);
    const __m512 u6 = _mm512_shuffle_ps(t5, t7, 0x44), u7 = _mm512_shuffle_ps(t5, t7, 0xEE);
    float *o = (float *)(dst + (size_t)b * QV_GBLK);
    _mm512_store_ps(o + 0 * 16, _mm512_permutex2var_ps(u0, even, u4));
    _mm512_store_ps(o + 1 * 16, _mm512_permutex2var_ps(u1, even, u5));
    _mm512_store_ps(o + 2 * 16, _mm512_permutex2var_ps(u2, even, u6));
    _mm512_store_ps(o + 3 * 16, _mm512_permutex2var_ps(u3, even, u7));
    _mm512_store_ps(o + 4 * 16, _mm512_permutex2var_ps(u0, odd, u4));
    _mm512_store_ps(o + 5 * 16, _mm512_permutex2var_ps(u1, odd, u5));
    _mm512_store_ps(o + 6 * 16, _mm512_permutex2var_ps(u2, odd, u6));
    _mm512_store_ps(o + 7 * 16, _mm512_permutex2var_ps(u3, odd, u7));
    _mm512_store_ps(o + 8 * 16, _mm512_loadu_ps(d));
  }
}

/* y[m0 + r, g + j] for r < MR and the group's rows j below n1 - g (MR
 * constant: inlined); grp the group as repack_group wrote it. */
QV_INLINE void group_tile(int MR, int32_t shift, const char *grp, const lt__qact *a, int64_t m0, int64_t g,
                          int64_t n1, float *y, int64_t ldy) {
  const int64_t nb = a->nb, Kp = a->Kp;
  __m512 acc[QV_GMR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; r++) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    const char *gb = grp + (size_t)b * QV_GBLK;
    __m512i wv[8];
    for (int st = 0; st < 8; st++) wv[st] = _mm512_load_si512((const void *)(gb + st * 64));
    const __m512 dw = _mm512_load_ps((const float *)(gb + 8 * 64));
    /* the rows' sums side by side (independent chains of vpdpbusd) */
    __m512i isum[QV_GMR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) isum[r] = _mm512_set1_epi32(-shift * a->xsum[(m0 + r) * nb + b]);
#pragma GCC unroll 8
    for (int st = 0; st < 8; st++)
#pragma GCC unroll 8
      for (int r = 0; r < MR; r++) {
        int32_t x4;
        memcpy(&x4, a->xq + (m0 + r) * Kp + b * LT_QK8_0 + 4 * st, sizeof x4);
        isum[r] = _mm512_dpbusd_epi32(isum[r], wv[st], _mm512_set1_epi32(x4));
      }
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
      const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(a->xd[(m0 + r) * nb + b]));
      acc[r] = _mm512_add_ps(acc[r], _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum[r])));
    }
  }
  const int nj = n1 - g < QV_G ? (int)(n1 - g) : QV_G;
  for (int r = 0; r < MR; r++) _mm512_mask_storeu_ps(y + (m0 + r) * ldy + g, (__mmask16)((1u << nj) - 1), acc[r]);
}

/* Rows [n0, n1) of W in cache blocks of whole groups, each repacked once
 * into u and then under every tile of QV_GMR rows of x (a last tile of
 * fewer rows one row at a time). */
QV_INLINE void groups_run(int q4, const char *w, size_t rb, const lt__qact *a, int64_t n0, int64_t n1, char *u,
                          int64_t gblk, float *y, int64_t ldy) {
  const int64_t M = a->M, nb = a->nb;
  const int32_t shift = q4 ? 8 : 128;
  const size_t gbytes = (size_t)nb * QV_GBLK;
  for (int64_t b0 = n0; b0 < n1; b0 += gblk * QV_G) {
    const int64_t b1 = n1 - b0 < gblk * QV_G ? n1 : b0 + gblk * QV_G;
    for (int64_t g = b0; g < b1; g += QV_G) repack_group(q4, w, rb, nb, g, b1, u + (size_t)((g - b0) / QV_G) * gbytes);
    for (int64_t m0 = 0; m0 < M; m0 += QV_GMR)
      for (int64_t g = b0; g < b1; g += QV_G) {
        const char *grp = u + (size_t)((g - b0) / QV_G) * gbytes;
        if (M - m0 >= QV_GMR) group_tile(QV_GMR, shift, grp, a, m0, g, b1, y, ldy);
        else
          for (int64_t m = m0; m < M; m++) group_tile(1, shift, grp, a, m, g, b1, y, ldy);
      }
  }
}

/* Q8_0 (q4 0) or Q4_0 (q4 1): groups from LT__QG_GROUP_M rows of x on (when
 * their buffer can be had), the row tiles below. */
QV_INLINE void blocks_vnni(int q4, const char *w, size_t rb, const lt__qact *a, int64_t n0, int64_t n1, float *y,
                           int64_t ldy) {
  int64_t gblk;
  char *u = lt__qg_group_buffer(a, QV_GBLK, QV_BLOCK_BYTES, 64, &gblk);
  if (u) {
    groups_run(q4, w, rb, a, n0, n1, u, gblk, y, ldy);
    free(u);
    return;
  }
  const int64_t M = a->M;
#define QV_TQ(MR, NR) blocks_tile(q4, MR, NR, w, rb, a, m0, n, y, ldy)
  QV_BLOCKED(QV_TQ);
#undef QV_TQ
}

QV_TARGET static void q8_0_vnni(const char *w, size_t rb, const lt__qact *a, int64_t n0, int64_t n1, float *y,
                                int64_t ldy) {
  blocks_vnni(0, w, rb, a, n0, n1, y, ldy);
}

QV_TARGET static void q4_0_vnni(const char *w, size_t rb, const lt__qact *a, int64_t n0, int64_t n1, float *y,
                                int64_t ldy) {
  blocks_vnni(1, w, rb, a, n0, n1, y, ldy);
}

void lt__qgemm_blocks_vnni(lt_qformat fmt, const char *w, size_t row_bytes, const lt__qact *a, int64_t n0, int64_t n1,
                           float *y, int64_t ldy) {
  if (fmt == LT_QFORMAT_Q4_0) q4_0_vnni(w, row_bytes, a, n0, n1, y, ldy);
  else q8_0_vnni(w, row_bytes, a, n0, n1, y, ldy);
}

/* ---- the activations ------------------------------------------------------ */

/* roundf (half away from zero) of 16 lanes, exactly: the truncation, plus
 * the sign where the dropped part is at least one half (t - trunc(t) is
 * exact). */
QV_INLINE __m512 round_away(__m512 t) {
  const __m512 r = _mm512_roundscale_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(t, r)), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  const __m512 one = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(_mm512_set1_ps(1.0f)),
                                                         _mm512_and_si512(_mm512_castps_si512(t),
                                                                          _mm512_set1_epi32((int)0x80000000u))));
  return _mm512_mask_add_ps(r, up, r, one);
}

QV_TARGET void lt__qact_fill_vnni(const float *x2, int64_t M, int64_t K, int32_t shift, lt__qact *a) {
  const int64_t nb = a->nb;
  const __m256i ones = _mm256_set1_epi8(1), nshift = _mm256_set1_epi32(-shift);
  for (int64_t m = 0; m < M; m++)
    for (int64_t b = 0; b < nb; b++) {
      const int64_t k0 = b * LT_QK8_0;
      const int64_t n0 = K - k0 >= 16 ? 16 : K - k0 > 0 ? K - k0 : 0, n1 = K - k0 >= 32 ? 16 : K - k0 > 16 ? K - k0 - 16 : 0;
      const __m512 v0 = _mm512_maskz_loadu_ps((__mmask16)((1u << n0) - 1), x2 + m * K + k0);
      const __m512 v1 = _mm512_maskz_loadu_ps((__mmask16)((1u << n1) - 1), x2 + m * K + k0 + 16);
      const __m512 inf = _mm512_set1_ps(INFINITY);
      const bool finite = _mm512_cmp_ps_mask(_mm512_abs_ps(v0), inf, _CMP_LT_OQ) == 0xFFFF &&
                          _mm512_cmp_ps_mask(_mm512_abs_ps(v1), inf, _CMP_LT_OQ) == 0xFFFF;
      /* lt__quantize_q8_0's rounding: amax, d = amax / 127, id = 1 / d */
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
      const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
      const uint16_t h = lt_f16_from_f32(d);
      a->xd[m * nb + b] = finite ? lt_f32_from_f16(h) : NAN;
      const __m512 vid = _mm512_set1_ps(finite ? id : 0.0f); /* a block that is not finite: quants 0 */
      const __m128i q0 = _mm512_cvtsepi32_epi8(_mm512_cvttps_epi32(round_away(_mm512_mul_ps(v0, vid))));
      const __m128i q1 = _mm512_cvtsepi32_epi8(_mm512_cvttps_epi32(round_away(_mm512_mul_ps(v1, vid))));
      const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(q0), q1, 1);
      _mm256_storeu_si256((__m256i *)(a->xq + m * a->Kp + k0), q);
      const __m256i s4 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, q); /* the sums of 4 quants */
      _mm256_storeu_si256((__m256i *)(a->nc + (m * nb + b) * 8), _mm256_mullo_epi32(s4, nshift));
      if (a->xsum) { /* the block's sum (the grouped kernel's correction) */
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s4), _mm256_extracti128_si256(s4, 1));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
        a->xsum[m * nb + b] = _mm_cvtsi128_si32(h);
      }
    }
}

/* ---- bf16 ----------------------------------------------------------------- */

/* 16 bf16 weights widened to f32 (exact: a shift); masked for the tail. */
QV_INLINE __m512 bf16_widen(__m256i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16)); }

/* The loads of the main loop are unmasked (masked ones measured slower at M
 * = 1, docs/decoding.md); the tail alone is masked. */
QV_INLINE void bf16_tile(int MR, int NR, const char *w, size_t rb, int64_t K, const float *x, int64_t m0, int64_t n,
                         float *y, int64_t ldy) {
  const uint16_t *row[QV_NR];
  __m512 acc[QV_MR][QV_NR];
  for (int j = 0; j < NR; j++) row[j] = (const uint16_t *)(w + (size_t)(n + j) * rb);
  for (int r = 0; r < MR; r++)
    for (int j = 0; j < NR; j++) acc[r][j] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    __m512 wv[QV_NR];
    for (int j = 0; j < NR; j++) wv[j] = bf16_widen(_mm256_loadu_si256((const __m256i *)(row[j] + k)));
    for (int r = 0; r < MR; r++) {
      const __m512 xv = _mm512_loadu_ps(x + (m0 + r) * K + k);
      for (int j = 0; j < NR; j++) acc[r][j] = _mm512_fmadd_ps(wv[j], xv, acc[r][j]);
    }
  }
  if (k < K) {
    const __mmask16 mk = (__mmask16)((1u << (K - k)) - 1);
    __m512 wv[QV_NR];
    for (int j = 0; j < NR; j++) wv[j] = bf16_widen(_mm256_maskz_loadu_epi16(mk, row[j] + k));
    for (int r = 0; r < MR; r++) {
      const __m512 xv = _mm512_maskz_loadu_ps(mk, x + (m0 + r) * K + k);
      for (int j = 0; j < NR; j++) acc[r][j] = _mm512_fmadd_ps(wv[j], xv, acc[r][j]);
    }
  }
  for (int r = 0; r < MR; r++)
    for (int j = 0; j < NR; j++) y[(m0 + r) * ldy + n + j] = _mm512_reduce_add_ps(acc[r][j]);
}

QV_TARGET void lt__qgemm_bf16_avx512(const char *w, size_t rb, int64_t K, const float *x, int64_t M, int64_t n0,
                                     int64_t n1, float *y, int64_t ldy) {
#define QV_TB(MR, NR) bf16_tile(MR, NR, w, rb, K, x, m0, n, y, ldy)
  QV_BLOCKED(QV_TB);
#undef QV_TB
}

#endif /* LT__QDOT_X86 */
