/*
 * models/transformer/transformer.c: the configuration-driven Transformer of
 * transformer.h (encoder-decoder, decoder-only, encoder-only), composed from
 * the nn/ modules: lt_embedding, the reusable layers of
 * nn/transformer_layer.h (lt_transformer_layer: lt_mha self- and
 * cross-attention with GQA and RoPE, lt_ffn two-layer or SwiGLU, LayerNorm or
 * RMSNorm, pre- or post-norm) and lt_linear. docs/transformer.md describes the architecture, every option,
 * the parameter names and where dropout goes.
 *
 * One layer, as nn.TransformerEncoderLayer / nn.TransformerDecoderLayer
 * (https://pytorch.org/docs/stable/generated/torch.nn.TransformerEncoderLayer.html):
 *   post-norm:  x = norm1(x + dropout1(self_attn(x)))
 *               x = norm2(x + dropout2(cross_attn(x, memory)))   (decoder)
 *               x = normN(x + dropoutN(ffn(x)))
 *   pre-norm:   x = x + dropout1(self_attn(norm1(x)))
 *               x = x + dropout2(cross_attn(norm2(x), memory))   (decoder)
 *               x = x + dropoutN(ffn(normN(x)))
 * The input of a stack is dropout(embed(ids) [* sqrt(C)] [+ positions]); the
 * attention weights and the FFN hidden activation get dropout inside lt_mha
 * and lt_ffn. A final norm closes a stack: always for the encoder-decoder
 * (encoder.norm, decoder.norm, as nn.Transformer adds them even for
 * post-norm), and only with pre-norm for decoder-only (GPT-2's ln_f, named
 * decoder.norm) and encoder-only (encoder.norm).
 *
 * Incremental decoding: lt_transformer_decode_step runs the same decoder
 * layers (lt_transformer_layer_forward_cached, one code path with the
 * whole-sequence forward) with a per-layer lt_transformer_layer_cache for the
 * self- and cross-attention, so a step costs the new positions only. A cache
 * with left padding (lt_tf_cache_set_left_pad: prompts of different lengths
 * in one batch) adds a key padding mask over its columns and per-row
 * positions (docs/decoding.md).
 *
 * Training memory: lt_transformer_set_recompute makes every layer recompute
 * its attention sublayers or itself in the backward (autograd/recompute.h),
 * and lt_transformer_decode_loss gives the loss through the chunked head
 * (lt_linear_cross_entropy), so the B x T x V logits never exist.
 *
 * What this is not: a generation loop (models/transformer/decode.c), nor the loss of lt_transformer_decode (the
 * caller applies lt_cross_entropy to the logits), nor PyTorch's packed in_proj_weight (the
 * attention projections are four separate Linears, see nn/mha.c).
 */
#include "models/transformer/transformer.h"
#include "nn/transformer_layer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================== */
/* The model struct                                                         */
/* ======================================================================== */

/* A layer is nn/transformer_layer.h's: an encoder layer (self-attention, causal
 * in a decoder-only model) or, in the encoder-decoder's decoder, a decoder
 * layer (with cross-attention and norm3). */
typedef lt_transformer_layer tf_layer;

struct lt_transformer {
  lt_tf_config cfg;
  lt_params *params;        /* owns every parameter */
  lt_embedding_m embed;     /* [V, C], shared by source and target */
  lt_embedding_m pos_embed; /* [max_len, C], learned positions only */
  lt_tensor *pos_table;     /* [max_len, C] sinusoidal table (owned, no grad) or NULL */
  tf_layer *enc;            /* [n_enc_layers] or NULL */
  tf_layer *dec;            /* [n_dec_layers] or NULL */
  int64_t n_enc, n_dec;
  lt_norm_m enc_norm, dec_norm;
  bool has_enc_norm, has_dec_norm;
  lt_linear_m lm_head;      /* [V, C], untied decoders only */
  bool has_lm_head;
  lt_linear_m classifier;   /* [n_classes, C] (+ bias), encoder-only with n_classes > 0 */
  lt_embedding_m type_embed; /* [type_vocab_size, C], encoder-only with token types (BERT) */
  lt_norm_m embed_norm;     /* [C] over the summed embeddings (BERT's embeddings.LayerNorm) */
  lt_linear_m pooler;       /* [C, C] (+ bias), encoder-only with pooler (BERT) */
  lt_embedding_m enc_rel, dec_rel; /* [rel_buckets, NH] each stack's relative-position bias (pos relative, T5) */
};

#define NAME_LEN 256

/* ======================================================================== */
/* Configuration                                                            */
/* ======================================================================== */

lt_tf_config lt_tf_config_default(lt_tf_arch arch) {
  lt_tf_config c = {
      .arch = arch,
      .vocab_size = 0, /* to be set by the caller (the tokenizer's size) */
      .d_model = 128,
      .n_heads = 4,
      .n_kv_heads = 4,
      .n_enc_layers = 2,
      .n_dec_layers = 2,
      .d_ff = 512,
      .max_len = 512,
      .n_classes = 0,
      .dropout = 0.1,
      .norm = LT_TF_LAYER_NORM,
      .pre_norm = false,
      .act = LT_ACT_RELU,
      .swiglu = false,
      .pos = LT_TF_POS_SINUSOIDAL,
      .tie_embeddings = true,
      .scale_embeddings = true,
      .bias = true,
      .norm_eps = 1e-5,
      .rope_base = 10000.0,
      .pad_id = 0,
  };
  switch (arch) {
    case LT_TF_DECODER_ONLY: /* GPT-2 */
      c.n_enc_layers = 0;
      c.pre_norm = true;
      c.act = LT_ACT_GELU;
      c.pos = LT_TF_POS_LEARNED;
      c.scale_embeddings = false;
      break;
    case LT_TF_ENCODER_ONLY: /* BERT */
      c.n_dec_layers = 0;
      c.act = LT_ACT_GELU;
      c.pos = LT_TF_POS_LEARNED;
      c.tie_embeddings = false;
      c.scale_embeddings = false;
      c.n_classes = 2;
      break;
    default: break; /* the paper's encoder-decoder */
  }
  return c;
}

#define BAD(...) lt_error_set(LT_ERR_INVALID, "tf_config: " __VA_ARGS__)

/* ---- the ranges (transformer.h, LT_TF_CONFIG_RANGES) ----------------------- */

typedef struct tf_range {
  const char *field;
  double lo, hi;
  bool lo_open;
} tf_range;

#define TF_RANGE_ROW(f, lo, hi, open) {#f, lo, hi, open},
static const tf_range RANGES[] = {LT_TF_CONFIG_RANGES(TF_RANGE_ROW)};
#undef TF_RANGE_ROW

static const tf_range *find_range(const char *field) {
  for (size_t i = 0; field && i < sizeof RANGES / sizeof RANGES[0]; i++)
    if (strcmp(RANGES[i].field, field) == 0) return &RANGES[i];
  return NULL;
}

