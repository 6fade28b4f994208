/*
 * checkpoint/rules.c: what a checkpoint's metadata must be, judged on the
 * values HDF5 returned, never on an hid_t. h5.c and checkpoint.c ask HDF5
 * (attributes into an lt_ckpt_meta, a dataset's storage, type and dataspace
 * into an lt__ckpt_dset, the names a group walk found) and these functions
 * decide, with the loader's messages:
 *
 *   lt__ckpt_check_root      the root attributes (format, version, content)
 *   lt__ckpt_check_dset      a dataset's storage, filters, type, rank and
 *                            dims (checked arithmetic, capped by the file)
 *   lt__ckpt_check_written   and that its data was written
 *   lt__ckpt_match           a group's names against what the caller expects
 *   lt__ckpt_check_optim     /optim's attributes against the optimizer
 *   lt__ckpt_check_optim_sets  each parameter's states all or none
 *   lt__ckpt_check_schedule  /schedule's attributes
 *   lt__ckpt_check_blob      an /extra blob against its caps
 *   lt__ckpt_check_values    the data read (finite, bools 0/1)
 *   lt__ckpt_check_config    the file's configuration against expect_config
 *   lt__ckpt_check_train_state  the caller's lt_train_state (save and load)
 *
 * The split is what lets fuzz/fuzz_ckpt_meta.c drive the rules thousands of
 * times a second from a compact encoding of "what HDF5 would have returned",
 * while fuzz/fuzz_checkpoint.c drives libhdf5 and the whole loader.
 *
 * What this is not: the order of a load (checkpoint.c) or how the values are
 * read (h5.c).
 */
#include "checkpoint/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/error_internal.h"

/* ---- typed attributes from a meta -------------------------------------- */

static const char *const KIND_ARTICLE[] = {"an integer", "a double", "a string", "bytes"};

/* The entry key of m (read from the object `what`) of the given kind: LT_ERR_INDEX when absent, LT_ERR_FORMAT
 * when of another kind, with h5.c's messages for the same faults. */
static lt_status get_kind(const lt_ckpt_meta *m, const char *what, const char *key, lt_ckpt_kind kind,
                          lt__meta_val *v) {
  const char *k;
  for (int i = 0; lt__ckpt_meta_at(m, i, &k, v); i++) {
    if (strcmp(k, key)) continue;
    if (v->kind != kind)
      return lt__err(LT_ERR_FORMAT, "checkpoint: attribute '%s' of %s is not %s", key, what, KIND_ARTICLE[kind]);
    return LT_OK;
  }
  return lt__err(LT_ERR_INDEX, "checkpoint: %s has no attribute '%s'", what, key);
}

lt_status lt__ckpt_attr_int(const lt_ckpt_meta *m, const char *what, const char *key, int64_t *out) {
  lt__meta_val v;
  lt_status s = get_kind(m, what, key, LT_CKPT_INT, &v);
  if (!s) *out = v.i;
  return s;
}
lt_status lt__ckpt_attr_double(const lt_ckpt_meta *m, const char *what, const char *key, double *out) {
  lt__meta_val v;
  lt_status s = get_kind(m, what, key, LT_CKPT_DOUBLE, &v);
  if (!s) *out = v.d;
  return s;
}
lt_status lt__ckpt_attr_string(const lt_ckpt_meta *m, const char *what, const char *key, const char **out) {
  lt__meta_val v;
  lt_status s = get_kind(m, what, key, LT_CKPT_STRING, &v);
  if (!s) *out = v.s;
  return s;
}

/* An absent attribute is a format error naming the file. */
static lt_status absent(lt_status s, const char *path) {
  if (s != LT_ERR_INDEX) return s;
  const char *m = lt_last_error();
  return lt__err(LT_ERR_FORMAT, "checkpoint '%s': %s", path, !strncmp(m, "checkpoint: ", 12) ? m + 12 : m);
}

/* ---- the root ---------------------------------------------------------- */

