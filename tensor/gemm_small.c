/*
 * tensor/gemm_small.c: the small-product kernels (tensor/gemm_small_internal.h),
 * f32 and f64 products written with AVX-512 intrinsics for the shapes where
 * BLIS 0.9 is slow: the skinny kernels (a few rows or columns of C) and the
 * panel kernel (f32, a small packed B), with the panel kernel's packing.
 *
 * What this is not: the rule saying which products come here (the GEMM
 * dispatch, tensor/gemm.c, with the thresholds measured against BLIS), a
 * CPU check (the dispatch asks the path table, tensor/paths.def, before
 * calling: every kernel here needs AVX-512F), nor BLIS (tensor/blis.c).
 * docs/gemm.md ("Skinny and small products") has the layouts and figures.
 */
#include "tensor/gemm_small_internal.h"

#include "tensor/error_internal.h"
#include "tensor/threads_internal.h"

#include <omp.h>
#include <stdlib.h>

/* ---- skinny products ----------------------------------------------------- */

/* Products with few rows (or columns) of C, and small ones, written here with
 * AVX-512 intrinsics. Debian's BLIS 0.9 registers no small/unpacked ("sup")
 * kernels for 'skx' (the 'haswell' set has them, but its context is not
 * reachable from the exported API while 'skx' is active), so every such
 * product packs the whole of B and runs the 32x12 micro-kernel on a tile
 * mostly of padding, several times slower than these kernels on a Linear's
 * x W^T with few rows (docs/gemm.md, "Skinny and small products"). Two layouts, after orienting C so that its short side is m:
 * - dot: A's rows and B's columns contiguous along k (x W^T, Q K^T): 4x4
 *   blocks of C, each element a sum of 16-lane (8 for f64) partial sums over
 *   k, reduced at the end;
 * - axpy: B's rows contiguous along n (P V, dY W): 4 rows x 64 columns of C,
 *   each element one FMA per p in order.
 * In both, every element of C is a fixed sequence of operations that depends
 * only on m, n, k and the layout, never on where its block starts: a split
 * of n over threads gives the same bits. Compiled for AVX-512 with target
 * attributes (the library is built without -march), chosen at run time. */
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define LT__SK 1
#include <immintrin.h>
#define SK_TARGET __attribute__((target("avx512f,fma")))
/* The one-row dot kernel (sk_dot1) takes the rows of B one after the other:
 * one stream of memory per thread, which the hardware prefetcher follows.
 * Measured on Llama 205M's F32 matrices one row of x at a time (697 MB, 2
 * threads, Zen 5 EPYC, 4 alternating rounds, best of 10 passes each): 28-30
 * GB/s with 8 rows side by side and a software prefetch 512 bytes ahead,
 * 29-36 (median 34) one row at a time without it; prefetching one row's
 * stream measured slower still. One accumulator a row: an FMA's latency
 * (4 cycles for 64 bytes) is above what one core's share of memory
 * delivers. */
