/*
 * nn/init.c: weight initialisers, as torch.nn.init
 * (https://pytorch.org/docs/stable/nn.init.html).
 *
 * What this is: in-place fills of a float tensor from an explicit generator,
 * run under no-grad (parameters require grad, and an initialisation is not
 * part of any graph). fan_in / fan_out follow
 * torch.nn.init._calculate_fan_in_and_fan_out: for a weight [out, in, *k],
 * fan_in = in * prod(k) and fan_out = out * prod(k); fewer than 2 dims is an
 * error. A zero-element tensor is left alone (torch warns and returns) and
 * the generator is not advanced.
 *
 * What this is not: bit-compatible with PyTorch's random streams (the draws
 * come from libtensor's Philox generator); the distributions and bounds are
 * PyTorch's.
 */
#include "nn/nn.h"
#include "tensor/error_internal.h"

#include <math.h>

static lt_status fans(const char *op, const lt_tensor *w, double *fan_in, double *fan_out) {
  if (w->ndim < 2)
    return lt__err(LT_ERR_SHAPE,
                   "%s: w is %s: fan in and fan out can not be computed for a tensor with fewer than 2 "
                   "dimensions",
                   op, LT__D(w));
  double receptive = 1;
  for (int d = 2; d < w->ndim; d++) receptive *= (double)w->shape[d];
  *fan_in = (double)w->shape[1] * receptive;
  *fan_out = (double)w->shape[0] * receptive;
  return LT_OK;
}

static lt_status check_args(const char *op, lt_generator *g, const lt_tensor *w) {
  if (!g) return lt__err_null(op, "g");
  if (!w) return lt__err_null(op, "w");
  if (!lt_dtype_is_float(w->dtype))
    return lt__err(LT_ERR_DTYPE, "%s: w is %s: initialisers fill float tensors", op, LT__D(w));
  return LT_OK;
}

static lt_status fill_uniform(lt_generator *g, lt_tensor *w, double bound) {
  bool prev = lt_set_grad_enabled(false);
  lt_status s = lt_uniform_(g, w, -bound, bound);
  lt_set_grad_enabled(prev);
  return s;
}

static lt_status fill_normal(lt_generator *g, lt_tensor *w, double mean, double std) {
  bool prev = lt_set_grad_enabled(false);
  lt_status s = lt_normal_(g, w, mean, std);
  lt_set_grad_enabled(prev);
  return s;
}

static lt_status check_gain(const char *op, const lt_tensor *w, double gain) {
  if (!(gain >= 0) || isinf(gain))
    return lt__err(LT_ERR_INVALID, "%s: w is %s: gain %g must be finite and >= 0", op, LT__D(w), gain);
  return LT_OK;
}

/* std = gain * sqrt(2 / (fan_in + fan_out)); uniform: U(-a, a) with
 * a = sqrt(3) std = gain * sqrt(6 / (fan_in + fan_out)), else N(0, std^2). */
static lt_status xavier(const char *op, lt_generator *g, lt_tensor *w, double gain, bool uniform) {
  double fi = 0, fo = 0;
  lt_status s;
  if ((s = check_args(op, g, w)) != LT_OK) return s;
  if ((s = check_gain(op, w, gain)) != LT_OK) return s;
  if ((s = fans(op, w, &fi, &fo)) != LT_OK) return s;
  if (w->numel == 0) return LT_OK;
  const double std = gain * sqrt(2.0 / (fi + fo));
  return uniform ? fill_uniform(g, w, sqrt(3.0) * std) : fill_normal(g, w, 0.0, std);
}

lt_status lt_init_xavier_uniform_(lt_generator *g, lt_tensor *w, double gain) {
  return xavier("init_xavier_uniform_", g, w, gain, true);
}

lt_status lt_init_xavier_normal_(lt_generator *g, lt_tensor *w, double gain) {
  return xavier("init_xavier_normal_", g, w, gain, false);
}

/* U(-b, b), b = sqrt(3) * gain / sqrt(fan_in), gain = sqrt(2 / (1 + a^2))
 * (calculate_gain('leaky_relu', a)). a = sqrt(5) gives b = 1 / sqrt(fan_in). */
lt_status lt_init_kaiming_uniform_(lt_generator *g, lt_tensor *w, double a) {
  const char *op = "init_kaiming_uniform_";
  double fi = 0, fo = 0;
  lt_status s;
  if ((s = check_args(op, g, w)) != LT_OK) return s;
  if (!isfinite(a)) return lt__err(LT_ERR_INVALID, "%s: w is %s: a = %g must be finite", op, LT__D(w), a);
  if ((s = fans(op, w, &fi, &fo)) != LT_OK) return s;
  if (w->numel == 0) return LT_OK;
  double gain = sqrt(2.0 / (1.0 + a * a));
  double std = gain / sqrt(fi);
  return fill_uniform(g, w, sqrt(3.0) * std);
}

lt_status lt_init_normal_(lt_generator *g, lt_tensor *w, double mean, double std) {
  const char *op = "init_normal_";
  lt_status s;
  if ((s = check_args(op, g, w)) != LT_OK) return s;
  if (!(std >= 0) || isinf(std) || !isfinite(mean))
    return lt__err(LT_ERR_INVALID, "%s: w is %s: mean %g and std %g must be finite, std >= 0", op, LT__D(w),
                   mean, std);
  if (w->numel == 0) return LT_OK;
  return fill_normal(g, w, mean, std);
}
