/*
 * tests/test_reduce.c: reductions, softmax and log_softmax (tensor/reduce.c).
 *
 * Hand-computed values; 0-d and zero-size inputs (NaN, -inf); integer and
 * bool dtypes (overflow, i64 beyond 2^53); stability (+-1000, -inf, masked
 * rows); NaN and first-occurrence indices; the error paths no table entry
 * covers; and the hand-checked gradient rules (tie splitting in amax,
 * max_dim's index).
 *
 * Random shapes and dim subsets against the double reference over dtypes and
 * layouts, the row and column kernels on sizes that cross their blocks,
 * 1-vs-2-thread bits, the table's error cases and the f64 gradchecks are the
 * runner's: tests/opinfo_reduce.inc (tests/test_ops.c runs them).
 */
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

/* ---- helpers ----------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng_next(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}
static double rng_unif(void) { return (double)(rng_next() >> 11) / 9007199254740992.0; }

/* A new contiguous tensor of dtype with uniform values in [-2, 2). */
static lt_tensor *rand_tensor(lt_dtype dt, int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  ck_assert(v);
  for (int64_t i = 0; i < n; i++) v[i] = 4.0 * rng_unif() - 2.0;
  lt_tensor *t = lt_test_from_f64(dt, ndim, shape, v);
  free(v);
  return t;
}

enum { RSUM, RMEAN, RAMAX, RAMIN, RVAR, RVARB, RSTD, RSTDB, RLSE, RARGMAX, RARGMIN, RKINDS };

/* Run reduction kind on x over dims (ndims == 0: all). */
static lt_tensor *run_kind(int kind, const lt_tensor *x, int ndims, const int *dims, bool keepdim) {
  switch (kind) {
    case RSUM: return lt_sum(x, ndims, dims, keepdim);
    case RMEAN: return lt_mean(x, ndims, dims, keepdim);
    case RAMAX: return lt_amax(x, ndims, dims, keepdim);
    case RAMIN: return lt_amin(x, ndims, dims, keepdim);
    case RVAR: return lt_var(x, ndims, dims, true, keepdim);
    case RVARB: return lt_var(x, ndims, dims, false, keepdim);
    case RSTD: return lt_std(x, ndims, dims, true, keepdim);
    case RSTDB: return lt_std(x, ndims, dims, false, keepdim);
    case RLSE: return lt_logsumexp(x, ndims, dims, keepdim);
    case RARGMAX: return lt_argmax(x, dims[0], keepdim);
    case RARGMIN: return lt_argmin(x, dims[0], keepdim);
    default: return NULL;
  }
}

/* ---- hand-computed values ---------------------------------------------- */

