/*
 * tests/test_autograd.c: the autograd engine (autograd/engine.c) and
 * lt_gradcheck (autograd/gradcheck.c), through the public API.
 *
 * Covered: accumulation across backward calls, retain_graph, grad mode,
 * detach, requires_grad_ errors, leaf and non-leaf hooks (replacement
 * gradients, errors leaving .grad untouched), anomaly mode (forward and
 * backward), in-place modification of a saved tensor, a 100,000-op chain,
 * broadcasting (lt__sum_to), dtype casts of gradients, fan-out, zero-size and
 * 0-d tensors, an op without backward, a 100-step training loop with flat
 * memory, and gradchecks of an MLP and of masked attention, including a proof
 * that gradcheck fails on a wrong gradient.
 *
 * Not covered here: the per-op derivative rules (tests/test_ops.c and tests/opinfo_*.inc).
 */
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/internal.h"
#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"

/* ---- helpers ---- */

/* An f64 leaf with the given values, requiring grad. */
static lt_tensor *leaf(int ndim, const int64_t *shape, const double *v) {
  lt_tensor *x = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, ndim, shape, v));
  LT_OK_OR_FAIL(lt_requires_grad_(x, true));
  return x;
}
#define LEAF(shape_, ...) leaf(shape_, (const double[]){__VA_ARGS__})

static lt_tensor *rand_leaf(lt_generator *g, int ndim, const int64_t *shape, double scale) {
  lt_tensor *r = LT_NN(lt_randn(g, LT_DTYPE_F64, ndim, shape));
  lt_tensor *x = LT_NN(lt_mul_scalar(r, scale));
  lt_tensor_free(r);
  LT_OK_OR_FAIL(lt_requires_grad_(x, true));
  return x;
}

/* sum(x * x) */
static lt_tensor *sumsq(const lt_tensor *x) {
  lt_tensor *m = LT_NN(lt_mul(x, x));
  lt_tensor *s = LT_NN(lt_sum(m, 0, NULL, false));
  lt_tensor_free(m);
  return s;
}

/* ======================================================================== */
/* Accumulation, retain_graph, grad mode, detach, leaves                    */
/* ======================================================================== */

START_TEST(test_accumulate_twice) {
  lt_tensor *x = LEAF(LT_SHAPE(3), 1, 2, 3);
  ck_assert(x->grad == NULL);
  lt_tensor *y = sumsq(x);
  LT_OK_OR_FAIL(lt_backward(y, NULL, false));
  LT_ASSERT_VALUES(x->grad, 1e-12, 2, 4, 6);
  lt_tensor_free(y);
  lt_tensor *g1 = x->grad;
  y = sumsq(x);
  LT_OK_OR_FAIL(lt_backward(y, NULL, false));
  ck_assert_msg(x->grad == g1, "the second backward must add into the same .grad");
  LT_ASSERT_VALUES(x->grad, 1e-12, 4, 8, 12);
  lt_tensor_free(y);
  lt_zero_grad(x);
  ck_assert(x->grad == NULL);
  lt_zero_grad(NULL);
  lt_tensor_free(x);
}
END_TEST

START_TEST(test_retain_graph) {
  lt_tensor *x = LEAF(LT_SHAPE(3), 1, 2, 3);
  lt_scope *sc = lt_scope_begin();
  lt_tensor *y = sumsq(x);
  LT_OK_OR_FAIL(lt_backward(y, NULL, true));
  LT_OK_OR_FAIL(lt_backward(y, NULL, false));
  LT_ASSERT_VALUES(x->grad, 1e-12, 4, 8, 12);
  LT_EXPECT_ERR(lt_backward(y, NULL, false), LT_ERR_AUTOGRAD, "retain_graph");
  LT_ASSERT_VALUES(x->grad, 1e-12, 4, 8, 12); /* untouched by the failure */
  lt_scope_end(sc);
  /* the message names the op whose saved tensors are gone */
  sc = lt_scope_begin();
  y = sumsq(x);
  LT_OK_OR_FAIL(lt_backward(y, NULL, false));
  LT_EXPECT_ERR(lt_backward(y, NULL, false), LT_ERR_AUTOGRAD, "'mul'");
  lt_scope_end(sc);
  lt_tensor_free(x);
}
END_TEST

START_TEST(test_no_grad) {
  lt_tensor *x = LEAF(LT_SHAPE(3), 1, 2, 3);
  ck_assert(lt_grad_enabled());
  bool prev = lt_set_grad_enabled(false);
  ck_assert(prev);
  ck_assert(!lt_grad_enabled());
  lt_tensor *y = sumsq(x);
  ck_assert(y->grad_fn == NULL && !y->requires_grad);
  LT_EXPECT_ERR(lt_backward(y, NULL, false), LT_ERR_AUTOGRAD, "does not require grad");
  ck_assert(!lt_set_grad_enabled(prev));
  ck_assert(lt_grad_enabled());
  lt_tensor_free(y);
  /* a root that never depended on a leaf requiring grad */
  lt_tensor *c = LT_NN(lt_ones(LT_DTYPE_F64, LT_SHAPE(2)));
  lt_tensor *z = sumsq(c);
  ck_assert(z->grad_fn == NULL);
  LT_EXPECT_ERR(lt_backward(z, NULL, false), LT_ERR_AUTOGRAD, "does not require grad");
  lt_tensor_free(z);
  lt_tensor_free(c);
  lt_tensor_free(x);
}
END_TEST

START_TEST(test_detach) {
  lt_tensor *x = LEAF(LT_SHAPE(3), 1, 2, 3);
  lt_tensor *d = LT_NN(lt_detach(x));
  ck_assert(d->data == x->data);
  ck_assert(!d->requires_grad && d->grad_fn == NULL);
  lt_tensor *m = LT_NN(lt_mul(d, x)); /* only the x path carries gradient */
  lt_tensor *s = LT_NN(lt_sum(m, 0, NULL, false));
  LT_OK_OR_FAIL(lt_backward(s, NULL, false));
  LT_ASSERT_VALUES(x->grad, 1e-12, 1, 2, 3);
  ck_assert(d->grad == NULL);
  lt_tensor_free(s);
  lt_tensor_free(m);
  lt_tensor_free(d);
  lt_tensor_free(x);
}
END_TEST

