/*
 * tests/test_optim.c: the optimizers (SGD plain / momentum + dampening /
 * nesterov / weight decay, Adam, AdamW), learning-rate schedules and gradient
 * clipping of nn/nn.h.
 *
 * The optimizers are checked for 10 steps against reference updates written
 * here from PyTorch's documented algorithms (f64, to 1e-12), on a store with a
 * NO_DECAY group, a parameter that gets its first gradient late (its own bias
 * correction starts at t = 1), a frozen one, one that never gets a gradient,
 * a buffer, a non-contiguous parameter and a non-contiguous gradient. Also:
 * f32 against the f64 reference, thread-count independence of a big update,
 * checkpoint-style resume through lt_optimizer_reset_state +
 * lt_optimizer_state ("step" per parameter), PyTorch's trajectories with
 * skipped gradients resumed mid-run (fixtures/nn_optim.bin), and the error
 * paths.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"
#include "tensor/storage_internal.h"
#include "test_util.h"
#include "util_fixtures.h"

#define PI 3.14159265358979323846

/* ======================================================================== */
/* Reference optimizers on plain double arrays                              */
/* ======================================================================== */

typedef struct ref_param {
  int64_t n;
  double *p, *g, *buf, *sq;
  bool has_buf;
  int64_t t;
  double wd;
} ref_param;

static void ref_sgd(const lt_optim_config *c, ref_param *r) {
  for (int64_t i = 0; i < r->n; i++) {
    double d = r->g[i];
    if (r->wd != 0) d = d + r->wd * r->p[i];
    if (c->momentum != 0) {
      r->buf[i] = r->has_buf ? c->momentum * r->buf[i] + (1 - c->dampening) * d : d;
      d = c->nesterov ? d + c->momentum * r->buf[i] : r->buf[i];
    }
    r->p[i] -= c->lr * d;
  }
  r->has_buf = true;
}

static void ref_adam(const lt_optim_config *c, ref_param *r) {
  r->t++;
  double bc1 = 1 - pow(c->beta1, (double)r->t), bc2 = 1 - pow(c->beta2, (double)r->t);
  for (int64_t i = 0; i < r->n; i++) {
    double g = r->g[i];
    if (c->kind == LT_OPTIM_ADAM) g += r->wd * r->p[i];
    else r->p[i] *= 1 - c->lr * r->wd;
    r->buf[i] = c->beta1 * r->buf[i] + (1 - c->beta1) * g;
    r->sq[i] = c->beta2 * r->sq[i] + (1 - c->beta2) * g * g;
    double mhat = r->buf[i] / bc1, vhat = r->sq[i] / bc2;
    (void)mhat;
    (void)vhat;
    /* PyTorch's form: p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps) */
    r->p[i] -= c->lr / bc1 * r->buf[i] / (sqrt(r->sq[i]) / sqrt(bc2) + c->eps);
  }
  r->has_buf = true;
}

/* ======================================================================== */
/* The test store                                                           */
/* ======================================================================== */

enum { P_W, P_B, P_NORM, P_LATE, P_FROZEN, P_BUF, P_NOGRAD, P_TRANS, NP };
static const struct {
  const char *name;
  int64_t rows, cols;
  unsigned flags;
} spec[NP] = {
    {"enc.weight", 3, 4, LT_PARAM_DEFAULT},  {"enc.bias", 1, 4, LT_PARAM_NO_DECAY},
    {"norm.weight", 1, 5, LT_PARAM_NO_DECAY}, {"late.weight", 2, 3, LT_PARAM_DEFAULT},
    {"frozen.weight", 1, 2, LT_PARAM_DEFAULT}, {"buf", 1, 3, LT_PARAM_BUFFER},
    {"nograd.weight", 1, 2, LT_PARAM_DEFAULT}, {"trans.weight", 3, 2, LT_PARAM_DEFAULT},
};
#define LATE_FIRST_STEP 4

static double init_value(int j, int64_t i) { return sin(1.0 + 0.7 * (double)i + 1.3 * j); }
/* The gradient at step s depends on the current parameter value. */
static double grad_value(int j, int64_t i, int s, double p) { return 0.5 * p + cos(0.3 * (double)i + s + 0.9 * j); }

typedef struct fixture {
  lt_params *store;
  lt_tensor *t[NP];
  ref_param r[NP];
} fixture;

static void fixture_make(fixture *f, lt_dtype dt, const lt_optim_config *c) {
  memset(f, 0, sizeof *f);
  f->store = lt_params_new();
  ck_assert(f->store);
  for (int j = 0; j < NP; j++) {
    int64_t n = spec[j].rows * spec[j].cols;
    double *v = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) v[i] = init_value(j, i);
    lt_tensor *t;
    if (j == P_TRANS) {
      /* a non-contiguous parameter: the transpose of a [cols, rows] tensor, whose
       * logical row-major order is the v[] order */
      lt_tensor *base = LT_NN(lt_empty(dt, LT_SHAPE(spec[j].cols, spec[j].rows)));
      t = LT_NN(lt_transpose(base, 0, 1));
      lt_tensor_free(base);
      lt_tensor *src = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(spec[j].rows, spec[j].cols), v));
      LT_OK_OR_FAIL(lt_copy_(t, src));
      lt_tensor_free(src);
      ck_assert(!lt_is_contiguous(t));
    } else {
      lt_tensor *src = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(spec[j].rows, spec[j].cols), v));
      t = LT_NN(lt_to_dtype(src, dt));
      lt_tensor_free(src);
    }
    LT_OK_OR_FAIL(lt_params_add(f->store, spec[j].name, t, spec[j].flags));
    f->t[j] = t;
    ref_param *r = &f->r[j];
    r->n = n;
    r->p = v;
    r->g = calloc((size_t)n, sizeof(double));
    r->buf = calloc((size_t)n, sizeof(double));
    r->sq = calloc((size_t)n, sizeof(double));
    bool decay = c->decay_all || !(spec[j].flags & LT_PARAM_NO_DECAY);
    r->wd = decay ? c->weight_decay : 0;
  }
  LT_OK_OR_FAIL(lt_params_set_requires_grad(f->store, "frozen.", false));
}

static void fixture_free(fixture *f) {
  lt_params_free(f->store);
  for (int j = 0; j < NP; j++) {
    free(f->r[j].p);
    free(f->r[j].g);
    free(f->r[j].buf);
    free(f->r[j].sq);
  }
}

