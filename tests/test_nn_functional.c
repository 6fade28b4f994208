/*
 * tests/test_nn_functional.c: the fused functional nn ops of nn/nn.h
 * (nn/linear.c, nn/norm.c, nn/dropout.c, nn/loss.c): lt_linear,
 * lt_layer_norm, lt_rms_norm, lt_dropout, lt_cross_entropy, lt_nll_loss and
 * lt_mse_loss.
 *
 * Hand-computed values on tiny cases; every fused op against the naive
 * composition of tensor ops it replaces (lt_matmul, lt_mean, lt_var,
 * lt_log_softmax, lt_gather, ...) on random f32/f64 inputs in several layouts
 * (contiguous, transposed, sliced, expanded), forward values and the
 * gradients of every input through lt_backward on both (the f32 backwards
 * included); zero-size and edge cases. The per-op checks (values against an
 * f64 reference over layouts and dtypes, 1 vs 2 threads, error cases and
 * gradchecks) are the runner's: tests/opinfo_nn.inc.
 * With LT_BENCH set, timings: lt_linear against matmul + add, and
 * cross-entropy forward/backward at N = 2048, V = 8192 against the
 * composition. Gradchecks live in tests/gradcases_nn.inc.
 */
#include "test_util.h"
#include "util_layout.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nn/nn.h"
#include "checkpoint/checkpoint.h"
#include <unistd.h>

/* ======================================================================== */
/* Helpers                                                                  */
/* ======================================================================== */

static lt_generator *gen(uint64_t seed) { return lt_generator_new(seed); }

/* Random normal tensor of dtype (drawn in f64 and cast, so f32 and f64 cases
 * see the same values). */
static lt_tensor *rnd(lt_generator *g, lt_dtype dt, int ndim, const int64_t *shape) {
  return lt_test_as_dtype(LT_NN(lt_randn(g, LT_DTYPE_F64, ndim, shape)), dt);
}

/* Layouts of an input made from a contiguous base leaf:
 *   L_PLAIN the base itself;  L_TR lt_transpose(base, 0, -1);
 *   L_SLICE every other entry along dim 0;  L_EXPAND base dim 0 (size 1) expanded to 3. */
enum { L_PLAIN, L_TR, L_SLICE, L_EXPAND };

/* The base shape that gives logical shape `shape` under layout how. */
static void base_shape(int how, int ndim, const int64_t *shape, int64_t *out) {
  if (ndim > 0) memcpy(out, shape, sizeof(int64_t) * (size_t)ndim);
  if (how == L_TR && ndim >= 2) {
    out[0] = shape[ndim - 1];
    out[ndim - 1] = shape[0];
  } else if (how == L_SLICE && ndim >= 1) {
    out[0] = 2 * shape[0];
  } else if (how == L_EXPAND && ndim >= 1) {
    out[0] = 1;
  }
}

static lt_tensor *apply_layout(lt_tensor *base, int how, int ndim, const int64_t *shape) {
  switch (how) {
    case L_TR: return base->ndim >= 2 ? LT_NN(lt_transpose(base, 0, -1)) : lt_tensor_retain(base);
    case L_SLICE: return LT_NN(lt_slice(base, 0, 0, base->shape[0], 2));
    case L_EXPAND: return LT_NN(lt_expand(base, ndim, shape));
    default: return lt_tensor_retain(base);
  }
}

/* One input of a comparison: its logical shape, layout, and whether it is
 * differentiable (else it is passed as given, e.g. integer targets). */
typedef struct arg {
  int ndim;
  int64_t shape[LT_MAX_DIMS];
  int how;
  bool grad;
  lt_tensor *fixed; /* non-NULL: passed as is (targets); not freed here */
} arg;

typedef lt_tensor *(*op_fn)(lt_tensor *const *in, const void *ctx);

/* Runs f on fresh leaves (copies of base[i]) under their layouts, back-
 * propagates gout (same random values for both callers: drawn from a
 * generator seeded by out's shape), and stores the output and the leaves'
 * gradients (new; NULL where no grad). */
static void run_op(op_fn f, const void *ctx, int n, const arg *a, lt_tensor *const *base, lt_tensor **out,
                   lt_tensor **grads) {
  lt_tensor *leaf[8] = {0}, *in[8] = {0};
  for (int i = 0; i < n; i++) {
    if (a[i].fixed) {
      in[i] = lt_tensor_retain(a[i].fixed);
      continue;
    }
    leaf[i] = LT_NN(lt_clone(base[i]));
    if (a[i].grad) LT_OK_OR_FAIL(lt_requires_grad_(leaf[i], true));
    in[i] = apply_layout(leaf[i], a[i].how, a[i].ndim, a[i].shape);
  }
  lt_tensor *y = LT_NN(f(in, ctx));
  lt_generator *g = gen(777 + (uint64_t)y->numel);
  lt_tensor *go = rnd(g, y->dtype, y->ndim, y->shape);
  lt_generator_free(g);
  if (y->requires_grad) LT_OK_OR_FAIL(lt_backward(y, go, false));
  lt_tensor_free(go);
  for (int i = 0; i < n; i++) {
    grads[i] = NULL;
    if (leaf[i] && leaf[i]->grad) grads[i] = LT_NN(lt_clone(leaf[i]->grad));
    lt_tensor_free(in[i]);
    lt_tensor_free(leaf[i]);
  }
  *out = LT_NN(lt_detach(y));
  lt_tensor_free(y);
}

/* Random base leaves (seeded) for the args of an op; NULL for fixed args. */
static void make_bases(int n, const arg *a, lt_dtype dt, uint64_t seed, lt_tensor **base) {
  lt_generator *g = gen(seed);
  for (int i = 0; i < n; i++) {
    base[i] = NULL;
    if (a[i].fixed) continue;
    int64_t bs[LT_MAX_DIMS];
    base_shape(a[i].how, a[i].ndim, a[i].shape, bs);
    base[i] = rnd(g, dt, a[i].ndim, bs);
  }
  lt_generator_free(g);
}

/* Fused op against its naive composition: forward values and gradients. */
static void compare(const char *what, op_fn fused, op_fn naive, const void *ctx, int n, const arg *a, lt_dtype dt,
                    uint64_t seed) {
  lt_tensor *base[8];
  make_bases(n, a, dt, seed, base);
  lt_tensor *yf, *yn, *gf[8], *gn[8];
  run_op(fused, ctx, n, a, base, &yf, gf);
  run_op(naive, ctx, n, a, base, &yn, gn);
  const double rtol = dt == LT_DTYPE_F64 ? 1e-9 : 2e-4, atol = dt == LT_DTYPE_F64 ? 1e-11 : 2e-5;
  if (!lt_allclose(yf, yn, rtol, atol, false)) printf("%s (%s): output differs\n", what, lt_dtype_name(dt));
  LT_ASSERT_CLOSE(yf, yn, rtol, atol);
  for (int i = 0; i < n; i++) {
    if (!a[i].grad || a[i].fixed) continue;
    ck_assert_msg(gf[i] && gn[i], "%s: input %d has no gradient (fused %p, naive %p)", what, i, (void *)gf[i],
                  (void *)gn[i]);
    if (!lt_allclose(gf[i], gn[i], rtol, atol, false))
      printf("%s (%s): gradient of input %d differs\n", what, lt_dtype_name(dt), i);
    LT_ASSERT_CLOSE(gf[i], gn[i], rtol, atol);
  }
  for (int i = 0; i < n; i++) {
    lt_tensor_free(base[i]);
    lt_tensor_free(gf[i]);
    lt_tensor_free(gn[i]);
  }
  lt_tensor_free(yf);
  lt_tensor_free(yn);
}

static arg A(int how, bool grad, int ndim, const int64_t *shape) {
  arg a = {.ndim = ndim, .how = how, .grad = grad};
  if (ndim > 0) memcpy(a.shape, shape, sizeof(int64_t) * (size_t)ndim);
  return a;
}
static arg FIXED(lt_tensor *t) { return (arg){.fixed = t}; }

/* ======================================================================== */
/* Naive compositions (the references)                                      */
/* ======================================================================== */

/* Frees a and b (intermediates of a composition) and returns r. */
static lt_tensor *fr(lt_tensor *r, lt_tensor *a, lt_tensor *b) {
  lt_tensor_free(a);
  lt_tensor_free(b);
  return r;
}

static lt_tensor *linear_fused(lt_tensor *const *in, const void *ctx) {
  const bool bias = *(const bool *)ctx;
  return lt_linear(in[0], in[1], bias ? in[2] : NULL);
}
static lt_tensor *linear_naive(lt_tensor *const *in, const void *ctx) {
  const bool bias = *(const bool *)ctx;
  lt_tensor *wt = lt_transpose(in[1], 0, 1), *y = lt_matmul(in[0], wt);
  if (!bias) return fr(y, wt, NULL);
  return fr(lt_add(y, in[2]), wt, y);
}

typedef struct norm_ctx {
  bool w, b;
  double eps;
} norm_ctx;