#define SK_DEFINE(T, S, VT, MT, VW)                                                                             \
  /* dot with one row of C (a decoding step's x W^T): a column at a time, the row of a read from L1; each     \
   * element the same 16-lane (8) partial sums over k as sk_dot's, reduced at the end */                     \
  SK_TARGET static void sk_dot1_##S(int64_t n, int64_t k, T alpha, const T *a, const T *b, int64_t csb, T beta, \
                                    T *c, int64_t csc) {                                                       \
    const MT tail = (MT)((1u << (k % VW)) - 1);                                                                \
    const int64_t kv = k - k % VW;                                                                             \
    for (int64_t j = 0; j < n; j++) {                                                                          \
      const T *br = b + j * csb;                                                                               \
      VT acc = _mm512_setzero_##S();                                                                           \
      int64_t p = 0;                                                                                           \
      for (; p < kv; p += VW) acc = _mm512_fmadd_##S(_mm512_loadu_##S(a + p), _mm512_loadu_##S(br + p), acc);  \
      if (tail)                                                                                                \
        acc = _mm512_fmadd_##S(_mm512_maskz_loadu_##S(tail, a + p), _mm512_maskz_loadu_##S(tail, br + p), acc); \
      T v = alpha * _mm512_reduce_add_##S(acc), *pc = c + j * csc;                                             \
      *pc = beta == 0 ? v : v + beta * *pc;                                                                    \
    }                                                                                                          \
  }                                                                                                            \
  /* dot: a[i*rsa + p], b[j*csb + p] */                                                                         \
  SK_TARGET static void sk_dot_##S(int64_t m, int64_t n, int64_t k, T alpha, const T *a, int64_t rsa,          \
                                   const T *b, int64_t csb, T beta, T *c, int64_t rsc, int64_t csc) {          \
    if (m == 1) {                                                                                              \
      sk_dot1_##S(n, k, alpha, a, b, csb, beta, c, csc);                                                       \
      return;                                                                                                  \
    }                                                                                                          \
    const MT tail = (MT)((1u << (k % VW)) - 1);                                                                \
    const int64_t kv = k - k % VW;                                                                             \
    for (int64_t i0 = 0; i0 < m; i0 += 4) {                                                                    \
      const T *ar[4]; /* rows past m repeat the last (computed, not stored) */                                 \
      for (int r = 0; r < 4; r++) ar[r] = a + (i0 + r < m ? i0 + r : m - 1) * rsa;                             \
      for (int64_t j0 = 0; j0 < n; j0 += 4) {                                                                  \
        const T *bq[4];                                                                                        \
        for (int q = 0; q < 4; q++) bq[q] = b + (j0 + q < n ? j0 + q : n - 1) * csb;                           \
        VT acc[4][4];                                                                                          \
        for (int r = 0; r < 4; r++)                                                                            \
          for (int q = 0; q < 4; q++) acc[r][q] = _mm512_setzero_##S();                                        \
        for (int64_t p = 0; p <= kv; p += VW) {                                                                \
          VT av[4], bv[4];                                                                                     \
          if (p < kv) {                                                                                        \
            for (int r = 0; r < 4; r++) av[r] = _mm512_loadu_##S(ar[r] + p);                                   \
            for (int q = 0; q < 4; q++) bv[q] = _mm512_loadu_##S(bq[q] + p);                                   \
          } else {                                                                                             \
            if (!tail) break;                                                                                  \
            for (int r = 0; r < 4; r++) av[r] = _mm512_maskz_loadu_##S(tail, ar[r] + p);                       \
            for (int q = 0; q < 4; q++) bv[q] = _mm512_maskz_loadu_##S(tail, bq[q] + p);                       \
          }                                                                                                    \
          for (int r = 0; r < 4; r++)                                                                          \
            for (int q = 0; q < 4; q++) acc[r][q] = _mm512_fmadd_##S(av[r], bv[q], acc[r][q]);                 \
        }                                                                                                      \
        for (int r = 0; r < 4 && i0 + r < m; r++)                                                              \
          for (int q = 0; q < 4 && j0 + q < n; q++) {                                                          \
            T v = alpha * _mm512_reduce_add_##S(acc[r][q]), *pc = c + (i0 + r) * rsc + (j0 + q) * csc;         \
            *pc = beta == 0 ? v : v + beta * *pc;                                                              \
          }                                                                                                    \
      }                                                                                                        \
    }                                                                                                          \
  }                                                                                                            \
  /* axpy: a[i*rsa + p*csa], b[p*rsb + j] */                                                                   \
  SK_TARGET static void sk_axpy_##S(int64_t m, int64_t n, int64_t k, T alpha, const T *a, int64_t rsa,         \
                                    int64_t csa, const T *b, int64_t rsb, T beta, T *c, int64_t rsc,           \
                                    int64_t csc) {                                                             \
    for (int64_t i0 = 0; i0 < m; i0 += 4) {                                                                    \
      const T *ar[4];                                                                                          \
      for (int r = 0; r < 4; r++) ar[r] = a + (i0 + r < m ? i0 + r : m - 1) * rsa;                             \
      for (int64_t j0 = 0; j0 < n; j0 += 4 * VW) {                                                             \
        MT mk[4]; /* lanes inside C */                                                                         \
        for (int q = 0; q < 4; q++) {                                                                          \
          const int64_t left = n - j0 - q * VW;                                                                \
          mk[q] = left >= VW ? (MT)~(MT)0 : left <= 0 ? (MT)0 : (MT)((1u << left) - 1);                        \
        }                                                                                                      \
        VT acc[4][4];                                                                                          \
        for (int r = 0; r < 4; r++)                                                                            \
          for (int q = 0; q < 4; q++) acc[r][q] = _mm512_setzero_##S();                                        \
        for (int64_t p = 0; p < k; p++) {                                                                      \
          VT bv[4];                                                                                            \
          const T *bp = b + p * rsb + j0;                                                                      \
          for (int q = 0; q < 4; q++)                                                                          \
            bv[q] = mk[q] == (MT)~(MT)0 ? _mm512_loadu_##S(bp + q * VW)                                        \
                                        : _mm512_maskz_loadu_##S(mk[q], bp + q * VW);                          \
          for (int r = 0; r < 4; r++) {                                                                        \
            const VT av = _mm512_set1_##S(ar[r][p * csa]);                                                     \
            for (int q = 0; q < 4; q++) acc[r][q] = _mm512_fmadd_##S(av, bv[q], acc[r][q]);                    \
          }                                                                                                    \
        }                                                                                                      \
        const int64_t w = n - j0 < 4 * VW ? n - j0 : 4 * VW;                                                   \
        for (int r = 0; r < 4 && i0 + r < m; r++) {                                                            \
          T out[4 * VW], *pc = c + (i0 + r) * rsc + j0 * csc;                                                  \
          for (int q = 0; q < 4; q++) _mm512_storeu_##S(out + q * VW, acc[r][q]);                              \
          if (beta == 0)                                                                                       \
            for (int64_t j = 0; j < w; j++) pc[j * csc] = alpha * out[j];                                      \
          else                                                                                                 \
            for (int64_t j = 0; j < w; j++) pc[j * csc] = alpha * out[j] + beta * pc[j * csc];                 \
        }                                                                                                      \
      }                                                                                                        \
    }                                                                                                          \
  }
