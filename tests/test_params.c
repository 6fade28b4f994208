/*
 * tests/test_params.c: the parameter store (names, order, duplicates, numel,
 * freezing, zero_grad, ownership and leaks), lt_name_join, the initialisers
 * (bounds and statistics as torch.nn.init) and the layer modules (PyTorch's
 * default initialisation, state_dict names, forward against the functional
 * composition, the embedding's padding_idx gradient, roll-back of a failed
 * init), and lt_params_to_dtype (identity kept, values converted, views
 * refused, composition with an optimizer).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/nn.h"
#include "tensor/storage_internal.h"
#include "test_util.h"

static double *read_all(const lt_tensor *t) {
  double *v = malloc(sizeof(double) * (size_t)(t->numel ? t->numel : 1));
  LT_OK_OR_FAIL(lt_tensor_read(t, LT_DTYPE_F64, v, t->numel));
  return v;
}

/* ======================================================================== */
/* The store                                                                */
/* ======================================================================== */

START_TEST(test_store_basics) {
  int64_t live0 = lt__live_tensors();
  lt_params *p = lt_params_new();
  ck_assert(p);
  ck_assert_int_eq(lt_params_count(p), 0);
  lt_tensor *w = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(3, 4)));
  lt_tensor *b = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(3)));
  lt_tensor *pos = LT_NN(lt_arange(LT_DTYPE_I64, 0, 5, 1));
  lt_tensor *bf = LT_NN(lt_zeros(LT_DTYPE_F64, LT_SHAPE(2)));
  LT_OK_OR_FAIL(lt_requires_grad_(bf, true));
  LT_OK_OR_FAIL(lt_params_add(p, "enc.weight", w, LT_PARAM_DEFAULT));
  LT_OK_OR_FAIL(lt_params_add(p, "enc.bias", b, LT_PARAM_NO_DECAY));
  LT_OK_OR_FAIL(lt_params_add(p, "pos_ids", pos, LT_PARAM_BUFFER));
  LT_OK_OR_FAIL(lt_params_add(p, "running", bf, LT_PARAM_BUFFER | LT_PARAM_NO_DECAY));
  ck_assert_int_eq(lt_params_count(p), 4);
  const char *want[] = {"enc.weight", "enc.bias", "pos_ids", "running"};
  lt_tensor *vals[] = {w, b, pos, bf};
  unsigned flags[] = {0, LT_PARAM_NO_DECAY, LT_PARAM_BUFFER, LT_PARAM_BUFFER | LT_PARAM_NO_DECAY};
  for (int i = 0; i < 4; i++) {
    const lt_param *q = lt_params_at(p, i);
    ck_assert(q);
    ck_assert_str_eq(q->name, want[i]);
    ck_assert(q->value == vals[i]);
    ck_assert_uint_eq(q->flags, flags[i]);
    ck_assert(lt_params_find(p, want[i]) == vals[i]);
  }
  /* parameters require grad; buffers do not (even if they did before) */
  ck_assert(w->requires_grad && b->requires_grad && !pos->requires_grad && !bf->requires_grad);
  /* absent names: NULL and no error */
  lt_clear_error();
  ck_assert(lt_params_find(p, "enc") == NULL);
  ck_assert(lt_params_find(p, "enc.weight.x") == NULL);
  ck_assert(lt_params_find(p, NULL) == NULL);
  ck_assert(lt_params_find(NULL, "enc.bias") == NULL);
  ck_assert_int_eq(lt_last_status(), LT_OK);
  /* at out of range */
  ck_assert(lt_params_at(p, 4) == NULL);
  LT_EXPECT_ERR(lt_last_status(), LT_ERR_INDEX, "index 4");
  ck_assert(lt_params_at(p, -1) == NULL);
  LT_EXPECT_ERR(lt_last_status(), LT_ERR_INDEX, "index -1");
  /* numel: buffers excluded */
  ck_assert_int_eq(lt_params_numel(p, false), 15);
  ck_assert_int_eq(lt_params_numel(p, true), 15);
  ck_assert_int_eq(lt_params_numel(NULL, false), 0);
  ck_assert_int_eq(lt_params_count(NULL), 0);
  lt_params_free(p);
  lt_params_free(NULL);
  ck_assert_int_eq(lt__live_tensors(), live0);
}
END_TEST

START_TEST(test_store_errors) {
  int64_t live0 = lt__live_tensors();
  lt_params *p = lt_params_new();
  lt_tensor *w = LT_NN(lt_ones(LT_DTYPE_F32, LT_SHAPE(2)));
  LT_OK_OR_FAIL(lt_params_add(p, "w", w, 0));
  /* duplicate name: error, the new tensor stays the caller's */
  lt_tensor *w2 = LT_NN(lt_ones(LT_DTYPE_F32, LT_SHAPE(2)));
  LT_EXPECT_ERR(lt_params_add(p, "w", w2, 0), LT_ERR_INVALID, "'w' is already in the store");
  ck_assert(!w2->requires_grad);
  /* the same tensor under a second name */
  LT_EXPECT_ERR(lt_params_add(p, "w_tied", w, 0), LT_ERR_INVALID, "already in the store as 'w'");
  /* integer parameter */
  lt_tensor *ids = LT_NN(lt_zeros(LT_DTYPE_I32, LT_SHAPE(2)));
  LT_EXPECT_ERR(lt_params_add(p, "ids", ids, 0), LT_ERR_DTYPE, "LT_PARAM_BUFFER");
  /* a non-leaf */
  lt_tensor *y = LT_NN(lt_mul_scalar(w, 2));
  LT_EXPECT_ERR(lt_params_add(p, "y", y, 0), LT_ERR_AUTOGRAD, "leaves");
  lt_tensor_free(y);
  /* names and arguments */
  LT_EXPECT_ERR(lt_params_add(p, "", w2, 0), LT_ERR_INVALID, "empty");
  LT_EXPECT_ERR(lt_params_add(p, NULL, w2, 0), LT_ERR_NULL, "name");
  LT_EXPECT_ERR(lt_params_add(NULL, "x", w2, 0), LT_ERR_NULL, "store");
  LT_EXPECT_ERR(lt_params_add(p, "x", NULL, 0), LT_ERR_NULL, "value");
  LT_EXPECT_ERR(lt_params_add(p, "x", w2, 8), LT_ERR_INVALID, "flag");
  /* a failed creation inside the call keeps its message */
  LT_EXPECT_ERR(lt_params_add(p, "x", lt_zeros(LT_DTYPE_F32, LT_SHAPE(-1)), 0), LT_ERR_INVALID, NULL);
  ck_assert_int_eq(lt_params_count(p), 1);
  ck_assert(!w2->requires_grad);
  lt_tensor_free(w2);
  lt_tensor_free(ids);
  lt_params_free(p);
  ck_assert_int_eq(lt__live_tensors(), live0);
}
END_TEST