static lt_tensor *ln_fused(lt_tensor *const *in, const void *ctx) {
  const norm_ctx *c = ctx;
  return lt_layer_norm(in[0], c->w ? in[1] : NULL, c->b ? in[c->w ? 2 : 1] : NULL, c->eps);
}
static lt_tensor *ln_naive(lt_tensor *const *in, const void *ctx) {
  const norm_ctx *c = ctx;
  lt_tensor *x = in[0];
  lt_tensor *m = lt_mean(x, LT_DIMS(-1), true), *v = lt_var(x, LT_DIMS(-1), false, true);
  lt_tensor *ve = fr(lt_add_scalar(v, c->eps), v, NULL), *r = fr(lt_rsqrt(ve), ve, NULL);
  lt_tensor *d = fr(lt_sub(x, m), m, NULL), *y = fr(lt_mul(d, r), d, r);
  if (c->w) y = fr(lt_mul(y, in[1]), y, NULL);
  if (c->b) y = fr(lt_add(y, in[c->w ? 2 : 1]), y, NULL);
  return y;
}

static lt_tensor *rms_fused(lt_tensor *const *in, const void *ctx) {
  const norm_ctx *c = ctx;
  return lt_rms_norm(in[0], c->w ? in[1] : NULL, c->eps);
}
static lt_tensor *rms_naive(lt_tensor *const *in, const void *ctx) {
  const norm_ctx *c = ctx;
  lt_tensor *sq = lt_square(in[0]), *ms = fr(lt_mean(sq, LT_DIMS(-1), true), sq, NULL);
  lt_tensor *me = fr(lt_add_scalar(ms, c->eps), ms, NULL), *r = fr(lt_rsqrt(me), me, NULL);
  lt_tensor *y = fr(lt_mul(in[0], r), r, NULL);
  if (c->w) y = fr(lt_mul(y, in[1]), y, NULL);
  return y;
}

typedef struct ce_ctx {
  lt_cross_entropy_opts o;
  lt_tensor *safe;  /* targets with ignored entries replaced by 0, i64, shape [..., 1] */
  lt_tensor *valid; /* 1.0 where counted, 0.0 where ignored, dtype of logits, shape [...] */
  int64_t count;
} ce_ctx;

static lt_tensor *ce_fused(lt_tensor *const *in, const void *ctx) {
  return lt_cross_entropy(in[0], in[1], &((const ce_ctx *)ctx)->o);
}
static lt_tensor *nll_fused(lt_tensor *const *in, const void *ctx) {
  return lt_nll_loss(in[0], in[1], &((const ce_ctx *)ctx)->o);
}

/* loss_i = ((1 - eps) nll_i + eps * mean_c(-logp)) * valid_i, reduced. */
static lt_tensor *ce_reduce(const ce_ctx *c, lt_tensor *rows) {
  lt_tensor *l = fr(lt_mul(rows, c->valid), rows, NULL);
  if (c->o.reduction == LT_REDUCTION_NONE) return l;
  lt_tensor *s = fr(lt_sum(l, 0, NULL, false), l, NULL);
  if (c->o.reduction == LT_REDUCTION_SUM) return s;
  return fr(lt_mul_scalar(s, c->count ? 1.0 / (double)c->count : 0.0), s, NULL);
}
static lt_tensor *nll_rows(const ce_ctx *c, lt_tensor *logp) {
  lt_tensor *gth = lt_gather(logp, -1, c->safe), *sq = fr(lt_squeeze(gth, -1), gth, NULL);
  return fr(lt_neg(sq), sq, NULL);
}
static lt_tensor *ce_naive(lt_tensor *const *in, const void *ctx) {
  const ce_ctx *c = ctx;
  const double eps = c->o.label_smoothing;
  lt_tensor *logp = lt_log_softmax(in[0], -1);
  lt_tensor *nll = nll_rows(c, logp);
  lt_tensor *rows = fr(lt_mul_scalar(nll, 1 - eps), nll, NULL);
  if (eps > 0) {
    lt_tensor *mn = lt_mean(logp, LT_DIMS(-1), false), *sm = fr(lt_mul_scalar(mn, -eps), mn, NULL);
    rows = fr(lt_add(rows, sm), rows, sm);
  }
  lt_tensor_free(logp);
  return ce_reduce(c, rows);
}
static lt_tensor *nll_naive(lt_tensor *const *in, const void *ctx) {
  const ce_ctx *c = ctx;
  return ce_reduce(c, nll_rows(c, in[0]));
}

/* Random targets in [0, V) with about a quarter ignored; fills c. Returns the targets (new). */
static lt_tensor *make_targets(lt_generator *g, lt_dtype tdt, lt_dtype xdt, int ndim, const int64_t *shape,
                               int64_t V, lt_cross_entropy_opts o, bool ignore_some, ce_ctx *c) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  int64_t *t = malloc(sizeof(int64_t) * (size_t)(n + 1)), *s = malloc(sizeof(int64_t) * (size_t)(n + 1));
  double *v = malloc(sizeof(double) * (size_t)(n + 1));
  lt_tensor *u = LT_NN(lt_rand(g, LT_DTYPE_F64, 1, (int64_t[]){2 * n + 1}));
  double *uv = malloc(sizeof(double) * (size_t)(2 * n + 1));
  LT_OK_OR_FAIL(lt_tensor_read(u, LT_DTYPE_F64, uv, 2 * n + 1));
  lt_tensor_free(u);
  c->o = o;
  c->count = 0;
  for (int64_t i = 0; i < n; i++) {
    t[i] = ignore_some && uv[2 * i] < 0.25 ? o.ignore_index : (int64_t)(uv[2 * i + 1] * (double)V);
    const bool ign = t[i] == o.ignore_index; /* a random target may equal ignore_index too */
    s[i] = ign ? 0 : t[i];
    v[i] = ign ? 0.0 : 1.0;
    c->count += !ign;
  }
  free(uv);
  int64_t sh1[LT_MAX_DIMS];
  memcpy(sh1, shape, sizeof(int64_t) * (size_t)ndim);
  sh1[ndim] = 1;
  c->safe = lt_test_from_i64(LT_DTYPE_I64, ndim + 1, sh1, s);
  c->valid = lt_test_from_f64(xdt, ndim, shape, v);
  lt_tensor *tt = lt_test_from_i64(tdt, ndim, shape, t);
  free(t);
  free(s);
  free(v);
  return tt;
}
static void ce_ctx_free(ce_ctx *c) {
  lt_tensor_free(c->safe);
  lt_tensor_free(c->valid);
}

static lt_tensor *mse_fused(lt_tensor *const *in, const void *ctx) {
  return lt_mse_loss(in[0], in[1], *(const lt_reduction *)ctx);
}
static lt_tensor *mse_naive(lt_tensor *const *in, const void *ctx) {
  const lt_reduction r = *(const lt_reduction *)ctx;
  lt_tensor *d = lt_sub(in[0], in[1]), *sq = fr(lt_square(d), d, NULL);
  if (r == LT_REDUCTION_NONE) return sq;
  if (r == LT_REDUCTION_SUM) return fr(lt_sum(sq, 0, NULL, false), sq, NULL);
  return fr(lt_mean(sq, 0, NULL, false), sq, NULL);
}

/* ======================================================================== */
/* linear                                                                   */
/* ======================================================================== */

START_TEST(test_linear_hand) {
  lt_tensor *x = lt_test_from_f64(LT_DTYPE_F32, LT_SHAPE(2, 2), (double[]){1, 2, 3, 4});
  lt_tensor *w = lt_test_from_f64(LT_DTYPE_F32, LT_SHAPE(3, 2), (double[]){1, 0, 0, 1, 1, 1});
  lt_tensor *b = lt_test_from_f64(LT_DTYPE_F32, LT_SHAPE(3), (double[]){0.5, -0.5, 1});
  LT_OK_OR_FAIL(lt_requires_grad_(x, true));
  LT_OK_OR_FAIL(lt_requires_grad_(w, true));
  LT_OK_OR_FAIL(lt_requires_grad_(b, true));
  lt_tensor *y = LT_NN(lt_linear(x, w, b));
  LT_ASSERT_SHAPE(y, 2, 3);
  LT_ASSERT_VALUES(y, 1e-6, 1.5, 1.5, 4, 3.5, 3.5, 8);
  lt_tensor *yn = LT_NN(lt_linear(x, w, NULL));
  LT_ASSERT_VALUES(yn, 1e-6, 1, 2, 3, 3, 4, 7);
  /* L = sum(y * g), g = [[1,2,3],[4,5,6]]: dx = g W, dW = g^T x, db = colsum g */
  lt_tensor *g = lt_test_from_f64(LT_DTYPE_F32, LT_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6});
  LT_OK_OR_FAIL(lt_backward(y, g, false));
  LT_ASSERT_VALUES(x->grad, 1e-6, 4, 5, 10, 11);
  LT_ASSERT_VALUES(w->grad, 1e-6, 13, 18, 17, 24, 21, 30);
  LT_ASSERT_VALUES(b->grad, 1e-6, 5, 7, 9);
  LT_FREE_ALL(x, w, b, y, yn, g);
}
END_TEST

