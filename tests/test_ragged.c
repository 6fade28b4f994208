/*
 * tests/test_ragged.c: prompts of different lengths decoded as one
 * left-padded batch (lt_generate_left_pad, lt_tf_generate_opts.prompt_lens,
 * lt_tf_cache_set_left_pad; docs/decoding.md). For a GPT configuration
 * (learned positions, LayerNorm, GELU) and a Llama one (RoPE, RMSNorm,
 * SwiGLU, GQA) with random weights:
 *   - the logits of every real position of a padded batch, fed at once and
 *     then one column at a time through the KV cache, are within 3e-6 x (1 +
 *     the largest |logit|) of each row's own batch-1 decode;
 *   - greedy and beam search, cached and uncached: each row's tokens equal
 *     its batch-1 run token for token, and its score within 1e-4;
 *   - the same padded batch without prompt_lens differs (the test can fail);
 *   - refusals: lengths out of range or of the wrong shape, a ragged batch
 *     that does not fit the context, padding set on a cache in use, a batch
 *     of another size.
 * tests/reference/test_hf_transformers.py compares a ragged batch with
 * transformers' left-padded generate.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "libtensor_transformer.h"
#include "test_util.h"
#include "util_tfckpt.h"

enum { NP = 4, MAXP = 9, NEW = 10 };
static const int64_t LENS[NP] = {5, 1, 9, 3};
static const int64_t IDS[NP][MAXP] = {
    {3, 17, 5, 22, 8}, {11}, {7, 2, 19, 23, 4, 4, 9, 30, 12}, {1, 28, 6}};

static lt_tf_config config(bool llama) {
  lt_tf_config c = lt_tf_config_default(LT_TF_DECODER_ONLY);
  c.vocab_size = 31, c.d_model = 16, c.n_heads = 4, c.n_kv_heads = 4, c.n_dec_layers = 2, c.d_ff = 24;
  c.max_len = 32, c.dropout = 0.0, c.pad_id = -1;
  if (llama) {
    c.norm = LT_TF_RMS_NORM, c.act = LT_ACT_SILU, c.swiglu = true, c.pos = LT_TF_POS_ROPE, c.n_kv_heads = 2;
    c.tie_embeddings = false, c.bias = false, c.norm_eps = 1e-6;
  }
  return c;
}

/* Every parameter random (norm weights around 1): decisive logits, no ties. */
static lt_transformer *model(bool llama) {
  lt_tf_config c = config(llama);
  return LT_NNP(tfckpt_random_model(&c, llama ? 5 : 6));
}

static void padded(lt_tensor **x, lt_tensor **lens) {
  const int64_t *rows[NP];
  for (int b = 0; b < NP; b++) rows[b] = IDS[b];
  LT_OK_OR_FAIL(lt_generate_left_pad(NP, rows, LENS, 0, x, lens));
}

static lt_tensor *row_prompt(int b) { return LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){1, LENS[b]}, IDS[b])); }

/* max |x| over all elements. */
static double maxabs(const lt_tensor *a) {
  double *x = malloc(sizeof *x * (size_t)a->numel), m = 0;
  LT_OK_OR_FAIL(lt_tensor_read(a, LT_DTYPE_F64, x, a->numel));
  for (int64_t i = 0; i < a->numel; i++) m = fmax(m, fabs(x[i]));
  free(x);
  return m;
}

/* max |a - b| over all elements. */
static double maxdiff(const lt_tensor *a, const lt_tensor *b) {
  ck_assert_int_eq(a->numel, b->numel);
  double *x = malloc(sizeof *x * (size_t)a->numel), *y = malloc(sizeof *y * (size_t)b->numel), d = 0;
  LT_OK_OR_FAIL(lt_tensor_read(a, LT_DTYPE_F64, x, a->numel));
  LT_OK_OR_FAIL(lt_tensor_read(b, LT_DTYPE_F64, y, b->numel));
  for (int64_t i = 0; i < a->numel; i++) d = fmax(d, fabs(x[i] - y[i]));
  free(x), free(y);
  return d;
}