START_TEST(test_hand_values) {
  lt_tensor *x = LT_NN(lt_tensor_from_copy(LT_DTYPE_F32, LT_SHAPE(2, 3), (float[]){1, 2, 3, 4, 5, 6}));
  lt_tensor *t;
  t = LT_NN(lt_sum(x, 0, NULL, false));
  ck_assert_int_eq(t->ndim, 0);
  ck_assert_int_eq(t->dtype, LT_DTYPE_F32);
  LT_ASSERT_VALUES(t, 0, 21);
  lt_tensor_free(t);
  t = LT_NN(lt_sum(x, LT_DIMS(0), false));
  LT_ASSERT_SHAPE(t, 3);
  LT_ASSERT_VALUES(t, 0, 5, 7, 9);
  lt_tensor_free(t);
  t = LT_NN(lt_sum(x, LT_DIMS(-1), true));
  LT_ASSERT_SHAPE(t, 2, 1);
  LT_ASSERT_VALUES(t, 0, 6, 15);
  lt_tensor_free(t);
  t = LT_NN(lt_sum(x, LT_DIMS(1, 0), true));
  LT_ASSERT_SHAPE(t, 1, 1);
  LT_ASSERT_VALUES(t, 0, 21);
  lt_tensor_free(t);
  t = LT_NN(lt_mean(x, LT_DIMS(1), false));
  LT_ASSERT_VALUES(t, 1e-6, 2, 5);
  lt_tensor_free(t);
  t = LT_NN(lt_mean(x, 0, NULL, false));
  LT_ASSERT_VALUES(t, 1e-6, 3.5);
  lt_tensor_free(t);
  t = LT_NN(lt_amax(x, LT_DIMS(1), false));
  LT_ASSERT_VALUES(t, 0, 3, 6);
  lt_tensor_free(t);
  t = LT_NN(lt_amin(x, LT_DIMS(0), true));
  LT_ASSERT_SHAPE(t, 1, 3);
  LT_ASSERT_VALUES(t, 0, 1, 2, 3);
  lt_tensor_free(t);
  t = LT_NN(lt_var(x, LT_DIMS(1), true, false));
  LT_ASSERT_VALUES(t, 1e-6, 1, 1);
  lt_tensor_free(t);
  t = LT_NN(lt_var(x, LT_DIMS(1), false, false));
  LT_ASSERT_VALUES(t, 1e-6, 2.0 / 3, 2.0 / 3);
  lt_tensor_free(t);
  t = LT_NN(lt_var(x, 0, NULL, true, false)); /* mean 3.5, ss 17.5, /5 */
  LT_ASSERT_VALUES(t, 1e-6, 3.5);
  lt_tensor_free(t);
  t = LT_NN(lt_std(x, LT_DIMS(0), true, false)); /* columns differ by 3: var 4.5 */
  LT_ASSERT_VALUES(t, 1e-6, sqrt(4.5), sqrt(4.5), sqrt(4.5));
  lt_tensor_free(t);
  t = LT_NN(lt_logsumexp(x, LT_DIMS(1), false));
  LT_ASSERT_VALUES(t, 1e-6, log(exp(1) + exp(2) + exp(3)), log(exp(4) + exp(5) + exp(6)));
  lt_tensor_free(t);
  lt_tensor *idx = NULL;
  t = LT_NN(lt_max_dim(x, 1, false, &idx));
  ck_assert_ptr_nonnull(idx);
  LT_ASSERT_VALUES(t, 0, 3, 6);
  ck_assert_int_eq(idx->dtype, LT_DTYPE_I64);
  LT_ASSERT_VALUES(idx, 0, 2, 2);
  lt_tensor_free(t);
  lt_tensor_free(idx);
  t = LT_NN(lt_min_dim(x, 0, true, &idx));
  LT_ASSERT_SHAPE(t, 1, 3);
  LT_ASSERT_SHAPE(idx, 1, 3);
  LT_ASSERT_VALUES(t, 0, 1, 2, 3);
  LT_ASSERT_VALUES(idx, 0, 0, 0, 0);
  lt_tensor_free(t);
  lt_tensor_free(idx);
  t = LT_NN(lt_min_dim(x, 0, true, NULL)); /* indices not wanted */
  LT_ASSERT_VALUES(t, 0, 1, 2, 3);
  lt_tensor_free(t);
  t = LT_NN(lt_argmax(x, 0, false));
  LT_ASSERT_VALUES(t, 0, 1, 1, 1);
  lt_tensor_free(t);
  t = LT_NN(lt_argmin(x, -1, true));
  LT_ASSERT_SHAPE(t, 2, 1);
  LT_ASSERT_VALUES(t, 0, 0, 0);
  lt_tensor_free(t);
  /* softmax of [1,2,3]: e^k / (e + e^2 + e^3) */
  double z = exp(1) + exp(2) + exp(3);
  t = LT_NN(lt_softmax(x, 1));
  LT_ASSERT_SHAPE(t, 2, 3);
  LT_ASSERT_VALUES(t, 1e-6, exp(1) / z, exp(2) / z, exp(3) / z, exp(1) / z, exp(2) / z, exp(3) / z);
  lt_tensor_free(t);
  t = LT_NN(lt_log_softmax(x, -1));
  LT_ASSERT_VALUES(t, 1e-5, 1 - log(z), 2 - log(z), 3 - log(z), 1 - log(z), 2 - log(z), 3 - log(z));
  lt_tensor_free(t);
  /* along dim 0 the columns are [1,4], [2,5], [3,6]: softmax (1/(1+e^3), e^3/(1+e^3)) */
  double p = 1 / (1 + exp(3)), q = exp(3) / (1 + exp(3));
  t = LT_NN(lt_softmax(x, 0));
  LT_ASSERT_VALUES(t, 1e-6, p, p, p, q, q, q);
  lt_tensor_free(t);
  t = LT_NN(lt_log_softmax(x, 0));
  LT_ASSERT_VALUES(t, 1e-5, log(p), log(p), log(p), log(q), log(q), log(q));
  lt_tensor_free(t);
  lt_tensor_free(x);
}
END_TEST

