/*
 * checkpoint/gguf.c: the GGUF reader and writer of checkpoint/gguf.h. The
 * reader walks the file once with a bounded cursor (every length is checked
 * against the bytes left before it is used, in 64-bit arithmetic), indexes
 * the key-value pairs and the tensor infos, then checks the tensors against
 * the data section and against each other. Values stay in the mapping; the
 * getters decode them on demand.
 *
 * What this is not: a model mapping (models/transformer/gguf.c), nor a
 * quantizer: Q8_0 and Q4_0 blocks are made and expanded by tensor/quant.h.
 */
#include "checkpoint/gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/internal.h"
#include "tensor/byteorder_internal.h"
#include "tensor/error_internal.h"
#include "tensor/file_internal.h"
#include "tensor/quant.h"
#include "tensor/storage_internal.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_TENSOR_NAME_MAX 63 /* GGML_MAX_NAME - 1: what llama.cpp reads */

/* ---- the type tables -------------------------------------------------------- */

static const char *const type_names[LT_GGUF_TYPE_COUNT] = {
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array", "uint64", "int64",
    "float64"};
/* Bytes of a scalar of each type (0: string and array, which have their own rules). */
static const unsigned char type_size[LT_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *lt_gguf_type_name(lt_gguf_type t) { return (unsigned)t < LT_GGUF_TYPE_COUNT ? type_names[t] : "unknown"; }

static bool is_int_type(lt_gguf_type t) {
  return t <= LT_GGUF_INT32 || t == LT_GGUF_UINT64 || t == LT_GGUF_INT64;
}

typedef struct ggml_row {
  int type;
  const char *name;
  int64_t block;
  size_t bytes;
} ggml_row;

static const ggml_row ggml_types[] = {
    {LT_GGML_F32, "F32", 1, 4},    {LT_GGML_F16, "F16", 1, 2},     {LT_GGML_BF16, "BF16", 1, 2},
    {LT_GGML_Q8_0, "Q8_0", 32, 34}, {LT_GGML_Q4_0, "Q4_0", 32, 18},
};

static const ggml_row *ggml_find(int type) {
  for (size_t k = 0; k < sizeof ggml_types / sizeof ggml_types[0]; k++)
    if (ggml_types[k].type == type) return &ggml_types[k];
  return NULL;
}

const char *lt_ggml_type_name(int type) {
  const ggml_row *r = ggml_find(type);
  return r ? r->name : NULL;
}

bool lt_ggml_type_block(int type, int64_t *block, size_t *bytes) {
  const ggml_row *r = ggml_find(type);
  if (!r) return false;
  if (block) *block = r->block;
  if (bytes) *bytes = r->bytes;
  return true;
}

/* Bytes of a tensor of type with numel elements, innermost size ne0 (checked). */
static lt_status type_nbytes(int type, int64_t ne0, int64_t numel, uint64_t *out, const char *who) {
  const ggml_row *r = ggml_find(type);
  if (!r) return lt__err(LT_ERR_DTYPE, "%s: ggml type %d is not one libtensor reads (F32, F16, BF16, Q8_0, Q4_0)", who, type);
  if (ne0 % r->block != 0)
    return lt__err(LT_ERR_FORMAT, "%s: type %s: the innermost size %lld is not a multiple of its block of %lld", who,
                   r->name, (long long)ne0, (long long)r->block);
  if (__builtin_mul_overflow((uint64_t)(numel / r->block), (uint64_t)r->bytes, out))
    return lt__err(LT_ERR_OVERFLOW, "%s: %lld elements of %s overflow 64 bits of bytes", who, (long long)numel, r->name);
  return LT_OK;
}

/* ---- the open file ------------------------------------------------------------ */

typedef struct kv {
  char *key;
  lt_gguf_type type, elem; /* elem: arrays only */
  uint64_t n;              /* arrays: the element count */
  const unsigned char *val; /* the scalar, the string's length field, or the first element */
  uint64_t *str_at;        /* arrays of strings: each element's offset from val */
} kv;

struct lt_gguf_file {
  char *path;
  lt__file_map file;
  uint32_t version, alignment;
  int n_kv, n_t;
  kv *kv;
  lt_gguf_tensor_info *t;
  const unsigned char *data; /* the data section */
  uint64_t data_len;
};

void lt_gguf_close(lt_gguf_file *f) {
  if (!f) return;
  for (int i = 0; i < f->n_kv; i++) free(f->kv[i].key), free(f->kv[i].str_at);
  free(f->kv);
  for (int i = 0; i < f->n_t; i++) free((char *)f->t[i].name);
  free(f->t);
  lt__unmap(&f->file);
  free(f->path);
  free(f);
}

#define BAD(...) lt__err(LT_ERR_FORMAT, __VA_ARGS__)

/* A bounded cursor over the file. */
typedef struct cur {
  const unsigned char *p;
  uint64_t left;
  const char *path;
} cur;

static uint64_t at_of(const lt_gguf_file *f, const cur *c) { return (uint64_t)(c->p - f->file.bytes); }

static lt_status need(const lt_gguf_file *f, const cur *c, uint64_t n, const char *what) {
  if (n > c->left)
    return BAD("gguf '%s': %s at byte %llu needs %llu bytes, %llu are left (truncated?)", c->path, what,
               (unsigned long long)at_of(f, c), (unsigned long long)n, (unsigned long long)c->left);
  return LT_OK;
}
static void skip(cur *c, uint64_t n) { c->p += n, c->left -= n; }

static lt_status rd_u32(const lt_gguf_file *f, cur *c, uint32_t *v, const char *what) {
  lt_status s = need(f, c, 4, what);
  if (s == LT_OK) *v = lt__get_le32(c->p), skip(c, 4);
  return s;
}
static lt_status rd_u64(const lt_gguf_file *f, cur *c, uint64_t *v, const char *what) {
  lt_status s = need(f, c, 8, what);
  if (s == LT_OK) *v = lt__get_le64(c->p), skip(c, 8);
  return s;
}
/* A string: u64 length, then the bytes (borrowed from the mapping). */
static lt_status rd_str(const lt_gguf_file *f, cur *c, const unsigned char **s, uint64_t *len, const char *what) {
  lt_status st = rd_u64(f, c, len, what);
  if (st == LT_OK && (st = need(f, c, *len, what)) == LT_OK) *s = c->p, skip(c, *len);
  return st;
}
/* A name (key or tensor): non-empty, at most max bytes, no NUL; returns new. */
static lt_status rd_name(const lt_gguf_file *f, cur *c, size_t max, char **out, const char *what) {
  const unsigned char *s;
  uint64_t len;
  lt_status st = rd_str(f, c, &s, &len, what);
  if (st != LT_OK) return st;
  if (len == 0 || len > max || memchr(s, 0, (size_t)len))
    return BAD("gguf '%s': %s at byte %llu: %s (%llu bytes; 1 to %zu without NUL expected)", c->path, what,
               (unsigned long long)(at_of(f, c) - len), len == 0 ? "empty" : len > max ? "too long" : "holds a NUL",
               (unsigned long long)len, max);
  if (!(*out = malloc((size_t)len + 1))) return lt__err(LT_ERR_NOMEM, "gguf '%s': %s", c->path, what);
  memcpy(*out, s, (size_t)len);
  (*out)[len] = '\0';
  return LT_OK;
}

/* Skips one value of type t (not an array), checking strings and bools. */
static lt_status skip_value(const lt_gguf_file *f, cur *c, lt_gguf_type t, const char *key) {
  if (t == LT_GGUF_STRING) {
    const unsigned char *s;
    uint64_t len;
    return rd_str(f, c, &s, &len, key);
  }
  lt_status st = need(f, c, type_size[t], key);
  if (st != LT_OK) return st;
  if (t == LT_GGUF_BOOL && c->p[0] > 1)
    return BAD("gguf '%s': key '%s': a bool holds %u (0 or 1 expected)", c->path, key, c->p[0]);
  skip(c, type_size[t]);
  return LT_OK;
}

static lt_status parse_kv(lt_gguf_file *f, cur *c, kv *e) {
  lt_status s = rd_name(f, c, LT_GGUF_MAX_NAME, &e->key, "a key");
  uint32_t t;
  if (s != LT_OK || (s = rd_u32(f, c, &t, e->key)) != LT_OK) return s;
  if (t >= LT_GGUF_TYPE_COUNT)
    return BAD("gguf '%s': key '%s': value type %u is not one of the spec's 0..12", f->path, e->key, t);
  e->type = (lt_gguf_type)t;
  e->val = c->p;
  if (e->type != LT_GGUF_ARRAY) return skip_value(f, c, e->type, e->key);
  uint32_t et;
  if ((s = rd_u32(f, c, &et, e->key)) != LT_OK || (s = rd_u64(f, c, &e->n, e->key)) != LT_OK) return s;
  if (et >= LT_GGUF_TYPE_COUNT)
    return BAD("gguf '%s': key '%s': array element type %u is not one of the spec's 0..12", f->path, e->key, et);
  if (et == LT_GGUF_ARRAY) return BAD("gguf '%s': key '%s': an array of arrays (not read)", f->path, e->key);
  e->elem = (lt_gguf_type)et;
  e->val = c->p;
  if (e->elem != LT_GGUF_STRING) {
    uint64_t nb;
    if (__builtin_mul_overflow(e->n, (uint64_t)type_size[e->elem], &nb) || nb > c->left)
      return BAD("gguf '%s': key '%s': an array of %llu %s runs past the end of the file", f->path, e->key,
                 (unsigned long long)e->n, type_names[e->elem]);
    if (e->elem == LT_GGUF_BOOL)
      for (uint64_t j = 0; j < e->n; j++)
        if (c->p[j] > 1) return BAD("gguf '%s': key '%s': bool element %llu holds %u", f->path, e->key,
                                    (unsigned long long)j, c->p[j]);
    skip(c, nb);
    return LT_OK;
  }
  /* strings: each takes at least its 8-byte length, so n is bounded by the bytes left */
  if (e->n > c->left / 8)
    return BAD("gguf '%s': key '%s': an array of %llu strings cannot fit in the %llu bytes left", f->path, e->key,
               (unsigned long long)e->n, (unsigned long long)c->left);
  if (!(e->str_at = malloc((size_t)(e->n ? e->n : 1) * sizeof *e->str_at)))
    return lt__err(LT_ERR_NOMEM, "gguf '%s': key '%s': %llu strings", f->path, e->key, (unsigned long long)e->n);
  for (uint64_t j = 0; j < e->n; j++) {
    e->str_at[j] = (uint64_t)(c->p - e->val);
    if ((s = skip_value(f, c, LT_GGUF_STRING, e->key)) != LT_OK) return s;
  }
  return LT_OK;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The first name given twice among n, or NULL (sorted copies of the pointers). */
static lt_status check_unique(const lt_gguf_file *f, char **names, int n, const char *what) {
  if (n < 2) return LT_OK;
  char **v = malloc((size_t)n * sizeof *v);
  if (!v) return lt__err(LT_ERR_NOMEM, "gguf '%s': %s", f->path, what);
  memcpy(v, names, (size_t)n * sizeof *v);
  qsort(v, (size_t)n, sizeof *v, by_name);
  lt_status s = LT_OK;
  for (int i = 1; i < n && s == LT_OK; i++)
    if (strcmp(v[i - 1], v[i]) == 0) s = BAD("gguf '%s': %s '%s' is given twice", f->path, what, v[i]);
  free(v);
  return s;
}

static lt_status parse_tensor(lt_gguf_file *f, cur *c, lt_gguf_tensor_info *ti) {
  char *name = NULL;
  lt_status s = rd_name(f, c, GGUF_TENSOR_NAME_MAX, &name, "a tensor name");
  if (s != LT_OK) return s;
  ti->name = name;
  uint32_t nd, type;
  if ((s = rd_u32(f, c, &nd, name)) != LT_OK) return s;
  if (nd < 1 || nd > 4) return BAD("gguf '%s': tensor '%s': n_dims %u (1 to 4 expected)", f->path, name, nd);
  ti->ndim = (int)nd;
  int64_t numel = 1;
  for (int k = 0; k < ti->ndim; k++) {
    uint64_t d;
    if ((s = rd_u64(f, c, &d, name)) != LT_OK) return s;
    if (d > (uint64_t)INT64_MAX || __builtin_mul_overflow(numel, (int64_t)d, &numel))
      return lt__err(LT_ERR_OVERFLOW, "gguf '%s': tensor '%s': size %llu of dimension %d: the element count overflows",
                     f->path, name, (unsigned long long)d, k);
    ti->ne[k] = (int64_t)d;
    ti->shape[ti->ndim - 1 - k] = (int64_t)d;
  }
  ti->numel = numel;
  if ((s = rd_u32(f, c, &type, name)) != LT_OK || (s = rd_u64(f, c, &ti->offset, name)) != LT_OK) return s;
  ti->type = (int)type;
  char who[LT_GGUF_MAX_NAME + 4200];
  snprintf(who, sizeof who, "gguf '%s': tensor '%s'", f->path, name);
  if ((s = type_nbytes(ti->type, ti->ne[0], numel, &ti->nbytes, who)) != LT_OK) return s;
  return LT_OK;
}

static int by_offset(const void *a, const void *b) {
  const lt_gguf_tensor_info *x = *(lt_gguf_tensor_info *const *)a, *y = *(lt_gguf_tensor_info *const *)b;
  return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static lt_status parse(lt_gguf_file *f) {
  cur c = {f->file.bytes, f->file.size, f->path};
  lt_status s;
  uint32_t version;
  uint64_t n_t, n_kv;
  if ((s = need(f, &c, 4, "the magic")) != LT_OK) return s;
  if (memcmp(c.p, GGUF_MAGIC, 4) != 0) return BAD("gguf '%s': not a GGUF file (the magic is not \"GGUF\")", f->path);
  skip(&c, 4);
  if ((s = rd_u32(f, &c, &version, "the version")) != LT_OK) return s;
  if (version != 2 && version != 3)
    return BAD("gguf '%s': version %u: libtensor reads versions 2 and 3", f->path, version);
  f->version = version;
  if ((s = rd_u64(f, &c, &n_t, "the tensor count")) != LT_OK || (s = rd_u64(f, &c, &n_kv, "the key count")) != LT_OK)
    return s;
  if (n_kv > c.left / 13 || n_kv > INT32_MAX)
    return BAD("gguf '%s': %llu key-value pairs cannot fit in the %llu bytes left (13 bytes each at least)", f->path,
               (unsigned long long)n_kv, (unsigned long long)c.left);
  if (!(f->kv = calloc((size_t)(n_kv ? n_kv : 1), sizeof *f->kv))) return lt__err(LT_ERR_NOMEM, "gguf '%s': keys", f->path);
  for (uint64_t i = 0; i < n_kv; i++) {
    s = parse_kv(f, &c, &f->kv[i]);
    f->n_kv = (int)i + 1; /* freed by close, also when half-parsed */
    if (s != LT_OK) return s;
  }
  {
    char **keys = malloc((size_t)(f->n_kv ? f->n_kv : 1) * sizeof *keys);
    if (!keys) return lt__err(LT_ERR_NOMEM, "gguf '%s': keys", f->path);
    for (int i = 0; i < f->n_kv; i++) keys[i] = f->kv[i].key;
    s = check_unique(f, keys, f->n_kv, "key");
    free(keys);
    if (s != LT_OK) return s;
  }
  f->alignment = LT_GGUF_DEFAULT_ALIGNMENT;
  const int ai = lt_gguf_find_key(f, "general.alignment");
  if (ai >= 0) {
    if (f->kv[ai].type != LT_GGUF_UINT32)
      return BAD("gguf '%s': key 'general.alignment' is %s (uint32 expected)", f->path, type_names[f->kv[ai].type]);
    const uint32_t a = lt__get_le32(f->kv[ai].val);
    if (a == 0 || (a & (a - 1)) != 0)
      return BAD("gguf '%s': key 'general.alignment' is %u (a power of two expected)", f->path, a);
    f->alignment = a;
  }
  if (n_t > c.left / 24 || n_t > INT32_MAX)
    return BAD("gguf '%s': %llu tensor infos cannot fit in the %llu bytes left (24 bytes each at least)", f->path,
               (unsigned long long)n_t, (unsigned long long)c.left);
  if (!(f->t = calloc((size_t)(n_t ? n_t : 1), sizeof *f->t))) return lt__err(LT_ERR_NOMEM, "gguf '%s': tensors", f->path);
  for (uint64_t i = 0; i < n_t; i++) {
    s = parse_tensor(f, &c, &f->t[i]);
    f->n_t = (int)i + 1;
    if (s != LT_OK) return s;
  }
  {
    char **names = malloc((size_t)(f->n_t ? f->n_t : 1) * sizeof *names);
    if (!names) return lt__err(LT_ERR_NOMEM, "gguf '%s': tensors", f->path);
    for (int i = 0; i < f->n_t; i++) names[i] = (char *)f->t[i].name;
    s = check_unique(f, names, f->n_t, "tensor name");
    free(names);
    if (s != LT_OK) return s;
  }
  /* the data section starts at the next multiple of the alignment */
  const uint64_t here = at_of(f, &c), pad = (f->alignment - here % f->alignment) % f->alignment;
  if (f->n_t == 0) {
    f->data = c.p, f->data_len = 0;
    return LT_OK;
  }
  if (pad > c.left)
    return BAD("gguf '%s': the data section (after %llu bytes of padding at byte %llu) lies past the end of the file",
               f->path, (unsigned long long)pad, (unsigned long long)here);
  f->data = c.p + pad, f->data_len = c.left - pad;
  lt_gguf_tensor_info **order = malloc((size_t)f->n_t * sizeof *order);
  if (!order) return lt__err(LT_ERR_NOMEM, "gguf '%s': tensors", f->path);
  for (int i = 0; i < f->n_t; i++) order[i] = &f->t[i];
  for (int i = 0; i < f->n_t && s == LT_OK; i++) {
    const lt_gguf_tensor_info *ti = &f->t[i];
    if (ti->offset % f->alignment != 0)
      s = BAD("gguf '%s': tensor '%s': offset %llu is not a multiple of the alignment %u", f->path, ti->name,
              (unsigned long long)ti->offset, f->alignment);
    else if (ti->offset > f->data_len || ti->nbytes > f->data_len - ti->offset)
      s = BAD("gguf '%s': tensor '%s': %llu bytes at offset %llu run past the data section of %llu bytes (truncated?)",
              f->path, ti->name, (unsigned long long)ti->nbytes, (unsigned long long)ti->offset,
              (unsigned long long)f->data_len);
  }
  if (s == LT_OK) {
    /* sorted by offset, each tensor starts at or after the furthest end so far (empty tensors take no bytes) */
    qsort(order, (size_t)f->n_t, sizeof *order, by_offset);
    const lt_gguf_tensor_info *far = NULL;
    for (int i = 0; i < f->n_t && s == LT_OK; i++) {
      const lt_gguf_tensor_info *ti = order[i];
      if (ti->nbytes == 0) continue;
      if (far && ti->offset < far->offset + far->nbytes)
        s = BAD("gguf '%s': tensor '%s' at offset %llu overlaps tensor '%s' (bytes %llu to %llu)", f->path, ti->name,
                (unsigned long long)ti->offset, far->name, (unsigned long long)far->offset,
                (unsigned long long)(far->offset + far->nbytes));
      if (!far || ti->offset + ti->nbytes > far->offset + far->nbytes) far = ti;
    }
  }
  free(order);
  return s;
}

lt_gguf_file *lt_gguf_open(const char *path) {
  if (!path) return lt__err(LT_ERR_NULL, "gguf_open: path is NULL"), NULL;
  lt_gguf_file *f = calloc(1, sizeof *f);
  if (!f || !(f->path = strdup(path))) {
    free(f);
    return lt__err(LT_ERR_NOMEM, "gguf_open: out of memory"), NULL;
  }
  if (lt__map_regular(path, "gguf_open", LT_ERR_FORMAT, &f->file) != LT_OK || parse(f) != LT_OK) {
    lt_gguf_close(f);
    return NULL;
  }
  return f;
}

#undef BAD

uint32_t lt_gguf_version(const lt_gguf_file *f) { return f ? f->version : 0; }
uint32_t lt_gguf_alignment(const lt_gguf_file *f) { return f ? f->alignment : 0; }
int lt_gguf_kv_count(const lt_gguf_file *f) { return f ? f->n_kv : 0; }
const char *lt_gguf_kv_key(const lt_gguf_file *f, int i) { return f && i >= 0 && i < f->n_kv ? f->kv[i].key : NULL; }
int lt_gguf_find_key(const lt_gguf_file *f, const char *key) {
  if (!f || !key) return -1;
  for (int i = 0; i < f->n_kv; i++)
    if (f->kv[i].key && strcmp(f->kv[i].key, key) == 0) return i;
  return -1;
}
lt_gguf_type lt_gguf_kv_type(const lt_gguf_file *f, int i, lt_gguf_type *elem, uint64_t *n) {
  if (!f || i < 0 || i >= f->n_kv) return LT_GGUF_TYPE_COUNT;
  if (elem) *elem = f->kv[i].type == LT_GGUF_ARRAY ? f->kv[i].elem : LT_GGUF_TYPE_COUNT;
  if (n) *n = f->kv[i].type == LT_GGUF_ARRAY ? f->kv[i].n : 1;
  return f->kv[i].type;
}

/* Decodes a scalar of type t at p: integers into *iv (false when a uint64
 * exceeds INT64_MAX), floats into *rv. */
static bool decode_int(lt_gguf_type t, const unsigned char *p, int64_t *iv) {
  switch (t) {
    case LT_GGUF_UINT8: *iv = p[0]; return true;
    case LT_GGUF_INT8: *iv = (int8_t)p[0]; return true;
    case LT_GGUF_UINT16: *iv = lt__get_le16(p); return true;
    case LT_GGUF_INT16: *iv = (int16_t)lt__get_le16(p); return true;
    case LT_GGUF_UINT32: *iv = lt__get_le32(p); return true;
    case LT_GGUF_INT32: *iv = (int32_t)lt__get_le32(p); return true;
    case LT_GGUF_INT64: *iv = (int64_t)lt__get_le64(p); return true;
    case LT_GGUF_UINT64: {
      const uint64_t u = lt__get_le64(p);
      if (u > (uint64_t)INT64_MAX) return false;
      *iv = (int64_t)u;
      return true;
    }
    default: return false;
  }
}
static double decode_real(lt_gguf_type t, const unsigned char *p) {
  if (t == LT_GGUF_FLOAT32) {
    const uint32_t u = lt__get_le32(p);
    float x;
    memcpy(&x, &u, 4);
    return x;
  }
  const uint64_t u = lt__get_le64(p);
  double x;
  memcpy(&x, &u, 8);
  return x;
}

static lt_status find_typed(const lt_gguf_file *f, const char *key, const char *want, bool (*ok)(lt_gguf_type),
                            const kv **out) {
  if (!f || !key) return lt__err(LT_ERR_NULL, "gguf_get: f or key is NULL");
  const int i = lt_gguf_find_key(f, key);
  if (i < 0) return lt__err(LT_ERR_INVALID, "gguf '%s': key '%s' is missing", f->path, key);
  if (!ok(f->kv[i].type))
    return lt__err(LT_ERR_FORMAT, "gguf '%s': key '%s' is %s (%s expected)", f->path, key, type_names[f->kv[i].type],
                   want);
  *out = &f->kv[i];
  return LT_OK;
}
static bool ok_real(lt_gguf_type t) { return t == LT_GGUF_FLOAT32 || t == LT_GGUF_FLOAT64; }
static bool ok_bool(lt_gguf_type t) { return t == LT_GGUF_BOOL; }
static bool ok_str(lt_gguf_type t) { return t == LT_GGUF_STRING; }

lt_status lt_gguf_get_int(const lt_gguf_file *f, const char *key, int64_t *out) {
  const kv *e = NULL;
  lt_status s = find_typed(f, key, "an integer", is_int_type, &e);
  if (s != LT_OK) return s;
  int64_t v;
  if (!decode_int(e->type, e->val, &v))
    return lt__err(LT_ERR_FORMAT, "gguf '%s': key '%s': %llu is beyond int64", f->path, key,
                   (unsigned long long)lt__get_le64(e->val));
  *out = v;
  return LT_OK;
}
lt_status lt_gguf_get_real(const lt_gguf_file *f, const char *key, double *out) {
  const kv *e = NULL;
  lt_status s = find_typed(f, key, "float32 or float64", ok_real, &e);
  if (s == LT_OK) *out = decode_real(e->type, e->val);
  return s;
}
lt_status lt_gguf_get_bool(const lt_gguf_file *f, const char *key, bool *out) {
  const kv *e = NULL;
  lt_status s = find_typed(f, key, "bool", ok_bool, &e);
  if (s == LT_OK) *out = e->val[0] != 0;
  return s;
}
lt_status lt_gguf_get_str(const lt_gguf_file *f, const char *key, const char **str, size_t *len) {
  const kv *e = NULL;
  lt_status s = find_typed(f, key, "string", ok_str, &e);
  if (s == LT_OK) *len = (size_t)lt__get_le64(e->val), *str = (const char *)e->val + 8;
  return s;
}

static lt_status arr_elem(const lt_gguf_file *f, int i, uint64_t j, const char *want, bool (*ok)(lt_gguf_type),
                          const kv **out) {
  if (!f) return lt__err(LT_ERR_NULL, "gguf_arr: f is NULL");
  if (i < 0 || i >= f->n_kv) return lt__err(LT_ERR_INDEX, "gguf '%s': key index %d of %d", f->path, i, f->n_kv);
  const kv *e = &f->kv[i];
  if (e->type != LT_GGUF_ARRAY || !ok(e->elem))
    return lt__err(LT_ERR_FORMAT, "gguf '%s': key '%s' is %s%s%s (an array of %s expected)", f->path, e->key,
                   type_names[e->type], e->type == LT_GGUF_ARRAY ? " of " : "",
                   e->type == LT_GGUF_ARRAY ? type_names[e->elem] : "", want);
  if (j >= e->n)
    return lt__err(LT_ERR_INDEX, "gguf '%s': key '%s': element %llu of %llu", f->path, e->key, (unsigned long long)j,
                   (unsigned long long)e->n);
  *out = e;
  return LT_OK;
}

lt_status lt_gguf_arr_str(const lt_gguf_file *f, int i, uint64_t j, const char **str, size_t *len) {
  const kv *e = NULL;
  lt_status s = arr_elem(f, i, j, "strings", ok_str, &e);
  if (s != LT_OK) return s;
  const unsigned char *p = e->val + e->str_at[j];
  *len = (size_t)lt__get_le64(p), *str = (const char *)p + 8;
  return LT_OK;
}
lt_status lt_gguf_arr_int(const lt_gguf_file *f, int i, uint64_t j, int64_t *out) {
  const kv *e = NULL;
  lt_status s = arr_elem(f, i, j, "integers", is_int_type, &e);
  if (s != LT_OK) return s;
  int64_t v;
  if (!decode_int(e->elem, e->val + j * type_size[e->elem], &v))
    return lt__err(LT_ERR_FORMAT, "gguf '%s': key '%s': element %llu is beyond int64", f->path, e->key,
                   (unsigned long long)j);
  *out = v;
  return LT_OK;
}
lt_status lt_gguf_arr_real(const lt_gguf_file *f, int i, uint64_t j, double *out) {
  const kv *e = NULL;
  lt_status s = arr_elem(f, i, j, "float32 or float64", ok_real, &e);
  if (s == LT_OK) *out = decode_real(e->elem, e->val + j * type_size[e->elem]);
  return s;
}

int lt_gguf_tensor_count(const lt_gguf_file *f) { return f ? f->n_t : 0; }
const lt_gguf_tensor_info *lt_gguf_tensor(const lt_gguf_file *f, int i) {
  return f && i >= 0 && i < f->n_t ? &f->t[i] : NULL;
}
int lt_gguf_find_tensor(const lt_gguf_file *f, const char *name) {
  if (!f || !name) return -1;
  for (int i = 0; i < f->n_t; i++)
    if (strcmp(f->t[i].name, name) == 0) return i;
  return -1;
}
const void *lt_gguf_tensor_data(const lt_gguf_file *f, int i) {
  return f && i >= 0 && i < f->n_t ? f->data + f->t[i].offset : NULL;
}

lt_status lt_gguf_read_f32(const lt_gguf_file *f, int i, float *dst) {
  if (!f || !dst) return lt__err(LT_ERR_NULL, "gguf_read_f32: f or dst is NULL");
  if (i < 0 || i >= f->n_t) return lt__err(LT_ERR_INDEX, "gguf '%s': tensor index %d of %d", f->path, i, f->n_t);
  const lt_gguf_tensor_info *ti = &f->t[i];
  const unsigned char *p = f->data + ti->offset;
  switch (ti->type) {
    case LT_GGML_F32:
      for (int64_t k = 0; k < ti->numel; k++) {
        const uint32_t u = lt__get_le32(p + 4 * k);
        memcpy(&dst[k], &u, 4);
      }
      break;
    case LT_GGML_F16:
      for (int64_t k = 0; k < ti->numel; k++) dst[k] = lt_f32_from_f16(lt__get_le16(p + 2 * k));
      break;
    case LT_GGML_BF16:
      for (int64_t k = 0; k < ti->numel; k++) dst[k] = lt__f32_from_bf16(lt__get_le16(p + 2 * k));
      break;
    default: { /* Q8_0, Q4_0: block by block through an aligned copy (the file's alignment may be 1) */
      const lt_qformat q = ti->type == LT_GGML_Q8_0 ? LT_QFORMAT_Q8_0 : LT_QFORMAT_Q4_0;
      const size_t bb = lt_qformat_block_bytes(q);
      lt_block_q8_0 blk; /* the larger of the two blocks */
      for (int64_t b = 0; b < ti->numel / 32; b++) {
        memcpy(&blk, p + (size_t)b * bb, bb);
        lt_status s = lt_dequantize_row(q, &blk, 32, dst + 32 * b);
        if (s != LT_OK) return s;
      }
      break;
    }
  }
  for (int64_t k = 0; k < ti->numel; k++)
    if (!isfinite(dst[k]))
      return lt__err(LT_ERR_NUMERIC, "gguf '%s': tensor '%s' holds %s at flat index %lld: refused (non-finite weights)",
                     f->path, ti->name, isnan(dst[k]) ? "NaN" : dst[k] > 0 ? "+inf" : "-inf", (long long)k);
  return LT_OK;
}

/* ---- writing -------------------------------------------------------------------- */

typedef struct wtensor {
  char *name;
  int type, ndim;
  int64_t ne[4];
  unsigned char *bytes;
  size_t nbytes;
} wtensor;

struct lt_gguf_writer {
  unsigned char *kv; /* the serialised pairs */
  size_t kv_len, kv_cap;
  char **keys;
  int n_kv, keys_cap;
  wtensor *t;
  int n_t, t_cap;
  uint32_t alignment;
};

lt_gguf_writer *lt_gguf_writer_new(void) {
  lt_gguf_writer *w = calloc(1, sizeof *w);
  if (!w) return lt__err(LT_ERR_NOMEM, "gguf_writer_new: out of memory"), NULL;
  w->alignment = LT_GGUF_DEFAULT_ALIGNMENT;
  return w;
}

void lt_gguf_writer_free(lt_gguf_writer *w) {
  if (!w) return;
  free(w->kv);
  for (int i = 0; i < w->n_kv; i++) free(w->keys[i]);
  free(w->keys);
  for (int i = 0; i < w->n_t; i++) free(w->t[i].name), free(w->t[i].bytes);
  free(w->t);
  free(w);
}

static lt_status put(lt_gguf_writer *w, const void *p, size_t n) {
  if (n > SIZE_MAX - w->kv_len) return lt__err(LT_ERR_NOMEM, "gguf_writer: pairs too large");
  if (w->kv_len + n > w->kv_cap) {
    size_t cap = w->kv_cap ? w->kv_cap : 4096;
    while (cap < w->kv_len + n) cap = cap > SIZE_MAX / 2 ? w->kv_len + n : 2 * cap;
    unsigned char *nb = realloc(w->kv, cap);
    if (!nb) return lt__err(LT_ERR_NOMEM, "gguf_writer: out of memory for the pairs (%zu bytes)", cap);
    w->kv = nb, w->kv_cap = cap;
  }
  memcpy(w->kv + w->kv_len, p, n);
  w->kv_len += n;
  return LT_OK;
}
static lt_status put_u32(lt_gguf_writer *w, uint32_t v) {
  unsigned char b[4];
  lt__put_le32(b, v);
  return put(w, b, 4);
}
static lt_status put_u64(lt_gguf_writer *w, uint64_t v) {
  unsigned char b[8];
  lt__put_le64(b, v);
  return put(w, b, 8);
}
static lt_status put_str(lt_gguf_writer *w, const char *s, size_t len) {
  lt_status st = put_u64(w, len);
  return st == LT_OK ? put(w, s, len) : st;
}

/* Starts pair key of type t: checks and records the key, writes key and type. */
static lt_status begin_kv(lt_gguf_writer *w, const char *key, lt_gguf_type t) {
  if (!w || !key) return lt__err(LT_ERR_NULL, "gguf_set: w or key is NULL");
  const size_t len = strlen(key);
  if (len == 0 || len > LT_GGUF_MAX_NAME)
    return lt__err(LT_ERR_INVALID, "gguf_set: key '%.64s' is %zu bytes (1 to %d)", key, len, LT_GGUF_MAX_NAME);
  for (int i = 0; i < w->n_kv; i++)
    if (strcmp(w->keys[i], key) == 0) return lt__err(LT_ERR_INVALID, "gguf_set: key '%s' is given twice", key);
  if (w->n_kv == w->keys_cap) {
    int cap = w->keys_cap ? 2 * w->keys_cap : 32;
    char **nk = realloc(w->keys, (size_t)cap * sizeof *nk);
    if (!nk) return lt__err(LT_ERR_NOMEM, "gguf_set: out of memory");
    w->keys = nk, w->keys_cap = cap;
  }
  if (!(w->keys[w->n_kv] = strdup(key))) return lt__err(LT_ERR_NOMEM, "gguf_set: out of memory");
  w->n_kv++;
  lt_status s = put_str(w, key, len);
  return s == LT_OK ? put_u32(w, (uint32_t)t) : s;
}

lt_status lt_gguf_set_u32(lt_gguf_writer *w, const char *key, uint32_t v) {
  if (key && strcmp(key, "general.alignment") == 0 && (v == 0 || (v & (v - 1)) != 0))
    return lt__err(LT_ERR_INVALID, "gguf_set: general.alignment %u is not a power of two", v);
  lt_status s = begin_kv(w, key, LT_GGUF_UINT32);
  if (s == LT_OK && strcmp(key, "general.alignment") == 0) w->alignment = v;
  return s == LT_OK ? put_u32(w, v) : s;
}
lt_status lt_gguf_set_i32(lt_gguf_writer *w, const char *key, int32_t v) {
  lt_status s = begin_kv(w, key, LT_GGUF_INT32);
  return s == LT_OK ? put_u32(w, (uint32_t)v) : s;
}
lt_status lt_gguf_set_u64(lt_gguf_writer *w, const char *key, uint64_t v) {
  lt_status s = begin_kv(w, key, LT_GGUF_UINT64);
  return s == LT_OK ? put_u64(w, v) : s;
}
lt_status lt_gguf_set_f32(lt_gguf_writer *w, const char *key, float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  lt_status s = begin_kv(w, key, LT_GGUF_FLOAT32);
  return s == LT_OK ? put_u32(w, u) : s;
}
lt_status lt_gguf_set_bool(lt_gguf_writer *w, const char *key, bool v) {
  const unsigned char b = v ? 1 : 0;
  lt_status s = begin_kv(w, key, LT_GGUF_BOOL);
  return s == LT_OK ? put(w, &b, 1) : s;
}
lt_status lt_gguf_set_str_n(lt_gguf_writer *w, const char *key, const char *str, size_t len) {
  if (!str && len) return lt__err(LT_ERR_NULL, "gguf_set: '%s': the string is NULL", key ? key : "?");
  lt_status s = begin_kv(w, key, LT_GGUF_STRING);
  return s == LT_OK ? put_str(w, str ? str : "", len) : s;
}
lt_status lt_gguf_set_str(lt_gguf_writer *w, const char *key, const char *str) {
  if (!str) return lt__err(LT_ERR_NULL, "gguf_set: '%s': the string is NULL", key ? key : "?");
  return lt_gguf_set_str_n(w, key, str, strlen(str));
}
static lt_status begin_arr(lt_gguf_writer *w, const char *key, lt_gguf_type elem, uint64_t n, const void *v) {
  if (n && !v) return lt__err(LT_ERR_NULL, "gguf_set: '%s': the array is NULL", key ? key : "?");
  lt_status s = begin_kv(w, key, LT_GGUF_ARRAY);
  if (s == LT_OK) s = put_u32(w, (uint32_t)elem);
  return s == LT_OK ? put_u64(w, n) : s;
}
lt_status lt_gguf_set_arr_str(lt_gguf_writer *w, const char *key, uint64_t n, const char *const *strs,
                              const size_t *lens) {
  lt_status s = begin_arr(w, key, LT_GGUF_STRING, n, strs);
  for (uint64_t j = 0; j < n && s == LT_OK; j++) {
    if (!strs[j]) return lt__err(LT_ERR_NULL, "gguf_set: '%s': string %llu is NULL", key, (unsigned long long)j);
    s = put_str(w, strs[j], lens ? lens[j] : strlen(strs[j]));
  }
  return s;
}
lt_status lt_gguf_set_arr_i32(lt_gguf_writer *w, const char *key, uint64_t n, const int32_t *v) {
  lt_status s = begin_arr(w, key, LT_GGUF_INT32, n, v);
  for (uint64_t j = 0; j < n && s == LT_OK; j++) s = put_u32(w, (uint32_t)v[j]);
  return s;
}
lt_status lt_gguf_set_arr_f32(lt_gguf_writer *w, const char *key, uint64_t n, const float *v) {
  lt_status s = begin_arr(w, key, LT_GGUF_FLOAT32, n, v);
  for (uint64_t j = 0; j < n && s == LT_OK; j++) {
    uint32_t u;
    memcpy(&u, &v[j], 4);
    s = put_u32(w, u);
  }
  return s;
}

/* Checks name and shape of a new tensor and reserves its slot (bytes unset). */
static lt_status new_tensor(lt_gguf_writer *w, const char *name, int type, int ndim, const int64_t *shape,
                            wtensor **out, int64_t *numel, size_t *nbytes) {
  if (!w || !name || !shape) return lt__err(LT_ERR_NULL, "gguf_add_tensor: w, name or shape is NULL");
  const size_t len = strlen(name);
  if (len == 0 || len > GGUF_TENSOR_NAME_MAX)
    return lt__err(LT_ERR_INVALID, "gguf_add_tensor: name '%.80s' is %zu bytes (1 to %d)", name, len, GGUF_TENSOR_NAME_MAX);
  if (ndim < 1 || ndim > 4) return lt__err(LT_ERR_INVALID, "gguf_add_tensor '%s': ndim %d (1 to 4)", name, ndim);
  for (int i = 0; i < w->n_t; i++)
    if (strcmp(w->t[i].name, name) == 0) return lt__err(LT_ERR_INVALID, "gguf_add_tensor: '%s' is given twice", name);
  lt_status s = lt__shape_numel("gguf_add_tensor", ndim, shape, numel);
  uint64_t nb;
  char who[128];
  snprintf(who, sizeof who, "gguf_add_tensor '%s'", name);
  if (s != LT_OK || (s = type_nbytes(type, shape[ndim - 1], *numel, &nb, who)) != LT_OK) return s;
  if (w->n_t == w->t_cap) {
    int cap = w->t_cap ? 2 * w->t_cap : 64;
    wtensor *nt = realloc(w->t, (size_t)cap * sizeof *nt);
    if (!nt) return lt__err(LT_ERR_NOMEM, "gguf_add_tensor: out of memory");
    w->t = nt, w->t_cap = cap;
  }
  wtensor *t = &w->t[w->n_t];
  memset(t, 0, sizeof *t);
  if (!(t->name = strdup(name)) || !(t->bytes = malloc(nb ? (size_t)nb : 1))) {
    free(t->name);
    return lt__err(LT_ERR_NOMEM, "gguf_add_tensor '%s': %llu bytes", name, (unsigned long long)nb);
  }
  t->type = type, t->ndim = ndim, t->nbytes = (size_t)nb;
  for (int k = 0; k < ndim; k++) t->ne[k] = shape[ndim - 1 - k];
  *out = t, *nbytes = (size_t)nb;
  return LT_OK;
}

lt_status lt_gguf_add_tensor_bytes(lt_gguf_writer *w, const char *name, int type, int ndim, const int64_t *shape,
                                   const void *bytes, size_t nbytes) {
  wtensor *t;
  int64_t numel;
  size_t want;
  if (!bytes && nbytes) return lt__err(LT_ERR_NULL, "gguf_add_tensor_bytes: bytes is NULL");
  lt_status s = new_tensor(w, name, type, ndim, shape, &t, &numel, &want);
  if (s != LT_OK) return s;
  if (want != nbytes) {
    free(t->name), free(t->bytes);
    return lt__err(LT_ERR_INVALID, "gguf_add_tensor_bytes '%s': %zu bytes given, %s %s needs %zu", name, nbytes,
                   lt_ggml_type_name(type), LT__S(ndim, shape), want);
  }
  memcpy(t->bytes, bytes, nbytes);
  w->n_t++;
  return LT_OK;
}

lt_status lt_gguf_add_tensor(lt_gguf_writer *w, const char *name, int type, int ndim, const int64_t *shape,
                             const lt_tensor *x) {
  if (!x) return lt__err_null("gguf_add_tensor", "t");
  wtensor *t;
  int64_t numel;
  size_t nb;
  lt_status s = new_tensor(w, name, type, ndim, shape, &t, &numel, &nb);
  if (s != LT_OK) return s;
  lt_tensor *tmp = NULL;
  const lt_tensor *c = NULL;
  if (numel != x->numel)
    s = lt__err(LT_ERR_SHAPE, "gguf_add_tensor '%s': shape %s for a tensor %s", name, LT__S(ndim, shape), LT__D(x));
  else if (type == LT_GGML_F16)
    s = lt__err(LT_ERR_DTYPE, "gguf_add_tensor '%s': F16 is read, not written (F32, BF16, Q8_0, Q4_0)", name);
  else if (!(c = lt__as_contig(x, LT_DTYPE_F32, &tmp)))
    s = lt_last_status();
  if (s == LT_OK && (type == LT_GGML_Q8_0 || type == LT_GGML_Q4_0)) {
    /* row by row with ggml's reference rounding (tensor/quant.h) */
    const lt_qformat q = type == LT_GGML_Q8_0 ? LT_QFORMAT_Q8_0 : LT_QFORMAT_Q4_0;
    const int64_t K = shape[ndim - 1], rows = K ? numel / K : 0;
    const size_t rb = (size_t)(K / 32) * lt_qformat_block_bytes(q);
    for (int64_t r = 0; r < rows && s == LT_OK; r++)
      s = lt_quantize_row(q, (const float *)c->data + r * K, K, t->bytes + (size_t)r * rb);
  } else if (s == LT_OK) {
    const float *v = c->data;
    for (int64_t k = 0; k < numel; k++) {
      if (type == LT_GGML_F32) {
        uint32_t u;
        memcpy(&u, &v[k], 4);
        lt__put_le32(t->bytes + 4 * k, u);
      } else {
        lt__put_le16(t->bytes + 2 * k, lt__bf16_from_f32(v[k]));
      }
    }
  }
  if (s == LT_OK) {
    w->n_t++;
  } else {
    free(t->name), free(t->bytes);
  }
  lt_tensor_free(tmp);
  return s;
}

lt_status lt_gguf_write(const lt_gguf_writer *w, const char *path) {
  if (!w || !path) return lt__err(LT_ERR_NULL, "gguf_write: w or path is NULL");
  const uint64_t A = w->alignment;
  /* sizes: header, pairs, tensor infos, padding, data (each tensor padded to A) */
  uint64_t info = 0, data = 0;
  for (int i = 0; i < w->n_t; i++) {
    info += 8 + strlen(w->t[i].name) + 4 + 8 * (uint64_t)w->t[i].ndim + 4 + 8;
    data += (w->t[i].nbytes + A - 1) / A * A;
  }
  const uint64_t head = 24 + w->kv_len + info, start = (head + A - 1) / A * A, total = start + data;
  if (total > SIZE_MAX) return lt__err(LT_ERR_NOMEM, "gguf_write '%s': %llu bytes", path, (unsigned long long)total);
  unsigned char *buf = calloc(1, (size_t)total);
  if (!buf) return lt__err(LT_ERR_NOMEM, "gguf_write '%s': %llu bytes", path, (unsigned long long)total);
  unsigned char *p = buf;
  memcpy(p, GGUF_MAGIC, 4);
  lt__put_le32(p + 4, 3);
  lt__put_le64(p + 8, (uint64_t)w->n_t);
  lt__put_le64(p + 16, (uint64_t)w->n_kv);
  p += 24;
  if (w->kv_len) memcpy(p, w->kv, w->kv_len);
  p += w->kv_len;
  uint64_t off = 0;
  for (int i = 0; i < w->n_t; i++) {
    const wtensor *t = &w->t[i];
    const size_t len = strlen(t->name);
    lt__put_le64(p, len), memcpy(p + 8, t->name, len), p += 8 + len;
    lt__put_le32(p, (uint32_t)t->ndim), p += 4;
    for (int k = 0; k < t->ndim; k++) lt__put_le64(p, (uint64_t)t->ne[k]), p += 8;
    lt__put_le32(p, (uint32_t)t->type), p += 4;
    lt__put_le64(p, off), p += 8;
    memcpy(buf + start + off, t->bytes, t->nbytes);
    off += (t->nbytes + A - 1) / A * A;
  }
  lt__tmpfile tmp;
  lt_status s = lt__tmp_begin(path, &tmp);
  if (s == LT_OK) s = lt__tmp_commit(&tmp, buf, (size_t)total);
  free(buf);
  return s;
}