START_TEST(test_requires_grad_errors) {
  lt_tensor *x = LEAF(LT_SHAPE(3), 1, 2, 3);
  ck_assert(lt_is_leaf(x));
  lt_tensor *y = LT_NN(lt_mul(x, x));
  ck_assert(!lt_is_leaf(y));
  ck_assert(y->requires_grad && y->grad_fn != NULL);
  lt_status s = lt_requires_grad_(y, false);
  ck_assert_msg(s != LT_OK, "requires_grad_ on a non-leaf must fail");
  ck_assert_msg(strlen(lt_last_error()) > 0, "no message");
  lt_clear_error();
  lt_tensor *i = LT_NN(lt_zeros(LT_DTYPE_I64, LT_SHAPE(2)));
  s = lt_requires_grad_(i, true);
  ck_assert_msg(s != LT_OK, "requires_grad_ on an i64 tensor must fail");
  ck_assert(!i->requires_grad);
  lt_clear_error();
  lt_tensor *b = LT_NN(lt_zeros(LT_DTYPE_BOOL, LT_SHAPE(2)));
  ck_assert(lt_requires_grad_(b, true) != LT_OK);
  lt_clear_error();
  ck_assert(lt_requires_grad_(NULL, true) != LT_OK);
  lt_clear_error();
  lt_tensor_free(b);
  lt_tensor_free(i);
  lt_tensor_free(y);
  lt_tensor_free(x);
}
END_TEST

START_TEST(test_leaf_root) {
  lt_tensor *x = LEAF(LT_SHAPE(2, 2), 1, 2, 3, 4);
  double go[] = {1, -1, 0.5, 2};
  lt_tensor *g = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(2, 2), go));
  LT_OK_OR_FAIL(lt_backward(x, g, false));
  LT_ASSERT_VALUES(x->grad, 0, 1, -1, 0.5, 2);
  ck_assert(x->grad->data != g->data); /* a copy, not a view of the caller's tensor */
  LT_OK_OR_FAIL(lt_fill_(g, 7));
  LT_ASSERT_VALUES(x->grad, 0, 1, -1, 0.5, 2);
  lt_tensor_free(g);
  lt_tensor_free(x);
}
END_TEST

START_TEST(test_backward_errors) {
  lt_tensor *x = LEAF(LT_SHAPE(2, 3), 1, 2, 3, 4, 5, 6);
  lt_tensor *y = LT_NN(lt_mul(x, x));
  LT_EXPECT_ERR(lt_backward(NULL, NULL, false), LT_ERR_NULL, "root");
  LT_EXPECT_ERR(lt_backward(y, NULL, false), LT_ERR_SHAPE, "one-element");
  lt_tensor *bad = LT_NN(lt_ones(LT_DTYPE_F64, LT_SHAPE(3, 2)));
  LT_EXPECT_ERR(lt_backward(y, bad, false), LT_ERR_SHAPE, "[3,2]");
  LT_EXPECT_ERR(lt_backward(y, bad, false), LT_ERR_SHAPE, "[2,3]");
  lt_tensor *ib = LT_NN(lt_ones(LT_DTYPE_I32, LT_SHAPE(2, 3)));
  LT_EXPECT_ERR(lt_backward(y, ib, false), LT_ERR_DTYPE, "float");
  ck_assert(x->grad == NULL);
  /* a grad_output of another float dtype is cast */
  lt_tensor *g32 = LT_NN(lt_full(LT_DTYPE_F32, LT_SHAPE(2, 3), 0.5));
  LT_OK_OR_FAIL(lt_backward(y, g32, false));
  ck_assert(x->grad->dtype == LT_DTYPE_F64);
  LT_ASSERT_VALUES(x->grad, 1e-12, 1, 2, 3, 4, 5, 6);
  lt_tensor_free(g32);
  lt_tensor_free(ib);
  lt_tensor_free(bad);
  lt_tensor_free(y);
  lt_tensor_free(x);
}
END_TEST

/* ======================================================================== */
/* Graph shapes: broadcasting, dtypes, fan-out, 0-d, zero-size              */
/* ======================================================================== */

START_TEST(test_broadcast_grad) {
  lt_tensor *a = LEAF(LT_SHAPE(2, 3), 1, 2, 3, 4, 5, 6);
  lt_tensor *b = LEAF(LT_SHAPE(3), 1, 1, 1);
  lt_tensor *c = LEAF(LT_SHAPE(2, 1), 1, 1);
  lt_tensor *s0 = LT_NN(lt_add(a, b));
  lt_tensor *s1 = LT_NN(lt_add(s0, c));
  lt_tensor *s = LT_NN(lt_sum(s1, 0, NULL, false));
  LT_OK_OR_FAIL(lt_backward(s, NULL, false));
  LT_ASSERT_VALUES(a->grad, 0, 1, 1, 1, 1, 1, 1);
  LT_ASSERT_SHAPE(b->grad, 3);
  LT_ASSERT_VALUES(b->grad, 0, 2, 2, 2);
  LT_ASSERT_SHAPE(c->grad, 2, 1);
  LT_ASSERT_VALUES(c->grad, 0, 3, 3);
  lt_tensor_free(s);
  lt_tensor_free(s1);
  lt_tensor_free(s0);
  lt_tensor_free(a);
  lt_tensor_free(b);
  lt_tensor_free(c);
}
END_TEST

