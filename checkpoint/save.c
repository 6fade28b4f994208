/*
 * checkpoint/save.c: writing checkpoints, lt_ckpt_save_params and
 * lt_ckpt_save_training, in the layout checkpoint.c describes (the model's
 * tensors, optimizer state, schedule, generators, the caller's extra state).
 * The file is built in memory by HDF5 (h5.c) and written durably through
 * seal.c: temporary, fsync, rename, fsync of the directory.
 *
 * What this is not: loading or describing a checkpoint (checkpoint.c), or
 * the checks of what a file holds (h5_check.c, rules.c).
 */
#include "checkpoint/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <unistd.h>

#include "tensor/error_internal.h"

/* ---- names ------------------------------------------------------------- */

/* Splits a dotted name into components (in a new buffer *mem; *comps points
 * into it). A name is 1..LT__CKPT_MAX_PATH/2 bytes, without '/', with no empty
 * component. */
static lt_status split_name(const char *name, const char *what, char **mem, char ***comps, int *n) {
  *mem = NULL;
  *comps = NULL;
  size_t len = name ? strlen(name) : 0;
  if (!name || len == 0 || len > LT__CKPT_MAX_PATH / 2)
    return lt__err(LT_ERR_INVALID, "checkpoint: %s name '%.64s' must have 1 to %d bytes", what, name ? name : "",
                   LT__CKPT_MAX_PATH / 2);
  if (strchr(name, '/'))
    return lt__err(LT_ERR_INVALID, "checkpoint: %s name '%s' contains '/' (dots separate components)", what, name);
  int k = 1;
  for (size_t i = 0; i < len; i++) k += name[i] == '.';
  if (name[0] == '.' || name[len - 1] == '.' || strstr(name, ".."))
    return lt__err(LT_ERR_INVALID, "checkpoint: %s name '%s' has an empty component", what, name);
  if (k > LT__CKPT_MAX_DEPTH - 2)
    return lt__err(LT_ERR_INVALID, "checkpoint: %s name '%.64s' has %d components (at most %d)", what, name, k,
                   LT__CKPT_MAX_DEPTH - 2);
  char *m = strdup(name);
  char **c = malloc((size_t)k * sizeof *c);
  if (!m || !c) {
    free(m);
    free(c);
    return lt__err(LT_ERR_NOMEM, "checkpoint: out of memory");
  }
  c[0] = m;
  for (int i = 1, j = 0; m[j]; j++)
    if (m[j] == '.') {
      m[j] = '\0';
      c[i++] = m + j + 1;
    }
  *mem = m;
  *comps = c;
  *n = k;
  return LT_OK;
}

/* Writes t at <group>/<name with dots as separators>. */
static lt_status write_named(hid_t group, const char *name, const lt_tensor *t, const lt_ckpt_save_opts *opts,
                             const char *what) {
  char *mem;
  char **comps;
  int n = 0;
  lt_status s = split_name(name, what, &mem, &comps, &n);
  if (s) return s;
  hid_t g = lt__h5_open_or_create_groups(group, n - 1, comps, name, what);
  if (g < 0) {
    s = lt_last_status();
  } else {
    s = lt__h5_write_tensor(g, comps[n - 1], t, opts, name);
    H5Gclose(g);
  }
  free(comps);
  free(mem);
  return s;
}

/* ---- small helpers ----------------------------------------------------- */

#define MAX_STATES LT__CKPT_MAX_STATES
#define optim_state_names lt__ckpt_optim_state_names

static hid_t create_group(hid_t loc, const char *name) {
  hid_t gcpl = lt__h5_gcpl();
  hid_t g = gcpl < 0 ? -1 : H5Gcreate2(loc, name, H5P_DEFAULT, gcpl, H5P_DEFAULT);
  if (gcpl >= 0) H5Pclose(gcpl);
  if (g < 0) lt__h5_err(LT_ERR_IO, "checkpoint: creating group /%s", name);
  return g;
}

/* ======================================================================== */
/* Saving                                                                   */
/* ======================================================================== */

