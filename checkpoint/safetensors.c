/*
 * checkpoint/safetensors.c: the safetensors reader and writer of
 * checkpoint/safetensors.h. The header is JSON, parsed and written by
 * jansson; everything a file says is checked before a tensor byte is read:
 * the header length cap, the fields of every entry, dtype size x shape
 * against the byte range (checked arithmetic), and the ranges against each
 * other (sorted by offset, they must tile the data section: no overlap, no
 * gap, nothing outside it). The rules and messages are those of
 * python/libtensor/safetensors_spec.json (the Python reader's too): a change
 * to a check or a message here changes the spec, and the suites compare.
 *
 * What this is not: a name mapping (models/transformer/hf.c), nor a writer
 * of 16-bit dtypes (the dtype table below is the one place to add them).
 */
#include "checkpoint/safetensors.h"

#include <errno.h>
#include <jansson.h>
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

/* ---- the dtype table: the file's name, the element size, the native
 * libtensor dtype (or -1: converted to f32 on load, never written) and the
 * kind. */
typedef struct st_dtype_row {
  const char *name;
  size_t size;
  int native; /* an lt_dtype, or -1 */
  bool is_float;
} st_dtype_row;

static const st_dtype_row st_dtypes[LT_ST_DTYPE_COUNT] = {
    [LT_ST_F32] = {"F32", 4, LT_DTYPE_F32, true},  [LT_ST_F64] = {"F64", 8, LT_DTYPE_F64, true},
    [LT_ST_F16] = {"F16", 2, -1, true},            [LT_ST_BF16] = {"BF16", 2, LT_DTYPE_BF16, true},
    [LT_ST_I32] = {"I32", 4, LT_DTYPE_I32, false}, [LT_ST_I64] = {"I64", 8, LT_DTYPE_I64, false},
};

const char *lt_st_dtype_name(lt_st_dtype d) {
  return (unsigned)d < LT_ST_DTYPE_COUNT ? st_dtypes[d].name : "unknown";
}
size_t lt_st_dtype_size(lt_st_dtype d) { return (unsigned)d < LT_ST_DTYPE_COUNT ? st_dtypes[d].size : 0; }

bool lt_st_dtype_loads_into(lt_st_dtype src, lt_dtype dst) {
  if ((unsigned)src >= LT_ST_DTYPE_COUNT) return false;
  if (st_dtypes[src].is_float)
    return dst == LT_DTYPE_F64 || (dst == LT_DTYPE_F32 && src != LT_ST_F64) || (dst == LT_DTYPE_BF16 && src == LT_ST_BF16);
  return dst == LT_DTYPE_I64 || (dst == LT_DTYPE_I32 && src == LT_ST_I32);
}

static bool host_is_le(void) {
  const uint16_t one = 1;
  unsigned char b;
  memcpy(&b, &one, 1);
  return b == 1;
}

/* ---- the open file --------------------------------------------------------- */

struct lt_st_file {
  char *path;
  lt__file_map file; /* the whole file: mapped, or read */
  const unsigned char *data; /* the data section */
  uint64_t data_len;
  int n;
  lt_st_tensor_info *t; /* sorted by begin */
  int n_meta;
  char **meta_key, **meta_val;
};

void lt_st_close(lt_st_file *f) {
  if (!f) return;
  lt__unmap(&f->file);
  for (int i = 0; i < f->n; i++) free((char *)f->t[i].name);
  free(f->t);
  for (int i = 0; i < f->n_meta; i++) free(f->meta_key[i]), free(f->meta_val[i]);
  free(f->meta_key);
  free(f->meta_val);
  free(f->path);
  free(f);
}

#define BAD(...) lt__err(LT_ERR_FORMAT, __VA_ARGS__)

/* A non-negative JSON integer (jansson refuses integers beyond int64 while parsing). */
static bool get_u64(const json_t *v, uint64_t *out) {
  if (!json_is_integer(v) || json_integer_value(v) < 0) return false;
  *out = (uint64_t)json_integer_value(v);
  return true;
}