SK_DEFINE(float, ps, __m512, __mmask16, 16)
SK_DEFINE(double, pd, __m512d, __mmask8, 8)
#undef SK_DEFINE

/* Columns [lo, lo+len) of C and B, one skinny kernel call (p->flag: dot). */
void lt__small_skinny_block(const lt__prod *p, int64_t lo, int64_t len) {
  const size_t es = lt__prod_elem_size(p->dtype);
  const bool dot = p->flag;
  const char *pb = (const char *)p->b + (size_t)(lo * (dot ? p->csb : 1)) * es;
  char *pc = (char *)p->c + (size_t)(lo * p->csc) * es;
  const int64_t m = p->m, k = p->k;
  if (p->dtype == LT_DTYPE_F32) {
    const float al = (float)p->alpha, be = (float)p->beta;
    if (dot) sk_dot_ps(m, len, k, al, p->a, p->rsa, (const float *)pb, p->csb, be, (float *)pc, p->rsc, p->csc);
    else
      sk_axpy_ps(m, len, k, al, p->a, p->rsa, p->csa, (const float *)pb, p->rsb, be, (float *)pc, p->rsc, p->csc);
  } else {
    if (dot)
      sk_dot_pd(m, len, k, p->alpha, p->a, p->rsa, (const double *)pb, p->csb, p->beta, (double *)pc, p->rsc,
                p->csc);
    else
      sk_axpy_pd(m, len, k, p->alpha, p->a, p->rsa, p->csa, (const double *)pb, p->rsb, p->beta, (double *)pc,
                 p->rsc, p->csc);
  }
}

/* ---- small products: the panel kernel (f32) ------------------------------ */

/* Products whose B is small (k x n fits in L2 once packed) and whose k or n
 * is too short for BLIS's 32x12 tiles and per-call setup to pay: the tiny
 * batched products of attention ([17,16]x[16,17] with 512 of them per layer
 * in a ViT, docs/gemm.md, "Small products") and the Linear layers of small
 * models ([2176,64]x[64,128]). BLIS 0.9 costs there about as much in setup
 * (control tree, memory-pool mutexes, packing) as in arithmetic.
 *
 * B is packed into panels of 64 columns (nv <= 4 vectors of 16, the last
 * panel zero-padded to whole vectors), k rows each; A is read in place with
 * any strides (one broadcast per element). A tile of mr rows x nv vectors of
 * C keeps its sums in registers over the whole of k: every element of C is
 * sum_p a[i,p] b[p,j], accumulated by FMA from zero in the order p = 0..k-1,
 * then multiplied by alpha (and beta c added, as in the skinny kernels). That
 * sequence depends on nothing but k, so any split of C over threads, and any
 * tile a row lands in, gives the same bits. */
