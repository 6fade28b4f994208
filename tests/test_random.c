/*
 * tests/test_random.c: the Philox4x32-10 generator (Random123 known answers),
 * the element-to-counter layout of every distribution, reproducibility and
 * resume, thread-count independence, statistical sanity, in-place fills on
 * strided tensors, and the error paths.
 */
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"
#include "tensor/storage_internal.h"
#include "tensor/paths_internal.h"
#include "tensor/random_internal.h"
#include "test_util.h"
#include "util_layout.h"

/* Block b of a draw by generator state (seed, offset), through the raw function. */
static void block(uint64_t seed, uint64_t offset, uint64_t b, uint32_t w[4]) {
  uint64_t lo = offset + b;
  uint32_t ctr[4] = {(uint32_t)lo, (uint32_t)(lo >> 32), lo < offset, 0};
  uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  lt__philox4x32_10(ctr, key, w);
}

static double *read_f64(const lt_tensor *t) {
  double *v = malloc(sizeof(double) * (size_t)(t->numel ? t->numel : 1));
  ck_assert(v);
  LT_OK_OR_FAIL(lt_tensor_read(t, LT_DTYPE_F64, v, t->numel));
  return v;
}

/* ---- Philox known answers (Random123 kat_vectors, philox4x32_10) -------- */