START_TEST(test_store_scope_ownership) {
  int64_t live0 = lt__live_tensors();
  lt_params *p = lt_params_new();
  lt_scope *s = lt_scope_begin();
  lt_tensor *w = lt_randn(NULL, LT_DTYPE_F32, LT_SHAPE(2)); /* NULL generator fails */
  ck_assert(!w);
  lt_clear_error();
  w = LT_NN(lt_ones(LT_DTYPE_F32, LT_SHAPE(2, 2)));
  LT_OK_OR_FAIL(lt_params_add(p, "w", w, 0));
  lt_tensor *tmp = LT_NN(lt_ones(LT_DTYPE_F32, LT_SHAPE(3))); /* stays scope-owned */
  (void)tmp;
  lt_scope_end(s);
  /* w survived the scope */
  ck_assert_int_eq(lt__live_tensors(), live0 + 1);
  LT_ASSERT_VALUES(w, 0, 1, 1, 1, 1);
  /* a training-style loop: grads owned by the parameter, zeroed by the store */
  for (int it = 0; it < 3; it++) {
    lt_scope *sc = lt_scope_begin();
    lt_tensor *loss = lt_sum(lt_mul(w, w), 0, NULL, false);
    LT_OK_OR_FAIL(lt_backward(loss, NULL, false));
    lt_scope_end(sc);
    ck_assert(w->grad);
    LT_ASSERT_VALUES(w->grad, 0, 2, 2, 2, 2);
    lt_params_zero_grad(p);
    ck_assert(w->grad == NULL);
  }
  lt_params_zero_grad(NULL);
  lt_params_free(p);
  ck_assert_int_eq(lt__live_tensors(), live0);
}
END_TEST

START_TEST(test_store_freeze) {
  lt_params *p = lt_params_new();
  const char *names[] = {"encoder.layers.0.w", "encoder.layers.1.w", "encoder.layers.10.w", "decoder.w"};
  for (int i = 0; i < 4; i++) LT_OK_OR_FAIL(lt_params_add(p, names[i], lt_ones(LT_DTYPE_F32, LT_SHAPE(i + 1)), 0));
  LT_OK_OR_FAIL(lt_params_add(p, "encoder.buf", lt_ones(LT_DTYPE_F32, LT_SHAPE(7)), LT_PARAM_BUFFER));
  ck_assert_int_eq(lt_params_numel(p, false), 10);
  LT_OK_OR_FAIL(lt_params_set_requires_grad(p, "encoder.layers.1.", false));
  ck_assert(!lt_params_find(p, names[1])->requires_grad);
  ck_assert(lt_params_find(p, names[2])->requires_grad); /* the trailing dot separates 1 from 10 */
  ck_assert_int_eq(lt_params_numel(p, true), 8);
  LT_OK_OR_FAIL(lt_params_set_requires_grad(p, "encoder.", false));
  ck_assert_int_eq(lt_params_numel(p, true), 4);
  ck_assert(!lt_params_find(p, "encoder.buf")->requires_grad);
  LT_OK_OR_FAIL(lt_params_set_requires_grad(p, "", true));
  ck_assert_int_eq(lt_params_numel(p, true), 10);
  ck_assert(!lt_params_find(p, "encoder.buf")->requires_grad); /* buffers never */
  LT_OK_OR_FAIL(lt_params_set_requires_grad(p, NULL, false));
  ck_assert_int_eq(lt_params_numel(p, true), 0);
  ck_assert_int_eq(lt_params_numel(p, false), 10);
  LT_EXPECT_ERR(lt_params_set_requires_grad(p, "encodr.", true), LT_ERR_INVALID, "encodr.");
  LT_EXPECT_ERR(lt_params_set_requires_grad(NULL, "", true), LT_ERR_NULL, NULL);
  lt_params_free(p);
}
END_TEST

/* Many names: order kept, every name found (through rehashes). */
START_TEST(test_store_many) {
  lt_params *p = lt_params_new();
  char name[64];
  for (int i = 0; i < 2000; i++) {
    snprintf(name, sizeof name, "layers.%d.w", i);
    LT_OK_OR_FAIL(lt_params_add(p, name, lt_full(LT_DTYPE_F32, LT_SHAPE(1), i), 0));
  }
  ck_assert_int_eq(lt_params_count(p), 2000);
  for (int i = 0; i < 2000; i++) {
    snprintf(name, sizeof name, "layers.%d.w", i);
    ck_assert_str_eq(lt_params_at(p, i)->name, name);
    lt_tensor *t = lt_params_find(p, name);
    ck_assert(t == lt_params_at(p, i)->value);
    ck_assert(((float *)t->data)[0] == (float)i);
  }
  ck_assert(lt_params_find(p, "layers.2000.w") == NULL);
  lt_tensor *dup = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(1)));
  LT_EXPECT_ERR(lt_params_add(p, "layers.1999.w", dup, 0), LT_ERR_INVALID, "already");
  lt_tensor_free(dup);
  lt_params_free(p);
}
END_TEST

START_TEST(test_name_join) {
  char buf[32];
  ck_assert_str_eq(lt_name_join(buf, sizeof buf, "encoder.layers", "0"), "encoder.layers.0");
  ck_assert_str_eq(lt_name_join(buf, sizeof buf, "", "weight"), "weight");
  ck_assert_str_eq(lt_name_join(buf, sizeof buf, NULL, "weight"), "weight");
  ck_assert_str_eq(lt_name_join(buf, sizeof buf, "enc", ""), "enc");
  char small[8];
  ck_assert_str_eq(lt_name_join(small, sizeof small, "encoder", "weight"), "encoder");
  ck_assert(lt_name_join(small, 0, "a", "b") == small);
}
END_TEST

/* ======================================================================== */
/* Initialisers                                                             */
/* ======================================================================== */

static void stats(const lt_tensor *t, double *mean, double *var, double *lo, double *hi) {
  double *v = read_all(t);
  double s = 0, s2 = 0;
  *lo = INFINITY, *hi = -INFINITY;
  for (int64_t i = 0; i < t->numel; i++) {
    s += v[i];
    *lo = fmin(*lo, v[i]);
    *hi = fmax(*hi, v[i]);
  }
  *mean = s / (double)t->numel;
  for (int64_t i = 0; i < t->numel; i++) s2 += (v[i] - *mean) * (v[i] - *mean);
  *var = s2 / (double)(t->numel - 1);
  free(v);
}

