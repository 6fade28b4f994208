/*
 * tests/test_elementwise.c: the elementwise ops of tensor/elementwise.c.
 *
 * Hand-computed values for every op, special values (NaN, inf, -0);
 * broadcasting edge cases (0-d, size-1, zero-size dims); integer and bool
 * dtypes, wrapping and promotion; the scalar and in-place forms (version
 * counter, aliasing, shape and dtype errors); where and masked_fill by hand;
 * the error paths no table entry covers; the fused activation backward on
 * big inputs; and the autograd bookkeeping (what is saved, what is not
 * recorded, max/min tie halving, pow at a zero base).
 *
 * Random inputs against the double reference over dtypes and layouts
 * (contiguous, transposed, sliced, expanded), 1-vs-2-thread bits, the
 * table's error cases and the f64 gradchecks are the runner's: the entries
 * are in tests/opinfo_elementwise.inc (tests/test_ops.c runs them).
 *
 * Every test body runs inside a scope (BEGIN/END), so tensors need no free.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/internal.h"
#include "tensor/storage_internal.h"
#include "test_util.h"

#define F32 LT_DTYPE_F32
#define F64 LT_DTYPE_F64
#define I32 LT_DTYPE_I32
#define I64 LT_DTYPE_I64
#define BOOL LT_DTYPE_BOOL

#define BEGIN lt_scope *scope_ = lt_scope_begin(); ck_assert(scope_ != NULL)
#define END lt_scope_end(scope_)

/* A tensor of dtype dt with the given values (row-major), via f64. */
static lt_tensor *mk(lt_dtype dt, int nd, const int64_t *shape, const double *v) {
  lt_tensor *t = LT_NN(lt_tensor_from_copy(F64, nd, shape, v));
  if (dt == F64) return t;
  return LT_NN(lt_to_dtype(t, dt));
}
/* T(F32, LT_SHAPE(2, 2), 1, 2, 3, 4) */
#define T(dt, SH, ...) mk((dt), SH, (const double[]){__VA_ARGS__})

/* Deterministic uniform doubles in [lo, hi). */
static uint64_t rng_state = 0x853c49e6748fea9bULL;
static double urand(double lo, double hi) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return lo + (hi - lo) * (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
}
/* Uniform values in [lo, hi). */
static lt_tensor *rand_tensor(lt_dtype dt, int nd, const int64_t *shape, double lo, double hi) {
  int64_t n = 1;
  for (int i = 0; i < nd; i++) n *= shape[i];
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  for (int64_t i = 0; i < n; i++) v[i] = urand(lo, hi);
  lt_tensor *t = mk(dt, nd, shape, v);
  free(v);
  return t;
}
/* All values of t as doubles (malloc'd). */
static double *vals(const lt_tensor *t) {
  double *v = malloc(sizeof(double) * (size_t)(t->numel ? t->numel : 1));
  LT_OK_OR_FAIL(lt_tensor_read(t, F64, v, t->numel));
  return v;
}

/* ======================================================================== */
/* Names                                                                    */
/* ======================================================================== */

START_TEST(test_names) {
  ck_assert_str_eq(lt_unary_name(LT_UNARY_GELU_TANH), "gelu_tanh");
  ck_assert_str_eq(lt_unary_name(LT_UNARY_NEG), "neg");
  ck_assert_str_eq(lt_unary_name((lt_unary_op)999), "unknown");
  ck_assert_str_eq(lt_binary_name(LT_BINARY_MAXIMUM), "maximum");
  ck_assert_str_eq(lt_binary_name(LT_BINARY_GE), "ge");
  ck_assert_str_eq(lt_binary_name((lt_binary_op)-1), "unknown");
}
END_TEST

/* ======================================================================== */
/* Unary                                                                    */
/* ======================================================================== */

START_TEST(test_unary_values) {
  BEGIN;
  const lt_dtype dts[] = {F32, F64};
  for (int k = 0; k < 2; k++) {
    lt_dtype dt = dts[k];
    double tol = dt == F32 ? 2e-6 : 1e-9;
    lt_tensor *x = T(dt, LT_SHAPE(5), -2, -0.5, 0, 0.5, 2);
    lt_tensor *p = T(dt, LT_SHAPE(3), 0.25, 1, 4);
    LT_ASSERT_VALUES(lt_neg(x), 0, 2, 0.5, 0, -0.5, -2);
    LT_ASSERT_VALUES(lt_abs(x), 0, 2, 0.5, 0, 0.5, 2);
    LT_ASSERT_VALUES(lt_square(x), 0, 4, 0.25, 0, 0.25, 4);
    LT_ASSERT_VALUES(lt_relu(x), 0, 0, 0, 0, 0.5, 2);
    LT_ASSERT_VALUES(lt_exp(x), tol * 8, 0.1353352832, 0.6065306597, 1, 1.648721271, 7.389056099);
    LT_ASSERT_VALUES(lt_tanh(x), tol, -0.9640275801, -0.4621171573, 0, 0.4621171573, 0.9640275801);
    LT_ASSERT_VALUES(lt_sigmoid(x), tol, 0.119202922, 0.3775406688, 0.5, 0.6224593312, 0.880797078);
    LT_ASSERT_VALUES(lt_gelu(x), tol, -0.0455002639, -0.1542687694, 0, 0.3457312306, 1.954499736);
    LT_ASSERT_VALUES(lt_gelu_tanh(x), tol, -0.04540230591, -0.1542859902, 0, 0.3457140098,
                     1.954597694);
    LT_ASSERT_VALUES(lt_silu(x), tol, -0.238405844, -0.1887703344, 0, 0.3112296656, 1.761594156);
    LT_ASSERT_VALUES(lt_sin(x), tol, -0.9092974268, -0.4794255386, 0, 0.4794255386, 0.9092974268);
    LT_ASSERT_VALUES(lt_cos(x), tol, -0.4161468365, 0.8775825619, 1, 0.8775825619, -0.4161468365);
    LT_ASSERT_VALUES(lt_log(p), tol, -1.386294361, 0, 1.386294361);
    LT_ASSERT_VALUES(lt_log1p(p), tol, 0.2231435513, 0.6931471806, 1.609437912);
    LT_ASSERT_VALUES(lt_sqrt(p), 0, 0.5, 1, 2);
    LT_ASSERT_VALUES(lt_rsqrt(p), 0, 2, 1, 0.5);
    /* every op through lt_unary keeps a float dtype and the shape */
    for (int op = 0; op < LT_UNARY_COUNT; op++) {
      lt_tensor *y = LT_NN(lt_unary((lt_unary_op)op, x));
      ck_assert_int_eq(y->dtype, dt);
      LT_ASSERT_SHAPE(y, 5);
    }
  }
  /* special values */
  lt_tensor *s = T(F32, LT_SHAPE(4), -INFINITY, INFINITY, NAN, -0.0);
  LT_ASSERT_VALUES(lt_relu(s), 0, 0, INFINITY, NAN, 0);
  LT_ASSERT_VALUES(lt_exp(s), 0, 0, INFINITY, NAN, 1);
  LT_ASSERT_VALUES(lt_sigmoid(s), 0, 0, 1, NAN, 0.5);
  LT_ASSERT_VALUES(lt_tanh(s), 0, -1, 1, NAN, 0);
  LT_ASSERT_VALUES(lt_log(T(F64, LT_SHAPE(2), 0, -1)), 0, -INFINITY, NAN);
  END;
}
END_TEST

START_TEST(test_sigmoid_stable) {
  BEGIN;
  for (int k = 0; k < 2; k++) {
    lt_dtype dt = k ? F64 : F32;
    lt_tensor *x = T(dt, LT_SHAPE(6), -1000, -100, -30, 30, 100, 1000);
    lt_tensor *y = LT_NN(lt_sigmoid(x));
    double *v = vals(y);
    for (int i = 0; i < 6; i++) ck_assert_msg(isfinite(v[i]) && v[i] >= 0 && v[i] <= 1, "sigmoid %g", v[i]);
    ck_assert(v[0] == 0 && v[5] == 1);
    ck_assert(fabs(v[2] - 9.357622968840175e-14) < 1e-19); /* exp(-30)/(1+exp(-30)), relative */
    free(v);
    lt_tensor *si = LT_NN(lt_silu(x));
    v = vals(si);
    ck_assert(v[0] == 0 && v[5] == 1000 && isfinite(v[1]));
    free(v);
  }
  END;
}
END_TEST

