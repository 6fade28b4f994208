/*
 * tests/test_decode.c: generating with the Transformer (lt_transformer_generate,
 * models/transformer/generate.c, on the loop of generate/generate.c), the KV cache
 * (nn/mha.c lt_mha_forward_cached, transformer.c lt_transformer_decode_step)
 * and the `generate` program.
 *
 * The central check: for every architecture that generates (the
 * encoder-decoder; decoder-only with learned positions; decoder-only with
 * RoPE, GQA, RMSNorm and SwiGLU) and every strategy (greedy, beam search,
 * sampling with temperature + top-k + top-p), the cached path makes exactly
 * the same tokens as the uncached one and scores within 1e-5. Then the
 * strategies' own properties (beam width 1 = greedy, top_k 1 = greedy,
 * sampling reproducible by seed, stop at <eos>, max_new, the context window,
 * beam scores equal to teacher-forced sums), the error paths, and the program
 * end to end on checkpoints written here through the library's save API.
 * Models are small and randomly initialised: equivalence needs no training.
 */
#include "checkpoint/checkpoint.h"
#include "datasets/datasets.h"
#include "models/transformer/config.h"
#include "models/transformer/generate.h"
#include "test_util.h"
#include "util_tfckpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

enum { ARCH_ENCDEC, ARCH_GPT, ARCH_ROPE_GQA, N_ARCH };
static const char *const ARCH_NAMES[] = {"encoder-decoder", "decoder-only (learned positions)",
                                         "decoder-only (RoPE, GQA 4/2 heads, RMSNorm, SwiGLU)"};

static lt_tf_config tiny_config(int arch, int64_t V) {
  lt_tf_config c = lt_tf_config_default(arch == ARCH_ENCDEC ? LT_TF_ENCODER_DECODER : LT_TF_DECODER_ONLY);
  c.vocab_size = V, c.d_model = 16, c.n_heads = 2, c.n_kv_heads = 2, c.d_ff = 32, c.max_len = 24;
  c.n_enc_layers = arch == ARCH_ENCDEC ? 2 : 0;
  c.n_dec_layers = 2;
  if (arch == ARCH_ROPE_GQA) {
    c.n_heads = 4, c.n_kv_heads = 2, c.pos = LT_TF_POS_ROPE, c.norm = LT_TF_RMS_NORM;
    c.swiglu = true, c.act = LT_ACT_SILU, c.tie_embeddings = false, c.bias = false;
  }
  return c;
}

static lt_transformer *tiny_model(int arch, int64_t V, uint64_t seed) {
  lt_tf_config c = tiny_config(arch, V);
  lt_generator *g = lt_generator_new(seed);
  lt_transformer *m = lt_transformer_new(&c, g);
  lt_generator_free(g);
  ck_assert_msg(m != NULL, "%s", lt_last_error());
  return m;
}

/* The input of arch: sources [3, 5] with padding for the encoder-decoder, a
 * prompt [3, 4] for the decoder-only models. */
static void make_input(int arch, lt_tensor **src, lt_tensor **pad, lt_tensor **prompt) {
  *src = *pad = *prompt = NULL;
  if (arch == ARCH_ENCDEC) {
    int64_t ids[] = {4, 5, 6, 7, 8, 9, 10, 4, 0, 0, 5, 12, 5, 11, 5};
    bool p[] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0};
    *src = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(3, 5), ids));
    *pad = LT_NN(lt_tensor_from_copy(LT_DTYPE_BOOL, LT_SHAPE(3, 5), p));
  } else {
    int64_t ids[] = {4, 5, 6, 7, 7, 8, 9, 3, 12, 11, 10, 9};
    *prompt = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(3, 4), ids));
  }
}

static lt_status reseed(lt_generator *g, uint64_t seed) {
  return lt_generator_set_state(g, (lt_generator_state){.seed = seed, .offset = 0});
}

static void free3(lt_tensor *a, lt_tensor *b, lt_tensor *c) {
  lt_tensor_free(a), lt_tensor_free(b), lt_tensor_free(c);
}

/* lt_transformer_generate, failing the test on error (tf NULL: the defaults, cache on). */
static lt_generate_result run(const lt_transformer *m, const lt_tensor *src, const lt_tensor *pad,
                              const lt_tensor *prompt, const lt_generate_opts *o, const lt_tf_generate_opts *tf) {
  lt_generate_result r = {0};
  LT_OK_OR_FAIL(lt_transformer_generate(m, src, pad, prompt, o, tf, &r));
  ck_assert(r.tokens && r.lengths && r.scores);
  return r;
}

static void assert_same_result(const lt_generate_result *a, const lt_generate_result *b, const char *what) {
  ck_assert_msg(lt_equal(a->tokens, b->tokens), "%s: tokens differ", what);
  ck_assert_msg(lt_equal(a->lengths, b->lengths), "%s: lengths differ", what);
  LT_ASSERT_CLOSE(a->scores, b->scores, 0.0, 1e-5);
}

static lt_generate_opts strategy_opts(int s, lt_generator *g) {
  lt_generate_opts o = lt_generate_defaults();
  o.max_new = 12;
  if (s == 1) o.strategy = LT_GENERATE_BEAM, o.beam_width = 3, o.length_penalty = 0.7;
  if (s == 2) o.strategy = LT_GENERATE_SAMPLE, o.temperature = 0.9, o.top_k = 8, o.top_p = 0.9, o.gen = g;
  return o;
}

/* ======================================================================== */

/* The attention the cache tests run: C 16, GQA (4 query heads, 2 kv heads)
 * with RoPE, its parameters in p; returns an input [B, T, 16] (new). */
static lt_tensor *gqa_rope(lt_params *p, lt_generator *g, lt_mha *m, bool bias, int64_t B, int64_t T) {
  LT_OK_OR_FAIL(lt_mha_init(m, p, "attn", 16, 4, 2, bias, 0.0, g));
  m->rope = true;
  return LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(B, T, 16)));
}

