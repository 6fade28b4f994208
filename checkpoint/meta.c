/*
 * checkpoint/meta.c: lt_ckpt_meta, an ordered map from short keys to int64,
 * double, string or byte-blob values (model configuration and extra training
 * state), and lt_ckpt_info_free.
 *
 * What this is not: a general dictionary. Lookups are linear (a checkpoint
 * holds tens of such values, not thousands).
 */
#include "checkpoint/internal.h"
#include "tensor/error_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct meta_entry {
  char *key;
  lt__meta_val v;
  char *owned;   /* the string or blob (v.s / v.bytes point here) */
} meta_entry;

struct lt_ckpt_meta {
  meta_entry *e;
  int n, cap;
};

lt_ckpt_meta *lt_ckpt_meta_new(void) {
  lt_ckpt_meta *m = calloc(1, sizeof *m);
  if (!m) lt__err(LT_ERR_NOMEM, "ckpt_meta_new: out of memory");
  return m;
}

void lt_ckpt_meta_free(lt_ckpt_meta *m) {
  if (!m) return;
  for (int i = 0; i < m->n; i++) {
    free(m->e[i].key);
    free(m->e[i].owned);
  }
  free(m->e);
  free(m);
}

lt_status lt__ckpt_check_key(const char *key, const char *what) {
  if (!key) return lt__err_null(what, "key");
  size_t n = strlen(key);
  if (n == 0 || n > 255)
    return lt__err(LT_ERR_INVALID, "%s: key '%.64s' has %zu bytes: keys have 1 to 255", what, key, n);
  if (strchr(key, '/'))
    return lt__err(LT_ERR_INVALID, "%s: key '%s' contains '/'", what, key);
  if (!strcmp(key, ".") || !strcmp(key, ".."))
    return lt__err(LT_ERR_INVALID, "%s: key '%s' is reserved", what, key);
  return LT_OK;
}

static int find(const lt_ckpt_meta *m, const char *key) {
  for (int i = 0; i < m->n; i++)
    if (!strcmp(m->e[i].key, key)) return i;
  return -1;
}

/* Stores (key, v) taking ownership of owned (freed on failure). */
static lt_status put(lt_ckpt_meta *m, const char *key, lt__meta_val v, char *owned, const char *op) {
  if (!m) {
    free(owned);
    return lt__err_null(op, "m");
  }
  lt_status s = lt__ckpt_check_key(key, op);
  if (s) {
    free(owned);
    return s;
  }
  int i = find(m, key);
  if (i >= 0) {
    free(m->e[i].owned);
    m->e[i].v = v;
    m->e[i].owned = owned;
    return LT_OK;
  }
  if (m->n == m->cap) {
    int cap = m->cap ? 2 * m->cap : 8;
    meta_entry *e = realloc(m->e, (size_t)cap * sizeof *e);
    if (!e) {
      free(owned);
      return lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
    }
    m->e = e;
    m->cap = cap;
  }
  char *k = strdup(key);
  if (!k) {
    free(owned);
    return lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
  }
  m->e[m->n++] = (meta_entry){k, v, owned};
  return LT_OK;
}

lt_status lt_ckpt_meta_set_int(lt_ckpt_meta *m, const char *key, int64_t value) {
  return put(m, key, (lt__meta_val){.kind = LT_CKPT_INT, .i = value}, NULL, "ckpt_meta_set_int");
}

lt_status lt_ckpt_meta_set_double(lt_ckpt_meta *m, const char *key, double value) {
  return put(m, key, (lt__meta_val){.kind = LT_CKPT_DOUBLE, .d = value}, NULL, "ckpt_meta_set_double");
}

lt_status lt_ckpt_meta_set_string(lt_ckpt_meta *m, const char *key, const char *value) {
  if (!value) return lt__err_null("ckpt_meta_set_string", "value");
  char *s = strdup(value);
  if (!s) return lt__err(LT_ERR_NOMEM, "ckpt_meta_set_string: out of memory");
  return put(m, key, (lt__meta_val){.kind = LT_CKPT_STRING, .s = s}, s, "ckpt_meta_set_string");
}

lt_status lt_ckpt_meta_set_bytes(lt_ckpt_meta *m, const char *key, const void *data, size_t size) {
  if (!data && size) return lt__err_null("ckpt_meta_set_bytes", "data");
  char *b = malloc(size ? size : 1);
  if (!b) return lt__err(LT_ERR_NOMEM, "ckpt_meta_set_bytes: out of memory for %zu bytes", size);
  if (size) memcpy(b, data, size);
  return put(m, key, (lt__meta_val){.kind = LT_CKPT_BYTES, .bytes = b, .size = size}, b,
             "ckpt_meta_set_bytes");
}

int lt_ckpt_meta_count(const lt_ckpt_meta *m) { return m ? m->n : 0; }

const char *lt_ckpt_meta_key(const lt_ckpt_meta *m, int i) {
  return (m && i >= 0 && i < m->n) ? m->e[i].key : NULL;
}

