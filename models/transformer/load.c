/*
 * models/transformer/load.c: where a Transformer comes from (load.h): a
 * checkpoint of train, a Hugging Face directory or a GGUF file, each read
 * in the same order: the configuration, the model's size against the cap,
 * the tokenizer (a checkpoint's against the vocabulary), then the weights.
 *
 * What this is not: any format's reader (checkpoint/, hf.c, gguf_model.c)
 * or the configuration as attributes (config.c). It calls them.
 */
#include "models/transformer/load.h"

#include "models/transformer/config.h"
#include "models/transformer/gguf_model.h"
#include "models/transformer/hf.h"
#include "models/transformer/internal.h"
#include "train/trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *lt_tf_origin_name(lt_tf_origin o) {
  static const char *const names[] = {"checkpoint", "hf", "gguf"};
  return lt_enum_name(names, (int)(sizeof names / sizeof names[0]), (int)o);
}

/* ---- the steps ------------------------------------------------------------------ */

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

/* A Hugging Face directory's tokenizer: libtensor-tokenizer.bin (export's,
 * as the checkpoint held it) when there, else the directory's tokenizer.json,
 * else none (*tok NULL, LT_OK). */
static lt_status hf_dir_tokenizer(const char *dir, lt_tokenizer **tok) {
  *tok = NULL;
  char tpath[4096];
  int n = snprintf(tpath, sizeof tpath, "%s/%s", dir, LT_HF_TOKENIZER_FILE);
  if (n < 0 || (size_t)n >= sizeof tpath) return lt_error_set(LT_ERR_OVERFLOW, "'%s': the path is too long", dir);
  if (access(tpath, F_OK) != 0) { /* no libtensor tokenizer: the directory's own tokenizer.json, if any */
    n = snprintf(tpath, sizeof tpath, "%s/tokenizer.json", dir);
    if (n < 0 || (size_t)n >= sizeof tpath || access(tpath, F_OK) != 0) return LT_OK;
    *tok = lt_tokenizer_load_hf(tpath);
    return *tok ? LT_OK : lt__tf_fail("the tokenizer");
  }
  char *blob = NULL;
  size_t bytes = 0;
  if (lt_ckpt_read_file(tpath, 1u << 30, &blob, &bytes) != LT_OK) return lt__tf_fail("the tokenizer");
  *tok = lt_tokenizer_deserialize(blob, bytes);
  free(blob);
  return *tok ? LT_OK : lt__tf_fail("the tokenizer");
}