START_TEST(test_init_bounds_stats) {
  lt_generator *g = lt_generator_new(42);
  double mean, var, lo, hi;
  /* [out=64, in=32, 3, 2]: fan_in = 192, fan_out = 384 */
  lt_tensor *w = LT_NN(lt_empty(LT_DTYPE_F32, LT_SHAPE(64, 32, 3, 2)));
  LT_OK_OR_FAIL(lt_requires_grad_(w, true)); /* works on a parameter with grad mode on */
  double gain = 1.7, a = gain * sqrt(6.0 / (192 + 384));
  LT_OK_OR_FAIL(lt_init_xavier_uniform_(g, w, gain));
  ck_assert(lt_grad_enabled() && w->grad_fn == NULL);
  stats(w, &mean, &var, &lo, &hi);
  ck_assert_msg(lo >= -a && hi < a && hi > 0.99 * a && lo < -0.99 * a, "xavier_uniform [%g, %g] vs %g", lo, hi, a);
  ck_assert_msg(fabs(var - a * a / 3) < 0.05 * a * a / 3, "xavier_uniform var %g, want %g", var, a * a / 3);
  ck_assert(fabs(mean) < 0.05 * a);

  double sd = gain * sqrt(2.0 / (192 + 384));
  LT_OK_OR_FAIL(lt_init_xavier_normal_(g, w, gain));
  stats(w, &mean, &var, &lo, &hi);
  ck_assert_msg(fabs(sqrt(var) - sd) < 0.03 * sd, "xavier_normal std %g, want %g", sqrt(var), sd);
  ck_assert(fabs(mean) < 0.05 * sd);

  /* kaiming_uniform_(a=sqrt(5)) on [out, in] is U(-1/sqrt(in), 1/sqrt(in)) */
  lt_tensor *k = LT_NN(lt_empty(LT_DTYPE_F64, LT_SHAPE(300, 50)));
  LT_OK_OR_FAIL(lt_init_kaiming_uniform_(g, k, sqrt(5.0)));
  double bnd = 1 / sqrt(50.0);
  stats(k, &mean, &var, &lo, &hi);
  ck_assert_msg(lo >= -bnd && hi < bnd && hi > 0.99 * bnd && lo < -0.99 * bnd, "kaiming [%g, %g] vs %g", lo, hi,
                bnd);
  /* a = 0: bound sqrt(6 / fan_in) */
  LT_OK_OR_FAIL(lt_init_kaiming_uniform_(g, k, 0));
  bnd = sqrt(6.0 / 50);
  stats(k, &mean, &var, &lo, &hi);
  ck_assert(lo >= -bnd && hi < bnd && hi > 0.99 * bnd);
  ck_assert_msg(fabs(var - bnd * bnd / 3) < 0.05 * bnd * bnd / 3, "kaiming var %g", var);

  LT_OK_OR_FAIL(lt_init_normal_(g, k, 0.5, 0.02));
  stats(k, &mean, &var, &lo, &hi);
  ck_assert_msg(fabs(mean - 0.5) < 0.002 && fabs(sqrt(var) - 0.02) < 0.001, "normal mean %g std %g", mean,
                sqrt(var));
  /* normal_ works on 1-d tensors too */
  lt_tensor *v = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(5)));
  LT_OK_OR_FAIL(lt_init_normal_(g, v, 0, 1));
  lt_tensor_free(v);
  lt_tensor_free(w);
  lt_tensor_free(k);
  lt_generator_free(g);
}
END_TEST

START_TEST(test_init_reproducible_and_errors) {
  lt_generator *g1 = lt_generator_new(7), *g2 = lt_generator_new(7);
  lt_tensor *a = LT_NN(lt_empty(LT_DTYPE_F32, LT_SHAPE(4, 6)));
  lt_tensor *b = LT_NN(lt_empty(LT_DTYPE_F32, LT_SHAPE(4, 6)));
  LT_OK_OR_FAIL(lt_init_kaiming_uniform_(g1, a, sqrt(5.0)));
  /* the same draw as lt_uniform_ with the bound: U(-1/sqrt(6), 1/sqrt(6)) */
  LT_OK_OR_FAIL(lt_uniform_(g2, b, -1 / sqrt(6.0), 1 / sqrt(6.0)));
  ck_assert(lt_equal(a, b));
  /* zero-element tensors: no-op, the generator does not move */
  lt_generator_state st = lt_generator_get_state(g1);
  lt_tensor *z = LT_NN(lt_empty(LT_DTYPE_F32, LT_SHAPE(0, 3)));
  LT_OK_OR_FAIL(lt_init_kaiming_uniform_(g1, z, sqrt(5.0)));
  LT_OK_OR_FAIL(lt_init_xavier_uniform_(g1, z, 1));
  LT_OK_OR_FAIL(lt_init_xavier_normal_(g1, z, 1));
  LT_OK_OR_FAIL(lt_init_normal_(g1, z, 0, 1));
  ck_assert(lt_generator_get_state(g1).offset == st.offset);
  /* errors */
  lt_tensor *one = LT_NN(lt_empty(LT_DTYPE_F32, LT_SHAPE(5)));
  LT_EXPECT_ERR(lt_init_xavier_uniform_(g1, one, 1), LT_ERR_SHAPE, "fewer than 2 dimensions");
  LT_EXPECT_ERR(lt_init_xavier_normal_(g1, one, 1), LT_ERR_SHAPE, "fewer than 2 dimensions");
  LT_EXPECT_ERR(lt_init_kaiming_uniform_(g1, one, 1), LT_ERR_SHAPE, "[5] f32");
  LT_EXPECT_ERR(lt_init_xavier_uniform_(g1, a, -1), LT_ERR_INVALID, "gain");
  LT_EXPECT_ERR(lt_init_normal_(g1, a, 0, -1), LT_ERR_INVALID, "std");
  LT_EXPECT_ERR(lt_init_kaiming_uniform_(g1, a, NAN), LT_ERR_INVALID, "a = nan");
  LT_EXPECT_ERR(lt_init_normal_(NULL, a, 0, 1), LT_ERR_NULL, "g");
  LT_EXPECT_ERR(lt_init_normal_(g1, NULL, 0, 1), LT_ERR_NULL, "w");
  lt_tensor *ints = LT_NN(lt_zeros(LT_DTYPE_I32, LT_SHAPE(2, 2)));
  LT_EXPECT_ERR(lt_init_xavier_uniform_(g1, ints, 1), LT_ERR_DTYPE, "float");
  LT_ASSERT_VALUES(ints, 0, 0, 0, 0, 0);
  lt_tensor_free(ints);
  lt_tensor_free(one);
  lt_tensor_free(z);
  lt_tensor_free(a);
  lt_tensor_free(b);
  lt_generator_free(g1);
  lt_generator_free(g2);
}
END_TEST

/* ======================================================================== */
/* Modules                                                                  */
/* ======================================================================== */

