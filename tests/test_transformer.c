/*
 * tests/test_transformer.c: the Transformer of models/transformer against
 * PyTorch and on its own.
 *
 * PyTorch parity: tests/fixtures/transformer.bin (written by
 * tests/fixtures/make_transformer_fixtures.py from nn.Transformer,
 * nn.TransformerEncoderLayer stacks and a hand-written reference for RMSNorm /
 * RoPE / GQA / SwiGLU) holds, per configuration, the config, the weights under
 * our parameter names, padded inputs, the logits, the cross-entropy loss and
 * its gradient for every parameter. Each case builds the model from the
 * config, loads the weights by name, runs forward and backward and compares
 * (|got - want| <= rtol |want| + rtol max(max|want|, 1e-3 G), rtol 1e-4, G
 * the case's largest gradient element: a gradient that is zero in exact
 * arithmetic, such as the key bias's, is compared at the scale of the others).
 * A mismatch prints the tensor, the first differing elements and the max
 * differences, and the test goes on to list them all (LT_FIXTURE_VERBOSE=1
 * prints every comparison).
 *
 * Also: every option combination builds and trains one step (tiny sizes),
 * padding invariance of the masks, pos0, dropout train/eval, the encoder-only
 * classifier, configuration and input errors, parameter counts, and no leaked
 * tensors over repeated steps in a scope.
 */
#include "test_util.h"
#include "util_fixtures.h"
#include "util_fxcheck.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/transformer/transformer.h"
#include "tensor/storage_internal.h"

#define RTOL 1e-4

static lt_tf_config fx_config(const lt_fixture *f, const char *c) {
  lt_tf_config g = {0}; /* fields the fixture lacks (BERT's extras) stay 0 */
#define I(k) ((int64_t)lt_fx_num(f, c, "cfg." #k))
  g.arch = (lt_tf_arch)I(arch);
  g.vocab_size = I(vocab_size);
  g.d_model = I(d_model);
  g.n_heads = I(n_heads);
  g.n_kv_heads = I(n_kv_heads);
  g.n_enc_layers = I(n_enc_layers);
  g.n_dec_layers = I(n_dec_layers);
  g.d_ff = I(d_ff);
  g.max_len = I(max_len);
  g.n_classes = I(n_classes);
  g.dropout = lt_fx_num(f, c, "cfg.dropout");
  g.norm = (lt_tf_norm)I(norm);
  g.pre_norm = I(pre_norm) != 0;
  g.act = (lt_activation)I(act);
  g.swiglu = I(swiglu) != 0;
  g.pos = (lt_tf_pos)I(pos);
  g.tie_embeddings = I(tie_embeddings) != 0;
  g.scale_embeddings = I(scale_embeddings) != 0;
  g.bias = I(bias) != 0;
  g.norm_eps = lt_fx_num(f, c, "cfg.norm_eps");
  g.rope_base = lt_fx_num(f, c, "cfg.rope_base");
  g.pad_id = I(pad_id);
#undef I
  return g;
}

/* Copies every "<c>.param.<name>" into the model's parameter of that name;
 * both sides must list the same names. */
static void fx_load_params(const lt_fixture *f, const char *c, lt_transformer *m) {
  lt_params *p = lt_transformer_params(m);
  char prefix[128];
  int n = snprintf(prefix, sizeof prefix, "%s.param.", c), in_file = 0;
  for (int i = 0; i < lt_fixture_count(f); i++)
    if (strncmp(lt_fixture_name(f, i), prefix, (size_t)n) == 0) {
      in_file++;
      if (!lt_params_find(p, lt_fixture_name(f, i) + n)) {
        printf("MISMATCH %s: PyTorch has parameter %s, the model has not\n", c, lt_fixture_name(f, i) + n);
        lt_fx_failures++;
      }
    }
  bool prev = lt_set_grad_enabled(false);
  for (int i = 0; i < lt_params_count(p); i++) {
    const lt_param *pr = lt_params_at(p, i);
    char key[256];
    snprintf(key, sizeof key, "%s%s", prefix, pr->name);
    if (!lt_fixture_has(f, key)) {
      printf("MISMATCH %s: the model has parameter %s, PyTorch has not\n", c, pr->name);
      lt_fx_failures++;
      continue;
    }
    lt_tensor *t = lt_fixture_get(f, key);
    ck_assert_msg(t, "%s", lt_last_error());
    ck_assert_msg(lt_copy_(pr->value, t) == LT_OK, "%s: %s", key, lt_last_error());
    lt_tensor_free(t);
  }
  lt_set_grad_enabled(prev);
  ck_assert_int_eq(in_file, lt_params_count(p));
}

/* The model's output on the case's inputs (pos0 for the decoder). */
static lt_tensor *run_case(const lt_transformer *m, const lt_fixture *f, const char *c, int64_t pos0) {
  const lt_tf_config *g = lt_transformer_config(m);
  if (g->arch == LT_TF_ENCODER_ONLY)
    return lt_transformer_classify(m, lt_fx_get(f, c, "in.src"), lt_fx_get(f, c, "in.src_pad"), NULL);
  lt_tensor *mem = NULL, *src_pad = NULL;
  if (g->arch == LT_TF_ENCODER_DECODER) {
    src_pad = lt_fx_get(f, c, "in.src_pad");
    mem = lt_transformer_encode(m, lt_fx_get(f, c, "in.src"), src_pad, NULL);
    if (!mem) return NULL;
  }
  return lt_transformer_decode(m, lt_fx_get(f, c, "in.tgt"), lt_fx_get(f, c, "in.tgt_pad"), mem, src_pad, pos0, NULL);
}