static double *read_all(const lt_tensor *t) {
  double *v = malloc(sizeof(double) * (size_t)(t->numel ? t->numel : 1));
  LT_OK_OR_FAIL(lt_tensor_read(t, LT_DTYPE_F64, v, t->numel));
  return v;
}

static bool gets_grad(int j, int s) {
  if (j == P_BUF || j == P_NOGRAD) return false;
  if (j == P_LATE && s < LATE_FIRST_STEP) return false;
  return true;
}

/* Set the .grad of every tensor for step s (from its current value) and the
 * reference's g (from the reference's value). */
static void set_grads(fixture *f, int s) {
  for (int j = 0; j < NP; j++) {
    lt_tensor *t = f->t[j];
    lt_zero_grad(t);
    if (!gets_grad(j, s)) continue;
    double *cur = read_all(t);
    int64_t n = t->numel;
    double *g = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
      g[i] = grad_value(j, i, s, cur[i]);
      f->r[j].g[i] = grad_value(j, i, s, f->r[j].p[i]);
    }
    lt_tensor *g64 = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, t->ndim, t->shape, g));
    lt_tensor *gt;
    if (j == P_W) {
      /* a non-contiguous gradient: the transpose of a contiguous [cols, rows] copy */
      lt_tensor *tr = LT_NN(lt_transpose(g64, 0, 1));
      lt_tensor *c = LT_NN(lt_clone(tr));
      lt_tensor *cd = LT_NN(lt_to_dtype(c, t->dtype));
      gt = LT_NN(lt_transpose(cd, 0, 1)); /* [rows, cols], non-contiguous */
      ck_assert(!lt_is_contiguous(gt));
      lt_tensor_free(cd);
      lt_tensor_free(c);
      lt_tensor_free(tr);
    } else {
      gt = LT_NN(lt_to_dtype(g64, t->dtype));
    }
    lt_tensor_free(g64);
    t->grad = gt;
    free(g);
    free(cur);
  }
}

static void ref_step(fixture *f, const lt_optim_config *c, int s) {
  for (int j = 0; j < NP; j++) {
    if (!gets_grad(j, s) || j == P_FROZEN) continue;
    if (c->kind == LT_OPTIM_SGD) ref_sgd(c, &f->r[j]);
    else ref_adam(c, &f->r[j]);
  }
}

static void compare(const fixture *f, const lt_optimizer *o, const lt_optim_config *c, double tol, int s) {
  for (int j = 0; j < NP; j++) {
    double *v = read_all(f->t[j]);
    const ref_param *r = &f->r[j];
    for (int64_t i = 0; i < r->n; i++)
      ck_assert_msg(fabs(v[i] - r->p[i]) <= tol * (1 + fabs(r->p[i])),
                    "step %d: %s[%lld] = %.17g, reference %.17g (diff %.3g)", s, spec[j].name, (long long)i,
                    v[i], r->p[i], v[i] - r->p[i]);
    free(v);
    const char *sn[2] = {c->kind == LT_OPTIM_SGD ? "momentum_buffer" : "exp_avg", "exp_avg_sq"};
    const double *sr[2] = {r->buf, r->sq};
    for (int k = 0; k < 2; k++) {
      lt_tensor *st = lt_optimizer_state(o, spec[j].name, sn[k]);
      bool want = r->has_buf && (c->kind != LT_OPTIM_SGD || (k == 0 && c->momentum != 0));
      ck_assert_msg((st != NULL) == want, "step %d: state %s of %s: %s", s, sn[k], spec[j].name,
                    st ? "present" : "absent");
      if (!st) continue;
      double *sv = read_all(st);
      for (int64_t i = 0; i < r->n; i++)
        ck_assert_msg(fabs(sv[i] - sr[k][i]) <= tol * (1 + fabs(sr[k][i])),
                      "step %d: %s of %s[%lld] = %.17g, reference %.17g", s, sn[k], spec[j].name, (long long)i,
                      sv[i], sr[k][i]);
      free(sv);
    }
    /* Adam's per-parameter step (PyTorch's state['step']): updates applied to it. */
    lt_tensor *st = lt_optimizer_state(o, spec[j].name, "step");
    if (c->kind == LT_OPTIM_SGD || !r->has_buf) {
      ck_assert_msg(st == NULL, "step %d: %s has a step", s, spec[j].name);
    } else {
      ck_assert_msg(st && st->dtype == LT_DTYPE_I64 && st->ndim == 0, "step %d: step of %s", s, spec[j].name);
      ck_assert_msg(*(int64_t *)st->data == r->t, "step %d: %s step %lld, reference %lld", s, spec[j].name,
                    (long long)*(int64_t *)st->data, (long long)r->t);
    }
  }
}

/* Run 10 steps (the lr halves before step 6) against the reference. */
static void run_case(lt_optim_config c, lt_dtype dt, double tol) {
  fixture f;
  fixture_make(&f, dt, &c);
  lt_optimizer *o = lt_optimizer_new(f.store, &c);
  ck_assert_msg(o != NULL, "%s", lt_last_error());
  ck_assert(lt_optimizer_get_lr(o) == c.lr);
  for (int s = 1; s <= 10; s++) {
    if (s == 6) {
      c.lr *= 0.5;
      lt_optimizer_set_lr(o, c.lr);
      ck_assert(lt_optimizer_get_lr(o) == c.lr);
    }
    set_grads(&f, s);
    uint64_t v0 = lt__version(f.t[P_W]), vf = lt__version(f.t[P_FROZEN]);
    LT_OK_OR_FAIL(lt_optimizer_step(o));
    ck_assert(lt__version(f.t[P_W]) > v0);
    ck_assert(lt__version(f.t[P_FROZEN]) == vf);
    ref_step(&f, &c, s);
    compare(&f, o, &c, tol, s);
    ck_assert_int_eq(lt_optimizer_step_count(o), s);
  }
  /* the parameters still require grad (buffers not), and grad mode is back on */
  ck_assert(f.t[P_W]->requires_grad && !f.t[P_BUF]->requires_grad && !f.t[P_FROZEN]->requires_grad);
  ck_assert(lt_grad_enabled());
  lt_optimizer_free(o);
  fixture_free(&f);
}

static lt_optim_config sgd(double lr, double mom, double damp, bool nest, double wd) {
  lt_optim_config c = lt_optim_defaults(LT_OPTIM_SGD);
  c.lr = lr;
  c.momentum = mom;
  c.dampening = damp;
  c.nesterov = nest;
  c.weight_decay = wd;
  return c;
}