START_TEST(test_sum_f32_accumulates_in_double) {
  /* 2^24 + 1 + 1 + ...: a float accumulator would stick at 2^24. */
  int64_t n = 1 << 12;
  float *v = malloc(sizeof(float) * (size_t)n);
  ck_assert(v);
  v[0] = 16777216.0f;
  for (int64_t i = 1; i < n; i++) v[i] = 1.0f;
  lt_tensor *x = LT_NN(lt_tensor_from_copy(LT_DTYPE_F32, LT_SHAPE(n), v));
  lt_tensor *s = LT_NN(lt_sum(x, 0, NULL, false));
  double got;
  LT_OK_OR_FAIL(lt_item(s, &got));
  /* the exact sum, rounded once to f32 (a float accumulator gives 2^24) */
  const double want = (double)(float)(16777216.0 + (double)(n - 1));
  ck_assert_msg(got == want, "sum is %.1f, expected %.1f", got, want);
  lt_tensor_free(s);
  /* the column path too: [n, 2] (both columns the same) over dim 0 */
  float *v2 = malloc(sizeof(float) * (size_t)(2 * n));
  ck_assert(v2);
  for (int64_t i = 0; i < 2 * n; i++) v2[i] = v[i / 2];
  lt_tensor *x2 = LT_NN(lt_tensor_from_copy(LT_DTYPE_F32, LT_SHAPE(n, 2), v2));
  s = LT_NN(lt_sum(x2, LT_DIMS(0), false));
  LT_ASSERT_VALUES(s, 0, want, want);
  lt_tensor_free(s);
  lt_tensor_free(x2);
  free(v2);
  lt_tensor_free(x);
  free(v);
}
END_TEST

/* ---- random against the reference -------------------------------------- */

/* ---- 0-d and zero-size ---------------------------------------------------- */

START_TEST(test_zero_d) {
  lt_tensor *x = LT_NN(lt_scalar(LT_DTYPE_F64, 2.5));
  lt_tensor *t;
  int kinds[] = {RSUM, RMEAN, RAMAX, RAMIN, RLSE};
  double want[] = {2.5, 2.5, 2.5, 2.5, 2.5};
  for (int k = 0; k < 5; k++) {
    for (int v = 0; v < 3; v++) { /* all dims, dim 0, dim -1 */
      int d = v == 1 ? 0 : -1;
      t = LT_NN(run_kind(kinds[k], x, v ? 1 : 0, &d, v == 2));
      ck_assert_int_eq(t->ndim, 0);
      LT_ASSERT_VALUES(t, 1e-12, want[k]);
      lt_tensor_free(t);
    }
  }
  t = LT_NN(lt_var(x, 0, NULL, false, false));
  LT_ASSERT_VALUES(t, 0, 0);
  lt_tensor_free(t);
  t = LT_NN(lt_var(x, 0, NULL, true, false)); /* N - 1 = 0 */
  LT_ASSERT_VALUES(t, 0, NAN);
  lt_tensor_free(t);
  lt_tensor *idx = NULL;
  t = LT_NN(lt_max_dim(x, 0, false, &idx));
  ck_assert_int_eq(t->ndim, 0);
  ck_assert_int_eq(idx->ndim, 0);
  LT_ASSERT_VALUES(t, 0, 2.5);
  LT_ASSERT_VALUES(idx, 0, 0);
  lt_tensor_free(t);
  lt_tensor_free(idx);
  t = LT_NN(lt_argmin(x, -1, true));
  ck_assert_int_eq(t->ndim, 0);
  LT_ASSERT_VALUES(t, 0, 0);
  lt_tensor_free(t);
  t = LT_NN(lt_softmax(x, 0));
  ck_assert_int_eq(t->ndim, 0);
  LT_ASSERT_VALUES(t, 0, 1);
  lt_tensor_free(t);
  t = LT_NN(lt_log_softmax(x, -1));
  LT_ASSERT_VALUES(t, 0, 0);
  lt_tensor_free(t);
  /* duplicates are an error on 0-d too; dim 1 is out of range */
  LT_EXPECT_NULL_ERR(lt_sum(x, LT_DIMS(0, -1), false), LT_ERR_INVALID, "more than once");
  LT_EXPECT_NULL_ERR(lt_sum(x, LT_DIMS(1), false), LT_ERR_INDEX, "rank 0");
  lt_tensor_free(x);
}
END_TEST