/* Derivatives in double for the ops whose backward is one fused kernel. */
static double ref_dunary(lt_unary_op op, double x) {
  const double pi = 3.14159265358979323846, k = sqrt(2 / pi), c = 0.044715;
  switch (op) {
    case LT_UNARY_TANH: return 1 - tanh(x) * tanh(x);
    case LT_UNARY_SIGMOID: return exp(-x) / ((1 + exp(-x)) * (1 + exp(-x)));
    case LT_UNARY_RELU: return x > 0 ? 1 : 0;
    case LT_UNARY_GELU: return 0.5 * (1 + erf(x / sqrt(2))) + x * exp(-0.5 * x * x) / sqrt(2 * pi);
    case LT_UNARY_GELU_TANH: {
      const double t = tanh(k * (x + c * x * x * x));
      return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * c * x * x);
    }
    case LT_UNARY_SILU: return 1 / (1 + exp(-x)) * (1 + x * (1 - 1 / (1 + exp(-x))));
    default: ck_abort_msg("no derivative for op %d", op);
  }
  return 0;
}

/* Backward of the activations (fused g * f'(x) kernels) against the double
 * reference, f32 and f64, with a non-contiguous incoming gradient (a
 * transposed view) and enough elements for the threaded path. */
START_TEST(test_unary_backward_reference) {
  const lt_unary_op ops[] = {LT_UNARY_TANH, LT_UNARY_SIGMOID, LT_UNARY_RELU,
                             LT_UNARY_GELU, LT_UNARY_GELU_TANH, LT_UNARY_SILU};
  for (size_t o = 0; o < sizeof ops / sizeof *ops; o++) {
    for (int k = 0; k < 2; k++) {
      BEGIN;
      const lt_dtype dt = k ? F64 : F32;
      lt_tensor *x = rand_tensor(dt, LT_SHAPE(70, 700), -8, 8);
      LT_OK_OR_FAIL(lt_requires_grad_(x, true));
      lt_tensor *y = LT_NN(lt_unary(ops[o], x));
      lt_tensor *gt = rand_tensor(dt, LT_SHAPE(700, 70), -2, 2);
      lt_tensor *g = LT_NN(lt_transpose(gt, 0, 1)); /* [70, 700], strided */
      LT_OK_OR_FAIL(lt_backward(y, g, false));
      ck_assert(x->grad != NULL);
      double *xv = vals(x), *gv = vals(g);
      double *rv = malloc(sizeof(double) * (size_t)x->numel);
      for (int64_t i = 0; i < x->numel; i++) rv[i] = gv[i] * ref_dunary(ops[o], xv[i]);
      lt_tensor *ref = LT_NN(lt_tensor_from_copy(F64, x->ndim, x->shape, rv));
      if (dt == F32)
        LT_ASSERT_CLOSE(x->grad, ref, 1e-5, 1e-6);
      else
        LT_ASSERT_CLOSE(x->grad, ref, 1e-12, 1e-14);
      free(xv);
      free(gv);
      free(rv);
      END;
    }
  }
  /* relu: gradient 0 at 0 and below, g above; f32 gelu_tanh far out: 0 and g. */
  {
    BEGIN;
    lt_tensor *x = T(F32, LT_SHAPE(5), -1, 0, 2, -30, 30);
    LT_OK_OR_FAIL(lt_requires_grad_(x, true));
    LT_OK_OR_FAIL(lt_backward(LT_NN(lt_relu(x)), T(F32, LT_SHAPE(5), 3, 3, 3, 3, 3), false));
    LT_ASSERT_VALUES(x->grad, 0, 0, 0, 3, 0, 3);
    lt_tensor *x2 = T(F32, LT_SHAPE(3), -30, 30, 0);
    LT_OK_OR_FAIL(lt_requires_grad_(x2, true));
    LT_OK_OR_FAIL(lt_backward(LT_NN(lt_gelu_tanh(x2)), T(F32, LT_SHAPE(3), 2, 2, 2), false));
    LT_ASSERT_VALUES(x2->grad, 0, 0, 2, 1);
    END;
  }
}
END_TEST

START_TEST(test_unary_int_dtypes) {
  BEGIN;
  lt_tensor *i = T(I32, LT_SHAPE(4), -3, 0, 2, 7);
  lt_tensor *n = LT_NN(lt_neg(i));
  ck_assert_int_eq(n->dtype, I32);
  LT_ASSERT_VALUES(n, 0, 3, 0, -2, -7);
  LT_ASSERT_VALUES(lt_abs(i), 0, 3, 0, 2, 7);
  LT_ASSERT_VALUES(lt_square(i), 0, 9, 0, 4, 49);
  LT_ASSERT_VALUES(lt_relu(i), 0, 0, 0, 2, 7);
  ck_assert_int_eq(lt_relu(i)->dtype, I32);
  lt_tensor *l = T(I64, LT_SHAPE(2), -5, 4);
  ck_assert_int_eq(lt_abs(l)->dtype, I64);
  LT_ASSERT_VALUES(lt_abs(l), 0, 5, 4);
  /* float-only functions give f32 for integers and bool */
  lt_tensor *e = LT_NN(lt_exp(i));
  ck_assert_int_eq(e->dtype, F32);
  LT_ASSERT_VALUES(e, 1e-4, 0.04978706837, 1, 7.389056099, 1096.633158);
  lt_tensor *sq = LT_NN(lt_sqrt(l));
  ck_assert_int_eq(sq->dtype, F32);
  LT_ASSERT_VALUES(sq, 0, NAN, 2);
  lt_tensor *b = T(BOOL, LT_SHAPE(3), 1, 0, 1);
  ck_assert_int_eq(lt_sigmoid(b)->dtype, F32);
  LT_ASSERT_VALUES(lt_sigmoid(b), 1e-7, 0.7310585786, 0.5, 0.7310585786);
  ck_assert_int_eq(lt_square(b)->dtype, BOOL);
  LT_ASSERT_VALUES(lt_relu(b), 0, 1, 0, 1);
  /* wrapping, not undefined behaviour */
  lt_tensor *m = T(I32, LT_SHAPE(2), -2147483648.0, 65536);
  LT_ASSERT_VALUES(lt_neg(m), 0, -2147483648.0, -65536);
  LT_ASSERT_VALUES(lt_abs(m), 0, -2147483648.0, 65536);
  LT_ASSERT_VALUES(lt_square(m), 0, 0, 0);
  /* f64 input stays f64 */
  ck_assert_int_eq(lt_gelu(T(F64, LT_SHAPE(1), 1))->dtype, F64);
  END;
}
END_TEST

/* ======================================================================== */
/* Binary                                                                   */
/* ======================================================================== */

