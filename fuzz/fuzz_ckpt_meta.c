/*
 * fuzz/fuzz_ckpt_meta.c: the checkpoint loader's metadata rules without
 * libhdf5. The input is a compact encoding of what HDF5 would have returned
 * for a checkpoint (the attributes of its groups, the facts of each dataset,
 * some data); the harness feeds it to the rules of checkpoint/rules.c in the
 * order lt_ckpt_load_training applies them, then to the programs' own checks,
 * as generate and train --resume do:
 *   1. the root (format, version, content) and the top-level names;
 *   2. the configuration (/model's attributes), lt_tf_config_from_meta (the
 *      range table), the size it describes against the datasets' totals
 *      (lt_ckpt_check_model_size), the tokenizer blob deserialised;
 *   3. train's saved settings (/extra opt.*) through train's option table
 *      (models/transformer/programs/train_cli.c), each in its flag's range;
 *   4. with a small configuration, the Transformer's parameters as the
 *      targets: /model matched strictly by name, each dataset's storage, type
 *      and shape, its data's values; /optim's attributes against AdamW's,
 *      its states all or none and their values; /schedule; /rng; /extra's
 *      blobs under the memory budget.
 * fuzz/fuzz_checkpoint.c drives the same rules through libhdf5 on real files;
 * this one reaches them thousands of times a second.
 *
 * Encoding (little-endian; a record that runs past the input ends it):
 *   'F' u64                file size (for the dataset caps; default 1 MiB)
 *   'H' u8                 flags: 1 allow_hparam_change, 2 allow_nonfinite
 *   'A' u8 group, key, u8 kind, value   an attribute; group 0 /, 1 /model,
 *                          2 /optim, 3 /schedule, 4 /extra; kind 0 int (i64),
 *                          1 double (f64), 2 string (u16 length, bytes)
 *   'L' name               a top-level link
 *   'D' u8 group, name, facts, u32 length, data   a dataset: group 1 /model,
 *                          2 /optim, 3 /rng, 4 /extra (a blob); its data is
 *                          the bytes given, repeated to the size it needs
 *   key, name: u8 length, bytes (NUL-terminated here)
 *   facts: u8 failed, layout, n_external, n_filters (255: -1), the filter
 *          ids (u8 each, at most 8), u8 dtype, raw, type size, float class,
 *          space, ndim, varint dims (at most 32), then whether it was
 *          written: u8 known, allocated, chunk ndim, varint chunk dims,
 *          varint chunks present
 * fuzz/make_ckpt_seeds.c writes the seeds (fuzz/corpus/ckpt_meta/) from the
 * real checkpoints of fuzz/corpus/checkpoint/, read with libhdf5 and the
 * same fact gathering the loader uses.
 *
 * Checked promises: every refusal has a message; an accepted dataset's
 * bytes and shape agree with its expectation; an accepted configuration
 * passes lt_tf_config_validate; accepted settings are in their flags' ranges.
 */
#include <math.h>
#include <string.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/internal.h"
#include "datasets/datasets.h"
#include "fuzz_util.h"
#include "models/transformer/config.h"
#include "models/transformer/transformer.h"
#include "util_tfckpt.h"
#include "train_settings.h"

/* Limits of this harness (not of the library): what it builds and allocates. */
enum { MAX_RECORDS = 4096, MAX_DATA = 1 << 20, MAX_PARAMS = 1 << 16 };
#define PATH "fuzz.h5" /* for messages */

enum { G_ROOT, G_MODEL, G_OPTIM, G_SCHEDULE, G_EXTRA, N_GROUPS };

typedef struct dset {
  int group;
  char name[256];
  lt__ckpt_dset facts;
  lt__ckpt_written written;
  const uint8_t *data;
  size_t n_data;
} dset;

typedef struct parsed {
  uint64_t file_size;
  unsigned flags;
  lt_ckpt_meta *attrs[N_GROUPS];
  char top[32][64];
  int n_top;
  dset *d;
  int n_d, cap_d;
} parsed;

/* ---- decoding ------------------------------------------------------------- */

