/*
 * tests/test_index.c: indexing, joining, splitting (tensor/index.c) beyond
 * the op runner. The runner (tests/opinfo_index.inc) checks index_select,
 * gather, scatter_add, embedding, tril, triu, cat, stack and pad against f64
 * references over every dtype, layout and thread count, their error cases
 * and gradchecks. Here: hand values (the PyTorch docs' examples, bool
 * scatter_add, dtype promotion in cat and stack, the legacy 1-d [0] in cat,
 * k beyond the matrix in tril/triu), one_hot, split and chunk, a NULL list,
 * the backwards called directly on the recorded node, duplicate-id
 * accumulation that must not depend on the thread count, and sizes that
 * take every task split of the kernels.
 */
#include <stdlib.h>
#include <string.h>

#include "autograd/internal.h"
#include "test_util.h"
#include "util_layout.h"

/* ---- helpers ------------------------------------------------------------ */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}
static int64_t rnd_int(int64_t lo, int64_t hi) { /* [lo, hi] */
  return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
}

/* Small integer values (exact in every dtype, sums exact in any order). */
static lt_tensor *rand_vals(lt_dtype dt, int nd, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < nd; i++) n *= shape[i];
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++)
    v[i] = dt == LT_DTYPE_BOOL ? (double)rnd_int(0, 1) : (double)rnd_int(-8, 8);
  lt_tensor *t = lt_test_from_f64(dt, nd, shape, v);
  free(v);
  return t;
}

static lt_tensor *rand_ids(lt_dtype dt, int nd, const int64_t *shape, int64_t hi) {
  int64_t n = 1;
  for (int i = 0; i < nd; i++) n *= shape[i];
  int64_t *v = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) v[i] = hi > 0 ? rnd_int(0, hi - 1) : 0;
  lt_tensor *t = lt_test_from_i64(dt, nd, shape, v);
  free(v);
  return t;
}

/* The same values in another layout (tests/util_layout.h). Consume t. */
static lt_tensor *strided(lt_tensor *t) { return lt_test_layout_of(t, LT_TEST_STRIDED); }
static lt_tensor *transposed_layout(lt_tensor *t) { return lt_test_layout_of(t, LT_TEST_TRANSPOSED); }

static void free_all(int n, lt_tensor **ts) {
  for (int i = 0; i < n; i++) lt_tensor_free(ts[i]);
}
#define FREE(...) free_all(LT__NARGS(lt_tensor *, __VA_ARGS__), (lt_tensor *[]){__VA_ARGS__})

/* Same shape and exactly equal values (a local lt_equal, read through
 * lt_tensor_read so it does not depend on the elementwise module). */
static bool equal(const lt_tensor *a, const lt_tensor *b) {
  if (a->ndim != b->ndim || memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) != 0)
    return false;
  int64_t n = a->numel;
  double *va = malloc(sizeof(double) * (size_t)(n ? n : 1)), *vb = malloc(sizeof(double) * (size_t)(n ? n : 1));
  LT_OK_OR_FAIL(lt_tensor_read(a, LT_DTYPE_F64, va, n));
  LT_OK_OR_FAIL(lt_tensor_read(b, LT_DTYPE_F64, vb, n));
  bool same = memcmp(va, vb, sizeof(double) * (size_t)n) == 0;
  free(va);
  free(vb);
  return same;
}

/* A deep copy to check later that an input was not modified. */
static lt_tensor *snap(const lt_tensor *t) { return LT_NN(lt_clone(t)); }
static void assert_same(lt_tensor *before, const lt_tensor *now) {
  ck_assert_msg(equal(before, now), "an input was modified");
  lt_tensor_free(before);
}

static lt_tensor *f32_of(int nd, const int64_t *shape, const float *v) {
  return LT_NN(lt_tensor_from_copy(LT_DTYPE_F32, nd, shape, v));
}
static lt_tensor *f64_of(int nd, const int64_t *shape, const double *v) {
  return LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, nd, shape, v));
}

/* ======================================================================== */
/* index_select                                                             */
/* ======================================================================== */

START_TEST(test_index_select_values) {
  lt_tensor *x = f32_of(LT_SHAPE(3, 4), (float[]){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  lt_tensor *i0 = lt_test_from_i64(LT_DTYPE_I64, LT_SHAPE(3), (int64_t[]){2, 0, 2});
  lt_tensor *a = LT_NN(lt_index_select(x, 0, i0));
  LT_ASSERT_SHAPE(a, 3, 4);
  ck_assert_int_eq(a->dtype, LT_DTYPE_F32);
  LT_ASSERT_VALUES(a, 0, 8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11);
  lt_tensor *i1 = lt_test_from_i64(LT_DTYPE_I32, LT_SHAPE(2), (int64_t[]){3, 1});
  lt_tensor *b = LT_NN(lt_index_select(x, 1, i1));
  LT_ASSERT_SHAPE(b, 3, 2);
  LT_ASSERT_VALUES(b, 0, 3, 1, 7, 5, 11, 9);
  /* 0-d index keeps the dim with size 1, as torch */
  lt_tensor *i2 = lt_test_from_i64(LT_DTYPE_I64, 0, NULL, (int64_t[]){2});
  lt_tensor *c = LT_NN(lt_index_select(x, -1, i2));
  LT_ASSERT_SHAPE(c, 3, 1);
  LT_ASSERT_VALUES(c, 0, 2, 6, 10);
  /* empty index */
  lt_tensor *ie = lt_test_from_i64(LT_DTYPE_I64, LT_SHAPE(0), NULL);
  lt_tensor *e = LT_NN(lt_index_select(x, 0, ie));
  LT_ASSERT_SHAPE(e, 0, 4);
  /* 0-d x */
  lt_tensor *s = LT_NN(lt_scalar(LT_DTYPE_F64, 5));
  lt_tensor *z = lt_test_from_i64(LT_DTYPE_I64, LT_SHAPE(1), (int64_t[]){0});
  lt_tensor *sa = LT_NN(lt_index_select(s, 0, z));
  ck_assert_int_eq(sa->ndim, 0);
  LT_ASSERT_VALUES(sa, 0, 5);
  /* zero-size x along another dim */
  lt_tensor *x0 = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(0, 3)));
  lt_tensor *e0 = LT_NN(lt_index_select(x0, 1, z));
  LT_ASSERT_SHAPE(e0, 0, 1);
  /* integer and bool x */
  lt_tensor *xi = LT_NN(lt_to_dtype(x, LT_DTYPE_I64));
  lt_tensor *ai = LT_NN(lt_index_select(xi, 1, i1));
  ck_assert_int_eq(ai->dtype, LT_DTYPE_I64);
  LT_ASSERT_VALUES(ai, 0, 3, 1, 7, 5, 11, 9);
  lt_tensor *xb = LT_NN(lt_to_dtype(x, LT_DTYPE_BOOL));
  lt_tensor *ab = LT_NN(lt_index_select(xb, 0, i0));
  LT_ASSERT_VALUES(ab, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1);
  FREE(x, i0, a, i1, b, i2, c, ie, e, s, z, sa, x0, e0, xi, ai, xb, ab);
}
END_TEST

