/*
 * tests/test_reduce.c: reductions, softmax and log_softmax (tensor/reduce.c).
 *
 * Hand-computed values; random f32/f64 inputs (random dim subsets, keepdim
 * both ways, transposed/sliced/expanded inputs) against a naive double
 * reference written here; the row and column kernels on sizes that cross
 * their block sizes; bit-identical results for 1 and 2 threads; 0-d and
 * zero-size inputs; integer dtypes; stability (+-1000, -inf, masked rows);
 * first-occurrence indices; every error path; and the hand-checked gradient
 * rules (tie splitting in amax, max_dim's index). Gradchecks live in
 * tests/gradcases_reduce.inc.
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
static int rng_int(int n) { return (int)(rng_next() % (uint64_t)n); }
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

/* A tensor of the given logical shape and random values whose layout is
 * chosen by how: 0 contiguous, 1 a transposed view (first and last dims),
 * 2 a view sliced with step 2 along dim 0, 3 an expanded view (stride 0 on
 * dim 0). */
static lt_tensor *rand_layout(lt_dtype dt, int ndim, const int64_t *shape, int how) {
  int64_t sh[LT_MAX_DIMS];
  memcpy(sh, shape, sizeof(int64_t) * (size_t)ndim);
  if (ndim < 1 || (how == 1 && ndim < 2)) how = 0;
  if (how == 1) {
    sh[0] = shape[ndim - 1];
    sh[ndim - 1] = shape[0];
    lt_tensor *b = rand_tensor(dt, ndim, sh);
    lt_tensor *v = LT_NN(lt_transpose(b, 0, ndim - 1));
    lt_tensor_free(b);
    return v;
  }
  if (how == 2) {
    sh[0] = 2 * shape[0] + 1;
    lt_tensor *b = rand_tensor(dt, ndim, sh);
    lt_tensor *v = LT_NN(lt_slice(b, 0, 1, 2 * shape[0] + 1, 2));
    lt_tensor_free(b);
    ck_assert_int_eq(v->shape[0], shape[0]);
    return v;
  }
  if (how == 3) {
    sh[0] = 1;
    lt_tensor *b = rand_tensor(dt, ndim, sh);
    lt_tensor *v = LT_NN(lt_expand(b, ndim, shape));
    lt_tensor_free(b);
    return v;
  }
  return rand_tensor(dt, ndim, shape);
}

static double *read_f64(const lt_tensor *t) {
  double *v = malloc(sizeof(double) * (size_t)(t->numel ? t->numel : 1));
  ck_assert(v);
  LT_OK_OR_FAIL(lt_tensor_read(t, LT_DTYPE_F64, v, t->numel));
  return v;
}

/* ---- the naive reference ----------------------------------------------- */

enum { RSUM, RMEAN, RAMAX, RAMIN, RVAR, RVARB, RSTD, RSTDB, RLSE, RARGMAX, RARGMIN, RKINDS };
static const char *const kind_names[RKINDS] = {"sum", "mean", "amax", "amin", "var", "var(biased)",
                                               "std", "std(biased)", "logsumexp", "argmax", "argmin"};

/* Output flat index of input flat index i (row-major over kept dims). */
static int64_t out_index(int ndim, const int64_t *shape, unsigned mask, int64_t i) {
  int64_t idx[LT_MAX_DIMS];
  for (int d = ndim - 1; d >= 0; d--) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  int64_t o = 0;
  for (int d = 0; d < ndim; d++)
    if (!(mask >> d & 1u)) o = o * shape[d] + idx[d];
  return o;
}

/* Position along the (single) reduced dim of input flat index i. */
static int64_t red_pos(int ndim, const int64_t *shape, unsigned mask, int64_t i) {
  for (int d = ndim - 1; d >= 0; d--) {
    if (mask >> d & 1u) return i % shape[d];
    i /= shape[d];
  }
  return 0;
}

