/*
 * models/transformer/config.c: the Transformer's configuration in words and
 * in files (config.h): names of the configuration's enums (for command lines
 * and files) and the configuration as checkpoint attributes, so that a
 * checkpoint rebuilds its model without any other input; and the size of a
 * configuration's model before it is built (lt_tf_config_size).
 *
 * What this is not: the checkpoint format itself (checkpoint/), where a
 * model is loaded from (load.c), or the training program (programs/train_main.c,
 * which uses these).
 */
#include "models/transformer/config.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* ---- names ------------------------------------------------------------------ */

static const char *const arch_names[] = {"encoder-decoder", "decoder-only", "encoder-only"};
static const char *const norm_names[] = {"layernorm", "rmsnorm"};
static const char *const pos_names[] = {"sinusoidal", "learned", "rope", "relative"};
static const char *const act_names[] = {"relu", "gelu", "gelu_tanh", "silu"};
static const char *const rope_type_names[] = {"default", "linear", "llama3"}; /* transformers' rope_type */
#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

const char *lt_tf_arch_name(lt_tf_arch a) { return lt_enum_name(arch_names, COUNT(arch_names), (int)a); }
const char *lt_tf_norm_name(lt_tf_norm n) { return lt_enum_name(norm_names, COUNT(norm_names), (int)n); }
const char *lt_tf_pos_name(lt_tf_pos p) { return lt_enum_name(pos_names, COUNT(pos_names), (int)p); }
const char *lt_tf_act_name(lt_activation a) { return lt_enum_name(act_names, COUNT(act_names), (int)a); }
const char *lt_tf_rope_type_name(lt_rope_type t) { return lt_enum_name(rope_type_names, COUNT(rope_type_names), (int)t); }

/* Shorthands the command line has always accepted. */
static const lt_enum_alias arch_aliases[] = {
    {"encdec", LT_TF_ENCODER_DECODER}, {"decoder", LT_TF_DECODER_ONLY}, {"encoder", LT_TF_ENCODER_ONLY}};

LT_ENUM_PARSER(lt_tf_arch_parse, lt_tf_arch, "architecture", arch_names, COUNT(arch_names), arch_aliases, COUNT(arch_aliases))
LT_ENUM_PARSER(lt_tf_norm_parse, lt_tf_norm, "norm", norm_names, COUNT(norm_names), NULL, 0)
LT_ENUM_PARSER(lt_tf_pos_parse, lt_tf_pos, "positions", pos_names, COUNT(pos_names), NULL, 0)
LT_ENUM_PARSER(lt_tf_act_parse, lt_activation, "activation", act_names, COUNT(act_names), NULL, 0)
LT_ENUM_PARSER(lt_tf_rope_type_parse, lt_rope_type, "rope type", rope_type_names, COUNT(rope_type_names), NULL, 0)

/* ---- the configuration as checkpoint attributes ------------------------------- */

/* X(field) for each kind of lt_tf_config field, in declaration order. */
#define TF_INT_FIELDS(X) \
  X(vocab_size) X(d_model) X(n_heads) X(n_kv_heads) X(n_enc_layers) X(n_dec_layers) X(d_ff) X(max_len) \
  X(n_classes) X(pad_id)
#define TF_BOOL_FIELDS(X) X(pre_norm) X(swiglu) X(tie_embeddings) X(scale_embeddings) X(bias)
#define TF_DOUBLE_FIELDS(X) X(dropout) X(norm_eps) X(rope_base)
/* Fields added after checkpoints existed (BERT's, then Qwen2's, Mistral's,
 * Llama 3's and T5's): written always, read as 0 / false / "default" when a
 * checkpoint lacks them, so older checkpoints still load. */
#define TF_LATE_INT_FIELDS(X) \
  X(type_vocab_size) X(sliding_window) X(rope_original_max_len) X(rel_buckets) X(rel_max_distance)
#define TF_LATE_BOOL_FIELDS(X) X(embed_norm) X(pooler) X(qkv_bias) X(head_rescale)
#define TF_LATE_DOUBLE_FIELDS(X) X(rope_factor) X(rope_low_freq_factor) X(rope_high_freq_factor) X(attn_scale)

