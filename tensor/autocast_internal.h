/*
 * tensor/autocast_internal.h: autocast's internal calls (tensor/autocast.c):
 * whether products of this thread run in bf16, the bf16 copies of f32
 * operands (converted per product, held for several products, cached for
 * parameters, kept for a Linear's backward), the mode handed to OpenMP
 * workers, and the cache's accounting. Not installed; the public switch is
 * lt_set_autocast (tensor/tensor.h).
 *
 * What it is not: the products themselves (tensor/gemm_internal.h, whose
 * lt__mat_gemm is the one autocast hook) nor the rounding loops
 * (tensor/bf16round_internal.h).
 */
#ifndef LT_TENSOR_AUTOCAST_INTERNAL_H
#define LT_TENSOR_AUTOCAST_INTERNAL_H

#include "tensor/matview_internal.h"
#include "tensor/tensor.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* True when an f32 product issued on this thread now runs with bf16
 * operands (autocast on, and a bf16 matmul on this CPU). */
bool lt__autocast_active(void);

/* Under autocast (lt__autocast_active()), an f32 operand that several
 * products read (attention's dO in its backward) converted once:
 * *out views its bf16 copy (bf16 set) in this thread's buffer `slot` (0 or
 * 1), valid until the next call with the same slot on this thread; the
 * products then use it as it is, with the bits they would have got
 * converting it themselves. one_thread as lt__mat_gemm. Errors:
 * LT_ERR_NOMEM. */
lt_status lt__mat_hold_bf16(int slot, lt__mat x, bool one_thread, lt__mat *out);

/* The bf16 copy of t (f32, contiguous, not empty) from the autocast operand
 * cache, as a contiguous array of t's elements: a parameter's copy is made
 * once per storage version and shared with the products that read it
 * (conv2d's forward and input gradient read the weight's, nn/conv.c).
 * *out is borrowed: valid until the next autocast product or conversion on
 * this thread. Errors: LT_ERR_NOMEM. */
lt_status lt__autocast_bf16_of(const lt_tensor *t, const uint16_t **out);

/* The bf16 copy of x (f32, any strides) that an autocast product reads, as
 * a new contiguous bf16 tensor of x's shape: returns new (free with
 * lt_tensor_free), not recorded for autograd. A module that keeps its
 * operand for the backward (Linear) saves this copy instead of x, as
 * PyTorch's autocast does (its linear saves the bf16 input): the backward
 * product then needs no second conversion, and an f32 activation read only
 * by products is freed after the forward. The same copy (a new view of its
 * storage) is handed out again while x's storage version is unchanged, for
 * the last few inputs of the thread (q, k and v projections of one x
 * convert it once); the thread keeps references to those copies until
 * they are displaced or autocast is turned off. Errors: LT_ERR_NOMEM. */
lt_tensor *lt__autocast_input(const lt_tensor *x);

/* A Linear's output gradient g [N, M] (f32, any strides) for an autocast
 * backward: returns new (free with lt_tensor_free; a contiguous bf16 [N, M]
 * tensor, not recorded) holding g's bf16 copy, and, when colsum is not NULL,
 * writes its column sums (the bias gradient, f32 [M], summed in f64 row by
 * row: the same bits on any thread count) in the same pass over g. NULL on
 * error (LT_ERR_NOMEM). lt_sum over the rows is the reference. */
lt_tensor *lt__autocast_bf16_colsum(lt__mat g, float *colsum);

/* Sets this thread's autocast mode without touching its weight cache and
 * returns the previous one. For OpenMP regions that issue products: worker
 * threads never saw the caller's thread-local mode, so the region's body
 * adopts the mode the caller read before the region (lt_autocast_dtype) and
 * restores the worker's own after:
 *   const lt_dtype ac = lt_autocast_dtype();
 *   #pragma omp parallel for ...
 *   for (...) { const lt_dtype prev = lt__autocast_adopt(ac); ...; lt__autocast_adopt(prev); } */
lt_dtype lt__autocast_adopt(lt_dtype mode);

/* The calling thread's autocast weight cache: entries and bytes of bf16
 * copies held (for tests and benchmarks), and conversions made so far. */
void lt__autocast_cache_stats(int *entries, size_t *bytes, int64_t *conversions);

/* For the GEMM dispatch (tensor/gemm.c), operand i (0: a, 1: b) of one
 * product. lt__autocast_operand: x as bf16 (as it is when it holds bf16
 * already; from the operand cache when it names its tensor, lt__mat_of;
 * else converted into this thread's buffer i, valid until the next product
 * on the thread). lt__autocast_widen: x (bf16 elements) widened exactly to
 * f32 in buffer i. *out views the copy in x's orientation. Errors:
 * LT_ERR_NOMEM. */
lt_status lt__autocast_operand(int i, lt__mat x, bool one_thread, lt__mat *out);
lt_status lt__autocast_widen(int i, lt__mat x, bool one_thread, lt__mat *out);

#endif /* LT_TENSOR_AUTOCAST_INTERNAL_H */