/* The one check behind both entries: v_text is the value as the caller prints it. */
static lt_status check_range(const char *field, double v, const char *v_text, const char *what) {
  const tf_range *r = find_range(field);
  if (!r) return lt_error_set(LT_ERR_INVALID, "tf_config_check_range: no field '%s'", field ? field : "(null)");
  if (v >= r->lo && v <= r->hi && !(r->lo_open && v == r->lo)) return LT_OK; /* NaN fails every comparison */
  char head[1024];
  if (what) snprintf(head, sizeof head, "%s %s: %s", what, v_text, field);
  else snprintf(head, sizeof head, "tf_config: %s %s:", field, v_text);
  return lt_error_set(LT_ERR_INVALID, "%s must be in %c%.17g, %.17g]", head, r->lo_open ? '(' : '[', r->lo, r->hi);
}

lt_status lt_tf_config_check_range(const char *field, double v, const char *what) {
  char t[64];
  snprintf(t, sizeof t, "%.17g", v);
  return check_range(field, v, t, what);
}

lt_status lt_tf_config_check_range_int(const char *field, int64_t v, const char *what) {
  char t[64];
  snprintf(t, sizeof t, "%lld", (long long)v);
  return check_range(field, (double)v, t, what);
}

lt_status lt_tf_config_validate(const lt_tf_config *c) {
  if (!c) return lt_error_set(LT_ERR_NULL, "tf_config_validate: cfg is NULL");
  const bool has_enc = c->arch == LT_TF_ENCODER_DECODER || c->arch == LT_TF_ENCODER_ONLY;
  const bool has_dec = c->arch == LT_TF_ENCODER_DECODER || c->arch == LT_TF_DECODER_ONLY;
  if (c->arch != LT_TF_ENCODER_DECODER && c->arch != LT_TF_DECODER_ONLY && c->arch != LT_TF_ENCODER_ONLY)
    return BAD("arch %d: must be LT_TF_ENCODER_DECODER, LT_TF_DECODER_ONLY or LT_TF_ENCODER_ONLY", (int)c->arch);
  if (c->vocab_size < 1) return BAD("vocab_size %lld: must be >= 1 (the tokenizer's size)", (long long)c->vocab_size);
  lt_status s; /* every field of the table, with the check of its type */
#define TF_CHECK(f, lo, hi, open)                                                                             \
  if ((s = _Generic(c->f, double: lt_tf_config_check_range, default: lt_tf_config_check_range_int)(#f, c->f, \
                                                                                                   NULL)) != LT_OK) \
    return s;
  LT_TF_CONFIG_RANGES(TF_CHECK)
#undef TF_CHECK
  if (c->d_model % c->n_heads != 0)
    return BAD("n_heads %lld does not divide d_model %lld (head size d_model / n_heads)", (long long)c->n_heads,
               (long long)c->d_model);
  if (c->n_heads % c->n_kv_heads != 0)
    return BAD("n_kv_heads %lld does not divide n_heads %lld (query heads per key/value head)",
               (long long)c->n_kv_heads, (long long)c->n_heads);
  if (c->n_enc_layers < (has_enc ? 1 : 0))
    return BAD("n_enc_layers %lld: must be >= %d for this architecture", (long long)c->n_enc_layers, has_enc ? 1 : 0);
  if (c->n_dec_layers < (has_dec ? 1 : 0))
    return BAD("n_dec_layers %lld: must be >= %d for this architecture", (long long)c->n_dec_layers, has_dec ? 1 : 0);
  if (c->n_classes < 0)
    return BAD("n_classes %lld: must be >= 0 (0: an encoder-only model without a classifier)", (long long)c->n_classes);
  if (c->type_vocab_size > 0 && c->arch != LT_TF_ENCODER_ONLY)
    return BAD("type_vocab_size %lld: token types are an encoder-only input (BERT's token_type_ids)",
               (long long)c->type_vocab_size);
  if (c->pooler && c->arch != LT_TF_ENCODER_ONLY)
    return BAD("pooler: only an encoder-only model has a pooler (BERT's)");
  if (c->norm != LT_TF_LAYER_NORM && c->norm != LT_TF_RMS_NORM)
    return BAD("norm %d: must be LT_TF_LAYER_NORM or LT_TF_RMS_NORM", (int)c->norm);
  if (c->act != LT_ACT_RELU && c->act != LT_ACT_GELU && c->act != LT_ACT_GELU_TANH && c->act != LT_ACT_SILU)
    return BAD("act %d: must be LT_ACT_RELU, LT_ACT_GELU, LT_ACT_GELU_TANH or LT_ACT_SILU", (int)c->act);
  if (c->pos != LT_TF_POS_SINUSOIDAL && c->pos != LT_TF_POS_LEARNED && c->pos != LT_TF_POS_ROPE &&
      c->pos != LT_TF_POS_RELATIVE)
    return BAD("pos %d: must be LT_TF_POS_SINUSOIDAL, LT_TF_POS_LEARNED, LT_TF_POS_ROPE or LT_TF_POS_RELATIVE",
               (int)c->pos);
  if (c->pos == LT_TF_POS_RELATIVE) { /* nn/relpos.c's buckets: exact ones below, log ones up to the distance */
    const int64_t exact = has_dec ? c->rel_buckets / 2 : c->rel_buckets / 4;
    if (c->rel_buckets < (has_enc ? 4 : 2))
      return BAD("rel_buckets %lld: pos relative needs at least %d buckets", (long long)c->rel_buckets, has_enc ? 4 : 2);
    if (c->rel_max_distance <= exact)
      return BAD("rel_max_distance %lld: must exceed the %lld exact buckets of rel_buckets %lld",
                 (long long)c->rel_max_distance, (long long)exact, (long long)c->rel_buckets);
  } else if (c->rel_buckets || c->rel_max_distance) {
    return BAD("rel_buckets %lld, rel_max_distance %lld: only pos relative has relative-position buckets",
               (long long)c->rel_buckets, (long long)c->rel_max_distance);
  }
  if (c->pos == LT_TF_POS_RELATIVE && c->sliding_window > 0)
    return BAD("sliding_window %lld with pos relative: the relative bias covers every key (no window)",
               (long long)c->sliding_window);
  if (c->head_rescale && (!has_dec || !c->tie_embeddings))
    return BAD("head_rescale: the d_model^-0.5 rescale is for a decoder's tied head (T5's)");
  if (c->pos == LT_TF_POS_ROPE) {
    if ((c->d_model / c->n_heads) % 2 != 0)
      return BAD("pos RoPE needs an even head size: d_model %lld / n_heads %lld = %lld", (long long)c->d_model,
                 (long long)c->n_heads, (long long)(c->d_model / c->n_heads));
  }
  if (c->pos == LT_TF_POS_SINUSOIDAL && c->max_len * c->d_model > LT_TF_MAX_POS_TABLE) /* both in range: no overflow */
    return BAD("max_len %lld x d_model %lld: the sinusoidal position table, computed when the model is built, holds at "
               "most %lld values (2^24); use fewer positions or pos learned / rope", (long long)c->max_len,
               (long long)c->d_model, (long long)LT_TF_MAX_POS_TABLE);
  if (c->arch == LT_TF_ENCODER_ONLY && c->tie_embeddings)
    return BAD("tie_embeddings: the encoder-only classifier has no output projection to tie");
  if (c->qkv_bias && c->bias) return BAD("qkv_bias with bias: bias already puts biases on q, k and v");
  if (c->sliding_window > 0 && !has_dec)
    return BAD("sliding_window %lld: only a decoder's self-attention slides (this model has no decoder)",
               (long long)c->sliding_window);
  if (c->rope_type != LT_ROPE_DEFAULT) {
    if (c->pos != LT_TF_POS_ROPE)
      return BAD("rope_type %d: RoPE scaling needs pos rope (positions %d)", (int)c->rope_type, (int)c->pos);
    const lt_rope_scaling sc = lt_tf_rope_scaling(c);
    if ((s = lt_rope_scaling_check(&sc)) != LT_OK) {
      char msg[512];
      snprintf(msg, sizeof msg, "%s", lt_last_error());
      return BAD("%s", msg);
    }
  }
  if (c->pad_id < -1 || c->pad_id >= c->vocab_size)
    return BAD("pad_id %lld: must be in [0, vocab_size %lld) or -1 (none)", (long long)c->pad_id,
               (long long)c->vocab_size);
  return LT_OK;
}