static bool take(fuzz_input *in, void *out, size_t n) {
  if (in->n < n) {
    in->n = 0;
    return false;
  }
  memcpy(out, in->p, n);
  in->p += n, in->n -= n;
  return true;
}
static uint64_t varint(fuzz_input *in) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64 && in->n; shift += 7) {
    uint8_t b = fuzz_u8(in);
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) break;
  }
  return v;
}
static bool str8(fuzz_input *in, char *buf, size_t size) {
  uint8_t n = fuzz_u8(in);
  if (n >= size || in->n < n) return in->n = 0, false;
  take(in, buf, n);
  buf[n] = '\0';
  return true;
}

static void facts(fuzz_input *in, lt__ckpt_dset *f, lt__ckpt_written *w) {
  *f = (lt__ckpt_dset){0};
  *w = (lt__ckpt_written){0};
  f->failed = fuzz_u8(in) % 4;
  if (f->failed) snprintf(f->h5_stack, sizeof f->h5_stack, ": HDF5: H5Dfuzz(): made up");
  f->layout = fuzz_u8(in) % 5;
  f->layout_code = f->layout;
  f->n_external = fuzz_u8(in);
  uint8_t nf = fuzz_u8(in);
  f->n_filters = nf == 255 ? -1 : nf;
  for (int i = 0; i < f->n_filters && i < LT__CKPT_MAX_FILTERS; i++) f->filters[i] = fuzz_u8(in);
  f->dtype = (lt_dtype)(fuzz_u8(in) % (LT_DTYPE_COUNT + 1));
  f->raw = (lt__ckpt_raw)(fuzz_u8(in) % 3);
  f->type_size = fuzz_u8(in);
  f->float_class = fuzz_u8(in) & 1;
  const char *desc = f->dtype < LT_DTYPE_COUNT ? lt__ckpt_type_desc(f->dtype, LT__RAW_NONE)
                     : f->raw ? lt__ckpt_type_desc(LT_DTYPE_COUNT, f->raw) : NULL;
  snprintf(f->type_desc, sizeof f->type_desc, "%s", desc ? desc : "opaque, 3 bytes");
  f->space = fuzz_u8(in) % 3;
  f->ndim = (int8_t)fuzz_u8(in);
  for (int i = 0; i < f->ndim && i < LT__H5_MAX_RANK; i++) f->dims[i] = varint(in);
  w->known = fuzz_u8(in) & 1;
  w->allocated = fuzz_u8(in) & 1;
  w->chunk_ndim = fuzz_u8(in) % (LT__H5_MAX_RANK + 1);
  for (int i = 0; i < w->chunk_ndim; i++) w->chunk[i] = varint(in);
  w->n_chunks = varint(in);
}

static void decode(const uint8_t *data, size_t size, parsed *p) {
  fuzz_input in = {data, size};
  p->file_size = 1 << 20;
  for (int g = 0; g < N_GROUPS; g++) FUZZ_ASSERT((p->attrs[g] = lt_ckpt_meta_new()) != NULL, "out of memory");
  size_t data_total = 0;
  for (int r = 0; r < MAX_RECORDS && in.n; r++) {
    uint8_t tag = fuzz_u8(&in);
    if (tag == 'F') {
      take(&in, &p->file_size, 8);
      p->file_size %= (uint64_t)1 << 48;
    } else if (tag == 'H') {
      p->flags = fuzz_u8(&in);
    } else if (tag == 'A') {
      int g = fuzz_u8(&in) % N_GROUPS;
      char key[256];
      if (!str8(&in, key, sizeof key)) break;
      uint8_t kind = fuzz_u8(&in) % 3;
      lt_status s;
      if (kind == 0) {
        int64_t v = 0;
        if (!take(&in, &v, 8)) break;
        s = lt_ckpt_meta_set_int(p->attrs[g], key, v);
      } else if (kind == 1) {
        double v = 0;
        if (!take(&in, &v, 8)) break;
        s = lt_ckpt_meta_set_double(p->attrs[g], key, v);
      } else {
        uint16_t n = 0;
        if (!take(&in, &n, 2) || in.n < n) break;
        char *v = malloc((size_t)n + 1);
        FUZZ_ASSERT(v != NULL, "out of memory");
        take(&in, v, n);
        v[n] = '\0';
        s = lt_ckpt_meta_set_string(p->attrs[g], key, v);
        free(v);
      }
      /* what h5.c refuses as it reads (an invalid key): the loader would stop here */
      if (s) {
        fuzz_check_status(s, "meta_set");
        break;
      }
    } else if (tag == 'L') {
      if (p->n_top == 32 || !str8(&in, p->top[p->n_top], sizeof p->top[0])) break;
      p->n_top++;
    } else if (tag == 'D') {
      if (p->n_d == p->cap_d) { /* grown as needed: a dataset's facts are 1.5 KB */
        p->cap_d = p->cap_d ? 2 * p->cap_d : 64;
        FUZZ_ASSERT((p->d = realloc(p->d, (size_t)p->cap_d * sizeof *p->d)) != NULL, "out of memory");
      }
      dset *d = &p->d[p->n_d];
      d->group = 1 + fuzz_u8(&in) % 4;
      if (!str8(&in, d->name, sizeof d->name)) break;
      facts(&in, &d->facts, &d->written);
      uint32_t n = 0;
      if (!take(&in, &n, 4)) break;
      d->n_data = n < in.n ? n : in.n;
      if (data_total + d->n_data > MAX_DATA) d->n_data = 0;
      data_total += d->n_data;
      d->data = in.p;
      in.p += d->n_data, in.n -= d->n_data;
      p->n_d++;
    } else {
      break;
    }
  }
}

