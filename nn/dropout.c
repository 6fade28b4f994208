/*
 * nn/dropout.c: lt_dropout, inverted dropout (torch.nn.functional.dropout),
 * forward and backward side by side.
 *
 * Training with 0 < p < 1: keep = bernoulli(1 - p) drawn from ctx->gen over
 * x's elements in row-major order (one lt_bernoulli draw, so the generator
 * advances as for any draw of x->numel bool elements), then
 *     y = x * (keep ? scale : 0),   scale = 1 / (1 - p) in x's dtype,
 * which is PyTorch's `input * bernoulli_(1 - p).div_(1 - p)`. The forward
 * draws the mask and applies it in one pass (lt__dropout_draw in
 * tensor/random.c: the same mask values and generator advance as
 * lt_bernoulli). The keep mask is saved (one byte per element; cheaper to
 * read back than to recompute from the counters) and the backward is
 * g * (keep ? scale : 0).
 * p == 1 gives x * 0 (zeros; NaN stays NaN as in PyTorch) without a draw.
 * Evaluation (ctx NULL or not training), p == 0 or an empty x: y is a view
 * of x recorded as identity (its gradient is g), and nothing is drawn.
 * Training with p > 0 and no generator is an error even when nothing would
 * be drawn (p == 1, empty x), so a missing generator shows up at once.
 *
 * What this is not: dropout on whole channels (Dropout2d) or alpha dropout.
 */
#include "nn/nn.h"

#include "tensor/graph_internal.h"
#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"
#include "tensor/runtime_internal.h"
#include "tensor/random_internal.h"

#include <math.h>
#include <omp.h>

/* aux: the mode of the node (identity view, zero, or masked). */
typedef struct dropout_aux {
  int kind;       /* DROP_IDENTITY, DROP_ZERO, DROP_MASK */
  double p;
} dropout_aux;
enum { DROP_IDENTITY, DROP_ZERO, DROP_MASK };

/* y[i] = x[i] * (keep[i] ? s : 0) over n contiguous elements. Also the
 * backward (x is then g). */
#define DROPOUT_KERNEL(NAME, T)                                                           \
  static void drop_##NAME(T *y, const T *x, const uint8_t *keep, T s, int64_t n) {        \
    _Pragma("omp parallel for simd schedule(static) if (n >= LT__PARALLEL_MIN)")          \
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * (keep[i] ? s : (T)0);                   \
  }
DROPOUT_KERNEL(f32, float)
DROPOUT_KERNEL(f64, double)

/* scale = 1 / (1 - p), computed in the dtype as PyTorch's div_(1 - p). */
static double drop_scale(lt_dtype dt, double p) {
  return dt == LT_DTYPE_F32 ? (double)(1.0f / (float)(1.0 - p)) : 1.0 / (1.0 - p);
}
static void drop_run(lt_dtype dt, void *y, const void *x, const uint8_t *keep, double p, int64_t n) {
  if (dt == LT_DTYPE_F32) drop_f32(y, x, keep, (float)drop_scale(dt, p), n);
  else drop_f64(y, x, keep, drop_scale(dt, p), n);
}

lt_tensor *lt_dropout(const lt_tensor *x, double p, const lt_nn_ctx *ctx) {
  if (!x) return lt__err_null("dropout", "x"), NULL;
  if (!(p >= 0 && p <= 1))
    return lt__err(LT_ERR_INVALID, "dropout: x is %s: p is %g, must be in [0, 1]", LT__D(x), p), NULL;
  const bool training = ctx && ctx->training;
  dropout_aux aux = {DROP_IDENTITY, p};
  if (training && p > 0 && x->numel > 0) aux.kind = p == 1 ? DROP_ZERO : DROP_MASK;
  if (aux.kind != DROP_IDENTITY && !lt_dtype_is_float(x->dtype))
    return lt__err(LT_ERR_DTYPE, "dropout: x is %s: training dropout needs f32 or f64", LT__D(x)), NULL;
  if (training && p > 0 && !ctx->gen) /* even where no draw is needed (p == 1, empty x) */
    return lt__err(LT_ERR_INVALID,
                   "dropout: x is %s: training with p = %g needs a generator (ctx->gen is NULL)",
                   LT__D(x), p),
           NULL;

  lt_tensor *y = NULL, *keep = NULL, *xt = NULL;
  if (aux.kind == DROP_IDENTITY) {
    y = lt__view_of(x, x->ndim, x->shape, x->stride, x->offset);
  } else if (aux.kind == DROP_ZERO) {
    const bool prev = lt_set_grad_enabled(false);
    y = lt_mul_scalar(x, 0.0);
    lt_set_grad_enabled(prev);
  } else {
    /* One pass: the mask's words, the mask and y together (the values of
     * lt_bernoulli(gen, bool, x's shape, 1 - p), and the generator advances
     * as for it). */
    const lt_tensor *xc = lt__as_contig(x, x->dtype, &xt);
    keep = xc ? lt_empty(LT_DTYPE_BOOL, x->ndim, x->shape) : NULL;
    y = keep ? lt_empty(x->dtype, x->ndim, x->shape) : NULL;
    if (y)
      lt__dropout_draw(ctx->gen, x->dtype, x->numel, 1.0 - p, drop_scale(x->dtype, p), xc->data,
                       y->data, keep->data);
  }
  if (y && lt__record(y, LT__OP_dropout, 1, &x, keep ? 1 : 0, (const lt_tensor *[]){keep}, &aux,
                      sizeof aux) != LT_OK) {
    lt_tensor_free(y);
    y = NULL;
  }
  lt_tensor_free(keep);
  lt_tensor_free(xt);
  return y;
}

/* identity: dx = g (a new view of it); zero: dx = 0; mask: dx = g * (keep ? scale : 0).
 * Saved: keep [x's shape] (bool, contiguous) in the mask case. */
lt_status lt__bw_dropout(const lt_node *node, const lt_tensor *gout, lt_tensor **gin) {
  if (!lt__needs_input_grad(node, 0)) return LT_OK;
  const dropout_aux *a = (const dropout_aux *)node->aux;
  const lt_dtype dt = node->in[0].dtype;
  lt_tensor *dx;
  if (a->kind == DROP_IDENTITY) {
    dx = lt__view_of(gout, gout->ndim, gout->shape, gout->stride, gout->offset);
  } else if (a->kind == DROP_ZERO) {
    dx = lt_zeros(dt, gout->ndim, gout->shape);
  } else {
    const lt_tensor *keep = node->saved[0];
    lt_tensor *gt;
    const lt_tensor *g = lt__as_contig(gout, dt, &gt);
    dx = g ? lt_empty(dt, keep->ndim, keep->shape) : NULL;
    if (dx) drop_run(dt, dx->data, g->data, keep->data, a->p, keep->numel);
  }
  if (!dx) return lt_last_status();
  gin[0] = dx;
  return LT_OK;
}