#undef BAD

/* ======================================================================== */
/* Construction                                                             */
/* ======================================================================== */

static lt_norm_kind norm_kind(const lt_tf_config *c) { return c->norm == LT_TF_RMS_NORM ? LT_NORM_RMS : LT_NORM_LAYER; }

static lt_status norm_init(lt_norm_m *n, lt_params *p, const char *name, const lt_tf_config *c) {
  return lt_norm_init(n, p, name, norm_kind(c), c->d_model, c->norm_eps);
}

/* The layer options of a configuration (RoPE on the self-attention only). */
static lt_transformer_layer_opts layer_opts(const lt_tf_config *c) {
  return (lt_transformer_layer_opts){.d_model = c->d_model, .n_heads = c->n_heads, .n_kv_heads = c->n_kv_heads,
                                     .d_ff = c->d_ff, .dropout = c->dropout, .act = c->act, .swiglu = c->swiglu,
                                     .norm_first = c->pre_norm, .norm = norm_kind(c), .norm_eps = c->norm_eps,
                                     .bias = c->bias, .rope = c->pos == LT_TF_POS_ROPE, .rope_base = c->rope_base,
                                     .rope_scaling = lt_tf_rope_scaling(c), .qkv_bias = c->qkv_bias,
                                     .attn_scale = c->attn_scale};
}

lt_rope_scaling lt_tf_rope_scaling(const lt_tf_config *c) {
  return (lt_rope_scaling){.type = c->rope_type, .factor = c->rope_factor, .low_freq_factor = c->rope_low_freq_factor,
                           .high_freq_factor = c->rope_high_freq_factor, .original_max_len = c->rope_original_max_len};
}

/* Registers one layer under "<stack>.layers.<i>" (nn/transformer_layer.h's order:
 * self_attn, [cross_attn], linear1/linear2 (w1/w2/w3), norm1, norm2, [norm3]). */
static lt_status layer_init(tf_layer *L, lt_params *p, const char *stack, int64_t i, bool cross,
                            const lt_tf_config *c, lt_generator *g) {
  char name[NAME_LEN];
  snprintf(name, sizeof name, "%s.layers.%lld", stack, (long long)i);
  const lt_transformer_layer_opts o = layer_opts(c);
  return cross ? lt_transformer_decoder_layer_init(L, p, name, &o, g) : lt_transformer_encoder_layer_init(L, p, name, &o, g);
}

/* Token (and learned position) embeddings: N(0, std^2) with the padding row
 * zeroed. std = 1/sqrt(C) when the embeddings are scaled by sqrt(C) (fairseq's
 * Transformer: the scaled embedding is N(0, 1)), else 0.02 (GPT-2), so that a
 * tied output head starts with small logits. Learned positions are drawn at
 * the scale of the (scaled) token embedding they are added to. */
static lt_status embed_reinit(lt_embedding_m *e, double std, lt_generator *g) {
  if (lt_tensor_qmatrix(e->weight)) return LT_OK; /* built quantized (lt_set_weight_format): values come from a file */
  lt_status s = lt_init_normal_(g, e->weight, 0.0, std);
  if (s != LT_OK || e->padding_idx < 0) return s;
  bool prev = lt_set_grad_enabled(false);
  lt_tensor *row = lt_select(e->weight, 0, e->padding_idx);
  s = row ? lt_zero_(row) : lt_last_status();
  lt_tensor_free(row);
  lt_set_grad_enabled(prev);
  return s;
}

