/*
 * tensor/dnnl_internal.h: the bf16 GEMM engine on oneDNN (tensor/dnnl_matmul.c)
 * and what oneDNN gives this CPU in bf16 (tensor/dnnl.c). Not installed.
 *
 * Only tensor/ calls it: the GEMM dispatch (tensor/gemm.c) sends bf16 and
 * autocast products here, and BLIS keeps f32 and f64. The convolutions are
 * tensor/dnnl_conv_internal.h's.
 */
#ifndef LT_TENSOR_DNNL_INTERNAL_H
#define LT_TENSOR_DNNL_INTERNAL_H

#include "tensor/tensor.h"

#include <stdbool.h>
#include <stdint.h>

/* C = alpha * A B + beta * C (+ bias in every row) with A [m, k] and B
 * [k, n] in bf16 and C [m, n] in f32, accumulated in f32; bias: NULL, or
 * f32 [n] (contiguous) added to the f32 accumulator by oneDNN (alpha must
 * then be 1), so a Linear's output is written once, each with its own row and column
 * strides in elements (a transposed view is a pair of strides, never a
 * copy). The strides must pass lt__mat_ok and C must not overlap A or B.
 * one_thread: the caller is inside an OpenMP region (oneDNN then runs on
 * this thread only). Thread-safe: executions on several threads at once
 * share cached primitives, each with its own scratchpad. Errors:
 * LT_ERR_BACKEND (oneDNN refused the product: the message says why),
 * LT_ERR_NOMEM. */
lt_status lt__dnnl_gemm_bf16(bool one_thread, int64_t m, int64_t n, int64_t k, float alpha,
                             const uint16_t *a, int64_t rsa, int64_t csa, const uint16_t *b, int64_t rsb,
                             int64_t csb, float beta, float *c, int64_t rsc, int64_t csc, const float *bias);

/* How bf16 products run on this CPU, for lt_runtime_get_info: "native
 * (avx512_core_bf16)" / "native (amx)" when oneDNN's dispatcher reaches an ISA
 * with bf16 instructions, else "fallback (oneDNN emulates bf16 with f32 FMAs
 * on avx512_core)" or similar. Static string. */
const char *lt__dnnl_bf16_path(void);
/* True when bf16 products run natively (AVX512_BF16 or AMX). */
bool lt__dnnl_bf16_native(void);
/* True when oneDNN has a bf16 matmul for this CPU at all (native or
 * emulated on AVX-512); false: callers widen to f32 and use BLIS. */
bool lt__dnnl_bf16_available(void);

/* Primitives in the cache (for tests and benchmarks). */
int lt__dnnl_cached_primitives(void);

#endif /* LT_TENSOR_DNNL_INTERNAL_H */
