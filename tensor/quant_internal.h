/*
 * tensor/quant_internal.h: what the quantized product (tensor/qgemm.c)
 * shares with the formats (tensor/quant.c), and the kernel switch tests
 * use. Not installed.
 */
#ifndef LT_TENSOR_QUANT_INTERNAL_H
#define LT_TENSOR_QUANT_INTERNAL_H

#include "tensor/quant.h"

/* quantize_row_q8_0_ref on nb whole blocks (x holds nb * 32 floats, finite
 * or not: a value that is not finite gives the quant 0). */
void lt__quantize_q8_0(const float *x, lt_block_q8_0 *y, int64_t nb);

/* The kernels of lt_qmatrix_linear. */
typedef enum lt__qdot_kind {
  LT__QDOT_PORTABLE = 0, /* plain C, any CPU */
  LT__QDOT_AVX512 = 1    /* AVX512F/BW/VL + AVX512-VNNI (vpdpbusd) and FMA */
} lt__qdot_kind;

/* The best kernel this CPU runs (checked once per process). */
lt__qdot_kind lt__qdot_best(void);
/* Limits lt_qmatrix_linear to kernels up to `kind` (the CPU's best is still
 * the ceiling) and returns the previous limit: tests force the portable
 * path with LT__QDOT_PORTABLE. Not thread-safe against running products.
 * The environment variable LT_QDOT=portable sets it at start. */
lt__qdot_kind lt__qdot_limit(lt__qdot_kind kind);

#endif /* LT_TENSOR_QUANT_INTERNAL_H */