START_TEST(test_linear_vs_matmul) {
  const lt_dtype dts[2] = {LT_DTYPE_F32, LT_DTYPE_F64};
  for (int k = 0; k < 2; k++) {
    const lt_dtype dt = dts[k];
    const bool yes = true, no = false;
    /* plain 2-d, with and without bias */
    arg a1[3] = {A(L_PLAIN, true, LT_SHAPE(7, 5)), A(L_PLAIN, true, LT_SHAPE(4, 5)), A(L_PLAIN, true, LT_SHAPE(4))};
    compare("linear 2-d", linear_fused, linear_naive, &yes, 3, a1, dt, 1);
    compare("linear 2-d no bias", linear_fused, linear_naive, &no, 2, a1, dt, 2);
    /* leading batch dims; transposed x (flattenable) and transposed weight */
    arg a2[3] = {A(L_PLAIN, true, LT_SHAPE(2, 3, 6)), A(L_TR, true, LT_SHAPE(5, 6)), A(L_PLAIN, true, LT_SHAPE(5))};
    compare("linear batch, W^T view", linear_fused, linear_naive, &yes, 3, a2, dt, 3);
    arg a3[3] = {A(L_TR, true, LT_SHAPE(9, 6)), A(L_PLAIN, true, LT_SHAPE(5, 6)), A(L_SLICE, true, LT_SHAPE(5))};
    compare("linear transposed x, sliced bias", linear_fused, linear_naive, &yes, 3, a3, dt, 4);
    /* not flattenable: transposed 3-d, expanded batch, sliced rows of a 3-d */
    arg a4[3] = {A(L_TR, true, LT_SHAPE(4, 3, 4)), A(L_PLAIN, true, LT_SHAPE(2, 4)), A(L_PLAIN, true, LT_SHAPE(2))};
    compare("linear permuted batch", linear_fused, linear_naive, &yes, 3, a4, dt, 5);
    arg a5[3] = {A(L_EXPAND, true, LT_SHAPE(3, 4, 5)), A(L_PLAIN, true, LT_SHAPE(6, 5)),
                 A(L_PLAIN, true, LT_SHAPE(6))};
    compare("linear expanded batch", linear_fused, linear_naive, &yes, 3, a5, dt, 6);
    arg a6[3] = {A(L_SLICE, true, LT_SHAPE(3, 2, 5)), A(L_EXPAND, true, LT_SHAPE(4, 5)),
                 A(L_PLAIN, true, LT_SHAPE(4))};
    compare("linear sliced batch, expanded weight", linear_fused, linear_naive, &yes, 3, a6, dt, 7);
    /* 1-d x; size-1 dims; large enough for BLIS threads */
    arg a7[3] = {A(L_PLAIN, true, LT_SHAPE(5)), A(L_PLAIN, true, LT_SHAPE(3, 5)), A(L_PLAIN, true, LT_SHAPE(3))};
    compare("linear 1-d", linear_fused, linear_naive, &yes, 3, a7, dt, 8);
    arg a8[3] = {A(L_PLAIN, true, LT_SHAPE(1, 1, 5)), A(L_PLAIN, true, LT_SHAPE(1, 5)),
                 A(L_PLAIN, true, LT_SHAPE(1))};
    compare("linear size 1", linear_fused, linear_naive, &yes, 3, a8, dt, 9);
    arg a9[3] = {A(L_PLAIN, true, LT_SHAPE(4, 65, 96)), A(L_PLAIN, true, LT_SHAPE(130, 96)),
                 A(L_PLAIN, true, LT_SHAPE(130))};
    compare("linear big", linear_fused, linear_naive, &yes, 3, a9, dt, 10);
    /* x without grad: only dW and db */
    arg a10[3] = {A(L_PLAIN, false, LT_SHAPE(6, 5)), A(L_PLAIN, true, LT_SHAPE(4, 5)),
                  A(L_PLAIN, true, LT_SHAPE(4))};
    compare("linear x no grad", linear_fused, linear_naive, &yes, 3, a10, dt, 11);
  }
}
END_TEST