START_TEST(test_zero_size) {
  lt_tensor *x = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(0, 3)));
  lt_tensor *t;
  t = LT_NN(lt_sum(x, LT_DIMS(0), false));
  LT_ASSERT_SHAPE(t, 3);
  LT_ASSERT_VALUES(t, 0, 0, 0, 0);
  lt_tensor_free(t);
  t = LT_NN(lt_sum(x, 0, NULL, false));
  LT_ASSERT_VALUES(t, 0, 0);
  lt_tensor_free(t);
  t = LT_NN(lt_sum(x, LT_DIMS(1), true)); /* nothing to reduce into: [0, 1] */
  LT_ASSERT_SHAPE(t, 0, 1);
  lt_tensor_free(t);
  t = LT_NN(lt_mean(x, LT_DIMS(0), true));
  LT_ASSERT_SHAPE(t, 1, 3);
  LT_ASSERT_VALUES(t, 0, NAN, NAN, NAN);
  lt_tensor_free(t);
  t = LT_NN(lt_var(x, LT_DIMS(0), false, false));
  LT_ASSERT_VALUES(t, 0, NAN, NAN, NAN);
  lt_tensor_free(t);
  t = LT_NN(lt_std(x, LT_DIMS(0), true, false));
  LT_ASSERT_VALUES(t, 0, NAN, NAN, NAN);
  lt_tensor_free(t);
  t = LT_NN(lt_logsumexp(x, LT_DIMS(0), false));
  LT_ASSERT_VALUES(t, 0, -INFINITY, -INFINITY, -INFINITY);
  lt_tensor_free(t);
  /* amax over the non-empty dim of an empty tensor is fine (empty result) */
  t = LT_NN(lt_amax(x, LT_DIMS(1), false));
  LT_ASSERT_SHAPE(t, 0);
  lt_tensor_free(t);
  t = LT_NN(lt_argmax(x, 1, false));
  LT_ASSERT_SHAPE(t, 0);
  lt_tensor_free(t);
  t = LT_NN(lt_softmax(x, 0));
  LT_ASSERT_SHAPE(t, 0, 3);
  lt_tensor_free(t);
  t = LT_NN(lt_log_softmax(x, 1));
  LT_ASSERT_SHAPE(t, 0, 3);
  lt_tensor_free(t);
  lt_tensor *xi = LT_NN(lt_zeros(LT_DTYPE_I32, LT_SHAPE(2, 0)));
  t = LT_NN(lt_sum(xi, LT_DIMS(1), false));
  ck_assert_int_eq(t->dtype, LT_DTYPE_I64);
  LT_ASSERT_VALUES(t, 0, 0, 0);
  lt_tensor_free(t);
  lt_tensor_free(xi);
  lt_tensor_free(x);
}
END_TEST

/* ---- integer dtypes ---------------------------------------------------- */

START_TEST(test_integer_dtypes) {
  lt_tensor *xi = LT_NN(lt_tensor_from_copy(LT_DTYPE_I32, LT_SHAPE(2, 3), (int32_t[]){3, -7, 3, 2147483647, 1, -2}));
  lt_tensor *t = LT_NN(lt_sum(xi, LT_DIMS(1), false));
  ck_assert_int_eq(t->dtype, LT_DTYPE_I64);
  LT_ASSERT_VALUES(t, 0, -1, 2147483646.0);
  lt_tensor_free(t);
  t = LT_NN(lt_sum(xi, LT_DIMS(0), false)); /* no i32 overflow: i64 */
  LT_ASSERT_VALUES(t, 0, 2147483650.0, -6, 1);
  lt_tensor_free(t);
  t = LT_NN(lt_amax(xi, LT_DIMS(1), false));
  ck_assert_int_eq(t->dtype, LT_DTYPE_I32);
  LT_ASSERT_VALUES(t, 0, 3, 2147483647.0);
  lt_tensor_free(t);
  t = LT_NN(lt_amin(xi, 0, NULL, true));
  LT_ASSERT_SHAPE(t, 1, 1);
  LT_ASSERT_VALUES(t, 0, -7);
  lt_tensor_free(t);
  t = LT_NN(lt_argmax(xi, 1, false)); /* tie 3, -7, 3: first */
  LT_ASSERT_VALUES(t, 0, 0, 0);
  lt_tensor_free(t);
  lt_tensor *idx;
  t = LT_NN(lt_min_dim(xi, 0, false, &idx));
  ck_assert_int_eq(t->dtype, LT_DTYPE_I32);
  LT_ASSERT_VALUES(t, 0, 3, -7, -2);
  LT_ASSERT_VALUES(idx, 0, 0, 0, 1);
  lt_tensor_free(t);
  lt_tensor_free(idx);
  t = LT_NN(lt_logsumexp(xi, LT_DIMS(0), false)); /* ints compute in f32 */
  ck_assert_int_eq(t->dtype, LT_DTYPE_F32);
  lt_tensor_free(t);
  t = LT_NN(lt_softmax(xi, 1));
  ck_assert_int_eq(t->dtype, LT_DTYPE_F32);
  lt_tensor_free(t);
  lt_tensor_free(xi);

  lt_tensor *xl = LT_NN(lt_tensor_from_copy(LT_DTYPE_I64, LT_SHAPE(3), (int64_t[]){4000000000, 5000000000, -1}));
  t = LT_NN(lt_sum(xl, 0, NULL, false));
  int64_t s64;
  LT_OK_OR_FAIL(lt_tensor_read(t, LT_DTYPE_I64, &s64, 1));
  ck_assert(s64 == 8999999999);
  lt_tensor_free(t);
  t = LT_NN(lt_amax(xl, LT_DIMS(0), false));
  ck_assert_int_eq(t->dtype, LT_DTYPE_I64);
  LT_OK_OR_FAIL(lt_tensor_read(t, LT_DTYPE_I64, &s64, 1));
  ck_assert(s64 == 5000000000);
  lt_tensor_free(t);
  lt_tensor_free(xl);

  lt_tensor *xb = LT_NN(lt_tensor_from_copy(LT_DTYPE_BOOL, LT_SHAPE(2, 3), (uint8_t[]){1, 0, 1, 0, 0, 0}));
  t = LT_NN(lt_sum(xb, LT_DIMS(1), false));
  ck_assert_int_eq(t->dtype, LT_DTYPE_I64);
  LT_ASSERT_VALUES(t, 0, 2, 0);
  lt_tensor_free(t);
  t = LT_NN(lt_amax(xb, LT_DIMS(1), false));
  ck_assert_int_eq(t->dtype, LT_DTYPE_BOOL);
  LT_ASSERT_VALUES(t, 0, 1, 0);
  lt_tensor_free(t);
  t = LT_NN(lt_argmax(xb, 1, false));
  LT_ASSERT_VALUES(t, 0, 0, 0);
  lt_tensor_free(t);
  t = LT_NN(lt_argmin(xb, 1, false));
  LT_ASSERT_VALUES(t, 0, 1, 0);
  lt_tensor_free(t);
  lt_tensor_free(xb);

}
END_TEST