static void check_logits(bool llama) {
  lt_transformer *m = model(llama);
  lt_tensor *x, *lens;
  padded(&x, &lens);
  const int64_t P = x->shape[1], V = config(llama).vocab_size;
  int64_t pad[NP];
  for (int b = 0; b < NP; b++) pad[b] = P - LENS[b];
  bool prev = lt_set_grad_enabled(false);
  /* the prompt at once, then NEW columns one at a time (the batch-1 runs get the same columns) */
  lt_tf_cache *c = LT_NNP(lt_tf_cache_new(m, P + NEW));
  LT_OK_OR_FAIL(lt_tf_cache_set_left_pad(c, NP, pad));
  lt_tensor *first = LT_NN(lt_transformer_decode_step(m, c, x, NULL, NULL)); /* [NP, P, V] */
  int64_t next[NEW][NP];
  for (int s = 0; s < NEW; s++)
    for (int b = 0; b < NP; b++) next[s][b] = (7 * s + 3 * b + 1) % V;
  lt_tensor *steps[NEW];
  for (int s = 0; s < NEW; s++) {
    int64_t col[NP];
    for (int b = 0; b < NP; b++) col[b] = next[s][b];
    lt_tensor *t = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){NP, 1}, col));
    steps[s] = LT_NN(lt_transformer_decode_step(m, c, t, NULL, NULL)); /* [NP, 1, V] */
    lt_tensor_free(t);
  }
  double worst = 0, scale = 0;
  for (int b = 0; b < NP; b++) {
    int64_t seq[MAXP + NEW];
    memcpy(seq, IDS[b], sizeof *seq * (size_t)LENS[b]);
    for (int s = 0; s < NEW; s++) seq[LENS[b] + s] = next[s][b];
    lt_tensor *one = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){1, LENS[b] + NEW}, seq));
    lt_tensor *want = LT_NN(lt_transformer_decode(m, one, NULL, NULL, NULL, 0, NULL)); /* [1, len + NEW, V] */
    lt_tensor *fr = LT_NN(lt_narrow(first, 0, b, 1)), *got = LT_NN(lt_narrow(fr, 1, pad[b], LENS[b]));
    lt_tensor *w0 = LT_NN(lt_narrow(want, 1, 0, LENS[b]));
    /* f32 rounding of logits of this size: 3e-6 of the largest (the weights are N(0, 0.5^2): logits reach ~10-30) */
    const double tol = 3e-6 * (1.0 + maxabs(want)), d = maxdiff(got, w0);
    scale = fmax(scale, maxabs(want));
    worst = fmax(worst, d);
    ck_assert_msg(d <= tol, "%s row %d: prompt logits differ from its batch-1 decode by %.3g (limit %.3g)",
                  llama ? "llama" : "gpt", b, d, tol);
    for (int s = 0; s < NEW; s++) {
      lt_tensor *sr = LT_NN(lt_narrow(steps[s], 0, b, 1)), *ws = LT_NN(lt_narrow(want, 1, LENS[b] + s, 1));
      const double e = maxdiff(sr, ws);
      worst = fmax(worst, e);
      ck_assert_msg(e <= tol, "%s row %d step %d: logits differ by %.3g (limit %.3g)", llama ? "llama" : "gpt", b, s, e,
                    tol);
      LT_FREE_ALL(sr, ws);
    }
    LT_FREE_ALL(one, want, fr, got, w0);
  }
  printf("test_ragged %s: logits of a left-padded batch (lengths 5, 1, 9, 3) against each row alone: max |diff| "
         "%.2e (largest |logit| %.1f)\n", llama ? "llama" : "gpt", worst, scale);
  for (int s = 0; s < NEW; s++) lt_tensor_free(steps[s]);
  lt_set_grad_enabled(prev);
  lt_tf_cache_free(c);
  LT_FREE_ALL(first, x, lens);
  lt_transformer_free(m);
}

START_TEST(logits_gpt) { check_logits(false); }
END_TEST
START_TEST(logits_llama) { check_logits(true); }
END_TEST