static lt_status parse_entry(const lt_st_file *f, const char *name, json_t *e, lt_st_tensor_info *ti) {
  const char *P = f->path;
  if (!json_is_object(e)) return BAD("safetensors '%s': tensor '%s': its entry is not a JSON object", P, name);
  const char *key;
  json_t *v;
  json_object_foreach(e, key, v) {
    if (strcmp(key, "dtype") && strcmp(key, "shape") && strcmp(key, "data_offsets"))
      return BAD("safetensors '%s': tensor '%s': unknown field '%s' (expected dtype, shape, data_offsets)", P, name,
                 key);
  }
  json_t *dt = json_object_get(e, "dtype"), *sh = json_object_get(e, "shape"), *off = json_object_get(e, "data_offsets");
  if (!dt || !sh || !off)
    return BAD("safetensors '%s': tensor '%s': field '%s' is missing", P, name,
               !dt ? "dtype" : !sh ? "shape" : "data_offsets");
  if (!json_is_string(dt)) return BAD("safetensors '%s': tensor '%s': field 'dtype' is not a string", P, name);
  int d = -1;
  for (int k = 0; k < LT_ST_DTYPE_COUNT; k++)
    if (strcmp(json_string_value(dt), st_dtypes[k].name) == 0) d = k;
  if (d < 0)
    return lt__err(LT_ERR_DTYPE,
                   "safetensors '%s': tensor '%s': field 'dtype' is \"%.32s\": libtensor reads F32, F64, F16, BF16, "
                   "I32 and I64",
                   P, name, json_string_value(dt));
  ti->dtype = (lt_st_dtype)d;
  if (!json_is_array(sh)) return BAD("safetensors '%s': tensor '%s': field 'shape' is not an array", P, name);
  if (json_array_size(sh) > LT_MAX_DIMS)
    return BAD("safetensors '%s': tensor '%s': field 'shape' has %zu dimensions (at most %d)", P, name,
               json_array_size(sh), LT_MAX_DIMS);
  ti->ndim = (int)json_array_size(sh);
  int64_t numel = 1;
  for (int k = 0; k < ti->ndim; k++) {
    uint64_t dim;
    if (!get_u64(json_array_get(sh, (size_t)k), &dim))
      return BAD("safetensors '%s': tensor '%s': field 'shape' entry %d is not a non-negative integer", P, name, k);
    ti->shape[k] = (int64_t)dim;
    if (__builtin_mul_overflow(numel, (int64_t)dim, &numel))
      return lt__err(LT_ERR_OVERFLOW, "safetensors '%s': tensor '%s': field 'shape' %s: the element count overflows",
                     P, name, LT__S(ti->ndim, ti->shape));
  }
  ti->numel = numel;
  uint64_t nbytes;
  if (__builtin_mul_overflow((uint64_t)numel, (uint64_t)st_dtypes[d].size, &nbytes))
    return lt__err(LT_ERR_OVERFLOW, "safetensors '%s': tensor '%s': field 'shape' %s x %zu bytes overflows", P, name,
                   LT__S(ti->ndim, ti->shape), st_dtypes[d].size);
  if (!json_is_array(off) || json_array_size(off) != 2 || !get_u64(json_array_get(off, 0), &ti->begin) ||
      !get_u64(json_array_get(off, 1), &ti->end))
    return BAD("safetensors '%s': tensor '%s': field 'data_offsets' is not [begin, end] of non-negative integers", P,
               name);
  if (ti->end < ti->begin)
    return BAD("safetensors '%s': tensor '%s': field 'data_offsets' [%llu, %llu] ends before it begins", P, name,
               (unsigned long long)ti->begin, (unsigned long long)ti->end);
  if (ti->end - ti->begin != nbytes)
    return BAD("safetensors '%s': tensor '%s': field 'data_offsets' [%llu, %llu] holds %llu bytes, but dtype %s x "
               "shape %s is %llu bytes",
               P, name, (unsigned long long)ti->begin, (unsigned long long)ti->end,
               (unsigned long long)(ti->end - ti->begin), st_dtypes[d].name, LT__S(ti->ndim, ti->shape),
               (unsigned long long)nbytes);
  if (ti->end > f->data_len)
    return BAD("safetensors '%s': tensor '%s': field 'data_offsets' [%llu, %llu] is outside the data section of %llu "
               "bytes (file truncated?)",
               P, name, (unsigned long long)ti->begin, (unsigned long long)ti->end,
               (unsigned long long)f->data_len);
  return LT_OK;
}

static int by_begin(const void *a, const void *b) {
  const lt_st_tensor_info *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return x->end < y->end ? -1 : x->end > y->end;
}

