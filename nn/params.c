/*
 * nn/params.c: the parameter store (lt_params), an ordered list of named
 * tensors that owns every parameter and buffer of a model, and lt_name_join.
 *
 * What this is: insertion order is kept, so a model that registers its
 * parameters in the order its PyTorch counterpart defines its submodules lists
 * them in PyTorch's state_dict order. Names are copied; a name appears once;
 * lookup by name goes through an open-addressing hash (FNV-1a, linear probing)
 * so that models with thousands of tensors load checkpoints without quadratic
 * string compares.
 *
 * What this is not: a module tree. There is no nesting beyond the dotted
 * names, and nothing is ever removed except by lt_params_free (plus the
 * internal roll-back lt__params_truncate, which layer initialisers use to undo
 * a half-finished registration).
 *
 * Ownership: lt_params_add takes the caller's reference to the tensor (or the
 * open scope's: the tensor is taken out of it). On failure nothing changed and
 * the caller (or the scope) still owns the tensor.
 */
#include "nn/nn.h"
#include "nn/params_internal.h"
#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"
#include "tensor/quant.h"

#include <math.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct lt_params {
  lt_param *items; /* n entries in insertion order; names owned */
  int n, cap;
  int *slots;      /* hash table of indices into items, -1 = empty; nslots a power of 2 */
  int nslots;
  bool eval;       /* lt_params_train(p, false) was called last (a new store trains) */
};

static uint64_t name_hash(const char *s) {
  uint64_t h = 1469598103934665603ULL; /* FNV-1a 64 */
  for (; *s; s++) {
    h ^= (unsigned char)*s;
    h *= 1099511628211ULL;
  }
  return h;
}

/* Index of name in p, or -1. */
static int find_index(const lt_params *p, const char *name) {
  if (!p->nslots) return -1;
  size_t mask = (size_t)p->nslots - 1;
  for (size_t i = (size_t)name_hash(name) & mask;; i = (i + 1) & mask) {
    int k = p->slots[i];
    if (k < 0) return -1;
    if (strcmp(p->items[k].name, name) == 0) return k;
  }
}

static void slot_insert(int *slots, int nslots, const char *name, int index) {
  size_t mask = (size_t)nslots - 1;
  size_t i = (size_t)name_hash(name) & mask;
  while (slots[i] >= 0) i = (i + 1) & mask;
  slots[i] = index;
}

/* Rebuild the hash for the first n items into a table of nslots. */
static lt_status rehash(lt_params *p, int nslots) {
  int *slots = malloc(sizeof(int) * (size_t)nslots);
  if (!slots) return lt__err(LT_ERR_NOMEM, "params_add: out of memory for a %d-slot name table", nslots);
  for (int i = 0; i < nslots; i++) slots[i] = -1;
  for (int k = 0; k < p->n; k++) slot_insert(slots, nslots, p->items[k].name, k);
  free(p->slots);
  p->slots = slots;
  p->nslots = nslots;
  return LT_OK;
}

lt_params *lt_params_new(void) {
  lt_params *p = calloc(1, sizeof *p);
  if (!p) lt__err(LT_ERR_NOMEM, "params_new: out of memory");
  return p;
}

void lt__params_truncate(lt_params *p, int count) {
  if (!p || count < 0 || count >= p->n) return;
  for (int k = count; k < p->n; k++) {
    lt_tensor_free(p->items[k].value);
    free((char *)p->items[k].name);
  }
  p->n = count;
  if (p->nslots) {
    for (int i = 0; i < p->nslots; i++) p->slots[i] = -1;
    for (int k = 0; k < p->n; k++) slot_insert(p->slots, p->nslots, p->items[k].name, k);
  }
}

void lt_params_free(lt_params *p) {
  if (!p) return;
  lt__params_truncate(p, 0);
  free(p->items);
  free(p->slots);
  free(p);
}