lt_status lt__ckpt_check_root(const char *path, const lt_ckpt_meta *root, int64_t *version, const char **libver,
                              bool *training) {
  const char *format = NULL, *content = NULL;
  lt_status s = lt__ckpt_attr_string(root, "/", "format", &format);
  if (s == LT_ERR_INDEX)
    return lt__err(LT_ERR_FORMAT, "checkpoint '%s': no 'format' attribute: not a libtensor checkpoint", path);
  if (s) return s;
  if (strcmp(format, LT_CKPT_FORMAT_NAME))
    return lt__err(LT_ERR_FORMAT, "checkpoint '%s': format is '%.64s', not '%s'", path, format, LT_CKPT_FORMAT_NAME);
  s = lt__ckpt_attr_int(root, "/", "format_version", version);
  if (s == LT_ERR_INDEX) return lt__err(LT_ERR_FORMAT, "checkpoint '%s': no 'format_version' attribute", path);
  if (s) return s;
  if (*version > LT_CKPT_FORMAT_VERSION)
    return lt__err(LT_ERR_FORMAT, "checkpoint '%s': format version %lld is newer than this library reads (%d): "
                   "upgrade libtensor", path, (long long)*version, LT_CKPT_FORMAT_VERSION);
  if (*version < 1)
    return lt__err(LT_ERR_FORMAT, "checkpoint '%s': format version %lld is invalid", path, (long long)*version);
  s = lt__ckpt_attr_string(root, "/", "library_version", libver);
  if (s == LT_ERR_INDEX) return lt__err(LT_ERR_FORMAT, "checkpoint '%s': no 'library_version' attribute", path);
  if (s) return s;
  s = lt__ckpt_attr_string(root, "/", "content", &content);
  if (s == LT_ERR_INDEX) return lt__err(LT_ERR_FORMAT, "checkpoint '%s': no 'content' attribute", path);
  if (s) return s;
  if (strcmp(content, "model") && strcmp(content, "training"))
    return lt__err(LT_ERR_FORMAT, "checkpoint '%s': content '%.64s' is neither 'model' nor 'training'", path,
                   content);
  *training = !strcmp(content, "training");
  return LT_OK;
}

bool lt__ckpt_top_level_name(const char *name) {
  static const char *const allowed[] = {"model", "optim", "schedule", "rng", "extra"};
  for (size_t k = 0; k < sizeof allowed / sizeof *allowed; k++)
    if (!strcmp(name, allowed[k])) return true;
  return false;
}

/* ---- datasets ---------------------------------------------------------- */

/* The descriptions lt__h5_type_desc gives the file types of our dtypes and of the raw types
 * (fuzz/fuzz_checkpoint.c checks that they agree). NULL: no file type. */
const char *lt__ckpt_type_desc(lt_dtype dtype, lt__ckpt_raw raw) {
  if (raw == LT__RAW_U8) return "unsigned integer, 1 bytes, little-endian";
  if (raw == LT__RAW_U64) return "unsigned integer, 8 bytes, little-endian";
  switch (dtype) {
    case LT_DTYPE_F32: return "f32 (float, 4 bytes, little-endian)";
    case LT_DTYPE_F64: return "f64 (float, 8 bytes, little-endian)";
    case LT_DTYPE_I32: return "i32 (signed integer, 4 bytes, little-endian)";
    case LT_DTYPE_I64: return "i64 (signed integer, 8 bytes, little-endian)";
    case LT_DTYPE_BOOL: return "bool (enum, 1 bytes, little-endian)";
    default: return NULL;
  }
}

static char *dims_str(int nd, const uint64_t *d, char *buf, size_t size) {
  size_t k = 0;
  k += (size_t)snprintf(buf + k, size - k, "[");
  for (int i = 0; i < nd && k < size; i++)
    k += (size_t)snprintf(buf + k, size - k, "%s%llu", i ? "," : "", (unsigned long long)d[i]);
  if (k < size) snprintf(buf + k, size - k, "]");
  return buf;
}

/* A step HDF5 failed at (d->failed): the message lt__h5_err would have made, with the stack h5.c kept. */
static lt_status failed_at(const lt__ckpt_dset *d, const char *path, const char *what) {
  return lt__err(LT_ERR_FORMAT, "checkpoint: dataset %s: %s%s", path, what, d->h5_stack);
}

