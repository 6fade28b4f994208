/*
 * models/transformer/hf_embed.c: sentence embeddings of texts with an
 * encoder directory, as sentence-transformers computes them (hf.h):
 * modules.json's pipeline (Transformer, Pooling, Normalize), its
 * Pooling/config.json and sentence_bert_config.json read and checked, then
 * texts -> tokenizer (lt_tokenizer_encode_ex with the post-processor's
 * special tokens) -> truncation to max_seq_length -> batches padded to their
 * longest row -> lt_transformer_embed (mean over the unpadded positions,
 * L2 normalisation when modules.json has Normalize).
 *
 * Truncation as transformers' tokenizer(truncation="longest_first",
 * max_length=max_seq_length) for one sequence: the text's tokens are cut to
 * max_seq_length minus the special tokens, which stay (the ids are the
 * encoding with specials, its text tokens located in it).
 *
 * What this is not: the other pooling modes (CLS, max, sqrt-length) or
 * modules (Dense, ...): refused naming them; nor a tokenizer (datasets/).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "libtensor.h"
#include "models/transformer/hf_internal.h"

#define PATH_LEN 4096
#define ST_JSON_MAX (1u << 20)
#define ST_MAX_MODULES 64

static const char *const ST_TRANSFORMER = "sentence_transformers.models.Transformer";
static const char *const ST_POOLING = "sentence_transformers.models.Pooling";
static const char *const ST_NORMALIZE = "sentence_transformers.models.Normalize";

static bool exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* The Pooling module's config.json: mean pooling over tokens, of the model's width. */
static lt_status read_pooling(const char *path, const lt_tf_config *cfg) {
  json_t *j;
  lt_status s = lt__hf_read_json(path, ST_JSON_MAX, "pooling config", false, &j);
  if (s != LT_OK) return s;
  const char *key;
  json_t *v;
  json_object_foreach(j, key, v) {
    if (strcmp(key, "word_embedding_dimension") == 0) {
      if (!json_is_integer(v) || json_integer_value(v) != cfg->d_model) {
        s = lt_error_set(LT_ERR_INVALID, "hf pooling config '%s': key 'word_embedding_dimension' is not the model's "
                         "hidden_size %lld", path, (long long)cfg->d_model);
        break;
      }
    } else if (strncmp(key, "pooling_mode_", 13) == 0) {
      const bool mean = strcmp(key, "pooling_mode_mean_tokens") == 0;
      if (!json_is_boolean(v) || json_is_true(v) != mean) {
        s = lt_error_set(LT_ERR_INVALID, "hf pooling config '%s': key '%s' is %s: libtensor's embeddings are the "
                         "mean over tokens only (pooling_mode_mean_tokens true, every other mode false)", path, key,
                         json_is_true(v) ? "true" : json_is_false(v) ? "false" : "not true or false");
        break;
      }
    } else if (strcmp(key, "include_prompt") == 0) {
      if (!json_is_true(v)) {
        s = lt_error_set(LT_ERR_INVALID, "hf pooling config '%s': key 'include_prompt' must be true", path);
        break;
      }
    }
  }
  if (s == LT_OK && !json_is_true(json_object_get(j, "pooling_mode_mean_tokens")))
    s = lt_error_set(LT_ERR_INVALID, "hf pooling config '%s': key 'pooling_mode_mean_tokens' is not true: libtensor's "
                     "embeddings are the mean over tokens", path);
  json_decref(j);
  return s;
}