#define SP_W LT__SMALL_W /* panel width in floats */

SK_TARGET static inline __attribute__((always_inline)) void sp_tile(const int mr, const int nv, int64_t k,
                                                                    const float *a, int64_t rsa, int64_t csa,
                                                                    const float *bp, int64_t ldb, float alpha, float beta,
                                                                    float *c, int64_t rsc, int64_t csc, int64_t w) {
  __m512 acc[8][4];
#pragma GCC unroll 8
  for (int r = 0; r < mr; r++)
#pragma GCC unroll 4
    for (int q = 0; q < nv; q++) acc[r][q] = _mm512_setzero_ps();
  for (int64_t p = 0; p < k; p++) {
    __m512 bv[4];
#pragma GCC unroll 4
    for (int q = 0; q < nv; q++) bv[q] = _mm512_loadu_ps(bp + p * ldb + q * 16);
#pragma GCC unroll 8
    for (int r = 0; r < mr; r++) {
      const __m512 av = _mm512_set1_ps(a[r * rsa + p * csa]);
#pragma GCC unroll 4
      for (int q = 0; q < nv; q++) acc[r][q] = _mm512_fmadd_ps(av, bv[q], acc[r][q]);
    }
  }
  const __m512 al = _mm512_set1_ps(alpha), be = _mm512_set1_ps(beta);
#pragma GCC unroll 8
  for (int r = 0; r < mr; r++) {
    float *pc = c + r * rsc;
    if (csc == 1) {
#pragma GCC unroll 4
      for (int q = 0; q < nv; q++) {
        const int64_t left = w - q * 16;
        const __mmask16 mk = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
        __m512 v = _mm512_mul_ps(al, acc[r][q]);
        if (beta != 0) v = _mm512_add_ps(v, _mm512_mul_ps(be, _mm512_maskz_loadu_ps(mk, pc + q * 16)));
        _mm512_mask_storeu_ps(pc + q * 16, mk, v);
      }
    } else {
      float out[SP_W];
#pragma GCC unroll 4
      for (int q = 0; q < nv; q++) _mm512_storeu_ps(out + q * 16, acc[r][q]);
      for (int64_t j = 0; j < w; j++)
        pc[j * csc] = beta == 0 ? alpha * out[j] : alpha * out[j] + beta * pc[j * csc];
    }
  }
}

/* Rows [i0, i1) of C against one packed panel of nv vectors (w columns):
 * tiles of 8 rows (nv <= 2) or 6 rows (nv 3, 4: 18 and 24 accumulators),
 * then the remaining rows as one shorter tile. */
#define SP_ROWS(NV, MR)                                                                                         \
  SK_TARGET static void sp_rows_##NV(int64_t i0, int64_t i1, int64_t k, const float *a, int64_t rsa,            \
                                     int64_t csa, const float *bp, int64_t ldb, float alpha, float beta,       \
                                     float *c,                                                                 \
                                     int64_t rsc, int64_t csc, int64_t w) {                                     \
    int64_t i = i0;                                                                                             \
    for (; i + MR <= i1; i += MR) sp_tile(MR, NV, k, a + i * rsa, rsa, csa, bp, ldb, alpha, beta, c + i * rsc, rsc, csc, w); \
    const float *ai = a + i * rsa;                                                                              \
    float *ci = c + i * rsc;                                                                                    \
    switch (i1 - i) {                                                                                           \
    case 7: sp_tile(7 < MR ? 7 : 1, NV, k, ai, rsa, csa, bp, ldb, alpha, beta, ci, rsc, csc, w); break;              \
    case 6: sp_tile(6 < MR ? 6 : 1, NV, k, ai, rsa, csa, bp, ldb, alpha, beta, ci, rsc, csc, w); break;              \
    case 5: sp_tile(5, NV, k, ai, rsa, csa, bp, ldb, alpha, beta, ci, rsc, csc, w); break;                           \
    case 4: sp_tile(4, NV, k, ai, rsa, csa, bp, ldb, alpha, beta, ci, rsc, csc, w); break;                           \
    case 3: sp_tile(3, NV, k, ai, rsa, csa, bp, ldb, alpha, beta, ci, rsc, csc, w); break;                           \
    case 2: sp_tile(2, NV, k, ai, rsa, csa, bp, ldb, alpha, beta, ci, rsc, csc, w); break;                           \
    case 1: sp_tile(1, NV, k, ai, rsa, csa, bp, ldb, alpha, beta, ci, rsc, csc, w); break;                           \
    default: break;                                                                                             \
    }                                                                                                           \
  }
