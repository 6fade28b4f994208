/*
 * tensor/random.c: the Philox4x32-10 counter-based generator and the random
 * creation ops (rand, randn, uniform, normal, bernoulli, randperm, and the
 * in-place uniform_/normal_ used by initialisers).
 *
 * Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy
 * as 1, 2, 3", SC'11) maps a 128-bit counter and a 64-bit key to four 32-bit
 * words through 10 rounds of multiply/xor. Here the key is the generator's
 * 64-bit seed and the counter of block b of a draw is the generator's offset + b
 * (128-bit addition). A draw of n elements uses blocks offset, offset+1, ...
 * and then advances the offset past them, so every element is a pure function
 * of (seed, offset, its index): results never depend on the number of threads,
 * and saving (seed, offset) resumes a sequence exactly. The element-to-word
 * layout of each distribution is documented in docs/random.md and beside each
 * kernel below; changing it changes every seeded result, so do not.
 *
 * What this is not: a cryptographic generator, or a source of entropy (there is
 * no default, time-seeded generator: every draw names its generator).
 */
#include "tensor/error_internal.h"
#include "tensor/paths_internal.h"
#include "tensor/storage_internal.h"
#include "tensor/runtime_internal.h"
#include "tensor/iter_internal.h"
#include "tensor/random_internal.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

struct lt_generator {
  uint64_t seed;
  uint64_t offset; /* Philox blocks consumed so far */
  bool nodraw;     /* lt_generator_new_skip_init's: the fills leave their tensors as they are */
};

/* ---- Philox4x32-10 ----------------------------------------------------- */

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

/* out = Philox4x32-10(ctr, key): 10 rounds, the key bumped by (W0, W1)
 * between rounds, as Random123's philox4x32_R(10, ...). The reference one-block
 * version; philox_batch below computes the same words PHILOX_BATCH blocks at a time. */
static inline void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; r++) {
    if (r > 0) { /* bump the key between rounds */
      k0 += PHILOX_W0;
      k1 += PHILOX_W1;
    }
    uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
    uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
    uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  out[0] = c0;
  out[1] = c1;
  out[2] = c2;
  out[3] = c3;
}

/* For tests/test_random.c (the Random123 known-answer tests). */
void lt__philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  philox4x32_10(ctr, key, out);
}

/* The four words of block b of a draw: counter = offset + b (128-bit, the
 * carry goes to the third word), key = (low, high) 32 bits of the seed. */
static inline void philox_block(uint64_t seed, uint64_t offset, uint64_t b, uint32_t w[4]) {
  uint64_t lo = offset + b;
  uint32_t ctr[4] = {(uint32_t)lo, (uint32_t)(lo >> 32), lo < offset ? 1u : 0u, 0u};
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  philox4x32_10(ctr, key, w);
}

/* ---- words to numbers -------------------------------------------------- */

/* [0, 1) with 24 bits (exact in float). */
static inline float u24(uint32_t w) { return (float)(w >> 8) * 0x1p-24f; }
/* [0, 1) with 53 bits from two words (exact in double). */
static inline double u53(uint32_t a, uint32_t b) {
  return (double)((((uint64_t)a << 32) | b) >> 11) * 0x1p-53;
}
/* (0, 1] with 32 bits, for the logarithm of Box-Muller. */
static inline double u32_open0(uint32_t w) { return ((double)w + 1.0) * 0x1p-32; }
/* [0, 1) with 32 bits. */
static inline double u32(uint32_t w) { return (double)w * 0x1p-32; }
/* (0, 1] with 53 bits. */
static inline double u53_open0(uint32_t a, uint32_t b) {
  return (double)(((((uint64_t)a << 32) | b) >> 11) + 1) * 0x1p-53;
}

static const double two_pi = 6.283185307179586476925286766559;

/* ---- fill kernels ------------------------------------------------------ */

/* Parameters of one draw, precomputed once. */
typedef struct fill_params {
  uint64_t seed, offset;
  double lo, span, top;    /* uniform f64: lo + span*u, values >= top become below_top */
  double below_top;
  float lof, spanf, topf;  /* uniform f32 */
  float below_topf;
  double mean, std;        /* normal */
  double p;                /* bernoulli */
} fill_params;

/* Philox over PHILOX_BATCH consecutive blocks b0, b0+1, ... at once. The
 * output is in element order: words[4*j + k] is word k of block b0 + j, the
 * order in which the 4-element-per-block fills consume them. Three versions
 * give the same words (the layout tests and the Random123 known-answer tests
 * check them against philox4x32_10): AVX-512 (four independent chains of 16
 * blocks, one vector per counter word each; the 32x32->64 multiplies by
 * _mm512_mul_epu32 on the even and odd lanes), AVX2 (chains of 8 blocks, two
 * at a time) and portable C. The fills pick one per draw (philox_pick) and
 * pass it to their threads. 64 blocks, not 16: a round's multiplies wait for
 * the previous round's, so one chain of 16 leaves the multipliers idle most
 * of the time, and this function is hot (the fused attention regenerates
 * its dropout mask tile by tile; docs/random.md gives the figure). */
#define PHILOX_BATCH 64
#define PHILOX_CHAINS 4 /* AVX-512: PHILOX_BATCH / 16 */
typedef void (*philox_batch_fn)(uint64_t seed, uint64_t offset, uint64_t b0,
                                uint32_t words[4 * PHILOX_BATCH]);

/* The counters of blocks b0 .. b0+PHILOX_BATCH-1: low and middle words, and
 * the carry. */
static inline void philox_counters(uint64_t offset, uint64_t b0, uint32_t c0[PHILOX_BATCH],
                                   uint32_t c1[PHILOX_BATCH], uint32_t c2[PHILOX_BATCH]) {
  for (int j = 0; j < PHILOX_BATCH; j++) {
    uint64_t lo = offset + b0 + (uint64_t)j;
    c0[j] = (uint32_t)lo;
    c1[j] = (uint32_t)(lo >> 32);
    c2[j] = lo < offset ? 1u : 0u;
  }
}