static lt_status write_optim(hid_t root, const lt_params *p, const lt_optimizer *o, const lt_optim_config *c,
                             const lt_ckpt_save_opts *opts) {
  hid_t g = create_group(root, "optim");
  if (g < 0) return lt_last_status();
  lt_status s = LT_OK;
  const char *kind = lt_optim_kind_name(c->kind);
  if (!strcmp(kind, "unknown")) s = lt__err(LT_ERR_INVALID, "checkpoint save: unknown optimizer kind %d", (int)c->kind);
  if (!s) s = lt__h5_attr_string(g, "kind", kind);
  if (!s) s = lt__h5_attr_int(g, "step", lt_optimizer_step_count(o));
  if (!s) s = lt__h5_attr_double(g, "lr", lt_optimizer_get_lr(o));
  if (!s) s = lt__h5_attr_double(g, "momentum", c->momentum);
  if (!s) s = lt__h5_attr_double(g, "dampening", c->dampening);
  if (!s) s = lt__h5_attr_int(g, "nesterov", c->nesterov);
  if (!s) s = lt__h5_attr_double(g, "beta1", c->beta1);
  if (!s) s = lt__h5_attr_double(g, "beta2", c->beta2);
  if (!s) s = lt__h5_attr_double(g, "eps", c->eps);
  if (!s) s = lt__h5_attr_double(g, "weight_decay", c->weight_decay);
  if (!s) s = lt__h5_attr_int(g, "decay_all", c->decay_all);
  const char *names[MAX_STATES];
  int ns = optim_state_names(c, names);
  for (int i = 0; i < lt_params_count(p) && !s; i++) {
    const lt_param *q = lt_params_at(p, i);
    if (q->flags & LT_PARAM_BUFFER) continue;
    for (int k = 0; k < ns && !s; k++) {
      const lt_tensor *t = lt_optimizer_state(o, q->name, names[k]);
      if (!t) continue; /* created lazily at the parameter's first update */
      char full[LT__CKPT_MAX_PATH];
      snprintf(full, sizeof full, "%s.%s", q->name, names[k]);
      s = write_named(g, full, t, opts, "optimizer state");
    }
  }
  H5Gclose(g);
  return s;
}

static lt_status write_schedule(hid_t root, const lt_schedule *sc, int64_t step) {
  hid_t g = create_group(root, "schedule");
  if (g < 0) return lt_last_status();
  lt_status s = lt__h5_attr_int(g, "step", step);
  if (!s && sc) {
    const char *kind = lt_schedule_kind_name(sc->kind);
    if (!strcmp(kind, "unknown"))
      s = lt__err(LT_ERR_INVALID, "checkpoint save: unknown schedule kind %d", (int)sc->kind);
    if (!s) s = lt__h5_attr_string(g, "kind", kind);
    if (!s) s = lt__h5_attr_double(g, "base_lr", sc->base_lr);
    if (!s) s = lt__h5_attr_double(g, "min_lr", sc->min_lr);
    if (!s) s = lt__h5_attr_double(g, "gamma", sc->gamma);
    if (!s) s = lt__h5_attr_double(g, "scale", sc->scale);
    if (!s) s = lt__h5_attr_int(g, "warmup", sc->warmup);
    if (!s) s = lt__h5_attr_int(g, "total", sc->total);
    if (!s) s = lt__h5_attr_int(g, "step_size", sc->step_size);
    if (!s) s = lt__h5_attr_int(g, "d_model", sc->d_model);
  } else if (!s) {
    s = lt__h5_attr_string(g, "kind", "none");
  }
  H5Gclose(g);
  return s;
}

