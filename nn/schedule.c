/*
 * nn/schedule.c: learning-rate schedules (a pure function of the step) and
 * gradient clipping over an lt_params store.
 *
 * Schedules take a 1-based step s (the s-th optimizer step; s < 1 is treated
 * as 1). With W = warmup, N = total, base = base_lr, min = min_lr:
 *   CONSTANT        base
 *   WARMUP_LINEAR   s <= W: base * s / W;  then  min + (base - min) * (1 - q)
 *   WARMUP_COSINE   s <= W: base * s / W;  then  min + (base - min) * (1 + cos(pi q)) / 2
 *                   where q = (s - W) / (N - W) clamped to [0, 1] (q = 1 when N <= W),
 *                   so the rate reaches min at s = N and stays there; W = 0 means no warmup.
 *   NOAM            scale * d_model^-0.5 * min(s^-0.5, s * W^-1.5)  ("Attention Is All You
 *                   Need" eq. 3; scale 0 means 1; W = 0 gives the pure inverse square root)
 *   STEP            base * gamma^floor((s - 1) / step_size), i.e. torch.optim.lr_scheduler.StepLR
 *                   whose epoch counter is s - 1 at the s-th step: the first step_size steps
 *                   run at base.
 * An invalid schedule (NULL, unknown kind, STEP with step_size < 1, NOAM with
 * d_model < 1, negative warmup) gives NaN and sets the error.
 *
 * Clipping follows torch.nn.utils.clip_grad_norm_ / clip_grad_value_ (1.13)
 * over every non-buffer entry that has a .grad (frozen ones included, as
 * model.parameters() would include them).
 *
 * What this is not: a stateful scheduler object (the training loop calls
 * lt_schedule_lr(&s, step) and lt_optimizer_set_lr each step).
 */
#include "nn/nn.h"
#include "tensor/error_internal.h"
#include "tensor/runtime_internal.h"

#include <math.h>
#include <stdlib.h>

#define LT__PI 3.14159265358979323846

static const char *const sched_kind_names[] = {"constant", "linear", "cosine", "noam", "step"};
#define N_SCHED_KINDS ((int)(sizeof sched_kind_names / sizeof sched_kind_names[0]))
/* Checkpoints before the shared table wrote these (docs/checkpoint-format.md). */
static const lt_enum_alias sched_kind_aliases[] = {{"warmup_linear", LT_SCHED_WARMUP_LINEAR},
                                                   {"warmup_cosine", LT_SCHED_WARMUP_COSINE}};

const char *lt_schedule_kind_name(lt_schedule_kind kind) {
  return lt_enum_name(sched_kind_names, N_SCHED_KINDS, (int)kind);
}

LT_ENUM_PARSER(lt_schedule_kind_parse, lt_schedule_kind, "schedule", sched_kind_names, N_SCHED_KINDS, sched_kind_aliases, 2)

double lt_schedule_lr(const lt_schedule *s, int64_t step) {
  const char *op = "schedule_lr";
  if (!s) return lt__err(LT_ERR_NULL, "%s: the schedule is NULL", op), NAN;
  if (s->warmup < 0)
    return lt__err(LT_ERR_INVALID, "%s: warmup %lld must be >= 0", op, (long long)s->warmup), NAN;
  double t = (double)(step < 1 ? 1 : step), W = (double)s->warmup;
  switch (s->kind) {
    case LT_SCHED_CONSTANT: return s->base_lr;
    case LT_SCHED_WARMUP_LINEAR:
    case LT_SCHED_WARMUP_COSINE: {
      if (s->warmup > 0 && t <= W) return s->base_lr * t / W;
      double q = s->total > s->warmup ? (t - W) / ((double)s->total - W) : 1.0;
      if (q > 1) q = 1;
      if (q < 0) q = 0;
      double f = s->kind == LT_SCHED_WARMUP_LINEAR ? 1.0 - q : 0.5 * (1.0 + cos(LT__PI * q));
      return s->min_lr + (s->base_lr - s->min_lr) * f;
    }
    case LT_SCHED_NOAM: {
      if (s->d_model < 1)
        return lt__err(LT_ERR_INVALID, "%s: NOAM: d_model %lld must be >= 1", op, (long long)s->d_model), NAN;
      double scale = s->scale == 0 ? 1.0 : s->scale;
      double a = pow(t, -0.5), b = s->warmup > 0 ? t * pow(W, -1.5) : INFINITY;
      return scale * pow((double)s->d_model, -0.5) * (a < b ? a : b);
    }
    case LT_SCHED_STEP:
      if (s->step_size < 1)
        return lt__err(LT_ERR_INVALID, "%s: STEP: step_size %lld must be >= 1", op, (long long)s->step_size), NAN;
      return s->base_lr * pow(s->gamma, (double)((int64_t)(t - 1) / s->step_size));
  }
  return lt__err(LT_ERR_INVALID, "%s: unknown schedule kind %d", op, (int)s->kind), NAN;
}

/* ---- gradient clipping ------------------------------------------------------ */