START_TEST(test_sum_to) {
  lt_tensor *g = LT_NN(lt_arange(LT_DTYPE_F64, 0, 24, 1));
  lt_tensor *g3 = LT_NN(lt_reshape(g, LT_SHAPE(2, 3, 4)));
  lt_tensor *r = LT_NN(lt__sum_to(g3, LT_SHAPE(3, 1)));
  LT_ASSERT_SHAPE(r, 3, 1);
  /* sum over dims 0 and 2: row j of [3] is sum_{i,k} (12 i + 4 j + k) */
  LT_ASSERT_VALUES(r, 1e-12, 60 + 0, 60 + 32, 60 + 64);
  lt_tensor_free(r);
  r = LT_NN(lt__sum_to(g3, LT_SHAPE(1, 3, 4)));
  LT_ASSERT_SHAPE(r, 1, 3, 4);
  double want[12];
  for (int j = 0; j < 12; j++) want[j] = j + (12 + j);
  lt_tensor *w = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(1, 3, 4), want));
  LT_ASSERT_CLOSE(r, w, 0, 1e-12);
  lt_tensor_free(w);
  lt_tensor_free(r);
  r = LT_NN(lt__sum_to(g3, 0, NULL)); /* to a scalar */
  ck_assert_int_eq(r->ndim, 0);
  LT_ASSERT_VALUES(r, 1e-12, 276);
  lt_tensor_free(r);
  r = LT_NN(lt__sum_to(g3, LT_SHAPE(2, 3, 4))); /* same shape: a plain reshape */
  LT_ASSERT_CLOSE(r, g3, 0, 0);
  lt_tensor_free(r);
  r = LT_NN(lt__sum_to(g, LT_SHAPE(1, 24))); /* fewer dims, leading 1 */
  LT_ASSERT_SHAPE(r, 1, 24);
  lt_tensor_free(r);
  LT_EXPECT_NULL_ERR(lt__sum_to(g3, LT_SHAPE(2, 4)), LT_ERR_SHAPE, "[2,4]");
  LT_EXPECT_NULL_ERR(lt__sum_to(g, LT_SHAPE(2, 24)), LT_ERR_SHAPE, "sum_to");
  LT_EXPECT_NULL_ERR(lt__sum_to(NULL, LT_SHAPE(2)), LT_ERR_NULL, "sum_to");
  lt_tensor_free(g3);
  lt_tensor_free(g);
}
END_TEST

START_TEST(test_dtype_of_grad) {
  lt_tensor *x = LT_NN(lt_tensor_from_copy(LT_DTYPE_F32, LT_SHAPE(2), (const float[]){1, 2}));
  LT_OK_OR_FAIL(lt_requires_grad_(x, true));
  lt_tensor *y = LEAF(LT_SHAPE(2), 3, 4);
  lt_tensor *m = LT_NN(lt_mul(x, y)); /* promoted to f64 */
  ck_assert(m->dtype == LT_DTYPE_F64);
  lt_tensor *s = LT_NN(lt_sum(m, 0, NULL, false));
  LT_OK_OR_FAIL(lt_backward(s, NULL, false));
  ck_assert(x->grad->dtype == LT_DTYPE_F32);
  ck_assert(y->grad->dtype == LT_DTYPE_F64);
  LT_ASSERT_VALUES(x->grad, 0, 3, 4);
  LT_ASSERT_VALUES(y->grad, 0, 1, 2);
  lt_tensor_free(s);
  lt_tensor_free(m);
  lt_tensor_free(y);
  lt_tensor_free(x);
}
END_TEST

START_TEST(test_fanout) {
  /* y = x^2, z = y + y, w = sum(z * y) = 2 sum(x^4): dw/dx = 8 x^3 */
  lt_tensor *x = LEAF(LT_SHAPE(3), 1, -2, 0.5);
  lt_scope *sc = lt_scope_begin();
  lt_tensor *y = LT_NN(lt_mul(x, x));
  lt_tensor *z = LT_NN(lt_add(y, y));
  lt_tensor *zy = LT_NN(lt_mul(z, y));
  lt_tensor *w = LT_NN(lt_sum(zy, 0, NULL, false));
  LT_OK_OR_FAIL(lt_backward(w, NULL, false));
  lt_scope_end(sc);
  LT_ASSERT_VALUES(x->grad, 1e-12, 8, -64, 1);
  lt_tensor_free(x);
}
END_TEST

/* Gradients that arrive as views (reshape, slice, expand backwards may
 * return views of their gout) are summed without writing into them. */
START_TEST(test_accumulate_views) {
  lt_tensor *x = LEAF(LT_SHAPE(4), 1, 2, 3, 4);
  lt_scope *sc = lt_scope_begin();
  lt_tensor *a = LT_NN(lt_reshape(x, LT_SHAPE(2, 2)));
  lt_tensor *b = LT_NN(lt_slice(x, 0, 0, 4, 1));
  lt_tensor *e = LT_NN(lt_expand(LT_NN(lt_unsqueeze(x, 0)), LT_SHAPE(3, 4)));
  lt_tensor *t = LT_NN(lt_add(LT_NN(lt_add(sumsq(a), LT_NN(lt_sum(b, 0, NULL, false)))),
                              LT_NN(lt_sum(e, 0, NULL, false))));
  LT_OK_OR_FAIL(lt_backward(t, NULL, false));
  LT_ASSERT_VALUES(x->grad, 1e-12, 6, 8, 10, 12); /* 2x + 1 + 3 */
  /* the second backward adds in place into the leaf's private .grad */
  lt_tensor *t2 = LT_NN(lt_sum(LT_NN(lt_mul_scalar(x, 2)), 0, NULL, false));
  LT_OK_OR_FAIL(lt_backward(t2, NULL, false));
  LT_ASSERT_VALUES(x->grad, 1e-12, 8, 10, 12, 14);
  lt_scope_end(sc);
  ck_assert(lt_is_contiguous(x->grad));
  lt_tensor_free(x);
}
END_TEST

START_TEST(test_scalar_and_empty) {
  lt_tensor *x = LT_NN(lt_scalar(LT_DTYPE_F64, 3));
  LT_OK_OR_FAIL(lt_requires_grad_(x, true));
  lt_tensor *y = LT_NN(lt_mul(x, x));
  LT_OK_OR_FAIL(lt_backward(y, NULL, false));
  ck_assert_int_eq(x->grad->ndim, 0);
  LT_ASSERT_VALUES(x->grad, 0, 6);
  lt_tensor_free(y);
  lt_tensor_free(x);

  lt_tensor *e = LT_NN(lt_zeros(LT_DTYPE_F64, LT_SHAPE(0, 3)));
  LT_OK_OR_FAIL(lt_requires_grad_(e, true));
  lt_tensor *s = LT_NN(lt_sum(e, 0, NULL, false));
  LT_OK_OR_FAIL(lt_backward(s, NULL, false));
  LT_ASSERT_SHAPE(e->grad, 0, 3);
  lt_tensor_free(s);
  lt_tensor_free(e);
}
END_TEST

/* An op of the table without backward fails naming it. The node is made by
 * hand (lt__record) since which ops lack a backward depends on the table. */
