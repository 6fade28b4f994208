/*
 * tensor/copy.c: copies, casts and fills: lt_copy_ (broadcasting, any
 * dtypes, overlap-safe), lt_tensor_read, lt_clone, lt_contiguous,
 * lt_to_dtype and their backward, lt_detach, lt__as_contig, and the
 * in-place fills lt_fill_ / lt_zero_. Every strided copy runs on the shared
 * iterator (tensor/iter.c); casts to bf16 round with lt__bf16_from_f32, the
 * one rounding rule.
 *
 * What this is not: the tensor object's life, storage and creation
 * (tensor/tensor.c), or elementwise arithmetic (tensor/elementwise.c).
 */
#include "tensor/graph_internal.h"
#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"
#include "tensor/iter_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- copies and casts -------------------------------------------------- */

/* Inner loops for the strided copy ptrs[0] <- ptrs[1]. */
#define COPY_SAME(T)                                                                   \
  static void copy_same_##T(int64_t n, char *const *p, const int64_t *s, void *ctx) {   \
    char *d = p[0];                                                                    \
    const char *src = p[1];                                                            \
    if (s[0] == (int64_t)sizeof(T) && s[1] == (int64_t)sizeof(T)) {                    \
      memcpy(d, src, (size_t)n * sizeof(T));                                           \
      return;                                                                          \
    }                                                                                  \
    for (int64_t i = 0; i < n; i++) memcpy(d + i * s[0], src + i * s[1], sizeof(T));   \
  }
COPY_SAME(uint8_t)
COPY_SAME(uint16_t)
COPY_SAME(uint32_t)
COPY_SAME(uint64_t)

typedef struct {
  lt_dtype to, from;
} cast_ctx;

static bool is_int_like(lt_dtype d) { return d == LT_DTYPE_I32 || d == LT_DTYPE_I64 || d == LT_DTYPE_BOOL; }

static void copy_cast(int64_t n, char *const *p, const int64_t *s, void *vctx) {
  const cast_ctx *c = vctx;
  if (c->to == LT_DTYPE_F32 && c->from == LT_DTYPE_F64) {
    for (int64_t i = 0; i < n; i++) *(float *)(p[0] + i * s[0]) = (float)*(const double *)(p[1] + i * s[1]);
  } else if (c->to == LT_DTYPE_F64 && c->from == LT_DTYPE_F32) {
    for (int64_t i = 0; i < n; i++) *(double *)(p[0] + i * s[0]) = *(const float *)(p[1] + i * s[1]);
  } else if (c->to == LT_DTYPE_BF16 && c->from == LT_DTYPE_F32) {
    for (int64_t i = 0; i < n; i++)
      *(uint16_t *)(p[0] + i * s[0]) = lt__bf16_from_f32(*(const float *)(p[1] + i * s[1]));
  } else if (c->to == LT_DTYPE_F32 && c->from == LT_DTYPE_BF16) {
    for (int64_t i = 0; i < n; i++)
      *(float *)(p[0] + i * s[0]) = lt__f32_from_bf16(*(const uint16_t *)(p[1] + i * s[1]));
  } else if (is_int_like(c->to) && is_int_like(c->from)) {
    /* Exact through int64 (double would lose i64 precision). */
    for (int64_t i = 0; i < n; i++) {
      const char *q = p[1] + i * s[1];
      int64_t v = c->from == LT_DTYPE_I64 ? *(const int64_t *)q
                : c->from == LT_DTYPE_I32 ? *(const int32_t *)q : *(const uint8_t *)q != 0;
      char *d = p[0] + i * s[0];
      if (c->to == LT_DTYPE_I64) *(int64_t *)d = v;
      else if (c->to == LT_DTYPE_I32) *(int32_t *)d = (int32_t)v; /* wraps, as PyTorch */
      else *(uint8_t *)d = v != 0;
    }
  } else {
    for (int64_t i = 0; i < n; i++) lt__store(p[0] + i * s[0], c->to, lt__load(p[1] + i * s[1], c->from));
  }
}