/* ======================================================================== */
/* gather                                                                   */
/* ======================================================================== */

START_TEST(test_gather_values) {
  /* the torch.gather docs example */
  lt_tensor *x = f32_of(LT_SHAPE(2, 2), (float[]){1, 2, 3, 4});
  lt_tensor *i1 = lt_test_from_i64(LT_DTYPE_I64, LT_SHAPE(2, 2), (int64_t[]){0, 0, 1, 0});
  lt_tensor *a = LT_NN(lt_gather(x, 1, i1));
  LT_ASSERT_VALUES(a, 0, 1, 1, 4, 3);
  lt_tensor *i0 = lt_test_from_i64(LT_DTYPE_I32, LT_SHAPE(2, 2), (int64_t[]){0, 1, 1, 0});
  lt_tensor *b = LT_NN(lt_gather(x, -2, i0));
  LT_ASSERT_VALUES(b, 0, 1, 4, 3, 2);
  /* index smaller than x in the other dim, duplicates, longer along dim */
  lt_tensor *y = f64_of(LT_SHAPE(3, 3), (double[]){1, 2, 3, 4, 5, 6, 7, 8, 9});
  lt_tensor *i2 = lt_test_from_i64(LT_DTYPE_I64, LT_SHAPE(4, 2), (int64_t[]){2, 2, 2, 0, 0, 1, 1, 1});
  lt_tensor *c = LT_NN(lt_gather(y, 0, i2));
  LT_ASSERT_SHAPE(c, 4, 2);
  LT_ASSERT_VALUES(c, 0, 7, 8, 7, 2, 1, 5, 4, 5);
  /* 0-d */
  lt_tensor *s = LT_NN(lt_scalar(LT_DTYPE_I32, -3));
  lt_tensor *z = lt_test_from_i64(LT_DTYPE_I64, 0, NULL, (int64_t[]){0});
  lt_tensor *sg = LT_NN(lt_gather(s, 0, z));
  ck_assert_int_eq(sg->ndim, 0);
  ck_assert_int_eq(sg->dtype, LT_DTYPE_I32);
  LT_ASSERT_VALUES(sg, 0, -3);
  /* empty index */
  lt_tensor *ie = lt_test_from_i64(LT_DTYPE_I64, LT_SHAPE(0, 2), NULL);
  lt_tensor *e = LT_NN(lt_gather(y, 1, ie));
  LT_ASSERT_SHAPE(e, 0, 2);
  FREE(x, i1, a, i0, b, y, i2, c, s, z, sg, ie, e);
}
END_TEST

/* ======================================================================== */
/* scatter_add                                                              */
/* ======================================================================== */

START_TEST(test_scatter_add_values) {
  /* the Tensor.scatter_add_ docs examples */
  lt_tensor *src = LT_NN(lt_ones(LT_DTYPE_F32, LT_SHAPE(2, 5)));
  lt_tensor *z = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(3, 5)));
  lt_tensor *i1 = lt_test_from_i64(LT_DTYPE_I64, LT_SHAPE(1, 5), (int64_t[]){0, 1, 2, 0, 0});
  lt_tensor *a = LT_NN(lt_scatter_add(z, 0, i1, src));
  LT_ASSERT_VALUES(a, 0, 1, 0, 0, 1, 1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0);
  lt_tensor *i2 = lt_test_from_i64(LT_DTYPE_I32, LT_SHAPE(2, 5), (int64_t[]){0, 1, 2, 0, 0, 0, 1, 2, 2, 2});
  lt_tensor *b = LT_NN(lt_scatter_add(z, 0, i2, src));
  LT_ASSERT_VALUES(b, 0, 2, 0, 0, 1, 1, 0, 2, 0, 0, 0, 0, 0, 2, 1, 1);
  LT_ASSERT_VALUES(z, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0); /* x untouched */
  /* along dim 1 onto a non-zero x */
  lt_tensor *x = f64_of(LT_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6});
  lt_tensor *s2 = f64_of(LT_SHAPE(2, 2), (double[]){10, 20, 30, 40});
  lt_tensor *i3 = lt_test_from_i64(LT_DTYPE_I64, LT_SHAPE(2, 2), (int64_t[]){2, 2, 0, 1});
  lt_tensor *c = LT_NN(lt_scatter_add(x, -1, i3, s2));
  LT_ASSERT_VALUES(c, 0, 1, 2, 33, 34, 45, 6);
  /* bool: a + b != 0 */
  lt_tensor *xb = LT_NN(lt_zeros(LT_DTYPE_BOOL, LT_SHAPE(3)));
  lt_tensor *sb = LT_NN(lt_ones(LT_DTYPE_BOOL, LT_SHAPE(3)));
  lt_tensor *ib = lt_test_from_i64(LT_DTYPE_I64, LT_SHAPE(3), (int64_t[]){2, 2, 0});
  lt_tensor *d = LT_NN(lt_scatter_add(xb, 0, ib, sb));
  ck_assert_int_eq(d->dtype, LT_DTYPE_BOOL);
  LT_ASSERT_VALUES(d, 0, 1, 0, 1);
  /* 0-d */
  lt_tensor *s0 = LT_NN(lt_scalar(LT_DTYPE_I64, 4));
  lt_tensor *v0 = LT_NN(lt_scalar(LT_DTYPE_I64, 3));
  lt_tensor *k0 = lt_test_from_i64(LT_DTYPE_I64, 0, NULL, (int64_t[]){0});
  lt_tensor *e = LT_NN(lt_scatter_add(s0, 0, k0, v0));
  ck_assert_int_eq(e->ndim, 0);
  LT_ASSERT_VALUES(e, 0, 7);
  /* empty index: a copy of x */
  lt_tensor *ie = lt_test_from_i64(LT_DTYPE_I64, LT_SHAPE(2, 0), NULL);
  lt_tensor *f = LT_NN(lt_scatter_add(x, 1, ie, s2));
  ck_assert(equal(f, x) && f->data != x->data);
  FREE(src, z, i1, a, i2, b, x, s2, i3, c, xb, sb, ib, d, s0, v0, k0, e, ie, f);
}
END_TEST