lt_status lt_params_add(lt_params *p, const char *name, lt_tensor *value, unsigned flags) {
  const char *op = "params_add";
  if (!value) return lt__err_null(op, "value");
  if (!p) return lt__err(LT_ERR_NULL, "%s: the store is NULL", op);
  if (!name) return lt__err(LT_ERR_NULL, "%s: name is NULL", op);
  if (!*name) return lt__err(LT_ERR_INVALID, "%s: value %s: the name is empty", op, LT__D(value));
  const unsigned known = LT_PARAM_BUFFER | LT_PARAM_NO_DECAY | LT_PARAM_QUANTIZABLE;
  if (flags & ~known)
    return lt__err(LT_ERR_INVALID, "%s: '%s': unknown flag bits 0x%x", op, name, flags & ~known);
  if (find_index(p, name) >= 0)
    return lt__err(LT_ERR_INVALID, "%s: '%s' is already in the store (names must be unique)", op, name);
  for (int k = 0; k < p->n; k++)
    if (p->items[k].value == value)
      return lt__err(LT_ERR_INVALID,
                     "%s: '%s': tensor %s is already in the store as '%s' (a tied weight is registered "
                     "once and borrowed by both layers)",
                     op, name, LT__D(value), p->items[k].name);
  if (value->grad_fn)
    return lt__err(LT_ERR_AUTOGRAD,
                   "%s: '%s' is %s, the output of a recorded op: parameters and buffers must be leaves "
                   "(detach it, or make it under no-grad)",
                   op, name, LT__D(value));
  bool buffer = (flags & LT_PARAM_BUFFER) != 0;
  if (!buffer && !lt_dtype_is_float(value->dtype))
    return lt__err(LT_ERR_DTYPE,
                   "%s: '%s' is %s: parameters must be float (register integer tensors as "
                   "LT_PARAM_BUFFER)",
                   op, name, LT__D(value));

  /* Allocate everything first, so that a failure changes nothing. */
  if (p->n == p->cap) {
    int cap = p->cap ? 2 * p->cap : 16;
    lt_param *items = realloc(p->items, sizeof(lt_param) * (size_t)cap);
    if (!items) return lt__err(LT_ERR_NOMEM, "%s: out of memory for %d entries", op, cap);
    p->items = items;
    p->cap = cap;
  }
  if (2 * (p->n + 1) > p->nslots) { /* load factor <= 1/2 */
    int nslots = p->nslots ? 2 * p->nslots : 32;
    while (2 * (p->n + 1) > nslots) nslots *= 2;
    lt_status s = rehash(p, nslots);
    if (s != LT_OK) return s;
  }
  size_t len = strlen(name);
  char *copy = malloc(len + 1);
  if (!copy) return lt__err(LT_ERR_NOMEM, "%s: out of memory for the name '%s'", op, name);
  memcpy(copy, name, len + 1);

  /* Cannot fail from here on (value is a float leaf, or a buffer). */
  lt_status s = lt_requires_grad_(value, !buffer && !lt_tensor_qmatrix(value)); /* quantized: no gradient */
  LT_CHECK(s == LT_OK);
  lt_tensor_keep(value);
  p->items[p->n] = (lt_param){copy, value, flags};
  slot_insert(p->slots, p->nslots, copy, p->n);
  p->n++;
  return LT_OK;
}

int lt_params_count(const lt_params *p) { return p ? p->n : 0; }

const lt_param *lt_params_at(const lt_params *p, int i) {
  if (!p) return lt__err(LT_ERR_NULL, "params_at: the store is NULL"), NULL;
  if (i < 0 || i >= p->n)
    return lt__err(LT_ERR_INDEX, "params_at: index %d is outside [0, %d)", i, p->n), NULL;
  return &p->items[i];
}

lt_tensor *lt_params_find(const lt_params *p, const char *name) {
  if (!p || !name) return NULL;
  int k = find_index(p, name);
  return k >= 0 ? p->items[k].value : NULL;
}