/* dst <- src, src already broadcastable to dst; no checks, no version bump. */
static void copy_raw(lt_tensor *dst, const lt_tensor *src) {
  lt__iter it;
  lt__iter_init(&it, dst->ndim, dst->shape, 2, (const lt_tensor *[]){dst, src});
  if (dst->dtype == src->dtype) {
    size_t es = lt_dtype_size(dst->dtype);
    lt__loop_fn fn = es == 1   ? copy_same_uint8_t
                     : es == 2 ? copy_same_uint16_t
                     : es == 4 ? copy_same_uint32_t
                               : copy_same_uint64_t;
    lt__iter_run(&it, fn, NULL, true);
  } else {
    cast_ctx c = {dst->dtype, src->dtype};
    lt__iter_run(&it, copy_cast, &c, true);
  }
}

/* True if writing through x would write one memory location twice. */
static bool has_internal_overlap(const lt_tensor *x) {
  for (int i = 0; i < x->ndim; i++)
    if (x->stride[i] == 0 && x->shape[i] > 1) return true;
  return false;
}

lt_status lt__check_inplace(const char *op, const lt_tensor *x) {
  if (!x) return lt__err_null(op, "x");
  if (x->requires_grad && lt_grad_enabled())
    return lt__err(LT_ERR_AUTOGRAD,
                   "%s: x is %s and requires grad: in-place writes to it are not recorded by autograd "
                   "(use the out-of-place op, or disable grad mode for parameter updates)",
                   op, LT__D(x));
  if (has_internal_overlap(x))
    return lt__err(LT_ERR_INVALID,
                   "%s: x is %s with a stride-0 (expanded) dim: several elements share one memory "
                   "location; make it contiguous first",
                   op, LT__D(x));
  return LT_OK;
}

static bool can_broadcast_to(const lt_tensor *src, int ndim, const int64_t *shape) {
  if (src->ndim > ndim) return false;
  for (int i = 0; i < src->ndim; i++) {
    int64_t a = src->shape[src->ndim - 1 - i], b = shape[ndim - 1 - i];
    if (a != b && a != 1) return false;
  }
  return true;
}

static bool same_storage(const lt_tensor *a, const lt_tensor *b) { return a->storage == b->storage; }

lt_status lt_copy_(lt_tensor *dst, const lt_tensor *src) {
  if (!dst) return lt__err_null("copy_", "dst");
  if (!src) return lt__err_null("copy_", "src");
  lt_status s = lt__check_inplace("copy_", dst);
  if (s != LT_OK) return s;
  if (!can_broadcast_to(src, dst->ndim, dst->shape))
    return lt__err(LT_ERR_SHAPE, "copy_: src is %s, dst is %s: src does not broadcast to dst's shape",
                   LT__D(src), LT__D(dst));
  lt_tensor *tmp = NULL;
  if (same_storage(dst, src) && src->data != dst->data) {
    /* Overlapping views: copy through a temporary. */
    tmp = lt_clone(src);
    if (!tmp) return lt_last_status();
    src = tmp;
  }
  copy_raw(dst, src);
  lt_tensor_free(tmp);
  lt__bump_version(dst);
  return LT_OK;
}

lt_status lt_tensor_read(const lt_tensor *x, lt_dtype dtype, void *dst, int64_t capacity) {
  if (!x) return lt__err_null("tensor_read", "x");
  if (!lt__valid_dtype(dtype)) return lt__err(LT_ERR_DTYPE, "tensor_read: invalid dtype %d", (int)dtype);
  if (capacity < x->numel)
    return lt__err(LT_ERR_INVALID, "tensor_read: x is %s (%lld elements) but dst holds %lld", LT__D(x),
                   (long long)x->numel, (long long)capacity);
  if (x->numel == 0) return LT_OK;
  if (!dst) return lt__err(LT_ERR_NULL, "tensor_read: dst is NULL");
  lt_tensor *d = lt_tensor_from_borrowed(dtype, x->ndim, x->shape, dst);
  if (!d) return lt_last_status();
  lt_tensor_keep(d);
  copy_raw(d, x);
  lt_tensor_free(d);
  return LT_OK;
}

