/*
 * tensor/bf16dot.c: the vdpbf16ps kernel and its packing
 * (tensor/bf16dot_internal.h documents the layouts and the rounding).
 *
 * The library is built without -march: the functions that use AVX-512 are
 * compiled for it with target attributes and reached only after
 * lt__bf16dot_best() named a kernel (the callers check it once per call).
 * Elsewhere (other compilers or architectures) the kernel is absent and
 * lt__bf16dot_best() is LT__BF16DOT_NONE.
 *
 * The AMX kernel keeps a 32 x 32 block of C in four tiles (tmm0-3); per 32
 * elements of K it loads two 16-row tiles of A and two 16-column tiles of
 * B and issues four tdpbf16ps (16 x 16 x 32 each), then stores the block
 * to a buffer on the stack and adds alpha times it to C, masked to M and
 * N (a whole block with alpha 1 and no accumulation: stored into C as it
 * is). One tile configuration for every shape (the padding of the header
 * makes the partial blocks whole); loaded at the start of each product and
 * released at its end, so no tile state outlives a call.
 *
 * The vdpbf16ps kernel keeps an 8 x 32 block of C in 16 zmm accumulators;
 * per pair of k it loads two 16-column vectors of B and broadcasts one
 * 32-bit pair of each of the 8 rows of A. Rows past M repeat the last row
 * (computed, not stored) and columns past N are masked.
 *
 * Where AMX is present it is the bf16 engine, not this kernel: on Sapphire
 * Rapids class CPUs vdpbf16ps retires a quarter as many instructions a
 * cycle as vfmadd231ps, so it does half the f32 FMA rate and the kernel
 * falls below the f32 panel kernel (figures: docs/mixed-precision.md, "Figures behind the code's rules"). CPUs with AVX512_BF16 and
 * no AMX (Cooper Lake, AMD Zen 4/5) run vdpbf16ps at the f32 FMA rate or
 * better, and take it.
 */
#define _DEFAULT_SOURCE /* syscall */
#include "tensor/bf16dot_internal.h"

#include "tensor/error_internal.h"
#include "tensor/bf16round_internal.h" /* lt__bf16_run */
#include "tensor/storage_internal.h"

#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 10
#define LT__BD 1
#include <immintrin.h>
#define BD_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16")))
#define AMX_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16,amx-tile,amx-bf16")))
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#ifdef LT__BD

static lt__bf16dot_kind bd_best = LT__BF16DOT_NONE;
static pthread_once_t bd_once = PTHREAD_ONCE_INIT;

static void bd_init(void) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512bf16"))
    return;
  bd_best = LT__BF16DOT_DOT;
  if (!__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-bf16")) return;
  /* Linux >= 5.16: a process must ask for the AMX tile data state
   * (ARCH_REQ_XCOMP_PERM 0x1023, XFEATURE_XTILEDATA 18) before using it;
   * the request is per process and idempotent. */
  if (syscall(SYS_arch_prctl, 0x1023, 18) == 0) bd_best = LT__BF16DOT_AMX;
}

lt__bf16dot_kind lt__bf16dot_best(void) {
  pthread_once(&bd_once, bd_init);
  return bd_best;
}

#define BD_MR 8