static void parity_case(const char *c) {
  lt_fixture *f = lt_fx_open("transformer.bin");
  lt_tf_config cfg = fx_config(f, c);
  lt_generator *gen = lt_generator_new(1);
  lt_transformer *m = lt_transformer_new(&cfg, gen);
  ck_assert_msg(m, "%s: %s", c, lt_last_error());
  lt_params *p = lt_transformer_params(m);
  ck_assert_int_eq(lt_params_numel(p, false), (int64_t)lt_fx_num(f, c, "n_params"));
  fx_load_params(f, c, m);

  lt_scope *s = lt_scope_begin();
  lt_tensor *logits = run_case(m, f, c, 0);
  char label[300];
  snprintf(label, sizeof label, "%s.out (logits)", c);
  lt_fx_close(label, logits, lt_fx_get(f, c, "out"), RTOL, 0);
  ck_assert(logits);
  lt_tensor *loss = LT_NN(lt_cross_entropy(logits, lt_fx_get(f, c, "in.labels"), NULL));
  snprintf(label, sizeof label, "%s.loss", c);
  lt_fx_close(label, loss, LT_NN(lt_scalar(LT_DTYPE_F64, lt_fx_num(f, c, "loss"))), RTOL, 0);
  LT_OK_OR_FAIL(lt_backward(loss, NULL, false));

  /* G: the largest reference gradient element of the case */
  double G = 0;
  for (int i = 0; i < lt_params_count(p); i++) {
    char key[256];
    snprintf(key, sizeof key, "grad.param.%s", lt_params_at(p, i)->name);
    lt_tensor *w = lt_fx_get(f, c, key), *a = LT_NN(lt_abs(w)), *mx = LT_NN(lt_amax(a, 0, NULL, false));
    double v;
    LT_OK_OR_FAIL(lt_item(mx, &v));
    G = fmax(G, v);
  }
  for (int i = 0; i < lt_params_count(p); i++) {
    const lt_param *pr = lt_params_at(p, i);
    char key[256];
    snprintf(key, sizeof key, "grad.param.%s", pr->name);
    snprintf(label, sizeof label, "%s.%s", c, key);
    lt_tensor *got = pr->value->grad ? pr->value->grad : LT_NN(lt_zeros_like(pr->value));
    lt_fx_close(label, got, lt_fx_get(f, c, key), RTOL, RTOL * 1e-3 * G);
  }
  if (cfg.arch == LT_TF_DECODER_ONLY) {
    bool prev = lt_set_grad_enabled(false);
    lt_tensor *l3 = run_case(m, f, c, 3);
    snprintf(label, sizeof label, "%s.pos3.out (logits at pos0 3)", c);
    lt_fx_close(label, l3, lt_fx_get(f, c, "pos3.out"), RTOL, 0);
    lt_set_grad_enabled(prev);
  }
  lt_scope_end(s);
  lt_params_zero_grad(p);
  lt_transformer_free(m);
  lt_generator_free(gen);
  lt_fixture_free(f);
  lt_fx_done(c);
}

START_TEST(test_parity_encdec_post) { parity_case("encdec_post"); }
END_TEST
START_TEST(test_parity_gpt_pre_gelu) { parity_case("gpt_pre_gelu"); }
END_TEST
START_TEST(test_parity_llama_rms_rope_gqa) { parity_case("llama_rms_rope_gqa"); }
END_TEST
START_TEST(test_parity_bert_cls) { parity_case("bert_cls"); }
END_TEST
START_TEST(test_parity_encdec_pre_rms_rope_mqa) { parity_case("encdec_pre_rms_rope_mqa"); }
END_TEST
START_TEST(test_parity_encdec_pre_gelu) { parity_case("encdec_pre_gelu"); }
END_TEST

/* ======================================================================== */
/* Tiny models                                                              */
/* ======================================================================== */

#define PAD 0

/* A batch of two: source [2, 5] (row 1 padded from 3), target [2, 4] (row 1
 * padded from 2), next-token labels (-100 at padding), class labels [2]. */
typedef struct batch {
  lt_tensor *src, *src_pad, *tgt, *tgt_pad, *labels, *cls;
} batch;

static batch make_batch(void) {
  batch b;
  const int64_t src[] = {3, 4, 5, 6, 7, 8, 9, 2, PAD, PAD};
  const bool src_pad[] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1};
  const int64_t tgt[] = {1, 2, 3, 4, 5, 6, PAD, PAD};
  const bool tgt_pad[] = {0, 0, 0, 0, 0, 0, 1, 1};
  const int64_t labels[] = {2, 3, 4, 5, 6, 7, -100, -100};
  const int64_t cls[] = {0, 2};
  b.src = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(2, 5), src));
  b.src_pad = LT_NN(lt_tensor_from_copy(LT_DTYPE_BOOL, LT_SHAPE(2, 5), src_pad));
  b.tgt = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(2, 4), tgt));
  b.tgt_pad = LT_NN(lt_tensor_from_copy(LT_DTYPE_BOOL, LT_SHAPE(2, 4), tgt_pad));
  b.labels = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(2, 4), labels));
  b.cls = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(2), cls));
  return b;
}

static void free_batch(batch *b) {
  lt_tensor *t[] = {b->src, b->src_pad, b->tgt, b->tgt_pad, b->labels, b->cls};
  for (size_t i = 0; i < sizeof t / sizeof *t; i++) lt_tensor_free(t[i]);
}

static lt_transformer *mk(const lt_tf_config *c, lt_generator *g) {
  lt_transformer *m = lt_transformer_new(c, g);
  ck_assert_msg(m, "transformer_new: %s", lt_last_error());
  return m;
}

static lt_tf_config tiny(lt_tf_arch arch) {
  lt_tf_config c = lt_tf_config_default(arch);
  c.vocab_size = 11;
  c.d_model = 8;
  c.n_heads = 4;
  c.n_kv_heads = 4;
  c.n_enc_layers = arch == LT_TF_DECODER_ONLY ? 0 : 1;
  c.n_dec_layers = arch == LT_TF_ENCODER_ONLY ? 0 : 2;
  c.d_ff = 12;
  c.max_len = 8;
  c.n_classes = arch == LT_TF_ENCODER_ONLY ? 3 : 0;
  c.dropout = 0.0;
  return c;
}

/* Logits of the architecture's task on b. Returns new. */
static lt_tensor *model_logits(const lt_transformer *m, const batch *b, const lt_nn_ctx *ctx) {
  const lt_tf_config *c = lt_transformer_config(m);
  if (c->arch == LT_TF_ENCODER_ONLY) return lt_transformer_classify(m, b->src, b->src_pad, ctx);
  if (c->arch == LT_TF_DECODER_ONLY) return lt_transformer_decode(m, b->tgt, b->tgt_pad, NULL, NULL, 0, ctx);
  lt_tensor *mem = lt_transformer_encode(m, b->src, b->src_pad, ctx);
  lt_tensor *out = mem ? lt_transformer_decode(m, b->tgt, b->tgt_pad, mem, b->src_pad, 0, ctx) : NULL;
  lt_tensor_free(mem);
  return out;
}

static lt_tensor *model_loss(const lt_transformer *m, const batch *b, const lt_nn_ctx *ctx) {
  lt_tensor *logits = model_logits(m, b, ctx);
  if (!logits) return NULL;
  bool cls = lt_transformer_config(m)->arch == LT_TF_ENCODER_ONLY;
  lt_tensor *loss = lt_cross_entropy(logits, cls ? b->cls : b->labels, NULL);
  lt_tensor_free(logits);
  return loss;
}