SP_ROWS(1, 8)
SP_ROWS(2, 8)
SP_ROWS(3, 6)
SP_ROWS(4, 6)
#undef SP_ROWS

/* Per-thread packing buffer, grown as needed and kept for the thread's life
 * (a training step packs the same sizes again and again; freed when the
 * thread exits). */
static _Thread_local float *sp_buf;
static _Thread_local size_t sp_cap;

static void sp_release(void) {
  free(sp_buf);
  sp_buf = NULL;
  sp_cap = 0;
}

static float *sp_buffer(size_t floats) {
  if (floats <= sp_cap) return sp_buf;
  (void)lt__at_thread_exit(sp_release); /* released with the thread */
  free(sp_buf);
  const size_t bytes = (floats * sizeof(float) + 4095) & ~(size_t)4095;
  sp_buf = aligned_alloc(64, bytes);
  sp_cap = sp_buf ? bytes / sizeof(float) : 0;
  return sp_buf;
}

/* One panel product: C (or, with k split, the partial sums of each chunk of
 * k) from row blocks of SP_MB rows x panels x chunks, one task each. B is
 * either packed (panel q of chunk h at bp + (h*np + q)*kc*SP_W, rows of its
 * vectors) or read in place (ldb: its row stride; panel q of chunk h at
 * bp + h*kc*ldb + q*SP_W). */
#define SP_MB 96
typedef struct sp_job {
  int64_t m, n, kc, k;       /* kc: the chunk length (k when not split) */
  int64_t nrb, np, nch;      /* row blocks, panels, chunks */
  float alpha, beta;         /* of the tasks (1, 0 for partial sums) */
  const float *a;            /* A [m, k] in place */
  int64_t rsa, csa;
  const float *bp;           /* B, packed or in place */
  int64_t ldb;               /* in place: B's row stride; 0: packed */
  int64_t pn;                /* packed: the columns B was packed for (>= n) */
  float *c;                  /* C, or partials: chunk h at h*m*n, rows of n */
  int64_t rsc, csc;
} sp_job;

static void sp_task(const sp_job *jb, int64_t t) {
  const int64_t rb = t % jb->nrb, q = (t / jb->nrb) % jb->np, h = t / (jb->nrb * jb->np);
  const int64_t i0 = rb * SP_MB, i1 = i0 + SP_MB < jb->m ? i0 + SP_MB : jb->m;
  const int64_t j0 = q * SP_W, w = jb->n - j0 < SP_W ? jb->n - j0 : SP_W;
  const int64_t p0 = h * jb->kc, kl = jb->k - p0 < jb->kc ? jb->k - p0 : jb->kc;
  const float *bp;
  int64_t ldb;
  if (jb->ldb) {
    bp = jb->bp + p0 * jb->ldb + j0;
    ldb = jb->ldb;
  } else { /* a packed panel's rows are its own vectors wide (it may be wider than w) */
    const int64_t pw = jb->pn - j0 < SP_W ? jb->pn - j0 : SP_W, pnp = (jb->pn + SP_W - 1) / SP_W;
    bp = jb->bp + (h * pnp + q) * jb->kc * SP_W;
    ldb = (pw + 15) / 16 * 16;
  }
  const float *a = jb->a + p0 * jb->csa;
  float *c = jb->c + (jb->nch > 1 ? h * jb->m * jb->n : 0) + j0 * jb->csc;
  const float al = jb->alpha, be = jb->beta;
  switch ((w + 15) / 16) {
  case 1: sp_rows_1(i0, i1, kl, a, jb->rsa, jb->csa, bp, ldb, al, be, c, jb->rsc, jb->csc, w); break;
  case 2: sp_rows_2(i0, i1, kl, a, jb->rsa, jb->csa, bp, ldb, al, be, c, jb->rsc, jb->csc, w); break;
  case 3: sp_rows_3(i0, i1, kl, a, jb->rsa, jb->csa, bp, ldb, al, be, c, jb->rsc, jb->csc, w); break;
  default: sp_rows_4(i0, i1, kl, a, jb->rsa, jb->csa, bp, ldb, al, be, c, jb->rsc, jb->csc, w); break;
  }
}