START_TEST(test_kat) {
  const uint32_t ctr[3][4] = {{0, 0, 0, 0},
                              {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
                              {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}};
  const uint32_t key[3][2] = {{0, 0}, {0xffffffff, 0xffffffff}, {0xa4093822, 0x299f31d0}};
  const uint32_t want[3][4] = {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
                               {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
                               {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}};
  for (int k = 0; k < 3; k++) {
    uint32_t out[4];
    lt__philox4x32_10(ctr[k], key[k], out);
    for (int j = 0; j < 4; j++)
      ck_assert_msg(out[j] == want[k][j], "KAT %d word %d: got %08x, want %08x", k, j, out[j],
                    want[k][j]);
  }
  /* Counter 0, key 0 is block 0 of a generator with seed 0. */
  uint32_t w[4];
  block(0, 0, 0, w);
  ck_assert_uint_eq(w[0], 0x6627e8d5);
  /* Seed ffff...: key words are the low and high halves of the seed; the
   * counter's 128-bit addition carries into the third word. */
  block(UINT64_MAX, UINT64_MAX, 0, w);
  uint32_t ctr2[4] = {0xffffffff, 0xffffffff, 0, 0}, key2[2] = {0xffffffff, 0xffffffff}, o2[4];
  lt__philox4x32_10(ctr2, key2, o2);
  ck_assert(memcmp(w, o2, sizeof w) == 0);
  block(UINT64_MAX, UINT64_MAX, 1, w);
  uint32_t ctr3[4] = {0, 0, 1, 0};
  lt__philox4x32_10(ctr3, key2, o2);
  ck_assert(memcmp(w, o2, sizeof w) == 0);
}
END_TEST

/* ---- the layout of each distribution ----------------------------------- */

START_TEST(test_layout_uniform) {
  const uint64_t seed = 0x0123456789abcdefULL, off = 17;
  lt_generator *g = lt_generator_new(seed);
  LT_OK_OR_FAIL(lt_generator_set_state(g, (lt_generator_state){seed, off}));
  /* f32: element i = word i%4 of block i/4, 24 bits. */
  lt_tensor *a = LT_NN(lt_rand(g, LT_DTYPE_F32, LT_SHAPE(7)));
  const float *fa = a->data;
  for (int i = 0; i < 7; i++) {
    uint32_t w[4];
    block(seed, off, (uint64_t)i / 4, w);
    float want = (float)(w[i % 4] >> 8) * 0x1p-24f;
    ck_assert_msg(fa[i] == want, "f32 element %d: %a vs %a", i, fa[i], want);
  }
  ck_assert_uint_eq(lt_generator_get_state(g).offset, off + 2);
  /* f64: element i = words (2k, 2k+1), k = i%2, of block i/2, 53 bits. */
  lt_tensor *b = LT_NN(lt_uniform(g, LT_DTYPE_F64, LT_SHAPE(5), -2.0, 6.0));
  const double *fb = b->data;
  for (int i = 0; i < 5; i++) {
    uint32_t w[4];
    block(seed, off + 2, (uint64_t)i / 2, w);
    int k = i % 2;
    double u = (double)((((uint64_t)w[2 * k] << 32) | w[2 * k + 1]) >> 11) * 0x1p-53;
    ck_assert_msg(fb[i] == -2.0 + 8.0 * u, "f64 element %d", i);
  }
  ck_assert_uint_eq(lt_generator_get_state(g).offset, off + 2 + 3);
  lt_tensor_free(a);
  lt_tensor_free(b);
  lt_generator_free(g);
}
END_TEST

START_TEST(test_layout_normal_bernoulli) {
  const uint64_t seed = 99;
  lt_generator *g = lt_generator_new(seed);
  /* normal f32: elements 4b, 4b+1 from words (0,1), 4b+2, 4b+3 from (2,3). */
  lt_tensor *n32 = LT_NN(lt_normal(g, LT_DTYPE_F32, LT_SHAPE(6), 1.0, 2.0));
  const float *f = n32->data;
  for (int i = 0; i < 6; i++) {
    uint32_t w[4];
    block(seed, 0, (uint64_t)i / 4, w);
    int p = (i % 4) / 2;
    double r = sqrt(-2.0 * log(((double)w[2 * p] + 1.0) * 0x1p-32));
    double ang = 6.283185307179586476925286766559 * ((double)w[2 * p + 1] * 0x1p-32);
    float want = (float)(1.0 + 2.0 * (r * (i % 2 ? sin(ang) : cos(ang))));
    ck_assert_msg(f[i] == want, "normal f32 element %d: %g vs %g", i, f[i], want);
  }
  ck_assert_uint_eq(lt_generator_get_state(g).offset, 2);
  /* normal f64: element 2b (cos) and 2b+1 (sin) from block b. */
  lt_tensor *n64 = LT_NN(lt_randn(g, LT_DTYPE_F64, LT_SHAPE(3)));
  const double *d = n64->data;
  for (int i = 0; i < 3; i++) {
    uint32_t w[4];
    block(seed, 2, (uint64_t)i / 2, w);
    double u1 = (double)(((((uint64_t)w[0] << 32) | w[1]) >> 11) + 1) * 0x1p-53;
    double u2 = (double)((((uint64_t)w[2] << 32) | w[3]) >> 11) * 0x1p-53;
    double r = sqrt(-2.0 * log(u1)), ang = 6.283185307179586476925286766559 * u2;
    double want = r * (i % 2 ? sin(ang) : cos(ang));
    ck_assert_msg(d[i] == want, "normal f64 element %d: %g vs %g", i, d[i], want);
  }
  ck_assert_uint_eq(lt_generator_get_state(g).offset, 4);
  /* bernoulli: element i = word i%4 of block i/4, 1 if w * 2^-32 < p. */
  lt_tensor *bern = LT_NN(lt_bernoulli(g, LT_DTYPE_I32, LT_SHAPE(9), 0.5));
  const int32_t *bi = bern->data;
  for (int i = 0; i < 9; i++) {
    uint32_t w[4];
    block(seed, 4, (uint64_t)i / 4, w);
    ck_assert_int_eq(bi[i], (double)w[i % 4] * 0x1p-32 < 0.5);
  }
  ck_assert_uint_eq(lt_generator_get_state(g).offset, 4 + 3);
  lt_tensor_free(n32);
  lt_tensor_free(n64);
  lt_tensor_free(bern);
  lt_generator_free(g);
}
END_TEST

/* ---- the batched generator versions ------------------------------------- */

/* Long draws (3 batches of 64 blocks and a partial one) through each
 * version of the batched generator (the philox paths, forced in turn:
 * portable C, AVX2, AVX-512, each where this CPU runs it, then the rule), at offsets whose counters
 * carry into the second and third words inside a batch (40 blocks in: in
 * AVX-512's third chain): uniform f32, bernoulli at p on and
 * between the 2^-32 grid (the threshold compare is done in integers), and
 * dropout's fused draw (the same mask, y = x * mask * scale). */
START_TEST(test_layout_versions) {
  const lt__path versions[] = {LT__PATH_philox_c, LT__PATH_philox_avx2, LT__PATH_philox_avx512, LT__PATH_AUTO};
  const uint64_t seeds[] = {99, 0xDEADBEEFCAFEF00DULL};
  const uint64_t offs[] = {0, 5, 0xFFFFFFFFull - 40, UINT64_MAX - 40};
  const int64_t n = 4 * 64 * 3 + 37; /* 3 full batches and a partial one */
  for (int v = 0; v < 4; v++) {
    if (versions[v] != LT__PATH_AUTO && !lt__path_supported(versions[v])) continue;
    lt__path_force(LT__PATH_FAMILY_philox, versions[v]);
    const char *vname = versions[v] == LT__PATH_AUTO ? "(the rule)" : lt__path_name(versions[v]);
    for (int si = 0; si < 2; si++)
      for (int oi = 0; oi < 4; oi++) {
        const uint64_t seed = seeds[si], off = offs[oi];
        uint32_t *w = malloc(sizeof(uint32_t) * (size_t)n);
        ck_assert(w);
        for (int64_t i = 0; i < n; i += 4) {
          uint32_t b[4];
          block(seed, off, (uint64_t)i / 4, b);
          for (int k = 0; k < 4 && i + k < n; k++) w[i + k] = b[k];
        }
        lt_generator *g = lt_generator_new(seed);
        LT_OK_OR_FAIL(lt_generator_set_state(g, (lt_generator_state){seed, off}));
        lt_tensor *u = LT_NN(lt_rand(g, LT_DTYPE_F32, LT_SHAPE(n)));
        for (int64_t i = 0; i < n; i++)
          ck_assert_msg(((float *)u->data)[i] == (float)(w[i] >> 8) * 0x1p-24f,
                        "version %s seed %llx offset %llx: uniform element %lld", vname,
                        (unsigned long long)seed, (unsigned long long)off, (long long)i);
        lt_tensor_free(u);
        const double ps[] = {0.0, 0.1, 0.5, 0.9, 1.0, 0x1p-33, 1.0 - 0x1p-33, (double)w[7] * 0x1p-32,
                             ((double)w[7] + 0.5) * 0x1p-32, ((double)w[7] + 1.0) * 0x1p-32};
        for (int pi = 0; pi < 10; pi++) {
          lt_generator_state st = {seed, off};
          LT_OK_OR_FAIL(lt_generator_set_state(g, st));
          lt_tensor *b = LT_NN(lt_bernoulli(g, LT_DTYPE_BOOL, LT_SHAPE(n), ps[pi]));
          const uint8_t *bb = b->data;
          for (int64_t i = 0; i < n; i++)
            ck_assert_msg(bb[i] == ((double)w[i] * 0x1p-32 < ps[pi]),
                          "version %s offset %llx p %a: bernoulli element %lld", vname,
                          (unsigned long long)off, ps[pi], (long long)i);
          ck_assert_uint_eq(lt_generator_get_state(g).offset, off + (uint64_t)(n + 3) / 4);
          lt_tensor_free(b);
        }
        /* dropout with p: the mask of bernoulli(1 - p), scaled by 1/(1 - p) */
        for (int dt = 0; dt < 2; dt++) {
          const lt_dtype d = dt ? LT_DTYPE_F64 : LT_DTYPE_F32;
          const double p = 0.1;
          lt_tensor *x = LT_NN(lt_rand(g, d, LT_SHAPE(n)));
          lt_tensor *xc = LT_NN(lt_clone(x));
          LT_OK_OR_FAIL(lt_generator_set_state(g, (lt_generator_state){seed, off}));
          lt_nn_ctx ctx = {.training = true, .gen = g};
          lt_tensor *y = LT_NN(lt_dropout(x, p, &ctx));
          ck_assert_uint_eq(lt_generator_get_state(g).offset, off + (uint64_t)(n + 3) / 4);
          LT_ASSERT_SAME_BITS(x, xc);
          for (int64_t i = 0; i < n; i++) {
            const bool keep = (double)w[i] * 0x1p-32 < 1.0 - p;
            double got, want;
            if (dt) {
              got = ((double *)y->data)[i];
              want = ((double *)x->data)[i] * (keep ? 1.0 / (1.0 - p) : 0.0);
            } else {
              got = ((float *)y->data)[i];
              want = ((float *)x->data)[i] * (keep ? 1.0f / (float)(1.0 - p) : 0.0f);
            }
            ck_assert_msg(got == want, "version %s: dropout %s element %lld: %a vs %a", vname,
                          lt_dtype_name(d), (long long)i, got, want);
          }
          lt_tensor_free(x), lt_tensor_free(xc), lt_tensor_free(y);
        }
        lt_generator_free(g);
        free(w);
      }
  }
  lt__path_force(LT__PATH_FAMILY_philox, LT__PATH_AUTO);
}
END_TEST

/* ---- reproducibility and resume ---------------------------------------- */

/* lt_generator_new_skip_init: the in-place fills check their arguments and
 * leave the tensor as it is; its other draws are seed 0's. */
START_TEST(test_skip_init) {
  lt_generator *g = LT_NNP(lt_generator_new_skip_init()), *g0 = LT_NNP(lt_generator_new(0));
  lt_tensor *t = LT_NN(lt_full(LT_DTYPE_F32, 1, (int64_t[]){100}, 7.0));
  ck_assert_int_eq(lt_uniform_(g, t, -1.0, 1.0), LT_OK);
  ck_assert_int_eq(lt_normal_(g, t, 0.0, 1.0), LT_OK);
  for (int i = 0; i < 100; i++) ck_assert_float_eq(((float *)t->data)[i], 7.0f);
  ck_assert_int_eq(lt_uniform_(g, t, 1.0, -1.0), LT_ERR_INVALID);
  ck_assert_int_eq(lt_normal_(g, t, 0.0, -1.0), LT_ERR_INVALID);
  lt_tensor *a = LT_NN(lt_rand(g, LT_DTYPE_F32, 1, (int64_t[]){64})), *b = LT_NN(lt_rand(g0, LT_DTYPE_F32, 1, (int64_t[]){64}));
  ck_assert_mem_eq(a->data, b->data, 64 * sizeof(float));
  LT_FREE_ALL(t, a, b);
  lt_generator_free(g), lt_generator_free(g0);
}
END_TEST

START_TEST(test_same_seed_same_values) {
  lt_generator *g1 = lt_generator_new(42), *g2 = lt_generator_new(42), *g3 = lt_generator_new(43);
  for (int dt = LT_DTYPE_F32; dt <= LT_DTYPE_F64; dt++) {
    lt_tensor *a = LT_NN(lt_randn(g1, (lt_dtype)dt, LT_SHAPE(4, 33)));
    lt_tensor *b = LT_NN(lt_randn(g2, (lt_dtype)dt, LT_SHAPE(4, 33)));
    lt_tensor *c = LT_NN(lt_randn(g3, (lt_dtype)dt, LT_SHAPE(4, 33)));
    LT_ASSERT_SAME_BITS(a, b);
    ck_assert(!lt_equal(a, c));
    /* the next draw continues, so it differs from the first */
    lt_tensor *a2 = LT_NN(lt_randn(g1, (lt_dtype)dt, LT_SHAPE(4, 33)));
    ck_assert(!lt_equal(a, a2));
    lt_tensor *b2 = LT_NN(lt_randn(g2, (lt_dtype)dt, LT_SHAPE(4, 33)));
    LT_ASSERT_SAME_BITS(a2, b2);
    lt_tensor_free(a), lt_tensor_free(b), lt_tensor_free(c), lt_tensor_free(a2), lt_tensor_free(b2);
  }
  /* a block-aligned draw splits: rand(8) == rand(4) then rand(4) */
  lt_generator *h1 = lt_generator_new(7), *h2 = lt_generator_new(7);
  lt_tensor *whole = LT_NN(lt_rand(h1, LT_DTYPE_F32, LT_SHAPE(8)));
  lt_tensor *p1 = LT_NN(lt_rand(h2, LT_DTYPE_F32, LT_SHAPE(4)));
  lt_tensor *p2 = LT_NN(lt_rand(h2, LT_DTYPE_F32, LT_SHAPE(4)));
  ck_assert(memcmp(whole->data, p1->data, 16) == 0);
  ck_assert(memcmp((float *)whole->data + 4, p2->data, 16) == 0);
  lt_tensor_free(whole), lt_tensor_free(p1), lt_tensor_free(p2);
  lt_generator_free(h1), lt_generator_free(h2);
  lt_generator_free(g1), lt_generator_free(g2), lt_generator_free(g3);
}
END_TEST

START_TEST(test_state_resume) {
  lt_generator *g = lt_generator_new(2024);
  lt_tensor *warm = LT_NN(lt_rand(g, LT_DTYPE_F32, LT_SHAPE(13)));
  lt_tensor *perm0 = LT_NN(lt_randperm(g, 10));
  lt_generator_state st = lt_generator_get_state(g);
  ck_assert_uint_eq(st.seed, 2024);
  ck_assert_uint_gt(st.offset, 4);
  /* the rest of the sequence, mixing every draw */
  lt_tensor *r[6];
  r[0] = LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(5, 3)));
  r[1] = LT_NN(lt_uniform(g, LT_DTYPE_F64, LT_SHAPE(7), -1, 1));
  r[2] = LT_NN(lt_bernoulli(g, LT_DTYPE_BOOL, LT_SHAPE(11), 0.25));
  r[3] = LT_NN(lt_randperm(g, 50));
  r[4] = LT_NN(lt_normal(g, LT_DTYPE_F64, LT_SHAPE(3), 5, 0.1));
  r[5] = LT_NN(lt_rand(g, LT_DTYPE_F32, LT_SHAPE(0)));
  lt_generator_state end = lt_generator_get_state(g);
  /* a fresh generator given the saved state resumes bit-exactly */
  lt_generator *h = lt_generator_new(1);
  LT_OK_OR_FAIL(lt_generator_set_state(h, st));
  lt_tensor *q[6];
  q[0] = LT_NN(lt_randn(h, LT_DTYPE_F32, LT_SHAPE(5, 3)));
  q[1] = LT_NN(lt_uniform(h, LT_DTYPE_F64, LT_SHAPE(7), -1, 1));
  q[2] = LT_NN(lt_bernoulli(h, LT_DTYPE_BOOL, LT_SHAPE(11), 0.25));
  q[3] = LT_NN(lt_randperm(h, 50));
  q[4] = LT_NN(lt_normal(h, LT_DTYPE_F64, LT_SHAPE(3), 5, 0.1));
  q[5] = LT_NN(lt_rand(h, LT_DTYPE_F32, LT_SHAPE(0)));
  for (int i = 0; i < 6; i++) LT_ASSERT_SAME_BITS(r[i], q[i]); /* after resume */
  lt_generator_state hend = lt_generator_get_state(h);
  ck_assert_uint_eq(hend.seed, end.seed);
  ck_assert_uint_eq(hend.offset, end.offset);
  /* and the same generator rewound too */
  LT_OK_OR_FAIL(lt_generator_set_state(g, st));
  lt_tensor *again = LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(5, 3)));
  LT_ASSERT_SAME_BITS(again, r[0]);
  for (int i = 0; i < 6; i++) lt_tensor_free(r[i]), lt_tensor_free(q[i]);
  lt_tensor_free(again), lt_tensor_free(warm), lt_tensor_free(perm0);
  lt_generator_free(g);
  lt_generator_free(h);
  lt_generator_free(NULL);
}
END_TEST

