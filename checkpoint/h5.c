/*
 * checkpoint/h5.c: the HDF5 plumbing of checkpoints.
 *
 * - A guard around every public call: HDF5's automatic error printing and its
 *   filter-plugin loading are switched off, then restored.
 * - HDF5's error stack turned into our error message (lt__h5_err).
 * - The in-memory file a save builds (core driver + file-image callbacks
 *   that hand the buffer over at close), so that HDF5 never writes a file.
 * - Typed scalar attributes (int64, double, fixed-length UTF-8 strings),
 *   written and read back, and tensor datasets written (contiguous, or
 *   chunked + deflate where it pays).
 *
 * What this is not: the checked reader of a file's tree and datasets
 * (h5_check.c), the checkpoint layout (checkpoint.c decides which group
 * holds what) or the integrity header (seal.c).
 */
#include "checkpoint/internal.h"
#include "tensor/error_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* ---- guard and errors -------------------------------------------------- */

void lt__h5_enter(lt__h5_guard *g) {
  *g = (lt__h5_guard){0};
  if (H5Eget_auto2(H5E_DEFAULT, &g->old_func, &g->old_data) >= 0) g->have_auto = true;
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  if (H5PLget_loading_state(&g->old_plugins) >= 0) g->have_plugins = true;
  H5PLset_loading_state(0);
  H5Eclear2(H5E_DEFAULT);
}

void lt__h5_leave(lt__h5_guard *g) {
  H5Eclear2(H5E_DEFAULT);
  if (g->have_plugins) H5PLset_loading_state(g->old_plugins);
  if (g->have_auto) H5Eset_auto2(H5E_DEFAULT, g->old_func, g->old_data);
}

typedef struct stack_text {
  char buf[512];
  size_t len;
  int count;
} stack_text;

/* Innermost entries first: where the failure started is the useful part. */
static herr_t stack_cb(unsigned n, const H5E_error2_t *e, void *data) {
  stack_text *t = data;
  if (t->count >= 3 || t->len + 1 >= sizeof t->buf) return 0;
  char minor[96] = "";
  if (H5Eget_msg(e->min_num, NULL, minor, sizeof minor) < 0) minor[0] = '\0';
  int k = snprintf(t->buf + t->len, sizeof t->buf - t->len, "%s%s(): %s%s%s%s", t->count ? "; " : "",
                   e->func_name ? e->func_name : "?", e->desc ? e->desc : "", minor[0] ? " (" : "", minor,
                   minor[0] ? ")" : "");
  if (k > 0) t->len += (size_t)k < sizeof t->buf - t->len ? (size_t)k : sizeof t->buf - t->len - 1;
  t->count++;
  return 0;
}

/* ": HDF5: <innermost entries>" into buf (or ""), the stack cleared: the tail lt__h5_err appends. */
void lt__h5_stack_tail(char *buf, size_t size) {
  stack_text t = {.len = 0};
  t.buf[0] = '\0';
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, stack_cb, &t);
  H5Eclear2(H5E_DEFAULT);
  if (t.count) snprintf(buf, size, ": HDF5: %s", t.buf);
  else buf[0] = '\0';
}

lt_status lt__h5_err(lt_status s, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  stack_text t = {.len = 0};
  t.buf[0] = '\0';
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, stack_cb, &t);
  H5Eclear2(H5E_DEFAULT);
  if (t.count) return lt__err(s, "%s: HDF5: %s", msg, t.buf);
  return lt__err(s, "%s", msg);
}

/* ---- types ------------------------------------------------------------- */

static hid_t bool_enum(hid_t base) {
  hid_t t = H5Tenum_create(base);
  if (t < 0) return t;
  signed char f = 0, v = 1;
  if (H5Tenum_insert(t, "FALSE", &f) < 0 || H5Tenum_insert(t, "TRUE", &v) < 0) {
    H5Tclose(t);
    return -1;
  }
  return t;
}

hid_t lt__h5_file_type(lt_dtype d) {
  switch (d) {
    case LT_DTYPE_F32: return H5Tcopy(H5T_IEEE_F32LE);
    case LT_DTYPE_F64: return H5Tcopy(H5T_IEEE_F64LE);
    case LT_DTYPE_I32: return H5Tcopy(H5T_STD_I32LE);
    case LT_DTYPE_I64: return H5Tcopy(H5T_STD_I64LE);
    case LT_DTYPE_BOOL: return bool_enum(H5T_STD_I8LE);
    default: return -1;
  }
}