static void philox_batch_c(uint64_t seed, uint64_t offset, uint64_t b0,
                           uint32_t words[4 * PHILOX_BATCH]) {
  uint32_t c0[PHILOX_BATCH], c1[PHILOX_BATCH], c2[PHILOX_BATCH], c3[PHILOX_BATCH] = {0};
  philox_counters(offset, b0, c0, c1, c2);
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; r++) {
    for (int j = 0; j < PHILOX_BATCH; j++) {
      uint64_t p0 = (uint64_t)PHILOX_M0 * c0[j];
      uint64_t p1 = (uint64_t)PHILOX_M1 * c2[j];
      uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1[j] ^ k0;
      uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3[j] ^ k1;
      c1[j] = (uint32_t)p1;
      c3[j] = (uint32_t)p0;
      c0[j] = n0;
      c2[j] = n2;
    }
    k0 += PHILOX_W0;
    k1 += PHILOX_W1;
  }
  for (int j = 0; j < PHILOX_BATCH; j++) {
    words[4 * j] = c0[j];
    words[4 * j + 1] = c1[j];
    words[4 * j + 2] = c2[j];
    words[4 * j + 3] = c3[j];
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
#define LT_PHILOX_X86 1
#include <immintrin.h>

/* hi and lo 32 bits of m * c in each 32-bit lane: the even lanes' products
 * from one _mm512_mul_epu32, the odd lanes' from another on c >> 32. */
__attribute__((target("avx512f"))) static inline void mulhilo512(__m512i m, __m512i c, __m512i *hi,
                                                                  __m512i *lo) {
  const __m512i pe = _mm512_mul_epu32(c, m), po = _mm512_mul_epu32(_mm512_srli_epi64(c, 32), m);
  *lo = _mm512_mask_blend_epi32(0xAAAA, pe, _mm512_slli_epi64(po, 32));
  *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(pe, 32), po);
}

__attribute__((target("avx512f"))) static void philox_batch_avx512(uint64_t seed, uint64_t offset,
                                                                   uint64_t b0,
                                                                   uint32_t words[4 * PHILOX_BATCH]) {
  enum { H = PHILOX_CHAINS };
  uint32_t a0[PHILOX_BATCH], a1[PHILOX_BATCH], a2[PHILOX_BATCH];
  philox_counters(offset, b0, a0, a1, a2);
  __m512i c0[H], c1[H], c2[H], c3[H];
  for (int h = 0; h < H; h++) {
    c0[h] = _mm512_loadu_si512(a0 + 16 * h), c1[h] = _mm512_loadu_si512(a1 + 16 * h);
    c2[h] = _mm512_loadu_si512(a2 + 16 * h), c3[h] = _mm512_setzero_si512();
  }
  const __m512i m0 = _mm512_set1_epi32((int)PHILOX_M0), m1 = _mm512_set1_epi32((int)PHILOX_M1);
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; r++) {
    const __m512i kk0 = _mm512_set1_epi32((int)k0), kk1 = _mm512_set1_epi32((int)k1);
    for (int h = 0; h < H; h++) {
      __m512i hi0, lo0, hi1, lo1;
      mulhilo512(m0, c0[h], &hi0, &lo0);
      mulhilo512(m1, c2[h], &hi1, &lo1);
      c0[h] = _mm512_xor_si512(_mm512_xor_si512(hi1, c1[h]), kk0);
      c2[h] = _mm512_xor_si512(_mm512_xor_si512(hi0, c3[h]), kk1);
      c1[h] = lo1;
      c3[h] = lo0;
    }
    k0 += PHILOX_W0;
    k1 += PHILOX_W1;
  }
  /* Transpose each chain to element order: a 4x4 transpose of 32-bit words
   * inside each 128-bit lane (t: lane L of r_k is block 4L + k), then one of
   * the lanes. */
  for (int h = 0; h < H; h++) {
    const __m512i t0 = _mm512_unpacklo_epi32(c0[h], c1[h]), t1 = _mm512_unpackhi_epi32(c0[h], c1[h]);
    const __m512i t2 = _mm512_unpacklo_epi32(c2[h], c3[h]), t3 = _mm512_unpackhi_epi32(c2[h], c3[h]);
    const __m512i r0 = _mm512_unpacklo_epi64(t0, t2), r1 = _mm512_unpackhi_epi64(t0, t2);
    const __m512i r2 = _mm512_unpacklo_epi64(t1, t3), r3 = _mm512_unpackhi_epi64(t1, t3);
    const __m512i u0 = _mm512_shuffle_i32x4(r0, r1, 0x44), u1 = _mm512_shuffle_i32x4(r0, r1, 0xEE);
    const __m512i u2 = _mm512_shuffle_i32x4(r2, r3, 0x44), u3 = _mm512_shuffle_i32x4(r2, r3, 0xEE);
    uint32_t *o = words + 64 * h;
    _mm512_storeu_si512(o, _mm512_shuffle_i32x4(u0, u2, 0x88));
    _mm512_storeu_si512(o + 16, _mm512_shuffle_i32x4(u0, u2, 0xDD));
    _mm512_storeu_si512(o + 32, _mm512_shuffle_i32x4(u1, u3, 0x88));
    _mm512_storeu_si512(o + 48, _mm512_shuffle_i32x4(u1, u3, 0xDD));
  }
}

__attribute__((target("avx2"))) static inline void mulhilo256(__m256i m, __m256i c, __m256i *hi,
                                                              __m256i *lo) {
  const __m256i pe = _mm256_mul_epu32(c, m), po = _mm256_mul_epu32(_mm256_srli_epi64(c, 32), m);
  *lo = _mm256_blend_epi32(pe, _mm256_slli_epi64(po, 32), 0xAA);
  *hi = _mm256_blend_epi32(_mm256_srli_epi64(pe, 32), po, 0xAA);
}