/* lt_test_same_on_threads callback: every distribution from one seed, and
 * lt_normal_ in place on a transposed view. */
static int draws(void *u, lt_tensor **a, int cap) {
  const int64_t n = 1000003; /* not a multiple of a block */
  lt_generator *g = lt_generator_new(314159);
  a[0] = LT_NN(lt_rand(g, LT_DTYPE_F32, LT_SHAPE(n)));
  a[1] = LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(n)));
  a[2] = LT_NN(lt_uniform(g, LT_DTYPE_F64, LT_SHAPE(n), -3, 3));
  a[3] = LT_NN(lt_normal(g, LT_DTYPE_F64, LT_SHAPE(n), 0, 2));
  a[4] = LT_NN(lt_bernoulli(g, LT_DTYPE_I64, LT_SHAPE(n), 0.7));
  lt_tensor *base = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(1000, 1001)));
  a[5] = LT_NN(lt_transpose(base, 0, 1));
  lt_tensor_free(base);
  LT_OK_OR_FAIL(lt_normal_(g, a[5], 0, 1));
  lt_generator_free(g);
  return 6;
}

START_TEST(test_threads_independent) { lt_test_same_on_threads(draws, NULL, "random draws"); }
END_TEST

/* ---- statistics -------------------------------------------------------- */

