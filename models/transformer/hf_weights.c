/*
 * models/transformer/hf_weights.c: the weights of a Hugging Face directory
 * (hf_internal.h): model.safetensors, or else the shards that
 * model.safetensors.index.json names, as transformers' save_pretrained
 * writes them past its max_shard_size:
 *     {"metadata": {"total_size": ...},
 *      "weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors", ...}}
 * (transformers' modeling_utils.py, load_sharded_checkpoint). The loader
 * (hf.c) finds each tensor by name in whichever shard holds it.
 *
 * The index is checked as a file from anywhere: a regular file of at most
 * LT__HF_INDEX_MAX_BYTES, a JSON object (duplicate keys refused) whose
 * weight_map is a non-empty object of strings; each shard a plain file name
 * in the directory (no '/', not "." or "..", at most 255 bytes), at most
 * LT__HF_MAX_SHARDS of them, each opened and checked by lt_st_open; and the
 * index and the shards agree: every tensor of every shard is in the map
 * under that shard (a tensor held by two shards is named with both), and
 * every name of the map is in its shard. "metadata" (total_size) is not
 * read: transformers does not check it either.
 *
 * What this is not: a writer of shards (lt_hf_export writes one file).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "libtensor.h"
#include "models/transformer/hf_internal.h"

#define PATH_LEN 4096
#define SHARD_NAME_MAX 255

void lt__hf_weights_close(lt__hf_weights *w) {
  if (!w) return;
  for (int i = 0; i < w->n; i++) {
    lt_st_close(w->f[i]);
    free(w->file[i]);
  }
  free(w->f);
  free(w->file);
  memset(w, 0, sizeof *w);
}

lt__hf_ref lt__hf_weights_find(const lt__hf_weights *w, const char *name) {
  for (int i = 0; i < w->n; i++) {
    const int k = lt_st_find(w->f[i], name);
    if (k >= 0) return (lt__hf_ref){i, k};
  }
  return (lt__hf_ref){-1, -1};
}

/* Opens path as file i of w (w->f and w->file have room). */
static lt_status add_file(lt__hf_weights *w, const char *path) {
  if (!(w->file[w->n] = strdup(path))) return lt_error_set(LT_ERR_NOMEM, "hf: out of memory");
  if (!(w->f[w->n] = lt_st_open(path))) {
    free(w->file[w->n]);
    return lt_last_status();
  }
  w->n++;
  return LT_OK;
}

static bool shard_name_ok(const char *s, size_t len) {
  return len > 0 && len <= SHARD_NAME_MAX && strlen(s) == len && !strchr(s, '/') && strcmp(s, ".") != 0 &&
         strcmp(s, "..") != 0;
}

#define BAD(code, ...) (s = lt_error_set(code, __VA_ARGS__))