lt_status lt_tf_config_to_meta(const lt_tf_config *cfg, lt_ckpt_meta *meta) {
  if (!cfg || !meta) return lt_error_set(LT_ERR_NULL, "tf_config_to_meta: %s is NULL", cfg ? "meta" : "cfg");
  lt_status s = LT_OK;
  s = s ? s : lt_ckpt_meta_set_string(meta, "arch", lt_tf_arch_name(cfg->arch));
#define SET_INT(f) s = s ? s : lt_ckpt_meta_set_int(meta, #f, cfg->f);
#define SET_BOOL(f) s = s ? s : lt_ckpt_meta_set_int(meta, #f, cfg->f ? 1 : 0);
#define SET_DOUBLE(f) s = s ? s : lt_ckpt_meta_set_double(meta, #f, cfg->f);
  TF_INT_FIELDS(SET_INT)
  TF_BOOL_FIELDS(SET_BOOL)
  TF_DOUBLE_FIELDS(SET_DOUBLE)
  TF_LATE_INT_FIELDS(SET_INT)
  TF_LATE_BOOL_FIELDS(SET_BOOL)
  TF_LATE_DOUBLE_FIELDS(SET_DOUBLE)
#undef SET_INT
#undef SET_BOOL
#undef SET_DOUBLE
  s = s ? s : lt_ckpt_meta_set_string(meta, "norm", lt_tf_norm_name(cfg->norm));
  s = s ? s : lt_ckpt_meta_set_string(meta, "act", lt_tf_act_name(cfg->act));
  s = s ? s : lt_ckpt_meta_set_string(meta, "pos", lt_tf_pos_name(cfg->pos));
  s = s ? s : lt_ckpt_meta_set_string(meta, "rope_type", lt_tf_rope_type_name(cfg->rope_type));
  return s;
}

static lt_status need(const lt_ckpt_meta *m, const char *key, lt_ckpt_kind kind) {
  int k = lt_ckpt_meta_kind(m, key);
  if (k == (int)kind) return LT_OK;
  static const char *const kinds[] = {"int", "double", "string", "bytes"};
  if (k < 0) return lt_error_set(LT_ERR_FORMAT, "tf_config_from_meta: the model configuration lacks '%s'", key);
  return lt_error_set(LT_ERR_FORMAT, "tf_config_from_meta: the model configuration's '%s' is %s, expected %s", key,
                 kinds[k], kinds[kind]);
}

