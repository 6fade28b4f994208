/*
 * tests/test_t5.c: T5 in libtensor without Python: the relative-position
 * buckets (nn/relpos.c) against transformers' own values, the attention with
 * a bias that carries a gradient (nn/attention_bias.c: f64 gradcheck of q,
 * k, v and the bias, agreement with the kernels), the T5 configuration
 * (pos relative, attn_scale, head_rescale: refusals, checkpoint attributes),
 * gradients reaching both bias tables, the KV-cached decoder against the
 * whole-sequence one, export then import bit-identical, and
 * tests/fixtures/hf_t5_v10 and hf_t5_v11 (written by transformers itself,
 * tests/fixtures/make_hf_t5_fixture.py) loading with logits within 1e-4 and
 * the same greedy tokens. tests/reference/test_hf_t5.py checks the same
 * layout live against transformers.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libtensor_transformer.h"
#include "test_util.h"
#include "util_fixtures.h"

static char tmp[] = "/tmp/lt_t5_XXXXXX";

static void tmp_make(void) {
  strcpy(tmp, "/tmp/lt_t5_XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(tmp));
}
static void tmp_remove(void) {
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  ck_assert_int_eq(system(cmd), 0);
}

static lt_tf_config t5_config(bool gated) {
  lt_tf_config c = lt_tf_config_default(LT_TF_ENCODER_DECODER);
  c.vocab_size = 30, c.d_model = 16, c.n_heads = 4, c.n_kv_heads = 4, c.n_enc_layers = 2, c.n_dec_layers = 2;
  c.d_ff = 20, c.max_len = 40, c.dropout = 0.0, c.pad_id = -1, c.norm = LT_TF_RMS_NORM, c.pre_norm = true;
  c.pos = LT_TF_POS_RELATIVE, c.rel_buckets = 8, c.rel_max_distance = 12, c.attn_scale = 1.0, c.bias = false;
  c.scale_embeddings = false, c.norm_eps = 1e-6, c.act = LT_ACT_RELU, c.tie_embeddings = true, c.head_rescale = true;
  if (gated) c.act = LT_ACT_GELU_TANH, c.swiglu = true, c.tie_embeddings = false, c.head_rescale = false;
  return c;
}

/* max |a - b| of two float tensors of one size (NaN wins). */
static double max_diff(const lt_tensor *a, const lt_tensor *b) {
  ck_assert_int_eq(a->numel, b->numel);
  lt_tensor *ca = LT_NN(lt_to_dtype(a, LT_DTYPE_F64)), *cb = LT_NN(lt_to_dtype(b, LT_DTYPE_F64));
  lt_tensor *xa = LT_NN(lt_contiguous(ca)), *xb = LT_NN(lt_contiguous(cb));
  double m = 0;
  for (int64_t i = 0; i < a->numel; i++) {
    const double d = fabs(((double *)xa->data)[i] - ((double *)xb->data)[i]);
    if (!(d <= m)) m = d;
  }
  LT_FREE_ALL(ca, cb, xa, xb);
  return m;
}

static lt_tensor *ids_of(int64_t n, const int64_t *v) {
  return LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){1, n}, v));
}

/* The buckets of r = -300 .. 300 against transformers' (the fixture), and the
 * [T, S] table's entries against the scalar rule, and the refusals. */