/* ---- NaN, ties ---------------------------------------------------------- */

START_TEST(test_nan_and_ties) {
  lt_tensor *x = LT_NN(lt_tensor_from_copy(LT_DTYPE_F32, LT_SHAPE(3, 4),
      (float[]){1, NAN, 5, NAN, 2, 7, 7, 0, -1, -1, -3, -3}));
  lt_tensor *t, *idx;
  t = LT_NN(lt_amax(x, LT_DIMS(1), false));
  LT_ASSERT_VALUES(t, 0, NAN, 7, -1);
  lt_tensor_free(t);
  t = LT_NN(lt_amin(x, LT_DIMS(1), false));
  LT_ASSERT_VALUES(t, 0, NAN, 0, -3);
  lt_tensor_free(t);
  t = LT_NN(lt_amax(x, LT_DIMS(0), false)); /* column path */
  LT_ASSERT_VALUES(t, 0, 2, NAN, 7, NAN);
  lt_tensor_free(t);
  t = LT_NN(lt_max_dim(x, 1, false, &idx));
  LT_ASSERT_VALUES(t, 0, NAN, 7, -1);
  LT_ASSERT_VALUES(idx, 0, 1, 1, 0); /* first NaN; first of the tied 7s and -1s */
  lt_tensor_free(t);
  lt_tensor_free(idx);
  t = LT_NN(lt_min_dim(x, 1, true, &idx));
  LT_ASSERT_VALUES(t, 0, NAN, 0, -3);
  LT_ASSERT_VALUES(idx, 0, 1, 3, 2);
  lt_tensor_free(t);
  lt_tensor_free(idx);
  t = LT_NN(lt_argmax(x, 0, false)); /* columns [1,2,-1] [nan,7,-1] [5,7,-3] [nan,0,-3] */
  LT_ASSERT_VALUES(t, 0, 1, 0, 1, 0);
  lt_tensor_free(t);
  t = LT_NN(lt_sum(x, LT_DIMS(1), false));
  LT_ASSERT_VALUES(t, 0, NAN, 16, -8);
  lt_tensor_free(t);
  t = LT_NN(lt_logsumexp(x, LT_DIMS(1), false));
  double lse1 = log(exp(2) + 2 * exp(7) + exp(0));
  LT_ASSERT_VALUES(t, 1e-5, NAN, lse1, -1 + log(2 * 1 + 2 * exp(-2)));
  lt_tensor_free(t);
  /* ties in every position of long rows (lanes and tails) */
  float v[2 * 37];
  for (int i = 0; i < 74; i++) v[i] = (float)(i % 37 == 20 || i % 37 == 30 ? 9 : (i % 37) % 5);
  lt_tensor *y = LT_NN(lt_tensor_from_copy(LT_DTYPE_F32, LT_SHAPE(2, 37), v));
  t = LT_NN(lt_argmax(y, 1, false));
  LT_ASSERT_VALUES(t, 0, 20, 20);
  lt_tensor_free(t);
  lt_tensor *yt = LT_NN(lt_transpose(y, 0, 1));
  t = LT_NN(lt_argmax(yt, 0, false));
  LT_ASSERT_VALUES(t, 0, 20, 20);
  lt_tensor_free(t);
  t = LT_NN(lt_argmin(yt, 0, false));
  LT_ASSERT_VALUES(t, 0, 0, 0);
  lt_tensor_free(t);
  lt_tensor_free(yt);
  lt_tensor_free(y);
  /* a column-path arg reduction with ties: [40, 3] over dim 0 */
  float w[120];
  for (int i = 0; i < 120; i++) w[i] = (float)((i / 3) % 4 == 2 ? 5 : 0);
  lt_tensor *z = LT_NN(lt_tensor_from_copy(LT_DTYPE_F32, LT_SHAPE(40, 3), w));
  t = LT_NN(lt_max_dim(z, 0, false, &idx));
  LT_ASSERT_VALUES(idx, 0, 2, 2, 2);
  lt_tensor_free(t);
  lt_tensor_free(idx);
  t = LT_NN(lt_argmin(z, 0, true));
  LT_ASSERT_VALUES(t, 0, 0, 0, 0);
  lt_tensor_free(t);
  lt_tensor_free(z);
  lt_tensor_free(x);
}
END_TEST

