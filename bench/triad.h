/*
 * bench/triad.h: the memory bandwidth a benchmark sees, in one place for the
 * benchmarks that print a bandwidth bound (bench_train_step --bound,
 * bench_gguf): a STREAM-style triad a[i] = b[i] + s * c[i] over three arrays
 * of 2^26 floats (256 MiB each, far past the caches) on `threads` OpenMP
 * threads, 12 bytes per element (write-allocate traffic not counted, as
 * STREAM does), best of 5 after a first touch. Returns GB/s, or NAN when
 * the arrays cannot be allocated.
 *
 * What this is not: a library function (benchmarks only; header-only).
 */
#ifndef LT_BENCH_TRIAD_H
#define LT_BENCH_TRIAD_H

#include "libtensor.h"

#include <math.h>
#include <stdlib.h>

static inline double lt_bench_triad_gbs(int threads) {
  const size_t n = (size_t)1 << 26;
  float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
  double best = INFINITY;
  if (!a || !b || !c) best = NAN;
  for (int r = 0; r < 6 && !isnan(best); r++) {
    const double t0 = lt_monotonic_seconds();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = r == 0 ? 0.0f : b[i] + 0.5f * c[i];
    if (r == 0) {
#pragma omp parallel for num_threads(threads) schedule(static)
      for (size_t i = 0; i < n; i++) b[i] = c[i] = 1.0f;
      continue;
    }
    const double dt = lt_monotonic_seconds() - t0;
    if (dt < best) best = dt;
  }
  if (a && !isnan(best)) {
    volatile float sink = a[n / 2];
    (void)sink;
  }
  free(a);
  free(b);
  free(c);
  return isnan(best) ? NAN : 12.0 * (double)n / best * 1e-9;
}

#endif /* LT_BENCH_TRIAD_H */