__attribute__((target("avx2"))) static void philox_batch_avx2(uint64_t seed, uint64_t offset,
                                                              uint64_t b0,
                                                              uint32_t words[4 * PHILOX_BATCH]) {
  uint32_t a0[PHILOX_BATCH], a1[PHILOX_BATCH], a2[PHILOX_BATCH];
  philox_counters(offset, b0, a0, a1, a2);
  for (int q = 0; q < PHILOX_BATCH / 16; q++) { /* 16 blocks at a time: 2 chains of 8 (16 ymm registers) */
    __m256i c0[2], c1[2], c2[2], c3[2];
    for (int h = 0; h < 2; h++) {
      c0[h] = _mm256_loadu_si256((const __m256i *)(a0 + 16 * q + 8 * h));
      c1[h] = _mm256_loadu_si256((const __m256i *)(a1 + 16 * q + 8 * h));
      c2[h] = _mm256_loadu_si256((const __m256i *)(a2 + 16 * q + 8 * h));
      c3[h] = _mm256_setzero_si256();
    }
    const __m256i m0 = _mm256_set1_epi32((int)PHILOX_M0), m1 = _mm256_set1_epi32((int)PHILOX_M1);
    uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    for (int r = 0; r < 10; r++) {
      const __m256i kk0 = _mm256_set1_epi32((int)k0), kk1 = _mm256_set1_epi32((int)k1);
      for (int h = 0; h < 2; h++) {
        __m256i hi0, lo0, hi1, lo1;
        mulhilo256(m0, c0[h], &hi0, &lo0);
        mulhilo256(m1, c2[h], &hi1, &lo1);
        c0[h] = _mm256_xor_si256(_mm256_xor_si256(hi1, c1[h]), kk0);
        c2[h] = _mm256_xor_si256(_mm256_xor_si256(hi0, c3[h]), kk1);
        c1[h] = lo1;
        c3[h] = lo0;
      }
      k0 += PHILOX_W0;
      k1 += PHILOX_W1;
    }
    /* Element order: 4x4 transposes inside the 128-bit lanes (lane L of r_k is
     * block 4L + k of this half), then the lanes put in block order. */
    for (int h = 0; h < 2; h++) {
      const __m256i t0 = _mm256_unpacklo_epi32(c0[h], c1[h]), t1 = _mm256_unpackhi_epi32(c0[h], c1[h]);
      const __m256i t2 = _mm256_unpacklo_epi32(c2[h], c3[h]), t3 = _mm256_unpackhi_epi32(c2[h], c3[h]);
      const __m256i r0 = _mm256_unpacklo_epi64(t0, t2), r1 = _mm256_unpackhi_epi64(t0, t2);
      const __m256i r2 = _mm256_unpacklo_epi64(t1, t3), r3 = _mm256_unpackhi_epi64(t1, t3);
      uint32_t *o = words + 64 * q + 32 * h;
      _mm256_storeu_si256((__m256i *)o, _mm256_permute2x128_si256(r0, r1, 0x20));
      _mm256_storeu_si256((__m256i *)(o + 8), _mm256_permute2x128_si256(r2, r3, 0x20));
      _mm256_storeu_si256((__m256i *)(o + 16), _mm256_permute2x128_si256(r0, r1, 0x31));
      _mm256_storeu_si256((__m256i *)(o + 24), _mm256_permute2x128_si256(r2, r3, 0x31));
    }
  }
}

#endif

/* The fastest version this CPU runs, or the one the path table forces
 * (philox=avx512|avx2|c: LT_PHILOX, or lt__path_force in the tests, which
 * compare the versions; tensor/paths.def). */
enum { PHILOX_C, PHILOX_AVX2, PHILOX_AVX512 };
static int philox_version(void) {
#ifdef LT_PHILOX_X86
  if (lt__path_on(LT__PATH_philox_avx512)) return PHILOX_AVX512;
  if (lt__path_on(LT__PATH_philox_avx2)) return PHILOX_AVX2;
#endif
  return PHILOX_C;
}
static philox_batch_fn philox_fn(int version) {
#ifdef LT_PHILOX_X86
  if (version == PHILOX_AVX512) return philox_batch_avx512;
  if (version == PHILOX_AVX2) return philox_batch_avx2;
#endif
  return philox_batch_c;
}
static philox_batch_fn philox_pick(void) { return philox_fn(philox_version()); }

/* DEFINE_FILL(name, T, EPB, BODY) defines
 *     static void name(T *out, int64_t n, const fill_params *P)
 * writing out[0..n). Block b of the draw yields the EPB elements
 * out[b*EPB .. b*EPB+EPB); BODY computes them into vals[0..EPB) from the words
 * w[0..4) (a partial last block discards the extra values). Batches of blocks
 * are split statically over OpenMP threads; each element depends only on its
 * block, so the split does not change any value. */
#define DEFINE_FILL(name, T, EPB, BODY)                                          \
  static void name(T *restrict out, int64_t n, const fill_params *P) {          \
    const int64_t nb = (n + (EPB)-1) / (EPB);                                    \
    const int64_t nbatch = (nb + PHILOX_BATCH - 1) / PHILOX_BATCH;               \
    const philox_batch_fn pb = philox_pick();                                    \
    _Pragma("omp parallel for schedule(static) if (n >= LT__PARALLEL_MIN)")      \
    for (int64_t bb = 0; bb < nbatch; bb++) {                                    \
      uint32_t words[4 * PHILOX_BATCH];                                          \
      const int64_t b0 = bb * PHILOX_BATCH;                                      \
      pb(P->seed, P->offset, (uint64_t)b0, words);                               \
      for (int jb = 0; jb < PHILOX_BATCH && b0 + jb < nb; jb++) {                \
        const int64_t b = b0 + jb;                                               \
        const uint32_t *w = words + 4 * jb;                                      \
        T vals[EPB];                                                             \
        BODY                                                                     \
        T *o = out + b * (EPB);                                                  \
        const int m = n - b * (EPB) < (EPB) ? (int)(n - b * (EPB)) : (EPB);      \
        for (int j = 0; j < m; j++) o[j] = vals[j];                              \
      }                                                                          \
    }                                                                            \
  }

/* uniform f32: element i = word i%4 of block i/4 (24 bits). Rounding of
 * lo + span*u can reach hi in float: such values become the float below hi. */
DEFINE_FILL(fill_uniform_f32, float, 4, {
  for (int j = 0; j < 4; j++) {
    float v = P->lof + P->spanf * u24(w[j]);
    vals[j] = v < P->topf ? v : P->below_topf;
  }
})

