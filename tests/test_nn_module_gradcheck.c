/*
 * tests/test_nn_module_gradcheck.c: every nn/ module, built by its _init in
 * f32 as users build it and converted with lt_params_to_dtype(p, F64)
 * (PyTorch's model.double()), passes lt_gradcheck with respect to its float
 * inputs and every one of its parameters at once: Linear (with and without
 * bias), Embedding (with padding_idx), LayerNorm (affine or not), RMSNorm,
 * the feed-forward blocks (two-layer with each activation, SwiGLU),
 * multi-head attention (self and cross, GQA and MQA, RoPE, causal, key
 * padding and additive masks), the Transformer encoder and decoder layers
 * (nn/transformer_layer.h: post- and pre-norm, GELU, RMSNorm + SwiGLU + GQA +
 * RoPE, masks), learned and sinusoidal positions, dropout with
 * p = 0 and with a fixed seed (the generator is rewound before every
 * evaluation, so the mask is the same each time), and a whole tiny
 * Transformer (models/transformer) of each architecture, and BERT's extras
 * (token types, embedding norm, pooler, sentence embeddings).
 *
 * What this is not: a check of values against PyTorch (test_nn_pytorch.c)
 * or of the functional ops one by one (tests/gradcases_*.inc).
 */
#include <stdio.h>
#include <string.h>

#include "models/transformer/transformer.h"
#include "nn/nn.h"
#include "nn/transformer_layer.h"
#include "test_util.h"

/* ---- the runner ------------------------------------------------------------ */

typedef struct mod_case mod_case;
/* Forward of the module under test from the data inputs x[0..nx). */
typedef lt_tensor *(*mod_forward)(const mod_case *c, lt_tensor *const *x);

enum { MAX_IN = 64 };

struct mod_case {
  const char *name;
  mod_forward fwd;
  int nx;                   /* data inputs (first in the gradcheck list) */
  lt_generator *dropout;    /* rewound to dropout_state before each evaluation, or NULL */
  lt_generator_state dropout_state;
  bool training;
  /* the module (one of) */
  lt_linear_m lin;
  lt_embedding_m emb;
  lt_layer_norm_m ln;
  lt_rms_norm_m rms;
  lt_ffn ffn;
  lt_mha mha;
  lt_attention_opts attn;
  lt_tensor *ids;           /* embedding / positions input (i64) */
  lt_tensor *table;         /* sinusoidal positions: a float buffer of the store */
  double p_drop;
  lt_transformer *tf;
  lt_tensor *src_pad;
  lt_transformer_layer tl;  /* nn/transformer_layer.h */
  lt_attention_opts mem_attn;
};

static lt_tensor *gc_fn(int n, lt_tensor *const *inputs, void *user) {
  (void)n;
  const mod_case *c = user;
  if (c->dropout) lt_generator_set_state(c->dropout, c->dropout_state);
  return c->fwd(c, inputs);
}

/* Converts p to f64 and gradchecks the module w.r.t. the data inputs x and
 * every parameter of p (buffers excluded). Frees x. */
static void check_module(mod_case *c, lt_params *p, int nx, lt_tensor **x) {
  LT_OK_OR_FAIL(lt_params_to_dtype(p, LT_DTYPE_F64));
  lt_tensor *in[MAX_IN];
  int n = 0;
  for (int i = 0; i < nx; i++) {
    lt_tensor *d = LT_NN(lt_to_dtype(x[i], LT_DTYPE_F64));
    lt_tensor_free(x[i]);
    LT_OK_OR_FAIL(lt_requires_grad_(d, true));
    in[n++] = d;
  }
  int nparams = 0;
  for (int i = 0; i < lt_params_count(p); i++) {
    const lt_param *q = lt_params_at(p, i);
    if (q->flags & LT_PARAM_BUFFER) continue;
    ck_assert_int_eq(q->value->dtype, LT_DTYPE_F64);
    ck_assert_int_lt(n, MAX_IN);
    in[n++] = q->value;
    nparams++;
  }
  c->nx = nx;
  if (c->dropout) c->dropout_state = lt_generator_get_state(c->dropout);
  lt_status s = lt_gradcheck(gc_fn, c, n, in, NULL);
  ck_assert_msg(s == LT_OK, "%s: %s", c->name, lt_last_error());
  printf("module gradcheck: %-44s %d input(s), %d parameter tensor(s): ok\n", c->name, nx, nparams);
  for (int i = 0; i < nx; i++) lt_tensor_free(in[i]);
}