/* ---- softmax ----------------------------------------------------------- */

START_TEST(test_softmax_stability_and_masks) {
  lt_tensor *x = LT_NN(lt_tensor_from_copy(LT_DTYPE_F32, LT_SHAPE(3, 3),
      (float[]){1000, 0, -1000, 1000, 1000, -1000, -1000, -1000, -1000}));
  lt_tensor *t = LT_NN(lt_softmax(x, 1));
  LT_ASSERT_VALUES(t, 1e-7, 1, 0, 0, 0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3);
  lt_tensor_free(t);
  t = LT_NN(lt_log_softmax(x, 1));
  LT_ASSERT_VALUES(t, 1e-4, 0, -1000, -2000, -log(2), -log(2), -2000 - log(2), -log(3), -log(3), -log(3));
  lt_tensor_free(t);
  t = LT_NN(lt_logsumexp(x, LT_DIMS(1), false));
  LT_ASSERT_VALUES(t, 1e-3, 1000, 1000 + log(2), -1000 + log(3));
  lt_tensor_free(t);
  t = LT_NN(lt_softmax(x, 0)); /* column path */
  LT_ASSERT_VALUES(t, 1e-7, 0.5, 0, 1.0 / 3, 0.5, 1, 1.0 / 3, 0, 0, 1.0 / 3);
  lt_tensor_free(t);
  lt_tensor_free(x);

  /* -inf entries (masked positions) and a fully masked row */
  for (int dti = 0; dti < 2; dti++) {
    lt_dtype dt = dti ? LT_DTYPE_F64 : LT_DTYPE_F32;
    lt_tensor *m64 = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(3, 3),
        (double[]){0, -INFINITY, 0, 2, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY}));
    lt_tensor *m = LT_NN(lt_to_dtype(m64, dt));
    t = LT_NN(lt_softmax(m, -1));
    LT_ASSERT_VALUES(t, 1e-7, 0.5, 0, 0.5, 1, 0, 0, NAN, NAN, NAN);
    lt_tensor_free(t);
    t = LT_NN(lt_log_softmax(m, -1));
    LT_ASSERT_VALUES(t, 1e-6, -log(2), -INFINITY, -log(2), 0, -INFINITY, -INFINITY, NAN, NAN, NAN);
    lt_tensor_free(t);
    t = LT_NN(lt_logsumexp(m, LT_DIMS(1), true));
    LT_ASSERT_VALUES(t, 1e-6, log(2), 2, -INFINITY);
    lt_tensor_free(t);
    t = LT_NN(lt_logsumexp(m, LT_DIMS(0), false)); /* column path */
    LT_ASSERT_VALUES(t, 1e-6, log(1 + exp(2)), -INFINITY, 0);
    lt_tensor_free(t);
    lt_tensor *mt = LT_NN(lt_transpose(m, 0, 1)); /* columns of m become rows */
    t = LT_NN(lt_softmax(mt, 0));
    ck_assert(lt_is_contiguous(t)); /* a new contiguous tensor from a strided input */
    LT_ASSERT_VALUES(t, 1e-7, 0.5, 1, NAN, 0, 0, NAN, 0.5, 0, NAN);
    lt_tensor_free(t);
    lt_tensor_free(mt);
    /* +inf in logsumexp */
    lt_tensor *pinf = LT_NN(lt_full(dt, LT_SHAPE(2), INFINITY));
    t = LT_NN(lt_logsumexp(pinf, 0, NULL, false));
    LT_ASSERT_VALUES(t, 0, INFINITY);
    lt_tensor_free(t);
    lt_tensor_free(pinf);
    lt_tensor_free(m);
    lt_tensor_free(m64);
  }
}
END_TEST

