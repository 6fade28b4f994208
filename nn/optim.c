/*
 * nn/optim.c: SGD, Adam and AdamW exactly as torch.optim (1.13,
 * single-tensor code path), over every trainable parameter of an lt_params
 * store.
 *
 * What this is: one fused loop per parameter and dtype (f32 computes in
 * float, as PyTorch's CPU kernels do; f64 in double), OpenMP over elements
 * for big tensors (elementwise, so results never depend on the thread count).
 * The parameters are written directly (they require grad, so the in-place
 * ops would refuse) and their storage version is bumped, so a graph that
 * saved a parameter before the step fails its backward as it should.
 *
 * The updates, per parameter p with gradient g (https://pytorch.org/docs/1.13/optim.html):
 *   SGD:   g += wd * p                                   (L2, weight_decay != 0)
 *          buf = g (first step) | buf = momentum * buf + (1 - dampening) * g
 *          g = g + momentum * buf (nesterov) | g = buf   (momentum != 0)
 *          p -= lr * g
 *   Adam:  t += 1; g += wd * p                           (L2, weight_decay != 0)
 *   AdamW: t += 1; p *= 1 - lr * wd                      (decoupled)
 *          m = beta1 * m + (1 - beta1) * g
 *          v = beta2 * v + (1 - beta2) * g * g
 *          p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * with the operations in PyTorch's order (mul_ then add_, addcmul_, addcdiv_).
 *
 * Parameter groups: LT_PARAM_NO_DECAY parameters get weight_decay 0 unless
 * cfg->decay_all. Parameters without .grad and frozen ones (requires_grad
 * false at the time of the step) are skipped, as PyTorch skips parameters
 * whose .grad is None. The parameter set is the store's non-buffer entries
 * when the optimizer is made (later additions are not optimized).
 *
 * State: "momentum_buffer" (SGD with momentum != 0), "exp_avg",
 * "exp_avg_sq" and "step" (Adam, AdamW), created together at a parameter's
 * first update. "step" is a 0-d i64 tensor, PyTorch's per-parameter
 * state['step']: the number of updates applied to that parameter, which its
 * bias corrections use, so a parameter that first gets a gradient late starts
 * at t = 1 and one skipped by a step is not advanced, as in PyTorch.
 * lt_optimizer_step_count counts lt_optimizer_step calls.
 * For checkpoints: lt_optimizer_reset_state(o, count, n, names) drops all
 * state and gives exactly the named parameters zero state (atomically), which
 * a loader then fills through lt_optimizer_state ("step" included). The older
 * lt_optimizer_set_step_count(o, n) gives every parameter state and the one
 * step n (n == 0 drops all state).
 *
 * Sharding (ZeRO-1, dist/dist.h's lt_dist_zero): lt_optimizer_set_shard(o,
 * first, count) makes lt_optimizer_step update only the entries [first,
 * first + count) (other parameters are skipped as if they had no .grad) and
 * drops the state of the others, so a rank holds the state of its shard only;
 * the per-element math is unchanged, so the owner computes the bits an
 * unsharded optimizer would.
 *
 * What this is not: amsgrad, maximize, foreach/fused variants, or several
 * user-defined parameter groups (one config; the NO_DECAY split is the only
 * grouping).
 */
#include "nn/nn.h"
#include "tensor/cpu_internal.h"
#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"
#include "tensor/runtime_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct opt_entry {
  lt_tensor *param;    /* borrowed from the store */
  const char *name;    /* borrowed from the store */
  double weight_decay; /* this parameter's group value */
  lt_tensor *buf;      /* SGD momentum_buffer or Adam exp_avg (owned), NULL until the first update */
  lt_tensor *sq;       /* Adam exp_avg_sq (owned) */
  lt_tensor *step;     /* Adam "step": 0-d i64, updates applied to this parameter (owned) */
} opt_entry;

#define N_STATE 3 /* buf, sq, step: the slots of an entry */

static lt_tensor **slot(opt_entry *e, int k) { return k == 0 ? &e->buf : k == 1 ? &e->sq : &e->step; }

struct lt_optimizer {
  lt_optim_config cfg;
  lt_params *p;
  opt_entry *e;
  int n;
  int64_t steps; /* lt_optimizer_step calls */
  int first, count; /* the shard updated (lt_optimizer_set_shard): entries [first, first + count) */
};