/* The shards of the index at w->where (dir's); w is empty on entry. */
static lt_status open_sharded(const char *dir, lt__hf_weights *w) {
  const char *where = w->where;
  json_t *j;
  lt_status s = lt__hf_read_json(where, LT__HF_INDEX_MAX_BYTES, "index", false, &j);
  if (s != LT_OK) return s;
  json_t *map = json_object_get(j, "weight_map"), *shards = json_object(); /* shard name -> index */
  json_t *meta = json_object_get(j, "metadata");
  const char *name;
  json_t *v;
  if (!shards) BAD(LT_ERR_NOMEM, "hf: out of memory");
  else if (!json_is_object(map) || json_object_size(map) == 0)
    BAD(LT_ERR_FORMAT, "hf index '%s': key 'weight_map' %s", where,
        !map ? "is missing" : json_is_object(map) ? "is empty" : "is not an object");
  else if (meta && !json_is_null(meta) && !json_is_object(meta))
    BAD(LT_ERR_FORMAT, "hf index '%s': key 'metadata' is not an object", where);
  /* 1. the shards the map names, each once, in order of first mention */
  json_object_foreach(s == LT_OK ? map : NULL, name, v) {
    if (!json_is_string(v)) {
      BAD(LT_ERR_FORMAT, "hf index '%s': weight_map['%.200s'] is not a string", where, name);
      break;
    }
    const char *shard = json_string_value(v);
    if (!shard_name_ok(shard, json_string_length(v))) {
      BAD(LT_ERR_FORMAT, "hf index '%s': weight_map['%.200s'] names the shard '%.300s': a shard must be a file name "
          "in the directory (no '/', not '.' or '..', 1 to %d bytes, no NUL)", where, name, shard, SHARD_NAME_MAX);
      break;
    }
    if (json_object_get(shards, shard)) continue;
    if (json_object_size(shards) >= LT__HF_MAX_SHARDS) {
      BAD(LT_ERR_FORMAT, "hf index '%s': more than %d shards", where, LT__HF_MAX_SHARDS);
      break;
    }
    if (json_object_set_new(shards, shard, json_integer((json_int_t)json_object_size(shards))) != 0) {
      BAD(LT_ERR_NOMEM, "hf: out of memory");
      break;
    }
  }
  /* 2. open each */
  const size_t n = s == LT_OK ? json_object_size(shards) : 0;
  if (n && (!(w->f = calloc(n, sizeof *w->f)) || !(w->file = calloc(n, sizeof *w->file))))
    BAD(LT_ERR_NOMEM, "hf: out of memory");
  char path[PATH_LEN];
  for (size_t i = 0; s == LT_OK && i < n; i++) {
    const char *shard = NULL;
    json_object_foreach(shards, name, v) if ((size_t)json_integer_value(v) == i) shard = name;
    snprintf(path, sizeof path, "%s/%s", dir, shard);
    if ((s = add_file(w, path)) != LT_OK) {
      char msg[1024];
      snprintf(msg, sizeof msg, "%s", lt_last_error());
      BAD(lt_last_status(), "hf index '%s': shard '%s': %s", where, shard, msg);
    }
  }
  /* 3. the index and the shards agree */
  for (int i = 0; s == LT_OK && i < w->n; i++) {
    const char *here = w->file[i] + strlen(dir) + 1;
    for (int k = 0; s == LT_OK && k < lt_st_count(w->f[i]); k++) {
      const char *t = lt_st_info(w->f[i], k)->name;
      json_t *e = json_object_get(map, t);
      if (e && strcmp(json_string_value(e), here) == 0) continue;
      int other = -1; /* another shard holding it too */
      for (int o = 0; o < w->n && other < 0; o++)
        if (o != i && lt_st_find(w->f[o], t) >= 0) other = o;
      if (other >= 0)
        BAD(LT_ERR_FORMAT, "hf index '%s': tensor '%.200s' is in two shards, '%s' and '%s'", where, t,
            w->file[i < other ? i : other] + strlen(dir) + 1, w->file[i < other ? other : i] + strlen(dir) + 1);
      else if (!e)
        BAD(LT_ERR_FORMAT, "hf index '%s': shard '%s' holds tensor '%.200s', which weight_map does not list", where,
            here, t);
      else
        BAD(LT_ERR_FORMAT, "hf index '%s': tensor '%.200s' is in shard '%s', weight_map says '%s'", where, t, here,
            json_string_value(e));
    }
  }
  json_object_foreach(s == LT_OK ? map : NULL, name, v) {
    const int i = (int)json_integer_value(json_object_get(shards, json_string_value(v)));
    if (lt_st_find(w->f[i], name) < 0) {
      BAD(LT_ERR_FORMAT, "hf index '%s': weight_map puts tensor '%.200s' in shard '%s', which does not hold it",
          where, name, json_string_value(v));
      break;
    }
  }
  json_decref(shards);
  json_decref(j);
  return s;
}

#undef BAD

lt_status lt__hf_weights_open(const char *dir, lt__hf_weights *w) {
  memset(w, 0, sizeof *w);
  if (strlen(dir) > PATH_LEN - 64) return lt_error_set(LT_ERR_INVALID, "hf: directory name too long");
  struct stat st;
  snprintf(w->where, sizeof w->where, "%s/%s", dir, LT_HF_WEIGHTS_FILE);
  lt_status s;
  if (stat(w->where, &st) == 0 || (snprintf(w->where, sizeof w->where, "%s/%s", dir, LT_HF_WEIGHTS_INDEX_FILE),
                                   stat(w->where, &st) != 0)) {
    /* one file (transformers' order: model.safetensors first), or neither: the single file's error */
    snprintf(w->where, sizeof w->where, "%s/%s", dir, LT_HF_WEIGHTS_FILE);
    if (!(w->f = calloc(1, sizeof *w->f)) || !(w->file = calloc(1, sizeof *w->file))) {
      lt__hf_weights_close(w);
      return lt_error_set(LT_ERR_NOMEM, "hf: out of memory");
    }
    s = add_file(w, w->where);
  } else {
    s = open_sharded(dir, w);
  }
  if (s != LT_OK) lt__hf_weights_close(w);
  return s;
}