int lt_ckpt_meta_kind(const lt_ckpt_meta *m, const char *key) {
  if (!m || !key) return -1;
  int i = find(m, key);
  return i < 0 ? -1 : (int)m->e[i].v.kind;
}

bool lt__ckpt_meta_at(const lt_ckpt_meta *m, int i, const char **key, lt__meta_val *v) {
  if (!m || i < 0 || i >= m->n) return false;
  *key = m->e[i].key;
  *v = m->e[i].v;
  return true;
}

static const char *kind_name(lt_ckpt_kind k) {
  switch (k) {
    case LT_CKPT_INT: return "int";
    case LT_CKPT_DOUBLE: return "double";
    case LT_CKPT_STRING: return "string";
    case LT_CKPT_BYTES: return "bytes";
  }
  return "?";
}

static lt_status get(const lt_ckpt_meta *m, const char *key, lt_ckpt_kind kind, const char *op,
                     const lt__meta_val **v) {
  if (!m) return lt__err_null(op, "m");
  if (!key) return lt__err_null(op, "key");
  int i = find(m, key);
  if (i < 0) return lt__err(LT_ERR_INDEX, "%s: no key '%s'", op, key);
  if (m->e[i].v.kind != kind)
    return lt__err(LT_ERR_DTYPE, "%s: key '%s' holds a %s, not a %s", op, key, kind_name(m->e[i].v.kind),
                   kind_name(kind));
  *v = &m->e[i].v;
  return LT_OK;
}

lt_status lt_ckpt_meta_get_int(const lt_ckpt_meta *m, const char *key, int64_t *value) {
  const lt__meta_val *v;
  if (!value) return lt__err_null("ckpt_meta_get_int", "value");
  lt_status s = get(m, key, LT_CKPT_INT, "ckpt_meta_get_int", &v);
  if (!s) *value = v->i;
  return s;
}

lt_status lt_ckpt_meta_get_double(const lt_ckpt_meta *m, const char *key, double *value) {
  const lt__meta_val *v;
  if (!value) return lt__err_null("ckpt_meta_get_double", "value");
  lt_status s = get(m, key, LT_CKPT_DOUBLE, "ckpt_meta_get_double", &v);
  if (!s) *value = v->d;
  return s;
}

lt_status lt_ckpt_meta_get_string(const lt_ckpt_meta *m, const char *key, const char **value) {
  const lt__meta_val *v;
  if (!value) return lt__err_null("ckpt_meta_get_string", "value");
  lt_status s = get(m, key, LT_CKPT_STRING, "ckpt_meta_get_string", &v);
  if (!s) *value = v->s;
  return s;
}

lt_status lt_ckpt_meta_get_bytes(const lt_ckpt_meta *m, const char *key, const void **data, size_t *size) {
  const lt__meta_val *v;
  if (!data) return lt__err_null("ckpt_meta_get_bytes", "data");
  if (!size) return lt__err_null("ckpt_meta_get_bytes", "size");
  lt_status s = get(m, key, LT_CKPT_BYTES, "ckpt_meta_get_bytes", &v);
  if (!s) {
    *data = v->bytes;
    *size = v->size;
  }
  return s;
}

void lt_ckpt_info_free(lt_ckpt_info *info) {
  if (!info) return;
  free(info->library_version);
  lt_ckpt_meta_free(info->config);
  lt_ckpt_meta_free(info->extra);
  for (int i = 0; i < info->n_missing; i++) free(info->missing[i]);
  for (int i = 0; i < info->n_unexpected; i++) free(info->unexpected[i]);
  free(info->missing);
  free(info->unexpected);
  free(info);
}

lt_status lt_ckpt_check_model_size(const lt_ckpt_info *info, const char *path, int64_t n_params, uint64_t bytes,
                                   uint64_t max_bytes) {
  const char *op = "ckpt_check_model_size";
  if (!info) return lt__err_null(op, "info");
  if (!path) path = "(unnamed)";
  if (n_params < 0) return lt__err(LT_ERR_INVALID, "%s: n_params %lld is negative", op, (long long)n_params);
  if (n_params > info->model_elements)
    return lt__err(LT_ERR_FORMAT, "checkpoint '%s': its configuration describes a model of %lld parameters (%llu "
                   "bytes) but its /model holds %lld elements in %lld tensors: refused before building the model",
                   path, (long long)n_params, (unsigned long long)bytes, (long long)info->model_elements,
                   (long long)info->model_tensors);
  if (max_bytes && bytes > max_bytes)
    return lt__err(LT_ERR_NOMEM, "checkpoint '%s': its model needs %llu bytes (%lld parameters), more than the "
                   "memory cap of %llu bytes (--max-memory / max_bytes): refused before building it", path,
                   (unsigned long long)bytes, (long long)n_params, (unsigned long long)max_bytes);
  return LT_OK;
}

uint64_t lt_ckpt_default_memory_cap(void) {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 0;
  uint64_t total;
  if (__builtin_mul_overflow((uint64_t)pages, (uint64_t)page, &total)) return UINT64_MAX / 2;
  return total / 2;
}