/* ======================================================================== */
/* embedding                                                                */
/* ======================================================================== */

START_TEST(test_embedding_values) {
  lt_tensor *t = f32_of(LT_SHAPE(4, 3), (float[]){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  lt_tensor *ids = lt_test_from_i64(LT_DTYPE_I64, LT_SHAPE(2, 2), (int64_t[]){3, 0, 0, 2});
  lt_tensor *a = LT_NN(lt_embedding(t, ids));
  LT_ASSERT_SHAPE(a, 2, 2, 3);
  LT_ASSERT_VALUES(a, 0, 9, 10, 11, 0, 1, 2, 0, 1, 2, 6, 7, 8);
  /* i32 ids, sliced (strided) */
  lt_tensor *ids32 = strided(lt_test_from_i64(LT_DTYPE_I32, LT_SHAPE(3), (int64_t[]){1, 1, 3}));
  lt_tensor *b = LT_NN(lt_embedding(t, ids32));
  LT_ASSERT_SHAPE(b, 3, 3);
  LT_ASSERT_VALUES(b, 0, 3, 4, 5, 3, 4, 5, 9, 10, 11);
  /* transposed table: rows are not contiguous */
  lt_tensor *tt = transposed_layout(LT_NN(lt_clone(t)));
  ck_assert(!lt_is_contiguous(tt));
  lt_tensor *c = LT_NN(lt_embedding(tt, ids));
  ck_assert(equal(c, a));
  /* 0-d id -> [D] */
  lt_tensor *i0 = lt_test_from_i64(LT_DTYPE_I64, 0, NULL, (int64_t[]){2});
  lt_tensor *d = LT_NN(lt_embedding(t, i0));
  LT_ASSERT_SHAPE(d, 3);
  LT_ASSERT_VALUES(d, 0, 6, 7, 8);
  /* empty ids */
  lt_tensor *ie = lt_test_from_i64(LT_DTYPE_I64, LT_SHAPE(2, 0), NULL);
  lt_tensor *e = LT_NN(lt_embedding(t, ie));
  LT_ASSERT_SHAPE(e, 2, 0, 3);
  lt_tensor *ie1 = lt_test_from_i64(LT_DTYPE_I32, LT_SHAPE(0), NULL);
  lt_tensor *v0 = LT_NN(lt_zeros(LT_DTYPE_F64, LT_SHAPE(0, 5)));
  lt_tensor *e1 = LT_NN(lt_embedding(v0, ie1));
  LT_ASSERT_SHAPE(e1, 0, 5);
  /* D = 0 */
  lt_tensor *d0 = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(4, 0)));
  lt_tensor *e2 = LT_NN(lt_embedding(d0, ids));
  LT_ASSERT_SHAPE(e2, 2, 2, 0);
  /* f64 table */
  lt_tensor *t64 = LT_NN(lt_to_dtype(t, LT_DTYPE_F64));
  lt_tensor *g = LT_NN(lt_embedding(t64, ids32));
  ck_assert_int_eq(g->dtype, LT_DTYPE_F64);
  LT_ASSERT_VALUES(g, 0, 3, 4, 5, 3, 4, 5, 9, 10, 11);
  FREE(t, ids, a, ids32, b, tt, c, i0, d, ie, e, ie1, v0, e1, d0, e2, t64, g);
}
END_TEST

/* ======================================================================== */
/* tril / triu                                                              */
/* ======================================================================== */

START_TEST(test_tri_values) {
  lt_tensor *x = f32_of(LT_SHAPE(3, 4), (float[]){1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  /* k beyond the matrix (INT64_MAX / INT64_MIN) keeps all or nothing. */
  static const struct {
    bool lower;
    int64_t k;
    double want[12];
  } cases[] = {
      {true, 0, {1, 0, 0, 0, 5, 6, 0, 0, 9, 10, 11, 0}},
      {true, 1, {1, 2, 0, 0, 5, 6, 7, 0, 9, 10, 11, 12}},
      {true, -1, {0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0}},
      {true, INT64_MAX, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}},
      {true, INT64_MIN, {0}},
      {false, 0, {1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12}},
      {false, 2, {0, 0, 3, 4, 0, 0, 0, 8, 0, 0, 0, 0}},
      {false, -1, {1, 2, 3, 4, 5, 6, 7, 8, 0, 10, 11, 12}},
      {false, INT64_MIN, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}},
      {false, INT64_MAX, {0}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    lt_tensor *got = LT_NN(cases[c].lower ? lt_tril(x, cases[c].k) : lt_triu(x, cases[c].k));
    lt_tensor *want = f64_of(LT_SHAPE(3, 4), cases[c].want);
    ck_assert_msg(got->dtype == LT_DTYPE_F32 && equal(got, want), "%s(x, %lld)", cases[c].lower ? "tril" : "triu",
                  (long long)cases[c].k);
    FREE(got, want);
  }
  lt_tensor *r[2];
  int n = 0;
  /* bool and i64 */
  lt_tensor *b = LT_NN(lt_ones(LT_DTYPE_BOOL, LT_SHAPE(2, 2)));
  r[n] = LT_NN(lt_tril(b, 0));
  ck_assert_int_eq(r[n]->dtype, LT_DTYPE_BOOL);
  LT_ASSERT_VALUES(r[n], 0, 1, 0, 1, 1);
  n++;
  lt_tensor *i = LT_NN(lt_full(LT_DTYPE_I64, LT_SHAPE(2, 2), -7));
  r[n] = LT_NN(lt_triu(i, 1));
  LT_ASSERT_VALUES(r[n], 0, 0, -7, 0, 0);
  n++;
  free_all(n, r);
  /* zero-size */
  lt_tensor *z1 = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(0, 3)));
  lt_tensor *z2 = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(2, 3, 0)));
  lt_tensor *o1 = LT_NN(lt_tril(z1, 0)), *o2 = LT_NN(lt_triu(z2, 0));
  LT_ASSERT_SHAPE(o1, 0, 3);
  LT_ASSERT_SHAPE(o2, 2, 3, 0);
  FREE(x, b, i, z1, z2, o1, o2);
}
END_TEST

/* ======================================================================== */
/* one_hot                                                                  */
/* ======================================================================== */

