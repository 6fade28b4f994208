/*
 * models/transformer/hf_bert.c: BERT's Hugging Face layout (BertModel and
 * BertForSequenceClassification, so also all-MiniLM-L6-v2) for hf.c: which
 * configurations fit, the piece table (names, one to one, nn.Linear's
 * [out, in] on both sides), and config.json both ways.
 *
 * BERT is the encoder-only Transformer with:
 *   embeddings = LayerNorm(word[ids] + position[0..S-1] + token_type[types])
 *   layer      = post-norm: x = norm1(x + attn(x)); x = norm2(x + ffn(x)),
 *                with erf GELU (hidden_act "gelu")
 *   pooler     = tanh(dense(h[:, 0]))
 *   classifier = Linear(dropout(pooler))   (BertForSequenceClassification)
 * which lt_tf_config says with arch encoder-only, pre_norm false, pos
 * learned, type_vocab_size, embed_norm and pooler (docs/transformer.md).
 * The attention mask from padding is the encoder's key-padding mask.
 *
 * What this is not: the checked load or the writer (hf.c), a tokenizer
 * (WordPiece is the tokenizer.json reader's), or the other BERT heads
 * (masked LM, next sentence, token classification: their configurations
 * are refused by name).
 */
#include <stdio.h>
#include <string.h>

#include "libtensor.h"
#include "models/transformer/config.h"
#include "models/transformer/hf_internal.h"

#define NAME_LEN LT__HF_NAME_LEN
#define NOFIT(...) lt_error_set(LT_ERR_INVALID, __VA_ARGS__)

lt_status lt__hf_bert_fits(const lt_tf_config *c) {
  const char *who = "hf: an encoder-only model is exported as BERT, which needs";
  if (c->pre_norm) return NOFIT("%s pre_norm false (BERT is post-norm)", who);
  if (c->norm != LT_TF_LAYER_NORM) return NOFIT("%s norm layernorm; this model has %s", who, lt_tf_norm_name(c->norm));
  if (c->swiglu) return NOFIT("%s a two-layer feed-forward (no swiglu)", who);
  if (c->pos != LT_TF_POS_LEARNED)
    return NOFIT("%s pos learned (absolute positions); this model has pos %s", who, lt_tf_pos_name(c->pos));
  if (c->scale_embeddings) return NOFIT("%s scale_embeddings false", who);
  if (!c->bias) return NOFIT("%s bias (BERT has biases on every layer)", who);
  if (c->n_kv_heads != c->n_heads)
    return NOFIT("%s n_kv_heads == n_heads (no GQA); this model has %lld key/value heads for %lld", who,
                 (long long)c->n_kv_heads, (long long)c->n_heads);
  if (c->type_vocab_size < 1) return NOFIT("%s type_vocab_size >= 1 (token-type embeddings)", who);
  if (!c->embed_norm) return NOFIT("%s embed_norm (the embeddings' LayerNorm)", who);
  if (!c->pooler) return NOFIT("%s pooler (BertModel always builds one)", who);
  return LT_OK;
}

/* ---- names ------------------------------------------------------------------ */

lt_status lt__hf_bert_layout(lt_transformer *m, pieces *ps) {
  const lt_tf_config *c = lt_transformer_config(m);
  lt_params *P = lt_transformer_params(m);
  const char *pre = c->n_classes > 0 ? "bert." : ""; /* BertForSequenceClassification's base_model_prefix */
  /* {Hugging Face, libtensor} names of the model's ends */
  static const char *const head[][2] = {
      {"embeddings.word_embeddings.weight", "embed.weight"},
      {"embeddings.position_embeddings.weight", "pos_embed.weight"},
      {"embeddings.token_type_embeddings.weight", "type_embed.weight"},
      {"embeddings.LayerNorm.weight", "embed_norm.weight"},
      {"embeddings.LayerNorm.bias", "embed_norm.bias"},
  };
  /* {Hugging Face, libtensor} names under encoder.layer.<i> / encoder.layers.<i>, weight and bias each */
  static const char *const layer[][2] = {
      {"attention.self.query", "self_attn.q_proj"},   {"attention.self.key", "self_attn.k_proj"},
      {"attention.self.value", "self_attn.v_proj"},   {"attention.output.dense", "self_attn.out_proj"},
      {"attention.output.LayerNorm", "norm1"},        {"intermediate.dense", "linear1"},
      {"output.dense", "linear2"},                    {"output.LayerNorm", "norm2"},
  };
  char h[NAME_LEN + 16], l[NAME_LEN];
  lt_status s;
  for (size_t k = 0; k < sizeof head / sizeof *head; k++) {
    snprintf(h, sizeof h, "%s%s", pre, head[k][0]);
    if ((s = lt__hf_add_piece(ps, P, h, P_SAME, 1, head[k][1], 0, 0))) return s;
  }
  for (int64_t i = 0; i < c->n_enc_layers; i++)
    for (size_t k = 0; k < sizeof layer / sizeof *layer; k++)
      for (int b = 0; b < 2; b++) {
        const char *wb = b ? "bias" : "weight";
        snprintf(h, sizeof h, "%sencoder.layer.%lld.%s.%s", pre, (long long)i, layer[k][0], wb);
        snprintf(l, sizeof l, "encoder.layers.%lld.%s.%s", (long long)i, layer[k][1], wb);
        if ((s = lt__hf_add_piece(ps, P, h, P_SAME, 1, l, 0, 0))) return s;
      }
  snprintf(h, sizeof h, "%spooler.dense.weight", pre);
  if ((s = lt__hf_add_piece(ps, P, h, P_SAME, 1, "pooler.weight", 0, 0))) return s;
  snprintf(h, sizeof h, "%spooler.dense.bias", pre);
  if ((s = lt__hf_add_piece(ps, P, h, P_SAME, 1, "pooler.bias", 0, 0))) return s;
  if (c->n_classes > 0 &&
      ((s = lt__hf_add_piece(ps, P, "classifier.weight", P_SAME, 1, "classifier.weight", 0, 0)) ||
       (s = lt__hf_add_piece(ps, P, "classifier.bias", P_SAME, 1, "classifier.bias", 0, 0))))
    return s;
  return LT_OK;
}