/* One forward + backward in a scope; every parameter gets a finite gradient. */
static void check_step(lt_transformer *m, const batch *b, const lt_nn_ctx *ctx, const char *what) {
  lt_params *p = lt_transformer_params(m);
  lt_scope *s = lt_scope_begin();
  lt_tensor *logits = model_logits(m, b, ctx);
  ck_assert_msg(logits, "%s: %s", what, lt_last_error());
  const lt_tf_config *c = lt_transformer_config(m);
  if (c->arch == LT_TF_ENCODER_ONLY) LT_ASSERT_SHAPE(logits, 2, c->n_classes);
  else LT_ASSERT_SHAPE(logits, 2, 4, c->vocab_size);
  lt_tensor *loss = model_loss(m, b, ctx);
  ck_assert_msg(loss, "%s: %s", what, lt_last_error());
  double v;
  LT_OK_OR_FAIL(lt_item(loss, &v));
  ck_assert_msg(isfinite(v) && v > 0, "%s: loss %g", what, v);
  ck_assert_msg(lt_backward(loss, NULL, false) == LT_OK, "%s: %s", what, lt_last_error());
  lt_scope_end(s);
  s = lt_scope_begin();
  for (int i = 0; i < lt_params_count(p); i++) {
    const lt_param *pr = lt_params_at(p, i);
    ck_assert_msg(pr->value->grad, "%s: %s has no gradient", what, pr->name);
    double gmax;
    LT_OK_OR_FAIL(lt_item(LT_NN(lt_amax(LT_NN(lt_abs(pr->value->grad)), 0, NULL, false)), &gmax));
    ck_assert_msg(isfinite(gmax), "%s: %s has a non-finite gradient", what, pr->name);
  }
  lt_scope_end(s);
  lt_params_zero_grad(p);
}

/* Every combination of the options builds, runs forward and backward and
 * gives every parameter a finite gradient (odd combinations train with
 * dropout 0.25). */
START_TEST(test_all_option_combinations) {
  /* One thread: these GEMMs are a few hundred flops, and BLIS's two threads
   * spend far longer in barriers than in work (minutes on a busy machine). */
  const int threads = lt_get_num_threads();
  LT_OK_OR_FAIL(lt_set_num_threads(1));
  batch b = make_batch();
  lt_generator *g = lt_generator_new(3);
  lt_nn_ctx train = {true, g};
  const lt_activation acts[] = {LT_ACT_RELU, LT_ACT_GELU, LT_ACT_GELU_TANH, LT_ACT_SILU};
  const int64_t kvs[] = {4, 2, 1};
  int n = 0;
  for (int arch = 0; arch < 3; arch++)
    for (int norm = 0; norm < 2; norm++)
      for (int pre = 0; pre < 2; pre++)
        for (int ffn = 0; ffn < 5; ffn++)
          for (int pos = 0; pos < 3; pos++)
            for (int tie = 0; tie < 2; tie++)
              for (int scale = 0; scale < 2; scale++)
                for (int bias = 0; bias < 2; bias++)
                  for (int kv = 0; kv < 3; kv++) {
                    if (arch == LT_TF_ENCODER_ONLY && tie) continue;
                    lt_tf_config c = tiny((lt_tf_arch)arch);
                    c.norm = (lt_tf_norm)norm;
                    c.pre_norm = pre;
                    c.act = acts[ffn == 4 ? 3 : ffn];
                    c.swiglu = ffn == 4;
                    c.pos = (lt_tf_pos)pos;
                    c.tie_embeddings = tie;
                    c.scale_embeddings = scale;
                    c.bias = bias;
                    c.n_kv_heads = kvs[kv];
                    c.dropout = n % 2 ? 0.25 : 0.0;
                    char what[160];
                    snprintf(what, sizeof what, "arch %d norm %d pre %d ffn %d pos %d tie %d scale %d bias %d kv %lld",
                             arch, norm, pre, ffn, pos, tie, scale, bias, (long long)c.n_kv_heads);
                    lt_transformer *m = lt_transformer_new(&c, g);
                    ck_assert_msg(m, "%s: %s", what, lt_last_error());
                    /* The size known before building is the built model's. */
                    int64_t np;
                    size_t nbytes;
                    LT_OK_OR_FAIL(lt_tf_config_size(&c, &np, &nbytes));
                    const int64_t table = c.pos == LT_TF_POS_SINUSOIDAL ? c.max_len * c.d_model : 0;
                    ck_assert_msg(np == lt_params_numel(lt_transformer_params(m), false), "%s: size %lld, built %lld",
                                  what, (long long)np, (long long)lt_params_numel(lt_transformer_params(m), false));
                    ck_assert_uint_eq(nbytes, (size_t)(np + table) * sizeof(float));
                    check_step(m, &b, n % 2 ? &train : NULL, what);
                    lt_transformer_free(m);
                    n++;
                  }
  ck_assert_int_eq(n, 2 * 2 * 2 * 5 * 3 * 2 * 2 * 2 * 3 + 2 * 2 * 5 * 3 * 2 * 2 * 3);
  lt_generator_free(g);
  free_batch(&b);
  LT_OK_OR_FAIL(lt_set_num_threads(threads));
}
END_TEST

/* ======================================================================== */
/* Masks, positions, dropout                                                */
/* ======================================================================== */

static lt_tensor *ids(int64_t B, int64_t L, const int64_t *v) {
  return LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(B, L), v));
}
static lt_tensor *mask(int64_t B, int64_t L, const bool *v) {
  return LT_NN(lt_tensor_from_copy(LT_DTYPE_BOOL, LT_SHAPE(B, L), v));
}

/* Rows [t0, t1) of x [B, L, ...] at batch index bi. */
static lt_tensor *rows(const lt_tensor *x, int64_t bi, int64_t t0, int64_t t1) {
  lt_tensor *r = LT_NN(lt_select(x, 0, bi));
  return LT_NN(lt_narrow(r, 0, t0, t1 - t0));
}

/* Tokens at padding positions change nothing at the other positions: the
 * source's in the encoder output and (through cross-attention) the logits;
 * the target's (left padding, so causality alone would not hide them) in
 * the decoder-only logits. A fully padded position gives finite values. */
START_TEST(test_padding_is_invisible) {
  lt_generator *g = lt_generator_new(5);
  for (int pre = 0; pre < 2; pre++) {
    lt_tf_config c = tiny(LT_TF_ENCODER_DECODER);
    c.pre_norm = pre;
    lt_transformer *m = mk(&c, g);
    lt_scope *s = lt_scope_begin();
    const bool sp[] = {0, 0, 0, 1, 1};
    const int64_t a[] = {3, 4, 5, PAD, PAD}, b2[] = {3, 4, 5, 9, 7}, t[] = {1, 2, 3};
    lt_tensor *pad = mask(1, 5, sp);
    lt_tensor *ma = LT_NN(lt_transformer_encode(m, ids(1, 5, a), pad, NULL));
    lt_tensor *mb = LT_NN(lt_transformer_encode(m, ids(1, 5, b2), pad, NULL));
    LT_ASSERT_CLOSE(rows(ma, 0, 0, 3), rows(mb, 0, 0, 3), 1e-6, 1e-6);
    lt_tensor *la = LT_NN(lt_transformer_decode(m, ids(1, 3, t), NULL, ma, pad, 0, NULL));
    lt_tensor *lb = LT_NN(lt_transformer_decode(m, ids(1, 3, t), NULL, mb, pad, 0, NULL));
    LT_ASSERT_CLOSE(la, lb, 1e-6, 1e-6);
    /* without the mask the padding tokens do matter */
    lt_tensor *na = LT_NN(lt_transformer_encode(m, ids(1, 5, a), NULL, NULL));
    lt_tensor *nb = LT_NN(lt_transformer_encode(m, ids(1, 5, b2), NULL, NULL));
    ck_assert(!lt_allclose(rows(na, 0, 0, 3), rows(nb, 0, 0, 3), 1e-4, 1e-4, false));
    lt_scope_end(s);
    lt_transformer_free(m);
  }
  lt_tf_config c = tiny(LT_TF_DECODER_ONLY);
  lt_transformer *m = mk(&c, g);
  lt_scope *s = lt_scope_begin();
  const bool tp[] = {1, 1, 0, 0, 0};
  const int64_t a[] = {PAD, PAD, 3, 4, 5}, b2[] = {7, 9, 3, 4, 5};
  lt_tensor *pad = mask(1, 5, tp);
  lt_tensor *la = LT_NN(lt_transformer_decode(m, ids(1, 5, a), pad, NULL, NULL, 0, NULL));
  lt_tensor *lb = LT_NN(lt_transformer_decode(m, ids(1, 5, b2), pad, NULL, NULL, 0, NULL));
  LT_ASSERT_CLOSE(rows(la, 0, 2, 5), rows(lb, 0, 2, 5), 1e-6, 1e-6);
  double v;
  lt_tensor *fin = LT_NN(lt_amax(LT_NN(lt_abs(la)), 0, NULL, false));
  LT_OK_OR_FAIL(lt_item(fin, &v));
  ck_assert(isfinite(v));
  lt_scope_end(s);
  lt_transformer_free(m);
  lt_generator_free(g);
}
END_TEST