lt_status lt__ckpt_check_dset(const lt__ckpt_dset *d, const char *path, const lt__h5_expect *e, uint64_t file_size,
                              int *ndim, int64_t *shape, size_t *bytes) {
  char a[200];
  bool raw = e->dtype == LT_DTYPE_COUNT; /* blobs, generator states */
  if (d->failed == LT__DSET_FAILED_PLIST) return failed_at(d, path, "cannot read its creation properties");
  /* Storage: no virtual datasets, no external files, deflate only. */
  if (d->layout == LT__LAYOUT_VIRTUAL)
    return lt__err(LT_ERR_FORMAT, "checkpoint: dataset %s is a virtual dataset: refused", path);
  if (d->layout != LT__LAYOUT_COMPACT && d->layout != LT__LAYOUT_CONTIGUOUS && d->layout != LT__LAYOUT_CHUNKED)
    return lt__err(LT_ERR_FORMAT, "checkpoint: dataset %s has an unknown storage layout %d", path, d->layout_code);
  if (d->n_external != 0)
    return lt__err(LT_ERR_FORMAT, "checkpoint: dataset %s keeps its data in external files: refused", path);
  if (d->n_filters < 0 || d->n_filters > LT__CKPT_MAX_FILTERS) return failed_at(d, path, "bad filter pipeline");
  for (int i = 0; i < d->n_filters; i++)
    if (d->filters[i] != LT__FILTER_DEFLATE)
      return lt__err(LT_ERR_FORMAT, "checkpoint: dataset %s uses filter %d: only deflate (%d) is accepted", path,
                     d->filters[i], LT__FILTER_DEFLATE);
  /* Type: exactly the one the model's tensor is written with. */
  bool any = raw && e->raw == LT__RAW_ANY; /* a description: whatever type it has */
  const char *want = any ? "" : lt__ckpt_type_desc(e->dtype, raw ? e->raw : LT__RAW_NONE);
  if (d->failed == LT__DSET_FAILED_TYPE || !want) return failed_at(d, path, "cannot read its type");
  bool same = any || (raw ? d->raw == e->raw : d->dtype == e->dtype);
  if (!same) {
    if (raw)
      return lt__err(LT_ERR_DTYPE, "checkpoint: dataset %s is %s, not %s", path, d->type_desc, want);
    return lt__err(LT_ERR_DTYPE, "checkpoint: dataset %s is %s but the model's '%s' is %s%s", path, d->type_desc,
                   e->model_name, want,
                   d->float_class && lt_dtype_is_float(e->dtype)
                       ? " (tensors are saved in their own dtype: lt_params_to_dtype converts the model to the "
                         "file's before loading)"
                       : "");
  }
  size_t es = any ? d->type_size : raw ? (e->raw == LT__RAW_U8 ? 1 : 8) : lt_dtype_size(e->dtype);
  /* Rank and dims, with checked arithmetic, before any allocation. */
  int nd = d->ndim;
  if (d->space == LT__SPACE_SCALAR) {
    nd = 0;
  } else if (d->space == LT__SPACE_SIMPLE) {
    if (nd < 0 || nd > LT__H5_MAX_RANK) return failed_at(d, path, "bad dataspace");
    if (nd > LT_MAX_DIMS)
      return lt__err(LT_ERR_SHAPE, "checkpoint: dataset %s has rank %d, more than LT_MAX_DIMS (%d)", path, nd,
                     LT_MAX_DIMS);
    if (d->failed == LT__DSET_FAILED_DIMS) return failed_at(d, path, "cannot read its dimensions");
  } else {
    return lt__err(LT_ERR_FORMAT, "checkpoint: dataset %s has a null or unknown dataspace", path);
  }
  uint64_t numel = 1;
  for (int i = 0; i < nd; i++)
    if (d->dims[i] > (uint64_t)INT64_MAX || __builtin_mul_overflow(numel, d->dims[i], &numel))
      return lt__err(LT_ERR_OVERFLOW, "checkpoint: dataset %s has dims %s: the element count overflows 64 bits",
                     path, dims_str(nd, d->dims, a, sizeof a));
  uint64_t nbytes;
  if (__builtin_mul_overflow(numel, (uint64_t)es, &nbytes) || numel > (uint64_t)INT64_MAX)
    return lt__err(LT_ERR_OVERFLOW, "checkpoint: dataset %s has dims %s: the byte count overflows 64 bits", path,
                   dims_str(nd, d->dims, a, sizeof a));
  if (nbytes > LT__CKPT_MAX_BYTES)
    return lt__err(LT_ERR_OVERFLOW, "checkpoint: dataset %s has dims %s: %llu bytes, over the cap of %llu", path,
                   dims_str(nd, d->dims, a, sizeof a), (unsigned long long)nbytes,
                   (unsigned long long)LT__CKPT_MAX_BYTES);
  uint64_t limit;
  if (!d->n_filters) limit = file_size;
  else if (__builtin_mul_overflow(file_size, (uint64_t)LT__CKPT_MAX_RATIO, &limit) ||
           __builtin_add_overflow(limit, (uint64_t)1 << 20, &limit))
    limit = UINT64_MAX;
  if (nbytes > limit)
    return lt__err(LT_ERR_OVERFLOW, "checkpoint: dataset %s has dims %s: %llu bytes cannot be stored in a "
                   "%llu-byte file", path, dims_str(nd, d->dims, a, sizeof a), (unsigned long long)nbytes,
                   (unsigned long long)file_size);
  if (e->ndim >= 0) {
    bool same_shape = nd == e->ndim;
    for (int i = 0; same_shape && e->shape && i < nd; i++) same_shape = (int64_t)d->dims[i] == e->shape[i];
    if (!same_shape) {
      if (e->model_name)
        return lt__err(LT_ERR_SHAPE, "checkpoint: dataset %s has shape %s but the model's '%s' is %s", path,
                       dims_str(nd, d->dims, a, sizeof a), e->model_name, LT__S(e->ndim, e->shape));
      return lt__err(LT_ERR_SHAPE, "checkpoint: dataset %s has shape %s, expected %s", path,
                     dims_str(nd, d->dims, a, sizeof a),
                     e->shape ? LT__S(e->ndim, e->shape) : e->ndim == 1 ? "rank 1" : "another rank");
    }
  }
  *ndim = nd;
  for (int i = 0; i < nd; i++) shape[i] = (int64_t)d->dims[i];
  *bytes = (size_t)nbytes;
  return LT_OK;
}