static inline int32_t bd_ld32(const uint16_t *p) {
  int32_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

BD_TARGET static void dot_gemm(int64_t M, int64_t N, int64_t kp, float alpha, const uint16_t *A, int64_t lda,
                               const uint16_t *B, int64_t ldb, bool accumulate, float *C, int64_t ldc) {
  const __m512 va = _mm512_set1_ps(alpha);
  for (int64_t n0 = 0; n0 < N; n0 += 32) {
    const int64_t nn = N - n0;
    const __mmask16 k0 = nn >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nn) - 1);
    const __mmask16 k1 = nn >= 32 ? (__mmask16)0xffff : nn <= 16 ? (__mmask16)0 : (__mmask16)((1u << (nn - 16)) - 1);
    const uint16_t *b = B + 2 * n0;
    for (int64_t m0 = 0; m0 < M; m0 += BD_MR) {
      const uint16_t *ar[BD_MR];
#pragma GCC unroll 8
      for (int r = 0; r < BD_MR; r++) ar[r] = A + (m0 + r < M ? m0 + r : M - 1) * lda;
      __m512 c[BD_MR][2];
#pragma GCC unroll 8
      for (int r = 0; r < BD_MR; r++) c[r][0] = c[r][1] = _mm512_setzero_ps();
      for (int64_t p = 0; p < kp; p++) {
        const __m512bh b0 = (__m512bh)_mm512_maskz_loadu_epi32(k0, b + p * ldb);
        const __m512bh b1 = (__m512bh)_mm512_maskz_loadu_epi32(k1, b + p * ldb + 32);
#pragma GCC unroll 8
        for (int r = 0; r < BD_MR; r++) {
          const __m512bh a = (__m512bh)_mm512_set1_epi32(bd_ld32(ar[r] + 2 * p));
          c[r][0] = _mm512_dpbf16_ps(c[r][0], a, b0);
          c[r][1] = _mm512_dpbf16_ps(c[r][1], a, b1);
        }
      }
      const int64_t mr = M - m0 < BD_MR ? M - m0 : BD_MR;
      for (int r = 0; r < mr; r++) {
        float *cr = C + (m0 + r) * ldc + n0;
        if (accumulate) {
          _mm512_mask_storeu_ps(cr, k0, _mm512_fmadd_ps(c[r][0], va, _mm512_maskz_loadu_ps(k0, cr)));
          _mm512_mask_storeu_ps(cr + 16, k1, _mm512_fmadd_ps(c[r][1], va, _mm512_maskz_loadu_ps(k1, cr + 16)));
        } else {
          _mm512_mask_storeu_ps(cr, k0, _mm512_mul_ps(c[r][0], va));
          _mm512_mask_storeu_ps(cr + 16, k1, _mm512_mul_ps(c[r][1], va));
        }
      }
    }
  }
}

/* The tile configuration of the AMX kernel (palette 1): eight tiles of 16
 * rows x 64 bytes (C: 16 x 16 f32; A: 16 rows x 32 bf16; B: 16 pair rows
 * x 16 columns). */
typedef struct amx_cfg {
  uint8_t palette, start_row, reserved[14];
  uint16_t colsb[16];
  uint8_t rows[16];
} amx_cfg;

AMX_TARGET static void amx_gemm(int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *A, int64_t lda,
                                const uint16_t *B, int64_t ldb, bool accumulate, float *C, int64_t ldc) {
  amx_cfg cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.palette = 1;
  for (int t = 0; t < 8; t++) cfg.rows[t] = 16, cfg.colsb[t] = 64;
  _tile_loadconfig(&cfg);
  const int64_t ks = (K + 31) / 32, sa = lda * 2, sb = ldb * 2;
  float buf[32 * 32] __attribute__((aligned(64)));
  const __m512 va = _mm512_set1_ps(alpha);
  const bool direct = alpha == 1.0f && !accumulate; /* 1 * sum is sum, bit for bit */
  for (int64_t n0 = 0; n0 < N; n0 += 32) {
    const int64_t nn = N - n0;
    const __mmask16 k0 = nn >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nn) - 1);
    const __mmask16 k1 = nn >= 32 ? (__mmask16)0xffff : nn <= 16 ? (__mmask16)0 : (__mmask16)((1u << (nn - 16)) - 1);
    for (int64_t m0 = 0; m0 < M; m0 += 32) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (int64_t s = 0; s < ks; s++) {
        const uint16_t *a = A + m0 * lda + 32 * s, *b = B + 16 * s * ldb + 2 * n0;
        _tile_loadd(4, a, sa);
        _tile_loadd(5, a + 16 * lda, sa);
        _tile_loadd(6, b, sb);
        _tile_loadd(7, b + 32, sb);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
      const int64_t mr = M - m0 < 32 ? M - m0 : 32;
      if (direct && mr == 32 && nn >= 32) { /* C = the sums as they are: the tiles straight into C */
        float *c = C + m0 * ldc + n0;
        _tile_stored(0, c, ldc * 4);
        _tile_stored(1, c + 16, ldc * 4);
        _tile_stored(2, c + 16 * ldc, ldc * 4);
        _tile_stored(3, c + 16 * ldc + 16, ldc * 4);
        continue;
      }
      _tile_stored(0, buf, 128);
      _tile_stored(1, buf + 16, 128);
      _tile_stored(2, buf + 16 * 32, 128);
      _tile_stored(3, buf + 16 * 32 + 16, 128);
      for (int64_t r = 0; r < mr; r++) {
        float *cr = C + (m0 + r) * ldc + n0;
        const __m512 c0 = _mm512_load_ps(buf + r * 32), c1 = _mm512_load_ps(buf + r * 32 + 16);
        if (accumulate) {
          _mm512_mask_storeu_ps(cr, k0, _mm512_fmadd_ps(c0, va, _mm512_maskz_loadu_ps(k0, cr)));
          _mm512_mask_storeu_ps(cr + 16, k1, _mm512_fmadd_ps(c1, va, _mm512_maskz_loadu_ps(k1, cr + 16)));
        } else {
          _mm512_mask_storeu_ps(cr, k0, _mm512_mul_ps(c0, va));
          _mm512_mask_storeu_ps(cr + 16, k1, _mm512_mul_ps(c1, va));
        }
      }
    }
  }
  _tile_release();
}