static const char *const optim_kind_names[] = {"sgd", "adam", "adamw"};
#define N_OPTIM_KINDS ((int)(sizeof optim_kind_names / sizeof optim_kind_names[0]))

const char *lt_optim_kind_name(lt_optim_kind kind) { return lt_enum_name(optim_kind_names, N_OPTIM_KINDS, (int)kind); }

LT_ENUM_PARSER(lt_optim_kind_parse, lt_optim_kind, "optimizer", optim_kind_names, N_OPTIM_KINDS, NULL, 0)

lt_optim_config lt_optim_defaults(lt_optim_kind kind) {
  lt_optim_config c = {0};
  c.kind = kind;
  c.lr = 1e-3;
  c.momentum = 0;
  c.dampening = 0;
  c.nesterov = false;
  c.beta1 = 0.9;
  c.beta2 = 0.999;
  c.eps = 1e-8;
  c.weight_decay = kind == LT_OPTIM_ADAMW ? 1e-2 : 0;
  c.decay_all = false;
  return c;
}

static const char *kind_name(lt_optim_kind k) {
  switch (k) {
    case LT_OPTIM_SGD: return "SGD";
    case LT_OPTIM_ADAM: return "Adam";
    case LT_OPTIM_ADAMW: return "AdamW";
  }
  return "?";
}

/* PyTorch's constructor checks. */
static lt_status check_config(const lt_optim_config *c) {
  const char *op = "optimizer_new";
  if (c->kind != LT_OPTIM_SGD && c->kind != LT_OPTIM_ADAM && c->kind != LT_OPTIM_ADAMW)
    return lt__err(LT_ERR_INVALID, "%s: unknown optimizer kind %d", op, (int)c->kind);
  const char *k = kind_name(c->kind);
  if (!(c->lr >= 0) || isinf(c->lr))
    return lt__err(LT_ERR_INVALID, "%s: %s: invalid learning rate %g (must be finite and >= 0)", op, k, c->lr);
  if (!(c->weight_decay >= 0) || isinf(c->weight_decay))
    return lt__err(LT_ERR_INVALID, "%s: %s: invalid weight_decay %g (must be finite and >= 0)", op, k,
                   c->weight_decay);
  if (c->kind == LT_OPTIM_SGD) {
    if (!(c->momentum >= 0) || isinf(c->momentum))
      return lt__err(LT_ERR_INVALID, "%s: SGD: invalid momentum %g (must be finite and >= 0)", op, c->momentum);
    if (!isfinite(c->dampening))
      return lt__err(LT_ERR_INVALID, "%s: SGD: invalid dampening %g", op, c->dampening);
    if (c->nesterov && (c->momentum <= 0 || c->dampening != 0))
      return lt__err(LT_ERR_INVALID,
                     "%s: SGD: nesterov momentum requires a momentum > 0 and zero dampening (momentum %g, "
                     "dampening %g)",
                     op, c->momentum, c->dampening);
  } else {
    if (!(c->eps >= 0) || isinf(c->eps))
      return lt__err(LT_ERR_INVALID, "%s: %s: invalid eps %g (must be finite and >= 0)", op, k, c->eps);
    if (!(c->beta1 >= 0 && c->beta1 < 1))
      return lt__err(LT_ERR_INVALID, "%s: %s: invalid beta1 %g (must be in [0, 1))", op, k, c->beta1);
    if (!(c->beta2 >= 0 && c->beta2 < 1))
      return lt__err(LT_ERR_INVALID, "%s: %s: invalid beta2 %g (must be in [0, 1))", op, k, c->beta2);
  }
  return LT_OK;
}

