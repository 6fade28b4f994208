/*
 * tensor/runtime_internal.h: threads and initialisation for kernels. Not
 * installed.
 *
 * One rule for when a kernel goes multi-threaded (LT__PARALLEL_MIN,
 * lt__threads_for) and the lazy runtime initialisation (tensor/runtime.c).
 */
#ifndef LT_TENSOR_RUNTIME_INTERNAL_H
#define LT_TENSOR_RUNTIME_INTERNAL_H

#include "tensor/tensor.h"

#include <omp.h>
#include <stdint.h>

/* Lazily initialise the runtime (threads, BLIS). Cheap after the first call. */
lt_status lt__ensure_init(void);

/* Minimum elements before a kernel goes multi-threaded. */
#define LT__PARALLEL_MIN 32768

/* Threads for a kernel that touches `work` elements split into `units`
 * independent parts (rows, say): all OpenMP threads from LT__PARALLEL_MIN
 * elements on, else 1; never more than units (and at least 1). */
static inline int lt__threads_for(int64_t work, int64_t units) {
  int nt = work >= LT__PARALLEL_MIN ? omp_get_max_threads() : 1;
  if (nt > units) nt = (int)(units > 0 ? units : 1);
  return nt;
}

#endif /* LT_TENSOR_RUNTIME_INTERNAL_H */