START_TEST(test_one_hot) {
  lt_tensor *ids = lt_test_from_i64(LT_DTYPE_I64, LT_SHAPE(3), (int64_t[]){0, 2, 1});
  lt_tensor *a = LT_NN(lt_one_hot(ids, 4));
  ck_assert_int_eq(a->dtype, LT_DTYPE_I64);
  LT_ASSERT_SHAPE(a, 3, 4);
  LT_ASSERT_VALUES(a, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0);
  lt_tensor *b = LT_NN(lt_one_hot(ids, -1)); /* inferred: max + 1 = 3 */
  LT_ASSERT_SHAPE(b, 3, 3);
  LT_ASSERT_VALUES(b, 0, 1, 0, 0, 0, 0, 1, 0, 1, 0);
  lt_tensor *i2 = strided(lt_test_from_i64(LT_DTYPE_I32, LT_SHAPE(2, 2), (int64_t[]){1, 1, 0, 2}));
  lt_tensor *c = LT_NN(lt_one_hot(i2, 3));
  LT_ASSERT_SHAPE(c, 2, 2, 3);
  LT_ASSERT_VALUES(c, 0, 0, 1, 0, 0, 1, 0, 1, 0, 0, 0, 0, 1);
  lt_tensor *i0 = lt_test_from_i64(LT_DTYPE_I64, 0, NULL, (int64_t[]){1});
  lt_tensor *d = LT_NN(lt_one_hot(i0, 2));
  LT_ASSERT_SHAPE(d, 2);
  LT_ASSERT_VALUES(d, 0, 0, 1);
  lt_tensor *ie = lt_test_from_i64(LT_DTYPE_I64, LT_SHAPE(0), NULL);
  lt_tensor *e = LT_NN(lt_one_hot(ie, 5));
  LT_ASSERT_SHAPE(e, 0, 5);
  lt_tensor *e0 = LT_NN(lt_one_hot(ie, 0));
  LT_ASSERT_SHAPE(e0, 0, 0);
  /* errors */
  lt_tensor *before = snap(ids);
  LT_EXPECT_NULL_ERR(lt_one_hot(ids, 2), LT_ERR_INDEX, "one_hot: ids[1] = 2 is out of range for 2 classes (valid 0..1)");
  lt_tensor *neg = lt_test_from_i64(LT_DTYPE_I32, LT_SHAPE(2, 2), (int64_t[]){0, 1, -1, 0});
  LT_EXPECT_NULL_ERR(lt_one_hot(neg, 3), LT_ERR_INDEX, "ids[1,0] = -1");
  LT_EXPECT_NULL_ERR(lt_one_hot(neg, -1), LT_ERR_INDEX, "ids[1,0] = -1 is negative");
  LT_EXPECT_NULL_ERR(lt_one_hot(ie, -1), LT_ERR_INVALID, "cannot infer the number of classes");
  lt_tensor *fl = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(2)));
  LT_EXPECT_NULL_ERR(lt_one_hot(fl, 3), LT_ERR_DTYPE, "one_hot: ids is [2] f32: indices must be i32 or i64");
  LT_EXPECT_NULL_ERR(lt_one_hot(NULL, 3), LT_ERR_NULL, "one_hot");
  assert_same(before, ids);
  FREE(ids, a, b, i2, c, i0, d, ie, e, e0, neg, fl);
}
END_TEST

/* ======================================================================== */
/* cat / stack                                                              */
/* ======================================================================== */

START_TEST(test_cat_values) {
  lt_tensor *a = f32_of(LT_SHAPE(2, 2), (float[]){1, 2, 3, 4});
  lt_tensor *b = f32_of(LT_SHAPE(2, 1), (float[]){5, 6});
  lt_tensor *c = f32_of(LT_SHAPE(1, 2), (float[]){7, 8});
  lt_tensor *ab = LT_NN(lt_cat(2, (lt_tensor *[]){a, b}, 1));
  LT_ASSERT_SHAPE(ab, 2, 3);
  LT_ASSERT_VALUES(ab, 0, 1, 2, 5, 3, 4, 6);
  lt_tensor *ac = LT_NN(lt_cat(3, (lt_tensor *[]){a, c, a}, -2));
  LT_ASSERT_SHAPE(ac, 5, 2);
  LT_ASSERT_VALUES(ac, 0, 1, 2, 3, 4, 7, 8, 1, 2, 3, 4);
  /* one input: a new tensor with a copy */
  lt_tensor *a1 = LT_NN(lt_cat(1, (lt_tensor *[]){a}, 0));
  ck_assert(a1 != a && a1->data != a->data && equal(a1, a));
  /* promotion */
  lt_tensor *bi = LT_NN(lt_to_dtype(b, LT_DTYPE_I64));
  lt_tensor *m = LT_NN(lt_cat(2, (lt_tensor *[]){bi, a}, 1));
  ck_assert_int_eq(m->dtype, LT_DTYPE_F32);
  LT_ASSERT_VALUES(m, 0, 5, 1, 2, 6, 3, 4);
  lt_tensor *bb = LT_NN(lt_ones(LT_DTYPE_BOOL, LT_SHAPE(1)));
  lt_tensor *ii = lt_test_from_i64(LT_DTYPE_I32, LT_SHAPE(2), (int64_t[]){-4, 9});
  lt_tensor *m2 = LT_NN(lt_cat(2, (lt_tensor *[]){bb, ii}, 0));
  ck_assert_int_eq(m2->dtype, LT_DTYPE_I32);
  LT_ASSERT_VALUES(m2, 0, 1, -4, 9);
  /* zero-size: [2,0] joins, and the legacy 1-d [0] joins any rank */
  lt_tensor *z20 = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(2, 0)));
  lt_tensor *z0 = LT_NN(lt_zeros(LT_DTYPE_F64, LT_SHAPE(0)));
  lt_tensor *zz = LT_NN(lt_cat(4, (lt_tensor *[]){z0, a, z20, b}, 1));
  LT_ASSERT_SHAPE(zz, 2, 3);
  ck_assert_int_eq(zz->dtype, LT_DTYPE_F64); /* torch promotes over all inputs */
  LT_ASSERT_VALUES(zz, 0, 1, 2, 5, 3, 4, 6);
  lt_tensor *allz = LT_NN(lt_cat(2, (lt_tensor *[]){z0, z0}, 0));
  LT_ASSERT_SHAPE(allz, 0);
  lt_tensor *zr = LT_NN(lt_cat(2, (lt_tensor *[]){z20, z20}, 0));
  LT_ASSERT_SHAPE(zr, 4, 0);
  /* non-contiguous inputs */
  lt_tensor *at = LT_NN(lt_transpose(a, 0, 1)); /* [[1,3],[2,4]] */
  lt_tensor *bs = strided(LT_NN(lt_clone(b)));
  lt_tensor *n1 = LT_NN(lt_cat(2, (lt_tensor *[]){at, bs}, 1));
  LT_ASSERT_VALUES(n1, 0, 1, 3, 5, 2, 4, 6);
  /* a NULL list (the runner's NULL checks replace one tensor of the list) */
  LT_EXPECT_NULL_ERR(lt_cat(2, NULL, 0), LT_ERR_NULL, "cat: argument xs is NULL");
  LT_EXPECT_NULL_ERR(lt_stack(2, NULL, 0), LT_ERR_NULL, "stack: argument xs is NULL");
  FREE(a, b, c, ab, ac, a1, bi, m, bb, ii, m2, z20, z0, zz, allz, zr, at, bs, n1);
}
END_TEST