/* Packs B [k, w] (w <= 64, strides rsb, csb) into k rows of nv*16 floats,
 * the lanes past w zero: masked vector loads when B's rows are contiguous,
 * gathers otherwise (a transposed view, as K^T in Q K^T: element by element
 * this packing cost as much as the product of a [17,16]x[16,17]). */
SK_TARGET static void sp_pack(int64_t k, int64_t w, const float *b, int64_t rsb, int64_t csb, float *dst) {
  const int nv = (int)((w + 15) / 16);
  __mmask16 mk[4];
  for (int q = 0; q < nv; q++) {
    const int64_t left = w - q * 16;
    mk[q] = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
  }
  if (csb == 1) {
    for (int64_t p = 0; p < k; p++)
      for (int q = 0; q < nv; q++)
        _mm512_store_ps(dst + (p * nv + q) * 16, _mm512_maskz_loadu_ps(mk[q], b + p * rsb + q * 16));
  } else if (csb > 0 && csb <= ((int64_t)1 << 24)) { /* 64 csb fits the 32-bit gather indices */
    const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                           _mm512_set1_epi32((int)csb));
    for (int64_t p = 0; p < k; p++)
      for (int q = 0; q < nv; q++)
        _mm512_store_ps(dst + (p * nv + q) * 16,
                        _mm512_mask_i32gather_ps(_mm512_setzero_ps(), mk[q], idx, b + p * rsb + q * 16 * csb, 4));
  } else {
    for (int64_t p = 0; p < k; p++)
      for (int64_t j = 0; j < nv * 16; j++) dst[p * nv * 16 + j] = j < w ? b[p * rsb + j * csb] : 0.0f;
  }
}

/* The chunks of k a long-k product is cut into. Fixed (never derived from
 * the thread count), so the partial sums, and C, have the same bits on any
 * number of threads. */
#define SP_KC LT__SMALL_KC

/* B read in place instead of packed: its rows contiguous (csb 1), every
 * panel whole vectors (n a multiple of 16: no lane past B's row is read),
 * and rows at most SP_INPLACE_MAX_RS floats apart (farther, each row of a
 * panel is on its own page: packing pays). Packing such a B would be a copy
 * into the layout it already has (figures: docs/gemm.md, "Figures behind the code's rules"). */
#define SP_INPLACE_MAX_RS 1024

/* Runs the job's tasks on nt threads (one OpenMP region, none for one). */
static void sp_run(const sp_job *jb, int nt) {
  const int64_t tasks = jb->nrb * jb->np * jb->nch;
  const int use = tasks < nt ? (int)tasks : nt;
  if (use <= 1) { /* no OpenMP region: its team costs more than a tiny product */
    for (int64_t t = 0; t < tasks; t++) sp_task(jb, t);
  } else {
#pragma omp parallel for schedule(static) num_threads(use)
    for (int64_t t = 0; t < tasks; t++) sp_task(jb, t);
  }
}

/* C = alpha A B + beta C (f32) with the panel kernel on nt threads, k in
 * chunks of kc (kc == k: one chunk, C written directly). With several
 * chunks, each chunk's product goes to its own [m, n] block of partial sums
 * and C = alpha (P_0 + P_1 + ...) + beta C is summed in chunk order. False
 * (nothing written) when the buffer cannot be had. */
