/*
 * tensor/threads_internal.h: the threading rules of the kernels (tensor/threads.c):
 * when a kernel goes multi-threaded (LT__PARALLEL_MIN, lt__threads_for) and
 * what a thread keeps is released when it exits (lt__at_thread_exit). Not
 * installed.
 */
#ifndef LT_TENSOR_THREADS_INTERNAL_H
#define LT_TENSOR_THREADS_INTERNAL_H

#include "tensor/tensor.h"

#include <omp.h>
#include <stdint.h>

/* Registers fn to run when the calling thread exits (once per thread and
 * fn; the last registered runs first): what a kernel keeps per thread
 * (scratch buffers, caches, oneDNN streams) is released with the thread,
 * a caller's thread that ran products as much as OpenMP's. Threads that
 * never exit (OpenMP's workers, the main thread) keep them until the
 * process ends. A kernel calls it when it first allocates such a resource.
 * False (nothing registered: the resources are kept, as without it) when
 * the thread already has LT__THREAD_EXIT_MAX functions or no pthread key
 * could be made. */
#define LT__THREAD_EXIT_MAX 8
bool lt__at_thread_exit(void (*fn)(void));

/* Below about 4M multiply-adds (tens of microseconds on one core) a
 * product's threads cost more at their barriers and wake-ups than they
 * save, far more on an oversubscribed machine: the products of BLIS
 * (tensor/gemm.c) and the quantized ones (tensor/qgemm.c) stay on one
 * thread below it. */
#define LT__BLAS_SMALL_MACS 4194304.0 /* 2^22 */

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

#endif /* LT_TENSOR_THREADS_INTERNAL_H */
