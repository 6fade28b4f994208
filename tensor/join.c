/*
 * tensor/join.c: joining and splitting, forward and backward: cat and stack
 * (each input copied into its slice of a new output by the shared iterator;
 * the backward hands each input its slice of the gradient), split and chunk
 * (lt_narrow views, recorded by view.c). PyTorch semantics; tensor.h has the
 * contracts.
 *
 * What this is not: indexing (index_select, gather, scatter_add, embedding,
 * tril/triu, one_hot: tensor/index.c) or padding (tensor/pad.c).
 */
#include "tensor/graph_internal.h"
#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"
#include "tensor/index_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ======================================================================== */
/* cat and stack                                                            */
/* ======================================================================== */

static char *arg_name(int i, char *buf) {
  snprintf(buf, 32, "xs[%d]", i);
  return buf;
}

static lt_status check_list(const char *op, int n, lt_tensor *const *xs) {
  if (!xs) return lt__err_null(op, "xs");
  if (n < 1) return lt__err(LT_ERR_INVALID, "%s: expected at least one tensor, got n = %d", op, n);
  for (int i = 0; i < n; i++)
    if (!xs[i]) return lt__err_null(op, arg_name(i, (char[32]){0}));
  return LT_OK;
}

/* cat and stack record their n inputs and the dim (nothing saved). */
static lt_tensor *record_list(lt_tensor *out, lt__op_id id, int n, lt_tensor *const *xs, int d) {
  lt__dim_aux aux = {d};
  return lt__recorded(out, lt__record(out, id, n, (const lt_tensor *const *)xs, 0, NULL, &aux, sizeof aux));
}

/* torch.cat's legacy rule: a 1-d tensor of size 0 may join tensors of any rank. */
static bool cat_skippable(const lt_tensor *t) { return t->ndim == 1 && t->shape[0] == 0; }

/* out [..., sum n_i, ...] = [xs[0] | xs[1] | ...] along dim. */
lt_tensor *lt_cat(int n, lt_tensor *const *xs, int dim) {
  static const char *op = "cat";
  if (check_list(op, n, xs) != LT_OK) return NULL;
  int ref = 0;
  while (ref < n && cat_skippable(xs[ref])) ref++;
  if (ref == n) ref = 0; /* all are [0]: an ordinary 1-d cat */
  const lt_tensor *rt = xs[ref];
  lt_dtype dt = xs[0]->dtype;
  for (int i = 0; i < n; i++) {
    dt = lt__promote(dt, xs[i]->dtype);
    if (xs[i]->ndim == 0) {
      lt__err(LT_ERR_SHAPE,
              "cat: xs[%d] is %s: 0-d tensors cannot be concatenated (unsqueeze them or use stack)", i,
              LT__D(xs[i]));
      return NULL;
    }
  }
  int d;
  if (lt__wrap_dim(op, dim, rt->ndim, &d) != LT_OK) return NULL;
  int64_t oshape[LT_MAX_DIMS];
  for (int k = 0; k < rt->ndim; k++) oshape[k] = rt->shape[k];
  int64_t total = 0;
  for (int i = 0; i < n; i++) {
    const lt_tensor *t = xs[i];
    if (i != ref && cat_skippable(t)) continue;
    if (t->ndim != rt->ndim) {
      lt__err(LT_ERR_SHAPE,
              "cat: xs[%d] is %s but xs[%d] is %s: tensors must have the same rank (or be 1-d and empty)",
              ref, LT__D(rt), i, LT__D(t));
      return NULL;
    }
    for (int k = 0; k < t->ndim; k++) {
      if (k != d && t->shape[k] != rt->shape[k]) {
        lt__err(LT_ERR_SHAPE,
                "cat: xs[%d] is %s but xs[%d] is %s: sizes must match except in dim %d (dim %d: %lld != %lld)",
                ref, LT__D(rt), i, LT__D(t), d, k, (long long)rt->shape[k], (long long)t->shape[k]);
        return NULL;
      }
    }
    if (t->shape[d] > INT64_MAX - total) {
      lt__err(LT_ERR_OVERFLOW, "cat: the total size along dim %d overflows", d);
      return NULL;
    }
    total += t->shape[d];
  }
  oshape[d] = total;
  int64_t onumel;
  if (lt__shape_numel(op, rt->ndim, oshape, &onumel) != LT_OK) return NULL;
  lt_tensor *out = lt_empty(dt, rt->ndim, oshape);
  if (!out) return NULL;
  const int64_t es = (int64_t)lt_dtype_size(dt);
  int64_t off = 0;
  for (int i = 0; i < n; i++) {
    const lt_tensor *t = xs[i];
    if ((i != ref && cat_skippable(t)) || t->shape[d] == 0) continue;
    lt_tensor v = *out; /* stand-in view of the slice [off, off + n_i) */
    v.shape[d] = t->shape[d];
    v.numel = t->numel;
    v.data = (char *)out->data + off * out->stride[d] * es;
    lt__copy_into(&v, t);
    off += t->shape[d];
  }
  return record_list(out, LT__OP_cat, n, xs, d);
}