int64_t lt_params_numel(const lt_params *p, bool trainable_only) {
  int64_t n = 0;
  if (!p) return 0;
  for (int k = 0; k < p->n; k++) {
    const lt_param *e = &p->items[k];
    if (e->flags & LT_PARAM_BUFFER) continue;
    if (trainable_only && !e->value->requires_grad) continue;
    n += e->value->numel;
  }
  return n;
}

void lt_params_zero_grad(lt_params *p) {
  if (!p) return;
  for (int k = 0; k < p->n; k++) lt_zero_grad(p->items[k].value);
}

/* An empty or NULL prefix selects every parameter; a non-empty prefix that
 * matches no parameter is an error (LT_ERR_INVALID), which catches typos. */
lt_status lt_params_set_requires_grad(lt_params *p, const char *prefix, bool requires_grad) {
  if (!p) return lt__err(LT_ERR_NULL, "params_set_requires_grad: the store is NULL");
  size_t len = prefix ? strlen(prefix) : 0;
  int matched = 0;
  for (int k = 0; k < p->n; k++) {
    lt_param *e = &p->items[k];
    if (e->flags & LT_PARAM_BUFFER) continue;
    if (len && strncmp(e->name, prefix, len) != 0) continue;
    lt_status s = lt_requires_grad_(e->value, requires_grad);
    LT_CHECK(s == LT_OK); /* parameters are float leaves (checked at add) */
    matched++;
  }
  if (len && !matched)
    return lt__err(LT_ERR_INVALID, "params_set_requires_grad: no parameter name starts with '%s'", prefix);
  return LT_OK;
}

/* Two passes so that a failure changes nothing: check every tensor and make
 * every converted copy, then move the copies' storage into the tensors. */
lt_status lt_params_to_dtype(lt_params *p, lt_dtype dtype) {
  const char *op = "params_to_dtype";
  if (!p) return lt__err(LT_ERR_NULL, "%s: the store is NULL", op);
  if (!lt__valid_dtype(dtype) || !lt_dtype_is_float(dtype))
    return lt__err(LT_ERR_DTYPE, "%s: the target dtype must be a float dtype, not %s", op,
                   lt__valid_dtype(dtype) ? lt_dtype_name(dtype) : "an invalid one");
  for (int k = 0; k < p->n; k++)
    if (lt_tensor_qmatrix(p->items[k].value))
      return lt__err(LT_ERR_STATE, "%s: '%s' holds quantized weights (lt_params_quantize): load the model again", op,
                     p->items[k].name);
  for (int k = 0; k < p->n; k++) {
    const lt_param *e = &p->items[k];
    if (!lt_dtype_is_float(e->value->dtype) || e->value->dtype == dtype) continue;
    if (lt__storage_shared(e->value))
      return lt__err(LT_ERR_INVALID,
                     "%s: '%s' is %s and shares its memory with another tensor (a view of it, one it views, a "
                     "recorded graph that saved it) or the user: converting it would leave the other with the "
                     "old values; free such views and graphs first (a parameter registered as a view: "
                     "register lt_clone of it)",
                     op, e->name, LT__D(e->value));
  }
  lt_tensor **made = calloc((size_t)(p->n ? p->n : 1), sizeof *made);
  if (!made) return lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
  bool prev = lt_set_grad_enabled(false);
  lt_status s = LT_OK;
  for (int k = 0; k < p->n && s == LT_OK; k++) {
    const lt_tensor *v = p->items[k].value;
    if (!lt_dtype_is_float(v->dtype) || v->dtype == dtype) continue;
    lt_tensor *c = lt_to_dtype(v, dtype);
    if (c && !lt_is_contiguous(c)) { /* a strided parameter becomes contiguous */
      lt_tensor *cc = lt_contiguous(c);
      lt_tensor_free(c);
      c = cc;
    }
    if (!c) {
      s = lt_last_status();
      break;
    }
    c = lt_tensor_keep(c);
    LT_CHECK(lt__tensor_exclusive(c)); /* a new tensor of another dtype: nothing else sees it */
    made[k] = c;
  }
  lt_set_grad_enabled(prev);
  if (s != LT_OK) {
    for (int k = 0; k < p->n; k++) lt_tensor_free(made[k]);
    free(made);
    return s;
  }
  for (int k = 0; k < p->n; k++) {
    if (!made[k]) continue;
    lt_zero_grad(p->items[k].value); /* a gradient of the old dtype is dropped */
    lt__tensor_take_storage(p->items[k].value, made[k]);
  }
  free(made);
  return LT_OK;
}