static void parsed_free(parsed *p) {
  for (int g = 0; g < N_GROUPS; g++) lt_ckpt_meta_free(p->attrs[g]);
  free(p->d);
}

/* A dataset's data at the size the checks accepted: its bytes repeated (zeros without any). Returns new. */
static void *data_of(const dset *d, size_t bytes) {
  unsigned char *b = calloc(bytes ? bytes : 1, 1);
  FUZZ_ASSERT(b != NULL, "out of memory");
  for (size_t i = 0; d->n_data && i < bytes; i++) b[i] = d->data[i % d->n_data];
  return b;
}

/* ---- the rules, in the loader's order -------------------------------------- */

static void dset_path(char *buf, size_t size, const dset *d) {
  static const char *const g[] = {"", "/model", "/optim", "/rng", "/extra"};
  snprintf(buf, size, "%s/%s", g[d->group], d->name);
}

/* lt__h5_check_dataset on the facts: the dataset check, then whether it was written. */
static lt_status check_dset(const dset *d, const lt__h5_expect *e, uint64_t file_size, int *nd, int64_t *shape,
                            size_t *bytes) {
  char path[300];
  dset_path(path, sizeof path, d);
  lt_status s = fuzz_check_status(lt__ckpt_check_dset(&d->facts, path, e, file_size, nd, shape, bytes), "check_dset");
  if (s) return s;
  FUZZ_ASSERT(*nd >= 0 && *nd <= LT_MAX_DIMS, "accepted rank %d", *nd);
  if (e->ndim >= 0) FUZZ_ASSERT(*nd == e->ndim, "accepted rank %d, expected %d", *nd, e->ndim);
  uint64_t n = 1;
  for (int i = 0; i < *nd; i++) n *= (uint64_t)shape[i];
  FUZZ_ASSERT(*bytes <= LT__CKPT_MAX_BYTES && *bytes <= file_size * LT__CKPT_MAX_RATIO + (1u << 20),
              "accepted %zu bytes", *bytes);
  if (e->dtype != LT_DTYPE_COUNT)
    FUZZ_ASSERT(*bytes == n * lt_dtype_size(e->dtype), "bytes %zu for %llu elements", *bytes, (unsigned long long)n);
  return fuzz_check_status(lt__ckpt_check_written(&d->facts, path, &d->written), "check_written");
}