static void expect_entry(const lt_params *p, int i, const char *name, unsigned flags, int ndim,
                         const int64_t *shape) {
  const lt_param *q = lt_params_at(p, i);
  ck_assert_msg(q != NULL, "entry %d missing", i);
  ck_assert_str_eq(q->name, name);
  ck_assert_msg(q->flags == flags, "%s: flags %u, want %u", name, q->flags, flags);
  lt_test_assert_shape(q->value, ndim, shape, name, __FILE__, __LINE__);
  ck_assert(q->value->dtype == LT_DTYPE_F32 && q->value->requires_grad);
}

START_TEST(test_linear) {
  lt_generator *g = lt_generator_new(3), *g2 = lt_generator_new(3);
  lt_params *p = lt_params_new();
  lt_linear_m lin, nob;
  LT_OK_OR_FAIL(lt_linear_init(&lin, p, "enc.proj", 5, 3, true, g));
  LT_OK_OR_FAIL(lt_linear_init(&nob, p, "head", 3, 2, false, g));
  ck_assert_int_eq(lt_params_count(p), 3);
  expect_entry(p, 0, "enc.proj.weight", LT_PARAM_QUANTIZABLE, LT_SHAPE(3, 5));
  expect_entry(p, 1, "enc.proj.bias", LT_PARAM_NO_DECAY, LT_SHAPE(3));
  expect_entry(p, 2, "head.weight", LT_PARAM_QUANTIZABLE, LT_SHAPE(2, 3));
  ck_assert(lin.weight == lt_params_find(p, "enc.proj.weight") && lin.bias == lt_params_find(p, "enc.proj.bias"));
  ck_assert(nob.bias == NULL);
  /* PyTorch's order and bounds: weight U(+-1/sqrt(in)), then bias U(+-1/sqrt(in)) */
  lt_tensor *w = LT_NN(lt_uniform(g2, LT_DTYPE_F32, LT_SHAPE(3, 5), -1 / sqrt(5.0), 1 / sqrt(5.0)));
  lt_tensor *b = LT_NN(lt_uniform(g2, LT_DTYPE_F32, LT_SHAPE(3), -1 / sqrt(5.0), 1 / sqrt(5.0)));
  ck_assert(lt_equal(lin.weight, w) && lt_equal(lin.bias, b));
  /* forward = x W^T + b */
  lt_tensor *x = LT_NN(lt_randn(g2, LT_DTYPE_F32, LT_SHAPE(2, 4, 5)));
  lt_tensor *y = LT_NN(lt_linear_forward(&lin, x));
  lt_tensor *wt = LT_NN(lt_transpose(lin.weight, 0, 1));
  lt_tensor *xw = LT_NN(lt_matmul(x, wt));
  lt_tensor *ref = LT_NN(lt_add(xw, lin.bias));
  LT_ASSERT_CLOSE(y, ref, 1e-5, 1e-6);
  lt_tensor *y2 = LT_NN(lt_linear_forward(&nob, y));
  LT_ASSERT_SHAPE(y2, 2, 4, 2);
  LT_EXPECT_NULL_ERR(lt_linear_forward(&lin, NULL), LT_ERR_NULL, NULL);
  LT_EXPECT_NULL_ERR(lt_linear_forward(NULL, x), LT_ERR_NULL, "module");
  /* errors: nothing registered, generator untouched */
  lt_generator_state st = lt_generator_get_state(g);
  lt_linear_m bad = {0};
  LT_EXPECT_ERR(lt_linear_init(&bad, p, "enc.proj", 5, 3, true, g), LT_ERR_INVALID, "enc.proj.weight");
  LT_EXPECT_ERR(lt_linear_init(&bad, p, "x", -1, 3, true, g), LT_ERR_INVALID, "in -1");
  LT_EXPECT_ERR(lt_linear_init(&bad, p, "x", 1, 3, true, NULL), LT_ERR_NULL, "g");
  LT_EXPECT_ERR(lt_linear_init(&bad, NULL, "x", 1, 3, true, g), LT_ERR_NULL, "store");
  LT_EXPECT_ERR(lt_linear_init(&bad, p, NULL, 1, 3, true, g), LT_ERR_NULL, "name");
  LT_EXPECT_ERR(lt_linear_init(NULL, p, "x", 1, 3, true, g), LT_ERR_NULL, "struct");
  ck_assert(bad.weight == NULL);
  ck_assert_int_eq(lt_params_count(p), 3);
  ck_assert(lt_generator_get_state(g).offset == st.offset);
  /* bias registration fails after the weight was made: roll-back */
  LT_OK_OR_FAIL(lt_params_add(p, "dup.bias", lt_zeros(LT_DTYPE_F32, LT_SHAPE(1)), 0));
  LT_EXPECT_ERR(lt_linear_init(&bad, p, "dup", 2, 2, true, g), LT_ERR_INVALID, "dup.bias");
  ck_assert_int_eq(lt_params_count(p), 4);
  ck_assert(lt_params_find(p, "dup.weight") == NULL);
  ck_assert(lt_generator_get_state(g).offset == st.offset);
  ck_assert(bad.weight == NULL);
  lt_tensor *objs[] = {w, b, x, y, wt, xw, ref, y2};
  for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++) lt_tensor_free(objs[i]);
  lt_params_free(p);
  lt_generator_free(g);
  lt_generator_free(g2);
}
END_TEST