START_TEST(test_binary_values) {
  BEGIN;
  for (int k = 0; k < 2; k++) {
    lt_dtype dt = k ? F64 : F32;
    lt_tensor *a = T(dt, LT_SHAPE(4), 1, -2, 3, 0.5);
    lt_tensor *b = T(dt, LT_SHAPE(4), 4, 5, -6, 2);
    LT_ASSERT_VALUES(lt_add(a, b), 0, 5, 3, -3, 2.5);
    LT_ASSERT_VALUES(lt_sub(a, b), 0, -3, -7, 9, -1.5);
    LT_ASSERT_VALUES(lt_mul(a, b), 0, 4, -10, -18, 1);
    LT_ASSERT_VALUES(lt_div(a, b), 1e-7, 0.25, -0.4, -0.5, 0.25);
    LT_ASSERT_VALUES(lt_maximum(a, b), 0, 4, 5, 3, 2);
    LT_ASSERT_VALUES(lt_minimum(a, b), 0, 1, -2, -6, 0.5);
    lt_tensor *pa = T(dt, LT_SHAPE(4), 2, 9, 0.5, -2);
    lt_tensor *pb = T(dt, LT_SHAPE(4), 3, 0.5, -1, 2);
    LT_ASSERT_VALUES(lt_pow(pa, pb), 1e-6, 8, 3, 2, 4);
    LT_ASSERT_VALUES(lt_eq(a, T(dt, LT_SHAPE(4), 1, 2, 3, 4)), 0, 1, 0, 1, 0);
    LT_ASSERT_VALUES(lt_ne(a, T(dt, LT_SHAPE(4), 1, 2, 3, 4)), 0, 0, 1, 0, 1);
    LT_ASSERT_VALUES(lt_lt(a, b), 0, 1, 1, 0, 1);
    LT_ASSERT_VALUES(lt_le(a, T(dt, LT_SHAPE(4), 1, -3, 4, 0)), 0, 1, 0, 1, 0);
    LT_ASSERT_VALUES(lt_gt(a, b), 0, 0, 0, 1, 0);
    LT_ASSERT_VALUES(lt_ge(a, T(dt, LT_SHAPE(4), 1, -3, 4, 0)), 0, 1, 1, 0, 1);
    ck_assert_int_eq(lt_lt(a, b)->dtype, BOOL);
    ck_assert_int_eq(lt_add(a, b)->dtype, dt);
    /* through lt_binary with every op */
    for (int op = 0; op < LT_BINARY_COUNT; op++) LT_NN(lt_binary((lt_binary_op)op, a, b));
  }
  /* NaN: maximum/minimum propagate it from either side; comparisons are false
   * (ne true); division by zero gives inf. */
  lt_tensor *a = T(F32, LT_SHAPE(4), NAN, 1, NAN, 1);
  lt_tensor *b = T(F32, LT_SHAPE(4), 1, NAN, NAN, 0);
  LT_ASSERT_VALUES(lt_maximum(a, b), 0, NAN, NAN, NAN, 1);
  LT_ASSERT_VALUES(lt_minimum(a, b), 0, NAN, NAN, NAN, 0);
  LT_ASSERT_VALUES(lt_eq(a, a), 0, 0, 1, 0, 1);
  LT_ASSERT_VALUES(lt_ne(a, b), 0, 1, 1, 1, 1);
  LT_ASSERT_VALUES(lt_div(T(F64, LT_SHAPE(3), 1, -1, 0), T(F64, LT_SHAPE(3), 0, 0, 0)), 0, INFINITY,
                   -INFINITY, NAN);
  END;
}
END_TEST

START_TEST(test_broadcasting) {
  BEGIN;
  lt_tensor *c = T(F32, LT_SHAPE(3, 1), 0, 10, 20);
  lt_tensor *r = T(F32, LT_SHAPE(1, 4), 1, 2, 3, 4);
  lt_tensor *s = LT_NN(lt_add(c, r));
  LT_ASSERT_SHAPE(s, 3, 4);
  LT_ASSERT_VALUES(s, 0, 1, 2, 3, 4, 11, 12, 13, 14, 21, 22, 23, 24);
  LT_ASSERT_VALUES(lt_sub(r, c), 0, 1, 2, 3, 4, -9, -8, -7, -6, -19, -18, -17, -16);
  /* [5] + [2,3,5] */
  lt_tensor *v = T(F64, LT_SHAPE(5), 1, 2, 3, 4, 5);
  lt_tensor *big = LT_NN(lt_zeros(F64, LT_SHAPE(2, 3, 5)));
  lt_tensor *vb = LT_NN(lt_add(v, big));
  LT_ASSERT_SHAPE(vb, 2, 3, 5);
  double *x = vals(vb);
  for (int i = 0; i < 30; i++) ck_assert(x[i] == i % 5 + 1);
  free(x);
  /* 0-d with N-d, both sides; 0-d with 0-d */
  lt_tensor *z = LT_NN(lt_scalar(F32, 2));
  LT_ASSERT_SHAPE(lt_mul(z, r), 1, 4);
  LT_ASSERT_VALUES(lt_mul(z, r), 0, 2, 4, 6, 8);
  LT_ASSERT_VALUES(lt_div(r, z), 0, 0.5, 1, 1.5, 2);
  lt_tensor *zz = LT_NN(lt_add(z, z));
  ck_assert_int_eq(zz->ndim, 0);
  LT_ASSERT_VALUES(zz, 0, 4);
  /* zero-size dims */
  lt_tensor *e = LT_NN(lt_zeros(F32, LT_SHAPE(0, 4)));
  lt_tensor *e1 = LT_NN(lt_add(e, r));
  LT_ASSERT_SHAPE(e1, 0, 4);
  LT_ASSERT_SHAPE(lt_add(LT_NN(lt_zeros(F32, LT_SHAPE(2, 0))), LT_NN(lt_ones(F32, LT_SHAPE(2, 1)))), 2, 0);
  LT_ASSERT_SHAPE(lt_exp(e), 0, 4);
  LT_ASSERT_SHAPE(lt_lt(e, z), 0, 4);
  LT_ASSERT_SHAPE(lt_add(LT_NN(lt_zeros(F32, LT_SHAPE(0))), LT_NN(lt_ones(F32, LT_SHAPE(1)))), 0);
  LT_EXPECT_NULL_ERR(lt_add(LT_NN(lt_zeros(F32, LT_SHAPE(0))), LT_NN(lt_ones(F32, LT_SHAPE(2)))),
                     LT_ERR_SHAPE, "sizes 0 and 2");
  END;
}
END_TEST

START_TEST(test_promotion) {
  BEGIN;
  lt_tensor *f = T(F32, LT_SHAPE(2), 1.5, 2);
  lt_tensor *d = T(F64, LT_SHAPE(2), 1, 2);
  lt_tensor *i = T(I32, LT_SHAPE(2), 7, -7);
  lt_tensor *l = T(I64, LT_SHAPE(2), 2, 3);
  lt_tensor *b = T(BOOL, LT_SHAPE(2), 1, 0);
  ck_assert_int_eq(lt_add(f, d)->dtype, F64);
  ck_assert_int_eq(lt_add(i, f)->dtype, F32);
  ck_assert_int_eq(lt_add(l, f)->dtype, F32);
  ck_assert_int_eq(lt_add(i, l)->dtype, I64);
  ck_assert_int_eq(lt_mul(b, i)->dtype, I32);
  ck_assert_int_eq(lt_add(b, b)->dtype, BOOL);
  ck_assert_int_eq(lt_add(b, d)->dtype, F64);
  LT_ASSERT_VALUES(lt_add(i, f), 0, 8.5, -5);
  LT_ASSERT_VALUES(lt_add(i, l), 0, 9, -4);
  LT_ASSERT_VALUES(lt_mul(b, i), 0, 7, 0);
  /* integer division is true division, in f32 (f64 stays f64) */
  lt_tensor *q = LT_NN(lt_div(i, T(I32, LT_SHAPE(2), 2, 2)));
  ck_assert_int_eq(q->dtype, F32);
  LT_ASSERT_VALUES(q, 0, 3.5, -3.5);
  ck_assert_int_eq(lt_div(b, b)->dtype, F32);
  ck_assert_int_eq(lt_div(l, d)->dtype, F64);
  /* bool arithmetic: add/maximum are or, mul/minimum and (sub/pow errors: tests/opinfo_elementwise.inc) */
  lt_tensor *b1 = T(BOOL, LT_SHAPE(4), 0, 0, 1, 1), *b2 = T(BOOL, LT_SHAPE(4), 0, 1, 0, 1);
  LT_ASSERT_VALUES(lt_add(b1, b2), 0, 0, 1, 1, 1);
  LT_ASSERT_VALUES(lt_mul(b1, b2), 0, 0, 0, 0, 1);
  LT_ASSERT_VALUES(lt_maximum(b1, b2), 0, 0, 1, 1, 1);
  LT_ASSERT_VALUES(lt_minimum(b1, b2), 0, 0, 0, 0, 1);
  LT_ASSERT_VALUES(lt_lt(b1, b2), 0, 0, 1, 0, 0);
  /* comparisons across dtypes compare values */
  LT_ASSERT_VALUES(lt_eq(i, T(F32, LT_SHAPE(2), 7, -7.5)), 0, 1, 0);
  LT_ASSERT_VALUES(lt_gt(l, b), 0, 1, 1);
  END;
}
END_TEST