/* Each row's tokens and score, batched and alone, for a strategy. */
static void check_generate(bool llama, lt_generate_strategy strategy, bool no_cache) {
  lt_transformer *m = model(llama);
  lt_tensor *x, *lens;
  padded(&x, &lens);
  lt_generate_opts o = lt_generate_defaults();
  o.strategy = strategy, o.max_new = NEW, o.eos_id = -1, o.beam_width = 3;
  lt_tf_generate_opts tf = lt_tf_generate_defaults();
  tf.no_cache = no_cache, tf.prompt_lens = lens;
  lt_generate_result r = {0};
  LT_OK_OR_FAIL(lt_transformer_generate(m, NULL, NULL, x, &o, &tf, &r));
  ck_assert_int_eq(r.tokens->shape[0], NP);
  ck_assert_int_eq(r.tokens->shape[1], NEW);
  int64_t got[NP * NEW];
  double sc[NP];
  LT_OK_OR_FAIL(lt_tensor_read(r.tokens, LT_DTYPE_I64, got, NP * NEW));
  LT_OK_OR_FAIL(lt_tensor_read(r.scores, LT_DTYPE_F64, sc, NP));
  for (int b = 0; b < NP; b++) {
    lt_tensor *p = row_prompt(b);
    lt_tf_generate_opts t1 = tf;
    t1.prompt_lens = NULL;
    lt_generate_result r1 = {0};
    LT_OK_OR_FAIL(lt_transformer_generate(m, NULL, NULL, p, &o, &t1, &r1));
    int64_t want[NEW];
    double s1;
    LT_OK_OR_FAIL(lt_tensor_read(r1.tokens, LT_DTYPE_I64, want, NEW));
    LT_OK_OR_FAIL(lt_tensor_read(r1.scores, LT_DTYPE_F64, &s1, 1));
    for (int i = 0; i < NEW; i++)
      ck_assert_msg(got[b * NEW + i] == want[i], "%s %s%s row %d (length %lld): token %d is %lld batched, %lld alone",
                    llama ? "llama" : "gpt", lt_generate_strategy_name(strategy), no_cache ? " no-cache" : "", b,
                    (long long)LENS[b], i, (long long)got[b * NEW + i], (long long)want[i]);
    ck_assert_msg(fabs(sc[b] - s1) <= 1e-4, "row %d: score %.9g batched, %.9g alone", b, sc[b], s1);
    lt_generate_result_free(&r1);
    lt_tensor_free(p);
  }
  lt_generate_result_free(&r);
  if (strategy == LT_GENERATE_GREEDY && !no_cache) { /* the same batch read as unpadded: some row differs */
    tf.prompt_lens = NULL;
    LT_OK_OR_FAIL(lt_transformer_generate(m, NULL, NULL, x, &o, &tf, &r));
    int64_t plain[NP * NEW];
    LT_OK_OR_FAIL(lt_tensor_read(r.tokens, LT_DTYPE_I64, plain, NP * NEW));
    ck_assert_msg(memcmp(plain, got, sizeof got) != 0, "the padding changed nothing: the test could not fail");
    lt_generate_result_free(&r);
  }
  LT_FREE_ALL(x, lens);
  lt_transformer_free(m);
}

START_TEST(greedy_rows_equal_alone) {
  for (int llama = 0; llama < 2; llama++) {
    check_generate(llama, LT_GENERATE_GREEDY, false);
    check_generate(llama, LT_GENERATE_GREEDY, true);
  }
}
END_TEST

START_TEST(beam_rows_equal_alone) {
  for (int llama = 0; llama < 2; llama++) check_generate(llama, LT_GENERATE_BEAM, false);
}
END_TEST

START_TEST(left_pad_helper) {
  lt_tensor *x, *lens;
  padded(&x, &lens);
  ck_assert_int_eq(x->shape[0], NP);
  ck_assert_int_eq(x->shape[1], MAXP);
  int64_t v[NP * MAXP], l[NP];
  LT_OK_OR_FAIL(lt_tensor_read(x, LT_DTYPE_I64, v, NP * MAXP));
  LT_OK_OR_FAIL(lt_tensor_read(lens, LT_DTYPE_I64, l, NP));
  for (int b = 0; b < NP; b++) {
    ck_assert_int_eq(l[b], LENS[b]);
    for (int t = 0; t < MAXP; t++)
      ck_assert_int_eq(v[b * MAXP + t], t < MAXP - LENS[b] ? 0 : IDS[b][t - (MAXP - LENS[b])]);
  }
  LT_FREE_ALL(x, lens);
  const int64_t *rows[2] = {IDS[0], IDS[1]};
  const int64_t bad[2] = {3, 0};
  LT_EXPECT_ERR(lt_generate_left_pad(2, rows, bad, 0, &x, &lens), LT_ERR_INVALID, "prompt 1");
  ck_assert_ptr_null(x);
  ck_assert_ptr_null(lens);
  LT_EXPECT_ERR(lt_generate_left_pad(0, rows, LENS, 0, &x, &lens), LT_ERR_INVALID, "B 0");
  LT_EXPECT_ERR(lt_generate_left_pad(2, NULL, LENS, 0, &x, &lens), LT_ERR_NULL, "rows");
}
END_TEST