/* The decoder is causal: changing the token at t changes no logits before t;
 * the encoder is not: it changes every position's output. */
START_TEST(test_causality) {
  lt_generator *g = lt_generator_new(6);
  for (int pos = 0; pos < 3; pos++) {
    lt_tf_config c = tiny(LT_TF_DECODER_ONLY);
    c.pos = (lt_tf_pos)pos;
    lt_transformer *m = mk(&c, g);
    lt_scope *s = lt_scope_begin();
    const int64_t a[] = {1, 2, 3, 4, 5, 6}, b2[] = {1, 2, 3, 9, 5, 6};
    lt_tensor *la = LT_NN(lt_transformer_decode(m, ids(1, 6, a), NULL, NULL, NULL, 0, NULL));
    lt_tensor *lb = LT_NN(lt_transformer_decode(m, ids(1, 6, b2), NULL, NULL, NULL, 0, NULL));
    LT_ASSERT_CLOSE(rows(la, 0, 0, 3), rows(lb, 0, 0, 3), 0, 0);
    ck_assert(!lt_allclose(rows(la, 0, 3, 6), rows(lb, 0, 3, 6), 1e-4, 1e-4, false));
    lt_scope_end(s);
    lt_transformer_free(m);
  }
  lt_tf_config c = tiny(LT_TF_ENCODER_DECODER);
  lt_transformer *m = mk(&c, g);
  lt_scope *s = lt_scope_begin();
  const int64_t a[] = {1, 2, 3, 4}, b2[] = {1, 2, 3, 9};
  lt_tensor *ea = LT_NN(lt_transformer_encode(m, ids(1, 4, a), NULL, NULL));
  lt_tensor *eb = LT_NN(lt_transformer_encode(m, ids(1, 4, b2), NULL, NULL));
  ck_assert(!lt_allclose(rows(ea, 0, 0, 1), rows(eb, 0, 0, 1), 1e-4, 1e-4, false));
  lt_scope_end(s);
  lt_transformer_free(m);
  lt_generator_free(g);
}
END_TEST

/* pos0 shifts the positions: a sequence decoded at pos0 = 2 sees the position
 * rows 2.. (learned, sinusoidal) or angles (RoPE), so it differs from pos0 = 0;
 * the maximum length bounds pos0 + T. */
START_TEST(test_pos0) {
  lt_generator *g = lt_generator_new(7);
  for (int pos = 0; pos < 3; pos++) {
    lt_tf_config c = tiny(LT_TF_DECODER_ONLY);
    c.pos = (lt_tf_pos)pos;
    lt_transformer *m = mk(&c, g);
    lt_scope *s = lt_scope_begin();
    const int64_t a[] = {1, 2, 3, 4};
    lt_tensor *t = ids(1, 4, a);
    lt_tensor *l0 = LT_NN(lt_transformer_decode(m, t, NULL, NULL, NULL, 0, NULL));
    lt_tensor *l2 = LT_NN(lt_transformer_decode(m, t, NULL, NULL, NULL, 2, NULL));
    LT_NN(lt_transformer_decode(m, t, NULL, NULL, NULL, 4, NULL)); /* 4 + 4 == max_len */
    if (pos == LT_TF_POS_ROPE) /* relative positions only: the first token sees itself alone */
      LT_ASSERT_CLOSE(rows(l0, 0, 0, 1), rows(l2, 0, 0, 1), 1e-5, 1e-5);
    else
      ck_assert(!lt_allclose(l0, l2, 1e-4, 1e-4, false));
    ck_assert(!lt_allclose(rows(l0, 0, 1, 4), rows(l2, 0, 1, 4), 1e-4, 1e-4, false) || pos == LT_TF_POS_ROPE);
    LT_EXPECT_NULL_ERR(lt_transformer_decode(m, t, NULL, NULL, NULL, 5, NULL), LT_ERR_INVALID, "max_len 8");
    LT_EXPECT_NULL_ERR(lt_transformer_decode(m, t, NULL, NULL, NULL, -1, NULL), LT_ERR_INVALID, "max_len");
    lt_scope_end(s);
    lt_transformer_free(m);
  }
  lt_generator_free(g);
}
END_TEST

/* Dropout: evaluation (ctx NULL or training false) is deterministic and equal
 * with either; training draws from ctx->gen (two draws differ, the same seed
 * repeats); training with dropout > 0 and no generator is an error. */
START_TEST(test_dropout_modes) {
  lt_generator *g = lt_generator_new(8);
  batch b = make_batch();
  for (int arch = 0; arch < 3; arch++) {
    lt_tf_config c = tiny((lt_tf_arch)arch);
    c.dropout = 0.3;
    lt_transformer *m = mk(&c, g);
    lt_scope *s = lt_scope_begin();
    lt_nn_ctx eval = {false, NULL};
    lt_tensor *e1 = LT_NN(model_logits(m, &b, NULL)), *e2 = LT_NN(model_logits(m, &b, &eval));
    LT_ASSERT_CLOSE(e1, e2, 0, 0);
    lt_generator *d1 = lt_generator_new(99), *d2 = lt_generator_new(99);
    lt_nn_ctx t1 = {true, d1}, t2 = {true, d2};
    lt_tensor *a = LT_NN(model_logits(m, &b, &t1)), *a2 = LT_NN(model_logits(m, &b, &t1));
    lt_tensor *r = LT_NN(model_logits(m, &b, &t2));
    LT_ASSERT_CLOSE(a, r, 0, 0);
    ck_assert(!lt_allclose(a, a2, 1e-4, 1e-4, false));
    ck_assert(!lt_allclose(a, e1, 1e-4, 1e-4, false));
    lt_nn_ctx nogen = {true, NULL};
    LT_EXPECT_NULL_ERR(model_logits(m, &b, &nogen), LT_ERR_INVALID, "gen");
    lt_generator_free(d1);
    lt_generator_free(d2);
    lt_scope_end(s);
    lt_transformer_free(m);
  }
  free_batch(&b);
  lt_generator_free(g);
}
END_TEST