static bool has_prefix(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

static lt_status build(lt_transformer *m, lt_generator *g) {
  const lt_tf_config *c = &m->cfg;
  lt_params *p = m->params;
  const int64_t C = c->d_model;
  lt_status s;
  const bool has_enc = c->arch != LT_TF_DECODER_ONLY, has_dec = c->arch != LT_TF_ENCODER_ONLY;

  if ((s = lt_embedding_init(&m->embed, p, "embed", c->vocab_size, C, c->pad_id, g)) != LT_OK) return s;
  const double emb_std = c->scale_embeddings ? 1.0 / sqrt((double)C) : 0.02;
  if ((s = embed_reinit(&m->embed, emb_std, g)) != LT_OK) return s;
  if (c->pos == LT_TF_POS_LEARNED) {
    if ((s = lt_embedding_init(&m->pos_embed, p, "pos_embed", c->max_len, C, -1, g)) != LT_OK) return s;
    if ((s = embed_reinit(&m->pos_embed, c->scale_embeddings ? 1.0 : 0.02, g)) != LT_OK) return s;
  } else if (c->pos == LT_TF_POS_SINUSOIDAL) {
    /* made outside any open scope: the model owns it */
    m->pos_table = lt_tensor_keep(lt_sinusoidal_table(LT_DTYPE_F32, c->max_len, C));
    if (!m->pos_table) return lt_last_status();
  }
  if (c->type_vocab_size > 0) { /* BERT's token_type_embeddings, N(0, 0.02^2) as its _init_weights */
    if ((s = lt_embedding_init(&m->type_embed, p, "type_embed", c->type_vocab_size, C, -1, g)) != LT_OK ||
        (s = embed_reinit(&m->type_embed, 0.02, g)) != LT_OK)
      return s;
  }
  if (c->embed_norm && (s = norm_init(&m->embed_norm, p, "embed_norm", c)) != LT_OK) return s;

  const bool rel = c->pos == LT_TF_POS_RELATIVE; /* T5: one bias table per stack, as its layer 0's */
  if (rel && has_enc &&
      (s = lt_embedding_init(&m->enc_rel, p, "encoder.rel_bias", c->rel_buckets, c->n_heads, -1, g)) != LT_OK)
    return s;
  if (rel && has_dec &&
      (s = lt_embedding_init(&m->dec_rel, p, "decoder.rel_bias", c->rel_buckets, c->n_heads, -1, g)) != LT_OK)
    return s;
  if (has_enc) {
    m->n_enc = c->n_enc_layers;
    m->enc = calloc((size_t)m->n_enc, sizeof *m->enc);
    if (!m->enc) return lt_error_set(LT_ERR_NOMEM, "transformer_new: %lld encoder layers", (long long)m->n_enc);
    for (int64_t i = 0; i < m->n_enc; i++)
      if ((s = layer_init(&m->enc[i], p, "encoder", i, false, c, g)) != LT_OK) return s;
    m->has_enc_norm = c->arch == LT_TF_ENCODER_DECODER || c->pre_norm;
    if (m->has_enc_norm && (s = norm_init(&m->enc_norm, p, "encoder.norm", c)) != LT_OK) return s;
  }
  if (has_dec) {
    m->n_dec = c->n_dec_layers;
    m->dec = calloc((size_t)m->n_dec, sizeof *m->dec);
    if (!m->dec) return lt_error_set(LT_ERR_NOMEM, "transformer_new: %lld decoder layers", (long long)m->n_dec);
    const bool cross = c->arch == LT_TF_ENCODER_DECODER;
    for (int64_t i = 0; i < m->n_dec; i++)
      if ((s = layer_init(&m->dec[i], p, "decoder", i, cross, c, g)) != LT_OK) return s;
    m->has_dec_norm = c->arch == LT_TF_ENCODER_DECODER || c->pre_norm;
    if (m->has_dec_norm && (s = norm_init(&m->dec_norm, p, "decoder.norm", c)) != LT_OK) return s;
    m->has_lm_head = !c->tie_embeddings;
    if (m->has_lm_head && (s = lt_linear_init(&m->lm_head, p, "lm_head", C, c->vocab_size, false, g)) != LT_OK)
      return s;
  }
  if (c->pooler && (s = lt_linear_init(&m->pooler, p, "pooler", C, C, c->bias, g)) != LT_OK) return s;
  if (c->arch == LT_TF_ENCODER_ONLY && c->n_classes > 0 &&
      (s = lt_linear_init(&m->classifier, p, "classifier", C, c->n_classes, c->bias, g)) != LT_OK)
    return s;

  /* nn.Transformer._reset_parameters: xavier_uniform_ on every matrix of the
   * encoder and decoder stacks (the encoder-decoder only; nn.TransformerEncoder
   * and GPT-style models keep nn.Linear's default). */
  if (c->arch == LT_TF_ENCODER_DECODER) {
    for (int i = 0; i < lt_params_count(p); i++) {
      const lt_param *pr = lt_params_at(p, i);
      if (pr->value->ndim > 1 && !lt_tensor_qmatrix(pr->value) && (has_prefix(pr->name, "encoder.") || has_prefix(pr->name, "decoder.")) &&
          (s = lt_init_xavier_uniform_(g, pr->value, 1.0)) != LT_OK)
        return s;
    }
  }
  return LT_OK;
}

lt_transformer *lt_transformer_new(const lt_tf_config *cfg, lt_generator *g) {
  if (!cfg) return lt_error_set(LT_ERR_NULL, "transformer_new: cfg is NULL"), NULL;
  if (!g) return lt_error_set(LT_ERR_NULL, "transformer_new: g (the generator) is NULL"), NULL;
  if (lt_tf_config_validate(cfg) != LT_OK) return NULL;
  lt_transformer *m = calloc(1, sizeof *m);
  if (!m) return lt_error_set(LT_ERR_NOMEM, "transformer_new: out of memory"), NULL;
  m->cfg = *cfg;
  m->params = lt_params_new();
  if (!m->params) {
    free(m);
    return NULL;
  }
  const lt_generator_state gs = lt_generator_get_state(g);
  if (build(m, g) != LT_OK) {
    lt_generator_set_state(g, gs); /* a failed build draws nothing */
    lt_status s = lt_last_status();
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", lt_last_error());
    lt_transformer_free(m);
    lt_error_set(s != LT_OK ? s : LT_ERR_NOMEM, "transformer_new: %s", msg);
    return NULL;
  }
  return m;
}

void lt_transformer_free(lt_transformer *m) {
  if (!m) return;
  lt_params_free(m->params);
  lt_tensor_free(m->pos_table);
  free(m->enc);
  free(m->dec);
  free(m);
}

const lt_tf_config *lt_transformer_config(const lt_transformer *m) { return m ? &m->cfg : NULL; }

lt_params *lt_transformer_params(lt_transformer *m) { return m ? m->params : NULL; }

/* ======================================================================== */
/* Forward                                                                  */
/* ======================================================================== */

/* Replace *x (freed) by y; false when y is NULL (the error is pending). */
static bool step(lt_tensor **x, lt_tensor *y) {
  lt_tensor_free(*x);
  *x = y;
  return y != NULL;
}

/* One decoder layer's KV caches (incremental decoding): self [B, NKV, cap, HS],
 * cross [B, NKV, S, HS] filled from the memory once. */
typedef lt_transformer_layer_cache tf_layer_cache;

struct lt_tf_cache {
  int64_t n;           /* decoder layers */
  int64_t cap;         /* self-attention positions */
  tf_layer_cache *layer;
  int64_t *left_pad;   /* [pad_rows] padding columns at the left of each row (a ragged batch), or NULL */
  int64_t pad_rows;
};

static bool is_int(const lt_tensor *t) { return t->dtype == LT_DTYPE_I32 || t->dtype == LT_DTYPE_I64; }

/* ids [B, L] integer, pad NULL or bool [B, L], 1 <= L, pos0 + L <= max_len. */
static lt_status check_ids(const char *op, const char *what, const char *pad_what, const lt_transformer *m,
                           const lt_tensor *ids, const lt_tensor *pad, int64_t pos0) {
  if (!ids) return lt_error_set(LT_ERR_NULL, "%s: %s is NULL", op, what);
  if (ids->ndim != 2 || !is_int(ids))
    return lt_error_set(ids->ndim != 2 ? LT_ERR_SHAPE : LT_ERR_DTYPE, "%s: %s is %s: need [B, L] token ids (i32 or i64)",
                   op, what, LT_DESC(ids));
  const int64_t L = ids->shape[1];
  if (L < 1 || ids->shape[0] < 1)
    return lt_error_set(LT_ERR_SHAPE, "%s: %s is %s: need at least one sequence of at least one token", op, what,
                   LT_DESC(ids));
  if (pos0 < 0 || pos0 > m->cfg.max_len - L)
    return lt_error_set(LT_ERR_INVALID, "%s: %s is %s at positions %lld..%lld: beyond max_len %lld", op, what, LT_DESC(ids),
                   (long long)pos0, (long long)(pos0 + L - 1), (long long)m->cfg.max_len);
  if (pad && (pad->dtype != LT_DTYPE_BOOL || pad->ndim != 2 || pad->shape[0] != ids->shape[0] ||
              pad->shape[1] != L))
    return lt_error_set(LT_ERR_SHAPE, "%s: %s is %s, %s is %s: need a bool mask of the ids' shape (true = padding)", op,
                   pad_what, LT_DESC(pad), what, LT_DESC(ids));
  return LT_OK;
}

/* Rows [r0, r0 + n) of an embedding table [V, C] (n < 0: row r0 alone, as
 * [C]): a view, or for a quantized table (lt_params_quantize) the rows
 * gathered by lt_embedding. */
static lt_tensor *table_rows(const lt_tensor *table, int64_t r0, int64_t n) {
  if (!lt_tensor_qmatrix(table)) return n < 0 ? lt_select(table, 0, r0) : lt_narrow(table, 0, r0, n);
  lt_tensor *ids = n < 0 ? lt_scalar(LT_DTYPE_I64, (double)r0) : lt_arange(LT_DTYPE_I64, (double)r0, (double)(r0 + n), 1);
  lt_tensor *rows = ids ? lt_embedding(table, ids) : NULL;
  lt_tensor_free(ids);
  return rows;
}

/* The position rows of a left-padded batch: row b's column pos0 + t is at
 * position max(pos0 + t - left_pad[b], 0) -> table rows [B, L, C] (new). */
static lt_tensor *row_positions(const lt_tensor *table, int64_t B, int64_t L, int64_t pos0, const int64_t *left_pad) {
  int64_t *idx = malloc(sizeof *idx * (size_t)(B * L));
  if (!idx) return lt_error_set(LT_ERR_NOMEM, "transformer: out of memory for %lld positions", (long long)(B * L)), NULL;
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < L; t++) idx[b * L + t] = pos0 + t - left_pad[b] > 0 ? pos0 + t - left_pad[b] : 0;
  lt_tensor *it = lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){B, L}, idx);
  free(idx);
  lt_tensor *pe = it ? lt_embedding(table, it) : NULL; /* [B, L, C]; a quantized table too */
  lt_tensor_free(it);
  return pe;
}