START_TEST(test_stack_values) {
  lt_tensor *a = f32_of(LT_SHAPE(2, 3), (float[]){1, 2, 3, 4, 5, 6});
  lt_tensor *b = f32_of(LT_SHAPE(2, 3), (float[]){7, 8, 9, 10, 11, 12});
  lt_tensor *s0 = LT_NN(lt_stack(2, (lt_tensor *[]){a, b}, 0));
  LT_ASSERT_SHAPE(s0, 2, 2, 3);
  LT_ASSERT_VALUES(s0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12);
  lt_tensor *s1 = LT_NN(lt_stack(2, (lt_tensor *[]){a, b}, 1));
  LT_ASSERT_SHAPE(s1, 2, 2, 3);
  LT_ASSERT_VALUES(s1, 0, 1, 2, 3, 7, 8, 9, 4, 5, 6, 10, 11, 12);
  lt_tensor *s2 = LT_NN(lt_stack(2, (lt_tensor *[]){a, b}, -1));
  LT_ASSERT_SHAPE(s2, 2, 3, 2);
  LT_ASSERT_VALUES(s2, 0, 1, 7, 2, 8, 3, 9, 4, 10, 5, 11, 6, 12);
  /* 0-d inputs, promotion */
  lt_tensor *x = LT_NN(lt_scalar(LT_DTYPE_I32, 3)), *y = LT_NN(lt_scalar(LT_DTYPE_F64, 0.5));
  lt_tensor *s3 = LT_NN(lt_stack(3, (lt_tensor *[]){x, y, x}, -1));
  LT_ASSERT_SHAPE(s3, 3);
  ck_assert_int_eq(s3->dtype, LT_DTYPE_F64);
  LT_ASSERT_VALUES(s3, 0, 3, 0.5, 3);
  /* zero-size */
  lt_tensor *z = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(0, 3)));
  lt_tensor *s4 = LT_NN(lt_stack(2, (lt_tensor *[]){z, z}, 1));
  LT_ASSERT_SHAPE(s4, 0, 2, 3);
  /* non-contiguous */
  lt_tensor *at = transposed_layout(LT_NN(lt_clone(a)));
  lt_tensor *bs = strided(LT_NN(lt_clone(b)));
  lt_tensor *s5 = LT_NN(lt_stack(2, (lt_tensor *[]){at, bs}, 1));
  ck_assert(equal(s5, s1));
  FREE(a, b, s0, s1, s2, x, y, s3, z, s4, at, bs, s5);
}
END_TEST

/* ======================================================================== */
/* split / chunk                                                            */
/* ======================================================================== */

START_TEST(test_split_chunk) {
  lt_tensor *x = f32_of(LT_SHAPE(5, 2), (float[]){0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  lt_tensor *v[8];
  int n = -1;
  LT_OK_OR_FAIL(lt_split(x, 2, 0, v, 8, &n));
  ck_assert_int_eq(n, 3);
  LT_ASSERT_SHAPE(v[0], 2, 2);
  LT_ASSERT_SHAPE(v[2], 1, 2);
  LT_ASSERT_VALUES(v[1], 0, 4, 5, 6, 7);
  LT_ASSERT_VALUES(v[2], 0, 8, 9);
  /* views: writes go through to x */
  LT_OK_OR_FAIL(lt_set(v[2], (int64_t[]){0, 1}, 42));
  double got;
  LT_OK_OR_FAIL(lt_get(x, (int64_t[]){4, 1}, &got));
  ck_assert(got == 42);
  free_all(n, v);
  LT_OK_OR_FAIL(lt_split(x, 7, 0, v, 1, &n)); /* larger than the dim: one view */
  ck_assert_int_eq(n, 1);
  LT_ASSERT_SHAPE(v[0], 5, 2);
  free_all(n, v);
  LT_OK_OR_FAIL(lt_split(x, 1, -1, v, 2, &n));
  ck_assert_int_eq(n, 2);
  LT_ASSERT_VALUES(v[1], 0, 1, 3, 5, 7, 42);
  free_all(n, v);
  /* chunk: ceil(5/3) = 2 -> 3 views; ceil(6/4) = 2 -> 3 views (fewer than asked) */
  LT_OK_OR_FAIL(lt_chunk(x, 3, 0, v, 8, &n));
  ck_assert_int_eq(n, 3);
  LT_ASSERT_SHAPE(v[2], 1, 2);
  free_all(n, v);
  lt_tensor *y = LT_NN(lt_arange(LT_DTYPE_I64, 0, 6, 1));
  LT_OK_OR_FAIL(lt_chunk(y, 4, 0, v, 8, &n));
  ck_assert_int_eq(n, 3);
  LT_ASSERT_VALUES(v[2], 0, 4, 5);
  free_all(n, v);
  LT_OK_OR_FAIL(lt_chunk(y, 6, 0, v, 6, &n));
  ck_assert_int_eq(n, 6);
  free_all(n, v);
  LT_OK_OR_FAIL(lt_chunk(y, 10, 0, v, 8, &n));
  ck_assert_int_eq(n, 6);
  free_all(n, v);
  /* empty dim: split gives one empty view, chunk gives `chunks` of them */
  lt_tensor *z = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(0, 3)));
  LT_OK_OR_FAIL(lt_split(z, 2, 0, v, 8, &n));
  ck_assert_int_eq(n, 1);
  LT_ASSERT_SHAPE(v[0], 0, 3);
  free_all(n, v);
  LT_OK_OR_FAIL(lt_split(z, 0, 0, v, 8, &n));
  ck_assert_int_eq(n, 1);
  free_all(n, v);
  LT_OK_OR_FAIL(lt_chunk(z, 3, 0, v, 8, &n));
  ck_assert_int_eq(n, 3);
  LT_ASSERT_SHAPE(v[2], 0, 3);
  free_all(n, v);
  /* a huge split size does not overflow */
  LT_OK_OR_FAIL(lt_split(x, INT64_MAX, 0, v, 1, &n));
  ck_assert_int_eq(n, 1);
  free_all(n, v);

  /* errors: out and n_out untouched */
  lt_tensor *sentinel = (lt_tensor *)&n;
  for (int i = 0; i < 8; i++) v[i] = sentinel;
  n = 77;
  LT_EXPECT_ERR(lt_split(x, 2, 0, v, 2, &n), LT_ERR_INVALID, "gives 3 views but capacity is 2");
  LT_EXPECT_ERR(lt_chunk(y, 3, 0, v, 2, &n), LT_ERR_INVALID, "gives 3 views but capacity is 2");
  LT_EXPECT_ERR(lt_split(x, 0, 0, v, 8, &n), LT_ERR_INVALID, "split_size 0");
  LT_EXPECT_ERR(lt_split(x, -1, 0, v, 8, &n), LT_ERR_INVALID, "split_size -1");
  LT_EXPECT_ERR(lt_chunk(x, 0, 0, v, 8, &n), LT_ERR_INVALID, "chunks must be positive, got 0");
  LT_EXPECT_ERR(lt_split(x, 2, 2, v, 8, &n), LT_ERR_INDEX, "dim 2");
  lt_tensor *s = LT_NN(lt_scalar(LT_DTYPE_F32, 1));
  LT_EXPECT_ERR(lt_split(s, 1, 0, v, 8, &n), LT_ERR_SHAPE, "0-d");
  LT_EXPECT_ERR(lt_split(NULL, 1, 0, v, 8, &n), LT_ERR_NULL, "split");
  LT_EXPECT_ERR(lt_split(x, 1, 0, NULL, 8, &n), LT_ERR_NULL, "out");
  LT_EXPECT_ERR(lt_chunk(x, 1, 0, v, 8, NULL), LT_ERR_NULL, "n_out");
  ck_assert_int_eq(n, 77);
  for (int i = 0; i < 8; i++) ck_assert(v[i] == sentinel);
  FREE(x, y, z, s);
}
END_TEST