START_TEST(test_linear_zero_size) {
  lt_generator *g = gen(5);
  /* in == 0: y = bias (or zeros); dW is [out, 0]; db = colsum g */
  lt_tensor *x = LT_NN(lt_zeros(LT_DTYPE_F64, LT_SHAPE(3, 0)));
  lt_tensor *w = LT_NN(lt_zeros(LT_DTYPE_F64, LT_SHAPE(2, 0)));
  lt_tensor *b = lt_test_from_f64(LT_DTYPE_F64, LT_SHAPE(2), (double[]){1, 2});
  LT_OK_OR_FAIL(lt_requires_grad_(x, true));
  LT_OK_OR_FAIL(lt_requires_grad_(b, true));
  lt_tensor *y = LT_NN(lt_linear(x, w, b));
  LT_ASSERT_VALUES(y, 0, 1, 2, 1, 2, 1, 2);
  lt_tensor *y0 = LT_NN(lt_linear(x, w, NULL));
  LT_ASSERT_VALUES(y0, 0, 0, 0, 0, 0, 0, 0);
  lt_tensor *s = LT_NN(lt_sum(y, 0, NULL, false));
  LT_OK_OR_FAIL(lt_backward(s, NULL, false));
  LT_ASSERT_SHAPE(x->grad, 3, 0);
  LT_ASSERT_VALUES(b->grad, 0, 3, 3);
  /* no rows: y [0, out]; dW = 0, db = 0 */
  lt_tensor *x2 = LT_NN(lt_zeros(LT_DTYPE_F64, LT_SHAPE(0, 4)));
  lt_tensor *w2 = rnd(g, LT_DTYPE_F64, LT_SHAPE(3, 4));
  lt_tensor *b2 = rnd(g, LT_DTYPE_F64, LT_SHAPE(3));
  LT_OK_OR_FAIL(lt_requires_grad_(w2, true));
  LT_OK_OR_FAIL(lt_requires_grad_(b2, true));
  lt_tensor *y2 = LT_NN(lt_linear(x2, w2, b2));
  LT_ASSERT_SHAPE(y2, 0, 3);
  lt_tensor *s2 = LT_NN(lt_sum(y2, 0, NULL, false));
  LT_OK_OR_FAIL(lt_backward(s2, NULL, false));
  LT_ASSERT_VALUES(w2->grad, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  LT_ASSERT_VALUES(b2->grad, 0, 0, 0, 0);
  /* out == 0 */
  lt_tensor *w3 = LT_NN(lt_zeros(LT_DTYPE_F64, LT_SHAPE(0, 4)));
  lt_tensor *x3 = rnd(g, LT_DTYPE_F64, LT_SHAPE(2, 4));
  LT_OK_OR_FAIL(lt_requires_grad_(x3, true));
  lt_tensor *y3 = LT_NN(lt_linear(x3, w3, NULL));
  LT_ASSERT_SHAPE(y3, 2, 0);
  lt_tensor *s3 = LT_NN(lt_sum(y3, 0, NULL, false));
  LT_OK_OR_FAIL(lt_backward(s3, NULL, false));
  LT_ASSERT_VALUES(x3->grad, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  LT_FREE_ALL(x, w, b, y, y0, s, x2, w2, b2, y2, s2, w3, x3, y3, s3);
  lt_generator_free(g);
}
END_TEST

/* ======================================================================== */
/* layer_norm, rms_norm                                                     */
/* ======================================================================== */

START_TEST(test_norm_hand) {
  lt_tensor *x = lt_test_from_f64(LT_DTYPE_F64, LT_SHAPE(3), (double[]){1, 2, 3});
  lt_tensor *w = lt_test_from_f64(LT_DTYPE_F64, LT_SHAPE(3), (double[]){1, 2, 3});
  lt_tensor *b = lt_test_from_f64(LT_DTYPE_F64, LT_SHAPE(3), (double[]){0, 0, 1});
  const double r = sqrt(1.5); /* var = 2/3 (biased), rstd = sqrt(3/2) */
  lt_tensor *y = LT_NN(lt_layer_norm(x, NULL, NULL, 0.0));
  LT_ASSERT_VALUES(y, 1e-12, -r, 0, r);
  lt_tensor *ya = LT_NN(lt_layer_norm(x, w, b, 0.0));
  LT_ASSERT_VALUES(ya, 1e-12, -r, 0, 3 * r + 1);
  lt_tensor *ye = LT_NN(lt_layer_norm(x, NULL, NULL, 1.0 / 3.0)); /* rstd = 1 */
  LT_ASSERT_VALUES(ye, 1e-12, -1, 0, 1);
  lt_tensor *x2 = lt_test_from_f64(LT_DTYPE_F32, LT_SHAPE(1, 2), (double[]){3, 4});
  lt_tensor *yr = LT_NN(lt_rms_norm(x2, NULL, 0.0)); /* mean(x^2) = 12.5 */
  LT_ASSERT_VALUES(yr, 1e-6, 3 / sqrt(12.5), 4 / sqrt(12.5));
  /* constant row: var 0, y = 0 * rstd = 0 (finite with eps > 0) */
  lt_tensor *c = LT_NN(lt_full(LT_DTYPE_F32, LT_SHAPE(2, 4), 7.0));
  lt_tensor *yc = LT_NN(lt_layer_norm(c, NULL, NULL, 1e-5));
  LT_ASSERT_VALUES(yc, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  /* f32 rows with a large mean: the variance is computed in double in two passes */
  lt_tensor *big = lt_test_from_f64(LT_DTYPE_F32, LT_SHAPE(4), (double[]){10000, 10001, 10002, 10003});
  lt_tensor *yb = LT_NN(lt_layer_norm(big, NULL, NULL, 0.0));
  const double s = 1 / sqrt(1.25);
  LT_ASSERT_VALUES(yb, 1e-5, -1.5 * s, -0.5 * s, 0.5 * s, 1.5 * s);
  LT_FREE_ALL(x, w, b, y, ya, ye, x2, yr, c, yc, big, yb);
}
END_TEST

START_TEST(test_norms_vs_naive) {
  const lt_dtype dts[2] = {LT_DTYPE_F32, LT_DTYPE_F64};
  for (int k = 0; k < 2; k++) {
    const lt_dtype dt = dts[k];
    const norm_ctx both = {true, true, 1e-5}, wonly = {true, false, 1e-5}, bonly = {false, true, 1e-3},
                   none = {false, false, 1e-5};
    arg a1[3] = {A(L_PLAIN, true, LT_SHAPE(6, 10)), A(L_PLAIN, true, LT_SHAPE(10)), A(L_PLAIN, true, LT_SHAPE(10))};
    compare("layer_norm affine", ln_fused, ln_naive, &both, 3, a1, dt, 20);
    compare("rms_norm", rms_fused, rms_naive, &wonly, 2, a1, dt, 21);
    arg a2[3] = {A(L_TR, true, LT_SHAPE(5, 2, 7)), A(L_SLICE, true, LT_SHAPE(7)), A(L_PLAIN, true, LT_SHAPE(7))};
    compare("layer_norm transposed x, sliced weight", ln_fused, ln_naive, &both, 3, a2, dt, 22);
    compare("rms_norm transposed", rms_fused, rms_naive, &wonly, 2, a2, dt, 23);
    arg a3[2] = {A(L_EXPAND, true, LT_SHAPE(3, 4, 9)), A(L_PLAIN, true, LT_SHAPE(9))};
    compare("layer_norm no affine expanded", ln_fused, ln_naive, &none, 1, a3, dt, 24);
    compare("layer_norm bias only", ln_fused, ln_naive, &bonly, 2, a3, dt, 25);
    compare("rms_norm no weight", rms_fused, rms_naive, &none, 1, a3, dt, 26);
    arg a4[3] = {A(L_PLAIN, true, LT_SHAPE(1, 13)), A(L_PLAIN, true, LT_SHAPE(13)), A(L_PLAIN, true, LT_SHAPE(13))};
    compare("layer_norm size-1 batch", ln_fused, ln_naive, &both, 3, a4, dt, 27);
    arg a5[3] = {A(L_PLAIN, true, LT_SHAPE(1)), A(L_PLAIN, true, LT_SHAPE(1)), A(L_PLAIN, true, LT_SHAPE(1))};
    compare("layer_norm C = 1", ln_fused, ln_naive, &both, 3, a5, dt, 28);
    /* enough rows for several threads and backward chunks */
    arg a6[3] = {A(L_PLAIN, true, LT_SHAPE(3, 150, 130)), A(L_PLAIN, true, LT_SHAPE(130)),
                 A(L_PLAIN, true, LT_SHAPE(130))};
    compare("layer_norm big", ln_fused, ln_naive, &both, 3, a6, dt, 29);
    compare("rms_norm big", rms_fused, rms_naive, &wonly, 2, a6, dt, 30);
    /* x without grad: dweight/dbias only; weights without grad: dx only */
    arg a7[3] = {A(L_PLAIN, false, LT_SHAPE(40, 12)), A(L_PLAIN, true, LT_SHAPE(12)),
                 A(L_PLAIN, true, LT_SHAPE(12))};
    compare("layer_norm x no grad", ln_fused, ln_naive, &both, 3, a7, dt, 31);
    arg a8[3] = {A(L_PLAIN, true, LT_SHAPE(40, 12)), A(L_PLAIN, false, LT_SHAPE(12)),
                 A(L_PLAIN, false, LT_SHAPE(12))};
    compare("layer_norm params no grad", ln_fused, ln_naive, &both, 3, a8, dt, 32);
    compare("rms_norm params no grad", rms_fused, rms_naive, &wonly, 2, a8, dt, 33);
  }
}
END_TEST

START_TEST(test_norm_zero_size) {
  lt_tensor *x = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(0, 5)));
  lt_tensor *w = LT_NN(lt_ones(LT_DTYPE_F32, LT_SHAPE(5)));
  lt_tensor *b = LT_NN(lt_ones(LT_DTYPE_F32, LT_SHAPE(5)));
  LT_OK_OR_FAIL(lt_requires_grad_(x, true));
  LT_OK_OR_FAIL(lt_requires_grad_(w, true));
  LT_OK_OR_FAIL(lt_requires_grad_(b, true));
  lt_tensor *y = LT_NN(lt_layer_norm(x, w, b, 1e-5));
  LT_ASSERT_SHAPE(y, 0, 5);
  lt_tensor *s = LT_NN(lt_sum(y, 0, NULL, false));
  LT_OK_OR_FAIL(lt_backward(s, NULL, false));
  LT_ASSERT_VALUES(w->grad, 0, 0, 0, 0, 0, 0);
  LT_ASSERT_VALUES(b->grad, 0, 0, 0, 0, 0, 0);
  lt_tensor *yr = LT_NN(lt_rms_norm(x, w, 1e-5));
  LT_ASSERT_SHAPE(yr, 0, 5);
  LT_FREE_ALL(x, w, b, y, s, yr);
}
END_TEST

/* ======================================================================== */
/* dropout                                                                  */
/* ======================================================================== */

START_TEST(test_dropout) {
  lt_generator *g = gen(42);
  lt_tensor *x = LT_NN(lt_ones(LT_DTYPE_F32, LT_SHAPE(40, 50)));
  LT_OK_OR_FAIL(lt_requires_grad_(x, true));
  /* eval: a new tensor viewing x; gradient passes through */
  const lt_nn_ctx eval = {false, g};
  lt_tensor *ye = LT_NN(lt_dropout(x, 0.5, &eval));
  ck_assert_ptr_ne(ye, x);
  ck_assert_ptr_eq(ye->data, x->data);
  lt_tensor *yn = LT_NN(lt_dropout(x, 0.5, NULL));
  ck_assert_ptr_eq(yn->data, x->data);
  lt_tensor *s = LT_NN(lt_sum(ye, 0, NULL, false));
  LT_OK_OR_FAIL(lt_backward(s, NULL, false));
  double gsum;
  lt_tensor *gs = LT_NN(lt_sum(x->grad, 0, NULL, false));
  LT_OK_OR_FAIL(lt_item(gs, &gsum));
  ck_assert(gsum == 2000);
  lt_zero_grad(x);
  const lt_generator_state st0 = lt_generator_get_state(g);

  /* training: the mask is lt_bernoulli(g, bool, shape, 1 - p); kept values scale by 1/(1-p) */
  const lt_nn_ctx train = {true, g};
  lt_tensor *y = LT_NN(lt_dropout(x, 0.25, &train));
  const lt_generator_state st1 = lt_generator_get_state(g);
  ck_assert(st1.offset > st0.offset);
  LT_OK_OR_FAIL(lt_generator_set_state(g, st0));
  lt_tensor *keep = LT_NN(lt_bernoulli(g, LT_DTYPE_BOOL, LT_SHAPE(40, 50), 0.75));
  ck_assert(lt_generator_get_state(g).offset == st1.offset);
  float *yv = malloc(sizeof(float) * 2000);
  uint8_t *kv = malloc(2000);
  LT_OK_OR_FAIL(lt_tensor_read(y, LT_DTYPE_F32, yv, 2000));
  LT_OK_OR_FAIL(lt_tensor_read(keep, LT_DTYPE_BOOL, kv, 2000));
  int kept = 0;
  const float scale = 1.0f / 0.75f;
  for (int i = 0; i < 2000; i++) {
    ck_assert_msg(yv[i] == (kv[i] ? scale : 0.0f), "dropout element %d: %g, keep %d", i, yv[i], kv[i]);
    kept += kv[i];
  }
  ck_assert_msg(kept > 1400 && kept < 1600, "kept %d of 2000 at p = 0.25", kept);
  /* backward: g * mask * scale; with g = 1 that is y itself */
  lt_tensor *s2 = LT_NN(lt_sum(y, 0, NULL, false));
  LT_OK_OR_FAIL(lt_backward(s2, NULL, false));
  ck_assert(lt_equal(x->grad, y));
  lt_zero_grad(x);

  /* p == 1: zeros, no draw; p == 0: a view, no draw */
  const lt_generator_state st2 = lt_generator_get_state(g);
  lt_tensor *y1 = LT_NN(lt_dropout(x, 1.0, &train));
  LT_ASSERT_SHAPE(y1, 40, 50);
  lt_tensor *n1 = LT_NN(lt_sum(y1, 0, NULL, false));
  LT_ASSERT_VALUES(n1, 0, 0);
  LT_OK_OR_FAIL(lt_backward(n1, NULL, false));
  lt_tensor *gn1 = LT_NN(lt_sum(x->grad, 0, NULL, false));
  LT_ASSERT_VALUES(gn1, 0, 0);
  lt_tensor *y0 = LT_NN(lt_dropout(x, 0.0, &train));
  ck_assert_ptr_eq(y0->data, x->data);
  ck_assert(lt_generator_get_state(g).offset == st2.offset);

  /* non-contiguous x: mask over the logical (row-major) order */
  lt_tensor *xb = rnd(g, LT_DTYPE_F64, LT_SHAPE(30, 20));
  lt_tensor *xt = LT_NN(lt_transpose(xb, 0, 1));
  const lt_generator_state st3 = lt_generator_get_state(g);
  lt_tensor *yt = LT_NN(lt_dropout(xt, 0.5, &train));
  LT_OK_OR_FAIL(lt_generator_set_state(g, st3));
  lt_tensor *k2 = LT_NN(lt_bernoulli(g, LT_DTYPE_F64, LT_SHAPE(20, 30), 0.5));
  lt_tensor *k2s = LT_NN(lt_mul_scalar(k2, 2.0));
  lt_tensor *ref = LT_NN(lt_mul(xt, k2s));
  ck_assert(lt_equal(yt, ref));

  /* errors */
  LT_EXPECT_NULL_ERR(lt_dropout(NULL, 0.5, &train), LT_ERR_NULL, "x");
  LT_EXPECT_NULL_ERR(lt_dropout(x, -0.1, &train), LT_ERR_INVALID, "p is -0.1, must be in [0, 1]");
  LT_EXPECT_NULL_ERR(lt_dropout(x, 1.5, NULL), LT_ERR_INVALID, "p is 1.5");
  LT_EXPECT_NULL_ERR(lt_dropout(x, NAN, NULL), LT_ERR_INVALID, "must be in [0, 1]");
  const lt_nn_ctx nogen = {true, NULL};
  LT_EXPECT_NULL_ERR(lt_dropout(x, 0.5, &nogen), LT_ERR_INVALID, "ctx->gen is NULL");
  LT_EXPECT_NULL_ERR(lt_dropout(x, 1.0, &nogen), LT_ERR_INVALID, "training with p = 1 needs a generator");
  lt_tensor *yng = LT_NN(lt_dropout(x, 0.0, &nogen)); /* p == 0 draws nothing */
  ck_assert_ptr_eq(yng->data, x->data);
  lt_tensor_free(yng);
  lt_tensor *xi = LT_NN(lt_ones(LT_DTYPE_I32, LT_SHAPE(3)));
  LT_EXPECT_NULL_ERR(lt_dropout(xi, 0.5, &train), LT_ERR_DTYPE, "f32 or f64");
  lt_tensor *yi = LT_NN(lt_dropout(xi, 0.5, NULL)); /* eval passes any dtype through */
  LT_ASSERT_VALUES(yi, 0, 1, 1, 1);

  free(yv);
  free(kv);
  LT_FREE_ALL(x, ye, yn, s, gs, y, keep, s2, y1, n1, gn1, y0, xb, xt, yt, k2, k2s, ref, xi, yi);
  lt_generator_free(g);
}
END_TEST

/* ======================================================================== */
/* cross_entropy, nll_loss, mse_loss                                        */
/* ======================================================================== */

START_TEST(test_losses_hand) {
  const double lse = log(exp(1.0) + exp(2.0) + exp(3.0));
  lt_tensor *x = lt_test_from_f64(LT_DTYPE_F64, LT_SHAPE(1, 3), (double[]){1, 2, 3});
  lt_tensor *t = lt_test_from_i64(LT_DTYPE_I64, LT_SHAPE(1), (int64_t[]){2});
  LT_OK_OR_FAIL(lt_requires_grad_(x, true));
  lt_tensor *l = LT_NN(lt_cross_entropy(x, t, NULL));
  ck_assert_int_eq(l->ndim, 0);
  LT_ASSERT_VALUES(l, 1e-12, lse - 3);
  LT_OK_OR_FAIL(lt_backward(l, NULL, false));
  const double p0 = exp(1 - lse), p1 = exp(2 - lse), p2 = exp(3 - lse);
  LT_ASSERT_VALUES(x->grad, 1e-12, p0, p1, p2 - 1);
  lt_zero_grad(x);
  /* label smoothing 0.1 (PyTorch: 0.9 * nll + 0.1/3 * sum(-logp)) */
  lt_cross_entropy_opts o = {-100, 0.1, LT_REDUCTION_MEAN};
  lt_tensor *ls = LT_NN(lt_cross_entropy(x, t, &o));
  LT_ASSERT_VALUES(ls, 1e-12, 0.9 * (lse - 3) + 0.1 / 3 * (3 * lse - 6));
  LT_OK_OR_FAIL(lt_backward(ls, NULL, false));
  LT_ASSERT_VALUES(x->grad, 1e-12, p0 - 0.1 / 3, p1 - 0.1 / 3, p2 - 0.1 / 3 - 0.9);
  /* i32 targets, two rows, one ignored; none / sum / mean */
  lt_tensor *x2 = lt_test_from_f64(LT_DTYPE_F32, LT_SHAPE(2, 3), (double[]){1, 2, 3, 0, 0, 0});
  lt_tensor *t2 = lt_test_from_i64(LT_DTYPE_I32, LT_SHAPE(2), (int64_t[]){0, 7});
  o = (lt_cross_entropy_opts){7, 0.0, LT_REDUCTION_NONE};
  lt_tensor *ln = LT_NN(lt_cross_entropy(x2, t2, &o));
  LT_ASSERT_VALUES(ln, 1e-6, lse - 1, 0);
  o.reduction = LT_REDUCTION_SUM;
  lt_tensor *lsum = LT_NN(lt_cross_entropy(x2, t2, &o));
  LT_ASSERT_VALUES(lsum, 1e-6, lse - 1);
  o.reduction = LT_REDUCTION_MEAN;
  lt_tensor *lmean = LT_NN(lt_cross_entropy(x2, t2, &o));
  LT_ASSERT_VALUES(lmean, 1e-6, lse - 1);
  /* nll */
  lt_tensor *lp = lt_test_from_f64(LT_DTYPE_F64, LT_SHAPE(2, 2), (double[]){-1, -2, -0.5, -3});
  lt_tensor *tn = lt_test_from_i64(LT_DTYPE_I64, LT_SHAPE(2), (int64_t[]){1, 0});
  LT_OK_OR_FAIL(lt_requires_grad_(lp, true));
  lt_tensor *nl = LT_NN(lt_nll_loss(lp, tn, NULL));
  LT_ASSERT_VALUES(nl, 1e-12, 1.25);
  LT_OK_OR_FAIL(lt_backward(nl, NULL, false));
  LT_ASSERT_VALUES(lp->grad, 1e-12, 0, -0.5, -0.5, 0);
  /* mse */
  lt_tensor *mi = lt_test_from_f64(LT_DTYPE_F64, LT_SHAPE(3), (double[]){1, 2, 3});
  lt_tensor *mt = lt_test_from_f64(LT_DTYPE_F64, LT_SHAPE(3), (double[]){1, 1, 1});
  LT_OK_OR_FAIL(lt_requires_grad_(mi, true));
  LT_OK_OR_FAIL(lt_requires_grad_(mt, true));
  lt_tensor *mm = LT_NN(lt_mse_loss(mi, mt, LT_REDUCTION_MEAN));
  LT_ASSERT_VALUES(mm, 1e-12, 5.0 / 3);
  LT_OK_OR_FAIL(lt_backward(mm, NULL, false));
  LT_ASSERT_VALUES(mi->grad, 1e-12, 0, 2.0 / 3, 4.0 / 3);
  LT_ASSERT_VALUES(mt->grad, 1e-12, 0, -2.0 / 3, -4.0 / 3);
  lt_tensor *ms = LT_NN(lt_mse_loss(mi, mt, LT_REDUCTION_SUM));
  LT_ASSERT_VALUES(ms, 1e-12, 5);
  lt_tensor *mn = LT_NN(lt_mse_loss(mi, mt, LT_REDUCTION_NONE));
  LT_ASSERT_VALUES(mn, 1e-12, 0, 1, 4);
  /* f32 input, f64 target: promoted to f64 as PyTorch */
  lt_tensor *mi32 = lt_test_from_f64(LT_DTYPE_F32, LT_SHAPE(3), (double[]){1, 2, 3});
  lt_tensor *mp = LT_NN(lt_mse_loss(mi32, mt, LT_REDUCTION_SUM));
  ck_assert_int_eq(mp->dtype, LT_DTYPE_F64);
  LT_ASSERT_VALUES(mp, 1e-12, 5);
  LT_FREE_ALL(x, t, l, ls, x2, t2, ln, lsum, lmean, lp, tn, nl, mi, mt, mm, ms, mn, mi32, mp);
}
END_TEST

START_TEST(test_losses_vs_naive) {
  const lt_dtype dts[2] = {LT_DTYPE_F32, LT_DTYPE_F64};
  const lt_reduction reds[3] = {LT_REDUCTION_MEAN, LT_REDUCTION_SUM, LT_REDUCTION_NONE};
  uint64_t seed = 100;
  for (int k = 0; k < 2; k++) {
    const lt_dtype dt = dts[k];
    for (int r = 0; r < 3; r++) {
      for (int sm = 0; sm < 3; sm++) {
        const double eps = sm == 0 ? 0.0 : sm == 1 ? 0.1 : 1.0;
        const lt_cross_entropy_opts o = {sm == 2 ? 3 : -100, eps, reds[r]};
        struct {
          int how, nd;
          int64_t shape[3];
          bool ignore;
          lt_dtype tdt;
        } cases[] = {{L_PLAIN, 2, {8, 11}, true, LT_DTYPE_I64},
                     {L_TR, 2, {6, 9}, true, LT_DTYPE_I32},
                     {L_PLAIN, 3, {2, 5, 7}, false, LT_DTYPE_I64},
                     {L_SLICE, 3, {3, 4, 6}, true, LT_DTYPE_I64},
                     {L_EXPAND, 3, {3, 2, 5}, true, LT_DTYPE_I32},
                     {L_PLAIN, 1, {6}, false, LT_DTYPE_I64},
                     {L_PLAIN, 2, {70, 600}, true, LT_DTYPE_I64}};
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
          lt_generator *g = gen(seed);
          ce_ctx ctx;
          lt_tensor *tg = make_targets(g, cases[c].tdt, dt, cases[c].nd - 1, cases[c].shape,
                                       cases[c].shape[cases[c].nd - 1], o, cases[c].ignore, &ctx);
          lt_generator_free(g);
          arg a[2] = {A(cases[c].how, true, cases[c].nd, cases[c].shape), FIXED(tg)};
          compare("cross_entropy", ce_fused, ce_naive, &ctx, 2, a, dt, seed++);
          compare("nll_loss", nll_fused, nll_naive, &ctx, 2, a, dt, seed++);
          ce_ctx_free(&ctx);
          lt_tensor_free(tg);
        }
      }
      arg m1[2] = {A(L_PLAIN, true, LT_SHAPE(5, 7)), A(L_TR, true, LT_SHAPE(5, 7))};
      compare("mse", mse_fused, mse_naive, &reds[r], 2, m1, dt, seed++);
      arg m2[2] = {A(L_EXPAND, true, LT_SHAPE(3, 4, 2)), A(L_SLICE, false, LT_SHAPE(3, 4, 2))};
      compare("mse expanded", mse_fused, mse_naive, &reds[r], 2, m2, dt, seed++);
      arg m3[2] = {A(L_PLAIN, true, LT_SHAPE(300, 170)), A(L_PLAIN, true, LT_SHAPE(300, 170))};
      compare("mse big", mse_fused, mse_naive, &reds[r], 2, m3, dt, seed++);
      arg m4[2] = {A(L_PLAIN, true, 0, NULL), A(L_PLAIN, true, 0, NULL)};
      compare("mse 0-d", mse_fused, mse_naive, &reds[r], 2, m4, dt, seed++);
    }
  }
}
END_TEST

