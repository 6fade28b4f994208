/*
 * nn/positional.c: the fixed sinusoidal position encodings of "Attention Is
 * All You Need" (Vaswani et al. 2017, section 3.5) as a [T, C] table:
 *     PE[t, 2i]   = sin(t / 10000^(2i/C))
 *     PE[t, 2i+1] = cos(t / 10000^(2i/C))
 * computed in double and rounded once to the dtype (the PyTorch tutorial's
 * f32 arithmetic differs from this by a few ulps of the angle). An odd C is
 * allowed: its last column is a sine.
 *
 * What this is not: a learned embedding (see lt_embedding) or RoPE (nn/rope.c).
 * The table carries no gradient; add it to the token embeddings (after
 * scaling them by sqrt(C), as the paper does) with lt_add.
 */
#include "nn/nn.h"

#include "tensor/error_internal.h"
#include "tensor/storage_internal.h"

#include <math.h>

lt_tensor *lt_sinusoidal_table(lt_dtype dtype, int64_t T, int64_t C) {
  if (!lt__valid_dtype(dtype) || !lt_dtype_is_float(dtype)) {
    lt__err(LT_ERR_DTYPE, "sinusoidal_table: dtype %s: only f32 and f64 are supported",
            lt__valid_dtype(dtype) ? lt_dtype_name(dtype) : "(invalid)");
    return NULL;
  }
  if (T < 0 || C < 0) {
    lt__err(LT_ERR_INVALID, "sinusoidal_table: T %lld, C %lld: sizes must be >= 0", (long long)T, (long long)C);
    return NULL;
  }
  lt_tensor *pe = lt_empty(dtype, LT_SHAPE(T, C));
  if (!pe) return NULL;
  for (int64_t j = 0; j < C; j++) {
    const double inv = pow(10000.0, -(double)(j - j % 2) / (double)C);
    for (int64_t t = 0; t < T; t++) {
      const double a = (double)t * inv, v = j % 2 == 0 ? sin(a) : cos(a);
      if (dtype == LT_DTYPE_F32) ((float *)pe->data)[t * C + j] = (float)v;
      else ((double *)pe->data)[t * C + j] = v;
    }
  }
  return pe;
}