/* ======================================================================== */
/* errors                                                                   */
/* ======================================================================== */

/* ======================================================================== */
/* backwards, called directly on the recorded node                          */
/* ======================================================================== */

static lt_tensor *leaf_f64(int nd, const int64_t *shape, const double *v) {
  lt_tensor *t = v ? f64_of(nd, shape, v) : LT_NN(lt_zeros(LT_DTYPE_F64, nd, shape));
  LT_OK_OR_FAIL(lt_requires_grad_(t, true));
  return t;
}

/* Runs out's backward with gout; gin has room for n entries (set to NULL first). */
static void run_bw(const lt_tensor *out, const lt_tensor *gout, int n, lt_tensor **gin) {
  ck_assert_msg(out->grad_fn != NULL, "the op did not record itself");
  const lt__op_def *def = &lt__ops[out->grad_fn->op];
  ck_assert(def->backward != NULL);
  for (int i = 0; i < n; i++) gin[i] = NULL;
  bool prev = lt_set_grad_enabled(false);
  LT_OK_OR_FAIL(def->backward(out->grad_fn, gout, gin));
  lt_set_grad_enabled(prev);
}

/* lt_test_same_on_threads callbacks: the first input's gradient of out's
 * backward; scatter_add. */
typedef struct bw_ctx {
  const lt_tensor *out, *gout;
} bw_ctx;
static int bw_run(void *u, lt_tensor **o, int cap) {
  const bw_ctx *c = u;
  run_bw(c->out, c->gout, 1, o);
  return 1;
}
typedef struct scatter_ctx {
  const lt_tensor *x, *idx, *src;
  int dim;
} scatter_ctx;
static int scatter_run(void *u, lt_tensor **o, int cap) {
  const scatter_ctx *c = u;
  o[0] = LT_NN(lt_scatter_add(c->x, c->dim, c->idx, c->src));
  return 1;
}

