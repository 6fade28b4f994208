/*
 * checkpoint/checkpoint.c: the checkpoint layout (docs/checkpoint-format.md)
 * and reading it: lt_ckpt_load_params, lt_ckpt_load_training and
 * lt_ckpt_describe. Writing the same layout is save.c's.
 *
 *   /                 attrs format, format_version, library_version, content
 *   /model/<a>/<b>    one dataset per tensor of the lt_params store ("a.b");
 *                     attrs: the model configuration
 *   /optim/<a>/<b>/<state>   optimizer state per parameter; attrs: kind,
 *                     step, lr and hyperparameters
 *   /schedule         attrs: step (the schedule's position), kind, parameters
 *   /rng/<name>       uint64 [2]: a generator's (seed, offset)
 *   /extra            attrs and uint8 datasets: the caller's extra state
 *
 * Loading is three phases so that a failure changes nothing: (1) integrity
 * header, then the HDF5 tree walked and every dataset checked against what
 * the model expects (no allocation yet); (2) scratch buffers allocated, data
 * read and checked (finite values, bools 0/1); (3) commit: copies into the
 * model that cannot fail.
 *
 * What this is not: a converter between dtypes or layouts (a dataset must
 * have exactly the dtype and shape of the tensor it loads into), the saving
 * (save.c), or the checked walk and dataset checks (h5_check.c).
 */
#include "checkpoint/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "autograd/autograd.h"
#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"

#define MAX_STATES LT__CKPT_MAX_STATES
#define optim_state_names lt__ckpt_optim_state_names

/* ======================================================================== */
/* Loading                                                                  */
/* ======================================================================== */

typedef struct names {
  char **v;
  int n, cap;
} names;

static void names_free(names *l) {
  for (int i = 0; i < l->n; i++) free(l->v[i]);
  free(l->v);
  *l = (names){0};
}

/* Appends prefix + s to l (prefix may be ""). */
static lt_status names_push2(names *l, const char *prefix, const char *s) {
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 16;
    char **v = realloc(l->v, (size_t)cap * sizeof *v);
    if (!v) return lt__err(LT_ERR_NOMEM, "checkpoint: out of memory");
    l->v = v;
    l->cap = cap;
  }
  size_t a = strlen(prefix), b = strlen(s);
  if (!(l->v[l->n] = malloc(a + b + 1))) return lt__err(LT_ERR_NOMEM, "checkpoint: out of memory");
  memcpy(l->v[l->n], prefix, a);
  memcpy(l->v[l->n] + a, s, b + 1);
  l->n++;
  return LT_OK;
}

static lt_status names_push(names *l, const char *s) { return names_push2(l, "", s); }

/* A tensor the file may hold: its dotted name under the group, the tensor
 * that gives its dtype and shape, and where the data goes (resolved at
 * commit for optimizer states, which may not exist yet). */
typedef struct target {
  char *name;
  const lt_tensor *like;
  lt_tensor *dst;           /* NULL: resolve from (pname, sname) at commit */
  const char *pname, *sname;
  void *buf;                /* scratch data once read */
  lt_tensor *src;           /* buf as a tensor, for a non-contiguous dst (borrowed view of buf) */
  size_t bytes;
  bool found;
} target;

typedef struct targets {
  target *v;
  int n, cap;
} targets;

static void targets_free(targets *t) {
  for (int i = 0; i < t->n; i++) {
    free(t->v[i].name);
    lt_tensor_free(t->v[i].src);
    free(t->v[i].buf);
  }
  free(t->v);
  *t = (targets){0};
}

static lt_status targets_push(targets *t, const char *name, const lt_tensor *like, lt_tensor *dst,
                              const char *pname, const char *sname) {
  if (t->n == t->cap) {
    int cap = t->cap ? 2 * t->cap : 64;
    target *v = realloc(t->v, (size_t)cap * sizeof *v);
    if (!v) return lt__err(LT_ERR_NOMEM, "checkpoint: out of memory");
    t->v = v;
    t->cap = cap;
  }
  char *n = strdup(name);
  if (!n) return lt__err(LT_ERR_NOMEM, "checkpoint: out of memory");
  t->v[t->n++] = (target){.name = n, .like = like, .dst = dst, .pname = pname, .sname = sname};
  return LT_OK;
}

static int desc_by_name(const void *a, const void *b) {
  return strcmp(((const lt_ckpt_tensor_desc *)a)->name, ((const lt_ckpt_tensor_desc *)b)->name);
}

typedef struct loader {
  const char *path;
  hid_t file;
  int fd;                      /* the verified file, open while HDF5 reads it */
  lt__h5_raw raw;              /* object header checks (h5.c) */
  uint64_t size;
  uint64_t used;               /* bytes allocated for tensors and blobs so far (opts->max_bytes) */
  const lt_ckpt_load_opts *opts;
  int64_t version;             /* the file's format_version */
  names missing, unexpected;   /* across model and optimizer, for lt_ckpt_info */
} loader;

/* Turns "checkpoint: ..." from h5.c into "checkpoint '<path>': ...". */
static void name_file(const loader *L) {
  const char *m = lt_last_error();
  if (!strncmp(m, "checkpoint: ", 12)) lt__err(lt_last_status(), "checkpoint '%s': %s", L->path, m + 12);
}

