/*
 * tensor/matview_internal.h: matrix views (lt__mat: a pointer, rows and
 * columns, a row and a column stride) and the stride rule every product
 * engine takes (tensor/matview.c). Not installed.
 *
 * What it is not: a product (tensor/gemm_internal.h multiplies views) nor a
 * copy (a view the rule refuses is copied by its caller).
 */
#ifndef LT_TENSOR_MATVIEW_INTERNAL_H
#define LT_TENSOR_MATVIEW_INTERNAL_H

#include "tensor/tensor.h"

#include <stdbool.h>
#include <stdint.h>

/* A rows x cols matrix view: element (i, j) is at data + i*rs + j*cs
 * elements. Borrows data. src: the tensor whose memory data points into,
 * when the caller names it (lt__mat_of), so that autocast can reuse a bf16
 * copy of the same memory at the same storage version; NULL otherwise
 * (LT__MAT). bf16: in an f32 product, this operand already holds bf16
 * elements (the autocast copy of an f32 matrix, lt__autocast_input): used
 * as it is under autocast, widened exactly to f32 otherwise. */
typedef struct lt__mat {
  void *data;
  int64_t rows, cols;
  int64_t rs, cs;
  const lt_tensor *src;
  bool bf16;
} lt__mat;

#define LT__MAT(data_, rows_, cols_, rs_, cs_) \
  ((lt__mat){(void *)(data_), (rows_), (cols_), (rs_), (cs_), NULL, false})

/* The transpose of a, as a view of the same elements. */
static inline lt__mat lt__mat_t(lt__mat a) {
  lt__mat t = LT__MAT(a.data, a.cols, a.rows, a.cs, a.rs);
  t.src = a.src;
  t.bf16 = a.bf16;
  return t;
}

/* m marked as reading t's memory (borrowed: t must stay alive and unwritten
 * during the product). Under autocast the bf16 copy of such an operand is
 * kept per thread, keyed by t's storage id, version and the view's geometry
 * (tensor/matmul.c, "the autocast operand cache"): a parameter's (a leaf
 * requiring grad: PyTorch's rule for its weight cache) until its version
 * changes, so one conversion serves the forward and backward products of a
 * step; any other tensor's in a couple of short-lived slots, so that the two
 * backward products of a Linear (g W and g^T x) convert g once. */
static inline lt__mat lt__mat_of(lt__mat m, const lt_tensor *t) {
  m.src = t;
  return m;
}

/* BLIS 0.9.0's rule for the strides of a rows x cols matrix
 * (bli_check_matrix_strides; BLIS aborts when it is broken): positive
 * strides, rows and columns that cannot overlap. A stride along a dim of
 * size 1 is never followed, so it is first given the value BLIS expects
 * (rs = cols*cs for one row, cs = rows*rs for one column). Empty matrices
 * pass. Negative strides are refused (libtensor views never make them). */
bool lt__mat_ok(int64_t rows, int64_t cols, int64_t rs, int64_t cs);

/* The canonical strides of a rows x cols view: a stride along a dim of size
 * 1 (never followed) is given the value BLIS expects, rs = cols*cs for one
 * row, cs = rows*rs for one column, 1 and 1 for one element. */
void lt__mat_canon(int64_t rows, int64_t cols, int64_t *rs, int64_t *cs);

/* Dims (shape, stride) [nd], outermost first, nest into one run of rows when
 * each dim's stride is the next inner dim's stride times that dim's size
 * (dims of size 1 are never followed and ignored). True if they do, with
 * *inner set to the innermost followed dim's stride (left as is when there
 * is none). */
bool lt__mat_nest_rows(int nd, const int64_t *shape, const int64_t *stride, int64_t *inner);

/* x [..., K] (ndim >= 1) as the matrix [N, K] of its rows, N the product of
 * the leading dims: true, with *m filled (data at x->data), when the leading
 * dims nest into one row stride and lt__mat_ok accepts the result; false
 * otherwise (then copy x contiguous). */
bool lt__mat_rows(const lt_tensor *x, lt__mat *m);

#endif /* LT_TENSOR_MATVIEW_INTERNAL_H */