START_TEST(mha_cached_steps_match_full_forward) {
  /* prefill 3 positions, then 1 at a time */
  lt_params *p = lt_params_new();
  lt_generator *g = lt_generator_new(5);
  lt_mha m;
  const int64_t B = 2, T = 7;
  lt_tensor *x = gqa_rope(p, g, &m, true, B, T);
  bool prev = lt_set_grad_enabled(false);
  lt_attention_opts causal = {.causal = true};
  lt_tensor *full = LT_NN(lt_mha_forward(&m, x, x, &causal, 0, NULL, NULL)); /* [B, T, C] */
  lt_kv_cache c;
  LT_OK_OR_FAIL(lt_kv_cache_init(&c, T));
  for (int64_t t0 = 0; t0 < T;) {
    const int64_t n = t0 == 0 ? 3 : 1;
    lt_tensor *xs = LT_NN(lt_narrow(x, 1, t0, n));
    lt_tensor *y = LT_NN(lt_mha_forward_cached(&m, xs, xs, &c, &causal, t0));
    lt_tensor *want = LT_NN(lt_narrow(full, 1, t0, n));
    LT_ASSERT_CLOSE(y, want, 1e-5, 1e-5);
    ck_assert_int_eq(c.len, t0 + n);
    free3(xs, y, want);
    t0 += n;
  }
  /* full: no room; the cache is unchanged */
  lt_tensor *x1 = LT_NN(lt_narrow(x, 1, 0, 1));
  LT_EXPECT_NULL_ERR(lt_mha_forward_cached(&m, x1, x1, &c, &causal, T), LT_ERR_INVALID, "no room");
  ck_assert_int_eq(c.len, T);
  /* another batch size */
  lt_tensor *x3 = LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(3, 1, 16)));
  LT_EXPECT_NULL_ERR(lt_mha_forward_cached(&m, x3, NULL, &c, NULL, 0), LT_ERR_SHAPE, "batch");
  /* reorder: swap the two rows; attending with x_kv NULL reads the cache only */
  lt_tensor *rows = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(2), ((int64_t[]){1, 0})));
  lt_tensor *q = LT_NN(lt_narrow(x, 1, T - 1, 1));
  lt_tensor *before = LT_NN(lt_mha_forward_cached(&m, q, NULL, &c, NULL, T - 1));
  LT_OK_OR_FAIL(lt_kv_cache_reorder(&c, rows));
  lt_tensor *qs = LT_NN(lt_index_select(q, 0, rows));
  lt_tensor *after = LT_NN(lt_mha_forward_cached(&m, qs, NULL, &c, NULL, T - 1));
  lt_tensor *want = LT_NN(lt_index_select(before, 0, rows));
  LT_ASSERT_CLOSE(after, want, 0.0, 0.0);
  lt_tensor *bad = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(1), ((int64_t[]){5})));
  ck_assert(lt_kv_cache_reorder(&c, bad) != LT_OK);
  ck_assert_int_eq(c.k->shape[0], 2);
  /* empty cache and no new keys */
  lt_kv_cache e;
  LT_OK_OR_FAIL(lt_kv_cache_init(&e, 4));
  LT_EXPECT_NULL_ERR(lt_mha_forward_cached(&m, q, NULL, &e, NULL, 0), LT_ERR_INVALID, "no keys");
  LT_EXPECT_ERR(lt_kv_cache_init(&e, 0), LT_ERR_INVALID, "cap");
  lt_set_grad_enabled(prev);
  lt_kv_cache_free(&c);
  lt_kv_cache_free(&e);
  lt_kv_cache_free(NULL);
  lt_tensor *ts[] = {x, full, x1, x3, rows, q, before, qs, after, want, bad};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) lt_tensor_free(ts[i]);
  lt_generator_free(g);
  lt_params_free(p);
}
END_TEST

/* A sliding window's cache (Mistral's): steps of 1 and chunks shorter and
 * longer than the window, with left padding over every position, against
 * the whole sequence with the window; the cache keeps about 2W rows (its
 * first position moves on), one window per cache, beam reordering. */
START_TEST(mha_window_cache) {
  lt_params *p = lt_params_new();
  lt_generator *g = lt_generator_new(9);
  lt_mha m;
  const int64_t B = 2, T = 61, W = 5;
  lt_tensor *x = gqa_rope(p, g, &m, false, B, T);
  lt_tensor *pad = LT_NN(lt_zeros(LT_DTYPE_BOOL, LT_SHAPE(B, T)));
  ((bool *)pad->data)[T + 0] = ((bool *)pad->data)[T + 1] = true; /* row 1: two positions of left padding */
  bool prev = lt_set_grad_enabled(false);
  const lt_attention_opts whole = {.causal = true, .window = W, .key_padding_mask = pad};
  lt_tensor *full = LT_NN(lt_mha_forward(&m, x, x, &whole, 0, NULL, NULL));
  const int64_t chunks[] = {3, 1, 1, 9, 1, 1, 1, 2, 1, 12, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                            1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  lt_kv_cache c;
  LT_OK_OR_FAIL(lt_kv_cache_init(&c, T));
  int64_t t0 = 0, most = 0, bound = 0;
  for (size_t i = 0; i < sizeof chunks / sizeof chunks[0] && t0 < T; i++) {
    const int64_t n = chunks[i];
    lt_tensor *xs = LT_NN(lt_narrow(x, 1, t0, n));
    lt_tensor *kp = LT_NN(lt_narrow(pad, 1, 0, t0 + n));
    const lt_attention_opts o = {.causal = true, .window = W, .key_padding_mask = kp};
    lt_tensor *y = LT_NN(lt_mha_forward_cached(&m, xs, xs, &c, &o, t0));
    lt_tensor *want = LT_NN(lt_narrow(full, 1, t0, n));
    LT_ASSERT_CLOSE(y, want, 1e-5, 1e-5);
    ck_assert_int_eq(c.len, t0 + n);
    const int64_t rows = c.k->shape[2], need = 2 * W > W - 1 + n ? 2 * W : W - 1 + n;
    if (need > bound) bound = need; /* the buffers never shrink */
    ck_assert_msg(rows <= bound, "step at %lld (+%lld): %lld rows, more than %lld", (long long)t0, (long long)n,
                  (long long)rows, (long long)bound);
    if (rows > most) most = rows;
    LT_FREE_ALL(xs, kp, y, want);
    t0 += n;
  }
  ck_assert_int_eq(t0, T);
  ck_assert_int_eq(most, W - 1 + 12); /* the 12-position chunk; otherwise 2W */
  ck_assert_int_eq(c.k->shape[2], W - 1 + 12); /* buffers grow for a chunk only, and are then reused */
  ck_assert(c.off > 0 && c.len - c.off <= c.k->shape[2]);
  /* one window per cache; a padding mask must cover every position */
  lt_kv_cache c2;
  LT_OK_OR_FAIL(lt_kv_cache_init(&c2, T));
  lt_tensor *x1 = LT_NN(lt_narrow(x, 1, 0, 1));
  const lt_attention_opts w4 = {.causal = true, .window = 4}, w5 = {.causal = true, .window = W};
  lt_tensor *y1 = LT_NN(lt_mha_forward_cached(&m, x1, x1, &c2, &w5, 0));
  LT_EXPECT_NULL_ERR(lt_mha_forward_cached(&m, x1, x1, &c2, &w4, 1), LT_ERR_INVALID, "one window per cache");
  const lt_attention_opts badpad = {.causal = true, .window = W, .key_padding_mask = pad};
  LT_EXPECT_NULL_ERR(lt_mha_forward_cached(&m, x1, x1, &c2, &badpad, 1), LT_ERR_SHAPE, "every position");
  ck_assert_int_eq(c2.len, 1);
  /* beam search: rows swapped, the window's buffers follow */
  lt_tensor *rows = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(2), ((int64_t[]){1, 0})));
  lt_tensor *q = LT_NN(lt_narrow(x, 1, T - 1, 1));
  lt_tensor *before = LT_NN(lt_mha_forward_cached(&m, q, NULL, &c, &w5, T - 1));
  LT_OK_OR_FAIL(lt_kv_cache_reorder(&c, rows));
  lt_tensor *qs = LT_NN(lt_index_select(q, 0, rows));
  lt_tensor *after = LT_NN(lt_mha_forward_cached(&m, qs, NULL, &c, &w5, T - 1));
  lt_tensor *swapped = LT_NN(lt_index_select(before, 0, rows));
  LT_ASSERT_CLOSE(after, swapped, 0.0, 0.0);
  lt_set_grad_enabled(prev);
  lt_kv_cache_free(&c);
  lt_kv_cache_free(&c2);
  ck_assert(c.len == 0 && c.off == 0 && c.window == 0);
  LT_FREE_ALL(x, pad, full, x1, y1, rows, q, before, qs, after, swapped);
  lt_generator_free(g);
  lt_params_free(p);
}
END_TEST