bool lt__hf_bert_tolerated(const char *name) {
  return strcmp(name, "embeddings.position_ids") == 0 || strcmp(name, "bert.embeddings.position_ids") == 0;
}

/* ---- config.json -------------------------------------------------------------- */

static const char *act_hf(lt_activation a) {
  return a == LT_ACT_GELU ? "gelu" : a == LT_ACT_GELU_TANH ? "gelu_pytorch_tanh" : a == LT_ACT_RELU ? "relu" : "silu";
}

json_t *lt__hf_bert_config_json(const lt_tf_config *c) {
  json_t *j = json_object();
  if (!j) return NULL;
#define SET(k, v) json_object_set_new(j, k, v)
  SET("architectures", json_pack("[s]", c->n_classes > 0 ? "BertForSequenceClassification" : "BertModel"));
  SET("model_type", json_string("bert"));
  SET("vocab_size", json_integer(c->vocab_size));
  SET("hidden_size", json_integer(c->d_model));
  SET("num_hidden_layers", json_integer(c->n_enc_layers));
  SET("num_attention_heads", json_integer(c->n_heads));
  SET("intermediate_size", json_integer(c->d_ff));
  SET("hidden_act", json_string(act_hf(c->act)));
  SET("hidden_dropout_prob", json_real(c->dropout));
  SET("attention_probs_dropout_prob", json_real(c->dropout));
  SET("classifier_dropout", json_null());
  SET("max_position_embeddings", json_integer(c->max_len));
  SET("type_vocab_size", json_integer(c->type_vocab_size));
  SET("initializer_range", json_real(0.02));
  SET("layer_norm_eps", json_real(c->norm_eps));
  SET("pad_token_id", c->pad_id >= 0 ? json_integer(c->pad_id) : json_null());
  SET("position_embedding_type", json_string("absolute"));
  SET("is_decoder", json_false());
  SET("add_cross_attention", json_false());
  SET("use_cache", json_true());
  SET("torch_dtype", json_string("float32"));
  if (c->n_classes > 0) {
    json_t *id2label = json_object(), *label2id = json_object();
    for (int64_t k = 0; k < c->n_classes && id2label && label2id; k++) {
      char id[32], label[40];
      snprintf(id, sizeof id, "%lld", (long long)k);
      snprintf(label, sizeof label, "LABEL_%lld", (long long)k);
      json_object_set_new(id2label, id, json_string(label));
      json_object_set_new(label2id, label, json_integer(k));
    }
    SET("id2label", id2label);
    SET("label2id", label2id);
  }
#undef SET
  return j;
}

/* BERT's own checks of config.json's keys, on hf.c's reader (lt__hf_cfg). */
typedef lt__hf_cfg reader;

/* A boolean key that must be absent, null or want. */
static void want_bool(reader *r, const char *key, bool want) {
  if (r->s != LT_OK) return;
  json_t *v = json_object_get(r->j, key);
  if (!v || json_is_null(v)) return;
  if (!json_is_boolean(v))
    r->s = lt_error_set(LT_ERR_FORMAT, "hf config '%s': key '%s' is not true or false", r->path, key);
  else if (json_is_true(v) != want)
    r->s = lt_error_set(LT_ERR_INVALID, "hf config '%s': key '%s' is %s: libtensor's BERT runs only %s", r->path, key,
                        want ? "false" : "true", want ? "true" : "false");
}