lt_optimizer *lt_optimizer_new(lt_params *p, const lt_optim_config *cfg) {
  const char *op = "optimizer_new";
  if (!p) return lt__err(LT_ERR_NULL, "%s: the parameter store is NULL", op), NULL;
  if (!cfg) return lt__err(LT_ERR_NULL, "%s: cfg is NULL", op), NULL;
  if (check_config(cfg) != LT_OK) return NULL;
  int n = 0, total = lt_params_count(p);
  for (int i = 0; i < total; i++)
    if (!(lt_params_at(p, i)->flags & LT_PARAM_BUFFER)) n++;
  if (n == 0)
    return lt__err(LT_ERR_INVALID, "%s: %s: the store holds no parameters (%d buffers): nothing to optimize",
                   op, kind_name(cfg->kind), total),
           NULL;
  lt_optimizer *o = calloc(1, sizeof *o);
  opt_entry *e = calloc((size_t)n, sizeof *e);
  if (!o || !e) {
    free(o);
    free(e);
    return lt__err(LT_ERR_NOMEM, "%s: out of memory for %d parameters", op, n), NULL;
  }
  o->cfg = *cfg;
  o->p = p;
  o->e = e;
  o->n = n;
  o->first = 0, o->count = n;
  for (int i = 0, k = 0; i < total; i++) {
    const lt_param *q = lt_params_at(p, i);
    if (q->flags & LT_PARAM_BUFFER) continue;
    bool decay = cfg->decay_all || !(q->flags & LT_PARAM_NO_DECAY);
    e[k++] = (opt_entry){.param = q->value, .name = q->name, .weight_decay = decay ? cfg->weight_decay : 0};
  }
  return o;
}

static void drop_state(opt_entry *e) {
  for (int k = 0; k < N_STATE; k++) {
    lt_tensor_free(*slot(e, k));
    *slot(e, k) = NULL;
  }
}

void lt_optimizer_free(lt_optimizer *o) {
  if (!o) return;
  for (int i = 0; i < o->n; i++) drop_state(&o->e[i]);
  free(o->e);
  free(o);
}

void lt_optimizer_set_lr(lt_optimizer *o, double lr) {
  if (o) o->cfg.lr = lr;
}
double lt_optimizer_get_lr(const lt_optimizer *o) { return o ? o->cfg.lr : NAN; }
int64_t lt_optimizer_step_count(const lt_optimizer *o) { return o ? o->steps : 0; }

/* The entry of the parameter called name, or -1. */
static int entry_index(const lt_optimizer *o, const char *name) {
  lt_tensor *t = lt_params_find(o->p, name);
  if (!t) return -1;
  for (int i = 0; i < o->n; i++)
    if (o->e[i].param == t) return i;
  return -1;
}

lt_tensor *lt_optimizer_state(const lt_optimizer *o, const char *param_name, const char *state_name) {
  if (!o || !param_name || !state_name) return NULL;
  int i = entry_index(o, param_name);
  if (i < 0) return NULL;
  const opt_entry *e = &o->e[i];
  if (o->cfg.kind == LT_OPTIM_SGD) return strcmp(state_name, "momentum_buffer") == 0 ? e->buf : NULL;
  if (strcmp(state_name, "exp_avg") == 0) return e->buf;
  if (strcmp(state_name, "exp_avg_sq") == 0) return e->sq;
  if (strcmp(state_name, "step") == 0) return e->step;
  return NULL;
}

int lt_optimizer_param_count(const lt_optimizer *o) { return o ? o->n : 0; }

lt_tensor *lt_optimizer_param(const lt_optimizer *o, int i, const char **name) {
  if (!o || i < 0 || i >= o->n) return NULL;
  if (name) *name = o->e[i].name;
  return o->e[i].param;
}

int64_t lt_optimizer_state_bytes(const lt_optimizer *o) {
  int64_t b = 0;
  for (int i = 0; o && i < o->n; i++)
    for (int k = 0; k < N_STATE; k++) {
      const lt_tensor *t = *slot(&o->e[i], k);
      if (t) b += t->numel * (int64_t)lt_dtype_size(t->dtype);
    }
  return b;
}

lt_status lt_optimizer_set_shard(lt_optimizer *o, int first, int count) {
  if (!o) return lt__err(LT_ERR_NULL, "optimizer_set_shard: the optimizer is NULL");
  if (first < 0 || count < 0 || first > o->n || count > o->n - first)
    return lt__err(LT_ERR_INVALID, "optimizer_set_shard: parameters [%d, %d + %d) are outside the optimizer's %d",
                   first, first, count, o->n);
  for (int i = 0; i < o->n; i++)
    if (i < first || i >= first + count) drop_state(&o->e[i]);
  o->first = first, o->count = count;
  return LT_OK;
}

void lt_optimizer_get_shard(const lt_optimizer *o, int *first, int *count) {
  *first = o ? o->first : 0;
  *count = o ? o->count : 0;
}

/* ---- state allocation ----------------------------------------------------- */

static bool has_momentum(const lt_optimizer *o) { return o->cfg.kind == LT_OPTIM_SGD && o->cfg.momentum != 0; }
/* Which slots of an entry this optimizer uses (SGD with momentum: buf;
 * Adam/AdamW: buf, sq, step). */
