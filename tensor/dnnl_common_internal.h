/*
 * tensor/dnnl_common_internal.h: what the oneDNN files share (tensor/dnnl.c):
 * the engine, each thread's stream and buffers, executing a primitive. Not
 * installed; included only by tensor/dnnl.c, tensor/dnnl_matmul.c and
 * tensor/dnnl_conv.c, the library's only files that see dnnl.h.
 */
#ifndef LT_TENSOR_DNNL_COMMON_INTERNAL_H
#define LT_TENSOR_DNNL_COMMON_INTERNAL_H

#include <oneapi/dnnl/dnnl.h>
#include <stddef.h>

/* The CPU engine, made on the first call of either (thread-safe):
 * lt__dnnl_engine_status says whether it was made; lt__dnnl_engine is it
 * (borrowed, process lifetime; only valid when the status is success). */
dnnl_status_t lt__dnnl_engine_status(void);
dnnl_engine_t lt__dnnl_engine(void);

/* This thread's stream: made by lt__dnnl_thread_stream on first use (and
 * released when the thread exits); lt__dnnl_stream returns it (NULL before). */
dnnl_status_t lt__dnnl_thread_stream(void);
dnnl_stream_t lt__dnnl_stream(void);

/* Executes primitive p with n (<= 6) arguments on this thread's stream and
 * waits; memory objects are made around the caller's pointers for the call. */
dnnl_status_t lt__dnnl_exec(dnnl_primitive_t p, int n, const int *arg, const dnnl_memory_desc_t *const *md,
                            void *const *ptr);

/* Per-thread buffers, grown and never shrunk, released with the thread:
 * lt__dnnl_buf(i, bytes) for i < LT__DNNL_NBUF - 1 (0-2 the dense copies of
 * a product's a, b, c; 3-7 the convolution's blocked copies), 64-byte
 * aligned, NULL when out of memory; lt__dnnl_scratch the primitives'
 * scratchpad (the last buffer). Valid until the next call with the same
 * buffer on this thread. */
#define LT__DNNL_NBUF 9
void *lt__dnnl_buf(int i, size_t bytes);
void *lt__dnnl_scratch(size_t bytes);

#endif /* LT_TENSOR_DNNL_COMMON_INTERNAL_H */