/* ======================================================================== */
/* Encoder-only classifier                                                  */
/* ======================================================================== */

/* [B, n_classes]; the pooled mean skips padding (padding tokens change
 * nothing); a row of padding only pools to zeros (output = classifier bias). */
START_TEST(test_classify) {
  lt_generator *g = lt_generator_new(9);
  lt_tf_config c = tiny(LT_TF_ENCODER_ONLY);
  lt_transformer *m = mk(&c, g);
  lt_scope *s = lt_scope_begin();
  const int64_t a[] = {3, 4, 5, PAD, 1, 2, 3, 4}, b2[] = {3, 4, 5, 8, 9, 9, 9, 9};
  const bool pad[] = {0, 0, 0, 1, 1, 1, 1, 1};
  lt_tensor *pm = mask(2, 4, pad);
  lt_tensor *ya = LT_NN(lt_transformer_classify(m, ids(2, 4, a), pm, NULL));
  lt_tensor *yb = LT_NN(lt_transformer_classify(m, ids(2, 4, b2), pm, NULL));
  LT_ASSERT_SHAPE(ya, 2, 3);
  LT_ASSERT_CLOSE(ya, yb, 1e-6, 1e-6);
  lt_tensor *bias = LT_NN(lt_params_find(lt_transformer_params(m), "classifier.bias"));
  LT_ASSERT_CLOSE(LT_NN(lt_select(ya, 0, 1)), bias, 1e-6, 1e-6);
  /* no mask: the plain mean over all positions */
  lt_tensor *y0 = LT_NN(lt_transformer_classify(m, ids(2, 4, a), NULL, NULL));
  LT_ASSERT_SHAPE(y0, 2, 3);
  ck_assert(!lt_allclose(y0, ya, 1e-4, 1e-4, false));
  lt_scope_end(s);
  lt_transformer_free(m);
  lt_generator_free(g);
}
END_TEST

/* ======================================================================== */
/* Construction: defaults, names, counts, determinism                       */
/* ======================================================================== */

static bool has(lt_transformer *m, const char *name) { return lt_params_find(lt_transformer_params(m), name) != NULL; }

START_TEST(test_defaults_and_names) {
  lt_generator *g = lt_generator_new(10);
  lt_tf_config c = lt_tf_config_default(LT_TF_ENCODER_DECODER);
  ck_assert_int_eq(c.d_model, 128);
  ck_assert_int_eq(c.n_heads, 4);
  ck_assert_int_eq(c.d_ff, 512);
  ck_assert(!c.pre_norm && c.act == LT_ACT_RELU && c.pos == LT_TF_POS_SINUSOIDAL && c.tie_embeddings &&
            c.scale_embeddings && c.dropout == 0.1);
  LT_EXPECT_ERR(lt_tf_config_validate(&c), LT_ERR_INVALID, "vocab_size");
  c.vocab_size = 100;
  LT_OK_OR_FAIL(lt_tf_config_validate(&c));
  lt_tf_config d = lt_tf_config_default(LT_TF_DECODER_ONLY);
  ck_assert(d.pre_norm && d.act == LT_ACT_GELU && d.pos == LT_TF_POS_LEARNED && d.tie_embeddings &&
            !d.scale_embeddings);
  d.vocab_size = 100;
  LT_OK_OR_FAIL(lt_tf_config_validate(&d));
  lt_tf_config e = lt_tf_config_default(LT_TF_ENCODER_ONLY);
  e.vocab_size = 100;
  LT_OK_OR_FAIL(lt_tf_config_validate(&e));
  /* the defaults build and train a step (training mode: dropout 0.1) */
  {
    batch b = make_batch();
    lt_nn_ctx train = {true, g};
    e.n_classes = 3;
    const lt_tf_config *defs[] = {&c, &d, &e};
    for (int i = 0; i < 3; i++) {
      lt_transformer *m = mk(defs[i], g);
      check_step(m, &b, &train, "default config");
      lt_transformer_free(m);
    }
    free_batch(&b);
  }

  c = tiny(LT_TF_ENCODER_DECODER);
  lt_transformer *m = mk(&c, g);
  const char *want[] = {"embed.weight", "encoder.layers.0.self_attn.q_proj.weight",
                        "encoder.layers.0.self_attn.out_proj.bias", "encoder.layers.0.linear1.weight",
                        "encoder.layers.0.linear2.bias", "encoder.layers.0.norm1.weight",
                        "encoder.layers.0.norm2.bias", "encoder.norm.weight", "encoder.norm.bias",
                        "decoder.layers.1.self_attn.k_proj.weight", "decoder.layers.1.cross_attn.v_proj.bias",
                        "decoder.layers.1.norm3.weight", "decoder.norm.bias"};
  for (size_t i = 0; i < sizeof want / sizeof *want; i++) ck_assert_msg(has(m, want[i]), "%s missing", want[i]);
  ck_assert(!has(m, "lm_head.weight") && !has(m, "pos_embed.weight") && !has(m, "encoder.layers.1.norm1.weight"));
  /* sinusoidal table: no parameter, embed [V, C]; counted by hand:
   * embed 11*8; encoder layer: attn 4*(64+8), ffn 8*12+12+12*8+8, norms 2*16; + norm 16;
   * decoder layer: 2 attn + ffn + 3 norms; + norm 16 */
  const int64_t attn = 4 * (64 + 8), ffn = 8 * 12 + 12 + 12 * 8 + 8;
  ck_assert_int_eq(lt_params_numel(lt_transformer_params(m), false),
                   11 * 8 + (attn + ffn + 32) + 16 + 2 * (2 * attn + ffn + 48) + 16);
  lt_transformer_free(m);

  d = tiny(LT_TF_DECODER_ONLY);
  d.tie_embeddings = false;
  d.swiglu = true;
  d.act = LT_ACT_SILU;
  d.norm = LT_TF_RMS_NORM;
  d.n_kv_heads = 2;
  m = mk(&d, g);
  ck_assert(has(m, "pos_embed.weight") && has(m, "lm_head.weight") && has(m, "decoder.layers.0.w3.weight") &&
            has(m, "decoder.norm.weight") && !has(m, "decoder.norm.bias") &&
            !has(m, "decoder.layers.0.cross_attn.q_proj.weight") && !has(m, "encoder.norm.weight"));
  ck_assert_int_eq(LT_NN(lt_params_find(lt_transformer_params(m), "decoder.layers.0.self_attn.k_proj.weight"))->shape[0],
                   4); /* 2 kv heads of size 2 */
  lt_transformer_free(m);
  d = tiny(LT_TF_DECODER_ONLY);
  d.pre_norm = false; /* post-norm decoder-only: no final norm */
  m = mk(&d, g);
  ck_assert(!has(m, "decoder.norm.weight"));
  lt_transformer_free(m);

  e = tiny(LT_TF_ENCODER_ONLY);
  m = mk(&e, g);
  ck_assert(has(m, "classifier.weight") && has(m, "classifier.bias") && !has(m, "encoder.norm.weight") &&
            !has(m, "decoder.layers.0.norm1.weight") && !has(m, "lm_head.weight"));
  ck_assert_int_eq(lt_transformer_config(m)->n_classes, 3);
  lt_transformer_free(m);
  lt_generator_free(g);
}
END_TEST