static void mean_var(const lt_tensor *t, double *mean, double *var) {
  double *v = read_f64(t);
  double s = 0, s2 = 0;
  for (int64_t i = 0; i < t->numel; i++) s += v[i];
  *mean = s / (double)t->numel;
  for (int64_t i = 0; i < t->numel; i++) s2 += (v[i] - *mean) * (v[i] - *mean);
  *var = s2 / (double)(t->numel - 1);
  free(v);
}

START_TEST(test_statistics) {
  const int64_t n = 1000000;
  const double N = (double)n;
  lt_generator *g = lt_generator_new(12345);
  for (int dt = LT_DTYPE_F32; dt <= LT_DTYPE_F64; dt++) {
    double m, v;
    /* U[lo, hi): mean (lo+hi)/2, variance (hi-lo)^2/12, 4th central moment (hi-lo)^4/80 */
    lt_tensor *u = LT_NN(lt_uniform(g, (lt_dtype)dt, LT_SHAPE(n), -1.0, 3.0));
    mean_var(u, &m, &v);
    double w = 4.0, var = w * w / 12, mu4 = w * w * w * w / 80;
    ck_assert_msg(fabs(m - 1.0) < 5 * sqrt(var / N), "uniform %s mean %g", lt_dtype_name(dt), m);
    ck_assert_msg(fabs(v - var) < 5 * sqrt((mu4 - var * var) / N), "uniform %s var %g", lt_dtype_name(dt), v);
    double *uv = read_f64(u);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += !(uv[i] >= -1.0 && uv[i] < 3.0);
    ck_assert_int_eq(bad, 0);
    free(uv);
    /* N(mean, std): var of the sample mean std^2/N, of the sample variance 2 std^4/N */
    lt_tensor *z = LT_NN(lt_normal(g, (lt_dtype)dt, LT_SHAPE(n), 2.0, 0.5));
    mean_var(z, &m, &v);
    ck_assert_msg(fabs(m - 2.0) < 5 * 0.5 / sqrt(N), "normal %s mean %g", lt_dtype_name(dt), m);
    ck_assert_msg(fabs(v - 0.25) < 5 * sqrt(2 * 0.0625 / N), "normal %s var %g", lt_dtype_name(dt), v);
    /* tails: the fraction beyond 2 sigma is 0.0455 */
    double *zv = read_f64(z);
    int64_t out = 0;
    for (int64_t i = 0; i < n; i++) out += fabs(zv[i] - 2.0) > 1.0;
    double frac = (double)out / N, pt = 0.0455002638963584;
    ck_assert_msg(fabs(frac - pt) < 5 * sqrt(pt * (1 - pt) / N), "normal %s tail fraction %g", lt_dtype_name(dt), frac);
    free(zv);
    lt_tensor_free(u);
    lt_tensor_free(z);
  }
  /* bernoulli frequency, for every dtype */
  for (int dt = 0; dt < LT_DTYPE_COUNT; dt++) {
    lt_tensor *b = LT_NN(lt_bernoulli(g, (lt_dtype)dt, LT_SHAPE(n), 0.3));
    double *bv = read_f64(b);
    double s = 0;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
      bad += !(bv[i] == 0.0 || bv[i] == 1.0);
      s += bv[i];
    }
    ck_assert_int_eq(bad, 0);
    ck_assert_msg(fabs(s / N - 0.3) < 5 * sqrt(0.21 / N), "bernoulli %s freq %g", lt_dtype_name(dt), s / N);
    free(bv);
    lt_tensor_free(b);
  }
  /* p = 0 and p = 1 are exact */
  lt_tensor *b0 = LT_NN(lt_bernoulli(g, LT_DTYPE_F32, LT_SHAPE(10000), 0.0));
  lt_tensor *b1 = LT_NN(lt_bernoulli(g, LT_DTYPE_BOOL, LT_SHAPE(10000), 1.0));
  lt_tensor *zeros = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(10000)));
  lt_tensor *ones = LT_NN(lt_ones(LT_DTYPE_BOOL, LT_SHAPE(10000)));
  ck_assert(lt_equal(b0, zeros));
  ck_assert(lt_equal(b1, ones));
  lt_tensor_free(b0), lt_tensor_free(b1), lt_tensor_free(zeros), lt_tensor_free(ones);
  lt_generator_free(g);
}
END_TEST

