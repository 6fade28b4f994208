/*
 * tensor/view.c: views (new geometry over the same storage, no copy) and their
 * backwards: reshape/view/flatten/squeeze/unsqueeze, permute/transpose,
 * slice/narrow/select, expand/broadcast_to, and broadcast shape arithmetic.
 *
 * A view never copies, except lt_reshape when no view is possible (as
 * PyTorch's reshape). Each view is recorded for autograd under one of four op
 * ids (see ops_view.def); the backwards are at the end of this file.
 */
#include "tensor/graph_internal.h"
#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"

#include <string.h>

/* Record a view op; on failure frees out and returns NULL. */
static lt_tensor *recorded(lt_tensor *out, lt__op_id op, const lt_tensor *x, const void *aux,
                           size_t aux_size) {
  if (out && lt__record(out, op, 1, (const lt_tensor *[]){x}, 0, NULL, aux, aux_size) != LT_OK) {
    lt_tensor_free(out);
    return NULL;
  }
  return out;
}

/* ---- broadcasting ------------------------------------------------------ */

lt_status lt_broadcast_shapes(int na, const int64_t *a, int nb, const int64_t *b, int *nout,
                              int64_t *out) {
  if (!nout || !out) return lt__err(LT_ERR_NULL, "broadcast_shapes: output is NULL");
  int n = na > nb ? na : nb;
  int64_t r[LT_MAX_DIMS];
  for (int i = 0; i < n; i++) {
    int64_t da = i < na ? a[na - 1 - i] : 1, db = i < nb ? b[nb - 1 - i] : 1;
    if (da != db && da != 1 && db != 1)
      return lt__err(LT_ERR_SHAPE,
                     "broadcast: shapes %s and %s are not broadcastable (dim %d from the end: %lld vs %lld)",
                     LT__S(na, a), LT__S(nb, b), i, (long long)da, (long long)db);
    r[n - 1 - i] = da == 1 ? db : da;
  }
  *nout = n;
  memcpy(out, r, sizeof(int64_t) * (size_t)n);
  return LT_OK;
}

/* ---- reshape family ---------------------------------------------------- */

/* Resolve a single -1 in shape against numel; checks the product. */
static lt_status infer_shape(const char *op, const lt_tensor *x, int ndim, const int64_t *shape,
                             int64_t *out) {
  if (ndim < 0 || ndim > LT_MAX_DIMS)
    return lt__err(LT_ERR_INVALID, "%s: rank %d is outside 0..%d", op, ndim, LT_MAX_DIMS);
  if (ndim > 0 && !shape) return lt__err(LT_ERR_NULL, "%s: shape is NULL", op);
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] == -1) {
      if (infer >= 0) return lt__err(LT_ERR_INVALID, "%s: only one dim can be -1 in %s", op, LT__S(ndim, shape));
      infer = i;
    } else if (shape[i] < 0) {
      return lt__err(LT_ERR_INVALID, "%s: invalid size %lld in %s", op, (long long)shape[i], LT__S(ndim, shape));
    } else {
      out[i] = shape[i];
      if (shape[i] != 0 && known > INT64_MAX / shape[i])
        return lt__err(LT_ERR_OVERFLOW, "%s: shape %s overflows", op, LT__S(ndim, shape));
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || x->numel % known != 0)
      return lt__err(LT_ERR_SHAPE, "%s: cannot infer -1 in %s for x %s (%lld elements)", op,
                     LT__S(ndim, shape), LT__D(x), (long long)x->numel);
    out[infer] = x->numel / known;
    known *= out[infer];
  }
  if (known != x->numel)
    return lt__err(LT_ERR_SHAPE, "%s: x is %s (%lld elements): shape %s has %lld elements", op, LT__D(x),
                   (long long)x->numel, LT__S(ndim, shape), (long long)known);
  return LT_OK;
}

/* Strides for viewing x as shape without copying, if possible (PyTorch's
 * computeStride: dims are grouped into chunks contiguous in memory). */