hid_t lt__h5_mem_type(lt_dtype d) {
  switch (d) {
    case LT_DTYPE_F32: return H5Tcopy(H5T_NATIVE_FLOAT);
    case LT_DTYPE_F64: return H5Tcopy(H5T_NATIVE_DOUBLE);
    case LT_DTYPE_I32: return H5Tcopy(H5T_NATIVE_INT32);
    case LT_DTYPE_I64: return H5Tcopy(H5T_NATIVE_INT64);
    case LT_DTYPE_BOOL: return bool_enum(H5T_NATIVE_SCHAR);
    default: return -1;
  }
}

lt_dtype lt__h5_dtype_of(hid_t type) {
  for (int d = 0; d < LT_DTYPE_COUNT; d++) {
    hid_t t = lt__h5_file_type((lt_dtype)d);
    bool same = t >= 0 && H5Tequal(type, t) > 0;
    if (t >= 0) H5Tclose(t);
    if (same) return (lt_dtype)d;
  }
  return LT_DTYPE_COUNT;
}

char *lt__h5_type_desc(hid_t type, char *buf, size_t size) {
  lt_dtype dt = lt__h5_dtype_of(type);
  const char *name = dt == LT_DTYPE_COUNT ? NULL : lt_dtype_name(dt);
  H5T_class_t cls = H5Tget_class(type);
  size_t bytes = H5Tget_size(type);
  H5T_order_t order = H5Tget_order(type);
  const char *ord = order == H5T_ORDER_LE ? ", little-endian" : order == H5T_ORDER_BE ? ", big-endian" : "";
  const char *what;
  switch (cls) {
    case H5T_INTEGER: what = H5Tget_sign(type) == H5T_SGN_NONE ? "unsigned integer" : "signed integer"; break;
    case H5T_FLOAT: what = "float"; break;
    case H5T_STRING: what = "string"; break;
    case H5T_ENUM: what = "enum"; break;
    case H5T_COMPOUND: what = "compound"; break;
    case H5T_ARRAY: what = "array"; break;
    case H5T_VLEN: what = "variable-length"; break;
    case H5T_OPAQUE: what = "opaque"; break;
    case H5T_REFERENCE: what = "reference"; break;
    case H5T_BITFIELD: what = "bitfield"; break;
    case H5T_TIME: what = "time"; break;
    default: what = "unknown type"; break;
  }
  if (name)
    snprintf(buf, size, "%s (%s, %zu bytes%s)", name, what, bytes, ord);
  else
    snprintf(buf, size, "%s, %zu bytes%s", what, bytes, ord);
  return buf;
}

/* ---- property lists ---------------------------------------------------- */

hid_t lt__h5_fapl(void) {
  hid_t p = H5Pcreate(H5P_FILE_ACCESS);
  if (p < 0) return p;
  /* Our own flock on the temporary and the rename make HDF5's locking
   * unnecessary, and it fails on some file systems. Strong close: closing the
   * file closes every object still open in it. */
  if (H5Pset_fapl_sec2(p) < 0 || H5Pset_file_locking(p, false, true) < 0 ||
      H5Pset_fclose_degree(p, H5F_CLOSE_STRONG) < 0) {
    H5Pclose(p);
    return -1;
  }
  return p;
}

/* File image callbacks: the core driver's buffer grows geometrically (the
 * driver asks for every increment) and is kept, not freed, at close. */
static void *img_malloc(size_t n, H5FD_file_image_op_t op, void *u) {
  lt__h5_image *g = u;
  size_t cap = n > g->hint ? n : g->hint;
  unsigned char *p = malloc(cap ? cap : 1);
  if (!p) return NULL;
  free(g->buf); /* never: HDF5 holds one buffer at a time */
  g->buf = p;
  g->cap = cap;
  g->size = n;
  return p;
}

static void *img_memcpy(void *dst, const void *src, size_t n, H5FD_file_image_op_t op, void *u) {
  return memcpy(dst, src, n);
}

static void *img_realloc(void *ptr, size_t n, H5FD_file_image_op_t op, void *u) {
  lt__h5_image *g = u;
  if (!ptr) return img_malloc(n, op, u);
  if (n > g->cap) {
    size_t cap = g->cap + g->cap / 2;
    if (cap < n) cap = n;
    unsigned char *p = realloc(ptr, cap);
    if (!p) return NULL;
    g->buf = p;
    g->cap = cap;
  }
  g->size = n;
  return g->buf;
}