void lt__bf16dot_gemm(lt__bf16dot_kind kind, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *A,
                      int64_t lda, const uint16_t *B, int64_t ldb, bool accumulate, float *C, int64_t ldc) {
  LT_CHECK(kind != LT__BF16DOT_NONE && kind <= lt__bf16dot_best());
  if (M <= 0 || N <= 0) return;
  if (kind == LT__BF16DOT_AMX) amx_gemm(M, N, K, alpha, A, lda, B, ldb, accumulate, C, ldc);
  else dot_gemm(M, N, (K + 1) / 2, alpha, A, lda, B, ldb, accumulate, C, ldc);
}

/* 16 floats to bf16 with lt__bf16_from_f32's rule, each in the low half of
 * a 32-bit lane (high half zero): the register form the pair and transposed
 * packs need (contiguous rows go through lt__bf16_run, the same rule);
 * tests/test_bf16dot.c checks both against lt__bf16_from_f32 bit for bit. */
BD_TARGET static inline __m512i bd_cvt16(__m512 x) {
  const __m512i u = _mm512_castps_si512(x), hi = _mm512_srli_epi32(u, 16);
  const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __m512i nan = _mm512_or_si512(hi, _mm512_set1_epi32(0x40));
  const __mmask16 isnan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_blend_epi32(isnan, r, nan);
}

static inline __mmask16 bd_tail(int64_t n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1); }

/* 16 x 16 floats transposed in registers: r[i] lane j -> r[j] lane i
 * (unpack pairs, then pairs of pairs, then 128-bit lanes). */
BD_TARGET static inline void bd_tr16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; i++) { /* r[4i + j], lane L: rows 4i..4i+3 of column 4L + j */
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]);
    const __m512d c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  __m512 o[16];
  for (int j = 0; j < 4; j++) {
    const __m512 u0 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88), u1 = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xdd);
    const __m512 u2 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
    const __m512 u3 = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xdd);
    o[j] = _mm512_shuffle_f32x4(u0, u2, 0x88);
    o[8 + j] = _mm512_shuffle_f32x4(u0, u2, 0xdd);
    o[4 + j] = _mm512_shuffle_f32x4(u1, u3, 0x88);
    o[12 + j] = _mm512_shuffle_f32x4(u1, u3, 0xdd);
  }
  for (int i = 0; i < 16; i++) r[i] = o[i];
}

/* A transposed source (rs == 1: x's rows are the source's contiguous
 * columns, "runs"): blocks of 16 runs x 16 output rows, each run's piece
 * converted (rows layout: 16 elements, one per 32-bit lane; pairs layout:
 * 32 elements as 16 pair words), transposed in registers (bd_tr16), and
 * stored as 16 output rows of 16 elements or words. */
