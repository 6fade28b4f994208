/*
 * tensor/reduce_internal.h: what the ops along dims share (tensor/reduce.c,
 * tensor/softmax_ops.c, tensor/cumsum.c). Not installed.
 *
 * - bf16 in f32, as PyTorch: the input is widened (exactly) into an f32 copy,
 *   the f32 kernels run, and the result is rounded back once
 *   (lt__reduce_widen, lt__reduce_narrow; defined in reduce.c);
 * - a contiguous tensor seen as [outer, n, inner] around one dim;
 * - a backward's one gradient slot set, with the pending error otherwise.
 */
#ifndef LT_TENSOR_REDUCE_INTERNAL_H
#define LT_TENSOR_REDUCE_INTERNAL_H

#include "tensor/tensor.h"

/* The tensor the f32 kernels see: x itself unless it is bf16, else its f32
 * copy in *tmp (new, made with grad mode off; free it after). NULL with the
 * error set on failure. */
const lt_tensor *lt__reduce_widen(const lt_tensor *x, lt_tensor **tmp);
/* y (an f32 result, taken) rounded into dt (bf16), or y itself when it is
 * already dt or NULL. NULL with the error set on failure. */
lt_tensor *lt__reduce_narrow(lt_tensor *y, lt_dtype dt);

/* A contiguous tensor seen as [outer, n, inner] around the dim d. */
typedef struct lt__dim_geom {
  int64_t outer, n, inner;
} lt__dim_geom;

static inline lt__dim_geom lt__dim_geom_of(const lt_tensor *x, int d) {
  lt__dim_geom g = {1, 1, 1};
  for (int i = 0; i < x->ndim; i++) {
    if (i < d) g.outer *= x->shape[i];
    else if (i == d) g.n = x->shape[i];
    else g.inner *= x->shape[i];
  }
  return g;
}

/* gin[0] = g; LT_OK, or (g NULL) the pending status, LT_ERR_NOMEM if none. */
static inline lt_status lt__set_gin(lt_tensor **gin, lt_tensor *g) {
  gin[0] = g;
  return g ? LT_OK : (lt_last_status() != LT_OK ? lt_last_status() : LT_ERR_NOMEM);
}

#endif