START_TEST(test_losses_edge) {
  /* every target ignored: mean is 0 (not NaN), gradient 0 */
  lt_tensor *x = lt_test_from_f64(LT_DTYPE_F32, LT_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6});
  lt_tensor *t = lt_test_from_i64(LT_DTYPE_I64, LT_SHAPE(2), (int64_t[]){-100, -100});
  LT_OK_OR_FAIL(lt_requires_grad_(x, true));
  lt_cross_entropy_opts o = {-100, 0.2, LT_REDUCTION_MEAN};
  lt_tensor *l = LT_NN(lt_cross_entropy(x, t, &o));
  LT_ASSERT_VALUES(l, 0, 0);
  LT_OK_OR_FAIL(lt_backward(l, NULL, false));
  LT_ASSERT_VALUES(x->grad, 0, 0, 0, 0, 0, 0, 0);
  lt_tensor *nl = LT_NN(lt_nll_loss(x, t, NULL));
  LT_ASSERT_VALUES(nl, 0, 0);
  /* no rows at all */
  lt_tensor *x0 = LT_NN(lt_zeros(LT_DTYPE_F64, LT_SHAPE(0, 4)));
  lt_tensor *t0 = LT_NN(lt_zeros(LT_DTYPE_I64, LT_SHAPE(0)));
  LT_OK_OR_FAIL(lt_requires_grad_(x0, true));
  lt_tensor *l0 = LT_NN(lt_cross_entropy(x0, t0, NULL));
  LT_ASSERT_VALUES(l0, 0, 0);
  LT_OK_OR_FAIL(lt_backward(l0, NULL, false));
  LT_ASSERT_SHAPE(x0->grad, 0, 4);
  o.reduction = LT_REDUCTION_NONE;
  lt_tensor *l0n = LT_NN(lt_cross_entropy(x0, t0, &o));
  LT_ASSERT_SHAPE(l0n, 0);
  /* V == 0 with every row ignored */
  lt_tensor *xv = LT_NN(lt_zeros(LT_DTYPE_F64, LT_SHAPE(2, 0)));
  lt_tensor *lv = LT_NN(lt_cross_entropy(xv, t, NULL));
  LT_ASSERT_VALUES(lv, 0, 0);
  /* stability: logits of +-1000 */
  lt_tensor *xs = lt_test_from_f64(LT_DTYPE_F32, LT_SHAPE(2, 3), (double[]){1000, 0, -1000, -1000, -1000, -999});
  lt_tensor *ts = lt_test_from_i64(LT_DTYPE_I64, LT_SHAPE(2), (int64_t[]){0, 0});
  o.reduction = LT_REDUCTION_NONE;
  o.label_smoothing = 0;
  lt_tensor *lsx = LT_NN(lt_cross_entropy(xs, ts, &o));
  LT_ASSERT_VALUES(lsx, 1e-5, 0, 1 + log(1 + 2 * exp(-1.0)));
  /* mse of an empty tensor: mean NaN (as PyTorch), sum 0 */
  lt_tensor *e = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(0, 3)));
  lt_tensor *em = LT_NN(lt_mse_loss(e, e, LT_REDUCTION_MEAN));
  double v;
  LT_OK_OR_FAIL(lt_item(em, &v));
  ck_assert(isnan(v));
  lt_tensor *es = LT_NN(lt_mse_loss(e, e, LT_REDUCTION_SUM));
  LT_ASSERT_VALUES(es, 0, 0);
  lt_tensor *fr_[] = {x, t, l, nl, x0, t0, l0, l0n, xv, lv, xs, ts, lsx, e, em, es};
  for (size_t i = 0; i < sizeof fr_ / sizeof fr_[0]; i++) lt_tensor_free(fr_[i]);
}
END_TEST