START_TEST(test_sgd_plain) { run_case(sgd(0.1, 0, 0, false, 0), LT_DTYPE_F64, 1e-12); }
END_TEST
START_TEST(test_sgd_weight_decay) { run_case(sgd(0.1, 0, 0, false, 0.05), LT_DTYPE_F64, 1e-12); }
END_TEST
START_TEST(test_sgd_momentum) { run_case(sgd(0.05, 0.9, 0.1, false, 0.01), LT_DTYPE_F64, 1e-12); }
END_TEST
START_TEST(test_sgd_nesterov) { run_case(sgd(0.05, 0.9, 0, true, 0.01), LT_DTYPE_F64, 1e-12); }
END_TEST
START_TEST(test_sgd_decay_all) {
  lt_optim_config c = sgd(0.05, 0.5, 0, false, 0.1);
  c.decay_all = true;
  run_case(c, LT_DTYPE_F64, 1e-12);
}
END_TEST

START_TEST(test_adam) {
  lt_optim_config c = lt_optim_defaults(LT_OPTIM_ADAM);
  c.lr = 0.01;
  run_case(c, LT_DTYPE_F64, 1e-12);
  c.weight_decay = 0.1; /* L2 */
  c.beta1 = 0.8;
  c.beta2 = 0.95;
  c.eps = 1e-6;
  run_case(c, LT_DTYPE_F64, 1e-12);
  c.decay_all = true;
  run_case(c, LT_DTYPE_F64, 1e-12);
}
END_TEST

START_TEST(test_adamw) {
  lt_optim_config c = lt_optim_defaults(LT_OPTIM_ADAMW);
  c.lr = 0.01;
  run_case(c, LT_DTYPE_F64, 1e-12);
  c.weight_decay = 0.3;
  c.beta2 = 0.98;
  run_case(c, LT_DTYPE_F64, 1e-12);
  c.decay_all = true;
  run_case(c, LT_DTYPE_F64, 1e-12);
}
END_TEST

START_TEST(test_f32) {
  lt_optim_config c = lt_optim_defaults(LT_OPTIM_ADAMW);
  c.lr = 0.01;
  run_case(c, LT_DTYPE_F32, 2e-6);
  run_case(sgd(0.05, 0.9, 0, true, 0.01), LT_DTYPE_F32, 2e-6);
  c = lt_optim_defaults(LT_OPTIM_ADAM);
  c.weight_decay = 0.01;
  run_case(c, LT_DTYPE_F32, 2e-6);
}
END_TEST

START_TEST(test_defaults) {
  lt_optim_config c = lt_optim_defaults(LT_OPTIM_SGD);
  ck_assert(c.kind == LT_OPTIM_SGD && c.lr == 1e-3 && c.momentum == 0 && c.dampening == 0 && !c.nesterov &&
            c.weight_decay == 0 && !c.decay_all);
  c = lt_optim_defaults(LT_OPTIM_ADAM);
  ck_assert(c.lr == 1e-3 && c.beta1 == 0.9 && c.beta2 == 0.999 && c.eps == 1e-8 && c.weight_decay == 0);
  c = lt_optim_defaults(LT_OPTIM_ADAMW);
  ck_assert(c.lr == 1e-3 && c.beta1 == 0.9 && c.beta2 == 0.999 && c.eps == 1e-8 && c.weight_decay == 1e-2);
}
END_TEST

/* A big f32 tensor goes multi-threaded: the result equals a 1-thread run
 * bit for bit and the double reference to f32 precision. */
START_TEST(test_big_threads) {
  const int64_t n = 200003;
  float *res[2];
  for (int run = 0; run < 2; run++) {
    LT_OK_OR_FAIL(lt_set_num_threads(run == 0 ? 1 : 2));
    lt_params *p = lt_params_new();
    lt_tensor *w = LT_NN(lt_empty(LT_DTYPE_F32, LT_SHAPE(n)));
    float *wd = w->data;
    for (int64_t i = 0; i < n; i++) wd[i] = (float)sin(0.001 * (double)i);
    LT_OK_OR_FAIL(lt_params_add(p, "w", w, 0));
    lt_optim_config c = lt_optim_defaults(LT_OPTIM_ADAMW);
    lt_optimizer *o = lt_optimizer_new(p, &c);
    ck_assert(o);
    for (int s = 1; s <= 3; s++) {
      lt_zero_grad(w);
      w->grad = LT_NN(lt_empty(LT_DTYPE_F32, LT_SHAPE(n)));
      float *g = w->grad->data;
      for (int64_t i = 0; i < n; i++) g[i] = (float)cos(0.002 * (double)i + s);
      LT_OK_OR_FAIL(lt_optimizer_step(o));
    }
    res[run] = malloc(sizeof(float) * (size_t)n);
    memcpy(res[run], w->data, sizeof(float) * (size_t)n);
    lt_optimizer_free(o);
    lt_params_free(p);
  }
  ck_assert(memcmp(res[0], res[1], sizeof(float) * (size_t)n) == 0);
  /* reference */
  lt_optim_config c = lt_optim_defaults(LT_OPTIM_ADAMW);
  ref_param r = {.n = n, .wd = c.weight_decay};
  r.p = malloc(sizeof(double) * (size_t)n);
  r.g = malloc(sizeof(double) * (size_t)n);
  r.buf = calloc((size_t)n, sizeof(double));
  r.sq = calloc((size_t)n, sizeof(double));
  for (int64_t i = 0; i < n; i++) r.p[i] = (float)sin(0.001 * (double)i);
  for (int s = 1; s <= 3; s++) {
    for (int64_t i = 0; i < n; i++) r.g[i] = (float)cos(0.002 * (double)i + s);
    ref_adam(&c, &r);
  }
  double maxd = 0;
  for (int64_t i = 0; i < n; i++) maxd = fmax(maxd, fabs(res[0][i] - r.p[i]));
  ck_assert_msg(maxd < 1e-6, "max diff %g", maxd);
  free(r.p), free(r.g), free(r.buf), free(r.sq), free(res[0]), free(res[1]);
}
END_TEST

/* Checkpoint-style resume: a second optimizer given the step count and, for
 * exactly the parameters that have state in the first, all of it ("step"
 * included) through lt_optimizer_reset_state + lt_optimizer_state, continues
 * bit for bit like the first, the late parameter (fewer updates, its own bias
 * correction) included. */