/* Root, top level, and the describe-style totals of /model (lt_ckpt_info's model_*). */
static lt_status check_outline(const parsed *p, lt_ckpt_info *info) {
  const char *lv;
  lt_status s = fuzz_check_status(lt__ckpt_check_root(PATH, p->attrs[G_ROOT], &info->format_version, &lv,
                                                      &info->training), "check_root");
  if (s) return s;
  bool model = false;
  for (int i = 0; i < p->n_top; i++) {
    if (!lt__ckpt_top_level_name(p->top[i])) return LT_ERR_FORMAT;
    model |= !strcmp(p->top[i], "model");
  }
  if (!model) return LT_ERR_FORMAT;
  uint64_t elems = 0, bytes = 0;
  for (int i = 0; i < p->n_d; i++) {
    if (p->d[i].group != G_MODEL) continue;
    lt__h5_expect e = {.dtype = LT_DTYPE_COUNT, .raw = LT__RAW_ANY, .ndim = -1};
    int nd;
    int64_t shape[LT_MAX_DIMS];
    size_t nb;
    if ((s = check_dset(&p->d[i], &e, p->file_size, &nd, shape, &nb))) return s;
    uint64_t ne = 1;
    for (int k = 0; k < nd; k++) ne *= (uint64_t)shape[k];
    if (__builtin_add_overflow(elems, ne, &elems) || __builtin_add_overflow(bytes, nb, &bytes) ||
        elems > (uint64_t)INT64_MAX)
      return LT_ERR_OVERFLOW;
    info->model_tensors++;
  }
  info->model_elements = (int64_t)elems;
  info->model_bytes = bytes;
  return LT_OK;
}

/* One group's datasets against targets: names (strict unless missing_ok), then each dataset, then its values. */
typedef struct target {
  const char *name;
  const lt_tensor *like;
  const char *sname; /* an optimizer state's name, else NULL */
  bool found;
} target;

static lt_status check_group(const parsed *p, int group, target *t, int nt, bool missing_ok) {
  const char *found[MAX_RECORDS], *want[2 * MAX_PARAMS / 16 + 64];
  int idx[MAX_RECORDS], match[MAX_RECORDS], nf = 0;
  bool hit[sizeof want / sizeof *want];
  FUZZ_ASSERT(nt <= (int)(sizeof want / sizeof *want), "%d targets", nt);
  for (int i = 0; i < p->n_d; i++)
    if (p->d[i].group == group) idx[nf] = i, found[nf++] = p->d[i].name;
  for (int i = 0; i < nt; i++) want[i] = t[i].name;
  static const char *const names[] = {"", "/model", "/optim", "/rng"};
  lt_status s = lt__ckpt_match(PATH, names[group], found, nf, want, nt, missing_ok, false, match, hit);
  if (fuzz_check_status(s, "match")) return s;
  for (int i = 0; i < nf; i++) FUZZ_ASSERT(match[i] >= 0 && hit[match[i]], "an accepted name without a target");
  for (int i = 0; i < nt; i++) t[i].found = hit[i];
  for (int i = 0; i < nf; i++) {
    const target *tg = &t[match[i]];
    lt__h5_expect e = {.dtype = tg->like->dtype, .ndim = tg->like->ndim, .shape = tg->like->shape,
                       .model_name = tg->name};
    int nd;
    int64_t shape[LT_MAX_DIMS];
    size_t bytes;
    if ((s = check_dset(&p->d[idx[i]], &e, p->file_size, &nd, shape, &bytes))) return s;
    for (int k = 0; k < nd; k++) FUZZ_ASSERT(shape[k] == tg->like->shape[k], "accepted another shape");
    void *buf = data_of(&p->d[idx[i]], bytes);
    char path[300];
    dset_path(path, sizeof path, &p->d[idx[i]]);
    s = tg->sname ? lt__ckpt_check_optim_values(PATH, path, tg->sname, tg->like->dtype, buf, tg->like->numel)
                  : lt__ckpt_check_values(PATH, path, tg->like->dtype, buf, tg->like->numel, p->flags & 2);
    free(buf);
    if (fuzz_check_status(s, "check_values")) return s;
  }
  return LT_OK;
}