lt_status lt_params_copy(lt_params *dst, const lt_params *src) {
  const char *op = "params_copy";
  if (!dst || !src) return lt__err(LT_ERR_NULL, "%s: a store is NULL", op);
  if (lt_params_quantized(dst) || lt_params_quantized(src))
    return lt__err(LT_ERR_STATE, "%s: a store holds quantized weights (lt_params_quantize)", op);
  for (int k = 0; k < src->n; k++) {
    const lt_tensor *a = src->items[k].value, *b = lt_params_find(dst, src->items[k].name);
    if (!b) return lt__err(LT_ERR_INVALID, "%s: '%s' of the source is not in the destination", op, src->items[k].name);
    if (a->dtype != b->dtype || !lt__same_shape(a, b))
      return lt__err(a->dtype != b->dtype ? LT_ERR_DTYPE : LT_ERR_SHAPE, "%s: '%s' is %s in the source, %s in the destination",
                     op, src->items[k].name, LT__D(a), LT__D(b));
  }
  for (int k = 0; k < dst->n; k++)
    if (!lt_params_find(src, dst->items[k].name))
      return lt__err(LT_ERR_INVALID, "%s: '%s' of the destination is not in the source", op, dst->items[k].name);
  const bool prev = lt_set_grad_enabled(false);
  lt_status s = LT_OK;
  for (int k = 0; k < src->n && s == LT_OK; k++)
    s = lt_copy_(lt_params_find(dst, src->items[k].name), src->items[k].value);
  lt_set_grad_enabled(prev);
  return s;
}

bool lt_params_quantized(const lt_params *p) {
  for (int k = 0; p && k < p->n; k++)
    if (lt_tensor_qmatrix(p->items[k].value)) return true;
  return false;
}

lt_status lt_params_quantize(lt_params *p, lt_qformat f, size_t *bytes_before, size_t *bytes_after) {
  const char *op = "params_quantize";
  if (!p) return lt__err(LT_ERR_NULL, "%s: the store is NULL", op);
  if (lt_qformat_block_elems(f) == 0) return lt__err(LT_ERR_INVALID, "%s: unknown weight format %d", op, (int)f);
  size_t before = 0, after = 0;
  for (int k = 0; k < p->n; k++) {
    const lt_param *e = &p->items[k];
    const lt_tensor *t = e->value;
    if (!(e->flags & LT_PARAM_QUANTIZABLE)) continue;
    if (lt_tensor_qmatrix(t)) return lt__err(LT_ERR_STATE, "%s: '%s' is already quantized", op, e->name);
    if (t->dtype != LT_DTYPE_F32 || t->ndim != 2)
      return lt__err(t->dtype != LT_DTYPE_F32 ? LT_ERR_DTYPE : LT_ERR_SHAPE, "%s: '%s' is %s: need a 2-d f32 weight",
                     op, e->name, LT__D(t));
    if (lt__storage_shared(t) || t->offset != 0 || !lt_is_contiguous(t))
      return lt__err(LT_ERR_INVALID,
                     "%s: '%s' is %s and shares its memory with another tensor (a view, a recorded graph that "
                     "saved it) or is a view: free such views and graphs first",
                     op, e->name, LT__D(t));
    const float *v = t->data;
    if (f == LT_QFORMAT_Q8_0 || f == LT_QFORMAT_Q4_0)
      for (int64_t i = 0; i < t->numel; i++)
        if (!isfinite(v[i]))
          return lt__err(LT_ERR_NUMERIC, "%s: '%s' %s: weight [%lld, %lld] is %g", op, e->name, LT__D(t),
                         (long long)(i / t->shape[1]), (long long)(i % t->shape[1]), (double)v[i]);
    size_t rb;
    const int64_t be = lt_qformat_block_elems(f), Kp = (t->shape[1] + be - 1) / be * be;
    if (lt_qformat_row_bytes(f, Kp, &rb) != LT_OK) return lt__err(lt_last_status(), "%s: '%s': %s", op, e->name, lt_last_error());
    before += (size_t)t->numel * sizeof(float);
    after += rb * (size_t)t->shape[0];
  }
  for (int k = 0; k < p->n; k++) {
    if (!(p->items[k].flags & LT_PARAM_QUANTIZABLE)) continue;
    lt_status s = lt_tensor_quantize_(p->items[k].value, f);
    if (s != LT_OK) return lt__err(s, "%s: '%s': %s", op, p->items[k].name, lt_last_error());
  }
  if (f != LT_QFORMAT_F32) lt__storage_cache_release(); /* the f32 weights leave the process */
  if (bytes_before) *bytes_before = before;
  if (bytes_after) *bytes_after = f == LT_QFORMAT_F32 ? before : after;
  return LT_OK;
}