START_TEST(test_randperm) {
  lt_generator *g = lt_generator_new(77);
  /* a permutation, for several sizes */
  const int64_t sizes[] = {0, 1, 2, 3, 10, 1000, 100003};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
    int64_t n = sizes[k];
    lt_tensor *p = LT_NN(lt_randperm(g, n));
    ck_assert_int_eq(p->dtype, LT_DTYPE_I64);
    LT_ASSERT_SHAPE(p, n);
    const int64_t *v = p->data;
    char *seen = calloc((size_t)n + 1, 1);
    int64_t bad = 0;
    for (int64_t i = 0; i < n && !bad; i++) {
      if (v[i] < 0 || v[i] >= n || seen[v[i]]) bad = i + 1;
      else seen[v[i]] = 1;
    }
    ck_assert_msg(!bad, "randperm(%lld): entry %lld = %lld is out of range or repeated",
                  (long long)n, (long long)(bad - 1), bad ? (long long)v[bad - 1] : 0LL);
    free(seen);
    lt_tensor_free(p);
  }
  /* n = 0 and 1 draw nothing */
  lt_generator_state s0 = lt_generator_get_state(g);
  lt_tensor *p1 = LT_NN(lt_randperm(g, 1));
  ck_assert_uint_eq(lt_generator_get_state(g).offset, s0.offset);
  lt_tensor_free(p1);
  /* uniformity: the value in position 0 and the position of value 0 over
   * many draws of randperm(10); chi-square with 9 degrees of freedom (mean 9,
   * sd 4.24); 45 is beyond 8 sd. Also all 6 orders of randperm(3). */
  const int draws = 20000;
  double first[10] = {0}, where0[10] = {0}, orders[6] = {0};
  for (int d = 0; d < draws; d++) {
    lt_tensor *p = LT_NN(lt_randperm(g, 10));
    const int64_t *v = p->data;
    first[v[0]]++;
    for (int i = 0; i < 10; i++)
      if (v[i] == 0) where0[i]++;
    lt_tensor_free(p);
    lt_tensor *q = LT_NN(lt_randperm(g, 3));
    const int64_t *w = q->data;
    orders[w[0] * 2 + (w[1] > w[2])]++;
    lt_tensor_free(q);
  }
  double c1 = 0, c2 = 0, c3 = 0, e = draws / 10.0, e3 = draws / 6.0;
  for (int i = 0; i < 10; i++) {
    c1 += (first[i] - e) * (first[i] - e) / e;
    c2 += (where0[i] - e) * (where0[i] - e) / e;
  }
  for (int i = 0; i < 6; i++) c3 += (orders[i] - e3) * (orders[i] - e3) / e3;
  ck_assert_msg(c1 < 45 && c2 < 45, "randperm chi-square %g %g", c1, c2);
  ck_assert_msg(c3 < 35, "randperm(3) orders chi-square %g (5 dof)", c3);
  lt_generator_free(g);
}
END_TEST

/* ---- uniform never returns hi ------------------------------------------ */

START_TEST(test_uniform_excludes_hi) {
  lt_generator *g = lt_generator_new(5);
  /* With a span of 3 ulps, lo + span*u rounds to hi for about 1 draw in 6:
   * those must come out as the largest value below hi. */
  const int64_t n = 100000;
  float lof = 1.0f, hif = 1.0f + 3 * 0x1p-23f;
  lt_tensor *a = LT_NN(lt_uniform(g, LT_DTYPE_F32, LT_SHAPE(n), lof, hif));
  const float *fa = a->data;
  int64_t top = 0, bad = 0;
  for (int64_t i = 0; i < n; i++) {
    bad += !(fa[i] >= lof && fa[i] < hif);
    top += fa[i] == nextafterf(hif, 0);
  }
  ck_assert_int_eq(bad, 0);
  ck_assert_int_gt(top, n / 10);
  double lo = 1.0, hi = 1.0 + 3 * 0x1p-52;
  lt_tensor *b = LT_NN(lt_uniform(g, LT_DTYPE_F64, LT_SHAPE(n), lo, hi));
  const double *fb = b->data;
  for (int64_t i = 0; i < n; i++) bad += !(fb[i] >= lo && fb[i] < hi);
  ck_assert_int_eq(bad, 0);
  /* rand in f32: [0, 1) */
  lt_tensor *r = LT_NN(lt_rand(g, LT_DTYPE_F32, LT_SHAPE(n)));
  for (int64_t i = 0; i < n; i++) bad += !(((float *)r->data)[i] >= 0 && ((float *)r->data)[i] < 1);
  ck_assert_int_eq(bad, 0);
  /* lo == hi gives lo (as PyTorch's uniform_(a, a)) */
  lt_tensor *c = LT_NN(lt_uniform(g, LT_DTYPE_F32, LT_SHAPE(5), 2.5, 2.5));
  LT_ASSERT_VALUES(c, 0, 2.5, 2.5, 2.5, 2.5, 2.5);
  /* std = 0 gives the mean */
  lt_tensor *d = LT_NN(lt_normal(g, LT_DTYPE_F64, LT_SHAPE(3), -1.5, 0));
  LT_ASSERT_VALUES(d, 0, -1.5, -1.5, -1.5);
  lt_tensor_free(a), lt_tensor_free(b), lt_tensor_free(r), lt_tensor_free(c), lt_tensor_free(d);
  lt_generator_free(g);
}
END_TEST