static lt_tensor *randn(lt_generator *g, int ndim, const int64_t *shape) {
  return LT_NN(lt_randn(g, LT_DTYPE_F32, ndim, shape));
}

static lt_nn_ctx ctx_of(const mod_case *c) { return (lt_nn_ctx){c->training, c->dropout}; }

/* ---- Linear, Embedding, norms ------------------------------------------------ */

static lt_tensor *fwd_linear(const mod_case *c, lt_tensor *const *x) { return lt_linear_forward(&c->lin, x[0]); }

START_TEST(test_linear) {
  for (int bias = 0; bias < 2; bias++) {
    lt_generator *g = lt_generator_new(1);
    lt_params *p = lt_params_new();
    mod_case c = {.name = bias ? "Linear(4, 5)" : "Linear(4, 5, bias=False)", .fwd = fwd_linear};
    LT_OK_OR_FAIL(lt_linear_init(&c.lin, p, "fc", 4, 5, bias, g));
    lt_tensor *x[1] = {randn(g, LT_SHAPE(2, 3, 4))};
    check_module(&c, p, 1, x);
    lt_params_free(p);
    lt_generator_free(g);
  }
}
END_TEST

static lt_tensor *fwd_embedding(const mod_case *c, lt_tensor *const *x) {
  (void)x;
  return lt_embedding_forward(&c->emb, c->ids);
}

START_TEST(test_embedding) {
  /* padding_idx 1: its row gets no gradient, so the ids avoid it here (its
   * zero gradient is checked in test_params.c). */
  lt_generator *g = lt_generator_new(2);
  lt_params *p = lt_params_new();
  mod_case c = {.name = "Embedding(7, 3, padding_idx=1)", .fwd = fwd_embedding};
  LT_OK_OR_FAIL(lt_embedding_init(&c.emb, p, "emb", 7, 3, 1, g));
  int64_t ids[6] = {0, 2, 6, 2, 5, 3};
  c.ids = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(2, 3), ids));
  check_module(&c, p, 0, NULL);
  lt_tensor_free(c.ids);
  lt_params_free(p);
  lt_generator_free(g);
}
END_TEST

static lt_tensor *fwd_ln(const mod_case *c, lt_tensor *const *x) { return lt_layer_norm_forward(&c->ln, x[0]); }
static lt_tensor *fwd_rms(const mod_case *c, lt_tensor *const *x) { return lt_rms_norm_forward(&c->rms, x[0]); }

START_TEST(test_norms) {
  for (int k = 0; k < 3; k++) {
    lt_generator *g = lt_generator_new(3);
    lt_params *p = lt_params_new();
    mod_case c = {.name = k == 0 ? "LayerNorm(6)" : k == 1 ? "LayerNorm(6, elementwise_affine=False)" : "RMSNorm(6)",
                  .fwd = k < 2 ? fwd_ln : fwd_rms};
    if (k < 2) LT_OK_OR_FAIL(lt_layer_norm_init(&c.ln, p, "norm", 6, 1e-5, k == 0));
    else LT_OK_OR_FAIL(lt_rms_norm_init(&c.rms, p, "norm", 6, 1e-6));
    /* Non-trivial affine parameters (they start at 1 and 0). */
    for (int i = 0; i < lt_params_count(p); i++) {
      lt_tensor *v = lt_params_at(p, i)->value;
      LT_OK_OR_FAIL(lt_init_normal_(g, v, 1.0, 0.5));
    }
    lt_tensor *x[1] = {randn(g, LT_SHAPE(2, 3, 6))};
    check_module(&c, p, 1, x);
    lt_params_free(p);
    lt_generator_free(g);
  }
}
END_TEST

/* ---- feed-forward blocks and dropout ---------------------------------------- */

static lt_tensor *fwd_ffn(const mod_case *c, lt_tensor *const *x) {
  lt_nn_ctx ctx = ctx_of(c);
  return lt_ffn_forward(&c->ffn, x[0], &ctx);
}