static const char *const STATE_NAMES[4] = {"momentum_buffer", "exp_avg", "exp_avg_sq", "step"};

static void copy_optimizer(lt_optimizer *dst, const lt_optimizer *src, const lt_params *p) {
  const char *names[16];
  int n = 0;
  for (int i = 0; i < lt_params_count(p); i++) {
    const char *pn = lt_params_at(p, i)->name;
    bool has = false;
    for (int k = 0; k < 4; k++) has |= lt_optimizer_state(src, pn, STATE_NAMES[k]) != NULL;
    if (has) names[n++] = pn;
  }
  LT_OK_OR_FAIL(lt_optimizer_reset_state(dst, lt_optimizer_step_count(src), n, names));
  lt_optimizer_set_lr(dst, lt_optimizer_get_lr(src));
  bool prev = lt_set_grad_enabled(false);
  for (int i = 0; i < lt_params_count(p); i++)
    for (int k = 0; k < 4; k++) {
      const char *pn = lt_params_at(p, i)->name;
      lt_tensor *a = lt_optimizer_state(src, pn, STATE_NAMES[k]), *b = lt_optimizer_state(dst, pn, STATE_NAMES[k]);
      ck_assert_msg((a == NULL) == (b == NULL), "%s.%s: present in one optimizer only", pn, STATE_NAMES[k]);
      if (a) LT_OK_OR_FAIL(lt_copy_(b, a));
    }
  lt_set_grad_enabled(prev);
}

START_TEST(test_resume) {
  lt_optim_config cfgs[3] = {lt_optim_defaults(LT_OPTIM_ADAMW), sgd(0.05, 0.9, 0.2, false, 0.01),
                             lt_optim_defaults(LT_OPTIM_ADAM)};
  for (int k = 0; k < 3; k++) {
    lt_optim_config c = cfgs[k];
    fixture a, b;
    fixture_make(&a, LT_DTYPE_F64, &c);
    fixture_make(&b, LT_DTYPE_F64, &c);
    lt_optimizer *oa = lt_optimizer_new(a.store, &c), *ob = lt_optimizer_new(b.store, &c);
    ck_assert(oa && ob);
    /* Stop after step 5 (the late parameter had 2 updates) or after step 2
     * (it had none: it must stay without state). */
    int stop = k == 2 ? 2 : 5;
    for (int s = 1; s <= stop; s++) {
      set_grads(&a, s);
      LT_OK_OR_FAIL(lt_optimizer_step(oa));
    }
    if (c.kind != LT_OPTIM_SGD) {
      lt_tensor *late = lt_optimizer_state(oa, "late.weight", "step");
      ck_assert(stop < LATE_FIRST_STEP ? late == NULL : *(int64_t *)late->data == 2);
    }
    bool prev = lt_set_grad_enabled(false);
    for (int j = 0; j < NP; j++) LT_OK_OR_FAIL(lt_copy_(b.t[j], a.t[j]));
    lt_set_grad_enabled(prev);
    copy_optimizer(ob, oa, a.store);
    ck_assert_int_eq(lt_optimizer_step_count(ob), stop);
    ck_assert(lt_optimizer_state(ob, "nograd.weight", STATE_NAMES[k == 1 ? 0 : 1]) == NULL);
    for (int s = stop + 1; s <= 8; s++) {
      set_grads(&a, s);
      set_grads(&b, s);
      LT_OK_OR_FAIL(lt_optimizer_step(oa));
      LT_OK_OR_FAIL(lt_optimizer_step(ob));
    }
    for (int j = 0; j < NP; j++)
      ck_assert_msg(lt_equal(a.t[j], b.t[j]), "k %d: %s differs after resume", k, spec[j].name);
    for (int j = 0; j < NP; j++)
      for (int q = 0; q < 4; q++) {
        lt_tensor *x = lt_optimizer_state(oa, spec[j].name, STATE_NAMES[q]);
        lt_tensor *y = lt_optimizer_state(ob, spec[j].name, STATE_NAMES[q]);
        ck_assert((x == NULL) == (y == NULL));
        if (x) ck_assert_msg(lt_equal(x, y), "k %d: state %s.%s differs", k, spec[j].name, STATE_NAMES[q]);
      }
    /* The coarse restore gives every parameter state and one step. */
    LT_OK_OR_FAIL(lt_optimizer_set_step_count(ob, 5));
    ck_assert_int_eq(lt_optimizer_step_count(ob), 5);
    ck_assert(lt_optimizer_state(ob, "nograd.weight", STATE_NAMES[k == 1 ? 0 : 1]) != NULL);
    if (c.kind != LT_OPTIM_SGD) ck_assert_int_eq(*(int64_t *)lt_optimizer_state(ob, "late.weight", "step")->data, 5);
    /* step count 0 drops the state */
    LT_OK_OR_FAIL(lt_optimizer_set_step_count(ob, 0));
    ck_assert(lt_optimizer_state(ob, "enc.weight", STATE_NAMES[k == 1 ? 0 : 1]) == NULL);
    ck_assert_int_eq(lt_optimizer_step_count(ob), 0);
    LT_EXPECT_ERR(lt_optimizer_set_step_count(ob, -1), LT_ERR_INVALID, "step -1");
    /* reset_state errors change nothing */
    const char *bad[2] = {"enc.weight", "buf"};
    LT_OK_OR_FAIL(lt_optimizer_reset_state(ob, 3, 1, bad));
    lt_tensor *kept = lt_optimizer_state(ob, "enc.weight", STATE_NAMES[k == 1 ? 0 : 1]);
    ck_assert(kept != NULL);
    LT_EXPECT_ERR(lt_optimizer_reset_state(ob, 4, 2, bad), LT_ERR_INVALID, "'buf' is not a parameter");
    LT_EXPECT_ERR(lt_optimizer_reset_state(ob, -1, 0, NULL), LT_ERR_INVALID, "step count -1");
    LT_EXPECT_ERR(lt_optimizer_reset_state(ob, 1, 1, NULL), LT_ERR_INVALID, "no name array");
    LT_EXPECT_ERR(lt_optimizer_reset_state(NULL, 1, 0, NULL), LT_ERR_NULL, NULL);
    ck_assert(lt_optimizer_state(ob, "enc.weight", STATE_NAMES[k == 1 ? 0 : 1]) == kept);
    ck_assert_int_eq(lt_optimizer_step_count(ob), 3);
    LT_OK_OR_FAIL(lt_optimizer_reset_state(ob, 0, 0, NULL));
    ck_assert(lt_optimizer_state(ob, "enc.weight", STATE_NAMES[k == 1 ? 0 : 1]) == NULL);
    /* unknown names */
    ck_assert(lt_optimizer_state(oa, "nope", "exp_avg") == NULL);
    ck_assert(lt_optimizer_state(oa, "enc.weight", "nope") == NULL);
    ck_assert(lt_optimizer_state(oa, "buf", STATE_NAMES[1]) == NULL);
    lt_optimizer_free(oa);
    lt_optimizer_free(ob);
    fixture_free(&a);
    fixture_free(&b);
  }
}
END_TEST