static lt_status parse_metadata(lt_st_file *f, json_t *m) {
  if (!json_is_object(m)) return BAD("safetensors '%s': field '__metadata__' is not a JSON object", f->path);
  size_t n = json_object_size(m);
  f->meta_key = calloc(n ? n : 1, sizeof *f->meta_key);
  f->meta_val = calloc(n ? n : 1, sizeof *f->meta_val);
  if (!f->meta_key || !f->meta_val) return lt__err(LT_ERR_NOMEM, "safetensors '%s': metadata", f->path);
  const char *key;
  json_t *v;
  json_object_foreach(m, key, v) {
    if (!json_is_string(v))
      return BAD("safetensors '%s': field '__metadata__': the value of '%s' is not a string", f->path, key);
    f->meta_key[f->n_meta] = strdup(key);
    f->meta_val[f->n_meta] = strdup(json_string_value(v));
    f->n_meta++;
    if (!f->meta_key[f->n_meta - 1] || !f->meta_val[f->n_meta - 1])
      return lt__err(LT_ERR_NOMEM, "safetensors '%s': metadata", f->path);
  }
  return LT_OK;
}

static lt_status parse_header(lt_st_file *f, const char *json, size_t len) {
  json_error_t jerr;
  /* Duplicate names are refused by the parser; NUL inside strings too. */
  json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!root)
    return BAD("safetensors '%s': the JSON header (%zu bytes) does not parse: %s at byte %d", f->path, len, jerr.text,
               jerr.position);
  lt_status s = LT_OK;
  if (!json_is_object(root)) {
    s = BAD("safetensors '%s': the JSON header is not an object", f->path);
    goto done;
  }
  size_t n = json_object_size(root);
  f->t = calloc(n ? n : 1, sizeof *f->t);
  if (!f->t) {
    s = lt__err(LT_ERR_NOMEM, "safetensors '%s': %zu header entries", f->path, n);
    goto done;
  }
  const char *key;
  json_t *v;
  json_object_foreach(root, key, v) {
    if (strcmp(key, "__metadata__") == 0) {
      if ((s = parse_metadata(f, v)) != LT_OK) goto done;
      continue;
    }
    if (!key[0]) {
      s = BAD("safetensors '%s': a tensor has an empty name", f->path);
      goto done;
    }
    lt_st_tensor_info *ti = &f->t[f->n];
    if ((s = parse_entry(f, key, v, ti)) != LT_OK) goto done;
    if (!(ti->name = strdup(key))) {
      s = lt__err(LT_ERR_NOMEM, "safetensors '%s': names", f->path);
      goto done;
    }
    f->n++;
  }
  /* Sorted by offset, the ranges must tile [0, data_len) exactly. */
  qsort(f->t, (size_t)f->n, sizeof *f->t, by_begin);
  uint64_t at = 0;
  for (int i = 0; i < f->n; i++) {
    const lt_st_tensor_info *ti = &f->t[i];
    if (ti->begin < at) {
      s = BAD("safetensors '%s': tensor '%s': field 'data_offsets' [%llu, %llu] overlaps tensor '%s' (which ends at "
              "%llu)",
              f->path, ti->name, (unsigned long long)ti->begin, (unsigned long long)ti->end, f->t[i - 1].name,
              (unsigned long long)at);
      goto done;
    }
    if (ti->begin > at) {
      s = BAD("safetensors '%s': tensor '%s': field 'data_offsets' begins at %llu, leaving a gap of %llu bytes after "
              "%s%s%s",
              f->path, ti->name, (unsigned long long)ti->begin, (unsigned long long)(ti->begin - at),
              i ? "tensor '" : "the start of the data section", i ? f->t[i - 1].name : "", i ? "'" : "");
      goto done;
    }
    at = ti->end;
  }
  if (at != f->data_len)
    s = BAD("safetensors '%s': the tensors cover %llu bytes of a data section of %llu: %llu bytes at the end belong "
            "to no tensor",
            f->path, (unsigned long long)at, (unsigned long long)f->data_len, (unsigned long long)(f->data_len - at));
done:
  json_decref(root);
  return s;
}

lt_st_file *lt_st_open(const char *path) {
  if (!path) return lt__err(LT_ERR_NULL, "safetensors_open: path is NULL"), NULL;
  lt_st_file *f = calloc(1, sizeof *f);
  if (!f || !(f->path = strdup(path))) {
    free(f);
    return lt__err(LT_ERR_NOMEM, "safetensors_open: out of memory"), NULL;
  }
  lt_status s = lt__map_regular(path, "safetensors_open", LT_ERR_FORMAT, &f->file);
  if (s != LT_OK) {
    lt_st_close(f);
    return NULL;
  }
  const unsigned char *bytes = f->file.bytes;
  const size_t size = f->file.size;
  if (size < 8) {
    s = BAD("safetensors '%s': %zu bytes: too short for the 8-byte header length", path, size);
    goto out;
  }
  const uint64_t hlen = lt__get_le64(bytes);
  if (hlen > LT_ST_MAX_HEADER) {
    s = BAD("safetensors '%s': header length %llu exceeds the cap of %u bytes", path, (unsigned long long)hlen,
            LT_ST_MAX_HEADER);
    goto out;
  }
  if (hlen > size - 8) {
    s = BAD("safetensors '%s': header length %llu runs past the end of the %zu-byte file (truncated?)", path,
            (unsigned long long)hlen, size);
    goto out;
  }
  f->data = bytes + 8 + hlen;
  f->data_len = size - 8 - hlen;
  s = parse_header(f, (const char *)bytes + 8, (size_t)hlen);
out:
  if (s != LT_OK) {
    lt_st_close(f);
    return NULL;
  }
  return f;
}