/* ======================================================================== */
/* Ownership: nothing leaks, on success or on error                         */
/* ======================================================================== */

int64_t lt__live_tensors(void); /* tensor/tensor.c */

START_TEST(test_no_leaks) {
  lt_generator *g = gen(3);
  lt_tensor *x = rnd(g, LT_DTYPE_F32, LT_SHAPE(4, 6)), *w = rnd(g, LT_DTYPE_F32, LT_SHAPE(5, 6));
  lt_tensor *b = rnd(g, LT_DTYPE_F32, LT_SHAPE(5)), *c = rnd(g, LT_DTYPE_F32, LT_SHAPE(6));
  lt_tensor *t = lt_test_from_i64(LT_DTYPE_I32, LT_SHAPE(4), (int64_t[]){0, 5, -100, 2});
  lt_tensor *tbad = lt_test_from_i64(LT_DTYPE_I32, LT_SHAPE(4), (int64_t[]){0, 6, 1, 1});
  lt_tensor *v[] = {x, w, b, c};
  for (int i = 0; i < 4; i++) LT_OK_OR_FAIL(lt_requires_grad_(v[i], true));
  lt_tensor *xt = LT_NN(lt_transpose(x, 0, 1)); /* [6,4], non-contiguous */
  const int64_t live = lt__live_tensors();
  for (int rep = 0; rep < 2; rep++) {
    const lt_nn_ctx train = {true, g};
    lt_tensor *y[] = {lt_linear(x, w, b), lt_linear(xt, c, NULL), lt_layer_norm(x, c, c, 1e-5),
                      lt_layer_norm(xt, NULL, NULL, 1e-5), lt_rms_norm(x, c, 1e-5), lt_dropout(x, 0.3, &train),
                      lt_dropout(x, 0.3, NULL), lt_cross_entropy(x, t, NULL), lt_nll_loss(xt, tbad, NULL),
                      lt_mse_loss(x, x, LT_REDUCTION_SUM), lt_cross_entropy(x, tbad, NULL), lt_linear(x, c, NULL),
                      lt_layer_norm(x, b, NULL, 1e-5), lt_mse_loss(x, xt, LT_REDUCTION_MEAN)};
    const int n = (int)(sizeof y / sizeof y[0]);
    for (int i = 0; i < n; i++) {
      if (!y[i]) continue;
      ck_assert_msg(y[i]->requires_grad, "output %d does not require grad", i);
      lt_tensor *s = LT_NN(lt_sum(y[i], 0, NULL, false));
      LT_OK_OR_FAIL(lt_backward(s, NULL, false));
      lt_tensor_free(s);
      lt_tensor_free(y[i]);
    }
    for (int i = 0; i < 4; i++) lt_zero_grad(v[i]);
    lt_clear_error();
    /* 0-d input to dropout */
    lt_tensor *z = LT_NN(lt_scalar(LT_DTYPE_F64, 3.0)), *zy = LT_NN(lt_dropout(z, 0.5, &train));
    ck_assert_int_eq(zy->ndim, 0);
    lt_tensor_free(zy);
    lt_tensor_free(z);
  }
  ck_assert_msg(lt__live_tensors() == live, "%lld tensors leaked", (long long)(lt__live_tensors() - live));
  LT_FREE_ALL(x, w, b, c, t, tbad, xt);
  lt_generator_free(g);
}
END_TEST

