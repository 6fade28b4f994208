/*
 * tests/test_generate.c: the generic generation loop (generate/generate.c,
 * lt_generate) driven by a model that is not a Transformer: a bigram table
 * (the next token's logits depend on the last token only) with a trivial
 * cache (each row's ids seen so far, checked against the loop's at every
 * call, so a missing or wrong reorder fails the call).
 *
 * Every strategy is checked against a brute-force reference computed here:
 *   - greedy: following the argmax of the table row by row, with the sum of
 *     log-softmax as the score, stopping at <eos> or max_new;
 *   - beam search with width >= V^max_new: equal to exhaustive search over
 *     every sequence (ending at <eos> or at max_new) by sum / len^alpha, for
 *     several alphas; width 1 equals greedy;
 *   - sampling: over many draws, the frequency of each token follows
 *     softmax(logits / temperature) restricted to top-k then top-p, and tokens
 *     outside the kept set never appear; scores are the raw log-softmax;
 * with and without the cache (identical results), and the error paths.
 * tests/test_decode.c checks the Transformer on the same loop.
 */
#include "generate/generate.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================== */
/* The toy model                                                            */
/* ======================================================================== */

typedef struct bigram {
  int64_t V;
  const double *table;  /* [V, V]: row a holds the logits of the token after a */
  bool cache;           /* keep (and check) each row's ids */
  int64_t R, len, cap;  /* the cache: rows, ids per row, room per row */
  int64_t *seen;        /* [R, cap] */
  int64_t calls, reorders;
  int64_t fail_at;      /* > 0: the fail_at-th next_logits call fails (error paths) */
  bool bad_shape;       /* return [R, V + 1] logits (error paths) */
  bool silent_null;     /* return NULL without an error (error paths) */
} bigram;

static lt_tensor *bigram_logits(void *self, const int64_t *ids, int64_t stride, int64_t R, int64_t n) {
  bigram *b = self;
  b->calls++;
  if (b->fail_at > 0 && b->calls == b->fail_at) return lt_error_set(LT_ERR_INVALID, "bigram: asked to fail"), NULL;
  if (b->silent_null) return NULL;
  if (b->cache) {
    if (b->len == 0) { /* the first call: the whole prefixes */
      b->R = R, b->cap = 64;
      b->seen = malloc(sizeof *b->seen * (size_t)(R * b->cap));
      ck_assert(b->seen);
    } else {
      /* later calls add one column; the ids before it must be the ones this cache saw */
      ck_assert_int_eq(R, b->R);
      ck_assert_int_eq(n, b->len + 1);
      for (int64_t r = 0; r < R; r++)
        for (int64_t i = 0; i < b->len; i++)
          ck_assert_msg(ids[r * stride + i] == b->seen[r * b->cap + i],
                        "bigram: row %lld id %lld is %lld, the cache saw %lld (a reorder went wrong)", (long long)r,
                        (long long)i, (long long)ids[r * stride + i], (long long)b->seen[r * b->cap + i]);
    }
    ck_assert(n <= b->cap);
    for (int64_t r = 0; r < R; r++)
      for (int64_t i = b->len; i < n; i++) b->seen[r * b->cap + i] = ids[r * stride + i];
    b->len = n;
  }
  const int64_t V = b->V, W = b->bad_shape ? V + 1 : V;
  double *l = calloc((size_t)(R * W), sizeof *l);
  ck_assert(l);
  for (int64_t r = 0; r < R; r++) memcpy(l + r * W, b->table + ids[r * stride + n - 1] * V, sizeof *l * (size_t)V);
  lt_tensor *t = lt_tensor_from_copy(LT_DTYPE_F64, 2, (int64_t[]){R, W}, l);
  free(l);
  return t;
}

static lt_status bigram_reorder(void *self, const int64_t *rows, int64_t R) {
  bigram *b = self;
  ck_assert_int_eq(R, b->R);
  int64_t *next = malloc(sizeof *next * (size_t)(R * b->cap));
  ck_assert(next);
  for (int64_t r = 0; r < R; r++) {
    ck_assert(rows[r] >= 0 && rows[r] < R);
    memcpy(next + r * b->cap, b->seen + rows[r] * b->cap, sizeof *next * (size_t)b->len);
  }
  free(b->seen);
  b->seen = next;
  b->reorders++;
  return LT_OK;
}