/* A contiguous copy of x in dtype, recorded for autograd as op (copy/cast). */
static lt_tensor *copy_as(const char *name, const lt_tensor *x, lt_dtype dtype, lt__op_id op) {
  lt_tensor *t = lt__tensor_new(name, dtype, x->ndim, x->shape);
  if (!t) return NULL;
  copy_raw(t, x);
  if (lt_dtype_is_floating(dtype) && lt__record(t, op, 1, (const lt_tensor *[]){x}, 0, NULL, NULL, 0) != LT_OK) {
    lt_tensor_free(t);
    return NULL;
  }
  return t;
}

lt_tensor *lt_clone(const lt_tensor *x) {
  if (!x) return lt__err_null("clone", "x"), NULL;
  return copy_as("clone", x, x->dtype, LT__OP_copy);
}

lt_tensor *lt_contiguous(const lt_tensor *x) {
  if (!x) return lt__err_null("contiguous", "x"), NULL;
  if (!lt_is_contiguous(x)) return copy_as("contiguous", x, x->dtype, LT__OP_copy);
  lt_tensor *t = lt__view_of(x, x->ndim, x->shape, x->stride, x->offset);
  if (t && lt__record(t, LT__OP_copy, 1, (const lt_tensor *[]){x}, 0, NULL, NULL, 0) != LT_OK) {
    lt_tensor_free(t);
    return NULL;
  }
  return t;
}

const lt_tensor *lt__as_contig(const lt_tensor *x, lt_dtype dt, lt_tensor **tmp) {
  *tmp = NULL;
  if (!x || (x->dtype == dt && lt_is_contiguous(x))) return x;
  const bool prev = lt_set_grad_enabled(false);
  lt_tensor *t = x->dtype == dt ? lt_clone(x) : lt_to_dtype(x, dt);
  lt_set_grad_enabled(prev);
  *tmp = t;
  return t;
}

lt_tensor *lt_to_dtype(const lt_tensor *x, lt_dtype dtype) {
  if (!x) return lt__err_null("to_dtype", "x"), NULL;
  if (!lt__valid_dtype(dtype)) return lt__err(LT_ERR_DTYPE, "to_dtype: invalid dtype %d", (int)dtype), NULL;
  /* Only float->float casts (bf16 included) carry gradients. */
  if (!lt_dtype_is_floating(x->dtype) || !lt_dtype_is_floating(dtype)) {
    bool prev = lt_set_grad_enabled(false);
    lt_tensor *t = copy_as("to_dtype", x, dtype, LT__OP_cast);
    lt_set_grad_enabled(prev);
    return t;
  }
  return copy_as("to_dtype", x, dtype, LT__OP_cast);
}

/* copy and cast: the gradient passes through unchanged (the engine casts it
 * back to the input's dtype). */
lt_status lt__bw_copy(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  gin[0] = lt_detach(gout);
  return gin[0] ? LT_OK : lt_last_status();
}
lt_status lt__bw_cast(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  gin[0] = lt_detach(gout);
  return gin[0] ? LT_OK : lt_last_status();
}

lt_tensor *lt_detach(const lt_tensor *x) {
  if (!x) return lt__err_null("detach", "x"), NULL;
  return lt__view_of(x, x->ndim, x->shape, x->stride, x->offset);
}

/* ---- fills ------------------------------------------------------------- */

lt_status lt_fill_(lt_tensor *x, double value) {
  lt_status s = lt__check_inplace("fill_", x);
  if (s != LT_OK) return s;
  /* Store the value once in x's dtype, then broadcast-copy it. */
  union {
    double d;
    int64_t i;
    unsigned char b[8];
  } cell;
  lt_tensor *v = lt_tensor_from_borrowed(x->dtype, 0, NULL, &cell);
  if (!v) return lt_last_status();
  lt_tensor_keep(v);
  lt__store(&cell, x->dtype, value);
  copy_raw(x, v);
  lt_tensor_free(v);
  lt__bump_version(x);
  return LT_OK;
}

lt_status lt_zero_(lt_tensor *x) { return lt_fill_(x, 0.0); }