/* The same seed builds the same weights; another seed others. The padding row
 * of the embedding starts at zero; scaled embeddings start at N(0, 1/C). */
START_TEST(test_init_deterministic) {
  lt_tf_config c = tiny(LT_TF_ENCODER_DECODER);
  c.d_model = 64;
  c.vocab_size = 500;
  lt_generator *g1 = lt_generator_new(11), *g2 = lt_generator_new(11), *g3 = lt_generator_new(12);
  lt_transformer *a = mk(&c, g1), *b = mk(&c, g2);
  lt_transformer *d = mk(&c, g3);
  lt_params *pa = lt_transformer_params(a), *pb = lt_transformer_params(b), *pd = lt_transformer_params(d);
  ck_assert_int_eq(lt_params_count(pa), lt_params_count(pb));
  for (int i = 0; i < lt_params_count(pa); i++) {
    ck_assert_str_eq(lt_params_at(pa, i)->name, lt_params_at(pb, i)->name);
    ck_assert(lt_equal(lt_params_at(pa, i)->value, lt_params_at(pb, i)->value));
  }
  ck_assert(!lt_equal(lt_params_find(pa, "embed.weight"), lt_params_find(pd, "embed.weight")));
  lt_scope *s = lt_scope_begin();
  lt_tensor *emb = lt_params_find(pa, "embed.weight");
  double v;
  LT_OK_OR_FAIL(lt_item(LT_NN(lt_amax(LT_NN(lt_abs(LT_NN(lt_select(emb, 0, PAD)))), 0, NULL, false)), &v));
  ck_assert(v == 0.0);
  LT_OK_OR_FAIL(lt_item(LT_NN(lt_std(emb, 0, NULL, false, false)), &v));
  ck_assert_msg(fabs(v - 1.0 / 8.0) < 0.01, "embedding std %g, want about 1/sqrt(64)", v);
  lt_scope_end(s);
  lt_transformer_free(a);
  lt_transformer_free(b);
  lt_transformer_free(d);
  lt_generator_free(g1);
  lt_generator_free(g2);
  lt_generator_free(g3);
}
END_TEST

/* ======================================================================== */
/* Errors                                                                   */
/* ======================================================================== */

/* Breaks field case i of the table in test_config_validation. */
static const char *break_field(lt_tf_config *c, int i) {
  switch (i) {
    case 0: c->arch = (lt_tf_arch)7; return "arch";
    case 1: c->vocab_size = 0; return "vocab_size";
    case 2: c->d_model = 0; return "d_model";
    case 3: c->n_heads = 0; return "n_heads";
    case 4: c->n_heads = 3; return "n_heads 3";
    case 5: c->n_kv_heads = 0; return "n_kv_heads";
    case 6: c->n_kv_heads = 3; return "n_kv_heads 3";
    case 7: c->n_enc_layers = 0; return "n_enc_layers";
    case 8: c->n_dec_layers = 0; return "n_dec_layers";
    case 9: c->d_ff = 0; return "d_ff";
    case 10: c->max_len = 0; return "max_len";
    case 11: c->dropout = 1.5; return "dropout";
    case 12: c->dropout = NAN; return "dropout";
    case 13: c->norm = (lt_tf_norm)5; return "norm";
    case 14: c->act = (lt_activation)9; return "act 9";
    case 15: c->pos = LT_TF_POS_RELATIVE; c->rel_buckets = 2; c->rel_max_distance = 8; return "rel_buckets 2";
    case 16: c->pos = (lt_tf_pos)4; return "pos 4";
    case 17: c->pos = LT_TF_POS_ROPE; c->d_model = 12; c->n_heads = 4; c->n_kv_heads = 4; return "even head size";
    case 18: c->pos = LT_TF_POS_ROPE; c->rope_base = 0; return "rope_base";
    case 19: c->norm_eps = -1; return "norm_eps";
    case 20: c->norm_eps = INFINITY; return "norm_eps";
    case 21: c->pad_id = 11; return "pad_id";
    case 22: c->pad_id = -2; return "pad_id";
    case 23: c->n_classes = -1; return "n_classes";
    case 24: c->n_enc_layers = -1; return "n_enc_layers";
    default: return NULL;
  }
}

/* Each broken field is refused with a message naming it. */
/* The size of a configuration, without building it: a huge model is
 * sized at once, overflow is an error naming the term. */
START_TEST(test_config_size) {
  lt_tf_config c = tiny(LT_TF_DECODER_ONLY);
  c.n_dec_layers = LT_TF_HI_n_dec_layers;
  c.d_ff = LT_TF_HI_d_ff;
  int64_t np = 0;
  size_t bytes = 0;
  LT_OK_OR_FAIL(lt_tf_config_size(&c, &np, &bytes));
  ck_assert_int_gt(np, (int64_t)LT_TF_HI_n_dec_layers * 2 * LT_TF_HI_d_ff * 8);
  ck_assert_uint_eq(bytes, (size_t)np * sizeof(float));
  c = tiny(LT_TF_DECODER_ONLY);
  c.vocab_size = (int64_t)1 << 62; /* x d_model overflows */
  c.n_heads = 1;
  c.n_kv_heads = 1;
  LT_EXPECT_ERR(lt_tf_config_size(&c, &np, &bytes), LT_ERR_OVERFLOW, "overflows 64-bit arithmetic");
  c = tiny(LT_TF_DECODER_ONLY);
  c.d_model = 7; /* not divisible by 4 heads */
  LT_EXPECT_ERR(lt_tf_config_size(&c, NULL, NULL), LT_ERR_INVALID, "n_heads");
}
END_TEST