#undef BAD

int lt_st_count(const lt_st_file *f) { return f ? f->n : 0; }
const lt_st_tensor_info *lt_st_info(const lt_st_file *f, int i) {
  return f && i >= 0 && i < f->n ? &f->t[i] : NULL;
}
int lt_st_find(const lt_st_file *f, const char *name) {
  if (!f || !name) return -1;
  for (int i = 0; i < f->n; i++)
    if (strcmp(f->t[i].name, name) == 0) return i;
  return -1;
}
const void *lt_st_data(const lt_st_file *f, int i) {
  return f && i >= 0 && i < f->n ? f->data + f->t[i].begin : NULL;
}
bool lt_st_is_mapped(const lt_st_file *f) { return f && f->file.mapped; }
int lt_st_metadata_count(const lt_st_file *f) { return f ? f->n_meta : 0; }
const char *lt_st_metadata_key(const lt_st_file *f, int i) {
  return f && i >= 0 && i < f->n_meta ? f->meta_key[i] : NULL;
}
const char *lt_st_metadata_value(const lt_st_file *f, int i) {
  return f && i >= 0 && i < f->n_meta ? f->meta_val[i] : NULL;
}
const char *lt_st_metadata_get(const lt_st_file *f, const char *key) {
  if (!f || !key) return NULL;
  for (int i = 0; i < f->n_meta; i++)
    if (strcmp(f->meta_key[i], key) == 0) return f->meta_val[i];
  return NULL;
}

/* ---- loading a tensor ------------------------------------------------------ */

/* Element k of the file's little-endian bytes, as double (floats) or int64. */
static uint64_t le_bits(const unsigned char *p, size_t size) {
  uint64_t v = 0;
  for (size_t b = 0; b < size; b++) v |= (uint64_t)p[b] << (8 * b);
  return v;
}

static double load_float(lt_st_dtype d, const unsigned char *p) {
  switch (d) {
    case LT_ST_F16: return lt_f32_from_f16((uint16_t)le_bits(p, 2));
    case LT_ST_BF16: return lt__f32_from_bf16((uint16_t)le_bits(p, 2));
    case LT_ST_F32: {
      const uint32_t u = (uint32_t)le_bits(p, 4);
      float x;
      memcpy(&x, &u, 4);
      return x;
    }
    default: {
      uint64_t u = le_bits(p, 8);
      double x;
      memcpy(&x, &u, 8);
      return x;
    }
  }
}

/* Converts n elements of src (file dtype d, little-endian) into dst (dtype dt). */
static void convert(lt_st_dtype d, const unsigned char *src, int64_t n, lt_dtype dt, void *dst) {
  const size_t es = st_dtypes[d].size;
  if (st_dtypes[d].native == (int)dt && host_is_le()) {
    memcpy(dst, src, (size_t)n * es); /* straight from the mapping */
    return;
  }
  for (int64_t k = 0; k < n; k++) {
    const unsigned char *p = src + (size_t)k * es;
    switch (dt) {
      case LT_DTYPE_F32: ((float *)dst)[k] = (float)load_float(d, p); break;
      case LT_DTYPE_F64: ((double *)dst)[k] = load_float(d, p); break;
      case LT_DTYPE_BF16: ((uint16_t *)dst)[k] = (uint16_t)le_bits(p, 2); break; /* from BF16 only */
      case LT_DTYPE_I32: ((int32_t *)dst)[k] = (int32_t)(uint32_t)le_bits(p, 4); break;
      default: {
        uint64_t u = le_bits(p, es);
        if (es == 4) u = (uint64_t)(int64_t)(int32_t)(uint32_t)u; /* sign-extend I32 */
        ((int64_t *)dst)[k] = (int64_t)u;
        break;
      }
    }
  }
}

