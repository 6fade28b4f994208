/*
 * tensor/index_internal.h: what indexing (tensor/index.c) and joining
 * (tensor/join.c) share. Not installed.
 */
#ifndef LT_TENSOR_INDEX_INTERNAL_H
#define LT_TENSOR_INDEX_INTERNAL_H

#include "tensor/tensor.h"

/* The aux of an op whose backward needs only its dim (wrapped). */
typedef struct lt__dim_aux {
  int dim;
} lt__dim_aux;

/* dst[...] = src (same shape, any strides), converting dtype; dst is a
 * stand-in view of the output's slice. Threaded by the shared iterator
 * (tensor/index.c). */
void lt__copy_into(const lt_tensor *dst, const lt_tensor *src);

/* out when its autograd record succeeded (s == LT_OK); otherwise out is freed
 * and NULL returned, the record's error set. */
static inline lt_tensor *lt__recorded(lt_tensor *out, lt_status s) {
  if (s == LT_OK) return out;
  lt_tensor_free(out);
  return NULL;
}

#endif
