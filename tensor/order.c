/*
 * tensor/order.c: ops that reorder elements (tensor.h, "Sorting and
 * reordering"): sort, argsort, topk; flip, roll, repeat.
 *
 * What this is: sort computes the order of each slice along dim with one
 * kernel (a stable merge sort of indices, NaN after every number as in
 * PyTorch, compared in the tensor's own dtype so that i64 beyond 2^53
 * orders exactly), and the values are lt_gather(x, dim, indices), so their
 * gradient is gather's (a scatter of the gradient to where each value came
 * from) with no backward of its own here. topk is the first k of that order.
 * flip, roll and repeat are compositions of index_select, narrow + cat and
 * expand + reshape, each differentiable through those ops.
 *
 * What this is not: a selection algorithm (topk sorts the whole slice,
 * O(n log n), fine for the vocabulary-sized rows it meets), nor a parallel
 * sort (slices are sorted one after another).
 */
#include "tensor/tensor.h"

#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the order kernel ------------------------------------------------------ */

/* a before b (ascending): numbers in order, NaN last; desc reverses the
 * numbers and puts NaN first, as torch.sort(descending=True). Ties keep their
 * index order in both directions (stable). */
static inline bool before_f(double a, double b, bool desc) {
  if (isnan(a) || isnan(b)) return desc ? isnan(a) && !isnan(b) : !isnan(a) && isnan(b);
  return desc ? a > b : a < b;
}
static inline bool before_i(int64_t a, int64_t b, bool desc) { return desc ? a > b : a < b; }

/* Stable merge sort of idx[0, n) by key (doubles kd or integers ki), tmp of n. */
static void merge_sort(int64_t *idx, int64_t *tmp, int64_t n, const double *kd, const int64_t *ki, bool desc) {
  for (int64_t w = 1; w < n; w *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * w) {
      int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      int64_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi) {
        bool take_j = kd ? before_f(kd[idx[j]], kd[idx[i]], desc) : before_i(ki[idx[j]], ki[idx[i]], desc);
        tmp[k++] = take_j ? idx[j++] : idx[i++];
      }
      while (i < mid) tmp[k++] = idx[i++];
      while (j < hi) tmp[k++] = idx[j++];
    }
    memcpy(idx, tmp, sizeof *idx * (size_t)n);
  }
}

/* The order of every slice of x along d: new i64 tensor of x's shape. */
static lt_tensor *order(const char *op, const lt_tensor *x, int d, bool desc) {
  const bool is_float = lt_dtype_is_float(x->dtype);
  const lt_dtype kt = is_float ? LT_DTYPE_F64 : LT_DTYPE_I64;
  lt_tensor *xt = lt_transpose(x, d, x->ndim - 1), *tmp = NULL;
  const lt_tensor *xc = xt ? lt__as_contig(xt, kt, &tmp) : NULL;
  lt_tensor *it = xc ? lt_empty(LT_DTYPE_I64, xt->ndim, xt->shape) : NULL;
  int64_t n = x->shape[d], rows = n ? x->numel / n : 0;
  int64_t *scratch = it ? malloc(sizeof(int64_t) * (size_t)(n ? n : 1)) : NULL;
  lt_tensor *out = NULL;
  if (it && !scratch) lt__err(LT_ERR_NOMEM, "%s: out of memory for a slice of %lld", op, (long long)n);
  if (scratch) {
    int64_t *iv = it->data;
    for (int64_t r = 0; r < rows; r++) {
      int64_t *row = iv + r * n;
      for (int64_t j = 0; j < n; j++) row[j] = j;
      merge_sort(row, scratch, n, is_float ? (const double *)xc->data + r * n : NULL,
                 is_float ? NULL : (const int64_t *)xc->data + r * n, desc);
    }
    lt_tensor *back = lt_transpose(it, d, x->ndim - 1);
    out = back ? lt_contiguous(back) : NULL;
    lt_tensor_free(back);
  }
  free(scratch);
  lt_tensor_free(it);
  lt_tensor_free(tmp);
  lt_tensor_free(xt);
  return out;
}

static bool sortable(const char *op, const lt_tensor *x, int dim, int *d) {
  if (x->dtype == LT_DTYPE_BOOL) {
    lt__err(LT_ERR_DTYPE, "%s: x is %s: bool is not ordered here (cast it to an integer dtype)", op, LT__D(x));
    return false;
  }
  if (x->ndim == 0) {
    if (dim != 0 && dim != -1) {
      lt__err(LT_ERR_INDEX, "%s: x is %s: dim %d is out of range for a 0-d tensor (-1 or 0)", op, LT__D(x), dim);
      return false;
    }
    *d = 0;
    return true;
  }
  return lt__wrap_dim(op, dim, x->ndim, d) == LT_OK;
}

