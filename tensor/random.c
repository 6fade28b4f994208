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
#include "tensor/internal.h"

#include <math.h>
#include <omp.h>

struct lt_generator {
  uint64_t seed;
  uint64_t offset; /* Philox blocks consumed so far */
};

/* ---- Philox4x32-10 ----------------------------------------------------- */

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u

/* out = Philox4x32-10(ctr, key): 10 rounds, the key bumped by (W0, W1)
 * between rounds, as Random123's philox4x32_R(10, ...). The reference one-block
 * version; philox_batch below computes the same words 16 blocks at a time. */
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

/* Exported for tests/test_random.c (the Random123 known-answer tests); not in
 * a header because nothing else needs it. */
void lt__philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);
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

/* Philox over PHILOX_BATCH consecutive blocks b0, b0+1, ... at once, in
 * structure-of-arrays form (W[k][j] is word k of block b0 + j) so that the
 * compiler vectorises the rounds across blocks (32x32->64 multiplies). The
 * words are exactly those of philox_block (the layout tests check it). */
#define PHILOX_BATCH 16
static void philox_batch(uint64_t seed, uint64_t offset, uint64_t b0,
                         uint32_t W[4][PHILOX_BATCH]) {
  uint32_t c0[PHILOX_BATCH], c1[PHILOX_BATCH], c2[PHILOX_BATCH], c3[PHILOX_BATCH];
  for (int j = 0; j < PHILOX_BATCH; j++) {
    uint64_t lo = offset + b0 + (uint64_t)j;
    c0[j] = (uint32_t)lo;
    c1[j] = (uint32_t)(lo >> 32);
    c2[j] = lo < offset ? 1u : 0u;
    c3[j] = 0;
  }
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
    W[0][j] = c0[j];
    W[1][j] = c1[j];
    W[2][j] = c2[j];
    W[3][j] = c3[j];
  }
}

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
    _Pragma("omp parallel for schedule(static) if (n >= LT__PARALLEL_MIN)")      \
    for (int64_t bb = 0; bb < nbatch; bb++) {                                    \
      uint32_t W[4][PHILOX_BATCH];                                               \
      const int64_t b0 = bb * PHILOX_BATCH;                                      \
      philox_batch(P->seed, P->offset, (uint64_t)b0, W);                         \
      for (int jb = 0; jb < PHILOX_BATCH && b0 + jb < nb; jb++) {                \
        const int64_t b = b0 + jb;                                               \
        const uint32_t w[4] = {W[0][jb], W[1][jb], W[2][jb], W[3][jb]};          \
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

/* bernoulli, any dtype: element i = (word i%4 of block i/4) * 2^-32 < p. */
#define DEFINE_BERNOULLI(name, T)                                    \
  DEFINE_FILL(name, T, 4, {                                          \
    for (int j = 0; j < 4; j++) vals[j] = (T)(u32(w[j]) < P->p);    \
  })
DEFINE_BERNOULLI(fill_bernoulli_f32, float)
DEFINE_BERNOULLI(fill_bernoulli_f64, double)
DEFINE_BERNOULLI(fill_bernoulli_i32, int32_t)
DEFINE_BERNOULLI(fill_bernoulli_i64, int64_t)
DEFINE_BERNOULLI(fill_bernoulli_bool, uint8_t)

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
  g->seed = seed;
  g->offset = 0;
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
