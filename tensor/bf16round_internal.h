/*
 * tensor/bf16round_internal.h: the bf16 rounding kernels (tensor/bf16round.c):
 * f32 to bf16 by lt__bf16_from_f32 (round to nearest even, subnormals kept:
 * the bits of every autocast conversion), vectorised; bf16 widened to f32;
 * a Linear's output gradient as bf16 with its column sums. Not installed.
 *
 * What it is not: autocast's policy and caches (tensor/autocast_internal.h)
 * nor the bf16 product kernels (tensor/bf16dot_internal.h, oneDNN).
 */
#ifndef LT_TENSOR_BF16ROUND_INTERNAL_H
#define LT_TENSOR_BF16ROUND_INTERNAL_H

#include "tensor/matview_internal.h"
#include "tensor/tensor.h"

#include <stdbool.h>
#include <stdint.h>

/* dst[j] = the bf16 rounding of src[j] (lt__bf16_from_f32) for j < n, the
 * rounding every autocast conversion uses, vectorised (AVX-512: 16 a
 * step). For a kernel that writes an operand's bf16 copy while its f32
 * values are in cache (attention's softmax rows write P's). Borrows both. */
void lt__bf16_run(uint16_t *restrict dst, const float *restrict src, int64_t n);

/* x (an f32 view) rounded to bf16 into dst, row-major and dense
 * (dst[i * x.cols + j]), on the calling thread: the values an autocast
 * product would convert x to, for a caller that converts an operand once and
 * keeps the copy (attention's q, k and v, once per call for all heads; a
 * view with bf16 set then reads it). Borrows x and dst (x.rows * x.cols
 * elements). */
void lt__mat_bf16_rows(lt__mat x, uint16_t *dst);

/* How a matrix view is copied: in its own orientation (rows contiguous
 * unless its columns are), `outer` runs of `inner` elements, source run i at
 * i*so, element j of a run at j*si. W and its transpose W^T have the same
 * geometry, so the forward product (x W^T) and the backward one (g W) share
 * one bf16 copy of a weight. */
typedef struct lt__bf16_geom {
  bool colmajor;
  int64_t outer, inner, so, si;
} lt__bf16_geom;

/* x's geometry as copied (its columns contiguous: column-major runs). */
lt__bf16_geom lt__bf16_geom_of(lt__mat x);

/* x (f32 when to is bf16, bf16 when to is f32) converted into buf (g's
 * outer*inner elements of to, dense in g's runs), on this thread
 * (one_thread) or libtensor's. Borrows x and buf. */
void lt__bf16_convert(lt__mat x, lt__bf16_geom g, lt_dtype to, void *buf, bool one_thread);

/* g [N, M] (f32, any strides) rounded to bf16 into dst (N*M, row-major),
 * and, when colsum is not NULL, its column sums (f32 [M], summed in f64
 * row by row: the same bits on any thread count) written in the same pass.
 * Errors: LT_ERR_NOMEM (nothing written to colsum). */
lt_status lt__bf16_colsum(lt__mat g, uint16_t *dst, float *colsum);

#endif /* LT_TENSOR_BF16ROUND_INTERNAL_H */