/* dropout(embed_norm(embed(ids) [* sqrt(C)] [+ positions pos0..] [+ type_embed(types)])) -> [B, L, C];
 * types NULL: type 0 everywhere (models with token types); left_pad NULL, or
 * [B] padding columns at the left of each row (positions per row,
 * row_positions). */
static lt_tensor *embed_forward(const lt_transformer *m, const lt_tensor *ids, const lt_tensor *types, int64_t pos0,
                                const int64_t *left_pad, const lt_nn_ctx *ctx) {
  const lt_tf_config *c = &m->cfg;
  const int64_t L = ids->shape[1];
  lt_tensor *x = lt_embedding_forward(&m->embed, ids); /* [B, L, C] */
  if (x && c->scale_embeddings && !step(&x, lt_mul_scalar(x, sqrt((double)c->d_model)))) return NULL;
  if (x && c->pos != LT_TF_POS_ROPE && c->pos != LT_TF_POS_RELATIVE) {
    lt_tensor *table = c->pos == LT_TF_POS_LEARNED ? m->pos_embed.weight : m->pos_table;
    lt_tensor *pe = left_pad ? row_positions(table, ids->shape[0], L, pos0, left_pad)
                             : table_rows(table, pos0, L); /* [B, L, C] or [L, C] */
    lt_tensor *y = pe ? lt_add(x, pe) : NULL;
    lt_tensor_free(pe);
    step(&x, y);
  }
  if (x && c->type_vocab_size > 0) {
    lt_tensor *te = types ? lt_embedding_forward(&m->type_embed, types) : table_rows(m->type_embed.weight, 0, -1);
    lt_tensor *y = te ? lt_add(x, te) : NULL; /* [B, L, C] + [B, L, C] or [C] */
    lt_tensor_free(te);
    step(&x, y);
  }
  if (x && c->embed_norm) step(&x, lt_norm_forward(&m->embed_norm, x));
  if (x && c->dropout > 0.0 && ctx && ctx->training) step(&x, lt_dropout(x, c->dropout, ctx));
  return x;
}

static lt_tensor *encode_impl(const char *op, const lt_transformer *m, const lt_tensor *src, const lt_tensor *types,
                              const lt_tensor *src_pad, const lt_nn_ctx *ctx) {
  if (!m) return lt_error_set(LT_ERR_NULL, "%s: the model is NULL", op), NULL;
  if (!m->enc)
    return lt_error_set(LT_ERR_INVALID, "%s: a decoder-only model has no encoder (use transformer_decode)", op), NULL;
  if (check_ids(op, "src", "src_pad", m, src, src_pad, 0) != LT_OK) return NULL;
  if (types && m->cfg.type_vocab_size == 0)
    return lt_error_set(LT_ERR_INVALID, "%s: token types given to a model without them (type_vocab_size 0)", op), NULL;
  if (types && (types->ndim != 2 || !is_int(types) || types->shape[0] != src->shape[0] ||
                types->shape[1] != src->shape[1]))
    return lt_error_set(LT_ERR_SHAPE, "%s: types is %s, src is %s: need integer token types of the ids' shape", op,
                        LT_DESC(types), LT_DESC(src)), NULL;
  const int64_t S = src->shape[1];
  lt_tensor *bias = NULL; /* T5: [1, NH, S, S], bidirectional buckets */
  if (m->cfg.pos == LT_TF_POS_RELATIVE &&
      !(bias = lt_relative_position_bias(m->enc_rel.weight, S, S, 0, true, m->cfg.rel_max_distance)))
    return NULL;
  lt_tensor *x = embed_forward(m, src, types, 0, NULL, ctx);
  const lt_attention_opts self_mask = {.key_padding_mask = src_pad, .attn_mask = bias};
  for (int64_t i = 0; x && i < m->n_enc; i++)
    step(&x, lt_transformer_encoder_layer_forward(&m->enc[i], x, &self_mask, 0, ctx));
  if (x && m->has_enc_norm) step(&x, lt_norm_forward(&m->enc_norm, x));
  lt_tensor_free(bias);
  return x;
}

lt_tensor *lt_transformer_encode(const lt_transformer *m, const lt_tensor *src, const lt_tensor *src_pad,
                                 const lt_nn_ctx *ctx) {
  return encode_impl("transformer_encode", m, src, NULL, src_pad, ctx);
}

lt_tensor *lt_transformer_encode_typed(const lt_transformer *m, const lt_tensor *src, const lt_tensor *types,
                                       const lt_tensor *src_pad, const lt_nn_ctx *ctx) {
  return encode_impl("transformer_encode_typed", m, src, types, src_pad, ctx);
}

/* The decoder, whole-sequence (cache NULL) or incremental (positions from
 * the cache's length). Arguments as lt_transformer_decode. */
/* With labels (whole-sequence only): the loss of the logits through the
 * chunked head (lt_linear_cross_entropy) instead of the logits. With last:
 * only the last position through the head, logits [B, V]. */
typedef struct head_loss {
  const lt_tensor *labels;
  const lt_cross_entropy_opts *ce;
  int64_t chunk_rows;
  bool last;
} head_loss;