/* ---- errors ------------------------------------------------------------ */

START_TEST(test_errors) {
  lt_tensor *x = LT_NN(lt_tensor_from_copy(LT_DTYPE_F32, LT_SHAPE(2, 3), (float[]){1, 2, 3, 4, 5, 6}));
  LT_EXPECT_NULL_ERR(lt_std(x, LT_DIMS(0, 0), true, false), LT_ERR_INVALID, "more than once");
  LT_EXPECT_NULL_ERR(lt_sum(x, -1, (const int[]){0}, false), LT_ERR_INVALID, "ndims");
  LT_EXPECT_NULL_ERR(lt_sum(x, 1, NULL, false), LT_ERR_NULL, "dims");
  LT_EXPECT_NULL_ERR(lt_sum(NULL, 0, NULL, false), LT_ERR_NULL, "sum");
  LT_EXPECT_NULL_ERR(lt_softmax(NULL, 0), LT_ERR_NULL, "softmax");
  lt_tensor *idx = (lt_tensor *)x; /* must be reset to NULL on failure */
  LT_EXPECT_NULL_ERR(lt_max_dim(x, 3, false, &idx), LT_ERR_INDEX, "max_dim");
  ck_assert_ptr_null(idx);
  LT_EXPECT_NULL_ERR(lt_max_dim(NULL, 0, false, &idx), LT_ERR_NULL, "max_dim");
  ck_assert_ptr_null(idx);

  lt_tensor *e = LT_NN(lt_zeros(LT_DTYPE_F32, LT_SHAPE(3, 0)));
  LT_EXPECT_NULL_ERR(lt_max_dim(e, -1, false, &idx), LT_ERR_SHAPE, "max_dim: x is [3,0] f32: cannot reduce over dim 1");
  ck_assert_ptr_null(idx);
  lt_tensor_free(e);

  /* the input is untouched after all of this */
  LT_ASSERT_VALUES(x, 0, 1, 2, 3, 4, 5, 6);
  lt_tensor_free(x);
}
END_TEST

/* ---- gradient rules checked by hand ------------------------------------- */

START_TEST(test_amax_tie_splitting) {
  lt_tensor *x = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(2, 4),
      (double[]){1, 3, 3, 2, 5, 5, 5, 0}));
  LT_OK_OR_FAIL(lt_requires_grad_(x, true));
  /* amax over dim 1: [3, 5]; the gradient of each is split among its ties */
  lt_tensor *y = LT_NN(lt_amax(x, LT_DIMS(1), false));
  lt_tensor *go = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(2), (double[]){1, 6}));
  LT_OK_OR_FAIL(lt_backward(y, go, false));
  LT_ASSERT_VALUES(x->grad, 1e-15, 0, 0.5, 0.5, 0, 2, 2, 2, 0);
  lt_zero_grad(x);
  lt_tensor_free(y);
  /* amin over everything: the min 0 is unique */
  y = LT_NN(lt_amin(x, 0, NULL, false));
  LT_OK_OR_FAIL(lt_backward(y, NULL, false));
  LT_ASSERT_VALUES(x->grad, 0, 0, 0, 0, 0, 0, 0, 0, 1);
  lt_zero_grad(x);
  lt_tensor_free(y);
  /* max_dim sends the whole gradient to the first index */
  lt_tensor *idx;
  y = LT_NN(lt_max_dim(x, 1, true, &idx));
  LT_ASSERT_VALUES(idx, 0, 1, 0);
  lt_tensor *go2 = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(2, 1), (double[]){1, 6}));
  LT_OK_OR_FAIL(lt_backward(y, go2, false));
  LT_ASSERT_VALUES(x->grad, 0, 0, 1, 0, 0, 6, 0, 0, 0);
  lt_tensor_free(y);
  lt_tensor_free(idx);
  lt_tensor_free(go);
  lt_tensor_free(go2);
  lt_tensor_free(x);
}
END_TEST