START_TEST(buckets) {
  char path[1024];
  lt_fixture_path("hf_t5.expected.safetensors", path, sizeof path);
  lt_st_file *f = LT_NNP(lt_st_open(path));
  const struct { int64_t nb, md; bool bi; const char *name; } cases[] = {
      {32, 128, true, "buckets_32_128_bi"}, {32, 128, false, "buckets_32_128_uni"},
      {8, 12, true, "buckets_8_12_bi"},     {8, 12, false, "buckets_8_12_uni"}};
  for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
    lt_tensor *want = LT_NN(lt_st_tensor(f, lt_st_find(f, cases[c].name), LT_DTYPE_I64));
    ck_assert_int_eq(want->numel, 601);
    int bad = 0;
    for (int64_t i = 0; i < 601; i++) {
      const int64_t got = lt_relative_position_bucket(i - 300, cases[c].bi, cases[c].nb, cases[c].md);
      const int64_t w = ((const int64_t *)want->data)[i];
      if (got != w && bad++ < 5) printf("%s: r %lld: libtensor %lld, transformers %lld\n", cases[c].name,
                                        (long long)(i - 300), (long long)got, (long long)w);
    }
    ck_assert_msg(bad == 0, "%s: %d buckets differ from transformers'", cases[c].name, bad);
    lt_tensor_free(want);
  }
  lt_st_close(f);
  /* known values (T5's 32 buckets, 128): 0 -> 0, key after the query -> the second half, far -> the last */
  ck_assert_int_eq(lt_relative_position_bucket(0, true, 32, 128), 0);
  ck_assert_int_eq(lt_relative_position_bucket(1, true, 32, 128), 17);
  ck_assert_int_eq(lt_relative_position_bucket(-1, true, 32, 128), 1);
  ck_assert_int_eq(lt_relative_position_bucket(-1000, true, 32, 128), 15);
  ck_assert_int_eq(lt_relative_position_bucket(5, false, 32, 128), 0); /* a future key: bucket 0 in a decoder */
  ck_assert_int_eq(lt_relative_position_bucket(-1000, false, 32, 128), 31);
  /* the table: queries 3 .. 6 against keys 0 .. 9 */
  lt_tensor *t = LT_NN(lt_relative_position_buckets(4, 10, 3, false, 8, 12));
  ck_assert_int_eq(t->shape[0], 4);
  ck_assert_int_eq(t->shape[1], 10);
  for (int64_t q = 0; q < 4; q++)
    for (int64_t s = 0; s < 10; s++)
      ck_assert_int_eq(((const int64_t *)t->data)[q * 10 + s], lt_relative_position_bucket(s - (q + 3), false, 8, 12));
  lt_tensor_free(t);
  LT_EXPECT_NULLP_ERR(lt_relative_position_buckets(2, 2, 0, true, 2, 12), LT_ERR_INVALID, "num_buckets 2");
  LT_EXPECT_NULLP_ERR(lt_relative_position_buckets(2, 2, 0, false, 8, 4), LT_ERR_INVALID, "max_distance 4");
  LT_EXPECT_NULLP_ERR(lt_relative_position_buckets(0, 2, 0, false, 8, 12), LT_ERR_INVALID, "T 0");
  lt_tensor *tab = LT_NN(lt_zeros(LT_DTYPE_F32, 1, (int64_t[]){8}));
  LT_EXPECT_NULLP_ERR(lt_relative_position_bias(tab, 2, 2, 0, true, 12), LT_ERR_SHAPE, "num_buckets, NH");
  lt_tensor_free(tab);
}
END_TEST

/* ---- attention with a bias that needs a gradient ----------------------------- */

typedef struct attn_case {
  bool causal;
  const lt_tensor *kpm;
  double scale;
} attn_case;

static lt_tensor *attn_fn(int n, lt_tensor *const *in, void *user) {
  (void)n;
  const attn_case *c = user;
  const lt_attention_opts o = {.causal = c->causal, .key_padding_mask = c->kpm, .attn_mask = in[3], .scale = c->scale};
  return lt_scaled_dot_product_attention(in[0], in[1], in[2], &o, NULL, NULL);
}

/* f64 gradcheck of q, k, v and the bias (broadcast over the batch), causal
 * with key padding (a row of batch 1 sees no key: zeros, zero gradients), and
 * GQA; the values equal the kernels' (a bias without grad). */