/* uniform f64: element i = words (2k, 2k+1), k = i%2, of block i/2 (53 bits). */
DEFINE_FILL(fill_uniform_f64, double, 2, {
  for (int j = 0; j < 2; j++) {
    double v = P->lo + P->span * u53(w[2 * j], w[2 * j + 1]);
    vals[j] = v < P->top ? v : P->below_top;
  }
})

/* normal f32: Box-Muller on word pairs, in double. Elements 4b, 4b+1 are the
 * cos and sin outputs of words (0, 1) of block b, elements 4b+2, 4b+3 those of
 * words (2, 3): radius from the first word ((0,1], 32 bits), angle from the
 * second ([0,1), 32 bits). */
DEFINE_FILL(fill_normal_f32, float, 4, {
  for (int j = 0; j < 2; j++) {
    double r = sqrt(-2.0 * log(u32_open0(w[2 * j])));
    double a = two_pi * u32(w[2 * j + 1]);
    vals[2 * j] = (float)(P->mean + P->std * (r * cos(a)));
    vals[2 * j + 1] = (float)(P->mean + P->std * (r * sin(a)));
  }
})

/* normal f64: Box-Muller on one pair of 53-bit uniforms per block: radius from
 * words (0, 1), angle from words (2, 3); element 2b is the cos output, 2b+1 the
 * sin output. */
DEFINE_FILL(fill_normal_f64, double, 2, {
  double r = sqrt(-2.0 * log(u53_open0(w[0], w[1])));
  double a = two_pi * u53(w[2], w[3]);
  vals[0] = P->mean + P->std * (r * cos(a));
  vals[1] = P->mean + P->std * (r * sin(a));
})

/* bernoulli, any dtype: element i = (word i%4 of block i/4) * 2^-32 < p.
 * Both sides scaled by 2^32 (exact), that is word < ceil(p 2^32), computed as
 * (word <= lim) & any in 32-bit integers (bern_threshold), which vectorises;
 * a batch of blocks gives 4 * PHILOX_BATCH consecutive elements. */
static void bern_threshold(double p, uint32_t *lim, uint32_t *any) {
  const double t = ceil(p * 0x1p32); /* keep iff word < t */
  *any = t >= 1.0;
  *lim = t >= 0x1p32 ? UINT32_MAX : t >= 1.0 ? (uint32_t)(t - 1.0) : 0u;
}

#define BERN_EPBATCH (4 * PHILOX_BATCH)
#define DEFINE_BERNOULLI(name, T, ONE) /* ONE: 1 in T's bits */                    \
  static void name(T *restrict out, int64_t n, const fill_params *P) {              \
    const int64_t nbatch = (n + BERN_EPBATCH - 1) / BERN_EPBATCH;                    \
    const philox_batch_fn pb = philox_pick();                                        \
    uint32_t lim, any;                                                               \
    bern_threshold(P->p, &lim, &any);                                                \
    _Pragma("omp parallel for schedule(static) if (n >= LT__PARALLEL_MIN)")          \
    for (int64_t bb = 0; bb < nbatch; bb++) {                                        \
      uint32_t words[BERN_EPBATCH];                                                  \
      pb(P->seed, P->offset, (uint64_t)(bb * PHILOX_BATCH), words);                  \
      T *o = out + bb * BERN_EPBATCH;                                                \
      const int64_t left = n - bb * BERN_EPBATCH;                                    \
      if (left >= BERN_EPBATCH) {                                                    \
        for (int i = 0; i < BERN_EPBATCH; i++) o[i] = (T)(((words[i] <= lim) & any) * ONE); \
      } else {                                                                       \
        for (int i = 0; i < (int)left; i++) o[i] = (T)(((words[i] <= lim) & any) * ONE); \
      }                                                                              \
    }                                                                                \
  }
DEFINE_BERNOULLI(fill_bernoulli_f32, float, 1u)
DEFINE_BERNOULLI(fill_bernoulli_f64, double, 1u)
DEFINE_BERNOULLI(fill_bernoulli_i32, int32_t, 1u)
DEFINE_BERNOULLI(fill_bernoulli_i64, int64_t, 1u)
DEFINE_BERNOULLI(fill_bernoulli_bool, uint8_t, 1u)
DEFINE_BERNOULLI(fill_bernoulli_bf16, uint16_t, 0x3f80u) /* 1.0 in bf16 */

/* Blocks a draw of n elements of this dtype uses (a partial block counts). */
static uint64_t blocks_for(int64_t n, int epb) { return (uint64_t)((n + epb - 1) / epb); }

typedef enum { DIST_UNIFORM, DIST_NORMAL, DIST_BERNOULLI } dist_kind;

/* Fills n contiguous elements of dtype at out; returns the blocks used. */
static uint64_t fill_contiguous(dist_kind kind, lt_dtype dtype, void *out, int64_t n,
                                const fill_params *P) {
  switch (kind) {
    case DIST_UNIFORM:
      if (dtype == LT_DTYPE_F32) return fill_uniform_f32(out, n, P), blocks_for(n, 4);
      return fill_uniform_f64(out, n, P), blocks_for(n, 2);
    case DIST_NORMAL:
      if (dtype == LT_DTYPE_F32) return fill_normal_f32(out, n, P), blocks_for(n, 4);
      return fill_normal_f64(out, n, P), blocks_for(n, 2);
    case DIST_BERNOULLI:
      switch (dtype) {
        case LT_DTYPE_F32: fill_bernoulli_f32(out, n, P); break;
        case LT_DTYPE_F64: fill_bernoulli_f64(out, n, P); break;
        case LT_DTYPE_I32: fill_bernoulli_i32(out, n, P); break;
        case LT_DTYPE_I64: fill_bernoulli_i64(out, n, P); break;
        case LT_DTYPE_BF16: fill_bernoulli_bf16(out, n, P); break;
        default: fill_bernoulli_bool(out, n, P); break;
      }
      return blocks_for(n, 4);
  }
  LT_CHECK(0);
  return 0;
}

/* ---- validation -------------------------------------------------------- */

