/*
 * tensor/matview.c: the stride rule of matrix views (tensor/matview_internal.h):
 * which row and column strides a product takes (BLIS 0.9's rule, which the
 * other engines accept too), the canonical strides of size-1 dims, and the
 * nesting of leading dims into one run of rows.
 *
 * What this is not: a product (tensor/gemm.c) nor a copy: a view the rule
 * refuses is copied by its caller (lt_matmul, lt__autocast_input).
 */
#include "tensor/matview_internal.h"

#include "tensor/error_internal.h"

/* The stride of a size-1 dim is never followed, so it may be anything in a
 * view (or a placeholder for a promoted 1-d operand): give it the value BLIS
 * expects of a row vector (rs = n*cs) or a column vector (cs = m*rs). */
void lt__mat_canon(int64_t m, int64_t n, int64_t *rs, int64_t *cs) {
  if (m == 1 && n == 1) {
    *rs = 1;
    *cs = 1;
  } else if (m == 1) {
    *rs = n * *cs;
  } else if (n == 1) {
    *cs = m * *rs;
  }
}

/* Dims (shape, stride), outermost first, nest into one run of rows when each
 * dim's stride is the next inner dim's stride times that dim's size (dims of
 * size 1 are never followed and ignored). True if they do, with *inner set to
 * the innermost followed dim's stride (left as is when there is none). */
bool lt__mat_nest_rows(int nd, const int64_t *shape, const int64_t *stride, int64_t *inner) {
  bool have = false;
  int64_t span = 0; /* the stride the next outer dim needs */
  for (int d = nd - 1; d >= 0; d--) {
    if (shape[d] == 1) continue;
    if (!have) {
      have = true;
      *inner = stride[d];
    } else if (stride[d] != span) {
      return false;
    }
    span = stride[d] * shape[d];
  }
  return true;
}

bool lt__mat_ok(int64_t m, int64_t n, int64_t rs, int64_t cs) {
  if (m == 0 || n == 0) return true;
  lt__mat_canon(m, n, &rs, &cs);
  if (rs <= 0 || cs <= 0) return false;
  if (rs != 1 && cs != 1) {
    if (rs == cs) return m == 1 || n == 1;
    if (rs < cs) return m * rs <= cs;
    return n * cs <= rs;
  }
  if (rs == 1 && cs == 1) return m == 1 || n == 1;
  if (rs == 1) return cs >= m;
  return rs >= n;
}

bool lt__mat_rows(const lt_tensor *x, lt__mat *m) {
  LT_CHECK(x->ndim >= 1);
  const int64_t K = x->shape[x->ndim - 1], cs = x->stride[x->ndim - 1];
  int64_t N = 1, inner = K * cs;
  for (int d = 0; d < x->ndim - 1; d++) N *= x->shape[d];
  if (!lt__mat_nest_rows(x->ndim - 1, x->shape, x->stride, &inner)) return false;
  *m = LT__MAT(x->data, N, K, inner, cs);
  return lt__mat_ok(N, K, inner, cs);
}