START_TEST(test_op_without_backward) {
  int op = -1;
  for (int i = 0; i < LT__OP_COUNT && op < 0; i++)
    if (!lt__ops[i].backward) op = i;
  if (op < 0) {
    printf("test_op_without_backward: every op has a backward; nothing to test\n");
    return;
  }
  lt_tensor *x = LEAF(LT_SHAPE(2), 1, 2);
  bool prev = lt_set_grad_enabled(false);
  lt_tensor *y = LT_NN(lt_clone(x));
  lt_set_grad_enabled(prev);
  LT_OK_OR_FAIL(lt__record(y, (lt__op_id)op, 1, (const lt_tensor *[]){x}, 0, NULL, NULL, 0));
  ck_assert(y->grad_fn != NULL);
  char want[128];
  snprintf(want, sizeof want, "op '%s' has no backward", lt__op_names[op]);
  lt_tensor *go = LT_NN(lt_ones_like(y));
  LT_EXPECT_ERR(lt_backward(y, go, false), LT_ERR_AUTOGRAD, want);
  ck_assert(x->grad == NULL);
  lt_tensor_free(go);
  lt_tensor_free(y);
  lt_tensor_free(x);
}
END_TEST

/* ======================================================================== */
/* Hooks                                                                    */
/* ======================================================================== */

typedef struct hook_log {
  int calls;
  const lt_tensor *seen_t;
  double scale;      /* replacement = grad * scale, unless 0 */
  bool wrong_shape;  /* return a [7] tensor */
  lt_tensor *copy;   /* a copy of the last gradient seen (kept out of scopes) */
} hook_log;

static lt_tensor *test_hook(const lt_tensor *t, const lt_tensor *grad, void *user) {
  hook_log *h = user;
  h->calls++;
  h->seen_t = t;
  lt_tensor_free(h->copy);
  h->copy = lt_tensor_keep(lt_clone(grad));
  if (h->wrong_shape) return lt_zeros(LT_DTYPE_F64, LT_SHAPE(7));
  if (h->scale != 0) return lt_mul_scalar(grad, h->scale);
  return NULL;
}

START_TEST(test_hook_leaf) {
  lt_tensor *x = LEAF(LT_SHAPE(3), 1, 2, 3);
  hook_log h = {.scale = 3};
  LT_OK_OR_FAIL(lt_tensor_set_hook(x, test_hook, &h));
  lt_tensor *y = sumsq(x); /* x is used twice: the hook sees the total once */
  LT_OK_OR_FAIL(lt_backward(y, NULL, false));
  ck_assert_int_eq(h.calls, 1);
  ck_assert(h.seen_t == x);
  LT_ASSERT_VALUES(h.copy, 1e-12, 2, 4, 6);
  LT_ASSERT_VALUES(x->grad, 1e-12, 6, 12, 18);
  lt_tensor_free(y);
  /* removed: plain accumulation */
  LT_OK_OR_FAIL(lt_tensor_set_hook(x, NULL, NULL));
  y = sumsq(x);
  LT_OK_OR_FAIL(lt_backward(y, NULL, false));
  ck_assert_int_eq(h.calls, 1);
  LT_ASSERT_VALUES(x->grad, 1e-12, 8, 16, 24);
  lt_tensor_free(y);
  /* a hook on a tensor that does not require grad is refused */
  lt_tensor *c = LT_NN(lt_zeros(LT_DTYPE_F64, LT_SHAPE(2)));
  LT_EXPECT_ERR(lt_tensor_set_hook(c, test_hook, &h), LT_ERR_AUTOGRAD, "does not require grad");
  LT_EXPECT_ERR(lt_tensor_set_hook(NULL, test_hook, &h), LT_ERR_NULL, "set_hook");
  lt_tensor_free(c);
  lt_tensor_free(h.copy);
  lt_tensor_free(x);
}
END_TEST

START_TEST(test_hook_nonleaf) {
  lt_tensor *x = LEAF(LT_SHAPE(3), 1, 2, 3);
  lt_scope *sc = lt_scope_begin();
  lt_tensor *y = LT_NN(lt_mul_scalar(x, 2));
  lt_tensor *yy = LT_NN(lt_mul(y, y)); /* d/dy = 2y = 4x */
  lt_tensor *s = LT_NN(lt_sum(yy, 0, NULL, false));
  hook_log h = {.scale = 0}; /* observe only */
  LT_OK_OR_FAIL(lt_tensor_set_hook(y, test_hook, &h));
  LT_OK_OR_FAIL(lt_backward(s, NULL, true));
  ck_assert_int_eq(h.calls, 1);
  ck_assert(h.seen_t == NULL); /* a non-leaf's hook gets t == NULL */
  LT_ASSERT_VALUES(h.copy, 1e-12, 4, 8, 12);
  LT_ASSERT_VALUES(x->grad, 1e-12, 8, 16, 24);
  lt_zero_grad(x);
  /* replacement: the gradient of y becomes 10 * (its gradient) */
  h.scale = 10;
  LT_OK_OR_FAIL(lt_backward(s, NULL, false));
  ck_assert_int_eq(h.calls, 2);
  LT_ASSERT_VALUES(x->grad, 1e-12, 80, 160, 240);
  lt_scope_end(sc);
  lt_tensor_free(h.copy);
  lt_tensor_free(x);
}
END_TEST

/* Post-accumulate hooks: each fires once per backward, as soon as its leaf's
 * gradient is final, while the rest of the sweep is still to run. */
typedef struct post_log {
  int calls_x, calls_w, order; /* order: 1 if w's hook ran first */
  bool x_grad_null_at_w;       /* x had no .grad yet when w's hook ran */
  lt_tensor *x, *w;
  double w_at_hook[3];         /* w->grad when its hook ran */
  lt_status fail;              /* returned by w's hook */
} post_log;

static lt_status post_hook(lt_tensor *t, void *user) {
  post_log *h = user;
  if (t == h->w) {
    h->calls_w++;
    if (h->calls_x == 0) h->order = 1, h->x_grad_null_at_w = h->x->grad == NULL;
    lt_tensor_read(t->grad, LT_DTYPE_F64, h->w_at_hook, 3);
    return h->fail ? lt__err(h->fail, "post_hook: asked to fail") : LT_OK;
  }
  h->calls_x++;
  return LT_OK;
}