START_TEST(test_int_arith) {
  BEGIN;
  lt_tensor *a = T(I32, LT_SHAPE(5), 2147483647.0, -2147483648.0, 5, -3, 65536);
  lt_tensor *one = T(I32, LT_SHAPE(5), 1, 1, 2, 2, 65536);
  LT_ASSERT_VALUES(lt_add(a, one), 0, -2147483648.0, -2147483647.0, 7, -1, 131072);
  LT_ASSERT_VALUES(lt_sub(a, one), 0, 2147483646.0, 2147483647.0, 3, -5, 0);
  LT_ASSERT_VALUES(lt_mul(a, one), 0, 2147483647.0, -2147483648.0, 10, -6, 0);
  LT_ASSERT_VALUES(lt_maximum(a, one), 0, 2147483647.0, 1, 5, 2, 65536);
  LT_ASSERT_VALUES(lt_minimum(a, one), 0, 1, -2147483648.0, 2, -3, 65536);
  /* integer pow, including negative exponents (1/a^n truncated) */
  lt_tensor *pb = T(I64, LT_SHAPE(6), 2, 3, 10, -1, -2, -3);
  lt_tensor *pa = T(I64, LT_SHAPE(6), 3, -2, 2, 1, -1, -1);
  lt_tensor *p = LT_NN(lt_pow(pa, pb));
  ck_assert_int_eq(p->dtype, I64);
  LT_ASSERT_VALUES(p, 0, 9, -8, 1024, 1, 1, -1);
  LT_ASSERT_VALUES(lt_pow(T(I32, LT_SHAPE(2), 5, 0), T(I32, LT_SHAPE(2), -1, 0)), 0, 0, 1);
  /* i64 beyond 2^53 stays exact */
  lt_tensor *big = T(I64, LT_SHAPE(1), 9007199254740992.0);
  lt_tensor *r = LT_NN(lt_add(big, T(I64, LT_SHAPE(1), 1)));
  int64_t got;
  LT_OK_OR_FAIL(lt_tensor_read(r, I64, &got, 1));
  ck_assert(got == 9007199254740993LL);
  END;
}
END_TEST

/* ======================================================================== */
/* Scalar forms                                                             */
/* ======================================================================== */

START_TEST(test_scalar_ops) {
  BEGIN;
  lt_tensor *f = T(F32, LT_SHAPE(3), 1, -2, 4);
  LT_ASSERT_VALUES(lt_add_scalar(f, 0.5), 0, 1.5, -1.5, 4.5);
  LT_ASSERT_VALUES(lt_sub_scalar(f, 1), 0, 0, -3, 3);
  LT_ASSERT_VALUES(lt_mul_scalar(f, -2), 0, -2, 4, -8);
  LT_ASSERT_VALUES(lt_div_scalar(f, 4), 0, 0.25, -0.5, 1);
  LT_ASSERT_VALUES(lt_pow_scalar(f, 2), 0, 1, 4, 16);
  LT_ASSERT_VALUES(lt_pow_scalar(T(F64, LT_SHAPE(2), 4, 9), 0.5), 0, 2, 3);
  LT_ASSERT_VALUES(lt_maximum_scalar(f, 0), 0, 1, 0, 4);
  LT_ASSERT_VALUES(lt_minimum_scalar(f, 0), 0, 0, -2, 0);
  LT_ASSERT_VALUES(lt_gt_scalar(f, 0), 0, 1, 0, 1);
  LT_ASSERT_VALUES(lt_eq_scalar(f, 4), 0, 0, 0, 1);
  LT_ASSERT_VALUES(lt_binary_scalar(LT_BINARY_LE, f, 1), 0, 1, 1, 0);
  ck_assert_int_eq(lt_add_scalar(f, 1e300)->dtype, F32); /* float keeps its dtype */
  ck_assert_int_eq(lt_lt_scalar(f, 0)->dtype, BOOL);
  ck_assert_int_eq(lt_mul_scalar(T(F64, LT_SHAPE(1), 1), 2)->dtype, F64);
  /* integer tensors: integral s keeps the dtype, otherwise f32 */
  lt_tensor *i = T(I32, LT_SHAPE(3), 1, -2, 7);
  lt_tensor *r = LT_NN(lt_add_scalar(i, 3));
  ck_assert_int_eq(r->dtype, I32);
  LT_ASSERT_VALUES(r, 0, 4, 1, 10);
  r = LT_NN(lt_add_scalar(i, 0.5));
  ck_assert_int_eq(r->dtype, F32);
  LT_ASSERT_VALUES(r, 0, 1.5, -1.5, 7.5);
  r = LT_NN(lt_div_scalar(i, 2));
  ck_assert_int_eq(r->dtype, F32);
  LT_ASSERT_VALUES(r, 0, 0.5, -1, 3.5);
  r = LT_NN(lt_pow_scalar(i, 2));
  ck_assert_int_eq(r->dtype, F32);
  LT_ASSERT_VALUES(r, 0, 1, 4, 49);
  ck_assert_int_eq(lt_maximum_scalar(i, 0)->dtype, I32);
  ck_assert_int_eq(lt_mul_scalar(T(I64, LT_SHAPE(1), 3), -1)->dtype, I64);
  /* comparisons with integer tensors are exact against non-integral s */
  LT_ASSERT_VALUES(lt_gt_scalar(i, 0.5), 0, 1, 0, 1);
  LT_ASSERT_VALUES(lt_eq_scalar(i, 7.0000001), 0, 0, 0, 0);
  LT_ASSERT_VALUES(lt_lt_scalar(i, 3e10), 0, 1, 1, 1);
  /* bool: integral s goes to i64; comparisons stay exact */
  lt_tensor *b = T(BOOL, LT_SHAPE(2), 1, 0);
  r = LT_NN(lt_add_scalar(b, 2));
  ck_assert_int_eq(r->dtype, I64);
  LT_ASSERT_VALUES(r, 0, 3, 2);
  LT_ASSERT_VALUES(lt_eq_scalar(b, 2), 0, 0, 0);
  LT_ASSERT_VALUES(lt_eq_scalar(b, 1), 0, 1, 0);
  /* a scalar that does not fit the integer dtype */
  LT_EXPECT_NULL_ERR(lt_add_scalar(i, 1e10), LT_ERR_INVALID, "add_scalar: a is [3] i32: scalar 10000000000 does not fit in i32");
  /* 0-d and zero-size */
  LT_ASSERT_VALUES(lt_mul_scalar(LT_NN(lt_scalar(F32, 3)), 2), 0, 6);
  LT_ASSERT_SHAPE(lt_add_scalar(LT_NN(lt_zeros(F32, LT_SHAPE(3, 0))), 1), 3, 0);
  /* NaN scalars */
  LT_ASSERT_VALUES(lt_maximum_scalar(f, NAN), 0, NAN, NAN, NAN);
  LT_ASSERT_VALUES(lt_eq_scalar(f, NAN), 0, 0, 0, 0);
  END;
}
END_TEST

/* ======================================================================== */
/* In place                                                                 */
/* ======================================================================== */