lt_status lt__ckpt_check_written(const lt__ckpt_dset *d, const char *path, const lt__ckpt_written *w) {
  int nd = d->space == LT__SPACE_SCALAR ? 0 : d->ndim;
  uint64_t numel = 1;
  for (int i = 0; i < nd; i++) numel *= d->dims[i]; /* checked by lt__ckpt_check_dset */
  if (numel == 0) return LT_OK;
  bool written = false;
  if (d->layout == LT__LAYOUT_CHUNKED) {
    if (nd > 0 && w->known && w->chunk_ndim == nd) {
      uint64_t want = 1;
      written = true;
      for (int i = 0; i < nd && written; i++)
        if (w->chunk[i] == 0) written = false;
        else want *= d->dims[i] / w->chunk[i] + (d->dims[i] % w->chunk[i] != 0); /* <= numel: cannot overflow */
      written = written && w->n_chunks == want;
    }
  } else {
    written = w->known && w->allocated;
  }
  if (!written) return lt__err(LT_ERR_FORMAT, "checkpoint: dataset %s was never (fully) written", path);
  return LT_OK;
}

/* ---- names ------------------------------------------------------------- */

typedef struct named {
  const char *name;
  int i;
} named;
static int cmp_named(const void *a, const void *b) {
  return strcmp(((const named *)a)->name, ((const named *)b)->name);
}

/* "a, b, c ... and 7 more" into buf. */
static void list_names(char *buf, size_t size, const char *const *v, int n) {
  size_t k = 0;
  buf[0] = '\0';
  for (int i = 0; i < n; i++) {
    size_t need = strlen(v[i]) + 2;
    if (k + need + 24 >= size) {
      snprintf(buf + k, size - k, "%s... and %d more", i ? " " : "", n - i);
      return;
    }
    k += (size_t)snprintf(buf + k, size - k, "%s%s", i ? ", " : "", v[i]);
  }
}