static herr_t img_free(void *ptr, H5FD_file_image_op_t op, void *u) {
  lt__h5_image *g = u;
  if (op == H5FD_FILE_IMAGE_OP_FILE_CLOSE && ptr == g->buf) {
    free(g->final);
    g->final = ptr;
    g->final_size = g->size;
  } else {
    free(ptr);
  }
  if (ptr == g->buf) g->buf = NULL;
  return 0;
}

static void *img_udata_copy(void *u) { return u; } /* shared by every copy of the fapl */
static herr_t img_udata_free(void *u) { return 0; }

hid_t lt__h5_fapl_image(lt__h5_image *img) {
  hid_t p = H5Pcreate(H5P_FILE_ACCESS);
  if (p < 0) return p;
  H5FD_file_image_callbacks_t cb = {img_malloc, img_memcpy, img_realloc, img_free,
                                    img_udata_copy, img_udata_free, img};
  if (H5Pset_fapl_core(p, 1 << 16, false) < 0 || H5Pset_file_image_callbacks(p, &cb) < 0 ||
      H5Pset_fclose_degree(p, H5F_CLOSE_STRONG) < 0 ||
      H5Pset_libver_bounds(p, H5F_LIBVER_V18, H5F_LIBVER_V18) < 0) {
    H5Pclose(p);
    return -1;
  }
  return p;
}

size_t lt__h5_image_length(const lt__h5_image *img) {
  /* Version 2 superblock at the user block's end: signature, version,
   * offset and length sizes, flags, then base, extension and EOF addresses. */
  const unsigned char *sb = img->final + LT__CKPT_UB;
  if (!img->final || img->final_size < LT__CKPT_UB + 48 || sb[8] != 2 || sb[9] != 8) return img->final_size;
  uint64_t base = 0, eof = 0;
  for (int i = 7; i >= 0; i--) {
    base = (base << 8) | sb[12 + i];
    eof = (eof << 8) | sb[28 + i];
  }
  uint64_t end = base + eof;
  if (end < LT__CKPT_UB + 48 || end > img->final_size) return img->final_size;
  return (size_t)end;
}

hid_t lt__h5_gcpl(void) {
  hid_t p = H5Pcreate(H5P_GROUP_CREATE);
  if (p < 0) return p;
  if (H5Pset_link_creation_order(p, H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED) < 0) {
    H5Pclose(p);
    return -1;
  }
  return p;
}

/* ---- attributes -------------------------------------------------------- */

static lt_status attr_write(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *buf) {
  lt_status s = LT_OK;
  hid_t sp = H5Screate(H5S_SCALAR), a = -1;
  if (sp < 0) return lt__h5_err(LT_ERR_IO, "writing attribute '%s'", name);
  if (H5Aexists(obj, name) > 0 && H5Adelete(obj, name) < 0) s = lt__h5_err(LT_ERR_IO, "replacing attribute '%s'", name);
  if (!s) a = H5Acreate2(obj, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT);
  if (!s && (a < 0 || H5Awrite(a, mtype, buf) < 0)) s = lt__h5_err(LT_ERR_IO, "writing attribute '%s'", name);
  if (a >= 0) H5Aclose(a);
  H5Sclose(sp);
  return s;
}

lt_status lt__h5_attr_int(hid_t obj, const char *name, int64_t v) {
  return attr_write(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v);
}

lt_status lt__h5_attr_double(hid_t obj, const char *name, double v) {
  return attr_write(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v);
}

lt_status lt__h5_attr_string(hid_t obj, const char *name, const char *v) {
  size_t n = strlen(v);
  if (n > LT__CKPT_MAX_STRING)
    return lt__err(LT_ERR_INVALID, "checkpoint: string attribute '%s' has %zu bytes (at most %d)", name, n,
                   LT__CKPT_MAX_STRING);
  hid_t t = H5Tcopy(H5T_C_S1);
  if (t < 0 || H5Tset_size(t, n ? n : 1) < 0 || H5Tset_strpad(t, H5T_STR_NULLPAD) < 0 ||
      H5Tset_cset(t, H5T_CSET_UTF8) < 0) {
    if (t >= 0) H5Tclose(t);
    return lt__h5_err(LT_ERR_IO, "writing attribute '%s'", name);
  }
  lt_status s = attr_write(obj, name, t, t, n ? v : "");
  H5Tclose(t);
  return s;
}