START_TEST(test_ffn) {
  static const struct {
    const char *name;
    lt_activation act;
    bool swiglu, bias;
    double dropout;
  } k[] = {
      {"FFN relu", LT_ACT_RELU, false, true, 0},
      {"FFN gelu (erf)", LT_ACT_GELU, false, true, 0},
      {"FFN gelu (tanh), no bias", LT_ACT_GELU_TANH, false, false, 0},
      {"FFN silu", LT_ACT_SILU, false, true, 0},
      {"FFN SwiGLU", LT_ACT_SILU, true, false, 0},
      {"FFN SwiGLU with bias", LT_ACT_SILU, true, true, 0},
      {"FFN gelu, dropout p=0 (training)", LT_ACT_GELU, false, true, 0},
      {"FFN gelu, dropout p=0.3 (training, fixed seed)", LT_ACT_GELU, false, true, 0.3},
  };
  for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
    lt_generator *g = lt_generator_new(4 + i);
    lt_params *p = lt_params_new();
    mod_case c = {.name = k[i].name, .fwd = fwd_ffn, .training = i >= 6};
    LT_OK_OR_FAIL(lt_ffn_init(&c.ffn, p, "ff", 4, 6, k[i].act, k[i].swiglu, k[i].bias, k[i].dropout, g));
    lt_generator *d = c.training ? lt_generator_new(99) : NULL;
    c.dropout = d;
    lt_tensor *x[1] = {randn(g, LT_SHAPE(2, 3, 4))};
    check_module(&c, p, 1, x);
    lt_generator_free(d);
    lt_params_free(p);
    lt_generator_free(g);
  }
}
END_TEST

static lt_tensor *fwd_dropout(const mod_case *c, lt_tensor *const *x) {
  lt_nn_ctx ctx = ctx_of(c);
  lt_tensor *h = lt_linear_forward(&c->lin, x[0]);
  lt_tensor *y = h ? lt_dropout(h, c->p_drop, &ctx) : NULL;
  lt_tensor_free(h);
  return y;
}

START_TEST(test_dropout) {
  for (int k = 0; k < 3; k++) {
    lt_generator *g = lt_generator_new(5);
    lt_params *p = lt_params_new();
    mod_case c = {.name = k == 0 ? "Linear -> Dropout(p=0) training"
                        : k == 1 ? "Linear -> Dropout(p=0.5) training, fixed seed"
                                 : "Linear -> Dropout(p=0.5) eval",
                  .fwd = fwd_dropout, .training = k < 2, .p_drop = k == 0 ? 0.0 : 0.5};
    LT_OK_OR_FAIL(lt_linear_init(&c.lin, p, "fc", 4, 6, true, g));
    c.dropout = lt_generator_new(7);
    lt_tensor *x[1] = {randn(g, LT_SHAPE(3, 4))};
    check_module(&c, p, 1, x);
    lt_generator_free(c.dropout);
    lt_params_free(p);
    lt_generator_free(g);
  }
}
END_TEST

/* ---- attention ---------------------------------------------------------------- */

static lt_tensor *fwd_mha(const mod_case *c, lt_tensor *const *x) {
  lt_nn_ctx ctx = ctx_of(c);
  return lt_mha_forward(&c->mha, x[0], c->nx > 1 ? x[1] : x[0], &c->attn, 2, &ctx, NULL);
}

START_TEST(test_mha) {
  enum { B = 2, T = 3, S = 4, C = 8 };
  static const struct {
    const char *name;
    int64_t NH, NKV;
    bool cross, rope, causal, pad, additive, bias;
    double dropout;
  } k[] = {
      {"MHA self, 4 heads", 4, 4, false, false, false, false, false, true, 0},
      {"MHA self, GQA 4/2, RoPE, causal", 4, 2, false, true, true, false, false, true, 0},
      {"MHA self, MQA 4/1, key padding, no bias", 4, 1, false, false, false, true, false, false, 0},
      {"MHA cross, GQA 4/2, key padding + additive mask", 4, 2, true, false, false, true, true, true, 0},
      {"MHA cross, 2 heads, RoPE, causal", 2, 2, true, true, true, false, false, true, 0},
      {"MHA self, GQA, attention dropout 0.2 (fixed seed)", 4, 2, false, false, true, false, false, true, 0.2},
  };
  for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
    lt_generator *g = lt_generator_new(10 + i);
    lt_params *p = lt_params_new();
    mod_case c = {.name = k[i].name, .fwd = fwd_mha, .training = k[i].dropout > 0};
    LT_OK_OR_FAIL(lt_mha_init(&c.mha, p, "attn", C, k[i].NH, k[i].NKV, k[i].bias, k[i].dropout, g));
    c.mha.rope = k[i].rope;
    c.attn.causal = k[i].causal;
    int64_t Skv = k[i].cross ? S : T;
    lt_tensor *pad = NULL, *add = NULL;
    if (k[i].pad) { /* the last key of batch 1 is padding (no row is fully masked) */
      bool v[B * S] = {0};
      v[Skv + Skv - 1] = true;
      pad = LT_NN(lt_tensor_from_copy(LT_DTYPE_BOOL, LT_SHAPE(B, Skv), v));
      c.attn.key_padding_mask = pad;
    }
    if (k[i].additive) {
      add = randn(g, LT_SHAPE(T, Skv));
      lt_tensor *a64 = LT_NN(lt_to_dtype(add, LT_DTYPE_F64));
      lt_tensor_free(add);
      add = a64;
      c.attn.attn_mask = add;
    }
    if (c.training) c.dropout = lt_generator_new(31);
    lt_tensor *x[2] = {randn(g, LT_SHAPE(B, T, C)), k[i].cross ? randn(g, LT_SHAPE(B, S, C)) : NULL};
    check_module(&c, p, k[i].cross ? 2 : 1, x);
    lt_generator_free(c.dropout);
    lt_tensor_free(pad);
    lt_tensor_free(add);
    lt_params_free(p);
    lt_generator_free(g);
  }
}
END_TEST