START_TEST(test_config_validation) {
  lt_generator *g = lt_generator_new(1);
  for (int i = 0;; i++) {
    lt_tf_config c = tiny(LT_TF_ENCODER_DECODER);
    const char *field = break_field(&c, i);
    if (!field) break;
    LT_EXPECT_ERR(lt_tf_config_validate(&c), LT_ERR_INVALID, field);
    lt_generator_state st = lt_generator_get_state(g);
    LT_EXPECT_NULL_ERR((lt_tensor *)lt_transformer_new(&c, g), LT_ERR_INVALID, field);
    lt_generator_state st2 = lt_generator_get_state(g);
    ck_assert(memcmp(&st, &st2, sizeof st) == 0);
  }
  /* layer counts: only the stacks an architecture has must be non-empty */
  lt_tf_config c = tiny(LT_TF_DECODER_ONLY);
  c.n_enc_layers = 0;
  LT_OK_OR_FAIL(lt_tf_config_validate(&c));
  c.n_dec_layers = 0;
  LT_EXPECT_ERR(lt_tf_config_validate(&c), LT_ERR_INVALID, "n_dec_layers");
  c = tiny(LT_TF_ENCODER_ONLY);
  c.n_classes = 0; /* an encoder without a classifier (BertModel): valid */
  LT_OK_OR_FAIL(lt_tf_config_validate(&c));
  c.n_classes = -1;
  LT_EXPECT_ERR(lt_tf_config_validate(&c), LT_ERR_INVALID, "n_classes");
  c = tiny(LT_TF_ENCODER_ONLY);
  c.tie_embeddings = true;
  LT_EXPECT_ERR(lt_tf_config_validate(&c), LT_ERR_INVALID, "tie_embeddings");
  c = tiny(LT_TF_ENCODER_DECODER);
  c.pad_id = -1; /* no padding id */
  LT_OK_OR_FAIL(lt_tf_config_validate(&c));
  LT_EXPECT_ERR(lt_tf_config_validate(NULL), LT_ERR_NULL, "cfg");
  LT_EXPECT_NULL_ERR((lt_tensor *)lt_transformer_new(NULL, g), LT_ERR_NULL, "cfg");
  c = tiny(LT_TF_ENCODER_DECODER);
  LT_EXPECT_NULL_ERR((lt_tensor *)lt_transformer_new(&c, NULL), LT_ERR_NULL, "generator");
  lt_transformer_free(NULL);
  ck_assert(lt_transformer_params(NULL) == NULL && lt_transformer_config(NULL) == NULL);
  lt_generator_free(g);
}
END_TEST

/* Wrong inputs: an error naming the argument, NULL, nothing leaked. */
START_TEST(test_input_errors) {
  lt_generator *g = lt_generator_new(2);
  lt_tf_config ce = tiny(LT_TF_ENCODER_DECODER), cd = tiny(LT_TF_DECODER_ONLY), cc = tiny(LT_TF_ENCODER_ONLY);
  lt_transformer *ed = mk(&ce, g), *dec = mk(&cd, g), *enc = mk(&cc, g);
  batch b = make_batch();
  lt_tensor *mem = LT_NN(lt_transformer_encode(ed, b.src, b.src_pad, NULL));
  const int64_t live = lt__live_tensors();
  lt_tensor *f32 = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(2, 5)));
  lt_tensor *one_d = LT_NN(lt_zeros(LT_DTYPE_I64, LT_SHAPE(5)));
  lt_tensor *empty = LT_NN(lt_zeros(LT_DTYPE_I64, LT_SHAPE(2, 0)));
  lt_tensor *long_ids = LT_NN(lt_zeros(LT_DTYPE_I64, LT_SHAPE(2, 9)));
  lt_tensor *bad_id = LT_NN(lt_full(LT_DTYPE_I64, LT_SHAPE(2, 5), 11));
  lt_tensor *pad_f = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(2, 5)));
  lt_tensor *pad_short = LT_NN(lt_zeros(LT_DTYPE_BOOL, LT_SHAPE(2, 4)));
  lt_tensor *mem_bad = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(2, 5, 7)));
  lt_tensor *mem_b = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(3, 5, 8)));
  const int64_t live2 = lt__live_tensors();

  LT_EXPECT_NULL_ERR(lt_transformer_encode(NULL, b.src, NULL, NULL), LT_ERR_NULL, "model");
  LT_EXPECT_NULL_ERR(lt_transformer_encode(ed, NULL, NULL, NULL), LT_ERR_NULL, "src");
  LT_EXPECT_NULL_ERR(lt_transformer_encode(ed, f32, NULL, NULL), LT_ERR_DTYPE, "src");
  LT_EXPECT_NULL_ERR(lt_transformer_encode(ed, one_d, NULL, NULL), LT_ERR_SHAPE, "src");
  LT_EXPECT_NULL_ERR(lt_transformer_encode(ed, empty, NULL, NULL), LT_ERR_SHAPE, "at least one");
  LT_EXPECT_NULL_ERR(lt_transformer_encode(ed, long_ids, NULL, NULL), LT_ERR_INVALID, "max_len");
  LT_EXPECT_NULL_ERR(lt_transformer_encode(ed, b.src, pad_f, NULL), LT_ERR_SHAPE, "src_pad");
  LT_EXPECT_NULL_ERR(lt_transformer_encode(ed, b.src, pad_short, NULL), LT_ERR_SHAPE, "src_pad");
  ck_assert(lt_transformer_encode(ed, bad_id, NULL, NULL) == NULL);  /* the embedding's range error */
  ck_assert_msg(strstr(lt_last_error(), "11"), "%s", lt_last_error());
  LT_EXPECT_NULL_ERR(lt_transformer_encode(dec, b.src, NULL, NULL), LT_ERR_INVALID, "decoder-only");

  LT_EXPECT_NULL_ERR(lt_transformer_decode(ed, b.tgt, b.tgt_pad, NULL, NULL, 0, NULL), LT_ERR_NULL, "memory");
  LT_EXPECT_NULL_ERR(lt_transformer_decode(ed, b.tgt, b.tgt_pad, mem_bad, NULL, 0, NULL), LT_ERR_SHAPE, "memory");
  LT_EXPECT_NULL_ERR(lt_transformer_decode(ed, b.tgt, b.tgt_pad, mem_b, NULL, 0, NULL), LT_ERR_SHAPE, "memory");
  LT_EXPECT_NULL_ERR(lt_transformer_decode(ed, b.tgt, b.tgt_pad, mem, pad_short, 0, NULL), LT_ERR_SHAPE, "src_pad");
  LT_EXPECT_NULL_ERR(lt_transformer_decode(ed, b.tgt, b.src_pad, mem, b.src_pad, 0, NULL), LT_ERR_SHAPE, "tgt_pad");
  LT_EXPECT_NULL_ERR(lt_transformer_decode(ed, NULL, NULL, mem, NULL, 0, NULL), LT_ERR_NULL, "tgt");
  LT_EXPECT_NULL_ERR(lt_transformer_decode(dec, b.tgt, NULL, mem, NULL, 0, NULL), LT_ERR_INVALID, "decoder-only");
  LT_EXPECT_NULL_ERR(lt_transformer_decode(enc, b.tgt, NULL, NULL, NULL, 0, NULL), LT_ERR_INVALID, "encoder-only");
  LT_EXPECT_NULL_ERR(lt_transformer_decode(dec, long_ids, NULL, NULL, NULL, 0, NULL), LT_ERR_INVALID, "max_len");
  LT_EXPECT_NULL_ERR(lt_transformer_classify(ed, b.src, NULL, NULL), LT_ERR_INVALID, "encoder-only");
  LT_EXPECT_NULL_ERR(lt_transformer_classify(enc, f32, NULL, NULL), LT_ERR_DTYPE, "src");
  ck_assert_int_eq(lt__live_tensors(), live2);

  /* failures in the middle of a forward (training with dropout and no
   * generator fails at the first dropout, after the embedding) free what
   * they made */
  lt_tf_config cdrop = tiny(LT_TF_ENCODER_DECODER);
  cdrop.dropout = 0.5;
  lt_transformer *md = mk(&cdrop, g);
  const int64_t live3 = lt__live_tensors();
  lt_nn_ctx nogen = {true, NULL};
  ck_assert(lt_transformer_encode(md, b.src, b.src_pad, &nogen) == NULL);
  ck_assert(lt_transformer_decode(md, b.tgt, b.tgt_pad, mem, b.src_pad, 0, &nogen) == NULL);
  ck_assert_int_eq(lt__live_tensors(), live3);
  lt_transformer_free(md);

  lt_tensor *ts[] = {f32, one_d, empty, long_ids, bad_id, pad_f, pad_short, mem_bad, mem_b};
  for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) lt_tensor_free(ts[i]);
  ck_assert_int_eq(lt__live_tensors(), live);
  lt_tensor_free(mem);
  free_batch(&b);
  lt_transformer_free(ed);
  lt_transformer_free(dec);
  lt_transformer_free(enc);
  lt_generator_free(g);
}
END_TEST

