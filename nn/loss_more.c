/*
 * nn/loss_more.c: the losses beyond cross-entropy, NLL and MSE, each
 * composed of the library's differentiable ops, so autograd differentiates
 * them (no op table entry, no hand-written backward):
 *   binary_cross_entropy_with_logits, l1_loss, smooth_l1_loss, huber_loss,
 *   kl_div, cosine_embedding_loss,
 * each with torch.nn.functional's definition and defaults
 * (https://pytorch.org/docs/stable/nn.functional.html#loss-functions). Each
 * checks its arguments first, so a message names the loss, the tensors and
 * the shapes rather than an inner op, and makes its intermediates inside a
 * scope of its own (lt_scope_return): the caller sees one new tensor, as
 * from any op.
 *
 * What this is not: fused kernels. Each costs a few elementwise passes over
 * the loss's input, small next to the model that feeds it; cross_entropy is
 * fused (nn/loss.c) because its softmax over V is the cost.
 */
#include "nn/nn.h"

#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"

#include <math.h>

/* ---- argument checks ------------------------------------------------------ */

static bool need_float(const char *op, const char *name, const lt_tensor *t) {
  if (lt_dtype_is_float(t->dtype) && t->dtype != LT_DTYPE_BF16) return true;
  lt__err(LT_ERR_DTYPE, "%s: %s is %s: must be f32 or f64", op, name, LT__D(t));
  return false;
}

static bool need_same_shape(const char *op, const char *an, const lt_tensor *a, const char *bn, const lt_tensor *b) {
  if (lt__same_shape(a, b)) return true;
  lt__err(LT_ERR_SHAPE, "%s: %s is %s, %s is %s: shapes must be equal (no broadcasting; expand explicitly if that is meant)",
          op, an, LT__D(a), bn, LT__D(b));
  return false;
}

/* w broadcasts to x's shape (NumPy rules, w no bigger than x). */
static bool need_broadcast(const char *op, const char *wn, const lt_tensor *w, const lt_tensor *x) {
  bool ok = w->ndim <= x->ndim;
  for (int i = 1; ok && i <= w->ndim; i++) {
    int64_t a = w->shape[w->ndim - i], b = x->shape[x->ndim - i];
    ok = a == b || a == 1;
  }
  if (!ok) lt__err(LT_ERR_SHAPE, "%s: %s is %s, input is %s: %s must broadcast to the input's shape", op, wn, LT__D(w), LT__D(x), wn);
  return ok;
}

static bool need_reduction(const char *op, const lt_tensor *x, lt_reduction r, bool batchmean) {
  if (r == LT_REDUCTION_MEAN || r == LT_REDUCTION_SUM || r == LT_REDUCTION_NONE ||
      (batchmean && r == LT_REDUCTION_BATCHMEAN))
    return true;
  lt__err(LT_ERR_INVALID, "%s: input is %s: reduction %d is not one of LT_REDUCTION_MEAN, _SUM, _NONE%s", op, LT__D(x),
          (int)r, batchmean ? ", _BATCHMEAN" : "");
  return false;
}

/* The reduction of a pointwise loss l (in the current scope). batchmean: the
 * sum over the first dim's size (a 0-d l: the sum). Mean of an empty tensor
 * is NaN, as PyTorch. */
static lt_tensor *reduce(lt_tensor *l, lt_reduction r) {
  switch (r) {
    case LT_REDUCTION_MEAN: return lt_mean(l, 0, NULL, false);
    case LT_REDUCTION_SUM: return lt_sum(l, 0, NULL, false);
    case LT_REDUCTION_BATCHMEAN:
      return l && l->ndim > 0 ? lt_div_scalar(lt_sum(l, 0, NULL, false), (double)l->shape[0]) : lt_sum(l, 0, NULL, false);
    default: return l;
  }
}

/* ---- binary cross-entropy with logits ------------------------------------------- */

/* F.binary_cross_entropy_with_logits:
 *     l = w * ((1 - y) x + (1 + (pw - 1) y) softplus(-x))
 * softplus(-x) = -log sigmoid(x) = log1p(exp(-|x|)) + max(-x, 0), written as
 * log1p(exp(-x s)) - x m with s = sign(x) (1 at 0) and m = [x < 0] taken as
 * constants: the same values, and the exact derivative -sigmoid(-x) at every
 * x, 0 included (abs and relu would give 0 there, not -1/2). */