lt_status lt_params_summary(const lt_params *p, FILE *f) {
  if (!p) return lt__err(LT_ERR_NULL, "params_summary: the store is NULL");
  if (!f) return lt__err(LT_ERR_NULL, "params_summary: argument f is NULL");
  int w = 4;
  for (int k = 0; k < p->n; k++) {
    const int l = (int)strlen(p->items[k].name);
    if (l > w) w = l < 80 ? l : 80;
  }
  int64_t params = 0, trainable = 0, buffers = 0;
  uint64_t bytes = 0;
  fprintf(f, "%-*s  %-20s %-5s %12s\n", w, "name", "shape", "dtype", "elements");
  for (int k = 0; k < p->n; k++) {
    const lt_param *e = &p->items[k];
    const lt_tensor *t = e->value;
    char shape[24 * LT_MAX_DIMS] = "[", *q = shape + 1;
    for (int d = 0; d < t->ndim; d++)
      q += snprintf(q, sizeof shape - (size_t)(q - shape), d ? ", %lld" : "%lld", (long long)t->shape[d]);
    snprintf(q, sizeof shape - (size_t)(q - shape), "]");
    const bool buf = (e->flags & LT_PARAM_BUFFER) != 0;
    fprintf(f, "%-*s  %-20s %-5s %12lld%s\n", w, e->name, shape, lt_dtype_name(t->dtype), (long long)t->numel,
            buf ? "  buffer" : t->requires_grad ? "" : "  frozen");
    if (buf) buffers += t->numel;
    else params += t->numel, trainable += t->requires_grad ? t->numel : 0;
    bytes += (uint64_t)t->numel * lt_dtype_size(t->dtype);
  }
  fprintf(f, "parameters: %lld (trainable %lld, frozen %lld); buffers: %lld elements; %.2f MB in all\n",
          (long long)params, (long long)trainable, (long long)(params - trainable), (long long)buffers,
          (double)bytes / 1e6);
  if (ferror(f)) return lt__err(LT_ERR_IO, "params_summary: write error");
  return LT_OK;
}

void lt_params_train(lt_params *p, bool training) {
  if (p) p->eval = !training;
}

bool lt_params_training(const lt_params *p) { return p && !p->eval; }

lt_nn_ctx lt_params_ctx(const lt_params *p, lt_generator *gen) {
  return (lt_nn_ctx){lt_params_training(p), gen};
}

char *lt_name_join(char *buf, size_t size, const char *prefix, const char *name) {
  if (!buf || size == 0) return buf;
  if (!name) name = "";
  if (!prefix || !*prefix)
    snprintf(buf, size, "%s", name);
  else if (!*name)
    snprintf(buf, size, "%s", prefix);
  else
    snprintf(buf, size, "%s.%s", prefix, name);
  return buf;
}
