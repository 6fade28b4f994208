/*
 * tensor/quant_internal.h: what the quantized product (tensor/qgemm.c)
 * shares with the formats (tensor/quant.c), and the kernel switch tests
 * use. Not installed.
 */
#ifndef LT_TENSOR_QUANT_INTERNAL_H
#define LT_TENSOR_QUANT_INTERNAL_H

#include "tensor/quant.h"

#include <stdbool.h>

/* quantize_row_q8_0_ref on nb whole blocks (x holds nb * 32 floats, finite
 * or not: a value that is not finite gives the quant 0). */
void lt__quantize_q8_0(const float *x, lt_block_q8_0 *y, int64_t nb);

/* A matrix of N rows of K weights in format f, its bytes uninitialised
 * except the padding past N * row_bytes (tensor/qgemm.c's allocator, which
 * owns the struct; op prefixes messages). NULL with the error set. The
 * constructors of tensor/quant.c write its bytes through
 * lt_qmatrix_data, which points at memory the matrix owns and may write. */
lt_qmatrix *lt__qmatrix_alloc(const char *op, lt_qformat f, int64_t N, int64_t K);

/* bf16 weights times M rows of x on oneDNN (tensor/qgemm_bf16.c): taken by
 * lt_qmatrix_linear from LT__QGEMM_BF16_MIN_ROWS rows on (a prompt, a
 * batch), where oneDNN has a bf16 matmul; x rounded to bf16, f32 sums,
 * y [M, N] = x W^T + bias (bias [N] or NULL). x contiguous [M, K]. */
#define LT__QGEMM_BF16_MIN_ROWS 16
bool lt__qgemm_bf16_wanted(const lt_qmatrix *w, int64_t M);
lt_status lt__qgemm_bf16(const lt_qmatrix *w, const float *x, int64_t M, float *y, const float *bias);
/* Sets the rows from which the oneDNN path is taken and returns the
 * previous value (tests: INT64_MAX keeps every product on the hand loop, 1
 * sends every one to oneDNN). Not thread-safe against running products. */
int64_t lt__qgemm_bf16_min_rows(int64_t m);

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