/* Reference values (double) of a reduction of x (values xv in row-major). */
static void ref_reduce(int kind, int ndim, const int64_t *shape, unsigned mask, const double *xv,
                       double *out, int64_t nout) {
  int64_t n = 1, N = 1;
  for (int d = 0; d < ndim; d++) {
    n *= shape[d];
    if (mask >> d & 1u) N *= shape[d];
  }
  double *a = calloc((size_t)(nout ? nout : 1), sizeof(double));
  double *b = calloc((size_t)(nout ? nout : 1), sizeof(double));
  ck_assert(a && b);
  for (int64_t o = 0; o < nout; o++) a[o] = kind == RAMAX || kind == RARGMAX || kind == RLSE ? -INFINITY
                                          : kind == RAMIN || kind == RARGMIN ? INFINITY : 0.0;
  for (int64_t o = 0; o < nout; o++) b[o] = -1;
  for (int64_t i = 0; i < n; i++) {
    int64_t o = out_index(ndim, shape, mask, i);
    double v = xv[i];
    switch (kind) {
      case RAMAX: case RLSE: if (v > a[o] || isnan(v)) a[o] = isnan(a[o]) ? a[o] : v; break;
      case RAMIN: if (v < a[o] || isnan(v)) a[o] = isnan(a[o]) ? a[o] : v; break;
      case RARGMAX:
        if (b[o] < 0 || (!isnan(a[o]) && (v > a[o] || isnan(v)))) { a[o] = v; b[o] = (double)red_pos(ndim, shape, mask, i); }
        break;
      case RARGMIN:
        if (b[o] < 0 || (!isnan(a[o]) && (v < a[o] || isnan(v)))) { a[o] = v; b[o] = (double)red_pos(ndim, shape, mask, i); }
        break;
      default: a[o] += v;
    }
  }
  for (int64_t o = 0; o < nout; o++) {
    switch (kind) {
      case RSUM: out[o] = a[o]; break;
      case RMEAN: out[o] = a[o] / (double)N; break;
      case RAMAX: case RAMIN: out[o] = a[o]; break;
      case RARGMAX: case RARGMIN: out[o] = b[o]; break;
      default: break;
    }
  }
  if (kind == RVAR || kind == RVARB || kind == RSTD || kind == RSTDB) {
    for (int64_t o = 0; o < nout; o++) b[o] = 0;
    for (int64_t i = 0; i < n; i++) {
      int64_t o = out_index(ndim, shape, mask, i);
      double d = xv[i] - a[o] / (double)N;
      b[o] += d * d;
    }
    double den = (double)N - (kind == RVAR || kind == RSTD ? 1.0 : 0.0);
    for (int64_t o = 0; o < nout; o++) {
      double v = b[o] / (den > 0 ? den : 0.0);
      out[o] = kind == RSTD || kind == RSTDB ? sqrt(v) : v;
    }
  }
  if (kind == RLSE) {
    for (int64_t o = 0; o < nout; o++) b[o] = 0;
    for (int64_t i = 0; i < n; i++) {
      int64_t o = out_index(ndim, shape, mask, i);
      double m = isinf(a[o]) ? 0 : a[o];
      b[o] += exp(xv[i] - m);
    }
    for (int64_t o = 0; o < nout; o++) out[o] = log(b[o]) + (isinf(a[o]) ? 0 : a[o]);
  }
  free(a);
  free(b);
}

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

/* Check one reduction of x against the reference; returns false if skipped
 * (an empty max). */
static void check_against_ref(int kind, const lt_tensor *x, int ndims, const int *dims,
                              bool keepdim, double rtol, double atol) {
  unsigned mask = 0;
  if (ndims == 0) mask = (1u << x->ndim) - 1u;
  for (int i = 0; i < ndims; i++) mask |= x->ndim ? 1u << ((dims[i] + x->ndim) % x->ndim) : 0u;
  int64_t oshape[LT_MAX_DIMS], nout = 1;
  int ond = 0;
  bool empty_red = false;
  for (int d = 0; d < x->ndim; d++) {
    if (mask >> d & 1u) {
      if (x->shape[d] == 0) empty_red = true;
      if (keepdim) oshape[ond++] = 1;
    } else {
      oshape[ond++] = x->shape[d];
      nout *= x->shape[d];
    }
  }
  lt_tensor *y = run_kind(kind, x, ndims, dims, keepdim);
  if (empty_red && (kind == RAMAX || kind == RAMIN || kind == RARGMAX || kind == RARGMIN)) {
    ck_assert_msg(y == NULL, "%s over an empty dim should fail", kind_names[kind]);
    ck_assert_int_eq(lt_last_status(), LT_ERR_SHAPE);
    lt_clear_error();
    return;
  }
  ck_assert_msg(y != NULL, "%s of %s failed: %s", kind_names[kind],
                lt_shape_str(x->ndim, x->shape, (char[64]){0}, 64), lt_last_error());
  lt_test_assert_shape(y, ond, oshape, kind_names[kind], __FILE__, __LINE__);
  double *xv = read_f64(x);
  double *rv = malloc(sizeof(double) * (size_t)(nout ? nout : 1));
  ck_assert(rv);
  ref_reduce(kind, x->ndim, x->shape, mask, xv, rv, nout);
  lt_tensor *r = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, ond, oshape, rv));
  if (kind == RARGMAX || kind == RARGMIN) {
    ck_assert_int_eq(y->dtype, LT_DTYPE_I64);
    LT_ASSERT_CLOSE(y, r, 0, 0);
  } else {
    LT_ASSERT_CLOSE(y, r, rtol, atol);
  }
  free(xv);
  free(rv);
  lt_tensor_free(r);
  lt_tensor_free(y);
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