static bool uses_slot(const lt_optimizer *o, int k) {
  return o->cfg.kind == LT_OPTIM_SGD ? k == 0 && has_momentum(o) : true;
}
/* A new state tensor for slot k of e: zeros shaped like the parameter, or a
 * 0-d i64 zero for the step (outside any scope). */
static lt_tensor *new_slot(const opt_entry *e, int k) {
  const lt_tensor *p = e->param;
  return lt_tensor_keep(k == 2 ? lt_scalar(LT_DTYPE_I64, 0) : lt_zeros(p->dtype, p->ndim, p->shape));
}

/* Creates the missing state of the entries marked in todo (all if todo is
 * NULL); fresh[N_STATE * i + k] tells which tensors were made. On failure
 * frees what it made and returns the error (nothing changed). */
static lt_status make_states(lt_optimizer *o, const bool *todo, bool *fresh) {
  for (int i = 0; i < o->n; i++) {
    if (todo && !todo[i]) continue;
    for (int k = 0; k < N_STATE; k++) {
      lt_tensor **t = slot(&o->e[i], k);
      if (!uses_slot(o, k) || *t) continue;
      if (!(*t = new_slot(&o->e[i], k))) {
        lt_status s = lt_last_status();
        for (int j = 0; j < N_STATE * o->n; j++)
          if (fresh[j]) {
            lt_tensor **u = slot(&o->e[j / N_STATE], j % N_STATE);
            lt_tensor_free(*u);
            *u = NULL;
            fresh[j] = false;
          }
        return s;
      }
      fresh[N_STATE * i + k] = true;
    }
  }
  return LT_OK;
}

lt_status lt_optimizer_ensure_state(lt_optimizer *o, const char *param_name) {
  const char *op = "optimizer_ensure_state";
  if (!o || !param_name) return lt__err(LT_ERR_NULL, "%s: %s is NULL", op, o ? "param_name" : "the optimizer");
  int i = entry_index(o, param_name);
  if (i < 0) return lt__err(LT_ERR_INVALID, "%s: '%s' is not a parameter this optimizer updates", op, param_name);
  bool *todo = calloc((size_t)o->n * (1 + N_STATE), sizeof(bool)); /* todo[n], fresh[N_STATE n] */
  if (!todo) return lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
  todo[i] = true;
  lt_status s = make_states(o, todo, todo + o->n);
  free(todo);
  return s;
}

lt_status lt_optimizer_set_step_count(lt_optimizer *o, int64_t step) {
  if (!o) return lt__err(LT_ERR_NULL, "optimizer_set_step_count: the optimizer is NULL");
  if (step < 0 || step > LT_OPTIM_MAX_STEP)
    return lt__err(LT_ERR_INVALID, "optimizer_set_step_count: step %lld is outside [0, %lld] (LT_OPTIM_MAX_STEP)",
                   (long long)step, (long long)LT_OPTIM_MAX_STEP);
  if (step == 0) {
    for (int i = 0; i < o->n; i++) drop_state(&o->e[i]);
    o->steps = 0;
    return LT_OK;
  }
  bool *fresh = calloc((size_t)o->n * N_STATE, sizeof(bool));
  if (!fresh) return lt__err(LT_ERR_NOMEM, "optimizer_set_step_count: out of memory");
  lt_status s = make_states(o, NULL, fresh);
  free(fresh);
  if (s != LT_OK) return s;
  for (int i = 0; i < o->n; i++)
    if (o->e[i].step) *(int64_t *)o->e[i].step->data = step;
  o->steps = step;
  return LT_OK;
}