lt_tensor *lt_binary_cross_entropy_with_logits(const lt_tensor *input, const lt_tensor *target, const lt_tensor *weight,
                                               const lt_tensor *pos_weight, lt_reduction reduction) {
  const char *op = "binary_cross_entropy_with_logits";
  if (!input) return lt__err_null(op, "input"), NULL;
  if (!target) return lt__err_null(op, "target"), NULL;
  if (!need_float(op, "input", input) || !need_float(op, "target", target) ||
      !need_same_shape(op, "input", input, "target", target) || !need_reduction(op, input, reduction, false))
    return NULL;
  if (weight && (!need_float(op, "weight", weight) || !need_broadcast(op, "weight", weight, input))) return NULL;
  if (pos_weight && (!need_float(op, "pos_weight", pos_weight) || !need_broadcast(op, "pos_weight", pos_weight, input)))
    return NULL;
  lt_scope *sc = lt_scope_begin();
  if (!sc) return NULL;
  const lt_tensor *x = input, *y = target;
  lt_dtype dt = lt__promote(x->dtype, y->dtype);
  lt_tensor *ge = lt_to_dtype(lt_ge_scalar(x, 0.0), dt);            /* [x >= 0], no gradient */
  lt_tensor *s = lt_sub_scalar(lt_mul_scalar(ge, 2.0), 1.0);         /* sign, 1 at 0 */
  lt_tensor *m = lt_sub_scalar(lt_neg(ge), -1.0);                   /* [x < 0] = 1 - ge */
  lt_tensor *sp = lt_sub(lt_log1p(lt_exp(lt_neg(lt_mul(x, s)))), lt_mul(x, m)); /* softplus(-x) */
  lt_tensor *lw = pos_weight ? lt_add_scalar(lt_mul(lt_sub_scalar(pos_weight, 1.0), y), 1.0) : NULL;
  lt_tensor *l = lt_add(lt_mul(lt_sub_scalar(lt_neg(y), -1.0), x), lw ? lt_mul(lw, sp) : sp);
  if (weight) l = lt_mul(l, weight);
  return lt_scope_return(sc, reduce(l, reduction));
}

/* ---- L1, smooth L1, Huber ------------------------------------------------------ */

static bool check_pair(const char *op, const lt_tensor *input, const lt_tensor *target, lt_reduction reduction) {
  if (!input) return lt__err_null(op, "input"), false;
  if (!target) return lt__err_null(op, "target"), false;
  return need_float(op, "input", input) && need_float(op, "target", target) &&
         need_same_shape(op, "input", input, "target", target) && need_reduction(op, input, reduction, false);
}

lt_tensor *lt_l1_loss(const lt_tensor *input, const lt_tensor *target, lt_reduction reduction) {
  if (!check_pair("l1_loss", input, target, reduction)) return NULL;
  lt_scope *sc = lt_scope_begin();
  if (!sc) return NULL;
  return lt_scope_return(sc, reduce(lt_abs(lt_sub(input, target)), reduction));
}

/* |d| < beta: 0.5 d^2 / beta (times scale), else scale (|d| - 0.5 beta):
 * smooth L1 is scale 1, Huber is beta = delta and scale delta. */
static lt_tensor *smooth(const lt_tensor *input, const lt_tensor *target, double beta, double scale,
                         lt_reduction reduction) {
  lt_scope *sc = lt_scope_begin();
  if (!sc) return NULL;
  lt_tensor *d = lt_sub(input, target), *z = lt_abs(d);
  lt_tensor *l = beta == 0 ? z
                           : lt_where(lt_lt_scalar(z, beta), lt_mul_scalar(lt_square(d), 0.5 * scale / beta),
                                      lt_mul_scalar(lt_sub_scalar(z, 0.5 * beta), scale));
  return lt_scope_return(sc, reduce(l, reduction));
}

lt_tensor *lt_smooth_l1_loss(const lt_tensor *input, const lt_tensor *target, lt_reduction reduction, double beta) {
  if (!check_pair("smooth_l1_loss", input, target, reduction)) return NULL;
  if (!(beta >= 0) || isinf(beta))
    return lt__err(LT_ERR_INVALID, "smooth_l1_loss: input is %s: beta %g: must be finite and >= 0 (0: L1)",
                   LT__D(input), beta),
           NULL;
  return smooth(input, target, beta, 1.0, reduction);
}

lt_tensor *lt_huber_loss(const lt_tensor *input, const lt_tensor *target, lt_reduction reduction, double delta) {
  if (!check_pair("huber_loss", input, target, reduction)) return NULL;
  if (!(delta > 0) || isinf(delta))
    return lt__err(LT_ERR_INVALID, "huber_loss: input is %s: delta %g: must be finite and > 0", LT__D(input), delta),
           NULL;
  return smooth(input, target, delta, delta, reduction);
}