lt_status lt_hf_read_sentence_config(const char *dir, const lt_tf_config *cfg, lt_hf_sentence_config *out) {
  if (!dir) return lt_error_null_arg("hf_read_sentence_config", "dir");
  if (!cfg) return lt_error_null_arg("hf_read_sentence_config", "cfg");
  if (!out) return lt_error_null_arg("hf_read_sentence_config", "out");
  if (strlen(dir) > PATH_LEN - 300) return lt_error_set(LT_ERR_INVALID, "hf_read_sentence_config: directory name too long");
  lt_hf_sentence_config sc = {.max_seq_length = cfg->max_len, .normalize = false};
  char path[PATH_LEN];
  lt_status s = LT_OK;
  snprintf(path, sizeof path, "%s/modules.json", dir);
  if (exists(path)) { /* absent: sentence-transformers' default for a plain model, mean pooling */
    json_t *mods;
    if ((s = lt__hf_read_json(path, ST_JSON_MAX, "modules", true, &mods)) != LT_OK) return s;
    bool pooled = false;
    if (json_array_size(mods) > ST_MAX_MODULES)
      s = lt_error_set(LT_ERR_FORMAT, "hf modules '%s': %zu modules, at most %d", path, json_array_size(mods),
                       ST_MAX_MODULES);
    for (size_t i = 0; s == LT_OK && i < json_array_size(mods); i++) {
      json_t *m = json_array_get(mods, i), *t = json_object_get(m, "type"), *p = json_object_get(m, "path");
      const char *type = json_string_value(t), *sub = json_string_value(p);
      if (!json_is_object(m) || !type || (p && !sub))
        s = lt_error_set(LT_ERR_FORMAT, "hf modules '%s': module %zu is not an object with a string 'type' (and "
                         "'path')", path, i);
      else if (i == 0 ? strcmp(type, ST_TRANSFORMER) != 0 : strcmp(type, ST_TRANSFORMER) == 0)
        s = lt_error_set(LT_ERR_INVALID, "hf modules '%s': module %zu is '%s': the Transformer comes first, once",
                         path, i, type);
      else if (i == 0 && sub && sub[0] && strcmp(sub, ".") != 0)
        s = lt_error_set(LT_ERR_INVALID, "hf modules '%s': the Transformer's path '%s': libtensor reads the model of "
                         "the directory itself", path, sub);
      else if (i > 0 && strcmp(type, ST_POOLING) == 0) {
        if (pooled || !sub || !sub[0] || strchr(sub, '/') || strcmp(sub, "..") == 0 || strcmp(sub, ".") == 0 ||
            strlen(sub) > 255)
          s = lt_error_set(LT_ERR_INVALID, "hf modules '%s': module %zu (Pooling): %s", path, i,
                           pooled ? "a second Pooling module" : "its path must be a directory name inside the model's");
        else {
          char pc[PATH_LEN];
          snprintf(pc, sizeof pc, "%s/%s/config.json", dir, sub);
          s = read_pooling(pc, cfg);
          pooled = true;
        }
      } else if (i > 0 && strcmp(type, ST_NORMALIZE) == 0) {
        if (!pooled || sc.normalize)
          s = lt_error_set(LT_ERR_INVALID, "hf modules '%s': module %zu (Normalize) must follow the Pooling module, "
                           "once", path, i);
        sc.normalize = true;
      } else if (i > 0) {
        s = lt_error_set(LT_ERR_INVALID, "hf modules '%s': module %zu type '%.200s': libtensor runs Transformer, "
                         "Pooling (mean) and Normalize", path, i, type);
      }
    }
    if (s == LT_OK && !pooled)
      s = lt_error_set(LT_ERR_INVALID, "hf modules '%s': no Pooling module (the embeddings would be per token)", path);
    json_decref(mods);
    if (s != LT_OK) return s;
  }
  snprintf(path, sizeof path, "%s/sentence_bert_config.json", dir);
  if (exists(path)) {
    json_t *j;
    if ((s = lt__hf_read_json(path, ST_JSON_MAX, "sentence config", false, &j)) != LT_OK) return s;
    lt__hf_cfg r = {path, j, LT_OK};
    lt__hf_get_int(&r, "max_seq_length", &sc.max_seq_length, false, "max_len");
    bool lower = false;
    lt__hf_get_bool(&r, "do_lower_case", &lower);
    json_decref(j);
    if ((s = r.s) != LT_OK) return s;
    if (lower)
      return lt_error_set(LT_ERR_INVALID, "hf sentence config '%s': key 'do_lower_case' true: libtensor reads the "
                          "text as given (the tokenizer's own normalizer lowercases where it should)", path);
    if (sc.max_seq_length > cfg->max_len)
      return lt_error_set(LT_ERR_INVALID, "hf sentence config '%s': key 'max_seq_length' %lld: over the model's "
                          "max_position_embeddings %lld", path, (long long)sc.max_seq_length, (long long)cfg->max_len);
  }
  *out = sc;
  return LT_OK;
}

/* The ids of text: the encoding with special tokens, its text tokens cut so
 * that at most max remain in all. *ids returns new (free()). */
static lt_status encode_one(const lt_tokenizer *tok, const char *text, size_t len, int64_t max, int64_t **ids,
                            int64_t *n) {
  int64_t *all = NULL, *raw = NULL, na = 0, nr = 0;
  lt_status s = lt_tokenizer_encode_ex(tok, text, len, LT_ENCODE_ADD_SPECIAL, &all, NULL, &na);
  if (s != LT_OK) return s;
  if (na <= max) {
    *ids = all, *n = na;
    return LT_OK;
  }
  if ((s = lt_tokenizer_encode_ex(tok, text, len, 0, &raw, NULL, &nr)) != LT_OK) {
    free(all);
    return s;
  }
  const int64_t k = na - nr; /* the specials around the text's tokens */
  int64_t p = -1;
  for (int64_t q = 0; q <= k && p < 0; q++)
    if (memcmp(all + q, raw, sizeof *raw * (size_t)nr) == 0) p = q;
  if (k < 0 || p < 0 || k >= max) {
    free(all), free(raw);
    return lt_error_set(LT_ERR_INVALID, "hf_embed_texts: a text of %lld tokens (%lld with special tokens) cannot be "
                        "cut to max_seq_length %lld around its special tokens", (long long)nr, (long long)na,
                        (long long)max);
  }
  const int64_t keep = max - k; /* text tokens kept */
  memmove(all + p + keep, all + p + nr, sizeof *all * (size_t)(k - p));
  free(raw);
  *ids = all, *n = max;
  return LT_OK;
}

typedef struct {
  int64_t i, n; /* text index, its length */
} by_len;