START_TEST(test_embedding) {
  lt_generator *g = lt_generator_new(11);
  lt_params *p = lt_params_new();
  lt_embedding_m e, big;
  LT_OK_OR_FAIL(lt_embedding_init(&e, p, "tok_emb", 6, 4, 2, g));
  LT_OK_OR_FAIL(lt_embedding_init(&big, p, "big", 500, 100, -1, g));
  expect_entry(p, 0, "tok_emb.weight", LT_PARAM_NO_DECAY | LT_PARAM_QUANTIZABLE, LT_SHAPE(6, 4));
  ck_assert(e.padding_idx == 2 && big.padding_idx == -1);
  /* N(0, 1), the padding row zero */
  double mean, var, lo, hi;
  stats(big.weight, &mean, &var, &lo, &hi);
  ck_assert_msg(fabs(mean) < 0.02 && fabs(var - 1) < 0.03, "embedding mean %g var %g", mean, var);
  lt_tensor *row2 = LT_NN(lt_select(e.weight, 0, 2));
  LT_ASSERT_VALUES(row2, 0, 0, 0, 0, 0);
  /* forward = rows; the padding row gets no gradient from this lookup */
  lt_tensor *ids = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(2, 3), (int64_t[]){0, 2, 5, 2, 2, 0}));
  lt_tensor *y = LT_NN(lt_embedding_forward(&e, ids));
  lt_tensor *ref = LT_NN(lt_embedding(e.weight, ids));
  LT_ASSERT_SHAPE(y, 2, 3, 4);
  ck_assert(lt_equal(y, ref));
  lt_scope *s = lt_scope_begin();
  lt_tensor *wts = LT_NN(lt_arange(LT_DTYPE_F32, 1, 25, 1));
  lt_tensor *wts3 = LT_NN(lt_reshape(wts, LT_SHAPE(2, 3, 4)));
  lt_tensor *l = LT_NN(lt_sum(lt_mul(y, wts3), 0, NULL, false));
  LT_OK_OR_FAIL(lt_backward(l, NULL, false));
  /* row 0 is used at (0,0) [1..4] and (1,2) [21..24]; row 5 at (0,2) [9..12] */
  LT_ASSERT_VALUES(e.weight->grad, 0, 22, 24, 26, 28, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 10, 11, 12);
  /* a tied use of the weight still reaches the padding row (as PyTorch) */
  lt_zero_grad(e.weight);
  lt_tensor *y2 = LT_NN(lt_embedding_forward(&e, ids));
  lt_tensor *l2 = LT_NN(lt_add(lt_sum(y2, 0, NULL, false), lt_sum(e.weight, 0, NULL, false)));
  LT_OK_OR_FAIL(lt_backward(l2, NULL, false));
  LT_ASSERT_VALUES(e.weight->grad, 0, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2);
  /* without padding ids, or under no-grad, the plain lookup */
  lt_tensor *ids2 = LT_NN(lt_tensor_from_copy(LT_DTYPE_I32, LT_SHAPE(2), (int32_t[]){1, 3}));
  lt_tensor *y3 = LT_NN(lt_embedding_forward(&e, ids2));
  ck_assert(y3->grad_fn && lt_equal(y3, lt_embedding(e.weight, ids2)));
  lt_scope_end(s);
  bool prev = lt_set_grad_enabled(false);
  lt_tensor *y4 = LT_NN(lt_embedding_forward(&e, ids));
  lt_set_grad_enabled(prev);
  ck_assert(lt_equal(y4, ref) && !y4->requires_grad);
  /* errors */
  lt_tensor *bad_ids = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(1), (int64_t[]){6}));
  LT_EXPECT_NULL_ERR(lt_embedding_forward(&e, bad_ids), LT_ERR_INDEX, "6");
  LT_EXPECT_NULL_ERR(lt_embedding_forward(&e, NULL), LT_ERR_NULL, NULL);
  lt_embedding_m bad = {0};
  LT_EXPECT_ERR(lt_embedding_init(&bad, p, "x", 6, 4, 6, g), LT_ERR_INDEX, "padding_idx 6");
  LT_EXPECT_ERR(lt_embedding_init(&bad, p, "x", 6, 4, -2, g), LT_ERR_INDEX, "padding_idx -2");
  LT_EXPECT_ERR(lt_embedding_init(&bad, p, "x", -6, 4, -1, g), LT_ERR_INVALID, "num -6");
  LT_EXPECT_ERR(lt_embedding_init(&bad, p, "tok_emb", 6, 4, -1, g), LT_ERR_INVALID, "tok_emb.weight");
  ck_assert(bad.weight == NULL);
  ck_assert_int_eq(lt_params_count(p), 2);
  lt_tensor *objs[] = {row2, ids, y, ref, y4, bad_ids};
  for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++) lt_tensor_free(objs[i]);
  lt_params_free(p);
  lt_generator_free(g);
}
END_TEST

/* (x - mean) / sqrt(var + eps) * w + b over the last dim, by tensor ops. */
static lt_tensor *ref_layer_norm(const lt_tensor *x, const lt_tensor *w, const lt_tensor *b, double eps) {
  lt_scope *s = lt_scope_begin();
  lt_tensor *mu = lt_mean(x, LT_DIMS(-1), true);
  lt_tensor *xc = lt_sub(x, mu);
  lt_tensor *var = lt_mean(lt_square(xc), LT_DIMS(-1), true);
  lt_tensor *y = lt_div(xc, lt_sqrt(lt_add_scalar(var, eps)));
  if (w) y = lt_mul(y, w);
  if (b) y = lt_add(y, b);
  lt_tensor_keep(y);
  lt_scope_end(s);
  return y;
}

START_TEST(test_norms) {
  lt_generator *g = lt_generator_new(5);
  lt_params *p = lt_params_new();
  lt_layer_norm_m ln, ln0;
  lt_rms_norm_m rms;
  LT_OK_OR_FAIL(lt_layer_norm_init(&ln, p, "norm1", 6, 1e-5, true));
  LT_OK_OR_FAIL(lt_layer_norm_init(&ln0, p, "norm_plain", 6, 1e-6, false));
  LT_OK_OR_FAIL(lt_rms_norm_init(&rms, p, "attention_norm", 6, 1e-6));
  ck_assert_int_eq(lt_params_count(p), 3);
  expect_entry(p, 0, "norm1.weight", LT_PARAM_NO_DECAY, LT_SHAPE(6));
  expect_entry(p, 1, "norm1.bias", LT_PARAM_NO_DECAY, LT_SHAPE(6));
  expect_entry(p, 2, "attention_norm.weight", LT_PARAM_NO_DECAY, LT_SHAPE(6));
  LT_ASSERT_VALUES(ln.weight, 0, 1, 1, 1, 1, 1, 1);
  LT_ASSERT_VALUES(ln.bias, 0, 0, 0, 0, 0, 0, 0);
  LT_ASSERT_VALUES(rms.weight, 0, 1, 1, 1, 1, 1, 1);
  ck_assert(ln0.weight == NULL && ln0.bias == NULL && ln.eps == 1e-5 && rms.eps == 1e-6);
  /* non-trivial affine parameters */
  bool prev = lt_set_grad_enabled(false);
  LT_OK_OR_FAIL(lt_normal_(g, ln.weight, 1, 0.3));
  LT_OK_OR_FAIL(lt_normal_(g, ln.bias, 0, 0.3));
  LT_OK_OR_FAIL(lt_normal_(g, rms.weight, 1, 0.3));
  lt_set_grad_enabled(prev);
  lt_tensor *x = LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(3, 2, 6)));
  lt_tensor *y = LT_NN(lt_layer_norm_forward(&ln, x));
  lt_tensor *r = ref_layer_norm(x, ln.weight, ln.bias, 1e-5);
  LT_ASSERT_CLOSE(y, r, 1e-5, 1e-5);
  lt_tensor *y0 = LT_NN(lt_layer_norm_forward(&ln0, x));
  lt_tensor *r0 = ref_layer_norm(x, NULL, NULL, 1e-6);
  LT_ASSERT_CLOSE(y0, r0, 1e-5, 1e-5);
  lt_tensor *yr = LT_NN(lt_rms_norm_forward(&rms, x));
  lt_scope *s = lt_scope_begin();
  lt_tensor *rr = lt_tensor_keep(
      lt_mul(lt_mul(x, lt_rsqrt(lt_add_scalar(lt_mean(lt_square(x), LT_DIMS(-1), true), 1e-6))), rms.weight));
  lt_scope_end(s);
  LT_ASSERT_CLOSE(yr, rr, 1e-5, 1e-5);
  /* errors */
  lt_layer_norm_m bad = {0};
  LT_EXPECT_ERR(lt_layer_norm_init(&bad, p, "n", 6, -1, true), LT_ERR_INVALID, "eps");
  LT_EXPECT_ERR(lt_layer_norm_init(&bad, p, "n", -6, 1e-5, true), LT_ERR_INVALID, "C -6");
  LT_EXPECT_ERR(lt_rms_norm_init(&rms, p, "n", 6, NAN), LT_ERR_INVALID, "eps");
  /* bias clash rolls the weight back */
  LT_OK_OR_FAIL(lt_params_add(p, "n.bias", lt_zeros(LT_DTYPE_F32, LT_SHAPE(6)), 0));
  LT_EXPECT_ERR(lt_layer_norm_init(&bad, p, "n", 6, 1e-5, true), LT_ERR_INVALID, "n.bias");
  ck_assert(lt_params_find(p, "n.weight") == NULL && bad.weight == NULL);
  LT_EXPECT_NULL_ERR(lt_layer_norm_forward(NULL, x), LT_ERR_NULL, NULL);
  LT_EXPECT_NULL_ERR(lt_rms_norm_forward(NULL, x), LT_ERR_NULL, NULL);
  lt_tensor *objs[] = {x, y, r, y0, r0, yr, rr};
  for (size_t i = 0; i < sizeof objs / sizeof objs[0]; i++) lt_tensor_free(objs[i]);
  lt_params_free(p);
  lt_generator_free(g);
}
END_TEST