/* ---- KL divergence -------------------------------------------------------------- */

/* F.kl_div(input, target, reduction, log_target): input holds log
 * probabilities; pointwise
 *     target (log target - input)       (xlogy: 0 where target == 0)
 *     exp(target) (target - input)      with log_target.
 * xlogy(t, t) is t log(t with its zeros replaced by 1): 0 at t == 0 with a
 * finite gradient, NaN for t < 0 as PyTorch. */
lt_tensor *lt_kl_div(const lt_tensor *input, const lt_tensor *target, lt_reduction reduction, bool log_target) {
  const char *op = "kl_div";
  if (!input) return lt__err_null(op, "input"), NULL;
  if (!target) return lt__err_null(op, "target"), NULL;
  if (!need_float(op, "input", input) || !need_float(op, "target", target) ||
      !need_same_shape(op, "input", input, "target", target) || !need_reduction(op, input, reduction, true))
    return NULL;
  lt_scope *sc = lt_scope_begin();
  if (!sc) return NULL;
  lt_tensor *l;
  if (log_target) {
    l = lt_mul(lt_exp(target), lt_sub(target, input));
  } else {
    lt_tensor *xlogy = lt_mul(target, lt_log(lt_masked_fill(target, lt_eq_scalar(target, 0.0), 1.0)));
    l = lt_sub(xlogy, lt_mul(target, input));
  }
  return lt_scope_return(sc, reduce(l, reduction));
}

/* ---- cosine embedding ------------------------------------------------------------- */

/* F.cosine_embedding_loss: cos = <x1, x2> / sqrt((|x1|^2 + eps)(|x2|^2 + eps))
 * over the last dim (eps 1e-12, PyTorch's EPSILON); 1 - cos where y == 1,
 * max(0, cos - margin) where y == -1, 0 elsewhere. */
lt_tensor *lt_cosine_embedding_loss(const lt_tensor *x1, const lt_tensor *x2, const lt_tensor *y, double margin,
                                    lt_reduction reduction) {
  const char *op = "cosine_embedding_loss";
  if (!x1) return lt__err_null(op, "x1"), NULL;
  if (!x2) return lt__err_null(op, "x2"), NULL;
  if (!y) return lt__err_null(op, "y"), NULL;
  if (!need_float(op, "x1", x1) || !need_float(op, "x2", x2) || !need_same_shape(op, "x1", x1, "x2", x2) ||
      !need_reduction(op, x1, reduction, false))
    return NULL;
  if (x1->ndim != 1 && x1->ndim != 2)
    return lt__err(LT_ERR_SHAPE, "%s: x1 is %s: must be [N, D] or [D]", op, LT__D(x1)), NULL;
  if (y->ndim != x1->ndim - 1 || (x1->ndim == 2 && y->shape[0] != x1->shape[0]))
    return lt__err(LT_ERR_SHAPE, "%s: x1 is %s, y is %s: y must be [N] for x1 [N, D], 0-d for x1 [D]", op, LT__D(x1),
                   LT__D(y)),
           NULL;
  if (y->dtype == LT_DTYPE_BOOL || y->dtype == LT_DTYPE_BF16)
    return lt__err(LT_ERR_DTYPE, "%s: y is %s: must hold 1 and -1 (a float or integer dtype)", op, LT__D(y)), NULL;
  if (!(isfinite(margin)))
    return lt__err(LT_ERR_INVALID, "%s: margin %g: must be finite", op, margin), NULL;
  lt_scope *sc = lt_scope_begin();
  if (!sc) return NULL;
  const int last = x1->ndim - 1;
  lt_tensor *dot = lt_sum(lt_mul(x1, x2), 1, &last, false);
  lt_tensor *n1 = lt_add_scalar(lt_sum(lt_square(x1), 1, &last, false), 1e-12);
  lt_tensor *n2 = lt_add_scalar(lt_sum(lt_square(x2), 1, &last, false), 1e-12);
  lt_tensor *cos = lt_div(dot, lt_sqrt(lt_mul(n1, n2)));
  lt_tensor *zero = lt_zeros_like(cos);
  lt_tensor *l = lt_add(lt_where(lt_eq_scalar(y, 1.0), lt_sub_scalar(lt_neg(cos), -1.0), zero),
                        lt_where(lt_eq_scalar(y, -1.0), lt_relu(lt_sub_scalar(cos, margin)), zero));
  return lt_scope_return(sc, reduce(l, reduction));
}