START_TEST(decode_step_matches_decode) {
  for (int arch = 0; arch < N_ARCH; arch++) {
    const int64_t V = 13;
    lt_transformer *m = tiny_model(arch, V, 11);
    lt_tensor *src, *pad, *prompt;
    make_input(arch, &src, &pad, &prompt);
    int64_t ids[] = {1, 4, 9, 5, 12, 7, 1, 6, 6, 2, 3, 8, 1, 11, 10, 9, 4, 4};
    lt_tensor *tgt = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(3, 6), ids));
    bool prev = lt_set_grad_enabled(false);
    lt_tensor *mem = src ? LT_NN(lt_transformer_encode(m, src, pad, NULL)) : NULL;
    lt_tensor *full = LT_NN(lt_transformer_decode(m, tgt, NULL, mem, pad, 0, NULL)); /* [3, 6, V] */
    lt_tf_cache *c = lt_tf_cache_new(m, 6);
    ck_assert_msg(c != NULL, "%s", lt_last_error());
    for (int64_t t0 = 0; t0 < 6;) {
      const int64_t n = t0 == 0 ? 2 : 1;
      lt_tensor *v = LT_NN(lt_narrow(tgt, 1, t0, n));
      lt_tensor *step = LT_NN(lt_contiguous(v));
      /* the memory is read at the first step only */
      lt_tensor *y = LT_NN(lt_transformer_decode_step(m, c, step, t0 == 0 ? mem : NULL, pad));
      lt_tensor *want = LT_NN(lt_narrow(full, 1, t0, n));
      LT_ASSERT_CLOSE(y, want, 1e-5, 1e-5);
      ck_assert_int_eq(lt_tf_cache_len(c), t0 + n);
      lt_tensor_free(v);
      free3(step, y, want);
      t0 += n;
    }
    /* only the last position through the head: [3, V], the last column of
     * the full logits, from an empty cache (a prefill) and then one step */
    lt_tf_cache_reset(c);
    lt_tensor *pre = LT_NN(lt_narrow(tgt, 1, 0, 5)), *pre_c = LT_NN(lt_contiguous(pre));
    lt_tensor *last = LT_NN(lt_transformer_decode_step_last(m, c, pre_c, mem, pad));
    ck_assert_int_eq(last->ndim, 2);
    ck_assert_int_eq(last->shape[0], 3);
    ck_assert_int_eq(last->shape[1], V);
    lt_tensor *want5 = LT_NN(lt_select(full, 1, 4));
    LT_ASSERT_CLOSE(last, want5, 1e-5, 1e-5);
    ck_assert_int_eq(lt_tf_cache_len(c), 5);
    lt_tensor *six = LT_NN(lt_narrow(tgt, 1, 5, 1)), *six_c = LT_NN(lt_contiguous(six));
    lt_tensor *last6 = LT_NN(lt_transformer_decode_step_last(m, c, six_c, NULL, pad));
    lt_tensor *want6 = LT_NN(lt_select(full, 1, 5));
    LT_ASSERT_CLOSE(last6, want6, 1e-5, 1e-5);
    free3(pre, pre_c, last);
    free3(want5, six, six_c);
    lt_tensor_free(last6), lt_tensor_free(want6);
    /* full cache: an error, and the cache is unchanged */
    lt_tensor *one = LT_NN(lt_narrow(tgt, 1, 0, 1));
    lt_tensor *one_c = LT_NN(lt_contiguous(one));
    LT_EXPECT_NULL_ERR(lt_transformer_decode_step(m, c, one_c, mem, pad), LT_ERR_INVALID, "no room");
    ck_assert_int_eq(lt_tf_cache_len(c), 6);
    lt_tf_cache_reset(c);
    ck_assert_int_eq(lt_tf_cache_len(c), 0);
    if (arch == ARCH_ENCDEC)
      LT_EXPECT_NULL_ERR(lt_transformer_decode_step(m, c, one_c, NULL, pad), LT_ERR_NULL, "memory");
    lt_set_grad_enabled(prev);
    lt_tf_cache_free(c);
    free3(src, pad, prompt);
    free3(tgt, mem, full);
    lt_tensor_free(one), lt_tensor_free(one_c);
    lt_transformer_free(m);
  }
  /* cache errors */
  lt_transformer *m = tiny_model(ARCH_GPT, 13, 1);
  LT_EXPECT_NULL_ERR((lt_tensor *)lt_tf_cache_new(m, 25), LT_ERR_INVALID, "max_len");
  LT_EXPECT_NULL_ERR((lt_tensor *)lt_tf_cache_new(NULL, 4), LT_ERR_NULL, "model");
  LT_EXPECT_NULL_ERR(lt_transformer_decode_step(m, NULL, NULL, NULL, NULL), LT_ERR_NULL, "cache");
  LT_EXPECT_NULL_ERR(lt_transformer_decode_step_last(m, NULL, NULL, NULL, NULL), LT_ERR_NULL, "cache");
  lt_tf_cache_free(NULL);
  lt_transformer_free(m);
}
END_TEST

START_TEST(cached_equals_uncached_every_arch_and_strategy) {
  static const char *const SNAMES[] = {"greedy", "beam 3", "sample"};
  for (int arch = 0; arch < N_ARCH; arch++) {
    const int64_t V = 13;
    lt_transformer *m = tiny_model(arch, V, 100 + (uint64_t)arch);
    lt_tensor *src, *pad, *prompt;
    make_input(arch, &src, &pad, &prompt);
    for (int s = 0; s < 3; s++) {
      lt_generator *g = lt_generator_new(42);
      lt_generate_opts o = strategy_opts(s, g);
      lt_generate_result a = run(m, src, pad, prompt, &o, NULL);
      LT_OK_OR_FAIL(reseed(g, 42));
      lt_tf_generate_opts nc = lt_tf_generate_defaults();
      nc.no_cache = true;
      lt_generate_result b = run(m, src, pad, prompt, &o, &nc);
      char what[128];
      snprintf(what, sizeof what, "%s, %s", ARCH_NAMES[arch], SNAMES[s]);
      assert_same_result(&a, &b, what);
      /* well formed: lengths in [1, max_new], tokens in the vocabulary, pad after <eos> */
      int64_t len[3], tok[3 * 12];
      const int64_t L = a.tokens->shape[1];
      ck_assert(L >= 1 && L <= 12 && a.tokens->shape[0] == 3);
      LT_OK_OR_FAIL(lt_tensor_read(a.lengths, LT_DTYPE_I64, len, 3));
      LT_OK_OR_FAIL(lt_tensor_read(a.tokens, LT_DTYPE_I64, tok, 3 * L));
      for (int64_t r = 0; r < 3; r++) {
        ck_assert(len[r] >= 1 && len[r] <= L);
        for (int64_t i = 0; i < L; i++) {
          ck_assert(tok[r * L + i] >= 0 && tok[r * L + i] < V);
          if (i >= len[r]) ck_assert_int_eq(tok[r * L + i], o.pad_id);
          if (i < len[r] - 1) ck_assert_int_ne(tok[r * L + i], o.eos_id);
        }
        if (len[r] < 12) ck_assert_int_eq(tok[r * L + len[r] - 1], o.eos_id);
      }
      lt_generate_result_free(&a);
      lt_generate_result_free(&b);
      lt_generator_free(g);
    }
    free3(src, pad, prompt);
    lt_transformer_free(m);
  }
}
END_TEST