START_TEST(test_activations) {
  lt_generator *g = lt_generator_new(9);
  lt_tensor *x = LT_NN(lt_randn(g, LT_DTYPE_F64, LT_SHAPE(4, 5)));
  lt_tensor *(*fn[])(const lt_tensor *) = {lt_relu, lt_gelu, lt_gelu_tanh, lt_silu};
  lt_activation acts[] = {LT_ACT_RELU, LT_ACT_GELU, LT_ACT_GELU_TANH, LT_ACT_SILU};
  for (int i = 0; i < 4; i++) {
    lt_tensor *a = LT_NN(lt_activation_forward(acts[i], x)), *b = LT_NN(fn[i](x));
    ck_assert(lt_equal(a, b));
    lt_tensor_free(a);
    lt_tensor_free(b);
  }
  LT_EXPECT_NULL_ERR(lt_activation_forward((lt_activation)17, x), LT_ERR_INVALID, "unknown activation 17");
  LT_EXPECT_NULL_ERR(lt_activation_forward(LT_ACT_RELU, NULL), LT_ERR_NULL, NULL);
  LT_EXPECT_NULL_ERR(lt_activation_forward((lt_activation)17, NULL), LT_ERR_NULL, NULL);
  lt_tensor_free(x);
  lt_generator_free(g);
}
END_TEST

START_TEST(test_ffn) {
  lt_generator *g = lt_generator_new(21);
  lt_params *p = lt_params_new();
  lt_ffn f, sw;
  LT_OK_OR_FAIL(lt_ffn_init(&f, p, "encoder.layers.0", 4, 8, LT_ACT_GELU, false, true, 0.25, g));
  LT_OK_OR_FAIL(lt_ffn_init(&sw, p, "layers.0.feed_forward", 4, 6, LT_ACT_SILU, true, false, 0, g));
  ck_assert_int_eq(lt_params_count(p), 7);
  expect_entry(p, 0, "encoder.layers.0.linear1.weight", LT_PARAM_QUANTIZABLE, LT_SHAPE(8, 4));
  expect_entry(p, 1, "encoder.layers.0.linear1.bias", LT_PARAM_NO_DECAY, LT_SHAPE(8));
  expect_entry(p, 2, "encoder.layers.0.linear2.weight", LT_PARAM_QUANTIZABLE, LT_SHAPE(4, 8));
  expect_entry(p, 3, "encoder.layers.0.linear2.bias", LT_PARAM_NO_DECAY, LT_SHAPE(4));
  expect_entry(p, 4, "layers.0.feed_forward.w1.weight", LT_PARAM_QUANTIZABLE, LT_SHAPE(6, 4));
  expect_entry(p, 5, "layers.0.feed_forward.w2.weight", LT_PARAM_QUANTIZABLE, LT_SHAPE(4, 6));
  expect_entry(p, 6, "layers.0.feed_forward.w3.weight", LT_PARAM_QUANTIZABLE, LT_SHAPE(6, 4));
  ck_assert(sw.linear1.weight == lt_params_find(p, "layers.0.feed_forward.w1.weight"));
  ck_assert(sw.linear2.weight == lt_params_find(p, "layers.0.feed_forward.w2.weight"));
  ck_assert(sw.linear3.weight == lt_params_find(p, "layers.0.feed_forward.w3.weight"));
  ck_assert(sw.linear1.bias == NULL && f.linear3.weight == NULL && f.dropout == 0.25 && sw.swiglu);
  /* bounds: linear2's in is d_ff */
  double *w2 = read_all(f.linear2.weight);
  for (int i = 0; i < 32; i++) ck_assert(fabs(w2[i]) < 1 / sqrt(8.0));
  free(w2);

  lt_tensor *x = LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(2, 3, 4)));
  lt_scope *s = lt_scope_begin();
  /* eval: no dropout */
  lt_tensor *y = LT_NN(lt_ffn_forward(&f, x, NULL));
  lt_tensor *r = lt_linear(lt_gelu(lt_linear(x, f.linear1.weight, f.linear1.bias)), f.linear2.weight, f.linear2.bias);
  LT_ASSERT_CLOSE(y, r, 1e-6, 1e-6);
  lt_nn_ctx eval = {false, g};
  LT_ASSERT_CLOSE(LT_NN(lt_ffn_forward(&f, x, &eval)), r, 1e-6, 1e-6);
  /* training: dropout on the hidden activations, drawn from ctx->gen */
  lt_generator *ga = lt_generator_new(99), *gb = lt_generator_new(99);
  lt_nn_ctx ta = {true, ga}, tb = {true, gb};
  lt_tensor *yt = LT_NN(lt_ffn_forward(&f, x, &ta));
  lt_tensor *h = lt_dropout(lt_gelu(lt_linear(x, f.linear1.weight, f.linear1.bias)), 0.25, &tb);
  lt_tensor *rt = lt_linear(h, f.linear2.weight, f.linear2.bias);
  LT_ASSERT_CLOSE(yt, rt, 1e-6, 1e-6);
  ck_assert(!lt_allclose(yt, r, 1e-3, 1e-3, false));
  /* SwiGLU: w2(silu(w1 x) * w3 x) */
  lt_tensor *ys = LT_NN(lt_ffn_forward(&sw, x, &ta));
  lt_tensor *rs = lt_linear(lt_mul(lt_silu(lt_linear(x, sw.linear1.weight, NULL)), lt_linear(x, sw.linear3.weight, NULL)),
                            sw.linear2.weight, NULL);
  LT_ASSERT_CLOSE(ys, rs, 1e-6, 1e-6);
  /* gradients reach every parameter */
  LT_OK_OR_FAIL(lt_backward(lt_sum(lt_add(yt, ys), 0, NULL, false), NULL, false));
  for (int i = 0; i < lt_params_count(p); i++) ck_assert_msg(lt_params_at(p, i)->value->grad, "no grad for %d", i);
  LT_EXPECT_NULL_ERR(lt_ffn_forward(&f, NULL, NULL), LT_ERR_NULL, NULL);
  LT_EXPECT_NULL_ERR(lt_ffn_forward(NULL, x, NULL), LT_ERR_NULL, "module");
  lt_scope_end(s);
  lt_generator_free(ga);
  lt_generator_free(gb);

  /* errors and roll-back: w3 clashes after w1 and w2 were registered */
  lt_ffn bad = {0};
  LT_EXPECT_ERR(lt_ffn_init(&bad, p, "m", 4, 8, (lt_activation)9, false, false, 0, g), LT_ERR_INVALID,
                "unknown activation");
  LT_EXPECT_ERR(lt_ffn_init(&bad, p, "m", 4, 8, LT_ACT_RELU, false, false, 1.5, g), LT_ERR_INVALID, "dropout");
  LT_EXPECT_ERR(lt_ffn_init(&bad, p, "m", 4, -8, LT_ACT_RELU, false, false, 0, g), LT_ERR_INVALID, "d_ff -8");
  LT_OK_OR_FAIL(lt_params_add(p, "m.w3.weight", lt_zeros(LT_DTYPE_F32, LT_SHAPE(1)), 0));
  int n0 = lt_params_count(p);
  lt_generator_state st = lt_generator_get_state(g);
  LT_EXPECT_ERR(lt_ffn_init(&bad, p, "m", 4, 8, LT_ACT_SILU, true, false, 0, g), LT_ERR_INVALID, "m.w3.weight");
  ck_assert_int_eq(lt_params_count(p), n0);
  ck_assert(lt_params_find(p, "m.w1.weight") == NULL && lt_params_find(p, "m.w2.weight") == NULL);
  ck_assert(lt_generator_get_state(g).offset == st.offset);
  ck_assert(bad.linear1.weight == NULL);
  lt_tensor_free(x);
  lt_params_free(p);
  lt_generator_free(g);
}
END_TEST