static lt_generate_model as_model(bigram *b) {
  return (lt_generate_model){
      .self = b, .vocab_size = b->V, .next_logits = bigram_logits, .reorder = b->cache ? bigram_reorder : NULL};
}

static void bigram_reset(bigram *b) {
  free(b->seen);
  b->seen = NULL;
  b->len = b->R = b->calls = b->reorders = 0;
}

/* A [V, V] table of N(0, spread^2) logits from a fixed seed. */
static double *make_table(int64_t V, uint64_t seed, double spread) {
  lt_generator *g = lt_generator_new(seed);
  lt_tensor *t = LT_NN(lt_randn(g, LT_DTYPE_F64, LT_SHAPE(V, V)));
  double *v = malloc(sizeof *v * (size_t)(V * V));
  LT_OK_OR_FAIL(lt_tensor_read(t, LT_DTYPE_F64, v, V * V));
  for (int64_t i = 0; i < V * V; i++) v[i] *= spread;
  lt_tensor_free(t);
  lt_generator_free(g);
  return v;
}

/* The reference log-softmax of one row, in double. */
static void ref_log_softmax(const double *l, int64_t V, double *out) {
  double mx = l[0], s = 0;
  for (int64_t v = 1; v < V; v++) mx = l[v] > mx ? l[v] : mx;
  for (int64_t v = 0; v < V; v++) s += exp(l[v] - mx);
  for (int64_t v = 0; v < V; v++) out[v] = l[v] - mx - log(s);
}

static double ref_logp(const double *table, int64_t V, int64_t prev, int64_t tok) {
  double lp[64];
  ck_assert(V <= 64);
  ref_log_softmax(table + prev * V, V, lp);
  return lp[tok];
}

/* lt_generate on the toy, failing the test on error; with the cache, checks
 * that the state was built and frees it. */
static lt_generate_result gen_run(bigram *b, const lt_tensor *prefix, const lt_generate_opts *o) {
  lt_generate_model m = as_model(b);
  lt_generate_result r = {0};
  LT_OK_OR_FAIL(lt_generate(&m, prefix, o, &r));
  ck_assert(r.tokens && r.lengths && r.scores);
  return r;
}

typedef struct host_result {
  int64_t B, L;
  int64_t tok[4096], len[64];
  double score[64];
} host_result;

static void to_host(const lt_generate_result *r, host_result *h) {
  h->B = r->tokens->shape[0], h->L = r->tokens->shape[1];
  ck_assert(h->B <= 64 && h->B * h->L <= 4096);
  LT_OK_OR_FAIL(lt_tensor_read(r->tokens, LT_DTYPE_I64, h->tok, h->B * h->L));
  LT_OK_OR_FAIL(lt_tensor_read(r->lengths, LT_DTYPE_I64, h->len, h->B));
  LT_OK_OR_FAIL(lt_tensor_read(r->scores, LT_DTYPE_F64, h->score, h->B));
}

static void assert_same(const lt_generate_result *a, const lt_generate_result *b, const char *what) {
  ck_assert_msg(lt_equal(a->tokens, b->tokens), "%s: tokens differ", what);
  ck_assert_msg(lt_equal(a->lengths, b->lengths), "%s: lengths differ", what);
  LT_ASSERT_CLOSE(a->scores, b->scores, 0.0, 0.0);
}

/* ======================================================================== */
/* Greedy                                                                   */
/* ======================================================================== */