/* ---- Transformer layers ---------------------------------------------------------- */

static lt_tensor *fwd_tlayer(const mod_case *c, lt_tensor *const *x) {
  lt_nn_ctx ctx = ctx_of(c);
  if (c->tl.has_cross) return lt_transformer_decoder_layer_forward(&c->tl, x[0], x[1], &c->attn, &c->mem_attn, 1, &ctx);
  return lt_transformer_encoder_layer_forward(&c->tl, x[0], &c->attn, 1, &ctx);
}

START_TEST(test_transformer_layers) {
  enum { B = 2, T = 3, S = 4, C = 8 };
  static const struct {
    const char *name;
    bool decoder, pre, rms, swiglu, rope, causal, pad, bias;
    lt_activation act;
    int64_t NKV;
    double dropout;
  } k[] = {
      {"EncoderLayer post-norm ReLU, key padding", false, false, false, false, false, false, true, true, LT_ACT_RELU, 4, 0},
      {"EncoderLayer pre-norm GELU, causal", false, true, false, false, false, true, false, true, LT_ACT_GELU, 4, 0},
      {"EncoderLayer pre RMSNorm SwiGLU GQA RoPE no bias", false, true, true, true, true, true, false, false,
       LT_ACT_SILU, 2, 0},
      {"DecoderLayer post-norm ReLU, causal + memory padding", true, false, false, false, false, true, true, true,
       LT_ACT_RELU, 4, 0},
      {"DecoderLayer pre-norm GELU MQA RoPE, dropout 0.1 (fixed seed)", true, true, false, false, true, true, false,
       true, LT_ACT_GELU, 1, 0.1},
  };
  for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
    lt_generator *g = lt_generator_new(40 + i);
    lt_params *p = lt_params_new();
    mod_case c = {.name = k[i].name, .fwd = fwd_tlayer, .training = k[i].dropout > 0};
    lt_transformer_layer_opts o = LT_TRANSFORMER_LAYER_DEFAULTS(C, 4);
    o.n_kv_heads = k[i].NKV, o.d_ff = 12, o.dropout = k[i].dropout, o.act = k[i].act, o.swiglu = k[i].swiglu;
    o.norm_first = k[i].pre, o.norm = k[i].rms ? LT_NORM_RMS : LT_NORM_LAYER, o.bias = k[i].bias;
    o.rope = k[i].rope;
    if (k[i].decoder) LT_OK_OR_FAIL(lt_transformer_decoder_layer_init(&c.tl, p, "layer", &o, g));
    else LT_OK_OR_FAIL(lt_transformer_encoder_layer_init(&c.tl, p, "layer", &o, g));
    c.attn.causal = k[i].causal;
    lt_tensor *pad = NULL;
    if (k[i].pad) { /* the last key of batch 1 is padding (no row fully masked) */
      const int64_t L = k[i].decoder ? S : T;
      bool v[B * S] = {0};
      v[2 * L - 1] = true;
      pad = LT_NN(lt_tensor_from_copy(LT_DTYPE_BOOL, LT_SHAPE(B, L), v));
      if (k[i].decoder) c.mem_attn.key_padding_mask = pad;
      else c.attn.key_padding_mask = pad;
    }
    if (c.training) c.dropout = lt_generator_new(41);
    lt_tensor *x[2] = {randn(g, LT_SHAPE(B, T, C)), k[i].decoder ? randn(g, LT_SHAPE(B, S, C)) : NULL};
    check_module(&c, p, k[i].decoder ? 2 : 1, x);
    lt_generator_free(c.dropout);
    lt_tensor_free(pad);
    lt_params_free(p);
    lt_generator_free(g);
  }
}
END_TEST