lt_status lt__ckpt_match(const char *path, const char *group, const char *const *found, int n_found,
                         const char *const *want, int n_want, bool missing_ok, bool non_strict, int *match,
                         bool *hit) {
  named *idx = malloc((size_t)(n_want ? n_want : 1) * sizeof *idx);
  const char **miss = malloc((size_t)(n_want ? n_want : 1) * sizeof *miss);
  const char **unexp = malloc((size_t)(n_found ? n_found : 1) * sizeof *unexp);
  lt_status s = LT_OK;
  if (!idx || !miss || !unexp) {
    s = lt__err(LT_ERR_NOMEM, "checkpoint: out of memory");
    goto done;
  }
  for (int i = 0; i < n_want; i++) idx[i] = (named){want[i], i}, hit[i] = false;
  qsort(idx, (size_t)n_want, sizeof *idx, cmp_named);
  int nm = 0, nu = 0;
  for (int i = 0; i < n_found; i++) {
    int lo = 0, hi = n_want - 1;
    match[i] = -1;
    while (lo <= hi) { /* binary search of found[i] among the sorted wanted names */
      int mid = lo + (hi - lo) / 2, c = strcmp(found[i], idx[mid].name);
      if (!c) {
        match[i] = idx[mid].i;
        break;
      }
      if (c < 0) hi = mid - 1;
      else lo = mid + 1;
    }
    if (match[i] >= 0) hit[match[i]] = true;
    else unexp[nu++] = found[i];
  }
  for (int i = 0; i < n_want; i++)
    if (!hit[i] && !missing_ok) miss[nm++] = want[i];
  if ((nm || nu) && !non_strict) {
    bool rng = !strcmp(group, "/rng");
    char a[480], b[480];
    list_names(a, rng ? 400 : sizeof a, miss, nm);
    list_names(b, rng ? 400 : sizeof b, unexp, nu);
    if (rng)
      s = lt__err(LT_ERR_INVALID, "checkpoint '%s': generators do not match (strict load): %d missing from the "
                  "file%s%s%s; %d not given%s%s%s", path, nm, nm ? " (" : "", a, nm ? ")" : "", nu,
                  nu ? " (" : "", b, nu ? ")" : "");
    else
      s = lt__err(LT_ERR_INVALID, "checkpoint '%s': %s does not match (strict load): %d missing from the file%s%s%s; "
                  "%d not in the model%s%s%s", path, group, nm, nm ? " (" : "", a, nm ? ")" : "", nu,
                  nu ? " (" : "", b, nu ? ")" : "");
  }
done:
  free(idx);
  free(miss);
  free(unexp);
  return s;
}

/* ---- optimizer and schedule -------------------------------------------- */

lt_status lt__ckpt_check_optim_step(const char *path, const lt_ckpt_meta *attrs, int64_t *step) {
  lt_status s = lt__ckpt_attr_int(attrs, "/optim", "step", step);
  if (!s && (*step < 0 || *step > LT_OPTIM_MAX_STEP))
    s = lt__err(LT_ERR_FORMAT, "checkpoint '%s': /optim attribute 'step' (the optimizer's step count) is %lld, "
                "outside [0, %lld] (LT_OPTIM_MAX_STEP)", path, (long long)*step, (long long)LT_OPTIM_MAX_STEP);
  return s;
}

lt_status lt__ckpt_check_optim(const char *path, const lt_ckpt_meta *attrs, const lt_optim_config *c,
                               bool allow_hparam_change, int64_t *step, double *lr) {
  const char *kind = NULL;
  lt_status s = lt__ckpt_attr_string(attrs, "/optim", "kind", &kind);
  if (!s && strcmp(kind, lt_optim_kind_name(c->kind)))
    s = lt__err(LT_ERR_INVALID, "checkpoint '%s': the file holds %.16s optimizer state but the optimizer is %s",
                path, kind, lt_optim_kind_name(c->kind));
  if (!s) s = lt__ckpt_check_optim_step(path, attrs, step);
  if (!s) s = lt__ckpt_attr_double(attrs, "/optim", "lr", lr);
  if (!s && !(isfinite(*lr) && *lr >= 0))
    s = lt__err(LT_ERR_FORMAT, "checkpoint '%s': /optim attribute 'lr' is %g, outside [0, inf) (a finite learning "
                "rate)", path, *lr);
  struct { const char *name; double want; bool is_int; } hp[] = {
      {"momentum", c->momentum, false}, {"dampening", c->dampening, false}, {"beta1", c->beta1, false},
      {"beta2", c->beta2, false}, {"eps", c->eps, false}, {"weight_decay", c->weight_decay, false},
      {"nesterov", c->nesterov, true}, {"decay_all", c->decay_all, true}};
  for (size_t i = 0; i < sizeof hp / sizeof *hp && !s; i++) {
    double v = 0;
    int64_t iv = 0;
    s = hp[i].is_int ? lt__ckpt_attr_int(attrs, "/optim", hp[i].name, &iv)
                     : lt__ckpt_attr_double(attrs, "/optim", hp[i].name, &v);
    if (hp[i].is_int) v = (double)iv;
    if (!s && v != hp[i].want && !allow_hparam_change)
      s = lt__err(LT_ERR_INVALID, "checkpoint '%s': optimizer %s is %.17g in the file but %.17g in optim_config "
                  "(allow_hparam_change accepts this)", path, hp[i].name, v, hp[i].want);
  }
  return absent(s, path);
}