START_TEST(test_backward_values) {
  lt_tensor *g[4];
  /* embedding: duplicate ids accumulate */
  lt_tensor *t = leaf_f64(LT_SHAPE(4, 2), NULL);
  lt_tensor *ids = lt_test_from_i64(LT_DTYPE_I32, LT_SHAPE(5), (int64_t[]){1, 3, 1, 1, 0});
  lt_tensor *e = LT_NN(lt_embedding(t, ids));
  ck_assert_str_eq(lt__op_names[e->grad_fn->op], "embedding");
  lt_tensor *ge = f64_of(LT_SHAPE(5, 2), (double[]){1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  run_bw(e, ge, 1, g);
  LT_ASSERT_VALUES(g[0], 0, 9, 10, 13, 16, 0, 0, 3, 4);
  free_all(1, g);
  /* non-contiguous gout */
  lt_tensor *gT = transposed_layout(LT_NN(lt_clone(ge)));
  run_bw(e, gT, 1, g);
  LT_ASSERT_VALUES(g[0], 0, 9, 10, 13, 16, 0, 0, 3, 4);
  free_all(1, g);

  /* index_select */
  lt_tensor *x = leaf_f64(LT_SHAPE(3, 2), NULL);
  lt_tensor *idx = lt_test_from_i64(LT_DTYPE_I64, LT_SHAPE(3), (int64_t[]){2, 0, 2});
  lt_tensor *is = LT_NN(lt_index_select(x, 0, idx));
  lt_tensor *gi = f64_of(LT_SHAPE(3, 2), (double[]){1, 2, 3, 4, 5, 6});
  run_bw(is, gi, 1, g);
  LT_ASSERT_VALUES(g[0], 0, 3, 4, 0, 0, 6, 8);
  free_all(1, g);

  /* gather */
  lt_tensor *y = leaf_f64(LT_SHAPE(2, 3), NULL);
  lt_tensor *gidx = lt_test_from_i64(LT_DTYPE_I64, LT_SHAPE(2, 2), (int64_t[]){0, 0, 2, 1});
  lt_tensor *ga = LT_NN(lt_gather(y, 1, gidx));
  lt_tensor *gg = f64_of(LT_SHAPE(2, 2), (double[]){1, 2, 3, 4});
  run_bw(ga, gg, 1, g);
  LT_ASSERT_VALUES(g[0], 0, 3, 0, 0, 0, 4, 3);
  free_all(1, g);

  /* scatter_add: dx = g, dsrc = gather(g) padded to src's shape */
  lt_tensor *sx = leaf_f64(LT_SHAPE(3), NULL);
  lt_tensor *ss = leaf_f64(LT_SHAPE(5), NULL);
  lt_tensor *sidx = lt_test_from_i64(LT_DTYPE_I64, LT_SHAPE(4), (int64_t[]){0, 2, 0, 0});
  lt_tensor *sa = LT_NN(lt_scatter_add(sx, 0, sidx, ss));
  lt_tensor *gs = f64_of(LT_SHAPE(3), (double[]){1, 2, 3});
  run_bw(sa, gs, 2, g);
  LT_ASSERT_VALUES(g[0], 0, 1, 2, 3);
  LT_ASSERT_VALUES(g[1], 0, 1, 3, 1, 1, 0);
  free_all(2, g);

  /* tril / triu */
  lt_tensor *m = leaf_f64(LT_SHAPE(2, 3), NULL);
  lt_tensor *gm = LT_NN(lt_ones(LT_DTYPE_F64, LT_SHAPE(2, 3)));
  lt_tensor *tl = LT_NN(lt_tril(m, 0)), *tu = LT_NN(lt_triu(m, 1));
  run_bw(tl, gm, 1, g);
  LT_ASSERT_VALUES(g[0], 0, 1, 0, 0, 1, 1, 0);
  free_all(1, g);
  run_bw(tu, gm, 1, g);
  LT_ASSERT_VALUES(g[0], 0, 0, 1, 1, 0, 0, 1);
  free_all(1, g);

  /* cat (with a legacy [0] input and a [2,0] one) */
  lt_tensor *ca = leaf_f64(LT_SHAPE(2, 1), NULL), *cb = leaf_f64(LT_SHAPE(2, 2), NULL);
  lt_tensor *c0 = leaf_f64(LT_SHAPE(0), NULL), *c20 = leaf_f64(LT_SHAPE(2, 0), NULL);
  lt_tensor *cc = LT_NN(lt_cat(4, (lt_tensor *[]){ca, c0, c20, cb}, 1));
  lt_tensor *gc = f64_of(LT_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6});
  run_bw(cc, gc, 4, g);
  LT_ASSERT_VALUES(g[0], 0, 1, 4);
  LT_ASSERT_SHAPE(g[1], 0);
  LT_ASSERT_SHAPE(g[2], 2, 0);
  LT_ASSERT_VALUES(g[3], 0, 2, 3, 5, 6);
  free_all(4, g);

  /* stack */
  lt_tensor *sk = LT_NN(lt_stack(2, (lt_tensor *[]){ca, ca}, -1));
  lt_tensor *gk = f64_of(LT_SHAPE(2, 1, 2), (double[]){1, 2, 3, 4});
  run_bw(sk, gk, 2, g);
  LT_ASSERT_VALUES(g[0], 0, 1, 3);
  LT_ASSERT_VALUES(g[1], 0, 2, 4);
  LT_ASSERT_SHAPE(g[1], 2, 1);
  free_all(2, g);

  /* nothing is recorded without grad mode, or for inputs not requiring grad */
  bool prev = lt_set_grad_enabled(false);
  lt_tensor *ng = LT_NN(lt_embedding(t, ids));
  lt_set_grad_enabled(prev);
  ck_assert(ng->grad_fn == NULL && !ng->requires_grad);
  lt_tensor *plain = LT_NN(lt_zeros(LT_DTYPE_F64, LT_SHAPE(3)));
  lt_tensor *np = LT_NN(lt_index_select(plain, 0, idx));
  ck_assert(np->grad_fn == NULL);
  FREE(t, ids, e, ge, gT, x, idx, is, gi, y, gidx, ga, gg, sx, ss, sidx, sa, gs, m, gm, tl, tu, ca, cb,
       c0, c20, cc, gc, sk, gk, ng, plain, np);
}
END_TEST

/* Embedding backward with many duplicate ids: the same bits on 1 and 2
 * threads, and equal to a serial double-precision accumulation. */
START_TEST(test_embedding_backward_deterministic) {
  const int64_t V = 100, D = 512, N = 4096;
  lt_tensor *t = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(V, D)));
  LT_OK_OR_FAIL(lt_requires_grad_(t, true));
  lt_tensor *ids = rand_ids(LT_DTYPE_I64, LT_SHAPE(64, 64), V);
  lt_tensor *out = LT_NN(lt_embedding(t, ids));
  float *gv = malloc(sizeof(float) * (size_t)(N * D));
  for (int64_t i = 0; i < N * D; i++) gv[i] = (float)((double)(rnd() % 2000001) / 1e6 - 1.0);
  lt_tensor *gout = LT_NN(lt_tensor_from_copy(LT_DTYPE_F32, LT_SHAPE(64, 64, D), gv));
  bw_ctx c = {out, gout};
  lt_test_same_on_threads(bw_run, &c, "embedding backward");
  lt_tensor *g1;
  run_bw(out, gout, 1, &g1);
  double *ref = calloc((size_t)(V * D), sizeof(double));
  const int64_t *iv = ids->data;
  for (int64_t i = 0; i < N; i++)
    for (int64_t k = 0; k < D; k++) ref[iv[i] * D + k] += gv[i * D + k];
  lt_tensor *r = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(V, D), ref));
  LT_ASSERT_CLOSE(g1, r, 1e-4, 1e-4);
  free(gv);
  free(ref);
  FREE(t, ids, out, gout, g1, r);
}
END_TEST

/* scatter_add on several threads: same bits as one thread (duplicates). */
START_TEST(test_scatter_add_deterministic) {
  for (int dim = 0; dim < 2; dim++) {
    int64_t xsh[2] = {8, 9000}, ish[2] = {64, 9000};
    if (dim == 1) {
      xsh[1] = 100;
      ish[0] = 8;
      ish[1] = 5000;
    }
    lt_tensor *x = rand_vals(LT_DTYPE_F32, 2, xsh);
    lt_tensor *src = LT_NN(lt_empty(LT_DTYPE_F32, 2, ish));
    float *sv = src->data;
    for (int64_t i = 0; i < src->numel; i++) sv[i] = (float)((double)(rnd() % 2000001) / 1e6 - 1.0);
    lt_tensor *idx = rand_ids(LT_DTYPE_I64, 2, ish, xsh[dim]);
    lt_test_same_on_threads(scatter_run, &(scatter_ctx){x, idx, src, dim}, "scatter_add");
    FREE(x, src, idx);
  }
}
END_TEST