static lt_status check_into(const lt_st_file *f, int i, const lt_tensor *dst) {
  if (!f) return lt__err(LT_ERR_NULL, "safetensors_read: f is NULL");
  if (!dst) return lt__err_null("safetensors_read", "dst");
  if (i < 0 || i >= f->n)
    return lt__err(LT_ERR_INDEX, "safetensors '%s': tensor index %d of %d", f->path, i, f->n);
  const lt_st_tensor_info *ti = &f->t[i];
  bool same = ti->ndim == dst->ndim;
  for (int k = 0; same && k < ti->ndim; k++) same = ti->shape[k] == dst->shape[k];
  if (!same)
    return lt__err(LT_ERR_SHAPE, "safetensors '%s': tensor '%s': shape %s in the file, %s expected", f->path, ti->name,
                   LT__S(ti->ndim, ti->shape), LT__S(dst->ndim, dst->shape));
  if (!lt_st_dtype_loads_into(ti->dtype, dst->dtype))
    return lt__err(LT_ERR_DTYPE, "safetensors '%s': tensor '%s': dtype %s in the file does not load into %s", f->path,
                   ti->name, st_dtypes[ti->dtype].name, lt_dtype_name(dst->dtype));
  if (!lt_is_contiguous(dst))
    return lt__err(LT_ERR_INVALID, "safetensors '%s': tensor '%s': the destination %s is not contiguous", f->path,
                   ti->name, LT__D(dst));
  return LT_OK;
}

lt_status lt_st_check_finite(const lt_st_file *f, int i) {
  if (!f) return lt__err(LT_ERR_NULL, "safetensors_check_finite: f is NULL");
  if (i < 0 || i >= f->n) return lt__err(LT_ERR_INDEX, "safetensors '%s': tensor index %d of %d", f->path, i, f->n);
  const lt_st_tensor_info *ti = &f->t[i];
  if (!st_dtypes[ti->dtype].is_float) return LT_OK;
  const unsigned char *p = f->data + ti->begin;
  const size_t es = st_dtypes[ti->dtype].size;
  const int64_t slice = (int64_t)((1u << 20) / es); /* 1 MiB at a time, released once read */
  for (int64_t k0 = 0; k0 < ti->numel; k0 += slice) {
    const int64_t k1 = ti->numel - k0 < slice ? ti->numel : k0 + slice;
    for (int64_t k = k0; k < k1; k++) {
      const double v = load_float(ti->dtype, p + (size_t)k * es);
      if (!isfinite(v))
        return lt__err(LT_ERR_NUMERIC, "safetensors '%s': tensor '%s' holds %s at flat index %lld: refused (non-finite "
                       "weights)", f->path, ti->name, isnan(v) ? "NaN" : v > 0 ? "+inf" : "-inf", (long long)k);
    }
    lt__map_release(&f->file, p + (size_t)k0 * es, (size_t)(k1 - k0) * es);
  }
  return LT_OK;
}

lt_status lt_st_read_into(const lt_st_file *f, int i, lt_tensor *dst) {
  lt_status s = check_into(f, i, dst);
  if (s == LT_OK) s = lt_st_check_finite(f, i);
  if (s != LT_OK) return s;
  convert(f->t[i].dtype, f->data + f->t[i].begin, f->t[i].numel, dst->dtype, dst->data);
  lt__bump_version(dst);
  return LT_OK;
}

lt_tensor *lt_st_tensor(const lt_st_file *f, int i, lt_dtype dtype) {
  if (!f) return lt__err(LT_ERR_NULL, "safetensors_tensor: f is NULL"), NULL;
  if (i < 0 || i >= f->n) return lt__err(LT_ERR_INDEX, "safetensors '%s': tensor index %d of %d", f->path, i, f->n), NULL;
  const lt_st_tensor_info *ti = &f->t[i];
  if (!lt_st_dtype_loads_into(ti->dtype, dtype))
    return lt__err(LT_ERR_DTYPE, "safetensors '%s': tensor '%s': dtype %s in the file does not load into %s", f->path,
                   ti->name, st_dtypes[ti->dtype].name, lt_dtype_name(dtype)),
           NULL;
  lt_tensor *t = lt_empty(dtype, ti->ndim, ti->shape);
  if (!t) return NULL;
  convert(ti->dtype, f->data + ti->begin, ti->numel, dtype, t->data);
  return t;
}