lt_status lt_tf_config_from_meta(const lt_ckpt_meta *meta, lt_tf_config *cfg) {
  if (!cfg || !meta) return lt_error_set(LT_ERR_NULL, "tf_config_from_meta: %s is NULL", cfg ? "meta" : "cfg");
  lt_tf_config c;
  memset(&c, 0, sizeof c);
  const char *str;
  int64_t v;
  lt_status s;
#define GET_STR(key, parse, field)                                                                     \
  if ((s = need(meta, key, LT_CKPT_STRING)) || (s = lt_ckpt_meta_get_string(meta, key, &str))) return s; \
  if ((s = parse(str, &c.field))) return s;
  GET_STR("arch", lt_tf_arch_parse, arch)
  GET_STR("norm", lt_tf_norm_parse, norm)
  GET_STR("act", lt_tf_act_parse, act)
  GET_STR("pos", lt_tf_pos_parse, pos)
#define GET_INT(f) \
  if ((s = need(meta, #f, LT_CKPT_INT)) || (s = lt_ckpt_meta_get_int(meta, #f, &c.f))) return s;
#define GET_BOOL(f)                                                                       \
  if ((s = need(meta, #f, LT_CKPT_INT)) || (s = lt_ckpt_meta_get_int(meta, #f, &v))) return s; \
  if (v != 0 && v != 1)                                                                   \
    return lt_error_set(LT_ERR_FORMAT, "tf_config_from_meta: '%s' is %lld, must be 0 or 1", #f, (long long)v); \
  c.f = v == 1;
#define GET_DOUBLE(f) \
  if ((s = need(meta, #f, LT_CKPT_DOUBLE)) || (s = lt_ckpt_meta_get_double(meta, #f, &c.f))) return s;
  TF_INT_FIELDS(GET_INT)
  TF_BOOL_FIELDS(GET_BOOL)
  TF_DOUBLE_FIELDS(GET_DOUBLE)
#define LATE_INT(f) \
  if (lt_ckpt_meta_kind(meta, #f) >= 0) { GET_INT(f) }
#define LATE_BOOL(f) \
  if (lt_ckpt_meta_kind(meta, #f) >= 0) { GET_BOOL(f) }
#define LATE_DOUBLE(f) \
  if (lt_ckpt_meta_kind(meta, #f) >= 0) { GET_DOUBLE(f) }
  TF_LATE_INT_FIELDS(LATE_INT)
  TF_LATE_BOOL_FIELDS(LATE_BOOL)
  TF_LATE_DOUBLE_FIELDS(LATE_DOUBLE)
  if (lt_ckpt_meta_kind(meta, "rope_type") >= 0) { GET_STR("rope_type", lt_tf_rope_type_parse, rope_type) }
#undef LATE_INT
#undef LATE_BOOL
#undef LATE_DOUBLE
#undef GET_STR
#undef GET_INT
#undef GET_BOOL
#undef GET_DOUBLE
  if ((s = lt_tf_config_validate(&c))) return s;
  *cfg = c;
  return LT_OK;
}

/* ---- size before building (transformer.h) --------------------------------- */

/* Checked a * b + c into *acc (the running total), naming what overflows. */
static lt_status size_add(int64_t *acc, int64_t a, int64_t b, const char *what) {
  int64_t p, t;
  if (__builtin_mul_overflow(a, b, &p) || __builtin_add_overflow(*acc, p, &t))
    return lt_error_set(LT_ERR_OVERFLOW, "tf_config_size: %s (%lld x %lld) overflows 64-bit arithmetic", what,
                   (long long)a, (long long)b);
  *acc = t;
  return LT_OK;
}

/* Mirrors transformer.c's build() term by term; test_transformer compares it
 * with the built store for every architecture and option. */
lt_status lt_tf_config_size(const lt_tf_config *c, int64_t *n_params, size_t *bytes) {
  lt_status s = lt_tf_config_validate(c);
  if (s != LT_OK) return s;
  /* the terms below double and add to these before their checked products */
  if (c->d_model > INT64_MAX / 4 || c->d_ff > INT64_MAX / 4)
    return lt_error_set(LT_ERR_OVERFLOW, "tf_config_size: d_model %lld, d_ff %lld: a layer's size overflows 64-bit "
                        "arithmetic", (long long)c->d_model, (long long)c->d_ff);
  const int64_t C = c->d_model, kv = c->n_kv_heads * (C / c->n_heads), nb = c->bias ? 1 : 0;
  const int64_t norm = c->norm == LT_TF_RMS_NORM ? C : 2 * C;
  const bool has_enc = c->arch != LT_TF_DECODER_ONLY, has_dec = c->arch != LT_TF_ENCODER_ONLY;
  /* one attention block: q, out [C, C]; k, v [kv, C]; biases */
  int64_t attn = 0, ffn = 0, layer_self = 0, layer_cross = 0, n = 0, table = 0;
  if ((s = size_add(&attn, 2 * C, C + nb, "attention q/out projections")) ||
      (s = size_add(&attn, 2 * kv, C + nb, "attention k/v projections")) ||
      (c->qkv_bias && (s = size_add(&attn, 1, C + 2 * kv, "attention q/k/v biases"))) ||
      (s = size_add(&ffn, c->d_ff, C + nb, "feed-forward linear1")) ||
      (s = size_add(&ffn, C, c->d_ff + nb, "feed-forward linear2")) ||
      (c->swiglu && (s = size_add(&ffn, c->d_ff, C + nb, "feed-forward w3"))))
    return s;
  if ((s = size_add(&layer_self, 1, attn, "a layer")) || (s = size_add(&layer_self, 1, ffn, "a layer")) ||
      (s = size_add(&layer_self, 2, norm, "a layer's norms")) ||
      (s = size_add(&layer_cross, 1, layer_self, "a decoder layer")) ||
      (s = size_add(&layer_cross, 1, attn + norm, "a decoder layer's cross-attention")))
    return s;
  if ((s = size_add(&n, c->vocab_size, C, "the embedding [vocab_size, d_model]"))) return s;
  if (c->pos == LT_TF_POS_LEARNED && (s = size_add(&n, c->max_len, C, "learned positions [max_len, d_model]")))
    return s;
  if (c->pos == LT_TF_POS_SINUSOIDAL && (s = size_add(&table, c->max_len, C, "the position table [max_len, d_model]")))
    return s;
  if (has_enc) {
    if ((s = size_add(&n, c->n_enc_layers, layer_self, "the encoder layers"))) return s;
    if ((c->arch == LT_TF_ENCODER_DECODER || c->pre_norm) && (s = size_add(&n, 1, norm, "encoder.norm"))) return s;
  }
  if (has_dec) {
    const bool cross = c->arch == LT_TF_ENCODER_DECODER;
    if ((s = size_add(&n, c->n_dec_layers, cross ? layer_cross : layer_self, "the decoder layers"))) return s;
    if ((c->arch == LT_TF_ENCODER_DECODER || c->pre_norm) && (s = size_add(&n, 1, norm, "decoder.norm"))) return s;
    if (!c->tie_embeddings && (s = size_add(&n, c->vocab_size, C, "lm_head [vocab_size, d_model]"))) return s;
  }
  if (c->arch == LT_TF_ENCODER_ONLY && (s = size_add(&n, c->n_classes, C + nb, "the classifier"))) return s;
  if (c->pos == LT_TF_POS_RELATIVE &&
      (s = size_add(&n, (has_enc ? 1 : 0) + (has_dec ? 1 : 0), c->rel_buckets * c->n_heads, "rel_bias tables")))
    return s;
  if ((s = size_add(&n, c->type_vocab_size, C, "token types [type_vocab_size, d_model]")) ||
      (c->embed_norm && (s = size_add(&n, 1, norm, "embed_norm"))) ||
      (c->pooler && (s = size_add(&n, C, C + nb, "the pooler"))))
    return s;
  int64_t all = n, b;
  if ((s = size_add(&all, 1, table, "parameters and table")) ||
      __builtin_mul_overflow(all, (int64_t)sizeof(float), &b) || (uint64_t)b > SIZE_MAX)
    return s ? s : lt_error_set(LT_ERR_OVERFLOW, "tf_config_size: %lld elements overflow a byte count", (long long)all);
  if (n_params) *n_params = n;
  if (bytes) *bytes = (size_t)b;
  return LT_OK;
}

/* ---- in words ----------------------------------------------------------------- */

char *lt_tf_config_describe(const lt_tf_config *c, int64_t n_params, char *buf, size_t size) {
  char layers[64], kv[40] = "";
  if (c->arch == LT_TF_ENCODER_DECODER)
    snprintf(layers, sizeof layers, "%lld+%lld layers", (long long)c->n_enc_layers, (long long)c->n_dec_layers);
  else
    snprintf(layers, sizeof layers, "%lld layers",
             (long long)(c->arch == LT_TF_DECODER_ONLY ? c->n_dec_layers : c->n_enc_layers));
  if (c->n_kv_heads != c->n_heads) snprintf(kv, sizeof kv, " / %lld kv", (long long)c->n_kv_heads);
  char types[40] = "", bert[96]; /* BERT's extras, when on */
  if (c->type_vocab_size > 0) snprintf(types, sizeof types, ", %lld token types", (long long)c->type_vocab_size);
  snprintf(bert, sizeof bert, "%s%s%s", types, c->embed_norm ? ", embedding norm" : "", c->pooler ? ", pooler" : "");
  char win[48] = "", dec[128]; /* the decoder families' extras, when on */
  if (c->sliding_window > 0) snprintf(win, sizeof win, ", sliding window %lld", (long long)c->sliding_window);
  snprintf(dec, sizeof dec, "%s%s%s%s", c->qkv_bias ? ", q/k/v biases" : "", win,
           c->rope_type != LT_ROPE_DEFAULT ? ", RoPE scaling " : "",
           c->rope_type != LT_ROPE_DEFAULT ? lt_tf_rope_type_name(c->rope_type) : "");
  snprintf(buf, size, "%s, %.3gM parameters (d_model %lld, %lld heads%s, %s, d_ff %lld, %s %s %s%s, %s positions%s%s%s, "
           "dropout %g)", lt_tf_arch_name(c->arch), (double)n_params / 1e6, (long long)c->d_model,
           (long long)c->n_heads, kv, layers, (long long)c->d_ff, c->pre_norm ? "pre-norm" : "post-norm",
           lt_tf_norm_name(c->norm), c->swiglu ? (c->act == LT_ACT_SILU ? "swiglu-" : "gated-") : "",
           lt_tf_act_name(c->act), lt_tf_pos_name(c->pos),
           c->tie_embeddings ? ", tied embeddings" : "", bert, dec, c->dropout);
  return buf;
}