static lt_status check_training(const parsed *p, int64_t version, lt_params *params) {
  /* /model, strictly */
  int np = lt_params_count(params);
  target *t = calloc((size_t)np * LT__CKPT_MAX_STATES + 1, sizeof *t);
  char (*full)[300] = calloc((size_t)np * LT__CKPT_MAX_STATES + 1, sizeof *full);
  lt_tensor *step_like = lt_tensor_keep(lt_scalar(LT_DTYPE_I64, 0));
  FUZZ_ASSERT(t && full && step_like, "out of memory");
  for (int i = 0; i < np; i++) t[i] = (target){.name = lt_params_at(params, i)->name, .like = lt_params_at(params, i)->value};
  lt_status s = check_group(p, G_MODEL, t, np, false);
  /* /optim: AdamW's attributes, then its states, all or none per parameter */
  lt_optim_config oc = tfckpt_optim_config();
  int64_t step = 0;
  double lr = 0;
  if (!s) s = fuzz_check_status(lt__ckpt_check_optim(PATH, p->attrs[G_OPTIM], &oc, p->flags & 1, &step, &lr),
                                "check_optim");
  if (!s) FUZZ_ASSERT(step >= 0 && step <= LT_OPTIM_MAX_STEP && isfinite(lr) && lr >= 0, "accepted step or lr");
  const char *sn[LT__CKPT_MAX_STATES];
  int ns = lt__ckpt_optim_state_names(&oc, sn), nt = 0;
  for (int i = 0; i < np && !s; i++) {
    const lt_param *q = lt_params_at(params, i);
    if (q->flags & LT_PARAM_BUFFER) continue;
    for (int k = 0; k < ns; k++) {
      snprintf(full[nt], sizeof full[nt], "%s.%s", q->name, sn[k]);
      t[nt] = (target){.name = full[nt], .like = k == 2 ? step_like : q->value, .sname = sn[k]};
      nt++;
    }
  }
  if (!s) s = check_group(p, G_OPTIM, t, nt, true);
  for (int i = 0; i + ns <= nt && !s; i += ns) {
    bool found[LT__CKPT_MAX_STATES], any;
    for (int k = 0; k < ns; k++) found[k] = t[i + k].found;
    s = fuzz_check_status(lt__ckpt_check_optim_sets(PATH, version, step, ns, sn, t[i].name, found, &any), "optim_sets");
  }
  /* /schedule */
  lt_schedule sc;
  int64_t sstep;
  bool have;
  if (!s) s = fuzz_check_status(lt__ckpt_check_schedule(PATH, p->attrs[G_SCHEDULE], &sc, &sstep, &have), "schedule");
  /* the loader's promise: an accepted schedule cannot turn the learning rate into NaN */
  if (!s && have) FUZZ_ASSERT(!isnan(lt_schedule_lr(&sc, sstep)), "an accepted schedule gives a NaN rate");
  /* /rng: the generators by name, each a uint64 [2] */
  const char *found[MAX_RECORDS];
  int match[MAX_RECORDS], nf = 0;
  bool hit[TFCKPT_N_GENERATORS];
  for (int i = 0; i < p->n_d && !s; i++) {
    if (p->d[i].group != 3) continue;
    found[nf++] = p->d[i].name;
    static const int64_t two[1] = {2};
    lt__h5_expect e = {.dtype = LT_DTYPE_COUNT, .raw = LT__RAW_U64, .ndim = 1, .shape = two};
    int nd;
    int64_t shape[LT_MAX_DIMS];
    size_t bytes;
    s = check_dset(&p->d[i], &e, p->file_size, &nd, shape, &bytes);
    if (!s) FUZZ_ASSERT(bytes == 16, "a generator state of %zu bytes", bytes);
  }
  if (!s) s = fuzz_check_status(lt__ckpt_match(PATH, "/rng", found, nf, tfckpt_generator_names, TFCKPT_N_GENERATORS,
                                               false, false, match, hit), "rng names");
  lt_tensor_free(step_like);
  free(full);
  free(t);
  return s;
}