/* s = sum(2x * w) + sum(w * w): the reverse sweep ends with the mul_scalar
 * that is x's only consumer, after both of w's consumers. */
static lt_tensor *post_graph(lt_tensor *x, lt_tensor *w) {
  lt_tensor *y = LT_NN(lt_mul_scalar(x, 2));
  lt_tensor *z = LT_NN(lt_mul(y, w));
  lt_tensor *a = LT_NN(lt_sum(z, 0, NULL, false));
  lt_tensor *b = sumsq(w);
  lt_tensor *s = LT_NN(lt_add(a, b));
  lt_tensor_free(y), lt_tensor_free(z), lt_tensor_free(a), lt_tensor_free(b);
  return s;
}

START_TEST(test_post_accumulate_hook) {
  lt_tensor *x = LEAF(LT_SHAPE(3), 1, 2, 3);
  lt_tensor *w = LEAF(LT_SHAPE(3), 4, 5, 6);
  post_log h = {.x = x, .w = w};
  LT_OK_OR_FAIL(lt_tensor_set_post_accumulate_hook(x, post_hook, &h));
  LT_OK_OR_FAIL(lt_tensor_set_post_accumulate_hook(w, post_hook, &h));
  lt_tensor *s = post_graph(x, w);
  LT_OK_OR_FAIL(lt_backward(s, NULL, false));
  lt_tensor_free(s);
  ck_assert_int_eq(h.calls_x, 1);
  ck_assert_int_eq(h.calls_w, 1); /* w has two consumers: one call, after both */
  ck_assert_int_eq(h.order, 1);
  ck_assert_msg(h.x_grad_null_at_w, "w's hook ran after x was committed: not during the sweep");
  /* dw = 2x + 2w = 10, 14, 18, final when the hook ran */
  ck_assert(h.w_at_hook[0] == 10 && h.w_at_hook[1] == 14 && h.w_at_hook[2] == 18);
  LT_ASSERT_VALUES(x->grad, 1e-12, 8, 10, 12);
  /* a second backward accumulates; the hook sees the sum */
  s = post_graph(x, w);
  LT_OK_OR_FAIL(lt_backward(s, NULL, false));
  lt_tensor_free(s);
  ck_assert_int_eq(h.calls_w, 2);
  ck_assert(h.w_at_hook[0] == 20 && h.w_at_hook[2] == 36);
  /* the root itself a leaf: the hook runs at the commit */
  LT_OK_OR_FAIL(lt_tensor_set_post_accumulate_hook(x, NULL, NULL));
  lt_tensor *ones = LT_NN(lt_ones(LT_DTYPE_F64, LT_SHAPE(3)));
  LT_OK_OR_FAIL(lt_backward(w, ones, false));
  lt_tensor_free(ones);
  ck_assert_int_eq(h.calls_w, 3);
  ck_assert(h.w_at_hook[0] == 21);
  /* a failing hook fails the backward with its status and message */
  h.fail = LT_ERR_STATE;
  s = post_graph(x, w);
  LT_EXPECT_ERR(lt_backward(s, NULL, false), LT_ERR_STATE, "asked to fail");
  lt_tensor_free(s);
  /* removed: no call; refused on a non-leaf, a leaf without grad, NULL */
  LT_OK_OR_FAIL(lt_tensor_set_post_accumulate_hook(w, NULL, NULL));
  s = post_graph(x, w);
  LT_OK_OR_FAIL(lt_backward(s, NULL, false));
  ck_assert_int_eq(h.calls_w, 4);
  LT_EXPECT_ERR(lt_tensor_set_post_accumulate_hook(s, post_hook, &h), LT_ERR_AUTOGRAD, "not a leaf");
  lt_tensor *c = LT_NN(lt_zeros(LT_DTYPE_F64, LT_SHAPE(2)));
  LT_EXPECT_ERR(lt_tensor_set_post_accumulate_hook(c, post_hook, &h), LT_ERR_AUTOGRAD, "does not require grad");
  LT_EXPECT_ERR(lt_tensor_set_post_accumulate_hook(NULL, post_hook, &h), LT_ERR_NULL, "set_post_accumulate_hook");
  lt_tensor_free(c);
  lt_tensor_free(s);
  lt_tensor_free(x);
  lt_tensor_free(w);
}
END_TEST

/* A hook must not start another backward: the engine refuses it. */
typedef struct reentry {
  lt_tensor *other;
  lt_status got;
} reentry;
static lt_tensor *reentrant_hook(const lt_tensor *t, const lt_tensor *grad, void *user) {
  reentry *r = user;
  r->got = lt_backward(r->other, NULL, false);
  return NULL;
}

START_TEST(test_hook_reentry_refused) {
  lt_tensor *x = LEAF(LT_SHAPE(2), 1, 2);
  lt_scope *sc = lt_scope_begin();
  reentry r = {.other = sumsq(x), .got = LT_OK};
  LT_OK_OR_FAIL(lt_tensor_set_hook(x, reentrant_hook, &r));
  LT_OK_OR_FAIL(lt_backward(sumsq(x), NULL, false));
  ck_assert_int_eq(r.got, LT_ERR_STATE);
  ck_assert(strstr(lt_last_error(), "hook") != NULL);
  lt_clear_error();
  LT_ASSERT_VALUES(x->grad, 1e-12, 2, 4);
  LT_OK_OR_FAIL(lt_tensor_set_hook(x, NULL, NULL));
  LT_OK_OR_FAIL(lt_backward(r.other, NULL, false)); /* fine afterwards */
  LT_ASSERT_VALUES(x->grad, 1e-12, 4, 8);
  lt_scope_end(sc);
  lt_tensor_free(x);
}
END_TEST