START_TEST(biased_attention_gradcheck) {
  lt_generator *g = LT_NNP(lt_generator_new(5));
  const int64_t B = 2, NH = 4, NKV = 2, T = 3, S = 5, HS = 4;
  lt_tensor *in[4] = {LT_NN(lt_randn(g, LT_DTYPE_F64, 4, (int64_t[]){B, NH, T, HS})),
                      LT_NN(lt_randn(g, LT_DTYPE_F64, 4, (int64_t[]){B, NKV, S, HS})),
                      LT_NN(lt_randn(g, LT_DTYPE_F64, 4, (int64_t[]){B, NKV, S, HS})),
                      LT_NN(lt_randn(g, LT_DTYPE_F64, 4, (int64_t[]){1, NH, T, S}))};
  for (int i = 0; i < 4; i++) LT_OK_OR_FAIL(lt_requires_grad_(in[i], true));
  /* batch 1: keys 0..3 padded; causal query 0 sees keys <= 2: none left */
  const bool pad[2][5] = {{false, false, false, false, true}, {true, true, true, true, false}};
  lt_tensor *kpm = LT_NN(lt_tensor_from_copy(LT_DTYPE_BOOL, 2, (int64_t[]){B, S}, pad));
  attn_case c = {true, kpm, 1.0};
  LT_OK_OR_FAIL(lt_gradcheck(attn_fn, &c, 4, in, NULL));
  attn_case c2 = {false, NULL, 0.0};
  LT_OK_OR_FAIL(lt_gradcheck(attn_fn, &c2, 4, in, NULL));
  /* the composed path against the unfused kernel (the bias a constant there) */
  lt_tensor *y = LT_NN(attn_fn(4, in, &c));
  lt_tensor *bias_const = LT_NN(lt_detach(in[3]));
  const lt_attention_opts o = {.causal = true, .key_padding_mask = kpm, .attn_mask = bias_const, .scale = 1.0,
                               .impl = LT_ATTENTION_UNFUSED};
  lt_tensor *y2 = LT_NN(lt_scaled_dot_product_attention(in[0], in[1], in[2], &o, NULL, NULL));
  const double d = max_diff(y, y2);
  printf("attention with a differentiable bias vs the unfused kernel: max |diff| %.2e\n", d);
  ck_assert_msg(d <= 1e-12, "composed vs kernel: %g", d);
  /* the fully masked row gives zeros */
  for (int64_t h = 0; h < HS; h++) {
    double v;
    LT_OK_OR_FAIL(lt_get(y, (int64_t[]){1, 0, 0, h}, &v));
    ck_assert(v == 0.0);
  }
  LT_FREE_ALL(y, y2, bias_const, kpm, in[0], in[1], in[2], in[3]);
  lt_generator_free(g);
}
END_TEST

/* lt_relative_position_bias's gradient reaches its table (through an attention). */
typedef struct bias_case { int64_t T, S; } bias_case;
static lt_tensor *bias_fn(int n, lt_tensor *const *in, void *user) {
  (void)n;
  const bias_case *c = user;
  lt_tensor *b = lt_relative_position_bias(in[3], c->T, c->S, 0, true, 12);
  const lt_attention_opts o = {.attn_mask = b, .scale = 1.0};
  lt_tensor *y = b ? lt_scaled_dot_product_attention(in[0], in[1], in[2], &o, NULL, NULL) : NULL;
  lt_tensor_free(b);
  return y;
}

START_TEST(bias_table_gradcheck) {
  lt_generator *g = LT_NNP(lt_generator_new(9));
  const int64_t NH = 2, T = 6, HS = 3;
  lt_tensor *in[4] = {LT_NN(lt_randn(g, LT_DTYPE_F64, 4, (int64_t[]){1, NH, T, HS})),
                      LT_NN(lt_randn(g, LT_DTYPE_F64, 4, (int64_t[]){1, NH, T, HS})),
                      LT_NN(lt_randn(g, LT_DTYPE_F64, 4, (int64_t[]){1, NH, T, HS})),
                      LT_NN(lt_randn(g, LT_DTYPE_F64, 2, (int64_t[]){8, NH}))};
  LT_OK_OR_FAIL(lt_requires_grad_(in[3], true));
  bias_case c = {T, T};
  LT_OK_OR_FAIL(lt_gradcheck(bias_fn, &c, 4, in, NULL));
  LT_FREE_ALL(in[0], in[1], in[2], in[3]);
  lt_generator_free(g);
}
END_TEST

