/*
 * tensor/graph.c: building and freeing the autograd graph: grad mode, the
 * requires-grad flag, lt__record (called by every differentiable op's forward),
 * node reference counting, the op names and anomaly mode
 * (tensor/graph_internal.h). Traversal (lt_backward) is autograd/engine.c's.
 *
 * A node holds one reference to each input's node (or to the input itself
 * when it is a leaf that requires grad) and owns detached aliases of the
 * tensors its backward needs. Output tensors hold their grad_fn; nothing holds
 * an output, so there are no reference cycles.
 */
#include "tensor/graph_internal.h"
#include "tensor/error_internal.h"
#include "tensor/iter_internal.h"
#include "tensor/storage_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local bool tl_grad_disabled = false;

bool lt_grad_enabled(void) { return !tl_grad_disabled; }

bool lt_set_grad_enabled(bool enabled) {
  bool prev = !tl_grad_disabled;
  tl_grad_disabled = !enabled;
  return prev;
}

bool lt_is_leaf(const lt_tensor *t) { return t && t->grad_fn == NULL; }

lt_status lt_requires_grad_(lt_tensor *t, bool requires_grad) {
  if (!t) return lt__err_null("requires_grad_", "t");
  if (t->grad_fn)
    return lt__err(LT_ERR_AUTOGRAD,
                   "requires_grad_: t is %s and was made by op '%s': only leaves' flags can be changed "
                   "(detach it first)",
                   LT__D(t), lt__node_name(t->grad_fn));
  if (requires_grad && !lt_dtype_is_floating(t->dtype))
    return lt__err(LT_ERR_DTYPE, "requires_grad_: t is %s: only float tensors can require gradients", LT__D(t));
  t->requires_grad = requires_grad;
  return LT_OK;
}

bool lt__needs_grad(int nin, const lt_tensor *const *in) {
  if (tl_grad_disabled) return false;
  for (int i = 0; i < nin; i++)
    if (in[i] && in[i]->requires_grad) return true;
  return false;
}

lt_node *lt__node_retain(lt_node *node) {
  if (node) node->refcount++;
  return node;
}

static void free_saved(lt_node *n) {
  for (int i = 0; i < n->nsaved; i++) lt_tensor_free(n->saved[i]);
  free(n->saved);
  free(n->saved_version);
  n->saved = NULL;
  n->saved_version = NULL;
}

/* A node goes on the to-free list only when its count reaches zero, so a
 * node referenced twice (z = y + y, fan-out) is freed exactly once. */
void lt__node_release(lt_node *node) {
  if (!node || --node->refcount > 0) return;
  lt_node *todo = node;
  node->next_free_ = NULL;
  while (todo) {
    lt_node *n = todo;
    todo = n->next_free_;
    for (int i = 0; i < n->nin; i++) {
      lt__tensor_release(n->in[i].leaf); /* a leaf has no grad_fn: no recursion */
      lt_node *f = n->in[i].fn;
      if (f && --f->refcount == 0) {
        f->next_free_ = todo;
        todo = f;
      }
    }
    free_saved(n);
    lt__tensor_release(n->grad_acc);
    free(n->in);
    free(n);
  }
}

