/*
 * tensor/compare.c: lt_allclose and lt_equal, whole-tensor yes/no comparisons
 * (the elementwise, tensor-valued comparisons are lt_eq, lt_lt, ... in
 * tensor/elementwise.c).
 *
 * allclose mirrors torch.allclose / torch.isclose: a and b broadcast; an element
 * pair is close when a == b (so inf == inf of the same sign), or both are NaN and
 * equal_nan, or |a - b| is finite and <= atol + rtol * |b|. It is asymmetric in
 * a and b, like PyTorch's. Values are compared in double (exact for every dtype
 * but i64 beyond 2^53, where the tolerance makes that moot).
 *
 * equal is exact: same shape (no broadcasting), every value equal as a number
 * whatever the dtypes (i64 3 equals f32 3.0; integers are compared as integers,
 * an integer and a float only when the float is exactly that integer). NaN is
 * never equal to anything, as in torch.equal.
 *
 * Both return false, with no error, when the shapes do not match; they set an
 * error (and return false) only for NULL arguments or bad tolerances.
 * What this is not: a differentiable op (neither records for autograd).
 */
#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"
#include "tensor/iter_internal.h"

#include <math.h>

/* NumPy broadcast of two shapes, without touching the error state. */
static bool broadcast_shape(const lt_tensor *a, const lt_tensor *b, int *ndim, int64_t *shape) {
  int n = a->ndim > b->ndim ? a->ndim : b->ndim;
  for (int i = 0; i < n; i++) {
    int ia = i - (n - a->ndim), ib = i - (n - b->ndim);
    int64_t sa = ia >= 0 ? a->shape[ia] : 1, sb = ib >= 0 ? b->shape[ib] : 1;
    if (sa != sb && sa != 1 && sb != 1) return false;
    shape[i] = sa == 1 ? sb : sa;
  }
  *ndim = n;
  return true;
}

/* ---- allclose ---------------------------------------------------------- */

typedef struct close_ctx {
  double rtol, atol;
  bool equal_nan;
  lt_dtype da, db;
  bool ok;
} close_ctx;

static inline bool close1(double x, double y, double rtol, double atol, bool equal_nan) {
  if (x == y) return true;
  if (isnan(x) || isnan(y)) return equal_nan && isnan(x) && isnan(y);
  double diff = fabs(x - y);
  return isfinite(diff) && diff <= atol + rtol * fabs(y);
}

/* Typed inner loops for the common same-dtype float cases; a generic one loads
 * through lt__load. Each stops at the first run that found a mismatch. */
#define CLOSE_LOOP(name, TA, TB, LOADA, LOADB)                                              \
  static void name(int64_t n, char *const *ptrs, const int64_t *strides, void *vctx) {     \
    close_ctx *c = vctx;                                                                    \
    if (!c->ok) return;                                                                     \
    const char *pa = ptrs[0], *pb = ptrs[1];                                                \
    bool ok = true;                                                                         \
    for (int64_t i = 0; i < n; i++)                                                         \
      ok &= close1(LOADA(pa + i * strides[0]), LOADB(pb + i * strides[1]), c->rtol, c->atol, \
                   c->equal_nan);                                                           \
    c->ok = ok;                                                                             \
  }
#define LOAD_F32(p) ((double)*(const float *)(p))
#define LOAD_F64(p) (*(const double *)(p))
#define LOAD_A(p) lt__load((p), c->da)
#define LOAD_B(p) lt__load((p), c->db)
CLOSE_LOOP(close_f32, float, float, LOAD_F32, LOAD_F32)
CLOSE_LOOP(close_f64, double, double, LOAD_F64, LOAD_F64)
CLOSE_LOOP(close_any, void, void, LOAD_A, LOAD_B)