static lt_status check_float_dtype(const char *op, lt_dtype dtype) {
  if (!lt_dtype_is_float(dtype))
    return lt__err(LT_ERR_DTYPE, "%s: dtype %s: random floats need f32 or f64", op,
                   lt_dtype_name(dtype));
  return LT_OK;
}

/* Fills P for a uniform draw in [lo, hi) of dtype, or reports why it cannot. */
static lt_status uniform_params(const char *op, lt_dtype dtype, double lo, double hi,
                                fill_params *P) {
  if (!isfinite(lo) || !isfinite(hi) || !(lo <= hi))
    return lt__err(LT_ERR_INVALID, "%s: lo %g, hi %g: need finite lo <= hi", op, lo, hi);
  if (!isfinite(hi - lo))
    return lt__err(LT_ERR_INVALID, "%s: lo %g, hi %g: hi - lo overflows", op, lo, hi);
  P->lo = lo;
  P->span = hi - lo;
  P->top = hi;
  P->below_top = lo < hi ? nextafter(hi, -INFINITY) : lo;
  if (dtype == LT_DTYPE_F32) {
    float lof = (float)lo, hif = (float)hi;
    if (!isfinite(lof) || !isfinite(hif) || !isfinite(hif - lof))
      return lt__err(LT_ERR_INVALID, "%s: lo %g, hi %g: outside the f32 range", op, lo, hi);
    P->lof = lof;
    P->spanf = hif - lof;
    P->topf = hif;
    P->below_topf = lof < hif ? nextafterf(hif, -INFINITY) : lof;
  }
  return LT_OK;
}

static lt_status normal_params(const char *op, double mean, double std, fill_params *P) {
  if (!isfinite(mean) || !isfinite(std) || std < 0)
    return lt__err(LT_ERR_INVALID, "%s: mean %g, std %g: need finite mean and finite std >= 0",
                   op, mean, std);
  P->mean = mean;
  P->std = std;
  return LT_OK;
}

/* Validates the shape of a creation op before anything is allocated or drawn. */
static lt_status check_shape(const char *op, int ndim, const int64_t *shape) {
  if (ndim > 0 && !shape) return lt__err(LT_ERR_NULL, "%s: shape is NULL with ndim %d", op, ndim);
  int64_t numel;
  return lt__shape_numel(op, ndim, shape, &numel);
}

/* A new tensor of (dtype, shape) filled by kind; g advances only on success. */
static lt_tensor *draw_new(const char *op, lt_generator *g, dist_kind kind, lt_dtype dtype,
                           int ndim, const int64_t *shape, fill_params *P) {
  lt_tensor *t = lt_empty(dtype, ndim, shape);
  if (!t) return NULL;
  P->seed = g->seed;
  P->offset = g->offset;
  g->offset += fill_contiguous(kind, dtype, t->data, t->numel, P);
  return t;
}

/* ---- generator --------------------------------------------------------- */

lt_generator *lt_generator_new(uint64_t seed) {
  lt_generator *g = malloc(sizeof *g);
  if (!g) {
    lt__err(LT_ERR_NOMEM, "generator_new: out of memory");
    return NULL;
  }
  *g = (lt_generator){.seed = seed};
  return g;
}

lt_generator *lt_generator_new_skip_init(void) {
  lt_generator *g = lt_generator_new(0);
  if (g) g->nodraw = true;
  return g;
}

void lt_generator_free(lt_generator *g) { free(g); }

lt_generator_state lt_generator_get_state(const lt_generator *g) {
  lt_generator_state s = {0, 0};
  if (!g) {
    lt__err_null("generator_get_state", "g");
    return s;
  }
  s.seed = g->seed;
  s.offset = g->offset;
  return s;
}

lt_status lt_generator_set_state(lt_generator *g, lt_generator_state state) {
  if (!g) return lt__err_null("generator_set_state", "g");
  g->seed = state.seed;
  g->offset = state.offset;
  return LT_OK;
}

/* ---- creation ops ------------------------------------------------------ */

lt_tensor *lt_uniform(lt_generator *g, lt_dtype dtype, int ndim, const int64_t *shape,
                      double lo, double hi) {
  fill_params P = {0};
  if (!g) return lt__err_null("uniform", "g"), NULL;
  if (check_float_dtype("uniform", dtype) || check_shape("uniform", ndim, shape) ||
      uniform_params("uniform", dtype, lo, hi, &P))
    return NULL;
  return draw_new("uniform", g, DIST_UNIFORM, dtype, ndim, shape, &P);
}

lt_tensor *lt_rand(lt_generator *g, lt_dtype dtype, int ndim, const int64_t *shape) {
  fill_params P = {0};
  if (!g) return lt__err_null("rand", "g"), NULL;
  if (check_float_dtype("rand", dtype) || check_shape("rand", ndim, shape) ||
      uniform_params("rand", dtype, 0.0, 1.0, &P))
    return NULL;
  return draw_new("rand", g, DIST_UNIFORM, dtype, ndim, shape, &P);
}

lt_tensor *lt_normal(lt_generator *g, lt_dtype dtype, int ndim, const int64_t *shape,
                     double mean, double std) {
  fill_params P = {0};
  if (!g) return lt__err_null("normal", "g"), NULL;
  if (check_float_dtype("normal", dtype) || check_shape("normal", ndim, shape) ||
      normal_params("normal", mean, std, &P))
    return NULL;
  return draw_new("normal", g, DIST_NORMAL, dtype, ndim, shape, &P);
}

lt_tensor *lt_randn(lt_generator *g, lt_dtype dtype, int ndim, const int64_t *shape) {
  fill_params P = {0};
  if (!g) return lt__err_null("randn", "g"), NULL;
  if (check_float_dtype("randn", dtype) || check_shape("randn", ndim, shape) ||
      normal_params("randn", 0.0, 1.0, &P))
    return NULL;
  return draw_new("randn", g, DIST_NORMAL, dtype, ndim, shape, &P);
}