/* PyTorch's trajectories with skipped gradients (tests/fixtures/nn_optim.bin,
 * configurations adamw_skip and sgd_skip: some parameters have no .grad at
 * some steps), replayed with the optimizer replaced after step 5 by a new one
 * restored through lt_optimizer_reset_state: parameters match PyTorch at
 * every step, and each parameter's "step" counts its own updates. */
static const char *const TINY[6] = {"fc1.weight", "fc1.bias", "ln.weight", "ln.bias", "fc2.weight", "fc2.bias"};

static double fx_scalar(const lt_fixture *f, const char *cfg, const char *key) {
  char name[160];
  double v;
  snprintf(name, sizeof name, "optim.%s.%s", cfg, key);
  LT_OK_OR_FAIL(lt_fixture_scalar(f, name, &v));
  return v;
}

static void replay_skip(const char *cfg, const int64_t want_steps[6]) {
  char path[1024], name[160];
  lt_fixture_path("nn_optim.bin", path, sizeof path);
  lt_fixture *f = lt_fixture_load(path);
  ck_assert_msg(f != NULL, "%s", lt_last_error());
  lt_params *p = lt_params_new();
  for (int i = 0; i < 6; i++) {
    snprintf(name, sizeof name, "optim.init.%s", TINY[i]);
    LT_OK_OR_FAIL(lt_params_add(p, TINY[i], LT_NN(lt_fixture_get(f, name)), 0));
  }
  lt_optim_config c = lt_optim_defaults((lt_optim_kind)fx_scalar(f, cfg, "kind"));
  c.lr = fx_scalar(f, cfg, "lr");
  c.momentum = fx_scalar(f, cfg, "momentum");
  c.dampening = fx_scalar(f, cfg, "dampening");
  c.nesterov = fx_scalar(f, cfg, "nesterov") != 0;
  c.beta1 = fx_scalar(f, cfg, "beta1");
  c.beta2 = fx_scalar(f, cfg, "beta2");
  c.eps = fx_scalar(f, cfg, "eps");
  c.weight_decay = fx_scalar(f, cfg, "weight_decay");
  c.decay_all = fx_scalar(f, cfg, "decay_all") != 0;
  lt_optimizer *o = lt_optimizer_new(p, &c);
  ck_assert(o);
  for (int s = 1; s <= 10; s++) {
    if (s == 6) {
      lt_optimizer *o2 = lt_optimizer_new(p, &c);
      copy_optimizer(o2, o, p);
      lt_optimizer_free(o);
      o = o2;
    }
    lt_params_zero_grad(p);
    for (int i = 0; i < 6; i++) {
      snprintf(name, sizeof name, "optim.%s.s%d.grad.%s", cfg, s, TINY[i]);
      if (lt_fixture_has(f, name)) lt_params_find(p, TINY[i])->grad = LT_NN(lt_fixture_get(f, name));
    }
    LT_OK_OR_FAIL(lt_optimizer_step(o));
    for (int i = 0; i < 6; i++) {
      snprintf(name, sizeof name, "optim.%s.s%d.param.%s", cfg, s, TINY[i]);
      lt_tensor *want = LT_NN(lt_fixture_get(f, name));
      LT_ASSERT_CLOSE(lt_params_find(p, TINY[i]), want, 1e-5, 1e-6);
      lt_tensor_free(want);
    }
  }
  for (int i = 0; i < 6; i++) {
    lt_tensor *st = lt_optimizer_state(o, TINY[i], "step");
    if (c.kind == LT_OPTIM_SGD) ck_assert(st == NULL);
    else ck_assert_msg(*(int64_t *)st->data == want_steps[i], "%s: %s step %lld, PyTorch %lld", cfg, TINY[i],
                       (long long)*(int64_t *)st->data, (long long)want_steps[i]);
  }
  lt_params_zero_grad(p);
  lt_optimizer_free(o);
  lt_params_free(p);
  lt_fixture_free(f);
}

START_TEST(test_skip_resume_pytorch) {
  /* adamw_skip skips ln.weight at steps 1 and 2, fc2.bias at 2, fc1.weight at 5. */
  static const int64_t adamw_steps[6] = {9, 10, 8, 10, 10, 9};
  replay_skip("adamw_skip", adamw_steps);
  replay_skip("sgd_skip", NULL);
}
END_TEST

START_TEST(test_step_inside_scope) {
  /* state made during a step inside a scope survives the scope */
  lt_params *p = lt_params_new();
  lt_tensor *w = LT_NN(lt_ones(LT_DTYPE_F64, LT_SHAPE(4)));
  LT_OK_OR_FAIL(lt_params_add(p, "w", w, 0));
  lt_optim_config c = lt_optim_defaults(LT_OPTIM_ADAM);
  lt_optimizer *o = lt_optimizer_new(p, &c);
  int64_t live0 = lt__live_tensors();
  for (int s = 0; s < 3; s++) {
    lt_scope *sc = lt_scope_begin();
    lt_tensor *loss = lt_sum(lt_square(w), 0, NULL, false);
    LT_OK_OR_FAIL(lt_backward(loss, NULL, false));
    LT_OK_OR_FAIL(lt_optimizer_step(o));
    lt_scope_end(sc);
    lt_params_zero_grad(p);
  }
  ck_assert_int_eq(lt__live_tensors(), live0 + 3); /* exp_avg, exp_avg_sq, step */
  ck_assert(lt_optimizer_state(o, "w", "exp_avg_sq") != NULL);
  /* a graph that saved w before a step cannot backward through it afterwards */
  lt_tensor *y = LT_NN(lt_mul(w, w));
  lt_tensor *l = LT_NN(lt_sum(y, 0, NULL, false));
  w->grad = LT_NN(lt_ones(LT_DTYPE_F64, LT_SHAPE(4)));
  LT_OK_OR_FAIL(lt_optimizer_step(o));
  ck_assert(lt_backward(l, NULL, false) != LT_OK);
  lt_clear_error();
  lt_tensor_free(l);
  lt_tensor_free(y);
  lt_optimizer_free(o);
  lt_params_free(p);
}
END_TEST