START_TEST(test_inplace_binary) {
  BEGIN;
  lt_tensor *a = T(F32, LT_SHAPE(3, 4), 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11);
  lt_tensor *row = T(F32, LT_SHAPE(1, 4), 1, 2, 3, 4);
  void *data = a->data;
  uint64_t v0 = lt__version(a);
  LT_OK_OR_FAIL(lt_add_(a, row));
  ck_assert(a->data == data);
  ck_assert(lt__version(a) == v0 + 1);
  LT_ASSERT_VALUES(a, 0, 1, 3, 5, 7, 5, 7, 9, 11, 9, 11, 13, 15);
  LT_OK_OR_FAIL(lt_mul_(a, T(F32, LT_SHAPE(3, 1), 1, 0, -1)));
  LT_ASSERT_VALUES(a, 0, 1, 3, 5, 7, 0, 0, 0, 0, -9, -11, -13, -15);
  LT_OK_OR_FAIL(lt_maximum_(a, LT_NN(lt_scalar(F64, 0)))); /* f64 b into f32 a */
  ck_assert_int_eq(a->dtype, F32);
  LT_ASSERT_VALUES(a, 0, 1, 3, 5, 7, 0, 0, 0, 0, 0, 0, 0, 0);
  LT_OK_OR_FAIL(lt_div_(a, T(I32, LT_SHAPE(4), 1, 2, 4, 8))); /* int b into float a */
  LT_ASSERT_VALUES(a, 0, 1, 1.5, 1.25, 0.875, 0, 0, 0, 0, 0, 0, 0, 0);
  ck_assert(lt__version(a) == v0 + 4);
  /* in place into a non-contiguous view writes through to the base */
  lt_tensor *base = LT_NN(lt_zeros(F64, LT_SHAPE(2, 3)));
  lt_tensor *tv = LT_NN(lt_transpose(base, 0, 1)); /* [3,2] */
  LT_OK_OR_FAIL(lt_add_(tv, T(F64, LT_SHAPE(3, 1), 1, 2, 3)));
  LT_ASSERT_VALUES(base, 0, 1, 2, 3, 1, 2, 3);
  ck_assert(lt__version(base) == lt__version(tv));
  /* integer in place */
  lt_tensor *i = T(I32, LT_SHAPE(3), 1, 2, 3);
  LT_OK_OR_FAIL(lt_add_(i, T(I64, LT_SHAPE(3), 10, 20, 30)));
  LT_OK_OR_FAIL(lt_pow_(i, T(I32, LT_SHAPE(1), 2)));
  LT_ASSERT_VALUES(i, 0, 121, 484, 1089);
  /* comparisons in place write 0/1 in a's dtype */
  lt_tensor *c = T(F32, LT_SHAPE(3), 1, 5, 3);
  LT_OK_OR_FAIL(lt_gt_(c, T(F32, LT_SHAPE(3), 2, 2, 2)));
  ck_assert_int_eq(c->dtype, F32);
  LT_ASSERT_VALUES(c, 0, 0, 1, 1);
  /* bool a with bool b */
  lt_tensor *b = T(BOOL, LT_SHAPE(2), 0, 1);
  LT_OK_OR_FAIL(lt_add_(b, T(BOOL, LT_SHAPE(2), 1, 0)));
  LT_ASSERT_VALUES(b, 0, 1, 1);
  END;
}
END_TEST

START_TEST(test_inplace_alias) {
  BEGIN;
  /* b is a itself */
  lt_tensor *a = T(F64, LT_SHAPE(2, 2), 1, 2, 3, 4);
  LT_OK_OR_FAIL(lt_mul_(a, a));
  LT_ASSERT_VALUES(a, 0, 1, 4, 9, 16);
  /* b is a's transpose: a[i][j] += a[j][i] must read the old values */
  lt_tensor *m = T(F64, LT_SHAPE(3, 3), 1, 2, 3, 4, 5, 6, 7, 8, 9);
  lt_tensor *mt = LT_NN(lt_transpose(m, 0, 1));
  LT_OK_OR_FAIL(lt_add_(m, mt));
  LT_ASSERT_VALUES(m, 0, 2, 6, 10, 6, 10, 14, 10, 14, 18);
  /* b overlaps a shifted by one element */
  lt_tensor *v = T(F32, LT_SHAPE(5), 1, 2, 3, 4, 5);
  lt_tensor *lo = LT_NN(lt_slice(v, 0, 0, 4, 1)), *hi = LT_NN(lt_slice(v, 0, 1, 5, 1));
  LT_OK_OR_FAIL(lt_sub_(hi, lo));
  LT_ASSERT_VALUES(v, 0, 1, 1, 1, 1, 1);
  /* b a broadcast row of a */
  lt_tensor *w = T(F32, LT_SHAPE(2, 3), 1, 2, 3, 4, 5, 6);
  lt_tensor *r0 = LT_NN(lt_slice(w, 0, 0, 1, 1)); /* [1,3] view of row 0 */
  LT_OK_OR_FAIL(lt_sub_(w, r0));
  LT_ASSERT_VALUES(w, 0, 0, 0, 0, 3, 3, 3);
  END;
}
END_TEST

START_TEST(test_inplace_unary_scalar) {
  BEGIN;
  lt_tensor *x = T(F32, LT_SHAPE(2, 2), -1, 0, 1, 2);
  uint64_t v0 = lt__version(x);
  LT_OK_OR_FAIL(lt_relu_(x));
  LT_ASSERT_VALUES(x, 0, 0, 0, 1, 2);
  LT_OK_OR_FAIL(lt_unary_(LT_UNARY_EXP, x));
  LT_ASSERT_VALUES(x, 1e-6, 1, 1, 2.718281828, 7.389056099);
  LT_OK_OR_FAIL(lt_mul_scalar_(x, 2));
  LT_OK_OR_FAIL(lt_add_scalar_(x, -2));
  LT_ASSERT_VALUES(x, 1e-5, 0, 0, 3.436563657, 12.7781122);
  LT_OK_OR_FAIL(lt_clamp_(x, 1, 5));
  LT_ASSERT_VALUES(x, 1e-6, 1, 1, 3.436563657, 5);
  LT_OK_OR_FAIL(lt_lt_scalar_(x, 2)); /* 0/1 in f32 */
  LT_ASSERT_VALUES(x, 0, 1, 1, 0, 0);
  ck_assert(lt__version(x) == v0 + 6);
  /* a transposed view, in place */
  lt_tensor *base = T(F64, LT_SHAPE(2, 3), 1, 2, 3, 4, 5, 6);
  lt_tensor *t = LT_NN(lt_transpose(base, 0, 1));
  LT_OK_OR_FAIL(lt_neg_(t));
  LT_OK_OR_FAIL(lt_pow_scalar_(t, 2));
  LT_ASSERT_VALUES(base, 0, 1, 4, 9, 16, 25, 36);
  /* integer in place */
  lt_tensor *i = T(I32, LT_SHAPE(3), -3, 0, 4);
  LT_OK_OR_FAIL(lt_abs_(i));
  LT_OK_OR_FAIL(lt_sub_scalar_(i, 1));
  LT_OK_OR_FAIL(lt_clamp_(i, 0, INFINITY));
  LT_ASSERT_VALUES(i, 0, 2, 0, 3);
  LT_OK_OR_FAIL(lt_maximum_scalar_(i, 1));
  LT_ASSERT_VALUES(i, 0, 2, 1, 3);
  END;
}
END_TEST

START_TEST(test_inplace_errors) {
  BEGIN;
  /* broadcasting that would change a's shape */
  lt_tensor *a = T(F32, LT_SHAPE(3, 1), 1, 2, 3);
  lt_tensor *b = T(F32, LT_SHAPE(1, 4), 1, 2, 3, 4);
  uint64_t v0 = lt__version(a);
  LT_EXPECT_ERR(lt_add_(a, b), LT_ERR_SHAPE, "add_: a is [3,1] f32, b is [1,4] f32: the result would be [3,4]");
  LT_EXPECT_ERR(lt_add_(a, T(F32, LT_SHAPE(2, 1), 1, 2)), LT_ERR_SHAPE, "do not broadcast");
  ck_assert(lt__version(a) == v0);
  LT_ASSERT_VALUES(a, 0, 1, 2, 3);
  /* results that a's dtype cannot hold */
  lt_tensor *i = T(I32, LT_SHAPE(2), 1, 2);
  LT_EXPECT_ERR(lt_add_(i, T(F32, LT_SHAPE(2), 1, 2)), LT_ERR_DTYPE, "the result is f32");
  LT_EXPECT_ERR(lt_div_(i, T(I32, LT_SHAPE(2), 1, 2)), LT_ERR_DTYPE, "div_");
  LT_EXPECT_ERR(lt_exp_(i), LT_ERR_DTYPE, "exp_: x is [2] i32: the result is f32");
  LT_EXPECT_ERR(lt_add_scalar_(i, 0.5), LT_ERR_DTYPE, "add_scalar_");
  LT_EXPECT_ERR(lt_pow_scalar_(i, 2), LT_ERR_DTYPE, "pow_scalar_");
  LT_EXPECT_ERR(lt_clamp_(i, 0.5, 1), LT_ERR_DTYPE, "clamp_");
  LT_EXPECT_ERR(lt_add_(T(BOOL, LT_SHAPE(1), 1), T(I32, LT_SHAPE(1), 1)), LT_ERR_DTYPE, "add_");
  LT_EXPECT_ERR(lt_add_scalar_(T(BOOL, LT_SHAPE(1), 1), 1), LT_ERR_DTYPE, "add_scalar_");
  LT_EXPECT_ERR(lt_neg_(T(BOOL, LT_SHAPE(1), 1)), LT_ERR_DTYPE, "neg_");
  LT_ASSERT_VALUES(i, 0, 1, 2);
  /* an expanded (overlapping) target */
  lt_tensor *ex = LT_NN(lt_expand(T(F32, LT_SHAPE(1), 1), LT_SHAPE(3)));
  LT_EXPECT_ERR(lt_add_scalar_(ex, 1), LT_ERR_INVALID, "stride-0");
  LT_EXPECT_ERR(lt_relu_(ex), LT_ERR_INVALID, "stride-0");
  /* a leaf that requires grad */
  lt_tensor *w = T(F64, LT_SHAPE(2), 1, 2);
  LT_OK_OR_FAIL(lt_requires_grad_(w, true));
  LT_EXPECT_ERR(lt_mul_scalar_(w, 2), LT_ERR_AUTOGRAD, "requires grad");
  LT_EXPECT_ERR(lt_tanh_(w), LT_ERR_AUTOGRAD, "requires grad");
  LT_EXPECT_ERR(lt_clamp_(w, 0, 1), LT_ERR_AUTOGRAD, "requires grad");
  bool prev = lt_set_grad_enabled(false); /* e.g. an optimizer step */
  LT_OK_OR_FAIL(lt_mul_scalar_(w, 2));
  lt_set_grad_enabled(prev);
  LT_ASSERT_VALUES(w, 0, 2, 4);
  ck_assert(w->grad_fn == NULL);
  /* NULL */
  LT_EXPECT_ERR(lt_add_(NULL, b), LT_ERR_NULL, "add_: argument a is NULL");
  LT_EXPECT_ERR(lt_add_(a, NULL), LT_ERR_NULL, "add_: argument b is NULL");
  LT_EXPECT_ERR(lt_exp_(NULL), LT_ERR_NULL, "exp_");
  LT_EXPECT_ERR(lt_clamp_(NULL, 0, 1), LT_ERR_NULL, "clamp_");
  LT_EXPECT_ERR(lt_binary_scalar_(LT_BINARY_ADD, NULL, 1), LT_ERR_NULL, "add_scalar_");
  END;
}
END_TEST