/* Sum of squares in double over fixed blocks (so the result never depends on
 * the thread count), blocks summed in order. */
#define CLIP_BLOCK 8192
#define CLIP_SUMSQ(T, SUF)                                                                    \
  static double sumsq_##SUF(const T *x, int64_t n, double *part, int nt) {                   \
    int64_t nb = (n + CLIP_BLOCK - 1) / CLIP_BLOCK;                                           \
    _Pragma("omp parallel for schedule(static) num_threads(nt) if (n >= LT__PARALLEL_MIN)")  \
    for (int64_t b = 0; b < nb; b++) {                                                        \
      int64_t lo = b * CLIP_BLOCK, hi = lo + CLIP_BLOCK < n ? lo + CLIP_BLOCK : n;            \
      double acc = 0;                                                                         \
      for (int64_t i = lo; i < hi; i++) acc += (double)x[i] * (double)x[i];                   \
      part[b] = acc;                                                                          \
    }                                                                                         \
    double s = 0;                                                                             \
    for (int64_t b = 0; b < nb; b++) s += part[b];                                            \
    return s;                                                                                 \
  }
CLIP_SUMSQ(float, f32)
CLIP_SUMSQ(double, f64)

static bool has_grad(const lt_param *q) { return !(q->flags & LT_PARAM_BUFFER) && q->value->grad; }

lt_status lt_clip_grad_norm(lt_params *p, double max_norm, double *total_norm) {
  const char *op = "clip_grad_norm";
  if (!p) return lt__err(LT_ERR_NULL, "%s: the parameter store is NULL", op);
  if (!(max_norm >= 0))
    return lt__err(LT_ERR_INVALID, "%s: max_norm %g must be >= 0", op, max_norm);
  lt_status s = lt__ensure_init();
  if (s != LT_OK) return s;
  int nt = lt_get_num_threads();
  int n = lt_params_count(p);
  int64_t maxblocks = 1;
  for (int i = 0; i < n; i++) {
    const lt_param *q = lt_params_at(p, i);
    if (!has_grad(q)) continue;
    const lt_tensor *g = q->value->grad;
    if (!lt_dtype_is_float(g->dtype))
      return lt__err(LT_ERR_DTYPE, "%s: '%s' has a .grad %s (not float)", op, q->name, LT__D(g));
    int64_t nb = (g->numel + CLIP_BLOCK - 1) / CLIP_BLOCK;
    if (nb > maxblocks) maxblocks = nb;
  }
  double *part = malloc(sizeof(double) * (size_t)maxblocks);
  if (!part) return lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
  /* total = sqrt(sum over grads of sum g^2): the 2-norm of the per-tensor
   * 2-norms, as torch.norm(torch.stack([torch.norm(g) for g in grads])). */
  double sum = 0;
  for (int i = 0; i < n && s == LT_OK; i++) {
    const lt_param *q = lt_params_at(p, i);
    if (!has_grad(q)) continue;
    const lt_tensor *g = q->value->grad;
    lt_tensor *c = lt_is_contiguous(g) ? NULL : lt_tensor_keep(lt_contiguous(g));
    if (!lt_is_contiguous(g) && !c) {
      s = lt_last_status();
      break;
    }
    const lt_tensor *x = c ? c : g;
    sum += x->dtype == LT_DTYPE_F32 ? sumsq_f32(x->data, x->numel, part, nt)
                                    : sumsq_f64(x->data, x->numel, part, nt);
    lt_tensor_free(c);
  }
  free(part);
  if (s != LT_OK) return s;
  double norm = sqrt(sum);
  if (total_norm) *total_norm = norm;
  if (!isfinite(norm))
    return lt__err(LT_ERR_NUMERIC,
                   "%s: the total norm of the gradients is %g: gradients left unchanged (skip this step)",
                   op, norm);
  double coef = max_norm / (norm + 1e-6);
  if (coef >= 1.0) return LT_OK; /* torch multiplies by the clamped coefficient 1: a no-op */
  bool prev = lt_set_grad_enabled(false);
  for (int i = 0; i < n && s == LT_OK; i++) {
    const lt_param *q = lt_params_at(p, i);
    if (has_grad(q)) s = lt_mul_scalar_(q->value->grad, coef);
  }
  lt_set_grad_enabled(prev);
  return s;
}

lt_status lt_clip_grad_value(lt_params *p, double clip_value) {
  const char *op = "clip_grad_value";
  if (!p) return lt__err(LT_ERR_NULL, "%s: the parameter store is NULL", op);
  if (!(clip_value >= 0))
    return lt__err(LT_ERR_INVALID, "%s: clip_value %g must be >= 0", op, clip_value);
  lt_status s = LT_OK;
  bool prev = lt_set_grad_enabled(false);
  for (int i = 0, n = lt_params_count(p); i < n && s == LT_OK; i++) {
    const lt_param *q = lt_params_at(p, i);
    if (has_grad(q)) s = lt_clamp_(q->value->grad, -clip_value, clip_value);
  }
  lt_set_grad_enabled(prev);
  return s;
}