static lt_tensor *decode_impl(const char *op, const lt_transformer *m, const lt_tensor *tgt, const lt_tensor *tgt_pad,
                              const lt_tensor *memory, const lt_tensor *src_pad, int64_t pos0, const lt_nn_ctx *ctx,
                              lt_tf_cache *cache, const head_loss *hl) {
  if (!m) return lt_error_set(LT_ERR_NULL, "%s: the model is NULL", op), NULL;
  const lt_tf_config *c = &m->cfg;
  if (!m->dec)
    return lt_error_set(LT_ERR_INVALID, "%s: an encoder-only model has no decoder (use transformer_classify)", op), NULL;
  if (check_ids(op, "tgt", "tgt_pad", m, tgt, tgt_pad, pos0) != LT_OK) return NULL;
  /* with a filled cross-attention cache the memory is not read again */
  const bool need_memory = !cache || cache->layer[0].cross.len == 0;
  if (c->arch == LT_TF_ENCODER_DECODER) {
    if (!memory && need_memory)
      return lt_error_set(LT_ERR_NULL, "%s: memory is NULL: the encoder-decoder needs the encoder output", op), NULL;
    if (memory && (memory->ndim != 3 || memory->shape[0] != tgt->shape[0] || memory->shape[2] != c->d_model ||
                   !lt_dtype_is_float(memory->dtype)))
      return lt_error_set(LT_ERR_SHAPE, "%s: memory is %s, tgt is %s: need [B, S, C] floats with C = d_model %lld", op,
                     LT_DESC(memory), LT_DESC(tgt), (long long)c->d_model),
             NULL;
    const int64_t S = memory ? memory->shape[1] : cache->layer[0].cross.len;
    if (src_pad && (src_pad->dtype != LT_DTYPE_BOOL || src_pad->ndim != 2 || src_pad->shape[0] != tgt->shape[0] ||
                    src_pad->shape[1] != S))
      return lt_error_set(LT_ERR_SHAPE, "%s: src_pad is %s, tgt is %s, memory has %lld positions: need a bool [B, S] "
                     "mask (true = padding)", op, LT_DESC(src_pad), LT_DESC(tgt), (long long)S),
             NULL;
  } else if (memory || src_pad) {
    return lt_error_set(LT_ERR_INVALID, "%s: memory / src_pad given to a decoder-only model (pass NULL)", op), NULL;
  }
  int64_t *lens = NULL; /* cache lengths before the step, restored on failure */
  if (cache) {
    if (!(lens = malloc(sizeof *lens * (size_t)(2 * cache->n)))) return lt_error_set(LT_ERR_NOMEM, "%s: out of memory", op), NULL;
    for (int64_t i = 0; i < cache->n; i++)
      lens[2 * i] = cache->layer[i].self.len, lens[2 * i + 1] = cache->layer[i].cross.len;
  }
  const int64_t *left_pad = cache ? cache->left_pad : NULL;
  lt_tensor *kpm = NULL; /* a ragged batch: [B, len + T] true at every row's left padding */
  if (left_pad && cache->pad_rows != tgt->shape[0]) {
    free(lens);
    return lt_error_set(LT_ERR_SHAPE, "%s: tgt is %s, the cache's left padding has %lld rows: batch sizes differ", op,
                        LT_DESC(tgt), (long long)cache->pad_rows), NULL;
  }
  if (left_pad) {
    const int64_t B = tgt->shape[0], S = pos0 + tgt->shape[1];
    bool *mk = malloc(sizeof *mk * (size_t)(B * S));
    if (mk) {
      for (int64_t b = 0; b < B; b++)
        for (int64_t s = 0; s < S; s++) mk[b * S + s] = s < left_pad[b];
      kpm = lt_tensor_from_copy(LT_DTYPE_BOOL, 2, (int64_t[]){B, S}, mk);
      free(mk);
    } else {
      lt_error_set(LT_ERR_NOMEM, "%s: out of memory", op);
    }
    if (!kpm) {
      free(lens);
      return NULL;
    }
  }
  lt_tensor *bias = NULL; /* T5: [1, NH, T, pos0 + T], unidirectional buckets; a left padding shifts no distance */
  if (c->pos == LT_TF_POS_RELATIVE && !(bias = lt_relative_position_bias(m->dec_rel.weight, tgt->shape[1],
                                                                         pos0 + tgt->shape[1], pos0, false,
                                                                         c->rel_max_distance))) {
    free(lens), lt_tensor_free(kpm);
    return NULL;
  }
  lt_tensor *x = embed_forward(m, tgt, NULL, pos0, left_pad, ctx);
  const lt_attention_opts self_mask = {.causal = true, .key_padding_mask = kpm ? kpm : tgt_pad,
                                       .window = c->sliding_window, .attn_mask = bias};
  const lt_attention_opts mem_mask = {.key_padding_mask = src_pad};
  for (int64_t i = 0; x && i < m->n_dec; i++) {
    const tf_layer *L = &m->dec[i];
    step(&x, cache ? lt_transformer_layer_forward_cached(L, x, memory, &cache->layer[i], &self_mask, &mem_mask, pos0)
             : L->has_cross ? lt_transformer_decoder_layer_forward(L, x, memory, &self_mask, &mem_mask, pos0, ctx)
                            : lt_transformer_encoder_layer_forward(L, x, &self_mask, pos0, ctx));
  }
  if (x && m->has_dec_norm) step(&x, lt_norm_forward(&m->dec_norm, x));
  if (x && c->head_rescale) step(&x, lt_mul_scalar(x, 1.0 / sqrt((double)c->d_model))); /* T5's tied head */
  const lt_tensor *head = m->has_lm_head ? m->lm_head.weight : m->embed.weight; /* [V, C] */
  if (x && hl && hl->last) step(&x, lt_select(x, 1, x->shape[1] - 1)); /* [B, C] */
  if (x) step(&x, hl && hl->labels ? lt_linear_cross_entropy(x, head, hl->labels, hl->ce, hl->chunk_rows)
                                   : lt_linear(x, head, NULL));
  if (cache && !x)
    for (int64_t i = 0; i < cache->n; i++) cache->layer[i].self.len = lens[2 * i], cache->layer[i].cross.len = lens[2 * i + 1];
  free(lens);
  lt_tensor_free(kpm);
  lt_tensor_free(bias);
  return x;
}

lt_tensor *lt_transformer_decode(const lt_transformer *m, const lt_tensor *tgt, const lt_tensor *tgt_pad,
                                 const lt_tensor *memory, const lt_tensor *src_pad, int64_t pos0,
                                 const lt_nn_ctx *ctx) {
  return decode_impl("transformer_decode", m, tgt, tgt_pad, memory, src_pad, pos0, ctx, NULL, NULL);
}

lt_tensor *lt_transformer_decode_loss(const lt_transformer *m, const lt_tensor *tgt, const lt_tensor *tgt_pad,
                                      const lt_tensor *memory, const lt_tensor *src_pad, const lt_tensor *labels,
                                      const lt_cross_entropy_opts *ce, int64_t chunk_rows, const lt_nn_ctx *ctx) {
  if (!labels) return lt_error_null_arg("transformer_decode_loss", "labels"), NULL;
  const head_loss hl = {.labels = labels, .ce = ce, .chunk_rows = chunk_rows};
  return decode_impl("transformer_decode_loss", m, tgt, tgt_pad, memory, src_pad, 0, ctx, NULL, &hl);
}