/* ======================================================================== */
/* clamp, where, masked_fill                                                */
/* ======================================================================== */

START_TEST(test_clamp) {
  BEGIN;
  lt_tensor *x = T(F32, LT_SHAPE(6), -3, -1, 0, 1, 3, NAN);
  LT_ASSERT_VALUES(lt_clamp(x, -1, 1), 0, -1, -1, 0, 1, 1, NAN);
  LT_ASSERT_VALUES(lt_clamp(x, -INFINITY, 0.5), 0, -3, -1, 0, 0.5, 0.5, NAN);
  LT_ASSERT_VALUES(lt_clamp(x, 0, INFINITY), 0, 0, 0, 0, 1, 3, NAN);
  LT_ASSERT_VALUES(lt_clamp(x, -INFINITY, INFINITY), 0, -3, -1, 0, 1, 3, NAN);
  LT_ASSERT_VALUES(lt_clamp(x, 2, -2), 0, -2, -2, -2, -2, -2, NAN); /* lo > hi: hi */
  ck_assert_int_eq(lt_clamp(x, 0, 1)->dtype, F32);
  lt_tensor *d = T(F64, LT_SHAPE(2), 1e300, -1e300);
  LT_ASSERT_VALUES(lt_clamp(d, -1e299, 1e299), 0, 1e299, -1e299);
  /* integers keep their dtype for integral bounds, f32 otherwise */
  lt_tensor *i = LT_NN(lt_tensor_from_copy(I64, LT_SHAPE(4), (int64_t[]){-5, 0, 5, 9007199254740993LL}));
  lt_tensor *ci = LT_NN(lt_clamp(i, -2, INFINITY));
  ck_assert_int_eq(ci->dtype, I64);
  int64_t got[4];
  LT_OK_OR_FAIL(lt_tensor_read(ci, I64, got, 4));
  ck_assert(got[0] == -2 && got[1] == 0 && got[2] == 5 && got[3] == 9007199254740993LL);
  lt_tensor *cf = LT_NN(lt_clamp(T(I32, LT_SHAPE(3), -5, 0, 5), -0.5, 2.5));
  ck_assert_int_eq(cf->dtype, F32);
  LT_ASSERT_VALUES(cf, 0, -0.5, 0, 2.5);
  LT_ASSERT_VALUES(lt_clamp(T(I32, LT_SHAPE(2), -5, 5), -1e20, 3), 0, -5, 3);
  /* errors */
  END;
}
END_TEST

START_TEST(test_where_masked_fill) {
  BEGIN;
  lt_tensor *cond = T(BOOL, LT_SHAPE(3, 1), 1, 0, 1);
  lt_tensor *a = T(F32, LT_SHAPE(1, 4), 1, 2, 3, 4);
  lt_tensor *b = LT_NN(lt_scalar(F32, -1));
  lt_tensor *w = LT_NN(lt_where(cond, a, b));
  LT_ASSERT_SHAPE(w, 3, 4);
  LT_ASSERT_VALUES(w, 0, 1, 2, 3, 4, -1, -1, -1, -1, 1, 2, 3, 4);
  /* promotion: i32 and f64 -> f64; bool values */
  lt_tensor *w2 = LT_NN(lt_where(T(BOOL, LT_SHAPE(2), 1, 0), T(I32, LT_SHAPE(2), 7, 7), T(F64, LT_SHAPE(2), 0.5, 0.5)));
  ck_assert_int_eq(w2->dtype, F64);
  LT_ASSERT_VALUES(w2, 0, 7, 0.5);
  lt_tensor *w3 = LT_NN(lt_where(T(BOOL, LT_SHAPE(2), 0, 1), T(BOOL, LT_SHAPE(2), 1, 1), T(BOOL, LT_SHAPE(2), 0, 0)));
  ck_assert_int_eq(w3->dtype, BOOL);
  LT_ASSERT_VALUES(w3, 0, 0, 1);
  /* cond broadcast over the last dim of a [2,3,4] */
  lt_tensor *big = rand_tensor(F64, LT_SHAPE(2, 3, 4), -1, 1);
  lt_tensor *m = T(BOOL, LT_SHAPE(4), 1, 0, 0, 1);
  lt_tensor *w4 = LT_NN(lt_where(m, big, LT_NN(lt_zeros(F64, LT_SHAPE(1)))));
  double *bv = vals(big), *wv = vals(w4);
  for (int k = 0; k < 24; k++) ck_assert(wv[k] == (k % 4 == 0 || k % 4 == 3 ? bv[k] : 0));
  free(wv);
  /* masked_fill: mask broadcast to x; value cast to x's dtype */
  lt_tensor *mf = LT_NN(lt_masked_fill(big, m, -INFINITY));
  wv = vals(mf);
  for (int k = 0; k < 24; k++) ck_assert(wv[k] == (k % 4 == 0 || k % 4 == 3 ? -INFINITY : bv[k]));
  free(wv);
  free(bv);
  lt_tensor *causal = LT_NN(lt_gt(LT_NN(lt_arange(I64, 0, 3, 1)), LT_NN(lt_view(LT_NN(lt_arange(I64, 0, 3, 1)), LT_SHAPE(3, 1)))));
  LT_ASSERT_VALUES(lt_masked_fill(LT_NN(lt_ones(F32, LT_SHAPE(3, 3))), causal, -1), 0, 1, -1, -1, 1, 1, -1, 1, 1, 1);
  lt_tensor *mi = LT_NN(lt_masked_fill(T(I32, LT_SHAPE(2), 1, 2), T(BOOL, LT_SHAPE(2), 0, 1), 9.75));
  ck_assert_int_eq(mi->dtype, I32);
  LT_ASSERT_VALUES(mi, 0, 1, 9);
  lt_tensor *xt = LT_NN(lt_transpose(T(F32, LT_SHAPE(2, 3), 1, 2, 3, 4, 5, 6), 0, 1)); /* [3,2] */
  LT_ASSERT_VALUES(lt_masked_fill(xt, T(BOOL, LT_SHAPE(3, 1), 0, 1, 0), 0), 0, 1, 4, 0, 0, 3, 6);
  /* zero-size */
  LT_ASSERT_SHAPE(lt_masked_fill(LT_NN(lt_zeros(F32, LT_SHAPE(0, 2))), m = T(BOOL, LT_SHAPE(2), 1, 0), 1), 0, 2);
  /* errors */
  LT_EXPECT_NULL_ERR(lt_where(cond, a, NULL), LT_ERR_NULL, "argument b");
  END;
}
END_TEST