lt_status lt_optim_check_state(const char *state_name, lt_dtype dtype, const void *data, int64_t n,
                               const char *what) {
  const char *op = "optim_check_state";
  if (!state_name || !what || (!data && n > 0)) return lt__err(LT_ERR_NULL, "%s: an argument is NULL", op);
  if (!strcmp(state_name, "step")) {
    if (dtype != LT_DTYPE_I64) return lt__err(LT_ERR_INVALID, "%s: %s: step must be i64", op, what);
    const int64_t *v = data;
    for (int64_t i = 0; i < n; i++)
      if (v[i] < 0 || v[i] > LT_OPTIM_MAX_STEP)
        return lt__err(LT_ERR_INVALID, "%s: step %lld is outside [0, %lld] (LT_OPTIM_MAX_STEP)", what,
                       (long long)v[i], (long long)LT_OPTIM_MAX_STEP);
    return LT_OK;
  }
  bool sq = !strcmp(state_name, "exp_avg_sq");
  if (!sq && strcmp(state_name, "exp_avg") && strcmp(state_name, "momentum_buffer"))
    return lt__err(LT_ERR_INVALID, "%s: %s: unknown optimizer state '%s'", op, what, state_name);
  if (dtype != LT_DTYPE_F32 && dtype != LT_DTYPE_F64)
    return lt__err(LT_ERR_INVALID, "%s: %s: optimizer state must be f32 or f64, not %s", op, what,
                   lt_dtype_name(dtype));
  for (int64_t i = 0; i < n; i++) {
    double x = dtype == LT_DTYPE_F32 ? (double)((const float *)data)[i] : ((const double *)data)[i];
    if (!isfinite(x))
      return lt__err(LT_ERR_NUMERIC, "%s holds %s at flat index %lld: %s must be finite", what,
                     isnan(x) ? "NaN" : x > 0 ? "+inf" : "-inf", (long long)i, state_name);
    if (sq && x < 0)
      return lt__err(LT_ERR_INVALID, "%s holds %g at flat index %lld: exp_avg_sq (a second moment) must be in "
                     "[0, inf)", what, x, (long long)i);
  }
  return LT_OK;
}

lt_status lt_optimizer_reset_state(lt_optimizer *o, int64_t step_count, int n, const char *const *param_names) {
  const char *op = "optimizer_reset_state";
  if (!o) return lt__err(LT_ERR_NULL, "%s: the optimizer is NULL", op);
  if (step_count < 0 || step_count > LT_OPTIM_MAX_STEP)
    return lt__err(LT_ERR_INVALID, "%s: step count %lld is outside [0, %lld] (LT_OPTIM_MAX_STEP)", op,
                   (long long)step_count, (long long)LT_OPTIM_MAX_STEP);
  if (n < 0 || (n > 0 && !param_names))
    return lt__err(LT_ERR_INVALID, "%s: %d names but no name array", op, n);
  bool *todo = calloc((size_t)o->n * (1 + N_STATE), sizeof(bool)); /* todo[n], fresh[N_STATE n] */
  if (!todo) return lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
  for (int j = 0; j < n; j++) {
    int i = param_names[j] ? entry_index(o, param_names[j]) : -1;
    if (i < 0) {
      free(todo);
      return lt__err(LT_ERR_INVALID, "%s: '%s' is not a parameter this optimizer updates (buffers and names "
                     "added after lt_optimizer_new are not)", op, param_names[j] ? param_names[j] : "(null)");
    }
    todo[i] = true;
  }
  /* Build the new state aside (the old one stays until all is made). */
  opt_entry *old = malloc(sizeof(opt_entry) * (size_t)o->n);
  if (!old) {
    free(todo);
    return lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
  }
  memcpy(old, o->e, sizeof(opt_entry) * (size_t)o->n);
  for (int i = 0; i < o->n; i++)
    for (int k = 0; k < N_STATE; k++) *slot(&o->e[i], k) = NULL;
  lt_status s = make_states(o, todo, todo + o->n);
  if (s != LT_OK) { /* make_states freed what it made: put the old state back */
    memcpy(o->e, old, sizeof(opt_entry) * (size_t)o->n);
  } else {
    for (int i = 0; i < o->n; i++) drop_state(&old[i]);
    o->steps = step_count;
  }
  free(old);
  free(todo);
  return s;
}

/* ---- the fused update loops ----------------------------------------------- */

/* The constants of one parameter's update. */
typedef struct opt_hyper {
  double lr, wd, momentum, keep; /* SGD: keep = 1 - dampening */
  bool nesterov, fresh;          /* SGD: fresh = the momentum buffer is new (buf = g) */
  double decay, l2;              /* Adam: AdamW's 1 - lr*wd (1 for Adam); Adam's L2 weight decay (0 for AdamW) */
  double beta1, beta2, eps, step_size, bc2_sqrt;
} opt_hyper;