START_TEST(test_random_vs_reference) {
  rng_state = 0x1234567ull + (uint64_t)_i;
  for (int iter = 0; iter < 150; iter++) {
    lt_dtype dt = rng_int(2) ? LT_DTYPE_F32 : LT_DTYPE_F64;
    int ndim = rng_int(5); /* 0..4 */
    int64_t shape[LT_MAX_DIMS];
    for (int d = 0; d < ndim; d++) shape[d] = rng_int(12) == 0 ? 0 : 1 + rng_int(6);
    int how = rng_int(4);
    lt_tensor *x = rand_layout(dt, ndim, shape, how);
    /* a random subset of dims (some negative), or all (ndims 0) */
    int dims[LT_MAX_DIMS], nd = 0;
    if (ndim > 0 && rng_int(5)) {
      for (int d = 0; d < ndim; d++)
        if (rng_int(2)) dims[nd++] = rng_int(2) ? d : d - ndim;
      if (nd == 0) dims[nd++] = rng_int(ndim);
      /* shuffle: dims may come in any order */
      for (int i = nd - 1; i > 0; i--) {
        int j = rng_int(i + 1), t = dims[i];
        dims[i] = dims[j];
        dims[j] = t;
      }
    }
    bool keepdim = rng_int(2);
    double tol = dt == LT_DTYPE_F32 ? 1e-5 : 1e-12;
    for (int kind = 0; kind < RLSE + 1; kind++) check_against_ref(kind, x, nd, dims, keepdim, tol, tol);
    /* arg reductions over one dim */
    int one[1] = {ndim ? rng_int(ndim) : 0};
    check_against_ref(RARGMAX, x, 1, one, keepdim, 0, 0);
    check_against_ref(RARGMIN, x, 1, one, keepdim, 0, 0);
    lt_tensor_free(x);
  }
}
END_TEST

/* Sizes that cross the column block (512), the row lanes (8) and the
 * parallel threshold, on the row and the column paths. */
START_TEST(test_big_shapes_vs_reference) {
  rng_state = 99;
  struct {
    int ndim;
    int64_t shape[4];
    int nd;
    int dims[4];
    int how;
  } cases[] = {
      {2, {300, 1037}, 1, {0}, 0},      /* bias gradient: column path, 3 blocks */
      {2, {257, 301}, 1, {1}, 0},       /* rows */
      {2, {301, 257}, 1, {0}, 1},       /* transposed: rows again */
      {3, {7, 130, 67}, 2, {0, 2}, 0},  /* mixed */
      {3, {9, 50, 111}, 1, {1}, 0},     /* middle dim: columns */
      {3, {9, 50, 111}, 2, {2, 0}, 2},  /* sliced */
      {2, {3, 40000}, 1, {1}, 0},       /* long rows */
      {2, {40000, 3}, 1, {0}, 0},       /* narrow columns */
      {1, {70001}, 0, {0}, 0},          /* full */
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    for (int dti = 0; dti < 2; dti++) {
      lt_dtype dt = dti ? LT_DTYPE_F64 : LT_DTYPE_F32;
      lt_tensor *x = rand_layout(dt, cases[c].ndim, cases[c].shape, cases[c].how);
      double tol = dt == LT_DTYPE_F32 ? 2e-5 : 1e-11;
      for (int kind = 0; kind <= RLSE; kind++)
        for (int kd = 0; kd < 2; kd++) check_against_ref(kind, x, cases[c].nd, cases[c].dims, kd, tol, tol);
      if (cases[c].nd == 1) {
        check_against_ref(RARGMAX, x, 1, cases[c].dims, false, 0, 0);
        check_against_ref(RARGMIN, x, 1, cases[c].dims, true, 0, 0);
      }
      lt_tensor_free(x);
    }
  }
}
END_TEST