/* ---- in place ----------------------------------------------------------- */

START_TEST(test_inplace) {
  lt_generator *g = lt_generator_new(8), *h = lt_generator_new(8);
  /* contiguous: uniform_ on x equals lt_uniform of x's shape */
  lt_tensor *x = LT_NN(lt_zeros(LT_DTYPE_F64, LT_SHAPE(4, 5)));
  uint64_t v0 = lt__version(x);
  LT_OK_OR_FAIL(lt_uniform_(g, x, -2, 2));
  ck_assert_uint_gt(lt__version(x), v0);
  lt_tensor *want = LT_NN(lt_uniform(h, LT_DTYPE_F64, LT_SHAPE(4, 5), -2, 2));
  ck_assert(lt_equal(x, want));
  lt_tensor_free(want);
  /* non-contiguous: values go in logical (row-major) order of the view */
  lt_tensor *base = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(3, 5)));
  lt_tensor *xt = LT_NN(lt_transpose(base, 0, 1)); /* [5,3] view */
  LT_OK_OR_FAIL(lt_normal_(g, xt, 1, 3));
  want = LT_NN(lt_normal(h, LT_DTYPE_F32, LT_SHAPE(5, 3), 1, 3));
  ck_assert(lt_equal(xt, want));
  lt_tensor_free(want);
  /* a strided slice: only the selected elements change */
  lt_tensor *row = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(10)));
  lt_tensor *every2 = LT_NN(lt_slice(row, 0, 1, 10, 2));
  LT_OK_OR_FAIL(lt_uniform_(g, every2, 5, 6));
  want = LT_NN(lt_uniform(h, LT_DTYPE_F32, LT_SHAPE(5), 5, 6));
  ck_assert(lt_equal(every2, want));
  const float *rv = row->data;
  for (int i = 0; i < 10; i += 2) ck_assert(rv[i] == 0);
  lt_tensor_free(want);
  /* 0-d and zero-size */
  lt_tensor *s = LT_NN(lt_scalar(LT_DTYPE_F32, 0));
  LT_OK_OR_FAIL(lt_uniform_(g, s, 1, 2));
  double sv;
  LT_OK_OR_FAIL(lt_item(s, &sv));
  ck_assert(sv >= 1 && sv < 2);
  lt_tensor *e = LT_NN(lt_zeros(LT_DTYPE_F64, LT_SHAPE(0, 4)));
  lt_generator_state before = lt_generator_get_state(g);
  LT_OK_OR_FAIL(lt_normal_(g, e, 0, 1));
  ck_assert_uint_eq(lt_generator_get_state(g).offset, before.offset);
  lt_tensor_free(x), lt_tensor_free(base), lt_tensor_free(xt), lt_tensor_free(row);
  lt_tensor_free(every2), lt_tensor_free(s), lt_tensor_free(e);
  lt_generator_free(g), lt_generator_free(h);
}
END_TEST

/* ---- errors ------------------------------------------------------------ */