/* dxs[i] = narrow(dout, dim, offset_i, n_i); zeros for skipped [0] inputs. */
lt_status lt__bw_cat(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  lt__dim_aux aux;
  memcpy(&aux, node->aux, sizeof aux);
  const int d = aux.dim;
  int64_t off = 0;
  for (int i = 0; i < node->nin; i++) {
    const lt__edge *e = &node->in[i];
    const bool skipped = e->ndim != gout->ndim;
    const int64_t len = skipped ? 0 : e->shape[d];
    if (lt__needs_input_grad(node, i)) {
      if (skipped || len == 0)
        gin[i] = lt_zeros(gout->dtype, e->ndim, e->shape);
      else
        gin[i] = lt_narrow(gout, d, off, len);
      if (!gin[i]) return lt_last_status();
    }
    off += len;
  }
  return LT_OK;
}

/* out [..., n, ...] (new dim at dim): out[..., i, ...] = xs[i]. */
lt_tensor *lt_stack(int n, lt_tensor *const *xs, int dim) {
  static const char *op = "stack";
  if (check_list(op, n, xs) != LT_OK) return NULL;
  const lt_tensor *rt = xs[0];
  lt_dtype dt = rt->dtype;
  for (int i = 1; i < n; i++) {
    if (!lt__same_shape(xs[i], rt)) {
      lt__err(LT_ERR_SHAPE, "stack: xs[0] is %s but xs[%d] is %s: all tensors must have the same shape",
              LT__D(rt), i, LT__D(xs[i]));
      return NULL;
    }
    dt = lt__promote(dt, xs[i]->dtype);
  }
  const int nd = rt->ndim;
  if (nd + 1 > LT_MAX_DIMS) {
    lt__err(LT_ERR_INVALID, "stack: xs[0] is %s: the output would have more than %d dims", LT__D(rt),
            LT_MAX_DIMS);
    return NULL;
  }
  int d;
  if (lt__wrap_dim(op, dim, nd + 1, &d) != LT_OK) return NULL;
  int64_t oshape[LT_MAX_DIMS];
  for (int k = 0, j = 0; k < nd + 1; k++) oshape[k] = k == d ? n : rt->shape[j++];
  int64_t onumel;
  if (lt__shape_numel(op, nd + 1, oshape, &onumel) != LT_OK) return NULL;
  lt_tensor *out = lt_empty(dt, nd + 1, oshape);
  if (!out) return NULL;
  const int64_t es = (int64_t)lt_dtype_size(dt);
  if (rt->numel > 0) {
    for (int i = 0; i < n; i++) {
      lt_tensor v = *out; /* stand-in view of out[..., i, ...] */
      v.ndim = nd;
      for (int k = 0, j = 0; k < nd + 1; k++) {
        if (k == d) continue;
        v.shape[j] = out->shape[k];
        v.stride[j] = out->stride[k];
        j++;
      }
      v.shape[nd] = 0;
      v.stride[nd] = 0;
      v.numel = rt->numel;
      v.data = (char *)out->data + (int64_t)i * out->stride[d] * es;
      lt__copy_into(&v, xs[i]);
    }
  }
  return record_list(out, LT__OP_stack, n, xs, d);
}