/* A 0-d x as [1] (sort of a scalar is itself). */
static lt_tensor *as_1d(const lt_tensor *x) { return lt_reshape(x, 1, (int64_t[]){1}); }

static lt_status sort_impl(const char *op, const lt_tensor *x, int dim, bool desc, int64_t k, lt_tensor **values,
                           lt_tensor **indices) {
  if (values) *values = NULL;
  if (indices) *indices = NULL;
  if (!x) return lt__err_null(op, "x");
  int d;
  if (!sortable(op, x, dim, &d)) return lt_last_status();
  const int64_t n = x->ndim ? x->shape[d] : 1;
  if (k > n || k < -1)
    return lt__err(LT_ERR_INVALID, "%s: x is %s: k %lld is outside [0, %lld] (the size of dim %d)", op, LT__D(x),
                   (long long)k, (long long)n, dim);
  lt_tensor *x1 = x->ndim ? NULL : as_1d(x);
  const lt_tensor *xs = x->ndim ? x : x1;
  lt_tensor *idx = xs ? order(op, xs, d, desc) : NULL;
  if (idx && k >= 0 && k < n) {
    lt_tensor *nk = lt_narrow(idx, d, 0, k), *c = nk ? lt_contiguous(nk) : NULL;
    lt_tensor_free(nk);
    lt_tensor_free(idx);
    idx = c;
  }
  lt_tensor *val = idx && values ? lt_gather(xs, d, idx) : NULL;
  if (idx && x1) { /* back to 0-d */
    lt_tensor *i0 = lt_reshape(idx, 0, NULL), *v0 = val ? lt_reshape(val, 0, NULL) : NULL;
    lt_tensor_free(idx), lt_tensor_free(val);
    idx = i0, val = v0;
  }
  lt_tensor_free(x1);
  if (!idx || (values && !val)) {
    lt_tensor_free(idx), lt_tensor_free(val);
    return lt_last_status() ? lt_last_status() : lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
  }
  if (values) *values = val;
  if (indices) *indices = idx;
  else lt_tensor_free(idx);
  return LT_OK;
}

lt_status lt_sort(const lt_tensor *x, int dim, bool descending, lt_tensor **values, lt_tensor **indices) {
  return sort_impl("sort", x, dim, descending, -1, values, indices);
}

lt_tensor *lt_argsort(const lt_tensor *x, int dim, bool descending) {
  lt_tensor *idx = NULL;
  return sort_impl("argsort", x, dim, descending, -1, NULL, &idx) == LT_OK ? idx : NULL;
}

lt_status lt_topk(const lt_tensor *x, int64_t k, int dim, bool largest, lt_tensor **values, lt_tensor **indices) {
  if (k < 0) {
    if (values) *values = NULL;
    if (indices) *indices = NULL;
    if (!x) return lt__err_null("topk", "x");
    return lt__err(LT_ERR_INVALID, "topk: x is %s: k %lld must be >= 0", LT__D(x), (long long)k);
  }
  return sort_impl("topk", x, dim, largest, k, values, indices);
}

/* ---- flip, roll, repeat ------------------------------------------------------ */

lt_tensor *lt_flip(const lt_tensor *x, int ndims, const int *dims) {
  if (!x) return lt__err_null("flip", "x"), NULL;
  if (ndims < 0 || ndims > x->ndim || (ndims && !dims))
    return lt__err(LT_ERR_INVALID, "flip: x is %s: %d dims given%s", LT__D(x), ndims, ndims && !dims ? " but dims is NULL" : ""),
           NULL;
  bool seen[LT_MAX_DIMS] = {false};
  int ds[LT_MAX_DIMS];
  for (int i = 0; i < ndims; i++) {
    if (lt__wrap_dim("flip", dims[i], x->ndim, &ds[i]) != LT_OK) return NULL;
    if (seen[ds[i]]) return lt__err(LT_ERR_INVALID, "flip: x is %s: dim %d is given twice", LT__D(x), dims[i]), NULL;
    seen[ds[i]] = true;
  }
  lt_scope *sc = lt_scope_begin();
  if (!sc) return NULL;
  lt_tensor *y = (lt_tensor *)x; /* not written: each step makes a new tensor */
  for (int i = 0; i < ndims && y; i++) {
    const int64_t n = x->shape[ds[i]];
    lt_tensor *rev = lt_arange(LT_DTYPE_I64, (double)n - 1, -1.0, -1.0); /* n-1, ..., 0 */
    y = lt_index_select(y, ds[i], rev);
  }
  if (y && y->storage == x->storage) y = lt_clone(x); /* no dims: still a copy, as torch.flip */
  return lt_scope_return(sc, y);
}