START_TEST(greedy_matches_reference) {
  const int64_t V = 6, B = 4, P = 2, M = 9, EOS = 2, PAD = 0;
  double *table = make_table(V, 11, 1.5);
  const int64_t pre[] = {1, 3, 4, 5, 0, 0, 5, 2}; /* [B, P]; an <eos> inside a prefix is just an id */
  lt_tensor *prefix = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(B, P), pre));
  lt_generate_opts o = lt_generate_defaults();
  o.max_new = M, o.eos_id = EOS, o.pad_id = PAD;
  bigram nc = {.V = V, .table = table}, c = {.V = V, .table = table, .cache = true};
  lt_generate_result a = gen_run(&nc, prefix, &o), b = gen_run(&c, prefix, &o);
  assert_same(&a, &b, "greedy, cached vs uncached");
  host_result h;
  to_host(&a, &h);
  int64_t Lmax = 0;
  for (int64_t r = 0; r < B; r++) {
    int64_t prev = pre[r * P + P - 1], n = 0, want[16];
    double sum = 0;
    while (n < M) { /* the argmax of the table row, ties to the lowest id */
      int64_t best = 0;
      for (int64_t v = 1; v < V; v++)
        if (table[prev * V + v] > table[prev * V + best]) best = v;
      sum += ref_logp(table, V, prev, best);
      want[n++] = best;
      prev = best;
      if (best == EOS) break;
    }
    Lmax = n > Lmax ? n : Lmax;
    ck_assert_int_eq(h.len[r], n);
    ck_assert_msg(fabs(h.score[r] - sum) < 1e-12, "row %lld: score %.15g, reference %.15g", (long long)r, h.score[r],
                  sum);
    for (int64_t i = 0; i < h.L; i++)
      ck_assert_msg(h.tok[r * h.L + i] == (i < n ? want[i] : PAD), "row %lld token %lld: %lld, reference %lld",
                    (long long)r, (long long)i, (long long)h.tok[r * h.L + i], (long long)(i < n ? want[i] : PAD));
  }
  ck_assert_int_eq(h.L, Lmax);
  /* one call per step, the whole batch at once; no reorder outside beam search */
  ck_assert_int_eq(c.calls, Lmax);
  ck_assert_int_eq(c.reorders, 0);
  /* max_new 0: nothing is asked of the model */
  bigram_reset(&c);
  o.max_new = 0;
  lt_generate_result z = gen_run(&c, prefix, &o);
  LT_ASSERT_SHAPE(z.tokens, B, 0);
  ck_assert_int_eq(c.calls, 0);
  /* an i32 prefix gives the same */
  bigram_reset(&c);
  o.max_new = M;
  lt_tensor *p32 = LT_NN(lt_to_dtype(prefix, LT_DTYPE_I32));
  lt_generate_result a32 = gen_run(&c, p32, &o);
  assert_same(&a, &a32, "i32 prefix");
  lt_generate_result_free(&a), lt_generate_result_free(&b), lt_generate_result_free(&z), lt_generate_result_free(&a32);
  lt_generate_result_free(NULL);
  bigram_reset(&c);
  lt_tensor_free(prefix), lt_tensor_free(p32);
  free(table);
}
END_TEST

/* ======================================================================== */
/* Beam search against exhaustive search                                    */
/* ======================================================================== */

typedef struct best_seq {
  double score;
  int64_t len, tok[8];
} best_seq;

/* Every continuation of prev (depth d so far, log p sum) that ends at eos or
 * at M tokens, ranked by sum / len^alpha. */
static void exhaustive(const double *table, int64_t V, int64_t EOS, int64_t M, double alpha, int64_t prev, int64_t *seq,
                       int64_t d, double sum, best_seq *best) {
  for (int64_t v = 0; v < V; v++) {
    const double s = sum + ref_logp(table, V, prev, v);
    seq[d] = v;
    if (v == EOS || d + 1 == M) {
      const double score = s / pow((double)(d + 1), alpha);
      if (score > best->score) {
        best->score = score, best->len = d + 1;
        memcpy(best->tok, seq, sizeof *seq * (size_t)(d + 1));
      }
    } else {
      exhaustive(table, V, EOS, M, alpha, v, seq, d + 1, s, best);
    }
  }
}

