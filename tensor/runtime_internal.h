/*
 * tensor/runtime_internal.h: the lazy runtime initialisation
 * (tensor/runtime.c: threads, BLIS), and the threading rules it builds on
 * (tensor/threads_internal.h, included). Not installed. The product
 * engines (tensor/blas.c, tensor/dnnl.c) include only the threading rules:
 * the runtime initialises them, not the other way round.
 */
#ifndef LT_TENSOR_RUNTIME_INTERNAL_H
#define LT_TENSOR_RUNTIME_INTERNAL_H

#include "tensor/threads_internal.h"

/* Lazily initialise the runtime (threads, BLIS). Cheap after the first call. */
lt_status lt__ensure_init(void);

#endif /* LT_TENSOR_RUNTIME_INTERNAL_H */