/* Teacher forcing: sum of log p of tokens[0..len) after the row's prefix. */
static double forced_logp(const lt_transformer *m, const lt_tensor *src1, const lt_tensor *pad1,
                          const int64_t *prefix, int64_t P, const int64_t *tok, int64_t len) {
  int64_t in[64];
  memcpy(in, prefix, sizeof *in * (size_t)P);
  memcpy(in + P, tok, sizeof *in * (size_t)(len - 1));
  const int64_t T = P + len - 1;
  bool prev = lt_set_grad_enabled(false);
  lt_scope *s = lt_scope_begin();
  lt_tensor *x = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(1, T), in));
  lt_tensor *mem = src1 ? LT_NN(lt_transformer_encode(m, src1, pad1, NULL)) : NULL;
  lt_tensor *lp = LT_NN(lt_log_softmax(LT_NN(lt_transformer_decode(m, x, NULL, mem, pad1, 0, NULL)), -1));
  const int64_t V = lp->shape[2];
  double *v = malloc(sizeof *v * (size_t)(T * V)), sum = 0;
  LT_OK_OR_FAIL(lt_tensor_read(lp, LT_DTYPE_F64, v, T * V));
  for (int64_t i = 0; i < len; i++) sum += v[(P - 1 + i) * V + tok[i]];
  free(v);
  lt_scope_end(s);
  lt_set_grad_enabled(prev);
  return sum;
}

START_TEST(strategy_properties) {
  const int64_t V = 13;
  for (int arch = 0; arch < N_ARCH; arch++) {
    lt_transformer *m = tiny_model(arch, V, 7 + (uint64_t)arch);
    lt_tensor *src, *pad, *prompt;
    make_input(arch, &src, &pad, &prompt);
    lt_generator *g = lt_generator_new(3);
    lt_generate_opts o = strategy_opts(0, g);
    lt_generate_result greedy = run(m, src, pad, prompt, &o, NULL);
    /* beam width 1 = greedy (tokens) */
    o.strategy = LT_GENERATE_BEAM, o.beam_width = 1, o.length_penalty = 0.0;
    lt_generate_result b1 = run(m, src, pad, prompt, &o, NULL);
    ck_assert_msg(lt_equal(b1.tokens, greedy.tokens), "%s: beam width 1 differs from greedy", ARCH_NAMES[arch]);
    LT_ASSERT_CLOSE(b1.scores, greedy.scores, 0.0, 1e-9); /* alpha 0: the same sums */
    /* top_k 1 = greedy, whatever the temperature */
    o = strategy_opts(2, g);
    o.top_k = 1, o.temperature = 5.0, o.top_p = 1.0;
    lt_generate_result k1 = run(m, src, pad, prompt, &o, NULL);
    ck_assert_msg(lt_equal(k1.tokens, greedy.tokens), "%s: top_k 1 differs from greedy", ARCH_NAMES[arch]);
    LT_ASSERT_CLOSE(k1.scores, greedy.scores, 0.0, 1e-9);
    /* sampling: the same seed gives the same tokens, another seed other tokens */
    o = strategy_opts(2, g);
    o.temperature = 3.0, o.top_k = 0, o.top_p = 1.0, o.eos_id = -1;
    LT_OK_OR_FAIL(reseed(g, 9));
    lt_generate_result s1 = run(m, src, pad, prompt, &o, NULL);
    LT_OK_OR_FAIL(reseed(g, 9));
    lt_generate_result s2 = run(m, src, pad, prompt, &o, NULL);
    LT_OK_OR_FAIL(reseed(g, 10));
    lt_generate_result s3 = run(m, src, pad, prompt, &o, NULL);
    ck_assert(lt_equal(s1.tokens, s2.tokens));
    ck_assert_msg(!lt_equal(s1.tokens, s3.tokens), "%s: seeds 9 and 10 sampled the same", ARCH_NAMES[arch]);
    /* top_p small keeps only the most likely token: greedy again */
    o.top_p = 1e-6, o.eos_id = 2;
    lt_generate_result p0 = run(m, src, pad, prompt, &o, NULL);
    ck_assert(lt_equal(p0.tokens, greedy.tokens));
    /* eos -1: every row makes exactly max_new tokens */
    o = strategy_opts(0, g);
    o.eos_id = -1, o.max_new = 9;
    lt_generate_result nm = run(m, src, pad, prompt, &o, NULL);
    ck_assert_int_eq(nm.tokens->shape[1], 9);
    int64_t lens[3];
    LT_OK_OR_FAIL(lt_tensor_read(nm.lengths, LT_DTYPE_I64, lens, 3));
    ck_assert(lens[0] == 9 && lens[1] == 9 && lens[2] == 9);
    /* stop at <eos>: make row 0's first greedy token the end token */
    int64_t first;
    int64_t all9[27];
    LT_OK_OR_FAIL(lt_tensor_read(nm.tokens, LT_DTYPE_I64, all9, 27));
    first = all9[0];
    o.eos_id = first;
    lt_generate_result st = run(m, src, pad, prompt, &o, NULL);
    LT_OK_OR_FAIL(lt_tensor_read(st.lengths, LT_DTYPE_I64, lens, 3));
    ck_assert_int_eq(lens[0], 1);
    /* max_new 0: nothing */
    o.max_new = 0;
    lt_generate_result z = run(m, src, pad, prompt, &o, NULL);
    ck_assert_int_eq(z.tokens->shape[1], 0);
    /* beam: the score is the teacher-forced sum over length^alpha, and the cache agrees */
    o = strategy_opts(1, g);
    o.beam_width = 4, o.length_penalty = 1.0;
    lt_generate_result bm = run(m, src, pad, prompt, &o, NULL);
    int64_t btok[3 * 12], blen[3];
    double bsc[3];
    const int64_t L = bm.tokens->shape[1];
    LT_OK_OR_FAIL(lt_tensor_read(bm.tokens, LT_DTYPE_I64, btok, 3 * L));
    LT_OK_OR_FAIL(lt_tensor_read(bm.lengths, LT_DTYPE_I64, blen, 3));
    LT_OK_OR_FAIL(lt_tensor_read(bm.scores, LT_DTYPE_F64, bsc, 3));
    for (int64_t r = 0; r < 3; r++) {
      int64_t prefix[8] = {1};
      int64_t P = 1;
      lt_tensor *s1r = NULL, *p1r = NULL;
      if (src) {
        s1r = LT_NN(lt_narrow(src, 0, r, 1));
        p1r = LT_NN(lt_narrow(pad, 0, r, 1));
      } else {
        P = 4;
        lt_tensor *pr = LT_NN(lt_narrow(prompt, 0, r, 1));
        LT_OK_OR_FAIL(lt_tensor_read(pr, LT_DTYPE_I64, prefix, 4));
        lt_tensor_free(pr);
      }
      const double want = forced_logp(m, s1r, p1r, prefix, P, btok + r * L, blen[r]) / (double)blen[r];
      ck_assert_msg(fabs(want - bsc[r]) < 1e-5, "%s row %lld: beam score %.8f, teacher-forced %.8f",
                    ARCH_NAMES[arch], (long long)r, bsc[r], want);
      lt_tensor_free(s1r), lt_tensor_free(p1r);
    }
    lt_generate_result *all[] = {&greedy, &b1, &k1, &s1, &s2, &s3, &p0, &nm, &st, &z, &bm};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) lt_generate_result_free(all[i]);
    lt_generator_free(g);
    free3(src, pad, prompt);
    lt_transformer_free(m);
  }
}
END_TEST