/* A failing backward leaves every .grad as it was and the graph usable. */
START_TEST(test_error_leaves_grads_untouched) {
  lt_tensor *x = LEAF(LT_SHAPE(3), 1, 2, 3);
  lt_tensor *b = LEAF(LT_SHAPE(3), 1, 1, 1);
  lt_scope *sc = lt_scope_begin();
  LT_OK_OR_FAIL(lt_backward(x, LT_NN(lt_ones_like(x)), false)); /* x->grad = 1 */
  lt_tensor *y = LT_NN(lt_mul(x, b));
  lt_tensor *z = LT_NN(lt_mul(y, x)); /* z = x^2 b */
  lt_tensor *s = LT_NN(lt_sum(z, 0, NULL, false));
  hook_log h = {.wrong_shape = true};
  LT_OK_OR_FAIL(lt_tensor_set_hook(y, test_hook, &h));
  LT_EXPECT_ERR(lt_backward(s, NULL, false), LT_ERR_AUTOGRAD, "hook");
  LT_ASSERT_VALUES(x->grad, 0, 1, 1, 1);
  ck_assert(b->grad == NULL);
  /* the graph was not released: fix the hook and retry */
  LT_OK_OR_FAIL(lt_tensor_set_hook(y, NULL, NULL));
  LT_OK_OR_FAIL(lt_backward(s, NULL, false));
  LT_ASSERT_VALUES(x->grad, 1e-12, 3, 5, 7); /* 1 + 2 x b */
  LT_ASSERT_VALUES(b->grad, 1e-12, 1, 4, 9);
  lt_scope_end(sc);
  lt_tensor_free(h.copy);
  lt_tensor_free(b);
  lt_tensor_free(x);
}
END_TEST

/* ======================================================================== */
/* Anomaly mode, in-place modification of saved tensors                     */
/* ======================================================================== */

START_TEST(test_anomaly_forward) {
  lt_tensor *x = LEAF(LT_SHAPE(2), -1, 2);
  ck_assert(!lt_anomaly_mode());
  lt_tensor *y = LT_NN(lt_log(x)); /* NaN, but anomaly mode is off */
  lt_tensor_free(y);
  lt_set_anomaly_mode(true);
  ck_assert(lt_anomaly_mode());
  LT_EXPECT_NULL_ERR(lt_log(x), LT_ERR_NUMERIC, "log");
  lt_set_anomaly_mode(false);
  lt_tensor_free(x);
}
END_TEST

START_TEST(test_anomaly_backward) {
  lt_tensor *x = LEAF(LT_SHAPE(2), 0, 4);
  lt_set_anomaly_mode(true);
  lt_scope *sc = lt_scope_begin();
  lt_tensor *y = LT_NN(lt_sqrt(x)); /* finite forward, infinite slope at 0 */
  lt_tensor *s = LT_NN(lt_sum(y, 0, NULL, false));
  LT_EXPECT_ERR(lt_backward(s, NULL, true), LT_ERR_NUMERIC, "'sqrt'");
  ck_assert(x->grad == NULL);
  lt_set_anomaly_mode(false);
  LT_OK_OR_FAIL(lt_backward(s, NULL, false)); /* off: inf goes through */
  double g0;
  LT_OK_OR_FAIL(lt_get(x->grad, (const int64_t[]){0}, &g0));
  ck_assert(isinf(g0));
  lt_scope_end(sc);
  lt_tensor_free(x);
}
END_TEST

START_TEST(test_inplace_saved_detected) {
  lt_tensor *x = LEAF(LT_SHAPE(3), 1, 2, 3);
  lt_tensor *a = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(3), (const double[]){4, 5, 6}));
  lt_scope *sc = lt_scope_begin();
  lt_tensor *y = LT_NN(lt_mul(x, a)); /* saves a for x's gradient */
  lt_tensor *s = LT_NN(lt_sum(y, 0, NULL, false));
  LT_OK_OR_FAIL(lt_add_scalar_(a, 1));
  LT_EXPECT_ERR(lt_backward(s, NULL, false), LT_ERR_AUTOGRAD, "modified in place");
  LT_OK_OR_FAIL(lt_add_scalar_(a, -1));
  LT_EXPECT_ERR(lt_backward(s, NULL, false), LT_ERR_AUTOGRAD, "saved by 'mul'");
  ck_assert(x->grad == NULL);
  lt_scope_end(sc);
  lt_tensor_free(a);
  lt_tensor_free(x);
}
END_TEST

/* ======================================================================== */
/* Deep graphs and memory                                                   */
/* ======================================================================== */

START_TEST(test_chain_100k) {
  enum { N = 100000 };
  lt_tensor *x = LEAF(LT_SHAPE(1), 0.5);
  lt_tensor *y = x;
  for (int i = 0; i < N; i++) {
    lt_tensor *z = LT_NN(lt_add_scalar(y, 1e-3));
    if (y != x) lt_tensor_free(y); /* the node chain stays alive through z */
    y = z;
  }
  LT_OK_OR_FAIL(lt_backward(y, NULL, false));
  LT_ASSERT_VALUES(x->grad, 0, 1);
  lt_tensor_free(y); /* releases 100,000 nodes: must not recurse either */
  lt_tensor_free(x);
}
END_TEST

START_TEST(test_chain_100k_mul) {
  /* the same depth through an op with saved tensors and pending counts */
  enum { N = 100000 };
  lt_tensor *x = LEAF(LT_SHAPE(2), 1, 2);
  lt_scope *sc = lt_scope_begin();
  lt_tensor *y = x;
  for (int i = 0; i < N; i++) y = LT_NN(lt_mul_scalar(y, 1.0));
  lt_tensor *s = LT_NN(lt_sum(y, 0, NULL, false));
  LT_OK_OR_FAIL(lt_backward(s, NULL, false));
  lt_scope_end(sc);
  LT_ASSERT_VALUES(x->grad, 0, 1, 1);
  lt_tensor_free(x);
}
END_TEST

/* One step of a 2-layer MLP: loss = sum(tanh(relu(x W1 + b1) W2 + b2)^2). */
static lt_tensor *mlp_loss(lt_tensor *x, lt_tensor *w1, lt_tensor *b1, lt_tensor *w2,
                           lt_tensor *b2) {
  lt_tensor *h = lt_relu(lt_add(lt_matmul(x, w1), b1));
  lt_tensor *o = lt_tanh(lt_add(lt_matmul(h, w2), b2));
  return lt_sum(lt_mul(o, o), 0, NULL, false);
}