static lt_status write_blob(hid_t obj, const char *name, const void *data, size_t size, const char *what) {
  hsize_t dims[1] = {size};
  hid_t sp = H5Screate_simple(1, dims, NULL), d = -1;
  lt_status s = LT_OK;
  if (sp >= 0) d = H5Dcreate2(obj, name, H5T_STD_U8LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (d < 0 || (size && H5Dwrite(d, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0))
    s = lt__h5_err(LT_ERR_IO, "checkpoint: writing %s blob '%s' (%zu bytes)", what, name, size);
  if (d >= 0) H5Dclose(d);
  if (sp >= 0) H5Sclose(sp);
  return s;
}

lt_status lt__h5_write_meta(hid_t obj, const lt_ckpt_meta *m, bool allow_bytes, const char *what) {
  const char *key;
  lt__meta_val v;
  for (int i = 0; lt__ckpt_meta_at(m, i, &key, &v); i++) {
    lt_status s = LT_OK;
    switch (v.kind) {
      case LT_CKPT_INT: s = lt__h5_attr_int(obj, key, v.i); break;
      case LT_CKPT_DOUBLE: s = lt__h5_attr_double(obj, key, v.d); break;
      case LT_CKPT_STRING: s = lt__h5_attr_string(obj, key, v.s); break;
      case LT_CKPT_BYTES:
        if (!allow_bytes)
          return lt__err(LT_ERR_INVALID, "checkpoint: %s value '%s' is a byte blob: only int, double and string "
                         "are allowed there", what, key);
        s = write_blob(obj, key, v.bytes, v.size, what);
        break;
    }
    if (s) return s;
  }
  return LT_OK;
}

/* True for an enum type with exactly the members FALSE = 0 and TRUE = 1 on a
 * 1-byte integer: h5py's (and our datasets') bool. */
static bool is_bool_enum(hid_t t) {
  if (H5Tget_nmembers(t) != 2 || H5Tget_size(t) != 1) return false;
  hid_t b = H5Tget_super(t);
  bool ok = b >= 0 && H5Tget_class(b) == H5T_INTEGER;
  if (b >= 0) H5Tclose(b);
  for (unsigned i = 0; ok && i < 2; i++) {
    signed char v = -1;
    char *n = H5Tget_member_name(t, i);
    ok = n && H5Tget_member_value(t, i, &v) >= 0 && v == (signed char)i && !strcmp(n, i ? "TRUE" : "FALSE");
    if (n) H5free_memory(n);
  }
  return ok;
}

/* Reads one attribute as an int, double or string (owned is the string); a
 * bool (h5py's enum) is read as the int 0 or 1. */
static lt_status read_attr(hid_t obj, const char *what, const char *name, lt__meta_val *v, char **owned) {
  *owned = NULL;
  lt_status s = LT_OK;
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT), t = -1, sp = -1;
  if (a < 0) return lt__h5_err(LT_ERR_FORMAT, "checkpoint: cannot open attribute '%s' of %s", name, what);
  t = H5Aget_type(a);
  sp = H5Aget_space(a);
  if (t < 0 || sp < 0) {
    s = lt__h5_err(LT_ERR_FORMAT, "checkpoint: attribute '%s' of %s is unreadable", name, what);
    goto done;
  }
  H5S_class_t sc = H5Sget_simple_extent_type(sp);
  if (!(sc == H5S_SCALAR || (sc == H5S_SIMPLE && H5Sget_simple_extent_npoints(sp) == 1))) {
    s = lt__err(LT_ERR_FORMAT, "checkpoint: attribute '%s' of %s is not a single value", name, what);
    goto done;
  }
  H5T_class_t cls = H5Tget_class(t);
  size_t size = H5Tget_size(t);
  char tdesc[96];
  if (cls == H5T_INTEGER && size <= 8 && (H5Tget_sign(t) != H5T_SGN_NONE || size < 8)) {
    v->kind = LT_CKPT_INT;
    if (H5Aread(a, H5T_NATIVE_INT64, &v->i) < 0) s = lt__h5_err(LT_ERR_FORMAT, "checkpoint: reading '%s' of %s", name, what);
  } else if (cls == H5T_ENUM && is_bool_enum(t)) {
    /* h5py's bool (numpy.bool_): an enum of int8 with FALSE = 0 and TRUE = 1, read as the int 0 or 1 */
    signed char b = 0; /* the raw byte (no enum conversion, which would map other bytes silently) */
    v->kind = LT_CKPT_INT;
    if (H5Aread(a, t, &b) < 0) s = lt__h5_err(LT_ERR_FORMAT, "checkpoint: reading '%s' of %s", name, what);
    else if (b != 0 && b != 1)
      s = lt__err(LT_ERR_FORMAT, "checkpoint: bool attribute '%s' of %s holds %d, not 0 or 1", name, what, (int)b);
    v->i = b;
  } else if (cls == H5T_FLOAT && (size == 4 || size == 8)) {
    v->kind = LT_CKPT_DOUBLE;
    if (H5Aread(a, H5T_NATIVE_DOUBLE, &v->d) < 0) s = lt__h5_err(LT_ERR_FORMAT, "checkpoint: reading '%s' of %s", name, what);
  } else if (cls == H5T_STRING) {
    v->kind = LT_CKPT_STRING;
    htri_t var = H5Tis_variable_str(t);
    hid_t mt = H5Tcopy(H5T_C_S1);
    H5T_cset_t cset = H5Tget_cset(t);
    if (mt >= 0 && cset >= 0 && H5Tset_cset(mt, cset) < 0) {
      H5Tclose(mt);
      mt = -1;
    }
    if (var > 0) {
      char *p = NULL;
      if (mt < 0 || H5Tset_size(mt, H5T_VARIABLE) < 0 || H5Aread(a, mt, &p) < 0) {
        s = lt__h5_err(LT_ERR_FORMAT, "checkpoint: reading string '%s' of %s", name, what);
      } else if (!p) {
        s = lt__err(LT_ERR_FORMAT, "checkpoint: string '%s' of %s is NULL", name, what);
      } else {
        size_t n = strnlen(p, LT__CKPT_MAX_STRING + 1);
        if (n > LT__CKPT_MAX_STRING)
          s = lt__err(LT_ERR_FORMAT, "checkpoint: string '%s' of %s is longer than %d bytes", name, what,
                      LT__CKPT_MAX_STRING);
        else if (!(*owned = strndup(p, n)))
          s = lt__err(LT_ERR_NOMEM, "checkpoint: out of memory");
      }
      if (p) H5free_memory(p);
    } else if (var == 0 && size >= 1 && size <= LT__CKPT_MAX_STRING) {
      char *buf = calloc(size + 1, 1);
      if (!buf) s = lt__err(LT_ERR_NOMEM, "checkpoint: out of memory");
      else if (mt < 0 || H5Tset_size(mt, size) < 0 || H5Tset_strpad(mt, H5T_STR_NULLPAD) < 0 ||
               H5Aread(a, mt, buf) < 0) {
        s = lt__h5_err(LT_ERR_FORMAT, "checkpoint: reading string '%s' of %s", name, what);
        free(buf);
      } else {
        *owned = buf;
      }
    } else {
      s = lt__err(LT_ERR_FORMAT, "checkpoint: string '%s' of %s has an unsupported size %zu", name, what, size);
    }
    if (mt >= 0) H5Tclose(mt);
    if (!s) v->s = *owned;
  } else {
    s = lt__err(LT_ERR_FORMAT, "checkpoint: attribute '%s' of %s has an unsupported type (%s): expected int64, "
                "double, string or bool", name, what, lt__h5_type_desc(t, tdesc, sizeof tdesc));
  }
done:
  if (s) {
    free(*owned);
    *owned = NULL;
  }
  if (sp >= 0) H5Sclose(sp);
  if (t >= 0) H5Tclose(t);
  H5Aclose(a);
  return s;
}

static lt_status get_attr(hid_t obj, const char *what, const char *name, lt_ckpt_kind kind, lt__meta_val *v,
                          char **owned) {
  htri_t ex = H5Aexists(obj, name);
  if (ex < 0) return lt__h5_err(LT_ERR_FORMAT, "checkpoint: looking up attribute '%s' of %s", name, what);
  if (ex == 0) return lt__err(LT_ERR_INDEX, "checkpoint: %s has no attribute '%s'", what, name);
  lt_status s = read_attr(obj, what, name, v, owned);
  if (s) return s;
  if (v->kind != kind) {
    free(*owned);
    *owned = NULL;
    static const char *names[] = {"an integer", "a double", "a string", "bytes"};
    return lt__err(LT_ERR_FORMAT, "checkpoint: attribute '%s' of %s is not %s", name, what, names[kind]);
  }
  return LT_OK;
}

lt_status lt__h5_get_attr_int(hid_t obj, const char *what, const char *name, int64_t *out) {
  lt__meta_val v;
  char *owned;
  lt_status s = get_attr(obj, what, name, LT_CKPT_INT, &v, &owned);
  if (!s) *out = v.i;
  return s;
}

lt_status lt__h5_get_attr_double(hid_t obj, const char *what, const char *name, double *out) {
  lt__meta_val v;
  char *owned;
  lt_status s = get_attr(obj, what, name, LT_CKPT_DOUBLE, &v, &owned);
  if (!s) *out = v.d;
  return s;
}

lt_status lt__h5_get_attr_string(hid_t obj, const char *what, const char *name, char **out) {
  lt__meta_val v;
  char *owned;
  lt_status s = get_attr(obj, what, name, LT_CKPT_STRING, &v, &owned);
  if (!s) *out = owned;
  return s;
}

typedef struct name_list {
  char **v;
  int n, cap;
  lt_status s;
} name_list;

static void name_list_free(name_list *l) {
  for (int i = 0; i < l->n; i++) free(l->v[i]);
  free(l->v);
}

static bool name_list_push(name_list *l, const char *name) {
  if (l->n == l->cap) {
    int cap = l->cap ? 2 * l->cap : 16;
    char **v = realloc(l->v, (size_t)cap * sizeof *v);
    if (!v) return false;
    l->v = v;
    l->cap = cap;
  }
  if (!(l->v[l->n] = strdup(name))) return false;
  l->n++;
  return true;
}

static herr_t attr_name_cb(hid_t loc, const char *name, const H5A_info_t *info, void *data) {
  name_list *l = data;
  if (l->n >= LT__CKPT_MAX_ATTRS) {
    l->s = lt__err(LT_ERR_FORMAT, "checkpoint: more than %d attributes on one object", LT__CKPT_MAX_ATTRS);
    return -1;
  }
  if (!name_list_push(l, name)) {
    l->s = lt__err(LT_ERR_NOMEM, "checkpoint: out of memory");
    return -1;
  }
  return 0;
}

typedef struct link_list {
  name_list names;
  const char *what;
  const lt__h5_raw *raw;
} link_list;

static herr_t blob_link_cb(hid_t g, const char *name, const H5L_info_t *info, void *data) {
  link_list *l = data;
  if (info->type != H5L_TYPE_HARD) {
    l->names.s = lt__err(LT_ERR_FORMAT, "checkpoint: '%s' in %s is a soft, external or user-defined link: refused",
                         name, l->what);
    return -1;
  }
  if (l->names.n >= LT__CKPT_MAX_ATTRS) {
    l->names.s = lt__err(LT_ERR_FORMAT, "checkpoint: more than %d objects in %s", LT__CKPT_MAX_ATTRS, l->what);
    return -1;
  }
  if (l->raw && l->raw->check) {
    char obj[600];
    snprintf(obj, sizeof obj, "%s/%s", l->what, name);
    if ((l->names.s = lt__h5_check_ohdr(l->raw, info->u.address, obj))) return -1;
  }
  if (!name_list_push(&l->names, name)) {
    l->names.s = lt__err(LT_ERR_NOMEM, "checkpoint: out of memory");
    return -1;
  }
  return 0;
}

static lt_status read_blob(hid_t obj, const char *what, const char *name, uint64_t file_size, uint64_t *budget,
                           lt_ckpt_meta *m) {
  H5O_info_t oi;
  if (H5Oget_info_by_name2(obj, name, &oi, H5O_INFO_BASIC, H5P_DEFAULT) < 0)
    return lt__h5_err(LT_ERR_FORMAT, "checkpoint: cannot inspect '%s' in %s", name, what);
  if (oi.type != H5O_TYPE_DATASET)
    return lt__err(LT_ERR_FORMAT, "checkpoint: '%s' in %s is not a dataset (extra blobs are uint8 datasets)",
                   name, what);
  hid_t d = H5Dopen2(obj, name, H5P_DEFAULT);
  if (d < 0) return lt__h5_err(LT_ERR_FORMAT, "checkpoint: cannot open '%s' in %s", name, what);
  char path[600];
  snprintf(path, sizeof path, "%s/%s", what, name);
  lt__h5_expect e = {.dtype = LT_DTYPE_COUNT, .raw = LT__RAW_U8, .ndim = 1, .shape = NULL};
  int nd;
  int64_t shape[LT_MAX_DIMS];
  size_t bytes;
  lt_status s = lt__h5_check_dataset(d, path, &e, file_size, &nd, shape, &bytes);
  /* The size from the dataspace, before HDF5 inflates anything. */
  if (!s) s = lt__ckpt_check_blob(path, bytes, budget);
  void *buf = NULL;
  if (!s && !(buf = malloc(bytes ? bytes : 1))) s = lt__err(LT_ERR_NOMEM, "checkpoint: out of memory for %s", path);
  if (!s && bytes && H5Dread(d, H5T_NATIVE_UCHAR, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0)
    s = lt__h5_err(LT_ERR_FORMAT, "checkpoint: reading %s", path);
  if (!s) s = lt_ckpt_meta_set_bytes(m, name, buf, bytes);
  free(buf);
  H5Dclose(d);
  return s;
}

lt_status lt__h5_read_meta(hid_t obj, const lt__h5_raw *raw, const char *what, lt_ckpt_meta *m,
                           uint64_t *budget) {
  name_list attrs = {0};
  hsize_t idx = 0;
  if (H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, attr_name_cb, &attrs) < 0) {
    lt_status s = attrs.s ? attrs.s : lt__h5_err(LT_ERR_FORMAT, "checkpoint: listing the attributes of %s", what);
    H5Eclear2(H5E_DEFAULT);
    name_list_free(&attrs);
    return s;
  }
  lt_status s = LT_OK;
  for (int i = 0; i < attrs.n && !s; i++) {
    lt__meta_val v;
    char *owned = NULL;
    s = lt__ckpt_check_key(attrs.v[i], "checkpoint");
    if (s) s = lt__err(LT_ERR_FORMAT, "checkpoint: attribute name '%.64s' of %s is not a valid key", attrs.v[i], what);
    if (!s) s = read_attr(obj, what, attrs.v[i], &v, &owned);
    if (!s) {
      switch (v.kind) {
        case LT_CKPT_INT: s = lt_ckpt_meta_set_int(m, attrs.v[i], v.i); break;
        case LT_CKPT_DOUBLE: s = lt_ckpt_meta_set_double(m, attrs.v[i], v.d); break;
        default: s = lt_ckpt_meta_set_string(m, attrs.v[i], v.s); break;
      }
    }
    free(owned);
  }
  name_list_free(&attrs);
  if (s || !budget) return s;
  link_list links = {.what = what, .raw = raw};
  idx = 0;
  if (H5Literate(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, blob_link_cb, &links) < 0) {
    s = links.names.s ? links.names.s : lt__h5_err(LT_ERR_FORMAT, "checkpoint: listing %s", what);
    H5Eclear2(H5E_DEFAULT);
  }
  for (int i = 0; i < links.names.n && !s; i++)
    if (!(s = lt__ckpt_check_blob_name(m, what, links.names.v[i])))
      s = read_blob(obj, what, links.names.v[i], raw->size, budget, m);
  name_list_free(&links.names);
  return s;
}

/* ---- writing tensors --------------------------------------------------- */

hid_t lt__h5_open_or_create_groups(hid_t loc, int n, char *const *comps, const char *full, const char *what) {
  if (H5Iinc_ref(loc) < 0) {
    lt__h5_err(LT_ERR_IO, "checkpoint: %s", what);
    return -1;
  }
  hid_t cur = loc;
  hid_t gcpl = lt__h5_gcpl();
  for (int i = 0; i < n; i++) {
    hid_t g = -1;
    htri_t ex = H5Lexists(cur, comps[i], H5P_DEFAULT);
    if (ex > 0) {
      H5O_info_t oi;
      if (H5Oget_info_by_name2(cur, comps[i], &oi, H5O_INFO_BASIC, H5P_DEFAULT) < 0) {
        lt__h5_err(LT_ERR_IO, "checkpoint: %s '%s'", what, full);
      } else if (oi.type != H5O_TYPE_GROUP) {
        lt__err(LT_ERR_INVALID,
                "checkpoint: %s name '%s' needs a group '%s' where another name already put a tensor (names like "
                "'a' and 'a.b' cannot both exist)", what, full, comps[i]);
      } else {
        g = H5Gopen2(cur, comps[i], H5P_DEFAULT);
        if (g < 0) lt__h5_err(LT_ERR_IO, "checkpoint: %s '%s'", what, full);
      }
    } else if (ex == 0) {
      g = H5Gcreate2(cur, comps[i], H5P_DEFAULT, gcpl, H5P_DEFAULT);
      if (g < 0) lt__h5_err(LT_ERR_IO, "checkpoint: creating group for %s '%s'", what, full);
    } else {
      lt__h5_err(LT_ERR_IO, "checkpoint: %s '%s'", what, full);
    }
    H5Gclose(cur);
    cur = g;
    if (cur < 0) break;
  }
  if (gcpl >= 0) H5Pclose(gcpl);
  return cur;
}

/* Does deflate shrink a sample of the data by at least 10%? */
static bool deflate_pays(const void *data, size_t bytes, int level) {
  size_t n = bytes < (64u << 10) ? bytes : (64u << 10);
  uLongf out = compressBound((uLong)n);
  unsigned char *buf = malloc(out);
  if (!buf) return false;
  int rc = compress2(buf, &out, data, (uLong)n, level);
  free(buf);
  return rc == Z_OK && (double)out <= 0.9 * (double)n;
}

/* Chunks of about 1 MiB: whole inner rows where possible. */
static void chunk_dims(int nd, const int64_t *shape, size_t es, hsize_t *ch) {
  const uint64_t target = 1u << 20;
  uint64_t inner = es;
  int d = nd - 1;
  for (; d >= 0; d--) {
    if (inner * (uint64_t)shape[d] > target) break;
    ch[d] = (hsize_t)shape[d];
    inner *= (uint64_t)shape[d];
  }
  if (d >= 0) {
    uint64_t k = target / inner;
    if (k < 1) k = 1;
    ch[d] = (hsize_t)(k < (uint64_t)shape[d] ? k : (uint64_t)shape[d]);
    for (d--; d >= 0; d--) ch[d] = 1;
  }
}

lt_status lt__h5_write_tensor(hid_t loc, const char *name, const lt_tensor *t, const lt_ckpt_save_opts *opts,
                              const char *what) {
  htri_t ex = H5Lexists(loc, name, H5P_DEFAULT);
  if (ex != 0)
    return ex < 0 ? lt__h5_err(LT_ERR_IO, "checkpoint: writing %s", what)
                  : lt__err(LT_ERR_INVALID,
                            "checkpoint: %s: '%s' is already a group of other names (names like 'a' and 'a.b' "
                            "cannot both exist)", what, name);
  lt_tensor *c = lt_is_contiguous(t) ? (lt_tensor *)t : lt_contiguous(t);
  if (!c) return lt_last_status();
  size_t es = lt_dtype_size(t->dtype);
  size_t bytes = (size_t)t->numel * es;
  hid_t ft = lt__h5_file_type(t->dtype), mt = lt__h5_mem_type(t->dtype), sp = -1, dcpl = -1, d = -1;
  lt_status s = LT_OK;
  hsize_t dims[LT_MAX_DIMS];
  for (int i = 0; i < t->ndim; i++) dims[i] = (hsize_t)t->shape[i];
  sp = t->ndim == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(t->ndim, dims, NULL);
  dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (ft < 0 || mt < 0 || sp < 0 || dcpl < 0 || H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER) < 0) {
    s = lt__h5_err(LT_ERR_IO, "checkpoint: preparing %s", what);
    goto done;
  }
  int level = opts && opts->deflate_level >= 1 && opts->deflate_level <= 9 ? opts->deflate_level : 1;
  if (!(opts && opts->uncompressed) && t->ndim > 0 && bytes >= 4096 && deflate_pays(c->data, bytes, level)) {
    hsize_t ch[LT_MAX_DIMS];
    chunk_dims(t->ndim, t->shape, es, ch);
    if (H5Pset_chunk(dcpl, t->ndim, ch) < 0 || H5Pset_deflate(dcpl, (unsigned)level) < 0) {
      s = lt__h5_err(LT_ERR_IO, "checkpoint: preparing %s", what);
      goto done;
    }
  }
  d = H5Dcreate2(loc, name, ft, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  if (d < 0 || (t->numel > 0 && H5Dwrite(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, c->data) < 0))
    s = lt__h5_err(LT_ERR_IO, "checkpoint: writing %s %s", what, LT__D(t));
done:
  if (d >= 0 && H5Dclose(d) < 0 && !s) s = lt__h5_err(LT_ERR_IO, "checkpoint: writing %s", what);
  if (dcpl >= 0) H5Pclose(dcpl);
  if (sp >= 0) H5Sclose(sp);
  if (mt >= 0) H5Tclose(mt);
  if (ft >= 0) H5Tclose(ft);
  if (c != t) lt_tensor_free(c);
  return s;
}