/* ---- the configuration ----------------------------------------------------------- */

START_TEST(config_fields) {
  lt_tf_config c = t5_config(false);
  LT_OK_OR_FAIL(lt_tf_config_validate(&c));
  lt_tf_config b = c;
  b.rel_buckets = 3;
  LT_EXPECT_ERR(lt_tf_config_validate(&b), LT_ERR_INVALID, "rel_buckets 3");
  b = c, b.rel_max_distance = 4; /* the decoder's exact buckets are 8 / 2 = 4 */
  LT_EXPECT_ERR(lt_tf_config_validate(&b), LT_ERR_INVALID, "rel_max_distance 4");
  b = c, b.pos = LT_TF_POS_LEARNED;
  LT_EXPECT_ERR(lt_tf_config_validate(&b), LT_ERR_INVALID, "only pos relative");
  b = c, b.tie_embeddings = false;
  LT_EXPECT_ERR(lt_tf_config_validate(&b), LT_ERR_INVALID, "head_rescale");
  b = c, b.attn_scale = -1;
  LT_EXPECT_ERR(lt_tf_config_validate(&b), LT_ERR_INVALID, "attn_scale");
  b = c, b.sliding_window = 4;
  LT_EXPECT_ERR(lt_tf_config_validate(&b), LT_ERR_INVALID, "pos relative");
  /* the layout: post-norm, biases, a scaled attention are not T5's */
  b = c, b.attn_scale = 0;
  LT_EXPECT_ERR(lt_hf_family_of(&b, NULL), LT_ERR_INVALID, "attn_scale 1");
  b = c, b.bias = true;
  LT_EXPECT_ERR(lt_hf_family_of(&b, NULL), LT_ERR_INVALID, "bias false");
  lt_hf_family fam;
  LT_OK_OR_FAIL(lt_hf_family_of(&c, &fam));
  ck_assert_int_eq(fam, LT_HF_T5);
  ck_assert_str_eq(lt_hf_family_name(fam), "t5");
  /* the size known before building, and the checkpoint attributes both ways */
  int64_t np;
  LT_OK_OR_FAIL(lt_tf_config_size(&c, &np, NULL));
  lt_generator *g = LT_NNP(lt_generator_new(1));
  lt_transformer *m = LT_NNP(lt_transformer_new(&c, g));
  ck_assert_int_eq(np, lt_params_numel(lt_transformer_params(m), false));
  ck_assert_ptr_nonnull(lt_params_find(lt_transformer_params(m), "encoder.rel_bias.weight"));
  ck_assert_ptr_nonnull(lt_params_find(lt_transformer_params(m), "decoder.rel_bias.weight"));
  lt_ckpt_meta *meta = LT_NNP(lt_ckpt_meta_new());
  LT_OK_OR_FAIL(lt_tf_config_to_meta(&c, meta));
  lt_tf_config back;
  LT_OK_OR_FAIL(lt_tf_config_from_meta(meta, &back));
  ck_assert_int_eq(back.pos, LT_TF_POS_RELATIVE);
  ck_assert_int_eq(back.rel_buckets, 8);
  ck_assert_int_eq(back.rel_max_distance, 12);
  ck_assert(back.attn_scale == 1.0 && back.head_rescale);
  lt_ckpt_meta_free(meta);
  lt_transformer_free(m);
  lt_generator_free(g);
}
END_TEST

/* ---- the model -------------------------------------------------------------------- */

static lt_transformer *random_t5(bool gated, uint64_t seed) {
  lt_tf_config c = t5_config(gated);
  lt_generator *g = LT_NNP(lt_generator_new(seed));
  lt_transformer *m = LT_NNP(lt_transformer_new(&c, g));
  lt_params *P = lt_transformer_params(m);
  for (int i = 0; i < lt_params_count(P); i++) {
    const lt_param *p = lt_params_at(P, i);
    const bool norm = strstr(p->name, "norm") != NULL;
    LT_OK_OR_FAIL(lt_init_normal_(g, p->value, norm ? 1.0 : 0.0, norm ? 0.2 : 0.3));
  }
  lt_generator_free(g);
  return m;
}