lt_tensor *lt_bernoulli(lt_generator *g, lt_dtype dtype, int ndim, const int64_t *shape,
                        double p) {
  fill_params P = {0};
  if (!g) return lt__err_null("bernoulli", "g"), NULL;
  if (!lt__valid_dtype(dtype)) {
    lt__err(LT_ERR_DTYPE, "bernoulli: dtype %d is not a valid lt_dtype", (int)dtype);
    return NULL;
  }
  if (check_shape("bernoulli", ndim, shape)) return NULL;
  if (!(p >= 0.0 && p <= 1.0)) {
    lt__err(LT_ERR_INVALID, "bernoulli: p %g: need 0 <= p <= 1", p);
    return NULL;
  }
  P.p = p;
  return draw_new("bernoulli", g, DIST_BERNOULLI, dtype, ndim, shape, &P);
}

/* ---- dropout's fused draw ---------------------------------------------- */

/* For nn/dropout.c (declared there: no header holds internal nn hooks):
 * keep[i] = the values lt_bernoulli(g, LT_DTYPE_BOOL, [n], q) would draw,
 * y[i] = x[i] * (keep[i] ? s : 0), in one pass over the words without a
 * separate mask draw; g advances exactly as for that draw. dt is f32 or f64
 * (s is then a float widened to double); x, y, keep are contiguous. */
#define DEFINE_DROPOUT(SUF, T)                                                          \
  static void dropout_##SUF(const fill_params *P, int64_t n, const T *restrict x,       \
                            T *restrict y, uint8_t *restrict keep, T s) {               \
    const int64_t nbatch = (n + BERN_EPBATCH - 1) / BERN_EPBATCH;                        \
    const philox_batch_fn pb = philox_pick();                                            \
    uint32_t lim, any;                                                                   \
    bern_threshold(P->p, &lim, &any);                                                    \
    _Pragma("omp parallel for schedule(static) if (n >= LT__PARALLEL_MIN)")              \
    for (int64_t bb = 0; bb < nbatch; bb++) {                                            \
      uint32_t words[BERN_EPBATCH];                                                      \
      pb(P->seed, P->offset, (uint64_t)(bb * PHILOX_BATCH), words);                      \
      const int64_t o = bb * BERN_EPBATCH, left = n - o;                                 \
      const int m = left >= BERN_EPBATCH ? BERN_EPBATCH : (int)left;                     \
      if (m == BERN_EPBATCH) {                                                           \
        for (int i = 0; i < BERN_EPBATCH; i++) {                                         \
          const uint8_t k = (uint8_t)((words[i] <= lim) & any);                          \
          keep[o + i] = k;                                                               \
          y[o + i] = x[o + i] * (k ? s : (T)0);                                          \
        }                                                                                \
      } else {                                                                           \
        for (int i = 0; i < m; i++) {                                                    \
          const uint8_t k = (uint8_t)((words[i] <= lim) & any);                          \
          keep[o + i] = k;                                                               \
          y[o + i] = x[o + i] * (k ? s : (T)0);                                          \
        }                                                                                \
      }                                                                                  \
    }                                                                                    \
  }
DEFINE_DROPOUT(f32, float)
DEFINE_DROPOUT(f64, double)

void lt__dropout_draw(lt_generator *g, lt_dtype dt, int64_t n, double q, double s, const void *x,
                      void *y, uint8_t *keep) {
  fill_params P = {.seed = g->seed, .offset = g->offset, .p = q};
  if (dt == LT_DTYPE_F32) dropout_f32(&P, n, x, y, keep, (float)s);
  else dropout_f64(&P, n, x, y, keep, s);
  g->offset += blocks_for(n, 4);
}

/* ---- bernoulli, deferred (nn/attention.c's fused dropout) -------------- */

void lt__bernoulli_defer(lt_generator *g, int64_t n, double q, lt__bern_draw *d) {
  d->seed = g->seed;
  d->offset = g->offset;
  d->version = philox_version(); /* once: the tiles of both passes are many */
  bern_threshold(q, &d->lim, &d->any);
  g->offset += blocks_for(n, 4);
}

/* k[i] = (w[i] <= lim) & any over [0, n): the keep bytes of a run of words. */
static void bern_bytes(const uint32_t *w, int64_t n, uint32_t lim, uint32_t any, uint8_t *k) {
  for (int64_t i = 0; i < n; i++) k[i] = (uint8_t)((w[i] <= lim) & any);
}
#ifdef LT_PHILOX_X86
/* The same, 16 words a compare (the portable loop is not vectorised). */
__attribute__((target("avx512f"))) static void bern_bytes_avx512(const uint32_t *w, int64_t n, uint32_t lim,
                                                                  uint32_t any, uint8_t *k) {
  const __m512i vl = _mm512_set1_epi32((int)lim), one = _mm512_set1_epi32((int)any);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __mmask16 m = _mm512_cmple_epu32_mask(_mm512_loadu_si512(w + i), vl);
    _mm_storeu_si128((__m128i *)(k + i), _mm512_cvtepi32_epi8(_mm512_maskz_mov_epi32(m, one)));
  }
  bern_bytes(w + i, n - i, lim, any, k + i);
}
#endif

/* Each row is a run of elements e0 .. e0+cols; element e is word e%4 of block
 * e/4, made a batch of PHILOX_BATCH blocks at a time from the block holding
 * the row's first element. */
void lt__bernoulli_tile(const lt__bern_draw *d, int64_t i0, int64_t ld, int64_t rows, int64_t cols,
                        uint8_t *keep, int64_t ldk) {
  const philox_batch_fn pb = philox_fn(d->version);
  void (*bytes)(const uint32_t *, int64_t, uint32_t, uint32_t, uint8_t *) = bern_bytes;
#ifdef LT_PHILOX_X86
  if (d->version == PHILOX_AVX512) bytes = bern_bytes_avx512; /* the CPU has AVX-512 */
#endif
  uint32_t words[BERN_EPBATCH];
  for (int64_t r = 0; r < rows; r++) {
    const int64_t e0 = i0 + r * ld, e1 = e0 + cols;
    uint8_t *k = keep + r * ldk;
    for (int64_t b = e0 / 4; 4 * b < e1; b += PHILOX_BATCH) {
      pb(d->seed, d->offset, (uint64_t)b, words);
      const int64_t lo = 4 * b > e0 ? 4 * b : e0, hi = 4 * b + BERN_EPBATCH < e1 ? 4 * b + BERN_EPBATCH : e1;
      bytes(words + (lo - 4 * b), hi - lo, d->lim, d->any, k + (lo - e0));
    }
  }
}