int lt__ckpt_optim_state_names(const lt_optim_config *c, const char **names) {
  if (c->kind == LT_OPTIM_SGD) {
    if (c->momentum == 0) return 0;
    names[0] = "momentum_buffer";
    return 1;
  }
  names[0] = "exp_avg";
  names[1] = "exp_avg_sq";
  names[2] = "step";
  return LT__CKPT_MAX_STATES;
}

lt_status lt__ckpt_check_optim_sets(const char *path, int64_t version, int64_t step, int ns,
                                    const char *const *snames, const char *pname, const bool *found, bool *any) {
  int need = version < 2 && ns == LT__CKPT_MAX_STATES ? ns - 1 : ns, bad = -1;
  *any = false;
  for (int k = 0; k < ns; k++) *any |= found[k];
  if (!*any) return LT_OK;
  for (int k = 0; k < ns && bad < 0; k++)
    if (found[k] != (k < need)) bad = k;
  if (bad >= 0)
    return lt__err(LT_ERR_FORMAT, "checkpoint '%s': the optimizer state of '%s' %s '%s' (format version %lld "
                   "stores %s, all or none)", path, pname, found[bad] ? "has" : "lacks", snames[bad],
                   (long long)version,
                   need == 1 ? "momentum_buffer" : need == 2 ? "exp_avg and exp_avg_sq" : "exp_avg, exp_avg_sq and step");
  if (step == 0)
    return lt__err(LT_ERR_FORMAT, "checkpoint '%s': /optim attribute 'step' is 0 (no optimizer step done) but "
                   "'%s' has optimizer state", path, pname);
  return LT_OK;
}

/* The schedule's values, so that lt_schedule_lr cannot turn NaN later: the
 * learning rates and factors finite (and the rates >= 0), the counts in
 * [0, LT_OPTIM_MAX_STEP], and what the kind divides by >= 1. */
static lt_status check_schedule_values(const char *path, const lt_schedule *v) {
  struct { const char *name; double x, lo, hi; } d[] = {
      {"base_lr", v->base_lr, 0, INFINITY}, {"min_lr", v->min_lr, 0, INFINITY},
      {"gamma", v->gamma, -INFINITY, INFINITY}, {"scale", v->scale, -INFINITY, INFINITY}};
  for (size_t i = 0; i < sizeof d / sizeof *d; i++)
    if (!isfinite(d[i].x) || d[i].x < d[i].lo)
      return lt__err(LT_ERR_FORMAT, "checkpoint '%s': /schedule attribute '%s' is %g, outside [%g, %g] (finite)",
                     path, d[i].name, d[i].x, d[i].lo, d[i].hi);
  struct { const char *name; int64_t x, lo; } n[] = {
      {"warmup", v->warmup, 0}, {"total", v->total, 0},
      {"step_size", v->step_size, v->kind == LT_SCHED_STEP ? 1 : 0},
      {"d_model", v->d_model, v->kind == LT_SCHED_NOAM ? 1 : 0}};
  for (size_t i = 0; i < sizeof n / sizeof *n; i++)
    if (n[i].x < n[i].lo || n[i].x > LT_OPTIM_MAX_STEP)
      return lt__err(LT_ERR_FORMAT, "checkpoint '%s': /schedule attribute '%s' is %lld, outside [%lld, %lld] for "
                     "schedule '%s'", path, n[i].name, (long long)n[i].x, (long long)n[i].lo,
                     (long long)LT_OPTIM_MAX_STEP, lt_schedule_kind_name(v->kind));
  return LT_OK;
}