START_TEST(test_training_loop_memory) {
  lt_generator *g = lt_generator_new(7);
  lt_tensor *x = LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(16, 8)));
  lt_tensor *w1 = rand_leaf(g, LT_SHAPE(8, 32), 0.3);
  lt_tensor *b1 = rand_leaf(g, LT_SHAPE(32), 0.1);
  lt_tensor *w2 = rand_leaf(g, LT_SHAPE(32, 4), 0.3);
  lt_tensor *b2 = rand_leaf(g, LT_SHAPE(4), 0.1);
  lt_tensor *p[] = {w1, b1, w2, b2};
  int64_t t0 = -1, s0 = -1;
  double first = 0, last = 0;
  for (int step = 0; step < 100; step++) {
    lt_scope *sc = lt_scope_begin();
    lt_tensor *x64 = LT_NN(lt_to_dtype(x, LT_DTYPE_F64));
    lt_tensor *loss = LT_NN(mlp_loss(x64, w1, b1, w2, b2));
    LT_OK_OR_FAIL(lt_item(loss, step == 0 ? &first : &last));
    LT_OK_OR_FAIL(lt_backward(loss, NULL, false));
    bool prev = lt_set_grad_enabled(false);
    for (int k = 0; k < 4; k++) {
      ck_assert(p[k]->grad != NULL);
      LT_OK_OR_FAIL(lt_sub_(p[k], LT_NN(lt_mul_scalar(p[k]->grad, 0.01))));
      lt_zero_grad(p[k]);
    }
    lt_set_grad_enabled(prev);
    lt_scope_end(sc);
    if (step == 1) {
      t0 = lt__live_tensors();
      s0 = lt__live_storages();
    } else if (step > 1) {
      ck_assert_msg(lt__live_tensors() == t0, "step %d: %lld live tensors, %lld after step 1",
                    step, (long long)lt__live_tensors(), (long long)t0);
      ck_assert_msg(lt__live_storages() == s0, "step %d: %lld live storages, %lld after step 1",
                    step, (long long)lt__live_storages(), (long long)s0);
    }
  }
  ck_assert_msg(last < first, "loss did not fall: %g -> %g", first, last);
  for (int k = 0; k < 4; k++) lt_tensor_free(p[k]);
  lt_tensor_free(x);
  lt_generator_free(g);
}
END_TEST

/* Leaves keep their .grad when the scope of the step ends. */
START_TEST(test_grad_outlives_scope) {
  lt_tensor *x = LEAF(LT_SHAPE(3), 1, 2, 3);
  lt_scope *sc = lt_scope_begin();
  LT_OK_OR_FAIL(lt_backward(sumsq(x), NULL, false));
  lt_scope_end(sc);
  LT_ASSERT_VALUES(x->grad, 1e-12, 2, 4, 6);
  lt_tensor_free(x);
}
END_TEST

/* ======================================================================== */
/* gradcheck                                                                */
/* ======================================================================== */

static lt_tensor *f_transpose_mul(int n, lt_tensor *const *in, void *u) {
  lt_tensor *t = lt_transpose(in[0], 0, 1);
  lt_tensor *r = lt_mul(t, in[1]);
  lt_tensor_free(t);
  return r;
}

static lt_tensor *doubling_hook(const lt_tensor *t, const lt_tensor *grad, void *user) {
  return lt_mul_scalar(grad, 2);
}

START_TEST(test_gradcheck_passes_and_restores) {
  lt_generator *g = lt_generator_new(11);
  lt_tensor *a = rand_leaf(g, LT_SHAPE(2, 3), 1);
  lt_tensor *b = rand_leaf(g, LT_SHAPE(3, 2), 1);
  /* a's .grad before: kept as it was (same object, same values) */
  lt_tensor *five = LT_NN(lt_full_like(a, 5));
  LT_OK_OR_FAIL(lt_backward(a, five, false));
  lt_tensor_free(five);
  lt_tensor *ga = a->grad;
  lt_tensor *in[] = {a, b};
  LT_OK_OR_FAIL(lt_gradcheck(f_transpose_mul, NULL, 2, in, NULL));
  ck_assert(a->grad == ga);
  LT_ASSERT_VALUES(a->grad, 0, 5, 5, 5, 5, 5, 5);
  ck_assert(b->grad == NULL);
  ck_assert(lt_grad_enabled());
  lt_tensor_free(a);
  lt_tensor_free(b);
  lt_generator_free(g);
}
END_TEST

START_TEST(test_gradcheck_fails_on_wrong_gradient) {
  lt_generator *g = lt_generator_new(12);
  lt_tensor *a = rand_leaf(g, LT_SHAPE(2, 3), 1);
  lt_tensor *b = rand_leaf(g, LT_SHAPE(3, 2), 1);
  lt_tensor *in[] = {a, b};
  /* a wrong derivative for b, injected by a hook: gradcheck must catch it */
  LT_OK_OR_FAIL(lt_tensor_set_hook(b, doubling_hook, NULL));
  LT_EXPECT_ERR(lt_gradcheck(f_transpose_mul, NULL, 2, in, NULL), LT_ERR_AUTOGRAD,
                "input 1 element [0,0]: analytic");
  lt_status s = lt_gradcheck(f_transpose_mul, NULL, 2, in, NULL);
  ck_assert_int_eq(s, LT_ERR_AUTOGRAD);
  ck_assert_msg(strstr(lt_last_error(), "numeric") && strstr(lt_last_error(), "6 of 12"),
                "message: %s", lt_last_error());
  lt_clear_error();
  LT_OK_OR_FAIL(lt_tensor_set_hook(b, NULL, NULL));
  LT_OK_OR_FAIL(lt_gradcheck(f_transpose_mul, NULL, 2, in, NULL));
  ck_assert(a->grad == NULL && b->grad == NULL);
  lt_tensor_free(a);
  lt_tensor_free(b);
  lt_generator_free(g);
}
END_TEST

static lt_tensor *f_null(int n, lt_tensor *const *in, void *u) {
  lt__err(LT_ERR_INVALID, "f_null: deliberately failing");
  return NULL;
}
static lt_tensor *f_clone(int n, lt_tensor *const *in, void *u) { return lt_clone(in[0]); }