/* ---- positions -------------------------------------------------------------------- */

/* Learned: x + pos_emb(0..T-1); sinusoidal: x + table[:T] (a float buffer
 * of the store, converted with it). */
static lt_tensor *fwd_positions(const mod_case *c, lt_tensor *const *x) {
  int64_t T = x[0]->shape[1], C = x[0]->shape[2];
  lt_tensor *pe = c->table ? lt_narrow(c->table, 0, 0, T) : lt_embedding_forward(&c->emb, c->ids);
  lt_tensor *y = pe ? lt_add(x[0], pe) : NULL;
  lt_tensor_free(pe);
  (void)C;
  return y;
}

START_TEST(test_positions) {
  for (int k = 0; k < 2; k++) {
    lt_generator *g = lt_generator_new(20);
    lt_params *p = lt_params_new();
    mod_case c = {.name = k ? "sinusoidal positions (buffer)" : "learned positions", .fwd = fwd_positions};
    if (k) {
      LT_OK_OR_FAIL(lt_params_add(p, "pe", LT_NN(lt_sinusoidal_table(LT_DTYPE_F32, 8, 4)), LT_PARAM_BUFFER));
      c.table = lt_params_find(p, "pe");
    } else {
      LT_OK_OR_FAIL(lt_embedding_init(&c.emb, p, "pos", 8, 4, -1, g));
      c.ids = LT_NN(lt_arange(LT_DTYPE_I64, 0, 3, 1));
    }
    lt_tensor *x[1] = {randn(g, LT_SHAPE(2, 3, 4))};
    check_module(&c, p, 1, x);
    if (k) ck_assert_int_eq(c.table->dtype, LT_DTYPE_F64);
    lt_tensor_free(c.ids);
    lt_params_free(p);
    lt_generator_free(g);
  }
}
END_TEST

/* ---- a whole tiny Transformer ------------------------------------------------------ */

static lt_tensor *fwd_transformer(const mod_case *c, lt_tensor *const *x) {
  (void)x;
  lt_nn_ctx ctx = ctx_of(c);
  const lt_tf_config *cfg = lt_transformer_config(c->tf);
  if (cfg->arch == LT_TF_ENCODER_ONLY) return lt_transformer_classify(c->tf, c->ids, c->src_pad, &ctx);
  if (cfg->arch == LT_TF_DECODER_ONLY) return lt_transformer_decode(c->tf, c->ids, NULL, NULL, NULL, 0, &ctx);
  lt_tensor *mem = lt_transformer_encode(c->tf, c->ids, c->src_pad, &ctx);
  lt_tensor *y = mem ? lt_transformer_decode(c->tf, c->ids, NULL, mem, c->src_pad, 0, &ctx) : NULL;
  lt_tensor_free(mem);
  return y;
}

START_TEST(test_transformer) {
  static const struct {
    const char *name;
    lt_tf_arch arch;
    lt_tf_pos pos;
    lt_tf_norm norm;
    bool pre_norm, swiglu, tie;
    int64_t NKV;
  } k[] = {
      {"Transformer enc-dec (post-norm, sinusoidal)", LT_TF_ENCODER_DECODER, LT_TF_POS_SINUSOIDAL, LT_TF_LAYER_NORM,
       false, false, true, 2},
      {"Transformer decoder-only (RMSNorm, RoPE, SwiGLU, GQA)", LT_TF_DECODER_ONLY, LT_TF_POS_ROPE, LT_TF_RMS_NORM,
       true, true, false, 1},
      {"Transformer encoder-only classifier (learned)", LT_TF_ENCODER_ONLY, LT_TF_POS_LEARNED, LT_TF_LAYER_NORM, true,
       false, false, 2},
  };
  for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
    lt_tf_config cfg = lt_tf_config_default(k[i].arch);
    cfg.vocab_size = 7;
    cfg.d_model = 8;
    cfg.n_heads = 2;
    cfg.n_kv_heads = k[i].NKV;
    cfg.n_enc_layers = 1;
    cfg.n_dec_layers = 1;
    cfg.d_ff = 8;
    cfg.max_len = 8;
    cfg.n_classes = 3;
    cfg.dropout = 0;
    cfg.pos = k[i].pos;
    cfg.norm = k[i].norm;
    cfg.pre_norm = k[i].pre_norm;
    cfg.swiglu = k[i].swiglu;
    cfg.act = k[i].swiglu ? LT_ACT_SILU : LT_ACT_GELU;
    cfg.tie_embeddings = k[i].tie;
    cfg.pad_id = 0;
    LT_OK_OR_FAIL(lt_tf_config_validate(&cfg));
    lt_generator *g = lt_generator_new(40 + i);
    mod_case c = {.name = k[i].name, .fwd = fwd_transformer};
    c.tf = lt_transformer_new(&cfg, g);
    ck_assert_msg(c.tf != NULL, "%s", lt_last_error());
    /* No pad_id (0) among the ids: the embedding's padding row gets no
     * gradient from a lookup by design (padding_idx), which a numeric
     * gradient cannot know. The last source position is masked instead. */
    int64_t ids[6] = {1, 4, 2, 6, 3, 5};
    c.ids = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(2, 3), ids));
    bool pad[6] = {false, false, false, false, false, true};
    c.src_pad = LT_NN(lt_tensor_from_copy(LT_DTYPE_BOOL, LT_SHAPE(2, 3), pad));
    check_module(&c, lt_transformer_params(c.tf), 0, NULL);
    lt_tensor_free(c.ids);
    lt_tensor_free(c.src_pad);
    lt_transformer_free(c.tf);
    lt_generator_free(g);
  }
}
END_TEST