START_TEST(beam_wide_equals_exhaustive_search) {
  const int64_t V = 4, B = 3, P = 1, M = 3, EOS = 1, PAD = 0, K = 64; /* K = V^M */
  double *table = make_table(V, 5, 1.2);
  const int64_t pre[] = {0, 2, 3};
  lt_tensor *prefix = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(B, P), pre));
  const double alphas[] = {0.0, 0.6, 1.0, 2.0};
  int64_t distinct_lengths = 0, seen_len[8] = {0};
  for (size_t ai = 0; ai < sizeof alphas / sizeof alphas[0]; ai++) {
    lt_generate_opts o = lt_generate_defaults();
    o.strategy = LT_GENERATE_BEAM, o.beam_width = K, o.length_penalty = alphas[ai];
    o.max_new = M, o.eos_id = EOS, o.pad_id = PAD;
    bigram nc = {.V = V, .table = table}, c = {.V = V, .table = table, .cache = true};
    lt_generate_result a = gen_run(&nc, prefix, &o), b = gen_run(&c, prefix, &o);
    assert_same(&a, &b, "beam, cached vs uncached");
    ck_assert_msg(c.reorders > 0, "the beams never moved: the test does not exercise reorder");
    host_result h;
    to_host(&a, &h);
    for (int64_t r = 0; r < B; r++) {
      best_seq want = {.score = -INFINITY};
      int64_t seq[8];
      exhaustive(table, V, EOS, M, alphas[ai], pre[r], seq, 0, 0.0, &want);
      ck_assert_msg(h.len[r] == want.len, "alpha %g row %lld: length %lld, exhaustive %lld", alphas[ai], (long long)r,
                    (long long)h.len[r], (long long)want.len);
      ck_assert_msg(fabs(h.score[r] - want.score) < 1e-12, "alpha %g row %lld: score %.15g, exhaustive %.15g",
                    alphas[ai], (long long)r, h.score[r], want.score);
      for (int64_t i = 0; i < want.len; i++) ck_assert_int_eq(h.tok[r * h.L + i], want.tok[i]);
      for (int64_t i = want.len; i < h.L; i++) ck_assert_int_eq(h.tok[r * h.L + i], PAD);
      if (!seen_len[want.len]++) distinct_lengths++;
    }
    lt_generate_result_free(&a), lt_generate_result_free(&b);
    bigram_reset(&c);
  }
  /* the table makes both stops happen: some winners end at <eos>, some at max_new */
  ck_assert_msg(distinct_lengths >= 2, "every winner has the same length: the table does not test the stops");

  /* width 1 is greedy (alpha 0: the same sums) */
  lt_generate_opts o = lt_generate_defaults();
  o.max_new = 6, o.eos_id = EOS;
  bigram c = {.V = V, .table = table, .cache = true};
  lt_generate_result g = gen_run(&c, prefix, &o);
  bigram_reset(&c);
  o.strategy = LT_GENERATE_BEAM, o.beam_width = 1, o.length_penalty = 0.0;
  lt_generate_result b1 = gen_run(&c, prefix, &o);
  assert_same(&g, &b1, "beam width 1 vs greedy");
  lt_generate_result_free(&g), lt_generate_result_free(&b1);
  bigram_reset(&c);
  lt_tensor_free(prefix);
  free(table);
}
END_TEST

/* ======================================================================== */
/* Sampling against the truncated distribution                              */
/* ======================================================================== */

/* The distribution sampling draws from after token a: softmax(table[a] / T),
 * then the top k (k <= 0: all), then the smallest most-likely-first set whose
 * probability (within the top k) reaches p; renormalised. */
static void truncated(const double *table, int64_t V, int64_t a, double T, int64_t k, double p, double *q) {
  double l[64], s = 0;
  int64_t order[64];
  for (int64_t v = 0; v < V; v++) l[v] = table[a * V + v] / T, order[v] = v;
  for (int64_t i = 0; i < V; i++) /* order by probability, descending (the table has no ties) */
    for (int64_t j = i + 1; j < V; j++)
      if (l[order[j]] > l[order[i]]) {
        int64_t t = order[i];
        order[i] = order[j], order[j] = t;
      }
  const int64_t kk = k > 0 && k < V ? k : V;
  double mx = l[order[0]];
  for (int64_t v = 0; v < V; v++) q[v] = 0;
  for (int64_t i = 0; i < kk; i++) s += exp(l[order[i]] - mx);
  double cum = 0;
  int64_t keep = 0;
  while (keep < kk) {
    cum += exp(l[order[keep]] - mx) / s;
    keep++;
    if (cum >= p) break;
  }
  double z = 0;
  for (int64_t i = 0; i < keep; i++) z += exp(l[order[i]] - mx);
  for (int64_t i = 0; i < keep; i++) q[order[i]] = exp(l[order[i]] - mx) / z;
}