BD_TARGET static void bd_transposed(uint16_t *dst, int64_t ldd, const float *x, int64_t rows, int64_t cols,
                                    int64_t cs, bool pairs) {
  const int64_t n = pairs ? (rows + 1) / 2 : rows; /* rows of the output */
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (int64_t j0 = 0; j0 < cols; j0 += 16) {
    const int64_t nj = cols - j0 < 16 ? cols - j0 : 16;
    const __mmask16 kj = bd_tail(nj);
    for (int64_t i0 = 0; i0 < n; i0 += 16) {
      const int64_t ni = n - i0 < 16 ? n - i0 : 16;
      __m512 r[16];
      for (int k = 0; k < 16; k++) {
        if (k >= nj) {
          r[k] = _mm512_setzero_ps();
          continue;
        }
        const float *src = x + (j0 + k) * cs;
        if (!pairs) {
          r[k] = _mm512_castsi512_ps(bd_cvt16(_mm512_maskz_loadu_ps(bd_tail(ni), src + i0)));
          continue;
        }
        const int64_t e0 = 2 * i0, ne = rows - e0 < 32 ? rows - e0 : 32;
        const __m512i a = bd_cvt16(_mm512_maskz_loadu_ps(bd_tail(ne), src + e0));
        const __m512i b = bd_cvt16(_mm512_maskz_loadu_ps(bd_tail(ne > 16 ? ne - 16 : 0), src + e0 + 16));
        const __m512i lo = _mm512_permutex2var_epi32(a, ev, b), hi = _mm512_permutex2var_epi32(a, od, b);
        r[k] = _mm512_castsi512_ps(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
      }
      bd_tr16(r); /* r[i]: output row i0 + i, lane k: run j0 + k */
      for (int i = 0; i < ni; i++) {
        if (pairs) _mm512_mask_storeu_epi32(dst + (i0 + i) * ldd + 2 * j0, kj, _mm512_castps_si512(r[i]));
        else _mm512_mask_cvtepi32_storeu_epi16(dst + (i0 + i) * ldd + j0, kj, _mm512_castps_si512(r[i]));
      }
    }
  }
}

BD_TARGET void lt__bf16dot_pack_rows(uint16_t *dst, int64_t ldd, const float *x, int64_t rows, int64_t cols,
                                     int64_t rs, int64_t cs) {
  for (int64_t i = 0; i < rows; i++) {
    uint16_t *d = dst + i * ldd;
    const float *s = x + i * rs;
    if (cs == 1) lt__bf16_run(d, s, cols); /* autocast's vectorised rounding (tensor/matmul.c) */
    else if (rs != 1)
      for (int64_t j = 0; j < cols; j++) d[j] = lt__bf16_from_f32(s[j * cs]);
    const int64_t pad = LT__BF16DOT_CEIL(cols) < ldd ? LT__BF16DOT_CEIL(cols) : ldd;
    for (int64_t j = cols; j < pad; j++) d[j] = 0;
  }
  if (rs == 1 && cs != 1 && rows > 0 && cols > 0) bd_transposed(dst, ldd, x, rows, cols, cs, false);
}

BD_TARGET void lt__bf16dot_pack_pairs(uint16_t *dst, int64_t ldd, const float *x, int64_t rows, int64_t cols,
                                      int64_t rs, int64_t cs) {
  const int64_t np = (rows + 1) / 2, npad = LT__BF16DOT_CEIL(rows) / 2;
  for (int64_t p = np; p < npad; p++) memset(dst + p * ldd, 0, (size_t)cols * 4);
  if (cs == 1) { /* two rows of x interleaved, 16 columns at a time */
    for (int64_t p = 0; p < np; p++) {
      const float *s0 = x + 2 * p * rs, *s1 = s0 + rs;
      const bool two = 2 * p + 1 < rows;
      uint16_t *d = dst + p * ldd;
      for (int64_t j = 0; j < cols; j += 16) {
        const __mmask16 k = bd_tail(cols - j);
        __m512i w = bd_cvt16(_mm512_maskz_loadu_ps(k, s0 + j));
        if (two) w = _mm512_or_si512(w, _mm512_slli_epi32(bd_cvt16(_mm512_maskz_loadu_ps(k, s1 + j)), 16));
        _mm512_mask_storeu_epi32(d + 2 * j, k, w);
      }
    }
    return;
  }
  if (rs == 1 && rows > 0 && cols > 0) { /* x's columns contiguous: two elements of a pair adjacent */
    bd_transposed(dst, ldd, x, rows, cols, cs, true);
    return;
  }
  for (int64_t j = 0; j < cols; j++) /* strided both ways: element by element */
    for (int64_t p = 0; p < np; p++) {
      const int64_t i = 2 * p;
      dst[p * ldd + 2 * j] = lt__bf16_from_f32(x[i * rs + j * cs]);
      dst[p * ldd + 2 * j + 1] = i + 1 < rows ? lt__bf16_from_f32(x[(i + 1) * rs + j * cs]) : 0;
    }
}

BD_TARGET void lt__bf16dot_pack_rows_pairs(uint16_t *rdst, int64_t ldr, uint16_t *pdst, int64_t ldp, const float *x,
                                           int64_t rows, int64_t cols, int64_t rs) {
  const int64_t np = (rows + 1) / 2, npad = LT__BF16DOT_CEIL(rows) / 2;
  const int64_t rpad = LT__BF16DOT_CEIL(cols) < ldr ? LT__BF16DOT_CEIL(cols) : ldr;
  for (int64_t p = np; p < npad; p++) memset(pdst + p * ldp, 0, (size_t)cols * 4);
  for (int64_t p = 0; p < np; p++) {
    const float *s0 = x + 2 * p * rs, *s1 = s0 + rs;
    const bool two = 2 * p + 1 < rows;
    uint16_t *d = pdst + p * ldp, *r0 = rdst + 2 * p * ldr, *r1 = r0 + ldr;
    for (int64_t j = 0; j < cols; j += 16) {
      const __mmask16 k = bd_tail(cols - j);
      const __m512i w0 = bd_cvt16(_mm512_maskz_loadu_ps(k, s0 + j));
      __m512i w = w0;
      _mm512_mask_cvtepi32_storeu_epi16(r0 + j, k, w0);
      if (two) {
        const __m512i w1 = bd_cvt16(_mm512_maskz_loadu_ps(k, s1 + j));
        _mm512_mask_cvtepi32_storeu_epi16(r1 + j, k, w1);
        w = _mm512_or_si512(w0, _mm512_slli_epi32(w1, 16));
      }
      _mm512_mask_storeu_epi32(d + 2 * j, k, w);
    }
    for (int64_t j = cols; j < rpad; j++) r0[j] = 0;
    if (two)
      for (int64_t j = cols; j < rpad; j++) r1[j] = 0;
  }
}

BD_TARGET void lt__bf16dot_transpose_f32(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t n,
                                         int64_t m) {
  for (int64_t i0 = 0; i0 < n; i0 += 16) {
    const int64_t ni = n - i0 < 16 ? n - i0 : 16;
    for (int64_t j0 = 0; j0 < m; j0 += 16) {
      const int64_t nj = m - j0 < 16 ? m - j0 : 16;
      const __mmask16 kj = bd_tail(nj), ki = bd_tail(ni);
      __m512 r[16];
      for (int k = 0; k < 16; k++)
        r[k] = k < ni ? _mm512_maskz_loadu_ps(kj, src + (i0 + k) * lds + j0) : _mm512_setzero_ps();
      bd_tr16(r);
      for (int k = 0; k < nj; k++) _mm512_mask_storeu_ps(dst + (j0 + k) * ldd + i0, ki, r[k]);
    }
  }
}

#else /* no AVX-512 build: never available, never called */

lt__bf16dot_kind lt__bf16dot_best(void) { return LT__BF16DOT_NONE; }

void lt__bf16dot_gemm(lt__bf16dot_kind kind, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *A,
                      int64_t lda, const uint16_t *B, int64_t ldb, bool accumulate, float *C, int64_t ldc) {
  (void)kind, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B, (void)ldb, (void)accumulate, (void)C,
      (void)ldc;
  LT_CHECK(!"lt__bf16dot_gemm without AVX512_BF16");
}

void lt__bf16dot_pack_rows(uint16_t *dst, int64_t ldd, const float *x, int64_t rows, int64_t cols, int64_t rs,
                           int64_t cs) {
  (void)dst, (void)ldd, (void)x, (void)rows, (void)cols, (void)rs, (void)cs;
  LT_CHECK(!"lt__bf16dot_pack_rows without AVX512_BF16");
}

void lt__bf16dot_pack_pairs(uint16_t *dst, int64_t ldd, const float *x, int64_t rows, int64_t cols, int64_t rs,
                            int64_t cs) {
  (void)dst, (void)ldd, (void)x, (void)rows, (void)cols, (void)rs, (void)cs;
  LT_CHECK(!"lt__bf16dot_pack_pairs without AVX512_BF16");
}

void lt__bf16dot_pack_rows_pairs(uint16_t *rdst, int64_t ldr, uint16_t *pdst, int64_t ldp, const float *x,
                                 int64_t rows, int64_t cols, int64_t rs) {
  (void)rdst, (void)ldr, (void)pdst, (void)ldp, (void)x, (void)rows, (void)cols, (void)rs;
  LT_CHECK(!"lt__bf16dot_pack_rows_pairs without AVX512_BF16");
}

void lt__bf16dot_transpose_f32(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t n, int64_t m) {
  (void)dst, (void)ldd, (void)src, (void)lds, (void)n, (void)m;
  LT_CHECK(!"lt__bf16dot_transpose_f32 without AVX-512");
}

#endif

const char *lt__bf16dot_path(void) {
  switch (lt__bf16dot_best()) {
  case LT__BF16DOT_AMX: return "AMX tiles (tdpbf16ps)";
  case LT__BF16DOT_DOT: return "AVX512_BF16 (vdpbf16ps)";
  default: return "none on this CPU (tile products through the bf16 products)";
  }
}