/* ---- randperm: Fisher-Yates on a sequential word stream ----------------- */

/* Words k = 0, 1, 2, ... of a draw: word k is word k%4 of block offset + k/4. */
typedef struct word_stream {
  uint64_t seed, offset;
  uint64_t k;  /* words consumed */
  uint32_t w[4];
} word_stream;

static inline uint32_t next_word(word_stream *s) {
  if (s->k % 4 == 0) philox_block(s->seed, s->offset, s->k / 4, s->w);
  return s->w[s->k++ % 4];
}

/* Unbiased integer in [0, s) for 1 <= s <= 2^32 - 1: Lemire's multiply-shift
 * with rejection (one word, rarely more). */
static inline uint64_t below32(word_stream *st, uint32_t s) {
  uint64_t m = (uint64_t)next_word(st) * s;
  uint32_t l = (uint32_t)m;
  if (l < s) {
    uint32_t t = (uint32_t)(-s) % s;
    while (l < t) {
      m = (uint64_t)next_word(st) * s;
      l = (uint32_t)m;
    }
  }
  return m >> 32;
}

/* Unbiased integer in [0, s) for s >= 2^32: mask to the next power of two and
 * reject (two words, the high one first; fewer than 2 tries on average). */
static inline uint64_t below64(word_stream *st, uint64_t s) {
  uint64_t mask = s - 1;
  mask |= mask >> 1, mask |= mask >> 2, mask |= mask >> 4;
  mask |= mask >> 8, mask |= mask >> 16, mask |= mask >> 32;
  for (;;) {
    uint64_t hi = next_word(st);
    uint64_t x = ((hi << 32) | next_word(st)) & mask;
    if (x < s) return x;
  }
}

lt_tensor *lt_randperm(lt_generator *g, int64_t n) {
  if (!g) return lt__err_null("randperm", "g"), NULL;
  if (n < 0) {
    lt__err(LT_ERR_INVALID, "randperm: n %lld: need n >= 0", (long long)n);
    return NULL;
  }
  lt_tensor *t = lt_empty(LT_DTYPE_I64, 1, (const int64_t[]){n});
  if (!t) return NULL;
  int64_t *a = t->data;
  for (int64_t i = 0; i < n; i++) a[i] = i;
  /* Fisher-Yates from the back: swap a[i] with a[j], j uniform in [0, i]. */
  word_stream st = {.seed = g->seed, .offset = g->offset, .k = 0};
  for (int64_t i = n - 1; i > 0; i--) {
    uint64_t s = (uint64_t)i + 1;
    uint64_t j = s <= UINT32_MAX ? below32(&st, (uint32_t)s) : below64(&st, s);
    int64_t tmp = a[i];
    a[i] = a[j];
    a[j] = tmp;
  }
  g->offset += (st.k + 3) / 4;
  return t;
}

/* ---- in-place fills ---------------------------------------------------- */

/* Copy a contiguous buffer (src, row-major) into the strided x. */

#define SCATTER_LOOP(name, T)                                                          \
  static void name(int64_t n, char *const *ptrs, const int64_t *strides, void *ctx) { \
    char *d = ptrs[0];                                                                 \
    const char *s = ptrs[1];                                                           \
    for (int64_t i = 0; i < n; i++)                                                    \
      *(T *)(d + i * strides[0]) = *(const T *)(s + i * strides[1]);                  \
  }
SCATTER_LOOP(scatter_f32, float)
SCATTER_LOOP(scatter_f64, double)

static lt_status fill_inplace(const char *op, lt_generator *g, lt_tensor *x, dist_kind kind,
                              fill_params *P) {
  if (g->nodraw) return LT_OK;
  P->seed = g->seed;
  P->offset = g->offset;
  uint64_t used = 0;
  if (x->numel == 0) {
    /* nothing to draw */
  } else if (lt_is_contiguous(x)) {
    used = fill_contiguous(kind, x->dtype, x->data, x->numel, P);
  } else {
    /* Draw in logical (row-major) order into a buffer, then scatter. */
    size_t es = lt_dtype_size(x->dtype);
    void *buf = malloc((size_t)x->numel * es);
    if (!buf)
      return lt__err(LT_ERR_NOMEM, "%s: x is %s: out of memory for a %lld-element buffer", op,
                     LT__D(x), (long long)x->numel);
    used = fill_contiguous(kind, x->dtype, buf, x->numel, P);
    lt_tensor src = {.dtype = x->dtype, .ndim = x->ndim, .numel = x->numel, .data = buf};
    for (int d = 0; d < x->ndim; d++) src.shape[d] = x->shape[d];
    lt__contiguous_strides(x->ndim, x->shape, src.stride);
    lt__iter it;
    lt__iter_init(&it, x->ndim, x->shape, 2, (const lt_tensor *[]){x, &src});
    lt__iter_run(&it, x->dtype == LT_DTYPE_F32 ? scatter_f32 : scatter_f64, NULL, true);
    free(buf);
  }
  g->offset += used;
  lt__bump_version(x);
  return LT_OK;
}

lt_status lt_uniform_(lt_generator *g, lt_tensor *x, double lo, double hi) {
  fill_params P = {0};
  lt_status s;
  if (!g) return lt__err_null("uniform_", "g");
  if (!x) return lt__err_null("uniform_", "x");
  if ((s = check_float_dtype("uniform_", x->dtype)) != LT_OK) return s;
  if ((s = uniform_params("uniform_", x->dtype, lo, hi, &P)) != LT_OK) return s;
  if ((s = lt__check_inplace("uniform_", x)) != LT_OK) return s;
  return fill_inplace("uniform_", g, x, DIST_UNIFORM, &P);
}