/* The span kernels run over [0, n) of contiguous arrays with `omp simd`; the
 * driver below splits a tensor into blocks over the OpenMP threads. GCC does
 * not vectorise a loop calling sqrtf/sqrt: without -fno-math-errno (which a
 * function attribute does not switch off) it keeps a branch to the libm call
 * for errno. So the f32 Adam span runs in chunks of ADAM_CHUNK in three
 * vectorised passes (moments; sqrt by SSE's sqrtps, correctly rounded like
 * sqrtf; the parameter update), the same operations in the same order as the
 * one-loop f64 span, so the same bits as a scalar loop. */

#define OPT_SGD_SPAN(T, SUF)                                                                       \
  static void sgd_span_##SUF(int64_t n, T *restrict p, const T *restrict g, T *restrict buf,       \
                             const opt_hyper *h) {                                                 \
    const T lr = (T)h->lr, wd = (T)h->wd, mom = (T)h->momentum, keep = (T)h->keep;                 \
    const bool l2 = h->wd != 0, nesterov = h->nesterov, fresh = h->fresh;                          \
    if (h->momentum == 0) {                                                                        \
      if (l2) {                                                                                    \
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++) p[i] = p[i] + (-lr) * (g[i] + wd * p[i]); \
      } else {                                                                                     \
        _Pragma("omp simd") for (int64_t i = 0; i < n; i++) p[i] = p[i] + (-lr) * g[i];            \
      }                                                                                            \
      return;                                                                                      \
    }                                                                                              \
    _Pragma("omp simd") for (int64_t i = 0; i < n; i++) {                                          \
      T d = l2 ? g[i] + wd * p[i] : g[i];        /* d_p = grad.add(param, alpha=wd) */             \
      T b = fresh ? d : buf[i] * mom + keep * d; /* buf.mul_(momentum).add_(d_p, alpha=1-damp) */  \
      buf[i] = b;                                                                                  \
      T u = nesterov ? d + mom * b : b;          /* d_p.add(buf, alpha=momentum) | buf */          \
      p[i] = p[i] + (-lr) * u;                   /* param.add_(d_p, alpha=-lr) */                  \
    }                                                                                              \
  }
OPT_SGD_SPAN(float, f32)
OPT_SGD_SPAN(double, f64)

#define OPT_ADAM_BODY(T, SQRT, L2)                                                                  \
  _Pragma("omp simd") for (int64_t i = 0; i < n; i++) {                                            \
    T pi = p[i] * decay;                 /* param.mul_(1 - lr * wd) (AdamW) */                     \
    T gi = L2 ? g[i] + l2 * p[i] : g[i]; /* grad.add(param, alpha=wd) (Adam) */                    \
    T mi = m[i] * b1 + c1 * gi;          /* exp_avg.mul_(beta1).add_(grad, alpha=1-beta1) */       \
    T vi = v[i] * b2 + c2 * gi * gi;     /* exp_avg_sq.mul_(beta2).addcmul_(grad, grad, 1-beta2) */ \
    T den = SQRT(vi) / bc2s + eps;       /* (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps) */            \
    m[i] = mi;                                                                                     \
    v[i] = vi;                                                                                     \
    p[i] = pi + nstep * mi / den;        /* param.addcdiv_(exp_avg, denom, value=-step_size) */    \
  }

#define OPT_ADAM_SPAN(T, SUF, SQRT)                                                                 \
  static void adam_span_##SUF(int64_t n, T *restrict p, const T *restrict g, T *restrict m,        \
                              T *restrict v, const opt_hyper *h) {                                 \
    const T decay = (T)h->decay, l2 = (T)h->l2, b1 = (T)h->beta1, b2 = (T)h->beta2,                \
            c1 = (T)(1.0 - h->beta1), c2 = (T)(1.0 - h->beta2), eps = (T)h->eps,                    \
            nstep = (T)(-h->step_size), bc2s = (T)h->bc2_sqrt;                                      \
    if (h->l2 != 0) {                                                                              \
      OPT_ADAM_BODY(T, SQRT, 1)                                                                    \
    } else {                                                                                       \
      OPT_ADAM_BODY(T, SQRT, 0)                                                                    \
    }                                                                                              \
  }
OPT_ADAM_SPAN(double, f64, sqrt)

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#include <immintrin.h>
#define OPT_SQRT_SSE 1
#endif