lt_status lt__ckpt_check_schedule(const char *path, const lt_ckpt_meta *attrs, lt_schedule *sc, int64_t *step,
                                  bool *have) {
  *have = false;
  const char *kind = NULL;
  lt_status s = lt__ckpt_attr_int(attrs, "/schedule", "step", step);
  if (!s && (*step < 0 || *step > LT_OPTIM_MAX_STEP))
    s = lt__err(LT_ERR_FORMAT, "checkpoint '%s': /schedule attribute 'step' is %lld, outside [0, %lld] "
                "(LT_OPTIM_MAX_STEP)", path, (long long)*step, (long long)LT_OPTIM_MAX_STEP);
  if (!s) s = lt__ckpt_attr_string(attrs, "/schedule", "kind", &kind);
  if (!s && strcmp(kind, "none")) {
    lt_schedule_kind k = LT_SCHED_CONSTANT;
    if (lt_schedule_kind_parse(kind, &k) != LT_OK)
      s = lt__err(LT_ERR_FORMAT, "checkpoint '%s': unknown schedule kind '%.32s'", path, kind);
    lt_schedule v = {.kind = k};
    if (!s) s = lt__ckpt_attr_double(attrs, "/schedule", "base_lr", &v.base_lr);
    if (!s) s = lt__ckpt_attr_double(attrs, "/schedule", "min_lr", &v.min_lr);
    if (!s) s = lt__ckpt_attr_double(attrs, "/schedule", "gamma", &v.gamma);
    if (!s) s = lt__ckpt_attr_double(attrs, "/schedule", "scale", &v.scale);
    if (!s) s = lt__ckpt_attr_int(attrs, "/schedule", "warmup", &v.warmup);
    if (!s) s = lt__ckpt_attr_int(attrs, "/schedule", "total", &v.total);
    if (!s) s = lt__ckpt_attr_int(attrs, "/schedule", "step_size", &v.step_size);
    if (!s) s = lt__ckpt_attr_int(attrs, "/schedule", "d_model", &v.d_model);
    if (!s) s = check_schedule_values(path, &v);
    if (!s) {
      *sc = v;
      *have = true;
    }
  }
  return absent(s, path);
}

/* ---- /extra ------------------------------------------------------------ */

lt_status lt__ckpt_check_blob_name(const lt_ckpt_meta *m, const char *what, const char *name) {
  if (lt_ckpt_meta_kind(m, name) >= 0)
    return lt__err(LT_ERR_FORMAT, "checkpoint: '%s' in %s is both an attribute and a blob", name, what);
  if (lt__ckpt_check_key(name, "checkpoint"))
    return lt__err(LT_ERR_FORMAT, "checkpoint: blob name '%.64s' in %s is not a valid key", name, what);
  return LT_OK;
}

lt_status lt__ckpt_check_blob(const char *path, size_t bytes, uint64_t *budget) {
  uint64_t limit = *budget < LT__CKPT_MAX_BLOB ? *budget : LT__CKPT_MAX_BLOB;
  if (bytes > limit)
    return lt__err(*budget < LT__CKPT_MAX_BLOB ? LT_ERR_NOMEM : LT_ERR_OVERFLOW,
                   "checkpoint: blob %s holds %zu bytes, more than the %llu bytes allowed (%s): refused before "
                   "reading", path, bytes, (unsigned long long)limit,
                   *budget < LT__CKPT_MAX_BLOB ? "what is left under the memory cap, max_bytes" : "one blob's limit");
  *budget -= bytes;
  return LT_OK;
}

/* ---- values ------------------------------------------------------------ */

lt_status lt__ckpt_check_values(const char *path, const char *dpath, lt_dtype dt, const void *buf, int64_t n,
                                bool allow_nonfinite) {
  if (dt == LT_DTYPE_BOOL) {
    const unsigned char *b = buf;
    for (int64_t i = 0; i < n; i++)
      if (b[i] > 1)
        return lt__err(LT_ERR_FORMAT, "checkpoint '%s': bool dataset %s holds %u at flat index %lld", path, dpath,
                       b[i], (long long)i);
    return LT_OK;
  }
  if (allow_nonfinite || !lt_dtype_is_float(dt)) return LT_OK;
  int64_t bad = -1;
  double v = 0;
  if (dt == LT_DTYPE_F32) {
    const float *f = buf;
    for (int64_t i = 0; i < n && bad < 0; i++)
      if (!isfinite(f[i])) bad = i, v = f[i];
  } else {
    const double *f = buf;
    for (int64_t i = 0; i < n && bad < 0; i++)
      if (!isfinite(f[i])) bad = i, v = f[i];
  }
  if (bad >= 0)
    return lt__err(LT_ERR_NUMERIC,
                   "checkpoint '%s': dataset %s holds %s at flat index %lld (allow_nonfinite accepts non-finite "
                   "values)", path, dpath, isnan(v) ? "NaN" : v > 0 ? "+inf" : "-inf", (long long)bad);
  return LT_OK;
}