/* /extra: its attributes, then each blob (name, dataset, size under the budget). */
static lt_status read_extra(const parsed *p, lt_ckpt_meta *extra) {
  const char *key;
  lt__meta_val v;
  for (int i = 0; lt__ckpt_meta_at(p->attrs[G_EXTRA], i, &key, &v); i++) {
    lt_status s = v.kind == LT_CKPT_INT ? lt_ckpt_meta_set_int(extra, key, v.i)
                  : v.kind == LT_CKPT_DOUBLE ? lt_ckpt_meta_set_double(extra, key, v.d)
                  : lt_ckpt_meta_set_string(extra, key, v.s);
    FUZZ_ASSERT(s == LT_OK, "copying /extra: %s", lt_last_error());
  }
  uint64_t budget = 4u << 20; /* this harness's memory cap for blobs */
  for (int i = 0; i < p->n_d; i++) {
    if (p->d[i].group != G_EXTRA) continue;
    char path[300];
    dset_path(path, sizeof path, &p->d[i]);
    lt_status s = fuzz_check_status(lt__ckpt_check_blob_name(extra, "/extra", p->d[i].name), "blob name");
    lt__h5_expect e = {.dtype = LT_DTYPE_COUNT, .raw = LT__RAW_U8, .ndim = 1, .shape = NULL};
    int nd;
    int64_t shape[LT_MAX_DIMS];
    size_t bytes = 0;
    if (!s) s = check_dset(&p->d[i], &e, p->file_size, &nd, shape, &bytes);
    if (!s) s = fuzz_check_status(lt__ckpt_check_blob(path, bytes, &budget), "blob size");
    if (s) return s;
    void *buf = data_of(&p->d[i], bytes);
    s = lt_ckpt_meta_set_bytes(extra, p->d[i].name, buf, bytes);
    free(buf);
    FUZZ_ASSERT(s == LT_OK, "set_bytes: %s", lt_last_error());
  }
  return LT_OK;
}

/* train --resume's settings: the saved opt.* through train's option table, each in its flag's range. */
static void check_settings(const lt_tf_config *cfg, const lt_ckpt_meta *extra) {
  options saved;
  char why[512];
  if (fuzz_check_status(trainset_restore(cfg, extra, PATH, &saved), "restoring train's settings")) return;
  FUZZ_ASSERT(trainset_in_range(&saved, extra, true, why, sizeof why), "accepted, but %s", why);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_init();
  parsed p = {0};
  decode(data, size, &p);
  lt_ckpt_info info = {0};
  lt_ckpt_meta *extra = lt_ckpt_meta_new();
  FUZZ_ASSERT(extra != NULL, "out of memory");
  lt_tf_config cfg;
  /* 1-2: the outline, the configuration, its size, the tokenizer */
  if (check_outline(&p, &info) == LT_OK && read_extra(&p, extra) == LT_OK &&
      fuzz_check_status(lt_tf_config_from_meta(p.attrs[G_MODEL], &cfg), "config_from_meta") == LT_OK) {
    FUZZ_ASSERT(lt_tf_config_validate(&cfg) == LT_OK, "an accepted configuration is invalid: %s", lt_last_error());
    int64_t n = 0;
    size_t bytes = 0;
    lt_status s = fuzz_check_status(lt_tf_config_size(&cfg, &n, &bytes), "config_size");
    if (!s) s = fuzz_check_status(lt_ckpt_check_model_size(&info, PATH, n, bytes, 64u << 20), "check_model_size");
    const void *blob;
    size_t nb;
    if (!s && lt_ckpt_meta_get_bytes(extra, LT_TF_CKPT_TOKENIZER, &blob, &nb) == LT_OK) {
      lt_tokenizer *tok = lt_tokenizer_deserialize(blob, nb);
      if (!tok) s = fuzz_check_status(lt_last_status(), "tokenizer_deserialize");
      lt_tokenizer_free(tok);
    }
    fuzz_log("ckpt_meta: configuration, size, tokenizer: %s", s ? lt_last_error() : "ok");
    /* 3: train's settings */
    if (!s && info.training) check_settings(&cfg, extra);
    /* 4: the training state against the model's parameters */
    if (!s && info.training && n <= MAX_PARAMS && cfg.n_enc_layers + cfg.n_dec_layers <= 4) {
      lt_generator *init = lt_generator_new(1);
      lt_transformer *m = init ? lt_transformer_new(&cfg, init) : NULL;
      lt_generator_free(init);
      if (m) s = check_training(&p, info.format_version, lt_transformer_params(m));
      else fuzz_check_status(lt_last_status(), "transformer_new");
      fuzz_log("ckpt_meta: training state: %s", !m ? "no model" : s ? lt_last_error() : "ok");
      lt_transformer_free(m);
    }
  }
  lt_ckpt_meta_free(extra);
  parsed_free(&p);
  return 0;
}