/* Roll one dim by s (in [0, n)): cat(x[n-s:], x[:n-s]). */
static lt_tensor *roll1(lt_tensor *x, int d, int64_t s) {
  const int64_t n = x->shape[d];
  if (n == 0 || s == 0) return x;
  lt_tensor *parts[2] = {lt_narrow(x, d, n - s, s), lt_narrow(x, d, 0, n - s)};
  return parts[0] && parts[1] ? lt_cat(2, parts, d) : NULL;
}

lt_tensor *lt_roll(const lt_tensor *x, int n, const int64_t *shifts, const int *dims) {
  if (!x) return lt__err_null("roll", "x"), NULL;
  if (n < 1 || !shifts || n > LT_MAX_DIMS)
    return lt__err(LT_ERR_INVALID, "roll: x is %s: %d shifts: give 1 to %d%s", LT__D(x), n, LT_MAX_DIMS,
                   shifts ? "" : " (shifts is NULL)"),
           NULL;
  if (!dims && n != 1)
    return lt__err(LT_ERR_INVALID, "roll: x is %s: %d shifts without dims: rolling the flattened tensor takes one",
                   LT__D(x), n),
           NULL;
  int ds[LT_MAX_DIMS];
  for (int i = 0; dims && i < n; i++)
    if (lt__wrap_dim("roll", dims[i], x->ndim, &ds[i]) != LT_OK) return NULL;
  lt_scope *sc = lt_scope_begin();
  if (!sc) return NULL;
  lt_tensor *y;
  if (!dims) { /* torch.roll without dims: the flattened tensor, then back to x's shape */
    lt_tensor *f = lt_reshape(x, 1, (int64_t[]){x->numel});
    const int64_t m = x->numel;
    y = f ? roll1(f, 0, m ? ((shifts[0] % m) + m) % m : 0) : NULL;
    y = y ? lt_reshape(y, x->ndim, x->shape) : NULL;
  } else {
    y = (lt_tensor *)x;
    for (int i = 0; i < n && y; i++) {
      const int64_t m = x->shape[ds[i]];
      y = roll1(y, ds[i], m ? ((shifts[i] % m) + m) % m : 0);
    }
  }
  if (y && y->storage == x->storage) y = lt_clone(x); /* every shift 0: still a copy, as torch.roll */
  return lt_scope_return(sc, y);
}

lt_tensor *lt_repeat(const lt_tensor *x, int ndims, const int64_t *repeats) {
  if (!x) return lt__err_null("repeat", "x"), NULL;
  if (ndims < x->ndim || ndims > LT_MAX_DIMS / 2 || (ndims && !repeats))
    return lt__err(LT_ERR_INVALID, "repeat: x is %s: %d repeats: need one per dim of x at least (%d), at most %d", LT__D(x),
                   ndims, x->ndim, LT_MAX_DIMS / 2),
           NULL;
  int64_t inter[LT_MAX_DIMS], big[LT_MAX_DIMS], out[LT_MAX_DIMS];
  const int lead = ndims - x->ndim;
  for (int i = 0; i < ndims; i++) {
    const int64_t s = i < lead ? 1 : x->shape[i - lead], r = repeats[i];
    if (r < 0)
      return lt__err(LT_ERR_INVALID, "repeat: x is %s: repeats[%d] is %lld: must be >= 0", LT__D(x), i, (long long)r), NULL;
    if (s && r > INT64_MAX / s)
      return lt__err(LT_ERR_OVERFLOW, "repeat: x is %s: repeats[%d] %lld overflows the size", LT__D(x), i, (long long)r),
             NULL;
    inter[2 * i] = 1, inter[2 * i + 1] = s;
    big[2 * i] = r, big[2 * i + 1] = s;
    out[i] = r * s;
  }
  lt_scope *sc = lt_scope_begin();
  if (!sc) return NULL;
  /* x as [1, s0, 1, s1, ...], expanded to [r0, s0, r1, s1, ...], then [r0 s0, r1 s1, ...] (a copy) */
  lt_tensor *y = lt_reshape(x, 2 * ndims, inter);
  y = y ? lt_expand(y, 2 * ndims, big) : NULL;
  y = y ? lt_reshape(y, ndims, out) : NULL;
  if (y && (y->storage == x->storage || !lt_is_contiguous(y))) y = lt_clone(y); /* a copy, as Tensor.repeat */
  return lt_scope_return(sc, y);
}