START_TEST(context_window_past_max_len) {
  /* decoder-only: prompt 4 + 30 new tokens > max_len 24: the window slides,
   * cached and uncached agree (the cache is rebuilt each step past the window) */
  for (int arch = ARCH_GPT; arch < N_ARCH; arch++) {
    lt_transformer *m = tiny_model(arch, 13, 5);
    lt_tensor *src, *pad, *prompt;
    make_input(arch, &src, &pad, &prompt);
    for (int s = 0; s < 3; s++) {
      lt_generator *g = lt_generator_new(1);
      lt_generate_opts o = strategy_opts(s, g);
      o.max_new = 30, o.eos_id = -1;
      lt_tf_generate_opts t = lt_tf_generate_defaults();
      t.context = s == 0 ? 0 : 10;
      lt_generate_result a = run(m, src, pad, prompt, &o, &t);
      LT_OK_OR_FAIL(reseed(g, 1));
      t.no_cache = true;
      lt_generate_result b = run(m, src, pad, prompt, &o, &t);
      assert_same_result(&a, &b, ARCH_NAMES[arch]);
      ck_assert_int_eq(a.tokens->shape[1], 30);
      lt_generate_result_free(&a);
      lt_generate_result_free(&b);
      lt_generator_free(g);
    }
    /* NULL options: greedy with the defaults (64 new tokens, the window slides past max_len 24) */
    lt_generate_result d = run(m, NULL, NULL, prompt, NULL, NULL);
    ck_assert_int_eq(d.tokens->shape[0], 3);
    ck_assert(d.tokens->shape[1] >= 1 && d.tokens->shape[1] <= 64);
    lt_generate_result_free(&d);
    free3(src, pad, prompt);
    lt_transformer_free(m);
  }
}
END_TEST

START_TEST(encoder_only_and_errors) {
  const int64_t V = 13;
  /* the encoder-only model classifies; it does not generate */
  lt_tf_config c = lt_tf_config_default(LT_TF_ENCODER_ONLY);
  c.vocab_size = V, c.d_model = 16, c.n_heads = 2, c.n_kv_heads = 2, c.d_ff = 32, c.max_len = 24, c.n_classes = 3;
  c.n_enc_layers = 1;
  lt_generator *g = lt_generator_new(2);
  lt_transformer *enc = lt_transformer_new(&c, g);
  ck_assert(enc != NULL);
  lt_tensor *src, *pad, *prompt;
  make_input(ARCH_ENCDEC, &src, &pad, &prompt);
  bool prev = lt_set_grad_enabled(false);
  lt_tensor *logits = LT_NN(lt_transformer_classify(enc, src, pad, NULL));
  lt_tensor *label = LT_NN(lt_argmax(logits, -1, false));
  LT_ASSERT_SHAPE(label, 3);
  lt_set_grad_enabled(prev);
  lt_generate_result r = {0};
  LT_EXPECT_ERR(lt_transformer_generate(enc, src, pad, NULL, NULL, NULL, &r), LT_ERR_INVALID, "encoder-only");
  ck_assert(!lt_tf_cache_new(enc, 4));

  lt_transformer *s2s = tiny_model(ARCH_ENCDEC, V, 1), *gpt = tiny_model(ARCH_GPT, V, 1);
  lt_tensor *dummy;
  make_input(ARCH_GPT, &dummy, &dummy, &prompt);
  lt_generate_opts o = lt_generate_defaults();
  o.max_new = 5;
  LT_EXPECT_ERR(lt_transformer_generate(NULL, src, pad, NULL, &o, NULL, &r), LT_ERR_NULL, "model");
  LT_EXPECT_ERR(lt_transformer_generate(s2s, src, pad, NULL, &o, NULL, NULL), LT_ERR_NULL, "out");
  LT_EXPECT_ERR(lt_transformer_generate(s2s, NULL, NULL, NULL, &o, NULL, &r), LT_ERR_NULL, "src");
  LT_EXPECT_ERR(lt_transformer_generate(s2s, src, pad, prompt, &o, NULL, &r), LT_ERR_INVALID,
                "prompt given to an encoder-decoder");
  LT_EXPECT_ERR(lt_transformer_generate(gpt, src, NULL, prompt, &o, NULL, &r), LT_ERR_INVALID, "decoder-only");
  LT_EXPECT_ERR(lt_transformer_generate(gpt, NULL, NULL, NULL, &o, NULL, &r), LT_ERR_NULL, "prompt");
  /* empty input */
  lt_tensor *empty = LT_NN(lt_zeros(LT_DTYPE_I64, LT_SHAPE(1, 0)));
  LT_EXPECT_ERR(lt_transformer_generate(gpt, NULL, NULL, empty, &o, NULL, &r), LT_ERR_SHAPE, "empty input");
  LT_EXPECT_ERR(lt_transformer_generate(s2s, empty, NULL, NULL, &o, NULL, &r), LT_ERR_SHAPE, "empty input");
  /* ids outside the vocabulary, floats */
  lt_tensor *big = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(1, 2), ((int64_t[]){4, 13})));
  LT_EXPECT_ERR(lt_transformer_generate(gpt, NULL, NULL, big, &o, NULL, &r), LT_ERR_INVALID, "id 13 at flat index 1");
  /* a source id outside the vocabulary: the encoder's embedding says so (at the loop's first step) */
  LT_EXPECT_ERR(lt_transformer_generate(s2s, big, NULL, NULL, &o, NULL, &r), LT_ERR_INDEX, "out of range");
  lt_tf_generate_opts bad_bos = lt_tf_generate_defaults();
  bad_bos.bos_id = V;
  LT_EXPECT_ERR(lt_transformer_generate(s2s, src, pad, NULL, &o, &bad_bos, &r), LT_ERR_INVALID, "bos 13");
  lt_tensor *fl = LT_NN(lt_to_dtype(prompt, LT_DTYPE_F32));
  LT_EXPECT_ERR(lt_transformer_generate(gpt, NULL, NULL, fl, &o, NULL, &r), LT_ERR_DTYPE, "prompt");
  /* lengths beyond the model's positions */
  lt_tensor *longsrc = LT_NN(lt_full(LT_DTYPE_I64, LT_SHAPE(1, 25), 4.0));
  LT_EXPECT_ERR(lt_transformer_generate(s2s, longsrc, NULL, NULL, &o, NULL, &r), LT_ERR_INVALID, "max_len");
  o.max_new = 25;
  LT_EXPECT_ERR(lt_transformer_generate(s2s, src, pad, NULL, &o, NULL, &r), LT_ERR_INVALID, "max_new 25");
  o.max_new = -1;
  LT_EXPECT_ERR(lt_transformer_generate(s2s, src, pad, NULL, &o, NULL, &r), LT_ERR_INVALID, "max_new");
  /* options */
  o = lt_generate_defaults();
  o.strategy = LT_GENERATE_SAMPLE;
  LT_EXPECT_ERR(lt_transformer_generate(gpt, NULL, NULL, prompt, &o, NULL, &r), LT_ERR_NULL, "generator");
  o.gen = g, o.temperature = 0.0;
  LT_EXPECT_ERR(lt_transformer_generate(gpt, NULL, NULL, prompt, &o, NULL, &r), LT_ERR_INVALID, "temperature");
  o.temperature = 1.0, o.top_p = 0.0;
  LT_EXPECT_ERR(lt_transformer_generate(gpt, NULL, NULL, prompt, &o, NULL, &r), LT_ERR_INVALID, "top_p");
  o = lt_generate_defaults();
  o.strategy = LT_GENERATE_BEAM, o.beam_width = 0;
  LT_EXPECT_ERR(lt_transformer_generate(gpt, NULL, NULL, prompt, &o, NULL, &r), LT_ERR_INVALID, "beam_width");
  o.beam_width = 2, o.length_penalty = -1;
  LT_EXPECT_ERR(lt_transformer_generate(gpt, NULL, NULL, prompt, &o, NULL, &r), LT_ERR_INVALID, "length_penalty");
  o = lt_generate_defaults();
  o.eos_id = V;
  LT_EXPECT_ERR(lt_transformer_generate(gpt, NULL, NULL, prompt, &o, NULL, &r), LT_ERR_INVALID, "eos");
  o = lt_generate_defaults();
  o.strategy = (lt_generate_strategy)9;
  LT_EXPECT_ERR(lt_transformer_generate(gpt, NULL, NULL, prompt, &o, NULL, &r), LT_ERR_INVALID, "strategy");
  ck_assert(!r.tokens && !r.lengths && !r.scores);
  lt_generate_result_free(NULL);

  lt_tensor *ts[] = {src, pad, prompt, logits, label, empty, big, fl, longsrc};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) lt_tensor_free(ts[i]);
  lt_transformer_free(enc), lt_transformer_free(s2s), lt_transformer_free(gpt);
  lt_generator_free(g);
}
END_TEST