/* ======================================================================== */
/* Errors                                                                   */
/* ======================================================================== */

/* The 16-lane kernels of GELU and GELU-tanh (AVX-512, tensor/elementwise.c)
 * give the bits of the portable ones: a contiguous x takes the 16-lane path,
 * a strided view of the same values the portable loop. Forward and backward (the
 * fused g * gelu'(x)) over every 4093rd float bit pattern (all exponents,
 * both signs, subnormals, infinities; NaN must stay NaN), a count that is
 * no multiple of 16 (the masked tail), on 1 and 2 threads. */
static void expect_same_bits_or_nan(const lt_tensor *got, const lt_tensor *want, const char *what) {
  const float *a = got->data, *b = want->data;
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < got->numel; i++) {
    uint32_t ua, ub;
    memcpy(&ua, &a[i], 4), memcpy(&ub, &b[i], 4);
    if (ua != ub && !(isnan(a[i]) && isnan(b[i]))) bad++, first = first < 0 ? i : first;
  }
  ck_assert_msg(bad == 0, "%s: %lld of %lld differ, first at %lld: %a against %a", what, (long long)bad,
                (long long)got->numel, (long long)first, first >= 0 ? a[first] : 0.0f, first >= 0 ? b[first] : 0.0f);
}

START_TEST(test_gelu_fast_bits) {
  lt_scope *sc = lt_scope_begin();
  const int64_t n = (int64_t)(0xFFFFFFFFu / 4093u) + 1; /* 1,049,345 */
  lt_tensor *x = LT_NN(lt_empty(LT_DTYPE_F32, 1, &n));
  lt_tensor *x2 = LT_NN(lt_zeros(LT_DTYPE_F32, 2, (const int64_t[]){n, 2}));
  lt_tensor *g = LT_NN(lt_empty(LT_DTYPE_F32, 1, &n));
  for (int64_t i = 0; i < n; i++) {
    const uint32_t u = (uint32_t)(i * 4093u), ug = (uint32_t)(0x3F800000u + (uint32_t)(i * 2654435761u) % 0x00800000u);
    float v, gv;
    memcpy(&v, &u, 4), memcpy(&gv, &ug, 4); /* g in [1, 2) */
    ((float *)x->data)[i] = v;
    ((float *)x2->data)[2 * i] = v;
    ((float *)g->data)[i] = (i & 1) ? -gv : gv;
  }
  LT_OK_OR_FAIL(lt_requires_grad_(x, true));
  LT_OK_OR_FAIL(lt_requires_grad_(x2, true));
  const int nt = lt_get_num_threads();
  const lt_unary_op ops[] = {LT_UNARY_GELU, LT_UNARY_GELU_TANH};
  for (int t = 1; t <= 2; t++)
    for (int o = 0; o < 2; o++) {
      char what[64];
      LT_OK_OR_FAIL(lt_set_num_threads(t));
      lt_zero_grad(x), lt_zero_grad(x2);
      lt_tensor *y = LT_NN(lt_unary(ops[o], x));              /* contiguous: the 16-lane kernel */
      lt_tensor *v = LT_NN(lt_select(x2, 1, 0));              /* stride 2: the portable loop */
      lt_tensor *yp = LT_NN(lt_unary(ops[o], v));
      snprintf(what, sizeof what, "%s forward, %d threads", lt_unary_name(ops[o]), t);
      expect_same_bits_or_nan(y, yp, what);
      LT_OK_OR_FAIL(lt_backward(y, g, false));
      LT_OK_OR_FAIL(lt_backward(yp, g, false));
      lt_tensor *gp = LT_NN(lt_contiguous(LT_NN(lt_select(x2->grad, 1, 0))));
      snprintf(what, sizeof what, "%s backward, %d threads", lt_unary_name(ops[o]), t);
      expect_same_bits_or_nan(x->grad, gp, what);
    }
  LT_OK_OR_FAIL(lt_set_num_threads(nt));
  lt_scope_end(sc);
}
END_TEST

START_TEST(test_errors) {
  BEGIN;
  lt_tensor *a = T(F32, LT_SHAPE(2, 3), 1, 2, 3, 4, 5, 6);
  lt_tensor *b = T(F32, LT_SHAPE(4), 1, 2, 3, 4);
  LT_EXPECT_NULL_ERR(lt_lt(T(F64, LT_SHAPE(3, 2), 1, 2, 3, 4, 5, 6), T(I32, LT_SHAPE(2, 1), 1, 2)), LT_ERR_SHAPE,
                     "lt: a is [3,2] f64, b is [2,1] i32: shapes do not broadcast (sizes 3 and 2 at dim -2");
  LT_EXPECT_NULL_ERR(lt_unary((lt_unary_op)LT_UNARY_COUNT, a), LT_ERR_INVALID, "not an lt_unary_op");
  LT_EXPECT_NULL_ERR(lt_binary((lt_binary_op)-1, a, a), LT_ERR_INVALID, "not an lt_binary_op");
  LT_EXPECT_NULL_ERR(lt_binary_scalar((lt_binary_op)99, a, 1), LT_ERR_INVALID, "not an lt_binary_op");
  LT_EXPECT_ERR(lt_unary_((lt_unary_op)-3, a), LT_ERR_INVALID, "not an lt_unary_op");
  LT_EXPECT_ERR(lt_binary_((lt_binary_op)LT_BINARY_COUNT, a, a), LT_ERR_INVALID, "not an lt_binary_op");
  /* a failure deep inside a composed expression keeps its first message */
  lt_clear_error();
  lt_tensor *r = lt_relu(lt_mul_scalar(lt_add(a, b), 2));
  ck_assert(r == NULL);
  ck_assert_int_eq(lt_last_status(), LT_ERR_SHAPE);
  ck_assert(strstr(lt_last_error(), "add: a is [2,3] f32") != NULL);
  lt_clear_error();
  /* inputs untouched */
  LT_ASSERT_VALUES(a, 0, 1, 2, 3, 4, 5, 6);
  LT_ASSERT_VALUES(b, 0, 1, 2, 3, 4);
  END;
}
END_TEST

/* ======================================================================== */
/* Autograd bookkeeping                                                     */
/* ======================================================================== */

START_TEST(test_autograd_records) {
  BEGIN;
  lt_tensor *x = T(F64, LT_SHAPE(3), -1, 0.5, 2);
  lt_tensor *c = T(F64, LT_SHAPE(3), 1, 2, 3);
  LT_OK_OR_FAIL(lt_requires_grad_(x, true));
  /* exp saves its output, log its input, neg nothing */
  lt_tensor *e = LT_NN(lt_exp(x));
  ck_assert(e->requires_grad && e->grad_fn && e->grad_fn->op == LT__OP_exp);
  ck_assert_int_eq(e->grad_fn->nsaved, 1);
  ck_assert(e->grad_fn->saved[0]->data == e->data);
  lt_tensor *lg = LT_NN(lt_log(x));
  ck_assert(lg->grad_fn->op == LT__OP_log && lg->grad_fn->saved[0]->data == x->data);
  ck_assert_int_eq(LT_NN(lt_neg(x))->grad_fn->nsaved, 0);
  for (int op = 0; op < LT_UNARY_COUNT; op++) {
    lt_tensor *y = LT_NN(lt_unary((lt_unary_op)op, x));
    ck_assert_msg(y->grad_fn != NULL && strcmp(lt__op_names[y->grad_fn->op], lt_unary_name((lt_unary_op)op)) == 0,
                  "op %s", lt_unary_name((lt_unary_op)op));
  }
  /* mul saves only the other operand of the input that needs a gradient */
  lt_tensor *m = LT_NN(lt_mul(x, c));
  ck_assert(m->grad_fn->op == LT__OP_mul);
  ck_assert_int_eq(m->grad_fn->nsaved, 1);
  ck_assert(m->grad_fn->saved[0]->data == c->data);
  ck_assert_int_eq(LT_NN(lt_add(x, c))->grad_fn->nsaved, 0);
  /* the scalar forms record <op>_scalar */
  ck_assert(LT_NN(lt_pow_scalar(x, 3))->grad_fn->op == LT__OP_pow_scalar);
  ck_assert(LT_NN(lt_add_scalar(x, 3))->grad_fn->op == LT__OP_add_scalar);
  ck_assert_int_eq(LT_NN(lt_add_scalar(x, 3))->grad_fn->nsaved, 0);
  ck_assert(LT_NN(lt_clamp(x, 0, 1))->grad_fn->op == LT__OP_clamp);
  ck_assert(LT_NN(lt_where(LT_NN(lt_gt_scalar(c, 1)), x, c))->grad_fn->op == LT__OP_where);
  ck_assert(LT_NN(lt_masked_fill(x, LT_NN(lt_gt_scalar(c, 1)), 0))->grad_fn->op == LT__OP_masked_fill);
  /* comparisons are not recorded */
  lt_tensor *g = LT_NN(lt_gt(x, c));
  ck_assert(!g->requires_grad && g->grad_fn == NULL);
  ck_assert(LT_NN(lt_eq_scalar(x, 0))->grad_fn == NULL);
  /* no record with grad mode off, or when nothing requires grad */
  bool prev = lt_set_grad_enabled(false);
  ck_assert(LT_NN(lt_exp(x))->grad_fn == NULL);
  lt_set_grad_enabled(prev);
  ck_assert(LT_NN(lt_exp(c))->grad_fn == NULL);
  /* in place on a non-leaf is allowed only without grad; it records nothing */
  lt_tensor *y = LT_NN(lt_mul_scalar(c, 1));
  LT_OK_OR_FAIL(lt_add_(y, x));
  ck_assert(y->grad_fn == NULL && !y->requires_grad);
  END;
}
END_TEST