lt_status lt_st_read_rows_f32(const lt_st_file *f, int i, int64_t r0, int64_t count, float *dst) {
  if (!f) return lt__err(LT_ERR_NULL, "safetensors_read_rows: f is NULL");
  if (i < 0 || i >= f->n) return lt__err(LT_ERR_INDEX, "safetensors '%s': tensor index %d of %d", f->path, i, f->n);
  const lt_st_tensor_info *ti = &f->t[i];
  if (!lt_st_dtype_loads_into(ti->dtype, LT_DTYPE_F32))
    return lt__err(LT_ERR_DTYPE, "safetensors '%s': tensor '%s': dtype %s in the file does not load into f32", f->path,
                   ti->name, st_dtypes[ti->dtype].name);
  const int64_t rows = ti->ndim > 0 ? ti->shape[0] : 1, row = rows > 0 ? ti->numel / rows : 0;
  if (r0 < 0 || count < 0 || r0 > rows - count)
    return lt__err(LT_ERR_INDEX, "safetensors '%s': tensor '%s': rows [%lld, %lld + %lld) of %lld", f->path, ti->name,
                   (long long)r0, (long long)r0, (long long)count, (long long)rows);
  if (count > 0 && !dst) return lt__err_null("safetensors_read_rows", "dst");
  const size_t es = st_dtypes[ti->dtype].size;
  convert(ti->dtype, f->data + ti->begin + (size_t)(r0 * row) * es, count * row, LT_DTYPE_F32, dst);
  return LT_OK;
}

void lt_st_release(const lt_st_file *f, int i) {
  if (f && i >= 0 && i < f->n) lt__map_release(&f->file, f->data + f->t[i].begin, (size_t)(f->t[i].end - f->t[i].begin));
}

void lt_st_release_rows(const lt_st_file *f, int i, int64_t r0, int64_t count) {
  if (!f || i < 0 || i >= f->n) return;
  const lt_st_tensor_info *ti = &f->t[i];
  const int64_t rows = ti->ndim > 0 ? ti->shape[0] : 1, row = rows > 0 ? ti->numel / rows : 0;
  if (r0 < 0 || count <= 0 || r0 > rows - count) return;
  const size_t es = st_dtypes[ti->dtype].size;
  lt__map_release(&f->file, f->data + ti->begin + (size_t)(r0 * row) * es, (size_t)(count * row) * es);
}

lt_tensor *lt_st_view(const lt_st_file *f, int i) {
  if (!f) return lt__err(LT_ERR_NULL, "safetensors_view: f is NULL"), NULL;
  if (i < 0 || i >= f->n) return lt__err(LT_ERR_INDEX, "safetensors '%s': tensor index %d of %d", f->path, i, f->n), NULL;
  const lt_st_tensor_info *ti = &f->t[i];
  const int native = st_dtypes[ti->dtype].native;
  const unsigned char *p = f->data + ti->begin;
  if (native < 0)
    return lt__err(LT_ERR_INVALID, "safetensors '%s': tensor '%s': %s has no libtensor dtype to view it as (use "
                   "lt_st_tensor)", f->path, ti->name, st_dtypes[ti->dtype].name), NULL;
  if (!host_is_le() || (uintptr_t)p % st_dtypes[ti->dtype].size != 0)
    return lt__err(LT_ERR_INVALID, "safetensors '%s': tensor '%s': its bytes are not aligned for %s on this host (use "
                   "lt_st_tensor)", f->path, ti->name, st_dtypes[ti->dtype].name), NULL;
  return lt_tensor_from_borrowed((lt_dtype)native, ti->ndim, ti->shape, (void *)p);
}

/* ---- writing ---------------------------------------------------------------- */

static int st_dtype_of(lt_dtype dt) {
  for (int k = 0; k < LT_ST_DTYPE_COUNT; k++)
    if (st_dtypes[k].native == (int)dt) return k;
  return -1;
}

/* The little-endian bytes of a contiguous tensor into out. */
static void store_le(const lt_tensor *t, unsigned char *out) {
  const size_t es = lt_dtype_size(t->dtype), n = (size_t)t->numel * es;
  if (host_is_le()) {
    memcpy(out, t->data, n);
    return;
  }
  const unsigned char *src = t->data;
  for (size_t k = 0; k < n; k += es)
    for (size_t b = 0; b < es; b++) out[k + b] = src[k + es - 1 - b];
}