static bool view_strides(const lt_tensor *x, int ndim, const int64_t *shape, int64_t *stride) {
  if (x->numel == 0 || x->ndim == 0) {
    lt__contiguous_strides(ndim, shape, stride);
    return true;
  }
  int view_d = ndim - 1;
  int64_t chunk_base = x->stride[x->ndim - 1], tensor_numel = 1, view_numel = 1;
  for (int d = x->ndim - 1; d >= 0; d--) {
    tensor_numel *= x->shape[d];
    if (d == 0 || (x->shape[d - 1] != 1 && x->stride[d - 1] != tensor_numel * chunk_base)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        stride[view_d] = view_numel * chunk_base;
        view_numel *= shape[view_d];
        view_d--;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base = x->stride[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

typedef struct {
  int64_t dummy; /* reshape's backward needs only the input shape (in the edge) */
} reshape_aux;

/* A view with shape (already validated); copy_ok allows a copy when no view exists. */
static lt_tensor *reshape_impl(const char *op, const lt_tensor *x, int ndim, const int64_t *shape,
                               bool copy_ok) {
  int64_t stride[LT_MAX_DIMS];
  if (view_strides(x, ndim, shape, stride))
    return recorded(lt__view_of(x, ndim, shape, stride, x->offset), LT__OP_reshape, x, NULL, 0);
  if (!copy_ok) {
    lt__err(LT_ERR_SHAPE,
            "%s: x is %s with strides %s: it cannot be viewed as %s without a copy (use reshape or "
            "contiguous first)",
            op, LT__D(x), LT__S(x->ndim, x->stride), LT__S(ndim, shape));
    return NULL;
  }
  lt_tensor *c = lt_clone(x); /* recorded as copy */
  if (!c) return NULL;
  lt__contiguous_strides(ndim, shape, stride);
  lt_tensor *out = recorded(lt__view_of(c, ndim, shape, stride, c->offset), LT__OP_reshape, c, NULL, 0);
  lt_tensor_free(c);
  return out;
}

lt_tensor *lt_view(const lt_tensor *x, int ndim, const int64_t *shape) {
  if (!x) return lt__err_null("view", "x"), NULL;
  int64_t sh[LT_MAX_DIMS];
  if (infer_shape("view", x, ndim, shape, sh) != LT_OK) return NULL;
  return reshape_impl("view", x, ndim, sh, false);
}

lt_tensor *lt_reshape(const lt_tensor *x, int ndim, const int64_t *shape) {
  if (!x) return lt__err_null("reshape", "x"), NULL;
  int64_t sh[LT_MAX_DIMS];
  if (infer_shape("reshape", x, ndim, shape, sh) != LT_OK) return NULL;
  return reshape_impl("reshape", x, ndim, sh, true);
}

lt_tensor *lt_flatten(const lt_tensor *x, int start_dim, int end_dim) {
  if (!x) return lt__err_null("flatten", "x"), NULL;
  if (x->ndim == 0) return lt_reshape(x, 1, (int64_t[]){1});
  int s, e;
  if (lt__wrap_dim("flatten", start_dim, x->ndim, &s) != LT_OK) return NULL;
  if (lt__wrap_dim("flatten", end_dim, x->ndim, &e) != LT_OK) return NULL;
  if (s > e) {
    lt__err(LT_ERR_INVALID, "flatten: start_dim %d comes after end_dim %d for %s", start_dim, end_dim, LT__D(x));
    return NULL;
  }
  int64_t sh[LT_MAX_DIMS];
  int n = 0;
  for (int i = 0; i < s; i++) sh[n++] = x->shape[i];
  int64_t m = 1;
  for (int i = s; i <= e; i++) m *= x->shape[i];
  sh[n++] = m;
  for (int i = e + 1; i < x->ndim; i++) sh[n++] = x->shape[i];
  return reshape_impl("flatten", x, n, sh, true);
}

lt_tensor *lt_squeeze(const lt_tensor *x, int dim) {
  if (!x) return lt__err_null("squeeze", "x"), NULL;
  int d;
  if (lt__wrap_dim("squeeze", dim, x->ndim, &d) != LT_OK) return NULL;
  int64_t sh[LT_MAX_DIMS], st[LT_MAX_DIMS];
  int n = 0;
  for (int i = 0; i < x->ndim; i++) {
    if (i == d && x->shape[i] == 1) continue;
    sh[n] = x->shape[i];
    st[n++] = x->stride[i];
  }
  return recorded(lt__view_of(x, n, sh, st, x->offset), LT__OP_reshape, x, NULL, 0);
}

lt_tensor *lt_squeeze_all(const lt_tensor *x) {
  if (!x) return lt__err_null("squeeze_all", "x"), NULL;
  int64_t sh[LT_MAX_DIMS], st[LT_MAX_DIMS];
  int n = 0;
  for (int i = 0; i < x->ndim; i++) {
    if (x->shape[i] == 1) continue;
    sh[n] = x->shape[i];
    st[n++] = x->stride[i];
  }
  return recorded(lt__view_of(x, n, sh, st, x->offset), LT__OP_reshape, x, NULL, 0);
}

lt_tensor *lt_unsqueeze(const lt_tensor *x, int dim) {
  if (!x) return lt__err_null("unsqueeze", "x"), NULL;
  if (x->ndim >= LT_MAX_DIMS) {
    lt__err(LT_ERR_INVALID, "unsqueeze: x is %s: already at the maximum rank %d", LT__D(x), LT_MAX_DIMS);
    return NULL;
  }
  int d;
  if (lt__wrap_dim("unsqueeze", dim, x->ndim + 1, &d) != LT_OK) return NULL;
  int64_t sh[LT_MAX_DIMS], st[LT_MAX_DIMS];
  for (int i = 0, j = 0; i <= x->ndim; i++) {
    if (i == d) {
      sh[i] = 1;
      st[i] = j < x->ndim ? x->stride[j] * x->shape[j] : 1;
    } else {
      sh[i] = x->shape[j];
      st[i] = x->stride[j];
      j++;
    }
  }
  return recorded(lt__view_of(x, x->ndim + 1, sh, st, x->offset), LT__OP_reshape, x, NULL, 0);
}

/* ---- permute ----------------------------------------------------------- */

typedef struct {
  int perm[LT_MAX_DIMS];
} permute_aux;

lt_tensor *lt_permute(const lt_tensor *x, int ndim, const int *perm) {
  if (!x) return lt__err_null("permute", "x"), NULL;
  if (ndim != x->ndim || (ndim > 0 && !perm)) {
    lt__err(LT_ERR_INVALID, "permute: x is %s: the permutation has %d entries, expected %d", LT__D(x), ndim,
            x->ndim);
    return NULL;
  }
  permute_aux aux;
  bool seen[LT_MAX_DIMS] = {false};
  int64_t sh[LT_MAX_DIMS], st[LT_MAX_DIMS];
  for (int i = 0; i < ndim; i++) {
    int d;
    if (lt__wrap_dim("permute", perm[i], ndim, &d) != LT_OK) return NULL;
    if (seen[d]) {
      lt__err(LT_ERR_INVALID, "permute: x is %s: dim %d appears twice in the permutation", LT__D(x), d);
      return NULL;
    }
    seen[d] = true;
    aux.perm[i] = d;
    sh[i] = x->shape[d];
    st[i] = x->stride[d];
  }
  return recorded(lt__view_of(x, ndim, sh, st, x->offset), LT__OP_permute, x, &aux, sizeof aux);
}

lt_tensor *lt_transpose(const lt_tensor *x, int dim0, int dim1) {
  if (!x) return lt__err_null("transpose", "x"), NULL;
  int a, b;
  if (lt__wrap_dim("transpose", dim0, x->ndim, &a) != LT_OK) return NULL;
  if (lt__wrap_dim("transpose", dim1, x->ndim, &b) != LT_OK) return NULL;
  if (x->ndim == 0) return lt_permute(x, 0, NULL);
  int perm[LT_MAX_DIMS];
  for (int i = 0; i < x->ndim; i++) perm[i] = i;
  perm[a] = b;
  perm[b] = a;
  return lt_permute(x, x->ndim, perm);
}

/* ---- slicing ----------------------------------------------------------- */

typedef struct {
  int dim;
  int64_t start, step;
} slice_aux;

lt_tensor *lt_slice(const lt_tensor *x, int dim, int64_t start, int64_t end, int64_t step) {
  if (!x) return lt__err_null("slice", "x"), NULL;
  int d;
  if (x->ndim == 0) {
    lt__err(LT_ERR_INVALID, "slice: x is 0-d: nothing to slice");
    return NULL;
  }
  if (lt__wrap_dim("slice", dim, x->ndim, &d) != LT_OK) return NULL;
  if (step < 1) {
    lt__err(LT_ERR_INVALID, "slice: step %lld must be positive (x is %s)", (long long)step, LT__D(x));
    return NULL;
  }
  int64_t n = x->shape[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  if (start < 0) start = 0;
  if (start > n) start = n;
  if (end > n) end = n;
  if (end < start) end = start;
  int64_t sh[LT_MAX_DIMS], st[LT_MAX_DIMS];
  memcpy(sh, x->shape, sizeof sh);
  memcpy(st, x->stride, sizeof st);
  sh[d] = (end - start + step - 1) / step;
  st[d] = x->stride[d] * step;
  slice_aux aux = {d, start, step};
  return recorded(lt__view_of(x, x->ndim, sh, st, x->offset + start * x->stride[d]), LT__OP_slice, x, &aux,
                  sizeof aux);
}

lt_tensor *lt_narrow(const lt_tensor *x, int dim, int64_t start, int64_t length) {
  if (!x) return lt__err_null("narrow", "x"), NULL;
  int d;
  if (x->ndim == 0) {
    lt__err(LT_ERR_INVALID, "narrow: x is 0-d: nothing to narrow");
    return NULL;
  }
  if (lt__wrap_dim("narrow", dim, x->ndim, &d) != LT_OK) return NULL;
  int64_t n = x->shape[d];
  if (start < 0) start += n;
  if (start < 0 || length < 0 || start > n || length > n - start) {
    lt__err(LT_ERR_INDEX, "narrow: x is %s: start %lld with length %lld exceeds dim %d of size %lld", LT__D(x),
            (long long)start, (long long)length, d, (long long)n);
    return NULL;
  }
  return lt_slice(x, d, start, start + length, 1);
}

lt_tensor *lt_select(const lt_tensor *x, int dim, int64_t index) {
  if (!x) return lt__err_null("select", "x"), NULL;
  int d;
  if (x->ndim == 0) {
    lt__err(LT_ERR_INVALID, "select: x is 0-d: nothing to select");
    return NULL;
  }
  if (lt__wrap_dim("select", dim, x->ndim, &d) != LT_OK) return NULL;
  int64_t n = x->shape[d];
  if (index < -n || index >= n) {
    lt__err(LT_ERR_INDEX, "select: index %lld is out of range for dim %d of %s", (long long)index, d, LT__D(x));
    return NULL;
  }
  if (index < 0) index += n;
  lt_tensor *s = lt_slice(x, d, index, index + 1, 1);
  if (!s) return NULL;
  lt_tensor *out = lt_squeeze(s, d);
  lt_tensor_free(s);
  return out;
}

/* ---- expand ------------------------------------------------------------ */

lt_tensor *lt_expand(const lt_tensor *x, int ndim, const int64_t *shape) {
  if (!x) return lt__err_null("expand", "x"), NULL;
  if (ndim < x->ndim || ndim > LT_MAX_DIMS || (ndim > 0 && !shape)) {
    lt__err(LT_ERR_SHAPE, "expand: x is %s: target rank %d must be in %d..%d", LT__D(x), ndim, x->ndim,
            LT_MAX_DIMS);
    return NULL;
  }
  int64_t sh[LT_MAX_DIMS], st[LT_MAX_DIMS];
  int lead = ndim - x->ndim;
  for (int i = 0; i < ndim; i++) {
    int j = i - lead;
    int64_t want = shape[i];
    if (j < 0) {
      if (want < 0) {
        lt__err(LT_ERR_SHAPE, "expand: x is %s: -1 is not allowed for the new leading dim %d of %s", LT__D(x), i,
                LT__S(ndim, shape));
        return NULL;
      }
      sh[i] = want;
      st[i] = 0;
    } else if (want == -1 || want == x->shape[j]) {
      sh[i] = x->shape[j];
      st[i] = x->stride[j];
    } else if (x->shape[j] == 1 && want >= 0) {
      sh[i] = want;
      st[i] = 0;
    } else {
      lt__err(LT_ERR_SHAPE, "expand: x is %s: cannot expand dim %d of size %lld to %lld (target %s)", LT__D(x),
              j, (long long)x->shape[j], (long long)want, LT__S(ndim, shape));
      return NULL;
    }
  }
  return recorded(lt__view_of(x, ndim, sh, st, x->offset), LT__OP_expand, x, NULL, 0);
}

lt_tensor *lt_broadcast_to(const lt_tensor *x, int ndim, const int64_t *shape) {
  return lt_expand(x, ndim, shape);
}

/* ---- backwards --------------------------------------------------------- */

/* reshape: dx = reshape(g, x.shape) */
lt_status lt__bw_reshape(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  gin[0] = lt_reshape(gout, node->in[0].ndim, node->in[0].shape);
  return gin[0] ? LT_OK : lt_last_status();
}

/* permute: dx = permute(g, inverse(perm)) */
lt_status lt__bw_permute(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  const permute_aux *a = (const permute_aux *)node->aux;
  int inv[LT_MAX_DIMS];
  for (int i = 0; i < node->in[0].ndim; i++) inv[a->perm[i]] = i;
  gin[0] = lt_permute(gout, node->in[0].ndim, inv);
  return gin[0] ? LT_OK : lt_last_status();
}

/* slice: dx = zeros(x.shape) with g written into the sliced positions */
lt_status lt__bw_slice(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  const slice_aux *a = (const slice_aux *)node->aux;
  lt_tensor *dx = lt_zeros(gout->dtype, node->in[0].ndim, node->in[0].shape);
  if (!dx) return lt_last_status();
  int64_t end = a->start + a->step * (gout->shape[a->dim] - 1) + 1;
  lt_tensor *window = lt_slice(dx, a->dim, a->start, end, a->step);
  lt_status s = window ? lt_copy_(window, gout) : lt_last_status();
  lt_tensor_free(window);
  if (s != LT_OK) {
    lt_tensor_free(dx);
    return s;
  }
  gin[0] = dx;
  return LT_OK;
}

/* expand: dx = g summed over the expanded dims (done by the engine's lt__sum_to) */
lt_status lt__bw_expand(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  gin[0] = lt_detach(gout);
  return gin[0] ? LT_OK : lt_last_status();
}