/* Results do not depend on the number of threads (bit-identical). */
START_TEST(test_thread_count_bit_identical) {
  rng_state = 7;
  int saved = lt_get_num_threads();
  lt_tensor *a = rand_tensor(LT_DTYPE_F32, LT_SHAPE(512, 300));
  lt_tensor *b = rand_tensor(LT_DTYPE_F32, LT_SHAPE(64, 4, 300));
  lt_tensor *r[2][10];
  for (int k = 0; k < 2; k++) {
    LT_OK_OR_FAIL(lt_set_num_threads(k ? 2 : 1));
    r[k][0] = LT_NN(lt_sum(a, LT_DIMS(0), false));
    r[k][1] = LT_NN(lt_sum(a, LT_DIMS(1), false));
    r[k][2] = LT_NN(lt_mean(b, LT_DIMS(0, 1), false));
    r[k][3] = LT_NN(lt_var(b, LT_DIMS(1), true, false));
    r[k][4] = LT_NN(lt_logsumexp(a, LT_DIMS(1), false));
    r[k][5] = LT_NN(lt_softmax(a, 1));
    r[k][6] = LT_NN(lt_softmax(b, 1));
    r[k][7] = LT_NN(lt_log_softmax(a, 0));
    r[k][8] = LT_NN(lt_amax(b, LT_DIMS(0, 2), false));
    r[k][9] = LT_NN(lt_argmax(a, 0, false));
  }
  LT_OK_OR_FAIL(lt_set_num_threads(saved));
  for (int i = 0; i < 10; i++) {
    ck_assert_msg(lt_equal(r[0][i], r[1][i]), "result %d differs between 1 and 2 threads", i);
    lt_tensor_free(r[0][i]);
    lt_tensor_free(r[1][i]);
  }
  lt_tensor_free(a);
  lt_tensor_free(b);
}
END_TEST

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
  LT_EXPECT_NULL_ERR(lt_mean(xi, 0, NULL, false), LT_ERR_DTYPE, "mean");
  LT_EXPECT_NULL_ERR(lt_var(xi, 0, NULL, true, false), LT_ERR_DTYPE, "var");
  LT_EXPECT_NULL_ERR(lt_std(xi, LT_DIMS(0), true, false), LT_ERR_DTYPE, "std");
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

  /* random integers against the reference, non-contiguous too */
  rng_state = 5;
  for (int iter = 0; iter < 20; iter++) {
    lt_tensor *f = rand_layout(LT_DTYPE_F64, 3, (int64_t[]){3, 4, 5}, iter % 4);
    lt_tensor *s10 = LT_NN(lt_mul_scalar(f, 10));
    lt_tensor *xi2 = LT_NN(lt_to_dtype(s10, iter % 2 ? LT_DTYPE_I32 : LT_DTYPE_I64));
    int dims[2] = {iter % 3, (iter + 1) % 3};
    check_against_ref(RSUM, xi2, 1 + iter % 2, dims, iter % 3 == 0, 0, 0);
    check_against_ref(RAMAX, xi2, 1 + iter % 2, dims, false, 0, 0);
    check_against_ref(RAMIN, xi2, 1 + iter % 2, dims, true, 0, 0);
    check_against_ref(RARGMAX, xi2, 1, dims, false, 0, 0);
    check_against_ref(RARGMIN, xi2, 1, dims, false, 0, 0);
    lt_tensor_free(f);
    lt_tensor_free(s10);
    lt_tensor_free(xi2);
  }
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

static void ref_softmax(const lt_tensor *x, int dim, bool logsm, lt_tensor **out) {
  int d = dim < 0 ? dim + x->ndim : dim;
  double *v = read_f64(x);
  int64_t outer = 1, n = x->shape[d], inner = 1;
  for (int i = 0; i < d; i++) outer *= x->shape[i];
  for (int i = d + 1; i < x->ndim; i++) inner *= x->shape[i];
  double *r = malloc(sizeof(double) * (size_t)(x->numel ? x->numel : 1));
  ck_assert(r);
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < inner; j++) {
      double m = -INFINITY, s = 0;
      for (int64_t i = 0; i < n; i++) m = fmax(m, v[(o * n + i) * inner + j]);
      for (int64_t i = 0; i < n; i++) s += exp(v[(o * n + i) * inner + j] - m);
      for (int64_t i = 0; i < n; i++) {
        double e = v[(o * n + i) * inner + j] - m;
        r[(o * n + i) * inner + j] = logsm ? e - log(s) : exp(e) / s;
      }
    }
  *out = LT_NN(lt_tensor_from_copy(LT_DTYPE_F64, x->ndim, x->shape, r));
  free(v);
  free(r);
}