/* A whole small model built, trained a step and freed leaks nothing. */
START_TEST(test_modules_no_leak) {
  int64_t live0 = lt__live_tensors(), st0 = lt__live_storages();
  lt_generator *g = lt_generator_new(1);
  lt_params *p = lt_params_new();
  lt_embedding_m emb;
  lt_layer_norm_m ln;
  lt_ffn ff;
  lt_linear_m head;
  LT_OK_OR_FAIL(lt_embedding_init(&emb, p, "emb", 10, 8, 0, g));
  LT_OK_OR_FAIL(lt_layer_norm_init(&ln, p, "ln", 8, 1e-5, true));
  LT_OK_OR_FAIL(lt_ffn_init(&ff, p, "ff", 8, 16, LT_ACT_RELU, false, true, 0.1, g));
  LT_OK_OR_FAIL(lt_linear_init(&head, p, "head", 8, 10, false, g));
  lt_nn_ctx ctx = {true, g};
  for (int it = 0; it < 2; it++) {
    lt_scope *s = lt_scope_begin();
    lt_tensor *ids = lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(2, 3), (int64_t[]){1, 0, 4, 9, 0, 3});
    lt_tensor *h = lt_embedding_forward(&emb, ids);
    h = lt_add(h, lt_ffn_forward(&ff, lt_layer_norm_forward(&ln, h), &ctx));
    lt_tensor *logits = lt_linear_forward(&head, h);
    LT_OK_OR_FAIL(lt_backward(lt_mean(lt_square(logits), 0, NULL, false), NULL, false));
    lt_scope_end(s);
    lt_tensor *row0 = LT_NN(lt_select(emb.weight->grad, 0, 0));
    LT_ASSERT_VALUES(row0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    lt_tensor_free(row0);
    lt_params_zero_grad(p);
  }
  lt_params_free(p);
  lt_generator_free(g);
  ck_assert_int_eq(lt__live_tensors(), live0);
  ck_assert_int_eq(lt__live_storages(), st0);
}
END_TEST

/* ======================================================================== */
/* lt_params_to_dtype (model.double())                                      */
/* ======================================================================== */

