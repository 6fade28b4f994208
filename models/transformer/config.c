/*
 * models/transformer/config.c: the Transformer's configuration in words and
 * in files (config.h): names of the configuration's enums (for command lines
 * and files) and the configuration as checkpoint attributes, so that a
 * checkpoint rebuilds its model without any other input.
 *
 * What this is not: the checkpoint format itself (checkpoint/) or the
 * training program (train_main.c, which uses these).
 */
#include "models/transformer/config.h"

#include "models/transformer/hf.h"
#include "models/transformer/internal.h"
#include "train/trainer.h"

#include <stdlib.h>
#include <unistd.h>

#include <stdio.h>
#include <string.h>

/* ---- names ------------------------------------------------------------------ */

static const char *const arch_names[] = {"encoder-decoder", "decoder-only", "encoder-only"};
static const char *const norm_names[] = {"layernorm", "rmsnorm"};
static const char *const pos_names[] = {"sinusoidal", "learned", "rope"};
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
/* Fields added after checkpoints existed (BERT's, then Qwen2's, Mistral's
 * and Llama 3's): written always, read as 0 / false / "default" when a
 * checkpoint lacks them, so older checkpoints still load. */
#define TF_LATE_INT_FIELDS(X) X(type_vocab_size) X(sliding_window) X(rope_original_max_len)
#define TF_LATE_BOOL_FIELDS(X) X(embed_norm) X(pooler) X(qkv_bias)
#define TF_LATE_DOUBLE_FIELDS(X) X(rope_factor) X(rope_low_freq_factor) X(rope_high_freq_factor)

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

lt_transformer *lt_tf_load_model(const char *path, const lt_tf_config *cfg, const lt_ckpt_load_opts *opts) {
  if (!path || !cfg) return lt_error_set(LT_ERR_NULL, "tf_load_model: %s is NULL", path ? "cfg" : "path"), NULL;
  lt_generator *init = lt_generator_new(0); /* the values are replaced by the checkpoint's */
  lt_transformer *m = init ? lt_transformer_new(cfg, init) : NULL;
  lt_generator_free(init);
  if (!m) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", lt_last_error());
    return lt_error_set(lt_last_status(), "checkpoint '%s': building its model: %s", path, msg), NULL;
  }
  lt_ckpt_load_opts lo = opts ? *opts : LT_CKPT_LOAD_DEFAULTS;
  lo.non_strict = false;
  if (lt_ckpt_load_params(path, lt_transformer_params(m), &lo, NULL) != LT_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", lt_last_error());
    lt_status s = lt_last_status();
    lt_transformer_free(m);
    return lt_error_set(s, "checkpoint '%s': loading the model's parameters: %s", path, msg), NULL;
  }
  return m;
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
           lt_tf_norm_name(c->norm), c->swiglu ? "swiglu-" : "", lt_tf_act_name(c->act), lt_tf_pos_name(c->pos),
           c->tie_embeddings ? ", tied embeddings" : "", bert, dec, c->dropout);
  return buf;
}

/* ---- a run's starting point ------------------------------------------------ */

lt_status lt_tf_read_checkpoint_info(const char *path, const lt_ckpt_load_opts *opts, bool allow_model_only,
                                     lt_ckpt_info **info, int64_t *step) {
  *info = NULL;
  lt_params *empty = lt_params_new();
  if (!empty) return lt_last_status();
  lt_train_state st0 = {.params = empty};
  lt_ckpt_load_opts lo = opts ? *opts : LT_CKPT_LOAD_DEFAULTS;
  lo.non_strict = true; /* only the configuration and extra values are wanted here */
  lt_status s = lt_ckpt_load_training(path, &st0, &lo, info);
  if (s != LT_OK && allow_model_only) s = lt_ckpt_load_params(path, empty, &lo, info);
  lt_params_free(empty);
  if (s == LT_OK && step) *step = st0.step;
  return s;
}

lt_status lt_tf_source_read(const char *path, const char *prefix, const lt_ckpt_load_opts *opts, char *file,
                            size_t size, lt_tf_config *cfg, lt_tokenizer **tok, lt_ckpt_info **info) {
  *tok = NULL, *info = NULL;
  if (lt_hf_is_dir(path)) {
    if (lt_hf_read_config(path, cfg, NULL) != LT_OK) return lt_last_status();
    int n = snprintf(file, size, "%s", path);
    if (n < 0 || (size_t)n >= size) return lt_error_set(LT_ERR_OVERFLOW, "'%s': the path is too long", path);
    char tpath[4096];
    n = snprintf(tpath, sizeof tpath, "%s/%s", path, LT_HF_TOKENIZER_FILE);
    if (n < 0 || (size_t)n >= sizeof tpath) return lt_error_set(LT_ERR_OVERFLOW, "'%s': the path is too long", path);
    if (access(tpath, F_OK) != 0) { /* no libtensor tokenizer: the directory's own tokenizer.json, if any */
      n = snprintf(tpath, sizeof tpath, "%s/tokenizer.json", path);
      if (n < 0 || (size_t)n >= sizeof tpath || access(tpath, F_OK) != 0) return LT_OK;
      *tok = lt_tokenizer_load_hf(tpath);
      return *tok ? LT_OK : lt__tf_fail("the tokenizer");
    }
    char *blob = NULL;
    size_t bytes = 0;
    if (lt_ckpt_read_file(tpath, 1u << 30, &blob, &bytes) != LT_OK)
      return lt__tf_fail("the tokenizer");
    *tok = lt_tokenizer_deserialize(blob, bytes);
    free(blob);
    return *tok ? LT_OK : lt__tf_fail("the tokenizer");
  }
  /* a run directory stands for its newest valid checkpoint, as a resume does */
  if (lt_trainer_find_resume(path, prefix, file, size) != LT_OK) return lt_last_status();
  if (lt_tf_read_checkpoint_info(file, opts, true, info, NULL) != LT_OK) return lt_last_status();
  lt_status s = lt_tf_config_from_meta((*info)->config, cfg);
  if (s != LT_OK) {
    s = lt__tf_fail("the checkpoint's model configuration");
  } else {
    const void *blob;
    size_t bytes;
    if ((*info)->extra && lt_ckpt_meta_get_bytes((*info)->extra, LT_TF_CKPT_TOKENIZER, &blob, &bytes) == LT_OK &&
        !(*tok = lt_tokenizer_deserialize(blob, bytes)))
      s = lt__tf_fail("the checkpoint's tokenizer");
  }
  if (s != LT_OK) lt_ckpt_info_free(*info), *info = NULL;
  return s;
}

lt_status lt_tf_source_load_weights(const char *file, lt_transformer *m, const lt_ckpt_load_opts *opts) {
  if (lt_hf_is_dir(file)) return lt_hf_load_params(file, m);
  lt_ckpt_load_opts lo = opts ? *opts : LT_CKPT_LOAD_DEFAULTS;
  lo.non_strict = false;
  return lt_ckpt_load_params(file, lt_transformer_params(m), &lo, NULL);
}