lt_status lt__hf_bert_read_config(json_t *j, const char *path, lt_tf_config *out) {
  reader r = {path, j, LT_OK};
  /* BertConfig's defaults where a key may be absent */
  lt_tf_config c = lt_tf_config_default(LT_TF_ENCODER_ONLY);
  c.pre_norm = false, c.norm = LT_TF_LAYER_NORM, c.pos = LT_TF_POS_LEARNED, c.swiglu = false, c.bias = true;
  c.tie_embeddings = false, c.scale_embeddings = false, c.n_kv_heads = 0, c.n_dec_layers = 0, c.n_classes = 0;
  c.embed_norm = true, c.pooler = true, c.type_vocab_size = 2, c.norm_eps = 1e-12, c.dropout = 0.1, c.pad_id = 0;
  lt__hf_get_int(&r, "vocab_size", &c.vocab_size, true, NULL);
  lt__hf_get_int(&r, "hidden_size", &c.d_model, true, "d_model");
  lt__hf_get_int(&r, "num_hidden_layers", &c.n_enc_layers, true, "n_enc_layers");
  lt__hf_get_int(&r, "num_attention_heads", &c.n_heads, true, "n_heads");
  lt__hf_get_int(&r, "intermediate_size", &c.d_ff, true, "d_ff");
  lt__hf_get_int(&r, "max_position_embeddings", &c.max_len, true, "max_len");
  lt__hf_get_int(&r, "type_vocab_size", &c.type_vocab_size, false, "type_vocab_size");
  lt__hf_get_real(&r, "layer_norm_eps", &c.norm_eps, "norm_eps");
  lt__hf_get_real(&r, "hidden_dropout_prob", &c.dropout, "dropout"); /* libtensor has one rate for both of BERT's */
  if (r.s == LT_OK) {
    json_t *pad = json_object_get(j, "pad_token_id");
    if (pad && json_is_null(pad)) c.pad_id = -1;
    else lt__hf_get_int(&r, "pad_token_id", &c.pad_id, false, NULL);
  }
  c.n_kv_heads = c.n_heads;
  const char *act = lt__hf_get_str(&r, "hidden_act", "gelu");
  if (r.s == LT_OK) {
    if (strcmp(act, "gelu") == 0) c.act = LT_ACT_GELU;
    else if (strcmp(act, "gelu_new") == 0 || strcmp(act, "gelu_pytorch_tanh") == 0) c.act = LT_ACT_GELU_TANH;
    else if (strcmp(act, "relu") == 0) c.act = LT_ACT_RELU;
    else if (strcmp(act, "silu") == 0 || strcmp(act, "swish") == 0) c.act = LT_ACT_SILU;
    else
      r.s = lt_error_set(LT_ERR_INVALID, "hf config '%s': key 'hidden_act' \"%s\": libtensor's BERT runs \"gelu\", "
                         "\"gelu_new\", \"gelu_pytorch_tanh\", \"relu\" or \"silu\"", path, act);
  }
  const char *pet = lt__hf_get_str(&r, "position_embedding_type", "absolute");
  if (r.s == LT_OK && strcmp(pet, "absolute") != 0)
    r.s = lt_error_set(LT_ERR_INVALID, "hf config '%s': key 'position_embedding_type' \"%s\": libtensor's BERT runs "
                       "only \"absolute\" positions", path, pet);
  want_bool(&r, "is_decoder", false);
  want_bool(&r, "add_cross_attention", false);
  /* the head: BertModel (no classifier) or BertForSequenceClassification */
  if (r.s == LT_OK) {
    json_t *arch = json_object_get(j, "architectures");
    const char *a = "BertModel";
    if (arch && !json_is_null(arch)) {
      if (!json_is_array(arch) || json_array_size(arch) != 1 || !json_is_string(json_array_get(arch, 0)))
        r.s = lt_error_set(LT_ERR_FORMAT, "hf config '%s': key 'architectures' must be a list of one name", path);
      else
        a = json_string_value(json_array_get(arch, 0));
    }
    if (r.s == LT_OK && strcmp(a, "BertForSequenceClassification") == 0) {
      json_t *labels = json_object_get(j, "id2label");
      c.n_classes = labels && json_is_object(labels) ? (int64_t)json_object_size(labels) : 2; /* PretrainedConfig's 2 */
      lt__hf_get_int(&r, "num_labels", &c.n_classes, false, NULL);
      if (r.s == LT_OK && c.n_classes < 1)
        r.s = lt_error_set(LT_ERR_INVALID, "hf config '%s': BertForSequenceClassification with %lld labels", path,
                           (long long)c.n_classes);
    } else if (r.s == LT_OK && strcmp(a, "BertModel") != 0) {
      r.s = lt_error_set(LT_ERR_INVALID, "hf config '%s': key 'architectures' \"%s\": libtensor's BERT runs "
                         "\"BertModel\" and \"BertForSequenceClassification\"", path, a);
    }
  }
  if (r.s != LT_OK) return r.s;
  if (lt_tf_config_validate(&c) != LT_OK || lt__hf_bert_fits(&c) != LT_OK) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", lt_last_error());
    return lt_error_set(LT_ERR_INVALID, "hf config '%s': %s", path, msg);
  }
  *out = c;
  return LT_OK;
}