lt_status lt_transformer_set_recompute(lt_transformer *m, lt_recompute_mode mode) {
  if (!m) return lt_error_set(LT_ERR_NULL, "transformer_set_recompute: the model is NULL");
  if ((unsigned)mode > LT_RECOMPUTE_LAYER)
    return lt_error_set(LT_ERR_INVALID, "transformer_set_recompute: mode %d: must be LT_RECOMPUTE_NONE, _ATTENTION or "
                        "_LAYER", (int)mode);
  for (int64_t i = 0; i < m->n_enc; i++) m->enc[i].recompute = mode;
  for (int64_t i = 0; i < m->n_dec; i++) m->dec[i].recompute = mode;
  return LT_OK;
}

/* ---- incremental decoding ---------------------------------------------------- */

lt_tf_cache *lt_tf_cache_new(const lt_transformer *m, int64_t cap) {
  if (!m) return lt_error_set(LT_ERR_NULL, "tf_cache_new: the model is NULL"), NULL;
  if (!m->dec) return lt_error_set(LT_ERR_INVALID, "tf_cache_new: an encoder-only model has no decoder to cache"), NULL;
  if (cap < 1 || cap > m->cfg.max_len)
    return lt_error_set(LT_ERR_INVALID, "tf_cache_new: cap %lld: must be in [1, max_len %lld]", (long long)cap,
                   (long long)m->cfg.max_len), NULL;
  lt_tf_cache *c = calloc(1, sizeof *c);
  if (c) c->layer = calloc((size_t)m->n_dec, sizeof *c->layer);
  if (!c || !c->layer) {
    free(c);
    return lt_error_set(LT_ERR_NOMEM, "tf_cache_new: out of memory"), NULL;
  }
  c->n = m->n_dec, c->cap = cap;
  for (int64_t i = 0; i < c->n; i++) lt_transformer_layer_cache_init(&c->layer[i], cap);
  return c;
}

void lt_tf_cache_reset(lt_tf_cache *c) {
  if (!c) return;
  for (int64_t i = 0; i < c->n; i++) lt_transformer_layer_cache_free(&c->layer[i]);
}

void lt_tf_cache_free(lt_tf_cache *c) {
  if (!c) return;
  lt_tf_cache_reset(c);
  free(c->left_pad);
  free(c->layer);
  free(c);
}

lt_status lt_tf_cache_set_left_pad(lt_tf_cache *c, int64_t B, const int64_t *left_pad) {
  const char *op = "tf_cache_set_left_pad";
  if (!c) return lt_error_set(LT_ERR_NULL, "%s: the cache is NULL", op);
  if (lt_tf_cache_len(c) != 0)
    return lt_error_set(LT_ERR_INVALID, "%s: the cache holds %lld positions: set the padding before the first step "
                        "(or after lt_tf_cache_reset)", op, (long long)lt_tf_cache_len(c));
  int64_t *p = NULL;
  if (left_pad) {
    if (B < 1) return lt_error_set(LT_ERR_INVALID, "%s: B %lld: need at least one row", op, (long long)B);
    for (int64_t b = 0; b < B; b++)
      if (left_pad[b] < 0 || left_pad[b] >= c->cap)
        return lt_error_set(LT_ERR_INVALID, "%s: row %lld: left padding %lld: must be in [0, cap %lld) (a row needs a "
                            "token)", op, (long long)b, (long long)left_pad[b], (long long)c->cap);
    if (!(p = malloc(sizeof *p * (size_t)B))) return lt_error_set(LT_ERR_NOMEM, "%s: out of memory", op);
    memcpy(p, left_pad, sizeof *p * (size_t)B);
  }
  free(c->left_pad);
  c->left_pad = p, c->pad_rows = left_pad ? B : 0;
  return LT_OK;
}

int64_t lt_tf_cache_len(const lt_tf_cache *c) { return c && c->n > 0 ? c->layer[0].self.len : 0; }

lt_status lt_tf_cache_reorder(lt_tf_cache *c, const lt_tensor *rows) {
  if (!c) return lt_error_set(LT_ERR_NULL, "tf_cache_reorder: the cache is NULL");
  if (!rows) return lt_error_null_arg("tf_cache_reorder", "rows");
  /* every buffer reordered into a new one first, so that a failure changes nothing */
  const int64_t n = 4 * c->n;
  lt_tensor **nt = calloc((size_t)n, sizeof *nt);
  if (!nt) return lt_error_set(LT_ERR_NOMEM, "tf_cache_reorder: out of memory");
  bool prev = lt_set_grad_enabled(false);
  lt_status s = LT_OK;
  for (int64_t i = 0; i < n && s == LT_OK; i++) {
    tf_layer_cache *L = &c->layer[i / 4];
    lt_tensor *old = (lt_tensor *[]){L->self.k, L->self.v, L->cross.k, L->cross.v}[i % 4];
    if (old && !(nt[i] = lt_tensor_keep(lt_index_select(old, 0, rows)))) s = lt_last_status();
  }
  lt_set_grad_enabled(prev);
  int64_t *np = NULL; /* the left padding follows its rows */
  if (s == LT_OK && c->left_pad) {
    const int64_t R = rows->numel;
    lt_tensor *r64 = lt_to_dtype(rows, LT_DTYPE_I64), *rc = r64 ? lt_contiguous(r64) : NULL;
    np = rc ? malloc(sizeof *np * (size_t)(R ? R : 1)) : NULL;
    if (!np) s = rc ? lt_error_set(LT_ERR_NOMEM, "tf_cache_reorder: out of memory") : lt_last_status();
    for (int64_t i = 0; np && i < R; i++) {
      const int64_t r = ((const int64_t *)rc->data)[i];
      if (r < 0 || r >= c->pad_rows) {
        s = lt_error_set(LT_ERR_INDEX, "tf_cache_reorder: row %lld of %lld", (long long)r, (long long)c->pad_rows);
        break;
      }
      np[i] = c->left_pad[r];
    }
    if (s == LT_OK) free(c->left_pad), c->left_pad = np, c->pad_rows = R, np = NULL;
    free(np);
    lt_tensor_free(r64), lt_tensor_free(rc);
  }
  for (int64_t i = 0; i < n; i++) {
    tf_layer_cache *L = &c->layer[i / 4];
    lt_tensor **slot = (lt_tensor **[]){&L->self.k, &L->self.v, &L->cross.k, &L->cross.v}[i % 4];
    if (s != LT_OK) {
      lt_tensor_free(nt[i]);
    } else if (*slot) {
      lt_tensor_free(*slot);
      *slot = nt[i];
    }
  }
  free(nt);
  return s;
}