lt_status lt_st_save(const char *path, int n, const char *const *names, const lt_tensor *const *tensors, int n_meta,
                     const char *const *keys, const char *const *values) {
  if (!path) return lt__err(LT_ERR_NULL, "safetensors_save: path is NULL");
  if (n < 0 || n_meta < 0 || (n > 0 && (!names || !tensors)) || (n_meta > 0 && (!keys || !values)))
    return lt__err(LT_ERR_NULL, "safetensors_save '%s': names, tensors, keys or values NULL (or counts negative)", path);
  lt_status s = LT_OK;
  json_t *root = json_object(), *meta = NULL;
  lt_tensor **contig = calloc((size_t)n + 1, sizeof *contig);
  unsigned char *buf = NULL;
  if (!root || !contig) {
    s = lt__err(LT_ERR_NOMEM, "safetensors_save '%s': out of memory", path);
    goto out;
  }
  if (n_meta > 0) {
    meta = json_object();
    if (!meta || json_object_set_new(root, "__metadata__", meta)) {
      s = lt__err(LT_ERR_NOMEM, "safetensors_save '%s': metadata", path);
      goto out;
    }
    for (int k = 0; k < n_meta; k++) {
      if (!keys[k] || !values[k]) {
        s = lt__err(LT_ERR_NULL, "safetensors_save '%s': metadata entry %d is NULL", path, k);
        goto out;
      }
      if (json_object_get(meta, keys[k])) {
        s = lt__err(LT_ERR_INVALID, "safetensors_save '%s': metadata key '%s' given twice", path, keys[k]);
        goto out;
      }
      json_t *v = json_string(values[k]);
      if (!v || json_object_set_new(meta, keys[k], v)) {
        s = lt__err(LT_ERR_INVALID, "safetensors_save '%s': metadata '%s': not valid UTF-8?", path, keys[k]);
        goto out;
      }
    }
  }
  uint64_t at = 0;
  for (int i = 0; i < n; i++) {
    const char *nm = names[i];
    const lt_tensor *t = tensors[i];
    if (!nm || !nm[0] || strcmp(nm, "__metadata__") == 0) {
      s = lt__err(LT_ERR_INVALID, "safetensors_save '%s': tensor %d: name %s%s%s is not allowed", path, i,
                  nm ? "'" : "", nm ? nm : "NULL", nm ? "'" : "");
      goto out;
    }
    if (!t) {
      s = lt__err_null("safetensors_save", nm);
      goto out;
    }
    if (json_object_get(root, nm)) {
      s = lt__err(LT_ERR_INVALID, "safetensors_save '%s': tensor name '%s' given twice", path, nm);
      goto out;
    }
    const int d = st_dtype_of(t->dtype);
    if (d < 0) {
      s = lt__err(LT_ERR_DTYPE, "safetensors_save '%s': tensor '%s' is %s: safetensors from libtensor holds f32, f64, "
                  "i32 and i64", path, nm, LT__D(t));
      goto out;
    }
    if (!(contig[i] = lt_contiguous(t))) {
      s = lt_last_status();
      goto out;
    }
    const uint64_t nb = (uint64_t)t->numel * st_dtypes[d].size;
    json_t *shape = json_array(), *e = json_object();
    if (!shape || !e) {
      json_decref(shape), json_decref(e);
      s = lt__err(LT_ERR_NOMEM, "safetensors_save '%s': header", path);
      goto out;
    }
    for (int k = 0; k < t->ndim; k++) json_array_append_new(shape, json_integer(t->shape[k]));
    json_object_set_new(e, "dtype", json_string(st_dtypes[d].name));
    json_object_set_new(e, "shape", shape);
    json_object_set_new(e, "data_offsets", json_pack("[II]", (json_int_t)at, (json_int_t)(at + nb)));
    if (json_object_set_new(root, nm, e)) {
      s = lt__err(LT_ERR_INVALID, "safetensors_save '%s': tensor name '%s': not valid UTF-8?", path, nm);
      goto out;
    }
    at += nb;
  }
  char *hdr = json_dumps(root, JSON_COMPACT);
  if (!hdr) {
    s = lt__err(LT_ERR_NOMEM, "safetensors_save '%s': header", path);
    goto out;
  }
  size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8;
  if (padded > LT_ST_MAX_HEADER) {
    free(hdr);
    s = lt__err(LT_ERR_INVALID, "safetensors_save '%s': the header would be %zu bytes, over the cap %u", path, padded,
                LT_ST_MAX_HEADER);
    goto out;
  }
  size_t total = 8 + padded + (size_t)at;
  buf = malloc(total);
  if (!buf) {
    free(hdr);
    s = lt__err(LT_ERR_NOMEM, "safetensors_save '%s': %zu bytes", path, total);
    goto out;
  }
  lt__put_le64(buf, padded);
  memcpy(buf + 8, hdr, hl);
  memset(buf + 8 + hl, ' ', padded - hl);
  free(hdr);
  unsigned char *p = buf + 8 + padded;
  for (int i = 0; i < n; i++) {
    store_le(contig[i], p);
    p += (size_t)contig[i]->numel * lt_dtype_size(contig[i]->dtype);
  }
  lt__tmpfile tmp;
  if ((s = lt__tmp_begin(path, &tmp)) != LT_OK) goto out;
  s = lt__tmp_commit(&tmp, buf, total);
out:
  for (int i = 0; contig && i < n; i++) lt_tensor_free(contig[i]);
  free(contig);
  free(buf);
  json_decref(root);
  return s;
}

