/*
 * tensor/internal.h: transitional umbrella over the internal headers. Not
 * installed. New code must not include it: include the pieces it uses.
 *
 * The internal headers, by what they serve:
 *   tensor/error_internal.h      lt__err, LT_CHECK, LT__D (failures)
 *   tensor/storage_internal.h    dtypes, shapes, views, storage, versions, lt__as_contig
 *   tensor/runtime_internal.h    lt__ensure_init, LT__PARALLEL_MIN, lt__threads_for
 *   tensor/iter_internal.h       lt__iter, the strided N-d iterator
 *   tensor/byteorder_internal.h  little-endian integers for file formats
 *   tensor/blas_internal.h       the BLAS layer (tensor/ only)
 *   tensor/gemm_internal.h       strided products of matrix views (for nn/)
 *   tensor/random_internal.h     Philox block, the fused dropout draw
 *
 * TODO: delete once branches written against the old single header have
 * landed (models/transformer/decode.c is the last includer; its rewrite is in
 * progress).
 */
#ifndef LT_TENSOR_INTERNAL_H
#define LT_TENSOR_INTERNAL_H

#include "tensor/blas_internal.h"
#include "tensor/byteorder_internal.h"
#include "tensor/error_internal.h"
#include "tensor/iter_internal.h"
#include "tensor/random_internal.h"
#include "tensor/runtime_internal.h"
#include "tensor/storage_internal.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#endif /* LT_TENSOR_INTERNAL_H */