START_TEST(test_gradcheck_errors) {
  lt_tensor *a = LEAF(LT_SHAPE(2), 1, 2);
  lt_tensor *f32 = LT_NN(lt_ones(LT_DTYPE_F32, LT_SHAPE(2)));
  LT_OK_OR_FAIL(lt_requires_grad_(f32, true));
  lt_tensor *c = LT_NN(lt_ones(LT_DTYPE_F64, LT_SHAPE(2)));
  LT_EXPECT_ERR(lt_gradcheck(f_clone, NULL, 1, &f32, NULL), LT_ERR_DTYPE, "input 0");
  LT_EXPECT_ERR(lt_gradcheck(f_clone, NULL, 1, &c, NULL), LT_ERR_INVALID, "requires grad");
  LT_EXPECT_ERR(lt_gradcheck(NULL, NULL, 1, &a, NULL), LT_ERR_NULL, "f");
  LT_EXPECT_ERR(lt_gradcheck(f_null, NULL, 1, &a, NULL), LT_ERR_INVALID, "deliberately");
  lt_gradcheck_opts bad = {0, 1e-5, 1e-3};
  LT_EXPECT_ERR(lt_gradcheck(f_clone, NULL, 1, &a, &bad), LT_ERR_INVALID, "eps");
  lt_tensor *s = LT_NN(lt_scalar(LT_DTYPE_F64, 1));
  lt_tensor *e = LT_NN(lt_expand(s, LT_SHAPE(3)));
  LT_OK_OR_FAIL(lt_requires_grad_(e, true));
  LT_EXPECT_ERR(lt_gradcheck(f_clone, NULL, 1, &e, NULL), LT_ERR_INVALID, "overlapping");
  ck_assert(lt_grad_enabled());
  lt_tensor_free(e);
  lt_tensor_free(s);
  lt_tensor_free(c);
  lt_tensor_free(f32);
  lt_tensor_free(a);
}
END_TEST

static lt_tensor *f_mlp(int n, lt_tensor *const *in, void *u) {
  /* in: x [5,4], w1 [4,6], b1 [6], w2 [6,3], b2 [3] -> [5,3] */
  lt_tensor *h = lt_relu(lt_add(lt_matmul(in[0], in[1]), in[2]));
  return lt_tanh(lt_add(lt_matmul(h, in[3]), in[4]));
}

START_TEST(test_gradcheck_mlp) {
  lt_generator *g = lt_generator_new(13);
  lt_tensor *in[] = {rand_leaf(g, LT_SHAPE(5, 4), 1), rand_leaf(g, LT_SHAPE(4, 6), 0.5),
                     rand_leaf(g, LT_SHAPE(6), 0.5), rand_leaf(g, LT_SHAPE(6, 3), 0.5),
                     rand_leaf(g, LT_SHAPE(3), 0.5)};
  LT_OK_OR_FAIL(lt_gradcheck(f_mlp, NULL, 5, in, NULL));
  for (int i = 0; i < 5; i++) lt_tensor_free(in[i]);
  lt_generator_free(g);
}
END_TEST

/* Causal self-attention on one head: softmax(q k^T / sqrt(C) + causal mask) v. */
static lt_tensor *f_attention(int n, lt_tensor *const *in, void *user) {
  const lt_tensor *mask = user; /* [T,T] bool, true above the diagonal */
  lt_tensor *kt = lt_transpose(in[1], 0, 1);
  lt_tensor *sc = lt_mul_scalar(lt_matmul(in[0], kt), 1.0 / sqrt((double)in[0]->shape[1]));
  lt_tensor *att = lt_softmax(lt_masked_fill(sc, mask, -INFINITY), -1);
  return lt_matmul(att, in[2]);
}

START_TEST(test_gradcheck_attention) {
  enum { T = 4, C = 3 };
  lt_generator *g = lt_generator_new(14);
  lt_tensor *in[] = {rand_leaf(g, LT_SHAPE(T, C), 1), rand_leaf(g, LT_SHAPE(T, C), 1),
                     rand_leaf(g, LT_SHAPE(T, C), 1)};
  bool m[T * T];
  for (int i = 0; i < T; i++)
    for (int j = 0; j < T; j++) m[i * T + j] = j > i;
  lt_tensor *mask = LT_NN(lt_tensor_from_copy(LT_DTYPE_BOOL, LT_SHAPE(T, T), m));
  LT_OK_OR_FAIL(lt_gradcheck(f_attention, mask, 3, in, NULL));
  for (int i = 0; i < 3; i++) lt_tensor_free(in[i]);
  lt_tensor_free(mask);
  lt_generator_free(g);
}
END_TEST

int main(void) {
  Suite *s = suite_create("autograd");
  TCase *tc = tcase_create("engine");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_accumulate_twice);
  tcase_add_test(tc, test_retain_graph);
  tcase_add_test(tc, test_no_grad);
  tcase_add_test(tc, test_detach);
  tcase_add_test(tc, test_requires_grad_errors);
  tcase_add_test(tc, test_leaf_root);
  tcase_add_test(tc, test_backward_errors);
  tcase_add_test(tc, test_broadcast_grad);
  tcase_add_test(tc, test_sum_to);
  tcase_add_test(tc, test_dtype_of_grad);
  tcase_add_test(tc, test_fanout);
  tcase_add_test(tc, test_accumulate_views);
  tcase_add_test(tc, test_scalar_and_empty);
  tcase_add_test(tc, test_op_without_backward);
  tcase_add_test(tc, test_hook_leaf);
  tcase_add_test(tc, test_hook_nonleaf);
  tcase_add_test(tc, test_hook_reentry_refused);
  tcase_add_test(tc, test_post_accumulate_hook);
  tcase_add_test(tc, test_error_leaves_grads_untouched);
  tcase_add_test(tc, test_anomaly_forward);
  tcase_add_test(tc, test_anomaly_backward);
  tcase_add_test(tc, test_inplace_saved_detected);
  tcase_add_test(tc, test_chain_100k);
  tcase_add_test(tc, test_chain_100k_mul);
  tcase_add_test(tc, test_training_loop_memory);
  tcase_add_test(tc, test_grad_outlives_scope);
  suite_add_tcase(s, tc);
  TCase *tg = tcase_create("gradcheck");
  tcase_set_timeout(tg, 600);
  tcase_add_test(tg, test_gradcheck_passes_and_restores);
  tcase_add_test(tg, test_gradcheck_fails_on_wrong_gradient);
  tcase_add_test(tg, test_gradcheck_errors);
  tcase_add_test(tg, test_gradcheck_mlp);
  tcase_add_test(tg, test_gradcheck_attention);
  suite_add_tcase(s, tg);
  return lt_test_run(s);
}
