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

#endif /* LT_TENSOR_RANDOM_INTERNAL_H */