lt_status lt__ckpt_check_optim_values(const char *path, const char *dpath, const char *sname, lt_dtype dt,
                                      const void *buf, int64_t n) {
  char what[LT__CKPT_MAX_PATH + 16];
  snprintf(what, sizeof what, "dataset %s", dpath);
  lt_status s = lt_optim_check_state(sname, dt, buf, n, what);
  if (s == LT_ERR_INVALID) return lt__err(LT_ERR_FORMAT, "checkpoint '%s': %s", path, lt_last_error());
  if (s) return lt__err(s, "checkpoint '%s': %s", path, lt_last_error());
  return LT_OK;
}

/* ---- the configuration ------------------------------------------------- */

static void val_str(char *buf, size_t size, const lt__meta_val *v) {
  switch (v->kind) {
    case LT_CKPT_INT: snprintf(buf, size, "%lld", (long long)v->i); break;
    case LT_CKPT_DOUBLE: snprintf(buf, size, "%.17g", v->d); break;
    case LT_CKPT_STRING: snprintf(buf, size, "'%.64s'", v->s); break;
    default: snprintf(buf, size, "%zu bytes", v->size); break;
  }
}

lt_status lt__ckpt_check_config(const char *path, const lt_ckpt_meta *file_cfg, const lt_ckpt_meta *want) {
  const char *key;
  lt__meta_val w;
  for (int i = 0; lt__ckpt_meta_at(want, i, &key, &w); i++) {
    int kind = lt_ckpt_meta_kind(file_cfg, key);
    if (kind < 0) return lt__err(LT_ERR_INVALID, "checkpoint '%s': the file's config has no '%s'", path, key);
    lt__meta_val f;
    const char *fk;
    for (int j = 0; lt__ckpt_meta_at(file_cfg, j, &fk, &f); j++) {
      if (strcmp(fk, key)) continue;
      bool same = (int)f.kind == (int)w.kind;
      if (same && w.kind == LT_CKPT_INT) same = f.i == w.i;
      if (same && w.kind == LT_CKPT_DOUBLE) same = f.d == w.d;
      if (same && w.kind == LT_CKPT_STRING) same = !strcmp(f.s, w.s);
      if (same && w.kind == LT_CKPT_BYTES) same = f.size == w.size && !memcmp(f.bytes, w.bytes, f.size);
      if (same) break;
      char a[96], b[96];
      val_str(a, sizeof a, &f);
      val_str(b, sizeof b, &w);
      return lt__err(LT_ERR_INVALID, "checkpoint '%s': config '%s' is %s in the file but %s is expected", path, key,
                     a, b);
    }
  }
  return LT_OK;
}

lt_status lt__ckpt_check_train_state(const char *op, const lt_train_state *st) {
  if (!st) return lt__err_null(op, "st");
  if (!st->params) return lt__err_null(op, "st->params");
  if (st->optim && !st->optim_config)
    return lt__err(LT_ERR_NULL, "%s: st->optim_config is NULL: it is required with an optimizer", op);
  if (st->n_generators < 0 || (st->n_generators > 0 && (!st->generators || !st->generator_names)))
    return lt__err(LT_ERR_INVALID, "%s: %d generators but no generator or name array", op, st->n_generators);
  for (int i = 0; i < st->n_generators; i++) {
    if (!st->generators[i]) return lt__err(LT_ERR_NULL, "%s: generator %d is NULL", op, i);
    lt_status s = lt__ckpt_check_key(st->generator_names[i], op);
    if (s) return s;
    if (strchr(st->generator_names[i], '.'))
      return lt__err(LT_ERR_INVALID, "%s: generator name '%s' contains '.'", op, st->generator_names[i]);
    for (int j = 0; j < i; j++)
      if (!strcmp(st->generator_names[i], st->generator_names[j]))
        return lt__err(LT_ERR_INVALID, "%s: generator name '%s' appears twice", op, st->generator_names[i]);
  }
  return LT_OK;
}