START_TEST(test_errors) {
  lt_generator *g = lt_generator_new(1);
  lt_tensor *r = LT_NN(lt_rand(g, LT_DTYPE_F32, LT_SHAPE(3)));
  lt_generator_state st = lt_generator_get_state(g);
  LT_EXPECT_NULL_ERR(lt_rand(NULL, LT_DTYPE_F32, LT_SHAPE(3)), LT_ERR_NULL, "rand: argument g");
  LT_EXPECT_NULL_ERR(lt_rand(g, LT_DTYPE_I32, LT_SHAPE(3)), LT_ERR_DTYPE, "rand: dtype i32");
  LT_EXPECT_NULL_ERR(lt_randn(g, LT_DTYPE_BOOL, LT_SHAPE(3)), LT_ERR_DTYPE, "randn: dtype bool");
  LT_EXPECT_NULL_ERR(lt_uniform(g, LT_DTYPE_I64, LT_SHAPE(3), 0, 1), LT_ERR_DTYPE, "f32 or f64");
  LT_EXPECT_NULL_ERR(lt_normal(g, LT_DTYPE_I32, LT_SHAPE(3), 0, 1), LT_ERR_DTYPE, "normal");
  LT_EXPECT_NULL_ERR(lt_uniform(g, LT_DTYPE_F32, LT_SHAPE(3), 2, 1), LT_ERR_INVALID, "lo <= hi");
  LT_EXPECT_NULL_ERR(lt_uniform(g, LT_DTYPE_F64, LT_SHAPE(3), 0, INFINITY), LT_ERR_INVALID, "finite");
  LT_EXPECT_NULL_ERR(lt_uniform(g, LT_DTYPE_F64, LT_SHAPE(3), -1e308, 1e308), LT_ERR_INVALID, "overflows");
  LT_EXPECT_NULL_ERR(lt_uniform(g, LT_DTYPE_F32, LT_SHAPE(3), 0, 1e39), LT_ERR_INVALID, "f32 range");
  LT_EXPECT_NULL_ERR(lt_normal(g, LT_DTYPE_F32, LT_SHAPE(3), 0, -1), LT_ERR_INVALID, "std >= 0");
  LT_EXPECT_NULL_ERR(lt_normal(g, LT_DTYPE_F32, LT_SHAPE(3), NAN, 1), LT_ERR_INVALID, "mean");
  LT_EXPECT_NULL_ERR(lt_bernoulli(g, LT_DTYPE_F32, LT_SHAPE(3), 1.5), LT_ERR_INVALID, "0 <= p <= 1");
  LT_EXPECT_NULL_ERR(lt_bernoulli(g, LT_DTYPE_F32, LT_SHAPE(3), -0.1), LT_ERR_INVALID, "p -0.1");
  LT_EXPECT_NULL_ERR(lt_bernoulli(g, LT_DTYPE_F32, LT_SHAPE(3), NAN), LT_ERR_INVALID, "bernoulli");
  LT_EXPECT_NULL_ERR(lt_bernoulli(g, (lt_dtype)99, LT_SHAPE(3), 0.5), LT_ERR_DTYPE, "bernoulli");
  LT_EXPECT_NULL_ERR(lt_bernoulli(NULL, LT_DTYPE_F32, LT_SHAPE(3), 0.5), LT_ERR_NULL, "g");
  LT_EXPECT_NULL_ERR(lt_randperm(g, -1), LT_ERR_INVALID, "randperm: n -1");
  LT_EXPECT_NULL_ERR(lt_randperm(NULL, 3), LT_ERR_NULL, "randperm");
  LT_EXPECT_NULL_ERR(lt_rand(g, LT_DTYPE_F32, LT_SHAPE(2, -3)), LT_ERR_INVALID, "rand");
  LT_EXPECT_NULL_ERR(lt_rand(g, LT_DTYPE_F32, 2, NULL), LT_ERR_NULL, "shape");
  LT_EXPECT_NULL_ERR(lt_rand(g, LT_DTYPE_F32, LT_MAX_DIMS + 1, (int64_t[LT_MAX_DIMS + 1]){0}), LT_ERR_INVALID, "rand");
  /* in place: dtype, parameters, a leaf that requires grad; x untouched */
  lt_tensor *xi = LT_NN(lt_zeros(LT_DTYPE_I32, LT_SHAPE(3)));
  LT_EXPECT_ERR(lt_uniform_(g, xi, 0, 1), LT_ERR_DTYPE, "uniform_: dtype i32");
  LT_EXPECT_ERR(lt_normal_(g, xi, 0, 1), LT_ERR_DTYPE, "normal_");
  lt_tensor *xf = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(3)));
  LT_EXPECT_ERR(lt_uniform_(g, xf, 1, 0), LT_ERR_INVALID, "uniform_");
  LT_EXPECT_ERR(lt_normal_(g, xf, 0, -2), LT_ERR_INVALID, "normal_");
  LT_EXPECT_ERR(lt_uniform_(NULL, xf, 0, 1), LT_ERR_NULL, "g");
  LT_EXPECT_ERR(lt_uniform_(g, NULL, 0, 1), LT_ERR_NULL, "x");
  LT_EXPECT_ERR(lt_normal_(g, NULL, 0, 1), LT_ERR_NULL, "x");
  LT_OK_OR_FAIL(lt_requires_grad_(xf, true));
  LT_EXPECT_ERR(lt_normal_(g, xf, 0, 1), LT_ERR_AUTOGRAD, "normal_");
  bool prev = lt_set_grad_enabled(false);
  LT_OK_OR_FAIL(lt_normal_(g, xf, 0, 1)); /* allowed with grad mode off (initialisers) */
  lt_set_grad_enabled(prev);
  st = lt_generator_get_state(g);
  lt_tensor *one = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(1)));
  lt_tensor *ex = LT_NN(lt_expand(one, LT_SHAPE(4)));
  lt_tensor_free(one);
  ck_assert_int_ne(lt_uniform_(g, ex, 0, 1), LT_OK); /* overlapping elements */
  lt_clear_error();
  LT_ASSERT_VALUES(xi, 0, 0, 0, 0);
  /* failures do not advance the generator */
  lt_generator_state st2 = lt_generator_get_state(g);
  ck_assert_uint_eq(st2.offset, st.offset);
  ck_assert_uint_eq(st2.seed, st.seed);
  LT_EXPECT_ERR(lt_generator_set_state(NULL, st), LT_ERR_NULL, "generator_set_state");
  lt_generator_get_state(NULL);
  LT_EXPECT_ERR(lt_last_status(), LT_ERR_NULL, "generator_get_state");
  lt_tensor_free(r), lt_tensor_free(xi), lt_tensor_free(xf), lt_tensor_free(ex);
  lt_generator_free(g);
}
END_TEST

/* ---- multinomial ------------------------------------------------------- */

static int multinomial_draws(void *ctx, lt_tensor **out, int cap) {
  (void)ctx, (void)cap;
  lt_generator *g = lt_generator_new(2718);
  lt_tensor *p = LT_NN(lt_rand(g, LT_DTYPE_F64, LT_SHAPE(64, 40)));
  out[0] = LT_NN(lt_multinomial(g, p, 600, true)); /* above the parallel threshold */
  out[1] = LT_NN(lt_multinomial(g, p, 30, false));
  lt_tensor_free(p);
  lt_generator_free(g);
  return 2;
}

/* Chi-square of counts against probabilities p (k categories, n draws); the
 * statistic of a correct sampler is ~ chi2(k - 1): mean k - 1, sd sqrt(2(k-1)). */
static double chi2(const int64_t *count, const double *p, int k, int64_t n) {
  double c = 0;
  for (int i = 0; i < k; i++) {
    const double e = p[i] * (double)n;
    if (e > 0) c += ((double)count[i] - e) * ((double)count[i] - e) / e;
  }
  return c;
}