lt_status lt__record(lt_tensor *out, lt__op_id op, int nin, const lt_tensor *const *in, int nsaved,
                     const lt_tensor *const *saved, const void *aux, size_t aux_size) {
  if (!lt__needs_grad(nin, in)) return LT_OK;
  lt_status st = lt__anomaly_check(lt__op_names[op], out); /* LT_OK at once when anomaly mode is off */
  if (st != LT_OK) return st;
  LT_CHECK(out && out->grad_fn == NULL && (unsigned)op < LT__OP_COUNT && aux_size <= LT__AUX_MAX);
  LT_CHECK(nin >= 1 && nsaved >= 0);
  lt_node *n = calloc(1, sizeof *n);
  lt__edge *edges = n ? calloc((size_t)nin, sizeof *edges) : NULL;
  lt_tensor **sv = n && nsaved ? calloc((size_t)nsaved, sizeof *sv) : NULL;
  uint64_t *ver = n && nsaved ? calloc((size_t)nsaved, sizeof *ver) : NULL;
  if (!n || !edges || (nsaved && (!sv || !ver))) {
    free(n);
    free(edges);
    free(sv);
    free(ver);
    return lt__err(LT_ERR_NOMEM, "%s: out of memory recording the autograd graph", lt__op_names[op]);
  }
  n->op = op;
  n->refcount = 1;
  n->nin = nin;
  n->in = edges;
  for (int k = 0; k < nsaved; k++) {
    const lt_tensor *t = saved[k];
    LT_CHECK(t != NULL);
    sv[k] = lt_tensor_keep(lt__view_of(t, t->ndim, t->shape, t->stride, t->offset));
    if (!sv[k]) {
      n->saved = sv;
      n->nsaved = k;
      n->saved_version = ver;
      lt__node_release(n);
      return lt_last_status();
    }
    ver[k] = lt__version(t);
  }
  n->saved = sv;
  n->nsaved = nsaved;
  n->saved_version = ver;
  for (int i = 0; i < nin; i++) {
    const lt_tensor *t = in[i];
    if (!t) continue;
    lt__edge *e = &edges[i];
    e->dtype = t->dtype;
    e->ndim = t->ndim;
    memcpy(e->shape, t->shape, sizeof e->shape);
    if (t->grad_fn)
      e->fn = lt__node_retain(t->grad_fn);
    else if (t->requires_grad)
      e->leaf = lt_tensor_retain((lt_tensor *)t);
  }
  if (aux_size) memcpy(n->aux, aux, aux_size);
  n->aux_size = aux_size;
  n->out_dtype = out->dtype;
  n->out_ndim = out->ndim;
  memcpy(n->out_shape, out->shape, sizeof n->out_shape);
  out->grad_fn = n;
  out->requires_grad = true;
  return LT_OK;
}

/* ======================================================================== */
/* Op names                                                                 */
/* ======================================================================== */

const char *const lt__op_names[LT__OP_COUNT] = {
#define LT__OP_NAME(id, nin, bw) [LT__OP_##id] = #id,
    LT_OP_TABLE(LT__OP_NAME)
#undef LT__OP_NAME
};

/* ======================================================================== */
/* Anomaly mode                                                             */
/* ======================================================================== */

static _Thread_local bool tl_anomaly = false;

void lt_set_anomaly_mode(bool enabled) { tl_anomaly = enabled; }
bool lt_anomaly_mode(void) { return tl_anomaly; }

/* Inner loop of the finiteness scan: sets *(bool *)ctx when it meets NaN/Inf. */
#define LT__FINITE_LOOP(T)                                                         \
  static void finite_loop_##T(int64_t n, char *const *p, const int64_t *s, void *ctx) { \
    const char *x = p[0];                                                          \
    int64_t st = s[0];                                                             \
    bool bad = false;                                                              \
    for (int64_t i = 0; i < n; i++) bad |= !isfinite(*(const T *)(x + i * st));    \
    if (bad) *(bool *)ctx = true;                                                  \
  }
LT__FINITE_LOOP(float)
LT__FINITE_LOOP(double)
#undef LT__FINITE_LOOP

bool lt__find_nonfinite(const lt_tensor *t, char *buf, size_t size) {
  if (!t || !lt_dtype_is_float(t->dtype) || t->numel == 0) return false;
  bool bad = false;
  lt__iter it;
  lt__iter_init(&it, t->ndim, t->shape, 1, (const lt_tensor *const[]){t});
  lt__iter_run(&it, t->dtype == LT_DTYPE_F32 ? finite_loop_float : finite_loop_double, &bad,
               false);
  if (!bad) return false;
  /* Slow path, only on failure: find where. */
  snprintf(buf, size, "a non-finite value");
  double *v = malloc(sizeof(double) * (size_t)t->numel);
  if (!v) return true;
  if (lt_tensor_read(t, LT_DTYPE_F64, v, t->numel) == LT_OK) {
    for (int64_t i = 0; i < t->numel; i++) {
      if (isfinite(v[i])) continue;
      int64_t idx[LT_MAX_DIMS] = {0};
      int64_t flat = i;
      for (int d = t->ndim - 1; d >= 0; d--) {
        idx[d] = flat % t->shape[d];
        flat /= t->shape[d];
      }
      snprintf(buf, size, "%s at %s", isnan(v[i]) ? "nan" : (v[i] > 0 ? "inf" : "-inf"),
               LT__S(t->ndim, idx));
      break;
    }
  }
  free(v);
  return true;
}

lt_status lt__anomaly_check(const char *what, const lt_tensor *t) {
  if (!tl_anomaly || !t) return LT_OK;
  char where[LT__DESC_SIZE];
  if (!lt__find_nonfinite(t, where, sizeof where)) return LT_OK;
  return lt__err(LT_ERR_NUMERIC, "anomaly mode: op '%s' produced %s in its output %s", what,
                 where, LT__D(t));
}