bool lt__small_panel(int64_t m, int64_t n, int64_t k, int64_t kc, float alpha, const float *a, int64_t rsa,
                     int64_t csa, const float *b, int64_t rsb, int64_t csb, float beta, float *c, int64_t rsc,
                     int64_t csc, int nt) {
  const int64_t np = (n + SP_W - 1) / SP_W, nch = (k + kc - 1) / kc;
  const bool inplace = csb == 1 && n % 16 == 0 && rsb <= SP_INPLACE_MAX_RS;
  const int64_t packed = inplace ? 0 : nch * np * kc * SP_W;
  const bool split = nch > 1;
  float *buf = NULL;
  if (packed || split) {
    buf = sp_buffer((size_t)(packed + (split ? nch * m * n : 0)));
    if (!buf) return false;
  }
  if (!inplace)
    for (int64_t h = 0; h < nch; h++)
      for (int64_t q = 0; q < np; q++) { /* chunk h, panel q: kl rows of nv*16 floats */
        const int64_t j0 = q * SP_W, w = n - j0 < SP_W ? n - j0 : SP_W;
        const int64_t p0 = h * kc, kl = k - p0 < kc ? k - p0 : kc;
        sp_pack(kl, w, b + p0 * rsb + j0 * csb, rsb, csb, buf + (h * np + q) * kc * SP_W);
      }
  const sp_job jb = {m, n, kc, k, (m + SP_MB - 1) / SP_MB, np, nch, split ? 1.0f : alpha, split ? 0.0f : beta,
                     a, rsa, csa, inplace ? b : buf, inplace ? rsb : 0, n,
                     split ? buf + packed : c, split ? n : rsc, split ? 1 : csc};
  sp_run(&jb, nt);
  if (split) {
    const float *part = buf + packed;
    const int ur = m >= 2 * nt ? nt : 1;
#pragma omp parallel for schedule(static) num_threads(ur) if (ur > 1)
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {
        float s = part[i * n + j];
        for (int64_t h = 1; h < nch; h++) s += part[h * m * n + i * n + j];
        float *pc = c + i * rsc + j * csc;
        *pc = beta == 0 ? alpha * s : alpha * s + beta * *pc;
      }
  }
  return true;
}
#else /* no AVX-512 intrinsics: the path table never reports these kernels (tensor/paths.def) */
void lt__small_skinny_block(const lt__prod *p, int64_t lo, int64_t len) {
  (void)p, (void)lo, (void)len;
  LT_CHECK(!"lt__small_skinny_block without the skinny kernels");
}

bool lt__small_panel(int64_t m, int64_t n, int64_t k, int64_t kc, float alpha, const float *a, int64_t rsa,
                     int64_t csa, const float *b, int64_t rsb, int64_t csb, float beta, float *c, int64_t rsc,
                     int64_t csc, int nt) {
  (void)m, (void)n, (void)k, (void)kc, (void)alpha, (void)a, (void)rsa, (void)csa, (void)b, (void)rsb, (void)csb,
      (void)beta, (void)c, (void)rsc, (void)csc, (void)nt;
  return false;
}
#endif

/* ---- packed B, multiplied many times ------------------------------------- */

void lt__small_pack(int64_t k, int64_t n, const float *b, int64_t rsb, int64_t csb, float *dst) {
#ifdef LT__SK
  lt__prod_fix_strides(k, n, &rsb, &csb);
  for (int64_t q = 0; q * SP_W < n; q++) {
    const int64_t j0 = q * SP_W, w = n - j0 < SP_W ? n - j0 : SP_W;
    sp_pack(k, w, b + j0 * csb, rsb, csb, dst + q * k * SP_W);
  }
#else
  (void)k, (void)n, (void)b, (void)rsb, (void)csb, (void)dst;
  LT_CHECK(!"lt__small_pack without the panel kernel");
#endif
}

void lt__small_gemm_packed(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t rsa, int64_t csa,
                          const float *bp, int64_t pn, float beta, float *c, int64_t rsc, int64_t csc) {
#ifdef LT__SK
  LT_CHECK(n <= pn && k >= 1);
  if (m == 0 || n == 0) return;
  lt__prod_fix_strides(m, k, &rsa, &csa);
  lt__prod_fix_strides(m, n, &rsc, &csc);
  const sp_job jb = {m, n, k, k, (m + SP_MB - 1) / SP_MB, (n + SP_W - 1) / SP_W, 1, alpha, beta,
                     a, rsa, csa, bp, 0, pn, c, rsc, csc};
  sp_run(&jb, 1);
#else
  (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)rsa, (void)csa, (void)bp, (void)pn, (void)beta, (void)c,
      (void)rsc, (void)csc;
  LT_CHECK(!"lt__small_gemm_packed without the panel kernel");
#endif
}