START_TEST(refusals) {
  lt_transformer *m = model(false);
  lt_tensor *x, *lens;
  padded(&x, &lens);
  lt_generate_opts o = lt_generate_defaults();
  o.max_new = NEW, o.eos_id = -1;
  lt_tf_generate_opts tf = lt_tf_generate_defaults();
  lt_generate_result r = {0};
  /* a length outside [1, P] */
  int64_t l0[NP] = {5, 0, 9, 3}, l1[NP] = {5, 1, 10, 3};
  lt_tensor *b0 = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, 1, (int64_t[]){NP}, l0));
  lt_tensor *b1 = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, 1, (int64_t[]){NP}, l1));
  lt_tensor *b2 = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, 1, (int64_t[]){NP - 1}, l1));
  tf.prompt_lens = b0;
  LT_EXPECT_ERR(lt_transformer_generate(m, NULL, NULL, x, &o, &tf, &r), LT_ERR_INVALID, "prompt_lens[1] = 0");
  tf.prompt_lens = b1;
  LT_EXPECT_ERR(lt_transformer_generate(m, NULL, NULL, x, &o, &tf, &r), LT_ERR_INVALID, "prompt_lens[2] = 10");
  tf.prompt_lens = b2;
  LT_EXPECT_ERR(lt_transformer_generate(m, NULL, NULL, x, &o, &tf, &r), LT_ERR_SHAPE, "prompt_lens");
  ck_assert_ptr_null(r.tokens);
  /* a ragged batch that does not fit the context */
  tf.prompt_lens = lens, tf.context = MAXP + NEW - 2;
  LT_EXPECT_ERR(lt_transformer_generate(m, NULL, NULL, x, &o, &tf, &r), LT_ERR_INVALID, "context");
  /* the cache: padding on a cache in use, out of range, a batch of another size */
  bool prev = lt_set_grad_enabled(false);
  lt_tf_cache *c = LT_NNP(lt_tf_cache_new(m, 16));
  const int64_t pad[NP] = {4, 8, 0, 6}, far[NP] = {4, 16, 0, 6};
  LT_EXPECT_ERR(lt_tf_cache_set_left_pad(c, NP, far), LT_ERR_INVALID, "row 1");
  LT_OK_OR_FAIL(lt_tf_cache_set_left_pad(c, NP, pad));
  lt_tensor *two = LT_NN(lt_narrow(x, 0, 0, 2)), *twoc = LT_NN(lt_contiguous(two));
  LT_EXPECT_NULL_ERR(lt_transformer_decode_step(m, c, twoc, NULL, NULL), LT_ERR_SHAPE, "left padding");
  ck_assert_int_eq(lt_tf_cache_len(c), 0);
  lt_tensor *y = LT_NN(lt_transformer_decode_step(m, c, x, NULL, NULL));
  LT_EXPECT_ERR(lt_tf_cache_set_left_pad(c, NP, pad), LT_ERR_INVALID, "holds 9 positions");
  lt_tf_cache_reset(c); /* keeps the padding: the same batch again gives the same logits */
  lt_tensor *y2 = LT_NN(lt_transformer_decode_step(m, c, x, NULL, NULL));
  ck_assert(maxdiff(y, y2) == 0.0);
  lt_set_grad_enabled(prev);
  lt_tf_cache_free(c);
  LT_FREE_ALL(b0, b1, b2, two, twoc, y, y2, x, lens);
  lt_transformer_free(m);
}
END_TEST

int main(void) {
  Suite *s = suite_create("ragged");
  LT_TEST_CASE(s, "core", 300, logits_gpt, logits_llama, greedy_rows_equal_alone, beam_rows_equal_alone,
               left_pad_helper, refusals);
  return lt_test_run(s);
}