START_TEST(test_to_dtype) {
  int64_t live0 = lt__live_tensors();
  lt_params *p = lt_params_new();
  lt_generator *g = lt_generator_new(3);
  lt_linear_m lin;
  LT_OK_OR_FAIL(lt_linear_init(&lin, p, "fc", 3, 2, true, g));
  lt_tensor *base = LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(4, 3)));
  lt_tensor *tr = LT_NN(lt_transpose(base, 0, 1)); /* [3, 4], strided, sole user once base is freed */
  lt_tensor *strided = LT_NN(lt_detach(tr));
  lt_tensor_free(tr);
  lt_tensor_free(base);
  LT_OK_OR_FAIL(lt_params_add(p, "strided", strided, 0));
  LT_OK_OR_FAIL(lt_params_add(p, "ids", LT_NN(lt_arange(LT_DTYPE_I64, 0, 5, 1)), LT_PARAM_BUFFER));
  LT_OK_OR_FAIL(lt_params_add(p, "pe", LT_NN(lt_randn(g, LT_DTYPE_F32, LT_SHAPE(2, 2))), LT_PARAM_BUFFER));
  ck_assert(!lt_is_contiguous(strided));
  lt_tensor *w0 = LT_NN(lt_to_dtype(lin.weight, LT_DTYPE_F64)), *s0 = LT_NN(lt_to_dtype(strided, LT_DTYPE_F64));
  lt_tensor *pe0 = LT_NN(lt_to_dtype(lt_params_find(p, "pe"), LT_DTYPE_F64));
  /* A gradient from before the conversion; a live graph that saved the
   * weight blocks the conversion until it is freed. */
  lt_tensor *x = LT_NN(lt_ones(LT_DTYPE_F32, LT_SHAPE(1, 3)));
  lt_scope *sc = lt_scope_begin();
  lt_tensor *loss = LT_NN(lt_sum(LT_NN(lt_linear_forward(&lin, x)), 0, NULL, false));
  LT_EXPECT_ERR(lt_params_to_dtype(p, LT_DTYPE_F64), LT_ERR_INVALID, "recorded graph that saved it");
  ck_assert_int_eq(lin.weight->dtype, LT_DTYPE_F32);
  LT_OK_OR_FAIL(lt_backward(loss, NULL, false));
  lt_scope_end(sc);
  ck_assert(lin.weight->grad != NULL);
  lt_tensor *wptr = lin.weight;

  LT_OK_OR_FAIL(lt_params_to_dtype(p, LT_DTYPE_F64));
  ck_assert(lin.weight == wptr && lt_params_find(p, "fc.weight") == wptr); /* identity kept */
  ck_assert_int_eq(lin.weight->dtype, LT_DTYPE_F64);
  ck_assert_int_eq(lin.bias->dtype, LT_DTYPE_F64);
  ck_assert(lin.weight->requires_grad && lin.weight->grad == NULL);
  ck_assert(lt_equal(lin.weight, w0));
  ck_assert(lt_is_contiguous(strided) && lt_equal(strided, s0) && strided->dtype == LT_DTYPE_F64);
  ck_assert(lt_equal(lt_params_find(p, "pe"), pe0));
  ck_assert(!lt_params_find(p, "pe")->requires_grad);
  ck_assert_int_eq(lt_params_find(p, "ids")->dtype, LT_DTYPE_I64);
  /* The module works in f64, gradients included; converting back and again to
   * the same dtype are fine. */
  sc = lt_scope_begin();
  lt_tensor *x64 = LT_NN(lt_ones(LT_DTYPE_F64, LT_SHAPE(1, 3)));
  lt_tensor *y = LT_NN(lt_linear_forward(&lin, x64));
  ck_assert_int_eq(y->dtype, LT_DTYPE_F64);
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_sum(y, 0, NULL, false)), NULL, false));
  lt_scope_end(sc);
  ck_assert_int_eq(lin.weight->grad->dtype, LT_DTYPE_F64);
  LT_OK_OR_FAIL(lt_params_to_dtype(p, LT_DTYPE_F64));
  ck_assert(lin.weight->grad != NULL); /* nothing to convert: grads kept */
  /* Errors change nothing. */
  LT_EXPECT_ERR(lt_params_to_dtype(p, LT_DTYPE_I32), LT_ERR_DTYPE, "float dtype, not i32");
  LT_EXPECT_ERR(lt_params_to_dtype(p, (lt_dtype)99), LT_ERR_DTYPE, "invalid");
  LT_EXPECT_ERR(lt_params_to_dtype(NULL, LT_DTYPE_F64), LT_ERR_NULL, NULL);
  lt_tensor *view = LT_NN(lt_reshape(lin.bias, LT_SHAPE(2, 1))); /* shares bias's memory */
  LT_EXPECT_ERR(lt_params_to_dtype(p, LT_DTYPE_F32), LT_ERR_INVALID, "'fc.bias' is");
  ck_assert_int_eq(lin.weight->dtype, LT_DTYPE_F64);
  ck_assert(lin.weight->grad != NULL);
  lt_tensor_free(view);
  LT_OK_OR_FAIL(lt_params_to_dtype(p, LT_DTYPE_F32));
  ck_assert_int_eq(lin.weight->dtype, LT_DTYPE_F32);
  lt_tensor *w32 = LT_NN(lt_to_dtype(w0, LT_DTYPE_F32));
  ck_assert(lt_equal(lin.weight, w32));
  lt_tensor_free(w32);
  lt_tensor_free(x);
  lt_tensor_free(w0);
  lt_tensor_free(s0);
  lt_tensor_free(pe0);
  lt_generator_free(g);
  lt_params_free(p);
  ck_assert_int_eq(lt__live_tensors(), live0);
}
END_TEST

/* With an optimizer: one made before the conversion works while it has no
 * state (its state is made in the new dtype); with state of the old dtype it
 * refuses to step, naming the fix; one made after works. */
START_TEST(test_to_dtype_optimizer) {
  lt_params *p = lt_params_new();
  LT_OK_OR_FAIL(lt_params_add(p, "w", LT_NN(lt_full(LT_DTYPE_F32, LT_SHAPE(3), 2.0)), 0));
  lt_tensor *w = lt_params_find(p, "w");
  lt_optim_config c = lt_optim_defaults(LT_OPTIM_ADAMW);
  lt_optimizer *o = lt_optimizer_new(p, &c);
  LT_OK_OR_FAIL(lt_params_to_dtype(p, LT_DTYPE_F64));
  w->grad = LT_NN(lt_ones(LT_DTYPE_F64, LT_SHAPE(3)));
  LT_OK_OR_FAIL(lt_optimizer_step(o));
  ck_assert_int_eq(lt_optimizer_state(o, "w", "exp_avg")->dtype, LT_DTYPE_F64);
  LT_OK_OR_FAIL(lt_params_to_dtype(p, LT_DTYPE_F32));
  lt_tensor *before = LT_NN(lt_clone(w));
  w->grad = LT_NN(lt_ones(LT_DTYPE_F32, LT_SHAPE(3)));
  LT_EXPECT_ERR(lt_optimizer_step(o), LT_ERR_DTYPE, "make the optimizer after lt_params_to_dtype");
  ck_assert(lt_equal(w, before));
  lt_optimizer_free(o);
  o = lt_optimizer_new(p, &c);
  LT_OK_OR_FAIL(lt_optimizer_step(o));
  ck_assert(!lt_equal(w, before));
  lt_tensor_free(before);
  lt_optimizer_free(o);
  lt_params_free(p);
}
END_TEST

int main(void) {
  Suite *s = suite_create("params");
  TCase *tc = tcase_create("params");
  tcase_add_test(tc, test_store_basics);
  tcase_add_test(tc, test_store_errors);
  tcase_add_test(tc, test_store_scope_ownership);
  tcase_add_test(tc, test_store_freeze);
  tcase_add_test(tc, test_store_many);
  tcase_add_test(tc, test_name_join);
  tcase_add_test(tc, test_init_bounds_stats);
  tcase_add_test(tc, test_init_reproducible_and_errors);
  tcase_add_test(tc, test_linear);
  tcase_add_test(tc, test_embedding);
  tcase_add_test(tc, test_norms);
  tcase_add_test(tc, test_activations);
  tcase_add_test(tc, test_ffn);
  tcase_add_test(tc, test_modules_no_leak);
  tcase_add_test(tc, test_to_dtype);
  tcase_add_test(tc, test_to_dtype_optimizer);
  suite_add_tcase(s, tc);
  return lt_test_run(s);
}