START_TEST(test_multinomial) {
  lt_generator *g = lt_generator_new(99);
  /* weights (unnormalised) with zeros, 8 categories, 2 rows */
  const double w[2][8] = {{1, 0, 2, 3, 0, 4, 0.5, 1.5}, {0, 0, 0, 5, 0, 0, 0, 1}};
  lt_tensor *p = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(2, 8), w));
  const int64_t n = 100000;
  lt_tensor *d = LT_NN(lt_multinomial(g, p, n, true));
  ck_assert_int_eq(d->ndim, 2);
  ck_assert_int_eq(d->shape[0], 2);
  ck_assert_int_eq(d->shape[1], n);
  ck_assert_int_eq(d->dtype, LT_DTYPE_I64);
  for (int r = 0; r < 2; r++) {
    int64_t count[8] = {0};
    double sum = 0, q[8];
    for (int i = 0; i < 8; i++) sum += w[r][i];
    for (int i = 0; i < 8; i++) q[i] = w[r][i] / sum;
    const int64_t *v = (const int64_t *)d->data + r * n;
    for (int64_t i = 0; i < n; i++) {
      ck_assert_msg(v[i] >= 0 && v[i] < 8, "row %d draw %lld is %lld", r, (long long)i, (long long)v[i]);
      count[v[i]]++;
    }
    for (int i = 0; i < 8; i++)
      if (w[r][i] == 0) ck_assert_msg(count[i] == 0, "row %d: category %d of weight 0 drawn %lld times", r, i,
                                      (long long)count[i]);
    int k = 0;
    for (int i = 0; i < 8; i++) k += w[r][i] > 0;
    /* chi2(k - 1) beyond mean + 6 sd is a p-value below 1e-6 (fixed seed: deterministic anyway) */
    const double c = chi2(count, q, 8, n), bound = (k - 1) + 6 * sqrt(2.0 * (k - 1));
    ck_assert_msg(c < bound, "row %d: chi-square %g >= %g", r, c, bound);
  }
  /* reproducible from the seed; a 1-d input gives a 1-d result equal to row 0 of its own draw */
  lt_generator *g2 = lt_generator_new(99);
  lt_tensor *d2 = LT_NN(lt_multinomial(g2, p, n, true));
  ck_assert(lt_equal(d, d2));
  lt_generator_state st = lt_generator_get_state(g2);
  ck_assert_uint_eq(st.offset, 2 * (uint64_t)((2 * n + 3) / 4));
  /* rows independent of each other: row 1 alone draws what row 1 of the pair drew at its blocks */
  lt_generator *g3 = lt_generator_new(99);
  lt_tensor *row0 = LT_NN(lt_select(p, 0, 0));
  lt_tensor *d3 = LT_NN(lt_multinomial(g3, row0, n, true));
  ck_assert_int_eq(d3->ndim, 1);
  lt_tensor *d0 = LT_NN(lt_select(d, 0, 0));
  ck_assert(lt_equal(d3, d0));

  /* without replacement: distinct categories, never a zero-weight one, all of them when k == positives */
  lt_tensor *u = LT_NN(lt_multinomial(g, p, 2, false));
  const int64_t *uv = u->data;
  ck_assert(uv[2] != uv[3] && (uv[2] == 3 || uv[2] == 7) && (uv[3] == 3 || uv[3] == 7));
  ck_assert(uv[0] != uv[1] && w[0][uv[0]] > 0 && w[0][uv[1]] > 0);
  /* first draw without replacement has the categorical distribution; the second excludes the first */
  const double w1[4] = {1, 2, 3, 4};
  lt_tensor *p1 = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(1, 4), w1));
  lt_tensor *big = LT_NN(lt_expand(p1, LT_SHAPE(40000, 4)));
  lt_tensor *s2 = LT_NN(lt_multinomial(g, big, 4, false));
  int64_t first[4] = {0};
  for (int64_t r = 0; r < 40000; r++) {
    const int64_t *v = (const int64_t *)s2->data + r * 4;
    int seen = 0;
    for (int j = 0; j < 4; j++) seen |= 1 << v[j];
    ck_assert_int_eq(seen, 15); /* a permutation */
    first[v[0]]++;
  }
  const double q1[4] = {0.1, 0.2, 0.3, 0.4};
  const double c1 = chi2(first, q1, 4, 40000);
  ck_assert_msg(c1 < 3 + 6 * sqrt(6.0), "first draw without replacement: chi-square %g", c1);

  /* invalid rows are refused, naming the row and category; nothing drawn */
  lt_generator_state before = lt_generator_get_state(g);
  const double bad[3][3] = {{1, -0.5, 1}, {1, NAN, 0}, {0, 0, 0}};
  const char *frag[3] = {"row 0 has -0.5 at category 1", "row 0 has nan at category 1", "row 0 sums to 0"};
  for (int i = 0; i < 3; i++) {
    lt_tensor *b = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(3), bad[i]));
    LT_EXPECT_NULL_ERR(lt_multinomial(g, b, 1, true), LT_ERR_INVALID, frag[i]);
    lt_tensor_free(b);
  }
  LT_EXPECT_NULL_ERR(lt_multinomial(g, p, 3, false), LT_ERR_INVALID,
                "row 1 has 2 categories of nonzero probability, fewer than the 3 samples");
  LT_EXPECT_NULL_ERR(lt_multinomial(g, p, 0, true), LT_ERR_INVALID, "num_samples 0");
  LT_EXPECT_NULL_ERR(lt_multinomial(g, p, 9, false), LT_ERR_INVALID,
                "cannot draw 9 samples without replacement from 8 categories");
  LT_EXPECT_NULL_ERR(lt_multinomial(NULL, p, 1, true), LT_ERR_NULL, "multinomial");
  lt_tensor *ints = LT_NN(lt_zeros(LT_DTYPE_I64, LT_SHAPE(3)));
  LT_EXPECT_NULL_ERR(lt_multinomial(g, ints, 1, true), LT_ERR_DTYPE, "probs is [3] i64");
  ck_assert_uint_eq(lt_generator_get_state(g).offset, before.offset);
  lt_test_same_on_threads(multinomial_draws, NULL, "multinomial");
  lt_tensor_free(ints), lt_tensor_free(s2), lt_tensor_free(big), lt_tensor_free(p1), lt_tensor_free(u);
  lt_tensor_free(d0), lt_tensor_free(d3), lt_tensor_free(row0), lt_tensor_free(d2), lt_tensor_free(d);
  lt_tensor_free(p);
  lt_generator_free(g3), lt_generator_free(g2), lt_generator_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("random");
  TCase *tc = tcase_create("random");
  tcase_add_test(tc, test_kat);
  tcase_add_test(tc, test_skip_init);
  tcase_add_test(tc, test_layout_uniform);
  tcase_add_test(tc, test_layout_normal_bernoulli);
  tcase_add_test(tc, test_layout_versions);
  tcase_add_test(tc, test_same_seed_same_values);
  tcase_add_test(tc, test_state_resume);
  tcase_add_test(tc, test_threads_independent);
  tcase_add_test(tc, test_statistics);
  tcase_add_test(tc, test_randperm);
  tcase_add_test(tc, test_uniform_excludes_hi);
  tcase_add_test(tc, test_inplace);
  tcase_add_test(tc, test_errors);
  tcase_add_test(tc, test_multinomial);
  tcase_set_timeout(tc, 60); /* wall time on a loaded machine; the suite's CPU time is under 2 s */
  suite_add_tcase(s, tc);
  return lt_test_run(s);
}