static void expect_new_fails(lt_params *p, const lt_optim_config *c, lt_status st, const char *msg) {
  lt_optimizer *o = lt_optimizer_new(p, c);
  if (o) {
    lt_optimizer_free(o);
    ck_abort_msg("optimizer_new succeeded, expected %s (%s)", lt_status_name(st), msg ? msg : "");
  }
  LT_EXPECT_ERR(lt_last_status(), st, msg);
}

START_TEST(test_optim_errors) {
  lt_optim_config c = lt_optim_defaults(LT_OPTIM_SGD);
  lt_params *p = lt_params_new();
  expect_new_fails(NULL, &c, LT_ERR_NULL, "store");
  expect_new_fails(p, NULL, LT_ERR_NULL, "cfg");
  expect_new_fails(p, &c, LT_ERR_INVALID, "no parameters");
  LT_OK_OR_FAIL(lt_params_add(p, "b", lt_zeros(LT_DTYPE_I64, LT_SHAPE(2)), LT_PARAM_BUFFER));
  expect_new_fails(p, &c, LT_ERR_INVALID, "1 buffers");
  lt_tensor *w = LT_NN(lt_ones(LT_DTYPE_F32, LT_SHAPE(2, 2)));
  LT_OK_OR_FAIL(lt_params_add(p, "w", w, 0));
  struct {
    lt_optim_config c;
    const char *msg;
  } bad[] = {
      {sgd(-1, 0, 0, false, 0), "learning rate"},      {sgd(NAN, 0, 0, false, 0), "learning rate"},
      {sgd(0.1, -0.5, 0, false, 0), "momentum"},       {sgd(0.1, 0, 0, false, -1), "weight_decay"},
      {sgd(0.1, 0, 0, true, 0), "nesterov"},           {sgd(0.1, 0.9, 0.1, true, 0), "nesterov"},
      {lt_optim_defaults(LT_OPTIM_ADAM), NULL},         {lt_optim_defaults(LT_OPTIM_ADAM), NULL},
      {lt_optim_defaults(LT_OPTIM_ADAMW), NULL},        {lt_optim_defaults(LT_OPTIM_ADAMW), NULL},
  };
  bad[6].c.beta1 = 1.0, bad[6].msg = "beta1";
  bad[7].c.beta2 = -0.1, bad[7].msg = "beta2";
  bad[8].c.eps = -1, bad[8].msg = "eps";
  bad[9].c.kind = (lt_optim_kind)7, bad[9].msg = "unknown optimizer kind";
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
    expect_new_fails(p, &bad[k].c, LT_ERR_INVALID, bad[k].msg);

  /* a gradient of the wrong shape: error, nothing changed (not even state) */
  lt_optim_config a = lt_optim_defaults(LT_OPTIM_ADAM);
  lt_optimizer *o = lt_optimizer_new(p, &a);
  ck_assert(o);
  w->grad = LT_NN(lt_ones(LT_DTYPE_F32, LT_SHAPE(4)));
  LT_EXPECT_ERR(lt_optimizer_step(o), LT_ERR_SHAPE, "'w'");
  ck_assert(lt_optimizer_state(o, "w", "exp_avg") == NULL);
  ck_assert_int_eq(lt_optimizer_step_count(o), 0);
  LT_ASSERT_VALUES(w, 0, 1, 1, 1, 1);
  lt_zero_grad(w);
  /* no grads at all: a step that changes nothing but counts */
  LT_OK_OR_FAIL(lt_optimizer_step(o));
  ck_assert_int_eq(lt_optimizer_step_count(o), 1);
  LT_ASSERT_VALUES(w, 0, 1, 1, 1, 1);
  ck_assert(lt_optimizer_state(o, "w", "exp_avg") == NULL);
  LT_EXPECT_ERR(lt_optimizer_step(NULL), LT_ERR_NULL, NULL);
  LT_EXPECT_ERR(lt_optimizer_set_step_count(NULL, 1), LT_ERR_NULL, NULL);
  ck_assert(isnan(lt_optimizer_get_lr(NULL)));
  ck_assert(lt_optimizer_state(NULL, "w", "exp_avg") == NULL);
  lt_optimizer_set_lr(NULL, 1); /* no-op */
  lt_optimizer_free(NULL);
  lt_optimizer_free(o);
  lt_params_free(p);
}
END_TEST

/* ======================================================================== */
/* Schedules                                                                */
/* ======================================================================== */

static void close_to(double got, double want, const char *what) {
  ck_assert_msg(fabs(got - want) <= 1e-15 * (1 + fabs(want)), "%s: got %.17g, want %.17g", what, got, want);
}