static const int64_t SRC[] = {3, 7, 1, 22, 9, 14, 5, 27, 2, 11, 19, 6, 8, 4, 25, 13};
static const int64_t TGT[] = {0, 5, 12, 3, 29, 7, 18, 1, 10, 4, 21, 16, 2};
#define NS ((int64_t)(sizeof SRC / sizeof *SRC))
#define NT ((int64_t)(sizeof TGT / sizeof *TGT))

/* The loss's gradient reaches both bias tables, every layer's projections
 * and the head; the cached decoder (one position a step, the bias of each
 * step's row) gives the whole-sequence decoder's logits. */
START_TEST(gradients_and_cache) {
  for (int gated = 0; gated < 2; gated++) {
    lt_transformer *m = random_t5(gated, 3 + gated);
    lt_tensor *src = ids_of(NS, SRC), *tgt = ids_of(NT, TGT);
    lt_tensor *mem = LT_NN(lt_transformer_encode(m, src, NULL, NULL));
    lt_tensor *labels = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){1, NT}, SRC));
    lt_tensor *loss = LT_NN(lt_transformer_decode_loss(m, tgt, NULL, mem, NULL, labels, NULL, 0, NULL));
    LT_OK_OR_FAIL(lt_backward(loss, NULL, false));
    lt_params *P = lt_transformer_params(m);
    for (int i = 0; i < lt_params_count(P); i++) {
      const lt_param *p = lt_params_at(P, i);
      ck_assert_msg(p->value->grad != NULL, "%s has no gradient", p->name);
      lt_tensor *a = LT_NN(lt_abs(p->value->grad)), *s = LT_NN(lt_sum(a, 0, NULL, false));
      double v;
      LT_OK_OR_FAIL(lt_item(s, &v));
      ck_assert_msg(v > 0, "%s: zero gradient", p->name);
      LT_FREE_ALL(a, s);
    }
    LT_FREE_ALL(loss, labels, mem);
    lt_set_grad_enabled(false);
    mem = LT_NN(lt_transformer_encode(m, src, NULL, NULL));
    lt_tensor *whole = LT_NN(lt_transformer_decode(m, tgt, NULL, mem, NULL, 0, NULL));
    lt_tf_cache *c = LT_NNP(lt_tf_cache_new(m, NT));
    double worst = 0;
    for (int64_t t = 0; t < NT; t++) {
      lt_tensor *one = ids_of(1, TGT + t);
      lt_tensor *y = LT_NN(lt_transformer_decode_step(m, c, one, mem, NULL));
      lt_tensor *w = LT_NN(lt_narrow(whole, 1, t, 1));
      const double d = max_diff(y, w);
      if (d > worst) worst = d;
      LT_FREE_ALL(one, y, w);
    }
    printf("t5 %s: cached decoder vs whole sequence, max |diff| %.2e\n", gated ? "gated" : "relu", worst);
    ck_assert_msg(worst <= 1e-5, "cache %g", worst);
    lt_set_grad_enabled(true);
    lt_tf_cache_free(c);
    LT_FREE_ALL(src, tgt, mem, whole);
    lt_transformer_free(m);
  }
}
END_TEST