/* ======================================================================== */
/* Benchmarks (LT_BENCH=1)                                                  */
/* ======================================================================== */

/* Best of 7 (wall and CPU time, each its own minimum): forward only, or
 * forward + backward timed together. The first run warms the allocator. */
typedef struct timing {
  double wall, cpu;
} timing;
static timing bench(op_fn f, const void *ctx, int n, lt_tensor **in, bool backward) {
  timing best = {1e9, 1e9};
  for (int rep = 0; rep < 7; rep++) {
    lt_scope *s = lt_scope_begin();
    const double t0 = lt_test_now(), c0 = lt_test_cpu_now();
    lt_tensor *y = f(in, ctx);
    ck_assert_ptr_nonnull(y);
    if (backward) {
      lt_tensor *l = y->ndim == 0 ? y : lt_sum(y, 0, NULL, false);
      LT_OK_OR_FAIL(lt_backward(l, NULL, false));
    }
    const double dt = lt_test_now() - t0, dc = lt_test_cpu_now() - c0;
    lt_scope_end(s);
    for (int i = 0; i < n; i++)
      if (in[i]->requires_grad) lt_zero_grad(in[i]);
    if (rep > 0 && dt < best.wall) best.wall = dt;
    if (rep > 0 && dc < best.cpu) best.cpu = dc;
  }
  return best;
}

static void report(const char *what, const char *a, timing ta, const char *b, timing tb) {
  printf("%-34s %s %7.2f ms (cpu %7.2f)   %s %7.2f ms (cpu %7.2f)\n", what, a, ta.wall * 1e3, ta.cpu * 1e3, b,
         tb.wall * 1e3, tb.cpu * 1e3);
}

START_TEST(test_bench) {
  if (!getenv("LT_BENCH")) return;
  printf("benchmarks on %d thread(s): best wall time (best process CPU time)\n", lt_get_num_threads());
  lt_generator *g = gen(1);
  /* linear: x [4096, 512], W [2048, 512], b [2048], f32 */
  lt_tensor *in[3] = {rnd(g, LT_DTYPE_F32, LT_SHAPE(4096, 512)), rnd(g, LT_DTYPE_F32, LT_SHAPE(2048, 512)),
                      rnd(g, LT_DTYPE_F32, LT_SHAPE(2048))};
  const bool yes = true;
  timing tf = bench(linear_fused, &yes, 3, in, false), tn = bench(linear_naive, &yes, 3, in, false);
  report("linear [4096,512]x[2048,512]^T+b", "lt_linear", tf, "matmul+add", tn);
  for (int i = 0; i < 3; i++) LT_OK_OR_FAIL(lt_requires_grad_(in[i], true));
  tf = bench(linear_fused, &yes, 3, in, true);
  tn = bench(linear_naive, &yes, 3, in, true);
  report("  fwd+bwd (dx, dW, db)", "lt_linear", tf, "matmul+add", tn);
  for (int i = 0; i < 3; i++) lt_tensor_free(in[i]);

  /* cross entropy: N = 2048, V = 8192, f32 */
  ce_ctx ctx;
  const int64_t sh[2] = {2048, 8192};
  lt_tensor *tg = make_targets(g, LT_DTYPE_I64, LT_DTYPE_F32, 1, sh, 8192, LT_CROSS_ENTROPY_DEFAULTS, false, &ctx);
  lt_tensor *ce_in[2] = {rnd(g, LT_DTYPE_F32, 2, sh), tg};
  tf = bench(ce_fused, &ctx, 2, ce_in, false);
  tn = bench(ce_naive, &ctx, 2, ce_in, false);
  report("cross_entropy [2048,8192]", "fused", tf, "composed", tn);
  LT_OK_OR_FAIL(lt_requires_grad_(ce_in[0], true));
  tf = bench(ce_fused, &ctx, 2, ce_in, true);
  tn = bench(ce_naive, &ctx, 2, ce_in, true);
  report("  fwd+bwd", "fused", tf, "composed", tn);
  ce_ctx_free(&ctx);
  lt_tensor_free(ce_in[0]);
  lt_tensor_free(tg);

  /* layer norm and RMS norm [8192, 768] f32 */
  const norm_ctx nc = {true, true, 1e-5};
  lt_tensor *ln_in[3] = {rnd(g, LT_DTYPE_F32, LT_SHAPE(8192, 768)), rnd(g, LT_DTYPE_F32, LT_SHAPE(768)),
                         rnd(g, LT_DTYPE_F32, LT_SHAPE(768))};
  tf = bench(ln_fused, &nc, 3, ln_in, false);
  tn = bench(ln_naive, &nc, 3, ln_in, false);
  report("layer_norm [8192,768]", "fused", tf, "composed", tn);
  tf = bench(rms_fused, &nc, 2, ln_in, false);
  tn = bench(rms_naive, &nc, 2, ln_in, false);
  report("rms_norm [8192,768]", "fused", tf, "composed", tn);
  for (int i = 0; i < 3; i++) LT_OK_OR_FAIL(lt_requires_grad_(ln_in[i], true));
  tf = bench(ln_fused, &nc, 3, ln_in, true);
  tn = bench(ln_naive, &nc, 3, ln_in, true);
  report("layer_norm fwd+bwd", "fused", tf, "composed", tn);
  tf = bench(rms_fused, &nc, 2, ln_in, true);
  tn = bench(rms_naive, &nc, 2, ln_in, true);
  report("rms_norm fwd+bwd", "fused", tf, "composed", tn);
  for (int i = 0; i < 3; i++) lt_tensor_free(ln_in[i]);
  lt_generator_free(g);
}
END_TEST

/* ---- BatchNorm module: running statistics, momentum, mode, checkpoints ---- */

/* mean and unbiased variance of channel c of x [N, C, S] (f64, contiguous). */
static void chan_stats(const lt_tensor *x, int64_t c, double *mean, double *uvar) {
  const int64_t N = x->shape[0], C = x->shape[1], S = x->numel / (N * C);
  const double *v = x->data;
  double s = 0, q = 0;
  for (int64_t n = 0; n < N; n++)
    for (int64_t i = 0; i < S; i++) s += v[(n * C + c) * S + i];
  const double m = s / (double)(N * S);
  for (int64_t n = 0; n < N; n++)
    for (int64_t i = 0; i < S; i++) q += (v[(n * C + c) * S + i] - m) * (v[(n * C + c) * S + i] - m);
  *mean = m;
  *uvar = q / (double)(N * S - 1);
}