lt_status lt_st_save_params(const char *path, const lt_params *p, int n_meta, const char *const *keys,
                            const char *const *values) {
  if (!p) return lt__err(LT_ERR_NULL, "safetensors_save_params: p is NULL");
  if (lt_params_quantized(p))
    return lt__err(LT_ERR_STATE, "safetensors_save_params: the store holds quantized weights (lt_params_quantize): "
                                 "save the f32 model before quantizing it");
  const int n = lt_params_count(p);
  const char **names = calloc((size_t)n + 1, sizeof *names);
  const lt_tensor **ts = calloc((size_t)n + 1, sizeof *ts);
  lt_status s;
  if (!names || !ts) {
    s = lt__err(LT_ERR_NOMEM, "safetensors_save_params: out of memory");
  } else {
    for (int i = 0; i < n; i++) names[i] = lt_params_at(p, i)->name, ts[i] = lt_params_at(p, i)->value;
    s = lt_st_save(path, n, names, ts, n_meta, keys, values);
  }
  free(names);
  free((void *)ts);
  return s;
}

/* names[0..n) as "a, b, c" in buf, "... and N more" when they do not fit
 * (checkpoint/checkpoint.c lists a strict load's names the same way). */
static void list_names(char *buf, size_t size, const char *const *names, int n) {
  size_t k = 0;
  buf[0] = '\0';
  for (int i = 0; i < n; i++) {
    if (k + strlen(names[i]) + 2 + 24 >= size) {
      snprintf(buf + k, size - k, "%s... and %d more", i ? " " : "", n - i);
      return;
    }
    k += (size_t)snprintf(buf + k, size - k, "%s%s", i ? ", " : "", names[i]);
  }
}

lt_status lt_st_load_params(const char *path, lt_params *p) {
  if (!p) return lt__err(LT_ERR_NULL, "safetensors_load_params: p is NULL");
  lt_st_file *f = lt_st_open(path);
  if (!f) return lt_last_status();
  const int n = lt_params_count(p);
  lt_status s = LT_OK;
  int *idx = calloc((size_t)n + 1, sizeof *idx);
  if (!idx) {
    s = lt__err(LT_ERR_NOMEM, "safetensors_load_params: out of memory");
    goto out;
  }
  /* Everything matched before a value is written: the missing and the
   * unexpected names listed together (as the HDF5 loader's strict load
   * does), then shapes, dtypes and values. */
  const char **miss = calloc((size_t)n + 1, sizeof *miss), **unexp = calloc((size_t)f->n + 1, sizeof *unexp);
  int n_miss = 0, n_unexp = 0;
  if (!miss || !unexp) {
    free(miss), free(unexp);
    s = lt__err(LT_ERR_NOMEM, "safetensors_load_params: out of memory");
    goto out;
  }
  for (int i = 0; i < n; i++)
    if ((idx[i] = lt_st_find(f, lt_params_at(p, i)->name)) < 0) miss[n_miss++] = lt_params_at(p, i)->name;
  for (int k = 0; k < f->n; k++)
    if (!lt_params_find(p, f->t[k].name)) unexp[n_unexp++] = f->t[k].name;
  if (n_miss || n_unexp) {
    char a[480], b[480];
    list_names(a, sizeof a, miss, n_miss);
    list_names(b, sizeof b, unexp, n_unexp);
    s = lt__err(LT_ERR_INVALID, "safetensors '%s': the file does not match the model: %d missing from the file%s%s%s; "
                "%d not in the model%s%s%s", path, n_miss, n_miss ? " (" : "", a, n_miss ? ")" : "", n_unexp,
                n_unexp ? " (" : "", b, n_unexp ? ")" : "");
  }
  free(miss), free(unexp);
  if (s != LT_OK) goto out;
  for (int i = 0; i < n; i++) {
    if ((s = check_into(f, idx[i], lt_params_at(p, i)->value)) != LT_OK) goto out;
    if ((s = lt_st_check_finite(f, idx[i])) != LT_OK) goto out;
  }
  for (int i = 0; i < n; i++) lt_st_read_into(f, idx[i], lt_params_at(p, i)->value);
out:
  free(idx);
  lt_st_close(f);
  return s;
}