static int longer_first(const void *a, const void *b) {
  const by_len *x = a, *y = b;
  return x->n != y->n ? (x->n < y->n ? 1 : -1) : (x->i > y->i) - (x->i < y->i);
}

lt_tensor *lt_hf_embed_texts(const lt_transformer *m, const lt_tokenizer *tok, const lt_hf_sentence_config *sc,
                             int64_t n, const char *const *texts, const size_t *lens, int64_t batch) {
  const char *op = "hf_embed_texts";
  if (!m || !tok || !sc || (n > 0 && !texts))
    return lt_error_set(LT_ERR_NULL, "%s: %s is NULL", op, !m ? "m" : !tok ? "tok" : !sc ? "sc" : "texts"), NULL;
  const lt_tf_config *c = lt_transformer_config(m);
  if (c->arch == LT_TF_DECODER_ONLY)
    return lt_error_set(LT_ERR_INVALID, "%s: a decoder-only model has no encoder to embed with", op), NULL;
  if (n < 0 || batch < 1)
    return lt_error_set(LT_ERR_INVALID, "%s: n %lld, batch %lld: need n >= 0 and batch >= 1", op, (long long)n,
                        (long long)batch), NULL;
  if (sc->max_seq_length < 1 || sc->max_seq_length > c->max_len)
    return lt_error_set(LT_ERR_INVALID, "%s: max_seq_length %lld: must be in [1, max_len %lld]", op,
                        (long long)sc->max_seq_length, (long long)c->max_len), NULL;
  const int64_t C = c->d_model, pad_id = c->pad_id >= 0 ? c->pad_id : 0;
  lt_tensor *out = lt_zeros(LT_DTYPE_F32, 2, (int64_t[]){n, C});
  int64_t **ids = calloc((size_t)(n ? n : 1), sizeof *ids);
  by_len *order = calloc((size_t)(n ? n : 1), sizeof *order);
  int64_t *bi = NULL;
  bool *bp = NULL;
  lt_status s = out && ids && order ? LT_OK : lt_error_set(LT_ERR_NOMEM, "%s: out of memory", op);
  for (int64_t i = 0; s == LT_OK && i < n; i++) {
    if (!texts[i]) s = lt_error_set(LT_ERR_NULL, "%s: texts[%lld] is NULL", op, (long long)i);
    else s = encode_one(tok, texts[i], lens ? lens[i] : strlen(texts[i]), sc->max_seq_length, &ids[i], &order[i].n);
    order[i].i = i;
    for (int64_t t = 0; s == LT_OK && t < order[i].n; t++)
      if (ids[i][t] < 0 || ids[i][t] >= c->vocab_size)
        s = lt_error_set(LT_ERR_INVALID, "%s: text %lld: token id %lld is outside the model's vocabulary of %lld: "
                         "the tokenizer is not this model's", op, (long long)i, (long long)ids[i][t],
                         (long long)c->vocab_size);
  }
  if (s == LT_OK) qsort(order, (size_t)n, sizeof *order, longer_first); /* batches of similar lengths */
  const int64_t B0 = batch < n ? batch : (n ? n : 1), L0 = n ? (order[0].n > 0 ? order[0].n : 1) : 1;
  if (s == LT_OK && (!(bi = malloc(sizeof *bi * (size_t)(B0 * L0))) || !(bp = malloc(sizeof *bp * (size_t)(B0 * L0)))))
    s = lt_error_set(LT_ERR_NOMEM, "%s: out of memory", op);
  const bool prev = lt_set_grad_enabled(false);
  for (int64_t b0 = 0; s == LT_OK && b0 < n; b0 += batch) {
    const int64_t B = n - b0 < batch ? n - b0 : batch, L = order[b0].n > 0 ? order[b0].n : 1;
    for (int64_t r = 0; r < B; r++) {
      const by_len *o = &order[b0 + r];
      for (int64_t t = 0; t < L; t++) bi[r * L + t] = t < o->n ? ids[o->i][t] : pad_id, bp[r * L + t] = t >= o->n;
    }
    lt_tensor *x = lt_tensor_from_copy(LT_DTYPE_I64, 2, (int64_t[]){B, L}, bi);
    lt_tensor *pad = x ? lt_tensor_from_copy(LT_DTYPE_BOOL, 2, (int64_t[]){B, L}, bp) : NULL;
    lt_tensor *e = pad ? lt_transformer_embed(m, x, NULL, pad, sc->normalize, NULL) : NULL; /* [B, C] */
    lt_tensor *ec = e ? lt_contiguous(e) : NULL;
    if (!ec) s = lt_last_status();
    for (int64_t r = 0; s == LT_OK && r < B; r++)
      memcpy((float *)out->data + order[b0 + r].i * C, (const float *)ec->data + r * C, sizeof(float) * (size_t)C);
    lt_tensor_free(ec), lt_tensor_free(e), lt_tensor_free(pad), lt_tensor_free(x);
  }
  lt_set_grad_enabled(prev);
  for (int64_t i = 0; ids && i < n; i++) free(ids[i]);
  free(ids), free(order), free(bi), free(bp);
  if (s != LT_OK) {
    lt_tensor_free(out);
    return NULL;
  }
  return out;
}