/* Export then import: the same logits, bit for bit, and the config.json keys T5Config reads. */
START_TEST(hf_round_trip) {
  for (int gated = 0; gated < 2; gated++) {
    lt_transformer *m = random_t5(gated, 7 + gated);
    char dir[700];
    snprintf(dir, sizeof dir, "%s/t5-%d", tmp, gated);
    LT_OK_OR_FAIL(lt_hf_export(m, dir));
    lt_transformer *m2 = LT_NNP(lt_hf_load(dir, 0));
    const lt_tf_config *c2 = lt_transformer_config(m2);
    ck_assert(c2->swiglu == (bool)gated && c2->tie_embeddings == !gated && c2->head_rescale == !gated);
    lt_tensor *src = ids_of(NS, SRC), *tgt = ids_of(NT, TGT);
    lt_set_grad_enabled(false);
    lt_tensor *a = LT_NN(lt_transformer_encode(m, src, NULL, NULL)), *b = LT_NN(lt_transformer_encode(m2, src, NULL, NULL));
    lt_tensor *ya = LT_NN(lt_transformer_decode(m, tgt, NULL, a, NULL, 0, NULL));
    lt_tensor *yb = LT_NN(lt_transformer_decode(m2, tgt, NULL, b, NULL, 0, NULL));
    lt_set_grad_enabled(true);
    ck_assert(max_diff(ya, yb) == 0.0);
    lt_hf_gen_ids ids;
    LT_OK_OR_FAIL(lt_hf_read_gen_ids(dir, &ids));
    ck_assert_int_eq(ids.decoder_start, 0);
    LT_FREE_ALL(src, tgt, a, b, ya, yb);
    lt_transformer_free(m2);
    lt_transformer_free(m);
  }
}
END_TEST

/* What libtensor's T5 does not run is refused naming the key. */
START_TEST(hf_refusals) {
  char cpath[800];
  snprintf(cpath, sizeof cpath, "%s/config.json", tmp);
  lt_tf_config c;
#define T5_KEYS "\"model_type\": \"t5\", \"vocab_size\": 30, \"d_model\": 16, \"num_heads\": 4, \"d_ff\": 20"
  const struct { const char *text, *want; lt_status st; } bad[] = {
      {"{" T5_KEYS ", \"d_kv\": 8}", "key 'd_kv' 8", LT_ERR_INVALID},
      {"{" T5_KEYS ", \"d_kv\": 4, \"feed_forward_proj\": \"gated-tanh\"}", "key 'feed_forward_proj'", LT_ERR_INVALID},
      {"{" T5_KEYS ", \"d_kv\": 4, \"tie_word_embeddings\": false, \"scale_decoder_outputs\": true}",
       "key 'scale_decoder_outputs'", LT_ERR_INVALID},
      {"{" T5_KEYS ", \"d_kv\": 4, \"architectures\": [\"T5EncoderModel\"]}", "key 'architectures'", LT_ERR_INVALID},
      {"{" T5_KEYS ", \"d_kv\": 4, \"relative_attention_num_buckets\": 2}", "rel_buckets 2", LT_ERR_INVALID},
      {"{" T5_KEYS ", \"d_kv\": 4, \"relative_attention_max_distance\": 3}", "rel_max_distance 3", LT_ERR_INVALID},
      {"{" T5_KEYS ", \"d_kv\": 4, \"num_layers\": 100000}", "key 'num_layers'", LT_ERR_INVALID},
      {"{" T5_KEYS ", \"d_kv\": 4, \"is_encoder_decoder\": false}", "key 'is_encoder_decoder'", LT_ERR_INVALID},
      {"{\"model_type\": \"t5\", \"d_model\": 16}", "key 'vocab_size' is missing", LT_ERR_FORMAT},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    lt_test_write_text(cpath, bad[i].text);
    LT_EXPECT_ERR(lt_hf_read_config(tmp, &c, NULL), bad[i].st, bad[i].want);
  }
  lt_test_write_text(cpath, "{" T5_KEYS ", \"d_kv\": 4, \"feed_forward_proj\": \"gated-gelu\"}");
  lt_hf_family fam;
  LT_OK_OR_FAIL(lt_hf_read_config(tmp, &c, &fam));
  ck_assert_int_eq(fam, LT_HF_T5);
  ck_assert(c.swiglu && c.act == LT_ACT_GELU_TANH && c.tie_embeddings && c.head_rescale);
  ck_assert_int_eq(c.n_enc_layers, 6);
  ck_assert_int_eq(c.n_dec_layers, 6); /* T5Config's defaults */
  ck_assert_int_eq(c.rel_buckets, 32);
  ck_assert_int_eq(c.rel_max_distance, 128);
#undef T5_KEYS
}
END_TEST