/* BERT (token types, embedding norm, pooler): classify_typed's logits and
 * lt_transformer_embed's normalised sentence embeddings. */
static lt_tensor *g_bert_types; /* [2, 3] token types of the BERT case */

static lt_tensor *fwd_bert_classify(const mod_case *c, lt_tensor *const *x) {
  (void)x;
  lt_nn_ctx ctx = ctx_of(c);
  return lt_transformer_classify_typed(c->tf, c->ids, g_bert_types, c->src_pad, &ctx);
}

static lt_tensor *fwd_bert_embed(const mod_case *c, lt_tensor *const *x) {
  (void)x;
  lt_nn_ctx ctx = ctx_of(c);
  return lt_transformer_embed(c->tf, c->ids, g_bert_types, c->src_pad, true, &ctx);
}

START_TEST(test_bert) {
  lt_tf_config cfg = lt_tf_config_default(LT_TF_ENCODER_ONLY);
  cfg.vocab_size = 7, cfg.d_model = 8, cfg.n_heads = 2, cfg.n_kv_heads = 2, cfg.n_enc_layers = 1, cfg.d_ff = 8;
  cfg.max_len = 8, cfg.n_classes = 3, cfg.dropout = 0, cfg.pad_id = 0, cfg.norm_eps = 1e-12;
  cfg.type_vocab_size = 2, cfg.embed_norm = true, cfg.pooler = true;
  int64_t ids[6] = {1, 4, 2, 6, 3, 5}, types[6] = {0, 1, 1, 0, 0, 1};
  bool pad[6] = {false, false, false, false, false, true};
  g_bert_types = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(2, 3), types));
  for (int k = 0; k < 2; k++) {
    lt_generator *g = lt_generator_new(50 + k);
    mod_case c = {.name = k ? "BERT sentence embeddings (mean pooling, L2 normalisation)" : "BERT classifier (pooler)",
                  .fwd = k ? fwd_bert_embed : fwd_bert_classify};
    c.tf = lt_transformer_new(&cfg, g);
    ck_assert_msg(c.tf != NULL, "%s", lt_last_error());
    c.ids = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(2, 3), ids));
    c.src_pad = LT_NN(lt_tensor_from_copy(LT_DTYPE_BOOL, LT_SHAPE(2, 3), pad));
    check_module(&c, lt_transformer_params(c.tf), 0, NULL);
    lt_tensor_free(c.ids);
    lt_tensor_free(c.src_pad);
    lt_transformer_free(c.tf);
    lt_generator_free(g);
  }
  lt_tensor_free(g_bert_types);
}
END_TEST

int main(void) {
  Suite *s = suite_create("nn_module_gradcheck");
  TCase *tc = tcase_create("modules");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_linear);
  tcase_add_test(tc, test_embedding);
  tcase_add_test(tc, test_norms);
  tcase_add_test(tc, test_ffn);
  tcase_add_test(tc, test_dropout);
  tcase_add_test(tc, test_mha);
  tcase_add_test(tc, test_transformer_layers);
  tcase_add_test(tc, test_positions);
  tcase_add_test(tc, test_transformer);
  tcase_add_test(tc, test_bert);
  suite_add_tcase(s, tc);
  return lt_test_run(s);
}