START_TEST(test_softmax_random) {
  rng_state = 31;
  struct {
    int ndim;
    int64_t shape[4];
    int dim, how;
  } cases[] = {
      {2, {7, 33}, -1, 0},   {2, {7, 33}, 0, 0},     {3, {4, 5, 6}, 1, 0},  {3, {4, 5, 6}, 2, 1},
      {3, {4, 5, 6}, 0, 2},  {3, {4, 5, 6}, -1, 3},  {2, {300, 700}, 1, 0}, {2, {300, 700}, 0, 0},
      {3, {3, 200, 300}, 1, 0}, {1, {1000}, 0, 0},   {2, {5, 1}, 1, 0},     {2, {5, 1}, 0, 1},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    for (int dti = 0; dti < 2; dti++) {
      lt_dtype dt = dti ? LT_DTYPE_F64 : LT_DTYPE_F32;
      double tol = dti ? 1e-12 : 2e-6;
      lt_tensor *x = rand_layout(dt, cases[c].ndim, cases[c].shape, cases[c].how);
      for (int lg = 0; lg < 2; lg++) {
        lt_tensor *y = LT_NN(lg ? lt_log_softmax(x, cases[c].dim) : lt_softmax(x, cases[c].dim));
        ck_assert_int_eq(y->dtype, dt);
        ck_assert(lt_is_contiguous(y));
        lt_tensor *r;
        ref_softmax(x, cases[c].dim, lg, &r);
        LT_ASSERT_CLOSE(y, r, tol, tol);
        if (!lg) { /* rows sum to 1 */
          lt_tensor *s = LT_NN(lt_sum(y, LT_DIMS(cases[c].dim), false));
          lt_tensor *one = LT_NN(lt_ones_like(s));
          LT_ASSERT_CLOSE(s, one, 0, dti ? 1e-12 : 1e-5);
          lt_tensor_free(s);
          lt_tensor_free(one);
        }
        lt_tensor_free(r);
        lt_tensor_free(y);
      }
      lt_tensor_free(x);
    }
  }
}
END_TEST

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
  LT_EXPECT_NULL_ERR(lt_sum(x, LT_DIMS(2), false), LT_ERR_INDEX, "sum: dim 2 is out of range for a tensor of rank 2");
  LT_EXPECT_NULL_ERR(lt_mean(x, LT_DIMS(-3), false), LT_ERR_INDEX, "mean: dim -3");
  LT_EXPECT_NULL_ERR(lt_amax(x, LT_DIMS(0, 5), false), LT_ERR_INDEX, "amax");
  LT_EXPECT_NULL_ERR(lt_var(x, LT_DIMS(9), true, false), LT_ERR_INDEX, "rank 2");
  LT_EXPECT_NULL_ERR(lt_logsumexp(x, LT_DIMS(2), false), LT_ERR_INDEX, "logsumexp");
  LT_EXPECT_NULL_ERR(lt_argmax(x, 2, false), LT_ERR_INDEX, "argmax: dim 2");
  LT_EXPECT_NULL_ERR(lt_softmax(x, -3), LT_ERR_INDEX, "softmax: dim -3");
  LT_EXPECT_NULL_ERR(lt_log_softmax(x, 2), LT_ERR_INDEX, "log_softmax");
  LT_EXPECT_NULL_ERR(lt_sum(x, LT_DIMS(1, -1), false), LT_ERR_INVALID, "sum: x is [2,3] f32: dim 1");
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
  LT_EXPECT_NULL_ERR(lt_amax(e, LT_DIMS(1), false), LT_ERR_SHAPE, "amax: x is [3,0] f32: cannot reduce over dim 1");
  LT_EXPECT_NULL_ERR(lt_amin(e, 0, NULL, false), LT_ERR_SHAPE, "amin");
  LT_EXPECT_NULL_ERR(lt_max_dim(e, -1, false, &idx), LT_ERR_SHAPE, "max_dim: x is [3,0] f32: cannot reduce over dim 1");
  ck_assert_ptr_null(idx);
  LT_EXPECT_NULL_ERR(lt_min_dim(e, 1, true, NULL), LT_ERR_SHAPE, "min_dim");
  LT_EXPECT_NULL_ERR(lt_argmax(e, 1, false), LT_ERR_SHAPE, "argmax");
  LT_EXPECT_NULL_ERR(lt_argmin(e, 1, false), LT_ERR_SHAPE, "argmin");
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
  TCase *tc = LT_TEST_CASE(s, "core", 300, test_hand_values, test_sum_f32_accumulates_in_double,
                           test_big_shapes_vs_reference, test_thread_count_bit_identical,
                           test_zero_d, test_zero_size, test_integer_dtypes, test_nan_and_ties,
                           test_softmax_random, test_softmax_stability_and_masks, test_errors,
                           test_amax_tie_splitting, test_backward_values, test_bench);
  tcase_add_loop_test(tc, test_random_vs_reference, 0, 3);
  return lt_test_run(s);
}
