/*
 * tensor/matmul_internal.h: what tensor/matmul.c shows to tests and benchmarks
 * beyond the public lt_matmul. Not installed.
 *
 * - lt__matmul_ref: the naive reference kernel lt_matmul is tested against;
 * - the batch-parallel switch point, so tests can force either code path and
 *   bench/gemm.c can measure where it should lie.
 */
#ifndef LT_TENSOR_MATMUL_INTERNAL_H
#define LT_TENSOR_MATMUL_INTERNAL_H

#include "tensor/tensor.h"

/* torch.matmul semantics with the same checks and error messages as
 * lt_matmul, computed by the textbook triple loop over the operands' own
 * strides (sums in double, no BLIS, no copies, no threads). Not recorded for
 * autograd. Returns new, or NULL with the error set. Slow: for tests. */
lt_tensor *lt__matmul_ref(const lt_tensor *a, const lt_tensor *b);

/* A batch of products whose single product costs at most this many
 * multiply-adds (m*n*k) runs one product per OpenMP thread (single-threaded
 * BLIS inside); larger products run one after another with BLIS threads.
 * The setter returns the previous value (not thread-safe: tests and
 * benchmarks only). */
int64_t lt__matmul_batch_par_max(void);
int64_t lt__matmul_set_batch_par_max(int64_t macs);

#endif /* LT_TENSOR_MATMUL_INTERNAL_H */