START_TEST(sampling_follows_truncated_distribution) {
  const int64_t V = 8, N = 20000, A = 3;
  double *table = make_table(V, 21, 1.0);
  int64_t *pre = malloc(sizeof *pre * (size_t)N);
  for (int64_t i = 0; i < N; i++) pre[i] = A;
  lt_tensor *prefix = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(N, 1), pre));
  struct {
    double T;
    int64_t k;
    double p;
  } cases[] = {{1.0, 0, 1.0}, {0.7, 3, 1.0}, {1.3, 0, 0.8}, {1.0, 5, 0.6}, {2.0, 1, 1.0}, {1.3, 0, 0}, {1.3, 0, 0}};
  /* the last two: top_p just below and just above the mass of the 2 most likely tokens (2, then 3 kept) */
  const int64_t top = 2;
  double q2[64], qa[64], c2 = 0; /* c2: the mass of the top 2 in the full softmax */
  truncated(table, V, A, 1.3, top, 1.0, q2);
  truncated(table, V, A, 1.3, 0, 1.0, qa);
  for (int64_t v = 0; v < V; v++)
    if (q2[v] > 0) c2 += qa[v];
  cases[5].p = c2 - 0.005, cases[6].p = c2 + 0.005;
  lt_generator *gen = lt_generator_new(99);
  int64_t *tok = malloc(sizeof *tok * (size_t)N);
  double *score = malloc(sizeof *score * (size_t)N);
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    lt_generate_opts o = lt_generate_defaults();
    o.strategy = LT_GENERATE_SAMPLE, o.temperature = cases[ci].T, o.top_k = cases[ci].k, o.top_p = cases[ci].p;
    o.gen = gen, o.max_new = 1, o.eos_id = -1;
    bigram c = {.V = V, .table = table, .cache = true};
    lt_generate_result r = gen_run(&c, prefix, &o);
    LT_ASSERT_SHAPE(r.tokens, N, 1);
    LT_OK_OR_FAIL(lt_tensor_read(r.tokens, LT_DTYPE_I64, tok, N));
    LT_OK_OR_FAIL(lt_tensor_read(r.scores, LT_DTYPE_F64, score, N));
    double q[64], count[64] = {0};
    truncated(table, V, A, cases[ci].T, cases[ci].k, cases[ci].p, q);
    int64_t kept = 0;
    for (int64_t v = 0; v < V; v++) kept += q[v] > 0;
    if (ci == 5 || ci == 6) ck_assert_int_eq(kept, ci == 5 ? top : top + 1); /* the reference agrees */
    for (int64_t i = 0; i < N; i++) {
      ck_assert(tok[i] >= 0 && tok[i] < V);
      count[tok[i]]++;
      /* the score is log p under the model, before temperature and truncation */
      ck_assert(fabs(score[i] - ref_logp(table, V, A, tok[i])) < 1e-12);
    }
    double tv = 0;
    for (int64_t v = 0; v < V; v++) {
      const double f = count[v] / (double)N, sd = sqrt(q[v] * (1 - q[v]) / (double)N);
      tv += 0.5 * fabs(f - q[v]);
      if (q[v] == 0) {
        ck_assert_msg(count[v] == 0, "T %g k %lld p %g: token %lld is outside the kept set but was drawn %g times",
                      cases[ci].T, (long long)cases[ci].k, cases[ci].p, (long long)v, count[v]);
      } else {
        ck_assert_msg(fabs(f - q[v]) <= 5 * sd + 1e-9,
                      "T %g k %lld p %g: token %lld drawn with frequency %.4f, expected %.4f (5 sd = %.4f)",
                      cases[ci].T, (long long)cases[ci].k, cases[ci].p, (long long)v, f, q[v], 5 * sd);
      }
    }
    ck_assert_msg(tv < 0.02, "T %g k %lld p %g: total variation %.4f from the truncated distribution", cases[ci].T,
                  (long long)cases[ci].k, cases[ci].p, tv);
    lt_generate_result_free(&r);
    bigram_reset(&c);
  }
  /* several steps: the same generator state gives the same tokens, cached or not; another state other tokens */
  lt_tensor *few = LT_NN(lt_narrow(prefix, 0, 0, 16));
  lt_generate_opts o = lt_generate_defaults();
  o.strategy = LT_GENERATE_SAMPLE, o.gen = gen, o.max_new = 12, o.eos_id = 2, o.top_p = 0.9;
  lt_generator_state s0 = lt_generator_get_state(gen);
  bigram c = {.V = V, .table = table, .cache = true}, nc = {.V = V, .table = table};
  lt_generate_result a = gen_run(&c, few, &o);
  LT_OK_OR_FAIL(lt_generator_set_state(gen, s0));
  lt_generate_result b = gen_run(&nc, few, &o);
  assert_same(&a, &b, "sampling, same seed, cached vs uncached");
  lt_generate_result d = gen_run(&nc, few, &o); /* the generator moved on */
  ck_assert(!lt_equal(a.tokens, d.tokens));
  lt_generate_result_free(&a), lt_generate_result_free(&b), lt_generate_result_free(&d);
  bigram_reset(&c);
  lt_tensor_free(few);
  lt_generator_free(gen);
  free(tok), free(score), free(pre);
  lt_tensor_free(prefix);
  free(table);
}
END_TEST

