/*
 * tensor/runtime_internal.h: the lazy runtime initialisation
 * (tensor/runtime.c: threads, BLIS), and the threading rules it builds on
 * (tensor/threads_internal.h, included). Not installed. The engines
 * (tensor/blis.c, tensor/gemm_small.c, the tensor/dnnl*.c files) never
 * include it: the runtime initialises BLIS (lt__blis_init) and the GEMM
 * dispatch (tensor/gemm.c) calls lt__ensure_init before any product, so
 * initialisation runs one way, runtime -> engines.
 */
#ifndef LT_TENSOR_RUNTIME_INTERNAL_H
#define LT_TENSOR_RUNTIME_INTERNAL_H

#include "tensor/threads_internal.h"

/* Lazily initialise the runtime (threads, BLIS). Cheap after the first call. */
lt_status lt__ensure_init(void);

#endif /* LT_TENSOR_RUNTIME_INTERNAL_H */