START_TEST(test_schedules) {
  lt_schedule s = {.kind = LT_SCHED_CONSTANT, .base_lr = 0.1};
  close_to(lt_schedule_lr(&s, 1), 0.1, "constant 1");
  close_to(lt_schedule_lr(&s, 1000), 0.1, "constant 1000");

  s = (lt_schedule){.kind = LT_SCHED_WARMUP_LINEAR, .base_lr = 1.0, .min_lr = 0.1, .warmup = 4, .total = 14};
  close_to(lt_schedule_lr(&s, 1), 0.25, "linear 1");
  close_to(lt_schedule_lr(&s, 0), 0.25, "linear 0 (as 1)");
  close_to(lt_schedule_lr(&s, 2), 0.5, "linear 2");
  close_to(lt_schedule_lr(&s, 4), 1.0, "linear 4");
  close_to(lt_schedule_lr(&s, 5), 0.1 + 0.9 * 0.9, "linear 5");   /* q = 1/10 */
  close_to(lt_schedule_lr(&s, 9), 0.1 + 0.9 * 0.5, "linear 9");   /* q = 5/10 */
  close_to(lt_schedule_lr(&s, 14), 0.1, "linear 14");
  close_to(lt_schedule_lr(&s, 100), 0.1, "linear 100");
  s.warmup = 0;
  close_to(lt_schedule_lr(&s, 1), 0.1 + 0.9 * (1 - 1.0 / 14), "linear no warmup 1");
  s.total = 0;
  close_to(lt_schedule_lr(&s, 3), 0.1, "linear total <= warmup");

  s = (lt_schedule){.kind = LT_SCHED_WARMUP_COSINE, .base_lr = 2.0, .min_lr = 0.2, .warmup = 10, .total = 110};
  close_to(lt_schedule_lr(&s, 5), 1.0, "cosine 5");
  close_to(lt_schedule_lr(&s, 10), 2.0, "cosine 10");
  close_to(lt_schedule_lr(&s, 60), 0.2 + 1.8 * 0.5, "cosine 60"); /* q = 1/2: cos = 0 */
  close_to(lt_schedule_lr(&s, 35), 0.2 + 1.8 * 0.5 * (1 + cos(PI / 4)), "cosine 35");
  close_to(lt_schedule_lr(&s, 110), 0.2, "cosine 110");
  close_to(lt_schedule_lr(&s, 111), 0.2, "cosine 111");

  s = (lt_schedule){.kind = LT_SCHED_NOAM, .d_model = 512, .warmup = 4000};
  double k = 1 / sqrt(512.0);
  close_to(lt_schedule_lr(&s, 1), k * 1 * pow(4000, -1.5), "noam 1");
  close_to(lt_schedule_lr(&s, 4000), k / sqrt(4000.0), "noam 4000");
  close_to(lt_schedule_lr(&s, 16000), k / sqrt(16000.0), "noam 16000");
  close_to(lt_schedule_lr(&s, 100), k * 100 * pow(4000, -1.5), "noam 100");
  s.scale = 2;
  close_to(lt_schedule_lr(&s, 100), 2 * k * 100 * pow(4000, -1.5), "noam scale 2");
  s.warmup = 0;
  close_to(lt_schedule_lr(&s, 9), 2 * k / 3, "noam no warmup");

  s = (lt_schedule){.kind = LT_SCHED_STEP, .base_lr = 1.0, .gamma = 0.5, .step_size = 3};
  close_to(lt_schedule_lr(&s, 1), 1.0, "step 1");
  close_to(lt_schedule_lr(&s, 3), 1.0, "step 3");
  close_to(lt_schedule_lr(&s, 4), 0.5, "step 4");
  close_to(lt_schedule_lr(&s, 7), 0.25, "step 7");

  /* invalid */
  s.step_size = 0;
  ck_assert(isnan(lt_schedule_lr(&s, 1)));
  LT_EXPECT_ERR(lt_last_status(), LT_ERR_INVALID, "step_size");
  s = (lt_schedule){.kind = LT_SCHED_NOAM, .d_model = 0, .warmup = 10};
  ck_assert(isnan(lt_schedule_lr(&s, 1)));
  LT_EXPECT_ERR(lt_last_status(), LT_ERR_INVALID, "d_model");
  s = (lt_schedule){.kind = (lt_schedule_kind)42};
  ck_assert(isnan(lt_schedule_lr(&s, 1)));
  LT_EXPECT_ERR(lt_last_status(), LT_ERR_INVALID, "unknown schedule");
  s = (lt_schedule){.kind = LT_SCHED_WARMUP_LINEAR, .warmup = -1};
  ck_assert(isnan(lt_schedule_lr(&s, 1)));
  LT_EXPECT_ERR(lt_last_status(), LT_ERR_INVALID, "warmup");
  ck_assert(isnan(lt_schedule_lr(NULL, 1)));
  LT_EXPECT_ERR(lt_last_status(), LT_ERR_NULL, NULL);
}
END_TEST

/* ======================================================================== */
/* Clipping                                                                 */
/* ======================================================================== */

static lt_params *clip_store(lt_tensor **a, lt_tensor **b, lt_tensor **c) {
  lt_params *p = lt_params_new();
  *a = LT_NN(lt_zeros(LT_DTYPE_F64, LT_SHAPE(2)));
  *b = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(2, 1)));
  *c = LT_NN(lt_zeros(LT_DTYPE_F64, LT_SHAPE(3)));
  LT_OK_OR_FAIL(lt_params_add(p, "a", *a, 0));
  LT_OK_OR_FAIL(lt_params_add(p, "b", *b, LT_PARAM_NO_DECAY));
  LT_OK_OR_FAIL(lt_params_add(p, "c", *c, 0)); /* never gets a grad */
  (*a)->grad = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(2), (double[]){3, -4}));
  (*b)->grad = LT_NN(lt_tensor_from_copy(LT_DTYPE_F32, LT_SHAPE(2, 1), (float[]){12, 0}));
  return p;
}

START_TEST(test_clip_norm) {
  lt_tensor *a, *b, *c;
  lt_params *p = clip_store(&a, &b, &c);
  double norm = 0;
  /* total norm sqrt(9 + 16 + 144) = 13 */
  LT_OK_OR_FAIL(lt_clip_grad_norm(p, 100, &norm));
  close_to(norm, 13, "norm");
  LT_ASSERT_VALUES(a->grad, 0, 3, -4);
  LT_OK_OR_FAIL(lt_clip_grad_norm(p, 6.5, &norm));
  close_to(norm, 13, "norm 2");
  double coef = 6.5 / (13 + 1e-6);
  LT_ASSERT_VALUES(a->grad, 1e-15, 3 * coef, -4 * coef);
  LT_ASSERT_VALUES(b->grad, 1e-6, 12 * coef, 0);
  ck_assert(c->grad == NULL);
  LT_OK_OR_FAIL(lt_clip_grad_norm(p, 1, NULL)); /* NULL total_norm is allowed */
  LT_OK_OR_FAIL(lt_clip_grad_norm(p, 0, &norm)); /* zeroes */
  LT_ASSERT_VALUES(a->grad, 0, 0, 0);
  /* non-finite: grads untouched, norm reported, LT_ERR_NUMERIC */
  lt_zero_grad(a);
  a->grad = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(2), (double[]){INFINITY, 1}));
  norm = 0;
  LT_EXPECT_ERR(lt_clip_grad_norm(p, 1, &norm), LT_ERR_NUMERIC, "inf");
  ck_assert(isinf(norm));
  LT_ASSERT_VALUES(a->grad, 0, INFINITY, 1);
  lt_zero_grad(a);
  a->grad = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(2), (double[]){NAN, 1}));
  LT_EXPECT_ERR(lt_clip_grad_norm(p, 1, &norm), LT_ERR_NUMERIC, "nan");
  ck_assert(isnan(norm));
  /* no grads at all: norm 0 */
  lt_params_zero_grad(p);
  LT_OK_OR_FAIL(lt_clip_grad_norm(p, 1, &norm));
  ck_assert(norm == 0);
  LT_EXPECT_ERR(lt_clip_grad_norm(p, -1, &norm), LT_ERR_INVALID, "max_norm");
  LT_EXPECT_ERR(lt_clip_grad_norm(p, NAN, &norm), LT_ERR_INVALID, "max_norm");
  LT_EXPECT_ERR(lt_clip_grad_norm(NULL, 1, &norm), LT_ERR_NULL, NULL);
  lt_params_free(p);
}
END_TEST