static lt_status write_rng(hid_t root, const lt_train_state *st) {
  hid_t g = create_group(root, "rng");
  if (g < 0) return lt_last_status();
  lt_status s = LT_OK;
  for (int i = 0; i < st->n_generators && !s; i++) {
    lt_generator_state gs = lt_generator_get_state(st->generators[i]);
    uint64_t v[2] = {gs.seed, gs.offset};
    hsize_t dims[1] = {2};
    hid_t sp = H5Screate_simple(1, dims, NULL);
    hid_t d = sp < 0 ? -1 : H5Dcreate2(g, st->generator_names[i], H5T_STD_U64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (d < 0 || H5Dwrite(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0)
      s = lt__h5_err(LT_ERR_IO, "checkpoint save: writing generator '%s'", st->generator_names[i]);
    if (d >= 0) H5Dclose(d);
    if (sp >= 0) H5Sclose(sp);
  }
  H5Gclose(g);
  return s;
}

static lt_status save_common(const char *op, const char *path, const lt_params *p, const lt_ckpt_meta *config,
                             const lt_train_state *st, const lt_ckpt_meta *extra, const lt_ckpt_save_opts *opts) {
  if (!path) return lt__err_null(op, "path");
  if (!p) return lt__err_null(op, "params");
  if (lt_params_quantized(p))
    return lt__err(LT_ERR_STATE, "%s: the store holds quantized weights (lt_params_quantize): save the f32 model "
                                 "before quantizing it", op);
  lt_ckpt_save_opts def = LT_CKPT_SAVE_DEFAULTS;
  if (!opts) opts = &def;
  if (opts->deflate_level < 0 || opts->deflate_level > 9)
    return lt__err(LT_ERR_INVALID, "%s: deflate_level %d is not in 0..9", op, opts->deflate_level);
  /* Validate names before touching the disk. */
  for (int i = 0; i < lt_params_count(p); i++) {
    char *mem;
    char **comps;
    int n;
    lt_status s = split_name(lt_params_at(p, i)->name, "parameter", &mem, &comps, &n);
    free(comps);
    free(mem);
    if (s) return s;
  }
  if (config)
    for (int i = 0; i < lt_ckpt_meta_count(config); i++)
      if (lt_ckpt_meta_kind(config, lt_ckpt_meta_key(config, i)) == LT_CKPT_BYTES)
        return lt__err(LT_ERR_INVALID, "%s: config value '%s' is a byte blob: config values are int, double or "
                       "string (put blobs in extra)", op, lt_ckpt_meta_key(config, i));

  /* Build the file in memory: a failure here never touches the disk. */
  lt__h5_guard guard;
  lt__h5_enter(&guard);
  lt__h5_image img = {.hint = 1u << 20};
  for (int i = 0; i < lt_params_count(p); i++) {
    const lt_tensor *t = lt_params_at(p, i)->value;
    img.hint += (size_t)t->numel * lt_dtype_size(t->dtype) * (st && st->optim ? 3 : 1) + 4096;
  }
  lt_status s = LT_OK;
  hid_t fcpl = H5Pcreate(H5P_FILE_CREATE), fapl = lt__h5_fapl_image(&img), file = -1, root = -1, model = -1;
  if (fcpl < 0 || fapl < 0 || H5Pset_userblock(fcpl, LT__CKPT_UB) < 0 ||
      H5Pset_link_creation_order(fcpl, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED) < 0) {
    s = lt__h5_err(LT_ERR_IO, "%s '%s': preparing HDF5 properties", op, path);
    goto done;
  }
  /* A name that does not exist: H5Fcreate first tries to open the name to
   * see whether it is open already, and the core driver would read an
   * existing file into memory. */
  static atomic_uint image_counter;
  char iname[96];
  snprintf(iname, sizeof iname, "/nonexistent/libtensor-checkpoint-image-%ld-%u", (long)getpid(),
           atomic_fetch_add(&image_counter, 1u));
  file = H5Fcreate(iname, H5F_ACC_TRUNC, fcpl, fapl);
  if (file < 0) {
    s = lt__h5_err(LT_ERR_IO, "%s '%s': HDF5 cannot create the file in memory", op, path);
    goto done;
  }
  root = H5Gopen2(file, "/", H5P_DEFAULT);
  if (root < 0) {
    s = lt__h5_err(LT_ERR_IO, "%s '%s': opening the root group", op, path);
    goto done;
  }
  s = lt__h5_attr_string(root, "format", LT_CKPT_FORMAT_NAME);
  if (!s) s = lt__h5_attr_int(root, "format_version", LT_CKPT_FORMAT_VERSION);
  if (!s) s = lt__h5_attr_string(root, "library_version", lt_version());
  if (!s) s = lt__h5_attr_string(root, "content", st ? "training" : "model");
  if (s) goto done;
  model = create_group(root, "model");
  if (model < 0) {
    s = lt_last_status();
    goto done;
  }
  if (config && (s = lt__h5_write_meta(model, config, false, "config"))) goto done;
  for (int i = 0; i < lt_params_count(p) && !s; i++) {
    const lt_param *q = lt_params_at(p, i);
    s = write_named(model, q->name, q->value, opts, "parameter");
  }
  if (s) goto done;
  if (st) {
    if (st->optim && (s = write_optim(root, p, st->optim, st->optim_config, opts))) goto done;
    if ((s = write_schedule(root, st->schedule, st->step))) goto done;
    if ((s = write_rng(root, st))) goto done;
    hid_t g = create_group(root, "extra");
    if (g < 0) {
      s = lt_last_status();
      goto done;
    }
    if (extra) s = lt__h5_write_meta(g, extra, true, "extra");
    H5Gclose(g);
  }
done:
  if (model >= 0) H5Gclose(model);
  if (root >= 0) H5Gclose(root);
  if (file >= 0 && H5Fclose(file) < 0 && !s)
    s = lt__h5_err(LT_ERR_NOMEM, "%s '%s': HDF5 could not finish the file in memory", op, path);
  if (fapl >= 0) H5Pclose(fapl);
  if (fcpl >= 0) H5Pclose(fcpl);
  lt__h5_leave(&guard);
  if (!s && !img.final) s = lt__err(LT_ERR_NOMEM, "%s '%s': HDF5 did not hand over the file image", op, path);
  /* Write it: temporary, fsync, rename, fsync the directory. */
  if (!s) {
    size_t len = lt__h5_image_length(&img);
    lt__ckpt_seal_buffer(img.final, len);
    lt__tmpfile tmp;
    s = lt__tmp_begin(path, &tmp);
    if (!s) s = lt__tmp_commit(&tmp, img.final, len);
  }
  free(img.final);
  free(img.buf); /* only left if HDF5 failed before closing */
  return s;
}

lt_status lt_ckpt_save_params(const char *path, const lt_params *p, const lt_ckpt_meta *config,
                              const lt_ckpt_save_opts *opts) {
  return save_common("ckpt_save_params", path, p, config, NULL, NULL, opts);
}

lt_status lt_ckpt_save_training(const char *path, const lt_train_state *st, const lt_ckpt_meta *config,
                                const lt_ckpt_meta *extra, const lt_ckpt_save_opts *opts) {
  lt_status s = lt__ckpt_check_train_state("ckpt_save_training", st);
  if (s) return s;
  return save_common("ckpt_save_training", path, st->params, config, st, extra, opts);
}