START_TEST(test_autograd_max_ties) {
  BEGIN;
  /* maximum: gradient to the larger; ties split it in half (PyTorch) */
  lt_tensor *a = T(F64, LT_SHAPE(4), 1, 2, 3, 5);
  lt_tensor *b = T(F64, LT_SHAPE(4), 1, 5, 0, 5);
  LT_OK_OR_FAIL(lt_requires_grad_(a, true));
  LT_OK_OR_FAIL(lt_requires_grad_(b, true));
  lt_tensor *go = T(F64, LT_SHAPE(4), 1, 10, 100, 1000);
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_maximum(a, b)), go, false));
  LT_ASSERT_VALUES(a->grad, 0, 0.5, 0, 100, 500);
  LT_ASSERT_VALUES(b->grad, 0, 0.5, 10, 0, 500);
  lt_zero_grad(a);
  lt_zero_grad(b);
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_minimum(a, b)), go, false));
  LT_ASSERT_VALUES(a->grad, 0, 0.5, 10, 0, 500);
  LT_ASSERT_VALUES(b->grad, 0, 0.5, 0, 100, 500);
  lt_zero_grad(a);
  /* scalar forms: a tie with s halves a's gradient */
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_maximum_scalar(a, 2)), go, false));
  LT_ASSERT_VALUES(a->grad, 0, 0, 5, 100, 1000);
  lt_zero_grad(a);
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_minimum_scalar(a, 3)), go, false));
  LT_ASSERT_VALUES(a->grad, 0, 1, 10, 50, 0);
  lt_zero_grad(a);
  /* broadcast tie: b [1] against a [4] sums the halves back */
  lt_tensor *s = T(F64, LT_SHAPE(1), 2);
  LT_OK_OR_FAIL(lt_requires_grad_(s, true));
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_maximum(a, s)), go, false));
  LT_ASSERT_VALUES(a->grad, 0, 0, 5, 100, 1000);
  LT_ASSERT_VALUES(s->grad, 0, 1 + 5);
  END;
}
END_TEST

START_TEST(test_autograd_special_points) {
  BEGIN;
  /* relu'(0) = 0, abs'(0) = 0, clamp passes at the bounds */
  lt_tensor *x = T(F64, LT_SHAPE(5), -1, 0, 1, -0.5, 0.5);
  LT_OK_OR_FAIL(lt_requires_grad_(x, true));
  lt_tensor *ones = LT_NN(lt_ones(F64, LT_SHAPE(5)));
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_relu(x)), ones, false));
  LT_ASSERT_VALUES(x->grad, 0, 0, 0, 1, 0, 1);
  lt_zero_grad(x);
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_abs(x)), ones, false));
  LT_ASSERT_VALUES(x->grad, 0, -1, 0, 1, -1, 1);
  lt_zero_grad(x);
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_clamp(x, -0.5, 0.5)), ones, false));
  LT_ASSERT_VALUES(x->grad, 0, 0, 1, 0, 1, 1);
  lt_zero_grad(x);
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_clamp(x, 1, -1)), ones, false)); /* lo > hi: constant */
  LT_ASSERT_VALUES(x->grad, 0, 0, 0, 0, 0, 0);
  lt_zero_grad(x);
  /* pow at a zero base: d/da of 0^2 is 0, d/db of 0^b (b >= 0) is 0, not NaN */
  lt_tensor *a = T(F64, LT_SHAPE(3), 0, 0, 2);
  lt_tensor *b = T(F64, LT_SHAPE(3), 2, 0, 3);
  LT_OK_OR_FAIL(lt_requires_grad_(a, true));
  LT_OK_OR_FAIL(lt_requires_grad_(b, true));
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_pow(a, b)), LT_NN(lt_ones(F64, LT_SHAPE(3))), false));
  LT_ASSERT_VALUES(a->grad, 1e-12, 0, 0, 12);
  LT_ASSERT_VALUES(b->grad, 1e-12, 0, 0, 8 * log(2.0));
  lt_zero_grad(a);
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_pow_scalar(a, 0)), LT_NN(lt_ones(F64, LT_SHAPE(3))), false));
  LT_ASSERT_VALUES(a->grad, 0, 0, 0, 0);
  lt_zero_grad(a);
  /* sigmoid/tanh backward from their saved outputs at large |x| stays finite */
  lt_tensor *big = T(F64, LT_SHAPE(2), -800, 800);
  LT_OK_OR_FAIL(lt_requires_grad_(big, true));
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_sigmoid(big)), LT_NN(lt_ones(F64, LT_SHAPE(2))), false));
  LT_ASSERT_VALUES(big->grad, 0, 0, 0);
  lt_zero_grad(big);
  /* an f32 graph gets f32 gradients */
  lt_tensor *f = T(F32, LT_SHAPE(2), 1, 2);
  LT_OK_OR_FAIL(lt_requires_grad_(f, true));
  LT_OK_OR_FAIL(lt_backward(LT_NN(lt_mul(lt_gelu(f), T(F64, LT_SHAPE(2), 1, 1))), LT_NN(lt_ones(F64, LT_SHAPE(2))), false));
  ck_assert_int_eq(f->grad->dtype, F32);
  LT_ASSERT_VALUES(f->grad, 1e-6, 1.0833154705876864, 1.0852318008130302);
  END;
}
END_TEST

int main(void) {
  Suite *s = suite_create("elementwise");
  struct {
    const char *name;
    const TTest *fn;
  } tests[] = {
      {"names", test_names},
      {"unary_values", test_unary_values},
      {"sigmoid_stable", test_sigmoid_stable},
      {"unary_backward_reference", test_unary_backward_reference},
      {"unary_int_dtypes", test_unary_int_dtypes},
      {"binary_values", test_binary_values},
      {"broadcasting", test_broadcasting},
      {"promotion", test_promotion},
      {"int_arith", test_int_arith},
      {"scalar_ops", test_scalar_ops},
      {"inplace_binary", test_inplace_binary},
      {"inplace_alias", test_inplace_alias},
      {"inplace_unary_scalar", test_inplace_unary_scalar},
      {"inplace_errors", test_inplace_errors},
      {"clamp", test_clamp},
      {"where_masked_fill", test_where_masked_fill},
      {"errors", test_errors},
      {"gelu_fast_bits", test_gelu_fast_bits},
      {"autograd_records", test_autograd_records},
      {"autograd_max_ties", test_autograd_max_ties},
      {"autograd_special_points", test_autograd_special_points},
  };
  for (size_t i = 0; i < sizeof tests / sizeof *tests; i++) {
    TCase *tc = tcase_create(tests[i].name);
    tcase_add_test(tc, tests[i].fn);
    suite_add_tcase(s, tc);
  }
  return lt_test_run(s);
}