/* Adds bytes to what the load allocates; refuses past opts->max_bytes. */
static lt_status charge(loader *L, uint64_t bytes, const char *what) {
  uint64_t total;
  if (__builtin_add_overflow(L->used, bytes, &total) ||
      (L->opts->max_bytes && total > L->opts->max_bytes))
    return lt__err(LT_ERR_NOMEM, "checkpoint '%s': %s needs %llu bytes, which with the %llu bytes before it is more "
                   "than the memory cap of %llu bytes (max_bytes): refused before allocating", L->path, what,
                   (unsigned long long)bytes, (unsigned long long)L->used, (unsigned long long)L->opts->max_bytes);
  L->used = total;
  return LT_OK;
}

/* For a destination that is not contiguous: buf wrapped as a tensor, made
 * before the commit so that the commit cannot fail. */
static lt_status prepare_strided(const loader *L, target *t) {
  if (!t->dst || t->dst->numel == 0 || lt_is_contiguous(t->dst)) return LT_OK;
  for (int d = 0; d < t->dst->ndim; d++)
    if (t->dst->stride[d] == 0 && t->dst->shape[d] > 1)
      return lt__err(LT_ERR_INVALID, "checkpoint '%s': '%s' is %s with a stride-0 (expanded) dim: it cannot be "
                     "loaded into", L->path, t->name, LT__D(t->dst));
  lt_tensor *w = lt_tensor_from_borrowed(t->dst->dtype, t->dst->ndim, t->dst->shape, t->buf);
  if (!w) return lt_last_status();
  t->src = lt_tensor_keep(w);
  return LT_OK;
}

/* Phases 1 and 2 for one group: walk it, match datasets to targets (strict:
 * every target present unless missing_ok, nothing unexpected), check every
 * dataset, then allocate and read into t->v[i].buf. */
static lt_status load_group(loader *L, const char *group, targets *T, bool missing_ok) {
  lt__h5_list list;
  lt_status s = lt__h5_walk(L->file, &L->raw, group, &list);
  if (s) return s;
  const char **want = malloc((size_t)(T->n ? T->n : 1) * sizeof *want);
  const char **found = malloc((size_t)(list.n ? list.n : 1) * sizeof *found);
  int *match = malloc((size_t)(list.n ? list.n : 1) * sizeof *match);
  bool *hit = malloc((size_t)(T->n ? T->n : 1) * sizeof *hit);
  names miss = {0}, unexp = {0};
  if (!want || !found || !match || !hit) {
    s = lt__err(LT_ERR_NOMEM, "checkpoint: out of memory");
    goto done;
  }
  for (int i = 0; i < T->n; i++) want[i] = T->v[i].name;
  for (int i = 0; i < list.n; i++) found[i] = list.v[i].name;
  if ((s = lt__ckpt_match(L->path, group, found, list.n, want, T->n, missing_ok, L->opts->non_strict, match, hit)))
    goto done;
  for (int i = 0; i < T->n && !s; i++) {
    T->v[i].found = hit[i];
    if (!hit[i] && !missing_ok) s = names_push(&miss, T->v[i].name);
  }
  for (int i = 0; i < list.n && !s; i++)
    if (match[i] < 0) s = names_push(&unexp, list.v[i].name);
  if (s) goto done;
  /* Phase 1: check every matched dataset before allocating anything. */
  for (int i = 0; i < list.n && !s; i++) {
    if (match[i] < 0) continue;
    target *t = &T->v[match[i]];
    hid_t d = H5Dopen2(L->file, list.v[i].path, H5P_DEFAULT);
    if (d < 0) {
      s = lt__h5_err(LT_ERR_FORMAT, "checkpoint '%s': cannot open dataset %s", L->path, list.v[i].path);
      break;
    }
    lt__h5_expect e = {.dtype = t->like->dtype, .ndim = t->like->ndim, .shape = t->like->shape,
                       .model_name = t->name};
    int nd;
    int64_t shape[LT_MAX_DIMS];
    s = lt__h5_check_dataset(d, list.v[i].path, &e, L->size, &nd, shape, &t->bytes);
    H5Dclose(d);
    if (s) name_file(L);
  }
  /* The memory cap, from the checked sizes, before anything is allocated. */
  for (int i = 0; i < list.n && !s; i++)
    if (match[i] >= 0) s = charge(L, T->v[match[i]].bytes, list.v[i].path);
  /* Phase 2: allocate, read, check values. */
  for (int i = 0; i < list.n && !s; i++) {
    if (match[i] < 0) continue;
    target *t = &T->v[match[i]];
    if (!(t->buf = malloc(t->bytes ? t->bytes : 1))) {
      s = lt__err(LT_ERR_NOMEM, "checkpoint '%s': out of memory for %zu bytes of %s", L->path, t->bytes,
                  list.v[i].path);
    }
    if (!s) s = prepare_strided(L, t);
  }
  for (int i = 0; i < list.n && !s; i++) {
    if (match[i] < 0) continue;
    target *t = &T->v[match[i]];
    if (t->like->numel == 0) continue;
    hid_t d = H5Dopen2(L->file, list.v[i].path, H5P_DEFAULT);
    if (d < 0) {
      s = lt__h5_err(LT_ERR_FORMAT, "checkpoint '%s': cannot open dataset %s", L->path, list.v[i].path);
      break;
    }
    s = lt__h5_read_dataset(d, list.v[i].path, t->like->dtype, t->buf);
    H5Dclose(d);
    if (!s && t->sname)
      s = lt__ckpt_check_optim_values(L->path, list.v[i].path, t->sname, t->like->dtype, t->buf, t->like->numel);
    else if (!s)
      s = lt__ckpt_check_values(L->path, list.v[i].path, t->like->dtype, t->buf, t->like->numel,
                                L->opts->allow_nonfinite);
  }
  /* For lt_ckpt_info: model tensors by name, optimizer states as "optim/<param>.<state>". */
  const char *pre = strcmp(group, "/model") ? "optim/" : "";
  for (int i = 0; i < miss.n && !s; i++) s = names_push2(&L->missing, pre, miss.v[i]);
  for (int i = 0; i < unexp.n && !s; i++) s = names_push2(&L->unexpected, pre, unexp.v[i]);
done:
  names_free(&miss);
  names_free(&unexp);
  free(want);
  free(found);
  free(match);
  free(hit);
  lt__h5_list_free(&list);
  return s;
}