bool lt_allclose(const lt_tensor *a, const lt_tensor *b, double rtol, double atol, bool equal_nan) {
  if (!a) return lt__err_null("allclose", "a"), false;
  if (!b) return lt__err_null("allclose", "b"), false;
  if (!(rtol >= 0) || !(atol >= 0)) {
    lt__err(LT_ERR_INVALID, "allclose: a is %s, b is %s: rtol %g and atol %g must be >= 0",
            LT__D(a), LT__D(b), rtol, atol);
    return false;
  }
  int ndim;
  int64_t shape[LT_MAX_DIMS];
  if (!broadcast_shape(a, b, &ndim, shape)) return false;
  close_ctx c = {rtol, atol, equal_nan, a->dtype, b->dtype, true};
  lt__loop_fn fn = close_any;
  if (a->dtype == LT_DTYPE_F32 && b->dtype == LT_DTYPE_F32) fn = close_f32;
  if (a->dtype == LT_DTYPE_F64 && b->dtype == LT_DTYPE_F64) fn = close_f64;
  lt__iter it;
  lt__iter_init(&it, ndim, shape, 2, (const lt_tensor *[]){a, b});
  lt__iter_run(&it, fn, &c, false);
  return c.ok;
}

/* ---- equal ------------------------------------------------------------- */

static inline int64_t load_int(const char *p, lt_dtype d) {
  switch (d) {
    case LT_DTYPE_I32: return *(const int32_t *)p;
    case LT_DTYPE_I64: return *(const int64_t *)p;
    default: return *(const uint8_t *)p != 0;
  }
}

/* Is the double f exactly the integer i? */
static inline bool int_equals_float(int64_t i, double f) {
  if (!(f >= -0x1p63 && f < 0x1p63)) return false; /* also NaN */
  int64_t fi = (int64_t)f;
  return (double)fi == f && fi == i;
}

typedef struct equal_ctx {
  lt_dtype da, db;
  bool ok;
} equal_ctx;

#define EQUAL_LOOP(name, EXPR)                                                          \
  static void name(int64_t n, char *const *ptrs, const int64_t *strides, void *vctx) { \
    equal_ctx *c = vctx;                                                                \
    if (!c->ok) return;                                                                 \
    const char *pa = ptrs[0], *pb = ptrs[1];                                            \
    bool ok = true;                                                                     \
    for (int64_t i = 0; i < n; i++) {                                                   \
      const char *xa = pa + i * strides[0], *xb = pb + i * strides[1];                  \
      ok &= (EXPR);                                                                     \
    }                                                                                   \
    c->ok = ok;                                                                         \
  }
EQUAL_LOOP(equal_f32, *(const float *)xa == *(const float *)xb)
EQUAL_LOOP(equal_f64, *(const double *)xa == *(const double *)xb)
EQUAL_LOOP(equal_floats, lt__load(xa, c->da) == lt__load(xb, c->db))
EQUAL_LOOP(equal_ints, load_int(xa, c->da) == load_int(xb, c->db))
EQUAL_LOOP(equal_int_float, int_equals_float(load_int(xa, c->da), lt__load(xb, c->db)))

bool lt_equal(const lt_tensor *a, const lt_tensor *b) {
  if (!a) return lt__err_null("equal", "a"), false;
  if (!b) return lt__err_null("equal", "b"), false;
  if (!lt__same_shape(a, b)) return false;
  bool fa = lt_dtype_is_float(a->dtype), fb = lt_dtype_is_float(b->dtype);
  if (fa && !fb) { /* put the integer operand first */
    const lt_tensor *t = a;
    a = b;
    b = t;
    fa = false;
    fb = true;
  }
  equal_ctx c = {a->dtype, b->dtype, true};
  lt__loop_fn fn;
  if (fa && fb) {
    fn = a->dtype != b->dtype ? equal_floats : a->dtype == LT_DTYPE_F32 ? equal_f32 : equal_f64;
  } else if (!fa && !fb) {
    fn = equal_ints;
  } else {
    fn = equal_int_float;
  }
  lt__iter it;
  lt__iter_init(&it, a->ndim, a->shape, 2, (const lt_tensor *[]){a, b});
  lt__iter_run(&it, fn, &c, false);
  return c.ok;
}