/* ======================================================================== */
/* The program                                                              */
/* ======================================================================== */

#ifdef LT_GENERATE_EXE
static char tmpdir[256];

static const char *in_tmp(const char *name) { return lt_test_join(tmpdir, name); }

/* Runs generate with args (shell words), stdout to out.txt, stderr to err.txt;
 * returns the exit status. */
static int gen(const char *args, const char *stdin_text) {
  char cmd[4096];
  if (stdin_text) {
    FILE *f = fopen(in_tmp("stdin.txt"), "w");
    ck_assert(f);
    fputs(stdin_text, f);
    fclose(f);
  }
  snprintf(cmd, sizeof cmd, "'%s' %s < '%s' > '%s' 2> '%s'", LT_GENERATE_EXE, args,
           stdin_text ? in_tmp("stdin.txt") : "/dev/null", in_tmp("out.txt"), in_tmp("err.txt"));
  int st = system(cmd);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *slurp(const char *name) {
  FILE *f = fopen(in_tmp(name), "rb");
  ck_assert(f);
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  fclose(f);
  return buf;
}

static int count_lines(const char *s) {
  int n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

/* A checkpoint as `train` writes it (tests/util_tfckpt.c: a training state
 * with the configuration, the tokenizer, the class names for the classifier),
 * of a model wider and with a longer context than tfckpt_config's, untrained. */
static void write_checkpoint(const char *path, lt_tf_arch arch) {
  lt_tf_config c = tfckpt_config(arch);
  c.d_model = 16, c.d_ff = 32, c.max_len = 24;
  LT_OK_OR_FAIL(tfckpt_write_config(path, &c, 0, true, NULL));
}

START_TEST(program_end_to_end) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/lt_test_decode_XXXXXX");
  ck_assert(mkdtemp(tmpdir));
  char ed[600], lm[600], cl[600], args[2048];
  snprintf(ed, sizeof ed, "%s", in_tmp("s2s.h5"));
  snprintf(lm, sizeof lm, "%s", in_tmp("lm.h5"));
  snprintf(cl, sizeof cl, "%s", in_tmp("cls.h5"));
  write_checkpoint(ed, LT_TF_ENCODER_DECODER);
  write_checkpoint(lm, LT_TF_DECODER_ONLY);
  write_checkpoint(cl, LT_TF_ENCODER_ONLY);

  ck_assert_int_eq(gen("--help", NULL), 0);
  ck_assert(strstr(slurp("out.txt"), "--top-p"));
  /* encoder-decoder: arguments, standard input, a file; every strategy, cached or not */
  snprintf(args, sizeof args, "--checkpoint '%s' --max-len 10 abc 123 'h g f'", ed);
  ck_assert_int_eq(gen(args, NULL), 0);
  static char first[1 << 16];
  snprintf(first, sizeof first, "%s", slurp("out.txt"));
  ck_assert_int_eq(count_lines(first), 3);
  snprintf(args, sizeof args, "--checkpoint '%s' --max-len 10 --no-cache --batch 2 abc 123 'h g f'", ed);
  ck_assert_int_eq(gen(args, NULL), 0);
  ck_assert_str_eq(slurp("out.txt"), first);
  snprintf(args, sizeof args, "--checkpoint '%s' --max-len 10 --input -", ed);
  ck_assert_int_eq(gen(args, "abc\n123\nh g f\n"), 0);
  ck_assert_str_eq(slurp("out.txt"), first);
  for (int nc = 0; nc < 2; nc++) {
    static char out0[1 << 16];
    snprintf(args, sizeof args, "--checkpoint '%s' --strategy beam --beam 3 --length-penalty 0.6 --max-len 8 %s "
             "--scores abc 12", ed, nc ? "--no-cache" : "");
    ck_assert_int_eq(gen(args, NULL), 0);
    snprintf(out0, sizeof out0, "%s", slurp("out.txt"));
    ck_assert_int_eq(count_lines(out0), 2);
    ck_assert(strchr(out0, '\t'));
  }
  snprintf(args, sizeof args, "--checkpoint '%s' --strategy sample --temperature 0.8 --top-k 5 --top-p 0.9 "
           "--seed 3 --max-len 8 abc 12", ed);
  ck_assert_int_eq(gen(args, NULL), 0);
  snprintf(first, sizeof first, "%s", slurp("out.txt"));
  ck_assert_int_eq(gen(args, NULL), 0);
  ck_assert_str_eq(slurp("out.txt"), first); /* the same seed, the same text */
  /* decoder-only: prompts of different lengths in one batch */
  snprintf(args, sizeof args, "--checkpoint '%s' --max-len 6 ab abc 1 abcd", lm);
  ck_assert_int_eq(gen(args, NULL), 0);
  ck_assert_int_eq(count_lines(slurp("out.txt")), 4);
  /* ... decoded as one left-padded batch: the same lines as one prompt at a time, cached or not */
  snprintf(first, sizeof first, "%s", slurp("out.txt"));
  snprintf(args, sizeof args, "--checkpoint '%s' --max-len 6 --batch 1 ab abc 1 abcd", lm);
  ck_assert_int_eq(gen(args, NULL), 0);
  ck_assert_str_eq(slurp("out.txt"), first);
  snprintf(args, sizeof args, "--checkpoint '%s' --max-len 6 --no-cache ab abc 1 abcd", lm);
  ck_assert_int_eq(gen(args, NULL), 0);
  ck_assert_str_eq(slurp("out.txt"), first);
  /* encoder-only: a label per line */
  snprintf(args, sizeof args, "--checkpoint '%s' abc 12 hh", cl);
  ck_assert_int_eq(gen(args, NULL), 0);
  const char *labels = slurp("out.txt");
  ck_assert_int_eq(count_lines(labels), 3);
  ck_assert(strstr(labels, "neg") || strstr(labels, "pos"));
  /* unknown characters become <unk> with a warning */
  snprintf(args, sizeof args, "--checkpoint '%s' --max-len 4 'abz'", ed);
  ck_assert_int_eq(gen(args, NULL), 0);
  ck_assert(strstr(slurp("err.txt"), "<unk>"));

  /* errors: a clear message and a non-zero exit */
  struct {
    const char *args, *in, *msg;
  } bad[] = {
      {"--checkpoint '%s' --bogus abc", NULL, "--bogus"},
      {"--checkpoint '%s' --strategy greedyy abc", NULL, "greedyy"},
      {"--checkpoint '%s' --top-p 1.5 abc", NULL, "top-p"},
      {"--checkpoint '%s' --input -", "", "no input"},
      {"--checkpoint '%s' --input -", "abc\n\n12\n", "line 2 is empty"},
      {"--checkpoint '%s' ''", NULL, "empty"},
      {"--checkpoint '%s' 0123456789012345678901234", NULL, "longer than"},
      {"--checkpoint '%s' --max-len 100 abc", NULL, "--max-len"},
      {"--checkpoint '%s/missing.h5' abc", NULL, "missing.h5"},
      {"--checkpoint '%s' --input '/nonexistent/in.txt'", NULL, "in.txt"},
      {"abc %s", NULL, "--checkpoint"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char a[1024];
    snprintf(a, sizeof a, bad[i].args, strstr(bad[i].msg, "missing") ? tmpdir : ed);
    int rc = gen(a, bad[i].in);
    const char *err = slurp("err.txt");
    ck_assert_msg(rc != 0, "generate %s: exit 0", a);
    ck_assert_msg(strstr(err, bad[i].msg), "generate %s: stderr lacks '%s':\n%s", a, bad[i].msg, err);
  }
  /* a file that is not a checkpoint */
  FILE *f = fopen(in_tmp("junk.h5"), "w");
  fputs("not a checkpoint", f);
  fclose(f);
  snprintf(args, sizeof args, "--checkpoint '%s' abc", in_tmp("junk.h5"));
  ck_assert_int_ne(gen(args, NULL), 0);
  ck_assert(strstr(slurp("err.txt"), "junk.h5"));
  /* a model-only checkpoint (no tokenizer), and a checkpoint of something that is not a Transformer */
  {
    lt_tf_config c = tiny_config(ARCH_GPT, 13);
    lt_generator *g = lt_generator_new(1);
    lt_transformer *m = lt_transformer_new(&c, g);
    lt_ckpt_meta *config = lt_ckpt_meta_new();
    LT_OK_OR_FAIL(lt_tf_config_to_meta(&c, config));
    LT_OK_OR_FAIL(lt_ckpt_save_params(in_tmp("model_only.h5"), lt_transformer_params(m), config, NULL));
    snprintf(args, sizeof args, "--checkpoint '%s' abc", in_tmp("model_only.h5"));
    ck_assert_int_eq(gen(args, NULL), 1);
    ck_assert(strstr(slurp("err.txt"), "holds a model only"));
    /* the same model as a training state without the tokenizer: not called model-only */
    lt_train_state ts = {.params = lt_transformer_params(m)};
    LT_OK_OR_FAIL(lt_ckpt_save_training(in_tmp("notok.h5"), &ts, config, NULL, NULL));
    snprintf(args, sizeof args, "--checkpoint '%s' abc", in_tmp("notok.h5"));
    ck_assert_int_eq(gen(args, NULL), 1);
    const char *err = slurp("err.txt");
    ck_assert_msg(strstr(err, "is a training state without a tokenizer") && !strstr(err, "model only"), "%s", err);
    lt_params *p = lt_params_new();
    lt_linear_m lin;
    LT_OK_OR_FAIL(lt_linear_init(&lin, p, "fc", 4, 2, true, g));
    lt_train_state st = {.params = p};
    LT_OK_OR_FAIL(lt_ckpt_save_training(in_tmp("mlp.h5"), &st, NULL, NULL, NULL));
    snprintf(args, sizeof args, "--checkpoint '%s' abc", in_tmp("mlp.h5"));
    ck_assert_int_eq(gen(args, NULL), 1);
    ck_assert(strstr(slurp("err.txt"), "not a Transformer checkpoint"));
    lt_params_free(p);
    lt_ckpt_meta_free(config);
    lt_transformer_free(m);
    lt_generator_free(g);
  }
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (!getenv("LT_KEEP_TMP") && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
}
END_TEST

/* Runs generate with argv (NULL-terminated, after the program name), its
 * stdout on fd out and stderr into err.txt; returns the exit status. */
static int gen_to_fd(const char *const *args, int out) {
  const char *argv[32] = {LT_GENERATE_EXE};
  int n = 1;
  while (*args && n < 31) argv[n++] = *args++;
  argv[n] = NULL;
  pid_t pid = fork();
  ck_assert(pid >= 0);
  if (pid == 0) {
    int err = open(in_tmp("err.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int in = open("/dev/null", O_RDONLY);
    if (err < 0 || in < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0 || dup2(in, 0) < 0) _exit(99);
    execv(LT_GENERATE_EXE, (char *const *)argv);
    _exit(98);
  }
  int st;
  ck_assert(waitpid(pid, &st, 0) == pid);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The program's reliability: every flag bounded (exit 2 and a message naming
 * the flag and its range), --input a bounded regular file read without
 * blocking, standard input bounded, every write checked (exit 1). */
START_TEST(program_failures) {
  snprintf(tmpdir, sizeof tmpdir, "/tmp/lt_test_decode_XXXXXX");
  ck_assert(mkdtemp(tmpdir));
  char ed[600], args[2048];
  snprintf(ed, sizeof ed, "%s", in_tmp("s2s.h5"));
  write_checkpoint(ed, LT_TF_ENCODER_DECODER);
  /* inputs that are not regular files, or too large (a sparse file: no disk used) */
  ck_assert_int_eq(mkfifo(in_tmp("fifo"), 0600), 0);
  int big = open(in_tmp("big.txt"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ck_assert(big >= 0 && ftruncate(big, ((off_t)64 << 20) + 1) == 0);
  close(big);
  struct {
    const char *args; /* %s: the checkpoint */
    int code;
    const char *msg;
  } bad[] = {
      {"--checkpoint '%s' --max-len 0 abc", 2, "--max-len 0: must be in [1, 16777216]"},
      {"--checkpoint '%s' --top-k 99999999999999999999 abc", 2, "--top-k 99999999999999999999: must be in [0, "},
      {"--checkpoint '%s' --beam 1e18 abc", 2, "--beam: '1e18' is not an integer in [1, 1024]"},
      {"--checkpoint '%s' --batch -1 abc", 2, "--batch -1: must be in [1, 1048576]"},
      {"--checkpoint '%s' --temperature nan abc", 2, "--temperature: 'nan' is not a finite number in (0, 100]"},
      {"--checkpoint '%s' --length-penalty inf abc", 2, "--length-penalty: 'inf' is not a finite number"},
      {"--checkpoint '%s' --top-p 0 abc", 2, "--top-p 0: must be in (0, 1]"},
      {"--checkpoint '%s' --seed -1 abc", 2, "--seed -1: must be in [0, 9223372036854775807]"},
      {"--checkpoint '%s' --threads 0 abc", 2, "--threads 0: must be in [1, 1024]"},
      {"--checkpoint '%s' --context= abc", 2, "--context: '' is not an integer"},
      {"--checkpoint '%s' --strategy", 2, "--strategy needs a value"},
      {"--checkpoint '%s' --strategy Beam abc", 2, "--strategy: unknown value 'Beam' (one of: greedy, beam, sample)"},
      {"--checkpoint '%s' --strategy beam --beam 1024 --batch 2048 abc", 2, "at most 2^20 (1048576) hypotheses"},
      {"--checkpoint '' abc %s", 2, "--checkpoint: the value is empty"},
      {"--checkpoint '%s' --input /dev/zero", 2, "--input '/dev/zero' is a character device, not a regular file"},
      {"--checkpoint '%s' --input '%s'", 2, "is a FIFO, not a regular file"},
      {"--checkpoint '%s' --input '%s'", 2, "is 67108865 bytes, more than the input limit of 64 MiB"},
      {"--checkpoint '%s' --input /tmp", 2, "is a directory"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    const char *file = strstr(bad[i].msg, "FIFO") ? in_tmp("fifo") : in_tmp("big.txt");
    snprintf(args, sizeof args, bad[i].args, ed, file);
    int rc = gen(args, NULL);
    const char *err = slurp("err.txt");
    ck_assert_msg(rc == bad[i].code, "generate %s: exit %d, expected %d\n%s", args, rc, bad[i].code, err);
    ck_assert_msg(strstr(err, bad[i].msg), "generate %s: stderr lacks '%s':\n%s", args, bad[i].msg, err);
  }
  /* standard input is bounded too (exit 1: the data, not a flag) */
  snprintf(args, sizeof args, "'%s' --checkpoint '%s' --input - < '%s' > /dev/null 2> '%s'", LT_GENERATE_EXE, ed,
           in_tmp("big.txt"), in_tmp("err.txt"));
  int st = system(args);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1);
  ck_assert_msg(strstr(slurp("err.txt"), "standard input is longer than the input limit of 64 MiB"), "%s",
                slurp("err.txt"));

  /* A 1 MB line without whitespace for a BPE model of 24 positions: refused from its length before BPE
   * encodes it (that took 7 s in Release, over 60 s under ASan), with the limit named. */
  {
    static const char train_text[] = "the quick brown fox jumps over the lazy dog, then the dog sleeps. ";
    lt_bpe_opts bo = {.num_merges = 20, .min_frequency = 1};
    lt_tokenizer *bpe = LT_NNP(lt_tokenizer_train_bpe(train_text, strlen(train_text), &bo));
    lt_tf_config c = tfckpt_config(LT_TF_DECODER_ONLY);
    c.d_model = 16, c.d_ff = 32, c.max_len = 24, c.vocab_size = lt_tokenizer_vocab_size(bpe);
    char lm[600];
    snprintf(lm, sizeof lm, "%s", in_tmp("bpe.h5"));
    LT_OK_OR_FAIL(tfckpt_write_config_tok(lm, &c, 0, true, NULL, bpe));
    lt_tokenizer_free(bpe);
    FILE *f = fopen(in_tmp("long.txt"), "w");
    ck_assert(f);
    for (int i = 0; i < (1 << 20); i++) fputc("thequickbrownfox"[i % 16], f);
    fputc('\n', f);
    fclose(f);
    snprintf(args, sizeof args, "--checkpoint '%s' --input '%s'", lm, in_tmp("long.txt"));
    double t0 = lt_test_now();
    int rc = gen(args, NULL);
    double dt = lt_test_now() - t0;
    const char *err = slurp("err.txt");
    ck_assert_msg(rc == 1 && strstr(err, "input line 1 is 1048576 bytes long: more than the model's context of 24 "
                                    "positions can hold (a bpe token stands for at most 128 bytes); refused before "
                                    "encoding"), "exit %d\n%s", rc, err);
    ck_assert_msg(dt < 2.0, "a 1 MB line took %.2f s to refuse", dt);
    /* the longest line that may fit is encoded and measured in tokens as before */
    snprintf(args, sizeof args, "--checkpoint '%s' --max-len 2 thequickbrownfoxjumps", lm);
    ck_assert_int_eq(gen(args, NULL), 0);
  }
  /* Class names from the checkpoint reach the terminal: control bytes and invalid UTF-8 printed as \xNN */
  {
    char cl[600];
    snprintf(cl, sizeof cl, "%s", in_tmp("cls_raw.h5"));
    tfckpt_classes = "n\x1b[2Jeg\npo\xffs\n", tfckpt_classes_size = 13;
    lt_tf_config c = tfckpt_config(LT_TF_ENCODER_ONLY);
    c.d_model = 16, c.d_ff = 32, c.max_len = 24;
    LT_OK_OR_FAIL(tfckpt_write_config(cl, &c, 0, true, NULL));
    tfckpt_classes = NULL, tfckpt_classes_size = 0;
    snprintf(args, sizeof args, "--checkpoint '%s' abc cab bca", cl);
    ck_assert_int_eq(gen(args, NULL), 0);
    const char *out = slurp("out.txt");
    for (const char *q = out; *q; q++)
      ck_assert_msg((unsigned char)*q >= 0x20 && (unsigned char)*q < 0x7f ? true : *q == '\n', "raw byte 0x%02x in\n%s",
                    (unsigned char)*q, out);
    ck_assert_msg(strstr(out, "n\\x1b[2Jeg") || strstr(out, "po\\xffs"), "%s", out);
  }

  /* a full disk: exit 1 naming the failed write */
  int full = open("/dev/full", O_WRONLY);
  if (full >= 0) {
    const char *a[] = {"--checkpoint", ed, "--max-len", "4", "abc", "12", NULL};
    ck_assert_int_eq(gen_to_fd(a, full), 1);
    ck_assert_msg(strstr(slurp("err.txt"), "writing the output: No space left on device"), "%s", slurp("err.txt"));
    const char *h[] = {"--help", NULL};
    ck_assert_int_eq(gen_to_fd(h, full), 1);
    ck_assert(strstr(slurp("err.txt"), "writing the help text"));
    close(full);
  }
  /* a closed pipe: EPIPE is an error like any other (SIGPIPE does not kill it silently) */
  int pfd[2];
  ck_assert_int_eq(pipe(pfd), 0);
  close(pfd[0]);
  const char *a[] = {"--checkpoint", ed, "--max-len", "4", "abc", NULL};
  ck_assert_int_eq(gen_to_fd(a, pfd[1]), 1);
  ck_assert_msg(strstr(slurp("err.txt"), "writing the output: Broken pipe"), "%s", slurp("err.txt"));
  close(pfd[1]);

  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
  if (!getenv("LT_KEEP_TMP") && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
}
END_TEST
#endif

int main(void) {
  Suite *s = suite_create("decode");
  TCase *tc = tcase_create("decode");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, mha_cached_steps_match_full_forward);
  tcase_add_test(tc, mha_window_cache);
  tcase_add_test(tc, decode_step_matches_decode);
  tcase_add_test(tc, cached_equals_uncached_every_arch_and_strategy);
  tcase_add_test(tc, strategy_properties);
  tcase_add_test(tc, context_window_past_max_len);
  tcase_add_test(tc, encoder_only_and_errors);
#ifdef LT_GENERATE_EXE
  tcase_add_test(tc, program_end_to_end);
  tcase_add_test(tc, program_failures);
#endif
  suite_add_tcase(s, tc);
  return lt_test_run(s);
}