/* The cached step, with the whole head (hl NULL) or the last position's. */
static lt_tensor *step_impl(const char *op, const lt_transformer *m, lt_tf_cache *c, const lt_tensor *tgt,
                            const lt_tensor *memory, const lt_tensor *src_pad, const head_loss *hl) {
  if (!c) return lt_error_set(LT_ERR_NULL, "%s: the cache is NULL", op), NULL;
  if (m && c->n != m->n_dec)
    return lt_error_set(LT_ERR_INVALID, "%s: the cache has %lld layers, the model's decoder %lld: made for another model",
                   op, (long long)c->n, (long long)m->n_dec), NULL;
  return decode_impl(op, m, tgt, NULL, memory, src_pad, lt_tf_cache_len(c), NULL, c, hl);
}

lt_tensor *lt_transformer_decode_step(const lt_transformer *m, lt_tf_cache *c, const lt_tensor *tgt,
                                      const lt_tensor *memory, const lt_tensor *src_pad) {
  return step_impl("transformer_decode_step", m, c, tgt, memory, src_pad, NULL);
}

lt_tensor *lt_transformer_decode_step_last(const lt_transformer *m, lt_tf_cache *c, const lt_tensor *tgt,
                                           const lt_tensor *memory, const lt_tensor *src_pad) {
  return step_impl("transformer_decode_step_last", m, c, tgt, memory, src_pad, &(head_loss){.last = true});
}

/* Mean over the non-padding positions: sum_s h * keep / max(count, eps)
 * (eps 1: all padding gives zeros, not NaN) -> [B, C]. */
static lt_tensor *masked_mean(const lt_tensor *h, const lt_tensor *src_pad, double eps) {
  if (!src_pad) return lt_mean(h, LT_DIMS(1), false); /* [B, C] */
  lt_tensor *keepb = lt_eq_scalar(src_pad, 0.0);                  /* [B, S] bool */
  lt_tensor *keep = keepb ? lt_to_dtype(keepb, h->dtype) : NULL;  /* [B, S] 1 = token */
  lt_tensor *keep3 = keep ? lt_unsqueeze(keep, -1) : NULL;         /* [B, S, 1] */
  lt_tensor *hk = keep3 ? lt_mul(h, keep3) : NULL;                 /* [B, S, C] */
  lt_tensor *sum = hk ? lt_sum(hk, LT_DIMS(1), false) : NULL;      /* [B, C] */
  lt_tensor *cnt = keep ? lt_sum(keep, LT_DIMS(1), true) : NULL;   /* [B, 1] */
  lt_tensor *cnt1 = cnt ? lt_clamp(cnt, eps, INFINITY) : NULL;
  lt_tensor *pooled = sum && cnt1 ? lt_div(sum, cnt1) : NULL;
  lt_tensor *tmp[] = {keepb, keep, keep3, hk, sum, cnt, cnt1};
  for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++) lt_tensor_free(tmp[i]);
  return pooled;
}

lt_tensor *lt_transformer_pool(const lt_transformer *m, const lt_tensor *hidden) {
  const char *op = "transformer_pool";
  if (!m) return lt_error_set(LT_ERR_NULL, "%s: the model is NULL", op), NULL;
  if (!m->cfg.pooler) return lt_error_set(LT_ERR_INVALID, "%s: the model has no pooler (pooler false)", op), NULL;
  if (!hidden) return lt_error_set(LT_ERR_NULL, "%s: hidden is NULL", op), NULL;
  if (hidden->ndim != 3 || hidden->shape[1] < 1 || hidden->shape[2] != m->cfg.d_model)
    return lt_error_set(LT_ERR_SHAPE, "%s: hidden is %s: need [B, S, C] with C = d_model %lld", op, LT_DESC(hidden),
                        (long long)m->cfg.d_model), NULL;
  lt_tensor *first = lt_select(hidden, 1, 0);                         /* [B, C] */
  lt_tensor *d = first ? lt_linear_forward(&m->pooler, first) : NULL; /* [B, C] */
  lt_tensor *out = d ? lt_tanh(d) : NULL;
  lt_tensor_free(first);
  lt_tensor_free(d);
  return out;
}

lt_tensor *lt_transformer_embed(const lt_transformer *m, const lt_tensor *src, const lt_tensor *types,
                                const lt_tensor *src_pad, bool normalize, const lt_nn_ctx *ctx) {
  lt_tensor *h = encode_impl("transformer_embed", m, src, types, src_pad, ctx); /* [B, S, C] */
  if (!h) return NULL;
  lt_tensor *e = masked_mean(h, src_pad, 1e-9); /* sentence-transformers' clamp(min=1e-9) */
  lt_tensor_free(h);
  if (!e || !normalize) return e;
  lt_tensor *sq = lt_square(e);                                /* [B, C] */
  lt_tensor *ss = sq ? lt_sum(sq, LT_DIMS(1), true) : NULL;    /* [B, 1] */
  lt_tensor *nrm = ss ? lt_sqrt(ss) : NULL;
  lt_tensor *den = nrm ? lt_clamp(nrm, 1e-12, INFINITY) : NULL; /* F.normalize's eps */
  lt_tensor *out = den ? lt_div(e, den) : NULL;
  lt_tensor *tmp[] = {e, sq, ss, nrm, den};
  for (size_t i = 0; i < sizeof tmp / sizeof *tmp; i++) lt_tensor_free(tmp[i]);
  return out;
}

static lt_tensor *classify_impl(const char *op, const lt_transformer *m, const lt_tensor *src,
                                const lt_tensor *types, const lt_tensor *src_pad, const lt_nn_ctx *ctx) {
  if (!m) return lt_error_set(LT_ERR_NULL, "%s: the model is NULL", op), NULL;
  if (m->cfg.arch != LT_TF_ENCODER_ONLY)
    return lt_error_set(LT_ERR_INVALID, "%s: only an encoder-only model has a classifier", op), NULL;
  if (m->cfg.n_classes == 0)
    return lt_error_set(LT_ERR_INVALID, "%s: the model has no classifier (n_classes 0)", op), NULL;
  lt_tensor *h = encode_impl(op, m, src, types, src_pad, ctx); /* [B, S, C] */
  if (!h) return NULL;
  lt_tensor *pooled = NULL;
  if (m->cfg.pooler) { /* BertForSequenceClassification: dropout(pooler_output) */
    pooled = lt_transformer_pool(m, h);
    if (pooled && m->cfg.dropout > 0.0 && ctx && ctx->training) step(&pooled, lt_dropout(pooled, m->cfg.dropout, ctx));
  } else {
    pooled = masked_mean(h, src_pad, 1.0);
  }
  lt_tensor_free(h);
  if (!pooled) return NULL;
  lt_tensor *out = lt_linear_forward(&m->classifier, pooled); /* [B, n_classes] */
  lt_tensor_free(pooled);
  return out;
}

lt_tensor *lt_transformer_classify(const lt_transformer *m, const lt_tensor *src, const lt_tensor *src_pad,
                                   const lt_nn_ctx *ctx) {
  return classify_impl("transformer_classify", m, src, NULL, src_pad, ctx);
}

lt_tensor *lt_transformer_classify_typed(const lt_transformer *m, const lt_tensor *src, const lt_tensor *types,
                                         const lt_tensor *src_pad, const lt_nn_ctx *ctx) {
  return classify_impl("transformer_classify_typed", m, src, types, src_pad, ctx);
}