/* A build that fails part-way (the classifier, built last, too big to
 * describe) returns NULL, frees what it had made and leaves the generator as
 * it was. */
START_TEST(test_build_failure_rolls_back) {
  lt_generator *g = lt_generator_new(4);
  lt_tf_config c = tiny(LT_TF_ENCODER_ONLY);
  c.n_classes = (int64_t)1 << 60; /* [n_classes, 8] overflows the element count */
  const int64_t live = lt__live_tensors();
  lt_generator_state st = lt_generator_get_state(g);
  ck_assert(lt_transformer_new(&c, g) == NULL);
  ck_assert_msg(strstr(lt_last_error(), "transformer_new"), "%s", lt_last_error());
  ck_assert_int_eq(lt__live_tensors(), live);
  lt_generator_state st2 = lt_generator_get_state(g);
  ck_assert(memcmp(&st, &st2, sizeof st) == 0);
  lt_generator_free(g);
}
END_TEST

/* ======================================================================== */
/* No leaks across training steps                                           */
/* ======================================================================== */

START_TEST(test_no_leaks_across_steps) {
  lt_generator *g = lt_generator_new(12);
  batch b = make_batch();
  const int64_t base = lt__live_tensors(), base_st = lt__live_storages();
  for (int arch = 0; arch < 3; arch++) {
    lt_tf_config c = tiny((lt_tf_arch)arch);
    c.dropout = 0.1;
    c.pos = arch == 1 ? LT_TF_POS_ROPE : LT_TF_POS_SINUSOIDAL;
    lt_transformer *m = mk(&c, g);
    lt_params *p = lt_transformer_params(m);
    lt_optim_config oc = lt_optim_defaults(LT_OPTIM_ADAMW);
    lt_optimizer *opt = lt_optimizer_new(p, &oc);
    ck_assert(opt);
    lt_nn_ctx train = {true, g};
    const int64_t built = lt__live_tensors();
    int64_t after_first = -1, after_first_st = -1;
    double first = 0, last = 0;
    for (int step = 0; step < 6; step++) {
      lt_params_zero_grad(p);
      lt_scope *s = lt_scope_begin();
      lt_tensor *loss = model_loss(m, &b, &train);
      ck_assert_msg(loss, "%s", lt_last_error());
      LT_OK_OR_FAIL(lt_item(loss, step == 0 ? &first : &last));
      LT_OK_OR_FAIL(lt_backward(loss, NULL, false));
      lt_scope_end(s);
      LT_OK_OR_FAIL(lt_optimizer_step(opt));
      if (step == 1) {
        after_first = lt__live_tensors();
        after_first_st = lt__live_storages();
      } else if (step > 1) {
        ck_assert_int_eq(lt__live_tensors(), after_first);
        ck_assert_int_eq(lt__live_storages(), after_first_st);
      }
    }
    lt_params_zero_grad(p);
    lt_optimizer_free(opt);
    ck_assert_int_eq(lt__live_tensors(), built);
    lt_transformer_free(m);
    ck_assert_int_eq(lt__live_tensors(), base);
    ck_assert_int_eq(lt__live_storages(), base_st);
  }
  free_batch(&b);
  lt_generator_free(g);
}
END_TEST

/* Training on the tiny batch lowers the loss (a smoke test of the whole
 * path: forward, cross-entropy, backward, AdamW). */
START_TEST(test_overfits_tiny_batch) {
  lt_generator *g = lt_generator_new(13);
  batch b = make_batch();
  for (int arch = 0; arch < 3; arch++) {
    lt_tf_config c = tiny((lt_tf_arch)arch);
    c.d_model = 16;
    lt_transformer *m = mk(&c, g);
    lt_params *p = lt_transformer_params(m);
    lt_optim_config oc = lt_optim_defaults(LT_OPTIM_ADAMW);
    oc.lr = 1e-2;
    lt_optimizer *opt = lt_optimizer_new(p, &oc);
    double first = 0, last = 0;
    for (int step = 0; step < 60; step++) {
      lt_params_zero_grad(p);
      lt_scope *s = lt_scope_begin();
      lt_tensor *loss = model_loss(m, &b, NULL);
      ck_assert_msg(loss, "%s", lt_last_error());
      LT_OK_OR_FAIL(lt_item(loss, step == 0 ? &first : &last));
      LT_OK_OR_FAIL(lt_backward(loss, NULL, false));
      lt_scope_end(s);
      LT_OK_OR_FAIL(lt_optimizer_step(opt));
    }
    ck_assert_msg(last < 0.2 * first, "arch %d: loss %g -> %g", arch, first, last);
    lt_params_zero_grad(p);
    lt_optimizer_free(opt);
    lt_transformer_free(m);
  }
  free_batch(&b);
  lt_generator_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("transformer");
  LT_TEST_CASE(s, "pytorch", 0, test_parity_encdec_post, test_parity_gpt_pre_gelu,
               test_parity_llama_rms_rope_gqa, test_parity_bert_cls,
               test_parity_encdec_pre_rms_rope_mqa, test_parity_encdec_pre_gelu);
  LT_TEST_CASE(s, "model", 0, test_all_option_combinations, test_padding_is_invisible,
               test_causality, test_pos0, test_dropout_modes, test_classify,
               test_defaults_and_names, test_init_deterministic, test_overfits_tiny_batch);
  LT_TEST_CASE(s, "errors", 0, test_config_validation, test_config_size, test_input_errors,
               test_build_failure_rolls_back, test_no_leaks_across_steps);
  return lt_test_run(s);
}