START_TEST(test_backward_values) {
  /* sum/mean: ones and 1/N spread over the input; softmax rows: y*(g - sum(g*y)). */
  lt_tensor *x = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(2, 3), (double[]){1, 2, 3, 4, 5, 6}));
  LT_OK_OR_FAIL(lt_requires_grad_(x, true));
  lt_tensor *y = LT_NN(lt_mean(x, LT_DIMS(0), false));
  lt_tensor *s = LT_NN(lt_sum(y, 0, NULL, false));
  LT_OK_OR_FAIL(lt_backward(s, NULL, false));
  LT_ASSERT_VALUES(x->grad, 1e-15, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5);
  lt_zero_grad(x);
  lt_tensor_free(y);
  lt_tensor_free(s);
  /* sum(softmax) is constant: zero gradient; log_softmax with g = e_0 gives e_0 - softmax */
  y = LT_NN(lt_softmax(x, 1));
  s = LT_NN(lt_sum(y, 0, NULL, false));
  LT_OK_OR_FAIL(lt_backward(s, NULL, false));
  LT_ASSERT_VALUES(x->grad, 1e-15, 0, 0, 0, 0, 0, 0);
  lt_zero_grad(x);
  lt_tensor_free(y);
  lt_tensor_free(s);
  y = LT_NN(lt_log_softmax(x, 1));
  lt_tensor *g = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, LT_SHAPE(2, 3), (double[]){1, 0, 0, 0, 0, 1}));
  LT_OK_OR_FAIL(lt_backward(y, g, false));
  double z = exp(1) + exp(2) + exp(3);
  LT_ASSERT_VALUES(x->grad, 1e-12, 1 - exp(1) / z, -exp(2) / z, -exp(3) / z, -exp(1) / z,
                   -exp(2) / z, 1 - exp(3) / z);
  lt_zero_grad(x);
  lt_tensor_free(y);
  lt_tensor_free(g);
  lt_tensor_free(x);
}
END_TEST

/* ---- timing (informational; prints only with LT_BENCH set) ---------------- */

#include <time.h>
static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

START_TEST(test_bench) {
  if (!getenv("LT_BENCH")) return;
  rng_state = 3;
  lt_tensor *a = rand_tensor(LT_DTYPE_F32, LT_SHAPE(8192, 768));
  struct {
    const char *name;
    int which;
  } ops[] = {{"sum [8192,768] dim 0 (bias grad)", 0}, {"sum [8192,768] dim 1 (rows)", 1},
             {"softmax [8192,768] dim -1", 2}, {"softmax backward [8192,768]", 3},
             {"amax [8192,768] dim 1", 4}, {"sum all", 5}, {"var dim 1", 6}};
  for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
    double best = 1e9;
    for (int rep = 0; rep < 5; rep++) {
      lt_tensor *t = NULL;
      double t0 = now();
      switch (ops[k].which) {
        case 0: t = lt_sum(a, LT_DIMS(0), false); break;
        case 1: t = lt_sum(a, LT_DIMS(1), false); break;
        case 2: t = lt_softmax(a, -1); break;
        case 3: {
          lt_tensor *l = lt_detach(a);
          lt_requires_grad_(l, true);
          lt_tensor *y = lt_softmax(l, -1);
          t0 = now();
          lt_backward(y, a, false);
          lt_tensor_free(y);
          t = l;
          break;
        }
        case 4: t = lt_amax(a, LT_DIMS(1), false); break;
        case 5: t = lt_sum(a, 0, NULL, false); break;
        case 6: t = lt_var(a, LT_DIMS(1), true, false); break;
      }
      double dt = now() - t0;
      ck_assert_ptr_nonnull(t);
      lt_tensor_free(t);
      if (dt < best) best = dt;
    }
    printf("%-40s %8.3f ms  %6.2f GB/s\n", ops[k].name, best * 1e3, 8192.0 * 768 * 4 / best / 1e9);
  }
  lt_tensor_free(a);
}
END_TEST

int main(void) {
  Suite *s = suite_create("reduce");
  LT_TEST_CASE(s, "core", 300, test_hand_values, test_sum_f32_accumulates_in_double, test_zero_d,
               test_zero_size, test_integer_dtypes, test_nan_and_ties, test_softmax_stability_and_masks,
               test_errors, test_amax_tie_splitting, test_backward_values, test_bench);
  return lt_test_run(s);
}