/* Sizes above the parallel threshold, every task split of the kernel: many
 * prefixes (cross-entropy style gather along the last dim), one prefix with
 * j and s blocks (dim 0), index_select of a transposed x; against naive loops. */
static double *read_all(const lt_tensor *t) {
  double *v = malloc(sizeof(double) * (size_t)(t->numel ? t->numel : 1));
  LT_OK_OR_FAIL(lt_tensor_read(t, LT_DTYPE_F64, v, t->numel));
  return v;
}

START_TEST(test_large_vs_naive) {
  for (int c = 0; c < 3; c++) {
    int64_t R = c == 0 ? 4096 : c == 1 ? 50 : 200, C = c == 0 ? 50 : c == 1 ? 3000 : 300;
    lt_tensor *x = rand_vals(LT_DTYPE_F32, LT_SHAPE(R, C));
    if (c == 2) x = transposed_layout(x);
    lt_tensor *idx, *out;
    if (c == 0) {
      idx = rand_ids(LT_DTYPE_I64, LT_SHAPE(R, 3), C);
      out = LT_NN(lt_gather(x, 1, idx));
    } else if (c == 1) {
      idx = rand_ids(LT_DTYPE_I32, LT_SHAPE(20, C), R);
      out = LT_NN(lt_gather(x, 0, idx));
    } else {
      idx = rand_ids(LT_DTYPE_I64, LT_SHAPE(250), C);
      out = LT_NN(lt_index_select(x, 1, idx));
    }
    double *xv = read_all(x), *iv = read_all(idx), *ov = read_all(out);
    const int64_t orows = out->shape[0], ocols = out->shape[1];
    for (int64_t r = 0; r < orows; r++)
      for (int64_t k = 0; k < ocols; k++) {
        double want;
        if (c == 0) want = xv[r * C + (int64_t)iv[r * ocols + k]];
        else if (c == 1) want = xv[(int64_t)iv[r * ocols + k] * C + k];
        else want = xv[r * C + (int64_t)iv[k]];
        ck_assert_msg(ov[r * ocols + k] == want, "case %d at [%lld,%lld]", c, (long long)r, (long long)k);
      }
    /* scatter_add of out back along the same dim on 1 and 2 threads: same bits */
    if (c < 2) {
      int dim = c == 0 ? 1 : 0;
      lt_tensor *z = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(R, C)));
      lt_test_same_on_threads(scatter_run, &(scatter_ctx){z, idx, out, dim}, "scatter_add");
      lt_tensor *a = LT_NN(lt_scatter_add(z, dim, idx, out));
      double *av = read_all(a);
      double *ref = calloc((size_t)(R * C), sizeof(double));
      for (int64_t r = 0; r < orows; r++)
        for (int64_t k = 0; k < ocols; k++) {
          int64_t v = (int64_t)iv[r * ocols + k];
          ref[dim == 1 ? r * C + v : v * C + k] += ov[r * ocols + k];
        }
      for (int64_t i = 0; i < R * C; i++) ck_assert(av[i] == ref[i]); /* small integers: exact */
      free(av);
      free(ref);
      FREE(z, a);
    }
    free(xv);
    free(iv);
    free(ov);
    FREE(x, idx, out);
  }
}
END_TEST

/* tensor/order.c: what the op runner's random samples do not reach: NaN's
 * place (after every number ascending, first descending, as torch.sort),
 * ties in index order both ways, i64 beyond 2^53, and the gradient of
 * sorted values landing where each came from. */
START_TEST(test_sort_nan_ties_and_gradient) {
  lt_scope *sc = lt_scope_begin(); /* every tensor below */
  lt_tensor *x = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(6), (double[]){2, NAN, -1, 2, NAN, 0}));
  lt_tensor *v, *i;
  LT_OK_OR_FAIL(lt_sort(x, 0, false, &v, &i));
  LT_ASSERT_VALUES(i, 0, 2, 5, 0, 3, 1, 4);
  LT_OK_OR_FAIL(lt_sort(x, -1, true, NULL, &i));
  LT_ASSERT_VALUES(i, 0, 1, 4, 0, 3, 5, 2);
  LT_OK_OR_FAIL(lt_topk(x, 2, 0, false, &v, &i)); /* the two smallest: -1, 0 */
  LT_ASSERT_VALUES(v, 0, -1, 0);
  LT_ASSERT_VALUES(i, 0, 2, 5);
  const int64_t big[3] = {INT64_C(9007199254740993), INT64_C(9007199254740992), -3};
  lt_tensor *b = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(3), big));
  lt_tensor *ib = LT_NN(lt_argsort(b, 0, false));
  LT_ASSERT_VALUES(ib, 0, 2, 1, 0);
  /* d(sum(sorted * w)) / dx[j] = w at j's rank */
  lt_tensor *y = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(2, 3), (double[]){3, 1, 2, 0, 5, -1}));
  LT_OK_OR_FAIL(lt_requires_grad_(y, true));
  lt_tensor *w = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(3), (double[]){10, 20, 30}));
  LT_OK_OR_FAIL(lt_sort(y, 1, false, &v, NULL));
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_sum(LT_NN(lt_mul(v, w)), 0, NULL, false)), NULL, false));
  LT_ASSERT_VALUES(y->grad, 0, 30, 10, 20, 20, 30, 10);
  /* flip, roll, repeat are copies, never views */
  lt_tensor *r = LT_NN(lt_roll(y, 1, (int64_t[]){0}, (int[]){1}));
  ck_assert(r->storage != y->storage);
  lt_tensor *f = LT_NN(lt_flip(y, 0, NULL));
  ck_assert(f->storage != y->storage);
  lt_tensor *p = LT_NN(lt_repeat(y, 2, (int64_t[]){1, 1}));
  ck_assert(p->storage != y->storage);
  LT_ASSERT_SHAPE(LT_NN(lt_repeat(y, 3, (int64_t[]){4, 1, 2})), 4, 2, 6);
  lt_scope_end(sc);
}
END_TEST

int main(void) {
  Suite *s = suite_create("index");
  LT_TEST_CASE(s, "index", 0, test_index_select_values,
               test_gather_values, test_scatter_add_values, test_embedding_values,
               test_tri_values, test_one_hot, test_cat_values,
               test_stack_values, test_split_chunk, test_backward_values,
               test_embedding_backward_deterministic, test_scatter_add_deterministic,
               test_large_vs_naive, test_sort_nan_ties_and_gradient);
  return lt_test_run(s);
}
