/*
 * tensor/blas_internal.h: the BLAS layer (tensor/blas.c, the only file that
 * includes blis.h). Not installed.
 *
 * Only tensor/ calls it: modules above use the tensor-level strided product
 * in tensor/gemm_internal.h, which decides transposes and strides once.
 */
#ifndef LT_TENSOR_BLAS_INTERNAL_H
#define LT_TENSOR_BLAS_INTERNAL_H

#include "tensor/tensor.h"

/* C = alpha * op(A) * op(B) + beta * C with general strides in elements
 * (rs = row stride, cs = column stride); transposition is expressed through
 * the strides. dtype f32 or f64; m, n, k >= 0. */
lt_status lt__blas_gemm(lt_dtype dtype, int64_t m, int64_t n, int64_t k, double alpha,
                        const void *a, int64_t rsa, int64_t csa,
                        const void *b, int64_t rsb, int64_t csb, double beta,
                        void *c, int64_t rsc, int64_t csc);
/* The same on one thread, for callers that parallelise over a batch of
 * small products themselves (inside an OpenMP region). */
lt_status lt__blas_gemm_1t(lt_dtype dtype, int64_t m, int64_t n, int64_t k, double alpha,
                           const void *a, int64_t rsa, int64_t csa,
                           const void *b, int64_t rsb, int64_t csb, double beta,
                           void *c, int64_t rsc, int64_t csc);
void lt__blas_set_threads(int n);

/* The engine for small f32 products (tensor/blas.c, docs/gemm.md "Small
 * products"): 0 BLIS (as before), 1 the measured rule (default), 2 the panel
 * kernel wherever it can run (benchmarks and tests). LT_GEMM_SMALL=0/2 sets
 * it at start. Returns the previous mode (-1: not yet read). */
int lt__blas_set_small(int mode);

/* A B [k, n] (f32) that many products read, packed once for the panel
 * kernel (tensor/blas.c, docs/gemm.md): the fused attention's K^T and V^T
 * tiles, read by every query tile and every head of a GQA group.
 * lt__blas_pack_floats: floats the packed B takes, or 0 when the panel
 * kernel would not take an unpacked product with this B (no AVX-512,
 * LT_GEMM_SMALL=0 or LT_GEMM_SKINNY=0, or k, n outside its rule): then use
 * lt__blas_gemm. lt__blas_pack writes the packed B into dst (that many
 * floats, 64-byte aligned; caller-owned). lt__blas_gemm_packed computes
 * C [m, n] = alpha A [m, k] B + beta C on this thread from a B packed with
 * pn >= n columns (its first n used), every element of C the FMA chain the
 * panel kernel gives the unpacked product. */
int64_t lt__blas_pack_floats(int64_t k, int64_t n);
void lt__blas_pack(int64_t k, int64_t n, const float *b, int64_t rsb, int64_t csb, float *dst);
void lt__blas_gemm_packed(int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t rsa, int64_t csa,
                          const float *bp, int64_t pn, float beta, float *c, int64_t rsc, int64_t csc);

#endif /* LT_TENSOR_BLAS_INTERNAL_H */