lt_status lt_tf_source_read(const char *path, const char *prefix, const lt_ckpt_load_opts *opts, char *file,
                            size_t size, lt_tf_config *cfg, lt_tokenizer **tok, lt_ckpt_info **info) {
  *tok = NULL, *info = NULL;
  if (lt_hf_is_dir(path)) {
    if (lt_hf_read_config(path, cfg, NULL) != LT_OK) return lt_last_status();
    int n = snprintf(file, size, "%s", path);
    if (n < 0 || (size_t)n >= size) return lt_error_set(LT_ERR_OVERFLOW, "'%s': the path is too long", path);
    return hf_dir_tokenizer(path, tok);
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

lt_status lt_tf_source_load_encoder(const char *file, lt_transformer *m, const lt_ckpt_load_opts *opts) {
  if (!file || !m) return lt_error_set(LT_ERR_NULL, "lt_tf_source_load_encoder: file or model is NULL");
  lt_tf_config c = *lt_transformer_config(m);
  if (c.arch != LT_TF_ENCODER_ONLY || c.n_classes < 1)
    return lt_error_set(LT_ERR_INVALID, "lt_tf_source_load_encoder: '%s': the model is not an encoder-only classifier",
                        file);
  c.n_classes = 0;
  lt_generator *g = lt_generator_new(0); /* the source's initialisation is overwritten by its weights */
  lt_transformer *src = g ? lt_transformer_new(&c, g) : NULL;
  lt_generator_free(g);
  if (!src) return lt_error_set(lt_last_status(), "'%s': the source's encoder: %s", file, lt_last_error());
  lt_status s = lt_tf_source_load_weights(file, src, opts);
  lt_params *from = lt_transformer_params(src), *to = lt_transformer_params(m);
  const bool prev = lt_set_grad_enabled(false);
  for (int k = 0; k < lt_params_count(from) && s == LT_OK; k++) { /* same configuration: every name is in m */
    const lt_param *p = lt_params_at(from, k);
    lt_tensor *dst = lt_params_find(to, p->name);
    s = dst ? lt_copy_(dst, p->value)
            : lt_error_set(LT_ERR_INVALID, "'%s': the source's '%s' is not in the classifier", file, p->name);
  }
  lt_set_grad_enabled(prev);
  lt_transformer_free(src);
  return s;
}

/* ---- one entry ------------------------------------------------------------------ */

/* The pending error with "<path>: " before it, unless its message names path already. */
static lt_status fail_at(const char *fmt, const char *path) {
  char why[1024];
  snprintf(why, sizeof why, "%s", lt_last_error());
  if (strstr(why, path)) return lt_last_status();
  return lt_error_set(lt_last_status(), fmt, path, why);
}

/* A checkpoint file (resolved): its configuration and size, its tokenizer, its model. */
static lt_status load_checkpoint(const lt_tf_load_opts *o, lt_tf_loaded *l) {
  const char *path = l->path;
  lt_status s = lt_tf_read_checkpoint_info(path, &o->ckpt, false, &l->info, NULL);
  if (s != LT_OK) { /* a model-only checkpoint (lt_ckpt_save_params); anything else: the loader's reason */
    char why[1024];
    snprintf(why, sizeof why, "%s", lt_last_error());
    const bool model_only =
        lt_tf_read_checkpoint_info(path, &o->ckpt, true, &l->info, NULL) == LT_OK && !l->info->training;
    if (!model_only) {
      lt_ckpt_info_free(l->info), l->info = NULL;
      if (strstr(why, path)) return lt_error_set(s, "%s", why); /* the loader's message names the file */
      return lt_error_set(s, "checkpoint '%s': %s", path, why);
    }
    if (!o->model_only)
      return lt_error_set(LT_ERR_FORMAT, "checkpoint '%s' holds a model only, without the training state and "
                          "the tokenizer", path);
  }
  lt_tf_config cfg;
  if (lt_tf_config_from_meta(l->info->config, &cfg) != LT_OK)
    return lt_error_set(lt_last_status(), "checkpoint '%s': not a Transformer checkpoint of train (its model "
                        "configuration: %s)", path, lt_last_error());
  int64_t n_params; /* the model's size, checked against the file and the cap before it is built */
  size_t bytes;
  if (lt_tf_config_size(&cfg, &n_params, &bytes) != LT_OK ||
      lt_ckpt_check_model_size(l->info, path, n_params, bytes, o->ckpt.max_bytes) != LT_OK)
    return lt_last_status();
  const void *blob;
  size_t size;
  if (l->info->extra && lt_ckpt_meta_get_bytes(l->info->extra, LT_TF_CKPT_TOKENIZER, &blob, &size) == LT_OK) {
    if (!(l->tok = lt_tokenizer_deserialize(blob, size)))
      return lt_error_set(lt_last_status(), "checkpoint '%s': its tokenizer: %s", path, lt_last_error());
    if (lt_tokenizer_vocab_size(l->tok) != cfg.vocab_size)
      return lt_error_set(LT_ERR_FORMAT, "checkpoint '%s': the tokenizer has %lld ids, the model %lld", path,
                          (long long)lt_tokenizer_vocab_size(l->tok), (long long)cfg.vocab_size);
  }
  return (l->model = lt_tf_load_model(path, &cfg, &o->ckpt)) ? LT_OK : lt_last_status();
}

/* A Hugging Face directory: the model (lt_hf_load), then its tokenizer, as
 * the directory holds it (its ids against the model: the caller's, load.h). */
static lt_status load_hf(const lt_tf_load_opts *o, lt_tf_loaded *l) {
  if (!(l->model = lt_hf_load(l->path, o->ckpt.max_bytes))) return lt_last_status();
  return hf_dir_tokenizer(l->path, &l->tok) == LT_OK ? LT_OK : fail_at("'%s': %s", l->path);
}

lt_status lt_tf_load(const char *path, const lt_tf_load_opts *opts, lt_tf_loaded *out) {
  const char *op = "tf_load";
  if (!out) return lt_error_null_arg(op, "out");
  memset(out, 0, sizeof *out);
  if (!path) return lt_error_null_arg(op, "path");
  const lt_tf_load_opts o = opts ? *opts : LT_TF_LOAD_DEFAULTS;
  lt_status s;
  if (o.hf_dirs && lt_hf_is_dir(path)) {
    out->origin = LT_TF_FROM_HF;
  } else if (o.gguf && lt_tf_gguf_is_file(path)) {
    out->origin = LT_TF_FROM_GGUF;
  } else {
    out->origin = LT_TF_FROM_CHECKPOINT;
    /* a run directory stands for its newest valid checkpoint, as a resume does */
    if (lt_trainer_find_resume(path, LT_TF_CKPT_PREFIX, out->path, sizeof out->path) != LT_OK) {
      s = lt_last_status();
      memset(out, 0, sizeof *out);
      return s;
    }
  }
  if (out->origin != LT_TF_FROM_CHECKPOINT) {
    int n = snprintf(out->path, sizeof out->path, "%s", path);
    if (n < 0 || (size_t)n >= sizeof out->path)
      return lt_error_set(LT_ERR_OVERFLOW, "'%s': the path is longer than %zu bytes", path, sizeof out->path - 1);
  }
  switch (out->origin) {
    case LT_TF_FROM_HF: s = load_hf(&o, out); break;
    case LT_TF_FROM_GGUF:
      s = (out->model = lt_tf_gguf_load(out->path, o.ckpt.max_bytes, &out->tok)) ? LT_OK : lt_last_status();
      break;
    default: s = load_checkpoint(&o, out); break;
  }
  if (s != LT_OK) lt_tf_loaded_free(out);
  return s;
}

void lt_tf_loaded_free(lt_tf_loaded *l) {
  if (!l) return;
  lt_transformer_free(l->model);
  lt_tokenizer_free(l->tok);
  lt_ckpt_info_free(l->info);
  memset(l, 0, sizeof *l);
}