#define ADAM_CHUNK 256
LT__CLONES static void adam_span_f32(int64_t n, float *restrict p, const float *restrict g,
                                     float *restrict m, float *restrict v, const opt_hyper *h) {
  const float decay = (float)h->decay, l2 = (float)h->l2, b1 = (float)h->beta1, b2 = (float)h->beta2,
              c1 = (float)(1.0 - h->beta1), c2 = (float)(1.0 - h->beta2), eps = (float)h->eps,
              nstep = (float)(-h->step_size), bc2s = (float)h->bc2_sqrt;
  const bool use_l2 = h->l2 != 0;
  float den[ADAM_CHUNK];
  for (int64_t c0 = 0; c0 < n; c0 += ADAM_CHUNK) {
    const int len = n - c0 < ADAM_CHUNK ? (int)(n - c0) : ADAM_CHUNK;
    float *restrict pc = p + c0, *restrict mc = m + c0, *restrict vc = v + c0;
    const float *restrict gc = g + c0;
    /* moments (the gradient with Adam's L2 term) */
    if (use_l2) {
      _Pragma("omp simd") for (int i = 0; i < len; i++) {
        const float gi = gc[i] + l2 * pc[i];
        mc[i] = mc[i] * b1 + c1 * gi;
        vc[i] = vc[i] * b2 + c2 * gi * gi;
      }
    } else {
      _Pragma("omp simd") for (int i = 0; i < len; i++) {
        const float gi = gc[i];
        mc[i] = mc[i] * b1 + c1 * gi;
        vc[i] = vc[i] * b2 + c2 * gi * gi;
      }
    }
    /* sqrt(v) */
    int i = 0;
#ifdef OPT_SQRT_SSE
    for (; i + 4 <= len; i += 4) _mm_storeu_ps(den + i, _mm_sqrt_ps(_mm_loadu_ps(vc + i)));
#endif
    for (; i < len; i++) den[i] = sqrtf(vc[i]);
    /* p = p * (1 - lr wd) - step_size * m / (sqrt(v) / bc2_sqrt + eps) */
    _Pragma("omp simd") for (int j = 0; j < len; j++) {
      const float d = den[j] / bc2s + eps;
      pc[j] = pc[j] * decay + nstep * mc[j] / d;
    }
  }
}

#define OPT_BLOCK 16384

/* Runs the span kernel of (sgd, f32) over n elements in blocks of OPT_BLOCK,
 * the blocks split over nt threads when n is big (elementwise: the result
 * does not depend on the split). */
static void run_spans(bool sgd, bool f32, int64_t n, void *p, const void *g, void *s1, void *s2,
                      const opt_hyper *h, int nt) {
  int64_t nb = (n + OPT_BLOCK - 1) / OPT_BLOCK;
#pragma omp parallel for schedule(static) num_threads(nt) if (n >= LT__PARALLEL_MIN)
  for (int64_t b = 0; b < nb; b++) {
    int64_t lo = b * OPT_BLOCK, len = n - lo < OPT_BLOCK ? n - lo : OPT_BLOCK;
    if (sgd && f32) sgd_span_f32(len, (float *)p + lo, (const float *)g + lo, s1 ? (float *)s1 + lo : NULL, h);
    else if (sgd) sgd_span_f64(len, (double *)p + lo, (const double *)g + lo, s1 ? (double *)s1 + lo : NULL, h);
    else if (f32)
      adam_span_f32(len, (float *)p + lo, (const float *)g + lo, (float *)s1 + lo, (float *)s2 + lo, h);
    else
      adam_span_f64(len, (double *)p + lo, (const double *)g + lo, (double *)s1 + lo, (double *)s2 + lo, h);
  }
}

/* One parameter's update on contiguous data p, g (and contiguous state). */
static void update_one(lt_optimizer *o, opt_entry *e, void *p, const void *g, bool fresh_buf, int nt) {
  const lt_optim_config *c = &o->cfg;
  int64_t n = e->param->numel;
  bool f32 = e->param->dtype == LT_DTYPE_F32;
  opt_hyper h = {.lr = c->lr, .wd = e->weight_decay};
  if (c->kind == LT_OPTIM_SGD) {
    h.momentum = c->momentum;
    h.keep = 1.0 - c->dampening;
    h.nesterov = c->nesterov;
    h.fresh = fresh_buf;
    run_spans(true, f32, n, p, g, e->buf ? e->buf->data : NULL, NULL, &h, nt);
    return;
  }
  int64_t *step = e->step->data;
  double t = (double)++*step;
  bool adamw = c->kind == LT_OPTIM_ADAMW;
  h.decay = adamw ? 1.0 - c->lr * e->weight_decay : 1.0;
  h.l2 = adamw ? 0.0 : e->weight_decay;
  h.beta1 = c->beta1;
  h.beta2 = c->beta2;
  h.eps = c->eps;
  h.step_size = c->lr / (1.0 - pow(c->beta1, t)); /* lr / bias_correction1 */
  h.bc2_sqrt = sqrt(1.0 - pow(c->beta2, t));      /* sqrt(bias_correction2) */
  run_spans(false, f32, n, p, g, e->buf->data, e->sq->data, &h, nt);
}