lt_status lt_normal_(lt_generator *g, lt_tensor *x, double mean, double std) {
  fill_params P = {0};
  lt_status s;
  if (!g) return lt__err_null("normal_", "g");
  if (!x) return lt__err_null("normal_", "x");
  if ((s = check_float_dtype("normal_", x->dtype)) != LT_OK) return s;
  if ((s = normal_params("normal_", mean, std, &P)) != LT_OK) return s;
  if ((s = lt__check_inplace("normal_", x)) != LT_OK) return s;
  return fill_inplace("normal_", g, x, DIST_NORMAL, &P);
}

/* ---- multinomial: categorical draws, row by row ----------------------- */

/* Row r of a draw reads the word stream of blocks offset + r * bpr, ...,
 * bpr = ceil(2 * num_samples / 4) blocks (two words, one u53, per sample), so
 * each row's draws are fixed by the seed, the offset and r alone: rows can
 * run on any thread, and the generator advances by rows * bpr blocks.
 * A sample is u = u53 * (sum of the row's remaining weights); the category is
 * the first i with w[0] + ... + w[i] > u (a zero weight never qualifies),
 * summed in double. Without replacement the chosen weight is then set to 0
 * and the sum recomputed. */
static void multinomial_row(uint64_t seed, uint64_t offset, const double *p, double *w, int64_t n, int64_t k,
                            bool replacement, int64_t *out) {
  word_stream st = {.seed = seed, .offset = offset, .k = 0};
  memcpy(w, p, sizeof(double) * (size_t)n);
  int64_t last = n - 1; /* the last positive weight: where a u rounded up to the sum lands */
  while (last > 0 && !(w[last] > 0)) last--;
  for (int64_t s = 0; s < k; s++) {
    double total = 0;
    for (int64_t i = 0; i < n; i++) total += w[i];
    const uint32_t a = next_word(&st), b = next_word(&st);
    const double u = u53(a, b) * total;
    double acc = 0;
    int64_t pick = -1;
    for (int64_t i = 0; i < n; i++) {
      acc += w[i];
      if (w[i] > 0 && u < acc) {
        pick = i;
        break;
      }
    }
    if (pick < 0) pick = last;
    out[s] = pick;
    if (!replacement) {
      w[pick] = 0;
      while (last > 0 && !(w[last] > 0)) last--;
    }
  }
}

lt_tensor *lt_multinomial(lt_generator *g, const lt_tensor *probs, int64_t num_samples, bool replacement) {
  static const char *op = "multinomial";
  if (!g) return lt__err_null(op, "g"), NULL;
  if (!probs) return lt__err_null(op, "probs"), NULL;
  if (!lt_dtype_is_float(probs->dtype))
    return lt__err(LT_ERR_DTYPE, "%s: probs is %s: must be f32 or f64", op, LT__D(probs)), NULL;
  if (probs->ndim != 1 && probs->ndim != 2)
    return lt__err(LT_ERR_SHAPE, "%s: probs is %s: must be [n] or [rows, n]", op, LT__D(probs)), NULL;
  const int64_t n = probs->shape[probs->ndim - 1], R = probs->ndim == 2 ? probs->shape[0] : 1;
  if (n == 0) return lt__err(LT_ERR_SHAPE, "%s: probs is %s: no categories", op, LT__D(probs)), NULL;
  if (num_samples <= 0 || num_samples > ((int64_t)1 << 40))
    return lt__err(LT_ERR_INVALID, "%s: probs is %s: num_samples %lld must be in [1, 2^40]", op, LT__D(probs),
                   (long long)num_samples),
           NULL;
  if (!replacement && num_samples > n)
    return lt__err(LT_ERR_INVALID,
                   "%s: probs is %s: cannot draw %lld samples without replacement from %lld categories", op,
                   LT__D(probs), (long long)num_samples, (long long)n),
           NULL;
  lt_tensor *pt;
  const lt_tensor *pc = lt__as_contig(probs, LT_DTYPE_F64, &pt);
  if (!pc) return NULL;
  const double *p = pc->data;
  /* Every row checked before anything is drawn. */
  for (int64_t r = 0; r < R; r++) {
    int64_t pos = 0;
    for (int64_t i = 0; i < n; i++) {
      const double v = p[r * n + i];
      if (!(v >= 0) || isinf(v)) {
        lt__err(LT_ERR_INVALID, "%s: probs is %s: row %lld has %g at category %lld: probabilities must be finite "
                "and >= 0", op, LT__D(probs), (long long)r, v, (long long)i);
        lt_tensor_free(pt);
        return NULL;
      }
      pos += v > 0;
    }
    if (pos == 0 || (!replacement && pos < num_samples)) {
      if (pos == 0)
        lt__err(LT_ERR_INVALID, "%s: probs is %s: row %lld sums to 0 (no category can be drawn)", op,
                LT__D(probs), (long long)r);
      else
        lt__err(LT_ERR_INVALID,
                "%s: probs is %s: row %lld has %lld categories of nonzero probability, fewer than the %lld "
                "samples to draw without replacement",
                op, LT__D(probs), (long long)r, (long long)pos, (long long)num_samples);
      lt_tensor_free(pt);
      return NULL;
    }
  }
  const int64_t shape[2] = {R, num_samples};
  lt_tensor *out = probs->ndim == 2 ? lt_empty(LT_DTYPE_I64, 2, shape) : lt_empty(LT_DTYPE_I64, 1, &shape[1]);
  double *w = out ? malloc(sizeof(double) * (size_t)n * (size_t)(omp_get_max_threads())) : NULL;
  if (!w) {
    if (out) lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
    lt_tensor_free(out);
    lt_tensor_free(pt);
    return NULL;
  }
  const uint64_t bpr = blocks_for(2 * num_samples, 4);
  const int nt = lt__threads_for(pc->numel * (num_samples < 64 ? num_samples : 64), R);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t r = 0; r < R; r++)
    multinomial_row(g->seed, g->offset + (uint64_t)r * bpr, p + r * n, w + (size_t)omp_get_thread_num() * (size_t)n,
                    n, num_samples, replacement, (int64_t *)out->data + r * num_samples);
  g->offset += (uint64_t)R * bpr;
  free(w);
  lt_tensor_free(pt);
  return out;
}