START_TEST(test_batch_norm_module) {
  lt_generator *g = lt_generator_new(5);
  for (int cum = 0; cum < 2; cum++) {
    lt_params *p = LT_NNP(lt_params_new());
    lt_batch_norm_m bn;
    lt_batch_norm_opts o = LT_BATCH_NORM_DEFAULTS;
    o.cumulative_average = cum;
    o.momentum = 0.3;
    LT_OK_OR_FAIL(lt_batch_norm_init(&bn, p, "bn", 3, &o));
    /* PyTorch's state_dict names and kinds */
    const char *names[] = {"bn.weight", "bn.bias", "bn.running_mean", "bn.running_var", "bn.num_batches_tracked"};
    ck_assert_int_eq(lt_params_count(p), 5);
    for (int i = 0; i < 5; i++) {
      const lt_param *q = lt_params_at(p, i);
      ck_assert_str_eq(q->name, names[i]);
      ck_assert_int_eq(!!(q->flags & LT_PARAM_BUFFER), i >= 2);
    }
    ck_assert_int_eq(bn.num_batches_tracked->dtype, LT_DTYPE_I64);
    ck_assert_int_eq(lt_params_numel(p, false), 6); /* buffers are not parameters */
    LT_OK_OR_FAIL(lt_params_to_dtype(p, LT_DTYPE_F64));
    ck_assert(lt_params_training(p));
    double rm[3] = {0, 0, 0}, rv[3] = {1, 1, 1};
    for (int step = 1; step <= 4; step++) {
      lt_tensor *x = LT_NN(lt_randn(g, LT_DTYPE_F64, LT_SHAPE(4, 3, 5)));
      lt_tensor *y = LT_NN(lt_batch_norm_forward(&bn, x));
      const double f = cum ? 1.0 / step : 0.3;
      for (int c = 0; c < 3; c++) {
        double m, v;
        chan_stats(x, c, &m, &v);
        rm[c] = (1 - f) * rm[c] + f * m;
        rv[c] = (1 - f) * rv[c] + f * v;
        ck_assert_double_eq_tol(((double *)bn.running_mean->data)[c], rm[c], 1e-12);
        ck_assert_double_eq_tol(((double *)bn.running_var->data)[c], rv[c], 1e-12);
      }
      ck_assert_int_eq(*(int64_t *)bn.num_batches_tracked->data, step);
      lt_tensor_free(y), lt_tensor_free(x);
    }
    /* evaluation: running statistics, nothing updated; one switch on the store */
    lt_params_train(p, false);
    ck_assert(!lt_params_training(p));
    lt_nn_ctx ctx = lt_params_ctx(p, g);
    ck_assert(!ctx.training && ctx.gen == g);
    lt_tensor *x = LT_NN(lt_randn(g, LT_DTYPE_F64, LT_SHAPE(2, 3, 5)));
    lt_tensor *y = LT_NN(lt_batch_norm_forward(&bn, x));
    for (int64_t i = 0; i < x->numel; i++) {
      const int c = (int)(i / 5 % 3);
      const double want = (((double *)x->data)[i] - rm[c]) / sqrt(rv[c] + 1e-5);
      ck_assert_double_eq_tol(((double *)y->data)[i], want, 1e-12);
    }
    ck_assert_int_eq(*(int64_t *)bn.num_batches_tracked->data, 4);
    /* dropout follows the same switch through the ctx */
    lt_tensor *d = LT_NN(lt_dropout(x, 0.5, &ctx));
    ck_assert(lt_equal(d, x));
    lt_params_train(p, true);
    ctx = lt_params_ctx(p, g);
    lt_tensor *d2 = LT_NN(lt_dropout(x, 0.5, &ctx));
    ck_assert(!lt_equal(d2, x));
    lt_tensor_free(d2), lt_tensor_free(d), lt_tensor_free(y), lt_tensor_free(x);

    /* checkpoint round trip of the buffers (num_batches_tracked stays i64) */
    char *path = lt_test_write_temp("", 0);
    LT_OK_OR_FAIL(lt_ckpt_save_params(path, p, NULL, NULL));
    lt_params *p2 = LT_NNP(lt_params_new());
    lt_batch_norm_m bn2;
    LT_OK_OR_FAIL(lt_batch_norm_init(&bn2, p2, "bn", 3, &o));
    LT_OK_OR_FAIL(lt_params_to_dtype(p2, LT_DTYPE_F64));
    LT_OK_OR_FAIL(lt_ckpt_load_params(path, p2, NULL, NULL));
    ck_assert(lt_equal(bn2.running_mean, bn.running_mean));
    ck_assert(lt_equal(bn2.running_var, bn.running_var));
    ck_assert_int_eq(bn2.num_batches_tracked->dtype, LT_DTYPE_I64);
    ck_assert_int_eq(*(int64_t *)bn2.num_batches_tracked->data, 4);
    unlink(path);
    free(path);
    /* optimizers and clipping skip the buffers */
    lt_tensor *x2 = LT_NN(lt_randn(g, LT_DTYPE_F64, LT_SHAPE(4, 3, 2)));
    lt_scope *sc = lt_scope_begin();
    lt_tensor *l = LT_NN(lt_sum(LT_NN(lt_square(LT_NN(lt_batch_norm_forward(&bn2, x2)))), 0, NULL, false));
    LT_OK_OR_FAIL(lt_backward(l, NULL, false));
    lt_scope_end(sc);
    ck_assert_ptr_null(bn2.running_mean->grad);
    lt_tensor *rm_before = LT_NN(lt_clone(bn2.running_mean));
    double norm;
    LT_OK_OR_FAIL(lt_clip_grad_norm(p2, 1.0, &norm));
    lt_optim_config oc = lt_optim_defaults(LT_OPTIM_SGD);
    oc.lr = 0.5;
    lt_optimizer *opt = LT_NNP(lt_optimizer_new(p2, &oc));
    LT_OK_OR_FAIL(lt_optimizer_step(opt));
    ck_assert(lt_equal(bn2.running_mean, rm_before));
    lt_optimizer_free(opt);
    lt_tensor_free(rm_before), lt_tensor_free(x2);
    lt_params_free(p2);
    lt_params_free(p);
  }
  /* without tracking: batch statistics in both modes, no buffers */
  lt_params *p = LT_NNP(lt_params_new());
  lt_batch_norm_m bn;
  lt_batch_norm_opts o = LT_BATCH_NORM_DEFAULTS;
  o.track_running_stats = false;
  o.affine = false;
  LT_OK_OR_FAIL(lt_batch_norm_init(&bn, p, "bn", 2, &o));
  ck_assert_int_eq(lt_params_count(p), 0);
  lt_params_train(p, false);
  lt_tensor *x = LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(6, 2)));
  lt_tensor *y = LT_NN(lt_batch_norm_forward(&bn, x)), *z = LT_NN(lt_batch_norm(x, NULL, NULL, NULL, NULL, true, 0.1, 1e-5));
  ck_assert(lt_equal(y, z));
  lt_tensor_free(z), lt_tensor_free(y), lt_tensor_free(x);
  LT_EXPECT_ERR(lt_batch_norm_init(&bn, p, "bad", 0, NULL), LT_ERR_INVALID, "C 0 must be >= 1");
  o = LT_BATCH_NORM_DEFAULTS;
  o.momentum = 2;
  LT_EXPECT_ERR(lt_batch_norm_init(&bn, p, "bad", 2, &o), LT_ERR_INVALID, "momentum 2");
  ck_assert_int_eq(lt_params_count(p), 0);
  lt_group_norm_m gn;
  LT_EXPECT_ERR(lt_group_norm_init(&gn, p, "gn", 4, 6, 1e-5, true), LT_ERR_INVALID, "divide C = 6");
  LT_OK_OR_FAIL(lt_group_norm_init(&gn, p, "gn", 3, 6, 1e-5, true));
  ck_assert_int_eq(lt_params_count(p), 2);
  lt_params_free(p);
  lt_generator_free(g);
}
END_TEST

START_TEST(test_topk_summary) {
  /* rows: target best; target 2nd; tie with an earlier class (ranks after it); NaN row */
  const double sc[4][4] = {{0.1, 3, 1, 2}, {5, 1, 4, 0}, {2, 2, 0, 1}, {1, NAN, 3, 0}};
  const int64_t tg[4] = {1, 2, 1, 2};
  lt_tensor *s = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(4, 4), sc));
  lt_tensor *t = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(4), tg));
  int64_t n;
  double acc;
  LT_OK_OR_FAIL(lt_topk_accuracy(s, t, 1, &n, &acc));
  ck_assert_int_eq(n, 1);
  ck_assert_double_eq(acc, 0.25);
  LT_OK_OR_FAIL(lt_topk_accuracy(s, t, 2, &n, &acc));
  ck_assert_int_eq(n, 3);
  LT_OK_OR_FAIL(lt_topk_accuracy(s, t, 4, &n, &acc));
  ck_assert_int_eq(n, 3); /* the NaN row never counts */
  const int64_t bad[4] = {1, 2, 4, 0};
  lt_tensor *tb = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(4), bad));
  LT_EXPECT_ERR(lt_topk_accuracy(s, tb, 1, &n, &acc), LT_ERR_INDEX, "target 4 at row 2 is outside [0, 4)");
  LT_EXPECT_ERR(lt_topk_accuracy(s, t, 0, &n, &acc), LT_ERR_INVALID, "k 0 must be >= 1");
  LT_EXPECT_ERR(lt_topk_accuracy(t, t, 1, &n, &acc), LT_ERR_DTYPE, "scores is [4] i64");
  lt_tensor_free(tb), lt_tensor_free(t), lt_tensor_free(s);

  /* summary: every name, shape and the totals */
  lt_generator *g = lt_generator_new(1);
  lt_params *p = LT_NNP(lt_params_new());
  lt_linear_m lin;
  lt_batch_norm_m bn;
  LT_OK_OR_FAIL(lt_linear_init(&lin, p, "fc", 3, 2, true, g));
  LT_OK_OR_FAIL(lt_batch_norm_init(&bn, p, "bn", 2, NULL));
  LT_OK_OR_FAIL(lt_params_set_requires_grad(p, "fc.bias", false));
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  LT_OK_OR_FAIL(lt_params_summary(p, f));
  fclose(f);
  const char *want[] = {"fc.weight", "[2, 3]", "fc.bias", "frozen", "bn.running_var", "buffer",
                        "bn.num_batches_tracked", "[]", "i64",
                        "parameters: 12 (trainable 10, frozen 2); buffers: 5 elements"};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
    ck_assert_msg(strstr(buf, want[i]), "summary lacks '%s':\n%s", want[i], buf);
  free(buf);
  LT_EXPECT_ERR(lt_params_summary(p, NULL), LT_ERR_NULL, "params_summary");
  lt_params_free(p);
  lt_generator_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("nn_functional");
  LT_TEST_CASE(s, "core", 600, test_linear_hand, test_linear_vs_matmul, test_linear_zero_size, test_norm_hand,
               test_norms_vs_naive, test_norm_zero_size, test_dropout, test_losses_hand, test_losses_vs_naive,
               test_losses_edge, test_no_leaks, test_bench, test_batch_norm_module, test_topk_summary);
  return lt_test_run(s);
}