static bool same_shape(const lt_tensor *a, const lt_tensor *b) {
  if (a->ndim != b->ndim) return false;
  for (int d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d]) return false;
  return true;
}

lt_status lt_optimizer_step(lt_optimizer *o) {
  const char *op = "optimizer_step";
  if (!o) return lt__err(LT_ERR_NULL, "%s: the optimizer is NULL", op);
  lt_status s = lt__ensure_init();
  if (s != LT_OK) return s;

  /* 1. Which parameters update, and are their gradients usable? (Nothing
   *    changes if not.) */
  bool *todo = calloc((size_t)o->n * (1 + N_STATE), sizeof(bool)); /* todo[n], fresh[N_STATE n] */
  if (!todo) return lt__err(LT_ERR_NOMEM, "%s: out of memory", op);
  bool *fresh = todo + o->n;
  for (int i = 0; i < o->n; i++) {
    const lt_tensor *p = o->e[i].param, *g = p->grad;
    if (!p->requires_grad || !g || i < o->first || i >= o->first + o->count) continue; /* or another rank's shard */
    if (!same_shape(p, g) || !lt_dtype_is_float(g->dtype)) {
      free(todo);
      return lt__err(LT_ERR_SHAPE, "%s: parameter '%s' is %s but its .grad is %s", op, o->e[i].name,
                     LT__D(p), LT__D(g));
    }
    const lt_tensor *b = o->e[i].buf;
    if (b && (b->dtype != p->dtype || !same_shape(p, b))) {
      free(todo);
      return lt__err(LT_ERR_DTYPE,
                     "%s: parameter '%s' is %s but its optimizer state is %s (the store was converted after "
                     "the optimizer made its state: make the optimizer after lt_params_to_dtype)",
                     op, o->e[i].name, LT__D(p), LT__D(b));
    }
    todo[i] = true;
  }
  /* 2. Lazily created state (freed again if one allocation fails). */
  if ((s = make_states(o, todo, fresh)) != LT_OK) {
    free(todo);
    return s;
  }
  /* 3. The updates, under no-grad. Non-contiguous parameters or gradients
   *    (or a gradient of another dtype) go through contiguous temporaries. */
  bool prev = lt_set_grad_enabled(false);
  int nt = lt_get_num_threads();
  for (int i = 0; i < o->n && s == LT_OK; i++) {
    if (!todo[i]) continue;
    opt_entry *e = &o->e[i];
    lt_tensor *p = e->param, *g = p->grad, *gt = NULL, *pt = NULL;
    if (g->dtype != p->dtype || !lt_is_contiguous(g)) {
      lt_tensor *c = g->dtype != p->dtype ? lt_to_dtype(g, p->dtype) : lt_contiguous(g);
      gt = c ? lt_tensor_keep(lt_contiguous(c)) : NULL;
      lt_tensor_free(c);
      if (!gt) {
        s = lt_last_status();
        break;
      }
      g = gt;
    }
    bool pc = lt_is_contiguous(p);
    if (!pc && !(pt = lt_tensor_keep(lt_clone(p)))) {
      lt_tensor_free(gt);
      s = lt_last_status();
      break;
    }
    if (p->numel > 0) update_one(o, e, pc ? p->data : pt->data, g->data, fresh[N_STATE * i], nt);
    else if (o->cfg.kind != LT_OPTIM_SGD) ++*(int64_t *)e->step->data;
    if (pt) {
      lt_status s2 = lt_copy_(p, pt); /* bumps p's version */
      if (s2 != LT_OK) s = s2;
    } else {
      lt__bump_version(p);
    }
    lt_tensor_free(pt);
    lt_tensor_free(gt);
  }
  lt_set_grad_enabled(prev);
  free(todo);
  if (s == LT_OK) o->steps++;
  return s;
}