/* ======================================================================== */
/* Errors                                                                   */
/* ======================================================================== */

START_TEST(errors) {
  const int64_t V = 5;
  double *table = make_table(V, 3, 1.0);
  bigram b = {.V = V, .table = table};
  lt_generate_model m = as_model(&b);
  lt_tensor *prefix = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(2, 1), ((int64_t[]){1, 4})));
  lt_generate_opts o = lt_generate_defaults();
  o.max_new = 4;
  lt_generate_result r = {0};
  LT_EXPECT_ERR(lt_generate(NULL, prefix, &o, &r), LT_ERR_NULL, "model");
  lt_generate_model no_fn = m;
  no_fn.next_logits = NULL;
  LT_EXPECT_ERR(lt_generate(&no_fn, prefix, &o, &r), LT_ERR_NULL, "next_logits");
  LT_EXPECT_ERR(lt_generate(&m, NULL, &o, &r), LT_ERR_NULL, "prefix");
  LT_EXPECT_ERR(lt_generate(&m, prefix, &o, NULL), LT_ERR_NULL, "out");
  lt_generate_model v0 = m;
  v0.vocab_size = 0;
  LT_EXPECT_ERR(lt_generate(&v0, prefix, &o, &r), LT_ERR_INVALID, "vocab_size");
  /* prefixes: empty, 1-d, float, ids outside the vocabulary */
  lt_tensor *empty = LT_NN(lt_zeros(LT_DTYPE_I64, LT_SHAPE(2, 0)));
  LT_EXPECT_ERR(lt_generate(&m, empty, &o, &r), LT_ERR_SHAPE, "empty input");
  lt_tensor *flat = LT_NN(lt_zeros(LT_DTYPE_I64, LT_SHAPE(3)));
  LT_EXPECT_ERR(lt_generate(&m, flat, &o, &r), LT_ERR_SHAPE, "prefix");
  lt_tensor *fl = LT_NN(lt_to_dtype(prefix, LT_DTYPE_F32));
  LT_EXPECT_ERR(lt_generate(&m, fl, &o, &r), LT_ERR_DTYPE, "prefix");
  lt_tensor *big = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(1, 2), ((int64_t[]){1, 5})));
  LT_EXPECT_ERR(lt_generate(&m, big, &o, &r), LT_ERR_INVALID, "id 5 at flat index 1");
  /* options */
  o.pad_id = V;
  LT_EXPECT_ERR(lt_generate(&m, prefix, &o, &r), LT_ERR_INVALID, "pad");
  o = lt_generate_defaults(), o.max_new = -2;
  LT_EXPECT_ERR(lt_generate(&m, prefix, &o, &r), LT_ERR_INVALID, "max_new");
  o = lt_generate_defaults(), o.strategy = LT_GENERATE_BEAM, o.beam_width = 1025;
  LT_EXPECT_ERR(lt_generate(&m, prefix, &o, &r), LT_ERR_INVALID, "beam_width");
  o = lt_generate_defaults(), o.max_new = INT64_MAX - 1;
  LT_EXPECT_ERR(lt_generate(&m, prefix, &o, &r), LT_ERR_INVALID, "too large");
  o = lt_generate_defaults(), o.strategy = LT_GENERATE_SAMPLE, o.top_k = 2, o.top_p = 1.5;
  lt_generator *g = lt_generator_new(1);
  o.gen = g;
  LT_EXPECT_ERR(lt_generate(&m, prefix, &o, &r), LT_ERR_INVALID, "top_p");
  ck_assert_int_eq(b.calls, 0); /* options and prefixes are checked before the model is asked */
  /* the model's errors: its own status and message, the loop stops, nothing is returned */
  o = lt_generate_defaults();
  o.max_new = 4, o.eos_id = -1;
  b.fail_at = 3;
  LT_EXPECT_ERR(lt_generate(&m, prefix, &o, &r), LT_ERR_INVALID, "bigram: asked to fail");
  ck_assert_int_eq(b.calls, 3);
  b.fail_at = 0, b.calls = 0, b.bad_shape = true;
  LT_EXPECT_ERR(lt_generate(&m, prefix, &o, &r), LT_ERR_INVALID, "next_logits returned");
  /* NULL without an error of its own, after an older failure is still pending: told apart */
  b.bad_shape = false, b.silent_null = true;
  LT_EXPECT_ERR(lt_generate(&m, big, &o, &r), LT_ERR_INVALID, "outside the vocabulary"); /* leaves an error */
  LT_EXPECT_ERR(lt_generate(&m, prefix, &o, &r), LT_ERR_INVALID, "without an error");
  ck_assert(!r.tokens && !r.lengths && !r.scores);
  lt_generate_result_free(&r);
  lt_generator_free(g);
  LT_FREE_ALL(prefix, empty, flat, fl, big);
  free(table);
}
END_TEST