/* dxs[i] = select(dout, dim, i). */
lt_status lt__bw_stack(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  lt__dim_aux aux;
  memcpy(&aux, node->aux, sizeof aux);
  for (int i = 0; i < node->nin; i++) {
    if (!lt__needs_input_grad(node, i)) continue;
    gin[i] = lt_select(gout, aux.dim, i);
    if (!gin[i]) return lt_last_status();
  }
  return LT_OK;
}

/* ======================================================================== */
/* split and chunk: lt_narrow views (recorded by view.c: no backward here)  */
/* ======================================================================== */

/* count views of len `piece` along d (the last one shorter, or all of size 0
 * when the dim is empty), into out only if all succeed. */
static lt_status split_views(const char *op, const lt_tensor *x, int d, int64_t piece,
                             int64_t count, lt_tensor **out, int capacity, int *n_out) {
  if (count > capacity)
    return lt__err(LT_ERR_INVALID, "%s: x is %s: splitting dim %d gives %lld views but capacity is %d",
                   op, LT__D(x), d, (long long)count, capacity);
  lt_tensor **tmp = malloc(sizeof(lt_tensor *) * (size_t)(count > 0 ? count : 1));
  if (!tmp) return lt__err(LT_ERR_NOMEM, "%s: cannot allocate %lld views", op, (long long)count);
  const int64_t size = x->shape[d];
  for (int64_t i = 0; i < count; i++) {
    int64_t start = i * piece < size ? i * piece : size;
    int64_t len = size - start < piece ? size - start : piece;
    tmp[i] = lt_narrow(x, d, start, len);
    if (!tmp[i]) {
      lt_status s = lt_last_status();
      for (int64_t j = 0; j < i; j++) lt_tensor_free(tmp[j]);
      free(tmp);
      return s;
    }
  }
  for (int64_t i = 0; i < count; i++) out[i] = tmp[i];
  *n_out = (int)count;
  free(tmp);
  return LT_OK;
}

static lt_status split_args(const char *op, const lt_tensor *x, int dim, lt_tensor **out,
                            int *n_out, int *d) {
  if (!x) return lt__err_null(op, "x");
  if (!out) return lt__err_null(op, "out");
  if (!n_out) return lt__err_null(op, "n_out");
  if (x->ndim == 0) return lt__err(LT_ERR_SHAPE, "%s: x is %s: cannot split a 0-d tensor", op, LT__D(x));
  return lt__wrap_dim(op, dim, x->ndim, d);
}

lt_status lt_split(const lt_tensor *x, int64_t split_size, int dim, lt_tensor **out, int capacity,
                   int *n_out) {
  static const char *op = "split";
  int d;
  lt_status s = split_args(op, x, dim, out, n_out, &d);
  if (s != LT_OK) return s;
  const int64_t size = x->shape[d];
  if (split_size < 0 || (split_size == 0 && size > 0))
    return lt__err(LT_ERR_INVALID, "split: x is %s: split_size %lld along dim %d must be positive", LT__D(x),
                   (long long)split_size, d);
  /* an empty dim gives one empty view, as PyTorch */
  int64_t count = split_size == 0 ? 1 : size / split_size + (size % split_size != 0);
  if (count < 1) count = 1;
  return split_views(op, x, d, split_size, count, out, capacity, n_out);
}

lt_status lt_chunk(const lt_tensor *x, int chunks, int dim, lt_tensor **out, int capacity,
                   int *n_out) {
  static const char *op = "chunk";
  int d;
  lt_status s = split_args(op, x, dim, out, n_out, &d);
  if (s != LT_OK) return s;
  if (chunks <= 0)
    return lt__err(LT_ERR_INVALID, "chunk: x is %s: chunks must be positive, got %d", LT__D(x), chunks);
  const int64_t size = x->shape[d];
  if (size == 0) /* PyTorch: `chunks` empty views */
    return split_views(op, x, d, 0, chunks, out, capacity, n_out);
  const int64_t piece = (size + chunks - 1) / chunks;
  return split_views(op, x, d, piece, (size + piece - 1) / piece, out, capacity, n_out);
}
