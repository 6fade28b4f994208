/*
 * tensor/iter_internal.h: lt__iter, the one strided N-d iterator that every
 * elementwise kernel uses (tensor/iter.c). Not installed.
 */
#ifndef LT_TENSOR_ITER_INTERNAL_H
#define LT_TENSOR_ITER_INTERNAL_H

#include "tensor/tensor.h"

#define LT__ITER_MAX_OPS 4

/* Iterates over a common shape for up to 4 operands. Operand k may have fewer
 * dims or size-1 dims (NumPy broadcasting: they get stride 0). Dims are
 * coalesced where every operand allows, so contiguous operands give one long
 * inner loop. Strides inside are in bytes. */
typedef struct lt__iter {
  int ndim;                                   /* >= 1 after init */
  int64_t shape[LT_MAX_DIMS];                 /* innermost is shape[ndim-1] */
  int nops;
  char *data[LT__ITER_MAX_OPS];
  int64_t stride[LT__ITER_MAX_OPS][LT_MAX_DIMS];
  int64_t numel;
} lt__iter;

/* Inner loop: n elements; ptrs[k] points at operand k's first element and
 * strides[k] is its byte stride along the run. */
typedef void (*lt__loop_fn)(int64_t n, char *const *ptrs, const int64_t *strides, void *ctx);

/* ops[k] must broadcast to (ndim, shape); the caller checked that. */
void lt__iter_init(lt__iter *it, int ndim, const int64_t *shape, int nops,
                   const lt_tensor *const *ops);
/* Calls fn over all elements. With parallel true and enough work, outer
 * iterations are split statically over the OpenMP threads (results must not
 * depend on the split: fn writes disjoint outputs). */
void lt__iter_run(const lt__iter *it, lt__loop_fn fn, void *ctx, bool parallel);

#endif /* LT_TENSOR_ITER_INTERNAL_H */