/* also_eos: each listed id stops a row as eos_id does (a config.json's list
 * of eos ids), for greedy and beam alike: the same result as with that id as
 * eos_id when the others never occur. */
START_TEST(also_eos_stops) {
  const int64_t V = 6, M = 9;
  double *table = make_table(V, 11, 1.5);
  lt_tensor *prefix = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(4, 2), ((int64_t[]){1, 3, 4, 5, 0, 0, 5, 2})));
  for (int beam = 0; beam < 2; beam++)
    for (int64_t stop = 0; stop < V; stop++) {
      lt_generate_opts one = lt_generate_defaults(), many = lt_generate_defaults();
      if (beam) one.strategy = many.strategy = LT_GENERATE_BEAM, one.beam_width = many.beam_width = 3;
      one.max_new = many.max_new = M;
      one.eos_id = stop;
      many.eos_id = -1, many.also_eos[0] = stop, many.n_also_eos = 1;
      bigram c = {.V = V, .table = table};
      lt_generate_result a = gen_run(&c, prefix, &one);
      bigram_reset(&c);
      lt_generate_result b = gen_run(&c, prefix, &many);
      bigram_reset(&c);
      assert_same(&a, &b, beam ? "beam: also_eos vs eos_id" : "greedy: also_eos vs eos_id");
      lt_generate_result_free(&a), lt_generate_result_free(&b);
    }
  /* the options are checked */
  bigram c = {.V = V, .table = table};
  lt_generate_model m = as_model(&c);
  lt_generate_result r = {0};
  lt_generate_opts o = lt_generate_defaults();
  o.n_also_eos = LT_GENERATE_MAX_EOS + 1;
  LT_EXPECT_ERR(lt_generate(&m, prefix, &o, &r), LT_ERR_INVALID, "n_also_eos 9");
  o.n_also_eos = 2, o.also_eos[0] = 1, o.also_eos[1] = V;
  LT_EXPECT_ERR(lt_generate(&m, prefix, &o, &r), LT_ERR_INVALID, "also_eos[1] 6");
  lt_clear_error();
  lt_tensor_free(prefix);
  free(table);
}
END_TEST

/* The strategy names: one table, round-tripping through the parser. */
START_TEST(strategy_names) {
  for (int k = LT_GENERATE_GREEDY; k <= LT_GENERATE_SAMPLE; k++) {
    lt_generate_strategy v = (lt_generate_strategy)-1;
    LT_OK_OR_FAIL(lt_generate_strategy_parse(lt_generate_strategy_name((lt_generate_strategy)k), &v));
    ck_assert_int_eq(v, k);
  }
  ck_assert_str_eq(lt_generate_strategy_name(LT_GENERATE_BEAM), "beam");
  ck_assert_str_eq(lt_generate_strategy_name((lt_generate_strategy)9), "unknown");
  lt_generate_strategy v = LT_GENERATE_BEAM;
  LT_EXPECT_ERR(lt_generate_strategy_parse("topk", &v), LT_ERR_INVALID,
                "unknown strategy 'topk' (one of: greedy, beam, sample)");
  ck_assert_int_eq(v, LT_GENERATE_BEAM);
  lt_clear_error();
}
END_TEST

int main(void) {
  Suite *s = suite_create("generate");
  TCase *tc = tcase_create("generate");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, greedy_matches_reference);
  tcase_add_test(tc, beam_wide_equals_exhaustive_search);
  tcase_add_test(tc, sampling_follows_truncated_distribution);
  tcase_add_test(tc, errors);
  tcase_add_test(tc, strategy_names);
  tcase_add_test(tc, also_eos_stops);
  suite_add_tcase(s, tc);
  return lt_test_run(s);
}