/* Copies a target's scratch data into its tensor. Cannot fail: a strided
 * destination was checked and its source view made by prepare_strided. */
static void copy_into(const target *t) {
  lt_tensor *dst = t->dst;
  if (dst->numel == 0) return;
  if (!t->src) {
    memcpy(dst->data, t->buf, t->bytes);
    lt__bump_version(dst);
    return;
  }
  bool prev = lt_set_grad_enabled(false);
  lt_status s = lt_copy_(dst, t->src);
  lt_set_grad_enabled(prev);
  LT_CHECK(s == LT_OK); /* same shape and dtype, no overlap, grad mode off */
}

/* Opens path: a regular file (tensor/file.c), its integrity header, the
 * HDF5 superblock and the root group's object header (h5.c: checksummed
 * layout unless allow_unchecksummed), then HDF5 on that same descriptor,
 * then the root attributes and the top-level layout. */
static lt_status open_checked(loader *L, int64_t *version, char **libver, bool *training) {
  *libver = NULL;
  lt_status s = lt__ckpt_open_verified(L->path, &L->fd, &L->size);
  if (s) return s;
  if ((s = lt__h5_raw_init(&L->raw, L->fd, L->size, L->path, L->opts->allow_unchecksummed))) return s;
  /* HDF5 opens the descriptor that was verified, not the name (which a save
   * may rename a new file over, or someone replace by a FIFO, meanwhile);
   * without /proc the name, and then the identity check below. */
  char fdpath[64];
  snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", L->fd);
  const char *h5path = access(fdpath, R_OK) == 0 ? fdpath : L->path;
  hid_t fapl = lt__h5_fapl();
  L->file = fapl < 0 ? -1 : H5Fopen(h5path, H5F_ACC_RDONLY, fapl);
  if (L->file < 0) { /* the message first: any HDF5 call (H5Pclose) clears the error stack */
    s = lt__h5_err(LT_ERR_FORMAT, "checkpoint '%s': HDF5 cannot open it", L->path);
    if (fapl >= 0) H5Pclose(fapl);
    return s;
  }
  /* The file HDF5 opened must be the one verified. */
  void *handle = NULL;
  struct stat a, b;
  bool same = H5Fget_vfd_handle(L->file, fapl, &handle) >= 0 && handle && fstat(*(int *)handle, &a) == 0 &&
              fstat(L->fd, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino &&
              (uint64_t)a.st_size == L->size;
  H5Pclose(fapl);
  if (!same) {
    H5Eclear2(H5E_DEFAULT);
    return lt__err(LT_ERR_IO, "checkpoint '%s': the file was replaced while it was opened (try again)", L->path);
  }
  hsize_t ub = 0;
  hid_t fcpl = H5Fget_create_plist(L->file);
  if (fcpl < 0 || H5Pget_userblock(fcpl, &ub) < 0 || ub != LT__CKPT_UB) {
    if (fcpl >= 0) H5Pclose(fcpl);
    return lt__err(LT_ERR_FORMAT, "checkpoint '%s': the HDF5 user block is %llu bytes, not %d", L->path,
                   (unsigned long long)ub, LT__CKPT_UB);
  }
  H5Pclose(fcpl);
  hid_t root = H5Gopen2(L->file, "/", H5P_DEFAULT);
  if (root < 0) return lt__h5_err(LT_ERR_FORMAT, "checkpoint '%s': cannot open the root group", L->path);
  /* The root's attributes, judged by rules.c. */
  lt_ckpt_meta *attrs = lt_ckpt_meta_new();
  const char *lv = NULL;
  s = attrs ? lt__h5_read_meta(root, &L->raw, "/", attrs, NULL) : lt__err(LT_ERR_NOMEM, "checkpoint: out of memory");
  if (!s) s = lt__ckpt_check_root(L->path, attrs, version, &lv, training);
  if (!s && !(*libver = strdup(lv))) s = lt__err(LT_ERR_NOMEM, "checkpoint: out of memory");
  lt_ckpt_meta_free(attrs);
  /* Top level: only our groups, as hard links. */
  for (int i = 0; !s; i++) {
    char name[64];
    H5L_info_t li;
    ssize_t n = H5Lget_name_by_idx(root, ".", H5_INDEX_NAME, H5_ITER_INC, (hsize_t)i, name, sizeof name,
                                   H5P_DEFAULT);
    if (n < 0) {
      H5Eclear2(H5E_DEFAULT); /* past the last link */
      break;
    }
    if ((size_t)n >= sizeof name || !lt__ckpt_top_level_name(name)) {
      s = lt__err(LT_ERR_FORMAT, "checkpoint '%s': unexpected object /%.64s at the top level", L->path, name);
      break;
    }
    H5O_info_t oi;
    char obj[72];
    snprintf(obj, sizeof obj, "/%s", name);
    if (H5Lget_info(root, name, &li, H5P_DEFAULT) < 0 || li.type != H5L_TYPE_HARD) {
      H5Eclear2(H5E_DEFAULT);
      s = lt__err(LT_ERR_FORMAT, "checkpoint '%s': /%s is not reached by a hard link", L->path, name);
    } else if (!(s = lt__h5_check_ohdr(&L->raw, li.u.address, obj)) &&
               (H5Oget_info_by_name2(root, name, &oi, H5O_INFO_BASIC, H5P_DEFAULT) < 0 || oi.type != H5O_TYPE_GROUP)) {
      H5Eclear2(H5E_DEFAULT);
      s = lt__err(LT_ERR_FORMAT, "checkpoint '%s': /%s is not a group", L->path, name);
    }
    if (i > 16) break;
  }
  if (!s && H5Lexists(root, "model", H5P_DEFAULT) <= 0)
    s = lt__err(LT_ERR_FORMAT, "checkpoint '%s': no /model group", L->path);
  H5Gclose(root);
  if (s) {
    free(*libver);
    *libver = NULL;
  }
  return s;
}

/* An absent attribute (lt__h5_get_attr_* said which) is a format error. */
static lt_status absent_attr(const loader *L) {
  lt__err(LT_ERR_FORMAT, "%s", lt_last_error());
  name_file(L);
  return LT_ERR_FORMAT;
}

static void tensor_descs_free(lt_ckpt_tensor_desc *v, int n) {
  for (int i = 0; i < n; i++) free(v[i].name);
  free(v);
}

/* Every dataset under group checked as lt__h5_check_dataset checks (its own
 * type, any shape), its elements and bytes summed into *elems and *bytes,
 * and, with out not NULL, described into a new array *out of *n entries
 * (names relative to group, sorted; charged to the memory cap before they
 * are allocated); *n is the count. Nothing is read. Used by loads (lt_ckpt_info's model_*)
 * and lt_ckpt_describe. */
static lt_status describe_group(loader *L, const char *group, lt_ckpt_tensor_desc **out, int *n, uint64_t *elems,
                                uint64_t *bytes) {
  lt__h5_list list;
  lt_status s = lt__h5_walk(L->file, &L->raw, group, &list);
  if (s) return s;
  lt_ckpt_tensor_desc *v = NULL;
  *elems = *bytes = 0;
  if (out) {
    uint64_t need = (uint64_t)list.n * sizeof *v;
    for (int i = 0; i < list.n; i++) need += strlen(list.v[i].name) + 1;
    if (!(s = charge(L, need, "the description of its tensors")) &&
        !(v = calloc((size_t)(list.n ? list.n : 1), sizeof *v)))
      s = lt__err(LT_ERR_NOMEM, "checkpoint: out of memory");
  }
  for (int i = 0; i < list.n && !s; i++) {
    hid_t d = H5Dopen2(L->file, list.v[i].path, H5P_DEFAULT);
    hid_t t = d < 0 ? -1 : H5Dget_type(d);
    if (t < 0) {
      s = lt__h5_err(LT_ERR_FORMAT, "checkpoint '%s': cannot open dataset %s", L->path, list.v[i].path);
      if (d >= 0) H5Dclose(d);
      break;
    }
    lt__h5_expect e = {.dtype = LT_DTYPE_COUNT, .raw = LT__RAW_ANY, .ndim = -1};
    int nd;
    int64_t shape[LT_MAX_DIMS];
    size_t nb;
    s = lt__h5_check_dataset(d, list.v[i].path, &e, L->size, &nd, shape, &nb);
    lt_dtype dt = s ? LT_DTYPE_COUNT : lt__h5_dtype_of(t);
    H5Tclose(t);
    H5Dclose(d);
    if (s) {
      name_file(L);
      break;
    }
    uint64_t ne = 1;
    for (int k = 0; k < nd; k++) ne *= (uint64_t)shape[k]; /* checked by lt__h5_check_dataset */
    if (__builtin_add_overflow(*elems, ne, elems) || __builtin_add_overflow(*bytes, (uint64_t)nb, bytes) ||
        *elems > (uint64_t)INT64_MAX) {
      s = lt__err(LT_ERR_OVERFLOW, "checkpoint '%s': the datasets under %s hold more than 2^63 elements", L->path,
                  group);
      break;
    }
    if (v) {
      lt_ckpt_tensor_desc *o = &v[i];
      if (!(o->name = strdup(list.v[i].name))) {
        s = lt__err(LT_ERR_NOMEM, "checkpoint: out of memory");
        break;
      }
      o->dtype = dt;
      o->ndim = nd;
      memcpy(o->shape, shape, (size_t)nd * sizeof *shape);
      o->numel = (int64_t)ne;
      o->bytes = nb;
    }
  }
  if (!s && v) qsort(v, (size_t)list.n, sizeof *v, desc_by_name);
  if (!s) *n = list.n;
  if (!s && out) {
    *out = v;
    v = NULL;
  }
  tensor_descs_free(v, v ? list.n : 0);
  lt__h5_list_free(&list);
  return s;
}

/* lt_ckpt_info's model_*: every dataset under /model (the model's or not). */
static lt_status model_totals(loader *L, lt_ckpt_info *info) {
  uint64_t elems, bytes;
  int n;
  lt_status s = describe_group(L, "/model", NULL, &n, &elems, &bytes);
  if (s) return s;
  info->model_tensors = n;
  info->model_elements = (int64_t)elems;
  info->model_bytes = bytes;
  return LT_OK;
}

/* The attributes of the group at name under root into a new meta *attrs
 * (lt_ckpt_meta_free; NULL on failure), for rules.c. */
static lt_status read_group_attrs(const loader *L, hid_t root, const char *name, lt_ckpt_meta **attrs) {
  *attrs = NULL;
  hid_t g = H5Gopen2(root, name, H5P_DEFAULT);
  if (g < 0) return lt__h5_err(LT_ERR_FORMAT, "checkpoint '%s': cannot open /%s", L->path, name);
  char what[32];
  snprintf(what, sizeof what, "/%s", name);
  lt_ckpt_meta *m = lt_ckpt_meta_new();
  lt_status s = m ? lt__h5_read_meta(g, &L->raw, what, m, NULL) : lt__err(LT_ERR_NOMEM, "checkpoint: out of memory");
  H5Gclose(g);
  if (s) lt_ckpt_meta_free(m);
  else *attrs = m;
  return s;
}

/* The optimizer part of a training load: attributes checked, state read. */
typedef struct optim_stage {
  bool present;
  int64_t step;
  double lr;
  int ns;                 /* state tensors per parameter; targets are parameter-major */
  lt_tensor *step_like;   /* 0-d i64: what a "step" dataset must be (owned) */
  int n_with;             /* parameters with state in the file */
  const char **with;      /* their names (borrowed from the store) */
} optim_stage;

static lt_status load_optim(loader *L, hid_t root, const lt_train_state *st, targets *T, optim_stage *os) {
  const lt_optim_config *c = st->optim_config;
  htri_t ex = H5Lexists(root, "optim", H5P_DEFAULT);
  if (ex <= 0) {
    if (L->opts->non_strict) return LT_OK;
    return lt__err(LT_ERR_INVALID, "checkpoint '%s': no optimizer state (/optim) in the file (strict load)", L->path);
  }
  os->present = true;
  lt_ckpt_meta *attrs;
  lt_status s = read_group_attrs(L, root, "optim", &attrs);
  if (!s) s = lt__ckpt_check_optim(L->path, attrs, c, L->opts->allow_hparam_change, &os->step, &os->lr);
  lt_ckpt_meta_free(attrs);
  if (s) return s;
  /* Targets: every applicable state of every parameter, shaped like it
   * ("step" like a 0-d i64). */
  const char *sn[MAX_STATES];
  int ns = os->ns = optim_state_names(c, sn);
  if (ns == MAX_STATES && !(os->step_like = lt_tensor_keep(lt_scalar(LT_DTYPE_I64, 0)))) return lt_last_status();
  int np = 0;
  for (int i = 0; i < lt_params_count(st->params) && !s; i++) {
    const lt_param *q = lt_params_at(st->params, i);
    if (q->flags & LT_PARAM_BUFFER) continue;
    np++;
    for (int k = 0; k < ns && !s; k++) {
      char full[LT__CKPT_MAX_PATH];
      snprintf(full, sizeof full, "%s.%s", q->name, sn[k]);
      s = targets_push(T, full, k == 2 ? os->step_like : q->value, NULL, q->name, sn[k]);
    }
  }
  if (s) return s;
  /* States are created lazily, so a file may lack some: never "missing". */
  if ((s = load_group(L, "/optim", T, true))) return s;
  /* A parameter has all its states or none (version 1 files have no "step",
   * which the commit sets to the optimizer's step count). */
  if (!(os->with = malloc(sizeof(char *) * (size_t)(np ? np : 1))))
    return lt__err(LT_ERR_NOMEM, "checkpoint: out of memory");
  for (int i = 0; i + ns <= T->n; i += ns) {
    bool found[MAX_STATES], any;
    for (int k = 0; k < ns; k++) found[k] = T->v[i + k].found;
    if ((s = lt__ckpt_check_optim_sets(L->path, L->version, os->step, ns, sn, T->v[i].pname, found, &any))) return s;
    if (!any) continue;
    os->with[os->n_with++] = T->v[i].pname;
  }
  return LT_OK;
}

static lt_status load_schedule(loader *L, hid_t root, lt_schedule *sc, int64_t *step, bool *have_sched) {
  *have_sched = false;
  if (H5Lexists(root, "schedule", H5P_DEFAULT) <= 0)
    return lt__err(LT_ERR_FORMAT, "checkpoint '%s': no /schedule group in a training checkpoint", L->path);
  lt_ckpt_meta *attrs;
  lt_status s = read_group_attrs(L, root, "schedule", &attrs);
  if (!s) s = lt__ckpt_check_schedule(L->path, attrs, sc, step, have_sched);
  lt_ckpt_meta_free(attrs);
  if (!s) {
    lt__h5_list list;
    s = lt__h5_walk(L->file, &L->raw, "/schedule", &list);
    if (!s) {
      if (list.n) s = lt__err(LT_ERR_FORMAT, "checkpoint '%s': unexpected dataset %s", L->path, list.v[0].path);
      lt__h5_list_free(&list);
    }
  }
  return s;
}

static lt_status load_rng(loader *L, hid_t root, const lt_train_state *st, lt_generator_state *gs, bool *found_gen) {
  if (H5Lexists(root, "rng", H5P_DEFAULT) <= 0)
    return lt__err(LT_ERR_FORMAT, "checkpoint '%s': no /rng group in a training checkpoint", L->path);
  lt__h5_list list;
  lt_status s = lt__h5_walk(L->file, &L->raw, "/rng", &list);
  if (s) return s;
  names miss = {0}, unexp = {0};
  const char **found = malloc((size_t)(list.n ? list.n : 1) * sizeof *found);
  int *match = malloc((size_t)(list.n ? list.n : 1) * sizeof *match);
  bool *hit = malloc((size_t)(st->n_generators ? st->n_generators : 1) * sizeof *hit);
  if (!found || !match || !hit) s = lt__err(LT_ERR_NOMEM, "checkpoint: out of memory");
  for (int i = 0; i < list.n && !s; i++) found[i] = list.v[i].name;
  /* Names first (non-strict: the datasets are checked before a strict mismatch is reported) */
  if (!s) s = lt__ckpt_match(L->path, "/rng", found, list.n, (const char *const *)st->generator_names,
                             st->n_generators, false, true, match, hit);
  for (int i = 0; i < list.n && !s; i++) {
    int k = match[i];
    if (k < 0) {
      s = names_push(&unexp, list.v[i].name);
      continue;
    }
    hid_t d = H5Dopen2(L->file, list.v[i].path, H5P_DEFAULT);
    if (d < 0) {
      s = lt__h5_err(LT_ERR_FORMAT, "checkpoint '%s': cannot open %s", L->path, list.v[i].path);
      break;
    }
    static const int64_t two[1] = {2};
    lt__h5_expect e = {.dtype = LT_DTYPE_COUNT, .raw = LT__RAW_U64, .ndim = 1, .shape = two};
    int nd;
    int64_t shape[LT_MAX_DIMS];
    size_t bytes;
    uint64_t v[2];
    s = lt__h5_check_dataset(d, list.v[i].path, &e, L->size, &nd, shape, &bytes);
    if (s) name_file(L);
    if (!s && H5Dread(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0)
      s = lt__h5_err(LT_ERR_FORMAT, "checkpoint '%s': reading %s", L->path, list.v[i].path);
    H5Dclose(d);
    if (!s) {
      gs[k] = (lt_generator_state){v[0], v[1]};
      found_gen[k] = true;
    }
  }
  for (int j = 0; j < st->n_generators && !s; j++)
    if (!found_gen[j]) s = names_push(&miss, st->generator_names[j]);
  if (!s && !L->opts->non_strict)
    s = lt__ckpt_match(L->path, "/rng", found, list.n, (const char *const *)st->generator_names, st->n_generators,
                       false, false, match, hit);
  free(found);
  free(match);
  free(hit);
  for (int i = 0; i < miss.n && !s; i++) s = names_push2(&L->missing, "rng/", miss.v[i]);
  for (int i = 0; i < unexp.n && !s; i++) s = names_push2(&L->unexpected, "rng/", unexp.v[i]);
  names_free(&miss);
  names_free(&unexp);
  lt__h5_list_free(&list);
  return s;
}

/* Opens the root group into *root (the caller closes it, also on failure
 * when it is >= 0) and reads /model's attributes, the configuration, into
 * config. */
static lt_status read_config(loader *L, hid_t *root, lt_ckpt_meta *config) {
  *root = H5Gopen2(L->file, "/", H5P_DEFAULT);
  hid_t g = *root < 0 ? -1 : H5Gopen2(*root, "model", H5P_DEFAULT);
  if (g < 0) return lt__h5_err(LT_ERR_FORMAT, "checkpoint '%s': cannot open /model", L->path);
  lt_status s = lt__h5_read_meta(g, &L->raw, "/model", config, NULL);
  H5Gclose(g);
  if (s) name_file(L);
  return s;
}

static lt_status load_common(const char *op, const char *path, lt_params *p, lt_train_state *st,
                             const lt_ckpt_load_opts *opts, lt_ckpt_info **info_out) {
  if (info_out) *info_out = NULL;
  if (!path) return lt__err_null(op, "path");
  if (!p) return lt__err_null(op, "params");
  lt_ckpt_load_opts def = LT_CKPT_LOAD_DEFAULTS;
  if (!opts) opts = &def;

  lt__h5_guard guard;
  lt__h5_enter(&guard);
  loader L = {.path = path, .file = -1, .fd = -1, .opts = opts};
  targets TM = {0}, TO = {0};
  optim_stage os = {0};
  lt_schedule sched = {0};
  int64_t step = 0;
  bool have_sched = false, training = false;
  int ng = st ? st->n_generators : 0;
  lt_generator_state *gs = calloc((size_t)(ng ? ng : 1), sizeof *gs);
  bool *gfound = calloc((size_t)(ng ? ng : 1), sizeof *gfound);
  lt_ckpt_info *info = calloc(1, sizeof *info);
  hid_t root = -1, g = -1;
  lt_status s = LT_OK;
  if (!gs || !gfound || !info || !(info->config = lt_ckpt_meta_new()) || !(info->extra = lt_ckpt_meta_new())) {
    s = lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
    goto done;
  }
  /* Phase 1 and 2: verify, open, check, read into scratch. */
  if ((s = open_checked(&L, &info->format_version, &info->library_version, &training))) goto done;
  L.version = info->format_version;
  info->training = training;
  if (st && !training) {
    s = lt__err(LT_ERR_INVALID, "checkpoint '%s': its root attribute 'content' is 'model': a model checkpoint without "
                "training state (lt_ckpt_load_params loads it)", path);
    goto done;
  }
  if ((s = read_config(&L, &root, info->config))) goto done;
  if (opts->expect_config && (s = lt__ckpt_check_config(path, info->config, opts->expect_config))) goto done;
  for (int i = 0; i < lt_params_count(p) && !s; i++) {
    const lt_param *q = lt_params_at(p, i);
    s = targets_push(&TM, q->name, q->value, q->value, NULL, NULL);
  }
  if (s || (s = load_group(&L, "/model", &TM, false))) goto done;
  if ((s = model_totals(&L, info))) goto done;
  if (st) {
    if (st->optim && (s = load_optim(&L, root, st, &TO, &os))) goto done;
    if ((s = load_schedule(&L, root, &sched, &step, &have_sched))) goto done;
    if ((s = load_rng(&L, root, st, gs, gfound))) goto done;
    if (H5Lexists(root, "extra", H5P_DEFAULT) > 0) {
      g = H5Gopen2(root, "extra", H5P_DEFAULT);
      if (g < 0) {
        s = lt__h5_err(LT_ERR_FORMAT, "checkpoint '%s': cannot open /extra", path);
        goto done;
      }
      /* Blobs are charged to the memory cap as they are read. */
      uint64_t left = !opts->max_bytes ? UINT64_MAX : opts->max_bytes > L.used ? opts->max_bytes - L.used : 0;
      uint64_t before = left;
      s = lt__h5_read_meta(g, &L.raw, "/extra", info->extra, &left);
      L.used += before - left;
      H5Gclose(g);
      g = -1;
      if (s) {
        name_file(&L);
        goto done;
      }
    }
  }
  /* Hand the name lists over to info (no allocation after this point but
   * the optimizer's own). */
  info->n_missing = L.missing.n;
  info->missing = L.missing.v;
  info->n_unexpected = L.unexpected.n;
  info->unexpected = L.unexpected.v;
  L.missing = (names){0};
  L.unexpected = (names){0};

  /* Phase 3: commit. The optimizer first: it allocates the state of the
   * parameters that have some in the file, atomically. */
  if (st && st->optim && os.present) {
    if ((s = lt_optimizer_reset_state(st->optim, os.step, os.n_with, os.with))) goto done;
    for (int i = 0; i < TO.n; i++) {
      if (!TO.v[i].found) {
        /* Version 1: no per-parameter step; each parameter with state gets the step count. */
        lt_tensor *t = os.ns == MAX_STATES && i % os.ns == 2 && TO.v[i - 2].found
                           ? lt_optimizer_state(st->optim, TO.v[i].pname, "step") : NULL;
        if (t && t->dtype == LT_DTYPE_I64) *(int64_t *)t->data = os.step;
        continue;
      }
      TO.v[i].dst = lt_optimizer_state(st->optim, TO.v[i].pname, TO.v[i].sname);
      if (!TO.v[i].dst || TO.v[i].dst->dtype != TO.v[i].like->dtype || TO.v[i].dst->numel != TO.v[i].like->numel) {
        s = lt__err(LT_ERR_INVALID, "%s '%s': the optimizer has no '%s' state for '%s' after restoring its step: "
                    "st->optim_config does not describe st->optim", op, path, TO.v[i].sname, TO.v[i].pname);
        goto done;
      }
      if ((s = prepare_strided(&L, &TO.v[i]))) goto done;
    }
  }
  for (int i = 0; i < TM.n; i++)
    if (TM.v[i].found) copy_into(&TM.v[i]);
  if (st) {
    for (int i = 0; i < TO.n; i++)
      if (TO.v[i].found) copy_into(&TO.v[i]);
    if (st->optim && os.present) lt_optimizer_set_lr(st->optim, os.lr);
    for (int i = 0; i < ng; i++)
      if (gfound[i]) lt_generator_set_state(st->generators[i], gs[i]);
    if (have_sched && st->schedule) *st->schedule = sched;
    st->step = step;
  }
  if (info_out) {
    *info_out = info;
    info = NULL;
  }
done:
  if (g >= 0) H5Gclose(g);
  if (root >= 0) H5Gclose(root);
  if (L.file >= 0) H5Fclose(L.file);
  if (L.fd >= 0) close(L.fd);
  names_free(&L.missing);
  names_free(&L.unexpected);
  targets_free(&TM);
  targets_free(&TO);
  lt_tensor_free(os.step_like);
  free(os.with);
  free(gs);
  free(gfound);
  lt_ckpt_info_free(info);
  lt__h5_leave(&guard);
  return s;
}

lt_status lt_ckpt_load_params(const char *path, lt_params *p, const lt_ckpt_load_opts *opts, lt_ckpt_info **info) {
  return load_common("ckpt_load_params", path, p, NULL, opts, info);
}

lt_status lt_ckpt_load_training(const char *path, lt_train_state *st, const lt_ckpt_load_opts *opts,
                                lt_ckpt_info **info) {
  if (info) *info = NULL;
  lt_status s = lt__ckpt_check_train_state("ckpt_load_training", st);
  if (s) return s;
  return load_common("ckpt_load_training", path, st->params, st, opts, info);
}

/* ---- describing a checkpoint ------------------------------------------- */

void lt_ckpt_desc_free(lt_ckpt_desc *d) {
  if (!d) return;
  free(d->library_version);
  lt_ckpt_meta_free(d->config);
  tensor_descs_free(d->tensors, d->n_tensors);
  free(d->optim_kind);
  tensor_descs_free(d->optim, d->n_optim);
  free(d);
}

/* The loader's phase 1 without a model: open_checked, the configuration as
 * load_common reads it, then describe_group for /model and /optim. */
lt_status lt_ckpt_describe(const char *path, const lt_ckpt_load_opts *opts, lt_ckpt_desc **out) {
  const char *op = "ckpt_describe";
  if (out) *out = NULL;
  if (!out) return lt__err_null(op, "desc");
  if (!path) return lt__err_null(op, "path");
  lt_ckpt_load_opts def = LT_CKPT_LOAD_DEFAULTS;
  if (!opts) opts = &def;

  lt__h5_guard guard;
  lt__h5_enter(&guard);
  loader L = {.path = path, .file = -1, .fd = -1, .opts = opts};
  hid_t root = -1, g = -1;
  uint64_t elems, bytes;
  lt_status s = LT_OK;
  lt_ckpt_desc *d = calloc(1, sizeof *d);
  if (!d || !(d->config = lt_ckpt_meta_new())) {
    s = lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
    goto done;
  }
  if ((s = open_checked(&L, &d->format_version, &d->library_version, &d->training))) goto done;
  L.version = d->format_version;
  if ((s = read_config(&L, &root, d->config))) goto done;
  if ((s = describe_group(&L, "/model", &d->tensors, &d->n_tensors, &elems, &bytes))) goto done;
  d->model_elements = (int64_t)elems;
  d->model_bytes = bytes;
  if (d->training && H5Lexists(root, "optim", H5P_DEFAULT) > 0) {
    /* open_checked made sure /optim is a group reached by a hard link, its header checked. */
    lt_ckpt_meta *attrs;
    const char *kind = NULL;
    s = read_group_attrs(&L, root, "optim", &attrs);
    if (!s) s = lt__ckpt_attr_string(attrs, "/optim", "kind", &kind);
    if (!s && !(d->optim_kind = strdup(kind))) s = lt__err(LT_ERR_NOMEM, "checkpoint: out of memory");
    if (!s) s = lt__ckpt_check_optim_step(path, attrs, &d->optim_step);
    lt_ckpt_meta_free(attrs);
    if (s == LT_ERR_INDEX) s = absent_attr(&L);
    if (s) goto done;
    if ((s = describe_group(&L, "/optim", &d->optim, &d->n_optim, &elems, &bytes))) goto done;
  }
  *out = d;
  d = NULL;
done:
  if (g >= 0) H5Gclose(g);
  if (root >= 0) H5Gclose(root);
  if (L.file >= 0) H5Fclose(L.file);
  if (L.fd >= 0) close(L.fd);
  lt_ckpt_desc_free(d);
  lt__h5_leave(&guard);
  return s;
}