/* tests/fixtures/hf_t5_v10 and hf_t5_v11, written by transformers
 * (tests/fixtures/make_hf_t5_fixture.py): logits within 1e-4 in f32, and
 * greedy decoding (KV cache and the uncached reference path) makes
 * transformers' 16 tokens from decoder_start_token_id. */
START_TEST(transformers_fixture) {
  char path[1024];
  lt_fixture_path("hf_t5.expected.safetensors", path, sizeof path);
  lt_st_file *f = LT_NNP(lt_st_open(path));
  lt_tensor *src = LT_NN(lt_st_tensor(f, lt_st_find(f, "input_ids"), LT_DTYPE_I64));
  lt_tensor *tgt = LT_NN(lt_st_tensor(f, lt_st_find(f, "decoder_input_ids"), LT_DTYPE_I64));
  const char *names[2] = {"v10", "v11"};
  for (int k = 0; k < 2; k++) {
    char dir[1024], key[64];
    snprintf(key, sizeof key, "hf_t5_%s", names[k]);
    lt_fixture_path(key, dir, sizeof dir);
    lt_transformer *m = lt_hf_load(dir, 0);
    ck_assert_msg(m != NULL, "%s", lt_last_error());
    snprintf(key, sizeof key, "%s_logits", names[k]);
    lt_tensor *want = LT_NN(lt_st_tensor(f, lt_st_find(f, key), LT_DTYPE_F32));
    snprintf(key, sizeof key, "%s_greedy", names[k]);
    lt_tensor *want_tok = LT_NN(lt_st_tensor(f, lt_st_find(f, key), LT_DTYPE_I64));
    lt_set_grad_enabled(false);
    lt_tensor *mem = LT_NN(lt_transformer_encode(m, src, NULL, NULL));
    lt_tensor *y = LT_NN(lt_transformer_decode(m, tgt, NULL, mem, NULL, 0, NULL));
    lt_set_grad_enabled(true);
    const double d = max_diff(y, want);
    printf("%s (transformers' save_pretrained): max |libtensor - transformers| logits %.2e\n", names[k], d);
    ck_assert_msg(d <= 1e-4, "%s logits %g", names[k], d);
    lt_hf_gen_ids ids;
    LT_OK_OR_FAIL(lt_hf_read_gen_ids(dir, &ids));
    for (int nc = 0; nc < 2; nc++) {
      lt_generate_opts o = lt_generate_defaults();
      o.max_new = 16, o.eos_id = -1;
      lt_tf_generate_opts tf = lt_tf_generate_defaults();
      tf.bos_id = ids.decoder_start, tf.no_cache = nc;
      lt_generate_result r = {0};
      LT_OK_OR_FAIL(lt_transformer_generate(m, src, NULL, NULL, &o, &tf, &r));
      for (int64_t i = 0; i < 16; i++) {
        double v;
        LT_OK_OR_FAIL(lt_get(r.tokens, (int64_t[]){0, i}, &v));
        ck_assert_msg((int64_t)v == ((const int64_t *)want_tok->data)[i], "%s%s token %lld: %lld, transformers %lld",
                      names[k], nc ? " (no cache)" : "", (long long)i, (long long)v,
                      (long long)((const int64_t *)want_tok->data)[i]);
      }
      lt_generate_result_free(&r);
    }
    LT_FREE_ALL(want, want_tok, mem, y);
    lt_transformer_free(m);
  }
  LT_FREE_ALL(src, tgt);
  lt_st_close(f);
}
END_TEST

int main(void) {
  Suite *s = suite_create("t5");
  TCase *tc = LT_TEST_CASE(s, "t5", 120, buckets, biased_attention_gradcheck, bias_table_gradcheck, config_fields,
                           gradients_and_cache, hf_round_trip, hf_refusals, transformers_fixture);
  tcase_add_checked_fixture(tc, tmp_make, tmp_remove);
  return lt_test_run(s);
}
