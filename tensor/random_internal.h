/*
 * tensor/random_internal.h: what tensor/random.c shares beyond tensor.h.
 * Not installed.
 */
#ifndef LT_TENSOR_RANDOM_INTERNAL_H
#define LT_TENSOR_RANDOM_INTERNAL_H

#include "tensor/tensor.h"

#include <stdint.h>

/* One Philox-4x32-10 block: out = philox(ctr, key) (docs/random.md); for the
 * known-answer tests in tests/test_random.c. */
void lt__philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* For nn/dropout.c: keep = bernoulli(q) over n elements
 * drawn from g (advancing it as lt_bernoulli would), and
 * y = x * (keep ? s : 0) in the same pass (x, y, keep contiguous; dt f32 or
 * f64). */
void lt__dropout_draw(lt_generator *g, lt_dtype dt, int64_t n, double q, double s, const void *x, void *y,
                      uint8_t *keep);

/* A bernoulli(q) draw of n elements whose elements are computed later, any
 * of them at any time, instead of being stored (the fused attention's
 * dropout mask, regenerated tile by tile in forward and backward). */
typedef struct lt__bern_draw {
  uint64_t seed, offset; /* the generator's key and first Philox block */
  uint32_t lim, any;     /* keep iff (word <= lim) & any, as lt_bernoulli */
  int version;           /* the batched Philox version picked when deferred (tensor/random.c) */
} lt__bern_draw;

/* Fills *d with where lt_bernoulli(g, ., [n], q) would draw and advances g
 * exactly as that draw would, drawing nothing. q in [0, 1]. */
void lt__bernoulli_defer(lt_generator *g, int64_t n, double q, lt__bern_draw *d);

/* keep[r * ldk + c] = element i0 + r * ld + c of the deferred draw d (the
 * value lt_bernoulli would have stored there), for r < rows, c < cols: the
 * same bits whatever the tiling and the threads. */
void lt__bernoulli_tile(const lt__bern_draw *d, int64_t i0, int64_t ld, int64_t rows, int64_t cols,
                        uint8_t *keep, int64_t ldk);

#endif /* LT_TENSOR_RANDOM_INTERNAL_H */