/* A big, non-contiguous gradient: the norm matches a plain double sum and
 * does not depend on the thread count. */
START_TEST(test_clip_norm_big) {
  const int64_t R = 300, C = 401;
  double norms[2];
  for (int run = 0; run < 2; run++) {
    LT_OK_OR_FAIL(lt_set_num_threads(run + 1));
    lt_params *p = lt_params_new();
    lt_tensor *w = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(C, R)));
    LT_OK_OR_FAIL(lt_params_add(p, "w", w, 0));
    lt_tensor *g = LT_NN(lt_empty(LT_DTYPE_F32, LT_SHAPE(R, C)));
    float *gd = g->data;
    double want = 0;
    for (int64_t i = 0; i < R * C; i++) {
      gd[i] = (float)sin((double)i);
      want += (double)gd[i] * gd[i];
    }
    w->grad = LT_NN(lt_transpose(g, 0, 1));
    lt_tensor_free(g);
    LT_OK_OR_FAIL(lt_clip_grad_norm(p, 1.0, &norms[run]));
    ck_assert_msg(fabs(norms[run] - sqrt(want)) < 1e-9 * sqrt(want), "%.17g vs %.17g", norms[run], sqrt(want));
    double after = 0;
    LT_OK_OR_FAIL(lt_clip_grad_norm(p, 1e9, &after));
    ck_assert_msg(fabs(after - 1.0) < 1e-5, "after clipping the norm is %.9g", after);
    lt_params_free(p);
  }
  ck_assert(norms[0] == norms[1]);
}
END_TEST

START_TEST(test_clip_value) {
  lt_tensor *a, *b, *c;
  lt_params *p = clip_store(&a, &b, &c);
  LT_OK_OR_FAIL(lt_clip_grad_value(p, 3.5));
  LT_ASSERT_VALUES(a->grad, 0, 3, -3.5);
  LT_ASSERT_VALUES(b->grad, 0, 3.5, 0);
  ck_assert(c->grad == NULL);
  LT_EXPECT_ERR(lt_clip_grad_value(p, -1), LT_ERR_INVALID, "clip_value");
  LT_EXPECT_ERR(lt_clip_grad_value(NULL, 1), LT_ERR_NULL, NULL);
  lt_params_free(p);
}
END_TEST

/* One name table per enum, round-tripping; old checkpoint spellings parse. */
START_TEST(test_kind_names) {
  for (int k = LT_OPTIM_SGD; k <= LT_OPTIM_ADAMW; k++) {
    lt_optim_kind v = (lt_optim_kind)-1;
    LT_OK_OR_FAIL(lt_optim_kind_parse(lt_optim_kind_name((lt_optim_kind)k), &v));
    ck_assert_int_eq(v, k);
  }
  ck_assert_str_eq(lt_optim_kind_name(LT_OPTIM_ADAMW), "adamw");
  ck_assert_str_eq(lt_optim_kind_name((lt_optim_kind)7), "unknown");
  for (int k = LT_SCHED_CONSTANT; k <= LT_SCHED_STEP; k++) {
    lt_schedule_kind v = (lt_schedule_kind)-1;
    LT_OK_OR_FAIL(lt_schedule_kind_parse(lt_schedule_kind_name((lt_schedule_kind)k), &v));
    ck_assert_int_eq(v, k);
  }
  ck_assert_str_eq(lt_schedule_kind_name(LT_SCHED_WARMUP_LINEAR), "linear");
  ck_assert_str_eq(lt_schedule_kind_name(LT_SCHED_WARMUP_COSINE), "cosine");
  lt_schedule_kind sk = LT_SCHED_CONSTANT;
  LT_OK_OR_FAIL(lt_schedule_kind_parse("warmup_linear", &sk));
  ck_assert_int_eq(sk, LT_SCHED_WARMUP_LINEAR);
  LT_OK_OR_FAIL(lt_schedule_kind_parse("warmup_cosine", &sk));
  ck_assert_int_eq(sk, LT_SCHED_WARMUP_COSINE);
  LT_EXPECT_ERR(lt_schedule_kind_parse("exp", &sk), LT_ERR_INVALID,
                "unknown schedule 'exp' (one of: constant, linear, cosine, noam, step)");
  ck_assert_int_eq(sk, LT_SCHED_WARMUP_COSINE); /* untouched */
  LT_EXPECT_ERR(lt_optim_kind_parse(NULL, &(lt_optim_kind){0}), LT_ERR_NULL, "NULL");
  LT_EXPECT_ERR(lt_optim_kind_parse("lamb", &(lt_optim_kind){0}), LT_ERR_INVALID, "sgd, adam, adamw");
  lt_clear_error();
}
END_TEST

int main(void) {
  Suite *s = suite_create("optim");
  TCase *tc = tcase_create("optim");
  tcase_add_test(tc, test_kind_names);
  tcase_add_test(tc, test_sgd_plain);
  tcase_add_test(tc, test_sgd_weight_decay);
  tcase_add_test(tc, test_sgd_momentum);
  tcase_add_test(tc, test_sgd_nesterov);
  tcase_add_test(tc, test_sgd_decay_all);
  tcase_add_test(tc, test_adam);
  tcase_add_test(tc, test_adamw);
  tcase_add_test(tc, test_f32);
  tcase_add_test(tc, test_defaults);
  tcase_add_test(tc, test_big_threads);
  tcase_add_test(tc, test_resume);
  tcase_add_test(tc, test_skip_resume_pytorch);
  tcase_add_test(tc, test_step_inside_scope);
  tcase_add_test(tc, test_optim_errors);
  tcase_add_test(tc, test_schedules);
  tcase_add_test(tc, test_clip_norm);
  tcase_add_test(tc, test_clip_norm_big);
  tcase_add_test(tc, test_clip_value);
  suite_add_tcase(s, tc);
  return lt_test_run(s);
}
